//! The snapshot arena of one device (a CUDA context, an HSA GPU agent): device memory first,
//! pinned host memory when the device has no room, carved into one staging buffer per captured
//! region. Backends supply the memory ([`Memory`]); the arena's rules are the same for both.
//!
//! Before a capture the backend sizes the arena for the whole plan ([`Arena::prepare`]), so a
//! snapshot costs one allocation the first time and none while the footprint stays the same.
//! Between windows the arena is kept only while the device keeps a reserve free
//! ([`Arena::trim`]); an application allocation that would eat into the reserve releases it
//! first ([`Arena::relieve`]), and one that failed with out-of-memory while the arena held
//! device memory releases it at once, so the application's retry finds the memory. An
//! application allocation never has to compete with an arena that is not in use.
//!
//! Buffers handed out are counted per chunk (a process-wide registry maps an address back to
//! its chunk, see [`release`]). A chunk with buffers out is never reused or freed: one whose
//! snapshot is still being dropped (the previous window just ended) is skipped until it is
//! idle, and one whose buffers were leaked after a stuck copy stays out of use for good.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::engine::snapshot::{Staging, Tier};

/// Alignment of every staging buffer (whole cache lines, full-speed copies).
const ALIGN: usize = 256;
/// Smallest chunk added when a plan outgrows its estimate.
const MIN_CHUNK: usize = 64 << 20;

/// How the arena gets memory: the context's device memory and pinned host memory.
pub(crate) trait Memory {
    /// `(free, total)` device memory in bytes.
    fn device_info(&self) -> Option<(usize, usize)>;
    /// Device memory of the context, or `None`.
    fn alloc_device(&self, size: usize) -> Option<usize>;
    /// Frees what `alloc_device` returned.
    fn free_device(&self, ptr: usize);
    /// Pinned host memory accessible to the device, or `None`.
    fn alloc_pinned(&self, size: usize) -> Option<usize>;
    /// Frees what `alloc_pinned` returned.
    fn free_pinned(&self, ptr: usize);
    /// Device memory the arena leaves free for the application, given the device's total.
    fn reserve(&self, total: usize) -> usize {
        reserve(total)
    }
}

/// Whether an allocation of `request` bytes would leave the device with less than the reserve
/// free (whoever holds the memory; `false` where the device does not say).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn device_short(mem: &dyn Memory, request: usize) -> bool {
    mem.device_info()
        .is_some_and(|(free, total)| free < request.saturating_add(mem.reserve(total)))
}

/// Device memory the arena leaves free for the application: the larger of 1 GiB and 5% of the
/// device.
pub(crate) fn reserve(total: usize) -> usize {
    (total / 20).max(1 << 30)
}

struct Chunk {
    base: usize,
    capacity: usize,
    tier: Tier,
    /// Buffers of this chunk handed out and not released.
    outstanding: Arc<AtomicUsize>,
    /// Whether this window may carve from it (it was idle when the window began).
    usable: bool,
}

impl Chunk {
    fn busy(&self) -> bool {
        self.outstanding.load(Ordering::Acquire) > 0
    }
}

/// One context's arena.
#[derive(Default)]
pub(crate) struct Arena {
    chunks: Vec<Chunk>,
    /// Chunk being carved and the offset in it (valid during a window).
    cursor: (usize, usize),
    /// A window prepared the arena and has not ended: nothing is freed under it.
    in_window: bool,
}

/// Chunks of every arena: (base, end, outstanding counter).
static REGISTRY: Mutex<Vec<(usize, usize, Arc<AtomicUsize>)>> = Mutex::new(Vec::new());

/// Gives back a staging buffer carved from an arena.
///
/// # Safety
/// `ptr` was handed out by [`Arena::carve`] and is not used again.
pub(crate) unsafe fn release(ptr: NonNull<u8>, _capacity: usize, _tier: Tier) {
    let addr = ptr.as_ptr() as usize;
    let registry = REGISTRY.lock();
    if let Some((_, _, n)) = registry.iter().find(|(b, e, _)| *b <= addr && addr < *e) {
        n.fetch_sub(1, Ordering::AcqRel);
    }
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to).saturating_mul(to)
}

impl Arena {
    /// Whether any buffer of the arena is handed out (a window uses it, or a stuck copy
    /// leaked it).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> bool {
        self.chunks.iter().any(Chunk::busy)
    }

    /// Whether `addr` lies in a device-memory chunk of this arena.
    pub(crate) fn is_device(&self, addr: usize) -> bool {
        self.chunks
            .iter()
            .any(|c| c.tier == Tier::Device && c.base <= addr && addr < c.base + c.capacity)
    }

    /// Bytes of device memory held.
    pub(crate) fn device_bytes(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| c.tier == Tier::Device)
            .map(|c| c.capacity)
            .sum()
    }

    /// Readies the arena for a snapshot of about `bytes` (one window at a time): idle chunks are
    /// reused from the start, busy ones skipped, and when the idle ones are too small they are
    /// replaced by one chunk, device memory when the device keeps its reserve, else pinned host
    /// memory. The new chunk is half as large again as the idle ones it replaces when the device
    /// has room for that, so plans growing a little at a time (an application's caching
    /// allocator filling up) cost a few allocations, not one per window.
    pub(crate) fn prepare(&mut self, mem: &dyn Memory, bytes: usize) {
        self.cursor = (0, 0);
        self.in_window = true;
        let need = round_up(bytes.max(1), ALIGN).saturating_add(ALIGN * 64);
        let mut idle = 0usize;
        for c in &mut self.chunks {
            c.usable = !c.busy();
            if c.usable {
                idle += c.capacity;
            }
        }
        if idle >= need {
            return;
        }
        let started = crate::engine::phases::enabled().then(std::time::Instant::now);
        self.free_idle(mem);
        let grown = round_up(idle.saturating_add(idle / 2), ALIGN);
        let size = if grown > need && device_fits(mem, grown) {
            grown
        } else {
            need
        };
        if let Some(chunk) = new_chunk(mem, size) {
            self.chunks.push(chunk);
        }
        if let Some(t) = started {
            crate::engine::phases::add(crate::engine::phases::Phase::ArenaGrow, t.elapsed());
        }
    }

    /// A buffer of `size` bytes, or `None` when no memory can be had.
    pub(crate) fn carve(&mut self, mem: &dyn Memory, size: usize) -> Option<Staging> {
        let len = round_up(size.max(1), ALIGN);
        loop {
            let (i, off) = self.cursor;
            let Some(chunk) = self.chunks.get(i) else {
                break;
            };
            if chunk.usable && chunk.capacity - off >= len {
                self.cursor = (i, off + len);
                chunk.outstanding.fetch_add(1, Ordering::AcqRel);
                return Some(Staging::Backend {
                    ptr: NonNull::new((chunk.base + off) as *mut u8)?,
                    len: size,
                    capacity: len,
                    tier: chunk.tier,
                    release,
                });
            }
            self.cursor = (i + 1, 0);
        }
        // The plan outgrew the estimate: one more chunk.
        let chunk = new_chunk(mem, len.max(MIN_CHUNK))?;
        self.chunks.push(chunk);
        self.cursor = (self.chunks.len() - 1, 0);
        self.carve(mem, size)
    }

    /// The window using the arena is over; [`trim`](Self::trim) to follow once freeing is
    /// safe (on CUDA a free may synchronise the context, which must not happen while the
    /// window's gates still hold the application's streams).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn end_window(&mut self) {
        self.in_window = false;
    }

    /// After a window: keeps the arena only while the device keeps its reserve free, and
    /// pinned host chunks only up to 1 GiB.
    pub(crate) fn trim(&mut self, mem: &dyn Memory) {
        self.in_window = false;
        let low = mem
            .device_info()
            .is_none_or(|(free, total)| free < mem.reserve(total));
        let host: usize = self
            .chunks
            .iter()
            .filter(|c| c.tier != Tier::Device)
            .map(|c| c.capacity)
            .sum();
        if low || host > (1 << 30) {
            self.free_idle(mem);
        }
    }

    /// Whether a window is using the arena right now (its memory cannot be released).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn in_window(&self) -> bool {
        self.in_window
    }

    /// Whether an application allocation of `request` bytes would leave less than the reserve
    /// free while the arena holds device memory (so [`relieve`](Self::relieve) would release
    /// it, once no window uses it).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn short_for(&self, mem: &dyn Memory, request: usize) -> bool {
        self.device_bytes() > 0 && device_short(mem, request)
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    /// Before an application allocation of `request` bytes: releases the device chunks when
    /// the allocation would leave less than the reserve free. Returns the bytes released.
    pub(crate) fn relieve(&mut self, mem: &dyn Memory, request: usize) -> usize {
        let held = self.device_bytes();
        if held == 0 || self.in_window {
            return 0;
        }
        let Some((free, total)) = mem.device_info() else {
            return 0;
        };
        if free >= request.saturating_add(mem.reserve(total)) {
            return 0;
        }
        self.free_idle(mem);
        held - self.device_bytes()
    }

    /// Releases every chunk not in use (after an application allocation failed). Returns the
    /// device bytes released.
    pub(crate) fn release_now(&mut self, mem: &dyn Memory) -> usize {
        if self.in_window {
            return 0;
        }
        let held = self.device_bytes();
        self.free_idle(mem);
        held - self.device_bytes()
    }

    /// Drops chunks without freeing them (their context is being destroyed, which frees
    /// them).
    pub(crate) fn abandon(&mut self) {
        let mut registry = REGISTRY.lock();
        for c in self.chunks.drain(..) {
            registry.retain(|(b, _, _)| *b != c.base);
        }
    }

    /// Frees every chunk without buffers out.
    fn free_idle(&mut self, mem: &dyn Memory) {
        let mut registry = REGISTRY.lock();
        for c in std::mem::take(&mut self.chunks) {
            if c.busy() {
                // Never free memory a snapshot (or a stuck copy) may still use.
                self.chunks.push(c);
                continue;
            }
            registry.retain(|(b, _, _)| *b != c.base);
            match c.tier {
                Tier::Device => mem.free_device(c.base),
                _ => mem.free_pinned(c.base),
            }
        }
        self.cursor = (0, 0);
    }
}

impl Drop for Arena {
    /// Forgets the chunks' registry entries (their memory is the owner's to free).
    fn drop(&mut self) {
        self.abandon();
    }
}

/// Whether `size` bytes of device memory leave the device its reserve.
fn device_fits(mem: &dyn Memory, size: usize) -> bool {
    mem.device_info()
        .is_some_and(|(free, total)| free >= size.saturating_add(mem.reserve(total)))
}

fn new_chunk(mem: &dyn Memory, size: usize) -> Option<Chunk> {
    let (base, tier) = match device_fits(mem, size)
        .then(|| mem.alloc_device(size))
        .flatten()
    {
        Some(p) => (p, Tier::Device),
        None => (mem.alloc_pinned(size)?, Tier::PinnedHost),
    };
    let outstanding = Arc::new(AtomicUsize::new(0));
    REGISTRY
        .lock()
        .push((base, base + size, outstanding.clone()));
    Some(Chunk {
        base,
        capacity: size,
        tier,
        outstanding,
        usable: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Fake memory: allocations come from host heap buffers.
    struct Fake {
        free: usize,
        total: usize,
        device: RefCell<Vec<(usize, Vec<u8>)>>,
        pinned: RefCell<Vec<(usize, Vec<u8>)>>,
        refuse_pinned: bool,
        /// Device allocations made, freed or not.
        device_allocs: std::cell::Cell<usize>,
    }

    impl Fake {
        fn new(free: usize, total: usize) -> Fake {
            Fake {
                free,
                total,
                device: RefCell::default(),
                pinned: RefCell::default(),
                refuse_pinned: false,
                device_allocs: std::cell::Cell::new(0),
            }
        }
        fn alloc(list: &RefCell<Vec<(usize, Vec<u8>)>>, size: usize) -> usize {
            // Real buffers of the full size: the registry maps addresses to chunks, so chunks
            // of different arenas must not overlap.
            let v = vec![0u8; size];
            let p = v.as_ptr() as usize;
            list.borrow_mut().push((p, v));
            p
        }
    }

    impl Memory for Fake {
        fn device_info(&self) -> Option<(usize, usize)> {
            let used: usize = self.device.borrow().iter().map(|(_, v)| v.len()).sum();
            Some((self.free.saturating_sub(used), self.total))
        }
        fn alloc_device(&self, size: usize) -> Option<usize> {
            self.device_allocs.set(self.device_allocs.get() + 1);
            Some(Fake::alloc(&self.device, size))
        }
        fn free_device(&self, ptr: usize) {
            self.device.borrow_mut().retain(|(p, _)| *p != ptr);
        }
        fn alloc_pinned(&self, size: usize) -> Option<usize> {
            (!self.refuse_pinned).then(|| Fake::alloc(&self.pinned, size))
        }
        fn free_pinned(&self, ptr: usize) {
            self.pinned.borrow_mut().retain(|(p, _)| *p != ptr);
        }
    }

    const GIB: usize = 1 << 30;

    #[test]
    fn a_device_arena_is_sized_once_and_reused() {
        let mem = Fake::new(100 * GIB, 140 * GIB);
        let mut arena = Arena::default();
        arena.prepare(&mem, 3000);
        let a = arena.carve(&mem, 1000).unwrap();
        let b = arena.carve(&mem, 2000).unwrap();
        assert_eq!(a.tier(), Tier::Device);
        assert_eq!(
            b.addr() - a.addr(),
            1024,
            "buffers are 256-byte aligned, packed"
        );
        assert!(arena.in_use());
        drop((a, b));
        assert!(!arena.in_use());
        assert_eq!(mem.device.borrow().len(), 1);
        arena.prepare(&mem, 3000);
        let c = arena.carve(&mem, 10).unwrap();
        assert_eq!(mem.device.borrow().len(), 1, "no new allocation");
        drop(c);
    }

    #[test]
    fn without_room_on_the_device_the_arena_is_pinned_host_memory() {
        let mem = Fake::new(GIB / 2, 140 * GIB);
        let mut arena = Arena::default();
        arena.prepare(&mem, 4096);
        assert_eq!(arena.carve(&mem, 4096).unwrap().tier(), Tier::PinnedHost);
        let mut none = Fake::new(0, 140 * GIB);
        none.refuse_pinned = true;
        let mut arena = Arena::default();
        arena.prepare(&none, 4096);
        assert!(arena.carve(&none, 4096).is_none());
    }

    #[test]
    fn plans_growing_a_little_at_a_time_cost_a_few_allocations() {
        let mem = Fake::new(100 * GIB, 140 * GIB);
        let mut arena = Arena::default();
        // A caching allocator filling up: each window's plan 5% larger than the last.
        let mut bytes = 1usize << 20;
        for _ in 0..40 {
            arena.prepare(&mem, bytes);
            drop(arena.carve(&mem, bytes).unwrap());
            arena.trim(&mem);
            bytes += bytes / 20;
        }
        let allocs = mem.device_allocs.get();
        assert!(
            allocs <= 8,
            "{allocs} device allocations for 40 windows whose plans grew 7x"
        );
        assert_eq!(mem.device.borrow().len(), 1, "one chunk held");
        assert!(
            arena.device_bytes() < 2 * bytes,
            "held {}",
            arena.device_bytes()
        );
    }

    #[test]
    fn a_device_without_room_to_grow_the_arena_gets_the_plan_size() {
        // Room for the reserve (1 GiB of this 16 GiB device) and 3 MiB more.
        let mem = Fake::new(GIB + (3 << 20), 16 * GIB);
        let mut arena = Arena::default();
        arena.prepare(&mem, 2 << 20);
        drop(arena.carve(&mem, 2 << 20).unwrap());
        arena.trim(&mem);
        // 1.5x the first chunk would not leave the reserve: the plan's own size does.
        arena.prepare(&mem, (5 << 20) / 2);
        let buf = arena.carve(&mem, (5 << 20) / 2).unwrap();
        assert_eq!(buf.tier(), Tier::Device);
        assert!(
            arena.device_bytes() < 3 << 20,
            "held {}",
            arena.device_bytes()
        );
        drop(buf);
    }

    #[test]
    fn a_plan_larger_than_its_estimate_gets_another_chunk() {
        let mem = Fake::new(100 * GIB, 140 * GIB);
        let mut arena = Arena::default();
        arena.prepare(&mem, 256);
        let bufs: Vec<Staging> = (0..100).map(|_| arena.carve(&mem, 256).unwrap()).collect();
        assert_eq!(mem.device.borrow().len(), 2);
        drop(bufs);
    }

    #[test]
    fn an_application_allocation_near_the_reserve_releases_an_idle_arena() {
        let mem = Fake::new(10 * GIB, 140 * GIB);
        let mut arena = Arena::default();
        arena.prepare(&mem, 4096);
        let buf = arena.carve(&mem, 4096).unwrap();
        assert_eq!(
            arena.relieve(&mem, 9 * GIB),
            0,
            "an arena in use is never released"
        );
        drop(buf);
        assert_eq!(arena.relieve(&mem, 9 * GIB), 0, "a window is running: kept");
        arena.trim(&mem);
        assert_eq!(arena.relieve(&mem, GIB), 0, "plenty left: kept");
        assert!(arena.relieve(&mem, 9 * GIB) > 0);
        assert_eq!(arena.device_bytes(), 0);
        assert!(mem.device.borrow().is_empty());
    }

    #[test]
    fn a_chunk_still_held_by_the_last_snapshot_is_skipped_not_given_up() {
        let mem = Fake::new(100 * GIB, 140 * GIB);
        let mut arena = Arena::default();
        arena.prepare(&mem, 4096);
        let old = arena.carve(&mem, 4096).unwrap();
        arena.trim(&mem);
        // The next window begins before the last snapshot is dropped.
        arena.prepare(&mem, 4096);
        let new = arena.carve(&mem, 4096).unwrap();
        assert_ne!(new.addr(), old.addr());
        drop(old);
        drop(new);
        arena.trim(&mem);
        arena.prepare(&mem, 4096);
        let again = arena.carve(&mem, 4096).unwrap();
        assert_eq!(
            mem.device.borrow().len(),
            2,
            "both chunks kept, none leaked"
        );
        drop(again);
    }

    #[test]
    fn leaked_buffers_keep_their_chunk_out_of_use() {
        let mem = Fake::new(100 * GIB, 140 * GIB);
        let mut arena = Arena::default();
        arena.prepare(&mem, 4096);
        let buf = arena.carve(&mem, 4096).unwrap();
        let first = buf.addr();
        std::mem::forget(buf); // a stuck copy
        arena.trim(&mem);
        assert_eq!(arena.release_now(&mem), 0, "in use: not freed");
        arena.prepare(&mem, 4096);
        let buf = arena.carve(&mem, 4096).unwrap();
        assert_ne!(buf.addr(), first, "the leaked chunk is not reused");
        drop(buf);
    }
}
