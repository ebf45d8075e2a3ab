#!/usr/bin/env python3
"""Share groups (KIP-932), fjord against Apache Kafka 4.4, one node each (see BENCHMARKS.md, "Share groups").

Each round starts each broker (Kafka first) with the same properties (one `__share_group_state` partition for
Kafka) and, on a topic of 4 partitions with 1 KiB records, measures with franz-go's share consumer (records accepted
as they are polled):

1. *Share consume throughput:* 4 and then 16 consumers of one share group reading records already in the topic.
2. *Share end-to-end latency:* records sent at a fixed rate, round-robin over the partitions, read by 4 and then 16
   consumers of a new share group (send to receipt, one clock).

Both persist every acknowledgement through their share coordinator on `__share_group_state` before answering it.

    bench/run.sh --share           # 2 rounds, page-cache mode (about 10 minutes)
    bench/run.sh --share --smoke   # one round, tiny rows: checks the harness
"""

import argparse
import datetime
import sys
import time
import uuid
from pathlib import Path
from typing import Dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (BENCH, KIB, MODES, FjordBroker, KafkaBroker, Results, create_topic, git_rev, loadgen,  # noqa: E402
                   log, machine, producer_performance, side_by_side, write_report)

PARTITIONS = 4
CONSUMERS = (4, 16)
E2E_RATE = 1000
# The same share coordinator layout for Kafka as the other internal topics of the bench broker.
OVERRIDES = {"share.coordinator.state.topic.num.partitions": "1",
             "share.coordinator.state.topic.replication.factor": "1",
             "share.coordinator.state.topic.min.isr": "1"}
# Warm-up records create_topic writes into each topic first.
WARMUP_RECORDS = 20 * PARTITIONS


def run_round(results: Results, work: Path, rnd: int, smoke: bool) -> None:
    mode = "page-cache"
    records = 2_000 if smoke else 200_000
    e2e_records = 100 if smoke else E2E_RATE * 20
    # The smoke run checks the harness with the smaller group only.
    consumer_counts = CONSUMERS[:1] if smoke else CONSUMERS
    for kind in ("kafka", "fjord"):
        log(f"round {rnd}: {kind}")
        cls = KafkaBroker if kind == "kafka" else FjordBroker
        broker = cls(work / f"r{rnd}-{kind}", {**MODES[mode][kind], **OVERRIDES})
        try:
            broker.start()
        except (RuntimeError, OSError) as e:
            results.fail(f"{kind} start", e)
            continue
        try:
            section = f"one node, share group, 1 KiB, {PARTITIONS} partitions ({mode})"
            topic = create_topic(broker.bootstrap, "share", PARTITIONS)
            producer_performance(broker.bootstrap, topic, records, KIB, "1", "none", {}, -1, 1800)
            for consumers in consumer_counts:
                r = loadgen(["share", "--bootstrap", broker.bootstrap, "--topic", topic,
                             "--group", f"bench-{uuid.uuid4().hex[:8]}", "--consumers", str(consumers),
                             "--records", str(records + WARMUP_RECORDS)], 900)
                results.add(section, f"share consume throughput, {consumers} consumers, franz-go", "MB/s",
                            "higher", kind, r["mb_per_s"])
            for consumers in consumer_counts:
                topic = create_topic(broker.bootstrap, f"share-e2e-{consumers}", PARTITIONS)
                r = loadgen(["share", "--bootstrap", broker.bootstrap, "--topic", topic,
                             "--group", f"bench-{uuid.uuid4().hex[:8]}", "--consumers", str(consumers),
                             "--records", str(e2e_records), "--size", str(KIB), "--rate", str(E2E_RATE)], 900)
                for q in ("p50", "p99"):
                    results.add(section, f"share end-to-end latency {q}, {consumers} consumers ({E2E_RATE} rec/s)",
                                "ms", "lower", kind, r[f"{q}_ms"])
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            results.fail(f"{kind} round {rnd}", e)
        finally:
            broker.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--command", default="bench/run.sh --share")
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.smoke else 2)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    work = BENCH / ".work" / f"share-{stamp}"
    out_dir = BENCH / ".work" / "results" if args.smoke else BENCH / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    results = Results()
    t0 = time.monotonic()
    for rnd in range(1, rounds + 1):
        run_round(results, work, rnd, args.smoke)
    meta: Dict = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "mode": "smoke" if args.smoke else "full",
                  "rounds": rounds, "command": args.command, "fjord_rev": git_rev(), "machine": machine(),
                  "seconds": round(time.monotonic() - t0),
                  "note": "both persist every acknowledgement to __share_group_state before answering it"}
    md = side_by_side("Share groups", meta, results, "one broker at a time")
    return write_report(out_dir / f"share-{stamp}", meta, results, md, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
