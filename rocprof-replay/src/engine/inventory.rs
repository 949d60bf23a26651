//! The allocation inventory: live device allocations that a replay must snapshot.
//!
//! Backends record every allocation the classifier keeps (coarse-grained device memory, not
//! kernarg, not fine-grained, not host, not executable) with the owning agent. Each record gets
//! a process-unique generation number, so a restore can tell a region that is still the same
//! allocation from one that was freed and whose address was reused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};

use crate::dispatch::AgentId;

/// Where an allocation came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `hsa_amd_memory_pool_allocate`.
    Pool,
    /// `hsa_memory_allocate`.
    Region,
    /// A virtual-memory mapping (`hsa_amd_vmem_map`).
    VmemMapping,
}

/// One live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Allocation {
    pub(crate) base: usize,
    pub(crate) size: usize,
    pub(crate) agent: AgentId,
    pub(crate) generation: u64,
    pub(crate) origin: Origin,
}

/// Live device allocations per agent, behind a reader/writer lock.
pub(crate) struct AllocationInventory {
    tracking: AtomicBool,
    next_generation: AtomicU64,
    map: RwLock<BTreeMap<usize, Allocation>>,
}

impl AllocationInventory {
    /// An empty inventory that records nothing until [`enable`](Self::enable).
    pub(crate) const fn new() -> Self {
        AllocationInventory {
            tracking: AtomicBool::new(false),
            next_generation: AtomicU64::new(1),
            map: RwLock::new(BTreeMap::new()),
        }
    }

    /// Turns recording on (when a replay policy is registered).
    pub(crate) fn enable(&self) {
        self.tracking.store(true, Ordering::Release);
    }

    /// Whether allocations are being recorded (one relaxed load: the wrappers' fast path).
    #[inline]
    pub(crate) fn is_tracking(&self) -> bool {
        self.tracking.load(Ordering::Relaxed)
    }

    /// Records an allocation; replaces any stale record at the same base.
    pub(crate) fn record(&self, base: usize, size: usize, agent: AgentId, origin: Origin) -> u64 {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        self.map.write().insert(
            base,
            Allocation {
                base,
                size,
                agent,
                generation,
                origin,
            },
        );
        generation
    }

    /// Forgets the allocation starting at `base` (before the memory is released).
    pub(crate) fn remove(&self, base: usize) -> Option<Allocation> {
        self.map.write().remove(&base)
    }

    /// Forgets every allocation overlapping `[base, base + size)` (vmem unmap).
    pub(crate) fn remove_range(&self, base: usize, size: usize) -> usize {
        let end = base.saturating_add(size);
        let mut map = self.map.write();
        let doomed: Vec<usize> = map
            .range(..end)
            .filter(|(_, a)| a.base + a.size > base)
            .map(|(b, _)| *b)
            .collect();
        for b in &doomed {
            map.remove(b);
        }
        doomed.len()
    }

    /// The allocations owned by `agent`, in address order.
    pub(crate) fn owned_by(&self, agent: AgentId) -> Vec<Allocation> {
        self.map
            .read()
            .values()
            .filter(|a| a.agent == agent)
            .copied()
            .collect()
    }

    /// The agent owning the tracked allocation that contains `addr`, if any.
    pub(crate) fn agent_of(&self, addr: usize) -> Option<AgentId> {
        let map = self.map.read();
        let (_, a) = map.range(..=addr).next_back()?;
        (addr < a.base + a.size).then_some(a.agent)
    }

    /// Holds the read lock while `f` runs: frees wait, so a region checked live stays live.
    pub(crate) fn read(&self) -> InventoryView<'_> {
        InventoryView {
            map: self.map.read(),
        }
    }

    /// Number of live records.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.read().len()
    }
}

/// A read-locked view of the inventory.
pub(crate) struct InventoryView<'a> {
    map: RwLockReadGuard<'a, BTreeMap<usize, Allocation>>,
}

impl InventoryView<'_> {
    /// Whether the allocation captured as (`base`, `size`, `generation`) is still that
    /// allocation.
    pub(crate) fn still_live(&self, base: usize, size: usize, generation: u64) -> bool {
        self.map
            .get(&base)
            .is_some_and(|a| a.generation == generation && a.size >= size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_of_an_address_changes_the_generation() {
        let inv = AllocationInventory::new();
        let g1 = inv.record(0x1000, 64, AgentId(1), Origin::Pool);
        assert!(inv.read().still_live(0x1000, 64, g1));
        inv.remove(0x1000);
        assert!(!inv.read().still_live(0x1000, 64, g1));
        let g2 = inv.record(0x1000, 64, AgentId(1), Origin::Pool);
        assert_ne!(g1, g2);
        assert!(!inv.read().still_live(0x1000, 64, g1));
        assert!(inv.read().still_live(0x1000, 64, g2));
        assert!(
            !inv.read().still_live(0x1000, 128, g2),
            "a smaller allocation is not the same"
        );
    }

    #[test]
    fn owned_by_filters_agents_and_remove_range_drops_overlaps() {
        let inv = AllocationInventory::new();
        inv.record(0x1000, 0x100, AgentId(1), Origin::Pool);
        inv.record(0x2000, 0x100, AgentId(2), Origin::Pool);
        inv.record(0x3000, 0x100, AgentId(1), Origin::VmemMapping);
        assert_eq!(inv.owned_by(AgentId(1)).len(), 2);
        assert_eq!(inv.agent_of(0x1080), Some(AgentId(1)));
        assert_eq!(inv.agent_of(0x2000), Some(AgentId(2)));
        assert_eq!(inv.agent_of(0x2100), None);
        assert_eq!(inv.agent_of(0x10), None);
        assert_eq!(inv.remove_range(0x1080, 0x1000), 2);
        assert_eq!(inv.len(), 1);
    }
}
