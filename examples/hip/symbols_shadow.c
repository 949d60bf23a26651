/* Shadow of symbols.hip: its kernel, and the __device__ globals it uses. The loader copies the
 * code object's initial values into these objects when it loads the code object. */
#include <stdint.h>
#include "hsa_emu_kernel.h"

HSA_EMU_EXPORT int g_coeffs[4];
HSA_EMU_EXPORT unsigned long long g_sum;
HSA_EMU_EXPORT unsigned g_launches;

typedef struct {
    const int* x;
    int n;
} weigh_args_t;

HSA_EMU_KERNEL(_Z5weighPKii, weigh_args_t) {
    const weigh_args_t* a = (const weigh_args_t*)wg->kernarg;
    unsigned long long local = 0;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if ((int)i < a->n) local += (unsigned long long)(a->x[i] * g_coeffs[i % 4]);
        if (i == 0) __atomic_fetch_add(&g_launches, 1u, __ATOMIC_RELAXED);
    }
    __atomic_fetch_add(&g_sum, local, __ATOMIC_RELAXED);
}
