//! The allocation inventory: live device allocations that a replay must snapshot.
//!
//! Backends record every allocation the classifier keeps (coarse-grained device memory, not
//! kernarg, not fine-grained, not host, not executable) with the owning agent. Each record gets
//! a process-unique generation number, so a restore can tell a region that is still the same
//! allocation from one that was freed and whose address was reused.
//!
//! While a snapshot copies an allocation's bytes, the allocation is *pinned* ([`pin`]): a free
//! removes the record at once (so nothing new can pin it) and then waits until no copy uses
//! the memory before the runtime releases it. Allocations and frees of unpinned memory never
//! wait for a copy.
//!
//! [`pin`]: AllocationInventory::pin

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use smallvec::SmallVec;

use crate::dispatch::AgentId;
use crate::engine::snapshot::{Region, RegionKind};

/// Longest a free waits for a copy of its memory, unless set otherwise: copies have their own
/// deadline, after which the window stops using the memory, so this is only a backstop.
const DEFAULT_FREE_WAIT: Duration = Duration::from_secs(600);

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

/// Generations are unique in the process, across inventories (tests make several): carried
/// fingerprints ([`footprint`](crate::engine::footprint)) are keyed by base and generation.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Live device allocations per agent, behind a reader/writer lock.
pub(crate) struct AllocationInventory {
    tracking: AtomicBool,
    map: RwLock<BTreeMap<usize, Allocation>>,
    /// Bases of allocations a copy is using, with the number of users.
    pinned: Mutex<SmallVec<[(usize, u32); 8]>>,
    unpinned: Condvar,
    /// Longest a free waits for a pinned region, in milliseconds.
    free_wait_ms: AtomicU64,
}

impl AllocationInventory {
    /// An empty inventory that records nothing until [`enable`](Self::enable).
    pub(crate) const fn new() -> Self {
        AllocationInventory {
            tracking: AtomicBool::new(false),
            map: RwLock::new(BTreeMap::new()),
            pinned: Mutex::new(SmallVec::new_const()),
            unpinned: Condvar::new(),
            free_wait_ms: AtomicU64::new(DEFAULT_FREE_WAIT.as_millis() as u64),
        }
    }

    /// Sets the longest time a free waits for a copy of its memory.
    pub(crate) fn set_free_wait(&self, wait: Duration) {
        self.free_wait_ms
            .store(wait.as_millis() as u64, Ordering::Relaxed);
    }

    /// Turns recording off (a forked child runs without replay).
    pub(crate) fn disable(&self) {
        self.tracking.store(false, Ordering::Release);
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
        let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
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

    /// Forgets the allocation starting at `base`, then waits until no copy uses it: call it
    /// before the memory is released.
    pub(crate) fn remove(&self, base: usize) -> Option<Allocation> {
        let removed = self.map.write().remove(&base);
        if removed.is_some() {
            self.wait_unpinned(|b| b == base);
        }
        removed
    }

    /// Forgets every allocation overlapping `[base, base + size)` (vmem unmap), then waits
    /// until no copy uses any of them.
    pub(crate) fn remove_range(&self, base: usize, size: usize) -> usize {
        self.take_range(base, size).len()
    }

    /// [`remove_range`](Self::remove_range), returning the allocations forgotten (memory that
    /// stays alive but leaves the inventory: it was exported).
    pub(crate) fn take_range(&self, base: usize, size: usize) -> Vec<Allocation> {
        let end = base.saturating_add(size);
        let doomed: Vec<Allocation> = {
            let mut map = self.map.write();
            let doomed: Vec<usize> = map
                .range(..end)
                .filter(|(_, a)| a.base + a.size > base)
                .map(|(b, _)| *b)
                .collect();
            doomed.iter().filter_map(|b| map.remove(b)).collect()
        };
        if !doomed.is_empty() {
            self.wait_unpinned(|b| doomed.iter().any(|a| a.base == b));
        }
        doomed
    }

    /// Waits (bounded by the free wait) until no pinned base matches `doomed`.
    fn wait_unpinned(&self, doomed: impl Fn(usize) -> bool) {
        let mut pinned = self.pinned.lock();
        if !pinned.iter().any(|(b, _)| doomed(*b)) {
            return;
        }
        let wait = Duration::from_millis(self.free_wait_ms.load(Ordering::Relaxed));
        let until = Instant::now() + wait;
        while pinned.iter().any(|(b, _)| doomed(*b)) {
            if self.unpinned.wait_until(&mut pinned, until).timed_out() {
                tracing::error!(
                    "a free waited {wait:?} for a snapshot copy of its memory; releasing it anyway"
                );
                return;
            }
        }
    }

    /// Pins the regions that are still the allocations they were planned as (module variables
    /// always count as live), so that frees of them wait until the returned [`Pins`] drop.
    pub(crate) fn pin<'r>(&self, regions: impl Iterator<Item = &'r Region>) -> Pins<'_> {
        let map = self.map.read();
        let mut pinned = self.pinned.lock();
        let mut live = Vec::new();
        let mut bases = SmallVec::new();
        for r in regions {
            let ok = match r.kind {
                RegionKind::Allocation { generation } => map
                    .get(&r.base)
                    .is_some_and(|a| a.generation == generation && a.size >= r.size),
                RegionKind::ModuleVariable => true,
            };
            if ok && matches!(r.kind, RegionKind::Allocation { .. }) {
                match pinned.iter_mut().find(|(b, _)| *b == r.base) {
                    Some((_, n)) => *n += 1,
                    None => pinned.push((r.base, 1)),
                }
                bases.push(r.base);
            }
            live.push(ok);
        }
        Pins {
            inventory: self,
            bases,
            live,
        }
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

    /// Whether `agent` owns any tracked allocation (stops at the first; no copy). Used by the
    /// CUDA backend's owner fencing and the HSA backend's peer-memory check.
    pub(crate) fn owns_any(&self, agent: AgentId) -> bool {
        self.map.read().values().any(|a| a.agent == agent)
    }

    /// The agent owning the tracked allocation that contains `addr`, if any.
    pub(crate) fn agent_of(&self, addr: usize) -> Option<AgentId> {
        let map = self.map.read();
        let (_, a) = map.range(..=addr).next_back()?;
        (addr < a.base + a.size).then_some(a.agent)
    }

    /// The first of `addrs` inside a tracked allocation that an agent other than `agent`
    /// owns, with that owner (one read lock for all of them).
    pub(crate) fn first_owned_by_other(
        &self,
        addrs: impl Iterator<Item = usize>,
        agent: AgentId,
    ) -> Option<(usize, AgentId)> {
        let map = self.map.read();
        addrs.into_iter().find_map(|addr| {
            let (_, a) = map.range(..=addr).next_back()?;
            (addr < a.base + a.size && a.agent != agent).then_some((addr, a.agent))
        })
    }

    /// How the tracked allocation that contains `addr` was made, if one does.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn origin_of(&self, addr: usize) -> Option<Origin> {
        let map = self.map.read();
        let (_, a) = map.range(..=addr).next_back()?;
        (addr < a.base + a.size).then_some(a.origin)
    }

    /// Number of live records.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.read().len()
    }
}

#[cfg(test)]
impl AllocationInventory {
    /// Whether the allocation at `base` is pinned now (tests).
    pub(crate) fn is_pinned_now(&self, base: usize) -> bool {
        self.pinned.lock().iter().any(|(b, _)| *b == base)
    }
}

/// Regions pinned by [`AllocationInventory::pin`]; dropping it unpins them.
pub(crate) struct Pins<'a> {
    inventory: &'a AllocationInventory,
    bases: SmallVec<[usize; 8]>,
    live: Vec<bool>,
}

impl Pins<'_> {
    /// Whether the `i`-th region passed to `pin` was live (and, if an allocation, is pinned).
    pub(crate) fn is_pinned(&self, i: usize) -> bool {
        self.live.get(i).copied().unwrap_or(false)
    }
}

impl Drop for Pins<'_> {
    fn drop(&mut self) {
        if self.bases.is_empty() {
            return;
        }
        let mut pinned = self.inventory.pinned.lock();
        for base in &self.bases {
            if let Some(i) = pinned.iter().position(|(b, _)| b == base) {
                pinned[i].1 -= 1;
                if pinned[i].1 == 0 {
                    pinned.swap_remove(i);
                }
            }
        }
        self.inventory.unpinned.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(base: usize, size: usize, generation: u64) -> Region {
        Region {
            base,
            size,
            kind: RegionKind::Allocation { generation },
        }
    }

    #[test]
    fn reuse_of_an_address_changes_the_generation() {
        let inv = AllocationInventory::new();
        let live = |r: Region| inv.pin(std::iter::once(&r)).is_pinned(0);
        let g1 = inv.record(0x1000, 64, AgentId(1), Origin::Pool);
        assert!(live(region(0x1000, 64, g1)));
        inv.remove(0x1000);
        assert!(!live(region(0x1000, 64, g1)));
        let g2 = inv.record(0x1000, 64, AgentId(1), Origin::Pool);
        assert_ne!(g1, g2);
        assert!(!live(region(0x1000, 64, g1)));
        assert!(live(region(0x1000, 64, g2)));
        assert!(
            !live(region(0x1000, 128, g2)),
            "a smaller allocation is not the same"
        );
    }

    #[test]
    fn a_free_waits_for_the_copy_of_a_pinned_region_and_only_for_that() {
        let inv = std::sync::Arc::new(AllocationInventory::new());
        let g = inv.record(0x1000, 64, AgentId(1), Origin::Pool);
        inv.record(0x2000, 64, AgentId(1), Origin::Pool);
        let r = region(0x1000, 64, g);
        let pins = inv.pin(std::iter::once(&r));
        assert!(pins.is_pinned(0));
        // An unrelated free and a new allocation go through while the pin is held.
        assert!(inv.remove(0x2000).is_some());
        inv.record(0x3000, 64, AgentId(1), Origin::Pool);
        let freed = std::sync::Arc::new(AtomicBool::new(false));
        let t = {
            let (inv, freed) = (inv.clone(), freed.clone());
            std::thread::spawn(move || {
                inv.remove(0x1000);
                freed.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !freed.load(Ordering::SeqCst),
            "the free did not wait for the copy"
        );
        drop(pins);
        t.join().unwrap();
        assert!(freed.load(Ordering::SeqCst));
        // Once removed, the region can no longer be pinned.
        assert!(!inv.pin(std::iter::once(&r)).is_pinned(0));
    }

    #[test]
    fn a_free_gives_up_waiting_at_its_deadline() {
        let inv = AllocationInventory::new();
        inv.set_free_wait(Duration::from_millis(20));
        let g = inv.record(0x1000, 64, AgentId(1), Origin::Pool);
        let r = region(0x1000, 64, g);
        let _pins = inv.pin(std::iter::once(&r));
        assert!(inv.remove(0x1000).is_some());
    }

    #[test]
    fn owned_by_filters_agents_and_remove_range_drops_overlaps() {
        let inv = AllocationInventory::new();
        inv.record(0x1000, 0x100, AgentId(1), Origin::Pool);
        inv.record(0x2000, 0x100, AgentId(2), Origin::Pool);
        inv.record(0x3000, 0x100, AgentId(1), Origin::VmemMapping);
        assert_eq!(inv.owned_by(AgentId(1)).len(), 2);
        assert!(inv.owns_any(AgentId(2)));
        assert!(!inv.owns_any(AgentId(3)));
        assert_eq!(inv.agent_of(0x1080), Some(AgentId(1)));
        assert_eq!(inv.agent_of(0x2000), Some(AgentId(2)));
        assert_eq!(inv.agent_of(0x2100), None);
        assert_eq!(inv.agent_of(0x10), None);
        // Another agent's allocation among some addresses: the first such address.
        let words = [0x10, 0x1080, 0x2100, 0x2010, 0x3000];
        assert_eq!(
            inv.first_owned_by_other(words.into_iter(), AgentId(1)),
            Some((0x2010, AgentId(2)))
        );
        assert_eq!(
            inv.first_owned_by_other([0x1080, 0x30ff].into_iter(), AgentId(1)),
            None
        );
        let taken = inv.take_range(0x1080, 0x1000);
        assert_eq!(
            taken.iter().map(|a| (a.base, a.size)).collect::<Vec<_>>(),
            vec![(0x1000, 0x100), (0x2000, 0x100)]
        );
        assert_eq!(inv.remove_range(0x3000, 1), 1);
        assert_eq!(inv.len(), 0);
    }
}
