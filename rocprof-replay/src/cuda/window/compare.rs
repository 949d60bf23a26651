//! Write-set restore and watched memory on CUDA: the device kernels behind
//! [`DeviceMemory::diff`] and [`DeviceMemory::fingerprint`].
//!
//! The snapshot of a region usually lives in device memory (the arena), which the host cannot
//! read; instead of reading live memory and snapshot back, a small kernel of ours
//! (`kernels/cuda/compare.cu`, shipped as PTX for sm_80 and JIT-compiled by the driver) compares
//! them where they are and writes one byte per granule (1: differs). The flags come back with
//! one copy, behind one event and one bounded wait, and become [`DirtyRanges`] exactly as the
//! host compare builds them (granules from each region's start, the last one may be shorter).
//!
//! Both kernels run over a region table: one launch per batch covers every region of it (a
//! table of (address, length, first result index) entries in device memory, filled from its
//! pinned host twin by one copy on the private stream just before the launch), so a batch is
//! one table copy, one launch, one copy of the results, one event and one bounded wait however
//! many regions it holds. A batch ends where its results or its table are full.
//!
//! The kernel is loaded per context outside any window ([`prepare_compare`]: after the
//! context's first allocation, or at its first launch, on the application thread, under the
//! [`Guard`] and the module-load rule of [`Behind`](super::super::gate::Behind)) — a load
//! inside a window could deadlock against the window's own gates. A window never loads it: a
//! context not prepared yet, or where it cannot be loaded, answers [`DiffError::Unsupported`],
//! so its dispatches get full restores. Regions whose snapshot is in host memory (pinned, when the device had no room) are
//! compared on the host ([`diff_by_reading`](crate::engine::snapshot::diff_by_reading): only live memory is read back).
//!
//! The same module has the fingerprint kernel of the narrowed footprint
//! ([`footprint`](crate::engine::footprint)): one 64-bit hash per granule of watched memory,
//! computed where the memory is and copied back in batches of [`PRINT_BYTES`] ([`fingerprint`]),
//! bit for bit [`footprint::fingerprint`](crate::engine::footprint::fingerprint). Its output
//! buffers are allocated with the flag buffers, outside windows; a context without the kernel or
//! its buffers answers [`DiffError::Unsupported`] (the window captures everything).
//!
//! [`DeviceMemory::diff`]: crate::engine::snapshot::DeviceMemory::diff
//! [`DeviceMemory::fingerprint`]: crate::engine::snapshot::DeviceMemory::fingerprint

use std::ffi::{CStr, c_void};

use rocprof_replay_sys::cuda::*;

use super::{CudaTarget, Poll, give_event};
use crate::cuda::Guard;
use crate::cuda::api::{Driver, error_name};
use crate::engine::device_compare::{
    CompareEntry, PrintEntry, TableKernel, compare_in_batches, diff_split, fingerprint_in_batches,
    granules_of,
};
use crate::engine::snapshot::{DiffError, DirtyRanges, Transfer};

/// The compare kernel's PTX (`kernels/cuda/compare.cu`, built by
/// `scripts/build-cuda-kernels.sh`), NUL-terminated as `cuModuleLoadData` wants PTX text.
pub(crate) const PTX: &str = concat!(include_str!("../../../kernels/cuda/compare.ptx"), "\0");

/// The compare kernel's entry point: `(table, n, granule, total, flags)`, `n` 32-bit, the rest
/// 64-bit; `table` holds `n` [`CompareEntry`]s. (The module also has the per-region
/// `rocprof_replay_compare`, which the GPU check measures against; the backend does not use it.)
pub(crate) const ENTRY: &CStr = c"rocprof_replay_compare_table";

/// The fingerprint kernel's entry point (same module): `(table, n, granule, total, out)` as the
/// compare's, over `n` [`PrintEntry`]s. (Also in the module: the per-region
/// `rocprof_replay_fingerprint`, unused here.)
pub(crate) const FINGERPRINT_ENTRY: &CStr = c"rocprof_replay_fingerprint_table";

/// The copy kernel's entry point (same module): `(table, n, chunk, total)`, `n` 32-bit, the
/// rest 64-bit, over `n` [`CopyEntry`]s ([`submit_copies`]).
pub(crate) const COPY_ENTRY: &CStr = c"rocprof_replay_copy_table";

/// Bytes of one chunk of the copy kernel (one block at a time).
const COPY_CHUNK: usize = 64 << 10;

/// Transfers shorter than this go through the copy kernel, longer ones through
/// `cuMemcpyAsync` (which moves large regions as fast, and costs a few microseconds per call:
/// what the kernel saves on many small ones).
pub(crate) const COPY_KERNEL_MAX: usize = 16 << 20;

/// One transfer of a copy batch, as `rocprof_replay_copy_table` reads it: `len` bytes from
/// `src` to `dst`, its chunks numbered from `first`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CopyEntry {
    pub(crate) dst: u64,
    pub(crate) src: u64,
    pub(crate) len: u64,
    pub(crate) first: u64,
}

/// Copy entries one table holds (2048 in 64 KiB; 16 in tests).
pub(crate) const COPY_ENTRIES: usize = TABLE_BYTES / std::mem::size_of::<CopyEntry>();

/// Threads of a block: one 4 KiB granule is one 16-byte load per thread.
const THREADS: u32 = 256;

/// Most blocks of a launch (they stride over the granules).
const MAX_BLOCKS: usize = 4096;

/// Flag bytes of one batch (one per granule): 1 MiB covers 4 GiB of 4 KiB granules (tests:
/// 64, so that small buffers take several batches).
const FLAG_BYTES: usize = if cfg!(test) { 64 } else { 1 << 20 };

/// Fingerprint bytes of one batch (8 per granule): 1 MiB is 131 072 fingerprints, 8 GiB of
/// watched memory in 64 KiB granules (tests: one page, 512 fingerprints, all of the buffer, so
/// that the fake driver sees a write past it).
const PRINT_BYTES: usize = if cfg!(test) { 4096 } else { 1 << 20 };

/// Bytes of one batch's region table (device memory, and as much pinned host memory for its
/// twin): 64 KiB is 2048 compare entries or 2730 fingerprint entries (tests: 512, 16 and 21, so
/// that a few regions take several batches).
pub(crate) const TABLE_BYTES: usize = if cfg!(test) { 512 } else { 64 << 10 };

/// Entries of a compare table.
const COMPARE_ENTRIES: usize = TABLE_BYTES / std::mem::size_of::<CompareEntry>();

/// Entries of a fingerprint table.
const PRINT_ENTRIES: usize = TABLE_BYTES / std::mem::size_of::<PrintEntry>();

/// The compare kernel of one context (a field of [`Ctx`](super::super::Ctx); used under the
/// context's writer lock, by its window).
#[derive(Default)]
pub(crate) struct CompareKernel {
    state: State,
    /// The device table (its address) and how many copy entries it holds, as the pinned twin's
    /// first ones: what the last copy batch copied there, until a compare batch rewrites it.
    /// A copy batch with the same entries (a restore queued again) then copies no table.
    copy_table: Option<(usize, usize)>,
}

#[derive(Default)]
enum State {
    /// Not loaded yet.
    #[default]
    Untried,
    /// The module or its flag buffers could not be had here: full restores.
    Unavailable,
    /// Loaded: the kernel's handle and the flag buffers (allocated with it, outside windows;
    /// `None` after a stuck compare gave them up, until the next preparation); the fingerprint
    /// kernel's handle (`None`: not in the module, or no memory for its output) and its output
    /// buffers (as the flags).
    Ready {
        function: usize,
        flags: Option<Buffers>,
        fingerprint: Option<usize>,
        prints: Option<Buffers>,
        /// The copy kernel's handle (`None`: not in the module); it uses the flags' table.
        copy: Option<usize>,
    },
}

/// One batch's output (device memory and as much pinned host memory, at least a page each)
/// and its region table ([`TABLE_BYTES`] of device memory and of pinned host memory), kept for
/// the context's life.
#[derive(Clone, Copy)]
struct Buffers {
    device: usize,
    host: usize,
    table_device: usize,
    table_host: usize,
}

impl CompareKernel {
    /// Loads the module into the current context if nobody has tried yet. Called outside any
    /// window, on a thread where no window can start meanwhile ([`prepare_compare`]): a
    /// module load synchronises the context under a driver lock, which a window's gates and
    /// copies would deadlock against ([`Behind`](super::super::gate::Behind)).
    fn prepare(&mut self, drv: &Driver, context: usize) {
        self.load_once(drv, context);
        self.allocate_flags(drv);
        self.allocate_prints(drv);
    }

    /// Loads the module unless that was tried.
    fn load_once(&mut self, drv: &Driver, context: usize) {
        if let State::Untried = self.state {
            self.state = match load(drv) {
                Ok((function, fingerprint, copy)) => State::Ready {
                    function,
                    flags: None,
                    fingerprint,
                    prints: None,
                    copy,
                },
                Err(why) => {
                    tracing::debug!(
                        context,
                        "the compare kernel cannot be loaded ({why}): dispatches of this \
                         context get full restores"
                    );
                    State::Unavailable
                }
            };
        }
    }

    /// Whether [`prepare`](Self::prepare) has something to do: the module was never tried, or
    /// a stuck compare or fingerprint gave its buffers up.
    fn needs_prepare(&self) -> bool {
        matches!(
            self.state,
            State::Untried
                | State::Ready { flags: None, .. }
                | State::Ready {
                    fingerprint: Some(_),
                    prints: None,
                    ..
                }
        )
    }

    /// The kernel's handle, once loaded; `None` before (a window never loads it) or where it
    /// cannot be loaded.
    fn function(&self) -> Option<usize> {
        match self.state {
            State::Ready { function, .. } => Some(function),
            _ => None,
        }
    }

    /// The flag buffers and the compare's table, allocated by [`prepare`](Self::prepare)
    /// (never inside a window: an allocation or a free there may synchronise the context
    /// against the window's own gates).
    fn flags(&self) -> Option<Buffers> {
        match &self.state {
            State::Ready { flags: Some(f), .. } => Some(*f),
            _ => None,
        }
    }

    /// The fingerprint kernel's handle and its buffers (output and table), when both are there
    /// ([`prepare`](Self::prepare) allocated the buffers and no stuck fingerprint gave them up
    /// since).
    fn fingerprint(&self) -> Option<(usize, Buffers)> {
        match &self.state {
            State::Ready {
                fingerprint: Some(f),
                prints: Some(b),
                ..
            } => Some((*f, *b)),
            _ => None,
        }
    }

    /// The copy kernel's handle and the table it uses (the flags' table: a window's copies and
    /// compares never overlap), when both are there.
    /// Whether the copy kernel and its table can be used (tests).
    #[cfg(test)]
    pub(crate) fn copies_by_kernel(&self) -> bool {
        self.copier().is_some()
    }

    fn copier(&self) -> Option<(usize, Buffers)> {
        match &self.state {
            State::Ready {
                copy: Some(c),
                flags: Some(b),
                ..
            } => Some((*c, *b)),
            _ => None,
        }
    }

    /// Allocates the flag buffers if they are missing: [`FLAG_BYTES`] (at least a page) of
    /// device memory and as many of pinned host memory, and the compare's table, once per
    /// context.
    fn allocate_flags(&mut self, drv: &Driver) {
        let State::Ready { flags, .. } = &mut self.state else {
            return;
        };
        if flags.is_some() {
            return;
        }
        match allocate(drv, FLAG_BYTES, "the compare flags: full restores") {
            Some(b) => *flags = Some(b),
            // Not tried again at every launch (each try waits for the windows in flight).
            None => self.state = State::Unavailable,
        }
    }

    /// Allocates the fingerprint output buffers if the kernel is there and they are missing:
    /// [`PRINT_BYTES`] (at least a page) of device memory and as many of pinned host memory,
    /// and the fingerprint's table.
    fn allocate_prints(&mut self, drv: &Driver) {
        let State::Ready {
            fingerprint,
            prints,
            ..
        } = &mut self.state
        else {
            return;
        };
        if fingerprint.is_none() || prints.is_some() {
            return;
        }
        match allocate(drv, PRINT_BYTES, "the fingerprints: full captures") {
            Some(b) => *prints = Some(b),
            // Not tried again: the compare stays, fingerprints are unsupported here.
            None => *fingerprint = None,
        }
    }

    /// Gives the flag buffers (and the compare's table) up without freeing them: a compare or
    /// copy into or out of them may still be running.
    fn leak_flags(&mut self) {
        if let State::Ready { flags, .. } = &mut self.state {
            // Dropping `Buffers` frees nothing: the buffers are simply never used again.
            *flags = None;
        }
    }

    /// Gives the fingerprint buffers (and the fingerprint's table) up without freeing them: a
    /// fingerprint or copy into or out of them may still be running.
    fn leak_prints(&mut self) {
        if let State::Ready { prints, .. } = &mut self.state {
            *prints = None;
        }
    }
}

/// `len` bytes (at least a page) of device memory and as many of pinned host memory for the
/// output of `what`, and [`TABLE_BYTES`] of each for its region table; `None` (nothing kept)
/// when any of them cannot be had.
fn allocate(drv: &Driver, len: usize, what: &str) -> Option<Buffers> {
    let (device, host) = allocate_pair(drv, len, what)?;
    let Some((table_device, table_host)) = allocate_pair(drv, TABLE_BYTES, what) else {
        // SAFETY: our allocations, unused.
        unsafe {
            (drv.mem_free)(device as CUdeviceptr);
            (drv.mem_free_host)(host as *mut c_void);
        }
        return None;
    };
    Some(Buffers {
        device,
        host,
        table_device,
        table_host,
    })
}

/// `len` bytes (at least a page) of device memory and as many of pinned host memory (device,
/// host); `None` (nothing kept) when either cannot be had.
fn allocate_pair(drv: &Driver, len: usize, what: &str) -> Option<(usize, usize)> {
    let len = len.max(4096);
    let mut device: CUdeviceptr = 0;
    // SAFETY: a plain out-parameter; the context is current on this thread.
    let r = unsafe { (drv.mem_alloc)(&mut device, len) };
    if r != CUDA_SUCCESS || device == 0 {
        tracing::debug!(status = %error_name(drv, r), len, "no device memory for {what}");
        return None;
    }
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: as above.
    let r = unsafe { (drv.mem_host_alloc)(&mut host, len, 0) };
    if r != CUDA_SUCCESS || host.is_null() {
        tracing::debug!(status = %error_name(drv, r), len, "no pinned memory for {what}");
        // SAFETY: our allocation, unused.
        unsafe { (drv.mem_free)(device) };
        return None;
    }
    Some((device as usize, host as usize))
}

/// Loads the context's compare kernel if nobody has tried yet, on an application thread (in
/// a callback, the context current) outside any window: waits for the windows in flight and
/// holds new ones off meanwhile, as every call that may load a module does.
pub(crate) fn prepare_compare(be: &crate::cuda::Backend, ctx: &crate::cuda::Ctx) {
    if !ctx.compare.lock().needs_prepare() {
        return;
    }
    let _loading = crate::cuda::gate::BEHIND.begin_load(
        be.settings.lock,
        be.settings.pass.saturating_add(be.settings.late_pass),
    );
    // Possibly on an application thread while one of its streams captures.
    be.drv
        .relaxed(|| ctx.compare.lock().prepare(&be.drv, ctx.handle));
}

/// Loads the compare module into the current context; returns the compare kernel's handle,
/// the fingerprint kernel's (`None` when the module has none: fingerprints are unsupported)
/// and the copy kernel's (`None`: every snapshot copy is a `cuMemcpyAsync`).
fn load(drv: &Driver) -> Result<(usize, Option<usize>, Option<usize>), String> {
    let (Some(load_data), Some(get_function)) = (drv.module_load_data, drv.module_get_function)
    else {
        return Err("the driver has no cuModuleLoadData or cuModuleGetFunction".into());
    };
    let _g = Guard::new();
    super::super::globals::own_module(|| {
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: NUL-terminated PTX text of ours, alive for the call; a plain out-parameter.
        let r = unsafe { load_data(&mut module, PTX.as_ptr().cast()) };
        if r != CUDA_SUCCESS || module.is_null() {
            return Err(format!("cuModuleLoadData: {}", error_name(drv, r)));
        }
        let mut function: CUfunction = std::ptr::null_mut();
        // SAFETY: the module just loaded, a NUL-terminated name; a plain out-parameter. (With
        // lazy loading the module is loaded here: still inside `own_module`.)
        let r = unsafe { get_function(&mut function, module, ENTRY.as_ptr()) };
        if r != CUDA_SUCCESS || function.is_null() {
            // The module stays loaded (freed with the context): nothing else is of use in it.
            return Err(format!("cuModuleGetFunction: {}", error_name(drv, r)));
        }
        let mut fingerprint: CUfunction = std::ptr::null_mut();
        // SAFETY: as above.
        let r = unsafe { get_function(&mut fingerprint, module, FINGERPRINT_ENTRY.as_ptr()) };
        let fingerprint = if r != CUDA_SUCCESS || fingerprint.is_null() {
            tracing::debug!(
                status = %error_name(drv, r),
                "the fingerprint kernel cannot be had: dispatches of this context capture every \
                 allocation"
            );
            None
        } else {
            Some(fingerprint as usize)
        };
        let mut copy: CUfunction = std::ptr::null_mut();
        // SAFETY: as above.
        let r = unsafe { get_function(&mut copy, module, COPY_ENTRY.as_ptr()) };
        let copy = (r == CUDA_SUCCESS && !copy.is_null()).then_some(copy as usize);
        Ok((function as usize, fingerprint, copy))
    })
}

/// [`DeviceMemory::diff`](crate::engine::snapshot::DeviceMemory::diff) on CUDA: regions whose
/// snapshot is on the device are compared by the kernel, the others on the host.
pub(super) fn diff(
    t: &mut CudaTarget<'_>,
    regions: &[Transfer],
    on_device: &[bool],
    granule: usize,
) -> Result<DirtyRanges, DiffError> {
    diff_split(t, regions, on_device, granule, |t, device, out| {
        let Some(function) = t.ctx.compare.lock().function() else {
            return Err(DiffError::Unsupported);
        };
        compare_on_device(t, function, regions, device, granule, out)
    })
}

/// Compares `which` regions (snapshots on the device) in batches of at most [`FLAG_BYTES`]
/// granules and [`COMPARE_ENTRIES`] pieces: per batch one table copy, one launch, one copy of
/// the flags, one event, one bounded wait.
fn compare_on_device(
    t: &mut CudaTarget<'_>,
    function: usize,
    regions: &[Transfer],
    which: &[usize],
    granule: usize,
    out: &mut DirtyRanges,
) -> Result<(), DiffError> {
    let Some(buffers) = t.ctx.compare.lock().flags() else {
        return Err(DiffError::Failed);
    };
    let mut kernel = Tables::<CompareEntry, u8> {
        t,
        function,
        buffers,
        limits: (FLAG_BYTES, COMPARE_ENTRIES),
        what: "compare",
        give_up: CompareKernel::leak_flags,
        result: std::marker::PhantomData,
    };
    compare_in_batches(&mut kernel, regions, which, granule, out)
}

/// Submits `copies` — `(dst, src, len)`, each shorter than [`COPY_KERNEL_MAX`], at most
/// [`COPY_ENTRIES`], both sides memory the context's kernels can reach — as one launch of the
/// copy kernel on `stream`: the table copied to the device, then the kernel. Nothing is waited
/// for: the caller records its event behind them, and until that event completes the table
/// is not written again (after a stuck copy, [`give_up_copy_table`] drops it). `false` when
/// the kernel or its table is not there or a submission failed: nothing of `copies` was
/// copied then, and the caller copies them itself.
pub(super) fn submit_copies(
    t: &CudaTarget<'_>,
    stream: CUstream,
    copies: &[(usize, usize, usize)],
) -> bool {
    if copies.is_empty() || copies.len() > COPY_ENTRIES {
        return false;
    }
    let (function, buffers, resident) = {
        let k = t.ctx.compare.lock();
        let Some((function, buffers)) = k.copier() else {
            return false;
        };
        let resident = match k.copy_table {
            Some((table, n)) if table == buffers.table_device => n,
            _ => 0,
        };
        (function, buffers, resident)
    };
    let drv = *t.drv();
    let mut total = 0u64;
    let entries: Vec<CopyEntry> = copies
        .iter()
        .map(|&(dst, src, len)| {
            let e = CopyEntry {
                dst: dst as u64,
                src: src as u64,
                len: len as u64,
                first: total,
            };
            total += len.div_ceil(COPY_CHUNK) as u64;
            e
        })
        .collect();
    // SAFETY: the flags' pinned table twin, TABLE_BYTES (page-aligned) with room for
    // COPY_ENTRIES >= copies.len() entries, only read here (the slice ends with the block).
    let same =
        unsafe { std::slice::from_raw_parts(buffers.table_host as *const CopyEntry, copies.len()) }
            == entries.as_slice();
    if !same {
        // SAFETY: as above; the last batch that read it was waited for. (A queued restore
        // behind another with the same transfers finds the same entries and writes nothing:
        // the copy that may still read them is left alone.)
        unsafe {
            std::slice::from_raw_parts_mut(buffers.table_host as *mut CopyEntry, copies.len())
        }
        .copy_from_slice(&entries);
    }
    let table = entries.as_slice();
    if total == 0 {
        return false;
    }
    // The device table holds these entries already (the twin's first ones, which are these):
    // no table copy.
    let table_bytes = if same && resident >= copies.len() {
        0
    } else {
        std::mem::size_of_val(table)
    };
    let _g = Guard::new();
    let mut table_arg = buffers.table_device as u64;
    let mut n = copies.len() as u32;
    let mut chunk = COPY_CHUNK as u64;
    let mut total_arg = total;
    let mut args: [*mut c_void; 4] = [
        (&mut table_arg as *mut u64).cast(),
        (&mut n as *mut u32).cast(),
        (&mut chunk as *mut u64).cast(),
        (&mut total_arg as *mut u64).cast(),
    ];
    // SAFETY: `args` are the copy kernel's parameters (64-bit but `n`, 32-bit): the table holds
    // `n` entries, each naming `len` bytes the context's kernels can read at `src` and write at
    // `dst` (the caller's contract), in `total` chunks; the host twin is not written again until
    // the caller's event completes.
    let submitted = unsafe {
        enqueue_table(
            &drv,
            stream,
            &buffers,
            table_bytes,
            function,
            &mut args,
            total as usize,
            "copy",
        )
    };
    t.ctx.compare.lock().copy_table = match (submitted, table_bytes) {
        (true, 0) => Some((buffers.table_device, resident)),
        (true, _) => Some((buffers.table_device, copies.len())),
        // A table copy may have been submitted: what the device table holds is unknown.
        (false, _) => None,
    };
    submitted
}

/// After copies that failed on the device: what the copy kernel's device table holds is not
/// known any more (the next batch copies its table).
pub(super) fn forget_copy_table(ctx: &crate::cuda::Ctx) {
    ctx.compare.lock().copy_table = None;
}

/// Enqueues one table kernel on `stream`: the first `table_bytes` of the pinned table twin
/// copied to the device table (none when `table_bytes` is 0: the device table holds them),
/// then `function` over `args` with `min(units, MAX_BLOCKS)` blocks of [`THREADS`]. `false`
/// (logged) when either could not be submitted.
///
/// # Safety
/// `args` must point at `function`'s parameters, alive for the call; the table twin must hold
/// `table_bytes` (at most [`TABLE_BYTES`]) of entries describing memory the kernel may read and
/// write, and must not be written again until the stream has passed the copy.
#[allow(clippy::too_many_arguments)]
unsafe fn enqueue_table(
    drv: &Driver,
    stream: CUstream,
    b: &Buffers,
    table_bytes: usize,
    function: usize,
    args: &mut [*mut c_void],
    units: usize,
    what: &str,
) -> bool {
    let r = if table_bytes == 0 {
        CUDA_SUCCESS
    } else {
        // SAFETY: our table buffers, TABLE_BYTES >= `table_bytes` each; the host twin is
        // pinned and kept (caller contract).
        unsafe {
            (drv.memcpy_async)(
                b.table_device as CUdeviceptr,
                b.table_host as CUdeviceptr,
                table_bytes,
                stream,
            )
        }
    };
    if r != CUDA_SUCCESS {
        tracing::warn!(status = %error_name(drv, r), "the {what} table could not be copied");
        return false;
    }
    let blocks = units.clamp(1, MAX_BLOCKS) as u32;
    // SAFETY: our kernel, whose parameters `args` points at (caller contract; the driver copies
    // them during the call); the table it reads was copied before it on the stream.
    let r = unsafe {
        (drv.launch_kernel)(
            function as CUfunction,
            blocks,
            1,
            1,
            THREADS,
            1,
            1,
            0,
            stream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    if r != CUDA_SUCCESS {
        tracing::warn!(status = %error_name(drv, r), "the {what} kernel could not be launched");
        return false;
    }
    true
}

/// After copies submitted by [`submit_copies`] did not finish by their deadline: the table may
/// still be read, so it (with the compare's flags, which share its buffers) is never used
/// again.
pub(super) fn give_up_copy_table(ctx: &crate::cuda::Ctx) {
    ctx.compare.lock().leak_flags();
}

/// One table kernel of a context lent to the batch loop
/// ([`device_compare`](crate::engine::device_compare)): the window, the kernel and its buffers
/// (output and table), their room, what it is (for the logs) and how a stuck batch gives its
/// buffers up.
struct Tables<'t, 'a, E, R> {
    t: &'t mut CudaTarget<'a>,
    function: usize,
    buffers: Buffers,
    /// Most results and entries of a batch.
    limits: (usize, usize),
    what: &'static str,
    give_up: fn(&mut CompareKernel),
    result: std::marker::PhantomData<(E, R)>,
}

impl<E: Copy, R: Copy> TableKernel for Tables<'_, '_, E, R> {
    type Entry = E;
    type Result = R;

    fn limits(&self) -> (usize, usize) {
        self.limits
    }

    fn table(&mut self, n: usize) -> &mut [E] {
        // SAFETY: the kernel's pinned table twin, TABLE_BYTES (page-aligned, so aligned for the
        // entries) with room for `limits.1` of them; no copy reads it (the last batch's was
        // waited for, a stuck one gave the buffers up).
        unsafe {
            std::slice::from_raw_parts_mut(self.buffers.table_host as *mut E, n.min(self.limits.1))
        }
    }

    fn run(&mut self, entries: usize, granule: usize, granules: usize) -> Result<(), DiffError> {
        let entries = entries.min(self.limits.1);
        let granules = granules.min(self.limits.0);
        run_table(
            self.t,
            &TableLaunch {
                function: self.function,
                buffers: self.buffers,
                table_bytes: entries * std::mem::size_of::<E>(),
                entries,
                granule,
                granules,
                out_bytes: granules * std::mem::size_of::<R>(),
                what: self.what,
            },
            self.give_up,
        )
    }

    fn results(&self, n: usize) -> &[R] {
        // SAFETY: the copy of `n` results (at most `limits.0`, which the pinned buffer holds;
        // page-aligned, so aligned for `R`) into our pinned buffer completed; nothing else
        // writes it until the next batch, which needs `self` mutably.
        unsafe { std::slice::from_raw_parts(self.buffers.host as *const R, n.min(self.limits.0)) }
    }
}

/// One launch of a table kernel: the kernel, its buffers (the table's twin already filled with
/// `entries` entries, `table_bytes` bytes), the granule, the batch's `granules` (its results:
/// `out_bytes` bytes) and what it is, for the logs.
struct TableLaunch {
    function: usize,
    buffers: Buffers,
    table_bytes: usize,
    entries: usize,
    granule: usize,
    granules: usize,
    out_bytes: usize,
    what: &'static str,
}

/// Runs one batch on the private stream: copies the table to the device, launches the kernel
/// over it, copies the results back, records an event and waits for it (copy deadline). On
/// [`DiffError::Stuck`] the buffers may still be written: `give_up` drops them from the
/// context's kernel (never freed) and the stream is poisoned.
fn run_table(
    t: &mut CudaTarget<'_>,
    l: &TableLaunch,
    give_up: fn(&mut CompareKernel),
) -> Result<(), DiffError> {
    let b = &l.buffers;
    let stream = t.stream().ok_or(DiffError::Failed)?;
    let ev = t.take_event(false).ok_or(DiffError::Failed)?;
    let drv = *t.drv();
    let _g = Guard::new();
    let what = l.what;
    let mut table = b.table_device as u64;
    let mut n = l.entries as u32;
    let mut granule = l.granule as u64;
    let mut total = l.granules as u64;
    let mut results = b.device as u64;
    let mut args: [*mut c_void; 5] = [
        (&mut table as *mut u64).cast(),
        (&mut n as *mut u32).cast(),
        (&mut granule as *mut u64).cast(),
        (&mut total as *mut u64).cast(),
        (&mut results as *mut u64).cast(),
    ];
    {
        // This batch rewrites its device table: a copy batch's entries are not there any more.
        let mut k = t.ctx.compare.lock();
        if k.copy_table
            .is_some_and(|(table, _)| table == b.table_device)
        {
            k.copy_table = None;
        }
    }
    // SAFETY: `args` are the table kernels' parameters (64-bit but `n`, 32-bit): the table
    // holds `n` entries naming pinned regions of the context (and their device snapshots),
    // each at least its `len` bytes, whose granules number `total`; the results buffer has
    // room for `total` results (`out_bytes`, at most its size).
    let mut failed = !unsafe {
        enqueue_table(
            &drv,
            stream,
            b,
            l.table_bytes,
            l.function,
            &mut args,
            l.granules,
            what,
        )
    };
    if !failed {
        // SAFETY: our result buffers, at least `out_bytes` bytes each; the copy follows the
        // kernel on the stream.
        let r = unsafe {
            (drv.memcpy_async)(
                b.host as CUdeviceptr,
                b.device as CUdeviceptr,
                l.out_bytes,
                stream,
            )
        };
        if r != CUDA_SUCCESS {
            tracing::warn!(status = %error_name(&drv, r), "the {what} results could not be copied back");
            failed = true;
        }
    }
    // SAFETY: our event and stream.
    let r = unsafe { (drv.event_record)(ev as CUevent, stream) };
    let deadline = t.copy_deadline();
    let outcome = if r == CUDA_SUCCESS {
        t.wait(ev, deadline)
    } else {
        // SAFETY: our stream.
        super::poll(deadline, || unsafe { (drv.stream_query)(stream) })
    };
    match outcome {
        Poll::Done => give_event(t.ctx, ev, false),
        Poll::Failed(r) => {
            tracing::warn!(status = %error_name(&drv, r), "the {what} kernel failed");
            give_event(t.ctx, ev, false);
            return Err(DiffError::Failed);
        }
        Poll::TimedOut => {
            // The table copy, the kernel or the copy back may still read or write the buffers:
            // never reuse them.
            give_up(&mut t.ctx.compare.lock());
            t.poison_stream();
            return Err(DiffError::Stuck);
        }
    }
    if failed {
        return Err(DiffError::Failed);
    }
    Ok(())
}

/// [`DeviceMemory::fingerprint`](crate::engine::snapshot::DeviceMemory::fingerprint) on CUDA:
/// the fingerprint kernel over device regions, in batches of at most [`PRINT_BYTES`] / 8
/// fingerprints and [`PRINT_ENTRIES`] pieces (regions split on granule boundaries), one launch
/// each. [`DiffError::Unsupported`] where the kernel or its buffers are not there (not loaded,
/// not in the module, given up by a stuck fingerprint): a window never loads or allocates
/// them.
pub(super) fn fingerprint(
    t: &mut CudaTarget<'_>,
    regions: &[(usize, usize)],
    granule: usize,
) -> Result<Vec<u64>, DiffError> {
    if granules_of(regions, granule) == 0 {
        return Ok(Vec::new());
    }
    let Some((function, buffers)) = t.ctx.compare.lock().fingerprint() else {
        return Err(DiffError::Unsupported);
    };
    let mut kernel = Tables::<PrintEntry, u64> {
        t,
        function,
        buffers,
        limits: (PRINT_BYTES / 8, PRINT_ENTRIES),
        what: "fingerprint",
        give_up: CompareKernel::leak_prints,
        result: std::marker::PhantomData,
    };
    fingerprint_in_batches(&mut kernel, regions, granule)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `.param` lines of `entry` in the PTX.
    fn params_of(ptx: &str, entry: &str) -> Vec<String> {
        let start = ptx
            .find(&format!(".visible .entry {entry}("))
            .unwrap_or_else(|| panic!("no .entry {entry}"));
        let rest = &ptx[start..];
        rest[..rest.find(')').expect("parameter list")]
            .lines()
            .skip(1)
            .map(|l| l.trim().trim_end_matches(',').to_string())
            .collect()
    }

    #[test]
    fn the_embedded_ptx_has_the_five_entry_points_for_sm_80() {
        let ptx = PTX.strip_suffix('\0').expect("NUL-terminated");
        assert!(!ptx.contains('\0'));
        assert!(ptx.lines().any(|l| l.trim() == ".target sm_80"), "target");
        assert!(ptx.lines().any(|l| l.trim() == ".address_size 64"));
        // A driver refuses PTX newer than itself: ISA 7.0 is CUDA 11.0's.
        assert!(ptx.lines().any(|l| l.trim() == ".version 7.0"), "version");
        // The table kernels the backend launches: (table, n, granule, total, out), n 32-bit as
        // run_table passes it.
        for entry in [ENTRY, FINGERPRINT_ENTRY] {
            let entry = entry.to_str().unwrap();
            let params = params_of(ptx, entry);
            let widths: Vec<&str> = params
                .iter()
                .map(|p| p.split_whitespace().nth(1).unwrap_or(""))
                .collect();
            assert_eq!(
                widths,
                [".u64", ".u32", ".u64", ".u64", ".u64"],
                "{entry}: {params:?}"
            );
        }
        // The per-region kernels the GPU check measures the table kernels against.
        for (entry, n, what) in [
            (
                "rocprof_replay_compare",
                5,
                "(live, snap, len, granule, flags)",
            ),
            ("rocprof_replay_fingerprint", 4, "(src, len, granule, out)"),
        ] {
            let params = params_of(ptx, entry);
            assert_eq!(params.len(), n, "{entry}: {what}");
            assert!(
                params.iter().all(|p| p.starts_with(".param .u64 ")),
                "{entry}: all 64-bit: {params:?}"
            );
        }
        // The copy kernel: (table, n, chunk, total), n 32-bit as submit_copies passes it.
        let widths: Vec<String> = params_of(ptx, COPY_ENTRY.to_str().unwrap())
            .iter()
            .map(|p| p.split_whitespace().nth(1).unwrap_or("").to_string())
            .collect();
        assert_eq!(widths, [".u64", ".u32", ".u64", ".u64"], "copy table");
        assert_eq!(ptx.matches(".visible .entry").count(), 5);
    }

    #[test]
    fn the_tests_tables_hold_few_entries() {
        assert_eq!(
            (COMPARE_ENTRIES, PRINT_ENTRIES),
            (16, 21),
            "the tests' tables"
        );
        assert!(64 << 10 >= 2048 * std::mem::size_of::<CompareEntry>());
        assert_eq!(
            COPY_ENTRIES, 16,
            "the copy table shares the flags' 512 bytes in tests"
        );
        assert_eq!(
            std::mem::size_of::<CopyEntry>(),
            32,
            "four u64, as the kernel reads"
        );
    }

    #[test]
    fn the_fingerprint_of_a_known_pattern_is_the_one_the_gpu_check_expects() {
        // tests/cuda/apps/compare_kernel.cu checks its host copy of the hash against this
        // value, so the GPU check compares the kernel with this crate's function.
        let bytes: Vec<u8> = (0..4099u32).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(
            crate::engine::footprint::fingerprint(&bytes),
            0xdb8a_90be_bb94_b379
        );
    }
}
