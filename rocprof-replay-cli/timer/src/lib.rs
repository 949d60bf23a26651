//! `rocprof_replay_timer`: the replay tool the `rocprof-replay` command runs by default.
//!
//! It replays every selected kernel dispatch with dispatch timing on every pass and reports
//! nothing itself: the SDK's outcome records (`ROCPROF_REPLAY_OUTPUT`) carry every figure
//! (pass times, snapshot and restore bytes and times), and the command aggregates them. The
//! command configures it through the SDK's shared variables ([`rocprof_replay::config`]):
//!
//! | variable | set by | effect |
//! |---|---|---|
//! | `ROCPROF_REPLAY_PASSES` | `--passes N` | exactly N passes per selected dispatch (default 5) |
//! | `ROCPROF_REPLAY_TARGET_RSE` | `--until-stable RSE` | instead: pass until the relative standard error of the kernel time is below RSE (at least [`MIN_PASSES`]) |
//! | `ROCPROF_REPLAY_MAX_PASSES` | `--max-passes N` | the cap of `--until-stable` (default 50) |
//! | `ROCPROF_REPLAY_KERNEL` | `--kernel REGEX` | only kernels whose name matches are replayed (others are skipped) |
//! | `ROCPROF_REPLAY_EXCLUDE` | `--exclude REGEX` | kernels whose name matches are skipped |
//! | `ROCPROF_REPLAY_METRICS` | `--metrics a,b` / `--metrics-file F` | hardware counters collected for every replayed dispatch, on counter passes after the timed ones (the records' `metrics`) |
//!
//! An invalid value is reported on stderr at load and its default is used (the command
//! checks its options before it starts the application, so that happens only when the
//! library is used by hand).

use std::time::Duration;

use regex::Regex;
use rocprof_replay::counters::{CounterCatalog, MetricSet, MetricSets};
use rocprof_replay::stats::Summary;
use rocprof_replay::{
    Context, DispatchInfo, MAX_OPEN_ENDED_PASSES, PassPlan, PassReport, ReplayPolicy, Service,
    config,
};
use std::sync::Arc;

/// Passes per dispatch without `ROCPROF_REPLAY_PASSES`.
pub const DEFAULT_PASSES: u32 = 5;
/// Cap of a replay until stable without `ROCPROF_REPLAY_MAX_PASSES`.
pub const DEFAULT_MAX_PASSES: u32 = 50;
/// Fewest passes of a replay until stable.
pub const MIN_PASSES: u32 = 3;

/// How many passes a selected dispatch gets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Passes {
    /// Exactly this many.
    Fixed(u32),
    /// Until the relative standard error of the kernel time is below `target_rse`, at least
    /// [`MIN_PASSES`] and at most `max`.
    UntilStable {
        /// The target, a fraction (0.02 is 2%).
        target_rse: f64,
        /// The cap.
        max: u32,
    },
}

/// The timer's configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Passes per selected dispatch.
    pub passes: Passes,
    /// Only kernels matching this are replayed (`None`: all).
    pub kernel: Option<Regex>,
    /// Kernels matching this are not replayed.
    pub exclude: Option<Regex>,
    /// Hardware counters to collect (empty: none).
    pub metrics: Vec<String>,
}

impl Settings {
    /// Reads the settings from the environment (see the crate docs).
    pub fn from_env() -> Settings {
        const TOOL: &str = "rocprof_replay_timer";
        let passes = match config::try_setting(config::TARGET_RSE, config::fraction) {
            Ok(Some(target_rse)) => Passes::UntilStable {
                target_rse,
                max: config::setting(TOOL, config::MAX_PASSES, DEFAULT_MAX_PASSES, |t| {
                    config::integer_in(t, MIN_PASSES..=MAX_OPEN_ENDED_PASSES)
                }),
            },
            other => {
                if let Err(message) = other {
                    eprintln!("{TOOL}: {message}; replaying a fixed number of passes");
                }
                Passes::Fixed(config::setting(
                    TOOL,
                    config::PASSES,
                    DEFAULT_PASSES,
                    config::passes,
                ))
            }
        };
        let pattern = |name: &str| {
            let text = config::var(name)?;
            Regex::new(&text)
                .map_err(|e| {
                    let e = e.to_string().replace('\n', " ");
                    eprintln!(
                        "{TOOL}: {name}={text:?} is not a valid regular expression ({e}); ignored"
                    );
                })
                .ok()
        };
        Settings {
            passes,
            kernel: pattern(config::KERNEL),
            exclude: pattern(config::EXCLUDE),
            metrics: config::var(config::METRICS)
                .map(|m| config::metric_names(&m))
                .unwrap_or_default(),
        }
    }

    /// Whether dispatches of the kernel called `name` are replayed. A kernel whose name is
    /// unknown is replayed only when no `--kernel` pattern is given.
    pub fn selects(&self, name: Option<&str>) -> bool {
        let included = match (&self.kernel, name) {
            (None, _) => true,
            (Some(k), Some(name)) => k.is_match(name),
            (Some(_), None) => false,
        };
        let excluded = match (&self.exclude, name) {
            (Some(x), Some(name)) => x.is_match(name),
            _ => false,
        };
        included && !excluded
    }
}

/// The tool.
#[rocprof_replay::rocprof_tool(new = Timer::from_env)]
#[derive(Debug)]
pub struct Timer {
    settings: Settings,
    timing: Context,
    metrics: MetricSets,
}

impl Timer {
    /// A timer with these settings and its timing context started.
    pub fn new(settings: Settings) -> Timer {
        Timer {
            metrics: MetricSets::new(settings.metrics.clone()),
            settings,
            timing: Context::started("rocprof_replay_timer", &[Service::DispatchTiming]),
        }
    }

    /// A timer configured from the environment.
    pub fn from_env() -> Timer {
        Timer::new(Settings::from_env())
    }

    /// The configuration.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The timing context (started).
    pub fn timing(&self) -> &Context {
        &self.timing
    }
}

/// Whether a replay until stable goes on after `completed` passes with these kernel times.
pub fn keep_going(target_rse: f64, times: &[Duration], completed: u32) -> bool {
    if completed < MIN_PASSES {
        return true;
    }
    match Summary::of(times) {
        // No kernel time at all: nothing will converge.
        None => false,
        Some(s) => s.rse.is_none_or(|rse| rse >= target_rse),
    }
}

impl ReplayPolicy for Timer {
    /// Kernel times so far (used by the until-stable decision).
    type State = Vec<Duration>;
    type PassState = ();

    fn pass_count(&self, info: &DispatchInfo) -> PassPlan<Self> {
        if !self.settings.selects(info.kernel_name.as_deref()) {
            return PassPlan::skip();
        }
        match self.settings.passes {
            Passes::Fixed(n) => PassPlan::exactly(n, Vec::new()),
            Passes::UntilStable { max, .. } => PassPlan::up_to(max, Vec::with_capacity(16)),
        }
    }

    fn should_continue(&self, _: &DispatchInfo, times: &Vec<Duration>, completed: u32) -> bool {
        match self.settings.passes {
            Passes::UntilStable { target_rse, .. } => keep_going(target_rse, times, completed),
            Passes::Fixed(_) => false, // an exactly plan: never asked
        }
    }

    fn on_pass_end(&self, pass: &PassReport<'_>, times: &mut Vec<Duration>, _: &mut ()) {
        times.extend(pass.kernel_time);
    }

    /// A fixed number of passes is queued ahead: nothing here depends on an earlier pass's
    /// end (the times arrive in order all the same).
    fn passes_ahead(&self, _: &DispatchInfo) -> bool {
        true
    }

    /// Builds the metric set of each GPU; an unknown name is said on stderr (the command
    /// checks the names before the application starts).
    fn on_agent(&self, agent: u32, counters: Result<&CounterCatalog, &str>) {
        if self.metrics.names().is_empty() {
            return;
        }
        let result = counters
            .map_err(|why| format!("GPU {agent} offers no hardware counters: {why}"))
            .and_then(|catalog| {
                self.metrics
                    .validate(agent, catalog)
                    .map_err(|e| e.to_string())
            });
        match result {
            // A vendor-scheduled set (CUDA) is checked here, not by the command: say its passes.
            Ok(set) if set.is_scheduled() => {
                eprintln!("rocprof_replay_timer: counters on GPU {agent}: {set}");
            }
            Ok(_) => {}
            Err(message) => {
                eprintln!(
                    "rocprof_replay_timer: {message}; no counters are collected on GPU {agent}"
                );
            }
        }
    }

    fn metrics(&self, info: &DispatchInfo) -> Option<Arc<MetricSet>> {
        self.metrics.get(info.agent_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocprof_replay::OutcomeKind;
    use rocprof_replay::testing::{dispatch, simulate};

    fn settings(passes: Passes, kernel: Option<&str>, exclude: Option<&str>) -> Settings {
        Settings {
            passes,
            kernel: kernel.map(|k| Regex::new(k).unwrap()),
            exclude: exclude.map(|x| Regex::new(x).unwrap()),
            metrics: Vec::new(),
        }
    }

    #[test]
    fn kernel_and_exclude_select_dispatches() {
        let s = settings(Passes::Fixed(2), Some("^inc"), Some("slow"));
        assert!(s.selects(Some("inc_in_place")));
        assert!(!s.selects(Some("inc_slow")));
        assert!(!s.selects(Some("vector_add")));
        assert!(!s.selects(None));
        let all = settings(Passes::Fixed(2), None, Some("vector"));
        assert!(all.selects(None) && all.selects(Some("inc")) && !all.selects(Some("vector_add")));
    }

    #[test]
    fn a_selected_dispatch_is_replayed_and_timed_an_unselected_one_skipped() {
        let tool = Timer::new(settings(Passes::Fixed(3), Some("add"), None));
        let mut memory = vec![0u8; 16];
        let run = simulate(&tool, &dispatch("add_one"), &mut memory, |m| m[0] += 1);
        assert_eq!(
            (run.outcome.kind, run.outcome.passes),
            (OutcomeKind::Replayed, 3)
        );
        assert_eq!(run.outcome.kernel_times().count(), 3);
        assert_eq!(memory[0], 1);
        let run = simulate(&tool, &dispatch("mul"), &mut memory, |m| m[0] += 1);
        assert_eq!(run.outcome.kind, OutcomeKind::Skipped);
        assert_eq!(memory[0], 2);
    }

    #[test]
    fn until_stable_stops_after_the_minimum_when_steady_and_at_the_cap_when_noisy() {
        let steady = [100, 100, 100].map(Duration::from_micros);
        assert!(keep_going(0.02, &steady[..2], 2));
        assert!(!keep_going(0.02, &steady, 3));
        let noisy = [10, 200, 30].map(Duration::from_micros);
        assert!(keep_going(0.02, &noisy, 3));
        assert!(!keep_going(0.02, &[], 3), "no timing: stop");
        let tool = Timer::new(settings(
            Passes::UntilStable {
                target_rse: 1e-9,
                max: 7,
            },
            None,
            None,
        ));
        let mut memory = vec![0u8; 4];
        let run = simulate(&tool, &dispatch("k"), &mut memory, |m| {
            m[0] += 1;
            std::thread::sleep(Duration::from_micros(50 * u64::from(m[0] % 3)));
        });
        assert_eq!(
            run.outcome.passes, 7,
            "a target that cannot be met ends at the cap"
        );
        assert_eq!(memory[0], 1);
    }
}
