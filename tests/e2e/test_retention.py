"""Retention follows cleanup.policy, as in Kafka: a compact-only topic is never trimmed by retention.ms or
retention.bytes; delete and compact,delete topics are, including the active segment of an idle topic once it has
expired (Kafka rolls a new empty segment and deletes the old one, so the log starts at its end).

Runs on this module's own broker with log.retention.check.interval.ms=1000. segment.bytes is 1 MiB, Kafka 4.x's
minimum, so the records are 8 KiB each.
"""

import time
import uuid
from typing import Dict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Broker, ensure_running, module_broker

RETENTION_BROKER_PROPS = {"log.retention.check.interval.ms": "1000"}
VALUE_BYTES = 8 * 1024
SEGMENT_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory) -> Broker:
    yield from module_broker(tmp_path_factory.mktemp("retention-broker"), RETENTION_BROKER_PROPS)


@pytest.fixture
def rbroker(retention_broker: Broker) -> Broker:
    return ensure_running(retention_broker)


def create_topic(b: Broker, configs: Dict[str, str]) -> str:
    name = f"retention-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=configs)])
    futures[name].result(30)
    return name


def produce(b: Broker, topic: str, records) -> None:
    """Sends (key, value) pairs in order, each acknowledged by the broker."""
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    failures = []
    for key, value in records:
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0, "records left unsent"
    assert not failures, failures[:3]


def watermarks(b: Broker, topic: str):
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "retention-probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()


def read_all(b: Broker, topic: str, end: int):
    """Every record from the log start up to `end`, as (offset, key, value)."""
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"retention-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out = []
    try:
        consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def value(key: str, version: int) -> bytes:
    return (f"{key}:{version}:".encode() * VALUE_BYTES)[:VALUE_BYTES]


def wait_until(what: str, predicate, timeout_s: float = 30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout_s} s")


def test_compact_topic_keeps_every_key(rbroker: Broker):
    """The reported loss: retention.ms on a compact-only topic deleted all but the active segment."""
    topic = create_topic(rbroker, {"cleanup.policy": "compact", "retention.ms": "1000", "retention.bytes": "1",
                                   "segment.bytes": str(SEGMENT_BYTES)})
    # k0..k9 once, then only k5..k9 for several segments: the latest k0..k4 sit in the first segment.
    records = [(f"k{i}", value(f"k{i}", 0)) for i in range(10)]
    records += [(f"k{5 + i % 5}", value(f"k{5 + i % 5}", 1 + i // 5)) for i in range(500)]
    produce(rbroker, topic, records)
    latest = {k: v for k, v in records}
    low, high = watermarks(rbroker, topic)
    assert (low, high) == (0, len(records))
    time.sleep(6)  # several retention checks
    low, high = watermarks(rbroker, topic)
    assert low == 0, f"retention moved the log start of a compact-only topic to {low}"
    assert high == len(records)
    seen = read_all(rbroker, topic, high)
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(set(offsets)), "offsets strictly increasing"
    last = {k.decode(): v for _, k, v in seen}
    assert last == latest, f"keys lost or stale: {sorted(set(latest) - set(last))}"


@pytest.mark.parametrize("policy", ["delete", "compact,delete"])
def test_idle_topic_expires_its_active_segment(rbroker: Broker, policy: str):
    topic = create_topic(rbroker, {"cleanup.policy": policy, "retention.ms": "1000",
                                   "segment.bytes": str(SEGMENT_BYTES)})
    produce(rbroker, topic, [(f"k{i}", value(f"k{i}", 0)) for i in range(50)])
    # Everything expires, the active segment too: the log then starts where it ends.
    wait_until("log start at the log end", lambda: watermarks(rbroker, topic) == (50, 50))
    # The next record lands at the log end. (Not read back: with retention.ms=1000 it may expire at once.)
    produce(rbroker, topic, [("after", b"x")])
    assert watermarks(rbroker, topic)[1] == 51


def test_size_retention_deletes_oldest_segments(rbroker: Broker):
    topic = create_topic(rbroker, {"cleanup.policy": "delete", "retention.bytes": str(SEGMENT_BYTES),
                                   "segment.bytes": str(SEGMENT_BYTES)})
    count = 4 * SEGMENT_BYTES // VALUE_BYTES
    produce(rbroker, topic, [(f"k{i}", value(f"k{i}", i)) for i in range(count)])
    low, high = wait_until("size retention", lambda: (lambda w: w if w[0] > 0 else None)(watermarks(rbroker, topic)))
    assert high == count
    # What remains is at least retention.bytes (whole segments go only while the rest still exceeds it).
    assert (high - low) * VALUE_BYTES >= SEGMENT_BYTES * 0.9, (low, high)
    assert (high - low) * VALUE_BYTES <= 2.5 * SEGMENT_BYTES, (low, high)
    seen = read_all(rbroker, topic, high)
    assert seen[0][0] == low and seen[-1][0] == high - 1
