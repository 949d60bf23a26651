//! Passes queued ahead ([`ReplayPolicy::passes_ahead`]): a window's later passes, every
//! member's, each behind its queued restore, all submitted before the first of them is
//! collected; then collected in order, each member's `on_pass_end` after its own pass. One
//! wait for the whole window instead of one per pass.

use super::runs::Submitted;
use super::*;
use std::collections::VecDeque;

/// Why the submissions stopped before the last pass.
pub(super) enum Stop {
    /// The first member's `on_pass` panicked: its pass `index` was not submitted (the
    /// restore before it was).
    Panicked,
    /// The first member's pass could not be submitted.
    NotSubmitted(DeclineReason),
    /// A later member's pass could not be begun or submitted (its break comes back from the
    /// collection, with its kind).
    Rider,
    /// The restore before a pass could not be submitted: memory may be partly restored.
    Restore(RestoreError),
}

/// What [`run`] found.
pub(super) struct Ahead {
    /// Why the submissions stopped early (every pass submitted before was collected).
    pub(super) stop: Option<Stop>,
    /// The first break the collection found: a policy panic, a pass that outlived the pass
    /// deadline and then completed, a later member's break.
    pub(super) kind: Option<OutcomeKind>,
    /// A later member's pass did not run (or its policy broke): the run's memory is not one
    /// pass of every member.
    pub(super) rider_broke: bool,
    /// A pass (or the restore before it) was still running at the late deadline: everything
    /// behind it was abandoned and nothing may touch memory.
    pub(super) late: bool,
    /// With `late`: the queued restore before the late pass is what did not complete.
    pub(super) restore_stuck: bool,
}

/// The first member's pass, submitted and not collected yet.
struct Queued<S> {
    index: u32,
    scope: S,
    timed: bool,
    /// Its per-pass contexts, off the thread's stack until it is collected.
    per_pass: Parked,
    submitted: Duration,
}

/// What the first member's loop lends the batch.
pub(super) struct First<'a, P: ReplayPolicy> {
    pub(super) policy: &'a P,
    pub(super) info: &'a DispatchInfo,
    pub(super) total: Option<u32>,
    pub(super) state: &'a mut P::State,
    pub(super) contexts: &'a mut LoopContexts,
}

/// Passes 1 to `limit - 1` (the restore before pass 1 is queued already), every member's,
/// submitted ahead and then collected in order (see the [module](self)). On return every pass
/// submitted was collected or abandoned, and the first member's contexts are on the stack as
/// before.
#[allow(clippy::too_many_arguments)]
pub(super) fn run<P: ReplayPolicy>(
    first: First<'_, P>,
    limit: u32,
    target: &mut dyn ReplayTarget,
    riders: &mut [Rider<'_>],
    restorer: &mut Restorer,
    snapshot: &Snapshot,
    (inventory, settings): (&AllocationInventory, &Settings),
    outcome: &mut Outcome,
) -> Ahead {
    let First {
        policy,
        info,
        total,
        state,
        contexts,
    } = first;
    let mut firsts: VecDeque<Queued<P::PassState>> = VecDeque::new();
    let mut behind: VecDeque<Submitted> = VecDeque::new();
    let mut stop = None;
    // The first member's sticky contexts, off the stack while the others' passes begin.
    let mut sticky = contexts.park();
    for index in 1..limit {
        if index > 1 {
            let queued = target.queue_restores(true);
            let restored = phases::timed(Phase::Restore, || {
                restorer.restore(snapshot, inventory, target, settings, outcome)
            });
            if queued {
                target.queue_restores(false);
            }
            if let Err(error) = restored {
                stop = Some(Stop::Restore(error));
                break;
            }
        }
        contexts.unpark(sticky);
        let mut scope = P::PassState::default();
        let mut pass = Pass {
            index,
            total,
            info,
            contexts,
        };
        let begun = phases::timed(Phase::Policy, || {
            call("on_pass", info, || {
                policy.on_pass(&mut pass, state, &mut scope)
            })
        });
        if begun.is_none() {
            drop(scope);
            sticky = contexts.park();
            stop = Some(Stop::Panicked);
            break;
        }
        let timed = service_active(Service::DispatchTiming);
        let submitting = phases::enabled().then(Instant::now);
        if let Err(error) = target.submit_pass(timed) {
            drop(scope);
            sticky = contexts.park();
            stop = Some(Stop::NotSubmitted(match error {
                PassError::NotSubmitted(reason) => reason,
                _ => DeclineReason::SubmitFailed,
            }));
            break;
        }
        let (s, per_pass) = contexts.set_aside().split();
        sticky = s;
        firsts.push_back(Queued {
            index,
            scope,
            timed,
            per_pass,
            submitted: submitting.map_or(Duration::ZERO, |t| t.elapsed()),
        });
        if !riders.is_empty() {
            let submitted = submit_riders(riders, index, false);
            let stopped = submitted.stopped();
            behind.push_back(submitted);
            if stopped {
                stop = Some(Stop::Rider);
                break;
            }
        }
    }
    // One wait for the last pass submitted: collecting the others then finds them done (on
    // CUDA, one flush brings every kernel record).
    phases::timed(Phase::Await, || match behind.back().map(Submitted::len) {
        Some(n) if n > 0 => riders[n - 1].target.await_pass(),
        _ if !firsts.is_empty() => target.await_pass(),
        _ => {}
    });
    let mut end = Ahead {
        stop,
        kind: None,
        rider_broke: false,
        late: false,
        restore_stuck: false,
    };
    // The first member's policy panicked in an `on_pass_end`: no more of its calls.
    let mut panicked = false;
    while let Some(q) = firsts.pop_front() {
        let riding = behind.pop_front();
        if end.late {
            // Queued behind a pass still running past the late deadline: late with it.
            target.abandon_pass();
            outcome.passes += 1;
            outcome.pass_times.push(None);
            if let Some(submitted) = riding {
                // Every one abandoned: its break is the stuck pass's, known already.
                let _ = collect_riders(riders, q.index, submitted, true);
            }
            continue;
        }
        let collecting = phases::enabled().then(Instant::now);
        let ran = target.collect_pass();
        if let Some(t) = collecting {
            phases::add(Phase::Pass, q.submitted + t.elapsed());
        }
        let Queued {
            index,
            mut scope,
            timed,
            per_pass,
            ..
        } = q;
        contexts.unpark(Parked::join(sticky, per_pass));
        match ran {
            Ok(kernel_time) => {
                outcome.passes += 1;
                outcome.pass_times.push(kernel_time);
                if !panicked {
                    let report = PassReport {
                        index,
                        total,
                        info,
                        timed,
                        kernel_time,
                    };
                    if !pass_end(policy, &report, state, &mut scope) {
                        panicked = true;
                        end.kind
                            .get_or_insert(OutcomeKind::Declined(DeclineReason::PolicyPanicked));
                    }
                }
            }
            Err(PassError::Late) => {
                outcome.passes += 1;
                outcome.pass_times.push(None);
                if target.settle_late_pass() {
                    // It completed: the passes behind it ran after it, in order.
                    tracing::warn!(
                        kernel = info.kernel(),
                        dispatch = %info.dispatch_id,
                        "a replay pass outlived the pass deadline (passes queued ahead)"
                    );
                    end.kind
                        .get_or_insert(OutcomeKind::Declined(DeclineReason::PassTimeout));
                } else {
                    end.late = true;
                    end.restore_stuck = target.restore_pending();
                }
            }
            Err(_) => {
                // Not a later pass's answer: counted as a break of the run.
                end.rider_broke = true;
                end.kind
                    .get_or_insert(OutcomeKind::Declined(DeclineReason::SubmitFailed));
            }
        }
        drop(scope);
        sticky = contexts.park();
        if let Some(submitted) = riding
            && let Err(broken) = collect_riders(riders, index, submitted, end.late)
        {
            end.rider_broke = true;
            end.late |= broken.late;
            end.kind.get_or_insert(broken.kind);
        }
    }
    contexts.unpark(sticky);
    end
}
