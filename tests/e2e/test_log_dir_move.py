"""Moving a partition between log dirs on a live broker (AlterReplicaLogDirs from kafka-clients' Admin), watched
with kafka-log-dirs (LogDirsCommand): the same test against fjord and Kafka.

A producer (acks=all, idempotent) keeps writing while partition 0 moves to the broker's other log dir; the move
finishes, kafka-log-dirs shows the partition in its new dir and no future replica, and a consumer reads back
exactly what was acknowledged. Kafka's errors for a dir that is not in log.dirs and for an unknown topic too.
"""

import json
import time
import uuid
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from harness import Broker, check_acks, check_consumed, ensure_running, fresh_seed, module_broker, read_acks
from harness import run_tool, start_tool
from test_groups_tools import kafka_tool

PARTITIONS = 2
COUNT = 20000


@pytest.fixture(scope="module")
def two_dir_broker(tmp_path_factory) -> Broker:
    yield from module_broker(tmp_path_factory.mktemp("two-dir-broker"), {}, log_dirs=2)


@pytest.fixture
def dbroker(two_dir_broker: Broker) -> Broker:
    return ensure_running(two_dir_broker)


def placement(b: Broker, topic: str) -> Dict[Tuple[str, bool], Path]:
    """{(partition name, is future): log dir} from kafka-log-dirs --describe."""
    out = kafka_tool("org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", b.bootstrap, "--describe",
                     "--topic-list", topic)
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    (only_broker,) = report["brokers"]
    found = {}
    for log_dir in only_broker["logDirs"]:
        assert log_dir["error"] is None, log_dir
        for p in log_dir["partitions"]:
            found[(p["partition"], p["isFuture"])] = Path(log_dir["logDir"]).resolve()
    return found


def alter(b: Broker, topic: str, partition: int, dir: Path) -> str:
    return run_tool("java", "alter-log-dir", bootstrap=b.bootstrap, topic=topic, partition=partition,
                    dir=str(dir)).stdout.strip()


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_partition_moves_to_another_log_dir_while_written(dbroker: Broker, tmp_path: Path):
    topic = f"move-{uuid.uuid4().hex[:8]}"
    dirs: List[Path] = [d.resolve() for d in dbroker.data_dirs]
    run_tool("java", "create-topic", bootstrap=dbroker.bootstrap, topic=topic, partitions=PARTITIONS)
    before = placement(dbroker, topic)
    source = before[(f"{topic}-0", False)]
    (dest,) = [d for d in dirs if d != source]
    untouched = before[(f"{topic}-1", False)]

    seed = fresh_seed()
    acked = tmp_path / "produce.out"
    producer = start_tool("java", "produce", tmp_path / "produce.log", bootstrap=dbroker.bootstrap, topic=topic,
                          count=COUNT, codec="none", acks="all", idempotent=True, seed=seed, out=acked)
    try:
        deadline = time.monotonic() + 120
        while count_lines(acked) < COUNT // 4:
            assert producer.poll() is None, (tmp_path / "produce.log").read_text()
            assert time.monotonic() < deadline, "producer made too little progress"
            time.sleep(0.05)
        assert alter(dbroker, topic, 0, dest) == "ok"
        rc = producer.wait(timeout=300)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    assert rc == 0, (tmp_path / "produce.log").read_text()[-4000:]

    deadline = time.monotonic() + 120
    while True:
        now = placement(dbroker, topic)
        if now.get((f"{topic}-0", False)) == dest and (f"{topic}-0", True) not in now:
            break
        assert time.monotonic() < deadline, f"the move did not finish: {now}"
        time.sleep(0.5)
    assert now[(f"{topic}-1", False)] == untouched
    assert not (source / f"{topic}-0").exists()

    acked_records = read_acks(acked)
    assert sorted(acked_records) == list(range(COUNT))
    check_acks(acked_records, PARTITIONS)
    out = tmp_path / "consume.out"
    run_tool("java", "consume", bootstrap=dbroker.bootstrap, topic=topic, partitions=PARTITIONS, expect=COUNT,
             out=out, timeout_s=180)
    check_consumed(out, seed, acked_records, PARTITIONS, exact=True)

    # Moving it where it is changes nothing.
    assert alter(dbroker, topic, 0, dest) == "ok"
    assert placement(dbroker, topic)[(f"{topic}-0", False)] == dest


def test_moves_the_broker_refuses(dbroker: Broker, tmp_path: Path):
    topic = f"move-bad-{uuid.uuid4().hex[:8]}"
    run_tool("java", "create-topic", bootstrap=dbroker.bootstrap, topic=topic, partitions=1)
    assert alter(dbroker, topic, 0, tmp_path / "not-a-log-dir") == "LogDirNotFoundException"
    dest = dbroker.data_dirs[1].resolve()
    assert alter(dbroker, f"no-such-{uuid.uuid4().hex[:8]}", 0, dest) == "UnknownTopicOrPartitionException"
