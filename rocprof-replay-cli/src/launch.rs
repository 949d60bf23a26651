//! `rocprof-replay run`: check everything, run the application under the tool, report.
//!
//! 1. Options are checked by clap; then the runtime (`--runtime`, or system when `/dev/kfd`
//!    exists, else emu — said on stderr), the tool (`--tool` or the built-in timer), the
//!    application (found like `execvp`), and the output file (opened for writing now, so an
//!    unwritable one fails before the application runs).
//! 2. A preflight process (`rocprof-replay __preflight TOOL`, with the application's library
//!    path) loads the runtime and then the tool with `RTLD_NOW` and looks for `OnLoad`, so a
//!    tool that cannot load is an error with the loader's message instead of an application
//!    that silently runs unprofiled.
//! 3. The application runs with the tool in `HSA_TOOLS_LIB`, hsa-emu on `LD_LIBRARY_PATH`
//!    (emu), the options as `ROCPROF_REPLAY_*` variables and `ROCPROF_REPLAY_OUTPUT` naming a
//!    temporary records file. Its stdin, stdout and stderr are this process's. SIGINT and SIGQUIT
//!    (a terminal's Ctrl-C, Ctrl-\) reach it through the process group; this process ignores
//!    them while it waits. SIGTERM and SIGHUP sent to this process are forwarded to it.
//! 4. When it ends the records are read and the reports written. The exit status is the
//!    application's, or 128 + the signal that killed it.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocprof_replay::config;

use crate::cli::{Format, PreflightArgs, RunArgs, Runtime};
use crate::locate::{self, RUNTIME_SONAME};
use crate::records::Records;
use crate::report::{self, Exit};
use crate::{Failure, progress};

/// How long the preflight may take.
const PREFLIGHT_DEADLINE: Duration = Duration::from_secs(60);

/// Paths that override the usual lookup (the demo passes what it just built).
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    /// The tool library.
    pub(crate) tool: Option<PathBuf>,
    /// hsa-emu's directory.
    pub(crate) emu_dir: Option<PathBuf>,
}

/// `rocprof-replay run`.
pub(crate) fn run(args: &RunArgs) -> Result<u8, Failure> {
    run_with(args, &Overrides::default())
}

/// `rocprof-replay run` with some paths given.
pub(crate) fn run_with(args: &RunArgs, overrides: &Overrides) -> Result<u8, Failure> {
    let runtime = choose_runtime(args)?;
    if runtime == Runtime::System && !args.shadow.is_empty() {
        return Err(Failure {
            message: "--shadow is for hsa-emu (HSA_EMU_SHADOW); it cannot be used with \
                      --runtime system"
                .into(),
            status: 2,
        });
    }
    let emu_dir = match (runtime, &overrides.emu_dir) {
        (Runtime::Emu, Some(dir)) => Some(dir.clone()),
        (Runtime::Emu, None) => Some(locate::emu_dir()?),
        (Runtime::System, _) => None,
    };
    let tool = match (&args.tool, &overrides.tool) {
        (Some(tool), _) => absolute(tool).and_then(|t| {
            if t.is_file() {
                Ok(t)
            } else {
                Err(Failure::new(format!(
                    "the tool {} does not exist or is not a file",
                    tool.display()
                )))
            }
        })?,
        (None, Some(tool)) => tool.clone(),
        (None, None) => locate::timer_lib()?,
    };
    let app = locate::application(&args.app[0])?;
    let format = args
        .format
        .or_else(|| args.output.as_deref().map(Format::from_extension))
        .unwrap_or(Format::Table);
    let mut output = match &args.output {
        Some(path) => Some((path.clone(), open_output(path)?)),
        None => None,
    };
    let shadows = args
        .shadow
        .iter()
        .map(|s| absolute(s))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &shadows {
        if !s.is_file() {
            return Err(Failure::new(format!(
                "the shadow library {} does not exist",
                s.display()
            )));
        }
    }

    // The records: a temporary file, or the user's ROCPROF_REPLAY_OUTPUT (kept; this run's
    // records are the lines appended from its current end).
    let (records_path, records_offset, _workdir) = match std::env::var_os("ROCPROF_REPLAY_OUTPUT")
        .filter(|v| !v.is_empty())
    {
        Some(path) => {
            let path = absolute(Path::new(&path))?;
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .map_err(|e| {
                    Failure::new(format!(
                        "cannot write ROCPROF_REPLAY_OUTPUT={}: {e}",
                        path.display()
                    ))
                })?;
            let offset = file.metadata().map_or(0, |m| m.len());
            (path, offset, None)
        }
        None => {
            let workdir = tempfile::Builder::new()
                .prefix("rocprof-replay-")
                .tempdir()
                .map_err(|e| Failure::new(format!("cannot create a temporary directory: {e}")))?;
            let path = workdir.path().join("records.jsonl");
            File::create(&path)
                .map_err(|e| Failure::new(format!("cannot create {}: {e}", path.display())))?;
            (path, 0, Some(workdir))
        }
    };

    let env = environment(args, emu_dir.as_deref(), &tool, &records_path, &shadows);
    preflight_check(&env, &tool, runtime)?;

    let command: Vec<String> = args
        .app
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let launched_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let exit = launch(&app, &args.app[1..], &env, &records_path, records_offset)?;

    let text = read_from(&records_path, records_offset);
    let records = Records::parse(&text);
    let tool_shown = tool.display().to_string();
    let runtime_name = match runtime {
        Runtime::Emu => "emu",
        Runtime::System => "system",
    };
    let run = report::Run::new(
        command,
        runtime_name,
        tool_shown,
        exit,
        launched_ns,
        &records,
    );
    let rendered = |format: Format| -> Result<String, Failure> {
        Ok(match format {
            Format::Table => report::table(&run),
            Format::Csv => report::csv(&run).map_err(Failure::new)?,
            Format::Json => report::json(&run),
            Format::Perfetto => report::trace(&run),
        })
    };
    let mut stdout = std::io::stdout().lock();
    match output.as_mut() {
        Some((path, file)) => {
            if !args.quiet {
                let _ = stdout.write_all(rendered(Format::Table)?.as_bytes());
            }
            write_output(path, file, rendered(format)?.as_bytes())?;
            eprintln!(
                "rocprof-replay: {} report written to {}",
                format_name(format),
                path.display()
            );
        }
        None => {
            let _ = stdout.write_all(rendered(format)?.as_bytes());
        }
    }
    let _ = stdout.flush();
    Ok(match (exit.code, exit.signal) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signal)) => {
            eprintln!(
                "rocprof-replay: the application was killed by signal {signal} ({})",
                signal_name(signal)
            );
            (128 + signal).clamp(0, 255) as u8
        }
        (None, None) => crate::EXIT_FAILURE,
    })
}

/// The text of `path` from byte `offset` on (empty when unreadable).
fn read_from(path: &Path, offset: u64) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        if f.seek(SeekFrom::Start(offset)).is_ok() {
            let _ = f.read_to_string(&mut text);
        }
    }
    text
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Table => "table",
        Format::Csv => "CSV",
        Format::Json => "JSON",
        Format::Perfetto => "Perfetto trace",
    }
}

fn signal_name(signal: i32) -> String {
    // SAFETY: strsignal returns a pointer to a static or thread-local NUL-terminated string.
    let p = unsafe { libc::strsignal(signal) };
    if p.is_null() {
        return format!("signal {signal}");
    }
    // SAFETY: non-null, NUL-terminated (see above); copied at once.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// `--runtime`, or system when `/dev/kfd` exists, else emu; said on stderr.
fn choose_runtime(args: &RunArgs) -> Result<Runtime, Failure> {
    let (runtime, why) = match args.runtime {
        Some(r) => (r, "--runtime"),
        None if Path::new("/dev/kfd").exists() => (Runtime::System, "/dev/kfd exists"),
        None => (Runtime::Emu, "no /dev/kfd"),
    };
    let what = match runtime {
        Runtime::Emu => "hsa-emu, the bundled CPU runtime",
        Runtime::System => "the installed ROCm runtime",
    };
    eprintln!("rocprof-replay: runtime: {what} ({why})");
    Ok(runtime)
}

fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path)
        .map_err(|e| Failure::new(format!("cannot resolve {}: {e}", path.display())))
}

/// Opens the output file for writing without truncating it yet (that happens when the
/// report is written), so a file that cannot be written fails before the application runs.
fn open_output(path: &Path) -> Result<File, Failure> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| {
            Failure::new(format!(
                "cannot write the output file {}: {e}",
                path.display()
            ))
        })
}

fn write_output(path: &Path, file: &mut File, bytes: &[u8]) -> Result<(), Failure> {
    let result = file
        .set_len(0)
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.flush());
    result.map_err(|e| Failure::new(format!("writing {}: {e}", path.display())))
}

/// `value` followed by the current value of the list `var` (joined by `sep`), if any.
fn prepend(var: &str, value: &Path, sep: &str) -> OsString {
    let mut list = value.as_os_str().to_owned();
    if let Some(old) = std::env::var_os(var).filter(|old| !old.is_empty()) {
        list.push(sep);
        list.push(old);
    }
    list
}

/// Variables set (`Some`) or removed (`None`) for the application.
type Env = Vec<(&'static str, Option<OsString>)>;

fn environment(
    args: &RunArgs,
    emu_dir: Option<&Path>,
    tool: &Path,
    records: &Path,
    shadows: &[PathBuf],
) -> Env {
    let mut env: Env = Vec::new();
    if let Some(dir) = emu_dir {
        env.push((
            "LD_LIBRARY_PATH",
            Some(prepend("LD_LIBRARY_PATH", dir, ":")),
        ));
    }
    env.push(("HSA_TOOLS_LIB", Some(prepend("HSA_TOOLS_LIB", tool, " "))));
    env.push((
        "ROCPROF_REPLAY_OUTPUT",
        Some(records.as_os_str().to_owned()),
    ));
    if let Some(passes) = args.passes {
        env.push((config::PASSES, Some(passes.to_string().into())));
        env.push((config::TARGET_RSE, None));
        env.push((config::MAX_PASSES, None));
    }
    if let Some(rse) = args.until_stable {
        env.push((config::TARGET_RSE, Some(rse.to_string().into())));
        env.push((config::PASSES, None));
        if let Some(max) = args.max_passes {
            env.push((config::MAX_PASSES, Some(max.to_string().into())));
        }
    }
    if let Some(k) = &args.kernel {
        env.push((config::KERNEL, Some(k.as_str().into())));
    }
    if let Some(x) = &args.exclude {
        env.push((config::EXCLUDE, Some(x.as_str().into())));
    }
    if !shadows.is_empty() {
        let joined = std::env::join_paths(shadows).unwrap_or_default();
        env.push(("HSA_EMU_SHADOW", Some(joined)));
    }
    env
}

fn apply(cmd: &mut Command, env: &Env) {
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
}

/// Runs the preflight in a child process with the application's library path.
fn preflight_check(env: &Env, tool: &Path, runtime: Runtime) -> Result<(), Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(format!("cannot find this program: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__preflight")
        .arg(tool)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    apply(&mut cmd, env);
    cmd.env_remove("HSA_TOOLS_LIB")
        .env_remove("ROCPROF_REPLAY_OUTPUT");
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::new(format!("cannot run the preflight check: {e}")))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > PREFLIGHT_DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::new(format!(
                    "loading the tool {} did not finish within {PREFLIGHT_DEADLINE:?}",
                    tool.display()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(Failure::new(format!("waiting for the preflight: {e}"))),
        }
    };
    let mut message = String::new();
    if let Some(mut err) = child.stderr.take() {
        use std::io::Read as _;
        let _ = err.read_to_string(&mut message);
    }
    let message = message.trim();
    match status.code() {
        Some(0) => Ok(()),
        Some(PREFLIGHT_NO_RUNTIME) => Err(Failure::new(match runtime {
            Runtime::System => format!(
                "runtime library not found: {message}; install ROCm (libhsa-runtime64.so.1 on \
                 the library path) or use --runtime emu"
            ),
            Runtime::Emu => format!("runtime library not found: {message}"),
        })),
        Some(PREFLIGHT_BAD_TOOL) => Err(Failure::new(format!(
            "the tool {} cannot be loaded: {message}",
            tool.display()
        ))),
        Some(PREFLIGHT_NOT_A_TOOL) => Err(Failure::new(format!(
            "{} is not an HSA tool library: it exports no OnLoad",
            tool.display()
        ))),
        _ => Err(Failure::new(format!(
            "the preflight check of {} failed ({status}): {message}",
            tool.display()
        ))),
    }
}

const PREFLIGHT_NO_RUNTIME: i32 = 3;
const PREFLIGHT_BAD_TOOL: i32 = 4;
const PREFLIGHT_NOT_A_TOOL: i32 = 5;

/// `rocprof-replay __preflight TOOL`: loads the runtime (global, as the application would),
/// then the tool with every symbol resolved now; the exit status says what failed and stderr
/// the loader's message. The libraries are not initialized (no `hsa_init`, no `OnLoad`).
pub(crate) fn preflight(args: &PreflightArgs) -> ExitCode {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading a runtime library runs its initializers; this process exists only to
    // try that, and exits right after.
    let runtime = unsafe { Library::open(Some(RUNTIME_SONAME), RTLD_NOW | RTLD_GLOBAL) };
    if let Err(e) = runtime {
        eprintln!("{e}");
        return ExitCode::from(PREFLIGHT_NO_RUNTIME as u8);
    }
    // SAFETY: as above, for the tool library.
    let tool = match unsafe { Library::open(Some(&args.tool), RTLD_NOW | RTLD_LOCAL) } {
        Ok(tool) => tool,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(PREFLIGHT_BAD_TOOL as u8);
        }
    };
    // SAFETY: only the symbol's presence is checked; it is never called.
    let on_load = unsafe { tool.get::<*const ()>(b"OnLoad\0") };
    // Neither library is unloaded: the process exits now.
    std::mem::forget(tool);
    match on_load {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(PREFLIGHT_NOT_A_TOOL as u8)
        }
    }
}

/// The child being waited for (0: none), for the forwarding signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe calls here: an atomic load and kill(2).
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 && (signal == libc::SIGTERM || signal == libc::SIGHUP) {
        // SAFETY: kill is async-signal-safe; `pid` is our child (not yet reaped).
        unsafe { libc::kill(pid, signal) };
    }
    // SIGINT/SIGQUIT: the terminal sent them to the whole process group, the child included;
    // this process keeps waiting so that the report is written.
}

/// Installs `on_signal` for the signals this process handles while the child runs (a handler,
/// not SIG_IGN, so that the child starts with the default dispositions); returns the old ones.
fn install_handlers() -> Vec<(libc::c_int, libc::sigaction)> {
    let mut old = Vec::new();
    for signal in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid value to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: sa_mask is a sigset_t owned by `action`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: a zeroed sigaction to receive the previous disposition.
        let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: valid signal number and pointers to live sigaction values.
        if unsafe { libc::sigaction(signal, &action, &mut previous) } == 0 {
            old.push((signal, previous));
        }
    }
    old
}

fn restore_handlers(old: Vec<(libc::c_int, libc::sigaction)>) {
    for (signal, previous) in old {
        // SAFETY: restoring a disposition sigaction returned for this signal.
        unsafe { libc::sigaction(signal, &previous, std::ptr::null_mut()) };
    }
}

/// Runs the application and waits for it; the progress line follows the records meanwhile.
fn launch(
    app: &Path,
    args: &[OsString],
    env: &Env,
    records: &Path,
    offset: u64,
) -> Result<Exit, Failure> {
    let mut cmd = Command::new(app);
    cmd.args(args);
    apply(&mut cmd, env);
    let handlers = install_handlers();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            restore_handlers(handlers);
            return Err(Failure {
                message: format!("cannot run {}: {e}", app.display()),
                status: crate::EXIT_NOT_EXECUTABLE,
            });
        }
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let progress = progress::Progress::start(records.to_path_buf(), offset);
    // The application runs as long as it runs: no deadline here (the engine bounds every
    // wait inside it).
    let status = child.wait();
    CHILD.store(0, Ordering::SeqCst);
    progress.finish();
    restore_handlers(handlers);
    let status = status.map_err(|e| Failure::new(format!("waiting for the application: {e}")))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(Exit {
        code: status.code(),
        signal: status.signal(),
    })
}
