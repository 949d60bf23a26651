/*
 * hsa_emu_kernel.h - the kernel ABI of hsa-emu, the CPU HSA runtime of rocprof-replay.
 *
 * A code object for hsa-emu is a host shared library (x86-64 ELF) built from C or Rust
 * kernels written against this header. hsa-emu calls a kernel once per work-group, on one of
 * its worker threads; the kernel loops over the work-items of that group itself.
 *
 *   typedef struct { float* a; float* b; float* c; uint32_t n; } vadd_args_t;
 *
 *   HSA_EMU_KERNEL(vector_add, vadd_args_t) {
 *       const vadd_args_t* args = (const vadd_args_t*)wg->kernarg;
 *       HSA_EMU_FOR_EACH_ITEM_X(wg, i) {
 *           if (i < args->n) args->c[i] = args->a[i] + args->b[i];
 *       }
 *   }
 *
 * In the executable the kernel appears as the symbol "vector_add.kd" with
 * KERNARG_SEGMENT_SIZE = sizeof(vadd_args_t); its KERNEL_OBJECT is the address of a
 * 64-byte kernel descriptor. Every other exported data object of the library is a
 * VARIABLE symbol (const objects in read-only data report VARIABLE_IS_CONST). Names
 * starting with "__hsa_emu_" are reserved for this header and are not symbols.
 */
#ifndef HSA_EMU_KERNEL_H
#define HSA_EMU_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a kernel receives for one work-group. */
typedef struct {
    const void* kernarg;          /* the dispatch packet's kernarg_address */
    uint32_t group_id[3];         /* this work-group's id in each dimension */
    uint32_t workgroup_size[3];   /* work-items per group (packet workgroup_size_*) */
    uint32_t grid_size[3];        /* work-items in the grid (packet grid_size_*) */
    void* group_segment;          /* group_segment_size bytes, zeroed, private to this group */
} hsa_emu_workgroup_t;

/* Signature of a kernel entry point. */
typedef void (*hsa_emu_kernel_fn_t)(const hsa_emu_workgroup_t*);

/* Version of the metadata record below. */
#define HSA_EMU_KERNEL_ABI_VERSION 1u

/* Metadata hsa-emu reads for each kernel (exported as __hsa_emu_meta_<name>). */
typedef struct {
    uint32_t abi_version;         /* HSA_EMU_KERNEL_ABI_VERSION */
    uint32_t kernarg_size;        /* sizeof(args_type) */
    uint32_t kernarg_alignment;   /* _Alignof(args_type) */
    uint32_t group_segment_size;  /* static group memory in bytes */
    uint32_t private_segment_size;/* always 0 on hsa-emu */
    uint32_t reserved;
    hsa_emu_kernel_fn_t entry;    /* the kernel itself */
} hsa_emu_kernel_meta_t;

#if defined(__cplusplus)
#define HSA_EMU_ALIGNOF(t) alignof(t)
#else
#define HSA_EMU_ALIGNOF(t) _Alignof(t)
#endif

#define HSA_EMU_EXPORT __attribute__((visibility("default"), used))

/* Declare and export a kernel with `group_bytes` of static group memory. */
#define HSA_EMU_KERNEL_WITH_GROUP(name, args_type, group_bytes)                          \
    HSA_EMU_EXPORT void name(const hsa_emu_workgroup_t* wg);                             \
    HSA_EMU_EXPORT const hsa_emu_kernel_meta_t __hsa_emu_meta_##name = {                 \
        HSA_EMU_KERNEL_ABI_VERSION, (uint32_t)sizeof(args_type),                         \
        (uint32_t)HSA_EMU_ALIGNOF(args_type), (uint32_t)(group_bytes), 0u, 0u, name};    \
    HSA_EMU_EXPORT void name(const hsa_emu_workgroup_t* wg)

/* Declare and export a kernel: `void name(const hsa_emu_workgroup_t* wg)`. */
#define HSA_EMU_KERNEL(name, args_type) HSA_EMU_KERNEL_WITH_GROUP(name, args_type, 0)

/* Flat x index of the first work-item of this group. */
#define HSA_EMU_GROUP_BASE_X(wg) ((uint64_t)(wg)->group_id[0] * (wg)->workgroup_size[0])

/* Loop over the x indices of this group's work-items that lie inside the grid. */
#define HSA_EMU_FOR_EACH_ITEM_X(wg, i)                                                    \
    for (uint64_t i = HSA_EMU_GROUP_BASE_X(wg),                                          \
                  i##_end = HSA_EMU_GROUP_BASE_X(wg) + (wg)->workgroup_size[0];          \
         i < i##_end && i < (wg)->grid_size[0]; ++i)

#ifdef __cplusplus
}
#endif

#endif /* HSA_EMU_KERNEL_H */
