//! Memory a kernel can write that the allocation inventory does not hold, because a replay
//! must neither capture nor restore it: the launch declines before pass 1 instead when its
//! arguments point into it (`refusal` in `cuda/window/launch.rs`).
//!
//! | kind | recorded from | why it is not snapshotted | a launch pointing into it |
//! |---|---|---|---|
//! | pinned, mapped | `cuMemHostAlloc`, `cuMemAllocHost` | host threads read and write it at any time | `host_memory` |
//! | registered | `cuMemHostRegister` | the same | `host_memory` |
//! | managed | `cuMemAllocManaged` | the same, without any API call (a restore could undo a host thread's write) | `host_memory` |
//! | IPC import | `cuIpcOpenMemHandle` | another process owns and writes it | `foreign_memory` |
//! | IPC export | `cuIpcGetMemHandle`, `cuMemPoolExportPointer` of the context's own allocation, or `cuMemGetHandleForAddressRange` of a range of it (moved out of the inventory, whole) | another process or device may open and write it | `foreign_memory` |
//! | pool import | `cuMemPoolImportPointer` | another process owns and writes it | `foreign_memory` |
//! | mapping of host-located physical memory | `cuMemMap` of a handle `cuMemCreate` made with a host location, or `cuMemRetainAllocationHandle` of such a mapping | host threads may write it once the application grants the CPU access | `host_memory` |
//! | mapping of an imported or exported handle | `cuMemMap` of a handle from `cuMemImportFromShareableHandle`, `cuMulticastCreate`, or `cuMemRetainAllocationHandle` of such a mapping; a mapping of a handle `cuMemExportToShareableHandle` exported (before or after the export) | another process or GPU writes it | `foreign_memory` |
//!
//! Allocations of another context of the process (peer access) are in the inventory, under
//! their owner; a launch pointing into one declines `peer_memory` (its owner's streams are
//! not drained or fenced by this context's window).
//!
//! Nothing here is fingerprinted either, so carried fingerprints
//! ([`footprint`](crate::engine::footprint)) never describe memory the host or a peer writes.

use std::collections::{BTreeMap, HashMap};

use crate::engine::gate;

/// What a range is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cuMemHostAlloc`, `cuMemAllocHost`: freed by `cuMemFreeHost`.
    Pinned,
    /// `cuMemHostRegister`: released by `cuMemHostUnregister`.
    Registered,
    /// `cuMemAllocManaged`: freed by `cuMemFree` or with its context.
    Managed,
    /// `cuIpcOpenMemHandle`: closed by `cuIpcCloseMemHandle` or with its context.
    IpcImport,
    /// An allocation of the context exported with `cuIpcGetMemHandle`,
    /// `cuMemPoolExportPointer` or `cuMemGetHandleForAddressRange`: until `cuMemFree` (or
    /// `cuMemUnmap`) or its context's destruction.
    IpcExport,
    /// `cuMemPoolImportPointer`: until `cuMemFree` or its context's destruction.
    PoolImport,
    /// A `cuMemMap` of an imported or exported handle: until `cuMemUnmap` (mappings are
    /// process-wide).
    ImportedMapping,
    /// A `cuMemMap` of a handle whose physical memory is host memory (`cuMemCreate` with a
    /// host location): until `cuMemUnmap`. The host reaches it only once the application
    /// grants the CPU access, which the window cannot tell: never watched.
    HostMapping,
}

impl Kind {
    /// Whether the memory goes with the context that made it.
    fn context_scoped(self) -> bool {
        matches!(
            self,
            Kind::Managed | Kind::IpcImport | Kind::IpcExport | Kind::PoolImport
        )
    }
}

/// Disjoint address ranges: `base -> size` (the shape the engine's argument scan,
/// [`gate::first_pointer_into`], takes), and each one's kind and the context current when it
/// was made (0: none).
#[derive(Debug, Default)]
pub(crate) struct Ranges {
    spans: BTreeMap<usize, usize>,
    meta: HashMap<usize, (Kind, usize)>,
}

impl Ranges {
    /// Records `[base, base + size)`; stale ranges it overlaps (memory released without the
    /// backend seeing it) are dropped.
    pub(crate) fn insert(&mut self, base: usize, size: usize, kind: Kind, ctx: usize) {
        if base == 0 || size == 0 {
            return;
        }
        self.remove_range(base, size);
        self.spans.insert(base, size);
        self.meta.insert(base, (kind, ctx));
    }

    /// Forgets the range starting at `base` if it is of one of `kinds`.
    pub(crate) fn remove(&mut self, base: usize, kinds: &[Kind]) -> bool {
        match self.meta.get(&base) {
            Some((k, _)) if kinds.contains(k) => {
                self.meta.remove(&base);
                self.spans.remove(&base).is_some()
            }
            _ => false,
        }
    }

    /// Forgets every range overlapping `[base, base + size)`.
    pub(crate) fn remove_range(&mut self, base: usize, size: usize) -> usize {
        let end = base.saturating_add(size);
        let doomed: Vec<usize> = self
            .spans
            .range(..end)
            .filter(|(b, len)| b.saturating_add(**len) > base)
            .map(|(b, _)| *b)
            .collect();
        for b in &doomed {
            self.spans.remove(b);
            self.meta.remove(b);
        }
        doomed.len()
    }

    /// Forgets the ranges that went with context `ctx` (it is being destroyed).
    pub(crate) fn remove_context(&mut self, ctx: usize) {
        let doomed: Vec<usize> = self
            .meta
            .iter()
            .filter(|(_, (k, c))| k.context_scoped() && *c == ctx)
            .map(|(b, _)| *b)
            .collect();
        for b in &doomed {
            self.spans.remove(b);
            self.meta.remove(b);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The kind of the range containing `addr`.
    pub(crate) fn containing(&self, addr: usize) -> Option<Kind> {
        let (base, len) = self.spans.range(..=addr).next_back()?;
        (addr < base.saturating_add(*len)).then(|| self.meta.get(base).map(|m| m.0))?
    }

    /// What a launch with argument bytes `args` may have watched instead of declined: the
    /// pinned and registered ranges (base, size) its 8-byte-aligned words point into, each
    /// once — memory the host reads through the same address, which the window checksums
    /// around the first pass. `Err` with the first word that points into a range of another
    /// kind (managed memory: the driver migrates it, and a host read during the window could
    /// too).
    pub(crate) fn watchable(&self, args: &[u8]) -> Result<Vec<(usize, usize)>, usize> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut rest = args;
        while let Some((offset, addr, base)) = gate::first_pointer_into(rest, &self.spans) {
            match self.meta.get(&base) {
                Some((Kind::Pinned | Kind::Registered, _)) => {
                    let range = (base, self.spans[&base]);
                    if !out.contains(&range) {
                        out.push(range);
                    }
                }
                _ => return Err(addr),
            }
            rest = &rest[offset + 8..];
        }
        Ok(out)
    }

    /// The first 8-byte-aligned word of `args` that is an address inside one of the ranges:
    /// (that address, its range's kind).
    pub(crate) fn first_pointer_into(&self, args: &[u8]) -> Option<(usize, Kind)> {
        let (_, addr, base) = gate::first_pointer_into(args, &self.spans)?;
        Some((addr, self.meta.get(&base)?.0))
    }
}

/// Virtual-memory handles whose physical memory another process or GPU writes, with the
/// number of references the application holds (`cuMemImportFromShareableHandle`,
/// `cuMulticastCreate` and `cuMemRetainAllocationHandle` add one, `cuMemRelease` drops one).
#[derive(Debug, Default)]
pub(crate) struct ImportedHandles(HashMap<u64, u32>);

impl ImportedHandles {
    pub(crate) fn add(&mut self, handle: u64) {
        if handle != 0 {
            *self.0.entry(handle).or_default() += 1;
        }
    }

    pub(crate) fn release(&mut self, handle: u64) {
        if let Some(n) = self.0.get_mut(&handle) {
            *n -= 1;
            if *n == 0 {
                self.0.remove(&handle);
            }
        }
    }

    pub(crate) fn contains(&self, handle: u64) -> bool {
        self.0.contains_key(&handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn pinned_and_registered_ranges_are_watchable_and_managed_ones_are_not() {
        let mut r = Ranges::default();
        r.insert(0x10_0000, 0x100, Kind::Pinned, 7);
        r.insert(0x20_0000, 0x80, Kind::Registered, 7);
        r.insert(0x30_0000, 0x100, Kind::Managed, 7);
        assert_eq!(r.watchable(&bytes(&[5, 0x40_0000])), Ok(vec![]));
        assert_eq!(
            r.watchable(&bytes(&[0x10_0010, 7, 0x20_0000, 0x10_00ff])),
            Ok(vec![(0x10_0000, 0x100), (0x20_0000, 0x80)]),
            "interior pointers name their whole range, each range once"
        );
        assert_eq!(r.watchable(&bytes(&[0x10_0010, 0x30_0040])), Err(0x30_0040));
        assert_eq!(r.watchable(&bytes(&[0x30_0000])), Err(0x30_0000));
    }

    #[test]
    fn ranges_find_interior_pointers_and_forget_by_kind_range_and_context() {
        let mut r = Ranges::default();
        r.insert(0x10_0000, 0x100, Kind::Managed, 7);
        r.insert(0x20_0000, 0x100, Kind::Pinned, 7);
        r.insert(0x30_0000, 0x100, Kind::IpcImport, 8);
        assert_eq!(
            r.first_pointer_into(&bytes(&[5, 0x10_0080])),
            Some((0x10_0080, Kind::Managed))
        );
        assert_eq!(r.first_pointer_into(&bytes(&[0x10_0100, 0x1f_ffff])), None);
        assert!(
            !r.remove(0x20_0000, &[Kind::Managed]),
            "a cuMemFree of pinned memory"
        );
        assert!(r.remove(0x20_0000, &[Kind::Pinned, Kind::Registered]));
        r.remove_context(7);
        assert_eq!(
            r.containing(0x10_0000),
            None,
            "managed memory went with its context"
        );
        assert_eq!(r.containing(0x30_0010), Some(Kind::IpcImport));
        r.insert(0x30_0080, 0x10, Kind::ImportedMapping, 0);
        assert_eq!(
            r.containing(0x30_0000),
            None,
            "an overlapped stale range is dropped"
        );
        assert_eq!(r.remove_range(0x30_0000, 0x1000), 1);
        assert!(r.is_empty());
    }

    #[test]
    fn an_imported_handle_stays_imported_until_its_last_release() {
        let mut h = ImportedHandles::default();
        h.add(42);
        h.add(42);
        h.release(42);
        assert!(h.contains(42));
        h.release(42);
        assert!(!h.contains(42));
        h.release(42);
        assert!(!h.contains(42));
    }
}
