//! The tool library's CUDA entry points, without a GPU: what it exports, how a preloaded tool
//! arranges its own injection, and what happens where there is no CUDA driver.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rocprof_replay_cuda_tests::{cuda_tool, run, scratch};

#[test]
fn the_tool_exports_the_hsa_and_the_cuda_entry_points() {
    let tool = cuda_tool();
    // SAFETY: loading a tool library; its constructor only reads the environment (this
    // process does not preload it, so it changes nothing).
    let lib = unsafe { libloading::Library::new(tool) }.expect("load the tool");
    for sym in [
        "OnLoad",
        "OnUnload",
        "HSA_AMD_TOOL_PRIORITY",
        "ROCPROF_REPLAY_CLAIM",
        "InitializeInjection",
    ] {
        // SAFETY: only the symbol's presence is checked.
        let found = unsafe { lib.get::<*const ()>(sym.as_bytes()) }.is_ok();
        assert!(found, "{} does not export {sym}", tool.display());
    }
    assert!(
        std::env::var_os("CUDA_INJECTION64_PATH").is_none(),
        "loading the tool (not preloaded) set CUDA_INJECTION64_PATH"
    );
}

/// Runs `sh -c 'echo "[$CUDA_INJECTION64_PATH]"'` with `env`.
fn injection_path_seen_by_a_preloaded_shell(env: &[(&str, &str)]) -> String {
    let r = run(
        Path::new("/bin/sh"),
        &["-c", "echo \"[$CUDA_INJECTION64_PATH]\""],
        env,
        &["CUDA_INJECTION64_PATH"],
        Duration::from_secs(30),
    );
    r.assert_success("sh");
    r.stdout().trim().to_string()
}

#[test]
fn a_preloaded_tool_points_cuda_injection_at_itself() {
    let tool = cuda_tool().canonicalize().unwrap();
    let seen = injection_path_seen_by_a_preloaded_shell(&[("LD_PRELOAD", tool.to_str().unwrap())]);
    assert_eq!(seen, format!("[{}]", tool.display()));
    // Without LD_PRELOAD the variable stays unset.
    assert_eq!(injection_path_seen_by_a_preloaded_shell(&[]), "[]");
}

#[test]
fn an_injection_path_the_user_set_is_left_alone() {
    let tool = cuda_tool().canonicalize().unwrap();
    let r = run(
        Path::new("/bin/sh"),
        &["-c", "echo \"[$CUDA_INJECTION64_PATH]\""],
        &[
            ("LD_PRELOAD", tool.to_str().unwrap()),
            ("CUDA_INJECTION64_PATH", "/opt/other/libinjection.so"),
        ],
        &[],
        Duration::from_secs(30),
    );
    r.assert_success("sh");
    assert_eq!(r.stdout().trim(), "[/opt/other/libinjection.so]");
    assert!(
        r.stderr()
            .contains("CUDA_INJECTION64_PATH names another library"),
        "the user is not told why CUDA is not replayed:\n{}",
        r.stderr()
    );
}

/// Whether this machine has a CUDA driver.
fn have_driver() -> bool {
    // SAFETY: loading the driver library only when present; nothing is called.
    unsafe { libloading::Library::new("libcuda.so.1") }.is_ok()
}

#[test]
fn initialize_injection_reports_why_it_cannot_attach_and_the_process_goes_on() {
    let helper_src = scratch().join("inject.c");
    std::fs::write(
        &helper_src,
        r#"#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 2; }
  int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
  if (!init) { printf("no InitializeInjection\n"); return 3; }
  printf("InitializeInjection=%d\n", init());
  printf("InitializeInjection=%d\n", init());
  printf("still running\n");
  return 0;
}
"#,
    )
    .unwrap();
    let helper = scratch().join("inject");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .arg("-o")
        .arg(&helper)
        .arg(&helper_src)
        .arg("-ldl")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tool = cuda_tool();
    let verdicts = scratch().join("preflight.jsonl");
    let _ = std::fs::remove_file(&verdicts);
    let r = run(
        &helper,
        &[tool.to_str().unwrap()],
        &[
            ("ROCPROF_REPLAY_LOG", "info"),
            ("ROCPROF_REPLAY_PREFLIGHT", verdicts.to_str().unwrap()),
        ],
        &["CUDA_INJECTION64_PATH", "LD_PRELOAD"],
        Duration::from_secs(60),
    );
    r.assert_success("the injection helper");
    // One verdict for the command's preflight, whichever way the attach went, with the reason
    // printed on stderr when refused.
    let text = std::fs::read_to_string(&verdicts).unwrap_or_default();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a verdict is JSON"))
        .collect();
    assert_eq!(lines.len(), 1, "one verdict per attach: {text}");
    assert_eq!(lines[0]["backend"], "cuda", "{text}");
    assert_eq!(
        std::fs::canonicalize(lines[0]["tool"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(tool).unwrap(),
        "{text}"
    );
    match lines[0]["verdict"].as_str() {
        Some("refused") => {
            let reason = lines[0]["reason"].as_str().unwrap();
            assert!(
                r.stderr().contains(&format!("rocprof-replay: {reason}; ")),
                "the verdict's reason is the one on stderr: {text}\n{}",
                r.stderr()
            );
        }
        Some("loaded") => assert!(have_driver(), "loaded without a driver: {text}"),
        other => panic!("verdict {other:?}: {text}"),
    }
    assert_eq!(
        r.stdout().matches("InitializeInjection=1").count(),
        2,
        "the driver must always be told success:\n{}",
        r.stdout()
    );
    assert!(r.stdout().contains("still running"));
    if !have_driver() {
        assert!(
            r.stderr().contains("cannot load the CUDA driver")
                && r.stderr().contains("the application runs without it"),
            "no clear reason on stderr:\n{}",
            r.stderr()
        );
        assert_eq!(
            r.stderr().matches("rocprof-replay:").count(),
            1,
            "a second call must not try again:\n{}",
            r.stderr()
        );
    }
}
