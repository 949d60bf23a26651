//! Concurrency stress: threads × queues × 2 GPU agents, replayed and opted-out kernels, host
//! copies and asynchronous copies (some behind dependency signals, one across agents) all in
//! flight at once. The application (`tests/fixtures/stress_probe.c`) checks every result
//! itself: each worker thread owns its buffers and knows what exactly one execution of each of
//! its dispatches and copies leaves there, and each agent's module counter must show one
//! execution per dispatch. These tests check the outcome records: one per dispatch (none
//! lost), every selected dispatch `replayed` or honestly `declined` with a reason, never
//! `failed`, opted-out kernels `skipped`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use rocprof_replay_e2e::{
    Run, c_samples, e2e_dir, emu_dir, read_records, records_path, run_on_emu, tool_lib,
    workspace_root,
};
use serde_json::Value;

/// One run of the stress application; it takes well under a second on hsa-emu.
const DEADLINE: Duration = Duration::from_secs(60);
const THREADS: u32 = 4;
const ROUNDS: u32 = 40;
/// Kernels the application dispatches, three per round and thread.
const PER_ROUND: u32 = 3;

fn cc(args: &[&str], what: &str) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cc}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The stress application and its kernels, built once per test process (needs the HSA
/// headers: the tests carry `cfg_attr(not(have_hsa_headers), ignore)`).
fn stress_probe() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    c_samples();
    BUILT
        .get_or_init(|| {
            let root = workspace_root();
            let dir = e2e_dir().join("stress");
            std::fs::create_dir_all(&dir).unwrap();
            let inc = |p: &str| format!("-I{}", root.join(p).display());
            let flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"];
            let kernels = dir.join("libstress_kernels.so");
            let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
            args.extend([inc("hsa-emu/include"), "-shared".into(), "-fPIC".into()]);
            args.extend(["-o".into(), kernels.display().to_string()]);
            args.push(
                root.join("tests/fixtures/stress_kernels.c")
                    .display()
                    .to_string(),
            );
            cc(
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
                "building the stress kernels",
            );
            let exe = dir.join("stress_probe");
            let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
            args.extend([inc("hsa-emu/include"), inc("examples/apps")]);
            args.extend(["-o".into(), exe.display().to_string()]);
            args.push(
                root.join("tests/fixtures/stress_probe.c")
                    .display()
                    .to_string(),
            );
            args.push(format!("-L{}", emu_dir().display()));
            args.extend(["-lhsa-runtime64".into(), "-lpthread".into()]);
            cc(
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
                "building stress_probe",
            );
            (exe, kernels)
        })
        .clone()
}

/// Runs the stress application on two GPU agents with `tool` preloaded; checks that it
/// reported its own results correct and returns the run and its outcome records.
fn stress(tool: &str, test: &str, env: &[(&str, &str)]) -> (Run, Vec<Value>) {
    let (exe, kernels) = stress_probe();
    let records = records_path(test);
    let lib = tool_lib(tool);
    let (threads, rounds) = (THREADS.to_string(), ROUNDS.to_string());
    let mut all: Vec<(&str, &str)> = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("HSA_EMU_GPUS", "2"),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "error"),
        ("STRESS_THREADS", &threads),
        ("STRESS_ROUNDS", &rounds),
    ];
    all.extend_from_slice(env);
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap()], &all, DEADLINE);
    run.assert_success();
    let expected = format!(
        "RESULT stress_probe OK threads={THREADS} rounds={ROUNDS} gpus=2 dispatches={}",
        THREADS * ROUNDS * PER_ROUND
    );
    assert!(
        run.stdout().contains(&expected),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
    (run, read_records(&records))
}

/// Outcome counts per (kernel, outcome, reason), for messages.
fn tally(recs: &[Value]) -> BTreeMap<String, usize> {
    let mut t = BTreeMap::new();
    for r in recs {
        let key = format!("{} {} {}", r["kernel"], r["outcome"], r["reason"]);
        *t.entry(key).or_default() += 1;
    }
    t
}

/// The checks every stress run must pass: one record per dispatch; opted-out kernels skipped
/// with no snapshot; each selected dispatch replayed with every pass, or declined with a
/// reason out of `allowed` after fewer passes; never failed. Returns the replayed records of
/// the selected kernels.
fn check_records<'a>(
    recs: &'a [Value],
    selected: &[&str],
    passes: u64,
    allowed: &[&str],
) -> Vec<&'a Value> {
    let t = tally(recs);
    assert_eq!(
        recs.len() as u32,
        THREADS * ROUNDS * PER_ROUND,
        "one record per dispatch: {t:#?}"
    );
    for kernel in ["stress_replayed", "stress_opted_out", "inc_in_place"] {
        assert_eq!(
            recs.iter().filter(|r| r["kernel"] == kernel).count() as u32,
            THREADS * ROUNDS,
            "{kernel}: {t:#?}"
        );
    }
    assert!(
        recs.iter().all(|r| r["outcome"] != "failed"),
        "no dispatch may fail: {t:#?}"
    );
    let mut replayed = Vec::new();
    for r in recs {
        let kernel = r["kernel"].as_str().unwrap();
        if !selected.contains(&kernel) {
            assert_eq!(r["outcome"], "skipped", "not selected: runs once: {r}");
            assert_eq!(r["passes"], 1, "{r}");
            assert_eq!(r["snapshot_bytes"], 0, "{r}");
            continue;
        }
        match r["outcome"].as_str() {
            Some("replayed") => {
                assert_eq!(r["passes"], passes, "{r}");
                assert_eq!(r["pass_ns"].as_array().unwrap().len() as u64, passes, "{r}");
                assert!(r["snapshot_bytes"].as_u64().unwrap() > 0, "{r}");
                replayed.push(r);
            }
            Some("declined") => {
                let reason = r["reason"].as_str().unwrap_or_else(|| panic!("{r}"));
                assert!(
                    allowed.contains(&reason),
                    "declined for {reason}, not one of {allowed:?}: {r}\n{t:#?}"
                );
                let n = r["passes"].as_u64().unwrap();
                assert!((1..passes).contains(&n), "{r}");
            }
            _ => panic!("a selected dispatch is replayed or declined: {r}"),
        }
    }
    replayed
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn replayed_and_opted_out_kernels_on_two_agents_stay_correct_under_concurrency() {
    let env = [
        ("ROCPROF_REPLAY_KERNEL", "^(stress_replayed|inc_in_place)$"),
        ("ROCPROF_REPLAY_PASSES", "3"),
        // A held copy of one thread can make another thread's window wait for it (see
        // stress_probe.c): keep that wait short; it ends in an honest drain_timeout.
        ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "2000"),
    ];
    let (_, recs) = stress("selective", "selective", &env);
    let allowed = ["copy_waits_for_dispatch", "drain_timeout"];
    let replayed = check_records(&recs, &["stress_replayed", "inc_in_place"], 3, &allowed);
    let t = tally(&recs);
    // The last round of every thread submits a copy that waits for its stress_replayed
    // dispatch: that window cannot wait for the copy, so it must decline.
    let declined_held = recs
        .iter()
        .filter(|r| r["kernel"] == "stress_replayed" && r["outcome"] == "declined")
        .count() as u32;
    assert!(declined_held >= THREADS, "{t:#?}");
    let waits = recs
        .iter()
        .filter(|r| r["reason"] == "copy_waits_for_dispatch")
        .count() as u32;
    assert!(waits <= THREADS, "only the held rounds: {t:#?}");
    // Everything else is replayed with generous deadlines; allow for the rare window that
    // waited for another thread's held copy (drain_timeout).
    assert!(
        replayed.len() as u32 >= 2 * THREADS * ROUNDS - 4 * THREADS,
        "{t:#?}"
    );
    for agent in [0, 1] {
        for kernel in ["stress_replayed", "inc_in_place"] {
            assert!(
                replayed
                    .iter()
                    .any(|r| r["agent"] == agent && r["kernel"] == kernel),
                "{kernel} replayed on agent {agent}: {t:#?}"
            );
        }
    }
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn windows_cut_short_by_contention_leave_every_result_correct() {
    // A lock deadline of 0: every window that other work waits for stops after its current
    // pass (lock_contention) and a window that cannot take the agent at once runs the
    // dispatch once (lock_timeout). Whatever pass a window stops after, the application sees
    // one correct execution.
    let env = [
        ("E2E_PLAN", "exactly:5"),
        ("E2E_KERNEL", "stress_replayed"),
        ("ROCPROF_REPLAY_LOCK_TIMEOUT_MS", "0"),
        ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "2000"),
    ];
    let (_, recs) = stress("e2e_plan_tool", "contention", &env);
    let allowed = [
        "lock_contention",
        "lock_timeout",
        "copy_waits_for_dispatch",
        "drain_timeout",
    ];
    check_records(&recs, &["stress_replayed"], 5, &allowed);
    let t = tally(&recs);
    let cut = recs
        .iter()
        .filter(|r| r["reason"] == "lock_contention" || r["reason"] == "lock_timeout")
        .count();
    assert!(
        cut > 0,
        "a lock deadline of 0 must cut windows short: {t:#?}"
    );
}

/// Engine bug (found by the stress test under ThreadSanitizer, reproduced here on one
/// thread): the runtime's copy engines run copies in submission order, so a copy queued behind
/// a copy that waits for the replayed dispatch cannot run before that dispatch either. The
/// drain's copy wait (`CopyFence::wait_idle`, `any_runnable` in `hsa/copies.rs`) treats it as
/// runnable and waits for it until the drain deadline (60 s by default), then declines with
/// `drain_timeout`: the application stalls for the whole deadline. It should decline at once
/// with `copy_waits_for_dispatch`, as it does when only the held copy is in flight.
#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_copy_queued_behind_a_held_copy_does_not_stall_the_window() {
    let (exe, kernels) = stress_probe();
    let records = records_path("queued-behind-held");
    let lib = tool_lib("selective");
    let run = run_on_emu(
        &exe,
        &[kernels.to_str().unwrap()],
        &[
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("STRESS_MODE", "queued-behind-held"),
            ("ROCPROF_REPLAY_KERNEL", "^stress_replayed$"),
            ("ROCPROF_REPLAY_PASSES", "3"),
            ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
            ("ROCPROF_REPLAY_LOG", "error"),
            // Short, so the failing case fails in seconds, not a minute.
            ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "3000"),
        ],
        DEADLINE,
    );
    run.assert_success();
    assert!(
        run.stdout()
            .contains("RESULT stress_probe OK queued-behind-held"),
        "{}",
        run.stdout()
    );
    let recs = read_records(&records);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(
        (recs[0]["outcome"].as_str(), recs[0]["reason"].as_str()),
        (Some("declined"), Some("copy_waits_for_dispatch")),
        "the window waited for a copy that could only run after the dispatch: {}",
        recs[0]
    );
}

/// A window that declines after its drain runs its dispatch once on the replay queue, its
/// gate opening behind that run after the window has ended. The application queued work
/// behind that gate (a barrier on a signal it stores 100 ms after that run completed, then
/// `inc_in_place`) before another queue's next window armed its isolation gate, so that
/// window's drain must wait for the work, not stop short of it as of a gate waiting for a
/// later window: else `inc_in_place` ran during that window's first pass (stretched to 600 ms
/// by the policy) and the record said `wrote_outside_footprint` (found by the interceptor
/// fuzz target; a restore could also undo the write).
/// The stress application in `STRESS_MODE=mode` under the e2e plan tool configured by `env`:
/// it succeeds and says `RESULT stress_probe OK <mode>` (it checked its own results, module
/// counter included); returns the records.
fn probe_mode(mode: &str, env: &[(&str, &str)]) -> Vec<Value> {
    let (exe, kernels) = stress_probe();
    let records = records_path(mode);
    let lib = tool_lib("e2e_plan_tool");
    let mut all = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("STRESS_MODE", mode),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "error"),
    ];
    all.extend_from_slice(env);
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap()], &all, DEADLINE);
    run.assert_success();
    assert!(
        run.stdout()
            .contains(&format!("RESULT stress_probe OK {mode}")),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
    read_records(&records)
}

/// The record of `kernel`'s (first) dispatch.
fn record_of<'a>(recs: &'a [Value], kernel: &str) -> &'a Value {
    recs.iter()
        .find(|r| r["kernel"] == kernel)
        .unwrap_or_else(|| panic!("no record of {kernel}: {recs:?}"))
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_window_waits_for_work_behind_a_gate_that_opens_on_the_replay_queue() {
    let recs = probe_mode(
        "gate-behind-run",
        &[
            // The first window's ordinary run on the replay queue: 300 ms; the barrier's
            // signal 100 ms after it completed, while the next window's first pass lasts.
            ("STRESS_SLEEP_US", "300000"),
            ("STRESS_GO_MS", "100"),
            ("E2E_KERNEL", "stress_opted_out,stress_replayed"),
            ("E2E_PLAN", "exactly:3"),
            ("E2E_PANIC", "on_pass:0"),
            ("E2E_PANIC_KERNEL", "stress_opted_out"),
            ("E2E_PASS_SLEEP_MS", "600"),
        ],
    );
    let opted = record_of(&recs, "stress_opted_out");
    assert_eq!(
        (opted["outcome"].as_str(), opted["reason"].as_str()),
        (Some("declined"), Some("policy_panicked")),
        "{opted}"
    );
    let replayed = record_of(&recs, "stress_replayed");
    assert_eq!(
        (replayed["outcome"].as_str(), replayed["passes"].as_u64()),
        (Some("replayed"), Some(3)),
        "another queue's work ran during the window: {replayed}"
    );
}

/// A window whose passes are queued ahead and that ends early (its policy panics in pass 2's
/// `on_pass`) while a restore of its whole snapshot (`hit_counter` included) is still queued on
/// the replay queue (slow copies): `inc_in_place`, not replayed, submitted to another queue
/// during the window, must wait behind the isolation gate until that restore is done, or the
/// restore undoes its `hit_counter += 1` (the application says `hit_counter grew by 0`; found
/// by the interceptor fuzz target, `docs/reliability-tests.md`).
#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_window_that_ends_early_keeps_other_queues_out_until_its_queued_restores_are_done() {
    let recs = probe_mode(
        "restore-behind-run",
        &[
            // inc_in_place comes 100 ms into stress_replayed's window, while its first pass's
            // on_pass sleeps: it waits behind the isolation gate.
            ("STRESS_GO_MS", "100"),
            ("E2E_KERNEL", "stress_replayed"),
            ("E2E_PLAN", "exactly:4"),
            ("E2E_AHEAD", "1"),
            ("E2E_PASS_SLEEP_MS", "300"),
            ("E2E_PANIC", "on_pass:2"),
            ("E2E_PANIC_KERNEL", "stress_replayed"),
            ("HSA_EMU_COPY_DELAY_MS", "150"),
        ],
    );
    let replayed = record_of(&recs, "stress_replayed");
    assert_eq!(
        (replayed["outcome"].as_str(), replayed["reason"].as_str()),
        (Some("declined"), Some("policy_panicked")),
        "{replayed}"
    );
}

/// The stress application with windows over runs of up to 8 dispatches (`ROCPROF_REPLAY_RUN`)
/// and `footprint` (`None`: the default): every result one execution (checked by the
/// application), every record replayed with every pass or declined for a reason the run path
/// can give. Returns the records.
fn runs_under_concurrency(test: &str, footprint: Option<&str>) -> Vec<Value> {
    let mut env = vec![
        ("ROCPROF_REPLAY_KERNEL", "^(stress_replayed|inc_in_place)$"),
        ("ROCPROF_REPLAY_PASSES", "3"),
        ("ROCPROF_REPLAY_RUN", "8"),
        ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "2000"),
    ];
    env.extend(footprint.map(|f| ("ROCPROF_REPLAY_FOOTPRINT", f)));
    let (_, recs) = stress("selective", test, &env);
    let allowed = [
        "copy_waits_for_dispatch",
        "drain_timeout",
        "wrote_outside_footprint",
        "footprint_unchecked",
    ];
    check_records(&recs, &["stress_replayed", "inc_in_place"], 3, &allowed);
    recs
}

/// The same concurrency with windows over runs of dispatches: runs form.
#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn runs_of_dispatches_under_concurrency_leave_every_result_correct() {
    let recs = runs_under_concurrency("runs", None);
    let runs: BTreeMap<u64, usize> = recs.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r["run"].as_u64().unwrap_or(0)).or_default() += 1;
        m
    });
    // Each thread submits its rounds back to back: runs form (timing decides how many).
    assert!(
        runs.keys().any(|&n| n > 1),
        "no dispatch joined a run: {runs:?}"
    );
}

/// The same with the `all` footprint: every allocation captured, nothing checked, runs form.
#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn all_footprint_runs_under_concurrency_leave_every_result_correct() {
    let recs = runs_under_concurrency("all_runs", Some("all"));
    let in_runs = recs
        .iter()
        .filter(|r| r["footprint"] == "all" && r["run"].as_u64().unwrap_or(0) > 1)
        .count();
    assert!(in_runs > 0, "no dispatch joined a run: {:?}", tally(&recs));
}

/// The same with the `sampled` footprint: its dispatches form runs too — checked ones while a
/// kernel is not trusted, unchecked ones after (nothing fingerprinted, only dispatches not due
/// a check taken in) — and every result is still one execution.
#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn sampled_runs_under_concurrency_leave_every_result_correct() {
    let recs = runs_under_concurrency("sampled_runs", Some("sampled"));
    let in_runs = |footprint: &str| {
        recs.iter()
            .filter(|r| r["footprint"] == footprint && r["run"].as_u64().unwrap_or(0) > 1)
            .count()
    };
    let (checked, unchecked) = (in_runs("arguments"), in_runs("unchecked"));
    assert!(
        checked + unchecked > 0,
        "no sampled dispatch joined a run: {:?}",
        tally(&recs)
    );
    assert!(
        unchecked > 0,
        "no unchecked run formed ({checked} dispatches in checked runs)"
    );
}
