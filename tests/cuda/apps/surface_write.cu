// surface_write: a kernel that increments every element of a CUDA array through a surface
// object (arrays are never snapshotted: under replay it must run once, `array_memory`), then a
// kernel incrementing device memory (replayed). Prints `RESULT OK` when each ran once.
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include "check.cuh"

__global__ void bump_array(cudaSurfaceObject_t s, int width) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x < width) {
    int v;
    surf2Dread(&v, s, x * 4, 0);
    surf2Dwrite(v + 1, s, x * 4, 0);
  }
}

__global__ void bump_plain(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

int main() {
  const int width = 256;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<int>();
  cudaArray_t array = nullptr;
  CK(cudaMallocArray(&array, &desc, width, 1, cudaArraySurfaceLoadStore));
  std::vector<int> host(width, 0);
  CK(cudaMemcpy2DToArray(array, 0, 0, host.data(), width * 4, width * 4, 1, cudaMemcpyHostToDevice));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = array;
  cudaSurfaceObject_t surface = 0;
  CK(cudaCreateSurfaceObject(&surface, &res));
  bump_array<<<1, width>>>(surface, width);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy2DFromArray(host.data(), width * 4, array, 0, 0, width * 4, 1, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int v : host) bad += v != 1;
  printf("check array surface=%llu first=%d bad=%d %s\n", (unsigned long long)surface, host[0], bad,
         bad ? "FAIL" : "ok");
  int* d = nullptr;
  CK(cudaMalloc((void**)&d, width * 4));
  CK(cudaMemset(d, 0, width * 4));
  bump_plain<<<1, width>>>(d, width);
  CK(cudaMemcpy(host.data(), d, width * 4, cudaMemcpyDeviceToHost));
  int bad_plain = 0;
  for (int v : host) bad_plain += v != 1;
  printf("check device first=%d bad=%d %s\n", host[0], bad_plain, bad_plain ? "FAIL" : "ok");
  CK(cudaDestroySurfaceObject(surface));
  CK(cudaFreeArray(array));
  CK(cudaFree(d));
  bool ok = bad == 0 && bad_plain == 0;
  printf("RESULT %s\n", ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}
