// flush_cost: what one cuptiActivityFlushAll(0) costs after a timed ~5 us kernel, the way the
// SDK's kernel clock asks for a pass's record (kernel_clock.rs), and what makes it slow.
// Standalone (no SDK). Each of LAUNCHES iterations: `extra` tiny kernels of another stream
// (the window's own copy, compare and fingerprint kernels between passes), then the timed
// kernel, a synchronize, and flushes until its record has arrived; the medians of the first
// flush's time and of the flushes needed are printed:
//
//   latency=1 extra=10 busy=0 toggle=0 flush_us=31.2 flushes=1.0 records_per_flush=11.0 ...
//
// argv: latency (0|1: cuptiActivityEnableLatencyTimestamps), extra (kernels per iteration),
// busy (0|1: a 2 ms kernel of a third stream runs while the flush is made), toggle (0|1: kernel
// records enabled only around the timed kernel, cuptiActivityDisable after it; the enable and
// disable are timed too). Environment: THREADS=n other threads that each launched a kernel and
// then sleep (as a PyTorch process has), ALLOCS=n device allocations of 2 MiB, STREAMS=n
// streams that each ran a kernel, SUBSCRIBE=1 a CUPTI callback subscriber on the driver API
// and resource domains (as a tool like ours has) — what else a process brings to a flush.
// BUFFER=bytes and MAXREC=n size the record buffers; NOFLUSH=1 waits (up to 20 ms) for CUPTI to
// deliver the record by itself before flushing, and prints how long that took (`arrive_us`).
// GAP_US=n idles n us before each timed kernel (a replay window's other work between two
// passes), sleeping, or spinning with SPIN=1; BGFLUSH_US=n has another thread flush every n us
// meanwhile. CTX2=1 runs `busy`'s kernel in a second context of the device (another GPU's
// window, as far as CUPTI's buffers go) instead of on a third stream. PREFLUSH=1 flushes once
// right before the timed kernel is launched (timed as `preflush_us`): whether a flush made
// before the pass makes the one after it cheap.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include "check.cuh"
#include "cupti_check.cuh"

__global__ void timed(unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
}

__global__ void busy_kernel(unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
}

__global__ void tiny(unsigned int* p) {
  if (threadIdx.x == 0) p[blockIdx.x] += 1;
}

static std::atomic<unsigned> g_timed{0};
static std::atomic<unsigned> g_records{0};

static size_t g_buffer = 64 << 10;
static size_t g_max_records = 0;

static void CUPTIAPI request(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = g_buffer;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = g_max_records;
}

static void CUPTIAPI complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    g_records++;
    auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
    if (k->name && strstr(k->name, "timed")) g_timed++;
  }
  free(buffer);
}

static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

static double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

int main(int argc, char** argv) {
  const int latency = argc > 1 ? atoi(argv[1]) : 1;
  const int extra = argc > 2 ? atoi(argv[2]) : 0;
  const int busy = argc > 3 ? atoi(argv[3]) : 0;
  const int toggle = argc > 4 ? atoi(argv[4]) : 0;
  const int launches = getenv("LAUNCHES") ? atoi(getenv("LAUNCHES")) : 200;
  if (getenv("BUFFER")) g_buffer = strtoull(getenv("BUFFER"), nullptr, 0);
  if (getenv("MAXREC")) g_max_records = strtoull(getenv("MAXREC"), nullptr, 0);
  const bool noflush = getenv("NOFLUSH") && atoi(getenv("NOFLUSH"));
  const int gap_us = getenv("GAP_US") ? atoi(getenv("GAP_US")) : 0;
  const int bg_us = getenv("BGFLUSH_US") ? atoi(getenv("BGFLUSH_US")) : 0;
  const bool spin = getenv("SPIN") && atoi(getenv("SPIN"));
  const bool preflush = getenv("PREFLUSH") && atoi(getenv("PREFLUSH"));
  std::vector<double> arrive_us;
  if (getenv("SUBSCRIBE") && atoi(getenv("SUBSCRIBE"))) {
    CUpti_SubscriberHandle sub;
    CP(cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, nullptr));
    CP(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API));
    CP(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE));
  }
  CP(cuptiActivityRegisterCallbacks(request, complete));
  if (latency) CP(cuptiActivityEnableLatencyTimestamps(1));
  if (!toggle) CP(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  unsigned int* p = nullptr;
  CK(cudaMalloc((void**)&p, 4096));
  CK(cudaMemset(p, 0, 4096));
  const int threads = getenv("THREADS") ? atoi(getenv("THREADS")) : 0;
  const int allocs = getenv("ALLOCS") ? atoi(getenv("ALLOCS")) : 0;
  const int streams = getenv("STREAMS") ? atoi(getenv("STREAMS")) : 0;
  std::atomic<bool> stop{false};
  std::vector<std::thread> idle;
  for (int t = 0; t < threads; t++)
    idle.emplace_back([&stop, p] {
      tiny<<<1, 32>>>(p);
      cudaDeviceSynchronize();
      while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  std::thread flusher;
  if (bg_us > 0)
    flusher = std::thread([&stop, bg_us] {
      while (!stop.load()) {
        cuptiActivityFlushAll(0);
        std::this_thread::sleep_for(std::chrono::microseconds(bg_us));
      }
    });
  std::vector<void*> blocks(allocs);
  for (auto& b : blocks) CK(cudaMalloc(&b, 2 << 20));
  std::vector<cudaStream_t> many(streams);
  for (auto& m : many) {
    CK(cudaStreamCreateWithFlags(&m, cudaStreamNonBlocking));
    tiny<<<1, 32, 0, m>>>(p);
  }
  CK(cudaDeviceSynchronize());
  cudaStream_t s, own, third;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&third, cudaStreamNonBlocking));
  const bool ctx2 = getenv("CTX2") && atoi(getenv("CTX2"));
  CUcontext primary = nullptr, second = nullptr;
  cudaStream_t other = third;
  if (ctx2) {
    CUdevice dev;
    if (cuCtxGetCurrent(&primary) != CUDA_SUCCESS || cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        cuCtxCreate(&second, nullptr, 0, dev) != CUDA_SUCCESS) {
      printf("error: no second context\n");
      return 1;
    }
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    busy_kernel<<<1, 32, 0, other>>>(1000ull);
    CK(cudaStreamSynchronize(other));
    cuCtxSetCurrent(primary);
  }
  timed<<<1, 32, 0, s>>>(1000ull);
  tiny<<<1, 32, 0, own>>>(p);
  CK(cudaDeviceSynchronize());
  CP(cuptiActivityFlushAll(1));
  std::vector<double> flush_us, flushes, per_flush, enable_us, disable_us, preflush_us;
  for (int i = 0; i < launches; i++) {
    if (gap_us > 0 && spin) {
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(gap_us);
      while (std::chrono::steady_clock::now() < until) {
      }
    } else if (gap_us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    }
    for (int e = 0; e < extra; e++) tiny<<<4, 32, 0, own>>>(p);
    CK(cudaStreamSynchronize(own));
    if (busy && ctx2) {
      cuCtxSetCurrent(second);
      busy_kernel<<<1, 32, 0, other>>>(2000000ull);
      cuCtxSetCurrent(primary);
    } else if (busy) {
      busy_kernel<<<1, 32, 0, third>>>(2000000ull);
    }
    if (toggle) {
      auto t = std::chrono::steady_clock::now();
      CP(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
      enable_us.push_back(us_since(t));
    }
    if (preflush) {
      auto t = std::chrono::steady_clock::now();
      CP(cuptiActivityFlushAll(0));
      preflush_us.push_back(us_since(t));
    }
    unsigned before = g_timed.load(), records = g_records.load();
    timed<<<1, 32, 0, s>>>(5000ull);
    CK(cudaStreamSynchronize(s));
    if (toggle) {
      auto t = std::chrono::steady_clock::now();
      CP(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
      disable_us.push_back(us_since(t));
    }
    if (noflush) {
      auto t = std::chrono::steady_clock::now();
      auto until = t + std::chrono::milliseconds(20);
      while (g_timed.load() == before && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(5));
      arrive_us.push_back(g_timed.load() == before ? -1 : us_since(t));
    }
    int n = 0;
    double first = -1;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (g_timed.load() == before && std::chrono::steady_clock::now() < deadline) {
      auto t = std::chrono::steady_clock::now();
      CP(cuptiActivityFlushAll(0));
      if (first < 0) first = us_since(t);
      n++;
    }
    flush_us.push_back(first);
    flushes.push_back(n);
    per_flush.push_back(n ? double(g_records.load() - records) / n : 0);
    if (busy && ctx2) {
      cuCtxSetCurrent(second);
      CK(cudaStreamSynchronize(other));
      cuCtxSetCurrent(primary);
    } else if (busy) {
      CK(cudaStreamSynchronize(third));
    }
  }
  stop = true;
  for (auto& t : idle) t.join();
  if (flusher.joinable()) flusher.join();
  if (noflush) {
    size_t late = std::count(arrive_us.begin(), arrive_us.end(), -1.0);
    printf("noflush buffer=%zu maxrec=%zu arrive_us=%.1f (not within 20 ms: %zu of %zu)\n",
           g_buffer, g_max_records, median(arrive_us), late, arrive_us.size());
  }
  printf("latency=%d extra=%d busy=%d toggle=%d threads=%d allocs=%d streams=%d gap_us=%d "
         "bgflush_us=%d flush_us=%.1f flushes=%.1f records_per_flush=%.1f enable_us=%.1f "
         "disable_us=%.1f preflush_us=%.1f timed_records=%u of %d\n",
         latency, extra, busy, toggle, threads, allocs, streams, gap_us, bg_us, median(flush_us),
         median(flushes),
         median(per_flush), median(enable_us), median(disable_us), median(preflush_us),
         g_timed.load(), launches + 1);
  return 0;
}
