#!/usr/bin/env bash
# Restore cost of rocprof-replay's CUDA engine against CUPTI's checkpoint API and plain copies,
# and the wall time of Nsight Compute's kernel replay against ours, on one GPU, in one run.
#
#   bash tests/cuda/bench.sh <libtool.so built with --features rocprof-replay/cuda> <out-dir>
#
# Needs nvcc, CUPTI and ncu (CUDA_HOME, default /usr/local/cuda). Writes <out-dir>/table.md
# and the raw figures beside it (docs/performance.md shows one run).
set -euo pipefail
tool=$(readlink -f "$1")
out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cuda=${CUDA_HOME:-/usr/local/cuda}
inc=$cuda/extras/CUPTI/include; [ -f "$inc/cupti.h" ] || inc=$cuda/include
lib=$cuda/extras/CUPTI/lib64; [ -e "$lib/libcupti.so" ] || lib=$cuda/lib64
ncu=${NCU:-$(command -v ncu || echo "$cuda/bin/ncu")}
bench=$out/restore_bench
"$cuda/bin/nvcc" -O2 -std=c++17 -arch=native -I"$inc" -L"$lib" -Xlinker -rpath,"$lib" \
  -L"$cuda/lib64/stubs" -o "$bench" "$here/apps/restore_bench.cu" -lcheckpoint -lcupti -lcuda

now() { date +%s.%N; }
: > "$out/cupti.jsonl"
: > "$out/walls.tsv"
# write MiB : footprint MiB
for c in 4:16384 4:1024 1024:1024 8192:16384; do
  w=${c%:*} f=${c#*:}
  "$bench" cupti "$w" "$f" 10 >> "$out/cupti.jsonl"
  rm -f "$out/engine-$w-$f.jsonl"
  ROCPROF_REPLAY_PASSES=6 ROCPROF_REPLAY_OUTPUT="$out/engine-$w-$f.jsonl" \
    CUDA_INJECTION64_PATH="$tool" "$bench" launch "$w" "$f" 4 > /dev/null 2> "$out/engine-$w-$f.stderr"
done
# The same program (5 launches, 4 MiB written) plain, under Nsight Compute's kernel replay
# (--set full: 38 passes per kernel) and under the tool with 38 passes.
for f in 1024 16384; do
  s=$(now); "$bench" launch 4 "$f" 5 > /dev/null; e=$(now)
  printf 'plain\t%s\t%s\n' "$f" "$(awk "BEGIN{print $e - $s}")" >> "$out/walls.tsv"
  s=$(now)
  "$ncu" --replay-mode kernel --set full --clock-control none "$bench" launch 4 "$f" 5 \
    > "$out/ncu-$f.log" 2>&1 || echo "ncu failed, see ncu-$f.log" >&2
  e=$(now)
  printf 'ncu\t%s\t%s\n' "$f" "$(awk "BEGIN{print $e - $s}")" >> "$out/walls.tsv"
  rm -f "$out/ours38-$f.jsonl"
  s=$(now)
  ROCPROF_REPLAY_PASSES=38 ROCPROF_REPLAY_OUTPUT="$out/ours38-$f.jsonl" \
    CUDA_INJECTION64_PATH="$tool" "$bench" launch 4 "$f" 5 > /dev/null 2> "$out/ours38-$f.stderr"
  e=$(now)
  printf 'rocprof-replay\t%s\t%s\n' "$f" "$(awk "BEGIN{print $e - $s}")" >> "$out/walls.tsv"
done
python3 "$here/bench_table.py" "$out" | tee "$out/table.md"
