"""Fetch from follower (KIP-392) on three combined nodes in three racks (`broker.rack`) with Kafka's rack-aware
replica selector (`replica.selector.class`): a consumer naming its rack (`client.rack`) is sent by the leader to the
in-sync follower in that rack and reads from it, so it goes on reading while the leader is stopped. Runs against
fjord, or Apache Kafka with E2E_BROKER=kafka (same KRaft properties).
"""

import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Cluster, wait_for

RECORDS = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("racks"), controllers=3,
                # A session long enough that the stopped leader is not fenced while the test reads.
                extra={"broker.session.timeout.ms": "30000", "broker.heartbeat.interval.ms": "1000",
                       "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
                node_extra={i: {"broker.rack": f"rack-{i}"} for i in (1, 2, 3)})
    c.start()
    yield c
    c.kill9()


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _, f in admin.create_topics([NewTopic("near", num_partitions=1, replication_factor=3)]).items():
        f.result(30)
    def in_sync():
        # A broker that has not applied the new topic yet answers it unknown, without partitions.
        partition = admin.list_topics("near", timeout=10).topics["near"].partitions.get(0)
        return partition is not None and sorted(partition.isrs) == [1, 2, 3]
    wait_for(in_sync, "all in sync", 60)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.num.messages": 1})  # a batch a record
    for i in range(RECORDS):
        p.produce("near", value=str(i).encode() * 50, partition=0)
    assert p.flush(30) == 0
    leader = admin.list_topics("near", timeout=10).topics["near"].partitions[0].leader
    follower = next(i for i in (1, 2, 3) if i != leader)
    time.sleep(2)  # the follower hears the high watermark on its next fetch

    # Small fetches, so reading takes many of them.
    c = Consumer({"bootstrap.servers": cluster.node(follower).bootstrap, "group.id": "near-reader",
                  "client.rack": f"rack-{follower}", "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 2000, "fetch.max.bytes": 2000, "message.max.bytes": 1000, "topic.metadata.refresh.interval.ms": 600000})
    c.assign([TopicPartition("near", 0, 0)])
    got = []
    end = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.offset())
    assert len(got) >= 20, got
    # With the leader stopped, the rest comes from the follower.
    cluster.node(leader).proc.send_signal(signal.SIGSTOP)
    try:
        end = time.monotonic() + 15
        while len(got) < RECORDS and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.offset())
    finally:
        cluster.node(leader).proc.send_signal(signal.SIGCONT)
        c.close()
    assert got == list(range(RECORDS)), f"read {len(got)} of {RECORDS} with the leader stopped"
