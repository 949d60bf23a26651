/*
 * multi_queue - T threads (env SAMPLE_THREADS, default 4), each on GPU agent t % #GPUs with
 * its own queue (size 64, MULTI), signal, kernarg and device buffer of n uint32 (env SAMPLE_N,
 * default 4096), run R rounds (env SAMPLE_ROUNDS, default 20) of inc_in_place, each waited on
 * before the next, and verify a[i] == i + R. The executable is shared: the code object is
 * loaded once per GPU agent, then frozen once. hit_counter is not checked (one copy per agent,
 * shared by the threads of that agent).
 * Usage: multi_queue CODE_OBJECT   (or HSA_SAMPLE_KERNELS=CODE_OBJECT multi_queue)
 */
#define _POSIX_C_SOURCE 200809L
#define SAMPLE_APP "multi_queue"
#include "hsa_sample_util.h"

#include <pthread.h>

#define MAX_THREADS 256

typedef struct {
    uint32_t* a;
    uint32_t n;
} inc_in_place_args_t;

typedef struct {
    uint32_t index;
    hsa_agent_t agent;
    hsa_executable_t exe;
    hsa_amd_memory_pool_t dev_pool, host_pool, kernarg_pool;
    uint32_t n, rounds;
    uint32_t bad, first_bad, first_val; /* results */
} worker_t;

static void* worker_main(void* p) {
    worker_t* w = (worker_t*)p;
    const size_t bytes = (size_t)w->n * sizeof(uint32_t);
    hsu_kernel_t k = hsu_get_kernel(w->exe, w->agent, "inc_in_place");

    uint32_t* host = hsu_alloc(w->host_pool, bytes);
    for (uint32_t i = 0; i < w->n; ++i) host[i] = i;
    uint32_t* dev = hsu_alloc(w->dev_pool, bytes);
    CHECK(hsa_memory_copy(dev, host, bytes), "hsa_memory_copy(a -> device)");

    inc_in_place_args_t args = {dev, w->n};
    void* kernarg = hsu_make_kernarg(w->kernarg_pool, &k, &args, sizeof args);
    hsa_queue_t* q = hsu_create_queue(w->agent, 64);
    hsa_signal_t done = hsu_signal();

    for (uint32_t r = 0; r < w->rounds; ++r) {
        hsa_signal_store_screlease(done, 1);
        hsu_dispatch_1d(q, &k, kernarg, 64, w->n, done);
        hsu_wait_zero(done, "inc_in_place dispatch");
    }

    memset(host, 0, bytes);
    CHECK(hsa_memory_copy(host, dev, bytes), "hsa_memory_copy(a -> host)");
    for (uint32_t i = 0; i < w->n; ++i) {
        if (host[i] != i + w->rounds && w->bad++ == 0) w->first_bad = i, w->first_val = host[i];
    }

    CHECK(hsa_signal_destroy(done), "hsa_signal_destroy");
    CHECK(hsa_queue_destroy(q), "hsa_queue_destroy");
    hsu_free(kernarg);
    hsu_free(dev);
    hsu_free(host);
    return NULL;
}

int main(int argc, char** argv) {
    const char* path = hsu_code_object_path(argc, argv);
    const uint32_t n_threads = hsu_env_u32("SAMPLE_THREADS", 4, 1, MAX_THREADS);
    const uint32_t rounds = hsu_env_u32("SAMPLE_ROUNDS", 20, 1, 1000000);
    const uint32_t n = hsu_env_u32("SAMPLE_N", 4096, 1, 1u << 26);

    CHECK(hsa_init(), "hsa_init");
    hsa_agent_t gpus[HSU_MAX_AGENTS];
    const uint32_t n_gpus = hsu_all_gpus(gpus, HSU_MAX_AGENTS);
    hsa_amd_memory_pool_t dev_pools[HSU_MAX_AGENTS];
    for (uint32_t g = 0; g < n_gpus; ++g) dev_pools[g] = hsu_coarse_pool(gpus[g]);
    hsa_amd_memory_pool_t host_pool = hsu_fine_pool();
    hsa_amd_memory_pool_t kernarg_pool = hsu_kernarg_pool();
    hsa_executable_t exe = hsu_load_code_object(path, gpus, n_gpus);

    static worker_t workers[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    for (uint32_t t = 0; t < n_threads; ++t) {
        worker_t* w = &workers[t];
        memset(w, 0, sizeof *w);
        w->index = t;
        w->agent = gpus[t % n_gpus];
        w->exe = exe;
        w->dev_pool = dev_pools[t % n_gpus];
        w->host_pool = host_pool;
        w->kernarg_pool = kernarg_pool;
        w->n = n;
        w->rounds = rounds;
        int rc = pthread_create(&threads[t], NULL, worker_main, w);
        if (rc != 0) hsu_fail(2, "pthread_create: %s", strerror(rc));
    }
    for (uint32_t t = 0; t < n_threads; ++t) {
        int rc = pthread_join(threads[t], NULL);
        if (rc != 0) hsu_fail(2, "pthread_join: %s", strerror(rc));
    }

    CHECK(hsa_executable_destroy(exe), "hsa_executable_destroy");
    CHECK(hsa_shut_down(), "hsa_shut_down");

    for (uint32_t t = 0; t < n_threads; ++t) {
        const worker_t* w = &workers[t];
        if (w->bad != 0)
            hsu_fail(1, "thread %u: %u of %u elements wrong, first a[%u]=%u want %u",
                     (unsigned)t, (unsigned)w->bad, (unsigned)n, (unsigned)w->first_bad,
                     (unsigned)w->first_val, (unsigned)(w->first_bad + rounds));
    }
    printf("RESULT multi_queue OK threads=%u agents=%u rounds=%u n=%u\n", (unsigned)n_threads,
           (unsigned)n_gpus, (unsigned)rounds, (unsigned)n);
    return 0;
}
