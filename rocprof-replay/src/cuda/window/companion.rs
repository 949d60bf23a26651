//! The companion thread of an application thread: the hand-off of a launch between its
//! callbacks and its window ([`Handoff`]), the jobs, and the thread that runs them.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rocprof_replay_sys::cuda::*;

use crate::cuda::api::error_name;
use crate::cuda::gate::{BEHIND, Gate, GatePage};
use crate::cuda::params::{Launch, OwnedArgs};
use crate::cuda::{Backend, Ctx, GUARD, Guard, Runner, WindowRun};
use crate::dispatch::DispatchInfo;
use crate::engine::window::{Joiner, Joins, ReplayTarget};
use crate::policy::{FailureReason, Outcome, OutcomeKind};

use super::*;

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
pub(super) struct HandoffState {
    pub(super) release: Option<Release>,
    pub(super) launched: Option<CUresult>,
    pub(super) done: bool,
    /// An event the application's stream must wait for before its later work.
    pub(super) wait_event: usize,
    /// The gate on the application's stream behind an asynchronous window's pass 1, opened
    /// when the window is over.
    pub(super) gate: Option<Gate>,
    /// The launch call returned without a gate and holds its thread's later calls at the
    /// host until the window is over ([`Handoff::hold_thread`]; a counter run's member).
    pub(super) holding: bool,
    /// The number the window holding the context got from its [`WindowGate`](crate::cuda::gate::WindowGate)
    /// (0: not yet), for offering its gate once it is on the application's stream.
    pub(super) window: u64,
    /// The window holds the context: the release follows within its capture's time, so the
    /// application thread polls for it instead of sleeping ([`Handoff::soon`]).
    pub(super) soon: bool,
    /// The companion thread started the job's window ([`Handoff::claim`]): the application
    /// thread waits for its release.
    pub(super) claimed: bool,
    /// The application thread stopped waiting before the window started
    /// ([`Handoff::wait_release`]'s [`Withdraw`]): its launch ran without replay, and the
    /// window declines at once.
    pub(super) withdrawn: bool,
    /// The window's first pass (the application's own execution) finished, or there is none
    /// (the launch was released as the ordinary run).
    pub(super) first_pass_over: bool,
    /// The application thread waits inside its launch call for the window's end (a
    /// synchronous window, [`Handoff::wait_done`]): a first pass waiting for what the thread
    /// does after the call cannot finish until the window lets the call return.
    pub(super) call_waits: bool,
    /// The backend's count of run-ending calls ([`Backend::breaks`]) when the launch call
    /// returned behind its gate (`None`: it has not, or not that way).
    pub(super) exit_breaks: Option<u64>,
    /// The word other streams' work is ordered behind while windows may cover runs (a gate
    /// on no stream, opened when the window is over): the gate after the launch opens early
    /// when the next launch joins the run.
    pub(super) window_word: Option<Gate>,
    /// The launch was enqueued behind a closed gate of the window while the window still
    /// drained the context ([`defer`]): its release carries events already recorded,
    /// and its call returned before the capture.
    pub(super) deferred: bool,
    /// A deferred launch's first gate opened (its pass 1 or its ordinary run may start).
    pub(super) first_gate_open: bool,
    /// The word the application's call offered for other streams' work at its exit, kept
    /// until a deferred launch's first gate opens ([`Handoff::exit_offer`]).
    pub(super) pending_offer: Option<(CUdeviceptr, u32)>,
}

/// When the application thread may stop waiting for its release: its companion thread is
/// still busy with an earlier window of the thread whose first pass has not finished (that
/// kernel may wait for what this thread does after this call), for `after`.
pub(super) struct Withdraw<'a> {
    pub(super) after: Duration,
    /// Whether the window the companion runs is one this launch may leave behind.
    pub(super) may: &'a dyn Fn() -> bool,
    /// Orders the launch behind that window on the device (`false`: it cannot be).
    pub(super) order: &'a dyn Fn() -> bool,
}

/// Work for the application thread (CUPTI's profiler calls).
pub(super) type Request = Box<dyn FnOnce() + Send>;

/// The meeting point of a launch's callbacks and its window.
#[derive(Default)]
pub(crate) struct Handoff {
    pub(super) state: Mutex<HandoffState>,
    pub(super) changed: Condvar,
    /// The launching thread's mailbox: where the window's requests for that thread go.
    pub(super) mail: Arc<Mailbox>,
}

/// An application thread's mailbox: work a window asks that thread to do (CUPTI's profiler
/// calls, which must run on it) while it waits in one of the backend's callbacks — for a
/// launch's release ([`Handoff::wait_release`]), for a synchronous window's end
/// ([`Handoff::wait_done`]), or at the entry of any later call while a counter run holds the
/// thread ([`Mailbox::wait_while_held`]). One per application thread, shared by the hand-offs
/// of its launches: a request reaches the thread wherever it waits. Only the thread's
/// companion posts to it, one request at a time.
#[derive(Default)]
pub(crate) struct Mailbox {
    state: Mutex<MailState>,
    changed: Condvar,
    /// Windows holding the thread's calls at the host ([`Handoff::hold_thread`]); read without
    /// the lock on every call of the thread, changed under it.
    holds: std::sync::atomic::AtomicU32,
}

#[derive(Default)]
struct MailState {
    /// The request waiting to be taken, and its number.
    request: Option<(u64, Request)>,
    /// The last request's number.
    posted: u64,
    /// The number of the last request that finished (requests run in order): a request that
    /// outlived its poster's deadline and finishes later is never taken for a newer one.
    served: u64,
    /// The hand-off whose wait the thread is in: woken when a request comes.
    waiting: Option<Arc<Handoff>>,
    /// The hand-offs of the windows holding the thread's calls.
    holding: Vec<Arc<Handoff>>,
}

/// Windows holding their threads' calls, over the process ([`Handoff::hold_thread`]).
static HOLDING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// This thread's mailbox, made on first use.
    static MAIL: Arc<Mailbox> = Arc::default();
}

/// This thread's mailbox (a fresh one while the thread exits).
pub(super) fn thread_mailbox() -> Arc<Mailbox> {
    MAIL.try_with(Arc::clone).unwrap_or_default()
}

/// While a counter run holds this thread's calls ([`Handoff::hold_thread`]): waits at the
/// entry of the call, serving the run's requests, until the run is over (see
/// [`Mailbox::wait_while_held`] for when it stops waiting sooner). One atomic load
/// otherwise (of a process-wide count, then of the thread's own).
/// `call` names the call that waits (the driver function, or what kind of launch), for the
/// log: the first [`BREAKS_LOGGED`] calls that end a counter run are listed at `info` (a run
/// takes only launches with no other call between them: which calls end runs decides how
/// long runs get).
pub(crate) fn wait_while_held(
    settings: &crate::engine::settings::Settings,
    call: &dyn Fn() -> String,
) {
    // Nothing holds any thread (always, without counter runs): no thread-local lookup.
    if HOLDING.load(std::sync::atomic::Ordering::Acquire) == 0 {
        return;
    }
    let _ = MAIL.try_with(|m| {
        if m.holds.load(std::sync::atomic::Ordering::Acquire) > 0 {
            let n = BREAKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n < BREAKS_LOGGED {
                tracing::info!(call = %call(), "a call of the thread ended its counter run (it waits for the run's window)");
            }
            m.wait_while_held(settings.lock, settings.yield_after);
        }
    });
}

/// Calls that waited for their thread's counter run so far (see [`wait_while_held`]).
static BREAKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many of them the log names.
const BREAKS_LOGGED: u64 = 200;

/// Clears the mailbox's waiting hand-off when the wait ends.
struct Waiting<'a>(&'a Mailbox);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.state.lock().waiting = None;
    }
}

impl Mailbox {
    /// The thread waits in `hand`'s callbacks until the returned guard goes: a request wakes it
    /// there.
    fn waiting_in(&self, hand: &Arc<Handoff>) -> Waiting<'_> {
        self.state.lock().waiting = Some(hand.clone());
        Waiting(self)
    }

    /// The request waiting, if any (the thread takes it to run it; its poster is told, so
    /// that its deadline for the run starts now).
    fn take_request(&self) -> Option<(u64, Request)> {
        let taken = self.state.lock().request.take();
        if taken.is_some() {
            self.changed.notify_all();
        }
        taken
    }

    /// Runs `request` on this (the application) thread, the backend's own calls unhooked; a
    /// panic stays here (the window sees its request served without a result: it lost what
    /// it handed over, and says so).
    fn run(&self, (id, request): (u64, Request)) {
        {
            let _g = Guard::new();
            let _ = catch_unwind(AssertUnwindSafe(request));
        }
        let mut s = self.state.lock();
        s.served = s.served.max(id);
        drop(s);
        self.changed.notify_all();
    }

    /// Whether a window holds the thread's calls.
    pub(super) fn held(&self) -> bool {
        self.holds.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    fn hold(&self, hand: &Arc<Handoff>) {
        let mut s = self.state.lock();
        s.holding.push(hand.clone());
        self.holds.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        HOLDING.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn unhold(&self, hand: &Handoff) {
        let mut s = self.state.lock();
        if let Some(i) = s.holding.iter().position(|h| std::ptr::eq(&**h, hand)) {
            s.holding.swap_remove(i);
            self.holds.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            HOLDING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
        drop(s);
        self.changed.notify_all();
    }

    /// Whether a window holding the thread's calls has not finished its first pass (the
    /// application's own launch: it may wait for what this call does).
    fn first_pass_pending(&self) -> bool {
        let holding = self.state.lock().holding.clone();
        holding.iter().any(|h| !h.first_pass_over())
    }

    /// See [`wait_while_held`]; `true` when the hold ended. The call goes on sooner — to the
    /// backend's usual handling, which orders it behind the window or makes the window give
    /// way — when a holding window's first pass has not finished after `yield_after` (the
    /// application's kernel may wait for this very call), and at `deadline`.
    pub(super) fn wait_while_held(&self, deadline: Duration, yield_after: Duration) -> bool {
        let start = Instant::now();
        let end = start + deadline;
        let mut look_at = start + yield_after;
        let mut s = self.state.lock();
        loop {
            if let Some(request) = s.request.take() {
                drop(s);
                self.changed.notify_all();
                self.run(request);
                s = self.state.lock();
                continue;
            }
            if !self.held() {
                return true;
            }
            let timed_out = self
                .changed
                .wait_until(&mut s, look_at.min(end))
                .timed_out();
            if !timed_out || s.request.is_some() || !self.held() {
                continue;
            }
            let now = Instant::now();
            if now >= end {
                tracing::warn!(
                    waited_ms = deadline.as_millis() as u64,
                    "a call waited for this thread's counter run past the lock deadline: it \
                     goes on (ROCPROF_REPLAY_LOCK_TIMEOUT_MS)"
                );
                return false;
            }
            if now >= look_at {
                look_at = now + yield_after;
                let pending =
                    parking_lot::MutexGuard::unlocked(&mut s, || self.first_pass_pending());
                if pending {
                    tracing::debug!(
                        "a call of a thread held by its counter run goes on: the run's first \
                         pass has not finished (it may wait for this call)"
                    );
                    return false;
                }
            }
        }
    }

    /// Has `request` run on the application thread while it waits in one of the backend's
    /// callbacks (see [`Mailbox`]). CUPTI's range profiler calls never return when made on
    /// another thread while the application thread waits inside a launch callback (seen on
    /// the H200, CUDA 13.0). Gives the request back when the thread did not take it within
    /// `grace` (it is between the callbacks, in the driver's own enqueueing, in its own code,
    /// or the window is asynchronous); waits for a taken one to finish until `deadline`
    /// (`Ok(false)`: it did not).
    pub(super) fn on_app_thread(
        &self,
        request: Request,
        grace: Duration,
        deadline: Duration,
    ) -> Result<bool, Request> {
        let start = Instant::now();
        let mut s = self.state.lock();
        s.posted += 1;
        let id = s.posted;
        s.request = Some((id, request));
        let waiting = s.waiting.clone();
        drop(s);
        self.changed.notify_all();
        if let Some(hand) = waiting {
            hand.poke();
        }
        let mut s = self.state.lock();
        while s.request.is_some() {
            if self.changed.wait_until(&mut s, start + grace).timed_out()
                && let Some((_, r)) = s.request.take()
            {
                return Err(r);
            }
        }
        while s.served < id {
            if self
                .changed
                .wait_until(&mut s, start + deadline)
                .timed_out()
            {
                return Ok(s.served >= id);
            }
        }
        Ok(true)
    }
}

/// How long a side of the hand-off polls (yielding its CPU) before it sleeps on the condition
/// variable: a condition variable's wake-up costs tens of microseconds, paid twice per window
/// (the release of pass 1, its launch status), while the other side usually answers sooner.
/// The application thread polls from [`Handoff::soon`] (its window holds the context), not
/// while earlier windows run.
const SPIN_FOR: Duration = Duration::from_micros(1000);

impl Handoff {
    /// The hand-off of a launch of this thread (its requests go to this thread's mailbox).
    pub(super) fn for_this_thread() -> Handoff {
        Handoff {
            mail: thread_mailbox(),
            ..Handoff::default()
        }
    }

    /// Polls `ready` (yielding between looks, the state unlocked) for at most [`SPIN_FOR`] or
    /// until `deadline`; `true` when it became ready.
    fn spin(&self, deadline: Instant, ready: impl Fn(&HandoffState) -> bool) -> bool {
        let end = (Instant::now() + SPIN_FOR).min(deadline);
        loop {
            if ready(&self.state.lock()) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// The window took the context: the release is near. Wakes the application thread, which
    /// then polls for it ([`SPIN_FOR`]) while the window captures.
    pub(super) fn soon(&self, window: u64) {
        let mut s = self.state.lock();
        s.soon = true;
        s.window = window;
        drop(s);
        self.changed.notify_all();
    }

    pub(super) fn release(&self, r: Release) {
        let mut s = self.state.lock();
        s.release = Some(r);
        if matches!(r, Release::Ordinary { .. }) {
            s.first_pass_over = true;
        }
        drop(s);
        self.changed.notify_all();
    }

    /// The companion thread starts the job's window: `false` when the application thread
    /// withdrew the launch ([`Withdraw`]; it ran without replay).
    pub(super) fn claim(&self) -> bool {
        let mut s = self.state.lock();
        s.claimed = !s.withdrawn;
        s.claimed
    }

    /// Whether the application thread withdrew the launch ([`Withdraw`]).
    pub(super) fn withdrawn(&self) -> bool {
        self.state.lock().withdrawn
    }

    /// The window's first pass is over (finished or failed on the device).
    pub(super) fn set_first_pass_over(&self) {
        self.state.lock().first_pass_over = true;
    }

    /// Whether the window's first pass is over (or there was none).
    pub(super) fn first_pass_over(&self) -> bool {
        self.state.lock().first_pass_over
    }

    pub(super) fn set_launched(&self, r: CUresult) {
        self.state.lock().launched = Some(r);
        self.changed.notify_all();
    }

    /// The window is over: returns the gate the application's stream waits behind, if any.
    pub(super) fn set_done(&self, wait_event: usize) -> Option<Gate> {
        let mut s = self.state.lock();
        s.done = true;
        s.wait_event = wait_event;
        let gate = s.gate.take();
        let word = s.window_word.take();
        let held = std::mem::take(&mut s.holding);
        drop(s);
        if let Some(word) = word {
            word.open();
        }
        if held {
            self.mail.unhold(self);
        }
        self.changed.notify_all();
        gate
    }

    /// The launch call returns without a gate on its stream (a member of a counter run: the
    /// device must stay free of closed gates while CUPTI profiles): the thread's later calls
    /// wait at their entry, serving the window's requests, until the window is over
    /// ([`wait_while_held`]). `false` when the window is over already (nothing to hold).
    pub(super) fn hold_thread(self: &Arc<Self>) -> bool {
        let mut s = self.state.lock();
        if s.done {
            return false;
        }
        s.holding = true;
        self.mail.hold(self);
        true
    }

    /// Wakes the application thread waiting in this hand-off (a request came to its mailbox).
    fn poke(&self) {
        let _s = self.state.lock();
        self.changed.notify_all();
    }

    /// The launch call returned behind its gate, with `breaks` run-ending calls counted so far;
    /// `word`: the window word offered for other streams' work instead of the gate (runs).
    pub(super) fn set_exit(&self, breaks: u64, word: Option<Gate>) {
        let mut s = self.state.lock();
        s.exit_breaks = Some(breaks);
        if s.done {
            drop(s);
            if let Some(w) = word {
                w.open();
            }
        } else {
            s.window_word = word;
        }
    }

    /// The launch was enqueued behind a closed gate while the window drained
    /// ([`defer`]): set by the window before its release.
    pub(super) fn set_deferred(&self) {
        self.state.lock().deferred = true;
    }

    /// Whether the launch was enqueued behind a closed gate while the window drained.
    pub(super) fn is_deferred(&self) -> bool {
        self.state.lock().deferred
    }

    /// The launch call's exit offers the word other streams' work is ordered behind: the
    /// window's number to offer it under now, or `None` when a deferred launch's first gate has
    /// not opened yet (the window offers it when it opens that gate: until then the window
    /// still drains the context, and work ordered behind it would be drained too).
    pub(super) fn exit_offer(&self, addr: CUdeviceptr, value: u32) -> Option<u64> {
        let mut s = self.state.lock();
        if s.deferred && !s.first_gate_open {
            s.pending_offer = Some((addr, value));
            None
        } else {
            Some(s.window)
        }
    }

    /// A deferred launch's first gate opens: the window's number and the word its call's
    /// exit offered meanwhile, if it did.
    pub(super) fn first_gate_opening(&self) -> Option<(u64, CUdeviceptr, u32)> {
        let mut s = self.state.lock();
        s.first_gate_open = true;
        let window = s.window;
        s.pending_offer.take().map(|(a, v)| (window, a, v))
    }

    /// The gate after the launch, when the next launch of the stream joins the window's run
    /// (it opens now, so that launch can run): `None` when there is none (the call waited for
    /// the window instead).
    pub(super) fn take_gate(&self) -> Option<Gate> {
        self.state.lock().gate.take()
    }

    /// [`set_exit`](Self::set_exit)'s count, once the call returned behind its gate.
    pub(super) fn exit_breaks(&self) -> Option<u64> {
        self.state.lock().exit_breaks
    }

    /// The launch's status, with the gate now on the application's stream (an asynchronous
    /// window). Gives the gate back when the window is already over: the caller opens it.
    pub(super) fn set_launched_behind(&self, r: CUresult, gate: Gate) -> Option<Gate> {
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

    pub(super) fn is_done(&self) -> bool {
        self.state.lock().done
    }

    /// The release, or `None` when the window ended without one (an internal error). With
    /// `withdraw`, once the window has not started for `withdraw.after` while the companion
    /// thread runs a window `withdraw.may` allows leaving behind, and the launch could be
    /// ordered behind it: [`Release::Ordinary`] without the reader, the job withdrawn (its
    /// window declines when it starts).
    pub(super) fn wait_release(
        self: &Arc<Self>,
        withdraw: Option<Withdraw<'_>>,
    ) -> Option<Release> {
        let _waiting = self.mail.waiting_in(self);
        let mut s = self.state.lock();
        let mut polled = false;
        let mut next_try = withdraw.as_ref().map(|w| Instant::now() + w.after);
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
            if s.soon && !polled {
                polled = true;
                parking_lot::MutexGuard::unlocked(&mut s, || {
                    self.spin(Instant::now() + SPIN_FOR, |s| {
                        s.release.is_some() || s.done || self.mail.state.lock().request.is_some()
                    })
                });
                continue;
            }
            if let (Some(w), Some(at)) = (&withdraw, next_try)
                && !s.claimed
                && Instant::now() >= at
            {
                // Checked and ordered unlocked (the companion thread may claim meanwhile:
                // then the launch waits on, and the wait it got on the device is for a
                // window that is over).
                let ordered =
                    parking_lot::MutexGuard::unlocked(&mut s, || (w.may)() && (w.order)());
                if ordered && !s.claimed && s.release.is_none() && !s.done {
                    s.withdrawn = true;
                    return Some(Release::Ordinary { reader: false });
                }
                next_try = Some(Instant::now() + w.after);
            }
            let wake = Instant::now() + Duration::from_secs(1);
            let wake = next_try
                .filter(|_| !s.claimed)
                .map_or(wake, |t| t.min(wake));
            self.changed.wait_until(&mut s, wake);
        }
    }

    /// Runs the request in the thread's mailbox, if one is waiting (on the application
    /// thread, the state unlocked meanwhile); `true` if it ran one.
    pub(super) fn serve(&self, s: &mut parking_lot::MutexGuard<'_, HandoffState>) -> bool {
        let Some(request) = self.mail.take_request() else {
            return false;
        };
        parking_lot::MutexGuard::unlocked(s, || self.mail.run(request));
        true
    }

    /// The launch's status, or `None` at `deadline`.
    pub(super) fn wait_launched(&self, deadline: Instant) -> Option<CUresult> {
        self.spin(deadline, |s| s.launched.is_some());
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
    pub(super) fn wait_done(self: &Arc<Self>) -> usize {
        let _waiting = self.mail.waiting_in(self);
        let mut s = self.state.lock();
        s.call_waits = true;
        while !s.done {
            if self.serve(&mut s) {
                continue;
            }
            self.changed.wait_for(&mut s, Duration::from_secs(1));
        }
        s.call_waits = false;
        s.wait_event
    }

    /// Whether the application thread waits inside its launch call for the window's end.
    pub(super) fn call_waits(&self) -> bool {
        self.state.lock().call_waits
    }
}

/// A launch handed to a companion thread.
pub(super) struct Job {
    pub(super) be: &'static Backend,
    pub(super) ctx: Arc<Ctx>,
    pub(super) info: DispatchInfo,
    pub(super) launch: Launch,
    /// The kernel's module (`None`: unknown).
    pub(super) module: Option<usize>,
    /// The kernel's `CUfunction` (`None`: unknown; the launch metrics that need it are absent).
    pub(super) function: Option<usize>,
    /// Offset and size of each parameter (`None`: unknown).
    pub(super) params: Option<Arc<[(usize, usize)]>>,
    pub(super) hand: Arc<Handoff>,
    /// The correlation id of the application's launch call (its kernel record, pass 1's
    /// kernel-only time).
    pub(super) correlation: u32,
    /// The lane of the launch's stream, as the application thread names it
    /// ([`lane`](crate::cuda::fencing::lane)): each thread's per-thread default stream has
    /// its own.
    pub(super) lane: u64,
    /// Recorded by the application thread on its per-thread default stream (0: none).
    pub(super) before: usize,
    /// The copy of the arguments `launch` points into (`None`: `launch` points at the
    /// application's own, alive only while its call waits for the window).
    pub(super) _owned: Option<OwnedArgs>,
    /// The context's gate page (`None`: no gates; passes are timed from an idle stream).
    pub(super) gates: Option<Arc<GatePage>>,
    /// The decided window (taken by the companion thread when it runs it).
    pub(super) window: Option<WindowRun>,
    /// Counts the job in [`BEHIND`] until it is dropped.
    pub(super) _behind: crate::cuda::gate::Ticket,
    /// The backend's count of the application's calls ([`Backend::breaks`]) once this launch
    /// call began (itself included).
    pub(super) breaks: u64,
    /// The window collects counters and may measure a run of launches in each counter pass
    /// ([`counter_runs`](crate::cuda::profiler::ranges_per_pass)): the arguments are copied,
    /// the call returns after pass 1 without a gate and holds the thread's later calls
    /// ([`Handoff::hold_thread`]).
    pub(super) held: bool,
}

// SAFETY: the raw pointers of `launch` are the application's arguments, valid while the
// application thread waits inside the launch call, or point into `owned`; handles are plain
// driver handles.
unsafe impl Send for Job {}

/// An application thread's companion: where its jobs go, and the one it runs now.
pub(super) struct Companion {
    tx: mpsc::Sender<Job>,
    running: Arc<Mutex<Option<Running>>>,
}

/// The job a companion thread runs.
struct Running {
    lane: u64,
    hand: Arc<Handoff>,
}

thread_local! {
    static COMPANION: RefCell<Option<Companion>> = const { RefCell::new(None) };
}

/// Whether this thread's companion runs the window of another launch (not `own`'s) on `lane`
/// whose first pass has not finished (a launch of this thread waiting behind it may be what
/// that kernel waits for).
pub(super) fn running_first_pass_on(lane: u64, own: &Arc<Handoff>) -> bool {
    COMPANION
        .try_with(|c| {
            c.borrow().as_ref().is_some_and(|c| {
                c.running.lock().as_ref().is_some_and(|r| {
                    r.lane == lane && !Arc::ptr_eq(&r.hand, own) && !r.hand.first_pass_over()
                })
            })
        })
        .unwrap_or(false)
}

pub(super) fn spawn_companion() -> Option<Companion> {
    let (tx, rx) = mpsc::channel::<Job>();
    let running = Arc::new(Mutex::new(None));
    let runs = running.clone();
    let spawned = std::thread::Builder::new()
        .name("rocprof-replay-cuda".into())
        // Policies run here: room for what a tool does in its callbacks.
        .stack_size(8 << 20)
        .spawn(move || {
            // Everything this thread calls is the backend's own.
            GUARD.with(|g| g.set(1 << 30));
            let mut relaxed = false;
            // A job a run received and did not take in: it runs next.
            let mut next: Option<Job> = None;
            loop {
                let job = match next.take() {
                    Some(job) => job,
                    None => match rx.recv() {
                        Ok(job) => job,
                        Err(_) => break,
                    },
                };
                *runs.lock() = Some(Running {
                    lane: job.lane,
                    hand: job.hand.clone(),
                });
                next = run_job(job, &mut relaxed, &rx, &runs);
                *runs.lock() = None;
            }
        });
    match spawned {
        Ok(_) => Some(Companion { tx, running }),
        Err(e) => {
            tracing::error!("cannot start a replay thread ({e}); launches run without replay");
            None
        }
    }
}

/// Hands `job` to this thread's companion; gives it back when there is none (no thread could
/// be started, or the thread is exiting).
pub(super) fn submit(job: Job) -> Result<(), Option<Box<Job>>> {
    let mut slot = Some(job);
    let sent = COMPANION.try_with(|c| {
        let mut c = c.borrow_mut();
        for _ in 0..2 {
            if c.is_none() {
                *c = spawn_companion();
            }
            let (Some(companion), Some(job)) = (c.as_ref(), slot.take()) else {
                return false;
            };
            match companion.tx.send(job) {
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

/// Runs one job on the companion thread; returns a job it received from `rx` for the
/// window's run and did not take in (it runs next).
fn run_job(
    mut job: Job,
    relaxed: &mut bool,
    rx: &mpsc::Receiver<Job>,
    running: &Mutex<Option<Running>>,
) -> Option<Job> {
    let be = job.be;
    let Some(window) = job.window.take() else {
        job.hand.release(Release::Ordinary { reader: true });
        drop(job.hand.set_done(0));
        return None;
    };
    // SAFETY: the context is alive: its launch call is in progress on the application thread.
    let r = unsafe { (be.drv.ctx_set_current)(job.ctx.handle as CUcontext) };
    if r != CUDA_SUCCESS {
        tracing::warn!(status = %error_name(&be.drv, r), "cannot make the launch's context current");
        job.hand.release(Release::Ordinary { reader: true });
        drop(job.hand.set_done(0));
        return None;
    }
    if !*relaxed {
        *relaxed = true;
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a plain in/out parameter; this thread never captures.
        unsafe { (be.drv.exchange_capture_mode)(&mut mode) };
    }
    crate::cuda::profiler::discover(job.info.agent_index);
    // The later members of a run (`ROCPROF_REPLAY_RUN`): their jobs live here, their targets
    // borrow them.
    let slots: Vec<std::cell::OnceCell<Job>> = (1..be.settings.run)
        .map(|_| std::cell::OnceCell::new())
        .collect();
    let mut target = CudaTarget::of(be, &job);
    // A counter run's session, for its later members (`Job::held`).
    let run_counters: RunCounters = Arc::default();
    if job.held {
        target.run_counters = Some(run_counters.clone());
    }
    let mut joins = CudaJoins {
        be,
        rx,
        run_counters: job.held.then_some(run_counters),
        slots: &slots,
        used: 0,
        lane: job.lane,
        ctx: &job.ctx,
        last: job.hand.clone(),
        held: None,
        next: None,
        running,
    };
    tracing::trace!(kernel = job.info.kernel(), "window starts");
    let result = catch_unwind(AssertUnwindSafe(|| match window.run {
        Runner::Engine(w) => w.run_with(&mut target, be.inventory, &mut joins).1,
        Runner::Custom(f) => {
            f(&mut target);
            Vec::new()
        }
    }));
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
    target.released();
    drop(target);
    // The run's later members, in order, after the first (after a panic they were dropped,
    // and each was released then).
    for mut later in result.unwrap_or_default() {
        later.released();
    }
    // A launch received for the run and not taken in runs next, with its window back.
    let (held, mut next) = joins.leftovers();
    if let Some(window) = held {
        let mut slots = slots;
        if let Some(mut untaken) = slots.iter_mut().rev().find_map(std::cell::OnceCell::take) {
            untaken.window = Some(WindowRun {
                counters: window.collects_counters(),
                run: Runner::Engine(window),
            });
            next = Some(untaken);
        }
    }
    // The job (and its ticket in BEHIND) goes last, then the arena is trimmed.
    let ctx = job.ctx.clone();
    drop(job);
    trim_arena(be, &ctx);
    next
}

/// How often that wait looks whether the application made a call that ends the run.
const RUN_POLL: Duration = Duration::from_micros(20);

/// The launches that may join a window's run on CUDA ([`Joins`]): the next jobs of the
/// companion's thread on the same lane and context, each made right behind the run's last
/// member (no run-ending call of the application between that launch's return and this
/// one's call: [`Backend::breaks`]), decided into an engine window with copied arguments —
/// without counters and with gates, or collecting counters into the first member's session
/// ([`Job::held`], the run's first member held too).
struct CudaJoins<'s> {
    be: &'static Backend,
    rx: &'s mpsc::Receiver<Job>,
    /// The run's counter session, when its first member's window may measure several
    /// launches per counter pass ([`Job::held`]): each candidate is measured in it.
    run_counters: Option<RunCounters>,
    slots: &'s [std::cell::OnceCell<Job>],
    used: usize,
    lane: u64,
    ctx: &'s Arc<Ctx>,
    /// The run's last member's hand-off: the gate after its launch opens when the next joins.
    last: Arc<Handoff>,
    /// A candidate shown and not taken yet: its window and its target.
    held: Option<(crate::engine::state::Window, CudaTarget<'s>)>,
    /// A job received that cannot join: the companion runs it next.
    next: Option<Job>,
    running: &'s Mutex<Option<Running>>,
}

impl<'s> CudaJoins<'s> {
    /// Whether `job` may join; a job that may not is kept to run next.
    fn joinable(&mut self, job: Job) -> Option<Job> {
        let counters = job.window.as_ref().is_some_and(|w| w.counters);
        let unfit = if job.lane != self.lane || !Arc::ptr_eq(&job.ctx, self.ctx) {
            Some("another stream or context")
        } else if !matches!(
            &job.window,
            Some(WindowRun {
                run: Runner::Engine(_),
                ..
            })
        ) {
            Some("not an engine window")
        } else if counters && !(job.held && self.run_counters.is_some()) {
            Some("its counters are measured alone")
        } else if !counters && (job._owned.is_none() || job.gates.is_none()) {
            Some("its arguments or gates are not its own")
        } else if self.last.exit_breaks().map(|b| b + 1) != Some(job.breaks) {
            // Its own call must be the only one counted since the last member's returned.
            Some("the application made another call since the run's last launch")
        } else if !job.hand.claim() {
            // Claimed now, its launch call no longer leaves it (it waits for its release).
            Some("its launch call has left it")
        } else {
            None
        };
        match unfit {
            None => Some(job),
            Some(why) => {
                tracing::debug!(why, "the next launch does not join the run");
                self.next = Some(job);
                None
            }
        }
    }

    /// The thread's next job, waited for up to
    /// [`RUN_WAIT`](crate::engine::settings::RUN_WAIT) — not at all once the application
    /// made a call other than a launch since the run's last launch returned (no later launch
    /// can join then: a synchronisation waiting for this window, say).
    fn next_launch(&self) -> Option<Job> {
        let deadline = Instant::now() + self.be.settings.run_wait;
        loop {
            match self.rx.try_recv() {
                Ok(job) => return Some(job),
                Err(mpsc::TryRecvError::Disconnected) => return None,
                Err(mpsc::TryRecvError::Empty) => {}
            }
            // Known once the last member's launch call returned (it may not have yet).
            if let Some(exit) = self.last.exit_breaks() {
                let now = self.be.breaks.load(std::sync::atomic::Ordering::Acquire);
                if now / crate::cuda::OTHER_CALL != exit / crate::cuda::OTHER_CALL {
                    return None;
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.rx.recv_timeout(left.min(RUN_POLL)) {
                Ok(job) => return Some(job),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// What is left after the window: a candidate shown and not taken (its job in the last
    /// slot used), and a job received that could not join.
    fn leftovers(mut self) -> (Option<crate::engine::state::Window>, Option<Job>) {
        (self.held.take().map(|(w, _)| w), self.next.take())
    }
}

impl<'s> Joins<'s> for CudaJoins<'s> {
    fn peek(&mut self) -> Option<(&crate::engine::state::Window, &mut (dyn ReplayTarget + 's))> {
        if self.held.is_none() {
            if self.next.is_some() || self.used >= self.slots.len() {
                return None;
            }
            let job = self.next_launch()?;
            let mut job = self.joinable(job)?;
            let Some(WindowRun {
                run: Runner::Engine(window),
                ..
            }) = job.window.take()
            else {
                self.next = Some(job);
                return None;
            };
            let slot = &self.slots[self.used];
            if slot.set(job).is_err() {
                return None;
            }
            let job: &'s Job = slot.get()?;
            // Not a member yet: dropped untaken, it leaves its launch to its own window.
            let mut target = CudaTarget::of(self.be, job);
            target.candidate = true;
            target.run_counters = self.run_counters.clone();
            self.held = Some((window, target));
        }
        let (window, target) = self.held.as_mut()?;
        Some((&*window, target as &mut dyn ReplayTarget))
    }

    fn take(&mut self) -> Option<Joiner<'s>> {
        let (window, mut target) = self.held.take()?;
        // A member now: released when dropped, if not before.
        target.make_rider();
        // The previous member's gate holds this launch on the stream: it opens now (other
        // streams' work stays behind the window word until the run ends).
        if let Some(gate) = self.last.take_gate() {
            gate.open();
        }
        self.last = target.job.hand.clone();
        self.used += 1;
        // A later launch of this thread may leave this member's first pass behind.
        *self.running.lock() = Some(Running {
            lane: self.lane,
            hand: target.job.hand.clone(),
        });
        Some(Joiner {
            window,
            target: Box::new(target),
        })
    }
}

/// After a window whose gates are open: trims the context's arena (which may free memory, and
/// a free may synchronise the context) — under the context's writer lock, taken only if free
/// at once (a waiting writer would hold the application's calls off), so no window of the
/// context runs, and only when no window is in flight in the process (none has a gate
/// closed); otherwise the next window's end tries again.
pub(super) fn trim_arena(be: &Backend, ctx: &Ctx) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that records the thread it ran on, after `delay`.
    fn recording(ran: &Arc<Mutex<Vec<String>>>, delay: Duration) -> Request {
        let ran = ran.clone();
        Box::new(move || {
            std::thread::sleep(delay);
            let t = std::thread::current();
            ran.lock().push(t.name().unwrap_or("?").to_owned());
        })
    }

    /// A window's requests reach the application thread wherever it waits in the backend's
    /// callbacks: in another launch's hand-off (any hand-off of the thread shares its
    /// mailbox) and at the entry of a call while a window holds the thread; a request the
    /// thread did not take in time comes back; a request that outlived its poster's deadline
    /// and finishes later is not taken for the next one's.
    #[test]
    fn a_threads_mailbox_is_served_wherever_it_waits_and_a_late_request_is_not_anothers() {
        let ran: Arc<Mutex<Vec<String>>> = Arc::default();
        let mail: Arc<Mailbox> = Arc::default();
        // Posts a request taking `run` to run; whether it ran within `deadline` (`Err`: not
        // taken within `grace`).
        let post = |run: u64, grace: u64, deadline: u64| {
            mail.on_app_thread(
                recording(&ran, Duration::from_millis(run)),
                Duration::from_millis(grace),
                Duration::from_millis(deadline),
            )
            .map_err(drop)
        };
        // The thread waits for a launch's release; the request comes through its mailbox.
        let hand = Arc::new(Handoff {
            mail: mail.clone(),
            ..Handoff::default()
        });
        let app = {
            let hand = hand.clone();
            std::thread::Builder::new()
                .name("app".into())
                .spawn(move || hand.wait_release(None))
                .unwrap()
        };
        let served = post(0, 5000, 5000);
        assert!(matches!(served, Ok(true)));
        hand.release(Release::Ordinary { reader: false });
        assert!(app.join().unwrap().is_some());
        // Held: the thread's next call waits at its entry, serving the window's requests.
        let held = Arc::new(Handoff {
            mail: mail.clone(),
            ..Handoff::default()
        });
        assert!(held.hold_thread());
        assert!(mail.held());
        held.set_first_pass_over();
        let app = {
            let mail = mail.clone();
            std::thread::Builder::new()
                .name("app".into())
                .spawn(move || {
                    mail.wait_while_held(Duration::from_secs(10), Duration::from_secs(10))
                })
                .unwrap()
        };
        let served = post(0, 5000, 5000);
        assert!(matches!(served, Ok(true)));
        // A request that takes longer than its deadline: taken, not finished in time.
        let late = post(300, 5000, 20);
        assert_eq!(late, Ok(false));
        // The next request is not satisfied by the late one finishing.
        let next = post(100, 5000, 5000);
        assert!(matches!(next, Ok(true)));
        assert_eq!(
            ran.lock().len(),
            4,
            "each request ran before its poster went on"
        );
        drop(held.set_done(0));
        assert!(app.join().unwrap(), "the hold ended with the window");
        assert!(!mail.held());
        assert!(ran.lock().iter().all(|t| t == "app"), "{:?}", ran.lock());
        // Nobody waits: the request comes back after its grace.
        let back = post(0, 20, 1000);
        assert!(back.is_err());
        assert_eq!(ran.lock().len(), 4);
    }

    /// The word a launch call's exit offers for other streams' work is offered exactly once,
    /// under the window's number: at the exit, unless the launch was deferred and its first
    /// gate has not opened yet (then when it opens), whichever comes first.
    #[test]
    fn the_exit_offer_of_a_deferred_launch_waits_for_its_first_gate() {
        // Not deferred: at the exit.
        let hand = Handoff::default();
        hand.soon(4);
        assert_eq!(hand.exit_offer(0x1000, 7), Some(4));
        assert_eq!(hand.first_gate_opening(), None);
        // Deferred, the exit first: kept for the gate's opening.
        let hand = Handoff::default();
        hand.soon(5);
        hand.set_deferred();
        assert_eq!(hand.exit_offer(0x2000, 8), None);
        assert_eq!(hand.first_gate_opening(), Some((5, 0x2000, 8)));
        assert_eq!(hand.first_gate_opening(), None, "offered once");
        // Deferred, the gate first: at the exit.
        let hand = Handoff::default();
        hand.soon(6);
        hand.set_deferred();
        assert_eq!(hand.first_gate_opening(), None);
        assert_eq!(hand.exit_offer(0x3000, 9), Some(6));
        assert!(hand.is_deferred());
    }
}
