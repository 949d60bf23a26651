//! The replay window: decision, drain, snapshot, pass loop with restores, one completion.
//!
//! [`run_window`] drives a [`ReplayPolicy`] against a [`ReplayTarget`] (the backend's view of
//! one intercepted dispatch). Every way out leaves the application with exactly one correct
//! execution and exactly one completion:
//!
//! ```text
//! pass_count ──Skip/1──────────────────────────────────────────► run_once      (skipped)
//!     │ N>1 / UpTo / Until
//!     ▼
//!   agent lock + drain ──timeout────────────────────────────────► run_once      (declined)
//!     ▼
//!   plan + capture snapshot ──alloc/copy/symbols/budget────────► run_once      (declined)
//!     ▼
//!   ┌► on_pass ─► run pass (own completion signal) ─► on_pass_end
//!   │     │ panic: memory is restored ─────────────────────────► run_once      (declined)
//!   │     ▼
//!   │   more passes? (plan, keep_going) ──no──► complete once (app signal) (replayed)
//!   └── restore ◄──yes
//! ```
//! The last pass is never followed by a restore: the application sees what the kernel made.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use crate::context::{LoopContexts, Service, service_active};
use crate::dispatch::DispatchInfo;
use crate::engine::inventory::AllocationInventory;
use crate::engine::snapshot::{DeviceMemory, Snapshot, SnapshotPlan};
use crate::policy::{
    DeclineReason, MAX_OPEN_ENDED_PASSES, Outcome, OutcomeKind, Pass, PassPlan, PassReport,
    ReplayPolicy,
};

/// The backend's handle on one intercepted dispatch.
pub(crate) trait ReplayTarget: DeviceMemory {
    /// Takes exclusive use of the agent for the window (deadline); called only for dispatches
    /// that will be replayed, so skipped dispatches never wait for it.
    fn begin(&mut self) -> Result<(), DeclineReason>;
    /// Waits (with a deadline) until the agent has nothing else in flight.
    fn drain(&mut self) -> Result<(), DeclineReason>;
    /// Module-scope variables (address, size) visible to the agent, found now.
    fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason>;
    /// Runs one pass with the engine's own completion signal and waits for it (deadline);
    /// returns the kernel time when `timed`.
    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, DeclineReason>;
    /// Submits the dispatch unchanged (its own completion signal): the ordinary single run.
    fn run_once(&mut self);
    /// Signals the application's completion exactly once, after the last pass.
    fn complete(&mut self);
}

/// Engine settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WindowConfig {
    /// Largest snapshot in bytes.
    pub(crate) budget: u64,
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

/// Runs the replay window for one dispatch and returns its outcome.
pub(crate) fn run_window<P: ReplayPolicy>(
    policy: &P,
    info: &DispatchInfo,
    target: &mut dyn ReplayTarget,
    inventory: &AllocationInventory,
    config: WindowConfig,
) -> Outcome {
    let started_at = std::time::SystemTime::now();
    let ordinary = |kind| Outcome {
        started_at: Some(started_at),
        ..Outcome::ordinary(kind)
    };
    let Some(plan) = call("pass_count", info, || policy.pass_count(info)) else {
        target.run_once();
        return ordinary(OutcomeKind::Declined(DeclineReason::PolicyPanicked));
    };
    let (limit, fixed, mut keep_going, mut state) = match plan {
        PassPlan::Skip => {
            target.run_once();
            return ordinary(OutcomeKind::Skipped);
        }
        PassPlan::Exactly { passes, state } | PassPlan::UpTo { passes, state, .. }
            if passes <= 1 =>
        {
            target.run_once();
            let outcome = ordinary(OutcomeKind::Skipped);
            call("on_end", info, || policy.on_end(info, state, &outcome));
            return outcome;
        }
        PassPlan::Exactly { passes, state } => (passes, true, None, state),
        PassPlan::UpTo {
            passes,
            state,
            keep_going,
        } => (passes, false, Some(keep_going), state),
        PassPlan::Until { state, keep_going } => {
            (MAX_OPEN_ENDED_PASSES, false, Some(keep_going), state)
        }
    };
    let total = fixed.then_some(limit);

    let decline = |target: &mut dyn ReplayTarget, reason: DeclineReason, state: P::State| {
        tracing::warn!(kernel = info.kernel(), dispatch = %info.dispatch_id, reason = reason.code(), "replay declined: the dispatch runs once");
        target.run_once();
        let outcome = ordinary(OutcomeKind::Declined(reason));
        call("on_end", info, || policy.on_end(info, state, &outcome));
        outcome
    };

    if let Err(reason) = target.begin().and_then(|()| target.drain()) {
        return decline(target, reason, state);
    }
    let snapshot = match target
        .module_variables()
        .and_then(|vars| SnapshotPlan::new(inventory, info.agent, &vars, config.budget))
        .and_then(|plan| Snapshot::capture(plan, target))
    {
        Ok(s) => s,
        Err(reason) => return decline(target, reason, state),
    };

    let mut outcome = ordinary(OutcomeKind::Replayed);
    outcome.passes = 0;
    outcome.snapshot_bytes = snapshot.bytes;
    outcome.snapshot_time = snapshot.capture_time;
    let mut guard = LoopContexts::new();
    let mut index = 0u32;
    loop {
        let mut scope = P::PassState::default();
        let mut pass = Pass {
            index,
            total,
            info,
            contexts: &mut guard,
        };
        if call("on_pass", info, || {
            policy.on_pass(&mut pass, &mut state, &mut scope)
        })
        .is_none()
        {
            // Memory is in its captured state (pass 0, or just restored): one ordinary run.
            drop(guard);
            outcome.kind = OutcomeKind::Declined(DeclineReason::PolicyPanicked);
            target.run_once();
            outcome.passes += 1;
            call("on_end", info, || policy.on_end(info, state, &outcome));
            return outcome;
        }
        let timed = service_active(Service::DispatchTiming);
        match target.run_pass(timed) {
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
                let ended = call("on_pass_end", info, || {
                    policy.on_pass_end(&report, &mut state, &mut scope)
                });
                if ended.is_none() {
                    // The pass ran from the snapshot: its result is one valid execution.
                    outcome.kind = OutcomeKind::Declined(DeclineReason::PolicyPanicked);
                    break;
                }
            }
            Err(reason) => {
                outcome.kind = OutcomeKind::Declined(reason);
                tracing::error!(
                    kernel = info.kernel(),
                    reason = reason.code(),
                    "a replay pass failed"
                );
                // The failed pass may have touched memory: put the inputs back, run once.
                let _ = snapshot.restore(inventory, target);
                drop(guard);
                target.run_once();
                outcome.passes += 1;
                call("on_end", info, || policy.on_end(info, state, &outcome));
                return outcome;
            }
        }
        drop(scope);
        let completed = index + 1;
        if completed >= limit {
            break;
        }
        if let Some(keep_going) = keep_going.as_mut() {
            match call("the continue decision", info, || {
                keep_going(&state, completed)
            }) {
                Some(true) => {}
                Some(false) => break,
                None => {
                    outcome.kind = OutcomeKind::Declined(DeclineReason::PolicyPanicked);
                    break;
                }
            }
        }
        match snapshot.restore(inventory, target) {
            Ok(stats) => {
                outcome.restored_bytes += stats.bytes;
                outcome.skipped_regions += stats.skipped;
                outcome.restore_time += stats.time;
            }
            Err(reason) => {
                tracing::error!(
                    kernel = info.kernel(),
                    "restore failed between passes: device memory may hold a partly restored state"
                );
                outcome.kind = OutcomeKind::Declined(reason);
                drop(guard);
                target.run_once();
                outcome.passes += 1;
                call("on_end", info, || policy.on_end(info, state, &outcome));
                return outcome;
            }
        }
        index += 1;
    }
    drop(guard);
    target.complete();
    call("on_end", info, || policy.on_end(info, state, &outcome));
    outcome
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
