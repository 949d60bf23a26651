// overlap: nobody sees the launch complete before its replay window ends. A 30 ms kernel
// increments an execution counter in mapped pinned host memory (reached through a __device__
// pointer; run with ROCPROF_REPLAY_HOST_MEMORY=repeat the launch is replayed and the counter,
// which the engine does not restore, counts every pass) and adds 1 to a device buffer. Right after the launch the application
// records an event and polls it and cudaStreamQuery from another thread; the moment either
// reports completion it reads the counter, which must already equal the number of passes
// (EXPECT_RUNS, default 1). A host function enqueued after the kernel and
// cudaStreamSynchronize check the same. The host meanwhile does its own work: the launch call
// must return well before the window ends.
//
// Prints `launch_returned_us`, `complete_ms`, one `seen <who> runs=<n>` line each and
// `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include "check.cuh"

__device__ unsigned int* runs_ptr;

// A first launch on the stream, before the one measured: the tool's one-time set-up per
// context (its gate page and the self-test that proves it, about 80 ms on the H200) is not
// what the measured launch is about.
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
static std::atomic<unsigned int> at_hostfn{0};

static void CUDART_CB host_fn(void*) { at_hostfn = *runs; }

int main() {
  const unsigned int expect = getenv("EXPECT_RUNS") ? (unsigned)atoi(getenv("EXPECT_RUNS")) : 1;
  const size_t n = 1 << 16;
  unsigned int* h_runs = nullptr;
  CK(cudaHostAlloc((void**)&h_runs, sizeof(unsigned int), cudaHostAllocMapped));
  runs = h_runs;
  *runs = 0;
  unsigned int* d_runs = nullptr;
  CK(cudaHostGetDevicePointer((void**)&d_runs, h_runs, 0));
  CK(cudaMemcpyToSymbol(runs_ptr, &d_runs, sizeof(d_runs)));
  unsigned int* d = nullptr;
  CK(cudaMalloc((void**)&d, n * 4));
  CK(cudaMemset(d, 0, n * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  unsigned int* scratch = nullptr;
  CK(cudaMalloc((void**)&scratch, 32 * 4));
  CK(cudaMemset(scratch, 0, 32 * 4));
  warm_up<<<1, 32, 0, s>>>(scratch);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(s));
  CK(cudaDeviceSynchronize());

  auto t0 = std::chrono::steady_clock::now();
  slow_add<<<(n + 255) / 256, 256, 0, s>>>(d, n, 30000000ull);
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaGetLastError());
  CK(cudaEventRecord(ev, s));
  unsigned int at_event = 0, at_query = 0;
  std::thread watcher([&] {
    bool e = false, q = false;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((!e || !q) && std::chrono::steady_clock::now() < end) {
      if (!e && cudaEventQuery(ev) == cudaSuccess) { at_event = *runs; e = true; }
      if (!q && cudaStreamQuery(s) == cudaSuccess) { at_query = *runs; q = true; }
    }
  });
  // The host's own work meanwhile (the launch call returned).
  volatile double x = 0;
  for (int i = 0; i < 1000000; i++) x = x + i * 0.5;
  watcher.join();
  auto t2 = std::chrono::steady_clock::now();
  CK(cudaLaunchHostFunc(s, host_fn, nullptr));
  CK(cudaStreamSynchronize(s));
  unsigned int at_sync = *runs;
  auto ms = [](auto a, auto b) {
    return (long long)std::chrono::duration_cast<std::chrono::microseconds>(b - a).count();
  };
  printf("launch_returned_us %lld\n", ms(t0, t1));
  printf("complete_ms %.1f\n", ms(t0, t2) / 1000.0);
  printf("seen event runs=%u\n", at_event);
  printf("seen query runs=%u\n", at_query);
  printf("seen hostfn runs=%u\n", at_hostfn.load());
  printf("seen sync runs=%u\n", at_sync);
  std::vector<unsigned int> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != 1;
  printf("check overlap first=%u bad=%zu %s\n", h[0], bad, bad ? "FAIL" : "ok");
  bool ok = !bad && at_event == expect && at_query == expect && at_hostfn == expect &&
            at_sync == expect;
  printf("expected runs=%u\n", expect);
  printf("RESULT %s\n", ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}
