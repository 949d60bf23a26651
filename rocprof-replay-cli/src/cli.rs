//! The command line.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use regex::Regex;

/// Kernel replay for HSA/HIP and CUDA applications: each selected kernel dispatch runs several times,
/// with device memory restored between passes, while the application sees one execution.
/// Per-pass kernel times and replay costs are reported per kernel.
#[derive(Debug, Parser)]
#[command(name = "rocprof-replay", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Subcommands (parsed once: the size of `Run` does not matter).
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Command {
    /// Run an application with its kernel dispatches replayed, and report per kernel.
    #[command(after_long_help = "EXAMPLES:\n  \
        rocprof-replay run -- ./my_app input.dat\n  \
        rocprof-replay run --passes 10 --kernel '^gemm' -- ./my_app\n  \
        rocprof-replay run --kernel '^gemm' --launch-skip 40 --launch-count 20 -- ./my_app\n  \
        rocprof-replay run --until-stable 1% --max-passes 100 -- ./my_app\n  \
        rocprof-replay run --output trace.json --format perfetto -- ./my_app\n  \
        rocprof-replay run --runtime emu --shadow ./libshadows.so -- ./hip_app\n  \
        rocprof-replay run --passes 3 -o gpt2.csv -- python3 train.py   (NVIDIA: CUDA)\n  \
        rocprof-replay run --metrics SQ_WAVES,SQ_ITEMS,GRBM_COUNT -- ./my_app   (HSA)\n\n\
        RUNTIME:\n  \
        cuda when libcuda.so.1 loads and reports a device (the tool is injected through\n  \
        CUDA_INJECTION64_PATH, which child processes inherit: interpreters and launchers such\n  \
        as python work); else system when /dev/kfd exists (HSA_TOOLS_LIB); else emu. Said on\n  \
        stderr; --runtime forces it.\n\n\
        EXIT STATUS:\n  \
        the application's exit status; 128+N when it was killed by signal N; 3 when the\n  \
        application exited 0 but a dispatch ended `failed` (the application may have seen a\n  \
        wrong result of it; a summary line on stderr names them; --allow-failed keeps 0): 3 is\n  \
        none of the statuses below, and it replaces only a success, so it never hides an\n  \
        application's own failure; 125 when rocprof-replay itself fails before the\n  \
        application runs (tool does not load or refuses to, runtime or output unusable, the\n  \
        GPU offers no hardware counters for --metrics); a\n  \
        report that cannot be written after the run is said on stderr and keeps the\n  \
        application's status; 126 when APP cannot be executed; 127 when APP is not found; 2\n  \
        for invalid options, an unknown metric among them (named with the closest valid\n  \
        names, checked against the GPU before the application runs).\n\n\
        ENVIRONMENT:\n  \
        ROCPROF_REPLAY_TIMER_LIB   the built-in timer library (default: next to this program)\n  \
        ROCPROF_REPLAY_EMU_DIR     directory with hsa-emu's libhsa-runtime64.so.1 (default:\n                             \
        hsa-emu/ next to this program)\n  \
        ROCPROF_REPLAY_LOG, ROCPROF_REPLAY_BUDGET_MB, ROCPROF_REPLAY_*_TIMEOUT_MS are passed to\n  \
        the tool. The application's stdout and stderr pass through untouched; Ctrl-C reaches it\n  \
        and the report is still written.")]
    Run(RunArgs),
    /// Print the hardware counters each GPU offers (for `run --metrics`), found by loading the
    /// runtime and the tool in a probe process.
    ListMetrics(ListMetricsArgs),
    /// Build what is needed and run the bundled sample application on hsa-emu under the
    /// timer with 5 passes, then print the report.
    Demo(DemoArgs),
    /// Internal: checks in a separate process that the tool and the runtime load.
    #[command(name = "__preflight", hide = true)]
    Preflight(PreflightArgs),
    /// Internal: says in a separate process how many CUDA devices the driver reports.
    #[command(name = "__probe-cuda", hide = true)]
    ProbeCuda,
}

/// Options of `run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Passes per replayed dispatch (default 5).
    #[arg(long, value_name = "N", value_parser = parse_passes, conflicts_with = "until_stable")]
    pub(crate) passes: Option<u32>,

    /// Replay each dispatch until the relative standard error of its kernel time is below
    /// RSE (e.g. 2% or 0.02), at least 3 and at most --max-passes passes.
    #[arg(long, value_name = "RSE", value_parser = parse_rse)]
    pub(crate) until_stable: Option<f64>,

    /// Cap on passes with --until-stable, 3 to 1000 (default 50).
    #[arg(long, value_name = "N", value_parser = parse_max_passes, requires = "until_stable")]
    pub(crate) max_passes: Option<u32>,

    /// Replay only kernels whose name matches REGEX (searched anywhere in the name; anchor it
    /// with ^...$); the others run once, the ordinary way.
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    pub(crate) kernel: Option<Regex>,

    /// Do not replay kernels whose name matches REGEX.
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    pub(crate) exclude: Option<Regex>,

    /// Run the first N dispatches that --kernel and --exclude select once, the ordinary way,
    /// before replaying any (e.g. to skip a warm-up step); counted in the order the runtime
    /// hands them to the tool, as Nsight Compute's --launch-skip (default 0).
    #[arg(long, value_name = "N", value_parser = parse_launch_skip)]
    pub(crate) launch_skip: Option<u64>,

    /// Replay at most N selected dispatches, after those of --launch-skip; the later ones run
    /// once (default: all).
    #[arg(long, value_name = "N", value_parser = parse_launch_count)]
    pub(crate) launch_count: Option<u64>,

    /// Runtime: `cuda` (NVIDIA: the tool injected through CUDA_INJECTION64_PATH), `system`
    /// (the installed ROCr, HSA_TOOLS_LIB) or `emu` (the bundled hsa-emu, kernels on the CPU).
    /// Default: cuda when the CUDA driver reports a device, else system when /dev/kfd exists,
    /// else emu.
    #[arg(long, value_enum, value_name = "RUNTIME")]
    pub(crate) runtime: Option<Runtime>,

    /// Host shadow library for hsa-emu (HSA_EMU_SHADOW); repeat for several.
    #[arg(long, value_name = "LIB")]
    pub(crate) shadow: Vec<PathBuf>,

    /// Replay tool library to load instead of the built-in timer (any tool built on the SDK;
    /// the options above are passed to it as ROCPROF_REPLAY_* variables, for it to honour).
    #[arg(long, value_name = "PATH")]
    pub(crate) tool: Option<PathBuf>,

    /// Write the report to FILE (format from --format, or from the extension: .csv, .json,
    /// .trace.json / .perfetto.json; anything else: table). The table is still printed.
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,

    /// Report format (default: table; with --output, from its extension).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub(crate) format: Option<Format>,

    /// Print no table on stdout (with --output).
    #[arg(short, long, requires = "output")]
    pub(crate) quiet: bool,

    /// How memory is restored between passes: `auto` (only what the first pass wrote, found
    /// by comparing with the snapshot; a full copy for kernels that write most of it),
    /// `strict` (auto, and memory verified against the snapshot before every pass) or `full`
    /// (every byte before every pass). Default: auto, or what the tool's policy asks
    /// (ROCPROF_REPLAY_RESTORE).
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) restore: Option<RestoreArg>,

    /// What a snapshot captures: `arguments` (the allocations the dispatch's arguments point
    /// into; the agent's other allocations are fingerprinted before and after the first pass,
    /// and a kernel that wrote there during it runs once and is captured whole from then on),
    /// `verified` (as arguments, fingerprinted after the last pass too), `sampled` (faster:
    /// a kernel's first dispatches and one in 64 after are checked, the others trusted and
    /// recorded `unchecked`) or `all` (every live allocation). Default: arguments
    /// (ROCPROF_REPLAY_FOOTPRINT).
    #[arg(long, value_enum, value_name = "WHAT")]
    pub(crate) footprint: Option<FootprintArg>,

    /// Most dispatches one replay window covers, 1 to 64: consecutive dispatches of one queue
    /// or stream, with nothing else of the application between them, share one window (one
    /// check of the memory outside their snapshots) and run their passes in turn, each from
    /// its own inputs. Default: 16 (ROCPROF_REPLAY_RUN); 1: a window per dispatch.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) run: Option<u32>,

    /// Hardware counters to collect for every replayed dispatch, comma-separated (e.g.
    /// SQ_WAVES,SQ_ITEMS,GRBM_COUNT; `rocprof-replay list-metrics` shows them). The engine
    /// runs the passes the set needs after the timed ones; one column per metric (per kernel:
    /// the mean over its dispatches). On CUDA, names as CUPTI and Nsight Compute write them
    /// (sm__cycles_elapsed.avg,dram__bytes_read.sum), checked at each GPU's first launch.
    #[arg(long, value_name = "NAMES")]
    pub(crate) metrics: Option<String>,

    /// Like --metrics, from FILE: one name per line (or comma-separated), `#` comments.
    #[arg(long, value_name = "FILE")]
    pub(crate) metrics_file: Option<PathBuf>,

    /// Exit with the application's status even when a dispatch ended `failed` (default:
    /// status 3 when the application exited 0; see EXIT STATUS).
    #[arg(long)]
    pub(crate) allow_failed: bool,

    /// The application and its arguments.
    #[arg(required = true, last = true, value_name = "APP")]
    pub(crate) app: Vec<OsString>,
}

/// Options of `list-metrics`.
#[derive(Debug, Args)]
pub(crate) struct ListMetricsArgs {
    /// Runtime (as for `run`; default: as `run` chooses).
    #[arg(long, value_enum, value_name = "RUNTIME")]
    pub(crate) runtime: Option<Runtime>,
    /// Tool library to load instead of the built-in timer.
    #[arg(long, value_name = "PATH")]
    pub(crate) tool: Option<PathBuf>,
}

/// Options of `demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Also write the report to FILE (as with `run --output`).
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,

    /// Format of --output.
    #[arg(long, value_enum, value_name = "FORMAT", requires = "output")]
    pub(crate) format: Option<Format>,
}

/// Arguments of the hidden preflight.
#[derive(Debug, Args)]
pub(crate) struct PreflightArgs {
    /// The runtime the tool is loaded by.
    #[arg(long, value_enum)]
    pub(crate) runtime: Runtime,
    /// The tool library to load.
    pub(crate) tool: PathBuf,
}

/// Which runtime the application gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Runtime {
    /// The CUDA driver (NVIDIA), the tool injected through CUPTI (`CUDA_INJECTION64_PATH`).
    Cuda,
    /// The installed ROCm runtime.
    System,
    /// The bundled hsa-emu (kernels run on the CPU).
    Emu,
}

impl Runtime {
    /// The name `--runtime` takes (and the reports show).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Runtime::Cuda => "cuda",
            Runtime::System => "system",
            Runtime::Emu => "emu",
        }
    }

    /// Whether the runtime is an HSA one (the tool loads through `HSA_TOOLS_LIB`).
    pub(crate) fn is_hsa(self) -> bool {
        self != Runtime::Cuda
    }
}

/// Report formats.
/// `--restore`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum RestoreArg {
    /// The write set after the first pass; full copies for dense writers.
    Auto,
    /// Auto, verified before every pass.
    Strict,
    /// Every byte before every pass.
    Full,
}

impl RestoreArg {
    /// The value of `ROCPROF_REPLAY_RESTORE`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RestoreArg::Auto => "auto",
            RestoreArg::Strict => "strict",
            RestoreArg::Full => "full",
        }
    }
}

/// `--footprint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum FootprintArg {
    /// What the arguments name; the rest fingerprinted before and after the first pass.
    Arguments,
    /// As `arguments`, and fingerprinted after the last pass too (late writes reported in
    /// the dispatch's own record).
    Verified,
    /// As `arguments` for a kernel's first dispatches and one in 64 after: faster, and a
    /// kernel writing outside its arguments only sometimes can go unseen (records say
    /// `unchecked`).
    Sampled,
    /// Every live allocation.
    All,
}

impl FootprintArg {
    /// The value of `ROCPROF_REPLAY_FOOTPRINT`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FootprintArg::Arguments => "arguments",
            FootprintArg::Verified => "verified",
            FootprintArg::Sampled => "sampled",
            FootprintArg::All => "all",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// An aligned table.
    Table,
    /// One row per kernel.
    Csv,
    /// Kernels and every dispatch record.
    Json,
    /// Chrome trace JSON (one track per agent) that ui.perfetto.dev opens.
    Perfetto,
}

impl Format {
    /// The format a file name implies.
    pub(crate) fn from_extension(path: &std::path::Path) -> Format {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if name.ends_with(".trace.json")
            || name.ends_with(".perfetto.json")
            || name.ends_with(".trace")
        {
            Format::Perfetto
        } else if name.ends_with(".json") {
            Format::Json
        } else if name.ends_with(".csv") {
            Format::Csv
        } else {
            Format::Table
        }
    }
}

fn parse_passes(text: &str) -> Result<u32, String> {
    rocprof_replay::config::passes(text).map_err(|e| e.to_string())
}

fn parse_launch_skip(text: &str) -> Result<u64, String> {
    rocprof_replay::config::launch_skip(text).map_err(|e| e.to_string())
}

fn parse_launch_count(text: &str) -> Result<u64, String> {
    rocprof_replay::config::launch_count(text).map_err(|e| e.to_string())
}

fn parse_max_passes(text: &str) -> Result<u32, String> {
    rocprof_replay::config::integer_in(text, 3..=rocprof_replay::MAX_OPEN_ENDED_PASSES)
        .map_err(|e| e.to_string())
}

fn parse_rse(text: &str) -> Result<f64, String> {
    rocprof_replay::config::fraction(text).map_err(|e| e.to_string())
}

fn parse_regex(text: &str) -> Result<Regex, String> {
    Regex::new(text).map_err(|e| {
        // The regex crate's message spans lines; keep it on one.
        let e = e.to_string();
        let lines: Vec<&str> = e.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        format!("not a valid regular expression: {}", lines.join(" "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn formats_follow_extensions() {
        let f = |p: &str| Format::from_extension(std::path::Path::new(p));
        assert_eq!(f("r.csv"), Format::Csv);
        assert_eq!(f("r.JSON"), Format::Json);
        assert_eq!(f("r.trace.json"), Format::Perfetto);
        assert_eq!(f("r.perfetto.json"), Format::Perfetto);
        assert_eq!(f("report.txt"), Format::Table);
    }

    #[test]
    fn conflicting_and_malformed_options_are_refused() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(args)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert!(parse(&["rocprof-replay", "run", "--", "app"]).is_ok());
        let e = parse(&[
            "rocprof-replay",
            "run",
            "--passes",
            "3",
            "--until-stable",
            "2%",
            "--",
            "a",
        ]);
        assert!(e.unwrap_err().contains("cannot be used with"));
        let e = parse(&["rocprof-replay", "run", "--max-passes", "9", "--", "a"]);
        assert!(e.unwrap_err().contains("--until-stable"));
        let e = parse(&["rocprof-replay", "run", "--kernel", "(", "--", "a"]);
        assert!(e.unwrap_err().contains("not a valid regular expression"));
        let e = parse(&["rocprof-replay", "run", "--until-stable", "200%", "--", "a"]);
        assert!(e.unwrap_err().contains("expected a fraction"));
        let e = parse(&["rocprof-replay", "run", "--passes", "0", "--", "a"]);
        assert!(e.unwrap_err().contains("expected a positive integer"));
        let e = parse(&["rocprof-replay", "run", "--launch-count", "0", "--", "a"]);
        let e = e.unwrap_err();
        assert!(
            e.contains("--launch-count") && e.contains("expected a positive integer"),
            "{e}"
        );
        for bad in ["--launch-skip=-1", "--launch-skip=x"] {
            let e = parse(&["rocprof-replay", "run", bad, "--", "a"]).unwrap_err();
            assert!(
                e.contains("--launch-skip") && e.contains("expected a non-negative integer"),
                "{e}"
            );
        }
        let ok = Cli::try_parse_from([
            "rocprof-replay",
            "run",
            "--launch-skip",
            "0",
            "--launch-count",
            "7",
            "--",
            "a",
        ]);
        match ok.map(|cli| cli.command) {
            Ok(Command::Run(run)) => {
                assert_eq!((run.launch_skip, run.launch_count), (Some(0), Some(7)));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            parse(&["rocprof-replay", "run"]).is_err(),
            "APP is required"
        );
    }
}
