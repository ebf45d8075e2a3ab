#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time each (default 20 s; `scripts/fuzz.sh 600` for a long run).
# Installs the nightly toolchain and cargo-fuzz when missing. Exits non-zero if any target finds a crash.
#
# FUZZ_SANITIZER picks cargo-fuzz's sanitizer (default address). The test command's bounded run uses `none`:
# the decoders are safe Rust, so AddressSanitizer mostly costs build time there (about 85 s of 290 s measured).
# FUZZ_DEV=1 builds the targets unoptimized, with debug assertions (overflow checks too): it builds in 2.5 min
# where the optimized build takes 3.5 (cargo-fuzz forces one codegen unit), and runs a few times slower, which
# seconds of fuzzing can afford.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${1:-20}"
SANITIZER="${FUZZ_SANITIZER:-address}"
PROFILE=()
if [ "${FUZZ_DEV:-0}" = 1 ]; then PROFILE=(--dev); fi

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

# Every target lives in the one cargo-fuzz crate `fuzz/`: built together, dependencies once.
export CARGO_TARGET_DIR="$ROOT/target/fuzz"
cd "$ROOT"
cargo +nightly fuzz build "${PROFILE[@]}" --sanitizer "$SANITIZER"
for target in $(cargo +nightly fuzz list); do
  echo "== fuzz $target for ${SECONDS_PER_TARGET}s (sanitizer: $SANITIZER)"
  corpus="$ROOT/target/fuzz-corpus/$target"
  mkdir -p "$corpus"
  log="$ROOT/target/fuzz-$target.log"
  if ! cargo +nightly fuzz run "${PROFILE[@]}" --sanitizer "$SANITIZER" "$target" "$corpus" -- \
      -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $target FAILED (full log: $log)"
    exit 1
  fi
  grep -E "^(Done|stat::number_of_executed_units)" "$log" || true
done
echo "fuzz: all targets ran without a crash"
