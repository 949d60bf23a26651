// managed_global: `__managed__` variables are managed memory the host reads and writes
// directly, at any time (on a device with concurrent managed access, while kernels run). A
// kernel that increments one of them (`bump_managed`, about 20 ms of spinning first) runs
// while the host writes another (`b`: 7 at 1 ms, 8 at 30 ms, during what would be the replay
// passes). Under replay the launch must run once and the host's writes stand: a restore of
// module variables would undo them. Then a kernel incrementing a plain `__device__` variable
// (`bump_device`: it runs once too, as its module has managed variables). Prints `RESULT OK`
// when a == 1, b == 8 and d == 1.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <thread>
#include "check.cuh"

__managed__ unsigned int a;
__managed__ unsigned int b;
__device__ unsigned int d;

__global__ void bump_managed(unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
  a += 1;
}

__global__ void bump_device() { d += 1; }

int main() {
  int concurrent = 0;
  CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
  if (!concurrent) {
    printf("no concurrent managed access on this device: the host may not write managed "
           "memory while a kernel runs\nRESULT SKIP\n");
    return 0;
  }
  a = 0;
  b = 0;
  CK(cudaDeviceSynchronize());
  bump_managed<<<1, 1>>>(20000000ull);
  CK(cudaGetLastError());
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  b = 7;
  std::this_thread::sleep_for(std::chrono::milliseconds(29));
  b = 8;
  CK(cudaDeviceSynchronize());
  unsigned int got_a = a, got_b = b;
  printf("check managed a=%u (want 1) b=%u (want 8) %s\n", got_a, got_b,
         got_a == 1 && got_b == 8 ? "ok" : "FAIL");
  bump_device<<<1, 1>>>();
  CK(cudaDeviceSynchronize());
  unsigned int got_d = 0;
  CK(cudaMemcpyFromSymbol(&got_d, d, 4));
  printf("check device d=%u (want 1) %s\n", got_d, got_d == 1 ? "ok" : "FAIL");
  bool ok = got_a == 1 && got_b == 8 && got_d == 1;
  printf("RESULT %s\n", ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}
