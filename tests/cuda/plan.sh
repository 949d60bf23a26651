#!/usr/bin/env bash
# Runs `gpu.sh` steps (and the staged test binaries) in one device call, within a total time
# budget, from the directory `tests/cuda/stage.sh` staged; the log goes to $OUT/log.txt and the
# steps' outputs to /tmp/o (only the markdown tables and summaries are copied to $OUT/keep, so
# the call's files stay few enough to come back).
#
#   bash plan.sh <budget-seconds> <item>...     item: STEP:CAP (a gpu.sh step, at most CAP s)
#                                               or  @BINARY:CAP (a staged test binary, run with
#                                               --include-ignored --test-threads=1)
#   e.g. bash .stageN/plan.sh 540 @counters:150 async:170 replay:60 counters-gpt2:240
#
# Settings apply to the whole call (`ROCPROF_REPLAY_CUPTI_RUN=8 bash plan.sh ...`). A step
# whose cap no longer fits the budget's rest gets the rest; under 30 s left, the
# remaining items are skipped and named.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
budget=$1
shift
o=/tmp/o
mkdir -p "$o" "${OUT:?run this through the device tool: OUT is its output folder}/keep"
t0=$(date +%s)
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
export ROCPROF_REPLAY_CUDA_TOOL=$here/libpass_timer.so
export ROCPROF_REPLAY_CUDA_FIXTURES=$here/cuda
export ROCPROF_REPLAY_TIMER_LIB=$here/librocprof_replay_timer.so
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for item in "$@"; do
    name=${item%:*}
    cap=${item##*:}
    left=$((budget - ($(date +%s) - t0)))
    if [ "$left" -lt 30 ]; then
      echo "=== skipped (budget): $name"
      continue
    fi
    [ "$cap" -gt "$left" ] && cap=$left
    echo "=== $name (cap $cap s, $(date -u +%T))"
    if [ "${name#@}" != "$name" ]; then
      ROCPROF_REPLAY_GPU_OUT=$o/${name#@} timeout -k 5 "$cap" "$here/${name#@}" \
        --include-ignored --test-threads=1 2>&1
    else
      timeout -k 5 "$cap" bash "$here/gpu.sh" "$o" "$name" 2>&1
    fi
    echo "=== exit $? ($(date -u +%T))"
  done
  find "$o" -name '*.md' -o -name '*summary*' | while read -r f; do
    cp "$f" "$OUT/keep/$(echo "${f#"$o"/}" | tr / _)"
  done
} > "$OUT/log.txt" 2>&1
tail -c 11000 "$OUT/log.txt"
