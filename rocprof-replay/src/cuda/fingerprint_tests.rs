//! Fingerprints of watched memory on the fake driver: the fingerprint kernel (run on the host
//! by the fake, `fingerprint_kernel`), batching, and the fallbacks.
//!
//! The windows here are the tests' own: each takes the context (begin, drain), calls the
//! probe, runs pass 1 (the application's launch of `poke_some`), calls the probe again and
//! ends — what the engine's narrowed footprint does around pass 1.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::*;
use crate::engine::footprint::{FINGERPRINT_GRANULE, fingerprint, fingerprint_by_reading};
use crate::engine::snapshot::DiffError;

/// When the probe is called: before pass 1, after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Before,
    After,
}

type Probe = Box<dyn FnMut(&mut dyn ReplayTarget, Phase) + Send>;

/// What the windows of [`probing`] call (set by the test).
static PROBE: Mutex<Option<Probe>> = Mutex::new(None);

/// Addresses `poke_some` increments (one byte each).
static POKED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// `poke_some()`: increments the bytes at [`POKED`].
fn poke_some(_: *mut *mut c_void) {
    for &a in POKED.lock().iter() {
        // SAFETY: the addresses lie in buffers the test allocated.
        unsafe { *(a as *mut u8) = (*(a as *const u8)).wrapping_add(1) };
    }
}

static POKE_SOME: FakeKernel = FakeKernel {
    run: poke_some,
    module: 0,
};

/// A harness whose every launch gets a window of [`PROBE`].
pub(super) fn probing(settings: Settings) -> Harness {
    let h = harness_deciding(settings, |seen, _, _| {
        Box::new(move |info, _| {
            let (info, seen) = (info.clone(), seen.clone());
            Some(WindowRun {
                counters: false,
                run: Runner::Custom(Box::new(move |t: &mut dyn ReplayTarget| {
                    let mut probe = PROBE.lock().take();
                    let mut call = |t: &mut dyn ReplayTarget, phase| {
                        if let Some(p) = probe.as_mut() {
                            p(t, phase);
                        }
                    };
                    let o = if t.begin().is_ok() && t.drain().is_ok() {
                        call(t, Phase::Before);
                        let ran = t.run_pass(false).is_ok();
                        if ran {
                            call(t, Phase::After);
                        }
                        t.end();
                        Outcome::ordinary(if ran {
                            OutcomeKind::Replayed
                        } else {
                            OutcomeKind::Failed(FailureReason::InternalError)
                        })
                    } else {
                        t.run_once();
                        Outcome::ordinary(OutcomeKind::Declined(DeclineReason::LockTimeout))
                    };
                    *PROBE.lock() = probe;
                    seen.lock().push((info, o.clone()));
                    o
                })),
            })
        })
    });
    // Under the harness's serial lock: no other test's window uses them.
    *PROBE.lock() = None;
    POKED.lock().clear();
    h
}

/// What a probe recorded: each result and when it was had.
pub(super) type Got = Arc<Mutex<Vec<(Phase, Result<Vec<u64>, DiffError>)>>>;

/// Sets the probe; returns what it records.
pub(super) fn probe(
    mut f: impl FnMut(&mut dyn ReplayTarget, Phase) -> Option<Result<Vec<u64>, DiffError>>
    + Send
    + 'static,
) -> Got {
    let got: Got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    *PROBE.lock() = Some(Box::new(move |t, phase| {
        if let Some(r) = f(t, phase) {
            g.lock().push((phase, r));
        }
    }));
    got
}

/// One launch of `poke_some`, its window over; asserts the window ran pass 1 and no
/// fingerprint kernel faulted.
pub(super) fn poke(h: &Harness) {
    let n = h.outcomes().len();
    let r = h.launch_named(&POKE_SOME, &mut [], 0, c"_Z9poke_somev");
    assert_eq!(r, CUDA_SUCCESS);
    assert_eq!(h.outcomes()[n].1.kind, OutcomeKind::Replayed, "pass 1 ran");
    assert_eq!(gpu().kernel_faults, Vec::<String>::new());
}

/// An application allocation of `len` bytes, filled with a pattern (`seed` apart).
pub(super) fn filled(h: &Harness, len: usize, seed: u8) -> usize {
    let p = h.alloc(len);
    // SAFETY: a live fake allocation of `len` bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(131).wrapping_add(seed) ^ (i >> 11) as u8;
    }
    p
}

/// What the fingerprints of `regions` are, hashed here from fake memory.
pub(super) fn host_prints(regions: &[(usize, usize)], granule: usize) -> Vec<u64> {
    regions
        .iter()
        .flat_map(|&(addr, len)| {
            // SAFETY: the regions lie in live fake allocations.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            bytes.chunks(granule).map(fingerprint).collect::<Vec<_>>()
        })
        .collect()
}

pub(super) const KIB: usize = 1 << 10;

#[test]
fn fingerprints_are_the_host_hash_of_every_granule_in_region_order() {
    let h = probing(quick());
    let lens = [
        1,
        7,
        8,
        9,
        4097,
        64 * KIB,
        64 * KIB + 1,
        200_003,
        3 * 64 * KIB,
    ];
    let mut regions: Vec<(usize, usize)> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| (filled(&h, len, i as u8), len))
        .collect();
    // Parts of a buffer starting off alignment, and an empty one.
    let (big, _) = regions[7];
    regions.extend([(big + 3, 100_001), (big + 8, 65_541), (big + 5, 0)]);
    let ask = regions.clone();
    let got = probe(move |t, phase| {
        (phase == Phase::Before).then(|| {
            let mut all = Vec::new();
            for granule in [FINGERPRINT_GRANULE, 4096, 1000, 24, 7] {
                let device = t.fingerprint(&ask, granule);
                let read = fingerprint_by_reading(t, &ask, granule);
                assert_eq!(device, read, "granule {granule}: as read back");
                all.extend(device.expect("fingerprints"));
                all.push(u64::MAX);
            }
            Ok(all)
        })
    });
    poke(&h);
    let mut want = Vec::new();
    for granule in [FINGERPRINT_GRANULE, 4096, 1000, 24, 7] {
        let prints = host_prints(&regions, granule);
        let count: usize = regions.iter().map(|r| r.1.div_ceil(granule)).sum();
        assert_eq!(prints.len(), count);
        want.extend(prints);
        want.push(u64::MAX);
    }
    let got = got.lock();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, Ok(want));
    assert!(gpu().fingerprints > 0, "the kernel ran");
    assert_eq!(gpu().module_loads, 1);
    assert_eq!(gpu().module_loads_in_windows, 0);
    assert_eq!(gpu().frees_in_windows, 0);
}

#[test]
fn a_write_of_pass_one_changes_the_fingerprint_of_its_granule_only() {
    let h = probing(quick());
    let a = filled(&h, 5 * 64 * KIB + 100, 1);
    let b = filled(&h, 64 * KIB, 2);
    let regions = vec![(a, 5 * 64 * KIB + 100), (b, 64 * KIB)];
    // Granule 2 of `a`, its short last granule (5), and nothing of `b`.
    *POKED.lock() = vec![a + 2 * 64 * KIB + 17, a + 5 * 64 * KIB + 99];
    let ask = regions.clone();
    let got = probe(move |t, _| Some(t.fingerprint(&ask, FINGERPRINT_GRANULE)));
    poke(&h);
    let got = got.lock();
    assert_eq!(got.len(), 2);
    let (before, after) = (got[0].1.clone().unwrap(), got[1].1.clone().unwrap());
    assert_eq!((got[0].0, got[1].0), (Phase::Before, Phase::After));
    assert_eq!(after, host_prints(&regions, FINGERPRINT_GRANULE));
    let changed: Vec<usize> = (0..before.len())
        .filter(|&g| before[g] != after[g])
        .collect();
    assert_eq!(changed, [2, 5]);
}

#[test]
fn regions_larger_than_the_buffer_are_fingerprinted_in_batches() {
    let h = probing(quick());
    // 512 fingerprints a batch in tests: 1300 granules (512, 512, 276), 300 (236 in the third
    // batch, 64 in the fourth; the last granule is 1 byte) and 1 (the fourth): 4 launches of
    // 1, 1, 2 and 2 table entries, 4 copies back.
    let g = 64;
    let regions = vec![
        (filled(&h, 1300 * g, 1), 1300 * g),
        (filled(&h, 299 * g + 1, 2), 299 * g + 1),
        (filled(&h, 10, 3), 10),
    ];
    let ask = regions.clone();
    let got = probe(move |t, phase| (phase == Phase::Before).then(|| t.fingerprint(&ask, g)));
    let launches = gpu().fingerprints;
    poke(&h);
    assert_eq!(gpu().fingerprints - launches, 4);
    assert_eq!(
        gpu().fingerprint_tables,
        [(1, 512), (1, 512), (2, 512), (2, 65)]
    );
    let got = got.lock();
    assert_eq!(got[0].1, Ok(host_prints(&regions, g)));
    assert_eq!(got[0].1.as_ref().map(Vec::len), Ok(1601));
}

#[test]
fn a_context_without_the_kernel_cannot_fingerprint() {
    for (fail_load, no_entry) in [(true, false), (false, true)] {
        let h = probing(quick());
        gpu().fail_module_load = fail_load;
        gpu().no_fingerprint_entry = no_entry;
        let a = filled(&h, 100_000, 1);
        let got = probe(move |t, phase| {
            (phase == Phase::Before).then(|| {
                assert_eq!(
                    t.fingerprint(&[(a, 0)], FINGERPRINT_GRANULE),
                    Ok(vec![]),
                    "nothing to fingerprint needs no kernel"
                );
                t.fingerprint(&[(a, 100_000)], FINGERPRINT_GRANULE)
            })
        });
        poke(&h);
        assert_eq!(got.lock()[0].1, Err(DiffError::Unsupported), "{fail_load}");
        assert_eq!(gpu().module_loads, 1);
        assert_eq!(gpu().fingerprints, 0);
        drop(h);
    }
}

#[test]
fn the_compare_kernel_works_without_the_fingerprint_kernel() {
    let h = harness(3, quick());
    gpu().no_fingerprint_entry = true;
    let mut buf = Buffer::new(&h, 4096);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    let o = h.outcomes()[0].1.clone();
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert!(gpu().compares > 0, "the write set was found on the device");
    assert_eq!(gpu().module_loads, 1);
}

#[test]
fn a_fingerprint_past_the_copy_deadline_gives_its_buffers_up() {
    let h = probing(quick());
    let a = filled(&h, 3 * 64 * KIB, 1);
    let regions = vec![(a, 3 * 64 * KIB)];
    gpu().stick_fingerprints = true;
    let ask = regions.clone();
    let got = probe(move |t, phase| {
        (phase == Phase::Before).then(|| {
            let start = Instant::now();
            let stuck = t.fingerprint(&ask, FINGERPRINT_GRANULE);
            let waited = start.elapsed();
            assert_eq!(stuck, Err(DiffError::Stuck));
            assert!(
                waited >= Duration::from_millis(200) && waited < Duration::from_secs(10),
                "bounded by the copy deadline: {waited:?}"
            );
            // The buffers may still be written: this window has none any more.
            t.fingerprint(&ask, FINGERPRINT_GRANULE)
        })
    });
    poke(&h);
    assert_eq!(got.lock()[0].1, Err(DiffError::Unsupported));
    assert_eq!(gpu().frees_in_windows, 0, "given up, not freed");
    // The next launch's preparation allocates new ones; a new stream runs them.
    gpu().stick_fingerprints = false;
    let ask = regions.clone();
    let got = probe(move |t, phase| {
        (phase == Phase::Before).then(|| t.fingerprint(&ask, FINGERPRINT_GRANULE))
    });
    poke(&h);
    assert_eq!(
        got.lock()[0].1,
        Ok(host_prints(&regions, FINGERPRINT_GRANULE))
    );
    assert_eq!(gpu().module_loads, 1, "the module stays");
}
