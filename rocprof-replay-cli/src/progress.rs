//! The live progress line on stderr: dispatches seen / replayed / declined, read from the
//! records file as the application appends to it. Shown only when stderr is a terminal and the
//! run lasts more than a second; silent otherwise.

use std::io::{IsTerminal, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::records::{Records, tally};

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
    let mut pending = String::new();
    let (mut seen, mut replayed, mut declined) = (0usize, 0usize, 0usize);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(POLL);
        if let Ok(mut f) = std::fs::File::open(path) {
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                let mut chunk = String::new();
                if let Ok(n) = f.read_to_string(&mut chunk) {
                    offset += n as u64;
                    pending.push_str(&chunk);
                }
            }
        }
        if let Some(end) = pending.rfind('\n') {
            let complete: String = pending.drain(..=end).collect();
            let (s, r, d) = tally(&Records::parse(&complete).records);
            seen += s;
            replayed += r;
            declined += d;
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
            b.set_message(format!(
                "{seen} dispatches seen, {replayed} replayed, {declined} declined"
            ));
            b.tick();
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
