#!/bin/sh
# Build the sample kernels (an hsa-emu code object) and the sample apps into OUTDIR.
# Usage: examples/apps/build.sh OUTDIR     (CC defaults to cc; EXTRA_CFLAGS / LDFLAGS are
# appended, e.g. LDFLAGS=-L/path/to/hsa-emu/lib to link against another libhsa-runtime64)
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 64; }
out=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CC=${CC:-cc}
CFLAGS="-std=c11 -Wall -Wextra -Werror -O2 -I$root/hsa-emu/include ${EXTRA_CFLAGS:-}"
mkdir -p "$out"
set -x
$CC $CFLAGS -shared -fPIC -o "$out/libsample_kernels.so" "$root/examples/kernels/sample_kernels.c"
for app in vector_add inplace_counter multi_queue async_copy aqlprofile_counters; do
    $CC $CFLAGS -o "$out/$app" "$here/$app.c" ${LDFLAGS:-} -lhsa-runtime64 -lpthread
done
