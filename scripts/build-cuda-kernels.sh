#!/usr/bin/env bash
# Rebuilds the CUDA backend's device kernels (rocprof-replay/kernels/cuda/*.cu) into the PTX the
# SDK embeds (rocprof-replay/kernels/cuda/*.ptx). Run it after editing a .cu file and commit both.
#
# The PTX targets sm_80, so the driver JITs it for sm_80 and every newer GPU (H100/H200 are
# sm_90), and its `.version` is lowered to PTX ISA 7.0 (CUDA 11.0, the first with sm_80): a
# driver refuses PTX newer than itself, and the nvcc at hand may be newer than the driver of the
# machine that runs the tool. The kernels use nothing past ISA 7.0; ptxas checks that the
# lowered file still assembles.
#
# nvcc: $NVCC, else `nvcc` on PATH, else $CUDA_HOME/bin/nvcc. Without a toolkit:
#   python3 -m venv /tmp/nvccenv && /tmp/nvccenv/bin/pip install nvidia-cuda-nvcc
#   NVCC=/tmp/nvccenv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc scripts/build-cuda-kernels.sh
set -euo pipefail

cd "$(dirname "$0")/.."
dir=rocprof-replay/kernels/cuda
arch=sm_80
isa=7.0

nvcc=${NVCC:-}
if [[ -z $nvcc ]]; then
    if command -v nvcc >/dev/null; then
        nvcc=nvcc
    elif [[ -n ${CUDA_HOME:-} && -x $CUDA_HOME/bin/nvcc ]]; then
        nvcc=$CUDA_HOME/bin/nvcc
    else
        echo "no nvcc: set NVCC (see the comment at the top of $0)" >&2
        exit 1
    fi
fi
ptxas=$(dirname "$(command -v "$nvcc")")/ptxas

for cu in "$dir"/*.cu; do
    ptx=${cu%.cu}.ptx
    tmp=$(mktemp --suffix=.ptx)
    "$nvcc" --ptx -arch="compute_${arch#sm_}" -O3 -o "$tmp" "$cu"
    {
        echo "// Generated from $(basename "$cu") by scripts/build-cuda-kernels.sh ($("$nvcc" --version | tail -1)); do not edit."
        sed -e "s/^\.version .*/.version $isa/" "$tmp"
    } >"$ptx"
    rm -f "$tmp"
    if [[ -x $ptxas ]]; then
        "$ptxas" -arch="$arch" -o /dev/null "$ptx"
    fi
    echo "$ptx: $(grep -c '^\.visible \.entry' "$ptx") entry point(s), .target $(awk '/^\.target/ {print $2}' "$ptx")"
done
