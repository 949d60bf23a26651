//! The CUDA backend against a fake driver: no GPU, no CUDA installation.
//!
//! The fake driver keeps "device memory" in host buffers, runs a "kernel" (a Rust function
//! behind the `CUfunction` handle) synchronously when it is launched, completes events and
//! streams at once unless a test makes them stick, and counts what it was asked to do. Tests
//! play the application: they call the backend's CUPTI callback at API enter, do what the
//! driver would do, and call it again at API exit — on their own thread, so the companion
//! thread, the handoff and every lock are the real ones.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use rocprof_replay_sys::cuda::*;

use super::writes::Writes;
use super::*;
use crate::engine::inventory::AllocationInventory;
use crate::engine::settings::Settings;
use crate::engine::window::{ReplayTarget, decide};
use crate::policy::{DeclineReason, FailureReason, OutcomeKind, PassPlan, ReplayPolicy};

/// A fake kernel: what `CUfunction` points at.
#[repr(C)]
struct FakeKernel {
    run: fn(*mut *mut c_void),
    module: usize,
}

#[derive(Default)]
struct FakeGpu {
    /// Allocations: address -> buffer.
    memory: HashMap<usize, Box<[u8]>>,
    /// Addresses the "application" allocated (copies into them are restores).
    app: HashSet<usize>,
    /// Streams made by `cuStreamCreate` (the backend's own).
    created_streams: HashSet<usize>,
    /// The allocations made through the fake's `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`,
    /// `cuMemAllocPitch` and `cuMemCreate` (only the backend calls them: retries), with the
    /// stream each was given (0 where none).
    allocations_made: Vec<(&'static str, usize)>,
    /// Every `cuCtxSetCurrent`'s context, in order.
    contexts_made_current: Vec<usize>,
    /// Streams with work that never finishes.
    stuck_streams: HashSet<usize>,
    /// Each stream memory wait as it was enqueued: its stream, and whether the stream was
    /// held by an earlier wait not yet passed then.
    waits_enqueued: Vec<(usize, bool)>,
    /// Application streams destroyed (a query of one is a use of a freed handle: a fault).
    destroyed_streams: HashSet<usize>,
    /// Run on a thread of its own (another application thread) when the stream is queried,
    /// the query waiting up to 100 ms for it.
    on_query: Option<(usize, Box<dyn FnOnce() + Send>)>,
    /// Events whose recorded work never finishes.
    stuck_events: HashSet<usize>,
    /// Streams on which no event can be recorded.
    unrecordable_streams: HashSet<usize>,
    next_handle: usize,
    launches: u32,
    relaunches: u32,
    /// Relaunches since an event was last queried, and the most there were (queued passes).
    relaunches_unwaited: u32,
    most_relaunches_unwaited: u32,
    /// Copies into application memory fail this many times.
    failing_restores: u32,
    stick_copies: bool,
    stick_relaunches: bool,
    /// Streams `cuStreamGetFlags` says are non-blocking.
    non_blocking_streams: HashSet<usize>,
    /// The application's launches into this stream never finish (the stream sticks, as a
    /// kernel waiting for a flag does) until a test unsticks it.
    stick_after_launch: Option<usize>,
    /// An `add_one` of the application enqueued behind a wait not yet passed runs only once
    /// the waits its stream had then have passed ([`pump`]), as on a GPU (otherwise the fake
    /// runs every kernel in its launch call).
    defer_held: bool,
    /// Those kernels, in launch order.
    deferred: Vec<DeferredKernel>,
    /// Relaunches take this long (their events complete that much later).
    slow_relaunches: Option<Duration>,
    /// Streams whose events complete only at the given time, and those events.
    slow_streams: HashMap<usize, Instant>,
    slow_events: HashMap<usize, Instant>,
    fail_app_launch: bool,
    capturing: bool,
    stream_waits: Vec<(usize, usize)>,
    /// (module, name) -> (address, size).
    globals: Vec<(usize, String, usize, usize)>,
    restore_batches: u32,
    device_free: usize,
    /// Per stream: the stream memory waits enqueued on it (address, value).
    gates: HashMap<usize, Vec<(usize, u32)>>,
    /// Per event: the waits its stream had not passed when it was recorded.
    event_gates: HashMap<usize, Vec<(usize, u32)>>,
    /// What was enqueued on each stream, in order.
    ops: Vec<(usize, Op)>,
    /// `cuStreamWriteValue32`s on streams whose work never finishes (never performed).
    stuck_writes: Vec<(usize, usize, u32)>,
    /// No stream memory operations (the driver before them, or a refusing device).
    no_mem_ops: bool,
    /// `cuModuleLoadData` fails.
    fail_module_load: bool,
    /// `cuModuleLoadData` calls.
    module_loads: u32,
    /// Of those, loads made while a window was in flight.
    module_loads_in_windows: usize,
    /// `cuMemFree` / `cuMemFreeHost` calls made while a window was in flight.
    frees_in_windows: usize,
    /// Compare kernels launched, and the entries and granules of each one's table (of those
    /// that ran).
    compares: u32,
    compare_tables: Vec<(usize, usize)>,
    /// Compare kernels never finish (their stream sticks).
    stick_compares: bool,
    /// Fingerprint kernels launched, and the entries and granules of each one's table (as
    /// above).
    fingerprints: u32,
    fingerprint_tables: Vec<(usize, usize)>,
    /// Fingerprint kernels never finish (their stream sticks).
    stick_fingerprints: bool,
    /// The module has no fingerprint kernel (`cuModuleGetFunction` does not find it).
    no_fingerprint_entry: bool,
    /// Copy kernels launched, and the entries of each one's table (of those that ran).
    copy_tables: Vec<usize>,
    /// Copy kernels never finish (their stream sticks; `stick_copies` sticks them too).
    stick_copy_kernels: bool,
    /// The module has no copy kernel: every snapshot copy is a `cuMemcpyAsync`.
    no_copy_entry: bool,
    /// Table kernels given memory outside the fake's allocations, or a table the backend did
    /// not build as it promises, or did not copy on the kernel's stream before it (not run: a
    /// fault). Every harness checks that there were none when it is dropped.
    kernel_faults: Vec<String>,
    /// Per stream: what `cuMemcpyAsync` wrote since the stream's last table kernel (address,
    /// length).
    copied: HashMap<usize, Vec<(usize, usize)>>,
    /// Per destination: the source of the last `cuMemcpyAsync` into it (a copy table's twin).
    copied_from: HashMap<usize, usize>,
    /// Copy-kernel launches that found their table on the device already (no table copy).
    resident_tables: usize,
    /// `cuFuncGetAttribute` fails (`CUDA_ERROR_INVALID_HANDLE`).
    fail_func_attributes: bool,
    /// `cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS)` (`None`: 16).
    registers: Option<i32>,
    /// Kernel records (`kernel_clock::fake`): the durations, ns, of the application's own
    /// launches and of relaunches. A relaunch calls the backend's launch callback, as CUPTI
    /// does for the backend's own calls, with correlation id 1000 + its number.
    kernel_ns: Option<(u64, u64)>,
    /// The application's launches get records under another correlation id than their
    /// driver call's (as a runtime-API launch may).
    runtime_ids: bool,
    /// The device addresses pageable system memory (HMM, ATS).
    pageable: bool,
    /// Addresses `cuPointerGetAttribute` says are device memory.
    pointer_device: Vec<usize>,
    /// Addresses `cuPointerGetAttribute` says are managed memory.
    pointer_managed: Vec<usize>,
}

/// A stream operation, as the fake saw it enqueued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Wait(usize, u32),
    Write(usize, u32),
    /// A kernel; `true`: enqueued while the stream was held by a wait not yet passed.
    Launch(bool),
    /// An event recorded; `true`: while the stream was held.
    Record(usize, bool),
}

/// An `add_one` held back by the fake ([`FakeGpu::defer_held`]): its stream, the waits it is
/// behind, its buffer and length.
type DeferredKernel = (usize, Vec<(usize, u32)>, CUdeviceptr, u32);

/// Whether the wait for `value` at `addr` is satisfied (the cyclic `GEQ`).
fn passed(&(addr, value): &(usize, u32)) -> bool {
    if HIDE_HOST_STORES.load(Ordering::Acquire) {
        return false;
    }
    // SAFETY: gate words are the backend's live pinned page (fake memory).
    let w = unsafe { std::ptr::read_volatile(addr as *const u32) };
    (w.wrapping_sub(value) as i32) >= 0
}

impl FakeGpu {
    /// The waits of `stream` not yet passed.
    fn held(&mut self, stream: usize) -> Vec<(usize, u32)> {
        let waits = self.gates.entry(stream).or_default();
        waits.retain(|w| !passed(w));
        waits.clone()
    }
}

static GPU: Mutex<Option<FakeGpu>> = Mutex::new(None);
/// The device never sees host stores to gate words (a held stream stays held).
static HIDE_HOST_STORES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// One test at a time uses the fake driver.
static SERIAL: Mutex<()> = Mutex::new(());

/// The fake driver's serial lock, for other test modules that use its process-wide fakes.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock()
}

fn gpu() -> parking_lot::MappedMutexGuard<'static, FakeGpu> {
    MutexGuard::map(GPU.lock(), |g| g.get_or_insert_with(FakeGpu::default))
}

fn handle() -> usize {
    let mut g = gpu();
    g.next_handle += 0x100;
    0x7000_0000 + g.next_handle
}

unsafe extern "C" fn get_error_name(_: CUresult, p: *mut *const c_char) -> CUresult {
    // SAFETY: out-parameter.
    unsafe { *p = c"FAKE_ERROR".as_ptr() };
    CUDA_SUCCESS
}
unsafe extern "C" fn ctx_set_current(c: CUcontext) -> CUresult {
    gpu().contexts_made_current.push(c as usize);
    CUDA_SUCCESS
}
unsafe extern "C" fn ctx_get_device(d: *mut CUdevice) -> CUresult {
    // SAFETY: out-parameter.
    unsafe { *d = 0 };
    CUDA_SUCCESS
}
unsafe extern "C" fn mem_get_info(free: *mut usize, total: *mut usize) -> CUresult {
    let g = gpu();
    // SAFETY: out-parameters.
    unsafe {
        *free = g.device_free;
        *total = 140 << 30;
    }
    CUDA_SUCCESS
}
fn fake_alloc(size: usize) -> usize {
    let buf = vec![0u8; size.max(1)].into_boxed_slice();
    let p = buf.as_ptr() as usize;
    gpu().memory.insert(p, buf);
    p
}
unsafe extern "C" fn mem_alloc(p: *mut CUdeviceptr, size: usize) -> CUresult {
    check_capture(&mut gpu(), "cuMemAlloc");
    // SAFETY: out-parameter.
    unsafe { *p = fake_alloc(size) as CUdeviceptr };
    CUDA_SUCCESS
}
unsafe extern "C" fn mem_alloc_pitch(
    p: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    _: c_uint,
) -> CUresult {
    let padded = width.next_multiple_of(512);
    gpu().allocations_made.push(("cuMemAllocPitch", 0));
    // SAFETY: out-parameters.
    unsafe { (*p, *pitch) = (fake_alloc(padded * height) as CUdeviceptr, padded) };
    CUDA_SUCCESS
}
unsafe extern "C" fn mem_alloc_async(p: *mut CUdeviceptr, size: usize, s: CUstream) -> CUresult {
    gpu().allocations_made.push(("cuMemAllocAsync", s as usize));
    // SAFETY: out-parameter.
    unsafe { *p = fake_alloc(size) as CUdeviceptr };
    CUDA_SUCCESS
}
unsafe extern "C" fn mem_alloc_from_pool_async(
    p: *mut CUdeviceptr,
    size: usize,
    _: CUmemoryPool,
    s: CUstream,
) -> CUresult {
    gpu()
        .allocations_made
        .push(("cuMemAllocFromPoolAsync", s as usize));
    // SAFETY: out-parameter.
    unsafe { *p = fake_alloc(size) as CUdeviceptr };
    CUDA_SUCCESS
}
unsafe extern "C" fn fake_mem_create(
    h: *mut CUmemGenericAllocationHandle,
    _: usize,
    _: *const c_void,
    _: u64,
) -> CUresult {
    gpu().allocations_made.push(("cuMemCreate", 0));
    // SAFETY: out-parameter.
    unsafe { *h = handle() as CUmemGenericAllocationHandle };
    CUDA_SUCCESS
}
unsafe extern "C" fn mem_free(p: CUdeviceptr) -> CUresult {
    let mut g = gpu();
    check_capture(&mut g, "cuMemFree");
    // A free may synchronise the context: not while a window's gates may be closed.
    g.frees_in_windows += usize::from(super::gate::BEHIND.pending() > 0);
    match g.memory.remove(&(p as usize)) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}
/// The backend of the running test, for driver functions that call back into it as CUPTI
/// does for every driver call, the backend's own included.
static CALLING_BACK: std::sync::atomic::AtomicPtr<Backend> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// CUPTI's enter and exit callbacks of `cuMemHostAlloc` around the allocation, for whoever calls
/// it — the application or the backend itself (which its guard must keep out of its
/// inventory).
unsafe extern "C" fn mem_host_alloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> CUresult {
    let params = cuMemHostAlloc_params {
        pp: p,
        bytesize: size,
        Flags: flags,
    };
    let mut result: CUresult = CUDA_SUCCESS;
    let mut corr = 0u64;
    let mut data = CUpti_CallbackData {
        callbackSite: CUPTI_API_ENTER,
        functionName: c"cuMemHostAlloc".as_ptr(),
        functionParams: (&params as *const cuMemHostAlloc_params).cast(),
        functionReturnValue: (&mut result as *mut CUresult).cast(),
        symbolName: c"".as_ptr(),
        context: CTX as CUcontext,
        contextUid: 1,
        correlationData: &mut corr,
        correlationId: 9,
    };
    let be = CALLING_BACK.load(Ordering::Acquire);
    let call_back = |data: &CUpti_CallbackData| {
        if !be.is_null() {
            // SAFETY: the test's 'static backend; `data` is built like CUPTI's.
            unsafe {
                callback(
                    be.cast(),
                    CUPTI_CB_DOMAIN_DRIVER_API,
                    HOST_ALLOC,
                    (data as *const CUpti_CallbackData).cast(),
                )
            };
        }
    };
    call_back(&data);
    // SAFETY: out-parameter.
    unsafe { *p = fake_alloc(size) as *mut c_void };
    data.callbackSite = CUPTI_API_EXIT;
    call_back(&data);
    CUDA_SUCCESS
}
unsafe extern "C" fn mem_free_host(p: *mut c_void) -> CUresult {
    // SAFETY: forwarded.
    unsafe { mem_free(p as CUdeviceptr) }
}
unsafe extern "C" fn memcpy_async(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
    stream: CUstream,
) -> CUresult {
    let mut g = gpu();
    let restore = g.app.contains(&(dst as usize));
    if restore {
        g.restore_batches += 1;
        if g.failing_restores > 0 {
            g.failing_restores -= 1;
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if g.stick_copies {
        g.stuck_streams.insert(stream as usize);
        return CUDA_SUCCESS;
    }
    g.copied
        .entry(stream as usize)
        .or_default()
        .push((dst as usize, len));
    g.copied_from.insert(dst as usize, src as usize);
    drop(g);
    // SAFETY: both sides are live fake allocations of at least `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
    CUDA_SUCCESS
}
unsafe extern "C" fn stream_create(s: *mut CUstream, _: c_uint) -> CUresult {
    let h = handle();
    gpu().created_streams.insert(h);
    // SAFETY: out-parameter.
    unsafe { *s = h as CUstream };
    CUDA_SUCCESS
}
/// Runs the deferred kernels ([`FakeGpu::defer_held`]) whose waits have passed, each stream's
/// in launch order.
fn pump() {
    loop {
        let next = {
            let mut g = gpu();
            let mut blocked = HashSet::new();
            let mut at = None;
            for (i, (stream, waits, _, _)) in g.deferred.iter().enumerate() {
                if blocked.contains(stream) {
                    continue;
                }
                if waits.iter().all(passed) {
                    at = Some(i);
                    break;
                }
                blocked.insert(*stream);
            }
            at.map(|i| g.deferred.remove(i))
        };
        let Some((_, _, mut data, mut n)) = next else {
            return;
        };
        let mut args: [*mut c_void; 2] = [
            (&mut data as *mut CUdeviceptr).cast(),
            (&mut n as *mut u32).cast(),
        ];
        add_one(args.as_mut_ptr());
    }
}
unsafe extern "C" fn stream_query(s: CUstream) -> CUresult {
    pump();
    let mut g = gpu();
    if g.on_query.as_ref().is_some_and(|(at, _)| *at == s as usize) {
        let (_, other) = g.on_query.take().expect("checked");
        drop(g);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            other();
            let _ = tx.send(());
        });
        let _ = rx.recv_timeout(Duration::from_millis(100));
        g = gpu();
    }
    if g.destroyed_streams.contains(&(s as usize)) {
        let fault = format!("cuStreamQuery of destroyed stream {:#x}", s as usize);
        if !g.kernel_faults.contains(&fault) {
            g.kernel_faults.push(fault);
        }
    }
    let slow = g
        .slow_streams
        .get(&(s as usize))
        .is_some_and(|until| Instant::now() < *until);
    if slow || g.stuck_streams.contains(&(s as usize)) || !g.held(s as usize).is_empty() {
        CUDA_ERROR_NOT_READY
    } else {
        CUDA_SUCCESS
    }
}
unsafe extern "C" fn stream_get_flags(s: CUstream, flags: *mut c_uint) -> CUresult {
    let non_blocking = gpu().non_blocking_streams.contains(&(s as usize));
    // SAFETY: out-parameter.
    unsafe {
        *flags = if non_blocking {
            CU_STREAM_NON_BLOCKING
        } else {
            0
        }
    };
    CUDA_SUCCESS
}
unsafe extern "C" fn stream_is_capturing(s: CUstream, st: *mut CUstreamCaptureStatus) -> CUresult {
    let mut g = gpu();
    if g.destroyed_streams.contains(&(s as usize)) {
        let fault = format!("cuStreamIsCapturing of destroyed stream {:#x}", s as usize);
        if !g.kernel_faults.contains(&fault) {
            g.kernel_faults.push(fault);
        }
    }
    let capturing = g.capturing;
    drop(g);
    // SAFETY: out-parameter.
    unsafe {
        *st = if capturing {
            CU_STREAM_CAPTURE_STATUS_ACTIVE
        } else {
            CU_STREAM_CAPTURE_STATUS_NONE
        }
    };
    CUDA_SUCCESS
}
unsafe extern "C" fn stream_wait_event(s: CUstream, e: CUevent, _: c_uint) -> CUresult {
    let mut g = gpu();
    g.stream_waits.push((s as usize, e as usize));
    // The stream's later work also waits behind the gates the event was recorded behind.
    let behind = g
        .event_gates
        .get(&(e as usize))
        .cloned()
        .unwrap_or_default();
    g.gates.entry(s as usize).or_default().extend(behind);
    CUDA_SUCCESS
}
thread_local! {
    /// The thread's stream-capture mode (`cuThreadExchangeStreamCaptureMode`).
    static CAPTURE_MODE: std::cell::Cell<CUstreamCaptureMode> =
        const { std::cell::Cell::new(CU_STREAM_CAPTURE_MODE_GLOBAL) };
}
unsafe extern "C" fn exchange_capture_mode(m: *mut CUstreamCaptureMode) -> CUresult {
    // SAFETY: an in/out parameter.
    unsafe { *m = CAPTURE_MODE.with(|c| c.replace(*m)) };
    CUDA_SUCCESS
}
/// A call that a stream capture in global mode forbids on every thread (an allocation, a free,
/// a module load), made while the application captures (`capturing`) in a mode other than
/// relaxed: it would invalidate the capture, which the harness reports as a fault.
fn check_capture(g: &mut FakeGpu, call: &str) {
    if g.capturing && CAPTURE_MODE.with(|c| c.get()) != CU_STREAM_CAPTURE_MODE_RELAXED {
        let fault = format!("{call} during the application's stream capture");
        if !g.kernel_faults.contains(&fault) {
            g.kernel_faults.push(fault);
        }
    }
}
unsafe extern "C" fn event_create(e: *mut CUevent, _: c_uint) -> CUresult {
    // SAFETY: out-parameter.
    unsafe { *e = handle() as CUevent };
    CUDA_SUCCESS
}
unsafe extern "C" fn event_record(e: CUevent, s: CUstream) -> CUresult {
    let mut g = gpu();
    if g.unrecordable_streams.contains(&(s as usize)) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let held = g.held(s as usize);
    g.ops
        .push((s as usize, Op::Record(e as usize, !held.is_empty())));
    g.event_gates.insert(e as usize, held);
    if g.stuck_streams.contains(&(s as usize)) {
        g.stuck_events.insert(e as usize);
    } else {
        g.stuck_events.remove(&(e as usize));
    }
    match g.slow_streams.get(&(s as usize)).copied() {
        Some(until) => g.slow_events.insert(e as usize, until),
        None => g.slow_events.remove(&(e as usize)),
    };
    CUDA_SUCCESS
}
unsafe extern "C" fn event_query(e: CUevent) -> CUresult {
    pump();
    let mut g = gpu();
    g.relaunches_unwaited = 0;
    if g.event_gates
        .get(&(e as usize))
        .is_some_and(|w| !w.iter().all(passed))
    {
        return CUDA_ERROR_NOT_READY;
    }
    let slow = g
        .slow_events
        .get(&(e as usize))
        .is_some_and(|until| Instant::now() < *until);
    if slow || g.stuck_events.contains(&(e as usize)) {
        CUDA_ERROR_NOT_READY
    } else {
        CUDA_SUCCESS
    }
}
unsafe extern "C" fn event_elapsed(ms: *mut f32, _: CUevent, _: CUevent) -> CUresult {
    // SAFETY: out-parameter.
    unsafe { *ms = 0.5 };
    CUDA_SUCCESS
}
unsafe extern "C" fn func_get_attribute(
    v: *mut c_int,
    a: CUfunction_attribute,
    _: CUfunction,
) -> CUresult {
    let g = gpu();
    if g.fail_func_attributes {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let registers = g.registers.unwrap_or(16);
    // SAFETY: out-parameter.
    unsafe {
        *v = if a == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES {
            1024
        } else if a == super::api::CU_FUNC_ATTRIBUTE_NUM_REGS {
            registers
        } else {
            16
        }
    };
    CUDA_SUCCESS
}
/// The fake device: an H200's limits.
unsafe extern "C" fn device_get_attribute(
    v: *mut c_int,
    a: super::api::CUdevice_attribute,
    dev: CUdevice,
) -> CUresult {
    use super::api::*;
    let value = match a {
        CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => 2048,
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR => 65536,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => 32,
        CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK => 1024,
        CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS => c_int::from(gpu().pageable),
        _ => return CUDA_ERROR_INVALID_VALUE,
    };
    if dev != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: out-parameter.
    unsafe { *v = value };
    CUDA_SUCCESS
}
/// Three blocks of 256 threads per SM (the fake kernel's occupancy).
unsafe extern "C" fn occupancy_max_active_blocks(
    n: *mut c_int,
    _: CUfunction,
    block: c_int,
    _: usize,
) -> CUresult {
    // SAFETY: out-parameter.
    unsafe { *n = 768 / block.max(1) };
    CUDA_SUCCESS
}
unsafe extern "C" fn func_get_module(m: *mut CUmodule, f: CUfunction) -> CUresult {
    // SAFETY: every CUfunction of these tests is a FakeKernel.
    let k = unsafe { &*f.cast::<FakeKernel>() };
    if k.module == 0 {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    // SAFETY: out-parameter.
    unsafe { *m = k.module as CUmodule };
    CUDA_SUCCESS
}
unsafe extern "C" fn func_get_param_info(
    f: CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    // ADD_ONE, ADD_ONE_COUNTED, SLOW, NOTING, UNSTICKING (and the writers of the write-set tests) take
    // (CUdeviceptr, u32); the other kernels of these tests take nothing.
    let f = f.cast::<FakeKernel>();
    if std::ptr::eq(f, &ADD_FROM) || std::ptr::eq(f, &memory_tests::WRITE_SURFACE) {
        let Some(&(o, n)) = [(0, 8), (8, 8), (16, 4)].get(index) else {
            return CUDA_ERROR_INVALID_VALUE;
        };
        // SAFETY: out-parameters.
        unsafe { (*offset, *size) = (o, n) };
        return CUDA_SUCCESS;
    }
    let params: &[(usize, usize)] = if std::ptr::eq(f, &ADD_ONE)
        || std::ptr::eq(f, &ADD_ONE_COUNTED)
        || std::ptr::eq(f, &SLOW)
        || std::ptr::eq(f, &NOTING)
        || std::ptr::eq(f, &UNSTICKING)
        || std::ptr::eq(f, &memory_tests::ADD_ONE_SPANNING)
        || compare_tests::writer(f)
    {
        &[(0, 8), (8, 4)]
    } else {
        &[]
    };
    let Some(&(o, n)) = params.get(index) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    // SAFETY: out-parameters.
    unsafe { (*offset, *size) = (o, n) };
    CUDA_SUCCESS
}
unsafe extern "C" fn kernel_get_function(f: *mut CUfunction, k: CUkernel) -> CUresult {
    // The one CUkernel of these tests stands for BUMP's function in the context.
    if !std::ptr::eq(k.cast::<FakeKernel>(), &KERNEL_BUMP) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    // SAFETY: out-parameter.
    unsafe { *f = (&BUMP as *const FakeKernel).cast_mut().cast() };
    CUDA_SUCCESS
}
unsafe extern "C" fn module_get_global(
    p: *mut CUdeviceptr,
    b: *mut usize,
    m: CUmodule,
    name: *const c_char,
) -> CUresult {
    // SAFETY: a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) }
        .to_str()
        .unwrap()
        .to_string();
    let g = gpu();
    match g
        .globals
        .iter()
        .find(|(mm, n, _, _)| *mm == m as usize && *n == name)
    {
        Some((_, _, addr, size)) => {
            // SAFETY: out-parameters.
            unsafe {
                *p = *addr as CUdeviceptr;
                *b = *size;
            }
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_NOT_FOUND,
    }
}
unsafe extern "C" fn stream_wait_value32(
    s: CUstream,
    addr: CUdeviceptr,
    value: u32,
    flags: c_uint,
) -> CUresult {
    let mut g = gpu();
    if g.no_mem_ops {
        return super::api::CUDA_ERROR_NOT_SUPPORTED;
    }
    assert_eq!(flags, super::api::CU_STREAM_WAIT_VALUE_GEQ);
    let held = !g.held(s as usize).is_empty();
    g.waits_enqueued.push((s as usize, held));
    g.ops.push((s as usize, Op::Wait(addr as usize, value)));
    g.gates
        .entry(s as usize)
        .or_default()
        .push((addr as usize, value));
    CUDA_SUCCESS
}
unsafe extern "C" fn stream_write_value32(
    s: CUstream,
    addr: CUdeviceptr,
    value: u32,
    _: c_uint,
) -> CUresult {
    let mut g = gpu();
    g.ops.push((s as usize, Op::Write(addr as usize, value)));
    if g.stuck_streams.contains(&(s as usize)) {
        g.stuck_writes.push((s as usize, addr as usize, value));
    } else {
        // SAFETY: a gate word of the backend's live page.
        unsafe { std::ptr::write_volatile(addr as *mut u32, value) };
    }
    CUDA_SUCCESS
}
unsafe extern "C" fn mem_host_get_device_pointer(
    d: *mut CUdeviceptr,
    p: *mut c_void,
    _: c_uint,
) -> CUresult {
    if gpu().no_mem_ops {
        return super::api::CUDA_ERROR_NOT_SUPPORTED;
    }
    // SAFETY: out-parameter; fake memory has one address for host and device.
    unsafe { *d = p as CUdeviceptr };
    CUDA_SUCCESS
}
/// The module `cuModuleLoadData` hands out for the backend's compare kernel.
const COMPARE_MODULE: usize = 0xc0de_0000;

unsafe extern "C" fn module_load_data(m: *mut CUmodule, image: *const c_void) -> CUresult {
    // SAFETY: the backend passes NUL-terminated PTX.
    let ptx = unsafe { CStr::from_ptr(image.cast()) }.to_string_lossy();
    let mut g = gpu();
    check_capture(&mut g, "cuModuleLoadData");
    g.module_loads += 1;
    // A module load synchronises the context: never inside a window (gate::Behind).
    g.module_loads_in_windows += usize::from(super::gate::BEHIND.pending() > 0);
    if g.fail_module_load || !ptx.contains(".visible .entry rocprof_replay_compare_table(") {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: out-parameter.
    unsafe { *m = COMPARE_MODULE as CUmodule };
    CUDA_SUCCESS
}
unsafe extern "C" fn module_get_function(
    f: *mut CUfunction,
    m: CUmodule,
    name: *const c_char,
) -> CUresult {
    // SAFETY: a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) };
    let kernel = match name.to_bytes() {
        b"rocprof_replay_compare_table" => &COMPARE,
        b"rocprof_replay_fingerprint_table" if !gpu().no_fingerprint_entry => &FINGERPRINT,
        b"rocprof_replay_copy_table" if !gpu().no_copy_entry => &COPY,
        _ => return CUDA_ERROR_NOT_FOUND,
    };
    if m as usize != COMPARE_MODULE {
        return CUDA_ERROR_NOT_FOUND;
    }
    // SAFETY: out-parameter.
    unsafe { *f = (kernel as *const FakeKernel).cast_mut().cast() };
    CUDA_SUCCESS
}

/// Whether `[addr, addr + len)` lies in one fake allocation.
fn allocated(addr: usize, len: usize) -> bool {
    gpu()
        .memory
        .iter()
        .any(|(&base, buf)| addr >= base && addr + len <= base + buf.len())
}

/// One entry of a table, as the kernels read it: the addresses (live and snapshot, or the
/// source), the length and the index of its first granule.
struct TableEntry {
    addrs: Vec<usize>,
    len: usize,
    first: usize,
}

/// What a table kernel was given: `(table, n, granule, total, out)`, its entries read from
/// fake memory as the kernels lay them out (`addrs` addresses, then len and first: u64 each),
/// after checking everything the backend promises: the table lies in fake memory, fits the
/// table buffer and was copied there on `stream` since its last table kernel; its entries
/// are back to back from granule 0 (each `ceil(len / granule)` granules) and add up to
/// `total`; every entry's memory lies in fake memory, as do `total` results of `result`
/// bytes at `out`. `Err`: a fault (the fake runs nothing).
fn read_table(
    args: *mut *mut c_void,
    stream: CUstream,
    addrs: usize,
    result: usize,
) -> Result<(Vec<TableEntry>, usize, usize, usize), String> {
    // SAFETY: the backend passes pointers to (u64, u32, u64, u64, u64).
    let (table, n, granule, total, out) = unsafe {
        (
            *(*args).cast::<u64>() as usize,
            *(*args.add(1)).cast::<u32>() as usize,
            *(*args.add(2)).cast::<u64>() as usize,
            *(*args.add(3)).cast::<u64>() as usize,
            *(*args.add(4)).cast::<u64>() as usize,
        )
    };
    let size = (addrs + 2) * 8;
    if granule == 0 || n == 0 {
        return Err(format!("granule {granule}, {n} entries"));
    }
    if n * size > super::window::compare::TABLE_BYTES || !allocated(table, n * size) {
        return Err(format!("{n} entries at {table:#x} overrun the table"));
    }
    let copied = gpu().copied.remove(&(stream as usize)).unwrap_or_default();
    if !copied
        .iter()
        .any(|&(dst, len)| dst <= table && table + n * size <= dst + len)
    {
        return Err(format!(
            "the table at {table:#x} was not copied on this stream before the launch: {copied:x?}"
        ));
    }
    let words: Vec<u64> = (0..n * size / 8)
        // SAFETY: checked above: n * size bytes of fake memory (read unaligned: the fake's
        // allocations promise no alignment).
        .map(|i| unsafe { (table as *const u64).add(i).read_unaligned() })
        .collect();
    let mut entries = Vec::with_capacity(n);
    let mut next = 0;
    for w in words.chunks(addrs + 2) {
        let e = TableEntry {
            addrs: w[..addrs].iter().map(|&a| a as usize).collect(),
            len: w[addrs] as usize,
            first: w[addrs + 1] as usize,
        };
        if e.first != next || e.len == 0 {
            return Err(format!(
                "entry {} of {n}: {} bytes from granule {}, granule {next} expected",
                entries.len(),
                e.len,
                e.first
            ));
        }
        if let Some(a) = e.addrs.iter().find(|&&a| !allocated(a, e.len)) {
            return Err(format!("{} bytes at {a:#x} are not device memory", e.len));
        }
        next += e.len.div_ceil(granule);
        entries.push(e);
    }
    if next != total {
        return Err(format!("{next} granules in the table, {total} launched"));
    }
    if !allocated(out, total * result) {
        return Err(format!("{total} results at {out:#x} overrun their buffer"));
    }
    Ok((entries, granule, total, out))
}

/// `rocprof_replay_compare_table`, on the host: for every entry (live, snap, len, first),
/// flags[first + g] = 1 where granule g of it (from its start, the last one shorter) differs.
/// Returns the table's entries and granules.
fn compare_kernel(args: *mut *mut c_void, stream: CUstream) -> Result<(usize, usize), String> {
    let (entries, granule, total, flags) = read_table(args, stream, 2, 1)?;
    for e in &entries {
        // SAFETY: read_table checked both: `len` bytes of fake memory.
        let (live, snap) = unsafe {
            (
                std::slice::from_raw_parts(e.addrs[0] as *const u8, e.len),
                std::slice::from_raw_parts(e.addrs[1] as *const u8, e.len),
            )
        };
        for (g, (a, b)) in live.chunks(granule).zip(snap.chunks(granule)).enumerate() {
            // SAFETY: read_table checked room for `total` flags.
            unsafe { *(flags as *mut u8).add(e.first + g) = u8::from(a != b) };
        }
    }
    Ok((entries.len(), total))
}

static COMPARE: FakeKernel = FakeKernel {
    // Never called through `run` (`run_kernel` runs it with its stream).
    run: |_| unreachable!(),
    module: COMPARE_MODULE,
};

/// `rocprof_replay_fingerprint_table`, on the host: for every entry (src, len, first),
/// out[first + g] = `footprint::fingerprint` of granule g of it (from its start, the last one
/// shorter). Returns the table's entries and granules.
fn fingerprint_kernel(args: *mut *mut c_void, stream: CUstream) -> Result<(usize, usize), String> {
    let (entries, granule, total, out) = read_table(args, stream, 1, 8)?;
    for e in &entries {
        // SAFETY: read_table checked it: `len` bytes of fake memory.
        let src = unsafe { std::slice::from_raw_parts(e.addrs[0] as *const u8, e.len) };
        for (g, bytes) in src.chunks(granule).enumerate() {
            let print = crate::engine::footprint::fingerprint(bytes);
            // SAFETY: read_table checked room for `total` fingerprints (the buffer need not be
            // aligned for the fake).
            unsafe { (out as *mut u64).add(e.first + g).write_unaligned(print) };
        }
    }
    Ok((entries.len(), total))
}

static FINGERPRINT: FakeKernel = FakeKernel {
    // As COMPARE's.
    run: |_| unreachable!(),
    module: COMPARE_MODULE,
};

/// `rocprof_replay_copy_table`, on the host: for every entry (dst, src, len, first), `len`
/// bytes from src to dst, both in fake device memory; the table as the backend promises it
/// (copied on the stream before the launch, chunks numbered back to back). Returns the entries.
fn copy_kernel(args: *mut *mut c_void, stream: CUstream) -> Result<usize, String> {
    // SAFETY: the backend passes pointers to (u64, u32, u64, u64).
    let (table, n, chunk, total) = unsafe {
        (
            *(*args).cast::<u64>() as usize,
            *(*args.add(1)).cast::<u32>() as usize,
            *(*args.add(2)).cast::<u64>() as usize,
            *(*args.add(3)).cast::<u64>() as usize,
        )
    };
    if chunk == 0 || n == 0 {
        return Err(format!("chunk {chunk}, {n} entries"));
    }
    if n * 32 > super::window::compare::TABLE_BYTES || !allocated(table, n * 32) {
        return Err(format!("{n} copy entries at {table:#x} overrun the table"));
    }
    let copied = gpu().copied.remove(&(stream as usize)).unwrap_or_default();
    if !copied
        .iter()
        .any(|&(dst, len)| dst <= table && table + n * 32 <= dst + len)
    {
        // No table copy since the stream's last table kernel: the device table must still
        // hold what its pinned twin (the source of its last copy) holds now, entry for entry.
        let twin = gpu().copied_from.get(&table).copied();
        // SAFETY: the table is n * 32 bytes of fake memory (checked above), as is its twin,
        // the source of a copy at least as long into it.
        let same = twin.is_some_and(|twin| unsafe {
            std::slice::from_raw_parts(table as *const u8, n * 32)
                == std::slice::from_raw_parts(twin as *const u8, n * 32)
        });
        if !same {
            return Err(format!(
                "the copy table at {table:#x} was not copied before the launch"
            ));
        }
        gpu().resident_tables += 1;
    }
    let mut next = 0;
    for k in 0..n {
        // SAFETY: checked above: n entries of fake memory (read unaligned).
        let w: Vec<usize> = (0..4)
            .map(|i| unsafe { (table as *const u64).add(k * 4 + i).read_unaligned() } as usize)
            .collect();
        let (dst, src, len, first) = (w[0], w[1], w[2], w[3]);
        if first != next || len == 0 {
            return Err(format!("copy entry {k}: chunk {first}, {next} expected"));
        }
        if !allocated(dst, len) || !allocated(src, len) {
            return Err(format!(
                "copy entry {k}: {len} bytes at {src:#x} -> {dst:#x} unknown"
            ));
        }
        // SAFETY: both ranges are memory of the fake (checked above), distinct buffers.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
        next += len.div_ceil(chunk);
    }
    if next != total {
        return Err(format!("{next} chunks in the copy table, {total} launched"));
    }
    Ok(n)
}

static COPY: FakeKernel = FakeKernel {
    // As COMPARE's.
    run: |_| unreachable!(),
    module: COMPARE_MODULE,
};

/// The backend's launch callback at enter for a launch of its own (CUPTI calls it for every
/// driver call), with correlation id `id`.
fn own_launch_callback(id: u32) {
    let be = CALLING_BACK.load(Ordering::Acquire);
    if be.is_null() {
        return;
    }
    let params = cuLaunchKernel_params {
        f: std::ptr::null_mut(),
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 1,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: std::ptr::null_mut(),
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
    };
    let mut corr = 0u64;
    let mut result: CUresult = CUDA_SUCCESS;
    let data = CUpti_CallbackData {
        callbackSite: CUPTI_API_ENTER,
        functionName: c"cuLaunchKernel".as_ptr(),
        functionParams: (&params as *const cuLaunchKernel_params).cast(),
        functionReturnValue: (&mut result as *mut CUresult).cast(),
        symbolName: c"".as_ptr(),
        context: CTX as CUcontext,
        contextUid: 1,
        correlationData: &mut corr,
        correlationId: id,
    };
    // SAFETY: the test's 'static backend; `data` is built like CUPTI's.
    unsafe {
        callback(
            be.cast(),
            CUPTI_CB_DOMAIN_DRIVER_API,
            LAUNCH,
            (&data as *const CUpti_CallbackData).cast(),
        )
    };
}

fn run_kernel(f: CUfunction, params: *mut *mut c_void, stream: CUstream) {
    if std::ptr::eq(f.cast::<FakeKernel>(), &COPY) {
        let mut g = gpu();
        if g.stick_copies || g.stick_copy_kernels || g.stuck_streams.contains(&(stream as usize)) {
            g.stuck_streams.insert(stream as usize);
            return;
        }
        drop(g);
        let ran = copy_kernel(params, stream);
        let mut g = gpu();
        match ran {
            Ok(n) => g.copy_tables.push(n),
            Err(fault) => g.kernel_faults.push(fault),
        }
        return;
    }
    let compare = std::ptr::eq(f.cast::<FakeKernel>(), &COMPARE);
    if compare || std::ptr::eq(f.cast::<FakeKernel>(), &FINGERPRINT) {
        // The backend's own compare or fingerprint: not a pass.
        let mut g = gpu();
        let stick = if compare {
            g.compares += 1;
            g.stick_compares
        } else {
            g.fingerprints += 1;
            g.stick_fingerprints
        };
        // Behind work that never finishes, it never runs either.
        if stick || g.stuck_streams.contains(&(stream as usize)) {
            g.stuck_streams.insert(stream as usize);
            return;
        }
        drop(g);
        let ran = if compare {
            compare_kernel(params, stream)
        } else {
            fingerprint_kernel(params, stream)
        };
        let mut g = gpu();
        match ran {
            Ok(n) if compare => g.compare_tables.push(n),
            Ok(n) => g.fingerprint_tables.push(n),
            Err(fault) => g.kernel_faults.push(fault),
        }
        return;
    }
    let mut g = gpu();
    let waits = g.held(stream as usize);
    let held = !waits.is_empty();
    g.ops.push((stream as usize, Op::Launch(held)));
    let ours = g.created_streams.contains(&(stream as usize));
    if held && !ours && g.defer_held && std::ptr::eq(f.cast::<FakeKernel>(), &ADD_ONE) {
        // SAFETY: `add_one`'s arguments (&CUdeviceptr, &u32), alive during the launch call.
        let (data, n) = unsafe {
            (
                *(*params).cast::<CUdeviceptr>(),
                *(*params.add(1)).cast::<u32>(),
            )
        };
        g.deferred.push((stream as usize, waits, data, n));
        g.launches += 1;
        return;
    }
    if let Some((app_ns, relaunch_ns)) = g.kernel_ns {
        let (id, ns) = if ours {
            (1000 + g.relaunches, relaunch_ns)
        } else {
            // The harness's launch calls carry correlation id 7.
            (if g.runtime_ids { 100_007 } else { 7 }, app_ns)
        };
        drop(g);
        if ours {
            own_launch_callback(id);
        }
        super::kernel_clock::fake::launched(id, 50_000, 50_000 + ns);
        g = gpu();
    }
    if !ours && g.stick_after_launch == Some(stream as usize) {
        g.stuck_streams.insert(stream as usize);
    }
    if ours {
        g.relaunches += 1;
        g.relaunches_unwaited += 1;
        g.most_relaunches_unwaited = g.most_relaunches_unwaited.max(g.relaunches_unwaited);
        if g.stick_relaunches {
            g.stuck_streams.insert(stream as usize);
        }
        if let Some(d) = g.slow_relaunches {
            g.slow_streams.insert(stream as usize, Instant::now() + d);
        }
    }
    g.launches += 1;
    drop(g);
    // SAFETY: every CUfunction of these tests is a FakeKernel.
    let k = unsafe { &*f.cast::<FakeKernel>() };
    (k.run)(params);
}
unsafe extern "C" fn launch_kernel(
    f: CUfunction,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    s: CUstream,
    params: *mut *mut c_void,
    _: *mut *mut c_void,
) -> CUresult {
    run_kernel(f, params, s);
    CUDA_SUCCESS
}
unsafe extern "C" fn launch_cooperative(
    f: CUfunction,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    s: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    run_kernel(f, params, s);
    CUDA_SUCCESS
}
unsafe extern "C" fn launch_kernel_ex(
    c: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    _: *mut *mut c_void,
) -> CUresult {
    // SAFETY: the backend passes its own live config.
    let c = unsafe { &*c };
    // SAFETY: as above; attributes of a relaunch never carry application events.
    let attrs = if c.attrs.is_null() {
        &[][..]
    } else {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(c.attrs, c.numAttrs as usize) }
    };
    assert!(
        attrs
            .iter()
            .all(|a| a.id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT),
        "a relaunch re-recorded an application event"
    );
    run_kernel(f, params, c.hStream);
    CUDA_SUCCESS
}

/// `cuMemGetAddressRange`: the fake allocation containing `dptr`.
unsafe extern "C" fn mem_get_address_range(
    base: *mut CUdeviceptr,
    size: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    let g = gpu();
    let Some((b, buf)) = g
        .memory
        .iter()
        .find(|(b, buf)| (**b..**b + buf.len()).contains(&(dptr as usize)))
    else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: out-parameters.
    unsafe { (*base, *size) = (*b as CUdeviceptr, buf.len()) };
    CUDA_SUCCESS
}

fn fake_driver() -> Driver {
    Driver {
        get_error_name,
        ctx_set_current,
        ctx_get_device,
        mem_get_info,
        mem_alloc,
        mem_alloc_pitch: Some(mem_alloc_pitch),
        mem_alloc_async: Some(mem_alloc_async),
        mem_alloc_from_pool_async: Some(mem_alloc_from_pool_async),
        mem_create: Some(fake_mem_create),
        mem_free,
        mem_host_alloc,
        mem_free_host,
        memcpy_async,
        stream_create,
        stream_query,
        stream_is_capturing,
        stream_wait_event,
        exchange_capture_mode,
        event_create,
        event_record,
        event_query,
        event_elapsed,
        func_get_attribute,
        func_get_module,
        func_get_param_info: Some(func_get_param_info),
        kernel_get_function,
        module_get_global,
        launch_kernel,
        launch_cooperative,
        launch_kernel_ex,
        stream_wait_value32: Some(stream_wait_value32),
        stream_get_flags: Some(stream_get_flags),
        stream_write_value32: Some(stream_write_value32),
        mem_host_get_device_pointer: Some(mem_host_get_device_pointer),
        module_load_data: Some(module_load_data),
        module_get_function: Some(module_get_function),
        device_get_attribute: Some(device_get_attribute),
        occupancy_max_active_blocks: Some(occupancy_max_active_blocks),
        mem_get_address_range: Some(mem_get_address_range),
        pointer_get_attribute: Some(pointer_get_attribute),
    }
}

/// Device memory of the fake (`pointer_device`) is `CU_MEMORYTYPE_DEVICE`; anything else is
/// no memory of CUDA's. `pointer_managed` addresses are managed, the others not.
unsafe extern "C" fn pointer_get_attribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CUdeviceptr,
) -> CUresult {
    let g = gpu();
    let value = match attribute {
        super::api::CU_POINTER_ATTRIBUTE_MEMORY_TYPE
            if g.pointer_device.contains(&(ptr as usize)) =>
        {
            super::api::CU_MEMORYTYPE_DEVICE
        }
        super::api::CU_POINTER_ATTRIBUTE_IS_MANAGED => {
            u32::from(g.pointer_managed.contains(&(ptr as usize)))
        }
        _ => return CUDA_ERROR_INVALID_VALUE,
    };
    // SAFETY: the out-parameter: a memory type, or the managed flag, 4 bytes.
    unsafe { *data.cast::<u32>() = value };
    CUDA_SUCCESS
}

const LAUNCH: u32 = 10;
const LAUNCH_EX: u32 = 11;
const ALLOC: u32 = 12;
const FREE: u32 = 13;
const MEMCPY: u32 = 14;
const GET_GLOBAL: u32 = 15;
const GET_FUNCTION: u32 = 16;
const GET_KERNEL: u32 = 17;
const MODULE_UNLOAD: u32 = 18;
const WAIT_VALUE: u32 = 19;
const HOST_ALLOC: u32 = 20;
const FREE_HOST: u32 = 21;
const MEM_MAP: u32 = 22;
const ALLOC_MANAGED: u32 = 23;
const MEM_UNMAP: u32 = 24;
const IPC_OPEN: u32 = 25;
const IPC_CLOSE: u32 = 26;
const MEM_IMPORT: u32 = 27;
const MEM_RELEASE: u32 = 28;
const MEM_RETAIN: u32 = 29;
const MULTICAST_CREATE: u32 = 30;
const COPY_DTOD: u32 = 31;
const COPY_DTOH: u32 = 32;
const COPY_PEER: u32 = 33;
const MULTI_DEVICE: u32 = 34;
const SURF_CREATE: u32 = 35;
const SURF_DESTROY: u32 = 36;
const FREE_ASYNC: u32 = 37;
const MEM_CREATE: u32 = 38;
const IPC_EXPORT: u32 = 39;
const HANDLE_EXPORT: u32 = 40;
const POOL_EXPORT: u32 = 41;
const POOL_IMPORT: u32 = 42;
const RANGE_EXPORT: u32 = 43;
const MEMSET_ASYNC: u32 = 44;
const HOST_FUNC: u32 = 45;
const STREAM_QUERY: u32 = 46;
const ALLOC_ASYNC_PTSZ: u32 = 47;
const ALLOC_PITCH: u32 = 48;
const CTX: usize = 0xc0_0000;

/// Replays with a fixed number of passes (0: skip). (No timing context: contexts are
/// process-wide and other tests of this binary count on none being active.)
struct Passes(u32);

impl ReplayPolicy for Passes {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        if self.0 == 0 {
            PassPlan::skip()
        } else {
            PassPlan::exactly(self.0, ())
        }
    }
}

struct Harness {
    be: &'static Backend,
    outcomes: Arc<Mutex<Vec<(DispatchInfo, Outcome)>>>,
    _serial: MutexGuard<'static, ()>,
}

fn harness(passes: u32, settings: Settings) -> Harness {
    harness_with(Passes(passes), settings)
}

fn harness_with<P: ReplayPolicy>(policy: P, settings: Settings) -> Harness {
    harness_clocked(policy, settings, false)
}

/// [`harness_with`], the backend's kernel clock on the fake activity API when `clock`.
fn harness_clocked<P: ReplayPolicy>(policy: P, settings: Settings, clock: bool) -> Harness {
    harness_deciding_clocked(settings, clock, move |seen, s, inventory| {
        // Decided windows borrow their policy for as long as they run: the test's lives on.
        let policy: &'static P = Box::leak(Box::new(policy));
        Box::new(
            move |info, ordinary| match decide(policy, info, ordinary, &s) {
                Err(o) => {
                    seen.lock().push((info.clone(), o));
                    None
                }
                Ok(decided) => {
                    let (info, seen) = (info.clone(), seen.clone());
                    Some(WindowRun {
                        counters: decided.collects_counters(),
                        run: Runner::Custom(Box::new(move |target: &mut dyn ReplayTarget| {
                            let o =
                                decided.run(&info, target, inventory, &s, None, &mut Vec::new());
                            seen.lock().push((info, o.clone()));
                            o
                        })),
                    })
                }
            },
        )
    })
}

/// The outcomes a harness records.
type Seen = Arc<Mutex<Vec<(DispatchInfo, Outcome)>>>;

/// A harness whose backend decides with what `decider` makes of the harness's outcomes, the
/// settings and the inventory.
fn harness_deciding(
    settings: Settings,
    decider: impl FnOnce(Seen, Settings, &'static AllocationInventory) -> Decider,
) -> Harness {
    harness_deciding_clocked(settings, false, decider)
}

/// [`harness_deciding`], with the fake kernel clock when `clock`.
fn harness_deciding_clocked(
    settings: Settings,
    clock: bool,
    decider: impl FnOnce(Seen, Settings, &'static AllocationInventory) -> Decider,
) -> Harness {
    let serial = SERIAL.lock();
    let old = GPU.lock().replace(FakeGpu {
        device_free: 100 << 30,
        ..FakeGpu::default()
    });
    // Earlier tests' backends (leaked) still hold arena chunks in this memory: keep it, so
    // that no address of a registered chunk is ever reused by another allocation.
    std::mem::forget(old);
    let inventory: &'static AllocationInventory = Box::leak(Box::new(AllocationInventory::new()));
    inventory.enable();
    let outcomes: Seen = Arc::new(Mutex::new(Vec::new()));
    let decider = decider(outcomes.clone(), settings, inventory);
    let ids = Ids::from_names([
        ("cuLaunchKernel", LAUNCH),
        ("cuLaunchKernelEx", LAUNCH_EX),
        ("cuMemAlloc_v2", ALLOC),
        ("cuMemFree_v2", FREE),
        ("cuMemFreeAsync", FREE_ASYNC),
        ("cuMemcpyHtoDAsync_v2", MEMCPY),
        ("cuModuleGetGlobal_v2", GET_GLOBAL),
        ("cuModuleGetFunction", GET_FUNCTION),
        ("cuLibraryGetKernel", GET_KERNEL),
        ("cuModuleUnload", MODULE_UNLOAD),
        ("cuStreamWaitValue32_v2", WAIT_VALUE),
        ("cuMemHostAlloc", HOST_ALLOC),
        ("cuMemFreeHost", FREE_HOST),
        ("cuMemMap", MEM_MAP),
        ("cuMemAllocManaged", ALLOC_MANAGED),
        ("cuMemUnmap", MEM_UNMAP),
        ("cuIpcOpenMemHandle_v2", IPC_OPEN),
        ("cuIpcCloseMemHandle", IPC_CLOSE),
        ("cuMemImportFromShareableHandle", MEM_IMPORT),
        ("cuMemRelease", MEM_RELEASE),
        ("cuMemRetainAllocationHandle", MEM_RETAIN),
        ("cuMulticastCreate", MULTICAST_CREATE),
        ("cuMemcpyDtoDAsync_v2", COPY_DTOD),
        ("cuMemcpyDtoHAsync_v2", COPY_DTOH),
        ("cuMemcpyPeerAsync", COPY_PEER),
        ("cuLaunchCooperativeKernelMultiDevice", MULTI_DEVICE),
        ("cuSurfObjectCreate", SURF_CREATE),
        ("cuSurfObjectDestroy", SURF_DESTROY),
        ("cuMemCreate", MEM_CREATE),
        ("cuIpcGetMemHandle", IPC_EXPORT),
        ("cuMemExportToShareableHandle", HANDLE_EXPORT),
        ("cuMemPoolExportPointer", POOL_EXPORT),
        ("cuMemPoolImportPointer", POOL_IMPORT),
        ("cuMemGetHandleForAddressRange", RANGE_EXPORT),
        ("cuMemsetD32Async", MEMSET_ASYNC),
        ("cuLaunchHostFunc", HOST_FUNC),
        ("cuStreamQuery", STREAM_QUERY),
        ("cuMemAllocAsync_ptsz", ALLOC_ASYNC_PTSZ),
        ("cuMemAllocPitch_v2", ALLOC_PITCH),
    ]);
    let mut backend = Backend::new(fake_driver(), decider, inventory, settings, ids);
    // The asynchronous path is what these tests exercise (the default on a GPU as well).
    backend.asynchronous = true;
    if clock {
        super::kernel_clock::fake::reset(false);
        super::kernel_clock::set_callback_api(super::kernel_clock::fake::api());
        backend.clock = super::kernel_clock::KernelClock::new(
            Some(super::kernel_clock::fake::api()),
            super::kernel_clock::Span::Submitted,
        );
        backend.clock.register();
    }
    let be: &'static Backend = Box::leak(Box::new(backend));
    be.active.store(true, Ordering::Release);
    CALLING_BACK.store((be as *const Backend).cast_mut(), Ordering::Release);
    Harness {
        be,
        outcomes,
        _serial: serial,
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // Before the serial lock goes (fields drop after this).
        let faults = std::mem::take(&mut gpu().kernel_faults);
        assert_eq!(faults, Vec::<String>::new(), "the table kernels faulted");
    }
}

fn quick() -> Settings {
    Settings {
        drain: Duration::from_millis(200),
        pass: Duration::from_millis(200),
        late_pass: Duration::from_millis(100),
        lock: Duration::from_millis(200),
        copy: Duration::from_millis(200),
        budget: u64::MAX,
        ..Settings::from_lookup(|_| None)
    }
}

impl Harness {
    fn cb(&self, domain: u32, cbid: u32, data: *const c_void) {
        // SAFETY: the backend is 'static; `data` is built like CUPTI's.
        unsafe {
            callback(
                (self.be as *const Backend).cast_mut().cast(),
                domain,
                cbid,
                data,
            )
        };
    }

    /// One driver call as the application makes it: enter callback, `body`, exit callback.
    fn call(
        &self,
        cbid: u32,
        name: &CStr,
        params: *const c_void,
        symbol: &CStr,
        body: impl FnOnce() -> CUresult,
    ) -> CUresult {
        self.call_in(CTX, cbid, name, params, symbol, body)
    }

    /// The application's `cuStreamQuery(stream)`; its driver part runs `body` first.
    fn query(&self, stream: usize, body: impl FnOnce()) -> CUresult {
        let p = [stream as u64];
        self.call(
            STREAM_QUERY,
            c"cuStreamQuery",
            p.as_ptr().cast(),
            c"",
            || {
                body();
                query_stream(stream)
            },
        )
    }

    /// `cuMemsetD32Async(ptr, value, n, stream)` as the application calls it: a fill that
    /// writes `n` words at `ptr` on `stream`.
    fn fill_async(&self, ptr: u64, value: u64, n: u64, stream: u64) -> CUresult {
        let p: [u64; 4] = [ptr, value, n, stream];
        self.call(
            MEMSET_ASYNC,
            c"cuMemsetD32Async",
            p.as_ptr().cast(),
            c"",
            || CUDA_SUCCESS,
        )
    }

    /// [`call`](Self::call) with context `ctx` current.
    fn call_in(
        &self,
        ctx: usize,
        cbid: u32,
        name: &CStr,
        params: *const c_void,
        symbol: &CStr,
        body: impl FnOnce() -> CUresult,
    ) -> CUresult {
        let mut corr = 0u64;
        let mut result: CUresult = CUDA_SUCCESS;
        let mut data = CUpti_CallbackData {
            callbackSite: CUPTI_API_ENTER,
            functionName: name.as_ptr(),
            functionParams: params,
            functionReturnValue: (&mut result as *mut CUresult).cast(),
            symbolName: symbol.as_ptr(),
            context: ctx as CUcontext,
            contextUid: 1,
            correlationData: &mut corr,
            correlationId: 7,
        };
        self.cb(
            CUPTI_CB_DOMAIN_DRIVER_API,
            cbid,
            (&data as *const CUpti_CallbackData).cast(),
        );
        result = body();
        data.callbackSite = CUPTI_API_EXIT;
        data.functionReturnValue = (&mut result as *mut CUresult).cast();
        self.cb(
            CUPTI_CB_DOMAIN_DRIVER_API,
            cbid,
            (&data as *const CUpti_CallbackData).cast(),
        );
        result
    }

    /// `cuMemAlloc` of the application.
    fn alloc(&self, size: usize) -> usize {
        self.alloc_in(CTX, size)
    }

    /// `cuMemAlloc` of the application with context `ctx` current.
    /// CUPTI's resource callback: context `ctx` is being destroyed.
    pub(super) fn destroy_context(&self, ctx: usize) {
        let data = CUpti_ResourceData {
            context: ctx as CUcontext,
            resourceHandle: std::ptr::null_mut(),
            resourceDescriptor: std::ptr::null_mut(),
        };
        self.cb(
            CUPTI_CB_DOMAIN_RESOURCE,
            CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
            (&data as *const CUpti_ResourceData).cast(),
        );
    }

    pub(super) fn alloc_in(&self, ctx: usize, size: usize) -> usize {
        let mut out: CUdeviceptr = 0;
        let params = cuMemAlloc_v2_params {
            dptr: &mut out,
            bytesize: size,
        };
        let r = self.call_in(
            ctx,
            ALLOC,
            c"cuMemAlloc_v2",
            (&params as *const cuMemAlloc_v2_params).cast(),
            c"",
            || {
                let p = fake_alloc(size);
                gpu().app.insert(p);
                out = p as CUdeviceptr;
                CUDA_SUCCESS
            },
        );
        assert_eq!(r, CUDA_SUCCESS);
        out as usize
    }

    /// `cuMemMap` of the application: `size` bytes of fake memory recorded as a
    /// virtual-memory mapping (as if reserved, created and mapped).
    fn map(&self, size: usize) -> usize {
        let p = fake_alloc(size);
        gpu().app.insert(p);
        let params = cuMemMap_params {
            ptr: p as CUdeviceptr,
            size,
            offset: 0,
            handle: 1,
            flags: 0,
        };
        let r = self.call(
            MEM_MAP,
            c"cuMemMap",
            (&params as *const cuMemMap_params).cast(),
            c"",
            || CUDA_SUCCESS,
        );
        assert_eq!(r, CUDA_SUCCESS);
        p
    }

    /// `cuMemFree` of the application.
    fn free(&self, p: usize) {
        let params = cuMemFree_v2_params {
            dptr: p as CUdeviceptr,
        };
        self.call(
            FREE,
            c"cuMemFree_v2",
            (&params as *const cuMemFree_v2_params).cast(),
            c"",
            || {
                gpu().app.remove(&p);
                // SAFETY: a fake allocation.
                unsafe { mem_free(p as CUdeviceptr) }
            },
        );
    }

    /// `cuLaunchKernel` of the application into `stream`; the driver part runs the kernel
    /// unless the fake fails it.
    fn launch(&self, kernel: &FakeKernel, args: &mut [*mut c_void], stream: usize) -> CUresult {
        self.launch_named(kernel, args, stream, c"_Z7add_onePji")
    }

    /// [`launch`](Self::launch) of a kernel whose symbol is `symbol`; returns once its
    /// window (asynchronous or not) is over.
    fn launch_named(
        &self,
        kernel: &FakeKernel,
        args: &mut [*mut c_void],
        stream: usize,
        symbol: &CStr,
    ) -> CUresult {
        let r = self.launch_returning(kernel, args, stream, symbol);
        self.settle();
        r
    }

    /// Waits (bounded) until no window runs behind a returned launch call.
    fn settle(&self) {
        assert!(
            gate::BEHIND.wait_idle(Duration::from_secs(20)),
            "a window never ended"
        );
    }

    /// `add_one` over `buf` on stream 0x5000, each relaunch taking `relaunch`: returns with
    /// the window still running behind the call.
    fn window_in_flight(&self, buf: &mut Buffer, relaunch: Duration) {
        gpu().slow_relaunches = Some(relaunch);
        let mut args = buf.args();
        self.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    }

    /// The application's `cuLaunchKernel` as it returns: an asynchronous window may still run.
    fn launch_returning(
        &self,
        kernel: &FakeKernel,
        args: &mut [*mut c_void],
        stream: usize,
        symbol: &CStr,
    ) -> CUresult {
        self.launch_returning_in(CTX, kernel, args, stream, symbol)
    }

    /// [`launch_returning`](Self::launch_returning) in context `ctx`.
    fn launch_returning_in(
        &self,
        ctx: usize,
        kernel: &FakeKernel,
        args: &mut [*mut c_void],
        stream: usize,
        symbol: &CStr,
    ) -> CUresult {
        let params = cuLaunchKernel_params {
            f: (kernel as *const FakeKernel).cast_mut().cast(),
            gridDimX: 4,
            gridDimY: 2,
            gridDimZ: 1,
            blockDimX: 256,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 512,
            hStream: stream as CUstream,
            kernelParams: args.as_mut_ptr(),
            extra: std::ptr::null_mut(),
        };
        let f = params.f;
        let argp = params.kernelParams;
        self.call_in(
            ctx,
            LAUNCH,
            c"cuLaunchKernel",
            (&params as *const cuLaunchKernel_params).cast(),
            symbol,
            || {
                if gpu().fail_app_launch {
                    return CUDA_ERROR_INVALID_VALUE;
                }
                run_kernel(f, argp, stream as CUstream);
                CUDA_SUCCESS
            },
        )
    }

    /// `cuModuleGetFunction` of the application returning `kernel`.
    fn obtain_function(&self, kernel: &FakeKernel) {
        let mut out: CUfunction = std::ptr::null_mut();
        let params = cuModuleGetFunction_params {
            hfunc: &mut out,
            hmod: kernel.module as CUmodule,
            name: c"k".as_ptr(),
        };
        self.call(
            GET_FUNCTION,
            c"cuModuleGetFunction",
            (&params as *const cuModuleGetFunction_params).cast(),
            c"",
            || {
                out = (kernel as *const FakeKernel).cast_mut().cast();
                CUDA_SUCCESS
            },
        );
    }

    /// `cuLibraryGetKernel` of the application returning `kernel`.
    fn obtain_kernel(&self, kernel: &FakeKernel) {
        let mut out: CUkernel = std::ptr::null_mut();
        let params = cuLibraryGetKernel_params {
            pKernel: &mut out,
            library: 0x11b as CUlibrary,
            name: c"k".as_ptr(),
        };
        self.call(
            GET_KERNEL,
            c"cuLibraryGetKernel",
            (&params as *const cuLibraryGetKernel_params).cast(),
            c"",
            || {
                out = (kernel as *const FakeKernel).cast_mut().cast();
                CUDA_SUCCESS
            },
        );
    }

    fn outcomes(&self) -> Vec<(DispatchInfo, Outcome)> {
        self.outcomes.lock().clone()
    }

    fn launches(&self) -> u32 {
        gpu().launches
    }
}

/// `add_one(uint32_t* data, uint32_t n)`: data[i] += 1, not idempotent, so a replay that does
/// not restore shows.
fn add_one(args: *mut *mut c_void) {
    // SAFETY: the tests pass (&CUdeviceptr, &u32).
    unsafe {
        let data = *(*args).cast::<CUdeviceptr>() as *mut u32;
        let n = *(*args.add(1)).cast::<u32>();
        for i in 0..n as usize {
            *data.add(i) += 1;
        }
    }
}

static ADD_ONE: FakeKernel = FakeKernel {
    run: add_one,
    module: 0,
};

/// A buffer of `n` zeroed u32 and the kernel arguments naming it.
struct Buffer {
    ptr: CUdeviceptr,
    n: u32,
}

impl Buffer {
    fn new(h: &Harness, n: u32) -> Buffer {
        Buffer {
            ptr: h.alloc(n as usize * 4) as CUdeviceptr,
            n,
        }
    }
    fn args(&mut self) -> [*mut c_void; 2] {
        [
            (&mut self.ptr as *mut CUdeviceptr).cast(),
            (&mut self.n as *mut u32).cast(),
        ]
    }
    fn values(&self) -> Vec<u32> {
        // SAFETY: a live fake allocation of n u32.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u32, self.n as usize) }.to_vec()
    }
}

#[test]
fn a_replayed_launch_runs_each_pass_and_leaves_one_execution() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 64);
    let mut args = buf.args();
    assert_eq!(h.launch(&ADD_ONE, &mut args, 0), CUDA_SUCCESS);
    assert_eq!(
        buf.values(),
        vec![1; 64],
        "the application sees one execution"
    );
    assert_eq!(h.launches(), 3, "the original launch and two relaunches");
    assert_eq!(gpu().relaunches, 2);
    let outcomes = h.outcomes();
    let (info, o) = &outcomes[0];
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(o.passes, 3);
    assert_eq!(o.snapshot_bytes, 256);
    assert_eq!(
        o.restored_bytes, 512,
        "restored before passes 2 and 3, not after 3"
    );
    assert_eq!(o.pass_times, vec![None; 3], "no timing was asked for");
    assert_eq!(info.runtime, crate::Runtime::Cuda);
    assert_eq!(info.agent, crate::AgentId(CTX as u64));
    assert_eq!(info.context, Some(CTX as u64));
    assert_eq!(info.kernel(), "_Z7add_onePji");
    assert_eq!(info.grid, [1024, 2, 1]);
    assert_eq!(info.workgroup, [256, 1, 1]);
    assert_eq!(info.blocks, [4, 2, 1]);
    assert_eq!(
        info.group_segment_size,
        512 + 1024,
        "dynamic + static shared memory"
    );
    assert_eq!(info.private_segment_size, 16);
}

#[test]
fn several_launches_each_leave_their_own_result() {
    let h = harness(4, quick());
    let mut buf = Buffer::new(&h, 16);
    for _ in 0..5 {
        let mut args = buf.args();
        h.launch(&ADD_ONE, &mut args, 0);
    }
    assert_eq!(buf.values(), vec![5; 16]);
    assert_eq!(h.launches(), 20);
    assert!(
        h.outcomes()
            .iter()
            .all(|(_, o)| o.kind == OutcomeKind::Replayed)
    );
    let ids: Vec<u64> = h.outcomes().iter().map(|(i, _)| i.dispatch_id.0).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
}

#[test]
fn a_skipped_launch_runs_once() {
    let h = harness(0, quick());
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(buf.values(), vec![1; 8]);
    assert_eq!(h.launches(), 1);
    assert_eq!(gpu().relaunches, 0);
    let o = &h.outcomes()[0].1;
    assert_eq!(
        (o.kind, o.passes, o.snapshot_bytes),
        (OutcomeKind::Skipped, 1, 0)
    );
}

#[test]
fn a_communication_kernel_runs_once_declined_before_the_window() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    let nccl = c"_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LLP24ncclDevKernelArgsStorage";
    h.launch_named(&ADD_ONE, &mut args, 0, nccl);
    assert_eq!(buf.values(), vec![1; 8]);
    assert_eq!(h.launches(), 1, "never relaunched");
    let o = &h.outcomes()[0].1;
    assert_eq!(
        (o.kind, o.passes, o.snapshot_bytes),
        (
            OutcomeKind::Declined(DeclineReason::CommunicationKernel),
            1,
            0
        )
    );
}

/// The application's `cuStreamWaitValue32_v2` on `stream`: its launches are not replayed from
/// then on.
fn stream_wait_value(h: &Harness, stream: usize) {
    #[repr(C)]
    struct WaitValue32 {
        stream: CUstream,
        addr: CUdeviceptr,
        value: u32,
        flags: u32,
    }
    let params = WaitValue32 {
        stream: stream as CUstream,
        addr: 0,
        value: 1,
        flags: 0,
    };
    h.call(
        WAIT_VALUE,
        c"cuStreamWaitValue32_v2",
        (&params as *const WaitValue32).cast(),
        c"",
        || CUDA_SUCCESS,
    );
}

#[test]
fn launches_into_a_stream_that_waited_on_memory_are_not_replayed() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    stream_wait_value(&h, 0x5500);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5500);
    assert_eq!(buf.values(), vec![1; 8]);
    assert_eq!(
        h.outcomes()[0].1.kind,
        OutcomeKind::Declined(DeclineReason::StreamMemoryWait)
    );
    // Another stream is replayed as usual.
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x6600);
    assert_eq!(buf.values(), vec![2; 8]);
    assert_eq!(h.outcomes()[1].1.kind, OutcomeKind::Replayed);
}

/// The application's `cuMemHostAlloc` of `bytes` (fake memory is host memory anyway): the
/// address, and the out-pointer the driver wrote.
fn host_alloc(h: &Harness, bytes: usize) -> (usize, *mut c_void) {
    let pinned = fake_alloc(bytes);
    let mut out: *mut c_void = std::ptr::null_mut();
    let params = cuMemHostAlloc_params {
        pp: &mut out,
        bytesize: bytes,
        Flags: 0,
    };
    h.call(
        HOST_ALLOC,
        c"cuMemHostAlloc",
        (&params as *const cuMemHostAlloc_params).cast(),
        c"",
        || {
            out = pinned as *mut c_void;
            CUDA_SUCCESS
        },
    );
    (pinned, out)
}

#[test]
fn a_kernel_writing_pinned_host_memory_runs_once_declined_and_others_replay() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let (pinned, out) = host_alloc(&h, 32);
    // Counters inside the pinned block (an interior pointer).
    let mut counter = Buffer {
        ptr: pinned as CUdeviceptr + 4,
        n: 4,
    };
    let mut args = counter.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(
        counter.values(),
        vec![1; 4],
        "incremented once, not once per pass"
    );
    // Watched across the first pass, which wrote it: replay stops after it.
    assert_eq!(
        h.outcomes()[0].1.kind,
        OutcomeKind::Declined(DeclineReason::HostMemoryWritten)
    );
    assert_eq!(h.outcomes()[0].1.passes, 1);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.outcomes()[1].1.kind, OutcomeKind::Replayed);
    // Once freed, that range is no longer the application's host memory.
    let free = cuMemFreeHost_params { p: out };
    h.call(
        FREE_HOST,
        c"cuMemFreeHost",
        (&free as *const cuMemFreeHost_params).cast(),
        c"",
        || CUDA_SUCCESS,
    );
    assert!(h.be.host_memory.read().is_empty());
}

/// Set: the next run of [`ADD_FROM`] first writes 100 into `src[3]` (once).
static POKE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn add_from(args: *mut *mut c_void) {
    // SAFETY: the tests pass (&CUdeviceptr dst, &CUdeviceptr src, &u32 n), n >= 4 when POKE
    // is set.
    unsafe {
        let dst = *(*args).cast::<CUdeviceptr>() as *mut u32;
        let src = *(*args.add(1)).cast::<CUdeviceptr>() as *mut u32;
        let n = *(*args.add(2)).cast::<u32>();
        if POKE.swap(false, std::sync::atomic::Ordering::SeqCst) {
            *src.add(3) = 100;
        }
        for i in 0..n as usize {
            *dst.add(i) += *src.add(i);
        }
    }
}

/// `dst[i] += src[i]`: reads `src`, writes `dst` (and `src[3]` once after [`POKE`]).
static ADD_FROM: FakeKernel = FakeKernel {
    run: add_from,
    module: 0,
};

#[test]
fn a_kernel_reading_pinned_host_memory_is_replayed_and_what_the_host_writes_there_stands() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_FROM);
    let (pinned, out) = host_alloc(&h, 16);
    let src = pinned as *mut u32;
    // SAFETY: our 16-byte fake allocation.
    unsafe { std::ptr::copy_nonoverlapping([5u32, 6, 7, 8].as_ptr(), src, 4) };
    let mut dst = Buffer::new(&h, 4);
    let mut n = 4u32;
    let mut src_ptr = pinned as CUdeviceptr;
    let mut args: [*mut c_void; 3] = [
        (&mut dst.ptr as *mut CUdeviceptr).cast(),
        (&mut src_ptr as *mut CUdeviceptr).cast(),
        (&mut n as *mut u32).cast(),
    ];
    h.launch(&ADD_FROM, &mut args, 0);
    let o = &h.outcomes()[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Replayed,
        "the pinned memory is only read"
    );
    assert_eq!(o.passes, 3);
    assert!(!o.host_writes_repeated);
    assert_eq!(dst.values(), vec![5, 6, 7, 8], "one execution's result");
    // SAFETY: as above.
    let read_back = unsafe { std::slice::from_raw_parts(src, 4) }.to_vec();
    assert_eq!(read_back, vec![5, 6, 7, 8], "never restored, never written");
    // Something else changes the pinned input during the next launch's first pass (here the
    // kernel itself, once, standing in for a host thread): the window sees the change and
    // stops after that pass, and the new bytes stay as they are.
    POKE.store(true, std::sync::atomic::Ordering::SeqCst);
    h.launch(&ADD_FROM, &mut args, 0);
    assert_eq!(
        h.outcomes().last().unwrap().1.kind,
        OutcomeKind::Declined(DeclineReason::HostMemoryWritten)
    );
    assert_eq!(dst.values(), vec![10, 12, 14, 108], "one more execution");
    // SAFETY: as above.
    assert_eq!(unsafe { *src.add(3) }, 100, "the host's write stands");
    let free = cuMemFreeHost_params { p: out };
    h.call(
        FREE_HOST,
        c"cuMemFreeHost",
        (&free as *const cuMemFreeHost_params).cast(),
        c"",
        || CUDA_SUCCESS,
    );
}

#[test]
fn a_launch_into_a_capturing_stream_is_not_replayed() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().capturing = true;
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    assert_eq!(h.launches(), 1);
    assert!(h.outcomes().is_empty(), "the window never ran");
}

#[test]
fn the_backends_own_calls_never_break_the_applications_stream_capture() {
    // The application captures (in global mode) while it allocates and launches: the
    // backend's set-up on its thread (gate page, compare module) runs relaxed, and a captured
    // launch prepares nothing.
    let h = harness(3, quick());
    gpu().capturing = true;
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    assert!(
        h.outcomes().is_empty(),
        "the captured launch is not replayed"
    );
    gpu().capturing = false;
    // A window leaves the arena holding device memory; then the device runs short while the
    // application captures an allocation: the arena is released for it, relaxed.
    h.obtain_function(&ADD_ONE);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    let ctx = h.be.ctx(CTX);
    assert!(ctx.arena.lock().device_bytes() > 0);
    gpu().device_free = 1 << 20;
    gpu().capturing = true;
    let _p = h.alloc(4096);
    gpu().capturing = false;
    assert_eq!(
        ctx.arena.lock().device_bytes(),
        0,
        "released for the allocation"
    );
    // The harness reports any call made in global mode during the capture.
}

#[test]
fn a_failing_original_launch_is_not_run_again() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().fail_app_launch = true;
    let mut args = buf.args();
    assert_eq!(
        h.launch(&ADD_ONE, &mut args, 0),
        CUDA_ERROR_INVALID_VALUE,
        "the application gets its launch's error"
    );
    assert_eq!(h.launches(), 0, "nothing ran, as without the tool");
    assert_eq!(buf.values(), vec![0; 8]);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::SubmitFailed));
}

#[test]
fn copies_that_never_finish_decline_before_the_launch() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().stick_copies = true;
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(buf.values(), vec![1; 8]);
    assert_eq!(h.launches(), 1);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::CopyTimeout));
    assert_eq!(o.passes, 1);
}

#[test]
fn a_restore_that_fails_twice_is_reported_failed() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().failing_restores = 2;
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Failed(FailureReason::RestoreFailed));
    assert_eq!(gpu().restore_batches, 2, "retried once");
    // Pass 1, then the final run on the unrestored memory: the outcome says the result may
    // be wrong, and here it is.
    assert_eq!(buf.values(), vec![2; 8]);
}

#[test]
fn a_stuck_relaunch_fails_and_orders_the_application_stream_after_it() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().stick_relaunches = true;
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Failed(FailureReason::PassStuck));
    assert_eq!(o.passes, 2);
    let waits = gpu().stream_waits.clone();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].0, 0x5000, "the application's stream waits");
}

#[test]
fn a_module_unload_waits_for_a_relaunch_that_outlived_its_deadline() {
    // A pass still running may run the module's code: the unload waits for it (bounded by
    // the late-pass deadline), as HSA's executable destruction does.
    let settings = Settings {
        late_pass: Duration::from_secs(2),
        ..quick()
    };
    let h = harness(3, settings);
    let mut buf = Buffer::new(&h, 8);
    gpu().stick_relaunches = true;
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    assert_eq!(
        h.outcomes()[0].1.kind,
        OutcomeKind::Failed(FailureReason::PassStuck)
    );
    assert!(h.be.ctx(CTX).stuck.any(), "the late pass is listed");
    let finished = std::sync::Arc::new(AtomicBool::new(false));
    let finisher = {
        let finished = finished.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let mut g = gpu();
            g.stick_relaunches = false;
            g.stuck_streams.clear();
            g.stuck_events.clear();
            finished.store(true, Ordering::SeqCst);
        })
    };
    let unloaded_after = std::sync::Arc::new(AtomicBool::new(false));
    let params = cuModuleUnload_params {
        hmod: 0x77 as CUmodule,
    };
    {
        let (finished, unloaded_after) = (finished.clone(), unloaded_after.clone());
        h.call(
            MODULE_UNLOAD,
            c"cuModuleUnload",
            (&params as *const cuModuleUnload_params).cast(),
            c"",
            move || {
                unloaded_after.store(finished.load(Ordering::SeqCst), Ordering::SeqCst);
                CUDA_SUCCESS
            },
        );
    }
    finisher.join().unwrap();
    assert!(
        unloaded_after.load(Ordering::SeqCst),
        "the module was unloaded while the late pass still ran"
    );
    let ctx = h.be.ctx(CTX);
    assert!(
        ctx.stuck
            .pending(&super::window::LateEvents::new(&h.be.drv, &ctx))
            .is_empty(),
        "the ended pass is forgotten"
    );
}

/// The application launches a kernel into stream 0x5000 that does not finish (a kernel
/// waiting for a flag), then makes `next`: a call the kernel's completion waits for, whose
/// driver part calls [`unstick`]. Returns how long `next` took from the launch on, once the
/// window is over.
fn first_pass_waiting_for(h: &Harness, buf: &mut Buffer, next: impl FnOnce(&Harness)) -> Duration {
    // Known parameters: the arguments are copied and the launch call returns at once.
    h.obtain_function(&ADD_ONE);
    h.obtain_function(&UNSTICKING);
    gpu().stick_after_launch = Some(0x5000);
    let mut args = buf.args();
    let started = Instant::now();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    next(h);
    let took = started.elapsed();
    h.settle();
    took
}

/// The flag the kernel on stream 0x5000 waits for is set: its work finishes.
fn unstick() {
    let mut g = gpu();
    g.stick_after_launch = None;
    g.stuck_streams.remove(&0x5000);
    g.stuck_events.clear();
}

/// The application's `cuMemcpyHtoDAsync_v2` on `stream`, whose driver part runs `body`.
fn copy_on(h: &Harness, stream: usize, body: fn()) {
    let src = [0u8; 4];
    let p = [0u64, src.as_ptr() as u64, 0, stream as u64];
    h.call(
        MEMCPY,
        c"cuMemcpyHtoDAsync_v2",
        p.as_ptr().cast(),
        c"",
        || {
            body();
            CUDA_SUCCESS
        },
    );
}

/// The first window of `h` gave way during its first pass: `lock_contention` after one
/// pass, `buf` (four words) written once, nothing relaunched.
fn gave_way_after_the_first_pass(h: &Harness, buf: &Buffer) {
    let o = &h.outcomes()[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::LockContention),
        "{o:?}"
    );
    assert_eq!(o.passes, 1);
    assert_eq!(buf.values(), vec![1; 4], "one execution");
    assert_eq!(gpu().relaunches, 0);
}

fn yielding() -> Settings {
    Settings {
        pass: Duration::from_secs(10),
        late_pass: Duration::from_millis(100),
        lock: Duration::from_secs(10),
        yield_after: Duration::from_millis(100),
        ..quick()
    }
}

#[test]
fn a_first_pass_waiting_for_the_applications_copy_on_another_stream_gives_way() {
    // Without the yield the copy waits for the window, whose first pass waits for the copy:
    // both until the 10 s pass deadline.
    let h = harness(3, yielding());
    let mut buf = Buffer::new(&h, 4);
    let took = first_pass_waiting_for(&h, &mut buf, |h| copy_on(h, 0x6000, unstick));
    assert!(took < Duration::from_secs(5), "the copy waited {took:?}");
    gave_way_after_the_first_pass(&h, &buf);
}

#[test]
fn a_first_pass_waiting_for_the_applications_launch_on_another_stream_gives_way() {
    // The kernel that sets the flag is replayed too: its launch waits for its window, which
    // waits for the first window to end.
    let h = harness(3, yielding());
    let mut buf = Buffer::new(&h, 4);
    let mut other = Buffer::new(&h, 4);
    // Launched once before: its module is known, so the second launch waits for its window
    // only (`loads` covers a first launch, which waits for windows in flight as a load).
    h.obtain_function(&UNSTICKING);
    let mut args = other.args();
    h.launch(&UNSTICKING, &mut args, 0x6000);
    let took = first_pass_waiting_for(&h, &mut buf, |h| {
        UNSTICK_ON_LAUNCH.store(true, Ordering::SeqCst);
        let mut args = other.args();
        h.launch_returning(&UNSTICKING, &mut args, 0x6000, c"_Z7add_onePji");
    });
    assert!(took < Duration::from_secs(5), "the launch waited {took:?}");
    let outcomes = h.outcomes();
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert_eq!(
        outcomes[1].1.kind,
        OutcomeKind::Declined(DeclineReason::LockContention)
    );
    assert_eq!(outcomes[1].1.passes, 1);
    // Its own window does not wait for the kernel still waiting for it: it runs once, at once.
    assert_eq!(
        outcomes[2].1.kind,
        OutcomeKind::Declined(DeclineReason::DrainTimeout),
        "{outcomes:?}"
    );
    assert_eq!(buf.values(), vec![1; 4]);
    assert_eq!(other.values(), vec![2; 4]);
}

#[test]
fn a_first_pass_is_waited_for_when_the_waiting_work_is_behind_it_on_its_stream() {
    // The copy is on the kernel's own stream: it cannot be what the kernel waits for, so
    // the window keeps its first pass (here it finishes by itself after the copy has waited
    // past the yield deadline, as a long kernel would).
    let h = harness(3, yielding());
    let mut buf = Buffer::new(&h, 4);
    let took = first_pass_waiting_for(&h, &mut buf, |h| {
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(400));
                unstick();
            });
            copy_on(h, 0x5000, || {});
        });
    });
    assert!(took >= Duration::from_millis(400), "{took:?}");
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Replayed, "{o:?}");
    assert_eq!(o.passes, 3);
    assert_eq!(buf.values(), vec![1; 4]);
}

#[test]
fn legacy_stream_work_releases_a_first_pass_only_on_a_non_blocking_stream() {
    // A copy on the legacy default stream (as every synchronous copy is): it waits for a
    // kernel on a blocking stream anyway, but not for one on a non-blocking stream, which may
    // be waiting for it.
    for non_blocking in [true, false] {
        let h = harness(3, yielding());
        if non_blocking {
            gpu().non_blocking_streams.insert(0x5000);
        }
        let mut buf = Buffer::new(&h, 4);
        let took = first_pass_waiting_for(&h, &mut buf, |h| {
            if non_blocking {
                copy_on(h, 0, unstick);
                return;
            }
            std::thread::scope(|s| {
                s.spawn(|| {
                    // The kernel finishes by itself (a long kernel), the copy waits for it.
                    std::thread::sleep(Duration::from_millis(400));
                    unstick();
                });
                copy_on(h, 0, || {});
            });
        });
        assert!(
            !non_blocking || took < Duration::from_millis(2500),
            "{took:?}"
        );
        first_pass_gave_way(&h.outcomes()[0].1, non_blocking);
        assert_eq!(buf.values(), vec![1; 4], "non-blocking: {non_blocking}");
    }
}

#[test]
fn work_on_another_threads_per_thread_stream_releases_a_first_pass_on_this_threads() {
    // `CU_STREAM_PER_THREAD` names each thread's own default stream: a copy another thread
    // makes on its per-thread stream may be what a kernel on this thread's per-thread stream
    // waits for (it gives way), while one this thread makes on its own is behind the kernel
    // (the window keeps its first pass, which here finishes by itself).
    const PER_THREAD: usize = CU_STREAM_PER_THREAD;
    for other_thread in [true, false] {
        let h = harness(3, yielding());
        let mut buf = Buffer::new(&h, 4);
        h.obtain_function(&ADD_ONE);
        gpu().stick_after_launch = Some(PER_THREAD);
        let mut args = buf.args();
        let started = Instant::now();
        h.launch_returning(&ADD_ONE, &mut args, PER_THREAD, c"_Z7add_onePji");
        std::thread::scope(|s| {
            if other_thread {
                s.spawn(|| copy_on(&h, PER_THREAD, unstick_per_thread));
            } else {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(400));
                    unstick_per_thread();
                });
                copy_on(&h, PER_THREAD, || {});
            }
        });
        let took = started.elapsed();
        h.settle();
        if other_thread {
            assert!(took < Duration::from_secs(5), "the copy waited {took:?}");
        } else {
            assert!(took >= Duration::from_millis(400), "{took:?}");
        }
        first_pass_gave_way(&h.outcomes()[0].1, other_thread);
        assert_eq!(buf.values(), vec![1; 4], "other thread: {other_thread}");
    }
}

/// Kernels that only set the flag a kernel on stream 0x5000 (on a per-thread default stream)
/// waits for; they write no memory.
static UNSTICK_ONLY: FakeKernel = FakeKernel {
    run: |_| unstick(),
    module: 0,
};
static UNSTICK_PER_THREAD_ONLY: FakeKernel = FakeKernel {
    run: |_| unstick_per_thread(),
    module: 0,
};

#[test]
fn a_next_launch_on_the_stream_of_a_first_pass_waiting_for_its_thread_stops_waiting() {
    // The first kernel waits for what its thread does after its next launch on the same
    // stream (the flag set by that launch's driver part here; in a real program the host
    // writes it after the call). The next launch waits for its own window only until the
    // yield deadline, then runs without replay, ordered behind the first window on the
    // device; the first window keeps all its passes.
    for (stream, unsticking) in [
        (0x5000, &UNSTICK_ONLY),
        (CU_STREAM_PER_THREAD, &UNSTICK_PER_THREAD_ONLY),
    ] {
        let h = harness(3, yielding());
        let mut a = Buffer::new(&h, 4);
        let mut b = Buffer::new(&h, 4);
        h.obtain_function(&ADD_ONE);
        h.obtain_function(unsticking);
        let mut first = a.args();
        let mut next = b.args();
        // Launched once before, so that its next launch loads nothing (a call that may load a
        // module is waited for by windows in another way).
        h.launch(unsticking, &mut next, stream);
        h.settle();
        let seen = h.outcomes().len();
        gpu().stick_after_launch = Some(stream);
        let started = Instant::now();
        h.launch_returning(&ADD_ONE, &mut first, stream, c"_Z7add_onePji");
        h.launch_returning(unsticking, &mut next, stream, c"_Z7unstickPj");
        let took = started.elapsed();
        h.settle();
        assert!(
            took < Duration::from_secs(5),
            "{stream:#x}: the next launch waited {took:?} (the pass deadline is 10 s)"
        );
        assert!(took >= Duration::from_millis(100), "{took:?}");
        let mut outcomes = h.outcomes()[seen..].to_vec();
        outcomes.sort_by_key(|(i, _)| i.dispatch_id.0);
        let [(_, first), (_, next)] = &outcomes[..] else {
            panic!("two windows: {outcomes:?}");
        };
        assert_eq!(
            (first.kind, first.passes),
            (OutcomeKind::Replayed, 3),
            "{first:?}"
        );
        assert_eq!(
            next.kind,
            OutcomeKind::Declined(DeclineReason::LockContention),
            "{next:?}"
        );
        assert_eq!(a.values(), vec![1; 4], "one execution of the first kernel");
        // The next launch went to the driver behind a closed gate (the first window's).
        let ops = ops_on(stream);
        let launches: Vec<&Op> = ops.iter().filter(|o| matches!(o, Op::Launch(_))).collect();
        assert_eq!(
            launches[launches.len() - 2..],
            [&Op::Launch(true), &Op::Launch(true)]
        );
        // Every event of ours recorded on the stream went back to its pool (a per-thread
        // stream's launch records a marker its drain waits for: the withdrawn window drains
        // nothing and hands it back).
        let pools: Vec<usize> = {
            let ctx = h.be.ctx(CTX);
            let p = ctx.private.lock();
            p.timing_events
                .iter()
                .chain(&p.plain_events)
                .copied()
                .collect()
        };
        for op in &ops {
            if let Op::Record(ev, _) = op {
                assert!(
                    pools.contains(ev),
                    "{stream:#x}: event {ev:#x} not given back"
                );
            }
        }
    }
}

#[test]
fn a_next_launch_waits_for_a_window_past_its_first_pass_however_long() {
    // The first pass finished; the relaunches take 300 ms each: nothing the window runs can
    // wait for this thread, so the next launch waits for its own window and is replayed.
    let h = harness(3, yielding());
    let mut a = Buffer::new(&h, 4);
    let mut b = Buffer::new(&h, 4);
    h.obtain_function(&ADD_ONE);
    h.window_in_flight(&mut a, Duration::from_millis(300));
    let mut next = b.args();
    let started = Instant::now();
    h.launch_returning(&ADD_ONE, &mut next, 0x5000, c"_Z7add_onePji");
    let took = started.elapsed();
    gpu().slow_relaunches = None;
    h.settle();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    for (_, o) in h.outcomes() {
        assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    }
    assert_eq!(h.outcomes().len(), 2);
    assert_eq!((a.values(), b.values()), (vec![1; 4], vec![1; 4]));
}

/// The outcome of a window whose first pass waited for held-up work: given way after it
/// (`lock_contention`, one pass) when `gave_way`, else replayed in full (3 passes).
fn first_pass_gave_way(o: &Outcome, gave_way: bool) {
    if gave_way {
        assert_eq!(
            o.kind,
            OutcomeKind::Declined(DeclineReason::LockContention),
            "{o:?}"
        );
        assert_eq!(o.passes, 1);
    } else {
        assert_eq!(o.kind, OutcomeKind::Replayed, "{o:?}");
        assert_eq!(o.passes, 3);
    }
}

/// The flag a kernel on a per-thread default stream waits for is set.
fn unstick_per_thread() {
    let mut g = gpu();
    g.stick_after_launch = None;
    g.stuck_streams.remove(&CU_STREAM_PER_THREAD);
    g.stuck_events.clear();
}

/// [`UNSTICKING`]'s next run calls [`unstick`].
static UNSTICK_ON_LAUNCH: AtomicBool = AtomicBool::new(false);

fn unsticking(args: *mut *mut c_void) {
    if UNSTICK_ON_LAUNCH.swap(false, Ordering::SeqCst) {
        unstick();
    }
    add_one(args);
}

/// ADD_ONE that sets the flag the kernel on stream 0x5000 waits for.
static UNSTICKING: FakeKernel = FakeKernel {
    run: unsticking,
    module: 0,
};

/// Three passes; the copies stick from the end of pass 1 on (the restore before pass 2 never
/// finishes).
struct StickAfterPassOne;

impl ReplayPolicy for StickAfterPassOne {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(3, ())
    }
    fn on_pass_end(&self, pass: &crate::PassReport<'_>, _: &mut (), _: &mut ()) {
        if pass.index == 0 {
            gpu().stick_copies = true;
        }
    }
}

#[test]
fn after_a_stuck_restore_nothing_runs_again_and_late_work_waits_for_the_copies() {
    // Full restores: the restore before pass 2 is a copy (write-set restore would first
    // compare, and stick there: a decline before any restore). The restore is queued on the
    // private stream and pass 2 behind it: the pass never starts, and the window reports
    // the restore as what is stuck.
    let settings = Settings {
        restore: crate::policy::RestoreMode::Full,
        ..quick()
    };
    let h = harness_with(StickAfterPassOne, settings);
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Failed(FailureReason::RestoreStuck));
    assert_eq!(o.passes, 2, "pass 1, and pass 2 behind the stuck restore");
    assert!(
        !h.be.ctx(CTX).compare.lock().copies_by_kernel(),
        "the copy table a stuck restore may still read is never written again"
    );
    let g = gpu();
    // The stream the restore stuck on.
    let stuck: Vec<usize> = g.stuck_streams.iter().copied().collect();
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    let on_stuck: Vec<&Op> = g
        .ops
        .iter()
        .filter_map(|(s, op)| (*s == stuck[0]).then_some(op))
        .collect();
    // Pass 2 was queued behind the restore on that stream, and the late work's event behind
    // both: what waits for late work (frees, the next windows) waits for the copies too.
    let launch = on_stuck
        .iter()
        .position(|op| matches!(op, Op::Launch(_)))
        .expect("pass 2 queued behind the restore");
    assert!(
        on_stuck[launch + 1..]
            .iter()
            .any(|op| matches!(op, Op::Record(..))),
        "an event behind the stuck copies and the pass: {on_stuck:?}"
    );
    // Nothing ran again on another stream over partly restored memory.
    let launches_elsewhere = g
        .ops
        .iter()
        .filter(|(s, op)| matches!(op, Op::Launch(_)) && *s != stuck[0] && *s != 0x5000)
        .count();
    assert_eq!(launches_elsewhere, 0, "{:?}", g.ops);
    drop(g);
    gpu().stick_copies = false;
}

#[test]
fn memory_freed_or_unmapped_after_a_stuck_restore_is_not_reused_under_the_late_copies() {
    let settings = Settings {
        restore: crate::policy::RestoreMode::Full,
        ..quick()
    };
    let h = harness_with(StickAfterPassOne, settings);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    assert_eq!(
        h.outcomes()[0].1.kind,
        OutcomeKind::Failed(FailureReason::RestoreStuck)
    );
    let ctx = h.be.ctx(CTX);
    let late = ctx
        .stuck
        .pending(&super::window::LateEvents::new(&h.be.drv, &ctx))
        .to_vec();
    assert_eq!(late.len(), 1, "an event behind the stuck copies");
    // A stream-ordered free: its stream waits for the late copies first, so the allocator
    // hands the memory out again only after them.
    let params = cuMemFreeAsync_params {
        dptr: buf.ptr,
        hStream: 0x5000 as CUstream,
    };
    h.call(
        FREE_ASYNC,
        c"cuMemFreeAsync",
        (&params as *const cuMemFreeAsync_params).cast(),
        c"",
        || CUDA_SUCCESS,
    );
    assert!(
        gpu().stream_waits.contains(&(0x5000, late[0])),
        "the free's stream waits for the late copies: {:?}",
        gpu().stream_waits
    );
    // A synchronous free waits for them on the host, at most the late-pass deadline.
    let other = h.alloc(64);
    let start = Instant::now();
    h.free(other);
    assert!(
        start.elapsed() >= quick().late_pass,
        "the free waited for the late copies"
    );
    // So does an unmap of a virtual-memory range (the copies would fault on it).
    let unmap = cuMemUnmap_params {
        ptr: 0x7700_0000,
        size: 1 << 21,
    };
    let start = Instant::now();
    h.call(
        MEM_UNMAP,
        c"cuMemUnmap",
        (&unmap as *const cuMemUnmap_params).cast(),
        c"",
        || CUDA_SUCCESS,
    );
    assert!(
        start.elapsed() >= quick().late_pass,
        "the unmap waited for the late copies"
    );
    // Once they are done, frees do not wait.
    gpu().stuck_streams.clear();
    gpu().stuck_events.clear();
    let third = h.alloc(64);
    let start = Instant::now();
    h.free(third);
    assert!(start.elapsed() < quick().late_pass);
    gpu().stick_copies = false;
}

#[test]
fn a_late_relaunch_that_finishes_within_the_second_deadline_is_declined() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    // Past the pass deadline (200 ms), within the late-pass one (100 ms more).
    gpu().slow_relaunches = Some(Duration::from_millis(250));
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::PassTimeout));
    assert_eq!(o.passes, 2);
    assert!(gpu().stream_waits.is_empty(), "nothing left to wait for");
    assert_eq!(
        buf.values(),
        vec![1; 8],
        "the late pass's result, one execution"
    );
}

/// CUPTI's resource callback `cbid` for application stream `stream`.
fn stream_event(h: &Harness, cbid: u32, stream: usize) {
    let data = CUpti_ResourceData {
        context: CTX as CUcontext,
        resourceHandle: stream as CUstream,
        resourceDescriptor: std::ptr::null_mut(),
    };
    h.cb(
        CUPTI_CB_DOMAIN_RESOURCE,
        cbid,
        (&data as *const CUpti_ResourceData).cast(),
    );
}

/// Another thread destroys a stream of the context (CUDA allows it with work pending): its
/// handle is gone, so a drain must neither query it (on the H200 that crashed the process, one
/// run in eight of `replay_check`'s two-thread part) nor forget the work still queued on it.
#[test]
fn a_destroyed_stream_is_never_queried_and_its_pending_work_is_drained() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    // Destroyed idle: forgotten, nothing to wait for.
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000);
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, 0x6000);
    gpu().destroyed_streams.insert(0x6000);
    // Destroyed busy, by another thread while the window drains the context (when it
    // queries the stream before): an event behind its work.
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x5800);
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6100);
    gpu().stuck_streams.insert(0x6100);
    let be = h.be as *const Backend as usize;
    gpu().on_query = Some((
        0x5800,
        Box::new(move || {
            let data = CUpti_ResourceData {
                context: CTX as CUcontext,
                resourceHandle: 0x6100 as CUstream,
                resourceDescriptor: std::ptr::null_mut(),
            };
            // SAFETY: the backend is 'static; `data` is built like CUPTI's.
            unsafe {
                callback(
                    be as *mut c_void,
                    CUPTI_CB_DOMAIN_RESOURCE,
                    CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING,
                    (&data as *const CUpti_ResourceData).cast(),
                )
            };
            gpu().destroyed_streams.insert(0x6100);
        }),
    ));
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    assert_eq!(
        h.outcomes()[0].1.kind,
        OutcomeKind::Declined(DeclineReason::DrainTimeout),
        "the destroyed stream's work is still running: the window must not start"
    );
    assert!(
        gpu().on_query.is_none(),
        "the other thread destroyed the stream"
    );
    // Its work finishes: the next launch is replayed.
    gpu().stuck_streams.remove(&0x6100);
    gpu().stuck_events.clear();
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    let o = &h.outcomes()[1].1;
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![2; 8], "two executions in all");
    // The harness asserts on drop that no destroyed stream was queried.
}

#[test]
fn a_busy_application_stream_declines_with_drain_timeout() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().stuck_streams.insert(0x5000);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::DrainTimeout));
    assert_eq!(h.launches(), 1);
}

#[test]
fn a_stream_that_never_drains_costs_one_drain_deadline_not_one_per_launch() {
    // Another stream of the context holds work that never finishes (a communication kernel
    // waiting for its peers): every window would wait the whole drain deadline for it.
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000);
    gpu().stuck_streams.insert(0x6000);
    for launch in 1..=3u32 {
        let mut args = buf.args();
        h.launch(&ADD_ONE, &mut args, 0x5000);
        h.settle();
        let o = h.outcomes()[launch as usize - 1].1.clone();
        assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::DrainTimeout));
        assert_eq!(buf.values(), vec![launch; 8], "one execution per launch");
        if launch == 1 {
            assert!(o.window_time >= quick().drain, "the first waited: {o:?}");
        } else {
            assert!(
                o.window_time < quick().drain / 2,
                "launch {launch} waited for the same stuck stream again: {o:?}"
            );
        }
    }
    // The stream's work ends: drains wait again, and the next launch is replayed.
    gpu().stuck_streams.remove(&0x6000);
    gpu().stuck_events.clear();
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    assert_eq!(h.outcomes()[3].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![4; 8]);
}

/// `bump(void)`: increments the module's `__device__ uint32_t counter`.
fn bump(_: *mut *mut c_void) {
    let addr = gpu()
        .globals
        .iter()
        .find(|g| g.1 == "counter")
        .map(|g| g.2)
        .expect("counter");
    // SAFETY: a live fake allocation of 4 bytes.
    unsafe { *(addr as *mut u32) += 1 };
}

static BUMP: FakeKernel = FakeKernel {
    run: bump,
    module: 0xabc0,
};

/// A CUkernel whose function in the context is BUMP (the driver's cuFunc* queries do not
/// take it: module 0).
static KERNEL_BUMP: FakeKernel = FakeKernel {
    run: bump,
    module: 0,
};

fn counter() -> u32 {
    let addr = gpu().globals.iter().find(|g| g.1 == "counter").unwrap().2;
    // SAFETY: a live fake allocation of 4 bytes.
    unsafe { *(addr as *const u32) }
}

fn load_module_with_counter(h: &Harness) {
    let addr = fake_alloc(4);
    gpu().globals.push((0xabc0, "counter".into(), addr, 4));
    let image = globals::tests::elf(&[(".nv.global", 8)], &[("counter", 1, 4, 4)]);
    module_event(h, CUPTI_CBID_RESOURCE_MODULE_LOADED, 1, &image);
}

/// CUPTI's resource callback for module `id` with `image`.
fn module_event(h: &Harness, cbid: u32, id: u32, image: &[u8]) {
    let module = CUpti_ModuleResourceData {
        moduleId: id,
        cubinSize: image.len(),
        pCubin: image.as_ptr().cast(),
    };
    let data = CUpti_ResourceData {
        context: CTX as CUcontext,
        resourceHandle: std::ptr::null_mut(),
        resourceDescriptor: (&module as *const CUpti_ModuleResourceData)
            .cast_mut()
            .cast(),
    };
    h.cb(
        CUPTI_CB_DOMAIN_RESOURCE,
        cbid,
        (&data as *const CUpti_ResourceData).cast(),
    );
}

#[test]
fn a_device_variable_of_the_kernels_module_is_restored_between_passes() {
    let h = harness(3, quick());
    h.obtain_function(&BUMP);
    load_module_with_counter(&h);
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 1, "one execution's worth");
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(o.snapshot_bytes, 4);
}

#[test]
fn a_module_loaded_lazily_under_the_backends_guard_is_still_the_applications() {
    // With lazy loading the application's module is loaded when the backend first asks for a
    // kernel's function (under its guard): its variables must still be captured.
    let h = harness(3, quick());
    h.obtain_function(&BUMP);
    {
        let _g = Guard::new();
        load_module_with_counter(&h);
    }
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 1, "one execution's worth");
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.snapshot_bytes), (OutcomeKind::Replayed, 4));
}

#[test]
fn the_backends_own_module_stays_out_of_the_variable_scan() {
    // CUPTI may hand the compare kernel's module over as PTX text: not an unreadable image of
    // the application's.
    let h = harness(3, quick());
    h.obtain_function(&BUMP);
    load_module_with_counter(&h);
    globals::own_module(|| {
        module_event(
            &h,
            CUPTI_CBID_RESOURCE_MODULE_LOADED,
            5,
            b".version 7.0 (PTX)",
        )
    });
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 1);
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
}

#[test]
fn while_a_module_whose_image_cannot_be_read_is_loaded_kernels_are_not_replayed() {
    // Its __device__ variables are unknown: a replay could repeat their writes.
    let h = harness(3, quick());
    h.obtain_function(&BUMP);
    let addr = fake_alloc(4);
    gpu().globals.push((0xabc0, "counter".into(), addr, 4));
    module_event(&h, CUPTI_CBID_RESOURCE_MODULE_LOADED, 9, b"not a cubin");
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 1, "one execution");
    let o = &h.outcomes()[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::SymbolsUnavailable)
    );
    // Once that module is unloaded, replay resumes (the handle caches start over).
    module_event(
        &h,
        CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING,
        9,
        b"not a cubin",
    );
    load_module_with_counter(&h);
    h.obtain_function(&BUMP);
    let before = counter();
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), before + 1);
    assert_eq!(h.outcomes()[1].1.kind, OutcomeKind::Replayed);
}

#[test]
fn a_cukernel_is_queried_through_its_function_in_the_context() {
    let h = harness(3, quick());
    load_module_with_counter(&h);
    h.obtain_kernel(&KERNEL_BUMP);
    let mut none: [*mut c_void; 0] = [];
    h.launch(&KERNEL_BUMP, &mut none, 0);
    assert_eq!(counter(), 1);
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(h.outcomes()[0].0.group_segment_size, 512 + 1024);
}

/// A handle the fake driver answers for neither as a CUkernel nor as a CUfunction (no
/// module), running BUMP.
static ANONYMOUS_BUMP: FakeKernel = FakeKernel {
    run: bump,
    module: 0,
};

#[test]
fn a_kernel_handle_never_obtained_is_asked_of_the_driver_as_a_kernel_then_as_a_function() {
    let h = harness(3, quick());
    load_module_with_counter(&h);
    let mut none: [*mut c_void; 0] = [];
    // A CUkernel nobody saw obtained: its function in the context answers.
    h.launch(&KERNEL_BUMP, &mut none, 0);
    assert_eq!(counter(), 1, "one execution");
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(h.outcomes()[0].0.group_segment_size, 512 + 1024);
    // A CUfunction nobody saw obtained: its module answers.
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 2);
    assert_eq!(h.outcomes()[1].1.kind, OutcomeKind::Replayed);
    // A handle the driver answers for as neither: not replayed while variables exist.
    h.launch(&ANONYMOUS_BUMP, &mut none, 0);
    assert_eq!(counter(), 3, "ran once");
    assert_eq!(
        h.outcomes()[2].1.kind,
        OutcomeKind::Declined(DeclineReason::SymbolsUnavailable)
    );
    assert_eq!(
        h.outcomes()[2].0.group_segment_size,
        512,
        "nothing known of the handle"
    );
}

#[test]
fn a_variable_the_application_looked_up_is_snapshotted() {
    let h = harness(3, quick());
    let addr = fake_alloc(4);
    gpu().globals.push((0xabc0, "counter".into(), addr, 4));
    let (mut out, mut size): (CUdeviceptr, usize) = (0, 0);
    let params = cuModuleGetGlobal_v2_params {
        dptr: &mut out,
        bytes: &mut size,
        hmod: 0xabc0 as CUmodule,
        name: c"counter".as_ptr(),
    };
    h.call(
        GET_GLOBAL,
        c"cuModuleGetGlobal_v2",
        (&params as *const cuModuleGetGlobal_v2_params).cast(),
        c"",
        || {
            // SAFETY: forwarded to the fake.
            unsafe {
                module_get_global(&mut out, &mut size, 0xabc0 as CUmodule, c"counter".as_ptr())
            }
        },
    );
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 1);
}

/// `cuModuleGetGlobal` of the application for the fake's `counter` (module 0xabc0).
fn look_up_counter(h: &Harness) {
    let (mut out, mut size): (CUdeviceptr, usize) = (0, 0);
    let params = cuModuleGetGlobal_v2_params {
        dptr: &mut out,
        bytes: &mut size,
        hmod: 0xabc0 as CUmodule,
        name: c"counter".as_ptr(),
    };
    h.call(
        GET_GLOBAL,
        c"cuModuleGetGlobal_v2",
        (&params as *const cuModuleGetGlobal_v2_params).cast(),
        c"",
        || {
            // SAFETY: forwarded to the fake.
            unsafe {
                module_get_global(&mut out, &mut size, 0xabc0 as CUmodule, c"counter".as_ptr())
            }
        },
    );
}

/// `cuModuleUnload(module)` of the application, with CUPTI's resource callback inside it.
fn unload_module(h: &Harness, module: usize, id: u32) {
    let params = cuModuleUnload_params {
        hmod: module as CUmodule,
    };
    h.call(
        MODULE_UNLOAD,
        c"cuModuleUnload",
        (&params as *const cuModuleUnload_params).cast(),
        c"",
        || {
            module_event(h, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING, id, b"");
            CUDA_SUCCESS
        },
    );
}

#[test]
fn a_kernel_of_a_module_with_a_managed_variable_runs_once_and_the_variable_is_not_captured() {
    // `__managed__ unsigned counter;`: the host writes it directly, at any time, so a restore
    // of it could undo the host's write. The module's kernels may write it by name.
    let h = harness(3, quick());
    h.obtain_function(&BUMP);
    load_module_with_counter(&h);
    let addr = gpu().globals[0].2;
    gpu().pointer_managed.push(addr);
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 1, "one execution");
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::HostMemory));
    assert_eq!(o.snapshot_bytes, 0);
    assert!(
        o.window_time > Duration::ZERO,
        "the first launch found out in its window"
    );
    // Known from then on: the next launch declines before any window (and its drain).
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 2, "one execution");
    let o = &h.outcomes()[1].1;
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::HostMemory));
    assert_eq!(o.window_time, Duration::ZERO, "declined at the gate: {o:?}");
}

fn bump_slot(_: *mut *mut c_void) {
    let addr = gpu()
        .globals
        .iter()
        .find(|g| g.1 == "slot")
        .map(|g| g.2)
        .expect("slot");
    // SAFETY: a live fake allocation of 8 bytes holding the address of a live u32.
    unsafe { *(*(addr as *const usize) as *mut u32) += 1 };
}

/// `__device__ unsigned* slot;` and a kernel `*slot += 1` (no arguments).
static BUMP_SLOT: FakeKernel = FakeKernel {
    run: bump_slot,
    module: 0xabc0,
};

#[test]
fn a_kernel_writing_pinned_memory_through_a_pointer_stored_in_a_device_variable_runs_once() {
    // The arguments name nothing: the pointer to the pinned counter is stored in a
    // `__device__` variable, which the window reads before the first pass.
    let h = harness(3, quick());
    h.obtain_function(&BUMP_SLOT);
    let (pinned, _) = host_alloc(&h, 16);
    let addr = fake_alloc(8);
    // SAFETY: our 8-byte fake allocation.
    unsafe { *(addr as *mut usize) = pinned + 4 };
    gpu().globals.push((0xabc0, "slot".into(), addr, 8));
    let image = globals::tests::elf(&[(".nv.global", 8)], &[("slot", 1, 4, 8)]);
    module_event(&h, CUPTI_CBID_RESOURCE_MODULE_LOADED, 1, &image);
    let value = || {
        // SAFETY: the pinned fake allocation's second word.
        unsafe { *((pinned + 4) as *const u32) }
    };
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP_SLOT, &mut none, 0);
    assert_eq!(value(), 1, "incremented once, not once per pass");
    let o = &h.outcomes()[0].1;
    assert_eq!(
        o.kind,
        OutcomeKind::Declined(DeclineReason::HostMemoryWritten)
    );
    assert_eq!(o.passes, 1);
    // A pointer stored there to managed memory, which cannot be watched: declined before the
    // first pass.
    let managed = fake_alloc(4);
    h.be.host_memory
        .write()
        .insert(managed, 4, memory::Kind::Managed, CTX);
    // SAFETY: as above.
    unsafe { *(addr as *mut usize) = managed };
    h.launch(&BUMP_SLOT, &mut none, 0);
    // SAFETY: the managed fake allocation.
    assert_eq!(unsafe { *(managed as *const u32) }, 1, "one execution");
    let o = &h.outcomes()[1].1;
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::HostMemory));
    assert_eq!(
        (o.passes, o.pass_times.len()),
        (1, 0),
        "the ordinary run: {o:?}"
    );
}

#[test]
fn a_managed_variable_the_application_looked_up_is_managed_memory_until_its_module_goes() {
    let h = harness(3, quick());
    h.obtain_function(&memory_tests::WRITE_SURFACE);
    let addr = fake_alloc(4);
    gpu().globals.push((0xabc0, "counter".into(), addr, 4));
    gpu().pointer_managed.push(addr);
    look_up_counter(&h);
    assert_eq!(
        h.be.host_memory.read().containing(addr),
        Some(memory::Kind::Managed)
    );
    // A kernel given its address runs once; it is in no snapshot of other launches.
    memory_tests::launch_write_surface(&h, addr as CUdeviceptr, 0);
    assert_eq!(
        h.outcomes().last().unwrap().1.kind,
        OutcomeKind::Declined(DeclineReason::HostMemory)
    );
    assert_eq!(counter(), 1, "one execution");
    let buf = Buffer::new(&h, 1);
    memory_tests::launch_write_surface(&h, buf.ptr, 0);
    let o = h.outcomes().last().unwrap().1.clone();
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(
        o.snapshot_bytes, 4,
        "the buffer only, not the managed variable"
    );
    unload_module(&h, 0xabc0, 1);
    assert_eq!(
        h.be.host_memory.read().containing(addr),
        None,
        "gone with its module"
    );
}

#[test]
fn unloading_another_module_keeps_the_variables_the_application_looked_up() {
    let h = harness(3, quick());
    let addr = fake_alloc(4);
    gpu().globals.push((0xabc0, "counter".into(), addr, 4));
    look_up_counter(&h);
    unload_module(&h, 0xdef0, 5);
    h.obtain_function(&BUMP);
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(
        counter(),
        1,
        "the looked-up variable was restored between passes"
    );
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.snapshot_bytes), (OutcomeKind::Replayed, 4));
    // Its own module's unload forgets it.
    unload_module(&h, 0xabc0, 1);
    let ctx = h.be.contexts.read();
    assert!(ctx.values().all(|c| c.requested_globals.lock().is_empty()));
}

#[test]
fn unloading_a_module_forgets_its_own_kernel_handles_only() {
    static OTHER: FakeKernel = FakeKernel {
        run: add_one,
        module: 0xdef0,
    };
    let h = harness(3, quick());
    let addr = fake_alloc(4);
    gpu().globals.push((0xabc0, "counter".into(), addr, 4));
    h.obtain_function(&BUMP);
    h.obtain_function(&OTHER);
    look_up_counter(&h);
    let mut none: [*mut c_void; 0] = [];
    h.launch(&BUMP, &mut none, 0);
    // Another module's cuModuleUnload: BUMP's handle, facts and module are still known, so
    // its next launch is replayed with its module's variable in the snapshot (before, every
    // handle was forgotten: declined `symbols_unavailable`).
    unload_module(&h, OTHER.module, 5);
    h.launch(&BUMP, &mut none, 0);
    assert_eq!(counter(), 2, "one execution per launch");
    let kinds: Vec<_> = h.outcomes().iter().map(|(_, o)| o.kind).collect();
    assert_eq!(kinds, vec![OutcomeKind::Replayed; 2]);
    assert!(
        h.be.handles
            .read()
            .functions
            .contains_key(&(&BUMP as *const FakeKernel as usize))
    );
    assert!(
        !h.be
            .handles
            .read()
            .functions
            .contains_key(&(&OTHER as *const FakeKernel as usize))
    );
    // An unload CUPTI reports outside the application's cuModuleUnload (a library's module, the
    // runtime's own): which module it is is not known, so every handle goes.
    module_event(&h, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING, 9, b"");
    assert!(h.be.handles.read().functions.is_empty());
    assert!(h.be.kernels.read().is_empty());
}

#[test]
fn allocations_are_tracked_and_frees_forget_them() {
    let h = harness(3, quick());
    let a = h.alloc(100);
    let b = h.alloc(50);
    let agent = crate::AgentId(CTX as u64);
    assert_eq!(h.be.inventory.owned_by(agent).len(), 2);
    h.free(a);
    let left = h.be.inventory.owned_by(agent);
    assert_eq!(left.len(), 1);
    assert_eq!((left[0].base, left[0].size), (b, 50));
}

/// Runs a 3-pass window of a slow kernel (60 ms per pass) and, from another thread once the
/// second pass is running, the driver call `call` makes; `call` gets whether the window is
/// still running (fewer than 3 passes done) when the call's own body runs, and must return
/// it. Asserts the call waited for the window and the application saw one execution.
fn assert_held_off_a_window(call: impl Fn(&Harness, &dyn Fn() -> bool) -> bool + Sync) {
    let (ran_inside, values) = call_during_a_window(false, |h, _, inside| call(h, inside));
    assert!(!ran_inside, "the call ran inside the window");
    assert_eq!(values, vec![1; 4]);
}

/// Runs `call` on another thread while a replay window of `CTX` (3 passes of a slow kernel
/// over a buffer of 4 u32, whose address `call` gets) is in flight; returns what `call`
/// returned (whether it ran inside the window, as the `inside` it is given says) and the
/// buffer's values once both are done. With `other_context`, context `CTX_B` has an
/// allocation and has launched [`NOTING`] once (its first allocation loads the backend's
/// module, and a kernel's first launch queries its module: both wait for windows in flight)
/// before the window starts.
fn call_during_a_window(
    other_context: bool,
    call: impl Fn(&Harness, usize, &dyn Fn() -> bool) -> bool + Sync,
) -> (bool, Vec<u32>) {
    let h = harness(
        3,
        Settings {
            lock: Duration::from_secs(5),
            pass: Duration::from_secs(5),
            ..quick()
        },
    );
    SLOW_RUNS.store(0, Ordering::SeqCst);
    if other_context {
        // With two contexts, a kernel whose parameters are unknown may reach the other's
        // memory (it declines): this one's are known.
        h.obtain_function(&SLOW);
        h.obtain_function(&NOTING);
        let own = h.alloc_in(CTX_B, 64);
        // B's first launch of NOTING (a kernel's first launch in a context queries its
        // module, which waits for windows in flight), on B's own memory.
        let mut ptr = own as CUdeviceptr;
        let mut n = 4u32;
        let mut args: [*mut c_void; 2] = [
            (&mut ptr as *mut CUdeviceptr).cast(),
            (&mut n as *mut u32).cast(),
        ];
        h.launch_returning_in(CTX_B, &NOTING, &mut args, 0x7700, c"_Z7add_onePji");
        h.settle();
    }
    let mut buf = Buffer::new(&h, 4);
    let addr = buf.ptr as usize;
    let started = Instant::now();
    let ran_inside = std::thread::scope(|s| {
        let other = s.spawn(|| {
            while SLOW_RUNS.load(Ordering::SeqCst) < 2 {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "the window never reached its second pass: {:?}",
                    h.outcomes()
                );
                std::thread::yield_now();
            }
            call(&h, addr, &|| SLOW_RUNS.load(Ordering::SeqCst) != 3)
        });
        let mut args = buf.args();
        h.launch(&SLOW, &mut args, 0);
        other.join().unwrap()
    });
    assert!(started.elapsed() < Duration::from_secs(5));
    (ran_inside, buf.values())
}

/// Runs of [`SLOW`] so far.
static SLOW_RUNS: AtomicU32 = AtomicU32::new(0);

fn slow(args: *mut *mut c_void) {
    SLOW_RUNS.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(60));
    add_one(args);
}

/// ADD_ONE, taking 60 ms a run.
static SLOW: FakeKernel = FakeKernel {
    run: slow,
    module: 0,
};

/// What [`SLOW_RUNS`] was when [`NOTING`] last ran.
static NOTED_SLOW_RUNS: AtomicU32 = AtomicU32::new(0);

fn noting(args: *mut *mut c_void) {
    NOTED_SLOW_RUNS.store(SLOW_RUNS.load(Ordering::SeqCst), Ordering::SeqCst);
    add_one(args);
}

/// ADD_ONE, noting how far a window of [`SLOW`] was when it ran.
static NOTING: FakeKernel = FakeKernel {
    run: noting,
    module: 0,
};

/// A second context of the fake process.
const CTX_B: usize = 0xc1_0000;

/// `cuMemcpyHtoDAsync_v2` of 16 bytes into `dst` on `stream`, made in context `ctx`;
/// `body` is the driver's part.
fn copy_in(h: &Harness, ctx: usize, dst: usize, stream: usize, body: impl FnOnce()) {
    let src = [0u8; 16];
    let p = [dst as u64, src.as_ptr() as u64, 16, stream as u64];
    h.call_in(
        ctx,
        MEMCPY,
        c"cuMemcpyHtoDAsync_v2",
        p.as_ptr().cast(),
        c"",
        || {
            body();
            CUDA_SUCCESS
        },
    );
}

#[test]
fn a_copy_of_another_context_into_this_contexts_memory_waits_for_its_window() {
    let (ran_inside, values) = call_during_a_window(true, |h, dst, inside| {
        let mut ran_inside = false;
        copy_in(h, CTX_B, dst, 0x7700, || ran_inside = inside());
        ran_inside
    });
    assert!(
        !ran_inside,
        "the copy into the window's memory ran inside it"
    );
    assert_eq!(values, vec![1; 4]);
}

/// The call `cbid` (named `name`: a copy, or a launch) with the parameter words `p`, made in
/// context `ctx`; `body` is the driver's part.
fn copy_words(h: &Harness, ctx: usize, (cbid, name): (u32, &CStr), p: &[u64], body: impl FnOnce()) {
    h.call_in(ctx, cbid, name, p.as_ptr().cast(), c"", || {
        body();
        CUDA_SUCCESS
    });
}

/// `cuMemcpyDtoDAsync_v2`, for [`copy_words`].
const DTOD: (u32, &CStr) = (COPY_DTOD, c"cuMemcpyDtoDAsync_v2");

/// B's own allocation (made by [`call_during_a_window`] or [`two_contexts_b_stuck`]).
fn memory_of_b(h: &Harness) -> usize {
    h.be.inventory
        .owned_by(crate::AgentId(CTX_B as u64))
        .first()
        .map(|a| a.base)
        .expect("B's allocation")
}

#[test]
fn copies_of_another_context_reading_this_contexts_memory_wait_for_its_window() {
    // A copy in B whose source is the window's memory would read a pass's or a restore's
    // state: B's DtoD, DtoH and peer copies from it are held until the window ends.
    // Each copy's parameter words from (B's buffer, the window's buffer).
    type Words = fn(u64, u64) -> Vec<u64>;
    let copies: [((u32, &CStr), Words); 3] = [
        (DTOD, |own, src| vec![own, src, 16, 0x7700]),
        ((COPY_DTOH, c"cuMemcpyDtoHAsync_v2"), |_, src| {
            vec![0x5_0000, src, 16, 0x7700]
        }),
        ((COPY_PEER, c"cuMemcpyPeerAsync"), |own, src| {
            vec![own, CTX_B as u64, src, CTX as u64, 16, 0x7700]
        }),
    ];
    for (name, words) in copies {
        let (ran_inside, values) = call_during_a_window(true, |h, src, inside| {
            let p = words(memory_of_b(h) as u64, src as u64);
            let mut ran_inside = false;
            copy_words(h, CTX_B, name, &p, || ran_inside = inside());
            ran_inside
        });
        assert!(
            !ran_inside,
            "{:?} from the window's memory ran inside it",
            name.1
        );
        assert_eq!(values, vec![1; 4]);
    }
}

#[test]
fn a_multi_device_launch_of_another_context_waits_for_this_contexts_window() {
    // Its launch list names streams of several contexts: every context owning memory is held.
    let (ran_inside, values) = call_during_a_window(true, |h, _, inside| {
        let list = [0u64; 7];
        let p = [list.as_ptr() as u64, 1];
        let mut ran_inside = false;
        let call = (MULTI_DEVICE, c"cuLaunchCooperativeKernelMultiDevice");
        copy_words(h, CTX_B, call, &p, || ran_inside = inside());
        ran_inside
    });
    assert!(!ran_inside, "the multi-device launch ran inside the window");
    assert_eq!(values, vec![1; 4]);
}

#[test]
fn a_copy_of_another_context_between_its_own_buffers_does_not_wait_for_this_contexts_window() {
    // The control of the test above: a source of B's own is not the window's memory.
    let (ran_inside, values) = call_during_a_window(true, |h, dst, inside| {
        let own = memory_of_b(h) as u64;
        assert_ne!(own as usize, dst);
        let mut ran_inside = false;
        copy_words(h, CTX_B, DTOD, &[own + 32, own, 16, 0x7700], || {
            ran_inside = inside()
        });
        ran_inside
    });
    assert!(
        ran_inside,
        "a copy within another context was held off this one's window"
    );
    assert_eq!(values, vec![1; 4]);
}

#[test]
fn a_drain_waits_for_another_contexts_copy_from_its_memory() {
    // B's copy out of this context's buffer is still running (its stream never finishes)
    // when this context's next launch comes: a restore would change what it reads.
    let (h, mut buf, own) = two_contexts_b_stuck();
    copy_words(&h, CTX_B, DTOD, &[own as u64, buf.ptr, 16, 0x7700], || {});
    launch_once_past_a_drain_timeout(&h, &mut buf, "the window started under the other's read");
}

/// Launches ADD_ONE over `buf` (8 zeros so far) on stream 0x5000: its window must decline
/// `drain_timeout` (`why` says what else it would have done), and the kernel ran once.
fn launch_once_past_a_drain_timeout(h: &Harness, buf: &mut Buffer, why: &str) {
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    assert_eq!(
        h.outcomes()[0].1.kind,
        OutcomeKind::Declined(DeclineReason::DrainTimeout),
        "{why}"
    );
    assert_eq!(buf.values(), vec![1; 8], "one execution");
}

#[test]
fn a_copy_of_another_context_into_its_own_memory_does_not_wait_for_this_contexts_window() {
    // The control of the test above: only work that reaches the window's memory is held.
    let (ran_inside, values) = call_during_a_window(true, |h, dst, inside| {
        let own = memory_of_b(h);
        assert_ne!(own, dst);
        let mut ran_inside = false;
        copy_in(h, CTX_B, own, 0x7700, || ran_inside = inside());
        ran_inside
    });
    assert!(
        ran_inside,
        "a copy within another context was held off this one's window"
    );
    assert_eq!(values, vec![1; 4]);
}

/// A harness with two contexts (ADD_ONE's parameters known, `CTX_B` owning an allocation, at
/// the address returned), a buffer of 8 u32 of `CTX`, and `CTX_B`'s stream 0x7700 stuck.
fn two_contexts_b_stuck() -> (Harness, Buffer, usize) {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let own = h.alloc_in(CTX_B, 64);
    let buf = Buffer::new(&h, 8);
    gpu().stuck_streams.insert(0x7700);
    (h, buf, own)
}

#[test]
fn a_drain_waits_for_another_contexts_copy_into_its_memory() {
    // Context B's copy into this context's buffer is still running (its stream never
    // finishes) when this context's next launch comes.
    let (h, mut buf, _) = two_contexts_b_stuck();
    copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {});
    launch_once_past_a_drain_timeout(&h, &mut buf, "a restore could undo the other's copy");
    // The copy finishes: the next launch is replayed, and the event goes back to B.
    gpu().stuck_streams.remove(&0x7700);
    gpu().stuck_events.clear();
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    assert_eq!(h.outcomes()[1].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![2; 8], "two executions in all");
    assert!(h.be.ctx(CTX).foreign.lock().is_empty());
    assert_eq!(h.be.ctx(CTX_B).private.lock().plain_events.len(), 1);
}

/// A drain deadline long enough that a decline at once cannot be mistaken for waiting it
/// (and the thread inside its launch call not given way to before it).
fn long_drain() -> Settings {
    Settings {
        drain: Duration::from_secs(2),
        yield_after: Duration::from_secs(10),
        ..quick()
    }
}

/// Launches `add_one` on stream 0x5000 of `h` twice more after a drain timed out on work
/// that never finishes: each declines `drain_timeout` without waiting the drain deadline
/// again.
fn later_launches_decline_at_once(h: &Harness, buf: &mut Buffer) {
    for n in 1..=2 {
        let mut args = buf.args();
        let started = Instant::now();
        h.launch(&ADD_ONE, &mut args, 0x5000);
        h.settle();
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "launch {} waited {took:?}: the drain deadline again",
            n + 1
        );
        assert_eq!(
            h.outcomes()[n].1.kind,
            OutcomeKind::Declined(DeclineReason::DrainTimeout)
        );
    }
    assert_eq!(buf.values(), vec![3; 8], "three executions");
}

/// The stuck work on `stream` finishes: the fourth launch over `buf` is replayed.
fn once_stream_finishes_the_next_launch_replays(h: &Harness, buf: &mut Buffer, stream: usize) {
    gpu().stuck_streams.remove(&stream);
    gpu().stuck_events.clear();
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    assert_eq!(h.outcomes()[3].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![4; 8]);
}

#[test]
fn another_contexts_work_that_does_not_finish_costs_one_drain_deadline() {
    // Context B's copy into this context's buffer never finishes: the first drain waits its
    // deadline for it, the next ones decline at once while it runs.
    let h = harness(3, long_drain());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let _own = h.alloc_in(CTX_B, 64);
    gpu().stuck_streams.insert(0x7700);
    copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {});
    launch_once_past_a_drain_timeout(&h, &mut buf, "a restore could undo the other's copy");
    later_launches_decline_at_once(&h, &mut buf);
    // The copy finishes: the next launch is replayed, and the event goes back to B.
    once_stream_finishes_the_next_launch_replays(&h, &mut buf, 0x7700);
    assert!(h.be.ctx(CTX).foreign.lock().is_empty());
    assert_eq!(h.be.ctx(CTX_B).private.lock().plain_events.len(), 1);
}

#[test]
fn work_left_on_a_destroyed_stream_that_does_not_finish_costs_one_drain_deadline() {
    let h = harness(3, long_drain());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    // The application destroys a stream whose work never finishes: an event of ours behind it.
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_CREATED, 0x6000);
    gpu().stuck_streams.insert(0x6000);
    stream_event(&h, CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, 0x6000);
    assert_eq!(h.be.ctx(CTX).retired.lock().len(), 1);
    launch_once_past_a_drain_timeout(&h, &mut buf, "the destroyed stream's work still runs");
    later_launches_decline_at_once(&h, &mut buf);
    once_stream_finishes_the_next_launch_replays(&h, &mut buf, 0x6000);
    assert!(h.be.ctx(CTX).retired.lock().is_empty());
}

#[test]
fn another_contexts_copy_without_an_event_is_waited_for_at_submission() {
    // No event can be recorded behind B's copy into this context's buffer: the copy's exit
    // waits for B's stream (it finishes once queried), and this context's window runs.
    let (h, mut buf, _) = two_contexts_b_stuck();
    gpu().unrecordable_streams.insert(0x7700);
    gpu().on_query = Some((
        0x7700,
        Box::new(|| {
            gpu().stuck_streams.remove(&0x7700);
        }),
    ));
    copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {});
    assert!(
        gpu().on_query.is_none(),
        "the copy's stream was not waited for at submission"
    );
    assert!(h.be.ctx(CTX).foreign.lock().is_empty());
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
}

#[test]
fn another_contexts_copy_without_an_event_that_never_finishes_stops_this_contexts_replay() {
    // No event behind B's copy into this context's buffer, and B's stream never finishes: no
    // drain could tell when the copy ends, so this context's windows decline.
    let (h, mut buf, _) = two_contexts_b_stuck();
    gpu().unrecordable_streams.insert(0x7700);
    copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {});
    for _ in 0..2 {
        let mut args = buf.args();
        h.launch(&ADD_ONE, &mut args, 0x5000);
        h.settle();
    }
    let o = h.outcomes();
    assert_eq!(o.len(), 2);
    for (_, o) in &o {
        assert_eq!(
            o.kind,
            OutcomeKind::Declined(DeclineReason::QueueNotDrainable),
            "a restore could undo the unfenced copy"
        );
    }
    assert_eq!(buf.values(), vec![2; 8], "one execution each");
    // Another context's windows are unaffected.
    assert!(!h.be.ctx(CTX_B).undrainable.any());
}

#[test]
fn a_context_destroyed_during_another_contexts_copy_into_its_memory_is_left_destroyed() {
    // B's copy into A's buffer holds A's reader; A is destroyed while the copy is in the
    // driver. The exit callback releases the reader it took, on the context it took it from,
    // and neither brings A back nor leaves an event for it.
    let h = harness(3, quick());
    h.alloc_in(CTX_B, 64);
    let buf = Buffer::new(&h, 8);
    let held = h.be.ctx(CTX);
    copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {
        h.destroy_context(CTX)
    });
    assert!(
        !h.be.contexts.read().contains_key(&CTX),
        "the destroyed context came back"
    );
    assert!(held.foreign.lock().is_empty());
    // Its lock was released: a writer gets it at once.
    assert!(held.lock.write_for(Duration::from_millis(10)).is_some());
}

#[test]
fn a_drain_does_not_wait_for_an_event_of_a_destroyed_context() {
    // An event behind another context's work whose context is gone (destroyed after the
    // event was listed, e.g. while a drain had the list out): it is neither queried nor waited
    // for, so it cannot hold the drain.
    let (h, mut buf, _) = two_contexts_b_stuck();
    gpu().stuck_streams.clear();
    gpu().stuck_events.insert(0xe7e7);
    h.be.ctx(CTX).foreign.lock().push((0xe7e7, 0xdead_0000));
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    gpu().stuck_events.clear();
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
}

#[test]
fn events_behind_finished_foreign_work_go_back_without_a_window() {
    // B copies into A's buffer again and again while A never launches: the events behind
    // the finished copies return to B's pool instead of piling up on A.
    let h = harness(3, quick());
    h.alloc_in(CTX_B, 64);
    let buf = Buffer::new(&h, 8);
    for _ in 0..10 {
        copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {});
    }
    assert_eq!(
        h.be.ctx(CTX).foreign.lock().len(),
        1,
        "only the last copy's event"
    );
    assert_eq!(h.be.ctx(CTX_B).private.lock().plain_events.len(), 1);
    // Work still in flight stays listed.
    gpu().stuck_streams.insert(0x7700);
    copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {});
    copy_in(&h, CTX_B, buf.ptr as usize, 0x7700, || {});
    assert_eq!(h.be.ctx(CTX).foreign.lock().len(), 2);
    gpu().stuck_streams.remove(&0x7700);
    gpu().stuck_events.clear();
}

#[test]
fn a_copy_of_another_context_into_its_own_memory_leaves_this_contexts_drain_alone() {
    let (h, mut buf, own) = two_contexts_b_stuck();
    copy_in(&h, CTX_B, own, 0x7700, || {});
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    h.settle();
    gpu().stuck_streams.remove(&0x7700);
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
}

#[test]
fn a_kernel_of_another_context_given_this_contexts_memory_runs_after_its_window() {
    // Context B's kernel adds one to the window's buffer. Run inside the window, a restore
    // between passes would undo it; held off, it runs after the window: one execution each.
    let (_, values) = call_during_a_window(true, |h, dst, _| {
        let mut ptr = dst as CUdeviceptr;
        let mut n = 4u32;
        let mut args: [*mut c_void; 2] = [
            (&mut ptr as *mut CUdeviceptr).cast(),
            (&mut n as *mut u32).cast(),
        ];
        NOTED_SLOW_RUNS.store(0, Ordering::SeqCst);
        let r = h.launch_returning_in(CTX_B, &NOTING, &mut args, 0x7700, c"_Z7add_onePji");
        assert_eq!(r, CUDA_SUCCESS);
        false
    });
    assert_eq!(
        NOTED_SLOW_RUNS.load(Ordering::SeqCst),
        3,
        "the other context's kernel ran before the window's last pass"
    );
    assert_eq!(
        values,
        vec![2; 4],
        "the other context's kernel was undone by a restore"
    );
}

#[test]
fn a_drain_waits_for_a_kernel_of_another_context_given_its_memory() {
    let (h, mut buf, _) = two_contexts_b_stuck();
    let mut args = buf.args();
    h.launch_returning_in(CTX_B, &ADD_ONE, &mut args, 0x7700, c"_Z7add_onePji");
    h.settle();
    assert_eq!(
        h.outcomes()[0].1.kind,
        OutcomeKind::Declined(DeclineReason::PeerMemory)
    );
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    assert_eq!(
        h.outcomes()[1].1.kind,
        OutcomeKind::Declined(DeclineReason::DrainTimeout)
    );
    assert_eq!(buf.values(), vec![2; 8], "one execution of each");
    gpu().stuck_streams.remove(&0x7700);
    gpu().stuck_events.clear();
}

#[test]
fn stream_work_waits_for_a_window_on_its_context() {
    assert_held_off_a_window(|h, inside| {
        // cuMemcpyHtoDAsync_v2's (dstDevice, srcHost, ByteCount, hStream): the legacy stream.
        let p = [0u64; 4];
        let mut ran_inside = false;
        h.call(
            MEMCPY,
            c"cuMemcpyHtoDAsync_v2",
            p.as_ptr().cast(),
            c"",
            || {
                ran_inside = inside();
                CUDA_SUCCESS
            },
        );
        ran_inside
    });
}

#[test]
fn a_module_unload_waits_for_a_window_on_its_context() {
    assert_held_off_a_window(|h, inside| {
        let params = cuModuleUnload_params {
            hmod: 0xdef0 as CUmodule,
        };
        let mut ran_inside = false;
        h.call(
            MODULE_UNLOAD,
            c"cuModuleUnload",
            (&params as *const cuModuleUnload_params).cast(),
            c"",
            || {
                ran_inside = inside();
                CUDA_SUCCESS
            },
        );
        ran_inside
    });
}

#[test]
fn a_relaunch_leaves_out_attributes_that_record_application_events() {
    let mut attrs = [CUlaunchAttribute::default(); 3];
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[1].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    attrs[2].id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
    let config = CUlaunchConfig {
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 1,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: std::ptr::null_mut(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: 3,
    };
    // SAFETY: three live attributes.
    let kept = unsafe { super::params::relaunch_attributes(&config) };
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].id, CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
}

#[test]
fn launch_kernel_ex_is_replayed_from_its_configuration() {
    let h = harness(2, quick());
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    let mut attrs = [CUlaunchAttribute::default(); 1];
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    let config = CUlaunchConfig {
        gridDimX: 2,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 32,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: 0x5000 as CUstream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: 1,
    };
    let f: CUfunction = (&ADD_ONE as *const FakeKernel).cast_mut().cast();
    let params = cuLaunchKernelEx_params {
        config: &config,
        f,
        kernelParams: args.as_mut_ptr(),
        extra: std::ptr::null_mut(),
    };
    let argp = params.kernelParams;
    h.call(
        LAUNCH_EX,
        c"cuLaunchKernelEx",
        (&params as *const cuLaunchKernelEx_params).cast(),
        c"k",
        || {
            run_kernel(f, argp, 0x5000 as CUstream);
            CUDA_SUCCESS
        },
    );
    assert_eq!(buf.values(), vec![1; 8]);
    assert_eq!(gpu().relaunches, 1);
    let (info, o) = &h.outcomes()[0];
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(info.grid, [64, 1, 1]);
    assert_eq!(info.queue, crate::QueueId(0x5000));
}

#[test]
fn launches_from_the_companion_or_with_the_backend_off_pass_through() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 4);
    h.be.active.store(false, Ordering::Release);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    h.be.active.store(true, Ordering::Release);
    {
        let _g = Guard::new();
        let mut args = buf.args();
        h.launch(&ADD_ONE, &mut args, 0);
    }
    assert_eq!(h.launches(), 2);
    assert!(h.outcomes().is_empty());
}

#[test]
fn callbacks_are_classified_by_name() {
    assert_eq!(
        classify("cuLaunchKernel_ptsz"),
        Some(Api::Launch(LaunchApi::Kernel { ptsz: true }))
    );
    assert_eq!(
        classify("cuLaunchKernelEx"),
        Some(Api::Launch(LaunchApi::KernelEx { ptsz: false }))
    );
    assert_eq!(classify("cuMemAllocAsync_ptsz"), Some(Api::MemAllocAsync));
    assert_eq!(
        classify("cuMemcpyDtoDAsync_v2_ptsz"),
        Some(Api::StreamWork(Writes::Copy))
    );
    assert_eq!(
        classify("cuMemsetD32_v2"),
        Some(Api::StreamWork(Writes::Fill { unit: 4 }))
    );
    assert_eq!(
        classify("cuMemcpyDtoH_v2_ptds"),
        Some(Api::StreamWork(Writes::ToHost))
    );
    assert_eq!(
        classify("cuMemsetD8"),
        Some(Api::StreamWork(Writes::Unknown)),
        "32-bit legacy pointers are not decoded"
    );
    assert_eq!(classify("cuGraphLaunch_ptsz"), Some(Api::GraphLaunch));
    for query in ["cuStreamQuery", "cuStreamQuery_ptsz", "cuEventQuery"] {
        assert_eq!(
            classify(query),
            Some(Api::Observe { wait: false }),
            "{query}"
        );
    }
    for sync in [
        "cuStreamSynchronize_ptsz",
        "cuEventSynchronize",
        "cuCtxSynchronize",
        "cuCtxSynchronize_v2",
    ] {
        assert_eq!(classify(sync), Some(Api::Observe { wait: true }), "{sync}");
    }
    assert_eq!(classify("cuEventRecord"), Some(Api::RunBreak));
    for loads in [
        "cuModuleLoadData",
        "cuLibraryLoadData",
        "cuLibraryGetModule",
        "cuFuncGetAttribute",
        "cuKernelGetAttribute",
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    ] {
        assert_eq!(classify(loads), Some(Api::Loads), "{loads}");
    }
    assert!(Api::KernelGetFunction.may_load() && Api::ModuleGetGlobal.may_load());
    assert!(!Api::StreamWork(Writes::Unknown).may_load() && !Api::MemAlloc.may_load());
    for held in [
        "cuLaunch",
        "cuLaunchGrid",
        "cuLaunchGridAsync",
        "cuLaunchHostFunc",
        "cuLaunchHostFunc_ptsz",
        "cuStreamAddCallback_ptsz",
    ] {
        assert_eq!(
            classify(held),
            Some(Api::StreamWork(Writes::Unknown)),
            "{held}"
        );
    }
    assert_eq!(
        classify("cuLaunchHostFuncV2"),
        None,
        "only the names known today"
    );
    assert_eq!(
        classify("cuMemAlloc"),
        None,
        "the pre-v2 entry point is not traced"
    );
    // Calls that only end runs of launches (`ROCPROF_REPLAY_RUN`): subscribed only then.
    for brk in [
        "cuEventRecord",
        "cuEventRecordWithFlags_ptsz",
        "cuStreamWaitEvent",
        "cuStreamBeginCapture_v2",
        "cuGraphInstantiateWithFlags",
        "cuMemPrefetchAsync_v2",
    ] {
        assert_eq!(classify(brk), Some(Api::RunBreak), "{brk}");
    }
    assert_eq!(classify("cuGraphLaunch"), Some(Api::GraphLaunch));
    assert_eq!(classify("cuStreamIsCapturing"), None);
    let ids = Ids::from_names([
        ("cuLaunchKernel", 300),
        ("cuCtxSynchronize", 5),
        ("cuStreamQuery", 7),
    ]);
    assert_eq!(ids.ids().collect::<Vec<_>>(), vec![5, 7, 300]);
    let ids = ids.without_run_breaks();
    assert_eq!(
        ids.ids().collect::<Vec<_>>(),
        vec![5, 7, 300],
        "queries and synchronizations are subscribed whether or not windows cover runs"
    );
    assert!(ids.has_launches());
    let ids = Ids::from_names([("cuLaunchKernel", 300), ("cuEventRecord", 5)]);
    assert_eq!(
        ids.without_run_breaks().ids().collect::<Vec<_>>(),
        vec![300]
    );
}

/// The application's `cuMemAlloc_v2` of `size` bytes, the driver failing it for lack of
/// memory: the status and the address the application got.
fn failing_alloc(h: &Harness, size: usize) -> (CUresult, usize) {
    failing_alloc_in(h, CTX, size)
}

/// [`failing_alloc`] with context `ctx` current.
fn failing_alloc_in(h: &Harness, ctx: usize, size: usize) -> (CUresult, usize) {
    let mut out: CUdeviceptr = 0;
    let params = cuMemAlloc_v2_params {
        dptr: &mut out,
        bytesize: size,
    };
    let r = h.call_in(
        ctx,
        ALLOC,
        c"cuMemAlloc_v2",
        (&params as *const cuMemAlloc_v2_params).cast(),
        c"",
        || CUDA_ERROR_OUT_OF_MEMORY,
    );
    (r, out as usize)
}

/// A harness whose context's arena holds device memory between windows (one was replayed).
fn harness_with_an_idle_arena() -> (Harness, Buffer) {
    let h = harness(2, quick());
    let mut buf = Buffer::new(&h, 4);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert!(
        h.be.ctx(CTX).arena.lock().device_bytes() > 0,
        "kept between windows"
    );
    (h, buf)
}

#[test]
fn an_application_allocation_failing_for_memory_releases_an_idle_arena_and_is_made_again() {
    let (h, _buf) = harness_with_an_idle_arena();
    let (r, p) = failing_alloc(&h, 1024);
    assert_eq!(h.be.ctx(CTX).arena.lock().device_bytes(), 0);
    assert_eq!(r, CUDA_SUCCESS, "the retry's status is the application's");
    assert!(
        gpu().memory.get(&p).is_some_and(|b| b.len() == 1024),
        "the application got the retry's memory"
    );
    assert!(
        h.be.inventory.origin_of(p).is_some(),
        "the retried allocation is the application's, in the inventory"
    );
}

/// Another context of the process, on the same device as [`CTX`] unless a test says so.
const OTHER_CTX: usize = 0xc1_0000;

#[test]
fn an_allocation_failing_for_memory_releases_another_contexts_idle_arena_on_its_device() {
    let (h, _buf) = harness_with_an_idle_arena();
    gpu().contexts_made_current.clear();
    let (r, p) = failing_alloc_in(&h, OTHER_CTX, 1024);
    assert_eq!(
        r, CUDA_SUCCESS,
        "made again once the other arena was released"
    );
    assert!(gpu().memory.contains_key(&p));
    assert_eq!(h.be.ctx(CTX).arena.lock().device_bytes(), 0);
    assert_eq!(
        gpu().contexts_made_current,
        vec![CTX, OTHER_CTX],
        "freed with its own context current, then the caller's current again"
    );
}

#[test]
fn an_allocation_short_of_memory_releases_another_contexts_idle_arena_before_it_is_made() {
    let (h, _buf) = harness_with_an_idle_arena();
    // Plenty free: another context's allocation leaves the arena alone.
    h.alloc_in(OTHER_CTX, 4096);
    assert!(h.be.ctx(CTX).arena.lock().device_bytes() > 0);
    // Nearly full: the allocation would eat into the reserve.
    gpu().device_free = 1 << 20;
    h.alloc_in(OTHER_CTX, 4096);
    assert_eq!(h.be.ctx(CTX).arena.lock().device_bytes(), 0);
}

/// Whether a `cuMemAlloc` of `size` bytes in `ctx` finds room (its enter callback's view).
fn finds_room(h: &Harness, ctx: usize, size: usize) -> bool {
    let mut out: CUdeviceptr = 0;
    let params = cuMemAlloc_v2_params {
        dptr: &mut out,
        bytesize: size,
    };
    // SAFETY: cuMemAlloc's parameters, as its enter callback gets them.
    unsafe {
        h.be.allocation_finds_room(
            Api::MemAlloc,
            ctx,
            (&params as *const cuMemAlloc_v2_params).cast(),
        )
    }
}

#[test]
fn an_allocation_finds_room_only_where_no_arena_of_the_process_would_be_released_for_it() {
    let (h, _buf) = harness_with_an_idle_arena();
    assert!(finds_room(&h, CTX, 4096), "plenty free");
    assert!(finds_room(&h, OTHER_CTX, 4096), "plenty free");
    gpu().device_free = 1 << 20;
    assert!(
        !finds_room(&h, CTX, 4096),
        "its own arena would be released"
    );
    // The other context's allocation would release this context's arena (`relieve`): it
    // must not pass a counter run holding its thread by.
    assert!(
        !finds_room(&h, OTHER_CTX, 4096),
        "another context's arena would be released"
    );
    // Nothing held anywhere: nothing to release, whatever the device has free.
    h.alloc_in(OTHER_CTX, 4096);
    assert_eq!(h.be.ctx(CTX).arena.lock().device_bytes(), 0);
    assert!(finds_room(&h, CTX, 4096));
    assert!(finds_room(&h, OTHER_CTX, 4096));
}

#[test]
fn another_devices_arena_and_one_a_window_uses_are_left_alone() {
    let (h, _buf) = harness_with_an_idle_arena();
    let ctx = h.be.ctx(CTX);
    // The first context is on another device.
    ctx.ordinal.store(1, Ordering::Relaxed);
    let (r, _) = failing_alloc_in(&h, OTHER_CTX, 1024);
    assert_eq!(r, CUDA_ERROR_OUT_OF_MEMORY);
    assert!(
        ctx.arena.lock().device_bytes() > 0,
        "another device's memory"
    );
    drop(h);
    // Same device, but a window uses the arena.
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    h.window_in_flight(&mut buf, Duration::from_millis(60));
    let ctx = h.be.ctx(CTX);
    assert!(ctx.arena.lock().in_window());
    let (r, _) = failing_alloc_in(&h, OTHER_CTX, 1024);
    assert_eq!(
        r, CUDA_ERROR_OUT_OF_MEMORY,
        "no wait for another context's window"
    );
    assert!(
        ctx.arena.lock().in_window(),
        "returned while the window ran"
    );
    h.settle();
    assert!(ctx.arena.lock().device_bytes() > 0);
    assert_eq!(buf.values(), vec![1; 8]);
}

#[test]
fn an_allocation_failing_for_memory_with_an_empty_arena_fails_as_it_did() {
    let h = harness(2, quick());
    assert_eq!(h.be.ctx(CTX).arena.lock().device_bytes(), 0);
    let before = gpu().memory.len();
    let (r, p) = failing_alloc(&h, 1024);
    assert_eq!(r, CUDA_ERROR_OUT_OF_MEMORY, "nothing was freed: no retry");
    assert_eq!(p, 0);
    assert_eq!(gpu().memory.len(), before, "nothing was allocated");
}

/// While a window of three passes uses the context's arena (its relaunches take 60 ms),
/// `allocate` makes the application's allocation call; then checks that the call found the
/// arena released (so it waited for the window, which ends as it would have) and returns.
fn allocating_during_a_window_that_uses_the_arena(allocate: impl FnOnce(&Harness)) {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    h.window_in_flight(&mut buf, Duration::from_millis(60));
    let ctx = h.be.ctx(CTX);
    {
        let arena = ctx.arena.lock();
        assert!(arena.in_window(), "the window uses the arena");
        assert!(arena.device_bytes() > 0);
    }
    allocate(&h);
    assert_eq!(
        ctx.arena.lock().device_bytes(),
        0,
        "the call waited for the window and the arena was released for it"
    );
    h.settle();
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3));
    assert_eq!(buf.values(), vec![1; 8]);
}

#[test]
fn an_allocation_failing_for_memory_during_a_window_waits_for_it_and_is_made_again() {
    // The device said it had room (no shortfall was foreseen at the call's entry), yet the
    // driver failed the allocation (fragmentation, another process): the call waits for the
    // window, which holds the arena, and then gets the memory the arena released.
    allocating_during_a_window_that_uses_the_arena(|h| {
        let (r, p) = failing_alloc(h, 4096);
        assert_eq!(r, CUDA_SUCCESS);
        assert!(gpu().memory.contains_key(&p));
    });
}

#[test]
fn each_allocation_entry_point_failing_for_memory_is_made_again_with_its_own_arguments() {
    let (h, _buf) = harness_with_an_idle_arena();
    // cuMemAllocAsync_ptsz on stream 0: the thread's own default stream.
    let mut out: CUdeviceptr = 0;
    let params = cuMemAllocAsync_params {
        dptr: &mut out,
        bytesize: 256,
        hStream: std::ptr::null_mut(),
    };
    let r = h.call(
        ALLOC_ASYNC_PTSZ,
        c"cuMemAllocAsync_ptsz",
        (&params as *const cuMemAllocAsync_params).cast(),
        c"",
        || CUDA_ERROR_OUT_OF_MEMORY,
    );
    assert_eq!(r, CUDA_SUCCESS);
    assert_ne!(out, 0);
    assert_eq!(
        gpu().allocations_made,
        vec![("cuMemAllocAsync", CU_STREAM_PER_THREAD)],
        "made again on the stream the application meant"
    );
    // cuMemAllocPitch_v2: the pitch is the retry's (the application's variable held junk).
    let (h, _buf) = {
        drop(h);
        harness_with_an_idle_arena()
    };
    let (mut out, mut pitch): (CUdeviceptr, usize) = (0, 1 << 40);
    let params = cuMemAllocPitch_v2_params {
        dptr: &mut out,
        pPitch: &mut pitch,
        WidthInBytes: 100,
        Height: 3,
        ElementSizeBytes: 4,
    };
    let r = h.call(
        ALLOC_PITCH,
        c"cuMemAllocPitch_v2",
        (&params as *const cuMemAllocPitch_v2_params).cast(),
        c"",
        || CUDA_ERROR_OUT_OF_MEMORY,
    );
    assert_eq!((r, pitch), (CUDA_SUCCESS, 512));
    let end = out as usize + 512 * 3;
    assert!(
        h.be.inventory.origin_of(end - 1).is_some() && h.be.inventory.origin_of(end).is_none(),
        "recorded with the pitch the retry gave: 3 rows of 512 bytes"
    );
    assert_eq!(gpu().allocations_made, vec![("cuMemAllocPitch", 0)]);
}

#[test]
fn an_asynchronous_allocation_failing_for_memory_on_a_capturing_stream_is_not_made_again() {
    // A retry there would add a node to the application's graph.
    let (h, _buf) = harness_with_an_idle_arena();
    gpu().capturing = true;
    let mut out: CUdeviceptr = 0;
    let params = cuMemAllocAsync_params {
        dptr: &mut out,
        bytesize: 256,
        hStream: 0x5000 as CUstream,
    };
    let r = h.call(
        ALLOC_ASYNC_PTSZ,
        c"cuMemAllocAsync_ptsz",
        (&params as *const cuMemAllocAsync_params).cast(),
        c"",
        || CUDA_ERROR_OUT_OF_MEMORY,
    );
    gpu().capturing = false;
    assert_eq!((r, out), (CUDA_ERROR_OUT_OF_MEMORY, 0));
    assert!(gpu().allocations_made.is_empty());
    assert_eq!(
        h.be.ctx(CTX).arena.lock().device_bytes(),
        0,
        "the arena is released all the same"
    );
}

#[test]
fn an_application_allocation_short_of_memory_during_a_window_waits_and_gets_the_arenas_memory() {
    allocating_during_a_window_that_uses_the_arena(|h| {
        // The device is now nearly full: the allocation would eat into the reserve.
        gpu().device_free = 1 << 20;
        h.alloc(4096);
    });
}

/// `cuMemCreate` of `size` bytes (PyTorch's expandable segments), answered `result`.
fn mem_create(h: &Harness, size: usize, result: CUresult) {
    mem_create_as(h, size, std::ptr::null(), 0, result);
}

/// `cuMemCreate` of `size` bytes with the properties at `prop`, the driver answering `result`
/// and the handle `handle`; returns the handle the application got.
fn mem_create_as(
    h: &Harness,
    size: usize,
    prop: *const CUmemAllocationProp,
    handle: u64,
    result: CUresult,
) -> u64 {
    let mut out: CUmemGenericAllocationHandle = 0;
    let params = cuMemCreate_params {
        handle: &mut out,
        size,
        prop: prop.cast(),
        flags: 0,
    };
    h.call(
        MEM_CREATE,
        c"cuMemCreate",
        (&params as *const cuMemCreate_params).cast(),
        c"",
        || {
            out = handle;
            result
        },
    );
    out
}

#[test]
fn physical_memory_of_the_virtual_memory_api_failing_for_memory_releases_an_idle_arena() {
    let h = harness(2, quick());
    let mut buf = Buffer::new(&h, 4);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    let ctx = h.be.ctx(CTX);
    assert!(ctx.arena.lock().device_bytes() > 0, "kept between windows");
    let handle = mem_create_as(&h, 2 << 20, std::ptr::null(), 0, CUDA_ERROR_OUT_OF_MEMORY);
    assert_eq!(ctx.arena.lock().device_bytes(), 0, "released for the retry");
    assert_ne!(handle, 0, "the application got the retry's handle");
    assert_eq!(gpu().allocations_made, vec![("cuMemCreate", 0)]);
}

#[test]
fn physical_memory_of_the_virtual_memory_api_short_of_memory_gets_the_arenas_memory() {
    allocating_during_a_window_that_uses_the_arena(|h| {
        // The device is now nearly full: the physical allocation would eat into the reserve.
        gpu().device_free = 1 << 20;
        mem_create(h, 2 << 20, CUDA_SUCCESS);
    });
}

#[test]
fn the_arena_is_trimmed_after_the_window_once_its_gates_are_open() {
    // Freeing may synchronise the context: never while the window's gate holds the
    // application's stream.
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    h.window_in_flight(&mut buf, Duration::from_millis(60));
    let ctx = h.be.ctx(CTX);
    // The device runs short during the window: the arena goes once the window is over.
    gpu().device_free = 1 << 20;
    h.settle();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ctx.arena.lock().device_bytes() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        ctx.arena.lock().device_bytes(),
        0,
        "trimmed after the window"
    );
    assert_eq!(
        gpu().frees_in_windows,
        0,
        "nothing freed while a window was in flight"
    );
    assert_eq!(buf.values(), vec![1; 8]);
}

/// `passes` of its own and one counter.
struct WithCounters(u32, Arc<crate::counters::MetricSet>);

impl ReplayPolicy for WithCounters {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.0, ())
    }
    fn metrics(&self, _: &DispatchInfo) -> Option<Arc<crate::counters::MetricSet>> {
        Some(self.1.clone())
    }
}

/// `add_one` that tells the fake CUPTI it ran (to see which launches fall in a range).
fn add_one_counted(args: *mut *mut c_void) {
    add_one(args);
    super::profiler::tests::kernel_ran();
}

static ADD_ONE_COUNTED: FakeKernel = FakeKernel {
    run: add_one_counted,
    module: 0,
};

/// Installs a profiler over the fake CUPTI as the process's, for one test (the caller holds
/// the fake CUPTI's lock, which every test that asks for counters takes first).
struct FakeProfiler;

impl FakeProfiler {
    fn install(decode_each: bool) -> (FakeProfiler, crate::counters::CounterCatalog) {
        FakeProfiler::install_modes(super::profiler::Modes {
            decode_each,
            ..Default::default()
        })
    }

    fn install_modes(
        modes: super::profiler::Modes,
    ) -> (FakeProfiler, crate::counters::CounterCatalog) {
        use super::profiler::tests as fake;
        let (p, seen) = fake::profiler(fake::fake_symbols(), modes);
        let catalog = fake::catalog(&p, &seen);
        super::profiler::set(Some(p));
        (FakeProfiler, catalog)
    }
}

impl Drop for FakeProfiler {
    fn drop(&mut self) {
        super::profiler::set(None);
    }
}

#[test]
fn without_cuptis_profiler_counters_are_absent_and_the_replay_unchanged() {
    let _cupti = super::profiler::tests::reset(1);
    super::profiler::set(None);
    let catalog = crate::counters::CounterCatalog::new("sm_90")
        .block("SM", 1)
        .counter("sm__cycles_elapsed.avg", "SM", 0);
    let set =
        Arc::new(crate::counters::MetricSet::new(&catalog, ["sm__cycles_elapsed.avg"]).unwrap());
    for (passes, kind, launches) in [(3, OutcomeKind::Replayed, 3), (1, OutcomeKind::Skipped, 1)] {
        let h = harness_with(WithCounters(passes, set.clone()), quick());
        let mut buf = Buffer::new(&h, 16);
        let mut args = buf.args();
        assert_eq!(h.launch(&ADD_ONE, &mut args, 0), CUDA_SUCCESS);
        assert_eq!(buf.values(), vec![1; 16], "one execution");
        assert_eq!(h.launches(), launches);
        let o = &h.outcomes()[0].1;
        assert_eq!((o.kind, o.passes), (kind, passes));
        assert_eq!(
            o.metrics.absent_reason(),
            Some("counters_unavailable: CUPTI's Profiling API was not loaded")
        );
    }
}

#[test]
fn a_launch_gets_cuptis_values_from_one_range_per_counter_pass_and_one_execution() {
    use super::profiler::tests as fake;
    // Both decode modes: after every pass, and once after the last.
    for decode_each in [true, false] {
        let _cupti = fake::reset(3);
        let (_p, catalog) = FakeProfiler::install(decode_each);
        let set = Arc::new(crate::counters::MetricSet::new(&catalog, fake::NAMES).unwrap());
        assert_eq!(set.pass_count(), 3);
        // Two timing passes of the policy's, then CUPTI's three.
        let h = harness_with(WithCounters(2, set.clone()), quick());
        let mut buf = Buffer::new(&h, 16);
        let mut args = buf.args();
        fake::take_log();
        assert_eq!(h.launch(&ADD_ONE_COUNTED, &mut args, 0), CUDA_SUCCESS);
        assert_eq!(
            buf.values(),
            vec![1; 16],
            "the application sees one execution"
        );
        assert_eq!(h.launches(), 5);
        let o = &h.outcomes()[0].1;
        assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 5), "{o:?}");
        let values = o
            .metrics
            .values()
            .unwrap_or_else(|| panic!("{:?}", o.metrics));
        assert!(values.is_floating());
        let got: Vec<(&str, f64, u32)> = values
            .iter()
            .map(|(n, v)| (n, v.gpu_value, v.pass))
            .collect();
        let expected: Vec<(&str, f64, u32)> = fake::NAMES
            .iter()
            .map(|n| (*n, n.len() as f64 + 0.25, 4))
            .collect();
        assert_eq!(got, expected, "set order, from the last window pass");
        let log = fake::take_log();
        let ranged: Vec<&str> = log
            .iter()
            .map(String::as_str)
            .filter(|l| {
                matches!(
                    *l,
                    "SetConfig" | "Start" | "PushRange" | "PopRange" | "Stop" | "kernel"
                )
            })
            .collect();
        assert_eq!(
            ranged,
            [
                // the policy's two passes (no range), then CUPTI's three
                "kernel",
                "kernel",
                "SetConfig",
                "Start",
                "PushRange",
                "kernel",
                "PopRange",
                "Stop",
                "Start",
                "PushRange",
                "kernel",
                "PopRange",
                "Stop",
                "Start",
                "PushRange",
                "kernel",
                "PopRange",
                "Stop",
            ],
            "{log:?}"
        );
        assert_eq!(fake::fake().kernels_per_range, [1, 1, 1]);
        // CUPTI's profiler never returns when called on another thread while the launching
        // thread waits in its callback: the launching thread makes the calls.
        let threads = std::mem::take(&mut fake::fake().start_threads);
        assert_eq!(threads.len(), 3);
        assert!(
            threads.iter().all(|t| t != "rocprof-replay-cuda"),
            "profiler started on the replay thread: {threads:?}"
        );
        let decodes = log.iter().filter(|l| *l == "Decode").count();
        assert_eq!(decodes, if decode_each { 3 } else { 1 });
        assert!(fake::fake().bad.is_empty(), "{:?}", fake::fake().bad);
        drop(h);
    }
}

#[test]
fn an_application_that_owns_cuptis_profiler_runs_unaffected_without_counters() {
    use super::profiler::tests as fake;
    let _cupti = fake::reset(3);
    fake::fake().enable_status = rocprof_replay_sys::cupti_profiler::CUPTI_ERROR_NOT_COMPATIBLE;
    let (_p, catalog) = FakeProfiler::install(true);
    let set = Arc::new(crate::counters::MetricSet::new(&catalog, fake::NAMES).unwrap());
    for (passes, kind, launches) in [(3, OutcomeKind::Replayed, 3), (1, OutcomeKind::Skipped, 1)] {
        let h = harness_with(WithCounters(passes, set.clone()), quick());
        let mut buf = Buffer::new(&h, 16);
        let mut args = buf.args();
        assert_eq!(h.launch(&ADD_ONE_COUNTED, &mut args, 0), CUDA_SUCCESS);
        assert_eq!(buf.values(), vec![1; 16], "one execution");
        assert_eq!(h.launches(), launches);
        let o = &h.outcomes()[0].1;
        assert_eq!((o.kind, o.passes), (kind, passes));
        let why = o.metrics.absent_reason().unwrap_or_default();
        assert!(
            why.starts_with(
                "counters_unavailable: CUPTI's profiler on this context is already in use"
            ),
            "{why}"
        );
        let log = fake::take_log();
        assert!(
            !log.iter().any(|l| l == "Start" || l == "SetConfig"),
            "{log:?}"
        );
    }
}

// ---- Asynchronous windows and kernel-only pass times ----

/// The gate page of the test context, and (taken, opened).
fn gate_counts(h: &Harness) -> (u64, u64) {
    h.be.ctx(CTX)
        .gates
        .get()
        .cloned()
        .flatten()
        .map(|p| p.counts())
        .unwrap_or_default()
}

/// The operations enqueued on `stream`.
fn ops_on(stream: usize) -> Vec<Op> {
    gpu()
        .ops
        .iter()
        .filter(|(s, _)| *s == stream)
        .map(|(_, o)| *o)
        .collect()
}

/// Every stream memory wait the backend enqueued has been passed.
fn every_wait_passed() -> bool {
    gpu()
        .ops
        .iter()
        .all(|(_, o)| !matches!(o, Op::Wait(a, v) if !passed(&(*a, *v))))
}

/// An application event recorded on `stream` now (not intercepted: cuEventRecord is not
/// stream work for the backend).
fn app_event(stream: usize) -> usize {
    let ev = handle();
    // SAFETY: fake driver.
    unsafe { event_record(ev as CUevent, stream as CUstream) };
    ev
}

fn query_event(ev: usize) -> CUresult {
    // SAFETY: fake driver.
    unsafe { event_query(ev as CUevent) }
}

fn query_stream(s: usize) -> CUresult {
    // SAFETY: fake driver.
    unsafe { stream_query(s as CUstream) }
}

#[test]
fn an_asynchronous_launch_returns_before_its_window_and_later_work_waits_behind_it() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let buf = Buffer::new(&h, 64);
    // The application's own argument storage, overwritten once the call returned: the
    // relaunches must use the window's copy.
    let (mut ptr, mut n) = (buf.ptr, buf.n);
    let mut args: [*mut c_void; 2] = [
        (&mut ptr as *mut CUdeviceptr).cast(),
        (&mut n as *mut u32).cast(),
    ];
    // Each relaunch takes 60 ms: the window lasts well over 100 ms.
    gpu().slow_relaunches = Some(Duration::from_millis(60));
    let t = Instant::now();
    let r = h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    let returned = t.elapsed();
    assert_eq!(r, CUDA_SUCCESS);
    // SAFETY: plain locals, written after the call returned.
    unsafe { std::ptr::write_volatile(&mut n, 0) };
    assert!(
        h.outcomes().is_empty(),
        "the call returned before the window ended"
    );
    assert_eq!(gate::BEHIND.pending(), 1);
    // The application's next work on the stream: an event and a query see nothing done.
    let ev = app_event(0x5000);
    assert_eq!(query_event(ev), CUDA_ERROR_NOT_READY);
    assert_eq!(query_stream(0x5000), CUDA_ERROR_NOT_READY);
    h.settle();
    let window = t.elapsed();
    assert!(
        returned < window,
        "returned after {returned:?}, window over after {window:?}"
    );
    assert_eq!(
        query_event(ev),
        CUDA_SUCCESS,
        "one completion, after the window"
    );
    assert_eq!(query_stream(0x5000), CUDA_SUCCESS);
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3));
    assert_eq!(
        buf.values(),
        vec![1; 64],
        "the copy's arguments, one execution"
    );
    // On the application's stream: the gate before pass 1's start event, the kernel and its
    // end event (all held), then the gate the window opens, then the application's event.
    let ops = ops_on(0x5000);
    let launch = ops.iter().position(|o| matches!(o, Op::Launch(_))).unwrap();
    assert!(matches!(ops[launch - 2], Op::Wait(..)), "{ops:?}");
    assert!(matches!(ops[launch - 1], Op::Record(_, true)), "{ops:?}");
    assert_eq!(ops[launch], Op::Launch(true), "{ops:?}");
    assert!(matches!(ops[launch + 1], Op::Record(_, true)), "{ops:?}");
    assert!(matches!(ops[launch + 2], Op::Wait(..)), "{ops:?}");
    assert_eq!(ops[launch + 3], Op::Record(ev, true), "{ops:?}");
    // The gate after the kernel was on the stream before the gate in front of it opened: no
    // thread's query of the stream could see pass 1 done before the window is over.
    let waits: Vec<bool> = gpu()
        .waits_enqueued
        .iter()
        .filter(|(s, _)| *s == 0x5000)
        .map(|&(_, held)| held)
        .collect();
    assert_eq!(waits, [false, true], "{ops:?}");
    assert!(every_wait_passed());
    let (taken, opened) = gate_counts(&h);
    assert_eq!(taken, opened, "every gate opened once");
    assert_eq!(
        taken, 4,
        "the page's self-test, pass 1's timing gate, the window's, and the window word offered \
         to other streams' work while windows may cover runs (the relaunches are not timed: no \
         gate)"
    );
}

/// The private stream's ops around each relaunch of one launch's window (3 passes) under
/// `h`: for each of the two relaunches, the ops from two before it to the one after it; and
/// how many events were recorded on that stream in all.
fn relaunch_shapes(h: &Harness) -> (Vec<Vec<Op>>, usize) {
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    assert_eq!(buf.values(), vec![1; 8]);
    assert!(every_wait_passed());
    // The backend's stream that ran kernels (the other one is the gate page's self-test).
    let private = {
        let g = gpu();
        g.created_streams
            .iter()
            .copied()
            .find(|s| {
                g.ops
                    .iter()
                    .any(|(o, op)| o == s && matches!(op, Op::Launch(_)))
            })
            .unwrap()
    };
    let ops = ops_on(private);
    let launches: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, Op::Launch(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(launches.len(), 2, "{ops:?}");
    let records = ops.iter().filter(|o| matches!(o, Op::Record(..))).count();
    let shapes = launches
        .into_iter()
        .map(|i| ops[i.saturating_sub(2)..=i + 1].to_vec())
        .collect();
    (shapes, records)
}

#[test]
fn relaunches_timed_by_events_wait_behind_a_gate_that_opens_after_the_end_event() {
    let timed = || TimeEveryPass {
        passes: 3,
        timing: crate::Context::new("gate test", &[crate::Service::DispatchTiming]),
        times: Arc::new(Mutex::new(Vec::new())),
    };
    // Timed by events (no kernel records): start event, kernel and end event held behind a
    // gate, so the events bracket the kernel alone.
    let (shapes, by_events) = relaunch_shapes(&harness_clocked(timed(), quick(), false));
    for shape in shapes {
        assert!(matches!(shape[0], Op::Wait(..)), "{shape:?}");
        assert!(
            matches!(shape[1], Op::Record(_, true)),
            "start event held: {shape:?}"
        );
        assert_eq!(shape[2], Op::Launch(true), "{shape:?}");
        assert!(
            matches!(shape[3], Op::Record(_, true)),
            "end event enqueued before the gate opened: {shape:?}"
        );
    }
    // Timed by its kernel record (which times the kernel from its front end's submission):
    // no gate in front, and no start event.
    let (shapes, clocked) = relaunch_shapes(&harness_clocked(timed(), quick(), true));
    for shape in shapes {
        assert!(!matches!(shape[1], Op::Wait(..)), "no gate: {shape:?}");
        assert_eq!(shape[2], Op::Launch(false), "not held: {shape:?}");
        assert!(matches!(shape[3], Op::Record(..)), "{shape:?}");
    }
    // Untimed: the kernel and the one event the window waits for.
    let (shapes, untimed) = relaunch_shapes(&harness(3, quick()));
    for shape in shapes {
        assert!(!matches!(shape[1], Op::Wait(..)), "no gate: {shape:?}");
        assert_eq!(shape[2], Op::Launch(false), "not held: {shape:?}");
        assert!(matches!(shape[3], Op::Record(..)), "{shape:?}");
    }
    assert_eq!(
        clocked, untimed,
        "one event per relaunch timed by its kernel record, as per untimed one"
    );
    assert_eq!(
        untimed + 2,
        by_events,
        "a start event per relaunch timed by events (two relaunches)"
    );
}

#[test]
fn without_parameter_sizes_the_launch_waits_for_its_window() {
    let h = harness(3, quick());
    // ADD_ONE's handle was never obtained: no cuFuncGetParamInfo, no copy.
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    let r = h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    assert_eq!(r, CUDA_SUCCESS);
    assert_eq!(
        h.outcomes().len(),
        1,
        "the window ended before the call returned"
    );
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
    let ops = ops_on(0x5000);
    let launch = ops.iter().position(|o| matches!(o, Op::Launch(_))).unwrap();
    assert!(
        !ops[launch..].iter().any(|o| matches!(o, Op::Wait(..))),
        "no gate after the launch: {ops:?}"
    );
    let (taken, opened) = gate_counts(&h);
    assert_eq!(taken, opened);
}

#[test]
fn without_stream_memory_operations_windows_stay_synchronous() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    gpu().no_mem_ops = true;
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    assert_eq!(
        h.outcomes().len(),
        1,
        "the window ended before the call returned"
    );
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
    assert!(gpu().ops.iter().all(|(_, o)| !matches!(o, Op::Wait(..))));
}

/// Runs one asynchronous launch on stream 0x5000 of `h` and checks that every gate opened
/// once and the stream is free; returns the outcome.
fn async_outcome(h: &Harness, buf: &mut Buffer) -> Outcome {
    h.obtain_function(&ADD_ONE);
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    h.settle();
    let (taken, opened) = gate_counts(h);
    assert_eq!(taken, opened, "every gate opened once");
    h.outcomes()[0].1.clone()
}

#[test]
fn the_gate_opens_when_a_window_declines_before_pass_one() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().stick_copies = true;
    let o = async_outcome(&h, &mut buf);
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::CopyTimeout));
    assert_eq!(buf.values(), vec![1; 8]);
    assert!(every_wait_passed());
    assert_eq!(query_stream(0x5000), CUDA_SUCCESS);
}

#[test]
fn the_gate_opens_after_a_late_relaunch_declines() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().slow_relaunches = Some(Duration::from_millis(250));
    let o = async_outcome(&h, &mut buf);
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::PassTimeout));
    assert_eq!(buf.values(), vec![1; 8]);
    assert!(every_wait_passed());
    assert_eq!(query_stream(0x5000), CUDA_SUCCESS);
}

#[test]
fn a_stuck_relaunch_hands_the_gate_to_its_stream() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().stick_relaunches = true;
    let o = async_outcome(&h, &mut buf);
    assert_eq!(o.kind, OutcomeKind::Failed(FailureReason::PassStuck));
    // The application's stream stays behind the pass still running: the gate's store is
    // queued after it, on its stream.
    let writes = gpu().stuck_writes.clone();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(query_stream(0x5000), CUDA_ERROR_NOT_READY);
    // The pass finishes: the store lands, the stream moves on.
    let (_, addr, value) = writes[0];
    // SAFETY: the gate word, as the GPU would write it.
    unsafe { std::ptr::write_volatile(addr as *mut u32, value) };
    assert_eq!(query_stream(0x5000), CUDA_SUCCESS);
    assert!(
        gpu().stream_waits.is_empty(),
        "no wait on the application's stream from the window"
    );
}

/// Panics in `on_pass_end` of pass 2.
struct PanicsAfterPassTwo;

impl ReplayPolicy for PanicsAfterPassTwo {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(3, ())
    }
    fn on_pass_end(&self, pass: &crate::policy::PassReport<'_>, _: &mut (), _: &mut ()) {
        if pass.index == 1 {
            panic!("a policy's own bug");
        }
    }
}

#[test]
fn the_gate_opens_when_the_policy_panics_in_the_window() {
    let h = harness_with(PanicsAfterPassTwo, quick());
    let mut buf = Buffer::new(&h, 8);
    let o = async_outcome(&h, &mut buf);
    assert_eq!(o.kind.label(), "declined", "{o:?}");
    assert_eq!(buf.values(), vec![1; 8], "one execution");
    assert!(every_wait_passed());
    assert_eq!(query_stream(0x5000), CUDA_SUCCESS);
}

#[test]
fn a_failing_asynchronous_launch_holds_nothing() {
    let h = harness(3, quick());
    let mut buf = Buffer::new(&h, 8);
    gpu().fail_app_launch = true;
    let o = async_outcome(&h, &mut buf);
    assert_eq!(o.kind, OutcomeKind::Declined(DeclineReason::SubmitFailed));
    assert_eq!(buf.values(), vec![0; 8]);
    assert!(every_wait_passed());
}

#[test]
fn shutdown_waits_for_a_window_behind_a_returned_launch() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    h.window_in_flight(&mut buf, Duration::from_millis(80));
    assert_eq!(gate::BEHIND.pending(), 1);
    wait_for_windows(h.be);
    assert_eq!(gate::BEHIND.pending(), 0);
    assert_eq!(h.outcomes().len(), 1);
    assert_eq!(buf.values(), vec![1; 8]);
}

/// `cuModuleGetFunction` of the application, its driver part running `body` (where a real
/// driver may load the module lazily).
fn get_function_running(h: &Harness, body: impl FnOnce()) {
    let mut out: CUfunction = std::ptr::null_mut();
    let params = cuModuleGetFunction_params {
        hfunc: &mut out,
        hmod: ADD_ONE.module as CUmodule,
        name: c"k".as_ptr(),
    };
    h.call(
        GET_FUNCTION,
        c"cuModuleGetFunction",
        (&params as *const cuModuleGetFunction_params).cast(),
        c"",
        || {
            body();
            out = (&ADD_ONE as *const FakeKernel).cast_mut().cast();
            CUDA_SUCCESS
        },
    );
}

#[test]
fn windows_are_asynchronous_unless_the_setting_turns_them_off() {
    for on in [None, Some("1"), Some("on"), Some("")] {
        assert!(window::asynchronous_windows(on), "{on:?}");
    }
    for off in ["0", "off", " false ", "no"] {
        assert!(!window::asynchronous_windows(Some(off)), "{off:?}");
    }
}

#[test]
fn the_gate_page_set_up_after_an_allocation_is_not_the_applications_host_memory() {
    // The gates are set up after the context's first allocation, through cuMemHostAlloc,
    // whose callbacks fire for the backend's own call too: counted as the application's, it
    // would make every kernel whose arguments cannot be inspected decline `host_memory`.
    let h = harness(3, quick());
    let _buf = Buffer::new(&h, 8);
    assert!(
        matches!(h.be.ctx(CTX).gates.get(), Some(Some(_))),
        "the gates were set up"
    );
    assert!(
        h.be.host_memory.read().is_empty(),
        "the backend's gate page was taken for the application's host memory"
    );
}

#[test]
fn a_call_that_may_load_a_module_waits_for_the_windows_in_flight() {
    // A lazy module load synchronises the context under a driver lock the window's copies
    // need, while the window's gate holds the application's stream: it must not overlap one.
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    h.window_in_flight(&mut buf, Duration::from_millis(60));
    assert_eq!(gate::BEHIND.pending(), 1, "the window runs behind the call");
    let mut in_flight = None;
    get_function_running(&h, || in_flight = Some(gate::BEHIND.pending()));
    assert_eq!(in_flight, Some(0), "the load overlapped a window");
    assert_eq!(h.outcomes().len(), 1);
    assert_eq!(buf.values(), vec![1; 8]);
    assert!(every_wait_passed());
}

#[test]
fn no_window_starts_while_a_module_load_runs() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let loaded = Mutex::new(None::<Instant>);
    let started = std::sync::Barrier::new(2);
    let returned = std::thread::scope(|s| {
        s.spawn(|| {
            get_function_running(&h, || {
                started.wait();
                std::thread::sleep(Duration::from_millis(150));
                *loaded.lock() = Some(Instant::now());
            })
        });
        started.wait();
        let mut args = buf.args();
        h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
        Instant::now()
    });
    h.settle();
    let loaded = loaded.lock().expect("the load ran");
    assert!(
        returned >= loaded,
        "the launch's window started while the load ran"
    );
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
}

#[test]
fn an_asynchronous_launch_kernel_ex_relaunches_from_its_copied_configuration() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let buf = Buffer::new(&h, 8);
    let (mut ptr, mut n) = (buf.ptr, buf.n);
    let mut args: [*mut c_void; 2] = [
        (&mut ptr as *mut CUdeviceptr).cast(),
        (&mut n as *mut u32).cast(),
    ];
    let mut attrs = [CUlaunchAttribute::default(); 1];
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    let mut config = CUlaunchConfig {
        gridDimX: 2,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 32,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: 0x5000 as CUstream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: 1,
    };
    let f: CUfunction = (&ADD_ONE as *const FakeKernel).cast_mut().cast();
    let params = cuLaunchKernelEx_params {
        config: &config,
        f,
        kernelParams: args.as_mut_ptr(),
        extra: std::ptr::null_mut(),
    };
    let argp = params.kernelParams;
    gpu().slow_relaunches = Some(Duration::from_millis(40));
    h.call(
        LAUNCH_EX,
        c"cuLaunchKernelEx",
        (&params as *const cuLaunchKernelEx_params).cast(),
        c"k",
        || {
            run_kernel(f, argp, 0x5000 as CUstream);
            CUDA_SUCCESS
        },
    );
    assert!(
        h.outcomes().is_empty(),
        "the call returned before the window ended"
    );
    // The application reuses its argument storage and configuration at once.
    // SAFETY: plain locals, written after the call returned.
    unsafe {
        std::ptr::write_volatile(&mut n, 0);
        std::ptr::write_volatile(&mut config.numAttrs, 0);
        std::ptr::write_volatile(&mut attrs[0].id, 0);
    }
    h.settle();
    assert_eq!(gpu().relaunches, 2);
    assert_eq!(buf.values(), vec![1; 8], "relaunched from the copies");
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3));
    let (taken, opened) = gate_counts(&h);
    assert_eq!(taken, opened);
}

#[test]
fn a_second_launch_on_the_stream_follows_the_first_window() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    h.window_in_flight(&mut buf, Duration::from_millis(40));
    assert!(h.outcomes().is_empty());
    let mut args = buf.args();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    // The thread's companion ran the first window to its end before taking the second.
    assert_eq!(
        h.outcomes().len(),
        1,
        "the first window is over, the second runs"
    );
    h.settle();
    assert_eq!(buf.values(), vec![2; 8], "two executions, in order");
    let ops = ops_on(0x5000);
    let launches: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, Op::Launch(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(launches.len(), 2, "{ops:?}");
    let first_gate = ops[launches[0] + 2];
    assert!(matches!(first_gate, Op::Wait(..)), "{ops:?}");
    let Op::Wait(addr, value) = first_gate else {
        unreachable!()
    };
    assert!(passed(&(addr, value)));
    assert!(
        ops[launches[0] + 3..launches[1]]
            .iter()
            .any(|o| matches!(o, Op::Wait(..))),
        "the second launch's own timing gate: {ops:?}"
    );
    let (taken, opened) = gate_counts(&h);
    assert_eq!(taken, opened);
}

/// Remembers the threads its callbacks ran on.
struct WhereItRuns(Arc<Mutex<Vec<(&'static str, std::thread::ThreadId)>>>);

impl ReplayPolicy for WhereItRuns {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        self.0
            .lock()
            .push(("pass_count", std::thread::current().id()));
        PassPlan::exactly(2, ())
    }
    fn on_end(&self, _: &DispatchInfo, _: (), _: &Outcome) {
        self.0.lock().push(("on_end", std::thread::current().id()));
    }
}

#[test]
fn the_decision_runs_on_the_launching_thread_and_the_window_on_its_companion() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let h = harness_with(WhereItRuns(seen.clone()), quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0x5000);
    assert_eq!(buf.values(), vec![1; 8]);
    let me = std::thread::current().id();
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0], ("pass_count", me));
    assert_eq!(seen[1].0, "on_end");
    assert_ne!(
        seen[1].1, me,
        "the window's callbacks run on the companion thread"
    );
}

#[test]
fn where_the_device_never_sees_a_gate_open_windows_stay_synchronous() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    HIDE_HOST_STORES.store(true, Ordering::Release);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    let t = Instant::now();
    h.launch_returning(&ADD_ONE, &mut args, 0x5000, c"_Z7add_onePji");
    HIDE_HOST_STORES.store(false, Ordering::Release);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the self-test is bounded"
    );
    assert_eq!(
        h.outcomes().len(),
        1,
        "the window ended before the call returned"
    );
    assert_eq!(h.outcomes()[0].1.kind, OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
    assert!(
        h.be.ctx(CTX).gates.get().is_some_and(|p| p.is_none()),
        "no gates here"
    );
    // Only the self-test's stream ever waited.
    let waits: Vec<usize> = gpu()
        .ops
        .iter()
        .filter(|(_, o)| matches!(o, Op::Wait(..)))
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(gpu().created_streams.contains(&waits[0]));
}

#[path = "compare_tests.rs"]
mod compare_tests;

#[path = "fingerprint_tests.rs"]
mod fingerprint_tests;

#[path = "table_tests.rs"]
mod table_tests;

#[path = "memory_tests.rs"]
mod memory_tests;

#[path = "ordering_tests.rs"]
mod ordering_tests;

#[path = "run_tests.rs"]
mod run_tests;

#[path = "defer_tests.rs"]
mod defer_tests;

#[path = "counter_run_tests.rs"]
mod counter_run_tests;

/// The launch metrics of `add_one`'s launch (`Harness::launch`: grid 4×2×1 of 256 threads,
/// 512 bytes of dynamic shared memory) on the fake H200: static shared 1024, 16 registers,
/// driver reserve 1024, 132 SMs, three blocks of 256 per SM.
const LAUNCH_VALUES: [(&str, f64); 19] = [
    ("launch__grid_size", 8.0),
    ("launch__grid_dim_x", 4.0),
    ("launch__grid_dim_y", 2.0),
    ("launch__grid_dim_z", 1.0),
    ("launch__block_size", 256.0),
    ("launch__block_dim_x", 256.0),
    ("launch__block_dim_y", 1.0),
    ("launch__block_dim_z", 1.0),
    ("launch__thread_count", 2048.0),
    ("launch__registers_per_thread", 16.0),
    ("launch__shared_mem_per_block_static", 1024.0),
    ("launch__shared_mem_per_block_dynamic", 512.0),
    ("launch__shared_mem_per_block_driver", 1024.0),
    ("launch__shared_mem_per_block", 2560.0),
    ("launch__sm_count", 132.0),
    ("launch__occupancy_limit_blocks", 32.0),
    // 2048 threads per SM: 64 warps, 8 per block.
    ("launch__occupancy_limit_warps", 8.0),
    // 16 registers: 512 per warp, 32 warps per sub-partition, 128 per SM, 16 blocks.
    ("launch__occupancy_limit_registers", 16.0),
    // 8 blocks over 132 SMs of 3 blocks each.
    ("launch__waves_per_multiprocessor", 8.0 / 396.0),
];

/// `(name, value, pass)` of every metric of an outcome.
fn metric_values(o: &Outcome) -> Vec<(String, f64, u32)> {
    o.metrics
        .values()
        .unwrap_or_else(|| panic!("{:?}", o.metrics))
        .iter()
        .map(|(n, v)| (n.to_owned(), v.gpu_value, v.pass))
        .collect()
}

#[test]
fn a_set_of_launch_metrics_only_is_the_launch_itself_and_runs_no_cupti_pass() {
    use super::profiler::tests as fake;
    let _cupti = fake::reset(3);
    let (_p, catalog) = FakeProfiler::install(true);
    let names = LAUNCH_VALUES.map(|(n, _)| n);
    let set = Arc::new(crate::counters::MetricSet::new(&catalog, names).unwrap());
    assert_eq!(set.pass_count(), 1, "one pass holding the computed metrics");
    assert!(!set.has_counters());
    assert!(fake::fake().added.is_empty(), "CUPTI was not configured");
    let expected: Vec<(String, f64, u32)> = LAUNCH_VALUES
        .iter()
        .map(|(n, v)| (n.to_string(), *v, 0))
        .collect();
    // Counters only, nothing to count: the application's own run, no snapshot, no relaunch;
    // then with three timing passes of the policy's: the passes it asked for, no more.
    for (policy_passes, kind) in [(1, OutcomeKind::Skipped), (3, OutcomeKind::Replayed)] {
        let h = harness_with(WithCounters(policy_passes, set.clone()), quick());
        let mut buf = Buffer::new(&h, 16);
        let mut args = buf.args();
        h.obtain_function(&ADD_ONE_COUNTED);
        fake::take_log();
        assert_eq!(h.launch(&ADD_ONE_COUNTED, &mut args, 0), CUDA_SUCCESS);
        assert_eq!(buf.values(), vec![1; 16], "one execution");
        let o = &h.outcomes()[0].1;
        assert_eq!((o.kind, o.passes), (kind, policy_passes), "{o:?}");
        if policy_passes == 1 {
            assert_eq!(o.snapshot_bytes, 0, "no window: {o:?}");
        }
        assert_eq!(metric_values(o), expected, "exact, labelled with pass 0");
        let log = fake::take_log();
        assert!(
            log.iter().all(|l| l == "kernel"),
            "CUPTI's profiler was not called: {log:?}"
        );
        assert_eq!(
            log.len(),
            policy_passes as usize,
            "no counter pass: {log:?}"
        );
    }
}

#[test]
fn registers_per_thread_are_what_a_thread_is_allocated_as_nsight_compute_reports_them() {
    use super::profiler::tests as fake;
    let _cupti = fake::reset(3);
    let (_p, catalog) = FakeProfiler::install(true);
    let names = [
        "launch__registers_per_thread",
        "launch__occupancy_limit_registers",
    ];
    let set = Arc::new(crate::counters::MetricSet::new(&catalog, names).unwrap());
    // The H200 under Nsight Compute: 8 compiler registers are 16 allocated (16 blocks of 256
    // threads by registers), 17 stay 17 (768 per warp: 21 warps per sub-partition, 10 blocks).
    for (compiled, allocated, blocks) in [(8, 16.0, 16.0), (17, 17.0, 10.0)] {
        let h = harness_with(WithCounters(1, set.clone()), quick());
        gpu().registers = Some(compiled);
        let mut buf = Buffer::new(&h, 16);
        let mut args = buf.args();
        h.obtain_function(&ADD_ONE_COUNTED);
        assert_eq!(h.launch(&ADD_ONE_COUNTED, &mut args, 0), CUDA_SUCCESS);
        let got: Vec<f64> = metric_values(&h.outcomes()[0].1)
            .into_iter()
            .map(|(_, v, _)| v)
            .collect();
        assert_eq!(got, [allocated, blocks], "{compiled} registers");
    }
}

#[test]
fn a_set_mixing_launch_and_cupti_metrics_costs_cuptis_passes_only() {
    use super::profiler::tests as fake;
    let _cupti = fake::reset(3);
    let (_p, catalog) = FakeProfiler::install(true);
    let mut names: Vec<&str> = vec!["launch__grid_size"];
    names.extend(fake::NAMES);
    names.push("launch__shared_mem_per_block");
    let set = Arc::new(crate::counters::MetricSet::new(&catalog, &names).unwrap());
    assert_eq!(set.pass_count(), 3, "CUPTI's passes for its part");
    assert_eq!(
        fake::fake().added,
        fake::NAMES,
        "CUPTI configures its metrics only"
    );
    let h = harness_with(WithCounters(2, set), quick());
    let mut buf = Buffer::new(&h, 16);
    let mut args = buf.args();
    h.obtain_function(&ADD_ONE_COUNTED);
    assert_eq!(h.launch(&ADD_ONE_COUNTED, &mut args, 0), CUDA_SUCCESS);
    assert_eq!(buf.values(), vec![1; 16], "one execution");
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 5), "{o:?}");
    let mut expected = vec![("launch__grid_size".to_string(), 8.0, 0)];
    expected.extend(
        fake::NAMES
            .iter()
            .map(|n| (n.to_string(), n.len() as f64 + 0.25, 4)),
    );
    expected.push(("launch__shared_mem_per_block".into(), 2560.0, 0));
    assert_eq!(metric_values(o), expected, "set order");
    assert_eq!(fake::fake().kernels_per_range, [1, 1, 1]);
    assert!(fake::fake().bad.is_empty(), "{:?}", fake::fake().bad);
}

#[test]
fn without_cuptis_profiler_the_launch_metrics_remain_and_counters_are_refused_with_the_reason() {
    use crate::counters::{MetricError, MetricSet};
    let _cupti = super::profiler::tests::reset(1);
    super::profiler::set(None);
    let why = "CUPTI's profiler is not used (ROCPROF_REPLAY_CUPTI_PROFILER=0)";
    let catalog = super::launch_metrics::catalog_without_counters("GPU 0".into(), why);
    let err =
        MetricSet::new(&catalog, ["launch__grid_size", "sm__cycles_elapsed.avg"]).unwrap_err();
    assert_eq!(
        err,
        MetricError::Unschedulable {
            agent: "GPU 0".into(),
            reason: format!("`sm__cycles_elapsed.avg` is not offered: {why}"),
        }
    );
    let set =
        Arc::new(MetricSet::new(&catalog, ["launch__block_size", "launch__grid_size"]).unwrap());
    let h = harness_with(WithCounters(1, set), quick());
    let mut buf = Buffer::new(&h, 16);
    let mut args = buf.args();
    assert_eq!(h.launch(&ADD_ONE, &mut args, 0), CUDA_SUCCESS);
    assert_eq!(buf.values(), vec![1; 16]);
    let o = &h.outcomes()[0].1;
    assert_eq!(
        metric_values(o),
        [
            ("launch__block_size".to_string(), 256.0, 0),
            ("launch__grid_size".to_string(), 8.0, 0)
        ]
    );
}

#[test]
fn an_unknown_launch_metric_names_the_closest_ones() {
    use super::profiler::tests as fake;
    use crate::counters::{MetricError, MetricSet};
    let _cupti = fake::reset(1);
    let (_p, with_cupti) = FakeProfiler::install(true);
    let without = super::launch_metrics::catalog_without_counters("GPU 0".into(), "no CUPTI");
    for catalog in [&with_cupti, &without] {
        for (asked, closest) in [
            ("launch__grid_sise", "launch__grid_size"),
            (
                "launch__registers_per_thred",
                "launch__registers_per_thread",
            ),
            ("launch__block_sizes", "launch__block_size"),
        ] {
            let err = MetricSet::new(catalog, [asked]).unwrap_err();
            let MetricError::Unknown {
                name, suggestions, ..
            } = &err
            else {
                panic!("{asked}: {err:?}")
            };
            assert_eq!(name, asked);
            assert!(
                suggestions.iter().any(|s| s == closest),
                "{asked}: {suggestions:?}"
            );
            assert!(err.to_string().contains("did you mean"), "{err}");
        }
    }
}

#[test]
fn a_failing_attribute_query_leaves_the_metrics_absent_with_the_reason_never_zero() {
    use super::profiler::tests as fake;
    let _cupti = fake::reset(3);
    let (_p, catalog) = FakeProfiler::install(true);
    let names = ["launch__grid_size", "launch__registers_per_thread"];
    let set = Arc::new(crate::counters::MetricSet::new(&catalog, names).unwrap());
    let h = harness_with(WithCounters(1, set), quick());
    let mut buf = Buffer::new(&h, 16);
    let mut args = buf.args();
    // A handle the application never obtained from the driver cannot be asked either.
    assert_eq!(h.launch(&ADD_ONE, &mut args, 0), CUDA_SUCCESS);
    let o = &h.outcomes()[0].1;
    assert!(
        o.metrics
            .absent_reason()
            .is_some_and(|r| r.contains("the kernel's handle cannot be queried")),
        "{:?}",
        o.metrics
    );
    h.obtain_function(&ADD_ONE_COUNTED);
    gpu().fail_func_attributes = true;
    let mut args = buf.args();
    assert_eq!(h.launch(&ADD_ONE_COUNTED, &mut args, 0), CUDA_SUCCESS);
    assert_eq!(buf.values(), vec![2; 16], "the application is unaffected");
    let o = &h.outcomes()[1].1;
    let why = o
        .metrics
        .absent_reason()
        .unwrap_or_else(|| panic!("{:?}", o.metrics));
    assert!(
        why.starts_with("counters_unavailable: `launch__registers_per_thread`: cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS) failed"),
        "{why}"
    );
    assert_eq!(
        h.launches(),
        2,
        "one run per launch: no pass was spent on them"
    );
}

#[test]
fn the_arena_holds_what_the_plan_captures_not_every_allocation() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    // 16 MiB the kernel's arguments do not name: watched, never captured.
    let other = h.alloc(16 << 20);
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    let o = &h.outcomes()[0].1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(o.footprint, Some(crate::policy::FootprintKind::Arguments));
    let held = h.be.ctx(CTX).arena.lock().device_bytes();
    assert!(held > 0, "the capture's staging came from the arena");
    assert!(
        held < 1 << 20,
        "the arena holds {held} bytes for a 32-byte snapshot beside a 16 MiB allocation"
    );
    assert_eq!(buf.values(), vec![1; 8]);
    let _ = other;
}

#[test]
fn a_copy_into_one_watched_allocation_makes_the_next_window_read_only_its_fingerprints() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    // Watched (the kernel's arguments name only `buf`).
    let a = h.alloc(1 << 20);
    let b = h.alloc(1 << 20);
    let mut buf = Buffer::new(&h, 8);
    let launch = |buf: &mut Buffer| {
        let mut args = buf.args();
        h.launch(&ADD_ONE, &mut args, 0);
    };
    launch(&mut buf);
    launch(&mut buf);
    let copy = |dst: usize| {
        // cuMemcpyHtoDAsync_v2's (dstDevice, srcHost, ByteCount, hStream).
        let p = [dst as u64, 0, 4096, 0];
        h.call(
            MEMCPY,
            c"cuMemcpyHtoDAsync_v2",
            p.as_ptr().cast(),
            c"",
            || CUDA_SUCCESS,
        );
    };
    copy(a + 4096);
    launch(&mut buf);
    // A copy into memory outside every allocation (a host buffer, say).
    let host = vec![0u8; 4096];
    copy(host.as_ptr() as usize);
    launch(&mut buf);
    let o: Vec<Outcome> = h.outcomes().into_iter().map(|(_, o)| o).collect();
    assert!(o.iter().all(|o| o.kind == OutcomeKind::Replayed), "{o:?}");
    assert_eq!(o[0].watched_bytes, 2 << 20);
    assert_eq!(o[1].carried_bytes, 2 << 20, "nothing written in between");
    assert_eq!(o[2].carried_bytes, 1 << 20, "`b` carried, `a` read again");
    assert_eq!(o[3].carried_bytes, 2 << 20);
    assert_eq!(buf.values(), vec![4; 8]);
    let _ = b;
}

#[test]
fn stream_work_names_the_range_it_writes() {
    let range = |name: &str, p: &[u64]| {
        // SAFETY: `p` holds the words of the call's parameter struct.
        unsafe { Writes::of(name).range(p.as_ptr().cast()) }
    };
    assert_eq!(
        range("cuMemcpyAsync_ptsz", &[0x1000, 9, 64, 0]),
        Some(Some((0x1000, 64)))
    );
    assert_eq!(range("cuMemcpyDtoH_v2", &[0x1000, 0x2000, 64]), Some(None));
    assert_eq!(
        range("cuMemcpyPeerAsync", &[0x1000, 1, 2, 3, 64, 0]),
        Some(Some((0x1000, 64)))
    );
    assert_eq!(
        range("cuMemsetD32Async", &[0x1000, 7, 10, 0]),
        Some(Some((0x1000, 40)))
    );
    // 3 rows of 5 16-bit elements, 64 bytes apart: the last row ends at 2 * 64 + 10.
    assert_eq!(
        range("cuMemsetD2D16_v2_ptds", &[0x1000, 64, 7, 5, 3]),
        Some(Some((0x1000, 138)))
    );
    assert_eq!(
        range("cuMemsetD2D8Async", &[0x1000, 64, 7, 5, 0, 0]),
        Some(None)
    );
    assert_eq!(
        range("cuStreamWriteValue64_v2", &[0, 0x1000, 1, 0]),
        Some(Some((0x1000, 8)))
    );
    assert_eq!(range("cuMemcpy2DAsync_v2", &[0, 0]), None);
    assert_eq!(range("cuLaunchHostFunc", &[0, 0]), None);
    assert_eq!(
        range("cuMemcpyAtoD_v2_ptds", &[0x1000, 0xa, 16, 64]),
        Some(Some((0x1000, 64)))
    );
    assert_eq!(
        range("cuMemcpyHtoAAsync_v2", &[0xa, 0, 9, 64, 0]),
        Some(None)
    );
    assert_eq!(
        range("cuMemcpyWithAttributesAsync", &[0x1000, 9, 64, 0, 0]),
        Some(Some((0x1000, 64)))
    );
}

#[test]
fn stream_work_names_the_device_range_it_reads() {
    let read = |name: &str, p: &[u64]| {
        // SAFETY: `p` holds the words of the call's parameter struct.
        unsafe { Writes::of(name).read_range(p.as_ptr().cast()) }
    };
    assert_eq!(
        read("cuMemcpyDtoDAsync_v2_ptsz", &[0x1000, 0x2000, 64, 0]),
        Some(Some((0x2000, 64)))
    );
    assert_eq!(
        read("cuMemcpyDtoHAsync_v2", &[0x1000, 0x2000, 64, 0]),
        Some(Some((0x2000, 64)))
    );
    // (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream)
    assert_eq!(
        read("cuMemcpyPeerAsync", &[0x1000, 1, 0x2000, 3, 64, 0]),
        Some(Some((0x2000, 64)))
    );
    // (dstArray, dstOffset, srcDevice, ByteCount)
    assert_eq!(
        read("cuMemcpyDtoA_v2", &[0xa, 16, 0x2000, 64]),
        Some(Some((0x2000, 64)))
    );
    assert_eq!(read("cuMemcpyAtoD_v2", &[0x1000, 0xa, 16, 64]), Some(None));
    assert_eq!(read("cuMemsetD32Async", &[0x1000, 7, 10, 0]), Some(None));
    assert_eq!(
        read("cuMemcpyHtoAAsync_v2", &[0xa, 0, 9, 64, 0]),
        Some(None)
    );
    assert_eq!(
        read("cuMemcpyDtoH", &[0x1000, 0x2000]),
        None,
        "32-bit pointers"
    );
    assert_eq!(read("cuMemcpy3DAsync_v2", &[0, 0]), None);
    // What a copy into host memory or an array writes: no device memory.
    assert_eq!(
        // SAFETY: as above.
        unsafe { Writes::of("cuMemcpyDtoA_v2").range([0xa_u64, 16, 0x2000, 64].as_ptr().cast()) },
        Some(None)
    );
}

#[test]
fn stream_work_names_the_stream_it_enqueues_on() {
    // Each call's parameter words, with 0x5700 where its CUDA 13 struct holds `hStream`.
    let stream = |name: &str, word: usize, len: usize| {
        let mut p = vec![0x1111u64; len];
        if word < len {
            p[word] = 0x5700;
        }
        // SAFETY: `p` holds (at least) the words of the call's parameter struct.
        unsafe { Writes::stream(name, p.as_ptr().cast()) }
    };
    for (name, word, len) in [
        ("cuMemcpyAsync", 3, 4),
        ("cuMemcpyHtoDAsync_v2_ptsz", 3, 4),
        ("cuMemsetD8Async", 3, 4),
        ("cuMemcpyPeerAsync", 5, 6),
        ("cuMemsetD2D32Async_ptsz", 5, 6),
        ("cuMemcpy2DAsync_v2", 1, 2),
        ("cuGraphLaunch_ptsz", 1, 2),
        ("cuLaunchGridAsync", 2, 3),
        ("cuMemcpy3DWithAttributesAsync", 2, 3),
        ("cuMemcpy3DBatchAsync_v2", 3, 4),
        ("cuMemcpyHtoAAsync_v2", 4, 5),
        ("cuMemcpyAtoHAsync_v2_ptsz", 4, 5),
        ("cuMemcpy3DBatchAsync", 4, 5),
        ("cuMemcpyBatchAsync_v2", 7, 8),
        ("cuMemcpyBatchAsync", 8, 9),
        ("cuStreamWriteValue32_v2", 0, 4),
        ("cuStreamBatchMemOp_v2_ptsz", 0, 4),
        ("cuLaunchHostFunc", 0, 3),
        ("cuStreamAddCallback", 0, 4),
    ] {
        assert_eq!(stream(name, word, len), Some(0x5700), "{name}");
    }
    // The default stream: an hStream of 0, or a synchronous call.
    let mut p = [0u64; 4];
    // SAFETY: the words of cuMemcpyAsync's parameters.
    let on = |name: &str, p: &[u64]| unsafe { Writes::stream(name, p.as_ptr().cast()) };
    assert_eq!(on("cuMemcpyAsync", &p), Some(CU_STREAM_LEGACY));
    assert_eq!(on("cuMemcpyAsync_ptsz", &p), Some(CU_STREAM_PER_THREAD));
    p[3] = 0x5700;
    assert_eq!(on("cuMemcpyHtoD_v2", &p), Some(CU_STREAM_LEGACY));
    assert_eq!(on("cuMemcpyAtoD_v2_ptds", &p), Some(CU_STREAM_PER_THREAD));
    assert_eq!(on("cuLaunchGrid", &p), Some(CU_STREAM_LEGACY));
    // Not decoded.
    assert_eq!(on("cuLaunchCooperativeKernelMultiDevice", &p), None);
}

/// Times every pass (a per-pass override of a context that is not started: the other tests
/// of this binary see no timing) and keeps the kernel times.
struct TimeEveryPass {
    passes: u32,
    timing: crate::Context,
    times: Arc<Mutex<Vec<Option<Duration>>>>,
}

impl ReplayPolicy for TimeEveryPass {
    type State = ();
    type PassState = crate::PassGuard;
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.passes, ())
    }
    fn on_pass(&self, pass: &mut crate::Pass<'_>, _: &mut (), guard: &mut crate::PassGuard) {
        *guard = pass.enable(&self.timing);
    }
    fn on_pass_end(&self, pass: &crate::PassReport<'_>, _: &mut (), _: &mut crate::PassGuard) {
        self.times.lock().push(pass.kernel_time);
    }
}

fn timed_run(clock: bool, kernel_ns: Option<(u64, u64)>) -> (Vec<Option<Duration>>, u32) {
    timed_run_ids(clock, kernel_ns, false)
}

fn timed_run_ids(
    clock: bool,
    kernel_ns: Option<(u64, u64)>,
    runtime_ids: bool,
) -> (Vec<Option<Duration>>, u32) {
    let times = Arc::new(Mutex::new(Vec::new()));
    let policy = TimeEveryPass {
        passes: 3,
        timing: crate::Context::new("kernel-clock test", &[crate::Service::DispatchTiming]),
        times: times.clone(),
    };
    let h = harness_clocked(policy, quick(), clock);
    gpu().kernel_ns = kernel_ns;
    gpu().runtime_ids = runtime_ids;
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 64);
    let mut args = buf.args();
    assert_eq!(h.launch(&ADD_ONE, &mut args, 0), CUDA_SUCCESS);
    assert_eq!(buf.values(), vec![1; 64], "one execution");
    let outcomes = h.outcomes();
    assert_eq!(outcomes[0].1.kind, OutcomeKind::Replayed);
    let t = times.lock().clone();
    assert_eq!(
        outcomes[0].1.pass_times, t,
        "the record has the policy's times"
    );
    let flushes = super::kernel_clock::fake::FAKE.lock().flushes;
    (t, flushes)
}

#[test]
fn pass_times_are_the_kernels_own_from_their_records() {
    let (times, flushes) = timed_run(true, Some((3_000, 5_000)));
    // Pass 1 is the application's launch (its call's correlation id), the relaunches the
    // backend's own; each spans the front end's submission too (the default); the events
    // would say 0.5 ms.
    let fe = super::kernel_clock::fake::FRONT_END_NS;
    assert_eq!(
        times,
        vec![
            Some(Duration::from_nanos(3_000 + fe)),
            Some(Duration::from_nanos(5_000 + fe)),
            Some(Duration::from_nanos(5_000 + fe)),
        ]
    );
    assert!(flushes >= 3, "a flush per timed pass: {flushes}");
}

#[test]
fn pass_one_finds_its_record_as_the_contexts_only_kernel_whatever_its_correlation_id() {
    // The record of the application's launch carries another id than its driver call (a
    // runtime launch's): it is still the only kernel of the context since the window released
    // the launch.
    let (times, _) = timed_run_ids(true, Some((3_000, 5_000)), true);
    let fe = super::kernel_clock::fake::FRONT_END_NS;
    assert_eq!(
        times[0],
        Some(Duration::from_nanos(3_000 + fe)),
        "{times:?}"
    );
    assert_eq!(times[1..], [Some(Duration::from_nanos(5_000 + fe)); 2]);
}

#[test]
fn without_kernel_records_pass_times_come_from_the_events() {
    // No activity API: the events' 0.5 ms.
    let (times, _) = timed_run(false, Some((3_000, 5_000)));
    assert_eq!(times, vec![Some(Duration::from_micros(500)); 3]);
    // Records never delivered: each pass waits its bounded time. The application's own pass
    // then takes its events' time; a relaunch records no start event while its record is due
    // (one event fewer per pass): no time, until the clock stops after `MISSES` in a row.
    let (times, _) = timed_run(true, None);
    assert_eq!(times, vec![Some(Duration::from_micros(500)), None, None]);
}
