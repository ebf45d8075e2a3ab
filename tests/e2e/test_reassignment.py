"""Partition reassignment with Kafka's own `kafka-reassign-partitions` (AlterPartitionReassignments,
ListPartitionReassignments) on one controller and three brokers: replicas move to another broker, catch up, join
the ISR and the removed ones go with their logs, a plan changing the replication factor is refused when the tool
is told to disallow that (KIP-860), a throttled one copies at its rate (KIP-73); a reassignment that cannot finish is listed and cancelled; new
partitions of a replicated topic get as many replicas. Runs against fjord, or Apache Kafka with E2E_BROKER=kafka
(same KRaft properties).
"""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from harness import Cluster, kafka_tools_java, wait_for

SESSION_MS = 6000
RECORDS = 2000
THROTTLED_RECORDS = 4000
THROTTLE_BYTES_PER_S = 100_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("reassignment"), controllers=1, brokers=3,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000",
                       "replica.lag.time.max.ms": "2000", "auto.leader.rebalance.enable": "false"})
    c.start()
    yield c
    c.kill9()


def reassign(bootstrap: str, *args: str) -> tuple:
    """`kafka-reassign-partitions` (Kafka's own tool): exit code and output."""
    proc = subprocess.run([*kafka_tools_java(),
                           "org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server",
                           bootstrap, *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def describe(bootstrap: str, topic: str) -> dict:
    """Partition → (leader, replicas in order, sorted isr)."""
    t = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return {} if t.error is not None else {p.id: (p.leader, list(p.replicas), sorted(p.isrs))
                                          for p in t.partitions.values()}


def plan(path: Path, moves: dict) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for (t, p), r in moves.items()]}))
    return path


def log_bytes(node, topic: str, partition: int) -> bytes:
    d = Path(node.data_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def test_replicas_move_catch_up_and_the_removed_ones_go(cluster, tmp_path):
    a, b, c = (n.node_id for n in cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _, f in admin.create_topics([NewTopic("moving", num_partitions=2, replica_assignment=[[a, b], [b, a]],
                                              config={"min.insync.replicas": "2"})]).items():
        f.result(30)
    wait_for(lambda: all(isr == sorted(r) for _, r, isr in describe(cluster.bootstrap, "moving").values()),
             "in sync", 60)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        p.produce("moving", value=str(i), partition=i % 2)
    assert p.flush(60) == 0

    # --generate proposes replicas on the brokers named only.
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "moving"}]}))
    rc, out = reassign(cluster.bootstrap, "--generate", "--topics-to-move-json-file", str(topics),
                       "--broker-list", f"{b},{c}")
    assert rc == 0, out
    proposed = json.loads(out.split("Proposed partition reassignment configuration")[1].strip().splitlines()[0])
    assert {r for part in proposed["partitions"] for r in part["replicas"]} <= {b, c}, proposed

    # --disallow-replication-factor-change (KIP-860): a plan changing a partition's replica count is refused,
    # partition by partition, and nothing moves.
    grow = {("moving", 0): [a, b, c], ("moving", 1): [b]}
    rc, out = reassign(cluster.bootstrap, "--execute", "--disallow-replication-factor-change",
                       "--reassignment-json-file", str(plan(tmp_path / "grow.json", grow)))
    assert rc != 0, out
    assert "moving-0: The replication factor is changed from 2 to 3" in out, out
    assert "moving-1: The replication factor is changed from 2 to 1" in out, out
    assert {i: r for i, (_, r, _) in describe(cluster.bootstrap, "moving").items()} == {0: [a, b], 1: [b, a]}

    # --execute: broker a leaves both partitions (it leads partition 0), broker c joins them; the replica count
    # stays, so the same option lets it through.
    target = {("moving", 0): [c, b], ("moving", 1): [b, c]}
    rc, out = reassign(cluster.bootstrap, "--execute", "--disallow-replication-factor-change",
                       "--reassignment-json-file", str(plan(tmp_path / "move.json", target)))
    assert rc == 0, out
    assert "Successfully started partition reassignment" in out, out
    # --verify until done.
    verify = lambda: reassign(cluster.bootstrap, "--verify", "--reassignment-json-file", str(tmp_path / "move.json"))
    wait_for(lambda: (lambda o: o[0] == 0 and all(f"Reassignment of partition moving-{i} is completed" in o[1]
                                                  for i in (0, 1)))(verify()),
             lambda: f"reassignment not completed: {verify()[1]}; {describe(cluster.bootstrap, 'moving')}", 60)
    d = describe(cluster.bootstrap, "moving")
    for (_, i), replicas in target.items():
        leader, now, isr = d[i]
        assert now == replicas and isr == sorted(replicas) and leader in replicas, d
    # The new replicas hold the same bytes; the removed broker's logs are gone.
    for i in (0, 1):
        wait_for(lambda: log_bytes(cluster.node(b), "moving", i) == log_bytes(cluster.node(c), "moving", i),
                 f"moving-{i}: the new replica differs", 30)
        wait_for(lambda: not (Path(cluster.node(a).data_dir) / f"moving-{i}").exists(),
                 f"moving-{i}: the removed replica's log stayed", 30)
    got = read_all(cluster.bootstrap, "moving")
    assert sorted(got) == list(range(RECORDS))

    # New partitions of a replicated topic get as many replicas.
    for _, f in admin.create_partitions([NewPartitions("moving", 3)]).items():
        f.result(30)
    wait_for(lambda: len(describe(cluster.bootstrap, "moving").get(2, (0, [], []))[1]) == 2, "partition 2 has 2 replicas", 30)


def test_a_stuck_reassignment_is_listed_and_cancelled(cluster, tmp_path):
    a, b, c = (n.node_id for n in cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _, f in admin.create_topics([NewTopic("stuck", num_partitions=1, replica_assignment=[[a, b]])]).items():
        f.result(30)
    wait_for(lambda: describe(cluster.bootstrap, "stuck").get(0, (0, [], []))[2] == sorted([a, b]), "in sync", 60)
    # A replica added on a stopped broker never catches up.
    cluster.node(c).kill9()
    try:
        move = plan(tmp_path / "stuck.json", {("stuck", 0): [a, b, c]})
        rc, out = reassign(cluster.bootstrap, "--execute", "--reassignment-json-file", str(move))
        assert rc == 0, out
        rc, out = reassign(cluster.bootstrap, "--list")
        assert rc == 0 and re.search(r"stuck-0: replicas: .*adding: " + str(c), out), out
        rc, out = reassign(cluster.bootstrap, "--verify", "--reassignment-json-file", str(move))
        assert "Reassignment of partition stuck-0 is still in progress" in out, out
        # The tool then clears throttles on every broker, the stopped one too, which times out (as against any
        # broker): the exit code says nothing about the cancellation.
        quick = tmp_path / "admin.properties"
        quick.write_text("default.api.timeout.ms=10000\nrequest.timeout.ms=5000\n")
        rc, out = reassign(cluster.bootstrap, "--cancel", "--reassignment-json-file", str(move), "--command-config",
                           str(quick))
        assert "Successfully cancelled partition reassignment for: stuck-0" in out, out
        leader, replicas, isr = describe(cluster.bootstrap, "stuck")[0]
        assert replicas == [a, b] and isr == sorted([a, b]), (leader, replicas, isr)
        rc, out = reassign(cluster.bootstrap, "--list")
        assert rc == 0 and "stuck-0" not in out, out
    finally:
        cluster.node(c).start(timeout_s=120)


def log_size(node, topic: str, partition: int) -> int:
    d = Path(node.data_dir) / f"{topic}-{partition}"
    return sum(p.stat().st_size for p in d.glob("*.log")) if d.exists() else 0


def test_a_throttled_reassignment_copies_at_the_throttled_rate(cluster, tmp_path):
    """`--throttle` (KIP-73): the tool names the moving replicas in the topic's leader and follower throttled
    replicas and sets both rates on the brokers; the new replica catches up at about that rate (one fetch may
    overshoot it, then the rate over the 11 s window holds it back) until the throttle is raised."""
    a, b, c = (n.node_id for n in cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _, f in admin.create_topics([NewTopic("throttled", num_partitions=1, replica_assignment=[[a]])]).items():
        f.result(30)
    wait_for(lambda: describe(cluster.bootstrap, "throttled").get(0, (-1,))[0] == a, "led by a", 60)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    value = bytes(range(256)) * 4
    for i in range(THROTTLED_RECORDS):
        p.produce("throttled", value=value, key=str(i), partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    total = log_size(cluster.node(a), "throttled", 0)
    assert total > 3_000_000, total

    move = plan(tmp_path / "throttled.json", {("throttled", 0): [a, b]})
    rc, out = reassign(cluster.bootstrap, "--execute", "--throttle", str(THROTTLE_BYTES_PER_S),
                       "--reassignment-json-file", str(move))
    assert rc == 0, out
    assert "The inter-broker throttle limit was set to" in out, out
    # Unthrottled the copy takes well under a second here; at 100 kB/s the first fetch (up to
    # replica.fetch.max.bytes, 1 MiB) holds the rest back for about ten seconds.
    time.sleep(6)
    copied = log_size(cluster.node(b), "throttled", 0)
    print(f"throttled copy: {copied} of {total} bytes after 6 s")
    assert 0 < copied < total / 2, (copied, total)
    assert describe(cluster.bootstrap, "throttled")[0][2] == [a], "b is in the ISR already"

    # Raised, the copy finishes; --verify then clears the throttles.
    rc, out = reassign(cluster.bootstrap, "--execute", "--additional", "--throttle", "1000000000",
                       "--reassignment-json-file", str(move))
    assert rc == 0, out
    verify = lambda: reassign(cluster.bootstrap, "--verify", "--reassignment-json-file", str(move))
    wait_for(lambda: "Reassignment of partition throttled-0 is completed" in verify()[1],
             lambda: f"not completed: {verify()[1]}", 60)
    rc, out = verify()
    assert "Clearing broker-level throttles" in out and "Clearing topic-level throttles" in out, out
    configs = admin.describe_configs([ConfigResource("topic", "throttled")])
    entries = list(configs.values())[0].result(30)
    assert entries["leader.replication.throttled.replicas"].value in ("", None), entries
    assert log_size(cluster.node(b), "throttled", 0) == total


def read_all(bootstrap: str, topic: str) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reassignment-reader", "enable.auto.commit": False})
    parts = [TopicPartition(topic, i, 0) for i in (0, 1)]
    c.assign(parts)
    got = []
    end = sum(c.get_watermark_offsets(TopicPartition(topic, i), timeout=10)[1] for i in (0, 1))
    deadline = time.monotonic() + 60
    while len(got) < end and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got
