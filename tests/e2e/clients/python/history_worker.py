"""A librdkafka (confluent-kafka) client for the fault trials, writing its history as it goes.

    produce BOOTSTRAP TOPIC PARTITIONS PREFIX RATE SECONDS OUT
        An idempotent acks=all producer: values PREFIX.0, PREFIX.1, ... (value n to partition n % PARTITIONS) at
        about RATE a second for SECONDS, then up to 60 s for the outstanding ones. One line per outcome:
        `ok PARTITION OFFSET VALUE` or `err VALUE ERROR`; a value without a line was never answered.
    read BOOTSTRAP TOPIC PARTITIONS OUT
        Reads every partition from offset 0 until SIGTERM: `PARTITION OFFSET VALUE` per record it was given.

Lines are flushed one by one, so a history survives the worker being killed. HISTORY_CLIENT_CONFIG, when set, is
a JSON object of librdkafka settings both add (a secured cluster's login, say).
"""

import json
import os
import signal
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

stop = False
CLIENT = json.loads(os.environ.get("HISTORY_CLIENT_CONFIG", "{}"))


def on_term(*_):
    global stop
    stop = True


def produce(bootstrap, topic, partitions, prefix, rate, seconds, out_path):
    p = Producer({**CLIENT, "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 30000, "request.timeout.ms": 10000})
    with open(out_path, "w", encoding="ascii") as out:

        def on_delivery(err, msg):
            value = msg.value().decode()
            if err is not None:
                out.write(f"err {value} {err.name()}\n")
            else:
                out.write(f"ok {msg.partition()} {msg.offset()} {value}\n")
            out.flush()

        start = time.monotonic()
        n = 0
        while not stop and time.monotonic() - start < seconds:
            due = start + n / rate
            while time.monotonic() < due:
                p.poll(min(0.05, max(0.0, due - time.monotonic())))
            p.produce(topic, value=f"{prefix}.{n}", partition=n % partitions, on_delivery=on_delivery)
            n += 1
            p.poll(0)
        p.flush(60)
    return 0


def read(bootstrap, topic, partitions, out_path):
    c = Consumer({**CLIENT, "bootstrap.servers": bootstrap, "group.id": "history-reader", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    with open(out_path, "w", encoding="ascii") as out:
        while not stop:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            out.write(f"{m.partition()} {m.offset()} {m.value().decode()}\n")
            out.flush()
    c.close()
    return 0


def main(argv):
    signal.signal(signal.SIGTERM, on_term)
    cmd, args = argv[1], argv[2:]
    if cmd == "produce":
        b, t, parts, prefix, rate, seconds, out = args
        return produce(b, t, int(parts), prefix, float(rate), float(seconds), out)
    if cmd == "read":
        b, t, parts, out = args
        return read(b, t, int(parts), out)
    raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
