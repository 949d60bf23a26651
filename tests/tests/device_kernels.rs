//! The HSA backend's device kernels end to end on hsa-emu: the compare kernel finds the write
//! set of a snapshot staged in the GPU's VRAM and the fingerprint kernel hashes watched memory,
//! both from the committed gfx90a code object (`rocprof-replay/kernels/amdgpu`), loaded through
//! the runtime's loader and dispatched on the replay queue, where hsa-emu runs their built-in
//! shadows. `write_set_probe` checks in every run that the application sees exactly one
//! execution's result; the debug log and the records say where the comparisons ran.

use std::time::Duration;

use rocprof_replay_e2e::{read_records, records_path, run_on_emu, tool_lib, write_set_probe};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);

/// What the backend logs (at debug level) after each device compare and fingerprint.
const COMPARED: &str = "write set found by the device compare kernel";
const FINGERPRINTED: &str = "watched memory fingerprinted by the device kernel";

/// Runs write_set_probe under the plan tool with 3 passes, debug logging and `extra`
/// environment; returns the records of `kernel` and the run's stderr.
fn run(name: &str, kernel: &str, extra: &[(&str, &str)], expect: &str) -> (Vec<Value>, String) {
    let (exe, kernels) = write_set_probe();
    let records = records_path(&format!("device_kernels_{name}"));
    let lib = tool_lib("e2e_plan_tool");
    let mut env: Vec<(&str, &str)> = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "debug"),
        ("E2E_PLAN", "exactly:3"),
    ];
    env.extend_from_slice(extra);
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap()], &env, DEADLINE);
    run.assert_success();
    let out = run.stdout();
    assert!(out.contains(expect), "{out}");
    let recs: Vec<Value> = read_records(&records)
        .into_iter()
        .filter(|r| r["kernel"] == kernel)
        .collect();
    (recs, run.stderr())
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn the_write_set_of_a_vram_snapshot_is_found_by_the_device_compare_kernel() {
    let (recs, err) = run(
        "compare",
        "write_subset",
        &[],
        "RESULT write_set_probe OK passes=3",
    );
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!(r["outcome"], "replayed", "{r}");
    assert_eq!(r["staging"], "device", "{r}");
    assert_eq!(r["restore_mode"], "write_set", "{r}");
    // What pass 1 wrote: 3 granules of the buffer and the module variable, as the host
    // compare finds it (tests/tests/write_set.rs).
    assert_eq!(r["written_bytes"], 3 * 4096 + 4, "{r}");
    assert_eq!(r["compared_on"], "device", "{r}");
    assert!(err.contains("device compare kernels loaded"), "{err}");
    // The diff after pass 1 and the final one.
    assert!(err.matches(COMPARED).count() >= 2, "{err}");
    assert!(!err.contains("no device compare kernels"), "{err}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn watched_memory_is_fingerprinted_by_the_device_kernel_and_a_write_there_is_seen() {
    // write_subset_indirect writes a buffer its arguments do not name: the fingerprints of
    // the watched buffer, computed by the device kernel, see pass 1 write it, and replay
    // stops there (the application's own execution); the second dispatch captures every
    // allocation and is replayed (tests/tests/write_set.rs runs the same with the host).
    let (recs, err) = run(
        "fingerprint",
        "write_subset_indirect",
        &[("WS_INDIRECT", "1"), ("WS_DISPATCHES", "2")],
        "RESULT write_set_probe OK passes=1,3",
    );
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(
        (recs[0]["outcome"].as_str(), recs[0]["reason"].as_str()),
        (Some("declined"), Some("wrote_outside_footprint")),
        "{recs:?}"
    );
    assert!(
        recs[0]["watched_bytes"].as_u64().unwrap() >= 65536 * 4,
        "{recs:?}"
    );
    assert_eq!(recs[1]["outcome"], "replayed", "{recs:?}");
    assert!(
        err.matches(FINGERPRINTED).count() >= 2,
        "before and after pass 1: {err}"
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_snapshot_in_pinned_host_memory_is_compared_on_the_host() {
    // 8 MiB of VRAM and a 4 MiB buffer: the snapshot goes to pinned host memory, which the
    // host reads directly; no compare kernel runs, the result is the same.
    let (recs, err) = run(
        "pinned",
        "write_subset",
        &[("HSA_EMU_VRAM_MB", "8"), ("WS_N", "1048576")],
        "RESULT write_set_probe OK passes=3",
    );
    let r = &recs[0];
    assert_eq!(r["staging"], "pinned_host", "{r}");
    assert_eq!(r["restore_mode"], "write_set", "{r}");
    assert_eq!(r["compared_on"], "host", "{r}");
    assert!(!err.contains(COMPARED), "{err}");
}
