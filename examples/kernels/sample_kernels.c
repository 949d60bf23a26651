/*
 * sample_kernels.c - kernels of the rocprof-replay sample applications, for hsa-emu.
 *
 * Build (a host shared library is an hsa-emu code object):
 *   gcc -std=c11 -Wall -Wextra -Werror -O2 -I hsa-emu/include -shared -fPIC \
 *       -o libsample_kernels.so examples/kernels/sample_kernels.c
 *
 * Every kernel is 1-D. Symbols seen through the HSA executable:
 *   vector_add.kd, inc_in_place.kd, checksum_then_scribble.kd, empty_kernel.kd,
 *   sleep_kernel.kd                                                             (KERNEL)
 *   hit_counter   (VARIABLE, writable, initial 0)
 *   lookup_table  (VARIABLE, VARIABLE_IS_CONST, {1,2,3,4})
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>

#include "hsa_emu_kernel.h"

/* Module-scope counter: inc_in_place adds exactly 1 per executed dispatch. */
HSA_EMU_EXPORT uint32_t hit_counter = 0;

/* Read-only module data (lives in .rodata, so it reports VARIABLE_IS_CONST). */
HSA_EMU_EXPORT const uint32_t lookup_table[4] = {1u, 2u, 3u, 4u};

/* ---- vector_add: c[i] = a[i] + b[i] ---------------------------------------------------- */
typedef struct {
    const float* a;
    const float* b;
    float* c;
    uint32_t n;
} vector_add_args_t;

HSA_EMU_KERNEL(vector_add, vector_add_args_t) {
    const vector_add_args_t* args = (const vector_add_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if (i < args->n) args->c[i] = args->a[i] + args->b[i];
    }
}

/* ---- inc_in_place: a[i] += 1; global work-item 0 also bumps hit_counter ---------------- */
typedef struct {
    uint32_t* a;
    uint32_t n;
} inc_in_place_args_t;

HSA_EMU_KERNEL(inc_in_place, inc_in_place_args_t) {
    const inc_in_place_args_t* args = (const inc_in_place_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if (i < args->n) args->a[i] += 1u;
        if (i == 0) __atomic_fetch_add(&hit_counter, 1u, __ATOMIC_RELAXED);
    }
}

/* ---- checksum_then_scribble -------------------------------------------------------------
 * MUST be launched with a single work-group (grid_size_x <= workgroup_size_x): only
 * work-item 0 of work-group 0 does anything, serially:
 *   out_checksums[*pass_slot] = FNV-1a-64 over the n*4 bytes of data[0..n) (host byte order);
 *   *pass_slot += 1;
 *   data[i] = data[i] * 2654435761u + 1   for every i < n.
 * data is meant to be restored between replay passes; out_checksums and pass_slot are meant
 * to live in fine-grained (not restored) memory, so every pass appends one checksum and all
 * of them are equal when the restore works. */
typedef struct {
    uint32_t* data;
    uint32_t n;
    uint64_t* out_checksums;
    uint32_t* pass_slot;
} checksum_then_scribble_args_t;

static uint64_t fnv1a64(const void* p, uint64_t len) {
    const unsigned char* b = (const unsigned char*)p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t k = 0; k < len; ++k) {
        h ^= b[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

HSA_EMU_KERNEL(checksum_then_scribble, checksum_then_scribble_args_t) {
    const checksum_then_scribble_args_t* args = (const checksum_then_scribble_args_t*)wg->kernarg;
    if (wg->group_id[0] != 0 || wg->group_id[1] != 0 || wg->group_id[2] != 0) return;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if (i != 0) continue;
        uint32_t slot = *args->pass_slot;
        args->out_checksums[slot] = fnv1a64(args->data, (uint64_t)args->n * sizeof(uint32_t));
        *args->pass_slot = slot + 1u;
        for (uint32_t k = 0; k < args->n; ++k) args->data[k] = args->data[k] * 2654435761u + 1u;
    }
}

/* ---- empty_kernel: does nothing (dispatch-overhead benchmarks) -------------------------- */
typedef struct {
    uint32_t unused;
} empty_kernel_args_t;

HSA_EMU_KERNEL(empty_kernel, empty_kernel_args_t) {
    (void)wg;
}

/* ---- sleep_kernel: work-group 0 sleeps `ms` milliseconds (slow kernels for tests) ------- */
typedef struct {
    uint32_t ms;
    uint32_t unused;
} sleep_kernel_args_t;

HSA_EMU_KERNEL(sleep_kernel, sleep_kernel_args_t) {
    const sleep_kernel_args_t* args = (const sleep_kernel_args_t*)wg->kernarg;
    if (wg->group_id[0] != 0) return;
    struct timespec ts = {(time_t)(args->ms / 1000u), (long)(args->ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
