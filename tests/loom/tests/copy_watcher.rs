//! loom model of the copy watcher's wake protocol (`rocprof-replay/src/hsa/copies.rs`, `watch`
//! and the end of `fenced`).
//!
//! The watcher thread loops: lower the wake signal (store 0), take the tickets whose proxies
//! completed and build its wait list under the tickets lock, then wait until the wake signal is
//! non-zero or a proxy completes. A submitter pushes its ticket under the lock, then raises the
//! wake signal (store 1). The property: a pushed ticket is always seen without relying on the
//! watcher's 200 ms wait slice (the model's wait has no timeout, so a lost wake-up is a
//! deadlock, which loom reports). An HSA signal is modelled as a value behind a mutex whose
//! stores wake every waiter (hsa-emu: a futex; ROCr: an event). The second model reads the
//! list before lowering the flag and must be caught.
#![cfg(loom)]

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

/// An HSA signal: stores wake every waiter.
struct Signal {
    value: Mutex<i64>,
    changed: Condvar,
}

impl Signal {
    fn new(v: i64) -> Signal {
        Signal {
            value: Mutex::new(v),
            changed: Condvar::new(),
        }
    }
    fn store(&self, v: i64) {
        *self.value.lock().unwrap() = v;
        self.changed.notify_all();
    }
    /// The watcher's `hsa_amd_signal_wait_any` with no proxy listed yet: returns once the
    /// wake signal is non-zero (no timeout in the model).
    fn wait_nonzero(&self) {
        let mut v = self.value.lock().unwrap();
        while *v == 0 {
            v = self.changed.wait(v).unwrap();
        }
    }
}

struct Watcher {
    tickets: Mutex<Vec<u32>>,
    wake: Signal,
}

/// Runs one submitter against the watcher; `lower_first` is the real order.
fn model(lower_first: bool) {
    loom::model(move || {
        let w = Arc::new(Watcher {
            tickets: Mutex::new(Vec::new()),
            wake: Signal::new(0),
        });
        // The copy behind the ticket is done at once: only the ticket's visibility matters.
        let watcher = {
            let w = w.clone();
            thread::spawn(move || {
                let mut retired = 0;
                loop {
                    let take = |w: &Watcher| std::mem::take(&mut *w.tickets.lock().unwrap());
                    let got = if lower_first {
                        w.wake.store(0);
                        take(&w)
                    } else {
                        let got = take(&w);
                        w.wake.store(0);
                        got
                    };
                    retired += got.len();
                    if retired == 1 {
                        return retired;
                    }
                    // No ticket listed yet: wait for the wake signal only.
                    w.wake.wait_nonzero();
                }
            })
        };
        // The submitter (end of `fenced`): push the ticket, then raise the wake signal.
        w.tickets.lock().unwrap().push(1);
        w.wake.store(1);
        assert_eq!(watcher.join().unwrap(), 1, "the ticket was retired");
    });
}

#[test]
fn the_watcher_never_misses_a_ticket() {
    model(true);
}

/// The other order must be caught: loom reports the lost wake-up as a deadlock (and then
/// aborts the process while unwinding), so the model runs in a child process.
#[test]
fn reading_the_list_before_lowering_the_flag_loses_wakeups() {
    if std::env::var_os("LOOM_MODEL_WRONG_ORDER").is_some() {
        model(false);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "reading_the_list_before_lowering_the_flag_loses_wakeups",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("LOOM_MODEL_WRONG_ORDER", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "loom found no lost wake-up:\n{stderr}"
    );
    assert!(stderr.contains("deadlock"), "{stderr}");
}
