//! Pointers stored in module variables: memory a kernel reaches that its arguments do not name.
//!
//! The argument scan ([`footprint`](crate::engine::footprint), the backends' gates) finds the
//! memory a dispatch's argument words point into. A kernel also reaches whatever a module
//! variable points to: HIP implements a `__managed__` variable as a device variable holding a
//! pointer to managed memory, and an application may store a pinned buffer's address in a
//! `__device__` pointer. Device memory reached that way is covered by the fingerprints of the
//! arguments footprint (or captured whole); memory the window can neither restore nor
//! fingerprint — host-visible memory, memory another process or context writes — is not. So,
//! when such memory exists ([`ReplayTarget::unrestorable_memory_exists`]), the window reads the
//! 8-byte-aligned words of the module variables (after the drain, before the first pass) and
//! has the backend classify them as it classifies argument words
//! ([`ReplayTarget::stored_pointers`]): host memory it can read is watched across the first
//! pass with the arguments' (replay stops after it when it changed: `host_memory_written`), and
//! anything else declines the dispatch before its first pass.
//!
//! Not covered: pointers stored in device allocations (rather than module variables), which
//! no scan of a bounded size can find; such a kernel's writes to host-visible memory are
//! repeated once per pass (documented in `docs/reliability.md`).

use crate::engine::snapshot::{CopyError, DIFF_CHUNK, Direction, Tier, Transfer};
use crate::engine::window::ReplayTarget;
use crate::policy::DeclineReason;

/// The host-readable memory that pointers stored in the module variables `vars` (address,
/// length) lead to, by the backend's rules for argument words: `Ok` the ranges to watch across
/// the first pass (none when no memory the window cannot restore exists), `Err` why the
/// dispatch must run once. The words are read through the target's own copies, at most
/// [`DIFF_CHUNK`] bytes at a time into one scratch buffer. Where the target's staging is device
/// memory, they are first gathered there (one batch: the CUDA backend's copy kernel, one launch)
/// and read back with one copy — a module's variables are many and small (the GPT-2 step's
/// kernels: 4 to 222 of them, mostly 96 bytes to 3 KiB in all), and one copy of each cost
/// about as much as a copy of all.
pub(crate) fn stored_host_memory(
    target: &mut dyn ReplayTarget,
    vars: &[(usize, usize)],
) -> Result<Vec<(usize, usize)>, DeclineReason> {
    if vars.is_empty() || !target.unrestorable_memory_exists() {
        return Ok(Vec::new());
    }
    // The aligned words of each variable: where a pointer is stored.
    let words: Vec<(usize, usize)> = vars
        .iter()
        .filter_map(|&(addr, len)| {
            let start = addr.checked_next_multiple_of(8)?;
            let end = addr.checked_add(len)? & !7;
            (end > start).then_some((start, end - start))
        })
        .collect();
    let total: usize = words.iter().map(|w| w.1).sum();
    if total == 0 {
        return Ok(Vec::new());
    }
    let size = total.min(DIFF_CHUNK);
    let scratch = target
        .alloc_scratch(size)
        .ok_or(DeclineReason::SnapshotAllocFailed)?;
    let base = scratch.addr();
    // Device staging to gather the words in first (none: they are read one by one).
    let gather = target
        .alloc_staging(size)
        .filter(|g| g.tier() == Tier::Device);
    let mut watch: Vec<(usize, usize)> = Vec::new();
    let mut batch: Vec<Transfer> = Vec::new();
    let mut used = 0usize;
    let mut flush = |target: &mut dyn ReplayTarget,
                     batch: &mut Vec<Transfer>,
                     used: &mut usize|
     -> Result<(), DeclineReason> {
        if batch.is_empty() {
            return Ok(());
        }
        crate::engine::phases::timed(crate::engine::phases::Phase::StoredWords, || {
            let Some(g) = &gather else {
                return target.copy(Direction::Capture, batch);
            };
            let on_device: Vec<Transfer> = batch
                .iter()
                .map(|t| Transfer {
                    staging: g.addr() + (t.staging - base),
                    ..*t
                })
                .collect();
            target.copy(Direction::Capture, &on_device)?;
            let back = Transfer {
                device: g.addr(),
                staging: base,
                len: *used,
            };
            target.copy(Direction::Capture, &[back])
        })
        .map_err(|e| match e {
            CopyError::Failed => DeclineReason::CopyFailed,
            CopyError::Stuck => DeclineReason::CopyTimeout,
        })?;
        // SAFETY: the first `used` bytes of the scratch buffer, which the copy just filled and
        // nothing else uses.
        let read = unsafe { std::slice::from_raw_parts(base as *const u8, *used) };
        for range in target.stored_pointers(read)? {
            if !watch.contains(&range) {
                watch.push(range);
            }
        }
        batch.clear();
        *used = 0;
        Ok(())
    };
    let mut result = Ok(());
    'vars: for &(addr, len) in &words {
        let mut offset = 0;
        while offset < len {
            if used == size {
                result = flush(target, &mut batch, &mut used);
                if result.is_err() {
                    break 'vars;
                }
            }
            let piece = (len - offset).min(size - used);
            batch.push(Transfer {
                device: addr + offset,
                staging: base + used,
                len: piece,
            });
            used += piece;
            offset += piece;
        }
    }
    if result.is_ok() {
        result = flush(target, &mut batch, &mut used);
    }
    match result {
        Ok(()) => Ok(watch),
        Err(DeclineReason::CopyTimeout) => {
            // A read may still land in the scratch buffers: never reuse them.
            scratch.leak();
            if let Some(g) = gather {
                g.leak();
            }
            Err(DeclineReason::CopyTimeout)
        }
        Err(reason) => Err(reason),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::snapshot::{DeviceMemory, host_copy};
    use crate::engine::window::PassError;

    /// A target whose "device memory" is host memory: it records every copy batch and
    /// treats every nonzero word as a pointer to the 8-byte range it names.
    #[derive(Default)]
    struct Fake {
        unrestorable: bool,
        fail: Option<CopyError>,
        /// Staging is "device memory" (host memory posing as it): the words are gathered
        /// there first.
        device_staging: bool,
        bufs: Vec<Vec<u8>>,
        batches: Vec<usize>,
        /// Transfers per batch.
        transfers: Vec<usize>,
        seen: std::cell::RefCell<Vec<u64>>,
    }

    // SAFETY (of the signature): nothing to release: the buffers live in `Fake::bufs`.
    unsafe fn keep(_: std::ptr::NonNull<u8>, _: usize, _: crate::engine::snapshot::Tier) {}

    impl DeviceMemory for Fake {
        fn alloc_staging(&mut self, size: usize) -> Option<crate::engine::snapshot::Staging> {
            if !self.device_staging {
                return crate::engine::snapshot::Staging::heap(size);
            }
            let mut v = vec![0u8; size.max(1)];
            let ptr = std::ptr::NonNull::new(v.as_mut_ptr())?;
            self.bufs.push(v);
            Some(crate::engine::snapshot::Staging::Backend {
                ptr,
                len: size,
                capacity: size,
                tier: crate::engine::snapshot::Tier::Device,
                release: keep,
            })
        }
        fn alloc_scratch(&mut self, size: usize) -> Option<crate::engine::snapshot::Staging> {
            crate::engine::snapshot::Staging::heap(size)
        }
        fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
            assert_eq!(direction, Direction::Capture);
            if let Some(e) = self.fail {
                return Err(e);
            }
            self.batches.push(transfers.iter().map(|t| t.len).sum());
            self.transfers.push(transfers.len());
            // SAFETY: host memory of the test and the engine's scratch.
            unsafe { host_copy(direction, transfers) };
            Ok(())
        }
    }

    impl ReplayTarget for Fake {
        fn begin(&mut self) -> Result<(), DeclineReason> {
            unreachable!()
        }
        fn drain(&mut self) -> Result<(), DeclineReason> {
            unreachable!()
        }
        fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason> {
            unreachable!()
        }
        fn run_pass(&mut self, _: bool) -> Result<Option<Duration>, PassError> {
            unreachable!()
        }
        fn run_once(&mut self) -> bool {
            unreachable!()
        }
        fn complete(&mut self) {}
        fn settle_late_pass(&mut self) -> bool {
            unreachable!()
        }
        fn contended(&self) -> bool {
            false
        }
        fn end(&mut self) {}
        fn unrestorable_memory_exists(&self) -> bool {
            self.unrestorable
        }
        fn stored_pointers(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, DeclineReason> {
            let mut out = Vec::new();
            for w in words.chunks_exact(8) {
                let w = u64::from_ne_bytes(w.try_into().unwrap());
                self.seen.borrow_mut().push(w);
                if w == u64::MAX {
                    return Err(DeclineReason::HostMemory);
                }
                if w != 0 {
                    out.push((w as usize, 8));
                }
            }
            Ok(out)
        }
    }

    #[test]
    fn every_aligned_word_is_read_in_bounded_batches_and_ranges_are_listed_once() {
        // Two variables: one larger than a scratch chunk, one off 8-byte alignment.
        let big = vec![0u64; DIFF_CHUNK / 8 + 3];
        let mut big = big.into_boxed_slice();
        big[0] = 0x1000;
        big[DIFF_CHUNK / 8 + 1] = 0x2000;
        let small = [0x1000u64, 0x3000, 7];
        let small_addr = small.as_ptr() as usize + 4;
        let vars = [(big.as_ptr() as usize, big.len() * 8), (small_addr, 19)];
        let mut t = Fake {
            unrestorable: true,
            ..Fake::default()
        };
        let watch = stored_host_memory(&mut t, &vars).unwrap();
        assert_eq!(watch, vec![(0x1000, 8), (0x2000, 8), (0x3000, 8)]);
        // The small variable's one whole aligned word: bytes 8..16 of `small` (bytes 4..8 and
        // 16..23 are parts of words).
        assert_eq!(t.seen.borrow().len(), big.len() + 1);
        assert!(
            t.batches.iter().all(|&b| b <= DIFF_CHUNK),
            "{:?}",
            t.batches
        );
        assert_eq!(t.batches.iter().sum::<usize>(), big.len() * 8 + 8);
    }

    #[test]
    fn with_staging_on_the_device_the_words_are_gathered_there_then_read_back_with_one_copy() {
        // Three small variables apart from each other, as a module's are.
        let a = [0x1000u64, 0];
        let b = [0u64, 0x2000, 0x1000];
        let c = [0x3000u64];
        let vars = [
            (a.as_ptr() as usize, 16),
            (b.as_ptr() as usize, 24),
            (c.as_ptr() as usize, 8),
        ];
        let mut t = Fake {
            unrestorable: true,
            device_staging: true,
            ..Fake::default()
        };
        let watch = stored_host_memory(&mut t, &vars).unwrap();
        assert_eq!(watch, vec![(0x1000, 8), (0x2000, 8), (0x3000, 8)]);
        assert_eq!(t.seen.borrow().len(), 6, "every word of the three, once");
        assert_eq!(
            t.transfers,
            vec![3, 1],
            "one batch gathering the three on the device, one copy back"
        );
        // Without device staging: the three are read straight into the scratch buffer.
        let mut t = Fake {
            unrestorable: true,
            ..Fake::default()
        };
        assert_eq!(stored_host_memory(&mut t, &vars).unwrap(), watch);
        assert_eq!(t.transfers, vec![3]);
    }

    #[test]
    fn nothing_is_read_without_memory_the_window_cannot_restore() {
        let words = [0x1000u64];
        let mut t = Fake::default();
        let vars = [(words.as_ptr() as usize, 8)];
        assert_eq!(stored_host_memory(&mut t, &vars), Ok(Vec::new()));
        assert!(t.batches.is_empty());
    }

    #[test]
    fn a_word_the_backend_refuses_and_failed_reads_decline() {
        let words = [0u64, u64::MAX];
        let vars = [(words.as_ptr() as usize, 16)];
        let mut t = Fake {
            unrestorable: true,
            ..Fake::default()
        };
        assert_eq!(
            stored_host_memory(&mut t, &vars),
            Err(DeclineReason::HostMemory)
        );
        for (fail, reason) in [
            (CopyError::Failed, DeclineReason::CopyFailed),
            (CopyError::Stuck, DeclineReason::CopyTimeout),
        ] {
            let mut t = Fake {
                unrestorable: true,
                fail: Some(fail),
                ..Fake::default()
            };
            assert_eq!(stored_host_memory(&mut t, &vars), Err(reason));
        }
    }
}
