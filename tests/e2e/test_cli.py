"""fjord's own CLI against the suite's broker — fjord, or Apache Kafka with E2E_BROKER=kafka: every client command
of `fjord topic`, `fjord cluster` and `fjord config` must work against Kafka too, printing the same."""

import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import List

from harness import REPO_ROOT

FJORD = Path(os.environ.get("FJORD_BIN", REPO_ROOT / "target" / "release" / "fjord"))


def fjord(bootstrap: str, *args: str, command: str = "topic") -> subprocess.CompletedProcess:
    return subprocess.run([str(FJORD), command, "-b", bootstrap, *args], capture_output=True, text=True, timeout=60)


def listed(bootstrap: str) -> List[str]:
    out = fjord(bootstrap, "list")
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_topic_commands(broker):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    out = fjord(broker.bootstrap, "create", name, "-p", "3", "-r", "1", "-c", "cleanup.policy=compact")
    assert (out.returncode, out.stdout) == (0, f"Created topic {name}.\n"), out.stderr
    again = fjord(broker.bootstrap, "create", name, "-p", "3")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr, again.stderr
    deadline = time.monotonic() + 30
    while name not in listed(broker.bootstrap):
        assert time.monotonic() < deadline, f"{name} never listed"
        time.sleep(0.2)
    described = fjord(broker.bootstrap, "describe", name)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    summary, configs = lines[0].split("\tConfigs: ")
    assert summary.startswith(f"Topic: {name}\tTopicId: ") and summary.endswith(
        "\tPartitionCount: 3\tReplicationFactor: 1"), lines
    # Kafka 4.4 also lists min.insync.replicas: with eligible leader replicas (KIP-966), which fjord does not
    # implement, its controller keeps that key as a cluster-wide dynamic config.
    assert "cleanup.policy=compact" in configs.split(","), lines
    assert lines[1:] == [f"\tTopic: {name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)]
    grown = fjord(broker.bootstrap, "add-partitions", name, "-p", "4")
    assert (grown.returncode, grown.stdout) == (0, f"Topic {name} has 4 partitions.\n"), grown.stderr
    assert "\tPartitionCount: 4\t" in fjord(broker.bootstrap, "describe", name).stdout
    shrink = fjord(broker.bootstrap, "add-partitions", name, "-p", "2")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr, shrink.stderr
    missing = fjord(broker.bootstrap, "describe", f"{name}-missing")
    assert missing.returncode == 1 and "does not exist" in missing.stderr, missing.stderr
    deleted = fjord(broker.bootstrap, "delete", name)
    assert (deleted.returncode, deleted.stdout) == (0, f"Deleted topic {name}.\n"), deleted.stderr
    deadline = time.monotonic() + 30
    while name in listed(broker.bootstrap):
        assert time.monotonic() < deadline, f"{name} still listed"
        time.sleep(0.2)


def test_cluster_commands(broker):
    info = fjord(broker.bootstrap, "info", command="cluster")
    assert info.returncode == 0, info.stderr
    lines = info.stdout.splitlines()
    assert lines[0].startswith("Cluster: ") and lines[1] == "Controller: 1", lines
    assert lines[2:] == [f"Broker: 1\t{broker.bootstrap}"], lines
    health = fjord(broker.bootstrap, "health", command="cluster")
    assert health.returncode == 0, health.stdout + health.stderr
    assert health.stdout.startswith("Healthy: true\nBrokers: 1\n"), health.stdout


def test_config_commands(broker):
    name = f"cli-config-{uuid.uuid4().hex[:8]}"
    assert fjord(broker.bootstrap, "create", name, "-p", "1").returncode == 0

    def config(*args: str) -> subprocess.CompletedProcess:
        return fjord(broker.bootstrap, *args, command="config")

    def get(key: str) -> str:
        out = config("get", "topic", name, key)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert get("retention.ms") == "retention.ms=604800000\tDEFAULT_CONFIG\n"
    assert config("set", "topic", name, "retention.ms=1000").returncode == 0
    assert get("retention.ms") == "retention.ms=1000\tDYNAMIC_TOPIC_CONFIG\n"
    refused = config("set", "topic", name, "retention.ms=soon")
    assert refused.returncode == 1 and "INVALID" in refused.stderr, refused.stderr
    assert config("delete", "topic", name, "retention.ms").returncode == 0
    assert get("retention.ms") == "retention.ms=604800000\tDEFAULT_CONFIG\n"
    # The suite's broker sets num.partitions in its properties file.
    static = config("get", "broker", "1", "num.partitions")
    assert static.stdout == "num.partitions=1\tSTATIC_BROKER_CONFIG\n", static.stdout + static.stderr
