//! Write-set restore on the fake driver: the compare kernel (run on the host by the fake,
//! `compare_kernel`), the granules it finds, and the fallbacks.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use rocprof_replay_sys::cuda::*;

use super::{FakeKernel, Harness, gpu, harness, quick};
use crate::engine::settings::Settings;
use crate::policy::{DeclineReason, OutcomeKind, RestoreKind, RestoreMode};

/// Byte ranges `poke` increments (offset, len).
static POKES: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
/// Runs of `wander` so far.
static WANDERS: AtomicUsize = AtomicUsize::new(0);
/// Where the k-th run of `wander` writes (bytes apart).
const WANDER_STRIDE: usize = 8192;

/// `poke(uint8_t* data, uint32_t n)`: increments the bytes of [`POKES`] (not idempotent).
fn poke(args: *mut *mut c_void) {
    // SAFETY: the tests pass (&CUdeviceptr, &u32).
    let data = unsafe { *(*args).cast::<CUdeviceptr>() } as *mut u8;
    for &(offset, len) in POKES.lock().iter() {
        for i in offset..offset + len {
            // SAFETY: the ranges lie in the buffer the test allocated.
            unsafe { *data.add(i) = (*data.add(i)).wrapping_add(1) };
        }
    }
}

/// `wander(uint32_t* data, uint32_t n)`: its k-th run increments the word at
/// `k * WANDER_STRIDE` bytes: every pass writes somewhere else.
fn wander(args: *mut *mut c_void) {
    // SAFETY: as above.
    let data = unsafe { *(*args).cast::<CUdeviceptr>() } as *mut u8;
    let k = WANDERS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the test's buffer is large enough for every pass.
    unsafe { *data.add(k * WANDER_STRIDE).cast::<u32>() += 1 };
}

static POKE: FakeKernel = FakeKernel {
    run: poke,
    module: 0,
};
static WANDER: FakeKernel = FakeKernel {
    run: wander,
    module: 0,
};

/// Whether `f` is one of this file's kernels (their parameters are those of `add_one`).
pub(super) fn writer(f: *const FakeKernel) -> bool {
    std::ptr::eq(f, &POKE) || std::ptr::eq(f, &WANDER) || std::ptr::eq(f, &POKE_ALL)
}

/// An application buffer of `len` bytes.
struct Bytes {
    ptr: CUdeviceptr,
    n: u32,
}

impl Bytes {
    fn new(h: &Harness, len: usize) -> Bytes {
        Bytes {
            ptr: h.alloc(len) as CUdeviceptr,
            n: len as u32,
        }
    }
    fn launch(&mut self, h: &Harness, kernel: &FakeKernel) {
        let mut args: [*mut c_void; 2] = [
            (&mut self.ptr as *mut CUdeviceptr).cast(),
            (&mut self.n as *mut u32).cast(),
        ];
        h.launch_named(kernel, &mut args, 0, c"_Z4pokePhj");
    }
    fn bytes(&self) -> Vec<u8> {
        // SAFETY: a live fake allocation of n bytes.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.n as usize) }.to_vec()
    }
}

/// What one execution of `poke` leaves in a zeroed buffer of `len` bytes.
fn poked_once(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for &(offset, n) in POKES.lock().iter() {
        for b in &mut v[offset..offset + n] {
            *b += 1;
        }
    }
    v
}

const MIB: usize = 1 << 20;

#[test]
fn a_sparse_writer_of_a_large_buffer_gets_write_set_restores_of_its_granules() {
    let h = harness(3, quick());
    // 4 MiB, 4 KiB granules: three writes far apart (more than the 64 KiB merge gap).
    *POKES.lock() = vec![(100, 10), (MIB + 5, 5000), (4 * MIB - 1, 1)];
    let mut buf = Bytes::new(&h, 4 * MIB);
    buf.launch(&h, &POKE);
    assert_eq!(buf.bytes(), poked_once(4 * MIB), "one execution");
    let o = h.outcomes()[0].1.clone();
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(o.passes, 3);
    assert_eq!(o.restore_mode, Some(RestoreKind::WriteSet));
    // Granule 0; granules 256 and 257 (the write crosses into the second); granule 1023.
    let written = 4 * 4096;
    assert_eq!(o.written_bytes, written as u64);
    assert_eq!(
        o.restored_bytes,
        3 * written as u64,
        "the write set before passes 2 and 3, and pass 1's result written back"
    );
    assert_eq!(
        o.verified_bytes,
        2 * 4 * MIB as u64,
        "after pass 1, after pass 3"
    );
    assert_eq!(o.inputs_restored, Some(true));
    assert_eq!(h.launches(), 3, "compares are not passes");
    assert_eq!(
        gpu().compares,
        2 * 16,
        "two diffs of 1024 granules, 64 granules a batch (one launch each)"
    );
    assert_eq!(gpu().module_loads, 1);
    // A second dispatch in the context reuses the loaded kernel.
    buf.launch(&h, &POKE);
    let twice: Vec<u8> = poked_once(4 * MIB).iter().map(|b| b * 2).collect();
    assert_eq!(buf.bytes(), twice);
    let o = h.outcomes()[1].1.clone();
    assert_eq!(
        (o.restore_mode, o.written_bytes),
        (Some(RestoreKind::WriteSet), written as u64)
    );
    assert_eq!(gpu().module_loads, 1, "loaded once per context");
    assert_eq!(
        gpu().module_loads_in_windows,
        0,
        "loaded outside any window"
    );
}

/// Absolute byte ranges `poke_all` increments (address, len).
static POKES_AT: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// `poke_all(uint8_t*, uint32_t)`: increments the bytes of [`POKES_AT`], in any buffer.
fn poke_all(_: *mut *mut c_void) {
    for &(addr, len) in POKES_AT.lock().iter() {
        for i in addr..addr + len {
            // SAFETY: the ranges lie in buffers the test allocated.
            unsafe { *(i as *mut u8) = (*(i as *const u8)).wrapping_add(1) };
        }
    }
}

static POKE_ALL: FakeKernel = FakeKernel {
    run: poke_all,
    module: 0,
};

#[test]
fn regions_share_batches_and_a_region_spans_several() {
    let h = harness(3, quick());
    // Batches of 64 granules (the tests' FLAG_BYTES): 256 + 3 + 75 granules.
    let mut a = Bytes::new(&h, MIB);
    let b = Bytes::new(&h, 10 << 10);
    let c = Bytes::new(&h, 300 << 10);
    let (pa, pb, pc) = (a.ptr as usize, b.ptr as usize, c.ptr as usize);
    *POKES_AT.lock() = vec![
        // Granules 63 and 64 of `a`: across a batch boundary.
        (pa + 63 * 4096 + 4000, 200),
        // The last byte of `b`: its third granule is 2 KiB.
        (pb + (10 << 10) - 1, 1),
        (pc, 1),
    ];
    a.launch(&h, &POKE_ALL);
    let o = h.outcomes()[0].1.clone();
    assert_eq!(o.restore_mode, Some(RestoreKind::WriteSet));
    assert_eq!(o.written_bytes, 2 * 4096 + 2048 + 4096);
    assert_eq!(o.verified_bytes, 2 * (MIB + (310 << 10)) as u64);
    assert!(
        gpu().compares >= 2 * 6,
        "334 granules take 6 batches or more"
    );
    let mut once = vec![0u8; MIB];
    once[63 * 4096 + 4000..63 * 4096 + 4200].fill(1);
    assert_eq!(a.bytes(), once);
    assert_eq!(b.bytes()[(10 << 10) - 1], 1);
    assert_eq!(b.bytes().iter().map(|&x| u32::from(x)).sum::<u32>(), 1);
    assert_eq!(c.bytes()[0], 1);
    assert_eq!(c.bytes().iter().map(|&x| u32::from(x)).sum::<u32>(), 1);
}

#[test]
fn a_dense_writer_gets_full_restores_after_the_compare() {
    let h = harness(3, quick());
    *POKES.lock() = vec![(0, 40_000)];
    let mut buf = Bytes::new(&h, 64 << 10);
    buf.launch(&h, &POKE);
    assert_eq!(buf.bytes(), poked_once(64 << 10));
    let o = h.outcomes()[0].1.clone();
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(o.restore_mode, Some(RestoreKind::Full));
    assert_eq!(o.written_bytes, 40_960, "ten granules");
    assert_eq!(o.restored_bytes, 2 * (64 << 10) as u64);
    assert_eq!(gpu().compares, 1, "no final diff after full restores");
}

#[test]
fn granules_start_at_the_region_and_the_last_one_is_short() {
    // No merging: the two writes stay apart however close.
    let h = harness(
        3,
        Settings {
            merge_gap: 0,
            ..quick()
        },
    );
    // 40 001 bytes: granules 0..=9, the last one 36 864..40 001 (3 137 bytes). A write across
    // the first granule boundary, and the very last byte.
    *POKES.lock() = vec![(4095, 2), (40_000, 1)];
    let mut buf = Bytes::new(&h, 40_001);
    buf.launch(&h, &POKE);
    assert_eq!(buf.bytes(), poked_once(40_001));
    let o = h.outcomes()[0].1.clone();
    assert_eq!(o.restore_mode, Some(RestoreKind::WriteSet));
    assert_eq!(o.written_bytes, 2 * 4096 + 3137);
}

#[test]
fn write_set_mode_repairs_writes_of_later_passes_and_strict_mode_verifies_every_pass() {
    for (mode, verified, inputs) in [
        (RestoreMode::Auto, 2, Some(false)),
        (RestoreMode::Strict, 4, Some(true)),
    ] {
        let h = harness(
            3,
            Settings {
                restore: mode,
                ..quick()
            },
        );
        WANDERS.store(0, Ordering::Relaxed);
        let mut buf = Bytes::new(&h, MIB);
        buf.launch(&h, &WANDER);
        assert_eq!(WANDERS.load(Ordering::Relaxed), 3, "{mode:?}");
        let mut once = vec![0u8; MIB];
        once[0] = 1;
        assert_eq!(
            buf.bytes(),
            once,
            "{mode:?}: pass 1's result, nothing of later passes"
        );
        let o = h.outcomes()[0].1.clone();
        let kind = match mode {
            RestoreMode::Strict => RestoreKind::Strict,
            _ => RestoreKind::WriteSet,
        };
        assert_eq!(o.restore_mode, Some(kind), "{mode:?}");
        assert_eq!(o.written_bytes, 4096, "{mode:?}");
        assert_eq!(o.verified_bytes, verified * MIB as u64, "{mode:?}");
        assert_eq!(
            o.inputs_restored, inputs,
            "{mode:?}: pass 3 saw pass 2's write unless verified"
        );
        assert_eq!(
            gpu().compares as u64,
            4 * verified,
            "{mode:?}: 256 granules, 4 batches"
        );
        drop(h);
    }
}

#[test]
fn a_kernel_that_cannot_be_loaded_means_full_restores_for_the_context() {
    let h = harness(3, quick());
    gpu().fail_module_load = true;
    *POKES.lock() = vec![(7, 3)];
    let mut buf = Bytes::new(&h, MIB);
    for round in 1..=2u8 {
        buf.launch(&h, &POKE);
        let once: Vec<u8> = poked_once(MIB).iter().map(|b| b * round).collect();
        assert_eq!(buf.bytes(), once, "the application's result");
        let o = h.outcomes()[usize::from(round) - 1].1.clone();
        assert_eq!(o.kind, OutcomeKind::Replayed);
        assert_eq!(o.restore_mode, Some(RestoreKind::Full));
        assert_eq!(o.written_bytes, 0, "no diff ran");
        assert_eq!(o.restored_bytes, 2 * MIB as u64);
    }
    assert_eq!(gpu().module_loads, 1, "tried once, never again");
    assert_eq!(gpu().compares, 0);
}

#[test]
fn snapshots_in_pinned_host_memory_are_compared_on_the_host() {
    let h = harness(3, quick());
    // No device memory to spare: the arena is pinned host memory.
    gpu().device_free = 0;
    *POKES.lock() = vec![(5000, 10)];
    let mut buf = Bytes::new(&h, MIB);
    buf.launch(&h, &POKE);
    assert_eq!(buf.bytes(), poked_once(MIB));
    let o = h.outcomes()[0].1.clone();
    assert_eq!(o.staging, Some("pinned_host"));
    assert_eq!(o.restore_mode, Some(RestoreKind::WriteSet));
    assert_eq!(o.written_bytes, 4096);
    assert_eq!(gpu().compares, 0, "no kernel for host-readable snapshots");
}

#[test]
fn a_compare_that_never_finishes_stops_replay_after_pass_one() {
    let h = harness(3, quick());
    gpu().stick_compares = true;
    *POKES.lock() = vec![(0, 1)];
    let mut buf = Bytes::new(&h, MIB);
    buf.launch(&h, &POKE);
    assert_eq!(
        buf.bytes(),
        poked_once(MIB),
        "pass 1 is the application's run"
    );
    let o = h.outcomes()[0].1.clone();
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::CopyTimeout));
    assert_eq!(o.passes, 1);
    assert_eq!(h.launches(), 1);
    // The next dispatch gets a fresh stream and flag buffers.
    gpu().stick_compares = false;
    buf.launch(&h, &POKE);
    let o = h.outcomes()[1].1.clone();
    assert_eq!(
        (o.kind, o.restore_mode),
        (OutcomeKind::Replayed, Some(RestoreKind::WriteSet))
    );
    assert_eq!(buf.bytes()[0], 2);
}

#[test]
fn small_snapshot_copies_go_through_one_copy_kernel_launch_and_leave_one_execution() {
    let h = harness(3, quick());
    // Far apart: a write set of two ranges, restored before passes 2 and 3.
    *POKES.lock() = vec![(0, 1), (512 * 1024 + 5, 2)];
    let mut buf = Bytes::new(&h, MIB);
    buf.launch(&h, &POKE);
    assert_eq!(buf.bytes(), poked_once(MIB), "one execution");
    let o = h.outcomes()[0].1.clone();
    assert_eq!(
        (o.kind, o.passes, o.restore_mode),
        (OutcomeKind::Replayed, 3, Some(RestoreKind::WriteSet))
    );
    assert_eq!(o.staging, Some("device"));
    let tables = gpu().copy_tables.clone();
    assert!(
        tables.iter().filter(|&&n| n == 2).count() >= 2,
        "each restore of the two ranges is one copy-kernel launch: {tables:?}"
    );
    // The restore before pass 3 is the one before pass 2 again, with no compare between:
    // its table is on the device already (the fake checks it against its pinned twin).
    assert!(
        gpu().resident_tables >= 1,
        "the second restore copied its table again"
    );
    // The same without the kernel in the module: one cuMemcpyAsync per range, same result.
    drop(h);
    let h = harness(3, quick());
    gpu().no_copy_entry = true;
    let mut buf = Bytes::new(&h, MIB);
    buf.launch(&h, &POKE);
    assert_eq!(buf.bytes(), poked_once(MIB));
    assert!(gpu().copy_tables.is_empty());
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
}

#[test]
fn a_copy_kernel_that_never_finishes_stops_replay_after_pass_one_and_its_table_is_never_reused() {
    let h = harness(3, quick());
    *POKES.lock() = vec![(0, 1), (512 * 1024 + 5, 2)];
    let mut buf = Bytes::new(&h, MIB);
    gpu().stick_copy_kernels = true;
    buf.launch(&h, &POKE);
    // The first small batch after pass 1 (keeping the written ranges to write back later)
    // sticks: the application has pass 1's result, one execution.
    let o = h.outcomes()[0].1.clone();
    assert_eq!(
        (o.kind, o.passes),
        (OutcomeKind::Declined(DeclineReason::CopyTimeout), 1),
        "{o:?}"
    );
    assert_eq!(buf.bytes(), poked_once(MIB));
    gpu().stick_copy_kernels = false;
    // The next dispatch: a fresh stream; the flags and their table were given up (the compare
    // is prepared again outside the window), and it replays correctly from the memory it finds.
    let before = buf.bytes();
    buf.launch(&h, &POKE);
    let o = h.outcomes()[1].1.clone();
    assert_eq!(o.kind, OutcomeKind::Replayed, "{o:?}");
    let mut want = before;
    for &(offset, n) in POKES.lock().iter() {
        for b in &mut want[offset..offset + n] {
            *b += 1;
        }
    }
    assert_eq!(buf.bytes(), want, "one execution of the second dispatch");
}

#[test]
fn a_virtual_memory_mapping_is_never_copied_by_the_kernel() {
    let h = harness(3, quick());
    *POKES.lock() = vec![(0, 1), (512 * 1024 + 5, 2)];
    // The same two far-apart ranges as above, in a cuMemMap mapping: one may lack access for
    // this device, which a kernel would fault on; its copies stay cuMemcpyAsync.
    let mut buf = Bytes {
        ptr: h.map(MIB) as CUdeviceptr,
        n: MIB as u32,
    };
    buf.launch(&h, &POKE);
    assert_eq!(buf.bytes(), poked_once(MIB), "one execution");
    let o = h.outcomes()[0].1.clone();
    assert_eq!(
        (o.kind, o.passes, o.restore_mode),
        (OutcomeKind::Replayed, 3, Some(RestoreKind::WriteSet)),
        "{o:?}"
    );
    assert!(gpu().copy_tables.is_empty(), "{:?}", gpu().copy_tables);
}
