//! A launch whose window's drain waits, on the fake driver: past
//! [`defer_after`](crate::engine::settings::Settings) the launch is enqueued behind a closed
//! gate and its call returns, so work on the device that waits for what the application does
//! next can finish; the drain and the capture finish behind it. The fake runs such a kernel
//! only once the gates in front of it opened ([`FakeGpu::defer_held`]), as a GPU does: a
//! capture taken after the kernel ran would show as two executions.

use super::*;

/// Long drain and pass deadlines, a 5 ms deferral, a 100 ms yield.
fn deferring() -> Settings {
    Settings {
        drain: Duration::from_secs(10),
        pass: Duration::from_secs(10),
        lock: Duration::from_secs(10),
        yield_after: Duration::from_millis(100),
        defer_after: Duration::from_millis(5),
        ..quick()
    }
}

/// A harness whose launches of `add_one` are asynchronous (known parameters) and run behind
/// closed gates only once they open; stream 0x6000 of the context holds work that does not
/// finish until [`finish_other_stream`].
fn busy_other_stream(settings: Settings) -> (Harness, Buffer) {
    let h = harness(3, settings);
    h.obtain_function(&ADD_ONE);
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000);
    {
        let mut g = gpu();
        g.defer_held = true;
        g.stuck_streams.insert(0x6000);
    }
    let buf = Buffer::new(&h, 4);
    (h, buf)
}

/// What the application does after its launch returned: the work on stream 0x6000 (a kernel
/// waiting for a flag it sets, say) finishes.
fn finish_other_stream() {
    let mut g = gpu();
    g.stuck_streams.remove(&0x6000);
    g.stuck_events.clear();
}

/// Once everything settled: the first window replayed with 3 passes, and the application
/// sees one execution of `add_one` over `buf`.
fn assert_replayed_once(h: &Harness, buf: &Buffer) {
    h.settle();
    pump();
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(buf.values(), vec![1; 4]);
}

#[test]
fn a_launch_whose_drain_waits_returns_behind_a_gate_and_is_replayed_once_the_drain_ends() {
    let (h, mut buf) = busy_other_stream(deferring());
    let mut args = buf.args();
    let t = Instant::now();
    let r = h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let returned = t.elapsed();
    assert_eq!(r, CUDA_SUCCESS);
    // Without the deferral the call would wait for the drain, which waits for the work only
    // this thread finishes after the call: the whole 10 s drain deadline.
    assert!(
        returned < Duration::from_secs(5),
        "returned after {returned:?}"
    );
    assert!(h.outcomes().is_empty(), "the window is still draining");
    pump();
    assert_eq!(buf.values(), vec![0; 4], "the launch waits behind its gate");
    finish_other_stream();
    h.settle();
    pump();
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(
        buf.values(),
        vec![1; 4],
        "captured before the launch ran: one execution"
    );
    assert_eq!(gpu().relaunches, 2);
    // On the application's stream: the marker the drain waited for, the gate, pass 1's start
    // event, the kernel and its end event (held), then the gate after the launch.
    let ops = ops_on(0x5000);
    let launch = ops.iter().position(|o| matches!(o, Op::Launch(_))).unwrap();
    assert!(matches!(ops[launch - 3], Op::Record(_, false)), "{ops:?}");
    assert!(matches!(ops[launch - 2], Op::Wait(..)), "{ops:?}");
    assert!(matches!(ops[launch - 1], Op::Record(_, true)), "{ops:?}");
    assert_eq!(ops[launch], Op::Launch(true), "{ops:?}");
    assert!(matches!(ops[launch + 1], Op::Record(_, true)), "{ops:?}");
    assert!(matches!(ops[launch + 2], Op::Wait(..)), "{ops:?}");
    assert!(every_wait_passed());
    let (taken, opened) = gate_counts(&h);
    assert_eq!(taken, opened, "every gate opened once");
}

#[test]
fn a_drain_that_ends_before_the_deferral_leaves_the_launch_as_it_was() {
    // Nothing to wait for: the release comes before `defer_after`, no extra gate or marker.
    let (h, mut buf) = busy_other_stream(deferring());
    finish_other_stream();
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    pump();
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 4]);
    let ops = ops_on(0x5000);
    let launch = ops.iter().position(|o| matches!(o, Op::Launch(_))).unwrap();
    assert_eq!(
        ops[..launch - 2]
            .iter()
            .filter(|o| matches!(o, Op::Record(_, false)))
            .count(),
        0,
        "no marker: {ops:?}"
    );
}

#[test]
fn a_deferred_launch_runs_once_when_the_applications_next_call_waits_for_the_drain() {
    // The application's next call (a copy on a third stream) is what the busy stream waits
    // for, and it waits at the host for the window: the drain gives way after the yield
    // deadline, and the launch, on its stream since its call, runs once.
    let (h, mut buf) = busy_other_stream(deferring());
    let mut args = buf.args();
    let t = Instant::now();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    copy_on(&h, 0x7000, finish_other_stream);
    let took = t.elapsed();
    h.settle();
    pump();
    assert!(took < Duration::from_secs(5), "the copy waited {took:?}");
    let o = &h.outcomes()[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::LockContention),
        "{o:?}"
    );
    assert_eq!(buf.values(), vec![1; 4], "one execution");
    assert_eq!(gpu().relaunches, 0);
    assert!(every_wait_passed());
}

#[test]
fn a_launch_waiting_for_its_drain_gives_way_to_work_on_another_stream_without_gates() {
    // No stream memory operations: windows stay synchronous and the launch cannot be
    // deferred. The application thread waits inside its call for a drain that waits for the
    // busy stream: past the yield deadline the window gives way rather than waiting the
    // drain deadline.
    let (h, mut buf) = busy_other_stream(deferring());
    gpu().no_mem_ops = true;
    let mut args = buf.args();
    let t = Instant::now();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "the launch waited {took:?}");
    let o = &h.outcomes()[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::LockContention),
        "{o:?}"
    );
    assert_eq!(buf.values(), vec![1; 4]);
    finish_other_stream();
}

#[test]
fn a_launch_whose_own_stream_is_busy_is_deferred_and_drained_through_its_marker() {
    // The earlier work is on the launch's own stream: the drain cannot query that stream
    // once the gate is on it, and waits for the marker in front of the gate instead.
    let h = harness(3, deferring());
    h.obtain_function(&ADD_ONE);
    gpu().defer_held = true;
    let mut buf = Buffer::new(&h, 4);
    gpu()
        .slow_streams
        .insert(0x5000, Instant::now() + Duration::from_millis(800));
    // Earlier work of the stream, slow to finish: an application event stands for it.
    let _earlier = app_event(0x5000);
    let mut args = buf.args();
    let t = Instant::now();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let returned = t.elapsed();
    assert!(
        returned < Duration::from_millis(600),
        "returned after {returned:?}"
    );
    assert_replayed_once(&h, &buf);
    assert!(every_wait_passed());
}

#[test]
fn a_deferred_launchs_stream_destroyed_before_the_drain_ends_is_not_waited_for_or_queried() {
    // CUDA allows destroying a stream with work pending: once the call returned the
    // application destroys the launch's stream. Its work is behind the window's own gates, so
    // the drain must not wait for it (nor query the gone stream: the harness faults that).
    let (h, mut buf) = busy_other_stream(deferring());
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x5000);
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, 0x5000);
    gpu().destroyed_streams.insert(0x5000);
    finish_other_stream();
    assert_replayed_once(&h, &buf);
    assert!(gpu().kernel_faults.is_empty(), "{:?}", gpu().kernel_faults);
}

#[test]
fn with_no_deferral_delay_every_launch_is_deferred_before_its_drain() {
    // `ROCPROF_REPLAY_CUDA_DEFER_US=0`: nothing to wait for, and still the launch goes behind
    // a closed gate with a marker in front; three launches in a row each see one execution.
    let (h, mut buf) = busy_other_stream(Settings {
        defer_after: Duration::ZERO,
        ..deferring()
    });
    finish_other_stream();
    for launch in 1..=3u32 {
        let mut args = buf.args();
        h.launch(&ADD_ONE, &mut args, 0x5000);
        pump();
        let o = &h.outcomes()[launch as usize - 1].1;
        assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
        assert_eq!(buf.values(), vec![launch; 4]);
    }
    let ops = ops_on(0x5000);
    let markers_before_gates = ops
        .windows(4)
        .filter(|w| {
            matches!(
                w,
                // (The gate may be open again by the time the driver enqueues the launch: the
                // window captured and opened it while the call was on its way out.)
                [Op::Record(..), Op::Wait(..), Op::Record(..), Op::Launch(_)]
            )
        })
        .count();
    assert_eq!(markers_before_gates, 3, "{ops:?}");
    assert!(every_wait_passed());
}

#[test]
fn a_stream_made_to_wait_behind_a_deferred_launch_is_drained_up_to_its_marker() {
    // After the call returned the application orders the busy stream after the launch (an
    // event recorded behind it, the busy stream waiting for that event: as a communication
    // stream waits for the compute stream). That stream now waits behind the window's own
    // gates: the drain waits for the marker recorded on it when the launch was deferred, not
    // for the stream to go idle, which it cannot before the window ends.
    let (h, mut buf) = busy_other_stream(deferring());
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let behind = app_event(0x5000);
    // SAFETY: fake driver.
    unsafe { stream_wait_event(0x6000 as CUstream, behind as CUevent, 0) };
    finish_other_stream();
    assert_replayed_once(&h, &buf);
    assert_eq!(
        query_stream(0x6000),
        CUDA_SUCCESS,
        "its wait passed after the window"
    );
    assert!(every_wait_passed());
}

#[test]
fn work_waiting_during_a_deferred_drain_is_ordered_behind_the_gate_once_it_opens() {
    // The application's next call (a fill on a third stream) waits at the host while the
    // window drains; once the drain ends and the launch's gate opens, the fill is enqueued
    // behind the window's gate on the device and its call returns, while the passes still
    // run (each relaunch takes 150 ms here).
    // (A long yield deadline: the fill waits at the host while the drain waits.)
    let (h, mut buf) = busy_other_stream(Settings {
        yield_after: Duration::from_secs(5),
        ..deferring()
    });
    let other = Buffer::new(&h, 4);
    gpu().slow_relaunches = Some(Duration::from_millis(150));
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let (returned_during_window, took) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            finish_other_stream();
        });
        let t = Instant::now();
        h.fill_async(other.ptr, 7, 4, 0x7000);
        (h.outcomes().is_empty(), t.elapsed())
    });
    assert!(
        returned_during_window,
        "the fill waited for the whole window ({took:?})"
    );
    assert_replayed_once(&h, &buf);
    assert!(
        ops_on(0x7000).iter().any(|o| matches!(o, Op::Wait(..))),
        "ordered behind the window's gate: {:?}",
        ops_on(0x7000)
    );
    assert!(every_wait_passed());
}

#[test]
fn a_deferred_launch_whose_drain_times_out_runs_once_and_the_stuck_stream_is_remembered() {
    // The busy stream never finishes within the drain deadline: the window declines
    // (`drain_timeout`), the launch, behind its gate since its call, runs once, and the next
    // launch declines at once instead of waiting the deadline again (the marker on the stuck
    // stream is what the next drains query).
    // (A long yield deadline: the drain deadline is what ends this drain.)
    let (h, mut buf) = busy_other_stream(Settings {
        drain: Duration::from_millis(300),
        yield_after: Duration::from_secs(5),
        ..deferring()
    });
    let mut args = buf.args();
    let t = Instant::now();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    h.settle();
    pump();
    let o = &h.outcomes()[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::DrainTimeout),
        "{o:?}"
    );
    assert_eq!(buf.values(), vec![1; 4], "one execution");
    assert_eq!(gpu().relaunches, 0);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    pump();
    let o = &h.outcomes()[1].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::DrainTimeout),
        "{o:?}"
    );
    assert!(o.window_time < Duration::from_millis(150), "{o:?}");
    assert_eq!(buf.values(), vec![2; 4]);
    assert!(every_wait_passed());
    finish_other_stream();
}

#[test]
fn a_deferred_launch_whose_drain_waits_past_the_yield_deadline_runs_once() {
    // The busy stream's work waits for the deferred launch itself (a kernel spinning on a
    // flag `add_one` would set, say): the launch waits behind its gate, so that work never
    // finishes while the window drains. Past the yield deadline (100 ms; the drain deadline is
    // 10 s) the window gives way, the launch runs once, the stream is remembered (the next
    // launch declines at once while its work still runs), and once it is done launches are
    // replayed again.
    let (h, mut buf) = busy_other_stream(deferring());
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    h.settle();
    pump();
    let o = h.outcomes()[0].1.clone();
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::LockContention),
        "{o:?}"
    );
    assert!(o.window_time < Duration::from_secs(5), "{o:?}");
    assert_eq!(buf.values(), vec![1; 4], "one execution");
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    pump();
    let o = h.outcomes()[1].1.clone();
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::DrainTimeout),
        "{o:?}"
    );
    assert!(
        o.window_time < Duration::from_millis(90),
        "declined at once: {o:?}"
    );
    assert_eq!(buf.values(), vec![2; 4]);
    finish_other_stream();
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    pump();
    let o = &h.outcomes()[2].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(buf.values(), vec![3; 4]);
    assert_eq!(gpu().relaunches, 2);
    assert!(every_wait_passed());
}

#[test]
fn a_deferred_launchs_capture_that_does_not_complete_gives_way_after_the_yield_deadline() {
    // The application's call after its deferred launch may hold the driver until the launch's
    // gate opens (a copy from pageable memory on its stream does, on an H100), and then the
    // window's own copies do not complete. Here the capture's copies never do: the window
    // gives way after the yield deadline (100 ms), not the copy deadline (10 s), and the
    // launch, on its stream since its call, runs once.
    let (h, mut buf) = busy_other_stream(Settings {
        copy: Duration::from_secs(10),
        ..deferring()
    });
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    gpu().stick_copies = true;
    finish_other_stream();
    h.settle();
    pump();
    let o = h.outcomes()[0].1.clone();
    gpu().stick_copies = false;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::CopyTimeout),
        "{o:?}"
    );
    assert!(
        o.window_time < Duration::from_secs(5),
        "the capture waited the copy deadline: {o:?}"
    );
    assert_eq!(buf.values(), vec![1; 4], "one execution");
    assert_eq!(gpu().relaunches, 0);
}
