//! Counter runs on the fake driver and the fake CUPTI (`ROCPROF_REPLAY_CUPTI_RUN`): a window
//! that collects counters takes the launches that follow on its stream into its run, each
//! measured in a user range of its own in every counter pass; the launch calls return after
//! pass 1, the thread's later calls wait at their entry and serve the window's profiler calls.

use super::*;
use crate::cuda::profiler::tests as fake;
use crate::engine::state::Engine;

/// The application's own execution as the only policy pass, then the set's counter passes.
struct Counted {
    set: Arc<crate::counters::MetricSet>,
    ended: Seen,
}

impl ReplayPolicy for Counted {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(1, ())
    }
    fn metrics(&self, _: &DispatchInfo) -> Option<Arc<crate::counters::MetricSet>> {
        Some(self.set.clone())
    }
    fn on_end(&self, info: &DispatchInfo, _: (), outcome: &Outcome) {
        self.ended.lock().push((info.clone(), outcome.clone()));
    }
}

/// The fake CUPTI with `passes` counter passes, a profiler over it measuring up to `ranges`
/// launches per pass (the image keeping `keep` of them), and an engine harness with runs of
/// up to 8 launches collecting the fake's metrics on every launch.
fn setup(
    passes: usize,
    ranges: u32,
    keep: Option<usize>,
) -> (MutexGuard<'static, ()>, FakeProfiler, Harness) {
    setup_with(passes, ranges, keep, quick())
}

/// [`setup`] over `base` (its runs and run wait replaced).
fn setup_with(
    passes: usize,
    ranges: u32,
    keep: Option<usize>,
    base: Settings,
) -> (MutexGuard<'static, ()>, FakeProfiler, Harness) {
    let modes = super::super::profiler::Modes {
        ranges,
        ..Default::default()
    };
    setup_modes(passes, modes, keep, base)
}

/// [`setup_with`] with the profiler's modes given whole.
fn setup_modes(
    passes: usize,
    modes: super::super::profiler::Modes,
    keep: Option<usize>,
    base: Settings,
) -> (MutexGuard<'static, ()>, FakeProfiler, Harness) {
    let cupti = fake::reset(passes);
    {
        let mut f = fake::fake();
        f.ranges_per_pass = modes.ranges as usize;
        f.keep = keep;
    }
    let (profiler, catalog) = FakeProfiler::install_modes(modes);
    let set = Arc::new(crate::counters::MetricSet::new(&catalog, fake::NAMES).unwrap());
    assert_eq!(set.pass_count() as usize, passes);
    let settings = Settings {
        run: 8,
        // A loaded machine may take long between two calls of the test's thread.
        run_wait: Duration::from_millis(300),
        ..base
    };
    let h = harness_deciding(settings, move |seen, s, _| {
        let engine = Engine::leaked(Box::new(Counted { set, ended: seen }), s);
        Box::new(move |info, ordinary| {
            engine.decide(info, ordinary).map(|window| WindowRun {
                counters: window.collects_counters(),
                run: Runner::Engine(window),
            })
        })
    });
    (cupti, profiler, h)
}

/// `count` launches of the counted `add_one` over `buf` on stream 0x5000, one right after the
/// other, then a fill on another stream (the application's next call: it waits until the
/// run is over, serving its profiler calls); the outcomes recorded when that call returned.
fn launches_then_call(h: &Harness, buf: &mut Buffer, count: usize) -> usize {
    let other = Buffer::new(h, 4);
    for _ in 0..count {
        let mut args = buf.args();
        assert_eq!(
            h.launch_returning(&ADD_ONE_COUNTED, &mut args, 0x5000, c"_Z7add_onePji"),
            CUDA_SUCCESS
        );
    }
    assert_eq!(h.fill_async(other.ptr, 7, 4, 0x6000), CUDA_SUCCESS);
    let recorded = h.outcomes().len();
    h.settle();
    recorded
}

/// The offset of each record's values from the fake's base values (`name length + 0.25`):
/// 1000 per range before the one evaluated (`None`: no values).
fn ranges_of(outcomes: &[(DispatchInfo, Outcome)]) -> Vec<Option<u32>> {
    outcomes
        .iter()
        .map(|(_, o)| {
            let values = o.metrics.values()?;
            let offsets: Vec<u32> = values
                .iter()
                .zip(fake::NAMES)
                .map(|((_, v), n)| ((v.gpu_value - n.len() as f64 - 0.25) / 1000.0) as u32)
                .collect();
            assert!(
                offsets.windows(2).all(|w| w[0] == w[1]),
                "one range per record: {offsets:?}"
            );
            offsets.first().copied()
        })
        .collect()
}

#[test]
fn a_counter_run_measures_each_launch_in_a_range_of_its_own_in_every_counter_pass() {
    let (_cupti, _p, h) = setup(3, 4, None);
    h.obtain_function(&ADD_ONE_COUNTED);
    let mut buf = Buffer::new(&h, 16);
    fake::take_log();
    let recorded = launches_then_call(&h, &mut buf, 4);
    assert_eq!(buf.values(), vec![4; 16], "one execution of each launch");
    let outcomes = h.outcomes();
    assert_eq!(
        recorded, 4,
        "the next call waited for the run: {outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .all(|(_, o)| o.kind == OutcomeKind::Replayed && o.passes == 4),
        "{outcomes:?}"
    );
    let runs: Vec<u32> = outcomes.iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![4; 4], "one run of four launches");
    // Each launch's values are those of its own range (0 to 3, in launch order).
    assert_eq!(
        ranges_of(&outcomes),
        vec![Some(0), Some(1), Some(2), Some(3)]
    );
    let f = fake::fake();
    assert!(f.bad.is_empty(), "{:?}", f.bad);
    // Three counter passes of four ranges, each holding one launch.
    assert_eq!(f.kernels_per_range, vec![1; 12]);
    let names: Vec<&str> = f.range_names.iter().map(String::as_str).collect();
    let pass = [
        "rocprof-replay dispatch 0",
        "rocprof-replay dispatch 1",
        "rocprof-replay dispatch 2",
        "rocprof-replay dispatch 3",
    ];
    assert_eq!(names, pass.repeat(3));
    // Every profiler call on the application thread, none on the replay thread.
    let on_replay_thread: Vec<(&String, &String)> = f
        .log
        .iter()
        .zip(&f.call_threads)
        .filter(|(_, t)| *t == "rocprof-replay-cuda")
        .collect();
    assert!(on_replay_thread.is_empty(), "{on_replay_thread:?}");
    let starts = f.log.iter().filter(|l| *l == "Start").count();
    assert_eq!(starts, 3, "one Start per counter pass for the whole run");
}

#[test]
fn a_query_between_launches_of_a_counter_run_neither_waits_nor_ends_the_run() {
    let (_cupti, _p, h) = setup(3, 4, None);
    h.obtain_function(&ADD_ONE_COUNTED);
    let mut buf = Buffer::new(&h, 16);
    let other = Buffer::new(&h, 4);
    let mut queried = Vec::new();
    for _ in 0..4 {
        let mut args = buf.args();
        h.launch_returning(&ADD_ONE_COUNTED, &mut args, 0x5000, c"_Z7add_onePji");
        // PyTorch's allocator queries events between launches.
        h.query(0x6000, || queried.push(h.outcomes().len()));
    }
    assert_eq!(queried, vec![0; 4], "a query waited for the run to end");
    assert_eq!(h.fill_async(other.ptr, 7, 4, 0x6000), CUDA_SUCCESS);
    h.settle();
    assert_eq!(buf.values(), vec![4; 16]);
    let runs: Vec<u32> = h.outcomes().iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![4; 4], "one run of four launches");
}

#[test]
fn launches_past_what_cupti_keeps_in_a_pass_are_not_collected_and_memory_is_one_execution() {
    // CUDA 13.0's range profiler keeps two user ranges per pass.
    let (_cupti, _p, h) = setup(2, 4, Some(2));
    h.obtain_function(&ADD_ONE_COUNTED);
    let mut buf = Buffer::new(&h, 16);
    launches_then_call(&h, &mut buf, 4);
    assert_eq!(buf.values(), vec![4; 16], "one execution of each launch");
    let outcomes = h.outcomes();
    assert_eq!(ranges_of(&outcomes), vec![Some(0), Some(1), None, None]);
    for (_, o) in &outcomes[2..] {
        let why = o.metrics.absent_reason().unwrap_or_default();
        assert!(why.contains("CUPTI kept 2 range(s)"), "{why}");
    }
    assert!(fake::fake().bad.is_empty(), "{:?}", fake::fake().bad);
}

#[test]
fn past_what_the_range_profiler_keeps_a_run_goes_through_the_legacy_api_and_every_launch_counts() {
    // The range profiler would keep two ranges per pass; the legacy API keeps all four.
    let modes = super::super::profiler::Modes {
        ranges: 4,
        legacy: true,
        ..Default::default()
    };
    let (_cupti, _p, h) = setup_modes(3, modes, Some(2), quick());
    // The context's session is kept across windows: its image holds 64 windows of 4.
    fake::fake().image_ranges = modes.image_ranges(4) as usize;
    h.obtain_function(&ADD_ONE_COUNTED);
    let mut buf = Buffer::new(&h, 16);
    fake::take_log();
    launches_then_call(&h, &mut buf, 4);
    assert_eq!(buf.values(), vec![4; 16], "one execution of each launch");
    let outcomes = h.outcomes();
    let runs: Vec<u32> = outcomes.iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![4; 4], "one run of four launches: {outcomes:?}");
    assert_eq!(
        ranges_of(&outcomes),
        vec![Some(0), Some(1), Some(2), Some(3)]
    );
    let f = fake::fake();
    assert!(f.bad.is_empty(), "{:?}", f.bad);
    assert_eq!(f.kernels_per_range, vec![1; 12], "one launch per range");
    let count = |name: &str| f.log.iter().filter(|l| *l == name).count();
    assert_eq!(
        (
            count("BeginSession"),
            count("BeginPass"),
            count("EndSession")
        ),
        (1, 3, 0),
        "one session of three passes for the whole run, kept for the next window: {:?}",
        f.log
    );
    assert_eq!(count("Start"), 0, "the range profiler only built the image");
    let on_replay_thread = f
        .log
        .iter()
        .zip(&f.call_threads)
        .filter(|(_, t)| *t == "rocprof-replay-cuda")
        .count();
    assert_eq!(
        on_replay_thread, 0,
        "every profiler call on the application thread"
    );
}

#[test]
fn with_one_launch_per_counter_pass_counter_windows_stay_alone() {
    let (_cupti, _p, h) = setup(2, 1, None);
    h.obtain_function(&ADD_ONE_COUNTED);
    let mut buf = Buffer::new(&h, 16);
    launches_then_call(&h, &mut buf, 3);
    assert_eq!(buf.values(), vec![3; 16]);
    let outcomes = h.outcomes();
    let runs: Vec<u32> = outcomes.iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![1; 3]);
    assert_eq!(ranges_of(&outcomes), vec![Some(0); 3]);
    let f = fake::fake();
    assert_eq!(f.kernels_per_range, vec![1; 6]);
    assert!(f.bad.is_empty(), "{:?}", f.bad);
}

#[test]
fn a_held_call_goes_on_when_the_runs_first_pass_waits_for_it_and_the_window_gives_way() {
    // The kernel waits for what the application's next call (a copy on another stream) does:
    // held until the run ends, that call would wait for the first pass, which waits for it,
    // until the 10 s pass deadline.
    let (_cupti, _p, h) = setup_with(2, 4, None, yielding());
    h.obtain_function(&ADD_ONE_COUNTED);
    h.obtain_function(&UNSTICKING);
    let mut buf = Buffer::new(&h, 4);
    gpu().stick_after_launch = Some(0x5000);
    let mut args = buf.args();
    let started = Instant::now();
    h.launch_returning(&ADD_ONE_COUNTED, &mut args, 0x5000, c"_Z7add_onePji");
    copy_on(&h, 0x6000, unstick);
    let took = started.elapsed();
    h.settle();
    assert!(took < Duration::from_secs(5), "the copy waited {took:?}");
    let outcomes = h.outcomes();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let o = &outcomes[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::LockContention),
        "{o:?}"
    );
    assert_eq!(buf.values(), vec![1; 4], "one execution");
    assert!(fake::fake().bad.is_empty(), "{:?}", fake::fake().bad);
}

#[test]
fn an_allocation_between_launches_of_a_counter_run_neither_waits_nor_ends_the_run() {
    let (_cupti, _p, h) = setup(3, 4, None);
    h.obtain_function(&ADD_ONE_COUNTED);
    let mut first = Buffer::new(&h, 16);
    let other = Buffer::new(&h, 4);
    let mut args = first.args();
    h.launch_returning(&ADD_ONE_COUNTED, &mut args, 0x5000, c"_Z7add_onePji");
    let mut fresh = Buffer::new(&h, 16);
    assert_eq!(
        h.outcomes().len(),
        0,
        "the allocation waited for the run to end"
    );
    for buf in [&mut fresh, &mut first] {
        let mut args = buf.args();
        h.launch_returning(&ADD_ONE_COUNTED, &mut args, 0x5000, c"_Z7add_onePji");
    }
    assert_eq!(h.fill_async(other.ptr, 7, 4, 0x6000), CUDA_SUCCESS);
    h.settle();
    assert_eq!(first.values(), vec![2; 16], "one execution of each launch");
    assert_eq!(fresh.values(), vec![1; 16], "one execution of each launch");
    let outcomes = h.outcomes();
    let runs: Vec<u32> = outcomes.iter().map(|(_, o)| o.run).collect();
    assert_eq!(runs, vec![3; 3], "one run of three launches: {outcomes:?}");
    assert_eq!(ranges_of(&outcomes), vec![Some(0), Some(1), Some(2)]);
}

#[test]
fn an_allocation_short_of_memory_or_failing_ends_the_counter_run_holding_its_thread() {
    // The allocation needs the memory the run's window holds: the run ends first (the call
    // serves its profiler calls), then the arena is released for it — no wait for a window
    // that needs the waiting thread.
    for failing in [false, true] {
        let (_cupti, _p, h) = setup(3, 4, None);
        h.obtain_function(&ADD_ONE_COUNTED);
        let mut buf = Buffer::new(&h, 16);
        for _ in 0..2 {
            let mut args = buf.args();
            h.launch_returning(&ADD_ONE_COUNTED, &mut args, 0x5000, c"_Z7add_onePji");
        }
        let ctx = h.be.ctx(CTX);
        assert!(ctx.arena.lock().device_bytes() > 0);
        if failing {
            // Room at the entry (the call passes the run by), then the driver fails it.
            let (r, p) = failing_alloc(&h, 4096);
            assert_eq!((r, gpu().memory.contains_key(&p)), (CUDA_SUCCESS, true));
        } else {
            gpu().device_free = 1 << 20;
            h.alloc(4096);
        }
        assert_eq!(
            h.outcomes().len(),
            2,
            "the run ended before the call returned"
        );
        assert_eq!(
            ctx.arena.lock().device_bytes(),
            0,
            "released for the allocation"
        );
        h.settle();
        assert_eq!(buf.values(), vec![2; 16]);
        let outcomes = h.outcomes();
        let runs: Vec<u32> = outcomes.iter().map(|(_, o)| o.run).collect();
        assert_eq!(runs, vec![2; 2], "failing={failing}");
        assert!(
            outcomes
                .iter()
                .all(|(_, o)| o.kind == OutcomeKind::Replayed && o.passes == 4),
            "failing={failing}: every counter pass ran: {outcomes:?}"
        );
        assert_eq!(
            ranges_of(&outcomes),
            vec![Some(0), Some(1)],
            "failing={failing}"
        );
        // The waiting call served the run's profiler calls: none was given back to the
        // replay thread (where CUPTI's calls may never return).
        let f = fake::fake();
        let on_replay_thread = f
            .call_threads
            .iter()
            .filter(|t| *t == "rocprof-replay-cuda")
            .count();
        assert_eq!(on_replay_thread, 0, "failing={failing}: {:?}", f.log);
    }
}
