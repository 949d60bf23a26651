//! AQL packets (64 bytes; identical in ROCm 5.2 and 6.x) and header helpers.
//!
//! The C packet types are 8-byte aligned; a queue ring is 64-byte aligned, which
//! [`aql_packet_t`] models.

use core::ffi::c_void;

use crate::enums::*;
use crate::layout::{const_assert_layout, const_assert_offsets};
use crate::types::*;

/// Size of every AQL packet in bytes.
pub const AQL_PACKET_SIZE: usize = 64;

/// C `hsa_kernel_dispatch_packet_t`: launches a kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_kernel_dispatch_packet_t {
    /// Packet header (type, barrier bit, fence scopes).
    pub header: u16,
    /// Bits 0..1: number of grid dimensions.
    pub setup: u16,
    /// Work-group size, x.
    pub workgroup_size_x: u16,
    /// Work-group size, y.
    pub workgroup_size_y: u16,
    /// Work-group size, z.
    pub workgroup_size_z: u16,
    /// Reserved, must be 0.
    pub reserved0: u16,
    /// Grid size in work-items, x.
    pub grid_size_x: u32,
    /// Grid size in work-items, y.
    pub grid_size_y: u32,
    /// Grid size in work-items, z.
    pub grid_size_z: u32,
    /// Private memory per work-item in bytes.
    pub private_segment_size: u32,
    /// Group memory per work-group in bytes.
    pub group_segment_size: u32,
    /// Address of the kernel descriptor (`KERNEL_OBJECT` symbol attribute).
    pub kernel_object: u64,
    /// Address of the kernel arguments.
    pub kernarg_address: *mut c_void,
    /// Reserved, must be 0.
    pub reserved2: u64,
    /// Signal decremented by one when the kernel completes (0 = none).
    pub completion_signal: hsa_signal_t,
}
const_assert_layout!(hsa_kernel_dispatch_packet_t, size = 64, align = 8);
const_assert_offsets!(hsa_kernel_dispatch_packet_t {
    header: 0,
    setup: 2,
    workgroup_size_x: 4,
    workgroup_size_y: 6,
    workgroup_size_z: 8,
    reserved0: 10,
    grid_size_x: 12,
    grid_size_y: 16,
    grid_size_z: 20,
    private_segment_size: 24,
    group_segment_size: 28,
    kernel_object: 32,
    kernarg_address: 40,
    reserved2: 48,
    completion_signal: 56,
});

impl Default for hsa_kernel_dispatch_packet_t {
    fn default() -> Self {
        Self {
            header: 0,
            setup: 0,
            workgroup_size_x: 0,
            workgroup_size_y: 0,
            workgroup_size_z: 0,
            reserved0: 0,
            grid_size_x: 0,
            grid_size_y: 0,
            grid_size_z: 0,
            private_segment_size: 0,
            group_segment_size: 0,
            kernel_object: 0,
            kernarg_address: core::ptr::null_mut(),
            reserved2: 0,
            completion_signal: hsa_signal_t::default(),
        }
    }
}

impl hsa_kernel_dispatch_packet_t {
    /// Number of grid dimensions encoded in `setup` (1..=3 in a valid packet).
    pub const fn dimensions(&self) -> u16 {
        (self.setup >> HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS)
            & ((1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS) - 1)
    }
}

/// C `hsa_agent_dispatch_packet_t`: asks an agent to run a built-in function.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_agent_dispatch_packet_t {
    /// Packet header.
    pub header: u16,
    /// Application-defined function code.
    pub type_: u16,
    /// Reserved, must be 0.
    pub reserved0: u32,
    /// Where the agent stores the function's result.
    pub return_address: *mut c_void,
    /// Function arguments.
    pub arg: [u64; 4],
    /// Reserved, must be 0.
    pub reserved2: u64,
    /// Signal decremented by one on completion (0 = none).
    pub completion_signal: hsa_signal_t,
}
const_assert_layout!(hsa_agent_dispatch_packet_t, size = 64, align = 8);
const_assert_offsets!(hsa_agent_dispatch_packet_t {
    header: 0,
    type_: 2,
    reserved0: 4,
    return_address: 8,
    arg: 16,
    reserved2: 48,
    completion_signal: 56,
});

/// C `hsa_barrier_and_packet_t`: waits until every dependency signal is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_barrier_and_packet_t {
    /// Packet header.
    pub header: u16,
    /// Reserved, must be 0.
    pub reserved0: u16,
    /// Reserved, must be 0.
    pub reserved1: u32,
    /// Dependencies; a 0 handle counts as satisfied.
    pub dep_signal: [hsa_signal_t; 5],
    /// Reserved, must be 0.
    pub reserved2: u64,
    /// Signal decremented by one when the barrier resolves (0 = none).
    pub completion_signal: hsa_signal_t,
}
const_assert_layout!(hsa_barrier_and_packet_t, size = 64, align = 8);
const_assert_offsets!(hsa_barrier_and_packet_t {
    header: 0,
    reserved0: 2,
    reserved1: 4,
    dep_signal: 8,
    reserved2: 48,
    completion_signal: 56,
});

/// C `hsa_barrier_or_packet_t`: waits until any dependency signal is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_barrier_or_packet_t {
    /// Packet header.
    pub header: u16,
    /// Reserved, must be 0.
    pub reserved0: u16,
    /// Reserved, must be 0.
    pub reserved1: u32,
    /// Dependencies; 0 handles are ignored.
    pub dep_signal: [hsa_signal_t; 5],
    /// Reserved, must be 0.
    pub reserved2: u64,
    /// Signal decremented by one when the barrier resolves (0 = none).
    pub completion_signal: hsa_signal_t,
}
const_assert_layout!(hsa_barrier_or_packet_t, size = 64, align = 8);
const_assert_offsets!(hsa_barrier_or_packet_t {
    header: 0,
    reserved0: 2,
    reserved1: 4,
    dep_signal: 8,
    reserved2: 48,
    completion_signal: 56,
});

/// C `hsa_amd_vendor_packet_header_t`: header of AMD vendor-specific packets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_vendor_packet_header_t {
    /// Standard packet header (type `HSA_PACKET_TYPE_VENDOR_SPECIFIC`).
    pub header: u16,
    /// AMD packet format (`HSA_AMD_PACKET_TYPE_*`).
    pub AmdFormat: hsa_amd_packet_type8_t,
    /// Reserved, must be 0.
    pub reserved: u8,
}
const_assert_layout!(hsa_amd_vendor_packet_header_t, size = 4, align = 2);
const_assert_offsets!(hsa_amd_vendor_packet_header_t {
    header: 0,
    AmdFormat: 2,
    reserved: 3
});

/// C `hsa_amd_barrier_value_packet_t`: waits until `(signal & mask) cond value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_barrier_value_packet_t {
    /// Vendor header.
    pub header: hsa_amd_vendor_packet_header_t,
    /// Reserved, must be 0.
    pub reserved0: u32,
    /// Signal to watch.
    pub signal: hsa_signal_t,
    /// Value to compare with.
    pub value: hsa_signal_value_t,
    /// Mask applied to the signal value before comparing.
    pub mask: hsa_signal_value_t,
    /// Condition (`HSA_SIGNAL_CONDITION_*`).
    pub cond: hsa_signal_condition32_t,
    /// Reserved, must be 0.
    pub reserved1: u32,
    /// Reserved, must be 0.
    pub reserved2: u64,
    /// Reserved, must be 0.
    pub reserved3: u64,
    /// Signal decremented by one when the condition holds (0 = none).
    pub completion_signal: hsa_signal_t,
}
const_assert_layout!(hsa_amd_barrier_value_packet_t, size = 64, align = 8);
const_assert_offsets!(hsa_amd_barrier_value_packet_t {
    header: 0,
    reserved0: 4,
    signal: 8,
    value: 16,
    mask: 24,
    cond: 32,
    reserved1: 36,
    reserved2: 40,
    reserved3: 48,
    completion_signal: 56,
});

/// Offset of `completion_signal` in every packet type.
pub const PACKET_COMPLETION_SIGNAL_OFFSET: usize = 56;

/// Builds a packet header from its fields (type, barrier bit, acquire and release scopes).
pub const fn packet_header(
    packet_type: hsa_packet_type_t,
    barrier: bool,
    acquire: hsa_fence_scope_t,
    release: hsa_fence_scope_t,
) -> u16 {
    ((packet_type << HSA_PACKET_HEADER_TYPE)
        | ((barrier as u32) << HSA_PACKET_HEADER_BARRIER)
        | (acquire << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
        | (release << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE)) as u16
}

/// Packet type (`HSA_PACKET_TYPE_*`) of a header.
pub const fn header_type(header: u16) -> hsa_packet_type_t {
    (header as u32 >> HSA_PACKET_HEADER_TYPE) & ((1 << HSA_PACKET_HEADER_WIDTH_TYPE) - 1)
}

/// Whether a header has the barrier bit set.
pub const fn header_barrier(header: u16) -> bool {
    (header as u32 >> HSA_PACKET_HEADER_BARRIER) & 1 == 1
}

/// Acquire fence scope (`HSA_FENCE_SCOPE_*`) of a header.
pub const fn header_acquire_scope(header: u16) -> hsa_fence_scope_t {
    (header as u32 >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 0b11
}

/// Release fence scope (`HSA_FENCE_SCOPE_*`) of a header.
pub const fn header_release_scope(header: u16) -> hsa_fence_scope_t {
    (header as u32 >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 0b11
}

/// One 64-byte, 64-byte-aligned slot of a queue ring, viewed as raw bytes.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct aql_packet_t {
    /// The 64 bytes of the packet.
    pub bytes: [u8; AQL_PACKET_SIZE],
}
const_assert_layout!(aql_packet_t, size = 64, align = 64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_every_field() {
        for ty in [
            HSA_PACKET_TYPE_VENDOR_SPECIFIC,
            HSA_PACKET_TYPE_INVALID,
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            HSA_PACKET_TYPE_BARRIER_AND,
            HSA_PACKET_TYPE_AGENT_DISPATCH,
            HSA_PACKET_TYPE_BARRIER_OR,
        ] {
            for barrier in [false, true] {
                for acq in [
                    HSA_FENCE_SCOPE_NONE,
                    HSA_FENCE_SCOPE_AGENT,
                    HSA_FENCE_SCOPE_SYSTEM,
                ] {
                    for rel in [
                        HSA_FENCE_SCOPE_NONE,
                        HSA_FENCE_SCOPE_AGENT,
                        HSA_FENCE_SCOPE_SYSTEM,
                    ] {
                        let h = packet_header(ty, barrier, acq, rel);
                        assert_eq!(header_type(h), ty);
                        assert_eq!(header_barrier(h), barrier);
                        assert_eq!(header_acquire_scope(h), acq);
                        assert_eq!(header_release_scope(h), rel);
                    }
                }
            }
        }
    }

    #[test]
    fn header_bits_match_the_abi_document() {
        // HSA-ABI.md §6: type bits 0..7, barrier bit 8, acquire 9..10, release 11..12.
        let h = packet_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_AGENT,
        );
        assert_eq!(h, 2 | (1 << 8) | (2 << 9) | (1 << 11));
    }

    #[test]
    fn dispatch_dimensions_come_from_setup() {
        let p = hsa_kernel_dispatch_packet_t {
            setup: 3,
            ..Default::default()
        };
        assert_eq!(p.dimensions(), 3);
    }
}
