"""Network partitions between the nodes of a cluster: three combined nodes, each in a network namespace of its own
with a veth pair into a bridge (in a namespace of its own too); the test reaches them through one more veth pair
from its own namespace. A partition is a node's link taken down (this kernel has no netem). Runs against fjord, or
Apache Kafka with E2E_BROKER=kafka (same KRaft properties).

An isolated active controller cannot commit anything; the majority elects a new one and goes on; after healing
there is one history, and the isolated node's broker, fenced meanwhile, leads its partitions again.
"""

import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness import REPO_ROOT, Cluster, Network, metadata_quorum_status

NODES = 3
SESSION_MS = 6000
VENV_PYTHON = sys.executable


@pytest.fixture(scope="module")
def net():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    n = Network(NODES)
    yield n
    n.close()


@pytest.fixture(scope="module")
def cluster(net, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("partition"), controllers=NODES,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000"},
                hosts=[net.address(i) for i in range(1, NODES + 1)],
                prefixes=[net.prefix(i) for i in range(1, NODES + 1)])
    c.start()
    yield c
    c.kill9()


def create(bootstrap: str, name: str, partitions: int = 3) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    for _, f in a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).items():
        f.result(60)


def view(bootstrap: str):
    """(topic names, live broker ids, topic → partition → leader) as `bootstrap` tells it."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    topics = {t: {p.id: p.leader for p in m.partitions.values()} for t, m in md.topics.items()
              if not t.startswith("__")}
    return sorted(topics), sorted(md.brokers), topics


def leader_of_quorum(bootstrap: str, other_than: int = None, deadline_s: float = 60) -> int:
    end = time.monotonic() + deadline_s
    while True:
        try:
            leader = int(metadata_quorum_status(bootstrap)["LeaderId"])
            if leader >= 0 and leader != other_than:
                return leader
        except (RuntimeError, KeyError, ValueError, subprocess.TimeoutExpired):
            pass
        assert time.monotonic() < end, f"no new active controller (other than {other_than})"
        time.sleep(0.5)


# A client inside the isolated node's namespace: it reaches that node, and nothing else.
ISOLATED_CREATE = """
import json, sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
try:
    for _, f in a.create_topics([NewTopic("isolated", num_partitions=1, replication_factor=1)],
                                operation_timeout=10, request_timeout=15).items():
        f.result(40)
    print(json.dumps({"created": True}))
except Exception as e:
    print(json.dumps({"created": False, "error": str(e)}))
"""


def test_an_isolated_active_controller_is_deposed_and_one_history_remains(net, cluster):
    everyone = cluster.bootstrap
    create(everyone, "before")
    old = leader_of_quorum(everyone)
    victim = cluster.node(old)
    majority = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != old)

    net.isolate(old)
    try:
        # The majority elects another controller and goes on changing metadata; the isolated node's broker is fenced.
        new = leader_of_quorum(majority, other_than=old)
        create(majority, "during")
        end = time.monotonic() + SESSION_MS / 1000 + 30
        while True:
            _, brokers, topics = view(majority)
            if old not in brokers and all(l != old for l in topics["before"].values()):
                break
            assert time.monotonic() < end, f"isolated broker {old} not fenced: {brokers} {topics}"
            time.sleep(0.3)
        # The isolated node cannot commit: a change sent to it fails.
        proc = subprocess.run(["ip", "netns", "exec", net.nodes[old - 1], VENV_PYTHON, "-c", ISOLATED_CREATE,
                               victim.bootstrap], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
        outcome = json.loads(proc.stdout.strip().splitlines()[-1])
        assert not outcome["created"], outcome
    finally:
        net.heal(old)

    # One history: every node agrees on the topics (never the one the isolated node was asked for), the controller
    # the majority elected (or a later one) leads, and the isolated broker is back leading its partitions.
    ids = list(range(1, NODES + 1))
    end = time.monotonic() + 90
    while True:
        views = [view(n.bootstrap) for n in cluster.nodes]
        names = [v[0] for v in views]
        settled = all(v[1] == ids for v in views) and all(
            all(l >= 0 for l in t.values()) for v in views for t in v[2].values())
        if settled and all(n == ["before", "during"] for n in names) and all(v[2] == views[0][2] for v in views):
            break
        assert time.monotonic() < end, f"no single history after healing: {views}"
        time.sleep(0.5)
    assert old in set(views[0][2]["before"].values()), views[0]
    assert leader_of_quorum(everyone) in ids
    assert new in ids
