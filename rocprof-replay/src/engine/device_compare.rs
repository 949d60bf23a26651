//! The region tables of the device compare and fingerprint kernels, shared by the backends
//! that have them (CUDA: `kernels/cuda/compare.cu`; HSA: `kernels/amdgpu/compare.cl`).
//!
//! A batch is one kernel launch over a table of regions: each entry names a region (or a piece
//! of one, cut on granule boundaries) and the index of its first result; results are one per
//! granule (a flag byte for the compare, a 64-bit fingerprint), the entries' ranges back to back
//! from 0. [`batches`] cuts regions into batches that fit a result buffer and a table;
//! [`dirty_granules`] turns one piece's flags back into [`DirtyRanges`], exactly as the host
//! compare builds them (granules from each region's start, the last one may be shorter).

use crate::engine::snapshot::{DirtyRange, DirtyRanges};

/// One region of a compare batch, as `rocprof_replay_compare_table` reads it: `len` bytes of
/// live memory at `live` and of its snapshot at `snap`; its granules' flags at `first`,
/// `first + 1`, ... of the batch (the entries sorted by `first`, back to back from 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CompareEntry {
    pub(crate) live: u64,
    pub(crate) snap: u64,
    pub(crate) len: u64,
    pub(crate) first: u64,
}

/// One region of a fingerprint batch, as `rocprof_replay_fingerprint_table` reads it: `len`
/// bytes at `src`, their fingerprints at `first`, `first + 1`, ... of the batch.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
