"""kill -9 the broker under an idempotent acks=all producer; nothing acknowledged may be lost or doubled."""

import time

import pytest

from harness import CLIENTS, check_acks, check_consumed, fresh_seed, read_acks, run_tool, start_tool

PARTITIONS = 3
COUNT = 200_000
# kafka-python is pure Python: a quarter of the records keep it as busy for as long.
COUNTS = {"kafka-python": COUNT // 4}


def count_lines(path) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS)
def test_kill9_idempotent(broker, tmp_path, client):
    count = COUNTS.get(client, COUNT)
    seed = fresh_seed()
    topic = f"kill9-{client}"
    run_tool(client, "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=PARTITIONS)
    acked = tmp_path / "produce.out"
    producer = start_tool(
        client,
        "produce",
        tmp_path / "produce.log",
        bootstrap=broker.bootstrap,
        topic=topic,
        count=count,
        codec="lz4",
        acks="all",
        idempotent=True,
        seed=seed,
        out=acked,
    )
    try:
        # Kill once a quarter is acknowledged, so the producer has more in flight and more to send.
        deadline = time.monotonic() + 180
        while count_lines(acked) < count // 4:
            assert producer.poll() is None, f"producer exited early: {(tmp_path / 'produce.log').read_text()}"
            assert time.monotonic() < deadline, "producer made too little progress"
            time.sleep(0.02)
        acked_at_kill = count_lines(acked)
        broker.kill9()
        time.sleep(1)
        broker.start()
        rc = producer.wait(timeout=300)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    log = (tmp_path / "produce.log").read_text(errors="replace")
    assert rc == 0, f"producer failed after the restart:\n{log[-4000:]}"
    assert acked_at_kill < count, "the producer finished before the kill; nothing was tested"

    acked_records = read_acks(acked)
    assert sorted(acked_records) == list(range(count))
    check_acks(acked_records, PARTITIONS)
    out = tmp_path / "consume.out"
    run_tool(
        client,
        "consume",
        bootstrap=broker.bootstrap,
        topic=topic,
        partitions=PARTITIONS,
        expect=count,
        out=out,
        timeout_s=180,
    )
    # Every record was acknowledged, so with idempotence the log must hold each exactly once.
    check_consumed(out, seed, acked_records, PARTITIONS, exact=True)
