//! `emu-bench replay`: what kernel replay costs per dispatch, measured under the `pass_timer`
//! example tool.
//!
//! The parent ([`run`]) starts this program again once per configuration, as
//! `emu-bench replay-child DIR KERNELS.so` ([`child`]), with `LD_LIBRARY_PATH=DIR` (prepended)
//! and `ROCPROF_REPLAY_LOG=off`:
//!
//! | configuration | also in the child's environment |
//! |---|---|
//! | no tool (the baseline) | neither `LD_PRELOAD` nor `ROCPROF_REPLAY_PASSES` |
//! | `pass_timer`, N passes (N in [`PASSES`]) | `LD_PRELOAD=TOOL.so`, `ROCPROF_REPLAY_PASSES=N` |
//!
//! `HSA_TOOLS_LIB` is removed in every child. N = 1 loads the tool but, by the SDK's rules, does
//! not replay (the outcome is `skipped`): it shows the cost of the interception alone.
//!
//! The child dispatches `inc_in_place` (`examples/kernels/sample_kernels.c`) over a
//! [`BUFFER_BYTES`] buffer from the GPU agent's coarse-grained pool, so that every replayed
//! dispatch snapshots that buffer (and the module variable `hit_counter`) and restores it
//! between passes. It runs [`WARMUP`] untimed and then [`DISPATCHES`] timed dispatches, one at a
//! time, each timed like the round trip of the main measurement (reserving the slot to the
//! wait that saw the completion signal at 0). It then checks that the application saw exactly
//! one execution per dispatch (every element and `hit_counter` equal the number of dispatches),
//! times [`COPIES`] round trips of a [`COPY_BYTES`] `hsa_amd_memory_async_copy` from host memory
//! into a second device buffer (with the tool loaded, each one is fenced: proxy completion
//! signal and hand-off on the runtime's async thread), and prints one line for the parent:
//!
//! ```text
//! emu-bench replay-child: dispatches=300 median_us=812.41 p90_us=1003.17 copies=1000 copy_median_us=20.512 copy_p90_us=31.004
//! ```
//!
//! The child's stderr (one `pass_timer:` line per dispatch) goes to a file in the temporary
//! directory, not to a pipe, so the parent is not woken during the timed dispatches. The parent
//! checks that every dispatch had the expected outcome (`replayed, N passes`, or `skipped, 1
//! pass` for N = 1; no line without the tool), deletes the file, and shows its end when the
//! child failed.
//!
//! The parent then prints a table and the derived figures, with the model
//! `t(N) = baseline + fixed + N * per_pass` for the median time `t(N)` of a dispatch replayed
//! with N passes:
//! - **per pass**: the slope of the least-squares line through the medians at [`FIT_PASSES`];
//! - **fixed per replayed dispatch**: that line's value at N = 0, minus the baseline median;
//! - **per pass besides the kernel and the copies**: each replaying child also writes
//!   outcome records (`ROCPROF_REPLAY_OUTPUT`); per timed dispatch, the window's time outside the kernel's own
//!   execution (`pass_ns`, from dispatch timestamps) and outside its captures, compares and
//!   restores ([`outside_per_window`]); the slope of its medians over N is what a pass adds
//!   besides its kernel and its copies: the engine's work plus the runtime's latency in
//!   starting the pass and signalling its end (an upper bound of the engine's own overhead
//!   per pass; the two cannot be told apart from outside);
//! - **8 passes / 1 pass**: the median at N = 8 over the baseline median, against the bound 8
//!   of AMD's performance tests (see `shared/ANCHORS.md`: about 90 ms fixed and 3 ms per pass
//!   in their debug build).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rocprof_replay_demo::build::{self, Builder, describe};
use rocprof_replay_demo::hsa::{Agent, Hsa, Pool, RUNTIME_SONAME};
use rocprof_replay_sys as sys;

use crate::{Dispatcher, QUEUE_SIZE, Stats, gpu_and_cpu};

/// Package of the replay tool.
const TOOL_PACKAGE: &str = "rocprof-replay-example-pass-timer";
/// File name of that tool's library in `<target>/<profile>`.
const TOOL_LIB: &str = "libpass_timer.so";
/// The tool's pass-count variable.
const PASSES_VAR: &str = "ROCPROF_REPLAY_PASSES";
/// The subcommand that runs one configuration (internal: started by [`run`]).
pub(crate) const CHILD_SUBCOMMAND: &str = "replay-child";
/// How the child's result line starts.
const RESULT_PREFIX: &str = "emu-bench replay-child:";
/// Untimed dispatches before the measured ones, in every child.
const WARMUP: usize = 30;
/// Timed dispatches, in every child.
const DISPATCHES: usize = 300;
/// The kernel each child dispatches.
const KERNEL: &str = "inc_in_place";
/// Size of the device buffer `inc_in_place` increments (one `u32` per work-item).
const BUFFER_BYTES: usize = 1 << 20;
/// Work-items per work-group.
const WORKGROUP_SIZE: u16 = 256;
/// Untimed asynchronous copies before the measured ones, in every child.
const COPY_WARMUP: usize = 100;
/// Timed asynchronous copies, in every child.
const COPIES: usize = 1000;
/// Size of each asynchronous copy (host to a coarse-grained device buffer).
const COPY_BYTES: usize = 4096;
/// How long one copy round trip may take before the child gives up.
const COPY_TIMEOUT: Duration = Duration::from_secs(10);
/// The pass counts measured with the tool, in order.
const PASSES: [u32; 4] = [1, 2, 4, 8];
/// The pass counts the least-squares line goes through (N = 1 is not a replay).
const FIT_PASSES: [u32; 3] = [2, 4, 8];
/// How many lines of a failed child's stderr are shown.
const STDERR_TAIL_LINES: usize = 30;

/// `inc_in_place_args_t` of `sample_kernels.c`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IncInPlaceArgs {
    /// The buffer to increment.
    a: *mut u32,
    /// Its length in elements.
    n: u32,
}

/// What the replay measurement runs: the runtime, the code object and the tool.
pub(crate) struct Inputs {
    /// The directory holding `libhsa-runtime64.so.1`.
    pub(crate) emu_dir: PathBuf,
    /// The compiled sample kernels.
    pub(crate) kernels: PathBuf,
    /// The `pass_timer` tool library.
    pub(crate) tool: PathBuf,
}

/// `emu-bench replay` without paths: the steps of [`crate::prepare`], then `cargo build
/// [--release] -p rocprof-replay-example-pass-timer` (this program's profile); returns the
/// inputs, the tool being `<target>/<profile>/libpass_timer.so`.
pub(crate) fn prepare() -> Result<Inputs, String> {
    let (emu_dir, kernels) = crate::prepare()?;
    Builder::new("emu-bench: ")?.cargo("build", &["-p", TOOL_PACKAGE])?;
    let tool = build::profile_dir()?.join(TOOL_LIB);
    if !tool.is_file() {
        return Err(format!(
            "{TOOL_PACKAGE} was built but {} is missing",
            tool.display()
        ));
    }
    Ok(Inputs {
        emu_dir,
        kernels,
        tool,
    })
}

/// One configuration: without the tool, or with it and a pass count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    /// No tool loaded.
    Baseline,
    /// `pass_timer` with `ROCPROF_REPLAY_PASSES` set to this.
    Passes(u32),
}

impl Config {
    /// The table's name for it.
    fn label(self) -> String {
        match self {
            Config::Baseline => "no tool".into(),
            Config::Passes(1) => "pass_timer, 1 pass (no replay)".into(),
            Config::Passes(n) => format!("pass_timer, {n} passes"),
        }
    }

    /// The outcome every `pass_timer:` line must report, `None` when there must be no line.
    fn expected_outcome(self) -> Option<String> {
        match self {
            Config::Baseline => None,
            Config::Passes(1) => Some(": skipped, 1 pass".into()),
            Config::Passes(n) => Some(format!(": replayed, {n} passes")),
        }
    }
}

/// The figures of a child's result line, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Figures {
    /// Median time per dispatch.
    median_us: f64,
    /// 90th percentile per dispatch.
    p90_us: f64,
    /// Median time per asynchronous copy.
    copy_median_us: f64,
    /// 90th percentile per asynchronous copy.
    copy_p90_us: f64,
}

/// What one child measured.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    /// Its figures.
    figures: Figures,
    /// What the tool said about the dispatches (`"-"` without the tool), e.g. `"330/330
    /// replayed, 2 passes; snapshot 1 MiB, median 0.100 ms; restores median 0.200 ms per
    /// dispatch"`.
    outcome: String,
    /// Median over the timed dispatches of the window's time outside its kernels' own
    /// execution and its copies and compares, in microseconds (from the outcome records;
    /// `None` without replay).
    outside_us: Option<f64>,
}

/// The least-squares line `y = intercept + slope * x`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Line {
    /// Value at x = 0.
    intercept: f64,
    /// Increase per unit of x.
    slope: f64,
}

impl Line {
    /// The value at `x`.
    fn at(self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

/// The least-squares line through `points` (at least two distinct x values), `None` otherwise.
fn least_squares(points: &[(f64, f64)]) -> Option<Line> {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if points.len() < 2 || sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    Some(Line {
        intercept: mean_y - slope * mean_x,
        slope,
    })
}

/// Parses the child's result line out of its stdout.
fn parse_result(stdout: &str) -> Result<Figures, String> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .ok_or_else(|| format!("no line starting with {RESULT_PREFIX:?} in its stdout"))?;
    let field = |key: &str| -> Result<f64, String> {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
            .ok_or_else(|| format!("no {key}= in {line:?}"))?
            .parse::<f64>()
            .map_err(|e| format!("bad {key} in {line:?}: {e}"))
    };
    Ok(Figures {
        median_us: field("median_us")?,
        p90_us: field("p90_us")?,
        copy_median_us: field("copy_median_us")?,
        copy_p90_us: field("copy_p90_us")?,
    })
}

/// Checks the tool's stderr lines against `config` and summarizes them for the table.
fn check_outcomes(config: Config, stderr: &str) -> Result<String, String> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("pass_timer:"))
        .collect();
    let Some(expected) = config.expected_outcome() else {
        return match lines.first() {
            None => Ok("-".into()),
            Some(line) => Err(format!("the tool ran in the baseline: {line:?}")),
        };
    };
    if let Some(bad) = lines.iter().find(|l| !l.contains(expected.as_str())) {
        return Err(format!("a dispatch did not report {expected:?}: {bad:?}"));
    }
    let total = WARMUP + DISPATCHES;
    if lines.len() != total {
        return Err(format!(
            "the tool reported {} dispatches, expected {total}",
            lines.len()
        ));
    }
    let mut summary = format!("{total}/{total} {}", expected.trim_start_matches(": "));
    // "..., snapshot 1 MiB in 0.12 ms, restores 0.80 ms" of the timed dispatches.
    let replay_figures: Vec<(&str, f64, f64)> = lines[WARMUP..]
        .iter()
        .filter_map(|l| snapshot_figures(l))
        .collect();
    if let Some(&(bytes, _, _)) = replay_figures.last() {
        let median = |pick: fn(&(&str, f64, f64)) -> f64| {
            let mut values: Vec<f64> = replay_figures.iter().map(pick).collect();
            values.sort_unstable_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let _ = write!(
            summary,
            "; snapshot {bytes}, median {:.3} ms; restores median {:.3} ms per dispatch",
            median(|f| f.1),
            median(|f| f.2)
        );
    }
    Ok(summary)
}

/// From a `pass_timer` line ending in `, snapshot 1 MiB in 0.12 ms, restores 0.80 ms[, ...]`:
/// the size, the snapshot time and the time of all restores, in milliseconds.
fn snapshot_figures(line: &str) -> Option<(&str, f64, f64)> {
    let (_, rest) = line.split_once(", snapshot ")?;
    let (bytes, rest) = rest.split_once(" in ")?;
    let (snapshot, rest) = rest.split_once(" ms, restores ")?;
    let restores = rest.split_once(" ms")?.0;
    Some((bytes, snapshot.parse().ok()?, restores.parse().ok()?))
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

/// The last [`STDERR_TAIL_LINES`] lines of `text`, indented.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
    let mut out = String::new();
    for line in &lines[start..] {
        let _ = writeln!(out, "    {line}");
    }
    if out.is_empty() {
        out.push_str("    (empty)\n");
    }
    out
}

/// Runs one child for `config` and returns what it measured.
fn run_child(exe: &Path, inputs: &Inputs, config: Config) -> Result<Sample, String> {
    let label = config.label();
    let stderr_path = std::env::temp_dir().join(format!(
        "emu-bench-replay-{}-{}.stderr",
        std::process::id(),
        match config {
            Config::Baseline => "baseline".into(),
            Config::Passes(n) => format!("passes{n}"),
        }
    ));
    let stderr_file = std::fs::File::create(&stderr_path)
        .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
    let records_path = stderr_path.with_extension("jsonl");
    let _ = std::fs::remove_file(&records_path);
    let mut cmd = Command::new(exe);
    cmd.arg(CHILD_SUBCOMMAND)
        .arg(&inputs.emu_dir)
        .arg(&inputs.kernels)
        .env(
            "LD_LIBRARY_PATH",
            prepend("LD_LIBRARY_PATH", &inputs.emu_dir),
        )
        .env("ROCPROF_REPLAY_LOG", "off")
        .env_remove("HSA_TOOLS_LIB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_file);
    match config {
        Config::Baseline => {
            cmd.env_remove("LD_PRELOAD").env_remove(PASSES_VAR);
        }
        Config::Passes(n) => {
            cmd.env("LD_PRELOAD", &inputs.tool)
                .env(PASSES_VAR, n.to_string())
                .env("ROCPROF_REPLAY_OUTPUT", &records_path);
        }
    }
    let output = cmd.output();
    let records = std::fs::read_to_string(&records_path).unwrap_or_default();
    let _ = std::fs::remove_file(&records_path);
    let stderr = std::fs::read(&stderr_path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", stderr_path.display()));
    let _ = std::fs::remove_file(&stderr_path);
    let output = output.map_err(|e| format!("{label}: cannot start {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failure = |why: String| {
        format!(
            "{label}: {why}\n  child's stdout:\n{}  child's stderr (last lines):\n{}",
            tail(&stdout),
            tail(&stderr)
        )
    };
    if !output.status.success() {
        return Err(failure(format!(
            "the child failed ({})",
            describe(output.status)
        )));
    }
    let figures = parse_result(&stdout).map_err(&failure)?;
    let outcome = check_outcomes(config, &stderr).map_err(&failure)?;
    let outside_us = match config {
        Config::Passes(n) if n >= 2 => Some(outside_per_window(&records).map_err(failure)?),
        _ => None,
    };
    Ok(Sample {
        figures,
        outcome,
        outside_us,
    })
}

/// The median over the timed dispatches' outcome records (the last [`DISPATCHES`] lines of
/// `records`, each a replayed dispatch) of `window_ns - snapshot_ns - diff_ns - restore_ns -
/// fingerprint_ns - sum(pass_ns)`, in microseconds: the window's time outside the kernel's own
/// execution (its dispatch timestamps) and outside the captures, compares and restores. What
/// is left is the engine's own work and the runtime's latency in starting each pass and
/// signalling its end.
fn outside_per_window(records: &str) -> Result<f64, String> {
    let lines: Vec<&str> = records.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() < DISPATCHES {
        return Err(format!(
            "the records file holds {} records, expected at least {DISPATCHES}",
            lines.len()
        ));
    }
    let mut outside = Vec::with_capacity(DISPATCHES);
    for line in &lines[lines.len() - DISPATCHES..] {
        let number = |key: &str| {
            record_field(line, key)
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("no number {key} in the record {line:?}"))
        };
        let passes = number("passes")?;
        let kernels: u64 = record_field(line, "pass_ns")
            .and_then(|v| v.strip_prefix('[')?.strip_suffix(']').map(str::to_owned))
            .ok_or_else(|| format!("no pass_ns list in the record {line:?}"))?
            .split(',')
            .map(|v| v.trim().parse::<u64>())
            .sum::<Result<u64, _>>()
            .map_err(|e| format!("bad pass_ns in the record {line:?}: {e}"))?;
        if passes == 0 {
            return Err(format!("a record without passes: {line:?}"));
        }
        let window = number("window_ns")?;
        let inside = number("snapshot_ns")?
            + number("diff_ns")?
            + number("restore_ns")?
            + number("fingerprint_ns")?
            + kernels;
        outside.push(window.saturating_sub(inside) as f64 / 1e3);
    }
    outside.sort_unstable_by(f64::total_cmp);
    Ok(outside[outside.len() / 2])
}

/// The text of `"key":VALUE` in a one-line JSON record: a number, or a list of numbers with
/// its brackets (the records' flat shape; enough for the fields [`outside_per_window`] reads).
fn record_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[at..];
    let end = if rest.starts_with('[') {
        rest.find(']')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

/// The parent: runs the baseline and every pass count, prints the table and the figures.
pub(crate) fn run(inputs: &Inputs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    // The dynamic linker would only warn about a missing preload, and run without the tool.
    if !inputs.tool.is_file() {
        return Err(format!("no tool library at {}", inputs.tool.display()));
    }
    println!(
        "emu-bench replay: runtime {} ({} build of emu-bench, {} CPUs available)",
        inputs.emu_dir.join(RUNTIME_SONAME).display(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    println!("emu-bench replay: kernels {}", inputs.kernels.display());
    println!("emu-bench replay: tool {}", inputs.tool.display());
    println!(
        "emu-bench replay: {KERNEL} over {} KiB of coarse-grained device memory, {} work-items \
         in groups of {WORKGROUP_SIZE}; per configuration one child process, {DISPATCHES} \
         timed dispatches after {WARMUP} warm-up, each waited for",
        BUFFER_BYTES / 1024,
        BUFFER_BYTES / size_of::<u32>(),
    );
    let configs: Vec<Config> = std::iter::once(Config::Baseline)
        .chain(PASSES.iter().map(|&n| Config::Passes(n)))
        .collect();
    let mut samples = Vec::with_capacity(configs.len());
    for (i, &config) in configs.iter().enumerate() {
        let sample = run_child(&exe, inputs, config)?;
        println!(
            "emu-bench replay: [{}/{}] {}: median {:.2} us, p90 {:.2} us; async copy median \
             {:.2} us",
            i + 1,
            configs.len(),
            config.label(),
            sample.figures.median_us,
            sample.figures.p90_us,
            sample.figures.copy_median_us,
        );
        samples.push((config, sample));
    }
    print_report(&samples);
    Ok(())
}

/// The table and the derived figures.
fn print_report(samples: &[(Config, Sample)]) {
    let figures_of = |want: Config| {
        samples
            .iter()
            .find(|(c, _)| *c == want)
            .map(|(_, s)| s.figures)
    };
    let median_of = |want: Config| figures_of(want).map(|f| f.median_us);
    let Some(baseline) = median_of(Config::Baseline) else {
        return;
    };
    println!();
    println!(
        "| configuration | median per dispatch | p90 | median minus baseline | async copy \
         median (p90) | tool's report |"
    );
    println!("|---|---|---|---|---|---|");
    for (config, s) in samples {
        let f = s.figures;
        println!(
            "| {} | {:.2} us | {:.2} us | {:+.2} us | {:.2} us ({:.2} us) | {} |",
            config.label(),
            f.median_us,
            f.p90_us,
            f.median_us - baseline,
            f.copy_median_us,
            f.copy_p90_us,
            s.outcome
        );
    }
    println!();
    let points: Vec<(f64, f64)> = FIT_PASSES
        .iter()
        .filter_map(|&n| Some((f64::from(n), median_of(Config::Passes(n))?)))
        .collect();
    if let Some(line) = least_squares(&points) {
        let worst = points
            .iter()
            .map(|&(x, y)| (y - line.at(x)).abs())
            .fold(0.0, f64::max);
        println!(
            "least-squares fit over N = 2, 4, 8: median(N) = {:.2} us + N * {:.2} us \
             (largest residual {worst:.2} us)",
            line.intercept, line.slope
        );
        println!(
            "per pass: {:.2} us = {:.4} ms (AMD, debug build: about 3 ms)",
            line.slope,
            line.slope / 1e3
        );
        let fixed = line.intercept - baseline;
        println!(
            "fixed per replayed dispatch (fit at N = 0 minus the baseline): {fixed:.2} us = \
             {:.4} ms (AMD, debug build: about 90 ms)",
            fixed / 1e3
        );
    }
    let outside: Vec<(f64, f64)> = samples
        .iter()
        .filter_map(|(c, s)| match c {
            Config::Passes(n) => Some((f64::from(*n), s.outside_us?)),
            Config::Baseline => None,
        })
        .collect();
    if let Some(line) = least_squares(&outside) {
        let list: Vec<String> = outside
            .iter()
            .map(|(n, us)| format!("N = {n}: {us:.2} us"))
            .collect();
        println!(
            "window time outside the kernels' own execution and the window's copies and \
             compares (outcome records, median per dispatch): {}",
            list.join(", ")
        );
        println!(
            "per pass besides its kernel and its copies (slope of that over N: the engine and \
             the runtime's latency in starting the pass and signalling its end): {:.2} us; \
             fixed per window: {:.2} us",
            line.slope, line.intercept
        );
    }
    if let Some(eight) = median_of(Config::Passes(8)) {
        let ratio = eight / baseline;
        println!(
            "8 passes / 1 pass without the tool: {ratio:.2} ({} AMD's perf-test bound of 8)",
            if ratio <= 8.0 { "within" } else { "above" }
        );
        if let (Some(plain), Some(tool)) =
            (figures_of(Config::Baseline), figures_of(Config::Passes(1)))
        {
            println!(
                "async copy of {} KiB with the tool / without: {:.2} (median {:.2} us vs \
                 {:.2} us; the tool fences every copy that touches a GPU's tracked memory)",
                COPY_BYTES / 1024,
                tool.copy_median_us / plain.copy_median_us,
                tool.copy_median_us,
                plain.copy_median_us
            );
        }
        if let Some(one) = median_of(Config::Passes(1)) {
            println!(
                "8 passes / 1 pass with the tool (no replay): {:.2}; the tool without replay \
                 adds {:+.2} us per dispatch",
                eight / one,
                one - baseline
            );
        }
    }
}

/// `emu-bench replay-child DIR KERNELS.so`: the measurement inside one configuration's
/// process; prints the result line on success.
pub(crate) fn child(dir: &Path, kernels: &Path) -> Result<(), String> {
    let hsa = Hsa::open_in(dir)?;
    hsa.init()?;
    let result =
        child_measure(&hsa, kernels).and_then(|dispatches| Ok((dispatches, copy_measure(&hsa)?)));
    let shut = hsa.shut_down();
    let (stats, copies) = result?;
    shut?;
    println!(
        "{RESULT_PREFIX} dispatches={DISPATCHES} median_us={:.3} p90_us={:.3} copies={COPIES} \
         copy_median_us={:.3} copy_p90_us={:.3}",
        stats.median, stats.p90, copies.median, copies.p90
    );
    Ok(())
}

/// The GPU's coarse-grained pool, the CPU's fine-grained pool and its kernarg pool.
fn pools(hsa: &Hsa, gpu: Agent, cpu: Agent) -> Result<(Pool, Pool, Pool), String> {
    use sys::{
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED as COARSE,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED as FINE,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT as KERNARG,
    };
    let device_pool = hsa
        .find_pool(gpu, COARSE, 0)?
        .ok_or("the GPU agent has no coarse-grained global pool")?;
    let host_pool = hsa
        .find_pool(cpu, FINE, KERNARG)?
        .ok_or("the CPU agent has no fine-grained global pool")?;
    let kernarg_pool = hsa
        .find_pool(cpu, KERNARG, 0)?
        .ok_or("the CPU agent has no kernarg pool")?;
    Ok((device_pool, host_pool, kernarg_pool))
}

/// Round trips of an asynchronous copy of [`COPY_BYTES`] from host memory into a device
/// buffer (tracked by the tool, when one is loaded): each timed from submission to the wait
/// that saw its completion signal at 0. Checks the last copy's bytes arrived.
fn copy_measure(hsa: &Hsa) -> Result<Stats, String> {
    let (gpu, cpu) = gpu_and_cpu(hsa)?;
    let (device_pool, host_pool, _) = pools(hsa, gpu, cpu)?;
    let mut host = hsa.allocate(host_pool, COPY_BYTES)?;
    let device = hsa.allocate(device_pool, COPY_BYTES)?;
    let done = hsa.signal(0)?;
    let hint = (hsa.timestamp_frequency() / 10).max(1);
    let mut samples = Vec::with_capacity(COPIES);
    let total = COPY_WARMUP + COPIES;
    for i in 0..total {
        host.host_slice_mut::<u32>()?.fill(i as u32);
        done.store(1);
        let start = Instant::now();
        // SAFETY: both buffers are COPY_BYTES of live memory of these agents; neither is
        // touched by the host nor freed before the wait below saw `done` at 0 (on a failed
        // wait they are leaked, as the copy may still run).
        unsafe { hsa.async_copy(device.as_ptr(), gpu, host.as_ptr(), cpu, COPY_BYTES, &done) }?;
        if let Err(e) = done.wait_zero_by("hsa_amd_memory_async_copy", hint, start, COPY_TIMEOUT) {
            std::mem::forget(device);
            std::mem::forget(host);
            return Err(e);
        }
        if i >= COPY_WARMUP {
            samples.push(start.elapsed());
        }
    }
    let mut check = hsa.allocate(host_pool, COPY_BYTES)?;
    hsa.copy(&mut check, &device)?;
    let last = (total - 1) as u32;
    if let Some(bad) = check.host_slice_mut::<u32>()?.iter().find(|&&x| x != last) {
        return Err(format!(
            "the last async copy did not arrive: found {bad}, want {last}"
        ));
    }
    Ok(Stats::of(samples))
}

/// Sets up the buffer and the dispatch, runs the dispatches, checks the result.
fn child_measure(hsa: &Hsa, kernels: &Path) -> Result<Stats, String> {
    let (gpu, cpu) = gpu_and_cpu(hsa)?;
    let (device_pool, host_pool, kernarg_pool) = pools(hsa, gpu, cpu)?;
    let exe = hsa.load_code_object(kernels, gpu)?;
    let kernel = exe.kernel(gpu, KERNEL)?;
    let counter = exe.variable(gpu, "hit_counter")?;

    let n = BUFFER_BYTES / size_of::<u32>();
    let n32 = u32::try_from(n).map_err(|_| "the buffer has too many elements")?;
    let mut host = hsa.allocate(host_pool, BUFFER_BYTES)?;
    host.host_slice_mut::<u32>()?.fill(0);
    let mut device = hsa.allocate(device_pool, BUFFER_BYTES)?;
    hsa.copy(&mut device, &host)?;
    let args = IncInPlaceArgs {
        a: device.as_ptr().cast(),
        n: n32,
    };
    let kernarg = hsa.make_kernarg(kernarg_pool, &kernel, &args)?;
    let done = hsa.signal(0)?;
    let queue = hsa.create_queue(gpu, QUEUE_SIZE)?;
    // SAFETY: `kernarg` holds an `inc_in_place_args_t` for `inc_in_place` pointing to
    // `device`, `n` u32 (the kernel touches only a[0..n) and its own module variable); the grid
    // is `n` work-items. `device` and `kernarg` are declared before the dispatcher, so they are
    // dropped after it, and the host touches `device` only after the last round trip, which
    // waited for its dispatch.
    let dispatcher = unsafe {
        Dispatcher::new(
            &queue,
            &kernel,
            &kernarg,
            WORKGROUP_SIZE,
            n32,
            &done,
            (hsa.timestamp_frequency() / 10).max(1),
        )
    };
    for _ in 0..WARMUP {
        dispatcher.round_trip()?;
    }
    let samples = (0..DISPATCHES)
        .map(|_| dispatcher.round_trip())
        .collect::<Result<Vec<Duration>, String>>()?;

    // The application must have seen exactly one execution of every dispatch.
    let total = u32::try_from(WARMUP + DISPATCHES).map_err(|_| "too many dispatches")?;
    hsa.copy(&mut host, &device)?;
    let a = host.host_slice_mut::<u32>()?;
    if let Some(i) = a.iter().position(|&x| x != total) {
        let wrong = a.iter().filter(|&&x| x != total).count();
        return Err(format!(
            "{KERNEL}: {wrong} of {n} elements wrong after {total} dispatches, first a[{i}] = \
             {} (want {total})",
            a[i]
        ));
    }
    let count: u32 = hsa.read_variable(&counter)?;
    if count != total {
        return Err(format!(
            "{KERNEL}: hit_counter = {count} after {total} dispatches (want {total})"
        ));
    }
    Ok(Stats::of(samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_line() {
        let line = least_squares(&[(2.0, 17.0), (4.0, 27.0), (8.0, 47.0)]).unwrap();
        assert!((line.slope - 5.0).abs() < 1e-9, "{line:?}");
        assert!((line.intercept - 7.0).abs() < 1e-9, "{line:?}");
        assert!((line.at(1.0) - 12.0).abs() < 1e-9);
        assert_eq!(least_squares(&[(2.0, 1.0)]), None);
        assert_eq!(least_squares(&[(2.0, 1.0), (2.0, 3.0)]), None);
    }

    #[test]
    fn least_squares_of_noisy_points() {
        // y = 1 + 2x plus residuals +1, -2, +1, which are uncorrelated with x - mean x
        // (-1, 0, 1) and sum to 0: the fit is that line exactly.
        let line = least_squares(&[(0.0, 2.0), (1.0, 1.0), (2.0, 6.0)]).unwrap();
        assert!((line.slope - 2.0).abs() < 1e-9, "{line:?}");
        assert!((line.intercept - 1.0).abs() < 1e-9, "{line:?}");
    }

    #[test]
    fn result_line_is_parsed() {
        let out = "something else\nemu-bench replay-child: dispatches=300 median_us=812.41 \
                   p90_us=1003.17 copies=1000 copy_median_us=20.5 copy_p90_us=31\n";
        assert_eq!(
            parse_result(out),
            Ok(Figures {
                median_us: 812.41,
                p90_us: 1003.17,
                copy_median_us: 20.5,
                copy_p90_us: 31.0,
            })
        );
        assert!(parse_result("nothing").is_err());
        assert!(parse_result("emu-bench replay-child: median_us=1").is_err());
        assert!(parse_result("emu-bench replay-child: median_us=x p90_us=2").is_err());
    }

    fn tool_lines(outcome: &str, count: usize) -> String {
        (0..count)
            .map(|i| {
                format!(
                    "pass_timer: inc_in_place dispatch {i} on agent 0: {outcome}, kernel \
                     median 1.0 ms (min 1.0, max 1.0), snapshot 1 MiB in 0.10 ms, restores \
                     0.20 ms\n"
                )
            })
            .collect()
    }

    #[test]
    fn snapshot_figures_are_parsed() {
        assert_eq!(
            snapshot_figures(
                "pass_timer: k dispatch 3 on agent 0: replayed, 2 passes, kernel median 1.0 ms \
                 (min 1.0, max 1.0), snapshot 1.5 KiB in 0.21 ms, restores 0.80 ms, 1 region \
                 skipped at restore"
            ),
            Some(("1.5 KiB", 0.21, 0.80))
        );
        assert_eq!(
            snapshot_figures("pass_timer: k dispatch 3 on agent 0: skipped, 1 pass"),
            None
        );
    }

    #[test]
    fn outcomes_are_checked() {
        let total = WARMUP + DISPATCHES;
        assert_eq!(check_outcomes(Config::Baseline, "").as_deref(), Ok("-"));
        assert!(check_outcomes(Config::Baseline, &tool_lines("skipped, 1 pass", 1)).is_err());
        assert_eq!(
            check_outcomes(Config::Passes(4), &tool_lines("replayed, 4 passes", total)),
            Ok(format!(
                "{total}/{total} replayed, 4 passes; snapshot 1 MiB, median 0.100 ms; restores \
                 median 0.200 ms per dispatch"
            ))
        );
        assert!(
            check_outcomes(
                Config::Passes(4),
                &tool_lines("replayed, 4 passes", total - 1)
            )
            .is_err()
        );
        let mut mixed = tool_lines("replayed, 2 passes", total - 1);
        mixed.push_str(&tool_lines("declined (over_budget), 1 pass", 1));
        assert!(check_outcomes(Config::Passes(2), &mixed).is_err());
        assert!(
            check_outcomes(Config::Passes(1), &tool_lines("skipped, 1 pass", total))
                .unwrap()
                .starts_with(&format!("{total}/{total} skipped, 1 pass"))
        );
    }

    /// A record of the shape the engine writes, with these figures.
    fn record(window: u64, passes: &[u64], other: u64) -> String {
        let list: Vec<String> = passes.iter().map(u64::to_string).collect();
        format!(
            "{{\"agent\":0,\"diff_ns\":{other},\"fingerprint_ns\":{other},\"kernel\":\"k\",\
             \"pass_ns\":[{}],\"passes\":{},\"restore_ns\":{other},\"snapshot_ns\":{other},\
             \"window_ns\":{window}}}",
            list.join(","),
            passes.len()
        )
    }

    #[test]
    fn record_fields_are_read() {
        let line = record(5000, &[100, 200], 7);
        assert_eq!(record_field(&line, "window_ns"), Some("5000"));
        assert_eq!(record_field(&line, "pass_ns"), Some("[100,200]"));
        assert_eq!(record_field(&line, "passes"), Some("2"));
        assert_eq!(record_field(&line, "agent"), Some("0"));
        assert_eq!(record_field(&line, "missing"), None);
    }

    #[test]
    fn the_time_outside_kernels_and_copies_is_a_median_over_the_timed_dispatches() {
        // Warm-up records first (ignored), then DISPATCHES timed ones: window - 4 * 10 -
        // kernels is 4 us for all but one, which is far off; the median is 4 us.
        let mut lines: Vec<String> = (0..5).map(|_| record(1_000_000, &[1], 0)).collect();
        lines.push(record(2_000_000, &[1000, 2000], 10));
        for _ in 1..DISPATCHES {
            lines.push(record(4 * 1000 + 40 + 4000, &[1000; 4], 10));
        }
        let us = outside_per_window(&lines.join("\n")).unwrap();
        assert!((us - 4.0).abs() < 1e-9, "{us}");
        // Too few records, or one without its numbers, is an error.
        assert!(outside_per_window(&lines[..DISPATCHES - 1].join("\n")).is_err());
        lines.push("{\"passes\":2}".into());
        assert!(outside_per_window(&lines.join("\n")).is_err());
    }
}
