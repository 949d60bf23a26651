// __device__ globals with hipMemcpyToSymbol / hipMemcpyFromSymbol, read and written by a
// kernel. Shadow: symbols_shadow.c (which backs the globals).
#include "hip_check.h"

__device__ int g_coeffs[4] = {1, 2, 3, 4};
__device__ unsigned long long g_sum;
__device__ unsigned g_launches;

__global__ void weigh(const int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&g_sum, (unsigned long long)(x[i] * g_coeffs[i % 4]));
    if (i == 0) atomicAdd(&g_launches, 1u);
}

int main() {
    const char* name = "symbols";
    const int n = 1000;
    int host[n];
    for (int i = 0; i < n; ++i) host[i] = i;
    int* dx;
    HIP_CHECK(name, hipMalloc(&dx, sizeof(host)));
    HIP_CHECK(name, hipMemcpy(dx, host, sizeof(host), hipMemcpyHostToDevice));
    int initial[4] = {0, 0, 0, 0};
    HIP_CHECK(name, hipMemcpyFromSymbol(initial, HIP_SYMBOL(g_coeffs), sizeof(initial)));
    if (initial[0] != 1 || initial[3] != 4) {
        std::printf("RESULT %s FAIL g_coeffs starts as {%d, %d, %d, %d}\n", name, initial[0],
                    initial[1], initial[2], initial[3]);
        return 1;
    }
    const int coeffs[4] = {5, -1, 2, 7};
    HIP_CHECK(name, hipMemcpyToSymbol(HIP_SYMBOL(g_coeffs), coeffs, sizeof(coeffs)));
    unsigned long long zero = 0;
    HIP_CHECK(name, hipMemcpyToSymbol(HIP_SYMBOL(g_sum), &zero, sizeof(zero)));
    weigh<<<(n + 63) / 64, 64>>>(dx, n);
    weigh<<<(n + 63) / 64, 64>>>(dx, n);
    HIP_CHECK(name, hipDeviceSynchronize());
    unsigned long long sum = 0;
    unsigned launches = 0;
    HIP_CHECK(name, hipMemcpyFromSymbol(&sum, HIP_SYMBOL(g_sum), sizeof(sum)));
    HIP_CHECK(name, hipMemcpyFromSymbol(&launches, HIP_SYMBOL(g_launches), sizeof(launches)));
    unsigned long long want = 0;
    for (int i = 0; i < n; ++i) want += 2ull * (unsigned long long)(host[i] * coeffs[i % 4]);
    if (sum != want || launches != 2) {
        std::printf("RESULT %s FAIL sum=%llu (want %llu) launches=%u (want 2)\n", name, sum,
                    want, launches);
        return 1;
    }
    void* addr = nullptr;
    size_t size = 0;
    HIP_CHECK(name, hipGetSymbolAddress(&addr, HIP_SYMBOL(g_sum)));
    HIP_CHECK(name, hipGetSymbolSize(&size, HIP_SYMBOL(g_sum)));
    HIP_CHECK(name, hipFree(dx));
    std::printf("RESULT %s OK sum=%llu launches=%u size=%zu\n", name, sum, launches, size);
    return 0;
}
