#!/usr/bin/env bash
# Builds (here) what gpu.sh runs on a GPU machine and copies it into <dir>: the pass_timer tool
# with the cuda feature, the GPU test binaries (gpu, async_gpu, counters), the layout-probe
# tests, the rocprof-replay command with its timer tool (cuda feature), and this directory's
# fixtures. Binaries are stripped.
#
#   bash tests/cuda/stage.sh <dir>
set -euo pipefail
dir=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
t=target/cuda-stage
mkdir -p "$dir/cuda"
cargo build --release -q -p rocprof-replay-example-pass-timer --features rocprof-replay/cuda --target-dir $t
cp $t/release/libpass_timer.so "$dir/"
pick() { # the test executable cargo reports for `cargo test ... --no-run`
  grep -o '"executable":"[^"]*"' | sed 's/"executable":"//; s/"$//' | grep "/$1-" | tail -1
}
exe=$(ROCPROF_REPLAY_GPU_TESTS=1 cargo test --release -q -p rocprof-replay-cuda-tests --test gpu \
  --no-run --target-dir $t --message-format json 2>/dev/null | pick gpu)
cp "$exe" "$dir/gpu"
exe=$(ROCPROF_REPLAY_GPU_TESTS=1 cargo test --release -q -p rocprof-replay-cuda-tests --test async_gpu \
  --no-run --target-dir $t --message-format json 2>/dev/null | pick async_gpu)
cp "$exe" "$dir/async_gpu"
exe=$(cargo test --release -q -p rocprof-replay-sys --features cuda --test cuda_layout --no-run \
  --target-dir $t --message-format json 2>/dev/null | pick cuda_layout)
cp "$exe" "$dir/cuda_layout"
exe=$(cargo test --release -q -p rocprof-replay-sys --features cuda --test cupti_profiler_layout \
  --no-run --target-dir $t --message-format json 2>/dev/null | pick cupti_profiler_layout)
cp "$exe" "$dir/cupti_profiler_layout"
# Hardware counters (gpu.sh counters): the command and its timer tool with the CUDA backend,
# side by side (the command finds the timer next to itself), and the counters GPU test.
cargo build --release -q -p rocprof-replay-cli -p rocprof-replay-timer \
  --features rocprof-replay-timer/cuda --target-dir $t
cp $t/release/rocprof-replay $t/release/librocprof_replay_timer.so "$dir/"
exe=$(ROCPROF_REPLAY_GPU_TESTS=1 cargo test --release -q -p rocprof-replay-cuda-tests \
  --test counters --no-run --target-dir $t --message-format json 2>/dev/null | pick counters)
cp "$exe" "$dir/counters"
# The tool keeps its line tables (backtraces with ROCPROF_REPLAY_DEBUG_SIGNALS=1).
strip "$dir/gpu" "$dir/async_gpu" "$dir/cuda_layout" "$dir/cupti_profiler_layout" "$dir/counters" "$dir/rocprof-replay"
cp -r tests/cuda/apps tests/cuda/*.py tests/cuda/*.sh "$dir/cuda/"
cp rocprof-replay/kernels/cuda/*.ptx "$dir/cuda/"
cp tests/cuda/gpu.sh tests/cuda/plan.sh "$dir/"
du -sh "$dir"
