// counters_check: kernels whose hardware counters are known in advance, for checking
// counters collected through replay (rocprof-replay --metrics) and Nsight Compute.
//
//   counters_check [MiB]      (default 1024)
//
// stream_sum reads a buffer of MiB mebibytes once (far more than the L2), in a grid of
// 1056 blocks of 256 threads, and adds every 32-bit word into one counter (atomicAdd: a
// replay that does not restore the counter shows); it runs twice. scale multiplies 1 Mi
// floats in place by 2, three times. Prints the grids and `RESULT OK` when both results are
// exact.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::printf("RESULT FAIL %s: %s\n", #x, cudaGetErrorString(e));                \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

__global__ void stream_sum(const uint4* p, size_t n, unsigned long long* out) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long s = 0;
  for (; i < n; i += stride) {
    uint4 v = p[i];
    s += (unsigned long long)v.x + v.y + v.z + v.w;
  }
  atomicAdd(out, s);
}

__global__ void scale(float* x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  size_t bytes = mib << 20, n = bytes / sizeof(uint4);
  uint4* p = nullptr;
  unsigned long long* out = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  CHECK(cudaMalloc(&out, sizeof(*out)));
  CHECK(cudaMemset(p, 1, bytes));
  CHECK(cudaMemset(out, 0, sizeof(*out)));
  const int blocks = 1056, threads = 256;
  std::printf("grid stream_sum %d %d\n", blocks, threads);
  for (int k = 0; k < 2; ++k) stream_sum<<<blocks, threads>>>(p, n, out);
  CHECK(cudaGetLastError());
  const int m = 1 << 20;
  std::vector<float> h(m);
  for (int i = 0; i < m; ++i) h[i] = (float)(i % 1000) * 0.5f;
  float* x = nullptr;
  CHECK(cudaMalloc(&x, m * sizeof(float)));
  CHECK(cudaMemcpy(x, h.data(), m * sizeof(float), cudaMemcpyHostToDevice));
  std::printf("grid scale %d %d\n", (m + 255) / 256, 256);
  for (int k = 0; k < 3; ++k) scale<<<(m + 255) / 256, 256>>>(x, m, 2.0f);
  CHECK(cudaGetLastError());
  unsigned long long got = 0;
  CHECK(cudaMemcpy(&got, out, sizeof(got), cudaMemcpyDeviceToHost));
  std::vector<float> back(m);
  CHECK(cudaMemcpy(back.data(), x, m * sizeof(float), cudaMemcpyDeviceToHost));
  unsigned long long want = 2ull * (bytes / 4) * 0x01010101ull;
  bool ok = got == want;
  for (int i = 0; i < m && ok; ++i) ok = back[i] == h[i] * 8.0f;
  std::printf("sum %llu want %llu\n", got, want);
  std::printf(ok ? "RESULT OK\n" : "RESULT FAIL\n");
  return ok ? 0 : 1;
}
