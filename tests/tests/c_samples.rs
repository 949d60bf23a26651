//! The C sample applications (compiled against Debian's real HSA headers) run unchanged on
//! hsa-emu, each as its own process, and check their own results.

use std::time::Duration;

use rocprof_replay_e2e::{c_samples, run_on_emu};

const DEADLINE: Duration = Duration::from_secs(60);

fn run_sample(app: &str, env: &[(&str, &str)]) -> String {
    let dir = c_samples();
    let kernels = dir.join("libsample_kernels.so");
    let run = run_on_emu(&dir.join(app), &[kernels.to_str().unwrap()], env, DEADLINE);
    run.assert_success();
    let out = run.stdout();
    assert!(
        out.contains(&format!("RESULT {app} OK")),
        "{app} did not report OK:\n{out}"
    );
    out
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn vector_add_runs_on_the_emulator() {
    run_sample("vector_add", &[]);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn vector_add_with_a_partial_last_work_group() {
    run_sample("vector_add", &[("SAMPLE_N", "1000")]);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn in_place_kernel_bumps_the_module_counter_once_per_dispatch() {
    let out = run_sample("inplace_counter", &[]);
    assert!(out.contains("counter=1"), "{out}");
    let out = run_sample("inplace_counter", &[("SAMPLE_DISPATCHES", "3")]);
    assert!(out.contains("counter=3"), "{out}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn several_threads_on_several_queues_and_agents() {
    run_sample(
        "multi_queue",
        &[("HSA_EMU_GPUS", "2"), ("SAMPLE_THREADS", "4")],
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn async_copies_honour_dependency_signals() {
    run_sample("async_copy", &[]);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn aqlprofile_counts_the_waves_a_gfx90a_launches_and_refuses_a_set_over_the_limit() {
    // 64 work-groups of 256 work-items: 4 waves each (wave64), as on a real gfx90a.
    let out = run_sample("aqlprofile_counters", &[]);
    assert!(out.contains("SQ_WAVES=256 (want 256)"), "{out}");
    assert!(out.contains("SQ limit=2"), "{out}");
    assert!(
        out.contains("status 0x1000: Event is out of block counter registers number limit"),
        "{out}"
    );
    let out = run_sample("aqlprofile_counters", &[("SAMPLE_GROUPS", "3")]);
    assert!(out.contains("SQ_WAVES=12 (want 12)"), "{out}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_application_counting_with_aqlprofile_sees_one_execution_under_a_replay_tool() {
    // Its own counter window would count every pass (768 waves under 3 passes): the engine
    // sees its vendor-specific packets and stops replaying that GPU's dispatches.
    let records = rocprof_replay_e2e::records_path("aqlprofile-under-replay");
    let tool = rocprof_replay_e2e::tool_lib("e2e_plan_tool");
    let out = run_sample(
        "aqlprofile_counters",
        &[
            ("LD_PRELOAD", tool.to_str().unwrap()),
            ("E2E_PLAN", "exactly:3"),
            ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ],
    );
    assert!(out.contains("SQ_WAVES=256 (want 256)"), "{out}");
    let recs = rocprof_replay_e2e::read_records(&records);
    assert!(!recs.is_empty(), "no record");
    assert!(
        recs.iter()
            .all(|r| r["outcome"] == "declined" && r["reason"] == "vendor_packets"),
        "{recs:?}"
    );
}
