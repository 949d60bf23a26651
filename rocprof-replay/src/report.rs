//! Human-readable formatting: byte counts, durations, and `Display` for outcomes and
//! dispatches, so a tool's report line is one `format!`.
//!
//! ```
//! use rocprof_replay::report::{Bytes, Time};
//! use rocprof_replay::{OutcomeKind, testing};
//! use std::time::Duration;
//!
//! assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
//! assert_eq!(Time(Duration::from_nanos(12_400)).to_string(), "12.4 us");
//!
//! let info = testing::dispatch("vector_add");
//! let mut outcome = testing::outcome(OutcomeKind::Replayed, 2);
//! outcome.pass_times = vec![Some(Duration::from_micros(12)), Some(Duration::from_micros(14))];
//! outcome.snapshot_bytes = 512 * 1024;
//! assert_eq!(
//!     format!("my_tool: {info}: {outcome}"),
//!     "my_tool: vector_add dispatch 1 on agent 0: replayed, 2 passes, kernel median 13.0 us \
//!      (min 12.0, max 14.0), snapshot 512 KiB in 0.00 ms, restores 0.00 ms"
//! );
//! ```

use std::fmt;
use std::time::Duration;

use crate::dispatch::DispatchInfo;
use crate::policy::{Outcome, OutcomeKind};

/// A byte count in binary units with at most one decimal: `512 B`, `16 KiB`, `1.5 MiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let bytes = self.0;
        if bytes < 1024 {
            return write!(f, "{bytes} B");
        }
        let mut scale = 1024u128;
        let mut unit = UNITS[0];
        for next in &UNITS[1..] {
            if u128::from(bytes) < scale * 1024 {
                break;
            }
            scale *= 1024;
            unit = next;
        }
        // One decimal, without a trailing `.0`: `16 KiB` for 16 KiB plus a few bytes.
        let value = format!("{:.1}", bytes as f64 / scale as f64);
        write!(f, "{} {unit}", value.strip_suffix(".0").unwrap_or(&value))
    }
}

/// The unit a duration is shown in: the largest of ns, us, ms, s that keeps it at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Nanoseconds, no decimals.
    Ns,
    /// Microseconds.
    Us,
    /// Milliseconds.
    Ms,
    /// Seconds.
    S,
}

impl TimeUnit {
    /// The unit for `d`.
    pub fn for_duration(d: Duration) -> TimeUnit {
        match d.as_nanos() {
            0..1_000 => TimeUnit::Ns,
            1_000..1_000_000 => TimeUnit::Us,
            1_000_000..1_000_000_000 => TimeUnit::Ms,
            _ => TimeUnit::S,
        }
    }

    /// `ns`, `us`, `ms` or `s`.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Us => "us",
            TimeUnit::Ms => "ms",
            TimeUnit::S => "s",
        }
    }

    /// `d` in this unit, without the unit: no decimals for ns, one otherwise.
    pub fn format(self, d: Duration) -> String {
        let ns = d.as_nanos() as f64;
        match self {
            TimeUnit::Ns => format!("{ns:.0}"),
            TimeUnit::Us => format!("{:.1}", ns / 1e3),
            TimeUnit::Ms => format!("{:.1}", ns / 1e6),
            TimeUnit::S => format!("{:.1}", ns / 1e9),
        }
    }
}

/// A duration in the unit [`TimeUnit::for_duration`] picks: `800 ns`, `12.4 us`, `1.3 s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Time(pub Duration);

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = TimeUnit::for_duration(self.0);
        write!(f, "{} {}", unit.format(self.0), unit.name())
    }
}

/// A duration in milliseconds with two decimals: `0.21 ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Millis(pub Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} ms", self.0.as_secs_f64() * 1e3)
    }
}

/// `replayed`, `skipped`, `declined (reason)` or `failed (reason)`.
impl fmt::Display for OutcomeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())?;
        if let Some(reason) = self.reason_code() {
            write!(f, " ({reason})")?;
        }
        Ok(())
    }
}

/// `kernel dispatch ID on agent INDEX`.
impl fmt::Display for DispatchInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} dispatch {} on agent {}",
            self.kernel(),
            self.dispatch_id,
            self.agent_index
        )
    }
}

/// One line: the kind, the passes, the kernel times (median, min, max, in the median's unit),
/// and for a replay the snapshot and restore figures:
///
/// ```text
/// replayed, 5 passes, kernel median 12.4 us (min 11.9, max 14.0), snapshot 512 KiB in 0.21 ms, restores 0.80 ms
/// declined (over_budget), 1 pass
/// replayed, 3 passes, ..., counters SQ_WAVES=256 SQ_ITEMS=16384
/// ```
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {} pass{}",
            self.kind,
            self.passes,
            plural_es(self.passes as usize)
        )?;
        let replayed = self.kind == OutcomeKind::Replayed;
        if let Some(summary) = self.kernel_stats() {
            let unit = TimeUnit::for_duration(summary.median);
            write!(
                f,
                ", kernel median {} {} (min {}, max {})",
                unit.format(summary.median),
                unit.name(),
                unit.format(summary.min),
                unit.format(summary.max)
            )?;
            if summary.n < self.passes as usize {
                write!(f, " over {} timed pass{}", summary.n, plural_es(summary.n))?;
            }
        } else if replayed {
            f.write_str(", no kernel times")?;
        }
        if replayed || self.snapshot_bytes > 0 {
            write!(
                f,
                ", snapshot {} in {}, restores {}",
                Bytes(self.snapshot_bytes),
                Millis(self.snapshot_time),
                Millis(self.restore_time)
            )?;
            if self.skipped_regions > 0 {
                let n = self.skipped_regions;
                let s = if n == 1 { "" } else { "s" };
                write!(f, ", {n} region{s} skipped at restore")?;
            }
        }
        match &self.metrics {
            crate::counters::Metrics::Values(values) => {
                f.write_str(", counters")?;
                for (name, v) in values.iter() {
                    if values.is_floating() {
                        write!(f, " {name}={}", v.gpu_value)?;
                    } else {
                        write!(f, " {name}={}", v.value)?;
                    }
                }
            }
            crate::counters::Metrics::Absent(why) => write!(f, ", no counters ({why})")?,
            crate::counters::Metrics::NotAsked => {}
        }
        Ok(())
    }
}

fn plural_es(n: usize) -> &'static str {
    if n == 1 { "" } else { "es" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DeclineReason;
    use crate::testing;

    fn us(tenths: u64) -> Option<Duration> {
        Some(Duration::from_nanos(tenths * 100))
    }

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(1024).to_string(), "1 KiB");
        assert_eq!(Bytes(16 * 1024 + 4).to_string(), "16 KiB");
        assert_eq!(Bytes(3 << 19).to_string(), "1.5 MiB");
        assert_eq!(Bytes(5 << 30).to_string(), "5 GiB");
        assert_eq!(Bytes(u64::MAX).to_string(), "16 EiB");
    }

    #[test]
    fn times_follow_their_size() {
        let t = |ns| Time(Duration::from_nanos(ns)).to_string();
        assert_eq!(t(800), "800 ns");
        assert_eq!(t(12_400), "12.4 us");
        assert_eq!(t(2_000_000), "2.0 ms");
        assert_eq!(t(1_300_000_000), "1.3 s");
        assert_eq!(Millis(Duration::from_micros(210)).to_string(), "0.21 ms");
    }

    #[test]
    fn a_replayed_outcome_in_one_line() {
        let mut out = testing::outcome(OutcomeKind::Replayed, 5);
        out.pass_times = vec![us(124), us(119), us(140), us(125), us(120)];
        out.snapshot_bytes = 512 * 1024;
        out.snapshot_time = Duration::from_micros(210);
        out.restore_time = Duration::from_micros(800);
        assert_eq!(
            out.to_string(),
            "replayed, 5 passes, kernel median 12.4 us (min 11.9, max 14.0), snapshot 512 KiB \
             in 0.21 ms, restores 0.80 ms"
        );
    }

    #[test]
    fn counters_follow_the_rest_of_the_line() {
        use crate::counters::{CounterCatalog, MetricSet, MetricValue, Metrics};
        let c = CounterCatalog::new("gfx90a")
            .block("SQ", 2)
            .counter("SQ_WAVES", "SQ", 4)
            .counter("SQ_ITEMS", "SQ", 14);
        let set = MetricSet::new(&c, ["SQ_WAVES", "SQ_ITEMS"]).unwrap();
        let mut out = testing::outcome(OutcomeKind::Replayed, 2);
        let v = |value| MetricValue::count(value, 0);
        out.metrics = Metrics::Values(set.values(vec![v(256), v(16384)]).unwrap());
        assert!(
            out.to_string()
                .ends_with(", counters SQ_WAVES=256 SQ_ITEMS=16384"),
            "{out}"
        );
        out.metrics = Metrics::Absent("not_restored: x".into());
        assert!(out.to_string().ends_with(", no counters (not_restored: x)"));
    }

    #[test]
    fn declined_skipped_and_partial_outcomes() {
        let failed = testing::outcome(OutcomeKind::Failed(crate::FailureReason::RestoreFailed), 2);
        assert!(
            failed.to_string().starts_with("failed (restore_failed)"),
            "{failed}"
        );
        let declined = testing::outcome(OutcomeKind::Declined(DeclineReason::OverBudget), 1);
        assert_eq!(declined.to_string(), "declined (over_budget), 1 pass");
        assert_eq!(
            testing::outcome(OutcomeKind::Skipped, 1).to_string(),
            "skipped, 1 pass"
        );
        let mut partial = testing::outcome(OutcomeKind::Declined(DeclineReason::PassTimeout), 3);
        partial.pass_times = vec![us(10), None, us(30)];
        partial.snapshot_bytes = 1536;
        partial.skipped_regions = 1;
        assert_eq!(
            partial.to_string(),
            "declined (pass_timeout), 3 passes, kernel median 2.0 us (min 1.0, max 3.0) over 2 \
             timed passes, snapshot 1.5 KiB in 0.00 ms, restores 0.00 ms, 1 region skipped at \
             restore"
        );
        let untimed = testing::outcome(OutcomeKind::Replayed, 2);
        assert!(
            untimed
                .to_string()
                .starts_with("replayed, 2 passes, no kernel times, snapshot 0 B"),
            "{untimed}"
        );
    }

    #[test]
    fn a_dispatch_names_kernel_id_and_agent() {
        let mut info = testing::dispatch("k");
        info.kernel_name = None;
        info.agent_index = 2;
        assert_eq!(info.to_string(), "<unknown> dispatch 1 on agent 2");
    }
}
