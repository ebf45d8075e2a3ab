"""Log compaction with real clients (kafka-clients and confluent-kafka), the same test against fjord and Kafka.

A compacted topic takes many updates of 60 keys, the last round deleting every fourth key, then filler records
that seal the segments holding them. The broker's cleaner must leave, to a consumer reading from the start,
exactly the latest value of every key (the deleted ones as tombstones), offsets strictly increasing with the
gaps compaction leaves; once delete.retention.ms has passed, later passes drop the tombstones and nothing else.

Runs on this module's own broker with log.cleaner.backoff.ms=500. segment.bytes is 1 MiB, Kafka 4.x's minimum,
so the values are 4 KiB each.
"""

import hashlib
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Broker, ensure_running, module_broker, run_tool

COMPACTION_BROKER_PROPS = {"log.cleaner.backoff.ms": "500"}
KEYS = 60
ROUNDS = 8
VALUE_BYTES = 4096
FILLER = 300  # 1.2 MB: rolls past the segment holding the last round
DELETE_RETENTION_MS = 8000

Record = Tuple[int, str, Optional[bytes]]


@pytest.fixture(scope="module")
def compaction_broker(tmp_path_factory) -> Broker:
    yield from module_broker(tmp_path_factory.mktemp("compaction-broker"), COMPACTION_BROKER_PROPS)


@pytest.fixture
def cbroker(compaction_broker: Broker) -> Broker:
    return ensure_running(compaction_broker)


def value(key: str, version: int) -> bytes:
    """Incompressible, so that the records fill segments whatever the codec."""
    seed = f"{key}:{version}".encode()
    blocks = (hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(VALUE_BYTES // 32))
    return b"".join(blocks)


def workload() -> List[Tuple[str, Optional[bytes]]]:
    """ROUNDS rounds over every key, the last one over the even keys only, deleting every fourth: the latest
    values are spread over two rounds, so compaction leaves gaps between them."""
    writes = []
    for version in range(ROUNDS):
        for k in range(KEYS):
            key = f"k{k:03d}"
            last = version == ROUNDS - 1
            if last and k % 2 == 1:
                continue
            writes.append((key, None if last and k % 4 == 0 else value(key, version)))
    return writes


def filler(start: int) -> List[Tuple[str, Optional[bytes]]]:
    return [(f"filler-{i:06d}", value("filler", i)) for i in range(start, start + FILLER)]


def produce(client: str, b: Broker, topic: str, records, tmp: Path) -> None:
    path = tmp / f"input-{uuid.uuid4().hex[:6]}.txt"
    path.write_text("".join(f"{k.encode().hex()} {'-' if v is None else v.hex()}\n" for k, v in records))
    run_tool(client, "produce-kv", bootstrap=b.bootstrap, topic=topic, input=path, idempotent=True,
             codec="lz4")


def dump(client: str, b: Broker, topic: str, tmp: Path) -> List[Record]:
    out = tmp / "dump.txt"
    run_tool(client, "dump", bootstrap=b.bootstrap, topic=topic, out=out, timeout_s=60)
    records = []
    for line in out.read_text().splitlines():
        offset, key, val = line.split()
        records.append((int(offset), bytes.fromhex(key).decode(), None if val == "-" else bytes.fromhex(val)))
    return records


def data_records(records: List[Record]) -> List[Record]:
    return [r for r in records if r[1].startswith("k")]


def wait_until(what: str, predicate, timeout_s: float = 90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout_s} s")


@pytest.mark.parametrize("client", ["java", "confluent"])
def test_compaction_keeps_the_latest_value_of_every_key(cbroker: Broker, client: str, tmp_path: Path):
    topic = f"compacted-{client}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
    configs = {"cleanup.policy": "compact", "segment.bytes": str(1024 * 1024), "min.cleanable.dirty.ratio": "0.01",
               "delete.retention.ms": str(DELETE_RETENTION_MS)}
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=configs)])[topic].result(30)
    writes = workload()
    expected: Dict[str, Optional[bytes]] = {}
    for key, val in writes:
        expected[key] = val
    produce(client, cbroker, topic, writes + filler(0), tmp_path)
    written = len(writes) + FILLER

    def compacted():
        records = dump(client, cbroker, topic, tmp_path)
        keys = [k for _, k, _ in data_records(records)]
        return records if len(keys) == KEYS and len(set(keys)) == KEYS else None

    records = wait_until("every data key once", compacted)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets strictly increasing"
    assert offsets[-1] == written - 1, "the tail is never cleaned away"
    data_offsets = [o for o, _, _ in data_records(records)]
    assert data_offsets != list(range(data_offsets[0], data_offsets[0] + len(data_offsets))), "gaps between kept records"
    latest = {k: v for _, k, v in data_records(records)}
    assert latest == expected, "the latest value of every key, deleted keys as tombstones"
    assert sum(v is None for v in latest.values()) == KEYS // 4

    # Past delete.retention.ms, passes made by more filler drop the tombstones.
    time.sleep(DELETE_RETENTION_MS / 1000)
    live = {k: v for k, v in expected.items() if v is not None}
    round_ = [1]

    def tombstones_gone():
        produce(client, cbroker, topic, filler(round_[0] * FILLER), tmp_path)
        round_[0] += 1
        records = dump(client, cbroker, topic, tmp_path)
        latest = {k: v for _, k, v in data_records(records)}
        return records if latest == live else None

    records = wait_until("tombstones removed", tombstones_gone)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert len(data_records(records)) == len(live), "each live key once, no tombstone"
