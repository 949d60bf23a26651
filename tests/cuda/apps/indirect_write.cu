// indirect_write: kernels whose arguments do not name every buffer they write, under the
// arguments footprint (issue 14 item 2).
//
// - bump_through(cell, n): reads the address of `data` (64 MiB) from device memory (`cell`,
//   an 8-byte cudaMalloc) and adds i + 1 to data[i]: its arguments name only the cell. Launched
//   LAUNCHES times (default 2).
// - bump_table(table): a pointer table passed by value (as PyTorch's TensorListMetadata): four
//   1 MiB buffers, each word += its index + 1.
// - An unrelated 256 MiB allocation (`other`) that nothing writes: the footprint watches it.
//
// Every word must hold exactly one execution per launch; prints `RESULT OK`.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "check.cuh"

static const size_t kData = (64ull << 20) / 4;
static const size_t kPiece = (1ull << 20) / 4;

struct Table {
  unsigned int* p[4];
  size_t n;
};

__global__ void bump_through(unsigned int* const* cell, size_t n) {
  unsigned int* d = *cell;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    d[i] += (unsigned int)(i + 1);
}

__global__ void bump_table(Table t) {
  for (int k = 0; k < 4; k++)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < t.n;
         i += (size_t)gridDim.x * blockDim.x)
      t.p[k][i] += (unsigned int)(i + 1 + k);
}

int main() {
  const int launches = getenv("LAUNCHES") ? atoi(getenv("LAUNCHES")) : 2;
  unsigned int *data = nullptr, *other = nullptr;
  unsigned int** cell = nullptr;
  CK(cudaMalloc((void**)&data, kData * 4));
  CK(cudaMalloc((void**)&other, 256ull << 20));
  CK(cudaMalloc((void**)&cell, sizeof(unsigned int*)));
  CK(cudaMemset(data, 0, kData * 4));
  CK(cudaMemset(other, 0x5a, 256ull << 20));
  CK(cudaMemcpy(cell, &data, sizeof data, cudaMemcpyHostToDevice));
  Table t;
  t.n = kPiece;
  for (int k = 0; k < 4; k++) {
    CK(cudaMalloc((void**)&t.p[k], kPiece * 4));
    CK(cudaMemset(t.p[k], 0, kPiece * 4));
  }
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < launches; i++) {
    bump_through<<<256, 256>>>(cell, kData);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  bump_table<<<64, 256>>>(t);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  size_t bad = 0;
  std::vector<unsigned int> host(kData);
  CK(cudaMemcpy(host.data(), data, kData * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < kData; i++) {
    unsigned int want = (unsigned int)(i + 1) * (unsigned int)launches;
    if (host[i] != want && bad++ < 5) printf("data[%zu] = %u, want %u\n", i, host[i], want);
  }
  for (int k = 0; k < 4; k++) {
    CK(cudaMemcpy(host.data(), t.p[k], kPiece * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kPiece; i++) {
      unsigned int want = (unsigned int)(i + 1 + k);
      if (host[i] != want && bad++ < 5) printf("table[%d][%zu] = %u, want %u\n", k, i, host[i], want);
    }
  }
  std::vector<unsigned int> rest((256ull << 20) / 4);
  CK(cudaMemcpy(rest.data(), other, 256ull << 20, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < rest.size(); i++)
    if (rest[i] != 0x5a5a5a5au && bad++ < 5) printf("other[%zu] = %#x\n", i, rest[i]);
  printf("bad %zu\n", bad);
  printf(bad == 0 ? "RESULT OK\n" : "RESULT FAIL\n");
  return bad == 0 ? 0 : 1;
}
