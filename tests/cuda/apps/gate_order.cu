// gate_order: what a closed gate (cuStreamWaitValue32 on a word of mapped host memory, as the
// CUDA backend's windows use) on one stream does to work and markers on the others — the facts
// a pipelined window (a launch that returns behind a closed gate, its drain waiting for markers
// instead of idle streams) depends on. No tool: run plainly.
//
// For each case a gate is closed on stream A, then on stream B an event is recorded ("marker")
// and a tiny kernel is launched; after 50 ms the program asks whether the marker and B are done,
// opens the gate and checks that everything finishes. Cases (A / B):
//   legacy/blocking, legacy/nonblocking, blocking/legacy, blocking/blocking,
//   ptds/blocking, ptds/legacy, nonblocking/legacy
// (`legacy` is the legacy default stream, `ptds` the per-thread default stream, `blocking` a
// stream created without flags, `nonblocking` one with cudaStreamNonBlocking.) Also: a marker
// recorded on B *before* the gate was closed on A (`before`), which a drain would wait for.
//
// Without LAZY_FIRST the kernel is launched once before the cases (its module loaded).
//
// Output: one line per case, `case=A/B marker_before=<done|busy> marker_after=<done|busy>
// stream_b=<done|busy>`, then `RESULT OK` when every case finished once its gate opened.
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include "check.cuh"

__global__ void tiny(int* p) { atomicAdd(p, 1); }

static cudaStream_t make(const std::string& kind) {
  if (kind == "legacy") return cudaStreamLegacy;
  if (kind == "ptds") return cudaStreamPerThread;
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, kind == "nonblocking" ? cudaStreamNonBlocking
                                                         : cudaStreamDefault) != cudaSuccess) {
    printf("RESULT FAIL stream\n");
    exit(1);
  }
  return s;
}

static const char* state(cudaError_t e) {
  if (e == cudaSuccess) return "done";
  if (e == cudaErrorNotReady) return "busy";
  return cudaGetErrorName(e);
}

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  volatile unsigned int* gate_host = nullptr;
  CK(cudaHostAlloc((void**)&gate_host, 4096, cudaHostAllocMapped));
  CUdeviceptr gate_dev = 0;
  if (cuMemHostGetDevicePointer(&gate_dev, (void*)gate_host, 0) != CUDA_SUCCESS) {
    printf("RESULT FAIL no device pointer for the gate\n");
    return 1;
  }
  int* counter = nullptr;
  CK(cudaMalloc((void**)&counter, 4));
  // Loaded before any gate: a module's lazy load waits for the whole context (CUDA_MODULE_LOADING
  // =LAZY, the default), which would show as a launch blocked behind the gate. `LAZY_FIRST=1`
  // skips this warm-up to show it.
  if (!getenv("LAZY_FIRST")) {
    tiny<<<1, 1>>>(counter);
    CK(cudaDeviceSynchronize());
  }
  const char* cases[][2] = {{"legacy", "blocking"}, {"legacy", "nonblocking"},
                            {"blocking", "legacy"}, {"blocking", "blocking"},
                            {"ptds", "blocking"},   {"ptds", "legacy"},
                            {"nonblocking", "legacy"}};
  bool ok = true;
  for (auto& c : cases) {
    cudaStream_t a = make(c[0]), b = make(c[1]);
    CK(cudaDeviceSynchronize());
    *gate_host = 0;
    cudaEvent_t before, after;
    CK(cudaEventCreateWithFlags(&before, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
    printf("case=%s/%s:", c[0], c[1]);
    CK(cudaEventRecord(before, b));
    CUresult r = cuStreamWaitValue32((CUstream)a, gate_dev, 1, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
      printf("RESULT FAIL cuStreamWaitValue32 %d\n", (int)r);
      return 1;
    }
    // A host call that blocks behind the gate would hang here: a watchdog opens it after 3 s
    // and says so.
    bool rescued = false;
    std::thread watchdog([&] {
      for (int i = 0; i < 300 && *gate_host == 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (*gate_host == 0) {
        rescued = true;
        *gate_host = 1;
      }
    });
    auto h0 = std::chrono::steady_clock::now();
    CK(cudaEventRecord(after, b));
    double record_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
    tiny<<<1, 1, 0, b>>>(counter);
    CK(cudaGetLastError());
    double launch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const char* mb = state(cudaEventQuery(before));
    const char* ma = state(cudaEventQuery(after));
    const char* sb = state(cudaStreamQuery(b));
    *gate_host = 1;
    watchdog.join();
    auto t0 = std::chrono::steady_clock::now();
    cudaError_t done = cudaDeviceSynchronize();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    printf(" marker_before=%s marker_after=%s stream_b=%s record_ms=%.2f launch_ms=%.2f "
           "watchdog=%d finished=%s after_open_ms=%.2f\n",
           mb, ma, sb, record_ms, launch_ms, (int)rescued, cudaGetErrorName(done), ms);
    ok = ok && done == cudaSuccess;
    CK(cudaEventDestroy(before));
    CK(cudaEventDestroy(after));
    for (cudaStream_t s : {a, b})
      if (s != cudaStreamLegacy && s != cudaStreamPerThread) CK(cudaStreamDestroy(s));
  }
  printf("RESULT %s\n", ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}
