//! The reports: an aligned table, CSV, JSON, and a Perfetto / Chrome trace.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use rocprof_replay::report::{Bytes, Time};
use serde_json::{Value, json};

use crate::records::Records;
use crate::summary::{self, KNOWN_KINDS, KernelSummary};

/// How the application ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Exit {
    /// Exit code, when it exited.
    pub(crate) code: Option<i32>,
    /// Signal, when one killed it.
    pub(crate) signal: Option<i32>,
}

/// Everything a report shows.
pub(crate) struct Run<'a> {
    /// The application and its arguments.
    pub(crate) command: Vec<String>,
    /// `emu` or `system`.
    pub(crate) runtime: &'static str,
    /// The tool library.
    pub(crate) tool: String,
    /// How the application ended.
    pub(crate) exit: Exit,
    /// Wall-clock launch time, ns since the Unix epoch.
    pub(crate) launched_ns: u64,
    /// The records.
    pub(crate) records: &'a Records,
    /// Per kernel.
    pub(crate) kernels: Vec<KernelSummary>,
    /// The metrics asked for (`--metrics`), in order: a column each even without values.
    pub(crate) metrics: Vec<String>,
}

impl<'a> Run<'a> {
    /// A run with its kernel summaries computed.
    pub(crate) fn new(
        command: Vec<String>,
        runtime: &'static str,
        tool: String,
        exit: Exit,
        launched_ns: u64,
        records: &'a Records,
    ) -> Run<'a> {
        Run {
            kernels: summary::by_kernel(&records.records),
            command,
            runtime,
            tool,
            exit,
            launched_ns,
            records,
            metrics: Vec::new(),
        }
    }

    /// The metric columns: those asked for, in order, then any other the records hold
    /// (sorted).
    fn metric_columns(&self) -> Vec<String> {
        let mut columns = self.metrics.clone();
        for name in summary::metric_names(&self.kernels) {
            if !columns.contains(&name) {
                columns.push(name);
            }
        }
        columns
    }

    fn total(&self, kind: &str) -> u64 {
        self.kernels.iter().map(|k| k.count(kind)).sum()
    }
}

fn time_ns(ns: u64) -> String {
    Time(Duration::from_nanos(ns)).to_string()
}

/// The aligned table (ends with a newline).
/// Longest kernel name the table shows whole; CSV, JSON and the trace keep every name whole.
const TABLE_NAME_CHARS: usize = 64;

/// `name` for the table: at most [`TABLE_NAME_CHARS`] characters, the middle elided (`...`),
/// so that a mangled name keeps both its distinctive start and its end.
fn shortened(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= TABLE_NAME_CHARS {
        return name.to_string();
    }
    let tail = 20;
    let head = TABLE_NAME_CHARS - 3 - tail;
    let mut out: String = chars[..head].iter().collect();
    out.push_str("...");
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// The table's kernel names, in order: [`shortened`], and where two different kernels
/// shorten to the same text (PyTorch's mangled names share long heads and tails), each gets
/// ` #1`, ` #2`, ... in table order so that rows stay distinguishable (CSV and JSON carry the
/// full names).
fn table_names<'a>(kernels: impl Iterator<Item = &'a str>) -> Vec<String> {
    let short: Vec<String> = kernels.map(shortened).collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let total = |name: &str| short.iter().filter(|s| s.as_str() == name).count();
    short
        .iter()
        .map(|s| {
            if total(s) < 2 {
                return s.clone();
            }
            let n = seen.entry(s.as_str()).or_insert(0);
            *n += 1;
            format!("{s} #{n}")
        })
        .collect()
}

/// How many dispatches shared a replay window with others (`ROCPROF_REPLAY_RUN`), in how many
/// windows; `None` when none did.
fn runs_line(records: &[crate::records::Record]) -> Option<String> {
    let members: Vec<u64> = records.iter().map(|r| r.run).filter(|&n| n > 1).collect();
    if members.is_empty() {
        return None;
    }
    // A window of n dispatches writes n records, each saying n.
    let windows: f64 = members.iter().map(|&n| 1.0 / n as f64).sum();
    let longest = members.iter().copied().max().unwrap_or(0);
    Some(format!(
        "rocprof-replay: {} dispatch{} shared replay windows with the dispatches next to them \
         ({} window{}, up to {longest} dispatches each; ROCPROF_REPLAY_RUN, --run)\n",
        members.len(),
        if members.len() == 1 { "" } else { "es" },
        windows.round() as u64,
        if windows.round() as u64 == 1 { "" } else { "s" },
    ))
}

/// How many replayed dispatches the `sampled` footprint left unchecked (their records say
/// `footprint: unchecked`), and how many of its checks found a write outside the arguments;
/// `None` when no dispatch went unchecked.
fn unchecked_line(records: &[crate::records::Record]) -> Option<String> {
    let field = |r: &crate::records::Record, name: &str| {
        r.extra
            .get(name)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let unchecked = records
        .iter()
        .filter(|r| {
            r.outcome == "replayed" && field(r, "footprint").as_deref() == Some("unchecked")
        })
        .count();
    if unchecked == 0 {
        return None;
    }
    let caught = records
        .iter()
        .filter(|r| r.reason.as_deref() == Some("wrote_outside_footprint"))
        .count();
    Some(format!(
        "rocprof-replay: {unchecked} replayed dispatch{} not checked for writes outside their \
         arguments (--footprint sampled: a kernel that writes memory its arguments do not name \
         on such a dispatch has that write repeated once per pass); {caught} dispatch{} found \
         writing outside {} arguments\n",
        if unchecked == 1 { " was" } else { "es were" },
        if caught == 1 { "" } else { "es" },
        if caught == 1 { "its" } else { "their" },
    ))
}

pub(crate) fn table(run: &Run<'_>) -> String {
    let others = summary::other_kinds(&run.kernels);
    let metrics = run.metric_columns();
    let mut out = String::new();
    let dispatches: u64 = run.kernels.iter().map(|k| k.dispatches).sum();
    let passes: u64 = run
        .records
        .records
        .iter()
        .filter(|r| r.outcome == "replayed")
        .map(|r| r.passes)
        .sum();
    let _ = write!(
        out,
        "rocprof-replay: {dispatches} dispatch{} of {} kernel{}: {} replayed ({passes} passes), {} skipped, {} declined, {} failed",
        if dispatches == 1 { "" } else { "es" },
        run.kernels.len(),
        if run.kernels.len() == 1 { "" } else { "s" },
        run.total("replayed"),
        run.total("skipped"),
        run.total("declined"),
        run.total("failed"),
    );
    for kind in &others {
        let _ = write!(out, ", {} {kind}", run.total(kind));
    }
    out.push('\n');
    if let Some(line) = runs_line(&run.records.records) {
        out.push_str(&line);
    }
    if let Some(line) = unchecked_line(&run.records.records) {
        out.push_str(&line);
    }
    if !run.records.malformed.is_empty() {
        let _ = writeln!(
            out,
            "rocprof-replay: {} malformed record line(s) skipped (named on stderr)",
            run.records.malformed.len()
        );
    }
    if run.kernels.is_empty() {
        out.push_str("rocprof-replay: no kernel dispatch was seen\n");
        return out;
    }
    let mut header: Vec<String> = vec!["Kernel".into(), "Dispatches".into()];
    header.extend(KNOWN_KINDS.iter().map(|k| capitalize(k)));
    header.extend(others.iter().map(|k| capitalize(k)));
    header.extend(
        [
            "Passes",
            "Min",
            "Median",
            "Max",
            "Stddev",
            "Snapshot",
            "Snap time",
            "Restored",
            "Restore time",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    header.extend(metrics.iter().cloned());
    let mut rows = vec![header];
    let names = table_names(run.kernels.iter().map(|k| k.kernel.as_str()));
    for (k, name) in run.kernels.iter().zip(names) {
        let mut row = vec![name, k.dispatches.to_string()];
        row.extend(KNOWN_KINDS.iter().map(|kind| k.count(kind).to_string()));
        row.extend(others.iter().map(|kind| k.count(kind).to_string()));
        row.push(k.passes.to_string());
        match k.pass_time {
            Some(t) => row.extend([t.min_ns, t.median_ns, t.max_ns, t.stddev_ns].map(time_ns)),
            None => row.extend(std::iter::repeat_n("-".to_string(), 4)),
        }
        let replayed = k.count("replayed") > 0 || k.snapshot_bytes > 0;
        if replayed {
            row.extend([
                Bytes(k.snapshot_bytes).to_string(),
                time_ns(k.snapshot_ns),
                Bytes(k.restored_bytes).to_string(),
                time_ns(k.restore_ns),
            ]);
        } else {
            row.extend(std::iter::repeat_n("-".to_string(), 4));
        }
        row.extend(metrics.iter().map(|m| {
            k.metrics
                .get(m)
                .map_or_else(|| "-".to_string(), summary::MetricSummary::cell)
        }));
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let with_reasons: Vec<&KernelSummary> = run
        .kernels
        .iter()
        .filter(|k| !k.reasons.is_empty())
        .collect();
    if !with_reasons.is_empty() {
        out.push_str("Not replayed, by reason:\n");
        for k in with_reasons {
            let reasons: Vec<String> = k
                .reasons
                .iter()
                .map(|(kind_reason, n)| {
                    let (kind, reason) = kind_reason.split_once(':').unwrap_or(("", kind_reason));
                    format!("{kind} {reason} x{n}")
                })
                .collect();
            let _ = writeln!(out, "  {}: {}", k.kernel, reasons.join(", "));
        }
    }
    if !metrics.is_empty() {
        out.push_str("Counters: the mean over each kernel's dispatches with values\n");
    }
    let absent: Vec<String> = run
        .kernels
        .iter()
        .filter(|k| !k.metrics_absent.is_empty())
        .map(|k| {
            let why: Vec<String> = k
                .metrics_absent
                .iter()
                .map(|(r, n)| format!("{r} x{n}"))
                .collect();
            format!("  {}: {}", k.kernel, why.join(", "))
        })
        .collect();
    if !absent.is_empty() {
        out.push_str("No counters, by reason (records' metrics_reason):\n");
        for line in absent {
            out.push_str(&line);
            out.push('\n');
        }
    }
    let skipped_regions: u64 = run.kernels.iter().map(|k| k.skipped_regions).sum();
    if skipped_regions > 0 {
        let _ = writeln!(
            out,
            "{skipped_regions} region(s) were freed or reallocated during a replay and skipped at restore"
        );
    }
    out
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// The CSV header columns before and after the per-kind counts.
const CSV_HEAD: [&str; 2] = ["kernel", "dispatches"];
const CSV_TAIL: [&str; 13] = [
    "reasons",
    "passes",
    "timed_passes",
    "min_ns",
    "median_ns",
    "max_ns",
    "mean_ns",
    "stddev_ns",
    "snapshot_bytes",
    "snapshot_ns",
    "restored_bytes",
    "restore_ns",
    "skipped_regions",
];

/// One row per kernel. Outcome kinds beyond replayed/skipped/declined/failed get their own column;
/// `reasons` is `kind:reason=count` joined by `;`. Empty cells where nothing was timed.
pub(crate) fn csv(run: &Run<'_>) -> Result<String, String> {
    let others = summary::other_kinds(&run.kernels);
    let metrics = run.metric_columns();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = CSV_HEAD.iter().map(|s| s.to_string()).collect();
    header.extend(KNOWN_KINDS.iter().map(|s| s.to_string()));
    header.extend(others.iter().cloned());
    header.extend(CSV_TAIL.iter().map(|s| s.to_string()));
    header.extend(metrics.iter().cloned());
    w.write_record(&header).map_err(|e| e.to_string())?;
    for k in &run.kernels {
        let mut row = vec![k.kernel.clone(), k.dispatches.to_string()];
        row.extend(KNOWN_KINDS.iter().map(|kind| k.count(kind).to_string()));
        row.extend(others.iter().map(|kind| k.count(kind).to_string()));
        let reasons: Vec<String> = k.reasons.iter().map(|(r, n)| format!("{r}={n}")).collect();
        row.push(reasons.join(";"));
        row.push(k.passes.to_string());
        match k.pass_time {
            Some(t) => row.extend(
                [
                    t.n as u64,
                    t.min_ns,
                    t.median_ns,
                    t.max_ns,
                    t.mean_ns,
                    t.stddev_ns,
                ]
                .map(|v| v.to_string()),
            ),
            None => {
                row.push("0".into());
                row.extend(std::iter::repeat_n(String::new(), 5));
            }
        }
        row.extend(
            [
                k.snapshot_bytes,
                k.snapshot_ns,
                k.restored_bytes,
                k.restore_ns,
                k.skipped_regions,
            ]
            .map(|v| v.to_string()),
        );
        row.extend(
            metrics
                .iter()
                .map(|m| k.metrics.get(m).map(|s| s.cell()).unwrap_or_default()),
        );
        w.write_record(&row).map_err(|e| e.to_string())?;
    }
    let bytes = w.into_inner().map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// The JSON report: the run, totals, kernels and every record.
pub(crate) fn json(run: &Run<'_>) -> String {
    let mut totals = BTreeMap::new();
    totals.insert(
        "dispatches".to_string(),
        run.kernels.iter().map(|k| k.dispatches).sum::<u64>(),
    );
    for k in &run.kernels {
        for (kind, n) in &k.outcomes {
            *totals.entry(kind.clone()).or_insert(0) += n;
        }
    }
    for kind in KNOWN_KINDS {
        totals.entry(kind.to_string()).or_insert(0);
    }
    let value = json!({
        "format": "rocprof-replay-report",
        "version": 1,
        "command": run.command,
        "runtime": run.runtime,
        "tool": run.tool,
        "exit": {"code": run.exit.code, "signal": run.exit.signal},
        "malformed_records": run.records.malformed.len(),
        "malformed_lines": run.records.malformed,
        "totals": totals,
        "kernels": run.kernels,
        "dispatches": run.records.records,
    });
    let mut text = serde_json::to_string_pretty(&value).expect("a JSON value serializes");
    text.push('\n');
    text
}

/// Microseconds (the trace format's unit) with nanosecond precision.
fn us(ns: u64) -> f64 {
    (ns as f64 / 1e3 * 1e3).round() / 1e3
}

/// A Chrome trace (JSON object format) that ui.perfetto.dev and chrome://tracing open: one
/// process per application process, one thread track per GPU agent, each replayed dispatch a
/// slice containing its snapshot, passes and restores, laid out in order from the dispatch's
/// start (`start_ns`) with their measured durations (pass: kernel time; restore: the mean of the
/// dispatch's restores). Dispatches that were not replayed are instant events.
pub(crate) fn trace(run: &Run<'_>) -> String {
    let records = &run.records.records;
    let base = records
        .iter()
        .filter_map(|r| r.start_ns)
        .min()
        .map_or(run.launched_ns, |first| first.min(run.launched_ns));
    let mut events: Vec<Value> = Vec::new();
    let app = run.command.first().cloned().unwrap_or_default();
    let mut tracks: BTreeMap<(u64, u64), u64> = BTreeMap::new(); // (pid, tid) -> end of last slice
    for r in records {
        let pid = r.pid.unwrap_or(0);
        let tid = r.agent + 1;
        let end_of_last = tracks.entry((pid, tid)).or_insert(0);
        // Records without a start (an older engine) follow the previous one.
        let mut start = r
            .start_ns
            .map_or(*end_of_last + 1_000, |s| s.saturating_sub(base));
        start = start.max(*end_of_last);
        let args = json!({
            "dispatch_id": r.dispatch_id,
            "outcome": r.outcome,
            "reason": r.reason,
            "passes": r.passes,
            "snapshot_bytes": r.snapshot_bytes,
            "restored_bytes": r.restored_bytes,
        });
        if r.outcome != "replayed" {
            let name = match &r.reason {
                Some(reason) => format!("{} ({} {reason})", r.kernel, r.outcome),
                None => format!("{} ({})", r.kernel, r.outcome),
            };
            events.push(json!({
                "ph": "i", "s": "t", "name": name, "cat": r.outcome,
                "pid": pid, "tid": tid, "ts": us(start), "args": args,
            }));
            *end_of_last = start;
            continue;
        }
        let mut children = Vec::new();
        let mut cursor = start;
        let mut child = |name: String, cat: &str, dur: u64, args: Value, cursor: &mut u64| {
            children.push(json!({
                "ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                "ts": us(*cursor), "dur": us(dur), "args": args,
            }));
            *cursor += dur;
        };
        child(
            "snapshot".into(),
            "snapshot",
            r.snapshot_ns,
            json!({"bytes": r.snapshot_bytes}),
            &mut cursor,
        );
        let passes = r.passes.max(r.pass_ns.len() as u64);
        let restores = passes.saturating_sub(1);
        let restore_each = r.restore_ns.checked_div(restores).unwrap_or(0);
        for i in 0..passes {
            let ns = r.pass_ns.get(i as usize).copied().flatten();
            child(
                format!("pass {i}"),
                "pass",
                ns.unwrap_or(0),
                json!({"kernel_ns": ns, "timed": ns.is_some()}),
                &mut cursor,
            );
            if i + 1 < passes {
                child(
                    "restore".into(),
                    "restore",
                    restore_each,
                    json!({"bytes": r.restored_bytes / restores.max(1), "mean_of_restores": true}),
                    &mut cursor,
                );
            }
        }
        events.push(json!({
            "ph": "X", "name": r.kernel, "cat": "dispatch", "pid": pid, "tid": tid,
            "ts": us(start), "dur": us(cursor - start), "args": args,
        }));
        events.extend(children);
        // One counter track per metric: its value at the dispatch's start.
        for (name, v) in r.metrics.iter().flatten() {
            events.push(json!({
                "ph": "C", "name": name, "cat": "metric", "pid": pid, "tid": tid,
                "ts": us(start), "args": {format!("GPU {}", r.agent): v.value},
            }));
        }
        *end_of_last = cursor;
    }
    let mut meta = Vec::new();
    let pids: std::collections::BTreeSet<u64> = tracks.keys().map(|(p, _)| *p).collect();
    for pid in pids {
        meta.push(json!({
            "ph": "M", "name": "process_name", "pid": pid, "tid": 0,
            "args": {"name": format!("{app} (pid {pid})")},
        }));
    }
    for (pid, tid) in tracks.keys() {
        meta.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("GPU agent {}", tid - 1)},
        }));
        meta.push(json!({
            "ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": tid},
        }));
    }
    meta.extend(events);
    let value = json!({
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": "rocprof-replay",
            "command": run.command,
            "runtime": run.runtime,
            "base_unix_ns": base,
            "layout": "slices laid out in order from each dispatch's start with measured durations; a restore slice is the mean of the dispatch's restores",
        },
        "traceEvents": meta,
    });
    let mut text = serde_json::to_string(&value).expect("a JSON value serializes");
    text.push('\n');
    text
}

/// Counts used by tests: records by outcome kind.
#[cfg(test)]
pub(crate) fn kinds(records: &[crate::records::Record]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in records {
        *m.entry(r.outcome.clone()).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernels_whose_shortened_names_collide_are_numbered() {
        let name = |middle: &str| {
            format!(
                "_ZN2at6native29vectorized_elementwise_kernel{middle}{}_end_of_name",
                "x".repeat(80)
            )
        };
        let (a, b) = (name("Fill"), name("Copy"));
        let names = super::table_names([a.as_str(), "short", b.as_str()].into_iter());
        assert_eq!(names[1], "short");
        assert!(
            names[0].ends_with(" #1") && names[2].ends_with(" #2"),
            "{names:?}"
        );
        assert_eq!(
            names[0].trim_end_matches(" #1"),
            names[2].trim_end_matches(" #2")
        );
    }

    #[test]
    fn long_kernel_names_are_shortened_in_the_middle_for_the_table() {
        let short = "_Z7add_onePjm";
        assert_eq!(super::shortened(short), short);
        let long = format!(
            "_ZN2at6native29vectorized_elementwise_kernel{}_end_of_name",
            "x".repeat(200)
        );
        let s = super::shortened(&long);
        assert_eq!(s.chars().count(), super::TABLE_NAME_CHARS);
        assert!(s.starts_with("_ZN2at6native29vectorized_"), "{s}");
        assert!(
            s.ends_with("xxxxxxxx_end_of_name") && s.contains("..."),
            "{s}"
        );
    }

    use super::*;

    const TEXT: &str = r#"{"kernel":"vector_add","dispatch_id":1,"agent":0,"outcome":"replayed","passes":3,"pass_ns":[1000,2000,3000],"snapshot_bytes":4096,"restored_bytes":8192,"snapshot_ns":500,"restore_ns":800,"start_ns":1000000,"pid":9}
{"kernel":"inc, \"quoted\"","dispatch_id":2,"agent":1,"outcome":"declined","reason":"over_budget","passes":1,"start_ns":1100000,"pid":9}
{"kernel":"inc, \"quoted\"","dispatch_id":3,"agent":1,"outcome":"failed","reason":"restore_failed","passes":2,"pass_ns":[5,null],"start_ns":1200000,"pid":9}
"#;

    fn run(records: &Records) -> Run<'_> {
        Run::new(
            vec!["app".into()],
            "emu",
            "libt.so".into(),
            Exit {
                code: Some(0),
                signal: None,
            },
            900_000,
            records,
        )
    }

    #[test]
    fn the_table_is_aligned_and_names_every_kind_and_reason() {
        let records = Records::parse(TEXT);
        let t = table(&run(&records));
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].contains(
                "3 dispatches of 2 kernels: 1 replayed (3 passes), 0 skipped, 1 declined, 1 failed"
            ),
            "{t}"
        );
        assert!(
            lines[1].starts_with("Kernel") && lines[1].contains("Failed"),
            "{t}"
        );
        let col = lines[1].find("Dispatches").unwrap() + "Dispatches".len();
        assert_eq!(&lines[2][col - 1..col], "1", "{t}");
        assert!(
            lines[2].contains("1.0 us")
                && lines[2].contains("2.0 us")
                && lines[2].contains("4 KiB"),
            "{t}"
        );
        assert!(
            t.contains("inc, \"quoted\": declined over_budget x1, failed restore_failed x1"),
            "{t}"
        );
    }

    #[test]
    fn the_table_says_how_many_dispatches_shared_windows() {
        let records = Records::parse(TEXT);
        assert!(
            !table(&run(&records)).contains("shared replay windows"),
            "no run, no line"
        );
        let line = |n: u64, kernel: &str, id: u64| {
            format!(
                r#"{{"kernel":"{kernel}","dispatch_id":{id},"agent":0,"outcome":"replayed","passes":3,"run":{n}}}"#
            )
        };
        let text = [
            line(3, "a", 1),
            line(3, "b", 2),
            line(3, "a", 3),
            line(1, "a", 4),
            line(2, "b", 5),
            line(2, "a", 6),
        ]
        .join("\n")
            + "\n";
        let records = Records::parse(&text);
        let t = table(&run(&records));
        assert!(
            t.lines().nth(1).is_some_and(|l| l.contains(
                "5 dispatches shared replay windows with the dispatches next to them \
                 (2 windows, up to 3 dispatches each"
            )),
            "{t}"
        );
    }

    #[test]
    fn the_table_says_how_many_dispatches_went_unchecked() {
        let records = Records::parse(TEXT);
        assert!(
            !table(&run(&records)).contains("not checked"),
            "nothing unchecked, no line"
        );
        let line = |footprint: &str, outcome: &str, reason: &str, id: u64| {
            format!(
                r#"{{"kernel":"k","dispatch_id":{id},"agent":0,"outcome":"{outcome}","passes":3,"footprint":"{footprint}"{reason}}}"#
            )
        };
        let text = [
            line("arguments", "replayed", "", 1),
            line("unchecked", "replayed", "", 2),
            line("unchecked", "replayed", "", 3),
            line(
                "arguments",
                "declined",
                r#","reason":"wrote_outside_footprint""#,
                4,
            ),
            line("all", "replayed", "", 5),
        ]
        .join("\n")
            + "\n";
        let records = Records::parse(&text);
        let t = table(&run(&records));
        assert!(
            t.contains(
                "rocprof-replay: 2 replayed dispatches were not checked for writes outside their \
                 arguments"
            ) && t.contains("1 dispatch found writing outside its arguments"),
            "{t}"
        );
    }

    #[test]
    fn csv_has_a_row_per_kernel_and_quotes_names() {
        let records = Records::parse(TEXT);
        let text = csv(&run(&records)).unwrap();
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
        assert!(header.contains(&"failed".to_string()));
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        let col = |name: &str| header.iter().position(|h| h == name).unwrap();
        assert_eq!(&rows[1][col("kernel")], "inc, \"quoted\"");
        assert_eq!(
            &rows[1][col("reasons")],
            "declined:over_budget=1;failed:restore_failed=1"
        );
        assert_eq!(&rows[0][col("median_ns")], "2000");
    }

    #[test]
    fn the_trace_nests_passes_in_their_dispatch() {
        let records = Records::parse(TEXT);
        let v: Value = serde_json::from_str(&trace(&run(&records))).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let x: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        // vector_add + snapshot + 3 passes + 2 restores.
        assert_eq!(x.len(), 7);
        let parent = x.iter().find(|e| e["cat"] == "dispatch").unwrap();
        assert_eq!(parent["ts"], 100.0); // 1_000_000 ns - base 900_000 ns
        let end = parent["ts"].as_f64().unwrap() + parent["dur"].as_f64().unwrap();
        assert!((end - (100.0 + 0.5 + 6.0 + 0.8)).abs() < 1e-9, "{parent}");
        for e in x.iter().filter(|e| e["cat"] != "dispatch") {
            let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            assert!(ts >= 100.0 && ts + dur <= end + 1e-9, "{e}");
        }
        assert_eq!(events.iter().filter(|e| e["ph"] == "i").count(), 2);
        assert_eq!(kinds(&records.records)["failed"], 1);
    }
}
