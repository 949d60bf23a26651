//! `hsa_queue_t` and the AMD queue (`amd_queue_t`) that embeds it.

use core::ffi::c_void;

use crate::layout::{const_assert_layout, const_assert_offsets};
use crate::types::*;

/// C `hsa_queue_t`: a user-mode queue (ring of AQL packets plus doorbell).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_queue_t {
    /// Queue type (`HSA_QUEUE_TYPE_*`).
    pub type_: hsa_queue_type32_t,
    /// Queue features (`HSA_QUEUE_FEATURE_*` bits).
    pub features: u32,
    /// Start of the packet ring (`size` packets of 64 bytes).
    pub base_address: *mut c_void,
    /// Doorbell: producers store the last written packet index here.
    pub doorbell_signal: hsa_signal_t,
    /// Ring size in packets (a power of two).
    pub size: u32,
    /// Reserved, must be 0.
    pub reserved1: u32,
    /// Process-unique queue id.
    pub id: u64,
}
const_assert_layout!(hsa_queue_t, size = 40, align = 8);
const_assert_offsets!(hsa_queue_t {
    type_: 0,
    features: 4,
    base_address: 8,
    doorbell_signal: 16,
    size: 24,
    reserved1: 28,
    id: 32,
});

/// C `amd_queue_properties32_t` bit: the queue records dispatch timestamps.
pub const AMD_QUEUE_PROPERTIES_ENABLE_PROFILING: u32 = 1 << 3;

/// C `amd_queue_t`: the AMD queue descriptor; `hsa_queue_t*` handed out by ROCr points at one.
///
/// Only the fields the project reads are named; the rest are reserved words of the same size.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct amd_queue_t {
    /// The public queue.
    pub hsa_queue: hsa_queue_t,
    /// Reserved.
    pub reserved1: [u32; 4],
    /// Write index (packets reserved by producers).
    pub write_dispatch_id: u64,
    /// Group segment aperture, high bits.
    pub group_segment_aperture_base_hi: u32,
    /// Private segment aperture, high bits.
    pub private_segment_aperture_base_hi: u32,
    /// Highest compute-unit id.
    pub max_cu_id: u32,
    /// Highest wave id.
    pub max_wave_id: u32,
    /// Legacy doorbell bookkeeping.
    pub max_legacy_doorbell_dispatch_id_plus_1: u64,
    /// Legacy doorbell lock.
    pub legacy_doorbell_lock: u32,
    /// Reserved.
    pub reserved2: [u32; 9],
    /// Read index (packets consumed by the packet processor).
    pub read_dispatch_id: u64,
    /// Byte offset of `read_dispatch_id` in this struct.
    pub read_dispatch_id_field_base_byte_offset: u32,
    /// Scratch ring size register.
    pub compute_tmpring_size: u32,
    /// Scratch resource descriptor.
    pub scratch_resource_descriptor: [u32; 4],
    /// Scratch backing memory address.
    pub scratch_backing_memory_location: u64,
    /// Scratch backing memory size.
    pub scratch_backing_memory_byte_size: u64,
    /// Scratch bytes per lane.
    pub scratch_wave64_lane_byte_size: u32,
    /// Queue properties (`AMD_QUEUE_PROPERTIES_*` bits).
    pub queue_properties: u32,
    /// Reserved.
    pub reserved3: [u32; 2],
    /// Signal the runtime sets when the queue becomes inactive.
    pub queue_inactive_signal: hsa_signal_t,
    /// Reserved.
    pub reserved4: [u32; 14],
}
const_assert_layout!(amd_queue_t, size = 256, align = 64);
const_assert_offsets!(amd_queue_t {
    hsa_queue: 0,
    write_dispatch_id: 56,
    max_legacy_doorbell_dispatch_id_plus_1: 80,
    legacy_doorbell_lock: 88,
    read_dispatch_id: 128,
    read_dispatch_id_field_base_byte_offset: 136,
    scratch_resource_descriptor: 144,
    queue_properties: 180,
    queue_inactive_signal: 192,
});
