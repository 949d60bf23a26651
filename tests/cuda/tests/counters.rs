//! Hardware counters on a real NVIDIA GPU through CUPTI in user replay (by default the legacy
//! Profiler API's auto range; `ROCPROF_REPLAY_CUPTI_API=range` the range profiler): the
//! command's timer tool (`ROCPROF_REPLAY_METRICS`, one ordinary pass plus the counter passes
//! CUPTI asks for) on programs whose counters are known, which must compute exactly what
//! they compute without it. Built without `ROCPROF_REPLAY_GPU_TESTS=1` these tests show as
//! ignored with the reason; built with it they fail loudly when the GPU or `nvcc` is missing.
//!
//! The comparison with Nsight Compute is `gpu.sh counters` (`compare_counters.py`).

use std::time::Duration;

use rocprof_replay_cuda_tests::{cuda_app, out_dir, records, require_gpu, run, tail, timer_tool};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(300);

/// Runs `exe args` under the timer with `metrics`; returns its records and stderr.
fn with_counters(
    name: &str,
    exe: &std::path::Path,
    args: &[&str],
    metrics: &str,
) -> (Vec<Value>, String) {
    with_counters_env(name, exe, args, metrics, &[])
}

/// [`with_counters`] with `extra` in the environment.
fn with_counters_env(
    name: &str,
    exe: &std::path::Path,
    args: &[&str],
    metrics: &str,
    extra: &[(&str, &str)],
) -> (Vec<Value>, String) {
    let rec = out_dir().join(format!("{name}.jsonl"));
    let _ = std::fs::remove_file(&rec);
    let tool = timer_tool().to_str().unwrap().to_string();
    let catalog = out_dir().join(format!("{name}.catalog.jsonl"));
    let _ = std::fs::remove_file(&catalog);
    let mut env = vec![
        ("ROCPROF_REPLAY_CATALOG", catalog.to_str().unwrap()),
        ("CUDA_INJECTION64_PATH", tool.as_str()),
        ("ROCPROF_REPLAY_PASSES", "1"),
        ("ROCPROF_REPLAY_METRICS", metrics),
        ("ROCPROF_REPLAY_OUTPUT", rec.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
    ];
    env.extend_from_slice(extra);
    let r = run(exe, args, &env, &["LD_PRELOAD"], DEADLINE);
    std::fs::write(
        out_dir().join(format!("{name}.stdout")),
        r.output.stdout.as_slice(),
    )
    .unwrap();
    std::fs::write(
        out_dir().join(format!("{name}.stderr")),
        r.output.stderr.as_slice(),
    )
    .unwrap();
    r.assert_success(name);
    assert!(
        r.stdout().contains("RESULT OK"),
        "{name}: the program's result changed under counters\n{}\n{}",
        r.stdout(),
        tail(&r.stderr(), 4000)
    );
    (records(&rec), r.stderr())
}

/// The floating-point value of `metric` in a record.
fn value(r: &Value, metric: &str) -> f64 {
    let m = &r["metrics"][metric];
    m["gpu_value"]
        .as_f64()
        .or_else(|| m["value"].as_f64())
        .unwrap_or_else(|| panic!("no {metric} in {r}"))
}

fn of_kernel<'a>(recs: &'a [Value], name: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["kernel"].as_str().is_some_and(|k| k.contains(name)))
        .collect()
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI 12.6+: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn counters_of_known_kernels_come_from_cupti_with_one_execution() {
    require_gpu();
    let exe = cuda_app("counters_check", false);
    let metrics = "dram__bytes_read.sum,sm__inst_executed.sum,sm__cycles_elapsed.avg";
    let (recs, stderr) = with_counters("counters_check", &exe, &["1024"], metrics);
    assert!(
        stderr.contains("counters on GPU 0:"),
        "the tool did not report the metric set: {}",
        tail(&stderr, 4000)
    );
    let sums = of_kernel(&recs, "stream_sum");
    let scales = of_kernel(&recs, "scale");
    assert_eq!((sums.len(), scales.len()), (2, 3), "{recs:?}");
    for r in sums.iter().chain(&scales) {
        assert_eq!(r["outcome"], "replayed", "{r}");
        assert_eq!(r["inputs_restored"], true, "{r}");
        let names = r["metrics"]
            .as_object()
            .unwrap_or_else(|| panic!("no metrics: {r}"));
        assert_eq!(names.len(), 3, "{r}");
        for (n, v) in names {
            let x = v["gpu_value"].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x >= 0.0, "{n} = {v} in {r}");
        }
        assert!(value(r, "sm__cycles_elapsed.avg") > 0.0, "{r}");
        assert!(value(r, "sm__inst_executed.sum") > 0.0, "{r}");
    }
    for r in &sums {
        // 1 GiB read once, far more than the L2: DRAM reads are the buffer, within 2%.
        let read = value(r, "dram__bytes_read.sum");
        let gib = (1u64 << 30) as f64;
        assert!(
            (read - gib).abs() / gib < 0.02,
            "dram__bytes_read.sum {read} for 1 GiB: {r}"
        );
    }
    for r in &scales {
        // A 5 µs kernel: about 10 000 cycles elapsed (Nsight Compute: 10 173–10 516 on an H100).
        // The default auto range holds the kernel alone; a user range, which also counts the
        // host time between its push and its pop, gives 300 000 and more.
        let elapsed = value(r, "sm__cycles_elapsed.avg");
        assert!(
            elapsed < 100_000.0,
            "sm__cycles_elapsed.avg {elapsed} of a 5 µs kernel (does the range hold the host \
             time around the launch?): {r}"
        );
        // 4 MiB scaled in place fits the L2: its DRAM reads are the buffer only because the
        // window flushed the L2 before the counter pass, as Nsight Compute does (without the
        // flush, a few hundred bytes: the restore left the data in L2).
        let read = value(r, "dram__bytes_read.sum");
        let mib4 = (4u64 << 20) as f64;
        assert!(
            (read - mib4).abs() / mib4 < 0.02,
            "dram__bytes_read.sum {read} for 4 MiB (is the L2 flushed before counter passes?): {r}"
        );
    }
    // Deterministic counters are identical across launches of the same work.
    let inst: Vec<f64> = sums
        .iter()
        .map(|r| value(r, "sm__inst_executed.sum"))
        .collect();
    assert_eq!(
        inst[0], inst[1],
        "sm__inst_executed.sum of two identical launches"
    );
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI 12.6+: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn launches_right_after_a_counted_one_share_its_counter_passes_each_with_its_own_values() {
    // Two launches per counter pass: what CUDA 13.0's range profiler keeps.
    counter_run("counters_check.runs", 2, [2, 2], [2, 2, 1]);
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI 12.6+: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn past_two_launches_per_pass_the_legacy_profiler_api_measures_every_launch_of_a_run() {
    // Four: the three back-to-back scale launches make one run, each in a range of its own
    // (CUDA 13.0's range profiler would keep two of them; the legacy API keeps all).
    counter_run("counters_check.runs4", 4, [2, 2], [3, 3, 3]);
}

/// `counters_check` with `ROCPROF_REPLAY_CUPTI_RUN=k`: the runs each launch of the two
/// `stream_sum` and the three `scale` launches belongs to, and every launch's own values.
fn counter_run(name: &str, k: u32, sum_runs: [u64; 2], scale_runs: [u64; 3]) {
    require_gpu();
    let exe = cuda_app("counters_check", false);
    let metrics = "dram__bytes_read.sum,sm__inst_executed.sum,sm__cycles_elapsed.avg";
    let k = k.to_string();
    let (recs, stderr) = with_counters_env(
        name,
        &exe,
        &["1024"],
        metrics,
        &[("ROCPROF_REPLAY_CUPTI_RUN", k.as_str())],
    );
    let sums = of_kernel(&recs, "stream_sum");
    let scales = of_kernel(&recs, "scale");
    assert_eq!((sums.len(), scales.len()), (2, 3), "{recs:?}");
    let runs = |v: &[&Value]| -> Vec<Option<u64>> { v.iter().map(|r| r["run"].as_u64()).collect() };
    assert_eq!(
        (runs(&sums), runs(&scales)),
        (sum_runs.map(Some).to_vec(), scale_runs.map(Some).to_vec()),
        "{}",
        tail(&stderr, 4000)
    );
    for r in sums.iter().chain(&scales) {
        assert_eq!(r["outcome"], "replayed", "{r}");
        assert_eq!(r["inputs_restored"], true, "{r}");
        assert!(value(r, "sm__inst_executed.sum") > 0.0, "{r}");
    }
    // Each launch's values are its own: identical work, identical instruction counts; each
    // reads its buffer from DRAM (the L2 flushed before each launch's range).
    let inst = |v: &[&Value]| -> Vec<f64> {
        v.iter()
            .map(|r| value(r, "sm__inst_executed.sum"))
            .collect()
    };
    let (a, b) = (inst(&sums), inst(&scales));
    assert!(a.iter().all(|x| *x == a[0]), "stream_sum: {a:?}");
    assert!(b.iter().all(|x| *x == b[0]), "scale: {b:?}");
    assert!(
        a[0] > 10.0 * b[0],
        "a 1 GiB sum executes more than a 4 MiB scale: {a:?} {b:?}"
    );
    for (rs, bytes) in [(&sums, 1u64 << 30), (&scales, 4 << 20)] {
        for r in rs.iter() {
            let read = value(r, "dram__bytes_read.sum");
            let want = bytes as f64;
            assert!(
                (read - want).abs() / want < 0.02,
                "dram__bytes_read.sum {read} for {bytes} bytes: {r}"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI 12.6+: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn launch_metrics_are_the_launch_configuration() {
    require_gpu();
    let exe = cuda_app("counters_check", false);
    let (recs, stderr) = with_counters(
        "counters_launch",
        &exe,
        &["64"],
        "launch__grid_size,launch__block_size",
    );
    // The backend computes launch__* itself (CUPTI's host API does not list them).
    assert!(
        !stderr.contains("unknown metric `launch__"),
        "{}",
        tail(&stderr, 600)
    );
    let sums = of_kernel(&recs, "stream_sum");
    let scales = of_kernel(&recs, "scale");
    assert_eq!((sums.len(), scales.len()), (2, 3), "{recs:?}");
    for r in &sums {
        assert_eq!(value(r, "launch__grid_size"), 1056.0, "{r}");
        assert_eq!(value(r, "launch__block_size"), 256.0, "{r}");
    }
    for r in &scales {
        assert_eq!(value(r, "launch__grid_size"), 4096.0, "{r}");
    }
    // Nothing to count: the application's own run, no snapshot, no counter pass.
    for r in sums.iter().chain(&scales) {
        assert_eq!(
            (
                r["outcome"].as_str(),
                r["passes"].as_u64(),
                r["snapshot_bytes"].as_u64()
            ),
            (Some("skipped"), Some(1), Some(0)),
            "{r}"
        );
    }
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI 12.6+: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn an_unknown_nvidia_metric_is_named_with_the_closest_ones_and_the_program_is_unaffected() {
    require_gpu();
    let exe = cuda_app("counters_check", false);
    let (recs, stderr) = with_counters("counters_unknown", &exe, &["64"], "sm__cycles_elapsd.avg");
    assert!(
        stderr.contains("unknown metric `sm__cycles_elapsd.avg`")
            && stderr.contains("sm__cycles_elapsed.avg"),
        "{}",
        tail(&stderr, 4000)
    );
    assert!(recs.iter().all(|r| r["metrics"].is_null()), "{recs:?}");
}
