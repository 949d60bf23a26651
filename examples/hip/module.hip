// hipModuleLoad + hipModuleGetFunction + hipModuleLaunchKernel on a code object file built with
// hipcc --genco (module_kernels.hip), and hipModuleGetGlobal on its __device__ variable.
// Usage: module [module_kernels.co]   (default: next to this program)
// Shadow: module_shadow.c.
#include "hip_check.h"
#include <string>
#include <vector>

int main(int argc, char** argv) {
    const char* name = "module";
    std::string path = argc > 1 ? argv[1] : std::string(argv[0]);
    if (argc <= 1) path = path.substr(0, path.rfind('/') + 1) + "module_kernels.co";
    hipModule_t module;
    HIP_CHECK(name, hipModuleLoad(&module, path.c_str()));
    hipFunction_t saxpy;
    HIP_CHECK(name, hipModuleGetFunction(&saxpy, module, "saxpy"));
    hipDeviceptr_t offset_ptr;
    size_t offset_size = 0;
    HIP_CHECK(name, hipModuleGetGlobal(&offset_ptr, &offset_size, module, "m_offset"));
    const float offset = 2.0f;
    HIP_CHECK(name, hipMemcpyHtoD(offset_ptr, (void*)&offset, sizeof(offset)));

    const int n = 5000;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
        x[i] = float(i % 17);
        y[i] = float(i % 5);
    }
    float *dx, *dy;
    HIP_CHECK(name, hipMalloc(&dx, n * sizeof(float)));
    HIP_CHECK(name, hipMalloc(&dy, n * sizeof(float)));
    HIP_CHECK(name, hipMemcpy(dx, x.data(), n * sizeof(float), hipMemcpyHostToDevice));
    HIP_CHECK(name, hipMemcpy(dy, y.data(), n * sizeof(float), hipMemcpyHostToDevice));
    struct {
        float a;
        float* x;  // aligned to 8 after the float, as in the kernel's argument layout
        float* y;
        int n;
    } args{3.0f, dx, dy, n};
    size_t args_size = sizeof(args);
    void* config[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &args, HIP_LAUNCH_PARAM_BUFFER_SIZE,
                      &args_size, HIP_LAUNCH_PARAM_END};
    HIP_CHECK(name, hipModuleLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr,
                                          nullptr, config));
    // The same launch with kernelParams instead of a packed buffer.
    float a = 3.0f;
    int count = n;
    void* params[] = {&a, &dx, &dy, &count};
    HIP_CHECK(name, hipModuleLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr,
                                          params, nullptr));
    HIP_CHECK(name, hipDeviceSynchronize());
    std::vector<float> out(n);
    HIP_CHECK(name, hipMemcpy(out.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
        float want = 2.0f * (3.0f * x[i] + offset) + y[i];
        if (out[i] != want) {
            std::printf("RESULT %s FAIL y[%d] = %f, want %f\n", name, i, out[i], want);
            return 1;
        }
    }
    HIP_CHECK(name, hipModuleUnload(module));
    HIP_CHECK(name, hipFree(dx));
    HIP_CHECK(name, hipFree(dy));
    std::printf("RESULT %s OK n=%d global_size=%zu\n", name, n, offset_size);
    return 0;
}
