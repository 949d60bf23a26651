// contexts_unload: two contexts on one device, and modules loaded and unloaded around replay
// windows (issue 13 item 6). Every kernel adds to memory it is given, so a launch the tool
// repeats without restoring shows as a value above the expected count, and a restore that
// undoes the host's (or another module's) write shows as a stale value.
//
//   two_contexts_a, two_contexts_b  the primary context and a created one, a buffer in each;
//                                   two host threads launch ctx_add_one 20 times each into
//                                   their own context at once: each buffer holds 20
//   two_contexts_one_thread         one thread alternating its current context, 10 launches
//                                   into each: each buffer holds 10
//   two_contexts_host_writes_a/_b   slow_add_one (25 ms) 3 times in context A while a host
//                                   thread keeps writing context B's buffer (cuMemsetD32 and
//                                   cuMemcpyHtoD, in turn): A holds 3, B what the host wrote last
//   unload_during_window_m1/_m2     slow_add_one of module M1, 3 launches in flight; meanwhile
//                                   another thread loads M2 from PTX text, launches add_value
//                                   once (adds 5) and unloads M2; then M1's kernel once more
//                                   (its handle predates the unload), and M1 is unloaded: M1's
//                                   buffer holds 4, M2's 5, the context reports no error
//   device_variable_after_unload    module M3 with a __device__ counter that bump_counter adds
//                                   1 to, launched 3 times; before launches 2 and 3 another
//                                   module is loaded, used and unloaded; the counter, read
//                                   with cuModuleGetGlobal + cuMemcpyDtoH after each launch,
//                                   is 1, 2, 3 (3 passes each without a restore: 3, 6, 9)
//   device_variable_after_unload_ptx  the same, M3 loaded from PTX text
//
// The modules are PTX embedded below; "linked" ones are handed to cuModuleLoadData as the cubin
// the driver's JIT linker makes of it (cuLink*), the others as PTX text. Driver functions come
// through the runtime (no -lcuda), in their CUDA 12.0 forms. Each case prints
// `case <name> ok|FAIL ...`; the last line is `RESULT OK` or `RESULT FAIL`. Every wait is
// bounded: waits between threads poll with a deadline, and a watchdog (alarm, 120 s) ends the
// process with `RESULT FAIL` should a call never return.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "check.cuh"

// ctx_add_one(unsigned* d, u64 n): d[i] += 1. slow_add_one(unsigned* d, u64 n, u64 ns): spins
// `ns` of %globaltimer, then d[i] += 1.
static const char* kAddPtx = R"(
.version 7.0
.target sm_75
.address_size 64

.visible .entry ctx_add_one(.param .u64 d, .param .u64 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .b64 %rd<9>;
  ld.param.u64 %rd2, [d];
  ld.param.u64 %rd3, [n];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  mov.u32 %r3, %tid.x;
  cvt.u64.u32 %rd5, %r3;
  add.s64 %rd1, %rd4, %rd5;
  setp.ge.u64 %p1, %rd1, %rd3;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd6, %rd2;
  shl.b64 %rd7, %rd1, 2;
  add.s64 %rd8, %rd6, %rd7;
  ld.global.u32 %r4, [%rd8];
  add.s32 %r5, %r4, 1;
  st.global.u32 [%rd8], %r5;
DONE:
  ret;
}

.visible .entry slow_add_one(.param .u64 d, .param .u64 n, .param .u64 ns)
{
  .reg .pred %p<3>;
  .reg .b32 %r<6>;
  .reg .b64 %rd<14>;
  ld.param.u64 %rd7, [d];
  ld.param.u64 %rd4, [n];
  ld.param.u64 %rd5, [ns];
  cvta.to.global.u64 %rd1, %rd7;
  mov.u64 %rd6, %globaltimer;
SPIN:
  mov.u64 %rd8, %globaltimer;
  sub.s64 %rd9, %rd8, %rd6;
  setp.lt.u64 %p1, %rd9, %rd5;
  @%p1 bra SPIN;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mul.wide.u32 %rd10, %r1, %r2;
  mov.u32 %r3, %tid.x;
  cvt.u64.u32 %rd11, %r3;
  add.s64 %rd3, %rd10, %rd11;
  setp.ge.u64 %p2, %rd3, %rd4;
  @%p2 bra DONE;
  shl.b64 %rd12, %rd3, 2;
  add.s64 %rd13, %rd1, %rd12;
  ld.global.u32 %r4, [%rd13];
  add.s32 %r5, %r4, 1;
  st.global.u32 [%rd13], %r5;
DONE:
  ret;
}
)";

// add_value(unsigned* d, u64 n, unsigned v): d[i] += v.
static const char* kValuePtx = R"(
.version 7.0
.target sm_75
.address_size 64

.visible .entry add_value(.param .u64 d, .param .u64 n, .param .u32 v)
{
  .reg .pred %p<2>;
  .reg .b32 %r<7>;
  .reg .b64 %rd<9>;
  ld.param.u64 %rd2, [d];
  ld.param.u64 %rd3, [n];
  ld.param.u32 %r1, [v];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mul.wide.u32 %rd4, %r2, %r3;
  mov.u32 %r4, %tid.x;
  cvt.u64.u32 %rd5, %r4;
  add.s64 %rd1, %rd4, %rd5;
  setp.ge.u64 %p1, %rd1, %rd3;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd6, %rd2;
  shl.b64 %rd7, %rd1, 2;
  add.s64 %rd8, %rd6, %rd7;
  ld.global.u32 %r5, [%rd8];
  add.s32 %r6, %r5, %r1;
  st.global.u32 [%rd8], %r6;
DONE:
  ret;
}
)";

// `__device__ unsigned counter` (as nvcc writes it: module scope, zero-initialised) and
// bump_counter(): thread 0 of block 0 adds 1 to it.
static const char* kCounterPtx = R"(
.version 7.0
.target sm_75
.address_size 64

.global .align 4 .u32 counter;

.visible .entry bump_counter()
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %tid.x;
  or.b32 %r3, %r1, %r2;
  setp.ne.s32 %p1, %r3, 0;
  @%p1 bra DONE;
  ld.global.u32 %r4, [counter];
  add.s32 %r5, %r4, 1;
  st.global.u32 [counter], %r5;
DONE:
  ret;
}
)";

// The driver functions used, in their CUDA 12.0 forms.
static struct Driver {
  PFN_cuGetErrorName_v6000 get_error_name;
  PFN_cuDeviceGet_v2000 device_get;
  PFN_cuDevicePrimaryCtxRetain_v7000 primary_retain;
  PFN_cuDevicePrimaryCtxRelease_v11000 primary_release;
  PFN_cuCtxCreate_v12050 ctx_create;  // CUDA 13 has only the CUctxCreateParams form
  PFN_cuCtxDestroy_v4000 ctx_destroy;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize;
  PFN_cuMemAlloc_v3020 mem_alloc;
  PFN_cuMemFree_v3020 mem_free;
  PFN_cuMemcpyHtoD_v3020 memcpy_htod;
  PFN_cuMemcpyDtoH_v3020 memcpy_dtoh;
  PFN_cuMemsetD32_v3020 memset_d32;
  PFN_cuMemsetD32Async_v3020 memset_d32_async;
  PFN_cuMemcpyDtoHAsync_v3020 memcpy_dtoh_async;
  PFN_cuMemcpyHtoDAsync_v3020 memcpy_htod_async;
  PFN_cuModuleLoadData_v2000 module_load_data;
  PFN_cuModuleGetFunction_v2000 module_get_function;
  PFN_cuModuleGetGlobal_v3020 module_get_global;
  PFN_cuModuleUnload_v2000 module_unload;
  PFN_cuLaunchKernel_v4000 launch_kernel;
  PFN_cuStreamCreate_v2000 stream_create;
  PFN_cuStreamQuery_v2000 stream_query;
  PFN_cuStreamSynchronize_v2000 stream_synchronize;
  PFN_cuStreamDestroy_v4000 stream_destroy;
  PFN_cuLinkCreate_v6050 link_create;
  PFN_cuLinkAddData_v6050 link_add_data;
  PFN_cuLinkComplete_v5050 link_complete;
  PFN_cuLinkDestroy_v5050 link_destroy;
} d;

template <class F>
static bool entry(F& f, const char* name, unsigned version = 12000) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult st;
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &st) != cudaSuccess ||
      st != cudaDriverEntryPointSuccess || !p) {
    printf("driver entry point %s not found\n", name);
    return false;
  }
  f = (F)p;
  return true;
}

static bool load_driver() {
  return entry(d.get_error_name, "cuGetErrorName") && entry(d.device_get, "cuDeviceGet") &&
         entry(d.primary_retain, "cuDevicePrimaryCtxRetain") &&
         entry(d.primary_release, "cuDevicePrimaryCtxRelease") &&
         entry(d.ctx_create, "cuCtxCreate", 12050) && entry(d.ctx_destroy, "cuCtxDestroy") &&
         entry(d.ctx_set_current, "cuCtxSetCurrent") &&
         entry(d.ctx_synchronize, "cuCtxSynchronize") && entry(d.mem_alloc, "cuMemAlloc") &&
         entry(d.mem_free, "cuMemFree") && entry(d.memcpy_htod, "cuMemcpyHtoD") &&
         entry(d.memcpy_dtoh, "cuMemcpyDtoH") && entry(d.memset_d32, "cuMemsetD32") &&
         entry(d.memset_d32_async, "cuMemsetD32Async") &&
         entry(d.memcpy_dtoh_async, "cuMemcpyDtoHAsync") &&
         entry(d.memcpy_htod_async, "cuMemcpyHtoDAsync") &&
         entry(d.module_load_data, "cuModuleLoadData") &&
         entry(d.module_get_function, "cuModuleGetFunction") &&
         entry(d.module_get_global, "cuModuleGetGlobal") &&
         entry(d.module_unload, "cuModuleUnload") && entry(d.launch_kernel, "cuLaunchKernel") &&
         entry(d.stream_create, "cuStreamCreate") && entry(d.stream_query, "cuStreamQuery") &&
         entry(d.stream_synchronize, "cuStreamSynchronize") &&
         entry(d.stream_destroy, "cuStreamDestroy") && entry(d.link_create, "cuLinkCreate") &&
         entry(d.link_add_data, "cuLinkAddData") && entry(d.link_complete, "cuLinkComplete") &&
         entry(d.link_destroy, "cuLinkDestroy");
}

static int failures = 0;

#define CU(x)                                                                          \
  do {                                                                                 \
    CUresult r_ = (x);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                          \
      const char* s_ = "?";                                                            \
      d.get_error_name(r_, &s_);                                                       \
      printf("driver error %s (%d) at %s:%d\n", s_, (int)r_, __FILE__, __LINE__);     \
      printf("RESULT FAIL\n");                                                         \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

static void report(const char* name, const unsigned int* h, size_t n, unsigned int want,
                   const char* extra = "") {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != want;
  printf("case %s %s first=%u want=%u bad=%zu%s\n", name, bad ? "FAIL" : "ok", n ? h[0] : 0,
         want, bad, extra);
  if (bad) failures++;
}

static void on_alarm(int) {
  const char msg[] = "watchdog: the program did not finish within 120 s\nRESULT FAIL\n";
  ssize_t r = write(1, msg, sizeof msg - 1);
  (void)r;
  _exit(3);
}

// Waits until `a` reaches `value`, for at most `ms` milliseconds.
static bool wait_for(const std::atomic<int>& a, int value, int ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (a.load() < value) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Loads `ptx` into the current context: as PTX text, or (`linked`) as the cubin the driver's
// JIT linker makes of it.
static CUresult load_module(CUmodule* m, const char* ptx, bool linked) {
  if (!linked) return d.module_load_data(m, ptx);
  CUlinkState link = nullptr;
  CUresult r = d.link_create(0, nullptr, nullptr, &link);
  if (r != CUDA_SUCCESS) return r;
  r = d.link_add_data(link, CU_JIT_INPUT_PTX, (void*)ptx, strlen(ptx) + 1, "module.ptx", 0,
                      nullptr, nullptr);
  void* cubin = nullptr;
  size_t size = 0;
  if (r == CUDA_SUCCESS) r = d.link_complete(link, &cubin, &size);
  if (r == CUDA_SUCCESS) r = d.module_load_data(m, cubin);
  d.link_destroy(link);
  return r;
}

const size_t kN = 4096, kSlowN = 256;
const unsigned long long kSlowNs = 25000000ull;
const unsigned int kBlocks = (unsigned int)((kN + 255) / 256);

// A context's module, stream and buffer (kN elements).
struct Side {
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction add = nullptr, slow = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr buf = 0;
};

static int side_open(Side& s) {
  CU(d.ctx_set_current(s.ctx));
  CU(load_module(&s.mod, kAddPtx, true));
  CU(d.module_get_function(&s.add, s.mod, "ctx_add_one"));
  CU(d.module_get_function(&s.slow, s.mod, "slow_add_one"));
  // A blocking stream: it waits for the memsets of the legacy default stream.
  CU(d.stream_create(&s.stream, CU_STREAM_DEFAULT));
  CU(d.mem_alloc(&s.buf, kN * 4));
  return 0;
}

static int side_zero(Side& s) {
  CU(d.ctx_set_current(s.ctx));
  CU(d.memset_d32(s.buf, 0, kN));
  CU(d.ctx_synchronize());
  return 0;
}

static int side_add_ones(Side& s, int launches) {
  CU(d.ctx_set_current(s.ctx));
  size_t n = kN;
  void* args[] = {&s.buf, &n};
  for (int i = 0; i < launches; i++)
    CU(d.launch_kernel(s.add, kBlocks, 1, 1, 256, 1, 1, 0, s.stream, args, nullptr));
  return 0;
}

static int side_read(Side& s, std::vector<unsigned int>& h) {
  h.assign(kN, 0);
  CU(d.ctx_set_current(s.ctx));
  CU(d.stream_synchronize(s.stream));
  CU(d.memcpy_dtoh(h.data(), s.buf, kN * 4));
  return 0;
}

static int side_close(Side& s) {
  CU(d.ctx_set_current(s.ctx));
  CU(d.ctx_synchronize());
  CU(d.mem_free(s.buf));
  CU(d.stream_destroy(s.stream));
  CU(d.module_unload(s.mod));
  return 0;
}

// --- two_contexts: the primary context (A) and a created one (B) on device 0.
static int two_contexts(CUdevice dev, CUcontext primary) {
  Side a, b;
  a.ctx = primary;
  CU(d.ctx_create(&b.ctx, nullptr, 0, dev));
  if (side_open(a) || side_open(b) || side_zero(a) || side_zero(b)) return 1;

  // Two host threads at once, each into its own context.
  {
    const int launches = 20;
    std::atomic<int> ready{0};
    int rc[2] = {1, 1};
    Side* sides[2] = {&a, &b};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; t++)
      threads.emplace_back([&, t] {
        ready++;
        if (!wait_for(ready, 2, 10000)) return;
        rc[t] = side_add_ones(*sides[t], launches);
        if (rc[t] == 0) rc[t] = d.stream_synchronize(sides[t]->stream) != CUDA_SUCCESS;
      });
    for (auto& th : threads) th.join();
    if (rc[0] || rc[1]) {
      printf("case two_contexts FAIL launching threads: rc %d %d\nRESULT FAIL\n", rc[0], rc[1]);
      return 1;
    }
    std::vector<unsigned int> h;
    if (side_read(a, h)) return 1;
    report("two_contexts_a", h.data(), kN, launches);
    if (side_read(b, h)) return 1;
    report("two_contexts_b", h.data(), kN, launches);
  }

  // One thread switching its current context between launches.
  {
    const int launches = 10;
    if (side_zero(a) || side_zero(b)) return 1;
    for (int i = 0; i < launches; i++)
      if (side_add_ones(a, 1) || side_add_ones(b, 1)) return 1;
    std::vector<unsigned int> ha, hb;
    if (side_read(a, ha) || side_read(b, hb)) return 1;
    report("two_contexts_one_thread_a", ha.data(), kN, launches);
    report("two_contexts_one_thread_b", hb.data(), kN, launches);
  }

  // Slow kernels in A while a host thread writes B's buffer, memset and copy in turn.
  {
    const int launches = 3;
    if (side_zero(a) || side_zero(b)) return 1;
    std::atomic<int> writes{0}, stop{0};
    int rc = 1;
    unsigned int last = 0;
    std::thread writer([&] {
      if (d.ctx_set_current(b.ctx) != CUDA_SUCCESS) return;
      std::vector<unsigned int> pattern(kN);
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (unsigned int k = 1; !stop.load() && k < 1000000; k++) {
        if (std::chrono::steady_clock::now() > until) return;
        CUresult r;
        if (k % 2) {
          r = d.memset_d32(b.buf, k, kN);
        } else {
          for (auto& v : pattern) v = k;
          r = d.memcpy_htod(b.buf, pattern.data(), kN * 4);
        }
        if (r != CUDA_SUCCESS) return;
        last = k;
        writes++;
      }
      rc = d.ctx_synchronize() != CUDA_SUCCESS;
    });
    // The writer is at work before the first launch.
    bool started = wait_for(writes, 1, 10000);
    int before = writes.load();
    CU(d.ctx_set_current(a.ctx));
    size_t n = kSlowN;
    unsigned long long ns = kSlowNs;
    void* args[] = {&a.buf, &n, &ns};
    for (int i = 0; i < launches; i++)
      CU(d.launch_kernel(a.slow, 1, 1, 1, 256, 1, 1, 0, a.stream, args, nullptr));
    CU(d.stream_synchronize(a.stream));
    int during = writes.load() - before;
    stop = 1;
    writer.join();
    if (!started || rc) {
      printf("case two_contexts_host_writes FAIL writer: started %d rc %d writes %d\n",
             (int)started, rc, writes.load());
      failures++;
    } else {
      std::vector<unsigned int> h;
      if (side_read(a, h)) return 1;
      char extra[64];
      snprintf(extra, sizeof extra, " host_writes_in_window=%d", during);
      report("two_contexts_host_writes_a", h.data(), kSlowN, launches, extra);
      if (side_read(b, h)) return 1;
      snprintf(extra, sizeof extra, " host_writes=%d", writes.load());
      report("two_contexts_host_writes_b", h.data(), kN, last, extra);
    }
  }

  // A copy submitted in B into A's buffer (elements kSlowN.. set to 7), queued behind a slow
  // kernel of B, still in flight when A launches a slow kernel over elements 0..kSlowN of the
  // same buffer. Without the tool: ones, then sevens, whatever the order on the GPU. Under it,
  // A's window must wait for the copy (owner fencing): a restore between A's passes would
  // otherwise put the zeros it captured back over the sevens.
  {
    if (side_zero(a) || side_zero(b)) return 1;
    std::vector<unsigned int> sevens(kN - kSlowN, 7);
    CU(d.ctx_set_current(b.ctx));
    size_t n = kSlowN;
    unsigned long long short_ns = kSlowNs, long_ns = 4 * kSlowNs;
    void* bargs[] = {&b.buf, &n, &short_ns};
    CU(d.launch_kernel(b.slow, 1, 1, 1, 256, 1, 1, 0, b.stream, bargs, nullptr));
    CU(d.memcpy_htod_async(a.buf + kSlowN * 4, sevens.data(), (kN - kSlowN) * 4, b.stream));
    CU(d.ctx_set_current(a.ctx));
    void* aargs[] = {&a.buf, &n, &long_ns};
    CU(d.launch_kernel(a.slow, 1, 1, 1, 256, 1, 1, 0, a.stream, aargs, nullptr));
    CU(d.ctx_set_current(b.ctx));
    CU(d.stream_synchronize(b.stream));
    std::vector<unsigned int> h;
    if (side_read(a, h)) return 1;
    report("cross_context_copy_kernel_part", h.data(), kSlowN, 1);
    report("cross_context_copy_copied_part", h.data() + kSlowN, kN - kSlowN, 7);
  }

  if (side_close(a) || side_close(b)) return 1;
  CU(d.ctx_destroy(b.ctx));
  CU(d.ctx_set_current(primary));
  return 0;
}

// --- unload_during_window: M2 loaded, used and unloaded while M1's kernels are in flight.
static int unload_during_window(CUcontext primary) {
  CU(d.ctx_set_current(primary));
  CUmodule m1 = nullptr;
  CUfunction slow = nullptr;
  CUstream s = nullptr;
  CUdeviceptr buf = 0;
  CU(load_module(&m1, kAddPtx, true));
  CU(d.module_get_function(&slow, m1, "slow_add_one"));
  CU(d.stream_create(&s, CU_STREAM_DEFAULT));
  CU(d.mem_alloc(&buf, kSlowN * 4));
  CU(d.memset_d32(buf, 0, kSlowN));
  CU(d.ctx_synchronize());

  std::atomic<int> launched{0};
  std::vector<unsigned int> h2(kN, 0);
  int rc = 1, loaded_in_flight = 0, unloaded_in_flight = 0;
  std::thread other([&] {
    rc = [&]() -> int {
      if (!wait_for(launched, 1, 10000)) {
        printf("no launch of M1 within 10 s\n");
        return 1;
      }
      CU(d.ctx_set_current(primary));
      // M1's kernel is still running (or its window is: its stream has not drained).
      loaded_in_flight = d.stream_query(s) == CUDA_ERROR_NOT_READY;
      CUmodule m2 = nullptr;
      CUfunction add = nullptr;
      CUstream s2 = nullptr;
      CUdeviceptr buf2 = 0;
      CU(load_module(&m2, kValuePtx, false));
      CU(d.module_get_function(&add, m2, "add_value"));
      // A non-blocking stream and asynchronous copies: nothing here waits for M1's stream.
      CU(d.stream_create(&s2, CU_STREAM_NON_BLOCKING));
      CU(d.mem_alloc(&buf2, kN * 4));
      CU(d.memset_d32_async(buf2, 0, kN, s2));
      size_t n = kN;
      unsigned int v = 5;
      void* args[] = {&buf2, &n, &v};
      CU(d.launch_kernel(add, kBlocks, 1, 1, 256, 1, 1, 0, s2, args, nullptr));
      CU(d.memcpy_dtoh_async(h2.data(), buf2, kN * 4, s2));
      CU(d.stream_synchronize(s2));
      CU(d.module_unload(m2));
      // Unloaded while M1's kernels were still in flight (or their windows were).
      unloaded_in_flight = d.stream_query(s) == CUDA_ERROR_NOT_READY;
      CU(d.mem_free(buf2));
      CU(d.stream_destroy(s2));
      return 0;
    }();
  });
  size_t n = kSlowN;
  unsigned long long ns = kSlowNs;
  void* args[] = {&buf, &n, &ns};
  const int launches = 3;
  for (int i = 0; i < launches; i++) {
    CUresult r = d.launch_kernel(slow, 1, 1, 1, 256, 1, 1, 0, s, args, nullptr);
    launched++;
    if (r != CUDA_SUCCESS) {
      other.join();
      CU(r);
    }
  }
  other.join();
  if (rc) {
    printf("case unload_during_window FAIL the other thread failed\nRESULT FAIL\n");
    return 1;
  }
  // M1's kernel again: its handle was had before M2's unload.
  CU(d.launch_kernel(slow, 1, 1, 1, 256, 1, 1, 0, s, args, nullptr));
  CU(d.stream_synchronize(s));
  std::vector<unsigned int> h(kSlowN);
  CU(d.memcpy_dtoh(h.data(), buf, kSlowN * 4));
  char extra[64];
  snprintf(extra, sizeof extra, " loaded_in_flight=%d unloaded_in_flight=%d", loaded_in_flight,
           unloaded_in_flight);
  report("unload_during_window_m1", h.data(), kSlowN, launches + 1, extra);
  report("unload_during_window_m2", h2.data(), kN, 5);
  CU(d.mem_free(buf));
  CU(d.stream_destroy(s));
  CU(d.ctx_synchronize());
  CU(d.module_unload(m1));
  CU(d.ctx_synchronize());
  return 0;
}

// Loads a module of add_value, adds 7 to a buffer with it and unloads it; `ok` tells whether
// the buffer then held 7.
static int use_and_unload_other(bool linked, bool& ok) {
  CUmodule m = nullptr;
  CUfunction add = nullptr;
  CUdeviceptr buf = 0;
  CU(load_module(&m, kValuePtx, linked));
  CU(d.module_get_function(&add, m, "add_value"));
  CU(d.mem_alloc(&buf, kN * 4));
  CU(d.memset_d32(buf, 0, kN));
  CU(d.ctx_synchronize());
  size_t n = kN;
  unsigned int v = 7;
  void* args[] = {&buf, &n, &v};
  CU(d.launch_kernel(add, kBlocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  std::vector<unsigned int> h(kN);
  CU(d.memcpy_dtoh(h.data(), buf, kN * 4));
  ok = true;
  for (auto x : h) ok = ok && x == 7;
  CU(d.module_unload(m));
  CU(d.mem_free(buf));
  return 0;
}

// --- device_variable_after_unload: a __device__ counter, another module unloaded between
// launches.
static int device_variable_after_unload(CUcontext primary, bool linked, const char* name) {
  CU(d.ctx_set_current(primary));
  CUmodule m3 = nullptr;
  CUfunction bump = nullptr;
  CUstream s = nullptr;
  CU(load_module(&m3, kCounterPtx, linked));
  CU(d.module_get_function(&bump, m3, "bump_counter"));
  CU(d.stream_create(&s, CU_STREAM_DEFAULT));
  unsigned int seen[3] = {0, 0, 0};
  bool others_ok = true;
  size_t bytes = 0;
  for (int k = 0; k < 3; k++) {
    if (k > 0) {
      bool ok = false;
      if (use_and_unload_other(linked, ok)) return 1;
      others_ok = others_ok && ok;
    }
    CU(d.launch_kernel(bump, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr));
    CU(d.stream_synchronize(s));
    // Looked up after the first launch: that one's window knew the variable from the module's
    // image alone.
    CUdeviceptr counter = 0;
    CU(d.module_get_global(&counter, &bytes, m3, "counter"));
    CU(d.memcpy_dtoh(&seen[k], counter, 4));
  }
  bool ok = seen[0] == 1 && seen[1] == 2 && seen[2] == 3 && bytes == 4 && others_ok;
  printf("case %s %s counter=%u,%u,%u want=1,2,3 bytes=%zu other_module=%s\n", name,
         ok ? "ok" : "FAIL", seen[0], seen[1], seen[2], bytes, others_ok ? "ok" : "FAIL");
  if (!ok) failures++;
  CU(d.stream_destroy(s));
  CU(d.module_unload(m3));
  return 0;
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGALRM, on_alarm);
  alarm(120);
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  if (!load_driver()) {
    printf("RESULT FAIL\n");
    return 1;
  }
  CUdevice dev = 0;
  CUcontext primary = nullptr;
  CU(d.device_get(&dev, 0));
  CU(d.primary_retain(&primary, dev));
  if (two_contexts(dev, primary)) return 1;
  if (unload_during_window(primary)) return 1;
  if (device_variable_after_unload(primary, true, "device_variable_after_unload")) return 1;
  if (device_variable_after_unload(primary, false, "device_variable_after_unload_ptx")) return 1;
  CU(d.primary_release(dev));
  printf("RESULT %s\n", failures ? "FAIL" : "OK");
  return failures ? 1 : 0;
}
