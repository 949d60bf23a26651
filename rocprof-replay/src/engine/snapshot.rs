//! Snapshot plan, capture and restore.
//!
//! A [`SnapshotPlan`] lists what a replay must restore on one agent: the inventory's
//! allocations owned by the agent plus the module-scope variables the backend found at snapshot
//! time. Capture copies each region into *staging* memory the backend provides (device arena,
//! pinned host or process heap: [`Tier`]); restore copies it back. Both go through
//! [`DeviceMemory::copy`], one batch of [`Transfer`]s per capture or restore, so a backend can
//! run them as asynchronous copies with one bounded wait, and so a later engine can hand it a
//! narrower list (the ranges a pass wrote) without changing the interface.
//!
//! Rules:
//! - An incomplete snapshot is never used: capture returns a [`DeclineReason`] and the dispatch
//!   runs once instead (capture only reads device memory, so that run is correct).
//! - Allocations are *pinned* in the inventory while their bytes move
//!   ([`AllocationInventory::pin`]): a free of a pinned region waits until the copy is done, and
//!   a region freed or re-allocated before it was pinned is skipped (with a warning), never
//!   read or written. Allocations and unrelated frees are never blocked by a copy.
//! - Staging that a copy may still be using after its deadline is leaked, never reused.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use crate::engine::inventory::AllocationInventory;
use crate::policy::DeclineReason;

/// Where a region's captured bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tier {
    /// Device memory of the replaying agent (device-to-device copies).
    Device,
    /// Host memory the runtime pinned and made accessible to the agent.
    PinnedHost,
    /// Ordinary process memory (simulations, benchmarks, last-resort fallback).
    Host,
}

/// One copy of a capture or restore batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transfer {
    /// Address in device memory (the application's region).
    pub(crate) device: usize,
    /// Address in staging memory.
    pub(crate) staging: usize,
    /// Bytes.
    pub(crate) len: usize,
}

/// Which way a batch of [`Transfer`]s copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Device memory to staging.
    Capture,
    /// Staging to device memory.
    Restore,
}

/// How a batch of copies went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyError {
    /// Some copy failed; nothing of the batch is still in flight.
    Failed,
    /// The deadline passed with copies still in flight: they may land later.
    Stuck,
}

/// Copies between device memory and staging memory; implemented by each backend.
pub(crate) trait DeviceMemory {
    /// Staging memory for `size` bytes of snapshot, or `None` when it cannot be had. The
    /// default is the process heap.
    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        Staging::heap(size)
    }

    /// Called once per window before the capture with the plan's size: a backend that carves
    /// staging from an arena readies it for `bytes` here (later buffers the window needs, a
    /// stash or a plan that outgrew the estimate, still come from
    /// [`alloc_staging`](Self::alloc_staging)). The default: nothing to ready.
    fn reserve_staging(&mut self, bytes: usize) {
        let _ = bytes;
    }

    /// Performs every transfer of the batch, waiting (with the backend's copy deadline) until
    /// all are complete.
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError>;

    /// Queued restores: with `on`, a [`copy`](Self::copy) in the [`Direction::Restore`]
    /// direction returns once its transfers are submitted, without waiting for them. The
    /// backend promises that they complete before the next pass the window submits starts,
    /// that collecting that pass waits for them (a stuck copy makes it late), and that every
    /// later copy, diff, fingerprint, pass or run of the window (any member's) sees them done.
    /// `true`: restores are
    /// queued until it is asked again with `!on`; `false` (the default): the backend cannot
    /// promise that order, and copies wait as always.
    fn queue_restores(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// After a pass behind a queued restore stayed late: whether that restore is what has
    /// not completed (the pass never started). The default: no restore was queued.
    fn restore_pending(&mut self) -> bool {
        false
    }

    /// Host memory for `size` bytes of scratch the host reads (the diff's read-backs). The
    /// default is [`alloc_staging`](Self::alloc_staging); a backend whose staging may be device
    /// memory returns host-readable memory here.
    fn alloc_scratch(&mut self, size: usize) -> Option<Staging> {
        self.alloc_staging(size)
    }

    /// The granules of each region that differ from its captured copy: `regions[i]` names a
    /// region (`device`) and its snapshot (`staging`, `len` bytes); granules are `granule`
    /// bytes from the region's start (the last one may be shorter). `on_device[i]` says the
    /// snapshot of region `i` lives in device memory (the host cannot read it). Ranges come
    /// back sorted, adjacent dirty granules coalesced.
    ///
    /// The default reads device memory back through [`copy`](Self::copy) into one scratch
    /// buffer of at most [`DIFF_CHUNK`] bytes from [`alloc_scratch`](Self::alloc_scratch)
    /// (reused chunk after chunk, so each read is one bounded copy batch) and compares on the
    /// host; a snapshot on the device is read back as well, into a second scratch buffer (so
    /// a device-staged region costs two reads, not one, until a device compare kernel exists).
    /// A backend that cannot compare returns [`DiffError::Unsupported`]: the engine restores
    /// everything, as before write-set restore.
    fn diff(
        &mut self,
        regions: &[Transfer],
        on_device: &[bool],
        granule: usize,
    ) -> Result<DirtyRanges, DiffError> {
        diff_by_reading(self, regions, on_device, granule)
    }

    /// One fingerprint ([`footprint::fingerprint`](crate::engine::footprint::fingerprint))
    /// per `granule` bytes of each device region (address, length), granules from each
    /// region's start (the last one may be shorter), concatenated in region order. The window
    /// compares them before and after passes to know that memory outside the snapshot was not
    /// written ([`footprint`](crate::engine::footprint)).
    ///
    /// The default reads the regions back through [`copy`](Self::copy) into one scratch
    /// buffer and hashes on the host. [`DiffError::Unsupported`] makes the window capture
    /// everything instead.
    fn fingerprint(
        &mut self,
        regions: &[(usize, usize)],
        granule: usize,
    ) -> Result<Vec<u64>, DiffError> {
        crate::engine::footprint::fingerprint_by_reading(self, regions, granule)
    }

    /// Whether the last [`diff`](Self::diff) that succeeded compared the snapshots in device
    /// memory (`on_device`) where they are, with a device kernel, instead of reading them back
    /// to the host. The default diff reads them back: `false`.
    fn diffs_on_device(&self) -> bool {
        false
    }
}

/// Largest read-back of one diff copy batch (the scratch buffer's size): small enough that
/// the scratch stays in the host's last-level cache between the copy and the compare (twice
/// as fast as 64 MiB in the restore bench), large enough that a copy's fixed cost is small.
pub(crate) const DIFF_CHUNK: usize = 4 << 20;

/// A run of dirty bytes: `len` bytes at `offset` into the `index`-th region of a diff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirtyRange {
    pub(crate) index: usize,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// What [`DeviceMemory::diff`] found, sorted by region then offset.
pub(crate) type DirtyRanges = Vec<DirtyRange>;

/// Why a diff found nothing usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DiffError {
    /// The backend cannot compare (a CUDA context where the compare kernel cannot be loaded,
    /// or is not loaded yet).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Unsupported,
    /// A read-back failed, or scratch memory could not be had; nothing is in flight.
    Failed,
    /// A read-back was still in flight at the deadline (its scratch buffer is leaked).
    Stuck,
}

impl From<CopyError> for DiffError {
    fn from(e: CopyError) -> DiffError {
        match e {
            CopyError::Failed => DiffError::Failed,
            CopyError::Stuck => DiffError::Stuck,
        }
    }
}

/// Appends `[offset, offset + len)` of region `index`, merging with the last range when they
/// touch.
fn push_dirty(out: &mut DirtyRanges, index: usize, offset: usize, len: usize) {
    if let Some(last) = out.last_mut()
        && last.index == index
        && last.offset + last.len == offset
    {
        last.len += len;
        return;
    }
    out.push(DirtyRange { index, offset, len });
}

/// Compares `read` (device bytes) with `captured` granule by granule; `offset` is where both
/// start in region `index` (a multiple of `granule`).
fn compare(
    out: &mut DirtyRanges,
    index: usize,
    offset: usize,
    read: &[u8],
    captured: &[u8],
    granule: usize,
) {
    for (k, (a, b)) in read
        .chunks(granule)
        .zip(captured.chunks(granule))
        .enumerate()
    {
        if a != b {
            push_dirty(out, index, offset + k * granule, a.len());
        }
    }
}

/// The default [`DeviceMemory::diff`]: chunked read-back into reused scratch staging, host
/// compare; snapshots on the device (`on_device[i]`) are read back too.
pub(crate) fn diff_by_reading<M: DeviceMemory + ?Sized>(
    mem: &mut M,
    regions: &[Transfer],
    on_device: &[bool],
    granule: usize,
) -> Result<DirtyRanges, DiffError> {
    let granule = granule.max(1);
    let mut out = DirtyRanges::new();
    let largest = regions.iter().map(|t| t.len).max().unwrap_or(0);
    if largest == 0 {
        return Ok(out);
    }
    // A multiple of the granule, so pieces of one region start on granule boundaries.
    let chunk = (DIFF_CHUNK / granule).max(1) * granule;
    let size = chunk.min(largest.div_ceil(granule) * granule);
    let staged_on_device = |i: usize| on_device.get(i).copied().unwrap_or(false);
    // A second half receives device-resident snapshots, read back beside the live bytes.
    let halves = if (0..regions.len()).any(staged_on_device) {
        2
    } else {
        1
    };
    let scratch = mem.alloc_scratch(size * halves).ok_or(DiffError::Failed)?;
    let base = scratch.addr();
    // Pieces packed into the scratch buffer: (region, offset in region, offset in scratch, len).
    let mut pieces: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut batch: Vec<Transfer> = Vec::new();
    let mut used = 0usize;
    let flush = |mem: &mut M,
                 pieces: &mut Vec<(usize, usize, usize, usize)>,
                 batch: &mut Vec<Transfer>,
                 out: &mut DirtyRanges|
     -> Result<(), CopyError> {
        if batch.is_empty() {
            return Ok(());
        }
        mem.copy(Direction::Capture, batch)?;
        for &(index, offset, at, len) in pieces.iter() {
            let captured_at = if staged_on_device(index) {
                base + size + at
            } else {
                regions[index].staging + offset
            };
            // SAFETY: `at..at + len` (and `size + at..`) lie in the scratch buffer the copy just
            // filled (nothing else uses it); a host-resident snapshot of region `index` holds
            // `len` bytes at `offset` that only this engine writes.
            let (read, captured) = unsafe {
                (
                    std::slice::from_raw_parts((base + at) as *const u8, len),
                    std::slice::from_raw_parts(captured_at as *const u8, len),
                )
            };
            compare(out, index, offset, read, captured, granule);
        }
        pieces.clear();
        batch.clear();
        Ok(())
    };
    let mut result = Ok(());
    'regions: for (index, t) in regions.iter().enumerate() {
        let mut offset = 0;
        while offset < t.len {
            let len = (t.len - offset).min(size);
            // Pieces start on granule boundaries of the scratch buffer as well.
            let at = used.div_ceil(granule) * granule;
            if at + len > size {
                if let Err(e) = flush(mem, &mut pieces, &mut batch, &mut out) {
                    result = Err(e);
                    break 'regions;
                }
                used = 0;
                continue;
            }
            batch.push(Transfer {
                device: t.device + offset,
                staging: base + at,
                len,
            });
            if staged_on_device(index) {
                // The snapshot's bytes, read back like device memory.
                batch.push(Transfer {
                    device: t.staging + offset,
                    staging: base + size + at,
                    len,
                });
            }
            pieces.push((index, offset, at, len));
            used = at + len;
            offset += len;
        }
    }
    if result.is_ok() {
        result = flush(mem, &mut pieces, &mut batch, &mut out);
    }
    match result {
        Ok(()) => Ok(out),
        Err(CopyError::Failed) => Err(DiffError::Failed),
        Err(CopyError::Stuck) => {
            // A read may still land in the scratch buffer: never reuse it.
            scratch.leak();
            Err(DiffError::Stuck)
        }
    }
}

/// Copies a batch within this process's memory (both sides are host addresses).
///
/// # Safety
/// Every transfer must name `len` readable bytes at its source and `len` writable bytes at its
/// destination, not overlapping, with nothing else accessing them during the call.
pub(crate) unsafe fn host_copy(direction: Direction, transfers: &[Transfer]) {
    for t in transfers {
        let (src, dst) = match direction {
            Direction::Capture => (t.device, t.staging),
            Direction::Restore => (t.staging, t.device),
        };
        // SAFETY: caller contract.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, t.len) };
    }
}

/// Staging memory holding one captured region.
pub(crate) enum Staging {
    /// Process heap.
    Heap(Vec<u8>),
    /// Memory from the backend, given back with `release`.
    Backend {
        /// Start of the buffer.
        ptr: NonNull<u8>,
        /// Bytes in use (the region's size).
        len: usize,
        /// Bytes allocated (`>= len`; a retained buffer may be larger than the region).
        capacity: usize,
        /// Where the buffer lives.
        tier: Tier,
        /// Gives the buffer back to the backend (to keep for later snapshots, or to free).
        release: unsafe fn(NonNull<u8>, usize, Tier),
    },
}

// SAFETY: backend staging is memory owned exclusively by this value; nothing in it is tied to
// the thread that allocated it.
unsafe impl Send for Staging {}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Staging({:?}, {} bytes)", self.tier(), self.len())
    }
}

impl Staging {
    /// A zeroed heap buffer, or `None` when the allocator refuses.
    pub(crate) fn heap(size: usize) -> Option<Staging> {
        let mut v = Vec::new();
        v.try_reserve_exact(size).ok()?;
        v.resize(size, 0);
        Some(Staging::Heap(v))
    }

    /// The address copies use.
    pub(crate) fn addr(&self) -> usize {
        match self {
            Staging::Heap(v) => v.as_ptr() as usize,
            Staging::Backend { ptr, .. } => ptr.as_ptr() as usize,
        }
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Staging::Heap(v) => v.len(),
            Staging::Backend { len, .. } => *len,
        }
    }

    /// Where the bytes live.
    pub(crate) fn tier(&self) -> Tier {
        match self {
            Staging::Heap(_) => Tier::Host,
            Staging::Backend { tier, .. } => *tier,
        }
    }

    /// Gives up the buffer without releasing it: a copy may still be using it.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Staging::Backend {
            ptr,
            capacity,
            tier,
            release,
            ..
        } = self
        {
            // SAFETY: the buffer came from the backend `release` belongs to, no copy uses it
            // any more (stuck buffers are leaked instead), and it is given back exactly once.
            unsafe { release(*ptr, *capacity, *tier) };
        }
    }
}

/// What a region is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegionKind {
    /// A tracked allocation, valid while its generation is live.
    Allocation { generation: u64 },
    /// A module-scope variable (lives as long as its executable).
    ModuleVariable,
}

/// One region to capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) base: usize,
    pub(crate) size: usize,
    pub(crate) kind: RegionKind,
}

/// The regions of one snapshot.
#[derive(Debug, Default)]
pub(crate) struct SnapshotPlan {
    pub(crate) regions: Vec<Region>,
}

impl SnapshotPlan {
    /// Plans a snapshot of `agent`'s allocations and the given module variables, refusing
    /// plans larger than `budget` bytes.
    pub(crate) fn new(
        inventory: &AllocationInventory,
        agent: crate::AgentId,
        variables: &[(usize, usize)],
        budget: u64,
    ) -> Result<SnapshotPlan, DeclineReason> {
        let mut regions: Vec<Region> = inventory
            .owned_by(agent)
            .into_iter()
            .map(|a| Region {
                base: a.base,
                size: a.size,
                kind: RegionKind::Allocation {
                    generation: a.generation,
                },
            })
            .collect();
        regions.extend(
            variables
                .iter()
                .filter(|(base, size)| *base != 0 && *size != 0)
                .map(|&(base, size)| Region {
                    base,
                    size,
                    kind: RegionKind::ModuleVariable,
                }),
        );
        let bytes: u64 = regions.iter().map(|r| r.size as u64).sum();
        if bytes > budget {
            return Err(DeclineReason::OverBudget);
        }
        Ok(SnapshotPlan { regions })
    }
}

/// Captured regions.
#[derive(Debug)]
pub(crate) struct Snapshot {
    regions: Vec<(Region, Staging)>,
    pub(crate) bytes: u64,
    pub(crate) capture_time: Duration,
    /// Regions freed between planning and capture (not captured, never restored).
    pub(crate) skipped: u32,
    /// A diff of it did not finish by its deadline: a compare may still read the staging, so
    /// it is never released (dropping the snapshot leaks it, as after a stuck restore).
    read_by_stuck_work: std::sync::atomic::AtomicBool,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if self
            .read_by_stuck_work
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            std::mem::take(&mut self.regions)
                .into_iter()
                .for_each(|(_, buf)| buf.leak());
        }
    }
}

/// What a restore did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestoreStats {
    pub(crate) bytes: u64,
    pub(crate) skipped: u32,
    pub(crate) time: Duration,
}

/// Granule of write-set restore: the unit in which the engine compares device memory with the
/// snapshot and restores it (granules start at each region's start; a region's last one may be
/// shorter).
pub(crate) const GRANULE: usize = 4096;

/// Dirty ranges of one region closer than this are restored as one copy (the bytes between
/// them are rewritten with their own, unchanged value): fewer, larger copies.
pub(crate) const MERGE_GAP: usize = 64 << 10;

/// A write set above this share of the snapshot (in percent) is restored with plain full
/// copies: the diff would cost more than it saves.
pub(crate) const DENSE_PERCENT: u64 = 50;

/// Dirty ranges of snapshot regions (`index` is the snapshot's region index), sorted,
/// non-overlapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WriteSet {
    pub(crate) ranges: Vec<DirtyRange>,
    /// How long the diff that found it took.
    pub(crate) time: Duration,
    /// Bytes that diff compared.
    pub(crate) compared: u64,
    /// Regions that diff left out: freed or re-allocated since capture.
    pub(crate) skipped: u32,
    /// Where that diff compared: some snapshot on the device (with a device kernel), some on
    /// the host (host-staged snapshots, or device ones read back).
    pub(crate) sites: CompareSites,
}

/// Where a diff compared memory with its snapshot ([`WriteSet::sites`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CompareSites {
    /// Some region was compared on the device, where its snapshot lives.
    pub(crate) device: bool,
    /// Some region was compared on the host.
    pub(crate) host: bool,
}

impl CompareSites {
    /// The sites of `self` and of an earlier record `label`, as a record label: `device`,
    /// `host` or `device+host`; `None` when nothing was compared.
    pub(crate) fn joined(self, label: Option<&'static str>) -> Option<&'static str> {
        let device = self.device || label.is_some_and(|l| l.contains("device"));
        let host = self.host || label.is_some_and(|l| l.contains("host"));
        match (device, host) {
            (true, true) => Some("device+host"),
            (true, false) => Some("device"),
            (false, true) => Some("host"),
            (false, false) => None,
        }
    }
}

impl WriteSet {
    /// Bytes covered.
    pub(crate) fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len as u64).sum()
    }

    /// The same set with ranges of one region less than `gap` bytes apart joined.
    pub(crate) fn merged(&self, gap: usize) -> WriteSet {
        let mut ranges: Vec<DirtyRange> = Vec::with_capacity(self.ranges.len());
        for r in &self.ranges {
            if let Some(last) = ranges.last_mut()
                && last.index == r.index
                && r.offset >= last.offset + last.len
                && r.offset - (last.offset + last.len) < gap
            {
                last.len = r.offset + r.len - last.offset;
                continue;
            }
            ranges.push(*r);
        }
        WriteSet { ranges, ..*self }
    }

    /// The bytes of `self` that `other` does not cover.
    pub(crate) fn minus(&self, other: &WriteSet) -> WriteSet {
        let mut out = Vec::new();
        let mut j = 0;
        for r in &self.ranges {
            let (mut start, end) = (r.offset, r.offset + r.len);
            // Skip ranges of `other` wholly before this one.
            while j < other.ranges.len() && {
                let o = &other.ranges[j];
                (o.index, o.offset + o.len) <= (r.index, start)
            } {
                j += 1;
            }
            let mut k = j;
            while start < end && k < other.ranges.len() {
                let o = &other.ranges[k];
                if o.index != r.index || o.offset >= end {
                    break;
                }
                if o.offset > start {
                    push_dirty(&mut out, r.index, start, o.offset - start);
                }
                start = start.max(o.offset + o.len);
                k += 1;
            }
            if start < end {
                push_dirty(&mut out, r.index, start, end - start);
            }
        }
        WriteSet {
            ranges: out,
            ..*self
        }
    }
}

/// The bytes one pass left in a [`WriteSet`], kept to be written back later.
#[derive(Debug)]
pub(crate) struct Stash {
    /// `None` when the set is empty.
    buf: Option<Staging>,
    /// Each range and the address of its bytes in `buf`.
    ranges: Vec<(DirtyRange, usize)>,
}

impl Stash {
    /// Gives up the stash after a stuck copy: its staging may still be used.
    pub(crate) fn leak(self) {
        if let Some(buf) = self.buf {
            buf.leak();
        }
    }
}

/// Why a stash could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StashError {
    /// No staging memory for it.
    NoMemory,
    /// The copy failed; nothing is in flight.
    Failed,
    /// The copy was still in flight at the deadline (the buffer is leaked).
    Stuck,
}

/// A restore that did not complete: device memory may hold a partly restored state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RestoreError {
    /// Copies failed, twice (the restore is retried once).
    Failed,
    /// Copies were still in flight at the deadline.
    Stuck,
}

fn warn_skipped(region: &Region) {
    tracing::warn!(
        base = format_args!("{:#x}", region.base),
        size = region.size,
        "region freed or reallocated during the replay window: not restored"
    );
}

impl Snapshot {
    /// Copies every planned region into staging memory; any failure declines the whole
    /// snapshot. Regions freed since planning are left out.
    pub(crate) fn capture(
        plan: SnapshotPlan,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<Snapshot, DeclineReason> {
        let start = Instant::now();
        let mut regions = Vec::new();
        regions
            .try_reserve_exact(plan.regions.len())
            .map_err(|_| DeclineReason::SnapshotAllocFailed)?;
        for region in plan.regions {
            let buf = mem
                .alloc_staging(region.size)
                .ok_or(DeclineReason::SnapshotAllocFailed)?;
            regions.push((region, buf));
        }
        let pins = inventory.pin(regions.iter().map(|(r, _)| r));
        let live: Vec<bool> = (0..regions.len()).map(|i| pins.is_pinned(i)).collect();
        let transfers: Vec<Transfer> = regions
            .iter()
            .zip(&live)
            .filter(|(_, live)| **live)
            .map(|((region, buf), _)| Transfer {
                device: region.base,
                staging: buf.addr(),
                len: region.size,
            })
            .collect();
        let skipped = (regions.len() - transfers.len()) as u32;
        let result = mem.copy(Direction::Capture, &transfers);
        drop(pins);
        match result {
            Ok(()) => {}
            Err(CopyError::Failed) => return Err(DeclineReason::CopyFailed),
            Err(CopyError::Stuck) => {
                // Reads may still land in the staging buffers: never reuse them.
                regions.into_iter().for_each(|(_, buf)| buf.leak());
                return Err(DeclineReason::CopyTimeout);
            }
        }
        if skipped > 0 {
            // Keep only what was captured: a region freed before capture is never restored.
            let mut live = live.into_iter();
            regions.retain(|_| live.next().unwrap_or(false));
        }
        let bytes = regions.iter().map(|(r, _)| r.size as u64).sum();
        Ok(Snapshot {
            regions,
            bytes,
            capture_time: start.elapsed(),
            skipped,
            read_by_stuck_work: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Writes every region back; allocations freed or re-allocated since capture are skipped.
    /// A failed batch is retried once.
    pub(crate) fn restore(
        &self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<RestoreStats, RestoreError> {
        let start = Instant::now();
        let mut stats = RestoreStats::default();
        let pins = inventory.pin(self.regions.iter().map(|(r, _)| r));
        let mut transfers = Vec::with_capacity(self.regions.len());
        for (i, (region, buf)) in self.regions.iter().enumerate() {
            if pins.is_pinned(i) {
                transfers.push(Transfer {
                    device: region.base,
                    staging: buf.addr(),
                    len: region.size,
                });
                stats.bytes += region.size as u64;
            } else {
                warn_skipped(region);
                stats.skipped += 1;
            }
        }
        let mut result = mem.copy(Direction::Restore, &transfers);
        if result == Err(CopyError::Failed) {
            tracing::warn!("a restore copy failed; retrying the restore once");
            result = mem.copy(Direction::Restore, &transfers);
        }
        drop(pins);
        stats.time = start.elapsed();
        match result {
            Ok(()) => Ok(stats),
            Err(CopyError::Failed) => Err(RestoreError::Failed),
            Err(CopyError::Stuck) => Err(RestoreError::Stuck),
        }
    }

    /// Takes `other`'s regions in after its own (a later dispatch of a window's run captured
    /// what this snapshot did not hold yet): diffs, restores and write-backs then cover both.
    pub(crate) fn absorb(&mut self, mut other: Snapshot) {
        self.regions.append(&mut other.regions);
        self.bytes += other.bytes;
        self.capture_time += other.capture_time;
        self.skipped += other.skipped;
    }

    /// Pins the snapshot's allocations ([`AllocationInventory::pin`]) until the guard drops:
    /// a free of one waits (bounded) for copies queued on the device to end.
    pub(crate) fn pin<'i>(
        &self,
        inventory: &'i AllocationInventory,
    ) -> crate::engine::inventory::Pins<'i> {
        inventory.pin(self.regions.iter().map(|(r, _)| r))
    }

    /// Regions the snapshot holds.
    pub(crate) fn region_count(&self) -> usize {
        self.regions.len()
    }

    /// The regions the snapshot holds (base, size).
    pub(crate) fn regions(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.regions.iter().map(|(r, _)| (r.base, r.size))
    }

    /// Where the snapshot's bytes live: `device`, `pinned_host` or `host`, or the tiers of a
    /// mix joined with `+` (`device+pinned_host`); `None` for an empty snapshot.
    pub(crate) fn staging_label(&self) -> Option<&'static str> {
        let has = |t: Tier| self.regions.iter().any(|(_, b)| b.tier() == t);
        Some(
            match (has(Tier::Device), has(Tier::PinnedHost), has(Tier::Host)) {
                (false, false, false) => return None,
                (true, false, false) => "device",
                (false, true, false) => "pinned_host",
                (false, false, true) => "host",
                (true, true, false) => "device+pinned_host",
                (true, false, true) => "device+host",
                (false, true, true) => "pinned_host+host",
                (true, true, true) => "device+pinned_host+host",
            },
        )
    }

    /// The granules of the live regions that differ from the snapshot now, found where the
    /// data lives ([`DeviceMemory::diff`]), with the regions pinned. Regions freed or
    /// re-allocated since capture are left out (they are never restored).
    pub(crate) fn diff(
        &self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        granule: usize,
    ) -> Result<WriteSet, DiffError> {
        let start = Instant::now();
        let pins = inventory.pin(self.regions.iter().map(|(r, _)| r));
        let mut index = Vec::with_capacity(self.regions.len());
        let mut transfers = Vec::with_capacity(self.regions.len());
        let mut on_device = Vec::with_capacity(self.regions.len());
        for (i, (region, buf)) in self.regions.iter().enumerate() {
            if pins.is_pinned(i) {
                index.push(i);
                transfers.push(Transfer {
                    device: region.base,
                    staging: buf.addr(),
                    len: region.size,
                });
                on_device.push(buf.tier() == Tier::Device);
            }
        }
        let skipped = (self.regions.len() - transfers.len()) as u32;
        let found = mem.diff(&transfers, &on_device, granule);
        if matches!(found, Err(DiffError::Stuck)) {
            // The compare may still read the staging after this window ends.
            self.read_by_stuck_work
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        drop(pins);
        let mut ranges = found?;
        let kernel = mem.diffs_on_device();
        let compared = |device: bool| {
            transfers
                .iter()
                .zip(&on_device)
                .any(|(t, &d)| t.len > 0 && d == device)
        };
        let sites = CompareSites {
            device: kernel && compared(true),
            host: compared(false) || (!kernel && compared(true)),
        };
        for r in &mut ranges {
            r.index = *index.get(r.index).ok_or(DiffError::Failed)?;
        }
        Ok(WriteSet {
            ranges,
            time: start.elapsed(),
            compared: transfers.iter().map(|t| t.len as u64).sum(),
            skipped,
            sites,
        })
    }

    /// Copies `ranges` of live regions (`staging_of` names the other side of each), with the
    /// regions pinned; a failed restore batch is retried once.
    fn copy_ranges(
        &self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        direction: Direction,
        ranges: impl Iterator<Item = (DirtyRange, usize)>,
    ) -> (RestoreStats, Result<(), CopyError>) {
        let start = Instant::now();
        let mut stats = RestoreStats::default();
        let pins = inventory.pin(self.regions.iter().map(|(r, _)| r));
        let mut transfers = Vec::new();
        let mut last_skipped = None;
        for (range, staging) in ranges {
            let Some((region, _)) = self.regions.get(range.index) else {
                continue;
            };
            if pins.is_pinned(range.index) {
                transfers.push(Transfer {
                    device: region.base + range.offset,
                    staging,
                    len: range.len,
                });
                stats.bytes += range.len as u64;
            } else if last_skipped != Some(range.index) {
                last_skipped = Some(range.index);
                if direction == Direction::Restore {
                    warn_skipped(region);
                }
                stats.skipped += 1;
            }
        }
        let mut result = mem.copy(direction, &transfers);
        if direction == Direction::Restore && result == Err(CopyError::Failed) {
            tracing::warn!("a restore copy failed; retrying the restore once");
            result = mem.copy(direction, &transfers);
        }
        drop(pins);
        stats.time = start.elapsed();
        (stats, result)
    }

    /// Writes the snapshot's bytes back over `set` only (live regions; retried once).
    pub(crate) fn restore_ranges(
        &self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        set: &WriteSet,
    ) -> Result<RestoreStats, RestoreError> {
        let ranges = set
            .ranges
            .iter()
            .filter(|r| r.index < self.regions.len())
            .map(|r| (*r, self.regions[r.index].1.addr() + r.offset));
        match self.copy_ranges(inventory, mem, Direction::Restore, ranges) {
            (stats, Ok(())) => Ok(stats),
            (_, Err(CopyError::Failed)) => Err(RestoreError::Failed),
            (_, Err(CopyError::Stuck)) => Err(RestoreError::Stuck),
        }
    }

    /// Copies the bytes device memory holds now over `set` into new staging: the result of
    /// the pass that just ran, to be written back by [`write_back`](Self::write_back).
    pub(crate) fn stash(
        &self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
        set: &WriteSet,
    ) -> Result<Stash, StashError> {
        let bytes = set.bytes() as usize;
        let buf = if bytes == 0 {
            None
        } else {
            Some(mem.alloc_staging(bytes).ok_or(StashError::NoMemory)?)
        };
        let base = buf.as_ref().map_or(0, Staging::addr);
        let mut ranges = Vec::with_capacity(set.ranges.len());
        let mut at = 0usize;
        for r in set.ranges.iter().filter(|r| r.index < self.regions.len()) {
            ranges.push((*r, base + at));
            at += r.len;
        }
        let (_, result) =
            self.copy_ranges(inventory, mem, Direction::Capture, ranges.iter().copied());
        match result {
            Ok(()) => Ok(Stash { buf, ranges }),
            Err(CopyError::Failed) => Err(StashError::Failed),
            Err(CopyError::Stuck) => {
                if let Some(buf) = buf {
                    buf.leak();
                }
                Err(StashError::Stuck)
            }
        }
    }

    /// Writes a [`Stash`] back where it was taken (live regions; retried once).
    pub(crate) fn write_back(
        &self,
        stash: &Stash,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<RestoreStats, RestoreError> {
        let ranges = stash.ranges.iter().copied();
        match self.copy_ranges(inventory, mem, Direction::Restore, ranges) {
            (stats, Ok(())) => Ok(stats),
            (_, Err(CopyError::Failed)) => Err(RestoreError::Failed),
            (_, Err(CopyError::Stuck)) => Err(RestoreError::Stuck),
        }
    }

    /// Gives up the snapshot after a stuck restore: its staging may still be read by copies.
    pub(crate) fn leak(mut self) {
        std::mem::take(&mut self.regions)
            .into_iter()
            .for_each(|(_, buf)| buf.leak());
    }

    /// (base, size) of every region captured.
    pub(crate) fn spans(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.regions.iter().map(|(r, _)| (r.base, r.size))
    }

    /// Number of regions captured.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.regions.len()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::AgentId;
    use crate::engine::inventory::Origin;

    /// Device memory that is plain host memory (addresses are real pointers).
    pub(crate) struct HostMemory {
        pub(crate) fail_reads: bool,
        /// Restore batches that fail before copying anything (counted down).
        pub(crate) failing_writes: u32,
        pub(crate) stuck: bool,
    }

    impl HostMemory {
        pub(crate) fn new() -> Self {
            HostMemory {
                fail_reads: false,
                failing_writes: 0,
                stuck: false,
            }
        }
    }

    impl DeviceMemory for HostMemory {
        fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
            if self.stuck {
                return Err(CopyError::Stuck);
            }
            match direction {
                Direction::Capture if self.fail_reads => return Err(CopyError::Failed),
                Direction::Restore if self.failing_writes > 0 => {
                    self.failing_writes -= 1;
                    return Err(CopyError::Failed);
                }
                _ => {}
            }
            // SAFETY: tests pass addresses of live buffers; staging is separate.
            unsafe { host_copy(direction, transfers) };
            Ok(())
        }
    }

    #[test]
    fn restore_brings_back_captured_bytes_and_skips_reallocated_regions() {
        let inv = AllocationInventory::new();
        let mut a = [1u8; 64];
        let mut b = [2u8; 32];
        let mut var = [7u8; 8];
        inv.record(a.as_ptr() as usize, a.len(), AgentId(1), Origin::Pool);
        let gb = inv.record(b.as_ptr() as usize, b.len(), AgentId(1), Origin::Pool);
        let plan =
            SnapshotPlan::new(&inv, AgentId(1), &[(var.as_ptr() as usize, 8)], u64::MAX).unwrap();
        assert_eq!(
            plan.regions.iter().map(|r| r.size).sum::<usize>(),
            64 + 32 + 8
        );
        let mut mem = HostMemory::new();
        let snap = Snapshot::capture(plan, &inv, &mut mem).unwrap();
        assert_eq!(snap.len(), 3);
        a.fill(9);
        b.fill(9);
        var.fill(9);
        // b is freed and its address reused by a new allocation: must not be written.
        inv.remove(b.as_ptr() as usize);
        let gb2 = inv.record(b.as_ptr() as usize, b.len(), AgentId(1), Origin::Pool);
        assert_ne!(gb, gb2);
        let stats = snap.restore(&inv, &mut mem).unwrap();
        assert_eq!(stats.skipped, 1);
        assert_eq!(stats.bytes, 64 + 8);
        assert!(a.iter().all(|x| *x == 1));
        assert!(
            b.iter().all(|x| *x == 9),
            "a reallocated region was written"
        );
        assert!(var.iter().all(|x| *x == 7));
    }

    #[test]
    fn a_region_freed_before_capture_is_neither_captured_nor_restored() {
        let inv = AllocationInventory::new();
        let mut a = [1u8; 16];
        let b = [2u8; 16];
        inv.record(a.as_ptr() as usize, 16, AgentId(1), Origin::Pool);
        inv.record(b.as_ptr() as usize, 16, AgentId(1), Origin::Pool);
        let plan = SnapshotPlan::new(&inv, AgentId(1), &[], u64::MAX).unwrap();
        inv.remove(b.as_ptr() as usize);
        let mut mem = HostMemory::new();
        let snap = Snapshot::capture(plan, &inv, &mut mem).unwrap();
        assert_eq!((snap.len(), snap.bytes, snap.skipped), (1, 16, 1));
        a.fill(5);
        assert_eq!(snap.restore(&inv, &mut mem).unwrap().skipped, 0);
        assert_eq!(a, [1u8; 16]);
    }

    #[test]
    fn other_agents_are_not_planned_and_budget_is_enforced() {
        let inv = AllocationInventory::new();
        inv.record(0x1000, 100, AgentId(1), Origin::Pool);
        inv.record(0x2000, 100, AgentId(2), Origin::Pool);
        assert_eq!(
            SnapshotPlan::new(&inv, AgentId(1), &[], 1000)
                .unwrap()
                .regions
                .len(),
            1
        );
        assert_eq!(
            SnapshotPlan::new(&inv, AgentId(1), &[], 99).unwrap_err(),
            DeclineReason::OverBudget
        );
    }

    #[test]
    fn a_failed_copy_declines_the_snapshot_and_a_stuck_one_times_out() {
        let inv = AllocationInventory::new();
        let a = [1u8; 16];
        inv.record(a.as_ptr() as usize, 16, AgentId(1), Origin::Pool);
        let plan = || SnapshotPlan::new(&inv, AgentId(1), &[], u64::MAX).unwrap();
        let mut mem = HostMemory::new();
        mem.fail_reads = true;
        assert_eq!(
            Snapshot::capture(plan(), &inv, &mut mem).unwrap_err(),
            DeclineReason::CopyFailed
        );
        let mut mem = HostMemory::new();
        mem.stuck = true;
        assert_eq!(
            Snapshot::capture(plan(), &inv, &mut mem).unwrap_err(),
            DeclineReason::CopyTimeout
        );
    }

    fn set(ranges: &[(usize, usize, usize)]) -> WriteSet {
        WriteSet {
            ranges: ranges
                .iter()
                .map(|&(index, offset, len)| DirtyRange { index, offset, len })
                .collect(),
            ..WriteSet::default()
        }
    }

    #[test]
    fn compare_sites_join_into_one_record_label() {
        let sites = |device, host| CompareSites { device, host };
        assert_eq!(sites(false, false).joined(None), None);
        assert_eq!(sites(true, false).joined(None), Some("device"));
        assert_eq!(sites(false, true).joined(None), Some("host"));
        assert_eq!(sites(true, true).joined(None), Some("device+host"));
        assert_eq!(
            sites(false, true).joined(Some("device")),
            Some("device+host")
        );
        assert_eq!(sites(true, false).joined(Some("device")), Some("device"));
        assert_eq!(sites(false, false).joined(Some("host")), Some("host"));
        assert_eq!(
            sites(true, false).joined(Some("device+host")),
            Some("device+host")
        );
    }

    #[test]
    fn write_sets_merge_small_gaps_and_subtract() {
        let w = set(&[(0, 0, 10), (0, 20, 10), (0, 100, 5), (1, 0, 4)]);
        assert_eq!(w.bytes(), 29);
        assert_eq!(
            w.merged(11),
            set(&[(0, 0, 30), (0, 100, 5), (1, 0, 4)]),
            "gaps below 11 merge, never across regions"
        );
        assert_eq!(w.merged(0), w);
        let other = set(&[(0, 5, 20), (0, 104, 1), (1, 0, 4)]);
        assert_eq!(w.minus(&other), set(&[(0, 0, 5), (0, 25, 5), (0, 100, 4)]));
        assert_eq!(w.minus(&WriteSet::default()), w);
        assert_eq!(w.minus(&w), WriteSet::default());
    }

    #[test]
    fn the_default_diff_finds_changed_granules_of_every_region() {
        let mut a = vec![0u8; 1000];
        let snap_a = a.clone();
        let mut b = vec![1u8; 70];
        let snap_b = b.clone();
        a[63] = 9; // granule 0
        a[64] = 9; // granule 1
        a[999] = 9; // short last granule (960..1000)
        b[0] = 0;
        let t = |d: &Vec<u8>, s: &Vec<u8>| Transfer {
            device: d.as_ptr() as usize,
            staging: s.as_ptr() as usize,
            len: d.len(),
        };
        let mut mem = HostMemory::new();
        let found = mem
            .diff(&[t(&a, &snap_a), t(&b, &snap_b)], &[false, false], 64)
            .unwrap();
        assert_eq!(
            found,
            vec![
                DirtyRange {
                    index: 0,
                    offset: 0,
                    len: 128
                },
                DirtyRange {
                    index: 0,
                    offset: 960,
                    len: 40
                },
                DirtyRange {
                    index: 1,
                    offset: 0,
                    len: 64
                },
            ]
        );
        mem.fail_reads = true;
        assert_eq!(
            mem.diff(&[t(&a, &snap_a)], &[false], 64),
            Err(DiffError::Failed)
        );
    }

    /// Memory whose "device" snapshot addresses are not the bytes the host would read there:
    /// only a copy (the device's view) yields the snapshot.
    struct DeviceStaged {
        /// (address the engine holds, the snapshot's real bytes)
        device_staging: Vec<(usize, Vec<u8>)>,
        copied: usize,
    }

    impl DeviceMemory for DeviceStaged {
        fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
            assert_eq!(direction, Direction::Capture);
            for t in transfers {
                self.copied += t.len;
                let src = self
                    .device_staging
                    .iter()
                    .find(|(a, v)| *a <= t.device && t.device < *a + v.len())
                    .map_or(t.device, |(a, v)| v.as_ptr() as usize + (t.device - a));
                // SAFETY: test buffers, live and separate from the scratch.
                unsafe {
                    std::ptr::copy_nonoverlapping(src as *const u8, t.staging as *mut u8, t.len)
                };
            }
            Ok(())
        }
    }

    #[test]
    fn a_snapshot_on_the_device_is_read_back_for_the_diff() {
        let mut a = vec![5u8; 300];
        let snapshot = a.clone();
        // What the host sees at the snapshot's address: not the snapshot.
        let garbage = vec![0xeeu8; 300];
        a[130] = 6;
        let t = Transfer {
            device: a.as_ptr() as usize,
            staging: garbage.as_ptr() as usize,
            len: a.len(),
        };
        let mut mem = DeviceStaged {
            device_staging: vec![(garbage.as_ptr() as usize, snapshot)],
            copied: 0,
        };
        let found = mem.diff(&[t], &[true], 64).unwrap();
        assert_eq!(
            found,
            vec![DirtyRange {
                index: 0,
                offset: 128,
                len: 64
            }],
            "compared with the read-back snapshot, not with host memory at its address"
        );
        assert_eq!(mem.copied, 600, "live bytes and snapshot both read back");
        // A host-resident snapshot is compared in place: one read.
        let mut mem = DeviceStaged {
            device_staging: Vec::new(),
            copied: 0,
        };
        let host = vec![5u8; 300];
        let t = Transfer {
            staging: host.as_ptr() as usize,
            ..t
        };
        assert_eq!(mem.diff(&[t], &[false], 64).unwrap().len(), 1);
        assert_eq!(mem.copied, 300);
    }

    /// Host memory handed out as "device" staging for the first `device` buffers, then as
    /// pinned host.
    struct Tiered {
        device: usize,
        bufs: Vec<Vec<u8>>,
    }

    unsafe fn forget_buffer(_: NonNull<u8>, _: usize, _: Tier) {}

    impl DeviceMemory for Tiered {
        fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
            let mut v = vec![0u8; size.max(1)];
            let ptr = NonNull::new(v.as_mut_ptr())?;
            self.bufs.push(v);
            let tier = if self.device > 0 {
                self.device -= 1;
                Tier::Device
            } else {
                Tier::PinnedHost
            };
            Some(Staging::Backend {
                ptr,
                len: size,
                capacity: size,
                tier,
                release: forget_buffer,
            })
        }
        fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
            // SAFETY: live test buffers.
            unsafe { host_copy(direction, transfers) };
            Ok(())
        }
    }

    #[test]
    fn the_staging_label_names_every_tier_of_the_snapshot() {
        let inv = AllocationInventory::new();
        let a = [1u8; 64];
        let b = [2u8; 64];
        inv.record(a.as_ptr() as usize, 64, AgentId(1), Origin::Pool);
        inv.record(b.as_ptr() as usize, 64, AgentId(1), Origin::Pool);
        let label = |device: usize| {
            let plan = SnapshotPlan::new(&inv, AgentId(1), &[], u64::MAX).unwrap();
            let mut mem = Tiered {
                device,
                bufs: Vec::new(),
            };
            Snapshot::capture(plan, &inv, &mut mem)
                .unwrap()
                .staging_label()
        };
        assert_eq!(label(2), Some("device"));
        assert_eq!(label(1), Some("device+pinned_host"));
        assert_eq!(label(0), Some("pinned_host"));
        let plan = SnapshotPlan::new(&inv, AgentId(1), &[], u64::MAX).unwrap();
        let heap = Snapshot::capture(plan, &inv, &mut HostMemory::new()).unwrap();
        assert_eq!(heap.staging_label(), Some("host"));
        let empty = AllocationInventory::new();
        let plan = SnapshotPlan::new(&empty, AgentId(1), &[], u64::MAX).unwrap();
        let none = Snapshot::capture(plan, &empty, &mut HostMemory::new()).unwrap();
        assert_eq!(none.staging_label(), None);
    }

    #[test]
    fn a_failed_restore_is_retried_once() {
        let inv = AllocationInventory::new();
        let mut a = [1u8; 16];
        inv.record(a.as_ptr() as usize, 16, AgentId(1), Origin::Pool);
        let plan = SnapshotPlan::new(&inv, AgentId(1), &[], u64::MAX).unwrap();
        let mut mem = HostMemory::new();
        let snap = Snapshot::capture(plan, &inv, &mut mem).unwrap();
        a.fill(3);
        mem.failing_writes = 1;
        assert!(
            snap.restore(&inv, &mut mem).is_ok(),
            "one failure is retried"
        );
        assert_eq!(a, [1u8; 16]);
        a.fill(3);
        mem.failing_writes = 2;
        assert_eq!(snap.restore(&inv, &mut mem), Err(RestoreError::Failed));
    }
}
