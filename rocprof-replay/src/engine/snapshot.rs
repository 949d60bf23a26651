//! Snapshot plan, capture and restore.
//!
//! A [`SnapshotPlan`] lists what a replay must restore on one agent: the inventory's
//! allocations owned by the agent plus the module-scope variables the backend found at snapshot
//! time. Capture copies each region into host memory; an incomplete snapshot is never used:
//! capture returns a [`DeclineReason`] and the dispatch runs once instead. Restore re-validates
//! every allocation under the inventory's read lock and skips (with a warning) a region that
//! was freed or re-allocated since capture.

use std::time::{Duration, Instant};

use crate::engine::inventory::AllocationInventory;
use crate::policy::DeclineReason;

/// Copies between device memory and host buffers; implemented by each backend.
pub(crate) trait DeviceMemory {
    /// Copies `dst.len()` bytes from device address `src` into `dst`.
    fn read(&mut self, src: usize, dst: &mut [u8]) -> bool;
    /// Copies `src` to device address `dst`.
    fn write(&mut self, dst: usize, src: &[u8]) -> bool;
    /// Host memory for `size` bytes of snapshot, or `None` when it cannot be had. Backends
    /// return runtime-allocated (pinned) host memory; the default is the process heap.
    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        Staging::heap(size)
    }
}

/// A host buffer holding one captured region.
pub(crate) enum Staging {
    /// Process heap.
    Heap(Vec<u8>),
    /// Memory from the runtime (pinned host memory), released with `free`.
    Runtime {
        /// Start of the buffer.
        ptr: std::ptr::NonNull<u8>,
        /// Bytes in use (the region's size).
        len: usize,
        /// Bytes allocated (`>= len`; a retained buffer may be larger than the region).
        capacity: usize,
        /// Gives the buffer back to the backend (to keep for later snapshots, or to free).
        release: unsafe fn(*mut u8, usize),
    },
}

// SAFETY: a runtime buffer is plain host memory owned exclusively by this value.
unsafe impl Send for Staging {}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Staging::Heap(v) => write!(f, "Staging::Heap({} bytes)", v.len()),
            Staging::Runtime { len, .. } => write!(f, "Staging::Runtime({len} bytes)"),
        }
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

    /// The buffer's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Staging::Heap(v) => v,
            // SAFETY: `ptr` is a live allocation of `len` bytes owned by this value.
            Staging::Runtime { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }

    /// The buffer's bytes, writable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Staging::Heap(v) => v,
            // SAFETY: as above, and `&mut self` makes the access exclusive.
            Staging::Runtime { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Staging::Runtime {
            ptr,
            capacity,
            release,
            ..
        } = self
        {
            // SAFETY: the buffer came from the backend `release` belongs to and is given back
            // exactly once.
            unsafe { release(ptr.as_ptr(), *capacity) };
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
    pub(crate) bytes: u64,
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
        let bytes = regions.iter().map(|r| r.size as u64).sum();
        if bytes > budget {
            return Err(DeclineReason::OverBudget);
        }
        Ok(SnapshotPlan { regions, bytes })
    }
}

/// Captured regions.
#[derive(Debug)]
pub(crate) struct Snapshot {
    regions: Vec<(Region, Staging)>,
    pub(crate) bytes: u64,
    pub(crate) capture_time: Duration,
}

/// What a restore did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestoreStats {
    pub(crate) bytes: u64,
    pub(crate) skipped: u32,
    pub(crate) time: Duration,
}

impl Snapshot {
    /// Copies every planned region into host memory; any failure declines the whole snapshot.
    pub(crate) fn capture(
        plan: SnapshotPlan,
        mem: &mut dyn DeviceMemory,
    ) -> Result<Snapshot, DeclineReason> {
        let start = Instant::now();
        let mut regions = Vec::new();
        regions
            .try_reserve_exact(plan.regions.len())
            .map_err(|_| DeclineReason::SnapshotAllocFailed)?;
        for region in plan.regions {
            let mut buf = mem
                .alloc_staging(region.size)
                .ok_or(DeclineReason::SnapshotAllocFailed)?;
            if !mem.read(region.base, buf.as_mut_slice()) {
                return Err(DeclineReason::CopyFailed);
            }
            regions.push((region, buf));
        }
        Ok(Snapshot {
            regions,
            bytes: plan.bytes,
            capture_time: start.elapsed(),
        })
    }

    /// Writes every region back; allocations freed or re-allocated since capture are skipped.
    /// A failed copy stops the restore and is reported as [`DeclineReason::CopyFailed`].
    pub(crate) fn restore(
        &self,
        inventory: &AllocationInventory,
        mem: &mut dyn DeviceMemory,
    ) -> Result<RestoreStats, DeclineReason> {
        let start = Instant::now();
        let mut stats = RestoreStats::default();
        let view = inventory.read();
        for (region, data) in &self.regions {
            if let RegionKind::Allocation { generation } = region.kind {
                if !view.still_live(region.base, region.size, generation) {
                    tracing::warn!(
                        base = format_args!("{:#x}", region.base),
                        size = region.size,
                        "region freed or reallocated during the replay window: not restored"
                    );
                    stats.skipped += 1;
                    continue;
                }
            }
            if !mem.write(region.base, data.as_slice()) {
                return Err(DeclineReason::CopyFailed);
            }
            stats.bytes += region.size as u64;
        }
        drop(view);
        stats.time = start.elapsed();
        Ok(stats)
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
        pub(crate) fail_writes: bool,
    }

    impl DeviceMemory for HostMemory {
        fn read(&mut self, src: usize, dst: &mut [u8]) -> bool {
            if self.fail_reads {
                return false;
            }
            // SAFETY: tests pass addresses of live buffers of at least dst.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
            true
        }
        fn write(&mut self, dst: usize, src: &[u8]) -> bool {
            if self.fail_writes {
                return false;
            }
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
            true
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
        assert_eq!(plan.bytes, 64 + 32 + 8);
        let mut mem = HostMemory {
            fail_reads: false,
            fail_writes: false,
        };
        let snap = Snapshot::capture(plan, &mut mem).unwrap();
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
    fn a_failed_copy_declines_the_snapshot() {
        let inv = AllocationInventory::new();
        let a = [1u8; 16];
        inv.record(a.as_ptr() as usize, 16, AgentId(1), Origin::Pool);
        let plan = SnapshotPlan::new(&inv, AgentId(1), &[], u64::MAX).unwrap();
        let mut mem = HostMemory {
            fail_reads: true,
            fail_writes: false,
        };
        assert_eq!(
            Snapshot::capture(plan, &mut mem).unwrap_err(),
            DeclineReason::CopyFailed
        );
    }
}
