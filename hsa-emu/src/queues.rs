//! Queues: creation with `amd_queue_t` layout, index functions, doorbells, a packet processor
//! per queue, kernel dispatch on worker threads, barriers, profiling timestamps, and intercept
//! queues (`hsa_amd_queue_intercept_create/register`, `runtime_queue_create_register`).
//!
//! OWNER: helper C.

use crate::api::Tables;

/// Fills the queue, profiling and intercept slots.
pub(crate) fn install(_t: &mut Tables) {}
