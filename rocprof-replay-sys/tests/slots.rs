//! Version-aware slot access on hand-built tables of each layout, and the 6.x `AmdExtTable`
//! offsets checked against the table in `shared/HSA-ABI.md` (no 6.x headers exist on Debian).

use std::ffi::c_void;
use std::mem::{offset_of, size_of};

use rocprof_replay_sys::*;

unsafe extern "C" fn fake_pool_allocate(
    _pool: hsa_amd_memory_pool_t,
    _size: usize,
    _flags: u32,
    _ptr: *mut *mut c_void,
) -> hsa_status_t {
    HSA_STATUS_ERROR_OUT_OF_RESOURCES
}

unsafe extern "C" fn fake_vmem_map(
    _va: *mut c_void,
    _size: usize,
    _offset: usize,
    _handle: hsa_amd_vmem_alloc_handle_t,
    _flags: u64,
) -> hsa_status_t {
    HSA_STATUS_ERROR_INVALID_ARGUMENT
}

/// A table's bytes, 8-byte aligned, with a header.
struct RawTable {
    words: Vec<u64>,
}

impl RawTable {
    fn new(major: u32, size: u32, alloc_bytes: usize) -> Self {
        let mut t = RawTable {
            words: vec![0; alloc_bytes.div_ceil(8)],
        };
        let v = ApiTableVersion {
            major_id: major,
            minor_id: size,
            step_id: 0,
            reserved: 0,
        };
        // SAFETY: the buffer is at least 16 bytes and 8-byte aligned.
        unsafe { t.header().write(v) };
        t
    }
    fn header(&mut self) -> *mut ApiTableVersion {
        self.words.as_mut_ptr().cast()
    }
    fn word_at(&self, offset: usize) -> u64 {
        self.words[offset / 8]
    }
}

#[test]
fn amd_ext_6x_offsets_match_the_abi_document() {
    // HSA-ABI.md §4, column "6.x+ (major 2)", plus the slots that never moved.
    let expected: &[(&str, usize)] = &[
        ("coherency_get_type", 16),
        ("profiling_set_profiler_enabled", 32),
        ("profiling_get_dispatch_time", 48),
        ("profiling_get_async_copy_time", 56),
        ("signal_async_handler", 72),
        ("async_function", 80),
        ("signal_wait_any", 88),
        ("memory_pool_get_info", 104),
        ("agent_iterate_memory_pools", 112),
        ("memory_pool_allocate", 120),
        ("memory_pool_free", 128),
        ("memory_async_copy", 136),
        ("memory_async_copy_on_engine", 144),
        ("agent_memory_pool_get_info", 160),
        ("agents_allow_access", 168),
        ("memory_lock", 192),
        ("memory_unlock", 200),
        ("memory_fill", 208),
        ("pointer_info", 240),
        ("pointer_info_set_userdata", 248),
        ("signal_create", 280),
        ("queue_intercept_create", 312),
        ("queue_intercept_register", 320),
        ("queue_set_priority", 328),
        ("memory_async_copy_rect", 336),
        ("runtime_queue_create_register", 344),
        ("register_deallocation_callback", 360),
        ("deregister_deallocation_callback", 368),
        ("signal_value_pointer", 376),
        ("vmem_address_reserve", 456),
        ("vmem_address_free", 464),
        ("vmem_handle_create", 472),
        ("vmem_handle_release", 480),
        ("vmem_map", 488),
        ("vmem_unmap", 496),
        ("vmem_set_access", 504),
        ("vmem_get_access", 512),
        ("agent_set_async_scratch_limit", 552),
        ("queue_get_info", 560),
        ("vmem_address_reserve_align", 568),
        ("enable_logging", 576),
        ("signal_wait_all", 584),
        ("memory_get_preferred_copy_engine", 592),
        ("portable_export_dmabuf_v2", 600),
    ];
    let actual: &[(&str, usize)] = &[
        (
            "coherency_get_type",
            offset_of!(AmdExtTable, hsa_amd_coherency_get_type_fn),
        ),
        (
            "profiling_set_profiler_enabled",
            offset_of!(AmdExtTable, hsa_amd_profiling_set_profiler_enabled_fn),
        ),
        (
            "profiling_get_dispatch_time",
            offset_of!(AmdExtTable, hsa_amd_profiling_get_dispatch_time_fn),
        ),
        (
            "profiling_get_async_copy_time",
            offset_of!(AmdExtTable, hsa_amd_profiling_get_async_copy_time_fn),
        ),
        (
            "signal_async_handler",
            offset_of!(AmdExtTable, hsa_amd_signal_async_handler_fn),
        ),
        (
            "async_function",
            offset_of!(AmdExtTable, hsa_amd_async_function_fn),
        ),
        (
            "signal_wait_any",
            offset_of!(AmdExtTable, hsa_amd_signal_wait_any_fn),
        ),
        (
            "memory_pool_get_info",
            offset_of!(AmdExtTable, hsa_amd_memory_pool_get_info_fn),
        ),
        (
            "agent_iterate_memory_pools",
            offset_of!(AmdExtTable, hsa_amd_agent_iterate_memory_pools_fn),
        ),
        (
            "memory_pool_allocate",
            offset_of!(AmdExtTable, hsa_amd_memory_pool_allocate_fn),
        ),
        (
            "memory_pool_free",
            offset_of!(AmdExtTable, hsa_amd_memory_pool_free_fn),
        ),
        (
            "memory_async_copy",
            offset_of!(AmdExtTable, hsa_amd_memory_async_copy_fn),
        ),
        (
            "memory_async_copy_on_engine",
            offset_of!(AmdExtTable, hsa_amd_memory_async_copy_on_engine_fn),
        ),
        (
            "agent_memory_pool_get_info",
            offset_of!(AmdExtTable, hsa_amd_agent_memory_pool_get_info_fn),
        ),
        (
            "agents_allow_access",
            offset_of!(AmdExtTable, hsa_amd_agents_allow_access_fn),
        ),
        (
            "memory_lock",
            offset_of!(AmdExtTable, hsa_amd_memory_lock_fn),
        ),
        (
            "memory_unlock",
            offset_of!(AmdExtTable, hsa_amd_memory_unlock_fn),
        ),
        (
            "memory_fill",
            offset_of!(AmdExtTable, hsa_amd_memory_fill_fn),
        ),
        (
            "pointer_info",
            offset_of!(AmdExtTable, hsa_amd_pointer_info_fn),
        ),
        (
            "pointer_info_set_userdata",
            offset_of!(AmdExtTable, hsa_amd_pointer_info_set_userdata_fn),
        ),
        (
            "signal_create",
            offset_of!(AmdExtTable, hsa_amd_signal_create_fn),
        ),
        (
            "queue_intercept_create",
            offset_of!(AmdExtTable, hsa_amd_queue_intercept_create_fn),
        ),
        (
            "queue_intercept_register",
            offset_of!(AmdExtTable, hsa_amd_queue_intercept_register_fn),
        ),
        (
            "queue_set_priority",
            offset_of!(AmdExtTable, hsa_amd_queue_set_priority_fn),
        ),
        (
            "memory_async_copy_rect",
            offset_of!(AmdExtTable, hsa_amd_memory_async_copy_rect_fn),
        ),
        (
            "runtime_queue_create_register",
            offset_of!(AmdExtTable, hsa_amd_runtime_queue_create_register_fn),
        ),
        (
            "register_deallocation_callback",
            offset_of!(AmdExtTable, hsa_amd_register_deallocation_callback_fn),
        ),
        (
            "deregister_deallocation_callback",
            offset_of!(AmdExtTable, hsa_amd_deregister_deallocation_callback_fn),
        ),
        (
            "signal_value_pointer",
            offset_of!(AmdExtTable, hsa_amd_signal_value_pointer_fn),
        ),
        (
            "vmem_address_reserve",
            offset_of!(AmdExtTable, hsa_amd_vmem_address_reserve_fn),
        ),
        (
            "vmem_address_free",
            offset_of!(AmdExtTable, hsa_amd_vmem_address_free_fn),
        ),
        (
            "vmem_handle_create",
            offset_of!(AmdExtTable, hsa_amd_vmem_handle_create_fn),
        ),
        (
            "vmem_handle_release",
            offset_of!(AmdExtTable, hsa_amd_vmem_handle_release_fn),
        ),
        ("vmem_map", offset_of!(AmdExtTable, hsa_amd_vmem_map_fn)),
        ("vmem_unmap", offset_of!(AmdExtTable, hsa_amd_vmem_unmap_fn)),
        (
            "vmem_set_access",
            offset_of!(AmdExtTable, hsa_amd_vmem_set_access_fn),
        ),
        (
            "vmem_get_access",
            offset_of!(AmdExtTable, hsa_amd_vmem_get_access_fn),
        ),
        (
            "agent_set_async_scratch_limit",
            offset_of!(AmdExtTable, hsa_amd_agent_set_async_scratch_limit_fn),
        ),
        (
            "queue_get_info",
            offset_of!(AmdExtTable, hsa_amd_queue_get_info_fn),
        ),
        (
            "vmem_address_reserve_align",
            offset_of!(AmdExtTable, hsa_amd_vmem_address_reserve_align_fn),
        ),
        (
            "enable_logging",
            offset_of!(AmdExtTable, hsa_amd_enable_logging_fn),
        ),
        (
            "signal_wait_all",
            offset_of!(AmdExtTable, hsa_amd_signal_wait_all_fn),
        ),
        (
            "memory_get_preferred_copy_engine",
            offset_of!(AmdExtTable, hsa_amd_memory_get_preferred_copy_engine_fn),
        ),
        (
            "portable_export_dmabuf_v2",
            offset_of!(AmdExtTable, hsa_amd_portable_export_dmabuf_v2_fn),
        ),
    ];
    assert_eq!(expected, actual);
    assert_eq!(size_of::<AmdExtTable>(), 608);
    // The slot constants carry the same offsets as the structs.
    assert_eq!(
        slots::amd_ext::VMEM_MAP.offset_in(Layout::AmdExtRocm6),
        Some(488)
    );
    assert_eq!(
        slots::amd_ext::VMEM_MAP.offset_in(Layout::AmdExtRocm5),
        None
    );
    assert_eq!(
        slots::amd_ext::POINTER_INFO.offset_in(Layout::AmdExtRocm5),
        Some(224)
    );
    assert_eq!(
        slots::amd_ext::POINTER_INFO.offset_in(Layout::AmdExtRocm6),
        Some(240)
    );
}

#[test]
fn core_offsets_match_the_abi_document() {
    let expected: &[(usize, usize)] = &[
        (slots::core::INIT.offset_in(Layout::Stable).unwrap(), 16),
        (
            slots::core::QUEUE_CREATE.offset_in(Layout::Stable).unwrap(),
            72,
        ),
        (
            slots::core::QUEUE_DESTROY
                .offset_in(Layout::Stable)
                .unwrap(),
            88,
        ),
        (
            slots::core::QUEUE_ADD_WRITE_INDEX_SCACQ_SCREL
                .offset_in(Layout::Stable)
                .unwrap(),
            184,
        ),
        (
            slots::core::MEMORY_ALLOCATE
                .offset_in(Layout::Stable)
                .unwrap(),
            280,
        ),
        (
            slots::core::MEMORY_COPY.offset_in(Layout::Stable).unwrap(),
            296,
        ),
        (
            slots::core::SIGNAL_CAS_SCACQ_SCREL
                .offset_in(Layout::Stable)
                .unwrap(),
            592,
        ),
        (
            slots::core::EXECUTABLE_FREEZE
                .offset_in(Layout::Stable)
                .unwrap(),
            704,
        ),
        (
            slots::core::SYSTEM_GET_MAJOR_EXTENSION_TABLE
                .offset_in(Layout::Stable)
                .unwrap(),
            800,
        ),
        (
            slots::core::EXECUTABLE_ITERATE_PROGRAM_SYMBOLS
                .offset_in(Layout::Stable)
                .unwrap(),
            1008,
        ),
    ];
    for (actual, want) in expected {
        assert_eq!(actual, want);
    }
    assert_eq!(size_of::<CoreApiTable>(), 1016);
}

#[test]
fn same_function_lands_at_each_layouts_offset() {
    for (major, size, alloc, expect) in [(1u32, 400u32, 400usize, 120usize), (2, 608, 608, 120)] {
        let mut t = RawTable::new(major, size, alloc);
        // SAFETY: the table is live, writable and `size` bytes long.
        let old = unsafe {
            slots::amd_ext::MEMORY_POOL_ALLOCATE.write(t.header(), Some(fake_pool_allocate))
        };
        assert_eq!(old.map(|o| o.is_none()), Ok(true));
        assert_eq!(t.word_at(expect), fake_pool_allocate as *const () as u64);
    }
    // pointer_info moved by 16 bytes between 5.2 and 6.x.
    for (major, size, expect) in [(1u32, 400u32, 224usize), (2, 608, 240)] {
        let mut t = RawTable::new(major, size, 608);
        // SAFETY: as above.
        let f = unsafe { slots::amd_ext::POINTER_INFO.read(t.header()) }.unwrap();
        assert!(f.is_none());
        // SAFETY: the header is live.
        let version = unsafe { *t.header() };
        assert_eq!(slots::amd_ext::POINTER_INFO.offset_for(version), Ok(expect));
    }
}

#[test]
fn read_returns_what_write_stored() {
    let mut t = RawTable::new(2, 608, 608);
    // SAFETY: live, writable, 608 bytes.
    unsafe {
        slots::amd_ext::VMEM_MAP
            .write(t.header(), Some(fake_vmem_map))
            .unwrap();
        let f = slots::amd_ext::VMEM_MAP.read(t.header()).unwrap().unwrap();
        assert_eq!(
            f(
                std::ptr::null_mut(),
                0,
                0,
                hsa_amd_vmem_alloc_handle_t::default(),
                0
            ),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        let old = slots::amd_ext::VMEM_MAP.write(t.header(), None).unwrap();
        assert!(old.is_some());
        assert!(slots::amd_ext::VMEM_MAP.read(t.header()).unwrap().is_none());
    }
}

#[test]
fn slot_beyond_minor_id_is_refused_and_untouched() {
    // A 6.0 table of 552 bytes has no memory_get_preferred_copy_engine (592).
    let mut t = RawTable::new(2, 552, 608);
    // SAFETY: the header claims 552 bytes, all readable; slots past it must not be touched.
    let err = unsafe { slots::amd_ext::MEMORY_GET_PREFERRED_COPY_ENGINE.write(t.header(), None) };
    assert_eq!(
        err,
        Err(TableError::SlotAbsent {
            table: TableKind::AmdExt,
            slot: "hsa_amd_memory_get_preferred_copy_engine_fn",
            offset: Some(592),
            size: 552
        })
    );
    // vmem functions do not exist in the 5.2 layout at all.
    let mut old = RawTable::new(1, 400, 400);
    // SAFETY: live 400-byte table.
    let err = unsafe { slots::amd_ext::VMEM_MAP.write(old.header(), Some(fake_vmem_map)) };
    assert!(matches!(
        err,
        Err(TableError::SlotAbsent { offset: None, .. })
    ));
    assert!(
        old.words.iter().skip(2).all(|w| *w == 0),
        "a refused write changed the table"
    );
}

#[test]
fn unknown_major_is_an_error_not_a_guess() {
    for (major, size) in [(3u32, 700u32), (0, 608), (1, 432)] {
        let mut t = RawTable::new(major, size, 704);
        // SAFETY: live table of at least `size` bytes.
        let err = unsafe { slots::amd_ext::MEMORY_POOL_ALLOCATE.read(t.header()) };
        assert_eq!(
            err.unwrap_err(),
            TableError::UnknownLayout {
                table: TableKind::AmdExt,
                major,
                size
            }
        );
    }
    let msg = TableError::UnknownLayout {
        table: TableKind::AmdExt,
        major: 9,
        size: 12,
    }
    .to_string();
    assert!(
        msg.contains("major 9") && msg.contains("AmdExtTable"),
        "{msg}"
    );
    let mut core = RawTable::new(7, 1016, 1016);
    // SAFETY: live 1016-byte table.
    assert!(unsafe { slots::core::QUEUE_CREATE.read(core.header()) }.is_err());
}

#[test]
fn null_tables_are_errors() {
    // SAFETY: null is explicitly allowed by the contract.
    let err = unsafe { slots::core::INIT.read(std::ptr::null()) };
    assert_eq!(
        err.unwrap_err(),
        TableError::NullTable {
            table: TableKind::Core
        }
    );
    // SAFETY: as above.
    assert!(unsafe { slots::root::CORE.read(std::ptr::null()) }.is_err());
}

#[test]
fn root_table_tools_slot_needs_a_6_1_root() {
    let mut core = RawTable::new(1, 1016, 1016);
    let mut root: HsaApiTable = HsaApiTable {
        version: ApiTableVersion {
            major_id: 1,
            minor_id: HSA_API_TABLE_SIZE_V1,
            step_id: 0,
            reserved: 0,
        },
        core_: core.header().cast(),
        amd_ext_: std::ptr::null_mut(),
        finalizer_ext_: std::ptr::null_mut(),
        image_ext_: std::ptr::null_mut(),
        tools_: 0x1234 as *mut ToolsApiTable,
        pc_sampling_ext_: std::ptr::null_mut(),
    };
    // SAFETY: `root` is live; its header says 48 bytes, so tools_ (at 48) is out of bounds.
    unsafe {
        assert_eq!(slots::root::CORE.read(&root), Ok(core.header()));
        assert!(matches!(
            slots::root::TOOLS.read(&root),
            Err(TableError::SlotAbsent { .. })
        ));
        root.version = ApiTableVersion {
            major_id: 3,
            minor_id: 64,
            step_id: 0,
            reserved: 0,
        };
        assert_eq!(
            slots::root::TOOLS.read(&root),
            Ok(0x1234 as *mut ApiTableVersion)
        );
    }
}

#[test]
fn all_lists_every_amd_ext_slot_of_both_layouts() {
    let all = slots::amd_ext::ALL;
    assert_eq!(
        all.len(),
        (size_of::<AmdExtTable>() - 16) / 8,
        "every 6.x slot"
    );
    let old: Vec<usize> = all
        .iter()
        .filter_map(|s| s.offset_in(Layout::AmdExtRocm5))
        .collect();
    assert_eq!(
        old.len(),
        (size_of::<AmdExtTable52>() - 16) / 8,
        "every 5.2 slot"
    );
    let mut sorted = old.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), old.len(), "no two slots share a 5.2 offset");
    let new: Vec<usize> = all
        .iter()
        .filter_map(|s| s.offset_in(Layout::AmdExtRocm6))
        .collect();
    assert!(
        new.windows(2).all(|w| w[1] == w[0] + 8),
        "6.x slots in table order"
    );
}
