"""Share groups (KIP-932) with Java's KafkaShareConsumer: consumers sharing one partition's records, explicit
acknowledgement (accept, release, reject), an acquisition lock expiring on a hung consumer, a poison record archived
at the delivery limit, `share.auto.offset.reset` and `share.isolation.level`.

Each consumer writes `<partition> <offset> <delivery count> <action>` per record it is given (the Java tool's
share-consume), and stops once it has had no record for its idle time. The group configs are set with Kafka's kafka-configs, so the same tests run against Kafka
(E2E_BROKER=kafka), whose fresh 4.4 clusters have share groups on.
"""

import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from harness import Broker, ensure_running, kafka_tool, module_broker, run_tool, start_tool

# Short locks for the lock-expiry test (the broker's lower bound lowered to allow them), and short heartbeats: a
# Kafka member learns its assignment on a heartbeat after the group's share partitions are initialized.
BROKER_PROPS = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
}
LOCK_MS = 3000

Row = Tuple[int, int, int, str]


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory) -> Broker:
    yield from module_broker(tmp_path_factory.mktemp("share-broker"), BROKER_PROPS)


@pytest.fixture
def sbroker(share_broker: Broker) -> Broker:
    return ensure_running(share_broker)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def topic_with(b: Broker, records: int, tmp_path: Path, **produce) -> str:
    topic = unique("share")
    run_tool("java", "create-topic", bootstrap=b.bootstrap, topic=topic, partitions=1)
    if records:
        produce_to(b, topic, records, tmp_path, **produce)
    return topic


def produce_to(b: Broker, topic: str, records: int, tmp_path: Path, **kw) -> None:
    run_tool("java", "produce", bootstrap=b.bootstrap, topic=topic, count=records, seed=1, acks="all", codec="none",
             out=str(tmp_path / unique("acks")), **kw)


def group_with(b: Broker, **configs: str) -> str:
    """A new share group with its configs set by Kafka's kafka-configs (`share_auto_offset_reset` for
    `share.auto.offset.reset`, ...)."""
    group = unique("workers")
    if configs:
        pairs = ",".join(f"{k.replace('_', '.')}={v}" for k, v in configs.items())
        kafka_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", b.bootstrap, "--entity-type",
                   "groups", "--entity-name", group, "--alter", "--add-config", pairs)
    return group


def rows(path: Path) -> List[Row]:
    out = []
    for line in path.read_text().splitlines():
        p, offset, delivery, action = line.split()
        out.append((int(p), int(offset), int(delivery), action))
    return out


def consume(b: Broker, topic: str, group: str, tmp_path: Path, **kw) -> List[Row]:
    out = tmp_path / unique("consumer")
    run_tool("java", "share-consume", wall_s=120, bootstrap=b.bootstrap, topic=topic, group=group, out=str(out),
             **kw)
    return rows(out)


def test_three_consumers_share_a_partition_and_none_gets_a_record_twice(sbroker: Broker, tmp_path: Path):
    topic = topic_with(sbroker, 600, tmp_path)
    group = group_with(sbroker, share_auto_offset_reset="earliest")
    outs = [tmp_path / f"c{i}" for i in range(3)]
    procs = [start_tool("java", "share-consume", tmp_path / f"c{i}.log", bootstrap=sbroker.bootstrap, topic=topic,
                        group=group, out=str(outs[i]), idle_ms=3000, first_ms=10000, max_poll_records=20)
             for i in range(3)]
    for p in procs:
        assert p.wait(120) == 0
    seen = Counter(offset for out in outs for (_, offset, _, _) in rows(out))
    assert sorted(seen) == list(range(600)), "every record delivered"
    assert max(seen.values()) == 1, f"delivered twice: {[o for o, n in seen.items() if n > 1][:10]}"


def test_explicit_acknowledgement_releases_and_rejects(sbroker: Broker, tmp_path: Path):
    topic = topic_with(sbroker, 100, tmp_path)
    group = group_with(sbroker, share_auto_offset_reset="earliest")
    got = consume(sbroker, topic, group, tmp_path, mode="explicit", release="5,6,7", reject="10,11", idle_ms=3000)
    deliveries: Dict[int, List[Tuple[int, str]]] = defaultdict(list)
    for _, offset, delivery, action in got:
        deliveries[offset].append((delivery, action))
    assert sorted(deliveries) == list(range(100))
    for offset in (5, 6, 7):
        assert deliveries[offset] == [(1, "release"), (2, "accept")], "a released record comes back"
    for offset in (10, 11):
        assert deliveries[offset] == [(1, "reject")], "a rejected record does not"
    assert all(d == [(1, "accept")] for o, d in deliveries.items() if o not in (5, 6, 7, 10, 11))


def test_a_lock_expiring_on_a_hung_consumer_hands_its_records_to_another(sbroker: Broker, tmp_path: Path):
    topic = topic_with(sbroker, 50, tmp_path)
    group = group_with(sbroker, share_auto_offset_reset="earliest", share_record_lock_duration_ms=str(LOCK_MS))
    hung_out = tmp_path / "hung"
    hung = start_tool("java", "share-consume", tmp_path / "hung.log", bootstrap=sbroker.bootstrap, topic=topic,
                      group=group, out=str(hung_out), mode="explicit", hold_ms=6 * LOCK_MS)
    deadline = time.monotonic() + 60
    while not (hung_out.exists() and hung_out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    held = {offset for (_, offset, _, _) in rows(hung_out)}
    assert held, "the hung consumer got records"
    # The hung consumer is still connected (it sleeps) while its locks expire.
    # The locks expire together: all come back at once, well before the hung consumer's hold ends.
    got = consume(sbroker, topic, group, tmp_path, mode="explicit", idle_ms=2000)
    assert hung.poll() is None, "the hung consumer was still alive while the other took its records"
    redelivered = {offset: delivery for (_, offset, delivery, _) in got}
    assert held <= set(redelivered), f"not redelivered: {sorted(held - set(redelivered))[:10]}"
    assert all(redelivered[o] == 2 for o in held), "the expired lock counted as a delivery"
    hung.kill()
    hung.wait(60)


def test_a_poison_record_is_archived_at_the_delivery_limit(sbroker: Broker, tmp_path: Path):
    topic = topic_with(sbroker, 20, tmp_path)
    group = group_with(sbroker, share_auto_offset_reset="earliest", share_delivery_count_limit="3")
    got = consume(sbroker, topic, group, tmp_path, mode="explicit", release="0", release_always=True, idle_ms=3000)
    poison = [delivery for (_, offset, delivery, _) in got if offset == 0]
    assert poison == [1, 2, 3], "delivered up to the limit, then archived"
    assert sorted(o for (_, o, _, a) in got if a == "accept") == list(range(1, 20))


def test_auto_offset_reset_latest_and_earliest(sbroker: Broker, tmp_path: Path):
    topic = topic_with(sbroker, 50, tmp_path)
    latest = group_with(sbroker)
    earliest = group_with(sbroker, share_auto_offset_reset="earliest")
    out = tmp_path / "latest"
    proc = start_tool("java", "share-consume", tmp_path / "latest.log", bootstrap=sbroker.bootstrap, topic=topic,
                      group=latest, out=str(out), idle_ms=8000)
    time.sleep(5)  # joined and fetched: the group starts at the end of what is there
    produce_to(sbroker, topic, 30, tmp_path)
    assert proc.wait(120) == 0
    assert sorted(o for (_, o, _, _) in rows(out)) == list(range(50, 80)), "latest: only what came after"
    got = consume(sbroker, topic, earliest, tmp_path, idle_ms=4000)
    assert sorted(o for (_, o, _, _) in got) == list(range(80)), "earliest: everything"


def test_read_committed_skips_aborted_records(sbroker: Broker, tmp_path: Path):
    topic = topic_with(sbroker, 0, tmp_path)
    for abort in (False, True, False):
        produce_to(sbroker, topic, 10, tmp_path, transactional_id=unique("tx"), abort=abort)
    committed = group_with(sbroker, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    uncommitted = group_with(sbroker, share_auto_offset_reset="earliest")
    got = [o for (_, o, _, _) in consume(sbroker, topic, committed, tmp_path, idle_ms=3000)]
    everything = [o for (_, o, _, _) in consume(sbroker, topic, uncommitted, tmp_path, idle_ms=3000)]
    # Each transaction is 10 records and a marker: offsets 0-9, 11-20 (aborted), 22-31.
    assert sorted(got) == list(range(0, 10)) + list(range(22, 32))
    assert sorted(everything) == list(range(0, 10)) + list(range(11, 21)) + list(range(22, 32))


def share_groups_tool(b: Broker, *args: str) -> str:
    return kafka_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand", "--bootstrap-server", b.bootstrap,
                      *args)


def test_kafka_share_groups_tool_lists_and_describes(sbroker: Broker, tmp_path: Path):
    topic = topic_with(sbroker, 20, tmp_path)
    group = group_with(sbroker, share_auto_offset_reset="earliest")
    out = tmp_path / "member"
    proc = start_tool("java", "share-consume", tmp_path / "member.log", bootstrap=sbroker.bootstrap, topic=topic,
                      group=group, out=str(out), idle_ms=10000)
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert group in share_groups_tool(sbroker, "--list").split()
    state = share_groups_tool(sbroker, "--describe", "--group", group, "--state")
    row = next(line.split() for line in state.splitlines() if line.startswith(group))
    # GROUP COORDINATOR (ID) STATE #MEMBERS
    assert row[-2:] == ["Stable", "1"], state
    members = share_groups_tool(sbroker, "--describe", "--group", group, "--members")
    row = next(line.split() for line in members.splitlines() if line.startswith(group))
    assert f"{topic}:0" in row[-1], members
    assert proc.wait(120) == 0
    listed = kafka_tool("org.apache.kafka.tools.GroupsCommand", "--bootstrap-server", sbroker.bootstrap, "--list")
    assert any(line.split()[:2] == [group, "Share"] for line in listed.splitlines()), listed
