//! Built-in shadows of the ROCclr blit kernels (`__amd_rocclr_*`), so that `hipMemset*` and
//! `hipMemcpy*` work without a shadow library.
//!
//! At initialisation ROCclr compiles its blit program with comgr and loads the code object like
//! any other. The kernels and their kernarg layouts below are those of ROCm 5.2 (read off the
//! code object's `NT_AMDGPU_METADATA` note); their semantics are those of the device library's
//! `__amd_*` implementations (`opencl.bc` of `rocm-device-libs` 5.2), reproduced per work-item:
//!
//! | kernel | per work-item with global id `(x, y, z)` |
//! |---|---|
//! | `fillBufferAligned` | `x < size`: write the `patternSize` elements of `pattern` at element `x * patternSize + offset` of the first non-null buffer among `bufULong`, `bufUInt`, `bufUShort`, `bufUChar` |
//! | `fillBufferAligned2D` | `x < width`, `y < height`: the same at element `y * pitch + x + offset` |
//! | `copyBuffer` | `x < size`: `remain == 8`: byte `x`; else `x < size - 1`: 32-bit word `x`; else bytes `4x .. 4x + remain` (of `src + srcOrigin` to `dst + dstOrigin`) |
//! | `copyBufferAligned` | `x < size`: element `x + srcOrigin` to `x + dstOrigin`, 16-byte elements if `alignment == 16`, else 32-bit |
//! | `copyBufferRect` | inside `size.xyz`: byte at `rect.z + x + y * rect.x + z * rect.y` (each side its own rect) |
//! | `copyBufferRectAligned` | the same in 16-byte elements if `size.w == 16`, else 32-bit |
//! | `streamOpsWrite` | store `value` to `ptrInt` (32-bit) if non-null, else to `ptrUlong` (64-bit) |
//! | `streamOpsWait` | wait until `(*ptr & mask) >= value` (flags 0), `== value` (1), `*ptr & mask & value != 0` (2), `(*ptr \| value) & mask != mask` (3) |
//!
//! The global id includes the dispatch's global offset (the `hidden_global_offset_*`
//! arguments), as OpenCL's `get_global_id` does. Image kernels (`fillImage`, `copyImage`,
//! `copyBufferToImage`, ...) have no built-in shadow: the emulated agent has no images, and a
//! dispatch of one fails like any kernel without a shadow.
//!
//! Before a built-in shadow is used for a kernel, its explicit arguments and global-offset
//! arguments are checked against the code object's metadata, so a ROCclr with another layout
//! gets "no shadow" instead of a wrong copy.
//!
//! `streamOpsWait` polls (sleeping 20 µs to 1 ms between looks) for as long as the condition
//! is false, like the GPU kernel it replaces: it is the application's wait.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::kernel_abi::{KernelEntry, hsa_emu_workgroup_t};
use crate::loader::amdgpu::KernelMeta;

/// A built-in shadow: its entry point and the argument layout it was written for.
pub(crate) struct BuiltIn {
    /// The kernel's name in the code object.
    pub(crate) name: &'static str,
    /// The entry point (the hsa-emu kernel ABI).
    pub(crate) entry: KernelEntry,
    /// `(offset, size)` of each explicit argument.
    pub(crate) explicit: &'static [(u64, u64)],
    /// Offset of `hidden_global_offset_x` (`_y` and `_z` follow), if the kernel reads it.
    pub(crate) global_offset: Option<u64>,
}

impl BuiltIn {
    /// Checks the code object's metadata against the layout this shadow reads.
    pub(crate) fn check(&self, meta: &KernelMeta) -> Result<(), String> {
        let explicit: Vec<(u64, u64)> = meta
            .args
            .iter()
            .filter(|a| !a.is_hidden())
            .map(|a| (a.offset, a.size))
            .collect();
        if explicit != self.explicit {
            return Err(format!(
                "the built-in shadow of {} reads explicit arguments {:?} (offset, size), the code object has {:?}",
                self.name, self.explicit, explicit
            ));
        }
        if let Some(at) = self.global_offset {
            for (i, axis) in ["x", "y", "z"].iter().enumerate() {
                let kind = format!("hidden_global_offset_{axis}");
                let found = meta.args.iter().find(|a| a.value_kind == kind);
                if found.map(|a| (a.offset, a.size)) != Some((at + 8 * i as u64, 8)) {
                    return Err(format!(
                        "the built-in shadow of {} reads {kind} at offset {}, the code object has {:?}",
                        self.name,
                        at + 8 * i as u64,
                        found.map(|a| a.offset)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The built-in shadow named `name`, if there is one.
pub(crate) fn find(name: &str) -> Option<&'static BuiltIn> {
    BUILT_INS.iter().find(|b| b.name == name)
}

/// Every built-in shadow.
pub(crate) static BUILT_INS: &[BuiltIn] = &[
    BuiltIn {
        name: "__amd_rocclr_fillBufferAligned",
        entry: fill_buffer_aligned,
        explicit: &[
            (0, 8),
            (8, 8),
            (16, 8),
            (24, 8),
            (32, 8),
            (40, 4),
            (48, 8),
            (56, 8),
        ],
        global_offset: Some(64),
    },
    BuiltIn {
        name: "__amd_rocclr_fillBufferAligned2D",
        entry: fill_buffer_aligned_2d,
        explicit: &[
            (0, 8),
            (8, 8),
            (16, 8),
            (24, 8),
            (32, 8),
            (40, 4),
            (48, 8),
            (56, 8),
            (64, 8),
            (72, 8),
        ],
        global_offset: Some(80),
    },
    BuiltIn {
        name: "__amd_rocclr_copyBuffer",
        entry: copy_buffer,
        explicit: &[(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4)],
        global_offset: Some(48),
    },
    BuiltIn {
        name: "__amd_rocclr_copyBufferAligned",
        entry: copy_buffer_aligned,
        explicit: &[(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4)],
        global_offset: Some(48),
    },
    BuiltIn {
        name: "__amd_rocclr_copyBufferRect",
        entry: copy_buffer_rect,
        explicit: &[(0, 8), (8, 8), (32, 32), (64, 32), (96, 32)],
        global_offset: Some(128),
    },
    BuiltIn {
        name: "__amd_rocclr_copyBufferRectAligned",
        entry: copy_buffer_rect_aligned,
        explicit: &[(0, 8), (8, 8), (32, 32), (64, 32), (96, 32)],
        global_offset: Some(128),
    },
    BuiltIn {
        name: "__amd_rocclr_streamOpsWrite",
        entry: stream_ops_write,
        explicit: &[(0, 8), (8, 8), (16, 8), (24, 8)],
        global_offset: None,
    },
    BuiltIn {
        name: "__amd_rocclr_streamOpsWait",
        entry: stream_ops_wait,
        explicit: &[(0, 8), (8, 8), (16, 8), (24, 8), (32, 8)],
        global_offset: None,
    },
];

// ---- kernarg layouts (checked against the metadata before use) ------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
struct FillArgs {
    buf_uchar: *mut u8,
    buf_ushort: *mut u16,
    buf_uint: *mut u32,
    buf_ulong: *mut u64,
    pattern: *const u8,
    pattern_size: u32,
    offset: u64,
    size: u64,
    global_offset: [u64; 3],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Fill2dArgs {
    buf_uchar: *mut u8,
    buf_ushort: *mut u16,
    buf_uint: *mut u32,
    buf_ulong: *mut u64,
    pattern: *const u8,
    pattern_size: u32,
    offset: u64,
    width: u64,
    height: u64,
    pitch: u64,
    global_offset: [u64; 3],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CopyArgs {
    src: *const u8,
    dst: *mut u8,
    src_origin: u64,
    dst_origin: u64,
    size: u64,
    /// `remain` (copyBuffer) or `alignment` (copyBufferAligned).
    mode: u32,
    global_offset: [u64; 3],
}

#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct Ulong4([u64; 4]);

#[repr(C)]
#[derive(Clone, Copy)]
struct RectArgs {
    src: *const u8,
    dst: *mut u8,
    src_rect: Ulong4,
    dst_rect: Ulong4,
    size: Ulong4,
    global_offset: [u64; 3],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct StreamWriteArgs {
    ptr_int: *mut u32,
    ptr_ulong: *mut u64,
    value: u64,
    size_bytes: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct StreamWaitArgs {
    ptr_int: *const u32,
    ptr_ulong: *const u64,
    value: u64,
    flags: u64,
    mask: u64,
}

const _: () = {
    assert!(std::mem::offset_of!(FillArgs, global_offset) == 64);
    assert!(std::mem::offset_of!(Fill2dArgs, global_offset) == 80);
    assert!(std::mem::offset_of!(CopyArgs, global_offset) == 48);
    assert!(std::mem::offset_of!(RectArgs, src_rect) == 32);
    assert!(std::mem::offset_of!(RectArgs, global_offset) == 128);
    assert!(std::mem::size_of::<StreamWriteArgs>() == 32);
    assert!(std::mem::size_of::<StreamWaitArgs>() == 40);
};

/// The group's kernarg as `T`.
///
/// # Safety
/// `wg` must be a live work-group whose kernarg holds a `T` (the layout was checked against
/// the kernel's metadata when the shadow was chosen).
unsafe fn args<T: Copy>(wg: *const hsa_emu_workgroup_t) -> (hsa_emu_workgroup_t, T) {
    // SAFETY: per the function contract; kernarg segments are 16-byte aligned in practice, but
    // read unaligned to depend on nothing.
    unsafe {
        let wg = *wg;
        (wg, wg.kernarg.cast::<T>().read_unaligned())
    }
}

/// Calls `f(x, y, z)` with the global id of every work-item of the group inside the grid.
fn for_each_item(wg: &hsa_emu_workgroup_t, offset: [u64; 3], mut f: impl FnMut(u64, u64, u64)) {
    let range = |d: usize| {
        let start = u64::from(wg.group_id[d]) * u64::from(wg.workgroup_size[d]);
        let end = (start + u64::from(wg.workgroup_size[d])).min(u64::from(wg.grid_size[d]));
        (start, end)
    };
    let (x0, x1) = range(0);
    let (y0, y1) = range(1);
    let (z0, z1) = range(2);
    for z in z0..z1 {
        for y in y0..y1 {
            for x in x0..x1 {
                f(
                    x.wrapping_add(offset[0]),
                    y.wrapping_add(offset[1]),
                    z.wrapping_add(offset[2]),
                );
            }
        }
    }
}

/// Copies `N` bytes from `src` to `dst` (device memory, any alignment).
///
/// # Safety
/// Both ranges must be valid device memory, as the GPU kernel requires.
#[inline]
unsafe fn copy_n<const N: usize>(src: *const u8, dst: *mut u8) {
    // SAFETY: per the function contract.
    unsafe {
        dst.cast::<[u8; N]>()
            .write_unaligned(src.cast::<[u8; N]>().read_unaligned())
    };
}

/// Writes `count` elements of `pattern` (each `width` bytes) at element `index` of `buf`.
///
/// # Safety
/// `buf` and `pattern` must be valid for the accessed elements.
unsafe fn fill_at(buf: *mut u8, width: usize, index: u64, pattern: *const u8, count: u32) {
    let dst = buf.wrapping_add((index as usize).wrapping_mul(width));
    // SAFETY: per the function contract (the GPU kernel writes the same bytes).
    unsafe {
        std::ptr::copy_nonoverlapping(pattern, dst, width * count as usize);
    }
}

/// The first non-null buffer, in the order the kernel tests them, with its element width.
fn fill_target(
    ulong: *mut u64,
    uint: *mut u32,
    ushort: *mut u16,
    uchar: *mut u8,
) -> (*mut u8, usize) {
    if !ulong.is_null() {
        (ulong.cast(), 8)
    } else if !uint.is_null() {
        (uint.cast(), 4)
    } else if !ushort.is_null() {
        (ushort.cast(), 2)
    } else {
        (uchar, 1)
    }
}

unsafe extern "C" fn fill_buffer_aligned(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<FillArgs>(wg) };
    let (buf, width) = fill_target(a.buf_ulong, a.buf_uint, a.buf_ushort, a.buf_uchar);
    if buf.is_null() {
        return; // a GPU would fault; here nothing is written
    }
    for_each_item(&wg, a.global_offset, |x, _, _| {
        if x < a.size {
            let index = x
                .wrapping_mul(u64::from(a.pattern_size))
                .wrapping_add(a.offset);
            // SAFETY: the addresses ROCclr computed for the GPU kernel.
            unsafe { fill_at(buf, width, index, a.pattern, a.pattern_size) };
        }
    });
}

unsafe extern "C" fn fill_buffer_aligned_2d(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<Fill2dArgs>(wg) };
    let (buf, width) = fill_target(a.buf_ulong, a.buf_uint, a.buf_ushort, a.buf_uchar);
    if buf.is_null() {
        return; // the 2D kernel tests bufUChar too
    }
    for_each_item(&wg, a.global_offset, |x, y, _| {
        if x < a.width && y < a.height {
            let index = y
                .wrapping_mul(a.pitch)
                .wrapping_add(x)
                .wrapping_add(a.offset);
            // SAFETY: the addresses ROCclr computed for the GPU kernel.
            unsafe { fill_at(buf, width, index, a.pattern, a.pattern_size) };
        }
    });
}

unsafe extern "C" fn copy_buffer(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<CopyArgs>(wg) };
    let src = a.src.wrapping_add(a.src_origin as usize);
    let dst = a.dst.wrapping_add(a.dst_origin as usize);
    for_each_item(&wg, a.global_offset, |x, _, _| {
        if x >= a.size {
            return;
        }
        let x = x as usize;
        if a.mode == 8 {
            // SAFETY: the addresses ROCclr computed for the GPU kernel.
            unsafe { copy_n::<1>(src.wrapping_add(x), dst.wrapping_add(x)) };
        } else if (x as u64) < a.size - 1 {
            // SAFETY: as above.
            unsafe { copy_n::<4>(src.wrapping_add(4 * x), dst.wrapping_add(4 * x)) };
        } else {
            for i in 0..a.mode as usize {
                let at = 4 * x + i;
                // SAFETY: as above.
                unsafe { copy_n::<1>(src.wrapping_add(at), dst.wrapping_add(at)) };
            }
        }
    });
}

unsafe extern "C" fn copy_buffer_aligned(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<CopyArgs>(wg) };
    let width: usize = if a.mode == 16 { 16 } else { 4 };
    for_each_item(&wg, a.global_offset, |x, _, _| {
        if x >= a.size {
            return;
        }
        let s = a
            .src
            .wrapping_add((x.wrapping_add(a.src_origin) as usize).wrapping_mul(width));
        let d = a
            .dst
            .wrapping_add((x.wrapping_add(a.dst_origin) as usize).wrapping_mul(width));
        // SAFETY: the addresses ROCclr computed for the GPU kernel.
        unsafe {
            if width == 16 {
                copy_n::<16>(s, d)
            } else {
                copy_n::<4>(s, d)
            }
        }
    });
}

/// `rect.z + x + y * rect.x + z * rect.y`.
fn rect_offset(rect: &Ulong4, x: u64, y: u64, z: u64) -> u64 {
    rect.0[2]
        .wrapping_add(x)
        .wrapping_add(y.wrapping_mul(rect.0[0]))
        .wrapping_add(z.wrapping_mul(rect.0[1]))
}

/// The rect kernels in elements of `width` bytes (`None`: 4, or 16 if `size.w == 16`).
fn copy_rect(wg: &hsa_emu_workgroup_t, a: &RectArgs, width: Option<usize>) {
    let width = width.unwrap_or(if a.size.0[3] == 16 { 16 } else { 4 });
    let size = a.size.0;
    for_each_item(wg, a.global_offset, |x, y, z| {
        if x >= size[0] || y >= size[1] || z >= size[2] {
            return;
        }
        let s = a
            .src
            .wrapping_add((rect_offset(&a.src_rect, x, y, z) as usize).wrapping_mul(width));
        let d = a
            .dst
            .wrapping_add((rect_offset(&a.dst_rect, x, y, z) as usize).wrapping_mul(width));
        // SAFETY: the addresses ROCclr computed for the GPU kernel.
        unsafe {
            match width {
                1 => copy_n::<1>(s, d),
                16 => copy_n::<16>(s, d),
                _ => copy_n::<4>(s, d),
            }
        }
    });
}

unsafe extern "C" fn copy_buffer_rect(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<RectArgs>(wg) };
    copy_rect(&wg, &a, Some(1));
}

unsafe extern "C" fn copy_buffer_rect_aligned(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<RectArgs>(wg) };
    copy_rect(&wg, &a, None);
}

unsafe extern "C" fn stream_ops_write(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<StreamWriteArgs>(wg) };
    for_each_item(&wg, [0; 3], |_, _, _| {
        // SAFETY: the word the application asked to write (device memory, naturally aligned
        // as hipStreamWriteValue requires).
        unsafe {
            if !a.ptr_int.is_null() {
                AtomicU32::from_ptr(a.ptr_int).store(a.value as u32, Ordering::Relaxed);
            } else if !a.ptr_ulong.is_null() {
                AtomicU64::from_ptr(a.ptr_ulong).store(a.value, Ordering::Relaxed);
            }
        }
    });
}

/// Whether `streamOpsWait` may stop waiting on `v` (`flags` as in the kernel).
fn wait_done(v: u64, value: u64, flags: u64, mask: u64) -> bool {
    match flags {
        0 => v & mask >= value,
        1 => v & mask == value,
        2 => v & mask & value != 0,
        3 => (v | value) & mask != mask,
        _ => true,
    }
}

unsafe extern "C" fn stream_ops_wait(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the loader chose this shadow after checking the layout.
    let (wg, a) = unsafe { args::<StreamWaitArgs>(wg) };
    for_each_item(&wg, [0; 3], |_, _, _| {
        let load = || {
            // SAFETY: the word the application asked to wait on (naturally aligned device
            // memory, as hipStreamWaitValue requires).
            unsafe {
                if !a.ptr_int.is_null() {
                    u64::from(AtomicU32::from_ptr(a.ptr_int.cast_mut()).load(Ordering::Acquire))
                } else if !a.ptr_ulong.is_null() {
                    AtomicU64::from_ptr(a.ptr_ulong.cast_mut()).load(Ordering::Acquire)
                } else {
                    return None;
                }
            }
            .into()
        };
        let (value, mask) = if a.ptr_int.is_null() {
            (a.value, a.mask)
        } else {
            (a.value & 0xffff_ffff, a.mask & 0xffff_ffff)
        };
        let mut nap = Duration::from_micros(20);
        while let Some(v) = load() {
            if wait_done(v, value, a.flags, mask) {
                break;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    });
}

#[cfg(test)]
mod tests;
