#!/usr/bin/env bash
# Bounded cargo-fuzz run of every target in fuzz/ (see docs/reliability-tests.md).
#
#   scripts/fuzz.sh [TARGET...]        (default: every target)
#
# FUZZ_SECONDS   seconds per target (default 60)
# FUZZ_INSTALL=1 install cargo-fuzz from crates.io when it is missing (CI does)
# FUZZ_REQUIRED=1 a missing nightly toolchain or cargo-fuzz is a failure, not a skip
#
# New inputs go to a scratch directory, never into the committed corpus (fuzz/corpus/<target>
# is read only). A crash, hang or invariant violation fails the run; libFuzzer writes the
# reproducer to fuzz/artifacts/<target>/ (replay it with
# `cargo run --manifest-path fuzz/Cargo.toml --bin <target> -- <file>`).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(interceptor table_slots table_install code_object)

skip() {
  if [ "${FUZZ_REQUIRED:-0}" = 1 ]; then
    echo "fuzz: FAILED: $1 (FUZZ_REQUIRED=1)" >&2
    exit 1
  fi
  echo "fuzz: SKIPPED: $1"
  exit 0
}

rustup run nightly rustc --version >/dev/null 2>&1 || skip "no nightly toolchain (rustup toolchain install nightly --profile minimal)"
if ! cargo fuzz --version >/dev/null 2>&1; then
  if [ "${FUZZ_INSTALL:-0}" = 1 ]; then
    start=$(date +%s)
    cargo install cargo-fuzz --locked --quiet
    echo "fuzz: installed cargo-fuzz in $(( $(date +%s) - start )) s"
  else
    skip "cargo-fuzz is not installed (cargo install cargo-fuzz, or FUZZ_INSTALL=1)"
  fi
fi

cd fuzz
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
start=$(date +%s)
if ! cargo +nightly fuzz build -O >"$scratch/build.log" 2>&1; then
  tail -40 "$scratch/build.log"
  echo "fuzz: building the targets FAILED" >&2
  exit 1
fi
echo "fuzz: built the targets in $(( $(date +%s) - start )) s"
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "artifacts/$t"
  log=$scratch/$t.log
  echo "=== fuzz: $t for ${seconds} s"
  # -close_fd_mask=2: the targets' own stderr (runtime and tool messages) is dropped;
  # libFuzzer's report (and a crash's backtrace) still print.
  if ! cargo +nightly fuzz run -O "$t" "$scratch/$t" "corpus/$t" -- \
      -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -close_fd_mask=2 \
      -print_final_stats=1 >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz: $t FAILED; reproducer under fuzz/artifacts/$t/" >&2
    exit 1
  fi
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}')
  echo "fuzz: $t clean: $rate exec/s; $done_line"
done
