#!/usr/bin/env bash
# Everything the CUDA backend needs a GPU for, in one go, on a machine without a Rust
# toolchain: run from a directory holding what `tests/cuda/stage.sh` staged.
#
#   bash gpu.sh <out-dir> [steps...]     steps: env diag probe replay promise async cupti gpt2 bench (default all)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1; shift
steps=${*:-env diag probe replay promise async cupti gpt2 bench}
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
    step "replay_check under each tool variant and setting"
    exe=$out/replay_check
    nvcc -O2 -std=c++17 -arch=native -o "$exe" "$here/cuda/apps/replay_check.cu"
    one() { # name lib env...
      local name=$1 lib=$2; shift 2
      env "$@" ROCPROF_REPLAY_PASSES=3 ROCPROF_REPLAY_OUTPUT=$out/diag-$name.jsonl \
        CUDA_INJECTION64_PATH=$lib timeout 60 "$exe" > "$out/diag-$name.stdout" 2> "$out/diag-$name.stderr"
      echo "diag $name: exit $? $(grep -c '' $out/diag-$name.jsonl 2>/dev/null) records $(tail -1 $out/diag-$name.stdout)"
      grep -v '^pass_timer\|INFO dispatch' "$out/diag-$name.stderr" | head -40
    }
    A=$here/variant-a.so B=$ROCPROF_REPLAY_CUDA_TOOL
    [ -f "$A" ] && {
      one a-warn "$A" ROCPROF_REPLAY_LOG=warn
      one a-warn-sig "$A" ROCPROF_REPLAY_LOG=warn ROCPROF_REPLAY_DEBUG_SIGNALS=1
      one a-info "$A" ROCPROF_REPLAY_LOG=info
      one a-debug "$A" ROCPROF_REPLAY_LOG=debug
      timeout 120 cuda-gdb -q -batch -ex 'set pagination off' -ex "set environment CUDA_INJECTION64_PATH=$A" \
        -ex 'set environment ROCPROF_REPLAY_LOG=warn' -ex run -ex 'bt 40' -ex 'info threads' \
        -ex 'thread apply all bt 12' "$exe" > "$out/diag-gdb.txt" 2>&1
      grep -v '^pass_timer' "$out/diag-gdb.txt" | tail -120
    }
    for k in 1 2 3; do one b-warn-$k "$B" ROCPROF_REPLAY_LOG=warn ROCPROF_REPLAY_DEBUG_SIGNALS=1; done
    one b-error "$B"
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
  promise)
    step "host memory, communication and module paths (issue 13)"
    timeout 300 "$here/gpu" --include-ignored --test-threads=1 --nocapture \
      kernels_writing_host_memory 2>&1 | tail -40
    ;;
  async)
    step "asynchronous windows and kernel-only pass times (issue 13 items 3, 4)"
    timeout 400 "$here/async_gpu" --include-ignored --test-threads=1 --nocapture 2>&1 | tail -60
    for f in flag_wait overlap; do
      echo "--- $f"; grep -E '^(launch_returned_us|completed_ms|complete_ms|seen|check|expected|RESULT)' "$out/gpu/$f.stdout" 2>/dev/null
    done
    cat "$out/gpu/short_kernel.summary" 2>/dev/null
    if command -v ncu >/dev/null; then
      exe=$out/short_kernel
      nvcc -O2 -std=c++17 -arch=native -o "$exe" "$here/cuda/apps/short_kernel.cu" &&
        LAUNCHES=50 timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv \
          -k regex:five_us "$exe" > "$out/short_kernel.ncu.csv" 2> "$out/short_kernel.ncu.stderr"
      echo "ncu: exit $? ($(grep -c gpu__time_duration "$out/short_kernel.ncu.csv" 2>/dev/null) rows)"
      python3 - "$out/short_kernel.ncu.csv" "$out/gpu/short_kernel.jsonl" <<'PY'
import csv, json, statistics, sys
ncu = []
try:
    rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
    for r in csv.DictReader(rows):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            v = float(r["Metric Value"].replace(",", ""))
            unit = r.get("Metric Unit", "nsecond")
            ncu.append(v * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1))
except OSError as e:
    print("ncu csv:", e)
ours, first, later = [], [], []
try:
    for l in open(sys.argv[2]):
        r = json.loads(l)
        if "five_us" in (r.get("kernel") or ""):
            t = [x for x in r.get("pass_ns") or [] if x]
            ours += t
            first += t[:1]
            later += t[1:]
except OSError as e:
    print("records:", e)
med = lambda v: statistics.median(v) if v else float("nan")
print(f"five_us median ns: ours {med(ours):.0f} (pass 1 {med(first):.0f}, relaunches {med(later):.0f}; {len(ours)} passes)"
      f" | ncu gpu__time_duration {med(ncu):.0f} ({len(ncu)} launches) | ours/ncu {med(ours) / med(ncu):.3f}")
PY
      tail -5 "$out/short_kernel.ncu.stderr" 2>/dev/null
    else
      echo "ncu not found: no Nsight Compute comparison"
    fi
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
