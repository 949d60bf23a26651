//! Harness for the end-to-end tests: builds hsa-emu, the C sample applications and the HIP
//! samples once per test process, and runs applications as separate processes with a deadline.
//!
//! Every artefact lands under `<target>/e2e/`. Tooling is detected by `tests/build.rs`, which
//! emits `cfg(have_hsa_headers)` (Debian's HSA headers, for the C samples) and
//! `cfg(have_hipcc)` (Debian's hipcc, for the HIP samples). Tests that need them carry
//! `#[cfg_attr(not(have_hsa_headers), ignore = "...")]` / `#[cfg_attr(not(have_hipcc), ignore
//! = "...")]` and show as ignored with that reason when the tool is missing; CI installs them
//! and sets `ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1`, which makes a missing tool a build error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .into()
}

/// `<target>/e2e`.
pub fn e2e_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("e2e")
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory holding hsa-emu as `libhsa-runtime64.so.1` (built once per test process).
pub fn emu_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = e2e_dir().join("hsa-emu");
        run_checked(
            Command::new(cargo())
                .current_dir(workspace_root())
                .args([
                    "run",
                    "--quiet",
                    "-p",
                    "hsa-emu",
                    "--bin",
                    "hsa-emu-install",
                    "--",
                ])
                .arg(&dir),
            "building hsa-emu",
        );
        dir
    })
}

/// Whether Debian's HSA headers are installed (needed by the C samples).
pub fn hsa_headers_present() -> bool {
    Path::new("/usr/include/hsa/hsa.h").exists()
}

/// Why a test that needs the HSA headers is ignored without them (the text of its
/// `cfg_attr(not(have_hsa_headers), ignore = ...)`).
pub const NEEDS_HSA_HEADERS: &str =
    "needs Debian's HSA headers: apt-get install libhsa-runtime-dev";

/// Why a test that needs hipcc is ignored without it (the text of its
/// `cfg_attr(not(have_hipcc), ignore = ...)`).
pub const NEEDS_HIPCC: &str = "needs apt install hipcc libamdhip64-dev";

/// The C sample applications and kernel library, built against Debian's headers and linked
/// against hsa-emu. Tests that call it carry `cfg_attr(not(have_hsa_headers), ignore)`.
pub fn c_samples() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        assert!(
            hsa_headers_present(),
            "this test {NEEDS_HSA_HEADERS} (mark it cfg_attr(not(have_hsa_headers), ignore))"
        );
        let out = e2e_dir().join("apps");
        let emu = emu_dir();
        run_checked(
            Command::new("bash")
                .arg(workspace_root().join("examples/apps/build.sh"))
                .arg(&out)
                .env("LDFLAGS", format!("-L{}", emu.display())),
            "building the C samples",
        );
        out
    })
}

/// Packages of the tool libraries the end-to-end tests load.
const TOOL_PACKAGES: &[&str] = &[
    "e2e-plan-tool",
    "rocprof-replay-example-pass-timer",
    "rocprof-replay-example-adaptive-timer",
    "rocprof-replay-example-selective",
    "rocprof-replay-example-user-state",
    "rocprof-replay-example-counters",
];

/// `<target>/debug/lib<name>.so` of a tool library (all tools are built once per process).
pub fn tool_lib(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let mut cmd = Command::new(cargo());
        cmd.current_dir(workspace_root()).args(["build", "--quiet"]);
        for p in TOOL_PACKAGES {
            cmd.args(["-p", p]);
        }
        run_checked(&mut cmd, "building the tool libraries");
        e2e_dir().parent().expect("target dir").join("debug")
    });
    let lib = dir.join(format!("lib{name}.so"));
    assert!(lib.exists(), "{} was not built", lib.display());
    lib
}

/// The replay probe application (`tests/fixtures/replay_probe.c`) and the sample kernels
/// (needs the HSA headers, see [`c_samples`]).
pub fn replay_probe() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let samples = c_samples();
    let exe = BUILT
        .get_or_init(|| {
            let root = workspace_root();
            let exe = samples.join("replay_probe");
            run_checked(
                Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                    .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
                    .arg(format!("-I{}", root.join("hsa-emu/include").display()))
                    .arg(format!("-I{}", root.join("examples/apps").display()))
                    .arg("-o")
                    .arg(&exe)
                    .arg(root.join("tests/fixtures/replay_probe.c"))
                    .arg(format!("-L{}", emu_dir().display()))
                    .args(["-lhsa-runtime64", "-lpthread"]),
                "building replay_probe",
            );
            exe
        })
        .clone();
    (exe, samples.join("libsample_kernels.so"))
}

/// The HIP samples of `examples/hip`, built with Debian's hipcc for gfx90a by
/// `examples/hip/build.sh` once per test process: `<dir>/<sample>`, `<dir>/lib<sample>_shadow.so`
/// and `<dir>/module_kernels.co`. Tests that call it carry `cfg_attr(not(have_hipcc), ignore)`.
pub fn hip_samples() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = e2e_dir().join("hip");
        let script = workspace_root().join("examples/hip/build.sh");
        // hipcc takes one to two seconds per file: build in two halves at once (module also
        // builds its --genco code object).
        let halves = [
            ["vector_add", "streams", "memops", "system_memory"].as_slice(),
            &["symbols", "module", "managed", "flag_wait"],
        ];
        let children: Vec<_> = halves
            .iter()
            .map(|half| {
                Command::new("sh")
                    .arg(&script)
                    .arg(&out)
                    .args(half.iter())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|e| panic!("building the HIP samples: cannot start: {e}"))
            })
            .collect();
        for child in children {
            let o = child.wait_with_output().expect("waiting for build.sh");
            assert!(
                o.status.success(),
                "building the HIP samples failed ({}; {NEEDS_HIPCC}):\n{}\n{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        out
    })
}

/// `HSA_EMU_SHADOW` for a HIP sample: its shadow library, or empty for `memops` (no kernels of
/// its own).
pub fn hip_shadow(sample: &str) -> String {
    let lib = hip_samples().join(format!("lib{sample}_shadow.so"));
    if lib.exists() {
        lib.to_string_lossy().into_owned()
    } else {
        String::new()
    }
}

/// Variants of the C tool probe (`tests/fixtures/tool_probe.c`), built once:
/// `libtool_<name>.so` for each (name, extra C flags).
pub fn tool_probes() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = e2e_dir().join("tool-probes");
        std::fs::create_dir_all(&dir).expect("creating the tool probe directory");
        let variants: &[(&str, &[&str])] = &[
            ("a", &[]),
            ("b", &[]),
            ("refuse", &["-DREFUSE"]),
            ("p5", &["-DPRIORITY=5"]),
            ("p10", &["-DPRIORITY=10"]),
        ];
        for (name, flags) in variants {
            run_checked(
                Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                    .args([
                        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC",
                    ])
                    .arg(format!("-DTOOL_NAME=\"{name}\""))
                    .args(*flags)
                    .arg("-o")
                    .arg(dir.join(format!("libtool_{name}.so")))
                    .arg(workspace_root().join("tests/fixtures/tool_probe.c")),
                "building the tool probes",
            );
        }
        dir
    })
    .clone()
}

/// The result of running an application under hsa-emu.
#[derive(Debug)]
pub struct Run {
    /// Exit status and captured output.
    pub output: Output,
    /// Wall time.
    pub elapsed: Duration,
}

impl Run {
    /// Standard output as text.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    /// Standard error as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// Panics with both streams unless the process exited 0.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.output.status.success(),
            "exit {}:\n--- stdout\n{}\n--- stderr\n{}",
            self.output.status,
            self.stdout(),
            self.stderr()
        );
        self
    }
}

/// Runs `program args` with hsa-emu as the HSA runtime and `env` added; kills it after
/// `deadline` and panics (a hang is a failure, never a stuck test run).
pub fn run_on_emu(program: &Path, args: &[&str], env: &[(&str, &str)], deadline: Duration) -> Run {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", emu_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    // Drain both pipes while the child runs: a chatty child must never block on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let status = loop {
        match child.try_wait().expect("waiting for the child") {
            Some(status) => break status,
            None if start.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
                panic!(
                    "{} ran past its {:?} deadline and was killed:\n{}\n{}",
                    program.display(),
                    deadline,
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let output = Output {
        status,
        stdout: out.join().expect("reading stdout"),
        stderr: err.join().expect("reading stderr"),
    };
    Run {
        output,
        elapsed: start.elapsed(),
    }
}

/// Builds the probe application `tests/fixtures/{app}.c` (linked against hsa-emu) and its
/// kernel library `tests/fixtures/{kernels}.c` into the C samples' directory.
fn build_probe(app: &str, kernels: &str) -> (PathBuf, PathBuf) {
    let samples = c_samples();
    let root = workspace_root();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = samples.join(app);
    let lib = samples.join(format!("lib{kernels}.so"));
    run_checked(
        Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
            .arg(format!("-I{}", root.join("hsa-emu/include").display()))
            .arg(format!("-I{}", root.join("examples/apps").display()))
            .arg("-o")
            .arg(&exe)
            .arg(root.join(format!("tests/fixtures/{app}.c")))
            .arg(format!("-L{}", emu_dir().display()))
            .args(["-lhsa-runtime64", "-lpthread", "-ldl"]),
        &format!("building {app}"),
    );
    run_checked(
        Command::new(&cc)
            .args([
                "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC",
            ])
            .arg(format!("-I{}", root.join("hsa-emu/include").display()))
            .arg("-o")
            .arg(&lib)
            .arg(root.join(format!("tests/fixtures/{kernels}.c"))),
        &format!("building {kernels}"),
    );
    (exe, lib)
}

/// The fault-matrix application (`tests/fixtures/fault_probe.c`) and its kernel library
/// (`tests/fixtures/fault_kernels.c`: the sample kernels plus kernels that misbehave on
/// purpose); needs the HSA headers (see [`c_samples`]).
pub fn fault_probe() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT
        .get_or_init(|| build_probe("fault_probe", "fault_kernels"))
        .clone()
}

/// The write-set restore application (`tests/fixtures/write_set_probe.c`) and its kernel
/// library (`tests/fixtures/write_set_kernels.c`: the sample kernels plus `write_subset`);
/// needs the HSA headers (see [`c_samples`]).
pub fn write_set_probe() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT
        .get_or_init(|| build_probe("write_set_probe", "write_set_kernels"))
        .clone()
}

/// A fresh outcome-records file (`ROCPROF_REPLAY_OUTPUT`) under `<target>/e2e/records`, named
/// after `test` and unique to this process and call.
pub fn records_path(test: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = e2e_dir().join("records");
    std::fs::create_dir_all(&dir).expect("creating the records directory");
    let p = dir.join(format!(
        "{test}-{}-{}.jsonl",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// The outcome records (JSON Lines) in `path`; none when the file does not exist. A line that
/// is not JSON fails the test.
pub fn read_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad record {l:?}: {e}")))
        .collect()
}
