//! The replay window: decision, drain, snapshot, pass loop with restores, one completion.
//!
//! [`run_window`] drives a [`ReplayPolicy`] against a [`ReplayTarget`] (the backend's view of
//! one intercepted dispatch). Every way out but one leaves the application with exactly one
//! correct execution and exactly one completion:
//!
//! ```text
//! pass_count ──Skip/1/too many─────────────────────────────────► run_once      (skipped/declined)
//!     │ N>1 / UpTo / Until
//!     ▼
//!   begin (agent lock) + drain ──timeout──────────────────────────► run_once      (declined)
//!     ▼
//!   plan + capture snapshot ──alloc/copy/symbols/budget──────────► run_once      (declined)
//!     ▼
//!   ┌► on_pass ─► run pass (completion of ours)   ─► on_pass_end
//!   │     │ panic before the pass: memory is as captured ──────────► run_once      (declined)
//!   │     │ not submitted ──────────────────────────────────────────► run_once      (declined)
//!   │     │ late: waited for (second deadline); done ─► complete once    (declined)
//!   │     │           still running at the second deadline ─► complete once    (failed)
//!   │     ▼
//!   │   more passes? (plan, contention, should_continue) ──no──► complete once   (replayed)
//!   │     (when the policy's passes are done, a metric set's counter passes follow, each
//!   │      armed with its counter group: `arm_counters`, run, `counter_values`)
//!   └── restore ◄──yes        │ failed twice / stuck ──────────────► run_once      (failed)
//!       (first time: diff, choose write-set or full; write-set: finish = diff, restore the
//!        extras, write pass 1's result back, before "complete once")
//! ```
//! The first row (`pass_count` to the gate's verdict) is [`decide`], on the submitting
//! thread; the rest is [`Decided::run`], which a backend with asynchronous windows runs later
//! on the agent's worker lane (`engine/workers.rs`) while the application goes on. Host
//! memory the arguments name is never restored: [`ReplayTarget::host_watch`] ranges are
//! checksummed around the first pass, and a change ends replay after it
//! (`host_memory_written`).
//!
//! How memory is restored is chosen at the first restore ([`Restorer`]): after pass 1 (the
//! application's own execution) the footprint is compared with the snapshot; a write-set
//! restore rewrites only what pass 1 wrote before each later pass and, after the last pass,
//! restores what later passes wrote elsewhere and writes pass 1's result back, so the
//! application keeps pass 1's result. A full restore (a dense writer, `full` mode, a backend
//! that cannot compare) is never followed by anything after the last pass: the application
//! keeps the last pass's result. Either way a pass starts from the captured inputs (on what
//! pass 1 wrote, at least; everywhere in `strict` and `full`), so stopping after any
//! completed pass — one that completed late included — leaves the application the result of
//! one correct execution. Only two paths leave memory in a state no execution produces, and
//! their outcome is `failed`: a restore (or final write-back) that does not complete, and a
//! pass still running after the second (late-pass) deadline, when the application is given
//! its completion rather than a hang.
//!
//! [`ReplayTarget::end`] releases the agent before [`ReplayPolicy::on_end`] runs, so the tool's
//! end-of-dispatch work never holds up other work on the agent.
//!
//! # Runs
//!
//! With `ROCPROF_REPLAY_RUN=K` (K > 1; 16 by default) one window may cover a *run*: up to K consecutive
//! dispatches of one queue, each submitted right behind the one before with nothing else of
//! the application between them ([`Joins`]: the backend shows the candidates, the window takes
//! them). After the first member's first pass, each candidate is captured where the snapshot
//! does not hold its memory yet — after its allocations are checked against the fingerprints
//! taken before the run (an earlier member that wrote there through a pointer its arguments do
//! not name would otherwise become part of its "before"; such a candidate does not join) — and
//! then runs its first pass, the application's own execution. One check of the watched memory
//! follows for the whole run; every later pass restores the run's union snapshot (what the
//! first passes wrote) and runs the members' passes in order, each from exactly the inputs its
//! first pass had. The snapshot of each region is its state before the first member that names
//! it, so restoring it brings back the state before the run. A pass that stops at a later
//! member (a policy panic, a pass not submitted) is ended by writing the first passes' result
//! back (write-set restores, which a run always keeps) or by restoring everything and running
//! the whole run once more (full restores): the application sees one execution of the run, in
//! order. A check that finds memory written outside every member's snapshot cannot name the
//! writer: replay stops after the first passes and those kernels get windows of their own from
//! then on ([`footprint::SOLO`]), where the writer is found as in a window of its own. Eligible:
//! a fixed pass count, no `should_continue`, the same metric set or none (counters only where
//! one counter pass of the backend can measure several dispatches —
//! [`ReplayTarget::counter_ranges`], HSA's: each counter pass then restores the run's snapshot
//! and runs every member's pass in order inside the first member's, each armed with its own
//! counters, and each member gets its own values), the `arguments`, `sampled` or `all`
//! footprint (a run whose snapshot holds every allocation captures every allocation a joining
//! member finds unheld; an unchecked `sampled` run takes in only dispatches not due a check),
//! no host memory named or reached; the later members' outcomes carry the run's figures with
//! their own passes ([`Outcome::run`]), and are recorded and released after the first
//! member's. Where
//! the backend can queue passes ([`ReplayTarget::splits_passes`]: CUDA's relaunches on the
//! context's private stream), a later pass of the later members is queued: each member's
//! `on_pass`, its pass submitted behind the one before, its contexts set aside; then the
//! passes are waited for in order, each followed by its `on_pass_end` (so a member's
//! `on_pass_end` may come after the next members' `on_pass`). At
//! `debug` level the log says why a dispatch got a window of its own and why a candidate did
//! not join.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::{LoopContexts, Parked, Service, service_active};
use crate::counters::{MetricSet, Metrics};
use crate::dispatch::DispatchInfo;
use crate::engine::footprint::{self, Verdict, Watch};
use crate::engine::gate;
use crate::engine::inventory::AllocationInventory;
use crate::engine::phases::{self, Phase};
use crate::engine::settings::Settings;
use crate::engine::snapshot::{
    DENSE_PERCENT, DeviceMemory, DiffError, RestoreError, RestoreStats, Snapshot, SnapshotPlan,
    Stash, StashError, WriteSet,
};
use crate::engine::state::Window;
use crate::engine::stored;

#[path = "runs.rs"]
mod runs;

#[path = "ahead.rs"]
mod ahead;
use crate::policy::{
    Consults, DeclineReason, FailureReason, FootprintKind, FootprintMode, HostMemory,
    MAX_OPEN_ENDED_PASSES, MAX_PASSES, Outcome, OutcomeKind, Pass, PassPlan, PassReport,
    ReplayPolicy, RestoreKind, RestoreMode,
};
use runs::{
    Broken, Joining, Rider, collect_riders, count_riders, end_run, follow_riders, join_run,
    rerun_riders, ride, rider_counter_values, submit_riders,
};
pub(crate) use runs::{Joiner, Joins, Later, Member};

/// Why a pass did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PassError {
    /// The pass was never submitted: memory is as before it.
    NotSubmitted(DeclineReason),
    /// The pass was submitted and had not completed at the pass deadline; it may still run.
    Late,
    /// The first pass (the application's own execution) had not completed while other work
    /// that it may be waiting for was held up by the window past the yield deadline
    /// ([`AgentLock::held_up`](super::agent::AgentLock::held_up)); it may still run.
    Yielded,
}

/// The backend's handle on one intercepted dispatch.
pub(crate) trait ReplayTarget: DeviceMemory {
    /// Takes exclusive use of the agent for the window (lock deadline); called only for
    /// dispatches that will be replayed, so skipped dispatches never wait for it.
    fn begin(&mut self) -> Result<(), DeclineReason>;
    /// Waits (with a deadline) until the agent has nothing else in flight.
    fn drain(&mut self) -> Result<(), DeclineReason>;
    /// Module-scope variables (address, size) visible to the agent, found now.
    fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason>;
    /// Runs one pass and waits for it (pass deadline), the application's completion left
    /// untouched (HSA: a completion signal of ours; CUDA: an event of ours behind it); returns
    /// the kernel time when `timed`.
    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError>;
    /// Whether a later pass of this dispatch can be submitted without waiting for it
    /// ([`submit_pass`](Self::submit_pass), then [`collect_pass`](Self::collect_pass)): a
    /// run's members then queue their passes one behind the other and are waited for together
    /// ([runs](self#runs)). The default: no.
    fn splits_passes(&self) -> bool {
        false
    }
    /// Submits a later pass behind everything submitted before it in the window, in order,
    /// without waiting for it; only where [`splits_passes`](Self::splits_passes).
    fn submit_pass(&mut self, timed: bool) -> Result<(), PassError> {
        let _ = timed;
        Err(PassError::NotSubmitted(DeclineReason::SubmitFailed))
    }
    /// Waits for the pass [`submit_pass`](Self::submit_pass) submitted (pass deadline) and
    /// gives what [`run_pass`](Self::run_pass) would have.
    fn collect_pass(&mut self) -> Result<Option<Duration>, PassError> {
        Err(PassError::NotSubmitted(DeclineReason::SubmitFailed))
    }
    /// Waits (pass deadline) until the pass [`submit_pass`](Self::submit_pass) submitted is
    /// done, without collecting it: a batch of queued passes waits for its last one first, so
    /// collecting the others finds them done. The default: nothing (collecting waits).
    fn await_pass(&mut self) {}
    /// Whether [`submit_pass`](Self::submit_pass) may be called again before the pass it
    /// submitted is collected, for passes queued ahead (collections then come in submission
    /// order; restores queued between them with [`DeviceMemory::queue_restores`]). The
    /// default: no.
    fn queues_ahead(&self) -> bool {
        false
    }
    /// Gives up waiting for the pass [`submit_pass`](Self::submit_pass) submitted: it is
    /// queued behind a pass that is still running past the late deadline, so it is late too
    /// (nothing of the window may touch its memory; the application's completion waits for
    /// it where the backend can order it so).
    fn abandon_pass(&mut self) {}
    /// Submits the dispatch unchanged, with the application's own completion: the ordinary
    /// single run.
    /// `false` when it could not be submitted (the application then has no result of it).
    fn run_once(&mut self) -> bool;
    /// Lets the application see the dispatch complete, exactly once, after the last pass
    /// (HSA: its completion signal is decremented; CUDA: nothing here — the gate behind the
    /// launch on its stream opens when the backend ends the window).
    fn complete(&mut self);
    /// After [`PassError::Late`]: waits for that pass (the late-pass deadline); `true` when it
    /// completed, so its result is the application's.
    fn settle_late_pass(&mut self) -> bool;
    /// Whether other work has waited for the agent longer than the lock deadline (the
    /// window then stops after the current pass).
    fn contended(&self) -> bool;
    /// Releases the agent (end of the window); called once, before `on_end`.
    fn end(&mut self);
    /// Host memory the dispatch's arguments point into that the host can read (address,
    /// length): the window checksums it before the first pass and again after it, and stops
    /// after the first pass when it changed ([`DeclineReason::HostMemoryWritten`]). Each
    /// range must stay readable by the host for the window's duration. The default: none.
    fn host_watch(&mut self) -> Vec<(usize, usize)> {
        Vec::new()
    }
    /// Whether memory exists that the window can neither restore nor fingerprint and that a
    /// pointer stored in a module variable could lead a kernel to (host-visible memory,
    /// memory another process or context writes): the window then reads the module
    /// variables' words and has [`Self::stored_pointers`] classify them
    /// ([`crate::engine::stored`]). The default: none.
    fn unrestorable_memory_exists(&self) -> bool {
        false
    }
    /// What the 8-byte-aligned words `words` (read from module variables) point into, by the
    /// backend's rules for argument words: `Ok` the host-readable ranges (address, length) to
    /// watch across the first pass with [`host_watch`](Self::host_watch)'s, `Err` why the
    /// dispatch must run once (memory that can be neither restored nor watched). The default:
    /// nothing.
    fn stored_pointers(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, DeclineReason> {
        let _ = words;
        Ok(Vec::new())
    }
    /// The dispatch's argument bytes (HSA: the kernarg segment, hidden arguments included;
    /// CUDA: the packed parameters), read before the first pass: the snapshot captures the
    /// allocations their 8-byte-aligned words point into and watches the agent's others
    /// ([`crate::engine::footprint`]). `None` (the default): unknown, so every
    /// allocation is captured.
    fn argument_bytes(&self) -> Option<Vec<u8>> {
        None
    }
    /// Why the backend knows this dispatch must not be replayed, before the window takes the
    /// agent ([`gate`]): it is queued behind a wait for memory another agent writes, or its
    /// arguments point into memory the engine cannot restore. `None`: nothing known.
    fn refusal(&self) -> Option<DeclineReason> {
        None
    }
    /// Prepares the counter configuration of every pass of `set` on this dispatch's agent,
    /// before the window takes the agent. `Err`: why no counters can be collected (the
    /// dispatch then runs without them). The default: the backend offers none.
    fn prepare_counters(&mut self, set: &MetricSet) -> Result<(), String> {
        let _ = set;
        Err("this backend offers no hardware counters".into())
    }
    /// Arms counter pass `pass` of the prepared set for the next [`run_pass`](Self::run_pass)
    /// only (`None`: the next pass carries no counters).
    fn arm_counters(&mut self, pass: Option<u32>) {
        let _ = pass;
    }
    /// The values of counter pass `pass`, which just completed, in
    /// [`MetricSet::pass`] order.
    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let _ = pass;
        Err("this backend offers no hardware counters".into())
    }
    /// How many dispatches one counter pass of the prepared set can measure: the most members
    /// a window that collects counters may take into its [run](self#runs) (asked after
    /// [`prepare_counters`](Self::prepare_counters)). A later member's target is prepared
    /// when it joins, and in each counter pass armed, run and read like this one, inside this
    /// one's pass: its `arm_counters(Some)` after this target's pass ran, this target's
    /// `arm_counters(None)` after every member's pass (a backend whose collection spans the
    /// pass, as CUPTI's, holds each member's range in it). The default, 1: such a window keeps
    /// to itself.
    fn counter_ranges(&self) -> u32 {
        1
    }
    /// The window is over and the dispatch's record written: its completion goes to the
    /// application now. The backend calls it for the later members of a [run](self#runs), in
    /// order, after the first member's completion (the CUDA backend ends every window through
    /// it). The default: nothing to do.
    fn released(&mut self) {}
}

/// The values of a completed window's counter passes, combined only when every pass started
/// from restored inputs; `None` when the counter passes did not all run (`finish` says why).
fn collected(
    set: &MetricSet,
    outcome: &Outcome,
    first_pass: u32,
    per_pass: &[Vec<u64>],
) -> Option<Metrics> {
    if outcome.kind != OutcomeKind::Replayed || per_pass.len() != set.pass_count() as usize {
        return None;
    }
    if restored_verdict(outcome) != Some(true) {
        return Some(Metrics::Absent(format!(
            "not_restored: a pass did not start from restored inputs ({} region(s) skipped at \
             restore{}); counters of different passes are not combined",
            outcome.skipped_regions,
            outcome
                .kind
                .reason_code()
                .map(|c| format!(", {c}"))
                .unwrap_or_default()
        )));
    }
    Some(match set.values_from(first_pass, per_pass) {
        Some(values) => Metrics::Values(values),
        None => Metrics::Absent(
            "counters_unavailable: the backend returned values that do not \
             match the set"
                .into(),
        ),
    })
}

/// The snapshot engine's verdict for [`Outcome::inputs_restored`]: every pass after the first
/// started from restored inputs (no restore failed, none skipped a region, and in write-set
/// mode no pass wrote outside the first pass's write set — [`Restorer::finish`] marks that).
fn restored_verdict(outcome: &Outcome) -> Option<bool> {
    (outcome.passes >= 2).then(|| {
        outcome.inputs_restored != Some(false)
            && outcome.skipped_regions == 0
            && outcome.kind.failure().is_none()
    })
}

/// Why a dispatch that asked for counters has none, from how it ended.
fn absent_reason(outcome: &Outcome) -> String {
    match outcome.kind.reason_code() {
        Some(code) => format!("not_collected: replay ended before the counter passes ({code})"),
        None => "not_collected: the dispatch ran once".into(),
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Calls a policy callback; a panic is logged and turned into `None`.
fn call<R>(what: &str, info: &DispatchInfo, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(p) => {
            tracing::error!(
                kernel = info.kernel(),
                dispatch = %info.dispatch_id,
                "replay policy panicked in {what}: {}; replay of this dispatch is abandoned",
                panic_message(p.as_ref())
            );
            None
        }
    }
}

/// What the engine needs of a dispatch before it enters the window: its gate verdict and the
/// ordinary single run. The backend implements it on the submitting thread, where the
/// application's submission is still in hand ([`decide`]).
pub(crate) trait Ordinary {
    /// As [`ReplayTarget::refusal`].
    fn refusal(&self) -> Option<DeclineReason>;
    /// As [`ReplayTarget::run_once`].
    fn run_once(&mut self) -> bool;
}

/// A whole target seen as its [`Ordinary`] part (the synchronous window).
pub(crate) struct Whole<'a>(pub(crate) &'a mut dyn ReplayTarget);

impl Ordinary for Whole<'_> {
    fn refusal(&self) -> Option<DeclineReason> {
        self.0.refusal()
    }
    fn run_once(&mut self) -> bool {
        self.0.run_once()
    }
}

/// Runs the replay window for one dispatch and returns its outcome: [`decide`], then (when
/// the dispatch enters the window) [`Decided::run`] on the same thread and target.
pub(crate) fn run_window<P: ReplayPolicy>(
    policy: &P,
    info: &DispatchInfo,
    target: &mut dyn ReplayTarget,
    inventory: &AllocationInventory,
    settings: &Settings,
) -> Outcome {
    match decide(policy, info, &mut Whole(&mut *target), settings) {
        Ok(decided) => decided.run(info, target, inventory, settings, None, &mut Vec::new()),
        Err(outcome) => outcome,
    }
}

/// A dispatch that enters the replay window, decided on the submitting thread. The window
/// itself ([`Decided::run`]) may run later on another thread — the asynchronous window: the
/// backend returns the submission to the application as soon as the decision is made, with
/// the application's later work ordered behind the window.
pub(crate) struct Decided<'p, P: ReplayPolicy> {
    policy: &'p P,
    started_at: std::time::SystemTime,
    limit: u32,
    fixed: bool,
    decision: Option<Consults<P>>,
    state: P::State,
    set: Option<Arc<MetricSet>>,
    /// The opt-in to repeated host writes applied before the window ([`Outcome::host_writes_repeated`]).
    host_writes_repeated: bool,
    /// Writes to host-visible memory may be repeated once per pass: the policy's
    /// [`host_memory`](ReplayPolicy::host_memory) or `ROCPROF_REPLAY_HOST_MEMORY=repeat`.
    repeat_host: bool,
    /// The agent's write epoch at the decision: the tag of the fingerprints this window may
    /// leave ([carried fingerprints](crate::engine::footprint#carried-fingerprints)).
    epoch: footprint::Tag,
    /// The policy's `restore_mode` and `footprint` answers, asked once: when the window runs,
    /// or earlier when the dispatch is offered to another window's run (`None`: it panicked).
    asked: std::sync::OnceLock<Option<(RestoreMode, FootprintMode)>>,
}

/// [`Decided::resolved`], for a window that took its `Decided` apart.
fn resolve<P: ReplayPolicy>(
    policy: &P,
    asked: &std::sync::OnceLock<Option<(RestoreMode, FootprintMode)>>,
    info: &DispatchInfo,
    settings: &Settings,
) -> Option<(RestoreMode, FootprintMode)> {
    let (restore, footprint) = (*asked.get_or_init(|| {
        let restore = call("restore_mode", info, || policy.restore_mode(info))?;
        let footprint = call("footprint", info, || policy.footprint(info))?;
        Some((restore, footprint))
    }))?;
    let requested = match restore {
        RestoreMode::Auto => settings.restore,
        explicit => explicit,
    };
    let mode = match (requested, footprint) {
        // Strict verifies the whole snapshot before every pass: it holds everything.
        (RestoreMode::Strict, _) => FootprintMode::All,
        (_, FootprintMode::Auto) => settings.footprint,
        (_, explicit) => explicit,
    };
    Some((requested, mode))
}

/// The decision for one dispatch, made on the submitting thread: `Err` is the outcome of a
/// dispatch that did not enter the window (it ran once through [`Ordinary::run_once`]:
/// skipped, or declined before the window — policy panic, too many passes, the gate); `Ok` a
/// window still to run.
// The outcome is moved once per dispatch; boxing it would cost an allocation on the path of
// every skipped dispatch.
#[allow(clippy::result_large_err)]
pub(crate) fn decide<'p, P: ReplayPolicy>(
    policy: &'p P,
    info: &DispatchInfo,
    target: &mut dyn Ordinary,
    settings: &Settings,
) -> Result<Decided<'p, P>, Outcome> {
    let decided = decide_inner(policy, info, target, settings);
    if decided.is_err() {
        // The dispatch ran outside a window.
        footprint::note_device_write(info.agent.0);
    }
    decided
}

#[allow(clippy::result_large_err)]
fn decide_inner<'p, P: ReplayPolicy>(
    policy: &'p P,
    info: &DispatchInfo,
    target: &mut dyn Ordinary,
    settings: &Settings,
) -> Result<Decided<'p, P>, Outcome> {
    let started_at = std::time::SystemTime::now();
    let start = |kind| Outcome {
        started_at: Some(started_at),
        ..Outcome::ordinary(kind)
    };
    let Some(plan) = call("pass_count", info, || policy.pass_count(info)) else {
        target.run_once();
        return Err(start(OutcomeKind::Declined(DeclineReason::PolicyPanicked)));
    };
    // The counters the policy asks for, for every dispatch it does not skip.
    let (set, metrics_panicked) = match plan {
        PassPlan::Skip => (None, false),
        _ => match call("metrics", info, || policy.metrics(info)) {
            Some(set) => (set, false),
            None => (None, true),
        },
    };
    let asked = set.is_some();
    // Ends a dispatch that never entered the window: one ordinary run.
    let ordinary = |target: &mut dyn Ordinary, kind: OutcomeKind, state: P::State| {
        target.run_once();
        let mut outcome = start(kind);
        if asked {
            outcome.metrics = Metrics::Absent(absent_reason(&outcome));
        }
        call("on_end", info, || policy.on_end(info, state, &outcome));
        outcome
    };
    let (limit, fixed, decision, state) = match plan {
        PassPlan::Skip => {
            target.run_once();
            return Err(start(OutcomeKind::Skipped));
        }
        PassPlan::Exactly { passes, state } | PassPlan::UpTo { passes, state, .. }
            if passes <= 1 && set.is_none() =>
        {
            return Err(ordinary(target, OutcomeKind::Skipped, state));
        }
        // Counters only: the application's own pass, then the counter passes.
        PassPlan::Exactly { passes, state } | PassPlan::UpTo { passes, state, .. }
            if passes <= 1 =>
        {
            (1, true, None, state)
        }
        PassPlan::Exactly { passes, state } | PassPlan::UpTo { passes, state, .. }
            if passes > MAX_PASSES =>
        {
            warn_once(&TOO_MANY, || {
                tracing::warn!(
                    passes,
                    "a policy asked for more than {MAX_PASSES} passes; such dispatches are not \
                     replayed"
                )
            });
            return Err(ordinary(
                target,
                OutcomeKind::Declined(DeclineReason::TooManyPasses),
                state,
            ));
        }
        PassPlan::Exactly { passes, state } => (passes, true, None, state),
        PassPlan::UpTo {
            passes,
            state,
            decision,
        } => (passes, false, Some(decision), state),
        PassPlan::Until { state, decision } => {
            (MAX_OPEN_ENDED_PASSES, false, Some(decision), state)
        }
    };
    if metrics_panicked {
        return Err(ordinary(
            target,
            OutcomeKind::Declined(DeclineReason::PolicyPanicked),
            state,
        ));
    }

    // The policy's opt-in to repeated writes to host-visible memory, or the environment's.
    let repeat_host = match call("host_memory", info, || policy.host_memory(info)) {
        Some(HostMemory::Auto) => settings.repeat_host_writes,
        Some(HostMemory::Repeat) => true,
        Some(_) => false,
        None => {
            return Err(ordinary(
                target,
                OutcomeKind::Declined(DeclineReason::PolicyPanicked),
                state,
            ));
        }
    };
    let mut host_writes_repeated = false;
    match gate::refuses(info, target.refusal()) {
        Some(DeclineReason::HostMemory) if repeat_host => {
            // The explicit opt-in: replayed, its writes to host-visible memory repeated.
            host_writes_repeated = true;
        }
        Some(reason) => {
            tracing::info!(kernel = info.kernel(), dispatch = %info.dispatch_id, reason = reason.code(), "not replayed: the dispatch runs once");
            return Err(ordinary(target, OutcomeKind::Declined(reason), state));
        }
        None => {}
    }
    Ok(Decided {
        policy,
        started_at,
        limit,
        fixed,
        decision,
        state,
        set,
        host_writes_repeated,
        repeat_host,
        epoch: footprint::tag(info.agent.0),
        asked: std::sync::OnceLock::new(),
    })
}

impl<P: ReplayPolicy> Decided<'_, P> {
    /// Whether the window collects hardware counters (a metric set was asked for).
    pub(crate) fn collects_counters(&self) -> bool {
        self.set.is_some()
    }

    /// The passes the dispatch asks for when its window may cover a [run](self#runs): a
    /// fixed count (two or more, or any with a metric set, whose counter passes follow), no
    /// `should_continue`, no repeated host writes. `None`: it needs a window of its own.
    pub(crate) fn run_passes(&self) -> Option<u32> {
        (self.fixed
            && (self.limit >= 2 || self.set.is_some())
            && self.decision.is_none()
            && !self.host_writes_repeated)
            .then_some(self.limit)
    }

    /// The metric set it collects (`None`: none): the members of a run all collect the same.
    pub(crate) fn run_counters(&self) -> Option<&MetricSet> {
        self.set.as_deref()
    }

    /// The footprint its policy asks for, resolved against `settings` as its own window
    /// would, when it may join a run: `arguments`, `sampled` or `all`. `None`: a `strict`
    /// restore, `verified`, or a policy that panicked — it needs a window of its own.
    pub(crate) fn run_footprint(
        &self,
        info: &DispatchInfo,
        settings: &Settings,
    ) -> Option<FootprintMode> {
        let (requested, mode) = self.resolved(info, settings)?;
        (requested != RestoreMode::Strict && mode != FootprintMode::Verified).then_some(mode)
    }

    /// The restore and the footprint its window uses: the policy's answers (asked once),
    /// `Auto` resolved by `settings`; a `strict` restore captures everything. `None`: the
    /// policy panicked.
    fn resolved(
        &self,
        info: &DispatchInfo,
        settings: &Settings,
    ) -> Option<(RestoreMode, FootprintMode)> {
        resolve(self.policy, &self.asked, info, settings)
    }

    /// Runs the window: counters prepared, the agent taken, drained, snapshot, the passes,
    /// one completion; `on_end` last.
    ///
    /// With `joins`, dispatches submitted right behind it may join its [run](self#runs); their
    /// outcomes come back in `later`, in order, for the caller to record after this
    /// dispatch's and then release.
    pub(crate) fn run<'s>(
        self,
        info: &DispatchInfo,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        settings: &Settings,
        mut joins: Option<&mut dyn Joins<'s>>,
        later: &mut Vec<Later<'s>>,
    ) -> Outcome {
        let Decided {
            policy,
            started_at,
            limit,
            fixed,
            decision,
            mut state,
            set,
            host_writes_repeated,
            repeat_host,
            epoch,
            asked: answers,
        } = self;
        let start = |kind| Outcome {
            started_at: Some(started_at),
            host_writes_repeated,
            ..Outcome::ordinary(kind)
        };
        let total = fixed.then_some(limit);
        let asked = set.is_some();
        // Each counter pass's configuration, prepared before the window takes the agent.
        let counters_error: RefCell<Option<String>> = RefCell::new(None);
        // A set the backend computes from the launch alone (NVIDIA's `launch__*`): its values
        // describe the application's own execution and need no counter pass.
        let computed_only = set.as_ref().is_some_and(|s| !s.has_counters());
        let counter_passes = match &set {
            Some(set) => match target.prepare_counters(set) {
                Ok(()) if computed_only => 0,
                Ok(()) => set.pass_count(),
                Err(why) => {
                    tracing::warn!(kernel = info.kernel(), dispatch = %info.dispatch_id, "no hardware counters for this dispatch: {why}");
                    *counters_error.borrow_mut() = Some(format!("counters_unavailable: {why}"));
                    0
                }
            },
            None => 0,
        };
        // The values of a computed-only set, from the backend (`None` for other sets, or when
        // preparing it failed).
        let computed = |target: &mut dyn ReplayTarget| -> Option<Metrics> {
            let set = set.as_ref().filter(|_| computed_only)?;
            if counters_error.borrow().is_some() {
                return None;
            }
            Some(match target.counter_values(0) {
                Ok(v) => match set.values_from(0, &[v]) {
                    Some(values) => Metrics::Values(values),
                    None => Metrics::Absent(
                        "counters_unavailable: the backend returned values that do not match \
                         the set"
                            .into(),
                    ),
                },
                Err(why) => Metrics::Absent(format!("counters_unavailable: {why}")),
            })
        };
        if limit <= 1 && counter_passes == 0 {
            // Only counters were asked for, and no counter pass is needed (a computed-only
            // set) or none can be collected: one ordinary run.
            target.run_once();
            let mut outcome = start(OutcomeKind::Skipped);
            outcome.metrics = computed(target)
                .unwrap_or_else(|| Metrics::Absent(counters_error.take().unwrap_or_default()));
            call("on_end", info, || policy.on_end(info, state, &outcome));
            return outcome;
        }
        let window_start = Instant::now();
        if let Err(reason) = phases::timed(Phase::Begin, || target.begin()) {
            tracing::warn!(kernel = info.kernel(), dispatch = %info.dispatch_id, reason = reason.code(), "replay declined: the dispatch runs once");
            footprint::note_device_write(info.agent.0);
            let kind = declined_run(target.run_once(), reason);
            let mut outcome = start(kind);
            if asked {
                outcome.metrics =
                    computed(target).unwrap_or_else(|| Metrics::Absent(absent_reason(&outcome)));
            }
            call("on_end", info, || policy.on_end(info, state, &outcome));
            return outcome;
        }
        // From here on the window holds the agent: every way out ends it before `on_end`.
        let finish = |target: &mut dyn ReplayTarget, state: P::State, mut outcome: Outcome| {
            phases::timed(Phase::End, || target.end());
            outcome.run = outcome.run.max(1);
            outcome.window_time = window_start.elapsed();
            if phases::enabled() {
                phases::add(Phase::Window, outcome.window_time);
            }
            outcome.inputs_restored = restored_verdict(&outcome);
            if asked && outcome.metrics == Metrics::NotAsked {
                outcome.metrics = computed(target).unwrap_or_else(|| {
                    Metrics::Absent(
                        counters_error
                            .borrow_mut()
                            .take()
                            .unwrap_or_else(|| absent_reason(&outcome)),
                    )
                });
            }
            call("on_end", info, || policy.on_end(info, state, &outcome));
            outcome
        };
        let decline = |target: &mut dyn ReplayTarget, reason: DeclineReason, state: P::State| {
            tracing::warn!(kernel = info.kernel(), dispatch = %info.dispatch_id, reason = reason.code(), "replay declined: the dispatch runs once");
            let kind = declined_run(target.run_once(), reason);
            finish(target, state, start(kind))
        };

        // Fingerprints carried from the agent's previous window: this window takes them (a
        // window that does not leave its own leaves none). Its own are tagged with the epoch of
        // its decision: work submitted after it (which may run after this window: behind it on
        // its queue, or behind its isolation gate) bumps the epoch.
        let carried = footprint::take_carried(info.agent.0);
        if let Err(reason) = phases::timed(Phase::Drain, || target.drain()) {
            return decline(target, reason, state);
        }
        let Some((requested, footprint_mode)) = resolve(policy, &answers, info, settings) else {
            return decline(target, DeclineReason::PolicyPanicked, state);
        };
        // Fingerprints after the last pass too (`verified`), or only after the first.
        let verified = footprint_mode == FootprintMode::Verified;
        let Planned {
            mut snapshot,
            watch: mut outside,
            kind: footprint_kind,
            vars,
            named,
        } = match plan_and_capture(
            info,
            target,
            inventory,
            settings,
            footprint_mode,
            (epoch, &carried),
        ) {
            Ok(s) => s,
            Err(reason) => return decline(target, reason, state),
        };

        // Host memory the arguments name, or pointers stored in the module variables: never
        // restored; checked after the first pass, or, with the explicit opt-in, left to be
        // written once per pass.
        let mut watch = target.host_watch();
        let mut stored_repeats = false;
        match phases::timed(Phase::Variables, || {
            stored::stored_host_memory(target, &vars)
        }) {
            Ok(stored) => {
                for range in stored {
                    if !watch.contains(&range) {
                        watch.push(range);
                    }
                }
            }
            // The explicit opt-in covers host memory reached this way too.
            Err(DeclineReason::HostMemory) if repeat_host => stored_repeats = true,
            Err(reason) => {
                tracing::debug!(
                    kernel = info.kernel(),
                    reason = reason.code(),
                    "a pointer stored in a module variable leads to memory the window cannot \
                     restore or watch: the dispatch runs once"
                );
                drop(snapshot);
                return decline(target, reason, state);
            }
        }
        let repeats = host_writes_repeated || stored_repeats || (repeat_host && !watch.is_empty());
        if repeats {
            watch.clear();
        }
        // SAFETY: the target vouches that every watched range is host-readable for the window.
        let watched = unsafe { checksum(&watch) };

        // A window over a run of dispatches (`ROCPROF_REPLAY_RUN`): the queue's next
        // dispatches join after this one's first pass (see [runs](self#runs)). With counters,
        // as many as one counter pass can measure (each member armed with its own counters).
        let counter_ranges = if counter_passes > 0 {
            target.counter_ranges()
        } else {
            0
        };
        let run_max = if settings.run > 1 {
            // The first condition that keeps this dispatch's window to itself, for the log.
            let alone = [
                (joins.is_none(), "the backend offers no later dispatches"),
                (
                    footprint_mode == FootprintMode::Verified,
                    "footprint verified",
                ),
                (requested == RestoreMode::Strict, "strict restores"),
                (
                    set.is_some() && counter_ranges < 2,
                    "counters, one dispatch per counter pass",
                ),
                (
                    !fixed || decision.is_some(),
                    "the policy decides passes as they run",
                ),
                (limit < 2 && counter_passes == 0, "fewer than two passes"),
                (
                    repeats || !watch.is_empty(),
                    "host memory watched or repeated",
                ),
            ]
            .into_iter()
            .find_map(|(blocks, why)| blocks.then_some(why))
            // Looked up only when nothing else keeps the window to itself.
            .or_else(|| {
                footprint::SOLO
                    .contains(info.agent.0, info.kernel_object)
                    .then_some("the kernel once wrote outside a run's footprint")
            });
            match alone {
                None if counter_passes > 0 => settings.run.min(counter_ranges),
                None => settings.run,
                Some(why) => {
                    tracing::debug!(kernel = info.kernel(), why, "a window of its own");
                    1
                }
            }
        } else {
            1
        };
        let mut riders: Vec<Rider<'s>> = Vec::new();
        // A later member's pass did not run after earlier members' did: the run's state is
        // none of its executions until the final step.
        let mut chain_broken = false;

        let mut restorer = Restorer::Undecided;
        // The last restore was queued, not waited for ([`DeviceMemory::queue_restores`]).
        let mut restore_queued = false;
        // Queued restores' copies run after `copy` returned (and its pins were dropped): from
        // the first one on, the snapshot's allocations stay pinned until the window is over,
        // so a free of one (another thread's) waits for them, bounded, as for any copy.
        let mut queued_pins = None;

        let mut outcome = start(OutcomeKind::Replayed);
        outcome.host_writes_repeated = repeats;
        outcome.passes = 0;
        outcome.snapshot_bytes = snapshot.bytes;
        outcome.staging = snapshot.staging_label();
        outcome.snapshot_time = snapshot.capture_time;
        outcome.snapshot_regions = snapshot.region_count() as u32;
        outcome.skipped_regions = snapshot.skipped;
        outcome.footprint = Some(footprint_kind);
        outcome.watched_bytes = outside.as_ref().map_or(0, |w| w.bytes);
        outcome.carried_bytes = outside.as_ref().map_or(0, |w| w.carried_bytes);
        outcome.fingerprint_time = outside.as_ref().map_or(Duration::ZERO, |w| w.time);
        let mut guard = LoopContexts::new();
        let mut index = 0u32;
        // The counter pass running (index in the set), once the policy's passes are done.
        let mut counter: Option<u32> = None;
        let mut first_counter_pass = 0u32;
        let mut counter_values: Vec<Vec<u64>> = Vec::new();
        loop {
            if index == 1
                && restore_queued
                && settings.ahead
                && fixed
                && decision.is_none()
                && counter.is_none()
                && counter_passes == 0
                && limit > 2
                && !matches!(restorer, Restorer::WriteSet { strict: true, .. })
                && target.queues_ahead()
                && riders.iter().all(|r| r.target.queues_ahead())
                && call("passes_ahead", info, || policy.passes_ahead(info)).unwrap_or(false)
                && riders.iter().all(|r| r.member.passes_ahead(&r.info))
            {
                let end = ahead::run(
                    ahead::First {
                        policy,
                        info,
                        total,
                        state: &mut state,
                        contexts: &mut guard,
                    },
                    limit,
                    target,
                    &mut riders,
                    &mut restorer,
                    &snapshot,
                    (inventory, settings),
                    &mut outcome,
                );
                if end.late {
                    // A pass (or the restore before it) is still running: its result stands
                    // when it ends; nothing is diffed, restored or written back meanwhile.
                    drop(guard);
                    outcome.kind = OutcomeKind::Failed(if end.restore_stuck {
                        FailureReason::RestoreStuck
                    } else {
                        FailureReason::PassStuck
                    });
                    target.complete();
                    restorer.leak();
                    snapshot.leak();
                    let first = finish(target, state, outcome);
                    return end_run(first, riders, later);
                }
                match end.stop {
                    Some(ahead::Stop::Restore(error)) => {
                        let reason = restore_failed(info, error, restorer, snapshot);
                        drop(guard);
                        outcome.kind = OutcomeKind::Failed(reason);
                        rerun(target, &mut outcome, true);
                        rerun_riders(&mut riders, &mut outcome);
                        let first = finish(target, state, outcome);
                        return end_run(first, riders, later);
                    }
                    Some(ahead::Stop::Panicked | ahead::Stop::NotSubmitted(_)) => {
                        // Memory is as just restored: as for a stop before any later pass.
                        drop(guard);
                        outcome.kind = match end.stop {
                            Some(ahead::Stop::NotSubmitted(reason)) => {
                                OutcomeKind::Declined(reason)
                            }
                            _ => OutcomeKind::Declined(DeclineReason::PolicyPanicked),
                        };
                        if verified {
                            check_late_writes(
                                info,
                                outside.as_mut(),
                                inventory,
                                target,
                                &mut outcome,
                            );
                        }
                        end_early(
                            target,
                            &mut outcome,
                            true,
                            restorer,
                            snapshot,
                            (inventory, settings),
                            &mut riders,
                        );
                        let first = finish(target, state, outcome);
                        return end_run(first, riders, later);
                    }
                    Some(ahead::Stop::Rider) | None => {
                        if let Some(kind) = end.kind {
                            outcome.kind = kind;
                        }
                        chain_broken = end.rider_broke || end.stop.is_some();
                        break;
                    }
                }
            }
            let mut scope = P::PassState::default();
            let mut pass = Pass {
                index,
                total,
                info,
                contexts: &mut guard,
            };
            if counter.is_none()
                && phases::timed(Phase::Policy, || {
                    call("on_pass", info, || {
                        policy.on_pass(&mut pass, &mut state, &mut scope)
                    })
                })
                .is_none()
            {
                // Memory is in its captured state (pass 0, or just restored): one ordinary run,
                // or, after a write-set restore, the first pass's result written back.
                drop(guard);
                outcome.kind = OutcomeKind::Declined(DeclineReason::PolicyPanicked);
                if verified {
                    check_late_writes(info, outside.as_mut(), inventory, target, &mut outcome);
                }
                end_early(
                    target,
                    &mut outcome,
                    index > 0,
                    restorer,
                    snapshot,
                    (inventory, settings),
                    &mut riders,
                );
                let first = finish(target, state, outcome);
                return end_run(first, riders, later);
            }
            // Counter passes are not timed: their times would include the counters' set-up.
            let timed = counter.is_none() && service_active(Service::DispatchTiming);
            target.arm_counters(counter);
            // A later pass without counters is queued behind its restore, the run's later
            // members' passes behind it, and all are waited for together.
            let queued = index > 0 && counter.is_none() && queues_passes(target, &riders);
            let Queue {
                ran,
                riding,
                settled,
            } = if queued {
                queue_pass(target, &mut riders, index, timed, &guard)
            } else {
                Queue {
                    ran: phases::timed(Phase::Pass, || target.run_pass(timed)),
                    riding: None,
                    settled: None,
                }
            };
            // A counter pass over a run: the later members' passes follow the first member's
            // inside the same counter pass, each armed with its own counters.
            let riding = match (&ran, counter) {
                (Ok(_), Some(c)) if !riders.is_empty() => Some(count_riders(&mut riders, c)),
                _ => riding,
            };
            target.arm_counters(None);
            match ran {
                Ok(kernel_time) if counter.is_some() => {
                    outcome.passes += 1;
                    outcome.pass_times.push(kernel_time);
                    let c = counter.unwrap_or_default();
                    let read = target.counter_values(c).map(|values| {
                        counter_values.push(values);
                        // Each later member's failure is its own.
                        if let Some(Ok(())) = &riding {
                            rider_counter_values(&mut riders, c);
                        }
                    });
                    match read {
                        Ok(()) => {}
                        Err(why) => {
                            tracing::warn!(kernel = info.kernel(), dispatch = %info.dispatch_id, "reading the counters of a pass failed: {why}");
                            *counters_error.borrow_mut() =
                                Some(format!("counters_unavailable: {why}"));
                            break;
                        }
                    }
                }
                Ok(kernel_time) => {
                    outcome.passes += 1;
                    outcome.pass_times.push(kernel_time);
                    let report = PassReport {
                        index,
                        total,
                        info,
                        timed,
                        kernel_time,
                    };
                    if !pass_end(policy, &report, &mut state, &mut scope) {
                        // The pass ran from the snapshot: its result is one valid execution —
                        // of this dispatch; a run's later members have not run this pass.
                        outcome.kind = OutcomeKind::Declined(DeclineReason::PolicyPanicked);
                        chain_broken = index > 0 && !riders.is_empty();
                        break;
                    }
                }
                Err(PassError::NotSubmitted(reason)) => {
                    // Nothing of this pass ran: memory is as captured or just restored.
                    tracing::warn!(
                        kernel = info.kernel(),
                        reason = reason.code(),
                        "a replay pass could not be submitted; the dispatch runs once"
                    );
                    drop(guard);
                    outcome.kind = OutcomeKind::Declined(reason);
                    if verified {
                        check_late_writes(info, outside.as_mut(), inventory, target, &mut outcome);
                    }
                    end_early(
                        target,
                        &mut outcome,
                        index > 0,
                        restorer,
                        snapshot,
                        (inventory, settings),
                        &mut riders,
                    );
                    let first = finish(target, state, outcome);
                    return end_run(first, riders, later);
                }
                Err(PassError::Yielded) => {
                    // The application's own execution may be waiting for work this window holds
                    // up: the window ends now, without waiting for it. Nothing was restored or
                    // relaunched: whenever it finishes, its result is the one execution.
                    drop(guard);
                    outcome.passes += 1;
                    outcome.pass_times.push(None);
                    tracing::info!(
                        kernel = info.kernel(),
                        dispatch = %info.dispatch_id,
                        "other work waited for the agent while the first pass had not finished \
                         (the kernel may be waiting for it): replay of this dispatch ends with \
                         that pass (ROCPROF_REPLAY_YIELD_MS)"
                    );
                    outcome.kind = OutcomeKind::Declined(DeclineReason::LockContention);
                    target.complete();
                    drop(restorer);
                    drop(snapshot);
                    let first = finish(target, state, outcome);
                    return end_run(first, riders, later);
                }
                Err(PassError::Late) => {
                    // The pass started from the captured inputs: once it finishes, its result is
                    // one correct execution. Restoring or running again while it runs would race
                    // with it, so it is waited for, and then replay of this dispatch ends.
                    drop(guard);
                    outcome.passes += 1;
                    outcome.pass_times.push(None);
                    let settled = settled.unwrap_or_else(|| target.settle_late_pass());
                    outcome.kind = if settled {
                        tracing::warn!(
                            kernel = info.kernel(),
                            dispatch = %info.dispatch_id,
                            "a replay pass outlived the pass deadline; replay of this dispatch \
                             stops and the application sees that pass's result"
                        );
                        OutcomeKind::Declined(DeclineReason::PassTimeout)
                    } else if restore_queued && target.restore_pending() {
                        // The pass never started: the restore queued before it is stuck, and
                        // memory may be partly restored when it runs.
                        OutcomeKind::Failed(FailureReason::RestoreStuck)
                    } else {
                        OutcomeKind::Failed(FailureReason::PassStuck)
                    };
                    // A run's later members follow the finished pass once more (those queued
                    // behind it ran already), so memory holds one execution of the whole run.
                    if outcome.kind.failure().is_none() {
                        follow_riders(&mut riders, index, &mut outcome);
                    }
                    // The late pass's result stands (it may still run: no diff, no write-back).
                    target.complete();
                    if settled || !restore_queued {
                        drop(restorer);
                        drop(snapshot);
                    } else {
                        // The restore queued before it may be what is stuck: its copies may
                        // still read the staging buffers.
                        restorer.leak();
                        snapshot.leak();
                    }
                    let first = finish(target, state, outcome);
                    return end_run(first, riders, later);
                }
            }
            drop(scope);
            let completed = index + 1;
            if run_max > 1 {
                if index == 0
                    && counter.is_none()
                    && let Some(joins) = joins.as_deref_mut()
                {
                    let joined = join_run(
                        &mut riders,
                        joins,
                        Joining {
                            limit,
                            counters: set.as_deref(),
                            run_max,
                            unchecked: footprint_kind == FootprintKind::Unchecked,
                            covers_all: footprint_kind == FootprintKind::All,
                            first: info,
                            contexts: &guard,
                        },
                        target,
                        &mut snapshot,
                        outside.as_mut(),
                        (inventory, settings),
                    );
                    outcome.run = 1 + riders.len() as u32;
                    if let Err(kind) = joined {
                        // The run ends with every member's first pass: the application's own
                        // executions, one after another; nothing was restored.
                        outcome.kind = kind;
                        break;
                    }
                } else if !riders.is_empty()
                    && let Err(broken) = riding.unwrap_or_else(|| ride(&mut riders, index, &guard))
                {
                    outcome.kind = broken.kind;
                    if broken.late {
                        // A later member's pass is still running: nothing is diffed or written
                        // back while it may (its result stands, as for a late first member).
                        drop(guard);
                        target.complete();
                        drop(restorer);
                        drop(snapshot);
                        let first = finish(target, state, outcome);
                        return end_run(first, riders, later);
                    }
                    // Memory holds this pass's run up to the member that stopped: the final
                    // step below brings back the first passes' result.
                    chain_broken = true;
                    break;
                }
            }
            // SAFETY: as for `watched` above.
            if index == 0 && !watch.is_empty() && unsafe { checksum(&watch) } != watched {
                tracing::debug!(
                    kernel = info.kernel(),
                    dispatch = %info.dispatch_id,
                    "host memory the kernel's arguments name changed during the first pass: replay \
                     stops after it"
                );
                outcome.kind = OutcomeKind::Declined(DeclineReason::HostMemoryWritten);
                break;
            }
            if let Some(c) = counter {
                if c + 1 >= counter_passes {
                    break;
                }
            } else if completed >= limit && counter_passes == 0 {
                break;
            }
            if target.contended() {
                tracing::warn!(
                    kernel = info.kernel(),
                    dispatch = %info.dispatch_id,
                    passes = completed,
                    "other work waited for the agent past the lock deadline: replay stops after this pass"
                );
                outcome.kind = OutcomeKind::Declined(DeclineReason::LockContention);
                break;
            }
            if let Some(c) = counter {
                counter = Some(c + 1);
            } else {
                let mut more = completed < limit;
                if let (true, Some(decision)) = (more, &decision) {
                    match phases::timed(Phase::Policy, || {
                        call("should_continue", info, || {
                            decision.ask(policy, info, &state, completed)
                        })
                    }) {
                        Some(true) => {}
                        Some(false) => more = false,
                        None => {
                            outcome.kind = OutcomeKind::Declined(DeclineReason::PolicyPanicked);
                            break;
                        }
                    }
                }
                if !more {
                    if counter_passes == 0 {
                        break;
                    }
                    // The policy's passes are done: the counter passes follow.
                    counter = Some(0);
                    first_counter_pass = completed;
                }
            }
            // Another pass follows: the first must not have written outside the snapshot.
            if index == 0
                && let Some(w) = outside.as_mut()
            {
                let skipped = w.skipped;
                let verdict = phases::timed(Phase::WatchAfter, || w.changed(inventory, target));
                outcome.fingerprint_time = w.time;
                outcome.skipped_regions += w.skipped - skipped;
                let stop = match verdict {
                    Ok(Verdict::Unchanged) => {
                        if footprint_mode == FootprintMode::Sampled {
                            // A checked run checked every member: a clean check each.
                            footprint::SAMPLING.clean(info.agent.0, info.kernel_object);
                            for r in &riders {
                                footprint::SAMPLING.clean(r.info.agent.0, r.info.kernel_object);
                            }
                        }
                        footprint::SUSPECTED.remove(info.agent.0, info.kernel_object);
                        None
                    }
                    Ok(Verdict::CarriedDiffers) => {
                        footprint::SUSPECTED.insert(info.agent.0, info.kernel_object);
                        tracing::info!(
                            kernel = info.kernel(),
                            dispatch = %info.dispatch_id,
                            "memory outside the snapshot differs from the fingerprints carried \
                             from the previous window (this first pass wrote there, a later pass \
                             of the previous window did, or something the engine was not told \
                             of): replay stops after the first pass, and the kernel's next \
                             dispatch reads every fingerprint fresh"
                        );
                        Some(DeclineReason::FootprintUnchecked)
                    }
                    Ok(Verdict::Written) if !riders.is_empty() => {
                        // Which member wrote there is not known: each gets windows of its own
                        // from now on, where the writer is found.
                        footprint::SOLO.insert(info.agent.0, info.kernel_object);
                        for r in &riders {
                            footprint::SOLO.insert(r.info.agent.0, r.info.kernel_object);
                        }
                        tracing::info!(
                            kernel = info.kernel(),
                            dispatch = %info.dispatch_id,
                            members = riders.len() + 1,
                            "the first passes of a run wrote memory no member's arguments name: \
                             replay stops after them, and these kernels get windows of their own"
                        );
                        Some(DeclineReason::WroteOutsideFootprint)
                    }
                    Ok(Verdict::Written) => {
                        footprint::SUSPECTED.remove(info.agent.0, info.kernel_object);
                        let regions: Vec<(usize, usize)> =
                            snapshot.regions().chain(w.regions()).collect();
                        if footprint::REACH.learn(
                            info.agent.0,
                            info.kernel_object,
                            &named,
                            &regions,
                            &w.written,
                        ) {
                            tracing::info!(
                                kernel = info.kernel(),
                                dispatch = %info.dispatch_id,
                                reach = footprint::REACH.get(info.agent.0, info.kernel_object),
                                "the first pass wrote allocations adjoining one its arguments \
                                 name: replay stops after it, and later dispatches of this kernel \
                                 capture that far past the addresses they name"
                            );
                        } else {
                            footprint::REMEMBERED.insert(info.agent.0, info.kernel_object);
                            tracing::info!(
                                kernel = info.kernel(),
                                dispatch = %info.dispatch_id,
                                "the first pass wrote memory its arguments do not name: replay \
                                 stops after it, and later dispatches of this kernel capture \
                                 every allocation"
                            );
                        }
                        Some(DeclineReason::WroteOutsideFootprint)
                    }
                    Err(DiffError::Stuck) => Some(DeclineReason::CopyTimeout),
                    Err(error) => {
                        tracing::warn!(
                            kernel = info.kernel(),
                            ?error,
                            "memory outside the snapshot could not be fingerprinted after the \
                             first pass: replay stops after it"
                        );
                        Some(DeclineReason::FootprintUnchecked)
                    }
                };
                if let Some(reason) = stop {
                    outcome.kind = OutcomeKind::Declined(reason);
                    break;
                }
            }
            if matches!(restorer, Restorer::Undecided) {
                match phases::timed(Phase::Diff, || {
                    Restorer::choose(
                        requested,
                        !riders.is_empty(),
                        &snapshot,
                        inventory,
                        target,
                        settings,
                        &mut outcome,
                    )
                }) {
                    Ok(chosen) => restorer = chosen,
                    Err(reason) => {
                        // Memory holds the first pass's result, untouched: that is the execution.
                        tracing::warn!(
                            kernel = info.kernel(),
                            dispatch = %info.dispatch_id,
                            reason = reason.code(),
                            "comparing memory with the snapshot did not finish in time: replay \
                             stops after the first pass"
                        );
                        outcome.kind = OutcomeKind::Declined(reason);
                        break;
                    }
                }
            }
            // Queued when the next pass is: collecting it waits for the restore too.
            restore_queued =
                counter.is_none() && queues_passes(target, &riders) && target.queue_restores(true);
            if restore_queued && queued_pins.is_none() {
                queued_pins = Some(snapshot.pin(inventory));
            }
            let restored = phases::timed(Phase::Restore, || {
                restorer.restore(&snapshot, inventory, target, settings, &mut outcome)
            });
            if restore_queued {
                target.queue_restores(false);
            }
            match restored {
                Ok(()) => {}
                Err(error) => {
                    let reason = restore_failed(info, error, restorer, snapshot);
                    drop(guard);
                    outcome.kind = OutcomeKind::Failed(reason);
                    rerun(target, &mut outcome, true);
                    rerun_riders(&mut riders, &mut outcome);
                    let first = finish(target, state, outcome);
                    return end_run(first, riders, later);
                }
            }
            index += 1;
        }
        drop(guard);
        // The watched memory as the next window finds it: fingerprinted after the last pass
        // (`verified`), or, as the later passes started from the same inputs, as the check
        // after the first pass found it.
        let clean = if verified {
            check_late_writes(info, outside.as_mut(), inventory, target, &mut outcome)
        } else {
            outcome.kind.failure().is_none() && outside.as_ref().is_some_and(Watch::clean)
        };
        if clean && let Some(w) = &outside {
            w.commit();
        }
        if chain_broken && !matches!(restorer, Restorer::WriteSet { .. }) {
            // A pass of the run stopped at a later member after full restores: every byte back,
            // and the whole run once more from there.
            // (A pass, not the ordinary run: the completion below is the application's one.)
            match snapshot.restore(inventory, target) {
                Ok(stats) => {
                    outcome.restored_bytes += stats.bytes;
                    outcome.restore_time += stats.time;
                    let ran = match target.run_pass(false) {
                        Ok(_) => true,
                        Err(PassError::Late) => target.settle_late_pass(),
                        Err(_) => false,
                    };
                    outcome.passes += 1;
                    outcome.pass_times.push(None);
                    if ran {
                        rerun_riders(&mut riders, &mut outcome);
                    } else {
                        outcome.kind = OutcomeKind::Failed(FailureReason::RunFailed);
                    }
                }
                Err(_) => outcome.kind = OutcomeKind::Failed(FailureReason::RestoreFailed),
            }
        }
        let ended = phases::timed(Phase::Final, || {
            restorer.finish(&snapshot, inventory, target, settings, &mut outcome)
        });
        let stuck = ended == Err(FailureReason::RestoreStuck);
        if let Err(reason) = ended {
            fail_final(&mut outcome, reason);
        }
        if let Some(set) = &set {
            if let Some(metrics) = collected(set, &outcome, first_counter_pass, &counter_values) {
                outcome.metrics = metrics;
            }
            // Each later member of a run its own values, from its own counter passes.
            for r in &mut riders {
                let mut own = outcome.clone();
                own.kind = r.kind.unwrap_or(outcome.kind);
                own.passes = r.passes;
                r.metrics = match &r.counters_error {
                    Some(why) if own.kind == OutcomeKind::Replayed => {
                        Some(Metrics::Absent(format!("counters_unavailable: {why}")))
                    }
                    _ => collected(set, &own, first_counter_pass, &r.counter_values),
                };
            }
        }
        phases::timed(Phase::Complete, || target.complete());
        // Staging goes back before the agent does: the next window can reuse it at once —
        // unless a stuck copy may still read it.
        settle_staging(restorer, snapshot, stuck);
        let first = finish(target, state, outcome);
        end_run(first, riders, later)
    }
}

/// `on_pass_end` of a pass that ran; `false`: the policy panicked.
fn pass_end<P: ReplayPolicy>(
    policy: &P,
    report: &PassReport<'_>,
    state: &mut P::State,
    scope: &mut P::PassState,
) -> bool {
    phases::timed(Phase::Policy, || {
        call("on_pass_end", report.info, || {
            policy.on_pass_end(report, state, scope)
        })
    })
    .is_some()
}

/// A restore between passes failed: the reason, logged; the staging given back, or leaked
/// when copies may still read it.
fn restore_failed(
    info: &DispatchInfo,
    error: RestoreError,
    restorer: Restorer,
    snapshot: Snapshot,
) -> FailureReason {
    let reason = match error {
        RestoreError::Failed => FailureReason::RestoreFailed,
        RestoreError::Stuck => {
            // Copies may still read the staging buffers: never reuse them.
            restorer.leak();
            snapshot.leak();
            FailureReason::RestoreStuck
        }
    };
    tracing::error!(
        kernel = info.kernel(),
        dispatch = %info.dispatch_id,
        reason = reason.code(),
        "restore failed between passes: device memory holds a partly restored state; the \
         dispatch runs once more on it and its result may be wrong"
    );
    reason
}

/// Whether the window's next later pass is queued ([`queue_pass`]): the backend submits this
/// dispatch's later passes without waiting for them, and the run's later members' too.
fn queues_passes(target: &dyn ReplayTarget, riders: &[Rider<'_>]) -> bool {
    target.splits_passes() && riders.iter().all(|r| r.target.splits_passes())
}

/// A later pass of the window as [`queue_pass`] ran it.
struct Queue {
    /// The first member's pass, as [`ReplayTarget::run_pass`] would have given it.
    ran: Result<Option<Duration>, PassError>,
    /// The run's later members' passes of the same index, queued behind it (`None`: none were).
    riding: Option<Result<(), Broken>>,
    /// After a late first pass with members queued behind it: whether it completed within
    /// the late deadline (asked here, before they were collected).
    settled: Option<bool>,
}

/// A later pass queued: the first member's pass submitted (behind the restore before it,
/// which may be queued too), the run's later members' passes behind it, then the first
/// member's collected and the others' (each member's `on_pass_end` after its own pass). One
/// wait for the restore and every member's pass. The first member's contexts (`first`) are
/// off the thread's stack while the others' policies run.
fn queue_pass(
    target: &mut dyn ReplayTarget,
    riders: &mut [Rider<'_>],
    index: u32,
    timed: bool,
    first: &LoopContexts,
) -> Queue {
    let submitting = phases::enabled().then(Instant::now);
    if let Err(error) = target.submit_pass(timed) {
        return Queue {
            ran: Err(error),
            riding: None,
            settled: None,
        };
    }
    let submitted = submitting.map_or(Duration::ZERO, |t| t.elapsed());
    let aside = first.set_aside();
    let behind = (!riders.is_empty()).then(|| submit_riders(riders, index, true));
    let collecting = phases::enabled().then(Instant::now);
    let ran = target.collect_pass();
    if let Some(t) = collecting {
        phases::add(Phase::Pass, submitted + t.elapsed());
    }
    let mut settled = None;
    let riding = behind.map(|behind| {
        let stuck = matches!(ran, Err(PassError::Late)) && {
            let done = target.settle_late_pass();
            settled = Some(done);
            !done
        };
        collect_riders(riders, index, behind, stuck)
    });
    first.unpark(aside);
    Queue {
        ran,
        riding,
        settled,
    }
}

/// What [`plan_and_capture`] made of a dispatch.
struct Planned {
    snapshot: Snapshot,
    /// The memory left out of the snapshot and fingerprinted instead (`None`: none).
    watch: Option<Watch>,
    kind: FootprintKind,
    /// The module variables the snapshot holds (address, length).
    vars: Vec<(usize, usize)>,
    /// The addresses the dispatch's arguments may name ([`footprint::named`]; empty when the
    /// arguments are unknown or not looked at).
    named: Vec<usize>,
}

/// Plans the snapshot — the arguments footprint when `mode` and the kernel's history allow
/// it — fingerprints the allocations it leaves out (or, for a kernel the sampled footprint
/// trusts, leaves them unchecked), and captures.
fn plan_and_capture(
    info: &DispatchInfo,
    target: &mut dyn ReplayTarget,
    inventory: &AllocationInventory,
    settings: &Settings,
    mode: FootprintMode,
    (epoch, carried): (footprint::Tag, &footprint::Carried),
) -> Result<Planned, DeclineReason> {
    let vars = phases::timed(Phase::Variables, || target.module_variables())?;
    let plan_start = phases::enabled().then(Instant::now);
    let mut plan = SnapshotPlan::new(inventory, info.agent, &vars, u64::MAX)?;
    let mut watch = None;
    let mut kind = FootprintKind::All;
    let mut named = Vec::new();
    if mode != FootprintMode::All
        && !footprint::REMEMBERED.contains(info.agent.0, info.kernel_object)
        && let Some(args) = target.argument_bytes()
    {
        named = footprint::named(&args);
        let reach = footprint::REACH.get(info.agent.0, info.kernel_object);
        let watched = footprint::split(&mut plan, &named, reach);
        if let Some(t) = plan_start {
            phases::add(Phase::Plan, t.elapsed());
        }
        if watched.is_empty() {
            // The arguments name every allocation.
        } else if mode == FootprintMode::Sampled
            && !footprint::SAMPLING.should_check(info.agent.0, info.kernel_object)
        {
            kind = FootprintKind::Unchecked;
        } else {
            // A suspect's fingerprints are all read now: its verdict must be its own.
            let none = footprint::Carried::default();
            let carried = if footprint::SUSPECTED.contains(info.agent.0, info.kernel_object) {
                &none
            } else {
                carried
            };
            match phases::timed(Phase::WatchBefore, || {
                Watch::take(
                    watched.clone(),
                    inventory,
                    target,
                    info.agent.0,
                    epoch,
                    carried,
                )
            }) {
                Ok(w) => {
                    watch = Some(w);
                    kind = if mode == FootprintMode::Verified {
                        FootprintKind::Verified
                    } else {
                        FootprintKind::Arguments
                    };
                }
                Err(DiffError::Stuck) => return Err(DeclineReason::CopyTimeout),
                Err(error) => {
                    tracing::debug!(
                        ?error,
                        "memory outside the arguments cannot be fingerprinted: every allocation \
                         is captured"
                    );
                    plan.regions.extend(watched);
                }
            }
        }
    }
    let bytes = plan.regions.iter().map(|r| r.size as u64).sum::<u64>();
    if bytes > settings.budget {
        return Err(DeclineReason::OverBudget);
    }
    // The arena sized for what this plan captures, not for every allocation of the agent.
    phases::timed(Phase::Arena, || target.reserve_staging(bytes as usize));
    let snapshot = phases::timed(Phase::Capture, || {
        Snapshot::capture(plan, inventory, target)
    })?;
    Ok(Planned {
        snapshot,
        watch,
        kind,
        vars,
        named,
    })
}

/// After the last of two or more passes: whether a later pass wrote the watched memory, which
/// the first did not (else replay had stopped after it). That cannot be undone: `failed`.
/// `true` when the watched memory was found unchanged.
fn check_late_writes(
    info: &DispatchInfo,
    watch: Option<&mut Watch>,
    inventory: &AllocationInventory,
    target: &mut dyn ReplayTarget,
    outcome: &mut Outcome,
) -> bool {
    let Some(w) = watch else { return false };
    if outcome.passes < 2 || outcome.kind.failure().is_some() {
        return false;
    }
    let skipped = w.skipped;
    let verdict = w.changed(inventory, target);
    outcome.fingerprint_time = w.time;
    outcome.skipped_regions += w.skipped - skipped;
    match verdict {
        Ok(Verdict::Unchanged) => return true,
        Ok(Verdict::Written | Verdict::CarriedDiffers) => {
            footprint::REMEMBERED.insert(info.agent.0, info.kernel_object);
            tracing::error!(
                kernel = info.kernel(),
                dispatch = %info.dispatch_id,
                "a later pass wrote memory outside the snapshot that the first pass did not: it \
                 cannot be restored, and the application's result may be wrong there \
                 (ROCPROF_REPLAY_FOOTPRINT=all captures every allocation)"
            );
            outcome.kind = OutcomeKind::Failed(FailureReason::LateWriteOutsideFootprint);
        }
        Err(error) => tracing::warn!(
            kernel = info.kernel(),
            ?error,
            "memory outside the snapshot could not be fingerprinted after the last pass (the \
             first pass did not write there)"
        ),
    }
    false
}

/// The outcome of a dispatch declined inside the window: one ordinary run — or `failed` when
/// even that could not be submitted (a backend whose application submission already returned
/// has no other way to run it).
fn declined_run(ran: bool, reason: DeclineReason) -> OutcomeKind {
    if ran {
        OutcomeKind::Declined(reason)
    } else {
        tracing::error!(
            reason = reason.code(),
            "the ordinary run of a declined dispatch could not be submitted: the application \
             has no result of it"
        );
        OutcomeKind::Failed(FailureReason::RunFailed)
    }
}

/// A checksum of the bytes of `ranges`: equal checksums mean unchanged memory, but for a
/// collision of a 64-bit mix.
///
/// # Safety
/// Every range is readable for its whole length.
unsafe fn checksum(ranges: &[(usize, usize)]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    let mut mix = |w: u64| {
        h = (h ^ w).wrapping_mul(0xff51_afd7_ed55_8ccd).rotate_left(29);
    };
    for &(addr, len) in ranges {
        let end = addr.saturating_add(len);
        // Bytes up to the first 8-byte boundary, aligned words, then the tail: volatile
        // reads throughout, since other agents and host threads may write this memory.
        let head_end = addr.next_multiple_of(8).min(end);
        let words_end = head_end + (end - head_end) / 8 * 8;
        for a in (addr..head_end).chain(words_end..end) {
            // SAFETY: inside the range (caller contract).
            mix(u64::from(unsafe {
                std::ptr::read_volatile(a as *const u8)
            }));
        }
        for a in (head_end..words_end).step_by(8) {
            // SAFETY: inside the range and 8-byte aligned.
            mix(unsafe { std::ptr::read_volatile(a as *const u64) });
        }
        mix(len as u64);
    }
    h
}

/// A window that stops before a pass it meant to run (memory as captured or just restored).
/// After a write-set restore the first pass's result is written back and is the
/// application's; otherwise the dispatch runs once more, from the restored inputs.
/// A run's later members (`riders`) run once more after the first member's rerun.
fn end_early(
    target: &mut dyn ReplayTarget,
    outcome: &mut Outcome,
    after_passes: bool,
    mut restorer: Restorer,
    snapshot: Snapshot,
    (inventory, settings): (&AllocationInventory, &Settings),
    riders: &mut [Rider<'_>],
) {
    let mut stuck = false;
    if matches!(restorer, Restorer::WriteSet { .. }) {
        if let Err(reason) = restorer.finish(&snapshot, inventory, target, settings, outcome) {
            stuck = reason == FailureReason::RestoreStuck;
            fail_final(outcome, reason);
        }
        target.complete();
    } else {
        rerun(target, outcome, after_passes);
        if after_passes && outcome.kind.failure().is_none() {
            rerun_riders(riders, outcome);
        }
    }
    settle_staging(restorer, snapshot, stuck);
}

/// Gives the window's staging back, or, after a stuck final restore (whose copies may still
/// read the snapshot and the stash), leaks it.
fn settle_staging(restorer: Restorer, snapshot: Snapshot, stuck: bool) {
    if stuck {
        restorer.leak();
        snapshot.leak();
    }
}

/// The first pass's result could not be written back: memory is partly restored.
fn fail_final(outcome: &mut Outcome, reason: FailureReason) {
    tracing::error!(
        reason = reason.code(),
        "writing the first pass's result back failed: device memory holds a partly restored \
         state and the application's result may be wrong"
    );
    outcome.kind = OutcomeKind::Failed(reason);
}

/// How the window brings memory back between passes (chosen at the first restore, from what
/// the first pass wrote).
enum Restorer {
    /// Not chosen yet: no restore has run.
    Undecided,
    /// Every byte of the snapshot before every later pass; the last pass's result stands.
    Full,
    /// Only what the first pass wrote (`set`, merged) before every later pass; its result is
    /// kept in `stash` and written back after the last pass.
    WriteSet {
        set: WriteSet,
        stash: Stash,
        /// Verify (diff) after every restore.
        strict: bool,
        /// A diff failed: restore everything from now on (the end too, then the stash).
        full_now: bool,
    },
}

impl Restorer {
    /// Chooses after the first pass. `Err` stops the window after the first pass (a copy of
    /// the diff or the stash did not finish: nothing more is trusted to the copies).
    fn choose(
        requested: RestoreMode,
        run: bool,
        snapshot: &Snapshot,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        settings: &Settings,
        outcome: &mut Outcome,
    ) -> Result<Restorer, DeclineReason> {
        let full = |outcome: &mut Outcome| {
            outcome.restore_mode = Some(RestoreKind::Full);
            Ok(Restorer::Full)
        };
        if requested == RestoreMode::Full {
            return full(outcome);
        }
        let written = match snapshot.diff(inventory, mem, settings.granule) {
            Ok(w) => w,
            Err(DiffError::Unsupported) => return full(outcome),
            Err(DiffError::Failed) => {
                tracing::warn!("comparing memory with the snapshot failed: full restore");
                return full(outcome);
            }
            Err(DiffError::Stuck) => return Err(DeclineReason::CopyTimeout),
        };
        outcome.written_bytes = written.bytes();
        // Left out of the write set: never written again (each diff and restore counts them).
        outcome.skipped_regions += written.skipped;
        outcome.verified_bytes += written.compared;
        outcome.compared_on = written.sites.joined(outcome.compared_on);
        outcome.diff_time += written.time;
        let set = written.merged(settings.merge_gap);
        // A run keeps its first passes' result even for a dense writer: a pass of the run that
        // stops at a later member is ended by writing that result back.
        if !run && set.bytes().saturating_mul(100) > snapshot.bytes.saturating_mul(DENSE_PERCENT) {
            tracing::debug!(
                written = outcome.written_bytes,
                snapshot = snapshot.bytes,
                "the first pass wrote most of the snapshot: full restore"
            );
            return full(outcome);
        }
        let stash = match snapshot.stash(inventory, mem, &set) {
            Ok(stash) => stash,
            Err(StashError::NoMemory | StashError::Failed) => {
                tracing::warn!("no room (or no copy) for the first pass's result: full restore");
                return full(outcome);
            }
            Err(StashError::Stuck) => return Err(DeclineReason::CopyTimeout),
        };
        let strict = requested == RestoreMode::Strict;
        outcome.restore_mode = Some(if strict {
            RestoreKind::Strict
        } else {
            RestoreKind::WriteSet
        });
        Ok(Restorer::WriteSet {
            set,
            stash,
            strict,
            full_now: false,
        })
    }

    /// Brings memory back to the snapshot before a later pass (as far as the mode promises).
    fn restore(
        &mut self,
        snapshot: &Snapshot,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        settings: &Settings,
        outcome: &mut Outcome,
    ) -> Result<(), RestoreError> {
        let add = |outcome: &mut Outcome, stats: RestoreStats| {
            outcome.restored_bytes += stats.bytes;
            outcome.skipped_regions += stats.skipped;
            outcome.restore_time += stats.time;
        };
        match self {
            Restorer::Undecided | Restorer::Full => add(outcome, snapshot.restore(inventory, mem)?),
            Restorer::WriteSet { full_now: true, .. } => {
                add(outcome, snapshot.restore(inventory, mem)?)
            }
            Restorer::WriteSet {
                set,
                strict,
                full_now,
                ..
            } => {
                add(outcome, snapshot.restore_ranges(inventory, mem, set)?);
                if *strict {
                    match snapshot.diff(inventory, mem, settings.granule) {
                        Ok(left) => {
                            outcome.skipped_regions += left.skipped;
                            outcome.verified_bytes += left.compared;
                            outcome.compared_on = left.sites.joined(outcome.compared_on);
                            outcome.diff_time += left.time;
                            if !left.ranges.is_empty() {
                                tracing::debug!(
                                    bytes = left.bytes(),
                                    "strict restore: memory outside the first pass's write set \
                                     differed from the snapshot; restored"
                                );
                                add(outcome, snapshot.restore_ranges(inventory, mem, &left)?);
                            }
                        }
                        Err(error) => {
                            tracing::warn!(
                                ?error,
                                "verifying memory against the snapshot failed: full restore"
                            );
                            *full_now = true;
                            add(outcome, snapshot.restore(inventory, mem)?);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// After the last pass: in write-set modes, restores from the snapshot whatever later
    /// passes wrote outside the first pass's write set (found by one more diff), then writes
    /// the first pass's result back. Memory is then exactly the first pass's result.
    fn finish(
        &mut self,
        snapshot: &Snapshot,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        settings: &Settings,
        outcome: &mut Outcome,
    ) -> Result<(), FailureReason> {
        let Restorer::WriteSet {
            set,
            stash,
            full_now,
            strict,
        } = self
        else {
            return Ok(());
        };
        let failure = |e| match e {
            RestoreError::Failed => FailureReason::RestoreFailed,
            RestoreError::Stuck => FailureReason::RestoreStuck,
        };
        let extra = if *full_now {
            None
        } else {
            match snapshot.diff(inventory, mem, settings.granule) {
                Ok(now) => {
                    outcome.skipped_regions += now.skipped;
                    outcome.verified_bytes += now.compared;
                    outcome.compared_on = now.sites.joined(outcome.compared_on);
                    outcome.diff_time += now.time;
                    Some(now.minus(set))
                }
                Err(error) => {
                    tracing::warn!(
                        ?error,
                        "the final comparison with the snapshot failed: full restore before \
                         writing the first pass's result back"
                    );
                    None
                }
            }
        };
        let stats = match extra {
            Some(extra) if extra.ranges.is_empty() => RestoreStats::default(),
            Some(extra) => {
                tracing::debug!(
                    bytes = extra.bytes(),
                    "later passes wrote outside the first pass's write set: restored from the \
                     snapshot"
                );
                if !*strict {
                    // A pass after such a write did not start from the captured inputs there
                    // (strict mode restored them before every pass).
                    outcome.inputs_restored = Some(false);
                }
                snapshot
                    .restore_ranges(inventory, mem, &extra)
                    .map_err(failure)?
            }
            None => snapshot.restore(inventory, mem).map_err(failure)?,
        };
        let back = snapshot
            .write_back(stash, inventory, mem)
            .map_err(failure)?;
        for s in [stats, back] {
            outcome.restored_bytes += s.bytes;
            outcome.restore_time += s.time;
        }
        outcome.skipped_regions += stats.skipped;
        Ok(())
    }

    /// Gives up the stash after a stuck copy.
    fn leak(self) {
        if let Restorer::WriteSet { stash, .. } = self {
            stash.leak();
        }
    }
}

/// The ordinary run that ends a window early, counted as a pass. When passes already ran
/// (`after_passes`) and it cannot be submitted, the application has no result: `failed`.
fn rerun(target: &mut dyn ReplayTarget, outcome: &mut Outcome, after_passes: bool) {
    outcome.passes += 1;
    if !target.run_once() && after_passes {
        tracing::error!(
            "the final run of a replayed dispatch could not be submitted: the application has \
             no result of it"
        );
        outcome.kind = OutcomeKind::Failed(FailureReason::RunFailed);
    }
}

static TOO_MANY: std::sync::Once = std::sync::Once::new();

fn warn_once(once: &std::sync::Once, warn: impl FnOnce()) {
    once.call_once(warn);
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "write_set_tests.rs"]
mod write_set_tests;

#[cfg(test)]
#[path = "run_tests.rs"]
mod run_tests;
