#!/usr/bin/env python3
"""Side-by-side benchmark of fjord and Apache Kafka (driven by bench/run.sh).

Owns: starting each broker with equivalent single-node configs, alternating Kafka and fjord round by
round (A B A B) in two durability modes, driving both with Kafka's own load tools (kafka-tools) and with
the franz-go load generator in bench/loadgen, sampling the broker's RSS and CPU time from /proc,
timing start-up until ApiVersions is answered, measuring loopback and disk limits, and writing the
results (markdown and JSON) with the fjord/Kafka ratio of every figure.
"""

import argparse
import base64
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BUILD = BENCH / ".build"

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from ports import free_port  # noqa: E402,F401
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
KIB = 1024
# Value size of the warm-up records; the e2e tool ignores records of any size but its own.
WARMUP_SIZE = 16
# The same segment size for both brokers (Kafka's default).
SEGMENT_BYTES = 1 << 30
TOOL_JVM = ["-Xmx512M", "-XX:+UseG1GC"]
# How Kafka's start script runs the broker (heap and GC flags), so Kafka is measured as shipped.
KAFKA_JVM = [
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
MODES = {
    # Kafka's default: acknowledge from the page cache, flush by interval (never, by default).
    "page-cache": {"kafka": {}, "fjord": {"log.flush.interval.messages": "9223372036854775807"}},
    # Durable: Kafka flushes after every append; fjord's default fsyncs before acknowledging, with
    # group commit across requests and partitions.
    "fsync": {"kafka": {"log.flush.interval.messages": "1"}, "fjord": {}},
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------
# Profiles: what each mode runs.


class Profile:
    def __init__(self, smoke: bool):
        self.smoke = smoke
        self.rounds = 1 if smoke else 2
        # Smoke mode exercises every workload once, in the page-cache mode only, to stay under two minutes.
        self.modes = ["page-cache"] if smoke else list(MODES)
        # Bytes each throughput row sends. The same in both modes: fjord's durable rows are compared with
        # Kafka's page-cache rows, and a shorter row weighs the client's own start (JIT, first
        # connection) more — with 80 MB, fjord's durable rows read 30 % low.
        self.row_bytes = {"page-cache": 2_000_000, "fsync": 1_000_000} if smoke else {
            "page-cache": 400_000_000,
            "fsync": 400_000_000,
        }
        # ProducerPerformance rows: (size, acks, codec, partitions, extra producer props).
        if smoke:
            self.pp_rows = [(100, "1", "none", 1, {}), (KIB, "all", "lz4", 4, {})]
            self.franz_rows = [(KIB, "1", "none", 8, {})]
        else:
            # The whole cross product the workload list names: 100 B and 1 KiB, acks=1 and all, no
            # compression / lz4 / zstd, 1 and 8 partitions.
            self.pp_rows = [
                (size, acks, codec, parts, {})
                for size in (100, KIB)
                for acks in ("1", "all")
                for codec in ("none", "lz4", "zstd")
                for parts in (1, 8)
            ] + [
                # Large batches: how close each broker gets to the loopback / disk limit.
                (KIB, "1", "none", 8, {"batch.size": "1048576", "linger.ms": "20"}),
            ]
            # The second client checks each dimension at least once, not the whole product (a full run
            # would pass an hour).
            self.franz_rows = [
                (100, "1", "none", 8, {}),
                (100, "all", "lz4", 8, {}),
                (KIB, "1", "none", 1, {}),
                (KIB, "all", "none", 8, {}),
                (KIB, "1", "lz4", 1, {}),
                (KIB, "1", "zstd", 8, {}),
                (KIB, "all", "zstd", 1, {}),
                # Large batches from the faster client: how close the broker gets to the limits.
                (KIB, "all", "none", 8, {"batch-bytes": "1048576", "linger": "20ms"}),
            ]
        # Fixed-rate latency runs: fractions of Kafka's max rate for the reference row, seconds each.
        self.latency_fractions = [0.5] if smoke else [0.25, 0.5, 0.75]
        self.latency_seconds = 2 if smoke else 10
        # Leading seconds of each fixed-rate run left out of the percentiles: the client's own start.
        self.latency_warmup_seconds = 1 if smoke else 5
        self.e2e_seconds = 2 if smoke else 10
        self.consume_passes = 1 if smoke else 5
        self.e2e_java_records = 200 if smoke else 10000
        self.startup_partitions = [0] if smoke else [0, 1000, 10000]
        self.iperf_seconds = 1 if smoke else 5
        self.fio_size = "32M" if smoke else "1G"
        self.fsync_probe_seconds = 1 if smoke else 30
        self.tool_timeout = 120 if smoke else 600

    # The reference row for fixed-rate latency: 1 KiB, acks=all, no compression, 1 partition; in smoke
    # mode the first row.
    def latency_reference(self):
        if self.smoke:
            return self.pp_rows[0]
        return (KIB, "all", "none", 1, {})

    # The row whose topic the consume workloads read back.
    def consume_source(self):
        if self.smoke:
            return self.pp_rows[0]
        return (KIB, "1", "none", 8, {})


def row_id(size, acks, codec, partitions, extra) -> str:
    rid = f"{'1KiB' if size == KIB else f'{size}B'} acks={acks} {codec} {partitions}p"
    if extra:
        rid += " large-batch"
    return rid


def topic_name(rid: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", rid).strip("-")


# ---------------------------------------------------------------------------------------------------
# Process sampling from /proc.


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process in seconds (fields 14 and 15 of /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children: a load tool's own CPU is the difference
    across its run (brokers are children too, but only stop between workloads)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def proc_rss_bytes(pid: int) -> int:
    fields = Path(f"/proc/{pid}/statm").read_text().split()
    return int(fields[1]) * PAGE_SIZE


class Sampler:
    """Samples a broker's RSS in the background; measure() brackets a workload with CPU readings."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = 0
        self.window_peak = 0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop_flag.wait(0.2):
            try:
                rss = proc_rss_bytes(self.pid)
            except OSError:
                return
            self.peak = max(self.peak, rss)
            self.window_peak = max(self.window_peak, rss)

    def begin(self):
        self.window_peak = proc_rss_bytes(self.pid)
        return proc_cpu_seconds(self.pid)

    def end(self, cpu_before: float):
        return proc_cpu_seconds(self.pid) - cpu_before, max(self.window_peak, proc_rss_bytes(self.pid))

    def stop(self) -> None:
        self.stop_flag.set()


def measured(sampler: "Sampler", run):
    """Runs one load tool: (its result, broker CPU seconds, broker peak RSS, the tool's own CPU
    seconds, wall seconds)."""
    cpu0, client0, t0 = sampler.begin(), children_cpu_seconds(), time.monotonic()
    result = run()
    cpu, rss = sampler.end(cpu0)
    return result, cpu, rss, children_cpu_seconds() - client0, time.monotonic() - t0


# ---------------------------------------------------------------------------------------------------
# Brokers.


def api_versions(port: int, timeout: float = 1.0) -> Optional[Dict[int, int]]:
    """Sends ApiVersions v0; returns {api key: max version} or None if nothing answered."""
    client_id = b"fjord-bench"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = recv_exact(s, 4)
            size = struct.unpack(">i", head)[0]
            if size < 10 or size > 1 << 20:
                return None
            resp = recv_exact(s, size)
    except OSError:
        return None
    _corr, error, count = struct.unpack_from(">ihi", resp, 0)
    if error != 0 or count < 0 or 10 + 6 * count > len(resp):
        return None
    versions = {}
    for i in range(count):
        key, _lo, hi = struct.unpack_from(">hhh", resp, 10 + 6 * i)
        versions[key] = hi
    return versions


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def write_properties(path: Path, props: Dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


class Broker:
    kind = "?"

    def __init__(self, workdir: Path, overrides: Dict[str, str], port: Optional[int] = None):
        """`port`: the client listener's port (a cluster's nodes know each other's before they start)."""
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.overrides = overrides
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0

    def command(self) -> List[str]:
        raise NotImplementedError

    def env(self) -> Dict[str, str]:
        return {}

    def output(self) -> Path:
        return self.workdir / f"process-{self.starts}.out"

    def serving(self) -> bool:
        return api_versions(self.port, 0.5) is not None

    def start(self, timeout_s: float = 180) -> float:
        """Starts the process; returns seconds until ApiVersions is answered (then waits until serving)."""
        self.starts += 1
        out = open(self.output(), "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                                     env={**os.environ, **self.env()})
        out.close()
        answered = None
        deadline = t0 + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}; see {self.workdir}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.kind} not serving after {timeout_s}s; see {self.workdir}")
            if answered is None and api_versions(self.port, 0.5) is not None:
                answered = time.monotonic() - t0
            if answered is not None and self.serving():
                return answered
            time.sleep(0.005)

    def stop(self, timeout_s: float = 120) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class FjordBroker(Broker):
    kind = "fjord"

    def __init__(self, workdir: Path, overrides: Dict[str, str], port: Optional[int] = None):
        super().__init__(workdir, overrides, port)
        self.binary = Path(os.environ.get("FJORD_BIN", ROOT / "target" / "release" / "fjord"))
        self.config = workdir / "server.properties"
        props = {
            "node.id": "1",
            "listeners": f"PLAINTEXT://{self.bootstrap}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "log.segment.bytes": str(SEGMENT_BYTES),
            "log.retention.ms": "-1",
        }
        props.update(overrides)
        write_properties(self.config, props)

    def command(self) -> List[str]:
        return [str(self.binary), "server", str(self.config)]

    def env(self) -> Dict[str, str]:
        # Flush rounds of 10 ms or more are logged at debug level; the latency rows report them.
        return {"RUST_LOG": "info,openraft=warn,fjord_broker::flusher=debug"}

    def slow_flush_rounds(self, since: int) -> List[float]:
        """round_ms of each slow flush round logged after byte `since` of the output."""
        try:
            with open(self.output(), "rb") as f:
                f.seek(since)
                text = f.read()
        except OSError:
            return []
        # A round is also logged when only its waiters queued long (round_ms under fjord's 10 ms
        # threshold); those count under the round before.
        return [float(m.group(1)) for m in re.finditer(rb"round_ms=(\d+)", text) if int(m.group(1)) >= 10]


def new_cluster_id() -> str:
    # As Kafka's own generator does: an id starting with '-' would read as an option.
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
    return cluster_id


class KafkaBroker(Broker):
    """Single-node KRaft Kafka (broker and controller in one JVM) from the Maven Central jars."""

    kind = "kafka"

    def __init__(self, workdir: Path, overrides: Dict[str, str], port: Optional[int] = None,
                 cluster_id: Optional[str] = None):
        """`cluster_id`: the one every node of a cluster is formatted with (default: a new one)."""
        super().__init__(workdir, overrides, port)
        self.classpath = (BUILD / "kafka.classpath").read_text().strip()
        controller_port = free_port()
        self.config = workdir / "server.properties"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.segment.bytes": str(SEGMENT_BYTES),
            "log.retention.ms": "-1",
        }
        props.update(overrides)
        write_properties(self.config, props)
        self.log4j = workdir / "log4j2.properties"
        self.log4j.write_text(
            "rootLogger.level=INFO\n"
            "rootLogger.appenderRef.file.ref=FILE\n"
            "appender.file.type=File\n"
            "appender.file.name=FILE\n"
            f"appender.file.fileName={workdir / 'server.log'}\n"
            "appender.file.layout.type=PatternLayout\n"
            "appender.file.layout.pattern=[%d] %p %m (%c)%n\n"
        )
        cluster_id = cluster_id or new_cluster_id()
        subprocess.run(
            self.jvm(TOOL_JVM)
            + ["kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", str(self.config)],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=workdir,
        )

    def jvm(self, flags: List[str]) -> List[str]:
        return ["java", *flags, f"-Dlog4j2.configurationFile={self.log4j}", "-cp", self.classpath]

    def command(self) -> List[str]:
        return self.jvm(KAFKA_JVM) + ["kafka.Kafka", str(self.config)]

    def serving(self) -> bool:
        # The listener answers before the broker is unfenced; its log says when it serves.
        log_file = self.workdir / "server.log"
        if not log_file.exists():
            return False
        return log_file.read_text(errors="replace").count("Kafka Server started") >= self.starts


# ---------------------------------------------------------------------------------------------------
# Load tools.


def kafka_tool(cls: str, args: List[str], timeout: float) -> str:
    cp = (BUILD / "kafka.classpath").read_text().strip()
    log4j = BUILD / "tools-log4j2.properties"
    if not log4j.exists():
        log4j.write_text("rootLogger.level=WARN\nrootLogger.appenderRef.err.ref=ERR\n"
                         "appender.err.type=Console\nappender.err.name=ERR\nappender.err.target=SYSTEM_ERR\n"
                         "appender.err.layout.type=PatternLayout\nappender.err.layout.pattern=%p %m%n\n")
    cmd = ["java", *TOOL_JVM, f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, f"org.apache.kafka.tools.{cls}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{cls} exited {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout


def loadgen(args: List[str], timeout: float) -> dict:
    proc = subprocess.run([str(BUILD / "loadgen"), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen {args[0]} exited {proc.returncode}: {proc.stderr[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


PP_SUMMARY = re.compile(
    r"(\d+) (?:steady state )?records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
    r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def producer_performance(bootstrap, topic, records, size, acks, codec, extra, throughput, timeout,
                         warmup=0, tool_args=()) -> dict:
    """Runs ProducerPerformance; with `warmup` records, the figures are its steady-state summary
    (printed last), which leaves out the client's own start (JIT, connecting, first metadata).
    `tool_args`: more of the tool's own options (a transactional id, ...)."""
    props = [f"bootstrap.servers={bootstrap}", f"acks={acks}", f"compression.type={codec}"]
    props += [f"{k}={v}" for k, v in extra.items()]
    out = kafka_tool(
        "ProducerPerformance",
        ["--topic", topic, "--num-records", str(records + warmup), "--record-size", str(size),
         "--throughput", str(throughput), *tool_args]
        + (["--warmup-records", str(warmup)] if warmup else []) + ["--producer-props", *props],
        timeout,
    )
    m = None
    for m in PP_SUMMARY.finditer(out):
        pass
    if m is None:
        raise RuntimeError(f"ProducerPerformance printed no summary: {out[-500:]}")
    return {
        "records_per_s": float(m.group(2)),
        "mb_per_s": float(m.group(3)) * 1024 * 1024 / 1e6,  # the tool's MB is MiB; report 10^6 bytes
        "p50_ms": float(m.group(6)),
        "p99_ms": float(m.group(8)),
        "p999_ms": float(m.group(9)),
    }


def create_topics(bootstrap: str, prefix: str, topics: int, partitions: int, timeout: float,
                  replication_factor: int = 1) -> None:
    loadgen(["create-topics", "--bootstrap", bootstrap, "--prefix", prefix, "--topics", str(topics),
             "--partitions", str(partitions), "--replication-factor", str(replication_factor)], timeout)


def create_topic(bootstrap: str, prefix: str, partitions: int, replication_factor: int = 1) -> str:
    """Creates one topic; returns its name (create-topics names topics PREFIX-INDEX)."""
    create_topics(bootstrap, prefix, 1, partitions, 120, replication_factor)
    topic = f"{prefix}-0"
    # The first produce to a freshly created Kafka partition stalls for seconds (the client backs off and
    # retries); a few small records first keep that one-time cost out of every measurement, for both brokers.
    loadgen(["produce", "--bootstrap", bootstrap, "--topic", topic, "--records", str(20 * partitions),
             "--size", str(WARMUP_SIZE), "--acks", "1", "--codec", "none"], 120)
    return topic


def drop_from_page_cache(data_dir: Path, topic: str) -> None:
    """Writes back and evicts one topic's segment files only, leaving the rest of the machine's cache."""
    for path in data_dir.glob(f"{topic}-*/*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------------------------------
# Results.


class Results:
    def __init__(self):
        self.rows: Dict[str, dict] = {}
        self.order: List[str] = []
        self.failures: List[str] = []
        # Workloads left out by design (e.g. a tool needs an API the broker lacks), not errors.
        self.skipped: List[str] = []

    def add(self, section: str, name: str, unit: str, better: str, broker: str, value: float) -> None:
        key = f"{section}|{name}"
        if key not in self.rows:
            self.rows[key] = {"section": section, "name": name, "unit": unit, "better": better,
                              "samples": {"kafka": [], "fjord": []}}
            self.order.append(key)
        self.rows[key]["samples"][broker].append(value)
        log(f"  {broker}: {section} / {name}: {fmt(value)} {unit}")

    def fail(self, what: str, error: Exception) -> None:
        msg = f"{what}: {str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__}"
        log(f"FAILED {msg}")
        self.failures.append(msg)

    def summary(self) -> List[dict]:
        out = []
        sections = list(dict.fromkeys(self.rows[k]["section"] for k in self.order))
        for key in sorted(self.order, key=lambda k: sections.index(self.rows[k]["section"])):
            out.append(figures(dict(self.rows[key])))
        return out


def figures(row: dict) -> dict:
    """Sets a row's figure per broker from its samples — the median over rounds, or for a diagnostic
    row the worst round — and the ratio."""
    for b in ("kafka", "fjord"):
        s = row["samples"][b]
        if not s:
            row[b] = None
        else:
            row[b] = max(s) if "diagnostic" in row["section"] else statistics.median(s)
    row["ratio"] = row["fjord"] / row["kafka"] if row["kafka"] and row["fjord"] is not None else None
    return row


def fmt(v: Optional[float]) -> str:
    if v is None:
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if v else "0"


# ---------------------------------------------------------------------------------------------------
# The run.


class Bench:
    def __init__(self, profile: Profile, workroot: Path):
        self.p = profile
        self.work = workroot
        self.results = Results()
        self.limits: Dict[str, float] = {}
        self.latency_rate: Dict[tuple, float] = {}  # (round, mode) -> Kafka's max records/s, reference row
        self.coordinator = {}  # broker -> whether it advertises FindCoordinator (groups)
        self.live: List[Broker] = []

    # Physical limits of this machine, measured in the same run.
    def measure_limits(self) -> None:
        port = free_port()
        server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port), "-B", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(self.p.iperf_seconds), "-J"],
                                 capture_output=True, text=True, timeout=60)
            bps = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
            self.limits["loopback TCP (iperf3), MB/s"] = bps / 8 / 1e6
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            self.results.fail("iperf3", e)
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
        disk = self.work / "fio"
        disk.mkdir(parents=True, exist_ok=True)
        for label, bs in (("sequential write 1 MiB + fdatasync each (fio), MB/s", "1M"),
                          ("sequential write 16 KiB + fdatasync each (fio), MB/s", "16k")):
            try:
                out = subprocess.run(
                    ["fio", "--name=seq", f"--directory={disk}", "--rw=write", f"--bs={bs}",
                     f"--size={self.p.fio_size if bs == '1M' else '64M' if not self.p.smoke else '8M'}",
                     "--fdatasync=1", "--ioengine=sync", "--output-format=json"],
                    capture_output=True, text=True, timeout=600)
                job = json.loads(out.stdout)["jobs"][0]["write"]
                self.limits[label] = job["bw_bytes"] / 1e6
                if bs == "16k":
                    self.limits["fdatasync'd writes per second at 16 KiB (fio)"] = job["iops"]
            except (OSError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as e:
                self.results.fail(f"fio {bs}", e)
        # The disk's own fdatasync latency at a steady, modest rate: the floor (and the tail) under any
        # durable acknowledgement, fjord's or Kafka's fsync mode.
        secs = self.p.fsync_probe_seconds
        label = f"fdatasync latency, 4 KiB appends at 1,000/s for {secs} s (fio)"
        try:
            out = subprocess.run(
                ["fio", "--name=fsync-latency", f"--directory={disk}", "--rw=write", "--bs=4k", "--size=1G",
                 "--fdatasync=1", "--ioengine=sync", "--rate_iops=1000", f"--runtime={secs}", "--time_based",
                 "--output-format=json"],
                capture_output=True, text=True, timeout=secs + 120)
            lat = json.loads(out.stdout)["jobs"][0]["sync"]["lat_ns"]
            for q, key in (("p50", "50.000000"), ("p99", "99.000000"), ("p99.9", "99.900000"),
                           ("p99.99", "99.990000")):
                self.limits[f"{label}: {q}, ms"] = lat["percentile"][key] / 1e6
            self.limits[f"{label}: max, ms"] = lat["max"] / 1e6
        except (OSError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as e:
            self.results.fail("fio fdatasync latency", e)
        shutil.rmtree(disk, ignore_errors=True)

    def start(self, kind: str, workdir: Path, overrides: Dict[str, str]) -> Broker:
        b = FjordBroker(workdir, overrides) if kind == "fjord" else KafkaBroker(workdir, overrides)
        self.live.append(b)
        b.start()
        return b

    def stop(self, b: Broker) -> None:
        b.stop()
        if b in self.live:
            self.live.remove(b)

    def cleanup(self) -> None:
        for b in list(self.live):
            b.kill()
        self.live.clear()

    def run(self) -> None:
        self.measure_limits()
        for rnd in range(1, self.p.rounds + 1):
            for mode in self.p.modes:
                # A B A B: Kafka first so its max rate fixes the latency rates for both in this round.
                for kind in ("kafka", "fjord"):
                    self.workloads(rnd, mode, kind)
            for kind in ("kafka", "fjord"):
                self.startup(rnd, kind)

    def workloads(self, rnd: int, mode: str, kind: str) -> None:
        workdir = self.work / f"r{rnd}-{mode}-{kind}"
        log(f"round {rnd} {mode}: {kind}")
        try:
            b = self.start(kind, workdir, MODES[mode][kind])
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            self.results.fail(f"{kind} start ({mode})", e)
            return
        sampler = Sampler(b.proc.pid)
        self.results.add("memory", f"RSS idle after start ({mode})", "MB", "lower", kind,
                         proc_rss_bytes(b.proc.pid) / 1e6)
        versions = api_versions(b.port) or {}
        self.coordinator[kind] = 10 in versions  # FindCoordinator: needed by the group-based Kafka tools
        try:
            self.produce_rows(b, rnd, mode, kind, sampler)
            self.franz_rows(b, mode, kind, sampler)
            self.latency_rows(b, rnd, mode, kind)
            self.consume_rows(b, mode, kind, sampler)
            self.results.add("memory", f"RSS peak under load ({mode})", "MB", "lower", kind, sampler.peak / 1e6)
        finally:
            sampler.stop()
            self.stop(b)
            shutil.rmtree(workdir / "data", ignore_errors=True)

    def records_for(self, mode: str, size: int) -> int:
        return max(1000, self.p.row_bytes[mode] // size)

    def settle(self, b: Broker, topic: str) -> None:
        """Writes back and evicts a finished row's topic, so every row starts from the same page cache. On this VM the page cache holds about 12 GB: once full, buffered
        writes wait for writeback and reclaim (dd: 2 GB/s, then about 430 MB/s), and a row's figure would
        depend on how many gigabytes the rows before it wrote."""
        try:
            drop_from_page_cache(b.data_dir, topic)
        except OSError as e:
            log(f"could not evict {topic}: {e}")

    def produce_rows(self, b: Broker, rnd: int, mode: str, kind: str, sampler: Sampler) -> None:
        section = f"produce throughput, ProducerPerformance ({mode})"
        for row in self.p.pp_rows:
            size, acks, codec, parts, extra = row
            rid = row_id(*row)
            topic = topic_name(rid)
            records = self.records_for(mode, size)
            try:
                topic = create_topic(b.bootstrap, topic, parts)
                r, cpu, rss, client, seconds = measured(sampler, lambda: producer_performance(
                    b.bootstrap, topic, records, size, acks, codec, extra, -1, self.p.tool_timeout))
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                self.results.fail(f"{kind} {mode} ProducerPerformance {rid}", e)
                continue
            if row != self.p.consume_source():  # the consume rows read it back from the cache
                self.settle(b, topic)
            self.results.add(section, rid, "MB/s", "higher", kind, r["mb_per_s"])
            self.cores_used(mode, kind, f"{rid}, ProducerPerformance", client, cpu, seconds)
            if row == self.p.consume_source():
                gb = records * size / 1e9
                self.results.add("cpu", f"broker CPU s per GB produced, {rid} ({mode})", "s/GB", "lower", kind, cpu / gb)
                self.results.add("memory", f"RSS peak while producing {rid} ({mode})", "MB", "lower", kind, rss / 1e6)
            if row == self.p.latency_reference() and kind == "kafka":
                self.latency_rate[(rnd, mode)] = r["records_per_s"]

    def franz_rows(self, b: Broker, mode: str, kind: str, sampler: Sampler) -> None:
        section = f"produce throughput, franz-go ({mode})"
        for size, acks, codec, parts, extra in self.p.franz_rows:
            rid = row_id(size, acks, codec, parts, extra)
            topic = "franz-" + topic_name(rid)
            try:
                topic = create_topic(b.bootstrap, topic, parts)
                args = (["produce", "--bootstrap", b.bootstrap, "--topic", topic,
                         "--records", str(self.records_for(mode, size)), "--size", str(size),
                         "--acks", acks, "--codec", codec]
                        + [arg for k, v in extra.items() for arg in (f"--{k}", v)])
                r, cpu, _rss, client, seconds = measured(sampler, lambda: loadgen(args, self.p.tool_timeout))
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                self.results.fail(f"{kind} {mode} franz-go produce {rid}", e)
                continue
            self.settle(b, topic)
            self.results.add(section, rid, "MB/s", "higher", kind, r["mb_per_s"])
            self.cores_used(mode, kind, f"{rid}, franz-go", client, cpu, seconds)

    def cores_used(self, mode: str, kind: str, row: str, client_cpu: float, broker_cpu: float,
                   seconds: float) -> None:
        """How many of the machine's cores the load tool and the broker kept busy during a produce row:
        when the two add up to all of them, the row measures who needs less CPU, and the client's
        share is what no broker can win back."""
        if seconds <= 0:
            return
        section = f"cores busy during produce rows, of {os.cpu_count()} ({mode})"
        self.results.add(section, f"{row}: the client", "cores", "—", kind, client_cpu / seconds)
        self.results.add(section, f"{row}: the broker", "cores", "lower", kind, broker_cpu / seconds)

    def flush_mark(self, b: Broker) -> int:
        """Where fjord's output stands before a latency window (see `flush_rounds`)."""
        try:
            return b.output().stat().st_size if isinstance(b, FjordBroker) else 0
        except OSError:
            return 0

    def flush_rounds(self, b: Broker, mode: str, window: str, mark: int) -> None:
        """fjord acknowledges after its group-commit fsync: the flush rounds of 10 ms or more that it
        logged during a latency window (warm-up included) tell disk stalls from broker stalls."""
        if not isinstance(b, FjordBroker) or mode != "fsync":
            return
        rounds = b.slow_flush_rounds(mark)
        section = f"fjord's flush rounds of 10 ms or more during latency windows ({mode}, diagnostic: worst round)"
        self.results.add(section, f"{window}: rounds", "count", "lower", "fjord", len(rounds))
        self.results.add(section, f"{window}: slowest", "ms", "lower", "fjord", max(rounds, default=0.0))

    def latency_rows(self, b: Broker, rnd: int, mode: str, kind: str) -> None:
        kafka_max = self.latency_rate.get((rnd, mode))
        if kafka_max is None:
            self.results.failures.append(f"{kind} {mode} round {rnd}: no Kafka max rate, latency rows not run")
            return
        size, acks, codec, parts, extra = self.p.latency_reference()
        rid = row_id(size, acks, codec, parts, extra)
        for frac in self.p.latency_fractions:
            rate = max(10, int(kafka_max * frac))
            topic = topic_name(f"lat {rid} {int(frac * 100)}")
            section = f"produce latency at {int(frac * 100)}% of Kafka's max ({rid}, linger.ms=0) ({mode})"
            warmup = rate * self.p.latency_warmup_seconds
            try:
                topic = create_topic(b.bootstrap, topic, parts)
                mark = self.flush_mark(b)
                # linger.ms=0 (both clients, both brokers): a batch goes out as soon as the
                # previous request allows, so the figure is the broker's time and not mostly
                # the client's batching wait (5 ms by default).
                r = producer_performance(b.bootstrap, topic, rate * self.p.latency_seconds, size, acks,
                                         codec, {**extra, "linger.ms": "0"}, rate, self.p.tool_timeout,
                                         warmup=warmup)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                self.results.fail(f"{kind} {mode} latency {frac}", e)
                continue
            for q in ("p50", "p99", "p999"):
                self.results.add(section, f"{q} ({rate} rec/s)", "ms", "lower", kind, r[f"{q}_ms"])
            self.flush_rounds(b, mode, f"ProducerPerformance at {int(frac * 100)}%", mark)
            # The same rate from franz-go, timed in microseconds (ProducerPerformance prints whole ms).
            try:
                topic = create_topic(b.bootstrap, topic + "-franz", parts)
                mark = self.flush_mark(b)
                r = loadgen(["produce", "--bootstrap", b.bootstrap, "--topic", topic,
                             "--records", str(rate * self.p.latency_seconds + warmup), "--warmup", str(warmup),
                             "--size", str(size), "--acks", acks, "--codec", codec, "--rate", str(rate),
                             "--linger", "0s"],
                            self.p.tool_timeout)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                self.results.fail(f"{kind} {mode} franz-go latency {frac}", e)
                continue
            for q in ("p50", "p99", "p999"):
                self.results.add(section, f"{q}, franz-go ({rate} rec/s)", "ms", "lower", kind, r[f"{q}_ms"])
            self.flush_rounds(b, mode, f"franz-go at {int(frac * 100)}%", mark)
        # End-to-end: franz-go at half of Kafka's max, one clock for send and receipt.
        rate = max(10, int(kafka_max * 0.5))
        section = f"end-to-end latency at 50% of Kafka's max ({size} B, acks=all, 1p) ({mode})"
        try:
            topic = create_topic(b.bootstrap, "e2e-franz", 1)
            mark = self.flush_mark(b)
            r = loadgen(["e2e", "--bootstrap", b.bootstrap, "--topic", topic,
                         "--records", str(rate * self.p.e2e_seconds), "--size", str(size), "--rate", str(rate)],
                        self.p.tool_timeout)
            for q in ("p50", "p99", "p999"):
                self.results.add(section, f"{q}, franz-go ({rate} rec/s)", "ms", "lower", kind, r[f"{q}_ms"])
            self.flush_rounds(b, mode, "end-to-end franz-go", mark)
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
            self.results.fail(f"{kind} {mode} franz-go e2e", e)
        # Kafka's EndToEndLatency sends one record at a time and commits offsets, so it needs groups.
        if not self.coordinator.get(kind):
            self.results.skipped.append(f"{kind} {mode}: EndToEndLatency skipped (no FindCoordinator/OffsetCommit)")
            return
        try:
            topic = create_topic(b.bootstrap, "e2e-java", 1)
            out = kafka_tool("EndToEndLatency", [b.bootstrap, topic, str(self.p.e2e_java_records), "all",
                                                 str(size)], self.p.tool_timeout)
            m = re.search(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)", out)
            if m is None:
                raise RuntimeError(f"EndToEndLatency printed no percentiles: {out[-300:]}")
            self.results.add(section, "p50, EndToEndLatency (1 in flight)", "ms", "lower", kind, float(m.group(1)))
            self.results.add(section, "p99, EndToEndLatency (1 in flight)", "ms", "lower", kind, float(m.group(2)))
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            self.results.fail(f"{kind} {mode} EndToEndLatency", e)

    def consume_rows(self, b: Broker, mode: str, kind: str, sampler: Sampler) -> None:
        row = self.p.consume_source()
        size, _acks, _codec, parts, _extra = row
        rid = row_id(*row)
        topic = topic_name(rid) + "-0"
        records = self.records_for(mode, size)
        section = f"consume throughput ({mode})"
        warm = f"{rid}, franz-go, from page cache ({self.p.consume_passes} passes)"
        for label, cold in ((warm, False), (f"{rid}, franz-go, cache dropped", True)):
            try:
                if cold:
                    drop_from_page_cache(b.data_dir, topic)
                # From the cache the topic is read several times over: one pass takes well under a
                # second at these rates, too short for a steady figure.
                passes = 1 if cold else self.p.consume_passes
                cpu0 = sampler.begin()
                r = loadgen(["consume", "--bootstrap", b.bootstrap, "--topic", topic, "--partitions", str(parts),
                             "--records", str(records), "--passes", str(passes)], self.p.tool_timeout)
                cpu, _rss = sampler.end(cpu0)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                self.results.fail(f"{kind} {mode} consume {label}", e)
                continue
            self.results.add(section, label, "MB/s", "higher", kind, r["mb_per_s"])
            if r.get("client_cpu_s"):
                self.results.add("cpu", f"franz-go consumer's own CPU s per GB, {label} ({mode})", "s/GB", "lower",
                                 kind, r["client_cpu_s"] / (r["records"] * size / 1e9))
            if not cold:
                gb = passes * records * size / 1e9
                self.results.add("cpu", f"broker CPU s per GB consumed, {rid} ({mode})", "s/GB", "lower", kind, cpu / gb)
        if not self.coordinator.get(kind):
            self.results.skipped.append(f"{kind} {mode}: ConsumerPerformance skipped (no FindCoordinator)")
            return
        try:
            out = kafka_tool("ConsumerPerformance", ["--bootstrap-server", b.bootstrap, "--topic", topic,
                                                     "--messages", str(records), "--timeout", "30000",
                                                     "--hide-header"], self.p.tool_timeout)
            # start, end, MB, MB/s, nMsg, nMsg/s, rebalance ms, fetch ms, fetch MB/s, fetch nMsg/s
            fields = [f.strip() for f in out.strip().splitlines()[-1].split(",")]
            self.results.add(section, f"{rid}, ConsumerPerformance (fetch MB/s, excl. rebalance)", "MB/s", "higher",
                             kind, float(fields[8]) * 1024 * 1024 / 1e6)
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
            self.results.fail(f"{kind} {mode} ConsumerPerformance", e)

    def startup(self, rnd: int, kind: str) -> None:
        """Start-up to the first answered ApiVersions, with N empty partitions on disk (page-cache config)."""
        for n in self.p.startup_partitions:
            workdir = self.work / f"r{rnd}-startup{n}-{kind}"
            log(f"round {rnd} start-up with {n} partitions: {kind}")
            try:
                b = self.start(kind, workdir, MODES["page-cache"][kind])
                if n:
                    per_topic = min(n, 100)
                    create_topics(b.bootstrap, "s", n // per_topic, per_topic, 1800)
                self.stop(b)
                self.live.append(b)
                seconds = b.start(timeout_s=600)
                self.results.add("start-up to first ApiVersions answer", f"{n} partitions on disk", "s", "lower",
                                 kind, seconds)
                self.stop(b)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                self.results.fail(f"{kind} start-up {n} partitions", e)
                self.cleanup()
            shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------
# Reports.


def machine() -> dict:
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")), "0")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    df = subprocess.run(["df", "-h", "--output=source,fstype,size", str(BENCH)], capture_output=True, text=True)
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(int(mem) / 1024 / 1024, 1),
        "disk": " ".join(df.stdout.split()[3:]) if df.returncode == 0 else "?",
        "kernel": platform.release(),
        "load_avg_at_start": os.getloadavg()[0],
    }


def git_rev() -> str:
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def geomean(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return None
    prod = 1.0
    for x in xs:
        prod *= x
    return prod ** (1 / len(xs))


def goals(rows: List[dict], limits: Dict[str, float]) -> List[tuple]:
    """(goal, measured, met) for each of issue 4's goals that this run measured."""
    out = []

    def ratios(pred):
        return [r["ratio"] for r in rows if pred(r) and r["ratio"] is not None]

    def check(goal, vals, target, higher):
        g = geomean(vals)
        if g is not None:
            out.append((goal, f"{g:.2f}× (geomean of {len(vals)})", g >= target if higher else g <= target))

    check("produce throughput ≥ 1.5× (page-cache)", ratios(
        lambda r: r["section"].startswith("produce throughput") and "(page-cache)" in r["section"]), 1.5, True)
    check("produce throughput ≥ 1.5× (fsync)", ratios(
        lambda r: r["section"].startswith("produce throughput") and "(fsync)" in r["section"]), 1.5, True)
    check("consume throughput ≥ 1.5×", ratios(lambda r: r["section"].startswith("consume")), 1.5, True)
    check("p99 produce latency at 50% ≤ 0.33×", ratios(
        lambda r: "at 50% of Kafka" in r["section"] and r["section"].startswith("produce latency")
        and r["name"].startswith(("p99 ", "p99,"))), 0.33, False)
    check("p99 end-to-end latency at 50% ≤ 0.33×", ratios(
        lambda r: r["section"].startswith("end-to-end") and r["name"].startswith("p99,")), 0.33, False)
    check("RSS ≤ 0.2×", ratios(lambda r: r["section"] == "memory" and "peak" in r["name"]), 0.2, False)
    check("start-up ≤ 0.05×", ratios(lambda r: r["section"].startswith("start-up")), 0.05, False)
    # fjord durable (fsync mode) against Kafka page-cache, same rows.
    by = {(r["section"], r["name"]): r for r in rows}
    cross: Dict[str, List[float]] = {}
    for (section, name), r in by.items():
        if section.startswith("produce throughput") and "(fsync)" in section:
            pc = by.get((section.replace("(fsync)", "(page-cache)"), name))
            if pc and pc["kafka"] and r["fjord"]:
                cross.setdefault(section.split(", ")[1].split(" (")[0], []).append(r["fjord"] / pc["kafka"])
    check("fjord durable ≥ 1.0× Kafka page-cache (produce)", [x for xs in cross.values() for x in xs], 1.0, True)
    for client, xs in cross.items():
        check(f"— of which {client} rows", xs, 1.0, True)
    limit = min([v for k, v in limits.items() if k.startswith(("loopback", "sequential write 1 MiB"))], default=None)
    for mode in ("page-cache", "fsync"):
        # The best large-batch figure of either client.
        big = [r["fjord"] for r in rows if r["name"].endswith("large-batch") and f"({mode})" in r["section"]
               and r["fjord"]]
        if limit and big:
            frac = max(big) / limit
            out.append((f"large-batch produce ≥ 70% of min(loopback, fdatasync disk) ({mode})",
                        f"{frac:.0%} of {limit:.0f} MB/s", frac >= 0.7))
    return out


def section_tables(rows: List[dict]) -> List[str]:
    """The rows as a table per section: Kafka's figure beside fjord's, and their ratio."""
    lines: List[str] = []
    section = None
    for r in rows:
        if r["section"] != section:
            section = r["section"]
            lines += ["", f"## {section}", "", "| Workload | Unit | Kafka | fjord | fjord/Kafka | better |",
                      "|---|---|---:|---:|---:|---|"]
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else "—"
        lines.append(f"| {r['name']} | {r['unit']} | {fmt(r['kafka'])} | {fmt(r['fjord'])} | {ratio} | {r['better']} |")
    return lines


def side_by_side(title: str, meta: dict, results: Results, setting: str) -> str:
    """A smaller benchmark's report: a table per section, Kafka beside fjord, and what failed."""
    m = meta["machine"]
    lines = [
        f"# {title}, fjord vs Apache Kafka — {meta['date']} ({meta['mode']})", "",
        f"Command: `{meta['command']}` (fjord {meta['fjord_rev']}). Machine: {m['cores']} cores, "
        f"{m['memory_gib']} GiB, disk {m['disk']}; {setting}. Rounds: {meta['rounds']}; each figure is "
        "the median over rounds. Ratio = fjord / Kafka.",
    ]
    lines += section_tables(results.summary())
    lines += ["", "## Failed", ""] + ([f"- {f}" for f in results.failures] or ["- nothing"])
    return "\n".join(lines) + "\n"


def write_report(base: Path, meta: dict, results: Results, md: str, smoke: bool) -> int:
    """Writes `base`.md and .json and prints the report; in smoke mode, non-zero when anything failed or a row
    lacks a broker's figure."""
    rows = results.summary()
    base.with_suffix(".md").write_text(md)
    base.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "failures": results.failures},
                                                    indent=1))
    print(md)
    log(f"wrote {base}.md and .json in {meta['seconds']} s")
    if smoke and (results.failures or not rows or any(r["kafka"] is None or r["fjord"] is None for r in rows)):
        print("smoke: failed: " + "; ".join(results.failures), file=sys.stderr)
        return 1
    return 0


def markdown(meta: dict, rows: List[dict], limits: Dict[str, float], results: Results, profile: Profile) -> str:
    m = meta["machine"]
    lines = [
        f"# fjord vs Apache Kafka {meta['kafka_version']} — {meta['date']} ({meta['mode']})",
        "",
        f"Command: `{meta['command']}` (fjord {meta['fjord_rev']}). Machine: {m['cores']} cores ({m['cpu']}), "
        f"{m['memory_gib']} GiB, disk {m['disk']}, kernel {m['kernel']}; load average at start "
        f"{m['load_avg_at_start']:.2f}. Rounds: {meta.get('rounds', profile.rounds)} (Kafka, fjord alternating); each figure is the "
        "median over rounds (for diagnostic rows, the worst round). Ratio = fjord / Kafka; 'better' says which "
        "direction wins.",
        "",
        "## Physical limits (same run)",
        "",
        "| Limit | Value |",
        "|---|---:|",
    ]
    lines += [f"| {k} | {fmt(v)} |" for k, v in limits.items()]
    lines += section_tables(rows)
    lines += ["", "## Goals (issue 4)", "", "| Goal | Measured | Met |", "|---|---|---|"]
    lines += [f"| {g} | {v} | {'yes' if ok else '**no**'} |" for g, v, ok in goals(rows, limits)]
    lines += ["", "## Failed", ""]
    lines += [f"- {f}" for f in dict.fromkeys(results.failures)] or ["- nothing"]
    lines += ["", "## Skipped", ""]
    lines += [f"- {f}" for f in dict.fromkeys(results.skipped)] or ["- nothing"]
    return "\n".join(lines) + "\n"


def update_benchmarks_md(table_md: str, rel_json: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    begin, end = "<!-- latest-run:begin -->", "<!-- latest-run:end -->"
    text = path.read_text() if path.exists() else ""
    if begin not in text or end not in text:
        log("BENCHMARKS.md has no latest-run markers; not updated")
        return
    body = table_md.replace("\n## ", "\n#### ").split("\n", 1)
    block = f"{begin}\n### {body[0].lstrip('# ')}\n{body[1]}\nMachine-readable: `{rel_json}`.\n{end}"
    path.write_text(text[: text.index(begin)] + block + text[text.index(end) + len(end):])


def render(path: Path) -> int:
    data = json.loads(path.read_text())
    results = Results()
    results.failures = data["failures"]
    results.skipped = data["skipped"]
    full = data["meta"]["mode"] == "full"
    data["rows"] = [figures(row) for row in data["rows"]]
    md = markdown(data["meta"], data["rows"], data["limits"], results, Profile(not full))
    data["goals"] = [{"goal": g, "measured": v, "met": ok} for g, v, ok in goals(data["rows"], data["limits"])]
    path.write_text(json.dumps(data, indent=1))
    path.with_suffix(".md").write_text(md)
    if full:
        update_benchmarks_md(md, os.path.relpath(path, ROOT))
    print(md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run that only checks the harness works")
    ap.add_argument("--out", type=Path, help="results directory (default bench/results, smoke: bench/.work/results)")
    ap.add_argument("--command", default="bench/run.sh", help="the command line recorded in the report")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="run nothing: re-render a results JSON (its .md, goals and, for a full run, "
                         "BENCHMARKS.md) with this version of the report code")
    ap.add_argument("--modes", help="comma-separated subset of the flush modes to run (page-cache,fsync); "
                                    "a partial run's results do not update BENCHMARKS.md")
    ap.add_argument("--rounds", type=int, help="rounds to run (default 2, smoke 1)")
    args = ap.parse_args()
    if args.render:
        return render(args.render)
    profile = Profile(args.smoke)
    partial = False
    if args.modes:
        modes = args.modes.split(",")
        unknown = [m for m in modes if m not in MODES]
        if unknown:
            ap.error(f"unknown mode(s) {unknown}; known: {list(MODES)}")
        partial = modes != profile.modes
        profile.modes = modes
    if args.rounds is not None:
        if args.rounds < 1:
            ap.error("--rounds must be at least 1")
        partial = partial or args.rounds != profile.rounds
        profile.rounds = args.rounds
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    work = BENCH / ".work" / stamp
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # Smoke and partial runs go under .work unless --out says otherwise: only full runs are kept.
    out_dir = args.out or (BENCH / ".work" / "results" if args.smoke or partial else BENCH / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    bench = Bench(profile, work)

    def on_signal(signum, _frame):
        bench.cleanup()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t0 = time.monotonic()
    meta = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "mode": "smoke" if args.smoke else "partial" if partial else "full",
        "rounds": profile.rounds,
        "modes": profile.modes,
        "command": args.command,
        "fjord_rev": git_rev(),
        "kafka_version": re.search(r"kafka_2\.13-([\d.]+)\.jar", (BUILD / "kafka.classpath").read_text()).group(1),
        "machine": machine(),
    }
    try:
        bench.run()
    finally:
        bench.cleanup()
    meta["seconds"] = round(time.monotonic() - t0)
    rows = bench.results.summary()
    md = markdown(meta, rows, bench.limits, bench.results, profile)
    base = out_dir / stamp
    base.with_suffix(".md").write_text(md)
    base.with_suffix(".json").write_text(json.dumps(
        {"meta": meta, "limits": bench.limits, "rows": rows, "failures": bench.results.failures,
         "skipped": bench.results.skipped,
         "goals": [{"goal": g, "measured": v, "met": ok} for g, v, ok in goals(rows, bench.limits)]}, indent=1))
    if meta["mode"] == "full":
        update_benchmarks_md(md, os.path.relpath(base.with_suffix(".json"), ROOT))
    shutil.rmtree(work, ignore_errors=True)
    print(md)
    log(f"wrote {base}.md and .json in {meta['seconds']} s")
    # Smoke mode checks the harness: nothing failed, and every row not skipped by design has both figures.
    if args.smoke:
        skipped_tools = ("EndToEndLatency", "ConsumerPerformance")
        missing = [f"{r['section']} / {r['name']}" for r in rows if (r["kafka"] is None or r["fjord"] is None)
                   and not any(t in r["name"] for t in skipped_tools)]
        if bench.results.failures or missing or not rows:
            print("smoke: failed: " + "; ".join(bench.results.failures + missing), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
