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
//! and the kernel is remembered ([`REMEMBERED`]): its later dispatches capture everything —
//! unless what it wrote adjoins an allocation its arguments name, through allocations that
//! touch (a tensor spanning chunks of a segment mapped chunk by chunk): then it learns a
//! [`Reach`] and its later dispatches capture that far past the named addresses. A
//! later pass that wrote there (a kernel whose write addresses change from run to run) cannot
//! be undone: with `verified` the watched memory is fingerprinted once more after the last
//! pass and the outcome says so (`failed`, `late_write_outside_footprint`); by default the
//! GPU's next window finds it when it compares with the fingerprints this one carried. With
//! `sampled`, a kernel with [`SAMPLED_TRUST_AFTER`](crate::SAMPLED_TRUST_AFTER) clean checks
//! is checked on one dispatch in [`SAMPLED_EVERY`](crate::SAMPLED_EVERY) only ([`Sampling`]).
//! Correctness never depends on which allocations the arguments name: they only decide what
//! is copied; the fingerprints decide whether replay may go on.
//!
//! A fingerprint is a sum of mixed words (below): two different contents of one granule have
//! equal fingerprints with a probability of about 2^-64. `ROCPROF_REPLAY_FOOTPRINT=all`, a
//! `strict` restore, and a backend that cannot fingerprint capture everything instead.
//!
//! # Carried fingerprints
//! The fingerprints of a window's latest clean check (after its first pass, or with
//! `verified` after its last: the later passes start from the same memory, so by default the
//! first pass's are taken to stand) describe the watched allocations as the next window of the
//! GPU finds them — unless something wrote them in between. So a window
//! that ends normally leaves them behind ([`Watch::commit`]), tagged with the agent's *write
//! epoch* ([`epoch`]) at the window's decision; the next window takes (removes) its agent's
//! carried fingerprints once it holds the agent, and uses those whose allocation (base,
//! generation, size) is unchanged if the epoch still has that value when it fingerprints.
//! Work that may write device memory outside a window — a dispatch run once, a copy, a fill,
//! a stream write — bumps the epoch before and after it is submitted ([`note_device_write`]);
//! a copy or fill whose destination the backend decoded (CUDA: `cuMemcpy*`, `cuMemset*`,
//! `cuStreamWriteValue*` into linear memory) logs its range instead ([`note_range_write`]),
//! which makes only the allocations it overlaps read again, and a copy into host memory
//! neither.
//! Work submitted before a window's decision runs before its fingerprints (it precedes the
//! dispatch on its queue, or the window drains it); work submitted after it may run after the
//! window (behind it on its queue, behind its isolation gate, or a copy waiting for it), and
//! its bumps come after the decision. A window that does not leave its own fingerprints leaves
//! none. A stale carried fingerprint — memory written without the engine being told —
//! makes the first pass look as if it wrote those granules: replay stops after it
//! (`footprint_unchecked`); it never hides a write, as the after-pass fingerprints are always
//! read fresh. The kernel is not remembered then (the write may be someone else's) but
//! [suspected](SUSPECTED): its next dispatch reads every "before" fingerprint fresh, so a
//! kernel that does write outside its arguments is remembered there (`wrote_outside_footprint`)
//! instead of stopping at every dispatch that finds carried fingerprints, and an innocent one
//! replays and is cleared. Memory the host writes without an API call
//! (CUDA managed memory) is never in the inventory, so never watched: no carried fingerprint
//! describes it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The nonzero 8-byte-aligned words of `args`, sorted: the addresses the arguments may name.
pub(crate) fn named(args: &[u8]) -> Vec<usize> {
    let mut named: Vec<usize> = args
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) as usize)
        .filter(|&a| a != 0)
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}

/// Splits a full plan into what the snapshot captures and what is watched: allocations that an
/// address of `named` ([`named`]) points into, the allocations contiguous with such a one up
/// to `reach` bytes past the address (the kernel's [`Reach`]), and module variables, stay in
/// the plan; the other allocations are returned.
pub(crate) fn split(plan: &mut SnapshotPlan, named: &[usize], reach: usize) -> Vec<Region> {
    // Whether some named address lies in [base, base + size): the first one at or above base.
    let names = |r: &Region| {
        let i = named.partition_point(|&a| a < r.base);
        named
            .get(i)
            .is_some_and(|&a| a < r.base.saturating_add(r.size))
    };
    let regions = std::mem::take(&mut plan.regions);
    let mut keep: Vec<bool> = regions
        .iter()
        .map(|r| matches!(r.kind, RegionKind::ModuleVariable) || names(r))
        .collect();
    if reach > 0 {
        // Walk the allocations above each named one while they touch (no gap between them)
        // and start below the address plus the reach.
        let mut order: Vec<usize> = (0..regions.len()).collect();
        order.sort_unstable_by_key(|&i| regions[i].base);
        for (at, &i) in order.iter().enumerate() {
            let r = &regions[i];
            let lo = named.partition_point(|&a| a < r.base);
            let hi = named.partition_point(|&a| a < r.base.saturating_add(r.size));
            let Some(&top) = named[lo..hi].last() else {
                continue;
            };
            let limit = top.saturating_add(reach);
            let mut end = r.base.saturating_add(r.size);
            for &j in &order[at + 1..] {
                let next = &regions[j];
                if next.base != end || next.base >= limit {
                    break;
                }
                keep[j] = true;
                end = next.base.saturating_add(next.size);
            }
        }
    }
    let mut watched = Vec::new();
    for (r, keep) in regions.into_iter().zip(keep) {
        if keep {
            plan.regions.push(r);
        } else {
            watched.push(r);
        }
    }
    watched
}

/// How far past an address its arguments name each kernel was seen to write, through
/// allocations contiguous with the one holding the address: a tensor that spans chunks the
/// virtual-memory API mapped one by one (PyTorch's expandable segments map 2 or 20 MiB at a
/// time, and each mapping is an allocation here). A first pass that wrote such a chunk stands
/// (`wrote_outside_footprint`), and the kernel's later dispatches capture that far instead of
/// every allocation. A write that no named address reaches this way (a pointer stored in
/// device memory), or a kernel whose reach grew more than [`REACH_GROWTHS`] times, is
/// [remembered](REMEMBERED) instead.
#[derive(Default)]
pub(crate) struct Reach {
    kernels: Mutex<HashMap<(u64, u64), (usize, u32)>>,
}

/// Times a kernel's [`Reach`] may grow before it is remembered.
pub(crate) const REACH_GROWTHS: u32 = 4;

impl Reach {
    /// The reach of `kernel` on `agent` (0: none learned).
    pub(crate) fn get(&self, agent: u64, kernel: u64) -> usize {
        self.kernels
            .lock()
            .get(&(agent, kernel))
            .map_or(0, |&(reach, _)| reach)
    }

    /// The first pass of `kernel` on `agent` wrote the allocations `written` (base, size),
    /// outside its snapshot; `named` are its arguments' addresses ([`named`]), `regions` every
    /// region of the window's plan. Grows the kernel's reach to cover the writes and says
    /// `true` when each lies in the run of touching allocations above one holding a named
    /// address; `false` (remember the kernel) otherwise.
    pub(crate) fn learn(
        &self,
        agent: u64,
        kernel: u64,
        named: &[usize],
        regions: &[(usize, usize)],
        written: &[(usize, usize)],
    ) -> bool {
        let mut sorted = regions.to_vec();
        sorted.sort_unstable();
        let mut need = 0usize;
        for &(base, size) in written {
            let Ok(mut i) = sorted.binary_search_by_key(&base, |r| r.0) else {
                return false;
            };
            let mut from = None;
            while i > 0 {
                let (pb, ps) = sorted[i - 1];
                if pb.saturating_add(ps) != sorted[i].0 {
                    break;
                }
                i -= 1;
                let hi = named.partition_point(|&a| a < pb.saturating_add(ps));
                if let Some(&a) = named[..hi].last().filter(|&&a| a >= pb) {
                    from = Some(a);
                    break;
                }
            }
            let Some(from) = from else { return false };
            need = need.max(base.saturating_add(size) - from);
        }
        let mut map = self.kernels.lock();
        let entry = map.entry((agent, kernel)).or_default();
        entry.1 += 1;
        if entry.1 > REACH_GROWTHS {
            return false;
        }
        entry.0 = entry.0.max(need);
        true
    }
}

/// The process's learned [`Reach`] of each kernel.
pub(crate) static REACH: std::sync::LazyLock<Reach> = std::sync::LazyLock::new(Reach::default);

/// Some fingerprints of one check, shared (not copied) by the window that took them and the
/// carried fingerprints it leaves: `range` of `all`.
#[derive(Clone, Debug)]
struct Prints {
    all: Arc<Vec<u64>>,
    range: Range<usize>,
}

impl Prints {
    fn get(&self) -> &[u64] {
        &self.all[self.range.clone()]
    }
}

/// Fingerprints of the watched regions, taken before the first pass.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    regions: Vec<Region>,
    /// Per region, its fingerprints before the first pass: carried from the previous window,
    /// or read by this one.
    before: Vec<Prints>,
    /// The fingerprints of the latest check, when it covered every region and found nothing
    /// changed.
    last: Option<Arc<Vec<u64>>>,
    /// The agent and its write epoch at the window's decision ([`Watch::commit`]).
    agent: u64,
    epoch: Tag,
    /// Bytes whose "before" fingerprints were carried over from the previous window.
    pub(crate) carried_bytes: u64,
    /// Per region: its "before" fingerprints were carried.
    carried: Vec<bool>,
    /// Bytes watched.
    pub(crate) bytes: u64,
    /// Time spent fingerprinting, all checks together.
    pub(crate) time: Duration,
    /// Watched regions left out of a check because they were freed or re-allocated, counted
    /// once per check.
    pub(crate) skipped: u32,
    /// The regions (base, size) the latest check found changed whose "before" fingerprints
    /// were read in this window.
    pub(crate) written: Vec<(usize, usize)>,
}

impl Watch {
    /// Fingerprints `regions` now, with them pinned (a region freed since planning is left
    /// out), taking what `carried` holds for an unchanged allocation instead of reading it
    /// again (`carried`: what [`take_carried`] returned for this window; `tag`: the agent's
    /// write epoch at the window's decision).
    pub(crate) fn take(
        regions: Vec<Region>,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        agent: u64,
        tag: Tag,
        carried: &Carried,
    ) -> Result<Watch, DiffError> {
        let start = Instant::now();
        // Carried fingerprints count when nothing that writes the agent's memory was submitted
        // since the previous window's decision (`Print::epoch`).
        let epoch = self::epoch(agent);
        let pins = inventory.pin(regions.iter());
        let ranges = RANGES.lock();
        let mut live = Vec::with_capacity(regions.len());
        let mut spans = Vec::with_capacity(regions.len());
        // Per live region: carried fingerprints, or `None` (read now).
        let mut reuse: Vec<Option<Prints>> = Vec::with_capacity(regions.len());
        for (i, r) in regions.into_iter().enumerate() {
            if !pins.is_pinned(i) {
                continue;
            }
            let hit = carried.get(&r, epoch, &ranges);
            if hit.is_none() {
                spans.push((r.base, r.size));
            }
            reuse.push(hit);
            live.push(r);
        }
        drop(ranges);
        let read = mem.fingerprint(&spans, FINGERPRINT_GRANULE);
        drop(pins);
        let read = read?;
        if read.len()
            != spans
                .iter()
                .map(|s| granules(s.1, FINGERPRINT_GRANULE))
                .sum::<usize>()
        {
            return Err(DiffError::Failed);
        }
        let carried: Vec<bool> = reuse.iter().map(Option::is_some).collect();
        let read = Arc::new(read);
        let mut before = Vec::with_capacity(live.len());
        let mut at = 0;
        let mut carried_bytes = 0;
        for (r, hit) in live.iter().zip(reuse) {
            match hit {
                Some(prints) => {
                    before.push(prints);
                    carried_bytes += r.size as u64;
                }
                None => {
                    let n = granules(r.size, FINGERPRINT_GRANULE);
                    before.push(Prints {
                        all: read.clone(),
                        range: at..at + n,
                    });
                    at += n;
                }
            }
        }
        Ok(Watch {
            bytes: live.iter().map(|r| r.size as u64).sum(),
            regions: live,
            before,
            last: None,
            agent,
            epoch: tag,
            carried_bytes,
            carried,
            time: start.elapsed(),
            skipped: 0,
            written: Vec::new(),
        })
    }

    /// The watched regions (base, size).
    pub(crate) fn regions(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.regions.iter().map(|r| (r.base, r.size))
    }

    /// Whether the latest check covered every watched region and found nothing changed.
    pub(crate) fn clean(&self) -> bool {
        self.last.is_some()
    }

    /// After a window that ended normally, with the latest check finding nothing changed:
    /// leaves the watched allocations' fingerprints for the next window of the agent
    /// ([carried fingerprints](self#carried-fingerprints)).
    pub(crate) fn commit(&self) {
        let Some(last) = &self.last else { return };
        let mut map = CARRIED.lock();
        let mut at = 0;
        for r in &self.regions {
            let n = granules(r.size, FINGERPRINT_GRANULE);
            if let RegionKind::Allocation { generation } = r.kind {
                map.insert(
                    (self.agent, r.base),
                    Print {
                        generation,
                        size: r.size,
                        epoch: self.epoch,
                        prints: Prints {
                            all: last.clone(),
                            range: at..at + n,
                        },
                    },
                );
            }
            at += n;
        }
    }

    /// A later dispatch of the window's run names the allocations at `bases`: those watched
    /// are fingerprinted now, compared with their fingerprints from before the run's first
    /// pass, and, unchanged, leave the watch (the dispatch's capture takes them over).
    /// `Ok(false)`: some changed since — an earlier member of the run wrote memory its
    /// arguments do not name — and they stay watched, so the check after the run's first
    /// passes finds the write too. A region that is not watched is not looked at.
    pub(crate) fn claim(
        &mut self,
        bases: &[usize],
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<bool, DiffError> {
        let start = Instant::now();
        let claimed: Vec<usize> = (0..self.regions.len())
            .filter(|&i| bases.contains(&self.regions[i].base))
            .collect();
        if claimed.is_empty() {
            return Ok(true);
        }
        let pins = inventory.pin(claimed.iter().map(|&i| &self.regions[i]));
        // A region freed since is left watched: the check after the first passes skips it.
        let live: Vec<usize> = claimed
            .iter()
            .enumerate()
            .filter(|(k, _)| pins.is_pinned(*k))
            .map(|(_, &i)| i)
            .collect();
        let spans: Vec<(usize, usize)> = live
            .iter()
            .map(|&i| (self.regions[i].base, self.regions[i].size))
            .collect();
        let now = mem.fingerprint(&spans, FINGERPRINT_GRANULE);
        drop(pins);
        self.time += start.elapsed();
        let now = now?;
        let expected: usize = live.iter().map(|&i| self.before[i].range.len()).sum();
        if now.len() != expected {
            return Err(DiffError::Failed);
        }
        let mut from = 0;
        for &i in &live {
            let before = self.before[i].get();
            if now[from..from + before.len()] != *before {
                return Ok(false);
            }
            from += before.len();
        }
        // Unchanged: the claimed regions leave the watch (from the back, indices stay valid).
        for &i in live.iter().rev() {
            let r = self.regions.remove(i);
            self.before.remove(i);
            if self.carried.remove(i) {
                self.carried_bytes = self.carried_bytes.saturating_sub(r.size as u64);
            }
            self.bytes = self.bytes.saturating_sub(r.size as u64);
        }
        self.last = None;
        Ok(true)
    }

    /// Whether some watched granule differs from its fingerprint before the first pass. A
    /// region freed or re-allocated since is not looked at (its owner let it go: nothing of
    /// the application's reads it as this allocation any more).
    pub(crate) fn changed(
        &mut self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<Verdict, DiffError> {
        let start = Instant::now();
        let pins = inventory.pin(self.regions.iter());
        let mut spans = Vec::with_capacity(self.regions.len());
        // The live regions, by index.
        let mut checked = Vec::with_capacity(self.regions.len());
        let mut all = true;
        for (i, r) in self.regions.iter().enumerate() {
            if pins.is_pinned(i) {
                spans.push((r.base, r.size));
                checked.push(i);
            } else {
                self.skipped += 1;
                all = false;
            }
        }
        let now = mem.fingerprint(&spans, FINGERPRINT_GRANULE);
        drop(pins);
        self.time += start.elapsed();
        self.last = None;
        let now = now?;
        if now.len()
            != checked
                .iter()
                .map(|&i| self.before[i].range.len())
                .sum::<usize>()
        {
            return Err(DiffError::Failed);
        }
        let (mut fresh, mut carried) = (false, false);
        self.written.clear();
        let mut from = 0;
        for i in checked {
            let before = self.before[i].get();
            let n = before.len();
            if now[from..from + n] != *before {
                if self.carried[i] {
                    carried = true;
                } else {
                    fresh = true;
                    self.written
                        .push((self.regions[i].base, self.regions[i].size));
                }
            }
            from += n;
        }
        let verdict = match (fresh, carried) {
            (false, false) => Verdict::Unchanged,
            (true, _) => Verdict::Written,
            (false, true) => Verdict::CarriedDiffers,
        };
        if all && verdict == Verdict::Unchanged {
            self.last = Some(Arc::new(now));
        }
        Ok(verdict)
    }
}

/// What a check of the watched memory found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every watched granule as before the first pass.
    Unchanged,
    /// A granule whose "before" fingerprint was read in this window changed.
    Written,
    /// Only granules whose "before" fingerprints were carried from the previous window
    /// differ: the kernel wrote them, or something the engine was not told of did in between.
    CarriedDiffers,
}

/// The write epochs: bumped whenever the application may have written device memory outside
/// a replay window — per agent where the backend knows it ([`slot`]), for all agents (`ALL`)
/// where not.
static ALL: AtomicU64 = AtomicU64::new(0);

/// One agent's epoch counter: `key` is the agent + 1 (0: free).
struct Slot {
    key: AtomicU64,
    count: AtomicU64,
}

/// Epoch counters of the first [`EPOCH_SLOTS`] agents seen, found by open addressing without
/// a lock (every dispatch run once bumps one, on the interceptor's path); later agents share
/// `OVERFLOW`, which only costs them carried fingerprints (a shared counter changes more
/// often), never a missed write.
const EPOCH_SLOTS: usize = 64;
static SLOTS: [Slot; EPOCH_SLOTS] = [const {
    Slot {
        key: AtomicU64::new(0),
        count: AtomicU64::new(0),
    }
}; EPOCH_SLOTS];
static OVERFLOW: AtomicU64 = AtomicU64::new(0);

fn slot(agent: u64) -> &'static AtomicU64 {
    let key = agent.wrapping_add(1);
    if key == 0 {
        return &OVERFLOW;
    }
    let start = (mix(agent) % EPOCH_SLOTS as u64) as usize;
    for i in 0..EPOCH_SLOTS {
        let s = &SLOTS[(start + i) % EPOCH_SLOTS];
        match s.key.load(Ordering::Acquire) {
            k if k == key => return &s.count,
            0 => match s
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return &s.count,
                Err(k) if k == key => return &s.count,
                Err(_) => {}
            },
            _ => {}
        }
    }
    &OVERFLOW
}

/// The application may have written `agent`'s device memory outside a replay window (a
/// dispatch that ran once, a copy, a fill, a stream write): fingerprints carried from earlier
/// windows of the agent no longer count.
pub(crate) fn note_device_write(agent: u64) {
    slot(agent).fetch_add(1, Ordering::AcqRel);
}

/// As [`note_device_write`], for every agent (the backend cannot tell which).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn note_device_write_all() {
    ALL.fetch_add(1, Ordering::AcqRel);
}

/// Writes of known ranges outside windows (copies and fills whose destination the backend
/// decoded, [`note_range_write`]), newest last: a carried fingerprint of an allocation that a
/// range written after its window's decision overlaps no longer counts; the others' still do.
/// The oldest entries make room for new ones past [`RANGE_LOG`]: fingerprints older than the
/// oldest entry kept (`floor`) count as written.
#[derive(Default)]
struct RangeLog {
    /// Sequence number of the newest entry (0: none yet).
    newest: u64,
    /// Sequence number of the newest entry dropped.
    floor: u64,
    /// (sequence, start, end) of each range.
    entries: VecDeque<(u64, usize, usize)>,
}

impl RangeLog {
    /// Logs `len` bytes written at `start`.
    fn push(&mut self, start: usize, len: usize) {
        self.newest += 1;
        if self.entries.len() >= RANGE_LOG
            && let Some((dropped, _, _)) = self.entries.pop_front()
        {
            self.floor = dropped;
        }
        self.entries
            .push_back((self.newest, start, start.saturating_add(len)));
    }

    /// Whether a range logged after `seq` overlaps `[base, base + size)`.
    fn written_since(&self, seq: u64, base: usize, size: usize) -> bool {
        if seq < self.floor {
            return true;
        }
        let end = base.saturating_add(size);
        self.entries
            .iter()
            .rev()
            .take_while(|e| e.0 > seq)
            .any(|&(_, start, stop)| start < end && base < stop)
    }
}

/// Ranges logged before the oldest entries are dropped.
const RANGE_LOG: usize = 4096;

static RANGES: Mutex<RangeLog> = Mutex::new(RangeLog {
    newest: 0,
    floor: 0,
    entries: VecDeque::new(),
});

/// The application wrote (or is about to write) `len` bytes of device memory at `start` outside
/// a replay window — a copy or a fill whose destination the backend knows: carried
/// fingerprints of the allocations it overlaps no longer count, the others' still do. Like
/// [`note_device_write`], called before the work is submitted and again after.
pub(crate) fn note_range_write(start: usize, len: usize) {
    if len > 0 {
        RANGES.lock().push(start, len);
    }
}

/// What the fingerprints of a window are tagged with: its agent's write epoch and the newest
/// logged range at the window's decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tag {
    epoch: u64,
    ranges: u64,
}

/// The tag of a window deciding now on `agent`.
pub(crate) fn tag(agent: u64) -> Tag {
    Tag {
        epoch: epoch(agent),
        ranges: RANGES.lock().newest,
    }
}

/// `agent`'s current write epoch (taken at a window's decision).
pub(crate) fn epoch(agent: u64) -> u64 {
    let own = slot(agent).load(Ordering::Acquire);
    // Both counters only grow: their sum changes whenever either does.
    own.wrapping_add(ALL.load(Ordering::Acquire))
}

/// One allocation's carried fingerprints.
#[derive(Debug)]
struct Print {
    generation: u64,
    size: usize,
    epoch: Tag,
    prints: Prints,
}

/// Fingerprints left by the previous window of each agent, by (agent, base).
static CARRIED: std::sync::LazyLock<Mutex<HashMap<(u64, usize), Print>>> =
    std::sync::LazyLock::new(|| Mutex::new(HashMap::new()));

/// What one window took of its agent's carried fingerprints.
#[derive(Debug, Default)]
pub(crate) struct Carried(HashMap<usize, Print>);

impl Carried {
    /// The fingerprints of `r`, if it is the allocation they were taken of and nothing was
    /// written outside a window since their window's decision: the agent's write epoch is
    /// still `epoch`, and no range logged since overlaps `r`.
    fn get(&self, r: &Region, epoch: u64, ranges: &RangeLog) -> Option<Prints> {
        let RegionKind::Allocation { generation } = r.kind else {
            return None;
        };
        self.0
            .get(&r.base)
            .filter(|p| {
                p.generation == generation
                    && p.size == r.size
                    && p.epoch.epoch == epoch
                    && !ranges.written_since(p.epoch.ranges, r.base, r.size)
            })
            .map(|p| p.prints.clone())
    }
}

/// Takes (removes) `agent`'s carried fingerprints: called by every window once it holds the
/// agent, so none outlives a window that did not leave its own.
pub(crate) fn take_carried(agent: u64) -> Carried {
    let mut map = CARRIED.lock();
    let keys: Vec<(u64, usize)> = map.keys().filter(|k| k.0 == agent).copied().collect();
    Carried(
        keys.into_iter()
            .filter_map(|k| map.remove(&k).map(|p| (k.1, p)))
            .collect(),
    )
}

/// A set of kernels, per agent and kernel object, for the life of the process.
#[derive(Default)]
pub(crate) struct Kernels {
    kernels: Mutex<HashSet<(u64, u64)>>,
}

impl Kernels {
    /// Whether `kernel` on `agent` is in the set.
    pub(crate) fn contains(&self, agent: u64, kernel: u64) -> bool {
        self.kernels.lock().contains(&(agent, kernel))
    }

    /// Puts `kernel` on `agent` in the set.
    pub(crate) fn insert(&self, agent: u64, kernel: u64) {
        self.kernels.lock().insert((agent, kernel));
    }

    /// Takes `kernel` on `agent` out of the set.
    pub(crate) fn remove(&self, agent: u64, kernel: u64) {
        self.kernels.lock().remove(&(agent, kernel));
    }
}

/// Kernels whose first pass wrote memory their arguments do not name: their dispatches capture
/// every allocation.
pub(crate) static REMEMBERED: std::sync::LazyLock<Kernels> =
    std::sync::LazyLock::new(Kernels::default);

/// Kernels whose first pass changed memory whose "before" fingerprints were carried
/// ([`Verdict::CarriedDiffers`]): the kernel or an unseen writer did it. Their next checked
/// dispatch takes no carried fingerprints, and its verdict settles it: written, the kernel is
/// remembered; unchanged, it leaves the set.
pub(crate) static SUSPECTED: std::sync::LazyLock<Kernels> =
    std::sync::LazyLock::new(Kernels::default);

/// Kernels whose window over a run of dispatches found memory written outside the run's
/// snapshot: which member wrote it is not known, so their dispatches get windows of their own
/// (where the writer is found and remembered, or learns a reach) and never join a run again.
pub(crate) static SOLO: std::sync::LazyLock<Kernels> = std::sync::LazyLock::new(Kernels::default);

/// The sampled footprint's history of each kernel ([`FootprintMode::Sampled`](crate::FootprintMode::Sampled)):
/// clean checks so far, and dispatches since the last check once trusted.
#[derive(Default)]
pub(crate) struct Sampling {
    kernels: Mutex<HashMap<(u64, u64), (u32, u32)>>,
}

impl Sampling {
    /// Whether this dispatch of `kernel` on `agent` is checked: every one until the kernel has
    /// [`SAMPLED_TRUST_AFTER`](crate::SAMPLED_TRUST_AFTER) clean checks, then one in
    /// [`SAMPLED_EVERY`](crate::SAMPLED_EVERY).
    pub(crate) fn should_check(&self, agent: u64, kernel: u64) -> bool {
        let mut map = self.kernels.lock();
        let (clean, since) = map.entry((agent, kernel)).or_default();
        if *clean < crate::SAMPLED_TRUST_AFTER {
            return true;
        }
        *since += 1;
        if *since >= crate::SAMPLED_EVERY {
            *since = 0;
            return true;
        }
        false
    }

    /// Whether the next dispatch of `kernel` on `agent` is due a check, without counting it:
    /// a dispatch that may join a run whose members are not checked
    /// ([`skipped`](Self::skipped) counts it once it joined).
    pub(crate) fn due(&self, agent: u64, kernel: u64) -> bool {
        let map = self.kernels.lock();
        let (clean, since) = map.get(&(agent, kernel)).copied().unwrap_or_default();
        clean < crate::SAMPLED_TRUST_AFTER || since.saturating_add(1) >= crate::SAMPLED_EVERY
    }

    /// A dispatch of `kernel` on `agent` that [`due`](Self::due) let go unchecked.
    pub(crate) fn skipped(&self, agent: u64, kernel: u64) {
        let mut map = self.kernels.lock();
        let (_, since) = map.entry((agent, kernel)).or_default();
        *since = since.saturating_add(1);
    }

    /// A checked dispatch of `kernel` on `agent` wrote nothing outside its arguments: one
    /// more clean check, and the count to the next check starts again (a dispatch checked as
    /// a member of a checked run was not counted by [`should_check`](Self::should_check)).
    pub(crate) fn clean(&self, agent: u64, kernel: u64) {
        let mut map = self.kernels.lock();
        let (clean, since) = map.entry((agent, kernel)).or_default();
        *clean = clean.saturating_add(1);
        *since = 0;
    }
}

/// The process's [`Sampling`] history.
pub(crate) static SAMPLING: std::sync::LazyLock<Sampling> =
    std::sync::LazyLock::new(Sampling::default);

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
    fn the_range_log_names_overlapping_writes_and_forgets_nothing_it_dropped() {
        let mut log = RangeLog::default();
        let tag = log.newest;
        log.push(0x1000, 0x100);
        assert!(log.written_since(tag, 0x10ff, 1), "the last byte overlaps");
        assert!(
            !log.written_since(tag, 0x1100, 0x100),
            "the next byte does not"
        );
        assert!(
            !log.written_since(log.newest, 0x1000, 0x100),
            "nothing since the newest"
        );
        // Tagged before the second entry: once that one is dropped, what it wrote is unknown.
        let old = log.newest;
        for i in 0..RANGE_LOG + 1 {
            log.push(0x10_0000 + i * 16, 16);
        }
        assert!(
            log.written_since(old, 0x9000_0000, 16),
            "a tag older than the log's oldest entry counts as written"
        );
        assert!(!log.written_since(log.newest - 1, 0x9000_0000, 16));
    }

    #[test]
    fn each_agent_has_its_own_write_epoch() {
        // Agents of this test only (others run in parallel): handles no other test uses.
        let (a, b) = (0xfeed_0000_0001u64, 0xfeed_0000_0002u64);
        let (ea, eb) = (epoch(a), epoch(b));
        note_device_write(a);
        assert_ne!(epoch(a), ea, "a bump changes the agent's epoch");
        assert_eq!(epoch(b), eb, "and not another agent's");
        assert!(!std::ptr::eq(slot(a), slot(b)));
        assert!(std::ptr::eq(slot(a), slot(a)));
        let before = epoch(b);
        note_device_write_all();
        assert_ne!(
            epoch(b),
            before,
            "a bump for all agents changes every epoch"
        );
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
        let watched = split(&mut plan, &named(&args), 0);
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

    #[test]
    fn a_dispatch_let_go_unchecked_in_a_run_counts_toward_its_kernel_s_next_check() {
        use crate::{SAMPLED_EVERY, SAMPLED_TRUST_AFTER};
        let s = Sampling::default();
        let (agent, kernel) = (1, 0x77);
        for _ in 0..SAMPLED_TRUST_AFTER {
            assert!(s.due(agent, kernel), "not trusted yet");
            s.clean(agent, kernel);
        }
        // Trusted: `due` only looks, `skipped` counts, and the check falls where
        // `should_check` would have put it.
        assert!(!s.due(agent, kernel));
        assert!(!s.due(agent, kernel), "looking does not count");
        for _ in 0..SAMPLED_EVERY - 2 {
            s.skipped(agent, kernel);
        }
        assert!(!s.due(agent, kernel));
        assert!(!s.should_check(agent, kernel), "the one before the check");
        assert!(s.due(agent, kernel));
        assert!(s.should_check(agent, kernel));
        // A clean check as a run's member starts the count again.
        s.skipped(agent, kernel);
        s.clean(agent, kernel);
        assert!(!s.due(agent, kernel));
        for _ in 0..SAMPLED_EVERY - 1 {
            s.skipped(agent, kernel);
        }
        assert!(s.due(agent, kernel));
    }
}
