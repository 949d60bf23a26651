/*
 * hsa_sample_util.h - header-only helpers shared by the HSA sample applications.
 *
 * Plain C11 + POSIX, only APIs present in ROCm 5.2.3's hsa.h / hsa_ext_amd.h. The same source
 * runs on real ROCr (with a GPU code object) and on hsa-emu (with a host shared library as
 * code object). Before including this file an application must
 *   #define _POSIX_C_SOURCE 200809L      (before any other include)
 *   #define SAMPLE_APP "<app name>"      (used in the RESULT line)
 *
 * Every failure prints one line "RESULT <app> FAIL <why>" on stdout and exits non-zero:
 *   1 verification failed, 2 an HSA call failed, 3 a deadline expired, 64 usage.
 */
#ifndef HSA_SAMPLE_UTIL_H
#define HSA_SAMPLE_UTIL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#ifndef SAMPLE_APP
#error "define SAMPLE_APP before including hsa_sample_util.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#define HSU_MAX_AGENTS 64
#define HSU_QUEUE_ROOM_TIMEOUT_S 10.0 /* waiting for a free AQL slot */
#define HSU_SIGNAL_TIMEOUT_S 30.0     /* waiting for a completion signal */

/* ---- failure reporting ------------------------------------------------------------------ */

static inline void hsu_vfail(int code, const char* fmt, va_list ap) {
    char why[512];
    vsnprintf(why, sizeof why, fmt, ap);
    fflush(stderr);
    printf("RESULT %s FAIL %s\n", SAMPLE_APP, why);
    fflush(stdout);
    exit(code);
}

/* Print "RESULT <app> FAIL <why>" and exit(code). */
__attribute__((format(printf, 2, 3), noreturn)) static inline void hsu_fail(int code,
                                                                           const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hsu_vfail(code, fmt, ap);
    va_end(ap);
    exit(code); /* not reached */
}

static inline void hsu_check(hsa_status_t st, const char* what, const char* file, int line) {
    if (st == HSA_STATUS_SUCCESS) return;
    const char* s = NULL;
    if (hsa_status_string(st, &s) != HSA_STATUS_SUCCESS || s == NULL) s = "(no status string)";
    fprintf(stderr, "%s:%d: %s failed: status 0x%x: %s\n", file, line, what, (unsigned)st, s);
    hsu_fail(2, "%s: status 0x%x: %s", what, (unsigned)st, s);
}

/* CHECK(status, what): on any status other than HSA_STATUS_SUCCESS print hsa_status_string
 * and exit 2. `status` is evaluated exactly once. */
#define CHECK(status, what) hsu_check((status), (what), __FILE__, __LINE__)

/* ---- small utilities -------------------------------------------------------------------- */

static inline double hsu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Unsigned environment variable `name` in [min, max], or `def` when unset/empty. */
static inline uint32_t hsu_env_u32(const char* name, uint32_t def, uint32_t min, uint32_t max) {
    const char* s = getenv(name);
    if (s == NULL || *s == '\0') return def;
    char* end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        hsu_fail(64, "bad %s=%s (want %u..%u)", name, s, (unsigned)min, (unsigned)max);
    return (uint32_t)v;
}

/* Code-object path: argv[1], else $HSA_SAMPLE_KERNELS, else usage + exit 64. */
static inline const char* hsu_code_object_path(int argc, char** argv) {
    if (argc > 1 && argv[1][0] != '\0') return argv[1];
    const char* env = getenv("HSA_SAMPLE_KERNELS");
    if (env != NULL && *env != '\0') return env;
    fprintf(stderr, "usage: %s CODE_OBJECT   (or set HSA_SAMPLE_KERNELS=CODE_OBJECT)\n",
            argc > 0 ? argv[0] : SAMPLE_APP);
    hsu_fail(64, "usage: no code object given");
}

/* ---- agents ----------------------------------------------------------------------------- */

typedef struct {
    hsa_agent_t gpu[HSU_MAX_AGENTS];
    uint32_t n_gpu;
    hsa_agent_t cpu[HSU_MAX_AGENTS];
    uint32_t n_cpu;
} hsu_agents_t;

static inline hsa_status_t hsu_agent_cb(hsa_agent_t agent, void* data) {
    hsu_agents_t* a = (hsu_agents_t*)data;
    hsa_device_type_t type = HSA_DEVICE_TYPE_DSP; /* ignored unless written */
    hsa_status_t st = hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
    if (st != HSA_STATUS_SUCCESS) return st;
    if (type == HSA_DEVICE_TYPE_GPU && a->n_gpu < HSU_MAX_AGENTS) a->gpu[a->n_gpu++] = agent;
    if (type == HSA_DEVICE_TYPE_CPU && a->n_cpu < HSU_MAX_AGENTS) a->cpu[a->n_cpu++] = agent;
    return HSA_STATUS_SUCCESS;
}

/* All agents, GPUs and CPUs each in hsa_iterate_agents order. */
static inline hsu_agents_t hsu_agents(void) {
    hsu_agents_t a;
    memset(&a, 0, sizeof a);
    CHECK(hsa_iterate_agents(hsu_agent_cb, &a), "hsa_iterate_agents");
    return a;
}

static inline hsa_agent_t hsu_first_gpu(void) {
    hsu_agents_t a = hsu_agents();
    if (a.n_gpu == 0) hsu_fail(2, "no GPU agent");
    return a.gpu[0];
}

static inline hsa_agent_t hsu_first_cpu(void) {
    hsu_agents_t a = hsu_agents();
    if (a.n_cpu == 0) hsu_fail(2, "no CPU agent");
    return a.cpu[0];
}

/* Writes up to `max` GPU agents to `out`; returns how many (fails if none). */
static inline uint32_t hsu_all_gpus(hsa_agent_t* out, uint32_t max) {
    hsu_agents_t a = hsu_agents();
    if (a.n_gpu == 0) hsu_fail(2, "no GPU agent");
    uint32_t n = a.n_gpu < max ? a.n_gpu : max;
    for (uint32_t i = 0; i < n; ++i) out[i] = a.gpu[i];
    return n;
}

/* ---- memory pools ----------------------------------------------------------------------- */

typedef struct {
    uint32_t want;   /* all of these global flags must be set */
    uint32_t avoid;  /* prefer pools with none of these */
    bool found, found_fallback;
    hsa_amd_memory_pool_t pool, fallback;
} hsu_pool_search_t;

static inline hsa_status_t hsu_pool_cb(hsa_amd_memory_pool_t pool, void* data) {
    hsu_pool_search_t* s = (hsu_pool_search_t*)data;
    hsa_amd_segment_t segment = HSA_AMD_SEGMENT_PRIVATE; /* skipped unless written */
    uint32_t flags = 0;
    bool alloc_allowed = false;
    hsa_status_t st = hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
    if (st != HSA_STATUS_SUCCESS) return st;
    if (segment != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_SUCCESS;
    st = hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
    if (st != HSA_STATUS_SUCCESS) return st;
    st = hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                                      &alloc_allowed);
    if (st != HSA_STATUS_SUCCESS) return st;
    if (!alloc_allowed || (flags & s->want) != s->want) return HSA_STATUS_SUCCESS;
    if ((flags & s->avoid) == 0) {
        if (!s->found) s->pool = pool, s->found = true;
    } else if (!s->found_fallback) {
        s->fallback = pool, s->found_fallback = true;
    }
    return HSA_STATUS_SUCCESS;
}

/* First allocatable GLOBAL pool of `agent` having all `want` flags, preferring one without
 * any `avoid` flag. Returns false when there is none. */
static inline bool hsu_find_pool(hsa_agent_t agent, uint32_t want, uint32_t avoid,
                                 hsa_amd_memory_pool_t* out) {
    hsu_pool_search_t s;
    memset(&s, 0, sizeof s);
    s.want = want;
    s.avoid = avoid;
    CHECK(hsa_amd_agent_iterate_memory_pools(agent, hsu_pool_cb, &s),
          "hsa_amd_agent_iterate_memory_pools");
    if (s.found) *out = s.pool;
    else if (s.found_fallback) *out = s.fallback;
    return s.found || s.found_fallback;
}

/* Coarse-grained pool of a GPU agent: device buffers. */
static inline hsa_amd_memory_pool_t hsu_coarse_pool(hsa_agent_t gpu) {
    hsa_amd_memory_pool_t p = {0};
    if (!hsu_find_pool(gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, 0, &p))
        hsu_fail(2, "GPU agent has no coarse-grained global pool");
    return p;
}

/* Kernarg pool (KERNARG_INIT). On ROCr it belongs to the CPU agent; GPU agents are searched
 * only if no CPU agent has one. */
static inline hsa_amd_memory_pool_t hsu_kernarg_pool(void) {
    hsu_agents_t a = hsu_agents();
    hsa_amd_memory_pool_t p = {0};
    for (uint32_t i = 0; i < a.n_cpu; ++i)
        if (hsu_find_pool(a.cpu[i], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, 0, &p)) return p;
    for (uint32_t i = 0; i < a.n_gpu; ++i)
        if (hsu_find_pool(a.gpu[i], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, 0, &p)) return p;
    hsu_fail(2, "no memory pool with KERNARG_INIT");
}

/* Fine-grained pool of the CPU agent (host memory every agent may be given access to);
 * prefers a pool that is not also the kernarg pool. */
static inline hsa_amd_memory_pool_t hsu_fine_pool(void) {
    hsu_agents_t a = hsu_agents();
    hsa_amd_memory_pool_t p = {0};
    for (uint32_t i = 0; i < a.n_cpu; ++i)
        if (hsu_find_pool(a.cpu[i], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                          HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, &p))
            return p;
    hsu_fail(2, "CPU agent has no fine-grained global pool");
}

static inline void* hsu_alloc(hsa_amd_memory_pool_t pool, size_t bytes) {
    void* p = NULL;
    CHECK(hsa_amd_memory_pool_allocate(pool, bytes, 0, &p), "hsa_amd_memory_pool_allocate");
    if (p == NULL) hsu_fail(2, "hsa_amd_memory_pool_allocate returned NULL");
    return p;
}

static inline void hsu_free(void* p) {
    if (p != NULL) CHECK(hsa_amd_memory_pool_free(p), "hsa_amd_memory_pool_free");
}

/* ---- code objects and symbols ----------------------------------------------------------- */

/* Loads the code object at `path` into a new executable, once for each of the `n_agents`
 * agents (one reader, several hsa_executable_load_agent_code_object calls), then freezes it.
 * The reader is destroyed and the file closed after the freeze. */
static inline hsa_executable_t hsu_load_code_object(const char* path, const hsa_agent_t* agents,
                                                    uint32_t n_agents) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) hsu_fail(2, "cannot open code object %s: %s", path, strerror(errno));
    hsa_code_object_reader_t reader = {0};
    CHECK(hsa_code_object_reader_create_from_file(fd, &reader),
          "hsa_code_object_reader_create_from_file");
    hsa_executable_t exe = {0};
    CHECK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                                    NULL, &exe),
          "hsa_executable_create_alt");
    for (uint32_t i = 0; i < n_agents; ++i)
        CHECK(hsa_executable_load_agent_code_object(exe, agents[i], reader, NULL, NULL),
              "hsa_executable_load_agent_code_object");
    CHECK(hsa_executable_freeze(exe, NULL), "hsa_executable_freeze");
    CHECK(hsa_code_object_reader_destroy(reader), "hsa_code_object_reader_destroy");
    close(fd);
    return exe;
}

typedef struct {
    uint64_t object;          /* KERNEL_OBJECT: goes into the packet's kernel_object */
    uint32_t kernarg_size;    /* KERNEL_KERNARG_SEGMENT_SIZE */
    uint32_t group_size;      /* KERNEL_GROUP_SEGMENT_SIZE */
    uint32_t private_size;    /* KERNEL_PRIVATE_SEGMENT_SIZE */
} hsu_kernel_t;

/* Kernel `name` (the symbol looked up is "<name>.kd") as loaded for `agent`. */
static inline hsu_kernel_t hsu_get_kernel(hsa_executable_t exe, hsa_agent_t agent,
                                          const char* name) {
    char sym_name[256];
    snprintf(sym_name, sizeof sym_name, "%s.kd", name);
    hsa_executable_symbol_t sym = {0};
    CHECK(hsa_executable_get_symbol_by_name(exe, sym_name, &agent, &sym),
          "hsa_executable_get_symbol_by_name(kernel)");
    hsa_symbol_kind_t kind = HSA_SYMBOL_KIND_INDIRECT_FUNCTION; /* fails unless written */
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_TYPE, &kind),
          "symbol info TYPE");
    if (kind != HSA_SYMBOL_KIND_KERNEL) hsu_fail(2, "%s is not a kernel symbol", sym_name);
    hsu_kernel_t k = {0, 0, 0, 0};
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &k.object),
          "symbol info KERNEL_OBJECT");
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                                         &k.kernarg_size),
          "symbol info KERNARG_SEGMENT_SIZE");
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                                         &k.group_size),
          "symbol info GROUP_SEGMENT_SIZE");
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                                         &k.private_size),
          "symbol info PRIVATE_SEGMENT_SIZE");
    if (k.object == 0) hsu_fail(2, "%s has KERNEL_OBJECT 0", sym_name);
    return k;
}

/* VARIABLE symbol `name` as loaded for `agent`: returns VARIABLE_ADDRESS; the optional
 * outputs receive VARIABLE_SIZE and VARIABLE_IS_CONST. */
static inline uint64_t hsu_get_variable(hsa_executable_t exe, hsa_agent_t agent, const char* name,
                                        uint32_t* size, bool* is_const) {
    hsa_executable_symbol_t sym = {0};
    CHECK(hsa_executable_get_symbol_by_name(exe, name, &agent, &sym),
          "hsa_executable_get_symbol_by_name(variable)");
    hsa_symbol_kind_t kind = HSA_SYMBOL_KIND_INDIRECT_FUNCTION; /* fails unless written */
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_TYPE, &kind),
          "symbol info TYPE");
    if (kind != HSA_SYMBOL_KIND_VARIABLE) hsu_fail(2, "%s is not a variable symbol", name);
    uint64_t addr = 0;
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS, &addr),
          "symbol info VARIABLE_ADDRESS");
    if (addr == 0) hsu_fail(2, "%s has VARIABLE_ADDRESS 0", name);
    if (size != NULL)
        CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, size),
              "symbol info VARIABLE_SIZE");
    if (is_const != NULL)
        CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST,
                                             is_const),
              "symbol info VARIABLE_IS_CONST");
    return addr;
}

/* Kernarg buffer for kernel `k` from the kernarg pool: max(KERNARG_SEGMENT_SIZE, args_size)
 * bytes, zeroed, with the explicit arguments memcpy'd to its start (kernarg memory is host
 * accessible). Free it with hsu_free once the dispatches using it have completed. */
static inline void* hsu_make_kernarg(hsa_amd_memory_pool_t kernarg_pool, const hsu_kernel_t* k,
                                     const void* args, size_t args_size) {
    if (k->kernarg_size < args_size)
        hsu_fail(2, "KERNARG_SEGMENT_SIZE %u < sizeof(args) %zu", (unsigned)k->kernarg_size,
                 args_size);
    size_t bytes = k->kernarg_size;
    void* p = hsu_alloc(kernarg_pool, bytes);
    memset(p, 0, bytes);
    memcpy(p, args, args_size);
    return p;
}

/* ---- queues, dispatch and completion ---------------------------------------------------- */

/* hsa_queue_create(agent, size, MULTI, no callback, UINT32_MAX, UINT32_MAX); `size` is
 * clamped to the agent's QUEUE_MIN_SIZE..QUEUE_MAX_SIZE. */
static inline hsa_queue_t* hsu_create_queue(hsa_agent_t agent, uint32_t size) {
    uint32_t min = 0, max = 0;
    CHECK(hsa_agent_get_info(agent, HSA_AGENT_INFO_QUEUE_MIN_SIZE, &min), "QUEUE_MIN_SIZE");
    CHECK(hsa_agent_get_info(agent, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &max), "QUEUE_MAX_SIZE");
    if (size < min) size = min;
    if (max != 0 && size > max) size = max;
    hsa_queue_t* q = NULL;
    CHECK(hsa_queue_create(agent, size, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX,
                           &q),
          "hsa_queue_create");
    if (q == NULL || q->base_address == NULL || q->size == 0 || (q->size & (q->size - 1)) != 0)
        hsu_fail(2, "hsa_queue_create returned an unusable queue");
    return q;
}

/* Completion signal: initial value 1; a dispatch/copy decrements it to 0. */
static inline hsa_signal_t hsu_signal(void) {
    hsa_signal_t s = {0};
    CHECK(hsa_signal_create(1, 0, NULL, &s), "hsa_signal_create");
    return s;
}

/* Reserves the next packet slot of `q` and waits (<= 10 s, then exit 3) until the packet
 * processor has freed it; returns its index. */
static inline uint64_t hsu_reserve_slot(hsa_queue_t* q) {
    const uint64_t index = hsa_queue_add_write_index_scacq_screl(q, 1);
    const double deadline = hsu_now_s() + HSU_QUEUE_ROOM_TIMEOUT_S;
    while (index - hsa_queue_load_read_index_scacquire(q) >= (uint64_t)q->size) {
        if (hsu_now_s() > deadline)
            hsu_fail(3, "queue full for %.0f s (packet %llu)", HSU_QUEUE_ROOM_TIMEOUT_S,
                     (unsigned long long)index);
        sched_yield();
    }
    return index;
}

/* Writes one 1-D KERNEL_DISPATCH packet and rings the doorbell:
 * reserve a slot, wait (<= 10 s) for room, fill the body, release-store header+setup,
 * store the packet index to the doorbell. */
static inline void hsu_dispatch_1d(hsa_queue_t* q, const hsu_kernel_t* k, void* kernarg,
                                   uint32_t workgroup_size, uint32_t grid_size,
                                   hsa_signal_t completion) {
    if (workgroup_size == 0 || workgroup_size > UINT16_MAX || grid_size == 0)
        hsu_fail(2, "bad dispatch geometry wg=%u grid=%u", (unsigned)workgroup_size,
                 (unsigned)grid_size);
    const uint64_t index = hsu_reserve_slot(q);
    hsa_kernel_dispatch_packet_t* pkt =
        (hsa_kernel_dispatch_packet_t*)q->base_address + (index & ((uint64_t)q->size - 1));
    /* body: everything but the first 32 bits (header, setup) */
    pkt->workgroup_size_x = (uint16_t)workgroup_size;
    pkt->workgroup_size_y = 1;
    pkt->workgroup_size_z = 1;
    pkt->reserved0 = 0;
    pkt->grid_size_x = grid_size;
    pkt->grid_size_y = 1;
    pkt->grid_size_z = 1;
    pkt->private_segment_size = k->private_size;
    pkt->group_segment_size = k->group_size;
    pkt->kernel_object = k->object;
    pkt->kernarg_address = kernarg;
    pkt->reserved2 = 0;
    pkt->completion_signal = completion;
    /* header last, together with setup, as one 32-bit release store */
    const uint16_t header =
        (uint16_t)((HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                   (1u << HSA_PACKET_HEADER_BARRIER) |
                   (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                   (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
    const uint16_t setup = (uint16_t)(1u << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
    __atomic_store_n((uint32_t*)(void*)pkt, (uint32_t)header | ((uint32_t)setup << 16),
                     __ATOMIC_RELEASE);
    hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index);
}

/* Writes one BARRIER_AND packet (barrier bit, system fences) that resolves once `dep` is 0
 * (a null handle: at once) and then decrements `completion` (null: none), and rings the
 * doorbell; waits for room as hsu_dispatch_1d does (hsu_reserve_slot). Not waited for. */
static inline void hsu_barrier_on(hsa_queue_t* q, hsa_signal_t dep, hsa_signal_t completion) {
    const uint64_t index = hsu_reserve_slot(q);
    hsa_barrier_and_packet_t* pkt =
        (hsa_barrier_and_packet_t*)q->base_address + (index & ((uint64_t)q->size - 1));
    memset((uint8_t*)pkt + 4, 0, sizeof *pkt - 4);
    pkt->dep_signal[0] = dep;
    pkt->completion_signal = completion;
    const uint16_t header =
        (uint16_t)((HSA_PACKET_TYPE_BARRIER_AND << HSA_PACKET_HEADER_TYPE) |
                   (1u << HSA_PACKET_HEADER_BARRIER) |
                   (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                   (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
    __atomic_store_n(&pkt->header, header, __ATOMIC_RELEASE);
    hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index);
}

/* Waits until `sig` == 0 (hsa_signal_wait_scacquire EQ 0, BLOCKED, ~100 ms timeout hints, in a
 * loop). Fails with exit 3 after 30 s, with exit 2 if the signal goes negative (error). */
static inline void hsu_wait_zero(hsa_signal_t sig, const char* what) {
    uint64_t freq = 0;
    if (hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &freq) != HSA_STATUS_SUCCESS ||
        freq == 0)
        freq = 1000000000ull;
    const uint64_t hint = freq / 10 ? freq / 10 : 1;
    const double deadline = hsu_now_s() + HSU_SIGNAL_TIMEOUT_S;
    for (;;) {
        hsa_signal_value_t v = hsa_signal_wait_scacquire(sig, HSA_SIGNAL_CONDITION_EQ, 0, hint,
                                                         HSA_WAIT_STATE_BLOCKED);
        if (v == 0) return;
        if (v < 0) hsu_fail(2, "%s: completion signal went negative (%lld)", what, (long long)v);
        if (hsu_now_s() > deadline)
            hsu_fail(3, "%s: signal still %lld after %.0f s", what, (long long)v,
                     HSU_SIGNAL_TIMEOUT_S);
    }
}

#endif /* HSA_SAMPLE_UTIL_H */
