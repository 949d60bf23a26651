/* Shadows of streams.hip's template instances scale_k<3> and scale_k<2>. */
#include "hsa_emu_kernel.h"

typedef struct {
    int* data;
    int n;
} scale_args_t;

#define SCALE(name, k)                                                      \
    HSA_EMU_KERNEL(name, scale_args_t) {                                    \
        const scale_args_t* a = (const scale_args_t*)wg->kernarg;           \
        HSA_EMU_FOR_EACH_ITEM_X(wg, i) {                                    \
            if ((int)i < a->n) a->data[i] = a->data[i] * (k) + 1;           \
        }                                                                   \
    }

SCALE(_Z7scale_kILi3EEvPii, 3)
SCALE(_Z7scale_kILi2EEvPii, 2)
