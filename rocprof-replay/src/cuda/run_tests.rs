//! Runs of launches (`ROCPROF_REPLAY_RUN`) on the fake driver: the engine's own windows
//! (`Runner::Engine`, as the installed backend decides them) over consecutive launches of one
//! stream, their later passes queued on the private stream, and the wait for a next launch
//! cut short by a call that ends the run.

use super::*;
use crate::engine::state::Engine;
use crate::policy::RestoreMode;

/// Fixed passes; every outcome kept (the engine's windows report through `on_end`).
struct Kept {
    passes: u32,
    ended: Seen,
    /// [`ReplayPolicy::passes_ahead`].
    ahead: bool,
}

impl ReplayPolicy for Kept {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.passes, ())
    }
    fn on_end(&self, info: &DispatchInfo, _: (), outcome: &Outcome) {
        self.ended.lock().push((info.clone(), outcome.clone()));
    }
    fn passes_ahead(&self, _: &DispatchInfo) -> bool {
        self.ahead
    }
}

/// A harness deciding with an engine of `passes` fixed passes, as `install` does.
fn engine_harness(passes: u32, settings: Settings) -> Harness {
    harness_ahead(passes, settings, false)
}

/// As [`engine_harness`], the policy letting passes be queued ahead where `ahead`.
fn harness_ahead(passes: u32, settings: Settings, ahead: bool) -> Harness {
    harness_deciding(settings, move |seen, s, _| {
        let engine = Engine::leaked(
            Box::new(Kept {
                passes,
                ended: seen,
                ahead,
            }),
            s,
        );
        Box::new(move |info, ordinary| {
            engine.decide(info, ordinary).map(|window| WindowRun {
                counters: window.collects_counters(),
                run: Runner::Engine(window),
            })
        })
    })
}

/// Windows of up to `run` launches, each waiting long for the next (a loaded machine may
/// take more than the default 200 µs between two calls of the test's thread).
fn runs(run: u32) -> Settings {
    Settings {
        run,
        run_wait: Duration::from_millis(200),
        ..quick()
    }
}

/// `count` launches of `add_one` over `buf` on stream 0x5000, one right after the other,
/// each relaunch taking `relaunch` (so the first window is still open when the next comes).
fn launches(h: &Harness, buf: &mut Buffer, count: usize, relaunch: Duration) {
    gpu().slow_relaunches = Some(relaunch);
    for _ in 0..count {
        let mut args = buf.args();
        assert_eq!(
            h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji"),
            CUDA_SUCCESS
        );
    }
    h.settle();
}

#[test]
fn consecutive_launches_share_a_window_queue_their_passes_and_leave_one_execution() {
    let h = engine_harness(3, runs(8));
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 64);
    launches(&h, &mut buf, 6, Duration::from_millis(5));
    assert_eq!(buf.values(), vec![6; 64], "one execution of each launch");
    let outcomes = h.outcomes();
    assert_eq!(outcomes.len(), 6, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|(_, o)| o.kind == OutcomeKind::Replayed && o.passes == 3),
        "{outcomes:?}"
    );
    let runs: Vec<u32> = outcomes.iter().map(|(_, o)| o.run).collect();
    assert!(
        runs.iter().any(|&r| r >= 3),
        "launches one right after the other share windows: {runs:?}"
    );
    let members: u32 = runs.iter().filter(|&&r| r > 1).count() as u32;
    // Each window of r members records r times; 3 passes each, the first of every member
    // the application's own launch: 2 relaunches per launch, whatever the windows.
    assert!(members >= 3, "{runs:?}");
    assert_eq!(gpu().relaunches, 2 * 6, "two relaunches per launch");
    assert!(
        gpu().most_relaunches_unwaited >= 2,
        "a later pass's relaunches of the run's later members queued before one wait"
    );
    let ids: Vec<u64> = outcomes.iter().map(|(i, _)| i.dispatch_id.0).collect();
    assert_eq!(
        ids,
        (1..=6).collect::<Vec<u64>>(),
        "recorded in launch order"
    );
}

#[test]
fn with_runs_off_every_launch_has_a_window_of_its_own() {
    let h = engine_harness(3, runs(1));
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 64);
    launches(&h, &mut buf, 4, Duration::from_millis(5));
    assert_eq!(buf.values(), vec![4; 64]);
    let runs: Vec<u32> = h.outcomes().iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![1; 4]);
}

#[test]
fn a_call_between_two_launches_ends_the_run() {
    let h = engine_harness(3, runs(8));
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 64);
    gpu().slow_relaunches = Some(Duration::from_millis(5));
    let other = Buffer::new(&h, 4);
    for _ in 0..3 {
        let mut args = buf.args();
        h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
        // Another call of the application (a fill on another stream): the next launch may
        // not join the window of the one before.
        h.fill_async(other.ptr, 7, 4, 0x6000);
    }
    h.settle();
    assert_eq!(buf.values(), vec![3; 64]);
    let runs: Vec<u32> = h.outcomes().iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![1; 3], "a call between launches ends every run");
}

#[test]
fn a_query_between_two_launches_does_not_end_the_run() {
    // A query neither orders nor waits for work (it is subscribed for synchronous windows,
    // not to end runs): the next launch may still join the window of the one before.
    let h = engine_harness(3, runs(8));
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 64);
    gpu().slow_relaunches = Some(Duration::from_millis(5));
    for _ in 0..3 {
        let mut args = buf.args();
        h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
        h.query(0x6000, || {});
    }
    h.settle();
    assert_eq!(buf.values(), vec![3; 64]);
    let runs: Vec<u32> = h.outcomes().iter().map(|(_, o)| o.run).collect();
    assert!(runs.iter().any(|&r| r > 1), "no run formed: {runs:?}");
}

#[test]
fn passes_queued_ahead_run_back_to_back_and_leave_one_execution() {
    for (ahead, restore) in [
        (true, RestoreMode::Auto),
        (true, RestoreMode::Full),
        (false, RestoreMode::Auto),
    ] {
        gpu().most_relaunches_unwaited = 0;
        let settings = Settings { restore, ..runs(8) };
        let h = harness_ahead(5, settings, ahead);
        h.obtain_function(&ADD_ONE);
        let mut buf = Buffer::new(&h, 64);
        launches(&h, &mut buf, 6, Duration::from_millis(5));
        assert_eq!(
            buf.values(),
            vec![6; 64],
            "{ahead} {restore:?}: one execution each"
        );
        let outcomes = h.outcomes();
        assert!(
            outcomes
                .iter()
                .all(|(_, o)| o.kind == OutcomeKind::Replayed && o.passes == 5),
            "{ahead} {restore:?}: {outcomes:?}"
        );
        let biggest = outcomes.iter().map(|(_, o)| o.run).max().unwrap_or(1);
        assert_eq!(gpu().relaunches, 4 * 6, "four relaunches per launch");
        let unwaited = gpu().most_relaunches_unwaited;
        if ahead {
            // Passes 2 to 5 of a window's every member before one wait.
            assert!(
                unwaited >= 4 * biggest,
                "{restore:?}: {unwaited} relaunches before a wait, runs of up to {biggest}"
            );
        } else {
            assert!(
                unwaited <= biggest,
                "one pass at a time: {unwaited} relaunches before a wait, runs of up to {biggest}"
            );
        }
    }
}

#[test]
fn an_allocation_between_two_launches_does_not_end_the_run_and_its_memory_is_captured() {
    // A plain device allocation orders no work and writes nothing a window holds: the next
    // launch may still join, and the new memory it names is captured when it joins, so every
    // later pass starts from what its first pass had.
    let h = engine_harness(3, runs(8));
    h.obtain_function(&ADD_ONE);
    let mut first = Buffer::new(&h, 64);
    gpu().slow_relaunches = Some(Duration::from_millis(5));
    let mut args = first.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let mut fresh = Buffer::new(&h, 64);
    let mut args = fresh.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let mut args = first.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    h.settle();
    assert_eq!(first.values(), vec![2; 64], "one execution of each launch");
    assert_eq!(fresh.values(), vec![1; 64], "one execution of each launch");
    let outcomes = h.outcomes();
    assert!(
        outcomes
            .iter()
            .all(|(_, o)| o.kind == OutcomeKind::Replayed && o.passes == 3),
        "{outcomes:?}"
    );
    let runs: Vec<u32> = outcomes.iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![3; 3], "the allocation did not end the run");
}
