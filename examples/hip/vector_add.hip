// <<<>>> launches of an extern "C" kernel, hipMalloc / hipMemset / hipMemcpy, and
// hipDeviceSynchronize. Shadow: vector_add_shadow.c.
#include "hip_check.h"
#include <vector>

extern "C" __global__ void vadd(const float* a, const float* b, float* c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const char* name = "vector_add";
    const unsigned n = 100003;  // not a multiple of the block size
    std::vector<float> a(n), b(n), c(n, -1.0f);
    for (unsigned i = 0; i < n; ++i) {
        a[i] = float(i);
        b[i] = 0.5f * float(i % 97);
    }
    int devices = 0;
    HIP_CHECK(name, hipGetDeviceCount(&devices));
    float *da, *db, *dc;
    HIP_CHECK(name, hipMalloc(&da, n * sizeof(float)));
    HIP_CHECK(name, hipMalloc(&db, n * sizeof(float)));
    HIP_CHECK(name, hipMalloc(&dc, n * sizeof(float)));
    HIP_CHECK(name, hipMemset(dc, 0xff, n * sizeof(float)));
    HIP_CHECK(name, hipMemcpy(da, a.data(), n * sizeof(float), hipMemcpyHostToDevice));
    HIP_CHECK(name, hipMemcpy(db, b.data(), n * sizeof(float), hipMemcpyHostToDevice));
    const unsigned block = 256;
    for (int rep = 0; rep < 3; ++rep) {
        vadd<<<dim3((n + block - 1) / block), dim3(block), 0, 0>>>(da, db, dc, n);
        HIP_CHECK(name, hipGetLastError());
    }
    HIP_CHECK(name, hipDeviceSynchronize());
    HIP_CHECK(name, hipMemcpy(c.data(), dc, n * sizeof(float), hipMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; ++i) {
        if (c[i] != a[i] + b[i]) {
            std::printf("RESULT %s FAIL c[%u] = %f, want %f\n", name, i, c[i], a[i] + b[i]);
            return 1;
        }
    }
    HIP_CHECK(name, hipFree(da));
    HIP_CHECK(name, hipFree(db));
    HIP_CHECK(name, hipFree(dc));
    std::printf("RESULT %s OK n=%u devices=%d\n", name, n, devices);
    return 0;
}
