//! Signatures of the HSA API functions, one `*_fn_t` alias per function.
//!
//! Transcribed from the ROCm 5.2 prototypes (`tests/header_layout.rs` checks each against the
//! real header with a C++ `std::is_same` probe of argument sizes), plus the ROCm 6.x functions
//! that occupy slots of the 6.x [`crate::AmdExtTable`].

use core::ffi::{c_char, c_int, c_void};

use crate::enums::*;
use crate::queue::hsa_queue_t;
use crate::types::*;

/// Signature of `hsa_status_string`.
pub type hsa_status_string_fn_t =
    unsafe extern "C" fn(status: hsa_status_t, status_string: *mut *const c_char) -> hsa_status_t;
/// Signature of `hsa_init`.
pub type hsa_init_fn_t = unsafe extern "C" fn() -> hsa_status_t;
/// Signature of `hsa_shut_down`.
pub type hsa_shut_down_fn_t = unsafe extern "C" fn() -> hsa_status_t;
/// Signature of `hsa_system_get_info`.
pub type hsa_system_get_info_fn_t =
    unsafe extern "C" fn(attribute: hsa_system_info_t, value: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_extension_get_name`.
pub type hsa_extension_get_name_fn_t =
    unsafe extern "C" fn(extension: u16, name: *mut *const c_char) -> hsa_status_t;
/// Signature of `hsa_system_extension_supported`.
pub type hsa_system_extension_supported_fn_t = unsafe extern "C" fn(
    extension: u16,
    version_major: u16,
    version_minor: u16,
    result: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_system_major_extension_supported`.
pub type hsa_system_major_extension_supported_fn_t = unsafe extern "C" fn(
    extension: u16,
    version_major: u16,
    version_minor: *mut u16,
    result: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_system_get_extension_table`.
pub type hsa_system_get_extension_table_fn_t = unsafe extern "C" fn(
    extension: u16,
    version_major: u16,
    version_minor: u16,
    table: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_system_get_major_extension_table`.
pub type hsa_system_get_major_extension_table_fn_t = unsafe extern "C" fn(
    extension: u16,
    version_major: u16,
    table_length: usize,
    table: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_agent_get_info`.
pub type hsa_agent_get_info_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    attribute: hsa_agent_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_iterate_agents`.
pub type hsa_iterate_agents_fn_t = unsafe extern "C" fn(
    callback: Option<unsafe extern "C" fn(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_agent_get_exception_policies`.
pub type hsa_agent_get_exception_policies_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    profile: hsa_profile_t,
    mask: *mut u16,
) -> hsa_status_t;
/// Signature of `hsa_cache_get_info`.
pub type hsa_cache_get_info_fn_t = unsafe extern "C" fn(
    cache: hsa_cache_t,
    attribute: hsa_cache_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_agent_iterate_caches`.
pub type hsa_agent_iterate_caches_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(cache: hsa_cache_t, data: *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_agent_extension_supported`.
pub type hsa_agent_extension_supported_fn_t = unsafe extern "C" fn(
    extension: u16,
    agent: hsa_agent_t,
    version_major: u16,
    version_minor: u16,
    result: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_agent_major_extension_supported`.
pub type hsa_agent_major_extension_supported_fn_t = unsafe extern "C" fn(
    extension: u16,
    agent: hsa_agent_t,
    version_major: u16,
    version_minor: *mut u16,
    result: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_signal_create`.
pub type hsa_signal_create_fn_t = unsafe extern "C" fn(
    initial_value: hsa_signal_value_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    signal: *mut hsa_signal_t,
) -> hsa_status_t;
/// Signature of `hsa_signal_destroy`.
pub type hsa_signal_destroy_fn_t = unsafe extern "C" fn(signal: hsa_signal_t) -> hsa_status_t;
/// Signature of `hsa_signal_load_scacquire`.
pub type hsa_signal_load_scacquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_load_relaxed`.
pub type hsa_signal_load_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_load_acquire`.
pub type hsa_signal_load_acquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_store_relaxed`.
pub type hsa_signal_store_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_store_screlease`.
pub type hsa_signal_store_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_store_release`.
pub type hsa_signal_store_release_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_silent_store_relaxed`.
pub type hsa_signal_silent_store_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_silent_store_screlease`.
pub type hsa_signal_silent_store_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_exchange_scacq_screl`.
pub type hsa_signal_exchange_scacq_screl_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_exchange_acq_rel`.
pub type hsa_signal_exchange_acq_rel_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_exchange_scacquire`.
pub type hsa_signal_exchange_scacquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_exchange_acquire`.
pub type hsa_signal_exchange_acquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_exchange_relaxed`.
pub type hsa_signal_exchange_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_exchange_screlease`.
pub type hsa_signal_exchange_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_exchange_release`.
pub type hsa_signal_exchange_release_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
/// Signature of `hsa_signal_cas_scacq_screl`.
pub type hsa_signal_cas_scacq_screl_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_cas_acq_rel`.
pub type hsa_signal_cas_acq_rel_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_cas_scacquire`.
pub type hsa_signal_cas_scacquire_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_cas_acquire`.
pub type hsa_signal_cas_acquire_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_cas_relaxed`.
pub type hsa_signal_cas_relaxed_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_cas_screlease`.
pub type hsa_signal_cas_screlease_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_cas_release`.
pub type hsa_signal_cas_release_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_add_scacq_screl`.
pub type hsa_signal_add_scacq_screl_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_add_acq_rel`.
pub type hsa_signal_add_acq_rel_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_add_scacquire`.
pub type hsa_signal_add_scacquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_add_acquire`.
pub type hsa_signal_add_acquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_add_relaxed`.
pub type hsa_signal_add_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_add_screlease`.
pub type hsa_signal_add_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_add_release`.
pub type hsa_signal_add_release_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_subtract_scacq_screl`.
pub type hsa_signal_subtract_scacq_screl_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_subtract_acq_rel`.
pub type hsa_signal_subtract_acq_rel_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_subtract_scacquire`.
pub type hsa_signal_subtract_scacquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_subtract_acquire`.
pub type hsa_signal_subtract_acquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_subtract_relaxed`.
pub type hsa_signal_subtract_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_subtract_screlease`.
pub type hsa_signal_subtract_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_subtract_release`.
pub type hsa_signal_subtract_release_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_and_scacq_screl`.
pub type hsa_signal_and_scacq_screl_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_and_acq_rel`.
pub type hsa_signal_and_acq_rel_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_and_scacquire`.
pub type hsa_signal_and_scacquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_and_acquire`.
pub type hsa_signal_and_acquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_and_relaxed`.
pub type hsa_signal_and_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_and_screlease`.
pub type hsa_signal_and_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_and_release`.
pub type hsa_signal_and_release_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_or_scacq_screl`.
pub type hsa_signal_or_scacq_screl_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_or_acq_rel`.
pub type hsa_signal_or_acq_rel_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_or_scacquire`.
pub type hsa_signal_or_scacquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_or_acquire`.
pub type hsa_signal_or_acquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_or_relaxed`.
pub type hsa_signal_or_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_or_screlease`.
pub type hsa_signal_or_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_or_release`.
pub type hsa_signal_or_release_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_xor_scacq_screl`.
pub type hsa_signal_xor_scacq_screl_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_xor_acq_rel`.
pub type hsa_signal_xor_acq_rel_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_xor_scacquire`.
pub type hsa_signal_xor_scacquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_xor_acquire`.
pub type hsa_signal_xor_acquire_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_xor_relaxed`.
pub type hsa_signal_xor_relaxed_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_xor_screlease`.
pub type hsa_signal_xor_screlease_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_xor_release`.
pub type hsa_signal_xor_release_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
/// Signature of `hsa_signal_wait_scacquire`.
pub type hsa_signal_wait_scacquire_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare_value: hsa_signal_value_t,
    timeout_hint: u64,
    wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_wait_relaxed`.
pub type hsa_signal_wait_relaxed_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare_value: hsa_signal_value_t,
    timeout_hint: u64,
    wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_wait_acquire`.
pub type hsa_signal_wait_acquire_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare_value: hsa_signal_value_t,
    timeout_hint: u64,
    wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t;
/// Signature of `hsa_signal_group_create`.
pub type hsa_signal_group_create_fn_t = unsafe extern "C" fn(
    num_signals: u32,
    signals: *const hsa_signal_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    signal_group: *mut hsa_signal_group_t,
) -> hsa_status_t;
/// Signature of `hsa_signal_group_destroy`.
pub type hsa_signal_group_destroy_fn_t =
    unsafe extern "C" fn(signal_group: hsa_signal_group_t) -> hsa_status_t;
/// Signature of `hsa_signal_group_wait_any_scacquire`.
pub type hsa_signal_group_wait_any_scacquire_fn_t = unsafe extern "C" fn(
    signal_group: hsa_signal_group_t,
    conditions: *const hsa_signal_condition_t,
    compare_values: *const hsa_signal_value_t,
    wait_state_hint: hsa_wait_state_t,
    signal: *mut hsa_signal_t,
    value: *mut hsa_signal_value_t,
) -> hsa_status_t;
/// Signature of `hsa_signal_group_wait_any_relaxed`.
pub type hsa_signal_group_wait_any_relaxed_fn_t = unsafe extern "C" fn(
    signal_group: hsa_signal_group_t,
    conditions: *const hsa_signal_condition_t,
    compare_values: *const hsa_signal_value_t,
    wait_state_hint: hsa_wait_state_t,
    signal: *mut hsa_signal_t,
    value: *mut hsa_signal_value_t,
) -> hsa_status_t;
/// Signature of `hsa_queue_create`.
pub type hsa_queue_create_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: Option<
        unsafe extern "C" fn(status: hsa_status_t, source: *mut hsa_queue_t, data: *mut c_void),
    >,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t;
/// Signature of `hsa_soft_queue_create`.
pub type hsa_soft_queue_create_fn_t = unsafe extern "C" fn(
    region: hsa_region_t,
    size: u32,
    type_: hsa_queue_type32_t,
    features: u32,
    doorbell_signal: hsa_signal_t,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t;
/// Signature of `hsa_queue_destroy`.
pub type hsa_queue_destroy_fn_t = unsafe extern "C" fn(queue: *mut hsa_queue_t) -> hsa_status_t;
/// Signature of `hsa_queue_inactivate`.
pub type hsa_queue_inactivate_fn_t = unsafe extern "C" fn(queue: *mut hsa_queue_t) -> hsa_status_t;
/// Signature of `hsa_queue_load_read_index_acquire`.
pub type hsa_queue_load_read_index_acquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
/// Signature of `hsa_queue_load_read_index_scacquire`.
pub type hsa_queue_load_read_index_scacquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
/// Signature of `hsa_queue_load_read_index_relaxed`.
pub type hsa_queue_load_read_index_relaxed_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
/// Signature of `hsa_queue_load_write_index_acquire`.
pub type hsa_queue_load_write_index_acquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
/// Signature of `hsa_queue_load_write_index_scacquire`.
pub type hsa_queue_load_write_index_scacquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
/// Signature of `hsa_queue_load_write_index_relaxed`.
pub type hsa_queue_load_write_index_relaxed_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
/// Signature of `hsa_queue_store_write_index_relaxed`.
pub type hsa_queue_store_write_index_relaxed_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
/// Signature of `hsa_queue_store_write_index_release`.
pub type hsa_queue_store_write_index_release_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
/// Signature of `hsa_queue_store_write_index_screlease`.
pub type hsa_queue_store_write_index_screlease_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
/// Signature of `hsa_queue_cas_write_index_acq_rel`.
pub type hsa_queue_cas_write_index_acq_rel_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
/// Signature of `hsa_queue_cas_write_index_scacq_screl`.
pub type hsa_queue_cas_write_index_scacq_screl_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
/// Signature of `hsa_queue_cas_write_index_acquire`.
pub type hsa_queue_cas_write_index_acquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
/// Signature of `hsa_queue_cas_write_index_scacquire`.
pub type hsa_queue_cas_write_index_scacquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
/// Signature of `hsa_queue_cas_write_index_relaxed`.
pub type hsa_queue_cas_write_index_relaxed_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
/// Signature of `hsa_queue_cas_write_index_release`.
pub type hsa_queue_cas_write_index_release_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
/// Signature of `hsa_queue_cas_write_index_screlease`.
pub type hsa_queue_cas_write_index_screlease_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
/// Signature of `hsa_queue_add_write_index_acq_rel`.
pub type hsa_queue_add_write_index_acq_rel_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
/// Signature of `hsa_queue_add_write_index_scacq_screl`.
pub type hsa_queue_add_write_index_scacq_screl_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
/// Signature of `hsa_queue_add_write_index_acquire`.
pub type hsa_queue_add_write_index_acquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
/// Signature of `hsa_queue_add_write_index_scacquire`.
pub type hsa_queue_add_write_index_scacquire_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
/// Signature of `hsa_queue_add_write_index_relaxed`.
pub type hsa_queue_add_write_index_relaxed_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
/// Signature of `hsa_queue_add_write_index_release`.
pub type hsa_queue_add_write_index_release_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
/// Signature of `hsa_queue_add_write_index_screlease`.
pub type hsa_queue_add_write_index_screlease_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
/// Signature of `hsa_queue_store_read_index_relaxed`.
pub type hsa_queue_store_read_index_relaxed_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
/// Signature of `hsa_queue_store_read_index_release`.
pub type hsa_queue_store_read_index_release_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
/// Signature of `hsa_queue_store_read_index_screlease`.
pub type hsa_queue_store_read_index_screlease_fn_t =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
/// Signature of `hsa_region_get_info`.
pub type hsa_region_get_info_fn_t = unsafe extern "C" fn(
    region: hsa_region_t,
    attribute: hsa_region_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_agent_iterate_regions`.
pub type hsa_agent_iterate_regions_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(region: hsa_region_t, data: *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_memory_allocate`.
pub type hsa_memory_allocate_fn_t =
    unsafe extern "C" fn(region: hsa_region_t, size: usize, ptr: *mut *mut c_void) -> hsa_status_t;
/// Signature of `hsa_memory_free`.
pub type hsa_memory_free_fn_t = unsafe extern "C" fn(ptr: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_memory_copy`.
pub type hsa_memory_copy_fn_t =
    unsafe extern "C" fn(dst: *mut c_void, src: *const c_void, size: usize) -> hsa_status_t;
/// Signature of `hsa_memory_assign_agent`.
pub type hsa_memory_assign_agent_fn_t = unsafe extern "C" fn(
    ptr: *mut c_void,
    agent: hsa_agent_t,
    access: hsa_access_permission_t,
) -> hsa_status_t;
/// Signature of `hsa_memory_register`.
pub type hsa_memory_register_fn_t =
    unsafe extern "C" fn(ptr: *mut c_void, size: usize) -> hsa_status_t;
/// Signature of `hsa_memory_deregister`.
pub type hsa_memory_deregister_fn_t =
    unsafe extern "C" fn(ptr: *mut c_void, size: usize) -> hsa_status_t;
/// Signature of `hsa_isa_from_name`.
pub type hsa_isa_from_name_fn_t =
    unsafe extern "C" fn(name: *const c_char, isa: *mut hsa_isa_t) -> hsa_status_t;
/// Signature of `hsa_agent_iterate_isas`.
pub type hsa_agent_iterate_isas_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(isa: hsa_isa_t, data: *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_isa_get_info`.
pub type hsa_isa_get_info_fn_t = unsafe extern "C" fn(
    isa: hsa_isa_t,
    attribute: hsa_isa_info_t,
    index: u32,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_isa_get_info_alt`.
pub type hsa_isa_get_info_alt_fn_t = unsafe extern "C" fn(
    isa: hsa_isa_t,
    attribute: hsa_isa_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_isa_get_exception_policies`.
pub type hsa_isa_get_exception_policies_fn_t =
    unsafe extern "C" fn(isa: hsa_isa_t, profile: hsa_profile_t, mask: *mut u16) -> hsa_status_t;
/// Signature of `hsa_isa_get_round_method`.
pub type hsa_isa_get_round_method_fn_t = unsafe extern "C" fn(
    isa: hsa_isa_t,
    fp_type: hsa_fp_type_t,
    flush_mode: hsa_flush_mode_t,
    round_method: *mut hsa_round_method_t,
) -> hsa_status_t;
/// Signature of `hsa_wavefront_get_info`.
pub type hsa_wavefront_get_info_fn_t = unsafe extern "C" fn(
    wavefront: hsa_wavefront_t,
    attribute: hsa_wavefront_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_isa_iterate_wavefronts`.
pub type hsa_isa_iterate_wavefronts_fn_t = unsafe extern "C" fn(
    isa: hsa_isa_t,
    callback: Option<
        unsafe extern "C" fn(wavefront: hsa_wavefront_t, data: *mut c_void) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_isa_compatible`.
pub type hsa_isa_compatible_fn_t = unsafe extern "C" fn(
    code_object_isa: hsa_isa_t,
    agent_isa: hsa_isa_t,
    result: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_code_object_reader_create_from_file`.
pub type hsa_code_object_reader_create_from_file_fn_t = unsafe extern "C" fn(
    file: hsa_file_t,
    code_object_reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t;
/// Signature of `hsa_code_object_reader_create_from_memory`.
pub type hsa_code_object_reader_create_from_memory_fn_t = unsafe extern "C" fn(
    code_object: *const c_void,
    size: usize,
    code_object_reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t;
/// Signature of `hsa_code_object_reader_destroy`.
pub type hsa_code_object_reader_destroy_fn_t =
    unsafe extern "C" fn(code_object_reader: hsa_code_object_reader_t) -> hsa_status_t;
/// Signature of `hsa_executable_create`.
pub type hsa_executable_create_fn_t = unsafe extern "C" fn(
    profile: hsa_profile_t,
    executable_state: hsa_executable_state_t,
    options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t;
/// Signature of `hsa_executable_create_alt`.
pub type hsa_executable_create_alt_fn_t = unsafe extern "C" fn(
    profile: hsa_profile_t,
    default_float_rounding_mode: hsa_default_float_rounding_mode_t,
    options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t;
/// Signature of `hsa_executable_destroy`.
pub type hsa_executable_destroy_fn_t =
    unsafe extern "C" fn(executable: hsa_executable_t) -> hsa_status_t;
/// Signature of `hsa_executable_load_program_code_object`.
pub type hsa_executable_load_program_code_object_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    code_object_reader: hsa_code_object_reader_t,
    options: *const c_char,
    loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t;
/// Signature of `hsa_executable_load_agent_code_object`.
pub type hsa_executable_load_agent_code_object_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    code_object_reader: hsa_code_object_reader_t,
    options: *const c_char,
    loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t;
/// Signature of `hsa_executable_freeze`.
pub type hsa_executable_freeze_fn_t =
    unsafe extern "C" fn(executable: hsa_executable_t, options: *const c_char) -> hsa_status_t;
/// Signature of `hsa_executable_get_info`.
pub type hsa_executable_get_info_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    attribute: hsa_executable_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_global_variable_define`.
pub type hsa_executable_global_variable_define_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    variable_name: *const c_char,
    address: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_agent_global_variable_define`.
pub type hsa_executable_agent_global_variable_define_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    variable_name: *const c_char,
    address: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_readonly_variable_define`.
pub type hsa_executable_readonly_variable_define_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    variable_name: *const c_char,
    address: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_validate`.
pub type hsa_executable_validate_fn_t =
    unsafe extern "C" fn(executable: hsa_executable_t, result: *mut u32) -> hsa_status_t;
/// Signature of `hsa_executable_validate_alt`.
pub type hsa_executable_validate_alt_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    options: *const c_char,
    result: *mut u32,
) -> hsa_status_t;
/// Signature of `hsa_executable_get_symbol`.
pub type hsa_executable_get_symbol_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    module_name: *const c_char,
    symbol_name: *const c_char,
    agent: hsa_agent_t,
    call_convention: i32,
    symbol: *mut hsa_executable_symbol_t,
) -> hsa_status_t;
/// Signature of `hsa_executable_get_symbol_by_name`.
pub type hsa_executable_get_symbol_by_name_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    symbol_name: *const c_char,
    agent: *const hsa_agent_t,
    symbol: *mut hsa_executable_symbol_t,
) -> hsa_status_t;
/// Signature of `hsa_executable_symbol_get_info`.
pub type hsa_executable_symbol_get_info_fn_t = unsafe extern "C" fn(
    executable_symbol: hsa_executable_symbol_t,
    attribute: hsa_executable_symbol_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_iterate_symbols`.
pub type hsa_executable_iterate_symbols_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    callback: Option<
        unsafe extern "C" fn(
            exec: hsa_executable_t,
            symbol: hsa_executable_symbol_t,
            data: *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_iterate_agent_symbols`.
pub type hsa_executable_iterate_agent_symbols_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    callback: Option<
        unsafe extern "C" fn(
            exec: hsa_executable_t,
            agent: hsa_agent_t,
            symbol: hsa_executable_symbol_t,
            data: *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_iterate_program_symbols`.
pub type hsa_executable_iterate_program_symbols_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    callback: Option<
        unsafe extern "C" fn(
            exec: hsa_executable_t,
            symbol: hsa_executable_symbol_t,
            data: *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_code_object_serialize`.
pub type hsa_code_object_serialize_fn_t = unsafe extern "C" fn(
    code_object: hsa_code_object_t,
    alloc_callback: Option<
        unsafe extern "C" fn(
            size: usize,
            data: hsa_callback_data_t,
            address: *mut *mut c_void,
        ) -> hsa_status_t,
    >,
    callback_data: hsa_callback_data_t,
    options: *const c_char,
    serialized_code_object: *mut *mut c_void,
    serialized_code_object_size: *mut usize,
) -> hsa_status_t;
/// Signature of `hsa_code_object_deserialize`.
pub type hsa_code_object_deserialize_fn_t = unsafe extern "C" fn(
    serialized_code_object: *mut c_void,
    serialized_code_object_size: usize,
    options: *const c_char,
    code_object: *mut hsa_code_object_t,
) -> hsa_status_t;
/// Signature of `hsa_code_object_destroy`.
pub type hsa_code_object_destroy_fn_t =
    unsafe extern "C" fn(code_object: hsa_code_object_t) -> hsa_status_t;
/// Signature of `hsa_code_object_get_info`.
pub type hsa_code_object_get_info_fn_t = unsafe extern "C" fn(
    code_object: hsa_code_object_t,
    attribute: hsa_code_object_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_executable_load_code_object`.
pub type hsa_executable_load_code_object_fn_t = unsafe extern "C" fn(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    code_object: hsa_code_object_t,
    options: *const c_char,
) -> hsa_status_t;
/// Signature of `hsa_code_object_get_symbol`.
pub type hsa_code_object_get_symbol_fn_t = unsafe extern "C" fn(
    code_object: hsa_code_object_t,
    symbol_name: *const c_char,
    symbol: *mut hsa_code_symbol_t,
) -> hsa_status_t;
/// Signature of `hsa_code_object_get_symbol_from_name`.
pub type hsa_code_object_get_symbol_from_name_fn_t = unsafe extern "C" fn(
    code_object: hsa_code_object_t,
    module_name: *const c_char,
    symbol_name: *const c_char,
    symbol: *mut hsa_code_symbol_t,
) -> hsa_status_t;
/// Signature of `hsa_code_symbol_get_info`.
pub type hsa_code_symbol_get_info_fn_t = unsafe extern "C" fn(
    code_symbol: hsa_code_symbol_t,
    attribute: hsa_code_symbol_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_code_object_iterate_symbols`.
pub type hsa_code_object_iterate_symbols_fn_t = unsafe extern "C" fn(
    code_object: hsa_code_object_t,
    callback: Option<
        unsafe extern "C" fn(
            code_object: hsa_code_object_t,
            symbol: hsa_code_symbol_t,
            data: *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_coherency_get_type`.
pub type hsa_amd_coherency_get_type_fn_t =
    unsafe extern "C" fn(agent: hsa_agent_t, type_: *mut hsa_amd_coherency_type_t) -> hsa_status_t;
/// Signature of `hsa_amd_coherency_set_type`.
pub type hsa_amd_coherency_set_type_fn_t =
    unsafe extern "C" fn(agent: hsa_agent_t, type_: hsa_amd_coherency_type_t) -> hsa_status_t;
/// Signature of `hsa_amd_profiling_set_profiler_enabled`.
pub type hsa_amd_profiling_set_profiler_enabled_fn_t =
    unsafe extern "C" fn(queue: *mut hsa_queue_t, enable: c_int) -> hsa_status_t;
/// Signature of `hsa_amd_profiling_async_copy_enable`.
pub type hsa_amd_profiling_async_copy_enable_fn_t =
    unsafe extern "C" fn(enable: bool) -> hsa_status_t;
/// Signature of `hsa_amd_profiling_get_dispatch_time`.
pub type hsa_amd_profiling_get_dispatch_time_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_dispatch_time_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_profiling_get_async_copy_time`.
pub type hsa_amd_profiling_get_async_copy_time_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_async_copy_time_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_profiling_convert_tick_to_system_domain`.
pub type hsa_amd_profiling_convert_tick_to_system_domain_fn_t =
    unsafe extern "C" fn(
        agent: hsa_agent_t,
        agent_tick: u64,
        system_tick: *mut u64,
    ) -> hsa_status_t;
/// Signature of `hsa_amd_signal_create`.
pub type hsa_amd_signal_create_fn_t = unsafe extern "C" fn(
    initial_value: hsa_signal_value_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    attributes: u64,
    signal: *mut hsa_signal_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_signal_value_pointer`.
pub type hsa_amd_signal_value_pointer_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    value_ptr: *mut *mut hsa_signal_value_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_signal_async_handler`.
pub type hsa_amd_signal_async_handler_fn_t = unsafe extern "C" fn(
    signal: hsa_signal_t,
    cond: hsa_signal_condition_t,
    value: hsa_signal_value_t,
    handler: hsa_amd_signal_handler,
    arg: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_async_function`.
pub type hsa_amd_async_function_fn_t = unsafe extern "C" fn(
    callback: Option<unsafe extern "C" fn(arg: *mut c_void)>,
    arg: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_signal_wait_any`.
pub type hsa_amd_signal_wait_any_fn_t = unsafe extern "C" fn(
    signal_count: u32,
    signals: *mut hsa_signal_t,
    conds: *mut hsa_signal_condition_t,
    values: *mut hsa_signal_value_t,
    timeout_hint: u64,
    wait_hint: hsa_wait_state_t,
    satisfying_value: *mut hsa_signal_value_t,
) -> u32;
/// Signature of `hsa_amd_image_get_info_max_dim`.
pub type hsa_amd_image_get_info_max_dim_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    attribute: hsa_agent_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_queue_cu_set_mask`.
pub type hsa_amd_queue_cu_set_mask_fn_t = unsafe extern "C" fn(
    queue: *const hsa_queue_t,
    num_cu_mask_count: u32,
    cu_mask: *const u32,
) -> hsa_status_t;
/// Signature of `hsa_amd_queue_cu_get_mask`.
pub type hsa_amd_queue_cu_get_mask_fn_t = unsafe extern "C" fn(
    queue: *const hsa_queue_t,
    num_cu_mask_count: u32,
    cu_mask: *mut u32,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_pool_get_info`.
pub type hsa_amd_memory_pool_get_info_fn_t = unsafe extern "C" fn(
    memory_pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_agent_iterate_memory_pools`.
pub type hsa_amd_agent_iterate_memory_pools_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    callback: Option<
        unsafe extern "C" fn(memory_pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_pool_allocate`.
pub type hsa_amd_memory_pool_allocate_fn_t = unsafe extern "C" fn(
    memory_pool: hsa_amd_memory_pool_t,
    size: usize,
    flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_pool_free`.
pub type hsa_amd_memory_pool_free_fn_t = unsafe extern "C" fn(ptr: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_amd_memory_async_copy`.
pub type hsa_amd_memory_async_copy_fn_t = unsafe extern "C" fn(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_async_copy_rect`.
pub type hsa_amd_memory_async_copy_rect_fn_t = unsafe extern "C" fn(
    dst: *const hsa_pitched_ptr_t,
    dst_offset: *const hsa_dim3_t,
    src: *const hsa_pitched_ptr_t,
    src_offset: *const hsa_dim3_t,
    range: *const hsa_dim3_t,
    copy_agent: hsa_agent_t,
    dir: hsa_amd_copy_direction_t,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_agent_memory_pool_get_info`.
pub type hsa_amd_agent_memory_pool_get_info_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    memory_pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_agent_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_agents_allow_access`.
pub type hsa_amd_agents_allow_access_fn_t = unsafe extern "C" fn(
    num_agents: u32,
    agents: *const hsa_agent_t,
    flags: *const u32,
    ptr: *const c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_pool_can_migrate`.
pub type hsa_amd_memory_pool_can_migrate_fn_t = unsafe extern "C" fn(
    src_memory_pool: hsa_amd_memory_pool_t,
    dst_memory_pool: hsa_amd_memory_pool_t,
    result: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_migrate`.
pub type hsa_amd_memory_migrate_fn_t = unsafe extern "C" fn(
    ptr: *const c_void,
    memory_pool: hsa_amd_memory_pool_t,
    flags: u32,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_lock`.
pub type hsa_amd_memory_lock_fn_t = unsafe extern "C" fn(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: c_int,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_lock_to_pool`.
pub type hsa_amd_memory_lock_to_pool_fn_t = unsafe extern "C" fn(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: c_int,
    pool: hsa_amd_memory_pool_t,
    flags: u32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_unlock`.
pub type hsa_amd_memory_unlock_fn_t = unsafe extern "C" fn(host_ptr: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_amd_memory_fill`.
pub type hsa_amd_memory_fill_fn_t =
    unsafe extern "C" fn(ptr: *mut c_void, value: u32, count: usize) -> hsa_status_t;
/// Signature of `hsa_amd_interop_map_buffer`.
pub type hsa_amd_interop_map_buffer_fn_t = unsafe extern "C" fn(
    num_agents: u32,
    agents: *mut hsa_agent_t,
    interop_handle: c_int,
    flags: u32,
    size: *mut usize,
    ptr: *mut *mut c_void,
    metadata_size: *mut usize,
    metadata: *mut *const c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_interop_unmap_buffer`.
pub type hsa_amd_interop_unmap_buffer_fn_t = unsafe extern "C" fn(ptr: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_amd_image_create`.
pub type hsa_amd_image_create_fn_t = unsafe extern "C" fn(
    agent: hsa_agent_t,
    image_descriptor: *const hsa_ext_image_descriptor_t,
    image_layout: *const hsa_amd_image_descriptor_t,
    image_data: *const c_void,
    access_permission: hsa_access_permission_t,
    image: *mut hsa_ext_image_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_pointer_info`.
pub type hsa_amd_pointer_info_fn_t = unsafe extern "C" fn(
    ptr: *const c_void,
    info: *mut hsa_amd_pointer_info_t,
    alloc: Option<unsafe extern "C" fn(arg0: usize) -> *mut c_void>,
    num_agents_accessible: *mut u32,
    accessible: *mut *mut hsa_agent_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_pointer_info_set_userdata`.
pub type hsa_amd_pointer_info_set_userdata_fn_t =
    unsafe extern "C" fn(ptr: *const c_void, userdata: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_amd_ipc_memory_create`.
pub type hsa_amd_ipc_memory_create_fn_t = unsafe extern "C" fn(
    ptr: *mut c_void,
    len: usize,
    handle: *mut hsa_amd_ipc_memory_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_ipc_memory_attach`.
pub type hsa_amd_ipc_memory_attach_fn_t = unsafe extern "C" fn(
    handle: *const hsa_amd_ipc_memory_t,
    len: usize,
    num_agents: u32,
    mapping_agents: *const hsa_agent_t,
    mapped_ptr: *mut *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_ipc_memory_detach`.
pub type hsa_amd_ipc_memory_detach_fn_t =
    unsafe extern "C" fn(mapped_ptr: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_amd_ipc_signal_create`.
pub type hsa_amd_ipc_signal_create_fn_t =
    unsafe extern "C" fn(signal: hsa_signal_t, handle: *mut hsa_amd_ipc_signal_t) -> hsa_status_t;
/// Signature of `hsa_amd_ipc_signal_attach`.
pub type hsa_amd_ipc_signal_attach_fn_t = unsafe extern "C" fn(
    handle: *const hsa_amd_ipc_signal_t,
    signal: *mut hsa_signal_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_register_system_event_handler`.
pub type hsa_amd_register_system_event_handler_fn_t = unsafe extern "C" fn(
    callback: hsa_amd_system_event_callback_t,
    data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_queue_set_priority`.
pub type hsa_amd_queue_set_priority_fn_t = unsafe extern "C" fn(
    queue: *mut hsa_queue_t,
    priority: hsa_amd_queue_priority_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_register_deallocation_callback`.
pub type hsa_amd_register_deallocation_callback_fn_t = unsafe extern "C" fn(
    ptr: *mut c_void,
    callback: hsa_amd_deallocation_callback_t,
    user_data: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_deregister_deallocation_callback`.
pub type hsa_amd_deregister_deallocation_callback_fn_t = unsafe extern "C" fn(
    ptr: *mut c_void,
    callback: hsa_amd_deallocation_callback_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_svm_attributes_set`.
pub type hsa_amd_svm_attributes_set_fn_t = unsafe extern "C" fn(
    ptr: *mut c_void,
    size: usize,
    attribute_list: *mut hsa_amd_svm_attribute_pair_t,
    attribute_count: usize,
) -> hsa_status_t;
/// Signature of `hsa_amd_svm_attributes_get`.
pub type hsa_amd_svm_attributes_get_fn_t = unsafe extern "C" fn(
    ptr: *mut c_void,
    size: usize,
    attribute_list: *mut hsa_amd_svm_attribute_pair_t,
    attribute_count: usize,
) -> hsa_status_t;
/// Signature of `hsa_amd_svm_prefetch_async`.
pub type hsa_amd_svm_prefetch_async_fn_t = unsafe extern "C" fn(
    ptr: *mut c_void,
    size: usize,
    agent: hsa_agent_t,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_loader_query_host_address`.
pub type hsa_ven_amd_loader_query_host_address_fn_t = unsafe extern "C" fn(
    device_address: *const c_void,
    host_address: *mut *const c_void,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_loader_query_segment_descriptors`.
pub type hsa_ven_amd_loader_query_segment_descriptors_fn_t = unsafe extern "C" fn(
    segment_descriptors: *mut hsa_ven_amd_loader_segment_descriptor_t,
    num_segment_descriptors: *mut usize,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_loader_query_executable`.
pub type hsa_ven_amd_loader_query_executable_fn_t = unsafe extern "C" fn(
    device_address: *const c_void,
    executable: *mut hsa_executable_t,
) -> hsa_status_t;
/// Signature of `hsa_ven_amd_loader_executable_iterate_loaded_code_objects`.
pub type hsa_ven_amd_loader_executable_iterate_loaded_code_objects_fn_t =
    unsafe extern "C" fn(
        executable: hsa_executable_t,
        callback: Option<
            unsafe extern "C" fn(
                executable: hsa_executable_t,
                loaded_code_object: hsa_loaded_code_object_t,
                data: *mut c_void,
            ) -> hsa_status_t,
        >,
        data: *mut c_void,
    ) -> hsa_status_t;
/// Signature of `hsa_ven_amd_loader_loaded_code_object_get_info`.
pub type hsa_ven_amd_loader_loaded_code_object_get_info_fn_t = unsafe extern "C" fn(
    loaded_code_object: hsa_loaded_code_object_t,
    attribute: hsa_ven_amd_loader_loaded_code_object_info_t,
    value: *mut c_void,
)
    -> hsa_status_t;
/// Signature of `hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size`.
pub type hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size_fn_t =
    unsafe extern "C" fn(
        file: hsa_file_t,
        offset: usize,
        size: usize,
        code_object_reader: *mut hsa_code_object_reader_t,
    ) -> hsa_status_t;
/// Signature of `hsa_ven_amd_loader_iterate_executables`.
pub type hsa_ven_amd_loader_iterate_executables_fn_t = unsafe extern "C" fn(
    callback: Option<
        unsafe extern "C" fn(executable: hsa_executable_t, data: *mut c_void) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;

// ---- ROCm 5.6+/6.x functions (not in the 5.2 headers) ----

/// Signature of `hsa_amd_memory_async_copy_on_engine` (ROCm 5.6+).
pub type hsa_amd_memory_async_copy_on_engine_fn_t = unsafe extern "C" fn(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
    engine_id: hsa_amd_sdma_engine_id_t,
    force_copy_on_sdma: bool,
) -> hsa_status_t;
/// Signature of `hsa_amd_memory_copy_engine_status` (ROCm 5.6+).
pub type hsa_amd_memory_copy_engine_status_fn_t = unsafe extern "C" fn(
    dst_agent: hsa_agent_t,
    src_agent: hsa_agent_t,
    engine_ids_mask: *mut u32,
) -> hsa_status_t;
/// Signature of `hsa_amd_spm_acquire` (ROCm 5.5+).
pub type hsa_amd_spm_acquire_fn_t =
    unsafe extern "C" fn(preferred_agent: hsa_agent_t) -> hsa_status_t;
/// Signature of `hsa_amd_spm_release` (ROCm 5.5+).
pub type hsa_amd_spm_release_fn_t =
    unsafe extern "C" fn(preferred_agent: hsa_agent_t) -> hsa_status_t;
/// Signature of `hsa_amd_spm_set_dest_buffer` (ROCm 5.5+).
pub type hsa_amd_spm_set_dest_buffer_fn_t = unsafe extern "C" fn(
    preferred_agent: hsa_agent_t,
    size_in_bytes: usize,
    timeout: *mut u32,
    size_copied: *mut u32,
    dest: *mut c_void,
    is_data_loss: *mut bool,
) -> hsa_status_t;
/// Signature of `hsa_amd_portable_export_dmabuf` (ROCm 6.x).
pub type hsa_amd_portable_export_dmabuf_fn_t = unsafe extern "C" fn(
    ptr: *const c_void,
    size: usize,
    dmabuf: *mut c_int,
    offset: *mut u64,
) -> hsa_status_t;
/// Signature of `hsa_amd_portable_close_dmabuf` (ROCm 6.x).
pub type hsa_amd_portable_close_dmabuf_fn_t = unsafe extern "C" fn(dmabuf: c_int) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_address_reserve` (ROCm 6.x).
pub type hsa_amd_vmem_address_reserve_fn_t = unsafe extern "C" fn(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    flags: u64,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_address_free` (ROCm 6.x).
pub type hsa_amd_vmem_address_free_fn_t =
    unsafe extern "C" fn(va: *mut c_void, size: usize) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_handle_create` (ROCm 6.x).
pub type hsa_amd_vmem_handle_create_fn_t = unsafe extern "C" fn(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    type_: hsa_amd_memory_type_t,
    flags: u64,
    memory_handle: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_handle_release` (ROCm 6.x).
pub type hsa_amd_vmem_handle_release_fn_t =
    unsafe extern "C" fn(memory_handle: hsa_amd_vmem_alloc_handle_t) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_map` (ROCm 6.x).
pub type hsa_amd_vmem_map_fn_t = unsafe extern "C" fn(
    va: *mut c_void,
    size: usize,
    in_offset: usize,
    memory_handle: hsa_amd_vmem_alloc_handle_t,
    flags: u64,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_unmap` (ROCm 6.x).
pub type hsa_amd_vmem_unmap_fn_t =
    unsafe extern "C" fn(va: *mut c_void, size: usize) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_set_access` (ROCm 6.x).
pub type hsa_amd_vmem_set_access_fn_t = unsafe extern "C" fn(
    va: *mut c_void,
    size: usize,
    desc: *const hsa_amd_memory_access_desc_t,
    desc_cnt: usize,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_get_access` (ROCm 6.x).
pub type hsa_amd_vmem_get_access_fn_t = unsafe extern "C" fn(
    va: *mut c_void,
    perms: *mut hsa_access_permission_t,
    agent_handle: hsa_agent_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_export_shareable_handle` (ROCm 6.x).
pub type hsa_amd_vmem_export_shareable_handle_fn_t = unsafe extern "C" fn(
    dmabuf_fd: *mut c_int,
    handle: hsa_amd_vmem_alloc_handle_t,
    flags: u64,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_import_shareable_handle` (ROCm 6.x).
pub type hsa_amd_vmem_import_shareable_handle_fn_t = unsafe extern "C" fn(
    dmabuf_fd: c_int,
    handle: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_retain_alloc_handle` (ROCm 6.x).
pub type hsa_amd_vmem_retain_alloc_handle_fn_t = unsafe extern "C" fn(
    memory_handle: *mut hsa_amd_vmem_alloc_handle_t,
    addr: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_get_alloc_properties_from_handle` (ROCm 6.x).
pub type hsa_amd_vmem_get_alloc_properties_from_handle_fn_t = unsafe extern "C" fn(
    memory_handle: hsa_amd_vmem_alloc_handle_t,
    pool: *mut hsa_amd_memory_pool_t,
    type_: *mut hsa_amd_memory_type_t,
) -> hsa_status_t;
/// Signature of `hsa_amd_agent_set_async_scratch_limit` (ROCm 6.1+).
pub type hsa_amd_agent_set_async_scratch_limit_fn_t =
    unsafe extern "C" fn(agent: hsa_agent_t, threshold: usize) -> hsa_status_t;
/// Signature of `hsa_amd_queue_get_info` (ROCm 6.2+).
pub type hsa_amd_queue_get_info_fn_t = unsafe extern "C" fn(
    queue: *mut hsa_queue_t,
    attribute: hsa_queue_info_attribute_t,
    value: *mut c_void,
) -> hsa_status_t;
/// Signature of `hsa_amd_vmem_address_reserve_align` (ROCm 6.2+).
pub type hsa_amd_vmem_address_reserve_align_fn_t = unsafe extern "C" fn(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    alignment: u64,
    flags: u64,
) -> hsa_status_t;
/// Signature of `hsa_amd_enable_logging` (ROCm 6.3+).
pub type hsa_amd_enable_logging_fn_t =
    unsafe extern "C" fn(flags: *mut u8, file: *mut c_void) -> hsa_status_t;
/// Signature of `hsa_amd_signal_wait_all` (ROCm 6.3+).
pub type hsa_amd_signal_wait_all_fn_t = unsafe extern "C" fn(
    signal_count: u32,
    signals: *mut hsa_signal_t,
    conds: *mut hsa_signal_condition_t,
    values: *mut hsa_signal_value_t,
    timeout_hint: u64,
    wait_hint: hsa_wait_state_t,
    satisfying_values: *mut hsa_signal_value_t,
) -> u32;
/// Signature of `hsa_amd_memory_get_preferred_copy_engine` (ROCm 6.3+).
pub type hsa_amd_memory_get_preferred_copy_engine_fn_t = unsafe extern "C" fn(
    dst_agent: hsa_agent_t,
    src_agent: hsa_agent_t,
    recommended_ids_mask: *mut u32,
) -> hsa_status_t;
/// Signature of `hsa_amd_portable_export_dmabuf_v2` (2025).
pub type hsa_amd_portable_export_dmabuf_v2_fn_t = unsafe extern "C" fn(
    ptr: *const c_void,
    size: usize,
    dmabuf: *mut c_int,
    offset: *mut u64,
    flags: u64,
) -> hsa_status_t;
