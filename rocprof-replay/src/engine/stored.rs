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

use crate::engine::snapshot::{CopyError, DIFF_CHUNK, Direction, Transfer};
use crate::engine::window::ReplayTarget;
use crate::policy::DeclineReason;

/// The host-readable memory that pointers stored in the module variables `vars` (address,
/// length) lead to, by the backend's rules for argument words: `Ok` the ranges to watch across
/// the first pass (none when no memory the window cannot restore exists), `Err` why the
/// dispatch must run once. The words are read through the target's own copies, at most
/// [`DIFF_CHUNK`] bytes at a time into one scratch buffer.
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
        target
            .copy(Direction::Capture, batch)
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
            // A read may still land in the scratch buffer: never reuse it.
            scratch.leak();
            Err(DeclineReason::CopyTimeout)
        }
        Err(reason) => Err(reason),
    }
}
