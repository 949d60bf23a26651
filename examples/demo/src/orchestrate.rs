//! `rocprof-replay-demo` without arguments: prepare the three binaries and run the demo.
//!
//! 1. `cargo build -p hsa-emu -p rocprof-replay-example-pass-timer` (same profile as this
//!    program) builds the emulator and the `pass_timer` tool;
//! 2. `cargo run -p hsa-emu --bin hsa-emu-install -- <target>/demo/hsa-emu` installs the
//!    emulator as `libhsa-runtime64.so.1`;
//! 3. `$CC -shared -fPIC -O2 -I hsa-emu/include` compiles `examples/kernels/sample_kernels.c`
//!    into `<target>/demo/libsample_kernels.so`, the code object;
//! 4. this program runs itself as `rocprof-replay-demo app <kernels>` with
//!    `LD_LIBRARY_PATH=<emulator dir>`, `LD_PRELOAD=<libpass_timer.so>`,
//!    `ROCPROF_REPLAY_PASSES=5` and `ROCPROF_REPLAY_LOG=warn` (each unless already set), and
//!    exits with the application's status.
//!
//! Steps 1 to 3 are those of [`rocprof_replay_demo::build`], which `emu-bench` shares.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use rocprof_replay_demo::build::{self, Builder, describe};
use rocprof_replay_demo::hsa::RUNTIME_SONAME;

/// Package of the replay tool the demo runs under.
const TOOL_PACKAGE: &str = "rocprof-replay-example-pass-timer";
/// File name of that tool's library.
const TOOL_LIB: &str = "libpass_timer.so";
/// Replay passes per dispatch unless `ROCPROF_REPLAY_PASSES` is set.
const DEFAULT_PASSES: &str = "5";
/// Tool log level unless `ROCPROF_REPLAY_LOG` is set.
const DEFAULT_LOG: &str = "warn";

/// Where everything lives.
struct Paths {
    /// The workspace root (commands run there; paths are shown relative to it).
    root: PathBuf,
    /// This program.
    exe: PathBuf,
    /// `<target>/<profile>`, where cargo puts the tool.
    profile_dir: PathBuf,
    /// `<target>/demo`, the demo's own outputs.
    demo_dir: PathBuf,
}

/// Runs the demo and returns the application's exit status (1 if preparing it failed).
pub(crate) fn main() -> ExitCode {
    match prepare() {
        Ok((paths, run)) => launch(&paths, &run),
        Err(why) => {
            eprintln!("demo: error: {why}");
            ExitCode::FAILURE
        }
    }
}

/// What [`launch`] runs: the application's inputs.
struct Prepared {
    /// The directory holding hsa-emu as `libhsa-runtime64.so.1`.
    emu_dir: PathBuf,
    /// The tool library.
    tool: PathBuf,
    /// The compiled sample kernels (the code object).
    kernels: PathBuf,
}

/// Steps 1 to 3: builds and installs what the application run needs.
fn prepare() -> Result<(Paths, Prepared), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let profile_dir = build::profile_dir()?;
    let target = build::target_dir()?;
    // Commands line up with the text after "demo: [n/4] ".
    let builder = Builder::new("demo:       ")?;
    let paths = Paths {
        demo_dir: target.join("demo"),
        root: builder.root().to_path_buf(),
        exe,
        profile_dir,
    };

    step(1, "building hsa-emu and the pass_timer tool");
    builder.cargo("build", &["-p", "hsa-emu", "-p", TOOL_PACKAGE])?;
    let tool = paths.profile_dir.join(TOOL_LIB);
    if !tool.is_file() {
        return Err(format!(
            "{TOOL_PACKAGE} was built but {} is missing",
            tool.display()
        ));
    }

    step(2, "installing hsa-emu as libhsa-runtime64.so.1");
    let emu_dir = paths.demo_dir.join("hsa-emu");
    builder.install_emulator(&emu_dir)?;

    step(3, "compiling the sample kernels (an hsa-emu code object)");
    let kernels = paths.demo_dir.join("libsample_kernels.so");
    builder.compile_kernels(&kernels)?;

    Ok((
        paths,
        Prepared {
            emu_dir,
            tool,
            kernels,
        },
    ))
}

/// Prints a progress line.
fn step(n: u32, what: &str) {
    println!("demo: [{n}/4] {what}");
}

/// `value` followed by the current value of the path list `var`, if any.
fn prepend(var: &str, value: &Path) -> OsString {
    let mut list = value.as_os_str().to_owned();
    if let Some(old) = std::env::var_os(var).filter(|old| !old.is_empty()) {
        list.push(":");
        list.push(old);
    }
    list
}

/// The value of `var`, or `default` when unset or empty.
fn env_or(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
}

/// Step 4: runs the application under the tool, streaming its output, and returns its status.
fn launch(paths: &Paths, run: &Prepared) -> ExitCode {
    let passes = env_or("ROCPROF_REPLAY_PASSES", DEFAULT_PASSES);
    let log = env_or("ROCPROF_REPLAY_LOG", DEFAULT_LOG);
    let passes_shown = passes.to_string_lossy();
    step(4, "running the application under the tool");
    let rule = "-".repeat(78);
    println!(
        "{rule}\n\
         Three separate binaries, as with a real ROCm application on a GPU:\n\
         \x20 application  {exe} app {kernels}\n\
         \x20              a Rust program making plain HSA calls; it opens {RUNTIME_SONAME} at run\n\
         \x20              time and knows nothing about replay\n\
         \x20 runtime      {emu}/{RUNTIME_SONAME}  (via LD_LIBRARY_PATH)\n\
         \x20              hsa-emu: an HSA runtime that runs the kernels on CPU threads\n\
         \x20 tool         {tool}  (via LD_PRELOAD)\n\
         \x20              pass_timer, built with the rocprof-replay SDK: runs every kernel dispatch\n\
         \x20              ROCPROF_REPLAY_PASSES={passes_shown} times, restoring device memory between passes,\n\
         \x20              and times each pass\n\
         The application checks that it saw exactly one execution of each dispatch.\n\
         {rule}",
        exe = short(paths, &paths.exe).display(),
        kernels = short(paths, &run.kernels).display(),
        emu = short(paths, &run.emu_dir).display(),
        tool = short(paths, &run.tool).display(),
    );
    let status = Command::new(&paths.exe)
        .arg("app")
        .arg(&run.kernels)
        .env("LD_LIBRARY_PATH", prepend("LD_LIBRARY_PATH", &run.emu_dir))
        .env("LD_PRELOAD", prepend("LD_PRELOAD", &run.tool))
        .env("ROCPROF_REPLAY_PASSES", &passes)
        .env("ROCPROF_REPLAY_LOG", &log)
        .status();
    println!("{rule}");
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            eprintln!(
                "demo: error: cannot start the application {}: {e}",
                paths.exe.display()
            );
            return ExitCode::FAILURE;
        }
    };
    match status.code() {
        Some(0) => {
            println!(
                "demo: done. Each dispatch was replayed (ROCPROF_REPLAY_PASSES={passes_shown}), yet \
                 every result the application checked is that of one execution."
            );
            ExitCode::SUCCESS
        }
        Some(code) => {
            eprintln!("demo: the application failed ({})", describe(status));
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        None => {
            eprintln!("demo: the application failed ({})", describe(status));
            ExitCode::FAILURE
        }
    }
}

/// `path` relative to the workspace root when it is inside it (shorter to read).
fn short<'p>(paths: &Paths, path: &'p Path) -> &'p Path {
    path.strip_prefix(&paths.root).unwrap_or(path)
}
