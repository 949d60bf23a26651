// flag_wait: a kernel that waits for something the application does after the launch call
// returned — a flag in mapped pinned host memory the host sets 50 ms later — then adds the
// flag's value to every element of a device buffer (not idempotent: a replay that does not
// restore shows). Without the tool it completes at once; under a tool whose launch call waits
// for its replay window it could only time out. The flag is reached through a __device__
// pointer, not a kernel argument: the window reads the pointer and watches the flag across the
// first pass, during which the host sets it, so replay stops after that pass; with
// ROCPROF_REPLAY_HOST_MEMORY=repeat the launch is replayed and later passes find the flag set.
//
// `flag_wait next`: before setting the flag the application launches another kernel on the
// same stream (`warm_up` again, queued behind the waiting one, as without a tool) and prints
// `next_returned_us`, how long that second launch call took. A tool whose next launch waits
// for the previous window, whose first pass waits for the flag, holds the host until a
// deadline.
//
// The kernel gives up after 20 s of device time (%globaltimer) and then writes a marker, so a
// tool that blocks the host cannot hang the test. Prints `launch_returned_us`, `check` and
// `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>
#include "check.cuh"

__device__ volatile unsigned int* flag_ptr;

// A first launch on the stream, before the one measured: the tool's one-time set-up per
// context (its gate page and the self-test that proves it, about 80 ms on the H200) is not
// what the measured launch is about.
__global__ void warm_up(unsigned int* scratch) { scratch[threadIdx.x] += 1; }

__global__ void wait_then_add(unsigned int* d, size_t n) {
  __shared__ unsigned int value;
  if (threadIdx.x == 0) {
    unsigned long long start = now_ns();
    unsigned int v = 0;
    while ((v = *flag_ptr) == 0) {
      if (now_ns() - start > 20000000000ull) {
        v = 0xdead;
        break;
      }
      __nanosleep(1000);
    }
    value = v;
  }
  __syncthreads();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += value;
}

int main(int argc, char** argv) {
  const bool next = argc > 1 && std::string(argv[1]) == "next";
  const size_t n = 1 << 16;
  unsigned int* flag = nullptr;
  CK(cudaHostAlloc((void**)&flag, sizeof(unsigned int), cudaHostAllocMapped));
  *(volatile unsigned int*)flag = 0;
  unsigned int* dflag = nullptr;
  CK(cudaHostGetDevicePointer((void**)&dflag, flag, 0));
  CK(cudaMemcpyToSymbol(flag_ptr, &dflag, sizeof(dflag)));
  unsigned int* d = nullptr;
  CK(cudaMalloc((void**)&d, n * 4));
  CK(cudaMemset(d, 0, n * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned int* scratch = nullptr;
  CK(cudaMalloc((void**)&scratch, 32 * 4));
  CK(cudaMemset(scratch, 0, 32 * 4));
  warm_up<<<1, 32, 0, s>>>(scratch);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(s));
  CK(cudaDeviceSynchronize());

  auto t0 = std::chrono::steady_clock::now();
  wait_then_add<<<(n + 255) / 256, 256, 0, s>>>(d, n);
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaGetLastError());
  printf("launch_returned_us %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
  if (next) {
    // The next launch on the stream, before the host sets the flag.
    auto n0 = std::chrono::steady_clock::now();
    warm_up<<<1, 32, 0, s>>>(scratch);
    auto n1 = std::chrono::steady_clock::now();
    CK(cudaGetLastError());
    printf("next_returned_us %lld\n",
           (long long)std::chrono::duration_cast<std::chrono::microseconds>(n1 - n0).count());
  }
  // The application's next action, after the call returned.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  *(volatile unsigned int*)flag = 7;
  CK(cudaStreamSynchronize(s));
  auto t2 = std::chrono::steady_clock::now();
  printf("completed_ms %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::milliseconds>(t2 - t0).count());

  std::vector<unsigned int> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != 7;
  unsigned int warm[32];
  CK(cudaMemcpy(warm, scratch, sizeof warm, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 32; i++) bad += warm[i] != (next ? 2u : 1u);
  printf("check flag_wait first=%u bad=%zu %s\n", h[0], bad, bad ? "FAIL" : "ok");
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  CK(cudaFreeHost(flag));
  printf("RESULT %s\n", bad ? "FAIL" : "OK");
  return bad ? 1 : 0;
}
