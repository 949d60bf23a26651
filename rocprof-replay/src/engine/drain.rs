//! A drain's bounded wait, for both backends: before its snapshot a window waits for the work
//! submitted ahead of its dispatch, at most the drain deadline (`ROCPROF_REPLAY_DRAIN_TIMEOUT_MS`),
//! and gives way once the yield deadline (`ROCPROF_REPLAY_YIELD_MS`) has passed while the work
//! it waits for may itself be waiting for what the window holds (its dispatch behind a gate, or
//! work held up by the agent lock). A wait that did not end makes the dispatch run once, with
//! the reason this module gives.
//!
//! Each backend supplies only how to wait on its runtime: the HSA backend a blocking wait for
//! a slice ([`DrainLimits::wait`]), the CUDA backend its event queries (spinning, yielding,
//! then sleeping), asking [`DrainLimits::give_way`] between them.

use std::time::{Duration, Instant};

use crate::policy::DeclineReason;

/// How a drain's wait ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DrainWait {
    /// The work is done.
    Done,
    /// Past the yield deadline, with the waited-for work possibly waiting for what the window
    /// holds.
    GaveWay,
    /// Past the drain deadline.
    TimedOut,
}

impl DrainWait {
    /// `Ok` for a wait that ended with the work done; otherwise the dispatch's decline:
    /// `lock_contention` for a wait that gave way (logged, naming `what` it waited for),
    /// `drain_timeout` for one that ran out of time.
    pub(crate) fn declined(self, what: &str) -> Result<(), DeclineReason> {
        match self {
            DrainWait::Done => Ok(()),
            DrainWait::GaveWay => {
                tracing::info!(
                    waited_for = what,
                    "the drain gave way: the work it waits for may be waiting for this \
                     dispatch (held behind its gate), and the yield deadline passed: the \
                     dispatch runs once (ROCPROF_REPLAY_YIELD_MS)"
                );
                Err(DeclineReason::LockContention)
            }
            DrainWait::TimedOut => Err(DeclineReason::DrainTimeout),
        }
    }
}

/// The deadlines of one drain, from its start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DrainLimits {
    /// When the drain began.
    pub(crate) started: Instant,
    /// The drain deadline, from `started`.
    pub(crate) drain: Duration,
    /// The yield deadline, from `started`.
    pub(crate) yield_after: Duration,
}

impl DrainLimits {
    /// Limits starting now.
    pub(crate) fn new(drain: Duration, yield_after: Duration) -> DrainLimits {
        DrainLimits {
            started: Instant::now(),
            drain,
            yield_after,
        }
    }

    /// When the drain deadline passes.
    pub(crate) fn deadline(&self) -> Instant {
        self.started + self.drain
    }

    /// Whether a wait still running should give way now: past the yield deadline, and
    /// `may_wait_for_us` (asked only then) says the work waited for may be waiting for what
    /// the window holds.
    pub(crate) fn give_way(&self, may_wait_for_us: impl FnOnce() -> bool) -> bool {
        self.started.elapsed() >= self.yield_after && may_wait_for_us()
    }

    /// Waits in slices (`wait_for(slice)`: a bounded wait, `true` once the work is done) until
    /// the work is done ([`DrainWait::Done`]), the drain deadline passed
    /// ([`DrainWait::TimedOut`]), or the wait should give way ([`give_way`](Self::give_way):
    /// [`DrainWait::GaveWay`]).
    pub(crate) fn wait(
        &self,
        mut wait_for: impl FnMut(Duration) -> bool,
        mut may_wait_for_us: impl FnMut() -> bool,
    ) -> DrainWait {
        // Slices short enough to notice the yield deadline soon after it passed.
        let slice =
            (self.yield_after / 4).clamp(Duration::from_millis(1), Duration::from_millis(100));
        loop {
            let left = self.deadline().saturating_duration_since(Instant::now());
            if wait_for(left.min(slice)) {
                return DrainWait::Done;
            }
            if self.started.elapsed() >= self.drain {
                return DrainWait::TimedOut;
            }
            if self.give_way(&mut may_wait_for_us) {
                return DrainWait::GaveWay;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_wait_ends_when_the_work_is_done_and_never_asks_whether_to_give_way_before_the_yield_deadline()
     {
        let limits = DrainLimits::new(1000 * MS, 500 * MS);
        let (slices, asked) = (Cell::new(0), Cell::new(0));
        let waited = limits.wait(
            |slice| {
                assert!(slice <= 100 * MS && slice >= MS, "{slice:?}");
                slices.set(slices.get() + 1);
                slices.get() == 3
            },
            || {
                asked.set(asked.get() + 1);
                true
            },
        );
        assert_eq!(waited, DrainWait::Done);
        assert_eq!(slices.get(), 3);
        assert_eq!(asked.get(), 0, "the yield deadline had not passed");
        assert_eq!(waited.declined("x"), Ok(()));
    }

    #[test]
    fn past_the_yield_deadline_a_wait_gives_way_only_where_the_work_may_wait_for_the_window() {
        // May wait for us: gives way soon after the yield deadline, long before the drain's.
        let limits = DrainLimits::new(10_000 * MS, 20 * MS);
        let waited = limits.wait(
            |slice| {
                std::thread::sleep(slice);
                false
            },
            || true,
        );
        assert_eq!(waited, DrainWait::GaveWay);
        let took = limits.started.elapsed();
        assert!(took >= 20 * MS && took < 5_000 * MS, "{took:?}");
        assert_eq!(
            waited.declined("x"),
            Err(DeclineReason::LockContention),
            "a wait that gave way is contention"
        );
        // Cannot: waits the whole drain deadline.
        let limits = DrainLimits::new(60 * MS, 10 * MS);
        let waited = limits.wait(
            |slice| {
                std::thread::sleep(slice);
                false
            },
            || false,
        );
        assert_eq!(waited, DrainWait::TimedOut);
        assert!(limits.started.elapsed() >= 60 * MS);
        assert_eq!(waited.declined("x"), Err(DeclineReason::DrainTimeout));
    }

    #[test]
    fn give_way_asks_only_past_the_yield_deadline() {
        let limits = DrainLimits::new(1000 * MS, 1000 * MS);
        assert!(!limits.give_way(|| panic!("asked before the yield deadline")));
        let limits = DrainLimits {
            started: Instant::now() - 2 * MS,
            drain: 1000 * MS,
            yield_after: MS,
        };
        assert!(limits.give_way(|| true));
        assert!(!limits.give_way(|| false));
    }
}
