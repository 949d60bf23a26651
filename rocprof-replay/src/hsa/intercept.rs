//! The queue interceptor and the replay window's HSA side ([`HsaTarget`]).
//!
//! The fast path — no policy registered or replay shut down — is one relaxed atomic load and a
//! call to `writer`. A single kernel-dispatch packet goes through the replay window under the
//! agent's writer lock; every other submission is forwarded under the reader lock.

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocprof_replay_sys::*;

use super::{ACTIVE, BACKEND, Backend, Gpu, INVENTORY, QueueState};
use crate::dispatch::{AgentId, DispatchId, DispatchInfo, QueueId};
use crate::engine::records;
use crate::engine::snapshot::{DeviceMemory, Staging};
use crate::engine::window::{ReplayTarget, WindowConfig};
use crate::policy::{DeclineReason, Outcome, OutcomeKind};

thread_local! {
    /// Set while this thread runs a replay window: packets it submits are forwarded as is.
    static IN_WINDOW: Cell<bool> = const { Cell::new(false) };
}

type Writer = unsafe extern "C" fn(*const c_void, u64);

/// Whether this thread is running a replay window.
pub(crate) fn in_window() -> bool {
    IN_WINDOW.with(Cell::get)
}

/// The interceptor registered on every application queue.
pub(crate) unsafe extern "C" fn handler(
    pkts: *const c_void,
    count: u64,
    _user_pkt_index: u64,
    data: *mut c_void,
    writer: hsa_amd_queue_intercept_packet_writer,
) {
    let Some(write) = writer else { return };
    if !ACTIVE.load(Ordering::Relaxed) || IN_WINDOW.with(Cell::get) {
        // SAFETY: forwarding the packets we were given, inside the handler.
        unsafe { write(pkts, count) };
        return;
    }
    let progress = Progress::default();
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the runtime passes `count` packets; `data` is the QueueState registered with
        // this handler.
        unsafe { intercept(pkts, count, data, write, &progress) }
    }));
    if result.is_err() {
        IN_WINDOW.with(|w| w.set(false));
        tracing::error!("internal error (panic) in the queue interceptor");
        if !progress.forwarded.get() {
            // Nothing reached the device yet: the submission runs as the application made it.
            // SAFETY: as above.
            unsafe { write(pkts, count) };
        } else if !progress.completed.get() && count == 1 {
            // Passes ran: make sure the application still sees its one completion.
            // SAFETY: `count` == 1 packet; its completion signal is the application's.
            let app = unsafe { (*pkts.cast::<hsa_kernel_dispatch_packet_t>()).completion_signal };
            if let (Some(be), true) = (BACKEND.get(), app.handle != 0) {
                // SAFETY: the application's signal, decremented once.
                unsafe { (be.orig.signal_subtract)(app, 1) };
            }
        }
    }
}

/// What the interceptor already did for a submission (for recovery after an internal panic).
#[derive(Default)]
struct Progress {
    /// Some packet reached the device.
    forwarded: Cell<bool>,
    /// The application's completion has been delivered (or travels with a forwarded packet).
    completed: Cell<bool>,
}

unsafe fn intercept(
    pkts: *const c_void,
    count: u64,
    data: *mut c_void,
    write: Writer,
    progress: &Progress,
) {
    let forward = || {
        progress.forwarded.set(true);
        progress.completed.set(true);
        // SAFETY: the packets we were given, inside the handler.
        unsafe { write(pkts, count) };
    };
    let Some(be) = BACKEND.get() else {
        return forward();
    };
    // SAFETY: `data` is the Arc<QueueState> pointer registered with this handler (never freed).
    let queue = unsafe { &*data.cast::<QueueState>() };
    let Some(gpu) = be.gpu(queue.agent) else {
        return forward();
    };
    // SAFETY: the runtime hands us `count` 64-byte packets.
    let packets = unsafe {
        std::slice::from_raw_parts(pkts.cast::<hsa_kernel_dispatch_packet_t>(), count as usize)
    };
    let is_dispatch =
        |p: &hsa_kernel_dispatch_packet_t| header_type(p.header) == HSA_PACKET_TYPE_KERNEL_DISPATCH;

    if count != 1 || !is_dispatch(&packets[0]) {
        if count > 1 && packets.iter().any(is_dispatch) {
            warn_multi_packet_once();
            for p in packets.iter().filter(|p| is_dispatch(p)) {
                let info = dispatch_info(be, gpu, queue, p);
                records::emit(
                    &info,
                    &Outcome::ordinary(OutcomeKind::Declined(DeclineReason::MultiPacket)),
                );
            }
        }
        progress.forwarded.set(true);
        progress.completed.set(true);
        // SAFETY: the packets we were given, inside the handler.
        return unsafe { forward_tracked(be, queue, Some(gpu), write, pkts, count) };
    }

    let packet = packets[0];
    let info = dispatch_info(be, gpu, queue, &packet);
    IN_WINDOW.with(|w| w.set(true));
    let mut target = HsaTarget {
        be,
        gpu,
        queue,
        packet,
        write,
        signal: None,
        progress,
        window: None,
    };
    let config = WindowConfig {
        budget: be.limits.budget,
    };
    let outcome = be.replayer.replay(&info, &mut target, &INVENTORY, config);
    drop(target);
    IN_WINDOW.with(|w| w.set(false));
    tracing::info!(
        kernel = info.kernel(),
        dispatch = %info.dispatch_id,
        outcome = outcome.kind.label(),
        reason = outcome.kind.reason().map(|r| r.code()),
        passes = outcome.passes,
        snapshot_bytes = outcome.snapshot_bytes,
        "dispatch"
    );
    records::emit(&info, &outcome);
}

/// Forwards `count` packets and, when the queue is tracked, a barrier-AND packet that
/// decrements its `inflight` signal once everything before it has finished. When the ring is
/// full it first waits for room (see `Backlog`), holding no agent lock; then, if `reader` names
/// a GPU, it forwards under that GPU's reader lock (an ordinary submission, outside a window).
///
/// # Safety
/// Inside the interceptor, with `count` valid packets at `pkts`.
unsafe fn forward_tracked(
    be: &Backend,
    queue: &QueueState,
    reader: Option<&Gpu>,
    write: Writer,
    pkts: *const c_void,
    count: u64,
) {
    let tracked = queue.inflight.handle != 0;
    let backlog = tracked.then(|| {
        let mut backlog = queue.backlog.lock();
        queue.wait_for_room(be, &mut backlog, count + 1, be.limits.drain);
        backlog
    });
    let _read = reader.map(|gpu| gpu.lock.try_read_for(be.limits.lock));
    let _backlog = backlog.map(|mut backlog| {
        let packets = count + 1;
        backlog.push(u32::try_from(packets).unwrap_or(u32::MAX));
        // SAFETY: our own live signal.
        unsafe { (be.orig.signal_add)(queue.inflight, 1) };
        backlog
    });
    // SAFETY: caller contract.
    unsafe { write(pkts, count) };
    if tracked {
        let barrier = hsa_barrier_and_packet_t {
            header: packet_header(
                HSA_PACKET_TYPE_BARRIER_AND,
                true,
                HSA_FENCE_SCOPE_NONE,
                HSA_FENCE_SCOPE_NONE,
            ),
            completion_signal: queue.inflight,
            ..Default::default()
        };
        // SAFETY: one packet, forwarded inside the handler.
        unsafe { write((&barrier as *const hsa_barrier_and_packet_t).cast(), 1) };
    }
}

fn warn_multi_packet_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| tracing::warn!("multi-packet submissions are not replayed: they run once"));
}

fn dispatch_info(
    be: &Backend,
    gpu: &Gpu,
    queue: &QueueState,
    p: &hsa_kernel_dispatch_packet_t,
) -> DispatchInfo {
    // SAFETY: a live queue object of the runtime.
    let queue_id = unsafe { (*queue.queue).id };
    DispatchInfo {
        agent: AgentId(gpu.agent.handle),
        agent_index: gpu.index,
        queue: QueueId(queue_id),
        dispatch_id: DispatchId(be.next_dispatch.fetch_add(1, Ordering::Relaxed)),
        kernel_object: p.kernel_object,
        kernel_name: be.kernel_names.read().get(&p.kernel_object).cloned(),
        grid: [p.grid_size_x, p.grid_size_y, p.grid_size_z],
        workgroup: [p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z],
        group_segment_size: p.group_segment_size,
        private_segment_size: p.private_segment_size,
    }
}

/// The replay window's handle on one intercepted dispatch.
struct HsaTarget<'a> {
    be: &'a Backend,
    gpu: &'a Gpu,
    queue: &'a QueueState,
    packet: hsa_kernel_dispatch_packet_t,
    write: Writer,
    /// The engine's own completion signal (created on first use).
    signal: Option<hsa_signal_t>,
    progress: &'a Progress,
    /// The agent's writer lock, held from `begin` to the end of the replay window.
    window: Option<parking_lot::RwLockWriteGuard<'a, ()>>,
}

impl HsaTarget<'_> {
    fn signal(&mut self) -> Result<hsa_signal_t, DeclineReason> {
        if let Some(s) = self.signal {
            return Ok(s);
        }
        let mut s = hsa_signal_t::default();
        // SAFETY: creating a plain signal with no consumer list.
        let st = unsafe { (self.be.orig.signal_create)(1, 0, std::ptr::null(), &mut s) };
        if st != HSA_STATUS_SUCCESS {
            return Err(DeclineReason::SubmitFailed);
        }
        self.signal = Some(s);
        Ok(s)
    }

    /// Waits until `signal` reaches 0 or the deadline passes.
    fn wait_zero(&self, signal: hsa_signal_t, deadline: Duration) -> bool {
        let end = Instant::now() + deadline;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            // Timed slices keep every wait bounded even if the runtime ignores the hint.
            let slice = left.min(Duration::from_millis(100));
            let ticks =
                (slice.as_nanos() * self.be.ticks_per_second as u128 / 1_000_000_000) as u64;
            // SAFETY: a live signal we created.
            let v = unsafe {
                (self.be.orig.signal_wait)(
                    signal,
                    HSA_SIGNAL_CONDITION_EQ,
                    0,
                    ticks.max(1),
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

    /// Puts a barrier-AND packet with `signal` as completion into this queue (through the
    /// writer) and waits for it.
    fn drain_own_queue(&mut self) -> Result<(), DeclineReason> {
        let signal = self.signal()?;
        // Room for the barrier (see `Backlog`): it must reach the ring, not the runtime's
        // overflow buffer, which is only flushed after this handler returns.
        self.queue.wait_for_room(
            self.be,
            &mut self.queue.backlog.lock(),
            1,
            self.be.limits.drain,
        );
        // SAFETY: a live signal.
        unsafe { (self.be.orig.signal_store)(signal, 1) };
        let barrier = hsa_barrier_and_packet_t {
            header: packet_header(
                HSA_PACKET_TYPE_BARRIER_AND,
                true,
                HSA_FENCE_SCOPE_SYSTEM,
                HSA_FENCE_SCOPE_SYSTEM,
            ),
            completion_signal: signal,
            ..Default::default()
        };
        // SAFETY: one packet, forwarded inside the handler.
        unsafe { (self.write)((&barrier as *const hsa_barrier_and_packet_t).cast(), 1) };
        if self.wait_zero(signal, self.be.limits.drain) {
            Ok(())
        } else {
            self.abandon_signal();
            Err(DeclineReason::DrainTimeout)
        }
    }

    /// Gives up our signal without destroying it: a packet still in the queue references it
    /// and will decrement it when it finally runs (leaking one signal beats a use after free).
    fn abandon_signal(&mut self) {
        if let Some(s) = self.signal.take() {
            tracing::warn!(
                signal = s.handle,
                "a packet outlived its deadline; its signal is kept alive"
            );
        }
    }

    /// Waits until everything forwarded on another queue of the agent has finished. Nothing
    /// is submitted to it: its interceptor may be waiting for the agent lock this window holds.
    fn drain_other_queue(&mut self, other: &QueueState) -> Result<(), DeclineReason> {
        if other.inflight.handle == 0 {
            tracing::debug!("a queue without a progress signal cannot be drained");
            return Ok(());
        }
        if self.wait_zero(other.inflight, self.be.limits.drain) {
            Ok(())
        } else {
            Err(DeclineReason::DrainTimeout)
        }
    }
}

impl Drop for HsaTarget<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.signal.take() {
            // SAFETY: our own signal; nothing waits on it any more.
            unsafe { (self.be.orig.signal_destroy)(s) };
        }
    }
}

/// Gives a snapshot buffer back to the staging cache (or frees it).
unsafe fn release_staging(ptr: *mut u8, capacity: usize) {
    if let Some(be) = BACKEND.get() {
        // SAFETY: `ptr` came from the staging pool (caller contract).
        unsafe { be.staging.give(&be.orig, ptr, capacity) };
    }
}

impl DeviceMemory for HsaTarget<'_> {
    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        let Some(pool) = self.be.staging_pool else {
            return Staging::heap(size);
        };
        let (ptr, capacity) = self.be.staging.take(&self.be.orig, pool, size)?;
        Some(Staging::Runtime {
            ptr,
            len: size,
            capacity,
            release: release_staging,
        })
    }

    fn read(&mut self, src: usize, dst: &mut [u8]) -> bool {
        // SAFETY: `dst` is a host buffer of dst.len() bytes; `src` a region the inventory or
        // the executable reports as live.
        unsafe {
            (self.be.orig.memory_copy)(dst.as_mut_ptr().cast(), src as *const c_void, dst.len())
                == HSA_STATUS_SUCCESS
        }
    }
    fn write(&mut self, dst: usize, src: &[u8]) -> bool {
        // SAFETY: as above, the other way round.
        unsafe {
            (self.be.orig.memory_copy)(dst as *mut c_void, src.as_ptr().cast(), src.len())
                == HSA_STATUS_SUCCESS
        }
    }
}

impl ReplayTarget for HsaTarget<'_> {
    fn begin(&mut self) -> Result<(), DeclineReason> {
        let gpu: &Gpu = self.gpu;
        match gpu.lock.try_write_for(self.be.limits.lock) {
            Some(guard) => {
                self.window = Some(guard);
                Ok(())
            }
            None => Err(DeclineReason::DrainTimeout),
        }
    }

    fn drain(&mut self) -> Result<(), DeclineReason> {
        self.drain_own_queue()?;
        let others: Vec<Arc<QueueState>> = self
            .be
            .queues
            .read()
            .values()
            .filter(|q| q.agent == self.queue.agent && q.queue != self.queue.queue)
            .cloned()
            .collect();
        for other in others {
            self.drain_other_queue(&other)?;
        }
        // Asynchronous copies already submitted (new ones wait for the lock this window holds).
        let deadline = Instant::now() + self.be.limits.drain;
        if self
            .gpu
            .copies
            .wait_idle(self.packet.completion_signal, deadline)
        {
            Ok(())
        } else {
            tracing::warn!("asynchronous copies touching the agent outlived the drain deadline");
            Err(DeclineReason::DrainTimeout)
        }
    }

    fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason> {
        struct Ctx<'a> {
            be: &'a Backend,
            vars: Vec<(usize, usize)>,
        }
        unsafe extern "C" fn each(
            _exe: hsa_executable_t,
            _agent: hsa_agent_t,
            symbol: hsa_executable_symbol_t,
            data: *mut c_void,
        ) -> hsa_status_t {
            // SAFETY: `data` is the Ctx below.
            let ctx = unsafe { &mut *data.cast::<Ctx<'_>>() };
            let get = ctx.be.orig.symbol_get_info;
            let mut kind = 0u32;
            let mut is_const = false;
            let mut address = 0u64;
            let mut size = 0u32;
            // SAFETY: each attribute writes the documented type.
            unsafe {
                if get(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_TYPE,
                    (&mut kind as *mut u32).cast(),
                ) != HSA_STATUS_SUCCESS
                    || kind != HSA_SYMBOL_KIND_VARIABLE
                {
                    return HSA_STATUS_SUCCESS;
                }
                if get(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST,
                    (&mut is_const as *mut bool).cast(),
                ) != HSA_STATUS_SUCCESS
                    || get(
                        symbol,
                        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
                        (&mut address as *mut u64).cast(),
                    ) != HSA_STATUS_SUCCESS
                    || get(
                        symbol,
                        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE,
                        (&mut size as *mut u32).cast(),
                    ) != HSA_STATUS_SUCCESS
                {
                    return HSA_STATUS_ERROR;
                }
            }
            // Const variables cannot change; zero-sized or huge ones are skipped (sanity cap).
            if !is_const && address != 0 && size != 0 && size as u64 <= 1 << 30 {
                ctx.vars.push((address as usize, size as usize));
            }
            HSA_STATUS_SUCCESS
        }
        let executables = self.be.executables.lock().clone();
        let mut ctx = Ctx {
            be: self.be,
            vars: Vec::new(),
        };
        for exe in executables {
            // SAFETY: a frozen executable; the callback only touches `ctx`.
            let st = unsafe {
                (self.be.orig.executable_iterate_agent_symbols)(
                    exe,
                    self.gpu.agent,
                    Some(each),
                    (&mut ctx as *mut Ctx<'_>).cast(),
                )
            };
            if st != HSA_STATUS_SUCCESS {
                return Err(DeclineReason::SymbolsUnavailable);
            }
        }
        Ok(ctx.vars)
    }

    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, DeclineReason> {
        let signal = self.signal()?;
        let o = &self.be.orig;
        // SAFETY: our signal.
        unsafe { (o.signal_store)(signal, 1) };
        let mut pass = self.packet;
        pass.completion_signal = signal;
        pass.header |= 1 << HSA_PACKET_HEADER_BARRIER;
        self.progress.forwarded.set(true);
        // SAFETY: one packet, forwarded inside the handler.
        unsafe { (self.write)((&pass as *const hsa_kernel_dispatch_packet_t).cast(), 1) };
        if !self.wait_zero(signal, self.be.limits.pass) {
            self.abandon_signal();
            return Err(DeclineReason::PassTimeout);
        }
        if !timed {
            return Ok(None);
        }
        let mut t = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: our completed signal on a profiled queue.
        let st = unsafe { (o.dispatch_time)(self.gpu.agent, signal, &mut t) };
        if st != HSA_STATUS_SUCCESS || t.end < t.start {
            return Ok(None);
        }
        let ns = (t.end - t.start) as u128 * 1_000_000_000 / self.be.ticks_per_second as u128;
        Ok(Some(Duration::from_nanos(ns as u64)))
    }

    fn run_once(&mut self) {
        // Outside a window (the policy skipped replay) this is an ordinary submission.
        let reader = self.window.is_none().then_some(self.gpu);
        self.progress.forwarded.set(true);
        self.progress.completed.set(true);
        // SAFETY: the application's packet, forwarded unchanged inside the handler.
        unsafe {
            forward_tracked(
                self.be,
                self.queue,
                reader,
                self.write,
                (&self.packet as *const hsa_kernel_dispatch_packet_t).cast(),
                1,
            )
        };
    }

    fn complete(&mut self) {
        self.progress.completed.set(true);
        let app = self.packet.completion_signal;
        if app.handle != 0 {
            // SAFETY: the application's completion signal, decremented once as the hardware
            // would have after its single execution.
            unsafe { (self.be.orig.signal_subtract)(app, 1) };
        }
    }
}
