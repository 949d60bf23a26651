//! The fault matrix: one test per way a replay window can go wrong, end to end (the
//! `fault_probe` application, hsa-emu with a fault armed at run time, and the `e2e_plan_tool`
//! fixture tool as three processes).
//!
//! Every cell asserts
//! - the application's own checks (exact values after each dispatch; where the outcome is
//!   `failed`, the application may see a wrong value, and then checks that memory is consistent
//!   again once the queue has drained);
//! - the outcome and reason of the faulty dispatch, from the outcome records;
//! - that nothing leaked: threads and open descriptors are the same before the faulty dispatch
//!   and after the next one;
//! - that the next dispatch is replayed normally.
//!
//! `fault_probe`'s frame: warm-up dispatch (inc_in_place, replayed), resources counted, the
//! scenario (fault armed just before it is submitted), the next dispatch (inc_in_place,
//! replayed), resources counted. Its snapshot covers two regions (the buffer `a` and the
//! module variable `hit_counter`), so a capture is copies 1-2 after arming and the first
//! restore copies 3-4.

use std::time::Duration;

use rocprof_replay_e2e::{Run, fault_probe, read_records, records_path, run_on_emu, tool_lib};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);
const SOAK_DEADLINE: Duration = Duration::from_secs(400);

/// One run of the fault probe.
struct Cell {
    run: Run,
    records: Vec<Value>,
}

impl Cell {
    /// The probe's RESULT line fields (`key=value`).
    fn field(&self, key: &str) -> String {
        let out = self.run.stdout();
        let line = out
            .lines()
            .find(|l| l.starts_with("RESULT fault_probe OK"))
            .unwrap_or_else(|| panic!("no RESULT line:\n{out}\n{}", self.run.stderr()));
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {line}"))
            .to_owned()
    }

    /// `before->after` of a resource, as numbers.
    fn resource(&self, key: &str) -> (i64, i64) {
        let v = self.field(key);
        let (a, b) = v.split_once("->").unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    }

    /// Records of `kernel`, in order.
    fn of(&self, kernel: &str) -> Vec<&Value> {
        self.records
            .iter()
            .filter(|r| r["kernel"] == kernel)
            .collect()
    }

    /// The record of the scenario's dispatch of `kernel` (the only one of that kernel, or the
    /// one between the warm-up and the next dispatch for inc_in_place).
    fn faulty(&self, kernel: &str) -> &Value {
        let recs = self.of(kernel);
        match kernel {
            "inc_in_place" => {
                assert_eq!(recs.len(), 3, "warm-up, scenario, next: {recs:?}");
                recs[1]
            }
            _ => {
                assert_eq!(recs.len(), 1, "{recs:?}");
                recs[0]
            }
        }
    }

    /// Asserts the frame: no leak, the warm-up and the next dispatch replayed normally.
    fn assert_frame(&self, passes: u64) {
        self.assert_frame_with_threads(passes, 0);
    }

    /// [`assert_frame`](Self::assert_frame) where the scenario leaves `more` threads for good
    /// (a queue of the backend's own, kept for the process's lifetime).
    fn assert_frame_with_threads(&self, passes: u64, more: i64) {
        let (t0, t1) = self.resource("threads");
        assert_eq!(t0 + more, t1, "threads leaked: {t0} -> {t1}");
        let (f0, f1) = self.resource("fds");
        assert_eq!(f0, f1, "file descriptors leaked: {f0} -> {f1}");
        let incs = self.of("inc_in_place");
        let next = incs.last().expect("the next dispatch has a record");
        assert_eq!(next["outcome"], "replayed", "the next dispatch: {next}");
        assert_eq!(next["passes"], passes, "the next dispatch: {next}");
        assert_eq!(incs[0]["outcome"], "replayed", "the warm-up: {}", incs[0]);
    }

    fn assert_outcome(record: &Value, outcome: &str, reason: Option<&str>) {
        assert_eq!(record["outcome"], outcome, "{record}");
        assert_eq!(record["reason"].as_str(), reason, "{record}");
    }
}

/// Runs `fault_probe KERNELS scenario` under the plan tool with `env`.
fn cell(scenario: &str, env: &[(&str, &str)]) -> Cell {
    let (exe, kernels) = fault_probe();
    let records = records_path(&format!("fault-{scenario}"));
    let lib = tool_lib("e2e_plan_tool");
    let mut all: Vec<(&str, &str)> = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
        ("E2E_PLAN", "exactly:3"),
    ];
    all.extend_from_slice(env);
    // The soak's 100 000 dispatches take 100-140 s on a loaded 2-core machine: its deadline
    // only tells a hang from a slow run.
    let deadline = if scenario == "soak" {
        SOAK_DEADLINE
    } else {
        DEADLINE
    };
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap(), scenario], &all, deadline);
    run.assert_success();
    let records = read_records(&records);
    Cell { run, records }
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn allocation_failure_during_capture_declines_and_the_app_is_right() {
    // The extra 1 MiB buffer needs staging the warm-up did not leave behind: every
    // allocation after arming fails (the arena's VRAM chunk, its pinned-host fall-back, the
    // retry for the region). The arena is sized by what the plan captures: with the
    // arguments footprint the extra buffer would only be watched, so everything is captured.
    let c = cell(
        "inc",
        &[
            ("FAULT_EXTRA_KB", "1024"),
            ("FAULT_ARM", "FAIL_ALLOC_FROM=1"),
            ("ROCPROF_REPLAY_FOOTPRINT", "all"),
        ],
    );
    Cell::assert_outcome(
        c.faulty("inc_in_place"),
        "declined",
        Some("snapshot_alloc_failed"),
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_refused_vram_chunk_falls_back_to_pinned_host_staging() {
    // The first allocation after arming is the arena's VRAM chunk for the larger footprint
    // (everything captured: the arena follows the plan); it fails, and the snapshot is staged
    // in pinned host memory instead.
    let c = cell(
        "inc",
        &[
            ("FAULT_EXTRA_KB", "1024"),
            ("FAULT_ARM", "FAIL_ALLOC_NTH=1"),
            ("ROCPROF_REPLAY_FOOTPRINT", "all"),
        ],
    );
    let r = c.faulty("inc_in_place");
    Cell::assert_outcome(r, "replayed", None);
    assert_eq!(r["staging"], "pinned_host", "{r}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn copy_failure_mid_capture_declines_and_the_app_is_right() {
    let c = cell("inc", &[("FAULT_ARM", "FAIL_COPY_NTH=2")]);
    Cell::assert_outcome(c.faulty("inc_in_place"), "declined", Some("copy_failed"));
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn one_copy_failure_mid_restore_is_retried_and_the_replay_completes() {
    // Copies 1-2 capture (buffer, module variable), 3-6 are the diff after pass 1 (one batch:
    // each region and its snapshot, which lives in VRAM, read back), 7 is the first of the
    // first restore.
    let c = cell("inc", &[("FAULT_ARM", "FAIL_COPY_NTH=7")]);
    let r = c.faulty("inc_in_place");
    Cell::assert_outcome(r, "replayed", None);
    assert_eq!(r["passes"], 3, "{r}");
    assert_eq!(
        r["restore_mode"], "full",
        "inc_in_place writes every byte: {r}"
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_failed_diff_copy_falls_back_to_full_restore_and_the_app_is_right() {
    // Copy 3 is the first read-back of the diff after pass 1 when the host compares (without
    // the device compare kernel, as on a GPU with no code object).
    let c = cell(
        "inc",
        &[
            ("FAULT_ARM", "FAIL_COPY_NTH=3"),
            ("ROCPROF_REPLAY_DEVICE_KERNELS", "off"),
        ],
    );
    let r = c.faulty("inc_in_place");
    Cell::assert_outcome(r, "replayed", None);
    assert_eq!(r["passes"], 3, "{r}");
    assert_eq!(r["restore_mode"], "full", "{r}");
    assert_eq!(r["written_bytes"], 0, "no diff finished: {r}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_diff_copy_past_the_copy_deadline_stops_after_pass_one_and_the_app_is_right() {
    // Copy 3 (the diff's first read-back, the host comparing) waits 1.5 s; the copy deadline
    // is 300 ms. Nothing was written after pass 1, so its result stands (checked exactly by
    // the app).
    let c = cell(
        "inc",
        &[
            ("FAULT_ARM", "COPY_DELAY_MS=1500,DELAY_COPY_NTH=3"),
            ("ROCPROF_REPLAY_COPY_TIMEOUT_MS", "300"),
            ("FAULT_SETTLE_MS", "1500"),
            ("ROCPROF_REPLAY_DEVICE_KERNELS", "off"),
        ],
    );
    let r = c.faulty("inc_in_place");
    Cell::assert_outcome(r, "declined", Some("copy_timeout"));
    assert_eq!(r["passes"], 1, "{r}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_device_compare_past_the_copy_deadline_stops_after_pass_one_and_the_app_is_right() {
    // The compare kernel's dispatch after pass 1 (the first of rocprof-replay's kernels after
    // arming: the snapshot holds every allocation, nothing is fingerprinted) waits 1.5 s; the
    // copy deadline is 300 ms. Its signal goes to the stuck list, its buffers are never used
    // again; nothing was written after pass 1, so its result stands. The next dispatch
    // (after the app let the late kernel finish) gets new buffers and is replayed.
    let c = cell(
        "inc",
        &[
            (
                "FAULT_ARM",
                "REPLAY_KERNEL_DELAY_MS=1500,DELAY_REPLAY_KERNEL_NTH=1",
            ),
            ("ROCPROF_REPLAY_COPY_TIMEOUT_MS", "300"),
            ("FAULT_SETTLE_MS", "1500"),
        ],
    );
    let r = c.faulty("inc_in_place");
    Cell::assert_outcome(r, "declined", Some("copy_timeout"));
    assert_eq!(r["passes"], 1, "{r}");
    assert!(
        c.run
            .stderr()
            .contains("a device compare kernel is still running after the copy deadline"),
        "{}",
        c.run.stderr()
    );
    let next = c.of("inc_in_place");
    assert_eq!(next[2]["compared_on"], "device", "{next:?}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn restore_copies_that_keep_failing_end_failed_and_the_app_runs_on() {
    let c = cell(
        "inc",
        // From the diff on: the diff fails (full restore), then every restore copy.
        &[("FAULT_ARM", "FAIL_COPY_FROM=3"), ("FAULT_CHECK", "report")],
    );
    Cell::assert_outcome(c.faulty("inc_in_place"), "failed", Some("restore_failed"));
    assert!(
        c.run.stderr().contains("may have seen a wrong result"),
        "a failure is logged as an error: {}",
        c.run.stderr()
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn restore_copies_past_the_copy_deadline_end_failed() {
    // The 3rd asynchronous copy (the first of the first restore, after 2 capture copies; the
    // diff is the device compare kernel, no copy) waits 1.5 s on the copy engine. The restore
    // is queued on the replay queue in front of pass 2, which waits for its copies: the pass
    // is late past the pass deadline and the late-pass deadline (300 ms each) because the
    // restore is, so the record says `restore_stuck` and nothing runs again over the partly
    // restored memory. The app lets the copy finish before its next dispatch.
    let c = cell(
        "inc",
        &[
            ("FAULT_ARM", "COPY_DELAY_MS=1500,DELAY_COPY_NTH=3"),
            ("ROCPROF_REPLAY_COPY_TIMEOUT_MS", "300"),
            ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "300"),
            ("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", "300"),
            ("FAULT_CHECK", "report"),
            ("FAULT_SETTLE_MS", "1500"),
        ],
    );
    Cell::assert_outcome(c.faulty("inc_in_place"), "failed", Some("restore_stuck"));
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_stuck_final_write_back_keeps_the_arena_from_an_application_allocation() {
    // Write-set restore (every allocation captured, a 1 MiB buffer the kernel never writes):
    // copies 1-3 capture, the compare kernel diffs, 4-5 stash pass 1's result, 6-9 restore
    // before passes 2 and 3, the final compare finds nothing new, and 10-11 write pass 1's
    // result back. Copy 10 waits 3 s; the copy deadline is 300 ms, so the window ends failed
    // with the copy still reading the stash in the arena's VRAM. The application then asks
    // for more VRAM than is free (16 MiB device): the arena must not be freed under the
    // copy (hsa-emu unmaps freed memory: the copy would fault), so the allocation is refused
    // (or, were the copy done by then, served after the arena's release).
    let c = cell(
        "inc",
        &[
            ("FAULT_EXTRA_KB", "1024"),
            ("HSA_EMU_VRAM_MB", "16"),
            ("FAULT_ALLOC_AFTER_KB", "14336"),
            ("ROCPROF_REPLAY_FOOTPRINT", "all"),
            ("FAULT_ARM", "COPY_DELAY_MS=3000,DELAY_COPY_NTH=10"),
            ("ROCPROF_REPLAY_COPY_TIMEOUT_MS", "300"),
            ("FAULT_CHECK", "report"),
            ("FAULT_SETTLE_MS", "3500"),
        ],
    );
    let r = c.faulty("inc_in_place");
    Cell::assert_outcome(r, "failed", Some("restore_stuck"));
    assert_eq!(r["restore_mode"], "write_set", "{r}");
    assert_eq!(r["staging"], "device", "{r}");
    let out = c.run.stdout();
    if out.contains("late allocation refused") {
        assert!(
            c.run
                .stderr()
                .contains("the arena is kept: stuck replay copies may still use it"),
            "{}",
            c.run.stderr()
        );
    } else {
        assert!(out.contains("late allocation OK"), "{out}");
    }
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn capture_copies_past_the_copy_deadline_decline_and_the_app_is_right() {
    let c = cell(
        "inc",
        &[
            ("FAULT_ARM", "COPY_DELAY_MS=1500,DELAY_COPY_NTH=1"),
            ("ROCPROF_REPLAY_COPY_TIMEOUT_MS", "300"),
            ("FAULT_SETTLE_MS", "1500"),
        ],
    );
    Cell::assert_outcome(c.faulty("inc_in_place"), "declined", Some("copy_timeout"));
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn symbol_iteration_failure_declines_and_the_app_is_right() {
    let c = cell("inc", &[("FAULT_ARM", "FAIL_SYMBOL_ITERATION=1")]);
    Cell::assert_outcome(
        c.faulty("inc_in_place"),
        "declined",
        Some("symbols_unavailable"),
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_stuck_queue_drain_declines_and_the_app_is_right() {
    // The first barrier after arming (the window's own drain barrier) is held 1.5 s; the drain
    // deadline is 300 ms.
    let c = cell(
        "inc",
        &[
            ("FAULT_ARM", "HOLD_BARRIERS_MS=1500,HOLD_BARRIER_NTH=1"),
            ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "300"),
        ],
    );
    Cell::assert_outcome(c.faulty("inc_in_place"), "declined", Some("drain_timeout"));
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_pass_that_completes_after_its_deadline_is_the_one_execution() {
    // slow_inc's 2nd execution (pass 2) sleeps 1.5 s; the pass deadline is 300 ms, the late-pass
    // deadline 10 s: the pass is waited for, nothing is restored or run again, the app sees it.
    let c = cell(
        "slow",
        &[
            ("E2E_PLAN", "exactly:4"),
            ("SLOW_RUN", "2"),
            ("SLOW_MS", "1500"),
            ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "300"),
            ("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", "10000"),
        ],
    );
    let r = c.faulty("slow_inc");
    Cell::assert_outcome(r, "declined", Some("pass_timeout"));
    assert_eq!(r["passes"], 2, "{r}");
    c.assert_frame(4);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_pass_that_never_completes_fails_without_hanging_or_crashing_the_app() {
    // Pass 2 sleeps 4 s; both deadlines are 300 ms: the app gets its completion at ~0.6 s
    // (outcome failed), frees the kernarg the pass still reads (deferred) and goes on; the next
    // dispatch's window waits for the stuck pass.
    stuck_pass(&[]);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_stuck_pass_queued_ahead_fails_pass_stuck_and_what_is_queued_behind_it_is_abandoned() {
    // As above, the tool letting passes be queued ahead: passes 2-4 and the restores before
    // 3 and 4 are queued behind pass 2 (4 s). Pass 2 is what is stuck — not the restores
    // queued behind it, which wait for it — and nothing behind it is waited for again.
    stuck_pass(&[("E2E_AHEAD", "1")]);
}

/// Pass 2 of `slow_inc` sleeps 4 s; the pass and late-pass deadlines are 300 ms (4 passes,
/// `extra` settings added): failed `pass_stuck`, the frame intact.
fn stuck_pass(extra: &[(&str, &str)]) {
    let mut env = vec![
        ("E2E_PLAN", "exactly:4"),
        ("SLOW_RUN", "2"),
        ("SLOW_MS", "4000"),
        ("FAULT_CHECK", "report"),
        ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "300"),
        ("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", "300"),
        ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "20000"),
    ];
    env.extend_from_slice(extra);
    let c = cell("slow", &env);
    Cell::assert_outcome(c.faulty("slow_inc"), "failed", Some("pass_stuck"));
    c.assert_frame(4);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_stuck_restore_queued_ahead_fails_restore_stuck() {
    // The first restore's first copy waits 1.5 s; passes 2-4 are queued ahead behind it: pass
    // 2 is late because its restore is, so the record says `restore_stuck`.
    let c = cell(
        "inc",
        &[
            ("E2E_PLAN", "exactly:4"),
            ("E2E_AHEAD", "1"),
            ("FAULT_ARM", "COPY_DELAY_MS=1500,DELAY_COPY_NTH=3"),
            ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "300"),
            ("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", "300"),
            ("FAULT_CHECK", "report"),
            ("FAULT_SETTLE_MS", "1500"),
        ],
    );
    Cell::assert_outcome(c.faulty("inc_in_place"), "failed", Some("restore_stuck"));
    c.assert_frame(4);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn opted_out_work_waits_for_the_window_and_cuts_it_short_never_goes_in_unprotected() {
    // Thread A: slow_inc (200 ms per execution) replayed 5 times on queue 1. Thread B: vector
    // adds on queue 2 of the same GPU, opted out, each checked by the app. The lock deadline is
    // 100 ms: B waits, the window stops after its current pass, B's work is never undone.
    let c = cell(
        "contention",
        &[
            ("E2E_PLAN", "exactly:5"),
            ("E2E_KERNEL", "slow_inc"),
            ("SLOW_MS", "200"),
            ("VADD_ROUNDS", "10"),
            ("ROCPROF_REPLAY_LOCK_TIMEOUT_MS", "100"),
        ],
    );
    let r = c.faulty("slow_inc");
    Cell::assert_outcome(r, "declined", Some("lock_contention"));
    assert!(r["passes"].as_u64().unwrap() < 5, "{r}");
    assert_eq!(c.of("vector_add").len(), 10);
    let (t0, t1) = c.resource("fds");
    assert_eq!(t0, t1);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_copy_waited_for_inside_an_async_handler_completes_with_the_tool_loaded() {
    let c = cell("handler-copy", &[]);
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_kernel_waiting_for_the_applications_next_store_is_replayed_and_completes() {
    // The doorbell write returns before the window runs, so the application sets the flag the
    // kernel spins on (a synchronous window would hold the submission until three passes had
    // each given up after 20 s, and a[i] would grow by 1000). Work behind the dispatch on its
    // queue sees its one completion and the memory of one execution.
    let c = cell("flag-wait", &[]);
    let r = c.faulty("wait_flag");
    Cell::assert_outcome(r, "replayed", None);
    assert_eq!(r["passes"], 3, "{r}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_kernel_waiting_for_the_applications_next_copy_or_dispatch_completes() {
    // The flag is device memory the application sets after the submission with an
    // asynchronous copy, or with a dispatch on queue 2: work the window holds up (the copy at
    // its submission, the dispatch behind the isolation gate) while its first pass waits for
    // it. Once that work has waited past the yield deadline the window gives the dispatch up:
    // one pass, the application's own, which completes once the work runs. Without the yield
    // both wait for the 10 s pass deadline, and the kernel gives up at 20 s (a[i] += 1000).
    for scenario in ["flag-copy", "flag-queue"] {
        let c = cell(
            scenario,
            &[
                ("ROCPROF_REPLAY_YIELD_MS", "200"),
                ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "10000"),
                ("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", "1000"),
            ],
        );
        let r = c.faulty("wait_flag");
        Cell::assert_outcome(r, "declined", Some("lock_contention"));
        assert_eq!(r["passes"], 1, "{scenario}: {r}");
        let ms: f64 = c
            .run
            .stdout()
            .lines()
            .find_map(|l| l.strip_prefix("flag-wait completed_ms="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{scenario}: no completed_ms line"));
        assert!(ms < 5000.0, "{scenario}: completed after {ms} ms");
        // flag-queue: the dispatch that sets the flag runs on an aside lane of the GPU (created
        // then, and kept, like the replay queue: hsa-emu serves each queue with a thread),
        // declined at once while the first pass holds the replay queue.
        let aside = i64::from(scenario == "flag-queue");
        c.assert_frame_with_threads(3, aside);
        if scenario == "flag-queue" {
            let setter = c.of("inc_in_place");
            assert_eq!(setter.len(), 3, "{setter:?}");
            Cell::assert_outcome(setter[1], "declined", Some("drain_timeout"));
        }
    }
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_copy_that_waits_for_the_dispatch_never_makes_its_long_first_pass_give_way() {
    // A copy submitted while the window runs, depending on the dispatch's completion signal:
    // it waits for the window, but it cannot be what the dispatch waits for. The first pass
    // (1 s) outlasts the yield deadline (200 ms): the dispatch is still replayed.
    let c = cell(
        "copy-after",
        &[("ROCPROF_REPLAY_YIELD_MS", "200"), ("SLOW_MS", "1000")],
    );
    let r = c.faulty("slow_inc");
    Cell::assert_outcome(r, "replayed", None);
    assert_eq!(r["passes"], 3, "{r}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn another_queue_waiting_for_a_marker_behind_a_replayed_dispatch_does_not_hold_its_window() {
    // hipStreamWaitEvent across streams: queue 2 waits for a marker behind inc_in_place on
    // queue 1, submitted while inc_in_place's window waits behind slow_inc's. The window must
    // not wait for that barrier (it waits for what follows the dispatch): both dispatches are
    // replayed, nothing times out.
    // The same with the barrier waiting for inc_in_place's own completion signal.
    // With a first pass longer than the yield deadline too: queue 2's barrier waits for a
    // signal that resolves only after the window, so it never makes that pass give way.
    for (scenario, env) in [
        ("cross-wait", &[][..]),
        ("cross-wait-done", &[][..]),
        (
            "cross-wait",
            &[("SLOW_MS", "1000"), ("ROCPROF_REPLAY_YIELD_MS", "200")][..],
        ),
    ] {
        let c = cell(scenario, env);
        let r = c.faulty("slow_inc");
        Cell::assert_outcome(r, "replayed", None);
        let incs = c.of("inc_in_place");
        assert_eq!(incs.len(), 3, "{scenario}: {incs:?}");
        Cell::assert_outcome(incs[1], "replayed", None);
        c.assert_frame(3);
    }
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_kernel_given_host_memory_the_host_writes_completes_and_is_never_restored() {
    // The flag's address is the argument: host memory (a CPU pool's fine-grained memory, and
    // malloc'd memory locked for the GPU) that the host writes right after the submission. It
    // is watched, never restored: when the store lands during the first pass the window stops
    // after it (`host_memory_written`); when it landed before, the kernel only reads it and
    // is replayed. Either way the application sees one execution that saw its store.
    for scenario in ["flag-wait-direct", "flag-wait-locked"] {
        let c = cell(scenario, &[]);
        let r = c.faulty("wait_flag");
        match (r["outcome"].as_str(), r["reason"].as_str()) {
            (Some("declined"), Some("host_memory_written")) => {
                assert_eq!(r["passes"], 1, "{scenario}: {r}")
            }
            (Some("replayed"), None) => assert_eq!(r["passes"], 3, "{scenario}: {r}"),
            _ => panic!("{scenario}: {r}"),
        }
        c.assert_frame(3);
    }
}

/// One `mem-KIND` cell: the scenario's dispatch writes a buffer of that memory kind; the
/// application sees one execution (the probe checks every word) and the record says `want`.
fn memory_kind_cell(scenario: &str, env: &[(&str, &str)], want: (&str, Option<&str>)) {
    let c = cell(scenario, env);
    let out = c.run.stdout();
    assert!(
        out.contains(&format!("mem {} OK", &scenario[4..])),
        "{scenario}: {out}"
    );
    let incs = c.of("inc_in_place");
    assert_eq!(incs.len(), 3, "{scenario}: {incs:?}");
    Cell::assert_outcome(incs[1], want.0, want.1);
    let passes = if want.0 == "replayed" { 3 } else { 1 };
    assert_eq!(incs[1]["passes"], passes, "{scenario}: {}", incs[1]);
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn vmem_mappings_are_replayed_only_where_the_window_can_restore_them() {
    // A mapping of the GPU's coarse-grained memory is snapshotted like any allocation; a
    // fine-grained (host-visible) one may be written by the host at any time; an imported
    // handle's memory by another process. Before the last two were recorded, both were
    // unknown to the window: replayed three times, the application read i + 3.
    memory_kind_cell("mem-vmem-device", &[], ("replayed", None));
    memory_kind_cell("mem-vmem-fine", &[], ("declined", Some("host_memory")));
    memory_kind_cell("mem-vmem-import", &[], ("declined", Some("foreign_memory")));
    // Exported as a dmabuf after it was mapped: another process may map and write it.
    memory_kind_cell("mem-vmem-export", &[], ("declined", Some("foreign_memory")));
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn another_gpus_memory_runs_once_declined_up_front() {
    // The window drains, fences and captures only its own GPU: the peer's allocation is not in
    // its snapshot. Before this was checked, the kernel was replayed three times and the
    // application read i + 3.
    memory_kind_cell(
        "mem-peer",
        &[("HSA_EMU_GPUS", "2")],
        ("declined", Some("peer_memory")),
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn ipc_attachments_and_shared_virtual_memory_run_once_declined_up_front() {
    // An IPC attachment is memory another process owns and writes (an exported allocation
    // likewise, for the exporter); system memory made reachable with
    // hsa_amd_svm_attributes_set (where the GPU does not reach all system memory by default)
    // is memory the host writes without any call the backend sees.
    let foreign = ("declined", Some("foreign_memory"));
    memory_kind_cell("mem-ipc", &[], foreign);
    // The exporter's side: the process that attaches it may write it at any time.
    memory_kind_cell("mem-ipc-exporter", &[], foreign);
    // Exported as a dmabuf through a pointer into its middle: another process, or a NIC
    // through RDMA, may write any of it.
    memory_kind_cell("mem-dmabuf", &[], foreign);
    memory_kind_cell(
        "mem-svm",
        &[("HSA_EMU_SVM_BY_DEFAULT", "0")],
        ("declined", Some("host_memory")),
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn another_process_writing_exported_memory_during_a_window_is_never_undone() {
    // A second process (its own runtime, no tool) attaches this process's exported buffer and
    // stores into it 150 ms into the kernel's 400 ms first pass. Replayed, the store's granule
    // would differ from the snapshot after pass 1 and be restored: the store lost.
    let c = cell(
        "ipc-writer",
        &[("SLOW_MS", "400"), ("WRITE_AFTER_MS", "150")],
    );
    assert!(
        c.run.stdout().contains("ipc-writer OK"),
        "{}",
        c.run.stdout()
    );
    let r = c.faulty("slow_inc");
    Cell::assert_outcome(r, "declined", Some("foreign_memory"));
    assert_eq!(r["passes"], 1, "{r}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_dispatch_submitted_on_the_runtime_async_thread_is_replayed_behind_its_gate() {
    // The window runs on the GPU's lane, not on the runtime's thread that submitted it: the
    // handler returns at once and nothing the runtime finishes on that thread is waited for.
    let c = cell("handler-dispatch", &[]);
    let r = c.faulty("inc_in_place");
    Cell::assert_outcome(r, "replayed", None);
    assert_eq!(r["passes"], 3, "{r}");
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_free_and_reallocation_during_capture_wait_and_are_never_restored_over() {
    // Every async copy takes 150 ms: the capture of three regions lasts ~450 ms and the free
    // comes 100 ms into it. The free waits for the capture; the new allocation's bytes (0x22)
    // must survive the restores.
    let c = cell(
        "free-during",
        &[
            ("E2E_KERNEL", "slow_inc"),
            ("FAULT_ARM", "COPY_DELAY_MS=150"),
            ("FREE_AFTER_MS", "100"),
            ("SLOW_MS", "20"),
        ],
    );
    let r = c.faulty("slow_inc");
    Cell::assert_outcome(r, "replayed", None);
    assert!(r["skipped_regions"].as_u64().unwrap() >= 1, "{r}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_free_and_reallocation_during_a_restore_wait_and_are_never_restored_over() {
    // Capture ~450 ms, pass 1 ~20 ms, then the diff and the first restore (~450 ms each): the
    // free comes 650 ms in, while they copy the freed buffer. Every allocation is captured
    // (`all`): with the arguments footprint the freed buffer would only be watched, and the one
    // check after the first pass comes before the free.
    let c = cell(
        "free-during",
        &[
            ("E2E_KERNEL", "slow_inc"),
            ("E2E_PLAN", "exactly:3"),
            ("ROCPROF_REPLAY_FOOTPRINT", "all"),
            ("FAULT_ARM", "COPY_DELAY_MS=150"),
            ("FREE_AFTER_MS", "650"),
            ("SLOW_MS", "20"),
        ],
    );
    let r = c.faulty("slow_inc");
    Cell::assert_outcome(r, "replayed", None);
    assert!(r["skipped_regions"].as_u64().unwrap() >= 1, "{r}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_policy_panicking_in_any_callback_leaves_one_correct_execution() {
    for at in [
        "pass_count",
        "on_pass:0",
        "on_pass:1",
        "on_pass_end:1",
        "should_continue",
        "on_end",
    ] {
        let plan = if at == "should_continue" {
            "upto:3"
        } else {
            "exactly:3"
        };
        let c = cell(
            "inc",
            &[("E2E_PANIC", at), ("E2E_PLAN", plan), ("E2E_KERNEL", "inc")],
        );
        let recs = c.of("inc_in_place");
        assert_eq!(recs.len(), 3, "{at}: {recs:?}");
        for r in recs {
            if at == "on_end" {
                // The window completed; the panic came after it.
                assert_eq!(r["outcome"], "replayed", "{at}: {r}");
            } else {
                Cell::assert_outcome(r, "declined", Some("policy_panicked"));
            }
        }
        assert!(
            c.run.stderr().contains("panicked"),
            "{at}: {}",
            c.run.stderr()
        );
    }
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_absurd_pass_count_is_declined_and_the_app_is_right() {
    // Every dispatch asks for 4e9 passes: declined at once, each runs once.
    let c = cell(
        "slow",
        &[
            ("E2E_PLAN", "exactly:4000000000"),
            ("SLOW_RUN", "0"),
            ("SLOW_MS", "0"),
        ],
    );
    for r in &c.records {
        Cell::assert_outcome(r, "declined", Some("too_many_passes"));
    }
    assert_eq!(
        c.records.len(),
        3,
        "warm-up, slow_inc, next: {:?}",
        c.records
    );
    let (f0, f1) = c.resource("fds");
    assert_eq!(f0, f1);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_tool_whose_constructor_panics_is_not_loaded_and_the_app_runs() {
    let (exe, kernels) = fault_probe();
    let lib = tool_lib("e2e_plan_tool");
    let run = run_on_emu(
        &exe,
        &[kernels.to_str().unwrap(), "inc"],
        &[("LD_PRELOAD", lib.to_str().unwrap()), ("E2E_PANIC", "new")],
        DEADLINE,
    );
    run.assert_success();
    assert!(run.stdout().contains("RESULT fault_probe OK inc"));
    assert!(
        run.stderr().contains("constructor panicked") && run.stderr().contains("runs without"),
        "{}",
        run.stderr()
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_forked_child_runs_without_replay_and_never_deadlocks() {
    let c = cell("fork", &[("E2E_PLAN", "exactly:3"), ("SLOW_MS", "300")]);
    c.assert_frame(3);
    // Only the parent records: warm-up, the window the fork happened in, the next dispatch.
    assert_eq!(c.records.len(), 3, "{:?}", c.records);
    Cell::assert_outcome(c.faulty("slow_inc"), "replayed", None);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_communication_kernel_runs_once_declined_up_front() {
    // The plan asks for 3 passes; a collective would wait for peers on the second.
    let c = cell("nccl", &[]);
    let r = c.faulty("ncclDevKernel_probe");
    Cell::assert_outcome(r, "declined", Some("communication_kernel"));
    assert_eq!(
        (r["passes"].as_u64(), r["snapshot_bytes"].as_u64()),
        (Some(1), Some(0))
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_async_copy_the_engine_fails_reports_its_error_value_to_the_application() {
    // The copy is fenced (a proxy signal of the tool's stands in for the application's): the
    // application must see the -1 the runtime left in the proxy, not a successful 0.
    let c = cell("copy-error", &[("FAULT_ARM", "COPY_ERROR_NTH=1")]);
    assert!(
        c.run.stdout().contains("copy-error signal=-1"),
        "{}",
        c.run.stdout()
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn queues_destroyed_by_another_thread_mid_window_neither_hold_nor_wedge_the_windows() {
    // Queue 2 holds a barrier that never resolves; another thread destroys queue 2 while
    // inc_in_place's window drains it: the runtime dropped that barrier, so the window goes on
    // (before: it waited for it until the drain deadline, and declined). Then a dispatch
    // behind such a barrier on queue 3, whose queue is destroyed while its window waits for
    // its predecessors: the runtime dropped it, so it does not run at all, and its completion
    // signal, kernarg and buffer, which the application then frees, are left alone (before:
    // its window declined at the deadline and queued its ordinary run on the replay queue
    // behind a barrier that never resolves, which wedged every later window of the GPU and
    // the application's next dispatch never completed).
    let c = cell(
        "queue-destroy",
        &[
            ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "5000"),
            ("DESTROY_AFTER_MS", "300"),
        ],
    );
    let incs = c.of("inc_in_place");
    assert_eq!(incs.len(), 4, "warm-up, queue 1, queue 3, next: {incs:?}");
    Cell::assert_outcome(incs[1], "replayed", None);
    assert_eq!(incs[1]["passes"], 3, "{}", incs[1]);
    Cell::assert_outcome(incs[2], "declined", Some("queue_destroyed"));
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_queue_the_tool_could_not_intercept_declines_the_gpus_windows_while_it_lives() {
    // Queue 2's interception fails, so the tool hands the application a plain queue whose work
    // it never sees: a window could neither drain it nor hold it back (before: the window went
    // on, with queue 2's slow_inc running beside it). While queue 2 lives the GPU's dispatches
    // run once; once it is destroyed they are replayed again (the frame's next dispatch).
    let c = cell(
        "untracked-queue",
        &[("FAULT_ARM", "FAIL_QUEUE_INTERCEPT=1"), ("SLOW_MS", "300")],
    );
    Cell::assert_outcome(
        c.faulty("inc_in_place"),
        "declined",
        Some("queue_not_drainable"),
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn without_a_replay_queue_every_window_runs_its_dispatch_once_on_the_submitting_thread() {
    // The GPU's replay queue cannot be created (plain queue creation fails, the application's
    // intercepted queues do not): each window stays on the submitting thread and declines,
    // forwarding the dispatch once as submitted. The application checks every value exactly
    // (one execution each) and sees one completion of each.
    let c = cell("inc", &[("HSA_EMU_FAIL_QUEUE_CREATE", "1")]);
    let incs = c.of("inc_in_place");
    assert_eq!(incs.len(), 3, "{incs:?}");
    for r in incs {
        Cell::assert_outcome(r, "declined", Some("submit_failed"));
    }
    let (t0, t1) = c.resource("threads");
    assert_eq!(t0, t1, "threads");
    let (f0, f1) = c.resource("fds");
    assert_eq!(f0, f1, "file descriptors");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_async_copy_the_runtime_refuses_returns_its_error_and_leaves_the_signal_alone() {
    // The fenced copy's submission (with the tool's proxy signal) fails: the application gets
    // the runtime's status and its own signal untouched, as without the tool.
    let c = cell("copy-refused", &[("FAULT_ARM", "FAIL_COPY_NTH=1")]);
    assert!(
        c.run
            .stdout()
            .contains("copy-refused status=0x1000 signal=1"),
        "{}",
        c.run.stdout()
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_async_copy_the_tool_cannot_fence_ends_replay_on_its_gpu() {
    // The second of two copies held on the copy engine cannot get a proxy signal (its
    // creation fails): it is submitted unfenced, and no window can know when it ends. The
    // dispatch submitted while it runs, and every later one of that GPU, run once
    // (`queue_not_drainable`) rather than let a window restore memory under it. The probe
    // checks the copies' data and both increments exactly.
    let c = cell(
        "unfenced-copy",
        &[("FAULT_ARM", "COPY_DELAY_MS=300,FAIL_SIGNAL_CREATE_NTH=1")],
    );
    assert!(
        c.run
            .stdout()
            .contains("unfenced-copy b and c hold the pattern"),
        "{}",
        c.run.stdout()
    );
    assert!(
        c.run.stderr().contains("run unfenced"),
        "the warning names the unfenced copy: {}",
        c.run.stderr()
    );
    let incs = c.of("inc_in_place");
    assert_eq!(
        incs.len(),
        4,
        "warm-up, during the copies, after, the frame's: {incs:?}"
    );
    Cell::assert_outcome(incs[0], "replayed", None);
    for r in &incs[1..] {
        Cell::assert_outcome(r, "declined", Some("queue_not_drainable"));
    }
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_dispatch_held_by_a_late_predecessor_never_holds_another_queues_dispatch() {
    // Queue 2: a barrier waiting for a signal the application sets only after queue 1's
    // dispatch completed, and an inc_in_place behind it. Its window declines at the drain
    // deadline (its predecessors have not finished); its run must not hold queue 1's dispatch
    // (before: it was queued on the GPU's in-order replay queue behind a barrier on the ready
    // signal, and every later dispatch of the GPU waited there: the application never saw
    // queue 1's dispatch complete, so it never set the signal — a hang). The run happens once
    // its predecessors finished; the application checks both buffers exactly.
    let c = cell(
        "held-predecessor",
        &[("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "1000")],
    );
    let incs = c.of("inc_in_place");
    assert_eq!(incs.len(), 4, "warm-up, queue 2, queue 1, next: {incs:?}");
    Cell::assert_outcome(incs[1], "declined", Some("drain_timeout"));
    // Queue 1's window drains queue 2 up to that barrier, which waits for the application.
    Cell::assert_outcome(incs[2], "declined", Some("drain_timeout"));
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn drains_that_wait_for_work_waiting_for_their_dispatch_give_way_at_the_yield_deadline() {
    // `held-predecessor` again, with a drain deadline far beyond the yield deadline: queue 2's
    // predecessors wait for queue 1's dispatch, which waits for the GPU's window: its drain
    // gives way after the yield deadline (300 ms) rather than the drain deadline (20 s), and
    // the work it waited for is remembered, so queue 1's window (whose drain of queue 2 would
    // wait for its own dispatch) declines at once. Before, each waited the whole drain
    // deadline (the fault cell above sets it to 1 s to stay short).
    let c = cell(
        "held-predecessor",
        &[
            ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "20000"),
            ("ROCPROF_REPLAY_YIELD_MS", "300"),
        ],
    );
    let incs = c.of("inc_in_place");
    assert_eq!(incs.len(), 4, "warm-up, queue 2, queue 1, next: {incs:?}");
    let window_ns = |r: &serde_json::Value| r["window_ns"].as_u64().unwrap_or(u64::MAX);
    Cell::assert_outcome(incs[1], "declined", Some("lock_contention"));
    assert!(
        window_ns(incs[1]) < 10_000_000_000,
        "waited the drain deadline: {}",
        incs[1]
    );
    Cell::assert_outcome(incs[2], "declined", Some("drain_timeout"));
    assert!(
        window_ns(incs[2]) < 500_000_000,
        "declined at once: {}",
        incs[2]
    );
    Cell::assert_outcome(incs[3], "replayed", None);
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_queue_that_never_drains_costs_one_drain_deadline_not_one_per_dispatch() {
    // Queue 2 holds a barrier waiting for a signal the application sets only after three
    // dispatches on queue 1 (a communication kernel waiting for its peers looks the same to a
    // drain). The first window waits the drain deadline for it; the next ones know it is
    // still stuck and decline at once; once it is done, replay resumes.
    one_drain_deadline_for("stuck-queue", "queue");
}

/// Runs `scenario` (work that does not finish until after three dispatches on queue 1) with a
/// 1 s drain deadline: the first of those declines `drain_timeout` after the deadline, the next
/// two at once (the stuck `what` is remembered), and replay resumes once the work is done.
fn one_drain_deadline_for(scenario: &str, what: &str) {
    let c = cell(scenario, &[("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "1000")]);
    let incs = c.of("inc_in_place");
    assert_eq!(
        incs.len(),
        6,
        "warm-up, three while stuck, one after, the frame's: {incs:?}"
    );
    for (i, r) in incs[1..4].iter().enumerate() {
        Cell::assert_outcome(r, "declined", Some("drain_timeout"));
        let window_ns = r["window_ns"].as_u64().unwrap_or(0);
        if i == 0 {
            assert!(window_ns >= 1_000_000_000, "the first waited: {r}");
        } else {
            assert!(
                window_ns < 500_000_000,
                "dispatch {} waited for the same stuck {what} again: {r}",
                i + 1
            );
        }
    }
    Cell::assert_outcome(incs[4], "replayed", None);
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_copy_that_never_completes_costs_one_drain_deadline_not_one_per_dispatch() {
    // An asynchronous copy into the GPU's memory waits for a signal the application sets only
    // after three dispatches: the first window waits the drain deadline for it, the next ones
    // decline at once while it is still listed; once it is done, replay resumes.
    one_drain_deadline_for("stuck-copy", "copy");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn the_application_reads_dispatch_times_of_a_replayed_dispatch() {
    let c = cell("dispatch-time", &[]);
    assert!(
        c.run.stdout().contains("dispatch-time ns="),
        "{}",
        c.run.stdout()
    );
    Cell::assert_outcome(c.faulty("inc_in_place"), "replayed", None);
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn records_are_written_before_the_application_sees_completion_even_without_exit_handlers() {
    // The probe leaves with _exit right after its last dispatch completed: no hsa_shut_down,
    // no atexit handler. Every dispatch's record must be in the file already.
    let c = cell("inc", &[("FAULT_EXIT", "immediate")]);
    assert_eq!(
        c.of("inc_in_place").len(),
        3,
        "warm-up, scenario, next: {:?}",
        c.records
    );
    c.assert_frame(3);
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn soak_a_hundred_thousand_replayed_dispatches_leak_nothing_and_lose_no_record() {
    const N: u64 = 100_000;
    let n = N.to_string();
    let c = cell("soak", &[("E2E_PLAN", "exactly:2"), ("SOAK_N", &n)]);
    let out = c.run.stdout();
    let start = out
        .lines()
        .find_map(|l| l.strip_prefix("soak start "))
        .expect("the soak prints its start resources");
    let at = |line: &str, key: &str| -> i64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    let (rss0, threads0, fds0) = (at(start, "rss_kb"), at(start, "threads"), at(start, "fds"));
    let (_, rss1) = c.resource("rss_kb");
    let (_, threads1) = c.resource("threads");
    let (_, fds1) = c.resource("fds");
    println!(
        "soak of {N}: threads {threads0} -> {threads1}, fds {fds0} -> {fds1}, RSS {rss0} KiB -> \
         {rss1} KiB, {:.1} s",
        c.run.elapsed.as_secs_f64()
    );
    assert_eq!(threads0, threads1, "threads");
    assert_eq!(fds0, fds1, "file descriptors");
    assert!(
        rss1 - rss0 < 16 << 10,
        "RSS grew by {} KiB over {N} dispatches",
        rss1 - rss0
    );
    // Warm-up, N, next: every record there, each once, each replayed with its 2 passes.
    assert_eq!(c.records.len() as u64, N + 2, "records lost");
    let mut ids: Vec<u64> = c
        .records
        .iter()
        .map(|r| r["dispatch_id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, N + 2, "duplicate records");
    let other: Vec<&serde_json::Value> = c
        .records
        .iter()
        .filter(|r| r["outcome"] != "replayed" || r["passes"] != 2)
        .collect();
    assert!(
        other.is_empty(),
        "every soak dispatch is replayed twice; these were not: {other:?}\n{}",
        c.run.stderr()
    );
}
