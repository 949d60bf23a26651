/* Shadow of vector_add.hip's kernel: the same computation on the host. */
#include <stdint.h>
#include "hsa_emu_kernel.h"

typedef struct {
    const float* a;
    const float* b;
    float* c;
    uint32_t n;
} vadd_args_t;

HSA_EMU_KERNEL(vadd, vadd_args_t) {
    const vadd_args_t* args = (const vadd_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if (i < args->n) args->c[i] = args->a[i] + args->b[i];
    }
}
