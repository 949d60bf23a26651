//! `rocprof-replay run`: check everything, run the application under the tool, report.
//!
//! 1. Options are checked by clap; then the runtime (`--runtime`, or: `cuda` when a probe
//!    process finds that `libcuda.so.1` loads and reports a device, `system` when `/dev/kfd`
//!    exists, else `emu` — said on stderr), the tool (`--tool` or the built-in timer), the
//!    application (found like `execvp`), and the output file (opened for writing now, so an
//!    unwritable one fails before the application runs).
//! 2. A preflight process (`rocprof-replay __preflight --runtime R TOOL`, with the
//!    application's environment) loads the runtime and the tool with `RTLD_NOW` (a tool that
//!    cannot load is an error with the loader's message) and then lets the runtime load the
//!    tool the way it will in the application: `hsa_init` + `hsa_shut_down` with
//!    `HSA_TOOLS_LIB` (HSA), `cuInit` with `CUDA_INJECTION64_PATH` (CUDA). A tool built with the
//!    SDK writes its verdict to `ROCPROF_REPLAY_PREFLIGHT`; a refusal (a second replay tool, an
//!    unknown table layout, a panicking constructor, CUPTI unavailable) is an error with the
//!    tool's reason, exit 125, before the application starts. A tool that writes no verdict
//!    (not built with this SDK) passes on its entry point (`OnLoad` / `InitializeInjection`).
//! 3. The application runs with the tool in `HSA_TOOLS_LIB` (HSA; hsa-emu on `LD_LIBRARY_PATH`
//!    for emu) or `CUDA_INJECTION64_PATH` (CUDA; inherited by child processes), the options as
//!    `ROCPROF_REPLAY_*` variables and `ROCPROF_REPLAY_OUTPUT` naming a temporary records file.
//!    Its stdin, stdout and stderr are this process's. SIGINT and SIGQUIT (a terminal's Ctrl-C,
//!    Ctrl-\\) reach it through the process group; this process ignores them while it waits.
//!    SIGTERM and SIGHUP sent to this process are forwarded to it.
//! 4. When it ends the records are read (malformed lines named on stderr) and the reports
//!    written (a report that cannot be written is said on stderr and keeps the status). The
//!    exit status is the application's, or 128 + the signal that killed it, or
//!    [`EXIT_REPLAY_FAILED`](crate::EXIT_REPLAY_FAILED) when it exited 0 but a dispatch ended
//!    `failed` (unless `--allow-failed`).

use std::ffi::OsString;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocprof_replay::__private::PREFLIGHT_VAR;
use rocprof_replay::config;

use rocprof_replay::counters::{CounterCatalog, MetricSet};

use crate::cli::{Format, ListMetricsArgs, PreflightArgs, RunArgs, Runtime};
use crate::locate::{self, RUNTIME_SONAME};
use crate::records::Records;
use crate::report::{self, Exit};
use crate::{Failure, progress};

/// How long the preflight may take.
const PREFLIGHT_DEADLINE: Duration = Duration::from_secs(60);
/// How long the CUDA probe may take.
const PROBE_DEADLINE: Duration = Duration::from_secs(30);
/// The CUDA driver's file name.
const CUDA_DRIVER: &str = "libcuda.so.1";

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
    let metrics = metric_names(args)?;
    if args.runtime.is_some_and(|r| r != Runtime::Emu) && !args.shadow.is_empty() {
        return Err(shadow_conflict(args.runtime.unwrap_or(Runtime::Emu)));
    }
    let runtime = choose_runtime(args.runtime)?;
    if runtime != Runtime::Emu && !args.shadow.is_empty() {
        return Err(shadow_conflict(runtime));
    }
    let emu_dir = match (runtime, &overrides.emu_dir) {
        (Runtime::Emu, Some(dir)) => Some(dir.clone()),
        (Runtime::Emu, None) => Some(locate::emu_dir()?),
        (_, _) => None,
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

    // A private directory: the preflight's verdicts, and the records unless the user names
    // a file.
    let workdir = tempfile::Builder::new()
        .prefix("rocprof-replay-")
        .tempdir()
        .map_err(|e| Failure::new(format!("cannot create a temporary directory: {e}")))?;
    // The records: a temporary file, or the user's ROCPROF_REPLAY_OUTPUT (kept; this run's
    // records are the lines appended from its current end).
    let (records_path, records_offset) =
        match std::env::var_os("ROCPROF_REPLAY_OUTPUT").filter(|v| !v.is_empty()) {
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
                (path, offset)
            }
            None => {
                let path = workdir.path().join("records.jsonl");
                File::create(&path)
                    .map_err(|e| Failure::new(format!("cannot create {}: {e}", path.display())))?;
                (path, 0)
            }
        };

    let mut env = environment(
        args,
        runtime,
        emu_dir.as_deref(),
        &tool,
        &records_path,
        &shadows,
    );
    if !metrics.is_empty() {
        env.push((config::METRICS, Some(metrics.join(",").into())));
    }
    let catalog_file = workdir.path().join("catalog.jsonl");
    preflight_check(
        &env,
        &tool,
        runtime,
        &workdir.path().join("preflight.jsonl"),
        (!metrics.is_empty()).then_some(catalog_file.as_path()),
    )?;
    if !metrics.is_empty() && runtime.is_hsa() {
        check_metrics(&metrics, &read_catalogs(&catalog_file))?;
    } else if !metrics.is_empty() {
        // CUDA: CUPTI names a GPU's metrics when the application first launches on it (device
        // ordinals exist only after its cuInit); the tool checks the names then, on stderr.
        eprintln!(
            "rocprof-replay: counters on CUDA: the names are checked against CUPTI's list of \
             each GPU's metrics at its first launch (the tool says on stderr if one is unknown)"
        );
    }

    let command: Vec<String> = args
        .app
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let launched_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let exit = launch(&app, &args.app[1..], &env, &records_path, records_offset)?;

    let records = read_records(&records_path, records_offset);
    if let Some(summary) = records.malformed_summary(&records_path) {
        eprintln!("rocprof-replay: warning: {summary}");
    }
    let tool_shown = tool.display().to_string();
    let mut run = report::Run::new(
        command,
        runtime.name(),
        tool_shown,
        exit,
        launched_ns,
        &records,
    );
    run.metrics = metrics;
    if let Err(e) = write_reports(args, &run, format, output.as_mut()) {
        eprintln!("rocprof-replay: error: {e}; the exit status is still the application's");
    }
    let status = match (exit.code, exit.signal) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signal)) => {
            eprintln!(
                "rocprof-replay: the application was killed by signal {signal} ({})",
                signal_name(signal)
            );
            (128 + signal).clamp(0, 255) as u8
        }
        (None, None) => crate::EXIT_FAILURE,
    };
    Ok(with_failed(status, &records, args.allow_failed))
}

/// The exit status given the application's and the records: [`crate::EXIT_REPLAY_FAILED`]
/// instead of 0 when a dispatch ended `failed` (unless allowed), with a summary line on stderr
/// whenever one did.
fn with_failed(status: u8, records: &Records, allow_failed: bool) -> u8 {
    let failed: Vec<&crate::records::Record> = records
        .records
        .iter()
        .filter(|r| r.outcome == "failed")
        .collect();
    if failed.is_empty() {
        return status;
    }
    let mut kernels: Vec<String> = Vec::new();
    for r in &failed {
        let what = format!(
            "{} ({})",
            r.kernel,
            r.reason.as_deref().unwrap_or("no reason")
        );
        if !kernels.contains(&what) {
            kernels.push(what);
        }
    }
    let replaced = status == 0 && !allow_failed;
    eprintln!(
        "rocprof-replay: {} dispatch{} ended `failed`: the application may have seen a wrong \
         result of {} (docs/reliability.md): {}{}",
        failed.len(),
        if failed.len() == 1 { "" } else { "es" },
        if failed.len() == 1 { "it" } else { "them" },
        kernels.join(", "),
        if replaced {
            format!(
                "; exit status {} (--allow-failed keeps the application's)",
                crate::EXIT_REPLAY_FAILED
            )
        } else {
            String::new()
        }
    );
    if replaced {
        crate::EXIT_REPLAY_FAILED
    } else {
        status
    }
}

/// Prints the table (unless `--quiet` with an output file) and writes the output file.
fn write_reports(
    args: &RunArgs,
    run: &report::Run<'_>,
    format: Format,
    output: Option<&mut (PathBuf, File)>,
) -> Result<(), String> {
    let rendered = |format: Format| -> Result<String, String> {
        Ok(match format {
            Format::Table => report::table(run),
            Format::Csv => report::csv(run)?,
            Format::Json => report::json(run),
            Format::Perfetto => report::trace(run),
        })
    };
    let mut stdout = std::io::stdout().lock();
    let result = match output {
        Some((path, file)) => {
            if !args.quiet {
                let _ = stdout.write_all(rendered(Format::Table)?.as_bytes());
                let _ = stdout.flush();
            }
            let text = rendered(format)?;
            write_output(path, file, text.as_bytes()).map(|()| {
                eprintln!(
                    "rocprof-replay: {} report written to {}",
                    format_name(format),
                    path.display()
                );
            })
        }
        None => {
            let _ = stdout.write_all(rendered(format)?.as_bytes());
            Ok(())
        }
    };
    let _ = stdout.flush();
    result
}

/// This run's records: `path` from byte `offset` on, as bytes (a bad line is malformed, the
/// others are still read), lines numbered from the start of the file.
fn read_records(path: &Path, offset: u64) -> Records {
    let bytes = std::fs::read(path).unwrap_or_default();
    let offset = (offset as usize).min(bytes.len());
    let first_line = 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count();
    Records::parse_bytes(&bytes[offset..], first_line)
}

fn shadow_conflict(runtime: Runtime) -> Failure {
    Failure {
        message: format!(
            "--shadow is for hsa-emu (HSA_EMU_SHADOW); it cannot be used with --runtime {}",
            runtime.name()
        ),
        status: 2,
    }
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

/// `--runtime`, or cuda when the CUDA driver reports a device, system when `/dev/kfd`
/// exists, else emu; said on stderr.
fn choose_runtime(chosen: Option<Runtime>) -> Result<Runtime, Failure> {
    let (runtime, why) = match chosen {
        Some(r) => (r, "--runtime".to_string()),
        None => match probe_cuda_devices() {
            Ok(n) => (
                Runtime::Cuda,
                format!("{CUDA_DRIVER}: {n} device{}", if n == 1 { "" } else { "s" }),
            ),
            Err(no_cuda) if Path::new("/dev/kfd").exists() => {
                (Runtime::System, format!("/dev/kfd exists; {no_cuda}"))
            }
            Err(no_cuda) => (Runtime::Emu, format!("no /dev/kfd; {no_cuda}")),
        },
    };
    let what = match runtime {
        Runtime::Cuda => "CUDA, the tool injected through CUDA_INJECTION64_PATH",
        Runtime::Emu => "hsa-emu, the bundled CPU runtime",
        Runtime::System => "the installed ROCm runtime",
    };
    eprintln!("rocprof-replay: runtime: {what} ({why})");
    Ok(runtime)
}

/// Runs `rocprof-replay __probe-cuda` (the driver is loaded in that process, never in this
/// one) and returns the number of devices, or why there is no CUDA device.
fn probe_cuda_devices() -> Result<u32, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__probe-cuda")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Nothing is injected into the probe: no tool of the user's, none preloaded.
        .env_remove("CUDA_INJECTION64_PATH")
        .env_remove("LD_PRELOAD");
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot run the CUDA probe: {e}"))?;
    let (status, stdout, stderr) =
        wait_with_deadline(child, PROBE_DEADLINE).map_err(|e| format!("the CUDA probe: {e}"))?;
    let stdout = String::from_utf8_lossy(&stdout);
    let stderr = String::from_utf8_lossy(&stderr);
    match (status.code(), stdout.trim().parse::<u32>()) {
        (Some(0), Ok(n)) if n > 0 => Ok(n),
        (Some(0), Ok(_)) => Err("the CUDA driver reports no device".into()),
        _ => Err(stderr.trim().to_string()),
    }
}

/// Waits for `child` at most `deadline` (then kills it), collecting its stdout and stderr.
fn wait_with_deadline(
    mut child: std::process::Child,
    deadline: Duration,
) -> Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>), String> {
    use std::io::Read as _;
    let reader = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {deadline:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for it: {e}")),
        }
    };
    // The pipes close when the child exits (a grandchild holding them open is not waited
    // for beyond this point: the readers are detached).
    let join = |h: std::thread::JoinHandle<Vec<u8>>| {
        let until = Instant::now() + Duration::from_secs(2);
        while !h.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            h.join().unwrap_or_default()
        } else {
            Vec::new()
        }
    };
    Ok((status, join(out), join(err)))
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

fn write_output(path: &Path, file: &mut File, bytes: &[u8]) -> Result<(), String> {
    let result = file
        .set_len(0)
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.flush());
    result.map_err(|e| format!("cannot write the report to {}: {e}", path.display()))
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
    runtime: Runtime,
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
    if runtime.is_hsa() {
        env.push(("HSA_TOOLS_LIB", Some(prepend("HSA_TOOLS_LIB", tool, " "))));
    } else {
        // The driver loads one injection library; it is inherited by child processes (an
        // interpreter's, a launcher's), as the driver reads it at each process's cuInit.
        if let Some(old) = std::env::var_os("CUDA_INJECTION64_PATH")
            .filter(|old| !old.is_empty() && Path::new(old) != tool)
        {
            eprintln!(
                "rocprof-replay: warning: CUDA_INJECTION64_PATH={} is replaced by the tool",
                Path::new(&old).display()
            );
        }
        env.push(("CUDA_INJECTION64_PATH", Some(tool.as_os_str().to_owned())));
    }
    // A verdict file of the user's (or of an outer run) is the preflight's business only.
    env.push((PREFLIGHT_VAR, None));
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
    if let Some(mode) = args.restore {
        env.push(("ROCPROF_REPLAY_RESTORE", Some(mode.name().into())));
    }
    if let Some(what) = args.footprint {
        env.push(("ROCPROF_REPLAY_FOOTPRINT", Some(what.name().into())));
    }
    if let Some(n) = args.run {
        env.push(("ROCPROF_REPLAY_RUN", Some(n.to_string().into())));
    }
    if let Some(k) = &args.kernel {
        env.push((config::KERNEL, Some(k.as_str().into())));
    }
    if let Some(x) = &args.exclude {
        env.push((config::EXCLUDE, Some(x.as_str().into())));
    }
    if let Some(n) = args.launch_skip {
        env.push((config::LAUNCH_SKIP, Some(n.to_string().into())));
    }
    if let Some(n) = args.launch_count {
        env.push((config::LAUNCH_COUNT, Some(n.to_string().into())));
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

/// Runs the preflight in a child process with the application's environment; `verdicts` is
/// the file the tool writes its load verdict to.
fn preflight_check(
    env: &Env,
    tool: &Path,
    runtime: Runtime,
    verdicts: &Path,
    catalog: Option<&Path>,
) -> Result<(), Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(format!("cannot find this program: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__preflight")
        .arg("--runtime")
        .arg(runtime.name())
        .arg(tool)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    apply(&mut cmd, env);
    cmd.env_remove("ROCPROF_REPLAY_OUTPUT")
        .env(PREFLIGHT_VAR, verdicts);
    match catalog {
        Some(file) => cmd.env(config::CATALOG, file),
        None => cmd.env_remove(config::CATALOG),
    };
    let child = cmd
        .spawn()
        .map_err(|e| Failure::new(format!("cannot run the preflight check: {e}")))?;
    let (status, _, stderr) = wait_with_deadline(child, PREFLIGHT_DEADLINE).map_err(|e| {
        Failure::new(format!(
            "loading the tool {}: the preflight check {e}",
            tool.display()
        ))
    })?;
    let message = String::from_utf8_lossy(&stderr);
    let message = message.trim();
    // The last line is the preflight's own; the lines before are the runtime's and the tool's.
    let last = message.lines().last().unwrap_or("").trim();
    match status.code() {
        Some(0) => Ok(()),
        Some(PREFLIGHT_NO_RUNTIME) => Err(Failure::new(match runtime {
            Runtime::System => format!(
                "runtime library not found: {last}; install ROCm (libhsa-runtime64.so.1 on \
                 the library path) or use --runtime emu"
            ),
            Runtime::Emu => format!("runtime library not found: {last}"),
            Runtime::Cuda => format!(
                "the CUDA driver ({CUDA_DRIVER}) cannot be loaded: {last}; install the NVIDIA \
                 driver or choose another --runtime"
            ),
        })),
        Some(PREFLIGHT_BAD_TOOL) => Err(Failure::new(format!(
            "the tool {} cannot be loaded: {last}",
            tool.display()
        ))),
        Some(PREFLIGHT_NOT_A_TOOL) => Err(Failure::new(match runtime {
            Runtime::Cuda => format!(
                "{} is not a CUDA injection library: it exports no InitializeInjection (a tool \
                 built with rocprof-replay needs its `cuda` feature: for the built-in timer, \
                 `cargo build --release -p rocprof-replay-timer --features cuda`)",
                tool.display()
            ),
            _ => format!(
                "{} is not an HSA tool library: it exports no OnLoad",
                tool.display()
            ),
        })),
        Some(PREFLIGHT_INIT_FAILED) => Err(Failure::new(format!(
            "the runtime failed to start with the tool {} loaded: {last}",
            tool.display()
        ))),
        Some(PREFLIGHT_REFUSED) => Err(Failure::new(format!(
            "the tool {} refused to load: {last}",
            tool.display()
        ))),
        Some(PREFLIGHT_OTHER_REFUSED) => Err(Failure::new(format!(
            "another replay tool loaded beside {} refused to load: {last}; remove it from \
             HSA_TOOLS_LIB / LD_PRELOAD (one replay tool per process)",
            tool.display()
        ))),
        _ => Err(Failure::new(format!(
            "the preflight check of {} failed ({status}): {message}",
            tool.display()
        ))),
    }
}

/// The names of `--metrics` and `--metrics-file`, in order, without repeats.
fn metric_names(args: &RunArgs) -> Result<Vec<String>, Failure> {
    let mut names = args
        .metrics
        .as_deref()
        .map(config::metric_names)
        .unwrap_or_default();
    if let Some(file) = &args.metrics_file {
        let text = std::fs::read_to_string(file).map_err(|e| Failure {
            message: format!("--metrics-file {}: {e}", file.display()),
            status: 2,
        })?;
        names.extend(config::metric_names(&text));
    }
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    if (args.metrics.is_some() || args.metrics_file.is_some()) && names.is_empty() {
        return Err(Failure {
            message: "--metrics / --metrics-file name no metric".into(),
            status: 2,
        });
    }
    Ok(names)
}

/// One GPU's counters as the SDK wrote them (`ROCPROF_REPLAY_CATALOG`).
struct AgentCatalog {
    gpu: u64,
    catalog: Result<CounterCatalog, String>,
}

/// The catalogs in `file` (none when it is missing).
fn read_catalogs(file: &Path) -> Vec<AgentCatalog> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let gpu = v["gpu"].as_u64().unwrap_or(0);
            if let Some(e) = v["error"].as_str() {
                return AgentCatalog {
                    gpu,
                    catalog: Err(e.to_owned()),
                };
            }
            let mut c = CounterCatalog::new(v["agent"].as_str().unwrap_or("gpu"));
            for (block, n) in v["blocks"].as_object().into_iter().flatten() {
                c = c.block(block.clone(), n.as_u64().unwrap_or(0) as u32);
            }
            for entry in v["counters"].as_array().into_iter().flatten() {
                if let (Some(name), Some(block), Some(event)) =
                    (entry[0].as_str(), entry[1].as_str(), entry[2].as_u64())
                {
                    c = c.counter(name, block, event as u32);
                }
            }
            AgentCatalog {
                gpu,
                catalog: Ok(c),
            }
        })
        .collect()
}

/// Checks `names` against every GPU's catalog before the application runs: an unknown metric
/// is exit status 2 (with the closest names), a GPU without counters 125.
fn check_metrics(names: &[String], catalogs: &[AgentCatalog]) -> Result<(), Failure> {
    if catalogs.is_empty() {
        return Err(Failure::new(
            "--metrics: the tool reported no GPU with hardware counters (a tool built on \
             rocprof-replay reports them at load; is the runtime's GPU list empty?)",
        ));
    }
    for a in catalogs {
        let catalog = a.catalog.as_ref().map_err(|why| {
            Failure::new(format!(
                "--metrics: GPU {} offers no hardware counters: {why}",
                a.gpu
            ))
        })?;
        let set = MetricSet::new(catalog, names).map_err(|e| Failure {
            message: format!("--metrics: {e} (rocprof-replay list-metrics shows them)"),
            status: 2,
        })?;
        eprintln!("rocprof-replay: counters on GPU {}: {set}", a.gpu);
    }
    Ok(())
}

/// `rocprof-replay list-metrics`: what each GPU offers, from a probe process that loads the
/// runtime and the tool (the preflight).
pub(crate) fn list_metrics(args: &ListMetricsArgs) -> Result<u8, Failure> {
    let runtime = choose_runtime(args.runtime)?;
    if !runtime.is_hsa() {
        println!(
            "CUDA: the metrics are those CUPTI's profiler host API lists for each GPU's chip \
             (base metrics with their .sum/.avg/.min/.max and other sub-metrics), reported \
             when the application first launches on the GPU: run an application with \
             ROCPROF_REPLAY_CATALOG=FILE to write them, or see Nsight Compute's \
             `ncu --query-metrics`"
        );
        return Ok(0);
    }
    let tool = match &args.tool {
        Some(t) => absolute(t)?,
        None => locate::timer_lib()?,
    };
    let mut env: Env = Vec::new();
    if runtime == Runtime::Emu {
        let dir = locate::emu_dir()?;
        env.push((
            "LD_LIBRARY_PATH",
            Some(prepend("LD_LIBRARY_PATH", &dir, ":")),
        ));
    }
    env.push(("HSA_TOOLS_LIB", Some(tool.as_os_str().to_owned())));
    env.push((config::METRICS, None));
    let workdir = tempfile::Builder::new()
        .prefix("rocprof-replay-")
        .tempdir()
        .map_err(|e| Failure::new(format!("cannot create a temporary directory: {e}")))?;
    let file = workdir.path().join("catalog.jsonl");
    preflight_check(
        &env,
        &tool,
        runtime,
        &workdir.path().join("preflight.jsonl"),
        Some(&file),
    )?;
    let catalogs = read_catalogs(&file);
    if catalogs.is_empty() {
        return Err(Failure::new("the runtime reported no GPU"));
    }
    print!("{}", catalog_text(&catalogs));
    Ok(0)
}

/// The text `list-metrics` prints.
fn catalog_text(catalogs: &[AgentCatalog]) -> String {
    let mut out = String::new();
    for a in catalogs {
        match &a.catalog {
            Err(why) => out += &format!("GPU {}: no hardware counters ({why})\n", a.gpu),
            Ok(c) => {
                let blocks: Vec<String> = c.blocks().map(|(b, n)| format!("{b} {n}")).collect();
                out += &format!(
                    "GPU {} ({}): {} counters; counters per pass: {}\n",
                    a.gpu,
                    c.agent(),
                    c.counters().count(),
                    blocks.join(", ")
                );
                let width = c.counters().map(|i| i.name.len()).max().unwrap_or(0);
                for i in c.counters() {
                    out += &format!(
                        "  {:width$}  block {:5} event {}\n",
                        i.name, i.block, i.event
                    );
                }
            }
        }
    }
    out
}

const PREFLIGHT_NO_RUNTIME: i32 = 3;
const PREFLIGHT_BAD_TOOL: i32 = 4;
const PREFLIGHT_NOT_A_TOOL: i32 = 5;
const PREFLIGHT_INIT_FAILED: i32 = 6;
const PREFLIGHT_REFUSED: i32 = 7;
const PREFLIGHT_OTHER_REFUSED: i32 = 8;

/// Ends the preflight or probe process at once with `code`, after `message` (if any) on
/// stderr: no atexit handler, no library destructor of the runtime or the tool runs, so
/// their teardown can neither hang nor change the verdict.
fn exit_now(code: i32, message: Option<&str>) -> ! {
    use std::io::Write as _;
    if let Some(m) = message {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{m}");
        let _ = err.flush();
    }
    let _ = std::io::stdout().lock().flush();
    // SAFETY: _exit ends the process; nothing of it is used afterwards.
    unsafe { libc::_exit(code) }
}

/// `rocprof-replay __preflight --runtime R TOOL`: loads the runtime (global, as the application
/// would) and the tool with every symbol resolved now, checks the tool's entry point, then has
/// the runtime load the tool as in the application (`hsa_init` + `hsa_shut_down`, or
/// `cuInit`) and reads the tool's verdict from `$ROCPROF_REPLAY_PREFLIGHT`. The exit status
/// says what failed, the last line of stderr why.
pub(crate) fn preflight(args: &PreflightArgs) -> ExitCode {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_LOCAL, RTLD_NOW};
    let (runtime_lib, entry) = match args.runtime {
        Runtime::Cuda => (CUDA_DRIVER, "InitializeInjection"),
        _ => (RUNTIME_SONAME, "OnLoad"),
    };
    // SAFETY: loading a runtime library runs its initializers; this process exists only to
    // try that, and exits right after.
    let runtime = match unsafe { Library::open(Some(runtime_lib), RTLD_NOW | RTLD_GLOBAL) } {
        Ok(lib) => lib,
        Err(e) => exit_now(PREFLIGHT_NO_RUNTIME, Some(&e.to_string())),
    };
    // SAFETY: as above, for the tool library.
    let tool = match unsafe { Library::open(Some(&args.tool), RTLD_NOW | RTLD_LOCAL) } {
        Ok(tool) => tool,
        Err(e) => exit_now(PREFLIGHT_BAD_TOOL, Some(&e.to_string())),
    };
    let mut name = entry.as_bytes().to_vec();
    name.push(0);
    // SAFETY: only the symbol's presence is checked; it is never called from here.
    if let Err(e) = unsafe { tool.get::<*const ()>(&name) } {
        exit_now(PREFLIGHT_NOT_A_TOOL, Some(&e.to_string()));
    }
    match args.runtime {
        Runtime::Cuda => {
            // SAFETY: cuInit's C signature: CUresult cuInit(unsigned int flags).
            let init = unsafe { runtime.get::<unsafe extern "C" fn(u32) -> i32>(b"cuInit\0") };
            let init = match init {
                Ok(f) => f,
                Err(e) => exit_now(PREFLIGHT_NO_RUNTIME, Some(&e.to_string())),
            };
            // SAFETY: cuInit(0) is the documented first driver call; the driver loads the
            // injection library named by CUDA_INJECTION64_PATH during it.
            let rc = unsafe { init(0) };
            if rc != 0 {
                exit_now(
                    PREFLIGHT_INIT_FAILED,
                    Some(&format!("cuInit failed with CUresult {rc}")),
                );
            }
        }
        _ => {
            type Call = unsafe extern "C" fn() -> u32;
            // SAFETY: hsa_init / hsa_shut_down take no arguments and return hsa_status_t.
            let (init, shut_down) = unsafe {
                (
                    runtime.get::<Call>(b"hsa_init\0"),
                    runtime.get::<Call>(b"hsa_shut_down\0"),
                )
            };
            let (init, shut_down) = match (init, shut_down) {
                (Ok(i), Ok(s)) => (i, s),
                (Err(e), _) | (_, Err(e)) => exit_now(PREFLIGHT_NO_RUNTIME, Some(&e.to_string())),
            };
            // SAFETY: the runtime's documented start and stop; it loads HSA_TOOLS_LIB (calling
            // each tool's OnLoad) in hsa_init and calls OnUnload in hsa_shut_down.
            let rc = unsafe { init() };
            if rc != 0 {
                exit_now(
                    PREFLIGHT_INIT_FAILED,
                    Some(&format!("hsa_init failed with status {rc:#x}")),
                );
            }
            // SAFETY: as above; balances the hsa_init that succeeded.
            unsafe { shut_down() };
        }
    }
    // Neither library is unloaded: the process ends now.
    std::mem::forget(tool);
    std::mem::forget(runtime);
    match refusal(&args.tool) {
        Some(Refusal::Mine(why)) => exit_now(PREFLIGHT_REFUSED, Some(&why)),
        Some(Refusal::Other(why)) => exit_now(PREFLIGHT_OTHER_REFUSED, Some(&why)),
        None => exit_now(0, None),
    }
}

/// A refusal found in the verdicts.
enum Refusal {
    /// The tool's own: its reason.
    Mine(String),
    /// Another SDK tool's in the same process: `LIBRARY: reason`.
    Other(String),
}

/// The first refusal in the verdicts the tools wrote (the tool itself, or a second replay
/// tool loaded beside it).
fn refusal(tool: &Path) -> Option<Refusal> {
    let path = std::env::var_os(PREFLIGHT_VAR)?;
    let text = std::fs::read_to_string(path).ok()?;
    let me = std::fs::canonicalize(tool).ok();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["verdict"] == "refused")
        .map(|v| {
            let reason = v["reason"]
                .as_str()
                .unwrap_or("no reason given")
                .to_string();
            let who = v["tool"].as_str().map(PathBuf::from);
            match who {
                Some(who) if std::fs::canonicalize(&who).ok() != me => {
                    Refusal::Other(format!("{}: {reason}", who.display()))
                }
                _ => Refusal::Mine(reason),
            }
        })
}

/// `rocprof-replay __probe-cuda`: loads the CUDA driver, `cuInit(0)`, `cuDeviceGetCount`;
/// prints the count on stdout (exit 0) or why not on stderr (exit 1).
pub(crate) fn probe_cuda() -> ExitCode {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading the driver runs its initializers; this process exists only for that.
    let driver = match unsafe { Library::open(Some(CUDA_DRIVER), RTLD_NOW | RTLD_LOCAL) } {
        Ok(lib) => lib,
        Err(_) => exit_now(
            1,
            Some(&format!("no CUDA driver ({CUDA_DRIVER} not found)")),
        ),
    };
    // SAFETY: the driver's C signatures: CUresult cuInit(unsigned), cuDeviceGetCount(int*).
    let (init, count) = unsafe {
        (
            driver.get::<unsafe extern "C" fn(u32) -> i32>(b"cuInit\0"),
            driver.get::<unsafe extern "C" fn(*mut i32) -> i32>(b"cuDeviceGetCount\0"),
        )
    };
    let (Ok(init), Ok(count)) = (init, count) else {
        exit_now(
            1,
            Some(&format!("{CUDA_DRIVER} lacks cuInit or cuDeviceGetCount")),
        );
    };
    // SAFETY: the documented first driver call.
    let rc = unsafe { init(0) };
    if rc != 0 {
        exit_now(
            1,
            Some(&format!(
                "the CUDA driver does not start (cuInit: CUresult {rc})"
            )),
        );
    }
    let mut n: i32 = 0;
    // SAFETY: `n` is a valid out-parameter.
    let rc = unsafe { count(&mut n) };
    if rc != 0 {
        exit_now(1, Some(&format!("cuDeviceGetCount failed (CUresult {rc})")));
    }
    println!("{}", n.max(0));
    exit_now(0, None)
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
