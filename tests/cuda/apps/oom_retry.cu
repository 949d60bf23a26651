// oom_retry: an application that needs nearly all of the device's memory after its kernels
// ran. Under a replay tool the snapshot of a kernel's 2 GiB buffer can stay in device memory
// between launches (the tool's arena); each allocation below asks for everything the
// application could have without a tool (the device's free memory at start, less its own
// buffer and a margin), so it succeeds only if the tool gives its memory back.
//
//   malloc   cudaMalloc of the rest (the arena idle)
//   async    cudaMallocAsync of the rest on a stream (the default pool)
//   pitch    cudaMallocPitch of rows of 4 bytes whose pitch is far wider than the rows: the
//            bytes the call asks for (width x height) understate what it takes
//   window   cudaMalloc of the rest from a second thread while the first thread's kernel runs
//            (under a replay tool: while its window holds the arena)
//
// Between the allocations a kernel adds 1 to every element of the buffer (the window of the
// next allocation has a snapshot again); at the end every element must equal the number of
// those launches: one execution each. Prints one `case` line per allocation, then
// `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <thread>
#include "check.cuh"

__global__ void add_one(unsigned int* d, size_t n, unsigned long long spin_ns) {
  if (spin_ns && blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long until = now_ns() + spin_ns;
    while (now_ns() < until) {
    }
  }
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    d[i] += 1;
}

static const size_t kBuffer = 2ull << 30;
static const size_t kMargin = 512ull << 20;
static int failures = 0;

// Writes every byte of the new allocation and reads two of them back.
static bool touch(void* p, size_t size, cudaStream_t s) {
  if (cudaMemsetAsync(p, 0x5a, size, s) != cudaSuccess) return false;
  unsigned char b[2] = {0, 0};
  if (cudaMemcpyAsync(&b[0], p, 1, cudaMemcpyDeviceToHost, s) != cudaSuccess) return false;
  if (cudaMemcpyAsync(&b[1], (char*)p + size - 1, 1, cudaMemcpyDeviceToHost, s) != cudaSuccess)
    return false;
  if (cudaStreamSynchronize(s) != cudaSuccess) return false;
  return b[0] == 0x5a && b[1] == 0x5a;
}

static void report(const char* name, cudaError_t e, size_t asked, bool written) {
  bool ok = e == cudaSuccess && written;
  printf("case %s asked=%zu MiB status=%s written=%d %s\n", name, asked >> 20,
         cudaGetErrorName(e), written ? 1 : 0, ok ? "ok" : "FAIL");
  if (!ok) failures++;
}

int main() {
  CK(cudaFree(0));
  size_t free0 = 0, total = 0;
  CK(cudaMemGetInfo(&free0, &total));
  const size_t rest = free0 - kBuffer - kMargin;
  printf("device free=%zu MiB total=%zu MiB rest=%zu MiB\n", free0 >> 20, total >> 20,
         rest >> 20);

  const size_t n = kBuffer / 4;
  unsigned int* buf = nullptr;
  CK(cudaMalloc((void**)&buf, kBuffer));
  CK(cudaMemset(buf, 0, kBuffer));
  unsigned int launches = 0;
  auto bump = [&](unsigned long long spin_ns) {
    add_one<<<1024, 256>>>(buf, n, spin_ns);
    launches++;
    return cudaDeviceSynchronize();
  };
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // malloc
  CK(bump(0));
  {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, rest);
    bool w = e == cudaSuccess && touch(p, rest, s);
    report("malloc", e, rest, w);
    if (e == cudaSuccess) CK(cudaFree(p));
  }

  // async
  CK(bump(0));
  {
    void* p = nullptr;
    cudaError_t e = cudaMallocAsync(&p, rest, s);
    bool w = e == cudaSuccess && touch(p, rest, s);
    report("async", e, rest, w);
    if (e == cudaSuccess) {
      CK(cudaFreeAsync(p, s));
      CK(cudaStreamSynchronize(s));
    }
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    CK(cudaMemPoolTrimTo(pool, 0));
  }

  // pitch: rows of 4 bytes, each taking a full pitch.
  CK(bump(0));
  {
    void* p = nullptr;
    size_t pitch = 0;
    // The pitch the device gives a 4-byte row, from a small allocation.
    CK(cudaMallocPitch(&p, &pitch, 4, 16));
    CK(cudaFree(p));
    const size_t rows = rest / pitch;
    p = nullptr;
    size_t got = 0;
    cudaError_t e = cudaMallocPitch(&p, &got, 4, rows);
    bool w = e == cudaSuccess && got == pitch && touch(p, got * rows, s);
    printf("pitch row=4 pitch=%zu rows=%zu\n", pitch, rows);
    report("pitch", e, got * rows, w);
    if (e == cudaSuccess) CK(cudaFree(p));
  }

  // window: a second thread allocates while this thread's kernel runs (300 ms per pass).
  // The thread starts first: a launch that returned only after its passes would otherwise
  // leave nothing to overlap.
  {
    cudaError_t e = cudaErrorUnknown;
    bool w = false;
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      void* p = nullptr;
      cudaStream_t s2;
      if (cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) != cudaSuccess) return;
      e = cudaMalloc(&p, rest);
      w = e == cudaSuccess && touch(p, rest, s2);
      if (e == cudaSuccess) cudaFree(p);
      cudaStreamDestroy(s2);
    });
    add_one<<<1024, 256>>>(buf, n, 300ull * 1000 * 1000);
    launches++;
    t.join();
    CK(cudaDeviceSynchronize());
    report("window", e, rest, w);
  }

  unsigned int* back = (unsigned int*)malloc(kBuffer);
  CK(cudaMemcpy(back, buf, kBuffer, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += back[i] != launches;
  printf("check buffer launches=%u first=%u bad=%zu %s\n", launches, back[0], bad,
         bad ? "FAIL" : "ok");
  if (bad) failures++;
  printf("RESULT %s\n", failures ? "FAIL" : "OK");
  return failures ? 1 : 0;
}
