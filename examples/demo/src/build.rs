//! Preparing a run from the workspace sources: the steps the demo and `emu-bench` share.
//!
//! - [`workspace_root`], [`profile_dir`] and [`target_dir`] find the sources and the cargo
//!   output directories of the running program;
//! - a [`Builder`] runs the commands, each shown on stdout before it runs:
//!   - [`Builder::cargo`]: `$CARGO <subcommand> [--release] <args>` in the workspace root, in
//!     the cargo profile of the running program;
//!   - [`Builder::install_emulator`]: `cargo run -q [--release] -p hsa-emu --bin
//!     hsa-emu-install -- DIR` builds hsa-emu and installs it as `DIR/libhsa-runtime64.so.1`;
//!   - [`Builder::compile_kernels`]: `$CC -shared -fPIC -O2 -I hsa-emu/include` (CC defaults
//!     to `cc`) compiles `examples/kernels/sample_kernels.c` into a code object.
//!
//! Every failure is a `String` ready to print after `error: `.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use crate::hsa::RUNTIME_SONAME;

/// The workspace root (the directory of the top `Cargo.toml`), canonicalized.
///
/// Found from this package's manifest directory at build time, so it is right for every
/// program of the workspace that links this library.
pub fn workspace_root() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize()
        .map_err(|e| format!("cannot find the workspace root {}: {e}", root.display()))
}

/// The directory of the running program: `<target>/<profile>` for a program cargo built.
pub fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "this program has no directory".into())
}

/// The cargo target directory of the running program: the parent of [`profile_dir`].
pub fn target_dir() -> Result<PathBuf, String> {
    profile_dir()?
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "this program is not inside a cargo target directory".into())
}

/// Runs the build commands from the workspace root, showing each one on stdout.
#[derive(Clone, Debug)]
pub struct Builder {
    /// The workspace root: the working directory of every command.
    root: PathBuf,
    /// What precedes `$ <command>` when a command is shown (e.g. `"emu-bench: "`).
    prefix: String,
}

impl Builder {
    /// A builder for the workspace of [`workspace_root`] that shows each command as
    /// `<prefix>$ <command>`.
    pub fn new(prefix: &str) -> Result<Self, String> {
        Ok(Self::with_root(workspace_root()?, prefix))
    }

    /// A builder whose commands run in `root` (a workspace like this one), shown as
    /// `<prefix>$ <command>`.
    pub fn with_root(root: PathBuf, prefix: &str) -> Self {
        Self {
            root,
            prefix: prefix.to_owned(),
        }
    }

    /// The workspace root the commands run in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Runs `$CARGO <subcommand> [--release] <args>` (`cargo` when `CARGO` is unset) in the
    /// workspace root, `--release` when the running program is a release build, so that
    /// everything comes from one profile.
    pub fn cargo(&self, subcommand: &str, args: &[&str]) -> Result<(), String> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut shown = vec!["cargo", subcommand];
        if !cfg!(debug_assertions) {
            shown.push("--release");
        }
        shown.extend_from_slice(args);
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&self.root).args(&shown[1..]);
        self.run_checked(&mut cmd, &shown.join(" "), |e| {
            format!(
                "cannot run cargo ({}): {e}; set CARGO to its path",
                cargo.to_string_lossy()
            )
        })
    }

    /// Builds hsa-emu (in the running program's profile) and installs it into `dir` as
    /// `libhsa-runtime64.so.1` with `cargo run -q -p hsa-emu --bin hsa-emu-install -- DIR`;
    /// checks that the library is there afterwards.
    pub fn install_emulator(&self, dir: &Path) -> Result<(), String> {
        let dir_str = dir
            .to_str()
            .ok_or("the target directory's path is not UTF-8")?;
        self.cargo(
            "run",
            &[
                "-q",
                "-p",
                "hsa-emu",
                "--bin",
                "hsa-emu-install",
                "--",
                dir_str,
            ],
        )?;
        let installed = dir.join(RUNTIME_SONAME);
        if !installed.is_file() {
            return Err(format!(
                "hsa-emu-install ran but {} is missing",
                installed.display()
            ));
        }
        Ok(())
    }

    /// Compiles `examples/kernels/sample_kernels.c` into the code object `out` with `$CC`
    /// (default `cc`; it may carry flags, as with make), creating `out`'s directory first.
    pub fn compile_kernels(&self, out: &Path) -> Result<(), String> {
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
        cmd.current_dir(&self.root)
            .args(words)
            .args(["-shared", "-fPIC", "-O2", "-I"])
            .arg(self.root.join("hsa-emu/include"))
            .arg("-o")
            .arg(out)
            .arg(self.root.join("examples/kernels/sample_kernels.c"));
        let shown = format!(
            "{cc} -shared -fPIC -O2 -I hsa-emu/include -o {} examples/kernels/sample_kernels.c",
            out.display()
        );
        self.run_checked(&mut cmd, &shown, |e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("no C compiler: `{compiler}` was not found; install one or set CC")
            } else {
                format!("cannot run the C compiler `{compiler}`: {e}")
            }
        })
    }

    /// Runs `cmd` (shown to the user as `shown`), inheriting stdio; a failure to start (worded
    /// by `spawn_error`) or a non-zero exit is an error.
    pub fn run_checked(
        &self,
        cmd: &mut Command,
        shown: &str,
        spawn_error: impl FnOnce(std::io::Error) -> String,
    ) -> Result<(), String> {
        println!("{}$ {shown}", self.prefix);
        let status = cmd.status().map_err(spawn_error)?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("`{shown}` failed ({})", describe(status)))
        }
    }
}

/// "exit status 3" or "killed by signal 9".
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}
