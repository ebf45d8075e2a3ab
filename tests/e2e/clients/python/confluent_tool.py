"""The e2e client tool for confluent-kafka (librdkafka): create-topic, produce, consume and group-consume."""

import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from grouplog import GroupLog, Stop, group_flags, idle_expired, record_index
from recordgen import client_config, consume_line, generate, parse_flags


def create_topic(a: dict) -> int:
    admin = AdminClient({"bootstrap.servers": a["bootstrap"], **client_config(a)})
    futures = admin.create_topics([NewTopic(a["topic"], num_partitions=int(a["partitions"]), replication_factor=1)])
    for f in futures.values():
        f.result(timeout=60)
    return 0


def partition_count(client, topic: str) -> int:
    # Metadata for a just-created topic can lag briefly; ask again until it is there.
    deadline = time.monotonic() + 30
    while True:
        md = client.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and md.partitions:
            return len(md.partitions)
        if time.monotonic() > deadline:
            raise SystemExit(f"no metadata for topic {topic}")
        time.sleep(0.2)


def produce(a: dict) -> int:
    topic, seed, count = a["topic"], int(a["seed"]), int(a["count"])
    producer = Producer(
        {
            "bootstrap.servers": a["bootstrap"],
            **client_config(a),
            "acks": a["acks"],
            "compression.codec": a["codec"],
            "enable.idempotence": bool(a.get("idempotent")) or "transactional-id" in a,
            # With --transactional-id, every record in one transaction, committed once all are acknowledged.
            **({"transactional.id": a["transactional-id"], "transaction.timeout.ms": 120000}
               if "transactional-id" in a else {}),
            # Long enough to ride out a broker restart in the kill -9 test.
            "message.timeout.ms": 120000,
            "request.timeout.ms": 15000,
            "linger.ms": 5,
            "queue.buffering.max.messages": 100000,
        }
    )
    partitions = partition_count(producer, topic)
    if "transactional-id" in a:
        producer.init_transactions(60)
        producer.begin_transaction()
    failed = []
    with open(a["out"], "w", encoding="ascii") as out:

        def on_delivery(i, err, msg):
            if err is not None:
                failed.append((i, err))
                return
            out.write(f"{i} {msg.partition()} {msg.offset()}\n")
            out.flush()

        for i in range(count):
            r = generate(seed, i)
            while True:
                try:
                    producer.produce(
                        topic,
                        value=r.value,
                        key=r.key,
                        partition=i % partitions,
                        timestamp=r.timestamp,
                        headers=r.headers,
                        on_delivery=lambda err, msg, i=i: on_delivery(i, err, msg),
                    )
                    break
                except BufferError:
                    # Local queue full: serve delivery reports until there is room.
                    producer.poll(0.05)
            producer.poll(0)
        remaining = producer.flush(180)
        if "transactional-id" in a and not remaining and not failed:
            producer.commit_transaction(60)
    if remaining or failed:
        first = failed[0] if failed else None
        print(f"produce: {len(failed)} failed, {remaining} undelivered; first failure: {first}", file=sys.stderr)
        return 1
    return 0


def consume(a: dict) -> int:
    topic, partitions, expect = a["topic"], int(a["partitions"]), int(a["expect"])
    deadline = time.monotonic() + float(a["timeout-s"])
    # librdkafka insists on a group.id, but with assign() and nothing committed or stored it never joins
    # the group; it only looks up the coordinator, which a broker without groups may refuse harmlessly.
    consumer = Consumer(
        {
            "bootstrap.servers": a["bootstrap"],
            **client_config(a),
            "group.id": f"fjord-e2e-{os.getpid()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    rows = []
    try:
        while len(rows) < expect and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    if msg.error().fatal():
                        raise KafkaException(msg.error())
                    print(f"consume: {msg.error()}", file=sys.stderr)
                    continue
                _, ts = msg.timestamp()
                line = consume_line(msg.partition(), msg.offset(), ts, msg.key(), msg.value(), msg.headers())
                rows.append((msg.partition(), msg.offset(), line))
    finally:
        consumer.close()
    rows.sort()
    with open(a["out"], "w", encoding="ascii") as out:
        out.writelines(line + "\n" for _, _, line in rows)
    if len(rows) < expect:
        print(f"consume: timed out with {len(rows)} of {expect} records", file=sys.stderr)
        return 3
    return 0


def produce_kv(a: dict) -> int:
    """Sends the `key-hex value-hex|-` lines of --input in order to partition 0; waits for every ack."""
    producer = Producer({"bootstrap.servers": a["bootstrap"], "acks": "all", "linger.ms": 5,
                         "enable.idempotence": bool(a.get("idempotent")),
                         "compression.codec": a.get("codec", "none")})
    failed = []
    with open(a["input"], encoding="ascii") as lines:
        for line in lines:
            key, value = line.split()
            while True:
                try:
                    producer.produce(a["topic"], key=bytes.fromhex(key),
                                     value=None if value == "-" else bytes.fromhex(value), partition=0,
                                     on_delivery=lambda err, _msg: failed.append(err) if err else None)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining or failed:
        print(f"produce-kv: {len(failed)} failed, {remaining} undelivered; first: {failed[:1]}", file=sys.stderr)
        return 1
    return 0


def dump(a: dict) -> int:
    """Writes every record of partition 0 from the log start to the end offset seen at start: offset key value."""
    deadline = time.monotonic() + float(a["timeout-s"])
    consumer = Consumer({"bootstrap.servers": a["bootstrap"], "group.id": f"fjord-e2e-{os.getpid()}",
                         "enable.auto.commit": False, "enable.auto.offset.store": False})
    tp = TopicPartition(a["topic"], 0)
    _, end = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    consumer.assign([TopicPartition(a["topic"], 0, OFFSET_BEGINNING)])
    last = -1
    try:
        with open(a["out"], "w", encoding="ascii") as out:
            while last < end - 1:
                if time.monotonic() > deadline:
                    print(f"dump: timed out at {last} of {end}", file=sys.stderr)
                    return 3
                for msg in consumer.consume(num_messages=1000, timeout=0.2):
                    if msg.error() is not None:
                        if msg.error().fatal():
                            raise KafkaException(msg.error())
                        continue
                    last = msg.offset()
                    key = "-" if msg.key() is None else msg.key().hex()
                    value = "-" if msg.value() is None else msg.value().hex()
                    out.write(f"{last} {key} {value}\n")
    finally:
        consumer.close()
    return 0


def group_consume(a: dict) -> int:
    o = group_flags(a)
    log = GroupLog(o["out"])
    stop = Stop()
    conf = {
        "bootstrap.servers": o["bootstrap"],
        "group.id": o["group"],
        "group.protocol": o["protocol"],
        "auto.offset.reset": "earliest",
        # Offsets are stored only after a record is processed, so autocommit never covers an unprocessed one.
        "enable.auto.offset.store": False,
        "enable.auto.commit": o["commit"] == "auto",
        "auto.commit.interval.ms": 500,
        "max.poll.interval.ms": o["max_poll_interval_ms"],
        # A topic created after a regex subscription is seen within seconds.
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if o["protocol"] == "classic":
        # With the consumer protocol the broker owns timeouts and assignment; librdkafka rejects these.
        conf["session.timeout.ms"] = o["session_timeout_ms"]
        conf["heartbeat.interval.ms"] = max(100, o["session_timeout_ms"] // 4)
        conf["partition.assignment.strategy"] = o["assignor"]
    consumer = Consumer(conf)
    state = {"processed": {}, "active_since": None}

    def who():
        return consumer.memberid() or "-"

    def commit_processed(tps=None):
        offsets = [
            TopicPartition(t, p, off)
            for (t, p), off in sorted(state["processed"].items())
            if tps is None or (t, p) in tps
        ]
        for tp in offsets:
            del state["processed"][(tp.topic, tp.partition)]
        if not offsets:
            return
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
            errors = [tp for tp in result or [] if tp.error is not None]
            if errors:
                raise KafkaException(errors[0].error)
            log.line("commit " + ",".join(sorted(f"{tp.topic}:{tp.partition}={tp.offset}" for tp in offsets)))
        except KafkaException as e:
            # A member removed from the group cannot commit; the next owner reprocesses.
            log.line(f"commit-failed {str(e.args[0]).replace(chr(10), ' ')}")

    def on_assign(_c, parts):
        log.event("assign", [(tp.topic, tp.partition) for tp in parts], who(), -1)
        state["active_since"] = time.monotonic()

    def on_revoke(_c, parts):
        tps = {(tp.topic, tp.partition) for tp in parts}
        log.event("revoke", tps, who(), -1)
        if o["commit"] != "auto":
            commit_processed(tps)

    def on_lost(_c, parts):
        tps = {(tp.topic, tp.partition) for tp in parts}
        log.event("lost", tps, who(), -1)
        for tp in tps:
            state["processed"].pop(tp, None)

    subscription = ["^" + o["pattern"]] if o["pattern"] else o["topics"]
    consumer.subscribe(subscription, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    count = 0
    stalled = False
    try:
        while (o["stop_after"] < 0 or count < o["stop_after"]) and not stop.requested:
            msgs = consumer.consume(num_messages=100, timeout=0.2)
            n = 0
            for msg in msgs:
                if msg.error() is not None:
                    if msg.error().fatal():
                        raise KafkaException(msg.error())
                    log.line(f"error {msg.error()}")
                    continue
                log.record(msg.topic(), msg.partition(), msg.offset(), record_index(msg.headers()), who(), -1)
                state["processed"][(msg.topic(), msg.partition())] = msg.offset() + 1
                if o["commit"] == "auto":
                    consumer.store_offsets(message=msg)
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
        # close() revokes (running on_revoke) and leaves the group; autocommit commits stored offsets first.
        consumer.close()
        log.line(f"closed {count}")
        log.close()
    return 0


def main() -> int:
    if len(sys.argv) < 2:
        raise SystemExit("usage: create-topic|produce|consume --bootstrap B --topic T ...")
    commands = {"create-topic": create_topic, "produce": produce, "consume": consume, "group-consume": group_consume,
                "produce-kv": produce_kv, "dump": dump}
    cmd = commands.get(sys.argv[1])
    if cmd is None:
        raise SystemExit(f"unknown command {sys.argv[1]}")
    return cmd(parse_flags(sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
