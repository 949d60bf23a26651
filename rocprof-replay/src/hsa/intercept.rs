//! The queue interceptor and the replay window's HSA side ([`HsaTarget`]).
//!
//! The fast path — no policy registered or replay shut down — is one relaxed atomic load and a
//! call to `writer`. A single kernel-dispatch packet goes through the replay window under the
//! agent's writer lock; every other submission is forwarded under the reader lock.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocprof_replay_sys::*;

use super::copies::Busy;
use super::{ACTIVE, ArenaMemory, BACKEND, Backend, Gpu, QueueState};
use crate::dispatch::{AgentId, DispatchId, DispatchInfo, QueueId, Runtime, blocks_of};
use crate::engine::snapshot::{CopyError, DeviceMemory, Direction, Staging, Tier, Transfer};
use crate::engine::state;
use crate::engine::window::{PassError, ReplayTarget};
use crate::policy::{DeclineReason, FailureReason, Outcome, OutcomeKind};

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
            if let Some(info) = progress.info.take() {
                state::report(
                    &info,
                    &Outcome::ordinary(OutcomeKind::Failed(FailureReason::InternalError)),
                );
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
    /// The dispatch being replayed.
    info: RefCell<Option<DispatchInfo>>,
}

/// The completion signal of any AQL packet (offset 56).
fn completion_of(p: &hsa_kernel_dispatch_packet_t) -> hsa_signal_t {
    p.completion_signal
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
    // A signal used for new work no longer answers with a replayed dispatch's times.
    for p in packets {
        be.dispatch_times.forget(completion_of(p));
    }
    let is_dispatch =
        |p: &hsa_kernel_dispatch_packet_t| header_type(p.header) == HSA_PACKET_TYPE_KERNEL_DISPATCH;

    // A PM4 packet (the vendor format after the header, where a dispatch has `setup`) is how
    // aqlprofile's counter windows reach the GPU; AMD barrier-value packets are not PM4.
    if packets.iter().any(|p| {
        header_type(p.header) == HSA_PACKET_TYPE_VENDOR_SPECIFIC && p.setup == AMD_AQL_FORMAT_PM4_IB
    }) && !gpu.vendor_packets.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            gpu = gpu.index,
            "the application submits PM4 packets to this GPU (its own counter windows?): its \
             dispatches are no longer replayed"
        );
    }
    if count != 1 || !is_dispatch(&packets[0]) {
        if count > 1 && packets.iter().any(is_dispatch) {
            warn_multi_packet_once();
            for p in packets.iter().filter(|p| is_dispatch(p)) {
                let info = dispatch_info(be, gpu, queue, p);
                state::report(
                    &info,
                    &Outcome::ordinary(OutcomeKind::Declined(DeclineReason::MultiPacket)),
                );
            }
        }
        // SAFETY: the packets we were given, inside the handler.
        return unsafe {
            forward_tracked(be, queue, Some(gpu), write, pkts, count, Some(progress))
        };
    }

    let packet = packets[0];
    let info = dispatch_info(be, gpu, queue, &packet);
    *progress.info.borrow_mut() = Some(info.clone());
    IN_WINDOW.with(|w| w.set(true));
    let mut target = HsaTarget {
        be,
        gpu,
        queue,
        packet,
        write,
        signal: None,
        copy_signal: None,
        last_time: None,
        progress,
        window: None,
        profiles: Vec::new(),
        armed: None,
    };
    be.engine.replay(&info, &mut target);
    drop(target);
    IN_WINDOW.with(|w| w.set(false));
}

/// Forwards `count` packets and, when the queue is tracked, a barrier-AND packet that
/// decrements its `inflight` signal once everything before it has finished. When the ring is
/// full it first waits for room (see `Backlog`), holding no agent lock; then, if `reader` names
/// a GPU, it forwards under that GPU's reader lock (an ordinary submission, outside a window:
/// it waits for a window that holds the GPU to end).
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
    progress: Option<&Progress>,
) {
    let tracked = queue.inflight.handle != 0;
    let backlog = tracked.then(|| {
        let mut backlog = queue.backlog.lock();
        queue.wait_for_room(be, &mut backlog, count + 1, be.settings().drain);
        backlog
    });
    let _read = reader.map(|gpu| gpu.read_outside_window(be.settings().lock));
    let _backlog = backlog.map(|mut backlog| {
        let packets = count + 1;
        backlog.push(u32::try_from(packets).unwrap_or(u32::MAX));
        // SAFETY: our own live signal.
        unsafe { (be.orig.signal_add)(queue.inflight, 1) };
        backlog
    });
    // Marked right before the write, with nothing that can panic in between: after an
    // internal panic the handler forwards the submission itself exactly when this did not.
    if let Some(progress) = progress {
        progress.forwarded.set(true);
        progress.completed.set(true);
    }
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

/// `header` with its acquire fence widened to system scope; type, barrier bit and release
/// scope kept.
fn with_system_acquire(header: u16) -> u16 {
    packet_header(
        header_type(header),
        header_barrier(header),
        HSA_FENCE_SCOPE_SYSTEM,
        header_release_scope(header),
    )
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
    let grid = [p.grid_size_x, p.grid_size_y, p.grid_size_z];
    let workgroup = [p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z];
    DispatchInfo {
        runtime: Runtime::Hsa,
        agent: AgentId(gpu.agent.handle),
        agent_index: gpu.index,
        queue: QueueId(queue_id),
        dispatch_id: DispatchId(be.next_dispatch.fetch_add(1, Ordering::Relaxed)),
        kernel_object: p.kernel_object,
        kernel_name: be.kernel_names.read().get(&p.kernel_object).cloned(),
        grid,
        workgroup,
        blocks: blocks_of(grid, workgroup),
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
    /// The engine's own completion signal for passes and drains (created on first use).
    signal: Option<hsa_signal_t>,
    /// Completion signal for snapshot copies (created on first use).
    copy_signal: Option<hsa_signal_t>,
    /// Timestamps of the last pass that completed.
    last_time: Option<hsa_amd_profiling_dispatch_time_t>,
    progress: &'a Progress,
    /// The agent's writer lock, held from `begin` to `end`.
    window: Option<parking_lot::RwLockWriteGuard<'a, ()>>,
    /// One counter profile per counter pass of the dispatch's metric set.
    profiles: Vec<super::counters::PassProfile>,
    /// The counter pass the next `run_pass` carries.
    armed: Option<u32>,
}

/// A counter pass as one submission: start packet, the pass's dispatch, stop packet.
#[repr(C)]
struct CounterPass {
    start: hsa_ext_amd_aql_pm4_packet_t,
    dispatch: hsa_kernel_dispatch_packet_t,
    stop: hsa_ext_amd_aql_pm4_packet_t,
}

// Three 64-byte packets back to back, as the writer expects them.
const _: () = assert!(size_of::<CounterPass>() == 3 * 64);

/// Creates a signal of ours with value 1.
fn new_signal(be: &Backend) -> Option<hsa_signal_t> {
    let mut s = hsa_signal_t::default();
    // SAFETY: creating a plain signal with no consumer list.
    let st = unsafe { (be.orig.signal_create)(1, 0, std::ptr::null(), &mut s) };
    (st == HSA_STATUS_SUCCESS).then_some(s)
}

impl HsaTarget<'_> {
    fn signal(&mut self) -> Result<hsa_signal_t, DeclineReason> {
        if let Some(s) = self.signal {
            return Ok(s);
        }
        let s = new_signal(self.be).ok_or(DeclineReason::SubmitFailed)?;
        self.signal = Some(s);
        Ok(s)
    }

    /// Waits until `signal` reaches 0 or `deadline` passes.
    fn wait_zero(&self, signal: hsa_signal_t, deadline: Duration) -> bool {
        let end = Instant::now() + deadline;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            // Timed slices keep every wait bounded even if the runtime ignores the hint.
            let slice = left.min(Duration::from_millis(100));
            // SAFETY: a live signal we created.
            let v = unsafe {
                (self.be.orig.signal_wait)(
                    signal,
                    HSA_SIGNAL_CONDITION_EQ,
                    0,
                    self.be.ticks(slice),
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
        let drain = self.be.settings().drain;
        // Room for the barrier (see `Backlog`): it must reach the ring, not the runtime's
        // overflow buffer, which is only flushed after this handler returns.
        self.queue
            .wait_for_room(self.be, &mut self.queue.backlog.lock(), 1, drain);
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
        if self.wait_zero(signal, drain) {
            Ok(())
        } else {
            abandon(&mut self.signal);
            Err(DeclineReason::DrainTimeout)
        }
    }

    /// Waits until everything forwarded on another queue of the agent has finished. Nothing
    /// is submitted to it: its interceptor may be waiting for the agent lock this window holds.
    fn drain_other_queue(&mut self, other: &QueueState) -> Result<(), DeclineReason> {
        if other.inflight.handle == 0 {
            // Its work cannot be waited for, so it could run during the window: decline.
            tracing::warn!("a queue of the agent has no progress signal and cannot be drained");
            return Err(DeclineReason::QueueNotDrainable);
        }
        if self.wait_zero(other.inflight, self.be.settings().drain) {
            Ok(())
        } else {
            Err(DeclineReason::DrainTimeout)
        }
    }
}

/// Gives up a signal without destroying it: a packet or copy still in flight references it
/// and will decrement it when it finally runs (leaking one signal beats a use after free).
fn abandon(signal: &mut Option<hsa_signal_t>) {
    if let Some(s) = signal.take() {
        tracing::warn!(
            signal = s.handle,
            "work outlived its deadline; its signal is kept alive"
        );
    }
}

impl Drop for HsaTarget<'_> {
    fn drop(&mut self) {
        for s in [self.signal.take(), self.copy_signal.take()]
            .into_iter()
            .flatten()
        {
            // SAFETY: our own signal; nothing waits on it or will signal it any more.
            unsafe { (self.be.orig.signal_destroy)(s) };
        }
    }
}

/// Gives a scratch buffer back to the staging cache (or frees it).
unsafe fn release_scratch(ptr: NonNull<u8>, capacity: usize, _tier: Tier) {
    if let Some(be) = BACKEND.get() {
        // SAFETY: `ptr` came from the staging pool (caller contract).
        unsafe { be.staging.give(&be.orig, ptr.as_ptr(), capacity) };
    }
}

impl DeviceMemory for HsaTarget<'_> {
    /// A buffer carved from the GPU's snapshot arena: VRAM while the GPU keeps its reserve
    /// free, else pinned host memory.
    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        let mem = ArenaMemory {
            be: self.be,
            gpu: self.gpu,
        };
        self.gpu.arena.lock().carve(&mem, size)
    }

    /// Pinned host memory from the staging cache: the host compares there.
    fn alloc_scratch(&mut self, size: usize) -> Option<Staging> {
        let (pool, _) = self.be.staging_pool?;
        let (ptr, capacity) = self
            .be
            .staging
            .take(&self.be.orig, pool, &self.be.gpus, size)?;
        Some(Staging::Backend {
            ptr,
            len: size,
            capacity,
            tier: Tier::PinnedHost,
            release: release_scratch,
        })
    }

    /// Runs the batch as asynchronous copies sharing one completion signal, and waits for it
    /// with the copy deadline. Staging in the GPU's arena VRAM is copied device to device
    /// (both sides named by the GPU agent); other staging is host memory of the CPU agent.
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
        if transfers.is_empty() {
            return Ok(());
        }
        let Some((_, cpu)) = self.be.staging_pool else {
            return Err(CopyError::Failed);
        };
        let signal = match self.copy_signal {
            Some(s) => s,
            None => {
                let s = new_signal(self.be).ok_or(CopyError::Failed)?;
                self.copy_signal = Some(s);
                s
            }
        };
        let n = transfers.len() as i64;
        let o = &self.be.orig;
        // SAFETY: our live signal.
        unsafe { (o.signal_store)(signal, n) };
        let gpu = self.gpu.agent;
        let arena = self.gpu.arena.lock();
        let agent_of = |addr: usize| if arena.is_device(addr) { gpu } else { cpu };
        let mut failed = false;
        for (k, t) in transfers.iter().enumerate() {
            // The device side is the GPU's memory: an application region, a module variable
            // or (a diff reading a snapshot back) a VRAM chunk of the arena.
            let (dst, dst_agent, src, src_agent) = match direction {
                Direction::Capture => (t.staging, agent_of(t.staging), t.device, gpu),
                Direction::Restore => (t.device, gpu, t.staging, agent_of(t.staging)),
            };
            // SAFETY: `device` is a pinned region of the agent (or a module variable) and
            // `staging` a buffer of ours of at least `len` bytes, accessible to the agent.
            let st = unsafe {
                (o.async_copy)(
                    dst as *mut c_void,
                    dst_agent,
                    src as *const c_void,
                    src_agent,
                    t.len,
                    0,
                    std::ptr::null(),
                    signal,
                )
            };
            if st != HSA_STATUS_SUCCESS {
                tracing::warn!(status = %Status(st), "a snapshot copy could not be submitted");
                // The rest are never submitted: take them off the count.
                // SAFETY: our live signal.
                unsafe { (o.signal_subtract)(signal, n - k as i64) };
                failed = true;
                break;
            }
        }
        drop(arena);
        if !self.wait_zero(signal, self.be.settings().copy) {
            // The copies may still read or write the regions: frees of the GPU's memory wait
            // for them (see `stuck`), which also keeps the signal alive until they end.
            self.copy_signal = None;
            self.be.stuck.add(self.gpu.index, signal, 0);
            return Err(CopyError::Stuck);
        }
        if failed {
            Err(CopyError::Failed)
        } else {
            Ok(())
        }
    }
}

impl ReplayTarget for HsaTarget<'_> {
    fn refusal(&self) -> Option<DeclineReason> {
        self.gpu
            .vendor_packets
            .load(Ordering::Relaxed)
            .then_some(DeclineReason::VendorPackets)
    }

    fn begin(&mut self) -> Result<(), DeclineReason> {
        if super::on_runtime_async_thread() {
            return Err(DeclineReason::RuntimeThread);
        }
        let gpu: &Gpu = self.gpu;
        match gpu.lock.try_write_for(self.be.settings().lock) {
            Some(guard) => {
                self.window = Some(guard);
                Ok(())
            }
            None => Err(DeclineReason::LockTimeout),
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
        let deadline = Instant::now() + self.be.settings().drain;
        match self
            .gpu
            .copies
            .wait_idle(self.packet.completion_signal, deadline)
        {
            Ok(()) => Ok(()),
            Err(Busy::Held) => Err(DeclineReason::CopyWaitsForDispatch),
            Err(Busy::TimedOut) => {
                tracing::warn!(
                    "asynchronous copies touching the agent outlived the drain deadline"
                );
                Err(DeclineReason::DrainTimeout)
            }
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
        // Size the snapshot arena for the whole snapshot now: one allocation, reused while the
        // footprint stays the same.
        let bytes = state::INVENTORY
            .owned_by(AgentId(self.gpu.agent.handle))
            .iter()
            .map(|a| a.size)
            .chain(ctx.vars.iter().map(|v| v.1))
            .fold(0usize, usize::saturating_add);
        if (bytes as u64) <= self.be.settings().budget {
            let mem = ArenaMemory {
                be: self.be,
                gpu: self.gpu,
            };
            self.gpu.arena.lock().prepare(&mem, bytes);
        }
        Ok(ctx.vars)
    }

    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        let signal = self.signal().map_err(PassError::NotSubmitted)?;
        let o = &self.be.orig;
        // SAFETY: our signal.
        unsafe { (o.signal_store)(signal, 1) };
        let mut pass = self.packet;
        pass.completion_signal = signal;
        let profile = self.armed.and_then(|p| self.profiles.get(p as usize));
        let profile_armed = profile.is_some();
        // Barrier bit: the pass starts after the restore before it. System-scope fences: the
        // restore's copies (and the snapshot's reads) must be visible to the pass, and the
        // pass's writes to the next capture or restore, whatever scopes the application chose.
        pass.header = packet_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        );
        self.progress.forwarded.set(true);
        if let Some(profile) = profile {
            // The stop packet (barrier bit: after the dispatch) decrements the signal too, so
            // the wait below ends once the values are written.
            // SAFETY: our signal.
            unsafe { (o.signal_store)(signal, 2) };
            let mut stop = profile.stop;
            stop.completion_signal = signal;
            let packets = CounterPass {
                start: profile.start,
                dispatch: pass,
                stop,
            };
            // SAFETY: three 64-byte packets in a row, forwarded inside the handler.
            unsafe { (self.write)((&packets as *const CounterPass).cast(), 3) };
        } else {
            // SAFETY: one packet, forwarded inside the handler.
            unsafe { (self.write)((&pass as *const hsa_kernel_dispatch_packet_t).cast(), 1) };
        }
        if !self.wait_zero(signal, self.be.settings().pass) {
            return Err(PassError::Late);
        }
        let mut t = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: our completed signal on a profiled queue.
        let st = unsafe { (o.dispatch_time)(self.gpu.agent, signal, &mut t) };
        let valid = st == HSA_STATUS_SUCCESS && t.end >= t.start && t.end != 0;
        if profile_armed {
            // A counter pass's times include the counters' set-up: the application is given
            // those of the last pass without counters.
            return Ok(None);
        }
        self.last_time = valid.then_some(t);
        if !timed || !valid {
            return Ok(None);
        }
        let ns = (t.end - t.start) as u128 * 1_000_000_000 / self.be.ticks_per_second as u128;
        Ok(Some(Duration::from_nanos(ns as u64)))
    }

    fn run_once(&mut self) -> bool {
        // Outside a window (the policy skipped replay) this is an ordinary submission.
        let reader = self.window.is_none().then_some(self.gpu);
        let mut packet = self.packet;
        if self.window.is_some() {
            // Inside a window memory may have just been restored by copies: the run must
            // acquire at system scope to see them, whatever scope the application chose (as
            // the passes do). Its release scope stays the application's.
            packet.header = with_system_acquire(packet.header);
        }
        // SAFETY: the application's packet (its fences widened at most), forwarded inside the
        // handler.
        unsafe {
            forward_tracked(
                self.be,
                self.queue,
                reader,
                self.write,
                (&packet as *const hsa_kernel_dispatch_packet_t).cast(),
                1,
                Some(self.progress),
            )
        };
        // Forwarding inside the interceptor cannot fail.
        true
    }

    fn complete(&mut self) {
        self.progress.completed.set(true);
        let app = self.packet.completion_signal;
        if app.handle != 0 {
            if let Some(t) = self.last_time {
                // What the runtime would report for the application's signal: the dispatch
                // it sees ran as the last pass.
                self.be.dispatch_times.record(app, t);
            }
            // SAFETY: the application's completion signal, decremented once as the hardware
            // would have after its single execution.
            unsafe { (self.be.orig.signal_subtract)(app, 1) };
        }
    }

    fn settle_late_pass(&mut self) -> bool {
        let Some(signal) = self.signal else {
            return false;
        };
        if self.wait_zero(signal, self.be.settings().late_pass) {
            return true;
        }
        // Stuck: the application gets its completion now, so protect what the pass still uses
        // (see `stuck`), and make later windows on this GPU wait for it: a tracked barrier
        // behind it counts in the queue's progress signal.
        self.signal = None;
        // Its stop packet may still write the counters' buffers: never free them.
        self.profiles.drain(..).for_each(std::mem::forget);
        self.be
            .stuck
            .add(self.gpu.index, signal, self.packet.kernarg_address as usize);
        let barrier = hsa_barrier_and_packet_t {
            header: packet_header(
                HSA_PACKET_TYPE_BARRIER_AND,
                true,
                HSA_FENCE_SCOPE_NONE,
                HSA_FENCE_SCOPE_NONE,
            ),
            ..Default::default()
        };
        // SAFETY: one packet, forwarded inside the handler (we hold the agent: no reader lock).
        unsafe {
            forward_tracked(
                self.be,
                self.queue,
                None,
                self.write,
                (&barrier as *const hsa_barrier_and_packet_t).cast(),
                1,
                None,
            )
        };
        false
    }

    fn contended(&self) -> bool {
        self.gpu.waiting_long.load(Ordering::Acquire) > 0
    }

    fn prepare_counters(&mut self, set: &crate::counters::MetricSet) -> Result<(), String> {
        let aql = self.be.counters.as_ref().map_err(Clone::clone)?;
        let (pool, _) = self
            .be
            .staging_pool
            .ok_or("no host memory pool for the counters' buffers")?;
        let memory = Arc::new(super::counters::HostPoolMemory {
            orig: self.be.orig,
            pool,
            agent: self.gpu.agent,
        });
        self.profiles = aql
            .prepare_set(self.gpu.agent, set, memory)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    fn arm_counters(&mut self, pass: Option<u32>) {
        self.armed = pass;
    }

    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let aql = self.be.counters.as_ref().map_err(Clone::clone)?;
        let profile = self
            .profiles
            .get(pass as usize)
            .ok_or("no counter profile for this pass")?;
        aql.values(profile).map_err(|e| e.to_string())
    }

    fn end(&mut self) {
        // Still under the writer lock: the arena is trimmed (and marked idle) before an
        // application allocation that failed may release it.
        let mem = ArenaMemory {
            be: self.be,
            gpu: self.gpu,
        };
        self.gpu.arena.lock().trim(&mem);
        self.window = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_run_acquires_at_system_scope_and_keeps_the_rest_of_the_header() {
        let app = packet_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            false,
            HSA_FENCE_SCOPE_AGENT,
            HSA_FENCE_SCOPE_AGENT,
        );
        let run = with_system_acquire(app);
        assert_eq!(header_acquire_scope(run), HSA_FENCE_SCOPE_SYSTEM);
        assert_eq!(header_release_scope(run), HSA_FENCE_SCOPE_AGENT);
        assert_eq!(header_type(run), HSA_PACKET_TYPE_KERNEL_DISPATCH);
        assert!(!header_barrier(run));
    }
}
