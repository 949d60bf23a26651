/* Shadow of managed.hip: its kernels, the __managed__ variable (a pointer to the managed
 * memory HIP allocates for it, which the runtime stores when it registers the variable) and
 * the __device__ pointer the program stores with hipMemcpyToSymbol. */
#include <stdint.h>
#include "hsa_emu_kernel.h"

HSA_EMU_EXPORT int* m_counter;
HSA_EMU_EXPORT int* g_slot;

typedef struct {
    int k;
} k_args_t;

HSA_EMU_KERNEL(_Z4bumpi, k_args_t) {
    const k_args_t* a = (const k_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if (i == 0) *m_counter += a->k;
    }
}

typedef struct {
    int* p;
    int n;
} add_one_args_t;

HSA_EMU_KERNEL(_Z7add_onePii, add_one_args_t) {
    const add_one_args_t* a = (const add_one_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if ((int)i < a->n) a->p[i] += 1;
    }
}

HSA_EMU_KERNEL(_Z9bump_sloti, k_args_t) {
    const k_args_t* a = (const k_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if (i == 0) *g_slot += a->k;
    }
}

typedef struct {
    const int* p;
    int n;
    int* out;
} sum_args_t;

HSA_EMU_KERNEL(_Z11sum_managedPKiiPi, sum_args_t) {
    const sum_args_t* a = (const sum_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if (i == 0) {
            int s = *m_counter;
            for (int j = 0; j < a->n; ++j) s += a->p[j];
            a->out[0] = s;
        }
    }
}
