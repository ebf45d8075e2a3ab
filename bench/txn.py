#!/usr/bin/env python3
"""Transactions, fjord against Apache Kafka, one node each (see BENCHMARKS.md, "Transactions").

Each round starts, for each flush mode and each broker (Kafka first), one node with the same properties (one
`__transaction_state` partition for both) and measures:

1. *Transactional produce throughput:* Kafka's ProducerPerformance (Java), acks=all, 1 KiB records, 6 partitions,
   with a transactional id. The tool commits by time, not by count: each broker's transactions last as long as
   1,000 records take at its own non-transactional rate, measured just before, so both commit about every 1,000
   records. Reported with the non-transactional rate beside it.
2. *read_committed end-to-end latency:* franz-go sending timestamped records in transactions of 10, at 500
   records/s, to a consumer reading as read_committed: a record arrives once its transaction commits and the last
   stable offset passes it (send to receipt, one clock).

Modes as in bench.py: page-cache and fsync.

    bench/run.sh --txn           # 2 rounds, both modes (about 10 minutes)
    bench/run.sh --txn --smoke   # one round, page-cache only, tiny rows: checks the harness
"""

import argparse
import datetime
import sys
import time
from pathlib import Path
from typing import Dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (BENCH, KIB, MODES, FjordBroker, KafkaBroker, Results, create_topic, git_rev, loadgen,  # noqa: E402
                   log, machine, producer_performance, side_by_side, write_report)

PARTITIONS = 6
TXN_RECORDS = 1000
E2E_RATE = 500
E2E_TXN_RECORDS = 10
# The same coordinator layout for both: Kafka's bench broker has one transaction log partition.
OVERRIDES = {"transaction.state.log.num.partitions": "1", "transaction.state.log.replication.factor": "1"}


def run_round(results: Results, work: Path, rnd: int, mode: str, smoke: bool) -> None:
    row_bytes = 2_000_000 if smoke else 300_000_000
    e2e_records = 200 if smoke else E2E_RATE * 20
    for kind in ("kafka", "fjord"):
        log(f"round {rnd} {mode}: {kind}")
        cls = KafkaBroker if kind == "kafka" else FjordBroker
        broker = cls(work / f"r{rnd}-{mode}-{kind}", {**MODES[mode][kind], **OVERRIDES})
        try:
            broker.start()
        except (RuntimeError, OSError) as e:
            results.fail(f"{kind} start ({mode})", e)
            continue
        try:
            section = f"one node, acks=all, 1 KiB ({mode})"
            records = row_bytes // KIB
            topic = create_topic(broker.bootstrap, "plain", PARTITIONS)
            plain = producer_performance(broker.bootstrap, topic, records, KIB, "all", "none", {}, -1, 1800,
                                         warmup=records // 10)
            results.add(section, f"produce throughput, no transactions ({PARTITIONS} partitions)", "MB/s",
                        "higher", kind, plain["mb_per_s"])
            duration_ms = max(5, round(TXN_RECORDS / plain["records_per_s"] * 1000))
            topic = create_topic(broker.bootstrap, "txn", PARTITIONS)
            txn = producer_performance(broker.bootstrap, topic, records, KIB, "all", "none", {}, -1, 1800,
                                       warmup=records // 10,
                                       tool_args=["--transactional-id", f"bench-{kind}-{mode}-{rnd}",
                                                  "--transaction-duration-ms", str(duration_ms)])
            results.add(section, f"transactional produce throughput, ~{TXN_RECORDS} records a transaction "
                        f"({PARTITIONS} partitions)", "MB/s", "higher", kind, txn["mb_per_s"])
            topic = create_topic(broker.bootstrap, "e2e", 1)
            r = loadgen(["e2e", "--bootstrap", broker.bootstrap, "--topic", topic, "--records", str(e2e_records),
                         "--size", str(KIB), "--rate", str(E2E_RATE), "--transaction-records",
                         str(E2E_TXN_RECORDS)], 600)
            for q in ("p50", "p99"):
                results.add(section, f"read_committed end-to-end latency {q}, franz-go (transactions of "
                            f"{E2E_TXN_RECORDS}, {E2E_RATE} rec/s)", "ms", "lower", kind, r[f"{q}_ms"])
        except (RuntimeError, OSError, ValueError) as e:
            results.fail(f"{kind} {mode} round {rnd}", e)
        finally:
            broker.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--command", default="bench/run.sh --txn")
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.smoke else 2)
    modes = ["page-cache"] if args.smoke else list(MODES)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    work = BENCH / ".work" / f"txn-{stamp}"
    out_dir = BENCH / ".work" / "results" if args.smoke else BENCH / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    results = Results()
    t0 = time.monotonic()
    for rnd in range(1, rounds + 1):
        for mode in modes:
            run_round(results, work, rnd, mode, args.smoke)
    meta: Dict = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "mode": "smoke" if args.smoke else "full",
                  "rounds": rounds, "command": args.command, "fjord_rev": git_rev(), "machine": machine(),
                  "seconds": round(time.monotonic() - t0)}
    md = side_by_side("Transactions", meta, results, "one broker at a time")
    return write_report(out_dir / f"txn-{stamp}", meta, results, md, args.smoke)

if __name__ == "__main__":
    sys.exit(main())
