"""Consumer groups seen through other people's tools: Kafka's kafka-consumer-groups (ConsumerGroupCommand) next
to fjord's own `fjord group` CLI, Kafka's VerifiableProducer/VerifiableConsumer, and franz-go's own group
integration tests run from Go's module cache against the broker.
"""

import json
import os
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from harness import FULL_MATRIX, REPO_ROOT, Broker, franz_go_tests, kafka_tool, run_tool, fresh_seed
from test_groups import Member, gbroker, group_broker, unique  # noqa: F401 (fixtures)

FJORD_BIN = Path(os.environ.get("FJORD_BIN", REPO_ROOT / "target" / "release" / "fjord"))


def consumer_groups(b: Broker, *args: str) -> str:
    return kafka_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", b.bootstrap,
                      *args)


def fjord_group(b: Broker, cmd: str, *args: str) -> str:
    proc = subprocess.run([str(FJORD_BIN), "group", cmd, "--bootstrap-server", b.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"fjord group {cmd} {args} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
    return proc.stdout


Row = Tuple[str, int, str, int, str]


def offset_rows(out: str, group: str) -> List[Row]:
    """(topic, partition, current offset, log end offset, lag) from a --describe table; '-' stays a string."""
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == group and f[2].isdigit():
            rows.append((f[1], int(f[2]), f[3], int(f[4]), f[5]))
    return sorted(rows)


def listed(out: str) -> List[str]:
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_consumer_groups_command(gbroker: Broker, tmp_path: Path):
    """kafka-consumer-groups --list/--describe/--reset-offsets/--delete agree with `fjord group`."""
    topic, group = unique("cgc"), unique("cgc")
    run_tool("go", "create-topic", bootstrap=gbroker.bootstrap, topic=topic, partitions=3)
    run_tool("go", "produce", bootstrap=gbroker.bootstrap, topic=topic, count=300, codec="none", acks="all",
             seed=fresh_seed(), out=tmp_path / "p1.txt")
    # Commits after each processed poll; stops early so some partitions lag and one may have no commit.
    m = Member("go", tmp_path, "m", bootstrap=gbroker.bootstrap, group=group, topics=topic,
               commit="sync-after-processing", stop_after=150)
    assert m.wait(60) == 0
    committed: Dict[int, int] = {}
    for line in m.lines():
        if line.startswith("commit "):
            for item in line.split(" ")[1].split(","):
                tp, off = item.split("=")
                committed[int(tp.rsplit(":", 1)[1])] = int(off)
    assert committed, f"the member committed nothing; see {m.out}"
    run_tool("go", "produce", bootstrap=gbroker.bootstrap, topic=topic, count=300, codec="none", acks="all",
             seed=fresh_seed(), out=tmp_path / "p2.txt")

    assert group in listed(consumer_groups(gbroker, "--list"))
    assert group in listed(fjord_group(gbroker, "list"))

    kafka_rows = offset_rows(consumer_groups(gbroker, "--describe", "--group", group), group)
    fjord_rows = offset_rows(fjord_group(gbroker, "describe", group), group)
    assert kafka_rows == fjord_rows, f"kafka-consumer-groups {kafka_rows} != fjord group {fjord_rows}"
    want = sorted((topic, p, str(off), 200, str(200 - off)) for p, off in committed.items())
    assert [r for r in kafka_rows if r[2] != "-"] == want, f"describe {kafka_rows}, member committed {committed}"

    out = consumer_groups(gbroker, "--reset-offsets", "--to-earliest", "--execute", "--group", group, "--topic", topic)
    assert group in out
    kafka_rows = offset_rows(consumer_groups(gbroker, "--describe", "--group", group), group)
    fjord_rows = offset_rows(fjord_group(gbroker, "describe", group), group)
    assert kafka_rows == fjord_rows
    assert kafka_rows == [(topic, p, "0", 200, "200") for p in range(3)], kafka_rows

    # And the other way round: fjord's reset, seen by Kafka's tool.
    fjord_group(gbroker, "reset-offsets", group, "--to-latest", "--topic", topic, "--execute")
    kafka_rows = offset_rows(consumer_groups(gbroker, "--describe", "--group", group), group)
    assert kafka_rows == [(topic, p, "200", 200, "0") for p in range(3)], kafka_rows

    out = consumer_groups(gbroker, "--delete", "--group", group)
    assert "Deletion of requested consumer groups" in out and "successful" in out, out
    assert group not in listed(consumer_groups(gbroker, "--list"))
    assert group not in listed(fjord_group(gbroker, "list"))


def json_events(out: str) -> List[dict]:
    events = []
    for line in out.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


@pytest.mark.parametrize("protocol", ["classic", pytest.param("consumer", marks=pytest.mark.slow)])
def test_verifiable_consumer(gbroker: Broker, protocol: str):
    """VerifiableProducer then VerifiableConsumer (manual sync commits): consumed and committed add up."""
    topic, group, count = unique("verifiable"), unique("verifiable"), 3000
    run_tool("go", "create-topic", bootstrap=gbroker.bootstrap, topic=topic, partitions=4)
    produced = json_events(kafka_tool("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server",
                                      gbroker.bootstrap, "--topic", topic, "--max-messages", str(count), "--acks", "-1"))
    acked: Dict[int, int] = {}
    for e in produced:
        if e["name"] == "producer_send_success":
            acked[e["partition"]] = max(acked.get(e["partition"], -1), e["offset"])
    assert sum(off + 1 for off in acked.values()) == count, f"produced {acked}"

    events = json_events(kafka_tool("org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server",
                                    gbroker.bootstrap, "--topic", topic, "--group-id", group, "--group-protocol",
                                    protocol, "--max-messages", str(count), "--reset-policy", "earliest"))
    names = [e["name"] for e in events]
    assert "partitions_assigned" in names and "shutdown_complete" in names, names[-5:]
    consumed = 0
    next_offset: Dict[int, int] = {}
    committed: Dict[int, int] = {}
    for e in events:
        if e["name"] == "records_consumed":
            consumed += e["count"]
            for p in e["partitions"]:
                # Each poll continues where the last one stopped: nothing skipped, nothing twice.
                assert p["minOffset"] == next_offset.get(p["partition"], 0), e
                next_offset[p["partition"]] = p["maxOffset"] + 1
        elif e["name"] == "offsets_committed":
            assert e["success"], f"commit failed: {e}"
            for o in e["offsets"]:
                committed[o["partition"]] = o["offset"]
    assert consumed == count
    assert next_offset == {p: off + 1 for p, off in acked.items()}
    assert committed == next_offset, f"committed {committed}, consumed up to {next_offset}"
    # The commits are what the group has stored.
    rows = offset_rows(consumer_groups(gbroker, "--describe", "--group", group), group)
    assert rows == sorted((topic, p, str(off), off, "0") for p, off in next_offset.items()), rows


@pytest.mark.slow
@pytest.mark.skipif(not FULL_MATRIX, reason="the test command runs these tests on three nodes "
                    "(test_replication.py); E2E_FULL_MATRIX=1 runs them on one too")
def test_franz_go_group_tests(gbroker: Broker, tmp_path: Path):
    """franz-go's own pkg/kgo group tests, from the module cache, with KGO_SEEDS pointing at the broker."""
    franz_go_tests(gbroker.bootstrap, 1, tmp_path)
