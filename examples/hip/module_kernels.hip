// The code object module.hip loads with hipModuleLoad (built with hipcc --genco).
#include <hip/hip_runtime.h>

__device__ float m_offset = 0.25f;

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + m_offset;
}
