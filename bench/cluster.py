#!/usr/bin/env python3
"""Three-node clusters, fjord against Apache Kafka, at replication factor 3 (see BENCHMARKS.md, "Three-node
cluster").

Each round starts, for each flush mode and each broker (Kafka first), three combined broker + controller nodes on
loopback with the same KRaft properties and `min.insync.replicas=2`, creates every topic with replication factor 3,
and measures:

1. *Throughput:* Kafka's ProducerPerformance, acks=all, 1 KiB records, 6 partitions, as fast as it goes.
2. *Produce latency:* ProducerPerformance at half of Kafka's throughput in the same mode and round (linger.ms=0,
   one partition): p50 / p99 / p99.9 of the acknowledgement.
3. *End-to-end latency:* franz-go at the same rate, one partition: send to receipt by a consumer, one clock.

Modes as in bench.py: page-cache (Kafka's default, acknowledged from the page cache) and fsync (fjord's default:
acknowledged once on the disk of every in-sync replica; Kafka flushing after every append).

    bench/run.sh --cluster           # 2 rounds, both modes, 200 MB rows (about 15 minutes)
    bench/run.sh --cluster --smoke   # one round, page-cache only, tiny rows: checks the harness
"""

import argparse
import datetime
import json
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (BENCH, KIB, MODES, FjordBroker, KafkaBroker, Results, create_topic, free_port,  # noqa: E402
                   git_rev, loadgen, log, machine, new_cluster_id, producer_performance, section_tables)

NODES = 3
PARTITIONS = 6


class Cluster:
    """Three combined nodes of one kind on loopback, configured with Kafka's KRaft keys."""

    def __init__(self, kind: str, workdir: Path, overrides: Dict[str, str]):
        ports = [(free_port(), free_port()) for _ in range(NODES)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        cluster_id = new_cluster_id()
        self.nodes = []
        for i, (port, controller) in enumerate(ports):
            props = {
                "process.roles": "broker,controller",
                "node.id": str(i + 1),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "min.insync.replicas": "2",
                "offsets.topic.replication.factor": "3",
                **overrides,
            }
            d = workdir / f"node-{i + 1}"
            d.mkdir(parents=True, exist_ok=True)
            node = (KafkaBroker(d, props, port, cluster_id) if kind == "kafka" else FjordBroker(d, props, port))
            self.nodes.append(node)
        self.bootstrap = ",".join(n.bootstrap for n in self.nodes)

    def start(self) -> None:
        """Every node at once (a voter waits for a majority before it serves)."""
        errors: List[Exception] = []

        def start(node):
            try:
                node.start()
            except (RuntimeError, OSError) as e:
                errors.append(e)

        threads = [threading.Thread(target=start, args=(n,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]

    def stop(self) -> None:
        # Nodes stopped all at once cannot finish a controlled shutdown (the controllers go too): a Kafka node
        # then waits out its timeouts, two minutes, for nothing the benchmark measures. Killed after 15 s.
        threads = [threading.Thread(target=n.stop, args=(15,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def run_round(results: Results, work: Path, rnd: int, mode: str, smoke: bool, kafka_max: Dict) -> None:
    row_bytes = 2_000_000 if smoke else 200_000_000
    seconds = 2 if smoke else 10
    for kind in ("kafka", "fjord"):
        log(f"round {rnd} {mode}: {kind} cluster")
        cluster = Cluster(kind, work / f"r{rnd}-{mode}-{kind}", MODES[mode][kind])
        try:
            cluster.start()
        except (RuntimeError, OSError) as e:
            results.fail(f"{kind} cluster start ({mode})", e)
            continue
        try:
            section = f"3 nodes, RF=3, acks=all, 1 KiB ({mode})"
            topic = create_topic(cluster.bootstrap, "tput", PARTITIONS, NODES)
            records = row_bytes // KIB
            r = producer_performance(cluster.bootstrap, topic, records, KIB, "all", "none", {}, -1, 1800,
                                     warmup=records // 10)
            results.add(section, f"produce throughput ({PARTITIONS} partitions)", "MB/s", "higher", kind,
                        r["mb_per_s"])
            results.add(section, f"produce p99 at full speed ({PARTITIONS} partitions)", "ms", "lower", kind,
                        r["p99_ms"])
            if kind == "kafka":
                kafka_max[(rnd, mode)] = r["records_per_s"]
            rate = max(10, int(kafka_max.get((rnd, mode), 1000) * 0.5))
            topic = create_topic(cluster.bootstrap, "lat", 1, NODES)
            r = producer_performance(cluster.bootstrap, topic, rate * seconds, KIB, "all", "none",
                                     {"linger.ms": "0"}, rate, 600, warmup=rate)
            for q in ("p50", "p99", "p999"):
                results.add(section, f"produce latency {q} at 50% of Kafka's max ({rate} rec/s, 1 partition)",
                            "ms", "lower", kind, r[f"{q}_ms"])
            topic = create_topic(cluster.bootstrap, "e2e", 1, NODES)
            r = loadgen(["e2e", "--bootstrap", cluster.bootstrap, "--topic", topic, "--records",
                         str(rate * seconds), "--size", str(KIB), "--rate", str(rate)], 600)
            for q in ("p50", "p99"):
                results.add(section, f"end-to-end latency {q}, franz-go ({rate} rec/s, 1 partition)", "ms",
                            "lower", kind, r[f"{q}_ms"])
        except (RuntimeError, OSError, ValueError) as e:
            results.fail(f"{kind} {mode} round {rnd}", e)
        finally:
            cluster.stop()


def goals(rows: List[dict]) -> List[tuple]:
    """The issue's goals: fjord durable ≥ Kafka page-cache throughput, fjord p99 ≤ ⅓ of Kafka's."""
    def find(mode, name_part, kind):
        for r in rows:
            if r["section"].endswith(f"({mode})") and name_part in r["name"]:
                return r[kind]
        return None

    out = []
    fjord_durable = find("fsync", "produce throughput", "fjord")
    kafka_cache = find("page-cache", "produce throughput", "kafka")
    if fjord_durable and kafka_cache:
        ratio = fjord_durable / kafka_cache
        out.append(("fjord durable throughput ≥ Kafka page-cache throughput", f"{ratio:.2f}×", ratio >= 1))
    for what, row in (("produce", "produce latency p99"), ("end-to-end", "end-to-end latency p99")):
        for mode in ("page-cache", "fsync"):
            f, k = find(mode, row, "fjord"), find(mode, row, "kafka")
            if f is not None and k:
                out.append((f"fjord {what} p99 ≤ ⅓ of Kafka's ({mode})", f"{f / k:.2f}×", f / k <= 1 / 3))
    return out


def markdown(meta: dict, rows: List[dict], results: Results) -> str:
    m = meta["machine"]
    lines = [
        f"# Three-node clusters, fjord vs Apache Kafka — {meta['date']} ({meta['mode']})", "",
        f"Command: `{meta['command']}` (fjord {meta['fjord_rev']}). Machine: {m['cores']} cores, "
        f"{m['memory_gib']} GiB, disk {m['disk']}; a cluster's three nodes and the load tools share it, one "
        f"cluster at a time. Rounds: {meta['rounds']}; each figure is the median over rounds. Ratio = fjord / Kafka.",
    ]
    lines += section_tables(rows)
    lines += ["", "## Goals (issue 14)", "", "| Goal | Measured | Met |", "|---|---|---|"]
    lines += [f"| {g} | {v} | {'yes' if ok else '**no**'} |" for g, v, ok in goals(rows)]
    lines += ["", "## Failed", ""] + ([f"- {f}" for f in results.failures] or ["- nothing"])
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--command", default="bench/run.sh --cluster")
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.smoke else 2)
    modes = ["page-cache"] if args.smoke else list(MODES)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    work = BENCH / ".work" / f"cluster-{stamp}"
    out_dir = BENCH / ".work" / "results" if args.smoke else BENCH / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    results = Results()
    kafka_max: Dict = {}
    t0 = time.monotonic()
    for rnd in range(1, rounds + 1):
        for mode in modes:
            run_round(results, work, rnd, mode, args.smoke, kafka_max)
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "mode": "smoke" if args.smoke else "full",
            "rounds": rounds, "command": args.command, "fjord_rev": git_rev(), "machine": machine(),
            "seconds": round(time.monotonic() - t0)}
    rows = results.summary()
    md = markdown(meta, rows, results)
    base = out_dir / f"cluster-{stamp}"
    base.with_suffix(".md").write_text(md)
    base.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "failures": results.failures,
                                                     "goals": [{"goal": g, "measured": v, "met": ok}
                                                               for g, v, ok in goals(rows)]}, indent=1))
    print(md)
    log(f"wrote {base}.md and .json in {meta['seconds']} s")
    if args.smoke and (results.failures or not rows or any(r["kafka"] is None or r["fjord"] is None for r in rows)):
        print("smoke: failed: " + "; ".join(results.failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
