//! The region tables of the device compare and fingerprint kernels, shared by the backends
//! that have them (CUDA: `kernels/cuda/compare.cu`; HSA: `kernels/amdgpu/compare.cl`).
//!
//! A batch is one kernel launch over a table of regions: each entry names a region (or a piece
//! of one, cut on granule boundaries) and the index of its first result; results are one per
//! granule (a flag byte for the compare, a 64-bit fingerprint), the entries' ranges back to back
//! from 0. [`batches`] cuts regions into batches that fit a result buffer and a table;
//! [`dirty_granules`] turns one piece's flags back into [`DirtyRanges`], exactly as the host
//! compare builds them (granules from each region's start, the last one may be shorter).
//!
//! What a backend does the same way around its runtime calls lives here too: the batch loop
//! ([`compare_in_batches`], [`fingerprint_in_batches`]: cut, fill the table, run, read the
//! results) over a backend's [`TableKernel`] — which fills its table where its kernel reads
//! it, runs one batch behind one bounded wait and gives its buffers up when the batch is stuck
//! — and the diff's split between snapshots staged on the device and on the host
//! ([`diff_split`]).

use crate::engine::snapshot::{
    DeviceMemory, DiffError, DirtyRange, DirtyRanges, Transfer, diff_by_reading,
};

/// One region of a compare batch, as `rocprof_replay_compare_table` reads it: `len` bytes of
/// live memory at `live` and of its snapshot at `snap`; its granules' flags at `first`,
/// `first + 1`, ... of the batch (the entries sorted by `first`, back to back from 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CompareEntry {
    pub(crate) live: u64,
    pub(crate) snap: u64,
    pub(crate) len: u64,
    pub(crate) first: u64,
}

/// One region of a fingerprint batch, as `rocprof_replay_fingerprint_table` reads it: `len`
/// bytes at `src`, their fingerprints at `first`, `first + 1`, ... of the batch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PrintEntry {
    pub(crate) src: u64,
    pub(crate) len: u64,
    pub(crate) first: u64,
}

/// Part of a region in one batch: `len` bytes at `offset` into region `index`, its results
/// (one per granule) from `at` in the batch's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) index: usize,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) at: usize,
}

/// Splits regions (`(index, len)`, in order) into batches of at most `capacity` results (one
/// per granule) and at most `entries` pieces (a table's entries), on granule boundaries from
/// each region's start; empty regions have none.
pub(crate) fn batches(
    regions: impl IntoIterator<Item = (usize, usize)>,
    granule: usize,
    capacity: usize,
    entries: usize,
) -> Vec<Vec<Piece>> {
    let granule = granule.max(1);
    let (capacity, entries) = (capacity.max(1), entries.max(1));
    let mut batches: Vec<Vec<Piece>> = Vec::new();
    let mut used = capacity;
    for (index, len) in regions {
        let mut offset = 0;
        while offset < len {
            if used == capacity || batches.last().is_some_and(|b| b.len() == entries) {
                batches.push(Vec::new());
                used = 0;
            }
            // Whole granules from the region's start, as many as the batch has room for.
            let granules = (len - offset).div_ceil(granule).min(capacity - used);
            let piece = granules.saturating_mul(granule).min(len - offset);
            if let Some(batch) = batches.last_mut() {
                batch.push(Piece {
                    index,
                    offset,
                    len: piece,
                    at: used,
                });
            }
            used += granules;
            offset += piece;
        }
    }
    batches
}

/// One table kernel of a backend (the compare or the fingerprint), lent to the batch loop for
/// one diff or fingerprint of a window.
pub(crate) trait TableKernel {
    /// An entry of its table ([`CompareEntry`], [`PrintEntry`]).
    type Entry: Copy;
    /// One result per granule (a flag byte, a 64-bit fingerprint).
    type Result: Copy;

    /// Most results and most entries of one batch (its buffers' room).
    fn limits(&self) -> (usize, usize);

    /// The table of the next batch, `n` entries (at most the limit; fewer are given when `n`
    /// is larger) for the caller to fill: no batch reads it any more (the last one completed;
    /// a stuck one gave the buffers up).
    fn table(&mut self, n: usize) -> &mut [Self::Entry];

    /// Runs the batch whose first `entries` table entries were just filled — `granules`
    /// results of `granule` bytes each — and waits for it with the backend's copy deadline.
    /// When it is still running then, the buffers it may read or write are given up (never
    /// used again, never freed), whatever the backend keeps for stuck work is told, and the
    /// answer is [`DiffError::Stuck`].
    fn run(&mut self, entries: usize, granule: usize, granules: usize) -> Result<(), DiffError>;

    /// The first `n` results of the batch that just ran (at most the limit).
    fn results(&self, n: usize) -> &[Self::Result];
}

/// Runs `kernel` over `pieces` (`(index, len)` of regions, in order) in [`batches`]: each
/// batch's table filled by `entry`, one run, its results handed to `take` with the batch. Stops
/// at the first batch that fails or is stuck.
fn run_batches<K: TableKernel + ?Sized>(
    kernel: &mut K,
    pieces: impl IntoIterator<Item = (usize, usize)>,
    granule: usize,
    entry: impl Fn(&Piece) -> K::Entry,
    mut take: impl FnMut(&[Piece], &[K::Result]),
) -> Result<(), DiffError> {
    let granule = granule.max(1);
    let (capacity, entries) = kernel.limits();
    for batch in batches(pieces, granule, capacity, entries) {
        let Some(last) = batch.last() else {
            continue;
        };
        let used = last.at + last.len.div_ceil(granule);
        for (e, p) in kernel.table(batch.len()).iter_mut().zip(&batch) {
            *e = entry(p);
        }
        kernel.run(batch.len(), granule, used)?;
        take(&batch, kernel.results(used));
    }
    Ok(())
}

/// The compare kernel over regions `which` of `regions` (their snapshots where the kernel
/// reads them), the granules that differ appended to `out` (indices into `regions`).
pub(crate) fn compare_in_batches<K: TableKernel<Entry = CompareEntry, Result = u8> + ?Sized>(
    kernel: &mut K,
    regions: &[Transfer],
    which: &[usize],
    granule: usize,
    out: &mut DirtyRanges,
) -> Result<(), DiffError> {
    let granule = granule.max(1);
    run_batches(
        kernel,
        which.iter().map(|&i| (i, regions[i].len)),
        granule,
        |p| {
            let r = &regions[p.index];
            CompareEntry {
                live: (r.device + p.offset) as u64,
                snap: (r.staging + p.offset) as u64,
                len: p.len as u64,
                first: p.at as u64,
            }
        },
        |batch, flags| {
            for p in batch {
                dirty_granules(out, p, &flags[p.at..], granule);
            }
        },
    )
}

/// The granules of `regions` (address, length) at `granule` bytes each.
pub(crate) fn granules_of(regions: &[(usize, usize)], granule: usize) -> usize {
    let granule = granule.max(1);
    regions
        .iter()
        .map(|r| r.1.div_ceil(granule))
        .fold(0usize, usize::saturating_add)
}

/// The fingerprint kernel over `regions` (address, length): one fingerprint per granule, in
/// region order.
pub(crate) fn fingerprint_in_batches<K: TableKernel<Entry = PrintEntry, Result = u64> + ?Sized>(
    kernel: &mut K,
    regions: &[(usize, usize)],
    granule: usize,
) -> Result<Vec<u64>, DiffError> {
    let mut out = Vec::with_capacity(granules_of(regions, granule));
    run_batches(
        kernel,
        regions.iter().enumerate().map(|(i, r)| (i, r.1)),
        granule,
        |p| PrintEntry {
            src: (regions[p.index].0 + p.offset) as u64,
            len: p.len as u64,
            first: p.at as u64,
        },
        |_, prints| out.extend_from_slice(prints),
    )?;
    Ok(out)
}

/// A diff of a backend with a compare kernel: `on_device_diff` (the kernel) appends what
/// differs in the regions with bytes whose snapshot is on the device (`on_device[i]`; it is
/// not called when there are none), the host compares the others (only live memory read back
/// into `mem`'s scratch), and the result is sorted by region and offset.
pub(crate) fn diff_split<M: DeviceMemory + ?Sized>(
    mem: &mut M,
    regions: &[Transfer],
    on_device: &[bool],
    granule: usize,
    on_device_diff: impl FnOnce(&mut M, &[usize], &mut DirtyRanges) -> Result<(), DiffError>,
) -> Result<DirtyRanges, DiffError> {
    let granule = granule.max(1);
    let staged_on_device = |i: usize| on_device.get(i).copied().unwrap_or(false);
    let (device, host): (Vec<usize>, Vec<usize>) = (0..regions.len())
        .filter(|&i| regions[i].len > 0)
        .partition(|&i| staged_on_device(i));
    let mut out = DirtyRanges::new();
    if !device.is_empty() {
        on_device_diff(mem, &device, &mut out)?;
    }
    if !host.is_empty() {
        // Host-readable snapshots: only live memory is read back.
        let subset: Vec<Transfer> = host.iter().map(|&i| regions[i]).collect();
        let found = diff_by_reading(mem, &subset, &vec![false; subset.len()], granule)?;
        out.extend(found.into_iter().map(|r| DirtyRange {
            index: host[r.index],
            ..r
        }));
    }
    out.sort_by_key(|r| (r.index, r.offset));
    Ok(out)
}

/// Appends the granules of `piece` whose flag is set, joining adjacent ones.
pub(crate) fn dirty_granules(out: &mut DirtyRanges, piece: &Piece, flags: &[u8], granule: usize) {
    let granules = piece.len.div_ceil(granule);
    for (k, _) in flags[..granules]
        .iter()
        .enumerate()
        .filter(|(_, f)| **f != 0)
    {
        let offset = piece.offset + k * granule;
        let len = granule.min(piece.offset + piece.len - offset);
        match out.last_mut() {
            Some(last) if last.index == piece.index && last.offset + last.len == offset => {
                last.len += len;
            }
            _ => out.push(DirtyRange {
                index: piece.index,
                offset,
                len,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table kernel on the host: the compare or the fingerprint run over its table when
    /// `run` is called (addresses are real pointers); batch `stuck_at` (0-based) is stuck.
    struct HostKernel<E, R> {
        limits: (usize, usize),
        table: Vec<E>,
        results: Vec<R>,
        run: fn(&[E], usize, &mut [R]),
        runs: usize,
        stuck_at: Option<usize>,
    }

    impl<E: Copy + Default, R: Copy + Default> HostKernel<E, R> {
        fn new(limits: (usize, usize), run: fn(&[E], usize, &mut [R])) -> Self {
            HostKernel {
                limits,
                table: vec![E::default(); limits.1],
                results: vec![R::default(); limits.0],
                run,
                runs: 0,
                stuck_at: None,
            }
        }
    }

    impl<E: Copy, R: Copy> TableKernel for HostKernel<E, R> {
        type Entry = E;
        type Result = R;
        fn limits(&self) -> (usize, usize) {
            self.limits
        }
        fn table(&mut self, n: usize) -> &mut [E] {
            &mut self.table[..n.min(self.limits.1)]
        }
        fn run(
            &mut self,
            entries: usize,
            granule: usize,
            granules: usize,
        ) -> Result<(), DiffError> {
            self.runs += 1;
            if self.stuck_at == Some(self.runs - 1) {
                return Err(DiffError::Stuck);
            }
            (self.run)(
                &self.table[..entries],
                granule,
                &mut self.results[..granules],
            );
            Ok(())
        }
        fn results(&self, n: usize) -> &[R] {
            &self.results[..n]
        }
    }

    /// What `rocprof_replay_compare_table` computes.
    fn compare(table: &[CompareEntry], granule: usize, flags: &mut [u8]) {
        for e in table {
            // SAFETY: the tests' entries name live buffers of `len` bytes.
            let (live, snap) = unsafe {
                (
                    std::slice::from_raw_parts(e.live as *const u8, e.len as usize),
                    std::slice::from_raw_parts(e.snap as *const u8, e.len as usize),
                )
            };
            for (k, (l, s)) in live.chunks(granule).zip(snap.chunks(granule)).enumerate() {
                flags[e.first as usize + k] = u8::from(l != s);
            }
        }
    }

    /// What `rocprof_replay_fingerprint_table` computes.
    fn prints(table: &[PrintEntry], granule: usize, out: &mut [u64]) {
        for e in table {
            // SAFETY: as in `compare`.
            let src = unsafe { std::slice::from_raw_parts(e.src as *const u8, e.len as usize) };
            for (k, g) in src.chunks(granule).enumerate() {
                out[e.first as usize + k] = crate::engine::footprint::fingerprint(g);
            }
        }
    }

    #[test]
    fn the_batch_loop_finds_what_the_host_compare_finds_across_batches() {
        // Four regions in granules of 16 bytes (10 granules, the last 4 bytes long; nothing; 3;
        // 1), with 4 results and 2 entries a batch: 4 batches, regions split across them.
        let lens = [148usize, 0, 48, 5];
        let snaps: Vec<Vec<u8>> = lens.iter().map(|&n| vec![7u8; n]).collect();
        let mut lives = snaps.clone();
        for (r, at) in [(0, 0), (0, 47), (0, 146), (2, 20), (2, 21), (3, 4)] {
            lives[r][at] ^= 1;
        }
        let regions: Vec<Transfer> = (0..lens.len())
            .map(|i| Transfer {
                device: lives[i].as_ptr() as usize,
                staging: snaps[i].as_ptr() as usize,
                len: lens[i],
            })
            .collect();
        let mut kernel = HostKernel::new((4, 2), compare);
        let mut found = DirtyRanges::new();
        compare_in_batches(&mut kernel, &regions, &[0, 1, 2, 3], 16, &mut found).unwrap();
        let range = |index, offset, len| DirtyRange { index, offset, len };
        assert_eq!(
            found,
            vec![
                range(0, 0, 16),
                range(0, 32, 16),
                range(0, 144, 4),
                range(2, 16, 16),
                range(3, 0, 5),
            ]
        );
        assert_eq!(kernel.runs, 4, "14 granules, 4 a batch");
        // The fingerprints are the host's, granule by granule, in region order.
        let spans: Vec<(usize, usize)> = regions.iter().map(|r| (r.device, r.len)).collect();
        let mut kernel = HostKernel::new((3, 21), prints);
        let got = fingerprint_in_batches(&mut kernel, &spans, 16).unwrap();
        let want: Vec<u64> = lives
            .iter()
            .flat_map(|l| l.chunks(16).map(crate::engine::footprint::fingerprint))
            .collect();
        assert_eq!(got, want);
        assert_eq!(granules_of(&spans, 16), want.len());
    }

    #[test]
    fn a_stuck_batch_ends_the_loop_and_nothing_of_it_is_taken() {
        let live = vec![1u8; 256];
        let snap = vec![2u8; 256];
        let regions = [Transfer {
            device: live.as_ptr() as usize,
            staging: snap.as_ptr() as usize,
            len: 256,
        }];
        let mut kernel = HostKernel::new((4, 16), compare);
        kernel.stuck_at = Some(1);
        let mut found = DirtyRanges::new();
        let r = compare_in_batches(&mut kernel, &regions, &[0], 16, &mut found);
        assert_eq!(r, Err(DiffError::Stuck));
        assert_eq!(kernel.runs, 2, "no batch after the stuck one");
        assert_eq!(
            found,
            vec![DirtyRange {
                index: 0,
                offset: 0,
                len: 64
            }],
            "only the first batch's results"
        );
        let mut kernel = HostKernel::new((4, 16), prints);
        kernel.stuck_at = Some(0);
        let spans = [(live.as_ptr() as usize, 256)];
        assert_eq!(
            fingerprint_in_batches(&mut kernel, &spans, 16),
            Err(DiffError::Stuck)
        );
    }

    #[test]
    fn table_entries_are_laid_out_as_the_kernels_read_them() {
        // compare.cu and compare.cl: rocprof_replay_compare_entry {live, snap, len, first} and
        // rocprof_replay_fingerprint_entry {src, len, first}, all unsigned long long.
        let e = CompareEntry {
            live: 1,
            snap: 2,
            len: 3,
            first: 4,
        };
        // SAFETY: a repr(C) struct of four u64s, read as its bytes.
        let words: [u64; 4] = unsafe { std::mem::transmute(e) };
        assert_eq!(words, [1, 2, 3, 4]);
        let e = PrintEntry {
            src: 1,
            len: 2,
            first: 3,
        };
        // SAFETY: as above, three u64s.
        let words: [u64; 3] = unsafe { std::mem::transmute(e) };
        assert_eq!(words, [1, 2, 3]);
    }

    #[test]
    fn batches_split_regions_on_granule_boundaries() {
        let piece = |index, offset, len, at| Piece {
            index,
            offset,
            len,
            at,
        };
        // Granules of 100, 4 a batch: 250 bytes (3 granules, the last 50), nothing, 1000
        // bytes (10), 1 byte (1).
        let regions = [(0, 250), (1, 0), (2, 1000), (3, 1)];
        let batches_of = |capacity, entries| batches(regions, 100, capacity, entries);
        assert_eq!(
            batches_of(4, 100),
            vec![
                vec![piece(0, 0, 250, 0), piece(2, 0, 100, 3)],
                vec![piece(2, 100, 400, 0)],
                vec![piece(2, 500, 400, 0)],
                vec![piece(2, 900, 100, 0), piece(3, 0, 1, 1)],
            ]
        );
        assert!(batches([(0, 0)], 100, 4, 100).is_empty());
        // One batch exactly full, then nothing left over.
        assert_eq!(
            batches([(0, 400)], 100, 4, 100),
            vec![vec![piece(0, 0, 400, 0)]]
        );
        // Room for everything but one entry a batch: a batch per region.
        assert_eq!(
            batches_of(1000, 1),
            vec![
                vec![piece(0, 0, 250, 0)],
                vec![piece(2, 0, 1000, 0)],
                vec![piece(3, 0, 1, 0)],
            ]
        );
        // Two entries a batch and 8 granules: both limits cut.
        assert_eq!(
            batches_of(8, 2),
            vec![
                vec![piece(0, 0, 250, 0), piece(2, 0, 500, 3)],
                vec![piece(2, 500, 500, 0), piece(3, 0, 1, 5)],
            ]
        );
        // Many small regions: full tables, then the rest.
        let small: Vec<(usize, usize)> = (0..50).map(|i| (i, 1 + i % 3)).collect();
        let cut = batches(small.iter().copied(), 2, 1000, 16);
        assert_eq!(
            cut.iter().map(Vec::len).collect::<Vec<_>>(),
            [16, 16, 16, 2]
        );
        for batch in &cut {
            let mut at = 0;
            for p in batch {
                assert_eq!((p.offset, p.len, p.at), (0, small[p.index].1, at));
                at += p.len.div_ceil(2);
            }
        }
    }

    #[test]
    fn flags_become_granule_ranges_from_the_region_start_with_a_short_last_one() {
        let mut out = DirtyRanges::new();
        // 10 000 bytes at offset 8192 of region 3: granules of 4096, the last is 1808 bytes.
        let piece = Piece {
            index: 3,
            offset: 8192,
            len: 10_000,
            at: 2,
        };
        let flags = [9, 9, 1, 0, 1, 9];
        dirty_granules(&mut out, &piece, &flags[2..], 4096);
        assert_eq!(
            out,
            vec![
                DirtyRange {
                    index: 3,
                    offset: 8192,
                    len: 4096
                },
                DirtyRange {
                    index: 3,
                    offset: 16384,
                    len: 1808
                },
            ]
        );
        // A region split between batches: the second piece's first granule joins the first
        // piece's last one.
        let mut out = DirtyRanges::new();
        let first = Piece {
            index: 0,
            offset: 0,
            len: 8192,
            at: 0,
        };
        dirty_granules(&mut out, &first, &[0, 1], 4096);
        let second = Piece {
            index: 0,
            offset: 8192,
            len: 1000,
            at: 0,
        };
        dirty_granules(&mut out, &second, &[1], 4096);
        assert_eq!(
            out,
            vec![DirtyRange {
                index: 0,
                offset: 4096,
                len: 5096
            }]
        );
    }
}
