// cupti_taken: the application subscribes to CUPTI itself before it uses CUDA. One of the two
// subscribers (this program or a replay tool injected at cuInit) is refused; either way the
// program must run to the end with correct results.
#include <cuda_runtime.h>
#include <cupti.h>
#include <cstdio>

static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

__global__ void add_one(unsigned int* d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
}

int main() {
  CUpti_SubscriberHandle sub;
  CUptiResult r = cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, nullptr);
  printf("app_subscribe %d\n", (int)r);
  const int n = 1 << 16;
  unsigned int* a;
  if (cudaMalloc(&a, n * 4) != cudaSuccess) return 2;
  cudaMemset(a, 0, n * 4);
  for (int k = 0; k < 3; k++) add_one<<<n / 256, 256>>>(a, n);
  unsigned int h[n];
  cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
  unsigned long long s = 0;
  for (int i = 0; i < n; i++) s += h[i];
  printf("sum %llu\n", s);
  printf("RESULT %s\n", s == 3ull * n ? "OK" : "FAIL");
  return s == 3ull * n ? 0 : 1;
}
