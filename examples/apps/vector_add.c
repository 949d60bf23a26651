/*
 * vector_add - one dispatch of vector_add over n floats (env SAMPLE_N, default 65536).
 * a[i] = i, b[i] = 2i are written in fine-grained host memory, copied to coarse-grained
 * device buffers with hsa_memory_copy, c = a + b is computed by the kernel (workgroup 256,
 * grid n), copied back with hsa_memory_copy and compared exactly with the host sum.
 * Usage: vector_add CODE_OBJECT   (or HSA_SAMPLE_KERNELS=CODE_OBJECT vector_add)
 */
#define _POSIX_C_SOURCE 200809L
#define SAMPLE_APP "vector_add"
#include "hsa_sample_util.h"

typedef struct {
    const float* a;
    const float* b;
    float* c;
    uint32_t n;
} vector_add_args_t;

int main(int argc, char** argv) {
    const char* path = hsu_code_object_path(argc, argv);
    const uint32_t n = hsu_env_u32("SAMPLE_N", 1u << 16, 1, 1u << 28);
    const size_t bytes = (size_t)n * sizeof(float);

    CHECK(hsa_init(), "hsa_init");
    hsa_agent_t gpu = hsu_first_gpu();
    hsa_amd_memory_pool_t dev_pool = hsu_coarse_pool(gpu);
    hsa_amd_memory_pool_t host_pool = hsu_fine_pool();
    hsa_amd_memory_pool_t kernarg_pool = hsu_kernarg_pool();

    hsa_executable_t exe = hsu_load_code_object(path, &gpu, 1);
    hsu_kernel_t k = hsu_get_kernel(exe, gpu, "vector_add");

    float* host_a = hsu_alloc(host_pool, bytes);
    float* host_b = hsu_alloc(host_pool, bytes);
    float* host_c = hsu_alloc(host_pool, bytes);
    for (uint32_t i = 0; i < n; ++i) {
        host_a[i] = (float)i;
        host_b[i] = (float)(2.0 * (double)i);
        host_c[i] = -1.0f;
    }
    float* dev_a = hsu_alloc(dev_pool, bytes);
    float* dev_b = hsu_alloc(dev_pool, bytes);
    float* dev_c = hsu_alloc(dev_pool, bytes);
    CHECK(hsa_memory_copy(dev_a, host_a, bytes), "hsa_memory_copy(a -> device)");
    CHECK(hsa_memory_copy(dev_b, host_b, bytes), "hsa_memory_copy(b -> device)");
    CHECK(hsa_memory_copy(dev_c, host_c, bytes), "hsa_memory_copy(c -> device)");

    vector_add_args_t args = {dev_a, dev_b, dev_c, n};
    void* kernarg = hsu_make_kernarg(kernarg_pool, &k, &args, sizeof args);
    hsa_queue_t* q = hsu_create_queue(gpu, 64);
    hsa_signal_t done = hsu_signal();

    hsu_dispatch_1d(q, &k, kernarg, 256, n, done);
    hsu_wait_zero(done, "vector_add dispatch");

    CHECK(hsa_memory_copy(host_c, dev_c, bytes), "hsa_memory_copy(c -> host)");
    uint32_t bad = 0, first_bad = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const float want = host_a[i] + host_b[i];
        if (memcmp(&host_c[i], &want, sizeof want) != 0 && bad++ == 0) first_bad = i;
    }

    CHECK(hsa_signal_destroy(done), "hsa_signal_destroy");
    CHECK(hsa_queue_destroy(q), "hsa_queue_destroy");
    float c_first_bad = host_c[first_bad];
    hsu_free(kernarg);
    hsu_free(dev_a);
    hsu_free(dev_b);
    hsu_free(dev_c);
    hsu_free(host_a);
    hsu_free(host_b);
    hsu_free(host_c);
    CHECK(hsa_executable_destroy(exe), "hsa_executable_destroy");
    CHECK(hsa_shut_down(), "hsa_shut_down");

    if (bad != 0)
        hsu_fail(1, "%u of %u elements wrong, first c[%u]=%g want %g", (unsigned)bad,
                 (unsigned)n, (unsigned)first_bad, (double)c_first_bad, 3.0 * first_bad);
    printf("RESULT vector_add OK n=%u\n", (unsigned)n);
    return 0;
}
