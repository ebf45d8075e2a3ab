"""Transactions with librdkafka (confluent-kafka): commit and abort seen by read_committed and read_uncommitted
consumers, a zombie producer fenced by a new one with its transactional id, and the coordinator's state and the
markers surviving a kill -9 of the broker."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def producer(bootstrap: str, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 60000})
    p.init_transactions(60)
    return p


def send_transaction(p: Producer, topic: str, partitions: int, label: str, count: int, commit: bool) -> None:
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, value=f"{label}-{i}".encode(), partition=i % partitions)
    if commit:
        p.commit_transaction(60)
    else:
        p.flush(60)
        p.abort_transaction(60)


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int, wait_s: float = 30):
    """Every value in the topic as a consumer with `isolation` reads it, waiting until `expect` arrived (and a
    little longer, so that anything extra shows too)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{uuid.uuid4()}", "isolation.level": isolation,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values = []
    deadline = time.monotonic() + wait_s
    quiet_since = None
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            if len(values) >= expect:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 2:
                    break
            continue
        quiet_since = None
        assert not m.error(), m.error()
        values.append(m.value().decode())
    c.close()
    return values


def labels(values):
    return sorted({v.rsplit("-", 1)[0] for v in values})


def test_commit_and_abort_by_isolation_level(broker):
    topic, partitions = f"txn-{uuid.uuid4().hex[:8]}", 3
    create_topic(broker.bootstrap, topic, partitions)
    p = producer(broker.bootstrap, f"tx-{topic}")
    send_transaction(p, topic, partitions, "committed", 30, commit=True)
    send_transaction(p, topic, partitions, "aborted", 30, commit=False)
    send_transaction(p, topic, partitions, "again", 9, commit=True)
    committed = consume_all(broker.bootstrap, topic, partitions, "read_committed", 39)
    assert len(committed) == 39 and labels(committed) == ["again", "committed"]
    everything = consume_all(broker.bootstrap, topic, partitions, "read_uncommitted", 69)
    assert len(everything) == 69 and labels(everything) == ["aborted", "again", "committed"]


def test_a_zombie_producer_is_fenced(broker):
    topic, partitions = f"txn-{uuid.uuid4().hex[:8]}", 2
    create_topic(broker.bootstrap, topic, partitions)
    transactional_id = f"tx-{topic}"
    zombie = producer(broker.bootstrap, transactional_id)
    zombie.begin_transaction()
    for i in range(10):
        zombie.produce(topic, value=f"zombie-{i}".encode(), partition=i % partitions)
    zombie.flush(60)
    # A new instance takes the id over: the zombie's open transaction is aborted and the zombie fenced.
    successor = producer(broker.bootstrap, transactional_id)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenc" in str(fenced.value).lower(), fenced.value
    send_transaction(successor, topic, partitions, "successor", 10, commit=True)
    committed = consume_all(broker.bootstrap, topic, partitions, "read_committed", 10)
    assert labels(committed) == ["successor"] and len(committed) == 10


def test_transactions_survive_kill9(broker):
    topic, partitions = f"txn-{uuid.uuid4().hex[:8]}", 2
    create_topic(broker.bootstrap, topic, partitions)
    transactional_id = f"tx-{topic}"
    p = producer(broker.bootstrap, transactional_id)
    send_transaction(p, topic, partitions, "before", 20, commit=True)
    send_transaction(p, topic, partitions, "dropped", 20, commit=False)
    # An open transaction at the kill: after the restart a new producer with the id aborts it.
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, value=f"open-{i}".encode(), partition=i % partitions)
    p.flush(60)
    broker.kill9()
    broker.start()
    successor = producer(broker.bootstrap, transactional_id)
    send_transaction(successor, topic, partitions, "after", 20, commit=True)
    committed = consume_all(broker.bootstrap, topic, partitions, "read_committed", 40)
    assert len(committed) == 40 and labels(committed) == ["after", "before"]
    everything = consume_all(broker.bootstrap, topic, partitions, "read_uncommitted", 80)
    assert len(everything) == 80 and labels(everything) == ["after", "before", "dropped", "open"]
