//! The table kernels on the fake driver: one launch per batch over many regions (the fake runs
//! `rocprof_replay_compare_table` and `rocprof_replay_fingerprint_table` on the host and checks
//! every table it is given: laid out as the kernels read it, back to back from granule 0, within
//! its buffer, copied on the kernel's stream before the launch). Results against the host's,
//! for many region counts, sizes and alignments; batches cut where the results or the table are
//! full; stuck and unsupported paths.
//!
//! The windows are those of [`probing`]: the probe runs inside a window, before and after
//! pass 1.

use std::sync::Arc;

use parking_lot::Mutex;

use super::fingerprint_tests::{KIB, Phase, filled, host_prints, poke, probe, probing};
use super::*;
use crate::engine::footprint::FINGERPRINT_GRANULE;
use crate::engine::snapshot::{DiffError, DirtyRanges, Transfer, diff_by_reading};

/// Entries of a table in tests (`TABLE_BYTES` 512): compare entries are 32 bytes,
/// fingerprint entries 24.
const COMPARE_ENTRIES: usize = 16;
const PRINT_ENTRIES: usize = 21;
/// Results of a batch in tests: 64 flags (`FLAG_BYTES`), 512 fingerprints (`PRINT_BYTES` / 8).
const FLAGS: usize = 64;
const PRINTS: usize = 512;

use crate::testing::Rng;

/// A region length for granules of `granule`: around granule boundaries, anything up to six
/// granules, or many (more than a batch has room for at times: `long` granules); never more
/// than `max`.
fn length(rng: &mut Rng, granule: usize, max: usize, long: usize) -> usize {
    let g = granule;
    let lens = [
        1,
        2,
        7,
        g.saturating_sub(1).max(1),
        g,
        g + 1,
        2 * g,
        3 * g + 5,
        rng.below(6 * g) + 1,
        rng.below(6 * g) + 1,
        20 * g,
        long * g + 3,
    ];
    lens[rng.below(lens.len())].min(max)
}

/// The tables launched since `before` (entries, granules).
fn tables_since(before: usize, compare: bool) -> Vec<(usize, usize)> {
    let g = gpu();
    let tables = if compare {
        &g.compare_tables
    } else {
        &g.fingerprint_tables
    };
    tables[before..].to_vec()
}

/// Checks that `tables`, the launches of one call, cut `granules` results into batches only
/// where a batch was full: at most `entries` entries and `capacity` results each, every batch
/// but the last with its table or its results full.
fn assert_cut_when_full(
    tables: &[(usize, usize)],
    granules: usize,
    entries: usize,
    capacity: usize,
    what: &str,
) {
    assert_eq!(
        tables.iter().map(|t| t.1).sum::<usize>(),
        granules,
        "{what}: every result in one batch: {tables:?}"
    );
    for (k, &(n, used)) in tables.iter().enumerate() {
        assert!(
            (1..=entries).contains(&n) && (1..=capacity).contains(&used),
            "{what}: batch {k} of {tables:?}"
        );
        if k + 1 < tables.len() {
            assert!(
                n == entries || used == capacity,
                "{what}: batch {k} cut before it was full: {tables:?}"
            );
        }
    }
}

/// What the fingerprint probe of [`fingerprints_over_many_regions_are_the_host_hash`] saw for
/// one call: the regions, the granule, the result and the tables launched.
type PrintCall = (
    Vec<(usize, usize)>,
    usize,
    Result<Vec<u64>, DiffError>,
    Vec<(usize, usize)>,
);

#[test]
fn fingerprints_over_many_regions_are_the_host_hash() {
    let h = probing(quick());
    // Regions carved from three buffers at every alignment (some overlap: no matter).
    let pool = [
        (filled(&h, 4 << 20, 1), 4 << 20),
        (filled(&h, (2 << 20) + 3, 2), (2 << 20) + 3),
        (filled(&h, 300_001, 3), 300_001),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut calls: Vec<(Vec<(usize, usize)>, usize)> = Vec::new();
    for granule in [FINGERPRINT_GRANULE, 4096, 1000, 24, 7] {
        for count in [1, 2, 20, 21, 22, 42, 43, 100, 300] {
            if granule == FINGERPRINT_GRANULE && count > 100 {
                continue;
            }
            let regions: Vec<(usize, usize)> = (0..count)
                .map(|_| {
                    let (base, size) = pool[rng.below(pool.len())];
                    // A few empty regions too (no fingerprints).
                    let len = if rng.below(17) == 0 {
                        0
                    } else {
                        length(&mut rng, granule, size, 600)
                    };
                    (base + rng.below(size - len + 1), len)
                })
                .collect();
            calls.push((regions, granule));
        }
    }
    let seen: Arc<Mutex<Vec<PrintCall>>> = Arc::new(Mutex::new(Vec::new()));
    let (ask, record) = (calls.clone(), seen.clone());
    let _ = probe(move |t, phase| {
        if phase == Phase::Before {
            for (regions, granule) in &ask {
                let before = gpu().fingerprint_tables.len();
                let got = t.fingerprint(regions, *granule);
                let tables = tables_since(before, false);
                record.lock().push((regions.clone(), *granule, got, tables));
            }
        }
        None
    });
    poke(&h);
    let seen = seen.lock();
    assert_eq!(seen.len(), calls.len());
    for (regions, granule, got, tables) in seen.iter() {
        let what = format!("{} regions, granule {granule}", regions.len());
        let want = host_prints(regions, *granule);
        assert_eq!(got.as_ref(), Ok(&want), "{what}");
        assert_cut_when_full(tables, want.len(), PRINT_ENTRIES, PRINTS, &what);
        let nonempty = regions.iter().filter(|r| r.1 > 0).count();
        let entries: usize = tables.iter().map(|t| t.0).sum();
        assert!(
            entries >= nonempty && entries < nonempty + tables.len(),
            "{what}: each region in one entry a batch it is in: {tables:?}"
        );
    }
    assert!(
        seen.iter().any(|s| s.3.len() > 5),
        "some calls took many batches"
    );
    assert!(
        seen.iter()
            .any(|s| s.3.iter().map(|t| t.0).sum::<usize>() > s.0.len()),
        "some regions were split between batches"
    );
}

/// One compare case: `len` bytes of live memory at `live` and its snapshot at `snap`.
fn snapshot_of(live: usize, len: usize, rng: &mut Rng) -> usize {
    // Its own allocation (not the application's), off 16-byte alignment at times.
    let off = [0, 0, 16, 8, 3, 1][rng.below(6)];
    let snap = fake_alloc(len + 16) + off;
    // SAFETY: `len` bytes of live fake memory each, apart.
    unsafe { std::ptr::copy_nonoverlapping(live as *const u8, snap as *mut u8, len) };
    snap
}

/// Changes the snapshot of `t` (so the live bytes differ there): its first byte, its last,
/// bytes at granule edges and a few anywhere; or nothing.
fn differ(t: &Transfer, granule: usize, rng: &mut Rng) {
    let mut at = Vec::new();
    match rng.below(5) {
        0 => {}
        1 => at.extend([0, t.len - 1]),
        2 => {
            let g = rng.below(t.len.div_ceil(granule));
            at.extend([g * granule, ((g + 1) * granule).min(t.len) - 1]);
        }
        _ => at.extend((0..3).map(|_| rng.below(t.len))),
    }
    for i in at {
        // SAFETY: `i < len`: a byte of the snapshot, which only this test writes.
        unsafe { *((t.staging + i) as *mut u8) ^= 0x5a };
    }
}

/// What the compare probe of [`compares_over_many_regions_find_the_host_granules`] saw for
/// one call: the device's answer, the host's, the granules on the device and the tables.
type DiffCall = (
    Result<DirtyRanges, DiffError>,
    Result<DirtyRanges, DiffError>,
    usize,
    Vec<(usize, usize)>,
);

#[test]
fn compares_over_many_regions_find_the_host_granules() {
    let h = probing(quick());
    let pool = [
        (filled(&h, 1 << 20, 1), 1 << 20),
        (filled(&h, 200_003, 2), 200_003),
    ];
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // (regions, on device, granule)
    let mut calls: Vec<(Vec<Transfer>, Vec<bool>, usize)> = Vec::new();
    for granule in [4096, 4095, 100, 16, 1] {
        for count in [1, 2, 15, 16, 17, 33, 100, 200] {
            let regions: Vec<Transfer> = (0..count)
                .map(|_| {
                    let (base, size) = pool[rng.below(pool.len())];
                    // Granules of one byte: a few of them (64 flags a batch).
                    let max = if granule == 1 { 300 } else { size };
                    let len = length(&mut rng, granule, max, 70);
                    let live = base + rng.below(size - len + 1);
                    let t = Transfer {
                        device: live,
                        staging: snapshot_of(live, len, &mut rng),
                        len,
                    };
                    differ(&t, granule, &mut rng);
                    t
                })
                .collect();
            // Every seventh snapshot in host memory (compared on the host), the rest on the
            // device (the kernel).
            let on_device = (0..count).map(|i| i % 7 != 3).collect();
            calls.push((regions, on_device, granule));
        }
    }
    let seen: Arc<Mutex<Vec<DiffCall>>> = Arc::new(Mutex::new(Vec::new()));
    let (ask, record) = (calls.clone(), seen.clone());
    let _ = probe(move |t, phase| {
        if phase == Phase::Before {
            for (regions, on_device, granule) in &ask {
                let before = gpu().compare_tables.len();
                let got = t.diff(regions, on_device, *granule);
                let tables = tables_since(before, true);
                // The host's answer: every snapshot is host-readable in fake memory.
                let want = diff_by_reading(t, regions, &vec![false; regions.len()], *granule);
                let granules = (0..regions.len())
                    .filter(|&i| on_device[i])
                    .map(|i| regions[i].len.div_ceil(*granule))
                    .sum();
                record.lock().push((got, want, granules, tables));
            }
        }
        None
    });
    poke(&h);
    let seen = seen.lock();
    assert_eq!(seen.len(), calls.len());
    let (mut dirty, mut split) = (0, 0);
    for ((got, want, granules, tables), (regions, on_device, granule)) in seen.iter().zip(&calls) {
        let what = format!("{} regions, granule {granule}", regions.len());
        assert!(want.is_ok(), "{what}: {want:?}");
        assert_eq!(got, want, "{what}");
        assert_cut_when_full(tables, *granules, COMPARE_ENTRIES, FLAGS, &what);
        dirty += want.as_ref().map_or(0, Vec::len);
        let entries: usize = tables.iter().map(|t| t.0).sum();
        split += usize::from(entries > on_device.iter().filter(|&&d| d).count());
    }
    assert!(dirty > 100, "the cases have dirty granules: {dirty}");
    assert!(split > 5, "regions split between batches in {split} calls");
}

#[test]
fn a_full_table_ends_a_batch() {
    let h = probing(quick());
    // 100 regions of one granule each: tables of 21 (fingerprints) and 16 (compares) entries
    // cut them, long before the results would.
    let a = filled(&h, 100 * 4096, 1);
    let regions: Vec<(usize, usize)> = (0..100).map(|i| (a + i * 4096, 1000)).collect();
    let transfers: Vec<Transfer> = regions
        .iter()
        .map(|&(live, len)| Transfer {
            device: live,
            staging: fake_alloc(len),
            len,
        })
        .collect();
    let (ask, compare) = (regions.clone(), transfers.clone());
    let diffs = Arc::new(Mutex::new(Vec::new()));
    let record = diffs.clone();
    let got = probe(move |t, phase| {
        (phase == Phase::Before).then(|| {
            record
                .lock()
                .push(t.diff(&compare, &vec![true; compare.len()], 4096));
            t.fingerprint(&ask, 4096)
        })
    });
    let (compares, prints) = {
        let g = gpu();
        (g.compares, g.fingerprints)
    };
    poke(&h);
    assert_eq!(gpu().compares - compares, 7, "100 entries, 16 a table");
    assert_eq!(
        gpu().compare_tables,
        [vec![(16, 16); 6], vec![(4, 4)]].concat()
    );
    assert_eq!(gpu().fingerprints - prints, 5, "100 entries, 21 a table");
    assert_eq!(
        gpu().fingerprint_tables,
        [vec![(21, 21); 4], vec![(16, 16)]].concat()
    );
    assert_eq!(got.lock()[0].1, Ok(host_prints(&regions, 4096)));
    // The snapshots are zeros, the live bytes a pattern: every granule differs.
    let want: DirtyRanges = (0..100)
        .map(|index| crate::engine::snapshot::DirtyRange {
            index,
            offset: 0,
            len: 1000,
        })
        .collect();
    assert_eq!(diffs.lock()[0], Ok(want));
}

#[test]
fn a_table_copy_that_never_finishes_gives_the_buffers_up() {
    let h = probing(quick());
    let a = filled(&h, 3 * 64 * KIB, 1);
    let regions = vec![(a, 64 * KIB), (a + 64 * KIB + 5, 100_000)];
    let transfers: Vec<Transfer> = regions
        .iter()
        .map(|&(live, len)| Transfer {
            device: live,
            staging: fake_alloc(len),
            len,
        })
        .collect();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (ask, compare, record) = (regions.clone(), transfers.clone(), seen.clone());
    let _ = probe(move |t, phase| {
        if phase == Phase::Before {
            // The table's copy is the first thing of a batch on the stream: it sticks, so
            // nothing after it runs.
            gpu().stick_copies = true;
            let mut r = record.lock();
            r.push(t.fingerprint(&ask, FINGERPRINT_GRANULE).map(|_| ()));
            // Given up: no buffers in this window any more.
            r.push(t.fingerprint(&ask, FINGERPRINT_GRANULE).map(|_| ()));
            r.push(t.diff(&compare, &[true, true], 4096).map(|_| ()));
            r.push(t.diff(&compare, &[true, true], 4096).map(|_| ()));
            gpu().stick_copies = false;
        }
        None
    });
    poke(&h);
    assert_eq!(
        *seen.lock(),
        [
            Err(DiffError::Stuck),
            Err(DiffError::Unsupported),
            Err(DiffError::Stuck),
            Err(DiffError::Failed),
        ]
    );
    assert_eq!(
        gpu().compare_tables,
        [],
        "nothing ran behind the stuck copy"
    );
    assert_eq!(gpu().fingerprint_tables, []);
    assert_eq!(gpu().frees_in_windows, 0, "given up, not freed");
    // The next launch's preparation allocates new buffers; a new stream runs them.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (ask, compare, record) = (regions.clone(), transfers.clone(), seen.clone());
    let got = probe(move |t, phase| {
        (phase == Phase::Before).then(|| {
            record.lock().push(t.diff(&compare, &[true, true], 4096));
            t.fingerprint(&ask, FINGERPRINT_GRANULE)
        })
    });
    poke(&h);
    assert_eq!(
        got.lock()[0].1,
        Ok(host_prints(&regions, FINGERPRINT_GRANULE))
    );
    let diff = seen.lock()[0].clone().expect("a diff");
    assert_eq!(diff.len(), 2, "both regions differ everywhere: {diff:?}");
    assert_eq!(gpu().module_loads, 1, "the module stays");
}

#[test]
fn without_the_kernel_device_snapshots_cannot_be_compared_but_host_ones_can() {
    let h = probing(quick());
    gpu().fail_module_load = true;
    let a = filled(&h, 10_000, 1);
    let t = Transfer {
        device: a,
        staging: fake_alloc(10_000),
        len: 10_000,
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let _ = probe(move |target, phase| {
        if phase == Phase::Before {
            let mut r = record.lock();
            r.push(target.diff(&[t, t], &[false, true], 4096));
            r.push(target.diff(&[t, t], &[false, false], 4096));
            r.push(target.fingerprint(&[(a, 10_000)], 4096).map(|_| vec![]));
        }
        None
    });
    poke(&h);
    let whole = |index| crate::engine::snapshot::DirtyRange {
        index,
        offset: 0,
        len: 10_000,
    };
    assert_eq!(
        *seen.lock(),
        [
            Err(DiffError::Unsupported),
            Ok(vec![whole(0), whole(1)]),
            Err(DiffError::Unsupported),
        ]
    );
    let g = gpu();
    assert_eq!((g.compares, g.fingerprints), (0, 0));
}
