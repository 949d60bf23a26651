#!/usr/bin/env bash
# Everything the CUDA backend needs a GPU for, in one go, on a machine without a Rust
# toolchain: run from a directory holding what `tests/cuda/stage.sh` staged.
#
#   bash gpu.sh <out-dir> [steps...]     steps: env probe replay cupti gpt2 bench (default all)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1; shift
steps=${*:-env diag probe replay cupti gpt2 bench}
mkdir -p "$out"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
export ROCPROF_REPLAY_CUDA_TOOL=$here/libpass_timer.so
export ROCPROF_REPLAY_CUDA_FIXTURES=$here/cuda
export ROCPROF_REPLAY_GPU_OUT=$out/gpu
step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
for s in $steps; do
  case $s in
  env)
    step env
    nvidia-smi; nvcc --version | tail -2
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name())'
    ldconfig -p | grep -E 'libcuda.so|libcupti' ; ls $CUDA_HOME/extras/CUPTI/lib64 2>/dev/null | head
    command -v ncu; ls /opt/nvidia 2>/dev/null
    python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))'
    find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head
    ;;
  diag)
    step "replay_check under the tool, debug log"
    exe=$out/replay_check
    nvcc -O2 -std=c++17 -arch=native -o "$exe" "$here/cuda/apps/replay_check.cu"
    ROCPROF_REPLAY_LOG=debug ROCPROF_REPLAY_DEBUG_SIGNALS=1 ROCPROF_REPLAY_PASSES=3 \
      ROCPROF_REPLAY_OUTPUT=$out/diag.jsonl CUDA_INJECTION64_PATH=$ROCPROF_REPLAY_CUDA_TOOL \
      timeout 120 "$exe" > "$out/diag.stdout" 2> "$out/diag.stderr"
    echo "exit $?"; tail -5 "$out/diag.stdout"; grep -v '^pass_timer' "$out/diag.stderr" | tail -60
    ;;
  probe)
    step "layout probe against the installed headers"
    ROCPROF_REPLAY_CUDA_PROBE_OUT=$out/probe.txt timeout 120 "$here/cuda_layout" --include-ignored 2>&1 | tail -40
    ;;
  replay)
    step "replay_check under injection and LD_PRELOAD"
    timeout 300 "$here/gpu" --include-ignored --test-threads=1 --nocapture \
      every_launch_path a_preloaded_tool 2>&1 | tail -60
    ;;
  cupti)
    step "an application holding CUPTI"
    timeout 120 "$here/gpu" --include-ignored --nocapture an_application_that_holds 2>&1 | tail -30
    ;;
  gpt2)
    step "GPT-2 training step"
    timeout 560 "$here/gpu" --include-ignored --nocapture a_gpt2 2>&1 | tail -40
    cat "$out/gpu/gpt2.summary.json" 2>/dev/null
    python3 "$here/cuda/summarize.py" "$out/gpu/gpt2.records.jsonl" 2>/dev/null | head -60
    ;;
  bench)
    step "restore benchmark"
    timeout 400 bash "$here/cuda/bench.sh" "$here/libpass_timer.so" "$out/bench" 2>&1 | tail -30
    ;;
  esac
done
