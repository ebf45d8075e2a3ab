"""ISR replication on three combined nodes, with real clients: topics with replication factor 3 keep every record
acknowledged with acks=all through kill -9 of a partition's leader, the replicas' logs end byte for byte the same,
and acks=all is refused while the ISR is smaller than min.insync.replicas. Runs against fjord, or Apache Kafka with
E2E_BROKER=kafka (same KRaft properties).
"""

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Cluster

SESSION_MS = 6000
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("replication"), controllers=3,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000"})
    c.start()
    yield c
    c.stop()


def create(bootstrap: str, name: str, min_isr: int) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": str(min_isr)})
    for _, f in a.create_topics([topic]).items():
        f.result(30)


def describe(bootstrap: str, topic: str) -> dict:
    """Partition → (leader, replicas, isr)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        return {}
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def wait_for(check, what: str, deadline_s: float = 60):
    end = time.monotonic() + deadline_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < end, what
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Records first..first+count, record i to partition i % PARTITIONS; every one acknowledged (acks=all)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})
    errors = []
    for i in range(first, first + count):
        p.produce(topic, value=str(i), partition=i % PARTITIONS,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(90) == 0
    assert errors == []


def read_all(bootstrap: str, topic: str, expected: int) -> dict:
    """Partition → values, from offset 0, until `expected` records came."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict = {p: [] for p in range(PARTITIONS)}
    n = 0
    end = time.monotonic() + 90
    while n < expected and time.monotonic() < end:
        m = c.poll(1)
        if m is None or m.error():
            continue
        assert m.offset() == len(got[m.partition()]), "offsets dense and in order"
        got[m.partition()].append(int(m.value()))
        n += 1
    c.close()
    assert n == expected, f"read {n} of {expected}"
    return got


def log_bytes(node, topic: str, partition: int) -> bytes:
    """A replica's whole log: its segments' bytes in offset order."""
    d = Path(node.data_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def test_acks_all_records_survive_the_leaders_kill9_and_the_replicas_end_identical(cluster):
    create(cluster.bootstrap, "rf3", min_isr=2)
    ids = sorted(n.node_id for n in cluster.nodes)
    wait_for(lambda: (lambda d: len(d) == PARTITIONS and all(isr == ids and l >= 0 for l, _, isr in d.values()))(
        describe(cluster.bootstrap, "rf3")), "every partition led with all three in sync")
    produce(cluster.bootstrap, "rf3", 0, 3000)

    leader = describe(cluster.bootstrap, "rf3")[0][0]
    victim = cluster.node(leader)
    victim.kill9()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != leader)
    # A new leader from the ISR; the records acknowledged before the kill are all there, and writing goes on.
    wait_for(lambda: (lambda d: d and d[0][0] not in (-1, leader))(describe(survivors, "rf3")),
             "partition 0 led by a surviving in-sync replica", SESSION_MS / 1000 + 30)
    produce(survivors, "rf3", 3000, 3000)
    got = read_all(survivors, "rf3", 6000)
    for p, values in got.items():
        assert values == [i for i in range(6000) if i % PARTITIONS == p], f"partition {p}: exactly once, in order"

    # Back, the old leader truncates what it alone had, catches up, and every replica holds the same bytes.
    victim.start(timeout_s=120)
    for p in range(PARTITIONS):
        wait_for(lambda: len({log_bytes(n, "rf3", p) for n in cluster.nodes}) == 1,
                 f"partition {p}: replicas differ", 60)
    assert len(log_bytes(victim, "rf3", 0)) > 0


def test_acks_all_is_refused_while_the_isr_is_below_min_insync_replicas(cluster):
    create(cluster.bootstrap, "strict", min_isr=3)
    ids = sorted(n.node_id for n in cluster.nodes)
    wait_for(lambda: (lambda d: len(d) == PARTITIONS and all(isr == ids for _, _, isr in d.values()))(
        describe(cluster.bootstrap, "strict")), "all three in sync")
    produce(cluster.bootstrap, "strict", 0, 30)

    victim = cluster.node(describe(cluster.bootstrap, "strict")[0][1][-1])
    victim.kill9()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != victim.node_id)
    # Fenced after its session: out of every ISR.
    wait_for(lambda: (lambda d: d and all(victim.node_id not in isr and l >= 0 for l, _, isr in d.values()))(
        describe(survivors, "strict")), "the dead node left the ISR", SESSION_MS / 1000 + 30)

    refused = []
    p = Producer({"bootstrap.servers": survivors, "acks": "all", "retries": 0, "message.timeout.ms": 20000})
    for partition in range(PARTITIONS):
        p.produce("strict", value=b"x", partition=partition, on_delivery=lambda e, m: refused.append(e))
    p.flush(30)
    assert len(refused) == PARTITIONS
    assert all(e is not None and e.code() in (KafkaError.NOT_ENOUGH_REPLICAS,
                                              KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND) for e in refused), refused
    # acks=1 needs the leader only.
    acked = []
    p = Producer({"bootstrap.servers": survivors, "acks": 1, "message.timeout.ms": 20000})
    for partition in range(PARTITIONS):
        p.produce("strict", value=b"y", partition=partition, on_delivery=lambda e, m: acked.append(e))
    p.flush(30)
    assert acked == [None] * PARTITIONS
    victim.start(timeout_s=120)
