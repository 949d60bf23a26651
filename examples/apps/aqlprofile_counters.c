/*
 * aqlprofile_counters - hardware counters through the AQL profile extension, no SDK.
 *
 * Gets the HSA_EXTENSION_AMD_AQLPROFILE v1 table (hsa_ven_amd_aqlprofile.h), builds a PMC
 * profile with SQ_WAVES (SQ event 4) and GRBM_COUNT (GRBM event 0) for the first GPU, submits
 * start packet, one vector_add dispatch of SAMPLE_GROUPS (default 64) work-groups of 256
 * work-items, stop packet, and reads the values with iterate_data (summing the samples of an
 * event, as real per-shader-engine blocks report one each). Checks SQ_WAVES == groups * 4
 * (gfx9 wave64: 256 work-items are 4 waves), GRBM_COUNT > 0, c = a + b, and that a profile with
 * one SQ counter more than get_info(BLOCK_COUNTERS) allows is refused by start.
 * Usage: aqlprofile_counters CODE_OBJECT   (or HSA_SAMPLE_KERNELS=CODE_OBJECT ...)
 */
#define _POSIX_C_SOURCE 200809L
#define SAMPLE_APP "aqlprofile_counters"
#include "hsa_sample_util.h"

/* The header defines an unused static array (the library's file name). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-const-variable"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include <hsa/hsa_ven_amd_aqlprofile.h>
#pragma GCC diagnostic pop

typedef struct {
    const float* a;
    const float* b;
    float* c;
    uint32_t n;
} vector_add_args_t;

#define WORKGROUP 256u
#define MAX_SQ 64u

static hsa_ven_amd_aqlprofile_pfn_t api;

/* Writes a 64-byte packet (header last, with the next 16 bits, as one release store) and
 * rings the doorbell. */
static void submit_packet(hsa_queue_t* q, const void* packet) {
    const uint64_t index = hsa_queue_add_write_index_scacq_screl(q, 1);
    const double deadline = hsu_now_s() + HSU_QUEUE_ROOM_TIMEOUT_S;
    while (index - hsa_queue_load_read_index_scacquire(q) >= (uint64_t)q->size) {
        if (hsu_now_s() > deadline) hsu_fail(3, "queue full");
        sched_yield();
    }
    uint8_t* slot = (uint8_t*)q->base_address + 64 * (index & ((uint64_t)q->size - 1));
    memcpy(slot + 4, (const uint8_t*)packet + 4, 60);
    uint32_t first;
    memcpy(&first, packet, 4);
    __atomic_store_n((uint32_t*)(void*)slot, first, __ATOMIC_RELEASE);
    hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index);
}

static void submit_pm4(hsa_queue_t* q, hsa_ext_amd_aql_pm4_packet_t p, hsa_signal_t done) {
    p.header = (uint16_t)((HSA_PACKET_TYPE_VENDOR_SPECIFIC << HSA_PACKET_HEADER_TYPE) |
                          (1u << HSA_PACKET_HEADER_BARRIER) |
                          (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                          (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
    p.completion_signal = done;
    submit_packet(q, &p);
}

typedef struct {
    const hsa_ven_amd_aqlprofile_event_t* events;
    uint32_t count;
    uint64_t sums[2];
    uint32_t samples;
} results_t;

static hsa_status_t collect(hsa_ven_amd_aqlprofile_info_type_t type,
                            hsa_ven_amd_aqlprofile_info_data_t* info, void* data) {
    results_t* r = data;
    if (type != HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA) return HSA_STATUS_SUCCESS;
    for (uint32_t i = 0; i < r->count; ++i) {
        const hsa_ven_amd_aqlprofile_event_t* e = &r->events[i];
        if (e->block_name == info->pmc_data.event.block_name &&
            e->block_index == info->pmc_data.event.block_index &&
            e->counter_id == info->pmc_data.event.counter_id) {
            r->sums[i] += info->pmc_data.result;
            r->samples++;
            break;
        }
    }
    return HSA_STATUS_SUCCESS;
}

static const char* last_error(void) {
    const char* s = NULL;
    if (api.hsa_ven_amd_aqlprofile_error_string(&s) != HSA_STATUS_SUCCESS || s == NULL)
        return "(no error string)";
    return s;
}

static hsa_ven_amd_aqlprofile_profile_t make_profile(hsa_agent_t gpu,
                                                     const hsa_ven_amd_aqlprofile_event_t* ev,
                                                     uint32_t n) {
    hsa_ven_amd_aqlprofile_profile_t p;
    memset(&p, 0, sizeof p);
    p.agent = gpu;
    p.type = HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC;
    p.events = ev;
    p.event_count = n;
    return p;
}

int main(int argc, char** argv) {
    const char* path = hsu_code_object_path(argc, argv);
    const uint32_t groups = hsu_env_u32("SAMPLE_GROUPS", 64, 1, 1u << 16);
    const uint32_t n = groups * WORKGROUP;
    const size_t bytes = (size_t)n * sizeof(float);

    CHECK(hsa_init(), "hsa_init");
    hsa_agent_t gpu = hsu_first_gpu();
    bool ok = false;
    uint16_t minor = 0;
    CHECK(hsa_agent_major_extension_supported(HSA_EXTENSION_AMD_AQLPROFILE, gpu, 1, &minor, &ok),
          "hsa_agent_major_extension_supported(AQLPROFILE)");
    if (!ok) hsu_fail(2, "the GPU does not support HSA_EXTENSION_AMD_AQLPROFILE 1.x");
    memset(&api, 0, sizeof api);
    CHECK(hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_AQLPROFILE,
                                               hsa_ven_amd_aqlprofile_VERSION_MAJOR, sizeof api,
                                               &api),
          "hsa_system_get_major_extension_table(AQLPROFILE)");
    if (api.hsa_ven_amd_aqlprofile_iterate_data == NULL || api.hsa_ven_amd_aqlprofile_start == NULL)
        hsu_fail(2, "the aqlprofile table is incomplete");

    const hsa_ven_amd_aqlprofile_event_t events[2] = {
        {HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SQ, 0, 4},   /* SQ_WAVES */
        {HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_GRBM, 0, 0}, /* GRBM_COUNT */
    };
    for (int i = 0; i < 2; ++i) {
        bool valid = false;
        CHECK(api.hsa_ven_amd_aqlprofile_validate_event(gpu, &events[i], &valid),
              "validate_event");
        if (!valid) hsu_fail(2, "event %d is not valid on this GPU", i);
    }

    /* The profile: buffers of the sizes the library asks for. */
    hsa_ven_amd_aqlprofile_profile_t profile = make_profile(gpu, events, 2);
    uint32_t cmd_size = 0, out_size = 0;
    CHECK(api.hsa_ven_amd_aqlprofile_get_info(
              &profile, HSA_VEN_AMD_AQLPROFILE_INFO_COMMAND_BUFFER_SIZE, &cmd_size),
          "get_info(COMMAND_BUFFER_SIZE)");
    CHECK(api.hsa_ven_amd_aqlprofile_get_info(&profile, HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA_SIZE,
                                              &out_size),
          "get_info(PMC_DATA_SIZE)");
    hsa_amd_memory_pool_t host_pool = hsu_fine_pool();
    profile.command_buffer.ptr = hsu_alloc(host_pool, cmd_size);
    profile.command_buffer.size = cmd_size;
    profile.output_buffer.ptr = hsu_alloc(host_pool, out_size);
    profile.output_buffer.size = out_size;
    memset(profile.output_buffer.ptr, 0xff, out_size);
    CHECK(hsa_amd_agents_allow_access(1, &gpu, NULL, profile.command_buffer.ptr),
          "allow access (command buffer)");
    CHECK(hsa_amd_agents_allow_access(1, &gpu, NULL, profile.output_buffer.ptr),
          "allow access (output buffer)");
    hsa_ext_amd_aql_pm4_packet_t start, stop;
    memset(&start, 0, sizeof start);
    memset(&stop, 0, sizeof stop);
    CHECK(api.hsa_ven_amd_aqlprofile_start(&profile, &start), "aqlprofile start");
    CHECK(api.hsa_ven_amd_aqlprofile_stop(&profile, &stop), "aqlprofile stop");

    /* The work: vector_add over groups x 256 work-items. */
    hsa_amd_memory_pool_t dev_pool = hsu_coarse_pool(gpu);
    hsa_executable_t exe = hsu_load_code_object(path, &gpu, 1);
    hsu_kernel_t k = hsu_get_kernel(exe, gpu, "vector_add");
    float* host = hsu_alloc(host_pool, 3 * bytes);
    for (uint32_t i = 0; i < n; ++i) {
        host[i] = (float)i;
        host[n + i] = 0.5f;
        host[2 * n + i] = -1.0f;
    }
    float* dev = hsu_alloc(dev_pool, 3 * bytes);
    CHECK(hsa_memory_copy(dev, host, 3 * bytes), "hsa_memory_copy(-> device)");
    vector_add_args_t args = {dev, dev + n, dev + 2 * n, n};
    void* kernarg = hsu_make_kernarg(hsu_kernarg_pool(), &k, &args, sizeof args);
    hsa_queue_t* q = hsu_create_queue(gpu, 64);
    hsa_signal_t started = hsu_signal(), ran = hsu_signal(), stopped = hsu_signal();

    submit_pm4(q, start, started);
    hsu_dispatch_1d(q, &k, kernarg, WORKGROUP, n, ran);
    submit_pm4(q, stop, stopped);
    hsu_wait_zero(stopped, "stop packet");
    hsu_wait_zero(ran, "vector_add dispatch");
    hsu_wait_zero(started, "start packet");

    results_t r = {events, 2, {0, 0}, 0};
    CHECK(api.hsa_ven_amd_aqlprofile_iterate_data(&profile, collect, &r), "iterate_data");
    CHECK(hsa_memory_copy(host + 2 * n, dev + 2 * n, bytes), "hsa_memory_copy(c -> host)");
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (host[2 * n + i] != (float)i + 0.5f) ++bad;

    /* One SQ counter more than a pass may hold: start must refuse it. */
    uint32_t sq_limit = 0;
    hsa_ven_amd_aqlprofile_profile_t probe = make_profile(gpu, events, 1);
    CHECK(api.hsa_ven_amd_aqlprofile_get_info(&probe, HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_COUNTERS,
                                              &sq_limit),
          "get_info(BLOCK_COUNTERS) of SQ");
    if (sq_limit == 0 || sq_limit >= MAX_SQ) hsu_fail(2, "SQ limit %u", (unsigned)sq_limit);
    hsa_ven_amd_aqlprofile_event_t too_many[MAX_SQ];
    for (uint32_t i = 0; i <= sq_limit; ++i) too_many[i] = events[0];
    hsa_ven_amd_aqlprofile_profile_t over = make_profile(gpu, too_many, sq_limit + 1);
    over.command_buffer = profile.command_buffer;
    over.command_buffer.size = cmd_size;
    over.output_buffer = profile.output_buffer;
    hsa_ext_amd_aql_pm4_packet_t refused;
    memset(&refused, 0, sizeof refused);
    const hsa_status_t over_status = api.hsa_ven_amd_aqlprofile_start(&over, &refused);
    const char* over_why = last_error();

    CHECK(hsa_signal_destroy(started), "hsa_signal_destroy");
    CHECK(hsa_signal_destroy(ran), "hsa_signal_destroy");
    CHECK(hsa_signal_destroy(stopped), "hsa_signal_destroy");
    CHECK(hsa_queue_destroy(q), "hsa_queue_destroy");
    hsu_free(kernarg);
    hsu_free(dev);
    hsu_free(host);
    hsu_free(profile.command_buffer.ptr);
    hsu_free(profile.output_buffer.ptr);
    CHECK(hsa_executable_destroy(exe), "hsa_executable_destroy");

    const uint64_t waves_per_group = (WORKGROUP + 63) / 64;
    const uint64_t want_waves = (uint64_t)groups * waves_per_group;
    printf("SQ_WAVES=%llu (want %llu) GRBM_COUNT=%llu samples=%u SQ limit=%u\n",
           (unsigned long long)r.sums[0], (unsigned long long)want_waves,
           (unsigned long long)r.sums[1], (unsigned)r.samples, (unsigned)sq_limit);
    printf("over the limit: status 0x%x: %s\n", (unsigned)over_status, over_why);
    if (bad != 0) hsu_fail(1, "%u of %u results wrong", (unsigned)bad, (unsigned)n);
    if (r.sums[0] != want_waves)
        hsu_fail(1, "SQ_WAVES %llu, want %llu", (unsigned long long)r.sums[0],
                 (unsigned long long)want_waves);
    if (r.sums[1] == 0) hsu_fail(1, "GRBM_COUNT is 0");
    if (over_status == HSA_STATUS_SUCCESS)
        hsu_fail(1, "a profile of %u SQ counters (limit %u) was accepted",
                 (unsigned)(sq_limit + 1), (unsigned)sq_limit);
    CHECK(hsa_shut_down(), "hsa_shut_down");
    printf("RESULT aqlprofile_counters OK SQ_WAVES=%llu groups=%u\n",
           (unsigned long long)r.sums[0], (unsigned)groups);
    return 0;
}
