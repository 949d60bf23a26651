//! `hsa_init` / `hsa_shut_down`, the reference count, and tool loading.

use crate::api::Tables;

/// Fills the runtime slots (init, shut down, status strings).
pub(crate) fn install(_t: &mut Tables) {}
