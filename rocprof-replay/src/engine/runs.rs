//! Runs: one window over consecutive dispatches ([runs](super#runs)). What the backend
//! offers (`Joins`), how a candidate joins (`join_run`), the later members' passes
//! (`ride`, queued where the backend can: `ride_queued`) and how a run ends (`end_run`,
//! `rerun_riders`).

use super::*;

/// Where a window finds the dispatches that may join its [run](super#runs): the dispatches
/// submitted next on its queue or stream, each right behind the one before (nothing else of
/// the application between them), decided to enter a window, their first passes not run and
/// their queue held until the window ends.
pub(crate) trait Joins<'s> {
    /// The next candidate, left where it is until [`take`](Self::take); `None`: none now.
    fn peek(&mut self) -> Option<(&Window, &mut (dyn ReplayTarget + 's))>;
    /// Takes the candidate [`peek`](Self::peek) showed into the run. One not taken gets its
    /// own window after this one, as if it had never been shown.
    fn take(&mut self) -> Option<Joiner<'s>>;
}

/// A dispatch that joins a window's run ([`Joins::take`]): its decided window, and the
/// backend's handle on it, which runs its passes (never `begin`, `drain` or `end`: the run's
/// first member holds and drained the agent).
pub(crate) struct Joiner<'s> {
    pub(crate) window: Window,
    pub(crate) target: Box<dyn ReplayTarget + 's>,
}

/// A later member of a run after the window: its record, and its handle, for the backend to
/// release ([`ReplayTarget::released`]) once the first member's completion went out.
pub(crate) struct Later<'s> {
    pub(crate) info: DispatchInfo,
    pub(crate) outcome: Outcome,
    pub(crate) target: Box<dyn ReplayTarget + 's>,
}

/// A later member of a run: its policy's calls, type-erased ([`Decided::into_member`]).
pub(crate) trait Member: Send {
    /// `on_pass` of pass `index`, with this member's sticky contexts on the thread's stack
    /// until [`end_pass`](Self::end_pass); `false`: the policy panicked.
    fn begin_pass(&mut self, info: &DispatchInfo, index: u32) -> bool;
    /// `on_pass_end` of the pass begun last (`ran`: it ran; else only its state is dropped);
    /// the contexts leave the stack. `false`: the policy panicked.
    fn end_pass(
        &mut self,
        info: &DispatchInfo,
        index: u32,
        ran: Option<(bool, Option<Duration>)>,
    ) -> bool;
    /// Takes this member's contexts off the thread's stack between [`begin_pass`] and
    /// [`end_pass`] (its pass submitted, another member's about to begin);
    /// [`resume`](Self::resume) puts them back before `end_pass`. Passes queued ahead may
    /// be set aside several at a time: each keeps its own state and per-pass contexts, the
    /// next [`begin_pass`] sees the sticky contexts the last one left, and they resume in
    /// order.
    ///
    /// [`begin_pass`]: Self::begin_pass
    /// [`end_pass`]: Self::end_pass
    fn set_aside(&mut self);
    /// Puts back what [`set_aside`](Self::set_aside) took off, for the oldest pass set aside.
    fn resume(&mut self);
    /// Whether its policy lets its later passes be queued ahead
    /// ([`ReplayPolicy::passes_ahead`]); a panic there counts as no.
    fn passes_ahead(&self, info: &DispatchInfo) -> bool;
    /// `on_end` with the dispatch's outcome.
    fn end(self: Box<Self>, info: &DispatchInfo, outcome: &Outcome);
}

impl<P: ReplayPolicy> Decided<'static, P> {
    /// The dispatch as a later member of a run whose first member's loop is `first`.
    pub(crate) fn into_member(self, first: &LoopContexts) -> Box<dyn Member> {
        Box::new(Riding {
            decided: self,
            scope: None,
            contexts: first.sibling(),
            parked: Parked::default(),
            aside: std::collections::VecDeque::new(),
        })
    }
}

/// A later member of a run ([`Member`]).
pub(super) struct Riding<P: ReplayPolicy> {
    decided: Decided<'static, P>,
    /// The state of the pass begun last, until it ends.
    scope: Option<P::PassState>,
    /// Its replay loop, at the first member's depth; its sticky overrides are `parked` while
    /// other members' passes run.
    contexts: LoopContexts,
    parked: Parked,
    /// Passes set aside, oldest first: each one's state and per-pass overrides.
    aside: std::collections::VecDeque<(Option<P::PassState>, Parked)>,
}

impl<P: ReplayPolicy> Member for Riding<P> {
    fn begin_pass(&mut self, info: &DispatchInfo, index: u32) -> bool {
        self.contexts.unpark(std::mem::take(&mut self.parked));
        let mut scope = P::PassState::default();
        let d = &mut self.decided;
        let mut pass = Pass {
            index,
            total: Some(d.limit),
            info,
            contexts: &mut self.contexts,
        };
        let begun = phases::timed(Phase::Policy, || {
            call("on_pass", info, || {
                d.policy.on_pass(&mut pass, &mut d.state, &mut scope)
            })
        });
        self.scope = Some(scope);
        begun.is_some()
    }

    fn end_pass(
        &mut self,
        info: &DispatchInfo,
        index: u32,
        ran: Option<(bool, Option<Duration>)>,
    ) -> bool {
        let mut scope = self.scope.take().unwrap_or_default();
        let ended = match ran {
            Some((timed, kernel_time)) => {
                let d = &mut self.decided;
                let report = PassReport {
                    index,
                    total: Some(d.limit),
                    info,
                    timed,
                    kernel_time,
                };
                phases::timed(Phase::Policy, || {
                    call("on_pass_end", info, || {
                        d.policy.on_pass_end(&report, &mut d.state, &mut scope)
                    })
                })
                .is_some()
            }
            None => true,
        };
        drop(scope);
        self.parked = self.contexts.park();
        ended
    }

    fn set_aside(&mut self) {
        let (sticky, per_pass) = self.contexts.set_aside().split();
        self.parked = sticky;
        self.aside.push_back((self.scope.take(), per_pass));
    }

    fn resume(&mut self) {
        let (scope, per_pass) = self.aside.pop_front().unwrap_or_default();
        self.scope = scope;
        let sticky = std::mem::take(&mut self.parked);
        self.contexts.unpark(Parked::join(sticky, per_pass));
    }

    fn passes_ahead(&self, info: &DispatchInfo) -> bool {
        let policy = &self.decided.policy;
        call("passes_ahead", info, || policy.passes_ahead(info)).unwrap_or(false)
    }

    fn end(self: Box<Self>, info: &DispatchInfo, outcome: &Outcome) {
        let Riding {
            decided, contexts, ..
        } = *self;
        // Its overrides are parked: dropping its loop undoes nothing of another's.
        drop(contexts);
        let Decided { policy, state, .. } = decided;
        call("on_end", info, || policy.on_end(info, state, outcome));
    }
}

/// A later member of a window's run, as the run goes.
pub(super) struct Rider<'s> {
    pub(super) info: DispatchInfo,
    pub(super) member: Box<dyn Member>,
    pub(super) target: Box<dyn ReplayTarget + 's>,
    pub(super) passes: u32,
    pub(super) pass_times: Vec<Option<Duration>>,
    /// Its own end, where it differs from the run's (its policy panicked, its pass stuck).
    pub(super) kind: Option<OutcomeKind>,
    /// The values of each counter pass it ran ([`count_riders`]).
    pub(super) counter_values: Vec<Vec<u64>>,
    /// Its own counter values, combined after the run's last counter pass (`None`: the run
    /// ended before; its record then says why the first member has none).
    pub(super) metrics: Option<Metrics>,
    /// Why its own counter values could not be read (the run's other members keep theirs).
    pub(super) counters_error: Option<String>,
}

/// Why a run's pass stopped at a later member.
pub(super) struct Broken {
    pub(super) kind: OutcomeKind,
    /// A pass may still be running: nothing may be restored or run again.
    pub(super) late: bool,
}

/// What [`join_run`] needs of the run's first member.
pub(super) struct Joining<'a> {
    pub(super) limit: u32,
    /// The metric set every member collects (`None`: none), its counter passes after the
    /// `limit` passes, each member's inside the first member's ([`count_riders`]).
    pub(super) counters: Option<&'a MetricSet>,
    pub(super) run_max: u32,
    /// The run's first member is a `sampled` dispatch its footprint does not check
    /// ([`FootprintKind::Unchecked`]): nothing fingerprints what the members' arguments do not
    /// name, so only `sampled` dispatches that are not due a check may join.
    pub(super) unchecked: bool,
    /// The run's snapshot holds every allocation of the agent (the first member's footprint is
    /// `all`, or its arguments named every allocation): nothing is watched, so a joining
    /// member's capture takes every allocation the snapshot does not hold yet (one made since),
    /// not only those its arguments name.
    pub(super) covers_all: bool,
    pub(super) first: &'a DispatchInfo,
    pub(super) contexts: &'a LoopContexts,
}

/// After the first member's first pass: takes the dispatches `joins` offers into the run, up
/// to `run_max` members, each captured where the snapshot does not hold its memory yet and
/// then run as its first pass (the application's own execution). A candidate that cannot join
/// is not taken and ends the growth. `Err`: a member's first pass did not end normally, so
/// the run ends after the first passes (nothing restored, every member's record says why).
pub(super) fn join_run<'s>(
    riders: &mut Vec<Rider<'s>>,
    joins: &mut dyn Joins<'s>,
    j: Joining<'_>,
    target: &mut dyn ReplayTarget,
    snapshot: &mut Snapshot,
    mut outside: Option<&mut Watch>,
    (inventory, settings): (&AllocationInventory, &Settings),
) -> Result<(), OutcomeKind> {
    let agent = j.first.agent;
    while riders.len() + 1 < j.run_max as usize {
        let Some((window, candidate)) = joins.peek() else {
            break;
        };
        let info = window.info().clone();
        let unfit = if window.run_passes() != Some(j.limit) {
            Err("another pass count, or passes decided as they run")
        } else if window.run_counters() != j.counters {
            Err("another metric set, or none where the run collects one")
        } else if info.agent != agent {
            Err("another agent")
        } else if footprint::SOLO.contains(agent.0, info.kernel_object)
            || footprint::REMEMBERED.contains(agent.0, info.kernel_object)
        {
            Err("its kernel once wrote outside its footprint")
        } else if let Err(why) = fits_footprint(window, &info, j.unchecked, j.covers_all) {
            Err(why)
        } else if let Some(set) = j.counters
            && let Err(why) = candidate.prepare_counters(set)
        {
            tracing::debug!(kernel = info.kernel(), why, "counters of a run's candidate");
            Err("its counters cannot be prepared")
        } else {
            phases::timed(Phase::Capture, || {
                capture_joiner(
                    &info,
                    candidate,
                    target,
                    snapshot,
                    outside.as_deref_mut(),
                    j.covers_all,
                    (inventory, settings),
                )
            })
        };
        if let Err(why) = unfit {
            tracing::debug!(
                kernel = info.kernel(),
                why,
                "the next dispatch does not join the run"
            );
            break;
        }
        let Some(joiner) = joins.take() else {
            break;
        };
        if j.unchecked {
            // Unchecked as a member of an unchecked run: counted toward its next check.
            footprint::SAMPLING.skipped(agent.0, info.kernel_object);
        }
        let (info, member) = joiner.window.into_member(j.contexts);
        riders.push(Rider {
            info,
            member,
            target: joiner.target,
            passes: 0,
            pass_times: Vec::new(),
            kind: None,
            counter_values: Vec::new(),
            metrics: None,
            counters_error: None,
        });
        let first = j.contexts.park();
        let ran = riders
            .last_mut()
            .map_or(Ok(()), |rider| rider_pass(rider, 0));
        j.contexts.unpark(first);
        if let Err(broken) = ran {
            // A stuck member's record says so; the others' first passes completed.
            return Err(match broken.kind {
                OutcomeKind::Failed(_) => OutcomeKind::Declined(DeclineReason::PassTimeout),
                kind => kind,
            });
        }
    }
    Ok(())
}

/// Whether a candidate's footprint lets it join: its policy asks for `arguments`, `sampled` or
/// `all` (not `verified` or a `strict` restore, which its own window honours). A run whose
/// snapshot holds every allocation (`covers_all`) takes any of them; a checked run, where
/// the run's one watch checks every member, `arguments` and `sampled`; a run whose members go
/// unchecked only a `sampled` dispatch its kernel's history lets go unchecked
/// ([`footprint::Sampling::due`]).
fn fits_footprint(
    window: &Window,
    info: &DispatchInfo,
    unchecked: bool,
    covers_all: bool,
) -> Result<(), &'static str> {
    match window.run_footprint() {
        None => Err("its policy asks for another footprint or restore"),
        Some(_) if covers_all => Ok(()),
        Some(FootprintMode::All) => Err("its footprint is every allocation"),
        Some(FootprintMode::Sampled)
            if unchecked && footprint::SAMPLING.due(info.agent.0, info.kernel_object) =>
        {
            Err("its sampled check is due")
        }
        Some(FootprintMode::Sampled) => Ok(()),
        Some(_) if unchecked => Err("its footprint is checked on every dispatch"),
        Some(_) => Ok(()),
    }
}

/// Captures what a candidate's arguments and module variables name that the run's snapshot
/// does not hold yet, after checking that the run's earlier members left those allocations as
/// they were before its first pass (their fingerprints then). `false`: it cannot join.
pub(super) fn capture_joiner(
    info: &DispatchInfo,
    candidate: &mut dyn ReplayTarget,
    mem: &mut dyn ReplayTarget,
    snapshot: &mut Snapshot,
    outside: Option<&mut Watch>,
    covers_all: bool,
    (inventory, settings): (&AllocationInventory, &Settings),
) -> Result<(), &'static str> {
    let Ok(vars) = candidate.module_variables() else {
        return Err("its module variables cannot be read");
    };
    let Some(args) = candidate.argument_bytes() else {
        return Err("its arguments cannot be read");
    };
    // Host memory it names or reaches through its module variables: a window of its own
    // (which watches or declines).
    if !candidate.host_watch().is_empty()
        || !matches!(stored::stored_host_memory(candidate, &vars), Ok(r) if r.is_empty())
    {
        return Err("it reaches host memory");
    }
    let Ok(mut plan) = SnapshotPlan::new(inventory, info.agent, &vars, u64::MAX) else {
        return Err("its footprint cannot be planned");
    };
    if !covers_all {
        let named = footprint::named(&args);
        let reach = footprint::REACH.get(info.agent.0, info.kernel_object);
        // What the candidate's arguments do not name stays watched as it is (or, in an
        // unchecked run, unchecked).
        drop(footprint::split(&mut plan, &named, reach));
    }
    let held: Vec<(usize, usize)> = snapshot.regions().collect();
    plan.regions.retain(|r| !held.contains(&(r.base, r.size)));
    if plan.regions.is_empty() {
        return Ok(());
    }
    let bytes: u64 = plan.regions.iter().map(|r| r.size as u64).sum();
    if snapshot.bytes.saturating_add(bytes) > settings.budget {
        return Err("the run's snapshot would pass the budget");
    }
    let bases: Vec<usize> = plan.regions.iter().map(|r| r.base).collect();
    if let Some(w) = outside {
        match w.claim(&bases, inventory, mem) {
            Ok(true) => {}
            // An earlier member wrote there: the check after the first passes finds it.
            Ok(false) => return Err("an earlier member wrote memory it names"),
            Err(_) => return Err("memory it names cannot be fingerprinted"),
        }
    }
    match Snapshot::capture(plan, inventory, mem) {
        Ok(more) => {
            snapshot.absorb(more);
            Ok(())
        }
        Err(_) => Err("its memory cannot be captured"),
    }
}

/// Counter pass `pass` over a run, after the first member's pass: each later member's pass
/// in order, armed with its own counters, untimed, without policy calls (counter passes are
/// the engine's), inside the first member's pass (whose `arm_counters(None)` follows). Stops
/// at the first member whose pass did not end normally.
pub(super) fn count_riders(riders: &mut [Rider<'_>], pass: u32) -> Result<(), Broken> {
    for r in riders.iter_mut() {
        r.target.arm_counters(Some(pass));
        let ran = phases::timed(Phase::Pass, || r.target.run_pass(false));
        r.target.arm_counters(None);
        record_rider_pass(r, ran)?;
    }
    Ok(())
}

/// Counter pass `pass`'s values of every later member, after the pass ended.
pub(super) fn rider_counter_values(riders: &mut [Rider<'_>], pass: u32) {
    for r in riders.iter_mut().filter(|r| r.counters_error.is_none()) {
        match r.target.counter_values(pass) {
            Ok(values) => r.counter_values.push(values),
            Err(why) => {
                tracing::warn!(
                    kernel = r.info.kernel(),
                    dispatch = %r.info.dispatch_id,
                    "reading the counters of a run's later member failed: {why}"
                );
                r.counters_error = Some(why);
            }
        }
    }
}

/// One pass of a later member, its policy called around it.
pub(super) fn rider_pass(r: &mut Rider<'_>, index: u32) -> Result<(), Broken> {
    let panicked = Broken {
        kind: OutcomeKind::Declined(DeclineReason::PolicyPanicked),
        late: false,
    };
    if !r.member.begin_pass(&r.info, index) {
        r.member.end_pass(&r.info, index, None);
        r.kind = Some(OutcomeKind::Declined(DeclineReason::PolicyPanicked));
        if index == 0 {
            // Its dispatch has not run: this is its one execution.
            once_more(r);
        }
        return Err(panicked);
    }
    let timed = service_active(Service::DispatchTiming);
    let ran = phases::timed(Phase::Pass, || r.target.run_pass(timed));
    finish_rider_pass(r, index, timed, ran)
}

/// A later member's pass after it ran (or did not): its figures, its `on_pass_end`.
pub(super) fn finish_rider_pass(
    r: &mut Rider<'_>,
    index: u32,
    timed: bool,
    ran: Result<Option<Duration>, PassError>,
) -> Result<(), Broken> {
    let ended = r
        .member
        .end_pass(&r.info, index, ran.as_ref().ok().map(|t| (timed, *t)));
    let not_submitted = matches!(ran, Err(PassError::NotSubmitted(_)));
    let recorded = record_rider_pass(r, ran);
    if not_submitted && index == 0 {
        // Its dispatch has not run: this is its one execution.
        once_more(r);
    }
    recorded?;
    if !ended {
        r.kind = Some(OutcomeKind::Declined(DeclineReason::PolicyPanicked));
        return Err(Broken {
            kind: OutcomeKind::Declined(DeclineReason::PolicyPanicked),
            late: false,
        });
    }
    Ok(())
}

/// A later member's pass after it ran (or did not), its policy aside: its passes and times,
/// and why the run's pass stops there, if it does (a pass that may still run is `late`).
fn record_rider_pass(
    r: &mut Rider<'_>,
    ran: Result<Option<Duration>, PassError>,
) -> Result<(), Broken> {
    match ran {
        Ok(kernel_time) => {
            r.passes += 1;
            r.pass_times.push(kernel_time);
            Ok(())
        }
        Err(PassError::NotSubmitted(reason)) => Err(Broken {
            kind: OutcomeKind::Declined(reason),
            late: false,
        }),
        Err(PassError::Yielded) => {
            // Its first pass waits for work the window holds up: it may still run.
            r.passes += 1;
            r.pass_times.push(None);
            Err(Broken {
                kind: OutcomeKind::Declined(DeclineReason::LockContention),
                late: true,
            })
        }
        Err(PassError::Late) => {
            r.passes += 1;
            r.pass_times.push(None);
            if r.target.settle_late_pass() {
                Err(Broken {
                    kind: OutcomeKind::Declined(DeclineReason::PassTimeout),
                    late: false,
                })
            } else {
                r.kind = Some(OutcomeKind::Failed(FailureReason::PassStuck));
                Err(Broken {
                    kind: OutcomeKind::Failed(FailureReason::PassStuck),
                    late: true,
                })
            }
        }
    }
}

/// A later member's dispatch runs (untimed, no policy call) where its pass did not: its
/// first pass, or its part of a run's state after an earlier member ran again. Its record
/// says `failed` when even that cannot be submitted.
pub(super) fn once_more(r: &mut Rider<'_>) -> bool {
    match r.target.run_pass(false) {
        Ok(_) => {
            r.passes += 1;
            r.pass_times.push(None);
            true
        }
        Err(PassError::Late) if r.target.settle_late_pass() => {
            r.passes += 1;
            r.pass_times.push(None);
            true
        }
        Err(_) => {
            tracing::error!(
                kernel = r.info.kernel(),
                "a later dispatch of a run could not be run: the application has no result of it"
            );
            r.kind = Some(OutcomeKind::Failed(FailureReason::RunFailed));
            false
        }
    }
}

/// Pass `index` of the run's later members, in order, after the first member's; the first
/// member's sticky contexts (`first`) are off the stack meanwhile.
pub(super) fn ride(
    riders: &mut [Rider<'_>],
    index: u32,
    first: &LoopContexts,
) -> Result<(), Broken> {
    let parked = first.park();
    let result = if riders.len() > 1 && riders.iter().all(|r| r.target.splits_passes()) {
        ride_queued(riders, index)
    } else {
        riders
            .iter_mut()
            .try_for_each(|rider| rider_pass(rider, index))
    };
    first.unpark(parked);
    result
}

/// A later pass of the run's later members, queued: each member's `on_pass`, then its pass
/// submitted behind the one before (its contexts set aside until it is collected); then each
/// pass waited for in order and its `on_pass_end`. One wait for all instead of one per member
/// (and on CUDA one flush of CUPTI's kernel records). A member whose `on_pass` panics or whose
/// pass cannot be submitted ends the submissions; the passes already submitted are collected
/// all the same, then the first break is returned.
pub(super) fn ride_queued(riders: &mut [Rider<'_>], index: u32) -> Result<(), Broken> {
    let submitted = submit_riders(riders, index, true);
    collect_riders(riders, index, submitted, false)
}

/// The later members' passes [`submit_riders`] queued, in order: whether each is timed and
/// how long its submission took; and why the submissions stopped, if they did.
pub(super) struct Submitted {
    queued: smallvec::SmallVec<[(bool, Duration); 16]>,
    stop: Option<Broken>,
}

impl Submitted {
    /// How many members' passes were submitted (the first ones, in order).
    pub(super) fn len(&self) -> usize {
        self.queued.len()
    }

    /// Whether the submissions stopped before the last member.
    pub(super) fn stopped(&self) -> bool {
        self.stop.is_some()
    }
}

/// The first half of [`ride_queued`]: each later member's `on_pass` and its pass submitted
/// behind everything the window submitted before it, its contexts set aside. Stops at the
/// first member whose `on_pass` panics or whose pass cannot be submitted. With `wait`, then
/// waits for the last pass submitted (collecting each then finds it done).
pub(super) fn submit_riders(riders: &mut [Rider<'_>], index: u32, wait: bool) -> Submitted {
    let mut queued = smallvec::SmallVec::new();
    let mut stop = None;
    for r in riders.iter_mut() {
        if !r.member.begin_pass(&r.info, index) {
            r.member.end_pass(&r.info, index, None);
            r.kind = Some(OutcomeKind::Declined(DeclineReason::PolicyPanicked));
            stop = Some(Broken {
                kind: OutcomeKind::Declined(DeclineReason::PolicyPanicked),
                late: false,
            });
            break;
        }
        // Asked per member, with its contexts on the stack.
        let timed = service_active(Service::DispatchTiming);
        let submitting = phases::enabled().then(Instant::now);
        match r.target.submit_pass(timed) {
            Ok(()) => {
                r.member.set_aside();
                queued.push((timed, submitting.map_or(Duration::ZERO, |t| t.elapsed())));
            }
            Err(error) => {
                r.member.end_pass(&r.info, index, None);
                stop = Some(Broken {
                    kind: OutcomeKind::Declined(match error {
                        PassError::NotSubmitted(reason) => reason,
                        _ => DeclineReason::SubmitFailed,
                    }),
                    late: false,
                });
                break;
            }
        }
    }
    if let Some(r) = riders[..queued.len()].last_mut().filter(|_| wait) {
        // Everything queued completes with the last pass: one wait for it, then each
        // collection finds its pass done (on CUDA, one flush brings every kernel record).
        phases::timed(Phase::Await, || r.target.await_pass());
    }
    Submitted { queued, stop }
}

/// The second half of [`ride_queued`]: each submitted pass waited for in order and its
/// `on_pass_end`. With `stuck`, the pass they are queued behind (the run's first member's)
/// is still running past the late deadline: every one is abandoned, none waited for.
pub(super) fn collect_riders(
    riders: &mut [Rider<'_>],
    index: u32,
    submitted: Submitted,
    stuck: bool,
) -> Result<(), Broken> {
    let Submitted { queued, stop } = submitted;
    let mut result: Result<(), Broken> = if stuck {
        Err(Broken {
            kind: OutcomeKind::Failed(FailureReason::PassStuck),
            late: true,
        })
    } else {
        Ok(())
    };
    for (r, (timed, submitted)) in riders.iter_mut().zip(queued) {
        r.member.resume();
        if matches!(&result, Err(b) if b.late) {
            // Queued behind a pass still running past the late deadline: stuck with it.
            r.target.abandon_pass();
            r.member.end_pass(&r.info, index, None);
            r.passes += 1;
            r.pass_times.push(None);
            r.kind = Some(OutcomeKind::Failed(FailureReason::PassStuck));
            continue;
        }
        let collecting = phases::enabled().then(Instant::now);
        let ran = r.target.collect_pass();
        if let Some(t) = collecting {
            phases::add(Phase::Pass, submitted + t.elapsed());
        }
        if let Err(broken) = finish_rider_pass(r, index, timed, ran)
            // The first break is the run's, unless a later one leaves a pass running.
            && (result.is_ok() || broken.late)
        {
            result = Err(broken);
        }
    }
    match stop {
        Some(broken) if result.is_ok() => Err(broken),
        _ => result,
    }
}

/// After the first member's pass `index` ended the window early and its result stands: the
/// later members that have not run pass `index` run once more, in order, so memory holds one
/// execution of the whole run (those whose pass `index` was queued behind it ran already).
pub(super) fn follow_riders(riders: &mut [Rider<'_>], index: u32, outcome: &mut Outcome) {
    for r in riders.iter_mut() {
        if r.passes > index {
            continue;
        }
        if !once_more(r) {
            outcome.kind = OutcomeKind::Failed(FailureReason::RunFailed);
            return;
        }
    }
}

/// After the first member ran once more (from restored inputs): the later members follow, so
/// memory holds one execution of the whole run.
pub(super) fn rerun_riders(riders: &mut [Rider<'_>], outcome: &mut Outcome) {
    for r in riders.iter_mut() {
        if !once_more(r) {
            outcome.kind = OutcomeKind::Failed(FailureReason::RunFailed);
            return;
        }
    }
}

/// The run's later members after the first member's outcome: each gets the window's figures
/// with its own passes and `on_end`; they go to `later`, in order, for the backend to record
/// after the first member's and release after its completion.
pub(super) fn end_run<'s>(
    first: Outcome,
    riders: Vec<Rider<'s>>,
    later: &mut Vec<Later<'s>>,
) -> Outcome {
    for mut r in riders {
        let mut outcome = first.clone();
        outcome.kind = r.kind.unwrap_or(first.kind);
        outcome.passes = r.passes;
        outcome.pass_times = std::mem::take(&mut r.pass_times);
        match r.metrics.take() {
            Some(own) => outcome.metrics = own,
            // Never the first member's values: its own were not all collected.
            None if matches!(outcome.metrics, Metrics::Values(_)) => {
                outcome.metrics = Metrics::Absent(
                    "not_collected: a counter pass of the run did not measure this dispatch".into(),
                );
            }
            None => {}
        }
        outcome.inputs_restored = restored_verdict(&outcome);
        r.target.complete();
        r.member.end(&r.info, &outcome);
        later.push(Later {
            info: r.info,
            outcome,
            target: r.target,
        });
    }
    first
}
