//! The per-agent window lock both backends hold their work off replay windows with.
//!
//! One [`AgentLock`] per agent (an HSA GPU, a CUDA context). Its writer is a replay window,
//! from `begin` to `end`; its readers are the application's ordinary work on the agent's
//! memory (copies, fills, frees, launches outside a window). A reader never goes ahead
//! unprotected: past the lock deadline it marks the agent *contended* — the window running
//! there stops after its current pass ([`ReplayTarget::contended`]), its own deadlines bound
//! that — warns once, and keeps waiting.
//!
//! A window can also be *open* before it holds the writer: the HSA backend places a
//! dispatch's gate on the submitting thread and runs the window later on the agent's lane
//! ([`window_opened`](AgentLock::window_opened) / [`window_ended`](AgentLock::window_ended)).
//! Readers wait while any window is open, with the same deadline semantics.
//!
//! Work that blocks (a reader, or a window waiting for the writer) is listed while it waits,
//! with its *lane*, the backend's word for where it runs (CUDA: the stream; HSA: whether a copy
//! waits for a signal that resolves only after a window's dispatch): a window whose first pass
//! — the application's own execution — has not finished while work its dispatch may be waiting
//! for has waited longer than the yield deadline gives up replaying that dispatch
//! ([`held_up`](AgentLock::held_up)).
//!
//! [`ReplayTarget::contended`]: super::window::ReplayTarget::contended

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// An agent's window lock, its contention flag and its count of open windows.
pub(crate) struct AgentLock {
    /// Writer: a replay window; readers: ordinary work outside a window.
    lock: RwLock<()>,
    /// Readers waiting longer than the lock deadline: while non-zero, a window stops after its
    /// current pass.
    waiting_long: AtomicU32,
    /// Windows opened and not ended (changed under `open_changed`'s mutex; read without it on
    /// the readers' fast path).
    open: AtomicU32,
    /// The mutex `open` changes under, and the condition notified when it drops to 0.
    open_changed: (Mutex<()>, Condvar),
    /// Work blocked on this agent right now ([`Blocked`]), for [`held_up`](Self::held_up).
    blocked: Mutex<Vec<BlockedEntry>>,
    /// Tokens of [`blocked`](Self::blocked)'s entries.
    tokens: AtomicU64,
}

/// One blocked piece of work: its token, its lane (`None`: not known) and since when;
/// `ordered`: work the application's call enqueued behind the window on the device
/// ([`ordered_behind`](AgentLock::ordered_behind)), listed until the window ends.
#[derive(Clone, Copy, Debug)]
struct BlockedEntry {
    token: u64,
    lane: Option<u64>,
    since: Instant,
    ordered: bool,
}

/// Listed in [`AgentLock::blocked`] from creation until dropped.
pub(crate) struct Blocked<'a> {
    agent: &'a AgentLock,
    token: u64,
}

impl<'a> Blocked<'a> {
    fn new(agent: &'a AgentLock, lane: Option<u64>) -> Blocked<'a> {
        let token = agent.tokens.fetch_add(1, Ordering::Relaxed);
        agent.blocked.lock().push(BlockedEntry {
            token,
            lane,
            since: Instant::now(),
            ordered: false,
        });
        Blocked { agent, token }
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        self.agent.blocked.lock().retain(|e| e.token != self.token);
    }
}

impl Default for AgentLock {
    fn default() -> Self {
        AgentLock::new()
    }
}

impl AgentLock {
    /// No window open, none holding the lock.
    pub(crate) const fn new() -> AgentLock {
        AgentLock {
            lock: RwLock::new(()),
            waiting_long: AtomicU32::new(0),
            open: AtomicU32::new(0),
            open_changed: (Mutex::new(()), Condvar::new()),
            blocked: Mutex::new(Vec::new()),
            tokens: AtomicU64::new(0),
        }
    }

    /// The reader side, for ordinary work outside a replay window: waits until no window is
    /// open and none holds the agent. Past `deadline` the window is told to stop after its
    /// current pass and the wait goes on, with a warning (once per process).
    pub(crate) fn read_outside_window(&self, deadline: Duration) -> RwLockReadGuard<'_, ()> {
        self.read_outside_window_on(deadline, || None)
    }

    /// [`read_outside_window`](Self::read_outside_window) for work on a lane (`lane` is asked
    /// only if the work must wait): listed as blocked meanwhile ([`held_up`](Self::held_up)).
    pub(crate) fn read_outside_window_on(
        &self,
        deadline: Duration,
        lane: impl FnOnce() -> Option<u64>,
    ) -> RwLockReadGuard<'_, ()> {
        let mut wait = Waiting {
            agent: self,
            deadline,
            late: false,
        };
        let mut lane = Some(lane);
        let mut blocked: Option<Blocked<'_>> = None;
        let mut block = || {
            if let Some(lane) = lane.take() {
                blocked = Some(Blocked::new(self, lane()));
            }
        };
        if self.open.load(Ordering::Acquire) > 0 {
            // Windows opened and not ended: their gates are placed, they may not have taken
            // the lock yet.
            block();
            let (mutex, ended) = &self.open_changed;
            let mut g = mutex.lock();
            while self.open.load(Ordering::Acquire) > 0 {
                if ended.wait_for(&mut g, deadline).timed_out() {
                    wait.past_deadline();
                }
            }
        }
        if let Some(guard) = self.lock.try_read() {
            return guard;
        }
        block();
        loop {
            if let Some(guard) = self.lock.try_read_for(deadline) {
                return guard;
            }
            wait.past_deadline();
        }
    }

    /// [`read_outside_window`](Self::read_outside_window) for a reader that outlives any
    /// guard (taken at a callback's enter, released at its exit): holds the reader side until
    /// [`release_held`](Self::release_held).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) fn hold_outside_window(&self, deadline: Duration) {
        self.hold_outside_window_on(deadline, || None);
    }

    /// [`hold_outside_window`](Self::hold_outside_window) for work on a lane
    /// ([`read_outside_window_on`](Self::read_outside_window_on)).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) fn hold_outside_window_on(
        &self,
        deadline: Duration,
        lane: impl FnOnce() -> Option<u64>,
    ) {
        // Released by the matching `release_held`.
        std::mem::forget(self.read_outside_window_on(deadline, lane));
    }

    /// [`hold_outside_window_on`](Self::hold_outside_window_on), unless `instead` succeeds
    /// while it waits (asked about once a millisecond): `true` when the reader is held
    /// (release it with [`release_held`](Self::release_held)), `false` when `instead` did
    /// what the work needed (CUDA: a window's gate was offered meanwhile and the work was
    /// enqueued behind it, so its call need not wait for the whole window).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) fn hold_outside_window_unless(
        &self,
        deadline: Duration,
        lane: impl FnOnce() -> Option<u64>,
        mut instead: impl FnMut() -> bool,
    ) -> bool {
        if self.open.load(Ordering::Acquire) > 0 {
            // Windows opened before they hold the lock (HSA): as a plain reader.
            self.hold_outside_window_on(deadline, lane);
            return true;
        }
        if let Some(guard) = self.lock.try_read() {
            std::mem::forget(guard);
            return true;
        }
        let mut wait = Waiting {
            agent: self,
            deadline,
            late: false,
        };
        let _blocked = Blocked::new(self, lane());
        let start = Instant::now();
        loop {
            if let Some(guard) = self.lock.try_read_for(INSTEAD_EVERY) {
                // Released by the matching `release_held`.
                std::mem::forget(guard);
                return true;
            }
            if instead() {
                return false;
            }
            if start.elapsed() >= deadline {
                wait.past_deadline();
            }
        }
    }

    /// Releases a reader taken by [`hold_outside_window`](Self::hold_outside_window).
    ///
    /// # Safety
    /// Once per reader held by `hold_outside_window` on this lock, never more: releasing a
    /// reader nobody holds would let a window in beside work it must exclude.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) unsafe fn release_held(&self) {
        // SAFETY: caller contract: a read guard taken (and forgotten) by `hold_outside_window`
        // is logically owned and given back here.
        unsafe { self.lock.force_unlock_read() };
    }

    /// The reader side if it comes within `deadline`, else `None` — for work that may be
    /// skipped rather than wait (releasing an idle arena). Does not wait for open windows and
    /// does not mark the agent contended.
    pub(crate) fn try_read_for(&self, deadline: Duration) -> Option<RwLockReadGuard<'_, ()>> {
        self.lock.try_read_for(deadline)
    }

    /// The writer side for a replay window, if it comes within `deadline`.
    #[cfg(test)]
    pub(crate) fn write_for(&self, deadline: Duration) -> Option<RwLockWriteGuard<'_, ()>> {
        self.lock.try_write_for(deadline)
    }

    /// The writer side for a replay window of a dispatch on `lane`, if it comes within
    /// `deadline`: listed as blocked while it waits ([`held_up`](Self::held_up)).
    pub(crate) fn write_for_on(
        &self,
        deadline: Duration,
        lane: Option<u64>,
    ) -> Option<RwLockWriteGuard<'_, ()>> {
        if let Some(guard) = self.lock.try_write() {
            return Some(guard);
        }
        let _blocked = Blocked::new(self, lane);
        self.lock.try_write_for(deadline)
    }

    /// Lists work that waits for this agent's windows by other means than its lock (a launch
    /// waiting for its window to release it) until the returned guard drops
    /// ([`held_up`](Self::held_up)).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) fn blocked(&self, lane: Option<u64>) -> Blocked<'_> {
        Blocked::new(self, lane)
    }

    /// Lists work that the application's call enqueued on `lane` behind the window holding
    /// the agent, on the device (its call returned; the work waits for the window's gate),
    /// until [`window_gate_opening`](Self::window_gate_opening): a first pass waiting for it
    /// gives way as it does for work blocked at the host ([`held_up`](Self::held_up)).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) fn ordered_behind(&self, lane: Option<u64>) {
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        self.blocked.lock().push(BlockedEntry {
            token,
            lane,
            since: Instant::now(),
            ordered: true,
        });
    }

    /// The window's gate opens: the work listed by [`ordered_behind`](Self::ordered_behind)
    /// no longer waits for it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) fn window_gate_opening(&self) {
        self.blocked.lock().retain(|e| !e.ordered);
    }

    /// Whether work blocked on this agent, on a lane `may_release` says the running
    /// dispatch may be waiting for, has waited at least `longer_than`. A window asks while
    /// its first pass — the application's own execution — has not finished: that kernel may
    /// be waiting for exactly that work (a flag another stream's copy sets), which cannot
    /// start before the window ends.
    pub(crate) fn held_up(
        &self,
        longer_than: Duration,
        mut may_release: impl FnMut(Option<u64>) -> bool,
    ) -> bool {
        let now = Instant::now();
        self.blocked
            .lock()
            .iter()
            .any(|e| now.saturating_duration_since(e.since) >= longer_than && may_release(e.lane))
    }

    /// The writer side if free at once (a waiting writer would hold the application's readers
    /// off).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's
    pub(crate) fn try_write(&self) -> Option<RwLockWriteGuard<'_, ()>> {
        self.lock.try_write()
    }

    /// Work has waited for this agent longer than the lock deadline: the window should stop
    /// after its current pass.
    pub(crate) fn contended(&self) -> bool {
        self.waiting_long.load(Ordering::Acquire) > 0
    }

    /// A window was opened on this agent (its gate placed): readers wait until it ends
    /// ([`window_ended`](Self::window_ended), once per opening).
    pub(crate) fn window_opened(&self) {
        let _g = self.open_changed.0.lock();
        self.open.fetch_add(1, Ordering::AcqRel);
    }

    /// A window of this agent ended (its dispatch ran, its gate is open).
    pub(crate) fn window_ended(&self) {
        let (mutex, ended) = &self.open_changed;
        let _g = mutex.lock();
        let open = self.open.load(Ordering::Acquire).saturating_sub(1);
        self.open.store(open, Ordering::Release);
        if open == 0 {
            ended.notify_all();
        }
    }
}

/// How often [`AgentLock::hold_outside_window_unless`] asks whether the work can go another
/// way while it waits.
const INSTEAD_EVERY: Duration = Duration::from_millis(1);

/// A reader's wait: counted in `waiting_long` from its deadline until it ends.
struct Waiting<'a> {
    agent: &'a AgentLock,
    deadline: Duration,
    late: bool,
}

impl Waiting<'_> {
    /// The deadline passed (again): counted once, warned once per process.
    fn past_deadline(&mut self) {
        if self.late {
            return;
        }
        self.late = true;
        self.agent.waiting_long.fetch_add(1, Ordering::AcqRel);
        let deadline = self.deadline;
        CONTENDED.call_once(|| {
            tracing::warn!(
                "work waited {deadline:?} for a replay window on its GPU; the window stops after \
                 its current pass (ROCPROF_REPLAY_LOCK_TIMEOUT_MS)"
            )
        });
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.late {
            self.agent.waiting_long.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

static CONTENDED: Once = Once::new();

/// Work on an agent that no window can wait for or hold back: while there is any, the
/// agent's windows decline
/// ([`QueueNotDrainable`](crate::DeclineReason::QueueNotDrainable)), whichever backend runs.
/// Some comes and goes (HSA: a queue the backend could not intercept, while it lives); work
/// that could not be fenced (HSA: an asynchronous copy without a proxy signal; CUDA: work of
/// another context with no event behind it, still running at its submission's deadline)
/// has no known end, so it lasts.
#[derive(Default)]
pub(crate) struct Undrainable {
    /// Sources that come and go, alive now.
    alive: AtomicU32,
    /// Work that could not be fenced ran: for good.
    unfenced: AtomicBool,
}

impl Undrainable {
    /// None.
    pub(crate) const fn new() -> Undrainable {
        Undrainable {
            alive: AtomicU32::new(0),
            unfenced: AtomicBool::new(false),
        }
    }

    /// A source appeared.
    pub(crate) fn add(&self) {
        self.alive.fetch_add(1, Ordering::AcqRel);
    }

    /// A source [`add`](Self::add)ed went away.
    pub(crate) fn remove(&self) {
        let _ = self
            .alive
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Work that could not be fenced ran; `true` the first time (for the caller's one warning).
    pub(crate) fn mark_unfenced(&self) -> bool {
        !self.unfenced.swap(true, Ordering::AcqRel)
    }

    /// Whether work that could not be fenced ran.
    pub(crate) fn unfenced(&self) -> bool {
        self.unfenced.load(Ordering::Acquire)
    }

    /// Whether the agent's windows must decline.
    pub(crate) fn any(&self) -> bool {
        self.unfenced() || self.alive.load(Ordering::Acquire) > 0
    }
}

/// What the agent's last drain ran out of time waiting for: a backend's marker behind the
/// stuck work (CUDA: an event recorded on the stream that did not drain; HSA: a queue and the
/// submission it had to retire). While that work is still pending, the agent's later drains
/// decline at once ([`DrainTimeout`](crate::DeclineReason::DrainTimeout)) instead of each
/// waiting the whole drain deadline for the same work: a stream or queue that may never drain
/// (a communication kernel waiting for its peers) costs one bounded wait, not one per
/// dispatch. Once the marker's work is done it is forgotten and drains wait again.
pub(crate) struct StuckDrain<M> {
    marker: Mutex<Option<M>>,
}

impl<M> StuckDrain<M> {
    /// Nothing remembered.
    pub(crate) const fn new() -> StuckDrain<M> {
        StuckDrain {
            marker: Mutex::new(None),
        }
    }

    /// Remembers `marker`, the work a drain just ran out of time on; returns the marker it
    /// replaces, for the caller to release.
    #[must_use]
    pub(crate) fn remember(&self, marker: M) -> Option<M> {
        self.marker.lock().replace(marker)
    }

    /// Whether the remembered work is still pending, as `pending` finds it. Once it is not,
    /// the marker is forgotten and handed to `release`.
    pub(crate) fn still_pending(
        &self,
        pending: impl FnOnce(&M) -> bool,
        release: impl FnOnce(M),
    ) -> bool {
        let mut marker = self.marker.lock();
        match marker.as_ref() {
            None => false,
            Some(m) if pending(m) => true,
            Some(_) => {
                if let Some(m) = marker.take() {
                    drop(marker);
                    release(m);
                }
                false
            }
        }
    }
}

impl<M> Default for StuckDrain<M> {
    fn default() -> Self {
        StuckDrain::new()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_stuck_drain_is_remembered_until_its_work_is_done() {
        let stuck = StuckDrain::<u32>::new();
        let mut released = Vec::new();
        assert!(
            !stuck.still_pending(|_| true, |m| released.push(m)),
            "nothing remembered"
        );
        assert_eq!(stuck.remember(7), None);
        assert!(stuck.still_pending(|&m| m == 7, |m| released.push(m)));
        assert!(released.is_empty());
        // A newer marker replaces it; the caller releases the old one.
        assert_eq!(stuck.remember(8), Some(7));
        assert!(
            !stuck.still_pending(|_| false, |m| released.push(m)),
            "its work is done"
        );
        assert_eq!(released, vec![8]);
        assert!(
            !stuck.still_pending(|_| true, |m| released.push(m)),
            "forgotten"
        );
    }
    use super::*;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Instant;

    const SHORT: Duration = Duration::from_millis(20);
    /// Bounds the tests' own polling: a failure hangs no longer than this.
    const GIVE_UP: Duration = Duration::from_secs(30);

    fn until(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < GIVE_UP, "never: {what}");
            thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_reader_waits_for_the_window_and_gets_in_after_it_ends() {
        let agent = AgentLock::new();
        let ended = AtomicBool::new(false);
        let window = agent.write_for(SHORT).expect("free");
        thread::scope(|s| {
            let reader = s.spawn(|| {
                let _r = agent.read_outside_window(Duration::from_secs(60));
                assert!(ended.load(Ordering::Acquire), "got in during the window");
            });
            thread::sleep(SHORT);
            ended.store(true, Ordering::Release);
            drop(window);
            reader.join().unwrap();
        });
        assert!(!agent.contended());
    }

    #[test]
    fn a_reader_past_its_deadline_marks_contention_until_it_is_in() {
        let agent = AgentLock::new();
        let ended = AtomicBool::new(false);
        let (inside, got_in) = mpsc::channel();
        let (release, leave) = mpsc::channel::<()>();
        let window = agent.write_for(SHORT).expect("free");
        thread::scope(|s| {
            let (agent, ended) = (&agent, &ended);
            s.spawn(move || {
                let _r = agent.read_outside_window(SHORT);
                assert!(ended.load(Ordering::Acquire), "went ahead unprotected");
                inside.send(()).unwrap();
                leave.recv().unwrap();
            });
            // Still waiting (the writer is held), flagged.
            until("contended", || agent.contended());
            ended.store(true, Ordering::Release);
            drop(window);
            got_in.recv().unwrap();
            // In, reader still held: no longer waiting.
            assert!(!agent.contended());
            // A window cannot start while the reader holds the agent.
            assert!(agent.write_for(SHORT).is_none());
            release.send(()).unwrap();
        });
        assert!(agent.write_for(SHORT).is_some());
    }

    #[test]
    fn the_writer_gives_up_at_its_deadline_while_a_reader_holds_the_agent() {
        let agent = AgentLock::new();
        let reader = agent.read_outside_window(SHORT);
        thread::scope(|s| {
            s.spawn(|| assert!(agent.write_for(SHORT).is_none()));
        });
        assert!(agent.try_write().is_none());
        drop(reader);
        assert!(agent.write_for(SHORT).is_some());
        assert!(!agent.contended());
    }

    #[test]
    fn a_waiting_reader_goes_another_way_once_that_way_opens() {
        let agent = AgentLock::new();
        let window = agent.write_for(Duration::from_secs(1)).unwrap();
        let other_way = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                agent.hold_outside_window_unless(
                    Duration::from_secs(10),
                    || Some(7),
                    || other_way.load(Ordering::Acquire),
                )
            });
            until("the reader is listed as blocked", || {
                agent.held_up(Duration::ZERO, |lane| lane == Some(7))
            });
            other_way.store(true, Ordering::Release);
            assert!(!waiter.join().unwrap(), "it went the other way");
        });
        assert!(
            !agent.held_up(Duration::ZERO, |_| true),
            "no longer listed once gone"
        );
        drop(window);
        // Free at once: the reader side, without asking.
        assert!(agent.hold_outside_window_unless(
            Duration::from_secs(1),
            || None,
            || { panic!("asked while the lock was free") }
        ));
        assert!(agent.write_for(Duration::from_millis(20)).is_none(), "held");
        // SAFETY: the reader just held.
        unsafe { agent.release_held() };
        assert!(agent.write_for(Duration::from_millis(20)).is_some());
    }

    #[test]
    fn a_held_reader_keeps_windows_off_until_released() {
        let agent = AgentLock::new();
        agent.hold_outside_window(SHORT);
        assert!(agent.write_for(SHORT).is_none());
        // Readers share.
        drop(agent.read_outside_window(SHORT));
        // SAFETY: the reader held above.
        unsafe { agent.release_held() };
        assert!(agent.try_write().is_some());
    }

    #[test]
    fn readers_wait_until_the_last_open_window_ended() {
        let agent = AgentLock::new();
        let last_ended = AtomicBool::new(false);
        agent.window_opened();
        agent.window_opened();
        thread::scope(|s| {
            let reader = s.spawn(|| {
                let _r = agent.read_outside_window(SHORT);
                assert!(
                    last_ended.load(Ordering::Acquire),
                    "got in with a window open"
                );
            });
            agent.window_ended();
            // One window still open: the reader waits on, past its deadline, flagged.
            until("contended", || agent.contended());
            last_ended.store(true, Ordering::Release);
            agent.window_ended();
            reader.join().unwrap();
        });
        assert!(!agent.contended());
        // An extra end does not wrap the count: readers get straight in.
        agent.window_ended();
        drop(agent.read_outside_window(SHORT));
    }

    #[test]
    fn work_blocked_on_a_window_is_held_up_by_lane_once_it_has_waited_long_enough() {
        let agent = AgentLock::new();
        let some_lane = |l: Option<u64>| l == Some(7);
        // Work that gets in at once is never listed.
        drop(agent.read_outside_window_on(SHORT, || panic!("asked for a lane it never needs")));
        assert!(!agent.held_up(Duration::ZERO, |_| true));
        let window = agent.write_for(SHORT).expect("free");
        thread::scope(|s| {
            let reader = s.spawn(|| drop(agent.read_outside_window_on(GIVE_UP, || Some(7))));
            let writer = s.spawn(|| drop(agent.write_for_on(GIVE_UP, Some(9))));
            until("both listed", || {
                agent.held_up(Duration::ZERO, some_lane)
                    && agent.held_up(Duration::ZERO, |l| l == Some(9))
            });
            // Not long enough yet, and a lane the window does not count never is.
            assert!(!agent.held_up(GIVE_UP, some_lane));
            assert!(!agent.held_up(Duration::ZERO, |l| l == Some(8)));
            until("held up past 20 ms", || agent.held_up(SHORT, some_lane));
            {
                let _launch = agent.blocked(Some(8));
                assert!(agent.held_up(Duration::ZERO, |l| l == Some(8)));
            }
            assert!(
                !agent.held_up(Duration::ZERO, |l| l == Some(8)),
                "unlisted when its guard drops"
            );
            drop(window);
            reader.join().unwrap();
            writer.join().unwrap();
        });
        assert!(
            !agent.held_up(Duration::ZERO, |_| true),
            "unlisted once they got the lock"
        );
    }

    #[test]
    fn work_ordered_behind_a_window_is_listed_until_its_gate_opens() {
        let agent = AgentLock::new();
        let _window = agent.write_for(SHORT).expect("free");
        let blocked = agent.blocked(Some(3));
        agent.ordered_behind(Some(7));
        agent.ordered_behind(Some(8));
        assert!(agent.held_up(Duration::ZERO, |l| l == Some(7)));
        assert!(
            !agent.held_up(GIVE_UP, |l| l == Some(7)),
            "not long enough yet"
        );
        until("held up past 20 ms", || {
            agent.held_up(SHORT, |l| l == Some(8))
        });
        agent.window_gate_opening();
        assert!(
            !agent.held_up(Duration::ZERO, |l| l == Some(7) || l == Some(8)),
            "the work behind the gate goes with it"
        );
        assert!(
            agent.held_up(Duration::ZERO, |l| l == Some(3)),
            "work blocked at the host stays listed"
        );
        drop(blocked);
        assert!(!agent.held_up(Duration::ZERO, |_| true));
    }

    #[test]
    fn undrainable_work_that_comes_and_goes_and_unfenced_work_that_lasts() {
        let u = Undrainable::new();
        assert!(!u.any());
        u.add();
        u.add();
        u.remove();
        assert!(u.any(), "one source still alive");
        u.remove();
        u.remove();
        assert!(!u.any(), "a removal too many does not wrap around");
        assert!(u.mark_unfenced(), "the first mark");
        assert!(!u.mark_unfenced(), "marked once");
        u.add();
        u.remove();
        assert!(u.any() && u.unfenced(), "unfenced work lasts");
    }
}
