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
//! # A full hardware queue
//!
//! As in ROCr (`InterceptQueue::Submit`), the final copy into the hardware queue never blocks
//! and never drops a packet:
//!
//! - One slot of the hardware ring is kept free for a *retry barrier* unless one is already in
//!   the ring. The valid packets of one `writer` call go in together when they fit next to that
//!   slot. Otherwise they go, in order, to the proxy's *overflow* buffer, except that a call
//!   with at least a ring's worth of packets puts in what fits first. While the overflow buffer
//!   holds packets, later `writer` calls append to it, so the order is kept.
//! - When packets overflow and no retry is pending, a barrier-AND packet (barrier bit set, fence
//!   scopes NONE, no dependencies) goes into the kept slot. Its completion signal belongs to
//!   the proxy and is set to 1 first. When the hardware queue reaches the barrier, the signal
//!   drops to 0. Its store hook, on the packet-processor thread, calls no handler: it schedules
//!   a retry on the runtime's async thread (the `hsa_amd_async_function` thread, where ROCr's
//!   async-events thread re-runs the proxy). The retry clears the pending flag and runs
//!   [`process`] for the proxy. If the proxy is gone or stopped by then, the retry does nothing.
//! - [`process`] first moves what fits of the overflow buffer into the hardware queue (still
//!   keeping the retry slot). If packets remain, it makes sure a retry is pending and returns
//!   without intercepting more: new packets stay in the proxy's ring and its read index does
//!   not move, so producers see the proxy fill up (ordinary AQL back-pressure). Only an empty
//!   overflow buffer lets it intercept new packets and call handlers, and it stops after a
//!   handler call that left packets in the overflow buffer.
//! - A retry that finds another thread processing the proxy (e.g. one blocked in a handler)
//!   only sets the pending flag; that thread flushes the overflow buffer once its handler
//!   returns.
//! - `hsa_queue_destroy` drops the overflow buffer with the other unprocessed packets (their
//!   completion signals are never decremented) and destroys the retry signal when the proxy
//!   is freed. `hsa_queue_inactivate` stops the hardware queue: a pending retry never fires,
//!   and overflowed packets stay where they are.
//!
//! `hsa_amd_runtime_queue_create_register` records its callback, but the emulator creates no
//! internal queues, so the callback is never called.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, RwLock};
use rocprof_replay_sys::*;

use super::{Queue, create_hardware, lookup, register, validate_create};
use crate::api::Tables;
use crate::ffi::{guard, guard_status};

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
    /// Packets the hardware queue had no room for, and whether a retry barrier is in its ring.
    /// Held while writing into the hardware queue, so its writes are serialised.
    overflow: Mutex<Overflow>,
    /// Completion signal of the retry barriers (1 while one is in the ring).
    retry_signal: hsa_signal_t,
}

/// The proxy's overflow buffer.
struct Overflow {
    /// Oldest first.
    packets: VecDeque<aql_packet_t>,
    /// A retry barrier is in the hardware ring, or its retry is scheduled and has not run yet.
    retry_pending: bool,
    /// Ring index of the latest retry barrier.
    retry_index: u64,
}

impl InterceptState {
    /// The hidden hardware queue packets are forwarded to.
    pub(in crate::queues) fn real(&self) -> &Queue {
        &self.real
    }

    /// Packets waiting in the overflow buffer.
    #[cfg(test)]
    pub(in crate::queues) fn overflow_len(&self) -> usize {
        self.overflow.lock().packets.len()
    }

    /// Whether a retry barrier is in the ring or its retry has not run yet.
    #[cfg(test)]
    pub(in crate::queues) fn retry_pending(&self) -> bool {
        self.overflow.lock().retry_pending
    }

    /// The retry barriers' completion signal.
    #[cfg(test)]
    pub(in crate::queues) fn retry_signal(&self) -> hsa_signal_t {
        self.retry_signal
    }
}

impl Drop for InterceptState {
    /// Runs when the proxy is freed: its hardware queue is stopped by then (or, if never
    /// started, never processes the retry barrier), so nothing completes the signal any more.
    fn drop(&mut self) {
        crate::signals::destroy(self.retry_signal);
    }
}

/// Where a `writer` call forwards to: a handler level of a proxy, or the hardware queue.
#[derive(Clone, Copy)]
struct Frame {
    handlers: *const Vec<Handler>,
    /// Level of the handler being called (index into `handlers`).
    level: usize,
    user_pkt_index: u64,
    /// The proxy's state (its hardware queue and overflow buffer).
    state: *const InterceptState,
}

thread_local! {
    static FRAME: Cell<Option<Frame>> = const { Cell::new(None) };
}

/// Creates the proxy and its hardware queue; registers the proxy.
pub(super) unsafe extern "C" fn intercept_create(
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
        if crate::faults::faults().queue_intercept_fails() {
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        let real = match create_hardware(agent, size, type_) {
            Ok(r) => r,
            Err(e) => return e,
        };
        real.under_proxy.store(true, Ordering::Relaxed);
        let Some(retry_signal) = crate::signals::create(0) else {
            super::destroy_queue(&real);
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        };
        let state = InterceptState {
            real: real.clone(),
            handlers: RwLock::new(Arc::new(Vec::new())),
            processing: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            overflow: Mutex::new(Overflow {
                packets: VecDeque::new(),
                retry_pending: false,
                retry_index: 0,
            }),
            retry_signal,
        };
        // On failure `state` is dropped with the error, which destroys `retry_signal`.
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
        // A retry barrier completed: the hardware queue has room again. This runs on the
        // packet-processor thread, which must not call handlers: hand over to the async thread.
        let weak: Weak<Queue> = Arc::downgrade(&proxy);
        crate::signals::set_store_hook(
            retry_signal,
            Box::new(move |value| {
                if value == 0 {
                    schedule_retry(weak.clone());
                }
            }),
        );
        // Errors of the hardware queue are the proxy's: the application only knows the proxy.
        real.set_error_callback(callback, data, proxy.public());
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

/// Intercepts every packet written to `proxy` (the doorbell hook, on the storing thread; the
/// retry, on the async thread).
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

/// Flushes the overflow buffer, then hands each written packet of the proxy to the handler
/// chain. While packets remain in the overflow buffer it intercepts nothing (they stay in the
/// proxy's ring); once a handler call overflows, it stops and leaves the rest to the retry.
fn drain(proxy: &Queue, state: &InterceptState) {
    // Packets written together (one doorbell for several) reach the handler as one batch, as
    // with ROCr, so tools see multi-packet submissions.
    const MAX_BATCH: usize = 32;
    let mut batch = [aql_packet_t {
        bytes: [0; AQL_PACKET_SIZE],
    }; MAX_BATCH];
    if !flush_overflow(state) {
        return; // a retry barrier will bring this proxy back
    }
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
        if crate::trace::enabled() {
            crate::trace::line(format_args!(
                "proxy q{} doorbell: {n} packet(s) at {read}",
                proxy.id()
            ));
            for (i, p) in batch[..n].iter().enumerate() {
                crate::trace::line(format_args!(
                    "  [{}] {}",
                    read + i as u64,
                    crate::trace::describe(p)
                ));
            }
        }
        let handlers = state.handlers.read().clone();
        let pkts = batch.as_ptr().cast::<c_void>();
        match handlers.len() {
            0 => forward(state, pkts, n as u64),
            levels => {
                let frame = Frame {
                    handlers: Arc::as_ptr(&handlers),
                    level: levels - 1,
                    user_pkt_index: read,
                    state,
                };
                call_handler(frame, pkts, n as u64);
            }
        }
        if !state.overflow.lock().packets.is_empty() {
            // The hardware queue is full and a retry barrier is in it (or its retry is on the
            // way). A retry that came while the handler ran set `pending`, so `process` drains
            // again and flushes.
            return;
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
            // SAFETY: the proxy (which owns the state) is alive while its handlers run: the
            // thread running `process` holds an `Arc` of it.
            forward(unsafe { &*frame.state }, pkts, count);
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

/// The header of a packet.
fn header_of(p: &aql_packet_t) -> u16 {
    u16::from_le_bytes([p.bytes[0], p.bytes[1]])
}

/// The packets of a `writer` call (or a batch), INVALID ones skipped.
///
/// # Safety
/// `pkts` must point at `count` readable 64-byte packets (any alignment) that stay valid while
/// the iterator is used.
unsafe fn valid_packets(
    pkts: *const c_void,
    count: u64,
) -> impl Iterator<Item = aql_packet_t> + Clone {
    let src = pkts.cast::<aql_packet_t>();
    (0..count)
        // SAFETY: `k < count`, inside the caller's array (function contract).
        .map(move |k| unsafe { src.add(k as usize).read_unaligned() })
        .filter(|p| header_type(header_of(p)) != HSA_PACKET_TYPE_INVALID)
}

/// The final submission of a `writer` call into the hardware queue. Never blocks and never
/// drops: what does not fit goes to the overflow buffer and a retry barrier is requested.
fn forward(state: &InterceptState, pkts: *const c_void, count: u64) {
    // SAFETY: the handler (or `drain`) passed `count` packets, valid for this call.
    let packets = unsafe { valid_packets(pkts, count) };
    let n = packets.clone().count() as u64;
    if n == 0 {
        return;
    }
    let q = &*state.real;
    let mut ov = state.overflow.lock();
    let placed = if ov.packets.is_empty() {
        let room = room(q, &ov);
        if n <= room {
            n // all of them
        } else if n >= u64::from(q.size()) {
            room // never fits whole: what fits now
        } else {
            0 // all or nothing
        }
    } else {
        0 // behind older overflowed packets
    };
    place(q, packets.clone(), placed);
    ov.packets.extend(packets.skip(placed as usize));
    if !ov.packets.is_empty() {
        request_retry(state, &mut ov);
    }
}

/// Moves what fits of the overflow buffer into the hardware queue; whether it is now empty.
/// If not, a retry is pending when it returns.
fn flush_overflow(state: &InterceptState) -> bool {
    let mut ov = state.overflow.lock();
    if ov.packets.is_empty() {
        return true;
    }
    let q = &*state.real;
    let k = room(q, &ov).min(ov.packets.len() as u64);
    place(q, ov.packets.drain(..k as usize), k);
    if ov.packets.is_empty() {
        return true;
    }
    request_retry(state, &mut ov);
    false
}

/// Free slots of `q` as seen at read index `read`.
fn free_slots(q: &Queue, read: u64) -> u64 {
    let size = u64::from(q.size());
    let write = q.write_index().load(Ordering::Relaxed);
    size.saturating_sub(write.wrapping_sub(read))
}

/// Free slots of `q` usable for packets: all of them while a retry barrier is in the ring,
/// otherwise all but the one kept for a retry barrier.
///
/// A barrier the packet processor has already passed counts as gone even if its retry has not
/// run yet, so the slot it freed stays kept for the barrier that retry may need. One read of
/// the read index serves both questions: a barrier passed after it still holds its slot in
/// the count.
fn room(q: &Queue, ov: &Overflow) -> u64 {
    let read = q.read_index().load(Ordering::Acquire);
    let barrier_in_ring = ov.retry_pending && ov.retry_index >= read;
    free_slots(q, read).saturating_sub(u64::from(!barrier_in_ring))
}

/// Writes the first `k` of `packets` at the write index of `q` and rings its doorbell.
///
/// The caller holds the proxy's overflow lock (the only producer of `q`) and has checked that
/// `k` slots are free.
fn place(q: &Queue, packets: impl Iterator<Item = aql_packet_t>, k: u64) {
    if k == 0 {
        return;
    }
    let base = q.write_index().load(Ordering::Relaxed);
    let mut written = 0u64;
    for p in packets.take(k as usize) {
        let to = q.slot(base + written).cast::<u8>();
        // SAFETY: the slot is free (room checked by the caller) and only this thread writes
        // `q`; the body goes first, then the header and setup word with release, so the
        // packet processor sees a complete packet.
        unsafe {
            std::ptr::copy_nonoverlapping(p.bytes.as_ptr().add(4), to.add(4), 60);
            let first = u32::from_le_bytes([p.bytes[0], p.bytes[1], p.bytes[2], p.bytes[3]]);
            AtomicU32::from_ptr(to.cast()).store(first, Ordering::Release);
        }
        written += 1;
    }
    if written == 0 {
        return;
    }
    q.write_index().store(base + written, Ordering::Release);
    crate::signals::store(q.doorbell(), (base + written - 1) as i64);
}

/// Makes sure a retry barrier is in the hardware ring (the caller holds the overflow lock and
/// has packets waiting).
fn request_retry(state: &InterceptState, ov: &mut Overflow) {
    if ov.retry_pending {
        return;
    }
    let q = &*state.real;
    if free_slots(q, q.read_index().load(Ordering::Acquire)) == 0 {
        // Cannot happen: one slot is kept free while no retry is pending, and this proxy is
        // the only producer of its hardware queue. The next doorbell store tries again.
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            eprintln!("hsa-emu: intercept queue: no slot for the retry barrier");
        }
        return;
    }
    crate::signals::store(state.retry_signal, 1);
    let mut barrier = aql_packet_t {
        bytes: [0; AQL_PACKET_SIZE],
    };
    let header = packet_header(
        HSA_PACKET_TYPE_BARRIER_AND,
        true,
        HSA_FENCE_SCOPE_NONE,
        HSA_FENCE_SCOPE_NONE,
    );
    barrier.bytes[..2].copy_from_slice(&header.to_le_bytes());
    barrier.bytes[PACKET_COMPLETION_SIGNAL_OFFSET..PACKET_COMPLETION_SIGNAL_OFFSET + 8]
        .copy_from_slice(&state.retry_signal.handle.to_le_bytes());
    ov.retry_pending = true;
    ov.retry_index = q.write_index().load(Ordering::Relaxed);
    place(q, std::iter::once(barrier), 1);
}

/// `hsa_amd_async_function` of this runtime, unpatched by tools (the retry is internal work,
/// as in ROCr, not an API call a tool should see).
type AsyncFunction =
    unsafe extern "C" fn(Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void) -> hsa_status_t;

fn async_function() -> Option<AsyncFunction> {
    static FUNCTION: OnceLock<Option<AsyncFunction>> = OnceLock::new();
    *FUNCTION.get_or_init(|| {
        let mut tables = Tables {
            // SAFETY: every field is an integer or a nullable pointer: all-zero is valid.
            core: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            amd: unsafe { std::mem::zeroed() },
        };
        crate::signals::install(&mut tables);
        tables.amd.hsa_amd_async_function_fn
    })
}

/// Schedules [`retry`] of the proxy on the runtime's async thread (from the retry signal's
/// store hook, on the hardware queue's packet-processor thread).
fn schedule_retry(proxy: Weak<Queue>) {
    let arg = Box::into_raw(Box::new(proxy)).cast::<c_void>();
    let status = match async_function() {
        // SAFETY: a valid callback; `arg` is handed over to it (it frees the box).
        Some(f) => unsafe { f(Some(retry_callback), arg) },
        None => HSA_STATUS_ERROR,
    };
    if status == HSA_STATUS_SUCCESS {
        return;
    }
    // SAFETY: not queued (the call failed), so the box is still ours.
    let proxy = unsafe { Box::from_raw(arg.cast::<Weak<Queue>>()) };
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "hsa-emu: intercept queue: cannot schedule a retry on the async thread; overflowed packets wait for the next doorbell"
        );
    }
    // Let the next doorbell store request a new retry barrier.
    if let Some(state) = proxy.upgrade().as_ref().and_then(|p| p.intercept.as_ref()) {
        state.overflow.lock().retry_pending = false;
    }
}

/// The async-thread side of a retry: `arg` is a `Box<Weak<Queue>>` from [`schedule_retry`].
unsafe extern "C" fn retry_callback(arg: *mut c_void) {
    guard((), || {
        // SAFETY: `arg` came from `Box::into_raw` in `schedule_retry`; each call is run once.
        let proxy = unsafe { Box::from_raw(arg.cast::<Weak<Queue>>()) };
        if let Some(proxy) = proxy.upgrade() {
            retry(&proxy);
        }
    })
}

/// Re-processes a proxy whose retry barrier completed: the hardware queue has room again.
fn retry(proxy: &Queue) {
    if proxy.stop.load(Ordering::Acquire) {
        return; // destroyed or inactivated
    }
    let Some(state) = &proxy.intercept else {
        return;
    };
    state.overflow.lock().retry_pending = false;
    process(proxy);
}
