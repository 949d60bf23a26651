//! Kernel replay end to end: the application (`replay_probe`, C against the real headers), the
//! runtime (hsa-emu) and a replay tool (a `cdylib` built on rocprof-replay) as three separate
//! binaries, exactly as in production.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rocprof_replay_e2e::{Run, e2e_dir, replay_probe, run_on_emu, tool_lib};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);

/// A fresh records file for one test.
fn records_path(test: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = e2e_dir().join("records");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!(
        "{test}-{}-{}.jsonl",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

fn read_records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad record {l:?}: {e}")))
        .collect()
}

/// Lines the plan tool printed (`e2e_plan_tool: {json}`).
fn plan_tool_lines(run: &Run) -> Vec<Value> {
    run.stderr()
        .lines()
        .filter_map(|l| l.strip_prefix("e2e_plan_tool: "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect()
}

/// Runs replay_probe MODE with `tool` preloaded and `env`; returns the run and the records.
/// `None` when the C samples cannot be built (no HSA headers: reported by the harness).
fn probe(mode: &str, tool: &str, env: &[(&str, &str)]) -> Option<(Run, Vec<Value>)> {
    let (exe, kernels) = replay_probe()?;
    let records = records_path(mode);
    let lib = tool_lib(tool);
    let mut all: Vec<(&str, &str)> = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
    ];
    all.extend_from_slice(env);
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap(), mode], &all, DEADLINE);
    run.assert_success();
    assert!(
        run.stdout().contains("RESULT replay_probe OK"),
        "{}",
        run.stdout()
    );
    let recs = read_records(&records);
    Some((run, recs))
}

fn kernel_records<'a>(recs: &'a [Value], kernel: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["kernel"] == kernel).collect()
}

#[test]
fn five_passes_see_identical_inputs_and_the_app_sees_one_execution() {
    let Some((run, recs)) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:5")]) else {
        return;
    };
    // The kernel wrote one checksum per pass into memory that is not restored: 5 passes ran,
    // each saw identical inputs; the data shows exactly one scramble (checked by the app).
    assert!(
        run.stdout()
            .contains("passes_recorded=5 identical_inputs=1 one_execution=1"),
        "{}",
        run.stdout()
    );
    let r = kernel_records(&recs, "checksum_then_scribble");
    assert_eq!(r.len(), 1, "one record per dispatch: {recs:?}");
    assert_eq!(r[0]["outcome"], "replayed");
    assert_eq!(r[0]["passes"], 5);
    assert_eq!(r[0]["pass_ns"].as_array().unwrap().len(), 5);
    assert!(
        r[0]["pass_ns"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.as_u64().is_some_and(|t| t > 0)),
        "{r:?}"
    );
    // 4 KiB of data plus the 4-byte module counter.
    assert_eq!(r[0]["snapshot_bytes"], 4096 + 4);
    assert_eq!(r[0]["restored_bytes"], 4 * (4096 + 4));
}

#[test]
fn module_counter_and_memory_show_one_execution_per_dispatch() {
    let Some((_, recs)) = probe("counter", "e2e_plan_tool", &[("E2E_PLAN", "exactly:4")]) else {
        return;
    };
    let r = kernel_records(&recs, "inc_in_place");
    assert_eq!(r.len(), 2);
    assert!(
        r.iter()
            .all(|r| r["outcome"] == "replayed" && r["passes"] == 4),
        "{r:?}"
    );
    assert_ne!(
        r[0]["dispatch_id"], r[1]["dispatch_id"],
        "each dispatch has its own id"
    );
}

#[test]
fn pass_count_table_row_no_decision() {
    let Some((_, recs)) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "skip")]) else {
        return;
    };
    let r = kernel_records(&recs, "checksum_then_scribble");
    assert_eq!(
        (r[0]["outcome"].as_str(), r[0]["passes"].as_u64()),
        (Some("skipped"), Some(1))
    );
    assert_eq!(r[0]["snapshot_bytes"], 0, "not replayed means no snapshot");
}

#[test]
fn pass_count_table_row_one_pass() {
    let Some((run, recs)) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:1")]) else {
        return;
    };
    assert!(
        run.stdout().contains("passes_recorded=1"),
        "{}",
        run.stdout()
    );
    let r = kernel_records(&recs, "checksum_then_scribble");
    assert_eq!(
        (r[0]["outcome"].as_str(), r[0]["snapshot_bytes"].as_u64()),
        (Some("skipped"), Some(0))
    );
}

#[test]
fn pass_count_table_row_n_with_continue_stops_early() {
    let env = [("E2E_PLAN", "upto:8"), ("E2E_STOP_AFTER", "3")];
    let Some((run, recs)) = probe("checksum", "e2e_plan_tool", &env) else {
        return;
    };
    assert!(
        run.stdout()
            .contains("passes_recorded=3 identical_inputs=1"),
        "{}",
        run.stdout()
    );
    assert_eq!(
        kernel_records(&recs, "checksum_then_scribble")[0]["passes"],
        3
    );
}

#[test]
fn pass_count_table_row_open_ended_with_continue() {
    let env = [("E2E_PLAN", "until"), ("E2E_STOP_AFTER", "7")];
    let Some((run, _)) = probe("checksum", "e2e_plan_tool", &env) else {
        return;
    };
    assert!(
        run.stdout()
            .contains("passes_recorded=7 identical_inputs=1"),
        "{}",
        run.stdout()
    );
}

#[test]
fn pass_count_table_row_open_ended_without_continue_is_rejected() {
    let Some((run, recs)) = probe("checksum", "e2e_open_ended_tool", &[]) else {
        return;
    };
    assert!(
        run.stdout().contains("passes_recorded=1"),
        "{}",
        run.stdout()
    );
    let r = kernel_records(&recs, "checksum_then_scribble");
    assert_eq!(r[0]["outcome"], "declined");
    assert_eq!(r[0]["reason"], "open_ended_without_continue");
    assert!(
        run.stderr()
            .contains("open-ended replay needs a continue decision"),
        "{}",
        run.stderr()
    );
}

#[test]
fn per_dispatch_and_per_pass_state_follow_the_reference_rules() {
    let Some((run, _)) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:3")]) else {
        return;
    };
    let lines = plan_tool_lines(&run);
    let seen: Vec<&str> = lines[0]["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    // Per-dispatch state accumulates over every pass; per-pass state written at pass start is
    // seen at that pass's end and starts fresh (None) at the next pass (asserted in the tool).
    assert_eq!(
        seen,
        [
            "start 0",
            "end 0 scope=Some(0)",
            "start 1",
            "end 1 scope=Some(1)",
            "start 2",
            "end 2 scope=Some(2)"
        ]
    );
}
