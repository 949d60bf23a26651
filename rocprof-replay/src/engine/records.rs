//! Outcome records: one JSON object per dispatch (JSON Lines) appended to the file named by
//! `ROCPROF_REPLAY_OUTPUT`.
//!
//! Records are formatted on the replaying thread (cheap) and handed to a writer thread over a
//! channel, so file I/O stays off the submission path. [`flush`] waits (bounded) until every
//! record handed over so far is on disk; the SDK calls it from `OnUnload` and from an
//! `atexit` handler, so records are not lost when a process exits without `hsa_shut_down`.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
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

struct Writer {
    tx: Mutex<Sender<String>>,
    /// (records sent, records written)
    progress: Mutex<(u64, u64)>,
    written: Condvar,
}

fn writer() -> Option<&'static Writer> {
    static WRITER: OnceLock<Option<Writer>> = OnceLock::new();
    WRITER
        .get_or_init(|| {
            let path = PathBuf::from(std::env::var_os("ROCPROF_REPLAY_OUTPUT")?);
            // Opened here, on the first record, so a bad path is reported at once and the file
            // is open (one descriptor, for the whole run) before anything is written.
            let file = match OpenOptions::new().create(true).append(true).open(&path) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!(
                        "rocprof-replay: cannot open ROCPROF_REPLAY_OUTPUT={}: {e}; outcome \
                         records are not written",
                        path.display()
                    );
                    return None;
                }
            };
            let (tx, rx) = channel::<String>();
            let w = Writer {
                tx: Mutex::new(tx),
                progress: Mutex::new((0, 0)),
                written: Condvar::new(),
            };
            std::thread::Builder::new()
                .name("rocprof-replay-records".into())
                .spawn(move || write_loop(path, file, rx))
                .ok()?;
            // SAFETY: registering a plain extern "C" function with no captured state.
            unsafe { libc::atexit(flush_at_exit) };
            Some(w)
        })
        .as_ref()
}

fn write_loop(path: PathBuf, mut file: std::fs::File, rx: Receiver<String>) {
    while let Ok(line) = rx.recv() {
        // One write per record: lines from concurrent processes never interleave mid-line.
        if let Err(e) = file.write_all(format!("{line}\n").as_bytes()) {
            tracing::error!("writing {}: {e}", path.display());
        }
        if let Some(w) = writer() {
            let mut p = w.progress.lock();
            p.1 += 1;
            w.written.notify_all();
        }
    }
}

/// Set in a forked child: records are neither formatted nor awaited there (the writer thread
/// belongs to the parent).
static IN_CHILD: AtomicBool = AtomicBool::new(false);

/// Stops recording in a forked child.
pub(crate) fn disable_in_child() {
    IN_CHILD.store(true, Ordering::Relaxed);
}

/// Hands a record to the writer (no-op without `ROCPROF_REPLAY_OUTPUT`).
pub(crate) fn emit(info: &DispatchInfo, outcome: &Outcome) {
    if IN_CHILD.load(Ordering::Relaxed) {
        return;
    }
    let Some(w) = writer() else { return };
    let line = record_json(info, outcome);
    let mut p = w.progress.lock();
    if w.tx.lock().send(line).is_ok() {
        p.0 += 1;
    }
}

/// Waits up to `deadline` until every record emitted so far is written.
pub(crate) fn flush(deadline: Duration) -> bool {
    if IN_CHILD.load(Ordering::Relaxed) {
        return true;
    }
    let Some(w) = writer() else { return true };
    let mut p = w.progress.lock();
    let target = p.0;
    let until = std::time::Instant::now() + deadline;
    while p.1 < target {
        if w.written.wait_until(&mut p, until).timed_out() {
            return false;
        }
    }
    true
}

extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if !flush(Duration::from_secs(5)) {
            eprintln!("rocprof-replay: some outcome records could not be written before exit");
        }
    });
}

#[cfg(test)]
mod tests {
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
