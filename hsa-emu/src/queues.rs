//! Queues: creation with `amd_queue_t` layout, index functions, doorbells, a packet processor
//! per queue, kernel dispatch on worker threads, barriers, profiling timestamps, and intercept
//! queues (`hsa_amd_queue_intercept_create/register`, `runtime_queue_create_register`).
//!
//! A queue is a 256-byte, 64-byte-aligned `amd_queue_t` (the `hsa_queue_t` handed out is its
//! first field) and a ring of `size` 64-byte packets. The write index is
//! `amd_queue_t::write_dispatch_id`, the read index `read_dispatch_id`; the index functions are
//! plain atomics on those fields. The doorbell is a signal whose store hook wakes the queue's
//! packet processor (see [`processor`]).
//!
//! Deliberate limits (documented behaviour):
//! - `hsa_queue_destroy` stops the processor and waits at most 2 s for it; packets not yet
//!   processed are dropped (their completion signals are never decremented). A processor stuck
//!   in a kernel is detached and frees the queue memory when it finishes.
//! - `hsa_soft_queue_create` returns `HSA_STATUS_ERROR`: the emulator has no soft queues.
//! - `hsa_queue_inactivate` stops the processor; the queue stays valid until destroyed.
//! - Agent-dispatch packets and vendor packets other than the AMD barrier-value packet and the
//!   AQL profile extension's counter packets (`crate::aqlprofile`) complete without doing
//!   anything.
//! - Malformed packets are reported once per queue on stderr and completed, so applications do
//!   not hang. The queue error callback is called only for a dispatch of an AMDGPU kernel without
//!   a shadow, which puts the queue in an error state (see [`processor`]).
//! - Compute-unit masks and priorities are accepted and ignored.

mod intercept;
mod processor;
mod workers;

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use rocprof_replay_sys::*;

use crate::api::Tables;
use crate::ffi::{guard, guard_status, write_out};
use crate::topology::{DeviceKind, topology};

/// Smallest ring size in packets (`HSA_AGENT_INFO_QUEUE_MIN_SIZE` of a GPU).
pub(crate) const QUEUE_MIN_SIZE: u32 = 64;
/// Largest ring size in packets (`HSA_AGENT_INFO_QUEUE_MAX_SIZE` of a GPU).
pub(crate) const QUEUE_MAX_SIZE: u32 = 131_072;
/// How long `hsa_queue_destroy` waits for a packet processor to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// Byte offset of `write_dispatch_id` in `amd_queue_t`.
const WRITE_INDEX_OFFSET: usize = std::mem::offset_of!(amd_queue_t, write_dispatch_id);
/// Byte offset of `read_dispatch_id` in `amd_queue_t`.
const READ_INDEX_OFFSET: usize = std::mem::offset_of!(amd_queue_t, read_dispatch_id);

/// Fills the queue, profiling and intercept slots.
pub(crate) fn install(t: &mut Tables) {
    let c = &mut t.core;
    c.hsa_queue_create_fn = Some(queue_create);
    c.hsa_soft_queue_create_fn = Some(soft_queue_create);
    c.hsa_queue_destroy_fn = Some(queue_destroy);
    c.hsa_queue_inactivate_fn = Some(queue_inactivate);
    c.hsa_queue_load_read_index_scacquire_fn = Some(load_read_index_scacquire);
    c.hsa_queue_load_read_index_relaxed_fn = Some(load_read_index_relaxed);
    c.hsa_queue_load_write_index_scacquire_fn = Some(load_write_index_scacquire);
    c.hsa_queue_load_write_index_relaxed_fn = Some(load_write_index_relaxed);
    c.hsa_queue_store_write_index_relaxed_fn = Some(store_write_index_relaxed);
    c.hsa_queue_store_write_index_screlease_fn = Some(store_write_index_screlease);
    c.hsa_queue_cas_write_index_scacq_screl_fn = Some(cas_write_index_scacq_screl);
    c.hsa_queue_cas_write_index_scacquire_fn = Some(cas_write_index_scacquire);
    c.hsa_queue_cas_write_index_relaxed_fn = Some(cas_write_index_relaxed);
    c.hsa_queue_cas_write_index_screlease_fn = Some(cas_write_index_screlease);
    c.hsa_queue_add_write_index_scacq_screl_fn = Some(add_write_index_scacq_screl);
    c.hsa_queue_add_write_index_scacquire_fn = Some(add_write_index_scacquire);
    c.hsa_queue_add_write_index_relaxed_fn = Some(add_write_index_relaxed);
    c.hsa_queue_add_write_index_screlease_fn = Some(add_write_index_screlease);
    c.hsa_queue_store_read_index_relaxed_fn = Some(store_read_index_relaxed);
    c.hsa_queue_store_read_index_screlease_fn = Some(store_read_index_screlease);

    let a = &mut t.amd;
    a.hsa_amd_profiling_set_profiler_enabled_fn = Some(profiling_set_profiler_enabled);
    a.hsa_amd_profiling_async_copy_enable_fn = Some(profiling_async_copy_enable);
    a.hsa_amd_profiling_get_dispatch_time_fn = Some(profiling_get_dispatch_time);
    a.hsa_amd_profiling_get_async_copy_time_fn = Some(profiling_get_async_copy_time);
    a.hsa_amd_profiling_convert_tick_to_system_domain_fn = Some(profiling_convert_tick);
    a.hsa_amd_queue_cu_set_mask_fn = Some(queue_cu_set_mask);
    a.hsa_amd_queue_cu_get_mask_fn = Some(queue_cu_get_mask);
    a.hsa_amd_queue_set_priority_fn = Some(queue_set_priority);
    a.hsa_amd_queue_get_info_fn = Some(queue_get_info);
    intercept::install(t);
}

// ---- the queue object -------------------------------------------------------------------

/// Wakes a packet processor (doorbell) and tells `destroy` when it has stopped.
pub(super) struct Wake {
    state: Mutex<WakeState>,
    doorbell: Condvar,
    exit: Condvar,
}

struct WakeState {
    rings: u64,
    exited: bool,
}

impl Wake {
    fn new() -> Wake {
        Wake {
            state: Mutex::new(WakeState {
                rings: 0,
                exited: false,
            }),
            doorbell: Condvar::new(),
            exit: Condvar::new(),
        }
    }

    /// Wakes the processor (doorbell hook, stop request).
    pub(super) fn ring(&self) {
        let mut s = self.state.lock();
        s.rings = s.rings.wrapping_add(1);
        self.doorbell.notify_one();
    }

    /// Blocks for at most `slice` unless `idle()` turns false first.
    ///
    /// `idle` runs under the lock that [`Wake::ring`] takes, so a doorbell rung after it
    /// returned `true` is never missed.
    pub(super) fn sleep_while(&self, idle: impl Fn() -> bool, slice: Duration) {
        let mut s = self.state.lock();
        if idle() {
            self.doorbell.wait_for(&mut s, slice);
        }
    }

    /// Records that the processor has stopped.
    pub(super) fn mark_exited(&self) {
        let mut s = self.state.lock();
        s.exited = true;
        self.exit.notify_all();
    }

    /// Waits until the processor has stopped or `deadline` passes; whether it stopped.
    fn wait_exited(&self, deadline: Instant) -> bool {
        let mut s = self.state.lock();
        while !s.exited {
            if self.exit.wait_until(&mut s, deadline).timed_out() {
                return s.exited;
            }
        }
        true
    }
}

/// One queue: its `amd_queue_t`, ring and doorbell, and either a packet processor (hardware
/// queue) or interception state (proxy queue).
pub(super) struct Queue {
    amd: *mut amd_queue_t,
    ring: *mut aql_packet_t,
    size: u32,
    agent: hsa_agent_t,
    id: u64,
    doorbell: hsa_signal_t,
    pub(super) wake: Arc<Wake>,
    pub(super) stop: AtomicBool,
    /// Set once a malformed packet has been reported for this queue.
    pub(super) warned: AtomicBool,
    /// The error callback, its data, and the queue handle it reports (the proxy's, for the
    /// hardware queue under an intercept queue).
    error_callback: Mutex<Option<ErrorCallback>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Present for intercept (proxy) queues.
    intercept: Option<intercept::InterceptState>,
    /// The hardware queue under an intercept queue (not one a plain `hsa_queue_create` made).
    pub(super) under_proxy: AtomicBool,
}

// SAFETY: `amd` and `ring` are heap allocations owned by this object and freed only in Drop;
// every shared access to them goes through atomics (indices, headers, properties) or follows
// the AQL protocol (a slot's body is read only after acquiring its header).
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

impl Queue {
    /// Allocates the `amd_queue_t`, ring and doorbell (no hook, no processor yet).
    fn allocate(
        agent: hsa_agent_t,
        size: u32,
        type_: hsa_queue_type32_t,
        intercept: Option<intercept::InterceptState>,
    ) -> Result<Queue, hsa_status_t> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let amd_layout = std::alloc::Layout::new::<amd_queue_t>();
        let ring_layout = ring_layout(size);
        // SAFETY: non-zero-sized layout.
        let amd = unsafe { std::alloc::alloc_zeroed(amd_layout) }.cast::<amd_queue_t>();
        if amd.is_null() {
            return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
        }
        // SAFETY: non-zero-sized layout (size >= QUEUE_MIN_SIZE).
        let ring = unsafe { std::alloc::alloc_zeroed(ring_layout) }.cast::<aql_packet_t>();
        if ring.is_null() {
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(amd.cast(), amd_layout) };
            return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
        }
        for i in 0..size as usize {
            // SAFETY: `i < size`, inside the ring; slots are 64-byte aligned.
            unsafe {
                ring.add(i)
                    .cast::<u16>()
                    .write(HSA_PACKET_TYPE_INVALID as u16)
            };
        }
        let Some(doorbell) = crate::signals::create(0) else {
            // SAFETY: both allocated above with these layouts.
            unsafe {
                std::alloc::dealloc(ring.cast(), ring_layout);
                std::alloc::dealloc(amd.cast(), amd_layout);
            }
            return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `amd` is a fresh, zeroed, exclusively owned allocation.
        unsafe {
            let q = &mut *amd;
            q.hsa_queue.type_ = type_;
            q.hsa_queue.features =
                HSA_QUEUE_FEATURE_KERNEL_DISPATCH | HSA_QUEUE_FEATURE_AGENT_DISPATCH;
            q.hsa_queue.base_address = ring.cast();
            q.hsa_queue.doorbell_signal = doorbell;
            q.hsa_queue.size = size;
            q.hsa_queue.id = id;
            q.read_dispatch_id_field_base_byte_offset = READ_INDEX_OFFSET as u32;
        }
        Ok(Queue {
            amd,
            ring,
            size,
            agent,
            id,
            doorbell,
            wake: Arc::new(Wake::new()),
            stop: AtomicBool::new(false),
            warned: AtomicBool::new(false),
            error_callback: Mutex::new(None),
            thread: Mutex::new(None),
            intercept,
            under_proxy: AtomicBool::new(false),
        })
    }

    /// The `hsa_queue_t*` handed to the application.
    pub(super) fn public(&self) -> *mut hsa_queue_t {
        self.amd.cast()
    }

    /// Ring size in packets (the value this runtime allocated, not the user-visible field).
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    pub(super) fn size(&self) -> u32 {
        self.size
    }

    /// The doorbell signal.
    pub(super) fn doorbell(&self) -> hsa_signal_t {
        self.doorbell
    }

    /// The write index (`write_dispatch_id`).
    pub(super) fn write_index(&self) -> &AtomicU64 {
        // SAFETY: `amd` is live for `self`'s lifetime; the field is 8-byte aligned.
        unsafe { AtomicU64::from_ptr(&raw mut (*self.amd).write_dispatch_id) }
    }

    /// The read index (`read_dispatch_id`).
    pub(super) fn read_index(&self) -> &AtomicU64 {
        // SAFETY: as above.
        unsafe { AtomicU64::from_ptr(&raw mut (*self.amd).read_dispatch_id) }
    }

    /// `queue_properties` of the `amd_queue_t`.
    pub(super) fn properties(&self) -> &AtomicU32 {
        // SAFETY: as above; the field is 4-byte aligned.
        unsafe { AtomicU32::from_ptr(&raw mut (*self.amd).queue_properties) }
    }

    /// Whether dispatch timestamps are recorded.
    pub(super) fn profiling(&self) -> bool {
        self.properties().load(Ordering::Relaxed) & AMD_QUEUE_PROPERTIES_ENABLE_PROFILING != 0
    }

    /// The slot of packet `index`.
    pub(super) fn slot(&self, index: u64) -> *mut aql_packet_t {
        let i = (index & u64::from(self.size - 1)) as usize;
        // SAFETY: `i < size`, inside the ring.
        unsafe { self.ring.add(i) }
    }

    /// The header of packet `index`, as an atomic.
    pub(super) fn header(&self, index: u64) -> &AtomicU16 {
        // SAFETY: the slot is live for `self`'s lifetime and 64-byte aligned.
        unsafe { AtomicU16::from_ptr(self.slot(index).cast()) }
    }

    /// Reports a malformed packet once per queue on stderr.
    pub(super) fn warn_once(&self, what: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "hsa-emu: queue {}: {what}; the packet was completed without running (further problems on this queue are not reported)",
                self.id
            );
        }
    }

    /// Asks the processor to stop and waits for it (at most [`STOP_TIMEOUT`]).
    /// Reports a queue error: stderr, then the error callback (if any) with the queue handle
    /// the application holds. Called by the processor, which then stops (error state).
    pub(super) fn fail(&self, status: hsa_status_t, why: &str) {
        let report = *self.error_callback.lock();
        eprintln!(
            "hsa-emu: queue {}: {why}; the queue is now in its error state ({}); set {} to a library that exports the kernel's shadow",
            self.id,
            Status(status).name().unwrap_or("unknown status"),
            crate::shadow::SHADOW_ENV
        );
        if let Some(ErrorCallback {
            callback,
            data,
            queue,
        }) = report
        {
            // SAFETY: the application's callback with its own data and queue handle, as
            // ROCr calls it.
            unsafe { callback(status, queue as *mut hsa_queue_t, data as *mut c_void) };
        }
    }

    /// Sets the error callback reported with queue handle `queue`.
    pub(super) fn set_error_callback(
        &self,
        callback: hsa_queue_error_callback_t,
        data: *mut c_void,
        queue: *mut hsa_queue_t,
    ) {
        *self.error_callback.lock() = callback.map(|callback| ErrorCallback {
            callback,
            data: data as usize,
            queue: queue as usize,
        });
    }

    fn stop_processor(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.ring();
        let Some(handle) = self.thread.lock().take() else {
            return;
        };
        if handle.thread().id() == std::thread::current().id() {
            return; // destroyed from its own processor (e.g. by a kernel): nothing to join
        }
        if self.wake.wait_exited(Instant::now() + STOP_TIMEOUT) {
            let _ = handle.join();
        } else {
            eprintln!(
                "hsa-emu: queue {}: packet processor still busy after {:?}; detached",
                self.id, STOP_TIMEOUT
            );
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: allocated in `allocate` with these layouts; no thread uses them any more
        // (the processor holds an `Arc` to this object until it exits).
        unsafe {
            std::alloc::dealloc(self.ring.cast(), ring_layout(self.size));
            std::alloc::dealloc(self.amd.cast(), std::alloc::Layout::new::<amd_queue_t>());
        }
    }
}

/// A queue's error callback (`hsa_queue_create`'s `callback` and `data`).
#[derive(Clone, Copy)]
struct ErrorCallback {
    callback: unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void),
    data: usize,
    queue: usize,
}

fn ring_layout(size: u32) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(size as usize * AQL_PACKET_SIZE, AQL_PACKET_SIZE)
        .expect("ring size is bounded by QUEUE_MAX_SIZE")
}

/// Every live queue handed to the application, by its `hsa_queue_t*` address.
static QUEUES: RwLock<BTreeMap<usize, Arc<Queue>>> = RwLock::new(BTreeMap::new());

/// The live queue behind an application pointer.
pub(super) fn lookup(q: *const hsa_queue_t) -> Option<Arc<Queue>> {
    QUEUES.read().get(&(q as usize)).cloned()
}

fn register(q: Arc<Queue>) -> *mut hsa_queue_t {
    let p = q.public();
    QUEUES.write().insert(p as usize, q);
    p
}

/// Checks the arguments shared by `hsa_queue_create` and the intercept variant.
fn validate_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    out: *mut *mut hsa_queue_t,
) -> Result<(), hsa_status_t> {
    if out.is_null() {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let Some(a) = topology().agent(agent) else {
        return Err(HSA_STATUS_ERROR_INVALID_AGENT);
    };
    if a.kind != DeviceKind::Gpu {
        return Err(HSA_STATUS_ERROR_INVALID_QUEUE_CREATION);
    }
    if !size.is_power_of_two() || !(QUEUE_MIN_SIZE..=QUEUE_MAX_SIZE).contains(&size) {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    if !matches!(
        type_,
        HSA_QUEUE_TYPE_MULTI | HSA_QUEUE_TYPE_SINGLE | HSA_QUEUE_TYPE_COOPERATIVE
    ) {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    Ok(())
}

/// Creates a hardware-like queue with a running packet processor (not registered).
fn create_hardware(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
) -> Result<Arc<Queue>, hsa_status_t> {
    let q = Arc::new(Queue::allocate(agent, size, type_, None)?);
    let wake = q.wake.clone();
    crate::signals::set_store_hook(q.doorbell, Box::new(move |_| wake.ring()));
    let runner = q.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("hsa-emu-queue-{}", q.id))
        .spawn(move || processor::run(runner));
    match spawned {
        Ok(handle) => {
            *q.thread.lock() = Some(handle);
            Ok(q)
        }
        Err(_) => {
            crate::signals::destroy(q.doorbell);
            Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES)
        }
    }
}

/// Stops a queue (and, for a proxy, its underlying queue) and releases its doorbell.
fn destroy_queue(q: &Queue) {
    q.stop_processor();
    if let Some(state) = &q.intercept {
        destroy_queue(state.real());
    }
    crate::signals::destroy(q.doorbell);
}

/// Destroys every queue still registered (the last `hsa_shut_down`): stops each packet
/// processor (at most 2 s each), drops pending packets and releases doorbells. Pointers the
/// application still holds become invalid, as with ROCr.
pub(crate) fn shutdown() {
    let all = std::mem::take(&mut *QUEUES.write());
    for q in all.values() {
        destroy_queue(q);
    }
}

// ---- core API -----------------------------------------------------------------------------

unsafe extern "C" fn queue_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: hsa_queue_error_callback_t,
    data: *mut c_void,
    _private_segment_size: u32,
    _group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    guard_status(|| {
        if let Err(e) = validate_create(agent, size, type_, queue) {
            return e;
        }
        if crate::faults::faults().queue_create_fails() {
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        match create_hardware(agent, size, type_) {
            Ok(q) => {
                q.set_error_callback(callback, data, q.public());
                let p = register(q);
                // SAFETY: `queue` is non-null (validated) and writable per the API contract.
                unsafe { queue.write(p) };
                HSA_STATUS_SUCCESS
            }
            Err(e) => e,
        }
    })
}

/// Soft queues are not supported: always `HSA_STATUS_ERROR`.
unsafe extern "C" fn soft_queue_create(
    _region: hsa_region_t,
    _size: u32,
    _type: hsa_queue_type32_t,
    _features: u32,
    _doorbell_signal: hsa_signal_t,
    _queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    HSA_STATUS_ERROR
}

unsafe extern "C" fn queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t {
    guard_status(|| {
        if queue.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some(q) = QUEUES.write().remove(&(queue as usize)) else {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        };
        destroy_queue(&q);
        HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn queue_inactivate(queue: *mut hsa_queue_t) -> hsa_status_t {
    guard_status(|| {
        if queue.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some(q) = lookup(queue) else {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        };
        q.stop_processor();
        if let Some(state) = &q.intercept {
            state.real().stop_processor();
        }
        HSA_STATUS_SUCCESS
    })
}

/// The index field at `offset` of the `amd_queue_t` behind `q`, or `None` for a bad pointer.
///
/// The index functions are the producers' hot path, so they do not look the queue up: like
/// ROCr they trust a non-null, aligned pointer to be a queue of this runtime.
fn index_field<'a>(q: *const hsa_queue_t, offset: usize) -> Option<&'a AtomicU64> {
    if q.is_null() || (q as usize) % std::mem::align_of::<u64>() != 0 {
        return None;
    }
    // SAFETY: per the API contract `q` is the `hsa_queue_t` at the start of a live
    // `amd_queue_t`; `offset` is a u64 field inside it, 8-byte aligned.
    Some(unsafe { AtomicU64::from_ptr(q.cast::<u8>().add(offset).cast_mut().cast()) })
}

macro_rules! load_index {
    ($name:ident, $offset:expr, $order:expr) => {
        unsafe extern "C" fn $name(queue: *const hsa_queue_t) -> u64 {
            guard(0, || {
                index_field(queue, $offset).map_or(0, |f| f.load($order))
            })
        }
    };
}
load_index!(
    load_read_index_scacquire,
    READ_INDEX_OFFSET,
    Ordering::Acquire
);
load_index!(
    load_read_index_relaxed,
    READ_INDEX_OFFSET,
    Ordering::Relaxed
);
load_index!(
    load_write_index_scacquire,
    WRITE_INDEX_OFFSET,
    Ordering::Acquire
);
load_index!(
    load_write_index_relaxed,
    WRITE_INDEX_OFFSET,
    Ordering::Relaxed
);

macro_rules! store_index {
    ($name:ident, $offset:expr, $order:expr) => {
        unsafe extern "C" fn $name(queue: *const hsa_queue_t, value: u64) {
            guard((), || {
                if let Some(f) = index_field(queue, $offset) {
                    f.store(value, $order)
                }
            })
        }
    };
}
store_index!(
    store_write_index_relaxed,
    WRITE_INDEX_OFFSET,
    Ordering::Relaxed
);
store_index!(
    store_write_index_screlease,
    WRITE_INDEX_OFFSET,
    Ordering::Release
);
store_index!(
    store_read_index_relaxed,
    READ_INDEX_OFFSET,
    Ordering::Relaxed
);
store_index!(
    store_read_index_screlease,
    READ_INDEX_OFFSET,
    Ordering::Release
);

macro_rules! cas_index {
    ($name:ident, $success:expr, $failure:expr) => {
        unsafe extern "C" fn $name(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64 {
            guard(0, || {
                index_field(queue, WRITE_INDEX_OFFSET).map_or(0, |f| {
                    match f.compare_exchange(expected, value, $success, $failure) {
                        Ok(v) | Err(v) => v,
                    }
                })
            })
        }
    };
}
cas_index!(
    cas_write_index_scacq_screl,
    Ordering::AcqRel,
    Ordering::Acquire
);
cas_index!(
    cas_write_index_scacquire,
    Ordering::Acquire,
    Ordering::Acquire
);
cas_index!(
    cas_write_index_relaxed,
    Ordering::Relaxed,
    Ordering::Relaxed
);
cas_index!(
    cas_write_index_screlease,
    Ordering::Release,
    Ordering::Relaxed
);

macro_rules! add_index {
    ($name:ident, $order:expr) => {
        unsafe extern "C" fn $name(queue: *const hsa_queue_t, value: u64) -> u64 {
            guard(0, || {
                index_field(queue, WRITE_INDEX_OFFSET).map_or(0, |f| f.fetch_add(value, $order))
            })
        }
    };
}
add_index!(add_write_index_scacq_screl, Ordering::AcqRel);
add_index!(add_write_index_scacquire, Ordering::Acquire);
add_index!(add_write_index_relaxed, Ordering::Relaxed);
add_index!(add_write_index_screlease, Ordering::Release);

// ---- AMD extension: profiling and queue attributes ------------------------------------------

unsafe extern "C" fn profiling_set_profiler_enabled(
    queue: *mut hsa_queue_t,
    enable: c_int,
) -> hsa_status_t {
    guard_status(|| {
        let Some(q) = lookup(queue) else {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        };
        let set = |q: &Queue| {
            if enable != 0 {
                q.properties()
                    .fetch_or(AMD_QUEUE_PROPERTIES_ENABLE_PROFILING, Ordering::AcqRel);
            } else {
                q.properties()
                    .fetch_and(!AMD_QUEUE_PROPERTIES_ENABLE_PROFILING, Ordering::AcqRel);
            }
        };
        set(&q);
        if let Some(state) = &q.intercept {
            set(state.real());
        }
        HSA_STATUS_SUCCESS
    })
}

/// Copy timestamps are always recorded by the copy engine: enabling is a no-op.
unsafe extern "C" fn profiling_async_copy_enable(_enable: bool) -> hsa_status_t {
    HSA_STATUS_SUCCESS
}

/// Start/end ticks recorded in `signal`, after validating it.
fn signal_times(signal: hsa_signal_t) -> Result<(u64, u64), hsa_status_t> {
    if signal.handle == 0 || !crate::signals::is_valid(signal) {
        return Err(HSA_STATUS_ERROR_INVALID_SIGNAL);
    }
    Ok(crate::signals::timestamps(signal))
}

unsafe extern "C" fn profiling_get_dispatch_time(
    agent: hsa_agent_t,
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_dispatch_time_t,
) -> hsa_status_t {
    guard_status(|| {
        if topology().agent(agent).is_none() {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        if time.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match signal_times(signal) {
            // SAFETY: non-null, writable per the API contract.
            Ok((start, end)) => unsafe {
                write_out(
                    time.cast(),
                    hsa_amd_profiling_dispatch_time_t { start, end },
                )
            },
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn profiling_get_async_copy_time(
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_async_copy_time_t,
) -> hsa_status_t {
    guard_status(|| {
        if time.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match signal_times(signal) {
            // SAFETY: non-null, writable per the API contract.
            Ok((start, end)) => unsafe {
                write_out(
                    time.cast(),
                    hsa_amd_profiling_async_copy_time_t { start, end },
                )
            },
            Err(e) => e,
        }
    })
}

/// Agent ticks are already system ticks (see `clock`): the identity.
unsafe extern "C" fn profiling_convert_tick(
    agent: hsa_agent_t,
    agent_tick: u64,
    system_tick: *mut u64,
) -> hsa_status_t {
    guard_status(|| {
        if topology().agent(agent).is_none() {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        // SAFETY: null is rejected by write_out; otherwise writable per the API contract.
        unsafe { write_out(system_tick.cast(), agent_tick) }
    })
}

/// Accepted and ignored: every work-group may run on any CPU.
unsafe extern "C" fn queue_cu_set_mask(
    queue: *const hsa_queue_t,
    count: u32,
    mask: *const u32,
) -> hsa_status_t {
    guard_status(|| {
        if lookup(queue).is_none() {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        }
        if count != 0 && mask.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        HSA_STATUS_SUCCESS
    })
}

/// Reports every compute unit as enabled (`count` bits set).
unsafe extern "C" fn queue_cu_get_mask(
    queue: *const hsa_queue_t,
    count: u32,
    mask: *mut u32,
) -> hsa_status_t {
    guard_status(|| {
        if lookup(queue).is_none() {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        }
        if count == 0 || mask.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let words = count.div_ceil(32) as usize;
        for w in 0..words {
            let bits = (count as usize - w * 32).min(32);
            let value = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            // SAFETY: the caller provides `ceil(count / 32)` writable words.
            unsafe { mask.add(w).write_unaligned(value) };
        }
        HSA_STATUS_SUCCESS
    })
}

/// Accepted and ignored: all queues are served alike.
unsafe extern "C" fn queue_set_priority(
    queue: *mut hsa_queue_t,
    priority: hsa_amd_queue_priority_t,
) -> hsa_status_t {
    guard_status(|| {
        if lookup(queue).is_none() {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        }
        if priority > HSA_AMD_QUEUE_PRIORITY_HIGH {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        HSA_STATUS_SUCCESS
    })
}

/// `HSA_AMD_QUEUE_INFO_AGENT` (an `hsa_agent_t`) and `HSA_AMD_QUEUE_INFO_DOORBELL_ID` (a
/// `uint64_t`; the queue id, unique per process).
unsafe extern "C" fn queue_get_info(
    queue: *mut hsa_queue_t,
    attribute: hsa_queue_info_attribute_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(q) = lookup(queue) else {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        };
        match attribute {
            // SAFETY: null is rejected by write_out; otherwise writable per the API contract.
            HSA_AMD_QUEUE_INFO_AGENT => unsafe { write_out(value, q.agent) },
            // SAFETY: as above.
            HSA_AMD_QUEUE_INFO_DOORBELL_ID => unsafe { write_out(value, q.id) },
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

#[cfg(test)]
mod tests;
