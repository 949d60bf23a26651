//! Code objects: readers, executables, symbols, and the AMD loader extension (0x201).
//!
//! OWNER: helper D.

use std::ffi::c_void;

use rocprof_replay_sys::*;

use crate::api::Tables;

/// Fills the code-object, executable and symbol slots.
pub(crate) fn install(_t: &mut Tables) {}

/// Writes the loader extension function table (`hsa_ven_amd_loader_1_0x_pfn_t`) for
/// `hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_LOADER, version_major, size, table)`.
///
/// # Safety
/// `table` must be valid for `size` bytes of writes.
pub(crate) unsafe fn fill_loader_extension_table(
    _version_major: u16,
    _size: usize,
    _table: *mut c_void,
) -> hsa_status_t {
    HSA_STATUS_ERROR
}
