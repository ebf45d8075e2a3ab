"""Every client × codec: produce, consume, restart the broker, consume again byte for byte."""

import os

import pytest

from harness import CLIENTS, CODECS, FULL_MATRIX, check_acks, check_consumed, fresh_seed, read_acks, run_tool

PARTITIONS = 3
# Records per matrix test: E2E_ROUNDTRIP_RECORDS, default 30,000 (hundreds of batches per codec); 100,000 or more
# for a longer run.
RECORDS = int(os.environ.get("E2E_ROUNDTRIP_RECORDS", "30000"))

# Every client with every codec; in the test command each codec once, with the clients taking turns (and
# `test_roundtrip_small` gives each client another codec).
MATRIX = ([(client, codec) for client in CLIENTS for codec in CODECS] if FULL_MATRIX
          else [(CLIENTS[i % len(CLIENTS)], codec) for i, codec in enumerate(CODECS)])


def roundtrip(broker, tmp_path, client: str, codec: str, count: int, seed: int, acks: str) -> None:
    topic = f"roundtrip-{client}-{codec}-{count}"
    run_tool(client, "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=PARTITIONS)
    acked = tmp_path / "produce.out"
    run_tool(
        client,
        "produce",
        bootstrap=broker.bootstrap,
        topic=topic,
        count=count,
        codec=codec,
        acks=acks,
        seed=seed,
        out=acked,
    )
    acked_records = read_acks(acked)
    # The tool exits 0 only when every send succeeded, so every record must be in the file.
    assert sorted(acked_records) == list(range(count))
    check_acks(acked_records, PARTITIONS)

    def consume(name: str):
        out = tmp_path / name
        run_tool(
            client,
            "consume",
            bootstrap=broker.bootstrap,
            topic=topic,
            partitions=PARTITIONS,
            expect=count,
            out=out,
            timeout_s=120,
        )
        return out

    first = consume("consume-1.out")
    check_consumed(first, seed, acked_records, PARTITIONS, exact=True)

    broker.restart()
    second = consume("consume-2.out")
    assert second.read_bytes() == first.read_bytes(), "records changed across a broker restart"


@pytest.mark.slow
@pytest.mark.parametrize(("client", "codec"), MATRIX, ids=[f"{c}-{z}" for c, z in MATRIX])
def test_roundtrip(broker, tmp_path, client, codec):
    # Half the matrix waits only for the leader, the rest for the full ISR.
    acks = "1" if codec in ("gzip", "lz4") else "all"
    # kafka-python is pure Python: a fifth of the records (still hundreds of batches) take it as long as the
    # others take theirs.
    count = RECORDS // 5 if client == "kafka-python" else RECORDS
    roundtrip(broker, tmp_path, client, codec, count=count, seed=fresh_seed(), acks=acks)


@pytest.mark.parametrize("client", CLIENTS)
def test_roundtrip_small(broker, tmp_path, client):
    """A quick pass of the same path: a few thousand records, one codec per client."""
    codec = CODECS[1 + CLIENTS.index(client)]
    roundtrip(broker, tmp_path, client, codec, count=3_000, seed=fresh_seed(), acks="all")
