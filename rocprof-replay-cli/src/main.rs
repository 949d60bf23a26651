//! `rocprof-replay`: run an application with its kernel dispatches replayed, and report.
//!
//! ```text
//! rocprof-replay run [OPTIONS] -- APP [ARGS...]   replay and time the kernels of APP
//! rocprof-replay demo                            build and run the bundled sample on hsa-emu
//! ```
//!
//! The command is built on the public SDK: the default tool is the `rocprof_replay_timer`
//! library (`rocprof-replay-cli/timer`, an ordinary SDK tool configured through the shared
//! `ROCPROF_REPLAY_*` variables, built with the SDK's `cuda` feature for NVIDIA), and the report is made from the SDK's outcome records
//! (`ROCPROF_REPLAY_OUTPUT`), which every tool built on the SDK writes — so `--tool` with any
//! such tool gets the same reports.
//!
//! | module | what |
//! |---|---|
//! | [`cli`] | the options (clap) and their checks |
//! | [`locate`] | finding the application, the timer library and hsa-emu |
//! | [`launch`] | choosing the runtime (CUDA, ROCr, hsa-emu), preflight (the tool loads the way the runtime loads it), running the application, signals, exit status |
//! | [`records`] | reading outcome records (JSON Lines), unknown kinds and fields kept |
//! | [`summary`] | per-kernel aggregation |
//! | [`report`] | table, CSV, JSON, Perfetto/Chrome trace |
//! | [`progress`] | the live progress line |
//! | [`demo`] | `rocprof-replay demo` |

mod cli;
mod demo;
mod launch;
mod locate;
mod progress;
mod records;
mod report;
mod summary;

use std::process::ExitCode;

use clap::Parser;

/// Exit status of the command's own failures (bad options are clap's 2; the application's
/// status is passed through otherwise).
pub(crate) const EXIT_FAILURE: u8 = 125;
/// The application exists but cannot be executed (as `env`, `timeout`, `nohup`).
pub(crate) const EXIT_NOT_EXECUTABLE: u8 = 126;
/// The application was not found.
pub(crate) const EXIT_NOT_FOUND: u8 = 127;
/// The application exited 0 but a dispatch ended `failed` (without `--allow-failed`). 3: none
/// of the command's other statuses (2, 125-127, 128+N), and it replaces only a success, so an
/// application's own failure status always comes through.
pub(crate) const EXIT_REPLAY_FAILED: u8 = 3;

/// A failure of the command itself: the message and the exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) status: u8,
}

impl Failure {
    /// A failure with [`EXIT_FAILURE`].
    pub(crate) fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            status: EXIT_FAILURE,
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::new(message)
    }
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Run(args) => launch::run(&args),
        cli::Command::ListMetrics(args) => launch::list_metrics(&args),
        cli::Command::Demo(args) => demo::run(&args),
        cli::Command::Preflight(args) => return launch::preflight(&args),
        cli::Command::ProbeCuda => return launch::probe_cuda(),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(failure) => {
            eprintln!("rocprof-replay: error: {}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}
