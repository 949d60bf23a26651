//! The replay window against a simulated device: every row of the reference pass-count table,
//! the per-dispatch/per-pass state rules, and every decline path.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::context::Context;
use crate::dispatch::{AgentId, DispatchId, QueueId};
use crate::engine::inventory::Origin;
use crate::engine::snapshot::{CopyError, Direction, Transfer, host_copy};

/// A device whose memory is a host buffer and whose kernel is `a[i] += 1; counter += 1`.
struct SimDevice {
    data: Vec<u32>,
    counter: u32,
    passes: u32,
    ordinary_runs: u32,
    completions: u32,
    fail_drain: bool,
    fail_reads: bool,
    /// Restore batches that fail (counted down).
    failing_restores: u32,
    stuck_restore: bool,
    /// The pass (0-based) that outlives its deadline: it runs, but "late".
    late_pass: Option<u32>,
    /// `run_pass` of this pass gives way ([`PassError::Yielded`]) after running the kernel.
    yielded_pass: Option<u32>,
    /// The late pass never completes.
    stuck_pass: bool,
    /// The pass that cannot be submitted.
    unsubmittable_pass: Option<u32>,
    /// The ordinary run cannot be submitted.
    unrunnable: bool,
    /// Contention reported after this many passes.
    contended_after: Option<u32>,
    /// The window is open (between `begin` and `end`).
    open: bool,
    /// Mirrors `open` for a policy to look at.
    open_flag: Option<Arc<AtomicBool>>,
    ended: u32,
    inputs_seen: Vec<Vec<u32>>,
    /// Counters: `Err` refuses the set; `Ok`: metrics per counter pass once prepared.
    counter_setup: Result<(), String>,
    prepared: Vec<u32>,
    armed: Option<u32>,
    /// Per pass run (window index): the counter pass it carried.
    armed_log: Vec<Option<u32>>,
}

impl SimDevice {
    fn new() -> Self {
        SimDevice {
            data: (0..16).collect(),
            counter: 0,
            passes: 0,
            ordinary_runs: 0,
            completions: 0,
            fail_drain: false,
            fail_reads: false,
            failing_restores: 0,
            stuck_restore: false,
            late_pass: None,
            yielded_pass: None,
            stuck_pass: false,
            unsubmittable_pass: None,
            contended_after: None,
            unrunnable: false,
            open: false,
            open_flag: None,
            ended: 0,
            inputs_seen: Vec::new(),
            counter_setup: Ok(()),
            prepared: Vec::new(),
            armed: None,
            armed_log: Vec::new(),
        }
    }
    fn kernel(&mut self) {
        self.inputs_seen.push(self.data.clone());
        for x in &mut self.data {
            *x += 1;
        }
        self.counter += 1;
    }
    fn base(&self) -> usize {
        self.data.as_ptr() as usize
    }
    fn counter_addr(&self) -> usize {
        &self.counter as *const u32 as usize
    }
}

impl DeviceMemory for SimDevice {
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
        match direction {
            Direction::Capture if self.fail_reads => return Err(CopyError::Failed),
            Direction::Restore if self.stuck_restore => return Err(CopyError::Stuck),
            Direction::Restore if self.failing_restores > 0 => {
                self.failing_restores -= 1;
                // A failed batch may have copied part of its regions: copy the first only.
                // SAFETY: the engine only passes regions registered below (live fields of
                // self) and its own heap staging.
                unsafe { host_copy(direction, &transfers[..1]) };
                return Err(CopyError::Failed);
            }
            _ => {}
        }
        // SAFETY: as above.
        unsafe { host_copy(direction, transfers) };
        Ok(())
    }
}

impl ReplayTarget for SimDevice {
    fn begin(&mut self) -> Result<(), DeclineReason> {
        self.open = true;
        if let Some(f) = &self.open_flag {
            f.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
    fn drain(&mut self) -> Result<(), DeclineReason> {
        if self.fail_drain {
            Err(DeclineReason::DrainTimeout)
        } else {
            Ok(())
        }
    }
    fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason> {
        Ok(vec![(self.counter_addr(), 4)])
    }
    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        if self.unsubmittable_pass == Some(self.passes) {
            return Err(PassError::NotSubmitted(DeclineReason::SubmitFailed));
        }
        let index = self.passes;
        self.passes += 1;
        self.armed_log.push(self.armed);
        self.kernel();
        if self.late_pass == Some(index) {
            return Err(PassError::Late);
        }
        if self.yielded_pass == Some(index) {
            return Err(PassError::Yielded);
        }
        Ok(timed.then_some(Duration::from_nanos(1000 + self.passes as u64)))
    }
    fn run_once(&mut self) -> bool {
        if self.unrunnable {
            return false;
        }
        self.ordinary_runs += 1;
        self.kernel();
        self.completions += 1;
        true
    }
    fn complete(&mut self) {
        self.completions += 1;
    }
    fn settle_late_pass(&mut self) -> bool {
        // The late pass already ran in `run_pass`; it "completes" unless it is stuck.
        !self.stuck_pass
    }
    fn contended(&self) -> bool {
        self.contended_after.is_some_and(|n| self.passes >= n)
    }
    fn prepare_counters(&mut self, set: &MetricSet) -> Result<(), String> {
        self.counter_setup.clone()?;
        self.prepared = (0..set.pass_count())
            .map(|p| set.pass(p).count() as u32)
            .collect();
        Ok(())
    }
    fn arm_counters(&mut self, pass: Option<u32>) {
        self.armed = pass;
    }
    /// Each metric's value: what the pass saw in `data[0]` times 100, plus its position.
    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let seen = u64::from(self.inputs_seen.last().map_or(0, |i| i[0]));
        Ok((0..self.prepared[pass as usize])
            .map(|i| seen * 100 + u64::from(i))
            .collect())
    }
    fn end(&mut self) {
        assert!(self.open, "end without begin");
        self.open = false;
        if let Some(f) = &self.open_flag {
            f.store(false, Ordering::SeqCst);
        }
        self.ended += 1;
    }
}

fn info() -> DispatchInfo {
    DispatchInfo {
        runtime: crate::dispatch::Runtime::Hsa,
        agent: AgentId(7),
        agent_index: 0,
        queue: QueueId(1),
        dispatch_id: DispatchId(42),
        kernel_object: 0x1000,
        kernel_name: Some("inc".into()),
        grid: [16, 1, 1],
        workgroup: [16, 1, 1],
        blocks: [1, 1, 1],
        group_segment_size: 0,
        private_segment_size: 0,
        context: None,
    }
}

fn settings(budget: u64) -> Settings {
    Settings {
        budget,
        ..Settings::from_lookup(|_| None)
    }
}

/// Runs `policy` on a fresh device; returns the device and outcome.
fn run<P: ReplayPolicy>(policy: &P, setup: impl FnOnce(&mut SimDevice)) -> (SimDevice, Outcome) {
    let mut dev = SimDevice::new();
    setup(&mut dev);
    let inv = AllocationInventory::new();
    inv.record(dev.base(), dev.data.len() * 4, AgentId(7), Origin::Pool);
    let out = run_window(policy, &info(), &mut dev, &inv, &settings(u64::MAX));
    assert!(!dev.open, "the window was left open");
    (dev, out)
}

/// The application must see exactly one execution and one completion.
fn assert_one_execution(dev: &SimDevice) {
    assert_eq!(dev.completions, 1, "completions");
    assert_eq!(
        dev.data,
        (1..17).collect::<Vec<u32>>(),
        "memory shows one execution"
    );
    assert_eq!(dev.counter, 1, "module counter shows one execution");
}

/// The shape of the plan of a policy with a continue decision.
#[derive(Clone, Copy)]
enum Shape {
    /// A fixed plan from a policy that does implement `should_continue`: never consulted.
    Exactly(u32),
    UpTo(u32),
    Until,
}

/// A plan with a continue decision, records what it saw.
struct Plan {
    shape: Shape,
    stop_after: Option<u32>,
    /// `should_continue` panics after this many completed passes.
    panic_after: Option<u32>,
    /// `completed` of every `should_continue` call, in order.
    asked: Mutex<Vec<u32>>,
    ends: Mutex<Vec<(Vec<String>, OutcomeKind)>>,
}

impl Plan {
    fn new(shape: Shape, stop_after: Option<u32>) -> Self {
        Plan {
            shape,
            stop_after,
            panic_after: None,
            asked: Mutex::new(Vec::new()),
            ends: Mutex::new(Vec::new()),
        }
    }
}

impl ReplayPolicy for Plan {
    type State = Vec<String>;
    type PassState = Option<u32>;
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        match self.shape {
            Shape::Exactly(n) => PassPlan::exactly(n, Vec::new()),
            Shape::UpTo(n) => PassPlan::up_to(n, Vec::new()),
            Shape::Until => PassPlan::until(Vec::new()),
        }
    }
    fn should_continue(&self, info: &DispatchInfo, state: &Vec<String>, completed: u32) -> bool {
        assert_eq!(
            info.dispatch_id,
            DispatchId(42),
            "should_continue sees the dispatch"
        );
        assert_eq!(
            state.last(),
            Some(&format!("end {}", completed - 1)),
            "should_continue runs after the pass end of the pass it counts"
        );
        self.asked.lock().unwrap().push(completed);
        if self.panic_after == Some(completed) {
            panic!("policy bug in should_continue");
        }
        self.stop_after.is_none_or(|n| completed < n)
    }
    fn on_pass(&self, pass: &mut Pass<'_>, state: &mut Vec<String>, scope: &mut Option<u32>) {
        assert_eq!(*scope, None, "per-pass state leaked from the previous pass");
        *scope = Some(pass.index());
        state.push(format!("pass {}", pass.index()));
    }
    fn on_pass_end(&self, pass: &PassReport<'_>, state: &mut Vec<String>, scope: &mut Option<u32>) {
        assert_eq!(
            *scope,
            Some(pass.index),
            "pass end sees its own pass start's write"
        );
        state.push(format!("end {}", pass.index));
    }
    fn on_end(&self, _: &DispatchInfo, state: Vec<String>, outcome: &Outcome) {
        self.ends.lock().unwrap().push((state, outcome.kind));
    }
}

/// Same, without a continue decision.
struct NoContinue(fn() -> PassPlan<NoContinue>);
impl ReplayPolicy for NoContinue {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        (self.0)()
    }
}

#[test]
fn row_no_decision_is_not_replayed() {
    let (dev, out) = run(&NoContinue(PassPlan::skip), |_| {});
    assert_eq!(out.kind, OutcomeKind::Skipped);
    assert_eq!(
        (dev.passes, dev.ordinary_runs, out.snapshot_bytes),
        (0, 1, 0)
    );
    assert_eq!((out.snapshot_regions, out.window_time), (0, Duration::ZERO));
    assert_one_execution(&dev);
}

#[test]
fn row_one_pass_is_not_replayed() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(1, ())), |_| {});
    assert_eq!(out.kind, OutcomeKind::Skipped);
    assert_eq!((dev.passes, dev.ordinary_runs), (0, 1));
    assert_one_execution(&dev);
}

#[test]
fn row_n_passes_without_continue_runs_exactly_n() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(5, ())), |_| {});
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!((out.passes, dev.passes, dev.ordinary_runs), (5, 5, 0));
    assert_eq!(out.snapshot_bytes, 16 * 4 + 4);
    assert_eq!(
        out.snapshot_regions, 2,
        "the buffer and the module variable"
    );
    assert_eq!(
        out.restored_bytes,
        4 * (16 * 4 + 4),
        "restored between passes, not after the last"
    );
    assert!(
        out.window_time >= out.snapshot_time + out.restore_time && out.window_time > Duration::ZERO,
        "the window's time holds its capture and restores: {out:?}"
    );
    assert!(
        dev.inputs_seen
            .iter()
            .all(|i| *i == (0..16).collect::<Vec<u32>>()),
        "every pass saw the same inputs"
    );
    assert_one_execution(&dev);
}

#[test]
fn row_up_to_n_with_continue_may_stop_early() {
    let p = Plan::new(Shape::UpTo(8), Some(3));
    let (dev, out) = run(&p, |_| {});
    assert_eq!((out.kind, out.passes), (OutcomeKind::Replayed, 3));
    assert_one_execution(&dev);
    let ends = p.ends.lock().unwrap();
    assert_eq!(
        ends[0].0,
        ["pass 0", "end 0", "pass 1", "end 1", "pass 2", "end 2"]
    );
    assert_eq!(
        *p.asked.lock().unwrap(),
        [1, 2, 3],
        "asked after every pass"
    );
}

#[test]
fn row_up_to_one_pass_is_not_replayed_and_not_consulted() {
    let p = Plan::new(Shape::UpTo(1), None);
    let (dev, out) = run(&p, |_| {});
    assert_eq!(out.kind, OutcomeKind::Skipped);
    assert_eq!((dev.passes, dev.ordinary_runs), (0, 1));
    assert!(p.asked.lock().unwrap().is_empty());
    assert_one_execution(&dev);
}

#[test]
fn an_exactly_plan_never_consults_should_continue() {
    // The policy implements `should_continue` (it would stop after 1 pass), but the plan says
    // "exactly 4": the plan decides whether the method is asked.
    let p = Plan::new(Shape::Exactly(4), Some(1));
    let (dev, out) = run(&p, |_| {});
    assert_eq!(
        (out.kind, out.passes, dev.passes),
        (OutcomeKind::Replayed, 4, 4)
    );
    assert!(p.asked.lock().unwrap().is_empty(), "exactly never consults");
    assert_one_execution(&dev);
}

#[test]
fn a_panicking_should_continue_declines_with_one_correct_execution() {
    let mut p = Plan::new(Shape::UpTo(8), None);
    p.panic_after = Some(2);
    let (dev, out) = run(&p, |_| {});
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::PolicyPanicked)
    );
    assert_eq!(out.passes, 2, "stopped after the pass it was asked about");
    assert_eq!(*p.asked.lock().unwrap(), [1, 2]);
    assert_eq!(p.ends.lock().unwrap().len(), 1, "on_end still ran");
    assert_one_execution(&dev);
}

#[test]
fn row_up_to_n_never_exceeds_n() {
    let p = Plan::new(Shape::UpTo(4), None);
    let (dev, out) = run(&p, |_| {});
    assert_eq!(out.passes, 4);
    assert_eq!(
        *p.asked.lock().unwrap(),
        [1, 2, 3],
        "not asked after the last allowed pass"
    );
    assert_one_execution(&dev);
}

#[test]
fn row_open_ended_with_continue_runs_until_told() {
    let p = Plan::new(Shape::Until, Some(6));
    let (dev, out) = run(&p, |_| {});
    assert_eq!((out.kind, out.passes), (OutcomeKind::Replayed, 6));
    assert_eq!(*p.asked.lock().unwrap(), [1, 2, 3, 4, 5, 6]);
    assert_one_execution(&dev);
}

#[test]
fn row_open_ended_is_capped() {
    let p = Plan::new(Shape::Until, None);
    let (dev, out) = run(&p, |_| {});
    assert_eq!(out.passes, MAX_OPEN_ENDED_PASSES);
    assert_eq!(
        p.asked.lock().unwrap().len() as u32,
        MAX_OPEN_ENDED_PASSES - 1,
        "asked after every pass but the capped last one"
    );
    assert_one_execution(&dev);
}

#[test]
fn drain_timeout_declines_and_runs_once() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(3, ())), |d| {
        d.fail_drain = true
    });
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::DrainTimeout));
    assert_one_execution(&dev);
}

#[test]
fn failed_capture_declines_and_runs_once() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(3, ())), |d| {
        d.fail_reads = true
    });
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::CopyFailed));
    assert_eq!(dev.passes, 0);
    assert_one_execution(&dev);
}

#[test]
fn over_budget_declines() {
    let mut dev = SimDevice::new();
    let inv = AllocationInventory::new();
    inv.record(dev.base(), 64, AgentId(7), Origin::Pool);
    let out = run_window(
        &NoContinue(|| PassPlan::exactly(3, ())),
        &info(),
        &mut dev,
        &inv,
        &settings(10),
    );
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::OverBudget));
    assert_one_execution(&dev);
}

#[test]
fn a_late_pass_is_the_one_execution_nothing_is_restored_or_run_again() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(4, ())), |d| {
        d.late_pass = Some(2)
    });
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::PassTimeout));
    assert_eq!((out.passes, dev.passes, dev.ordinary_runs), (3, 3, 0));
    assert_eq!(out.pass_times.len(), 3);
    assert_eq!(
        out.restored_bytes,
        2 * (16 * 4 + 4),
        "restored before passes 1 and 2 only"
    );
    assert_one_execution(&dev);
}

#[test]
fn a_first_pass_that_gives_way_is_the_one_execution_and_the_window_ends_at_once() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(4, ())), |d| {
        d.yielded_pass = Some(0);
    });
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::LockContention)
    );
    assert_eq!((out.passes, dev.passes, dev.ordinary_runs), (1, 1, 0));
    assert_eq!(out.pass_times, vec![None]);
    assert_eq!(out.restored_bytes, 0, "nothing restored");
    // Completed once (the backend delivers it behind the pass), the agent given back.
    assert_eq!((dev.completions, dev.ended), (1, 1));
    assert_one_execution(&dev);
}

#[test]
fn a_pass_still_running_at_the_late_deadline_fails_but_the_app_gets_its_completion() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(4, ())), |d| {
        d.late_pass = Some(1);
        d.stuck_pass = true;
    });
    assert_eq!(out.kind, OutcomeKind::Failed(FailureReason::PassStuck));
    assert_eq!((dev.completions, dev.ordinary_runs, dev.ended), (1, 0, 1));
}

#[test]
fn a_pass_that_cannot_be_submitted_declines_and_runs_once_from_the_restored_inputs() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(4, ())), |d| {
        d.unsubmittable_pass = Some(1)
    });
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::SubmitFailed));
    assert_eq!((dev.passes, dev.ordinary_runs), (1, 1));
    assert_one_execution(&dev);
}

#[test]
fn a_final_run_that_cannot_be_submitted_after_passes_is_a_failure() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(4, ())), |d| {
        d.unsubmittable_pass = Some(2);
        d.unrunnable = true;
    });
    assert_eq!(out.kind, OutcomeKind::Failed(FailureReason::RunFailed));
    assert_eq!(dev.ended, 1);
}

#[test]
fn a_decline_whose_ordinary_run_cannot_be_submitted_is_a_failure_not_a_decline() {
    // Declined inside the window (the drain timed out), and then the one ordinary run could
    // not be submitted either: the application has no result, so the record must not say
    // `declined` (one correct execution).
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(3, ())), |d| {
        d.fail_drain = true;
        d.unrunnable = true;
    });
    assert_eq!(out.kind, OutcomeKind::Failed(FailureReason::RunFailed));
    assert_eq!((dev.passes, dev.ended), (0, 1));
}

#[test]
fn a_restore_that_fails_once_is_retried_and_the_replay_goes_on() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(3, ())), |d| {
        d.failing_restores = 1
    });
    assert_eq!((out.kind, out.passes), (OutcomeKind::Replayed, 3));
    assert_one_execution(&dev);
}

#[test]
fn a_restore_that_keeps_failing_is_a_failure_not_a_decline() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(3, ())), |d| {
        d.failing_restores = 2
    });
    assert_eq!(out.kind, OutcomeKind::Failed(FailureReason::RestoreFailed));
    assert_eq!(out.kind.label(), "failed");
    assert_eq!(out.kind.reason_code(), Some("restore_failed"));
    // The application got its one completion; its memory is not trusted.
    assert_eq!(dev.completions, 1);
    assert_eq!(dev.ended, 1);
}

#[test]
fn a_stuck_restore_is_a_failure() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(3, ())), |d| {
        d.stuck_restore = true
    });
    assert_eq!(out.kind, OutcomeKind::Failed(FailureReason::RestoreStuck));
    assert_eq!(dev.completions, 1);
}

#[test]
fn contention_stops_the_replay_after_the_running_pass() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(6, ())), |d| {
        d.contended_after = Some(2)
    });
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::LockContention)
    );
    assert_eq!((out.passes, dev.passes, dev.ordinary_runs), (2, 2, 0));
    assert_one_execution(&dev);
}

#[test]
fn an_absurd_pass_count_is_declined_and_runs_once() {
    let exactly = NoContinue(|| PassPlan::exactly(MAX_PASSES + 1, ()));
    let up_to = Plan::new(Shape::UpTo(MAX_PASSES + 1), None);
    for (dev, out) in [run(&exactly, |_| {}), run(&up_to, |_| {})] {
        assert_eq!(
            out.kind,
            OutcomeKind::Declined(DeclineReason::TooManyPasses)
        );
        assert_eq!((dev.passes, dev.ordinary_runs, dev.ended), (0, 1, 0));
        assert_one_execution(&dev);
    }
    assert!(up_to.asked.lock().unwrap().is_empty(), "never consulted");
    let (_, out) = run(&NoContinue(|| PassPlan::exactly(MAX_PASSES, ())), |_| {});
    assert_eq!(out.passes, MAX_PASSES, "the cap itself is allowed");
}

/// Records, at `on_end`, whether the device's window was still open.
struct ChecksEnd {
    open: Arc<AtomicBool>,
    open_at_end: Mutex<Vec<bool>>,
}
impl ReplayPolicy for ChecksEnd {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(3, ())
    }
    fn on_end(&self, _: &DispatchInfo, _: (), _: &Outcome) {
        self.open_at_end
            .lock()
            .unwrap()
            .push(self.open.load(Ordering::SeqCst));
    }
}

#[test]
fn every_way_out_of_a_window_ends_it_exactly_once() {
    let setups: [fn(&mut SimDevice); 7] = [
        |_| {},
        |d| d.fail_drain = true,
        |d| d.fail_reads = true,
        |d| d.late_pass = Some(1),
        |d| d.unsubmittable_pass = Some(0),
        |d| d.failing_restores = 2,
        |d| d.contended_after = Some(1),
    ];
    let open = Arc::new(AtomicBool::new(false));
    let policy = ChecksEnd {
        open: open.clone(),
        open_at_end: Mutex::new(Vec::new()),
    };
    for setup in setups {
        let (dev, _) = run(&policy, |d| {
            d.open_flag = Some(open.clone());
            setup(d)
        });
        assert_eq!(dev.ended, 1);
        assert_eq!(dev.completions, 1);
    }
    let at_end = policy.open_at_end.lock().unwrap();
    assert_eq!(at_end.len(), setups.len());
    assert!(
        at_end.iter().all(|open| !open),
        "on_end ran inside the window: {at_end:?}"
    );
}

struct Panics {
    at_pass: u32,
    in_end: bool,
    ended: AtomicU32,
}
impl ReplayPolicy for Panics {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(5, ())
    }
    fn on_pass(&self, pass: &mut Pass<'_>, _: &mut (), _: &mut ()) {
        if !self.in_end && pass.index() == self.at_pass {
            panic!("policy bug");
        }
    }
    fn on_pass_end(&self, pass: &PassReport<'_>, _: &mut (), _: &mut ()) {
        if self.in_end && pass.index == self.at_pass {
            panic!("policy bug at end");
        }
    }
    fn on_end(&self, _: &DispatchInfo, _: (), _: &Outcome) {
        self.ended.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_panicking_policy_leaves_one_correct_execution() {
    for at_pass in [0, 2] {
        for in_end in [false, true] {
            let p = Panics {
                at_pass,
                in_end,
                ended: AtomicU32::new(0),
            };
            let (dev, out) = run(&p, |_| {});
            assert_eq!(
                out.kind,
                OutcomeKind::Declined(DeclineReason::PolicyPanicked),
                "{at_pass} {in_end}"
            );
            assert_one_execution(&dev);
            assert_eq!(p.ended.load(Ordering::Relaxed), 1);
        }
    }
}

/// Enables a timing context on pass 2 only.
struct TimesPassTwo {
    ctx: Context,
    /// (`PassReport::timed`, `PassReport::kernel_time`) of each pass.
    times: Mutex<Vec<(bool, Option<Duration>)>>,
}
impl ReplayPolicy for TimesPassTwo {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(4, ())
    }
    fn on_pass(&self, pass: &mut Pass<'_>, _: &mut (), _: &mut ()) {
        match pass.index() {
            2 => pass.contexts().enable(&self.ctx),
            3 => pass.contexts().disable(&self.ctx),
            _ => {}
        }
    }
    fn on_pass_end(&self, pass: &PassReport<'_>, _: &mut (), _: &mut ()) {
        self.times
            .lock()
            .unwrap()
            .push((pass.timed, pass.kernel_time));
    }
}

#[test]
fn a_context_enabled_on_pass_two_times_only_pass_two() {
    let p = TimesPassTwo {
        ctx: Context::new("pass-two-timing", &[Service::DispatchTiming]),
        times: Mutex::new(Vec::new()),
    };
    let (_, out) = run(&p, |_| {});
    let reports = p.times.lock().unwrap().clone();
    let timed: Vec<bool> = reports.iter().map(|r| r.0).collect();
    assert_eq!(timed, [false, false, true, false]);
    let times: Vec<Option<Duration>> = reports.iter().map(|r| r.1).collect();
    assert!(times[2].is_some(), "{times:?}");
    assert!(
        times[0].is_none() && times[1].is_none() && times[3].is_none(),
        "{times:?}"
    );
    assert!(!p.ctx.is_active(), "override leaked out of the loop");
    assert_eq!(out.pass_times, times);
}

mod counters {
    use super::*;
    use crate::counters::{CounterCatalog, MetricSet, MetricValue, Metrics};

    fn catalog() -> CounterCatalog {
        CounterCatalog::new("gfx90a")
            .block("SQ", 2)
            .block("GRBM", 2)
            .counter("SQ_WAVES", "SQ", 4)
            .counter("SQ_ITEMS", "SQ", 14)
            .counter("SQ_WAVES_EQ_64", "SQ", 6)
            .counter("GRBM_COUNT", "GRBM", 0)
    }

    /// `passes` timed passes of its own, and a metric set.
    struct Counting {
        passes: u32,
        set: Arc<MetricSet>,
        on_pass: AtomicU32,
    }

    impl ReplayPolicy for Counting {
        type State = ();
        type PassState = ();
        fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
            PassPlan::exactly(self.passes, ())
        }
        fn metrics(&self, _: &DispatchInfo) -> Option<Arc<MetricSet>> {
            Some(self.set.clone())
        }
        fn on_pass(&self, _: &mut Pass<'_>, _: &mut (), _: &mut ()) {
            self.on_pass.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting(passes: u32, names: &[&str]) -> Counting {
        Counting {
            passes,
            set: Arc::new(MetricSet::new(&catalog(), names).unwrap()),
            on_pass: AtomicU32::new(0),
        }
    }

    #[test]
    fn counter_passes_follow_the_policys_and_each_carries_its_own_configuration() {
        let p = counting(2, &["SQ_WAVES", "SQ_ITEMS", "GRBM_COUNT", "SQ_WAVES_EQ_64"]);
        let (dev, out) = run(&p, |_| {});
        assert_eq!(out.kind, OutcomeKind::Replayed);
        // Two of the policy's, two counter passes (three SQ counters, two per pass).
        assert_eq!(out.passes, 4);
        assert_eq!(dev.armed_log, [None, None, Some(0), Some(1)]);
        assert_eq!(
            p.on_pass.load(Ordering::SeqCst),
            2,
            "counter passes are the engine's"
        );
        assert_eq!(
            out.pass_times[2..],
            [None, None],
            "counter passes are not timed"
        );
        assert_eq!(out.inputs_restored, Some(true));
        // Every pass saw the captured inputs (data[0] == 0), the application one execution.
        assert!(dev.inputs_seen.iter().all(|i| i[0] == 0));
        assert_one_execution(&dev);
        let Metrics::Values(v) = &out.metrics else {
            panic!("{:?}", out.metrics)
        };
        let at = MetricValue::count;
        assert_eq!(v.get("SQ_WAVES"), Some(at(0, 2)));
        assert_eq!(v.get("SQ_ITEMS"), Some(at(1, 2)));
        assert_eq!(v.get("GRBM_COUNT"), Some(at(2, 2)));
        assert_eq!(v.get("SQ_WAVES_EQ_64"), Some(at(0, 3)));
    }

    #[test]
    fn a_plan_of_one_pass_with_counters_replays_the_application_pass_then_the_counters() {
        let p = counting(1, &["SQ_WAVES"]);
        let (dev, out) = run(&p, |_| {});
        assert_eq!(out.kind, OutcomeKind::Replayed);
        assert_eq!(
            dev.armed_log,
            [None, Some(0)],
            "pass 0 never carries counters"
        );
        assert_one_execution(&dev);
        assert_eq!(
            out.metrics.values().unwrap().get("SQ_WAVES"),
            Some(MetricValue::count(0, 1))
        );
    }

    #[test]
    fn a_refused_counter_set_up_leaves_the_policys_passes_and_says_why() {
        let p = counting(3, &["SQ_WAVES"]);
        let (dev, out) = run(&p, |d| d.counter_setup = Err("no extension".into()));
        assert_eq!(out.kind, OutcomeKind::Replayed);
        assert_eq!(out.passes, 3);
        assert!(dev.armed_log.iter().all(Option::is_none));
        assert_eq!(
            out.metrics.absent_reason(),
            Some("counters_unavailable: no extension")
        );
        assert_one_execution(&dev);
        // Counters only: the dispatch runs once, the ordinary way.
        let p = counting(1, &["SQ_WAVES"]);
        let (dev, out) = run(&p, |d| d.counter_setup = Err("no extension".into()));
        assert_eq!(out.kind, OutcomeKind::Skipped);
        assert_eq!((dev.passes, dev.ordinary_runs), (0, 1));
        assert_eq!(
            out.metrics.absent_reason(),
            Some("counters_unavailable: no extension")
        );
        assert_one_execution(&dev);
    }

    /// Up to 5 passes, stopping after 2; one counter pass.
    struct Consulting(Arc<MetricSet>);

    impl ReplayPolicy for Consulting {
        type State = ();
        type PassState = ();
        fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
            PassPlan::up_to(5, ())
        }
        fn should_continue(&self, _: &DispatchInfo, _: &(), completed: u32) -> bool {
            completed < 2
        }
        fn metrics(&self, _: &DispatchInfo) -> Option<Arc<MetricSet>> {
            Some(self.0.clone())
        }
    }

    #[test]
    fn counter_passes_follow_a_consulting_plan_once_it_stops() {
        let set = Arc::new(MetricSet::new(&catalog(), ["SQ_WAVES"]).unwrap());
        let (dev, out) = run(&Consulting(set), |_| {});
        assert_eq!(out.kind, OutcomeKind::Replayed);
        assert_eq!(dev.armed_log, [None, None, Some(0)]);
        assert_eq!(
            out.metrics
                .values()
                .unwrap()
                .get("SQ_WAVES")
                .map(|v| v.pass),
            Some(2)
        );
        assert_one_execution(&dev);
    }

    struct PanicsInMetrics;

    impl ReplayPolicy for PanicsInMetrics {
        type State = ();
        type PassState = ();
        fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
            PassPlan::exactly(3, ())
        }
        fn metrics(&self, _: &DispatchInfo) -> Option<Arc<MetricSet>> {
            panic!("no metrics today")
        }
    }

    #[test]
    fn a_panic_in_metrics_runs_the_dispatch_once() {
        let (dev, out) = run(&PanicsInMetrics, |_| {});
        assert_eq!(
            out.kind,
            OutcomeKind::Declined(DeclineReason::PolicyPanicked)
        );
        assert_eq!((dev.passes, dev.ordinary_runs), (0, 1));
        assert_one_execution(&dev);
    }

    #[test]
    fn a_window_that_ends_before_its_counter_passes_has_no_values_and_says_why() {
        let p = counting(2, &["SQ_WAVES", "SQ_ITEMS", "SQ_WAVES_EQ_64"]);
        let (dev, out) = run(&p, |d| d.contended_after = Some(3));
        assert_eq!(
            out.kind,
            OutcomeKind::Declined(DeclineReason::LockContention)
        );
        assert_eq!(dev.armed_log, [None, None, Some(0)]);
        assert_eq!(
            out.metrics.absent_reason(),
            Some("not_collected: replay ended before the counter passes (lock_contention)")
        );
        assert_one_execution(&dev);
    }
}

#[test]
fn a_decided_window_runs_on_another_thread_and_a_skipped_dispatch_never_enters_one() {
    // Skipped: the decision runs the dispatch once, on the deciding thread.
    let mut dev = SimDevice::new();
    let skipped = decide(
        &NoContinue(PassPlan::skip),
        &info(),
        &mut Whole(&mut dev),
        &settings(u64::MAX),
    );
    assert!(matches!(&skipped, Err(o) if o.kind == OutcomeKind::Skipped));
    assert_eq!((dev.ordinary_runs, dev.passes), (1, 0));

    // Replayed: decided here, nothing runs yet; the window runs on another thread.
    let policy: &'static Plan = Box::leak(Box::new(Plan::new(Shape::Exactly(3), None)));
    let mut dev = SimDevice::new();
    let Ok(decided) = decide(policy, &info(), &mut Whole(&mut dev), &settings(u64::MAX)) else {
        panic!("a 3-pass plan enters the window");
    };
    assert_eq!((dev.ordinary_runs, dev.passes, dev.completions), (0, 0, 0));
    let (dev, out) = std::thread::spawn(move || {
        let inv = AllocationInventory::new();
        inv.record(dev.base(), dev.data.len() * 4, AgentId(7), Origin::Pool);
        let out = decided.run(
            &info(),
            &mut dev,
            &inv,
            &settings(u64::MAX),
            None,
            &mut Vec::new(),
        );
        (dev, out)
    })
    .join()
    .expect("the window thread");
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(out.passes, 3);
    assert_eq!(dev.passes, 3);
    assert_one_execution(&dev);
    assert_eq!(policy.ends.lock().unwrap().len(), 1, "on_end ran once");
}
