#!/usr/bin/env python3
"""The log cleaner, fjord against Apache Kafka on the same input (see BENCHMARKS.md, "Log cleaner").

Rounds alternate Kafka and fjord. In each, for each broker:

1. *Cleaner throughput.* With `log.cleaner.enable=false`, franz-go writes RECORDS keyed records (KEYS distinct
   keys, so each key is written RECORDS/KEYS times) to a compacted topic with 64 MiB segments (smoke: 1 MiB,
   Kafka's minimum); the broker stops,
   and starts again with the cleaner on. Measured from the moment it serves: wall seconds until its
   `cleaner-offset-checkpoint` (both brokers write one after a pass) names the topic, the dirty bytes that pass
   had (the sealed segments), the process's peak RSS meanwhile above its RSS when it started serving, and the
   broker's own report of the pass (fjord: its "log cleaned" line; Kafka: its cleaner statistics).
2. *Produce while cleaning.* On a fresh broker, franz-go writes the same keyed workload to a compacted topic with
   16 MiB segments (smoke: 1 MiB) and min.cleanable.dirty.ratio=0.1, so the cleaner keeps cleaning while the producer runs;
   the same with the cleaner off gives the baseline. Throughput in MB/s of values.

    bench/run.sh --cleaner            # 3 rounds, 3M records of 100 B over 300k keys (about 15 minutes)
    bench/run.sh --cleaner --smoke    # one round, tiny sizes: checks the harness (about a minute)
"""

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BENCH, FjordBroker, KafkaBroker, Sampler, git_rev, loadgen, log, machine, proc_rss_bytes  # noqa: E402

TOPIC = "compacted-0"  # loadgen create-topics names topics PREFIX-INDEX
KAFKA_STATS = re.compile(
    r"Log cleaner thread \d+ cleaned log (\S+) \(dirty section = \[(\d+), (\d+)\]\)\s+"
    r"([\d,.]+) MB of log processed in ([\d,.]+) seconds"
)
FJORD_STATS = re.compile(r"log cleaned .*?tp=(\S+) .*?bytes_read=(\d+) .*?map_memory_bytes=(\d+) .*?elapsed_ms=(\d+)")


def broker_class(kind: str):
    return {"kafka": KafkaBroker, "fjord": FjordBroker}[kind]


def create_compacted(bootstrap: str, segment_bytes: int, dirty_ratio: str) -> None:
    loadgen(["create-topics", "--bootstrap", bootstrap, "--prefix", "compacted", "--topics", "1",
             "--partitions", "1", "--configs",
             f"cleanup.policy=compact,segment.bytes={segment_bytes},min.cleanable.dirty.ratio={dirty_ratio}"],
            timeout=120)


def produce(bootstrap: str, records: int, keys: int, size: int) -> dict:
    return loadgen(["produce", "--bootstrap", bootstrap, "--topic", TOPIC, "--records", str(records),
                    "--size", str(size), "--acks", "1", "--keys", str(keys)], timeout=1800)


def segment_bytes_on_disk(data_dir: Path) -> Dict[str, int]:
    part = data_dir / f"{TOPIC}-0"
    return {p.name: p.stat().st_size for p in part.glob("*.log")}


def checkpointed(data_dir: Path) -> Optional[int]:
    path = data_dir / "cleaner-offset-checkpoint"
    try:
        for line in path.read_text().splitlines()[2:]:
            fields = line.split()
            if len(fields) == 3 and fields[0] == TOPIC and int(fields[2]) > 0:
                return int(fields[2])
    except (OSError, ValueError):
        return None
    return None


def reported(b, kind: str) -> Optional[dict]:
    """The broker's own account of its first pass over the topic."""
    if kind == "kafka":
        text = (b.workdir / "server.log").read_text(errors="replace")
        for m in KAFKA_STATS.finditer(text):
            if m.group(1) == f"{TOPIC}-0":
                mb = float(m.group(4).replace(",", "")) * 1024 * 1024 / 1e6
                secs = float(m.group(5).replace(",", ""))
                return {"mb": mb, "seconds": secs, "mb_per_s": mb / secs if secs else None}
        return None
    text = b.output().read_text(errors="replace")
    for m in FJORD_STATS.finditer(text):
        if m.group(1) == f"{TOPIC}-0":
            mb, secs = int(m.group(2)) / 1e6, int(m.group(4)) / 1000
            return {"mb": mb, "seconds": secs, "mb_per_s": mb / secs if secs else None,
                    "map_memory_mb": int(m.group(3)) / 1e6}
    return None


def cleaner_throughput(kind: str, work: Path, records: int, keys: int, size: int, segment: int) -> dict:
    # A short backoff for both: Kafka's first look can come before its partition is ready, and its default
    # 15 s wait after that would count against it.
    b = broker_class(kind)(work, {"log.cleaner.enable": "false", "log.cleaner.backoff.ms": "200"})
    b.start()
    try:
        create_compacted(b.bootstrap, segment, "0.5")
        produce(b.bootstrap, records, keys, size)
    finally:
        b.stop()
    segments = segment_bytes_on_disk(b.data_dir)
    active = max(segments)
    dirty = sum(v for k, v in segments.items() if k != active)
    if dirty == 0:
        raise RuntimeError(f"{kind}: the workload fits the active segment; nothing to clean")
    # Same data dir, port and cluster; only the cleaner switch changes.
    b.config.write_text(b.config.read_text().replace("log.cleaner.enable=false", "log.cleaner.enable=true"))
    b.start()
    serving = time.monotonic()
    assert b.proc is not None
    sampler = Sampler(b.proc.pid)
    base_rss = proc_rss_bytes(b.proc.pid)
    try:
        deadline = serving + 1800
        while checkpointed(b.data_dir) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: no cleaning pass after 30 minutes; see {work}")
            time.sleep(0.05)
        wall = time.monotonic() - serving
        time.sleep(0.3)
        peak = sampler.peak
    finally:
        sampler.stop()
        b.stop()
    after = sum(segment_bytes_on_disk(b.data_dir).values())
    return {"dirty_mb": dirty / 1e6, "wall_s": wall, "mb_per_s": dirty / 1e6 / wall,
            "rss_base_mb": base_rss / 1e6, "rss_peak_mb": peak / 1e6, "rss_growth_mb": max(0, peak - base_rss) / 1e6,
            "log_mb_after": after / 1e6, "reported": reported(b, kind)}


def produce_while_cleaning(kind: str, work: Path, records: int, keys: int, size: int, segment: int,
                           cleaner: bool) -> dict:
    b = broker_class(kind)(work, {"log.cleaner.enable": str(cleaner).lower(), "log.cleaner.backoff.ms": "200"})
    b.start()
    try:
        create_compacted(b.bootstrap, segment, "0.1")
        result = produce(b.bootstrap, records, keys, size)
        passes = (b.workdir / "server.log").read_text(errors="replace").count("Log cleaner thread") \
            if kind == "kafka" else b.output().read_text(errors="replace").count("log cleaned")
    finally:
        b.stop()
    return {"mb_per_s": result["mb_per_s"], "passes": passes}


def median(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x: Optional[float], digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def ratio(f: Optional[float], k: Optional[float]) -> str:
    return "–" if not f or not k else f"{f / k:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--command", default="bench/run.sh --cleaner")
    args, _ = ap.parse_known_args()
    # Segments: the pass's input spans several; the produce-while-cleaning topic rolls often.
    records, keys, size, rounds, clean_segment, busy_segment = (3_000_000, 300_000, 100, args.rounds,
                                                                64 << 20, 16 << 20)
    if args.smoke:
        records, keys, size, rounds, clean_segment, busy_segment = (200_000, 20_000, 100, 1, 1 << 20, 1 << 20)
    stamp = time.strftime("%Y-%m-%d-%H%M")
    out_dir = BENCH / ".work" / "results" if args.smoke else BENCH / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: Dict[str, Dict[str, list]] = {k: {"clean": [], "on": [], "off": []} for k in ("kafka", "fjord")}
    for rnd in range(rounds):
        for kind in ("kafka", "fjord"):
            base = BENCH / ".work" / f"cleaner-{stamp}-{rnd}-{kind}"
            log(f"round {rnd + 1}/{rounds} {kind}: cleaner throughput")
            runs[kind]["clean"].append(cleaner_throughput(kind, base / "clean", records, keys, size, clean_segment))
            log(f"round {rnd + 1}/{rounds} {kind}: produce with the cleaner off, then on")
            runs[kind]["off"].append(produce_while_cleaning(kind, base / "off", records, keys, size, busy_segment,
                                                            False))
            runs[kind]["on"].append(produce_while_cleaning(kind, base / "on", records, keys, size, busy_segment,
                                                           True))
    summary = {}
    for kind, r in runs.items():
        summary[kind] = {
            "clean_mb_per_s": median([c["mb_per_s"] for c in r["clean"]]),
            "reported_mb_per_s": median([(c["reported"] or {}).get("mb_per_s") for c in r["clean"]]),
            "rss_growth_mb": median([c["rss_growth_mb"] for c in r["clean"]]),
            "rss_peak_mb": median([c["rss_peak_mb"] for c in r["clean"]]),
            "dirty_mb": median([c["dirty_mb"] for c in r["clean"]]),
            "log_mb_after": median([c["log_mb_after"] for c in r["clean"]]),
            "produce_off": median([c["mb_per_s"] for c in r["off"]]),
            "produce_on": median([c["mb_per_s"] for c in r["on"]]),
            "passes_on": median([c["passes"] for c in r["on"]]),
        }
    k, f = summary["kafka"], summary["fjord"]
    rows = [
        ("cleaner throughput, MB/s of dirty log (wall, from serving to checkpoint)", "clean_mb_per_s"),
        ("cleaner throughput, MB/s as the broker reports its pass", "reported_mb_per_s"),
        ("dirty log cleaned, MB", "dirty_mb"),
        ("log after the pass, MB", "log_mb_after"),
        ("broker RSS growth during the pass, MB", "rss_growth_mb"),
        ("broker RSS peak during the pass, MB", "rss_peak_mb"),
        ("produce MB/s, cleaner off", "produce_off"),
        ("produce MB/s while the cleaner runs", "produce_on"),
        ("cleaning passes during that produce", "passes_on"),
    ]
    lines = [
        f"Log cleaner: fjord vs Apache Kafka 4.4 — {records:,} records of {size} B over {keys:,} keys, "
        f"{rounds} round(s), medians; git {git_rev()}; `{args.command}`",
        "",
        "| | Kafka | fjord | fjord / Kafka |",
        "|---|---:|---:|---:|",
    ]
    for label, key in rows:
        lines.append(f"| {label} | {fmt(k[key])} | {fmt(f[key])} | {ratio(f[key], k[key])} |")
    table = "\n".join(lines) + "\n"
    (out_dir / f"cleaner-{stamp}.json").write_text(json.dumps(
        {"machine": machine(), "records": records, "keys": keys, "size": size, "runs": runs, "summary": summary},
        indent=1))
    (out_dir / f"cleaner-{stamp}.md").write_text(table)
    print(table)
    if not args.smoke:
        update_benchmarks_md(table, f"bench/results/cleaner-{stamp}.json")
    failed = [kind for kind in summary if summary[kind]["clean_mb_per_s"] is None]
    return 1 if failed else 0


def update_benchmarks_md(table: str, source: str) -> None:
    path = BENCH.parent / "BENCHMARKS.md"
    text = path.read_text()
    start, end = "<!-- cleaner:start -->", "<!-- cleaner:end -->"
    block = f"{start}\n{table}\nSource: `{source}`.\n{end}"
    if start in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text += f"\n## Log cleaner\n\n{block}\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
