// System memory a kernel reaches with no allocation call: where the runtime says every GPU
// accesses all system memory by default (XNACK on, APUs such as the MI300A; hsa-emu), a HIP
// program may hand a kernel `malloc`'d memory directly, or inside a struct passed by value.
// Beside those, kernels on device memory (an `int` argument whose padding the runtime leaves
// as it finds it) and on a `__device__` variable's address. Every kernel runs once as far as
// the program can tell: the host checks each value. Shadow: system_memory_shadow.c.
#include <cstdlib>

#include "hip_check.h"

struct Span {
    int* p;
    int n;
};

__device__ int g_table[64];

// Adds one to n ints at p.
__global__ void add_one(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

// Adds two to the ints a struct passed by value names.
__global__ void add_two(Span s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) s.p[i] += 2;
}

int main() {
    const char* name = "system_memory";
    const int n = 64;
    // Memory of the process no HIP call made reachable.
    int* heap = static_cast<int*>(std::malloc(n * sizeof(int)));
    int* heap2 = static_cast<int*>(std::malloc(n * sizeof(int)));
    if (!heap || !heap2) {
        std::printf("RESULT %s FAIL malloc\n", name);
        return 1;
    }
    int* dev = nullptr;
    HIP_CHECK(name, hipMalloc(&dev, n * sizeof(int)));
    int* table = nullptr;
    HIP_CHECK(name, hipGetSymbolAddress(reinterpret_cast<void**>(&table), HIP_SYMBOL(g_table)));
    int host[n];
    for (int i = 0; i < n; ++i) {
        heap[i] = i;
        heap2[i] = 10 * i;
        host[i] = 100 * i;
    }
    HIP_CHECK(name, hipMemcpy(dev, host, sizeof host, hipMemcpyHostToDevice));
    HIP_CHECK(name, hipMemcpy(table, host, sizeof host, hipMemcpyHostToDevice));

    add_one<<<1, 64>>>(heap, n);
    add_two<<<1, 64>>>(Span{heap2, n});
    add_one<<<1, 64>>>(dev, n);
    add_one<<<1, 64>>>(table, n);
    HIP_CHECK(name, hipDeviceSynchronize());

    int back[n];
    int back_table[n];
    HIP_CHECK(name, hipMemcpy(back, dev, sizeof back, hipMemcpyDeviceToHost));
    HIP_CHECK(name, hipMemcpy(back_table, table, sizeof back_table, hipMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; ++i) {
        bool ok = heap[i] == i + 1 && heap2[i] == 10 * i + 2 && back[i] == 100 * i + 1 &&
                  back_table[i] == 100 * i + 1;
        if (!ok && bad++ == 0)
            std::printf("first bad [%d]: heap %d (want %d) heap2 %d (want %d) dev %d (want %d) "
                        "table %d (want %d)\n",
                        i, heap[i], i + 1, heap2[i], 10 * i + 2, back[i], 100 * i + 1,
                        back_table[i], 100 * i + 1);
    }
    if (bad) {
        std::printf("RESULT %s FAIL bad=%d\n", name, bad);
        return 1;
    }
    std::printf("RESULT %s OK heap[1]=%d heap2[1]=%d dev[1]=%d table[1]=%d\n", name, heap[1],
                heap2[1], back[1], back_table[1]);
    HIP_CHECK(name, hipFree(dev));
    std::free(heap2);
    std::free(heap);
    return 0;
}
