#!/usr/bin/env bash
# The single test command: installs the e2e dependencies, builds, runs the Rust tests and then the
# end-to-end suite with real Kafka clients. Exits non-zero on the first failure; pytest's summary is last.
#
# Environment:
#   E2E_BROKER=fjord|kafka   broker under test for the e2e suite (default fjord: target/release/fjord)
#   E2E_PYTEST_ARGS          extra pytest arguments, e.g. '-m "not slow"' for the quick subset
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Each step says when it starts and how long the test command has run, so a slow step shows in CI's log.
step() { echo; echo "==== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

step "install test dependencies"
scripts/install-test-deps.sh

step "cargo build --release"
cargo build --release

step "lint: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace, three test binaries at a time"
scripts/cargo-test.sh

step "fuzz: every target, bounded, no sanitizer (long runs, with AddressSanitizer: scripts/fuzz.sh 600)"
# Seconds of fuzzing need no optimization: the unoptimized build takes a minute less.
FUZZ_DEV=1 FUZZ_SANITIZER="${FUZZ_SANITIZER:-none}" scripts/fuzz.sh "${FUZZ_SECONDS:-3}"

step "benchmark harness, smoke mode (the full comparison: bench/run.sh)"
bench/run.sh --smoke

step "cleaner benchmark harness, smoke mode (the full comparison: bench/run.sh --cleaner)"
bench/run.sh --cleaner --smoke

step "three-node cluster benchmark harness, smoke mode (the full comparison: bench/run.sh --cluster)"
bench/run.sh --cluster --smoke

step "transaction benchmark harness, smoke mode (the full comparison: bench/run.sh --txn)"
bench/run.sh --txn --smoke

step "security benchmark harness, smoke mode (the full comparison: bench/run.sh --security)"
bench/run.sh --security --smoke

step "share group benchmark harness, smoke mode (the full comparison: bench/run.sh --share)"
bench/run.sh --share --smoke

step "metrics cost benchmark harness, smoke mode (the full measurement: bench/run.sh --metrics)"
bench/run.sh --metrics --smoke

step "e2e (E2E_BROKER=${E2E_BROKER:-fjord})"
# pytest prints its summary line last; its exit code is this script's.
eval "exec .venv/bin/pytest tests/e2e -q --durations=60 ${E2E_PYTEST_ARGS:-}"
