#!/usr/bin/env bash
# One command for the fjord vs Apache Kafka benchmark (see BENCHMARKS.md).
#   bench/run.sh           full run (about an hour on 2 cores): writes bench/results/<date>.{md,json}, updates BENCHMARKS.md
#   bench/run.sh --smoke   seconds-long run that checks the harness end to end; results go to bench/.work/results
#   bench/run.sh --cleaner [--smoke]   the log cleaner against Kafka's (bench/cleaner.py)
#   bench/run.sh --cluster [--smoke]   three-node clusters at replication factor 3 (bench/cluster.py)
#   bench/run.sh --txn [--smoke]       transactional produce and read_committed latency (bench/txn.py)
#   bench/run.sh --security [--smoke]  TLS, SASL_SSL and the authorizer's cost (bench/security.py)
#   bench/run.sh --metrics [--smoke]   what scraping fjord's /metrics costs its produce path (bench/metrics.py)
#   bench/run.sh --share [--smoke]     share groups' consume throughput and latency (bench/share.py)
# Needs: java 17+, mvn, go, cargo, python3; iperf3 and fio (Debian packages; installed here when apt-get can).
# Downloads land in ~/.m2 and Go's module cache; build outputs in bench/.build (not committed).
set -euo pipefail

BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$BENCH")"
BUILD="$BENCH/.build"
mkdir -p "$BUILD"

need() {
    command -v "$1" >/dev/null 2>&1 || { echo "bench: '$1' is required but not on PATH" >&2; exit 1; }
}
for tool in java mvn go cargo python3; do need "$tool"; done
if ! command -v iperf3 >/dev/null 2>&1 || ! command -v fio >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q iperf3 fio >/dev/null
    fi
fi
need iperf3
need fio

# Apache Kafka's broker and tools classpath from Maven Central; re-resolved only when the pom changes.
if [ ! -s "$BUILD/kafka.classpath" ] || [ "$BENCH/kafka/pom.xml" -nt "$BUILD/kafka.classpath" ]; then
    echo "== resolving Apache Kafka (kafka_2.13, kafka-tools) via Maven"
    (cd "$BENCH/kafka" && mvn -B -q --no-transfer-progress -Dstyle.color=never dependency:build-classpath \
        -Dmdep.outputFile="$BUILD/kafka.classpath" -Dmdep.includeScope=runtime 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
fi
test -s "$BUILD/kafka.classpath"

echo "== building the franz-go load generator"
(cd "$BENCH/loadgen" && go build -mod=readonly -o "$BUILD/loadgen" .)

if [ -z "${FJORD_BIN:-}" ]; then
    echo "== cargo build --release -p fjord"
    (cd "$ROOT" && cargo build --release -q -p fjord)
    # A private copy, so a concurrent rebuild of target/ cannot swap the binary mid-run.
    cp "$ROOT/target/release/fjord" "$BUILD/fjord"
    export FJORD_BIN="$BUILD/fjord"
fi

if [ "${1:-}" = "--cluster" ]; then
    shift
    exec python3 "$BENCH/cluster.py" --command "bench/run.sh --cluster $*" "$@"
fi
if [ "${1:-}" = "--share" ]; then
    shift
    exec python3 "$BENCH/share.py" --command "bench/run.sh --share $*" "$@"
fi
if [ "${1:-}" = "--txn" ]; then
    shift
    exec python3 "$BENCH/txn.py" --command "bench/run.sh --txn $*" "$@"
fi
if [ "${1:-}" = "--security" ]; then
    shift
    exec python3 "$BENCH/security.py" --command "bench/run.sh --security $*" "$@"
fi
if [ "${1:-}" = "--metrics" ]; then
    shift
    exec python3 "$BENCH/metrics.py" --command "bench/run.sh --metrics $*" "$@"
fi
if [ "${1:-}" = "--cleaner" ]; then
    shift
    exec python3 "$BENCH/cleaner.py" --command "bench/run.sh --cleaner $*" "$@"
fi
exec python3 "$BENCH/bench.py" --command "bench/run.sh $*" "$@"
