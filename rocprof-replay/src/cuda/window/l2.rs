//! The L2 flush before a counter pass: Nsight Compute starts every profiled launch from
//! flushed caches by default (`--cache-control all`), and CUPTI's range profiler, in user
//! replay, does not (its cache control, where the CUPTI has one, showed no effect on the
//! H200). A counter pass
//! that follows a restore would otherwise find the kernel's inputs in L2, and count none of
//! their DRAM reads. So before each counter pass the window reads a scratch of twice the L2
//! with the compare kernel of the compare module (the scratch against itself; its plain loads
//! take L2 lines as the kernels' own do, where the fingerprint kernel's streaming loads would
//! be evicted first): the L2 then holds scratch lines, clean ones (a read leaves nothing to
//! write back during the pass), and none of the kernel's data.
//! The read completes before the pass's range opens (the range profiler's `PushRange` waits
//! for the context to go idle).
//!
//! The scratch is carved from the snapshot arena once per window, and only used where it is
//! device memory: the arena is released, and application allocations retried, only between
//! windows, so the scratch can never be freed while a flush reads it (a read still running at
//! its deadline gives the scratch up for good). Where the arena has no device memory to
//! give, the window's counter passes run with warm caches, said once.

use std::sync::Once;

use crate::engine::snapshot::{Staging, Tier};

/// Where the flush gets its scratch and how it reads it (the window's target).
pub(crate) trait FlushMemory {
    /// Device memory of `bytes` for the scratch, or `None`.
    fn carve(&mut self, bytes: usize) -> Option<Staging>;
    /// Reads `len` bytes at `addr` on the device, returning once the read completed.
    fn read(&mut self, addr: usize, len: usize) -> Result<(), ReadFailure>;
}

/// Why a flush's read did not complete.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// The device cannot run the read (no compare kernel): nothing was submitted, and no
    /// later pass of the window can do better.
    Unsupported,
    /// Nothing is in flight; a later pass may try again.
    Failed,
    /// The read may still run (past its deadline).
    InFlight,
}

/// The L2 flush of one window's counter passes.
#[derive(Debug)]
pub(crate) enum L2Flush {
    /// Not wanted (`ROCPROF_REPLAY_CUPTI_CACHE=none`, or no counters).
    Off,
    /// Wanted, over a scratch of this many bytes, not carved yet.
    Wanted(usize),
    /// The scratch, carved.
    Ready(Staging),
    /// No device memory could be had for the scratch: passes run with warm caches.
    Unavailable,
}

/// The scratch for an L2 of `l2` bytes: twice its size (the L2's replacement is not strictly
/// least-recently-used: one read of exactly its size could leave some of the kernel's lines).
pub(crate) fn scratch_bytes(l2: usize) -> usize {
    l2.saturating_mul(2)
}

impl L2Flush {
    /// The flush wanted for an L2 of `l2` bytes (`None`: unknown; 0: none).
    pub(crate) fn wanted(flush: bool, l2: Option<usize>) -> L2Flush {
        match l2 {
            Some(l2) if flush && l2 > 0 => L2Flush::Wanted(scratch_bytes(l2)),
            _ => L2Flush::Off,
        }
    }

    /// Before a counter pass: carves the scratch on first use, then reads it all. Returns
    /// whether the L2 was flushed.
    pub(crate) fn before_counter_pass(&mut self, mem: &mut dyn FlushMemory) -> bool {
        if let L2Flush::Wanted(bytes) = *self {
            *self = match mem.carve(bytes) {
                Some(s) if s.tier() == Tier::Device => L2Flush::Ready(s),
                _ => {
                    static SAID: Once = Once::new();
                    SAID.call_once(|| {
                        tracing::warn!(
                            bytes,
                            "no device memory for the L2 flush before counter passes: their \
                             caches start warm (L2 and DRAM counts of kernels whose data fits \
                             in L2 come out lower than Nsight Compute's)"
                        )
                    });
                    L2Flush::Unavailable
                }
            };
        }
        let L2Flush::Ready(s) = self else {
            return false;
        };
        match mem.read(s.addr(), s.len()) {
            Ok(()) => true,
            Err(failure) => {
                tracing::debug!(?failure, "the L2 flush before a counter pass failed");
                match failure {
                    ReadFailure::Failed => {}
                    // Given back: nothing reads it.
                    ReadFailure::Unsupported => *self = L2Flush::Unavailable,
                    // The read may still run: the scratch is never given back.
                    ReadFailure::InFlight => {
                        if let L2Flush::Ready(s) = std::mem::replace(self, L2Flush::Unavailable) {
                            s.leak();
                        }
                    }
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::NonNull;

    unsafe fn release(ptr: NonNull<u8>, capacity: usize, _: Tier) {
        // SAFETY: a leaked boxed slice of `capacity` bytes (`staging`).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), capacity)) });
    }

    fn staging(len: usize, tier: Tier) -> Staging {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(b).cast::<u8>()).unwrap();
        Staging::Backend {
            ptr,
            len,
            capacity: len,
            tier,
            release,
        }
    }

    /// Carves in `tier` (`None`: nothing), reads succeed unless `fail` says how they fail;
    /// counts both.
    struct Fake {
        tier: Option<Tier>,
        fail: Option<fn() -> ReadFailure>,
        carves: u32,
        reads: Vec<usize>,
    }

    impl Fake {
        fn new(tier: Option<Tier>) -> Fake {
            Fake {
                tier,
                fail: None,
                carves: 0,
                reads: Vec::new(),
            }
        }
    }

    impl FlushMemory for Fake {
        fn carve(&mut self, bytes: usize) -> Option<Staging> {
            self.carves += 1;
            self.tier.map(|t| staging(bytes, t))
        }
        fn read(&mut self, addr: usize, len: usize) -> Result<(), ReadFailure> {
            assert_ne!(addr, 0);
            self.reads.push(len);
            self.fail.map_or(Ok(()), |f| Err(f()))
        }
    }

    #[test]
    fn the_scratch_is_carved_once_and_read_whole_before_every_counter_pass() {
        let mut f = L2Flush::wanted(true, Some(1000));
        let mut mem = Fake::new(Some(Tier::Device));
        for _ in 0..3 {
            assert!(f.before_counter_pass(&mut mem));
        }
        assert_eq!(mem.carves, 1, "one scratch per window");
        assert_eq!(mem.reads, vec![2000; 3], "twice the L2, before each pass");
    }

    #[test]
    fn without_device_memory_or_when_not_wanted_nothing_is_read() {
        // The arena gives pinned host memory only: a read over PCIe flushes nothing useful.
        let mut f = L2Flush::wanted(true, Some(1000));
        let mut mem = Fake::new(Some(Tier::PinnedHost));
        assert!(!f.before_counter_pass(&mut mem));
        assert!(matches!(f, L2Flush::Unavailable));
        assert!(!f.before_counter_pass(&mut mem));
        assert_eq!(
            (mem.carves, mem.reads.len()),
            (1, 0),
            "carved once, never read"
        );
        // No memory at all.
        let mut f = L2Flush::wanted(true, Some(1000));
        let mut mem = Fake::new(None);
        assert!(!f.before_counter_pass(&mut mem));
        assert!(mem.reads.is_empty());
        // Not wanted, or the L2's size unknown.
        for mut f in [
            L2Flush::wanted(false, Some(1000)),
            L2Flush::wanted(true, None),
            L2Flush::wanted(true, Some(0)),
        ] {
            let mut mem = Fake::new(Some(Tier::Device));
            assert!(!f.before_counter_pass(&mut mem));
            assert_eq!((mem.carves, mem.reads.len()), (0, 0));
        }
    }

    #[test]
    fn a_read_still_running_gives_the_scratch_up_and_nothing_is_read_again() {
        let mut f = L2Flush::wanted(true, Some(8));
        let mut mem = Fake::new(Some(Tier::Device));
        mem.fail = Some(|| ReadFailure::InFlight);
        assert!(!f.before_counter_pass(&mut mem));
        assert!(
            matches!(f, L2Flush::Unavailable),
            "the scratch may still be read"
        );
        mem.fail = None;
        assert!(!f.before_counter_pass(&mut mem));
        assert_eq!((mem.carves, mem.reads.len()), (1, 1));
    }

    #[test]
    fn a_read_that_failed_with_nothing_in_flight_is_tried_again() {
        let mut f = L2Flush::wanted(true, Some(8));
        let mut mem = Fake::new(Some(Tier::Device));
        mem.fail = Some(|| ReadFailure::Failed);
        assert!(!f.before_counter_pass(&mut mem));
        mem.fail = None;
        assert!(f.before_counter_pass(&mut mem), "the next pass flushes");
        assert_eq!((mem.carves, mem.reads.len()), (1, 2));
        // A device that cannot run the read: the scratch goes back, nothing more is tried.
        mem.fail = Some(|| ReadFailure::Unsupported);
        assert!(!f.before_counter_pass(&mut mem));
        assert!(matches!(f, L2Flush::Unavailable));
        assert!(!f.before_counter_pass(&mut mem));
        assert_eq!(mem.reads.len(), 3);
    }
}
