//! The live progress line on stderr: dispatches seen / replayed / declined / failed, read from the
//! records file as the application appends to it. Shown only when stderr is a terminal and the
//! run lasts more than a second; silent otherwise.

use std::io::{IsTerminal, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::records::{Records, Tally};

/// How often the records file is read.
const POLL: Duration = Duration::from_millis(100);
/// The line appears only after this long.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A running progress thread.
pub(crate) struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts following `records` (nothing at all when stderr is not a terminal).
    pub(crate) fn start(records: PathBuf, offset: u64) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("rocprof-replay-progress".into())
                .spawn(move || follow(&records, offset, &stop))
                .ok()
        });
        Progress {
            stop,
            thread: thread.flatten(),
        }
    }

    /// Stops and clears the line.
    pub(crate) fn finish(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn follow(path: &std::path::Path, mut offset: u64, stop: &AtomicBool) {
    let start = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    let mut pending: Vec<u8> = Vec::new();
    let mut tally = Tally::default();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(POLL);
        if let Ok(mut f) = std::fs::File::open(path) {
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                if let Ok(n) = f.read_to_end(&mut pending) {
                    offset += n as u64;
                }
            }
        }
        if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
            let complete: Vec<u8> = pending.drain(..=end).collect();
            tally.add(&Records::parse_bytes(&complete, 1).records);
        }
        if bar.is_none() && start.elapsed() >= SHOW_AFTER {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template("{spinner} rocprof-replay: {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar = Some(b);
        }
        if let Some(b) = &bar {
            b.set_message(message(&tally));
            b.tick();
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

/// The progress line's text.
fn message(t: &Tally) -> String {
    format!(
        "{} dispatches seen, {} replayed, {} declined, {} failed",
        t.seen, t.replayed, t.declined, t.failed
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_failed_apart_from_declined() {
        let text = r#"{"kernel":"k","dispatch_id":1,"agent":0,"outcome":"declined","reason":"over_budget","passes":1}
{"kernel":"k","dispatch_id":2,"agent":0,"outcome":"failed","reason":"pass_stuck","passes":2}
{"kernel":"k","dispatch_id":3,"agent":0,"outcome":"replayed","passes":3}
"#;
        let mut t = Tally::default();
        t.add(&Records::parse(text).records);
        assert_eq!(
            message(&t),
            "3 dispatches seen, 1 replayed, 1 declined, 1 failed"
        );
    }
}
