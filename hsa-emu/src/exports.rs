//! The exported C API: every function of the core and AMD extension tables, exported under the
//! `ROCR_1` version node, dispatching through the runtime's live `HsaApiTable` so that tools
//! which patch the table intercept every call (as with ROCr).
//!
//! The list mirrors `rocprof-replay-sys`'s tables; the intercept functions
//! (`hsa_amd_queue_intercept_*`, `hsa_amd_runtime_queue_create_register`) are table-only, as in
//! ROCr, and are not exported. Like ROCr it also exports the image and finalizer extension
//! functions (through their tables, whose slots are stubs here), `hsa_amd_image_get_info_max_dim`
//! and the pre-`sc` names of the memory-ordered functions (`hsa_signal_load_acquire`, ...): HIP
//! imports `hsa_ext_image_*`, and with immediate binding a missing import stops it loading.

use std::ffi::{c_char, c_int, c_void};

use rocprof_replay_sys::*;

use crate::api;

/// Value an export returns when its slot cannot be reached (a layout without the function).
trait Unreachable {
    fn unreachable() -> Self;
}
impl Unreachable for u32 {
    fn unreachable() -> Self {
        HSA_STATUS_ERROR
    }
}
impl Unreachable for i64 {
    fn unreachable() -> Self {
        0
    }
}
impl Unreachable for u64 {
    fn unreachable() -> Self {
        0
    }
}
impl Unreachable for () {
    fn unreachable() -> Self {}
}

/// Binds an exported function to the `ROCR_1` version node (not in unit-test binaries, which
/// are executables without the version script).
macro_rules! rocr_1 {
    ($name:ident) => {
        #[cfg(not(test))]
        std::arch::global_asm!(concat!(
            ".symver ",
            stringify!($name),
            ", ",
            stringify!($name),
            "@@ROCR_1"
        ));
    };
}

macro_rules! export_core {
    ($($name:ident => $field:ident ($($arg:ident : $ty:ty),*) -> $ret:ty;)*) => {$(
        #[doc = concat!("Exported `", stringify!($name), "`: calls the live core table's slot.")]
        ///
        /// # Safety
        /// The C API contract of the function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the live core table is valid for the whole process.
            match unsafe { (*api::core()).$field } {
                // SAFETY: the caller upholds the function's C contract.
                Some(f) => unsafe { f($($arg),*) },
                None => <$ret as Unreachable>::unreachable(),
            }
        }
        rocr_1!($name);
    )*};
}

macro_rules! export_amd {
    ($($name:ident => $slot:ident ($($arg:ident : $ty:ty),*) -> $ret:ty;)*) => {$(
        #[doc = concat!("Exported `", stringify!($name), "`: calls the live AMD extension table's slot.")]
        ///
        /// # Safety
        /// The C API contract of the function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            match api::amd_slot(slots::amd_ext::$slot) {
                // SAFETY: the caller upholds the function's C contract.
                Some(f) => unsafe { f($($arg),*) },
                None => <$ret as Unreachable>::unreachable(),
            }
        }
        rocr_1!($name);
    )*};
}

export_core! {
    hsa_init => hsa_init_fn () -> hsa_status_t;
    hsa_shut_down => hsa_shut_down_fn () -> hsa_status_t;
    hsa_system_get_info => hsa_system_get_info_fn (attribute: hsa_system_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_system_extension_supported => hsa_system_extension_supported_fn (extension: u16, version_major: u16, version_minor: u16, result: *mut bool) -> hsa_status_t;
    hsa_system_get_extension_table => hsa_system_get_extension_table_fn (extension: u16, version_major: u16, version_minor: u16, table: *mut c_void) -> hsa_status_t;
    hsa_iterate_agents => hsa_iterate_agents_fn (callback: Option<unsafe extern "C" fn(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t>, data: *mut c_void) -> hsa_status_t;
    hsa_agent_get_info => hsa_agent_get_info_fn (agent: hsa_agent_t, attribute: hsa_agent_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_queue_create => hsa_queue_create_fn (agent: hsa_agent_t, size: u32, type_: hsa_queue_type32_t, callback: Option< unsafe extern "C" fn(status: hsa_status_t, source: *mut hsa_queue_t, data: *mut c_void), >, data: *mut c_void, private_segment_size: u32, group_segment_size: u32, queue: *mut *mut hsa_queue_t) -> hsa_status_t;
    hsa_soft_queue_create => hsa_soft_queue_create_fn (region: hsa_region_t, size: u32, type_: hsa_queue_type32_t, features: u32, doorbell_signal: hsa_signal_t, queue: *mut *mut hsa_queue_t) -> hsa_status_t;
    hsa_queue_destroy => hsa_queue_destroy_fn (queue: *mut hsa_queue_t) -> hsa_status_t;
    hsa_queue_inactivate => hsa_queue_inactivate_fn (queue: *mut hsa_queue_t) -> hsa_status_t;
    hsa_queue_load_read_index_scacquire => hsa_queue_load_read_index_scacquire_fn (queue: *const hsa_queue_t) -> u64;
    hsa_queue_load_read_index_relaxed => hsa_queue_load_read_index_relaxed_fn (queue: *const hsa_queue_t) -> u64;
    hsa_queue_load_write_index_scacquire => hsa_queue_load_write_index_scacquire_fn (queue: *const hsa_queue_t) -> u64;
    hsa_queue_load_write_index_relaxed => hsa_queue_load_write_index_relaxed_fn (queue: *const hsa_queue_t) -> u64;
    hsa_queue_store_write_index_relaxed => hsa_queue_store_write_index_relaxed_fn (queue: *const hsa_queue_t, value: u64) -> ();
    hsa_queue_store_write_index_screlease => hsa_queue_store_write_index_screlease_fn (queue: *const hsa_queue_t, value: u64) -> ();
    hsa_queue_cas_write_index_scacq_screl => hsa_queue_cas_write_index_scacq_screl_fn (queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
    hsa_queue_cas_write_index_scacquire => hsa_queue_cas_write_index_scacquire_fn (queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
    hsa_queue_cas_write_index_relaxed => hsa_queue_cas_write_index_relaxed_fn (queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
    hsa_queue_cas_write_index_screlease => hsa_queue_cas_write_index_screlease_fn (queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
    hsa_queue_add_write_index_scacq_screl => hsa_queue_add_write_index_scacq_screl_fn (queue: *const hsa_queue_t, value: u64) -> u64;
    hsa_queue_add_write_index_scacquire => hsa_queue_add_write_index_scacquire_fn (queue: *const hsa_queue_t, value: u64) -> u64;
    hsa_queue_add_write_index_relaxed => hsa_queue_add_write_index_relaxed_fn (queue: *const hsa_queue_t, value: u64) -> u64;
    hsa_queue_add_write_index_screlease => hsa_queue_add_write_index_screlease_fn (queue: *const hsa_queue_t, value: u64) -> u64;
    hsa_queue_store_read_index_relaxed => hsa_queue_store_read_index_relaxed_fn (queue: *const hsa_queue_t, value: u64) -> ();
    hsa_queue_store_read_index_screlease => hsa_queue_store_read_index_screlease_fn (queue: *const hsa_queue_t, value: u64) -> ();
    hsa_agent_iterate_regions => hsa_agent_iterate_regions_fn (agent: hsa_agent_t, callback: Option<unsafe extern "C" fn(region: hsa_region_t, data: *mut c_void) -> hsa_status_t>, data: *mut c_void) -> hsa_status_t;
    hsa_region_get_info => hsa_region_get_info_fn (region: hsa_region_t, attribute: hsa_region_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_agent_get_exception_policies => hsa_agent_get_exception_policies_fn (agent: hsa_agent_t, profile: hsa_profile_t, mask: *mut u16) -> hsa_status_t;
    hsa_agent_extension_supported => hsa_agent_extension_supported_fn (extension: u16, agent: hsa_agent_t, version_major: u16, version_minor: u16, result: *mut bool) -> hsa_status_t;
    hsa_memory_register => hsa_memory_register_fn (ptr: *mut c_void, size: usize) -> hsa_status_t;
    hsa_memory_deregister => hsa_memory_deregister_fn (ptr: *mut c_void, size: usize) -> hsa_status_t;
    hsa_memory_allocate => hsa_memory_allocate_fn (region: hsa_region_t, size: usize, ptr: *mut *mut c_void) -> hsa_status_t;
    hsa_memory_free => hsa_memory_free_fn (ptr: *mut c_void) -> hsa_status_t;
    hsa_memory_copy => hsa_memory_copy_fn (dst: *mut c_void, src: *const c_void, size: usize) -> hsa_status_t;
    hsa_memory_assign_agent => hsa_memory_assign_agent_fn (ptr: *mut c_void, agent: hsa_agent_t, access: hsa_access_permission_t) -> hsa_status_t;
    hsa_signal_create => hsa_signal_create_fn (initial_value: hsa_signal_value_t, num_consumers: u32, consumers: *const hsa_agent_t, signal: *mut hsa_signal_t) -> hsa_status_t;
    hsa_signal_destroy => hsa_signal_destroy_fn (signal: hsa_signal_t) -> hsa_status_t;
    hsa_signal_load_relaxed => hsa_signal_load_relaxed_fn (signal: hsa_signal_t) -> hsa_signal_value_t;
    hsa_signal_load_scacquire => hsa_signal_load_scacquire_fn (signal: hsa_signal_t) -> hsa_signal_value_t;
    hsa_signal_store_relaxed => hsa_signal_store_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_store_screlease => hsa_signal_store_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_wait_relaxed => hsa_signal_wait_relaxed_fn (signal: hsa_signal_t, condition: hsa_signal_condition_t, compare_value: hsa_signal_value_t, timeout_hint: u64, wait_state_hint: hsa_wait_state_t) -> hsa_signal_value_t;
    hsa_signal_wait_scacquire => hsa_signal_wait_scacquire_fn (signal: hsa_signal_t, condition: hsa_signal_condition_t, compare_value: hsa_signal_value_t, timeout_hint: u64, wait_state_hint: hsa_wait_state_t) -> hsa_signal_value_t;
    hsa_signal_and_relaxed => hsa_signal_and_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_and_scacquire => hsa_signal_and_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_and_screlease => hsa_signal_and_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_and_scacq_screl => hsa_signal_and_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_or_relaxed => hsa_signal_or_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_or_scacquire => hsa_signal_or_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_or_screlease => hsa_signal_or_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_or_scacq_screl => hsa_signal_or_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_xor_relaxed => hsa_signal_xor_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_xor_scacquire => hsa_signal_xor_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_xor_screlease => hsa_signal_xor_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_xor_scacq_screl => hsa_signal_xor_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_exchange_relaxed => hsa_signal_exchange_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_exchange_scacquire => hsa_signal_exchange_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_exchange_screlease => hsa_signal_exchange_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_exchange_scacq_screl => hsa_signal_exchange_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_add_relaxed => hsa_signal_add_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_add_scacquire => hsa_signal_add_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_add_screlease => hsa_signal_add_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_add_scacq_screl => hsa_signal_add_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_subtract_relaxed => hsa_signal_subtract_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_subtract_scacquire => hsa_signal_subtract_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_subtract_screlease => hsa_signal_subtract_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_subtract_scacq_screl => hsa_signal_subtract_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_cas_relaxed => hsa_signal_cas_relaxed_fn (signal: hsa_signal_t, expected: hsa_signal_value_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_cas_scacquire => hsa_signal_cas_scacquire_fn (signal: hsa_signal_t, expected: hsa_signal_value_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_cas_screlease => hsa_signal_cas_screlease_fn (signal: hsa_signal_t, expected: hsa_signal_value_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_cas_scacq_screl => hsa_signal_cas_scacq_screl_fn (signal: hsa_signal_t, expected: hsa_signal_value_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_isa_from_name => hsa_isa_from_name_fn (name: *const c_char, isa: *mut hsa_isa_t) -> hsa_status_t;
    hsa_isa_get_info => hsa_isa_get_info_fn (isa: hsa_isa_t, attribute: hsa_isa_info_t, index: u32, value: *mut c_void) -> hsa_status_t;
    hsa_isa_compatible => hsa_isa_compatible_fn (code_object_isa: hsa_isa_t, agent_isa: hsa_isa_t, result: *mut bool) -> hsa_status_t;
    hsa_code_object_serialize => hsa_code_object_serialize_fn (code_object: hsa_code_object_t, alloc_callback: Option< unsafe extern "C" fn(size: usize, data: hsa_callback_data_t, address: *mut *mut c_void) -> hsa_status_t, >, callback_data: hsa_callback_data_t, options: *const c_char, serialized_code_object: *mut *mut c_void, serialized_code_object_size: *mut usize) -> hsa_status_t;
    hsa_code_object_deserialize => hsa_code_object_deserialize_fn (serialized_code_object: *mut c_void, serialized_code_object_size: usize, options: *const c_char, code_object: *mut hsa_code_object_t) -> hsa_status_t;
    hsa_code_object_destroy => hsa_code_object_destroy_fn (code_object: hsa_code_object_t) -> hsa_status_t;
    hsa_code_object_get_info => hsa_code_object_get_info_fn (code_object: hsa_code_object_t, attribute: hsa_code_object_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_code_object_get_symbol => hsa_code_object_get_symbol_fn (code_object: hsa_code_object_t, symbol_name: *const c_char, symbol: *mut hsa_code_symbol_t) -> hsa_status_t;
    hsa_code_symbol_get_info => hsa_code_symbol_get_info_fn (code_symbol: hsa_code_symbol_t, attribute: hsa_code_symbol_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_code_object_iterate_symbols => hsa_code_object_iterate_symbols_fn (code_object: hsa_code_object_t, callback: Option< unsafe extern "C" fn(code_object: hsa_code_object_t, symbol: hsa_code_symbol_t, data: *mut c_void) -> hsa_status_t, >, data: *mut c_void) -> hsa_status_t;
    hsa_executable_create => hsa_executable_create_fn (profile: hsa_profile_t, executable_state: hsa_executable_state_t, options: *const c_char, executable: *mut hsa_executable_t) -> hsa_status_t;
    hsa_executable_destroy => hsa_executable_destroy_fn (executable: hsa_executable_t) -> hsa_status_t;
    hsa_executable_load_code_object => hsa_executable_load_code_object_fn (executable: hsa_executable_t, agent: hsa_agent_t, code_object: hsa_code_object_t, options: *const c_char) -> hsa_status_t;
    hsa_executable_freeze => hsa_executable_freeze_fn (executable: hsa_executable_t, options: *const c_char) -> hsa_status_t;
    hsa_executable_get_info => hsa_executable_get_info_fn (executable: hsa_executable_t, attribute: hsa_executable_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_executable_global_variable_define => hsa_executable_global_variable_define_fn (executable: hsa_executable_t, variable_name: *const c_char, address: *mut c_void) -> hsa_status_t;
    hsa_executable_agent_global_variable_define => hsa_executable_agent_global_variable_define_fn (executable: hsa_executable_t, agent: hsa_agent_t, variable_name: *const c_char, address: *mut c_void) -> hsa_status_t;
    hsa_executable_readonly_variable_define => hsa_executable_readonly_variable_define_fn (executable: hsa_executable_t, agent: hsa_agent_t, variable_name: *const c_char, address: *mut c_void) -> hsa_status_t;
    hsa_executable_validate => hsa_executable_validate_fn (executable: hsa_executable_t, result: *mut u32) -> hsa_status_t;
    hsa_executable_get_symbol => hsa_executable_get_symbol_fn (executable: hsa_executable_t, module_name: *const c_char, symbol_name: *const c_char, agent: hsa_agent_t, call_convention: i32, symbol: *mut hsa_executable_symbol_t) -> hsa_status_t;
    hsa_executable_symbol_get_info => hsa_executable_symbol_get_info_fn (executable_symbol: hsa_executable_symbol_t, attribute: hsa_executable_symbol_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_executable_iterate_symbols => hsa_executable_iterate_symbols_fn (executable: hsa_executable_t, callback: Option< unsafe extern "C" fn(exec: hsa_executable_t, symbol: hsa_executable_symbol_t, data: *mut c_void) -> hsa_status_t, >, data: *mut c_void) -> hsa_status_t;
    hsa_status_string => hsa_status_string_fn (status: hsa_status_t, status_string: *mut *const c_char) -> hsa_status_t;
    hsa_extension_get_name => hsa_extension_get_name_fn (extension: u16, name: *mut *const c_char) -> hsa_status_t;
    hsa_system_major_extension_supported => hsa_system_major_extension_supported_fn (extension: u16, version_major: u16, version_minor: *mut u16, result: *mut bool) -> hsa_status_t;
    hsa_system_get_major_extension_table => hsa_system_get_major_extension_table_fn (extension: u16, version_major: u16, table_length: usize, table: *mut c_void) -> hsa_status_t;
    hsa_agent_major_extension_supported => hsa_agent_major_extension_supported_fn (extension: u16, agent: hsa_agent_t, version_major: u16, version_minor: *mut u16, result: *mut bool) -> hsa_status_t;
    hsa_cache_get_info => hsa_cache_get_info_fn (cache: hsa_cache_t, attribute: hsa_cache_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_agent_iterate_caches => hsa_agent_iterate_caches_fn (agent: hsa_agent_t, callback: Option<unsafe extern "C" fn(cache: hsa_cache_t, data: *mut c_void) -> hsa_status_t>, data: *mut c_void) -> hsa_status_t;
    hsa_signal_silent_store_relaxed => hsa_signal_silent_store_relaxed_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_silent_store_screlease => hsa_signal_silent_store_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_group_create => hsa_signal_group_create_fn (num_signals: u32, signals: *const hsa_signal_t, num_consumers: u32, consumers: *const hsa_agent_t, signal_group: *mut hsa_signal_group_t) -> hsa_status_t;
    hsa_signal_group_destroy => hsa_signal_group_destroy_fn (signal_group: hsa_signal_group_t) -> hsa_status_t;
    hsa_signal_group_wait_any_scacquire => hsa_signal_group_wait_any_scacquire_fn (signal_group: hsa_signal_group_t, conditions: *const hsa_signal_condition_t, compare_values: *const hsa_signal_value_t, wait_state_hint: hsa_wait_state_t, signal: *mut hsa_signal_t, value: *mut hsa_signal_value_t) -> hsa_status_t;
    hsa_signal_group_wait_any_relaxed => hsa_signal_group_wait_any_relaxed_fn (signal_group: hsa_signal_group_t, conditions: *const hsa_signal_condition_t, compare_values: *const hsa_signal_value_t, wait_state_hint: hsa_wait_state_t, signal: *mut hsa_signal_t, value: *mut hsa_signal_value_t) -> hsa_status_t;
    hsa_agent_iterate_isas => hsa_agent_iterate_isas_fn (agent: hsa_agent_t, callback: Option<unsafe extern "C" fn(isa: hsa_isa_t, data: *mut c_void) -> hsa_status_t>, data: *mut c_void) -> hsa_status_t;
    hsa_isa_get_info_alt => hsa_isa_get_info_alt_fn (isa: hsa_isa_t, attribute: hsa_isa_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_isa_get_exception_policies => hsa_isa_get_exception_policies_fn (isa: hsa_isa_t, profile: hsa_profile_t, mask: *mut u16) -> hsa_status_t;
    hsa_isa_get_round_method => hsa_isa_get_round_method_fn (isa: hsa_isa_t, fp_type: hsa_fp_type_t, flush_mode: hsa_flush_mode_t, round_method: *mut hsa_round_method_t) -> hsa_status_t;
    hsa_wavefront_get_info => hsa_wavefront_get_info_fn (wavefront: hsa_wavefront_t, attribute: hsa_wavefront_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_isa_iterate_wavefronts => hsa_isa_iterate_wavefronts_fn (isa: hsa_isa_t, callback: Option< unsafe extern "C" fn(wavefront: hsa_wavefront_t, data: *mut c_void) -> hsa_status_t, >, data: *mut c_void) -> hsa_status_t;
    hsa_code_object_get_symbol_from_name => hsa_code_object_get_symbol_from_name_fn (code_object: hsa_code_object_t, module_name: *const c_char, symbol_name: *const c_char, symbol: *mut hsa_code_symbol_t) -> hsa_status_t;
    hsa_code_object_reader_create_from_file => hsa_code_object_reader_create_from_file_fn (file: hsa_file_t, code_object_reader: *mut hsa_code_object_reader_t) -> hsa_status_t;
    hsa_code_object_reader_create_from_memory => hsa_code_object_reader_create_from_memory_fn (code_object: *const c_void, size: usize, code_object_reader: *mut hsa_code_object_reader_t) -> hsa_status_t;
    hsa_code_object_reader_destroy => hsa_code_object_reader_destroy_fn (code_object_reader: hsa_code_object_reader_t) -> hsa_status_t;
    hsa_executable_create_alt => hsa_executable_create_alt_fn (profile: hsa_profile_t, default_float_rounding_mode: hsa_default_float_rounding_mode_t, options: *const c_char, executable: *mut hsa_executable_t) -> hsa_status_t;
    hsa_executable_load_program_code_object => hsa_executable_load_program_code_object_fn (executable: hsa_executable_t, code_object_reader: hsa_code_object_reader_t, options: *const c_char, loaded_code_object: *mut hsa_loaded_code_object_t) -> hsa_status_t;
    hsa_executable_load_agent_code_object => hsa_executable_load_agent_code_object_fn (executable: hsa_executable_t, agent: hsa_agent_t, code_object_reader: hsa_code_object_reader_t, options: *const c_char, loaded_code_object: *mut hsa_loaded_code_object_t) -> hsa_status_t;
    hsa_executable_validate_alt => hsa_executable_validate_alt_fn (executable: hsa_executable_t, options: *const c_char, result: *mut u32) -> hsa_status_t;
    hsa_executable_get_symbol_by_name => hsa_executable_get_symbol_by_name_fn (executable: hsa_executable_t, symbol_name: *const c_char, agent: *const hsa_agent_t, symbol: *mut hsa_executable_symbol_t) -> hsa_status_t;
    hsa_executable_iterate_agent_symbols => hsa_executable_iterate_agent_symbols_fn (executable: hsa_executable_t, agent: hsa_agent_t, callback: Option< unsafe extern "C" fn(exec: hsa_executable_t, agent: hsa_agent_t, symbol: hsa_executable_symbol_t, data: *mut c_void) -> hsa_status_t, >, data: *mut c_void) -> hsa_status_t;
    hsa_executable_iterate_program_symbols => hsa_executable_iterate_program_symbols_fn (executable: hsa_executable_t, callback: Option< unsafe extern "C" fn(exec: hsa_executable_t, symbol: hsa_executable_symbol_t, data: *mut c_void) -> hsa_status_t, >, data: *mut c_void) -> hsa_status_t;
}

export_amd! {
    hsa_amd_coherency_get_type => COHERENCY_GET_TYPE (agent: hsa_agent_t, type_: *mut hsa_amd_coherency_type_t) -> hsa_status_t;
    hsa_amd_coherency_set_type => COHERENCY_SET_TYPE (agent: hsa_agent_t, type_: hsa_amd_coherency_type_t) -> hsa_status_t;
    hsa_amd_profiling_set_profiler_enabled => PROFILING_SET_PROFILER_ENABLED (queue: *mut hsa_queue_t, enable: c_int) -> hsa_status_t;
    hsa_amd_profiling_async_copy_enable => PROFILING_ASYNC_COPY_ENABLE (enable: bool) -> hsa_status_t;
    hsa_amd_profiling_get_dispatch_time => PROFILING_GET_DISPATCH_TIME (agent: hsa_agent_t, signal: hsa_signal_t, time: *mut hsa_amd_profiling_dispatch_time_t) -> hsa_status_t;
    hsa_amd_profiling_get_async_copy_time => PROFILING_GET_ASYNC_COPY_TIME (signal: hsa_signal_t, time: *mut hsa_amd_profiling_async_copy_time_t) -> hsa_status_t;
    hsa_amd_profiling_convert_tick_to_system_domain => PROFILING_CONVERT_TICK_TO_SYSTEM_DOMAIN (agent: hsa_agent_t, agent_tick: u64, system_tick: *mut u64) -> hsa_status_t;
    hsa_amd_signal_async_handler => SIGNAL_ASYNC_HANDLER (signal: hsa_signal_t, cond: hsa_signal_condition_t, value: hsa_signal_value_t, handler: hsa_amd_signal_handler, arg: *mut c_void) -> hsa_status_t;
    hsa_amd_async_function => ASYNC_FUNCTION (callback: Option<unsafe extern "C" fn(arg: *mut c_void)>, arg: *mut c_void) -> hsa_status_t;
    hsa_amd_signal_wait_any => SIGNAL_WAIT_ANY (signal_count: u32, signals: *mut hsa_signal_t, conds: *mut hsa_signal_condition_t, values: *mut hsa_signal_value_t, timeout_hint: u64, wait_hint: hsa_wait_state_t, satisfying_value: *mut hsa_signal_value_t) -> u32;
    hsa_amd_queue_cu_set_mask => QUEUE_CU_SET_MASK (queue: *const hsa_queue_t, num_cu_mask_count: u32, cu_mask: *const u32) -> hsa_status_t;
    hsa_amd_memory_pool_get_info => MEMORY_POOL_GET_INFO (memory_pool: hsa_amd_memory_pool_t, attribute: hsa_amd_memory_pool_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_amd_agent_iterate_memory_pools => AGENT_ITERATE_MEMORY_POOLS (agent: hsa_agent_t, callback: Option< unsafe extern "C" fn(memory_pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t, >, data: *mut c_void) -> hsa_status_t;
    hsa_amd_memory_pool_allocate => MEMORY_POOL_ALLOCATE (memory_pool: hsa_amd_memory_pool_t, size: usize, flags: u32, ptr: *mut *mut c_void) -> hsa_status_t;
    hsa_amd_memory_pool_free => MEMORY_POOL_FREE (ptr: *mut c_void) -> hsa_status_t;
    hsa_amd_memory_async_copy => MEMORY_ASYNC_COPY (dst: *mut c_void, dst_agent: hsa_agent_t, src: *const c_void, src_agent: hsa_agent_t, size: usize, num_dep_signals: u32, dep_signals: *const hsa_signal_t, completion_signal: hsa_signal_t) -> hsa_status_t;
    hsa_amd_memory_async_copy_on_engine => MEMORY_ASYNC_COPY_ON_ENGINE (dst: *mut c_void, dst_agent: hsa_agent_t, src: *const c_void, src_agent: hsa_agent_t, size: usize, num_dep_signals: u32, dep_signals: *const hsa_signal_t, completion_signal: hsa_signal_t, engine_id: hsa_amd_sdma_engine_id_t, force_copy_on_sdma: bool) -> hsa_status_t;
    hsa_amd_memory_copy_engine_status => MEMORY_COPY_ENGINE_STATUS (dst_agent: hsa_agent_t, src_agent: hsa_agent_t, engine_ids_mask: *mut u32) -> hsa_status_t;
    hsa_amd_agent_memory_pool_get_info => AGENT_MEMORY_POOL_GET_INFO (agent: hsa_agent_t, memory_pool: hsa_amd_memory_pool_t, attribute: hsa_amd_agent_memory_pool_info_t, value: *mut c_void) -> hsa_status_t;
    hsa_amd_agents_allow_access => AGENTS_ALLOW_ACCESS (num_agents: u32, agents: *const hsa_agent_t, flags: *const u32, ptr: *const c_void) -> hsa_status_t;
    hsa_amd_memory_pool_can_migrate => MEMORY_POOL_CAN_MIGRATE (src_memory_pool: hsa_amd_memory_pool_t, dst_memory_pool: hsa_amd_memory_pool_t, result: *mut bool) -> hsa_status_t;
    hsa_amd_memory_migrate => MEMORY_MIGRATE (ptr: *const c_void, memory_pool: hsa_amd_memory_pool_t, flags: u32) -> hsa_status_t;
    hsa_amd_memory_lock => MEMORY_LOCK (host_ptr: *mut c_void, size: usize, agents: *mut hsa_agent_t, num_agent: c_int, agent_ptr: *mut *mut c_void) -> hsa_status_t;
    hsa_amd_memory_unlock => MEMORY_UNLOCK (host_ptr: *mut c_void) -> hsa_status_t;
    hsa_amd_memory_fill => MEMORY_FILL (ptr: *mut c_void, value: u32, count: usize) -> hsa_status_t;
    hsa_amd_interop_map_buffer => INTEROP_MAP_BUFFER (num_agents: u32, agents: *mut hsa_agent_t, interop_handle: c_int, flags: u32, size: *mut usize, ptr: *mut *mut c_void, metadata_size: *mut usize, metadata: *mut *const c_void) -> hsa_status_t;
    hsa_amd_interop_unmap_buffer => INTEROP_UNMAP_BUFFER (ptr: *mut c_void) -> hsa_status_t;
    hsa_amd_image_create => IMAGE_CREATE (agent: hsa_agent_t, image_descriptor: *const hsa_ext_image_descriptor_t, image_layout: *const hsa_amd_image_descriptor_t, image_data: *const c_void, access_permission: hsa_access_permission_t, image: *mut hsa_ext_image_t) -> hsa_status_t;
    hsa_amd_pointer_info => POINTER_INFO (ptr: *const c_void, info: *mut hsa_amd_pointer_info_t, alloc: Option<unsafe extern "C" fn(arg0: usize) -> *mut c_void>, num_agents_accessible: *mut u32, accessible: *mut *mut hsa_agent_t) -> hsa_status_t;
    hsa_amd_pointer_info_set_userdata => POINTER_INFO_SET_USERDATA (ptr: *const c_void, userdata: *mut c_void) -> hsa_status_t;
    hsa_amd_ipc_memory_create => IPC_MEMORY_CREATE (ptr: *mut c_void, len: usize, handle: *mut hsa_amd_ipc_memory_t) -> hsa_status_t;
    hsa_amd_ipc_memory_attach => IPC_MEMORY_ATTACH (handle: *const hsa_amd_ipc_memory_t, len: usize, num_agents: u32, mapping_agents: *const hsa_agent_t, mapped_ptr: *mut *mut c_void) -> hsa_status_t;
    hsa_amd_ipc_memory_detach => IPC_MEMORY_DETACH (mapped_ptr: *mut c_void) -> hsa_status_t;
    hsa_amd_signal_create => SIGNAL_CREATE (initial_value: hsa_signal_value_t, num_consumers: u32, consumers: *const hsa_agent_t, attributes: u64, signal: *mut hsa_signal_t) -> hsa_status_t;
    hsa_amd_ipc_signal_create => IPC_SIGNAL_CREATE (signal: hsa_signal_t, handle: *mut hsa_amd_ipc_signal_t) -> hsa_status_t;
    hsa_amd_ipc_signal_attach => IPC_SIGNAL_ATTACH (handle: *const hsa_amd_ipc_signal_t, signal: *mut hsa_signal_t) -> hsa_status_t;
    hsa_amd_register_system_event_handler => REGISTER_SYSTEM_EVENT_HANDLER (callback: hsa_amd_system_event_callback_t, data: *mut c_void) -> hsa_status_t;
    hsa_amd_queue_set_priority => QUEUE_SET_PRIORITY (queue: *mut hsa_queue_t, priority: hsa_amd_queue_priority_t) -> hsa_status_t;
    hsa_amd_memory_async_copy_rect => MEMORY_ASYNC_COPY_RECT (dst: *const hsa_pitched_ptr_t, dst_offset: *const hsa_dim3_t, src: *const hsa_pitched_ptr_t, src_offset: *const hsa_dim3_t, range: *const hsa_dim3_t, copy_agent: hsa_agent_t, dir: hsa_amd_copy_direction_t, num_dep_signals: u32, dep_signals: *const hsa_signal_t, completion_signal: hsa_signal_t) -> hsa_status_t;
    hsa_amd_memory_lock_to_pool => MEMORY_LOCK_TO_POOL (host_ptr: *mut c_void, size: usize, agents: *mut hsa_agent_t, num_agent: c_int, pool: hsa_amd_memory_pool_t, flags: u32, agent_ptr: *mut *mut c_void) -> hsa_status_t;
    hsa_amd_register_deallocation_callback => REGISTER_DEALLOCATION_CALLBACK (ptr: *mut c_void, callback: hsa_amd_deallocation_callback_t, user_data: *mut c_void) -> hsa_status_t;
    hsa_amd_deregister_deallocation_callback => DEREGISTER_DEALLOCATION_CALLBACK (ptr: *mut c_void, callback: hsa_amd_deallocation_callback_t) -> hsa_status_t;
    hsa_amd_signal_value_pointer => SIGNAL_VALUE_POINTER (signal: hsa_signal_t, value_ptr: *mut *mut hsa_signal_value_t) -> hsa_status_t;
    hsa_amd_svm_attributes_set => SVM_ATTRIBUTES_SET (ptr: *mut c_void, size: usize, attribute_list: *mut hsa_amd_svm_attribute_pair_t, attribute_count: usize) -> hsa_status_t;
    hsa_amd_svm_attributes_get => SVM_ATTRIBUTES_GET (ptr: *mut c_void, size: usize, attribute_list: *mut hsa_amd_svm_attribute_pair_t, attribute_count: usize) -> hsa_status_t;
    hsa_amd_svm_prefetch_async => SVM_PREFETCH_ASYNC (ptr: *mut c_void, size: usize, agent: hsa_agent_t, num_dep_signals: u32, dep_signals: *const hsa_signal_t, completion_signal: hsa_signal_t) -> hsa_status_t;
    hsa_amd_spm_acquire => SPM_ACQUIRE (preferred_agent: hsa_agent_t) -> hsa_status_t;
    hsa_amd_spm_release => SPM_RELEASE (preferred_agent: hsa_agent_t) -> hsa_status_t;
    hsa_amd_spm_set_dest_buffer => SPM_SET_DEST_BUFFER (preferred_agent: hsa_agent_t, size_in_bytes: usize, timeout: *mut u32, size_copied: *mut u32, dest: *mut c_void, is_data_loss: *mut bool) -> hsa_status_t;
    hsa_amd_queue_cu_get_mask => QUEUE_CU_GET_MASK (queue: *const hsa_queue_t, num_cu_mask_count: u32, cu_mask: *mut u32) -> hsa_status_t;
    hsa_amd_portable_export_dmabuf => PORTABLE_EXPORT_DMABUF (ptr: *const c_void, size: usize, dmabuf: *mut c_int, offset: *mut u64) -> hsa_status_t;
    hsa_amd_portable_close_dmabuf => PORTABLE_CLOSE_DMABUF (dmabuf: c_int) -> hsa_status_t;
    hsa_amd_vmem_address_reserve => VMEM_ADDRESS_RESERVE (va: *mut *mut c_void, size: usize, address: u64, flags: u64) -> hsa_status_t;
    hsa_amd_vmem_address_free => VMEM_ADDRESS_FREE (va: *mut c_void, size: usize) -> hsa_status_t;
    hsa_amd_vmem_handle_create => VMEM_HANDLE_CREATE (pool: hsa_amd_memory_pool_t, size: usize, type_: hsa_amd_memory_type_t, flags: u64, memory_handle: *mut hsa_amd_vmem_alloc_handle_t) -> hsa_status_t;
    hsa_amd_vmem_handle_release => VMEM_HANDLE_RELEASE (memory_handle: hsa_amd_vmem_alloc_handle_t) -> hsa_status_t;
    hsa_amd_vmem_map => VMEM_MAP (va: *mut c_void, size: usize, in_offset: usize, memory_handle: hsa_amd_vmem_alloc_handle_t, flags: u64) -> hsa_status_t;
    hsa_amd_vmem_unmap => VMEM_UNMAP (va: *mut c_void, size: usize) -> hsa_status_t;
    hsa_amd_vmem_set_access => VMEM_SET_ACCESS (va: *mut c_void, size: usize, desc: *const hsa_amd_memory_access_desc_t, desc_cnt: usize) -> hsa_status_t;
    hsa_amd_vmem_get_access => VMEM_GET_ACCESS (va: *mut c_void, perms: *mut hsa_access_permission_t, agent_handle: hsa_agent_t) -> hsa_status_t;
    hsa_amd_vmem_export_shareable_handle => VMEM_EXPORT_SHAREABLE_HANDLE (dmabuf_fd: *mut c_int, handle: hsa_amd_vmem_alloc_handle_t, flags: u64) -> hsa_status_t;
    hsa_amd_vmem_import_shareable_handle => VMEM_IMPORT_SHAREABLE_HANDLE (dmabuf_fd: c_int, handle: *mut hsa_amd_vmem_alloc_handle_t) -> hsa_status_t;
    hsa_amd_vmem_retain_alloc_handle => VMEM_RETAIN_ALLOC_HANDLE (memory_handle: *mut hsa_amd_vmem_alloc_handle_t, addr: *mut c_void) -> hsa_status_t;
    hsa_amd_vmem_get_alloc_properties_from_handle => VMEM_GET_ALLOC_PROPERTIES_FROM_HANDLE (memory_handle: hsa_amd_vmem_alloc_handle_t, pool: *mut hsa_amd_memory_pool_t, type_: *mut hsa_amd_memory_type_t) -> hsa_status_t;
    hsa_amd_agent_set_async_scratch_limit => AGENT_SET_ASYNC_SCRATCH_LIMIT (agent: hsa_agent_t, threshold: usize) -> hsa_status_t;
    hsa_amd_queue_get_info => QUEUE_GET_INFO (queue: *mut hsa_queue_t, attribute: hsa_queue_info_attribute_t, value: *mut c_void) -> hsa_status_t;
    hsa_amd_vmem_address_reserve_align => VMEM_ADDRESS_RESERVE_ALIGN (va: *mut *mut c_void, size: usize, address: u64, alignment: u64, flags: u64) -> hsa_status_t;
    hsa_amd_enable_logging => ENABLE_LOGGING (flags: *mut u8, file: *mut c_void) -> hsa_status_t;
    hsa_amd_signal_wait_all => SIGNAL_WAIT_ALL (signal_count: u32, signals: *mut hsa_signal_t, conds: *mut hsa_signal_condition_t, values: *mut hsa_signal_value_t, timeout_hint: u64, wait_hint: hsa_wait_state_t, satisfying_values: *mut hsa_signal_value_t) -> u32;
    hsa_amd_memory_get_preferred_copy_engine => MEMORY_GET_PREFERRED_COPY_ENGINE (dst_agent: hsa_agent_t, src_agent: hsa_agent_t, recommended_ids_mask: *mut u32) -> hsa_status_t;
    hsa_amd_portable_export_dmabuf_v2 => PORTABLE_EXPORT_DMABUF_V2 (ptr: *const c_void, size: usize, dmabuf: *mut c_int, offset: *mut u64, flags: u64) -> hsa_status_t;
}

// The names HSA 1.0 used before the `sc` memory orders; ROCr still exports them (same slots).
export_core! {
    hsa_queue_load_read_index_acquire => hsa_queue_load_read_index_scacquire_fn (queue: *const hsa_queue_t) -> u64;
    hsa_queue_load_write_index_acquire => hsa_queue_load_write_index_scacquire_fn (queue: *const hsa_queue_t) -> u64;
    hsa_queue_store_write_index_release => hsa_queue_store_write_index_screlease_fn (queue: *const hsa_queue_t, value: u64) -> ();
    hsa_queue_cas_write_index_acq_rel => hsa_queue_cas_write_index_scacq_screl_fn (queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
    hsa_queue_cas_write_index_acquire => hsa_queue_cas_write_index_scacquire_fn (queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
    hsa_queue_cas_write_index_release => hsa_queue_cas_write_index_screlease_fn (queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
    hsa_queue_add_write_index_acq_rel => hsa_queue_add_write_index_scacq_screl_fn (queue: *const hsa_queue_t, value: u64) -> u64;
    hsa_queue_add_write_index_acquire => hsa_queue_add_write_index_scacquire_fn (queue: *const hsa_queue_t, value: u64) -> u64;
    hsa_queue_add_write_index_release => hsa_queue_add_write_index_screlease_fn (queue: *const hsa_queue_t, value: u64) -> u64;
    hsa_queue_store_read_index_release => hsa_queue_store_read_index_screlease_fn (queue: *const hsa_queue_t, value: u64) -> ();
    hsa_signal_load_acquire => hsa_signal_load_scacquire_fn (signal: hsa_signal_t) -> hsa_signal_value_t;
    hsa_signal_store_release => hsa_signal_store_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_wait_acquire => hsa_signal_wait_scacquire_fn (signal: hsa_signal_t, condition: hsa_signal_condition_t, compare_value: hsa_signal_value_t, timeout_hint: u64, wait_state_hint: hsa_wait_state_t) -> hsa_signal_value_t;
    hsa_signal_and_acquire => hsa_signal_and_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_and_release => hsa_signal_and_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_and_acq_rel => hsa_signal_and_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_or_acquire => hsa_signal_or_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_or_release => hsa_signal_or_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_or_acq_rel => hsa_signal_or_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_xor_acquire => hsa_signal_xor_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_xor_release => hsa_signal_xor_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_xor_acq_rel => hsa_signal_xor_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_exchange_acquire => hsa_signal_exchange_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_exchange_release => hsa_signal_exchange_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_exchange_acq_rel => hsa_signal_exchange_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_add_acquire => hsa_signal_add_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_add_release => hsa_signal_add_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_add_acq_rel => hsa_signal_add_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_subtract_acquire => hsa_signal_subtract_scacquire_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_subtract_release => hsa_signal_subtract_screlease_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_subtract_acq_rel => hsa_signal_subtract_scacq_screl_fn (signal: hsa_signal_t, value: hsa_signal_value_t) -> ();
    hsa_signal_cas_acquire => hsa_signal_cas_scacquire_fn (signal: hsa_signal_t, expected: hsa_signal_value_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_cas_release => hsa_signal_cas_screlease_fn (signal: hsa_signal_t, expected: hsa_signal_value_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
    hsa_signal_cas_acq_rel => hsa_signal_cas_scacq_screl_fn (signal: hsa_signal_t, expected: hsa_signal_value_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
}

/// The live image extension table's slot `index` as `F` (null: none).
///
/// # Safety
/// `F` must be the function type of that slot (`hsa_api_trace.h` order).
unsafe fn image_slot<F: Copy>(index: usize) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*const c_void>()) };
    // SAFETY: the live root table and its image table are valid for the whole process; the
    // table has 13 slots.
    let p = unsafe { (*(*api::root()).image_ext_).slots[index] };
    // SAFETY: a non-null slot holds a function of type `F` (caller contract).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*const c_void, F>(&p) })
}

macro_rules! export_image {
    ($($name:ident => $index:literal ($($arg:ident : $ty:ty),*);)*) => {$(
        #[doc = concat!("Exported `", stringify!($name), "`: calls the live image extension table's slot.")]
        ///
        /// # Safety
        /// The C API contract of the function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> hsa_status_t {
            // SAFETY: slot $index has this signature.
            match unsafe { image_slot::<unsafe extern "C" fn($($ty),*) -> hsa_status_t>($index) } {
                // SAFETY: the caller upholds the function's C contract.
                Some(f) => unsafe { f($($arg),*) },
                None => HSA_STATUS_ERROR,
            }
        }
        rocr_1!($name);
    )*};
}

// The image extension (`hsa_ext_image.h`): exported by ROCr, imported by HIP. Handles
// (`hsa_ext_image_t`, `hsa_ext_sampler_t`) are passed as their 64-bit value, enumerations as
// `u32`, descriptors as untyped pointers.
export_image! {
    hsa_ext_image_get_capability => 0 (agent: hsa_agent_t, geometry: u32, format: *const c_void, capability_mask: *mut u32);
    hsa_ext_image_data_get_info => 1 (agent: hsa_agent_t, descriptor: *const c_void, access: u32, info: *mut c_void);
    hsa_ext_image_create => 2 (agent: hsa_agent_t, descriptor: *const c_void, data: *const c_void, access: u32, image: *mut u64);
    hsa_ext_image_import => 3 (agent: hsa_agent_t, src: *const c_void, row_pitch: usize, slice_pitch: usize, image: u64, region: *const c_void);
    hsa_ext_image_export => 4 (agent: hsa_agent_t, image: u64, dst: *mut c_void, row_pitch: usize, slice_pitch: usize, region: *const c_void);
    hsa_ext_image_copy => 5 (agent: hsa_agent_t, src: u64, src_offset: *const hsa_dim3_t, dst: u64, dst_offset: *const hsa_dim3_t, range: *const hsa_dim3_t);
    hsa_ext_image_clear => 6 (agent: hsa_agent_t, image: u64, data: *const c_void, region: *const c_void);
    hsa_ext_image_destroy => 7 (agent: hsa_agent_t, image: u64);
    hsa_ext_sampler_create => 8 (agent: hsa_agent_t, descriptor: *const c_void, sampler: *mut u64);
    hsa_ext_sampler_destroy => 9 (agent: hsa_agent_t, sampler: u64);
    hsa_ext_image_get_capability_with_layout => 10 (agent: hsa_agent_t, geometry: u32, format: *const c_void, layout: u32, capability_mask: *mut u32);
    hsa_ext_image_data_get_info_with_layout => 11 (agent: hsa_agent_t, descriptor: *const c_void, access: u32, layout: u32, row_pitch: usize, slice_pitch: usize, info: *mut c_void);
    hsa_ext_image_create_with_layout => 12 (agent: hsa_agent_t, descriptor: *const c_void, data: *const c_void, access: u32, layout: u32, row_pitch: usize, slice_pitch: usize, image: *mut u64);
}

/// C `hsa_ext_control_directives_t` (144 bytes, passed by value to `hsa_ext_program_finalize`):
/// only forwarded, never read.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ControlDirectives([u8; 144]);

/// The live finalizer extension table's slot `index` as `F` (null: none).
///
/// # Safety
/// `F` must be the function type of that slot (`hsa_api_trace.h` order).
unsafe fn finalizer_slot<F: Copy>(index: usize) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*const c_void>()) };
    // SAFETY: the live root table and its finalizer table are valid for the whole process;
    // the table has 6 slots.
    let p = unsafe { (*(*api::root()).finalizer_ext_).slots[index] };
    // SAFETY: a non-null slot holds a function of type `F` (caller contract).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*const c_void, F>(&p) })
}

macro_rules! export_finalizer {
    ($($name:ident => $index:literal ($($arg:ident : $ty:ty),*);)*) => {$(
        #[doc = concat!("Exported `", stringify!($name), "`: calls the live finalizer extension table's slot.")]
        ///
        /// # Safety
        /// The C API contract of the function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> hsa_status_t {
            // SAFETY: slot $index has this signature.
            match unsafe { finalizer_slot::<unsafe extern "C" fn($($ty),*) -> hsa_status_t>($index) } {
                // SAFETY: the caller upholds the function's C contract.
                Some(f) => unsafe { f($($arg),*) },
                None => HSA_STATUS_ERROR,
            }
        }
        rocr_1!($name);
    )*};
}

/// `hsa_ext_program_iterate_modules`' callback.
type ModuleCallback = Option<unsafe extern "C" fn(u64, *mut c_void, *mut c_void) -> hsa_status_t>;

// The finalizer extension (`hsa_ext_finalize.h`, HSAIL): exported by ROCr; every slot is a stub.
export_finalizer! {
    hsa_ext_program_create => 0 (machine_model: u32, profile: u32, rounding: u32, options: *const c_char, program: *mut u64);
    hsa_ext_program_destroy => 1 (program: u64);
    hsa_ext_program_add_module => 2 (program: u64, module: *mut c_void);
    hsa_ext_program_iterate_modules => 3 (program: u64, callback: ModuleCallback, data: *mut c_void);
    hsa_ext_program_get_info => 4 (program: u64, attribute: u32, value: *mut c_void);
    hsa_ext_program_finalize => 5 (program: u64, isa: hsa_isa_t, call_convention: i32, control_directives: ControlDirectives, options: *const c_char, code_object_type: u32, code_object: *mut hsa_code_object_t);
}

/// Exported `hsa_amd_image_get_info_max_dim` (ROCr exports it outside the tables): the
/// emulated agents have no images, so it always returns `HSA_STATUS_ERROR`.
///
/// # Safety
/// Any arguments: none is read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hsa_amd_image_get_info_max_dim(
    _agent: hsa_agent_t,
    _attribute: hsa_agent_info_t,
    _value: *mut c_void,
) -> hsa_status_t {
    HSA_STATUS_ERROR
}
rocr_1!(hsa_amd_image_get_info_max_dim);
