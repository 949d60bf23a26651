/* Shadow of module_kernels.hip: saxpy and the variable m_offset it reads. */
#include "hsa_emu_kernel.h"

HSA_EMU_EXPORT float m_offset;

typedef struct {
    float a;
    const float* x;
    float* y;
    int n;
} saxpy_args_t;

HSA_EMU_KERNEL(saxpy, saxpy_args_t) {
    const saxpy_args_t* args = (const saxpy_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if ((int)i < args->n) args->y[i] = args->a * args->x[i] + args->y[i] + m_offset;
    }
}
