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
    #[allow(dead_code)] // produced by the CUDA backend's arena
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

    /// Performs every transfer of the batch, waiting (with the backend's copy deadline) until
    /// all are complete.
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError>;
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
    fn leak(self) {
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
}

/// What a restore did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestoreStats {
    pub(crate) bytes: u64,
    pub(crate) skipped: u32,
    pub(crate) time: Duration,
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

    /// Gives up the snapshot after a stuck restore: its staging may still be read by copies.
    pub(crate) fn leak(self) {
        self.regions.into_iter().for_each(|(_, buf)| buf.leak());
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
