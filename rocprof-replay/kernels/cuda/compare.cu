// The CUDA backend's compare kernel: which granules of a live region differ from its snapshot.
//
// Built to PTX for sm_80 (so the driver JITs it for sm_80 and newer) by
// scripts/build-cuda-kernels.sh; the PTX next to this file (compare.ptx) is what the SDK embeds
// (rocprof-replay/src/cuda/compare.rs) and loads per context with cuModuleLoadData. Edit this
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
