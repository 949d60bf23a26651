/* Shadows of flag_wait.hip's kernels. wait_flag's first work-item waits (at most 20 s) for the
 * flag the program sets after the launch, then every item adds its value (1000 when it gave
 * up). */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "hsa_emu_kernel.h"

typedef struct {
    volatile int* flag;
    int* data;
    int n;
} wait_args_t;

typedef struct {
    int* flag;
    int v;
} set_args_t;

static double seconds_since(const struct timespec* t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

HSA_EMU_KERNEL(_Z9wait_flagPViPii, wait_args_t) {
    const wait_args_t* a = (const wait_args_t*)wg->kernarg;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int v;
    while ((v = __atomic_load_n(a->flag, __ATOMIC_ACQUIRE)) == 0) {
        if (seconds_since(&t0) > 20.0) {
            v = 1000;
            break;
        }
        struct timespec nap = {0, 1000000L};
        nanosleep(&nap, NULL);
    }
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if ((int)i < a->n) a->data[i] += v;
    }
}

HSA_EMU_KERNEL(_Z8set_flagPii, set_args_t) {
    const set_args_t* a = (const set_args_t*)wg->kernarg;
    __atomic_store_n(a->flag, a->v, __ATOMIC_RELEASE);
}
