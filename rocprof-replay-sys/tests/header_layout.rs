//! Layout proof against the real ROCr headers.
//!
//! Compiles a C++ probe against Debian's `libhsa-runtime-dev` headers (`/usr/include/hsa`, ROCm
//! 5.2.3), which prints `sizeof`/`alignof`/`offsetof` of every mirrored struct and field, the
//! offset of every table slot, every enum value and the shape (return and argument sizes) of
//! every function signature; then compares each figure with this crate and lists every
//! mismatch.
//!
//! Without the headers the test shows as ignored, with the reason (the crate's `build.rs`
//! detects them), unless `ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1` is set (CI sets it): then it
//! runs and fails.

use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use rocprof_replay_sys::*;

/// Return and argument sizes of an `extern "C"` function type.
trait FnShape {
    fn shape() -> Vec<usize>;
}

macro_rules! impl_fn_shape {
    ($($arg:ident),*) => {
        impl<R, $($arg),*> FnShape for unsafe extern "C" fn($($arg),*) -> R {
            fn shape() -> Vec<usize> {
                vec![size_of::<R>() $(, size_of::<$arg>())*]
            }
        }
    };
}
impl_fn_shape!();
impl_fn_shape!(A1);
impl_fn_shape!(A1, A2);
impl_fn_shape!(A1, A2, A3);
impl_fn_shape!(A1, A2, A3, A4);
impl_fn_shape!(A1, A2, A3, A4, A5);
impl_fn_shape!(A1, A2, A3, A4, A5, A6);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7, A8);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7, A8, A9);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7, A8, A9, A10);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12);

/// One figure to compare: a C++ expression and what Rust says it is.
struct Check {
    what: String,
    c_expr: String,
    rust: String,
}

#[derive(Default)]
struct Probe {
    checks: Vec<Check>,
}

impl Probe {
    fn number(&mut self, what: String, c_expr: String, rust: u64) {
        self.checks.push(Check {
            what,
            c_expr,
            rust: rust.to_string(),
        });
    }

    fn layout(&mut self, c_type: &str, size: usize, align: usize) {
        self.number(
            format!("sizeof({c_type})"),
            format!("sizeof({c_type})"),
            size as u64,
        );
        self.number(
            format!("alignof({c_type})"),
            format!("alignof({c_type})"),
            align as u64,
        );
    }

    fn offset(&mut self, c_type: &str, c_field: &str, rust: usize) {
        let e = format!("offsetof({c_type}, {c_field})");
        self.number(e.clone(), e, rust as u64);
    }

    fn signature(&mut self, name: &str, shape: Vec<usize>) {
        let rust = shape
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",");
        self.checks.push(Check {
            what: format!("signature of {name} (return, argument sizes)"),
            c_expr: format!("SHAPE((decltype(&{name}))nullptr)"),
            rust,
        });
    }

    fn source(&self) -> String {
        let mut s = String::from(
            r#"#define AMD_INTERNAL_BUILD 1
#include "hsa.h"
#include "hsa_ext_amd.h"
#include "hsa_api_trace.h"
#include "hsa_ven_amd_loader.h"
#include "hsa_ven_amd_aqlprofile.h"
#include "amd_hsa_queue.h"
#include "amd_hsa_signal.h"
#include <cstddef>
#include <cstdio>
#include <string>
template <class T> struct Size { static constexpr unsigned long long v = sizeof(T); };
template <> struct Size<void> { static constexpr unsigned long long v = 0; };
template <class R, class... A> std::string SHAPE(R (*)(A...)) {
  std::string s = std::to_string(Size<R>::v);
  ((s += "," + std::to_string(Size<A>::v)), ...);
  return s;
}
static std::string show(unsigned long long v) { return std::to_string(v); }
static std::string show(const std::string& v) { return v; }
int main() {
"#,
        );
        for (i, c) in self.checks.iter().enumerate() {
            let expr = if c.c_expr.starts_with("SHAPE(") {
                c.c_expr.clone()
            } else {
                format!("(unsigned long long)({})", c.c_expr)
            };
            writeln!(s, "  std::printf(\"{i} %s\\n\", show({expr}).c_str());").unwrap();
        }
        s.push_str("  return 0;\n}\n");
        s
    }
}

macro_rules! strukt {
    ($p:expr, $rust:ty, $c:literal { $($rf:ident $(=> $cf:literal)?),* $(,)? }) => {{
        $p.layout($c, size_of::<$rust>(), align_of::<$rust>());
        $( $p.offset($c, strukt!(@name $rf $(, $cf)?), offset_of!($rust, $rf)); )*
    }};
    (@name $rf:ident) => { stringify!($rf) };
    (@name $rf:ident, $cf:literal) => { $cf };
}

macro_rules! table_fields {
    ($rust:ty, $c:literal { $($f:ident,)* }) => {
        ($c, size_of::<$rust>(), vec![$((stringify!($f), offset_of!($rust, $f)),)*])
    };
}

macro_rules! shapes {
    ($(($f:ident, $t:ty),)*) => {
        vec![$((stringify!($f), <$t as FnShape>::shape()),)*]
    };
}

/// Every slot of `CoreApiTable`, by field name (identical in C and Rust).
macro_rules! core_fields { ($m:ident) => { $m!(CoreApiTable, "CoreApiTable" {
        hsa_init_fn,
        hsa_shut_down_fn,
        hsa_system_get_info_fn,
        hsa_system_extension_supported_fn,
        hsa_system_get_extension_table_fn,
        hsa_iterate_agents_fn,
        hsa_agent_get_info_fn,
        hsa_queue_create_fn,
        hsa_soft_queue_create_fn,
        hsa_queue_destroy_fn,
        hsa_queue_inactivate_fn,
        hsa_queue_load_read_index_scacquire_fn,
        hsa_queue_load_read_index_relaxed_fn,
        hsa_queue_load_write_index_scacquire_fn,
        hsa_queue_load_write_index_relaxed_fn,
        hsa_queue_store_write_index_relaxed_fn,
        hsa_queue_store_write_index_screlease_fn,
        hsa_queue_cas_write_index_scacq_screl_fn,
        hsa_queue_cas_write_index_scacquire_fn,
        hsa_queue_cas_write_index_relaxed_fn,
        hsa_queue_cas_write_index_screlease_fn,
        hsa_queue_add_write_index_scacq_screl_fn,
        hsa_queue_add_write_index_scacquire_fn,
        hsa_queue_add_write_index_relaxed_fn,
        hsa_queue_add_write_index_screlease_fn,
        hsa_queue_store_read_index_relaxed_fn,
        hsa_queue_store_read_index_screlease_fn,
        hsa_agent_iterate_regions_fn,
        hsa_region_get_info_fn,
        hsa_agent_get_exception_policies_fn,
        hsa_agent_extension_supported_fn,
        hsa_memory_register_fn,
        hsa_memory_deregister_fn,
        hsa_memory_allocate_fn,
        hsa_memory_free_fn,
        hsa_memory_copy_fn,
        hsa_memory_assign_agent_fn,
        hsa_signal_create_fn,
        hsa_signal_destroy_fn,
        hsa_signal_load_relaxed_fn,
        hsa_signal_load_scacquire_fn,
        hsa_signal_store_relaxed_fn,
        hsa_signal_store_screlease_fn,
        hsa_signal_wait_relaxed_fn,
        hsa_signal_wait_scacquire_fn,
        hsa_signal_and_relaxed_fn,
        hsa_signal_and_scacquire_fn,
        hsa_signal_and_screlease_fn,
        hsa_signal_and_scacq_screl_fn,
        hsa_signal_or_relaxed_fn,
        hsa_signal_or_scacquire_fn,
        hsa_signal_or_screlease_fn,
        hsa_signal_or_scacq_screl_fn,
        hsa_signal_xor_relaxed_fn,
        hsa_signal_xor_scacquire_fn,
        hsa_signal_xor_screlease_fn,
        hsa_signal_xor_scacq_screl_fn,
        hsa_signal_exchange_relaxed_fn,
        hsa_signal_exchange_scacquire_fn,
        hsa_signal_exchange_screlease_fn,
        hsa_signal_exchange_scacq_screl_fn,
        hsa_signal_add_relaxed_fn,
        hsa_signal_add_scacquire_fn,
        hsa_signal_add_screlease_fn,
        hsa_signal_add_scacq_screl_fn,
        hsa_signal_subtract_relaxed_fn,
        hsa_signal_subtract_scacquire_fn,
        hsa_signal_subtract_screlease_fn,
        hsa_signal_subtract_scacq_screl_fn,
        hsa_signal_cas_relaxed_fn,
        hsa_signal_cas_scacquire_fn,
        hsa_signal_cas_screlease_fn,
        hsa_signal_cas_scacq_screl_fn,
        hsa_isa_from_name_fn,
        hsa_isa_get_info_fn,
        hsa_isa_compatible_fn,
        hsa_code_object_serialize_fn,
        hsa_code_object_deserialize_fn,
        hsa_code_object_destroy_fn,
        hsa_code_object_get_info_fn,
        hsa_code_object_get_symbol_fn,
        hsa_code_symbol_get_info_fn,
        hsa_code_object_iterate_symbols_fn,
        hsa_executable_create_fn,
        hsa_executable_destroy_fn,
        hsa_executable_load_code_object_fn,
        hsa_executable_freeze_fn,
        hsa_executable_get_info_fn,
        hsa_executable_global_variable_define_fn,
        hsa_executable_agent_global_variable_define_fn,
        hsa_executable_readonly_variable_define_fn,
        hsa_executable_validate_fn,
        hsa_executable_get_symbol_fn,
        hsa_executable_symbol_get_info_fn,
        hsa_executable_iterate_symbols_fn,
        hsa_status_string_fn,
        hsa_extension_get_name_fn,
        hsa_system_major_extension_supported_fn,
        hsa_system_get_major_extension_table_fn,
        hsa_agent_major_extension_supported_fn,
        hsa_cache_get_info_fn,
        hsa_agent_iterate_caches_fn,
        hsa_signal_silent_store_relaxed_fn,
        hsa_signal_silent_store_screlease_fn,
        hsa_signal_group_create_fn,
        hsa_signal_group_destroy_fn,
        hsa_signal_group_wait_any_scacquire_fn,
        hsa_signal_group_wait_any_relaxed_fn,
        hsa_agent_iterate_isas_fn,
        hsa_isa_get_info_alt_fn,
        hsa_isa_get_exception_policies_fn,
        hsa_isa_get_round_method_fn,
        hsa_wavefront_get_info_fn,
        hsa_isa_iterate_wavefronts_fn,
        hsa_code_object_get_symbol_from_name_fn,
        hsa_code_object_reader_create_from_file_fn,
        hsa_code_object_reader_create_from_memory_fn,
        hsa_code_object_reader_destroy_fn,
        hsa_executable_create_alt_fn,
        hsa_executable_load_program_code_object_fn,
        hsa_executable_load_agent_code_object_fn,
        hsa_executable_validate_alt_fn,
        hsa_executable_get_symbol_by_name_fn,
        hsa_executable_iterate_agent_symbols_fn,
        hsa_executable_iterate_program_symbols_fn,
    }) }; }

/// Every slot of the ROCm 5.2 `AmdExtTable` (Rust: `AmdExtTable52`).
macro_rules! amd_ext_52_fields { ($m:ident) => { $m!(AmdExtTable52, "AmdExtTable" {
        hsa_amd_coherency_get_type_fn,
        hsa_amd_coherency_set_type_fn,
        hsa_amd_profiling_set_profiler_enabled_fn,
        hsa_amd_profiling_async_copy_enable_fn,
        hsa_amd_profiling_get_dispatch_time_fn,
        hsa_amd_profiling_get_async_copy_time_fn,
        hsa_amd_profiling_convert_tick_to_system_domain_fn,
        hsa_amd_signal_async_handler_fn,
        hsa_amd_async_function_fn,
        hsa_amd_signal_wait_any_fn,
        hsa_amd_queue_cu_set_mask_fn,
        hsa_amd_memory_pool_get_info_fn,
        hsa_amd_agent_iterate_memory_pools_fn,
        hsa_amd_memory_pool_allocate_fn,
        hsa_amd_memory_pool_free_fn,
        hsa_amd_memory_async_copy_fn,
        hsa_amd_agent_memory_pool_get_info_fn,
        hsa_amd_agents_allow_access_fn,
        hsa_amd_memory_pool_can_migrate_fn,
        hsa_amd_memory_migrate_fn,
        hsa_amd_memory_lock_fn,
        hsa_amd_memory_unlock_fn,
        hsa_amd_memory_fill_fn,
        hsa_amd_interop_map_buffer_fn,
        hsa_amd_interop_unmap_buffer_fn,
        hsa_amd_image_create_fn,
        hsa_amd_pointer_info_fn,
        hsa_amd_pointer_info_set_userdata_fn,
        hsa_amd_ipc_memory_create_fn,
        hsa_amd_ipc_memory_attach_fn,
        hsa_amd_ipc_memory_detach_fn,
        hsa_amd_signal_create_fn,
        hsa_amd_ipc_signal_create_fn,
        hsa_amd_ipc_signal_attach_fn,
        hsa_amd_register_system_event_handler_fn,
        hsa_amd_queue_intercept_create_fn,
        hsa_amd_queue_intercept_register_fn,
        hsa_amd_queue_set_priority_fn,
        hsa_amd_memory_async_copy_rect_fn,
        hsa_amd_runtime_queue_create_register_fn,
        hsa_amd_memory_lock_to_pool_fn,
        hsa_amd_register_deallocation_callback_fn,
        hsa_amd_deregister_deallocation_callback_fn,
        hsa_amd_signal_value_pointer_fn,
        hsa_amd_svm_attributes_set_fn,
        hsa_amd_svm_attributes_get_fn,
        hsa_amd_svm_prefetch_async_fn,
        hsa_amd_queue_cu_get_mask_fn,
    }) }; }

/// Every function of the 5.2 headers with its `*_fn_t` alias.
macro_rules! signatures {
    ($m:ident) => {
        $m!(
            (hsa_status_string, hsa_status_string_fn_t),
            (hsa_init, hsa_init_fn_t),
            (hsa_shut_down, hsa_shut_down_fn_t),
            (hsa_system_get_info, hsa_system_get_info_fn_t),
            (hsa_extension_get_name, hsa_extension_get_name_fn_t),
            (
                hsa_system_extension_supported,
                hsa_system_extension_supported_fn_t
            ),
            (
                hsa_system_major_extension_supported,
                hsa_system_major_extension_supported_fn_t
            ),
            (
                hsa_system_get_extension_table,
                hsa_system_get_extension_table_fn_t
            ),
            (
                hsa_system_get_major_extension_table,
                hsa_system_get_major_extension_table_fn_t
            ),
            (hsa_agent_get_info, hsa_agent_get_info_fn_t),
            (hsa_iterate_agents, hsa_iterate_agents_fn_t),
            (
                hsa_agent_get_exception_policies,
                hsa_agent_get_exception_policies_fn_t
            ),
            (hsa_cache_get_info, hsa_cache_get_info_fn_t),
            (hsa_agent_iterate_caches, hsa_agent_iterate_caches_fn_t),
            (
                hsa_agent_extension_supported,
                hsa_agent_extension_supported_fn_t
            ),
            (
                hsa_agent_major_extension_supported,
                hsa_agent_major_extension_supported_fn_t
            ),
            (hsa_signal_create, hsa_signal_create_fn_t),
            (hsa_signal_destroy, hsa_signal_destroy_fn_t),
            (hsa_signal_load_scacquire, hsa_signal_load_scacquire_fn_t),
            (hsa_signal_load_relaxed, hsa_signal_load_relaxed_fn_t),
            (hsa_signal_load_acquire, hsa_signal_load_acquire_fn_t),
            (hsa_signal_store_relaxed, hsa_signal_store_relaxed_fn_t),
            (hsa_signal_store_screlease, hsa_signal_store_screlease_fn_t),
            (hsa_signal_store_release, hsa_signal_store_release_fn_t),
            (
                hsa_signal_silent_store_relaxed,
                hsa_signal_silent_store_relaxed_fn_t
            ),
            (
                hsa_signal_silent_store_screlease,
                hsa_signal_silent_store_screlease_fn_t
            ),
            (
                hsa_signal_exchange_scacq_screl,
                hsa_signal_exchange_scacq_screl_fn_t
            ),
            (
                hsa_signal_exchange_acq_rel,
                hsa_signal_exchange_acq_rel_fn_t
            ),
            (
                hsa_signal_exchange_scacquire,
                hsa_signal_exchange_scacquire_fn_t
            ),
            (
                hsa_signal_exchange_acquire,
                hsa_signal_exchange_acquire_fn_t
            ),
            (
                hsa_signal_exchange_relaxed,
                hsa_signal_exchange_relaxed_fn_t
            ),
            (
                hsa_signal_exchange_screlease,
                hsa_signal_exchange_screlease_fn_t
            ),
            (
                hsa_signal_exchange_release,
                hsa_signal_exchange_release_fn_t
            ),
            (hsa_signal_cas_scacq_screl, hsa_signal_cas_scacq_screl_fn_t),
            (hsa_signal_cas_acq_rel, hsa_signal_cas_acq_rel_fn_t),
            (hsa_signal_cas_scacquire, hsa_signal_cas_scacquire_fn_t),
            (hsa_signal_cas_acquire, hsa_signal_cas_acquire_fn_t),
            (hsa_signal_cas_relaxed, hsa_signal_cas_relaxed_fn_t),
            (hsa_signal_cas_screlease, hsa_signal_cas_screlease_fn_t),
            (hsa_signal_cas_release, hsa_signal_cas_release_fn_t),
            (hsa_signal_add_scacq_screl, hsa_signal_add_scacq_screl_fn_t),
            (hsa_signal_add_acq_rel, hsa_signal_add_acq_rel_fn_t),
            (hsa_signal_add_scacquire, hsa_signal_add_scacquire_fn_t),
            (hsa_signal_add_acquire, hsa_signal_add_acquire_fn_t),
            (hsa_signal_add_relaxed, hsa_signal_add_relaxed_fn_t),
            (hsa_signal_add_screlease, hsa_signal_add_screlease_fn_t),
            (hsa_signal_add_release, hsa_signal_add_release_fn_t),
            (
                hsa_signal_subtract_scacq_screl,
                hsa_signal_subtract_scacq_screl_fn_t
            ),
            (
                hsa_signal_subtract_acq_rel,
                hsa_signal_subtract_acq_rel_fn_t
            ),
            (
                hsa_signal_subtract_scacquire,
                hsa_signal_subtract_scacquire_fn_t
            ),
            (
                hsa_signal_subtract_acquire,
                hsa_signal_subtract_acquire_fn_t
            ),
            (
                hsa_signal_subtract_relaxed,
                hsa_signal_subtract_relaxed_fn_t
            ),
            (
                hsa_signal_subtract_screlease,
                hsa_signal_subtract_screlease_fn_t
            ),
            (
                hsa_signal_subtract_release,
                hsa_signal_subtract_release_fn_t
            ),
            (hsa_signal_and_scacq_screl, hsa_signal_and_scacq_screl_fn_t),
            (hsa_signal_and_acq_rel, hsa_signal_and_acq_rel_fn_t),
            (hsa_signal_and_scacquire, hsa_signal_and_scacquire_fn_t),
            (hsa_signal_and_acquire, hsa_signal_and_acquire_fn_t),
            (hsa_signal_and_relaxed, hsa_signal_and_relaxed_fn_t),
            (hsa_signal_and_screlease, hsa_signal_and_screlease_fn_t),
            (hsa_signal_and_release, hsa_signal_and_release_fn_t),
            (hsa_signal_or_scacq_screl, hsa_signal_or_scacq_screl_fn_t),
            (hsa_signal_or_acq_rel, hsa_signal_or_acq_rel_fn_t),
            (hsa_signal_or_scacquire, hsa_signal_or_scacquire_fn_t),
            (hsa_signal_or_acquire, hsa_signal_or_acquire_fn_t),
            (hsa_signal_or_relaxed, hsa_signal_or_relaxed_fn_t),
            (hsa_signal_or_screlease, hsa_signal_or_screlease_fn_t),
            (hsa_signal_or_release, hsa_signal_or_release_fn_t),
            (hsa_signal_xor_scacq_screl, hsa_signal_xor_scacq_screl_fn_t),
            (hsa_signal_xor_acq_rel, hsa_signal_xor_acq_rel_fn_t),
            (hsa_signal_xor_scacquire, hsa_signal_xor_scacquire_fn_t),
            (hsa_signal_xor_acquire, hsa_signal_xor_acquire_fn_t),
            (hsa_signal_xor_relaxed, hsa_signal_xor_relaxed_fn_t),
            (hsa_signal_xor_screlease, hsa_signal_xor_screlease_fn_t),
            (hsa_signal_xor_release, hsa_signal_xor_release_fn_t),
            (hsa_signal_wait_scacquire, hsa_signal_wait_scacquire_fn_t),
            (hsa_signal_wait_relaxed, hsa_signal_wait_relaxed_fn_t),
            (hsa_signal_wait_acquire, hsa_signal_wait_acquire_fn_t),
            (hsa_signal_group_create, hsa_signal_group_create_fn_t),
            (hsa_signal_group_destroy, hsa_signal_group_destroy_fn_t),
            (
                hsa_signal_group_wait_any_scacquire,
                hsa_signal_group_wait_any_scacquire_fn_t
            ),
            (
                hsa_signal_group_wait_any_relaxed,
                hsa_signal_group_wait_any_relaxed_fn_t
            ),
            (hsa_queue_create, hsa_queue_create_fn_t),
            (hsa_soft_queue_create, hsa_soft_queue_create_fn_t),
            (hsa_queue_destroy, hsa_queue_destroy_fn_t),
            (hsa_queue_inactivate, hsa_queue_inactivate_fn_t),
            (
                hsa_queue_load_read_index_acquire,
                hsa_queue_load_read_index_acquire_fn_t
            ),
            (
                hsa_queue_load_read_index_scacquire,
                hsa_queue_load_read_index_scacquire_fn_t
            ),
            (
                hsa_queue_load_read_index_relaxed,
                hsa_queue_load_read_index_relaxed_fn_t
            ),
            (
                hsa_queue_load_write_index_acquire,
                hsa_queue_load_write_index_acquire_fn_t
            ),
            (
                hsa_queue_load_write_index_scacquire,
                hsa_queue_load_write_index_scacquire_fn_t
            ),
            (
                hsa_queue_load_write_index_relaxed,
                hsa_queue_load_write_index_relaxed_fn_t
            ),
            (
                hsa_queue_store_write_index_relaxed,
                hsa_queue_store_write_index_relaxed_fn_t
            ),
            (
                hsa_queue_store_write_index_release,
                hsa_queue_store_write_index_release_fn_t
            ),
            (
                hsa_queue_store_write_index_screlease,
                hsa_queue_store_write_index_screlease_fn_t
            ),
            (
                hsa_queue_cas_write_index_acq_rel,
                hsa_queue_cas_write_index_acq_rel_fn_t
            ),
            (
                hsa_queue_cas_write_index_scacq_screl,
                hsa_queue_cas_write_index_scacq_screl_fn_t
            ),
            (
                hsa_queue_cas_write_index_acquire,
                hsa_queue_cas_write_index_acquire_fn_t
            ),
            (
                hsa_queue_cas_write_index_scacquire,
                hsa_queue_cas_write_index_scacquire_fn_t
            ),
            (
                hsa_queue_cas_write_index_relaxed,
                hsa_queue_cas_write_index_relaxed_fn_t
            ),
            (
                hsa_queue_cas_write_index_release,
                hsa_queue_cas_write_index_release_fn_t
            ),
            (
                hsa_queue_cas_write_index_screlease,
                hsa_queue_cas_write_index_screlease_fn_t
            ),
            (
                hsa_queue_add_write_index_acq_rel,
                hsa_queue_add_write_index_acq_rel_fn_t
            ),
            (
                hsa_queue_add_write_index_scacq_screl,
                hsa_queue_add_write_index_scacq_screl_fn_t
            ),
            (
                hsa_queue_add_write_index_acquire,
                hsa_queue_add_write_index_acquire_fn_t
            ),
            (
                hsa_queue_add_write_index_scacquire,
                hsa_queue_add_write_index_scacquire_fn_t
            ),
            (
                hsa_queue_add_write_index_relaxed,
                hsa_queue_add_write_index_relaxed_fn_t
            ),
            (
                hsa_queue_add_write_index_release,
                hsa_queue_add_write_index_release_fn_t
            ),
            (
                hsa_queue_add_write_index_screlease,
                hsa_queue_add_write_index_screlease_fn_t
            ),
            (
                hsa_queue_store_read_index_relaxed,
                hsa_queue_store_read_index_relaxed_fn_t
            ),
            (
                hsa_queue_store_read_index_release,
                hsa_queue_store_read_index_release_fn_t
            ),
            (
                hsa_queue_store_read_index_screlease,
                hsa_queue_store_read_index_screlease_fn_t
            ),
            (hsa_region_get_info, hsa_region_get_info_fn_t),
            (hsa_agent_iterate_regions, hsa_agent_iterate_regions_fn_t),
            (hsa_memory_allocate, hsa_memory_allocate_fn_t),
            (hsa_memory_free, hsa_memory_free_fn_t),
            (hsa_memory_copy, hsa_memory_copy_fn_t),
            (hsa_memory_assign_agent, hsa_memory_assign_agent_fn_t),
            (hsa_memory_register, hsa_memory_register_fn_t),
            (hsa_memory_deregister, hsa_memory_deregister_fn_t),
            (hsa_isa_from_name, hsa_isa_from_name_fn_t),
            (hsa_agent_iterate_isas, hsa_agent_iterate_isas_fn_t),
            (hsa_isa_get_info, hsa_isa_get_info_fn_t),
            (hsa_isa_get_info_alt, hsa_isa_get_info_alt_fn_t),
            (
                hsa_isa_get_exception_policies,
                hsa_isa_get_exception_policies_fn_t
            ),
            (hsa_isa_get_round_method, hsa_isa_get_round_method_fn_t),
            (hsa_wavefront_get_info, hsa_wavefront_get_info_fn_t),
            (hsa_isa_iterate_wavefronts, hsa_isa_iterate_wavefronts_fn_t),
            (hsa_isa_compatible, hsa_isa_compatible_fn_t),
            (
                hsa_code_object_reader_create_from_file,
                hsa_code_object_reader_create_from_file_fn_t
            ),
            (
                hsa_code_object_reader_create_from_memory,
                hsa_code_object_reader_create_from_memory_fn_t
            ),
            (
                hsa_code_object_reader_destroy,
                hsa_code_object_reader_destroy_fn_t
            ),
            (hsa_executable_create, hsa_executable_create_fn_t),
            (hsa_executable_create_alt, hsa_executable_create_alt_fn_t),
            (hsa_executable_destroy, hsa_executable_destroy_fn_t),
            (
                hsa_executable_load_program_code_object,
                hsa_executable_load_program_code_object_fn_t
            ),
            (
                hsa_executable_load_agent_code_object,
                hsa_executable_load_agent_code_object_fn_t
            ),
            (hsa_executable_freeze, hsa_executable_freeze_fn_t),
            (hsa_executable_get_info, hsa_executable_get_info_fn_t),
            (
                hsa_executable_global_variable_define,
                hsa_executable_global_variable_define_fn_t
            ),
            (
                hsa_executable_agent_global_variable_define,
                hsa_executable_agent_global_variable_define_fn_t
            ),
            (
                hsa_executable_readonly_variable_define,
                hsa_executable_readonly_variable_define_fn_t
            ),
            (hsa_executable_validate, hsa_executable_validate_fn_t),
            (
                hsa_executable_validate_alt,
                hsa_executable_validate_alt_fn_t
            ),
            (hsa_executable_get_symbol, hsa_executable_get_symbol_fn_t),
            (
                hsa_executable_get_symbol_by_name,
                hsa_executable_get_symbol_by_name_fn_t
            ),
            (
                hsa_executable_symbol_get_info,
                hsa_executable_symbol_get_info_fn_t
            ),
            (
                hsa_executable_iterate_symbols,
                hsa_executable_iterate_symbols_fn_t
            ),
            (
                hsa_executable_iterate_agent_symbols,
                hsa_executable_iterate_agent_symbols_fn_t
            ),
            (
                hsa_executable_iterate_program_symbols,
                hsa_executable_iterate_program_symbols_fn_t
            ),
            (hsa_code_object_serialize, hsa_code_object_serialize_fn_t),
            (
                hsa_code_object_deserialize,
                hsa_code_object_deserialize_fn_t
            ),
            (hsa_code_object_destroy, hsa_code_object_destroy_fn_t),
            (hsa_code_object_get_info, hsa_code_object_get_info_fn_t),
            (
                hsa_executable_load_code_object,
                hsa_executable_load_code_object_fn_t
            ),
            (hsa_code_object_get_symbol, hsa_code_object_get_symbol_fn_t),
            (
                hsa_code_object_get_symbol_from_name,
                hsa_code_object_get_symbol_from_name_fn_t
            ),
            (hsa_code_symbol_get_info, hsa_code_symbol_get_info_fn_t),
            (
                hsa_code_object_iterate_symbols,
                hsa_code_object_iterate_symbols_fn_t
            ),
            (hsa_amd_coherency_get_type, hsa_amd_coherency_get_type_fn_t),
            (hsa_amd_coherency_set_type, hsa_amd_coherency_set_type_fn_t),
            (
                hsa_amd_profiling_set_profiler_enabled,
                hsa_amd_profiling_set_profiler_enabled_fn_t
            ),
            (
                hsa_amd_profiling_async_copy_enable,
                hsa_amd_profiling_async_copy_enable_fn_t
            ),
            (
                hsa_amd_profiling_get_dispatch_time,
                hsa_amd_profiling_get_dispatch_time_fn_t
            ),
            (
                hsa_amd_profiling_get_async_copy_time,
                hsa_amd_profiling_get_async_copy_time_fn_t
            ),
            (
                hsa_amd_profiling_convert_tick_to_system_domain,
                hsa_amd_profiling_convert_tick_to_system_domain_fn_t
            ),
            (hsa_amd_signal_create, hsa_amd_signal_create_fn_t),
            (
                hsa_amd_signal_value_pointer,
                hsa_amd_signal_value_pointer_fn_t
            ),
            (
                hsa_amd_signal_async_handler,
                hsa_amd_signal_async_handler_fn_t
            ),
            (hsa_amd_async_function, hsa_amd_async_function_fn_t),
            (hsa_amd_signal_wait_any, hsa_amd_signal_wait_any_fn_t),
            (
                hsa_amd_image_get_info_max_dim,
                hsa_amd_image_get_info_max_dim_fn_t
            ),
            (hsa_amd_queue_cu_set_mask, hsa_amd_queue_cu_set_mask_fn_t),
            (hsa_amd_queue_cu_get_mask, hsa_amd_queue_cu_get_mask_fn_t),
            (
                hsa_amd_memory_pool_get_info,
                hsa_amd_memory_pool_get_info_fn_t
            ),
            (
                hsa_amd_agent_iterate_memory_pools,
                hsa_amd_agent_iterate_memory_pools_fn_t
            ),
            (
                hsa_amd_memory_pool_allocate,
                hsa_amd_memory_pool_allocate_fn_t
            ),
            (hsa_amd_memory_pool_free, hsa_amd_memory_pool_free_fn_t),
            (hsa_amd_memory_async_copy, hsa_amd_memory_async_copy_fn_t),
            (
                hsa_amd_memory_async_copy_rect,
                hsa_amd_memory_async_copy_rect_fn_t
            ),
            (
                hsa_amd_agent_memory_pool_get_info,
                hsa_amd_agent_memory_pool_get_info_fn_t
            ),
            (
                hsa_amd_agents_allow_access,
                hsa_amd_agents_allow_access_fn_t
            ),
            (
                hsa_amd_memory_pool_can_migrate,
                hsa_amd_memory_pool_can_migrate_fn_t
            ),
            (hsa_amd_memory_migrate, hsa_amd_memory_migrate_fn_t),
            (hsa_amd_memory_lock, hsa_amd_memory_lock_fn_t),
            (
                hsa_amd_memory_lock_to_pool,
                hsa_amd_memory_lock_to_pool_fn_t
            ),
            (hsa_amd_memory_unlock, hsa_amd_memory_unlock_fn_t),
            (hsa_amd_memory_fill, hsa_amd_memory_fill_fn_t),
            (hsa_amd_interop_map_buffer, hsa_amd_interop_map_buffer_fn_t),
            (
                hsa_amd_interop_unmap_buffer,
                hsa_amd_interop_unmap_buffer_fn_t
            ),
            (hsa_amd_image_create, hsa_amd_image_create_fn_t),
            (hsa_amd_pointer_info, hsa_amd_pointer_info_fn_t),
            (
                hsa_amd_pointer_info_set_userdata,
                hsa_amd_pointer_info_set_userdata_fn_t
            ),
            (hsa_amd_ipc_memory_create, hsa_amd_ipc_memory_create_fn_t),
            (hsa_amd_ipc_memory_attach, hsa_amd_ipc_memory_attach_fn_t),
            (hsa_amd_ipc_memory_detach, hsa_amd_ipc_memory_detach_fn_t),
            (hsa_amd_ipc_signal_create, hsa_amd_ipc_signal_create_fn_t),
            (hsa_amd_ipc_signal_attach, hsa_amd_ipc_signal_attach_fn_t),
            (
                hsa_amd_register_system_event_handler,
                hsa_amd_register_system_event_handler_fn_t
            ),
            (hsa_amd_queue_set_priority, hsa_amd_queue_set_priority_fn_t),
            (
                hsa_amd_register_deallocation_callback,
                hsa_amd_register_deallocation_callback_fn_t
            ),
            (
                hsa_amd_deregister_deallocation_callback,
                hsa_amd_deregister_deallocation_callback_fn_t
            ),
            (hsa_amd_svm_attributes_set, hsa_amd_svm_attributes_set_fn_t),
            (hsa_amd_svm_attributes_get, hsa_amd_svm_attributes_get_fn_t),
            (hsa_amd_svm_prefetch_async, hsa_amd_svm_prefetch_async_fn_t),
            (
                hsa_ven_amd_loader_query_host_address,
                hsa_ven_amd_loader_query_host_address_fn_t
            ),
            (
                hsa_ven_amd_loader_query_segment_descriptors,
                hsa_ven_amd_loader_query_segment_descriptors_fn_t
            ),
            (
                hsa_ven_amd_loader_query_executable,
                hsa_ven_amd_loader_query_executable_fn_t
            ),
            (
                hsa_ven_amd_loader_executable_iterate_loaded_code_objects,
                hsa_ven_amd_loader_executable_iterate_loaded_code_objects_fn_t
            ),
            (
                hsa_ven_amd_loader_loaded_code_object_get_info,
                hsa_ven_amd_loader_loaded_code_object_get_info_fn_t
            ),
            (
                hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size,
                hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size_fn_t
            ),
            (
                hsa_ven_amd_loader_iterate_executables,
                hsa_ven_amd_loader_iterate_executables_fn_t
            ),
        )
    };
}

fn build_probe() -> Probe {
    let mut p = Probe::default();

    // Handles: one u64 each.
    for (c, size, align) in [
        (
            "hsa_agent_t",
            size_of::<hsa_agent_t>(),
            align_of::<hsa_agent_t>(),
        ),
        (
            "hsa_cache_t",
            size_of::<hsa_cache_t>(),
            align_of::<hsa_cache_t>(),
        ),
        (
            "hsa_signal_t",
            size_of::<hsa_signal_t>(),
            align_of::<hsa_signal_t>(),
        ),
        (
            "hsa_signal_group_t",
            size_of::<hsa_signal_group_t>(),
            align_of::<hsa_signal_group_t>(),
        ),
        (
            "hsa_region_t",
            size_of::<hsa_region_t>(),
            align_of::<hsa_region_t>(),
        ),
        ("hsa_isa_t", size_of::<hsa_isa_t>(), align_of::<hsa_isa_t>()),
        (
            "hsa_wavefront_t",
            size_of::<hsa_wavefront_t>(),
            align_of::<hsa_wavefront_t>(),
        ),
        (
            "hsa_code_object_reader_t",
            size_of::<hsa_code_object_reader_t>(),
            align_of::<hsa_code_object_reader_t>(),
        ),
        (
            "hsa_executable_t",
            size_of::<hsa_executable_t>(),
            align_of::<hsa_executable_t>(),
        ),
        (
            "hsa_loaded_code_object_t",
            size_of::<hsa_loaded_code_object_t>(),
            align_of::<hsa_loaded_code_object_t>(),
        ),
        (
            "hsa_executable_symbol_t",
            size_of::<hsa_executable_symbol_t>(),
            align_of::<hsa_executable_symbol_t>(),
        ),
        (
            "hsa_code_object_t",
            size_of::<hsa_code_object_t>(),
            align_of::<hsa_code_object_t>(),
        ),
        (
            "hsa_callback_data_t",
            size_of::<hsa_callback_data_t>(),
            align_of::<hsa_callback_data_t>(),
        ),
        (
            "hsa_code_symbol_t",
            size_of::<hsa_code_symbol_t>(),
            align_of::<hsa_code_symbol_t>(),
        ),
        (
            "hsa_amd_memory_pool_t",
            size_of::<hsa_amd_memory_pool_t>(),
            align_of::<hsa_amd_memory_pool_t>(),
        ),
        (
            "hsa_ext_image_t",
            size_of::<hsa_ext_image_t>(),
            align_of::<hsa_ext_image_t>(),
        ),
    ] {
        p.layout(c, size, align);
        p.offset(c, "handle", 0);
    }

    strukt!(p, hsa_dim3_t, "hsa_dim3_t" { x, y, z });
    strukt!(p, hsa_pitched_ptr_t, "hsa_pitched_ptr_t" { base, pitch, slice });
    strukt!(p, hsa_amd_profiling_dispatch_time_t, "hsa_amd_profiling_dispatch_time_t" { start, end });
    strukt!(p, hsa_amd_profiling_async_copy_time_t, "hsa_amd_profiling_async_copy_time_t" {
        start, end
    });
    strukt!(p, hsa_amd_pointer_info_t, "hsa_amd_pointer_info_t" {
        size, type_ => "type", agentBaseAddress, hostBaseAddress, sizeInBytes, userData,
        agentOwner, global_flags,
    });
    strukt!(p, hsa_amd_memory_pool_link_info_t, "hsa_amd_memory_pool_link_info_t" {
        min_latency, max_latency, min_bandwidth, max_bandwidth, atomic_support_32bit,
        atomic_support_64bit, coherent_support, link_type, numa_distance,
    });
    strukt!(p, hsa_amd_svm_attribute_pair_t, "hsa_amd_svm_attribute_pair_t" { attribute, value });
    strukt!(p, hsa_amd_ipc_memory_t, "hsa_amd_ipc_memory_t" { handle });
    strukt!(p, hsa_ven_amd_loader_segment_descriptor_t, "hsa_ven_amd_loader_segment_descriptor_t" {
        agent, executable, code_object_storage_type, code_object_storage_base,
        code_object_storage_size, code_object_storage_offset, segment_base, segment_size,
    });

    strukt!(p, hsa_kernel_dispatch_packet_t, "hsa_kernel_dispatch_packet_t" {
        header, setup, workgroup_size_x, workgroup_size_y, workgroup_size_z, reserved0,
        grid_size_x, grid_size_y, grid_size_z, private_segment_size, group_segment_size,
        kernel_object, kernarg_address, reserved2, completion_signal,
    });
    strukt!(p, hsa_agent_dispatch_packet_t, "hsa_agent_dispatch_packet_t" {
        header, type_ => "type", reserved0, return_address, arg, reserved2, completion_signal,
    });
    strukt!(p, hsa_barrier_and_packet_t, "hsa_barrier_and_packet_t" {
        header, reserved0, reserved1, dep_signal, reserved2, completion_signal,
    });
    strukt!(p, hsa_barrier_or_packet_t, "hsa_barrier_or_packet_t" {
        header, reserved0, reserved1, dep_signal, reserved2, completion_signal,
    });
    strukt!(p, hsa_amd_vendor_packet_header_t, "hsa_amd_vendor_packet_header_t" {
        header, AmdFormat, reserved,
    });
    strukt!(p, hsa_amd_barrier_value_packet_t, "hsa_amd_barrier_value_packet_t" {
        header, reserved0, signal, value, mask, cond, reserved1, reserved2, reserved3,
        completion_signal,
    });

    strukt!(p, hsa_queue_t, "hsa_queue_t" {
        type_ => "type", features, base_address, doorbell_signal, size, reserved1, id,
    });
    strukt!(p, amd_queue_t, "amd_queue_t" {
        hsa_queue, reserved1, write_dispatch_id, group_segment_aperture_base_hi,
        private_segment_aperture_base_hi, max_cu_id, max_wave_id,
        max_legacy_doorbell_dispatch_id_plus_1, legacy_doorbell_lock, reserved2,
        read_dispatch_id, read_dispatch_id_field_base_byte_offset, compute_tmpring_size,
        scratch_resource_descriptor, scratch_backing_memory_location,
        scratch_backing_memory_byte_size, scratch_wave64_lane_byte_size, queue_properties,
        reserved3, queue_inactive_signal, reserved4,
    });
    strukt!(p, amd_signal_t, "amd_signal_t" {
        kind, value, event_mailbox_ptr, event_id, reserved1, start_ts, end_ts, queue_ptr,
        reserved3,
    });
    p.number(
        "AMD_QUEUE_PROPERTIES_ENABLE_PROFILING".into(),
        "AMD_QUEUE_PROPERTIES_ENABLE_PROFILING".into(),
        AMD_QUEUE_PROPERTIES_ENABLE_PROFILING as u64,
    );
    for (name, rust) in [
        ("AMD_SIGNAL_KIND_INVALID", AMD_SIGNAL_KIND_INVALID),
        ("AMD_SIGNAL_KIND_USER", AMD_SIGNAL_KIND_USER),
        ("AMD_SIGNAL_KIND_DOORBELL", AMD_SIGNAL_KIND_DOORBELL),
        (
            "AMD_SIGNAL_KIND_LEGACY_DOORBELL",
            AMD_SIGNAL_KIND_LEGACY_DOORBELL,
        ),
    ] {
        p.number(name.into(), name.into(), rust as u64);
    }

    // Tables. The 5.2 root table has no tools_/pc_sampling_ext_ slots: its size is the
    // offset of tools_ in the newest layout.
    strukt!(p, ApiTableVersion, "ApiTableVersion" { major_id, minor_id, step_id, reserved });
    p.number(
        "sizeof(HsaApiTable)".into(),
        "sizeof(HsaApiTable)".into(),
        HSA_API_TABLE_SIZE_V1 as u64,
    );
    p.number(
        "sizeof(HsaApiTable) == offsetof(tools_)".into(),
        "sizeof(HsaApiTable)".into(),
        offset_of!(HsaApiTable, tools_) as u64,
    );
    for (field, off) in [
        ("version", offset_of!(HsaApiTable, version)),
        ("core_", offset_of!(HsaApiTable, core_)),
        ("amd_ext_", offset_of!(HsaApiTable, amd_ext_)),
        ("finalizer_ext_", offset_of!(HsaApiTable, finalizer_ext_)),
        ("image_ext_", offset_of!(HsaApiTable, image_ext_)),
    ] {
        p.offset("HsaApiTable", field, off);
    }
    p.layout(
        "FinalizerExtTable",
        size_of::<FinalizerExtTable>(),
        align_of::<FinalizerExtTable>(),
    );
    p.layout(
        "ImageExtTable",
        size_of::<ImageExtTable>(),
        align_of::<ImageExtTable>(),
    );
    for (c, size, fields) in [core_fields!(table_fields), amd_ext_52_fields!(table_fields)] {
        p.number(format!("sizeof({c})"), format!("sizeof({c})"), size as u64);
        for (f, off) in fields {
            p.offset(c, f, off);
        }
    }

    for v in ROCM5_VALUES {
        // C enums are `int`: compare the 32-bit pattern (1U << 31 reads back negative in C).
        p.number(
            format!("{} ({})", v.name, v.ty),
            format!("(unsigned int)({})", v.name),
            v.value as u64,
        );
    }
    for (name, value) in [
        (
            "HSA_STATUS_ERROR_INVALID_MEMORY_POOL",
            HSA_STATUS_ERROR_INVALID_MEMORY_POOL,
        ),
        (
            "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
            HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
        ),
        (
            "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION",
            HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
        ),
        (
            "HSA_STATUS_ERROR_MEMORY_FAULT",
            HSA_STATUS_ERROR_MEMORY_FAULT,
        ),
        ("HSA_STATUS_CU_MASK_REDUCED", HSA_STATUS_CU_MASK_REDUCED),
    ] {
        p.number(name.into(), name.into(), value as u64);
    }

    aqlprofile(&mut p);

    for (name, shape) in signatures!(shapes) {
        p.signature(name, shape);
    }
    // Table-only functions (declared in hsa_api_trace.h, not exported).
    p.signature(
        "hsa_amd_queue_intercept_create",
        <hsa_amd_queue_intercept_create_fn_t as FnShape>::shape(),
    );
    p.signature(
        "hsa_amd_queue_intercept_register",
        <hsa_amd_queue_intercept_register_fn_t as FnShape>::shape(),
    );
    p.signature(
        "hsa_amd_runtime_queue_create_register",
        <hsa_amd_runtime_queue_create_register_fn_t as FnShape>::shape(),
    );
    p
}

/// The aqlprofile extension (`hsa_ven_amd_aqlprofile.h`): structs, enums, constants, the
/// exported functions' signatures and the v1 function table's slots and slot signatures.
fn aqlprofile(p: &mut Probe) {
    strukt!(p, hsa_ven_amd_aqlprofile_event_t, "hsa_ven_amd_aqlprofile_event_t" {
        block_name, block_index, counter_id,
    });
    strukt!(p, hsa_ven_amd_aqlprofile_parameter_t, "hsa_ven_amd_aqlprofile_parameter_t" {
        parameter_name, value,
    });
    strukt!(p, hsa_ven_amd_aqlprofile_descriptor_t, "hsa_ven_amd_aqlprofile_descriptor_t" {
        ptr, size,
    });
    strukt!(p, hsa_ven_amd_aqlprofile_profile_t, "hsa_ven_amd_aqlprofile_profile_t" {
        agent, type_ => "type", events, event_count, parameters, parameter_count, output_buffer,
        command_buffer,
    });
    strukt!(p, hsa_ext_amd_aql_pm4_packet_t, "hsa_ext_amd_aql_pm4_packet_t" {
        header, pm4_command, completion_signal,
    });
    strukt!(p, hsa_ven_amd_aqlprofile_id_query_t, "hsa_ven_amd_aqlprofile_id_query_t" {
        name, id, instance_count,
    });
    // info_data: the C union is anonymous, so its members are named through the struct.
    let info = "hsa_ven_amd_aqlprofile_info_data_t";
    p.layout(
        info,
        size_of::<hsa_ven_amd_aqlprofile_info_data_t>(),
        align_of::<hsa_ven_amd_aqlprofile_info_data_t>(),
    );
    let data = offset_of!(hsa_ven_amd_aqlprofile_info_data_t, data);
    for (c_field, rust) in [
        (
            "sample_id",
            offset_of!(hsa_ven_amd_aqlprofile_info_data_t, sample_id),
        ),
        ("pmc_data", data),
        (
            "pmc_data.event",
            data + offset_of!(hsa_ven_amd_aqlprofile_pmc_data_t, event),
        ),
        (
            "pmc_data.result",
            data + offset_of!(hsa_ven_amd_aqlprofile_pmc_data_t, result),
        ),
        ("trace_data", data),
        (
            "trace_data.size",
            data + offset_of!(hsa_ven_amd_aqlprofile_descriptor_t, size),
        ),
    ] {
        p.offset(info, c_field, rust);
    }
    p.number(
        format!("sizeof({info}::pmc_data)"),
        format!("sizeof((({info}*)0)->pmc_data)"),
        size_of::<hsa_ven_amd_aqlprofile_pmc_data_t>() as u64,
    );

    for v in AQLPROFILE_VALUES {
        p.number(
            format!("{} ({})", v.name, v.ty),
            format!("(unsigned int)({})", v.name),
            v.value as u64,
        );
    }
    for (name, value) in [
        (
            "HSA_AQLPROFILE_VERSION_MAJOR",
            HSA_AQLPROFILE_VERSION_MAJOR as u64,
        ),
        (
            "HSA_AQLPROFILE_VERSION_MINOR",
            HSA_AQLPROFILE_VERSION_MINOR as u64,
        ),
        (
            "hsa_ven_amd_aqlprofile_VERSION_MAJOR",
            hsa_ven_amd_aqlprofile_VERSION_MAJOR as u64,
        ),
        (
            "HSA_VEN_AMD_AQLPROFILE_LEGACY_PM4_PACKET_SIZE",
            HSA_VEN_AMD_AQLPROFILE_LEGACY_PM4_PACKET_SIZE as u64,
        ),
        (
            "HSA_EXTENSION_AMD_AQLPROFILE",
            HSA_EXTENSION_AMD_AQLPROFILE as u64,
        ),
    ] {
        p.number(name.into(), name.into(), value);
    }

    // The callback type: same type as an `Option` of this signature (checked by the compiler),
    // whose shape the probe checks.
    type Callback = unsafe extern "C" fn(
        hsa_ven_amd_aqlprofile_info_type_t,
        *mut hsa_ven_amd_aqlprofile_info_data_t,
        *mut std::ffi::c_void,
    ) -> hsa_status_t;
    let _same: hsa_ven_amd_aqlprofile_data_callback_t = None::<Callback>;
    p.checks.push(Check {
        what: "signature of hsa_ven_amd_aqlprofile_data_callback_t".into(),
        c_expr: "SHAPE((hsa_ven_amd_aqlprofile_data_callback_t)nullptr)".into(),
        rust: join(&<Callback as FnShape>::shape()),
    });

    // Slots of the v1 table, each with the exported function's signature and its own.
    let table = "hsa_ven_amd_aqlprofile_1_00_pfn_t";
    p.layout(
        table,
        size_of::<hsa_ven_amd_aqlprofile_1_00_pfn_t>(),
        align_of::<hsa_ven_amd_aqlprofile_1_00_pfn_t>(),
    );
    macro_rules! slots {
        ($(($f:ident, $t:ty),)*) => {$(
            p.offset(table, stringify!($f), offset_of!(hsa_ven_amd_aqlprofile_1_00_pfn_t, $f));
            p.signature(stringify!($f), <$t as FnShape>::shape());
            p.checks.push(Check {
                what: format!("signature of {table}::{}", stringify!($f)),
                c_expr: format!("SHAPE((decltype({table}::{}))nullptr)", stringify!($f)),
                rust: join(&<$t as FnShape>::shape()),
            });
        )*};
    }
    slots!(
        (
            hsa_ven_amd_aqlprofile_version_major,
            hsa_ven_amd_aqlprofile_version_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_version_minor,
            hsa_ven_amd_aqlprofile_version_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_error_string,
            hsa_ven_amd_aqlprofile_error_string_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_validate_event,
            hsa_ven_amd_aqlprofile_validate_event_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_start,
            hsa_ven_amd_aqlprofile_start_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_stop,
            hsa_ven_amd_aqlprofile_stop_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_read,
            hsa_ven_amd_aqlprofile_stop_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_legacy_get_pm4,
            hsa_ven_amd_aqlprofile_legacy_get_pm4_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_get_info,
            hsa_ven_amd_aqlprofile_get_info_fn_t
        ),
        (
            hsa_ven_amd_aqlprofile_iterate_data,
            hsa_ven_amd_aqlprofile_iterate_data_fn_t
        ),
    );
    p.number(
        format!("sizeof({table}) == sizeof(hsa_ven_amd_aqlprofile_pfn_t)"),
        "sizeof(hsa_ven_amd_aqlprofile_pfn_t)".into(),
        size_of::<hsa_ven_amd_aqlprofile_pfn_t>() as u64,
    );
}

fn join(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn header_dir() -> PathBuf {
    std::env::var_os("HSA_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/include/hsa".into())
}

fn headers_required() -> bool {
    std::env::var("ROCPROF_REPLAY_REQUIRE_HSA_HEADERS").is_ok_and(|v| v == "1")
}

/// Compiles and runs the probe; returns its output lines (`index value`).
fn run_probe(dir: &Path, source: &str) -> Vec<String> {
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("header_layout");
    std::fs::create_dir_all(&work).unwrap();
    let src = work.join("probe.cpp");
    let exe = work.join("probe");
    std::fs::write(&src, source).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-w", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", dir.display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{cxx}`: {e}"));
    assert!(
        out.status.success(),
        "the probe did not compile against {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "the probe failed to run");
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
#[cfg_attr(
    not(have_hsa_headers),
    ignore = "needs Debian's HSA headers: apt-get install -y libhsa-runtime-dev (or set HSA_INCLUDE_DIR)"
)]
fn every_mirrored_layout_matches_the_real_headers() {
    let dir = header_dir();
    assert!(
        dir.join("hsa_api_trace.h").exists(),
        "no HSA headers in {} (apt-get install -y libhsa-runtime-dev, or set HSA_INCLUDE_DIR){}",
        dir.display(),
        if headers_required() {
            "; ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1 requires them"
        } else {
            ""
        }
    );
    let probe = build_probe();
    let lines = run_probe(&dir, &probe.source());
    assert_eq!(
        lines.len(),
        probe.checks.len(),
        "the probe printed a wrong number of lines"
    );
    let mut mismatches = Vec::new();
    for (line, check) in lines.iter().zip(&probe.checks) {
        let (_, c_value) = line.split_once(' ').unwrap();
        if c_value != check.rust {
            mismatches.push(format!(
                "{}: C says {}, Rust says {}",
                check.what, c_value, check.rust
            ));
        }
    }
    eprintln!(
        "compared {} figures with the headers in {}",
        probe.checks.len(),
        dir.display()
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} figures differ from the real headers:\n{}",
        mismatches.len(),
        probe.checks.len(),
        mismatches.join("\n")
    );
}
