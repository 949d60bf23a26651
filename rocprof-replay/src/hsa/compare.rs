//! Write-set restore and watched memory on HSA: the device kernels behind
//! [`DeviceMemory::diff`] and [`DeviceMemory::fingerprint`] for snapshots in the GPU's VRAM.
//!
//! A snapshot staged in the arena's VRAM cannot be read by the host; instead of reading live
//! memory and snapshot back, a kernel of ours (`kernels/amdgpu/compare.cl`, shipped as one code
//! object per GPU target, built by `scripts/build-amdgpu-kernels.sh`) compares them where they
//! are and writes one flag byte per granule, and its fingerprint kernel hashes watched memory
//! where it is (bit for bit [`footprint::fingerprint`](crate::engine::footprint::fingerprint)).
//! Both run over a region table ([`device_compare`](crate::engine::device_compare)): one
//! dispatch per batch, on the GPU's replay queue (the window's own), behind one completion
//! signal and one bounded wait (the copy deadline); the table and the results live in pinned
//! host memory the GPU reads and writes directly, so a batch is one dispatch and nothing else.
//!
//! The code object matching the agent's name (`gfx90a`, `gfx942`, `gfx1100`) is loaded once per
//! GPU, at the first diff or fingerprint that needs it (inside a window: the loader is called
//! through the runtime's original functions, which no hook of ours intercepts), through the
//! table the backend holds: `hsa_code_object_reader_create_from_memory`,
//! `hsa_executable_create_alt`, `hsa_executable_load_agent_code_object`, freeze, and the two
//! kernels' `.kd` symbols. An agent with another ISA, a runtime without the loader functions or
//! a kernarg pool, a failed load or allocation, or `ROCPROF_REPLAY_DEVICE_KERNELS=off`: the host
//! reads back and compares as before ([`diff_by_reading`], [`fingerprint_by_reading`]), with one
//! logged reason per GPU.
//!
//! A dispatch still running at the deadline is handed to [`stuck`](super::stuck) (frees of the
//! GPU's memory wait for it) and its buffers are never used again (a later batch allocates new
//! ones); the window declines as for a stuck copy.
//!
//! [`DeviceMemory::diff`]: crate::engine::snapshot::DeviceMemory::diff
//! [`DeviceMemory::fingerprint`]: crate::engine::snapshot::DeviceMemory::fingerprint

use std::ffi::{CStr, c_void};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocprof_replay_sys::*;

use super::gates::ReplayQueue;
use super::{Backend, Gpu, Status};
use crate::engine::device_compare::{
    CompareEntry, PrintEntry, TableKernel, compare_in_batches, diff_split, fingerprint_in_batches,
    granules_of,
};
use crate::engine::footprint::fingerprint_by_reading;
use crate::engine::snapshot::{DeviceMemory, DiffError, DirtyRanges, Transfer, diff_by_reading};

/// The code objects, by target (the agent's `HSA_AGENT_INFO_NAME`): code object v4, xnack and
/// sramecc "any".
pub(crate) const CODE_OBJECTS: [(&str, &[u8]); 3] = [
    (
        "gfx90a",
        include_bytes!("../../kernels/amdgpu/compare-gfx90a.hsaco"),
    ),
    (
        "gfx942",
        include_bytes!("../../kernels/amdgpu/compare-gfx942.hsaco"),
    ),
    (
        "gfx1100",
        include_bytes!("../../kernels/amdgpu/compare-gfx1100.hsaco"),
    ),
];

/// The compare kernel's descriptor symbol: `(table, n, granule, total, flags)`.
const COMPARE_SYMBOL: &CStr = c"rocprof_replay_compare_table.kd";

/// The fingerprint kernel's descriptor symbol: `(table, n, granule, total, out)`.
const FINGERPRINT_SYMBOL: &CStr = c"rocprof_replay_fingerprint_table.kd";

/// Work-items of a work-group (the kernels' limit).
const THREADS: u16 = 256;

/// Most work-groups of a dispatch (they stride over the granules).
const MAX_BLOCKS: usize = 4096;

/// Flag bytes of one batch (one per granule): 1 MiB covers 4 GiB of 4 KiB granules (tests:
/// 64, so that small buffers take several batches).
const FLAG_BYTES: usize = if cfg!(test) { 64 } else { 1 << 20 };

/// Fingerprint bytes of one batch (8 per granule): 1 MiB is 131 072 fingerprints (tests: 512).
const PRINT_BYTES: usize = if cfg!(test) { 4096 } else { 1 << 20 };

/// Bytes of one batch's region table: 64 KiB is 2048 compare entries or 2730 fingerprint
/// entries (tests: 512, 16 and 21).
const TABLE_BYTES: usize = if cfg!(test) { 512 } else { 64 << 10 };

/// Entries of a compare table.
const COMPARE_ENTRIES: usize = TABLE_BYTES / std::mem::size_of::<CompareEntry>();

/// Entries of a fingerprint table.
const PRINT_ENTRIES: usize = TABLE_BYTES / std::mem::size_of::<PrintEntry>();

/// The kernels' arguments, as `compare.cl` declares them (40 bytes, `n` 32-bit).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TableArgs {
    table: u64,
    n: u32,
    granule: u64,
    total: u64,
    out: u64,
}

const _: () = {
    assert!(std::mem::offset_of!(TableArgs, n) == 8);
    assert!(std::mem::offset_of!(TableArgs, granule) == 16);
    assert!(std::mem::offset_of!(TableArgs, total) == 24);
    assert!(std::mem::offset_of!(TableArgs, out) == 32);
    assert!(std::mem::size_of::<TableArgs>() == 40);
};

/// The code object for a GPU agent named `name` (`gfx90a`, or with target features:
/// `gfx90a:sramecc+:xnack-`).
pub(crate) fn code_object_for(name: &str) -> Option<&'static [u8]> {
    let target = name.split(':').next().unwrap_or(name);
    CODE_OBJECTS
        .iter()
        .find(|(gfx, _)| *gfx == target)
        .map(|(_, bytes)| *bytes)
}

/// One loaded kernel: its `KERNEL_OBJECT` and segment sizes.
#[derive(Clone, Copy, Debug)]
struct Kernel {
    object: u64,
    group: u32,
    private: u32,
}

/// Our buffers of one GPU: the kernarg segment (kernarg pool), the region table and the two
/// result buffers (pinned host memory the GPU may access).
#[derive(Clone, Copy, Debug)]
struct Buffers {
    kernarg: usize,
    table: usize,
    flags: usize,
    prints: usize,
}

/// The device kernels of one GPU (a field of [`Gpu`]; used by its windows, one at a time).
#[derive(Default)]
pub(crate) struct DeviceKernels {
    state: Mutex<State>,
}

#[derive(Default)]
enum State {
    /// Not loaded yet.
    #[default]
    Untried,
    /// Not to be had on this GPU: the host compares.
    Unavailable,
    /// Loaded; the buffers are `None` before the first use and after a stuck dispatch gave
    /// them up.
    Ready {
        compare: Kernel,
        fingerprint: Kernel,
        kernarg_pool: hsa_amd_memory_pool_t,
        buffers: Option<Buffers>,
    },
}

/// What a window lends the device kernels: the backend, its GPU and the replay queue.
pub(crate) struct Launcher<'a> {
    pub(crate) be: &'a Backend,
    pub(crate) gpu: &'a Gpu,
    /// `None`: the window runs on the application's queue (no device kernels there).
    pub(crate) queue: Option<&'a ReplayQueue>,
}

impl DeviceKernels {
    /// The kernels and their buffers, loading and allocating them if needed; `None` (with one
    /// logged reason per GPU) where they cannot be had.
    fn ready(&self, be: &Backend, gpu: &Gpu) -> Option<(Kernel, Kernel, Buffers)> {
        let mut state = self.state.lock();
        if let State::Untried = *state {
            let loaded = if crate::engine::settings::device_kernels_from_env() {
                load(be, gpu)
            } else {
                Err("ROCPROF_REPLAY_DEVICE_KERNELS=off".into())
            };
            *state = match loaded {
                Ok((compare, fingerprint, kernarg_pool)) => {
                    tracing::debug!(
                        gpu = gpu.index,
                        "device compare kernels loaded: snapshots in VRAM are compared on the GPU"
                    );
                    State::Ready {
                        compare,
                        fingerprint,
                        kernarg_pool,
                        buffers: None,
                    }
                }
                Err(why) => {
                    tracing::info!(
                        gpu = gpu.index,
                        "no device compare kernels ({why}): the host reads memory back to \
                         compare and fingerprint it"
                    );
                    State::Unavailable
                }
            };
        }
        let State::Ready {
            compare,
            fingerprint,
            kernarg_pool,
            buffers,
        } = &mut *state
        else {
            return None;
        };
        if buffers.is_none() {
            *buffers = allocate(be, gpu, *kernarg_pool);
        }
        Some((*compare, *fingerprint, (*buffers)?))
    }

    /// Gives the buffers up without freeing them: a stuck dispatch may still use them.
    fn leak_buffers(&self) {
        if let State::Ready { buffers, .. } = &mut *self.state.lock() {
            *buffers = None;
        }
    }
}

/// Loads the GPU's code object and finds both kernels and a kernarg pool.
fn load(be: &Backend, gpu: &Gpu) -> Result<(Kernel, Kernel, hsa_amd_memory_pool_t), String> {
    let name = super::agent_name(&be.orig, gpu.agent);
    let code = code_object_for(&name).ok_or_else(|| format!("no code object for {name}"))?;
    let l = be
        .orig
        .loader
        .ok_or("the runtime's table has no code-object loader functions")?;
    let Some((_, cpu)) = be.staging_pool else {
        return Err("no host memory pool".into());
    };
    let kernarg_pool = super::kernarg_pool(&be.orig, cpu).ok_or("no kernarg pool")?;
    let mut reader = hsa_code_object_reader_t::default();
    // SAFETY: our code object, alive for the process (the reader copies or borrows it).
    let st =
        unsafe { (l.reader_create_from_memory)(code.as_ptr().cast(), code.len(), &mut reader) };
    if st != HSA_STATUS_SUCCESS {
        return Err(format!(
            "hsa_code_object_reader_create_from_memory: {}",
            Status(st)
        ));
    }
    let mut exe = hsa_executable_t::default();
    // SAFETY: a plain out-parameter. Full profile, as ROCclr creates its executables.
    let st = unsafe {
        (l.executable_create_alt)(
            HSA_PROFILE_FULL,
            HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
            std::ptr::null(),
            &mut exe,
        )
    };
    if st != HSA_STATUS_SUCCESS {
        // SAFETY: our reader.
        unsafe { (l.reader_destroy)(reader) };
        return Err(format!("hsa_executable_create_alt: {}", Status(st)));
    }
    let loaded = (|| {
        // SAFETY: our executable and reader, the GPU agent; no options, no out-parameter.
        let st = unsafe {
            (l.load_agent_code_object)(
                exe,
                gpu.agent,
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if st != HSA_STATUS_SUCCESS {
            return Err(format!(
                "hsa_executable_load_agent_code_object: {}",
                Status(st)
            ));
        }
        // SAFETY: our executable.
        let st = unsafe { (be.orig.executable_freeze)(exe, std::ptr::null()) };
        if st != HSA_STATUS_SUCCESS {
            return Err(format!("hsa_executable_freeze: {}", Status(st)));
        }
        Ok((
            kernel(be, &l, exe, gpu.agent, COMPARE_SYMBOL)?,
            kernel(be, &l, exe, gpu.agent, FINGERPRINT_SYMBOL)?,
        ))
    })();
    // SAFETY: our reader; the executable no longer needs it once loaded.
    unsafe { (l.reader_destroy)(reader) };
    match loaded {
        // The executable stays loaded for the process.
        Ok((compare, fingerprint)) => Ok((compare, fingerprint, kernarg_pool)),
        Err(why) => {
            // SAFETY: our executable, never dispatched.
            unsafe { (be.orig.executable_destroy)(exe) };
            Err(why)
        }
    }
}

/// The kernel whose descriptor symbol is `symbol`.
fn kernel(
    be: &Backend,
    l: &super::originals::LoaderFns,
    exe: hsa_executable_t,
    agent: hsa_agent_t,
    symbol: &CStr,
) -> Result<Kernel, String> {
    let mut sym = hsa_executable_symbol_t::default();
    // SAFETY: a NUL-terminated name, the agent and a plain out-parameter.
    let st = unsafe { (l.get_symbol_by_name)(exe, symbol.as_ptr(), &agent, &mut sym) };
    if st != HSA_STATUS_SUCCESS {
        return Err(format!("{symbol:?}: {}", Status(st)));
    }
    let mut k = Kernel {
        object: 0,
        group: 0,
        private: 0,
    };
    for (attr, out) in [
        (
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
            (&mut k.object as *mut u64).cast::<c_void>(),
        ),
        (
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
            (&mut k.group as *mut u32).cast(),
        ),
        (
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
            (&mut k.private as *mut u32).cast(),
        ),
    ] {
        // SAFETY: each attribute writes the type `out` points at (u64, u32, u32).
        let st = unsafe { (be.orig.symbol_get_info)(sym, attr, out) };
        if st != HSA_STATUS_SUCCESS {
            return Err(format!("{symbol:?} info {attr}: {}", Status(st)));
        }
    }
    if k.object == 0 {
        return Err(format!("{symbol:?} has no kernel object"));
    }
    Ok(k)
}

/// The kernarg segment (from the kernarg pool), the table and the result buffers (host pool),
/// each made accessible to the GPU; `None` (nothing kept) when one cannot be had.
fn allocate(be: &Backend, gpu: &Gpu, kernarg_pool: hsa_amd_memory_pool_t) -> Option<Buffers> {
    let (host_pool, _) = be.staging_pool?;
    let mut got: Vec<usize> = Vec::with_capacity(4);
    for (pool, size) in [
        (kernarg_pool, 4096),
        (host_pool, TABLE_BYTES),
        (host_pool, FLAG_BYTES.max(4096)),
        (host_pool, PRINT_BYTES.max(4096)),
    ] {
        match super::alloc_host(&be.orig, pool, std::slice::from_ref(gpu), size) {
            Some(p) => got.push(p.as_ptr() as usize),
            None => {
                tracing::debug!(size, "no memory for the device compare kernels' buffers");
                for p in got {
                    // SAFETY: our allocations, never used.
                    unsafe { (be.orig.pool_free)(p as *mut c_void) };
                }
                return None;
            }
        }
    }
    Some(Buffers {
        kernarg: got[0],
        table: got[1],
        flags: got[2],
        prints: got[3],
    })
}

/// Waits until `signal` reaches 0 or `deadline` passes (timed slices, so every wait is bounded
/// even where the runtime ignores the hint).
fn wait_zero(be: &Backend, signal: hsa_signal_t, deadline: Duration) -> bool {
    let end = Instant::now() + deadline;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        // SAFETY: a live signal of ours.
        let v = unsafe {
            (be.orig.signal_wait)(
                signal,
                HSA_SIGNAL_CONDITION_EQ,
                0,
                be.ticks(left.min(Duration::from_millis(100))),
                HSA_WAIT_STATE_BLOCKED,
            )
        };
        if v == 0 {
            return true;
        }
        if left.is_zero() {
            return false;
        }
    }
}

/// One table kernel of a GPU lent to the batch loop
/// ([`device_compare`](crate::engine::device_compare)): the kernel, its buffers, where its
/// results go (the flags or the prints), its table's room and, for a stuck dispatch, the
/// snapshot staging an entry names (the stuck list keeps it).
struct Tables<'l, E, R> {
    launcher: &'l Launcher<'l>,
    queue: &'l ReplayQueue,
    buffers: Buffers,
    kernel: Kernel,
    out: usize,
    /// Most results and entries of a batch.
    limits: (usize, usize),
    staging_of: fn(&E) -> Option<(usize, usize)>,
    result: std::marker::PhantomData<R>,
}

impl<E: Copy, R: Copy> Tables<'_, E, R> {
    /// The first `n` entries of the table, as [`TableKernel::table`] let them be written.
    fn written(&self, n: usize) -> &[E] {
        // SAFETY: as in `table`; read only (the kernel only reads it too).
        unsafe { std::slice::from_raw_parts(self.buffers.table as *const E, n.min(self.limits.1)) }
    }
}

impl<E: Copy, R: Copy> TableKernel for Tables<'_, E, R> {
    type Entry = E;
    type Result = R;

    fn limits(&self) -> (usize, usize) {
        self.limits
    }

    fn table(&mut self, n: usize) -> &mut [E] {
        // SAFETY: our pinned table, TABLE_BYTES (page-aligned, so aligned for the entries) with
        // room for `limits.1` entries of `E`; no dispatch reads it (the last one completed, a
        // stuck one gave the buffers up); borrowed from `self`, so not while a batch runs.
        unsafe {
            std::slice::from_raw_parts_mut(self.buffers.table as *mut E, n.min(self.limits.1))
        }
    }

    fn run(&mut self, entries: usize, granule: usize, granules: usize) -> Result<(), DiffError> {
        let table = self.written(entries);
        let staging_of = self.staging_of;
        run_table(
            self.launcher,
            self.queue,
            self.buffers,
            Batch {
                kernel: self.kernel,
                out: self.out,
                entries: table.len(),
                granule,
                granules: granules.min(self.limits.0),
            },
            || table.iter().filter_map(staging_of).collect(),
        )
    }

    fn results(&self, n: usize) -> &[R] {
        // SAFETY: the kernel wrote `n` results (at most `limits.0`, which the buffer holds;
        // page-aligned, so aligned for `R`) and completed, its writes released at system scope
        // before its signal dropped; nothing writes them until the next batch, which needs
        // `self` mutably.
        unsafe { std::slice::from_raw_parts(self.out as *const R, n.min(self.limits.0)) }
    }
}

/// One dispatch of a table kernel: the kernel, where its results go (one of the buffers), the
/// table's entries (already written), the granule and the batch's results.
struct Batch {
    kernel: Kernel,
    out: usize,
    entries: usize,
    granule: usize,
    granules: usize,
}

/// Runs one batch and waits for it with the copy deadline. On [`DiffError::Stuck`] the buffers
/// are given up and the signal handed to the stuck list, with the snapshot staging the batch
/// reads (`staging`).
fn run_table(
    l: &Launcher<'_>,
    queue: &ReplayQueue,
    buffers: Buffers,
    b: Batch,
    staging: impl FnOnce() -> Vec<(usize, usize)>,
) -> Result<(), DiffError> {
    let Batch {
        kernel,
        out,
        entries,
        granule,
        granules,
    } = b;
    let be = l.be;
    let o = &be.orig;
    let mut signal = hsa_signal_t::default();
    // SAFETY: a plain signal with no consumer list.
    if unsafe { (o.signal_create)(1, 0, std::ptr::null(), &mut signal) } != HSA_STATUS_SUCCESS {
        return Err(DiffError::Failed);
    }
    let args = TableArgs {
        table: buffers.table as u64,
        n: entries as u32,
        granule: granule as u64,
        total: granules as u64,
        out: out as u64,
    };
    // SAFETY: our kernarg segment (4 KiB of the kernarg pool); the last dispatch that read it
    // completed (a stuck one gave the buffers up).
    unsafe { (buffers.kernarg as *mut TableArgs).write(args) };
    let blocks = granules.clamp(1, MAX_BLOCKS) as u32;
    let packet = hsa_kernel_dispatch_packet_t {
        // Barrier bit and system-scope fences: after the pass before it, its writes visible;
        // the results visible to the host when the signal drops.
        header: packet_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        ),
        setup: 1,
        workgroup_size_x: THREADS,
        workgroup_size_y: 1,
        workgroup_size_z: 1,
        grid_size_x: blocks * u32::from(THREADS),
        grid_size_y: 1,
        grid_size_z: 1,
        private_segment_size: kernel.private,
        group_segment_size: kernel.group,
        kernel_object: kernel.object,
        kernarg_address: buffers.kernarg as *mut c_void,
        completion_signal: signal,
        ..Default::default()
    };
    let settings = be.settings();
    // SAFETY: one valid packet naming our kernel, kernarg and signal.
    let submitted = unsafe {
        queue.submit(
            be,
            (&packet as *const hsa_kernel_dispatch_packet_t).cast(),
            1,
            settings.drain,
        )
    };
    if !submitted {
        // SAFETY: our signal, never submitted.
        unsafe { (o.signal_destroy)(signal) };
        tracing::warn!("the replay queue had no room for a device compare kernel");
        return Err(DiffError::Failed);
    }
    if !wait_zero(be, signal, settings.copy) {
        // The kernel may still read the regions and the snapshot's staging and write the
        // results: frees of the GPU's memory wait for it, the staging stays its own (see
        // `stuck`), and its buffers are never used again.
        tracing::warn!("a device compare kernel is still running after the copy deadline");
        l.gpu.kernels.leak_buffers();
        be.stuck.add_touching(l.gpu.index, signal.handle, staging());
        return Err(DiffError::Stuck);
    }
    // SAFETY: our signal, its dispatch completed.
    unsafe { (o.signal_destroy)(signal) };
    Ok(())
}

/// [`DeviceMemory::diff`] on HSA: regions whose snapshot is in the GPU's VRAM are compared
/// by the compare kernel, the others on the host; without the kernel, everything on the host.
/// Also says whether the kernel ran (`false`: the host read every snapshot it compared).
pub(crate) fn diff<M: DeviceMemory + ?Sized>(
    mem: &mut M,
    l: &Launcher<'_>,
    regions: &[Transfer],
    on_device: &[bool],
    granule: usize,
) -> Result<(DirtyRanges, bool), DiffError> {
    let any_on_device = (0..regions.len())
        .any(|i| on_device.get(i).copied().unwrap_or(false) && regions[i].len > 0);
    let ready = match (any_on_device, l.queue) {
        (true, Some(q)) => l.gpu.kernels.ready(l.be, l.gpu).map(|k| (q, k)),
        _ => None,
    };
    let Some((queue, (compare, _, buffers))) = ready else {
        return diff_by_reading(mem, regions, on_device, granule).map(|d| (d, false));
    };
    let mut kernel = Tables::<CompareEntry, u8> {
        launcher: l,
        queue,
        buffers,
        kernel: compare,
        out: buffers.flags,
        limits: (FLAG_BYTES, COMPARE_ENTRIES),
        staging_of: |e| Some((e.snap as usize, e.len as usize)),
        result: std::marker::PhantomData,
    };
    let found = diff_split(mem, regions, on_device, granule, |_, device, out| {
        compare_in_batches(&mut kernel, regions, device, granule, out)?;
        tracing::debug!(
            regions = device.len(),
            "write set found by the device compare kernel"
        );
        Ok(())
    })?;
    Ok((found, true))
}

/// [`DeviceMemory::fingerprint`] on HSA: the fingerprint kernel over the regions, in batches
/// of at most [`PRINT_BYTES`] / 8 fingerprints and [`PRINT_ENTRIES`] pieces; without it, the
/// host reads the regions back and hashes them.
pub(crate) fn fingerprint<M: DeviceMemory + ?Sized>(
    mem: &mut M,
    l: &Launcher<'_>,
    regions: &[(usize, usize)],
    granule: usize,
) -> Result<Vec<u64>, DiffError> {
    let total = granules_of(regions, granule);
    if total == 0 {
        return Ok(Vec::new());
    }
    let ready = l
        .queue
        .and_then(|q| l.gpu.kernels.ready(l.be, l.gpu).map(|k| (q, k)));
    let Some((queue, (_, kernel, buffers))) = ready else {
        return fingerprint_by_reading(mem, regions, granule);
    };
    let mut kernel = Tables::<PrintEntry, u64> {
        launcher: l,
        queue,
        buffers,
        kernel,
        out: buffers.prints,
        limits: (PRINT_BYTES / 8, PRINT_ENTRIES),
        // Watched memory is the application's: nothing of ours but the buffers.
        staging_of: |_| None,
        result: std::marker::PhantomData,
    };
    let out = fingerprint_in_batches(&mut kernel, regions, granule)?;
    tracing::debug!(
        regions = regions.len(),
        granules = total,
        "watched memory fingerprinted by the device kernel"
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_has_its_code_object_with_both_kernels() {
        for (gfx, code) in CODE_OBJECTS {
            // ELF, EM_AMDGPU (224), HSA OS/ABI (64), code object v4 (ABI version 2).
            assert_eq!(&code[..4], b"\x7fELF", "{gfx}");
            assert_eq!((code[7], code[8]), (64, 2), "{gfx}");
            assert_eq!(u16::from_le_bytes([code[18], code[19]]), 224, "{gfx}");
            let has = |s: &[u8]| code.windows(s.len()).any(|w| w == s);
            assert!(has(COMPARE_SYMBOL.to_bytes_with_nul()), "{gfx}");
            assert!(has(FINGERPRINT_SYMBOL.to_bytes_with_nul()), "{gfx}");
            assert!(has(format!("amdgcn-amd-amdhsa--{gfx}").as_bytes()), "{gfx}");
        }
    }

    #[test]
    fn agents_find_their_code_object_by_name_with_or_without_features() {
        let gfx90a = CODE_OBJECTS[0].1;
        assert_eq!(code_object_for("gfx90a"), Some(gfx90a));
        assert_eq!(code_object_for("gfx90a:sramecc+:xnack-"), Some(gfx90a));
        assert_eq!(code_object_for("gfx942"), Some(CODE_OBJECTS[1].1));
        assert_eq!(code_object_for("gfx1100"), Some(CODE_OBJECTS[2].1));
        assert_eq!(code_object_for("gfx1030"), None);
        assert_eq!(code_object_for("gfx90"), None);
        assert_eq!(code_object_for("gpu"), None);
    }

    #[test]
    fn kernel_arguments_and_tables_are_laid_out_as_compare_cl_declares_them() {
        assert_eq!(std::mem::size_of::<TableArgs>(), 40);
        assert_eq!(
            (COMPARE_ENTRIES, PRINT_ENTRIES),
            (16, 21),
            "the tests' tables"
        );
        assert!(64 << 10 >= 2048 * std::mem::size_of::<CompareEntry>());
    }
}
