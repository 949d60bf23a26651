// Managed memory, which the host reads and writes directly: `hipMallocManaged` memory named by
// a kernel's arguments, a `__managed__` variable (HIP keeps it as a device variable holding a
// pointer to managed memory, so kernels reach it through memory their arguments do not name),
// and managed memory reached through a pointer the application stores in a `__device__`
// variable. Kernels write it and read it; the host checks every value after one execution
// of each launch. Shadow: managed_shadow.c.
#include "hip_check.h"

__managed__ int m_counter = 5;
__device__ int* g_slot;

// Writes managed memory through the __managed__ variable.
__global__ void bump(int k) {
    if (blockIdx.x == 0 && threadIdx.x == 0) m_counter += k;
}

// Writes managed memory its arguments name.
__global__ void add_one(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

// Writes managed memory through the pointer stored in g_slot.
__global__ void bump_slot(int k) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *g_slot += k;
}

// Reads managed memory (named, and through the __managed__ variable); writes device memory.
__global__ void sum_managed(const int* p, int n, int* out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        int s = m_counter;
        for (int i = 0; i < n; ++i) s += p[i];
        out[0] = s;
    }
}

int main() {
    const char* name = "managed";
    const int n = 64;
    int* buf = nullptr;
    HIP_CHECK(name, hipMallocManaged(&buf, n * sizeof(int)));
    int* slot = nullptr;
    HIP_CHECK(name, hipMallocManaged(&slot, sizeof(int)));
    for (int i = 0; i < n; ++i) buf[i] = i;
    *slot = 100;
    HIP_CHECK(name, hipMemcpyToSymbol(HIP_SYMBOL(g_slot), &slot, sizeof(slot)));
    int* dsum = nullptr;
    HIP_CHECK(name, hipMalloc(&dsum, sizeof(int)));

    bump<<<1, 64>>>(1);
    add_one<<<1, 64>>>(buf, n);
    bump_slot<<<1, 64>>>(3);
    HIP_CHECK(name, hipDeviceSynchronize());
    // The host writes managed memory between launches, as managed memory allows.
    m_counter += 10;
    buf[0] = 1000;
    bump<<<1, 64>>>(2);
    sum_managed<<<1, 64>>>(buf, n, dsum);
    HIP_CHECK(name, hipDeviceSynchronize());

    int sum = 0;
    HIP_CHECK(name, hipMemcpy(&sum, dsum, sizeof(int), hipMemcpyDeviceToHost));
    const int want_counter = 5 + 1 + 10 + 2;
    int want_sum = want_counter + 1000;
    int bad = 0;
    for (int i = 1; i < n; ++i) {
        want_sum += i + 1;
        bad += buf[i] != i + 1;
    }
    if (m_counter != want_counter || *slot != 103 || sum != want_sum || buf[0] != 1000 || bad) {
        std::printf("RESULT %s FAIL m_counter=%d (want %d) slot=%d (want 103) sum=%d (want %d) "
                    "buf[0]=%d bad=%d\n",
                    name, m_counter, want_counter, *slot, sum, want_sum, buf[0], bad);
        return 1;
    }
    std::printf("RESULT %s OK m_counter=%d slot=%d sum=%d\n", name, m_counter, *slot, sum);
    HIP_CHECK(name, hipFree(dsum));
    HIP_CHECK(name, hipFree(slot));
    HIP_CHECK(name, hipFree(buf));
    return 0;
}
