//! Outcome records: one JSON object per dispatch, as the SDK writes them to
//! `ROCPROF_REPLAY_OUTPUT` (README, "Outcome records").
//!
//! Reading is strict about what makes a record and lenient where the format may grow:
//!
//! - a record is a JSON object with every field of [`REQUIRED`] (the ones that say which
//!   dispatch it was and how it ended; the SDK's writer, `engine/records.rs`, always writes
//!   them) and the right types for the fields it has; anything else — invalid UTF-8, not JSON,
//!   `{}`, a missing field, a final line cut off before its newline — is a [`Malformed`] line,
//!   named by its line number, and the other lines are still read;
//! - an outcome kind or reason the command does not know is kept as its string (and reported
//!   as such), fields it does not know are kept in [`Record::extra`], and the cost figures
//!   (bytes, times) read as 0 when missing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One metric of one dispatch.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq)]
pub(crate) struct MetricValue {
    /// The value.
    pub(crate) value: u64,
    /// The (0-based) pass it came from.
    pub(crate) pass: u64,
    /// The floating-point value of a vendor metric (NVIDIA's; `value` is it rounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gpu_value: Option<f64>,
}

/// The fields every record must have.
pub(crate) const REQUIRED: [&str; 5] = ["kernel", "dispatch_id", "agent", "outcome", "passes"];

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
    /// Hardware counters: one value per metric with the pass it came from.
    pub(crate) metrics: Option<BTreeMap<String, MetricValue>>,
    /// Why a dispatch that asked for counters has none.
    pub(crate) metrics_reason: Option<String>,
    /// Dispatches its replay window covered (`ROCPROF_REPLAY_RUN`): more than 1 for a run,
    /// 1 for a window of its own, 0 for none (or a record written before runs existed).
    pub(crate) run: u64,
    /// Fields this version does not know, kept as they were.
    #[serde(flatten)]
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
}

/// A line that is not a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Malformed {
    /// 1-based line number in the records file.
    pub(crate) line: usize,
    /// What is wrong with it.
    pub(crate) error: String,
}

/// Every record of a run.
#[derive(Debug, Default)]
pub(crate) struct Records {
    /// In file order.
    pub(crate) records: Vec<Record>,
    /// Lines that were not records, in file order.
    pub(crate) malformed: Vec<Malformed>,
}

impl Records {
    /// Parses JSON Lines from bytes; blank lines are skipped. `first_line` is the line number
    /// of the first line of `bytes` (records read from an offset of a longer file). A last
    /// line without its newline is malformed: the SDK writes every record with its newline in
    /// one write, so such a line was cut off.
    pub(crate) fn parse_bytes(bytes: &[u8], first_line: usize) -> Records {
        let mut out = Records::default();
        let mut lines = bytes.split(|&b| b == b'\n').peekable();
        let mut number = first_line;
        while let Some(line) = lines.next() {
            let last = lines.peek().is_none();
            if last && line.is_empty() {
                break;
            }
            let this = number;
            number += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let mut bad = |error: String| out.malformed.push(Malformed { line: this, error });
            if last {
                bad("truncated: the line has no end".into());
                continue;
            }
            let text = match std::str::from_utf8(line) {
                Ok(text) => text,
                Err(e) => {
                    bad(format!("not valid UTF-8 ({e})"));
                    continue;
                }
            };
            match parse_record(text) {
                Ok(record) => out.records.push(record),
                Err(e) => bad(e),
            }
        }
        out
    }

    /// Parses JSON Lines text (each line ended by a newline) starting at line 1.
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Records {
        Records::parse_bytes(text.as_bytes(), 1)
    }

    /// One line for stderr naming the malformed lines (at most the first 10), or `None`.
    pub(crate) fn malformed_summary(&self, file: &std::path::Path) -> Option<String> {
        const SHOWN: usize = 10;
        if self.malformed.is_empty() {
            return None;
        }
        let mut named: Vec<String> = self
            .malformed
            .iter()
            .take(SHOWN)
            .map(|m| format!("line {}: {}", m.line, m.error))
            .collect();
        if self.malformed.len() > SHOWN {
            named.push(format!("and {} more", self.malformed.len() - SHOWN));
        }
        Some(format!(
            "{} malformed record line(s) in {} skipped: {}",
            self.malformed.len(),
            file.display(),
            named.join("; ")
        ))
    }
}

/// One record from one line of JSON.
fn parse_record(text: &str) -> Result<Record, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let object = value.as_object().ok_or("not a JSON object")?;
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|f| object.get(*f).is_none_or(serde_json::Value::is_null))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing {}", missing.join(", ")));
    }
    serde_json::from_value(value).map_err(|e| format!("not a record ({e})"))
}

/// Counts of dispatches seen so far, for the progress line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Every record.
    pub(crate) seen: usize,
    /// `replayed`.
    pub(crate) replayed: usize,
    /// `declined`.
    pub(crate) declined: usize,
    /// `failed`.
    pub(crate) failed: usize,
}

impl Tally {
    /// Adds `records`.
    pub(crate) fn add(&mut self, records: &[Record]) {
        let count = |kind: &str| records.iter().filter(|r| r.outcome == kind).count();
        self.seen += records.len();
        self.replayed += count("replayed");
        self.declined += count("declined");
        self.failed += count("failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"kernel":"k","dispatch_id":2,"agent":0,"outcome":"replayed","reason":null,"passes":3,"snapshot_bytes":16,"restored_bytes":32,"skipped_regions":0,"pass_ns":[10,null,30],"snapshot_ns":5,"restore_ns":6,"start_ns":100,"pid":7}"#;

    fn tally(records: &[Record]) -> Tally {
        let mut t = Tally::default();
        t.add(records);
        t
    }

    #[test]
    fn records_parse_with_unknown_kinds_reasons_and_fields() {
        let text = format!(
            "{GOOD}\n\n{}\n{}\n",
            r#"{"kernel":"k","dispatch_id":3,"agent":0,"outcome":"failed","reason":"restore_failed","passes":2,"new_field":[1],"restore_mode":"dirty","written_bytes":64}"#,
            r#"{"kernel":"v","dispatch_id":4,"agent":1,"outcome":"quarantined","reason":"brand_new","passes":1}"#,
        );
        let r = Records::parse(&text);
        assert_eq!((r.records.len(), r.malformed.len()), (3, 0), "{r:?}");
        assert_eq!(r.records[0].pass_ns, [Some(10), None, Some(30)]);
        assert_eq!(
            (r.records[0].start_ns, r.records[0].pid),
            (Some(100), Some(7))
        );
        assert_eq!(r.records[1].outcome, "failed");
        assert_eq!(r.records[1].extra["new_field"], serde_json::json!([1]));
        assert_eq!(r.records[1].extra["restore_mode"], "dirty");
        assert_eq!(r.records[1].extra["written_bytes"], 64);
        assert_eq!(r.records[1].snapshot_bytes, 0, "missing figures read as 0");
        assert_eq!(r.records[2].outcome, "quarantined");
        assert_eq!(r.records[2].reason.as_deref(), Some("brand_new"));
        assert_eq!(
            tally(&r.records),
            Tally {
                seen: 3,
                replayed: 1,
                declined: 0,
                failed: 1
            }
        );
    }

    #[test]
    fn every_kind_of_bad_line_is_malformed_and_named_by_its_number() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(GOOD.as_bytes()); // 1
        bytes.extend_from_slice(b"\nnot json\n"); // 2
        bytes.extend_from_slice(b"{}\n"); // 3
        bytes.extend_from_slice(b"[1,2]\n"); // 4
        bytes.extend_from_slice(br#"{"kernel":"k","dispatch_id":5,"agent":0,"passes":1}"#); // 5
        bytes.push(b'\n');
        bytes.extend_from_slice(
            br#"{"kernel":"k","dispatch_id":6,"agent":0,"outcome":null,"passes":1}"#,
        ); // 6
        bytes.push(b'\n');
        bytes.extend_from_slice(
            br#"{"kernel":"k","dispatch_id":"seven","agent":0,"outcome":"replayed","passes":1}"#,
        ); // 7
        bytes.push(b'\n');
        let mut invalid = GOOD.as_bytes().to_vec(); // 8: invalid UTF-8 inside a string
        let at = invalid.iter().position(|&b| b == b'k').unwrap() + 1;
        invalid.insert(at, 0xff);
        bytes.extend_from_slice(&invalid);
        bytes.push(b'\n');
        bytes.extend_from_slice(b"   \n"); // 9: blank, skipped
        bytes.extend_from_slice(GOOD.as_bytes()); // 10
        bytes.push(b'\n');
        bytes.extend_from_slice(GOOD.as_bytes()); // 11: complete JSON, but no newline
        let r = Records::parse_bytes(&bytes, 1);
        assert_eq!(
            r.records.len(),
            2,
            "the good lines around the bad ones: {r:?}"
        );
        let lines: Vec<usize> = r.malformed.iter().map(|m| m.line).collect();
        assert_eq!(lines, [2, 3, 4, 5, 6, 7, 8, 11], "{r:?}");
        let error = |line: usize| &r.malformed.iter().find(|m| m.line == line).unwrap().error;
        assert!(error(2).starts_with("not JSON"), "{}", error(2));
        assert_eq!(
            error(3),
            "missing kernel, dispatch_id, agent, outcome, passes"
        );
        assert_eq!(error(4), "not a JSON object");
        assert_eq!(error(5), "missing outcome");
        assert_eq!(error(6), "missing outcome");
        assert!(error(7).starts_with("not a record"), "{}", error(7));
        assert!(error(8).starts_with("not valid UTF-8"), "{}", error(8));
        assert!(error(11).starts_with("truncated"), "{}", error(11));
        // Line numbers continue from where the run's records start.
        let r = Records::parse_bytes(b"x\n", 41);
        assert_eq!(r.malformed[0].line, 41);
        let summary = r
            .malformed_summary(std::path::Path::new("r.jsonl"))
            .unwrap();
        assert!(
            summary.starts_with("1 malformed record line(s) in r.jsonl skipped: line 41: not JSON"),
            "{summary}"
        );
        assert_eq!(
            Records::parse("").malformed_summary(std::path::Path::new("r")),
            None
        );
    }

    #[test]
    fn many_malformed_lines_are_summarized() {
        let r = Records::parse(&"x\n".repeat(12));
        let summary = r.malformed_summary(std::path::Path::new("f")).unwrap();
        assert!(summary.starts_with("12 malformed"), "{summary}");
        assert!(
            summary.contains("line 10: ") && !summary.contains("line 11: "),
            "{summary}"
        );
        assert!(summary.ends_with("and 2 more"), "{summary}");
    }
}
