//! Where a replay window's time goes: with `ROCPROF_REPLAY_PHASES` set, the engine adds up the
//! wall time of each phase of every window (taking the agent, draining, capturing, the passes
//! and the one wait of passes queued ahead, the fingerprint check, the diff, the restores, the
//! end) and prints the totals when the
//! process exits — to the file the variable names, or to stderr when it is `1` or `stderr`.
//!
//! Off (the default) a phase costs one load of a value read once. The totals are process-wide
//! sums over all windows and threads, per call (a window has one `pass` call per pass,
//! one `end` call). Phases do not nest (but `stored_words`, the part of `variables` that read
//! the words stored in module variables, `defer`, the part of `drain` that deferred a CUDA
//! launch behind a closed gate, `arena_grow`, the part of `arena` that allocated
//! memory, and `pass_submit`, `pass_wait` and `pass_record`, the parts of `pass` before the
//! backend waits, while it waits for completion and for a kernel record, and `record_flush`,
//! the flushes of `pass_record`, shown indented), so
//! the rows add up to at most the `window` row, and what windows spend outside them is the
//! `other` row.
//! `docs/performance.md` shows how to read it.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A phase of the replay window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The whole window, from taking the agent to its end.
    Window,
    /// `ReplayTarget::begin`: taking the agent (its lock and gates).
    Begin,
    /// `ReplayTarget::drain`: waiting for the work submitted before the dispatch.
    Drain,
    /// Of `Drain` (CUDA): a launch deferred behind a closed gate while its drain waited, from
    /// the window's request to the application thread to the release of its call; its count
    /// is the number of launches deferred.
    Defer,
    /// Finding the module variables the snapshot holds, and the pointers stored in them.
    Variables,
    /// Of `Variables`: reading the words stored in the module variables (copies to the host,
    /// made only while memory no window restores exists), to find pointers into it; its count
    /// is the number of reads.
    StoredWords,
    /// The plan: which allocations the snapshot holds, which are watched.
    Plan,
    /// The watched memory's fingerprints before the first pass (carried or read).
    WatchBefore,
    /// Readying the snapshot arena for the plan's bytes (`DeviceMemory::reserve_staging`).
    Arena,
    /// Of `Arena`: the calls that allocated device or pinned memory for it (its count is the
    /// number of allocations).
    ArenaGrow,
    /// Copying the snapshot.
    Capture,
    /// The passes (each one: submission to completion).
    Pass,
    /// Of `Pass`: handing the pass to the device, until the backend starts waiting for it
    /// (CUDA: events, gate and launch enqueued).
    PassSubmit,
    /// Of `Pass`: waiting for the pass to complete, from the end of its submission (the
    /// device's and the runtime's time: the kernel, the runtime's latency in starting it and
    /// in signalling its end, the waiting thread's wake-up).
    PassWait,
    /// Of `Pass`: waiting for the pass's kernel record after it completed (CUDA's kernel-only
    /// pass times, `cuda::kernel_clock`).
    PassRecord,
    /// Of `PassRecord`: each call that asks CUPTI to deliver its records
    /// (`cuptiActivityFlushAll`); its count over `PassRecord`'s is the flushes a record took.
    RecordFlush,
    /// Passes queued ahead: the one wait for the last pass submitted, from the end of the
    /// submissions (what the device still had to run then; the passes' own rows hold their
    /// submission and collection).
    Await,
    /// The policy's callbacks between passes (`on_pass`, `on_pass_end`, `should_continue`).
    Policy,
    /// The watched memory's fingerprints after the first pass.
    WatchAfter,
    /// Choosing the restore: the diff after the first pass.
    Diff,
    /// Restores between passes.
    Restore,
    /// After the last pass: the final compares and write-backs of the restore.
    Final,
    /// `ReplayTarget::complete`: the application's completion signalled once.
    Complete,
    /// `ReplayTarget::end`: the backend releases the agent.
    End,
}

const PHASES: [Phase; 24] = [
    Phase::Window,
    Phase::Begin,
    Phase::Drain,
    Phase::Defer,
    Phase::Variables,
    Phase::StoredWords,
    Phase::Plan,
    Phase::WatchBefore,
    Phase::Arena,
    Phase::ArenaGrow,
    Phase::Capture,
    Phase::Pass,
    Phase::PassSubmit,
    Phase::PassWait,
    Phase::PassRecord,
    Phase::RecordFlush,
    Phase::Await,
    Phase::Policy,
    Phase::WatchAfter,
    Phase::Diff,
    Phase::Restore,
    Phase::Final,
    Phase::Complete,
    Phase::End,
];

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Window => "window",
            Phase::Begin => "begin",
            Phase::Drain => "drain",
            Phase::Defer => "  defer",
            Phase::Variables => "variables",
            Phase::StoredWords => "  stored_words",
            Phase::Plan => "plan",
            Phase::WatchBefore => "watch_before",
            Phase::Arena => "arena",
            Phase::ArenaGrow => "  arena_grow",
            Phase::Capture => "capture",
            Phase::Pass => "pass",
            Phase::PassSubmit => "  pass_submit",
            Phase::PassWait => "  pass_wait",
            Phase::PassRecord => "  pass_record",
            Phase::RecordFlush => "    record_flush",
            Phase::Await => "await",
            Phase::Policy => "policy",
            Phase::WatchAfter => "watch_after",
            Phase::Diff => "diff",
            Phase::Restore => "restore",
            Phase::Final => "final",
            Phase::Complete => "complete",
            Phase::End => "end",
        }
    }
}

struct Totals {
    ns: [AtomicU64; PHASES.len()],
    count: [AtomicU64; PHASES.len()],
}

static TOTALS: Totals = Totals {
    ns: [const { AtomicU64::new(0) }; PHASES.len()],
    count: [const { AtomicU64::new(0) }; PHASES.len()],
};

/// Where the report goes, read once: `None` when phases are not measured.
fn destination() -> Option<&'static str> {
    static DEST: OnceLock<Option<String>> = OnceLock::new();
    DEST.get_or_init(|| {
        let value = std::env::var("ROCPROF_REPLAY_PHASES").ok()?;
        let value = value.trim();
        if value.is_empty() || value == "0" {
            return None;
        }
        register_report();
        Some(value.to_owned())
    })
    .as_deref()
}

/// Whether phases are measured in this process.
pub(crate) fn enabled() -> bool {
    destination().is_some()
}

/// Adds `elapsed` to `phase`.
pub(crate) fn add(phase: Phase, elapsed: Duration) {
    let i = phase as usize;
    TOTALS.ns[i].fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    TOTALS.count[i].fetch_add(1, Ordering::Relaxed);
}

/// Runs `f`, its wall time added to `phase` when phases are measured.
pub(crate) fn timed<R>(phase: Phase, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let start = Instant::now();
    let r = f();
    add(phase, start.elapsed());
    r
}

/// The report: one row per phase (windows or calls, total, mean), and the window's time
/// outside the phases.
pub(crate) fn report() -> String {
    let row = |p: Phase| {
        let i = p as usize;
        (
            TOTALS.count[i].load(Ordering::Relaxed),
            TOTALS.ns[i].load(Ordering::Relaxed),
        )
    };
    let mut out = String::from("rocprof-replay window phases (process totals)\n");
    out.push_str(&format!(
        "{:<16}{:>10}{:>14}{:>12}\n",
        "phase", "calls", "total_ms", "mean_us"
    ));
    let mut inside = 0u64;
    for p in PHASES {
        let (n, ns) = row(p);
        // `Window` holds the others, `Defer` is part of `Drain`, `StoredWords` of
        // `Variables`, `ArenaGrow` of `Arena`, `PassSubmit`, `PassWait` and `PassRecord` of
        // `Pass`.
        if !matches!(
            p,
            Phase::Window
                | Phase::Defer
                | Phase::StoredWords
                | Phase::ArenaGrow
                | Phase::PassSubmit
                | Phase::PassWait
                | Phase::PassRecord
                | Phase::RecordFlush
        ) {
            inside += ns;
        }
        let mean = if n > 0 {
            ns as f64 / n as f64 / 1e3
        } else {
            0.0
        };
        out.push_str(&format!(
            "{:<16}{:>10}{:>14.3}{:>12.1}\n",
            p.label(),
            n,
            ns as f64 / 1e6,
            mean
        ));
    }
    let (windows, total) = row(Phase::Window);
    let other = total.saturating_sub(inside);
    let mean = if windows > 0 {
        other as f64 / windows as f64 / 1e3
    } else {
        0.0
    };
    out.push_str(&format!(
        "{:<16}{:>10}{:>14.3}{:>12.1}\n",
        "other",
        windows,
        other as f64 / 1e6,
        mean
    ));
    out
}

fn register_report() {
    extern "C" fn at_exit() {
        let _ = std::panic::catch_unwind(write_report);
    }
    // SAFETY: registering a plain extern "C" function with no captured state.
    unsafe { libc::atexit(at_exit) };
}

fn write_report() {
    let Some(dest) = destination() else {
        return;
    };
    let text = report();
    if dest == "1" || dest == "stderr" {
        eprint!("{text}");
        return;
    }
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dest)
    {
        Ok(mut f) => {
            let _ = writeln!(f, "pid {}\n{text}", std::process::id());
        }
        Err(e) => eprintln!("rocprof-replay: cannot write ROCPROF_REPLAY_PHASES={dest}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_has_its_own_row() {
        for (i, p) in PHASES.iter().enumerate() {
            assert_eq!(*p as usize, i, "{p:?} indexes another phase's totals");
        }
    }

    #[test]
    fn the_report_adds_each_phase_and_puts_the_rest_of_the_window_in_other() {
        // Process-wide totals: other tests' windows may add to them, so only what this one
        // adds is checked, through the difference it makes.
        let before = report();
        add(Phase::Window, Duration::from_millis(10));
        add(Phase::Capture, Duration::from_millis(3));
        add(Phase::Pass, Duration::from_millis(4));
        // Part of the drain's time, not more of the window's.
        add(Phase::Defer, Duration::from_millis(2));
        let after = report();
        assert_ne!(before, after);
        let field = |text: &str, label: &str, col: usize| -> f64 {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(label))
                .and_then(|l| l.split_whitespace().nth(col))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {label} row in\n{text}"))
        };
        let grew = |label: &str, col: usize| field(&after, label, col) - field(&before, label, col);
        assert_eq!(grew("window", 1), 1.0);
        assert!((grew("capture", 2) - 3.0).abs() < 1e-6);
        assert!((grew("pass", 2) - 4.0).abs() < 1e-6);
        assert!((grew("defer", 2) - 2.0).abs() < 1e-6);
        // Other = window - phases: 10 - 3 - 4 ms more (nothing else adds to the totals in
        // tests: ROCPROF_REPLAY_PHASES is not set, so windows do not time themselves).
        let other = grew("other", 2);
        assert!((other - 3.0).abs() < 1e-6, "other grew by {other} ms");
    }
}
