//! `pass_timer`: an example rocprof-replay tool that times every kernel dispatch over a fixed
//! number of replay passes.
//!
//! Every dispatch runs `ROCPROF_REPLAY_PASSES` times (memory restored between passes; the
//! application still sees one execution) with a started [`Service::DispatchTiming`] context.
//! When a dispatch ends, one line goes to stderr:
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
//! ```
//!
//! | variable | effect |
//! |---|---|
//! | `ROCPROF_REPLAY_PASSES` | passes per dispatch, a positive integer (default 5; 1 means: run once, no replay). An invalid value is reported on stderr at load and the default is used. |
//!
//! The SDK's own variables (`ROCPROF_REPLAY_LOG`, `ROCPROF_REPLAY_OUTPUT`, ...) apply as well.

use std::fmt::Write as _;
use std::time::Duration;

use rocprof_replay::{
    Context, DispatchInfo, Outcome, OutcomeKind, PassPlan, PassReport, ReplayPolicy, Service,
};

/// Passes per dispatch when `ROCPROF_REPLAY_PASSES` is not set.
pub const DEFAULT_PASSES: u32 = 5;

/// The environment variable holding the pass count.
pub const PASSES_VAR: &str = "ROCPROF_REPLAY_PASSES";

/// The tool: replays every dispatch a fixed number of times and times each pass.
#[rocprof_replay::rocprof_tool(new = PassTimer::from_env)]
#[derive(Debug)]
pub struct PassTimer {
    passes: u32,
    /// Kept alive for the tool's lifetime: a dropped context stops providing its service.
    timing: Context,
}

impl PassTimer {
    /// A timer running `passes` passes per dispatch, with its timing context started.
    pub fn new(passes: u32) -> PassTimer {
        let timing = Context::new("pass_timer", &[Service::DispatchTiming]);
        timing.start();
        PassTimer { passes, timing }
    }

    /// A timer configured from `ROCPROF_REPLAY_PASSES`; an invalid value is reported on
    /// stderr and the default is used.
    pub fn from_env() -> PassTimer {
        PassTimer::new(config())
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

/// Reads the pass count from the environment; reports an invalid value on stderr.
pub fn config() -> u32 {
    let raw = std::env::var_os(PASSES_VAR);
    let value = raw
        .as_ref()
        .map(|v| v.to_str().ok_or_else(|| v.to_string_lossy()));
    let parsed = match value {
        None => parse_passes(None),
        Some(Ok(s)) => parse_passes(Some(s)),
        Some(Err(lossy)) => Err(format!("{PASSES_VAR}={lossy:?} is not valid UTF-8")),
    };
    parsed.unwrap_or_else(|message| {
        eprintln!("pass_timer: {message}; using the default of {DEFAULT_PASSES} passes");
        DEFAULT_PASSES
    })
}

/// Parses a pass count: `None` or an empty value gives [`DEFAULT_PASSES`]; otherwise a
/// positive integer, or an error message naming the variable.
pub fn parse_passes(value: Option<&str>) -> Result<u32, String> {
    let Some(text) = value.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(DEFAULT_PASSES);
    };
    match text.parse::<u32>() {
        Ok(0) | Err(_) => Err(format!("{PASSES_VAR}={text:?} is not a positive integer")),
        Ok(n) => Ok(n),
    }
}

impl ReplayPolicy for PassTimer {
    /// Kernel time of each timed pass, in pass order.
    type State = Vec<Duration>;
    type PassState = ();

    fn pass_count(&self, _info: &DispatchInfo) -> PassPlan<Vec<Duration>> {
        let capacity = self.passes.min(64) as usize;
        PassPlan::exactly(self.passes, Vec::with_capacity(capacity))
    }

    fn on_pass_end(&self, pass: &PassReport<'_>, times: &mut Vec<Duration>, _: &mut ()) {
        times.extend(pass.kernel_time);
    }

    fn on_end(&self, info: &DispatchInfo, times: Vec<Duration>, outcome: &Outcome) {
        eprintln!("{}", format_line(info, outcome, &times));
    }
}

/// The report line of one dispatch (without a trailing newline).
///
/// `kernel_times` are the kernel times recorded for the passes that had one.
pub fn format_line(info: &DispatchInfo, outcome: &Outcome, kernel_times: &[Duration]) -> String {
    let mut line = format!(
        "pass_timer: {} dispatch {} on agent {}: {}",
        info.kernel(),
        info.dispatch_id,
        info.agent_index,
        outcome.kind.label()
    );
    if let Some(reason) = outcome.kind.reason() {
        let _ = write!(line, " ({})", reason.code());
    }
    let _ = write!(
        line,
        ", {} pass{}",
        outcome.passes,
        if outcome.passes == 1 { "" } else { "es" }
    );
    let replayed = outcome.kind == OutcomeKind::Replayed;
    if let Some(summary) = summarize(kernel_times) {
        let unit = TimeUnit::for_duration(summary.median);
        let _ = write!(
            line,
            ", kernel median {} {} (min {}, max {})",
            unit.format(summary.median),
            unit.name(),
            unit.format(summary.min),
            unit.format(summary.max)
        );
        if kernel_times.len() < outcome.passes as usize {
            let _ = write!(line, " over {} timed passes", kernel_times.len());
        }
    } else if replayed {
        line.push_str(", no kernel times");
    }
    if replayed || outcome.snapshot_bytes > 0 {
        let _ = write!(
            line,
            ", snapshot {} in {}, restores {}",
            format_bytes(outcome.snapshot_bytes),
            format_ms(outcome.snapshot_time),
            format_ms(outcome.restore_time)
        );
        if outcome.skipped_regions > 0 {
            let _ = write!(
                line,
                ", {} region{} skipped at restore",
                outcome.skipped_regions,
                if outcome.skipped_regions == 1 {
                    ""
                } else {
                    "s"
                }
            );
        }
    }
    line
}

/// Median, minimum and maximum of a set of kernel times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The median (the mean of the two middle values for an even count).
    pub median: Duration,
    /// The shortest time.
    pub min: Duration,
    /// The longest time.
    pub max: Duration,
}

/// Summarizes kernel times; `None` when there are none.
pub fn summarize(times: &[Duration]) -> Option<Summary> {
    if times.is_empty() {
        return None;
    }
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2
    };
    Some(Summary {
        median,
        min: sorted[0],
        max: sorted[sorted.len() - 1],
    })
}

/// The unit kernel times of one line are shown in, chosen from the median.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimeUnit {
    Ns,
    Us,
    Ms,
    S,
}

impl TimeUnit {
    fn for_duration(d: Duration) -> TimeUnit {
        match d.as_nanos() {
            0..1_000 => TimeUnit::Ns,
            1_000..1_000_000 => TimeUnit::Us,
            1_000_000..1_000_000_000 => TimeUnit::Ms,
            _ => TimeUnit::S,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Us => "us",
            TimeUnit::Ms => "ms",
            TimeUnit::S => "s",
        }
    }

    fn format(self, d: Duration) -> String {
        let ns = d.as_nanos() as f64;
        match self {
            TimeUnit::Ns => format!("{ns:.0}"),
            TimeUnit::Us => format!("{:.1}", ns / 1e3),
            TimeUnit::Ms => format!("{:.1}", ns / 1e6),
            TimeUnit::S => format!("{:.1}", ns / 1e9),
        }
    }
}

/// Milliseconds with two decimals, e.g. `0.21 ms`.
fn format_ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// A byte count in binary units with at most one decimal: `512 B`, `512 KiB`, `1.5 MiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut scale = 1024u64;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if bytes < scale * 1024 {
            break;
        }
        scale *= 1024;
        unit = next;
    }
    // One decimal, without a trailing `.0`: `16 KiB` for 16 KiB plus a few bytes.
    let value = format!("{:.1}", bytes as f64 / scale as f64);
    format!("{} {unit}", value.strip_suffix(".0").unwrap_or(&value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocprof_replay::{AgentId, DeclineReason, DispatchId};

    fn info(name: Option<&str>) -> DispatchInfo {
        let mut info = rocprof_replay::testing::dispatch("");
        info.kernel_name = name.map(Into::into);
        info.agent = AgentId(0x1000);
        info.dispatch_id = DispatchId(3);
        info
    }

    fn outcome(kind: OutcomeKind, passes: u32) -> Outcome {
        rocprof_replay::testing::outcome(kind, passes)
    }

    fn us(tenths: u64) -> Duration {
        Duration::from_nanos(tenths * 100)
    }

    #[test]
    fn replayed_line_matches_the_documented_format() {
        let mut out = outcome(OutcomeKind::Replayed, 5);
        out.snapshot_bytes = 512 * 1024;
        out.restored_bytes = 4 * 512 * 1024;
        out.snapshot_time = Duration::from_micros(210);
        out.restore_time = Duration::from_micros(800);
        let times = [us(124), us(119), us(140), us(125), us(120)];
        assert_eq!(
            format_line(&info(Some("vector_add")), &out, &times),
            "pass_timer: vector_add dispatch 3 on agent 0: replayed, 5 passes, kernel median \
             12.4 us (min 11.9, max 14.0), snapshot 512 KiB in 0.21 ms, restores 0.80 ms"
        );
    }

    #[test]
    fn declined_line_names_the_reason_and_omits_replay_figures() {
        let out = outcome(OutcomeKind::Declined(DeclineReason::OverBudget), 1);
        assert_eq!(
            format_line(&info(Some("big")), &out, &[]),
            "pass_timer: big dispatch 3 on agent 0: declined (over_budget), 1 pass"
        );
    }

    #[test]
    fn skipped_line_and_unknown_kernel_name() {
        let out = outcome(OutcomeKind::Skipped, 1);
        assert_eq!(
            format_line(&info(None), &out, &[]),
            "pass_timer: <unknown> dispatch 3 on agent 0: skipped, 1 pass"
        );
    }

    #[test]
    fn declined_after_passes_keeps_what_was_measured() {
        let mut out = outcome(OutcomeKind::Declined(DeclineReason::PassTimeout), 3);
        out.snapshot_bytes = 1536;
        out.skipped_regions = 1;
        let line = format_line(&info(Some("k")), &out, &[us(10), us(30)]);
        assert_eq!(
            line,
            "pass_timer: k dispatch 3 on agent 0: declined (pass_timeout), 3 passes, kernel \
             median 2.0 us (min 1.0, max 3.0) over 2 timed passes, snapshot 1.5 KiB in 0.00 ms, \
             restores 0.00 ms, 1 region skipped at restore"
        );
    }

    #[test]
    fn replayed_without_timing_says_so() {
        let out = outcome(OutcomeKind::Replayed, 2);
        let line = format_line(&info(Some("k")), &out, &[]);
        assert!(
            line.contains("replayed, 2 passes, no kernel times, snapshot 0 B"),
            "{line}"
        );
    }

    #[test]
    fn units_follow_the_median() {
        let line =
            |t: &[Duration]| format_line(&info(Some("k")), &outcome(OutcomeKind::Replayed, 3), t);
        assert!(
            line(&[Duration::from_nanos(800)]).contains("kernel median 800 ns (min 800, max 800)")
        );
        assert!(
            line(&[Duration::from_micros(1500), Duration::from_micros(2500)])
                .contains("kernel median 2.0 ms (min 1.5, max 2.5)")
        );
        assert!(line(&[Duration::from_millis(1300)]).contains("kernel median 1.3 s"));
    }

    #[test]
    fn summary_of_even_and_odd_counts() {
        assert_eq!(summarize(&[]), None);
        let s = summarize(&[us(30), us(10), us(20)]).unwrap();
        assert_eq!((s.median, s.min, s.max), (us(20), us(10), us(30)));
        let s = summarize(&[us(40), us(10), us(20), us(30)]).unwrap();
        assert_eq!((s.median, s.min, s.max), (us(25), us(10), us(40)));
    }

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1 KiB");
        assert_eq!(format_bytes(512 * 1024), "512 KiB");
        assert_eq!(format_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        assert_eq!(format_bytes(5 << 30), "5 GiB");
        assert_eq!(format_bytes(16 * 1024 + 16), "16 KiB");
        assert_eq!(format_bytes(1024 * 1024 - 1), "1024 KiB");
    }

    #[test]
    fn pass_count_parsing() {
        assert_eq!(parse_passes(None), Ok(DEFAULT_PASSES));
        assert_eq!(parse_passes(Some("")), Ok(DEFAULT_PASSES));
        assert_eq!(parse_passes(Some(" 8 ")), Ok(8));
        assert_eq!(parse_passes(Some("1")), Ok(1));
        for bad in ["0", "-3", "five", "2.5", "99999999999"] {
            let err = parse_passes(Some(bad)).unwrap_err();
            assert!(
                err.contains(PASSES_VAR) && err.contains("positive integer"),
                "{err}"
            );
        }
    }

    #[test]
    fn policy_plans_exactly_n_passes_and_records_pass_times() {
        let timer = PassTimer::new(7);
        assert!(timer.timing().is_active());
        let info = info(Some("k"));
        let PassPlan::Exactly {
            passes: 7,
            mut state,
        } = timer.pass_count(&info)
        else {
            panic!("expected exactly 7 passes");
        };
        for (index, kernel_time) in [Some(us(5)), None, Some(us(7))].into_iter().enumerate() {
            let report =
                rocprof_replay::testing::pass_report(index as u32, Some(7), &info, kernel_time);
            timer.on_pass_end(&report, &mut state, &mut ());
        }
        assert_eq!(state, vec![us(5), us(7)]);
    }
}
