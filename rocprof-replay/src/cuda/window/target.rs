//! [`CudaTarget`], the engine's handle on one intercepted launch: drain, capture, restore,
//! relaunch and timing on the backend's private stream.

use std::ffi::c_void;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLockWriteGuard};
use rocprof_replay_sys::cuda::*;

use crate::cuda::api::{Driver, error_name};
use crate::cuda::gate::{BEHIND, Gate};
use crate::cuda::{Backend, Ctx, StuckMarker, warn_once};
use crate::engine::arena;
use crate::engine::drain::{DrainLimits, DrainWait};
use crate::engine::snapshot::{
    CopyError, DeviceMemory, DiffError, Direction, DirtyRanges, Staging, Transfer,
};
use crate::engine::window::{PassError, ReplayTarget};
use crate::policy::DeclineReason;

use super::*;

/// A context's late work of ours, as the engine's stuck-work registry sees it
/// ([`StuckWork`](crate::engine::stuck::StuckWork)): each listed token is an event of ours
/// recorded behind the work, given back to the context's pool once the work ended.
pub(crate) struct LateEvents<'a> {
    drv: &'a Driver,
    ctx: &'a Ctx,
}

impl<'a> LateEvents<'a> {
    pub(crate) fn new(drv: &'a Driver, ctx: &'a Ctx) -> LateEvents<'a> {
        LateEvents { drv, ctx }
    }
}

impl crate::engine::stuck::Completions for LateEvents<'_> {
    type Token = usize;
    fn ended(&self, ev: usize) -> bool {
        // SAFETY: an event of ours, listed, so neither reused nor destroyed.
        unsafe { (self.drv.event_query)(ev as CUevent) == CUDA_SUCCESS }
    }
    fn wait(&self, ev: usize, slice: Duration) {
        // SAFETY: as in `ended`.
        poll(Instant::now() + slice, || unsafe {
            (self.drv.event_query)(ev as CUevent)
        });
    }
    fn release(&self, ev: usize) {
        self.ctx.private.lock().plain_events.push(ev);
    }
}

/// The result of polling for asynchronous work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Poll {
    Done,
    Failed(CUresult),
    TimedOut,
}

/// Polls `query` (an event or stream query) until it reports completion, an error, or
/// `deadline` passes. Spins briefly, then yields for [`YIELD_FOR`], then sleeps in slices of
/// about 1/32 of the time waited so far (10 µs to 1 ms), with this thread's timer slack
/// lowered meanwhile ([`FineSlack`]), so a wait ends within a few percent of when its work
/// did.
pub(crate) fn poll(deadline: Instant, query: impl FnMut() -> CUresult) -> Poll {
    poll_unless(deadline, query, || false).unwrap_or(Poll::TimedOut)
}

/// [`poll`], giving up (`None`) once `stop` says so; `stop` is asked only once the wait has
/// gone past its spinning and yielding (about 250 µs), then once per sleep.
pub(crate) fn poll_unless(
    deadline: Instant,
    mut query: impl FnMut() -> CUresult,
    mut stop: impl FnMut() -> bool,
) -> Option<Poll> {
    let start = Instant::now();
    let mut slack: Option<FineSlack> = None;
    let mut round = 0u32;
    loop {
        match query() {
            CUDA_SUCCESS => return Some(Poll::Done),
            CUDA_ERROR_NOT_READY => {}
            r => return Some(Poll::Failed(r)),
        }
        let now = Instant::now();
        if now >= deadline {
            return Some(Poll::TimedOut);
        }
        round += 1;
        if round < 64 {
            std::hint::spin_loop();
        } else if now - start < YIELD_FOR {
            std::thread::yield_now();
        } else {
            if stop() {
                return None;
            }
            slack.get_or_insert_with(FineSlack::new);
            let slice = ((now - start) / 32).clamp(SLEEP_MIN, SLEEP_MAX);
            std::thread::sleep(slice.min(deadline - now));
        }
    }
}

/// Whether work blocked on a window, on stream `lane` (`None`: not on a stream the backend
/// decodes), may be what a kernel running on stream `own` waits for: work on another stream.
/// Work behind the kernel on its own stream cannot start before it ends, nor can work ordered
/// with it through the legacy default stream: work there waits for a kernel on a blocking
/// stream (`own_non_blocking` false; synchronous copies and sets run there too), and work on
/// another stream waits for a kernel on the legacy stream unless that stream is non-blocking
/// (not asked: counted as ordered).
pub(super) fn may_release(own: u64, own_non_blocking: bool, lane: Option<u64>) -> bool {
    let legacy = |s: u64| s == 0 || s == CU_STREAM_LEGACY as u64;
    lane.is_some_and(|l| l != own && !legacy(own) && (!legacy(l) || own_non_blocking))
}

/// How long [`poll`] yields before it sleeps: most waits of a window (copies, compares, short
/// kernels) end within it.
const YIELD_FOR: Duration = Duration::from_micros(250);

/// Shortest and longest sleep of [`poll`].
const SLEEP_MIN: Duration = Duration::from_micros(10);
const SLEEP_MAX: Duration = Duration::from_millis(1);

/// The calling thread's timer slack set to 1 µs for as long as this lives, then put back.
/// Linux lets a thread's sleeps overrun by its slack (50 µs by default) to batch wake-ups: for
/// the sub-millisecond sleeps of [`poll`] that would be most of the sleep.
struct FineSlack(Option<libc::c_ulong>);

impl FineSlack {
    fn new() -> FineSlack {
        // SAFETY: PR_GET_TIMERSLACK only reads the calling thread's timer slack.
        let old = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        if old <= 0 {
            return FineSlack(None);
        }
        // SAFETY: PR_SET_TIMERSLACK only changes the calling thread's timer slack.
        let set = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
        FineSlack((set == 0).then_some(old as libc::c_ulong))
    }
}

impl Drop for FineSlack {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            // SAFETY: as in `new`: the calling thread's own slack, back to what it was.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, old, 0, 0, 0) };
        }
    }
}

/// Arena memory of the current context through the driver (callers hold a [`Guard`](crate::cuda::Guard)).
pub(crate) struct ArenaMemory<'a> {
    pub(crate) drv: &'a Driver,
}

impl arena::Memory for ArenaMemory<'_> {
    fn device_info(&self) -> Option<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: plain out-parameters.
        let r = unsafe { (self.drv.mem_get_info)(&mut free, &mut total) };
        (r == CUDA_SUCCESS).then_some((free, total))
    }
    fn alloc_device(&self, size: usize) -> Option<usize> {
        let mut p: CUdeviceptr = 0;
        // SAFETY: a plain out-parameter.
        let r = unsafe { (self.drv.mem_alloc)(&mut p, size) };
        (r == CUDA_SUCCESS && p != 0).then_some(p as usize)
    }
    fn free_device(&self, ptr: usize) {
        // SAFETY: an allocation of ours that no copy uses.
        unsafe { (self.drv.mem_free)(ptr as CUdeviceptr) };
    }
    fn alloc_pinned(&self, size: usize) -> Option<usize> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a plain out-parameter.
        let r = unsafe { (self.drv.mem_host_alloc)(&mut p, size, CU_MEMHOSTALLOC_PORTABLE) };
        (r == CUDA_SUCCESS && !p.is_null()).then_some(p as usize)
    }
    fn free_pinned(&self, ptr: usize) {
        // SAFETY: an allocation of ours that no copy uses.
        unsafe { (self.drv.mem_free_host)(ptr as *mut c_void) };
    }
}

/// Where the original launch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Original {
    /// The application thread still waits at API enter.
    Held,
    /// Released as pass 1.
    Pass,
    /// Released as the ordinary run.
    Ordinary,
    /// Released as pass 1 and the launch call failed: nothing ran, the application has its
    /// error, as it would without the tool.
    Failed,
}

/// The last pass that ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Last {
    None,
    Original,
    /// A relaunch on the private stream; its end event.
    Relaunch(usize),
}

/// A dispatch's launch metrics, merged into the values of its set's last counter pass.
pub(super) struct LaunchValues {
    /// The set's last counter pass.
    last: u32,
    /// That pass's metrics in [`MetricSet::pass`](crate::counters::MetricSet::pass) order:
    /// `Some`, a launch metric's value (`f64` bits); `None`, CUPTI's next value.
    merged: Vec<Option<u64>>,
    /// Some metrics are CUPTI's: its session must deliver them.
    counted: bool,
}

/// A dispatch's hardware counters: a CUPTI session and the user range of its launch in each
/// counter pass (0: the session is its own, or it is the run's first member).
#[derive(Clone)]
pub(super) struct Counting {
    session: Arc<Mutex<crate::cuda::profiler::Session>>,
    range: u32,
}

/// A counter run's session and the next free range in it ([`CudaTarget::run_counters`]).
pub(super) type RunCounters = Arc<Mutex<Option<(Arc<Mutex<crate::cuda::profiler::Session>>, u32)>>>;

/// The engine's handle on one intercepted launch (on the companion thread).
pub(super) struct CudaTarget<'a> {
    pub(super) be: &'static Backend,
    pub(super) ctx: &'a Ctx,
    pub(super) job: &'a Job,
    pub(super) window: Option<RwLockWriteGuard<'a, ()>>,
    pub(super) original: Original,
    pub(super) last: Last,
    pub(super) wait_event: usize,
    /// Device memory may hold a partly restored state (a restore began and no pass has run
    /// since).
    pub(super) dirty: bool,
    /// The end event of pass 1 (the original launch), while it may still be waited for.
    pub(super) original_end: Option<usize>,
    /// Hardware counters of this dispatch (CUPTI's range profiler, `crate::cuda::profiler`):
    /// its own session, or the session of its run's first member and a range in it.
    pub(super) counters: Option<Counting>,
    /// The session the run's later members are measured in, and the next free range in it
    /// (shared by the run's first member and its candidates; `None` outside a run's window).
    pub(super) run_counters: Option<RunCounters>,
    /// Shown to a run as a candidate (`CudaJoins`): measured in the first member's session.
    pub(super) candidate: bool,
    /// The launch metrics of this dispatch's set, computed before the window
    /// ([`crate::cuda::launch_metrics`]).
    pub(super) launch_values: Option<LaunchValues>,
    /// The private stream given up with work still running on it (0: none).
    pub(super) late_stream: usize,
    /// The L2 flush before each counter pass (the [`super::l2`] module).
    pub(super) l2: super::l2::L2Flush,
    /// A later member of a window's run: released when dropped, if not before.
    rider: bool,
    /// [`released`](ReplayTarget::released) ran.
    released: bool,
    /// Later passes submitted and not collected yet, oldest first
    /// ([`ReplayTarget::submit_pass`]; several when they are queued ahead).
    queued: std::collections::VecDeque<Queued>,
    /// Restores return once submitted ([`DeviceMemory::queue_restores`]).
    queue_restores: bool,
    /// The events behind queued restores, oldest first, until a pass behind them completed or
    /// a copy waited for them (the copy kernel's table is written again only after them).
    pending_restores: std::collections::VecDeque<usize>,
    /// The transfers of the restore queued last: a restore with the same ones may queue
    /// behind it without waiting (its copy table is the same).
    queued_transfers: Vec<Transfer>,
    /// Which of those went through the copy kernel.
    queued_by_kernel: Vec<bool>,
    /// The launch, enqueued behind a closed gate while the drain waited
    /// ([`defer`]), until pass 1 or the ordinary run opens that gate.
    deferred: Option<Deferred>,
    /// A deferred launch's pass 1 events, given back once its call returned.
    deferred_events: Option<(usize, usize)>,
    /// Whether the launch's stream is non-blocking, asked before the launch was deferred
    /// (the stream may be destroyed once its call returned).
    own_non_blocking: Option<bool>,
}

/// How long the window waits for the application thread to take and run its request to
/// defer the launch ([`CudaTarget::try_defer`]; it waits inside its launch call, so it
/// answers at once).
const DEFER_GRACE: Duration = Duration::from_secs(1);

/// A drain's state while it may defer the launch ([`CudaTarget::drain`]): its deadlines,
/// whether it asked, and the deferred launch.
struct Draining {
    limits: DrainLimits,
    asked: std::cell::Cell<bool>,
    deferred: std::cell::RefCell<Option<Deferred>>,
    own_non_blocking: std::cell::Cell<Option<bool>>,
}

impl Draining {
    /// Whether the launch was deferred (from then on the markers stand for the streams).
    fn is_deferred(&self) -> bool {
        self.deferred.borrow().is_some()
    }

    /// The marker recorded on stream `key` (as the drain lists it) when the launch was
    /// deferred; `None` for a stream that had none (created since, or capturing then).
    fn marker_for(&self, key: usize) -> Option<usize> {
        let d = self.deferred.borrow();
        d.as_ref()?
            .markers
            .iter()
            .find(|(k, _)| *k == key)
            .map(|&(_, ev)| ev)
    }
}

/// A relaunch submitted and not waited for yet: its events, its kernel record's correlation
/// id (timed passes), and kernel records kept on until it is collected.
pub(super) struct Queued {
    start: usize,
    end: usize,
    record: Option<u32>,
    timed: bool,
    _timing: Option<crate::cuda::kernel_clock::Timing<'static>>,
}

impl Drop for CudaTarget<'_> {
    fn drop(&mut self) {
        // A later member of a run dropped without its release (its window panicked): its
        // launch's gate still opens, so the application's stream goes on.
        if self.rider {
            self.released();
        }
    }
}

impl<'a> CudaTarget<'a> {
    /// The target of `job`'s window.
    pub(super) fn of(be: &'static Backend, job: &'a Job) -> CudaTarget<'a> {
        CudaTarget {
            be,
            ctx: &job.ctx,
            job,
            window: None,
            original: Original::Held,
            last: Last::None,
            wait_event: 0,
            dirty: false,
            original_end: None,
            counters: None,
            run_counters: None,
            candidate: false,
            l2: super::l2::L2Flush::Off,
            launch_values: None,
            late_stream: 0,
            rider: false,
            released: false,
            queued: std::collections::VecDeque::new(),
            queue_restores: false,
            pending_restores: std::collections::VecDeque::new(),
            queued_transfers: Vec::new(),
            queued_by_kernel: Vec::new(),
            deferred: None,
            deferred_events: None,
            own_non_blocking: None,
        }
    }

    /// While the drain waits with the application thread inside its launch call: has that
    /// thread enqueue the launch behind a closed gate ([`defer`]) and
    /// releases it, so the call returns. Only for a launch whose arguments are copied and whose
    /// context has gates (an asynchronous window). With the deferred launch: whether its
    /// stream is non-blocking (asked first: once the call returned the stream may go). `None`:
    /// the call keeps waiting.
    fn try_defer(&self) -> Option<(Deferred, bool)> {
        if self.original != Original::Held || self.job._owned.is_none() || self.job.held {
            return None;
        }
        let page = self.job.gates.clone()?;
        let asked = Instant::now();
        // Asked while the application thread still waits inside its launch call.
        let own_non_blocking = self.non_blocking(self.job.launch.app_stream() as u64);
        let slot: Arc<Mutex<Option<Deferred>>> = Arc::default();
        let out = slot.clone();
        let (be, ctx) = (self.be, self.job.ctx.clone());
        let stream = self.job.launch.app_stream() as usize;
        let request: Request = Box::new(move || {
            *out.lock() = super::launch::defer(be, &ctx, stream as CUstream, &page);
        });
        let served = self
            .job
            .hand
            .mail
            .on_app_thread(request, DEFER_GRACE, DEFER_GRACE);
        let deferred = slot.lock().take();
        let Some(d) = deferred.filter(|_| matches!(served, Ok(true))) else {
            tracing::debug!("the launch could not be deferred: its call waits for the drain");
            return None;
        };
        self.job.hand.set_deferred();
        self.job.hand.release(Release::Pass {
            start: d.start,
            end: d.end,
        });
        if crate::engine::phases::enabled() {
            crate::engine::phases::add(crate::engine::phases::Phase::Defer, asked.elapsed());
        }
        tracing::debug!(
            kernel = self.job.info.kernel(),
            "the drain waits: the launch is enqueued behind a closed gate and its call returns"
        );
        Some((d, own_non_blocking))
    }

    /// Opens a deferred launch's gate (first offering the word its call's exit left for
    /// other streams' work); `start`/`end` are kept to give back at the window's end.
    fn open_deferred(&mut self, d: Deferred) {
        if let Some((window, addr, value)) = self.job.hand.first_gate_opening() {
            self.ctx.window_gate.offer(window, addr, value);
        }
        d.gate.open();
        self.deferred_events = Some((d.start, d.end));
    }

    /// A window that declines before pass 1 after the launch was deferred: the launch, on its
    /// stream since its call, runs now as the ordinary run. `false`: it was not deferred.
    fn run_deferred_as_ordinary(&mut self) -> bool {
        let Some(d) = self.deferred.take() else {
            return false;
        };
        self.original = Original::Ordinary;
        self.open_deferred(d);
        true
    }

    /// The target is a later member of another launch's window's run now: dropped without
    /// its release (that window panicked), it releases itself.
    pub(super) fn make_rider(&mut self) {
        self.rider = true;
        // A member of a counter run: its launch gets the run's next range.
        let Some(run) = &self.run_counters else {
            return;
        };
        if let Some((session, next)) = run.lock().as_mut() {
            self.counters = Some(Counting {
                session: session.clone(),
                range: *next,
            });
            *next += 1;
        }
    }

    pub(super) fn settings(&self) -> &crate::engine::settings::Settings {
        &self.be.settings
    }

    pub(super) fn drv(&self) -> &Driver {
        &self.be.drv
    }

    /// The private stream, created on first use. A new one waits for the work still running
    /// on the streams given up before it ([`poison_stream`](Self::poison_stream)): a rerun
    /// after a stuck restore must not run before the late copies, which would overwrite its
    /// result.
    pub(super) fn stream(&self) -> Option<CUstream> {
        let current = self.ctx.private.lock().stream;
        if current != 0 {
            return Some(current as CUstream);
        }
        {
            // Late work that ended goes back to the pool; the rest stays listed (a later
            // stream must wait for it too) and this one waits for each. Only the window that
            // holds the context (or its launching thread) creates the stream; the pool's lock
            // is taken after the registry settled (settling gives events back to it).
            let late = self
                .ctx
                .stuck
                .pending(&LateEvents::new(self.drv(), self.ctx));
            let mut p = self.ctx.private.lock();
            if p.stream != 0 {
                return Some(p.stream as CUstream);
            }
            let mut s: CUstream = std::ptr::null_mut();
            // SAFETY: a plain out-parameter; the context is current on this thread.
            let r = unsafe { (self.drv().stream_create)(&mut s, CU_STREAM_NON_BLOCKING) };
            if r != CUDA_SUCCESS || s.is_null() {
                tracing::warn!(status = %error_name(self.drv(), r), "cannot create the replay stream");
                return None;
            }
            for &ev in late.iter() {
                // SAFETY: our new stream and our recorded event, held listed (not given back
                // to the pool, so not reused) until `late` is dropped, after these waits.
                let r = unsafe { (self.drv().stream_wait_event)(s, ev as CUevent, 0) };
                if r != CUDA_SUCCESS {
                    // The new stream is left unused (the backend never destroys streams).
                    tracing::warn!(
                        "the replay stream cannot wait for late work of ours: no replay work \
                         runs in this context until a new one can"
                    );
                    return None;
                }
            }
            p.stream = s as usize;
            Some(s)
        }
    }

    /// Gives up the private stream after work on it outlived its deadline (it may still run);
    /// remembers it, so an asynchronous window's gate can open behind that work, and records
    /// an event behind that work, which the next private stream waits for.
    pub(super) fn poison_stream(&mut self) {
        let old = self.ctx.private.lock().stream;
        if old == 0 {
            return;
        }
        self.late_stream = old;
        let marker = record_marker(self.be, self.ctx, old as CUstream);
        if marker != 0 {
            self.ctx.stuck.add(0, marker, 0);
        } else {
            tracing::warn!(
                "no event could be recorded behind late work of ours: later replay work in \
                 this context may run before it"
            );
        }
        self.ctx.private.lock().stream = 0;
    }

    pub(super) fn take_event(&self, timing: bool) -> Option<usize> {
        take_event(self.be, self.ctx, timing)
    }

    /// After a drain ran out of time on `stream`'s work: records an event of ours behind it,
    /// which the context's next drains query instead of waiting again
    /// ([`StuckDrain`](crate::engine::agent::StuckDrain)). The stream must be alive: the
    /// launch's own or the legacy stream, or one still listed (held under the stream list's
    /// lock here, so it is not destroyed meanwhile).
    fn remember_stuck(&self, stream: usize) {
        if stream == CU_STREAM_PER_THREAD {
            // The application thread's per-thread stream: this thread cannot name it.
            return;
        }
        let listed = self.ctx.streams.lock();
        let own = self.job.launch.app_stream() as usize;
        if stream != 0 && stream != own && !listed.contains(&stream) {
            return;
        }
        let Some(ev) = self.take_event(false) else {
            return;
        };
        // SAFETY: our event; a live stream of the context (above).
        let r = unsafe { (self.drv().event_record)(ev as CUevent, stream as CUstream) };
        drop(listed);
        if r != CUDA_SUCCESS {
            give_event(self.ctx, ev, false);
            return;
        }
        tracing::warn!(
            stream,
            "a stream of the context did not drain within the drain deadline: its later \
             windows decline at once until that work is done"
        );
        self.remember_stuck_marker(StuckMarker::own(ev));
    }

    /// Waits (copy deadline) for the restore queued last, if no pass behind it was collected
    /// yet: a copy, diff or fingerprint that follows may rewrite the copy kernel's table.
    fn settle_restore(&mut self) -> Result<(), CopyError> {
        // The last one is behind the others on the stream.
        let Some(&ev) = self.pending_restores.back() else {
            return Ok(());
        };
        match self.wait(ev, self.copy_deadline()) {
            Poll::Done => {
                for ev in std::mem::take(&mut self.pending_restores) {
                    give_event(self.ctx, ev, false);
                }
                self.queued_transfers.clear();
                Ok(())
            }
            Poll::Failed(r) => {
                tracing::warn!(status = %error_name(self.drv(), r), "a queued restore failed");
                compare::forget_copy_table(self.ctx);
                for ev in std::mem::take(&mut self.pending_restores) {
                    give_event(self.ctx, ev, false);
                }
                self.queued_transfers.clear();
                Err(CopyError::Failed)
            }
            // Still in flight: their events stay ours, never reused.
            Poll::TimedOut => Err(CopyError::Stuck),
        }
    }

    /// Gives back the events of queued restores that completed (after a pass behind the
    /// oldest completed), oldest first; the rest stay pending.
    fn settle_restores_done(&mut self) {
        while let Some(&ev) = self.pending_restores.front() {
            // SAFETY: our recorded event.
            if unsafe { (self.drv().event_query)(ev as CUevent) } != CUDA_SUCCESS {
                break;
            }
            self.pending_restores.pop_front();
            give_event(self.ctx, ev, false);
        }
        if self.pending_restores.is_empty() {
            self.queued_transfers.clear();
        }
    }

    /// The deadline of a wait for a copy, fingerprint or compare of the window's own
    /// (`ROCPROF_REPLAY_COPY_TIMEOUT_MS`). While a deferred launch's gate is still closed, at
    /// most `ROCPROF_REPLAY_YIELD_MS`: the application's calls after its deferred launch may
    /// hold the driver until that gate opens — a copy from pageable memory on the launch's
    /// stream does, and the window's own copies then do not complete (an H100, driver 580:
    /// `docs/performance.md`, "Deferring every launch") — so such a copy gives way (the
    /// dispatch runs once, `copy_timeout`) instead of holding the application for the whole
    /// copy deadline.
    pub(super) fn copy_deadline(&self) -> Instant {
        let mut limit = self.settings().copy;
        if self.deferred.is_some() {
            limit = limit.min(self.settings().yield_after);
        }
        Instant::now() + limit
    }

    /// Waits for an event of ours.
    pub(super) fn wait(&self, ev: usize, deadline: Instant) -> Poll {
        // SAFETY: our recorded event.
        poll(deadline, || unsafe {
            (self.drv().event_query)(ev as CUevent)
        })
    }

    pub(super) fn elapsed(&self, start: usize, end: usize) -> Option<Duration> {
        let mut ms = 0f32;
        // SAFETY: two completed events of ours, both recorded with timing.
        let r = unsafe { (self.drv().event_elapsed)(&mut ms, start as CUevent, end as CUevent) };
        (r == CUDA_SUCCESS && ms.is_finite() && ms >= 0.0)
            .then(|| Duration::from_nanos((f64::from(ms) * 1e6) as u64))
    }

    /// Whether the application's stream `stream` was created non-blocking (`false` for the
    /// default streams, or when the driver cannot say). Asked only while the application
    /// thread waits inside the launch call on that stream.
    fn non_blocking(&self, stream: u64) -> bool {
        let special = [0, CU_STREAM_LEGACY as u64, CU_STREAM_PER_THREAD as u64];
        let Some(get) = self
            .drv()
            .stream_get_flags
            .filter(|_| !special.contains(&stream))
        else {
            return false;
        };
        let mut flags: std::ffi::c_uint = 0;
        // SAFETY: the application's stream, alive while its thread waits inside the launch call
        // (before the release); an out-parameter.
        let r = unsafe { get(stream as CUstream, &mut flags) };
        r == CUDA_SUCCESS && flags & CU_STREAM_NON_BLOCKING != 0
    }

    /// Waits (bounded by the pass deadline) until the application thread has made its launch
    /// call, so the context is never handed on while the original launch is still to come.
    pub(super) fn settle_original(&mut self) -> Option<CUresult> {
        if !matches!(self.original, Original::Pass | Original::Ordinary) {
            return None;
        }
        let r = self
            .job
            .hand
            .wait_launched(Instant::now() + self.settings().pass);
        if r.is_none() {
            tracing::warn!(
                "the application's launch call outlived the pass deadline; the replay window \
                 ends without it"
            );
        }
        r
    }

    /// A completed pass's time: its kernel's own, from the kernel record of launch `record`
    /// ([`kernel_clock`](super::super::kernel_clock)), else its events'.
    fn pass_time(&self, record: Option<u32>, start: usize, end: usize) -> Option<Duration> {
        if let Some(id) = record {
            let t = crate::engine::phases::timed(crate::engine::phases::Phase::PassRecord, || {
                self.be.clock.kernel_time(id)
            });
            if t.is_some() {
                return t;
            }
        }
        if start == 0 {
            return None;
        }
        self.elapsed(start, end)
    }

    /// Relaunches and waits; returns the pass result.
    pub(super) fn relaunch_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        self.submit_relaunch(timed)?;
        self.collect_relaunch()
    }

    /// Relaunches on the private stream, behind everything of the window before it, and
    /// leaves it [`queued`](Self::queued) for [`collect_relaunch`](Self::collect_relaunch).
    pub(super) fn submit_relaunch(&mut self, timed: bool) -> Result<(), PassError> {
        let submitting = crate::engine::phases::enabled().then(Instant::now);
        let submit_failed = PassError::NotSubmitted(DeclineReason::SubmitFailed);
        if !self.queued.is_empty() && !self.queues_ahead() {
            return Err(submit_failed);
        }
        let stream = self.stream().ok_or(submit_failed)?;
        // A timed pass wants its kernel record: the relaunch's enter callback names it. Kernel
        // records are on until `timing` is dropped, after the record was taken.
        let timing = timed.then(|| self.be.clock.timing()).flatten();
        let clocked = timing.is_some();
        // A pass timed by events: two timing events. Any other (untimed, or timed by its
        // kernel record, which has no fallback: a pass whose record does not come has no
        // time): one plain event to wait for.
        let by_events = timed && !clocked;
        let (start, end) = if by_events {
            let (Some(start), Some(end)) = (self.take_event(true), self.take_event(true)) else {
                return Err(submit_failed);
            };
            (start, end)
        } else {
            (0, self.take_event(false).ok_or(submit_failed)?)
        };
        let drv = *self.drv();
        // Kernel-only timing from the events: start event, kernel and end event wait behind a
        // gate that opens once all three are enqueued. (A kernel record times the kernel
        // itself, from its front end's submission: no gate.)
        let go = by_events
            .then(|| self.job.gates.as_ref().and_then(Gate::take))
            .flatten()
            .filter(|g| g.hold(&drv, stream) == CUDA_SUCCESS);
        if start != 0 {
            // SAFETY: our events and stream.
            unsafe { (drv.event_record)(start as CUevent, stream) };
        }
        if clocked {
            super::super::kernel_clock::arm();
        }
        // SAFETY: the launch's arguments are alive: the application thread is inside the
        // launch call, or they are the window's own copy.
        let r = unsafe { self.job.launch.relaunch(&drv, stream) };
        let record = super::super::kernel_clock::disarm().filter(|_| clocked);
        if r != CUDA_SUCCESS {
            drop(go);
            tracing::warn!(status = %error_name(&drv, r), "a replay pass could not be launched");
            give_event(self.ctx, start, true);
            give_event(self.ctx, end, by_events);
            return Err(submit_failed);
        }
        // SAFETY: our events and stream.
        unsafe { (drv.event_record)(end as CUevent, stream) };
        drop(go);
        if let Some(t) = submitting {
            crate::engine::phases::add(crate::engine::phases::Phase::PassSubmit, t.elapsed());
        }
        // In flight until collected: a window that ends without collecting it leaves it late.
        self.last = Last::Relaunch(end);
        self.queued.push_back(Queued {
            start,
            end,
            record,
            timed,
            _timing: timing,
        });
        Ok(())
    }

    /// Waits for the relaunch [`submit_relaunch`](Self::submit_relaunch) queued (pass
    /// deadline) and gives its time.
    pub(super) fn collect_relaunch(&mut self) -> Result<Option<Duration>, PassError> {
        let Some(queued) = self.queued.pop_front() else {
            return Err(PassError::NotSubmitted(DeclineReason::SubmitFailed));
        };
        let Queued {
            start,
            end,
            record,
            timed,
            _timing,
        } = queued;
        let drv = *self.drv();
        let deadline = Instant::now() + self.settings().pass;
        let waited = crate::engine::phases::timed(crate::engine::phases::Phase::PassWait, || {
            self.wait(end, deadline)
        });
        match waited {
            Poll::Done => {
                // Passes queued behind it may still be restoring and running.
                self.dirty = !self.queued.is_empty();
                self.settle_restores_done();
                let t = timed.then(|| self.pass_time(record, start, end)).flatten();
                give_event(self.ctx, start, true);
                // Timing events come in pairs: a start event says which kind the end is.
                give_event(self.ctx, end, start != 0);
                self.last = Last::Relaunch(self.queued.back().map_or(0, |q| q.end));
                Ok(t)
            }
            Poll::Failed(r) => {
                tracing::error!(status = %error_name(&drv, r), "a replay pass failed on the device");
                self.dirty = false;
                self.last = Last::Relaunch(0);
                Err(PassError::Late)
            }
            Poll::TimedOut => {
                // Still running: its events stay alive, the stream is given up.
                self.last = Last::Relaunch(end);
                if !self.pending_restores.is_empty() {
                    // A restore queued ahead of it may not have read the copy table yet.
                    compare::give_up_copy_table(self.ctx);
                }
                self.poison_stream();
                Err(PassError::Late)
            }
        }
    }

    /// Ends the window's use of the launch after the engine returned (or panicked).
    pub(super) fn finish(&mut self) {
        if self.original == Original::Held && !self.run_deferred_as_ordinary() {
            self.original = Original::Ordinary;
            self.job.hand.release(Release::Ordinary {
                reader: self.window.is_none(),
            });
        }
        let returned = if self.window.is_some() {
            let r = self.settle_original();
            self.let_go();
            r.is_some()
        } else {
            self.job.hand.wait_launched(Instant::now()).is_some()
        };
        // A deferred launch that ran as the ordinary run: its events, once its call recorded
        // the end one (else they stay out of the pool).
        if returned && let Some((start, end)) = self.deferred_events.take() {
            give_event(self.ctx, start, true);
            give_event(self.ctx, end, true);
        }
    }
}

impl DeviceMemory for CudaTarget<'_> {
    /// Snapshots in device memory are compared by our compare kernel on the private stream,
    /// the others on the host ([`compare`]); a context where the kernel cannot be loaded
    /// answers [`DiffError::Unsupported`]: the engine restores everything.
    fn diff(
        &mut self,
        regions: &[Transfer],
        on_device: &[bool],
        granule: usize,
    ) -> Result<DirtyRanges, DiffError> {
        self.settle_restore().map_err(DiffError::from)?;
        compare::diff(self, regions, on_device, granule)
    }

    /// The fingerprint kernel on the private stream ([`compare::fingerprint`]); a context
    /// without it answers [`DiffError::Unsupported`]: the window captures everything.
    fn fingerprint(
        &mut self,
        regions: &[(usize, usize)],
        granule: usize,
    ) -> Result<Vec<u64>, DiffError> {
        self.settle_restore().map_err(DiffError::from)?;
        compare::fingerprint(self, regions, granule)
    }

    fn restore_pending(&mut self) -> bool {
        // SAFETY: our recorded event.
        self.pending_restores
            .front()
            .is_some_and(|&ev| unsafe { (self.drv().event_query)(ev as CUevent) } != CUDA_SUCCESS)
    }

    /// While the next pass is a relaunch on the private stream behind the restore (no
    /// counters: a counter pass's set-up happens on the host).
    fn queue_restores(&mut self, on: bool) -> bool {
        self.queue_restores = on && self.splits_passes();
        self.queue_restores
    }

    /// A diff that succeeded compared every device snapshot with the compare kernel (without
    /// it the diff is [`DiffError::Unsupported`]).
    fn diffs_on_device(&self) -> bool {
        true
    }

    /// The host compare's read-backs: process memory (the arena may be device memory).
    fn alloc_scratch(&mut self, size: usize) -> Option<Staging> {
        Staging::heap(size)
    }

    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        let mem = ArenaMemory { drv: &self.be.drv };
        self.ctx.arena.lock().carve(&mem, size)
    }

    /// One arena chunk for the plan, reused while plans fit it (and the L2 flush's scratch,
    /// when the dispatch's counter passes want one: one chunk for both, kept across windows).
    fn reserve_staging(&mut self, bytes: usize) {
        let mem = ArenaMemory { drv: &self.be.drv };
        let scratch = match self.l2 {
            super::l2::L2Flush::Wanted(n) => n,
            _ => 0,
        };
        self.ctx
            .arena
            .lock()
            .prepare(&mem, bytes.saturating_add(scratch));
    }

    /// One batch on the private stream, one event, one bounded wait: the transfers shorter
    /// than [`COPY_KERNEL_MAX`](compare::COPY_KERNEL_MAX) whose staging is in the arena's
    /// device memory as one launch of the copy kernel (when there are two or more and the
    /// kernel is loaded), the others as one `cuMemcpyAsync` each.
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
        if transfers.is_empty() {
            return Ok(());
        }
        let queue = direction == Direction::Restore && self.queue_restores;
        // The same restore as the one queued last (passes queued ahead): the same table, the
        // same choices.
        let again = queue
            && self.queued_transfers == transfers
            && self.queued_by_kernel.len() == transfers.len();
        if !again {
            // Another batch may rewrite the copy kernel's table: the queued restores first.
            self.settle_restore()?;
        }
        let stream = self.stream().ok_or(CopyError::Failed)?;
        let ev = self.take_event(false).ok_or(CopyError::Failed)?;
        if direction == Direction::Restore {
            self.dirty = true;
        }
        let drv = *self.drv();
        let ends = |t: &Transfer| match direction {
            Direction::Capture => (t.staging, t.device),
            Direction::Restore => (t.device, t.staging),
        };
        // Small copies between the application's device memory and staging in the arena's
        // VRAM: allocations of the context and module variables, which its kernels reach. Not
        // virtual-memory mappings: one may be mapped without access for this device (a
        // kernel touching it would fault and lose the context; a copy only fails).
        let by_kernel: Vec<bool> = if again {
            std::mem::take(&mut self.queued_by_kernel)
        } else {
            let arena = self.ctx.arena.lock();
            let inventory = &self.be.inventory;
            transfers
                .iter()
                .map(|t| {
                    t.len < compare::COPY_KERNEL_MAX
                        && arena.is_device(t.staging)
                        && inventory.origin_of(t.device)
                            != Some(crate::engine::inventory::Origin::VmemMapping)
                })
                .collect()
        };
        let small: Vec<(usize, usize, usize)> = transfers
            .iter()
            .zip(&by_kernel)
            .filter(|(_, k)| **k)
            .map(|(t, _)| {
                let (dst, src) = ends(t);
                (dst, src, t.len)
            })
            .collect();
        let kernel = small.len() >= 2 && compare::submit_copies(self, stream, &small);
        let mut failed = false;
        for (t, _) in transfers
            .iter()
            .zip(&by_kernel)
            .filter(|(_, k)| !(kernel && **k))
        {
            let (dst, src) = ends(t);
            // SAFETY: `device` is a pinned region of the context (or a module variable) and
            // `staging` a buffer of ours of at least `len` bytes, both reachable by the device.
            let r = unsafe {
                (drv.memcpy_async)(dst as CUdeviceptr, src as CUdeviceptr, t.len, stream)
            };
            if r != CUDA_SUCCESS {
                tracing::warn!(status = %error_name(&drv, r), len = t.len, "a snapshot copy could not be submitted");
                failed = true;
                break;
            }
        }
        // SAFETY: our event and stream.
        let r = unsafe { (drv.event_record)(ev as CUevent, stream) };
        if r == CUDA_SUCCESS && !failed && queue {
            // Queued: the next pass behind it on the stream waits for it.
            self.pending_restores.push_back(ev);
            if !again {
                self.queued_transfers = transfers.to_vec();
            }
            self.queued_by_kernel = by_kernel;
            return Ok(());
        }
        let deadline = self.copy_deadline();
        let outcome = if r == CUDA_SUCCESS {
            self.wait(ev, deadline)
        } else {
            // SAFETY: our stream.
            poll(deadline, || unsafe { (drv.stream_query)(stream) })
        };
        match outcome {
            Poll::Done => {
                give_event(self.ctx, ev, false);
                if failed {
                    Err(CopyError::Failed)
                } else {
                    Ok(())
                }
            }
            Poll::Failed(r) => {
                tracing::warn!(status = %error_name(&drv, r), "snapshot copies failed");
                compare::forget_copy_table(self.ctx);
                give_event(self.ctx, ev, false);
                Err(CopyError::Failed)
            }
            Poll::TimedOut => {
                if kernel {
                    compare::give_up_copy_table(self.ctx);
                }
                self.poison_stream();
                Err(CopyError::Stuck)
            }
        }
    }
}

impl CudaTarget<'_> {
    /// Runs `call` (CUPTI's profiler) on the application thread while it waits in one of the
    /// backend's callbacks ([`Mailbox::on_app_thread`]), or here when it does not take it
    /// within 50 ms (a counter run's: within `ROCPROF_REPLAY_YIELD_MS`, as its thread runs
    /// its own code between calls); `Err` when it took it and did not finish within the pass
    /// deadline, or panicked (what it was given is lost: the dispatch has no counters).
    pub(super) fn profiler_call<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = mpsc::sync_channel(1);
        let request: Request = Box::new(move || {
            let _ = tx.send(call());
        });
        let deadline = self.be.settings.pass;
        let grace = if self.job.held {
            self.be.settings.yield_after
        } else {
            Duration::from_millis(50)
        };
        match self.job.hand.mail.on_app_thread(request, grace, deadline) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "a profiler call on the application thread did not finish within {deadline:?}"
                ));
            }
            Err(request) => request(),
        }
        rx.try_recv()
            .map_err(|_| "a profiler call panicked".to_string())
    }
}

impl CudaTarget<'_> {
    /// A held launch's window ends with a pass still running ([`Job::held`]: no gate on the
    /// application's stream): the stream waits for it, made to by the application thread,
    /// whose calls are held until then (a per-thread default stream is that thread's own).
    fn order_held_stream_after(&self, wait: usize) {
        let (drv, stream) = (*self.drv(), self.job.launch.app_stream() as usize);
        let request: Request = Box::new(move || {
            // SAFETY: our event; the application's stream, on the application's thread.
            let r = unsafe { (drv.stream_wait_event)(stream as CUstream, wait as CUevent, 0) };
            if r != CUDA_SUCCESS {
                tracing::error!(
                    status = %error_name(&drv, r),
                    "the application's stream could not be ordered after a late replay pass"
                );
            }
        });
        let lock = self.be.settings.lock;
        if !matches!(
            self.job.hand.mail.on_app_thread(request, lock, lock),
            Ok(true)
        ) {
            tracing::error!(
                "the application's stream could not be ordered after a late replay pass: its \
                 thread made no call within the lock deadline"
            );
        }
    }

    /// CUPTI's values of counter pass `pass` (none before the last).
    fn cupti_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let Some(c) = self.counters.clone() else {
            return Err("the dispatch's counters were not prepared".into());
        };
        let values = self.profiler_call(move || c.session.lock().values_of(pass, c.range));
        if values.is_err() {
            self.counters = None;
        }
        values?
    }

    /// Runs `call` on the dispatch's session on the application thread; a call that does not
    /// come back loses the dispatch's counters (the session may still be in CUPTI's hands).
    fn with_session(
        &mut self,
        call: impl FnOnce(&mut crate::cuda::profiler::Session, u32) + Send + 'static,
    ) {
        let Some(c) = self.counters.clone() else {
            return;
        };
        if let Err(why) = self.profiler_call(move || call(&mut c.session.lock(), c.range)) {
            tracing::warn!("hardware counters of this dispatch: {why}");
            self.counters = None;
        }
    }
}

/// The L2's size of the current context's device (`None`: the driver does not say).
fn l2_bytes(drv: &Driver) -> Option<usize> {
    let get = drv.device_get_attribute?;
    let mut dev: CUdevice = 0;
    let mut v: std::ffi::c_int = 0;
    // SAFETY: plain out-parameters; the launch's context is current on this thread, and `dev`
    // is the driver's own device handle.
    let ok = unsafe {
        (drv.ctx_get_device)(&mut dev) == CUDA_SUCCESS
            && get(
                &mut v,
                crate::cuda::api::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                dev,
            ) == CUDA_SUCCESS
    };
    ok.then(|| usize::try_from(v).ok()).flatten()
}

impl super::l2::FlushMemory for CudaTarget<'_> {
    fn carve(&mut self, bytes: usize) -> Option<Staging> {
        self.alloc_staging(bytes)
    }

    fn read(&mut self, addr: usize, len: usize) -> Result<(), super::l2::ReadFailure> {
        // The compare kernel over the scratch against itself: plain loads, which take L2 lines
        // as the kernels' own do (the fingerprint kernel's streaming loads would be evicted
        // first and leave the L2 as it was), and one flag byte per 64 KiB written back.
        let whole = Transfer {
            device: addr,
            staging: addr,
            len,
        };
        self.diff(&[whole], &[true], 64 << 10)
            .map(drop)
            .map_err(|e| match e {
                DiffError::Unsupported => super::l2::ReadFailure::Unsupported,
                DiffError::Failed => super::l2::ReadFailure::Failed,
                DiffError::Stuck => super::l2::ReadFailure::InFlight,
            })
    }
}

impl ReplayTarget for CudaTarget<'_> {
    /// Launch metrics ([`crate::cuda::launch_metrics`]) are computed here, before the window
    /// (the context is current on this thread); CUPTI is prepared only for the rest of the
    /// set. A launch metric that cannot be computed leaves the dispatch without metrics.
    fn prepare_counters(&mut self, set: &crate::counters::MetricSet) -> Result<(), String> {
        self.launch_values = None;
        let last = set.pass_count().saturating_sub(1);
        let computed: Vec<&str> = set
            .pass(last)
            .map(|m| m.counter.name.as_str())
            .filter(|n| set.is_computed(n))
            .collect();
        if !computed.is_empty() {
            let l = &self.job.launch;
            let shape = crate::cuda::launch_metrics::Shape {
                grid: l.grid,
                block: l.block,
                dynamic_shared: l.shared,
                function: self.job.function,
            };
            let mut values =
                crate::cuda::launch_metrics::values(self.drv(), &shape, &computed)?.into_iter();
            let merged = set
                .pass(last)
                .map(|m| {
                    set.is_computed(&m.counter.name)
                        .then(|| values.next().map(f64::to_bits))
                        .flatten()
                })
                .collect();
            self.launch_values = Some(LaunchValues {
                last,
                merged,
                counted: set.has_counters(),
            });
            if !set.has_counters() {
                return Ok(());
            }
        }
        if self.candidate {
            // A candidate for a counter run: measured in a range of the first member's
            // session, given when it joins (`make_rider`).
            let run = self.run_counters.as_ref().and_then(|r| {
                r.lock().as_ref().map(|(s, next)| {
                    let s = s.lock();
                    (*next < s.capacity(), s.flushes_l2())
                })
            });
            return match run {
                Some((true, flush)) => {
                    self.l2 = super::l2::L2Flush::wanted(flush, l2_bytes(self.drv()));
                    Ok(())
                }
                Some((false, _)) => Err("the run's counter passes measure no more launches".into()),
                None => {
                    Err("the run's first launch is measured alone in its counter passes".into())
                }
            };
        }
        // Several launches per counter pass where the call returns after pass 1 and later
        // launches may join (`Job::held`).
        let ranges = if self.job.held {
            crate::cuda::profiler::ranges_per_pass()
        } else {
            1
        };
        let (ctx, agent, set) = (self.ctx.handle, self.job.info.agent_index, set.clone());
        let prepared =
            self.profiler_call(move || crate::cuda::profiler::prepare(ctx, agent, &set, ranges))??;
        self.l2 = super::l2::L2Flush::wanted(prepared.flushes_l2(), l2_bytes(self.drv()));
        let session = Arc::new(Mutex::new(prepared));
        if ranges > 1
            && let Some(run) = &self.run_counters
        {
            *run.lock() = Some((session.clone(), 1));
        }
        self.counters = Some(Counting { session, range: 0 });
        Ok(())
    }

    /// One launch per user range: the first member's arming starts the pass and opens range
    /// 0; a later member's closes the open range, flushes the L2 and opens its own; its end
    /// closes it; the first member's end stops the pass.
    fn arm_counters(&mut self, pass: Option<u32>) {
        let Some(range) = self.counters.as_ref().map(|c| c.range) else {
            return;
        };
        let Some(pass) = pass else {
            self.with_session(|s, range| {
                if range == 0 {
                    s.arm(None);
                } else {
                    s.pop_range();
                }
            });
            return;
        };
        if range > 0 {
            // The range before this launch's closes before the flush (none of it counted).
            let open = self
                .counters
                .as_ref()
                .and_then(|c| c.session.try_lock().map(|s| s.in_range()))
                .unwrap_or(true);
            if open {
                self.with_session(|s, _| s.pop_range());
            }
        }
        // The pass starts from an L2 holding none of the kernel's data.
        let mut l2 = std::mem::replace(&mut self.l2, super::l2::L2Flush::Off);
        l2.before_counter_pass(self);
        self.l2 = l2;
        self.with_session(move |s, range| {
            if range == 0 {
                s.arm(Some(pass));
            } else {
                s.push_range(range);
            }
        });
    }

    /// A launch whose window collects counters and may take later launches into its run
    /// ([`Job::held`]) measures as many per counter pass as CUPTI's session is configured for.
    fn counter_ranges(&self) -> u32 {
        if self.job.held {
            crate::cuda::profiler::ranges_per_pass()
        } else {
            1
        }
    }

    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let Some(launch) = &self.launch_values else {
            return self.cupti_values(pass);
        };
        let (last, counted) = (launch.last, launch.counted);
        let counted = if counted {
            self.cupti_values(pass)?
        } else {
            Vec::new()
        };
        let Some(launch) = self.launch_values.as_ref().filter(|_| pass == last) else {
            return Ok(counted);
        };
        let mut cupti = counted.into_iter();
        let merged: Option<Vec<u64>> = launch
            .merged
            .iter()
            .map(|v| v.or_else(|| cupti.next()))
            .collect();
        match merged {
            Some(v) if cupti.next().is_none() => Ok(v),
            _ => Err("CUPTI returned a different number of values than the set has".into()),
        }
    }

    fn unrestorable_memory_exists(&self) -> bool {
        unrestorable_memory_exists(self.be, self.ctx)
    }

    fn stored_pointers(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, DeclineReason> {
        crate::engine::gate::reach(
            &Reach {
                be: self.be,
                ctx: self.ctx,
            },
            words,
        )
    }

    fn argument_bytes(&self) -> Option<Vec<u8>> {
        // SAFETY: as for `refusal`: the launch's arguments live with the job.
        unsafe { self.job.launch.argument_bytes(self.job.params.as_deref()) }
    }

    /// Pinned and registered host memory the arguments point into: read (by the host, at
    /// the same address) while the application has not seen the launch complete, so it does
    /// not free it (`cuMemFreeHost` waits for the device, which waits behind the window).
    fn host_watch(&mut self) -> Vec<(usize, usize)> {
        // SAFETY: as for `refusal`.
        unsafe { host_watch(self.be, &self.job.launch, self.job.params.as_deref()) }
    }

    fn refusal(&self) -> Option<DeclineReason> {
        // SAFETY: the launch's arguments: the application is still inside its call (the window
        // has not released it yet), and a copy lives with the job.
        unsafe {
            refusal(
                self.be,
                self.ctx,
                &self.job.launch,
                self.job.params.as_deref(),
            )
        }
    }

    fn begin(&mut self) -> Result<(), DeclineReason> {
        // The marker behind the application's earlier work is only waited for by a drain.
        let unused_marker = |t: &Self| {
            if t.job.before != 0 {
                give_event(t.ctx, t.job.before, false);
            }
        };
        if !self.job.hand.claim() {
            // The application thread stopped waiting for this window: its launch ran without
            // replay, ordered behind the window it waited for.
            unused_marker(self);
            return Err(DeclineReason::LockContention);
        }
        let lane = Some(self.job.lane);
        match self.ctx.lock.write_for_on(self.settings().lock, lane) {
            Some(guard) => {
                self.window = Some(guard);
                let window = self.ctx.window_gate.hold();
                self.job.hand.soon(window);
                Ok(())
            }
            None => {
                unused_marker(self);
                Err(DeclineReason::LockTimeout)
            }
        }
    }

    fn drain(&mut self) -> Result<(), DeclineReason> {
        let d = Draining {
            limits: DrainLimits::new(self.settings().drain, self.settings().yield_after),
            asked: std::cell::Cell::new(false),
            deferred: std::cell::RefCell::new(None),
            own_non_blocking: std::cell::Cell::new(None),
        };
        let r = self.drain_with(&d);
        self.deferred = d.deferred.into_inner();
        // The markers were waited for (or one was kept as stuck work's event).
        if let Some(deferred) = &mut self.deferred {
            for (_, ev) in deferred.markers.drain(..) {
                give_event(self.ctx, ev, false);
            }
        }
        self.own_non_blocking = d.own_non_blocking.get();
        r
    }

    fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason> {
        if self.be.globals.unreadable() > 0 {
            warn_once(&UNREADABLE, || {
                tracing::warn!(
                    modules = self.be.globals.unreadable(),
                    "a loaded module's image could not be read: its __device__ variables are \
                     unknown, so kernels are not replayed while it is loaded"
                )
            });
            return Err(DeclineReason::SymbolsUnavailable);
        }
        let mut vars: Vec<(usize, usize)> = Vec::new();
        // Managed ones are the host's to write: launches given them decline (the gate).
        for g in self
            .ctx
            .requested_globals
            .lock()
            .iter()
            .filter(|g| !g.managed)
        {
            if !vars.contains(&(g.addr, g.size)) {
                vars.push((g.addr, g.size));
            }
        }
        if self.be.globals.any() {
            let Some(module) = self.job.module else {
                warn_once(&NO_MODULE, || {
                    tracing::warn!(
                        "the module of a launched kernel cannot be found: its __device__ \
                         variables cannot be snapshotted, so it is not replayed"
                    )
                });
                return Err(DeclineReason::SymbolsUnavailable);
            };
            for v in module_globals(self.be, self.ctx, module)? {
                if !vars.contains(&v) {
                    vars.push(v);
                }
            }
        }
        Ok(vars)
    }

    /// After the application's own launch ran as pass 1, a pass is a relaunch on the
    /// context's private stream: runs queue them there one behind the other.
    fn splits_passes(&self) -> bool {
        self.original != Original::Held && self.counters.is_none()
    }

    fn submit_pass(&mut self, timed: bool) -> Result<(), PassError> {
        self.submit_relaunch(timed)
    }

    fn collect_pass(&mut self) -> Result<Option<Duration>, PassError> {
        self.collect_relaunch()
    }

    fn await_pass(&mut self) {
        if let Some(q) = self.queued.back() {
            let end = q.end;
            let deadline = Instant::now() + self.settings().pass;
            self.wait(end, deadline);
        }
    }

    fn queues_ahead(&self) -> bool {
        self.splits_passes()
    }

    fn abandon_pass(&mut self) {
        if let Some(q) = self.queued.pop_front() {
            // Behind a pass still running: its events stay alive and the application's later
            // work on its stream waits for its end.
            self.last = Last::Relaunch(q.end);
            self.wait_event = q.end;
        }
    }

    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        if self.original != Original::Held {
            return self.relaunch_pass(timed);
        }
        let submit_failed = PassError::NotSubmitted(DeclineReason::SubmitFailed);
        // A deferred launch is on its stream behind a closed gate, between its events.
        let deferred = self.deferred.take();
        let (start, end) = match &deferred {
            Some(d) => (d.start, d.end),
            None => match (self.take_event(true), self.take_event(true)) {
                (Some(start), Some(end)) => (start, end),
                (start, end) => {
                    for ev in [start, end].into_iter().flatten() {
                        give_event(self.ctx, ev, true);
                    }
                    return Err(submit_failed);
                }
            },
        };
        self.original = Original::Pass;
        let submitting = crate::engine::phases::enabled().then(Instant::now);
        // A timed pass wants its kernel record, asked for before the driver has the launch
        // (kernel records on until `timing` is dropped, after the record was taken); a
        // deferred launch is in the driver already: its events time it.
        let timing = (timed && deferred.is_none())
            .then(|| self.be.clock.timing())
            .flatten();
        let record = timing.as_ref().map(|_| self.job.correlation);
        if let Some(id) = record {
            self.be
                .clock
                .want_only_kernel(id, self.ctx.handle as CUcontext);
        }
        let own_non_blocking = match deferred {
            Some(d) => {
                // Pass 1 starts: the launch's gate opens.
                self.open_deferred(d);
                // Both events belong to the pass now.
                self.deferred_events = None;
                self.own_non_blocking.unwrap_or(false)
            }
            None => {
                // Asked while the application thread still waits inside its launch call: the
                // stream is alive.
                let own = self.non_blocking(self.job.launch.app_stream() as u64);
                self.job.hand.release(Release::Pass { start, end });
                own
            }
        };
        let deadline = Instant::now() + self.settings().pass;
        let Some(status) = self.job.hand.wait_launched(deadline) else {
            // The launch call itself has not returned: the pass may still run.
            self.last = Last::Original;
            return Err(PassError::Late);
        };
        if let Some(t) = submitting {
            crate::engine::phases::add(crate::engine::phases::Phase::PassSubmit, t.elapsed());
        }
        if status != CUDA_SUCCESS {
            // Nothing ran; the application has the launch's error, as without the tool.
            self.original = Original::Failed;
            give_event(self.ctx, start, true);
            give_event(self.ctx, end, true);
            return Err(submit_failed);
        }
        self.last = Last::Original;
        self.original_end = Some(end);
        // The application's own execution: where work this window holds up on another stream
        // (or a call that may load the module of a kernel about to be launched) has waited
        // past the yield deadline, the kernel may be waiting for it. So may it wait for what
        // the launching thread does after its call, when the call itself waits for this
        // window (a synchronous one).
        let yield_after = self.settings().yield_after;
        let own = self.job.lane;
        let launched = Instant::now();
        let waited = crate::engine::phases::timed(crate::engine::phases::Phase::PassWait, || {
            poll_unless(
                deadline,
                // SAFETY: our recorded event.
                || unsafe { (self.drv().event_query)(end as CUevent) },
                || {
                    self.ctx
                        .lock
                        .held_up(yield_after, |lane| may_release(own, own_non_blocking, lane))
                        || BEHIND.loads_waiting_for(yield_after)
                        || (launched.elapsed() >= yield_after && self.job.hand.call_waits())
                },
            )
        });
        let Some(waited) = waited else {
            // It may wait for the very work held up: the context's next drains decline at
            // once while it runs, rather than each waiting the drain deadline for it.
            self.original_end = None;
            give_event(self.ctx, start, true);
            self.remember_stuck_marker(StuckMarker::own(end));
            return Err(PassError::Yielded);
        };
        if !matches!(waited, Poll::TimedOut) {
            // A later launch of this thread no longer leaves this window behind.
            self.job.hand.set_first_pass_over();
        }
        match waited {
            Poll::Done => {
                self.original_end = None;
                let t = self.pass_time(record, start, end).filter(|_| timed);
                give_event(self.ctx, start, true);
                give_event(self.ctx, end, true);
                Ok(t)
            }
            Poll::Failed(r) => {
                tracing::error!(status = %error_name(self.drv(), r), "the launch failed on the device");
                Err(PassError::Late)
            }
            Poll::TimedOut => Err(PassError::Late),
        }
    }

    fn run_once(&mut self) -> bool {
        match self.original {
            Original::Held => {
                if self.run_deferred_as_ordinary() {
                    return true;
                }
                self.original = Original::Ordinary;
                self.job.hand.release(Release::Ordinary {
                    reader: self.window.is_none(),
                });
                true
            }
            // The application already has its launch's error.
            Original::Failed => true,
            Original::Pass | Original::Ordinary => {
                // The original launch ran as pass 1 and memory was restored since: only a
                // relaunch gives the application its result.
                for attempt in 0..3 {
                    match self.relaunch_pass(false) {
                        Ok(_) => return true,
                        // A relaunch never yields (only the original launch does).
                        Err(PassError::Late | PassError::Yielded) => {
                            if let Last::Relaunch(ev) = self.last
                                && ev != 0
                            {
                                self.wait_event = ev;
                            }
                            return true;
                        }
                        Err(PassError::NotSubmitted(_)) if attempt < 2 => {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(PassError::NotSubmitted(_)) => {}
                    }
                }
                tracing::error!(
                    kernel = self.job.info.kernel(),
                    dispatch = %self.job.info.dispatch_id,
                    "the final run of a replayed launch could not be launched: device memory \
                     holds the state before the launch"
                );
                false
            }
        }
    }

    fn complete(&mut self) {}

    fn settle_late_pass(&mut self) -> bool {
        let deadline = Instant::now() + self.settings().late_pass;
        match self.last {
            Last::Original => {
                // The application's own launch: its call may not even have returned yet.
                if self.job.hand.wait_launched(deadline).is_none() {
                    return false;
                }
                let Some(end) = self.original_end else {
                    return false;
                };
                // An error means it is no longer running (the context reports it from now on).
                !matches!(self.wait(end, deadline), Poll::TimedOut)
            }
            Last::Relaunch(end) if end != 0 => match self.wait(end, deadline) {
                Poll::Done | Poll::Failed(_) => true,
                Poll::TimedOut => {
                    // Still running: the application's later work on its stream waits for it.
                    self.wait_event = end;
                    false
                }
            },
            _ => true,
        }
    }

    fn contended(&self) -> bool {
        self.ctx.lock.contended() || BEHIND.loads_waiting_long()
    }

    /// The window is over: its launch's release if it never had one, then its gate (after
    /// the late work of the window's own stream, if any) opens the application's stream.
    fn released(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        self.finish();
        let (wait, late) = (self.wait_event, self.late_stream);
        if self.job.held && wait != 0 {
            self.order_held_stream_after(wait);
        }
        if let Some(gate) = self.job.hand.set_done(wait) {
            // The application's later work on its stream waits behind this gate.
            if wait != 0 && late != 0 {
                let _g = crate::cuda::Guard::new();
                gate.open_after(&self.be.drv, late as CUstream);
            } else {
                gate.open();
            }
        }
    }

    fn end(&mut self) {
        self.settle_original();
        // The L2 scratch back to the arena (its reads have completed).
        self.l2 = super::l2::L2Flush::Off;
        // Trimmed once the window's gates are open (`run_job`): freeing may synchronise the
        // context, and the application's stream may still wait behind a gate of this window.
        self.ctx.arena.lock().end_window();
        self.let_go();
    }
}

impl CudaTarget<'_> {
    /// The drain ([`ReplayTarget::drain`]): waits for the work of the context's streams, of
    /// streams destroyed since the last drain and of other contexts that may reach its
    /// memory. While it waits, after [`defer_after`](crate::engine::settings::Settings) it
    /// defers the launch ([`try_defer`](Self::try_defer)), and from then on waits for the
    /// marker in front of the launch's gate instead of the launch's stream. Work held up by
    /// the window (at the host, or the application thread inside its launch call) on a lane
    /// other than the one waited for, past the yield deadline, makes it give way: the work
    /// waited for may be waiting for that work (`lock_contention`).
    fn drain_with(&self, d: &Draining) -> Result<(), DeclineReason> {
        let deadline = d.limits.deadline();
        let drv = *self.drv();
        // Work an earlier drain waited the whole deadline for, still running: this drain would
        // wait for it too. Decline at once.
        let stuck = self.ctx.stuck_drain.still_pending(
            |m| {
                // Another context's event is queried only while that context is listed (as
                // in the drain below): destroyed, its work is gone.
                let contexts = m.owner.map(|_| self.be.contexts.read());
                if let (Some(owner), Some(c)) = (m.owner, &contexts)
                    && !c.contains_key(&owner)
                {
                    return false;
                }
                // SAFETY: our event, recorded behind that work, of a live context.
                unsafe { (drv.event_query)(m.event as CUevent) == CUDA_ERROR_NOT_READY }
            },
            |m| self.release_stuck_marker(m),
        );
        if stuck {
            tracing::debug!(
                "work an earlier drain of this context timed out on is still running: declined \
                 without waiting again"
            );
            return Err(DeclineReason::DrainTimeout);
        }
        // Called between the polls of work on `on` (`None`: not one stream's): defers the
        // launch once, and says whether to give way.
        let defer = || {
            if !d.asked.get() && d.limits.started.elapsed() >= self.settings().defer_after {
                d.asked.set(true);
                if let Some((deferred, non_blocking)) = self.try_defer() {
                    d.own_non_blocking.set(Some(non_blocking));
                    *d.deferred.borrow_mut() = Some(deferred);
                }
            }
        };
        // 0: every launch that can be deferred is, before the drain looks at anything (its
        // call never waits for the drain or the capture).
        if self.settings().defer_after.is_zero() {
            defer();
        }
        let stop = |on: Option<u64>| -> bool {
            defer();
            // Deferred, the launch itself waits behind the window's gate (its call returned):
            // work drained on another stream may be waiting for it (a kernel spinning on a
            // flag this very launch sets), as it may for the thread inside its call.
            if d.limits
                .give_way(|| d.is_deferred() && on != Some(self.job.lane))
            {
                return true;
            }
            // Work the window holds up (the agent lock's readers) that has waited past the
            // yield deadline, from whenever it began to wait.
            self.ctx
                .lock
                .held_up(d.limits.yield_after, |lane| on.is_none() || lane != on)
        };
        let gave_way = || {
            DrainWait::GaveWay.declined(&format!(
                "earlier work of the context (kernel {}, dispatch {})",
                self.job.info.kernel(),
                self.job.info.dispatch_id
            ))
        };
        let own = self.job.launch.app_stream() as usize;
        if self.job.before != 0 {
            let waited = poll_unless(
                deadline,
                // SAFETY: our event.
                || unsafe { (drv.event_query)(self.job.before as CUevent) },
                || stop(Some(self.job.lane)),
            );
            match waited {
                None => return gave_way(),
                Some(Poll::TimedOut) => {
                    self.remember_stuck(own);
                    return Err(DeclineReason::DrainTimeout);
                }
                Some(Poll::Done | Poll::Failed(_)) => give_event(self.ctx, self.job.before, false),
            }
        }
        let mut streams = self.ctx.streams.lock().clone();
        // The legacy default stream, and the launch's own: alive, as the application is inside
        // the launch call (until the launch is deferred: from then on the marker in front of
        // its gate stands for its stream).
        let mut always = vec![0];
        if own != CU_STREAM_PER_THREAD && own != CU_STREAM_LEGACY {
            always.push(own);
        }
        streams.extend_from_slice(&always);
        streams.sort_unstable();
        streams.dedup();
        // The launch's own stream, as the drain lists it (the legacy stream is listed as 0).
        let own_listed = if own == CU_STREAM_LEGACY { 0 } else { own };
        for s in streams {
            let stream = s as CUstream;
            let lane = if s == own_listed {
                self.job.lane
            } else {
                crate::cuda::fencing::lane(s)
            };
            // Another thread may destroy a listed stream meanwhile: each query holds the
            // context's stream list, and a stream no longer listed is not touched (work
            // still pending on it left an event in `retired`, waited for below).
            let query = || {
                if d.is_deferred() {
                    // Work enqueued since may wait behind the window's gates: the marker
                    // recorded then stands for the stream (which may be gone by now).
                    return Ok(match d.marker_for(s) {
                        // SAFETY: our event.
                        Some(ev) => unsafe { (drv.event_query)(ev as CUevent) },
                        None => CUDA_SUCCESS,
                    });
                }
                let listed = self.ctx.streams.lock();
                if !always.contains(&s) && !listed.contains(&s) {
                    return Ok(CUDA_SUCCESS);
                }
                let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
                // SAFETY: a live stream of the context (see above).
                let r = unsafe { (drv.stream_is_capturing)(stream, &mut status) };
                if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
                    // Capturing streams execute nothing; querying them would break the capture.
                    return Err(());
                }
                // SAFETY: as above.
                Ok(unsafe { (drv.stream_query)(stream) })
            };
            match poll_unless(
                deadline,
                || query().unwrap_or(CUDA_SUCCESS),
                || stop(Some(lane)),
            ) {
                None => {
                    // Deferred: the stream's marker is kept as stuck work, so the next
                    // windows do not wait for that work again while it still runs.
                    if d.is_deferred() {
                        self.remember_marker(d, s);
                    }
                    return gave_way();
                }
                Some(Poll::Done) => {}
                Some(Poll::Failed(r)) => {
                    tracing::debug!(stream = s, status = %error_name(&drv, r), "stream not drained")
                }
                Some(Poll::TimedOut) => {
                    if d.is_deferred() {
                        self.remember_marker(d, s);
                    } else {
                        self.remember_stuck(s);
                    }
                    return Err(DeclineReason::DrainTimeout);
                }
            }
        }
        // Work left on streams destroyed since the last drain (not those destroyed after the
        // launch was deferred: their work is behind this window's gates).
        let retired = {
            let mut list = self.ctx.retired.lock();
            let upto = d
                .deferred
                .borrow()
                .as_ref()
                .map_or(list.len(), |x| x.retired)
                .min(list.len());
            list.drain(..upto).collect::<Vec<_>>()
        };
        for (i, &ev) in retired.iter().enumerate() {
            match poll_unless(
                deadline,
                // SAFETY: our event.
                || unsafe { (drv.event_query)(ev as CUevent) },
                || stop(None),
            ) {
                Some(Poll::Done | Poll::Failed(_)) => give_event(self.ctx, ev, false),
                waited => {
                    // Timed out, the event is remembered as the stuck drain's: the next
                    // drains decline at once while its work runs, instead of each waiting the
                    // drain deadline for it again.
                    let timed_out = waited.is_some();
                    let from = if timed_out { i + 1 } else { i };
                    let rest: Vec<usize> = retired[from..].to_vec();
                    self.ctx.retired.lock().splice(0..0, rest);
                    if !timed_out {
                        return gave_way();
                    }
                    tracing::warn!(
                        "work left on a stream the application destroyed did not finish within \
                         the drain deadline: the context's later windows decline at once until \
                         it is done"
                    );
                    self.remember_stuck_marker(StuckMarker::own(ev));
                    return Err(DeclineReason::DrainTimeout);
                }
            }
        }
        // Work of other contexts that may reach this context's memory (their copies, fills
        // and kernels given its allocations hold this context's reader side while they are
        // submitted, and leave an event behind them here, or were waited for then).
        if self.ctx.undrainable.any() {
            tracing::debug!(
                "work of another context that no drain can wait for may reach this context's \
                 memory"
            );
            return Err(DeclineReason::QueueNotDrainable);
        }
        let foreign = std::mem::take(&mut *self.ctx.foreign.lock());
        for (i, &(ev, owner)) in foreign.iter().enumerate() {
            // Taken out of the list, these events are not purged when their context is
            // destroyed: each query holds the context map's read lock, under which a context
            // that is still listed is not destroyed (its destroy callback removes it first,
            // and the driver destroys it after the callback).
            let query = || {
                let contexts = self.be.contexts.read();
                if !contexts.contains_key(&owner) {
                    // Destroyed, and with it the work behind the event.
                    return CUDA_SUCCESS;
                }
                // SAFETY: an event of ours, of a context still alive (above).
                unsafe { (drv.event_query)(ev as CUevent) }
            };
            match poll_unless(deadline, query, || stop(None)) {
                Some(Poll::Done) => {
                    if let Some(c) = self.be.contexts.read().get(&owner) {
                        give_event(c, ev, false);
                    }
                }
                Some(Poll::Failed(r)) => {
                    tracing::debug!(status = %error_name(&drv, r), "an event behind another context's work could not be queried");
                }
                waited => {
                    // Timed out, the event is remembered as the stuck drain's (see above).
                    let timed_out = waited.is_some();
                    let from = if timed_out { i + 1 } else { i };
                    self.ctx.foreign.lock().extend_from_slice(&foreign[from..]);
                    if !timed_out {
                        return gave_way();
                    }
                    tracing::warn!(
                        context = owner,
                        "work of another context that may write this context's memory did \
                         not finish within the drain deadline: this context's later windows \
                         decline at once until it is done"
                    );
                    self.remember_stuck_marker(StuckMarker {
                        event: ev,
                        owner: Some(owner),
                    });
                    return Err(DeclineReason::DrainTimeout);
                }
            }
        }
        Ok(())
    }

    /// Remembers `m` as the context's stuck drain, releasing the marker it replaces.
    fn remember_stuck_marker(&self, m: StuckMarker) {
        if let Some(old) = self.ctx.stuck_drain.remember(m) {
            self.release_stuck_marker(old);
        }
    }

    /// Gives a stuck drain's event back to its context's pool (another context's only while
    /// that context is listed: destroyed, it took its events along).
    fn release_stuck_marker(&self, m: StuckMarker) {
        match m.owner {
            None => give_event(self.ctx, m.event, false),
            Some(owner) => {
                if let Some(c) = self.be.contexts.read().get(&owner) {
                    give_event(c, m.event, false);
                }
            }
        }
    }

    /// [`remember_stuck`](Self::remember_stuck) once the launch was deferred: the marker
    /// recorded on stream `key` then is behind the stuck work (and the stream may be gone),
    /// so that marker is what the next drains query (it is not given back with the others).
    fn remember_marker(&self, d: &Draining, key: usize) {
        let marker = d.deferred.borrow_mut().as_mut().and_then(|x| {
            let at = x.markers.iter().position(|(k, _)| *k == key)?;
            Some(x.markers.swap_remove(at).1)
        });
        let Some(marker) = marker else {
            return;
        };
        tracing::warn!(
            stream = key,
            "a stream of the context did not drain (drain deadline, or a deferred launch's \
             yield deadline): its later windows decline at once until that work is done"
        );
        self.remember_stuck_marker(StuckMarker::own(marker));
    }

    /// Lets go of the context's writer. Before that, and before the window's gate opens,
    /// nothing more is ordered behind the gate, and the work that was is no longer listed as
    /// waiting for the window.
    fn let_go(&mut self) {
        if self.window.is_some() {
            self.ctx.window_gate.retire();
            self.ctx.lock.window_gate_opening();
            self.window = None;
        }
    }
}

pub(super) static NO_MODULE: std::sync::Once = std::sync::Once::new();

pub(super) static NO_PARAM_INFO: std::sync::Once = std::sync::Once::new();

pub(super) static UNREADABLE: std::sync::Once = std::sync::Once::new();

/// The writable variables of `module`, resolving names learned since the last look.
pub(super) fn module_globals(
    be: &Backend,
    ctx: &Ctx,
    module: usize,
) -> Result<Vec<(usize, usize)>, DeclineReason> {
    let mut modules = ctx.modules.lock();
    let entry = modules.entry(module).or_default();
    let (names, total) = be.globals.since(entry.tried);
    for name in names {
        let (mut addr, mut size): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: plain out-parameters; a name of another module is simply not found.
        let r = unsafe {
            (be.drv.module_get_global)(&mut addr, &mut size, module as CUmodule, name.as_ptr())
        };
        if r == CUDA_SUCCESS && addr != 0 && size != 0 {
            if be.is_managed(addr as usize) {
                entry.managed = true;
                ctx.managed_modules
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            } else {
                entry.vars.push((addr as usize, size));
            }
        }
    }
    entry.tried = total;
    if entry.managed {
        // Its kernels may write a `__managed__` variable by name, which the host reads and
        // writes directly at any time: neither repeated nor restored, the launch runs once.
        tracing::debug!(
            module,
            "the launched kernel's module has __managed__ variables: the launch runs once"
        );
        return Err(DeclineReason::HostMemory);
    }
    Ok(entry.vars.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slack() -> i32 {
        // SAFETY: reads the calling thread's timer slack.
        unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) }
    }

    #[test]
    fn a_long_poll_sleeps_with_a_fine_timer_slack_and_puts_the_thread_s_back() {
        let before = slack();
        assert!(
            before > 1000,
            "a thread starts with the default slack ({before} ns)"
        );
        let mut seen = Vec::new();
        let until = Instant::now() + Duration::from_millis(5);
        let polled = poll(Instant::now() + Duration::from_secs(5), || {
            seen.push(slack());
            if Instant::now() >= until {
                CUDA_SUCCESS
            } else {
                CUDA_ERROR_NOT_READY
            }
        });
        assert_eq!(polled, Poll::Done);
        assert_eq!(
            seen.first(),
            Some(&before),
            "spinning leaves the slack alone"
        );
        assert_eq!(seen.last(), Some(&1000), "the sleeps run with a 1 µs slack");
        assert_eq!(slack(), before, "the thread's slack is put back");
    }

    #[test]
    fn a_poll_ends_at_its_deadline_or_on_an_error() {
        let deadline = Instant::now() + Duration::from_millis(3);
        assert_eq!(poll(deadline, || CUDA_ERROR_NOT_READY), Poll::TimedOut);
        assert!(Instant::now() >= deadline);
        let mut calls = 0;
        let failed = poll(deadline + Duration::from_secs(5), || {
            calls += 1;
            if calls < 3 {
                CUDA_ERROR_NOT_READY
            } else {
                CUDA_ERROR_ILLEGAL_ADDRESS
            }
        });
        assert_eq!(failed, Poll::Failed(CUDA_ERROR_ILLEGAL_ADDRESS));
    }
}
