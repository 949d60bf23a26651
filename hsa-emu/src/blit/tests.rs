//! The built-in blit shadows against the semantics of the ROCm 5.2 device-library kernels:
//! each test runs a shadow over a whole grid (partial last groups, global offsets) on host
//! buffers and compares every byte with what the kernel is meant to produce.

use super::*;
use crate::loader::amdgpu::{KernelArg, KernelMeta};

/// Runs `entry` for every work-group of `grid` (work-items) in groups of `wg`.
fn run<T>(entry: KernelEntry, args: &T, grid: [u32; 3], wg: [u32; 3]) {
    let groups = [0, 1, 2].map(|d| grid[d].div_ceil(wg[d]));
    for z in 0..groups[2] {
        for y in 0..groups[1] {
            for x in 0..groups[0] {
                let w = hsa_emu_workgroup_t {
                    kernarg: (args as *const T).cast(),
                    group_id: [x, y, z],
                    workgroup_size: wg,
                    grid_size: grid,
                    group_segment: std::ptr::null_mut(),
                };
                // SAFETY: `args` has the layout the shadow reads; the buffers it names are live.
                unsafe { entry(&w) };
            }
        }
    }
}

fn entry(name: &str) -> KernelEntry {
    find(name).expect("a built-in shadow").entry
}

fn null<T>() -> *mut T {
    std::ptr::null_mut()
}

#[test]
fn fill_writes_the_pattern_elements_at_element_offsets() {
    // 32-bit elements, a 2-element pattern, offset 3 elements, 5 items; grid 7 in groups of 4
    // (the last group is partial, items 5 and 6 are past `size`).
    let mut buf = [0xEEu8; 80];
    let pattern: [u32; 2] = [0xA1B2_C3D4, 0x0102_0304];
    let a = FillArgs {
        buf_uchar: buf.as_mut_ptr(),
        buf_ushort: buf.as_mut_ptr().cast(),
        buf_uint: buf.as_mut_ptr().cast(),
        buf_ulong: null(),
        pattern: pattern.as_ptr().cast(),
        pattern_size: 2,
        offset: 3,
        size: 5,
        global_offset: [0; 3],
    };
    run(
        entry("__amd_rocclr_fillBufferAligned"),
        &a,
        [7, 1, 1],
        [4, 1, 1],
    );
    let mut want = [0xEEu8; 80];
    for item in 0..5 {
        for (e, p) in pattern.iter().enumerate() {
            let at = 4 * (3 + 2 * item + e);
            want[at..at + 4].copy_from_slice(&p.to_le_bytes());
        }
    }
    assert_eq!(buf, want);
}

#[test]
fn fill_picks_the_widest_non_null_buffer_and_honours_the_global_offset() {
    // bufULong set: 8-byte elements. Global offset 2: ids run 2..6 for a grid of 4, so with
    // size 5 only ids 2, 3, 4 write (elements 2..5 + offset 1).
    let mut buf = [0u64; 8];
    let pattern = [0x1122_3344_5566_7788u64];
    let a = FillArgs {
        buf_uchar: buf.as_mut_ptr().cast(),
        buf_ushort: null(),
        buf_uint: null(),
        buf_ulong: buf.as_mut_ptr(),
        pattern: pattern.as_ptr().cast(),
        pattern_size: 1,
        offset: 1,
        size: 5,
        global_offset: [2, 0, 0],
    };
    run(
        entry("__amd_rocclr_fillBufferAligned"),
        &a,
        [4, 1, 1],
        [2, 1, 1],
    );
    let p = pattern[0];
    assert_eq!(buf, [0, 0, 0, p, p, p, 0, 0]);
    // Only bufUChar: bytes, a 3-byte pattern at an odd offset (unaligned).
    let mut bytes = [0u8; 16];
    let pattern = [7u8, 8, 9];
    let a = FillArgs {
        buf_uchar: bytes.as_mut_ptr(),
        buf_ushort: null(),
        buf_uint: null(),
        buf_ulong: null(),
        pattern: pattern.as_ptr(),
        pattern_size: 3,
        offset: 1,
        size: 4,
        global_offset: [0; 3],
    };
    run(
        entry("__amd_rocclr_fillBufferAligned"),
        &a,
        [4, 1, 1],
        [64, 1, 1],
    );
    assert_eq!(bytes, [0, 7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9, 0, 0, 0]);
}

#[test]
fn fill_2d_writes_width_elements_per_pitched_row() {
    // 16-bit elements, pitch 10 elements, a 3 x 4 rectangle starting at element 2.
    let mut buf = [0u16; 50];
    let pattern = [0xBEEFu16];
    let a = Fill2dArgs {
        buf_uchar: buf.as_mut_ptr().cast(),
        buf_ushort: buf.as_mut_ptr(),
        buf_uint: null(),
        buf_ulong: null(),
        pattern: pattern.as_ptr().cast(),
        pattern_size: 1,
        offset: 2,
        width: 3,
        height: 4,
        pitch: 10,
        global_offset: [0; 3],
    };
    // A grid larger than the rectangle in both dimensions.
    run(
        entry("__amd_rocclr_fillBufferAligned2D"),
        &a,
        [5, 6, 1],
        [4, 4, 1],
    );
    let mut want = [0u16; 50];
    for row in 0..4 {
        for col in 0..3 {
            want[2 + row * 10 + col] = 0xBEEF;
        }
    }
    assert_eq!(buf, want);
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn copy_buffer_in_byte_mode_copies_unaligned_ranges() {
    let src = bytes(64);
    let mut dst = vec![0u8; 64];
    let a = CopyArgs {
        src: src.as_ptr(),
        dst: dst.as_mut_ptr(),
        src_origin: 3,
        dst_origin: 5,
        size: 13,
        mode: 8, // remain == 8: one byte per work-item
        global_offset: [0; 3],
    };
    run(entry("__amd_rocclr_copyBuffer"), &a, [16, 1, 1], [8, 1, 1]);
    let mut want = vec![0u8; 64];
    want[5..18].copy_from_slice(&src[3..16]);
    assert_eq!(dst, want);
}

#[test]
fn copy_buffer_in_word_mode_copies_the_remainder_bytewise() {
    // 19 bytes: 4 whole words and a last item with 3 bytes, at unaligned origins.
    let src = bytes(64);
    let mut dst = vec![0u8; 64];
    let a = CopyArgs {
        src: src.as_ptr(),
        dst: dst.as_mut_ptr(),
        src_origin: 1,
        dst_origin: 6,
        size: 5,
        mode: 3,
        global_offset: [0; 3],
    };
    run(entry("__amd_rocclr_copyBuffer"), &a, [8, 1, 1], [3, 1, 1]);
    let mut want = vec![0u8; 64];
    want[6..25].copy_from_slice(&src[1..20]);
    assert_eq!(dst, want);
    // remain == 0: the last item copies nothing.
    let mut dst = vec![0u8; 64];
    let a = CopyArgs {
        dst: dst.as_mut_ptr(),
        mode: 0,
        ..a
    };
    run(entry("__amd_rocclr_copyBuffer"), &a, [5, 1, 1], [5, 1, 1]);
    let mut want = vec![0u8; 64];
    want[6..22].copy_from_slice(&src[1..17]);
    assert_eq!(dst, want);
}

#[test]
fn copy_buffer_aligned_uses_16_or_4_byte_elements() {
    let src = bytes(256);
    for (alignment, width) in [(16u32, 16usize), (4, 4)] {
        let mut dst = vec![0u8; 256];
        let a = CopyArgs {
            src: src.as_ptr(),
            dst: dst.as_mut_ptr(),
            src_origin: 2,
            dst_origin: 1,
            size: 5,
            mode: alignment,
            global_offset: [0; 3],
        };
        run(
            entry("__amd_rocclr_copyBufferAligned"),
            &a,
            [6, 1, 1],
            [4, 1, 1],
        );
        let mut want = vec![0u8; 256];
        want[width..6 * width].copy_from_slice(&src[2 * width..7 * width]);
        assert_eq!(dst, want, "alignment {alignment}");
    }
}

#[test]
fn copy_buffer_rect_follows_both_pitches() {
    // A 4 x 3 x 2 box: source rows of 16 bytes, slices of 64, starting at byte 5; destination
    // rows of 10 bytes, slices of 40, starting at byte 1.
    let src = bytes(256);
    let mut dst = vec![0u8; 128];
    let a = RectArgs {
        src: src.as_ptr(),
        dst: dst.as_mut_ptr(),
        src_rect: Ulong4([16, 64, 5, 0]),
        dst_rect: Ulong4([10, 40, 1, 0]),
        size: Ulong4([4, 3, 2, 0]),
        global_offset: [0; 3],
    };
    run(
        entry("__amd_rocclr_copyBufferRect"),
        &a,
        [8, 4, 2],
        [8, 2, 1],
    );
    let mut want = vec![0u8; 128];
    for z in 0..2 {
        for y in 0..3 {
            for x in 0..4 {
                want[1 + x + y * 10 + z * 40] = src[5 + x + y * 16 + z * 64];
            }
        }
    }
    assert_eq!(dst, want);
}

#[test]
fn copy_buffer_rect_aligned_uses_16_or_4_byte_elements() {
    let src = bytes(1024);
    for (w, width) in [(16u64, 16usize), (4, 4)] {
        let mut dst = vec![0u8; 1024];
        // Pitches and origins are in elements.
        let a = RectArgs {
            src: src.as_ptr(),
            dst: dst.as_mut_ptr(),
            src_rect: Ulong4([6, 20, 1, 0]),
            dst_rect: Ulong4([4, 12, 0, 0]),
            size: Ulong4([3, 2, 2, w]),
            global_offset: [0; 3],
        };
        run(
            entry("__amd_rocclr_copyBufferRectAligned"),
            &a,
            [4, 2, 2],
            [4, 1, 1],
        );
        let mut want = vec![0u8; 1024];
        for z in 0..2 {
            for y in 0..2 {
                for x in 0..3 {
                    let s = (1 + x + y * 6 + z * 20) * width;
                    let d = (x + y * 4 + z * 12) * width;
                    want[d..d + width].copy_from_slice(&src[s..s + width]);
                }
            }
        }
        assert_eq!(dst, want, "size.w {w}");
    }
}

#[test]
fn stream_ops_write_and_wait() {
    let mut word = 0u32;
    let mut long = 0u64;
    let a = StreamWriteArgs {
        ptr_int: &mut word,
        ptr_ulong: &mut long,
        value: 0x1_0000_0005,
        size_bytes: 4,
    };
    run(
        entry("__amd_rocclr_streamOpsWrite"),
        &a,
        [1, 1, 1],
        [1, 1, 1],
    );
    assert_eq!((word, long), (5, 0));
    let a = StreamWriteArgs {
        ptr_int: null(),
        ..a
    };
    run(
        entry("__amd_rocclr_streamOpsWrite"),
        &a,
        [1, 1, 1],
        [1, 1, 1],
    );
    assert_eq!(long, 0x1_0000_0005);

    // The wait conditions, on values that satisfy them or not.
    assert!(wait_done(7, 5, 0, !0) && !wait_done(4, 5, 0, !0));
    assert!(wait_done(0x15, 5, 1, 0xf) && !wait_done(6, 5, 1, !0));
    assert!(wait_done(4, 6, 2, !0) && !wait_done(1, 6, 2, !0));
    assert!(wait_done(0, 1, 3, 3) && !wait_done(2, 1, 3, 3));
    assert!(wait_done(0, 0, 99, 0), "an unknown condition does not wait");

    // A wait that holds only after another thread stores the value.
    let cell = Box::leak(Box::new(std::sync::atomic::AtomicU64::new(0)));
    let a = StreamWaitArgs {
        ptr_int: std::ptr::null(),
        ptr_ulong: cell.as_ptr(),
        value: 3,
        flags: 1,
        mask: !0,
    };
    let setter = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(20));
        cell.store(3, Ordering::Release);
    });
    run(
        entry("__amd_rocclr_streamOpsWait"),
        &a,
        [1, 1, 1],
        [1, 1, 1],
    );
    assert_eq!(cell.load(Ordering::Acquire), 3);
    setter.join().unwrap();
}

fn meta(args: &[(u64, u64, &str)]) -> KernelMeta {
    KernelMeta {
        name: "__amd_rocclr_copyBuffer".into(),
        symbol: "__amd_rocclr_copyBuffer.kd".into(),
        descriptor_vaddr: 0,
        kernarg_segment_size: 104,
        kernarg_segment_align: 8,
        group_segment_fixed_size: 0,
        private_segment_fixed_size: 0,
        uses_dynamic_stack: false,
        args: args
            .iter()
            .map(|&(offset, size, kind)| KernelArg {
                name: None,
                offset,
                size,
                value_kind: kind.into(),
            })
            .collect(),
    }
}

#[test]
fn a_layout_other_than_rocm_5_2_is_refused() {
    let b = find("__amd_rocclr_copyBuffer").unwrap();
    let mut args = vec![
        (0, 8, "global_buffer"),
        (8, 8, "global_buffer"),
        (16, 8, "by_value"),
        (24, 8, "by_value"),
        (32, 8, "by_value"),
        (40, 4, "by_value"),
        (48, 8, "hidden_global_offset_x"),
        (56, 8, "hidden_global_offset_y"),
        (64, 8, "hidden_global_offset_z"),
        (72, 8, "hidden_none"),
    ];
    assert_eq!(b.check(&meta(&args)), Ok(()));
    args[5] = (40, 8, "by_value"); // a 64-bit `remain`
    assert!(
        b.check(&meta(&args))
            .unwrap_err()
            .contains("explicit arguments")
    );
    args[5] = (40, 4, "by_value");
    args[7] = (60, 8, "hidden_global_offset_y");
    assert!(
        b.check(&meta(&args))
            .unwrap_err()
            .contains("hidden_global_offset_y")
    );
    args.truncate(6);
    assert!(
        b.check(&meta(&args))
            .unwrap_err()
            .contains("hidden_global_offset_x")
    );
}
