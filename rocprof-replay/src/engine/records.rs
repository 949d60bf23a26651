//! Outcome records: one JSON object per dispatch (JSON Lines) appended to the file named by
//! `ROCPROF_REPLAY_OUTPUT`.
//!
//! Records are formatted and written on the thread that ends the dispatch's window (its
//! worker, for an asynchronous window; the submitting thread for a dispatch declined before
//! one), before the application can see the dispatch complete: nothing is left to flush when
//! the process ends, however it ends ([`emit`]).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde_json::json;

use crate::dispatch::DispatchInfo;
use crate::policy::Outcome;

/// The record of one dispatch, as a JSON object with the fixed keys.
pub(crate) fn record_json(info: &DispatchInfo, outcome: &Outcome) -> String {
    let pass_ns: Vec<Option<u64>> = outcome
        .pass_times
        .iter()
        .map(|t| t.map(|d| d.as_nanos() as u64))
        .collect();
    json!({
        "kernel": info.kernel(),
        "dispatch_id": info.dispatch_id.0,
        "agent": info.agent_index,
        "runtime": info.runtime.label(),
        "context": info.context.map(|c| format!("{c:#x}")),
        "outcome": outcome.kind.label(),
        "reason": outcome.kind.reason_code(),
        "passes": outcome.passes,
        "snapshot_bytes": outcome.snapshot_bytes,
        "restored_bytes": outcome.restored_bytes,
        "restore_mode": outcome.restore_mode.map(|m| m.label()),
        "staging": outcome.staging,
        "host_memory": outcome.host_writes_repeated.then_some("repeated"),
        "written_bytes": outcome.written_bytes,
        "verified_bytes": outcome.verified_bytes,
        "compared_on": outcome.compared_on,
        "diff_ns": outcome.diff_time.as_nanos() as u64,
        "skipped_regions": outcome.skipped_regions,
        "footprint": outcome.footprint.map(|f| f.label()),
        "watched_bytes": outcome.watched_bytes,
        "carried_bytes": outcome.carried_bytes,
        "fingerprint_ns": outcome.fingerprint_time.as_nanos() as u64,
        "pass_ns": pass_ns,
        "snapshot_ns": outcome.snapshot_time.as_nanos() as u64,
        "snapshot_regions": outcome.snapshot_regions,
        "window_ns": outcome.window_time.as_nanos() as u64,
        "run": outcome.run,
        "restore_ns": outcome.restore_time.as_nanos() as u64,
        "start_ns": outcome
            .started_at
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as u64),
        "pid": std::process::id(),
        "inputs_restored": outcome.inputs_restored,
        "metrics": outcome.metrics.values().map(|values| {
            values
                .iter()
                .map(|(name, v)| {
                    let mut value = json!({"value": v.value, "pass": v.pass});
                    if values.is_floating() {
                        value["gpu_value"] = json!(v.gpu_value);
                    }
                    (name.to_owned(), value)
                })
                .collect::<serde_json::Map<String, serde_json::Value>>()
        }),
        "metrics_reason": outcome.metrics.absent_reason(),
    })
    .to_string()
}

/// The records file, opened on the first record.
struct Writer {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl Writer {
    /// Opens (creates) `path` for appending.
    fn open(path: PathBuf) -> std::io::Result<Writer> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Writer {
            path,
            file: Mutex::new(file),
        })
    }

    /// Appends `line` and a newline with one `write` (the file is in append mode), on this
    /// thread: the line is in the file when this returns.
    fn write_line(&self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        if let Err(e) = self.file.lock().write_all(&bytes) {
            tracing::error!("writing {}: {e}", self.path.display());
        }
    }
}

fn writer() -> Option<&'static Writer> {
    static WRITER: OnceLock<Option<Writer>> = OnceLock::new();
    WRITER
        .get_or_init(|| {
            let path = PathBuf::from(std::env::var_os("ROCPROF_REPLAY_OUTPUT")?);
            // Opened here, on the first record, so a bad path is reported at once and the file
            // is open (one descriptor, for the whole run) before anything is written.
            Writer::open(path.clone())
                .map_err(|e| {
                    eprintln!(
                        "rocprof-replay: cannot open ROCPROF_REPLAY_OUTPUT={}: {e}; outcome \
                         records are not written",
                        path.display()
                    );
                })
                .ok()
        })
        .as_ref()
}

/// Set in a forked child: records are not written there (the parent's windows are not the
/// child's).
static IN_CHILD: AtomicBool = AtomicBool::new(false);

/// Stops recording in a forked child.
pub(crate) fn disable_in_child() {
    IN_CHILD.store(true, Ordering::Relaxed);
}

/// Writes a record (no-op without `ROCPROF_REPLAY_OUTPUT`): one `write` of the whole line to
/// a file opened for appending, on the calling thread, before the dispatch's completion is
/// released to the application (the engine emits at `on_end`). So a record is in the file
/// (the kernel's page cache) once the application can see its dispatch complete — even if
/// the process then ends with `_exit` or a signal, when no exit handler runs — and lines of
/// concurrent threads and processes never interleave.
pub(crate) fn emit(info: &DispatchInfo, outcome: &Outcome) {
    if IN_CHILD.load(Ordering::Relaxed) {
        return;
    }
    let Some(w) = writer() else { return };
    w.write_line(&record_json(info, outcome));
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_record_is_in_the_file_when_it_has_been_written_and_lines_stay_whole() {
        let path = std::env::temp_dir().join(format!(
            "rocprof-replay-records-{}-{:?}.jsonl",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&path);
        let w = std::sync::Arc::new(Writer::open(path.clone()).unwrap());
        w.write_line("{\"first\":1}");
        // Read at once, through another descriptor, with nothing flushed or waited for.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"first\":1}\n");
        let long = format!("{{\"pad\":\"{}\"}}", "x".repeat(10_000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (w, long) = (w.clone(), long.clone());
                std::thread::spawn(move || (0..50).for_each(|_| w.write_line(&long)))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 201);
        assert!(
            lines[1..].iter().all(|l| *l == long),
            "a line was cut or mixed"
        );
        let _ = std::fs::remove_file(&path);
    }

    use super::*;
    use crate::policy::{Outcome, OutcomeKind};

    fn fields(info: &DispatchInfo) -> serde_json::Value {
        serde_json::from_str(&record_json(info, &Outcome::ordinary(OutcomeKind::Skipped)))
            .expect("a record is one JSON object")
    }

    #[test]
    fn a_record_names_the_runtime_the_device_and_the_context() {
        let mut info = crate::testing::dispatch("k");
        info.agent_index = 2;
        let hsa = fields(&info);
        assert_eq!(
            (&hsa["runtime"], &hsa["agent"], &hsa["context"]),
            (&json!("hsa"), &json!(2), &serde_json::Value::Null)
        );
        info.runtime = crate::dispatch::Runtime::Cuda;
        info.context = Some(0x5a5a_0000);
        let cuda = fields(&info);
        assert_eq!(
            (&cuda["runtime"], &cuda["agent"], &cuda["context"]),
            (&json!("cuda"), &json!(2), &json!("0x5a5a0000"))
        );
    }
}
