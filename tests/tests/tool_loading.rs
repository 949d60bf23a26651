//! hsa-emu's tool loading, checked the way ROCr behaves (HSA-ABI.md §1): `HSA_TOOLS_LIB` order
//! and quoting, discovery of preloaded libraries by `HSA_AMD_TOOL_PRIORITY`, the failed-tool
//! list, `OnUnload` in reverse order at the last `hsa_shut_down`, and the table versions each
//! ABI presentation hands over.

use std::time::Duration;

use rocprof_replay_e2e::{c_samples, run_on_emu, tool_probes};

/// Runs the vector_add sample with `env`; returns the `TOOL ...` lines of stderr.
fn tool_lines(env: &[(&str, &str)]) -> Vec<String> {
    let dir = c_samples();
    let kernels = dir.join("libsample_kernels.so");
    let run = run_on_emu(
        &dir.join("vector_add"),
        &[kernels.to_str().unwrap()],
        env,
        Duration::from_secs(60),
    );
    run.assert_success();
    run.stderr()
        .lines()
        .filter(|l| l.starts_with("TOOL "))
        .map(str::to_owned)
        .collect()
}

fn lib(name: &str) -> String {
    tool_probes()
        .join(format!("libtool_{name}.so"))
        .to_str()
        .unwrap()
        .to_owned()
}

/// The tool names in the order of their `what` calls.
fn order(lines: &[String], what: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.split_whitespace().nth(2) == Some(what))
        .map(|l| l.split_whitespace().nth(1).unwrap().to_owned())
        .collect()
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn hsa_tools_lib_loads_in_order_and_unloads_in_reverse() {
    let list = format!("{} {}", lib("a"), lib("b"));
    let lines = tool_lines(&[("HSA_TOOLS_LIB", &list)]);
    assert_eq!(order(&lines, "OnLoad"), ["a", "b"], "{lines:?}");
    assert_eq!(order(&lines, "OnUnload"), ["b", "a"], "{lines:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn preloaded_tools_are_found_by_priority_after_hsa_tools_lib() {
    let preload = format!("{} {}", lib("p10"), lib("p5"));
    let lines = tool_lines(&[("LD_PRELOAD", &preload), ("HSA_TOOLS_LIB", &lib("a"))]);
    assert_eq!(order(&lines, "OnLoad"), ["a", "p5", "p10"], "{lines:?}");
    assert_eq!(order(&lines, "OnUnload"), ["p10", "p5", "a"], "{lines:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn failed_tools_are_reported_to_later_tools_and_not_unloaded_twice() {
    let list = format!("{} /no/such/tool.so {}", lib("refuse"), lib("b"));
    let lines = tool_lines(&[("HSA_TOOLS_LIB", &list)]);
    let b = lines
        .iter()
        .find(|l| l.starts_with("TOOL b OnLoad"))
        .expect("b loaded");
    assert!(b.contains("failed=2"), "{b}");
    assert!(
        b.contains("libtool_refuse.so") && b.contains("/no/such/tool.so"),
        "{b}"
    );
    assert_eq!(
        order(&lines, "OnUnload"),
        ["b"],
        "a refused tool gets no OnUnload: {lines:?}"
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn quoted_names_may_contain_spaces() {
    let spaced = tool_probes()
        .parent()
        .unwrap()
        .join("tool probes with spaces");
    std::fs::create_dir_all(&spaced).unwrap();
    let copy = spaced.join("libtool_a.so");
    std::fs::copy(lib("a"), &copy).unwrap();
    let quoted = format!("\"{}\"", copy.display());
    let lines = tool_lines(&[("HSA_TOOLS_LIB", &quoted)]);
    assert_eq!(order(&lines, "OnLoad"), ["a"], "{lines:?}");
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn each_abi_presentation_hands_over_its_table_versions() {
    let newest = tool_lines(&[("HSA_TOOLS_LIB", &lib("a"))]);
    assert!(
        newest[0].contains("version=3 root=3/64 amd=2/608"),
        "{newest:?}"
    );
    let old = tool_lines(&[("HSA_TOOLS_LIB", &lib("a")), ("HSA_EMU_ABI", "5.2")]);
    assert!(old[0].contains("version=1 root=1/48 amd=1/400"), "{old:?}");
}
