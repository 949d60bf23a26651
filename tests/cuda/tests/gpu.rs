//! Replay on a real NVIDIA GPU: CUDA programs and a PyTorch training step run under
//! `pass_timer` (three passes of every kernel) and must compute exactly what they compute
//! without it. Built without `ROCPROF_REPLAY_GPU_TESTS=1` these tests show as ignored with the
//! reason; built with it they fail loudly when the GPU, `nvcc` or CUPTI is missing.
//!
//! Logs, records and summaries go to `ROCPROF_REPLAY_GPU_OUT` when set.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rocprof_replay_cuda_tests::{
    Run, cuda_app, cuda_tool, fixtures, out_dir, records, require_gpu, run, tail,
};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(300);
/// Launches of `replay_check` outside stream capture: each gives exactly one record.
const REPLAY_CHECK_LAUNCHES: usize = 5 + 4 + 2 + 3 + 1 + 1 + 3 + 2 + 2 + 3 + 20 + 1;

fn save(name: &str, run: &Run) {
    let dir = out_dir();
    std::fs::write(
        dir.join(format!("{name}.stdout")),
        run.output.stdout.as_slice(),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{name}.stderr")),
        run.output.stderr.as_slice(),
    )
    .unwrap();
}

fn tool_env<'a>(records: &'a str, passes: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("ROCPROF_REPLAY_PASSES", passes),
        ("ROCPROF_REPLAY_OUTPUT", records),
        ("ROCPROF_REPLAY_LOG", "warn"),
    ]
}

fn records_path(name: &str) -> PathBuf {
    let p = out_dir().join(format!("{name}.jsonl"));
    let _ = std::fs::remove_file(&p);
    p
}

/// Launches `replay_check` makes into its capturing stream, and its graph launches.
const REPLAY_CHECK_CAPTURED: usize = 2;
const REPLAY_CHECK_GRAPH_LAUNCHES: usize = 3;

/// Runs test app `name` under the CUDA tool with 3 passes, checks it exited cleanly and
/// printed `RESULT OK` (the program checks its own results), and returns its records.
fn app_under_tool(name: &str) -> Vec<Value> {
    let exe = cuda_app(name, false);
    let rec = records_path(name);
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "3");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    let r = run(&exe, &[], &env, &["LD_PRELOAD"], DEADLINE);
    save(name, &r);
    r.assert_success(&format!("{name} under the tool"));
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    records(&rec)
}

/// The (outcome, reason) of the record of the kernel whose name contains `kernel`.
fn outcome_of<'a>(recs: &'a [Value], kernel: &str) -> (&'a str, &'a str) {
    let r = recs
        .iter()
        .find(|r| r["kernel"].as_str().is_some_and(|n| n.contains(kernel)))
        .unwrap_or_else(|| panic!("no record of {kernel}: {recs:?}"));
    (
        r["outcome"].as_str().unwrap_or(""),
        r["reason"].as_str().unwrap_or(""),
    )
}

/// Checks the records of a `replay_check` run under a 3-pass tool.
fn check_replay_check_records(recs: &[Value]) {
    assert_eq!(
        recs.len(),
        REPLAY_CHECK_LAUNCHES + REPLAY_CHECK_CAPTURED + REPLAY_CHECK_GRAPH_LAUNCHES,
        "one record per launch, captured launches and graph launches included"
    );
    let failed: Vec<&Value> = recs.iter().filter(|r| r["outcome"] == "failed").collect();
    assert!(failed.is_empty(), "failed outcomes: {failed:?}");
    let declined = |reason: &str| {
        recs.iter()
            .filter(|r| r["outcome"] == "declined" && r["reason"] == reason)
            .count()
    };
    assert_eq!(declined("stream_capture"), REPLAY_CHECK_CAPTURED);
    assert_eq!(declined("graph_launch"), REPLAY_CHECK_GRAPH_LAUNCHES);
    assert!(
        recs.iter()
            .filter(|r| r["reason"] == "graph_launch")
            .all(|r| r["kernel"] == "<graph>")
    );
    let replayed: Vec<&Value> = recs.iter().filter(|r| r["outcome"] == "replayed").collect();
    assert_eq!(
        replayed.len(),
        REPLAY_CHECK_LAUNCHES,
        "every other launch replayed: {:?}",
        recs.iter()
            .filter(|r| r["outcome"] != "replayed")
            .collect::<Vec<_>>()
    );
    for r in &replayed {
        assert_eq!(r["passes"], 3, "{r}");
        let snap = r["snapshot_bytes"].as_u64().unwrap();
        assert!(snap > 0, "{r}");
        let restored = r["restored_bytes"].as_u64().unwrap();
        let written = r["written_bytes"].as_u64().unwrap();
        match r["restore_mode"].as_str() {
            // Every byte before passes 2 and 3.
            Some("full") => assert_eq!(restored, 2 * snap, "{r}"),
            // Write-set restore (the compare kernel): the first pass wrote at most half —
            // unless the window covered a run of launches (`ROCPROF_REPLAY_RUN`), which keeps
            // write-set restores for dense writers too.
            Some("write_set") => {
                assert!(2 * written <= snap || r["run"].as_u64() > Some(1), "{r}")
            }
            _ => panic!("a replayed launch without a restore mode: {r}"),
        }
        let times = r["pass_ns"].as_array().unwrap();
        assert_eq!(times.len(), 3);
        assert!(
            times.iter().all(|t| t.as_u64().is_some_and(|ns| ns > 0)),
            "every pass timed: {r}"
        );
    }
    for k in ["add_one", "bump_counter", "table_step", "affine"] {
        assert!(
            recs.iter()
                .any(|r| r["kernel"].as_str().is_some_and(|n| n.contains(k))),
            "no record of {k}"
        );
    }
}

fn replay_check_plain(exe: &Path) -> Run {
    let plain = run(
        exe,
        &[],
        &[],
        &["CUDA_INJECTION64_PATH", "LD_PRELOAD"],
        DEADLINE,
    );
    save("replay_check.plain", &plain);
    plain.assert_success("replay_check without the tool");
    assert!(plain.stdout().contains("RESULT OK"), "{}", plain.stdout());
    plain
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn every_launch_path_is_replayed_and_the_program_sees_one_execution() {
    require_gpu();
    let exe = cuda_app("replay_check", false);
    let plain = replay_check_plain(&exe);
    let rec = records_path("replay_check.injected");
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "3");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    let replayed = run(&exe, &[], &env, &["LD_PRELOAD"], DEADLINE);
    save("replay_check.injected", &replayed);
    replayed.assert_success("replay_check under CUDA_INJECTION64_PATH");
    assert!(
        replayed.stdout().contains("RESULT OK"),
        "{}\n{}",
        replayed.stdout(),
        tail(&replayed.stderr(), 4000)
    );
    assert_eq!(
        replayed.value("digest"),
        plain.value("digest"),
        "every buffer identical with and without replay"
    );
    assert!(
        replayed.stderr().contains("pass_timer: "),
        "pass_timer printed nothing"
    );
    check_replay_check_records(&records(&rec));
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_preloaded_tool_injects_itself() {
    require_gpu();
    let exe = cuda_app("replay_check", false);
    let plain = replay_check_plain(&exe);
    let rec = records_path("replay_check.preloaded");
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "3");
    env.push(("LD_PRELOAD", &tool));
    let replayed = run(&exe, &[], &env, &["CUDA_INJECTION64_PATH"], DEADLINE);
    save("replay_check.preloaded", &replayed);
    replayed.assert_success("replay_check under LD_PRELOAD");
    assert!(
        replayed.stdout().contains("RESULT OK"),
        "{}",
        replayed.stdout()
    );
    assert_eq!(replayed.value("digest"), plain.value("digest"));
    check_replay_check_records(&records(&rec));
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn an_application_that_holds_cupti_still_runs() {
    require_gpu();
    let exe = cuda_app("cupti_taken", true);
    let rec = records_path("cupti_taken");
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "3");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    let r = run(&exe, &[], &env, &["LD_PRELOAD"], DEADLINE);
    save("cupti_taken", &r);
    r.assert_success("cupti_taken under the tool");
    assert!(r.stdout().contains("RESULT OK"), "{}", r.stdout());
    let app_got_cupti = r.value("app_subscribe").as_deref() == Some("0");
    if app_got_cupti {
        assert!(
            r.stderr().contains("CUPTI already has a subscriber"),
            "the tool did not say why it is off:\n{}",
            r.stderr()
        );
        assert!(records(&rec).is_empty());
    } else {
        // The tool subscribed first (during cuInit): the application's own subscription was
        // refused and the tool replayed its launches.
        assert_eq!(records(&rec).len(), 3, "{}", r.stderr());
    }
    std::fs::write(
        out_dir().join("cupti_taken.summary"),
        format!("application holds CUPTI: {app_got_cupti}\n"),
    )
    .unwrap();
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn kernels_writing_host_memory_run_once_and_kernels_reading_it_replay() {
    require_gpu();
    let recs = app_under_tool("host_memory");
    let kinds: Vec<(String, String)> = recs
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap_or("").to_string(),
                r["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    // Host memory is watched across the first pass: writers stop after it, readers replay.
    let written = ("declined".to_string(), "host_memory_written".to_string());
    let replayed = ("replayed".to_string(), String::new());
    assert_eq!(
        kinds,
        vec![
            written.clone(),
            written.clone(),
            written,
            replayed.clone(),
            replayed.clone(),
            replayed.clone(),
            replayed,
        ],
        "kernels writing mapped, pinned and registered memory run once, device memory and \
         kernels reading host memory replayed: {recs:?}"
    );
    assert!(
        recs.iter().all(|r| r["host_memory"].is_null()),
        "nothing repeated: {recs:?}"
    );
}

/// `surface_write.cu` under a 3-pass tool: the kernel writing a CUDA array through a surface
/// object runs once (`array_memory`), the one writing device memory is replayed, and the
/// program sees one execution of each.
#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_kernel_writing_an_array_through_a_surface_object_runs_once() {
    require_gpu();
    let recs = app_under_tool("surface_write");
    let of = |k: &str| outcome_of(&recs, k);
    assert_eq!(of("bump_array"), ("declined", "array_memory"), "{recs:?}");
    assert_eq!(of("bump_plain"), ("replayed", ""), "{recs:?}");
}

/// `managed_global.cu` under a 3-pass tool: a kernel incrementing a `__managed__` variable
/// runs once (`host_memory`) while the host writes another variable of its module during what
/// would be the replay passes, and those writes stand (a restore of the module's variables
/// undid them: `b=0`). A kernel of the same module incrementing a plain `__device__` variable
/// runs once too: any kernel of the module may write its managed variables by name.
#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_kernel_writing_a_managed_variable_runs_once_and_the_hosts_writes_stand() {
    require_gpu();
    let recs = app_under_tool("managed_global");
    let of = |k: &str| outcome_of(&recs, k);
    assert_eq!(of("bump_managed"), ("declined", "host_memory"), "{recs:?}");
    assert_eq!(of("bump_device"), ("declined", "host_memory"), "{recs:?}");
}

/// `memory_kinds.cu` under a 3-pass tool, with the arguments footprint and with every
/// allocation captured (`all`, where a restore of managed memory used to undo the host's
/// write): the application's results are its own (it checks them: `RESULT OK`), kernels given
/// managed, imported, IPC or another device's memory run once, declined before the window with
/// the reason, and the others are replayed.
#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn memory_the_window_cannot_restore_is_never_captured_and_its_kernels_run_once() {
    require_gpu();
    let exe = cuda_app("memory_kinds", false);
    let tool = cuda_tool().to_str().unwrap().to_string();
    for (name, footprint) in [("memory_kinds", "arguments"), ("memory_kinds.all", "all")] {
        let rec = records_path(name);
        let rec_s = rec.to_str().unwrap().to_string();
        let mut env = tool_env(&rec_s, "3");
        env.push(("CUDA_INJECTION64_PATH", &tool));
        env.push(("ROCPROF_REPLAY_FOOTPRINT", footprint));
        let r = run(&exe, &[], &env, &["LD_PRELOAD"], DEADLINE);
        save(name, &r);
        r.assert_success(&format!(
            "memory_kinds under the tool, footprint {footprint}"
        ));
        let out = r.stdout();
        assert!(out.contains("RESULT OK"), "{out}");
        // The IPC child writes its records into the same file (another pid).
        let recs = records(&rec);
        let of = |kernel: &str| -> Vec<(String, String)> {
            recs.iter()
                .filter(|r| r["kernel"].as_str().is_some_and(|k| k.contains(kernel)))
                .map(|r| {
                    (
                        r["outcome"].as_str().unwrap_or("").to_string(),
                        r["reason"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        };
        let once = |reason: &str| vec![("declined".to_string(), reason.to_string())];
        let replayed = vec![("replayed".to_string(), String::new())];
        assert_eq!(
            of("managed_add_one"),
            once("host_memory"),
            "{footprint}: {recs:?}"
        );
        assert_eq!(of("slow_add_one"), replayed, "{footprint}: {recs:?}");
        assert_eq!(
            of("ipc_add_one"),
            once("foreign_memory"),
            "{footprint}: {recs:?}"
        );
        // The exporter's side: a kernel on the allocation it exported.
        assert_eq!(
            of("exported_add_one"),
            once("foreign_memory"),
            "{footprint}: {recs:?}"
        );
        if !out.contains("case import skip") {
            assert_eq!(
                of("import_add_one"),
                once("foreign_memory"),
                "{footprint}: {recs:?}"
            );
            // The exporter's own mapping of the handle it exported.
            assert_eq!(
                of("shared_add_one"),
                once("foreign_memory"),
                "{footprint}: {recs:?}"
            );
            assert_eq!(of("own_add_one"), replayed, "{footprint}: {recs:?}");
        }
        if !out.contains("case dmabuf skip") {
            // An allocation part of which was exported as a dmabuf (RDMA).
            assert_eq!(
                of("dmabuf_add_one"),
                once("foreign_memory"),
                "{footprint}: {recs:?}"
            );
        }
        if !out.contains("case peer skip") {
            assert_eq!(
                of("peer_add_one"),
                once("peer_memory"),
                "{footprint}: {recs:?}"
            );
        }
    }
}

/// `oom_retry.cu` without the tool and under a 3-pass tool: after a kernel whose 2 GiB buffer
/// the tool snapshots in device memory, the application allocates all it could have without a
/// tool (`cudaMalloc`, `cudaMallocAsync`, a `cudaMallocPitch` whose entry understates its size,
/// and a `cudaMalloc` from another thread while a kernel's window runs). Every allocation
/// succeeds both ways and the buffer ends with one execution per launch (the program checks:
/// `RESULT OK`); under the tool the log shows the arena given back: released before a call
/// that would not fit, and after the pitched call failed for memory, the call made again.
#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn allocations_needing_the_arenas_memory_get_it_back() {
    require_gpu();
    let exe = cuda_app("oom_retry", false);
    let plain = run(
        &exe,
        &[],
        &[],
        &["LD_PRELOAD", "CUDA_INJECTION64_PATH"],
        DEADLINE,
    );
    save("oom_retry.plain", &plain);
    plain.assert_success("oom_retry without the tool");
    assert!(plain.stdout().contains("RESULT OK"), "{}", plain.stdout());

    let rec = records_path("oom_retry");
    let rec_s = rec.to_str().unwrap().to_string();
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(&rec_s, "3");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    env.push(("ROCPROF_REPLAY_LOG", "info"));
    let r = run(&exe, &[], &env, &["LD_PRELOAD"], DEADLINE);
    save("oom_retry", &r);
    r.assert_success("oom_retry under the tool");
    let (out, err) = (r.stdout(), r.stderr());
    assert!(out.contains("RESULT OK"), "{out}\n{}", tail(&err, 6000));
    let released = err
        .matches("snapshot arena released for an application allocation")
        .count();
    let retried = err
        .matches("the arena was released and the allocation made again, successfully")
        .count();
    println!("oom_retry: released before the call {released}, made again after it {retried}");
    assert!(
        released >= 1,
        "the arena held device memory an allocation needed: {}",
        tail(&err, 6000)
    );
    assert!(
        retried >= 1,
        "the pitched allocation failed for memory and was made again: {}",
        tail(&err, 6000)
    );
    let recs = records(&rec);
    let replayed = recs
        .iter()
        .filter(|r| r["kernel"].as_str().is_some_and(|k| k.contains("add_one")))
        .filter(|r| r["outcome"] == "replayed")
        .count();
    assert!(replayed >= 1, "the buffer's kernel was replayed: {recs:?}");
}

/// Launches of `contexts_unload.cu`, by kernel: each gives exactly one record.
const CONTEXTS_UNLOAD_LAUNCHES: [(&str, usize); 4] = [
    // two_contexts: two threads at once, then one thread switching contexts.
    ("ctx_add_one", 20 + 20 + 10 + 10),
    // two_contexts (host writes), the cross-context copy (one in each context),
    // unload_during_window (3 in flight, 1 after the unload).
    ("slow_add_one", 3 + 2 + 3 + 1),
    // M2 during the window; the other module before launches 2 and 3, twice.
    ("add_value", 1 + 2 + 2),
    // device_variable_after_unload, from a cubin and from PTX text.
    ("bump_counter", 3 + 3),
];

/// `contexts_unload.cu` without the tool and under a 3-pass tool (the default footprint): two
/// contexts on one device launching at once, one thread switching between them, and a host
/// thread writing one context's memory during the other's windows, a copy made in one context
/// into the other's memory still in flight when the other launches; a module loaded, used and
/// unloaded from another thread while kernels of a first module are in their windows; a
/// `__device__` variable counted across unloads of other modules. The program's results are
/// its own both ways (it checks them: `RESULT OK`), every launch has one record, and every
/// record is honest: replayed with 3 passes, or run once (declined with its reason, or
/// skipped); none failed.
#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn two_contexts_and_module_unloads_keep_one_execution() {
    require_gpu();
    let exe = cuda_app("contexts_unload", false);
    let plain = run(
        &exe,
        &[],
        &[],
        &["CUDA_INJECTION64_PATH", "LD_PRELOAD"],
        DEADLINE,
    );
    save("contexts_unload.plain", &plain);
    plain.assert_success("contexts_unload without the tool");
    assert!(plain.stdout().contains("RESULT OK"), "{}", plain.stdout());
    let rec = records_path("contexts_unload");
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "3");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    let r = run(
        &exe,
        &[],
        &env,
        &["LD_PRELOAD", "ROCPROF_REPLAY_FOOTPRINT"],
        DEADLINE,
    );
    save("contexts_unload", &r);
    r.assert_success("contexts_unload under the tool");
    let out = r.stdout();
    assert!(
        out.contains("RESULT OK"),
        "{out}\n{}",
        tail(&r.stderr(), 4000)
    );
    let recs = records(&rec);
    // Per kernel: its records, by outcome (and reason).
    let mut lines = Vec::new();
    for (kernel, launches) in CONTEXTS_UNLOAD_LAUNCHES {
        let mut kinds = std::collections::BTreeMap::<String, usize>::new();
        let of: Vec<&Value> = recs
            .iter()
            .filter(|r| r["kernel"].as_str().is_some_and(|k| k.contains(kernel)))
            .collect();
        for r in &of {
            let kind = match (r["outcome"].as_str(), r["reason"].as_str()) {
                (Some(o), Some(why)) => format!("{o} {why}"),
                (Some(o), None) => o.to_string(),
                _ => "?".to_string(),
            };
            *kinds.entry(kind).or_default() += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        lines.push(format!(
            "{kernel}: {}/{launches} records: {}",
            of.len(),
            kinds.join(", ")
        ));
    }
    let summary = format!(
        "contexts_unload: {} records, plain {:.2} s, under the tool {:.2} s; {}",
        recs.len(),
        plain.elapsed.as_secs_f64(),
        r.elapsed.as_secs_f64(),
        lines.join("; ")
    );
    println!("{summary}");
    let cases: Vec<&str> = out.lines().filter(|l| l.starts_with("case ")).collect();
    std::fs::write(
        out_dir().join("contexts_unload.summary"),
        format!("{summary}\n{}\n", cases.join("\n")),
    )
    .unwrap();
    let failed: Vec<&Value> = recs.iter().filter(|r| r["outcome"] == "failed").collect();
    assert!(failed.is_empty(), "failed outcomes: {failed:?}");
    for r in &recs {
        match r["outcome"].as_str() {
            Some("replayed") => assert_eq!(r["passes"], 3, "{r}"),
            Some("declined") => assert!(
                r["reason"].as_str().is_some_and(|why| !why.is_empty()),
                "a declined launch without its reason: {r}"
            ),
            Some("skipped") => {}
            _ => panic!("an outcome that is none of replayed, declined, skipped: {r}"),
        }
    }
    let expected: usize = CONTEXTS_UNLOAD_LAUNCHES.iter().map(|(_, n)| n).sum();
    assert_eq!(recs.len(), expected, "one record per launch: {summary}");
    for (kernel, launches) in CONTEXTS_UNLOAD_LAUNCHES {
        let n = recs
            .iter()
            .filter(|r| r["kernel"].as_str().is_some_and(|k| k.contains(kernel)))
            .count();
        assert_eq!(n, launches, "records of {kernel}: {summary}");
    }
    assert!(
        recs.iter().any(|r| r["outcome"] == "replayed"),
        "nothing was replayed, so nothing was tested: {summary}"
    );
}

fn python() -> PathBuf {
    PathBuf::from(std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into()))
}

/// One run of the Python fixture `script` (it writes its JSON to `--out`), saved as `name`;
/// its JSON.
fn python_fixture(
    script: &str,
    name: &str,
    env: &[(&str, &str)],
    unset: &[&str],
    deadline: Duration,
) -> Value {
    let out = out_dir().join(format!("{name}.json"));
    let script = fixtures().join(script);
    let r = run(
        &python(),
        &[script.to_str().unwrap(), "--out", out.to_str().unwrap()],
        env,
        unset,
        deadline,
    );
    save(name, &r);
    r.assert_success(name);
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

fn gpt2(name: &str, env: &[(&str, &str)], unset: &[&str]) -> Value {
    python_fixture("gpt2_step.py", name, env, unset, Duration::from_secs(900))
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU with PyTorch and transformers: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_gpt2_training_step_is_bit_identical_under_replay() {
    require_gpu();
    let none: &[(&str, &str)] = &[];
    let unset = ["CUDA_INJECTION64_PATH", "LD_PRELOAD"];
    let plain = gpt2("gpt2.plain", none, &unset);
    let again = gpt2("gpt2.plain2", none, &unset);
    assert_eq!(
        plain["params_sha256"], again["params_sha256"],
        "the step is not deterministic without the tool: no comparison is possible"
    );
    let rec = records_path("gpt2.records");
    let tool = cuda_tool().to_str().unwrap().to_string();
    // 3 passes per launch, or ROCPROF_REPLAY_GPT2_PASSES (a full counter set's worth: 40).
    let passes = std::env::var("ROCPROF_REPLAY_GPT2_PASSES").unwrap_or_else(|_| "3".into());
    let mut env = tool_env(rec.to_str().unwrap(), &passes);
    env.push(("CUDA_INJECTION64_PATH", &tool));
    env.push(("ROCPROF_REPLAY_LOG", "error"));
    let replayed = gpt2("gpt2.replayed", &env, &["LD_PRELOAD"]);
    let recs = records(&rec);
    let summary = json!({
        "plain_step_s": plain["step_s"],
        "replayed_step_s": replayed["step_s"],
        "plain_total_s": plain["total_s"],
        "replayed_total_s": replayed["total_s"],
        "attn": replayed["attn"],
        "loss": replayed["loss"],
        "params_sha256": replayed["params_sha256"],
        "param_tensors": replayed["param_tensors"],
        "records": recs.len(),
        "replayed": recs.iter().filter(|r| r["outcome"] == "replayed").count(),
        "declined": recs.iter().filter(|r| r["outcome"] == "declined").count(),
        "failed": recs.iter().filter(|r| r["outcome"] == "failed").count(),
        "snapshot_bytes": recs.iter().map(|r| r["snapshot_bytes"].as_u64().unwrap()).sum::<u64>(),
        "restored_bytes": recs.iter().map(|r| r["restored_bytes"].as_u64().unwrap()).sum::<u64>(),
    });
    std::fs::write(
        out_dir().join("gpt2.summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .unwrap();
    assert_eq!(plain["attn"], replayed["attn"]);
    assert_eq!(
        plain["loss_hex"], replayed["loss_hex"],
        "loss differs: {summary}"
    );
    let (p, r) = (
        plain["params"].as_object().unwrap(),
        replayed["params"].as_object().unwrap(),
    );
    let differ: Vec<&String> = p.keys().filter(|k| p[*k] != r[*k]).collect();
    assert!(differ.is_empty(), "parameters differ: {differ:?}");
    assert_eq!(plain["params_sha256"], replayed["params_sha256"]);
    assert!(summary["failed"] == 0, "{summary}");
    assert!(
        summary["replayed"].as_u64().unwrap() > 1000,
        "most kernels must be replayed: {summary}"
    );
}

/// One run of `libs_step.py` (cuBLAS, cuSOLVER, cuFFT, cuDNN, CUB, RNG), its JSON.
/// Runs `script` (a fixture writing `{"ops": {name: sha256}, ...}`) twice without the tool and
/// once under it (3 passes), and checks that every operation deterministic without the tool
/// hashes the same under it, that at least three quarters of them are deterministic, that no
/// record says `failed`, and that at least `min_replayed` launches were replayed. `name` prefixes
/// the outputs. Returns the records' outcome counts.
fn same_ops_under_replay(
    script: &str,
    name: &str,
    min_replayed: usize,
) -> std::collections::BTreeMap<String, usize> {
    let deadline = Duration::from_secs(600);
    let none: &[(&str, &str)] = &[];
    let unset = ["CUDA_INJECTION64_PATH", "LD_PRELOAD"];
    let plain = python_fixture(script, &format!("{name}.plain"), none, &unset, deadline);
    let again = python_fixture(script, &format!("{name}.plain2"), none, &unset, deadline);
    let rec = records_path(&format!("{name}.records"));
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "3");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    env.push(("ROCPROF_REPLAY_LOG", "error"));
    let replayed = python_fixture(
        script,
        &format!("{name}.replayed"),
        &env,
        &["LD_PRELOAD"],
        deadline,
    );
    let (p, p2, r) = (
        plain["ops"].as_object().unwrap(),
        again["ops"].as_object().unwrap(),
        replayed["ops"].as_object().unwrap(),
    );
    assert_eq!(p.len(), r.len(), "the replayed run has other operations");
    // Operations that differ between two plain runs are not deterministic: any result of
    // theirs is one execution's, so they are not compared (and listed).
    let unstable: Vec<&String> = p.keys().filter(|k| p[*k] != p2[*k]).collect();
    let compared: Vec<&String> = p.keys().filter(|k| p[*k] == p2[*k]).collect();
    let differ: Vec<&&String> = compared.iter().filter(|k| p[**k] != r[**k]).collect();
    let recs = records(&rec);
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    for x in &recs {
        let key = format!(
            "{} {}",
            x["outcome"].as_str().unwrap_or("?"),
            x["reason"].as_str().unwrap_or("")
        );
        *reasons.entry(key.trim().to_string()).or_default() += 1;
    }
    println!(
        "{name}: {} operations, {} compared, not deterministic without the tool: {unstable:?}; \
         plain {:.2} s, replayed {:.2} s (parts plain {}, replayed {}); {} records: {reasons:?}",
        p.len(),
        compared.len(),
        plain["total_s"].as_f64().unwrap_or(0.0),
        replayed["total_s"].as_f64().unwrap_or(0.0),
        plain["part_s"],
        replayed["part_s"],
        recs.len()
    );
    assert!(
        differ.is_empty(),
        "operations compute something else under replay: {differ:?}"
    );
    assert!(
        compared.len() * 4 >= p.len() * 3,
        "too few deterministic operations to compare: {unstable:?}"
    );
    assert!(
        !recs.iter().any(|x| x["outcome"] == "failed"),
        "failed records: {reasons:?}"
    );
    let replayed_count = recs.iter().filter(|x| x["outcome"] == "replayed").count();
    assert!(
        replayed_count >= min_replayed,
        "most kernels must be replayed ({replayed_count} of at least {min_replayed}): {reasons:?}"
    );
    reasons
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU with PyTorch: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn library_kernels_nobody_here_wrote_compute_the_same_under_replay() {
    require_gpu();
    same_ops_under_replay("libs_step.py", "libs", 50);
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU with PyTorch: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn model_workloads_nobody_here_wrote_compute_the_same_under_replay() {
    require_gpu();
    // An LSTM, a bf16 Transformer with fused AdamW, side streams, a data loader's page-locked
    // copies, a CUDA graph, a sparse embedding, convolutions, single-rank NCCL.
    let reasons = same_ops_under_replay("models_step.py", "models", 100);
    // Launches into a capturing stream only add graph nodes: declined, never replayed.
    assert!(
        reasons.keys().any(|k| k.contains("stream_capture")),
        "the CUDA graph's captured launches must be declined as stream_capture: {reasons:?}"
    );
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn a_kernel_writing_one_percent_of_a_large_buffer_gets_write_set_restores() {
    require_gpu();
    let exe = cuda_app("write_set", false);
    let rec = records_path("write_set");
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "5");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    let r = run(&exe, &[], &env, &["LD_PRELOAD"], DEADLINE);
    save("write_set", &r);
    r.assert_success("write_set under the tool");
    assert!(
        r.stdout().contains("RESULT OK"),
        "{}\n{}",
        r.stdout(),
        tail(&r.stderr(), 4000)
    );
    let expected: u64 = r
        .value("written_bytes_per_launch")
        .and_then(|v| v.trim().parse().ok())
        .expect("the app prints its write set");
    let recs: Vec<Value> = records(&rec)
        .into_iter()
        .filter(|r| {
            r["kernel"]
                .as_str()
                .is_some_and(|k| k.contains("touch_pages"))
        })
        .collect();
    let summary: Vec<String> = recs
        .iter()
        .map(|r| {
            format!(
                "{} passes={} mode={} snapshot={} written={} restored={} verified={} diff_ns={}",
                r["outcome"],
                r["passes"],
                r["restore_mode"],
                r["snapshot_bytes"],
                r["written_bytes"],
                r["restored_bytes"],
                r["verified_bytes"],
                r["diff_ns"]
            )
        })
        .collect();
    std::fs::write(
        out_dir().join("write_set.summary"),
        format!(
            "expected written_bytes {expected}\n{}\n",
            summary.join("\n")
        ),
    )
    .unwrap();
    assert_eq!(recs.len(), 2, "one record per launch: {summary:?}");
    for rec in &recs {
        assert_eq!(rec["outcome"], "replayed", "{rec}");
        assert_eq!(rec["passes"], 5, "{rec}");
        assert_eq!(rec["restore_mode"], "write_set", "{rec}");
        let snap = rec["snapshot_bytes"].as_u64().unwrap();
        assert!(snap >= 256 << 20, "the whole buffer is snapshotted: {rec}");
        let written = rec["written_bytes"].as_u64().unwrap();
        // Whole pages of the buffer; nothing else of the context changes (a granule of some
        // other allocation at most).
        assert!(
            (expected..=expected + (64 << 10)).contains(&written),
            "written_bytes {written}, expected {expected}: {rec}"
        );
        let restored = rec["restored_bytes"].as_u64().unwrap();
        // The write set before passes 2..5 and pass 1's result written back: 5 times W
        // (pages 400 KiB apart are never merged), far below 4 full restores.
        assert!(
            restored >= 5 * expected && restored <= 5 * written + (1 << 20),
            "restored_bytes {restored}: {rec}"
        );
        assert!(restored < snap, "{rec}");
    }
}

#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, the CUDA toolkit and CUPTI: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn kernels_writing_through_device_pointers_keep_one_execution_under_the_arguments_footprint() {
    require_gpu();
    let exe = cuda_app("indirect_write", false);
    let rec = records_path("indirect_write");
    let tool = cuda_tool().to_str().unwrap().to_string();
    let mut env = tool_env(rec.to_str().unwrap(), "3");
    env.push(("CUDA_INJECTION64_PATH", &tool));
    let r = run(&exe, &[], &env, &["LD_PRELOAD"], DEADLINE);
    save("indirect_write", &r);
    r.assert_success("indirect_write under the tool");
    assert!(
        r.stdout().contains("RESULT OK"),
        "{}\n{}",
        r.stdout(),
        tail(&r.stderr(), 4000)
    );
    let recs = records(&rec);
    let of = |name: &str| -> Vec<&Value> {
        recs.iter()
            .filter(|r| r["kernel"].as_str().is_some_and(|k| k.contains(name)))
            .collect()
    };
    let through = of("bump_through");
    assert_eq!(through.len(), 2, "{recs:?}");
    // The first launch wrote `data`, which its arguments do not name: it ran once.
    assert_eq!(through[0]["outcome"], "declined", "{}", through[0]);
    assert_eq!(
        through[0]["reason"], "wrote_outside_footprint",
        "{}",
        through[0]
    );
    assert_eq!(through[0]["footprint"], "arguments", "{}", through[0]);
    // The kernel is remembered: its next launch captures everything and is replayed.
    assert_eq!(through[1]["outcome"], "replayed", "{}", through[1]);
    assert_eq!(through[1]["footprint"], "all", "{}", through[1]);
    let table = of("bump_table");
    assert_eq!(table.len(), 1, "{recs:?}");
    let t = table[0];
    assert_eq!(t["outcome"], "replayed", "{t}");
    assert_eq!(t["footprint"], "arguments", "{t}");
    // The four pieces the table names (plus module variables, if any), not `data`/`other`.
    let snap = t["snapshot_bytes"].as_u64().unwrap();
    assert!((4 << 20..(4 << 20) + (1 << 20)).contains(&snap), "{t}");
    assert!(
        t["watched_bytes"].as_u64().unwrap() >= (256 + 64) << 20,
        "{t}"
    );
    std::fs::write(
        out_dir().join("indirect_write.summary"),
        recs.iter()
            .map(|r| {
                format!(
                    "{} {} {} footprint={} snapshot={} watched={} fingerprint_ns={} passes={}",
                    r["kernel"],
                    r["outcome"],
                    r["reason"],
                    r["footprint"],
                    r["snapshot_bytes"],
                    r["watched_bytes"],
                    r["fingerprint_ns"],
                    r["passes"]
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
}
