//! Handles and plain structs of the HSA API (`hsa.h`, `hsa_ext_amd.h`, `hsa_ven_amd_loader.h`).

use core::ffi::{c_char, c_int, c_void};

use crate::enums::*;
use crate::layout::{const_assert_layout, const_assert_offsets};

/// C `hsa_signal_value_t`: the value of a signal (`int64_t` on 64-bit hosts).
pub type hsa_signal_value_t = i64;
/// C `hsa_queue_type32_t`: a queue type stored in 32 bits.
pub type hsa_queue_type32_t = u32;
/// C `hsa_signal_condition32_t`: a signal condition stored in 32 bits.
pub type hsa_signal_condition32_t = u32;
/// C `hsa_amd_packet_type8_t`: an AMD vendor packet format stored in 8 bits.
pub type hsa_amd_packet_type8_t = u8;
/// C `hsa_file_t`: a POSIX file descriptor.
pub type hsa_file_t = c_int;

macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name {
            /// Opaque handle value; 0 is never a valid object.
            pub handle: u64,
        }
        const_assert_layout!($name, size = 8, align = 8);
    )*};
}

handles! {
    /// C `hsa_agent_t`: an agent (CPU or GPU).
    hsa_agent_t;
    /// C `hsa_cache_t`: a cache of an agent.
    hsa_cache_t;
    /// C `hsa_signal_t`: a signal; on AMD runtimes the handle is the address of an `amd_signal_t`.
    hsa_signal_t;
    /// C `hsa_signal_group_t`: a group of signals.
    hsa_signal_group_t;
    /// C `hsa_region_t`: a memory region of an agent.
    hsa_region_t;
    /// C `hsa_isa_t`: an instruction set architecture.
    hsa_isa_t;
    /// C `hsa_wavefront_t`: a wavefront description.
    hsa_wavefront_t;
    /// C `hsa_code_object_reader_t`: a code-object reader.
    hsa_code_object_reader_t;
    /// C `hsa_executable_t`: an executable.
    hsa_executable_t;
    /// C `hsa_loaded_code_object_t`: a code object loaded into an executable.
    hsa_loaded_code_object_t;
    /// C `hsa_executable_symbol_t`: a symbol of an executable.
    hsa_executable_symbol_t;
    /// C `hsa_code_object_t`: a (deprecated) code object.
    hsa_code_object_t;
    /// C `hsa_callback_data_t`: opaque data for deprecated code-object callbacks.
    hsa_callback_data_t;
    /// C `hsa_code_symbol_t`: a (deprecated) code-object symbol.
    hsa_code_symbol_t;
    /// C `hsa_amd_memory_pool_t`: a memory pool of an agent.
    hsa_amd_memory_pool_t;
    /// C `hsa_amd_vmem_alloc_handle_t`: physical memory created by `hsa_amd_vmem_handle_create` (ROCm 6.x).
    hsa_amd_vmem_alloc_handle_t;
    /// C `hsa_ext_image_t`: an image (image extension; only passed through).
    hsa_ext_image_t;
}

/// C `hsa_dim3_t`: three 32-bit dimensions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_dim3_t {
    /// X dimension.
    pub x: u32,
    /// Y dimension.
    pub y: u32,
    /// Z dimension.
    pub z: u32,
}
const_assert_layout!(hsa_dim3_t, size = 12, align = 4);

/// C `hsa_pitched_ptr_t`: a pointer with row and slice pitch, for rectangular copies.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_pitched_ptr_t {
    /// Base address.
    pub base: *mut c_void,
    /// Bytes per row.
    pub pitch: usize,
    /// Bytes per slice.
    pub slice: usize,
}
const_assert_layout!(hsa_pitched_ptr_t, size = 24, align = 8);

/// C `hsa_amd_profiling_dispatch_time_t`: start and end ticks of a dispatch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_profiling_dispatch_time_t {
    /// Tick at which the dispatch started.
    pub start: u64,
    /// Tick at which the dispatch ended.
    pub end: u64,
}
const_assert_layout!(hsa_amd_profiling_dispatch_time_t, size = 16, align = 8);

/// C `hsa_amd_profiling_async_copy_time_t`: start and end ticks of an asynchronous copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_profiling_async_copy_time_t {
    /// Tick at which the copy started.
    pub start: u64,
    /// Tick at which the copy ended.
    pub end: u64,
}
const_assert_layout!(hsa_amd_profiling_async_copy_time_t, size = 16, align = 8);

/// C `hsa_amd_pointer_info_t`: what the runtime knows about an address.
///
/// The caller sets `size` to `size_of::<hsa_amd_pointer_info_t>()` before the query.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_amd_pointer_info_t {
    /// Size of this struct in bytes, set by the caller.
    pub size: u32,
    /// Kind of allocation (`HSA_EXT_POINTER_TYPE_*`).
    pub type_: hsa_amd_pointer_type_t,
    /// Base address of the allocation as seen by the owning agent.
    pub agentBaseAddress: *mut c_void,
    /// Base address of the allocation as seen by the host.
    pub hostBaseAddress: *mut c_void,
    /// Size of the allocation in bytes.
    pub sizeInBytes: usize,
    /// Data attached with `hsa_amd_pointer_info_set_userdata`.
    pub userData: *mut c_void,
    /// Agent that owns the allocation.
    pub agentOwner: hsa_agent_t,
    /// Global flags of the pool the allocation came from (`HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_*`).
    pub global_flags: u32,
}
const_assert_layout!(hsa_amd_pointer_info_t, size = 56, align = 8);
const_assert_offsets!(hsa_amd_pointer_info_t {
    size: 0,
    type_: 4,
    agentBaseAddress: 8,
    hostBaseAddress: 16,
    sizeInBytes: 24,
    userData: 32,
    agentOwner: 40,
    global_flags: 48,
});

impl Default for hsa_amd_pointer_info_t {
    fn default() -> Self {
        Self {
            size: core::mem::size_of::<Self>() as u32,
            type_: HSA_EXT_POINTER_TYPE_UNKNOWN,
            agentBaseAddress: core::ptr::null_mut(),
            hostBaseAddress: core::ptr::null_mut(),
            sizeInBytes: 0,
            userData: core::ptr::null_mut(),
            agentOwner: hsa_agent_t::default(),
            global_flags: 0,
        }
    }
}

/// C `hsa_amd_memory_pool_link_info_t`: properties of the link between an agent and a pool.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_memory_pool_link_info_t {
    /// Minimum transfer latency (ns).
    pub min_latency: u32,
    /// Maximum transfer latency (ns).
    pub max_latency: u32,
    /// Minimum link bandwidth (MB/s).
    pub min_bandwidth: u32,
    /// Maximum link bandwidth (MB/s).
    pub max_bandwidth: u32,
    /// Whether 32-bit atomics are supported across the link.
    pub atomic_support_32bit: bool,
    /// Whether 64-bit atomics are supported across the link.
    pub atomic_support_64bit: bool,
    /// Whether the link is cache coherent.
    pub coherent_support: bool,
    /// Kind of link (`HSA_AMD_LINK_INFO_TYPE_*`).
    pub link_type: hsa_amd_link_info_type_t,
    /// NUMA distance.
    pub numa_distance: u32,
}
const_assert_layout!(hsa_amd_memory_pool_link_info_t, size = 28, align = 4);

/// C `hsa_amd_svm_attribute_pair_t`: one attribute of a shared-virtual-memory range.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_svm_attribute_pair_t {
    /// Attribute id (`hsa_amd_svm_attribute_t`).
    pub attribute: u64,
    /// Attribute value.
    pub value: u64,
}
const_assert_layout!(hsa_amd_svm_attribute_pair_t, size = 16, align = 8);

/// C `hsa_amd_ipc_memory_t`: an inter-process memory handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_ipc_memory_t {
    /// Opaque handle words.
    pub handle: [u32; 8],
}
const_assert_layout!(hsa_amd_ipc_memory_t, size = 32, align = 4);

/// C `hsa_amd_ipc_signal_t`: an inter-process signal handle.
pub type hsa_amd_ipc_signal_t = hsa_amd_ipc_memory_t;

/// C `hsa_amd_memory_access_desc_t`: an access permission for one agent (ROCm 6.x vmem API).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_memory_access_desc_t {
    /// Permission (`HSA_ACCESS_PERMISSION_*`).
    pub permissions: hsa_access_permission_t,
    /// Agent the permission applies to.
    pub agent_handle: hsa_agent_t,
}
const_assert_layout!(hsa_amd_memory_access_desc_t, size = 16, align = 8);

/// C `hsa_ven_amd_loader_segment_descriptor_t`: one loaded segment, as the loader extension reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_ven_amd_loader_segment_descriptor_t {
    /// Agent the segment is loaded for.
    pub agent: hsa_agent_t,
    /// Executable the segment belongs to.
    pub executable: hsa_executable_t,
    /// Where the code object came from (`HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_*`).
    pub code_object_storage_type: hsa_ven_amd_loader_code_object_storage_type_t,
    /// Base of the code object's storage.
    pub code_object_storage_base: *const c_void,
    /// Size of the code object's storage.
    pub code_object_storage_size: usize,
    /// Offset of the code object within its storage.
    pub code_object_storage_offset: usize,
    /// Base address of the loaded segment.
    pub segment_base: *const c_void,
    /// Size of the loaded segment.
    pub segment_size: usize,
}
const_assert_layout!(
    hsa_ven_amd_loader_segment_descriptor_t,
    size = 64,
    align = 8
);

/// C `hsa_ext_image_descriptor_t` (image extension): only ever passed by pointer here.
#[repr(C)]
pub struct hsa_ext_image_descriptor_t {
    _opaque: [u8; 0],
}

/// C `hsa_amd_image_descriptor_t` (image extension): only ever passed by pointer here.
#[repr(C)]
pub struct hsa_amd_image_descriptor_t {
    _opaque: [u8; 0],
}

/// C `hsa_amd_event_t`: a system event delivered to `hsa_amd_register_system_event_handler` callbacks.
#[repr(C)]
pub struct hsa_amd_event_t {
    _opaque: [u8; 0],
}

/// C `hsa_amd_signal_handler`: callback of `hsa_amd_signal_async_handler`; returns whether to stay registered.
pub type hsa_amd_signal_handler =
    Option<unsafe extern "C" fn(value: hsa_signal_value_t, arg: *mut c_void) -> bool>;
/// C `hsa_amd_system_event_callback_t`: callback for system events.
pub type hsa_amd_system_event_callback_t =
    Option<unsafe extern "C" fn(event: *const hsa_amd_event_t, data: *mut c_void) -> hsa_status_t>;
/// C `hsa_amd_deallocation_callback_t`: called when a registered allocation is freed.
pub type hsa_amd_deallocation_callback_t =
    Option<unsafe extern "C" fn(ptr: *mut c_void, user_data: *mut c_void)>;

/// C `hsa_amd_tool_event_t` (ROCm 6.1+): a pointer to an event record, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_amd_tool_event_t {
    /// Pointer to the event record; its first field tells the event kind.
    pub event: *const c_void,
}
const_assert_layout!(hsa_amd_tool_event_t, size = 8, align = 8);

/// C `hsa_amd_tool_event` (ROCm 6.1+): a tool callback for runtime events.
pub type hsa_amd_tool_event =
    Option<unsafe extern "C" fn(event: hsa_amd_tool_event_t) -> hsa_status_t>;

/// Pointer to a NUL-terminated C string, as the runtime passes names around.
pub type c_str_ptr = *const c_char;
