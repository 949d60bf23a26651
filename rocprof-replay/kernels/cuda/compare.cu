// The CUDA backend's device kernels: the compare kernel (which granules of a live region differ
// from its snapshot) and the fingerprint kernel (one hash per granule of watched memory).
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
// 16-byte aligned, then the granule's tail byte by byte (bytes throughout otherwise); each thread
// stops at its first difference, and the block's verdict is one __syncthreads_or.

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
        const unsigned char* a = live + start;
        const unsigned char* b = snap + start;
        int differs = 0;
        unsigned long long done = 0;
        if (vectors) {
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
        differs = __syncthreads_or(differs);
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
    const unsigned long long GOLDEN = ROCPROF_REPLAY_GOLDEN;
    const unsigned long long granules = len / granule + (len % granule != 0 ? 1 : 0);
    const unsigned long long tid = threadIdx.x;
    const unsigned long long threads = blockDim.x;
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int warp = threadIdx.x >> 5;
    for (unsigned long long g = blockIdx.x; g < granules; g += gridDim.x) {
        const unsigned long long start = g * granule;
        const unsigned long long glen = len - start < granule ? len - start : granule;
        const unsigned char* p = src + start;
        const unsigned long long words = glen / 8;
        const unsigned long long at = reinterpret_cast<unsigned long long>(p);
        unsigned long long sum = 0;
        if (((at | glen) & 15ull) == 0) {
            // Words 2i and 2i + 1 in vector i; the keys (i + 1) * GOLDEN advance by addition.
            const ulonglong2* v = reinterpret_cast<const ulonglong2*>(p);
            const unsigned long long n = glen / 16;
            unsigned long long key = (2 * tid + 1) * GOLDEN;
            const unsigned long long step = 2 * threads * GOLDEN;
#pragma unroll 4
            for (unsigned long long i = tid; i < n; i += threads) {
                const ulonglong2 x = v[i];
                sum += rocprof_replay_mix(x.x ^ key) + rocprof_replay_mix(x.y ^ (key + GOLDEN));
                key += step;
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
            if (lane == 0) {
                out[g] = glen * GOLDEN + sum;
            }
        }
        // warp_sums is reused by the next granule.
        __syncthreads();
    }
}
