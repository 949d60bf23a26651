// flag_copy MODE: a kernel that waits for a flag in device memory which the application sets,
// after the launch call returned, with its next CUDA call on another stream — MODE `copy`:
// cudaMemcpyAsync from host memory on a second non-blocking stream; MODE `kernel`: a tiny
// kernel launched on that stream; MODE `sync`: a synchronous cudaMemcpy (the legacy default
// stream, which does not wait for the kernel's non-blocking stream); MODE `ptds`: the kernel on
// this thread's per-thread default stream, the cudaMemcpyAsync on another thread's (both are
// named cudaStreamPerThread, and neither waits for the other). The waiting kernel then adds the flag's value to every
// element of a device buffer (not idempotent: a replay that does not restore shows).
//
// Without the tool the kernel completes at once. Under a tool that holds the application's
// next call until the window ends, and waits for the window's first pass, both wait until a
// deadline. The kernel gives up after 20 s of device time (%globaltimer) and then adds 0xdead
// instead, so a tool that blocks cannot hang the test.
//
// Prints `launch_returned_us`, `completed_ms`, `check` and `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "check.cuh"

// A first launch on each stream, before the one measured (the tool's one-time set-up).
__global__ void warm_up(unsigned int* scratch) { scratch[threadIdx.x] += 1; }

__global__ void wait_flag_then_add(volatile unsigned int* flag, unsigned int* d, size_t n) {
  __shared__ unsigned int value;
  if (threadIdx.x == 0) {
    unsigned long long start = now_ns();
    unsigned int v = 0;
    while ((v = *flag) == 0) {
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

__global__ void set_flag(unsigned int* flag, unsigned int v) { *(volatile unsigned int*)flag = v; }

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "copy";
  const bool by_kernel = strcmp(mode, "kernel") == 0;
  const bool by_sync_copy = strcmp(mode, "sync") == 0;
  const bool by_other_thread = strcmp(mode, "ptds") == 0;
  const size_t n = 1 << 16;
  unsigned int* flag = nullptr;
  CK(cudaMalloc((void**)&flag, 64));
  CK(cudaMemset(flag, 0, 64));
  unsigned int* d = nullptr;
  CK(cudaMalloc((void**)&d, n * 4));
  CK(cudaMemset(d, 0, n * 4));
  unsigned int* seven = nullptr;
  CK(cudaHostAlloc((void**)&seven, 4, cudaHostAllocDefault));
  *seven = 7;
  cudaStream_t s, t;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  unsigned int* scratch = nullptr;
  CK(cudaMalloc((void**)&scratch, 32 * 4));
  CK(cudaMemset(scratch, 0, 32 * 4));
  // The waiting kernel's stream.
  cudaStream_t k = by_other_thread ? cudaStreamPerThread : s;
  warm_up<<<1, 32, 0, k>>>(scratch);
  warm_up<<<1, 32, 0, t>>>(scratch);
  // set_flag's first launch (its module loaded) on the flag's second word, not the flag.
  set_flag<<<1, 1, 0, t>>>(flag + 1, 1);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  auto t0 = std::chrono::steady_clock::now();
  wait_flag_then_add<<<(n + 255) / 256, 256, 0, k>>>(flag, d, n);
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaGetLastError());
  printf("launch_returned_us %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
  // The application's next action, on another stream, after the call returned.
  if (by_kernel) {
    set_flag<<<1, 1, 0, t>>>(flag, 7);
    CK(cudaGetLastError());
  } else if (by_sync_copy) {
    CK(cudaMemcpy(flag, seven, 4, cudaMemcpyHostToDevice));
  } else if (by_other_thread) {
    cudaError_t e = cudaSuccess;
    std::thread other([&] {
      e = cudaMemcpyAsync(flag, seven, 4, cudaMemcpyHostToDevice, cudaStreamPerThread);
      if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamPerThread);
    });
    other.join();
    CK(e);
  } else {
    CK(cudaMemcpyAsync(flag, seven, 4, cudaMemcpyHostToDevice, t));
  }
  CK(cudaStreamSynchronize(k));
  CK(cudaStreamSynchronize(t));
  auto t2 = std::chrono::steady_clock::now();
  printf("completed_ms %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::milliseconds>(t2 - t0).count());

  std::vector<unsigned int> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != 7;
  printf("check flag_copy mode=%s first=%u bad=%zu %s\n", mode, h[0], bad, bad ? "FAIL" : "ok");
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(t));
  CK(cudaFree(d));
  CK(cudaFree(flag));
  CK(cudaFree(scratch));
  CK(cudaFreeHost(seven));
  printf("RESULT %s\n", bad ? "FAIL" : "OK");
  return bad ? 1 : 0;
}
