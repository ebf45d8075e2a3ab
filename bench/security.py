#!/usr/bin/env python3
"""Security's cost, fjord against Apache Kafka, one node each (see BENCHMARKS.md, "Security").

Each round starts, for each broker (Kafka first), one node in page-cache mode (bench.py's) with three client
listeners: PLAINTEXT, SSL and SASL_SSL (PLAIN), the same PEM certificate (made with openssl, RSA 2048) for both
brokers. It measures:

1. *TLS:* produce (ProducerPerformance, 1 KiB records, acks=1, 8 partitions) and consume (ConsumerPerformance)
   throughput over each listener with the same Java client, and the broker's CPU seconds per GB of each; the SSL
   and SASL_SSL figures as a share of the PLAINTEXT one on the same broker, the cost of TLS that the goal compares
   (fjord's share at least Kafka's). On 2 cores the client's own encryption competes with the broker, and more so
   at the faster broker's rate: the CPU rows tell the broker's cost apart.
2. *Authorization:* a second node with the StandardAuthorizer on, `allow.everyone.if.no.acl.found=true` and
   10,000 ACLs of other principals in place (literal and prefixed topic ACLs, group ACLs; `loadgen acls`), the
   client allowed by a prefixed ACL and not a super user, so every request is judged against them: franz-go
   producing 400 B records one to a batch (acks=1, 8 partitions: many small requests) on it and on the first node
   (no authorizer), records a second; the share kept with the authorizer is what the goal bounds (under 5 % lost).

    bench/run.sh --security           # 3 rounds (about 10 minutes; each broker's data removed once it stops)
    bench/run.sh --security --smoke   # one round, tiny rows, 200 ACLs: checks the harness
"""

import argparse
import datetime
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (BENCH, KIB, MODES, FjordBroker, KafkaBroker, Results, create_topic, free_port, git_rev,  # noqa: E402
                   kafka_tool, loadgen, log, machine, proc_cpu_seconds, producer_performance, side_by_side,
                   write_properties,
                   write_report)

PARTITIONS = 8
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USER, PASSWORD = "bench", "bench-secret"
ACL_PREFIX = "authz"


def openssl(workdir: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=workdir, check=True, capture_output=True, timeout=60)


def make_certificates(workdir: Path) -> Dict[str, Path]:
    """A CA and the broker's certificate for 127.0.0.1 signed by it; `broker.pem` holds key and chain."""
    workdir.mkdir(parents=True, exist_ok=True)
    openssl(workdir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=fjord bench CA")
    (workdir / "broker.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl(workdir, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", "/CN=localhost")
    openssl(workdir, "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", "2", "-extfile", "broker.ext")
    (workdir / "broker.pem").write_text((workdir / "broker.key").read_text() + (workdir / "broker.crt").read_text())
    return {"ca": workdir / "ca.pem", "keystore": workdir / "broker.pem"}


def secured(broker, certs: Dict[str, Path]) -> Dict[str, str]:
    """Adds an SSL and a SASL_SSL listener to `broker`'s properties (before it starts); their bootstraps."""
    props = dict(line.split("=", 1) for line in broker.config.read_text().splitlines() if "=" in line)
    ports = {name: free_port() for name in LISTENERS[1:]}
    added = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    props["listeners"] += "," + added
    props["advertised.listeners"] += "," + added
    props["listener.security.protocol.map"] = ",".join(
        ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT", "SSL:SSL", "SASL_SSL:SASL_SSL"])
    props["inter.broker.listener.name"] = "PLAINTEXT"
    props.update({
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs["keystore"]),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{PLAIN_MODULE} required user_{USER}="{PASSWORD}";',
    })
    write_properties(broker.config, props)
    return {"PLAINTEXT": broker.bootstrap, **{name: f"127.0.0.1:{port}" for name, port in ports.items()}}


def client_config(workdir: Path, listener: str, certs: Dict[str, Path]) -> Path:
    """The Java client's properties for `listener`."""
    props: Dict[str, str] = {}
    if listener != "PLAINTEXT":
        props.update({"security.protocol": listener, "ssl.truststore.type": "PEM",
                      "ssl.truststore.location": str(certs["ca"])})
    if listener == "SASL_SSL":
        props.update({"sasl.mechanism": "PLAIN",
                      "sasl.jaas.config": f'{PLAIN_MODULE} required username="{USER}" password="{PASSWORD}";'})
    path = workdir / f"client-{listener}.properties"
    write_properties(path, props)
    return path


def consumer_performance(bootstrap: str, topic: str, records: int, config: Path, timeout: float) -> float:
    """ConsumerPerformance's fetch MB/s (10^6 bytes), rebalance left out."""
    out = kafka_tool("ConsumerPerformance", ["--bootstrap-server", bootstrap, "--topic", topic, "--messages",
                                             str(records), "--timeout", "30000", "--hide-header",
                                             "--consumer.config", str(config)], timeout)
    # start, end, MB, MB/s, nMsg, nMsg/s, rebalance ms, fetch ms, fetch MB/s, fetch nMsg/s
    fields = [f.strip() for f in out.strip().splitlines()[-1].split(",")]
    return float(fields[8]) * 1024 * 1024 / 1e6


def tls_rows(results: Results, work: Path, kind: str, broker, bootstraps: Dict[str, str],
             certs: Dict[str, Path], records: int) -> Dict[str, float]:
    """Produce and consume over each listener; the PLAINTEXT producer's topic-less rate for the authz rows."""
    section = "TLS: 1 KiB records, acks=1, 8 partitions, Java client"
    produced: Dict[str, float] = {}
    consumed: Dict[str, float] = {}
    # Unmeasured: the first rows would otherwise carry a JVM broker's warm-up (JIT) and tilt the shares.
    warmup = create_topic(broker.bootstrap, "tls-warmup", PARTITIONS)
    plain = client_config(work, "PLAINTEXT", certs)
    producer_performance(broker.bootstrap, warmup, records // 2, KIB, "1", "none", {}, -1, 1800,
                         tool_args=["--producer.config", str(plain)])
    consumer_performance(broker.bootstrap, warmup, records // 2, plain, 600)
    for listener in LISTENERS:
        config = client_config(work, listener, certs)
        topic = create_topic(broker.bootstrap, f"tls-{listener.lower().replace('_', '')}", PARTITIONS)
        cpu = proc_cpu_seconds(broker.proc.pid)
        r = producer_performance(bootstraps[listener], topic, records, KIB, "1", "none", {}, -1, 1800,
                                 warmup=records // 10, tool_args=["--producer.config", str(config)])
        cpu = proc_cpu_seconds(broker.proc.pid) - cpu
        produced[listener] = r["mb_per_s"]
        results.add(section, f"produce over {listener}", "MB/s", "higher", kind, r["mb_per_s"])
        results.add(section, f"broker CPU s per GB produced over {listener}", "s/GB", "lower", kind,
                    cpu / ((records + records // 10) * KIB / 1e9))
        cpu = proc_cpu_seconds(broker.proc.pid)
        consumed[listener] = consumer_performance(bootstraps[listener], topic, records, config, 600)
        cpu = proc_cpu_seconds(broker.proc.pid) - cpu
        results.add(section, f"consume over {listener} (ConsumerPerformance)", "MB/s", "higher", kind,
                    consumed[listener])
        results.add(section, f"broker CPU s per GB consumed over {listener}", "s/GB", "lower", kind,
                    cpu / (records * KIB / 1e9))
    for listener in LISTENERS[1:]:
        results.add(section, f"produce over {listener}, share of PLAINTEXT's", "%", "higher", kind,
                    100 * produced[listener] / produced["PLAINTEXT"])
        results.add(section, f"consume over {listener}, share of PLAINTEXT's", "%", "higher", kind,
                    100 * consumed[listener] / consumed["PLAINTEXT"])
    return produced


def small_requests_rate(bootstrap: str, topic: str, records: int) -> float:
    """Records a second of 400 B records one to a batch (franz-go's smallest batch, 512 bytes, holds one)."""
    r = loadgen(["produce", "--bootstrap", bootstrap, "--topic", topic, "--records", str(records), "--size",
                 "400", "--acks", "1", "--codec", "none", "--linger", "0s", "--batch-bytes", "512"], 900)
    return r["records_per_s"]


def run_round(results: Results, work: Path, rnd: int, smoke: bool) -> None:
    records = 2_000 if smoke else 300_000
    small = 5_000 if smoke else 400_000
    acls = 200 if smoke else 10_000
    certs = make_certificates(work / "certs")
    section = f"authorization: 400 B records one to a batch, acks=1, 8 partitions, franz-go ({acls:,} ACLs)"
    for kind in ("kafka", "fjord"):
        cls = KafkaBroker if kind == "kafka" else FjordBroker
        log(f"round {rnd}: {kind}, TLS")
        broker = cls(work / f"r{rnd}-{kind}-tls", dict(MODES["page-cache"][kind]))
        bootstraps = secured(broker, certs)
        try:
            broker.start()
            tls_rows(results, work, kind, broker, bootstraps, certs, records)
            topic = create_topic(broker.bootstrap, f"{ACL_PREFIX}-open", PARTITIONS)
            open_rate = small_requests_rate(broker.bootstrap, topic, small)
            results.add(section, "produce without an authorizer", "records/s", "higher", kind, open_rate)
        except (RuntimeError, OSError, ValueError, IndexError, subprocess.SubprocessError) as e:
            results.fail(f"{kind} TLS round {rnd}", e)
            continue
        finally:
            broker.stop()
            shutil.rmtree(broker.workdir, ignore_errors=True)
        log(f"round {rnd}: {kind}, authorizer with {acls} ACLs")
        authz = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "allow.everyone.if.no.acl.found": "true", "super.users": "User:nobody"}
        broker = cls(work / f"r{rnd}-{kind}-authz", {**MODES["page-cache"][kind], **authz})
        try:
            broker.start()
            made = loadgen(["acls", "--bootstrap", broker.bootstrap, "--count", str(acls), "--allow-prefix",
                            ACL_PREFIX], 600)
            if made["acls"] != acls + 2:
                raise RuntimeError(f"{made['acls']} ACLs created, not {acls + 2}")
            topic = create_topic(broker.bootstrap, f"{ACL_PREFIX}-judged", PARTITIONS)
            judged = small_requests_rate(broker.bootstrap, topic, small)
            results.add(section, f"produce with the authorizer and {acls:,} ACLs", "records/s", "higher", kind,
                        judged)
            results.add(section, "share kept with the authorizer", "%", "higher", kind, 100 * judged / open_rate)
        except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
            results.fail(f"{kind} authorizer round {rnd}", e)
        finally:
            broker.stop()
            shutil.rmtree(broker.workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--command", default="bench/run.sh --security")
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.smoke else 3)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    work = BENCH / ".work" / f"security-{stamp}"
    out_dir = BENCH / ".work" / "results" if args.smoke else BENCH / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    results = Results()
    t0 = time.monotonic()
    for rnd in range(1, rounds + 1):
        run_round(results, work, rnd, args.smoke)
    meta: Dict = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "mode": "smoke" if args.smoke else "full",
                  "rounds": rounds, "command": args.command, "fjord_rev": git_rev(), "machine": machine(),
                  "seconds": round(time.monotonic() - t0)}
    md = side_by_side("Security", meta, results, "one broker at a time, page-cache mode")
    return write_report(out_dir / f"security-{stamp}", meta, results, md, args.smoke)

if __name__ == "__main__":
    sys.exit(main())
