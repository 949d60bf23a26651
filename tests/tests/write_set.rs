//! Write-set restore end to end on hsa-emu: a kernel that writes 3 of the 64 granules of a
//! 256 KiB buffer plus a module variable, and on later passes one element elsewhere. The
//! application checks that it sees exactly the first execution's result; the records say how
//! memory was restored.

use std::time::Duration;

use rocprof_replay_e2e::{read_records, records_path, run_on_emu, tool_lib, write_set_probe};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);

/// Bytes of the buffer (65536 u32) plus the 4-byte module variable `hit_counter`.
const SNAPSHOT: u64 = 65536 * 4 + 4;
/// Granules 0..2 of the buffer (4 KiB each) plus the module variable's only granule.
const W1: u64 = 3 * 4096 + 4;
/// The granule later passes write (element 40000 + p).
const EXTRA: u64 = 4096;

fn run(passes: u32, restore: &str) -> Value {
    let (exe, kernels) = write_set_probe();
    let records = records_path(&format!("write_set_{restore}_{passes}"));
    let lib = tool_lib("e2e_plan_tool");
    let plan = format!("exactly:{passes}");
    let env: Vec<(&str, &str)> = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
        ("ROCPROF_REPLAY_RESTORE", restore),
        ("E2E_PLAN", &plan),
    ];
    let run = run_on_emu(&exe, &[kernels.to_str().unwrap()], &env, DEADLINE);
    run.assert_success();
    assert!(
        run.stdout()
            .contains(&format!("RESULT write_set_probe OK passes={passes}")),
        "{}",
        run.stdout()
    );
    let recs = read_records(&records);
    let r: Vec<&Value> = recs
        .iter()
        .filter(|r| r["kernel"] == "write_subset")
        .collect();
    assert_eq!(r.len(), 1, "{recs:?}");
    assert_eq!(r[0]["outcome"], "replayed", "{r:?}");
    assert_eq!(r[0]["snapshot_bytes"], SNAPSHOT, "{r:?}");
    assert_eq!(r[0]["written_bytes"], W1, "{r:?}");
    r[0].clone()
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn write_set_restore_restores_what_pass_one_wrote_and_the_app_sees_pass_one() {
    let r = run(3, "auto");
    assert_eq!(r["restore_mode"], "write_set", "{r:?}");
    // W1 before passes 2 and 3; the final diff finds the extra granule (restored from the
    // snapshot); then pass 1's result is written back.
    assert_eq!(r["restored_bytes"], 2 * W1 + EXTRA + W1, "{r:?}");
    // The diff after pass 1 and the final one each compared the whole snapshot.
    assert_eq!(r["verified_bytes"], 2 * SNAPSHOT, "{r:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn strict_restore_verifies_before_every_pass() {
    let r = run(3, "strict");
    assert_eq!(r["restore_mode"], "strict", "{r:?}");
    // Before pass 2: W1, nothing else differs. Before pass 3: W1, and the verification finds
    // pass 2's extra granule. At the end: pass 3's extra granule, then pass 1's result.
    assert_eq!(r["restored_bytes"], 3 * W1 + 2 * EXTRA, "{r:?}");
    assert_eq!(r["verified_bytes"], 4 * SNAPSHOT, "{r:?}");
}
