//! `adaptive_timer`: an example rocprof-replay tool that replays each kernel dispatch until its
//! kernel time is known precisely enough.
//!
//! Every dispatch is replayed open-ended ([`PassPlan::until`] with
//! [`ReplayPolicy::DECIDES_CONTINUE`]) with a started [`Service::DispatchTiming`] context. After
//! each pass [`ReplayPolicy::should_continue`] computes the relative standard error of the mean
//! kernel time, `RSE = stddev / sqrt(n) / mean` (sample standard deviation), and stops once it
//! is below the target, after at least [`MIN_PASSES`] passes and at most
//! `ROCPROF_REPLAY_MAX_PASSES`. When a dispatch ends, one line goes to stderr:
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

use rocprof_replay::{
    Context, DispatchInfo, MAX_OPEN_ENDED_PASSES, Outcome, OutcomeKind, PassPlan, PassReport,
    ReplayPolicy, Service,
};

/// Fewest passes before the loop may stop (a standard error needs a few samples).
pub const MIN_PASSES: u32 = 3;

/// Target relative standard error when `ROCPROF_REPLAY_TARGET_RSE` is not set (2%).
pub const DEFAULT_TARGET_RSE: f64 = 0.02;

/// Most passes when `ROCPROF_REPLAY_MAX_PASSES` is not set.
pub const DEFAULT_MAX_PASSES: u32 = 50;

/// The environment variable holding the target relative standard error.
pub const TARGET_RSE_VAR: &str = "ROCPROF_REPLAY_TARGET_RSE";

/// The environment variable holding the pass cap.
pub const MAX_PASSES_VAR: &str = "ROCPROF_REPLAY_MAX_PASSES";

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
    let target_rse = parse_target_rse(env(TARGET_RSE_VAR).as_deref()).unwrap_or_else(|message| {
        eprintln!("adaptive_timer: {message}; using the default of 2%");
        DEFAULT_TARGET_RSE
    });
    let max_passes = parse_max_passes(env(MAX_PASSES_VAR).as_deref()).unwrap_or_else(|message| {
        eprintln!("adaptive_timer: {message}; using the default of {DEFAULT_MAX_PASSES} passes");
        DEFAULT_MAX_PASSES
    });
    Settings {
        target_rse,
        max_passes,
    }
}

/// The variable's value; a non-UTF-8 value is passed on lossily, so that it fails to parse.
fn env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Parses a target relative standard error: `None` or empty gives [`DEFAULT_TARGET_RSE`];
/// `2%` and `0.02` both mean 2%. It must be above 0 and below 100%.
pub fn parse_target_rse(value: Option<&str>) -> Result<f64, String> {
    let Some(text) = value.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(DEFAULT_TARGET_RSE);
    };
    let invalid = || {
        format!(
            "{TARGET_RSE_VAR}={text:?} is not a relative standard error between 0 and 1 \
             (write a fraction such as 0.02 or a percentage such as 2%)"
        )
    };
    let (number, scale) = match text.strip_suffix('%') {
        Some(percent) => (percent.trim(), 100.0),
        None => (text, 1.0),
    };
    let value = number.parse::<f64>().map_err(|_| invalid())? / scale;
    if value.is_finite() && value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(invalid())
    }
}

/// Parses the pass cap: `None` or empty gives [`DEFAULT_MAX_PASSES`]; otherwise an integer
/// from [`MIN_PASSES`] to [`MAX_OPEN_ENDED_PASSES`].
pub fn parse_max_passes(value: Option<&str>) -> Result<u32, String> {
    let Some(text) = value.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(DEFAULT_MAX_PASSES);
    };
    match text.parse::<u32>() {
        Ok(n) if (MIN_PASSES..=MAX_OPEN_ENDED_PASSES).contains(&n) => Ok(n),
        _ => Err(format!(
            "{MAX_PASSES_VAR}={text:?} is not an integer from {MIN_PASSES} to \
             {MAX_OPEN_ENDED_PASSES}"
        )),
    }
}

/// Mean, spread and relative standard error of a set of kernel times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Number of samples.
    pub n: usize,
    /// Mean, in seconds.
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator), in seconds; 0 for one sample.
    pub stddev: f64,
    /// `stddev / sqrt(n) / mean`; `None` with fewer than two samples, 0 when every sample is
    /// 0 (times are never negative, so a zero mean means no spread).
    pub rse: Option<f64>,
}

/// Statistics of `samples`; `None` when there are none.
pub fn stats(samples: &[Duration]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    let n = samples.len();
    let nf = n as f64;
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / nf;
    let stddev = if n < 2 {
        0.0
    } else {
        let ss: f64 = samples
            .iter()
            .map(|d| (d.as_secs_f64() - mean).powi(2))
            .sum();
        (ss / (nf - 1.0)).sqrt()
    };
    let rse = (n >= 2).then(|| {
        if mean > 0.0 {
            stddev / nf.sqrt() / mean
        } else {
            0.0
        }
    });
    Some(Stats {
        n,
        mean,
        stddev,
        rse,
    })
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
    match stats(samples).and_then(|s| s.rse) {
        Some(rse) if rse < settings.target_rse => Decision::Converged,
        _ => Decision::Continue,
    }
}

/// The tool: replays every dispatch until its kernel time is precise enough.
#[rocprof_replay::rocprof_tool(new = AdaptiveTimer::from_env)]
#[derive(Debug)]
pub struct AdaptiveTimer {
    settings: Settings,
    /// Kept alive for the tool's lifetime: a dropped context stops providing its service.
    timing: Context,
}

impl AdaptiveTimer {
    /// A timer with these settings, its timing context started.
    pub fn new(settings: Settings) -> AdaptiveTimer {
        let timing = Context::new("adaptive_timer", &[Service::DispatchTiming]);
        timing.start();
        AdaptiveTimer { settings, timing }
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

    const DECIDES_CONTINUE: bool = true;

    fn pass_count(&self, _info: &DispatchInfo) -> PassPlan<Vec<Duration>> {
        PassPlan::until(Vec::with_capacity(16))
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
        "adaptive_timer: {} dispatch {} on agent {}: {}",
        info.kernel(),
        info.dispatch_id,
        info.agent_index,
        outcome.kind.label()
    );
    if let Some(reason) = outcome.kind.reason() {
        line.push_str(&format!(" ({})", reason.code()));
    }
    line.push_str(&format!(
        ", {} pass{}",
        outcome.passes,
        if outcome.passes == 1 { "" } else { "es" }
    ));
    let Some(s) = stats(samples) else {
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
    let (unit, per_second) = time_unit(s.mean);
    line.push_str(&format!(
        ", kernel mean {:.1} {unit} (stddev {:.1} {unit})",
        s.mean * per_second,
        s.stddev * per_second
    ));
    line
}

/// A fraction as a percentage with two decimals.
fn percent(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
}

/// The unit to show a time of `seconds` in, and how many of it make a second.
fn time_unit(seconds: f64) -> (&'static str, f64) {
    match seconds {
        s if s < 1e-6 => ("ns", 1e9),
        s if s < 1e-3 => ("us", 1e6),
        s if s < 1.0 => ("ms", 1e3),
        _ => ("s", 1.0),
    }
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

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-12)
    }

    #[test]
    fn stats_match_hand_computation() {
        assert_eq!(stats(&[]), None);
        let one = stats(&us(&[10])).unwrap();
        assert_eq!((one.n, one.stddev, one.rse), (1, 0.0, None));
        // 10, 12, 14 us: mean 12, sample stddev 2, RSE 2 / sqrt(3) / 12.
        let s = stats(&us(&[10, 12, 14])).unwrap();
        assert_eq!(s.n, 3);
        assert!(close(s.mean, 12e-6), "{s:?}");
        assert!(close(s.stddev, 2e-6), "{s:?}");
        assert!(close(s.rse.unwrap(), 2.0 / 3f64.sqrt() / 12.0), "{s:?}");
        let same = stats(&us(&[7, 7, 7, 7])).unwrap();
        assert_eq!(same.rse, Some(0.0));
        assert_eq!(stats(&us(&[0, 0])).unwrap().rse, Some(0.0));
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
        assert!(stats(&samples).unwrap().rse.unwrap() < 0.02);
    }

    #[test]
    fn target_rse_parsing() {
        assert_eq!(parse_target_rse(None), Ok(0.02));
        assert_eq!(parse_target_rse(Some(" ")), Ok(0.02));
        assert_eq!(parse_target_rse(Some("0.02")), Ok(0.02));
        assert_eq!(parse_target_rse(Some("2%")), Ok(0.02));
        assert_eq!(parse_target_rse(Some(" 0.5 % ")), Ok(0.005));
        assert_eq!(parse_target_rse(Some("0.1")), Ok(0.1));
        for bad in ["2", "0", "-1%", "100%", "abc", "%", "nan", "inf", "1"] {
            let err = parse_target_rse(Some(bad)).unwrap_err();
            assert!(
                err.contains(TARGET_RSE_VAR) && err.contains("2%"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn max_passes_parsing() {
        assert_eq!(parse_max_passes(None), Ok(50));
        assert_eq!(parse_max_passes(Some("3")), Ok(3));
        assert_eq!(parse_max_passes(Some("1000")), Ok(1000));
        for bad in ["2", "0", "1001", "ten", "-5"] {
            let err = parse_max_passes(Some(bad)).unwrap_err();
            assert!(err.contains(MAX_PASSES_VAR), "{err}");
        }
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
    fn policy_is_open_ended_and_stops_by_the_rule() {
        let tool = AdaptiveTimer::new(Settings::default());
        assert!(tool.timing().is_active());
        const { assert!(<AdaptiveTimer as ReplayPolicy>::DECIDES_CONTINUE) };
        let info = info();
        let PassPlan::Until { mut state } = tool.pass_count(&info) else {
            panic!("expected an open-ended plan");
        };
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
}
