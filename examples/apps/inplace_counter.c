/*
 * inplace_counter - k dispatches (env SAMPLE_DISPATCHES, default 1) of inc_in_place over a
 * device buffer of n uint32 (env SAMPLE_N, default 65536) initialised to a[i] = i with
 * hsa_memory_copy; each dispatch is waited on before the next. Verifies a[i] == i + k and
 * that the module variable hit_counter (read with hsa_memory_copy from its VARIABLE_ADDRESS)
 * is exactly k. Also checks the const variable lookup_table: VARIABLE_IS_CONST and {1,2,3,4}.
 * Usage: inplace_counter CODE_OBJECT   (or HSA_SAMPLE_KERNELS=CODE_OBJECT inplace_counter)
 */
#define _POSIX_C_SOURCE 200809L
#define SAMPLE_APP "inplace_counter"
#include "hsa_sample_util.h"

typedef struct {
    uint32_t* a;
    uint32_t n;
} inc_in_place_args_t;

int main(int argc, char** argv) {
    const char* path = hsu_code_object_path(argc, argv);
    const uint32_t n = hsu_env_u32("SAMPLE_N", 1u << 16, 1, 1u << 28);
    const uint32_t k_dispatches = hsu_env_u32("SAMPLE_DISPATCHES", 1, 1, 1000000);
    const size_t bytes = (size_t)n * sizeof(uint32_t);

    CHECK(hsa_init(), "hsa_init");
    hsa_agent_t gpu = hsu_first_gpu();
    hsa_amd_memory_pool_t dev_pool = hsu_coarse_pool(gpu);
    hsa_amd_memory_pool_t host_pool = hsu_fine_pool();
    hsa_amd_memory_pool_t kernarg_pool = hsu_kernarg_pool();

    hsa_executable_t exe = hsu_load_code_object(path, &gpu, 1);
    hsu_kernel_t k = hsu_get_kernel(exe, gpu, "inc_in_place");
    uint32_t counter_size = 0;
    const uint64_t counter_addr = hsu_get_variable(exe, gpu, "hit_counter", &counter_size, NULL);
    if (counter_size != sizeof(uint32_t))
        hsu_fail(1, "hit_counter VARIABLE_SIZE %u, want 4", (unsigned)counter_size);
    uint32_t table_size = 0;
    bool table_const = false;
    const uint64_t table_addr =
        hsu_get_variable(exe, gpu, "lookup_table", &table_size, &table_const);

    uint32_t* host = hsu_alloc(host_pool, bytes);
    for (uint32_t i = 0; i < n; ++i) host[i] = i;
    uint32_t* dev = hsu_alloc(dev_pool, bytes);
    CHECK(hsa_memory_copy(dev, host, bytes), "hsa_memory_copy(a -> device)");

    inc_in_place_args_t args = {dev, n};
    void* kernarg = hsu_make_kernarg(kernarg_pool, &k, &args, sizeof args);
    hsa_queue_t* q = hsu_create_queue(gpu, 64);
    hsa_signal_t done = hsu_signal();

    for (uint32_t d = 0; d < k_dispatches; ++d) {
        hsa_signal_store_screlease(done, 1);
        hsu_dispatch_1d(q, &k, kernarg, 256, n, done);
        hsu_wait_zero(done, "inc_in_place dispatch");
    }

    memset(host, 0, bytes);
    CHECK(hsa_memory_copy(host, dev, bytes), "hsa_memory_copy(a -> host)");
    uint32_t counter = 0xdeadbeefu;
    CHECK(hsa_memory_copy(&counter, (void*)(uintptr_t)counter_addr, sizeof counter),
          "hsa_memory_copy(hit_counter -> host)");
    uint32_t table[4] = {0, 0, 0, 0};
    if (table_size == sizeof table)
        CHECK(hsa_memory_copy(table, (void*)(uintptr_t)table_addr, sizeof table),
              "hsa_memory_copy(lookup_table -> host)");

    uint32_t bad = 0, first_bad = 0, first_val = 0;
    for (uint32_t i = 0; i < n; ++i) {
        if (host[i] != i + k_dispatches && bad++ == 0) first_bad = i, first_val = host[i];
    }

    CHECK(hsa_signal_destroy(done), "hsa_signal_destroy");
    CHECK(hsa_queue_destroy(q), "hsa_queue_destroy");
    hsu_free(kernarg);
    hsu_free(dev);
    hsu_free(host);
    CHECK(hsa_executable_destroy(exe), "hsa_executable_destroy");
    CHECK(hsa_shut_down(), "hsa_shut_down");

    if (bad != 0)
        hsu_fail(1, "%u of %u elements wrong, first a[%u]=%u want %u", (unsigned)bad,
                 (unsigned)n, (unsigned)first_bad, (unsigned)first_val,
                 (unsigned)(first_bad + k_dispatches));
    if (counter != k_dispatches)
        hsu_fail(1, "counter=%u want %u", (unsigned)counter, (unsigned)k_dispatches);
    if (table_size != sizeof table || !table_const || table[0] != 1 || table[1] != 2 ||
        table[2] != 3 || table[3] != 4)
        hsu_fail(1, "lookup_table size=%u is_const=%d values={%u,%u,%u,%u}, want 16/1/{1,2,3,4}",
                 (unsigned)table_size, (int)table_const, (unsigned)table[0], (unsigned)table[1],
                 (unsigned)table[2], (unsigned)table[3]);
    printf("RESULT inplace_counter OK counter=%u n=%u dispatches=%u\n", (unsigned)counter,
           (unsigned)n, (unsigned)k_dispatches);
    return 0;
}
