"""Leader elections asked for with Kafka's own `kafka-leader-election` (ElectLeaders) and the controller's preferred
leader balance (`auto.leader.rebalance.enable`), on one controller and three brokers. Runs against fjord, or Apache
Kafka with E2E_BROKER=kafka (same KRaft properties).
"""

import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Cluster, kafka_tools_java, wait_for

SESSION_MS = 6000
LAG_MS = 2000
EXTRA = {"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000",
         "replica.lag.time.max.ms": str(LAG_MS)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("election"), controllers=1, brokers=3,
                extra={**EXTRA, "auto.leader.rebalance.enable": "false"})
    c.start()
    yield c
    c.kill9()


def leader_election(bootstrap: str, *args: str) -> tuple:
    """`kafka-leader-election` (Kafka's own tool): its exit code and output."""
    proc = subprocess.run([*kafka_tools_java(),
                           "org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def describe(bootstrap: str, topic: str) -> dict:
    """Partition → (leader, replicas in assignment order, isr)."""
    t = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    if t.error is not None:
        return {}
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def create(bootstrap: str, topic: NewTopic) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    for _, f in a.create_topics([topic]).items():
        f.result(30)


def in_sync(bootstrap: str, topic: str, partitions: int, deadline_s: float = 90) -> dict:
    return wait_for(lambda: (lambda d: d if len(d) == partitions and all(
        l >= 0 and isr == sorted(r) for l, r, isr in d.values()) else None)(describe(bootstrap, topic)),
        lambda: f"{topic}: not every replica in sync: {describe(bootstrap, topic)}", deadline_s)


def produce(bootstrap: str, topic: str, values: range, acks) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": 30000})
    errors = []
    for i in values:
        p.produce(topic, value=str(i), partition=0, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(60) == 0 and errors == []


def values(bootstrap: str, topic: str) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < end and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got


def test_a_preferred_election_gives_leadership_back_to_the_first_replica(cluster):
    create(cluster.bootstrap, NewTopic("pref", num_partitions=3, replication_factor=3))
    before = in_sync(cluster.bootstrap, "pref", 3)
    assert all(l == r[0] for l, r, _ in before.values()), before
    leader, replicas, _ = before[0]
    victim = cluster.node(leader)
    victim.kill9()
    others = ",".join(b.bootstrap for b in cluster.brokers if b.node_id != leader)
    wait_for(lambda: describe(others, "pref")[0][0] not in (-1, leader), "partition 0 failed over",
             SESSION_MS / 1000 + 30)
    victim.start(timeout_s=120)
    moved = in_sync(cluster.bootstrap, "pref", 3)
    # Back in sync, the preferred replica does not lead again by itself: the balance is off here.
    assert moved[0][0] != leader

    rc, out = leader_election(cluster.bootstrap, "--election-type", "PREFERRED", "--topic", "pref",
                              "--partition", "0")
    assert rc == 0, out
    assert "Successfully completed leader election (PREFERRED) for partitions pref-0" in out, out
    wait_for(lambda: describe(cluster.bootstrap, "pref")[0][0] == leader, "the preferred replica leads again", 30)

    # Every partition: those that need it are elected, the rest are left out.
    rc, out = leader_election(cluster.bootstrap, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert rc == 0, out
    wait_for(lambda: all(l == r[0] for l, r, _ in describe(cluster.bootstrap, "pref").values()),
             "every partition led by its preferred replica", 30)
    rc, out = leader_election(cluster.bootstrap, "--election-type", "PREFERRED", "--topic", "pref",
                              "--partition", "1")
    assert rc == 0, out
    assert "Valid replica already elected for partitions pref-1" in out, out
    # A partition that does not exist is an error the tool reports.
    rc, out = leader_election(cluster.bootstrap, "--election-type", "PREFERRED", "--topic", "pref",
                              "--partition", "7")
    assert rc != 0 and "pref-7" in out, out


def test_an_unclean_election_asked_for_lets_an_out_of_sync_replica_lead(cluster):
    ids = [b.node_id for b in cluster.brokers]
    first, second = ids[0], ids[1]
    create(cluster.bootstrap, NewTopic("asked", num_partitions=1, replica_assignment=[[first, second]]))
    in_sync(cluster.bootstrap, "asked", 1)
    produce(cluster.bootstrap, "asked", range(10), "all")
    rc, out = leader_election(cluster.bootstrap, "--election-type", "UNCLEAN", "--topic", "asked", "--partition", "0")
    assert rc == 0 and "Valid replica already elected for partitions asked-0" in out, out

    cluster.node(second).kill9()
    wait_for(lambda: describe(cluster.bootstrap, "asked")[0][2] == [first], "the follower left the ISR",
             SESSION_MS / 1000 + 30)
    produce(cluster.bootstrap, "asked", range(10, 15), 1)  # only the leader has these
    cluster.node(first).kill9()
    cluster.node(second).start(timeout_s=120)
    rest = ",".join(b.bootstrap for b in cluster.brokers if b.node_id != first)
    # Unclean election is disabled: the out-of-sync replica does not lead on its own.
    wait_for(lambda: describe(rest, "asked")[0][0] == -1, "the partition is offline", SESSION_MS / 1000 + 30)
    time.sleep(2)
    assert describe(rest, "asked")[0][0] == -1

    rc, out = leader_election(rest, "--election-type", "UNCLEAN", "--topic", "asked", "--partition", "0")
    assert rc == 0, out
    assert "Successfully completed leader election (UNCLEAN) for partitions asked-0" in out, out
    wait_for(lambda: describe(rest, "asked")[0][0] == second, "the out-of-sync replica leads", 30)
    assert values(rest, "asked") == list(range(10)), "what only the old leader had is lost, the rest kept"
    cluster.node(first).start(timeout_s=120)
    in_sync(cluster.bootstrap, "asked", 1)
    assert values(cluster.bootstrap, "asked") == list(range(10))


def test_the_controller_balances_leadership_back_to_preferred_replicas(tmp_path):
    c = Cluster(tmp_path / "balance", controllers=1, brokers=2,
                extra={**EXTRA, "auto.leader.rebalance.enable": "true",
                       "leader.imbalance.check.interval.seconds": "2"})
    c.start()
    try:
        create(c.bootstrap, NewTopic("balanced", num_partitions=2, replication_factor=2))
        before = in_sync(c.bootstrap, "balanced", 2)
        leader = before[0][0]
        victim = c.node(leader)
        victim.kill9()
        other = next(b.bootstrap for b in c.brokers if b.node_id != leader)
        wait_for(lambda: describe(other, "balanced")[0][0] not in (-1, leader), "partition 0 failed over",
                 SESSION_MS / 1000 + 30)
        victim.start(timeout_s=120)
        # Back in the ISR, it leads what it is preferred for again, without being asked.
        wait_for(lambda: all(l == r[0] and isr == sorted(r) for l, r, isr in describe(c.bootstrap, "balanced").values()),
                 lambda: f"leadership not balanced back: {describe(c.bootstrap, 'balanced')}", 60)
    finally:
        c.kill9()
