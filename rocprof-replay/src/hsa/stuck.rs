//! Passes still running after the late-pass deadline ("stuck").
//!
//! The application gets its completion at that deadline (the outcome is `failed`), so it may
//! go on to free what the pass still uses. Until such a pass ends:
//! - a free of its kernarg buffer is deferred: the memory is released when the pass ends;
//! - a free of memory the pass's GPU owns, and the destruction of an executable, wait for it
//!   (bounded by twice the copy deadline), so the pass never writes into released memory;
//! - a tracked barrier behind the pass keeps later replay windows on the GPU from snapshotting
//!   memory it is still writing (their drain waits for it).
//!
//! With no stuck pass, every check here is one relaxed atomic load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocprof_replay_sys::*;

use super::Backend;

/// A function that releases memory (`hsa_amd_memory_pool_free`, `hsa_memory_free`).
pub(crate) type Free = unsafe extern "C" fn(*mut std::ffi::c_void) -> hsa_status_t;

struct StuckPass {
    gpu: u32,
    signal: hsa_signal_t,
    kernarg: usize,
    /// Frees of `kernarg` the application asked for, done when the pass ends.
    deferred: Vec<(usize, Free)>,
}

/// The stuck passes of the process.
#[derive(Default)]
pub(crate) struct StuckPasses {
    count: AtomicUsize,
    list: Mutex<Vec<StuckPass>>,
}

// SAFETY: signal handles and addresses are plain integers; the free functions are the
// runtime's, callable from any thread.
unsafe impl Send for StuckPasses {}
// SAFETY: as above; all state is behind the mutex or atomic.
unsafe impl Sync for StuckPasses {}

impl StuckPasses {
    /// Notes a pass of GPU `gpu` that signals `signal` when it ends and reads `kernarg`.
    pub(crate) fn add(&self, gpu: u32, signal: hsa_signal_t, kernarg: usize) {
        self.list.lock().push(StuckPass {
            gpu,
            signal,
            kernarg,
            deferred: Vec::new(),
        });
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Whether any pass may be stuck (one relaxed load).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Forgets the passes that ended: destroys their signals and does their deferred frees.
    fn settle(&self, be: &Backend) {
        let ended: Vec<StuckPass> = {
            let mut list = self.list.lock();
            let mut ended = Vec::new();
            let mut i = 0;
            while i < list.len() {
                // SAFETY: a signal of ours, kept alive while the pass may decrement it.
                if unsafe { (be.orig.signal_load)(list[i].signal) } <= 0 {
                    ended.push(list.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            ended
        };
        for pass in ended {
            self.count.fetch_sub(1, Ordering::Release);
            tracing::info!("a stuck replay pass has ended");
            for (ptr, free) in pass.deferred {
                // SAFETY: a free the application asked for, deferred until now.
                unsafe { free(ptr as *mut std::ffi::c_void) };
            }
            // SAFETY: our signal; the pass that decremented it is done.
            unsafe { (be.orig.signal_destroy)(pass.signal) };
        }
    }

    /// Whether a free of `ptr` must wait until later: it is the kernarg of a stuck pass. The
    /// free is then recorded and done when the pass ends.
    pub(crate) fn defer_free(&self, be: &Backend, ptr: usize, free: Free) -> bool {
        if self.count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.settle(be);
        let mut list = self.list.lock();
        match list.iter_mut().find(|p| p.kernarg == ptr) {
            Some(pass) => {
                pass.deferred.push((ptr, free));
                true
            }
            None => false,
        }
    }

    /// Waits (at most `wait`) until no stuck pass of GPU `gpu` (of any GPU when `None`) runs.
    pub(crate) fn wait_for(&self, be: &Backend, gpu: Option<u32>, wait: Duration) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let until = Instant::now() + wait;
        loop {
            self.settle(be);
            let next = self
                .list
                .lock()
                .iter()
                .find(|p| gpu.is_none_or(|g| g == p.gpu))
                .map(|p| p.signal);
            let Some(signal) = next else { return };
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::error!(
                    "a free or executable destruction waited {wait:?} for a stuck replay pass; \
                     going ahead"
                );
                return;
            }
            // SAFETY: a live signal of ours; a bounded wait.
            unsafe {
                (be.orig.signal_wait)(
                    signal,
                    HSA_SIGNAL_CONDITION_LT,
                    1,
                    be.ticks(left.min(Duration::from_millis(100))),
                    HSA_WAIT_STATE_BLOCKED,
                )
            };
        }
    }
}
