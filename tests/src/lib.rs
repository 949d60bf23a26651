//! Harness for the end-to-end tests: builds hsa-emu and the C sample applications once per
//! test process, and runs applications as separate processes with a deadline.
//!
//! Every artefact lands under `<target>/e2e/`. Tests that need Debian's HSA headers (the C
//! samples include `<hsa/hsa.h>`) call [`c_samples`], which returns `None` and prints why
//! when the headers are missing; CI installs them and sets
//! `ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1`, which turns that skip into a failure.

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

/// The C sample applications and kernel library, built against Debian's headers and linked
/// against hsa-emu; `None` (with a message) when the headers are missing.
pub fn c_samples() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if !hsa_headers_present() {
            let required =
                std::env::var("ROCPROF_REPLAY_REQUIRE_HSA_HEADERS").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1 but /usr/include/hsa/hsa.h is missing"
            );
            eprintln!(
                "SKIPPED: the C samples need Debian's HSA headers \
                 (apt-get install -y libhsa-runtime-dev)"
            );
            return None;
        }
        let out = e2e_dir().join("apps");
        let emu = emu_dir();
        run_checked(
            Command::new("bash")
                .arg(workspace_root().join("examples/apps/build.sh"))
                .arg(&out)
                .env("LDFLAGS", format!("-L{}", emu.display())),
            "building the C samples",
        );
        Some(out)
    })
    .as_deref()
}

/// Packages of the tool libraries the end-to-end tests load.
const TOOL_PACKAGES: &[&str] = &[
    "e2e-plan-tool",
    "rocprof-replay-example-pass-timer",
    "rocprof-replay-example-adaptive-timer",
    "rocprof-replay-example-selective",
    "rocprof-replay-example-user-state",
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

/// The replay probe application (`tests/fixtures/replay_probe.c`) and the sample kernels;
/// `None` when the HSA headers are missing (see [`c_samples`]).
pub fn replay_probe() -> Option<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    let samples = c_samples()?;
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
            Some(exe)
        })
        .clone()?;
    Some((exe, samples.join("libsample_kernels.so")))
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

/// The fault-matrix application (`tests/fixtures/fault_probe.c`) and its kernel library
/// (`tests/fixtures/fault_kernels.c`: the sample kernels plus kernels that misbehave on
/// purpose); `None` when the HSA headers are missing (see [`c_samples`]).
pub fn fault_probe() -> Option<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<Option<(PathBuf, PathBuf)>> = OnceLock::new();
    let samples = c_samples()?;
    BUILT
        .get_or_init(|| {
            let root = workspace_root();
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let exe = samples.join("fault_probe");
            let kernels = samples.join("libfault_kernels.so");
            run_checked(
                Command::new(&cc)
                    .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
                    .arg(format!("-I{}", root.join("hsa-emu/include").display()))
                    .arg(format!("-I{}", root.join("examples/apps").display()))
                    .arg("-o")
                    .arg(&exe)
                    .arg(root.join("tests/fixtures/fault_probe.c"))
                    .arg(format!("-L{}", emu_dir().display()))
                    .args(["-lhsa-runtime64", "-lpthread", "-ldl"]),
                "building fault_probe",
            );
            run_checked(
                Command::new(&cc)
                    .args([
                        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC",
                    ])
                    .arg(format!("-I{}", root.join("hsa-emu/include").display()))
                    .arg("-o")
                    .arg(&kernels)
                    .arg(root.join("tests/fixtures/fault_kernels.c")),
                "building the fault kernels",
            );
            Some((exe, kernels))
        })
        .clone()
}
