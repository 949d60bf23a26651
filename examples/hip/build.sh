#!/bin/sh
# Build the HIP samples and their shadow libraries into OUTDIR with Debian's hipcc (HIP 5.2):
#   OUTDIR/<sample>            the program (hipcc --offload-arch=gfx90a)
#   OUTDIR/lib<sample>_shadow.so  its kernels' shadows for hsa-emu (cc; none for memops)
#   OUTDIR/module_kernels.co   the code object module loads (hipcc --genco)
# Usage: examples/hip/build.sh OUTDIR [SAMPLE...]   (default: every sample)
# HIPCC and CC override the compilers; HIP_ARCH the target (default gfx90a).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [SAMPLE...]" >&2; exit 64; }
out=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
HIPCC=${HIPCC:-hipcc}
CC=${CC:-cc}
arch=${HIP_ARCH:-gfx90a}
samples=${*:-vector_add streams symbols module memops managed system_memory flag_wait}
mkdir -p "$out"
set -x
for s in $samples; do
    $HIPCC --offload-arch="$arch" -O2 -Wall -Werror -o "$out/$s" "$here/$s.hip"
    if [ -f "$here/${s}_shadow.c" ]; then
        $CC -std=c11 -Wall -Wextra -Werror -O2 -shared -fPIC -I"$root/hsa-emu/include" \
            -o "$out/lib${s}_shadow.so" "$here/${s}_shadow.c"
    fi
    if [ "$s" = module ]; then
        $HIPCC --genco --offload-arch="$arch" -O2 -o "$out/module_kernels.co" "$here/module_kernels.hip"
    fi
done
