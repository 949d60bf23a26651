//! The replay window against a simulated device: every row of the reference pass-count table,
//! the per-dispatch/per-pass state rules, and every decline path.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::context::Context;
use crate::dispatch::{AgentId, DispatchId, QueueId};
use crate::engine::inventory::Origin;

/// A device whose memory is a host buffer and whose kernel is `a[i] += 1; counter += 1`.
struct SimDevice {
    data: Vec<u32>,
    counter: u32,
    passes: u32,
    ordinary_runs: u32,
    completions: u32,
    fail_drain: bool,
    fail_reads: bool,
    fail_pass: Option<u32>,
    inputs_seen: Vec<Vec<u32>>,
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
            fail_pass: None,
            inputs_seen: Vec::new(),
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
    fn read(&mut self, src: usize, dst: &mut [u8]) -> bool {
        if self.fail_reads {
            return false;
        }
        // SAFETY: the engine only asks for regions registered below (live fields of self).
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        true
    }
    fn write(&mut self, dst: usize, src: &[u8]) -> bool {
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        true
    }
}

impl ReplayTarget for SimDevice {
    fn begin(&mut self) -> Result<(), DeclineReason> {
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
    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, DeclineReason> {
        if self.fail_pass == Some(self.passes) {
            return Err(DeclineReason::PassTimeout);
        }
        self.passes += 1;
        self.kernel();
        Ok(timed.then_some(Duration::from_nanos(1000 + self.passes as u64)))
    }
    fn run_once(&mut self) {
        self.ordinary_runs += 1;
        self.kernel();
        self.completions += 1;
    }
    fn complete(&mut self) {
        self.completions += 1;
    }
}

fn info() -> DispatchInfo {
    DispatchInfo {
        agent: AgentId(7),
        agent_index: 0,
        queue: QueueId(1),
        dispatch_id: DispatchId(42),
        kernel_object: 0x1000,
        kernel_name: Some("inc".into()),
        grid: [16, 1, 1],
        workgroup: [16, 1, 1],
        group_segment_size: 0,
        private_segment_size: 0,
    }
}

/// Runs `policy` on a fresh device; returns the device and outcome.
fn run<P: ReplayPolicy>(policy: &P, setup: impl FnOnce(&mut SimDevice)) -> (SimDevice, Outcome) {
    let mut dev = SimDevice::new();
    setup(&mut dev);
    let inv = AllocationInventory::new();
    inv.record(dev.base(), dev.data.len() * 4, AgentId(7), Origin::Pool);
    let out = run_window(
        policy,
        &info(),
        &mut dev,
        &inv,
        WindowConfig { budget: u64::MAX },
    );
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

/// The shape of a plan with a continue decision.
#[derive(Clone, Copy)]
enum Shape {
    UpTo(u32),
    Until,
}

/// A plan with a continue decision, records what it saw.
struct Plan {
    shape: Shape,
    stop_after: Option<u32>,
    ends: Mutex<Vec<(Vec<String>, OutcomeKind)>>,
}

impl Plan {
    fn new(shape: Shape, stop_after: Option<u32>) -> Self {
        Plan {
            shape,
            stop_after,
            ends: Mutex::new(Vec::new()),
        }
    }

    fn keep_going(&self, state: &[String], completed: u32) -> bool {
        assert!(
            state.iter().any(|s| s == &format!("end {}", completed - 1)),
            "continue sees pass-end writes"
        );
        self.stop_after.is_none_or(|n| completed < n)
    }
}

impl ReplayPolicy for Plan {
    type State = Vec<String>;
    type PassState = Option<u32>;
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<'_, Vec<String>> {
        let keep_going = |state: &Vec<String>, completed| self.keep_going(state, completed);
        match self.shape {
            Shape::UpTo(n) => PassPlan::up_to(n, Vec::new(), keep_going),
            Shape::Until => PassPlan::until(Vec::new(), keep_going),
        }
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
struct NoContinue(fn() -> PassPlan<'static, ()>);
impl ReplayPolicy for NoContinue {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<'_, ()> {
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
        out.restored_bytes,
        4 * (16 * 4 + 4),
        "restored between passes, not after the last"
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
}

#[test]
fn row_up_to_n_never_exceeds_n() {
    let p = Plan::new(Shape::UpTo(4), None);
    let (dev, out) = run(&p, |_| {});
    assert_eq!(out.passes, 4);
    assert_one_execution(&dev);
}

#[test]
fn row_open_ended_with_continue_runs_until_told() {
    let p = Plan::new(Shape::Until, Some(6));
    let (dev, out) = run(&p, |_| {});
    assert_eq!((out.kind, out.passes), (OutcomeKind::Replayed, 6));
    assert_one_execution(&dev);
}

#[test]
fn row_open_ended_is_capped() {
    let p = Plan::new(Shape::Until, None);
    let (dev, out) = run(&p, |_| {});
    assert_eq!(out.passes, MAX_OPEN_ENDED_PASSES);
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
        WindowConfig { budget: 10 },
    );
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::OverBudget));
    assert_one_execution(&dev);
}

#[test]
fn a_failing_pass_restores_and_runs_once() {
    let (dev, out) = run(&NoContinue(|| PassPlan::exactly(4, ())), |d| {
        d.fail_pass = Some(2)
    });
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::PassTimeout));
    assert_one_execution(&dev);
}

struct Panics {
    at_pass: u32,
    in_end: bool,
    ended: AtomicU32,
}
impl ReplayPolicy for Panics {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<'_, ()> {
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
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<'_, ()> {
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
