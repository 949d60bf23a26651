//! Outcome records: one JSON object per dispatch, as the SDK writes them to
//! `ROCPROF_REPLAY_OUTPUT` (README, "Outcome records").
//!
//! Reading is lenient where the format may grow: an outcome kind or reason the command does not
//! know is kept as its string (and reported as such), fields it does not know are kept in
//! [`Record::extra`], missing numbers read as 0. A line that is not a JSON object is counted in
//! [`Records::malformed`], not fatal.

use serde::{Deserialize, Serialize};

/// One dispatch.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub(crate) struct Record {
    /// Kernel name (`<unknown>` when the runtime did not say).
    pub(crate) kernel: String,
    /// The dispatch's id (shared by its passes).
    pub(crate) dispatch_id: u64,
    /// 0-based GPU index.
    pub(crate) agent: u64,
    /// `replayed`, `skipped`, `declined`, or a kind added later (`failed`, ...).
    pub(crate) outcome: String,
    /// Why not replayed, when the outcome has a reason.
    pub(crate) reason: Option<String>,
    /// Kernel executions (an ordinary run counts 1).
    pub(crate) passes: u64,
    /// Bytes captured in the snapshot.
    pub(crate) snapshot_bytes: u64,
    /// Bytes written back by all restores.
    pub(crate) restored_bytes: u64,
    /// Regions skipped at restore.
    pub(crate) skipped_regions: u64,
    /// Kernel time of each pass in ns (`None`: not timed).
    pub(crate) pass_ns: Vec<Option<u64>>,
    /// Snapshot capture time in ns.
    pub(crate) snapshot_ns: u64,
    /// All restores together in ns.
    pub(crate) restore_ns: u64,
    /// Wall-clock time (ns since the Unix epoch) at which the engine took the dispatch.
    pub(crate) start_ns: Option<u64>,
    /// The process that wrote the record.
    pub(crate) pid: Option<u64>,
    /// Fields this version does not know, kept as they were.
    #[serde(flatten)]
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
}

/// Every record of a run.
#[derive(Debug, Default)]
pub(crate) struct Records {
    /// In file order.
    pub(crate) records: Vec<Record>,
    /// Lines that were not records.
    pub(crate) malformed: usize,
}

impl Records {
    /// Parses JSON Lines; blank lines are skipped.
    pub(crate) fn parse(text: &str) -> Records {
        let mut out = Records::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Record>(line) {
                Ok(record) => out.records.push(record),
                Err(_) => out.malformed += 1,
            }
        }
        out
    }
}

/// Counts of dispatches seen so far, for the progress line: (seen, replayed, not replayed
/// for a reason).
pub(crate) fn tally(records: &[Record]) -> (usize, usize, usize) {
    let replayed = records.iter().filter(|r| r.outcome == "replayed").count();
    let declined = records
        .iter()
        .filter(|r| r.outcome != "replayed" && r.outcome != "skipped")
        .count();
    (records.len(), replayed, declined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_with_unknown_kinds_fields_and_bad_lines() {
        let text = r#"{"kernel":"k","dispatch_id":2,"agent":0,"outcome":"replayed","reason":null,"passes":3,"snapshot_bytes":16,"restored_bytes":32,"skipped_regions":0,"pass_ns":[10,null,30],"snapshot_ns":5,"restore_ns":6,"start_ns":100,"pid":7}

{"kernel":"k","outcome":"failed","reason":"restore_failed","passes":2,"new_field":[1]}
not json
{"kernel":"v","outcome":"declined","reason":"over_budget","passes":1}
"#;
        let r = Records::parse(text);
        assert_eq!((r.records.len(), r.malformed), (3, 1));
        assert_eq!(r.records[0].pass_ns, [Some(10), None, Some(30)]);
        assert_eq!(
            (r.records[0].start_ns, r.records[0].pid),
            (Some(100), Some(7))
        );
        assert_eq!(r.records[1].outcome, "failed");
        assert_eq!(r.records[1].extra["new_field"], serde_json::json!([1]));
        assert_eq!(r.records[1].snapshot_bytes, 0);
        assert_eq!(tally(&r.records), (3, 1, 2));
    }
}
