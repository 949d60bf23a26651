//! Work of ours still running after its deadline ("stuck"), for both backends: a pass past
//! the late-pass deadline, or snapshot copies and compare kernels past the copy deadline.
//!
//! A window ends without it (the outcome says so), and the application may go on to free what
//! the work still uses. Each backend lists such work here with a *token* that tells when it
//! ends (an HSA completion signal, a CUDA event recorded behind it: [`Completions`]) and asks
//! this registry before it lets memory go. Until the work ends:
//! - a free of a stuck pass's argument buffer (HSA's kernarg) is deferred: the memory is
//!   released when the pass ends ([`StuckWork::defer_free`]);
//! - a free of memory the work's device owns, an unmap, the destruction of code the work may
//!   run, waits for it, bounded ([`StuckWork::wait_for`]); a stream-ordered free is ordered
//!   behind the work's tokens instead ([`StuckWork::pending`], CUDA);
//! - for copies and compare kernels, the memory of ours they name (snapshot staging, scratch:
//!   [`StuckWork::add_touching`]) stays theirs: a staging buffer carved where they may still
//!   read or write is held until they end ([`StuckWork::hold_if_touched`]), a free of a
//!   snapshot arena chunk of their device is parked until they end
//!   ([`StuckWork::park_free`]), releasing the arena for the application waits for them first
//!   (bounded as above), and while they run the arena is kept (at shutdown too);
//! - later work of ours waits for it: HSA's drains wait for a tracked barrier behind a stuck
//!   pass, and a new CUDA private stream waits for the tokens listed ([`StuckWork::pending`]).
//!
//! With nothing stuck, every check here is one relaxed atomic load.
//!
//! A token is released ([`Completions::release`]) once its work ended and no thread waits on
//! it: two threads may free memory at once, one waiting on the token while the other finds it
//! ended.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::engine::snapshot::Staging;

/// How a backend tells that listed work ended: through a token recorded behind it.
pub(crate) trait Completions {
    /// The token (an HSA signal's handle, a CUDA event).
    type Token: Copy + Eq + std::fmt::Debug + Send;
    /// Whether the work behind `token` has ended (an error that leaves no way to tell counts
    /// as not ended: the work stays listed).
    fn ended(&self, token: Self::Token) -> bool;
    /// Waits at most `slice` for the work behind `token` to end.
    fn wait(&self, token: Self::Token, slice: Duration);
    /// Releases the token: its work ended and no thread waits on it (destroyed, or given back
    /// to the backend's pool). Called once per listed token.
    fn release(&self, token: Self::Token);
}

/// Memory released later: a free the application asked for while stuck work could still
/// use the memory, or a free of ours parked the same way.
pub(crate) type Deferred = Box<dyn FnOnce() + Send>;

struct Stuck<T> {
    /// The device (HSA: the GPU's index; CUDA lists per context and names 0).
    device: u32,
    token: T,
    /// The pass's argument buffer (0 for copies).
    kernarg: usize,
    /// Frees of `kernarg` the application asked for, done when the pass ends.
    deferred: Vec<Deferred>,
    /// Threads inside a wait on `token` ([`StuckWork::wait_for`]): it is not released before
    /// they are out.
    waiters: u32,
    /// Memory of ours (start, bytes) the work may still read or write: snapshot staging and
    /// scratch (empty for a pass, which touches only the application's memory and `kernarg`).
    touches: Vec<(usize, usize)>,
    /// Staging buffers carved where `touches` lies, kept out of use until the work ends.
    held: Vec<Staging>,
}

impl<T> Stuck<T> {
    /// Whether the work may still touch memory of ours on device `device`.
    fn touches_memory_of(&self, device: u32) -> bool {
        self.device == device && !self.touches.is_empty()
    }

    /// Whether the work may still touch a byte of `[start, start + len)`.
    fn overlaps(&self, start: usize, len: usize) -> bool {
        let end = start.saturating_add(len.max(1));
        self.touches
            .iter()
            .any(|&(s, l)| s < end && start < s.saturating_add(l.max(1)))
    }
}

/// A free of our memory held back until no stuck work of its device touches our memory.
struct Parked {
    device: u32,
    free: Deferred,
}

/// The listed work and what waits for it.
struct List<T> {
    work: Vec<Stuck<T>>,
    parked: Vec<Parked>,
}

/// Tokens of listed work, each counted as waited on until this is dropped
/// ([`StuckWork::pending`]).
pub(crate) struct Pending<'a, T: Copy + Eq + std::fmt::Debug + Send> {
    stuck: &'a StuckWork<T>,
    tokens: Vec<T>,
}

impl<T: Copy + Eq + std::fmt::Debug + Send> std::ops::Deref for Pending<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.tokens
    }
}

impl<T: Copy + Eq + std::fmt::Debug + Send> Drop for Pending<'_, T> {
    fn drop(&mut self) {
        if self.tokens.is_empty() {
            return;
        }
        let mut list = self.stuck.list.lock();
        for t in &self.tokens {
            if let Some(w) = list.work.iter_mut().find(|w| w.token == *t) {
                w.waiters -= 1;
            }
        }
    }
}

/// The stuck work of a backend (HSA: of the process; CUDA: of a context).
pub(crate) struct StuckWork<T> {
    count: AtomicUsize,
    list: Mutex<List<T>>,
}

impl<T> Default for StuckWork<T> {
    fn default() -> Self {
        StuckWork {
            count: AtomicUsize::new(0),
            list: Mutex::new(List {
                work: Vec::new(),
                parked: Vec::new(),
            }),
        }
    }
}

// SAFETY: tokens are `Send`; deferred frees are `Send` closures; the held staging buffers are
// only released (their release function takes the arena registry's lock, from any thread).
unsafe impl<T: Send> Send for StuckWork<T> {}
// SAFETY: as above; all state is behind the mutex or atomic.
unsafe impl<T: Send> Sync for StuckWork<T> {}

impl<T: Copy + Eq + std::fmt::Debug + Send> StuckWork<T> {
    /// Notes a pass of device `device` whose end `token` tells and that reads `kernarg`.
    pub(crate) fn add(&self, device: u32, token: T, kernarg: usize) {
        self.push(device, token, kernarg, Vec::new());
    }

    /// Notes copies or a kernel of ours on device `device` whose end `token` tells and that
    /// may read or write `touches` (start, bytes) until then, memory of ours among them
    /// (snapshot staging, scratch). Ranges of the application's memory may be listed too:
    /// they never overlap ours.
    pub(crate) fn add_touching(&self, device: u32, token: T, touches: Vec<(usize, usize)>) {
        self.push(device, token, 0, touches);
    }

    fn push(&self, device: u32, token: T, kernarg: usize, touches: Vec<(usize, usize)>) {
        self.list.lock().work.push(Stuck {
            device,
            token,
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

    /// Forgets the work that ended and that no thread waits on: releases its token, does its
    /// deferred frees, releases the staging it held, and does the parked frees no stuck work
    /// holds back any more.
    ///
    /// Never called with the arena registry's lock held (releasing held staging takes it):
    /// not from [`Memory`](crate::engine::arena::Memory)'s free functions; nor with a lock
    /// that `c`'s [`release`](Completions::release) takes.
    pub(crate) fn settle(&self, c: &(impl Completions<Token = T> + ?Sized)) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let (ended, unparked) = {
            let mut list = self.list.lock();
            let mut ended = Vec::new();
            let mut i = 0;
            while i < list.work.len() {
                let w = &list.work[i];
                if w.waiters == 0 && c.ended(w.token) {
                    ended.push(list.work.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            let List { work, parked } = &mut *list;
            let (unparked, still): (Vec<Parked>, Vec<Parked>) = std::mem::take(parked)
                .into_iter()
                .partition(|p| !work.iter().any(|w| w.touches_memory_of(p.device)));
            *parked = still;
            (ended, unparked)
        };
        for p in unparked {
            (p.free)();
        }
        for work in ended {
            self.count.fetch_sub(1, Ordering::Release);
            tracing::info!("stuck replay work has ended");
            for free in work.deferred {
                free();
            }
            drop(work.held);
            c.release(work.token);
        }
    }

    /// The tokens of the work still listed after [`settle`](Self::settle) (what a new stream
    /// of ours, or a stream-ordered free, must wait for), held: none of them is released (and
    /// so reused by the backend) until the returned guard is dropped, which the caller does
    /// once its waits on them are enqueued. Empty, after one relaxed load, when nothing is
    /// stuck.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn pending(&self, c: &(impl Completions<Token = T> + ?Sized)) -> Pending<'_, T> {
        let mut tokens = Vec::new();
        if self.count.load(Ordering::Relaxed) != 0 {
            self.settle(c);
            for w in self.list.lock().work.iter_mut() {
                w.waiters += 1;
                tokens.push(w.token);
            }
        }
        Pending {
            stuck: self,
            tokens,
        }
    }

    /// Whether a free of `ptr` must wait until later: it is the argument buffer of a stuck
    /// pass. The free (`free`) is then recorded and done when the pass ends; otherwise
    /// `free` is dropped unrun and the caller frees.
    pub(crate) fn defer_free(
        &self,
        c: &(impl Completions<Token = T> + ?Sized),
        ptr: usize,
        free: impl FnOnce() + Send + 'static,
    ) -> bool {
        if self.count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.settle(c);
        let mut list = self.list.lock();
        match list
            .work
            .iter_mut()
            .find(|p| p.kernarg != 0 && p.kernarg == ptr)
        {
            Some(pass) => {
                pass.deferred.push(Box::new(free));
                true
            }
            None => false,
        }
    }

    /// Waits (at most `wait`) until no stuck work of device `device` (of any device when
    /// `None`) runs. Whether none is left.
    pub(crate) fn wait_for(
        &self,
        c: &(impl Completions<Token = T> + ?Sized),
        device: Option<u32>,
        wait: Duration,
    ) -> bool {
        let of_device = |p: &Stuck<T>| device.is_none_or(|d| d == p.device);
        self.wait_until_none(c, of_device, wait)
    }

    /// Waits (at most `wait`) until no stuck copy or kernel of ours that may touch our memory
    /// on device `device` (on any device when `None`) runs. Whether none is left.
    pub(crate) fn wait_for_memory_of(
        &self,
        c: &(impl Completions<Token = T> + ?Sized),
        device: Option<u32>,
        wait: Duration,
    ) -> bool {
        let touching = |p: &Stuck<T>| !p.touches.is_empty() && device.is_none_or(|d| d == p.device);
        self.wait_until_none(c, touching, wait)
    }

    /// Whether stuck work of device `device` may still touch memory of ours (work that ended
    /// but is not settled yet counts).
    pub(crate) fn touches_memory_of(&self, device: u32) -> bool {
        self.any()
            && self
                .list
                .lock()
                .work
                .iter()
                .any(|w| w.touches_memory_of(device))
    }

    /// Whether the free of a snapshot arena chunk of device `device` must wait: stuck work of
    /// the device may still read or write memory of ours, maybe there. The free (`free`) is
    /// then done once none is left ([`settle`](Self::settle)); otherwise `free` is dropped
    /// unrun and the caller frees.
    ///
    /// Called from the arena's free functions, with the arena registry's lock held: it only
    /// looks at the list (settling could release held staging, which takes that lock).
    pub(crate) fn park_free(&self, device: u32, free: impl FnOnce() + Send + 'static) -> bool {
        if self.count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let mut list = self.list.lock();
        if !list.work.iter().any(|w| w.touches_memory_of(device)) {
            return false;
        }
        list.parked.push(Parked {
            device,
            free: Box::new(free),
        });
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
        c: &(impl Completions<Token = T> + ?Sized),
        matches: impl Fn(&Stuck<T>) -> bool,
        wait: Duration,
    ) -> bool {
        if self.count.load(Ordering::Relaxed) == 0 {
            return true;
        }
        let until = Instant::now() + wait;
        loop {
            self.settle(c);
            let left = until.saturating_duration_since(Instant::now());
            let token = {
                let mut list = self.list.lock();
                let Some(next) = list.work.iter_mut().find(|p| matches(p)) else {
                    return true;
                };
                if left.is_zero() {
                    return false;
                }
                // Counted under the lock: another thread's `settle` leaves the token alive
                // until this wait is over.
                next.waiters += 1;
                next.token
            };
            c.wait(token, left.min(Duration::from_millis(100)));
            if let Some(p) = self.list.lock().work.iter_mut().find(|p| p.token == token) {
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
        values: Mutex<HashMap<u64, i64>>,
        waiting: Mutex<Vec<u64>>,
        misuse: AtomicBool,
        destroyed: Mutex<Vec<u64>>,
        /// Told when a wait starts; answered once the other thread is done.
        wake_other: Mutex<mpsc::Sender<()>>,
        other_done: Mutex<mpsc::Receiver<()>>,
    }

    impl Completions for Fake {
        type Token = u64;
        fn ended(&self, token: u64) -> bool {
            if self.destroyed.lock().contains(&token) {
                self.misuse.store(true, Ordering::SeqCst);
            }
            self.values.lock()[&token] <= 0
        }
        fn wait(&self, token: u64, _slice: Duration) {
            if self.destroyed.lock().contains(&token) {
                self.misuse.store(true, Ordering::SeqCst);
            }
            self.waiting.lock().push(token);
            // The stuck pass ends while this thread waits, and another thread frees memory.
            self.values.lock().insert(token, 0);
            self.wake_other.lock().send(()).unwrap();
            self.other_done
                .lock()
                .recv_timeout(Duration::from_secs(10))
                .unwrap();
            self.waiting.lock().retain(|s| *s != token);
        }
        fn release(&self, token: u64) {
            if self.waiting.lock().contains(&token) || self.destroyed.lock().contains(&token) {
                self.misuse.store(true, Ordering::SeqCst);
            }
            self.destroyed.lock().push(token);
        }
    }

    /// Signals whose values a test sets; destroyed ones are counted.
    #[derive(Default)]
    struct Signals {
        values: Mutex<HashMap<u64, i64>>,
        destroyed: Mutex<Vec<u64>>,
    }

    impl Signals {
        fn set(&self, handle: u64, v: i64) {
            self.values.lock().insert(handle, v);
        }
    }

    impl Completions for Signals {
        type Token = u64;
        fn ended(&self, token: u64) -> bool {
            self.values.lock()[&token] <= 0
        }
        fn wait(&self, _token: u64, slice: Duration) {
            std::thread::sleep(slice.min(Duration::from_millis(1)));
        }
        fn release(&self, token: u64) {
            self.destroyed.lock().push(token);
        }
    }

    #[test]
    fn an_arena_chunk_is_freed_only_once_no_stuck_copy_of_its_gpu_may_touch_our_memory() {
        static FREED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        let free = |ptr: usize| move || FREED.lock().push(ptr);
        let signals = Signals::default();
        let stuck = StuckWork::<u64>::default();
        signals.set(1, 1);
        signals.set(2, 1);
        // A stuck pass touches only the application's memory: arena frees go ahead.
        stuck.add(0, 2, 0x9000);
        assert!(!stuck.park_free(0, free(0xa000)));
        // A stuck copy of GPU 0 (its staging somewhere in an arena chunk of GPU 0).
        stuck.add_touching(0, 1, vec![(0x5000, 64), (0x10_0000, 4096)]);
        assert!(stuck.touches_memory_of(0));
        assert!(!stuck.touches_memory_of(1));
        assert!(!stuck.park_free(1, free(0xb000)), "another GPU's chunk");
        assert!(stuck.park_free(0, free(0xc000)));
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
    fn a_deferred_free_runs_when_its_pass_ends_and_pending_lists_what_still_runs() {
        let signals = Signals::default();
        let stuck = StuckWork::<u64>::default();
        assert!(stuck.pending(&signals).is_empty(), "nothing listed");
        signals.set(4, 1);
        signals.set(5, 1);
        stuck.add(0, 4, 0x7000);
        stuck.add_touching(1, 5, vec![(0x8000, 16)]);
        let freed = std::sync::Arc::new(AtomicBool::new(false));
        let mark = |f: &std::sync::Arc<AtomicBool>| {
            let f = f.clone();
            move || f.store(true, Ordering::SeqCst)
        };
        assert!(
            !stuck.defer_free(&signals, 0x7100, mark(&freed)),
            "not a stuck pass's argument buffer"
        );
        assert!(stuck.defer_free(&signals, 0x7000, mark(&freed)));
        let held = stuck.pending(&signals);
        let mut tokens = held.to_vec();
        tokens.sort_unstable();
        assert_eq!(tokens, vec![4, 5]);
        assert!(!freed.load(Ordering::SeqCst), "freed under its stuck pass");
        assert!(!stuck.wait_for(&signals, Some(1), Duration::ZERO));
        // The pass ends while a caller still enqueues its waits on the tokens: not released.
        signals.set(4, 0);
        stuck.settle(&signals);
        assert!(
            signals.destroyed.lock().is_empty(),
            "released while a caller held it"
        );
        drop(held);
        assert_eq!(*stuck.pending(&signals), [5], "the pass ended");
        assert!(freed.load(Ordering::SeqCst), "the deferred free ran");
        assert_eq!(*signals.destroyed.lock(), vec![4], "its token released");
        assert!(stuck.wait_for(&signals, Some(0), Duration::ZERO));
        assert!(!stuck.wait_for(&signals, None, Duration::ZERO));
        signals.set(5, 0);
        assert!(stuck.wait_for(&signals, None, Duration::from_secs(5)));
        assert!(!stuck.any());
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
        let stuck = StuckWork::<u64>::default();
        assert!(
            stuck.hold_if_touched(buf(0x4_0000, 256)).is_some(),
            "nothing stuck"
        );
        assert_eq!(std::mem::take(&mut *RELEASED.lock()), vec![0x4_0000]);
        signals.set(3, 1);
        // A stuck restore reads the stash at 0x4_0000..0x4_1000.
        stuck.add_touching(0, 3, vec![(0x20_0000, 4096), (0x4_0000, 4096)]);
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
        let stuck = StuckWork::<u64>::default();
        stuck.add(0, 7, 0x1000);
        let (stuck, fake) = (&stuck, &fake);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                // Another thread's free, while the first one waits: it finds the pass ended.
                wake_rx.recv_timeout(Duration::from_secs(10)).unwrap();
                assert!(!stuck.defer_free(fake, 0x2000, || {}));
                done_tx.send(()).unwrap();
            });
            assert!(stuck.wait_for(fake, Some(0), Duration::from_secs(10)));
        });
        assert!(
            !fake.misuse.load(Ordering::SeqCst),
            "a signal was destroyed while waited on, or used after its destruction"
        );
        assert_eq!(*fake.destroyed.lock(), vec![7], "destroyed exactly once");
        assert!(!stuck.any());
    }
}
