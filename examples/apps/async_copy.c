/*
 * async_copy - a chain of three hsa_amd_memory_async_copy calls:
 *   host src --(s1)--> device A --(waits s1; s2)--> device B --(waits s2; s3)--> host dst
 * Only s3 is waited on; then dst == src is verified and s1, s2 must already be 0. Then
 * hsa_amd_memory_fill sets device A to 0xA5A5A5A5 and the result is checked through
 * hsa_memory_copy. Host buffers come from the CPU fine-grained pool and are made accessible
 * to the GPU with hsa_amd_agents_allow_access. n uint32 (env SAMPLE_N, default 65536).
 * No code object is needed.
 */
#define _POSIX_C_SOURCE 200809L
#define SAMPLE_APP "async_copy"
#include "hsa_sample_util.h"

#define FILL_VALUE 0xA5A5A5A5u

int main(void) {
    const uint32_t n = hsu_env_u32("SAMPLE_N", 1u << 16, 1, 1u << 28);
    const size_t bytes = (size_t)n * sizeof(uint32_t);

    CHECK(hsa_init(), "hsa_init");
    hsa_agent_t gpu = hsu_first_gpu();
    hsa_agent_t cpu = hsu_first_cpu();
    hsa_amd_memory_pool_t dev_pool = hsu_coarse_pool(gpu);
    hsa_amd_memory_pool_t host_pool = hsu_fine_pool();

    uint32_t* src = hsu_alloc(host_pool, bytes);
    uint32_t* dst = hsu_alloc(host_pool, bytes);
    CHECK(hsa_amd_agents_allow_access(1, &gpu, NULL, src), "hsa_amd_agents_allow_access(src)");
    CHECK(hsa_amd_agents_allow_access(1, &gpu, NULL, dst), "hsa_amd_agents_allow_access(dst)");
    uint32_t* dev_a = hsu_alloc(dev_pool, bytes);
    uint32_t* dev_b = hsu_alloc(dev_pool, bytes);
    for (uint32_t i = 0; i < n; ++i) {
        src[i] = i * 2654435761u ^ 0x5bd1e995u;
        dst[i] = 0;
    }

    hsa_signal_t s1 = hsu_signal(), s2 = hsu_signal(), s3 = hsu_signal();
    CHECK(hsa_amd_memory_async_copy(dev_a, gpu, src, cpu, bytes, 0, NULL, s1),
          "hsa_amd_memory_async_copy(src -> A)");
    CHECK(hsa_amd_memory_async_copy(dev_b, gpu, dev_a, gpu, bytes, 1, &s1, s2),
          "hsa_amd_memory_async_copy(A -> B)");
    CHECK(hsa_amd_memory_async_copy(dst, cpu, dev_b, gpu, bytes, 1, &s2, s3),
          "hsa_amd_memory_async_copy(B -> dst)");
    hsu_wait_zero(s3, "async copy chain");
    const hsa_signal_value_t v1 = hsa_signal_load_scacquire(s1);
    const hsa_signal_value_t v2 = hsa_signal_load_scacquire(s2);

    uint32_t bad = 0, first_bad = 0, first_val = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (dst[i] != src[i] && bad++ == 0) first_bad = i, first_val = dst[i];
    const uint32_t want_first = src[first_bad];

    CHECK(hsa_amd_memory_fill(dev_a, FILL_VALUE, n), "hsa_amd_memory_fill");
    memset(dst, 0, bytes);
    CHECK(hsa_memory_copy(dst, dev_a, bytes), "hsa_memory_copy(A -> dst)");
    uint32_t bad_fill = 0, first_bad_fill = 0, first_fill_val = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (dst[i] != FILL_VALUE && bad_fill++ == 0) first_bad_fill = i, first_fill_val = dst[i];

    CHECK(hsa_signal_destroy(s1), "hsa_signal_destroy");
    CHECK(hsa_signal_destroy(s2), "hsa_signal_destroy");
    CHECK(hsa_signal_destroy(s3), "hsa_signal_destroy");
    hsu_free(dev_a);
    hsu_free(dev_b);
    hsu_free(src);
    hsu_free(dst);
    CHECK(hsa_shut_down(), "hsa_shut_down");

    if (v1 != 0 || v2 != 0)
        hsu_fail(1, "s3 reached 0 but s1=%lld s2=%lld", (long long)v1, (long long)v2);
    if (bad != 0)
        hsu_fail(1, "copy chain: %u of %u words wrong, first dst[%u]=0x%08x want 0x%08x",
                 (unsigned)bad, (unsigned)n, (unsigned)first_bad, (unsigned)first_val,
                 (unsigned)want_first);
    if (bad_fill != 0)
        hsu_fail(1, "fill: %u of %u words wrong, first A[%u]=0x%08x want 0x%08x",
                 (unsigned)bad_fill, (unsigned)n, (unsigned)first_bad_fill,
                 (unsigned)first_fill_val, (unsigned)FILL_VALUE);
    printf("RESULT async_copy OK n=%u\n", (unsigned)n);
    return 0;
}
