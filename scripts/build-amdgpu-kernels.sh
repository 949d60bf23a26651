#!/usr/bin/env bash
# Rebuilds the HSA backend's device kernels (rocprof-replay/kernels/amdgpu/compare.cl) into the
# AMDGPU code objects the SDK embeds (rocprof-replay/kernels/amdgpu/compare-<gfx>.hsaco), one per
# target below. Run it after editing compare.cl and commit the source and every code object.
#
#   scripts/build-amdgpu-kernels.sh           rebuild the committed code objects
#   scripts/build-amdgpu-kernels.sh --check   rebuild into a temporary directory, fail unless
#                                             each is byte for byte the committed one, and check
#                                             the committed ones' symbols and metadata
#
# Compiler: Debian's clang-19 and ld.lld-19 (apt-get install -y clang-19 lld-19 llvm-19; $CLANG,
# $LLD and $READELF override the names), OpenCL C for `-target amdgcn-amd-amdhsa` without any
# device library (-nogpulib): nothing from ROCm is needed to build. Code object v4: the ROCm
# 5.2 .. 6.x loaders all accept it (v5 needs ROCm 5.3's loader or newer; clang-19's default is
# v5), and the kernels use none of v5's hidden arguments. No target feature is named, so the
# code objects are xnack "any" and sramecc "any" and load on either setting.
#
# The build is reproducible: no debug information and no path reaches the output (the source
# is compiled from its own directory and -ffile-prefix-map maps that away anyway), lld adds no
# build id, and the only compiler trace is the .comment section ("Debian clang version ..."):
# --check fails where another clang-19 build is used, and says which one built the committed
# files.
set -euo pipefail

cd "$(dirname "$0")/.."
dir=rocprof-replay/kernels/amdgpu
src=compare.cl
targets=(gfx90a gfx942 gfx1100)
kernels=(rocprof_replay_compare_table rocprof_replay_fingerprint_table)
clang=${CLANG:-clang-19}
lld=${LLD:-ld.lld-19}
readelf=${READELF:-llvm-readelf-19}

check=0
case "${1:-}" in
"") ;;
--check) check=1 ;;
*)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac

for tool in "$clang" "$lld" "$readelf"; do
    if ! command -v "$tool" >/dev/null; then
        echo "no $tool: apt-get install -y clang-19 lld-19 llvm-19" >&2
        exit 1
    fi
done

# build <gfx> <output>
build() {
    local gfx=$1 out=$2 obj
    obj=$(mktemp --suffix=.o)
    (cd "$dir" && "$clang" -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu="$gfx" \
        -mcode-object-version=4 -nogpulib -O3 -ffile-prefix-map="$PWD"=. \
        -c "$src" -o "$obj")
    "$lld" -shared --no-undefined -o "$out" "$obj"
    chmod 644 "$out"
    rm -f "$obj"
}

# The explicit arguments every kernel has: offset:size:value_kind, in order
# (table, n, granule, total, out).
expected_args="0:8:global_buffer 8:4:by_value 16:8:by_value 24:8:by_value 32:8:global_buffer"

# verify <gfx> <code object>: the ELF header, both kernels' .kd symbols (64-byte objects) and
# their amdhsa.kernels metadata (argument list, kernarg size, target).
verify() {
    local gfx=$1 co=$2 k args size header syms
    # Each tool's output is read whole before it is searched: `readelf | grep -q` under
    # pipefail fails whenever grep exits before readelf has written everything (SIGPIPE).
    header=$("$readelf" -h "$co")
    grep -q 'Machine: *EM_AMDGPU' <<<"$header" || {
        echo "$co: not an AMDGPU code object" >&2
        return 1
    }
    grep -q 'ABI Version: *2$' <<<"$header" || {
        echo "$co: not code object v4 (ABI version 2)" >&2
        return 1
    }
    grep -Eq "Flags:.*, $gfx(,|\$)" <<<"$header" || {
        echo "$co: e_flags do not name $gfx" >&2
        return 1
    }
    local notes
    notes=$("$readelf" --notes "$co")
    grep -q "^amdhsa.target: *amdgcn-amd-amdhsa--$gfx\$" <<<"$notes" || {
        echo "$co: amdhsa.target is not amdgcn-amd-amdhsa--$gfx" >&2
        return 1
    }
    syms=$("$readelf" --dyn-syms "$co")
    for k in "${kernels[@]}"; do
        awk -v s="$k.kd" \
            '$8 == s && $4 == "OBJECT" && $3 == 64 { found = 1 } END { exit !found }' <<<"$syms" || {
            echo "$co: no 64-byte OBJECT symbol $k.kd" >&2
            return 1
        }
        # The kernel's map in amdhsa.kernels: its .args (offset:size:value_kind each) and its
        # kernarg segment size.
        read -r size args < <(awk -v k="$k" '
            /^  - / { if (name == k) { print size, args; done = 1; exit } name = ""; args = ""; size = "" }
            /^amdhsa\.target/ { if (name == k) { print size, args; done = 1 } exit }
            $1 == ".name:" { name = $2 }
            $1 == ".kernarg_segment_size:" { size = $2 }
            $1 == "-" && $2 == ".offset:" || $1 == ".offset:" { off = $NF }
            $1 == ".size:" { sz = $2 }
            $1 == ".value_kind:" { args = args (args == "" ? "" : " ") off ":" sz ":" $2 }
        ' <<<"$(sed -n '/^amdhsa.kernels:/,$p' <<<"$notes")") || true
        if [[ "$args" != "$expected_args" || "$size" != 40 ]]; then
            echo "$co: $k has arguments [$args] (kernarg size $size), expected [$expected_args] (40)" >&2
            return 1
        fi
    done
}

if [[ $check == 0 ]]; then
    for gfx in "${targets[@]}"; do
        build "$gfx" "$dir/compare-$gfx.hsaco"
        verify "$gfx" "$dir/compare-$gfx.hsaco"
        echo "$dir/compare-$gfx.hsaco: $(stat -c %s "$dir/compare-$gfx.hsaco") bytes"
    done
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for gfx in "${targets[@]}"; do
    committed=$dir/compare-$gfx.hsaco
    if [[ ! -f $committed ]]; then
        echo "$committed: missing (run $0)" >&2
        status=1
        continue
    fi
    verify "$gfx" "$committed" || status=1
    build "$gfx" "$tmp/compare-$gfx.hsaco"
    if cmp -s "$committed" "$tmp/compare-$gfx.hsaco"; then
        echo "$committed: rebuilt byte for byte, symbols and metadata as expected"
    else
        echo "$committed: differs from a rebuild of $dir/$src (run $0 and commit the result)" >&2
        echo "  committed by: $("$readelf" -p .comment "$committed" | grep -o 'clang version.*' | head -1)" >&2
        echo "  rebuilt by:   $("$clang" --version | head -1)" >&2
        status=1
    fi
done
exit $status
