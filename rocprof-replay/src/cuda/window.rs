//! The replay window on CUDA: the launch callbacks, the companion thread that runs the engine,
//! and [`CudaTarget`], the engine's handle on one intercepted launch.
//!
//! The application thread hands each launch to its companion thread at API enter and waits
//! for one of two answers: *release as pass 1* (the window has drained the context and
//! captured the memory: the original launch is the first pass) or *release as the ordinary
//! run* (the policy skipped it, or the window declined before any pass). Either way the
//! original launch is enqueued exactly once, by the driver, after the enter callback returns.
//!
//! **Asynchronous window** (the usual case): the arguments were copied at enter
//! ([`params`](super::params)), so the relaunches do not need the application's call to last.
//! Pass 1's start event waits behind a gate ([`gate`](super::gate)) that opens at exit, once
//! the launch and its end event are enqueued (kernel-only timing); at exit a second gate goes
//! on the application's stream after the end event, and the call returns. The companion
//! thread waits for pass 1's end event, restores and relaunches on the backend's private
//! stream (each relaunch bracketed the same way), and opens the second gate when the window is
//! over: the application's later work on its stream sees one completion, on final memory.
//! **Synchronous window** (arguments that cannot be copied, no stream memory operations, a
//! stream that began capturing): the exit callback waits until the window is over, and the
//! launch's own arguments stay valid throughout because the application is still inside the
//! call.
//!
//! Every wait of the companion thread has a deadline (drain, copy, pass, lock); the application
//! thread waits for the companion thread (at enter until the release, in a synchronous window
//! also at exit), which is bounded by those deadlines plus the policy's own callbacks.

use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLockWriteGuard};
use rocprof_replay_sys::cuda::*;

use super::api::{Driver, error_name};
use super::gate::{BEHIND, Gate, GatePage};
use super::params::{self, Launch, OwnedArgs};
use super::{Backend, Ctx, GUARD, Guard, KernelFacts, LaunchApi, WindowRun, warn_once};
use crate::dispatch::{AgentId, DispatchId, DispatchInfo, QueueId, Runtime};
use crate::engine::arena;
use crate::engine::gate;
use crate::engine::snapshot::{
    CopyError, DeviceMemory, DiffError, Direction, DirtyRanges, Staging, Transfer,
};
use crate::engine::window::{Ordinary, PassError, ReplayTarget};
use crate::policy::{DeclineReason, FailureReason, Outcome, OutcomeKind};

/// What the application thread is told to do with its launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// The launch is pass 1: record `start` before it and `end` after it on its stream.
    Pass { start: usize, end: usize },
    /// The launch is the ordinary run; `reader`: take the context's reader lock around it
    /// (no window holds the context).
    Ordinary { reader: bool },
}

#[derive(Default)]
struct HandoffState {
    release: Option<Release>,
    launched: Option<CUresult>,
    done: bool,
    /// An event the application's stream must wait for before its later work.
    wait_event: usize,
    /// The gate on the application's stream behind an asynchronous window's pass 1, opened
    /// when the window is over.
    gate: Option<Gate>,
    /// Work the window asks the application thread to do while it waits in the launch's
    /// callbacks ([`Handoff::on_app_thread`]), and how many such requests it has run.
    request: Option<Request>,
    served: u64,
}

/// Work for the application thread (CUPTI's profiler calls).
type Request = Box<dyn FnOnce() + Send>;

/// The meeting point of a launch's callbacks and its window.
#[derive(Default)]
pub(crate) struct Handoff {
    state: Mutex<HandoffState>,
    changed: Condvar,
}

impl Handoff {
    fn release(&self, r: Release) {
        self.state.lock().release = Some(r);
        self.changed.notify_all();
    }

    fn set_launched(&self, r: CUresult) {
        self.state.lock().launched = Some(r);
        self.changed.notify_all();
    }

    /// The window is over: returns the gate the application's stream waits behind, if any.
    fn set_done(&self, wait_event: usize) -> Option<Gate> {
        let mut s = self.state.lock();
        s.done = true;
        s.wait_event = wait_event;
        let gate = s.gate.take();
        drop(s);
        self.changed.notify_all();
        gate
    }

    /// The launch's status, with the gate now on the application's stream (an asynchronous
    /// window). Gives the gate back when the window is already over: the caller opens it.
    fn set_launched_behind(&self, r: CUresult, gate: Gate) -> Option<Gate> {
        let mut s = self.state.lock();
        s.launched = Some(r);
        let back = if s.done {
            Some(gate)
        } else {
            s.gate = Some(gate);
            None
        };
        drop(s);
        self.changed.notify_all();
        back
    }

    fn is_done(&self) -> bool {
        self.state.lock().done
    }

    /// The release, or `None` when the window ended without one (an internal error).
    fn wait_release(&self) -> Option<Release> {
        let mut s = self.state.lock();
        loop {
            if self.serve(&mut s) {
                continue;
            }
            if let Some(r) = s.release {
                return Some(r);
            }
            if s.done {
                return None;
            }
            self.changed.wait_for(&mut s, Duration::from_secs(1));
        }
    }

    /// Runs the window's request, if one is waiting (on the application thread, the state
    /// unlocked meanwhile); `true` if it ran one.
    fn serve(&self, s: &mut parking_lot::MutexGuard<'_, HandoffState>) -> bool {
        let Some(request) = s.request.take() else {
            return false;
        };
        parking_lot::MutexGuard::unlocked(s, || {
            let _g = Guard::new();
            // A panic stays here: the window sees its request served without a result (it
            // lost what it handed over, and says so).
            let _ = catch_unwind(AssertUnwindSafe(request));
        });
        s.served += 1;
        self.changed.notify_all();
        true
    }

    /// Has `request` run on the application thread, which is waiting in the launch's
    /// callbacks (for the release, or in a synchronous window for its end) and serves it
    /// there. CUPTI's range profiler calls never return when made on another thread while the
    /// application thread waits inside a launch callback (seen on the H200, CUDA 13.0).
    /// Gives the request back when the application thread did not take it within `grace`
    /// (it is between the callbacks, in the driver's own enqueueing, or the window is
    /// asynchronous); waits for a taken one to finish until `deadline` (`Ok(false)`: it did
    /// not).
    fn on_app_thread(
        &self,
        request: Request,
        grace: Duration,
        deadline: Duration,
    ) -> Result<bool, Request> {
        let start = Instant::now();
        let mut s = self.state.lock();
        let before = s.served;
        s.request = Some(request);
        self.changed.notify_all();
        while s.request.is_some() {
            if self.changed.wait_until(&mut s, start + grace).timed_out() {
                if let Some(r) = s.request.take() {
                    return Err(r);
                }
            }
        }
        while s.served == before {
            if self
                .changed
                .wait_until(&mut s, start + deadline)
                .timed_out()
            {
                return Ok(s.served != before);
            }
        }
        Ok(true)
    }

    /// The launch's status, or `None` at `deadline`.
    fn wait_launched(&self, deadline: Instant) -> Option<CUresult> {
        let mut s = self.state.lock();
        loop {
            if let Some(r) = s.launched {
                return Some(r);
            }
            if self.changed.wait_until(&mut s, deadline).timed_out() {
                return s.launched;
            }
        }
    }

    /// Waits until the window is over; returns its wait event.
    fn wait_done(&self) -> usize {
        let mut s = self.state.lock();
        while !s.done {
            if self.serve(&mut s) {
                continue;
            }
            self.changed.wait_for(&mut s, Duration::from_secs(1));
        }
        s.wait_event
    }
}

/// What the exit callback needs (passed through CUPTI's per-call word).
struct Pending {
    /// The meeting point with the window (`None`: the launch never entered one).
    hand: Option<Arc<Handoff>>,
    ctx: Arc<Ctx>,
    stream: CUstream,
    release: Release,
    /// The gate in front of pass 1's start event (kernel-only timing), opened at exit.
    go: Option<Gate>,
    /// The arguments were copied and gates are available: the call returns before the
    /// window ends.
    asynchronous: Option<Arc<GatePage>>,
}

/// A launch handed to a companion thread.
struct Job {
    be: &'static Backend,
    ctx: Arc<Ctx>,
    info: DispatchInfo,
    launch: Launch,
    /// The kernel's module (`None`: unknown).
    module: Option<usize>,
    /// Offset and size of each parameter (`None`: unknown).
    params: Option<Arc<[(usize, usize)]>>,
    hand: Arc<Handoff>,
    /// Recorded by the application thread on its per-thread default stream (0: none).
    before: usize,
    /// The copy of the arguments `launch` points into (`None`: `launch` points at the
    /// application's own, alive only while its call waits for the window).
    _owned: Option<OwnedArgs>,
    /// The context's gate page (`None`: no gates; passes are timed from an idle stream).
    gates: Option<Arc<GatePage>>,
    /// The decided window (taken by the companion thread when it runs it).
    window: Option<WindowRun>,
    /// Counts the job in [`BEHIND`] until it is dropped.
    _behind: super::gate::Ticket,
}

/// The launch as the decision sees it, on the launching thread: the gate's verdict, and the
/// ordinary run, which is the driver's own enqueueing once the enter callback returns.
struct FirstLook<'a> {
    be: &'a Backend,
    ctx: &'a Ctx,
    launch: &'a Launch,
    params: Option<&'a [(usize, usize)]>,
}

impl Ordinary for FirstLook<'_> {
    fn refusal(&self) -> Option<DeclineReason> {
        // SAFETY: the application is inside this launch call.
        unsafe { refusal(self.be, self.ctx, self.launch, self.params) }
    }
    fn run_once(&mut self) -> bool {
        true
    }
}

/// Why the backend knows a launch must not be replayed ([`ReplayTarget::refusal`]).
///
/// # Safety
/// The launch's arguments are alive.
unsafe fn refusal(
    be: &Backend,
    ctx: &Ctx,
    launch: &Launch,
    params: Option<&[(usize, usize)]>,
) -> Option<DeclineReason> {
    if ctx
        .waiting_streams
        .lock()
        .contains(&(launch.stream as usize))
    {
        return Some(DeclineReason::StreamMemoryWait);
    }
    let host = be.host_memory.read();
    if host.is_empty() {
        return None;
    }
    // SAFETY: caller contract.
    match unsafe { launch.argument_bytes(params) } {
        Some(bytes) if !gate::points_into(&bytes, &host) => None,
        Some(_) => Some(DeclineReason::HostMemory),
        None => {
            warn_once(&NO_PARAM_INFO, || {
                tracing::warn!(
                    "a kernel's parameters cannot be inspected (no cuFuncGetParamInfo, or an \
                     unknown handle) while pinned host memory exists: it is not replayed, \
                     as it may write that memory"
                )
            });
            Some(DeclineReason::HostMemory)
        }
    }
}

// SAFETY: the raw pointers of `launch` are the application's arguments, valid while the
// application thread waits inside the launch call, or point into `owned`; handles are plain
// driver handles.
unsafe impl Send for Job {}

thread_local! {
    static COMPANION: RefCell<Option<mpsc::Sender<Job>>> = const { RefCell::new(None) };
}

fn spawn_companion() -> Option<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("rocprof-replay-cuda".into())
        // Policies run here: room for what a tool does in its callbacks.
        .stack_size(8 << 20)
        .spawn(move || {
            // Everything this thread calls is the backend's own.
            GUARD.with(|g| g.set(1 << 30));
            let mut relaxed = false;
            for job in rx {
                run_job(job, &mut relaxed);
            }
        });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::error!("cannot start a replay thread ({e}); launches run without replay");
            None
        }
    }
}

/// Hands `job` to this thread's companion; gives it back when there is none (no thread could
/// be started, or the thread is exiting).
fn submit(job: Job) -> Result<(), Option<Box<Job>>> {
    let mut slot = Some(job);
    let sent = COMPANION.try_with(|c| {
        let mut c = c.borrow_mut();
        for _ in 0..2 {
            if c.is_none() {
                *c = spawn_companion();
            }
            let (Some(tx), Some(job)) = (c.as_ref(), slot.take()) else {
                return false;
            };
            match tx.send(job) {
                Ok(()) => return true,
                Err(mpsc::SendError(job)) => {
                    // The companion is gone: start another one.
                    slot = Some(job);
                    *c = None;
                }
            }
        }
        false
    });
    match sent {
        Ok(true) => Ok(()),
        _ => Err(slot.map(Box::new)),
    }
}

/// The enter callback of a launch: decides pass-through or window; returns the token for the
/// exit callback (0: nothing to do there).
///
/// # Safety
/// `cb` is CUPTI's data of an enter callback of `kind`.
pub(crate) unsafe fn enter_launch(
    be: &'static Backend,
    kind: LaunchApi,
    cb: &CUpti_CallbackData,
) -> u64 {
    if cb.context.is_null() {
        return 0;
    }
    // SAFETY: caller contract.
    let Some(launch) = (unsafe { Launch::decode(kind, cb.functionParams) }) else {
        return 0;
    };
    let stream = launch.app_stream();
    let capturing = {
        let _g = Guard::new();
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the application's stream, on its own thread.
        let r = unsafe { (be.drv.stream_is_capturing)(stream, &mut status) };
        r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE
    };
    let ctx = be.ctx(cb.context as usize);
    let facts = be.kernel_facts(cb.context as usize, launch.f, cb.symbolName);
    {
        // Where no allocation prepared it (the kernel of write-set restore is never loaded
        // inside a window).
        let _g = Guard::new();
        compare::prepare_compare(be, &ctx);
    }
    let info = dispatch_info(be, &ctx, &launch, &facts);
    if capturing {
        warn_once(&CAPTURE, || {
            tracing::warn!(
                "launches into a capturing stream are not replayed: they only add a node to \
                 the graph being captured, which runs as a graph launch"
            )
        });
        crate::engine::state::report(
            &info,
            &Outcome::ordinary(OutcomeKind::Declined(DeclineReason::StreamCapture)),
        );
        return 0;
    }
    tracing::trace!(
        kernel = info.kernel(),
        dispatch = %info.dispatch_id,
        stream = launch.stream as usize,
        module = ?facts.module,
        "launch intercepted"
    );
    // The policy gets the device's counter catalog before its first decision there.
    super::profiler::discover_before_decision(info.agent_index);
    // The decision, on this thread (pass count, metrics, the gate's refusal).
    let mut first = FirstLook {
        be,
        ctx: &ctx,
        launch: &launch,
        params: facts.params.as_deref(),
    };
    let Some(window) = (be.decider)(&info, &mut first) else {
        // Skipped, or declined before the window: the driver enqueues the launch once, as
        // without the tool, outside any window.
        ctx.read_outside_window(be.settings.lock);
        let pending = Box::new(Pending {
            hand: None,
            ctx,
            stream,
            release: Release::Ordinary { reader: true },
            go: None,
            asynchronous: None,
        });
        return Box::into_raw(pending) as u64;
    };
    let before = if stream as usize == CU_STREAM_PER_THREAD {
        record_marker(be, &ctx, stream)
    } else {
        0
    };
    let gates = {
        let _g = Guard::new();
        gate_page(be, &ctx)
    };
    // An asynchronous window relaunches after this call returned: it needs its own copy of
    // the arguments.
    // A window that collects counters stays synchronous: its profiler calls run on this
    // thread while it waits in the launch's callbacks (`Handoff::on_app_thread`).
    let copied = (gates.is_some() && !window.counters)
        // SAFETY: the application is inside this launch call.
        .then(|| unsafe { params::copy(&launch, facts.params.as_deref()) });
    let (launch, owned) = match copied {
        None => (launch, None),
        Some(Ok((copied, owned))) => {
            super::wait_at_exit();
            (copied, Some(owned))
        }
        Some(Err(why)) => {
            tracing::debug!(
                kernel = info.kernel(),
                "the launch's arguments cannot be copied ({why}): its call waits for its \
                 replay window"
            );
            (launch, None)
        }
    };
    let asynchronous = owned.as_ref().and(gates.clone());
    let hand = Arc::new(Handoff::default());
    let job = Job {
        be,
        ctx: ctx.clone(),
        info,
        launch,
        module: facts.module,
        params: facts.params.clone(),
        hand: hand.clone(),
        before,
        _owned: owned,
        gates: gates.clone(),
        window: Some(window),
        _behind: BEHIND.enter(be.settings.lock),
    };
    if let Err(job) = submit(job) {
        if let Some(job) = job {
            give_event(&job.ctx, job.before, false);
        }
        warn_once(&NO_COMPANION, || {
            tracing::error!("no replay thread could be started: launches run without replay")
        });
        return 0;
    }
    let Some(release) = hand.wait_release() else {
        return 0;
    };
    let mut go = None;
    match release {
        Release::Pass { start, .. } => {
            let _g = Guard::new();
            // Kernel-only timing: the start event waits behind a gate that opens once the
            // launch is enqueued (at exit).
            go = gates.as_ref().and_then(Gate::take).and_then(|g| {
                let r = g.hold(&be.drv, stream);
                if r == CUDA_SUCCESS {
                    Some(g)
                } else {
                    tracing::debug!(status = %error_name(&be.drv, r), "no gate before pass 1: its time includes the launch");
                    None
                }
            });
            // SAFETY: our event, the application's stream, on its own thread.
            let r = unsafe { (be.drv.event_record)(start as CUevent, stream) };
            if r != CUDA_SUCCESS {
                tracing::debug!(status = %error_name(&be.drv, r), "pass 1 start event not recorded");
            }
        }
        Release::Ordinary { reader: true } => ctx.read_outside_window(be.settings.lock),
        Release::Ordinary { reader: false } => {}
    }
    let pending = Box::new(Pending {
        hand: Some(hand),
        ctx,
        stream,
        release,
        go,
        asynchronous,
    });
    Box::into_raw(pending) as u64
}

/// Whether launches may return before their window ends: yes unless `ROCPROF_REPLAY_CUDA_ASYNC`
/// is `0` (or `off`, `false`, `no`), which keeps every launch call waiting for its window (the
/// synchronous window). (Off by default until 2026-12-02: a GPT-2 step stalled with it on the
/// H200 — lazy module loading during a window, [`gate::Behind`](super::gate::Behind).)
pub(crate) fn asynchronous_windows_from_env() -> bool {
    asynchronous_windows(std::env::var("ROCPROF_REPLAY_CUDA_ASYNC").ok().as_deref())
}

/// [`asynchronous_windows_from_env`] for the setting's value.
pub(crate) fn asynchronous_windows(setting: Option<&str>) -> bool {
    !matches!(setting.map(str::trim), Some("0" | "off" | "false" | "no"))
}

/// Sets the context's gates up ahead of its first launch (after an allocation: the context is
/// current). Idempotent.
pub(crate) fn prepare_gates(be: &Backend, ctx: &Ctx) {
    // The gate page is the backend's own host memory, not the application's.
    let _g = Guard::new();
    let _ = gate_page(be, ctx);
    compare::prepare_compare(be, ctx);
}

fn gate_page(be: &Backend, ctx: &Ctx) -> Option<Arc<GatePage>> {
    ctx.gates
        .get_or_init(|| {
            if !be.asynchronous {
                tracing::debug!(
                    "asynchronous windows are off (ROCPROF_REPLAY_CUDA_ASYNC): launches wait \
                     for their replay window"
                );
                return None;
            }
            // Allocating is a call stream capture in global mode forbids on every thread:
            // this thread's mode is relaxed for it, so another thread's capture is not broken.
            let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            // SAFETY: a plain in/out parameter; the thread's mode is put back below.
            unsafe { (be.drv.exchange_capture_mode)(&mut mode) };
            let page = GatePage::new(&be.drv)
                .map(Arc::new)
                .filter(|p| GatePage::works(p, &be.drv, Duration::from_secs(2)));
            // SAFETY: as above.
            unsafe { (be.drv.exchange_capture_mode)(&mut mode) };
            if page.is_none() {
                tracing::debug!(
                    context = ctx.handle,
                    "no gates (stream memory operations) in this context: launches wait for \
                     their replay window"
                );
            }
            page
        })
        .clone()
}

/// The exit callback of a launch.
///
/// # Safety
/// `token` is what [`enter_launch`] returned for this call.
pub(crate) unsafe fn exit_launch(
    be: &'static Backend,
    _kind: LaunchApi,
    _cb: &CUpti_CallbackData,
    token: u64,
    result: CUresult,
) {
    if token == 0 {
        return;
    }
    // SAFETY: the box `enter_launch` leaked for this call, taken back once.
    let p = unsafe { Box::from_raw(token as *mut Pending) };
    let Pending {
        hand,
        ctx,
        stream,
        release,
        go,
        asynchronous,
    } = *p;
    match release {
        Release::Pass { end, .. } => {
            let _g = Guard::new();
            // SAFETY: our event, the application's stream, on its own thread.
            unsafe { (be.drv.event_record)(end as CUevent, stream) };
            // Start event, kernel and end event are enqueued: the kernel's time starts now.
            drop(go);
        }
        Release::Ordinary { reader: true } => ctx.unlock_read(),
        Release::Ordinary { reader: false } => {}
    }
    let Some(hand) = hand else {
        return;
    };
    if let Some(page) = asynchronous {
        match release {
            // The window is over already (the ordinary run needs nothing more of this call):
            // the arguments are copies, the call returns.
            Release::Ordinary { .. } => {
                hand.set_launched(result);
                return;
            }
            Release::Pass { .. } if result != CUDA_SUCCESS => {
                // Nothing was enqueued: nothing to hold the stream behind.
                hand.set_launched(result);
                return;
            }
            Release::Pass { .. } => {
                if let Some(gate) = hold_behind(be, &page, &hand, stream) {
                    if let Some(back) = hand.set_launched_behind(result, gate) {
                        back.open();
                    }
                    return;
                }
            }
        }
    }
    hand.set_launched(result);
    let wait = hand.wait_done();
    if wait != 0 {
        let _g = Guard::new();
        // SAFETY: our event; the application's stream waits for the pass still running.
        let r = unsafe { (be.drv.stream_wait_event)(stream, wait as CUevent, 0) };
        if r != CUDA_SUCCESS {
            tracing::error!(
                status = %error_name(&be.drv, r),
                "the application's stream could not be ordered after a late replay pass"
            );
        }
    }
}

/// Puts a gate on the application's stream after pass 1, for the window to open; `None`
/// when it cannot (the call then waits for the window, as a synchronous one).
fn hold_behind(
    be: &Backend,
    page: &Arc<GatePage>,
    hand: &Handoff,
    stream: CUstream,
) -> Option<Gate> {
    if hand.is_done() {
        return None;
    }
    let _g = Guard::new();
    let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the application's stream, on its own thread.
    let r = unsafe { (be.drv.stream_is_capturing)(stream, &mut status) };
    if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
        // A capture began during the call (another thread, global mode): a gate would be a
        // node of the graph.
        tracing::debug!("the launch's stream is capturing at exit: the call waits for its window");
        return None;
    }
    let Some(gate) = Gate::take(page) else {
        tracing::debug!("every gate is in use: the call waits for its window");
        return None;
    };
    let r = gate.hold(&be.drv, stream);
    if r != CUDA_SUCCESS {
        tracing::debug!(status = %error_name(&be.drv, r), "no gate after the launch: the call waits for its window");
        gate.open();
        return None;
    }
    Some(gate)
}

static CAPTURE: std::sync::Once = std::sync::Once::new();
static NO_COMPANION: std::sync::Once = std::sync::Once::new();

/// Records a plain event of ours on `stream` (the application thread's own default stream).
fn record_marker(be: &Backend, ctx: &Ctx, stream: CUstream) -> usize {
    let _g = Guard::new();
    let Some(ev) = take_event(be, ctx, false) else {
        return 0;
    };
    // SAFETY: our event, the application's stream, on its own thread.
    if unsafe { (be.drv.event_record)(ev as CUevent, stream) } == CUDA_SUCCESS {
        ev
    } else {
        give_event(ctx, ev, false);
        0
    }
}

/// An event of ours from the context's pool (or a new one; the context must be current).
fn take_event(be: &Backend, ctx: &Ctx, timing: bool) -> Option<usize> {
    {
        let mut p = ctx.private.lock();
        let pool = if timing {
            &mut p.timing_events
        } else {
            &mut p.plain_events
        };
        if let Some(e) = pool.pop() {
            return Some(e);
        }
    }
    let mut ev: CUevent = std::ptr::null_mut();
    let flags = if timing {
        CU_EVENT_DEFAULT
    } else {
        CU_EVENT_DISABLE_TIMING
    };
    let _g = Guard::new();
    // SAFETY: a plain out-parameter.
    let r = unsafe { (be.drv.event_create)(&mut ev, flags) };
    (r == CUDA_SUCCESS && !ev.is_null()).then_some(ev as usize)
}

fn give_event(ctx: &Ctx, ev: usize, timing: bool) {
    if ev == 0 {
        return;
    }
    let mut p = ctx.private.lock();
    if timing {
        p.timing_events.push(ev);
    } else {
        p.plain_events.push(ev);
    }
}

fn dispatch_info(be: &Backend, ctx: &Ctx, l: &Launch, facts: &KernelFacts) -> DispatchInfo {
    let grid = std::array::from_fn(|i| {
        u32::try_from(u64::from(l.grid[i]) * u64::from(l.block[i])).unwrap_or(u32::MAX)
    });
    DispatchInfo {
        runtime: Runtime::Cuda,
        agent: AgentId(ctx.handle as u64),
        agent_index: be.ordinal(ctx),
        queue: QueueId(l.stream as u64),
        dispatch_id: DispatchId(be.next_dispatch.fetch_add(1, Ordering::Relaxed)),
        kernel_object: l.f as u64,
        kernel_name: facts.name.clone(),
        grid,
        workgroup: l.block.map(|b| u16::try_from(b).unwrap_or(u16::MAX)),
        blocks: l.grid,
        group_segment_size: l.shared.saturating_add(facts.static_shared),
        private_segment_size: facts.local,
        context: Some(ctx.handle as u64),
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
/// `deadline` passes. Spins briefly, then yields, then sleeps in short slices.
pub(crate) fn poll(deadline: Instant, mut query: impl FnMut() -> CUresult) -> Poll {
    let mut round = 0u32;
    loop {
        match query() {
            CUDA_SUCCESS => return Poll::Done,
            CUDA_ERROR_NOT_READY => {}
            r => return Poll::Failed(r),
        }
        if Instant::now() >= deadline {
            return Poll::TimedOut;
        }
        round += 1;
        if round < 64 {
            std::hint::spin_loop();
        } else if round < 512 {
            std::thread::yield_now();
        } else {
            let us = (u64::from(round - 512) * 5).clamp(20, 1000);
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

/// Arena memory of the current context through the driver (callers hold a [`Guard`]).
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
enum Original {
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
enum Last {
    None,
    Original,
    /// A relaunch on the private stream; its end event.
    Relaunch(usize),
}

/// The engine's handle on one intercepted launch (on the companion thread).
struct CudaTarget<'a> {
    be: &'static Backend,
    ctx: &'a Ctx,
    job: &'a Job,
    window: Option<RwLockWriteGuard<'a, ()>>,
    original: Original,
    last: Last,
    wait_event: usize,
    /// Device memory may hold a partly restored state (a restore began and no pass has run
    /// since).
    dirty: bool,
    /// The end event of pass 1 (the original launch), while it may still be waited for.
    original_end: Option<usize>,
    /// Hardware counters of this dispatch (CUPTI's range profiler, `super::profiler`).
    counters: Option<super::profiler::Session>,
    /// The private stream given up with work still running on it (0: none).
    late_stream: usize,
}

impl<'a> CudaTarget<'a> {
    fn settings(&self) -> &crate::engine::settings::Settings {
        &self.be.settings
    }

    fn drv(&self) -> &Driver {
        &self.be.drv
    }

    /// The private stream, created on first use.
    fn stream(&self) -> Option<CUstream> {
        let mut p = self.ctx.private.lock();
        if p.stream == 0 {
            let mut s: CUstream = std::ptr::null_mut();
            // SAFETY: a plain out-parameter; the context is current on this thread.
            let r = unsafe { (self.drv().stream_create)(&mut s, CU_STREAM_NON_BLOCKING) };
            if r != CUDA_SUCCESS || s.is_null() {
                tracing::warn!(status = %error_name(self.drv(), r), "cannot create the replay stream");
                return None;
            }
            p.stream = s as usize;
        }
        Some(p.stream as CUstream)
    }

    /// Gives up the private stream after work on it outlived its deadline (it may still run);
    /// remembers it, so an asynchronous window's gate can open behind that work.
    fn poison_stream(&mut self) {
        let mut p = self.ctx.private.lock();
        if p.stream != 0 {
            self.late_stream = p.stream;
        }
        p.stream = 0;
    }

    fn take_event(&self, timing: bool) -> Option<usize> {
        take_event(self.be, self.ctx, timing)
    }

    /// Waits for an event of ours.
    fn wait(&self, ev: usize, deadline: Instant) -> Poll {
        // SAFETY: our recorded event.
        poll(deadline, || unsafe {
            (self.drv().event_query)(ev as CUevent)
        })
    }

    fn elapsed(&self, start: usize, end: usize) -> Option<Duration> {
        let mut ms = 0f32;
        // SAFETY: two completed events of ours, both recorded with timing.
        let r = unsafe { (self.drv().event_elapsed)(&mut ms, start as CUevent, end as CUevent) };
        (r == CUDA_SUCCESS && ms.is_finite() && ms >= 0.0)
            .then(|| Duration::from_nanos((f64::from(ms) * 1e6) as u64))
    }

    /// Waits (bounded by the pass deadline) until the application thread has made its launch
    /// call, so the context is never handed on while the original launch is still to come.
    fn settle_original(&mut self) -> Option<CUresult> {
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

    /// Relaunches and waits; returns the pass result.
    fn relaunch_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        let submit_failed = PassError::NotSubmitted(DeclineReason::SubmitFailed);
        let stream = self.stream().ok_or(submit_failed)?;
        let (Some(start), Some(end)) = (self.take_event(true), self.take_event(true)) else {
            return Err(submit_failed);
        };
        let drv = *self.drv();
        // Kernel-only timing: start event, kernel and end event wait behind a gate that opens
        // once all three are enqueued.
        let go = self
            .job
            .gates
            .as_ref()
            .and_then(Gate::take)
            .filter(|g| g.hold(&drv, stream) == CUDA_SUCCESS);
        // SAFETY: our events and stream.
        unsafe { (drv.event_record)(start as CUevent, stream) };
        // SAFETY: the launch's arguments are alive: the application thread is inside the
        // launch call, or they are the window's own copy.
        let r = unsafe { self.job.launch.relaunch(&drv, stream) };
        if r != CUDA_SUCCESS {
            drop(go);
            tracing::warn!(status = %error_name(&drv, r), "a replay pass could not be launched");
            give_event(self.ctx, start, true);
            give_event(self.ctx, end, true);
            return Err(submit_failed);
        }
        // SAFETY: our events and stream.
        unsafe { (drv.event_record)(end as CUevent, stream) };
        drop(go);
        match self.wait(end, Instant::now() + self.settings().pass) {
            Poll::Done => {
                self.dirty = false;
                self.last = Last::Relaunch(end);
                let t = self.elapsed(start, end).filter(|_| timed);
                give_event(self.ctx, start, true);
                give_event(self.ctx, end, true);
                self.last = Last::Relaunch(0);
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
                self.poison_stream();
                Err(PassError::Late)
            }
        }
    }

    /// Ends the window's use of the launch after the engine returned (or panicked).
    fn finish(&mut self) {
        if self.original == Original::Held {
            self.original = Original::Ordinary;
            self.job.hand.release(Release::Ordinary {
                reader: self.window.is_none(),
            });
        }
        if self.window.is_some() {
            self.settle_original();
            self.window = None;
        }
    }
}

#[path = "compare.rs"]
pub(crate) mod compare;

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
        compare::diff(self, regions, on_device, granule)
    }

    /// The host compare's read-backs: process memory (the arena may be device memory).
    fn alloc_scratch(&mut self, size: usize) -> Option<Staging> {
        Staging::heap(size)
    }

    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        let mem = ArenaMemory { drv: &self.be.drv };
        self.ctx.arena.lock().carve(&mem, size)
    }

    /// One batch of `cuMemcpyAsync` on the private stream, one event, one bounded wait.
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
        if transfers.is_empty() {
            return Ok(());
        }
        let stream = self.stream().ok_or(CopyError::Failed)?;
        let ev = self.take_event(false).ok_or(CopyError::Failed)?;
        if direction == Direction::Restore {
            self.dirty = true;
        }
        let drv = *self.drv();
        let mut failed = false;
        for t in transfers {
            let (dst, src) = match direction {
                Direction::Capture => (t.staging, t.device),
                Direction::Restore => (t.device, t.staging),
            };
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
        let deadline = Instant::now() + self.settings().copy;
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
                give_event(self.ctx, ev, false);
                Err(CopyError::Failed)
            }
            Poll::TimedOut => {
                self.poison_stream();
                Err(CopyError::Stuck)
            }
        }
    }
}

impl CudaTarget<'_> {
    /// Runs `call` (CUPTI's profiler) on the application thread while it waits in the launch's
    /// callbacks ([`Handoff::on_app_thread`]), or here when it does not take it within 50 ms;
    /// `Err` when it took it and did not finish within the pass deadline, or panicked (what it
    /// was given is lost: the dispatch has no counters).
    fn profiler_call<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = mpsc::sync_channel(1);
        let request: Request = Box::new(move || {
            let _ = tx.send(call());
        });
        let deadline = self.be.settings.pass;
        match self
            .job
            .hand
            .on_app_thread(request, Duration::from_millis(50), deadline)
        {
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

impl ReplayTarget for CudaTarget<'_> {
    fn prepare_counters(&mut self, set: &crate::counters::MetricSet) -> Result<(), String> {
        let (ctx, agent, set) = (self.ctx.handle, self.job.info.agent_index, set.clone());
        let prepared = self.profiler_call(move || super::profiler::prepare(ctx, agent, &set))?;
        self.counters = Some(prepared?);
        Ok(())
    }

    fn arm_counters(&mut self, pass: Option<u32>) {
        if let Some(mut c) = self.counters.take() {
            self.counters = self
                .profiler_call(move || {
                    c.arm(pass);
                    c
                })
                .ok();
        }
    }

    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let Some(mut c) = self.counters.take() else {
            return Err("the dispatch's counters were not prepared".into());
        };
        let (c, values) = self.profiler_call(move || {
            let v = c.values(pass);
            (c, v)
        })?;
        self.counters = Some(c);
        values
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
        match self.ctx.lock.try_write_for(self.settings().lock) {
            Some(guard) => {
                self.window = Some(guard);
                Ok(())
            }
            None => Err(DeclineReason::LockTimeout),
        }
    }

    fn drain(&mut self) -> Result<(), DeclineReason> {
        let deadline = Instant::now() + self.settings().drain;
        let drv = *self.drv();
        if self.job.before != 0 {
            match self.wait(self.job.before, deadline) {
                Poll::TimedOut => return Err(DeclineReason::DrainTimeout),
                Poll::Done | Poll::Failed(_) => give_event(self.ctx, self.job.before, false),
            }
        }
        let mut streams = self.ctx.streams.lock().clone();
        streams.push(0);
        let own = self.job.launch.app_stream() as usize;
        if own != CU_STREAM_PER_THREAD && own != CU_STREAM_LEGACY {
            streams.push(own);
        }
        streams.sort_unstable();
        streams.dedup();
        for s in streams {
            let stream = s as CUstream;
            let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: a stream of the context (a destroyed one answers with an error).
            let r = unsafe { (drv.stream_is_capturing)(stream, &mut status) };
            if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
                // Capturing streams execute nothing; querying them would break the capture.
                continue;
            }
            // SAFETY: as above.
            match poll(deadline, || unsafe { (drv.stream_query)(stream) }) {
                Poll::Done => {}
                Poll::Failed(r) => {
                    tracing::debug!(stream = s, status = %error_name(&drv, r), "stream not drained (gone?)")
                }
                Poll::TimedOut => return Err(DeclineReason::DrainTimeout),
            }
        }
        Ok(())
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
        for g in self.ctx.requested_globals.lock().iter() {
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
            for v in module_globals(self.be, self.ctx, module) {
                if !vars.contains(&v) {
                    vars.push(v);
                }
            }
        }
        // Size the arena for the whole snapshot now: one allocation, reused while the
        // footprint stays the same.
        let agent = AgentId(self.ctx.handle as u64);
        let bytes: usize = self
            .be
            .inventory
            .owned_by(agent)
            .iter()
            .map(|a| a.size)
            .chain(vars.iter().map(|v| v.1))
            .fold(0usize, usize::saturating_add);
        if (bytes as u64) <= self.settings().budget {
            let mem = ArenaMemory { drv: &self.be.drv };
            self.ctx.arena.lock().prepare(&mem, bytes);
        }
        Ok(vars)
    }

    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        if self.original != Original::Held {
            return self.relaunch_pass(timed);
        }
        let submit_failed = PassError::NotSubmitted(DeclineReason::SubmitFailed);
        let (Some(start), Some(end)) = (self.take_event(true), self.take_event(true)) else {
            return Err(submit_failed);
        };
        self.original = Original::Pass;
        self.job.hand.release(Release::Pass { start, end });
        let deadline = Instant::now() + self.settings().pass;
        let Some(status) = self.job.hand.wait_launched(deadline) else {
            // The launch call itself has not returned: the pass may still run.
            self.last = Last::Original;
            return Err(PassError::Late);
        };
        if status != CUDA_SUCCESS {
            // Nothing ran; the application has the launch's error, as without the tool.
            self.original = Original::Failed;
            give_event(self.ctx, start, true);
            give_event(self.ctx, end, true);
            return Err(submit_failed);
        }
        self.last = Last::Original;
        self.original_end = Some(end);
        match self.wait(end, deadline) {
            Poll::Done => {
                self.original_end = None;
                let t = self.elapsed(start, end).filter(|_| timed);
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
                        Err(PassError::Late) => {
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
        self.ctx.waiting_long.load(Ordering::Acquire) > 0 || BEHIND.loads_waiting_long()
    }

    fn end(&mut self) {
        self.settle_original();
        // Trimmed once the window's gates are open (`run_job`): freeing may synchronise the
        // context, and the application's stream may still wait behind a gate of this window.
        self.ctx.arena.lock().end_window();
        self.window = None;
    }
}

static NO_MODULE: std::sync::Once = std::sync::Once::new();
static NO_PARAM_INFO: std::sync::Once = std::sync::Once::new();
static UNREADABLE: std::sync::Once = std::sync::Once::new();

/// The writable variables of `module`, resolving names learned since the last look.
fn module_globals(be: &Backend, ctx: &Ctx, module: usize) -> Vec<(usize, usize)> {
    let mut modules = ctx.modules.lock();
    let entry = modules.entry(module).or_insert((0, Vec::new()));
    let (names, total) = be.globals.since(entry.0);
    for name in names {
        let (mut addr, mut size): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: plain out-parameters; a name of another module is simply not found.
        let r = unsafe {
            (be.drv.module_get_global)(&mut addr, &mut size, module as CUmodule, name.as_ptr())
        };
        if r == CUDA_SUCCESS && addr != 0 && size != 0 {
            entry.1.push((addr as usize, size));
        }
    }
    entry.0 = total;
    entry.1.clone()
}

/// Runs one job on the companion thread.
fn run_job(mut job: Job, relaxed: &mut bool) {
    let be = job.be;
    let Some(window) = job.window.take() else {
        job.hand.release(Release::Ordinary { reader: true });
        drop(job.hand.set_done(0));
        return;
    };
    // SAFETY: the context is alive: its launch call is in progress on the application thread.
    let r = unsafe { (be.drv.ctx_set_current)(job.ctx.handle as CUcontext) };
    if r != CUDA_SUCCESS {
        tracing::warn!(status = %error_name(&be.drv, r), "cannot make the launch's context current");
        job.hand.release(Release::Ordinary { reader: true });
        drop(job.hand.set_done(0));
        return;
    }
    if !*relaxed {
        *relaxed = true;
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a plain in/out parameter; this thread never captures.
        unsafe { (be.drv.exchange_capture_mode)(&mut mode) };
    }
    super::profiler::discover(job.info.agent_index);
    let mut target = CudaTarget {
        be,
        ctx: &job.ctx,
        job: &job,
        window: None,
        original: Original::Held,
        last: Last::None,
        wait_event: 0,
        dirty: false,
        original_end: None,
        counters: None,
        late_stream: 0,
    };
    tracing::trace!(kernel = job.info.kernel(), "window starts");
    let result = catch_unwind(AssertUnwindSafe(|| (window.run)(&mut target)));
    tracing::trace!(kernel = job.info.kernel(), original = ?target.original, "window ends");
    if result.is_err() {
        tracing::error!(
            kernel = job.info.kernel(),
            "internal error (panic) in the CUDA replay window"
        );
        if target.dirty {
            crate::engine::state::report(
                &job.info,
                &Outcome::ordinary(OutcomeKind::Failed(FailureReason::InternalError)),
            );
        }
    }
    target.finish();
    let (wait, late_stream) = (target.wait_event, target.late_stream);
    drop(target);
    if let Some(gate) = job.hand.set_done(wait) {
        // The application's later work on its stream waits behind this gate.
        if wait != 0 && late_stream != 0 {
            let _g = Guard::new();
            gate.open_after(&be.drv, late_stream as CUstream);
        } else {
            gate.open();
        }
    }
    // The job (and its ticket in BEHIND) goes last, then the arena is trimmed.
    let ctx = job.ctx.clone();
    drop(job);
    trim_arena(be, &ctx);
}

/// After a window whose gates are open: trims the context's arena (which may free memory, and
/// a free may synchronise the context) — under the context's writer lock, taken only if free
/// at once (a waiting writer would hold the application's calls off), so no window of the
/// context runs, and only when no window is in flight in the process (none has a gate
/// closed); otherwise the next window's end tries again.
fn trim_arena(be: &Backend, ctx: &Ctx) {
    let Some(_writer) = ctx.lock.try_write() else {
        return;
    };
    if BEHIND.pending() > 0 {
        return;
    }
    let _g = Guard::new();
    let mem = ArenaMemory { drv: &be.drv };
    ctx.arena.lock().trim(&mem);
}
