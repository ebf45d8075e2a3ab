"""Unclean leader election on one controller and two brokers, with real clients: a partition whose only in-sync
replica died stays offline while `unclean.leader.election.enable` is off, even with its other replica back; turned
on, that replica leads and what only the dead one had is lost, as Kafka documents; the old leader, back, truncates
what it alone had. Runs against fjord, or Apache Kafka with E2E_BROKER=kafka (same KRaft properties).
"""

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

from harness import Cluster, wait_for

SESSION_MS = 6000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("unclean"), controllers=1, brokers=2,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000",
                       "replica.lag.time.max.ms": "2000", "unclean.leader.election.interval.ms": "500"})
    c.start()
    yield c
    c.kill9()


def state(bootstrap: str) -> tuple:
    """(leader, isr) of partition 0 of `unclean`, as `bootstrap` tells it (a metadata request that fails, as one to
    a broker being restarted may, is retried). (-2, []) while the broker asked does not know the topic yet: topics
    reach the brokers' metadata after CreateTopics answers, in Kafka too."""
    for attempt in range(5):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            md = admin.list_topics("unclean", timeout=10)
        except KafkaException:
            if attempt == 4:
                raise
            time.sleep(0.5)
            continue
        topic = md.topics.get("unclean")
        p = topic.partitions.get(0) if topic is not None else None
        if p is None:
            return -2, []
        return p.leader, sorted(p.isrs)


def produce(bootstrap: str, tag: str, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 30000})
    errors = []
    for i in range(count):
        p.produce("unclean", value=f"{tag}-{i}", partition=0, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(60) == 0
    assert errors == []


def read(bootstrap: str) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}", "enable.auto.commit": False})
    _, high = c.get_watermark_offsets(TopicPartition("unclean", 0), timeout=30)
    c.assign([TopicPartition("unclean", 0, 0)])
    values = []
    end = time.monotonic() + 60
    while len(values) < high and time.monotonic() < end:
        m = c.poll(1)
        if m is not None and not m.error():
            values.append(m.value().decode())
    c.close()
    assert len(values) == high
    return values


def log_bytes(node) -> bytes:
    d = Path(node.data_dir) / "unclean-0"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def test_an_out_of_sync_replica_leads_only_once_unclean_election_is_enabled(cluster):
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _, f in a.create_topics([NewTopic("unclean", num_partitions=1, replication_factor=2,
                                          config={"min.insync.replicas": "1"})]).items():
        f.result(30)
    ids = sorted(b.node_id for b in cluster.brokers)
    wait_for(lambda: (lambda s: s[0] >= 0 and s[1] == ids)(state(cluster.bootstrap)), "both in sync")
    produce(cluster.bootstrap, "a", 100)

    leader_id = state(cluster.bootstrap)[0]
    leader = cluster.node(leader_id)
    follower = next(b for b in cluster.brokers if b.node_id != leader_id)
    follower.kill9()
    wait_for(lambda: state(leader.bootstrap)[1] == [leader_id], "the dead follower left the ISR",
             SESSION_MS / 1000 + 20)
    # Acknowledged by the leader alone, the only in-sync replica.
    produce(leader.bootstrap, "b", 100)

    leader.kill9()
    follower.start(timeout_s=120)
    # Its only in-sync replica dead, the partition is offline, though its other replica is live.
    # The ISR keeps its last member (fjord, and Kafka without KIP-966), or is empty with that member kept as an
    # eligible leader replica (Kafka 4.4's ELR).
    offline = [(-1, [leader_id]), (-1, [])]
    seen = []
    wait_for(lambda: seen.append(state(follower.bootstrap)) or seen[-1] in offline,
             lambda: f"offline after the leader's fencing: {seen[-3:]}", SESSION_MS / 1000 + 30)
    time.sleep(3)
    assert state(follower.bootstrap) in offline, "no unclean election while it is disabled"

    resource = ConfigResource(ResourceType.TOPIC, "unclean", incremental_configs=[
        ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": follower.bootstrap})  # alive until the futures complete
    for _, f in admin.incremental_alter_configs([resource]).items():
        f.result(30)
    wait_for(lambda: state(follower.bootstrap) == (follower.node_id, [follower.node_id]),
             "the out-of-sync replica leads alone once allowed", 30)
    # What only the old leader had is gone.
    assert read(follower.bootstrap) == [f"a-{i}" for i in range(100)]

    # The old leader returns as a follower, truncates its divergent tail and rejoins the ISR.
    leader.start(timeout_s=120)
    wait_for(lambda: state(follower.bootstrap)[1] == ids, "the old leader rejoined the ISR", 60)
    wait_for(lambda: log_bytes(leader) == log_bytes(follower), "the replicas' logs are the same", 30)
    produce(follower.bootstrap, "c", 10)
    assert read(cluster.bootstrap)[-10:] == [f"c-{i}" for i in range(10)]
