//! `emu-bench` without arguments: builds what the measurements need, like
//! `examples/demo/src/orchestrate.rs` does.
//!
//! 1. `cargo run -q [--release] -p hsa-emu --bin hsa-emu-install -- <target>/emu-bench/hsa-emu`
//!    (the profile of this program) builds hsa-emu and installs it as `libhsa-runtime64.so.1`;
//! 2. `$CC -shared -fPIC -O2 -I hsa-emu/include` (CC defaults to `cc`) compiles
//!    `examples/kernels/sample_kernels.c` into `<target>/emu-bench/libsample_kernels.so`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use crate::hsa::RUNTIME_SONAME;

/// What the measurements need.
pub(crate) struct Prepared {
    /// The directory holding hsa-emu as `libhsa-runtime64.so.1`.
    pub(crate) emu_dir: PathBuf,
    /// The compiled sample kernels (the code object).
    pub(crate) kernels: PathBuf,
}

/// Builds and installs hsa-emu and compiles the sample kernels.
pub(crate) fn prepare() -> Result<Prepared, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("this program is not inside a cargo target directory")?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root
        .canonicalize()
        .map_err(|e| format!("cannot find the workspace root {}: {e}", root.display()))?;
    let out = target.join("emu-bench");
    let emu_dir = out.join("hsa-emu");
    let emu_dir_str = emu_dir
        .to_str()
        .ok_or("the target directory's path is not UTF-8")?;

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut args = vec!["run", "-q"];
    if !cfg!(debug_assertions) {
        args.push("--release");
    }
    args.extend_from_slice(&[
        "-p",
        "hsa-emu",
        "--bin",
        "hsa-emu-install",
        "--",
        emu_dir_str,
    ]);
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root).args(&args);
    run_checked(&mut cmd, &format!("cargo {}", args.join(" ")), |e| {
        format!(
            "cannot run cargo ({}): {e}; set CARGO to its path",
            cargo.to_string_lossy()
        )
    })?;
    if !emu_dir.join(RUNTIME_SONAME).is_file() {
        return Err(format!(
            "hsa-emu-install ran but {} is missing",
            emu_dir.join(RUNTIME_SONAME).display()
        ));
    }

    let kernels = out.join("libsample_kernels.so");
    compile_kernels(&root, &kernels)?;
    Ok(Prepared { emu_dir, kernels })
}

/// Compiles `examples/kernels/sample_kernels.c` into `out` with `$CC` (default `cc`).
fn compile_kernels(root: &Path, out: &Path) -> Result<(), String> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let cc = std::env::var("CC")
        .ok()
        .filter(|cc| !cc.trim().is_empty())
        .unwrap_or_else(|| "cc".into());
    // CC may carry flags ("gcc -m64"), as make allows.
    let mut words = cc.split_whitespace();
    let compiler = words.next().unwrap_or("cc");
    let mut cmd = Command::new(compiler);
    cmd.current_dir(root)
        .args(words)
        .args(["-shared", "-fPIC", "-O2", "-I"])
        .arg(root.join("hsa-emu/include"))
        .arg("-o")
        .arg(out)
        .arg(root.join("examples/kernels/sample_kernels.c"));
    let shown = format!(
        "{cc} -shared -fPIC -O2 -I hsa-emu/include -o {} examples/kernels/sample_kernels.c",
        out.display()
    );
    run_checked(&mut cmd, &shown, |e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("no C compiler: `{compiler}` was not found; install one or set CC")
        } else {
            format!("cannot run the C compiler `{compiler}`: {e}")
        }
    })
}

/// Runs `cmd` (shown as `shown`), inheriting stdio; a failure to start or a non-zero exit is
/// an error.
fn run_checked(
    cmd: &mut Command,
    shown: &str,
    spawn_error: impl FnOnce(std::io::Error) -> String,
) -> Result<(), String> {
    println!("emu-bench: $ {shown}");
    let status = cmd.status().map_err(spawn_error)?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed ({})", describe(status)))
    }
}

/// "exit status 3" or "killed by signal 9".
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}
