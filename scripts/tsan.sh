#!/usr/bin/env bash
# ThreadSanitizer run of the engine's locking and lock-free paths.
#
#   scripts/tsan.sh [unit|stress|all]        (default: all)
#
# unit    the rocprof-replay unit tests (window, inventory, snapshot, copy fence, records, ...)
#         built with -Zsanitizer=thread and a sanitized standard library (-Zbuild-std).
# stress  the stress application (tests/fixtures/stress_probe.c, -fsanitize=thread) on hsa-emu
#         and the e2e_plan_tool replay tool, both cdylibs built with -Zsanitizer=thread: the
#         whole process (application, runtime, tool) is instrumented.
#
# Needs a nightly toolchain with rust-src (rustup toolchain install nightly --profile minimal
# --component rust-src). Exits 0 with a clear "SKIPPED" line when nightly or rust-src is
# missing, unless TSAN_REQUIRED=1 (then that is a failure). Any data race TSAN reports fails
# the run (halt_on_error=1, exitcode 66). Suppressions: scripts/tsan.supp, each with a reason.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
what=${1:-all}
target=x86_64-unknown-linux-gnu
export CARGO_TARGET_DIR=${TSAN_TARGET_DIR:-$root/target/tsan}

skip() {
  if [ "${TSAN_REQUIRED:-0}" = 1 ]; then
    echo "tsan: FAILED: $1 (TSAN_REQUIRED=1)" >&2
    exit 1
  fi
  echo "tsan: SKIPPED: $1"
  exit 0
}

command -v rustup >/dev/null || skip "rustup is not installed"
rustup run nightly rustc --version >/dev/null 2>&1 || skip "no nightly toolchain (rustup toolchain install nightly --profile minimal --component rust-src)"
sysroot=$(rustup run nightly rustc --print sysroot)
[ -d "$sysroot/lib/rustlib/src/rust/library" ] || skip "nightly has no rust-src component (rustup component add rust-src --toolchain nightly)"

export RUSTFLAGS="-Zsanitizer=thread -Cforce-frame-pointers=yes ${TSAN_EXTRA_RUSTFLAGS:-}"
export RUSTDOCFLAGS="-Zsanitizer=thread"
# halt_on_error: the first race fails the run; second_deadlock_stack: full lock-order reports.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$root/scripts/tsan.supp ${TSAN_EXTRA_OPTIONS:-}"
nightly=(rustup run nightly cargo)
build_std=(-Zbuild-std --target "$target")

run_unit() {
  echo "=== tsan: rocprof-replay unit tests"
  "${nightly[@]}" test "${build_std[@]}" -p rocprof-replay --lib -- --test-threads=2
}

run_stress() {
  echo "=== tsan: stress application on hsa-emu with the e2e_plan_tool replay tool"
  command -v cc >/dev/null || skip "no C compiler"
  [ -f /usr/include/hsa/hsa.h ] || skip "the stress application needs Debian's HSA headers (apt-get install libhsa-runtime-dev)"
  "${nightly[@]}" build "${build_std[@]}" -p hsa-emu --lib -p e2e-plan-tool
  local out=$CARGO_TARGET_DIR/tsan-stress
  mkdir -p "$out"
  local libdir=$CARGO_TARGET_DIR/$target/debug
  cp "$libdir/libhsa_emu.so" "$out/libhsa-runtime64.so.1"
  ln -sf libhsa-runtime64.so.1 "$out/libhsa-runtime64.so"
  local cflags=(-std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=thread
    "-I$root/hsa-emu/include" "-I$root/examples/apps" "-I$root/examples/kernels")
  cc "${cflags[@]}" -shared -fPIC -o "$out/libstress_kernels.so" "$root/tests/fixtures/stress_kernels.c"
  # scripts/tsan_mem.c: entry points LLVM's instrumentation calls and GCC's libtsan lacks.
  cc "${cflags[@]}" -rdynamic -o "$out/stress_probe" "$root/tests/fixtures/stress_probe.c" \
    "$root/scripts/tsan_mem.c" "-L$out" -lhsa-runtime64 -lpthread
  local records=$out/records.jsonl
  rm -f "$records"
  # The C program is the executable, so the TSAN runtime comes from -fsanitize=thread (libtsan);
  # the Rust cdylibs carry their own calls into it and resolve against the executable's.
  env LD_LIBRARY_PATH="$out" HSA_EMU_GPUS=2 \
    LD_PRELOAD="$libdir/libe2e_plan_tool.so" \
    E2E_PLAN=exactly:3 E2E_KERNEL=stress_replayed \
    ROCPROF_REPLAY_OUTPUT="$records" ROCPROF_REPLAY_LOG=error \
    ROCPROF_REPLAY_DRAIN_TIMEOUT_MS=2000 \
    STRESS_THREADS=${STRESS_THREADS:-4} STRESS_ROUNDS=${STRESS_ROUNDS:-6} \
    "$out/stress_probe" "$out/libstress_kernels.so" 2>&1 | grep -v '^e2e_plan_tool: '
  echo "tsan: stress run clean; $(wc -l <"$records") outcome records"
}

case $what in
  unit) run_unit ;;
  stress) run_stress ;;
  all) run_unit; run_stress ;;
  *) echo "usage: $0 [unit|stress|all]" >&2; exit 64 ;;
esac
echo "tsan: no data race reported ($what)"
