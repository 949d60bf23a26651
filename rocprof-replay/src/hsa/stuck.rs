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
//!
//! A stuck signal is destroyed once its work ended and no thread waits on it: two threads may
//! free memory at once, one waiting on the signal while the other finds it ended.

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
    /// Threads inside a wait on `signal` ([`StuckWork::wait_for`]): it is not destroyed
    /// before they are out.
    waiters: u32,
}

/// What stuck work needs of the runtime's signals (the backend's originals; a fake in tests).
pub(crate) trait StuckSignals {
    /// The signal's value.
    fn load(&self, signal: hsa_signal_t) -> hsa_signal_value_t;
    /// Waits at most `slice` for the signal to fall below 1.
    fn wait_below_one(&self, signal: hsa_signal_t, slice: Duration);
    /// Destroys the signal.
    fn destroy(&self, signal: hsa_signal_t);
}

impl StuckSignals for Backend {
    fn load(&self, signal: hsa_signal_t) -> hsa_signal_value_t {
        // SAFETY: a signal of ours, kept alive while listed or waited on.
        unsafe { (self.orig.signal_load)(signal) }
    }
    fn wait_below_one(&self, signal: hsa_signal_t, slice: Duration) {
        // SAFETY: a live signal of ours (not destroyed while waited on); a bounded wait.
        unsafe {
            (self.orig.signal_wait)(
                signal,
                HSA_SIGNAL_CONDITION_LT,
                1,
                self.ticks(slice),
                HSA_WAIT_STATE_BLOCKED,
            )
        };
    }
    fn destroy(&self, signal: hsa_signal_t) {
        // SAFETY: our signal; its work is done and no thread waits on it.
        unsafe { (self.orig.signal_destroy)(signal) };
    }
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
            waiters: 0,
        });
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Whether any work may be stuck (one relaxed load).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Forgets the work that ended and that no thread waits on: destroys its signal and does
    /// its deferred frees.
    fn settle(&self, be: &(impl StuckSignals + ?Sized)) {
        let ended: Vec<Stuck> = {
            let mut list = self.list.lock();
            let mut ended = Vec::new();
            let mut i = 0;
            while i < list.len() {
                if list[i].waiters == 0 && be.load(list[i].signal) <= 0 {
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
            be.destroy(pass.signal);
        }
    }

    /// Whether a free of `ptr` must wait until later: it is the kernarg of a stuck pass. The
    /// free is then recorded and done when the pass ends.
    pub(crate) fn defer_free(
        &self,
        be: &(impl StuckSignals + ?Sized),
        ptr: usize,
        free: Free,
    ) -> bool {
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
    pub(crate) fn wait_for(
        &self,
        be: &(impl StuckSignals + ?Sized),
        gpu: Option<u32>,
        wait: Duration,
    ) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let until = Instant::now() + wait;
        loop {
            self.settle(be);
            let left = until.saturating_duration_since(Instant::now());
            let signal = {
                let mut list = self.list.lock();
                let Some(next) = list.iter_mut().find(|p| gpu.is_none_or(|g| g == p.gpu)) else {
                    return;
                };
                if left.is_zero() {
                    tracing::error!(
                        "a free or executable destruction waited {wait:?} for stuck replay \
                         work; going ahead"
                    );
                    return;
                }
                // Counted under the lock: another thread's `settle` leaves the signal alive
                // until this wait is over.
                next.waiters += 1;
                next.signal
            };
            be.wait_below_one(signal, left.min(Duration::from_millis(100)));
            if let Some(p) = self.list.lock().iter_mut().find(|p| p.signal == signal) {
                p.waiters -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    /// Signals in a map; its wait lets another thread free memory while it waits.
    struct Fake {
        values: Mutex<HashMap<u64, hsa_signal_value_t>>,
        waiting: Mutex<Vec<u64>>,
        misuse: AtomicBool,
        destroyed: Mutex<Vec<u64>>,
        /// Told when a wait starts; answered once the other thread is done.
        wake_other: Mutex<mpsc::Sender<()>>,
        other_done: Mutex<mpsc::Receiver<()>>,
    }

    impl StuckSignals for Fake {
        fn load(&self, signal: hsa_signal_t) -> hsa_signal_value_t {
            if self.destroyed.lock().contains(&signal.handle) {
                self.misuse.store(true, Ordering::SeqCst);
            }
            self.values.lock()[&signal.handle]
        }
        fn wait_below_one(&self, signal: hsa_signal_t, _slice: Duration) {
            if self.destroyed.lock().contains(&signal.handle) {
                self.misuse.store(true, Ordering::SeqCst);
            }
            self.waiting.lock().push(signal.handle);
            // The stuck pass ends while this thread waits, and another thread frees memory.
            self.values.lock().insert(signal.handle, 0);
            self.wake_other.lock().send(()).unwrap();
            self.other_done
                .lock()
                .recv_timeout(Duration::from_secs(10))
                .unwrap();
            self.waiting.lock().retain(|s| *s != signal.handle);
        }
        fn destroy(&self, signal: hsa_signal_t) {
            if self.waiting.lock().contains(&signal.handle)
                || self.destroyed.lock().contains(&signal.handle)
            {
                self.misuse.store(true, Ordering::SeqCst);
            }
            self.destroyed.lock().push(signal.handle);
        }
    }

    #[test]
    fn a_stuck_signal_is_never_destroyed_while_another_thread_waits_on_it() {
        let (wake_tx, wake_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let fake = Fake {
            values: Mutex::new(HashMap::from([(7, 1)])),
            waiting: Mutex::new(Vec::new()),
            misuse: AtomicBool::new(false),
            destroyed: Mutex::new(Vec::new()),
            wake_other: Mutex::new(wake_tx),
            other_done: Mutex::new(done_rx),
        };
        let stuck = StuckWork::default();
        stuck.add(0, hsa_signal_t { handle: 7 }, 0x1000);
        let (stuck, fake) = (&stuck, &fake);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                // Another thread's free, while the first one waits: it finds the pass ended.
                wake_rx.recv_timeout(Duration::from_secs(10)).unwrap();
                unsafe extern "C" fn free(_: *mut std::ffi::c_void) -> hsa_status_t {
                    HSA_STATUS_SUCCESS
                }
                assert!(!stuck.defer_free(fake, 0x2000, free));
                done_tx.send(()).unwrap();
            });
            stuck.wait_for(fake, Some(0), Duration::from_secs(10));
        });
        assert!(
            !fake.misuse.load(Ordering::SeqCst),
            "a signal was destroyed while waited on, or used after its destruction"
        );
        assert_eq!(*fake.destroyed.lock(), vec![7], "destroyed exactly once");
        assert!(!stuck.any());
    }
}
