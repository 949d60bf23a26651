//! The example tools (`examples/*`) on hsa-emu, each preloaded into the replay probe.

use std::time::Duration;

use rocprof_replay_e2e::{Run, replay_probe, run_on_emu, tool_lib};
use serde_json::Value;

fn run_tool(tool: &str, mode: &str, env: &[(&str, &str)]) -> Run {
    let (exe, kernels) = replay_probe();
    let lib = tool_lib(tool);
    let mut all = vec![("LD_PRELOAD", lib.to_str().unwrap())];
    if mode == "checksum" {
        // The probe's kernel records every pass in fine-grained memory its arguments name.
        all.push(("ROCPROF_REPLAY_HOST_MEMORY", "repeat"));
    }
    all.extend_from_slice(env);
    let run = run_on_emu(
        &exe,
        &[kernels.to_str().unwrap(), mode],
        &all,
        Duration::from_secs(120),
    );
    run.assert_success();
    run
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn pass_timer_prints_one_line_per_dispatch_with_five_passes() {
    let run = run_tool("pass_timer", "checksum", &[]);
    assert!(
        run.stdout()
            .contains("passes_recorded=5 identical_inputs=1"),
        "{}",
        run.stdout()
    );
    let lines: Vec<String> = run
        .stderr()
        .lines()
        .filter(|l| l.starts_with("pass_timer:"))
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("checksum_then_scribble") && lines[0].contains("replayed, 5 passes"),
        "{}",
        lines[0]
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn pass_timer_honours_rocprof_replay_passes() {
    let run = run_tool("pass_timer", "checksum", &[("ROCPROF_REPLAY_PASSES", "3")]);
    assert!(
        run.stdout().contains("passes_recorded=3"),
        "{}",
        run.stdout()
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn selective_replays_only_matching_kernels() {
    let env = [
        ("ROCPROF_REPLAY_KERNEL", "^inc_in_place$"),
        ("ROCPROF_REPLAY_PASSES", "4"),
    ];
    let run = run_tool("selective", "concurrent", &env);
    let stderr = run.stderr();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("selective:"))
        .collect();
    assert_eq!(
        lines.len(),
        20,
        "one line per replayed inc_in_place: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains("inc_in_place") && !l.contains("vector_add"))
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn adaptive_timer_stops_within_its_bounds() {
    let env = [("ROCPROF_REPLAY_MAX_PASSES", "12")];
    let run = run_tool("adaptive_timer", "checksum", &env);
    let out = run.stdout();
    let recorded: u32 = out
        .split("passes_recorded=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!((3..=12).contains(&recorded), "{recorded} passes");
    assert!(out.contains("identical_inputs=1"), "{out}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn a_context_enabled_on_pass_two_only_times_only_pass_two() {
    let env = [
        ("ROCPROF_REPLAY_PASSES", "4"),
        ("ROCPROF_REPLAY_TIMED_PASSES", "2"),
    ];
    let run = run_tool("user_state", "checksum", &env);
    let line = run
        .stderr()
        .lines()
        .find_map(|l| l.strip_prefix("user_state: ").map(str::to_owned))
        .expect("a user_state line");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["passes"], 4, "{v}");
    assert_eq!(v["timed_passes"], serde_json::json!([2]), "{v}");
    let events: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        events
            .iter()
            .all(|e| !e.contains("not fresh") && !e.contains("mismatch")),
        "{events:?}"
    );
}
