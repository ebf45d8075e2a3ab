"""Consumer groups whose connections keep dropping: a group whose members commit what they processed when partitions
are revoked must never hand a record to two members.

- franz-go's own TestGroupETL and TestTxnEtl with KGO_TEST_CHAOS=1 (franz-go's dialer kills every connection 0.5-1.5 s
  after it opens, mid-request or not): E2E_CHAOS_RUNS runs (default 1; the long mode in the README is 200).
- The Java and librdkafka members of test_groups, KIP-848 (and librdkafka's classic ones in the long mode), through
  a ChurnProxy that does the same to every connection they make: members join and leave cleanly while connections die; every record is processed, and
  none twice unless the member that had it lost its partitions or saw a commit fail.

One cluster for the module (fjord, or Kafka with E2E_BROKER=kafka): E2E_CHAOS_NODES combined nodes (default 3), each
advertising the proxy on its client listener and keeping its own links on an INTERNAL listener.
"""

import os
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import List, Set, Tuple

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from churn import ChurnProxy
from harness import Cluster, franz_go_dir, free_port, fresh_seed, read_properties, write_properties
from test_groups import ChunkProducer, Member, check_no_skip, missing, processed, unique, wait_until

CHAOS_RUNS = int(os.environ.get("E2E_CHAOS_RUNS", "1"))
NODES = int(os.environ.get("E2E_CHAOS_NODES", "3"))
RF = min(NODES, 3)
PARTITIONS = 12
# Records for the proxied members: CHUNKS chunks of CHUNK, one a second, while members come and go.
CHUNKS, CHUNK = 10, 2000
# franz-go's record count per test (its chaos mode is exercised with 50k in its own docs).
FRANZ_RECORDS = os.environ.get("E2E_CHAOS_FRANZ_RECORDS", "50000")


class ChaosCluster:
    def __init__(self, workdir: Path):
        internal = {"offsets.topic.replication.factor": str(RF), "transaction.state.log.replication.factor": str(RF),
                    "transaction.state.log.min.isr": str(min(RF, 2))}
        self.cluster = Cluster(workdir, controllers=NODES, extra=internal)
        self.proxy = ChurnProxy([("127.0.0.1", node.port) for node in self.cluster.brokers], fresh_seed())
        direct = []
        for node, proxy_port in zip(self.cluster.brokers, self.proxy.ports):
            props = read_properties(node.config)
            port = free_port()
            direct.append(f"127.0.0.1:{port}")
            props["listeners"] += f",INTERNAL://127.0.0.1:{port}"
            props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy_port},INTERNAL://127.0.0.1:{port}"
            props["listener.security.protocol.map"] += ",INTERNAL:PLAINTEXT"
            props["inter.broker.listener.name"] = "INTERNAL"
            write_properties(node.config, props)
        # Clients bootstrap through the proxy too; those that must not be cut (producers, franz-go, which
        # kills its own connections) go straight to the brokers on the INTERNAL listener.
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.proxy.ports)
        self.direct = ",".join(direct)


@pytest.fixture(scope="module")
def chaos(tmp_path_factory):
    c = ChaosCluster(tmp_path_factory.mktemp("chaos"))
    c.proxy.start()
    c.cluster.start()
    yield c
    c.cluster.kill9()
    c.proxy.stop()


FRANZ_CHAOS_TESTS = ["TestGroupETL", "TestTxnEtl"]
# The subtests that must have run and passed in each run: both group protocols, commits in the revoke callback.
FRANZ_CHAOS_MUST_PASS = ["TestGroupETL/range", "TestGroupETL/cooperative-sticky", "TestGroupETL/sticky/848",
                         "TestGroupETL/range/848", "TestTxnEtl/range", "TestTxnEtl/sticky/848"]


def test_franz_go_groups_under_chaos(chaos: ChaosCluster, tmp_path: Path):
    """franz-go's group and transactional ETL chains with every client connection dying every 0.5-1.5 s: no record
    reaches two members of a group (`saw double offset`), none is lost, each run passes."""
    binary = tmp_path / "kgo.test"
    subprocess.run(["go", "test", "-c", "-o", str(binary), "./pkg/kgo"], cwd=franz_go_dir(), check=True,
                   capture_output=True, timeout=600)
    env = dict(os.environ, KGO_SEEDS=chaos.direct, KGO_TEST_RF=str(RF), KGO_TEST_RECORDS=FRANZ_RECORDS,
               KGO_TEST_CHAOS="1")
    failed = []
    started = time.monotonic()
    for run in range(1, CHAOS_RUNS + 1):
        out = tmp_path / f"run-{run}.out"
        with open(out, "w") as f:
            proc = subprocess.run([str(binary), "-test.run", "^(" + "|".join(FRANZ_CHAOS_TESTS) + ")$",
                                   "-test.count=1", "-test.v", "-test.timeout=400s"],
                                  cwd=franz_go_dir() / "pkg" / "kgo", env=env, stdout=f, stderr=subprocess.STDOUT,
                                  timeout=480)
        text = out.read_text(errors="replace")
        passed = {line.split()[2] for line in text.splitlines() if line.strip().startswith("--- PASS:")}
        absent = [t for t in FRANZ_CHAOS_MUST_PASS if t not in passed]
        if proc.returncode != 0 or absent:
            doubles = [line.strip() for line in text.splitlines() if "saw double offset" in line][:3]
            failed.append((run, proc.returncode, absent, doubles, str(out)))
        # Progress for the long mode (shown with -s): a stopped run still tells how far it got.
        print(f"franz-go chaos run {run}/{CHAOS_RUNS}: {'FAILED' if failed and failed[-1][0] == run else 'passed'}"
              f" ({len(failed)} failed so far, {time.monotonic() - started:.0f}s)", flush=True)
    elapsed = time.monotonic() - started
    print(f"franz-go chaos on {NODES} node(s): {CHAOS_RUNS - len(failed)}/{CHAOS_RUNS} runs passed in {elapsed:.0f}s")
    assert not failed, f"failed runs (run, exit code, subtests not passed, doubles, output): {failed}"


def parse_tps(field: str) -> Set[Tuple[str, int]]:
    if field == "-":
        return set()
    return {(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in field.split(",")}


def excused(member: Member) -> Set[Tuple[str, int]]:
    """The partitions on which `member` may leave records for the next owner to process again: those it lost (its
    session ended; it had no chance to commit) and those it held or was giving up when a commit of its failed."""
    owned: Set[Tuple[str, int]] = set()
    revoking: Set[Tuple[str, int]] = set()
    out: Set[Tuple[str, int]] = set()
    for line in member.lines():
        f = line.split(" ")
        if f[0] == "assign" and len(f) >= 2:
            owned |= parse_tps(f[1])
        elif f[0] == "revoke" and len(f) >= 2:
            revoking = parse_tps(f[1])
            owned -= revoking
        elif f[0] == "lost" and len(f) >= 2:
            out |= parse_tps(f[1])
            owned -= parse_tps(f[1])
        elif f[0] == "commit-failed":
            out |= owned | revoking
    return out


# (client, assignor, protocol): Java's and librdkafka's KIP-848 members; librdkafka's classic members too in the long
# mode (E2E_CHAOS_RUNS above 1): their rebalances through the proxy take minutes.
PROXY_MATRIX = [
    ("java", "uniform", "consumer"),
    ("confluent", "uniform", "consumer"),
] + ([("confluent", "cooperative-sticky", "classic")] if CHAOS_RUNS > 1 else [])


@pytest.mark.parametrize("client,assignor,protocol", PROXY_MATRIX, ids=["-".join(m) for m in PROXY_MATRIX])
def test_group_members_behind_a_churning_proxy(chaos: ChaosCluster, tmp_path: Path, client: str, assignor: str,
                                               protocol: str):
    """Members committing synchronously on revocation join and leave cleanly while every connection they make dies
    within 0.5-1.5 s: every record is processed, and a record processed twice is only ever on a partition its first
    member lost or could not commit."""
    topic = unique("chaos")
    admin = AdminClient({"bootstrap.servers": chaos.direct})
    for f in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=RF)]).values():
        f.result(30)
    # Records keep coming (straight to the brokers) while members join and leave.
    producer = ChunkProducer(chaos.direct, topic, tmp_path, chunks=CHUNKS, pause_s=1.0, chunk=CHUNK)
    args = dict(bootstrap=chaos.bootstrap, group=unique("chaos"), topics=topic, commit="sync-on-revoke",
                protocol=protocol, assignor=assignor, session_timeout_ms=45000, max_poll_interval_ms=60000)
    members: List[Member] = []

    def join(name: str) -> Member:
        m = Member(client, tmp_path, name, **args)
        members.append(m)
        wait_until(f"{name} to get partitions", m.assigned, 120, members)
        return m

    def leave(m: Member) -> None:
        m.terminate()
        m.wait(120)
        assert any(line.startswith("closed") for line in m.lines()), f"{m.name} did not close; see {m.out}"

    chaos.proxy.set_churn(True)
    cut_before = chaos.proxy.cut
    started = time.monotonic()
    producer.start()
    try:
        a = join("a")
        b = join("b")
        join("c")
        leave(a)
        join("d")
        leave(b)
        join("e")
        producer.join(300)
        assert producer.error is None, producer.error
        wait_until("every record", lambda: not missing(producer.acked, members), 240, members)
    finally:
        for m in members:
            m.terminate()
        for m in members:
            m.wait(120)
        chaos.proxy.set_churn(False)
    elapsed = time.monotonic() - started
    check_no_skip(producer.acked, members)
    allowed = set().union(*(excused(m) for m in members))
    twice = Counter({r: n for r, n in processed(members).items() if n > 1})
    unexcused = sorted(r for r in twice if (r[0], r[1]) not in allowed)
    commits = sum(1 for m in members for line in m.lines() if line.startswith("commit "))
    commit_failures = [line for m in members for line in m.lines() if line.startswith("commit-failed")]
    print(f"{client}/{assignor}/{protocol} behind the proxy: {len(producer.acked)} records, {elapsed:.0f}s, "
          f"{chaos.proxy.cut - cut_before} connections cut, {commits} commits, {len(commit_failures)} failed "
          f"{commit_failures[:3]}, {len(twice)} records twice (excused: {len(twice) - len(unexcused)})")
    assert not unexcused, (f"{len(unexcused)} records processed twice on partitions no member lost or failed to "
                           f"commit; first {unexcused[:5]}; outputs {[str(m.out) for m in members]}")
