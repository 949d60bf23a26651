//! Memory: pools and regions (info, iteration, allocate/free with VRAM accounting), copies
//! (`hsa_memory_copy`, async copies on a copy-engine thread, rect copies, fill), lock/unlock,
//! access, exact `hsa_amd_pointer_info`, the vmem API, IPC memory and SVM attributes.
//!
//! All "device" memory is host memory: every allocation is a zeroed, page-aligned anonymous
//! mapping, sized up to the pool granule (4096) and recorded in one address registry, which
//! `hsa_amd_pointer_info` answers from exactly.
//!
//! | submodule | what it does |
//! |---|---|
//! | `registry` | the address registry (allocations, locked ranges, vmem), mapping primitives, pointer descriptions |
//! | `pools` | pool/region info and iteration, allocate/free, access, lock, copy, fill, pointer info, deallocation callbacks, coherency, migration stub |
//! | `copy` | async copies (linear, on engine, rect) and SVM prefetch completions on the copy-engine thread |
//! | `vmem` | the ROCm 6.x virtual-memory API on real page mappings |
//! | `ipc` | IPC memory: an exported allocation moves into a memfd that attachments map |
//! | `svm` | SVM attributes per page range, and prefetch (no data movement) |
//!
//! Choices where ROCr is loose: a zero size or null out-pointer for an allocation is
//! `INVALID_ARGUMENT` (as the headers document); `hsa_amd_pointer_info` reports the rounded
//! size; freeing NULL succeeds; freeing anything but a live allocation's base is
//! `INVALID_ARGUMENT`; migration returns `HSA_STATUS_ERROR` (can_migrate reports false).

mod copy;
mod ipc;
mod pools;
mod registry;
mod svm;
mod vmem;

use crate::api::Tables;

pub(crate) use copy::shutdown;

/// Fills the memory slots of the core and AMD extension tables.
pub(crate) fn install(t: &mut Tables) {
    pools::install(t);
    copy::install(t);
    vmem::install(t);
    ipc::install(t);
    svm::install(t);
}
