//! The HSA backend's device tier end to end on hsa-emu (`HSA_EMU_VRAM_MB` accounts emulated
//! VRAM): a snapshot staged in the GPU's own VRAM, the fall-back to pinned host memory when the
//! footprint does not fit beside the reserve, and an application allocation that only fits once
//! the snapshot arena is released. `write_set_probe` checks in every run that the application
//! sees exactly one execution's result; the records say where the snapshot lived.

use std::time::Duration;

use rocprof_replay_e2e::{read_records, records_path, run_on_emu, tool_lib, write_set_probe};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);

/// 1 Mi u32 elements: a 4 MiB device buffer.
const N_4MIB: &str = "1048576";

/// Runs write_set_probe under the plan tool with 3 passes and `extra` environment; returns the
/// record of `write_subset` and the run's stderr.
fn run(name: &str, extra: &[(&str, &str)], expect_stdout: &str) -> (Value, String) {
    let (exe, kernels) = write_set_probe();
    let records = records_path(&format!("device_tier_{name}"));
    let lib = tool_lib("e2e_plan_tool");
    let mut env: Vec<(&str, &str)> = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
        ("E2E_PLAN", "exactly:3"),
    ];
    env.extend_from_slice(extra);
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap()], &env, DEADLINE);
    run.assert_success();
    let out = run.stdout();
    assert!(out.contains("RESULT write_set_probe OK passes=3"), "{out}");
    assert!(out.contains(expect_stdout), "{out}");
    let recs = read_records(&records);
    let r: Vec<&Value> = recs
        .iter()
        .filter(|r| r["kernel"] == "write_subset")
        .collect();
    assert_eq!(r.len(), 1, "{recs:?}");
    assert_eq!(r[0]["outcome"], "replayed", "{r:?}");
    assert_eq!(r[0]["passes"], 3, "{r:?}");
    (r[0].clone(), run.stderr())
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_snapshot_is_staged_in_the_gpus_vram_and_write_set_restore_still_works() {
    let (r, _) = run("device", &[], "");
    assert_eq!(r["staging"], "device", "{r:?}");
    // The diff read the device-resident snapshot back and found what pass 1 wrote (3
    // granules of the buffer plus the module variable), as with host staging.
    assert_eq!(r["restore_mode"], "write_set", "{r:?}");
    assert_eq!(r["written_bytes"], 3 * 4096 + 4, "{r:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_footprint_larger_than_vram_minus_the_reserve_is_staged_in_pinned_host_memory() {
    // 8 MiB of VRAM, a 4 MiB buffer: 4 MiB free, less than the snapshot plus the default
    // reserve (a tenth of the pool).
    let (r, _) = run(
        "small_vram",
        &[("HSA_EMU_VRAM_MB", "8"), ("WS_N", N_4MIB)],
        "",
    );
    assert_eq!(r["staging"], "pinned_host", "{r:?}");
    // The reserve is the documented knob: 16 MiB of VRAM, 12 MiB free.
    let (r, _) = run(
        "reserve_9",
        &[
            ("HSA_EMU_VRAM_MB", "16"),
            ("WS_N", N_4MIB),
            ("ROCPROF_REPLAY_DEVICE_RESERVE_MB", "9"),
        ],
        "",
    );
    assert_eq!(r["staging"], "pinned_host", "4 MiB + 9 MiB > 12 MiB: {r:?}");
    let (r, _) = run(
        "reserve_7",
        &[
            ("HSA_EMU_VRAM_MB", "16"),
            ("WS_N", N_4MIB),
            ("ROCPROF_REPLAY_DEVICE_RESERVE_MB", "7"),
        ],
        "",
    );
    assert_eq!(r["staging"], "device", "4 MiB + 7 MiB <= 12 MiB: {r:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn an_application_allocation_short_of_vram_succeeds_after_the_arena_is_released() {
    // 16 MiB of VRAM: the 4 MiB buffer, the arena's ~4 MiB chunk (kept after the window, the
    // reserve is free), then 10 MiB more, which only fits once the arena gives its chunk back.
    let (r, stderr) = run(
        "retry",
        &[
            ("HSA_EMU_VRAM_MB", "16"),
            ("WS_N", N_4MIB),
            ("WS_ALLOC_AFTER_MB", "10"),
        ],
        "late allocation OK",
    );
    assert_eq!(r["staging"], "device", "{r:?}");
    assert!(
        stderr.contains("the arena is released and the allocation retried"),
        "{stderr}"
    );
    // The same through the region API (`hsa_memory_allocate`).
    let (r, stderr) = run(
        "retry_region",
        &[
            ("HSA_EMU_VRAM_MB", "16"),
            ("WS_N", N_4MIB),
            ("WS_ALLOC_AFTER_MB", "10"),
            ("WS_ALLOC_AFTER_REGION", "1"),
        ],
        "late allocation OK",
    );
    assert_eq!(r["staging"], "device", "{r:?}");
    assert!(
        stderr.contains("the arena is released and the allocation retried"),
        "{stderr}"
    );
}
