// host_memory: kernels that write host memory the device can reach — mapped pinned memory
// (cudaHostAlloc with cudaHostAllocMapped), page-locked memory (cudaMallocHost) and registered
// memory (cudaHostRegister) — and one that writes device memory. Each kernel adds 1 to every
// element, so a replay that repeats the host writes shows as a value above 1. Then one kernel
// per host buffer that only reads it, adding it into a zeroed device buffer (a replay must
// leave 1 there too). Prints one `check` line per buffer and `RESULT OK` or `RESULT FAIL`.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "check.cuh"

__global__ void add_one(unsigned int* d, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
}

// Reads host memory, writes device memory.
__global__ void add_from(unsigned int* d, const unsigned int* s, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += s[i];
}

static int failures = 0;

static void check(const char* name, const unsigned int* h, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != 1;
  printf("check %s first=%u bad=%zu %s\n", name, h[0], bad, bad ? "FAIL" : "ok");
  if (bad) failures++;
}

int main() {
  const size_t n = 4096;
  unsigned int* mapped = nullptr;
  CK(cudaHostAlloc((void**)&mapped, n * 4, cudaHostAllocMapped));
  memset(mapped, 0, n * 4);
  add_one<<<(n + 255) / 256, 256>>>(mapped, n);
  CK(cudaDeviceSynchronize());
  check("mapped", mapped, n);

  unsigned int* pinned = nullptr;
  CK(cudaMallocHost((void**)&pinned, n * 4));
  memset(pinned, 0, n * 4);
  add_one<<<(n + 255) / 256, 256>>>(pinned, n);
  CK(cudaDeviceSynchronize());
  check("pinned", pinned, n);

  unsigned int* plain = (unsigned int*)calloc(n, 4);
  CK(cudaHostRegister(plain, n * 4, cudaHostRegisterMapped));
  add_one<<<(n + 255) / 256, 256>>>(plain, n);
  CK(cudaDeviceSynchronize());
  check("registered", plain, n);

  unsigned int* dev = nullptr;
  CK(cudaMalloc((void**)&dev, n * 4));
  CK(cudaMemset(dev, 0, n * 4));
  add_one<<<(n + 255) / 256, 256>>>(dev, n);
  unsigned int* back = (unsigned int*)malloc(n * 4);
  CK(cudaMemcpy(back, dev, n * 4, cudaMemcpyDeviceToHost));
  check("device", back, n);

  const unsigned int* readers[] = {mapped, pinned, plain};
  const char* names[] = {"read_mapped", "read_pinned", "read_registered"};
  const char* unchanged[] = {"mapped_after_read", "pinned_after_read", "registered_after_read"};
  for (int k = 0; k < 3; k++) {
    CK(cudaMemset(dev, 0, n * 4));
    add_from<<<(n + 255) / 256, 256>>>(dev, readers[k], n);
    CK(cudaMemcpy(back, dev, n * 4, cudaMemcpyDeviceToHost));
    check(names[k], back, n);
    check(unchanged[k], readers[k], n);
  }

  CK(cudaHostUnregister(plain));
  CK(cudaFreeHost(pinned));
  CK(cudaFreeHost(mapped));
  CK(cudaFree(dev));
  printf("RESULT %s\n", failures ? "FAIL" : "OK");
  return failures ? 1 : 0;
}
