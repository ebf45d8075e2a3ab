"""A Kafka Streams application with processing.guarantee=exactly_once_v2 (a word count with a repartition topic and a
changelog topic, the `kafka-streams` artifact), for test_streams.py (one node) and test_replication.py (three
nodes): killed with SIGKILL mid-stream and restarted, every word's counts in the output, read as read_committed, are
exactly 1, 2, 3, ... up to its true count — no count lost, none written twice."""

import signal
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Optional

from confluent_kafka import Producer

from harness import client_java, create_topics, read_until_quiet, wait_for

WORDS = [f"w{i:02d}" for i in range(24)]
LINES = 3000
PARTITIONS = 2


def word_count(bootstrap: str, app_id: str, in_topic: str, out_topic: str, state_dir, replication_factor: int,
               log) -> subprocess.Popen:
    return subprocess.Popen([*client_java(), "dev.fjord.e2e.WordCount", bootstrap, app_id, in_topic, out_topic,
                             str(state_dir), str(replication_factor)], stdout=log, stderr=subprocess.STDOUT)


def read_counts(bootstrap: str, topic: str, expect: int, wait_s: float = 120) -> dict:
    """word -> the counts the output holds for it, in offset order (read_committed), once `expect` arrived (and
    a quiet spell after, so that anything extra shows too)."""
    counts = defaultdict(list)
    for m in read_until_quiet(bootstrap, topic, PARTITIONS, expect, wait_s=wait_s):
        counts[m.key().decode()].append(int.from_bytes(m.value(), "big", signed=True))
    return counts


def count_words_exactly_once(bootstrap: str, workdir: Path, replication_factor: int,
                             server_fault: Optional[Callable[[str], None]] = None) -> None:
    """The word count, fed while it runs, killed once a third of the words are counted and restarted with its state
    dir gone (its counts come back from the changelog alone); `server_fault`, given the output topic, then kills
    and restarts a server while the new instance restores and counts the rest. Topics, internal ones too, have
    `replication_factor` replicas."""
    tag = uuid.uuid4().hex[:8]
    in_topic, out_topic, app_id = f"wc-in-{tag}", f"wc-out-{tag}", f"wordcount-{tag}"
    create_topics(bootstrap, [in_topic, out_topic], PARTITIONS, replication_factor)
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + i % 3)) for i in range(LINES)]
    expected = Counter(word for line in lines for word in line.split())

    # The input arrives while the application runs, so that the kill lands mid-stream.
    def feed():
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i, line in enumerate(lines):
            p.produce(in_topic, key=str(i).encode(), value=line.encode())
            if i % 100 == 99:
                p.flush(60)
                time.sleep(0.05)
        p.flush(60)
    feeder = threading.Thread(target=feed)

    out = workdir / "wordcount.out"
    log = open(out, "ab")
    app = word_count(bootstrap, app_id, in_topic, out_topic, workdir / "state-1", replication_factor, log)
    try:
        wait_for(lambda: b"STATE RUNNING" in out.read_bytes(), "the word count running", 120)
        feeder.start()
        wait_for(lambda: sum(len(v) for v in read_counts(bootstrap, out_topic, 0, 0.5).values())
                 > sum(expected.values()) // 3, "a third of the counts", 120)
        app.send_signal(signal.SIGKILL)
        app.wait(30)
        app = word_count(bootstrap, app_id, in_topic, out_topic, workdir / "state-2", replication_factor, log)
        if server_fault is not None:
            server_fault(out_topic)
        feeder.join(120)
        counts = read_counts(bootstrap, out_topic, sum(expected.values()))
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait(30)
        log.close()
    wrong = {w: counts.get(w, [])[-5:] for w in expected if counts.get(w) != list(range(1, expected[w] + 1))}
    assert not wrong, f"counts not exactly 1..n: {wrong} (expected {dict(expected)})"
