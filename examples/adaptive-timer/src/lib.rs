//! `adaptive_timer`: an example rocprof-replay tool that replays each kernel dispatch until its
//! kernel time is known precisely enough.
//!
//! Every dispatch is replayed with [`PassPlan::up_to`] `ROCPROF_REPLAY_MAX_PASSES` passes and a
//! started [`Service::DispatchTiming`] context. After each pass the policy's
//! [`should_continue`](ReplayPolicy::should_continue) ([`decide`]) computes the relative standard error of the mean kernel time,
//! `RSE = stddev / sqrt(n) / mean` (sample standard deviation, [`Summary`]), and stops once it
//! is below the target, after at least [`MIN_PASSES`] passes. When a dispatch ends, one line goes to stderr:
//!
//! ```text
//! adaptive_timer: vector_add dispatch 3 on agent 0: replayed, 6 passes, RSE 1.21% (target 2.00%, reached), kernel mean 12.4 us (stddev 0.4 us)
//! adaptive_timer: noisy dispatch 4 on agent 0: replayed, 50 passes, RSE 3.10% (target 2.00%, not reached: cap of 50 passes), kernel mean 80.1 us (stddev 17.6 us)
//! ```
//!
//! # Usage
//! ```text
//! cargo build --release -p rocprof-replay-example-adaptive-timer
//! LD_PRELOAD=target/release/libadaptive_timer.so ./app
//! HSA_TOOLS_LIB=target/release/libadaptive_timer.so ./app
//! ```
//!
//! | variable | effect |
//! |---|---|
//! | `ROCPROF_REPLAY_TARGET_RSE` | target relative standard error, as a fraction (`0.02`) or a percentage (`2%`); default 2% |
//! | `ROCPROF_REPLAY_MAX_PASSES` | most passes per dispatch, 3 to 1000 (default 50) |
//!
//! An invalid value is reported on stderr at load and the default is used. When no pass gets
//! a kernel time (timing unavailable), the loop stops after [`MIN_PASSES`] passes.

use std::time::Duration;

use rocprof_replay::report::TimeUnit;
use rocprof_replay::stats::Summary;
use rocprof_replay::{
    Context, DispatchInfo, MAX_OPEN_ENDED_PASSES, Outcome, OutcomeKind, PassPlan, PassReport,
    ReplayPolicy, Service, config,
};

/// Fewest passes before the loop may stop (a standard error needs a few samples).
pub const MIN_PASSES: u32 = 3;

/// Target relative standard error when `ROCPROF_REPLAY_TARGET_RSE` is not set (2%).
pub const DEFAULT_TARGET_RSE: f64 = 0.02;

/// Most passes when `ROCPROF_REPLAY_MAX_PASSES` is not set.
pub const DEFAULT_MAX_PASSES: u32 = 50;

/// When to stop replaying a dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Stop once the relative standard error is below this (a fraction: 0.02 is 2%).
    pub target_rse: f64,
    /// Stop after this many passes whatever the error.
    pub max_passes: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            target_rse: DEFAULT_TARGET_RSE,
            max_passes: DEFAULT_MAX_PASSES,
        }
    }
}

/// Reads the settings from the environment; an invalid value is reported on stderr and its
/// default is used.
pub fn config() -> Settings {
    let tool = "adaptive_timer";
    Settings {
        target_rse: config::setting(
            tool,
            config::TARGET_RSE,
            DEFAULT_TARGET_RSE,
            config::fraction,
        ),
        max_passes: config::setting(tool, config::MAX_PASSES, DEFAULT_MAX_PASSES, |text| {
            config::integer_in(text, MIN_PASSES..=MAX_OPEN_ENDED_PASSES)
        }),
    }
}

/// What to do after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run another pass.
    Continue,
    /// Stop: the relative standard error is below the target.
    Converged,
    /// Stop: the pass cap is reached.
    Capped,
    /// Stop: [`MIN_PASSES`] passes ran and none got a kernel time.
    NoTiming,
}

/// Decides after `completed` passes, of which `samples` are the kernel times.
pub fn decide(settings: &Settings, samples: &[Duration], completed: u32) -> Decision {
    if completed >= settings.max_passes {
        return Decision::Capped;
    }
    if completed < MIN_PASSES {
        return Decision::Continue;
    }
    if samples.is_empty() {
        return Decision::NoTiming;
    }
    match Summary::of(samples).and_then(|s| s.rse) {
        Some(rse) if rse < settings.target_rse => Decision::Converged,
        _ => Decision::Continue,
    }
}

/// The tool: replays every dispatch until its kernel time is precise enough.
#[rocprof_replay::rocprof_tool(new = AdaptiveTimer::from_env)]
#[derive(Debug)]
pub struct AdaptiveTimer {
    settings: Settings,
    timing: Context,
}

impl AdaptiveTimer {
    /// A timer with these settings, its timing context started.
    pub fn new(settings: Settings) -> AdaptiveTimer {
        AdaptiveTimer {
            settings,
            timing: Context::started("adaptive_timer", &[Service::DispatchTiming]),
        }
    }

    /// A timer configured from the environment (see the crate docs).
    pub fn from_env() -> AdaptiveTimer {
        AdaptiveTimer::new(config())
    }

    /// The stopping rule.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The timing context (started).
    pub fn timing(&self) -> &Context {
        &self.timing
    }
}

impl ReplayPolicy for AdaptiveTimer {
    /// Kernel time of each timed pass, in pass order.
    type State = Vec<Duration>;
    type PassState = ();

    fn pass_count(&self, _info: &DispatchInfo) -> PassPlan<Self> {
        // The cap is the plan's bound; `should_continue` stops earlier once the error is small.
        PassPlan::up_to(self.settings.max_passes, Vec::with_capacity(16))
    }

    fn should_continue(
        &self,
        _info: &DispatchInfo,
        samples: &Vec<Duration>,
        completed: u32,
    ) -> bool {
        decide(&self.settings, samples, completed) == Decision::Continue
    }

    fn on_pass_end(&self, pass: &PassReport<'_>, samples: &mut Vec<Duration>, _: &mut ()) {
        samples.extend(pass.kernel_time);
    }

    fn on_end(&self, info: &DispatchInfo, samples: Vec<Duration>, outcome: &Outcome) {
        eprintln!("{}", format_line(&self.settings, info, outcome, &samples));
    }
}

/// The report line of one dispatch (without a trailing newline).
pub fn format_line(
    settings: &Settings,
    info: &DispatchInfo,
    outcome: &Outcome,
    samples: &[Duration],
) -> String {
    let mut line = format!(
        "adaptive_timer: {info}: {}, {} pass{}",
        outcome.kind,
        outcome.passes,
        if outcome.passes == 1 { "" } else { "es" }
    );
    let Some(s) = Summary::of(samples) else {
        if outcome.kind == OutcomeKind::Replayed {
            line.push_str(", no kernel times");
        }
        return line;
    };
    let target = percent(settings.target_rse);
    match s.rse {
        Some(rse) if rse < settings.target_rse => {
            line.push_str(&format!(
                ", RSE {} (target {target}, reached)",
                percent(rse)
            ));
        }
        Some(rse) => {
            let why =
                if outcome.kind == OutcomeKind::Replayed && outcome.passes >= settings.max_passes {
                    format!("cap of {} passes", settings.max_passes)
                } else {
                    "replay ended".to_owned()
                };
            line.push_str(&format!(
                ", RSE {} (target {target}, not reached: {why})",
                percent(rse)
            ));
        }
        None => line.push_str(&format!(", RSE unknown with {} sample", s.n)),
    }
    let unit = TimeUnit::for_duration(s.mean);
    line.push_str(&format!(
        ", kernel mean {} {} (stddev {} {})",
        unit.format(s.mean),
        unit.name(),
        unit.format(s.stddev),
        unit.name()
    ));
    line
}

/// A fraction as a percentage with two decimals.
fn percent(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocprof_replay::{DeclineReason, DispatchId};

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&u| Duration::from_micros(u)).collect()
    }

    fn info() -> DispatchInfo {
        let mut info = rocprof_replay::testing::dispatch("vector_add");
        info.dispatch_id = DispatchId(3);
        info
    }

    fn outcome(kind: OutcomeKind, passes: u32) -> Outcome {
        rocprof_replay::testing::outcome(kind, passes)
    }

    #[test]
    fn decision_respects_minimum_target_and_cap() {
        let settings = Settings::default();
        let steady = us(&[100, 100, 101]);
        // Fewer than MIN_PASSES: always go on, even when already precise.
        assert_eq!(decide(&settings, &steady[..2], 2), Decision::Continue);
        assert_eq!(decide(&settings, &steady, 3), Decision::Converged);
        let noisy = us(&[100, 200, 50]);
        assert_eq!(decide(&settings, &noisy, 3), Decision::Continue);
        assert_eq!(
            decide(&settings, &noisy, settings.max_passes),
            Decision::Capped
        );
        assert_eq!(decide(&settings, &[], 3), Decision::NoTiming);
        assert_eq!(decide(&settings, &[], 1), Decision::Continue);
        // The cap wins over the minimum.
        let tight = Settings {
            target_rse: 0.5,
            max_passes: 3,
        };
        assert_eq!(decide(&tight, &noisy, 3), Decision::Capped);
    }

    #[test]
    fn noisy_samples_converge_as_n_grows() {
        let settings = Settings {
            target_rse: 0.02,
            max_passes: 1000,
        };
        // Alternating 90/110 us: stddev ~10, mean 100; RSE < 2% needs n > 25.
        let mut samples = Vec::new();
        let mut stopped_at = None;
        for completed in 1..=1000u32 {
            samples.push(Duration::from_micros(if completed % 2 == 0 {
                90
            } else {
                110
            }));
            if decide(&settings, &samples, completed) != Decision::Continue {
                stopped_at = Some(completed);
                break;
            }
        }
        let n = stopped_at.unwrap();
        assert!((25..=30).contains(&n), "stopped after {n} passes");
        assert!(Summary::of(&samples).unwrap().rse.unwrap() < 0.02);
    }

    #[test]
    fn lines() {
        let settings = Settings::default();
        let line = format_line(
            &settings,
            &info(),
            &outcome(OutcomeKind::Replayed, 3),
            &us(&[100, 100, 101]),
        );
        assert!(line.starts_with("adaptive_timer: vector_add dispatch 3 on agent 0: replayed, 3 passes, RSE 0.33% (target 2.00%, reached), kernel mean 100.3 us (stddev 0.6 us)"), "{line}");
        let line = format_line(
            &settings,
            &info(),
            &outcome(OutcomeKind::Replayed, 50),
            &us(&[100, 200, 50]),
        );
        assert!(
            line.contains("50 passes, RSE 37.80% (target 2.00%, not reached: cap of 50 passes)"),
            "{line}"
        );
        let line = format_line(
            &settings,
            &info(),
            &outcome(OutcomeKind::Declined(DeclineReason::OverBudget), 1),
            &[],
        );
        assert_eq!(
            line,
            "adaptive_timer: vector_add dispatch 3 on agent 0: declined (over_budget), 1 pass"
        );
        let line = format_line(&settings, &info(), &outcome(OutcomeKind::Replayed, 3), &[]);
        assert!(
            line.ends_with("replayed, 3 passes, no kernel times"),
            "{line}"
        );
    }

    #[test]
    fn the_plan_is_capped_and_stops_by_the_rule() {
        let tool = AdaptiveTimer::new(Settings::default());
        assert!(tool.timing().is_active());
        let info = info();
        let PassPlan::UpTo {
            passes, mut state, ..
        } = tool.pass_count(&info)
        else {
            panic!("expected an up-to plan");
        };
        assert_eq!(passes, DEFAULT_MAX_PASSES);
        for (index, t) in [100u64, 100, 101].into_iter().enumerate() {
            let kernel_time = Some(Duration::from_micros(t));
            let report =
                rocprof_replay::testing::pass_report(index as u32, None, &info, kernel_time);
            tool.on_pass_end(&report, &mut state, &mut ());
            let completed = index as u32 + 1;
            assert_eq!(
                tool.should_continue(&info, &state, completed),
                completed < 3
            );
        }
    }

    #[test]
    fn a_steady_kernel_stops_after_the_minimum_in_the_engine() {
        let tool = AdaptiveTimer::new(Settings::default());
        let mut memory = vec![0u8; 8];
        // Kernel times on the simulated device are wall times of this closure: make them
        // steady enough by doing the same small amount of work each pass.
        let run = rocprof_replay::testing::simulate(&tool, &info(), &mut memory, |m| {
            std::thread::sleep(Duration::from_millis(2));
            m[0] = m[0].wrapping_add(1);
        });
        assert_eq!(run.completions, 1);
        assert_eq!(memory[0], 1, "one execution seen");
        assert!(
            (MIN_PASSES..=DEFAULT_MAX_PASSES).contains(&run.outcome.passes),
            "{}",
            run.outcome
        );
    }
}
