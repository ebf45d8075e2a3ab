"""Broker processes and client tools for the e2e suite.

Owns: starting/stopping/killing a broker (fjord's binary or Apache Kafka from Maven Central jars) on a
loopback port with a data dir that survives restarts, running the per-client tools, and checking what
they report against the record generator.
"""

import base64
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parent.parent
BUILD_DIR = E2E_DIR / ".build"
PYTHON_CLIENTS = E2E_DIR / "clients" / "python"

sys.path.insert(0, str(PYTHON_CLIENTS))
from recordgen import consume_line, generate  # noqa: E402
from ports import free_port  # noqa: E402,F401

CLIENTS = ["java", "go", "confluent", "kafka-python"]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# E2E_FULL_MATRIX=1: every combination of the client matrices (every client with every codec, every Java
# assignor); the test command runs a subset that still has each client, codec and rebalance protocol.
FULL_MATRIX = os.environ.get("E2E_FULL_MATRIX") == "1"


_last_seed = 0


def fresh_seed() -> int:
    """A generator seed that is also the records' base timestamp: the wall clock in ms, unique per call.

    Record timestamps must be recent: Kafka drops an idempotent producer's state on restart when its last
    record timestamp is older than producer.id.expiration.ms, and retention deletes old segments.
    """
    global _last_seed
    _last_seed = max(_last_seed + 1, int(time.time() * 1000))
    return _last_seed


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def java_bin() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


# The Java clients and Kafka's tools start a JVM per run, hundreds of times a session, and mostly start, connect and
# end: C1 alone and the serial collector halve their CPU, and a class-data archive of the classes a run loads (made
# once per classpath by make_class_archives) halves their start again. Brokers' JVMs and the benchmarks keep Java's
# defaults.
SHORT_JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xlog:disable", "-Xlog:all=warning:stderr"]


def class_archive(classpath: str) -> Path:
    """Where the archive of `classpath` is kept: named after its jars and their sizes and times, since the JVM
    declines an archive whose jars changed (a rebuilt client tool, say)."""
    digest = hashlib.sha256()
    for entry in classpath.split(":"):
        stat = os.stat(entry) if os.path.exists(entry) else None
        digest.update(f"{entry}:{stat and stat.st_size}:{stat and stat.st_mtime_ns}\n".encode())
    return BUILD_DIR / "cds" / (digest.hexdigest()[:16] + ".jsa")


def java_cmd(classpath: str, *flags: str) -> List[str]:
    """`java ... -cp classpath` for a short-lived client or tool, with the classpath's archive when it has one."""
    archive = class_archive(classpath)
    shared = [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []
    return [java_bin(), *SHORT_JVM_FLAGS, *shared, *flags, "-cp", classpath]


def kafka_tools_java() -> List[str]:
    """java with Kafka's broker and tools jars on the classpath; a main class and its arguments follow."""
    return java_cmd(read_classpath("kafka-broker.classpath"))


def client_classpath() -> str:
    return str(BUILD_DIR / "java" / "java-client-tool-0.1.0.jar") + ":" + read_classpath("java-client.classpath")


def client_java() -> List[str]:
    """java with the e2e Java client tool's jar and kafka-clients on the classpath; a main class follows."""
    return java_cmd(client_classpath())


def make_class_archives(workdir: Path) -> None:
    """Makes the class-data archive of each short-lived JVM's classpath that has none: one run of a typical command
    (a Java client's produce, Kafka's kafka-topics) against a broker started for it, with its loaded classes dumped
    at exit. Without an archive the JVMs only start slower, so a failure here is printed, not raised."""
    tools_cp = read_classpath("kafka-broker.classpath")
    current = {class_archive(cp) for cp in (client_classpath(), tools_cp)}
    for stale in (BUILD_DIR / "cds").glob("*.jsa"):
        if stale not in current:
            stale.unlink()
    missing = [cp for cp in (client_classpath(), tools_cp) if not class_archive(cp).exists()]
    if not missing:
        return
    broker = make_broker(workdir / "broker")
    broker.start()
    try:
        run_tool("go", "create-topic", bootstrap=broker.bootstrap, topic="warm-up", partitions=3)
        typical = {
            client_classpath(): ["dev.fjord.e2e.ClientTool", *tool_args(
                "produce", bootstrap=broker.bootstrap, topic="warm-up", count=2000, seed=1, acks="all", codec="lz4",
                idempotent=True, out=str(workdir / "acks"))],
            tools_cp: ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.bootstrap, "--describe"],
        }
        for cp in missing:
            archive = class_archive(cp)
            archive.parent.mkdir(exist_ok=True)
            partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
            proc = subprocess.run(java_cmd(cp, f"-XX:ArchiveClassesAtExit={partial}") + typical[cp],
                                  capture_output=True, text=True, timeout=120)
            if proc.returncode == 0 and partial.exists():
                partial.rename(archive)
            else:
                print(f"no class-data archive for {typical[cp][0]}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
                partial.unlink(missing_ok=True)
    finally:
        broker.stop()


def read_classpath(name: str) -> str:
    path = BUILD_DIR / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run scripts/install-test-deps.sh")
    return path.read_text().strip()


def read_properties(path: Path) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def write_properties(path: Path, props: Dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


class Broker:
    """A single-node broker process whose port and data dir stay the same across restarts."""

    kind = "?"
    # Exit codes that mean a clean shutdown after SIGTERM.
    clean_exit_codes = (0,)

    def __init__(self, workdir: Path, log_dirs: int = 1, add_scram: Sequence[str] = ()):
        self.workdir = workdir
        # SCRAM users the broker starts with: kafka-storage format's `--add-scram`, fjord server's.
        self.add_scram = list(add_scram)
        self.data_dir = workdir / "data"
        # `log.dirs`: the first is `data_dir`.
        self.data_dirs = [self.data_dir] + [workdir / f"data{i}" for i in range(2, log_dirs + 1)]
        for d in self.data_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        # fjord's HTTP listener (metrics, health), "host:port"; Kafka has none.
        self.http: Optional[str] = None

    def command(self) -> List[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        return port_accepts(self.port)

    def log_path(self) -> Path:
        return self.workdir / f"process-{self.starts}.out"

    def start(self, timeout_s: float = 90) -> None:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
        self.spawn()
        self.wait_ready(timeout_s)

    def spawn(self) -> None:
        with open(self.log_path(), "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}; see {self.log_path()}")
            if time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"{self.kind} not ready after {timeout_s}s; see {self.log_path()}")
            time.sleep(0.1)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 60) -> None:
        """SIGTERM and wait for a clean exit."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                stacks = self.dump_stacks()
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"{self.kind} ignored SIGTERM for {timeout_s}s; {stacks}")
        rc = self.proc.returncode
        assert rc in self.clean_exit_codes, f"{self.kind} exited {rc} after SIGTERM; see {self.log_path()}"

    def dump_stacks(self) -> str:
        """Every thread's stack of the running process, written beside its log (a hang's evidence)."""
        assert self.proc is not None
        path = self.workdir / f"stacks-{self.starts}.txt"
        try:
            out = subprocess.run(
                ["gdb", "-p", str(self.proc.pid), "-batch", "-ex", "thread apply all bt"],
                capture_output=True, text=True, timeout=120,
            ).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"no stacks: {e}"
        path.write_text(out)
        # Each thread's frames in fjord's own code say where it is stuck: shown where CI shows them.
        summary, thread = [], ""
        for line in out.splitlines():
            if line.startswith("Thread "):
                thread = line
            elif re.search(r" in fjord\w*::", line):
                if thread:
                    summary.append(thread)
                    thread = ""
                summary.append("  " + line[line.index(" in ") + 4 :])
        return f"stacks in {path}:\n" + "\n".join(summary[:120])

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def partition_dirs(self, topic: str) -> List[Path]:
        # `<topic>-<partition>` only: not a deleted (`-delete`), stray or future log's dir.
        name = re.compile(re.escape(topic) + r"-(\d+)")
        dirs = [p for p in self.data_dir.glob(f"{topic}-*") if name.fullmatch(p.name)]
        return sorted(dirs, key=lambda p: int(p.name.rsplit("-", 1)[1]))


class FjordBroker(Broker):
    kind = "fjord"

    def __init__(self, workdir: Path, log_dirs: int = 1, add_scram: Sequence[str] = ()):
        super().__init__(workdir, log_dirs, add_scram)
        self.binary = Path(os.environ.get("FJORD_BIN", REPO_ROOT / "target" / "release" / "fjord"))
        self.config = workdir / "server.properties"
        self.http = f"127.0.0.1:{free_port()}"
        write_properties(
            self.config,
            {
                "node.id": "1",
                "listeners": f"PLAINTEXT://{self.bootstrap}",
                "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
                "http.listeners": f"http://{self.http}",
                "log.dirs": ",".join(str(d) for d in self.data_dirs),
                "num.partitions": "1",
                "auto.create.topics.enable": "false",
            },
        )

    def command(self) -> List[str]:
        if not self.binary.exists():
            raise RuntimeError(f"{self.binary} is missing: run cargo build --release")
        return [str(self.binary), "server", str(self.config)] + [
            arg for credential in self.add_scram for arg in ("--add-scram", credential)]


# Kafka's internal topics other than `__consumer_offsets` with one replica and one partition: the test brokers
# are too few for the defaults, and small topics keep restarts quick. A test's own properties win.
KAFKA_INTERNAL_TOPICS = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
}


def kafka_log4j(workdir: Path) -> Path:
    """A log4j2 config sending a Kafka process's log to `workdir/server.log`."""
    log4j = workdir / "log4j2.properties"
    log4j.write_text(
        "rootLogger.level=INFO\n"
        "rootLogger.appenderRef.file.ref=FILE\n"
        "appender.file.type=File\n"
        "appender.file.name=FILE\n"
        f"appender.file.fileName={workdir / 'server.log'}\n"
        "appender.file.layout.type=PatternLayout\n"
        "appender.file.layout.pattern=[%d] %p %m (%c)%n\n"
    )
    return log4j


class KafkaBroker(Broker):
    """Apache Kafka in single-node KRaft mode (broker and controller in one JVM)."""

    kind = "kafka"
    # The JVM reports death by SIGTERM as 128 + 15 even when its shutdown hooks ran cleanly.
    clean_exit_codes = (0, 143)

    def __init__(self, workdir: Path, log_dirs: int = 1, add_scram: Sequence[str] = ()):
        super().__init__(workdir, log_dirs, add_scram)
        self.classpath = read_classpath("kafka-broker.classpath")
        self.controller_port = free_port()
        self.config = workdir / "server.properties"
        write_properties(
            self.config,
            {
                "process.roles": "broker,controller",
                "node.id": "1",
                "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
                "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": ",".join(str(d) for d in self.data_dirs),
                "num.partitions": "1",
                "auto.create.topics.enable": "false",
                "group.initial.rebalance.delay.ms": "0",
                # librdkafka's consumer looks up a coordinator, which creates these topics; one partition
                # each keeps broker restarts quick.
                "offsets.topic.num.partitions": "1",
                **KAFKA_INTERNAL_TOPICS,
            },
        )
        self.jvm = [java_bin(), "-Xms512m", "-Xmx1g", f"-Dlog4j2.configurationFile={kafka_log4j(workdir)}", "-cp",
                    self.classpath]
        cluster_id = "-"
        while cluster_id.startswith("-"):  # StorageTool would read a leading '-' as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        subprocess.run(
            self.jvm
            + ["kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", str(self.config)]
            + [arg for credential in self.add_scram for arg in ("--add-scram", credential)],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=workdir,
        )

    def command(self) -> List[str]:
        return self.jvm + ["kafka.Kafka", str(self.config)]

    def ready(self) -> bool:
        # The listener accepts before the broker is unfenced; the log says when it is serving.
        if not port_accepts(self.port):
            return False
        log = self.workdir / "server.log"
        if not log.exists():
            return False
        marker = "Kafka Server started"
        return log.read_text(errors="replace").count(marker) >= self.starts


def make_broker(workdir: Path, log_dirs: int = 1, add_scram: Sequence[str] = ()) -> Broker:
    kind = os.environ.get("E2E_BROKER", "fjord")
    if kind == "fjord":
        return FjordBroker(workdir, log_dirs, add_scram)
    if kind == "kafka":
        return KafkaBroker(workdir, log_dirs, add_scram)
    raise RuntimeError(f"E2E_BROKER must be fjord or kafka, not {kind!r}")


def module_broker(workdir: Path, props: Dict[str, str], log_dirs: int = 1):
    """Body of a module-scoped broker fixture: a broker with `props` added to its config (and `log_dirs` log dirs),
    stopped at the end."""
    b = make_broker(workdir, log_dirs)
    with open(b.config, "a") as f:
        f.writelines(f"{k}={v}\n" for k, v in props.items())
    b.start()
    yield b
    if b.running():
        b.stop()


def ensure_running(b: Broker) -> Broker:
    """The broker, started again if an earlier test left it down."""
    if not b.running():
        b.start()
    return b


def tool_command(client: str) -> List[str]:
    if client == "java":
        return [*client_java(), "dev.fjord.e2e.ClientTool"]
    if client == "go":
        return [str(BUILD_DIR / "franz-tool")]
    if client == "confluent":
        return [sys.executable, str(PYTHON_CLIENTS / "confluent_tool.py")]
    if client == "kafka-python":
        return [sys.executable, str(PYTHON_CLIENTS / "kafka_python_tool.py")]
    raise ValueError(client)


def tool_args(cmd: str, **kw) -> List[str]:
    args = [cmd]
    for k, v in kw.items():
        if v is True:
            args.append("--" + k.replace("_", "-"))
        elif v is not None and v is not False:
            args += ["--" + k.replace("_", "-"), str(v)]
    return args


def run_tool(client: str, cmd: str, wall_s: float = 300, **kw) -> subprocess.CompletedProcess:
    """Runs a client tool to completion; raises with its stderr when it fails."""
    proc = subprocess.run(
        tool_command(client) + tool_args(cmd, **kw), capture_output=True, text=True, timeout=wall_s
    )
    if proc.returncode != 0:
        raise AssertionError(f"{client} {cmd} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def unadded_produce(bootstrap: str, topic: str, transactional_id: str, added: int,
                    offsets_group: Optional[str] = None) -> Tuple[List[Dict[str, int]], Optional[Dict[str, str]]]:
    """The franz-go tool's txn-unadded-produce: a transaction with partition `added` added, then one raw
    transactional batch (Produce v11) to every partition of `topic`, then an abort. One row per partition:
    partition, leader, coordinator (the transaction coordinator's node), added (0/1), error (the Produce error
    code). With `offsets_group`, also a TxnOffsetCommit without AddOffsetsToTxn for a group named after it (one whose
    coordinator is not the transaction coordinator, where there is one): its group, coordinator and error."""
    out = run_tool("go", "txn-unadded-produce", wall_s=120, bootstrap=bootstrap, topic=topic,
                   transactional_id=transactional_id, added=added, offsets_group=offsets_group).stdout
    rows, offsets = [], None
    for line in out.splitlines():
        f = line.split()
        if f[0] == "offsets":
            offsets = dict(zip(f[1::2], f[2::2]))
        else:
            rows.append({f[i]: int(f[i + 1]) for i in range(0, len(f), 2)})
    return rows, offsets


def implicit_add(bootstrap: str, topic: str, transactional_id: str, offsets_group: str) -> List[Dict[str, str]]:
    """The franz-go tool's txn-implicit-add: a producer on transaction version 2 (KIP-890 part 2) that never adds
    partitions itself. Transaction 1 writes `committed-<p>` to every partition with Produce v12 and commits an
    offset (TxnOffsetCommit v5, for a group named after `offsets_group` whose coordinator is, where there is one,
    not the transaction coordinator), then commits; a batch with the epoch before EndTxn's bump follows; transaction
    2 writes `aborted-0` and aborts. One row per line printed, its first word as `kind`: produce (txn, partition,
    leader, epoch, error), offsets (group, coordinator, error), end (txn, commit, epoch answered, error), stale
    (partition, epoch, error)."""
    out = run_tool("go", "txn-implicit-add", wall_s=120, bootstrap=bootstrap, topic=topic,
                   transactional_id=transactional_id, offsets_group=offsets_group).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        rows.append({"kind": f[0], **dict(zip(f[1::2], f[2::2]))})
    return rows


def check_implicit_add(rows: List[Dict[str, str]], partitions: int) -> str:
    """Checks what `implicit_add` printed: every batch and the offset commit taken without the producer adding
    partitions, each EndTxn bumping the epoch by one, the zombie batch with the old epoch refused. Returns the
    group the offset was committed for."""
    kinds = {}
    for r in rows:
        kinds.setdefault(r["kind"], []).append(r)
    first = kinds["produce"][:partitions]
    assert sorted(int(r["partition"]) for r in first) == list(range(partitions)), rows
    assert all(r["txn"] == "1" and r["error"] == "0" for r in first), rows
    epoch = int(first[0]["epoch"])
    [offsets] = kinds["offsets"]
    assert offsets["error"] == "0", rows
    end1, end2 = kinds["end"]
    assert (end1["error"], int(end1["epoch"])) == ("0", epoch + 1), rows
    # The zombie's batch: INVALID_PRODUCER_EPOCH (the partition has seen the newer epoch; Kafka 4.4 answers so).
    [stale] = kinds["stale"]
    assert stale["error"] == "47", rows
    [second] = kinds["produce"][partitions:]
    assert (second["txn"], second["error"], int(second["epoch"])) == ("2", "0", epoch + 1), rows
    assert (end2["error"], int(end2["epoch"])) == ("0", epoch + 2), rows
    return offsets["group"]


def start_tool(client: str, cmd: str, log: Path, **kw) -> subprocess.Popen:
    """Starts a client tool in the background with its output going to `log`."""
    with open(log, "wb") as f:
        return subprocess.Popen(tool_command(client) + tool_args(cmd, **kw), stdout=f, stderr=subprocess.STDOUT)


def read_acks(path: Path) -> Dict[int, tuple]:
    """Parses a produce output file into {record index: (partition, offset)}; each index at most once."""
    acks: Dict[int, tuple] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        i, p, off = (int(x) for x in line.split())
        assert i not in acks, f"{path}:{n}: record {i} acknowledged twice"
        acks[i] = (p, off)
    return acks


def check_acks(acks: Dict[int, tuple], partitions: int) -> None:
    """Per partition, acknowledged offsets rise with the record index (the send order)."""
    by_partition: Dict[int, List[tuple]] = {}
    for i, (p, off) in acks.items():
        assert p == i % partitions, f"record {i} acknowledged on partition {p}, sent to {i % partitions}"
        by_partition.setdefault(p, []).append((i, off))
    for p, rows in by_partition.items():
        rows.sort()
        offsets = [off for _, off in rows]
        assert all(a < b for a, b in zip(offsets, offsets[1:])), f"partition {p}: acked offsets out of send order"


def expected_lines(seed: int, acks: Dict[int, tuple]) -> List[str]:
    """What a consumer must print for the acknowledged records, in (partition, offset) order."""
    rows = []
    for i, (p, off) in acks.items():
        r = generate(seed, i)
        rows.append((p, off, consume_line(p, off, r.timestamp, r.key, r.value, r.headers)))
    rows.sort()
    return [line for _, _, line in rows]


def check_consumed(path: Path, seed: int, acks: Dict[int, tuple], partitions: int, exact: bool) -> None:
    """Checks a consume output file against the generator.

    exact: the log must hold exactly the acknowledged records, so the output must equal the expected lines.
    Otherwise unacknowledged records may also be present, but each must still be a generated record, and
    every acknowledged record must be at its acknowledged offset.
    Either way: offsets are dense from 0, no record is stored twice, and per-partition order is send order.
    """
    got = path.read_text().splitlines()
    want = expected_lines(seed, acks)
    stored = []  # (partition, offset, record index)
    if exact:
        if got != want:
            got_set, want_set = set(got), set(want)
            missing = [line for line in want if line not in got_set]
            extra = [line for line in got if line not in want_set]
            raise AssertionError(
                f"consumed {len(got)} lines, expected {len(want)}; {len(missing)} missing, {len(extra)} unexpected;"
                f" first missing: {missing[:1]}; first unexpected: {extra[:1]}"
            )
        stored = [(p, off, i) for i, (p, off) in acks.items()]
    else:
        got_set = set(got)
        missing = [line for line in want if line not in got_set]
        assert not missing, f"{len(missing)} acknowledged records not consumed; first: {missing[0][:200]}"
        for line in got:
            fields = line.split(" ")
            p, off = int(fields[0]), int(fields[1])
            headers = dict(h.split(":") for h in fields[5].split(","))
            i = int(bytes.fromhex(headers["696478"]).decode("ascii"))  # the "idx" header
            r = generate(seed, i)
            assert line == consume_line(p, off, r.timestamp, r.key, r.value, r.headers), f"record {i} corrupted"
            stored.append((p, off, i))
    stored.sort()
    seen: Dict[int, tuple] = {}
    next_offset: Dict[int, int] = {}
    last_index: Dict[int, int] = {}
    for p, off, i in stored:
        assert 0 <= p < partitions, f"record {i} on partition {p}"
        assert p == i % partitions, f"record {i} on partition {p}, sent to {i % partitions}"
        # Offsets are dense from 0: nothing is ever deleted from these topics.
        assert off == next_offset.get(p, 0), f"partition {p}: offset {off} where {next_offset.get(p, 0)} expected"
        next_offset[p] = off + 1
        assert i not in seen, f"record {i} stored twice: at {seen[i]} and {(p, off)}"
        seen[i] = (p, off)
        assert i > last_index.get(p, -1), f"partition {p}: record {i} stored after record {last_index[p]}"
        last_index[p] = i


def ip(*args: str, ns: str = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


class Network:
    """A bridge in namespace `hub`; node i in namespace `node{i}` at 10.77.<subnet>.<i>; the test at .254. A
    partition is a node's link taken down (this kernel has no netem); inside its namespace the node still reaches
    itself, so a client started there with `prefix(i)` talks to the isolated node alone."""

    def __init__(self, nodes: int = 3):
        tag = uuid.uuid4().hex[:4]
        self.subnet = 10 + int(tag, 16) % 200
        self.hub = f"fjhub{tag}"
        self.nodes = [f"fjnode{tag}{i}" for i in range(1, nodes + 1)]
        self.links = [f"fjh{tag}{i}" for i in range(1, nodes + 1)]
        self.client_link = f"fjc{tag}"
        ip("netns", "add", self.hub)
        ip("link", "add", "br0", "type", "bridge", ns=self.hub)
        ip("link", "set", "br0", "up", ns=self.hub)
        for i, (ns, link) in enumerate(zip(self.nodes, self.links), start=1):
            ip("netns", "add", ns)
            ip("link", "set", "lo", "up", ns=ns)
            ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns, ns=self.hub)
            ip("link", "set", link, "master", "br0", ns=self.hub)
            ip("link", "set", link, "up", ns=self.hub)
            ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", ns=ns)
            ip("link", "set", "eth0", "up", ns=ns)
        # The test's own way in: one end here, the other on the bridge.
        ip("link", "add", self.client_link, "type", "veth", "peer", "name", "client", "netns", self.hub)
        ip("link", "set", "client", "master", "br0", ns=self.hub)
        ip("link", "set", "client", "up", ns=self.hub)
        ip("addr", "add", f"10.77.{self.subnet}.254/24", "dev", self.client_link)
        ip("link", "set", self.client_link, "up")

    def address(self, i: int) -> str:
        return f"10.77.{self.subnet}.{i}"

    def prefix(self, i: int) -> List[str]:
        """The command prefix that runs a process in node i's namespace."""
        return ["ip", "netns", "exec", self.nodes[i - 1]]

    def isolate(self, i: int) -> None:
        ip("link", "set", self.links[i - 1], "down", ns=self.hub)

    def heal(self, i: int) -> None:
        ip("link", "set", self.links[i - 1], "up", ns=self.hub)

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.client_link], capture_output=True)
        for ns in self.nodes + [self.hub]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def openssl(workdir: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=workdir, check=True, capture_output=True, timeout=60)


class Pki:
    """A CA and, signed by it, the broker's certificate (for localhost and 127.0.0.1) and a client's; keys are
    unencrypted PKCS#8. `<name>.pem` holds a key and its certificate, as a PEM keystore does."""

    def __init__(self, workdir: Path, ca: str = "ca"):
        self.dir = workdir
        openssl(workdir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out",
                f"{ca}.pem", "-days", "2", "-subj", f"/CN=fjord e2e {ca}")
        self.ca_name = ca
        self.ca = workdir / f"{ca}.pem"

    def issue(self, name: str, subject: str, san: Optional[str] = None) -> str:
        ext = self.dir / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
        openssl(self.dir, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subject)
        openssl(self.dir, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{self.ca_name}.pem", "-CAkey",
                f"{self.ca_name}.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", str(ext))
        (self.dir / f"{name}.pem").write_text((self.dir / f"{name}.key").read_text()
                                              + (self.dir / f"{name}.crt").read_text())
        return name



PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


class Secured:
    """What a cluster all on SASL_SSL needs: one CA's certificate for every node (for `hosts`, localhost and
    127.0.0.1), the nodes' properties (client, inter-broker and controller listeners SASL_SSL with PLAIN users,
    host names checked, the StandardAuthorizer with `User:node` the only super user) and each client's settings.
    Pass `node_props()` as a Cluster's `extra` with `broker_listener="BROKER"`."""

    USERS = {"node": "node-pw", "alice": "alice-pw", "mallory": "mallory-pw"}

    def __init__(self, workdir: Path, hosts: Sequence[str] = ()):
        self.dir = workdir
        self.pki = Pki(workdir)
        names = ["DNS:localhost"] + [f"IP:{h}" for h in sorted(set(hosts) | {"127.0.0.1"})]
        self.pki.issue("node", "/CN=localhost", ",".join(names))

    def jaas(self, login: str) -> str:
        """A listener's PLAIN JAAS text: its users, and `login`, the node's own links' login."""
        users = " ".join(f'user_{name}="{password}"' for name, password in self.USERS.items())
        return f'{PLAIN_LOGIN} required username="{login}" password="{self.USERS[login]}" {users};'

    def node_props(self) -> Dict[str, str]:
        return {
            "listener.security.protocol.map": "BROKER:SASL_SSL,CONTROLLER:SASL_SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.dir / "node.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca),
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.broker.plain.sasl.jaas.config": self.jaas("node"),
            "listener.name.controller.plain.sasl.jaas.config": self.jaas("node"),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:node",
        }

    def librdkafka(self, user: str) -> Dict[str, str]:
        """confluent-kafka's settings to log in as `user`."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": user,
                "sasl.password": self.USERS[user], "ssl.ca.location": str(self.pki.ca)}

    def java(self, user: str) -> Dict[str, str]:
        """Java kafka-clients' properties to log in as `user`."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f'{PLAIN_LOGIN} required username="{user}" password="{self.USERS[user]}";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.ca)}

    def java_config(self, user: str) -> Path:
        """A properties file of `java(user)`, for Kafka's tools (`--command-config`)."""
        path = self.dir / f"{user}.properties"
        write_properties(path, self.java(user))
        return path


class ClusterNode(Broker):
    """One node of a cluster — broker, controller or both — running fjord's binary or Apache Kafka, configured with
    the same KRaft keys."""

    def __init__(self, workdir: Path, node_id: int, roles: str, port: int, controller_port: int, voters: str,
                 kind: str, extra: Optional[Dict[str, str]] = None, host: str = "127.0.0.1",
                 prefix: Optional[List[str]] = None, metadata_dir: bool = False, bootstrap_servers: str = "",
                 broker_listener: str = "PLAINTEXT"):
        # A command prefix runs the node elsewhere (`ip netns exec NS`), listening on `host` there. With
        # `metadata_dir` the metadata log has a dir of its own (`metadata.log.dir`), so the data dir can be wiped
        # alone. With `bootstrap_servers` (and no `voters`) the quorum is dynamic (KIP-853). `broker_listener` names
        # the listener clients and the other brokers reach it on (its protocol from `extra`'s protocol map).
        self.prefix = prefix or []
        self.kind = kind
        self.http = None
        self.clean_exit_codes = (0, 143) if kind == "kafka" else (0,)
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dirs = [self.data_dir]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.roles = roles
        self.port = port
        self.bootstrap = f"{host}:{port}"
        self.proc = None
        self.starts = 0
        self.config = workdir / "server.properties"
        listeners = []
        if "broker" in roles:
            listeners.append(f"{broker_listener}://{self.bootstrap}")
        if "controller" in roles:
            listeners.append(f"CONTROLLER://{host}:{controller_port}")
        props = {
            "process.roles": roles,
            "node.id": str(node_id),
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
        }
        if voters:
            props["controller.quorum.voters"] = voters
        else:
            props["controller.quorum.bootstrap.servers"] = bootstrap_servers
        if metadata_dir:
            props["metadata.log.dir"] = str(workdir / "metadata")
        if "broker" in roles:
            props["advertised.listeners"] = f"{broker_listener}://{self.bootstrap}"
            props["inter.broker.listener.name"] = broker_listener
        if kind == "kafka":
            props.update(KAFKA_INTERNAL_TOPICS)
        else:
            self.http = f"{host}:{free_port()}"
            props["http.listeners"] = f"http://{self.http}"
        props.update(extra or {})
        if kind == "kafka":
            self.jvm = [java_bin(), "-Xms256m", "-Xmx512m", f"-Dlog4j2.configurationFile={kafka_log4j(workdir)}",
                        "-cp", read_classpath("kafka-broker.classpath")]
        else:
            self.binary = Path(os.environ.get("FJORD_BIN", REPO_ROOT / "target" / "release" / "fjord"))
        write_properties(self.config, props)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    def format(self, cluster_id: str, ignore_formatted: bool = False, initial: Optional[List[str]] = None) -> None:
        """Kafka's storage format; with `ignore_formatted` only the dirs not yet formatted (a wiped data dir);
        `initial` adds the flags of a dynamic quorum's first start (`--standalone`, `--no-initial-controllers`)."""
        subprocess.run(
            self.jvm + ["kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", str(self.config)]
            + (["--ignore-formatted"] if ignore_formatted else []) + (initial or []),
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=self.workdir,
        )

    def command(self) -> List[str]:
        if self.kind == "kafka":
            return self.prefix + self.jvm + ["kafka.Kafka", str(self.config)]
        return self.prefix + [str(self.binary), "server", str(self.config)]

    def ready(self) -> bool:
        # Listeners accept before the node serves (it waits for the quorum); its log says when it does.
        if self.kind == "kafka":
            log, marker, count = self.workdir / "server.log", "Kafka Server started", self.starts
        else:
            log, marker, count = self.log_path(), " started elapsed_ms", 1
        return log.exists() and log.read_text(errors="replace").count(marker) >= count


class Cluster:
    """A cluster on loopback ports (fjord by default, Kafka with E2E_BROKER=kafka): `controllers` voters, combined
    broker + controller nodes unless `brokers` adds that many broker-only nodes (ids after the voters')."""

    def __init__(self, workdir: Path, controllers: int = 3, brokers: int = 0, extra: Optional[Dict[str, str]] = None,
                 hosts: Optional[List[str]] = None, prefixes: Optional[List[List[str]]] = None,
                 metadata_dirs: bool = False, node_extra: Optional[Dict[int, Dict[str, str]]] = None,
                 dynamic: bool = False, broker_listener: str = "PLAINTEXT"):
        """`hosts` and `prefixes` (one per node) place nodes elsewhere than loopback, e.g. in network namespaces;
        `metadata_dirs` gives each node's metadata log a dir of its own; `node_extra` adds properties to some nodes
        (by node id), e.g. `broker.rack`. `dynamic` names the controllers in `controller.quorum.bootstrap.servers`
        instead of `controller.quorum.voters` (KIP-853): node 1 begins the quorum alone (Kafka: formatted
        `--standalone`), the others join it (Kafka: `--no-initial-controllers`)."""
        self.kind = os.environ.get("E2E_BROKER", "fjord")
        self.voters_spec = None
        combined = brokers == 0
        n = controllers + brokers
        ports = [(free_port(), free_port()) for _ in range(n)]
        hosts = hosts or ["127.0.0.1"] * n
        prefixes = prefixes or [[]] * n
        voters = ",".join(f"{i + 1}@{hosts[i]}:{ports[i][1]}" for i in range(controllers))
        self.bootstrap_controllers = ",".join(f"{hosts[i]}:{ports[i][1]}" for i in range(controllers))
        if dynamic:
            voters = ""
        roles = lambda i: "broker,controller" if combined else ("controller" if i < controllers else "broker")
        self.voters_spec = voters
        self.extra = extra or {}
        self.nodes = [
            ClusterNode(workdir / f"node-{i + 1}", i + 1, roles(i), p, c, voters, self.kind,
                        {**self.extra, **(node_extra or {}).get(i + 1, {})}, hosts[i], prefixes[i], metadata_dirs,
                        self.bootstrap_controllers, broker_listener)
            for i, (p, c) in enumerate(ports)
        ]
        self.cluster_id = None
        if self.kind == "kafka":
            cluster_id = "-"
            while cluster_id.startswith("-"):
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
            self.cluster_id = cluster_id
            for node in self.nodes:
                initial = None
                if dynamic and "controller" in node.roles:
                    initial = ["--standalone"] if node.node_id == 1 else ["--no-initial-controllers"]
                node.format(cluster_id, initial=initial)
        self.brokers = [node for node in self.nodes if node.is_broker]
        self.bootstrap = ",".join(node.bootstrap for node in self.brokers)

    def start(self, timeout_s: float = 120) -> None:
        """Starts every node at once (a voter waits for the others), then waits for each to serve."""
        for node in self.nodes:
            node.starts += 1
            node.spawn()
        for node in self.nodes:
            node.wait_ready(timeout_s)

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id - 1]

    def extra_broker(self, workdir: Path, node_id: int) -> ClusterNode:
        """A broker-only node of this cluster's quorum, not started: `node_id` may repeat an existing one's."""
        node = ClusterNode(workdir, node_id, "broker", free_port(), 0, self.voters_spec, self.kind, self.extra,
                           bootstrap_servers=self.bootstrap_controllers)
        if self.cluster_id is not None:
            node.format(self.cluster_id)
        return node

    def kill9(self) -> None:
        """Every node at once with SIGKILL: the teardown of a cluster whose exit no test checks. (A graceful stop of
        all three combined nodes waits out a controlled-shutdown bound, about 10 s a cluster.)"""
        for node in self.nodes:
            node.kill9()


def round_trip(client: str, bootstrap: str, topic: str, partitions: int, count: int, codec: str, workdir: Path,
               client_config: Optional[Path] = None) -> None:
    """`client` produces `count` records with acks=all to `topic` (record i to partition i % partitions) and consumes
    them back: every one acknowledged once, offsets rising in send order, each read back exactly once. The client
    takes its other settings (TLS) from the properties file `client_config`, in its own naming."""
    seed = fresh_seed()
    acked = workdir / "produce.out"
    run_tool(client, "produce", bootstrap=bootstrap, topic=topic, count=count, codec=codec, acks="all", seed=seed,
             out=acked, client_config=client_config)
    acks = read_acks(acked)
    assert sorted(acks) == list(range(count))
    check_acks(acks, partitions)
    out = workdir / "consume.out"
    run_tool(client, "consume", bootstrap=bootstrap, topic=topic, partitions=partitions, expect=count, out=out,
             timeout_s=120, client_config=client_config)
    check_consumed(out, seed, acks, partitions, exact=True)


def wait_for(check, what, deadline_s: float = 60):
    """Polls `check` until it returns something true (returned); fails after `deadline_s` saying `what` (a string, or
    a callable giving one, read at failure)."""
    end = time.monotonic() + deadline_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < end, what() if callable(what) else what
        time.sleep(0.2)


def read_until_quiet(bootstrap: str, topic: str, partitions: int, expect: int, isolation: str = "read_committed",
                     wait_s: float = 90, quiet_s: float = 3, tolerate_errors: bool = False) -> list:
    """The messages a consumer with `isolation` reads from the start of `topic`'s partitions, once `expect` came and
    then nothing for `quiet_s` (so that anything extra shows too), or all that came in `wait_s`. Consumer errors
    fail the read unless `tolerate_errors` (a cluster in failover)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages, quiet_since = [], None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error():
            assert tolerate_errors, m.error()
            m = None
        if m is None:
            if len(messages) >= expect:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > quiet_s:
                    break
            continue
        quiet_since = None
        messages.append(m)
    c.close()
    return messages


def create_topics(bootstrap: str, names: List[str], partitions: int, replication_factor: int) -> None:
    """Creates `names`, each with `partitions` partitions of `replication_factor` replicas, through the admin API."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, replication_factor) for t in names]).values():
        future.result(30)


def kafka_tool(main: str, *args: str, timeout_s: float = 120) -> str:
    """Runs one of Kafka's own tools (a main class from the Kafka jars) to completion; its stdout."""
    cmd = [*kafka_tools_java(), main, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, f"{main} {args} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc.stdout


def metadata_quorum_status(bootstrap: str, timeout_s: float = 60, command_config: Optional[Path] = None
                           ) -> Dict[str, str]:
    """`kafka-metadata-quorum --bootstrap-server <bootstrap> describe --status` (Kafka's own tool), as a dict;
    with `command_config`, the client properties it connects with."""
    config = ["--command-config", str(command_config)] if command_config else []
    proc = subprocess.run(
        [*kafka_tools_java(), "org.apache.kafka.tools.MetadataQuorumCommand",
         "--bootstrap-server", bootstrap, *config, "describe", "--status"],
        capture_output=True, text=True, timeout=timeout_s,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kafka-metadata-quorum failed: {proc.stderr[-2000:]}")
    status = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(":")
        status[key.strip()] = value.strip()
    return status


GO_MOD = E2E_DIR / "clients" / "go" / "go.mod"
# franz-go's kgo integration tests (every one that talks to a broker), but for the one needing what fjord does not
# have yet: the share groups' offsets admin APIs (KIP-932: TestShareGroupOffsetsAdmin).
FRANZ_TESTS = [
    "TestTxnEtl", "TestGroupETL", "TestGroupSimple", "TestConsumeRegex", "Test848RegexBrokerResolves", "TestIssue325",
    "TestIssue337", "TestIssue434", "TestAddRemovePartitions", "TestPauseIssue489", "TestPauseIssueOct2023",
    "TestIssue523", "TestIssue648", "TestIssue810", "TestIssue865", "TestUnknownGroupOffsetFetchPinned",
    "TestPing", "TestIssue1034", "TestConsumeTopicRetrieval", "TestConsumeTopicRetrieval_Many",
    "TestDirectPartitionPurge", "TestIssueFetchLargerThanBrokerMaxReadBytes", "TestPooling", "TestHookPollStart",
    "TestConsumeMaxDecompressBatchBytes", "TestClient_Produce", "TestIssue769", "TestIssueProduceBrokerTooOldFailsRecords",
    "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic", "TestIssue831", "TestClient_ProduceLargeMessages",
    "TestShareGroup", "TestShareGroupETL", "TestShareGroupAckOnClose", "TestConsumeRegexShareSkipsInternal",
]
# Subtests that must run (not be skipped) against a broker with KIP-848 and static membership.
FRANZ_MUST_PASS = [
    "TestGroupETL/range", "TestGroupETL/cooperative-sticky", "TestGroupETL/range/848", "TestGroupETL/sticky/848",
    "TestGroupETL/cooperative-sticky/static", "TestGroupETL/sticky/848/static", "TestGroupSimple/classic",
    "TestGroupSimple/848", "TestConsumeRegex", "Test848RegexBrokerResolves", "TestIssue523/roundrobin",
    "TestIssue523/sticky", "TestTxnEtl/range", "TestTxnEtl/cooperative-sticky", "TestTxnEtl/sticky/848",
    "TestTxnEtl/cooperative-sticky/static", "TestTxnEtl/sticky/848/static", "TestShareGroup", "TestShareGroupETL",
    "TestShareGroupAckOnClose", "TestConsumeRegexShareSkipsInternal",
]


def franz_go_dir() -> Path:
    version = re.search(r"github.com/twmb/franz-go (v\S+)", GO_MOD.read_text())
    assert version, "no franz-go version in clients/go/go.mod"
    out = subprocess.run(["go", "mod", "download", "-json", f"github.com/twmb/franz-go@{version.group(1)}"],
                         capture_output=True, text=True, timeout=300, check=True)
    return Path(json.loads(out.stdout)["Dir"])


# Tests whose own check races against a real broker, run once more if they alone failed: Test848RegexBrokerResolves
# stops polling once it has records from as many topics as it wants, counting `__consumer_offsets` (which it also
# subscribes to, and which has records on a real broker) though it is not among them, so it fails whenever those
# records come before the last wanted topic's.
FRANZ_RACY = ["Test848RegexBrokerResolves"]


def franz_go_tests(bootstrap: str, replication_factor: int, workdir: Path) -> None:
    """franz-go's own pkg/kgo integration tests (FRANZ_TESTS), from the module cache, with KGO_SEEDS pointing at
    `bootstrap` and its topics created with `replication_factor` replicas."""
    env = dict(os.environ, KGO_SEEDS=bootstrap, KGO_TEST_RF=str(replication_factor), KGO_TEST_RECORDS="20000")
    started = time.monotonic()

    def run(tests: List[str], out: Path):
        proc = subprocess.run(["go", "test", "./pkg/kgo", "-count=1", "-timeout", "400s", "-v", "-run",
                               "^(" + "|".join(tests) + ")$"],
                              cwd=franz_go_dir(), env=env, capture_output=True, text=True, timeout=480)
        out.write_text(proc.stdout + proc.stderr)
        return proc, {m.group(2): m.group(1) for m in re.finditer(r"^\s*--- (PASS|FAIL|SKIP): (\S+)", proc.stdout, re.M)}

    proc, results = run(FRANZ_TESTS, workdir / "go-test.out")
    failed = sorted(k for k, v in results.items() if v == "FAIL")
    if failed and set(failed) <= set(FRANZ_RACY):
        print(f"franz-go: running {failed} once more (a race in the test itself, see FRANZ_RACY)")
        proc, again = run(failed, workdir / "go-test-again.out")
        results.update(again)
        failed = sorted(k for k, v in results.items() if v == "FAIL")
    print(f"franz-go ({time.monotonic() - started:.0f}s): " + ", ".join(f"{k}={v}" for k, v in sorted(results.items())))
    assert proc.returncode == 0 and not failed, f"failed: {failed}; see {workdir / 'go-test.out'}"
    not_passed = [t for t in FRANZ_MUST_PASS if results.get(t) != "PASS"]
    assert not not_passed, f"did not pass: {[(t, results.get(t)) for t in not_passed]}"
