//! Work of ours still running after its deadline ("stuck"): a pass past the late-pass
//! deadline, or snapshot copies past the copy deadline.
//!
//! A window ends without it (the outcome says so), and the application may go on to free what
//! the work still uses. Until such work ends:
//! - a free of a stuck pass's kernarg buffer is deferred: the memory is released when the
//!   pass ends;
//! - a free of memory the work's GPU owns, and the destruction of an executable, wait for it
//!   (bounded by twice the copy deadline), so it never reads or writes released memory;
//! - for a pass, a tracked barrier behind it keeps later replay windows on the GPU from
//!   snapshotting memory it is still writing (their drain waits for it).
//!
//! With nothing stuck, every check here is one relaxed atomic load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocprof_replay_sys::*;

use super::Backend;

/// A function that releases memory (`hsa_amd_memory_pool_free`, `hsa_memory_free`).
pub(crate) type Free = unsafe extern "C" fn(*mut std::ffi::c_void) -> hsa_status_t;

struct Stuck {
    gpu: u32,
    signal: hsa_signal_t,
    /// The pass's kernarg buffer (0 for copies).
    kernarg: usize,
    /// Frees of `kernarg` the application asked for, done when the pass ends.
    deferred: Vec<(usize, Free)>,
}

/// The stuck work of the process.
#[derive(Default)]
pub(crate) struct StuckWork {
    count: AtomicUsize,
    list: Mutex<Vec<Stuck>>,
}

// SAFETY: signal handles and addresses are plain integers; the free functions are the
// runtime's, callable from any thread.
unsafe impl Send for StuckWork {}
// SAFETY: as above; all state is behind the mutex or atomic.
unsafe impl Sync for StuckWork {}

impl StuckWork {
    /// Notes work of GPU `gpu` that signals `signal` (down to 0) when it ends; a pass reads
    /// `kernarg` (0 for copies).
    pub(crate) fn add(&self, gpu: u32, signal: hsa_signal_t, kernarg: usize) {
        self.list.lock().push(Stuck {
            gpu,
            signal,
            kernarg,
            deferred: Vec::new(),
        });
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Whether any work may be stuck (one relaxed load).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Forgets the passes that ended: destroys their signals and does their deferred frees.
    fn settle(&self, be: &Backend) {
        let ended: Vec<Stuck> = {
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
            tracing::info!("stuck replay work has ended");
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
        match list.iter_mut().find(|p| p.kernarg != 0 && p.kernarg == ptr) {
            Some(pass) => {
                pass.deferred.push((ptr, free));
                true
            }
            None => false,
        }
    }

    /// Waits (at most `wait`) until no stuck work of GPU `gpu` (of any GPU when `None`) runs.
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
                    "a free or executable destruction waited {wait:?} for stuck replay work; \
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
