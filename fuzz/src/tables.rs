//! The table layer against random table headers and sizes.
//!
//! [`slots`]: `rocprof_replay_sys::slots` reads and writes slots of tables whose header claims
//! a random major version and size, each table in a heap buffer of exactly the claimed size
//! (at least its 16-byte header), so AddressSanitizer (`cargo fuzz`'s default) reports any
//! access past it; without a sanitizer a canary after the buffer catches stray writes. An
//! access must succeed exactly when the layout is known and the slot lies inside the claimed
//! size (the model here restates the rules from the ROCm headers, with offsets from
//! `offset_of!`), return the bytes at the slot, and change nothing else; a refused access
//! changes nothing at all.
//!
//! [`install`]: the SDK's `OnLoad` (`rocprof_replay::__private::on_load`: claim, engine, HSA
//! backend install) against a random root table pointing at random core and AMD extension
//! tables, some slots null. Every non-null slot holds [`stub_error`], so the install must stop
//! (at the latest when it enumerates agents), return false, and leave every table exactly as
//! it was, without reading or writing past any table.

use std::mem::offset_of;

use arbitrary::{Arbitrary, Unstructured};
use rocprof_replay_sys::*;

/// Panics with the first offset where `got` and `want` differ.
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: byte {i} is {:#04x}, was {:#04x}", got[i], want[i]);
    }
    assert_eq!(got.len(), want.len(), "{what}");
}

/// Bytes after each buffer that must stay untouched (stray writes without a sanitizer).
const CANARY: usize = 64;
const CANARY_BYTE: u8 = 0xC5;

/// A table in a buffer of exactly its claimed size, with a canary after it.
struct TableBuf {
    bytes: Vec<u8>,
    size: usize,
}

impl TableBuf {
    /// A table whose header is `version`, `minor_id` bytes long (at least the header), with
    /// every byte after the header set to `fill`.
    fn new(version: ApiTableVersion, fill: u8) -> TableBuf {
        let size = (version.minor_id as usize).max(std::mem::size_of::<ApiTableVersion>());
        // Exactly `size` bytes are the table; the canary lives in a separate allocation
        // when a sanitizer watches (so an overread is caught), after it otherwise.
        let mut bytes = vec![fill; size + if cfg!(fuzzing) { 0 } else { CANARY }];
        bytes[size..].fill(CANARY_BYTE);
        let header: [u8; 16] = bytemuck_header(version);
        bytes[..16].copy_from_slice(&header);
        TableBuf { bytes, size }
    }

    fn ptr(&mut self) -> *mut ApiTableVersion {
        self.bytes.as_mut_ptr().cast()
    }

    fn table(&self) -> &[u8] {
        &self.bytes[..self.size]
    }

    fn word_at(&self, offset: usize) -> u64 {
        u64::from_le_bytes(self.bytes[offset..offset + 8].try_into().unwrap())
    }

    fn set_word(&mut self, offset: usize, value: u64) {
        self.bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn assert_canary(&self) {
        assert!(
            self.bytes[self.size..].iter().all(|&b| b == CANARY_BYTE),
            "a write past the table's {} bytes",
            self.size
        );
    }
}

fn bytemuck_header(v: ApiTableVersion) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&v.major_id.to_le_bytes());
    h[4..8].copy_from_slice(&v.minor_id.to_le_bytes());
    h[8..12].copy_from_slice(&v.step_id.to_le_bytes());
    h[12..16].copy_from_slice(&v.reserved.to_le_bytes());
    h
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Core,
    Amd,
    Tools,
}

/// The layouts the ROCm headers define, restated: `None` for an unknown one; otherwise
/// whether the AMD extension table is the 6.x layout.
fn model_layout(kind: Kind, v: ApiTableVersion) -> Option<bool> {
    match kind {
        Kind::Core => (1..=2).contains(&v.major_id).then_some(false),
        Kind::Tools => (v.major_id == 1).then_some(false),
        Kind::Amd if v.major_id == 1 && v.minor_id <= 400 => Some(false),
        Kind::Amd if v.major_id == 2 => Some(true),
        Kind::Amd => None,
    }
}

/// A typed slot, type-erased: its table, its offsets in the 5.2 and 6.x layouts (from the
/// header mirrors' `offset_of!`), and read / write (of null) through `slots`.
struct Probe {
    name: &'static str,
    kind: Kind,
    offsets: [Option<usize>; 2],
    read: unsafe fn(*mut ApiTableVersion) -> Result<Option<usize>, slots::TableError>,
    clear: unsafe fn(*mut ApiTableVersion) -> Result<Option<usize>, slots::TableError>,
}

macro_rules! probe {
    ($kind:ident, $slot:path, [$o5:expr, $o6:expr]) => {{
        /// # Safety
        /// A table header with `minor_id` readable bytes (at least 16).
        unsafe fn read(t: *mut ApiTableVersion) -> Result<Option<usize>, slots::TableError> {
            // SAFETY: forwarded.
            unsafe { $slot.read(t) }.map(|f| f.map(|f| f as usize))
        }
        /// # Safety
        /// A writable table header with `minor_id` valid bytes (at least 16).
        unsafe fn clear(t: *mut ApiTableVersion) -> Result<Option<usize>, slots::TableError> {
            // SAFETY: forwarded.
            unsafe { $slot.write(t, None) }.map(|f| f.map(|f| f as usize))
        }
        Probe {
            name: $slot.name(),
            kind: Kind::$kind,
            offsets: [$o5, $o6],
            read,
            clear,
        }
    }};
}

macro_rules! core_probe {
    ($slot:ident, $field:ident) => {
        probe!(
            Core,
            slots::core::$slot,
            [Some(offset_of!(CoreApiTable, $field)), None]
        )
    };
}
macro_rules! amd_probe {
    ($slot:ident, $field:ident) => {
        probe!(
            Amd,
            slots::amd_ext::$slot,
            [
                Some(offset_of!(AmdExtTable52, $field)),
                Some(offset_of!(AmdExtTable, $field))
            ]
        )
    };
}
macro_rules! amd6_probe {
    ($slot:ident, $field:ident) => {
        probe!(
            Amd,
            slots::amd_ext::$slot,
            [None, Some(offset_of!(AmdExtTable, $field))]
        )
    };
}

fn probes() -> Vec<Probe> {
    vec![
        core_probe!(INIT, hsa_init_fn),
        core_probe!(ITERATE_AGENTS, hsa_iterate_agents_fn),
        core_probe!(QUEUE_CREATE, hsa_queue_create_fn),
        core_probe!(MEMORY_COPY, hsa_memory_copy_fn),
        core_probe!(SIGNAL_WAIT_SCACQUIRE, hsa_signal_wait_scacquire_fn),
        core_probe!(EXECUTABLE_FREEZE, hsa_executable_freeze_fn),
        core_probe!(
            EXECUTABLE_ITERATE_AGENT_SYMBOLS,
            hsa_executable_iterate_agent_symbols_fn
        ),
        core_probe!(
            EXECUTABLE_SYMBOL_GET_INFO,
            hsa_executable_symbol_get_info_fn
        ),
        amd_probe!(COHERENCY_GET_TYPE, hsa_amd_coherency_get_type_fn),
        amd_probe!(SIGNAL_WAIT_ANY, hsa_amd_signal_wait_any_fn),
        amd_probe!(MEMORY_POOL_ALLOCATE, hsa_amd_memory_pool_allocate_fn),
        amd_probe!(MEMORY_ASYNC_COPY, hsa_amd_memory_async_copy_fn),
        amd_probe!(QUEUE_INTERCEPT_CREATE, hsa_amd_queue_intercept_create_fn),
        amd_probe!(
            QUEUE_INTERCEPT_REGISTER,
            hsa_amd_queue_intercept_register_fn
        ),
        amd_probe!(MEMORY_ASYNC_COPY_RECT, hsa_amd_memory_async_copy_rect_fn),
        amd_probe!(SIGNAL_VALUE_POINTER, hsa_amd_signal_value_pointer_fn),
        amd_probe!(QUEUE_CU_GET_MASK, hsa_amd_queue_cu_get_mask_fn),
        amd6_probe!(
            MEMORY_ASYNC_COPY_ON_ENGINE,
            hsa_amd_memory_async_copy_on_engine_fn
        ),
        amd6_probe!(VMEM_MAP, hsa_amd_vmem_map_fn),
        amd6_probe!(QUEUE_GET_INFO, hsa_amd_queue_get_info_fn),
        amd6_probe!(SIGNAL_WAIT_ALL, hsa_amd_signal_wait_all_fn),
        amd6_probe!(
            PORTABLE_EXPORT_DMABUF_V2,
            hsa_amd_portable_export_dmabuf_v2_fn
        ),
    ]
}

/// One slot-fuzz input.
#[derive(Arbitrary, Debug)]
pub struct SlotInput {
    pub table: u8,
    pub major: u8,
    pub minor: u16,
    pub step: u32,
    pub fill: u8,
    /// Which probes, in order (indices modulo the probe count).
    pub picks: Vec<u8>,
}

/// Slot reads and writes against one random table header (see the module documentation).
pub fn slots(data: &[u8]) {
    let Ok(input) = SlotInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let kind = match input.table % 3 {
        0 => Kind::Core,
        1 => Kind::Amd,
        _ => Kind::Tools,
    };
    let version = ApiTableVersion {
        // Mostly the interesting majors 0..4, sometimes anything.
        major_id: if input.major < 200 {
            u32::from(input.major % 4)
        } else {
            u32::from(input.major) << 20
        },
        minor_id: u32::from(input.minor % 2048),
        step_id: input.step,
        reserved: 0,
    };
    // A fill of 0 would make null and "unchanged" indistinguishable.
    let fill = input.fill | 1;
    let mut buf = TableBuf::new(version, fill);
    let probes = probes();
    for &pick in input.picks.iter().take(64) {
        let probe = &probes[usize::from(pick) % probes.len()];
        if probe.kind != kind && kind != Kind::Tools {
            continue; // only probes of this table kind
        }
        let expect = model_layout(probe.kind, version)
            .and_then(|v6| probe.offsets[usize::from(v6)])
            .filter(|&o| o + 8 <= version.minor_id as usize);
        let before = buf.table().to_vec();
        // SAFETY: a table header with `max(minor_id, 16)` valid bytes (TableBuf::new).
        let read = unsafe { (probe.read)(buf.ptr()) };
        assert_eq!(
            buf.table(),
            &before[..],
            "{}: a read changed the table",
            probe.name
        );
        match (expect, read) {
            (Some(o), Ok(v)) => {
                assert_eq!(
                    v.unwrap_or(0) as u64,
                    buf.word_at(o),
                    "{}: read the wrong bytes",
                    probe.name
                );
            }
            (None, Err(_)) => {}
            (e, r) => panic!(
                "{} in {kind:?} table {version:?}: expected {e:?}, read gave {r:?}",
                probe.name
            ),
        }
        // SAFETY: as above; the buffer is writable.
        let cleared = unsafe { (probe.clear)(buf.ptr()) };
        buf.assert_canary();
        match (expect, cleared) {
            (Some(o), Ok(old)) => {
                assert_eq!(
                    old.unwrap_or(0) as u64,
                    u64::from_le_bytes(before[o..o + 8].try_into().unwrap())
                );
                let mut want = before.clone();
                want[o..o + 8].fill(0);
                assert_eq!(
                    buf.table(),
                    &want[..],
                    "{}: a write touched other bytes",
                    probe.name
                );
                // Put the bytes back for the next probe.
                buf.bytes[..buf.size].copy_from_slice(&before);
            }
            (None, Err(_)) => {
                assert_eq!(
                    buf.table(),
                    &before[..],
                    "{}: a refused write changed the table",
                    probe.name
                );
            }
            (e, r) => panic!(
                "{} in {kind:?} table {version:?}: expected {e:?}, write gave {r:?}",
                probe.name
            ),
        }
    }
    // The root table's sub-table pointers, over the same buffer read as a root table.
    let root_version = ApiTableVersion {
        major_id: version.major_id,
        minor_id: version.minor_id.min(2047),
        ..version
    };
    let mut root = TableBuf::new(root_version, fill);
    for p in [
        slots::root::CORE,
        slots::root::AMD_EXT,
        slots::root::TOOLS,
        slots::root::PC_SAMPLING_EXT,
    ] {
        // SAFETY: a root header with `max(minor_id, 16)` readable bytes.
        let got = unsafe { p.read(root.ptr().cast::<HsaApiTable>()) };
        let known = (1..=3).contains(&root_version.major_id);
        let fits = p.offset + 8 <= root_version.minor_id as usize;
        match got {
            Ok(ptr) => {
                assert!(known && fits, "{}: read from {root_version:?}", p.name);
                assert_eq!(ptr as u64, root.word_at(p.offset));
            }
            Err(_) => assert!(!(known && fits), "{}: refused in {root_version:?}", p.name),
        }
    }
    root.assert_canary();
}

/// What every non-null slot of the install fuzz's tables holds: `hsa_iterate_agents`'s
/// signature (the one slot `install` calls before it gives up), failing at once.
unsafe extern "C" fn stub_error(
    _callback: Option<unsafe extern "C" fn(hsa_agent_t, *mut std::ffi::c_void) -> hsa_status_t>,
    _data: *mut std::ffi::c_void,
) -> hsa_status_t {
    HSA_STATUS_ERROR
}

/// A policy that never sees a dispatch (the install never completes).
#[derive(Default)]
pub struct NoPolicy;

impl rocprof_replay::ReplayPolicy for NoPolicy {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &rocprof_replay::DispatchInfo) -> rocprof_replay::PassPlan<Self> {
        rocprof_replay::PassPlan::skip()
    }
}

#[derive(Arbitrary, Debug)]
pub struct Header {
    pub major: u8,
    pub minor: u16,
    pub step: u8,
}

impl Header {
    fn version(&self, cap: u32) -> ApiTableVersion {
        ApiTableVersion {
            major_id: u32::from(self.major % 5),
            minor_id: u32::from(self.minor) % cap,
            step_id: u32::from(self.step),
            reserved: 0,
        }
    }
}

/// One install-fuzz input.
#[derive(Arbitrary, Debug)]
pub struct InstallInput {
    pub root: Header,
    pub core: Header,
    pub amd: Header,
    /// Root pointers that are null (bit per pointer).
    pub null_tables: u8,
    /// Function slots left null: each entry names one (index modulo the slot count).
    pub null_slots: Vec<u16>,
    /// The root's amd_ext_ pointer points at the core table (a mix-up), and vice versa.
    pub swapped: bool,
}

/// The SDK's `OnLoad` against random tables (see the module documentation).
pub fn install(data: &[u8]) {
    let Ok(input) = InstallInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    // Real sizes are 64 (root), 1016 (core), 400 / 608 (AMD): allow a little past each.
    let mut core = TableBuf::new(input.core.version(1100), 0);
    let mut amd = TableBuf::new(input.amd.version(700), 0);
    let mut root = TableBuf::new(input.root.version(80), 0);
    let stub = stub_error as hsa_iterate_agents_fn_t as usize as u64;
    for t in [&mut core, &mut amd] {
        for o in (16..t.size.saturating_sub(7)).step_by(8) {
            t.set_word(o, stub);
        }
    }
    for &s in input.null_slots.iter().take(32) {
        let t = if s & 1 == 0 { &mut core } else { &mut amd };
        let slots_in = (t.size.saturating_sub(16)) / 8;
        if slots_in > 0 {
            t.set_word(16 + 8 * (usize::from(s >> 1) % slots_in), 0);
        }
    }
    let (mut core_ptr, mut amd_ptr) = (core.ptr() as u64, amd.ptr() as u64);
    if input.swapped {
        std::mem::swap(&mut core_ptr, &mut amd_ptr);
    }
    let pointers = [
        (offset_of!(HsaApiTable, core_), core_ptr),
        (offset_of!(HsaApiTable, amd_ext_), amd_ptr),
    ];
    for (k, (o, p)) in pointers.into_iter().enumerate() {
        if o + 8 <= root.size {
            let null = input.null_tables >> k & 1 == 1;
            root.set_word(o, if null { 0 } else { p });
        }
    }
    let before = [
        root.table().to_vec(),
        core.table().to_vec(),
        amd.table().to_vec(),
    ];
    // SAFETY: the root table and the tables it points at are valid for their claimed sizes
    // (at least their headers); every function slot is null or `stub_error`.
    let loaded = unsafe {
        rocprof_replay::__private::on_load::<NoPolicy>(
            root.ptr().cast::<HsaApiTable>(),
            u64::from(input.root.major),
            0,
            std::ptr::null(),
            NoPolicy::default,
        )
    };
    assert!(!loaded, "installed into tables whose functions all fail");
    for (t, b) in [&root, &core, &amd].into_iter().zip(&before) {
        assert_same(t.table(), b, "a refused install changed a table");
        t.assert_canary();
    }
}
