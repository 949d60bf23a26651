//! Per-kernel aggregation of outcome records.

use std::collections::BTreeMap;
use std::time::Duration;

use rocprof_replay::stats::Summary;
use serde::Serialize;

use crate::records::Record;

/// The outcome kinds every report shows a column for, in this order; others (kinds a newer
/// engine adds) get a column of their own after them.
pub(crate) const KNOWN_KINDS: [&str; 4] = ["replayed", "skipped", "declined", "failed"];

/// Pass-time statistics in ns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct PassStats {
    /// Timed passes.
    pub(crate) n: usize,
    /// Shortest.
    pub(crate) min_ns: u64,
    /// Median.
    pub(crate) median_ns: u64,
    /// Longest.
    pub(crate) max_ns: u64,
    /// Mean.
    pub(crate) mean_ns: u64,
    /// Sample standard deviation.
    pub(crate) stddev_ns: u64,
}

/// One kernel.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct KernelSummary {
    /// Kernel name.
    pub(crate) kernel: String,
    /// Dispatches.
    pub(crate) dispatches: u64,
    /// Dispatches per outcome kind (`replayed`, `skipped`, `declined`, others as seen).
    pub(crate) outcomes: BTreeMap<String, u64>,
    /// Dispatches per `kind:reason` for outcomes with a reason.
    pub(crate) reasons: BTreeMap<String, u64>,
    /// Kernel executions in all dispatches (an ordinary run counts 1).
    pub(crate) passes: u64,
    /// Over every timed pass of every dispatch; `None` when none was timed.
    pub(crate) pass_time: Option<PassStats>,
    /// Snapshot bytes, all dispatches.
    pub(crate) snapshot_bytes: u64,
    /// Snapshot time, all dispatches.
    pub(crate) snapshot_ns: u64,
    /// Restored bytes, all dispatches.
    pub(crate) restored_bytes: u64,
    /// Restore time, all dispatches.
    pub(crate) restore_ns: u64,
    /// Regions skipped at restore, all dispatches.
    pub(crate) skipped_regions: u64,
    /// Per metric: the mean over the dispatches that have a value.
    pub(crate) metrics: BTreeMap<String, MetricSummary>,
    /// Dispatches that asked for counters and got none, per reason.
    pub(crate) metrics_absent: BTreeMap<String, u64>,
}

/// One metric of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct MetricSummary {
    /// Dispatches with a value.
    pub(crate) n: u64,
    /// Their mean (the value, when one).
    pub(crate) mean: f64,
    /// Smallest.
    pub(crate) min: u64,
    /// Largest.
    pub(crate) max: u64,
}

impl MetricSummary {
    /// The mean as a table or CSV cell: an integer when it is one, else two decimals.
    pub(crate) fn cell(&self) -> String {
        if self.mean.fract() == 0.0 {
            format!("{}", self.mean as u64)
        } else {
            format!("{:.2}", self.mean)
        }
    }
}

/// Every metric name in the records, sorted.
pub(crate) fn metric_names(kernels: &[KernelSummary]) -> Vec<String> {
    let mut names: Vec<String> = kernels
        .iter()
        .flat_map(|k| k.metrics.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

impl KernelSummary {
    /// Dispatches of `kind`.
    pub(crate) fn count(&self, kind: &str) -> u64 {
        self.outcomes.get(kind).copied().unwrap_or(0)
    }
}

/// Summaries per kernel, in order of first appearance.
pub(crate) fn by_kernel(records: &[Record]) -> Vec<KernelSummary> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records {
        if !groups.contains_key(r.kernel.as_str()) {
            order.push(r.kernel.clone());
        }
        groups.entry(r.kernel.as_str()).or_default().push(r);
    }
    order
        .iter()
        .map(|kernel| summarize(kernel, &groups[kernel.as_str()]))
        .collect()
}

fn summarize(kernel: &str, records: &[&Record]) -> KernelSummary {
    let mut outcomes = BTreeMap::new();
    let mut reasons = BTreeMap::new();
    let mut times = Vec::new();
    let mut s = KernelSummary {
        kernel: kernel.to_owned(),
        dispatches: records.len() as u64,
        outcomes: BTreeMap::new(),
        reasons: BTreeMap::new(),
        passes: 0,
        pass_time: None,
        snapshot_bytes: 0,
        snapshot_ns: 0,
        restored_bytes: 0,
        restore_ns: 0,
        skipped_regions: 0,
        metrics: BTreeMap::new(),
        metrics_absent: BTreeMap::new(),
    };
    // Per metric: (count, floating-point value) of each dispatch.
    let mut values: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for r in records {
        *outcomes.entry(r.outcome.clone()).or_insert(0) += 1;
        if let Some(reason) = &r.reason {
            *reasons
                .entry(format!("{}:{reason}", r.outcome))
                .or_insert(0) += 1;
        }
        s.passes += r.passes;
        times.extend(
            r.pass_ns
                .iter()
                .flatten()
                .map(|&ns| Duration::from_nanos(ns)),
        );
        s.snapshot_bytes += r.snapshot_bytes;
        s.snapshot_ns += r.snapshot_ns;
        s.restored_bytes += r.restored_bytes;
        s.restore_ns += r.restore_ns;
        s.skipped_regions += r.skipped_regions;
        for (name, v) in r.metrics.iter().flatten() {
            let real = v.gpu_value.unwrap_or(v.value as f64);
            values
                .entry(name.clone())
                .or_default()
                .push((v.value, real));
        }
        if let Some(why) = &r.metrics_reason {
            // The reason's code (`not_restored: ...` -> `not_restored`).
            let code = why.split(':').next().unwrap_or(why).to_owned();
            *s.metrics_absent.entry(code).or_insert(0) += 1;
        }
    }
    s.metrics = values
        .into_iter()
        .map(|(name, v)| {
            let summary = MetricSummary {
                n: v.len() as u64,
                // NVIDIA's metrics are floating point: the mean is of `gpu_value`.
                mean: v.iter().map(|&(_, x)| x).sum::<f64>() / v.len() as f64,
                min: v.iter().map(|&(n, _)| n).min().unwrap_or(0),
                max: v.iter().map(|&(n, _)| n).max().unwrap_or(0),
            };
            (name, summary)
        })
        .collect();
    s.outcomes = outcomes;
    s.reasons = reasons;
    let ns = |d: Duration| d.as_nanos() as u64;
    s.pass_time = Summary::of(&times).map(|t| PassStats {
        n: t.n,
        min_ns: ns(t.min),
        median_ns: ns(t.median),
        max_ns: ns(t.max),
        mean_ns: ns(t.mean),
        stddev_ns: ns(t.stddev),
    });
    s
}

/// Outcome kinds beyond [`KNOWN_KINDS`] that occur, sorted.
pub(crate) fn other_kinds(kernels: &[KernelSummary]) -> Vec<String> {
    let mut kinds: Vec<String> = kernels
        .iter()
        .flat_map(|k| k.outcomes.keys())
        .filter(|k| !KNOWN_KINDS.contains(&k.as_str()))
        .cloned()
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Records;

    #[test]
    fn kernels_are_aggregated_in_order_of_appearance() {
        let text = r#"{"kernel":"b","dispatch_id":1,"agent":0,"outcome":"replayed","passes":3,"pass_ns":[30,10,20],"snapshot_bytes":8,"restored_bytes":16,"snapshot_ns":2,"restore_ns":4}
{"kernel":"a","dispatch_id":2,"agent":0,"outcome":"skipped","passes":1}
{"kernel":"b","dispatch_id":3,"agent":0,"outcome":"declined","reason":"over_budget","passes":1}
{"kernel":"b","dispatch_id":4,"agent":0,"outcome":"replayed","passes":2,"pass_ns":[40,null],"snapshot_bytes":8,"restored_bytes":8}
{"kernel":"a","dispatch_id":5,"agent":0,"outcome":"failed","reason":"restore_failed","passes":2}
{"kernel":"a","dispatch_id":6,"agent":0,"outcome":"quarantined","passes":1}
"#;
        let k = by_kernel(&Records::parse(text).records);
        assert_eq!(k.len(), 2);
        let b = &k[0];
        assert_eq!((b.kernel.as_str(), b.dispatches, b.passes), ("b", 3, 6));
        assert_eq!(
            (b.count("replayed"), b.count("declined"), b.count("skipped")),
            (2, 1, 0)
        );
        assert_eq!(b.reasons["declined:over_budget"], 1);
        let t = b.pass_time.unwrap();
        assert_eq!((t.n, t.min_ns, t.median_ns, t.max_ns), (4, 10, 25, 40));
        assert_eq!(
            (b.snapshot_bytes, b.restored_bytes, b.restore_ns),
            (16, 24, 4)
        );
        let a = &k[1];
        assert_eq!(a.pass_time, None);
        assert_eq!(a.count("failed"), 1);
        assert_eq!(other_kinds(&k), ["quarantined"], "failed is a known kind");
        assert_eq!(a.reasons["failed:restore_failed"], 1);
    }

    #[test]
    fn metrics_are_the_mean_over_the_dispatches_with_values() {
        let text = r#"{"kernel":"k","dispatch_id":1,"agent":0,"outcome":"replayed","passes":3,"metrics":{"SQ_WAVES":{"value":4,"pass":1}}}
{"kernel":"k","dispatch_id":2,"agent":0,"outcome":"replayed","passes":3,"metrics":{"SQ_WAVES":{"value":7,"pass":1},"GRBM_COUNT":{"value":9,"pass":1}}}
{"kernel":"k","dispatch_id":3,"agent":0,"outcome":"replayed","passes":3,"metrics":null,"metrics_reason":"not_restored: a pass did not start from restored inputs"}
"#;
        let k = by_kernel(&Records::parse(text).records);
        let waves = k[0].metrics["SQ_WAVES"];
        assert_eq!((waves.n, waves.min, waves.max), (2, 4, 7));
        assert_eq!(waves.cell(), "5.50");
        assert_eq!(k[0].metrics["GRBM_COUNT"].cell(), "9");
        assert_eq!(k[0].metrics_absent["not_restored"], 1);
        assert_eq!(metric_names(&k), ["GRBM_COUNT", "SQ_WAVES"]);
    }

    #[test]
    fn nvidia_metrics_are_averaged_from_their_floating_point_values() {
        let text = r#"{"kernel":"k","dispatch_id":1,"agent":0,"outcome":"replayed","passes":4,"metrics":{"sm__warps_active.avg.pct_of_peak_sustained_active":{"value":46,"pass":3,"gpu_value":45.5}}}
{"kernel":"k","dispatch_id":2,"agent":0,"outcome":"replayed","passes":4,"metrics":{"sm__warps_active.avg.pct_of_peak_sustained_active":{"value":47,"pass":3,"gpu_value":46.75}}}
"#;
        let records = Records::parse(text).records;
        let m = records[0].metrics.as_ref().unwrap();
        assert_eq!(
            m["sm__warps_active.avg.pct_of_peak_sustained_active"].gpu_value,
            Some(45.5)
        );
        let k = by_kernel(&records);
        let warps = k[0].metrics["sm__warps_active.avg.pct_of_peak_sustained_active"];
        assert_eq!((warps.n, warps.min, warps.max), (2, 46, 47));
        assert_eq!(
            warps.mean, 46.125,
            "the mean of gpu_value, not of the rounded values"
        );
    }
}
