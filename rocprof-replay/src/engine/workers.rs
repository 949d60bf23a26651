//! The threads that run asynchronous replay windows: one lane per agent, windows in the order
//! their dispatches were submitted.
//!
//! A backend that returns the application's submission before the window ran (the HSA
//! backend: the doorbell write returns, the application's queue waits behind a gate) hands the
//! window to [`Workers::spawn`]. One lane per agent keeps the windows of one agent one at a
//! time and in submission order — the order in which their gates were placed on the agent's
//! queues — so a window never waits for a later one. Lanes of different agents run
//! concurrently.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A window to run.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The per-agent lanes of the process.
pub(crate) struct Workers {
    lanes: Mutex<Vec<(u64, mpsc::Sender<Job>)>>,
    /// Jobs handed to a lane and not finished, with a condition for [`Workers::wait_idle`].
    pending: Arc<(Mutex<usize>, Condvar)>,
}

impl Default for Workers {
    fn default() -> Self {
        Workers::new()
    }
}

impl Workers {
    /// No lanes yet: each starts with the first window of its agent.
    pub(crate) fn new() -> Workers {
        Workers {
            lanes: Mutex::new(Vec::new()),
            pending: Arc::new((Mutex::new(0), Condvar::new())),
        }
    }

    /// Runs `job` on the lane of agent `key` (named `name` in thread lists), after the jobs
    /// already handed to it. `Err` gives the job back when no thread could be started for the
    /// lane: the caller then runs it itself.
    pub(crate) fn spawn(&self, key: u64, name: &str, job: Job) -> Result<(), Job> {
        let mut lanes = self.lanes.lock();
        *self.pending.0.lock() += 1;
        let job = match lanes.iter().find(|(k, _)| *k == key) {
            Some((_, tx)) => match tx.send(job) {
                Ok(()) => return Ok(()),
                // The lane's thread is gone (it cannot be: it never exits while the sender
                // lives); a new one takes over.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        lanes.retain(|(k, _)| *k != key);
        let (tx, rx) = mpsc::channel::<Job>();
        let pending = Arc::clone(&self.pending);
        let started = std::thread::Builder::new()
            .name(format!("rocprof-replay {name}"))
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    // A job handles its own failures; a panic here must not end the lane.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    let (count, idle) = &*pending;
                    let mut n = count.lock();
                    *n -= 1;
                    if *n == 0 {
                        idle.notify_all();
                    }
                }
            });
        if let Err(error) = started {
            *self.pending.0.lock() -= 1;
            tracing::warn!(
                "no thread for asynchronous replay windows ({error}): the window runs on the submitting thread"
            );
            return Err(job);
        }
        match tx.send(job) {
            Ok(()) => {
                lanes.push((key, tx));
                Ok(())
            }
            Err(mpsc::SendError(job)) => {
                *self.pending.0.lock() -= 1;
                Err(job)
            }
        }
    }

    /// Waits until every window handed to a lane has finished, or `deadline` passes; `true`
    /// when none is left.
    pub(crate) fn wait_idle(&self, deadline: Duration) -> bool {
        let end = Instant::now() + deadline;
        let (count, idle) = &*self.pending;
        let mut n = count.lock();
        while *n > 0 {
            if idle.wait_until(&mut n, end).timed_out() {
                return *n == 0;
            }
        }
        true
    }

    /// Windows handed to a lane and not finished.
    pub(crate) fn pending(&self) -> usize {
        *self.pending.0.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn one_lane_runs_its_jobs_in_order_and_lanes_run_side_by_side() {
        let workers = Workers::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        // Lane 1's first job waits until lane 2 has run: lanes do not wait for each other.
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        {
            let (log, gate) = (Arc::clone(&log), Arc::clone(&gate));
            workers
                .spawn(
                    1,
                    "gpu1",
                    Box::new(move || {
                        let mut open = gate.0.lock();
                        let end = Instant::now() + Duration::from_secs(10);
                        while !*open {
                            if gate.1.wait_until(&mut open, end).timed_out() {
                                break;
                            }
                        }
                        log.lock().push(("a", *open));
                    }),
                )
                .unwrap_or_else(|_| panic!("no thread"));
        }
        for name in ["b", "c"] {
            let log = Arc::clone(&log);
            workers
                .spawn(1, "gpu1", Box::new(move || log.lock().push((name, true))))
                .unwrap_or_else(|_| panic!("no thread"));
        }
        {
            let (log, gate) = (Arc::clone(&log), Arc::clone(&gate));
            workers
                .spawn(
                    2,
                    "gpu2",
                    Box::new(move || {
                        log.lock().push(("x", true));
                        *gate.0.lock() = true;
                        gate.1.notify_all();
                    }),
                )
                .unwrap_or_else(|_| panic!("no thread"));
        }
        assert!(workers.wait_idle(Duration::from_secs(20)));
        assert_eq!(workers.pending(), 0);
        let log = log.lock().clone();
        assert_eq!(
            log,
            vec![("x", true), ("a", true), ("b", true), ("c", true)]
        );
    }

    #[test]
    fn a_panicking_job_leaves_the_lane_running_and_wait_idle_is_bounded() {
        let workers = Workers::new();
        let ran = Arc::new(AtomicU32::new(0));
        workers
            .spawn(7, "gpu7", Box::new(|| panic!("a window's own bug")))
            .unwrap_or_else(|_| panic!("no thread"));
        let r = Arc::clone(&ran);
        workers
            .spawn(
                7,
                "gpu7",
                Box::new(move || {
                    r.fetch_add(1, Ordering::SeqCst);
                }),
            )
            .unwrap_or_else(|_| panic!("no thread"));
        assert!(workers.wait_idle(Duration::from_secs(20)));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        workers
            .spawn(
                7,
                "gpu7",
                Box::new(|| std::thread::sleep(Duration::from_millis(500))),
            )
            .unwrap_or_else(|_| panic!("no thread"));
        assert!(!workers.wait_idle(Duration::from_millis(10)));
        assert!(workers.wait_idle(Duration::from_secs(20)));
    }
}
