//! Asynchronous replay windows and kernel-only pass times on a real NVIDIA GPU (issue 13
//! items 3 and 4): the launch call returns as it does without the tool, a kernel waiting for
//! the application's next action completes, nobody sees the launch complete before its window
//! ends, the application's stream work on another stream neither waits for the window nor runs
//! inside it, and the pass times of a 5 us kernel measure the kernel. Built without
//! `ROCPROF_REPLAY_GPU_TESTS=1` these tests show as ignored with the reason.
//!
//! Logs, records and summaries go to `ROCPROF_REPLAY_GPU_OUT` when set.

use std::path::PathBuf;
use std::time::Duration;

use rocprof_replay_cuda_tests::{Run, cuda_app, cuda_tool, out_dir, records, require_gpu, run};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(180);

fn save(name: &str, run: &Run) {
    let dir = out_dir();
    std::fs::write(dir.join(format!("{name}.stdout")), &run.output.stdout).unwrap();
    std::fs::write(dir.join(format!("{name}.stderr")), &run.output.stderr).unwrap();
}

fn records_path(name: &str) -> PathBuf {
    let p = out_dir().join(format!("{name}.jsonl"));
    let _ = std::fs::remove_file(&p);
    p
}

/// Runs `app` under the tool with `passes` passes (short deadlines, so a window that waits
/// for the host shows as a timeout rather than minutes); returns the run and its records.
fn under_tool(app: &str, name: &str, passes: &str, extra: &[(&str, &str)]) -> (Run, Vec<Value>) {
    under_tool_args(app, &[], name, passes, extra)
}

/// [`under_tool`] with arguments for the application.
fn under_tool_args(
    app: &str,
    args: &[&str],
    name: &str,
    passes: &str,
    extra: &[(&str, &str)],
) -> (Run, Vec<Value>) {
    let exe = cuda_app(app, false);
    let rec = records_path(name);
    let tool = cuda_tool().to_str().unwrap().to_string();
    let rec_s = rec.to_str().unwrap().to_string();
    let mut env = vec![
        ("ROCPROF_REPLAY_PASSES", passes),
        ("ROCPROF_REPLAY_OUTPUT", rec_s.as_str()),
        ("ROCPROF_REPLAY_LOG", "warn"),
        ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "30000"),
        ("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", "10000"),
        ("CUDA_INJECTION64_PATH", tool.as_str()),
        // Asynchronous windows are the default on CUDA; set anyway, so that these tests check
        // them whatever the environment says.
        ("ROCPROF_REPLAY_CUDA_ASYNC", "1"),
    ];
    env.extend_from_slice(extra);
    let r = run(&exe, args, &env, &["LD_PRELOAD"], DEADLINE);
    save(name, &r);
    let recs = records(&rec);
    (r, recs)
}

fn of_kernel<'a>(recs: &'a [Value], name: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["kernel"].as_str().is_some_and(|k| k.contains(name)))
        .collect()
}

fn number(r: &Run, key: &str) -> f64 {
    r.value(key)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{key}` line:\n{}", r.stdout()))
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_kernel_waiting_for_the_host_after_its_launch_completes_and_is_replayed() {
    require_gpu();
    // The flag lives in mapped host memory the kernel reaches through a `__device__` pointer:
    // the window reads the pointer and watches the flag across the first pass. The host sets
    // it during that pass, so later passes would not start from the same inputs: replay
    // stops after the first (`host_memory_written`), which completes and is the application's
    // one execution.
    let (r, recs) = under_tool("flag_wait", "flag_wait", "3", &[]);
    r.assert_success("flag_wait under the tool");
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    let returned = number(&r, "launch_returned_us");
    assert!(
        returned < 50_000.0,
        "the launch call returned after {returned} us, not before the host set the flag (50 ms)"
    );
    let k = of_kernel(&recs, "wait_then_add");
    assert_eq!(k.len(), 1, "{recs:?}");
    assert_eq!(k[0]["outcome"], "declined", "{}", k[0]);
    assert_eq!(k[0]["reason"], "host_memory_written", "{}", k[0]);
    assert_eq!(k[0]["passes"], 1, "{}", k[0]);
    // With the explicit opt-in (`repeat`) host memory is not watched: the launch is replayed,
    // its later passes find the flag already set, and the record says so.
    let (r, recs) = under_tool(
        "flag_wait",
        "flag_wait.repeat",
        "3",
        &[("ROCPROF_REPLAY_HOST_MEMORY", "repeat")],
    );
    r.assert_success("flag_wait under the tool, repeat");
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    let returned = number(&r, "launch_returned_us");
    assert!(returned < 50_000.0, "repeat: returned after {returned} us");
    let k = of_kernel(&recs, "wait_then_add");
    assert_eq!(k.len(), 1, "{recs:?}");
    assert_eq!(k[0]["outcome"], "replayed", "{}", k[0]);
    assert_eq!(k[0]["passes"], 3, "{}", k[0]);
    assert_eq!(k[0]["host_memory"], "repeated", "{}", k[0]);
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_kernel_waiting_for_the_host_after_the_next_launch_on_its_stream_completes() {
    require_gpu();
    // As above, but the application launches another kernel on the same stream before it
    // sets the flag. That launch waits for its own window only until the yield deadline (1 s
    // by default): the previous window's first pass has not finished, so it runs without
    // replay (`lock_contention`), ordered behind that window, and the host goes on to set the
    // flag. Before (H100, 2026-12-06), that launch returned after 60 s, the three passes of the
    // kernel each giving up after its own 20 s: the application read 0xdead everywhere and the
    // record said `replayed, 3 passes`.
    let (r, recs) = under_tool_args("flag_wait", &["next"], "flag_wait.next", "3", &[]);
    r.assert_success("flag_wait next under the tool");
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    let next = number(&r, "next_returned_us");
    assert!(
        next < 10_000_000.0,
        "the next launch returned after {next} us, past the yield deadline by far"
    );
    let k = of_kernel(&recs, "wait_then_add");
    assert_eq!(k.len(), 1, "{recs:?}");
    assert_eq!(k[0]["passes"], 1, "{}", k[0]);
    let warm = of_kernel(&recs, "warm_up");
    assert_eq!(warm.len(), 2, "{recs:?}");
    assert_eq!(warm[1]["outcome"], "declined", "{}", warm[1]);
    assert_eq!(warm[1]["reason"], "lock_contention", "{}", warm[1]);
    let summary = format!(
        "flag_wait.next: next_returned_us {next}, wait_then_add {} {}, warm_up {} {}\n",
        k[0]["outcome"], k[0]["reason"], warm[1]["outcome"], warm[1]["reason"]
    );
    eprint!("{summary}");
    std::fs::write(out_dir().join("flag_wait.next.summary"), summary).unwrap();
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_kernel_waiting_for_the_applications_next_call_on_another_stream_completes() {
    require_gpu();
    // The flag is device memory the application sets with its next call on another stream
    // (a copy, a kernel, or a synchronous copy on the legacy stream, which does not wait for
    // the kernel's non-blocking stream; or a copy another thread makes on its per-thread
    // default stream while the kernel runs on this thread's). That call waits for the window, whose first pass waits for it:
    // once it has waited past the yield deadline (1 s by default) the window gives up replaying
    // the kernel (`lock_contention`, one pass, the application's own) instead of waiting for
    // the pass deadline (30 s here).
    for mode in ["copy", "kernel", "sync", "ptds"] {
        let name = format!("flag_copy.{mode}");
        let (r, recs) = under_tool_args("flag_copy", &[mode], &name, "3", &[]);
        r.assert_success(&name);
        assert!(r.stdout().contains("RESULT OK"), "{mode}: {}", r.stdout());
        let returned = number(&r, "launch_returned_us");
        assert!(returned < 50_000.0, "{mode}: returned after {returned} us");
        let completed = number(&r, "completed_ms");
        assert!(
            completed < 10_000.0,
            "{mode}: completed after {completed} ms, past the yield deadline by far"
        );
        let k = of_kernel(&recs, "wait_flag_then_add");
        assert_eq!(k.len(), 1, "{mode}: {recs:?}");
        assert_eq!(k[0]["outcome"], "declined", "{mode}: {}", k[0]);
        assert_eq!(k[0]["reason"], "lock_contention", "{mode}: {}", k[0]);
        assert_eq!(k[0]["passes"], 1, "{mode}: {}", k[0]);
        let summary = format!(
            "{name}: completed_ms {completed}, wait_flag_then_add {} {} passes {}; set_flag: {:?}\n",
            k[0]["outcome"],
            k[0]["reason"],
            k[0]["passes"],
            of_kernel(&recs, "set_flag")
                .iter()
                .map(|r| format!("{} {}", r["outcome"], r["reason"]))
                .collect::<Vec<_>>()
        );
        eprint!("{summary}");
        std::fs::write(out_dir().join(format!("{name}.summary")), summary).unwrap();
    }
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_launch_whose_drain_waits_for_the_hosts_next_store_returns_and_is_replayed() {
    require_gpu();
    // A communication kernel (run once, never replayed) spins on a mapped host flag; the
    // replayed `add_one` on another stream must drain it; the host stores the flag only after
    // that launch returned. The drain waits past `ROCPROF_REPLAY_CUDA_DEFER_US` (1 ms): the
    // launch is enqueued behind a closed gate and its call returns, the host stores the flag,
    // the drain ends, and `add_one` is captured and replayed behind the gate. (Before: the
    // call waited for the drain deadline, 60 s, and the spinning kernel gave up at 20 s:
    // the application computed 0xdead.)
    let name = "drain_wait";
    let (r, recs) = under_tool(name, name, "3", &[]);
    r.assert_success(name);
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    let returned = number(&r, "launch_returned_us");
    assert!(returned < 50_000.0, "returned after {returned} us");
    let completed = number(&r, "completed_ms");
    assert!(completed < 5_000.0, "completed after {completed} ms");
    let comm = of_kernel(&recs, "ncclKernel_wait_flag");
    assert!(
        !comm.is_empty() && comm.iter().all(|k| k["reason"] == "communication_kernel"),
        "{comm:?}"
    );
    let add = of_kernel(&recs, "add_one");
    assert_eq!(add.len(), 2, "{recs:?}");
    assert_eq!(add[1]["outcome"], "replayed", "{}", add[1]);
    assert_eq!(add[1]["passes"], 3, "{}", add[1]);
    let summary = format!(
        "{name}: launch_returned_us {returned}, completed_ms {completed}, add_one {} passes {}\n",
        add[1]["outcome"], add[1]["passes"]
    );
    eprint!("{summary}");
    std::fs::write(out_dir().join(format!("{name}.summary")), summary).unwrap();
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_launch_whose_drain_waits_for_the_launch_itself_gives_way_after_the_yield_deadline() {
    require_gpu();
    // `drain_wait kernel`: the spinning communication kernel waits for a device flag that the
    // replayed `set_flag` on another stream sets. Deferred, `set_flag` waits behind its
    // window's gate while the drain waits for the spinning kernel: the drain gives way after
    // `ROCPROF_REPLAY_YIELD_MS` (lock_contention, one execution) and the kernel sees 7. Before,
    // the drain waited its deadline (60 s) and the spinning kernel gave up at 20 s (0xdead).
    let name = "drain_wait.kernel";
    let (r, recs) = under_tool_args("drain_wait", &["kernel"], name, "3", &[]);
    r.assert_success(name);
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    let completed = number(&r, "completed_ms");
    assert!(completed < 10_000.0, "completed after {completed} ms");
    let set = of_kernel(&recs, "set_flag");
    assert_eq!(set.len(), 2, "{recs:?}");
    assert_eq!(
        set[0]["outcome"], "replayed",
        "the first launch: {}",
        set[0]
    );
    assert_eq!(set[1]["outcome"], "declined", "{}", set[1]);
    assert_eq!(set[1]["reason"], "lock_contention", "{}", set[1]);
    let summary = format!(
        "{name}: completed_ms {completed}, set_flag {} {}\n",
        set[1]["outcome"], set[1]["reason"]
    );
    eprint!("{summary}");
    std::fs::write(out_dir().join(format!("{name}.summary")), summary).unwrap();
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn nobody_sees_a_replayed_launch_complete_before_its_window_ends() {
    require_gpu();
    let (r, recs) = counting_passes("overlap", "every observer saw all three passes done");
    let returned = number(&r, "launch_returned_us");
    // The kernel runs 30 ms; the window three times that.
    assert!(
        returned < 30_000.0,
        "the launch call returned after {returned} us: it waited for its window"
    );
    assert_eq!(slow_add_record(&recs)["host_memory"], "repeated");
}

/// Runs `app` without the tool, then under it with 3 passes and `repeat` for host memory: its
/// 30 ms `slow_add` counts its executions in host memory (through a `__device__` pointer), so
/// with the opt-in it is replayed and counts every pass, which the app's observers check
/// (`EXPECT_RUNS=3`). Returns the run under the tool, which printed `RESULT OK` (`what` it
/// checked), and its records.
fn counting_passes(app: &str, what: &str) -> (Run, Vec<Value>) {
    let exe = cuda_app(app, false);
    let plain = run(
        &exe,
        &[],
        &[],
        &["CUDA_INJECTION64_PATH", "LD_PRELOAD"],
        DEADLINE,
    );
    save(&format!("{app}.plain"), &plain);
    plain.assert_success(&format!("{app} without the tool"));
    let (r, recs) = under_tool(
        app,
        app,
        "3",
        &[
            ("EXPECT_RUNS", "3"),
            ("ROCPROF_REPLAY_HOST_MEMORY", "repeat"),
        ],
    );
    r.assert_success(&format!("{app} under the tool: {what}"));
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    (r, recs)
}

/// The one record of `slow_add`, replayed with 3 passes.
fn slow_add_record(recs: &[Value]) -> &Value {
    let k = of_kernel(recs, "slow_add");
    assert_eq!(k.len(), 1, "{recs:?}");
    assert_eq!(k[0]["outcome"], "replayed", "{}", k[0]);
    assert_eq!(k[0]["passes"], 3, "{}", k[0]);
    k[0]
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn stream_work_on_another_stream_during_a_window_returns_at_once_and_runs_after_it() {
    require_gpu();
    // The host function on the other stream sees the execution count: every pass done.
    let (r, recs) = counting_passes("ordered", "the other stream's work ran after the window");
    let calls = number(&r, "stream_calls_us");
    // The kernel alone runs 30 ms, its window three times that: a call that waited for the
    // window would take more than 60 ms.
    assert!(
        calls < 20_000.0,
        "the fill, copy and host function calls took {calls} us: they waited for the window"
    );
    slow_add_record(&recs);
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn windows_in_a_process_with_more_streams_than_hardware_connections_complete() {
    require_gpu();
    // 40 streams share the GPU's 8 default connections: the tool's own stream may share one
    // with a stream its window holds behind a gate. Every window must still finish its passes
    // (the fills of `ordered` wait at the host here: too many streams to order them on the
    // device).
    // With one connection (`CUDA_DEVICE_MAX_CONNECTIONS=1`, as Megatron-LM sets it) every
    // stream shares it: before windows went synchronous there, the first restore timed out
    // behind the gate and the application's stream never ran again.
    for (mode, streams, connections) in [
        ("gates", "40", None),
        ("ordered", "40", None),
        ("gates", "3", Some("1")),
        ("ordered", "3", Some("1")),
    ] {
        let name = match connections {
            None => format!("many_streams.{mode}"),
            Some(c) => format!("many_streams.{mode}.connections{c}"),
        };
        let mut env = vec![("STREAMS", streams)];
        env.extend(connections.map(|c| ("CUDA_DEVICE_MAX_CONNECTIONS", c)));
        let (r, recs) = under_tool_args("many_streams", &[mode], &name, "3", &env);
        r.assert_success(&name);
        assert!(r.stdout().contains("RESULT OK"), "{name}: {}", r.stdout());
        let k = of_kernel(&recs, "slow_add");
        let want = if mode == "gates" {
            streams.parse().unwrap()
        } else {
            1
        };
        assert_eq!(k.len(), want, "{name}: {recs:?}");
        for rec in &k {
            assert_eq!(rec["outcome"], "replayed", "{name}: {rec}");
            assert_eq!(rec["passes"], 3, "{name}: {rec}");
        }
        let elapsed = number(&r, "elapsed_ms");
        let summary = format!(
            "{name}: elapsed_ms {elapsed}, {} windows replayed\n",
            k.len()
        );
        eprint!("{summary}");
        std::fs::write(out_dir().join(format!("{name}.summary")), summary).unwrap();
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    assert!(!v.is_empty());
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn pass_times_of_a_five_microsecond_kernel_measure_the_kernel() {
    require_gpu();
    let (r, recs) = under_tool("short_kernel", "short_kernel", "3", &[("LAUNCHES", "50")]);
    r.assert_success("short_kernel under the tool");
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    let k = of_kernel(&recs, "five_us");
    assert_eq!(k.len(), 50, "one record per launch");
    let (mut first, mut later) = (Vec::new(), Vec::new());
    for rec in &k {
        assert_eq!(rec["outcome"], "replayed", "{rec}");
        let times: Vec<u64> = rec["pass_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t.as_u64()
                    .unwrap_or_else(|| panic!("an untimed pass: {rec}"))
            })
            .collect();
        assert_eq!(times.len(), 3, "{rec}");
        first.push(times[0]);
        later.extend_from_slice(&times[1..]);
    }
    let all: Vec<u64> = first.iter().chain(&later).copied().collect();
    let (m1, ml, m) = (median(first), median(later), median(all));
    // What timing by records costs a window, against timing by events (a benchmark figure,
    // printed): the median window time of the same launches under each.
    let (re, erecs) = under_tool(
        "short_kernel",
        "short_kernel.events",
        "3",
        &[
            ("LAUNCHES", "50"),
            ("ROCPROF_REPLAY_CUDA_PASS_TIMES", "events"),
        ],
    );
    re.assert_success("short_kernel under the tool, pass times from events");
    let window = |recs: &[&Value]| {
        median(
            recs.iter()
                .filter_map(|r| r["window_ns"].as_u64())
                .collect(),
        )
    };
    let (wr, we) = (window(&k), window(&of_kernel(&erecs, "five_us")));
    let summary = format!(
        "median_ns all {m} pass1 {m1} relaunch {ml}\n\
         median window_ns: records {wr} events {we} (records cost {} ns per pass)\n",
        (wr as i64 - we as i64) / 3
    );
    std::fs::write(out_dir().join("short_kernel.summary"), &summary).unwrap();
    println!("{summary}");
    // How close the kernel-only times come to Nsight Compute's `gpu__time_duration` is a
    // benchmark figure (gpu.sh's `async` step prints ours/ncu; events on 2026-12-01: 9.0 us
    // against 7.0 us, 1.29x; submission to end on 2026-12-04: 6 528 ns against 6 560 ns,
    // 0.995), not a timed assertion. What is asserted: every pass is timed, and pass 1
    // (the application's own launch, on its stream) is timed the way the relaunches are.
    assert!(m > 0, "median pass time {m} ns");
    assert!(
        m1.abs_diff(ml) * 5 <= ml,
        "pass 1 ({m1} ns) and the relaunches ({ml} ns) are timed alike"
    );
}
