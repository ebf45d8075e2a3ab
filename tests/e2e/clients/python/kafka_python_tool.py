"""The e2e client tool for kafka-python: create-topic, produce, consume and group-consume."""

import logging
import os
import sys
import time

from kafka import AsyncConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from grouplog import GroupLog, Stop, group_flags, idle_expired, record_index
from recordgen import client_config, consume_line, generate, parse_flags

ASSIGNORS = {
    "range": RangePartitionAssignor,
    "roundrobin": RoundRobinPartitionAssignor,
    "sticky": StickyPartitionAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def create_topic(a: dict) -> int:
    admin = KafkaAdminClient(bootstrap_servers=a["bootstrap"], **client_config(a))
    try:
        admin.create_topics({a["topic"]: {"num_partitions": int(a["partitions"]), "replication_factor": 1}})
    finally:
        admin.close()
    return 0


def produce(a: dict) -> int:
    topic, seed, count = a["topic"], int(a["seed"]), int(a["count"])
    producer = KafkaProducer(
        bootstrap_servers=a["bootstrap"],
        **client_config(a),
        acks="all" if a["acks"] == "all" else int(a["acks"]),
        compression_type=None if a["codec"] == "none" else a["codec"],
        enable_idempotence=bool(a.get("idempotent")) or "transactional-id" in a,
        # With --transactional-id, every record in one transaction, committed once all are acknowledged.
        **({"transactional_id": a["transactional-id"]} if "transactional-id" in a else {}),
        # Long enough to ride out a broker restart in the kill -9 test.
        delivery_timeout_ms=120000,
        request_timeout_ms=15000,
        linger_ms=5,
    )
    partitions = len(producer.partitions_for(topic))
    if "transactional-id" in a:
        producer.init_transactions()
        producer.begin_transaction()
    failed = []
    with open(a["out"], "w", encoding="ascii") as out:

        def on_ack(i, md):
            out.write(f"{i} {md.partition} {md.offset}\n")
            out.flush()

        def on_error(i, exc):
            failed.append((i, exc))

        for i in range(count):
            r = generate(seed, i)
            fut = producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=r.headers,
                partition=i % partitions,
                timestamp_ms=r.timestamp,
            )
            fut.add_callback(on_ack, i)
            fut.add_errback(on_error, i)
        producer.flush()
        if "transactional-id" in a and not failed:
            producer.commit_transaction()
        producer.close()
    if failed:
        print(f"produce: {len(failed)} failed; first failure: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def consume(a: dict) -> int:
    topic, partitions, expect = a["topic"], int(a["partitions"]), int(a["expect"])
    deadline = time.monotonic() + float(a["timeout-s"])
    # group_id=None: partitions are assigned by hand and no offsets are committed.
    consumer = KafkaConsumer(bootstrap_servers=a["bootstrap"], group_id=None, enable_auto_commit=False,
                             **client_config(a))
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    rows = []
    try:
        while len(rows) < expect and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200, max_records=5000).values():
                for r in records:
                    line = consume_line(r.partition, r.offset, r.timestamp, r.key, r.value, r.headers)
                    rows.append((r.partition, r.offset, line))
    finally:
        consumer.close()
    rows.sort()
    with open(a["out"], "w", encoding="ascii") as out:
        out.writelines(line + "\n" for _, _, line in rows)
    if len(rows) < expect:
        print(f"consume: timed out with {len(rows)} of {expect} records", file=sys.stderr)
        return 3
    return 0


def rejoin_if_join_result_dropped(consumer: KafkaConsumer) -> None:
    """Works around a kafka-python 3.0.12 bug that leaves a member out of its group for good.

    A poll that times out while the member's JoinGroup/SyncGroup round is out leaves that round running, for the
    next poll to collect, but only while the member still wants to rejoin. A group leader that rejoined only because
    its topics' partitions changed (a topic created just before: its first assignment saw no partitions) stops
    wanting to as soon as it computes the new assignment, before the SyncGroup answer: the next poll then never
    collects the round, so the member neither takes its partitions nor heartbeats. Asking to rejoin makes the next
    poll join again.
    """
    coordinator = consumer._coordinator
    task = getattr(coordinator, "_join_task", None)
    if task is not None and task.is_done and not coordinator.need_rejoin():
        logging.getLogger(__name__).warning("join round finished with no poll to collect it; rejoining")
        coordinator.request_rejoin()


def group_consume(a: dict) -> int:
    o = group_flags(a)
    if o["protocol"] != "classic":
        raise SystemExit("kafka-python speaks only the classic group protocol")
    # The coordinator's joins, syncs, heartbeat failures and rejoins go to the member's log (stderr), so a member
    # stuck in a rebalance shows where.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if os.environ.get("KAFKA_PYTHON_DEBUG"):
        # Every request and response of the member, and the coordinator's reasons to rejoin.
        for name in ("kafka.coordinator", "kafka.net.connection"):
            logging.getLogger(name).setLevel(logging.DEBUG)
    log = GroupLog(o["out"])
    stop = Stop()
    consumer = KafkaConsumer(
        bootstrap_servers=o["bootstrap"],
        group_id=o["group"],
        auto_offset_reset="earliest",
        enable_auto_commit=o["commit"] == "auto",
        auto_commit_interval_ms=500,
        partition_assignment_strategy=[ASSIGNORS[o["assignor"]]],
        session_timeout_ms=o["session_timeout_ms"],
        heartbeat_interval_ms=max(100, o["session_timeout_ms"] // 4),
        max_poll_interval_ms=o["max_poll_interval_ms"],
        # A topic created after a regex subscription is seen within seconds.
        metadata_max_age_ms=2000,
    )
    state = {"processed": {}, "active_since": None}

    def who():
        md = consumer.group_metadata()
        return md.member_id or "-", md.generation_id

    def take_processed(tps=None) -> dict:
        offsets = {
            tp: OffsetAndMetadata(off, "", -1)
            for tp, off in state["processed"].items()
            if tps is None or tp in tps
        }
        for tp in offsets:
            del state["processed"][tp]
        return offsets

    def log_commit(offsets: dict) -> None:
        log.line("commit " + ",".join(sorted(f"{tp.topic}:{tp.partition}={om.offset}" for tp, om in offsets.items())))

    def commit_processed() -> None:
        offsets = take_processed()
        if not offsets:
            return
        try:
            consumer.commit(offsets)
            log_commit(offsets)
        except KafkaError as e:
            # A member removed from the group cannot commit; the next owner reprocesses.
            log.line(f"commit-failed {type(e).__name__}")

    class Listener(AsyncConsumerRebalanceListener):
        # kafka-python 3 runs listeners on its IO loop, where the blocking commit() is refused; the
        # coordinator's awaitable synchronous commit is what commit() itself runs.
        async def on_partitions_revoked(self, revoked):
            tps = {TopicPartition(tp.topic, tp.partition) for tp in revoked}
            log.event("revoke", [(tp.topic, tp.partition) for tp in tps], *who())
            offsets = take_processed(tps) if o["commit"] != "auto" else {}
            if offsets:
                try:
                    await consumer._coordinator._commit_offsets_sync_async(offsets, timeout_ms=15000)
                    log_commit(offsets)
                except KafkaError as e:
                    log.line(f"commit-failed {type(e).__name__}")

        async def on_partitions_assigned(self, assigned):
            log.event("assign", [(tp.topic, tp.partition) for tp in assigned], *who())
            state["active_since"] = time.monotonic()

        async def on_partitions_lost(self, lost):
            log.event("lost", [(tp.topic, tp.partition) for tp in lost], *who())
            for tp in lost:
                state["processed"].pop(TopicPartition(tp.topic, tp.partition), None)

    if o["pattern"]:
        consumer.subscribe(pattern="^" + o["pattern"], listener=Listener())
    else:
        consumer.subscribe(topics=o["topics"], listener=Listener())
    count = 0
    stalled = False
    try:
        while (o["stop_after"] < 0 or count < o["stop_after"]) and not stop.requested:
            batches = consumer.poll(timeout_ms=200, max_records=100)
            rejoin_if_join_result_dropped(consumer)
            n = 0
            member, generation = who()
            for records in batches.values():
                for r in records:
                    log.record(r.topic, r.partition, r.offset, record_index(r.headers), member, generation)
                    state["processed"][TopicPartition(r.topic, r.partition)] = r.offset + 1
                    count += 1
                    n += 1
            if n:
                state["active_since"] = time.monotonic()
                if o["commit"] == "sync-after-processing":
                    commit_processed()
            elif idle_expired(o["idle_s"], state["active_since"], time.monotonic()):
                break
            if not stalled and 0 <= o["stall_after"] <= count:
                stalled = True
                log.line(f"stall {o['stall_s']}")
                time.sleep(o["stall_s"])
                log.line("resume")
        if stop.requested:
            log.line("wakeup")
        if o["commit"] != "auto":
            commit_processed()
    finally:
        # close() commits (autocommit) and leaves the group.
        consumer.close()
        log.line(f"closed {count}")
        log.close()
    return 0


def main() -> int:
    if len(sys.argv) < 2:
        raise SystemExit("usage: create-topic|produce|consume --bootstrap B --topic T ...")
    commands = {"create-topic": create_topic, "produce": produce, "consume": consume, "group-consume": group_consume}
    cmd = commands.get(sys.argv[1])
    if cmd is None:
        raise SystemExit(f"unknown command {sys.argv[1]}")
    return cmd(parse_flags(sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
