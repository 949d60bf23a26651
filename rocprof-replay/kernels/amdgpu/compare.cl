// The HSA backend's device kernels, for AMD GPUs: the compare kernel (which granules of live
// regions differ from their snapshots) and the fingerprint kernel (one hash per granule of
// watched memory), in the table form of kernels/cuda/compare.cu: one dispatch over a table of
// regions. Same tables, same results bit for bit (the CUDA file describes them in full):
//
//   rocprof_replay_compare_table(table, n, granule, total, flags)
//   rocprof_replay_fingerprint_table(table, n, granule, total, out)
//
// `table` holds `n` entries sorted by `first` (the first global granule of the entry; entry k
// covers ceil(len / granule) granules from its own start, the last one may be shorter, numbered
// first, first + 1, ...; `total` granules in all). flags[g] = 1 when any byte of granule g of
// (live, snap) differs, else 0; out[g] = the fingerprint of granule g of src, the host's
// footprint::fingerprint (rocprof-replay/src/engine/footprint.rs):
//
//   glen * GOLDEN + sum over words i of mix(w_i ^ (i + 1) * GOLDEN)      (wrapping 64-bit)
//
// w_i the i-th little-endian 8-byte word of the granule, the last one zero-padded; mix is
// SplitMix64's finaliser. A granule past its entry's length (a malformed table) is skipped.
//
// OpenCL C without any device library (-nogpulib): the work-item and work-group ids come from
// clang's amdgcn builtins, the work-group size and the grid from the dispatch packet
// (__builtin_amdgcn_dispatch_ptr), barriers are s_barrier between work-group fences, and the
// block-wide OR and sum go through LDS, so the code is the same for wave64 (gfx90a, gfx942)
// and wave32 (gfx1100). At most 256 work-items a group (OpenCL's default flat work-group
// limit; the backend dispatches 256, in one dimension).
//
// Built into one code object per target by scripts/build-amdgpu-kernels.sh (clang-19 +
// ld.lld-19, code object v4); the code objects next to this file (compare-<gfx>.hsaco) are what
// the SDK embeds (rocprof-replay/src/hsa/compare.rs) and loads through the HSA loader. Edit
// this file, run the script, commit all of them.

typedef unsigned long u64;
typedef unsigned int u32;
typedef unsigned char u8;

#define GOLDEN 0x9e3779b97f4a7c15ul
#define MAX_THREADS 256

struct rocprof_replay_compare_entry {
    u64 live;
    u64 snap;
    u64 len;
    u64 first;
};

struct rocprof_replay_fingerprint_entry {
    u64 src;
    u64 len;
    u64 first;
};

// hsa_kernel_dispatch_packet_t, the fields read here.
struct dispatch_packet {
    unsigned short header;
    unsigned short setup;
    unsigned short workgroup_size_x;
    unsigned short workgroup_size_y;
    unsigned short workgroup_size_z;
    unsigned short reserved0;
    u32 grid_size_x;
};

static inline u32 thread_id(void) { return __builtin_amdgcn_workitem_id_x(); }
static inline u32 group_id(void) { return __builtin_amdgcn_workgroup_id_x(); }

static inline u32 group_size(void)
{
    const __constant struct dispatch_packet* p =
        (const __constant struct dispatch_packet*)__builtin_amdgcn_dispatch_ptr();
    return p->workgroup_size_x;
}

static inline u32 groups(void)
{
    const __constant struct dispatch_packet* p =
        (const __constant struct dispatch_packet*)__builtin_amdgcn_dispatch_ptr();
    const u32 size = p->workgroup_size_x;
    return (p->grid_size_x + size - 1) / size;
}

// Every work-item of the group waits here; its LDS writes before are seen by all after.
static inline void sync_group(void)
{
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// Whether `differs` is set in any work-item of the group (every one must call it; `any` is
// one word of LDS, free again when it returns).
static inline int group_or(int differs, volatile __local int* any)
{
    if (thread_id() == 0) {
        *any = 0;
    }
    sync_group();
    if (differs) {
        *any = 1;
    }
    sync_group();
    const int r = *any;
    sync_group();
    return r;
}

// One granule of the compare, for the whole group: whether any of the `glen` bytes at `a` and
// `b` differ (`vectors`: both start 16-byte aligned).
static inline int compare_granule(const __global u8* a, const __global u8* b, u64 glen,
                                  int vectors, volatile __local int* any)
{
    const u64 tid = thread_id();
    const u64 threads = group_size();
    int differs = 0;
    u64 done = 0;
    if (vectors) {
        const __global uint4* va = (const __global uint4*)a;
        const __global uint4* vb = (const __global uint4*)b;
        const u64 n = glen / 16;
        for (u64 i = tid; i < n && !differs; i += threads) {
            const uint4 x = va[i];
            const uint4 y = vb[i];
            differs = (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
        }
        done = n * 16;
    }
    for (u64 i = done + tid; i < glen && !differs; i += threads) {
        differs = a[i] != b[i];
    }
    return group_or(differs, any);
}

static inline u64 mix(u64 x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ul;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebul;
    return x ^ (x >> 31);
}

// The sum of every work-item's `v`, valid in work-item 0 (every one must call it; `sums` is
// MAX_THREADS words of LDS, free again when it returns).
static inline u64 group_sum(u64 v, __local u64* sums)
{
    const u32 tid = thread_id();
    const u32 threads = group_size();
    sums[tid] = v;
    sync_group();
    for (u32 stride = 1; stride < threads; stride <<= 1) {
        if ((tid & (2 * stride - 1)) == 0 && tid + stride < threads) {
            sums[tid] += sums[tid + stride];
        }
        sync_group();
    }
    const u64 r = sums[0];
    sync_group();
    return r;
}

// One granule of the fingerprint, for the whole group: the fingerprint of the `glen` bytes at
// `p`, valid in work-item 0.
static inline u64 fingerprint_granule(const __global u8* p, u64 glen, __local u64* sums)
{
    const u64 tid = thread_id();
    const u64 threads = group_size();
    const u64 words = glen / 8;
    const u64 at = (u64)p;
    u64 sum = 0;
    if (((at | glen) & 15ul) == 0) {
        // Words 2i and 2i + 1 in vector i; the keys (i + 1) * GOLDEN advance by addition.
        const __global ulong2* v = (const __global ulong2*)p;
        const u64 n = glen / 16;
        u64 key = (2 * tid + 1) * GOLDEN;
        const u64 step = 2 * threads * GOLDEN;
        for (u64 i = tid; i < n; i += threads) {
            const ulong2 x = v[i];
            sum += mix(x.x ^ key) + mix(x.y ^ (key + GOLDEN));
            key += step;
        }
    } else if ((at & 7ul) == 0) {
        const __global u64* w = (const __global u64*)p;
        u64 key = (tid + 1) * GOLDEN;
        const u64 step = threads * GOLDEN;
        for (u64 i = tid; i < words; i += threads) {
            sum += mix(w[i] ^ key);
            key += step;
        }
    } else {
        for (u64 i = tid; i < words; i += threads) {
            u64 w = 0;
            for (int b = 7; b >= 0; b--) {
                w = (w << 8) | p[i * 8 + b];
            }
            sum += mix(w ^ ((i + 1) * GOLDEN));
        }
    }
    const u64 rest = glen & 7ul;
    if (rest != 0 && tid == 0) {
        u64 w = 0;
        for (u64 b = rest; b > 0; b--) {
            w = (w << 8) | p[words * 8 + b - 1];
        }
        sum += mix(w ^ ((words + 1) * GOLDEN));
    }
    return glen * GOLDEN + group_sum(sum, sums);
}

// The index of the entry of global granule g: the largest k in [from, n) with
// table[k].first <= g (`from` when none is; n > from).
#define FIND(table, from, n, g, out)                                                           \
    do {                                                                                       \
        u32 lo_ = (from);                                                                      \
        u32 hi_ = (n);                                                                         \
        while (hi_ - lo_ > 1) {                                                                \
            const u32 mid_ = lo_ + (hi_ - lo_) / 2;                                            \
            if ((table)[mid_].first <= (g)) {                                                  \
                lo_ = mid_;                                                                    \
            } else {                                                                           \
                hi_ = mid_;                                                                    \
            }                                                                                  \
        }                                                                                      \
        (out) = lo_;                                                                           \
    } while (0)

__kernel void rocprof_replay_compare_table(
    const __global struct rocprof_replay_compare_entry* restrict table, u32 n, u64 granule,
    u64 total, __global u8* restrict flags)
{
    __local int any;
    if (granule == 0 || n == 0) {
        return;
    }
    // Every value here is the same in all work-items of the group, so the early `continue`
    // keeps the group's barriers together.
    u32 e = 0;
    u64 e_first = 0, e_end = 0, e_len = 0;
    const __global u8* live = 0;
    const __global u8* snap = 0;
    int vectors = 0;
    const u64 stride = groups();
    for (u64 g = group_id(); g < total; g += stride) {
        if (g >= e_end || g < e_first) {
            FIND(table, g < e_first ? 0u : e, n, g, e);
            e_first = table[e].first;
            e_end = e + 1 < n ? table[e + 1].first : total;
            e_len = table[e].len;
            live = (const __global u8*)table[e].live;
            snap = (const __global u8*)table[e].snap;
            vectors = ((table[e].live | table[e].snap | granule) & 15ul) == 0;
        }
        if (g < e_first) {
            continue;
        }
        const u64 local_g = g - e_first;
        if (local_g >= (e_len + granule - 1) / granule) {
            continue;
        }
        const u64 start = local_g * granule;
        const u64 glen = e_len - start < granule ? e_len - start : granule;
        const int differs = compare_granule(live + start, snap + start, glen, vectors, &any);
        if (thread_id() == 0) {
            flags[g] = differs ? 1 : 0;
        }
    }
}

__kernel void rocprof_replay_fingerprint_table(
    const __global struct rocprof_replay_fingerprint_entry* restrict table, u32 n, u64 granule,
    u64 total, __global u64* restrict out)
{
    __local u64 sums[MAX_THREADS];
    if (granule == 0 || n == 0) {
        return;
    }
    // As in rocprof_replay_compare_table: group-uniform, so `continue` keeps the group together.
    u32 e = 0;
    u64 e_first = 0, e_end = 0, e_len = 0;
    const __global u8* src = 0;
    const u64 stride = groups();
    for (u64 g = group_id(); g < total; g += stride) {
        if (g >= e_end || g < e_first) {
            FIND(table, g < e_first ? 0u : e, n, g, e);
            e_first = table[e].first;
            e_end = e + 1 < n ? table[e + 1].first : total;
            e_len = table[e].len;
            src = (const __global u8*)table[e].src;
        }
        if (g < e_first) {
            continue;
        }
        const u64 local_g = g - e_first;
        if (local_g >= e_len / granule + (e_len % granule != 0 ? 1 : 0)) {
            continue;
        }
        const u64 start = local_g * granule;
        const u64 glen = e_len - start < granule ? e_len - start : granule;
        const u64 print = fingerprint_granule(src + start, glen, sums);
        if (thread_id() == 0) {
            out[g] = print;
        }
    }
}
