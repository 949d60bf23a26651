//! The emulator's kernel ABI: the Rust side of `include/hsa_emu_kernel.h`.
//!
//! A kernel is a host function called once per work-group with an [`hsa_emu_workgroup_t`].
//! The loader turns each `__hsa_emu_meta_<name>` record of a code object into a 64-byte
//! [`KernelDescriptor`]; the descriptor's address is the symbol's `KERNEL_OBJECT`, which
//! applications put in dispatch packets and the packet processor reads back.

use std::ffi::c_void;

/// C `hsa_emu_workgroup_t`: what a kernel receives for one work-group.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_emu_workgroup_t {
    /// The dispatch packet's `kernarg_address`.
    pub kernarg: *const c_void,
    /// This work-group's id in each dimension.
    pub group_id: [u32; 3],
    /// Work-items per group.
    pub workgroup_size: [u32; 3],
    /// Work-items in the grid.
    pub grid_size: [u32; 3],
    /// `group_segment_size` bytes, zeroed, private to this group.
    pub group_segment: *mut c_void,
}

/// Entry point of a kernel.
pub type KernelEntry = unsafe extern "C" fn(*const hsa_emu_workgroup_t);

/// `HSA_EMU_KERNEL_ABI_VERSION` of the header.
pub const KERNEL_ABI_VERSION: u32 = 1;

/// Prefix of the metadata records the header emits (never a symbol of the executable).
pub const META_PREFIX: &str = "__hsa_emu_meta_";

/// Prefix reserved for the header: such names are not symbols of the executable.
pub const RESERVED_PREFIX: &str = "__hsa_emu_";

/// C `hsa_emu_kernel_meta_t`: per-kernel metadata exported by a code object.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_emu_kernel_meta_t {
    /// Must be [`KERNEL_ABI_VERSION`].
    pub abi_version: u32,
    /// `sizeof(args_type)`.
    pub kernarg_size: u32,
    /// `alignof(args_type)`.
    pub kernarg_alignment: u32,
    /// Static group memory in bytes.
    pub group_segment_size: u32,
    /// Always 0.
    pub private_segment_size: u32,
    /// Reserved.
    pub reserved: u32,
    /// The kernel.
    pub entry: Option<KernelEntry>,
}

/// Magic value at the start of every [`KernelDescriptor`] ("HSAEMUKD").
pub const KERNEL_DESCRIPTOR_MAGIC: u64 = u64::from_le_bytes(*b"HSAEMUKD");

/// The 64-byte kernel descriptor `KERNEL_OBJECT` points at.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct KernelDescriptor {
    /// [`KERNEL_DESCRIPTOR_MAGIC`].
    pub magic: u64,
    /// The kernel.
    pub entry: KernelEntry,
    /// Kernel-argument bytes.
    pub kernarg_size: u32,
    /// Kernel-argument alignment.
    pub kernarg_alignment: u32,
    /// Static group memory in bytes.
    pub group_segment_size: u32,
    /// Private memory per work-item (always 0).
    pub private_segment_size: u32,
    /// Reserved.
    pub reserved: [u64; 4],
}
const _: () = assert!(std::mem::size_of::<KernelDescriptor>() == 64);

impl KernelDescriptor {
    /// Reads the descriptor at `kernel_object`, or `None` if it is not one of ours.
    ///
    /// # Safety
    /// `kernel_object` must be 0 or an address readable for 64 bytes (dispatch packets carry
    /// the `KERNEL_OBJECT` of a loaded symbol).
    pub unsafe fn from_object(kernel_object: u64) -> Option<KernelDescriptor> {
        if kernel_object == 0 || kernel_object % 64 != 0 {
            return None;
        }
        let p = kernel_object as *const KernelDescriptor;
        // SAFETY: aligned, readable per the caller's contract; the magic is checked before the
        // function pointer is trusted.
        let magic = unsafe { std::ptr::addr_of!((*p).magic).read() };
        if magic != KERNEL_DESCRIPTOR_MAGIC {
            return None;
        }
        // SAFETY: as above; the magic says a loader wrote a whole descriptor here.
        Some(unsafe { p.read() })
    }
}
