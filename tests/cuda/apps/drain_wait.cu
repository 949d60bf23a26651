// drain_wait: a replayed launch whose window must drain a kernel that waits for what the
// application does after that launch call returned. A kernel named like NCCL's
// (`ncclKernel_wait_flag`: communication kernels are never replayed, so it runs once, as
// without a tool) spins on a flag in mapped pinned host memory on stream `s`; then `add_one`
// is launched on stream `t` (replayed: its window drains the context, so it waits for the
// spinning kernel); only then does the host store the flag. Without a tool the launch call
// returns at once and both kernels finish. A tool whose launch call waits for its drain holds
// the host until a deadline: the spinning kernel gives up after 20 s of device time and adds
// 0xdead instead of 7 (the application computes something else).
//
// `drain_wait kernel`: the flag is in device memory and the replayed launch on `t` is
// `set_flag`, which sets it: the spinning kernel waits for the very launch whose window drains
// it (the launch, deferred, waits behind the window's gate). The drain must give way
// (`lock_contention`, one execution) well before the spinning kernel gives up.
//
// `drain_wait lazy`: the default mode without `add_one`'s first launch before the measured
// one, so the deferred launch is `add_one`'s first in the context (with lazy module loading,
// the driver's default, its module is loaded at that launch). Whether a tool that defers it
// still completes: `gpu.sh defer-probes`.
//
// Prints `launch_returned_us`, `completed_ms`, `check` and `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>
#include "check.cuh"

__global__ void ncclKernel_wait_flag(volatile unsigned int* flag, unsigned int* d, size_t n) {
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

__global__ void set_flag(unsigned int* flag, unsigned int v) { *flag = v; }

__global__ void add_one(unsigned int* d, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
}

// `kernel` mode: the flag in device memory, set by the replayed `set_flag` on `t`.
static int by_set_flag(cudaStream_t s, cudaStream_t t, unsigned int* d, unsigned int* e,
                       size_t n) {
  unsigned int* dev_flag = nullptr;
  CK(cudaMalloc((void**)&dev_flag, 64));
  // First launches, the flag set by the first set_flag.
  set_flag<<<1, 1, 0, t>>>(dev_flag, 1);
  CK(cudaStreamSynchronize(t));
  ncclKernel_wait_flag<<<1, 32, 0, s>>>(dev_flag, e, 32);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(dev_flag, 0, 64));

  auto t0 = std::chrono::steady_clock::now();
  ncclKernel_wait_flag<<<(n + 255) / 256, 256, 0, s>>>(dev_flag, d, n);
  set_flag<<<1, 1, 0, t>>>(dev_flag, 7);
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaGetLastError());
  printf("launch_returned_us %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamSynchronize(t));
  auto t2 = std::chrono::steady_clock::now();
  printf("completed_ms %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::milliseconds>(t2 - t0).count());
  std::vector<unsigned int> hd(n), he(n);
  CK(cudaMemcpy(hd.data(), d, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(he.data(), e, n * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += hd[i] != 7 || he[i] != (i < 32 ? 1u : 0u);
  printf("check drain_wait.kernel waited=%#x bad=%zu %s\n", hd[0], bad, bad ? "FAIL" : "ok");
  CK(cudaFree(dev_flag));
  printf("RESULT %s\n", bad ? "FAIL" : "OK");
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  const bool by_kernel = argc > 1 && std::string(argv[1]) == "kernel";
  const bool lazy = argc > 1 && std::string(argv[1]) == "lazy";
  const size_t n = 1 << 16;
  unsigned int* flag = nullptr;
  CK(cudaHostAlloc((void**)&flag, 64, cudaHostAllocMapped));
  unsigned int* dflag = nullptr;
  CK(cudaHostGetDevicePointer((void**)&dflag, flag, 0));
  unsigned int *d = nullptr, *e = nullptr;
  CK(cudaMalloc((void**)&d, n * 4));
  CK(cudaMalloc((void**)&e, n * 4));
  CK(cudaMemset(d, 0, n * 4));
  CK(cudaMemset(e, 0, n * 4));
  cudaStream_t s, t;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  if (by_kernel) return by_set_flag(s, t, d, e, n);
  // First launches (modules loaded, the tool's one-time set-up per context), flag already set.
  *(volatile unsigned int*)flag = 1;
  ncclKernel_wait_flag<<<1, 32, 0, s>>>(dflag, e, 32);
  if (!lazy) add_one<<<1, 32, 0, t>>>(e, 32);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  *(volatile unsigned int*)flag = 0;

  auto t0 = std::chrono::steady_clock::now();
  ncclKernel_wait_flag<<<(n + 255) / 256, 256, 0, s>>>(dflag, d, n);
  add_one<<<(n + 255) / 256, 256, 0, t>>>(e, n);
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaGetLastError());
  printf("launch_returned_us %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
  // The application's next action: a plain host store.
  *(volatile unsigned int*)flag = 7;
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamSynchronize(t));
  auto t2 = std::chrono::steady_clock::now();
  printf("completed_ms %lld\n",
         (long long)std::chrono::duration_cast<std::chrono::milliseconds>(t2 - t0).count());

  std::vector<unsigned int> hd(n), he(n);
  CK(cudaMemcpy(hd.data(), d, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(he.data(), e, n * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  const unsigned int warm = lazy ? 2u : 3u;  // the spinner's warm-up, add_one's, the measured one
  for (size_t i = 0; i < n; i++) bad += hd[i] != 7 || he[i] != (i < 32 ? warm : 1u);
  printf("check drain_wait waited=%#x added=%u bad=%zu %s\n", hd[0], he[40], bad,
         bad ? "FAIL" : "ok");
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(t));
  CK(cudaFree(d));
  CK(cudaFree(e));
  CK(cudaFreeHost(flag));
  printf("RESULT %s\n", bad ? "FAIL" : "OK");
  return bad ? 1 : 0;
}
