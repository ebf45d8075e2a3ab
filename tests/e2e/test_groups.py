"""Consumer groups end to end: real clients' group members on a 12-partition topic while records are produced.

Members join, leave cleanly (SIGTERM), are killed (SIGKILL, so the broker must expire their session) and stall
past max.poll.interval.ms. With commits after processing no record may be skipped; with synchronous commits at
revocation and only clean joins/leaves no record may be processed twice. Also: a broker restart in the middle
(the group resumes from its committed offsets) and regex subscriptions picking up a topic created later.

The broker here is this module's own (fjord or Kafka per E2E_BROKER) with short KIP-848 session and heartbeat
settings, so a killed consumer-protocol member expires in seconds as a classic one does.
"""

import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

from harness import FULL_MATRIX, Broker, ensure_running, fresh_seed, module_broker, run_tool, start_tool

PARTITIONS = 12
# Records are produced in chunks while the members churn: CHUNKS x CHUNK records, one chunk per second.
# E2E_GROUP_RECORDS sets the total (default 100k, as the consumer-group issue asks).
CHUNKS = 10
CHUNK = int(os.environ.get("E2E_GROUP_RECORDS", "100000")) // CHUNKS
SESSION_TIMEOUT_MS = 6000

# Short group timeouts for both brokers. Kafka also needs its minimums lowered to accept them.
GROUP_BROKER_PROPS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
    # A share group member learns of partitions initialized since its last heartbeat on its next (franz-go's
    # share tests).
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory) -> Broker:
    yield from module_broker(tmp_path_factory.mktemp("group-broker"), GROUP_BROKER_PROPS)


@pytest.fixture
def gbroker(group_broker: Broker) -> Broker:
    """This module's broker, started again if an earlier test left it down."""
    return ensure_running(group_broker)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Member:
    """One group-consume process and its output file (`rec topic partition offset index member generation`)."""

    def __init__(self, client: str, workdir: Path, name: str, **kw):
        self.client = client
        self.name = name
        self.out = workdir / f"{name}.out"
        self.out.touch()
        self.proc = start_tool(client, "group-consume", workdir / f"{name}.log", out=self.out, **kw)

    def lines(self) -> List[str]:
        return self.out.read_text(errors="replace").splitlines()

    def records(self) -> List[Tuple[str, int, int]]:
        out = []
        for line in self.lines():
            f = line.split(" ")
            # A SIGKILL can cut the last line short; only whole lines count.
            if f[0] == "rec" and len(f) == 7:
                out.append((f[1], int(f[2]), int(f[3])))
        return out

    def assigned(self) -> bool:
        """Whether the member has been assigned partitions (cooperative members may first get none)."""
        if self.proc.poll() is not None:
            log = (self.out.parent / f"{self.name}.log").read_text(errors="replace")
            raise AssertionError(f"{self.name} exited {self.proc.returncode} before it got partitions:\n{log[-2000:]}")
        return any(line.startswith("assign ") and line.split(" ")[1] != "-" for line in self.lines())

    def terminate(self) -> None:
        """SIGTERM: the member leaves the group cleanly."""
        if self.proc.poll() is None:
            self.proc.terminate()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait(self, timeout_s: float = 60) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout_s}s; see {self.out}")


class ChunkProducer(threading.Thread):
    """Produces CHUNKS chunks of CHUNK records (one per second) with the franz-go tool, recording the acks."""

    def __init__(self, bootstrap: str, topic: str, workdir: Path, chunks: int = CHUNKS, pause_s: float = 1.0,
                 chunk: int = CHUNK):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.workdir = bootstrap, topic, workdir
        self.chunks, self.pause_s, self.chunk = chunks, pause_s, chunk
        self.acked: Set[Tuple[str, int, int]] = set()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            for c in range(self.chunks):
                out = self.workdir / f"{self.topic}-produce-{c}.txt"
                run_tool("go", "produce", wall_s=120, bootstrap=self.bootstrap, topic=self.topic, count=self.chunk,
                         codec="lz4", acks="all", seed=fresh_seed(), out=out)
                for line in out.read_text().splitlines():
                    _, p, off = line.split()
                    self.acked.add((self.topic, int(p), int(off)))
                time.sleep(self.pause_s)
        except BaseException as e:  # reported by the test thread
            self.error = e


def processed(members: List[Member]) -> Counter:
    return Counter(r for m in members for r in m.records())


def missing(acked: Set[Tuple[str, int, int]], members: List[Member]) -> Set[Tuple[str, int, int]]:
    return acked - set(processed(members))


def wait_until(what: str, cond, timeout_s: float, members: List[Member]) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            for m in members:
                m.kill()
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; outputs: {[str(m.out) for m in members]}")
        time.sleep(0.2)


def check_no_skip(acked: Set[Tuple[str, int, int]], members: List[Member]) -> None:
    """Per partition, the processed offsets cover every produced offset, 0..end."""
    lost = sorted(missing(acked, members))
    assert not lost, f"{len(lost)} records never processed; first: {lost[:5]}"
    ends: Dict[Tuple[str, int], int] = {}
    for t, p, off in acked:
        ends[(t, p)] = max(ends.get((t, p), -1), off)
    # The produced offsets themselves are dense from 0, so coverage of them is coverage of 0..end.
    for (t, p), end in ends.items():
        assert sum(1 for a in acked if a[0] == t and a[1] == p) == end + 1, f"{t}-{p}: produced offsets not dense"


def group_args(gbroker: Broker, group: str, topic: str, assignor: str, protocol: str, commit: str) -> dict:
    args = dict(bootstrap=gbroker.bootstrap, group=group, topics=topic, commit=commit, protocol=protocol,
                session_timeout_ms=SESSION_TIMEOUT_MS, max_poll_interval_ms=10000)
    if assignor:
        args["assignor"] = assignor
    return args


# (client, assignor, protocol): Java with every classic assignor and with KIP-848; one each for the others.
# The quick subset (-m "not slow") keeps the first.
# Java's eager assignors other than range run with E2E_FULL_MATRIX=1 only: the classic protocol relays whatever
# the leader computed, so they differ from range in the client, not in what the coordinator does.
MATRIX = [
    ("java", "range", "classic"),
] + ([
    ("java", "roundrobin", "classic"),
    ("java", "sticky", "classic"),
] if FULL_MATRIX else []) + [
    ("java", "cooperative-sticky", "classic"),
    ("java", "uniform", "consumer"),
    ("confluent", "cooperative-sticky", "classic"),
    ("confluent", "uniform", "consumer"),
    ("go", "sticky", "classic"),
    ("kafka-python", "roundrobin", "classic"),
]
MATRIX_PARAMS = [
    pytest.param(*m, id="-".join(m), marks=() if i == 0 else pytest.mark.slow) for i, m in enumerate(MATRIX)
]


@pytest.mark.parametrize("client,assignor,protocol", MATRIX_PARAMS)
def test_group_churn(gbroker: Broker, tmp_path: Path, client: str, assignor: str, protocol: str):
    """Two groups consume one topic while it is produced to.

    Group "alo" (commit after processing): members join, one is SIGKILLed, one stalls past
    max.poll.interval.ms, one leaves cleanly, replacements join; nothing may be skipped.
    Group "once" (commit synchronously on revocation): members only join and leave cleanly; every record
    must be processed exactly once.
    """
    topic = unique("groups")
    run_tool("go", "create-topic", bootstrap=gbroker.bootstrap, topic=topic, partitions=PARTITIONS)
    producer = ChunkProducer(gbroker.bootstrap, topic, tmp_path)
    alo = group_args(gbroker, unique("alo"), topic, assignor, protocol, "sync-after-processing")
    once = group_args(gbroker, unique("once"), topic, assignor, protocol, "sync-on-revoke")
    total = CHUNKS * CHUNK
    started = time.monotonic()

    a = [Member(client, tmp_path, "alo-a", **alo), Member(client, tmp_path, "alo-b", **alo),
         Member(client, tmp_path, "alo-c", **{**alo, "stall_after": 300, "stall_s": 10,
                                                 # librdkafka wants max.poll.interval.ms >= session.timeout.ms.
                                                 "max_poll_interval_ms": SESSION_TIMEOUT_MS})]
    o = [Member(client, tmp_path, "once-a", **once)]
    members = a + o

    def join(group: List[Member], args: dict, name: str) -> None:
        """Starts a member and waits until it owns partitions, so every event below hits a settled member."""
        m = Member(client, tmp_path, name, **args)
        group.append(m)
        members.append(m)
        wait_until(f"{name} to get partitions", m.assigned, 90, members)

    producer.start()
    try:
        wait_until("first members to get partitions", lambda: all([m.assigned() for m in members]), 90, members)
        join(o, once, "once-b")
        a[1].kill()  # its session must expire
        join(a, alo, "alo-d")
        join(o, once, "once-c")
        a[0].terminate()  # a clean leave
        o[1].terminate()
        join(a, alo, "alo-e")
        producer.join(180)
        assert producer.error is None, producer.error
        assert len(producer.acked) == total
        wait_until("alo: every record", lambda: not missing(producer.acked, a), 120, members)
        wait_until("once: every record", lambda: not missing(producer.acked, o), 120, members)
    finally:
        for m in members:
            m.terminate()
        for m in members:
            m.wait()
    elapsed = time.monotonic() - started

    check_no_skip(producer.acked, a)
    check_no_skip(producer.acked, o)
    twice = sorted(r for r, n in processed(o).items() if n > 1)
    assert not twice, f"group with sync commits on revocation processed {len(twice)} records twice; first {twice[:5]}"
    stall = [line for line in a[2].lines() if line.startswith("stall")]
    assert stall, "the stalling member never stalled"
    print(f"{client}/{assignor}/{protocol}: {total} records, {elapsed:.1f}s, "
          f"alo reprocessed {sum(n - 1 for n in processed(a).values())}")


def test_group_broker_restart(gbroker: Broker, tmp_path: Path):
    """SIGTERM and restart the broker mid-consumption: the group resumes from its committed offsets."""
    topic = unique("restart")
    group = unique("restart")
    run_tool("go", "create-topic", bootstrap=gbroker.bootstrap, topic=topic, partitions=PARTITIONS)
    producer = ChunkProducer(gbroker.bootstrap, topic, tmp_path, chunks=4, pause_s=0)
    producer.run()
    assert producer.error is None, producer.error
    args = group_args(gbroker, group, topic, "range", "classic", "sync-after-processing")
    members = [Member("java", tmp_path, "r-a", **args), Member("java", tmp_path, "r-b", **args)]
    try:
        wait_until("1500 records", lambda: len(processed(members)) >= 1500, 90, members)
        gbroker.stop()
        time.sleep(1)
        gbroker.start()
        wait_until("every record", lambda: not missing(producer.acked, members), 120, members)
    finally:
        for m in members:
            m.terminate()
        for m in members:
            m.wait()
    check_no_skip(producer.acked, members)
    # Reprocessing is bounded by what was processed but not yet committed when the broker went down: at most
    # one poll (100 records) per member, plus one more per member for a commit lost in flight.
    again = sum(n - 1 for n in processed(members).values())
    assert again <= 400, f"{again} records reprocessed after the restart"
    # Everything processed was committed: a new member of the group finds nothing left.
    late = Member("java", tmp_path, "r-late", idle_s=4, **args)
    assert late.wait(90) == 0
    assert late.records() == [], f"a new member reprocessed {len(late.records())} committed records"
    assert any(line.startswith("assign ") and topic in line for line in late.lines()), "the late member got no assignment"


@pytest.mark.parametrize(
    "client,protocol",
    [("java", "classic"), pytest.param("java", "consumer", marks=pytest.mark.slow),
     pytest.param("go", "classic", marks=pytest.mark.slow)],
)
def test_group_regex(gbroker: Broker, tmp_path: Path, client: str, protocol: str):
    """A regex subscription picks up a matching topic created after the member joined."""
    prefix = unique("rx")
    first, later = f"{prefix}-first", f"{prefix}-later"
    run_tool("go", "create-topic", bootstrap=gbroker.bootstrap, topic=first, partitions=3)
    run_tool("go", "create-topic", bootstrap=gbroker.bootstrap, topic=f"other-{prefix}", partitions=1)
    m = Member(client, tmp_path, "rx", bootstrap=gbroker.bootstrap, group=unique("rx"), pattern=f"{prefix}-.*",
               protocol=protocol, assignor="range" if protocol == "classic" else "uniform",
               commit="sync-after-processing", session_timeout_ms=SESSION_TIMEOUT_MS)
    try:
        p1 = ChunkProducer(gbroker.bootstrap, first, tmp_path, chunks=1, pause_s=0)
        p1.run()
        assert p1.error is None, p1.error
        wait_until("records of the first topic", lambda: not missing(p1.acked, [m]), 60, [m])
        run_tool("go", "create-topic", bootstrap=gbroker.bootstrap, topic=later, partitions=2)
        p2 = ChunkProducer(gbroker.bootstrap, later, tmp_path, chunks=1, pause_s=0)
        p2.run()
        assert p2.error is None, p2.error
        wait_until("records of the topic created later", lambda: not missing(p2.acked, [m]), 60, [m])
    finally:
        m.terminate()
        m.wait()
    topics = {t for t, _, _ in m.records()}
    assert topics == {first, later}, f"consumed topics {topics}"
