//! HSA's side of the engine's stuck-work registry ([`crate::engine::stuck`]): work is told
//! ended by its completion signal (listed by handle), which is destroyed once released.

use std::time::Duration;

use rocprof_replay_sys::*;

use super::Backend;
use crate::engine::stuck::Completions;

/// The process's stuck passes, copies and compare kernels, by completion signal handle.
pub(crate) type StuckWork = crate::engine::stuck::StuckWork<u64>;

/// A function that releases memory (`hsa_amd_memory_pool_free`, `hsa_memory_free`).
pub(crate) type Free = unsafe extern "C" fn(*mut std::ffi::c_void) -> hsa_status_t;

impl Completions for Backend {
    type Token = u64;
    fn ended(&self, token: u64) -> bool {
        // SAFETY: a signal of ours, kept alive while listed or waited on.
        unsafe { (self.orig.signal_load)(hsa_signal_t { handle: token }) <= 0 }
    }
    fn wait(&self, token: u64, slice: Duration) {
        // SAFETY: a live signal of ours (not destroyed while waited on); a bounded wait.
        unsafe {
            (self.orig.signal_wait)(
                hsa_signal_t { handle: token },
                HSA_SIGNAL_CONDITION_LT,
                1,
                self.ticks(slice),
                HSA_WAIT_STATE_BLOCKED,
            )
        };
    }
    fn release(&self, token: u64) {
        // SAFETY: our signal; its work is done and no thread waits on it.
        unsafe { (self.orig.signal_destroy)(hsa_signal_t { handle: token }) };
    }
}

/// Waits (twice the copy deadline) until no stuck work of GPU `gpu` (of any GPU when
/// `None`) runs, before memory it may use is freed or code it may run is destroyed; goes
/// ahead, with an error logged, at the deadline.
pub(crate) fn wait_for_stuck(be: &Backend, gpu: Option<u32>) {
    let wait = be.settings().copy.saturating_mul(2);
    if !be.stuck.wait_for(be, gpu, wait) {
        tracing::error!(
            "a free or executable destruction waited {wait:?} for stuck replay work; going ahead"
        );
    }
}
