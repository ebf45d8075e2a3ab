#!/usr/bin/env python3
"""What fjord's metrics cost (see BENCHMARKS.md, "Metrics"): one node, produce throughput and latency with
`/metrics` scraped every second against the HTTP listener off, side by side in one run.

Each round starts one node twice with the same properties — `http.listeners` empty (nothing scrapes, nothing
serves HTTP), then a port of its own with a scraper reading `/metrics` every second through the run (the order
alternates between rounds) — and runs Kafka's ProducerPerformance: 1 KiB records, acks=1, 8 partitions, as fast
as they go (throughput), then at 20,000 records/s (latency away from saturation). The
counters and histograms are moved on every request either way: what the off column saves is the listener and the
scrapes (each reads every partition's log size and the process from /proc), which is what an operator can turn
off. Goal: the scraped run keeps 98 % of the throughput and its p99 is within 5 %.

    bench/run.sh --metrics           # 5 rounds (about 5 minutes)
    bench/run.sh --metrics --smoke   # one round, tiny: checks the harness
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (BENCH, KIB, FjordBroker, create_topic, free_port, git_rev, log, machine,  # noqa: E402
                   producer_performance)

PARTITIONS = 8
# Records a second for the latency rows: about a fifth of what one node takes here.
PACED_RATE = 20_000
SETTINGS = ("off", "scraped")


class Scraper(threading.Thread):
    """Reads `url` every `interval_s` until stopped; counts the scrapes, the bytes they returned and the time each
    took to answer."""

    def __init__(self, url: str, interval_s: float = 1.0):
        super().__init__(daemon=True)
        self.url, self.interval_s = url, interval_s
        self.stop = threading.Event()
        self.scrapes, self.bytes, self.errors = 0, 0, 0
        self.took_ms: List[float] = []

    def run(self) -> None:
        while True:
            try:
                started = time.monotonic()
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.bytes += len(response.read())
                self.took_ms.append((time.monotonic() - started) * 1000)
                self.scrapes += 1
            except OSError:
                self.errors += 1
            if self.stop.wait(self.interval_s):
                return


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far (utime + stime of /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 1:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(work: Path, setting: str, records: int) -> Dict[str, float]:
    http_port = free_port()
    listeners = f"http://127.0.0.1:{http_port}" if setting == "scraped" else ""
    broker = FjordBroker(work, {"http.listeners": listeners})
    broker.start()
    scraper = None
    try:
        topic = create_topic(broker.bootstrap, "metrics", PARTITIONS)
        if setting == "scraped":
            scraper = Scraper(f"http://127.0.0.1:{http_port}/metrics")
            scraper.start()
        r = producer_performance(broker.bootstrap, topic, records, KIB, "1", "none", {}, -1, 1800,
                                 warmup=records // 10)
        # Latency away from saturation: a fixed rate well under what the node takes.
        topic = create_topic(broker.bootstrap, "paced", PARTITIONS)
        # The node's CPU over the paced run: the same work either way, so its CPU time is what the work cost,
        # steadier than throughput on a machine whose noise is larger than the effect.
        cpu_before = cpu_seconds(broker.proc.pid)
        paced = producer_performance(broker.bootstrap, topic, records // 2, KIB, "1", "none", {}, PACED_RATE, 1800,
                                     warmup=records // 20)
        r["paced_cpu_ms_per_1000"] = (cpu_seconds(broker.proc.pid) - cpu_before) * 1000 / (records // 2) * 1000
        r.update({f"paced_{k}": v for k, v in paced.items()})
        if scraper is not None:
            scraper.stop.set()
            scraper.join(10)
            if scraper.scrapes == 0 or scraper.errors:
                raise RuntimeError(f"scraper: {scraper.scrapes} scrapes, {scraper.errors} failed")
            r["scrapes"] = scraper.scrapes
            r["scrape_bytes"] = scraper.bytes / scraper.scrapes
            r["scrape_ms"] = statistics.median(scraper.took_ms)
        return r
    finally:
        broker.stop()
        # The next run starts from a clean disk: no earlier run's data left to write back or evict.
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--command", default="bench/run.sh --metrics")
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    records = 2_000 if args.smoke else 400_000
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    work = BENCH / ".work" / f"metrics-{stamp}"
    shutil.rmtree(work, ignore_errors=True)
    out_dir = BENCH / ".work" / "results" if args.smoke else BENCH / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    samples: Dict[str, List[Dict[str, float]]] = {s: [] for s in SETTINGS}
    failures: List[str] = []
    t0 = time.monotonic()
    for rnd in range(1, rounds + 1):
        order = SETTINGS if rnd % 2 else tuple(reversed(SETTINGS))
        for setting in order:
            log(f"round {rnd}: {setting}")
            try:
                r = run_once(work / f"r{rnd}-{setting}", setting, records)
                samples[setting].append(r)
                log(f"  {setting}: {r['mb_per_s']:.1f} MB/s, p99 {r['p99_ms']:.0f} ms")
            except (RuntimeError, OSError, ValueError) as e:
                failures.append(f"round {rnd} {setting}: {e}")
                log(f"FAILED round {rnd} {setting}: {e}")

    def median(setting: str, key: str) -> float:
        values = [s[key] for s in samples[setting] if key in s]
        return statistics.median(values) if values else float("nan")

    rows = []
    for key, name, unit, better in (("mb_per_s", "produce throughput, saturated", "MB/s", "higher"),
                                    ("p99_ms", "produce latency p99, saturated", "ms", "lower"),
                                    ("paced_p50_ms", f"produce latency p50 at {PACED_RATE} records/s", "ms", "lower"),
                                    ("paced_p99_ms", f"produce latency p99 at {PACED_RATE} records/s", "ms", "lower"),
                                    ("paced_cpu_ms_per_1000", f"node CPU per 1,000 records at {PACED_RATE} records/s",
                                     "ms", "lower")):
        off, on = median("off", key), median("scraped", key)
        # Each round's two runs are neighbours in time: their ratio leaves out the drift between rounds.
        pairs = [b[key] / a[key] for a, b in zip(samples["off"], samples["scraped"]) if a.get(key)]
        rows.append({"name": name, "unit": unit, "better": better, "off": off, "scraped": on,
                     "ratio": statistics.median(pairs) if pairs else float("nan"),
                     "samples": {s: [x[key] for x in samples[s]] for s in SETTINGS}})
    scrape_kib = median("scraped", "scrape_bytes") / 1024
    scrape_ms = median("scraped", "scrape_ms")
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "mode": "smoke" if args.smoke else "full",
            "rounds": rounds, "records": records, "command": args.command, "fjord_rev": git_rev(),
            "machine": machine(), "seconds": round(time.monotonic() - t0), "scrape_kib": scrape_kib,
            "scrape_ms": scrape_ms}
    m = meta["machine"]
    lines = [f"# Metrics cost — {meta['date']} ({meta['mode']})", "",
             f"Command: `{args.command}` (fjord {meta['fjord_rev']}). Machine: {m['cores']} cores, "
             f"{m['memory_gib']} GiB, disk {m['disk']}; one node, ProducerPerformance, {records} records of 1 KiB "
             f"as fast as they go, then {records // 2} at {PACED_RATE} records/s; acks=1, {PARTITIONS} partitions. "
             f"Rounds: {rounds}; medians. Each scrape returned {scrape_kib:.0f} KiB in {scrape_ms:.1f} ms (median).",
             "", "| Workload | HTTP off | scraped every second | scraped / off, median of the rounds' ratios |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']}, {r['unit']} | {r['off']:.2f} | {r['scraped']:.2f} | {r['ratio']:.3f}× |")
    lines += ["", "## Failed", ""] + ([f"- {f}" for f in failures] or ["- nothing"])
    md = "\n".join(lines) + "\n"
    base = out_dir / f"metrics-{stamp}"
    base.with_suffix(".md").write_text(md)
    base.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "failures": failures}, indent=1))
    print(md)
    log(f"wrote {base}.md and .json in {meta['seconds']} s")
    complete = all(samples[s] for s in SETTINGS)
    return 1 if args.smoke and (failures or not complete) else 0


if __name__ == "__main__":
    sys.exit(main())
