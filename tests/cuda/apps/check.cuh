// What the CUDA test applications share: a checked runtime call and the device's clock.
#pragma once
#include <cstdio>
#include <cuda_runtime.h>

// Checks a runtime call inside main (or a function returning int): prints the error and
// `RESULT FAIL`, and returns 1.
#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      printf("cuda error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      printf("RESULT FAIL\n");                                                       \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

// The GPU's global timer, in nanoseconds.
__device__ inline unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
