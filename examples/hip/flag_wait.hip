// A kernel that waits for a flag in device memory which the program sets with its next HIP call
// on another stream, after the launch returned: first with hipMemcpyAsync from pinned host
// memory, then with a small kernel. Without a tool it completes at once. Under a replay tool
// that call is held up by the kernel's replay window while the window's first pass waits for
// the flag; the window must give way (rocprof-replay: `lock_contention`, one pass) rather than
// wait for its pass deadline. The kernel gives up after about 20 s (it then adds 1000, and the
// check fails). Shadow: flag_wait_shadow.c.
//
// `flag_wait chain`: two waiting kernels on two streams, then the two kernels that set their
// flags on a third, the second waiter's first: under a replay tool the first waiter's pass
// gives way and holds the tool's replay queue, and the next three dispatches run beside it
// (on the tool's other queues). The second waiter must not hold its setter back.
#include "hip_check.h"
#include <chrono>
#include <string>
#include <vector>

// The GPU's constant-rate clock (100 MHz on gfx90a); the host pass never runs it.
__device__ long long now_ticks() {
#if defined(__HIP_DEVICE_COMPILE__)
    return wall_clock64();
#else
    return 0;
#endif
}

__global__ void wait_flag(volatile int* flag, int* data, int n) {
    __shared__ int seen;
    if (threadIdx.x == 0) {
        const long long start = now_ticks();
        int v = 0;
        // About 20 s at 100 MHz.
        while ((v = *flag) == 0) {
            if (now_ticks() - start > 2000000000ll) {
                v = 1000;
                break;
            }
            __builtin_amdgcn_s_sleep(10);
        }
        seen = v;
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += seen;
}

__global__ void set_flag(int* flag, int v) { *flag = v; }

// `chain` mode: waiters on `first` and `second`, both setters on `setting`.
static int chain() {
    const char* name = "flag_wait";
    const int n = 1024;
    int* flags;  // [0], [1]: the waiters' flags, [2]: the warm-up's
    int* data;   // two halves, one per waiter
    HIP_CHECK(name, hipMalloc(&flags, 4 * sizeof(int)));
    HIP_CHECK(name, hipMalloc(&data, 2 * n * sizeof(int)));
    HIP_CHECK(name, hipMemset(flags, 0, 4 * sizeof(int)));
    HIP_CHECK(name, hipMemset(data, 0, 2 * n * sizeof(int)));
    hipStream_t first, second, setting;
    HIP_CHECK(name, hipStreamCreateWithFlags(&first, hipStreamNonBlocking));
    HIP_CHECK(name, hipStreamCreateWithFlags(&second, hipStreamNonBlocking));
    HIP_CHECK(name, hipStreamCreateWithFlags(&setting, hipStreamNonBlocking));
    hipLaunchKernelGGL(set_flag, dim3(1), dim3(1), 0, setting, flags + 2, 1);
    HIP_CHECK(name, hipGetLastError());
    HIP_CHECK(name, hipDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    hipLaunchKernelGGL(wait_flag, dim3(n / 256), dim3(256), 0, first, flags, data, n);
    hipLaunchKernelGGL(wait_flag, dim3(n / 256), dim3(256), 0, second, flags + 1, data + n, n);
    hipLaunchKernelGGL(set_flag, dim3(1), dim3(1), 0, setting, flags + 1, 5);
    hipLaunchKernelGGL(set_flag, dim3(1), dim3(1), 0, setting, flags, 3);
    HIP_CHECK(name, hipGetLastError());
    HIP_CHECK(name, hipDeviceSynchronize());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("flag_wait chain completed_ms=%.0f\n", ms);
    std::vector<int> back(2 * n, 0);
    HIP_CHECK(name, hipMemcpy(back.data(), data, 2 * n * sizeof(int), hipMemcpyDeviceToHost));
    for (int i = 0; i < 2 * n; ++i) {
        const int want = i < n ? 3 : 5;
        if (back[i] != want) {
            std::printf("RESULT %s FAIL chain data[%d] = %d, want %d\n", name, i, back[i], want);
            return 1;
        }
    }
    HIP_CHECK(name, hipStreamDestroy(first));
    HIP_CHECK(name, hipStreamDestroy(second));
    HIP_CHECK(name, hipStreamDestroy(setting));
    HIP_CHECK(name, hipFree(flags));
    HIP_CHECK(name, hipFree(data));
    std::printf("RESULT %s OK chain n=%d\n", name, n);
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "chain") return chain();
    const char* name = "flag_wait";
    const int n = 1024;
    int* flags;  // [0]: the copy's flag, [1]: the kernel's, [2]: the warm-up's
    int* data;
    int* pinned;
    HIP_CHECK(name, hipMalloc(&flags, 4 * sizeof(int)));
    HIP_CHECK(name, hipMalloc(&data, n * sizeof(int)));
    HIP_CHECK(name, hipHostMalloc(&pinned, sizeof(int)));
    HIP_CHECK(name, hipMemset(flags, 0, 4 * sizeof(int)));
    HIP_CHECK(name, hipMemset(data, 0, n * sizeof(int)));
    *pinned = 7;
    hipStream_t waiting, setting;
    HIP_CHECK(name, hipStreamCreateWithFlags(&waiting, hipStreamNonBlocking));
    HIP_CHECK(name, hipStreamCreateWithFlags(&setting, hipStreamNonBlocking));
    // Warm-up: set_flag's first launch, on a word nobody waits for.
    hipLaunchKernelGGL(set_flag, dim3(1), dim3(1), 0, setting, flags + 2, 1);
    HIP_CHECK(name, hipGetLastError());
    HIP_CHECK(name, hipDeviceSynchronize());

    const char* ways[2] = {"copy", "kernel"};
    for (int w = 0; w < 2; ++w) {
        auto t0 = std::chrono::steady_clock::now();
        hipLaunchKernelGGL(wait_flag, dim3(n / 256), dim3(256), 0, waiting, flags + w, data, n);
        HIP_CHECK(name, hipGetLastError());
        // The program's next call, on another stream: it sets the flag.
        if (w == 0) {
            HIP_CHECK(name, hipMemcpyAsync(flags, pinned, sizeof(int), hipMemcpyHostToDevice,
                                           setting));
        } else {
            hipLaunchKernelGGL(set_flag, dim3(1), dim3(1), 0, setting, flags + 1, 7);
            HIP_CHECK(name, hipGetLastError());
        }
        HIP_CHECK(name, hipStreamSynchronize(waiting));
        HIP_CHECK(name, hipStreamSynchronize(setting));
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        std::printf("flag_wait %s completed_ms=%.0f\n", ways[w], ms);
    }
    std::vector<int> back(n, 0);
    HIP_CHECK(name, hipMemcpy(back.data(), data, n * sizeof(int), hipMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
        if (back[i] != 14) {
            std::printf("RESULT %s FAIL data[%d] = %d, want 14 (each flag added once)\n", name, i,
                        back[i]);
            return 1;
        }
    }
    HIP_CHECK(name, hipStreamDestroy(waiting));
    HIP_CHECK(name, hipStreamDestroy(setting));
    HIP_CHECK(name, hipFree(flags));
    HIP_CHECK(name, hipFree(data));
    HIP_CHECK(name, hipHostFree(pinned));
    std::printf("RESULT %s OK n=%d\n", name, n);
    return 0;
}
