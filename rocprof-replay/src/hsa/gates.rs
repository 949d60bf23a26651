//! Asynchronous windows on HSA: the gates that hold an agent's queues behind a replay window,
//! and the replay queue the window runs its passes on.
//!
//! The doorbell write that submits a replayed dispatch returns at once. In the dispatch's place
//! the application's queue gets two barrier-AND packets: a *ready* barrier (barrier bit:
//! everything before the dispatch has finished; it signals the window) and a *gate* barrier
//! that depends on the window's gate signal. Everything the application submits later to any
//! queue of the agent — kernels, barriers, markers, asynchronous copies (the gate joins their
//! dependencies) — waits behind the gate, so it is ordered after the window, and the
//! application's thread is never blocked by it. The window runs on the engine's worker lane
//! for the agent, submits its passes (and an ordinary run, when it declines) to the agent's
//! [`ReplayQueue`], a plain queue of ours, delivers the application's completion once and opens
//! the gate.
//!
//! Gates are placed under [`Gates`]'s lock, which every tracked submission to the agent's
//! queues takes briefly; so is each window's gate. A queue's submissions before a window's gate
//! are what the window drains (its *targets*: the queue's tracked submission count at that
//! moment); those after it cannot run before the gate opens.
//!
//! Signals referenced by packets are never destroyed while such a packet may still be read:
//! a window's gate and ready signals retire once open and once every queue that could
//! reference them has retired its submissions up to that point ([`Gates::retire`]).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocprof_replay_sys::*;

use super::{Backend, QueueState};

/// A barrier-AND packet: resolves once every signal of `deps` (at most 5; null handles count
/// as satisfied) is 0 — and, with the barrier bit, once every packet before it finished — then
/// decrements `completion` (null: none), with the given fences.
pub(crate) fn barrier_and(
    deps: &[hsa_signal_t],
    completion: hsa_signal_t,
    barrier_bit: bool,
    acquire: hsa_fence_scope_t,
    release: hsa_fence_scope_t,
) -> hsa_barrier_and_packet_t {
    let mut b = hsa_barrier_and_packet_t {
        header: packet_header(HSA_PACKET_TYPE_BARRIER_AND, barrier_bit, acquire, release),
        completion_signal: completion,
        ..Default::default()
    };
    let n = deps.len().min(b.dep_signal.len());
    b.dep_signal[..n].copy_from_slice(&deps[..n]);
    b
}

/// The runtime's signal operations that count tracked submissions: the backend's originals,
/// or a fake in tests.
pub(crate) trait SignalCounter {
    /// Adds `v` to `signal` (release).
    fn add(&self, signal: hsa_signal_t, v: i64);
    /// Reads `signal` (acquire).
    fn load(&self, signal: hsa_signal_t) -> i64;
}

impl SignalCounter for Backend {
    fn add(&self, signal: hsa_signal_t, v: i64) {
        // SAFETY: a live signal of ours: a queue's `inflight`, destroyed only with the queue
        // state the caller holds.
        unsafe { (self.orig.signal_add)(signal, v) }
    }
    fn load(&self, signal: hsa_signal_t) -> i64 {
        // SAFETY: as above.
        unsafe { (self.orig.signal_load)(signal) }
    }
}

/// Counts one more tracked submission behind `inflight` (its retiring barrier decrements it);
/// returns the submission's index, from 1.
///
/// `inflight` goes up before `submitted`: [`retired`] reads `submitted` first, so whatever
/// count it sees, the matching `inflight` is already in the signal, and it can only
/// underestimate what finished. The other order let a drain read the new `submitted` with the
/// old `inflight` and count the queue's still-running last submission as finished: a window's
/// passes could then run beside another queue's kernel (seen in the code while tracing an
/// interceptor fuzz failure that had another cause; no run was caught on this one alone).
pub(crate) fn count_submission(
    sig: &impl SignalCounter,
    inflight: hsa_signal_t,
    submitted: &AtomicU64,
) -> u64 {
    sig.add(inflight, 1);
    submitted.fetch_add(1, Ordering::AcqRel) + 1
}

/// Tracked submissions of a queue that have finished: every tracked submission is followed by a
/// barrier that decrements `inflight`, and they finish in order. Never more than have finished,
/// whatever [`count_submission`] runs meanwhile (it may say fewer).
pub(crate) fn retired(
    sig: &impl SignalCounter,
    inflight: hsa_signal_t,
    submitted: &AtomicU64,
) -> u64 {
    let submitted = submitted.load(Ordering::Acquire);
    let pending = sig.load(inflight);
    submitted.saturating_sub(u64::try_from(pending).unwrap_or(0))
}

/// The gates of one agent's replay windows.
#[derive(Default)]
pub(crate) struct Gates {
    list: Mutex<GateList>,
}

/// Closed gates, oldest first, and signals waiting to retire.
#[derive(Default)]
pub(crate) struct GateList {
    closed: Vec<(u64, hsa_signal_t)>,
    next_epoch: u64,
    retiring: Vec<Retiring>,
    /// Completion signals that resolve only after a window's dispatch gate opens (signal
    /// handle → that gate): the replayed dispatches' own, and packets behind the gates or
    /// waiting for such a signal (`intercept::note_held`). An entry goes when its gate opens.
    held: HashMap<u64, hsa_signal_t>,
}

/// Submission counts to retire first: each queue of the agent, then each replay queue.
type RetireAfter = (Vec<(Arc<QueueState>, u64)>, Vec<u64>);

/// A window's signal that packets may still reference.
struct Retiring {
    signal: hsa_signal_t,
    /// Once the signal read 0: the submission counts that must retire first (each queue of the
    /// agent, then each replay queue).
    after: Option<RetireAfter>,
}

impl Gates {
    /// Takes the lock for one submission.
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, GateList> {
        self.list.lock()
    }

    /// Hands a window's signals over for destruction once nothing can reference them.
    pub(crate) fn retire(&self, signals: &[hsa_signal_t]) {
        let mut list = self.list.lock();
        list.retiring.extend(
            signals
                .iter()
                .filter(|s| s.handle != 0)
                .map(|&signal| Retiring {
                    signal,
                    after: None,
                }),
        );
    }
}

impl GateList {
    /// `signal` resolves only after `gate` opens.
    pub(crate) fn hold(&mut self, signal: u64, gate: hsa_signal_t) {
        self.held.insert(signal, gate);
    }

    /// Whether any of `deps` is held behind a gate: work waiting for it is ordered after a
    /// window's dispatch.
    pub(crate) fn holds_any(&self, deps: &[hsa_signal_t]) -> bool {
        deps.iter().any(|d| self.held.contains_key(&d.handle))
    }

    /// The gate `signal` waits for, if it is held.
    pub(crate) fn held_by(&self, signal: u64) -> Option<hsa_signal_t> {
        self.held.get(&signal).copied()
    }

    /// Whether any signal is held.
    pub(crate) fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Closed gates this queue has no barrier for yet (placed now: the caller forwards them);
    /// open gates are dropped from the list.
    pub(crate) fn pending_for(
        &mut self,
        be: &Backend,
        queue: &QueueState,
    ) -> smallvec::SmallVec<[hsa_signal_t; 4]> {
        self.closed.retain(|(_, s)| {
            // SAFETY: a live gate signal of ours.
            unsafe { (be.orig.signal_load)(*s) != 0 }
        });
        let seen = queue.gated_epoch.load(Ordering::Relaxed);
        let pending = self
            .closed
            .iter()
            .filter(|(epoch, _)| *epoch > seen)
            .map(|(_, s)| *s)
            .collect();
        if let Some((epoch, _)) = self.closed.last() {
            queue.gated_epoch.store(*epoch, Ordering::Relaxed);
        }
        pending
    }

    /// Every gate still listed as closed, whichever queues have a barrier for it (after the
    /// bookkeeping of [`pending_for`](Self::pending_for) failed half way: it may have marked
    /// gates as placed that were not).
    pub(crate) fn closed_gates(&self) -> smallvec::SmallVec<[hsa_signal_t; 4]> {
        self.closed.iter().map(|(_, s)| *s).collect()
    }

    /// Closes a new isolation gate: later submissions to the GPU's queues go behind it.
    pub(crate) fn close(&mut self, gate: hsa_signal_t) {
        self.next_epoch += 1;
        self.closed.push((self.next_epoch, gate));
    }

    /// Destroys retiring signals nothing can reference any more.
    pub(crate) fn sweep(
        &mut self,
        be: &Backend,
        queues: &[Arc<QueueState>],
        replays: &[&ReplayQueue],
    ) {
        self.retiring.retain_mut(|r| {
            match &r.after {
                None => {
                    // SAFETY: a live signal of ours.
                    if unsafe { (be.orig.signal_load)(r.signal) } == 0 {
                        // Open: no drain needs to stop short of it any more.
                        for q in queues {
                            q.pending_gates.lock().retain(|(_, g)| *g != r.signal);
                        }
                        self.held.retain(|_, g| *g != r.signal);
                        let counts = queues
                            .iter()
                            .map(|q| (Arc::clone(q), q.submitted.load(Ordering::Acquire)))
                            .collect();
                        let replay = replays
                            .iter()
                            .map(|q| q.submitted.load(Ordering::Acquire))
                            .collect();
                        r.after = Some((counts, replay));
                    }
                    true
                }
                Some((counts, replay_counts)) => {
                    // A replay queue created since counts nothing it could reference.
                    let done = counts.iter().all(|(q, n)| {
                        q.inflight.handle != 0 && retired(be, q.inflight, &q.submitted) >= *n
                    }) && replays
                        .iter()
                        .zip(replay_counts)
                        .all(|(q, n)| q.retired(be) >= *n);
                    if done {
                        // SAFETY: our signal; no packet or wait references it any more.
                        unsafe { (be.orig.signal_destroy)(r.signal) };
                    }
                    !done
                }
            }
        });
    }
}

/// Waits until the first `n` tracked submissions behind `inflight` have finished, or
/// `deadline` (in slices of at most 100 ms).
pub(crate) fn wait_retired(
    be: &Backend,
    inflight: hsa_signal_t,
    submitted: &AtomicU64,
    n: u64,
    deadline: Duration,
) -> bool {
    let end = Instant::now() + deadline;
    loop {
        if retired(be, inflight, submitted) >= n {
            return true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        // SAFETY: a live progress signal of ours.
        let pending = unsafe { (be.orig.signal_load)(inflight) };
        // SAFETY: as above; a bounded wait for it to drop below `pending`.
        unsafe {
            (be.orig.signal_wait)(
                inflight,
                HSA_SIGNAL_CONDITION_LT,
                pending,
                be.ticks(left.min(Duration::from_millis(100))),
                HSA_WAIT_STATE_BLOCKED,
            )
        };
    }
}

/// A plain queue of ours on one agent: the replay windows' passes and ordinary runs.
pub(crate) struct ReplayQueue {
    queue: *mut hsa_queue_t,
    /// Decremented by the barrier after each submission (as for the application's queues).
    inflight: hsa_signal_t,
    submitted: AtomicU64,
    /// The last submission of the tool's own work ([`submit`](Self::submit): passes,
    /// barriers, compare kernels): an ordinary run must not start before it has finished (a
    /// stuck pass may still write what that dispatch uses). Ordinary runs
    /// ([`submit_run`](Self::submit_run)) do not count: they are the application's own
    /// executions, which may run beside each other as on its queues.
    tool_work: AtomicU64,
    /// One producer at a time.
    lock: Mutex<()>,
}

// SAFETY: the queue is a runtime object we never destroy while the backend lives; producers
// are serialized by `lock`.
unsafe impl Send for ReplayQueue {}
// SAFETY: as above.
unsafe impl Sync for ReplayQueue {}

impl ReplayQueue {
    /// Creates the agent's replay queue (profiling on, for pass times).
    pub(crate) fn create(be: &Backend, agent: hsa_agent_t) -> Option<ReplayQueue> {
        let o = &be.orig;
        let mut inflight = hsa_signal_t::default();
        // SAFETY: creating a plain signal with no consumer list.
        if unsafe { (o.signal_create)(0, 0, std::ptr::null(), &mut inflight) } != HSA_STATUS_SUCCESS
        {
            return None;
        }
        let mut queue: *mut hsa_queue_t = std::ptr::null_mut();
        // SAFETY: the original (unhooked) queue creation: a plain queue, never intercepted.
        let st = unsafe {
            (o.queue_create)(
                agent,
                1024,
                HSA_QUEUE_TYPE_MULTI,
                None,
                std::ptr::null_mut(),
                u32::MAX,
                u32::MAX,
                &mut queue,
            )
        };
        if st != HSA_STATUS_SUCCESS || queue.is_null() {
            tracing::warn!(status = %super::Status(st), "cannot create a queue of the tool's own (the replay queue, or an aside lane for ordinary runs)");
            // SAFETY: our signal, unused.
            unsafe { (o.signal_destroy)(inflight) };
            return None;
        }
        // SAFETY: a live queue of ours.
        let st = unsafe { (o.profiler_enable)(queue, 1) };
        if st != HSA_STATUS_SUCCESS {
            tracing::warn!(status = %super::Status(st), "cannot enable dispatch profiling on the replay queue: pass times are unavailable");
        }
        Some(ReplayQueue {
            queue,
            inflight,
            submitted: AtomicU64::new(0),
            tool_work: AtomicU64::new(0),
            lock: Mutex::new(()),
        })
    }

    /// Tracked submissions that finished.
    pub(crate) fn retired(&self, be: &Backend) -> u64 {
        retired(be, self.inflight, &self.submitted)
    }

    /// Waits until everything submitted so far has finished (a pass of an earlier window that
    /// outlived its deadlines, an ordinary run still queued), or `deadline`.
    pub(crate) fn wait_idle(&self, be: &Backend, deadline: Duration) -> bool {
        let n = self.submitted.load(Ordering::Acquire);
        wait_retired(be, self.inflight, &self.submitted, n, deadline)
    }

    /// Whether everything submitted so far has finished.
    pub(crate) fn is_idle(&self, be: &Backend) -> bool {
        self.retired(be) >= self.submitted.load(Ordering::Acquire)
    }

    /// Submissions not finished yet.
    pub(crate) fn pending(&self, be: &Backend) -> u64 {
        self.submitted
            .load(Ordering::Acquire)
            .saturating_sub(self.retired(be))
    }

    /// Whether the tool's own work submitted here has finished (what may still run is
    /// ordinary runs only).
    pub(crate) fn tool_work_done(&self, be: &Backend) -> bool {
        self.retired(be) >= self.tool_work.load(Ordering::Acquire)
    }

    /// Writes `count` packets of the tool's own work at `pkts` (passes, barriers, compare
    /// kernels) and a barrier after them, and rings the doorbell. `false` when the ring had no
    /// room before `deadline` (nothing was written).
    ///
    /// # Safety
    /// `pkts` points to `count` valid 64-byte AQL packets.
    pub(crate) unsafe fn submit(
        &self,
        be: &Backend,
        pkts: *const c_void,
        count: usize,
        deadline: Duration,
    ) -> bool {
        // SAFETY: caller contract.
        unsafe { self.write(be, pkts, count, deadline, true) }
    }

    /// [`submit`](Self::submit) for an ordinary run (a declined dispatch's one execution,
    /// the gate's opening behind it), which later ordinary runs need not wait for.
    ///
    /// # Safety
    /// As for [`submit`](Self::submit).
    pub(crate) unsafe fn submit_run(
        &self,
        be: &Backend,
        pkts: *const c_void,
        count: usize,
        deadline: Duration,
    ) -> bool {
        // SAFETY: caller contract.
        unsafe { self.write(be, pkts, count, deadline, false) }
    }

    /// # Safety
    /// As for [`submit`](Self::submit).
    unsafe fn write(
        &self,
        be: &Backend,
        pkts: *const c_void,
        count: usize,
        deadline: Duration,
        tool: bool,
    ) -> bool {
        let o = &be.orig;
        let _one = self.lock.lock();
        let q = self.queue;
        let n = count as u64 + 1;
        // SAFETY: a live queue; `size` never changes.
        let size = u64::from(unsafe { (*q).size });
        if n > size {
            return false;
        }
        let end = Instant::now() + deadline;
        // SAFETY: a live queue; we are its only producer (under `lock`).
        let write = unsafe { (o.queue_load_write_index)(q) };
        loop {
            // SAFETY: a live queue.
            let read = unsafe { (o.queue_load_read_index)(q) };
            if write + n - read <= size {
                break;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        // SAFETY: a live queue; the slots [write, write + n) are free (checked above).
        let index = unsafe { (o.queue_add_write_index)(q, n) };
        let retire = barrier_and(
            &[],
            self.inflight,
            true,
            HSA_FENCE_SCOPE_NONE,
            HSA_FENCE_SCOPE_NONE,
        );
        let number = count_submission(be, self.inflight, &self.submitted);
        if tool {
            self.tool_work.fetch_max(number, Ordering::AcqRel);
        }
        for i in 0..n {
            let packet: *const u8 = if i < count as u64 {
                // SAFETY: caller contract: `count` packets of 64 bytes.
                unsafe { pkts.cast::<u8>().add(i as usize * 64) }
            } else {
                (&retire as *const hsa_barrier_and_packet_t).cast()
            };
            // SAFETY: the slot is inside the ring (index modulo its power-of-two size) and
            // free; the body is written first, the header word last with release ordering, so
            // the packet processor never sees a half-written packet.
            unsafe {
                let slot = (*q)
                    .base_address
                    .cast::<u8>()
                    .add((((index + i) % size) * 64) as usize);
                std::ptr::copy_nonoverlapping(packet.add(4), slot.add(4), 60);
                let first = std::ptr::read_unaligned(packet.cast::<u32>());
                AtomicU32::from_ptr(slot.cast::<u32>()).store(first, Ordering::Release);
            }
        }
        // SAFETY: the queue's doorbell, rung with the last packet's index.
        unsafe { (o.signal_store)((*q).doorbell_signal, (index + n - 1) as i64) };
        true
    }
}

/// Most aside lanes a GPU gets ([`AsideLanes`]).
pub(crate) const ASIDE_LANES: usize = 8;

/// Queues of ours beside a GPU's replay queue, for ordinary runs (a declined dispatch's one
/// execution) that must not wait behind what runs there: a first pass that gave way (the
/// application's own execution, possibly waiting for this very dispatch), or another
/// dispatch's ordinary run (a kernel spinning on a flag this one sets). Without the tool the
/// two would run side by side on the application's queues. Created as needed, at most
/// [`ASIDE_LANES`], kept for the process's life (never destroyed, as the replay queue).
#[derive(Default)]
pub(crate) struct AsideLanes {
    lanes: Mutex<Vec<&'static ReplayQueue>>,
}

impl AsideLanes {
    /// Every lane created so far.
    pub(crate) fn all(&self) -> smallvec::SmallVec<[&'static ReplayQueue; 4]> {
        self.lanes.lock().iter().copied().collect()
    }

    /// Submits an ordinary run (`count` packets at `pkts`, [`ReplayQueue::submit_run`]) where
    /// it waits behind nothing it may itself be waiting for. `replay` when idle, or when the
    /// tool's own work there has not finished (a stuck pass may still write what the run
    /// uses: the run follows it, as before) and `replay_held` is false; else an idle aside
    /// lane, a new one while there are fewer than [`ASIDE_LANES`], or at the cap the least
    /// busy. Chosen and written under one lock: two runs never take the same idle lane.
    /// `false`: nothing was submitted (no room before `deadline`).
    ///
    /// # Safety
    /// As for [`ReplayQueue::submit`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn submit_run(
        &self,
        be: &Backend,
        agent: hsa_agent_t,
        replay: &'static ReplayQueue,
        replay_held: bool,
        pkts: *const c_void,
        count: usize,
        deadline: Duration,
    ) -> bool {
        let mut lanes = self.lanes.lock();
        let state = |q: &ReplayQueue| LaneState {
            idle: q.is_idle(be),
            pending: q.pending(be),
        };
        let replay_state = ReplayState {
            lane: state(replay),
            tool_work_done: replay.tool_work_done(be),
            held: replay_held,
        };
        let aside: smallvec::SmallVec<[LaneState; 8]> = lanes.iter().map(|l| state(l)).collect();
        let mut choice = choose_lane(replay_state, &aside, ASIDE_LANES);
        if choice == Lane::New {
            match ReplayQueue::create(be, agent) {
                Some(new) => {
                    lanes.push(Box::leak(Box::new(new)));
                    tracing::debug!(lanes = lanes.len(), "a new aside lane for ordinary runs");
                    choice = Lane::Aside(lanes.len() - 1);
                }
                // No new queue: as at the cap.
                None => {
                    tracing::warn!(
                        "no aside lane could be created: the ordinary run goes to the least busy \
                         queue of the tool's own"
                    );
                    choice = choose_lane(replay_state, &aside, aside.len());
                }
            }
        }
        let lane = match choice {
            Lane::Aside(i) => lanes[i],
            Lane::Replay | Lane::New => replay,
        };
        // SAFETY: caller contract.
        unsafe { lane.submit_run(be, pkts, count, deadline) }
    }
}

/// What a queue of ours holds, for [`choose_lane`].
#[derive(Clone, Copy, Debug)]
struct LaneState {
    idle: bool,
    /// Submissions not finished.
    pending: u64,
}

/// What the replay queue holds, for [`choose_lane`].
#[derive(Clone, Copy, Debug)]
struct ReplayState {
    lane: LaneState,
    /// The tool's own work there has finished (only ordinary runs may still run).
    tool_work_done: bool,
    /// A first pass that gave way holds it.
    held: bool,
}

/// Where an ordinary run goes ([`choose_lane`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Replay,
    /// The aside lane at this index.
    Aside(usize),
    /// A new aside lane.
    New,
}

/// Where an ordinary run goes ([`AsideLanes::submit_run`]): the replay queue when it is idle,
/// or when the tool's own work there has not finished (the run must follow it) and no first
/// pass that gave way holds it; else the first idle aside lane; else a new one while there
/// are fewer than `cap`; else the least busy aside lane, or the replay queue if it is less
/// busy and not held.
fn choose_lane(replay: ReplayState, aside: &[LaneState], cap: usize) -> Lane {
    if !replay.held && (replay.lane.idle || !replay.tool_work_done) {
        return Lane::Replay;
    }
    if let Some(i) = aside.iter().position(|l| l.idle) {
        return Lane::Aside(i);
    }
    if aside.len() < cap {
        return Lane::New;
    }
    let least = aside
        .iter()
        .enumerate()
        .min_by_key(|(_, l)| l.pending)
        .map(|(i, l)| (i, l.pending));
    match least {
        Some((i, pending)) if replay.held || pending < replay.lane.pending => Lane::Aside(i),
        _ => Lane::Replay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::sync::atomic::AtomicI64;

    const IDLE: LaneState = LaneState {
        idle: true,
        pending: 0,
    };

    fn busy(pending: u64) -> LaneState {
        LaneState {
            idle: false,
            pending,
        }
    }

    fn replay(lane: LaneState, tool_work_done: bool, held: bool) -> ReplayState {
        ReplayState {
            lane,
            tool_work_done,
            held,
        }
    }

    #[test]
    fn an_ordinary_run_goes_where_nothing_it_may_wait_for_runs_ahead_of_it() {
        // An idle replay queue takes it.
        assert_eq!(choose_lane(replay(IDLE, true, false), &[], 8), Lane::Replay);
        // The tool's own work still runs there (a stuck pass may write what the run uses): the
        // run follows it, even with an idle aside lane.
        assert_eq!(
            choose_lane(replay(busy(1), false, false), &[IDLE], 8),
            Lane::Replay
        );
        // Only ordinary runs there (one may wait for this one): an idle aside lane, else a new
        // one.
        assert_eq!(
            choose_lane(replay(busy(1), true, false), &[busy(1), IDLE], 8),
            Lane::Aside(1)
        );
        assert_eq!(
            choose_lane(replay(busy(1), true, false), &[busy(1)], 8),
            Lane::New
        );
        // A first pass that gave way holds it, its own work unfinished: never behind it.
        assert_eq!(choose_lane(replay(busy(2), false, true), &[], 8), Lane::New);
        assert_eq!(
            choose_lane(replay(busy(2), false, true), &[busy(3), busy(1)], 2),
            Lane::Aside(1)
        );
        // At the cap, not held: the least busy of all.
        assert_eq!(
            choose_lane(replay(busy(1), true, false), &[busy(3), busy(2)], 2),
            Lane::Replay
        );
        assert_eq!(
            choose_lane(replay(busy(5), true, false), &[busy(3), busy(2)], 2),
            Lane::Aside(1)
        );
    }

    /// What a drain on another thread does with the count at a given moment.
    type Probe = Box<dyn Fn(&Probed)>;

    /// A signal whose additions let a probe look at the count half way, before and after the
    /// value changes: what a drain on another thread could read at that moment.
    #[derive(Default)]
    struct Probed {
        value: AtomicI64,
        probe: RefCell<Option<Probe>>,
    }

    impl SignalCounter for Probed {
        fn add(&self, _: hsa_signal_t, v: i64) {
            let probe = self.probe.borrow();
            if let Some(p) = probe.as_ref() {
                p(self);
            }
            self.value.fetch_add(v, Ordering::AcqRel);
            if let Some(p) = probe.as_ref() {
                p(self);
            }
        }
        fn load(&self, _: hsa_signal_t) -> i64 {
            self.value.load(Ordering::Acquire)
        }
    }

    #[test]
    fn a_drain_reading_in_the_middle_of_a_count_never_sees_a_running_submission_as_finished() {
        let signal = hsa_signal_t { handle: 1 };
        let submitted = Arc::new(AtomicU64::new(0));
        let counter = Probed::default();
        // Three submissions, the first two finished: the third is still running.
        for _ in 0..3 {
            count_submission(&counter, signal, &submitted);
        }
        counter.value.fetch_sub(2, Ordering::AcqRel);
        assert_eq!(retired(&counter, signal, &submitted), 2);

        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (s, v) = (Arc::clone(&submitted), Arc::clone(&seen));
        *counter.probe.borrow_mut() = Some(Box::new(move |c: &Probed| {
            v.lock().push(retired(c, signal, &s));
        }));
        assert_eq!(count_submission(&counter, signal, &submitted), 4);
        let seen = seen.lock().clone();
        assert_eq!(
            seen.len(),
            2,
            "the probe looked before and after the addition"
        );
        assert!(
            seen.iter().all(|&r| r <= 2),
            "a drain read {seen:?} finished submissions while only 2 had: it would stop \
             waiting for the third, still running"
        );
        *counter.probe.borrow_mut() = None;
        assert_eq!(retired(&counter, signal, &submitted), 2);
    }
}
