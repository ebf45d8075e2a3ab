#!/usr/bin/env bash
# `cargo test --workspace`, with the test binaries run several at a time instead of one after another.
# Most of the slow binaries wait, not compute: brokers throttled on purpose, session timeouts, kill -9 and restart
# loops. Each binary runs from its package's directory, as cargo runs it; its output is printed whole when it ends.
# The workspace has no doc tests (cargo test's Doc-tests stage found none), so building and running the test
# binaries is all `cargo test` did.
#
#   TEST_JOBS   binaries at once (default 3)
#   extra arguments go to every test binary, e.g. a test name filter
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

list="$ROOT/target/test-binaries.json"
mkdir -p "$ROOT/target"
cargo test --workspace --no-run --message-format=json-render-diagnostics >"$list"
exec python3 "$ROOT/scripts/run_test_binaries.py" "$list" "${TEST_JOBS:-3}" "$@"
