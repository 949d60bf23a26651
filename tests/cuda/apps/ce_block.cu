// ce_block: what a call of the application that waits behind a closed gate does to work of
// ours on a non-blocking stream. A stream memory wait on a mapped flag stands for a window's
// gate on the legacy (or a created) stream; the application's next call goes behind it on its
// own thread: an H2D copy from pageable or pinned memory, or a kernel. Then work of ours on a
// non-blocking stream: a D2D copy, a D2H copy to pinned memory, or a kernel. Prints whether
// ours completed within 3 s, then opens the gate.
//   ce_block APP OURS STREAM   (APP: pageable|pinned|kernel, OURS: d2d|d2h|kernel,
//                               STREAM: legacy|created)
// On an H100 (driver 580.159.04) a pageable copy behind the gate blocks the other thread's
// next driver call (cudaEventCreate): gpu.sh kills such runs after 7 s.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <chrono>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
__global__ void touch(int* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1; }

static bool wait_event(cudaEvent_t ev, double s) {
  auto t0 = std::chrono::steady_clock::now();
  while (cudaEventQuery(ev) == cudaErrorNotReady) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

int main(int argc, char** argv) {
  const char* app_kind = argc > 1 ? argv[1] : "pageable";   // pageable | pinned | kernel
  const char* ours = argc > 2 ? argv[2] : "d2d";            // d2d | d2h | kernel
  const char* app_stream_kind = argc > 3 ? argv[3] : "legacy"; // legacy | created
  size_t bytes = 64 << 20;
  CK(cudaSetDevice(0));
  int *dev_a, *dev_b; CK(cudaMalloc(&dev_a, bytes)); CK(cudaMalloc(&dev_b, bytes));
  unsigned* flag; CK(cudaHostAlloc(&flag, 4096, cudaHostAllocMapped)); *flag = 0;
  CUdeviceptr flag_dev; CK((cudaError_t)cuMemHostGetDevicePointer(&flag_dev, flag, 0));
  char* pageable = (char*)malloc(bytes); memset(pageable, 1, bytes);
  char* pinned; CK(cudaHostAlloc(&pinned, bytes, 0));
  cudaStream_t app = 0;
  if (!strcmp(app_stream_kind, "created")) CK(cudaStreamCreate(&app));
  cudaStream_t mine; CK(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking));
  // The gate: the app stream waits until *flag >= 1.
  CUresult r = cuStreamWaitValue32((CUstream)app, flag_dev, 1, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) { printf("cuStreamWaitValue32 failed %d\n", r); return 1; }
  // The application's next call, on its own thread (it may block).
  std::thread t([&] {
    if (!strcmp(app_kind, "pageable")) CK(cudaMemcpyAsync(dev_a, pageable, bytes, cudaMemcpyHostToDevice, app));
    else if (!strcmp(app_kind, "pinned")) CK(cudaMemcpyAsync(dev_a, pinned, bytes, cudaMemcpyHostToDevice, app));
    else touch<<<(bytes / 4 + 255) / 256, 256, 0, app>>>(dev_a, bytes / 4);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  printf("  [%s %s %s] issuing ours\n", app_kind, ours, app_stream_kind); fflush(stdout);
  if (!strcmp(ours, "d2d")) CK(cudaMemcpyAsync(dev_b, dev_a, bytes, cudaMemcpyDeviceToDevice, mine));
  else if (!strcmp(ours, "d2h")) CK(cudaMemcpyAsync(pinned, dev_b, bytes, cudaMemcpyDeviceToHost, mine));
  else touch<<<(bytes / 4 + 255) / 256, 256, 0, mine>>>(dev_b, bytes / 4);
  printf("  issued\n"); fflush(stdout);
  CK(cudaEventRecord(ev, mine));
  bool done = wait_event(ev, 3.0);
  printf("app %-8s on %-7s stream behind a gate; ours %-6s on a non-blocking stream: %s\n",
         app_kind, app_stream_kind, ours, done ? "completed" : "STUCK (3 s)");
  fflush(stdout);
  *flag = 1;  // open the gate
  t.join();
  CK(cudaDeviceSynchronize());
  printf("  gate opened, all done\n"); fflush(stdout);
  return 0;
}
