// write_set: LAUNCHES launches (default 2) of a kernel that writes 1% of a 256 MiB buffer:
// every 100th 4 KiB page, whole (656 pages, 2 624 KiB), each word w of such a page gets
// `+= w + 1` (not idempotent: a replay that does not restore shows). Under the tool the snapshot
// is the whole buffer while write-set restore (the compare kernel) restores only those pages.
// Prints the expected write set (`pages`, `written_bytes_per_launch`) and `RESULT OK` when every
// word holds exactly LAUNCHES executions' worth.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "check.cuh"

static const size_t kBytes = 256ull << 20;
static const size_t kWords = kBytes / 4;
static const size_t kPageWords = 4096 / 4;
static const size_t kStride = 100;  // pages

__global__ void touch_pages(unsigned int* data, size_t pages) {
  // One block per written page, 256 threads, four words each.
  for (size_t p = blockIdx.x; p < pages; p += gridDim.x) {
    size_t base = p * kStride * kPageWords;
    for (size_t w = threadIdx.x; w < kPageWords; w += blockDim.x) {
      data[base + w] += (unsigned int)(base + w + 1);
    }
  }
}

int main() {
  const int launches = getenv("LAUNCHES") ? atoi(getenv("LAUNCHES")) : 2;
  const size_t total_pages = kBytes / 4096;
  const size_t pages = (total_pages + kStride - 1) / kStride;
  unsigned int* data = nullptr;
  CK(cudaMalloc((void**)&data, kBytes));
  CK(cudaMemset(data, 0, kBytes));
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < launches; i++) {
    touch_pages<<<(unsigned)pages, 256>>>(data, pages);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  std::vector<unsigned int> host(kWords);
  CK(cudaMemcpy(host.data(), data, kBytes, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t w = 0; w < kWords; w++) {
    size_t page = w / kPageWords;
    unsigned int want = page % kStride == 0 ? (unsigned int)(w + 1) * (unsigned int)launches : 0u;
    if (host[w] != want) {
      if (bad < 5) printf("word %zu: %u, want %u\n", w, host[w], want);
      bad++;
    }
  }
  printf("pages %zu\n", pages);
  printf("written_bytes_per_launch %zu\n", pages * 4096);
  printf("check write_set launches=%d bad_words=%zu %s\n", launches, bad, bad == 0 ? "ok" : "FAIL");
  printf("RESULT %s\n", bad == 0 ? "OK" : "FAIL");
  CK(cudaFree(data));
  return bad == 0 ? 0 : 1;
}
