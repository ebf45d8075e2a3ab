"""The e2e client tool for confluent-kafka (librdkafka): create-topic, produce and consume."""

import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from recordgen import consume_line, generate, parse_flags


def create_topic(a: dict) -> int:
    admin = AdminClient({"bootstrap.servers": a["bootstrap"]})
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
            "acks": a["acks"],
            "compression.codec": a["codec"],
            "enable.idempotence": bool(a.get("idempotent")),
            # Long enough to ride out a broker restart in the kill -9 test.
            "message.timeout.ms": 120000,
            "request.timeout.ms": 15000,
            "linger.ms": 5,
            "queue.buffering.max.messages": 100000,
        }
    )
    partitions = partition_count(producer, topic)
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
