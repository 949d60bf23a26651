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
//! The kernel is loaded per context outside any window ([`prepare_compare`]: after the
//! context's first allocation, or at its first launch, on the application thread, under the
//! [`Guard`] and the module-load rule of [`Behind`](super::super::gate::Behind)) — a load
//! inside a window could deadlock against the window's own gates. A window never loads it: a
//! context not prepared yet, or where it cannot be loaded, answers [`DiffError::Unsupported`],
//! so its dispatches get full restores. Regions whose snapshot is in host memory (pinned, when the device had no room) are
//! compared on the host ([`diff_by_reading`]: only live memory is read back).
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
use std::time::Instant;

use rocprof_replay_sys::cuda::*;

use super::{CudaTarget, Poll, give_event};
use crate::cuda::Guard;
use crate::cuda::api::{Driver, error_name};
use crate::engine::snapshot::{DiffError, DirtyRange, DirtyRanges, Transfer, diff_by_reading};

/// The compare kernel's PTX (`kernels/cuda/compare.cu`, built by
/// `scripts/build-cuda-kernels.sh`), NUL-terminated as `cuModuleLoadData` wants PTX text.
pub(crate) const PTX: &str = concat!(include_str!("../../../kernels/cuda/compare.ptx"), "\0");

/// The kernel's entry point: `(live, snap, len, granule, flags)`, all 64-bit.
pub(crate) const ENTRY: &CStr = c"rocprof_replay_compare";

/// The fingerprint kernel's entry point (same module): `(src, len, granule, out)`, all 64-bit.
pub(crate) const FINGERPRINT_ENTRY: &CStr = c"rocprof_replay_fingerprint";

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

/// The compare kernel of one context (a field of [`Ctx`](super::super::Ctx); used under the
/// context's writer lock, by its window).
#[derive(Default)]
pub(crate) struct CompareKernel {
    state: State,
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
    },
}

/// One batch's output: device memory and as much pinned host memory (at least a page each),
/// kept for the context's life.
struct Buffers {
    device: usize,
    host: usize,
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
                Ok((function, fingerprint)) => State::Ready {
                    function,
                    flags: None,
                    fingerprint,
                    prints: None,
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

    /// The flag buffers, allocated by [`prepare`](Self::prepare) (never inside a window: an
    /// allocation or a free there may synchronise the context against the window's own gates).
    fn flags(&self) -> Option<(usize, usize)> {
        match &self.state {
            State::Ready { flags: Some(f), .. } => Some((f.device, f.host)),
            _ => None,
        }
    }

    /// The fingerprint kernel's handle and its output buffers (device, pinned host), when all
    /// three are there ([`prepare`](Self::prepare) allocated the buffers and no stuck
    /// fingerprint gave them up since).
    fn fingerprint(&self) -> Option<(usize, usize, usize)> {
        match &self.state {
            State::Ready {
                fingerprint: Some(f),
                prints: Some(b),
                ..
            } => Some((*f, b.device, b.host)),
            _ => None,
        }
    }

    /// Allocates the flag buffers if they are missing: [`FLAG_BYTES`] (at least a page) of
    /// device memory and as many of pinned host memory, once per context.
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
    /// [`PRINT_BYTES`] (at least a page) of device memory and as many of pinned host memory.
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

    /// Gives the flag buffers up without freeing them: a compare or copy into them may still
    /// be running.
    fn leak_flags(&mut self) {
        if let State::Ready { flags, .. } = &mut self.state {
            // Dropping `Buffers` frees nothing: the buffers are simply never used again.
            *flags = None;
        }
    }

    /// Gives the fingerprint buffers up without freeing them: a fingerprint or copy into them
    /// may still be running.
    fn leak_prints(&mut self) {
        if let State::Ready { prints, .. } = &mut self.state {
            *prints = None;
        }
    }
}

/// `len` bytes (at least a page) of device memory and as many of pinned host memory, for the
/// output of `what`; `None` (nothing kept) when either cannot be had.
fn allocate(drv: &Driver, len: usize, what: &str) -> Option<Buffers> {
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
    Some(Buffers {
        device: device as usize,
        host: host as usize,
    })
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
    ctx.compare.lock().prepare(&be.drv, ctx.handle);
}

/// Loads the compare module into the current context; returns the compare kernel's handle and
/// the fingerprint kernel's (`None` when the module has none: fingerprints are unsupported).
fn load(drv: &Driver) -> Result<(usize, Option<usize>), String> {
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
        Ok((function as usize, fingerprint))
    })
}

/// Part of a region compared in one batch: `len` bytes at `offset` into region `index`, its
/// flags at `at` in the batch's buffer.
#[derive(Clone, Copy)]
struct Piece {
    index: usize,
    offset: usize,
    len: usize,
    at: usize,
}

/// [`DeviceMemory::diff`](crate::engine::snapshot::DeviceMemory::diff) on CUDA: regions whose
/// snapshot is on the device are compared by the kernel, the others on the host.
pub(super) fn diff(
    t: &mut CudaTarget<'_>,
    regions: &[Transfer],
    on_device: &[bool],
    granule: usize,
) -> Result<DirtyRanges, DiffError> {
    let granule = granule.max(1);
    let staged_on_device = |i: usize| on_device.get(i).copied().unwrap_or(false);
    let device: Vec<usize> = (0..regions.len())
        .filter(|&i| staged_on_device(i) && regions[i].len > 0)
        .collect();
    let host: Vec<usize> = (0..regions.len())
        .filter(|&i| !staged_on_device(i) && regions[i].len > 0)
        .collect();
    let mut out = DirtyRanges::new();
    if !device.is_empty() {
        let Some(function) = t.ctx.compare.lock().function() else {
            return Err(DiffError::Unsupported);
        };
        compare_on_device(t, function, regions, &device, granule, &mut out)?;
    }
    if !host.is_empty() {
        // Host-readable snapshots: only live memory is read back (into host scratch).
        let subset: Vec<Transfer> = host.iter().map(|&i| regions[i]).collect();
        let found = diff_by_reading(t, &subset, &vec![false; subset.len()], granule)?;
        out.extend(found.into_iter().map(|r| DirtyRange {
            index: host[r.index],
            ..r
        }));
    }
    out.sort_by_key(|r| (r.index, r.offset));
    Ok(out)
}

/// Compares `which` regions (snapshots on the device) in batches of at most [`FLAG_BYTES`]
/// granules: per batch one launch per piece, one copy of the flags, one event, one bounded
/// wait.
fn compare_on_device(
    t: &mut CudaTarget<'_>,
    function: usize,
    regions: &[Transfer],
    which: &[usize],
    granule: usize,
    out: &mut DirtyRanges,
) -> Result<(), DiffError> {
    let total: usize = which
        .iter()
        .map(|&i| regions[i].len.div_ceil(granule))
        .fold(0usize, usize::saturating_add);
    let Some((flags_device, flags_host)) = t.ctx.compare.lock().flags() else {
        return Err(DiffError::Failed);
    };
    let capacity = total.min(FLAG_BYTES);
    let mut batch: Vec<Piece> = Vec::new();
    let mut used = 0usize;
    for &index in which {
        let len = regions[index].len;
        let mut offset = 0;
        while offset < len {
            if used == capacity {
                run_batch(
                    t,
                    function,
                    regions,
                    &batch,
                    granule,
                    (flags_device, flags_host),
                    out,
                )?;
                batch.clear();
                used = 0;
            }
            // Whole granules from the region's start, as many as the batch has room for.
            let granules = (len - offset).div_ceil(granule).min(capacity - used);
            let piece_len = (granules * granule).min(len - offset);
            batch.push(Piece {
                index,
                offset,
                len: piece_len,
                at: used,
            });
            used += granules;
            offset += piece_len;
        }
    }
    run_batch(
        t,
        function,
        regions,
        &batch,
        granule,
        (flags_device, flags_host),
        out,
    )
}

/// Launches the compare of every piece, copies the flags back, waits (copy deadline) and
/// appends the dirty granules.
fn run_batch(
    t: &mut CudaTarget<'_>,
    function: usize,
    regions: &[Transfer],
    batch: &[Piece],
    granule: usize,
    (flags_device, flags_host): (usize, usize),
    out: &mut DirtyRanges,
) -> Result<(), DiffError> {
    let Some(last) = batch.last() else {
        return Ok(());
    };
    let used = last.at + last.len.div_ceil(granule);
    let stream = t.stream().ok_or(DiffError::Failed)?;
    let ev = t.take_event(false).ok_or(DiffError::Failed)?;
    let drv = *t.drv();
    let _g = Guard::new();
    let mut failed = false;
    for p in batch {
        let r = &regions[p.index];
        let granules = p.len.div_ceil(granule);
        let mut live = (r.device + p.offset) as u64;
        let mut snap = (r.staging + p.offset) as u64;
        let mut len = p.len as u64;
        let mut gran = granule as u64;
        let mut flags = (flags_device + p.at) as u64;
        let mut args: [*mut c_void; 5] = [
            (&mut live as *mut u64).cast(),
            (&mut snap as *mut u64).cast(),
            (&mut len as *mut u64).cast(),
            (&mut gran as *mut u64).cast(),
            (&mut flags as *mut u64).cast(),
        ];
        let blocks = granules.min(MAX_BLOCKS) as u32;
        // SAFETY: our kernel, whose five 64-bit parameters `args` points at (alive for the
        // call, which copies them); `live` is a pinned region of the context and `snap` its
        // device snapshot, both at least `len` bytes; `flags` has room for `granules` bytes.
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
            tracing::warn!(status = %error_name(&drv, r), "the compare kernel could not be launched");
            failed = true;
            break;
        }
    }
    if !failed {
        // SAFETY: our flag buffers, `used` bytes each; the copy follows the compares on the
        // stream.
        let r = unsafe {
            (drv.memcpy_async)(
                flags_host as CUdeviceptr,
                flags_device as CUdeviceptr,
                used,
                stream,
            )
        };
        if r != CUDA_SUCCESS {
            tracing::warn!(status = %error_name(&drv, r), "the compare flags could not be copied back");
            failed = true;
        }
    }
    // SAFETY: our event and stream.
    let r = unsafe { (drv.event_record)(ev as CUevent, stream) };
    let deadline = Instant::now() + t.settings().copy;
    let outcome = if r == CUDA_SUCCESS {
        t.wait(ev, deadline)
    } else {
        // SAFETY: our stream.
        super::poll(deadline, || unsafe { (drv.stream_query)(stream) })
    };
    match outcome {
        Poll::Done => give_event(t.ctx, ev, false),
        Poll::Failed(r) => {
            tracing::warn!(status = %error_name(&drv, r), "the compare kernel failed");
            give_event(t.ctx, ev, false);
            return Err(DiffError::Failed);
        }
        Poll::TimedOut => {
            // The compares or the copy may still write the flag buffers: never reuse them.
            t.ctx.compare.lock().leak_flags();
            t.poison_stream();
            return Err(DiffError::Stuck);
        }
    }
    if failed {
        return Err(DiffError::Failed);
    }
    // SAFETY: the copy of `used` flag bytes into our pinned buffer completed; nothing else
    // writes it until the next batch.
    let flags = unsafe { std::slice::from_raw_parts(flags_host as *const u8, used) };
    for p in batch {
        dirty_granules(out, p, &flags[p.at..], granule);
    }
    Ok(())
}

/// Appends the granules of `piece` whose flag is set, joining adjacent ones.
fn dirty_granules(out: &mut DirtyRanges, piece: &Piece, flags: &[u8], granule: usize) {
    let granules = piece.len.div_ceil(granule);
    for (k, _) in flags[..granules]
        .iter()
        .enumerate()
        .filter(|(_, f)| **f != 0)
    {
        let offset = piece.offset + k * granule;
        let len = granule.min(piece.offset + piece.len - offset);
        match out.last_mut() {
            Some(last) if last.index == piece.index && last.offset + last.len == offset => {
                last.len += len;
            }
            _ => out.push(DirtyRange {
                index: piece.index,
                offset,
                len,
            }),
        }
    }
}

/// Part of a region fingerprinted in one batch: `len` bytes at `addr`, its fingerprints at
/// `at` in the batch's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    addr: usize,
    len: usize,
    at: usize,
}

/// Splits `regions` (address, length) into batches of at most `capacity` fingerprints, on
/// granule boundaries from each region's start; empty regions have none.
fn print_batches(regions: &[(usize, usize)], granule: usize, capacity: usize) -> Vec<Vec<Span>> {
    let capacity = capacity.max(1);
    let mut batches: Vec<Vec<Span>> = Vec::new();
    let mut used = capacity;
    for &(addr, len) in regions {
        let mut offset = 0;
        while offset < len {
            if used == capacity {
                batches.push(Vec::new());
                used = 0;
            }
            let granules = (len - offset).div_ceil(granule).min(capacity - used);
            let piece = granules.saturating_mul(granule).min(len - offset);
            if let Some(batch) = batches.last_mut() {
                batch.push(Span {
                    addr: addr + offset,
                    len: piece,
                    at: used,
                });
            }
            used += granules;
            offset += piece;
        }
    }
    batches
}

/// [`DeviceMemory::fingerprint`](crate::engine::snapshot::DeviceMemory::fingerprint) on CUDA:
/// the fingerprint kernel over device regions, in batches of at most [`PRINT_BYTES`] / 8
/// fingerprints (regions split on granule boundaries). [`DiffError::Unsupported`] where the
/// kernel or its buffers are not there (not loaded, not in the module, given up by a stuck
/// fingerprint): a window never loads or allocates them.
pub(super) fn fingerprint(
    t: &mut CudaTarget<'_>,
    regions: &[(usize, usize)],
    granule: usize,
) -> Result<Vec<u64>, DiffError> {
    let granule = granule.max(1);
    let total = regions
        .iter()
        .map(|r| r.1.div_ceil(granule))
        .fold(0usize, usize::saturating_add);
    if total == 0 {
        return Ok(Vec::new());
    }
    let Some((function, device, host)) = t.ctx.compare.lock().fingerprint() else {
        return Err(DiffError::Unsupported);
    };
    let mut out = Vec::with_capacity(total);
    for batch in print_batches(regions, granule, PRINT_BYTES / 8) {
        print_batch(t, function, &batch, granule, (device, host), &mut out)?;
    }
    Ok(out)
}

/// Launches the fingerprint of every span of `batch`, copies the fingerprints back, waits
/// (copy deadline) and appends them.
fn print_batch(
    t: &mut CudaTarget<'_>,
    function: usize,
    batch: &[Span],
    granule: usize,
    (prints_device, prints_host): (usize, usize),
    out: &mut Vec<u64>,
) -> Result<(), DiffError> {
    let Some(last) = batch.last() else {
        return Ok(());
    };
    let used = last.at + last.len.div_ceil(granule);
    let stream = t.stream().ok_or(DiffError::Failed)?;
    let ev = t.take_event(false).ok_or(DiffError::Failed)?;
    let drv = *t.drv();
    let _g = Guard::new();
    let mut failed = false;
    for s in batch {
        let granules = s.len.div_ceil(granule);
        let mut src = s.addr as u64;
        let mut len = s.len as u64;
        let mut gran = granule as u64;
        let mut prints = (prints_device + s.at * 8) as u64;
        let mut args: [*mut c_void; 4] = [
            (&mut src as *mut u64).cast(),
            (&mut len as *mut u64).cast(),
            (&mut gran as *mut u64).cast(),
            (&mut prints as *mut u64).cast(),
        ];
        let blocks = granules.min(MAX_BLOCKS) as u32;
        // SAFETY: our kernel, whose four 64-bit parameters `args` points at (alive for the
        // call, which copies them); `src` is `len` bytes of a pinned device region of the
        // context; `prints` has room for `granules` fingerprints (`at + granules <= used`, at
        // most PRINT_BYTES / 8).
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
            tracing::warn!(status = %error_name(&drv, r), "the fingerprint kernel could not be launched");
            failed = true;
            break;
        }
    }
    if !failed {
        // SAFETY: our fingerprint buffers, at least `used * 8` bytes each; the copy follows the
        // kernels on the stream.
        let r = unsafe {
            (drv.memcpy_async)(
                prints_host as CUdeviceptr,
                prints_device as CUdeviceptr,
                used * 8,
                stream,
            )
        };
        if r != CUDA_SUCCESS {
            tracing::warn!(status = %error_name(&drv, r), "the fingerprints could not be copied back");
            failed = true;
        }
    }
    // SAFETY: our event and stream.
    let r = unsafe { (drv.event_record)(ev as CUevent, stream) };
    let deadline = Instant::now() + t.settings().copy;
    let outcome = if r == CUDA_SUCCESS {
        t.wait(ev, deadline)
    } else {
        // SAFETY: our stream.
        super::poll(deadline, || unsafe { (drv.stream_query)(stream) })
    };
    match outcome {
        Poll::Done => give_event(t.ctx, ev, false),
        Poll::Failed(r) => {
            tracing::warn!(status = %error_name(&drv, r), "the fingerprint kernel failed");
            give_event(t.ctx, ev, false);
            return Err(DiffError::Failed);
        }
        Poll::TimedOut => {
            // The kernels or the copy may still write the buffers: never reuse them.
            t.ctx.compare.lock().leak_prints();
            t.poison_stream();
            return Err(DiffError::Stuck);
        }
    }
    if failed {
        return Err(DiffError::Failed);
    }
    // SAFETY: the copy of `used` fingerprints into our pinned buffer (page-aligned, so
    // aligned for u64) completed; nothing else writes it until the next batch.
    let prints = unsafe { std::slice::from_raw_parts(prints_host as *const u64, used) };
    out.extend_from_slice(prints);
    Ok(())
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
    fn the_embedded_ptx_has_both_entry_points_for_sm_80() {
        let ptx = PTX.strip_suffix('\0').expect("NUL-terminated");
        assert!(!ptx.contains('\0'));
        assert!(ptx.lines().any(|l| l.trim() == ".target sm_80"), "target");
        assert!(ptx.lines().any(|l| l.trim() == ".address_size 64"));
        // A driver refuses PTX newer than itself: ISA 7.0 is CUDA 11.0's.
        assert!(ptx.lines().any(|l| l.trim() == ".version 7.0"), "version");
        for (entry, n, what) in [
            (ENTRY, 5, "(live, snap, len, granule, flags)"),
            (FINGERPRINT_ENTRY, 4, "(src, len, granule, out)"),
        ] {
            let entry = entry.to_str().unwrap();
            let params = params_of(ptx, entry);
            assert_eq!(params.len(), n, "{entry}: {what}");
            assert!(
                params.iter().all(|p| p.starts_with(".param .u64 ")),
                "{entry}: all 64-bit: {params:?}"
            );
        }
        assert_eq!(ptx.matches(".visible .entry").count(), 2);
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

    #[test]
    fn fingerprint_batches_split_regions_on_granule_boundaries() {
        let span = |addr, len, at| Span { addr, len, at };
        // Granules of 100, 4 a batch: 250 bytes (3 granules, the last 50), nothing, 1000
        // bytes (10), 1 byte (1).
        let batches = print_batches(
            &[(0x1000, 250), (0x5000, 0), (0x2000, 1000), (0x9000, 1)],
            100,
            4,
        );
        assert_eq!(
            batches,
            vec![
                vec![span(0x1000, 250, 0), span(0x2000, 100, 3)],
                vec![span(0x2000 + 100, 400, 0)],
                vec![span(0x2000 + 500, 400, 0)],
                vec![span(0x2000 + 900, 100, 0), span(0x9000, 1, 1)],
            ]
        );
        assert!(print_batches(&[(0x1000, 0)], 100, 4).is_empty());
        // One batch exactly full, then nothing left over.
        assert_eq!(
            print_batches(&[(0, 400)], 100, 4),
            vec![vec![span(0, 400, 0)]]
        );
    }

    #[test]
    fn flags_become_granule_ranges_from_the_region_start_with_a_short_last_one() {
        let mut out = DirtyRanges::new();
        // 10 000 bytes at offset 8192 of region 3: granules of 4096, the last is 1808 bytes.
        let piece = Piece {
            index: 3,
            offset: 8192,
            len: 10_000,
            at: 2,
        };
        let flags = [9, 9, 1, 0, 1, 9];
        dirty_granules(&mut out, &piece, &flags[2..], 4096);
        assert_eq!(
            out,
            vec![
                DirtyRange {
                    index: 3,
                    offset: 8192,
                    len: 4096
                },
                DirtyRange {
                    index: 3,
                    offset: 16384,
                    len: 1808
                },
            ]
        );
        // A region split between batches: the second piece's first granule joins the first
        // piece's last one.
        let mut out = DirtyRanges::new();
        let first = Piece {
            index: 0,
            offset: 0,
            len: 8192,
            at: 0,
        };
        dirty_granules(&mut out, &first, &[0, 1], 4096);
        let second = Piece {
            index: 0,
            offset: 8192,
            len: 1000,
            at: 0,
        };
        dirty_granules(&mut out, &second, &[1], 4096);
        assert_eq!(
            out,
            vec![DirtyRange {
                index: 0,
                offset: 4096,
                len: 5096
            }]
        );
    }
}
