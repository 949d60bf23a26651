//! rocprof-replay's committed gfx90a code object, loaded and dispatched through the runtime's own
//! table (reader, executable, queue, completion signal), against host computations over many
//! region tables.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use rocprof_replay_sys::*;

use super::*;
use crate::topology::{DeviceKind, topology};

/// The code objects rocprof-replay ships (scripts/build-amdgpu-kernels.sh).
const GFX90A: &[u8] = include_bytes!("../../../rocprof-replay/kernels/amdgpu/compare-gfx90a.hsaco");
const GFX942: &[u8] = include_bytes!("../../../rocprof-replay/kernels/amdgpu/compare-gfx942.hsaco");
const GFX1100: &[u8] =
    include_bytes!("../../../rocprof-replay/kernels/amdgpu/compare-gfx1100.hsaco");

const WAIT: Duration = Duration::from_secs(20);

fn core() -> &'static CoreApiTable {
    // SAFETY: the live tables are leaked, never freed.
    unsafe { &*crate::api::core() }
}

fn gpu() -> hsa_agent_t {
    topology()
        .agents
        .iter()
        .find(|a| a.kind == DeviceKind::Gpu)
        .expect("the default machine has a GPU")
        .handle
}

/// A loaded executable and its two kernels' objects.
struct Loaded {
    exe: hsa_executable_t,
    compare: u64,
    fingerprint: u64,
    kernarg_sizes: [u32; 2],
}

/// Loads `code` for the GPU through the core table, as the HSA backend does; the load status
/// when it fails.
fn load(code: &[u8]) -> Result<Loaded, hsa_status_t> {
    let t = core();
    let mut reader = hsa_code_object_reader_t { handle: 0 };
    let mut exe = hsa_executable_t { handle: 0 };
    // SAFETY: the runtime's own functions, valid buffers and out-pointers.
    unsafe {
        let st = t.hsa_code_object_reader_create_from_memory_fn.unwrap()(
            code.as_ptr().cast(),
            code.len(),
            &mut reader,
        );
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let st = t.hsa_executable_create_alt_fn.unwrap()(
            HSA_PROFILE_FULL,
            HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
            std::ptr::null(),
            &mut exe,
        );
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let st = t.hsa_executable_load_agent_code_object_fn.unwrap()(
            exe,
            gpu(),
            reader,
            std::ptr::null(),
            std::ptr::null_mut(),
        );
        t.hsa_code_object_reader_destroy_fn.unwrap()(reader);
        if st != HSA_STATUS_SUCCESS {
            t.hsa_executable_destroy_fn.unwrap()(exe);
            return Err(st);
        }
        assert_eq!(
            t.hsa_executable_freeze_fn.unwrap()(exe, std::ptr::null()),
            HSA_STATUS_SUCCESS
        );
        let mut objects = [0u64; 2];
        let mut sizes = [0u32; 2];
        for (i, name) in [
            c"rocprof_replay_compare_table.kd",
            c"rocprof_replay_fingerprint_table.kd",
        ]
        .into_iter()
        .enumerate()
        {
            let mut sym = hsa_executable_symbol_t { handle: 0 };
            let agent = gpu();
            let st = t.hsa_executable_get_symbol_by_name_fn.unwrap()(
                exe,
                name.as_ptr(),
                &agent,
                &mut sym,
            );
            assert_eq!(st, HSA_STATUS_SUCCESS, "{name:?}");
            let get = t.hsa_executable_symbol_get_info_fn.unwrap();
            let st = get(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                (&mut objects[i] as *mut u64).cast(),
            );
            assert_eq!(st, HSA_STATUS_SUCCESS);
            let st = get(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                (&mut sizes[i] as *mut u32).cast(),
            );
            assert_eq!(st, HSA_STATUS_SUCCESS);
        }
        Ok(Loaded {
            exe,
            compare: objects[0],
            fingerprint: objects[1],
            kernarg_sizes: sizes,
        })
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: our executable.
        unsafe { core().hsa_executable_destroy_fn.unwrap()(self.exe) };
    }
}

/// A queue of the GPU, destroyed on drop.
struct Queue(*mut hsa_queue_t);

impl Queue {
    fn new() -> Queue {
        let mut q = std::ptr::null_mut();
        // SAFETY: the runtime's own function, a valid out-pointer.
        let st = unsafe {
            core().hsa_queue_create_fn.unwrap()(
                gpu(),
                64,
                HSA_QUEUE_TYPE_MULTI,
                None,
                std::ptr::null_mut(),
                u32::MAX,
                u32::MAX,
                &mut q,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        Queue(q)
    }

    /// Dispatches `kernel_object` over `blocks` work-groups of 256 with `args` and waits for
    /// its completion signal.
    fn run(&self, kernel_object: u64, args: &TableArgs, blocks: u32) {
        let t = core();
        let signal = crate::signals::create(1).expect("a signal");
        let kernarg = Box::new(*args);
        let packet = hsa_kernel_dispatch_packet_t {
            header: 0,
            setup: 1,
            workgroup_size_x: 256,
            workgroup_size_y: 1,
            workgroup_size_z: 1,
            grid_size_x: blocks * 256,
            grid_size_y: 1,
            grid_size_z: 1,
            kernel_object,
            kernarg_address: (&*kernarg as *const TableArgs).cast_mut().cast::<c_void>(),
            completion_signal: signal,
            ..Default::default()
        };
        let header = packet_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        );
        // SAFETY: our live queue; the slot reserved by add_write_index is ours (the queue is
        // empty between runs: each waits for its packet); body first, header last.
        unsafe {
            let q = &*self.0;
            let index = t.hsa_queue_add_write_index_scacq_screl_fn.unwrap()(self.0, 1);
            let slot = q
                .base_address
                .cast::<hsa_kernel_dispatch_packet_t>()
                .add((index % u64::from(q.size)) as usize);
            slot.write(packet);
            std::sync::atomic::AtomicU32::from_ptr(slot.cast::<u32>()).store(
                u32::from(header) | (1 << 16),
                std::sync::atomic::Ordering::Release,
            );
            crate::signals::store(q.doorbell_signal, index as i64);
        }
        let left = crate::signals::wait(
            signal,
            HSA_SIGNAL_CONDITION_EQ,
            0,
            Some(Instant::now() + WAIT),
        );
        assert_eq!(left, 0, "the dispatch completes");
        crate::signals::destroy(signal);
        drop(kernarg);
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: our queue.
        unsafe { core().hsa_queue_destroy_fn.unwrap()(self.0) };
    }
}

/// The host's fingerprint as rocprof-replay's `footprint::fingerprint` writes it (whole words,
/// then the zero-padded tail), kept apart from the shadow's own code.
fn host_fingerprint(bytes: &[u8]) -> u64 {
    let mut h = (bytes.len() as u64).wrapping_mul(GOLDEN);
    let mut words = bytes.chunks_exact(8);
    let mut i = 0u64;
    for w in words.by_ref() {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        h = h.wrapping_add(mix(w ^ (i + 1).wrapping_mul(GOLDEN)));
        i += 1;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        h = h.wrapping_add(mix(u64::from_le_bytes(w) ^ (i + 1).wrapping_mul(GOLDEN)));
    }
    h
}

/// xorshift64*: deterministic test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Random regions `(offset, len)` inside a buffer of `size` bytes: unaligned and 16-aligned
/// starts, lengths with and without a short last granule, some of exactly one granule.
fn regions(rng: &mut Rng, size: usize, granule: u64) -> Vec<(usize, usize)> {
    let count = rng.below(9) as usize;
    (0..count)
        .map(|_| {
            let len = match rng.below(4) {
                0 => granule as usize,
                1 => (granule as usize * (1 + rng.below(5) as usize)).min(size / 2),
                _ => 1 + rng.below(3000) as usize,
            }
            .min(size / 2);
            let mut offset = rng.below((size - len) as u64) as usize;
            if rng.below(2) == 0 {
                offset &= !15;
            }
            (offset, len)
        })
        .collect()
}

const GRANULES: [u64; 7] = [1, 3, 8, 16, 100, 256, 4096];

#[test]
fn the_committed_code_objects_load_with_built_in_shadows_for_their_target_only() {
    let _s = crate::loader::TEST_SERIAL.lock();
    let loaded = load(GFX90A).expect("gfx90a loads on the emulated gfx90a");
    assert_eq!(loaded.kernarg_sizes, [40, 40]);
    for object in [loaded.compare, loaded.fingerprint] {
        let shadow = crate::shadow::lookup(object).expect("a registered AMDGPU kernel");
        assert_eq!(shadow.source, "built-in");
        assert!(shadow.resolved.is_ok(), "{:?}", shadow.resolved);
    }
    drop(loaded);
    for code in [GFX942, GFX1100] {
        assert_eq!(
            load(code).err(),
            Some(HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS),
            "another target's code object is refused"
        );
    }
}

#[test]
fn a_built_in_checks_the_argument_layout_of_the_code_object() {
    use crate::loader::amdgpu::{KernelArg, KernelMeta};
    let arg = |offset, size, kind: &str| KernelArg {
        name: None,
        offset,
        size,
        value_kind: kind.into(),
    };
    let mut meta = KernelMeta {
        name: "rocprof_replay_compare_table".into(),
        symbol: "rocprof_replay_compare_table.kd".into(),
        descriptor_vaddr: 0,
        kernarg_segment_size: 40,
        kernarg_segment_align: 8,
        group_segment_fixed_size: 4,
        private_segment_fixed_size: 0,
        uses_dynamic_stack: false,
        args: vec![
            arg(0, 8, "global_buffer"),
            arg(8, 4, "by_value"),
            arg(16, 8, "by_value"),
            arg(24, 8, "by_value"),
            arg(32, 8, "global_buffer"),
            arg(40, 8, "hidden_global_offset_x"),
        ],
    };
    let b = find(&meta.name).unwrap();
    assert_eq!(b.check(&meta), Ok(()), "hidden arguments may follow");
    meta.args[1].size = 8; // `n` 64-bit: another kernel
    assert!(b.check(&meta).unwrap_err().contains("explicit arguments"));
    assert!(find("rocprof_replay_compare").is_none());
}

#[test]
fn compare_dispatches_match_the_host_over_many_tables() {
    let _s = crate::loader::TEST_SERIAL.lock();
    let loaded = load(GFX90A).unwrap();
    let queue = Queue::new();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    const SIZE: usize = 1 << 16;
    let mut dispatched = 0;
    for round in 0..120 {
        let granule = GRANULES[round % GRANULES.len()];
        let live: Vec<u8> = (0..SIZE).map(|_| rng.next() as u8).collect();
        let mut snap = live.clone();
        // A few differences, at the edges of granules and anywhere.
        for _ in 0..rng.below(40) {
            let at = rng.below(SIZE as u64) as usize;
            snap[at] ^= 1 << rng.below(8);
        }
        let regions = regions(&mut rng, SIZE, granule);
        let mut table = Vec::new();
        let mut want = Vec::new();
        for &(offset, len) in &regions {
            table.push(CompareEntry {
                live: live.as_ptr() as u64 + offset as u64,
                snap: snap.as_ptr() as u64 + offset as u64,
                len: len as u64,
                first: want.len() as u64,
            });
            for start in (0..len).step_by(granule as usize) {
                let end = (start + granule as usize).min(len);
                let at = offset + start..offset + end;
                want.push(u8::from(live[at.clone()] != snap[at]));
            }
        }
        let total = want.len();
        // 0xAA: untouched; one byte past the results must stay so.
        let mut flags = vec![0xAAu8; total + 1];
        let blocks = 1 + rng.below(total.max(1) as u64 + 3) as u32;
        queue.run(
            loaded.compare,
            &TableArgs {
                table: table.as_ptr() as u64,
                n: table.len() as u32,
                granule,
                total: total as u64,
                out: flags.as_mut_ptr() as u64,
            },
            blocks,
        );
        want.push(0xAA);
        assert_eq!(
            flags, want,
            "round {round}: granule {granule}, {regions:?}, {blocks} blocks"
        );
        dispatched += usize::from(total > 0);
    }
    assert!(dispatched > 80, "most tables have granules: {dispatched}");
}

#[test]
fn fingerprint_dispatches_match_the_host_over_many_tables() {
    let _s = crate::loader::TEST_SERIAL.lock();
    let loaded = load(GFX90A).unwrap();
    let queue = Queue::new();
    let mut rng = Rng(0x0fed_cba9_8765_4321);
    const SIZE: usize = 1 << 16;
    for round in 0..120 {
        let granule = GRANULES[round % GRANULES.len()];
        let src: Vec<u8> = (0..SIZE).map(|_| rng.next() as u8).collect();
        let regions = regions(&mut rng, SIZE, granule);
        let mut table = Vec::new();
        let mut want = Vec::new();
        for &(offset, len) in &regions {
            table.push(PrintEntry {
                src: src.as_ptr() as u64 + offset as u64,
                len: len as u64,
                first: want.len() as u64,
            });
            for start in (0..len).step_by(granule as usize) {
                let end = (start + granule as usize).min(len);
                want.push(host_fingerprint(&src[offset + start..offset + end]));
            }
        }
        let total = want.len();
        let mut out = vec![0xAAAA_AAAA_AAAA_AAAAu64; total + 1];
        let blocks = 1 + rng.below(total.max(1) as u64 + 3) as u32;
        queue.run(
            loaded.fingerprint,
            &TableArgs {
                table: table.as_ptr() as u64,
                n: table.len() as u32,
                granule,
                total: total as u64,
                out: out.as_mut_ptr() as u64,
            },
            blocks,
        );
        want.push(0xAAAA_AAAA_AAAA_AAAA);
        assert_eq!(
            out, want,
            "round {round}: granule {granule}, {regions:?}, {blocks} blocks"
        );
    }
}

#[test]
fn the_fingerprint_of_a_known_pattern_is_the_hosts() {
    // rocprof-replay's footprint::fingerprint of this pattern (asserted there too, in
    // cuda/window/compare.rs): the shadow and the host function agree bit for bit.
    let bytes: Vec<u8> = (0..4099u32).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(fingerprint(&bytes), 0xdb8a_90be_bb94_b379);
    assert_eq!(host_fingerprint(&bytes), 0xdb8a_90be_bb94_b379);
    assert_eq!(fingerprint(&[]), 0);
}

#[test]
fn empty_and_malformed_tables_write_nothing_they_should_not() {
    let _s = crate::loader::TEST_SERIAL.lock();
    let loaded = load(GFX90A).unwrap();
    let queue = Queue::new();
    let live = vec![1u8; 300];
    let snap = vec![2u8; 300];
    let run = |table: &[CompareEntry], granule: u64, total: u64| {
        let mut flags = vec![0xAAu8; 8];
        queue.run(
            loaded.compare,
            &TableArgs {
                table: if table.is_empty() {
                    0
                } else {
                    table.as_ptr() as u64
                },
                n: table.len() as u32,
                granule,
                total,
                out: flags.as_mut_ptr() as u64,
            },
            2,
        );
        flags
    };
    let entry = |len, first| CompareEntry {
        live: live.as_ptr() as u64,
        snap: snap.as_ptr() as u64,
        len,
        first,
    };
    let untouched = vec![0xAAu8; 8];
    assert_eq!(run(&[], 100, 5), untouched, "an empty table");
    assert_eq!(run(&[entry(300, 0)], 0, 3), untouched, "granule 0");
    assert_eq!(run(&[entry(300, 0)], 100, 0), untouched, "no granules");
    // The table starts at granule 2: 0 and 1 belong to no entry; 300 bytes are 3 granules (2,
    // 3, 4); 5 and 6 lie past the entry's length.
    let mut want = untouched.clone();
    want[2..5].fill(1);
    assert_eq!(run(&[entry(300, 2)], 100, 7), want, "a malformed table");
    // An empty entry before a full one: its granules are the next entry's.
    let mut want = untouched.clone();
    want[..3].fill(1);
    assert_eq!(run(&[entry(0, 0), entry(300, 0)], 100, 3), want);
    // Equal bytes: flags 0, a short last granule of 1 byte.
    let same = vec![7u8; 201];
    let table = [CompareEntry {
        live: same.as_ptr() as u64,
        snap: same.as_ptr() as u64,
        len: 201,
        first: 0,
    }];
    let mut want = untouched.clone();
    want[..3].fill(0);
    assert_eq!(run(&table, 100, 3), want);
}
