//! Kernel replay end to end: the application (`replay_probe`, C against the real headers), the
//! runtime (hsa-emu) and a replay tool (a `cdylib` built on rocprof-replay) as three separate
//! binaries, exactly as in production.

use std::time::Duration;

use rocprof_replay_e2e::{Run, read_records, records_path, replay_probe, run_on_emu, tool_lib};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);

/// Lines the plan tool printed (`e2e_plan_tool: {json}`).
fn plan_tool_lines(run: &Run) -> Vec<Value> {
    run.stderr()
        .lines()
        .filter_map(|l| l.strip_prefix("e2e_plan_tool: "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect()
}

/// Runs replay_probe MODE with `tool` preloaded and `env`; returns the run and the records.
fn probe(mode: &str, tool: &str, env: &[(&str, &str)]) -> (Run, Vec<Value>) {
    let (exe, kernels) = replay_probe();
    let records = records_path(mode);
    let lib = tool_lib(tool);
    let mut all: Vec<(&str, &str)> = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
    ];
    if mode == "checksum" {
        // checksum_then_scribble records every pass in fine-grained memory, which its
        // arguments name: replayed only with the explicit opt-in (writes there repeat).
        all.push(("ROCPROF_REPLAY_HOST_MEMORY", "repeat"));
    }
    all.extend_from_slice(env);
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap(), mode], &all, DEADLINE);
    run.assert_success();
    assert!(
        run.stdout().contains("RESULT replay_probe OK"),
        "{}",
        run.stdout()
    );
    let recs = read_records(&records);
    (run, recs)
}

/// The calls column of a `ROCPROF_REPLAY_PHASES` report's row for `phase`.
fn phase_calls(text: &str, phase: &str) -> u64 {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(phase))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {phase} row in\n{text}"))
}

fn kernel_records<'a>(recs: &'a [Value], kernel: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["kernel"] == kernel).collect()
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn five_passes_see_identical_inputs_and_the_app_sees_one_execution() {
    let (run, recs) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:5")]);
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
    assert_eq!(r[0]["snapshot_regions"], 2);
    assert_eq!(r[0]["restored_bytes"], 4 * (4096 + 4));
    let window = r[0]["window_ns"].as_u64().unwrap();
    let parts = ["snapshot_ns", "restore_ns"].map(|k| r[0][k].as_u64().unwrap());
    assert!(window >= parts.iter().sum::<u64>(), "{r:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn rocprof_replay_phases_writes_where_the_windows_time_went_at_exit() {
    let path = records_path("phases").with_extension("phases.txt");
    let _ = std::fs::remove_file(&path);
    let (_, recs) = probe(
        "checksum",
        "e2e_plan_tool",
        &[
            ("E2E_PLAN", "exactly:3"),
            ("ROCPROF_REPLAY_PHASES", path.to_str().unwrap()),
        ],
    );
    let windows = recs.iter().filter(|r| r["outcome"] == "replayed").count();
    let text = std::fs::read_to_string(&path).expect("the phases report");
    let calls = |phase: &str| phase_calls(&text, phase);
    assert!(windows >= 1, "{recs:?}");
    assert_eq!(calls("window") as usize, windows, "{text}");
    assert_eq!(calls("capture") as usize, windows, "{text}");
    assert_eq!(calls("pass") as usize, 3 * windows, "{text}");
    assert_eq!(calls("restore") as usize, 2 * windows, "{text}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_kernel_writing_host_memory_stops_after_its_first_pass_unless_repeating_is_asked_for() {
    // By default: the kernel's log is host memory, watched, never restored; the first pass
    // writes it, so replay stops after that pass (its result is the application's).
    let (run, recs) = probe(
        "checksum",
        "e2e_plan_tool",
        &[
            ("E2E_PLAN", "exactly:5"),
            ("ROCPROF_REPLAY_HOST_MEMORY", "decline"),
        ],
    );
    assert!(
        run.stdout().contains("passes_recorded=1 "),
        "{}",
        run.stdout()
    );
    let r = &kernel_records(&recs, "checksum_then_scribble")[0];
    assert_eq!(r["outcome"], "declined", "{r}");
    assert_eq!(r["reason"], "host_memory_written", "{r}");
    assert_eq!(r["passes"], 1, "{r}");
    assert!(r["host_memory"].is_null(), "{r}");
    // Opted in: replayed, five passes recorded in the fine-grained log, and the record says so.
    let (run, recs) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:5")]);
    assert!(
        run.stdout().contains("passes_recorded=5 "),
        "{}",
        run.stdout()
    );
    let r = &kernel_records(&recs, "checksum_then_scribble")[0];
    assert_eq!(r["outcome"], "replayed", "{r}");
    assert_eq!(r["host_memory"], "repeated", "{r}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn module_counter_and_memory_show_one_execution_per_dispatch() {
    let (_, recs) = probe("counter", "e2e_plan_tool", &[("E2E_PLAN", "exactly:4")]);
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
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn pass_count_table_row_no_decision() {
    let (_, recs) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "skip")]);
    let r = kernel_records(&recs, "checksum_then_scribble");
    assert_eq!(
        (r[0]["outcome"].as_str(), r[0]["passes"].as_u64()),
        (Some("skipped"), Some(1))
    );
    assert_eq!(r[0]["snapshot_bytes"], 0, "not replayed means no snapshot");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn pass_count_table_row_one_pass() {
    let (run, recs) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:1")]);
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
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn pass_count_table_row_n_with_continue_stops_early() {
    let env = [("E2E_PLAN", "upto:8"), ("E2E_STOP_AFTER", "3")];
    let (run, recs) = probe("checksum", "e2e_plan_tool", &env);
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
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn pass_count_table_row_open_ended_with_continue() {
    let env = [("E2E_PLAN", "until"), ("E2E_STOP_AFTER", "7")];
    let (run, _) = probe("checksum", "e2e_plan_tool", &env);
    assert!(
        run.stdout()
            .contains("passes_recorded=7 identical_inputs=1"),
        "{}",
        run.stdout()
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn per_dispatch_and_per_pass_state_follow_the_reference_rules() {
    let (run, _) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:3")]);
    let lines = plan_tool_lines(&run);
    let id = lines[0]["dispatch_id"].as_u64().unwrap();
    let seen: Vec<&str> = lines[0]["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    // Per-dispatch state accumulates over every pass; per-pass state written at pass start is
    // seen at that pass's end and starts fresh (None) at the next pass (asserted in the tool).
    // Every pass sees the same dispatch id (the record's).
    let expected: Vec<String> = (0..3)
        .flat_map(|i| {
            [
                format!("start {i} id={id}"),
                format!("end {i} scope=Some({i})"),
            ]
        })
        .collect();
    assert_eq!(seen, expected);
}

fn single(recs: &[Value], kernel: &str) -> Value {
    let r = kernel_records(recs, kernel);
    assert_eq!(r.len(), 1, "{recs:?}");
    r[0].clone()
}

/// A decline leaves the application with exactly one correct execution.
fn assert_declined(env: &[(&str, &str)], reason: &str) {
    let mut all = vec![("E2E_PLAN", "exactly:5")];
    all.extend_from_slice(env);
    let (run, recs) = probe("checksum", "e2e_plan_tool", &all);
    assert!(
        run.stdout()
            .contains("passes_recorded=1 identical_inputs=1 one_execution=1"),
        "{}",
        run.stdout()
    );
    let r = single(&recs, "checksum_then_scribble");
    assert_eq!(
        (r["outcome"].as_str(), r["reason"].as_str()),
        (Some("declined"), Some(reason)),
        "{r}"
    );
    assert_eq!(r["passes"], 1);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn failing_snapshot_allocation_declines_with_snapshot_alloc_failed() {
    // replay_probe makes exactly 4 pool allocations before its dispatch; from the 5th on every
    // allocation fails: the snapshot's device (VRAM) chunk and its pinned-host fallback.
    assert_declined(&[("HSA_EMU_FAIL_ALLOC_FROM", "5")], "snapshot_alloc_failed");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn failing_snapshot_copy_declines_with_copy_failed() {
    // replay_probe makes exactly one hsa_memory_copy before its dispatch.
    assert_declined(&[("HSA_EMU_FAIL_COPY_NTH", "2")], "copy_failed");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_stuck_drain_declines_with_drain_timeout() {
    assert_declined(
        &[
            ("HSA_EMU_HOLD_BARRIERS_MS", "1500"),
            ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "200"),
        ],
        "drain_timeout",
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn failing_symbol_iteration_declines_with_symbols_unavailable() {
    // Kernel names come from symbol iteration too, so the record's kernel is unknown.
    let env = [
        ("E2E_PLAN", "exactly:5"),
        ("HSA_EMU_FAIL_SYMBOL_ITERATION", "1"),
    ];
    let (run, recs) = probe("checksum", "e2e_plan_tool", &env);
    assert!(
        run.stdout()
            .contains("passes_recorded=1 identical_inputs=1 one_execution=1"),
        "{}",
        run.stdout()
    );
    let r = single(&recs, "<unknown>");
    assert_eq!(
        (r["outcome"].as_str(), r["reason"].as_str()),
        (Some("declined"), Some("symbols_unavailable"))
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_snapshot_over_budget_declines_with_over_budget() {
    assert_declined(&[("ROCPROF_REPLAY_BUDGET_MB", "0")], "over_budget");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_panicking_policy_declines_with_policy_panicked() {
    for at in [
        "pass_count",
        "on_pass:0",
        "on_pass:2",
        "on_pass_end:1",
        "should_continue",
    ] {
        let plan = if at == "should_continue" {
            "upto:5"
        } else {
            "exactly:5"
        };
        let env = [("E2E_PLAN", plan), ("E2E_PANIC", at)];
        let (run, recs) = probe("checksum", "e2e_plan_tool", &env);
        assert!(
            run.stdout().contains("identical_inputs=1 one_execution=1"),
            "{at}: {}",
            run.stdout()
        );
        let r = single(&recs, "checksum_then_scribble");
        assert_eq!(
            (r["outcome"].as_str(), r["reason"].as_str()),
            (Some("declined"), Some("policy_panicked")),
            "{at}: {r}"
        );
        assert!(
            run.stderr().contains("panicked"),
            "{at}: the panic is reported: {}",
            run.stderr()
        );
    }
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_opted_out_kernel_running_concurrently_on_another_queue_is_not_corrupted() {
    // inc_in_place is replayed (5 passes, snapshot + restores of the agent's memory) while
    // vector_add runs 20 times on a second queue of the same agent and checks every result.
    let env = [("E2E_PLAN", "exactly:5"), ("E2E_KERNEL", "inc_in_place")];
    let (_, recs) = probe("concurrent", "e2e_plan_tool", &env);
    let inc = kernel_records(&recs, "inc_in_place");
    assert_eq!(inc.len(), 20);
    assert!(
        inc.iter()
            .all(|r| r["outcome"] == "replayed" && r["passes"] == 5)
    );
    let vadd = kernel_records(&recs, "vector_add");
    assert_eq!(vadd.len(), 20);
    assert!(vadd.iter().all(|r| r["outcome"] == "skipped"));
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_region_freed_during_the_window_is_skipped_not_written() {
    // Every allocation captured: with the arguments footprint the freed buffer (which the
    // kernel's arguments do not name) is only watched, and checked once, before the free.
    let env = [
        ("ROCPROF_REPLAY_FOOTPRINT", "all"),
        ("E2E_PLAN", "exactly:5"),
        ("E2E_KERNEL", "sleep_kernel"),
        ("SAMPLE_SLEEP_MS", "40"),
    ];
    let (_, recs) = probe("free", "e2e_plan_tool", &env);
    let r = single(&recs, "sleep_kernel");
    assert_eq!(r["outcome"], "replayed");
    assert!(
        r["skipped_regions"].as_u64().unwrap() >= 1,
        "the freed buffer must be skipped: {r}"
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_async_copy_released_during_the_window_is_waited_for_not_undone() {
    // The copy is queued behind a signal released 60 ms into the dispatch. Unfenced, it would
    // land during a pass and the next restore would undo it (the app checks the buffer).
    let env = [
        ("E2E_PLAN", "exactly:5"),
        ("E2E_KERNEL", "sleep_kernel"),
        ("SAMPLE_SLEEP_MS", "40"),
    ];
    let (run, recs) = probe("copy-before", "e2e_plan_tool", &env);
    assert!(run.stdout().contains("OK copy-before"), "{}", run.stdout());
    let r = single(&recs, "sleep_kernel");
    assert_eq!(r["outcome"], "replayed", "{r}");
    assert_eq!(r["passes"], 5, "{r}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_rect_async_copy_released_during_the_window_is_waited_for_too() {
    let env = [
        ("E2E_PLAN", "exactly:5"),
        ("E2E_KERNEL", "sleep_kernel"),
        ("SAMPLE_SLEEP_MS", "40"),
        ("SAMPLE_COPY", "rect"),
    ];
    let (_, recs) = probe("copy-before", "e2e_plan_tool", &env);
    let r = single(&recs, "sleep_kernel");
    assert_eq!(r["outcome"], "replayed", "{r}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_async_copy_waiting_for_the_replayed_dispatch_declines_at_once_and_stays_correct() {
    // The copy depends on the dispatch's own completion signal: it cannot run before the
    // window ends, and the snapshot's copies would queue behind it on the in-order copy
    // engine. The window declines at once (not at a deadline: the drain deadline is long),
    // the dispatch runs once, and the copy lands after it.
    let env = [
        ("E2E_PLAN", "exactly:3"),
        ("E2E_KERNEL", "sleep_kernel"),
        ("SAMPLE_SLEEP_MS", "10"),
        ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "60000"),
        ("ROCPROF_REPLAY_COPY_TIMEOUT_MS", "60000"),
    ];
    let (run, recs) = probe("copy-after", "e2e_plan_tool", &env);
    assert!(run.stdout().contains("OK copy-after"), "{}", run.stdout());
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    let r = single(&recs, "sleep_kernel");
    assert_eq!(r["outcome"], "declined", "{r}");
    assert_eq!(r["reason"], "copy_waits_for_dispatch", "{r}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_dispatch_behind_a_full_queue_is_replayed_not_stalled() {
    // 150 skipped sleep_kernel dispatches (each forwarded with a progress barrier) overfill the
    // runtime's 64-packet ring; ROCr (and hsa-emu) put what does not fit in an overflow buffer
    // that is only flushed once the interceptor returns. The replayed inc_in_place behind them
    // must not put its drain barrier there (it would wait until the drain deadline and
    // decline): forwarding waits for room instead.
    let env = [
        ("E2E_PLAN", "exactly:3"),
        ("E2E_KERNEL", "inc_in_place"),
        ("SAMPLE_SLEEP_MS", "2"),
        ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "10000"),
    ];
    let (run, recs) = probe("backlog", "e2e_plan_tool", &env);
    assert!(run.stdout().contains("OK backlog"), "{}", run.stdout());
    let r = single(&recs, "inc_in_place");
    assert_eq!(r["outcome"], "replayed", "{r}");
    assert_eq!(r["passes"], 3, "{r}");
    let sleeps = kernel_records(&recs, "sleep_kernel");
    assert_eq!(sleeps.len(), 150);
    assert!(sleeps.iter().all(|r| r["outcome"] == "skipped"));
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_second_replay_tool_is_rejected_and_the_first_keeps_working() {
    let (exe, kernels) = replay_probe();
    let records = records_path("two-tools");
    let preload = format!(
        "{} {}",
        tool_lib("e2e_plan_tool").display(),
        tool_lib("pass_timer").display()
    );
    let run = run_on_emu(
        &exe,
        &[kernels.to_str().unwrap(), "checksum"],
        &[
            ("LD_PRELOAD", &preload),
            ("E2E_PLAN", "exactly:4"),
            ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
            ("ROCPROF_REPLAY_HOST_MEMORY", "repeat"),
        ],
        DEADLINE,
    );
    run.assert_success();
    assert!(
        run.stderr().contains("already configured"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stdout()
            .contains("passes_recorded=4 identical_inputs=1"),
        "{}",
        run.stdout()
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn tools_load_through_hsa_tools_lib_too() {
    let (exe, kernels) = replay_probe();
    let lib = tool_lib("e2e_plan_tool");
    let run = run_on_emu(
        &exe,
        &[kernels.to_str().unwrap(), "checksum"],
        &[
            ("HSA_TOOLS_LIB", lib.to_str().unwrap()),
            ("E2E_PLAN", "exactly:3"),
            ("ROCPROF_REPLAY_HOST_MEMORY", "repeat"),
        ],
        DEADLINE,
    );
    run.assert_success();
    assert!(
        run.stdout()
            .contains("passes_recorded=3 identical_inputs=1"),
        "{}",
        run.stdout()
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn replay_works_with_the_rocm_5_2_table_layout() {
    let env = [("E2E_PLAN", "exactly:5"), ("HSA_EMU_ABI", "5.2")];
    let (run, recs) = probe("checksum", "e2e_plan_tool", &env);
    assert!(
        run.stdout()
            .contains("passes_recorded=5 identical_inputs=1"),
        "{}",
        run.stdout()
    );
    assert_eq!(
        single(&recs, "checksum_then_scribble")["outcome"],
        "replayed"
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_unknown_table_layout_disables_the_tool_and_the_app_runs_unprofiled() {
    let env = [("E2E_PLAN", "exactly:5"), ("HSA_EMU_AMD_EXT_MAJOR", "9")];
    let (run, recs) = probe("checksum", "e2e_plan_tool", &env);
    assert!(
        run.stdout()
            .contains("passes_recorded=1 identical_inputs=1 one_execution=1"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stderr().contains("unknown AmdExtTable layout (major 9"),
        "{}",
        run.stderr()
    );
    assert!(recs.is_empty(), "no replay without a tool: {recs:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn multi_packet_submissions_are_not_replayed_but_stay_correct() {
    let (run, recs) = probe("batch", "e2e_plan_tool", &[("E2E_PLAN", "exactly:5")]);
    assert!(run.stdout().contains("counter=2"), "{}", run.stdout());
    let r = kernel_records(&recs, "inc_in_place");
    assert_eq!(r.len(), 2, "{recs:?}");
    assert!(
        r.iter()
            .all(|r| r["outcome"] == "declined" && r["reason"] == "multi_packet"),
        "{r:?}"
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn passes_queued_ahead_see_identical_inputs_and_the_app_sees_one_execution() {
    // The tool lets later passes be queued ahead: passes 1..5 and the restore before each are
    // submitted to the replay queue before one wait (each restore's copies wait for the pass
    // before them, and the pass behind them waits for the copies). Each pass records the
    // checksum of its inputs in memory that is never restored: every pass saw the same.
    let phases = records_path("ahead").with_extension("phases.txt");
    let _ = std::fs::remove_file(&phases);
    let (run, recs) = probe(
        "checksum",
        "e2e_plan_tool",
        &[
            ("E2E_PLAN", "exactly:6"),
            ("E2E_AHEAD", "1"),
            ("ROCPROF_REPLAY_PHASES", phases.to_str().unwrap()),
        ],
    );
    assert!(
        run.stdout()
            .contains("passes_recorded=6 identical_inputs=1 one_execution=1"),
        "{}",
        run.stdout()
    );
    let r = single(&recs, "checksum_then_scribble");
    assert_eq!(r["outcome"], "replayed", "{r}");
    assert_eq!(r["passes"], 6, "{r}");
    let times = r["pass_ns"].as_array().unwrap();
    assert_eq!(times.len(), 6, "{r}");
    assert!(
        times.iter().all(|t| t.as_u64().is_some_and(|t| t > 0)),
        "{r}"
    );
    // Queued ahead: every later pass began before the first of them ended, then the ends came
    // in order, each with its own per-pass state.
    let lines = plan_tool_lines(&run);
    let line = lines
        .iter()
        .find(|l| l["kernel"] == "checksum_then_scribble")
        .unwrap();
    let seen: Vec<&str> = line["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let at = |prefix: &str| {
        seen.iter()
            .position(|s| s.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {seen:?}"))
    };
    assert!(at("start 5 ") < at("end 1 "), "{seen:?}");
    let ends: Vec<usize> = (0..6).map(|i| at(&format!("end {i} "))).collect();
    assert!(ends.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    for i in 0..6 {
        assert!(
            seen.contains(&format!("end {i} scope=Some({i})").as_str()),
            "{seen:?}"
        );
    }
    // One wait for the whole batch (the phases report's `await` row).
    let text = std::fs::read_to_string(&phases).expect("the phases report");
    assert!(phase_calls(&text, "await") >= 1, "{text}");
    // A slow copy engine (every asynchronous copy waits 20 ms before it runs): each pass
    // still starts only after the restore before it landed.
    let (run, recs) = probe(
        "checksum",
        "e2e_plan_tool",
        &[
            ("E2E_PLAN", "exactly:6"),
            ("E2E_AHEAD", "1"),
            ("HSA_EMU_COPY_DELAY_MS", "20"),
        ],
    );
    assert!(
        run.stdout()
            .contains("passes_recorded=6 identical_inputs=1 one_execution=1"),
        "{}",
        run.stdout()
    );
    assert_eq!(
        single(&recs, "checksum_then_scribble")["outcome"],
        "replayed"
    );
    // The same without the tool's consent: one pass at a time, the same result.
    let (run, recs) = probe("checksum", "e2e_plan_tool", &[("E2E_PLAN", "exactly:6")]);
    assert!(
        run.stdout()
            .contains("passes_recorded=6 identical_inputs=1 one_execution=1"),
        "{}",
        run.stdout()
    );
    assert_eq!(single(&recs, "checksum_then_scribble")["passes"], 6);
}
