//! The footprint a window captures, and how it knows the rest was not written.
//!
//! A window used to capture every live allocation of the agent, although most kernels touch a
//! few of them: the ones their arguments name. With the *arguments* footprint (the default,
//! `ROCPROF_REPLAY_FOOTPRINT=arguments`) the snapshot holds only
//!
//! - the allocations some 8-byte-aligned word of the dispatch's argument bytes points into
//!   (the kernarg segment on HSA, hidden arguments included; the packed parameters on CUDA,
//!   so pointer arrays passed by value, such as PyTorch's `TensorListMetadata`, count), and
//! - the module-scope variables,
//!
//! and every other allocation of the agent is *watched*: one 64-bit [`fingerprint`] per
//! [`FINGERPRINT_GRANULE`] of it is taken before the first pass and again after it. Pass 1 is
//! the application's own execution, so when a watched granule changed during it (the kernel
//! wrote through a pointer stored in device memory, or a TMA descriptor) replay simply stops
//! after it: the application keeps that one execution (`declined`, `wrote_outside_footprint`)
//! and the kernel is remembered ([`Remembered`]): its later dispatches capture everything. After
//! the last pass the watched memory is fingerprinted once more; a later pass that wrote there
//! (a kernel whose write addresses change from run to run) cannot be undone, and the outcome
//! says so (`failed`, `late_write_outside_footprint`). Correctness never depends on which
//! allocations the arguments name: they only decide what is copied; the fingerprints decide
//! whether replay may go on.
//!
//! A fingerprint is a sum of mixed words (below): two different contents of one granule have
//! equal fingerprints with a probability of about 2^-64. `ROCPROF_REPLAY_FOOTPRINT=all`, a
//! `strict` restore, and a backend that cannot fingerprint capture everything instead.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::engine::inventory::AllocationInventory;
use crate::engine::snapshot::{
    CopyError, DIFF_CHUNK, DeviceMemory, DiffError, Direction, Region, RegionKind, SnapshotPlan,
    Transfer,
};

/// Bytes per fingerprint: one per 64 KiB of watched memory (a 7 GiB footprint needs 0.9 MB of
/// fingerprints).
pub(crate) const FINGERPRINT_GRANULE: usize = 64 << 10;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser: every input bit reaches every output bit.
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The term of word `i` (little-endian, 0-based from the granule's start).
#[inline]
fn term(i: u64, word: u64) -> u64 {
    mix(word ^ (i + 1).wrapping_mul(GOLDEN))
}

/// The fingerprint of one granule's bytes:
/// `len · GOLDEN + Σ mix(wᵢ ⊕ (i + 1) · GOLDEN)` (wrapping), `wᵢ` the `i`-th little-endian
/// 8-byte word, the last one zero-padded. A sum, so a device kernel may add the terms in any
/// order and get the same value (the CUDA backend's `rocprof_replay_fingerprint` kernel, in
/// `kernels/cuda/compare.cu`, computes it so); each word's term depends on its position, so
/// moved bytes change it too.
pub(crate) fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h = (bytes.len() as u64).wrapping_mul(GOLDEN);
    let mut words = bytes.chunks_exact(8);
    let mut i = 0u64;
    for w in words.by_ref() {
        h = h.wrapping_add(term(i, u64::from_le_bytes(w.try_into().expect("8 bytes"))));
        i += 1;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        h = h.wrapping_add(term(i, u64::from_le_bytes(w)));
    }
    h
}

/// Fingerprints per region of `len` bytes in `granule`s.
pub(crate) fn granules(len: usize, granule: usize) -> usize {
    len.div_ceil(granule.max(1))
}

/// The default [`DeviceMemory::fingerprint`]: chunked read-back through
/// [`DeviceMemory::copy`] into one reused scratch buffer, hashed on the host.
pub(crate) fn fingerprint_by_reading<M: DeviceMemory + ?Sized>(
    mem: &mut M,
    regions: &[(usize, usize)],
    granule: usize,
) -> Result<Vec<u64>, DiffError> {
    let granule = granule.max(1);
    let mut out = Vec::with_capacity(regions.iter().map(|r| granules(r.1, granule)).sum());
    let largest = regions.iter().map(|r| r.1).max().unwrap_or(0);
    if largest == 0 {
        return Ok(out);
    }
    let size = ((DIFF_CHUNK / granule).max(1) * granule).min(largest.div_ceil(granule) * granule);
    let scratch = mem.alloc_scratch(size).ok_or(DiffError::Failed)?;
    let base = scratch.addr();
    for &(addr, len) in regions {
        let mut offset = 0;
        while offset < len {
            let n = (len - offset).min(size);
            match mem.copy(
                Direction::Capture,
                &[Transfer {
                    device: addr + offset,
                    staging: base,
                    len: n,
                }],
            ) {
                Ok(()) => {}
                Err(CopyError::Failed) => return Err(DiffError::Failed),
                Err(CopyError::Stuck) => {
                    // A read may still land in the scratch buffer: never reuse it.
                    scratch.leak();
                    return Err(DiffError::Stuck);
                }
            }
            // SAFETY: the copy just filled `n` bytes of the scratch buffer, which nothing else
            // uses.
            let read = unsafe { std::slice::from_raw_parts(base as *const u8, n) };
            out.extend(read.chunks(granule).map(fingerprint));
            offset += n;
        }
    }
    Ok(out)
}

/// Splits a full plan into what the snapshot captures and what is watched: allocations that a
/// word of `args` points into, and module variables, stay in the plan; the other allocations
/// are returned.
pub(crate) fn split(plan: &mut SnapshotPlan, args: &[u8]) -> Vec<Region> {
    let named: Vec<usize> = args
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) as usize)
        .filter(|&a| a != 0)
        .collect();
    let (keep, watched): (Vec<Region>, Vec<Region>) = std::mem::take(&mut plan.regions)
        .into_iter()
        .partition(|r| {
            matches!(r.kind, RegionKind::ModuleVariable)
                || named
                    .iter()
                    .any(|&a| a >= r.base && a < r.base.saturating_add(r.size))
        });
    plan.regions = keep;
    watched
}

/// Fingerprints of the watched regions, taken before the first pass.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    regions: Vec<Region>,
    before: Vec<u64>,
    /// Bytes watched.
    pub(crate) bytes: u64,
    /// Time spent fingerprinting, all checks together.
    pub(crate) time: Duration,
    /// Watched regions left out of a check because they were freed or re-allocated, counted
    /// once per check.
    pub(crate) skipped: u32,
}

impl Watch {
    /// Fingerprints `regions` now, with them pinned (a region freed since planning is left out).
    pub(crate) fn take(
        regions: Vec<Region>,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<Watch, DiffError> {
        let start = Instant::now();
        let pins = inventory.pin(regions.iter());
        let mut live = Vec::with_capacity(regions.len());
        let mut spans = Vec::with_capacity(regions.len());
        for (i, r) in regions.into_iter().enumerate() {
            if pins.is_pinned(i) {
                spans.push((r.base, r.size));
                live.push(r);
            }
        }
        let before = mem.fingerprint(&spans, FINGERPRINT_GRANULE);
        drop(pins);
        let before = before?;
        if before.len()
            != spans
                .iter()
                .map(|s| granules(s.1, FINGERPRINT_GRANULE))
                .sum::<usize>()
        {
            return Err(DiffError::Failed);
        }
        Ok(Watch {
            bytes: live.iter().map(|r| r.size as u64).sum(),
            regions: live,
            before,
            time: start.elapsed(),
            skipped: 0,
        })
    }

    /// Whether some watched granule differs from its fingerprint before the first pass. A
    /// region freed or re-allocated since is not looked at (its owner let it go: nothing of
    /// the application's reads it as this allocation any more).
    pub(crate) fn changed(
        &mut self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<bool, DiffError> {
        let start = Instant::now();
        let pins = inventory.pin(self.regions.iter());
        let mut spans = Vec::with_capacity(self.regions.len());
        let mut expected = Vec::with_capacity(self.before.len());
        let mut at = 0;
        for (i, r) in self.regions.iter().enumerate() {
            let n = granules(r.size, FINGERPRINT_GRANULE);
            if pins.is_pinned(i) {
                spans.push((r.base, r.size));
                expected.extend_from_slice(&self.before[at..at + n]);
            } else {
                self.skipped += 1;
            }
            at += n;
        }
        let now = mem.fingerprint(&spans, FINGERPRINT_GRANULE);
        drop(pins);
        self.time += start.elapsed();
        let now = now?;
        if now.len() != expected.len() {
            return Err(DiffError::Failed);
        }
        Ok(now != expected)
    }
}

/// Kernels whose first pass wrote memory their arguments do not name: their dispatches capture
/// every allocation (per agent and kernel object, for the life of the process).
#[derive(Default)]
pub(crate) struct Remembered {
    kernels: Mutex<HashSet<(u64, u64)>>,
}

impl Remembered {
    /// Whether `kernel` on `agent` wrote outside its arguments' allocations before.
    pub(crate) fn contains(&self, agent: u64, kernel: u64) -> bool {
        self.kernels.lock().contains(&(agent, kernel))
    }

    /// Remembers `kernel` on `agent`.
    pub(crate) fn insert(&self, agent: u64, kernel: u64) {
        self.kernels.lock().insert((agent, kernel));
    }
}

/// The process's [`Remembered`] kernels.
pub(crate) static REMEMBERED: std::sync::LazyLock<Remembered> =
    std::sync::LazyLock::new(Remembered::default);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_changes_with_any_byte_its_position_and_the_length() {
        let mut bytes: Vec<u8> = (0..4099u32).map(|i| (i * 7 + 3) as u8).collect();
        let base = fingerprint(&bytes);
        assert_eq!(base, fingerprint(&bytes.clone()), "deterministic");
        for at in [0, 7, 8, 4095, 4096, 4098] {
            bytes[at] ^= 1;
            assert_ne!(fingerprint(&bytes), base, "byte {at}");
            bytes[at] ^= 1;
        }
        // Two words swapped: same multiset of words, different positions.
        let mut swapped = bytes.clone();
        swapped.copy_within(0..8, 4000);
        swapped[0..8].copy_from_slice(&bytes[4000..4008]);
        assert_ne!(fingerprint(&swapped), base);
        assert_ne!(fingerprint(&[0u8; 8]), fingerprint(&[0u8; 16]), "length");
        assert_ne!(
            fingerprint(&[0u8; 3]),
            fingerprint(&[0u8; 4]),
            "zero-padded tail"
        );
    }

    #[test]
    fn the_sum_does_not_depend_on_the_order_of_its_terms() {
        // What a device kernel relies on: any split of the words gives the same value.
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i ^ (i >> 3)) as u8).collect();
        let mut h = (bytes.len() as u64).wrapping_mul(GOLDEN);
        for (i, w) in bytes.chunks(8).enumerate().rev() {
            let mut word = [0u8; 8];
            word[..w.len()].copy_from_slice(w);
            h = h.wrapping_add(term(i as u64, u64::from_le_bytes(word)));
        }
        assert_eq!(h, fingerprint(&bytes));
    }

    #[test]
    fn split_keeps_what_the_arguments_name_and_module_variables() {
        let region = |base, size| Region {
            base,
            size,
            kind: RegionKind::Allocation { generation: 1 },
        };
        let mut plan = SnapshotPlan {
            regions: vec![
                region(0x1000, 0x100),
                region(0x2000, 0x100),
                region(0x3000, 0x100),
                Region {
                    base: 0x9000,
                    size: 8,
                    kind: RegionKind::ModuleVariable,
                },
            ],
        };
        let args: Vec<u8> = [7u64, 0x20ff, 0, 0x3100]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let watched = split(&mut plan, &args);
        assert_eq!(
            plan.regions.iter().map(|r| r.base).collect::<Vec<_>>(),
            [0x2000, 0x9000],
            "an interior pointer names its allocation; one past the end does not"
        );
        assert_eq!(
            watched.iter().map(|r| r.base).collect::<Vec<_>>(),
            [0x1000, 0x3000]
        );
    }
}
