// replay_check: every launch path rocprof-replay's CUDA backend intercepts, each kernel
// non-idempotent (a replay that does not restore memory shows), each result checked against
// what the host computes. Prints one `check` line per result, a digest of all final buffers
// (identical with and without the tool) and `RESULT OK` or `RESULT FAIL`.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <thread>
#include <vector>
#include "check.cuh"

__device__ unsigned int counter;                 // .nv.global: zero-initialised
__device__ unsigned int table[64] = {7};         // .nv.global.init: table[0] = 7

__global__ void add_one(unsigned int* d, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
}
__global__ void bump_counter() {
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(&counter, 1u);
}
__global__ void table_step() {
  int i = threadIdx.x;
  if (i < 64) table[i] += i;
}
// Two phases over the whole grid, separated by a grid-wide barrier (a cooperative launch):
// every element + 1, then out[i] = d[i] + d[(i + 1) % n]. A pass that did not start from
// restored memory, or a relaunch that was not cooperative (its grid.sync() would never
// complete), shows.
__global__ void grid_pairs(unsigned int* d, unsigned int* out, size_t n) {
  cooperative_groups::grid_group g = cooperative_groups::this_grid();
  size_t i = g.thread_rank();
  if (i < n) d[i] += 1;
  g.sync();
  if (i < n) out[i] = d[i] + d[(i + 1) % n];
}
__global__ void affine(float* x, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.5f + 1.0f;
}

static int failures = 0;
static uint64_t digest = 1469598103934665603ull;

static void check(const char* name, unsigned long long got, unsigned long long want) {
  printf("check %s got=%llu want=%llu %s\n", name, got, want, got == want ? "ok" : "FAIL");
  if (got != want) failures++;
}

static void mix(const void* p, size_t bytes) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t i = 0; i < bytes; i++) digest = (digest ^ b[i]) * 1099511628211ull;
}

static unsigned long long sum_device(const unsigned int* d, size_t n) {
  std::vector<unsigned int> h(n);
  cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost);
  mix(h.data(), n * 4);
  unsigned long long s = 0;
  for (size_t i = 0; i < n; i++) s += h[i];
  return s;
}

int main() {
  const size_t n = 1 << 20;
  const unsigned blocks = (unsigned)(n / 256);
  unsigned int* a;
  CK(cudaMalloc(&a, n * 4));
  CK(cudaMemset(a, 0, n * 4));

  // 1. <<<>>> on the legacy default stream (cuLaunchKernel), five times.
  for (int k = 0; k < 5; k++) add_one<<<blocks, 256>>>(a, n);
  CK(cudaDeviceSynchronize());
  check("legacy_stream", sum_device(a, n), 5ull * n);

  // 2. A zero-initialised __device__ variable, written only by the kernel.
  for (int k = 0; k < 4; k++) bump_counter<<<1, 32>>>();
  CK(cudaDeviceSynchronize());
  unsigned int c = 0;
  CK(cudaMemcpyFromSymbol(&c, counter, 4));
  check("device_counter", c, 4);

  // 3. An initialised __device__ array.
  for (int k = 0; k < 2; k++) table_step<<<1, 64>>>();
  CK(cudaDeviceSynchronize());
  unsigned int t[64];
  CK(cudaMemcpyFromSymbol(t, table, sizeof t));
  unsigned long long tsum = 0, twant = 7;
  for (int i = 0; i < 64; i++) {
    tsum += t[i];
    twant += 2ull * i;
  }
  mix(t, sizeof t);
  check("device_table", tsum, twant);

  // 4. cudaLaunchKernelEx (cuLaunchKernelEx) with an attribute, on a created stream.
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  for (int k = 0; k < 3; k++) CK(cudaLaunchKernelEx(&cfg, add_one, a, n));
  CK(cudaStreamSynchronize(s));
  check("launch_kernel_ex", sum_device(a, n), 8ull * n);

  // 5. A cooperative launch (cuLaunchCooperativeKernel): 64 blocks only.
  size_t nn = n;
  void* args[] = {&a, &nn};
  CK(cudaLaunchCooperativeKernel((void*)add_one, dim3(64), dim3(256), args, 0, s));
  CK(cudaStreamSynchronize(s));
  check("cooperative", sum_device(a, n), 8ull * n + 64 * 256);
  {
    // 5b. A cooperative launch whose kernel synchronises the whole grid.
    const size_t gn = 64 * 256;
    unsigned int *gd, *gout;
    CK(cudaMalloc(&gd, gn * 4));
    CK(cudaMalloc(&gout, gn * 4));
    CK(cudaMemsetAsync(gd, 0, gn * 4, s));
    CK(cudaMemsetAsync(gout, 0, gn * 4, s));
    size_t gnn = gn;
    void* gargs[] = {&gd, &gout, &gnn};
    CK(cudaLaunchCooperativeKernel((void*)grid_pairs, dim3(64), dim3(256), gargs, 0, s));
    CK(cudaStreamSynchronize(s));
    check("cooperative_grid_sync", sum_device(gd, gn) + sum_device(gout, gn), 3ull * gn);
    CK(cudaFree(gout));
    CK(cudaFree(gd));
  }

  // 6. Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync).
  unsigned int* b;
  CK(cudaMallocAsync(&b, n * 4, s));
  CK(cudaMemsetAsync(b, 0, n * 4, s));
  for (int k = 0; k < 3; k++) add_one<<<blocks, 256, 0, s>>>(b, n);
  CK(cudaStreamSynchronize(s));
  check("malloc_async", sum_device(b, n), 3ull * n);
  CK(cudaFreeAsync(b, s));

  // 7. A pitched allocation (cuMemAllocPitch).
  unsigned int* p;
  size_t pitch = 0;
  CK(cudaMallocPitch(&p, &pitch, 1000 * 4, 100));
  size_t pn = pitch * 100 / 4;
  CK(cudaMemset(p, 0, pitch * 100));
  for (int k = 0; k < 2; k++) add_one<<<(unsigned)((pn + 255) / 256), 256>>>(p, pn);
  CK(cudaDeviceSynchronize());
  check("pitched", sum_device(p, pn), 2ull * pn);

  // 8. The per-thread default stream.
  for (int k = 0; k < 2; k++) add_one<<<blocks, 256, 0, cudaStreamPerThread>>>(a, n);
  CK(cudaStreamSynchronize(cudaStreamPerThread));
  check("per_thread_stream", sum_device(a, n), 10ull * n + 64 * 256);

  // 9. Floating point, not idempotent: x = 1.5x + 1 three times from 1 is 8.125 exactly.
  float* x;
  CK(cudaMalloc(&x, n * 4));
  std::vector<float> ones(n, 1.0f);
  CK(cudaMemcpy(x, ones.data(), n * 4, cudaMemcpyHostToDevice));
  for (int k = 0; k < 3; k++) affine<<<blocks, 256>>>(x, n);
  std::vector<float> xh(n);
  CK(cudaMemcpy(xh.data(), x, n * 4, cudaMemcpyDeviceToHost));
  mix(xh.data(), n * 4);
  size_t exact = 0;
  for (size_t i = 0; i < n; i++) exact += xh[i] == 8.125f;
  check("affine_exact", exact, n);

  // 10. Two host threads, each with its own stream and buffer.
  const size_t m = 1 << 16;
  unsigned int* tb[2];
  for (int k = 0; k < 2; k++) {
    CK(cudaMalloc(&tb[k], m * 4));
    CK(cudaMemset(tb[k], 0, m * 4));
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; k++) {
    threads.emplace_back([k, &tb, m] {
      cudaStream_t ts;
      cudaStreamCreate(&ts);
      for (int r = 0; r < 10; r++) add_one<<<(unsigned)(m / 256), 256, 0, ts>>>(tb[k], m);
      cudaStreamSynchronize(ts);
      cudaStreamDestroy(ts);
    });
  }
  for (auto& th : threads) th.join();
  check("thread0", sum_device(tb[0], m), 10ull * m);
  check("thread1", sum_device(tb[1], m), 10ull * m);

  // 11. Stream capture and graph launches (not replayed: they run as the graph says).
  unsigned int* g;
  CK(cudaMalloc(&g, m * 4));
  CK(cudaMemset(g, 0, m * 4));
  cudaStream_t cs;
  CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
  add_one<<<(unsigned)(m / 256), 256, 0, cs>>>(g, m);
  add_one<<<(unsigned)(m / 256), 256, 0, cs>>>(g, m);
  CK(cudaStreamEndCapture(cs, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int k = 0; k < 3; k++) CK(cudaGraphLaunch(exec, cs));
  CK(cudaStreamSynchronize(cs));
  check("graph", sum_device(g, m), 6ull * m);

  // 12. A device-to-device copy between kernels.
  unsigned int* d2;
  CK(cudaMalloc(&d2, n * 4));
  CK(cudaMemcpyAsync(d2, a, n * 4, cudaMemcpyDeviceToDevice, s));
  add_one<<<blocks, 256, 0, s>>>(d2, n);
  CK(cudaStreamSynchronize(s));
  check("copy_then_kernel", sum_device(d2, n), 11ull * n + 64 * 256);

  printf("digest %016llx\n", (unsigned long long)digest);
  printf("RESULT %s\n", failures ? "FAIL" : "OK");
  return failures ? 1 : 0;
}
