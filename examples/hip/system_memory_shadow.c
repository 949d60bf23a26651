/* Shadow of system_memory.hip: its two kernels and the __device__ table. */
#include <stdint.h>
#include "hsa_emu_kernel.h"

HSA_EMU_EXPORT int g_table[64];

typedef struct {
    int* p;
    int n;
} span_args_t;

HSA_EMU_KERNEL(_Z7add_onePii, span_args_t) {
    const span_args_t* a = (const span_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if ((int)i < a->n) a->p[i] += 1;
    }
}

HSA_EMU_KERNEL(_Z7add_two4Span, span_args_t) {
    const span_args_t* a = (const span_args_t*)wg->kernarg;
    HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
        if ((int)i < a->n) a->p[i] += 2;
    }
}
