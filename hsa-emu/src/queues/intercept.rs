//! Intercept queues (table-only AMD functions, HSA-ABI.md §5).
//!
//! `hsa_amd_queue_intercept_create` makes a proxy queue (own `amd_queue_t`, ring, doorbell and
//! indices, no packet processor) on top of a hidden hardware queue. A store to the proxy's
//! doorbell runs, on the storing thread, [`process`]: every written packet from the proxy's
//! read index on is copied out, its slot set INVALID and the read index advanced (the proxy's
//! read index means "intercepted", not "completed"), then the newest registered handler sees it
//! with its proxy index as `user_pkt_index`. The handler's `writer` forwards to the next older
//! handler; the oldest level copies the packets into the hardware queue and rings its doorbell.
//! With no handler, packets go straight to the hardware queue.
//!
//! `writer` is a bare C function, so the chain position lives in a thread-local frame that is
//! saved and restored around every handler call: a handler may submit to another intercept
//! queue, or to its own, from inside its callback. A per-queue "processing" flag makes a nested
//! or concurrent doorbell store leave the work to the thread already processing, which picks up
//! the new packets before it returns.
//!
//! `hsa_amd_runtime_queue_create_register` records its callback, but the emulator creates no
//! internal queues, so the callback is never called.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rocprof_replay_sys::*;

use super::{Queue, create_hardware, lookup, register, validate_create};
use crate::api::Tables;
use crate::ffi::{guard, guard_status};

/// How long copying into the hardware queue waits for room before dropping packets.
const ROOM_TIMEOUT: Duration = Duration::from_secs(10);

/// Fills the intercept slots.
pub(super) fn install(t: &mut Tables) {
    t.amd.hsa_amd_queue_intercept_create_fn = Some(intercept_create);
    t.amd.hsa_amd_queue_intercept_register_fn = Some(intercept_register);
    t.amd.hsa_amd_runtime_queue_create_register_fn = Some(runtime_queue_create_register);
}

/// The C handler type without its `Option`.
type HandlerFn = unsafe extern "C" fn(
    *const c_void,
    u64,
    u64,
    *mut c_void,
    hsa_amd_queue_intercept_packet_writer,
);

/// One registered handler.
#[derive(Clone, Copy)]
struct Handler {
    callback: HandlerFn,
    data: *mut c_void,
}

// SAFETY: `data` is an opaque value owned by the tool that registered the handler; the runtime
// only passes it back to the tool's own callback (on any thread, as ROCr does).
unsafe impl Send for Handler {}
// SAFETY: as above; a `Handler` is never mutated after registration.
unsafe impl Sync for Handler {}

/// What a proxy queue has beyond a plain queue.
pub(in crate::queues) struct InterceptState {
    real: Arc<Queue>,
    /// Oldest first; replaced as a whole on registration so a snapshot is one `Arc` clone.
    handlers: RwLock<Arc<Vec<Handler>>>,
    processing: AtomicBool,
    pending: AtomicBool,
}

impl InterceptState {
    /// The hidden hardware queue packets are forwarded to.
    pub(in crate::queues) fn real(&self) -> &Queue {
        &self.real
    }
}

/// Where a `writer` call forwards to: a handler level of a proxy, or the hardware queue.
#[derive(Clone, Copy)]
struct Frame {
    handlers: *const Vec<Handler>,
    /// Level of the handler being called (index into `handlers`).
    level: usize,
    user_pkt_index: u64,
    real: *const Queue,
}

thread_local! {
    static FRAME: Cell<Option<Frame>> = const { Cell::new(None) };
}

/// Creates the proxy and its hardware queue; registers the proxy.
pub(super) unsafe extern "C" fn intercept_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    _callback: hsa_queue_error_callback_t,
    _data: *mut c_void,
    _private_segment_size: u32,
    _group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    guard_status(|| {
        if let Err(e) = validate_create(agent, size, type_, queue) {
            return e;
        }
        let real = match create_hardware(agent, size, type_) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let state = InterceptState {
            real: real.clone(),
            handlers: RwLock::new(Arc::new(Vec::new())),
            processing: AtomicBool::new(false),
            pending: AtomicBool::new(false),
        };
        let proxy = match Queue::allocate(agent, size, type_, Some(state)) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                super::destroy_queue(&real);
                return e;
            }
        };
        let weak: Weak<Queue> = Arc::downgrade(&proxy);
        crate::signals::set_store_hook(
            proxy.doorbell(),
            Box::new(move |_| {
                if let Some(p) = weak.upgrade() {
                    process(&p);
                }
            }),
        );
        let p = register(proxy);
        // SAFETY: `queue` is non-null (validated) and writable per the API contract.
        unsafe { queue.write(p) };
        HSA_STATUS_SUCCESS
    })
}

pub(super) unsafe extern "C" fn intercept_register(
    queue: *mut hsa_queue_t,
    callback: hsa_amd_queue_intercept_handler,
    user_data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(q) = lookup(queue) else {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        };
        let Some(state) = &q.intercept else {
            return HSA_STATUS_ERROR_INVALID_QUEUE;
        };
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let mut handlers = state.handlers.write();
        let mut next = Vec::clone(&handlers);
        next.push(Handler {
            callback,
            data: user_data,
        });
        *handlers = Arc::new(next);
        HSA_STATUS_SUCCESS
    })
}

/// Registered runtime-queue notifiers (never called: the emulator has no internal queues).
#[expect(
    dead_code,
    reason = "recorded only: the emulator creates no internal queues to report"
)]
struct Notifier(hsa_amd_runtime_queue_notifier, *mut c_void);
// SAFETY: opaque tool data, only stored.
unsafe impl Send for Notifier {}
static NOTIFIERS: Mutex<Vec<Notifier>> = Mutex::new(Vec::new());

pub(super) unsafe extern "C" fn runtime_queue_create_register(
    callback: hsa_amd_runtime_queue_notifier,
    user_data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        if callback.is_none() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        NOTIFIERS.lock().push(Notifier(callback, user_data));
        HSA_STATUS_SUCCESS
    })
}

/// Intercepts every packet written to `proxy` (the doorbell hook, on the storing thread).
fn process(proxy: &Queue) {
    let Some(state) = &proxy.intercept else {
        return;
    };
    // Announce first, then try to take over: a thread that is finishing sees `pending`.
    state.pending.store(true, Ordering::SeqCst);
    loop {
        if state.processing.swap(true, Ordering::SeqCst) {
            return; // another frame (this thread, nested, or another thread) will pick it up
        }
        state.pending.store(false, Ordering::SeqCst);
        drain(proxy, state);
        state.processing.store(false, Ordering::SeqCst);
        if !state.pending.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// Hands each written packet of the proxy to the handler chain.
fn drain(proxy: &Queue, state: &InterceptState) {
    // Packets written together (one doorbell for several) reach the handler as one batch, as
    // with ROCr, so tools see multi-packet submissions.
    const MAX_BATCH: usize = 32;
    let mut batch = [aql_packet_t {
        bytes: [0; AQL_PACKET_SIZE],
    }; MAX_BATCH];
    loop {
        let read = proxy.read_index().load(Ordering::Relaxed);
        let write = proxy.write_index().load(Ordering::Acquire);
        let mut n = 0usize;
        while n < MAX_BATCH && read + (n as u64) < write {
            let index = read + n as u64;
            let header = proxy.header(index).load(Ordering::Acquire);
            if header_type(header) == HSA_PACKET_TYPE_INVALID {
                break; // reserved but not written yet: its producer will ring again
            }
            // SAFETY: the header was acquire-loaded as valid, so the body is complete.
            batch[n] = unsafe { proxy.slot(index).read() };
            proxy
                .header(index)
                .store(HSA_PACKET_TYPE_INVALID as u16, Ordering::Release);
            n += 1;
        }
        if n == 0 {
            return;
        }
        proxy.read_index().store(read + n as u64, Ordering::Release);
        let handlers = state.handlers.read().clone();
        let pkts = batch.as_ptr().cast::<c_void>();
        match handlers.len() {
            0 => submit(&state.real, pkts, n as u64),
            levels => {
                let frame = Frame {
                    handlers: Arc::as_ptr(&handlers),
                    level: levels - 1,
                    user_pkt_index: read,
                    real: Arc::as_ptr(&state.real),
                };
                call_handler(frame, pkts, n as u64);
            }
        }
    }
}

/// Calls the handler at `frame.level` with `frame` as the thread's writer context.
fn call_handler(frame: Frame, pkts: *const c_void, count: u64) {
    // SAFETY: the caller keeps the handler list alive for the call (an `Arc` on its stack).
    let h = unsafe { (&*frame.handlers)[frame.level] };
    let saved = FRAME.replace(Some(frame));
    // SAFETY: calling the tool's handler with the documented arguments; `writer` is only
    // meaningful while this frame is installed.
    unsafe { (h.callback)(pkts, count, frame.user_pkt_index, h.data, Some(writer)) };
    FRAME.set(saved);
}

/// The `writer` handed to handlers: forwards to the next older handler, or to the hardware
/// queue from the oldest one.
unsafe extern "C" fn writer(pkts: *const c_void, count: u64) {
    guard((), || {
        let Some(frame) = FRAME.get() else {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "hsa-emu: an intercept writer was called outside its handler; packets dropped"
                );
            }
            return;
        };
        if pkts.is_null() || count == 0 {
            return;
        }
        if frame.level == 0 {
            // SAFETY: the proxy (which owns `real`) is alive while its handlers run.
            submit(unsafe { &*frame.real }, pkts, count);
        } else {
            call_handler(
                Frame {
                    level: frame.level - 1,
                    ..frame
                },
                pkts,
                count,
            );
        }
    })
}

/// Copies `count` packets into the hardware queue `q` and rings its doorbell. INVALID
/// packets are skipped. Waits at most [`ROOM_TIMEOUT`] for room, then drops the rest.
fn submit(q: &Queue, pkts: *const c_void, count: u64) {
    let src = pkts.cast::<u8>();
    let size = u64::from(q.size());
    let mut i = 0u64;
    let mut last = None;
    while i < count {
        // A run of valid packets, at most a ring's worth, reserved together so that
        // multi-packet submissions stay contiguous.
        // SAFETY: the handler passed `count` packets of 64 bytes.
        let header_of =
            |k: u64| unsafe { src.add((k * 64) as usize).cast::<u16>().read_unaligned() };
        if header_type(header_of(i)) == HSA_PACKET_TYPE_INVALID {
            i += 1;
            continue;
        }
        let mut n = 1;
        while i + n < count && n < size && header_type(header_of(i + n)) != HSA_PACKET_TYPE_INVALID
        {
            n += 1;
        }
        let Some(base) = reserve(q, n) else {
            eprintln!(
                "hsa-emu: intercept queue: no room in the hardware queue for {:?}; {} packet(s) dropped",
                ROOM_TIMEOUT,
                count - i
            );
            break;
        };
        for k in 0..n {
            // SAFETY: packet `i + k` of the caller's array; the reserved slot `base + k` is
            // ours until its header is stored.
            unsafe {
                let from = src.add(((i + k) * 64) as usize);
                let to = q.slot(base + k).cast::<u8>();
                std::ptr::copy_nonoverlapping(from.add(4), to.add(4), 60);
                let first = from.cast::<u32>().read_unaligned();
                AtomicU32::from_ptr(to.cast()).store(first, Ordering::Release);
            }
        }
        last = Some(base + n - 1);
        i += n;
    }
    if let Some(last) = last {
        crate::signals::store(q.doorbell(), last as i64);
    }
}

/// Reserves `n` consecutive slots of `q` once there is room; `None` after [`ROOM_TIMEOUT`].
fn reserve(q: &Queue, n: u64) -> Option<u64> {
    let size = u64::from(q.size());
    let deadline = Instant::now() + ROOM_TIMEOUT;
    let mut backoff = Duration::from_micros(20);
    loop {
        let write = q.write_index().load(Ordering::Acquire);
        let read = q.read_index().load(Ordering::Acquire);
        if write.wrapping_sub(read).saturating_add(n) <= size {
            if q.write_index()
                .compare_exchange(write, write + n, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(write);
            }
            continue;
        }
        if Instant::now() >= deadline || q.stop.load(Ordering::Acquire) {
            return None;
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(1));
    }
}
