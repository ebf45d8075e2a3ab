"""Per-connection ordering: a request observes every earlier request of its connection.

- The raw-protocol tests of crates/fjord/tests/ordering.rs (pipelined OffsetCommits then OffsetFetch, Produce then
  ListOffsets/Fetch with acks=all and acks=0, CreateTopics then Metadata, DeleteGroups then DescribeGroups and
  OffsetFetch) run against this suite's broker, so that with E2E_BROKER=kafka the same frames go to Apache Kafka.
  One place where fjord goes beyond Kafka: a Metadata right behind a CreateTopics sees the topic on fjord; a KRaft
  broker may answer it before its metadata cache has the topic (the test then checks only Kafka's weaker promise).
- librdkafka (confluent-kafka): asynchronous commits after each message, then committed() on the same group must
  return the last commit.
"""

import os
import re
import subprocess
import time
import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition

from harness import REPO_ROOT, fresh_seed, run_tool


def test_raw_pipelined_requests_observe_earlier_ones(broker):
    env = dict(os.environ, FJORD_TEST_BOOTSTRAP=broker.bootstrap, FJORD_TEST_BROKER_KIND=broker.kind)
    # --workspace, not -p fjord: the same feature set as the test command's `cargo test --workspace`,
    # so the test binary it built is reused instead of rebuilding part of the workspace.
    proc = subprocess.run(
        ["cargo", "test", "-q", "--workspace", "--test", "ordering", "--", "--test-threads=1"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"ordering tests against {broker.kind}:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    # Every test of the file ran: none filtered out or skipped.
    source = (REPO_ROOT / "crates" / "fjord" / "tests" / "ordering.rs").read_text()
    tests = len(re.findall(r"#\[(?:tokio::)?test\b", source))
    assert f"{tests} passed" in proc.stdout, proc.stdout[-2000:]


def wait_for_coordinator(consumer: Consumer, topic: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            consumer.committed([TopicPartition(topic, 0)], timeout=10)
            return
        except KafkaException as e:
            # A coordinator still loading answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
            assert time.monotonic() < deadline, f"no group coordinator: {e}"
            time.sleep(0.5)


def test_confluent_async_commits_then_committed(broker, tmp_path):
    """Consume 50 records committing asynchronously after each, then committed() must say 50 — five runs."""
    topic = f"ordering-commits-{uuid.uuid4().hex[:8]}"
    run_tool("go", "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=1)
    run_tool("go", "produce", bootstrap=broker.bootstrap, topic=topic, count=60, codec="none", acks="all",
             seed=fresh_seed(), out=tmp_path / "produce.out")
    results = []
    failed_commits = []
    for run in range(5):
        def on_commit(err, partitions):
            if err is not None or any(p.error is not None for p in partitions):
                failed_commits.append((run, str(err), [str(p.error) for p in partitions]))

        consumer = Consumer({
            "on_commit": on_commit,
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"ordering-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        })
        try:
            # The coordinator is known before the first commit: librdkafka itself holds back commits
            # made while it looks the coordinator up and may send them after a later OffsetFetch.
            wait_for_coordinator(consumer, topic)
            consumer.assign([TopicPartition(topic, 0, 0)])
            consumed = 0
            deadline = time.monotonic() + 60
            while consumed < 50:
                assert time.monotonic() < deadline, f"run {run}: consumed only {consumed} records"
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                assert msg.offset() == consumed
                # rd_kafka_commit(rk, NULL, async): the consumed position, without waiting.
                consumer.commit(asynchronous=True)
                consumed += 1
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)
            results.append(committed[0].offset)
        finally:
            consumer.close()
    assert not failed_commits, f"commits failed: {failed_commits[:5]}"
    assert results == [50] * 5, f"committed() after async commits up to offset 50: {results}"
