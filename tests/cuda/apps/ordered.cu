// ordered: the application's asynchronous stream work on another stream, submitted while a
// replay window runs, neither waits for the window nor runs inside it. A 30 ms kernel on a
// non-blocking stream A adds 1 to a device buffer and counts its executions in mapped pinned
// host memory (through a __device__ pointer; with ROCPROF_REPLAY_HOST_MEMORY=repeat the launch
// is replayed and the counter counts every pass). Right after the launch, on a second
// non-blocking stream B: a cudaMemsetAsync of another device buffer, a cudaMemcpyAsync of it
// into pinned host memory and a host function that reads the execution counter. The three
// calls must return at once (the tool orders the work behind the window on the device); the
// host function, once it runs, must see every pass done (EXPECT_RUNS, default: not checked,
// since without the tool stream B does not wait for stream A); the copy must hold the fill.
//
// Prints `launch_returned_us`, `stream_calls_us`, `seen hostfn runs=<n>`, a `check` line and
// `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "check.cuh"

__device__ unsigned int* runs_ptr;

// A first launch on each stream: the tool's one-time set-up per context (its gate page and
// its self-test) is not what the measured calls are about.
__global__ void warm_up(unsigned int* scratch) { scratch[threadIdx.x] += 1; }

__global__ void slow_add(unsigned int* d, size_t n, unsigned long long ns) {
  if (threadIdx.x == 0) {
    unsigned long long start = now_ns();
    while (now_ns() - start < ns) __nanosleep(1000);
  }
  __syncthreads();
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
  if (i == 0) {
    __threadfence_system();
    atomicAdd_system(runs_ptr, 1u);
  }
}

static volatile unsigned int* runs;
static std::atomic<int> at_hostfn{-1};

static void CUDART_CB host_fn(void*) { at_hostfn = (int)*runs; }

int main() {
  const int expect = getenv("EXPECT_RUNS") ? atoi(getenv("EXPECT_RUNS")) : -1;
  const size_t n = 1 << 16, m = 1 << 20;
  unsigned int* h_runs = nullptr;
  CK(cudaHostAlloc((void**)&h_runs, sizeof(unsigned int), cudaHostAllocMapped));
  runs = h_runs;
  *runs = 0;
  unsigned int* d_runs = nullptr;
  CK(cudaHostGetDevicePointer((void**)&d_runs, h_runs, 0));
  CK(cudaMemcpyToSymbol(runs_ptr, &d_runs, sizeof(d_runs)));
  unsigned int *d = nullptr, *e = nullptr, *pinned = nullptr;
  CK(cudaMalloc((void**)&d, n * 4));
  CK(cudaMemset(d, 0, n * 4));
  CK(cudaMalloc((void**)&e, m * 4));
  CK(cudaMemset(e, 0, m * 4));
  CK(cudaHostAlloc((void**)&pinned, m * 4, cudaHostAllocDefault));
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  unsigned int* scratch = nullptr;
  CK(cudaMalloc((void**)&scratch, 32 * 4));
  CK(cudaMemset(scratch, 0, 32 * 4));
  warm_up<<<1, 32, 0, a>>>(scratch);
  warm_up<<<1, 32, 0, b>>>(scratch);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  auto t0 = std::chrono::steady_clock::now();
  slow_add<<<(n + 255) / 256, 256, 0, a>>>(d, n, 30000000ull);
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaGetLastError());
  CK(cudaMemsetAsync(e, 0x5a, m * 4, b));
  CK(cudaMemcpyAsync(pinned, e, m * 4, cudaMemcpyDeviceToHost, b));
  CK(cudaLaunchHostFunc(b, host_fn, nullptr));
  auto t2 = std::chrono::steady_clock::now();
  CK(cudaStreamSynchronize(b));
  CK(cudaDeviceSynchronize());
  auto us = [](auto x, auto y) {
    return (long long)std::chrono::duration_cast<std::chrono::microseconds>(y - x).count();
  };
  printf("launch_returned_us %lld\n", us(t0, t1));
  printf("stream_calls_us %lld\n", us(t1, t2));
  printf("seen hostfn runs=%d\n", at_hostfn.load());
  std::vector<unsigned int> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0, bad_copy = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != 1;
  for (size_t i = 0; i < m; i++) bad_copy += pinned[i] != 0x5a5a5a5au;
  printf("check ordered first=%u bad=%zu copy_bad=%zu %s\n", h[0], bad, bad_copy,
         bad || bad_copy ? "FAIL" : "ok");
  bool ok = !bad && !bad_copy && (expect < 0 || at_hostfn == expect);
  printf("expected runs=%d\n", expect);
  printf("RESULT %s\n", ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}
