// many_streams: replay windows in a process with more streams than the GPU has hardware
// connections (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), where streams share connections
// and a wait on one stream may hold another's work. A window holds the launch's stream behind
// a gate (stream memory wait) while its passes and restores run on the tool's own stream: if
// the tool's stream shared a connection with the held one, its passes would wait for the gate
// that opens only after them. (The application's work on other streams is ordered behind the
// gate only while streams cannot share connections; here it waits at the host.)
//
//   many_streams gates    a 20 ms kernel launched on each of the N streams in turn
//   many_streams ordered  one 20 ms kernel on stream 0, then a cudaMemsetAsync on each other
//                         stream while its window runs
//
// Prints `streams <n>`, `elapsed_ms <t>`, a `check` line and `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "check.cuh"

__global__ void slow_add(unsigned int* d, size_t n, unsigned long long ns) {
  if (threadIdx.x == 0) {
    unsigned long long start = now_ns();
    while (now_ns() - start < ns) __nanosleep(1000);
  }
  __syncthreads();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
}

int main(int argc, char** argv) {
  const bool ordered = argc > 1 && !strcmp(argv[1], "ordered");
  const int streams = getenv("STREAMS") ? atoi(getenv("STREAMS")) : 40;
  const size_t n = 4096;
  std::vector<cudaStream_t> s(streams);
  std::vector<unsigned int*> d(streams);
  for (int i = 0; i < streams; i++) {
    CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    CK(cudaMalloc((void**)&d[i], n * 4));
    CK(cudaMemset(d[i], 0, n * 4));
  }
  CK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  if (ordered) {
    slow_add<<<(n + 255) / 256, 256, 0, s[0]>>>(d[0], n, 20000000ull);
    CK(cudaGetLastError());
    for (int i = 1; i < streams; i++) CK(cudaMemsetAsync(d[i], 0x01, n * 4, s[i]));
  } else {
    for (int i = 0; i < streams; i++) {
      slow_add<<<(n + 255) / 256, 256, 0, s[i]>>>(d[i], n, 20000000ull);
      CK(cudaGetLastError());
    }
  }
  CK(cudaDeviceSynchronize());
  auto t1 = std::chrono::steady_clock::now();
  size_t bad = 0;
  std::vector<unsigned int> h(n);
  for (int i = 0; i < streams; i++) {
    CK(cudaMemcpy(h.data(), d[i], n * 4, cudaMemcpyDeviceToHost));
    unsigned int want = (ordered && i > 0) ? 0x01010101u : 1u;
    for (size_t j = 0; j < n; j++) bad += h[j] != want;
  }
  printf("streams %d\n", streams);
  printf("elapsed_ms %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count());
  printf("check many_streams %s bad=%zu %s\n", ordered ? "ordered" : "gates", bad,
         bad ? "FAIL" : "ok");
  printf("RESULT %s\n", bad ? "FAIL" : "OK");
  return bad ? 1 : 0;
}
