// The CUDA backend's device kernels: the compare kernel (which granules of a live region differ
// from its snapshot) and the fingerprint kernel (one hash per granule of watched memory), each
// in two forms: over one region (rocprof_replay_compare, rocprof_replay_fingerprint) and over a
// table of regions in one launch (rocprof_replay_compare_table, rocprof_replay_fingerprint_table:
// what the backend launches, one launch per batch; below). Both forms share the per-granule
// code, so their results are the same bit for bit.
//
// Also here: the copy kernel (rocprof_replay_copy_table, at the end), one launch for the
// small snapshot copies of a batch.
//
// Built to PTX for sm_80 (so the driver JITs it for sm_80 and newer) by
// scripts/build-cuda-kernels.sh; the PTX next to this file (compare.ptx) is what the SDK embeds
// (rocprof-replay/src/cuda/window/compare.rs) and loads per context with cuModuleLoadData. Edit this
// file, run the script, commit both.
//
// rocprof_replay_compare(live, snap, len, granule, flags): granule g covers bytes
// [g * granule, min((g + 1) * granule, len)) of both buffers (the last one may be shorter);
// flags[g] = 1 when any byte of it differs, else 0. One block per granule at a time (grid-stride
// over the granules); its threads compare 16-byte vectors when both buffers and the granule are
// 16-byte aligned, then the granule's tail byte by byte (bytes throughout otherwise); each
// thread stops at its first difference, and the block's verdict is one __syncthreads_or.

// Vectors a fingerprint thread loads before it hashes any (64 registers per thread on sm_90
// at 8; -D on nvcc's command line for experiments).
#ifndef ROCPROF_REPLAY_FINGERPRINT_BATCH
#define ROCPROF_REPLAY_FINGERPRINT_BATCH 8
#endif

// One granule of the compare, for the whole block: whether any of the `glen` bytes at `a` and
// `b` differ (`vectors`: both start 16-byte aligned). Every thread of the block must call it
// (it ends with __syncthreads_or).
__device__ __forceinline__ int rocprof_replay_compare_granule(const unsigned char* __restrict__ a,
                                                              const unsigned char* __restrict__ b,
                                                              unsigned long long glen,
                                                              bool vectors)
{
    int differs = 0;
    unsigned long long done = 0;
    if (vectors) {
        // One pair of vectors at a time: batching loads here (as the fingerprint does) made
        // the compare slower on the H200 (more registers, fewer blocks resident).
        const uint4* va = reinterpret_cast<const uint4*>(a);
        const uint4* vb = reinterpret_cast<const uint4*>(b);
        const unsigned long long n = glen / 16;
        for (unsigned long long i = threadIdx.x; i < n && !differs; i += blockDim.x) {
            const uint4 x = va[i];
            const uint4 y = vb[i];
            differs = (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
        }
        done = n * 16;
    }
    for (unsigned long long i = done + threadIdx.x; i < glen && !differs; i += blockDim.x) {
        differs = a[i] != b[i];
    }
    return __syncthreads_or(differs);
}

extern "C" __global__ void rocprof_replay_compare(const unsigned char* __restrict__ live,
                                                  const unsigned char* __restrict__ snap,
                                                  unsigned long long len,
                                                  unsigned long long granule,
                                                  unsigned char* __restrict__ flags)
{
    if (granule == 0) {
        return;
    }
    const unsigned long long granules = (len + granule - 1) / granule;
    const bool vectors =
        ((reinterpret_cast<unsigned long long>(live) | reinterpret_cast<unsigned long long>(snap) |
          granule) &
         15ull) == 0;
    for (unsigned long long g = blockIdx.x; g < granules; g += gridDim.x) {
        const unsigned long long start = g * granule;
        const unsigned long long glen = len - start < granule ? len - start : granule;
        const int differs = rocprof_replay_compare_granule(live + start, snap + start, glen, vectors);
        if (threadIdx.x == 0) {
            flags[g] = differs ? 1 : 0;
        }
    }
}

// rocprof_replay_fingerprint(src, len, granule, out): out[g] = the fingerprint of granule g of
// [src, src + len) (granules from src, the last one may be shorter), the host's
// footprint::fingerprint (rocprof-replay/src/engine/footprint.rs) bit for bit:
//
//   glen * GOLDEN + sum over words i of mix(w_i ^ (i + 1) * GOLDEN)      (wrapping 64-bit)
//
// w_i the i-th little-endian 8-byte word of the granule, the last one zero-padded; mix is
// SplitMix64's finaliser. A sum, so the threads may add their terms in any order. One block per
// granule at a time (grid-stride over the granules); its threads read 16-byte vectors when the
// granule starts 16-byte aligned and its length is a multiple of 16, else aligned 8-byte words,
// else (a granule off 8-byte alignment) words assembled from bytes; thread 0 adds the partial
// last word. The block's sum: warp shuffles, then one warp over the warps' sums in shared
// memory. blockDim.x must be a multiple of 32 (at most 1024); the backend launches 256.

#define ROCPROF_REPLAY_GOLDEN 0x9e3779b97f4a7c15ull

__device__ __forceinline__ unsigned long long rocprof_replay_mix(unsigned long long x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ unsigned long long rocprof_replay_warp_sum(unsigned long long v)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

// One granule of the fingerprint, for the whole block: the fingerprint of the `glen` bytes at
// `p`, valid in thread 0 (the others get a partial sum). Every thread of the block must call it
// (it synchronises through `warp_sums`, 32 entries of shared memory, and leaves them free for
// the next call).
__device__ __forceinline__ unsigned long long
rocprof_replay_fingerprint_granule(const unsigned char* __restrict__ p,
                                   unsigned long long glen,
                                   unsigned long long* warp_sums)
{
    const unsigned long long GOLDEN = ROCPROF_REPLAY_GOLDEN;
    const unsigned long long tid = threadIdx.x;
    const unsigned long long threads = blockDim.x;
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int warp = threadIdx.x >> 5;
    const unsigned long long words = glen / 8;
    const unsigned long long at = reinterpret_cast<unsigned long long>(p);
    unsigned long long sum = 0;
    if (((at | glen) & 15ull) == 0) {
        // Words 2i and 2i + 1 in vector i; the keys (i + 1) * GOLDEN advance by addition.
        // ROCPROF_REPLAY_FINGERPRINT_BATCH vectors per thread are loaded before any is hashed
        // so that many loads are in flight at once.
        const ulonglong2* v = reinterpret_cast<const ulonglong2*>(p);
        const unsigned long long n = glen / 16;
        unsigned long long key = (2 * tid + 1) * GOLDEN;
        const unsigned long long step = 2 * threads * GOLDEN;
        for (unsigned long long base = tid; base < n;
             base += ROCPROF_REPLAY_FINGERPRINT_BATCH * threads) {
            ulonglong2 x[ROCPROF_REPLAY_FINGERPRINT_BATCH];
#pragma unroll
            for (int k = 0; k < ROCPROF_REPLAY_FINGERPRINT_BATCH; k++) {
                const unsigned long long i = base + k * threads;
                if (i < n) {
                    x[k] = __ldcs(&v[i]);
                }
            }
#pragma unroll
            for (int k = 0; k < ROCPROF_REPLAY_FINGERPRINT_BATCH; k++) {
                if (base + k * threads < n) {
                    sum += rocprof_replay_mix(x[k].x ^ key) +
                           rocprof_replay_mix(x[k].y ^ (key + GOLDEN));
                }
                key += step;
            }
        }
    } else if ((at & 7ull) == 0) {
        const unsigned long long* w = reinterpret_cast<const unsigned long long*>(p);
        unsigned long long key = (tid + 1) * GOLDEN;
        const unsigned long long step = threads * GOLDEN;
#pragma unroll 4
        for (unsigned long long i = tid; i < words; i += threads) {
            sum += rocprof_replay_mix(w[i] ^ key);
            key += step;
        }
    } else {
        for (unsigned long long i = tid; i < words; i += threads) {
            unsigned long long w = 0;
            for (int b = 7; b >= 0; b--) {
                w = (w << 8) | p[i * 8 + b];
            }
            sum += rocprof_replay_mix(w ^ ((i + 1) * GOLDEN));
        }
    }
    const unsigned long long rest = glen & 7ull;
    if (rest != 0 && tid == 0) {
        unsigned long long w = 0;
        for (unsigned long long b = rest; b > 0; b--) {
            w = (w << 8) | p[words * 8 + b - 1];
        }
        sum += rocprof_replay_mix(w ^ ((words + 1) * GOLDEN));
    }
    sum = rocprof_replay_warp_sum(sum);
    if (lane == 0) {
        warp_sums[warp] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        const unsigned int warps = (blockDim.x + 31) / 32;
        sum = rocprof_replay_warp_sum(lane < warps ? warp_sums[lane] : 0);
    }
    // warp_sums is reused by the next granule.
    __syncthreads();
    return glen * GOLDEN + sum;
}

extern "C" __global__ void __launch_bounds__(1024)
    rocprof_replay_fingerprint(const unsigned char* __restrict__ src,
                               unsigned long long len,
                               unsigned long long granule,
                               unsigned long long* __restrict__ out)
{
    __shared__ unsigned long long warp_sums[32];
    if (granule == 0) {
        return;
    }
    const unsigned long long granules = len / granule + (len % granule != 0 ? 1 : 0);
    for (unsigned long long g = blockIdx.x; g < granules; g += gridDim.x) {
        const unsigned long long start = g * granule;
        const unsigned long long glen = len - start < granule ? len - start : granule;
        const unsigned long long print =
            rocprof_replay_fingerprint_granule(src + start, glen, warp_sums);
        if (threadIdx.x == 0) {
            out[g] = print;
        }
    }
}

// The table kernels: one launch over many regions. A table of `n` entries, sorted by their
// `first` field, describes the regions of a batch; entry k covers ceil(len / granule) granules
// (from its own start, the last one may be shorter), numbered first, first + 1, ... in one
// global numbering of `total` granules (the entries' ranges back to back, from 0), which is
// also the index of each granule's result. A block takes global granules grid-stride, finds
// the entry of each by binary search over `first` (the largest first <= g; from the previous
// granule's entry on, as a block's granules only grow), and does what the per-region kernel
// does for that granule of that region: results bit for bit those of one per-region launch
// per entry. A granule past its entry's length (a malformed table) is skipped.

// rocprof_replay_compare_table(table, n, granule, total, flags): flags[g] as
// rocprof_replay_compare writes it for granule g - first of the entry's (live, snap, len).
struct rocprof_replay_compare_entry {
    unsigned long long live;
    unsigned long long snap;
    unsigned long long len;
    unsigned long long first;
};

// rocprof_replay_fingerprint_table(table, n, granule, total, out): out[g] as
// rocprof_replay_fingerprint writes it for granule g - first of the entry's (src, len).
struct rocprof_replay_fingerprint_entry {
    unsigned long long src;
    unsigned long long len;
    unsigned long long first;
};

// The index of the entry of global granule g: the largest k in [from, n) with
// table[k].first <= g (`from` when none is; n > from). Every thread of a block reads the same
// words: one broadcast load per step, from L1 after the first granules.
template <typename Entry>
__device__ __forceinline__ unsigned int rocprof_replay_find(const Entry* __restrict__ table,
                                                            unsigned int from,
                                                            unsigned int n,
                                                            unsigned long long g)
{
    unsigned int lo = from;
    unsigned int hi = n;
    while (hi - lo > 1) {
        const unsigned int mid = lo + (hi - lo) / 2;
        if (__ldg(&table[mid].first) <= g) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

extern "C" __global__ void rocprof_replay_compare_table(
    const rocprof_replay_compare_entry* __restrict__ table,
    unsigned int n,
    unsigned long long granule,
    unsigned long long total,
    unsigned char* __restrict__ flags)
{
    if (granule == 0 || n == 0) {
        return;
    }
    // The entry of the last granule (e_end: where the next entry starts); every value here
    // is the same in all threads of the block, so the early `continue` keeps the block's
    // __syncthreads_or together.
    unsigned int e = 0;
    unsigned long long e_first = 0, e_end = 0, e_len = 0;
    const unsigned char* live = nullptr;
    const unsigned char* snap = nullptr;
    bool vectors = false;
    for (unsigned long long g = blockIdx.x; g < total; g += gridDim.x) {
        if (g >= e_end || g < e_first) {
            e = rocprof_replay_find(table, g < e_first ? 0u : e, n, g);
            e_first = __ldg(&table[e].first);
            e_end = e + 1 < n ? __ldg(&table[e + 1].first) : total;
            e_len = __ldg(&table[e].len);
            live = reinterpret_cast<const unsigned char*>(__ldg(&table[e].live));
            snap = reinterpret_cast<const unsigned char*>(__ldg(&table[e].snap));
            vectors = ((reinterpret_cast<unsigned long long>(live) |
                        reinterpret_cast<unsigned long long>(snap) | granule) &
                       15ull) == 0;
        }
        if (g < e_first) {
            continue;
        }
        const unsigned long long local = g - e_first;
        if (local >= (e_len + granule - 1) / granule) {
            continue;
        }
        const unsigned long long start = local * granule;
        const unsigned long long glen = e_len - start < granule ? e_len - start : granule;
        const int differs = rocprof_replay_compare_granule(live + start, snap + start, glen, vectors);
        if (threadIdx.x == 0) {
            flags[g] = differs ? 1 : 0;
        }
    }
}

extern "C" __global__ void __launch_bounds__(1024) rocprof_replay_fingerprint_table(
    const rocprof_replay_fingerprint_entry* __restrict__ table,
    unsigned int n,
    unsigned long long granule,
    unsigned long long total,
    unsigned long long* __restrict__ out)
{
    __shared__ unsigned long long warp_sums[32];
    if (granule == 0 || n == 0) {
        return;
    }
    // As in rocprof_replay_compare_table: block-uniform, so `continue` keeps the block together.
    unsigned int e = 0;
    unsigned long long e_first = 0, e_end = 0, e_len = 0;
    const unsigned char* src = nullptr;
    for (unsigned long long g = blockIdx.x; g < total; g += gridDim.x) {
        if (g >= e_end || g < e_first) {
            e = rocprof_replay_find(table, g < e_first ? 0u : e, n, g);
            e_first = __ldg(&table[e].first);
            e_end = e + 1 < n ? __ldg(&table[e + 1].first) : total;
            e_len = __ldg(&table[e].len);
            src = reinterpret_cast<const unsigned char*>(__ldg(&table[e].src));
        }
        if (g < e_first) {
            continue;
        }
        const unsigned long long local = g - e_first;
        if (local >= e_len / granule + (e_len % granule != 0 ? 1 : 0)) {
            continue;
        }
        const unsigned long long start = local * granule;
        const unsigned long long glen = e_len - start < granule ? e_len - start : granule;
        const unsigned long long print =
            rocprof_replay_fingerprint_granule(src + start, glen, warp_sums);
        if (threadIdx.x == 0) {
            out[g] = print;
        }
    }
}

// rocprof_replay_copy_table(table, n, chunk, total): the small copies of one snapshot batch
// (capture or restore) in one launch instead of one cuMemcpyAsync each. Entry k copies `len`
// bytes from `src` to `dst` (the two never overlap) in chunks of `chunk` bytes from the
// entry's start, numbered first, first + 1, ... in one global numbering of `total` chunks, as
// the compare table numbers granules. A block copies one chunk at a time (grid-stride), in
// 16-byte vectors when dst, src and the chunk size are 16-byte aligned (then the chunk's tail
// byte by byte), else byte by byte. A chunk past its entry's length is skipped.
struct rocprof_replay_copy_entry {
    unsigned long long dst;
    unsigned long long src;
    unsigned long long len;
    unsigned long long first;
};

extern "C" __global__ void rocprof_replay_copy_table(
    const rocprof_replay_copy_entry* __restrict__ table,
    unsigned int n,
    unsigned long long chunk,
    unsigned long long total)
{
    if (chunk == 0 || n == 0) {
        return;
    }
    unsigned int e = 0;
    unsigned long long e_first = 0, e_end = 0, e_len = 0;
    unsigned char* dst = nullptr;
    const unsigned char* src = nullptr;
    bool vectors = false;
    for (unsigned long long g = blockIdx.x; g < total; g += gridDim.x) {
        if (g >= e_end || g < e_first) {
            e = rocprof_replay_find(table, g < e_first ? 0u : e, n, g);
            e_first = __ldg(&table[e].first);
            e_end = e + 1 < n ? __ldg(&table[e + 1].first) : total;
            e_len = __ldg(&table[e].len);
            dst = reinterpret_cast<unsigned char*>(__ldg(&table[e].dst));
            src = reinterpret_cast<const unsigned char*>(__ldg(&table[e].src));
            vectors = ((reinterpret_cast<unsigned long long>(dst) |
                        reinterpret_cast<unsigned long long>(src) | chunk) &
                       15ull) == 0;
        }
        if (g < e_first) {
            continue;
        }
        const unsigned long long local = g - e_first;
        if (local >= (e_len + chunk - 1) / chunk) {
            continue;
        }
        const unsigned long long start = local * chunk;
        const unsigned long long clen = e_len - start < chunk ? e_len - start : chunk;
        unsigned char* d = dst + start;
        const unsigned char* s = src + start;
        unsigned long long done = 0;
        if (vectors) {
            uint4* vd = reinterpret_cast<uint4*>(d);
            const uint4* vs = reinterpret_cast<const uint4*>(s);
            const unsigned long long v = clen / 16;
#pragma unroll 4
            for (unsigned long long i = threadIdx.x; i < v; i += blockDim.x) {
                vd[i] = vs[i];
            }
            done = v * 16;
        }
        for (unsigned long long i = done + threadIdx.x; i < clen; i += blockDim.x) {
            d[i] = s[i];
        }
    }
}
