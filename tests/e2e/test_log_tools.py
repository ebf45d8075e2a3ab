"""Kafka's own log tools against the broker: kafka-delete-records (DeleteRecordsCommand) and kafka-log-dirs
(LogDirsCommand), kafka-configs (ConfigCommand) on topics, one broker and the cluster-wide broker default, and
kafka-topics (TopicCommand) --describe / --alter, all from kafka-tools."""

import json
import re
import subprocess
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from harness import Broker, fresh_seed, kafka_tool, kafka_tools_java, run_tool


def watermarks(b: Broker, topic: str, partition: int):
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "log-tools-probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        consumer.close()


def test_kafka_delete_records(broker: Broker, tmp_path: Path):
    topic = f"delete-records-{uuid.uuid4().hex[:8]}"
    run_tool("go", "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=2)
    run_tool("go", "produce", bootstrap=broker.bootstrap, topic=topic, count=200, codec="none", acks="all",
             seed=fresh_seed(), out=tmp_path / "produce.out")
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 40},
        {"topic": topic, "partition": 1, "offset": -1},  # up to the high watermark
    ]}))
    out = kafka_tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", broker.bootstrap,
                     "--offset-json-file", str(plan))
    lows = {int(p): int(low) for p, low in re.findall(rf"partition: {re.escape(topic)}-(\d+)\s+low_watermark: (\d+)", out)}
    assert lows == {0: 40, 1: 100}, out
    assert watermarks(broker, topic, 0) == (40, 100)
    assert watermarks(broker, topic, 1) == (100, 100)
    # Beyond the high watermark: the tool reports the partition's error.
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 1000}]}))
    out = kafka_tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", broker.bootstrap,
                     "--offset-json-file", str(plan))
    assert "OffsetOutOfRangeException" in out or "out of range" in out.lower(), out
    assert watermarks(broker, topic, 0) == (40, 100)


def test_kafka_log_dirs_describe(broker: Broker, tmp_path: Path):
    topic = f"log-dirs-{uuid.uuid4().hex[:8]}"
    run_tool("go", "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=2)
    run_tool("go", "produce", bootstrap=broker.bootstrap, topic=topic, count=100, codec="none", acks="all",
             seed=fresh_seed(), out=tmp_path / "produce.out")
    out = kafka_tool("org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", broker.bootstrap, "--describe",
                     "--topic-list", topic)
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    (only_broker,) = report["brokers"]
    (log_dir,) = only_broker["logDirs"]
    assert log_dir["error"] is None, log_dir
    assert Path(log_dir["logDir"]).resolve() == broker.data_dir.resolve()
    partitions = {p["partition"]: p for p in log_dir["partitions"]}
    assert set(partitions) == {f"{topic}-0", f"{topic}-1"}, partitions
    for p in partitions.values():
        # Each partition holds 50 records of at least 10 bytes each.
        assert p["size"] > 50 * 10 and p["offsetLag"] == 0 and p["isFuture"] is False, p


def kafka_configs(b: Broker, *args: str) -> str:
    return kafka_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", b.bootstrap, *args)


def described(out: str, name: str):
    """The value of `name` in a kafka-configs --describe listing (`name=value sensitive=... synonyms={...}`)."""
    for line in out.splitlines():
        line = line.strip()
        if line.startswith(name + "="):
            return line[len(name) + 1:].split(" sensitive=")[0]
    return None


def test_kafka_configs_topic_alter_describe_delete(broker: Broker):
    topic = f"configs-{uuid.uuid4().hex[:8]}"
    run_tool("go", "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=1)
    entity = ["--entity-type", "topics", "--entity-name", topic]
    kafka_configs(broker, *entity, "--alter", "--add-config", "retention.ms=1234567,cleanup.policy=[compact,delete]")
    out = kafka_configs(broker, *entity, "--describe")
    assert described(out, "retention.ms") == "1234567", out
    assert described(out, "cleanup.policy") == "compact,delete", out
    out = kafka_configs(broker, *entity, "--describe", "--all")
    assert described(out, "retention.ms") == "1234567", out
    assert described(out, "segment.bytes") == "1073741824", out  # a default, listed with --all
    # kafka-topics shows the topic's own configs, and --alter grows it.
    topics = ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.bootstrap, "--topic", topic]
    out = kafka_tool(*topics, "--describe")
    assert "retention.ms=1234567" in out and "cleanup.policy=compact,delete" in out, out
    kafka_tool(*topics, "--alter", "--partitions", "2")
    out = kafka_tool(*topics, "--describe")
    assert "PartitionCount: 2" in out, out
    kafka_configs(broker, *entity, "--alter", "--delete-config", "retention.ms")
    out = kafka_configs(broker, *entity, "--describe")
    assert described(out, "retention.ms") is None, out
    assert described(out, "cleanup.policy") == "compact,delete", out
    # An invalid value is refused and changes nothing.
    proc = subprocess.run([*kafka_tools_java(),
                           "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker.bootstrap, *entity,
                           "--alter", "--add-config", "retention.ms=soon"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "retention.ms" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert described(kafka_configs(broker, *entity, "--describe"), "retention.ms") is None


def described_line(out: str, name: str):
    """The whole `name=value sensitive=... synonyms={...}` line of a kafka-configs listing."""
    for line in out.splitlines():
        if line.strip().startswith(name + "="):
            return line.strip()
    return None


def test_kafka_configs_broker_and_cluster_default(broker: Broker):
    """Dynamic broker configs for broker 1 and for every broker, with Kafka's sources and synonyms; a topic
    without an override inherits them. (delete.retention.ms: harmless to the suite's other topics.)"""
    key = "log.cleaner.delete.retention.ms"
    one = ["--entity-type", "brokers", "--entity-name", "1"]
    default = ["--entity-type", "brokers", "--entity-default"]
    kafka_configs(broker, *default, "--alter", "--add-config", f"{key}=4000000")
    kafka_configs(broker, *one, "--alter", "--add-config", f"{key}=3000000")
    try:
        synonyms = (f"synonyms={{DYNAMIC_BROKER_CONFIG:{key}=3000000, DYNAMIC_DEFAULT_BROKER_CONFIG:{key}=4000000, "
                    f"DEFAULT_CONFIG:{key}=86400000}}")
        assert described_line(kafka_configs(broker, *one, "--describe"), key) == \
            f"{key}=3000000 sensitive=false {synonyms}"
        assert described_line(kafka_configs(broker, *one, "--describe", "--all"), key) == \
            f"{key}=3000000 sensitive=false {synonyms}"
        assert described_line(kafka_configs(broker, *default, "--describe"), key) == \
            f"{key}=4000000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{key}=4000000}}"
        topic = f"inherits-{uuid.uuid4().hex[:8]}"
        run_tool("go", "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=1)
        out = kafka_configs(broker, "--entity-type", "topics", "--entity-name", topic, "--describe", "--all")
        assert described_line(out, "delete.retention.ms") == f"delete.retention.ms=3000000 sensitive=false {synonyms}"
        # A key that cannot change on a running broker is refused.
        proc = subprocess.run([*kafka_tools_java(),
                               "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker.bootstrap, *one,
                               "--alter", "--add-config", "broker.id=5"], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0, proc.stdout
        assert "Cannot update these configs dynamically: [broker.id]" in proc.stdout + proc.stderr
    finally:
        kafka_configs(broker, *one, "--alter", "--delete-config", key)
        kafka_configs(broker, *default, "--alter", "--delete-config", key)
    assert described_line(kafka_configs(broker, *one, "--describe"), key) is None
    assert described_line(kafka_configs(broker, *default, "--describe"), key) is None
    assert described_line(kafka_configs(broker, *one, "--describe", "--all"), key) == \
        f"{key}=86400000 sensitive=false synonyms={{DEFAULT_CONFIG:{key}=86400000}}"
