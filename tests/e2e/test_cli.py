"""fjord's own CLI against the suite's broker — fjord, or Apache Kafka with E2E_BROKER=kafka: every client command
of `fjord topic` and `fjord cluster` must work against Kafka too, printing the same."""

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
    assert lines[0].startswith(f"Topic: {name}\tTopicId: ") and lines[0].endswith(
        "\tPartitionCount: 3\tReplicationFactor: 1"), lines
    assert lines[1:] == [f"\tTopic: {name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)]
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
