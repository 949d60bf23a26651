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
//! | `ROCPROF_REPLAY_LAUNCH_SKIP` | `--launch-skip N` | the first N dispatches the two above select are skipped (default 0) |
//! | `ROCPROF_REPLAY_LAUNCH_COUNT` | `--launch-count N` | at most N selected dispatches after those are replayed, the later ones skipped (default: all) |
//! | `ROCPROF_REPLAY_METRICS` | `--metrics a,b` / `--metrics-file F` | hardware counters collected for every replayed dispatch, on counter passes after the timed ones (the records' `metrics`) |
//!
//! Selected dispatches are counted, for the launch range, in the order the runtime hands them
//! to the tool, as Nsight Compute's `--launch-skip` counts the launches its filter matches:
//! dispatches of several threads count in whichever order their callbacks come.
//!
//! An invalid value is reported on stderr at load and its default is used (the command
//! checks its options before it starts the application, so that happens only when the
//! library is used by hand).

use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Selected dispatches that run once before any is replayed.
    pub launch_skip: u64,
    /// Most selected dispatches replayed after the skipped ones (`None`: all).
    pub launch_count: Option<u64>,
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
        let launch_count = config::try_setting(config::LAUNCH_COUNT, config::launch_count)
            .unwrap_or_else(|message| {
                eprintln!("{TOOL}: {message}; using the default (no limit)");
                None
            });
        Settings {
            passes,
            kernel: pattern(config::KERNEL),
            exclude: pattern(config::EXCLUDE),
            launch_skip: config::setting(TOOL, config::LAUNCH_SKIP, 0, config::launch_skip),
            launch_count,
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

    /// Whether the selected dispatch numbered `index` (0-based, among the dispatches
    /// [`selects`](Self::selects) accepts) is replayed: not among the first `launch_skip`,
    /// and among the `launch_count` after them.
    pub fn in_launch_range(&self, index: u64) -> bool {
        index
            .checked_sub(self.launch_skip)
            .is_some_and(|after| self.launch_count.is_none_or(|count| after < count))
    }
}

/// The tool.
#[rocprof_replay::rocprof_tool(new = Timer::from_env)]
#[derive(Debug)]
pub struct Timer {
    settings: Settings,
    timing: Context,
    metrics: MetricSets,
    /// Selected dispatches counted so far: the next one's index in the launch range.
    selected: AtomicU64,
}

impl Timer {
    /// A timer with these settings and its timing context started.
    pub fn new(settings: Settings) -> Timer {
        Timer {
            metrics: MetricSets::new(settings.metrics.clone()),
            settings,
            timing: Context::started("rocprof_replay_timer", &[Service::DispatchTiming]),
            selected: AtomicU64::new(0),
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

    /// Whether a dispatch of the kernel called `name` is replayed: it is
    /// [selected](Settings::selects), and counted among the selected dispatches (this call
    /// counts it) it is [in the launch range](Settings::in_launch_range). Call it once per
    /// dispatch: concurrent calls count in whichever order they come.
    pub fn admits(&self, name: Option<&str>) -> bool {
        if !self.settings.selects(name) {
            return false;
        }
        // One counter and nothing else published through it: any order among threads will do.
        let index = self.selected.fetch_add(1, Ordering::Relaxed);
        self.settings.in_launch_range(index)
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
        if !self.admits(info.kernel_name.as_deref()) {
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
            launch_skip: 0,
            launch_count: None,
            metrics: Vec::new(),
        }
    }

    /// The outcome of each dispatch of `kernels`, in turn, through the real engine.
    fn outcomes(tool: &Timer, kernels: &[&str]) -> Vec<OutcomeKind> {
        let mut memory = vec![0u8; 4];
        kernels
            .iter()
            .map(|k| {
                simulate(tool, &dispatch(k), &mut memory, |m| m[0] += 1)
                    .outcome
                    .kind
            })
            .collect()
    }

    /// The indices of the `Replayed` outcomes.
    fn replayed(outcomes: &[OutcomeKind]) -> Vec<usize> {
        (0..outcomes.len())
            .filter(|&i| outcomes[i] == OutcomeKind::Replayed)
            .collect()
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
    fn the_launch_range_replays_count_selected_dispatches_after_the_skipped_ones() {
        let tool = Timer::new(Settings {
            launch_skip: 2,
            launch_count: Some(3),
            ..settings(Passes::Fixed(2), None, None)
        });
        let kinds = outcomes(&tool, &["k"; 10]);
        assert_eq!(replayed(&kinds), [2, 3, 4]);
        assert!(
            kinds
                .iter()
                .all(|k| matches!(k, OutcomeKind::Replayed | OutcomeKind::Skipped)),
            "{kinds:?}"
        );
    }

    #[test]
    fn only_dispatches_the_kernel_filter_selects_count_toward_the_launch_range() {
        let tool = Timer::new(Settings {
            launch_skip: 1,
            launch_count: Some(2),
            ..settings(Passes::Fixed(2), Some("^inc"), Some("slow"))
        });
        // Selected: 1 (skipped), 3 and 4 (replayed), 6 (past the count); 2 and 5 are
        // excluded and 0 is not matched: none of them counts.
        let kinds = outcomes(
            &tool,
            &["add", "inc", "inc_slow", "inc", "inc", "inc_slow", "inc"],
        );
        assert_eq!(replayed(&kinds), [3, 4]);
    }

    #[test]
    fn without_a_launch_count_every_selected_dispatch_after_the_skipped_ones_is_replayed() {
        let tool = Timer::new(Settings {
            launch_skip: 3,
            ..settings(Passes::Fixed(2), None, None)
        });
        assert_eq!(replayed(&outcomes(&tool, &["k"; 8])), [3, 4, 5, 6, 7]);
        let defaults = settings(Passes::Fixed(2), None, None);
        assert!(
            (0..1000)
                .chain([u64::MAX])
                .all(|i| defaults.in_launch_range(i))
        );
        let last = Settings {
            launch_skip: u64::MAX,
            launch_count: Some(u64::MAX),
            ..defaults
        };
        assert!(last.in_launch_range(u64::MAX) && !last.in_launch_range(u64::MAX - 1));
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
