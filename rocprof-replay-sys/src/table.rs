//! The API tables a runtime hands to tools in `OnLoad` (`hsa_api_trace.h`).
//!
//! Every table starts with an [`ApiTableVersion`]; its `minor_id` is the table's size in bytes.
//! Slots at or beyond `minor_id` do not exist in that runtime: read and write slots through
//! [`crate::slots`], which checks the layout and the size for you.

use core::ffi::{c_char, c_void};

use crate::enums::hsa_status_t;
use crate::fns::*;
use crate::layout::{const_assert_layout, const_assert_offsets};
use crate::queue::hsa_queue_t;
use crate::types::*;

/// C `struct ApiTableVersion`: the header of every API table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApiTableVersion {
    /// Changes on incompatible layout changes.
    pub major_id: u32,
    /// Size of the table in bytes.
    pub minor_id: u32,
    /// Grows when functions are appended.
    pub step_id: u32,
    /// Reserved.
    pub reserved: u32,
}
const_assert_layout!(ApiTableVersion, size = 16, align = 4);
const_assert_offsets!(ApiTableVersion {
    major_id: 0,
    minor_id: 4,
    step_id: 8,
    reserved: 12
});

/// C `struct HsaApiTable`: the root table passed to `OnLoad`.
///
/// ROCm 5.x (major 1) and 6.0 (major 2) end after `image_ext_` (48 bytes); 6.1+ (major 3) add
/// `tools_` and 6.2+ `pc_sampling_ext_` (64 bytes). The AMD extension table's layout depends on
/// its own version, so `amd_ext_` points at its header only.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HsaApiTable {
    /// Root table header.
    pub version: ApiTableVersion,
    /// Core API table.
    pub core_: *mut CoreApiTable,
    /// AMD extension table: [`AmdExtTable52`] or [`AmdExtTable`] depending on its version.
    pub amd_ext_: *mut ApiTableVersion,
    /// Finalizer extension table.
    pub finalizer_ext_: *mut FinalizerExtTable,
    /// Image extension table.
    pub image_ext_: *mut ImageExtTable,
    /// Tools table (6.1+: only when `version.minor_id > 48`).
    pub tools_: *mut ToolsApiTable,
    /// PC-sampling extension table (6.2+; may be null).
    pub pc_sampling_ext_: *mut ApiTableVersion,
}
const_assert_layout!(HsaApiTable, size = 64, align = 8);
const_assert_offsets!(HsaApiTable {
    version: 0,
    core_: 16,
    amd_ext_: 24,
    finalizer_ext_: 32,
    image_ext_: 40,
    tools_: 48,
    pc_sampling_ext_: 56,
});

/// Size of the root table in ROCm 5.x and 6.0 (no `tools_` slot).
pub const HSA_API_TABLE_SIZE_V1: u32 = 48;

/// C `struct FinalizerExtTable`: the finalizer extension (slots kept untyped: unused here).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FinalizerExtTable {
    /// Table header.
    pub version: ApiTableVersion,
    /// `hsa_ext_program_create` .. `hsa_ext_program_finalize`.
    pub slots: [*const c_void; 6],
}
const_assert_layout!(FinalizerExtTable, size = 64, align = 8);

/// C `struct ImageExtTable`: the image extension (slots kept untyped: unused here).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ImageExtTable {
    /// Table header.
    pub version: ApiTableVersion,
    /// `hsa_ext_image_get_capability` .. `hsa_ext_image_create_with_layout`.
    pub slots: [*const c_void; 13],
}
const_assert_layout!(ImageExtTable, size = 120, align = 8);

/// C `struct ToolsApiTable` (ROCm 6.1+): callbacks a tool fills to hear about runtime events.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ToolsApiTable {
    /// Table header.
    pub version: ApiTableVersion,
    /// Scratch allocation started.
    pub hsa_amd_tool_scratch_event_alloc_start_fn: hsa_amd_tool_event,
    /// Scratch allocation ended.
    pub hsa_amd_tool_scratch_event_alloc_end_fn: hsa_amd_tool_event,
    /// Scratch free started.
    pub hsa_amd_tool_scratch_event_free_start_fn: hsa_amd_tool_event,
    /// Scratch free ended.
    pub hsa_amd_tool_scratch_event_free_end_fn: hsa_amd_tool_event,
    /// Asynchronous scratch reclaim started.
    pub hsa_amd_tool_scratch_event_async_reclaim_start_fn: hsa_amd_tool_event,
    /// Asynchronous scratch reclaim ended.
    pub hsa_amd_tool_scratch_event_async_reclaim_end_fn: hsa_amd_tool_event,
}
const_assert_layout!(ToolsApiTable, size = 64, align = 8);

/// C `hsa_amd_queue_intercept_packet_writer`: forwards packets to the next older handler.
pub type hsa_amd_queue_intercept_packet_writer =
    Option<unsafe extern "C" fn(pkts: *const c_void, pkt_count: u64)>;

/// C `hsa_amd_queue_intercept_handler`: sees packets stored to an intercept queue.
pub type hsa_amd_queue_intercept_handler = Option<
    unsafe extern "C" fn(
        pkts: *const c_void,
        pkt_count: u64,
        user_pkt_index: u64,
        data: *mut c_void,
        writer: hsa_amd_queue_intercept_packet_writer,
    ),
>;

/// C `hsa_amd_runtime_queue_notifier`: told about queues the runtime creates for itself.
pub type hsa_amd_runtime_queue_notifier =
    Option<unsafe extern "C" fn(queue: *const hsa_queue_t, agent: hsa_agent_t, data: *mut c_void)>;

/// Queue error callback of `hsa_queue_create` and `hsa_amd_queue_intercept_create`.
pub type hsa_queue_error_callback_t =
    Option<unsafe extern "C" fn(status: hsa_status_t, source: *mut hsa_queue_t, data: *mut c_void)>;

/// Signature of `hsa_amd_queue_intercept_create` (table-only, not an exported symbol).
pub type hsa_amd_queue_intercept_create_fn_t = unsafe extern "C" fn(
    agent_handle: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: hsa_queue_error_callback_t,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t;

/// Signature of `hsa_amd_queue_intercept_register` (table-only).
pub type hsa_amd_queue_intercept_register_fn_t = unsafe extern "C" fn(
    queue: *mut hsa_queue_t,
    callback: hsa_amd_queue_intercept_handler,
    user_data: *mut c_void,
) -> hsa_status_t;

/// Signature of `hsa_amd_runtime_queue_create_register` (table-only).
pub type hsa_amd_runtime_queue_create_register_fn_t = unsafe extern "C" fn(
    callback: hsa_amd_runtime_queue_notifier,
    user_data: *mut c_void,
) -> hsa_status_t;

/// Signature of a tool's `OnLoad`: gets the live table; returning `false` unloads the tool.
pub type OnLoad_fn_t = unsafe extern "C" fn(
    table: *mut HsaApiTable,
    runtime_version: u64,
    failed_tool_count: u64,
    failed_tool_names: *const *const c_char,
) -> bool;

/// Signature of a tool's `OnUnload`: called in reverse load order at the last `hsa_shut_down`.
pub type OnUnload_fn_t = unsafe extern "C" fn();

/// Name of the symbol a preloaded tool exports to be discovered (`const uint32_t`).
pub const HSA_AMD_TOOL_PRIORITY_SYMBOL: &str = "HSA_AMD_TOOL_PRIORITY";

/// C `struct CoreApiTable`: the HSA core API, identical in ROCm 5.x and 6.x (1016 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CoreApiTable {
    /// Table header: `minor_id` is the table size in bytes.
    pub version: ApiTableVersion,
    /// Slot for `hsa_init` (offset 16).
    pub hsa_init_fn: Option<hsa_init_fn_t>,
    /// Slot for `hsa_shut_down` (offset 24).
    pub hsa_shut_down_fn: Option<hsa_shut_down_fn_t>,
    /// Slot for `hsa_system_get_info` (offset 32).
    pub hsa_system_get_info_fn: Option<hsa_system_get_info_fn_t>,
    /// Slot for `hsa_system_extension_supported` (offset 40).
    pub hsa_system_extension_supported_fn: Option<hsa_system_extension_supported_fn_t>,
    /// Slot for `hsa_system_get_extension_table` (offset 48).
    pub hsa_system_get_extension_table_fn: Option<hsa_system_get_extension_table_fn_t>,
    /// Slot for `hsa_iterate_agents` (offset 56).
    pub hsa_iterate_agents_fn: Option<hsa_iterate_agents_fn_t>,
    /// Slot for `hsa_agent_get_info` (offset 64).
    pub hsa_agent_get_info_fn: Option<hsa_agent_get_info_fn_t>,
    /// Slot for `hsa_queue_create` (offset 72).
    pub hsa_queue_create_fn: Option<hsa_queue_create_fn_t>,
    /// Slot for `hsa_soft_queue_create` (offset 80).
    pub hsa_soft_queue_create_fn: Option<hsa_soft_queue_create_fn_t>,
    /// Slot for `hsa_queue_destroy` (offset 88).
    pub hsa_queue_destroy_fn: Option<hsa_queue_destroy_fn_t>,
    /// Slot for `hsa_queue_inactivate` (offset 96).
    pub hsa_queue_inactivate_fn: Option<hsa_queue_inactivate_fn_t>,
    /// Slot for `hsa_queue_load_read_index_scacquire` (offset 104).
    pub hsa_queue_load_read_index_scacquire_fn: Option<hsa_queue_load_read_index_scacquire_fn_t>,
    /// Slot for `hsa_queue_load_read_index_relaxed` (offset 112).
    pub hsa_queue_load_read_index_relaxed_fn: Option<hsa_queue_load_read_index_relaxed_fn_t>,
    /// Slot for `hsa_queue_load_write_index_scacquire` (offset 120).
    pub hsa_queue_load_write_index_scacquire_fn: Option<hsa_queue_load_write_index_scacquire_fn_t>,
    /// Slot for `hsa_queue_load_write_index_relaxed` (offset 128).
    pub hsa_queue_load_write_index_relaxed_fn: Option<hsa_queue_load_write_index_relaxed_fn_t>,
    /// Slot for `hsa_queue_store_write_index_relaxed` (offset 136).
    pub hsa_queue_store_write_index_relaxed_fn: Option<hsa_queue_store_write_index_relaxed_fn_t>,
    /// Slot for `hsa_queue_store_write_index_screlease` (offset 144).
    pub hsa_queue_store_write_index_screlease_fn:
        Option<hsa_queue_store_write_index_screlease_fn_t>,
    /// Slot for `hsa_queue_cas_write_index_scacq_screl` (offset 152).
    pub hsa_queue_cas_write_index_scacq_screl_fn:
        Option<hsa_queue_cas_write_index_scacq_screl_fn_t>,
    /// Slot for `hsa_queue_cas_write_index_scacquire` (offset 160).
    pub hsa_queue_cas_write_index_scacquire_fn: Option<hsa_queue_cas_write_index_scacquire_fn_t>,
    /// Slot for `hsa_queue_cas_write_index_relaxed` (offset 168).
    pub hsa_queue_cas_write_index_relaxed_fn: Option<hsa_queue_cas_write_index_relaxed_fn_t>,
    /// Slot for `hsa_queue_cas_write_index_screlease` (offset 176).
    pub hsa_queue_cas_write_index_screlease_fn: Option<hsa_queue_cas_write_index_screlease_fn_t>,
    /// Slot for `hsa_queue_add_write_index_scacq_screl` (offset 184).
    pub hsa_queue_add_write_index_scacq_screl_fn:
        Option<hsa_queue_add_write_index_scacq_screl_fn_t>,
    /// Slot for `hsa_queue_add_write_index_scacquire` (offset 192).
    pub hsa_queue_add_write_index_scacquire_fn: Option<hsa_queue_add_write_index_scacquire_fn_t>,
    /// Slot for `hsa_queue_add_write_index_relaxed` (offset 200).
    pub hsa_queue_add_write_index_relaxed_fn: Option<hsa_queue_add_write_index_relaxed_fn_t>,
    /// Slot for `hsa_queue_add_write_index_screlease` (offset 208).
    pub hsa_queue_add_write_index_screlease_fn: Option<hsa_queue_add_write_index_screlease_fn_t>,
    /// Slot for `hsa_queue_store_read_index_relaxed` (offset 216).
    pub hsa_queue_store_read_index_relaxed_fn: Option<hsa_queue_store_read_index_relaxed_fn_t>,
    /// Slot for `hsa_queue_store_read_index_screlease` (offset 224).
    pub hsa_queue_store_read_index_screlease_fn: Option<hsa_queue_store_read_index_screlease_fn_t>,
    /// Slot for `hsa_agent_iterate_regions` (offset 232).
    pub hsa_agent_iterate_regions_fn: Option<hsa_agent_iterate_regions_fn_t>,
    /// Slot for `hsa_region_get_info` (offset 240).
    pub hsa_region_get_info_fn: Option<hsa_region_get_info_fn_t>,
    /// Slot for `hsa_agent_get_exception_policies` (offset 248).
    pub hsa_agent_get_exception_policies_fn: Option<hsa_agent_get_exception_policies_fn_t>,
    /// Slot for `hsa_agent_extension_supported` (offset 256).
    pub hsa_agent_extension_supported_fn: Option<hsa_agent_extension_supported_fn_t>,
    /// Slot for `hsa_memory_register` (offset 264).
    pub hsa_memory_register_fn: Option<hsa_memory_register_fn_t>,
    /// Slot for `hsa_memory_deregister` (offset 272).
    pub hsa_memory_deregister_fn: Option<hsa_memory_deregister_fn_t>,
    /// Slot for `hsa_memory_allocate` (offset 280).
    pub hsa_memory_allocate_fn: Option<hsa_memory_allocate_fn_t>,
    /// Slot for `hsa_memory_free` (offset 288).
    pub hsa_memory_free_fn: Option<hsa_memory_free_fn_t>,
    /// Slot for `hsa_memory_copy` (offset 296).
    pub hsa_memory_copy_fn: Option<hsa_memory_copy_fn_t>,
    /// Slot for `hsa_memory_assign_agent` (offset 304).
    pub hsa_memory_assign_agent_fn: Option<hsa_memory_assign_agent_fn_t>,
    /// Slot for `hsa_signal_create` (offset 312).
    pub hsa_signal_create_fn: Option<hsa_signal_create_fn_t>,
    /// Slot for `hsa_signal_destroy` (offset 320).
    pub hsa_signal_destroy_fn: Option<hsa_signal_destroy_fn_t>,
    /// Slot for `hsa_signal_load_relaxed` (offset 328).
    pub hsa_signal_load_relaxed_fn: Option<hsa_signal_load_relaxed_fn_t>,
    /// Slot for `hsa_signal_load_scacquire` (offset 336).
    pub hsa_signal_load_scacquire_fn: Option<hsa_signal_load_scacquire_fn_t>,
    /// Slot for `hsa_signal_store_relaxed` (offset 344).
    pub hsa_signal_store_relaxed_fn: Option<hsa_signal_store_relaxed_fn_t>,
    /// Slot for `hsa_signal_store_screlease` (offset 352).
    pub hsa_signal_store_screlease_fn: Option<hsa_signal_store_screlease_fn_t>,
    /// Slot for `hsa_signal_wait_relaxed` (offset 360).
    pub hsa_signal_wait_relaxed_fn: Option<hsa_signal_wait_relaxed_fn_t>,
    /// Slot for `hsa_signal_wait_scacquire` (offset 368).
    pub hsa_signal_wait_scacquire_fn: Option<hsa_signal_wait_scacquire_fn_t>,
    /// Slot for `hsa_signal_and_relaxed` (offset 376).
    pub hsa_signal_and_relaxed_fn: Option<hsa_signal_and_relaxed_fn_t>,
    /// Slot for `hsa_signal_and_scacquire` (offset 384).
    pub hsa_signal_and_scacquire_fn: Option<hsa_signal_and_scacquire_fn_t>,
    /// Slot for `hsa_signal_and_screlease` (offset 392).
    pub hsa_signal_and_screlease_fn: Option<hsa_signal_and_screlease_fn_t>,
    /// Slot for `hsa_signal_and_scacq_screl` (offset 400).
    pub hsa_signal_and_scacq_screl_fn: Option<hsa_signal_and_scacq_screl_fn_t>,
    /// Slot for `hsa_signal_or_relaxed` (offset 408).
    pub hsa_signal_or_relaxed_fn: Option<hsa_signal_or_relaxed_fn_t>,
    /// Slot for `hsa_signal_or_scacquire` (offset 416).
    pub hsa_signal_or_scacquire_fn: Option<hsa_signal_or_scacquire_fn_t>,
    /// Slot for `hsa_signal_or_screlease` (offset 424).
    pub hsa_signal_or_screlease_fn: Option<hsa_signal_or_screlease_fn_t>,
    /// Slot for `hsa_signal_or_scacq_screl` (offset 432).
    pub hsa_signal_or_scacq_screl_fn: Option<hsa_signal_or_scacq_screl_fn_t>,
    /// Slot for `hsa_signal_xor_relaxed` (offset 440).
    pub hsa_signal_xor_relaxed_fn: Option<hsa_signal_xor_relaxed_fn_t>,
    /// Slot for `hsa_signal_xor_scacquire` (offset 448).
    pub hsa_signal_xor_scacquire_fn: Option<hsa_signal_xor_scacquire_fn_t>,
    /// Slot for `hsa_signal_xor_screlease` (offset 456).
    pub hsa_signal_xor_screlease_fn: Option<hsa_signal_xor_screlease_fn_t>,
    /// Slot for `hsa_signal_xor_scacq_screl` (offset 464).
    pub hsa_signal_xor_scacq_screl_fn: Option<hsa_signal_xor_scacq_screl_fn_t>,
    /// Slot for `hsa_signal_exchange_relaxed` (offset 472).
    pub hsa_signal_exchange_relaxed_fn: Option<hsa_signal_exchange_relaxed_fn_t>,
    /// Slot for `hsa_signal_exchange_scacquire` (offset 480).
    pub hsa_signal_exchange_scacquire_fn: Option<hsa_signal_exchange_scacquire_fn_t>,
    /// Slot for `hsa_signal_exchange_screlease` (offset 488).
    pub hsa_signal_exchange_screlease_fn: Option<hsa_signal_exchange_screlease_fn_t>,
    /// Slot for `hsa_signal_exchange_scacq_screl` (offset 496).
    pub hsa_signal_exchange_scacq_screl_fn: Option<hsa_signal_exchange_scacq_screl_fn_t>,
    /// Slot for `hsa_signal_add_relaxed` (offset 504).
    pub hsa_signal_add_relaxed_fn: Option<hsa_signal_add_relaxed_fn_t>,
    /// Slot for `hsa_signal_add_scacquire` (offset 512).
    pub hsa_signal_add_scacquire_fn: Option<hsa_signal_add_scacquire_fn_t>,
    /// Slot for `hsa_signal_add_screlease` (offset 520).
    pub hsa_signal_add_screlease_fn: Option<hsa_signal_add_screlease_fn_t>,
    /// Slot for `hsa_signal_add_scacq_screl` (offset 528).
    pub hsa_signal_add_scacq_screl_fn: Option<hsa_signal_add_scacq_screl_fn_t>,
    /// Slot for `hsa_signal_subtract_relaxed` (offset 536).
    pub hsa_signal_subtract_relaxed_fn: Option<hsa_signal_subtract_relaxed_fn_t>,
    /// Slot for `hsa_signal_subtract_scacquire` (offset 544).
    pub hsa_signal_subtract_scacquire_fn: Option<hsa_signal_subtract_scacquire_fn_t>,
    /// Slot for `hsa_signal_subtract_screlease` (offset 552).
    pub hsa_signal_subtract_screlease_fn: Option<hsa_signal_subtract_screlease_fn_t>,
    /// Slot for `hsa_signal_subtract_scacq_screl` (offset 560).
    pub hsa_signal_subtract_scacq_screl_fn: Option<hsa_signal_subtract_scacq_screl_fn_t>,
    /// Slot for `hsa_signal_cas_relaxed` (offset 568).
    pub hsa_signal_cas_relaxed_fn: Option<hsa_signal_cas_relaxed_fn_t>,
    /// Slot for `hsa_signal_cas_scacquire` (offset 576).
    pub hsa_signal_cas_scacquire_fn: Option<hsa_signal_cas_scacquire_fn_t>,
    /// Slot for `hsa_signal_cas_screlease` (offset 584).
    pub hsa_signal_cas_screlease_fn: Option<hsa_signal_cas_screlease_fn_t>,
    /// Slot for `hsa_signal_cas_scacq_screl` (offset 592).
    pub hsa_signal_cas_scacq_screl_fn: Option<hsa_signal_cas_scacq_screl_fn_t>,
    /// Slot for `hsa_isa_from_name` (offset 600).
    pub hsa_isa_from_name_fn: Option<hsa_isa_from_name_fn_t>,
    /// Slot for `hsa_isa_get_info` (offset 608).
    pub hsa_isa_get_info_fn: Option<hsa_isa_get_info_fn_t>,
    /// Slot for `hsa_isa_compatible` (offset 616).
    pub hsa_isa_compatible_fn: Option<hsa_isa_compatible_fn_t>,
    /// Slot for `hsa_code_object_serialize` (offset 624).
    pub hsa_code_object_serialize_fn: Option<hsa_code_object_serialize_fn_t>,
    /// Slot for `hsa_code_object_deserialize` (offset 632).
    pub hsa_code_object_deserialize_fn: Option<hsa_code_object_deserialize_fn_t>,
    /// Slot for `hsa_code_object_destroy` (offset 640).
    pub hsa_code_object_destroy_fn: Option<hsa_code_object_destroy_fn_t>,
    /// Slot for `hsa_code_object_get_info` (offset 648).
    pub hsa_code_object_get_info_fn: Option<hsa_code_object_get_info_fn_t>,
    /// Slot for `hsa_code_object_get_symbol` (offset 656).
    pub hsa_code_object_get_symbol_fn: Option<hsa_code_object_get_symbol_fn_t>,
    /// Slot for `hsa_code_symbol_get_info` (offset 664).
    pub hsa_code_symbol_get_info_fn: Option<hsa_code_symbol_get_info_fn_t>,
    /// Slot for `hsa_code_object_iterate_symbols` (offset 672).
    pub hsa_code_object_iterate_symbols_fn: Option<hsa_code_object_iterate_symbols_fn_t>,
    /// Slot for `hsa_executable_create` (offset 680).
    pub hsa_executable_create_fn: Option<hsa_executable_create_fn_t>,
    /// Slot for `hsa_executable_destroy` (offset 688).
    pub hsa_executable_destroy_fn: Option<hsa_executable_destroy_fn_t>,
    /// Slot for `hsa_executable_load_code_object` (offset 696).
    pub hsa_executable_load_code_object_fn: Option<hsa_executable_load_code_object_fn_t>,
    /// Slot for `hsa_executable_freeze` (offset 704).
    pub hsa_executable_freeze_fn: Option<hsa_executable_freeze_fn_t>,
    /// Slot for `hsa_executable_get_info` (offset 712).
    pub hsa_executable_get_info_fn: Option<hsa_executable_get_info_fn_t>,
    /// Slot for `hsa_executable_global_variable_define` (offset 720).
    pub hsa_executable_global_variable_define_fn:
        Option<hsa_executable_global_variable_define_fn_t>,
    /// Slot for `hsa_executable_agent_global_variable_define` (offset 728).
    pub hsa_executable_agent_global_variable_define_fn:
        Option<hsa_executable_agent_global_variable_define_fn_t>,
    /// Slot for `hsa_executable_readonly_variable_define` (offset 736).
    pub hsa_executable_readonly_variable_define_fn:
        Option<hsa_executable_readonly_variable_define_fn_t>,
    /// Slot for `hsa_executable_validate` (offset 744).
    pub hsa_executable_validate_fn: Option<hsa_executable_validate_fn_t>,
    /// Slot for `hsa_executable_get_symbol` (offset 752).
    pub hsa_executable_get_symbol_fn: Option<hsa_executable_get_symbol_fn_t>,
    /// Slot for `hsa_executable_symbol_get_info` (offset 760).
    pub hsa_executable_symbol_get_info_fn: Option<hsa_executable_symbol_get_info_fn_t>,
    /// Slot for `hsa_executable_iterate_symbols` (offset 768).
    pub hsa_executable_iterate_symbols_fn: Option<hsa_executable_iterate_symbols_fn_t>,
    /// Slot for `hsa_status_string` (offset 776).
    pub hsa_status_string_fn: Option<hsa_status_string_fn_t>,
    /// Slot for `hsa_extension_get_name` (offset 784).
    pub hsa_extension_get_name_fn: Option<hsa_extension_get_name_fn_t>,
    /// Slot for `hsa_system_major_extension_supported` (offset 792).
    pub hsa_system_major_extension_supported_fn: Option<hsa_system_major_extension_supported_fn_t>,
    /// Slot for `hsa_system_get_major_extension_table` (offset 800).
    pub hsa_system_get_major_extension_table_fn: Option<hsa_system_get_major_extension_table_fn_t>,
    /// Slot for `hsa_agent_major_extension_supported` (offset 808).
    pub hsa_agent_major_extension_supported_fn: Option<hsa_agent_major_extension_supported_fn_t>,
    /// Slot for `hsa_cache_get_info` (offset 816).
    pub hsa_cache_get_info_fn: Option<hsa_cache_get_info_fn_t>,
    /// Slot for `hsa_agent_iterate_caches` (offset 824).
    pub hsa_agent_iterate_caches_fn: Option<hsa_agent_iterate_caches_fn_t>,
    /// Slot for `hsa_signal_silent_store_relaxed` (offset 832).
    pub hsa_signal_silent_store_relaxed_fn: Option<hsa_signal_silent_store_relaxed_fn_t>,
    /// Slot for `hsa_signal_silent_store_screlease` (offset 840).
    pub hsa_signal_silent_store_screlease_fn: Option<hsa_signal_silent_store_screlease_fn_t>,
    /// Slot for `hsa_signal_group_create` (offset 848).
    pub hsa_signal_group_create_fn: Option<hsa_signal_group_create_fn_t>,
    /// Slot for `hsa_signal_group_destroy` (offset 856).
    pub hsa_signal_group_destroy_fn: Option<hsa_signal_group_destroy_fn_t>,
    /// Slot for `hsa_signal_group_wait_any_scacquire` (offset 864).
    pub hsa_signal_group_wait_any_scacquire_fn: Option<hsa_signal_group_wait_any_scacquire_fn_t>,
    /// Slot for `hsa_signal_group_wait_any_relaxed` (offset 872).
    pub hsa_signal_group_wait_any_relaxed_fn: Option<hsa_signal_group_wait_any_relaxed_fn_t>,
    /// Slot for `hsa_agent_iterate_isas` (offset 880).
    pub hsa_agent_iterate_isas_fn: Option<hsa_agent_iterate_isas_fn_t>,
    /// Slot for `hsa_isa_get_info_alt` (offset 888).
    pub hsa_isa_get_info_alt_fn: Option<hsa_isa_get_info_alt_fn_t>,
    /// Slot for `hsa_isa_get_exception_policies` (offset 896).
    pub hsa_isa_get_exception_policies_fn: Option<hsa_isa_get_exception_policies_fn_t>,
    /// Slot for `hsa_isa_get_round_method` (offset 904).
    pub hsa_isa_get_round_method_fn: Option<hsa_isa_get_round_method_fn_t>,
    /// Slot for `hsa_wavefront_get_info` (offset 912).
    pub hsa_wavefront_get_info_fn: Option<hsa_wavefront_get_info_fn_t>,
    /// Slot for `hsa_isa_iterate_wavefronts` (offset 920).
    pub hsa_isa_iterate_wavefronts_fn: Option<hsa_isa_iterate_wavefronts_fn_t>,
    /// Slot for `hsa_code_object_get_symbol_from_name` (offset 928).
    pub hsa_code_object_get_symbol_from_name_fn: Option<hsa_code_object_get_symbol_from_name_fn_t>,
    /// Slot for `hsa_code_object_reader_create_from_file` (offset 936).
    pub hsa_code_object_reader_create_from_file_fn:
        Option<hsa_code_object_reader_create_from_file_fn_t>,
    /// Slot for `hsa_code_object_reader_create_from_memory` (offset 944).
    pub hsa_code_object_reader_create_from_memory_fn:
        Option<hsa_code_object_reader_create_from_memory_fn_t>,
    /// Slot for `hsa_code_object_reader_destroy` (offset 952).
    pub hsa_code_object_reader_destroy_fn: Option<hsa_code_object_reader_destroy_fn_t>,
    /// Slot for `hsa_executable_create_alt` (offset 960).
    pub hsa_executable_create_alt_fn: Option<hsa_executable_create_alt_fn_t>,
    /// Slot for `hsa_executable_load_program_code_object` (offset 968).
    pub hsa_executable_load_program_code_object_fn:
        Option<hsa_executable_load_program_code_object_fn_t>,
    /// Slot for `hsa_executable_load_agent_code_object` (offset 976).
    pub hsa_executable_load_agent_code_object_fn:
        Option<hsa_executable_load_agent_code_object_fn_t>,
    /// Slot for `hsa_executable_validate_alt` (offset 984).
    pub hsa_executable_validate_alt_fn: Option<hsa_executable_validate_alt_fn_t>,
    /// Slot for `hsa_executable_get_symbol_by_name` (offset 992).
    pub hsa_executable_get_symbol_by_name_fn: Option<hsa_executable_get_symbol_by_name_fn_t>,
    /// Slot for `hsa_executable_iterate_agent_symbols` (offset 1000).
    pub hsa_executable_iterate_agent_symbols_fn: Option<hsa_executable_iterate_agent_symbols_fn_t>,
    /// Slot for `hsa_executable_iterate_program_symbols` (offset 1008).
    pub hsa_executable_iterate_program_symbols_fn:
        Option<hsa_executable_iterate_program_symbols_fn_t>,
}
const_assert_layout!(CoreApiTable, size = 1016, align = 8);

/// C `struct AmdExtTable` as ROCm 5.2 lays it out (major 1, 400 bytes).
///
/// ROCm 5.6 inserted two slots after `hsa_amd_memory_async_copy` while keeping major 1, so
/// everything from `hsa_amd_agent_memory_pool_get_info` on sits 16 bytes lower here than in
/// [`AmdExtTable`]. Reach slots through [`crate::slots::amd_ext`], which picks the layout.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AmdExtTable52 {
    /// Table header: `minor_id` is the table size in bytes.
    pub version: ApiTableVersion,
    /// Slot for `hsa_amd_coherency_get_type` (offset 16).
    pub hsa_amd_coherency_get_type_fn: Option<hsa_amd_coherency_get_type_fn_t>,
    /// Slot for `hsa_amd_coherency_set_type` (offset 24).
    pub hsa_amd_coherency_set_type_fn: Option<hsa_amd_coherency_set_type_fn_t>,
    /// Slot for `hsa_amd_profiling_set_profiler_enabled` (offset 32).
    pub hsa_amd_profiling_set_profiler_enabled_fn:
        Option<hsa_amd_profiling_set_profiler_enabled_fn_t>,
    /// Slot for `hsa_amd_profiling_async_copy_enable` (offset 40).
    pub hsa_amd_profiling_async_copy_enable_fn: Option<hsa_amd_profiling_async_copy_enable_fn_t>,
    /// Slot for `hsa_amd_profiling_get_dispatch_time` (offset 48).
    pub hsa_amd_profiling_get_dispatch_time_fn: Option<hsa_amd_profiling_get_dispatch_time_fn_t>,
    /// Slot for `hsa_amd_profiling_get_async_copy_time` (offset 56).
    pub hsa_amd_profiling_get_async_copy_time_fn:
        Option<hsa_amd_profiling_get_async_copy_time_fn_t>,
    /// Slot for `hsa_amd_profiling_convert_tick_to_system_domain` (offset 64).
    pub hsa_amd_profiling_convert_tick_to_system_domain_fn:
        Option<hsa_amd_profiling_convert_tick_to_system_domain_fn_t>,
    /// Slot for `hsa_amd_signal_async_handler` (offset 72).
    pub hsa_amd_signal_async_handler_fn: Option<hsa_amd_signal_async_handler_fn_t>,
    /// Slot for `hsa_amd_async_function` (offset 80).
    pub hsa_amd_async_function_fn: Option<hsa_amd_async_function_fn_t>,
    /// Slot for `hsa_amd_signal_wait_any` (offset 88).
    pub hsa_amd_signal_wait_any_fn: Option<hsa_amd_signal_wait_any_fn_t>,
    /// Slot for `hsa_amd_queue_cu_set_mask` (offset 96).
    pub hsa_amd_queue_cu_set_mask_fn: Option<hsa_amd_queue_cu_set_mask_fn_t>,
    /// Slot for `hsa_amd_memory_pool_get_info` (offset 104).
    pub hsa_amd_memory_pool_get_info_fn: Option<hsa_amd_memory_pool_get_info_fn_t>,
    /// Slot for `hsa_amd_agent_iterate_memory_pools` (offset 112).
    pub hsa_amd_agent_iterate_memory_pools_fn: Option<hsa_amd_agent_iterate_memory_pools_fn_t>,
    /// Slot for `hsa_amd_memory_pool_allocate` (offset 120).
    pub hsa_amd_memory_pool_allocate_fn: Option<hsa_amd_memory_pool_allocate_fn_t>,
    /// Slot for `hsa_amd_memory_pool_free` (offset 128).
    pub hsa_amd_memory_pool_free_fn: Option<hsa_amd_memory_pool_free_fn_t>,
    /// Slot for `hsa_amd_memory_async_copy` (offset 136).
    pub hsa_amd_memory_async_copy_fn: Option<hsa_amd_memory_async_copy_fn_t>,
    /// Slot for `hsa_amd_agent_memory_pool_get_info` (offset 144).
    pub hsa_amd_agent_memory_pool_get_info_fn: Option<hsa_amd_agent_memory_pool_get_info_fn_t>,
    /// Slot for `hsa_amd_agents_allow_access` (offset 152).
    pub hsa_amd_agents_allow_access_fn: Option<hsa_amd_agents_allow_access_fn_t>,
    /// Slot for `hsa_amd_memory_pool_can_migrate` (offset 160).
    pub hsa_amd_memory_pool_can_migrate_fn: Option<hsa_amd_memory_pool_can_migrate_fn_t>,
    /// Slot for `hsa_amd_memory_migrate` (offset 168).
    pub hsa_amd_memory_migrate_fn: Option<hsa_amd_memory_migrate_fn_t>,
    /// Slot for `hsa_amd_memory_lock` (offset 176).
    pub hsa_amd_memory_lock_fn: Option<hsa_amd_memory_lock_fn_t>,
    /// Slot for `hsa_amd_memory_unlock` (offset 184).
    pub hsa_amd_memory_unlock_fn: Option<hsa_amd_memory_unlock_fn_t>,
    /// Slot for `hsa_amd_memory_fill` (offset 192).
    pub hsa_amd_memory_fill_fn: Option<hsa_amd_memory_fill_fn_t>,
    /// Slot for `hsa_amd_interop_map_buffer` (offset 200).
    pub hsa_amd_interop_map_buffer_fn: Option<hsa_amd_interop_map_buffer_fn_t>,
    /// Slot for `hsa_amd_interop_unmap_buffer` (offset 208).
    pub hsa_amd_interop_unmap_buffer_fn: Option<hsa_amd_interop_unmap_buffer_fn_t>,
    /// Slot for `hsa_amd_image_create` (offset 216).
    pub hsa_amd_image_create_fn: Option<hsa_amd_image_create_fn_t>,
    /// Slot for `hsa_amd_pointer_info` (offset 224).
    pub hsa_amd_pointer_info_fn: Option<hsa_amd_pointer_info_fn_t>,
    /// Slot for `hsa_amd_pointer_info_set_userdata` (offset 232).
    pub hsa_amd_pointer_info_set_userdata_fn: Option<hsa_amd_pointer_info_set_userdata_fn_t>,
    /// Slot for `hsa_amd_ipc_memory_create` (offset 240).
    pub hsa_amd_ipc_memory_create_fn: Option<hsa_amd_ipc_memory_create_fn_t>,
    /// Slot for `hsa_amd_ipc_memory_attach` (offset 248).
    pub hsa_amd_ipc_memory_attach_fn: Option<hsa_amd_ipc_memory_attach_fn_t>,
    /// Slot for `hsa_amd_ipc_memory_detach` (offset 256).
    pub hsa_amd_ipc_memory_detach_fn: Option<hsa_amd_ipc_memory_detach_fn_t>,
    /// Slot for `hsa_amd_signal_create` (offset 264).
    pub hsa_amd_signal_create_fn: Option<hsa_amd_signal_create_fn_t>,
    /// Slot for `hsa_amd_ipc_signal_create` (offset 272).
    pub hsa_amd_ipc_signal_create_fn: Option<hsa_amd_ipc_signal_create_fn_t>,
    /// Slot for `hsa_amd_ipc_signal_attach` (offset 280).
    pub hsa_amd_ipc_signal_attach_fn: Option<hsa_amd_ipc_signal_attach_fn_t>,
    /// Slot for `hsa_amd_register_system_event_handler` (offset 288).
    pub hsa_amd_register_system_event_handler_fn:
        Option<hsa_amd_register_system_event_handler_fn_t>,
    /// Slot for `hsa_amd_queue_intercept_create` (offset 296).
    pub hsa_amd_queue_intercept_create_fn: Option<hsa_amd_queue_intercept_create_fn_t>,
    /// Slot for `hsa_amd_queue_intercept_register` (offset 304).
    pub hsa_amd_queue_intercept_register_fn: Option<hsa_amd_queue_intercept_register_fn_t>,
    /// Slot for `hsa_amd_queue_set_priority` (offset 312).
    pub hsa_amd_queue_set_priority_fn: Option<hsa_amd_queue_set_priority_fn_t>,
    /// Slot for `hsa_amd_memory_async_copy_rect` (offset 320).
    pub hsa_amd_memory_async_copy_rect_fn: Option<hsa_amd_memory_async_copy_rect_fn_t>,
    /// Slot for `hsa_amd_runtime_queue_create_register` (offset 328).
    pub hsa_amd_runtime_queue_create_register_fn:
        Option<hsa_amd_runtime_queue_create_register_fn_t>,
    /// Slot for `hsa_amd_memory_lock_to_pool` (offset 336).
    pub hsa_amd_memory_lock_to_pool_fn: Option<hsa_amd_memory_lock_to_pool_fn_t>,
    /// Slot for `hsa_amd_register_deallocation_callback` (offset 344).
    pub hsa_amd_register_deallocation_callback_fn:
        Option<hsa_amd_register_deallocation_callback_fn_t>,
    /// Slot for `hsa_amd_deregister_deallocation_callback` (offset 352).
    pub hsa_amd_deregister_deallocation_callback_fn:
        Option<hsa_amd_deregister_deallocation_callback_fn_t>,
    /// Slot for `hsa_amd_signal_value_pointer` (offset 360).
    pub hsa_amd_signal_value_pointer_fn: Option<hsa_amd_signal_value_pointer_fn_t>,
    /// Slot for `hsa_amd_svm_attributes_set` (offset 368).
    pub hsa_amd_svm_attributes_set_fn: Option<hsa_amd_svm_attributes_set_fn_t>,
    /// Slot for `hsa_amd_svm_attributes_get` (offset 376).
    pub hsa_amd_svm_attributes_get_fn: Option<hsa_amd_svm_attributes_get_fn_t>,
    /// Slot for `hsa_amd_svm_prefetch_async` (offset 384).
    pub hsa_amd_svm_prefetch_async_fn: Option<hsa_amd_svm_prefetch_async_fn_t>,
    /// Slot for `hsa_amd_queue_cu_get_mask` (offset 392).
    pub hsa_amd_queue_cu_get_mask_fn: Option<hsa_amd_queue_cu_get_mask_fn_t>,
}
const_assert_layout!(AmdExtTable52, size = 400, align = 8);

/// C `struct AmdExtTable` as ROCm 6.x lays it out (major 2), up to the 608-byte layout of 2025.
///
/// A runtime may hand out a shorter table (`minor_id` 552 and up): never touch a slot at or
/// beyond `version.minor_id`. Reach slots through [`crate::slots::amd_ext`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AmdExtTable {
    /// Table header: `minor_id` is the table size in bytes.
    pub version: ApiTableVersion,
    /// Slot for `hsa_amd_coherency_get_type` (offset 16).
    pub hsa_amd_coherency_get_type_fn: Option<hsa_amd_coherency_get_type_fn_t>,
    /// Slot for `hsa_amd_coherency_set_type` (offset 24).
    pub hsa_amd_coherency_set_type_fn: Option<hsa_amd_coherency_set_type_fn_t>,
    /// Slot for `hsa_amd_profiling_set_profiler_enabled` (offset 32).
    pub hsa_amd_profiling_set_profiler_enabled_fn:
        Option<hsa_amd_profiling_set_profiler_enabled_fn_t>,
    /// Slot for `hsa_amd_profiling_async_copy_enable` (offset 40).
    pub hsa_amd_profiling_async_copy_enable_fn: Option<hsa_amd_profiling_async_copy_enable_fn_t>,
    /// Slot for `hsa_amd_profiling_get_dispatch_time` (offset 48).
    pub hsa_amd_profiling_get_dispatch_time_fn: Option<hsa_amd_profiling_get_dispatch_time_fn_t>,
    /// Slot for `hsa_amd_profiling_get_async_copy_time` (offset 56).
    pub hsa_amd_profiling_get_async_copy_time_fn:
        Option<hsa_amd_profiling_get_async_copy_time_fn_t>,
    /// Slot for `hsa_amd_profiling_convert_tick_to_system_domain` (offset 64).
    pub hsa_amd_profiling_convert_tick_to_system_domain_fn:
        Option<hsa_amd_profiling_convert_tick_to_system_domain_fn_t>,
    /// Slot for `hsa_amd_signal_async_handler` (offset 72).
    pub hsa_amd_signal_async_handler_fn: Option<hsa_amd_signal_async_handler_fn_t>,
    /// Slot for `hsa_amd_async_function` (offset 80).
    pub hsa_amd_async_function_fn: Option<hsa_amd_async_function_fn_t>,
    /// Slot for `hsa_amd_signal_wait_any` (offset 88).
    pub hsa_amd_signal_wait_any_fn: Option<hsa_amd_signal_wait_any_fn_t>,
    /// Slot for `hsa_amd_queue_cu_set_mask` (offset 96).
    pub hsa_amd_queue_cu_set_mask_fn: Option<hsa_amd_queue_cu_set_mask_fn_t>,
    /// Slot for `hsa_amd_memory_pool_get_info` (offset 104).
    pub hsa_amd_memory_pool_get_info_fn: Option<hsa_amd_memory_pool_get_info_fn_t>,
    /// Slot for `hsa_amd_agent_iterate_memory_pools` (offset 112).
    pub hsa_amd_agent_iterate_memory_pools_fn: Option<hsa_amd_agent_iterate_memory_pools_fn_t>,
    /// Slot for `hsa_amd_memory_pool_allocate` (offset 120).
    pub hsa_amd_memory_pool_allocate_fn: Option<hsa_amd_memory_pool_allocate_fn_t>,
    /// Slot for `hsa_amd_memory_pool_free` (offset 128).
    pub hsa_amd_memory_pool_free_fn: Option<hsa_amd_memory_pool_free_fn_t>,
    /// Slot for `hsa_amd_memory_async_copy` (offset 136).
    pub hsa_amd_memory_async_copy_fn: Option<hsa_amd_memory_async_copy_fn_t>,
    /// Slot for `hsa_amd_memory_async_copy_on_engine` (offset 144).
    pub hsa_amd_memory_async_copy_on_engine_fn: Option<hsa_amd_memory_async_copy_on_engine_fn_t>,
    /// Slot for `hsa_amd_memory_copy_engine_status` (offset 152).
    pub hsa_amd_memory_copy_engine_status_fn: Option<hsa_amd_memory_copy_engine_status_fn_t>,
    /// Slot for `hsa_amd_agent_memory_pool_get_info` (offset 160).
    pub hsa_amd_agent_memory_pool_get_info_fn: Option<hsa_amd_agent_memory_pool_get_info_fn_t>,
    /// Slot for `hsa_amd_agents_allow_access` (offset 168).
    pub hsa_amd_agents_allow_access_fn: Option<hsa_amd_agents_allow_access_fn_t>,
    /// Slot for `hsa_amd_memory_pool_can_migrate` (offset 176).
    pub hsa_amd_memory_pool_can_migrate_fn: Option<hsa_amd_memory_pool_can_migrate_fn_t>,
    /// Slot for `hsa_amd_memory_migrate` (offset 184).
    pub hsa_amd_memory_migrate_fn: Option<hsa_amd_memory_migrate_fn_t>,
    /// Slot for `hsa_amd_memory_lock` (offset 192).
    pub hsa_amd_memory_lock_fn: Option<hsa_amd_memory_lock_fn_t>,
    /// Slot for `hsa_amd_memory_unlock` (offset 200).
    pub hsa_amd_memory_unlock_fn: Option<hsa_amd_memory_unlock_fn_t>,
    /// Slot for `hsa_amd_memory_fill` (offset 208).
    pub hsa_amd_memory_fill_fn: Option<hsa_amd_memory_fill_fn_t>,
    /// Slot for `hsa_amd_interop_map_buffer` (offset 216).
    pub hsa_amd_interop_map_buffer_fn: Option<hsa_amd_interop_map_buffer_fn_t>,
    /// Slot for `hsa_amd_interop_unmap_buffer` (offset 224).
    pub hsa_amd_interop_unmap_buffer_fn: Option<hsa_amd_interop_unmap_buffer_fn_t>,
    /// Slot for `hsa_amd_image_create` (offset 232).
    pub hsa_amd_image_create_fn: Option<hsa_amd_image_create_fn_t>,
    /// Slot for `hsa_amd_pointer_info` (offset 240).
    pub hsa_amd_pointer_info_fn: Option<hsa_amd_pointer_info_fn_t>,
    /// Slot for `hsa_amd_pointer_info_set_userdata` (offset 248).
    pub hsa_amd_pointer_info_set_userdata_fn: Option<hsa_amd_pointer_info_set_userdata_fn_t>,
    /// Slot for `hsa_amd_ipc_memory_create` (offset 256).
    pub hsa_amd_ipc_memory_create_fn: Option<hsa_amd_ipc_memory_create_fn_t>,
    /// Slot for `hsa_amd_ipc_memory_attach` (offset 264).
    pub hsa_amd_ipc_memory_attach_fn: Option<hsa_amd_ipc_memory_attach_fn_t>,
    /// Slot for `hsa_amd_ipc_memory_detach` (offset 272).
    pub hsa_amd_ipc_memory_detach_fn: Option<hsa_amd_ipc_memory_detach_fn_t>,
    /// Slot for `hsa_amd_signal_create` (offset 280).
    pub hsa_amd_signal_create_fn: Option<hsa_amd_signal_create_fn_t>,
    /// Slot for `hsa_amd_ipc_signal_create` (offset 288).
    pub hsa_amd_ipc_signal_create_fn: Option<hsa_amd_ipc_signal_create_fn_t>,
    /// Slot for `hsa_amd_ipc_signal_attach` (offset 296).
    pub hsa_amd_ipc_signal_attach_fn: Option<hsa_amd_ipc_signal_attach_fn_t>,
    /// Slot for `hsa_amd_register_system_event_handler` (offset 304).
    pub hsa_amd_register_system_event_handler_fn:
        Option<hsa_amd_register_system_event_handler_fn_t>,
    /// Slot for `hsa_amd_queue_intercept_create` (offset 312).
    pub hsa_amd_queue_intercept_create_fn: Option<hsa_amd_queue_intercept_create_fn_t>,
    /// Slot for `hsa_amd_queue_intercept_register` (offset 320).
    pub hsa_amd_queue_intercept_register_fn: Option<hsa_amd_queue_intercept_register_fn_t>,
    /// Slot for `hsa_amd_queue_set_priority` (offset 328).
    pub hsa_amd_queue_set_priority_fn: Option<hsa_amd_queue_set_priority_fn_t>,
    /// Slot for `hsa_amd_memory_async_copy_rect` (offset 336).
    pub hsa_amd_memory_async_copy_rect_fn: Option<hsa_amd_memory_async_copy_rect_fn_t>,
    /// Slot for `hsa_amd_runtime_queue_create_register` (offset 344).
    pub hsa_amd_runtime_queue_create_register_fn:
        Option<hsa_amd_runtime_queue_create_register_fn_t>,
    /// Slot for `hsa_amd_memory_lock_to_pool` (offset 352).
    pub hsa_amd_memory_lock_to_pool_fn: Option<hsa_amd_memory_lock_to_pool_fn_t>,
    /// Slot for `hsa_amd_register_deallocation_callback` (offset 360).
    pub hsa_amd_register_deallocation_callback_fn:
        Option<hsa_amd_register_deallocation_callback_fn_t>,
    /// Slot for `hsa_amd_deregister_deallocation_callback` (offset 368).
    pub hsa_amd_deregister_deallocation_callback_fn:
        Option<hsa_amd_deregister_deallocation_callback_fn_t>,
    /// Slot for `hsa_amd_signal_value_pointer` (offset 376).
    pub hsa_amd_signal_value_pointer_fn: Option<hsa_amd_signal_value_pointer_fn_t>,
    /// Slot for `hsa_amd_svm_attributes_set` (offset 384).
    pub hsa_amd_svm_attributes_set_fn: Option<hsa_amd_svm_attributes_set_fn_t>,
    /// Slot for `hsa_amd_svm_attributes_get` (offset 392).
    pub hsa_amd_svm_attributes_get_fn: Option<hsa_amd_svm_attributes_get_fn_t>,
    /// Slot for `hsa_amd_svm_prefetch_async` (offset 400).
    pub hsa_amd_svm_prefetch_async_fn: Option<hsa_amd_svm_prefetch_async_fn_t>,
    /// Slot for `hsa_amd_spm_acquire` (offset 408).
    pub hsa_amd_spm_acquire_fn: Option<hsa_amd_spm_acquire_fn_t>,
    /// Slot for `hsa_amd_spm_release` (offset 416).
    pub hsa_amd_spm_release_fn: Option<hsa_amd_spm_release_fn_t>,
    /// Slot for `hsa_amd_spm_set_dest_buffer` (offset 424).
    pub hsa_amd_spm_set_dest_buffer_fn: Option<hsa_amd_spm_set_dest_buffer_fn_t>,
    /// Slot for `hsa_amd_queue_cu_get_mask` (offset 432).
    pub hsa_amd_queue_cu_get_mask_fn: Option<hsa_amd_queue_cu_get_mask_fn_t>,
    /// Slot for `hsa_amd_portable_export_dmabuf` (offset 440).
    pub hsa_amd_portable_export_dmabuf_fn: Option<hsa_amd_portable_export_dmabuf_fn_t>,
    /// Slot for `hsa_amd_portable_close_dmabuf` (offset 448).
    pub hsa_amd_portable_close_dmabuf_fn: Option<hsa_amd_portable_close_dmabuf_fn_t>,
    /// Slot for `hsa_amd_vmem_address_reserve` (offset 456).
    pub hsa_amd_vmem_address_reserve_fn: Option<hsa_amd_vmem_address_reserve_fn_t>,
    /// Slot for `hsa_amd_vmem_address_free` (offset 464).
    pub hsa_amd_vmem_address_free_fn: Option<hsa_amd_vmem_address_free_fn_t>,
    /// Slot for `hsa_amd_vmem_handle_create` (offset 472).
    pub hsa_amd_vmem_handle_create_fn: Option<hsa_amd_vmem_handle_create_fn_t>,
    /// Slot for `hsa_amd_vmem_handle_release` (offset 480).
    pub hsa_amd_vmem_handle_release_fn: Option<hsa_amd_vmem_handle_release_fn_t>,
    /// Slot for `hsa_amd_vmem_map` (offset 488).
    pub hsa_amd_vmem_map_fn: Option<hsa_amd_vmem_map_fn_t>,
    /// Slot for `hsa_amd_vmem_unmap` (offset 496).
    pub hsa_amd_vmem_unmap_fn: Option<hsa_amd_vmem_unmap_fn_t>,
    /// Slot for `hsa_amd_vmem_set_access` (offset 504).
    pub hsa_amd_vmem_set_access_fn: Option<hsa_amd_vmem_set_access_fn_t>,
    /// Slot for `hsa_amd_vmem_get_access` (offset 512).
    pub hsa_amd_vmem_get_access_fn: Option<hsa_amd_vmem_get_access_fn_t>,
    /// Slot for `hsa_amd_vmem_export_shareable_handle` (offset 520).
    pub hsa_amd_vmem_export_shareable_handle_fn: Option<hsa_amd_vmem_export_shareable_handle_fn_t>,
    /// Slot for `hsa_amd_vmem_import_shareable_handle` (offset 528).
    pub hsa_amd_vmem_import_shareable_handle_fn: Option<hsa_amd_vmem_import_shareable_handle_fn_t>,
    /// Slot for `hsa_amd_vmem_retain_alloc_handle` (offset 536).
    pub hsa_amd_vmem_retain_alloc_handle_fn: Option<hsa_amd_vmem_retain_alloc_handle_fn_t>,
    /// Slot for `hsa_amd_vmem_get_alloc_properties_from_handle` (offset 544).
    pub hsa_amd_vmem_get_alloc_properties_from_handle_fn:
        Option<hsa_amd_vmem_get_alloc_properties_from_handle_fn_t>,
    /// Slot for `hsa_amd_agent_set_async_scratch_limit` (offset 552).
    pub hsa_amd_agent_set_async_scratch_limit_fn:
        Option<hsa_amd_agent_set_async_scratch_limit_fn_t>,
    /// Slot for `hsa_amd_queue_get_info` (offset 560).
    pub hsa_amd_queue_get_info_fn: Option<hsa_amd_queue_get_info_fn_t>,
    /// Slot for `hsa_amd_vmem_address_reserve_align` (offset 568).
    pub hsa_amd_vmem_address_reserve_align_fn: Option<hsa_amd_vmem_address_reserve_align_fn_t>,
    /// Slot for `hsa_amd_enable_logging` (offset 576).
    pub hsa_amd_enable_logging_fn: Option<hsa_amd_enable_logging_fn_t>,
    /// Slot for `hsa_amd_signal_wait_all` (offset 584).
    pub hsa_amd_signal_wait_all_fn: Option<hsa_amd_signal_wait_all_fn_t>,
    /// Slot for `hsa_amd_memory_get_preferred_copy_engine` (offset 592).
    pub hsa_amd_memory_get_preferred_copy_engine_fn:
        Option<hsa_amd_memory_get_preferred_copy_engine_fn_t>,
    /// Slot for `hsa_amd_portable_export_dmabuf_v2` (offset 600).
    pub hsa_amd_portable_export_dmabuf_v2_fn: Option<hsa_amd_portable_export_dmabuf_v2_fn_t>,
}
const_assert_layout!(AmdExtTable, size = 608, align = 8);
