//! Built-in shadows of rocprof-replay's device kernels (`rocprof-replay/kernels/amdgpu/compare.cl`,
//! shipped as AMDGPU code objects), so that the HSA backend's compare and fingerprint dispatches
//! run on hsa-emu through the same code object, loader and queue as on a GPU.
//!
//! | kernel | per work-group `w` of `G` (one dimension), over global granules `g = w, w + G, ...` below `total` |
//! |---|---|
//! | `rocprof_replay_compare_table(table, n, granule, total, flags)` | `flags[g] = 1` if any byte of granule `g - first` of the entry's `live` and `snap` (`len` bytes each) differs, else 0 |
//! | `rocprof_replay_fingerprint_table(table, n, granule, total, out)` | `out[g]` = the fingerprint of granule `g - first` of the entry's `src` (`len` bytes) |
//!
//! The entry of granule `g` is the table's last entry (sorted by `first`) with `first <= g`;
//! granules are cut from each entry's own start, the last one may be shorter; a granule before
//! the first entry or past its entry's length is skipped (nothing written), and so is every
//! granule when `granule` or `n` is 0. The fingerprint is rocprof-replay's
//! `footprint::fingerprint`: `len · GOLDEN + Σ mix(wᵢ ⊕ (i + 1) · GOLDEN)` (wrapping), `wᵢ` the
//! little-endian 8-byte words, the last zero-padded, `mix` SplitMix64's finaliser — what the
//! device kernel computes, bit for bit.
//!
//! As for the blit shadows, the explicit arguments (`table` 8 bytes at 0, `n` 4 at 8, `granule`,
//! `total`, `out` 8 each at 16, 24, 32) are checked against the code object's metadata before a
//! built-in is used.

use crate::blit::BuiltIn;
use crate::kernel_abi::hsa_emu_workgroup_t;

/// The kernels' explicit arguments: `(table, n, granule, total, out)`.
const TABLE_ARGS: &[(u64, u64)] = &[(0, 8), (8, 4), (16, 8), (24, 8), (32, 8)];

/// The built-in shadows of this module.
static BUILT_INS: &[BuiltIn] = &[
    BuiltIn {
        name: "rocprof_replay_compare_table",
        entry: compare_table,
        explicit: TABLE_ARGS,
        global_offset: None,
    },
    BuiltIn {
        name: "rocprof_replay_fingerprint_table",
        entry: fingerprint_table,
        explicit: TABLE_ARGS,
        global_offset: None,
    },
];

/// The built-in shadow named `name`, if it is one of rocprof-replay's kernels.
pub(crate) fn find(name: &str) -> Option<&'static BuiltIn> {
    BUILT_INS.iter().find(|b| b.name == name)
}

/// `rocprof_replay_compare_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct CompareEntry {
    live: u64,
    snap: u64,
    len: u64,
    first: u64,
}

/// `rocprof_replay_fingerprint_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PrintEntry {
    src: u64,
    len: u64,
    first: u64,
}

/// The kernels' arguments (both: `table` points at entries of the kernel's kind).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct TableArgs {
    table: u64,
    n: u32,
    granule: u64,
    total: u64,
    out: u64,
}

const _: () = {
    assert!(std::mem::offset_of!(TableArgs, n) == 8);
    assert!(std::mem::offset_of!(TableArgs, granule) == 16);
    assert!(std::mem::offset_of!(TableArgs, out) == 32);
    assert!(std::mem::size_of::<TableArgs>() == 40);
    assert!(std::mem::size_of::<CompareEntry>() == 32);
    assert!(std::mem::size_of::<PrintEntry>() == 24);
};

/// Entries that have a `first` field.
trait Entry: Copy {
    fn first(&self) -> u64;
    fn len(&self) -> u64;
}

impl Entry for CompareEntry {
    fn first(&self) -> u64 {
        self.first
    }
    fn len(&self) -> u64 {
        self.len
    }
}

impl Entry for PrintEntry {
    fn first(&self) -> u64 {
        self.first
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// Calls `f(g, entry, start, glen)` for every global granule `g` of work-group `wg` (grid
/// stride over the groups of the first dimension) that lies in an entry of `table`: `glen`
/// bytes from `start` in the entry's buffers.
fn for_each_granule<E: Entry>(
    wg: &hsa_emu_workgroup_t,
    table: &[E],
    granule: u64,
    total: u64,
    mut f: impl FnMut(u64, &E, u64, u64),
) {
    if wg.group_id == [0, 0, 0] {
        // Once per dispatch: the fault knob of a slow device compare.
        if let Some(delay) = crate::faults::faults().replay_kernel_delay() {
            std::thread::sleep(delay);
        }
    }
    if granule == 0 || table.is_empty() || wg.workgroup_size[0] == 0 {
        return;
    }
    let groups = u64::from(wg.grid_size[0].div_ceil(wg.workgroup_size[0])).max(1);
    let mut g = u64::from(wg.group_id[0]);
    while g < total {
        // The last entry with first <= g (the first entry when none is).
        let k = table.partition_point(|e| e.first() <= g).saturating_sub(1);
        let e = &table[k];
        if g >= e.first() {
            let local = g - e.first();
            if local < e.len().div_ceil(granule) {
                let start = local * granule;
                f(g, e, start, granule.min(e.len() - start));
            }
        }
        g = match g.checked_add(groups) {
            Some(next) => next,
            None => break,
        };
    }
}

/// The dispatch's kernarg and its table.
///
/// # Safety
/// `wg` must be a live work-group record whose kernarg holds a [`TableArgs`] naming `n` entries
/// of `E` (the layout was checked against the kernel's metadata when the shadow was chosen).
unsafe fn table_of<'a, E>(
    wg: *const hsa_emu_workgroup_t,
) -> (hsa_emu_workgroup_t, TableArgs, &'a [E]) {
    // SAFETY: per the function contract; kernarg read unaligned to depend on nothing.
    let (wg, a) = unsafe {
        let wg = *wg;
        (wg, wg.kernarg.cast::<TableArgs>().read_unaligned())
    };
    let table: &[E] = if a.n == 0 || a.table == 0 {
        &[]
    } else {
        // SAFETY: the table the dispatcher wrote for the device kernel, `n` entries.
        unsafe { std::slice::from_raw_parts(a.table as *const E, a.n as usize) }
    };
    (wg, a, table)
}

unsafe extern "C" fn compare_table(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a, table) = unsafe { table_of::<CompareEntry>(wg) };
    let flags = a.out as *mut u8;
    for_each_granule(&wg, table, a.granule, a.total, |g, e, start, glen| {
        // SAFETY: the regions the dispatcher named, `len` bytes each (start + glen <= len),
        // and its result buffer of `total` bytes (g < total); device memory is host memory here.
        unsafe {
            let live = std::slice::from_raw_parts((e.live + start) as *const u8, glen as usize);
            let snap = std::slice::from_raw_parts((e.snap + start) as *const u8, glen as usize);
            flags.add(g as usize).write(u8::from(live != snap));
        }
    });
}

unsafe extern "C" fn fingerprint_table(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a, table) = unsafe { table_of::<PrintEntry>(wg) };
    let out = a.out as *mut u64;
    for_each_granule(&wg, table, a.granule, a.total, |g, e, start, glen| {
        // SAFETY: as in compare_table; the result buffer holds `total` u64s (written unaligned
        // to depend on nothing).
        unsafe {
            let bytes = std::slice::from_raw_parts((e.src + start) as *const u8, glen as usize);
            out.add(g as usize).write_unaligned(fingerprint(bytes));
        }
    });
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// rocprof-replay's `footprint::fingerprint` of one granule.
fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h = (bytes.len() as u64).wrapping_mul(GOLDEN);
    for (i, w) in bytes.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..w.len()].copy_from_slice(w);
        let key = (i as u64 + 1).wrapping_mul(GOLDEN);
        h = h.wrapping_add(mix(u64::from_le_bytes(word) ^ key));
    }
    h
}

#[cfg(test)]
mod tests;
