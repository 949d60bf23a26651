//! Hardware counters through replay on hsa-emu: the example tool `counters_tool` (SQ_WAVES,
//! SQ_ITEMS, SQ_WAVES_EQ_64, GRBM_COUNT: two counter passes on hsa-emu's limits) on the C
//! samples, with the exact values a gfx90a reports for a known grid.

use std::time::Duration;

use rocprof_replay_e2e::{c_samples, read_records, records_path, run_on_emu, tool_lib};

const DEADLINE: Duration = Duration::from_secs(60);

/// Runs `app` under the counters tool; returns (stdout, stderr, records).
fn run(app: &str, test: &str, env: &[(&str, &str)]) -> (String, String, Vec<serde_json::Value>) {
    let dir = c_samples();
    let kernels = dir.join("libsample_kernels.so");
    let records = records_path(test);
    let tool = tool_lib("counters_tool");
    let mut all = vec![
        ("LD_PRELOAD", tool.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
    ];
    all.extend_from_slice(env);
    let run = run_on_emu(&dir.join(app), &[kernels.to_str().unwrap()], &all, DEADLINE);
    run.assert_success();
    let out = run.stdout();
    assert!(out.contains(&format!("RESULT {app} OK")), "{out}");
    (out, run.stderr(), read_records(&records))
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_known_grid_gets_the_exact_waves_and_items_from_two_counter_passes() {
    // 64 work-groups of 256 work-items: 256 wave64 waves, 16384 items.
    let (out, err, recs) = run(
        "vector_add",
        "counters-vector-add",
        &[("SAMPLE_N", "16384")],
    );
    assert!(
        err.contains("counters: GPU 0: gfx90a: 4 metrics in 2 passes"),
        "{err}"
    );
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!(r["outcome"], "replayed", "{r}");
    assert_eq!(
        r["passes"], 3,
        "the application's pass and two counter passes: {r}"
    );
    assert_eq!(r["inputs_restored"], true, "{r}");
    let m = &r["metrics"];
    assert_eq!(
        m["SQ_WAVES"],
        serde_json::json!({"value": 256, "pass": 1}),
        "{r}"
    );
    assert_eq!(
        m["SQ_ITEMS"],
        serde_json::json!({"value": 16384, "pass": 1}),
        "{r}"
    );
    assert_eq!(
        m["SQ_WAVES_EQ_64"],
        serde_json::json!({"value": 256, "pass": 2}),
        "{r}"
    );
    assert_eq!(m["GRBM_COUNT"]["pass"], 1, "{r}");
    assert!(m["GRBM_COUNT"]["value"].as_u64().unwrap() > 0, "{r}");
    assert!(r["metrics_reason"].is_null(), "{r}");
    assert!(
        out.contains("SQ_WAVES=256 (pass 1) SQ_ITEMS=16384 (pass 1) SQ_WAVES_EQ_64=256 (pass 2)"),
        "{out}"
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn the_application_sees_one_execution_of_a_dispatch_measured_on_three_passes() {
    // The kernel bumps a module-scope counter once per execution.
    let (out, _, recs) = run("inplace_counter", "counters-inplace", &[]);
    assert!(out.contains("counter=1"), "{out}");
    assert_eq!(recs[0]["outcome"], "replayed", "{recs:?}");
    assert_eq!(recs[0]["passes"], 3, "{recs:?}");
    assert!(recs[0]["metrics"]["SQ_WAVES"]["value"].as_u64().unwrap() > 0);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_unknown_metric_is_reported_at_load_with_the_closest_names_and_nothing_is_collected() {
    let (_, err, recs) = run(
        "vector_add",
        "counters-unknown",
        &[("ROCPROF_REPLAY_METRICS", "SQ_WAVE,GRBM_COUNT")],
    );
    assert!(
        err.contains("unknown metric `SQ_WAVE` on gfx90a; did you mean SQ_WAVES"),
        "{err}"
    );
    // No set for the GPU: the dispatch runs once, the ordinary way.
    assert_eq!(recs[0]["outcome"], "skipped", "{recs:?}");
    assert!(recs[0]["metrics"].is_null());
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_counter_set_up_that_fails_leaves_the_application_correct_and_says_why() {
    let (out, _, recs) = run(
        "inplace_counter",
        "counters-setup-fails",
        &[("HSA_EMU_FAIL_PROFILE_START", "1")],
    );
    // One ordinary execution, no values, and the library's reason.
    assert!(out.contains("counter=1"), "{out}");
    let r = &recs[0];
    assert_eq!(r["outcome"], "skipped", "{r}");
    assert_eq!(r["passes"], 1, "{r}");
    assert!(r["metrics"].is_null(), "{r}");
    let why = r["metrics_reason"].as_str().unwrap();
    assert!(
        why.starts_with("counters_unavailable: aqlprofile refused the pass's counters")
            && why.contains("HSA_EMU_FAIL_PROFILE_START"),
        "{why}"
    );
    assert!(out.contains("no values (counters_unavailable"), "{out}");
}
