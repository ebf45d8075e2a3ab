"""The e2e client tool for kafka-python: create-topic, produce and consume."""

import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from recordgen import consume_line, generate, parse_flags


def create_topic(a: dict) -> int:
    admin = KafkaAdminClient(bootstrap_servers=a["bootstrap"])
    try:
        admin.create_topics({a["topic"]: {"num_partitions": int(a["partitions"]), "replication_factor": 1}})
    finally:
        admin.close()
    return 0


def produce(a: dict) -> int:
    topic, seed, count = a["topic"], int(a["seed"]), int(a["count"])
    producer = KafkaProducer(
        bootstrap_servers=a["bootstrap"],
        acks="all" if a["acks"] == "all" else int(a["acks"]),
        compression_type=None if a["codec"] == "none" else a["codec"],
        enable_idempotence=bool(a.get("idempotent")),
        # Long enough to ride out a broker restart in the kill -9 test.
        delivery_timeout_ms=120000,
        request_timeout_ms=15000,
        linger_ms=5,
    )
    partitions = len(producer.partitions_for(topic))
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
        producer.close()
    if failed:
        print(f"produce: {len(failed)} failed; first failure: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def consume(a: dict) -> int:
    topic, partitions, expect = a["topic"], int(a["partitions"]), int(a["expect"])
    deadline = time.monotonic() + float(a["timeout-s"])
    # group_id=None: partitions are assigned by hand and no offsets are committed.
    consumer = KafkaConsumer(bootstrap_servers=a["bootstrap"], group_id=None, enable_auto_commit=False)
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


def main() -> int:
    if len(sys.argv) < 2:
        raise SystemExit("usage: create-topic|produce|consume --bootstrap B --topic T ...")
    commands = {"create-topic": create_topic, "produce": produce, "consume": consume}
    cmd = commands.get(sys.argv[1])
    if cmd is None:
        raise SystemExit(f"unknown command {sys.argv[1]}")
    return cmd(parse_flags(sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
