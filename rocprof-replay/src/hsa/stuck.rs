//! Work of ours still running after its deadline ("stuck"): a pass past the late-pass
//! deadline, or snapshot copies past the copy deadline.
//!
//! A window ends without it (the outcome says so), and the application may go on to free what
//! the work still uses. Until such work ends:
//! - a free of a stuck pass's kernarg buffer is deferred: the memory is released when the
//!   pass ends;
//! - a free of memory the work's GPU owns, and the destruction of an executable, wait for it
//!   (bounded by twice the copy deadline), so it never reads or writes released memory;
//! - for copies and compare kernels, the memory of ours they name (snapshot staging, scratch:
//!   [`StuckWork::add_touching`]) stays theirs: a staging buffer carved where they may still
//!   read or write is held until they end ([`StuckWork::hold_if_touched`]), a free of a
//!   snapshot arena chunk of their GPU is parked until they end ([`StuckWork::park_free`]),
//!   releasing the arena for the application waits for them first (bounded as above), and
//!   while they run the arena is kept (at shutdown too);
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
use crate::engine::snapshot::Staging;

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
    /// Memory of ours (start, bytes) the work may still read or write: snapshot staging and
    /// scratch (empty for a pass, which touches only the application's memory and `kernarg`).
    touches: Vec<(usize, usize)>,
    /// Staging buffers carved where `touches` lies, kept out of use until the work ends.
    held: Vec<Staging>,
}

impl Stuck {
    /// Whether the work may still touch memory of ours on GPU `gpu`.
    fn touches_memory_of(&self, gpu: u32) -> bool {
        self.gpu == gpu && !self.touches.is_empty()
    }

    /// Whether the work may still touch a byte of `[start, start + len)`.
    fn overlaps(&self, start: usize, len: usize) -> bool {
        let end = start.saturating_add(len.max(1));
        self.touches
            .iter()
            .any(|&(s, l)| s < end && start < s.saturating_add(l.max(1)))
    }
}

/// A free of our memory held back until no stuck work of its GPU touches our memory.
struct Parked {
    gpu: u32,
    ptr: usize,
    free: Free,
}

/// The listed work and what waits for it.
#[derive(Default)]
struct List {
    work: Vec<Stuck>,
    parked: Vec<Parked>,
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
    list: Mutex<List>,
}

// SAFETY: signal handles and addresses are plain integers; the free functions are the
// runtime's, callable from any thread; the held staging buffers are only released (their
// release function takes the arena registry's lock, from any thread).
unsafe impl Send for StuckWork {}
// SAFETY: as above; all state is behind the mutex or atomic.
unsafe impl Sync for StuckWork {}

impl StuckWork {
    /// Notes a pass of GPU `gpu` that signals `signal` (down to 0) when it ends and reads
    /// `kernarg`.
    pub(crate) fn add(&self, gpu: u32, signal: hsa_signal_t, kernarg: usize) {
        self.push(gpu, signal, kernarg, Vec::new());
    }

    /// Notes copies or a kernel of ours on GPU `gpu` that signal `signal` (down to 0) when they
    /// end and may read or write `touches` (start, bytes) until then, memory of ours among
    /// them (snapshot staging, scratch). Ranges of the application's memory may be listed too:
    /// they never overlap ours.
    pub(crate) fn add_touching(
        &self,
        gpu: u32,
        signal: hsa_signal_t,
        touches: Vec<(usize, usize)>,
    ) {
        self.push(gpu, signal, 0, touches);
    }

    fn push(&self, gpu: u32, signal: hsa_signal_t, kernarg: usize, touches: Vec<(usize, usize)>) {
        self.list.lock().work.push(Stuck {
            gpu,
            signal,
            kernarg,
            deferred: Vec::new(),
            waiters: 0,
            touches,
            held: Vec::new(),
        });
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Whether any work may be stuck (one relaxed load).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Forgets the work that ended and that no thread waits on: destroys its signal, does its
    /// deferred frees, releases the staging it held, and does the parked frees no stuck work
    /// holds back any more.
    ///
    /// Never called with the arena registry's lock held (releasing held staging takes it):
    /// not from [`Memory`](crate::engine::arena::Memory)'s free functions.
    pub(crate) fn settle(&self, be: &(impl StuckSignals + ?Sized)) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let (ended, unparked) = {
            let mut list = self.list.lock();
            let mut ended = Vec::new();
            let mut i = 0;
            while i < list.work.len() {
                let w = &list.work[i];
                if w.waiters == 0 && be.load(w.signal) <= 0 {
                    ended.push(list.work.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            let List { work, parked } = &mut *list;
            let (unparked, still): (Vec<Parked>, Vec<Parked>) = std::mem::take(parked)
                .into_iter()
                .partition(|p| !work.iter().any(|w| w.touches_memory_of(p.gpu)));
            *parked = still;
            (ended, unparked)
        };
        for p in unparked {
            // SAFETY: a chunk of ours whose free was parked while stuck work of its GPU might
            // still use it; none is left.
            unsafe { (p.free)(p.ptr as *mut std::ffi::c_void) };
        }
        for work in ended {
            self.count.fetch_sub(1, Ordering::Release);
            tracing::info!("stuck replay work has ended");
            for (ptr, free) in work.deferred {
                // SAFETY: a free the application asked for, deferred until now.
                unsafe { free(ptr as *mut std::ffi::c_void) };
            }
            drop(work.held);
            be.destroy(work.signal);
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
        match list
            .work
            .iter_mut()
            .find(|p| p.kernarg != 0 && p.kernarg == ptr)
        {
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
        let of_gpu = |p: &Stuck| gpu.is_none_or(|g| g == p.gpu);
        if !self.wait_until_none(be, of_gpu, wait) {
            tracing::error!(
                "a free or executable destruction waited {wait:?} for stuck replay work; going \
                 ahead"
            );
        }
    }

    /// Waits (at most `wait`) until no stuck copy or kernel of ours that may touch our memory
    /// on GPU `gpu` (on any GPU when `None`) runs. Whether none is left.
    pub(crate) fn wait_for_memory_of(
        &self,
        be: &(impl StuckSignals + ?Sized),
        gpu: Option<u32>,
        wait: Duration,
    ) -> bool {
        let touching = |p: &Stuck| !p.touches.is_empty() && gpu.is_none_or(|g| g == p.gpu);
        self.wait_until_none(be, touching, wait)
    }

    /// Whether stuck work of GPU `gpu` may still touch memory of ours (work that ended but is
    /// not settled yet counts).
    pub(crate) fn touches_memory_of(&self, gpu: u32) -> bool {
        self.any()
            && self
                .list
                .lock()
                .work
                .iter()
                .any(|w| w.touches_memory_of(gpu))
    }

    /// Whether the free of the snapshot arena chunk `ptr` of GPU `gpu` must wait: stuck work
    /// of the GPU may still read or write memory of ours, maybe there. The free is then done
    /// (with `free`) once none is left ([`settle`](Self::settle)).
    ///
    /// Called from the arena's free functions, with the arena registry's lock held: it only
    /// looks at the list (settling could release held staging, which takes that lock).
    pub(crate) fn park_free(&self, gpu: u32, ptr: usize, free: Free) -> bool {
        if self.count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let mut list = self.list.lock();
        if !list.work.iter().any(|w| w.touches_memory_of(gpu)) {
            return false;
        }
        list.parked.push(Parked { gpu, ptr, free });
        true
    }

    /// A staging buffer just carved, or `None` when stuck work may still read or write its
    /// memory: it is then held (never used, never released) until that work ends.
    pub(crate) fn hold_if_touched(&self, buf: Staging) -> Option<Staging> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Some(buf);
        }
        let mut list = self.list.lock();
        match list
            .work
            .iter_mut()
            .find(|w| w.overlaps(buf.addr(), buf.len()))
        {
            Some(w) => {
                w.held.push(buf);
                None
            }
            None => Some(buf),
        }
    }

    /// Waits (at most `wait`) until no listed work `matches`. Whether none is left.
    fn wait_until_none(
        &self,
        be: &(impl StuckSignals + ?Sized),
        matches: impl Fn(&Stuck) -> bool,
        wait: Duration,
    ) -> bool {
        if self.count.load(Ordering::Relaxed) == 0 {
            return true;
        }
        let until = Instant::now() + wait;
        loop {
            self.settle(be);
            let left = until.saturating_duration_since(Instant::now());
            let signal = {
                let mut list = self.list.lock();
                let Some(next) = list.work.iter_mut().find(|p| matches(p)) else {
                    return true;
                };
                if left.is_zero() {
                    return false;
                }
                // Counted under the lock: another thread's `settle` leaves the signal alive
                // until this wait is over.
                next.waiters += 1;
                next.signal
            };
            be.wait_below_one(signal, left.min(Duration::from_millis(100)));
            if let Some(p) = self
                .list
                .lock()
                .work
                .iter_mut()
                .find(|p| p.signal == signal)
            {
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

    /// Signals whose values a test sets; destroyed ones are counted.
    #[derive(Default)]
    struct Signals {
        values: Mutex<HashMap<u64, hsa_signal_value_t>>,
        destroyed: Mutex<Vec<u64>>,
    }

    impl Signals {
        fn set(&self, handle: u64, v: hsa_signal_value_t) {
            self.values.lock().insert(handle, v);
        }
    }

    impl StuckSignals for Signals {
        fn load(&self, signal: hsa_signal_t) -> hsa_signal_value_t {
            self.values.lock()[&signal.handle]
        }
        fn wait_below_one(&self, _signal: hsa_signal_t, slice: Duration) {
            std::thread::sleep(slice.min(Duration::from_millis(1)));
        }
        fn destroy(&self, signal: hsa_signal_t) {
            self.destroyed.lock().push(signal.handle);
        }
    }

    fn sig(handle: u64) -> hsa_signal_t {
        hsa_signal_t { handle }
    }

    #[test]
    fn an_arena_chunk_is_freed_only_once_no_stuck_copy_of_its_gpu_may_touch_our_memory() {
        static FREED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        unsafe extern "C" fn free(ptr: *mut std::ffi::c_void) -> hsa_status_t {
            FREED.lock().push(ptr as usize);
            HSA_STATUS_SUCCESS
        }
        let signals = Signals::default();
        let stuck = StuckWork::default();
        signals.set(1, 1);
        signals.set(2, 1);
        // A stuck pass touches only the application's memory: arena frees go ahead.
        stuck.add(0, sig(2), 0x9000);
        assert!(!stuck.park_free(0, 0xa000, free));
        // A stuck copy of GPU 0 (its staging somewhere in an arena chunk of GPU 0).
        stuck.add_touching(0, sig(1), vec![(0x5000, 64), (0x10_0000, 4096)]);
        assert!(stuck.touches_memory_of(0));
        assert!(!stuck.touches_memory_of(1));
        assert!(!stuck.park_free(1, 0xb000, free), "another GPU's chunk");
        assert!(stuck.park_free(0, 0xc000, free));
        assert!(
            !stuck.wait_for_memory_of(&signals, Some(0), Duration::ZERO),
            "still running"
        );
        assert!(stuck.wait_for_memory_of(&signals, Some(1), Duration::ZERO));
        stuck.settle(&signals);
        assert!(FREED.lock().is_empty(), "freed under a stuck copy");
        // The pass ends: the copy still holds the chunk back.
        signals.set(2, 0);
        stuck.settle(&signals);
        assert!(FREED.lock().is_empty());
        signals.set(1, 0);
        assert!(stuck.wait_for_memory_of(&signals, None, Duration::from_secs(5)));
        assert_eq!(
            *FREED.lock(),
            vec![0xc000],
            "freed once, when the copy ended"
        );
        assert!(!stuck.any());
        assert_eq!(signals.destroyed.lock().len(), 2);
    }

    #[test]
    fn staging_carved_where_stuck_work_may_still_touch_is_held_until_it_ends() {
        static RELEASED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        unsafe fn release(ptr: std::ptr::NonNull<u8>, _: usize, _: crate::engine::snapshot::Tier) {
            RELEASED.lock().push(ptr.as_ptr() as usize);
        }
        let buf = |addr: usize, len: usize| Staging::Backend {
            ptr: std::ptr::NonNull::new(addr as *mut u8).unwrap(),
            len,
            capacity: len,
            tier: crate::engine::snapshot::Tier::Device,
            release,
        };
        let signals = Signals::default();
        let stuck = StuckWork::default();
        assert!(
            stuck.hold_if_touched(buf(0x4_0000, 256)).is_some(),
            "nothing stuck"
        );
        assert_eq!(std::mem::take(&mut *RELEASED.lock()), vec![0x4_0000]);
        signals.set(3, 1);
        // A stuck restore reads the stash at 0x4_0000..0x4_1000.
        stuck.add_touching(0, sig(3), vec![(0x20_0000, 4096), (0x4_0000, 4096)]);
        assert!(
            stuck.hold_if_touched(buf(0x4_0f00, 512)).is_none(),
            "overlaps its end"
        );
        assert!(
            stuck.hold_if_touched(buf(0x3_ff00, 512)).is_none(),
            "overlaps its start"
        );
        let clear = stuck.hold_if_touched(buf(0x4_1000, 256));
        assert!(clear.is_some(), "just past it");
        drop(clear);
        assert_eq!(*RELEASED.lock(), vec![0x4_1000]);
        stuck.settle(&signals);
        assert_eq!(RELEASED.lock().len(), 1, "held while the restore runs");
        signals.set(3, 0);
        stuck.settle(&signals);
        let mut released = RELEASED.lock().clone();
        released.sort_unstable();
        assert_eq!(released, vec![0x3_ff00, 0x4_0f00, 0x4_1000]);
        assert!(!stuck.any());
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
