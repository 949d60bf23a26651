// compare_kernel: the SDK's compare kernel (rocprof-replay/kernels/cuda/compare.ptx, path in
// argv[1]) loaded with cuModuleLoadData as the backend loads it (the driver JIT-compiles the
// sm_80 PTX for this GPU) and checked against a host compare: lengths around granule and vector
// boundaries, granules that are and are not multiples of 16, buffers off 16-byte alignment,
// single differing bytes at the first and last byte of granules and regions. Then its speed on
// 256 MiB and 1 GiB with 4 KiB granules (`compare_gbps`).
//
// The same module's fingerprint kernel (rocprof_replay_fingerprint) is checked against a host copy
// of the hash (footprint::fingerprint in rocprof-replay/src/engine/footprint.rs; the host copy is
// first checked against a value the Rust tests pin): lengths around word, vector and granule
// boundaries, granules that are and are not multiples of 8 and 16, sources off 16- and 8-byte
// alignment, more granules than blocks; then its speed on 256 MiB and 1 GiB with 64 KiB granules
// (`fingerprint_gbps`).
//
// The table kernels (rocprof_replay_compare_table, rocprof_replay_fingerprint_table: one launch
// over a table of regions, what the backend launches) are checked against the host over many
// small regions: 1 to 2730 entries (the backend's 64 KiB table holds 2730 fingerprint or 2048
// compare entries), lengths around granule boundaries, regions at every alignment, a few empty
// entries, grids of 4096 blocks and of a few (so that each block walks many entries); then their
// speed over 4096 regions of 1 MiB and of 64 KiB (`fingerprint_table_gbps`,
// `compare_table_gbps`), next to one per-region launch per region over the same regions
// (`fingerprint_regions_gbps`, `compare_regions_gbps`: what the backend did before). Prints
// `RESULT OK` when every flag and every fingerprint matched. With COMPARE_KERNEL_NO_SPEED set,
// the checks only (for compute-sanitizer). The driver is opened with dlopen:
// nothing to link.
#include <dlfcn.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;

#define FN(name, ...) static CUresult (*name)(__VA_ARGS__)
FN(cuInit, unsigned);
FN(cuDeviceGet, int*, int);
FN(cuDevicePrimaryCtxRetain, CUcontext*, int);
FN(cuCtxSetCurrent, CUcontext);
FN(cuCtxSynchronize, void);
FN(cuMemAlloc, CUdeviceptr*, size_t);
FN(cuMemFree, CUdeviceptr);
FN(cuMemcpyHtoD, CUdeviceptr, const void*, size_t);
FN(cuMemcpyDtoH, void*, CUdeviceptr, size_t);
FN(cuMemcpyDtoD, CUdeviceptr, CUdeviceptr, size_t);
FN(cuMemsetD8, CUdeviceptr, unsigned char, size_t);
FN(cuModuleLoadData, CUmodule*, const void*);
FN(cuModuleGetFunction, CUfunction*, CUmodule, const char*);
FN(cuLaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
   unsigned, CUstream, void**, void**);

static int failures = 0;

#define CK(x)                                                   \
  do {                                                          \
    CUresult r_ = (x);                                          \
    if (r_ != 0) {                                              \
      printf("CUresult %d at %s:%d: %s\n", r_, __FILE__, __LINE__, #x); \
      printf("RESULT FAIL\n");                                  \
      exit(1);                                                  \
    }                                                           \
  } while (0)

static CUfunction compare;
static CUfunction fingerprint;
static CUfunction compare_table;
static CUfunction fingerprint_table;
static CUfunction copy_table;

// The tables' entries, as compare.cu declares them.
struct CompareEntry {
  unsigned long long live, snap, len, first;
};
struct PrintEntry {
  unsigned long long src, len, first;
};

// What the backend does: one launch, 256 threads, at most 4096 blocks.
static void launch(CUdeviceptr live, CUdeviceptr snap, size_t len, size_t granule, CUdeviceptr flags) {
  unsigned long long a = live, b = snap, n = len, g = granule, f = flags;
  void* args[] = {&a, &b, &n, &g, &f};
  size_t granules = (len + granule - 1) / granule;
  unsigned blocks = (unsigned)(granules < 4096 ? granules : 4096);
  if (blocks == 0) blocks = 1;
  CK(cuLaunchKernel(compare, blocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
}

// One case: `len` bytes at offsets `la`/`lb` of two device buffers, the bytes at `diffs`
// changed in the live one; checks every flag.
static void check(CUdeviceptr live, CUdeviceptr snap, size_t la, size_t lb, size_t len, size_t granule,
                  const std::vector<size_t>& diffs, CUdeviceptr flags) {
  std::vector<unsigned char> a(len), b(len);
  for (size_t i = 0; i < len; i++) a[i] = b[i] = (unsigned char)(i * 131 + 7);
  for (size_t d : diffs) a[d] ^= 0x5a;
  if (len) {
    CK(cuMemcpyHtoD(live + la, a.data(), len));
    CK(cuMemcpyHtoD(snap + lb, b.data(), len));
  }
  size_t granules = (len + granule - 1) / granule;
  CK(cuMemsetD8(flags, 0xee, granules + 16));
  launch(live + la, snap + lb, len, granule, flags);
  CK(cuCtxSynchronize());
  std::vector<unsigned char> got(granules + 16);
  CK(cuMemcpyDtoH(got.data(), flags, got.size()));
  for (size_t g = 0; g < granules; g++) {
    size_t end = (g + 1) * granule < len ? (g + 1) * granule : len;
    bool want = memcmp(&a[g * granule], &b[g * granule], end - g * granule) != 0;
    if (got[g] != (want ? 1 : 0)) {
      if (failures < 20)
        printf("mismatch: len %zu granule %zu offsets %zu/%zu granule %zu: flag %u want %d\n", len, granule, la,
               lb, g, got[g], want);
      failures++;
    }
  }
  for (size_t g = granules; g < granules + 16; g++) {
    if (got[g] != 0xee) {
      if (failures < 20) printf("wrote past the flags: len %zu granule %zu flag %zu\n", len, granule, g);
      failures++;
    }
  }
}

// footprint::fingerprint: len * GOLDEN + sum of mix(w_i ^ (i + 1) * GOLDEN), wrapping, w_i the
// i-th little-endian 8-byte word, the last one zero-padded.
static const unsigned long long GOLDEN = 0x9e3779b97f4a7c15ull;

static unsigned long long mix(unsigned long long x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static unsigned long long host_fingerprint(const unsigned char* p, size_t len) {
  unsigned long long h = (unsigned long long)len * GOLDEN;
  for (size_t i = 0; i * 8 < len; i++) {
    unsigned long long w = 0;
    size_t n = len - i * 8 < 8 ? len - i * 8 : 8;
    for (size_t b = 0; b < n; b++) w |= (unsigned long long)p[i * 8 + b] << (8 * b);
    h += mix(w ^ ((unsigned long long)(i + 1) * GOLDEN));
  }
  return h;
}

// What the backend does: one launch, 256 threads, at most 4096 blocks.
static void launch_fingerprint(CUdeviceptr src, size_t len, size_t granule, CUdeviceptr out) {
  unsigned long long a = src, n = len, g = granule, o = out;
  void* args[] = {&a, &n, &g, &o};
  size_t granules = (len + granule - 1) / granule;
  unsigned blocks = (unsigned)(granules < 4096 ? granules : 4096);
  if (blocks == 0) blocks = 1;
  CK(cuLaunchKernel(fingerprint, blocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
}

// One case: `len` bytes at offset `off` of a device buffer (a pattern of `seed`); checks every
// fingerprint against the host's and that nothing past them was written.
static void check_fingerprint(CUdeviceptr buf, size_t off, size_t len, size_t granule, unsigned seed,
                              CUdeviceptr out) {
  std::vector<unsigned char> a(len);
  for (size_t i = 0; i < len; i++) a[i] = (unsigned char)((i * 131 + seed) ^ (i >> 11) ^ (i >> 19));
  if (len) CK(cuMemcpyHtoD(buf + off, a.data(), len));
  size_t granules = (len + granule - 1) / granule;
  std::vector<unsigned long long> got(granules + 4);
  CK(cuMemsetD8(out, 0xee, got.size() * 8));
  launch_fingerprint(buf + off, len, granule, out);
  CK(cuCtxSynchronize());
  CK(cuMemcpyDtoH(got.data(), out, got.size() * 8));
  for (size_t g = 0; g < granules; g++) {
    size_t end = (g + 1) * granule < len ? (g + 1) * granule : len;
    unsigned long long want = host_fingerprint(&a[g * granule], end - g * granule);
    if (got[g] != want) {
      if (failures < 20)
        printf("fingerprint mismatch: len %zu granule %zu offset %zu granule %zu: %016llx want %016llx\n", len,
               granule, off, g, got[g], want);
      failures++;
    }
  }
  for (size_t g = granules; g < granules + 4; g++) {
    if (got[g] != 0xeeeeeeeeeeeeeeeeull) {
      if (failures < 20) printf("wrote past the fingerprints: len %zu granule %zu index %zu\n", len, granule, g);
      failures++;
    }
  }
}

// What the backend does with a table: one launch, 256 threads, at most 4096 blocks (fewer
// when `max_blocks` says so).
static void launch_table(CUfunction f, CUdeviceptr table, unsigned n, size_t granule, size_t total, CUdeviceptr out,
                         unsigned max_blocks = 4096) {
  unsigned long long t = table, g = granule, tot = total, o = out;
  unsigned nn = n;
  void* args[] = {&t, &nn, &g, &tot, &o};
  unsigned blocks = (unsigned)(total < max_blocks ? total : max_blocks);
  if (blocks == 0) blocks = 1;
  CK(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
}

// A small deterministic generator (xorshift64*).
static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static size_t below(size_t n) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (size_t)((rng_state * 0x2545f4914f6cdd1dull) % (n ? n : 1));
}

// A region length for granules of `granule`: around granule boundaries, or up to six granules;
// a few empty; at most `max`.
static size_t region_len(size_t granule, size_t max) {
  size_t g = granule;
  size_t lens[] = {0, 1, 7, 8, 17, g > 1 ? g - 1 : 1, g, g + 1, 2 * g, 3 * g + 5, 1 + below(6 * g), 1 + below(6 * g)};
  size_t len = lens[below(sizeof lens / sizeof lens[0])];
  return len < max ? len : max;
}

// One fingerprint table case: `n` regions of the device buffer `buf` (its bytes `host`,
// `size` of them) at random offsets; every fingerprint against the host's, nothing written
// past them.
static void check_fingerprint_table(CUdeviceptr buf, const std::vector<unsigned char>& host, size_t n, size_t granule,
                                    unsigned max_blocks, CUdeviceptr table_dev, CUdeviceptr out, size_t out_cap) {
  const size_t size = host.size();
  std::vector<PrintEntry> table;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len = region_len(granule, size);
    size_t off = below(size - len + 1);
    size_t granules = (len + granule - 1) / granule;
    if (total + granules + 4 > out_cap) break;
    table.push_back({buf + off, len, total});
    total += granules;
  }
  if (table.empty()) return;
  CK(cuMemcpyHtoD(table_dev, table.data(), table.size() * sizeof(PrintEntry)));
  std::vector<unsigned long long> got(total + 4);
  CK(cuMemsetD8(out, 0xee, got.size() * 8));
  launch_table(fingerprint_table, table_dev, (unsigned)table.size(), granule, total, out, max_blocks);
  CK(cuCtxSynchronize());
  CK(cuMemcpyDtoH(got.data(), out, got.size() * 8));
  for (size_t k = 0; k < table.size(); k++) {
    const PrintEntry& e = table[k];
    const unsigned char* p = host.data() + (e.src - buf);
    for (size_t j = 0; j * granule < e.len; j++) {
      size_t glen = e.len - j * granule < granule ? e.len - j * granule : granule;
      unsigned long long want = host_fingerprint(p + j * granule, glen);
      if (got[e.first + j] != want) {
        if (failures < 20)
          printf("fingerprint_table mismatch: %zu entries granule %zu blocks %u: entry %zu (%llu bytes at offset %llu) "
                 "granule %zu: %016llx want %016llx\n",
                 table.size(), granule, max_blocks, k, e.len, e.src - buf, j, got[e.first + j], want);
        failures++;
      }
    }
  }
  for (size_t g = total; g < total + 4; g++) {
    if (got[g] != 0xeeeeeeeeeeeeeeeeull) {
      if (failures < 20) printf("fingerprint_table wrote past its results: %zu entries granule %zu\n", table.size(), granule);
      failures++;
    }
  }
}

// One compare table case: `n` regions of the live buffer (its bytes `live_host`) at random
// offsets, their snapshots packed in the snapshot buffer at random alignments, some bytes of
// some snapshots changed; every flag against a host memcmp, nothing written past them.
static void check_compare_table(CUdeviceptr live, const std::vector<unsigned char>& live_host, CUdeviceptr snap,
                                size_t snap_cap, size_t n, size_t granule, unsigned max_blocks, CUdeviceptr table_dev,
                                CUdeviceptr flags, size_t flags_cap) {
  const size_t size = live_host.size();
  std::vector<CompareEntry> table;
  std::vector<unsigned char> snap_host;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len = region_len(granule, size);
    size_t off = below(size - len + 1);
    static const size_t pads[] = {0, 0, 16, 8, 3, 1};
    size_t pad = pads[below(6)];
    size_t at = (snap_host.size() + 15) / 16 * 16 + pad;
    size_t granules = (len + granule - 1) / granule;
    if (at + len > snap_cap || total + granules + 16 > flags_cap) break;
    snap_host.resize(at + len);
    memcpy(snap_host.data() + at, live_host.data() + off, len);
    if (len) {
      switch (below(5)) {
        case 0: break;
        case 1: snap_host[at] ^= 0x5a; snap_host[at + len - 1] ^= 0x5a; break;
        case 2: {
          size_t g = below((len + granule - 1) / granule);
          size_t end = (g + 1) * granule < len ? (g + 1) * granule : len;
          snap_host[at + g * granule] ^= 0x5a;
          snap_host[at + end - 1] ^= 0x33;
          break;
        }
        default:
          for (int d = 0; d < 3; d++) snap_host[at + below(len)] ^= 0x5a;
      }
    }
    table.push_back({live + off, snap + at, len, total});
    total += granules;
  }
  if (table.empty()) return;
  if (!snap_host.empty()) CK(cuMemcpyHtoD(snap, snap_host.data(), snap_host.size()));
  CK(cuMemcpyHtoD(table_dev, table.data(), table.size() * sizeof(CompareEntry)));
  std::vector<unsigned char> got(total + 16);
  CK(cuMemsetD8(flags, 0xee, got.size()));
  launch_table(compare_table, table_dev, (unsigned)table.size(), granule, total, flags, max_blocks);
  CK(cuCtxSynchronize());
  CK(cuMemcpyDtoH(got.data(), flags, got.size()));
  for (size_t k = 0; k < table.size(); k++) {
    const CompareEntry& e = table[k];
    const unsigned char* a = live_host.data() + (e.live - live);
    const unsigned char* b = snap_host.data() + (e.snap - snap);
    for (size_t j = 0; j * granule < e.len; j++) {
      size_t glen = e.len - j * granule < granule ? e.len - j * granule : granule;
      bool want = memcmp(a + j * granule, b + j * granule, glen) != 0;
      if (got[e.first + j] != (want ? 1 : 0)) {
        if (failures < 20)
          printf("compare_table mismatch: %zu entries granule %zu blocks %u: entry %zu (%llu bytes) granule %zu: "
                 "flag %u want %d\n",
                 table.size(), granule, max_blocks, k, e.len, j, got[e.first + j], want);
        failures++;
      }
    }
  }
  for (size_t g = total; g < total + 16; g++) {
    if (got[g] != 0xee) {
      if (failures < 20) printf("compare_table wrote past its flags: %zu entries granule %zu\n", table.size(), granule);
      failures++;
    }
  }
}

static double since_ms(std::chrono::steady_clock::time_point s) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
}

int main(int argc, char** argv) {
  if (argc < 2) {
    printf("usage: compare_kernel compare.ptx\nRESULT FAIL\n");
    return 1;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("no libcuda.so.1: %s\nRESULT FAIL\n", dlerror());
    return 1;
  }
#define SYM(var, name)                                              \
  var = (decltype(var))dlsym(lib, name);                            \
  if (!var) {                                                       \
    printf("libcuda has no %s\nRESULT FAIL\n", name);               \
    return 1;                                                       \
  }
  SYM(cuInit, "cuInit");
  SYM(cuDeviceGet, "cuDeviceGet");
  SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
  SYM(cuCtxSynchronize, "cuCtxSynchronize");
  SYM(cuMemAlloc, "cuMemAlloc_v2");
  SYM(cuMemFree, "cuMemFree_v2");
  SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  SYM(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  SYM(cuMemsetD8, "cuMemsetD8_v2");
  SYM(cuModuleLoadData, "cuModuleLoadData");
  SYM(cuModuleGetFunction, "cuModuleGetFunction");
  SYM(cuLaunchKernel, "cuLaunchKernel");
  FILE* f = fopen(argv[1], "rb");
  if (!f) {
    printf("cannot open %s\nRESULT FAIL\n", argv[1]);
    return 1;
  }
  std::string ptx;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) ptx.append(buf, n);
  fclose(f);
  int dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(cuCtxSetCurrent(ctx));
  CUmodule module;
  auto t0 = std::chrono::steady_clock::now();
  CK(cuModuleLoadData(&module, ptx.c_str()));
  auto t1 = std::chrono::steady_clock::now();
  CK(cuModuleGetFunction(&compare, module, "rocprof_replay_compare"));
  CK(cuModuleGetFunction(&fingerprint, module, "rocprof_replay_fingerprint"));
  CK(cuModuleGetFunction(&compare_table, module, "rocprof_replay_compare_table"));
  CK(cuModuleGetFunction(&fingerprint_table, module, "rocprof_replay_fingerprint_table"));
  CK(cuModuleGetFunction(&copy_table, module, "rocprof_replay_copy_table"));
  printf("module_load_ms %.2f\n", std::chrono::duration<double, std::milli>(t1 - t0).count());

  const size_t cap = 1 << 20;
  CUdeviceptr live, snap, flags;
  CK(cuMemAlloc(&live, cap + 64));
  CK(cuMemAlloc(&snap, cap + 64));
  CK(cuMemAlloc(&flags, (cap + 64) + 16));
  size_t cases = 0;
  const size_t granules[] = {4096, 4095, 256, 16, 100, 1, 65536};
  const size_t lens[] = {0, 1, 15, 16, 17, 255, 4095, 4096, 4097, 8191, 12288, 40001, 100000, 1 << 20};
  const size_t offsets[][2] = {{0, 0}, {16, 32}, {1, 0}, {0, 3}, {8, 8}, {5, 5}};
  for (size_t granule : granules) {
    for (size_t len : lens) {
      for (auto& off : offsets) {
        std::vector<std::vector<size_t>> patterns = {{}};
        if (len) {
          std::vector<size_t> edges;
          for (size_t g = 0; g * granule < len && edges.size() < 64; g += 1 + (len / granule) / 8) {
            edges.push_back(g * granule);
            size_t last = (g + 1) * granule - 1 < len - 1 ? (g + 1) * granule - 1 : len - 1;
            edges.push_back(last);
          }
          patterns.push_back({0});
          patterns.push_back({len - 1});
          patterns.push_back({len / 2});
          patterns.push_back(edges);
          std::vector<size_t> every;
          for (size_t i = 0; i < len; i += 1 + len / 97) every.push_back(i);
          patterns.push_back(every);
        }
        for (auto& p : patterns) {
          check(live, snap, off[0], off[1], len, granule, p, flags);
          cases++;
        }
      }
    }
  }
  printf("cases %zu mismatches %d\n", cases, failures);
  CK(cuMemFree(live));
  CK(cuMemFree(snap));
  CK(cuMemFree(flags));

  // COMPARE_KERNEL_NO_SPEED set: the checks only (under compute-sanitizer, say).
  const bool speed = getenv("COMPARE_KERNEL_NO_SPEED") == nullptr;

  // Speed: identical buffers (the usual case: most granules unwritten), 4 KiB granules.
  for (size_t mib : {256, 1024}) {
    if (!speed) break;
    size_t bytes = mib << 20;
    CK(cuMemAlloc(&live, bytes));
    CK(cuMemAlloc(&snap, bytes));
    CK(cuMemAlloc(&flags, bytes / 4096));
    CK(cuMemsetD8(live, 7, bytes));
    CK(cuMemcpyDtoD(snap, live, bytes));
    CK(cuCtxSynchronize());
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
      auto s = std::chrono::steady_clock::now();
      launch(live, snap, bytes, 4096, flags);
      CK(cuCtxSynchronize());
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
      if (ms < best) best = ms;
    }
    std::vector<unsigned char> got(bytes / 4096);
    CK(cuMemcpyDtoH(got.data(), flags, got.size()));
    size_t set = 0;
    for (unsigned char c : got) set += c != 0;
    if (set) {
      printf("identical %zu MiB: %zu granules flagged\n", mib, set);
      failures++;
    }
    // Both buffers are read: 2 * bytes per compare.
    printf("compare_gbps %zu MiB: %.1f ms, %.0f GB/s read\n", mib, best, 2.0 * bytes / best / 1e6);
    CK(cuMemFree(live));
    CK(cuMemFree(snap));
    CK(cuMemFree(flags));
  }

  // Large copies: the copy kernel (one table entry) against cuMemcpyDtoD, 1 GiB, best of 5 —
  // whether dense restores should go through the kernel too (COPY_KERNEL_MAX).
  for (size_t mib : {64, 1024}) {
    if (!speed) break;
    size_t bytes = mib << 20;
    CUdeviceptr src, dst, table;
    CK(cuMemAlloc(&src, bytes));
    CK(cuMemAlloc(&dst, bytes));
    CK(cuMemAlloc(&table, 64));
    CK(cuMemsetD8(src, 3, bytes));
    CK(cuCtxSynchronize());
    double memcpy_best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
      auto s = std::chrono::steady_clock::now();
      CK(cuMemcpyDtoD(dst, src, bytes));
      CK(cuCtxSynchronize());
      double ms = since_ms(s);
      if (ms < memcpy_best) memcpy_best = ms;
    }
    for (unsigned long long chunk : {64ull << 10, 256ull << 10, 1ull << 20}) {
      for (unsigned blocks : {4096u, 132u * 8u, 132u * 16u}) {
        unsigned long long entry[4] = {(unsigned long long)dst, (unsigned long long)src,
                                       (unsigned long long)bytes, 0};
        CK(cuMemcpyHtoD(table, entry, sizeof entry));
        unsigned long long total = (bytes + chunk - 1) / chunk;
        unsigned n = 1;
        void* args[] = {&table, &n, &chunk, &total};
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
          CK(cuMemsetD8(dst, 0, bytes));
          CK(cuCtxSynchronize());
          auto s = std::chrono::steady_clock::now();
          unsigned grid = total < blocks ? (unsigned)total : blocks;
          CK(cuLaunchKernel(copy_table, grid, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
          CK(cuCtxSynchronize());
          double ms = since_ms(s);
          if (ms < best) best = ms;
        }
        std::vector<unsigned char> probe(4096);
        CK(cuMemcpyDtoH(probe.data(), dst + bytes - probe.size(), probe.size()));
        for (unsigned char c : probe) {
          if (c != 3) {
            printf("copy_table %zu MiB: the copy's last bytes are wrong\n", mib);
            failures++;
            break;
          }
        }
        printf("copy_gbps %zu MiB chunk %llu KiB blocks %u: kernel %.3f ms, cuMemcpyDtoD %.3f ms "
               "(kernel/memcpy %.3f)\n",
               mib, chunk >> 10, blocks, best, memcpy_best, best / memcpy_best);
      }
    }
    CK(cuMemFree(src));
    CK(cuMemFree(dst));
    CK(cuMemFree(table));
  }

  // Fingerprints. The host copy of the hash first: the value the Rust tests pin
  // (the_fingerprint_of_a_known_pattern_is_the_one_the_gpu_check_expects).
  {
    std::vector<unsigned char> known(4099);
    for (size_t i = 0; i < known.size(); i++) known[i] = (unsigned char)(i * 7 + 3);
    unsigned long long h = host_fingerprint(known.data(), known.size());
    if (h != 0xdb8a90bebb94b379ull) {
      printf("the host fingerprint is not the SDK's: %016llx\n", h);
      failures++;
    }
  }
  const size_t fp_cap = 3 << 20;
  CUdeviceptr src, out;
  CK(cuMemAlloc(&src, fp_cap + 512));
  CK(cuMemAlloc(&out, ((fp_cap + 512) + 4) * 8));
  size_t fp_cases = 0;
  const int fp_before = failures;
  const size_t fp_granules[] = {65536, 4096, 4095, 100000, 24, 16, 8, 7, 1};
  const size_t fp_lens[] = {0,    1,     7,     8,     9,      15,     16,      17,     255, 4095,
                            4096, 4097,  65535, 65536, 65537,  65544,  200003,  1 << 20, fp_cap};
  const size_t fp_offsets[] = {0, 256, 16, 8, 3, 5};
  for (size_t granule : fp_granules) {
    for (size_t len : fp_lens) {
      // Granules of a few bytes over megabytes: one offset of each kind is enough.
      if (granule < 4095 && len > (1 << 20)) continue;
      for (size_t off : fp_offsets) {
        check_fingerprint(src, off, len, granule, (unsigned)(fp_cases * 29 + 11), out);
        fp_cases++;
      }
    }
  }
  printf("fingerprint_cases %zu mismatches %d\n", fp_cases, failures - fp_before);
  CK(cuMemFree(src));
  CK(cuMemFree(out));

  // Speed: 64 KiB granules (FINGERPRINT_GRANULE), every granule the same bytes.
  for (size_t mib : {256, 1024}) {
    if (!speed) break;
    size_t bytes = mib << 20;
    const size_t granule = 65536;
    size_t granules = bytes / granule;
    CK(cuMemAlloc(&src, bytes));
    CK(cuMemAlloc(&out, granules * 8));
    CK(cuMemsetD8(src, 7, bytes));
    CK(cuCtxSynchronize());
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
      auto s = std::chrono::steady_clock::now();
      launch_fingerprint(src, bytes, granule, out);
      CK(cuCtxSynchronize());
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
      if (ms < best) best = ms;
    }
    std::vector<unsigned long long> got(granules);
    CK(cuMemcpyDtoH(got.data(), out, granules * 8));
    std::vector<unsigned char> sevens(granule, 7);
    unsigned long long want = host_fingerprint(sevens.data(), granule);
    size_t wrong = 0;
    for (unsigned long long v : got) wrong += v != want;
    if (wrong) {
      printf("fingerprints of %zu MiB of 7s: %zu of %zu wrong\n", mib, wrong, granules);
      failures++;
    }
    // The buffer is read once.
    printf("fingerprint_gbps %zu MiB: %.3f ms, %.0f GB/s read\n", mib, best, 1.0 * bytes / best / 1e6);
    CK(cuMemFree(src));
    CK(cuMemFree(out));
  }
  // The table kernels over many small regions, against the host.
  {
    const int before = failures;
    const size_t pool = 16 << 20, snap_cap = 64 << 20, out_cap = 1 << 20;
    std::vector<unsigned char> host(pool);
    for (size_t i = 0; i < pool; i++) host[i] = (unsigned char)((i * 131 + 17) ^ (i >> 11) ^ (i >> 19));
    CUdeviceptr buf, snapbuf, table_dev, results;
    CK(cuMemAlloc(&buf, pool));
    CK(cuMemAlloc(&snapbuf, snap_cap));
    CK(cuMemAlloc(&table_dev, 4096 * sizeof(CompareEntry)));
    CK(cuMemAlloc(&results, out_cap * 8));
    CK(cuMemcpyHtoD(buf, host.data(), pool));
    size_t table_cases = 0;
    const size_t t_granules[] = {65536, 4096, 4095, 1000, 100, 24, 16, 7, 1};
    const size_t counts[] = {1, 2, 3, 17, 100, 1000, 2048, 2730};
    const unsigned grids[] = {4096, 37, 3};
    for (size_t granule : t_granules) {
      for (size_t n : counts) {
        for (unsigned blocks : grids) {
          check_fingerprint_table(buf, host, n, granule, blocks, table_dev, results, out_cap);
          if (n <= 2048) {
            check_compare_table(buf, host, snapbuf, snap_cap, n, granule, blocks, table_dev, results, out_cap * 8);
          }
          table_cases++;
        }
      }
    }
    printf("table_cases %zu mismatches %d\n", table_cases, failures - before);
    CK(cuMemFree(buf));
    CK(cuMemFree(snapbuf));
    CK(cuMemFree(table_dev));
    CK(cuMemFree(results));
  }

  // Table speed: 4096 regions (1 MiB or 64 KiB each, 4 KiB apart) in one launch of a table
  // kernel, against one launch of the per-region kernel per region (what the backend did
  // before), both timed to the end of the last kernel; fingerprints in 64 KiB granules,
  // compares in 4 KiB ones, every region the same bytes (7s) in live memory and snapshot.
  for (size_t region : {(size_t)1 << 20, (size_t)64 << 10}) {
    if (!speed) break;
    const size_t count = 4096, stride = region + 4096, bytes = count * stride;
    const size_t fp_granule = 65536, cmp_granule = 4096;
    const size_t prints = count * (region / fp_granule), flag_count = count * (region / cmp_granule);
    CUdeviceptr live_buf, snap_buf, table_dev, out_dev;
    CK(cuMemAlloc(&live_buf, bytes));
    CK(cuMemAlloc(&snap_buf, bytes));
    CK(cuMemAlloc(&table_dev, count * sizeof(CompareEntry)));
    CK(cuMemAlloc(&out_dev, (prints > flag_count ? prints : flag_count) * 8));
    CK(cuMemsetD8(live_buf, 7, bytes));
    CK(cuMemsetD8(snap_buf, 7, bytes));
    const char* unit = region == (1 << 20) ? "1 MiB" : "64 KiB";
    // Fingerprints.
    std::vector<PrintEntry> ptable(count);
    for (size_t i = 0; i < count; i++) ptable[i] = {live_buf + i * stride, region, i * (region / fp_granule)};
    CK(cuMemcpyHtoD(table_dev, ptable.data(), count * sizeof(PrintEntry)));
    CK(cuCtxSynchronize());
    double table_ms = 1e30, regions_ms = 1e30;
    for (int rep = 0; rep < 5; rep++) {
      auto s = std::chrono::steady_clock::now();
      launch_table(fingerprint_table, table_dev, (unsigned)count, fp_granule, prints, out_dev);
      CK(cuCtxSynchronize());
      double ms = since_ms(s);
      if (ms < table_ms) table_ms = ms;
    }
    {
      std::vector<unsigned long long> got(prints);
      CK(cuMemcpyDtoH(got.data(), out_dev, prints * 8));
      std::vector<unsigned char> sevens(fp_granule, 7);
      unsigned long long want = host_fingerprint(sevens.data(), fp_granule);
      size_t wrong = 0;
      for (unsigned long long v : got) wrong += v != want;
      if (wrong) {
        printf("fingerprint_table of %zu regions of %s: %zu of %zu wrong\n", count, unit, wrong, prints);
        failures++;
      }
    }
    for (int rep = 0; rep < 5; rep++) {
      auto s = std::chrono::steady_clock::now();
      for (size_t i = 0; i < count; i++) {
        launch_fingerprint(live_buf + i * stride, region, fp_granule, out_dev + ptable[i].first * 8);
      }
      CK(cuCtxSynchronize());
      double ms = since_ms(s);
      if (ms < regions_ms) regions_ms = ms;
    }
    const double read = (double)count * region;
    printf("fingerprint_table_gbps %zu regions of %s: %.3f ms, %.0f GB/s\n", count, unit, table_ms,
           read / table_ms / 1e6);
    printf("fingerprint_regions_gbps %zu regions of %s: %.3f ms, %.0f GB/s (one launch per region)\n", count, unit,
           regions_ms, read / regions_ms / 1e6);
    // Compares (both buffers read).
    std::vector<CompareEntry> ctable(count);
    for (size_t i = 0; i < count; i++)
      ctable[i] = {live_buf + i * stride, snap_buf + i * stride, region, i * (region / cmp_granule)};
    CK(cuMemcpyHtoD(table_dev, ctable.data(), count * sizeof(CompareEntry)));
    CK(cuMemsetD8(out_dev, 0xee, flag_count));
    CK(cuCtxSynchronize());
    table_ms = 1e30;
    regions_ms = 1e30;
    for (int rep = 0; rep < 5; rep++) {
      auto s = std::chrono::steady_clock::now();
      launch_table(compare_table, table_dev, (unsigned)count, cmp_granule, flag_count, out_dev);
      CK(cuCtxSynchronize());
      double ms = since_ms(s);
      if (ms < table_ms) table_ms = ms;
    }
    {
      std::vector<unsigned char> got(flag_count);
      CK(cuMemcpyDtoH(got.data(), out_dev, flag_count));
      size_t wrong = 0;
      for (unsigned char c : got) wrong += c != 0;
      if (wrong) {
        printf("compare_table of %zu identical regions of %s: %zu of %zu flags not 0\n", count, unit, wrong,
               flag_count);
        failures++;
      }
    }
    for (int rep = 0; rep < 5; rep++) {
      auto s = std::chrono::steady_clock::now();
      for (size_t i = 0; i < count; i++) {
        launch(live_buf + i * stride, snap_buf + i * stride, region, cmp_granule, out_dev + ctable[i].first);
      }
      CK(cuCtxSynchronize());
      double ms = since_ms(s);
      if (ms < regions_ms) regions_ms = ms;
    }
    printf("compare_table_gbps %zu regions of %s: %.3f ms, %.0f GB/s\n", count, unit, table_ms,
           2 * read / table_ms / 1e6);
    printf("compare_regions_gbps %zu regions of %s: %.3f ms, %.0f GB/s (one launch per region)\n", count, unit,
           regions_ms, 2 * read / regions_ms / 1e6);
    CK(cuMemFree(live_buf));
    CK(cuMemFree(snap_buf));
    CK(cuMemFree(table_dev));
    CK(cuMemFree(out_dev));
  }
  printf("RESULT %s\n", failures == 0 ? "OK" : "FAIL");
  return failures == 0 ? 0 : 1;
}
