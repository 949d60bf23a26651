// record_kinds: which of CUPTI's kernel-record timestamps spans what Nsight Compute's
// gpu__time_duration does. Standalone (no SDK): LAUNCHES launches (default 50) of the same
// ~5 us kernel as short_kernel.cu, each synchronized, with kernel records of one kind
// (argv[1]: `concurrent` = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, what the SDK enables;
// `serial` = CUPTI_ACTIVITY_KIND_KERNEL) and latency timestamps on, then the medians of
// end - start, end - submitted and start - submitted over the kernel's records:
//
//   kind=concurrent ahead=idle records=50 start_end_ns=5856 submitted_end_ns=... ...
//
// argv[2] says what the stream holds ahead of each timed launch: `idle` (nothing), `busy` (a
// 50 us kernel enqueued just before it, still running when it is submitted) or `gated` (a
// cuStreamWaitValue32 on a mapped host word, opened by the host 200 us after the launch was
// enqueued: the shape of the SDK's timed passes). Whether `submitted` moves with what is ahead
// says whether end - submitted can time a pass.
//
// gpu.sh's `record-kinds` step prints both kinds beside ncu's figure for short_kernel.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "check.cuh"
#include "cupti_check.cuh"

__global__ void fifty_us(unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
}

__global__ void five_us(unsigned int* count, unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
  if (threadIdx.x == 0) *count += 1;
}

struct Times {
  unsigned long long start, end, queued, submitted;
};
static std::vector<Times> g_times;
static unsigned g_records = 0;

static void CUPTIAPI request(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

static void CUPTIAPI complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      continue;
    auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
    g_records++;
    if (k->name && strstr(k->name, "five_us"))
      g_times.push_back({k->start, k->end, k->queued, k->submitted});
  }
  free(buffer);
}

static double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "concurrent";
  CUpti_ActivityKind kind;
  if (!strcmp(mode, "concurrent")) {
    kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  } else if (!strcmp(mode, "serial")) {
    kind = CUPTI_ACTIVITY_KIND_KERNEL;
  } else {
    printf("error usage: record_kinds concurrent|serial [idle|busy|gated]\n");
    return 2;
  }
  const char* ahead = argc > 2 ? argv[2] : "idle";
  if (strcmp(ahead, "idle") && strcmp(ahead, "busy") && strcmp(ahead, "gated")) {
    printf("error usage: record_kinds concurrent|serial [idle|busy|gated]\n");
    return 2;
  }
  const int launches = getenv("LAUNCHES") ? atoi(getenv("LAUNCHES")) : 50;
  CP(cuptiActivityRegisterCallbacks(request, complete));
  CP(cuptiActivityEnableLatencyTimestamps(1));
  CP(cuptiActivityEnable(kind));
  unsigned int* count = nullptr;
  CK(cudaMalloc((void**)&count, 4));
  CK(cudaMemset(count, 0, 4));
  volatile unsigned int* gate = nullptr;
  CK(cudaHostAlloc((void**)&gate, 4, cudaHostAllocMapped));
  *gate = 0;
  CUdeviceptr gate_dev = 0;
  CK(cudaHostGetDevicePointer((void**)&gate_dev, (void*)gate, 0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Warm-up: the first launch of a kernel loads its module (lazy loading), which
  // synchronizes the context — behind a closed gate that would never return.
  fifty_us<<<1, 32, 0, stream>>>(1000ull);
  five_us<<<1, 32, 0, stream>>>(count, 1000ull);
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(count, 0, 4));
  CK(cudaDeviceSynchronize());
  CP(cuptiActivityFlushAll(1));
  g_times.clear();
  g_records = 0;
  for (int i = 0; i < launches; i++) {
    if (!strcmp(ahead, "busy")) fifty_us<<<1, 32, 0, stream>>>(50000ull);
    if (!strcmp(ahead, "gated")) {
      CUresult r = cuStreamWaitValue32(stream, gate_dev, i + 1, CU_STREAM_WAIT_VALUE_GEQ);
      if (r != CUDA_SUCCESS) {
        printf("error cuStreamWaitValue32 %d\n", (int)r);
        return 1;
      }
    }
    five_us<<<1, 32, 0, stream>>>(count, 5000ull);
    if (!strcmp(ahead, "gated")) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      *gate = i + 1;
    }
    CK(cudaStreamSynchronize(stream));
  }
  CP(cuptiActivityFlushAll(1));
  std::vector<double> run, from_submit, to_start, from_queue;
  for (const Times& t : g_times) {
    run.push_back(double(t.end - t.start));
    if (t.submitted && t.submitted <= t.start) {
      from_submit.push_back(double(t.end - t.submitted));
      to_start.push_back(double(t.start - t.submitted));
    }
    if (t.queued && t.queued <= t.start) from_queue.push_back(double(t.end - t.queued));
  }
  printf("kind=%s ahead=%s records=%zu (all kernels %u) start_end_ns=%.0f submitted_end_ns=%.0f "
         "submitted_start_ns=%.0f queued_end_ns=%.0f (with latency timestamps: %zu)\n",
         mode, ahead, g_times.size(), g_records, median(run), median(from_submit), median(to_start),
         median(from_queue), from_submit.size());
  unsigned int got = 0;
  CK(cudaMemcpy(&got, count, 4, cudaMemcpyDeviceToHost));
  printf("check runs=%u want=%d %s\n", got, launches, got == (unsigned)launches ? "ok" : "FAIL");
  return got == (unsigned)launches && g_times.size() == (size_t)launches ? 0 : 1;
}
