//! Harness of the CUDA backend's tests: the tool library built with the `cuda` feature, the
//! CUDA applications under `apps/` built with `nvcc`, processes run with a deadline, and the
//! outcome records they leave.
//!
//! Paths can be given at run time, so that test binaries built on one machine run on another
//! (the GPU machine has no Rust toolchain):
//!
//! | variable | what |
//! |---|---|
//! | `ROCPROF_REPLAY_CUDA_TOOL` | the tool library (default: `pass_timer` built here with `--features rocprof-replay/cuda`) |
//! | `ROCPROF_REPLAY_TIMER_LIB` | the command's timer tool with the CUDA backend, which collects `ROCPROF_REPLAY_METRICS` (default: built here with `--features cuda`) |
//! | `ROCPROF_REPLAY_CUDA_FIXTURES` | this crate's directory (`apps/`, `gpt2_step.py`) |
//! | `ROCPROF_REPLAY_GPU_OUT` | a directory that receives the logs and records of the GPU tests |
//! | `CUDA_HOME` | the CUDA toolkit (default `/usr/local/cuda`) |

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace root (where this crate was built).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/cuda sits two levels below the workspace root")
        .into()
}

/// This crate's directory, holding `apps/` and the scripts.
pub fn fixtures() -> PathBuf {
    std::env::var_os("ROCPROF_REPLAY_CUDA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// A scratch directory of this test process.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("rocprof-replay-cuda-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("scratch directory");
        d
    })
}

/// Where GPU tests leave their logs (`ROCPROF_REPLAY_GPU_OUT`, else the scratch directory).
pub fn out_dir() -> PathBuf {
    let d = std::env::var_os("ROCPROF_REPLAY_GPU_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| scratch().to_path_buf());
    std::fs::create_dir_all(&d).expect("output directory");
    d
}

fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The tool library with the CUDA backend: `ROCPROF_REPLAY_CUDA_TOOL`, or `pass_timer` built
/// once per test process with `--features rocprof-replay/cuda` into its own target directory
/// (so the workspace's own builds keep the feature off).
pub fn cuda_tool() -> &'static Path {
    static TOOL: OnceLock<PathBuf> = OnceLock::new();
    TOOL.get_or_init(|| {
        if let Some(p) = std::env::var_os("ROCPROF_REPLAY_CUDA_TOOL") {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "ROCPROF_REPLAY_CUDA_TOOL={} is not a file",
                p.display()
            );
            return p;
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"))
            .join("cuda-tool");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        check(
            Command::new(cargo)
                .current_dir(workspace_root())
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "rocprof-replay-example-pass-timer",
                    "--features",
                    "rocprof-replay/cuda",
                    "--target-dir",
                ])
                .arg(&target)
                .output()
                .expect("run cargo"),
            "building pass_timer with the cuda feature",
        );
        let lib = target.join("debug/libpass_timer.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
}

/// The command's timer tool with the CUDA backend (it collects `ROCPROF_REPLAY_METRICS`):
/// `ROCPROF_REPLAY_TIMER_LIB`, or built once per test process with `--features cuda`.
pub fn timer_tool() -> &'static Path {
    static TOOL: OnceLock<PathBuf> = OnceLock::new();
    TOOL.get_or_init(|| {
        if let Some(p) = std::env::var_os("ROCPROF_REPLAY_TIMER_LIB") {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "ROCPROF_REPLAY_TIMER_LIB={} is not a file",
                p.display()
            );
            return p;
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"))
            .join("cuda-tool");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        check(
            Command::new(cargo)
                .current_dir(workspace_root())
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "rocprof-replay-timer",
                    "--features",
                    "cuda",
                    "--target-dir",
                ])
                .arg(&target)
                .output()
                .expect("run cargo"),
            "building the timer with the cuda feature",
        );
        let lib = target.join("debug/librocprof_replay_timer.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
}

/// The CUDA toolkit's root.
pub fn cuda_root() -> PathBuf {
    std::env::var_os("CUDA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/local/cuda"))
}

/// CUPTI's include and library directories under the toolkit.
pub fn cupti_dirs() -> (PathBuf, PathBuf) {
    let root = cuda_root();
    let inc = [root.join("extras/CUPTI/include"), root.join("include")]
        .into_iter()
        .find(|p| p.join("cupti.h").is_file())
        .expect("cupti.h not found under the CUDA toolkit (CUDA_HOME)");
    let lib = [
        root.join("extras/CUPTI/lib64"),
        root.join("lib64"),
        root.join("targets/x86_64-linux/lib"),
    ]
    .into_iter()
    .find(|p| p.join("libcupti.so").exists())
    .expect("libcupti.so not found under the CUDA toolkit (CUDA_HOME)");
    (inc, lib)
}

/// Fails with a clear message unless an NVIDIA GPU, its driver and `nvcc` are here.
pub fn require_gpu() {
    let nvcc = cuda_root().join("bin/nvcc");
    assert!(
        nvcc.is_file(),
        "GPU tests were asked for (ROCPROF_REPLAY_GPU_TESTS=1) but {} is missing",
        nvcc.display()
    );
    let smi = Command::new("nvidia-smi").arg("-L").output();
    assert!(
        smi.as_ref().is_ok_and(|o| o.status.success()),
        "GPU tests were asked for (ROCPROF_REPLAY_GPU_TESTS=1) but nvidia-smi finds no GPU: {smi:?}"
    );
}

/// Builds `apps/<name>.cu` with nvcc (once per process per name); `cupti`: link CUPTI and
/// the driver.
pub fn cuda_app(name: &str, cupti: bool) -> PathBuf {
    let exe = scratch().join(name);
    if exe.is_file() {
        return exe;
    }
    let src = fixtures().join("apps").join(format!("{name}.cu"));
    let mut cmd = Command::new(cuda_root().join("bin/nvcc"));
    cmd.args(["-O2", "-std=c++17", "-arch=native"])
        .arg("-o")
        .arg(&exe)
        .arg(&src);
    if cupti {
        let (inc, lib) = cupti_dirs();
        cmd.arg(format!("-I{}", inc.display()))
            .arg(format!("-L{}", lib.display()))
            .arg(format!("-Xlinker=-rpath,{}", lib.display()))
            .arg(format!("-L{}", cuda_root().join("lib64/stubs").display()))
            .args(["-lcupti", "-lcuda"]);
    }
    check(cmd.output().expect("run nvcc"), &format!("nvcc {name}.cu"));
    exe
}

/// A finished process.
pub struct Run {
    /// Its status and output.
    pub output: Output,
    /// Wall time from start to exit.
    pub elapsed: Duration,
}

impl Run {
    /// Standard output, lossily decoded.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    /// Standard error, lossily decoded.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// Asserts exit status 0, showing both streams otherwise.
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.output.status.success(),
            "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.output.status,
            self.stdout(),
            tail(&self.stderr(), 6000)
        );
    }
    /// The value of the first stdout line `key value`.
    pub fn value(&self, key: &str) -> Option<String> {
        self.stdout()
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ').map(str::to_string))
    }
}

/// The last `n` bytes of `s` (at a character boundary).
pub fn tail(s: &str, n: usize) -> &str {
    let mut i = s.len().saturating_sub(n);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// Runs `program args` with `env` (and without the variables in `unset`), killing it after
/// `deadline`.
pub fn run(
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    unset: &[&str],
    deadline: Duration,
) -> Run {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in unset {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    // Drain the pipes on threads so a chatty child never blocks.
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).ok();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).ok();
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let s = child.wait().expect("wait");
            panic!(
                "{} did not finish within {deadline:?} (killed: {s})",
                program.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    };
    Run {
        output,
        elapsed: start.elapsed(),
    }
}

/// The records of a `ROCPROF_REPLAY_OUTPUT` file.
pub fn records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad record {l}: {e}")))
        .collect()
}
