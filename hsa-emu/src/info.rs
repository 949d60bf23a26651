//! Agent, system, ISA, cache and wavefront information; agent iteration; extension queries.
//!
//! OWNER: helper E.

use crate::api::Tables;

/// Fills the information slots.
pub(crate) fn install(_t: &mut Tables) {}
