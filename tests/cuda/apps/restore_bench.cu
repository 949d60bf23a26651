// restore_bench: per-pass restore cost, side by side.
//
//   restore_bench cupti  <write_MiB> <footprint_MiB> <reps>
//       kernel time, device-to-device copy of the write set and of the footprint, and
//       cuptiCheckpointRestore with OPT_NONE and OPT_TRANSFER (medians; one in-place kernel
//       between restores). One JSON line.
//   restore_bench launch <write_MiB> <footprint_MiB> <launches>
//       the same footprint and kernel, launched <launches> times and nothing else: run it
//       under a replay tool (its records give the engine's restore times) or under a profiler.
//       Prints the wall time of the launches as one JSON line.
//
// The footprint is one allocation; the kernel adds 1 to every 32-bit word of its first
// <write_MiB> MiB, in place.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_checkpoint.h>
#include <algorithm>
#include <string>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace NV::Cupti::Checkpoint;

__global__ void add_one(uint4* p, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (; i < n; i += stride) {
    uint4 v = p[i];
    v.x += 1; v.y += 1; v.z += 1; v.w += 1;
    p[i] = v;
  }
}

#define CK(x)                                                                             \
  do {                                                                                    \
    auto e_ = (x);                                                                        \
    if (e_ != 0) {                                                                        \
      fprintf(stderr, "error %d at %s:%d (%s)\n", (int)e_, __FILE__, __LINE__, #x);       \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

static void launch(uint4* p, size_t words) {
  add_one<<<132 * 8, 512>>>(p, words);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s cupti|launch <write_MiB> <footprint_MiB> <reps>\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  size_t write = (size_t)atoll(argv[2]) << 20, footprint = (size_t)atoll(argv[3]) << 20;
  int reps = atoi(argv[4]);
  size_t words = write / 16;
  uint4* buf;
  CK(cudaMalloc(&buf, footprint));
  CK(cudaMemset(buf, 1, footprint));
  CK(cudaDeviceSynchronize());

  if (std::string(mode) == "launch") {
    double t0 = now_us();
    for (int r = 0; r < reps; r++) launch(buf, words);
    CK(cudaDeviceSynchronize());
    double t1 = now_us();
    printf("{\"mode\":\"launch\",\"write_mib\":%zu,\"footprint_mib\":%zu,\"launches\":%d,"
           "\"wall_ms\":%.3f}\n",
           write >> 20, footprint >> 20, reps, (t1 - t0) / 1e3);
    return 0;
  }

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto timed = [&](auto&& body) {
    std::vector<double> v;
    for (int r = 0; r < reps + 1; r++) {
      CK(cudaEventRecord(e0));
      body();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) v.push_back(ms * 1e3);  // the first one warms up
    }
    return median(v);
  };
  double kernel_us = timed([&] { launch(buf, words); });
  double copy_write_us, copy_footprint_us;
  {
    void* scratch;
    CK(cudaMalloc(&scratch, footprint));
    copy_write_us = timed([&] { CK(cudaMemcpyAsync(scratch, buf, write, cudaMemcpyDeviceToDevice)); });
    copy_footprint_us =
        timed([&] { CK(cudaMemcpyAsync(scratch, buf, footprint, cudaMemcpyDeviceToDevice)); });
    CK(cudaFree(scratch));  // not part of the footprint the checkpoints see
  }
  CUcontext ctx;
  CK(cuCtxGetCurrent(&ctx));
  double restore_us[2], save_ms[2];
  for (int opt = 0; opt < 2; opt++) {
    CUpti_Checkpoint cp = {CUpti_Checkpoint_STRUCT_SIZE};
    cp.ctx = ctx;
    cp.optimizations = opt ? CUPTI_CHECKPOINT_OPT_TRANSFER : CUPTI_CHECKPOINT_OPT_NONE;
    double t0 = now_us();
    CK(cuptiCheckpointSave(&cp));
    save_ms[opt] = (now_us() - t0) / 1e3;
    std::vector<double> v;
    for (int r = 0; r < reps + 1; r++) {
      launch(buf, words);
      CK(cudaDeviceSynchronize());
      double a = now_us();
      CK(cuptiCheckpointRestore(&cp));
      CK(cudaDeviceSynchronize());
      double b = now_us();
      if (r > 0) v.push_back(b - a);
    }
    restore_us[opt] = median(v);
    CK(cuptiCheckpointFree(&cp));
  }
  printf("{\"mode\":\"cupti\",\"write_mib\":%zu,\"footprint_mib\":%zu,\"reps\":%d,"
         "\"kernel_us\":%.2f,\"copy_write_us\":%.2f,\"copy_footprint_us\":%.2f,"
         "\"restore_none_us\":%.2f,\"restore_transfer_us\":%.2f,"
         "\"save_none_ms\":%.3f,\"save_transfer_ms\":%.3f}\n",
         write >> 20, footprint >> 20, reps, kernel_us, copy_write_us, copy_footprint_us,
         restore_us[0], restore_us[1], save_ms[0], save_ms[1]);
  return 0;
}
