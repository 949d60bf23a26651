//! The application's stream work during an asynchronous window, on the fake driver: work
//! whose call returns without waiting for its stream is enqueued behind the window's gate on
//! the device ([`WindowGate`](crate::cuda::gate::WindowGate)) and its call returns at once;
//! other work still waits for the window at the host.

use super::*;

/// The application's call `name` (registered as `cbid`) with the 8-byte parameter words `p`;
/// its driver part runs `body`.
fn stream_call(h: &Harness, cbid: u32, name: &CStr, p: &[u64], body: impl FnOnce()) {
    h.call(cbid, name, p.as_ptr().cast(), c"", || {
        body();
        CUDA_SUCCESS
    });
}

/// What the driver part of a call saw: whether its stream was held by a wait not yet passed,
/// and how many relaunches the fake had run (a window of 3 passes runs 2, the last one
/// finished before the window lets go of the context).
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    held: bool,
    relaunches: u32,
}

fn seen(stream: usize) -> Seen {
    let mut g = gpu();
    Seen {
        held: !g.held(stream).is_empty(),
        relaunches: g.relaunches,
    }
}

/// The gate waits enqueued on `stream`, in order.
fn waits_on(stream: usize) -> Vec<(usize, u32)> {
    gpu()
        .ops
        .iter()
        .filter_map(|&(s, op)| match op {
            Op::Wait(a, v) if s == stream => Some((a, v)),
            _ => None,
        })
        .collect()
}

/// After the window: replayed once over `buf`, every gate open, nothing listed as waiting.
fn after_the_window(h: &Harness, buf: &Buffer) {
    h.settle();
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(buf.values(), vec![1; buf.n as usize], "one execution");
    assert!(every_wait_passed(), "a gate stayed closed");
    assert!(
        !h.be.ctx(CTX).lock.held_up(Duration::ZERO, |_| true),
        "work still listed as waiting for the window"
    );
}

#[test]
fn async_fills_copies_and_host_functions_on_other_streams_are_ordered_behind_the_window() {
    other_streams_behind_the_window(1);
}

#[test]
fn async_work_on_other_streams_is_ordered_behind_a_window_that_may_cover_a_run() {
    other_streams_behind_the_window(crate::engine::settings::DEFAULT_RUN);
}

/// Fills, copies and a host function on four other streams during a window of at most `run`
/// launches: each call returns at once, its work held on the device behind the window — the
/// gate on the launch's stream (a window of its own) or the one window word every other
/// stream waits for until the run ends.
fn other_streams_behind_the_window(run: u32) {
    let h = harness(3, Settings { run, ..quick() });
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let other = Buffer::new(&h, 4);
    let (pinned, _) = host_alloc(&h, 64);
    // Each relaunch takes 200 ms: the calls below return within the first.
    h.window_in_flight(&mut buf, Duration::from_millis(200));
    let dst = other.ptr;
    let mut fill = Seen::default();
    // cuMemsetD32Async(dstDevice, ui, N, hStream)
    stream_call(
        &h,
        MEMSET_ASYNC,
        c"cuMemsetD32Async",
        &[dst, 7, 4, 0x6000],
        || {
            fill = seen(0x6000);
        },
    );
    let mut d2d = Seen::default();
    // cuMemcpyDtoDAsync_v2(dst, src, ByteCount, hStream): within the window's own buffer's
    // neighbour, both ends device memory.
    stream_call(
        &h,
        COPY_DTOD,
        c"cuMemcpyDtoDAsync_v2",
        &[dst, dst + 8, 8, 0x6100],
        || {
            d2d = seen(0x6100);
        },
    );
    let mut d2h = Seen::default();
    // cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream) into pinned memory.
    stream_call(
        &h,
        COPY_DTOH,
        c"cuMemcpyDtoHAsync_v2",
        &[pinned as u64, dst, 16, 0x6200],
        || d2h = seen(0x6200),
    );
    let mut host_fn = Seen::default();
    // cuLaunchHostFunc(hStream, fn, userData)
    stream_call(
        &h,
        HOST_FUNC,
        c"cuLaunchHostFunc",
        &[0x6300, 0x1, 0],
        || {
            host_fn = seen(0x6300);
        },
    );
    for (what, s) in [
        ("fill", fill),
        ("device copy", d2d),
        ("copy into pinned memory", d2h),
        ("host function", host_fn),
    ] {
        assert!(
            s.relaunches < 2,
            "the {what} waited for the window at the host: {s:?}"
        );
        assert!(
            s.held,
            "the {what} was not enqueued behind the window: {s:?}"
        );
    }
    // Behind the very gate the window put on its launch's stream after pass 1; while runs
    // are on, behind the window word, one for every other stream, never a gate between the
    // run's members (which opens when the next member joins).
    let app = waits_on(0x5000);
    let first = waits_on(0x6000);
    for s in [0x6000, 0x6100, 0x6200, 0x6300] {
        let w = waits_on(s);
        assert_eq!(w.len(), 1, "stream {s:#x}: {w:?}");
        assert_eq!(
            app.contains(&w[0]),
            run == 1,
            "stream {s:#x} waits {w:?}, the window's {app:?}"
        );
        assert_eq!(w, first, "stream {s:#x}: one gate for all");
    }
    after_the_window(&h, &buf);
}

#[test]
fn stream_work_that_may_wait_for_its_stream_inside_the_call_waits_for_the_window_at_the_host() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let other = Buffer::new(&h, 4);
    let pageable = [0u8; 64];
    let mut seen_by = Vec::new();
    // From pageable memory, the driver stages the copy; into pageable memory as well; and a
    // device-to-device copy whose source the backend does not know.
    let calls: [(u32, &CStr, [u64; 4]); 3] = [
        (
            MEMCPY,
            c"cuMemcpyHtoDAsync_v2",
            [other.ptr, pageable.as_ptr() as u64, 16, 0x6000],
        ),
        (
            COPY_DTOH,
            c"cuMemcpyDtoHAsync_v2",
            [pageable.as_ptr() as u64, other.ptr, 16, 0x6000],
        ),
        (
            COPY_DTOD,
            c"cuMemcpyDtoDAsync_v2",
            [other.ptr, pageable.as_ptr() as u64, 16, 0x6000],
        ),
    ];
    for (cbid, name, p) in calls {
        let before = gpu().relaunches;
        h.window_in_flight(&mut buf, Duration::from_millis(60));
        let mut s = Seen::default();
        stream_call(&h, cbid, name, &p, || s = seen(0x6000));
        seen_by.push((name.to_owned(), s, before));
        h.settle();
        gpu().slow_relaunches = None;
    }
    for (name, s, before) in &seen_by {
        assert_eq!(
            s.relaunches,
            before + 2,
            "{name:?} did not wait for the window: {s:?}"
        );
        assert!(!s.held, "{name:?} was held on the device: {s:?}");
    }
    assert!(waits_on(0x6000).is_empty());
    assert_eq!(h.outcomes().len(), 3);
    assert_eq!(buf.values(), vec![3; 8], "one execution of each launch");
}

#[test]
fn a_launch_that_is_not_replayed_is_ordered_behind_the_window_of_another_stream() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    // Stream 0x6000 has waited on memory: its launches run once, declined.
    stream_wait_value(&h, 0x6000);
    let mut buf = Buffer::new(&h, 8);
    // What the launch writes: memory the window does not watch (the fake runs a kernel when
    // it is enqueued, gate or not; on a GPU it would run after the window).
    let mut plain = vec![0u32; 4];
    let mut ptr = plain.as_mut_ptr() as CUdeviceptr;
    let mut n = 4u32;
    let mut args: [*mut c_void; 2] = [
        (&mut ptr as *mut CUdeviceptr).cast(),
        (&mut n as *mut u32).cast(),
    ];
    h.window_in_flight(&mut buf, Duration::from_millis(200));
    h.launch_returning(&ADD_ONE, &mut args, 0x6000, c"_Z7add_onePji");
    let relaunches = gpu().relaunches;
    assert!(relaunches < 2, "the launch waited for the window");
    let outcomes = h.outcomes();
    assert_eq!(
        outcomes[0].1.kind,
        OutcomeKind::Declined(DeclineReason::StreamMemoryWait)
    );
    let launched: Vec<bool> = gpu()
        .ops
        .iter()
        .filter_map(|&(s, op)| match op {
            Op::Launch(held) if s == 0x6000 => Some(held),
            _ => None,
        })
        .collect();
    assert_eq!(launched, vec![true], "enqueued behind the window's gate");
    h.settle();
    let o = &h.outcomes()[1].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(buf.values(), vec![1; 8]);
    assert_eq!(plain, vec![1; 4]);
    assert!(every_wait_passed());
}

#[test]
fn a_first_pass_waiting_for_work_ordered_behind_its_window_gives_way() {
    // The kernel waits for a flag that a copy on another stream sets; the copy's call returns
    // at once, the copy itself waits behind the window's gate: without the yield both wait
    // until the 10 s pass deadline.
    let h = harness(3, yielding());
    let mut buf = Buffer::new(&h, 4);
    let other = Buffer::new(&h, 4);
    let started = Instant::now();
    let mut s = Seen::default();
    let mut copier = None;
    first_pass_waiting_for(&h, &mut buf, |h| {
        stream_call(
            h,
            COPY_DTOD,
            c"cuMemcpyDtoDAsync_v2",
            &[other.ptr, other.ptr + 8, 8, 0x6000],
            || s = seen(0x6000),
        );
        assert!(s.held, "{s:?}");
        // The copy runs (and sets the flag) once its stream is let go.
        copier = Some(std::thread::spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !gpu().held(0x6000).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            unstick();
        }));
    });
    // Joined before the test ends: a late `unstick` would free the next test's stuck kernel.
    if let Some(t) = copier {
        t.join().unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the window waited {:?} for a first pass held up by work behind it",
        started.elapsed()
    );
    gave_way_after_the_first_pass(&h, &buf);
    assert!(!h.be.ctx(CTX).lock.held_up(Duration::ZERO, |_| true));
}

#[test]
fn stream_work_waits_at_the_host_once_streams_may_share_hardware_connections() {
    // 8 connections (the driver's default, `CUDA_DEVICE_MAX_CONNECTIONS` unset here): with the
    // legacy and a per-thread stream, 6 created streams have one each; a 7th shares one.
    assert_eq!(h_connections(), 8);
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let other = Buffer::new(&h, 4);
    let mut fill_on = |stream: usize| {
        let before = gpu().relaunches;
        h.window_in_flight(&mut buf, Duration::from_millis(60));
        let mut s = Seen::default();
        stream_call(
            &h,
            MEMSET_ASYNC,
            c"cuMemsetD32Async",
            &[other.ptr, 7, 4, stream as u64],
            || s = seen(stream),
        );
        h.settle();
        gpu().slow_relaunches = None;
        (s, before)
    };
    for i in 0..6 {
        stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000 + 0x100 * i);
    }
    let (s, before) = fill_on(0x6000);
    assert!(
        s.held && s.relaunches < before + 2,
        "6 streams: ordered, {s:?}"
    );
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6600);
    // Destroying streams does not give connections back: the count only grows.
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, 0x6600);
    let (s, before) = fill_on(0x6100);
    assert!(
        !s.held && s.relaunches == before + 2,
        "7 streams: the fill waited for the window at the host, {s:?}"
    );
    assert_eq!(buf.values(), vec![2; 8]);
}

fn h_connections() -> u32 {
    super::fencing::connections(std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").ok().as_deref())
}

#[test]
fn hardware_connections_come_from_the_drivers_setting() {
    use super::fencing::connections;
    assert_eq!(connections(None), 8);
    assert_eq!(connections(Some("32")), 32);
    assert_eq!(connections(Some(" 1 ")), 1);
    assert_eq!(connections(Some("64")), 32, "the driver's maximum");
    assert_eq!(connections(Some("0")), 8);
    assert_eq!(connections(Some("many")), 8);
}

#[test]
fn windows_are_synchronous_once_streams_may_share_hardware_connections() {
    // The gate after pass 1 would hold a connection the window's own stream may share.
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    h.window_in_flight(&mut buf, Duration::from_millis(60));
    assert!(gpu().relaunches < 2, "asynchronous with few streams");
    h.settle();
    gpu().slow_relaunches = None;
    for i in 0..7 {
        stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000 + 0x100 * i);
    }
    let before = gpu().relaunches;
    // The first window put two gates on its stream: before pass 1 (its timing) and after it.
    assert_eq!(waits_on(0x5000).len(), 2);
    h.window_in_flight(&mut buf, Duration::from_millis(60));
    assert_eq!(
        gpu().relaunches,
        before + 2,
        "the launch call returned before its window ended"
    );
    assert_eq!(
        waits_on(0x5000).len(),
        3,
        "the second window's pass 1 is timed behind a gate, and no gate follows it"
    );
    h.settle();
    assert_eq!(h.outcomes().len(), 2);
    assert!(
        h.outcomes()
            .iter()
            .all(|(_, o)| o.kind == OutcomeKind::Replayed)
    );
    assert_eq!(buf.values(), vec![2; 8]);
}

#[test]
fn a_synchronous_windows_first_pass_waiting_for_what_its_thread_does_next_gives_way() {
    // Windows are synchronous here (more streams than hardware connections): the launch call
    // waits for its window. A kernel waiting for what the thread does after the call (a flag
    // it sets) would hold the window, and with it the call, until the pass deadline (10 s),
    // and each later pass would wait as long.
    let h = harness(3, yielding());
    for i in 0..7 {
        stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000 + 0x100 * i);
    }
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 4);
    gpu().stick_after_launch = Some(0x5000);
    let mut args = buf.args();
    let started = Instant::now();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let returned = started.elapsed();
    // What the thread does next: the flag the kernel waits for.
    unstick();
    h.settle();
    assert!(
        returned < Duration::from_secs(5),
        "the launch call returned after {returned:?}"
    );
    gave_way_after_the_first_pass(&h, &buf);
}

#[test]
fn another_threads_query_does_not_see_a_synchronous_windows_first_pass_done() {
    // Windows are synchronous here: nothing on the stream hides pass 1's completion, so
    // another thread's `cuStreamQuery` of the stream waits at its entry until the window is
    // over (the lock deadline is longer than the window).
    let h = harness(
        3,
        Settings {
            lock: Duration::from_secs(5),
            ..quick()
        },
    );
    for i in 0..7 {
        stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000 + 0x100 * i);
    }
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let (status, relaunched) = std::thread::scope(|s| {
        let query = s.spawn(|| {
            // Once pass 1 is done: the window's first relaunch is on its way.
            let started = Instant::now();
            while gpu().relaunches == 0 && started.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut relaunched = 0;
            let status = h.query(0x5000, || relaunched = gpu().relaunches);
            (status, relaunched)
        });
        h.window_in_flight(&mut buf, Duration::from_millis(60));
        query.join().unwrap()
    });
    h.settle();
    gpu().slow_relaunches = None;
    assert_eq!(
        relaunched, 2,
        "the query reached the driver while the window still ran its passes"
    );
    assert_eq!(status, CUDA_SUCCESS);
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(buf.values(), vec![1; 8]);
}
