//! Memory: pools and regions (info, iteration, allocate/free with VRAM accounting), copies
//! (`hsa_memory_copy`, async copies on a copy-engine thread, rect copies, fill), lock/unlock,
//! access, exact `hsa_amd_pointer_info`, and the vmem API.
//!
//! OWNER: helper B.

use crate::api::Tables;

/// Fills the memory slots of the core and AMD extension tables.
pub(crate) fn install(_t: &mut Tables) {}
