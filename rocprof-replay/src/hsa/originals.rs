//! The runtime functions the engine calls, saved from the table before any hook is installed.

use rocprof_replay_sys::*;

use crate::error::Error;

/// Runtime functions, read from the live table in `OnLoad` (originals, never our hooks).
#[derive(Clone, Copy)]
pub(crate) struct Originals {
    pub(crate) iterate_agents: hsa_iterate_agents_fn_t,
    pub(crate) agent_get_info: hsa_agent_get_info_fn_t,
    pub(crate) system_get_info: hsa_system_get_info_fn_t,
    pub(crate) queue_create: hsa_queue_create_fn_t,
    pub(crate) queue_destroy: hsa_queue_destroy_fn_t,
    pub(crate) queue_load_read_index: hsa_queue_load_read_index_scacquire_fn_t,
    pub(crate) queue_load_write_index: hsa_queue_load_write_index_scacquire_fn_t,
    pub(crate) queue_add_write_index: hsa_queue_add_write_index_scacq_screl_fn_t,
    pub(crate) signal_create: hsa_signal_create_fn_t,
    pub(crate) signal_destroy: hsa_signal_destroy_fn_t,
    pub(crate) signal_store: hsa_signal_store_screlease_fn_t,
    pub(crate) signal_subtract: hsa_signal_subtract_screlease_fn_t,
    pub(crate) signal_add: hsa_signal_add_screlease_fn_t,
    pub(crate) signal_wait: hsa_signal_wait_scacquire_fn_t,
    pub(crate) signal_load: hsa_signal_load_scacquire_fn_t,
    pub(crate) memory_allocate: hsa_memory_allocate_fn_t,
    pub(crate) memory_free: hsa_memory_free_fn_t,
    pub(crate) memory_copy: hsa_memory_copy_fn_t,
    pub(crate) executable_freeze: hsa_executable_freeze_fn_t,
    pub(crate) executable_destroy: hsa_executable_destroy_fn_t,
    pub(crate) executable_iterate_agent_symbols: hsa_executable_iterate_agent_symbols_fn_t,
    pub(crate) executable_iterate_symbols: hsa_executable_iterate_symbols_fn_t,
    pub(crate) symbol_get_info: hsa_executable_symbol_get_info_fn_t,
    pub(crate) pool_get_info: hsa_amd_memory_pool_get_info_fn_t,
    pub(crate) agent_iterate_pools: hsa_amd_agent_iterate_memory_pools_fn_t,
    pub(crate) pool_allocate: hsa_amd_memory_pool_allocate_fn_t,
    pub(crate) pool_free: hsa_amd_memory_pool_free_fn_t,
    pub(crate) pointer_info: hsa_amd_pointer_info_fn_t,
    pub(crate) memory_fill: hsa_amd_memory_fill_fn_t,
    pub(crate) memory_lock: Option<hsa_amd_memory_lock_fn_t>,
    pub(crate) memory_lock_to_pool: Option<hsa_amd_memory_lock_to_pool_fn_t>,
    pub(crate) memory_unlock: Option<hsa_amd_memory_unlock_fn_t>,
    pub(crate) async_copy: hsa_amd_memory_async_copy_fn_t,
    pub(crate) async_copy_rect: Option<hsa_amd_memory_async_copy_rect_fn_t>,
    /// Only in tables of ROCm 5.6 and later.
    pub(crate) async_copy_on_engine: Option<hsa_amd_memory_async_copy_on_engine_fn_t>,
    pub(crate) async_copy_time: hsa_amd_profiling_get_async_copy_time_fn_t,
    pub(crate) async_copy_profiling: hsa_amd_profiling_async_copy_enable_fn_t,
    pub(crate) signal_wait_any: Option<hsa_amd_signal_wait_any_fn_t>,
    pub(crate) agents_allow_access: hsa_amd_agents_allow_access_fn_t,
    pub(crate) profiler_enable: hsa_amd_profiling_set_profiler_enabled_fn_t,
    pub(crate) dispatch_time: hsa_amd_profiling_get_dispatch_time_fn_t,
    pub(crate) intercept_create: hsa_amd_queue_intercept_create_fn_t,
    pub(crate) intercept_register: hsa_amd_queue_intercept_register_fn_t,
    /// vmem functions exist only in the 6.x table.
    pub(crate) vmem_handle_create: Option<hsa_amd_vmem_handle_create_fn_t>,
    pub(crate) vmem_handle_release: Option<hsa_amd_vmem_handle_release_fn_t>,
    pub(crate) vmem_map: Option<hsa_amd_vmem_map_fn_t>,
    pub(crate) vmem_unmap: Option<hsa_amd_vmem_unmap_fn_t>,
    pub(crate) vmem_import: Option<hsa_amd_vmem_import_shareable_handle_fn_t>,
    pub(crate) vmem_export: Option<hsa_amd_vmem_export_shareable_handle_fn_t>,
    pub(crate) vmem_retain: Option<hsa_amd_vmem_retain_alloc_handle_fn_t>,
    /// Memory another process or GPU writes: IPC attachments and graphics interop buffers.
    pub(crate) ipc_create: Option<hsa_amd_ipc_memory_create_fn_t>,
    pub(crate) export_dmabuf: Option<hsa_amd_portable_export_dmabuf_fn_t>,
    pub(crate) export_dmabuf_v2: Option<hsa_amd_portable_export_dmabuf_v2_fn_t>,
    pub(crate) ipc_attach: Option<hsa_amd_ipc_memory_attach_fn_t>,
    pub(crate) ipc_detach: Option<hsa_amd_ipc_memory_detach_fn_t>,
    pub(crate) interop_map: Option<hsa_amd_interop_map_buffer_fn_t>,
    pub(crate) interop_unmap: Option<hsa_amd_interop_unmap_buffer_fn_t>,
    /// System memory made reachable by a GPU (shared virtual memory).
    pub(crate) svm_attributes_set: Option<hsa_amd_svm_attributes_set_fn_t>,
    /// `hsa_system_get_major_extension_table`: the AQL profile extension (counters).
    pub(crate) get_extension_table: Option<hsa_system_get_major_extension_table_fn_t>,
    /// The loader functions the device compare kernels are loaded with ([`super::compare`]);
    /// without one of them the host compares.
    pub(crate) loader: Option<LoaderFns>,
    /// Code object readers and loads, hooked to read the kernels' argument layouts.
    pub(crate) reader_create_from_memory: Option<hsa_code_object_reader_create_from_memory_fn_t>,
    pub(crate) reader_create_from_file: Option<hsa_code_object_reader_create_from_file_fn_t>,
    pub(crate) reader_destroy: Option<hsa_code_object_reader_destroy_fn_t>,
    pub(crate) load_agent_code_object: Option<hsa_executable_load_agent_code_object_fn_t>,
    pub(crate) load_program_code_object: Option<hsa_executable_load_program_code_object_fn_t>,
}

/// The code-object loader's functions (`hsa_code_object_reader_*`, `hsa_executable_*_alt`).
#[derive(Clone, Copy)]
pub(crate) struct LoaderFns {
    pub(crate) reader_create_from_memory: hsa_code_object_reader_create_from_memory_fn_t,
    pub(crate) reader_destroy: hsa_code_object_reader_destroy_fn_t,
    pub(crate) executable_create_alt: hsa_executable_create_alt_fn_t,
    pub(crate) load_agent_code_object: hsa_executable_load_agent_code_object_fn_t,
    pub(crate) get_symbol_by_name: hsa_executable_get_symbol_by_name_fn_t,
}

impl LoaderFns {
    /// Reads the loader's functions; `None` when one is missing.
    ///
    /// # Safety
    /// `core` must be the live core table handed to `OnLoad`.
    unsafe fn read(core: *const ApiTableVersion) -> Option<LoaderFns> {
        use slots::core as c;
        // SAFETY: forwarded caller contract for every read below.
        unsafe {
            Some(LoaderFns {
                reader_create_from_memory: optional(
                    c::CODE_OBJECT_READER_CREATE_FROM_MEMORY,
                    core,
                )?,
                reader_destroy: optional(c::CODE_OBJECT_READER_DESTROY, core)?,
                executable_create_alt: optional(c::EXECUTABLE_CREATE_ALT, core)?,
                load_agent_code_object: optional(c::EXECUTABLE_LOAD_AGENT_CODE_OBJECT, core)?,
                get_symbol_by_name: optional(c::EXECUTABLE_GET_SYMBOL_BY_NAME, core)?,
            })
        }
    }
}

/// Reads a required slot.
///
/// # Safety
/// `table` must be a live table of the slot's kind.
unsafe fn required<F: Copy>(slot: Slot<F>, table: *const ApiTableVersion) -> Result<F, Error> {
    // SAFETY: forwarded caller contract.
    unsafe { slot.read(table) }?.ok_or(Error::MissingFunction(slot.name()))
}

/// Reads an optional slot (absent in older layouts).
///
/// # Safety
/// As [`required`].
unsafe fn optional<F: Copy>(slot: Slot<F>, table: *const ApiTableVersion) -> Option<F> {
    // SAFETY: forwarded caller contract.
    unsafe { slot.read(table) }.ok().flatten()
}

impl Originals {
    /// Reads every function from the live tables.
    ///
    /// # Safety
    /// `core` and `amd` must be the live tables handed to `OnLoad`.
    pub(crate) unsafe fn read(
        core: *const ApiTableVersion,
        amd: *const ApiTableVersion,
    ) -> Result<Originals, Error> {
        use slots::amd_ext as a;
        use slots::core as c;
        // SAFETY: forwarded caller contract for every read below.
        unsafe {
            Ok(Originals {
                iterate_agents: required(c::ITERATE_AGENTS, core)?,
                agent_get_info: required(c::AGENT_GET_INFO, core)?,
                system_get_info: required(c::SYSTEM_GET_INFO, core)?,
                queue_create: required(c::QUEUE_CREATE, core)?,
                queue_destroy: required(c::QUEUE_DESTROY, core)?,
                queue_load_read_index: required(c::QUEUE_LOAD_READ_INDEX_SCACQUIRE, core)?,
                queue_load_write_index: required(c::QUEUE_LOAD_WRITE_INDEX_SCACQUIRE, core)?,
                queue_add_write_index: required(c::QUEUE_ADD_WRITE_INDEX_SCACQ_SCREL, core)?,
                signal_create: required(c::SIGNAL_CREATE, core)?,
                signal_destroy: required(c::SIGNAL_DESTROY, core)?,
                signal_store: required(c::SIGNAL_STORE_SCRELEASE, core)?,
                signal_subtract: required(c::SIGNAL_SUBTRACT_SCRELEASE, core)?,
                signal_add: required(c::SIGNAL_ADD_SCRELEASE, core)?,
                signal_wait: required(c::SIGNAL_WAIT_SCACQUIRE, core)?,
                signal_load: required(c::SIGNAL_LOAD_SCACQUIRE, core)?,
                memory_allocate: required(c::MEMORY_ALLOCATE, core)?,
                memory_free: required(c::MEMORY_FREE, core)?,
                memory_copy: required(c::MEMORY_COPY, core)?,
                executable_freeze: required(c::EXECUTABLE_FREEZE, core)?,
                executable_destroy: required(c::EXECUTABLE_DESTROY, core)?,
                executable_iterate_agent_symbols: required(
                    c::EXECUTABLE_ITERATE_AGENT_SYMBOLS,
                    core,
                )?,
                executable_iterate_symbols: required(c::EXECUTABLE_ITERATE_SYMBOLS, core)?,
                symbol_get_info: required(c::EXECUTABLE_SYMBOL_GET_INFO, core)?,
                pool_get_info: required(a::MEMORY_POOL_GET_INFO, amd)?,
                agent_iterate_pools: required(a::AGENT_ITERATE_MEMORY_POOLS, amd)?,
                pool_allocate: required(a::MEMORY_POOL_ALLOCATE, amd)?,
                pool_free: required(a::MEMORY_POOL_FREE, amd)?,
                pointer_info: required(a::POINTER_INFO, amd)?,
                memory_fill: required(a::MEMORY_FILL, amd)?,
                memory_lock: optional(a::MEMORY_LOCK, amd),
                memory_lock_to_pool: optional(a::MEMORY_LOCK_TO_POOL, amd),
                memory_unlock: optional(a::MEMORY_UNLOCK, amd),
                async_copy: required(a::MEMORY_ASYNC_COPY, amd)?,
                async_copy_rect: optional(a::MEMORY_ASYNC_COPY_RECT, amd),
                async_copy_on_engine: optional(a::MEMORY_ASYNC_COPY_ON_ENGINE, amd),
                async_copy_time: required(a::PROFILING_GET_ASYNC_COPY_TIME, amd)?,
                async_copy_profiling: required(a::PROFILING_ASYNC_COPY_ENABLE, amd)?,
                signal_wait_any: optional(a::SIGNAL_WAIT_ANY, amd),
                agents_allow_access: required(a::AGENTS_ALLOW_ACCESS, amd)?,
                profiler_enable: required(a::PROFILING_SET_PROFILER_ENABLED, amd)?,
                dispatch_time: required(a::PROFILING_GET_DISPATCH_TIME, amd)?,
                intercept_create: required(a::QUEUE_INTERCEPT_CREATE, amd)?,
                intercept_register: required(a::QUEUE_INTERCEPT_REGISTER, amd)?,
                vmem_handle_create: optional(a::VMEM_HANDLE_CREATE, amd),
                vmem_handle_release: optional(a::VMEM_HANDLE_RELEASE, amd),
                vmem_map: optional(a::VMEM_MAP, amd),
                vmem_unmap: optional(a::VMEM_UNMAP, amd),
                vmem_import: optional(a::VMEM_IMPORT_SHAREABLE_HANDLE, amd),
                vmem_export: optional(a::VMEM_EXPORT_SHAREABLE_HANDLE, amd),
                vmem_retain: optional(a::VMEM_RETAIN_ALLOC_HANDLE, amd),
                ipc_create: optional(a::IPC_MEMORY_CREATE, amd),
                export_dmabuf: optional(a::PORTABLE_EXPORT_DMABUF, amd),
                export_dmabuf_v2: optional(a::PORTABLE_EXPORT_DMABUF_V2, amd),
                ipc_attach: optional(a::IPC_MEMORY_ATTACH, amd),
                ipc_detach: optional(a::IPC_MEMORY_DETACH, amd),
                interop_map: optional(a::INTEROP_MAP_BUFFER, amd),
                interop_unmap: optional(a::INTEROP_UNMAP_BUFFER, amd),
                svm_attributes_set: optional(a::SVM_ATTRIBUTES_SET, amd),
                get_extension_table: optional(c::SYSTEM_GET_MAJOR_EXTENSION_TABLE, core),
                loader: LoaderFns::read(core),
                reader_create_from_memory: optional(c::CODE_OBJECT_READER_CREATE_FROM_MEMORY, core),
                reader_create_from_file: optional(c::CODE_OBJECT_READER_CREATE_FROM_FILE, core),
                reader_destroy: optional(c::CODE_OBJECT_READER_DESTROY, core),
                load_agent_code_object: optional(c::EXECUTABLE_LOAD_AGENT_CODE_OBJECT, core),
                load_program_code_object: optional(c::EXECUTABLE_LOAD_PROGRAM_CODE_OBJECT, core),
            })
        }
    }
}
