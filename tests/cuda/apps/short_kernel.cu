// short_kernel: LAUNCHES launches (default 50) of a kernel that runs for about 5 us of device
// time (one block spinning on %globaltimer), each synchronized, for comparing the tool's pass
// times (`pass_ns` of its records) with Nsight Compute's gpu__time_duration of the same
// launches. Prints `RESULT OK` when every launch ran once (a device counter).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include "check.cuh"

__global__ void five_us(unsigned int* count, unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
  if (threadIdx.x == 0) *count += 1;
}

int main() {
  const int launches = getenv("LAUNCHES") ? atoi(getenv("LAUNCHES")) : 50;
  unsigned int* count = nullptr;
  CK(cudaMalloc((void**)&count, 4));
  CK(cudaMemset(count, 0, 4));
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < launches; i++) {
    five_us<<<1, 32>>>(count, 5000ull);
    CK(cudaDeviceSynchronize());
  }
  unsigned int got = 0;
  CK(cudaMemcpy(&got, count, 4, cudaMemcpyDeviceToHost));
  printf("check short_kernel runs=%u want=%d %s\n", got, launches, got == (unsigned)launches ? "ok" : "FAIL");
  printf("RESULT %s\n", got == (unsigned)launches ? "OK" : "FAIL");
  return got == (unsigned)launches ? 0 : 1;
}
