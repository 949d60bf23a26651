// Several streams, a templated C++ kernel launched with hipLaunchKernelGGL, hipMemcpyAsync,
// hipMemsetAsync, events with hipEventElapsedTime, and hipStreamWaitEvent across streams.
// Shadow: streams_shadow.c.
#include "hip_check.h"
#include <vector>

template <int K>
__global__ void scale_k(int* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = data[i] * K + 1;
}

int main() {
    const char* name = "streams";
    const int n = 4099, parts = 3;
    std::vector<int> host(parts * n), back(parts * n, 0);
    for (int i = 0; i < parts * n; ++i) host[i] = i % 1000;
    int* pinned = nullptr;
    HIP_CHECK(name, hipHostMalloc(&pinned, parts * n * sizeof(int)));
    int* dev;
    HIP_CHECK(name, hipMalloc(&dev, parts * n * sizeof(int)));
    hipStream_t s[parts];
    hipEvent_t start, stop, ready;
    for (auto& st : s) HIP_CHECK(name, hipStreamCreate(&st));
    HIP_CHECK(name, hipEventCreate(&start));
    HIP_CHECK(name, hipEventCreate(&stop));
    HIP_CHECK(name, hipEventCreate(&ready));
    for (int i = 0; i < parts * n; ++i) pinned[i] = host[i];

    HIP_CHECK(name, hipEventRecord(start, s[0]));
    // Stream 0 clears the whole buffer; the others wait for that before using their part.
    HIP_CHECK(name, hipMemsetAsync(dev, 0, parts * n * sizeof(int), s[0]));
    HIP_CHECK(name, hipEventRecord(ready, s[0]));
    for (int p = 0; p < parts; ++p) {
        HIP_CHECK(name, hipStreamWaitEvent(s[p], ready, 0));
        int* part = dev + p * n;
        HIP_CHECK(name, hipMemcpyAsync(part, pinned + p * n, n * sizeof(int),
                                       hipMemcpyHostToDevice, s[p]));
        hipLaunchKernelGGL(scale_k<3>, dim3((n + 127) / 128), dim3(128), 0, s[p], part, n);
        HIP_CHECK(name, hipGetLastError());
        hipLaunchKernelGGL(scale_k<2>, dim3((n + 127) / 128), dim3(128), 0, s[p], part, n);
        HIP_CHECK(name, hipMemcpyAsync(back.data() + p * n, part, n * sizeof(int),
                                       hipMemcpyDeviceToHost, s[p]));
    }
    // The last stream's tail waits for the others, then stops the clock.
    for (int p = 0; p < parts - 1; ++p) {
        hipEvent_t done;
        HIP_CHECK(name, hipEventCreate(&done));
        HIP_CHECK(name, hipEventRecord(done, s[p]));
        HIP_CHECK(name, hipStreamWaitEvent(s[parts - 1], done, 0));
        HIP_CHECK(name, hipEventDestroy(done));
    }
    HIP_CHECK(name, hipEventRecord(stop, s[parts - 1]));
    HIP_CHECK(name, hipEventSynchronize(stop));
    for (auto& st : s) HIP_CHECK(name, hipStreamSynchronize(st));
    float ms = -1.0f;
    HIP_CHECK(name, hipEventElapsedTime(&ms, start, stop));
    for (int i = 0; i < parts * n; ++i) {
        int want = (host[i] * 3 + 1) * 2 + 1;
        if (back[i] != want) {
            std::printf("RESULT %s FAIL back[%d] = %d, want %d\n", name, i, back[i], want);
            return 1;
        }
    }
    if (!(ms > 0.0f)) {
        std::printf("RESULT %s FAIL elapsed time %f ms\n", name, ms);
        return 1;
    }
    for (auto& st : s) HIP_CHECK(name, hipStreamDestroy(st));
    HIP_CHECK(name, hipFree(dev));
    HIP_CHECK(name, hipHostFree(pinned));
    std::printf("RESULT %s OK streams=%d n=%d elapsed_ms=%.3f\n", name, parts, n, ms);
    return 0;
}
