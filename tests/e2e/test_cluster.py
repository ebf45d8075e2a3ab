"""A three-node cluster (combined broker + controller nodes) with real clients: every client sees every broker,
partitions spread over them, a consumer group spans them, and the cluster survives kill -9 of its active
controller. Runs against fjord, or Apache Kafka with E2E_BROKER=kafka (same KRaft properties).

Topics here have replication factor 1 (ISR replication is a later step): a dead node's partitions are unavailable
until it returns, and come back with it.
"""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Cluster, metadata_quorum_status


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"), 3)
    c.start()
    yield c
    c.stop()


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, name: str, partitions: int) -> None:
    a = admin(bootstrap)  # kept alive until the futures complete
    for _, f in a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).items():
        f.result(30)


def leaders(bootstrap: str, topic: str, deadline_s: float = 30) -> dict:
    """Partition → leader once every partition has one."""
    end = time.monotonic() + deadline_s
    while True:
        md = admin(bootstrap).list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return {p.id: p.leader for p in t.partitions.values()}
        assert time.monotonic() < end, f"{topic} has no leaders: {t}"
        time.sleep(0.2)


def controller_id(bootstrap: str, deadline_s: float = 60) -> int:
    """The active controller (the metadata quorum's leader), as kafka-metadata-quorum reports it. (Metadata and
    DescribeCluster name any live broker as the controller, as KRaft brokers answer clients.)"""
    end = time.monotonic() + deadline_s
    while True:
        try:
            leader = int(metadata_quorum_status(bootstrap)["LeaderId"])
            if leader >= 0:
                return leader
        except (RuntimeError, KeyError, ValueError):
            pass
        assert time.monotonic() < end, "no active controller"
        time.sleep(0.5)


def produce(bootstrap: str, topic: str, partitions: int, count: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})
    errors = []
    for i in range(count):
        p.produce(topic, key=f"{tag}-{i}", value=f"{tag}-{i}", partition=i % partitions,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(90) == 0
    assert errors == []


def consume_all(bootstrap: str, topic: str, group: str, expected: int) -> dict:
    """Partition → values, read by one group member from the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: dict = {}
    n = 0
    end = time.monotonic() + 90
    while n < expected and time.monotonic() < end:
        m = c.poll(1)
        if m is None or m.error():
            continue
        got.setdefault(m.partition(), []).append((m.offset(), m.value().decode()))
        n += 1
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, p) for p in got], timeout=30)
    c.close()
    assert n == expected, f"read {n} of {expected}"
    for tp in committed:
        assert tp.offset == len(got[tp.partition]), tp
    return got


def test_every_node_sees_the_cluster_and_partitions_spread(cluster):
    for node in cluster.nodes:
        md = admin(node.bootstrap).list_topics(timeout=10)
        assert sorted(b.id for b in md.brokers.values()) == [1, 2, 3]
        assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", n.port) for n in cluster.nodes}
        assert md.controller_id in (1, 2, 3)
    status = metadata_quorum_status(cluster.node(1).bootstrap)
    assert int(status["LeaderId"]) in (1, 2, 3)
    assert [v for v in ("1", "2", "3") if f'"id": {v}' in status["CurrentVoters"]] == ["1", "2", "3"]
    # Created through one node, answered by another.
    create(cluster.node(2).bootstrap, "spread", 6)
    assert sorted(set(leaders(cluster.node(3).bootstrap, "spread").values())) == [1, 2, 3]
    produce(cluster.node(1).bootstrap, "spread", 6, 600, "a")
    got = consume_all(cluster.node(3).bootstrap, "spread", "spread-group", 600)
    for partition, records in got.items():
        assert [o for o, _ in records] == list(range(len(records))), "offsets in order, no gaps"
        assert [int(v.split("-")[1]) % 6 for _, v in records] == [partition] * len(records)


def test_active_controller_killed_a_new_one_takes_over_and_the_old_rejoins(cluster):
    old = controller_id(cluster.bootstrap)
    victim = cluster.node(old)
    victim.kill9()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != old)
    new = controller_id(survivors)
    assert new != old
    # Metadata changes go on: created through a survivor.
    create(survivors, "after-failover", 2)
    assert leaders(survivors, "after-failover")
    # Back with its data dir and id, it rejoins and leads its partitions again.
    victim.start(timeout_s=120)
    assert old in set(leaders(cluster.bootstrap, "spread").values())
    produce(victim.bootstrap, "spread", 6, 60, "b")
    md = admin(victim.bootstrap).list_topics(timeout=10)
    assert sorted(b.id for b in md.brokers.values()) == [1, 2, 3]
