//! `pass_timer`: an example rocprof-replay tool that times every kernel dispatch over a fixed
//! number of replay passes.
//!
//! Every dispatch runs `ROCPROF_REPLAY_PASSES` times (memory restored between passes; the
//! application still sees one execution) with a started [`Service::DispatchTiming`] context.
//! When a dispatch ends, one line goes to stderr (the SDK's `Display` for
//! [`DispatchInfo`] and [`Outcome`]):
//!
//! ```text
//! pass_timer: vector_add dispatch 3 on agent 0: replayed, 5 passes, kernel median 12.4 us (min 11.9, max 14.0), snapshot 512 KiB in 0.21 ms, restores 0.80 ms
//! pass_timer: big_kernel dispatch 4 on agent 0: declined (over_budget), 1 pass
//! ```
//!
//! # Usage
//! ```text
//! cargo build --release -p rocprof-replay-example-pass-timer
//! LD_PRELOAD=target/release/libpass_timer.so ./app
//! HSA_TOOLS_LIB=target/release/libpass_timer.so ./app
//! rocprof-replay run --tool target/release/libpass_timer.so --passes 3 -- ./app
//! ```
//!
//! | variable | effect |
//! |---|---|
//! | `ROCPROF_REPLAY_PASSES` | passes per dispatch, a positive integer (default 5; 1 means: run once, no replay). An invalid value is reported on stderr at load and the default is used. |
//!
//! The SDK's own variables (`ROCPROF_REPLAY_LOG`, `ROCPROF_REPLAY_OUTPUT`, ...) apply as well.

use rocprof_replay::{Context, DispatchInfo, Outcome, PassPlan, ReplayPolicy, Service, config};

/// Passes per dispatch when `ROCPROF_REPLAY_PASSES` is not set.
pub const DEFAULT_PASSES: u32 = 5;

/// The tool: replays every dispatch a fixed number of times and times each pass.
#[rocprof_replay::rocprof_tool(new = PassTimer::from_env)]
#[derive(Debug)]
pub struct PassTimer {
    passes: u32,
    timing: Context,
}

impl PassTimer {
    /// A timer running `passes` passes per dispatch, with its timing context started.
    pub fn new(passes: u32) -> PassTimer {
        PassTimer {
            passes,
            timing: Context::started("pass_timer", &[Service::DispatchTiming]),
        }
    }

    /// A timer configured from `ROCPROF_REPLAY_PASSES`.
    pub fn from_env() -> PassTimer {
        PassTimer::new(config::setting(
            "pass_timer",
            config::PASSES,
            DEFAULT_PASSES,
            config::passes,
        ))
    }

    /// Passes per dispatch.
    pub fn passes(&self) -> u32 {
        self.passes
    }

    /// The timing context (started).
    pub fn timing(&self) -> &Context {
        &self.timing
    }
}

impl ReplayPolicy for PassTimer {
    type State = ();
    type PassState = ();

    fn pass_count(&self, _info: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.passes, ())
    }

    /// Its figures are read in `on_end`: the later passes may all be queued at once.
    fn passes_ahead(&self, _info: &DispatchInfo) -> bool {
        true
    }

    fn on_end(&self, info: &DispatchInfo, _: (), outcome: &Outcome) {
        // One formatted line, one write: cheap enough for the submitting thread.
        eprintln!("{}", format_line(info, outcome));
    }
}

/// The report line of one dispatch (without a trailing newline).
pub fn format_line(info: &DispatchInfo, outcome: &Outcome) -> String {
    format!("pass_timer: {info}: {outcome}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocprof_replay::testing::{dispatch, simulate};
    use rocprof_replay::{DispatchId, OutcomeKind};

    #[test]
    fn every_dispatch_is_replayed_and_timed() {
        let tool = PassTimer::new(4);
        assert!(tool.timing().is_active());
        let mut memory = vec![0u8; 32];
        let run = simulate(&tool, &dispatch("add_one"), &mut memory, |m| {
            m.iter_mut().for_each(|b| *b += 1)
        });
        assert_eq!((run.kernel_runs, run.completions), (4, 1));
        assert!(memory.iter().all(|&b| b == 1));
        assert_eq!(run.outcome.kernel_times().count(), 4, "every pass is timed");
    }

    #[test]
    fn the_line_names_the_dispatch_and_the_outcome() {
        let mut info = dispatch("vector_add");
        info.dispatch_id = DispatchId(3);
        let outcome = rocprof_replay::testing::outcome(OutcomeKind::Skipped, 1);
        assert_eq!(
            format_line(&info, &outcome),
            "pass_timer: vector_add dispatch 3 on agent 0: skipped, 1 pass"
        );
        let one = PassTimer::new(1);
        assert!(matches!(
            one.pass_count(&info),
            PassPlan::Exactly { passes: 1, .. }
        ));
    }
}
