"""Transactions with librdkafka (confluent-kafka): commit and abort seen by read_committed and read_uncommitted
consumers, a zombie producer fenced by a new one with its transactional id, and the coordinator's state and the
markers surviving a kill -9 of the broker."""

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import check_implicit_add, implicit_add, kafka_tool, read_until_quiet, unadded_produce, wait_for


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, replication_factor)]).values():
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
    return [m.value().decode()
            for m in read_until_quiet(bootstrap, topic, partitions, expect, isolation, wait_s=wait_s, quiet_s=2)]


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
    zombie_is_fenced(broker.bootstrap, 1)


def zombie_is_fenced(bootstrap: str, replication_factor: int) -> None:
    """A new producer with a zombie's transactional id aborts its open transaction and fences it."""
    topic, partitions = f"txn-{uuid.uuid4().hex[:8]}", 2
    create_topic(bootstrap, topic, partitions, replication_factor)
    transactional_id = f"tx-{topic}"
    zombie = producer(bootstrap, transactional_id)
    zombie.begin_transaction()
    for i in range(10):
        zombie.produce(topic, value=f"zombie-{i}".encode(), partition=i % partitions)
    zombie.flush(60)
    # A new instance takes the id over: the zombie's open transaction is aborted and the zombie fenced.
    successor = producer(bootstrap, transactional_id)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenc" in str(fenced.value).lower(), fenced.value
    send_transaction(successor, topic, partitions, "successor", 10, commit=True)
    committed = consume_all(bootstrap, topic, partitions, "read_committed", 10)
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


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int):
    """The group's committed offsets as a read_committed consumer fetches them (require_stable)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        found = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        # A partition without a committed offset answers a negative one (librdkafka's OFFSET_INVALID).
        return [max(tp.offset, 0) for tp in sorted(found, key=lambda tp: tp.partition)]
    finally:
        c.close()


def copy_batch(consumer: Consumer, p: Producer, out_topic: str, batch: int, commit: bool, wait_s: float = 30):
    """One consume-transform-produce transaction: up to `batch` input records copied to `out_topic` with the
    consumer's positions committed in the same transaction. Returns how many records it copied."""
    copied = 0
    p.begin_transaction()
    deadline = time.monotonic() + wait_s
    while copied < batch and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None:
            if copied:
                break
            continue
        assert not m.error(), m.error()
        p.produce(out_topic, value=b"copy-" + m.value(), partition=m.partition())
        copied += 1
    positions = consumer.position(consumer.assignment())
    p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
    if commit:
        p.commit_transaction(60)
    else:
        p.abort_transaction(60)
    return copied


def test_offsets_commit_and_abort_with_their_transaction(broker):
    """Exactly-once copying: the input offsets committed in a transaction become the group's committed offsets
    only with its commit; an aborted or killed transaction leaves them where they were."""
    in_topic, out_topic, partitions = f"txin-{uuid.uuid4().hex[:8]}", f"txout-{uuid.uuid4().hex[:8]}", 2
    create_topic(broker.bootstrap, in_topic, partitions)
    create_topic(broker.bootstrap, out_topic, partitions)
    source = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(60):
        source.produce(in_topic, value=f"in-{i}".encode(), partition=i % partitions)
    source.flush(60)
    group = f"copier-{uuid.uuid4().hex[:8]}"

    def consumer():
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "isolation.level": "read_committed",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([in_topic])
        return c

    c, p = consumer(), producer(broker.bootstrap, f"tx-{group}")
    assert copy_batch(c, p, out_topic, 20, commit=True) == 20
    after_first = committed_offsets(broker.bootstrap, group, in_topic, partitions)
    assert sum(after_first) == 20, after_first
    # An aborted transaction: its copies vanish and the offsets stay.
    assert copy_batch(c, p, out_topic, 20, commit=False) > 0
    assert committed_offsets(broker.bootstrap, group, in_topic, partitions) == after_first
    c.close()
    # A transaction left open by a kill -9: the next producer of the id aborts it.
    c = consumer()
    p.begin_transaction()
    m = None
    while m is None:
        m = c.poll(0.5)
    p.produce(out_topic, value=b"copy-" + m.value(), partition=m.partition())
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 60)
    p.flush(60)
    # The consumer leaves first: a member the restarted broker still knew would hold the next
    # rebalance for its whole session.
    c.close()
    broker.kill9()
    broker.start()
    c, p = consumer(), producer(broker.bootstrap, f"tx-{group}")
    assert committed_offsets(broker.bootstrap, group, in_topic, partitions) == after_first
    copied = 20
    while copied < 60:
        got = copy_batch(c, p, out_topic, 15, commit=True)
        assert got > 0, f"stuck at {copied} copied"
        copied += got
    c.close()
    assert copied == 60
    assert committed_offsets(broker.bootstrap, group, in_topic, partitions) == [30, 30]
    out = consume_all(broker.bootstrap, out_topic, partitions, "read_committed", 60)
    assert sorted(out) == sorted(f"copy-in-{i}" for i in range(60))


def transactions_tool(bootstrap: str, *args: str) -> list:
    """Kafka's `kafka-transactions` (TransactionsCommand): the rows of the table it prints, as lists of cells."""
    out = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, *args)
    return [[cell.strip() for cell in line.split("\t") if cell.strip()] for line in out.splitlines()
            if "\t" in line]


def test_kafka_transactions_tool_lists_describes_and_aborts(broker):
    """kafka-transactions list / describe / describe-producers / find-hanging see an open transaction as Kafka
    shows it, and abort ends it on its partition (the last stable offset moves past it)."""
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = f"tool-{topic}"
    p = producer(broker.bootstrap, transactional_id)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"open-{i}".encode(), partition=0)
    p.flush(60)

    listed = transactions_tool(broker.bootstrap, "list")
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    mine = [row for row in listed[1:] if row[0] == transactional_id]
    assert len(mine) == 1 and mine[0][3] == "Ongoing", listed
    # ListTransactions v2 (KIP-1152): a pattern the whole id matches.
    assert [r[0] for r in transactions_tool(broker.bootstrap, "list", "--transactional-id-pattern",
                                            f"tool-{topic[:6]}.*")[1:]] == [transactional_id]
    assert transactions_tool(broker.bootstrap, "list", "--transactional-id-pattern", f"{topic}.*")[1:] == []
    described = dict(zip(*transactions_tool(broker.bootstrap, "describe", "--transactional-id", transactional_id)))
    assert described["TransactionState"] == "Ongoing" and described["TopicPartitions"] == f"{topic}-0", described
    assert described["ProducerId"] == mine[0][2]
    producers = transactions_tool(broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    row = dict(zip(*producers))
    assert row["ProducerId"] == mine[0][2] and row["CurrentTransactionStartOffset"] == "0", producers
    assert row["LastSequence"] == "4"
    # Open for seconds, not past the longest transaction timeout: not hanging.
    hanging = transactions_tool(broker.bootstrap, "find-hanging", "--topic", topic)
    assert len(hanging) == 1, hanging

    transactions_tool(broker.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    row = dict(zip(*transactions_tool(broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")))
    assert row["CurrentTransactionStartOffset"] == "None", row
    # Aborted on the partition: read_committed consumers go past it to what comes next.
    send_transaction(producer(broker.bootstrap, f"{transactional_id}-next"), topic, 1, "next", 3, commit=True)
    assert labels(consume_all(broker.bootstrap, topic, 1, "read_committed", 3)) == ["next"]


def test_kafka_dump_log_reads_the_transaction_index(broker):
    """An aborted transaction is in its segment's `.txnindex`, in Kafka's format: Kafka's DumpLogSegments lists it
    (and reads the markers in the segment)."""
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    p = producer(broker.bootstrap, f"dump-{topic}")
    send_transaction(p, topic, 1, "kept", 3, commit=True)  # offsets 0-2, marker 3
    send_transaction(p, topic, 1, "dropped", 4, commit=False)  # offsets 4-7, marker 8
    # The markers are written after EndTxn is answered.
    indexes = wait_for(lambda: [f for d in broker.partition_dirs(topic) for f in d.glob("*.txnindex")
                                if f.stat().st_size > 0], "the aborted transaction indexed")
    assert len(indexes) == 1, indexes
    out = kafka_tool("org.apache.kafka.tools.DumpLogSegments", "--files", str(indexes[0]))
    entries = [line for line in out.splitlines() if line.startswith("version:")]
    assert len(entries) == 1, out
    producer_id = entries[0].split("producerId: ")[1].split()[0]
    assert entries[0] == f"version: 0 producerId: {producer_id} firstOffset: 4 lastOffset: 8 lastStableOffset: 9", out
    log = kafka_tool("org.apache.kafka.tools.DumpLogSegments", "--files",
                     str(indexes[0].with_suffix(".log")), "--print-data-log")
    markers = [line for line in log.splitlines() if "endTxnMarker" in line]
    assert [m.split("endTxnMarker: ")[1].split()[0] for m in markers] == ["COMMIT", "ABORT"], log


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(broker):
    timed_out_transaction_is_aborted(broker.bootstrap, 1)


def timed_out_transaction_is_aborted(bootstrap: str, replication_factor: int) -> None:
    """A producer that goes quiet mid-transaction does not hold read_committed consumers back for long: past
    `transaction.timeout.ms` the coordinator aborts its transaction (the last stable offset moves on) and fences
    the producer, whose commit then fails."""
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1, replication_factor)
    stalled = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"stalled-{topic}",
                        "transaction.timeout.ms": 3000})
    stalled.init_transactions(60)
    stalled.begin_transaction()
    for i in range(5):
        stalled.produce(topic, value=f"stalled-{i}".encode(), partition=0)
    stalled.flush(60)
    send_transaction(producer(bootstrap, f"other-{topic}"), topic, 1, "after", 3, commit=True)
    # Kafka looks for timed-out transactions every 10 s (transaction.abort.timed.out.transaction.cleanup
    # .interval.ms); the consumer waits that long at most.
    assert labels(consume_all(bootstrap, topic, 1, "read_committed", 3, wait_s=40)) == ["after"]
    with pytest.raises(KafkaException):
        stalled.commit_transaction(30)


def test_a_batch_for_a_partition_not_in_the_transaction_is_refused(broker):
    """KIP-890 part 1: a transactional producer that skips AddPartitionsToTxn for a partition (raw Produce v11) has
    its batch there refused, so no transaction the coordinator does not know of can hang the partition; the
    partition it did add takes its batch. Offsets it commits in the transaction without AddOffsetsToTxn are refused
    too."""
    topic = f"txn-unadded-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 3)
    rows, offsets = unadded_produce(broker.bootstrap, topic, f"unadded-{uuid.uuid4().hex[:8]}", added=1,
                                    offsets_group=f"unadded-group-{uuid.uuid4().hex[:8]}")
    assert sorted(r["partition"] for r in rows) == [0, 1, 2], rows
    assert [r["error"] for r in rows if r["added"]] == [0], rows
    # TRANSACTION_ABORTABLE (Produce v11 knows it).
    assert all(r["error"] == 120 for r in rows if not r["added"]), rows
    # Offsets committed in the transaction without AddOffsetsToTxn: TRANSACTION_ABORTABLE (TxnOffsetCommit v4).
    assert offsets and offsets["error"] == "120", offsets



def test_a_producer_on_transaction_version_2_leaves_adding_partitions_to_the_leader(broker):
    """KIP-890 part 2: a producer on transaction version 2 (raw Produce v12, TxnOffsetCommit v5) never sends
    AddPartitionsToTxn or AddOffsetsToTxn; the leader and the group coordinator add the partitions. Every EndTxn
    bumps the epoch, so a zombie batch of the committed transaction is refused. read_committed consumers see the
    committed transaction and not the aborted one; the offset is committed with its transaction."""
    topic = f"txn-tv2-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 3)
    rows = implicit_add(broker.bootstrap, topic, f"tv2-{uuid.uuid4().hex[:8]}",
                        offsets_group=f"tv2-group-{uuid.uuid4().hex[:8]}")
    group = check_implicit_add(rows, 3)
    assert sorted(consume_all(broker.bootstrap, topic, 3, "read_committed", 3)) == [
        "committed-0", "committed-1", "committed-2"]
    assert sorted(consume_all(broker.bootstrap, topic, 3, "read_uncommitted", 4)) == [
        "aborted-0", "committed-0", "committed-1", "committed-2"]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    [committed] = c.committed([TopicPartition(topic, 0)], timeout=30)
    c.close()
    assert committed.offset == 1, committed


def test_a_read_committed_consumers_end_and_lag_stop_at_the_last_stable_offset(broker):
    """A transaction left open after a committed one: a read_committed consumer's end offset (ListOffsets) and the
    last stable offset its fetches report — which its lag is counted from — stop at the open transaction's first
    offset, while a read_uncommitted consumer's end is the high watermark; the commit moves both on."""
    topic = f"lso-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    p = producer(broker.bootstrap, f"tx-{topic}")
    send_transaction(p, topic, 1, "committed", 5, commit=True)  # offsets 0-4, marker 5
    p.begin_transaction()
    for i in range(3):  # offsets 6-8, open
        p.produce(topic, value=f"open-{i}".encode(), partition=0)
    p.flush(60)
    tp = TopicPartition(topic, 0)

    def consumer(isolation: str, stats: list) -> Consumer:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{isolation}-{topic}",
                      "isolation.level": isolation, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "statistics.interval.ms": 200,
                      "stats_cb": lambda s: stats.append(json.loads(s))})
        c.assign([TopicPartition(topic, 0, 0)])
        return c

    def partition_stats(stats: list) -> dict:
        for s in reversed(stats):
            part = s.get("topics", {}).get(topic, {}).get("partitions", {}).get("0")
            if part and part.get("fetch_state") == "active" and part.get("hi_offset", -1) >= 0:
                return part
        return {}

    def consume(c: Consumer, stats: list, expect: int, ls_offset: int, hi_offset: int) -> list:
        values = []
        deadline = time.time() + 30
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                values.append(m.value().decode())
            part = partition_stats(stats)
            # A read_uncommitted consumer's ls_offset is its hi_offset in librdkafka's statistics.
            if len(values) >= expect and (part.get("ls_offset"), part.get("hi_offset")) == (ls_offset, hi_offset):
                return values
        raise AssertionError(f"{values} {partition_stats(stats)}")

    committed_stats, uncommitted_stats = [], []
    committed = consumer("read_committed", committed_stats)
    uncommitted = consumer("read_uncommitted", uncommitted_stats)
    try:
        assert committed.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 6)
        assert uncommitted.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 9)
        assert len(consume(committed, committed_stats, 5, ls_offset=6, hi_offset=9)) == 5
        # librdkafka counts a read_committed consumer's lag to the last stable offset: nothing but the marker.
        assert partition_stats(committed_stats)["consumer_lag_stored"] <= 1
        assert len(consume(uncommitted, uncommitted_stats, 8, ls_offset=9, hi_offset=9)) == 8
        p.commit_transaction(60)
        assert committed.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 10)
        assert consume(committed, committed_stats, 3, ls_offset=10, hi_offset=10) == [f"open-{i}" for i in range(3)]
    finally:
        committed.close()
        uncommitted.close()
