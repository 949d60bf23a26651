//! The AMD AQL profile extension, v1 (`hsa_ven_amd_aqlprofile.h`, `HSA_EXTENSION_AMD_AQLPROFILE`).
//!
//! Hardware counters (PMC) are collected by submitting a *start* and a *stop* AQL packet around
//! the work to measure, both vendor-specific packets ([`hsa_ext_amd_aql_pm4_packet_t`]) that the
//! library fills from a profile object ([`hsa_ven_amd_aqlprofile_profile_t`]: agent, events,
//! a command buffer and an output buffer the caller allocates), and then reading the results
//! with `iterate_data`. A tool reaches the functions through
//! `hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_AQLPROFILE, 1, sizeof table, &table)`,
//! which fills a [`hsa_ven_amd_aqlprofile_1_00_pfn_t`].
//!
//! Mirrors of Debian's ROCm 5.2 header; `tests/header_layout.rs` compares every size, offset,
//! enum value (see [`crate::AQLPROFILE_VALUES`]) and signature with it. ROCm 6.2+ adds a second
//! API (`aqlprofile_pmc_*`, "v2", in rocprofiler-sdk's `aql_profile_v2.h`), not mirrored here.

use core::ffi::{c_char, c_void};

use crate::enums::*;
use crate::layout::{const_assert_layout, const_assert_offsets};
use crate::types::*;

/// C `HSA_AQLPROFILE_VERSION_MAJOR`: the library's major version in the 5.2 header (2).
pub const HSA_AQLPROFILE_VERSION_MAJOR: u32 = 2;
/// C `HSA_AQLPROFILE_VERSION_MINOR`: the library's minor version in the 5.2 header (0).
pub const HSA_AQLPROFILE_VERSION_MINOR: u32 = 0;
/// C `hsa_ven_amd_aqlprofile_VERSION_MAJOR`: the extension's (function table's) major version.
pub const hsa_ven_amd_aqlprofile_VERSION_MAJOR: u16 = 1;
/// C `HSA_VEN_AMD_AQLPROFILE_LEGACY_PM4_PACKET_SIZE`: bytes `legacy_get_pm4` writes.
pub const HSA_VEN_AMD_AQLPROFILE_LEGACY_PM4_PACKET_SIZE: u32 = 192;

/// `AMD_AQL_FORMAT_PM4_IB`: the vendor format (the 16 bits after the AQL header) of a packet
/// that carries PM4 commands. Not in Debian's headers: ROCR-Runtime defines it next to its
/// `amd_aql_pm4_ib` packet (`runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp`), and
/// aqlprofile's packets carry it in `pm4_command[0]`.
pub const AMD_AQL_FORMAT_PM4_IB: u16 = 1;

/// C `hsa_ven_amd_aqlprofile_event_t`: one PMC event, a counter of one block instance.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct hsa_ven_amd_aqlprofile_event_t {
    /// Block (`HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_*`).
    pub block_name: hsa_ven_amd_aqlprofile_block_name_t,
    /// Instance of the block (0 for blocks with one instance).
    pub block_index: u32,
    /// The counter's select value in that block (the "event" of AMD's counter definitions).
    pub counter_id: u32,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_event_t, size = 12, align = 4);
const_assert_offsets!(hsa_ven_amd_aqlprofile_event_t {
    block_name: 0,
    block_index: 4,
    counter_id: 8
});

/// C `hsa_ven_amd_aqlprofile_parameter_t`: one profile parameter (trace parameters).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_ven_amd_aqlprofile_parameter_t {
    /// Which parameter (`HSA_VEN_AMD_AQLPROFILE_PARAMETER_NAME_*`).
    pub parameter_name: hsa_ven_amd_aqlprofile_parameter_name_t,
    /// Its value.
    pub value: u32,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_parameter_t, size = 8, align = 4);
const_assert_offsets!(hsa_ven_amd_aqlprofile_parameter_t {
    parameter_name: 0,
    value: 4
});

/// C `hsa_ven_amd_aqlprofile_descriptor_t`: a buffer the caller allocated.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_ven_amd_aqlprofile_descriptor_t {
    /// Start of the buffer.
    pub ptr: *mut c_void,
    /// Its size in bytes.
    pub size: u32,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_descriptor_t, size = 16, align = 8);
const_assert_offsets!(hsa_ven_amd_aqlprofile_descriptor_t { ptr: 0, size: 8 });

/// C `hsa_ven_amd_aqlprofile_profile_t`: the profile context object.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_ven_amd_aqlprofile_profile_t {
    /// The GPU agent to profile.
    pub agent: hsa_agent_t,
    /// Event type (`HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_*`).
    pub type_: hsa_ven_amd_aqlprofile_event_type_t,
    /// Events array (`event_count` entries).
    pub events: *const hsa_ven_amd_aqlprofile_event_t,
    /// Number of events.
    pub event_count: u32,
    /// Parameters array (`parameter_count` entries).
    pub parameters: *const hsa_ven_amd_aqlprofile_parameter_t,
    /// Number of parameters.
    pub parameter_count: u32,
    /// Where results land.
    pub output_buffer: hsa_ven_amd_aqlprofile_descriptor_t,
    /// Commands the start/stop/read packets refer to.
    pub command_buffer: hsa_ven_amd_aqlprofile_descriptor_t,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_profile_t, size = 80, align = 8);
const_assert_offsets!(hsa_ven_amd_aqlprofile_profile_t {
    agent: 0,
    type_: 8,
    events: 16,
    event_count: 24,
    parameters: 32,
    parameter_count: 40,
    output_buffer: 48,
    command_buffer: 64
});

/// C `hsa_ext_amd_aql_pm4_packet_t`: the vendor-specific AQL packet that carries PM4 commands
/// (declared in `hsa_ven_amd_aqlprofile.h` itself).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_ext_amd_aql_pm4_packet_t {
    /// AQL header (type `HSA_PACKET_TYPE_VENDOR_SPECIFIC`; the caller sets it).
    pub header: u16,
    /// The commands (the library fills them).
    pub pm4_command: [u16; 27],
    /// Completion signal (the caller sets it).
    pub completion_signal: hsa_signal_t,
}
const_assert_layout!(hsa_ext_amd_aql_pm4_packet_t, size = 64, align = 8);
const_assert_offsets!(hsa_ext_amd_aql_pm4_packet_t {
    header: 0,
    pm4_command: 2,
    completion_signal: 56
});

/// The `pmc_data` member of [`hsa_ven_amd_aqlprofile_info_data_t`] (an unnamed struct in C).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_ven_amd_aqlprofile_pmc_data_t {
    /// The event the value belongs to.
    pub event: hsa_ven_amd_aqlprofile_event_t,
    /// The counter's value.
    pub result: u64,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_pmc_data_t, size = 24, align = 8);
const_assert_offsets!(hsa_ven_amd_aqlprofile_pmc_data_t {
    event: 0,
    result: 16
});

/// The unnamed union of [`hsa_ven_amd_aqlprofile_info_data_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union hsa_ven_amd_aqlprofile_info_data_u {
    /// PMC sample (`HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA`).
    pub pmc_data: hsa_ven_amd_aqlprofile_pmc_data_t,
    /// Trace buffer (`HSA_VEN_AMD_AQLPROFILE_INFO_TRACE_DATA`).
    pub trace_data: hsa_ven_amd_aqlprofile_descriptor_t,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_info_data_u, size = 24, align = 8);

/// C `hsa_ven_amd_aqlprofile_info_data_t`: one output sample.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct hsa_ven_amd_aqlprofile_info_data_t {
    /// Sample index (the shader engine, for per-SE blocks).
    pub sample_id: u32,
    /// The sample (C: an anonymous union with `pmc_data` and `trace_data`).
    pub data: hsa_ven_amd_aqlprofile_info_data_u,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_info_data_t, size = 32, align = 8);
const_assert_offsets!(hsa_ven_amd_aqlprofile_info_data_t {
    sample_id: 0,
    data: 8
});

/// C `hsa_ven_amd_aqlprofile_id_query_t`: block id and instance count by block name.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_ven_amd_aqlprofile_id_query_t {
    /// Block name, e.g. `"SQ"` (in).
    pub name: *const c_char,
    /// Block id (out).
    pub id: u32,
    /// Number of instances of the block (out).
    pub instance_count: u32,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_id_query_t, size = 16, align = 8);
const_assert_offsets!(hsa_ven_amd_aqlprofile_id_query_t {
    name: 0,
    id: 8,
    instance_count: 12
});

/// C `hsa_ven_amd_aqlprofile_data_callback_t`: called once per output sample by `iterate_data`.
pub type hsa_ven_amd_aqlprofile_data_callback_t = Option<
    unsafe extern "C" fn(
        info_type: hsa_ven_amd_aqlprofile_info_type_t,
        info_data: *mut hsa_ven_amd_aqlprofile_info_data_t,
        callback_data: *mut c_void,
    ) -> hsa_status_t,
>;

/// Signature of `hsa_ven_amd_aqlprofile_version_major` (and `_minor`).
pub type hsa_ven_amd_aqlprofile_version_fn_t = unsafe extern "C" fn() -> u32;
/// Signature of `hsa_ven_amd_aqlprofile_error_string`.
pub type hsa_ven_amd_aqlprofile_error_string_fn_t =
    unsafe extern "C" fn(str_: *mut *const c_char) -> hsa_status_t;
/// Signature of `hsa_ven_amd_aqlprofile_validate_event`.
pub type hsa_ven_amd_aqlprofile_validate_event_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    event: *const hsa_ven_amd_aqlprofile_event_t,
    result: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_aqlprofile_start`.
pub type hsa_ven_amd_aqlprofile_start_fn_t = unsafe extern "C" fn(
    profile: *mut hsa_ven_amd_aqlprofile_profile_t,
    aql_start_packet: *mut hsa_ext_amd_aql_pm4_packet_t,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_aqlprofile_stop` (and `_read`).
pub type hsa_ven_amd_aqlprofile_stop_fn_t = unsafe extern "C" fn(
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    aql_stop_packet: *mut hsa_ext_amd_aql_pm4_packet_t,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_aqlprofile_legacy_get_pm4`.
pub type hsa_ven_amd_aqlprofile_legacy_get_pm4_fn_t = unsafe extern "C" fn(
    aql_packet: *const hsa_ext_amd_aql_pm4_packet_t,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_aqlprofile_get_info`.
pub type hsa_ven_amd_aqlprofile_get_info_fn_t = unsafe extern "C" fn(
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    attribute: hsa_ven_amd_aqlprofile_info_type_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_aqlprofile_iterate_data`.
pub type hsa_ven_amd_aqlprofile_iterate_data_fn_t = unsafe extern "C" fn(
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    callback: hsa_ven_amd_aqlprofile_data_callback_t,
    data: *mut c_void,
) -> hsa_status_t;

/// C `hsa_ven_amd_aqlprofile_1_00_pfn_t`: the extension's v1 function table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_ven_amd_aqlprofile_1_00_pfn_t {
    /// `hsa_ven_amd_aqlprofile_version_major`.
    pub hsa_ven_amd_aqlprofile_version_major: Option<hsa_ven_amd_aqlprofile_version_fn_t>,
    /// `hsa_ven_amd_aqlprofile_version_minor`.
    pub hsa_ven_amd_aqlprofile_version_minor: Option<hsa_ven_amd_aqlprofile_version_fn_t>,
    /// `hsa_ven_amd_aqlprofile_error_string`.
    pub hsa_ven_amd_aqlprofile_error_string: Option<hsa_ven_amd_aqlprofile_error_string_fn_t>,
    /// `hsa_ven_amd_aqlprofile_validate_event`.
    pub hsa_ven_amd_aqlprofile_validate_event: Option<hsa_ven_amd_aqlprofile_validate_event_fn_t>,
    /// `hsa_ven_amd_aqlprofile_start`.
    pub hsa_ven_amd_aqlprofile_start: Option<hsa_ven_amd_aqlprofile_start_fn_t>,
    /// `hsa_ven_amd_aqlprofile_stop`.
    pub hsa_ven_amd_aqlprofile_stop: Option<hsa_ven_amd_aqlprofile_stop_fn_t>,
    /// `hsa_ven_amd_aqlprofile_read`.
    pub hsa_ven_amd_aqlprofile_read: Option<hsa_ven_amd_aqlprofile_stop_fn_t>,
    /// `hsa_ven_amd_aqlprofile_legacy_get_pm4`.
    pub hsa_ven_amd_aqlprofile_legacy_get_pm4: Option<hsa_ven_amd_aqlprofile_legacy_get_pm4_fn_t>,
    /// `hsa_ven_amd_aqlprofile_get_info`.
    pub hsa_ven_amd_aqlprofile_get_info: Option<hsa_ven_amd_aqlprofile_get_info_fn_t>,
    /// `hsa_ven_amd_aqlprofile_iterate_data`.
    pub hsa_ven_amd_aqlprofile_iterate_data: Option<hsa_ven_amd_aqlprofile_iterate_data_fn_t>,
}
const_assert_layout!(hsa_ven_amd_aqlprofile_1_00_pfn_t, size = 80, align = 8);
const_assert_offsets!(hsa_ven_amd_aqlprofile_1_00_pfn_t {
    hsa_ven_amd_aqlprofile_version_major: 0,
    hsa_ven_amd_aqlprofile_version_minor: 8,
    hsa_ven_amd_aqlprofile_error_string: 16,
    hsa_ven_amd_aqlprofile_validate_event: 24,
    hsa_ven_amd_aqlprofile_start: 32,
    hsa_ven_amd_aqlprofile_stop: 40,
    hsa_ven_amd_aqlprofile_read: 48,
    hsa_ven_amd_aqlprofile_legacy_get_pm4: 56,
    hsa_ven_amd_aqlprofile_get_info: 64,
    hsa_ven_amd_aqlprofile_iterate_data: 72
});

/// C `hsa_ven_amd_aqlprofile_pfn_t`: the current table (v1).
pub type hsa_ven_amd_aqlprofile_pfn_t = hsa_ven_amd_aqlprofile_1_00_pfn_t;
