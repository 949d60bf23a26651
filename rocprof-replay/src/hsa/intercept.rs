//! The queue interceptor and the replay window's HSA side ([`HsaTarget`]).
//!
//! The fast path — no policy registered or replay shut down — is one relaxed atomic load and a
//! call to `writer`. A single kernel-dispatch packet is handed to the engine's decision on the
//! submitting thread; one that enters the replay window is replaced on the application's queue
//! by a ready barrier and a gate ([`super::gates`]) and its window runs on the engine's worker
//! lane for the GPU, submitting to the GPU's replay queue: the doorbell write returns at once.
//! Every other submission is forwarded behind the gates of the windows still running.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocprof_replay_sys::*;

use super::copies::Busy;
use super::gates::{self, ReplayQueue, barrier_and};
use super::{ACTIVE, ArenaMemory, BACKEND, Backend, Gpu, QueueState, kernel_args};
use crate::dispatch::{AgentId, DispatchId, DispatchInfo, QueueId, Runtime, blocks_of};
use crate::engine::drain::{DrainLimits, DrainWait};
use crate::engine::gate;
use crate::engine::phases::{self, Phase};
use crate::engine::snapshot::{
    CopyError, DeviceMemory, DiffError, Direction, DirtyRanges, Staging, Tier, Transfer,
};
use crate::engine::state::{self, Window};
use crate::engine::window::{Joiner, Joins, Ordinary, PassError, ReplayTarget};
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
        if let Some(gate) = progress.gate.get() {
            if let (false, Some(be)) = (progress.handed_off.get(), BACKEND.get()) {
                // The gate is in the queue but no window will open it: open it and let the
                // dispatch run behind it, as submitted.
                // SAFETY: our gate signal; then the application's packet, inside the handler.
                unsafe {
                    (be.orig.signal_store)(gate, 0);
                    write(pkts, count);
                }
                // The window counted as open never runs: copies must not wait for it.
                // SAFETY: `data` is the QueueState registered with this handler.
                let agent = unsafe { (*data.cast::<QueueState>()).agent };
                if let Some(gpu) = be.gpu(agent) {
                    gpu.lock.window_ended();
                }
            }
            // Handed off: the window delivers the completion and opens the gate.
            return;
        }
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
    /// The gate placed in the dispatch's stead (asynchronous window).
    gate: Cell<Option<hsa_signal_t>>,
    /// The window was handed to its lane (or ran): it opens the gate.
    handed_off: Cell<bool>,
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
        crate::engine::footprint::note_device_write(gpu.agent.handle);
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
        unsafe {
            forward_tracked(
                be,
                queue,
                Some(gpu),
                write,
                pkts,
                count,
                Some(progress),
                None,
            )
        };
        // Bumped before and after: what was forwarded runs outside any window (a packet whose
        // header is still INVALID may become a dispatch).
        crate::engine::footprint::note_device_write(gpu.agent.handle);
        return;
    }

    let packet = packets[0];
    let info = dispatch_info(be, gpu, queue, &packet);
    *progress.info.borrow_mut() = Some(info.clone());
    let mut submission = Submission {
        be,
        gpu,
        queue,
        packet: &packet,
        write,
        progress,
    };
    let Some(window) = be.engine.decide(&info, &mut submission) else {
        return;
    };
    // SAFETY: `data` is a pointer made by Arc::into_raw (hooks::attach), still owned by the
    // handler registration: one more strong reference for the window.
    let queue_arc = unsafe {
        Arc::increment_strong_count(data.cast::<QueueState>());
        Arc::from_raw(data.cast::<QueueState>())
    };
    // SAFETY: inside the handler with the application's packet.
    unsafe { open_window(be, gpu, queue_arc, packet, write, progress, window) };
}

/// The submitting thread's side of a dispatch before the window: the gate's verdict and the
/// ordinary single run, forwarded as submitted.
struct Submission<'a> {
    be: &'static Backend,
    gpu: &'static Gpu,
    queue: &'a QueueState,
    packet: &'a hsa_kernel_dispatch_packet_t,
    write: Writer,
    progress: &'a Progress,
}

impl Ordinary for Submission<'_> {
    fn refusal(&self) -> Option<DeclineReason> {
        refusal(self.be, self.gpu, self.packet)
    }
    fn run_once(&mut self) -> bool {
        // Outside any window: the engine bumps the write epoch after this, this is the bump
        // before ([carried fingerprints](crate::engine::footprint#carried-fingerprints)).
        crate::engine::footprint::note_device_write(self.gpu.agent.handle);
        // SAFETY: the application's packet, forwarded inside the handler.
        unsafe {
            forward_tracked(
                self.be,
                self.queue,
                Some(self.gpu),
                self.write,
                (self.packet as *const hsa_kernel_dispatch_packet_t).cast(),
                1,
                Some(self.progress),
                None,
            )
        };
        true
    }
}

/// Why the backend knows this dispatch must not be replayed: its GPU gets the application's
/// own PM4 packets, or its arguments point into host-visible memory the host cannot read
/// (what it can read is watched instead: [`host_pointers`]).
fn refusal(
    be: &Backend,
    gpu: &Gpu,
    packet: &hsa_kernel_dispatch_packet_t,
) -> Option<DeclineReason> {
    if gpu.vendor_packets.load(Ordering::Relaxed) {
        return Some(DeclineReason::VendorPackets);
    }
    host_pointers(be, gpu, packet).err()
}

/// The host-readable ranges (host address, length) of host-visible memory the dispatch's
/// kernarg segment points into, or why the dispatch runs once, by the engine's rules
/// ([`gate::reach`]; [`Reach`] answers them for this backend); when its kernel's kernarg size is
/// unknown while memory a window cannot restore exists, the first kind that exists
/// ([`gate::reach_unread`]).
fn host_pointers(
    be: &Backend,
    gpu: &Gpu,
    packet: &hsa_kernel_dispatch_packet_t,
) -> Result<Vec<(usize, usize)>, DeclineReason> {
    let pointers = if be.system_memory_reachable {
        be.pointer_words.read().get(&packet.kernel_object).cloned()
    } else {
        None
    };
    let reach = Reach { be, gpu, pointers };
    if be.host_memory.read().is_empty()
        && unrestorable_exists(be).is_none()
        && be.gpus.len() <= 1
        && reach.pointers.is_none()
    {
        return Ok(Vec::new());
    }
    let size = match be.kernarg_sizes.read().get(&packet.kernel_object).copied() {
        Some(0) => return Ok(Vec::new()),
        Some(_) if packet.kernarg_address.is_null() => return Ok(Vec::new()),
        Some(size) => size,
        None => {
            let Some(reason) = gate::reach_unread(&reach) else {
                return Ok(Vec::new());
            };
            // A kernel object of an executable we did not see frozen: its arguments cannot be
            // inspected while memory the window cannot restore exists.
            tracing::debug!(
                kernel_object = packet.kernel_object,
                "the kernarg size of a kernel is unknown while memory the window cannot \
                 restore exists"
            );
            return Err(reason);
        }
    };
    // SAFETY: the kernarg segment of a dispatch the application just submitted: its kernel's
    // KERNARG_SEGMENT_SIZE bytes, host-accessible kernarg memory.
    let args =
        unsafe { std::slice::from_raw_parts(packet.kernarg_address.cast::<u8>(), size as usize) };
    gate::reach(&reach, args)
}

/// Whether memory exists that no window may restore or watch — foreign memory
/// ([`Backend::foreign_memory`]) or shared virtual memory ([`Backend::svm_memory`]) — and
/// the reason a dispatch that may reach it declines.
fn unrestorable_exists(be: &Backend) -> Option<DeclineReason> {
    if !be.foreign_memory.read().is_empty() {
        Some(DeclineReason::ForeignMemory)
    } else if !be.svm_memory.read().is_empty() {
        Some(DeclineReason::HostMemory)
    } else {
        None
    }
}

/// Whether another GPU than `gpu` owns tracked allocations (which a kernel of `gpu` may be
/// given once the application allowed it access: `hsa_amd_agents_allow_access`). Scans the
/// inventory: only for kernels whose arguments cannot be read, and for stored pointers.
fn peers_own_memory(be: &Backend, gpu: &Gpu) -> bool {
    be.gpus.len() > 1
        && be
            .gpus
            .iter()
            .any(|g| g.index != gpu.index && state::INVENTORY.owns_any(AgentId(g.agent.handle)))
}

/// What a dispatch of `gpu` may reach, as this backend records it ([`gate::MemoryReach`]).
/// `pointers`: the kernel's pointer arguments (their word offsets), checked for system memory
/// where the runtime makes all of it GPU-accessible; `None` for words stored in module
/// variables, and elsewhere.
struct Reach<'a> {
    be: &'a Backend,
    gpu: &'a Gpu,
    pointers: Option<kernel_args::PointerWords>,
}

impl gate::MemoryReach for Reach<'_> {
    /// Memory another process or GPU writes (IPC and interop imports).
    fn foreign(&self, words: &[u8]) -> Option<usize> {
        gate::first_pointer_into(words, &self.be.foreign_memory.read()).map(|p| p.1)
    }

    /// An allocation another GPU than this one owns: the window drains, fences and captures
    /// only its own GPU's memory, so the kernel's writes there would be repeated once per pass
    /// and the owner's work could race a restore.
    fn peer(&self, words: &[u8]) -> Option<(usize, u64)> {
        if self.be.gpus.len() <= 1 {
            return None;
        }
        state::INVENTORY
            .first_owned_by_other(gate::address_words(words), AgentId(self.gpu.agent.handle))
            .map(|(addr, owner)| (addr, owner.0))
    }

    /// Shared virtual memory: the host reads and writes it through the same address at any
    /// time, and no window captures it.
    fn uncaptured(&self, words: &[u8]) -> Option<(usize, DeclineReason)> {
        gate::first_pointer_into(words, &self.be.svm_memory.read())
            .map(|p| (p.1, DeclineReason::HostMemory))
    }

    fn system(&self, words: &[u8]) -> Option<usize> {
        let pointers = self.pointers.as_ref()?;
        let host = self.be.host_memory.read();
        let variables = self.be.variables.read();
        kernel_args::word_values(words, pointers)
            .find(|&w| system_memory(self.be, &host, &variables, w))
    }

    fn host(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, usize> {
        let host = self.be.host_memory.read();
        if host.is_empty() {
            return Ok(Vec::new());
        }
        host_ranges(self.be, &host, words)
    }

    fn present(&self) -> gate::Present {
        gate::Present {
            foreign: !self.be.foreign_memory.read().is_empty(),
            peer: peers_own_memory(self.be, self.gpu),
            uncaptured: (!self.be.svm_memory.read().is_empty())
                .then_some(DeclineReason::HostMemory),
            host: !self.be.host_memory.read().is_empty(),
        }
    }
}

/// Whether `addr` is system memory a kernel can write without any call the backend sees
/// (the runtime makes all system memory GPU-accessible: [`Backend::system_memory_reachable`]):
/// not a small number, no host range, tracked allocation or module variable holds it, the
/// process maps its page readable, and the runtime knows it as none of its allocations
/// (pointer type unknown: `malloc`'d memory, the stack, a mapped file).
fn system_memory(
    be: &Backend,
    host: &std::collections::BTreeMap<usize, usize>,
    variables: &std::collections::BTreeMap<usize, usize>,
    addr: usize,
) -> bool {
    let within = |map: &std::collections::BTreeMap<usize, usize>| {
        map.range(..=addr)
            .next_back()
            .is_some_and(|(&base, &size)| addr - base < size)
    };
    if addr < 0x1_0000 || within(host) || within(variables) {
        return false;
    }
    if crate::engine::state::INVENTORY.agent_of(addr).is_some() || !gate::mapped(addr) {
        return false;
    }
    be.pointer_info(addr)
        .is_some_and(|info| info.type_ == HSA_EXT_POINTER_TYPE_UNKNOWN)
}

/// The host-readable ranges (host address, length) of the host-visible memory (`host`, from
/// [`Backend::host_memory`]) that the 8-byte-aligned words of `args` point into — a kernarg
/// segment, or words stored in module variables; `Err` with the first word that points into
/// host-visible memory the host cannot read.
fn host_ranges(
    be: &Backend,
    host: &std::collections::BTreeMap<usize, usize>,
    args: &[u8],
) -> Result<Vec<(usize, usize)>, usize> {
    let readable = be.host_readable.read();
    let mut watch: Vec<(usize, usize)> = Vec::new();
    let mut rest = args;
    while let Some((offset, addr, base)) = gate::first_pointer_into(rest, host) {
        match readable.get(&base) {
            Some(&(len, host_base)) => {
                if !watch.contains(&(host_base, len)) {
                    watch.push((host_base, len));
                }
            }
            None => return Err(addr),
        }
        rest = &rest[offset + 8..];
    }
    Ok(watch)
}

/// Puts the dispatch's ready barrier and gate in its place on the application's queue and
/// hands its window to the GPU's lane. Without a replay queue or signals the window runs here
/// and declines: the dispatch is forwarded as submitted.
///
/// # Safety
/// Inside the interceptor, with the application's packet.
unsafe fn open_window(
    be: &'static Backend,
    gpu: &'static Gpu,
    queue: Arc<QueueState>,
    packet: hsa_kernel_dispatch_packet_t,
    write: Writer,
    progress: &Progress,
    window: Window,
) {
    let replay = gpu
        .replay
        .get_or_init(|| ReplayQueue::create(be, gpu.agent))
        .as_ref();
    let ready = new_signal(be);
    let gate = new_signal(be);
    let (Some(replay), Some(ready), Some(gate)) = (replay, ready, gate) else {
        for s in [ready, gate].into_iter().flatten() {
            // SAFETY: our signal, referenced by nothing.
            unsafe { (be.orig.signal_destroy)(s) };
        }
        tracing::warn!(
            "no replay queue or signals for an asynchronous window: the dispatch runs once"
        );
        let mut target = HsaTarget::new(be, gpu, queue, packet, Sink::App(write));
        let ran = catch_unwind(AssertUnwindSafe(|| window.run(&mut target)));
        // What the window forwarded is the handler's own forwarding: after an internal panic
        // the handler neither forwards the dispatch a second time nor loses it.
        progress.forwarded.set(target.sent.forwarded.get());
        progress.completed.set(target.sent.completed.get());
        if let Err(panic) = ran {
            std::panic::resume_unwind(panic);
        }
        return;
    };
    // Barrier bit: resolves once everything before the dispatch finished; system release so
    // the window's copies see what that work wrote.
    let ready_barrier = barrier_and(
        &[],
        ready,
        true,
        HSA_FENCE_SCOPE_NONE,
        HSA_FENCE_SCOPE_SYSTEM,
    );
    // System acquire: what follows sees the passes' and the restores' writes.
    let gate_barrier = barrier_and(
        &[gate],
        hsa_signal_t::default(),
        true,
        HSA_FENCE_SCOPE_SYSTEM,
        HSA_FENCE_SCOPE_SYSTEM,
    );
    let pair = [ready_barrier, gate_barrier];
    // Resolved by `QueueState::retire_destroyed` if the queue is destroyed before its barrier
    // ran (then it never will).
    queue.life.lock().ready.push(ready);
    let ready_after = queue.submitted.load(Ordering::Acquire);
    progress.gate.set(Some(gate));
    gpu.lock.window_opened();
    // SAFETY: two packets of ours, forwarded inside the handler.
    unsafe {
        forward_tracked(
            be,
            &queue,
            Some(gpu),
            write,
            pair.as_ptr().cast(),
            2,
            None,
            Some(gate),
        )
    };
    progress.forwarded.set(true);
    // The dispatch's own completion signal resolves only when its window ends: a barrier on
    // another queue waiting for it is held by the gate too (`note_held`).
    if packet.completion_signal.handle != 0 {
        gpu.gates.lock().hold(packet.completion_signal.handle, gate);
    }
    let mut target = HsaTarget::new(be, gpu, queue, packet, Sink::Replay(replay));
    // Decided: the gate found nothing it refuses, so this is the host-readable part (if any).
    target.watch = host_pointers(be, gpu, &packet).unwrap_or_default();
    target.ready = Some(ready);
    target.ready_after = ready_after;
    target.gate = Some(gate);
    // In submission order with the GPU's other pending windows: each lane job runs the next
    // one, and a window whose run takes this one in takes it from there.
    gpu.pending.lock().fresh.push_back(Detached(window, target));
    let key = gpu.agent.handle;
    let spawned = be.engine.workers.spawn(
        key,
        &format!("gpu{}", gpu.index),
        Box::new(move || run_next(gpu)),
    );
    progress.handed_off.set(true);
    if let Err(job) = spawned {
        job();
    }
}

/// A window and its target, moved to the GPU's lane.
struct Detached(Window, HsaTarget);

// SAFETY: the target's raw pointers (the application's kernarg and queue objects, our replay
// queue) are runtime objects usable from any thread; nothing in it is tied to the submitting
// thread (the writer is not used by a replay-queue target).
unsafe impl Send for HsaTarget {}

/// The GPU's asynchronous windows not started yet, in submission order; each has a lane job
/// that runs the next one ([`run_next`]). A window whose [run](crate::engine::window#runs)
/// takes the following dispatches of its queue in takes them from here ([`HsaJoins`]).
#[derive(Default)]
pub(crate) struct PendingWindows {
    fresh: VecDeque<Detached>,
}

/// A lane job: runs the GPU's next pending window, if a run has not taken it in already.
fn run_next(gpu: &'static Gpu) {
    let next = gpu.pending.lock().fresh.pop_front();
    if let Some(detached) = next {
        detached.run();
    }
}

/// The dispatches that may join a window's run on HSA: the GPU's next pending windows, each
/// on the same queue right behind the run's last member (its ready barrier and gate the next
/// tracked submission there: nothing of the application between them).
struct HsaJoins {
    gpu: &'static Gpu,
    queue: Arc<QueueState>,
    /// The tracked submission before the run's last member.
    tail: u64,
    /// The candidate shown and not taken yet (off the pending list meanwhile).
    held: Option<Detached>,
}

impl Joins<'static> for HsaJoins {
    fn peek(&mut self) -> Option<(&Window, &mut (dyn ReplayTarget + 'static))> {
        if self.held.is_none() {
            let mut pending = self.gpu.pending.lock();
            let Detached(_, next) = pending.fresh.front()?;
            let adjacent = Arc::ptr_eq(&next.queue, &self.queue)
                && next.ready_after == self.tail + 1
                && matches!(next.sink, Sink::Replay(_))
                && next.watch.is_empty();
            if !adjacent {
                return None;
            }
            self.held = pending.fresh.pop_front();
        }
        let Detached(window, target) = self.held.as_mut()?;
        Some((&*window, target as &mut dyn ReplayTarget))
    }

    fn take(&mut self) -> Option<Joiner<'static>> {
        let Detached(window, target) = self.held.take()?;
        self.tail = target.ready_after;
        Some(Joiner {
            window,
            target: Box::new(target),
        })
    }
}

impl Drop for HsaJoins {
    fn drop(&mut self) {
        // Shown and not taken: back at the front, for its own window next.
        if let Some(d) = self.held.take() {
            self.gpu.pending.lock().fresh.push_front(d);
        }
    }
}

impl Detached {
    fn run(self) {
        let Detached(window, mut target) = self;
        let info = window.info().clone();
        let mut joins = HsaJoins {
            gpu: target.gpu,
            queue: Arc::clone(&target.queue),
            tail: target.ready_after,
            held: None,
        };
        IN_WINDOW.with(|w| w.set(true));
        let ran = catch_unwind(AssertUnwindSafe(|| {
            window
                .run_with(&mut target, &crate::engine::state::INVENTORY, &mut joins)
                .1
        }));
        IN_WINDOW.with(|w| w.set(false));
        drop(joins);
        if ran.is_err() {
            tracing::error!(
                kernel = info.kernel(),
                "internal error (panic) in a replay window"
            );
            crate::engine::footprint::note_device_write(info.agent.0);
            // The record first: it is in the file before the application sees completion.
            if target.ran {
                state::report(
                    &info,
                    &Outcome::ordinary(OutcomeKind::Failed(FailureReason::InternalError)),
                );
            }
        }
        target.settle_dispatch();
        // The later members of its run, in order, after its own completion (after a panic
        // they were dropped, and each settled then).
        for mut later in ran.unwrap_or_default() {
            later.released();
        }
    }
}

/// Forwards `count` packets and, when the queue is tracked, a barrier-AND packet that
/// decrements its `inflight` signal once everything before it has finished. When the ring is
/// full it first waits for room (see `Backlog`). When `gpu` names the queue's GPU, the
/// isolation gates of its windows still running go first (barriers on their gate signals), all
/// under the GPU's gate lock; `close` names the window gate this submission holds (its own
/// queue's later work waits behind it).
///
/// The packets are written exactly once, here, whatever happens in the bookkeeping around them
/// ([`forward_steps`]); `progress` is marked right before.
///
/// # Safety
/// Inside the interceptor, with `count` valid packets at `pkts`.
#[allow(clippy::too_many_arguments)]
unsafe fn forward_tracked(
    be: &Backend,
    queue: &QueueState,
    gpu: Option<&Gpu>,
    write: Writer,
    pkts: *const c_void,
    count: u64,
    progress: Option<&Progress>,
    close: Option<hsa_signal_t>,
) {
    let tracked = queue.inflight.handle != 0;
    let mut steps = TrackedForward {
        be,
        queue,
        backlog: tracked.then(|| queue.backlog.lock()),
        gpu,
        gates: None,
        in_window: in_window(),
        write,
        pkts,
        count,
        close,
    };
    // SAFETY: caller contract.
    unsafe { forward_steps(&mut steps, pkts, count, progress) };
}

/// Gate barriers written before a submission.
type GateBarriers = smallvec::SmallVec<[hsa_barrier_and_packet_t; 1]>;

/// The steps of a tracked forward: the backend's bookkeeping and the runtime's writes, whose
/// order is [`forward_steps`]'s (one piece of code for the backend and its tests).
trait ForwardSteps {
    /// Waits, bounded, until the ring has room for `packets` more (bookkeeping).
    fn wait_for_room(&mut self, packets: u64);
    /// Barriers on the closed gates the queue has none for yet, which count as placed from now
    /// on (bookkeeping).
    fn gate_barriers(&mut self) -> GateBarriers;
    /// Barriers on every gate still closed: when [`gate_barriers`](Self::gate_barriers)
    /// failed half way (it may have counted gates as placed).
    fn every_gate_barrier(&mut self) -> GateBarriers;
    /// Counts the submission of `packets` packets (ours included) as in flight; the barrier
    /// that retires it, for a tracked queue. Atomics, runtime calls and a push (an allocation
    /// failure aborts) only: it cannot panic.
    fn count(&mut self, packets: u64) -> Option<hsa_barrier_and_packet_t>;
    /// Notes what of the submission cannot complete before a window's gate opens, so that
    /// drains stop short of it (bookkeeping).
    fn note_held(&mut self);
    /// Writes `count` packets at `pkts` to the queue (the runtime's writer).
    ///
    /// # Safety
    /// Inside the interceptor, with `count` valid packets at `pkts`.
    unsafe fn write(&mut self, pkts: *const c_void, count: u64);
}

/// A tracked forward's steps: the gate barriers, the submission counted, what it holds noted,
/// then the gate barriers, the packets and the retiring barrier written. Every step of
/// bookkeeping runs under `catch_unwind`: a panic in one (a bug of ours) is logged and the
/// submission goes on with what the others did, so the packets are written exactly once, here
/// — never lost, never left to the handler's recovery — and the queue's count of work in
/// flight always gets its retiring barrier. When the gate barriers fail, every closed gate of
/// the GPU gets one (never fewer than a window needs). `progress` is marked right before the
/// packets' write, with nothing that can panic after it.
///
/// # Safety
/// Inside the interceptor, with `count` valid packets at `pkts`.
unsafe fn forward_steps(
    steps: &mut impl ForwardSteps,
    pkts: *const c_void,
    count: u64,
    progress: Option<&Progress>,
) {
    use super::hooks::guarded;
    // Our barrier, and a barrier for gates that may come before.
    let _ = guarded("waiting for room in the ring", || {
        steps.wait_for_room(count + 2)
    });
    let gates = guarded("placing the isolation gates", || steps.gate_barriers())
        .or_else(|| {
            guarded("placing every isolation gate", || {
                steps.every_gate_barrier()
            })
        })
        .unwrap_or_default();
    let retire = steps.count(count + 1 + gates.len() as u64);
    if retire.is_some() {
        let _ = guarded("noting submissions held by a gate", || steps.note_held());
    }
    if !gates.is_empty() {
        // SAFETY: barrier packets of ours, forwarded inside the handler.
        unsafe { steps.write(gates.as_ptr().cast(), gates.len() as u64) };
    }
    if let Some(progress) = progress {
        progress.forwarded.set(true);
        progress.completed.set(true);
    }
    // SAFETY: caller contract.
    unsafe { steps.write(pkts, count) };
    if let Some(barrier) = retire {
        // SAFETY: one packet of ours, forwarded inside the handler.
        unsafe { steps.write((&barrier as *const hsa_barrier_and_packet_t).cast(), 1) };
    }
}

/// [`ForwardSteps`] on a queue of the runtime: its backlog (a tracked queue), locked for the
/// whole submission, and the GPU's gate list, locked once there is room in the ring (waiting
/// for room never holds the GPU's other queues) until the submission is written.
struct TrackedForward<'a> {
    be: &'a Backend,
    queue: &'a QueueState,
    backlog: Option<parking_lot::MutexGuard<'a, super::Backlog>>,
    gpu: Option<&'a Gpu>,
    gates: Option<parking_lot::MutexGuard<'a, gates::GateList>>,
    in_window: bool,
    write: Writer,
    pkts: *const c_void,
    count: u64,
    close: Option<hsa_signal_t>,
}

impl TrackedForward<'_> {
    /// Takes the GPU's gate lock, held until the submission is written (idempotent).
    fn lock_gates(&mut self) {
        if self.gates.is_none() {
            self.gates = self.gpu.map(|g| g.gates.lock());
        }
    }

    /// The gate list (locked), outside a window (a window's own packets go as they are).
    fn gate_list(&mut self) -> Option<&mut gates::GateList> {
        self.lock_gates();
        if self.in_window {
            return None;
        }
        self.gates.as_deref_mut()
    }
}

fn barriers_on(gates: &[hsa_signal_t]) -> GateBarriers {
    gates
        .chunks(5)
        .map(|deps| {
            barrier_and(
                deps,
                hsa_signal_t::default(),
                false,
                HSA_FENCE_SCOPE_SYSTEM,
                HSA_FENCE_SCOPE_NONE,
            )
        })
        .collect()
}

impl ForwardSteps for TrackedForward<'_> {
    fn wait_for_room(&mut self, packets: u64) {
        let (be, queue) = (self.be, self.queue);
        if let Some(backlog) = self.backlog.as_deref_mut() {
            queue.wait_for_room(be, backlog, packets, be.settings().drain);
        }
    }

    fn gate_barriers(&mut self) -> GateBarriers {
        let (be, queue) = (self.be, self.queue);
        self.gate_list().map_or_else(GateBarriers::new, |list| {
            barriers_on(&list.pending_for(be, queue))
        })
    }

    fn every_gate_barrier(&mut self) -> GateBarriers {
        self.gate_list()
            .map_or_else(GateBarriers::new, |list| barriers_on(&list.closed_gates()))
    }

    fn count(&mut self, packets: u64) -> Option<hsa_barrier_and_packet_t> {
        self.lock_gates();
        let backlog = self.backlog.as_deref_mut()?;
        backlog.push(u32::try_from(packets).unwrap_or(u32::MAX));
        let index = gates::count_submission(self.be, self.queue.inflight, &self.queue.submitted);
        if let Some(gate) = self.close {
            // The submission that holds the gate: later windows' drains stop short of it.
            self.queue.pending_gates.lock().push((index, gate));
        }
        Some(barrier_and(
            &[],
            self.queue.inflight,
            true,
            HSA_FENCE_SCOPE_NONE,
            HSA_FENCE_SCOPE_NONE,
        ))
    }

    fn note_held(&mut self) {
        let (be, queue, pkts, count) = (self.be, self.queue, self.pkts, self.count);
        let index = queue.submitted.load(Ordering::Acquire);
        if let Some(list) = self.gate_list() {
            // SAFETY: `count` packets of the application at `pkts` (forward_tracked's caller
            // contract).
            unsafe { note_held(be, list, queue, pkts, count, index) };
        }
    }

    unsafe fn write(&mut self, pkts: *const c_void, count: u64) {
        // SAFETY: caller contract.
        unsafe { (self.write)(pkts, count) };
    }
}

/// Keeps track of what cannot complete before a window's gate opens, so that drains stop short
/// of it instead of waiting for it (a barrier on another queue waiting for a marker behind the
/// replayed dispatch — `hipStreamWaitEvent` across streams — would otherwise hold the window
/// until its drain deadline). `list` (the GPU's gate list, locked for this submission) holds
/// the completion signals of the replayed dispatches and of packets submitted behind a closed
/// gate on `queue`; the completion signal of a barrier-AND waiting for one of them (a
/// barrier-OR: for all of its dependencies) is held too. A submission whose first packet is
/// such a barrier becomes a point the drains of `queue` stop short of, as of a later window's
/// gate (packets before it in the same submission would still need draining, so a barrier
/// further in does not count). Signals held on another GPU are not looked at: such a barrier
/// is drained as before.
///
/// # Safety
/// `pkts` holds `count` AQL packets of 64 bytes.
unsafe fn note_held(
    be: &Backend,
    list: &mut gates::GateList,
    queue: &QueueState,
    pkts: *const c_void,
    count: u64,
    index: u64,
) {
    // The latest dispatch gate of `queue` still closed: this submission is behind it.
    let behind = queue
        .pending_gates
        .lock()
        .iter()
        .rev()
        .map(|(_, g)| *g)
        .find(|g| {
            // SAFETY: a gate signal of ours, alive while listed (`GateList::sweep` unlists a
            // gate before it can be destroyed).
            unsafe { (be.orig.signal_load)(*g) != 0 }
        });
    if behind.is_none() && !list.is_holding() {
        return;
    }
    let mut first_waits = None;
    let mut waits_for = None;
    for i in 0..count as usize {
        // SAFETY: caller contract; header at 0, dependencies at 8..48 (barriers), completion
        // signal at 56 in every AQL packet type.
        let (header, deps, completion) = unsafe {
            let p = pkts.cast::<u8>().add(i * 64);
            (
                std::ptr::read_unaligned(p.cast::<u16>()),
                std::ptr::read_unaligned(p.add(8).cast::<[u64; 5]>()),
                std::ptr::read_unaligned(p.add(56).cast::<u64>()),
            )
        };
        let kind = u32::from(header & 0xff);
        let mut deps = deps.into_iter().filter(|d| *d != 0).peekable();
        let gate = if kind == HSA_PACKET_TYPE_BARRIER_AND {
            deps.find_map(|d| list.held_by(d))
        } else if kind == HSA_PACKET_TYPE_BARRIER_OR && deps.peek().is_some() {
            deps.map(|d| list.held_by(d))
                .collect::<Option<smallvec::SmallVec<[hsa_signal_t; 5]>>>()
                .and_then(|g| g.first().copied())
        } else {
            None
        };
        if i == 0 {
            first_waits = gate;
        }
        waits_for = waits_for.or(gate);
        if let (Some(g), true) = (behind.or(waits_for), completion != 0) {
            list.hold(completion, g);
        }
    }
    if let (Some(g), None) = (first_waits, behind) {
        queue.pending_gates.lock().push((index, g));
    }
}

/// Arms a window's isolation gate on its GPU, once everything before the dispatch on its own
/// queue has finished: from now on every submission to another queue of the GPU goes behind
/// it. Returns, for each other queue, the submissions to drain: those before now, short of a
/// later window's gate still closed in that queue (which waits for this window to end).
///
/// Called once the GPU's replay queue and aside lanes are idle: an ended window may leave its
/// gate to open behind packets there (its ordinary run, a stuck pass), and a drain that
/// stopped short of such a gate would let the application's work behind it (submitted before
/// this gate, so not behind it) run during the window. A gate still closed then belongs to a
/// window that has not run, or to a deferred ordinary run, which waits for this window's end.
fn arm_isolation(
    be: &Backend,
    gpu: &Gpu,
    own: &QueueState,
    gate: hsa_signal_t,
) -> Vec<(Arc<QueueState>, u64)> {
    let mut list = gpu.gates.lock();
    list.close(gate);
    let agent_queues: Vec<Arc<QueueState>> = be
        .queues
        .read()
        .values()
        .filter(|q| q.agent == gpu.agent)
        .cloned()
        .collect();
    let replays: smallvec::SmallVec<[&ReplayQueue; 4]> = gpu
        .replay
        .get()
        .and_then(Option::as_ref)
        .into_iter()
        .chain(gpu.aside.all().into_iter().map(|l| -> &ReplayQueue { l }))
        .collect();
    list.sweep(be, &agent_queues, &replays);
    agent_queues
        .into_iter()
        .filter(|q| q.queue != own.queue)
        .map(|q| {
            let mut n = q.submitted.load(Ordering::Acquire);
            let mut pending = q.pending_gates.lock();
            pending.retain(|(_, g)| {
                // SAFETY: a gate signal of ours, alive while listed (`GateList::sweep`
                // unlists a gate before it can be destroyed).
                unsafe { (be.orig.signal_load)(*g) != 0 }
            });
            if let Some((index, _)) = pending.first() {
                n = n.min(index - 1);
            }
            drop(pending);
            (q, n)
        })
        .collect()
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
        context: None,
    }
}

/// Where a target's packets go.
#[derive(Clone, Copy)]
enum Sink {
    /// The application's queue, through the interceptor's writer (only inside the handler): a
    /// window that could not go asynchronous, which declines and runs the dispatch there.
    App(Writer),
    /// The GPU's replay queue (asynchronous window).
    Replay(&'static ReplayQueue),
}

/// The replay window's handle on one intercepted dispatch.
struct HsaTarget {
    be: &'static Backend,
    gpu: &'static Gpu,
    queue: Arc<QueueState>,
    packet: hsa_kernel_dispatch_packet_t,
    sink: Sink,
    /// The engine's own completion signal for passes and drains (created on first use).
    signal: Option<hsa_signal_t>,
    /// Completion signal for snapshot copies (created on first use).
    copy_signal: Option<hsa_signal_t>,
    /// Timestamps of the last pass that completed.
    last_time: Option<hsa_amd_profiling_dispatch_time_t>,
    /// The agent's window lock, held from `begin` to `end`.
    window: Option<parking_lot::RwLockWriteGuard<'static, ()>>,
    /// One counter profile per counter pass of the dispatch's metric set.
    profiles: Vec<super::counters::PassProfile>,
    /// The counter pass the next `run_pass` carries.
    armed: Option<u32>,
    /// Resolved by the ready barrier: everything before the dispatch on its queue finished.
    ready: Option<hsa_signal_t>,
    /// The queue's tracked submissions before the ready barrier (what it waits for).
    ready_after: u64,
    /// The gate the application's later work on the dispatch's queue waits behind.
    gate: Option<hsa_signal_t>,
    /// The isolation gate the GPU's other queues wait behind, armed in `drain`.
    isolation: Option<hsa_signal_t>,
    /// Submissions of the GPU's other queues before the isolation gate: what the window
    /// drains.
    others: Vec<(Arc<QueueState>, u64)>,
    /// Host memory the arguments point into, watched across the first pass.
    watch: Vec<(usize, usize)>,
    /// When the window was opened (for contention).
    opened: Instant,
    /// Some execution of the dispatch (a pass or the ordinary run) was submitted.
    ran: bool,
    /// Later passes submitted and not collected yet ([`ReplayTarget::submit_pass`]), oldest
    /// first: whether each is timed, its completion signal and its number.
    queued: VecDeque<(bool, hsa_signal_t, u64)>,
    /// Later passes submitted so far (the next one's number).
    passes_submitted: u64,
    /// A queued pass that outlived the pass deadline, until [`ReplayTarget::settle_late_pass`].
    late: Option<hsa_signal_t>,
    /// The number of the last queued pass that outlived the pass deadline.
    late_pass: Option<u64>,
    /// Restores are queued ([`DeviceMemory::queue_restores`]).
    queue_restores: bool,
    /// A pass of ours was left running past the late deadline ([`HsaTarget::leave_stuck`]):
    /// restores queued behind it wait for it.
    left_stuck: bool,
    /// Restores queued and not known finished yet, oldest first.
    restores: VecDeque<QueuedRestore>,
    /// Signals of ours no packet or copy refers to any more, for the next passes and
    /// restores.
    spare: Vec<hsa_signal_t>,
    /// The application's completion was delivered (or travels with a submitted packet); an
    /// asynchronous window delivers it in [`HsaTarget::settle_dispatch`].
    completed: bool,
    /// The gate was opened (or a submitted packet opens it).
    gate_open: bool,
    /// The last diff compared the VRAM snapshots with the device compare kernel.
    diffed_on_device: bool,
    /// What a window that never left the submitting thread ([`Sink::App`]) forwarded, marked
    /// right before the write.
    sent: Progress,
    /// [`settle_dispatch`](Self::settle_dispatch) ran.
    settled: bool,
}

/// A restore queued on the replay queue ([`DeviceMemory::queue_restores`]): a barrier behind
/// everything submitted before it resolves `after`, its copies wait for `after` and complete
/// `copied`, and a barrier-AND packet right behind them on the replay queue waits for
/// `copied` (so every later packet there — the pass, the run's other members' passes, an
/// ordinary run, a compare kernel — starts after the copies) and completes `done`. Once
/// `done` is 0 no packet or copy refers to the three signals any more.
struct QueuedRestore {
    /// The number of the pass submitted next (the one behind it).
    before_pass: u64,
    after: hsa_signal_t,
    copied: hsa_signal_t,
    done: hsa_signal_t,
    /// What its copies read and write (device regions and staging: start, bytes).
    touches: Vec<(usize, usize)>,
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

/// A pass of `app` on the replay queue, completing `signal`. Barrier bit: the pass starts after
/// the restore before it. System-scope fences: the restore's copies (and the snapshot's reads)
/// must be visible to the pass, and the pass's writes to the next capture or restore, whatever
/// scopes the application chose.
fn pass_packet(
    app: &hsa_kernel_dispatch_packet_t,
    signal: hsa_signal_t,
) -> hsa_kernel_dispatch_packet_t {
    let mut pass = *app;
    pass.completion_signal = signal;
    pass.header = packet_header(
        HSA_PACKET_TYPE_KERNEL_DISPATCH,
        true,
        HSA_FENCE_SCOPE_SYSTEM,
        HSA_FENCE_SCOPE_SYSTEM,
    );
    pass
}

/// The ordinary run of a window's dispatch on the replay queue, in hardware order: after
/// everything before the dispatch on its queue (the ready signal), the dispatch with its own
/// completion signal (the runtime's timestamps answer for it), then the barrier that opens the
/// gate. Memory may have just been restored by copies (a decline after passes, a failed
/// restore): the wait and the run acquire at system scope, as the passes do, whatever the
/// application's packet asked; the run and the opening release at system scope, since the
/// application's later work runs on another queue.
#[repr(C)]
struct RunChain {
    wait: hsa_barrier_and_packet_t,
    run: hsa_kernel_dispatch_packet_t,
    open: hsa_barrier_and_packet_t,
}

// Three 64-byte packets back to back, as the ring expects them.
const _: () = assert!(size_of::<RunChain>() == 3 * 64);

impl RunChain {
    fn new(app: &hsa_kernel_dispatch_packet_t, ready: hsa_signal_t, gate: hsa_signal_t) -> Self {
        let wait = barrier_and(
            &[ready],
            hsa_signal_t::default(),
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_NONE,
        );
        let mut run = *app;
        run.header = packet_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        );
        let open = barrier_and(
            &[],
            gate,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        );
        RunChain { wait, run, open }
    }
}

/// The ordinary run of a declined window whose dispatch's predecessors had not finished
/// ([`HsaTarget::defer_run`]): its own thread waits for the ready signal, then submits the run
/// and the gate's opening to the replay queue under the GPU's reader lock, so that it neither
/// runs during a window nor holds the replay queue while it waits.
struct DeferredRun {
    be: &'static Backend,
    gpu: &'static Gpu,
    replay: &'static ReplayQueue,
    queue: Arc<QueueState>,
    packet: hsa_kernel_dispatch_packet_t,
    ready: hsa_signal_t,
    gate: hsa_signal_t,
}

// SAFETY: as for `Detached`: the packet's pointers (kernarg, kernel object) and the queue
// state's are runtime objects usable from any thread.
unsafe impl Send for DeferredRun {}

impl DeferredRun {
    fn run(self) {
        if catch_unwind(AssertUnwindSafe(|| self.wait_and_submit())).is_err() {
            tracing::error!("internal error (panic) in the deferred run of a declined dispatch");
        }
        // The ready signal is this run's: unlisted, then retired like a window's.
        self.queue.life.lock().ready.retain(|r| *r != self.ready);
        self.gpu.gates.retire(&[self.ready]);
    }

    fn wait_and_submit(&self) {
        let o = &self.be.orig;
        // The wait is the application's: its predecessors finish when it lets them. In
        // slices, ending with the backend or when the queue is destroyed.
        loop {
            if !ACTIVE.load(Ordering::Relaxed) {
                return;
            }
            if self.queue.life.lock().destroyed {
                break;
            }
            // SAFETY: our ready signal (retired only by `run`, after this); a bounded wait.
            let v = unsafe {
                (o.signal_wait)(
                    self.ready,
                    HSA_SIGNAL_CONDITION_EQ,
                    0,
                    self.be.ticks(Duration::from_millis(100)),
                    HSA_WAIT_STATE_BLOCKED,
                )
            };
            if v == 0 {
                break;
            }
        }
        if self.queue.life.lock().destroyed {
            // Dropped with its queue: it does not run (see `QueueState::retire_destroyed`).
            // SAFETY: our gate signal (alive until it reads 0 and is swept).
            unsafe { (o.signal_store)(self.gate, 0) };
            return;
        }
        // Never during a window: it waits for the GPU's windows to end, as ordinary work does.
        let _reader = self.gpu.lock.read_outside_window(self.be.settings().lock);
        crate::engine::footprint::note_device_write(self.gpu.agent.handle);
        // The ready signal resolved: the chain does not reference it (it retires on its own).
        let chain = RunChain::new(&self.packet, hsa_signal_t::default(), self.gate);
        let ok = submit_ordinary_run(self.be, self.gpu, self.replay, &chain);
        crate::engine::footprint::note_device_write(self.gpu.agent.handle);
        if !ok {
            tracing::error!(
                "the ordinary run of a declined dispatch could not be submitted: the \
                 application has no result of it"
            );
            let app = self.packet.completion_signal;
            let life = self.queue.life.lock();
            if app.handle != 0 && !life.destroyed {
                // SAFETY: the application's completion signal, decremented once: never a hang.
                unsafe { (o.signal_subtract)(app, 1) };
            }
            // SAFETY: our gate signal.
            unsafe { (o.signal_store)(self.gate, 0) };
        }
    }
}

impl HsaTarget {
    /// Hands the ordinary run to a [`DeferredRun`] of its own; `false` when its thread could
    /// not be started (the run is then submitted now, behind the ready barrier).
    fn defer_run(&self, replay: &'static ReplayQueue, ready: hsa_signal_t) -> bool {
        let Some(gate) = self.gate else {
            return false;
        };
        let run = DeferredRun {
            be: self.be,
            gpu: self.gpu,
            replay,
            queue: self.queue.clone(),
            packet: self.packet,
            ready,
            gate,
        };
        std::thread::Builder::new()
            .name("rocprof-replay-deferred".into())
            .spawn(move || run.run())
            .is_ok()
    }
}

/// Submits an ordinary run on the GPU's replay queue or an aside lane, wherever it waits
/// behind nothing that may be waiting for it ([`gates::AsideLanes::submit_run`]).
fn submit_ordinary_run(
    be: &Backend,
    gpu: &Gpu,
    replay: &'static ReplayQueue,
    chain: &RunChain,
) -> bool {
    let held = replay_held(be, gpu);
    // SAFETY: three 64-byte packets in a row.
    unsafe {
        gpu.aside.submit_run(
            be,
            gpu.agent,
            replay,
            held,
            (chain as *const RunChain).cast(),
            3,
            be.settings().drain,
        )
    }
}

/// Whether a first pass that gave way still holds `gpu`'s replay queue ([`Gpu::yielded`]);
/// once it ended, its marker is retired.
fn replay_held(be: &Backend, gpu: &Gpu) -> bool {
    let mut yielded = gpu.yielded.lock();
    let Some(marker) = *yielded else {
        return false;
    };
    // SAFETY: our marker signal, alive until retired below.
    if unsafe { (be.orig.signal_load)(marker) } != 0 {
        return true;
    }
    *yielded = None;
    drop(yielded);
    gpu.gates.retire(&[marker]);
    false
}

/// How a wait for a pass's signal ended.
enum Waited {
    /// The signal reached 0: the pass finished.
    Zero,
    /// The deadline passed first.
    TimedOut,
    /// Work blocked on the window waited past the yield deadline first.
    HeldUp,
}

/// Creates a signal of ours with value 1.
fn new_signal(be: &Backend) -> Option<hsa_signal_t> {
    let mut s = hsa_signal_t::default();
    // SAFETY: creating a plain signal with no consumer list.
    let st = unsafe { (be.orig.signal_create)(1, 0, std::ptr::null(), &mut s) };
    (st == HSA_STATUS_SUCCESS).then_some(s)
}

impl HsaTarget {
    fn new(
        be: &'static Backend,
        gpu: &'static Gpu,
        queue: Arc<QueueState>,
        packet: hsa_kernel_dispatch_packet_t,
        sink: Sink,
    ) -> HsaTarget {
        HsaTarget {
            be,
            gpu,
            queue,
            packet,
            sink,
            signal: None,
            copy_signal: None,
            last_time: None,
            window: None,
            profiles: Vec::new(),
            armed: None,
            ready: None,
            ready_after: 0,
            gate: None,
            isolation: None,
            others: Vec::new(),
            watch: Vec::new(),
            opened: Instant::now(),
            ran: false,
            queued: VecDeque::new(),
            passes_submitted: 0,
            late: None,
            late_pass: None,
            queue_restores: false,
            left_stuck: false,
            restores: VecDeque::new(),
            spare: Vec::new(),
            completed: false,
            gate_open: false,
            diffed_on_device: false,
            sent: Progress::default(),
            settled: false,
        }
    }

    fn signal(&mut self) -> Result<hsa_signal_t, DeclineReason> {
        if let Some(s) = self.signal {
            return Ok(s);
        }
        let s = new_signal(self.be).ok_or(DeclineReason::SubmitFailed)?;
        self.signal = Some(s);
        Ok(s)
    }

    /// A signal of ours holding `value`: a spare one (this window's, else one an ended window
    /// of the GPU left), or a new one.
    fn take_signal(&mut self, value: i64) -> Option<hsa_signal_t> {
        let s = match self.spare.pop() {
            Some(s) => s,
            None => match self.gpu.spare_signals.lock().pop() {
                Some(s) => s,
                None => new_signal(self.be)?,
            },
        };
        // SAFETY: our live signal, referred to by nothing.
        unsafe { (self.be.orig.signal_store)(s, value) };
        Some(s)
    }

    /// Waits (copy deadline, for all of them) until every queued restore is done: their
    /// copies finished and the packet behind them passed. `Err(Stuck)`: one was not; it stays
    /// queued (the window's end lists it as stuck work).
    fn settle_restores(&mut self) -> Result<(), CopyError> {
        let end = Instant::now() + self.be.settings().copy;
        while let Some(r) = self.restores.front() {
            let left = end.saturating_duration_since(Instant::now());
            if !self.wait_zero(r.done, left) {
                return Err(CopyError::Stuck);
            }
            self.retire_restore();
        }
        Ok(())
    }

    /// Gives back the signals of the queued restores that are done, oldest first (the rest
    /// stay queued).
    fn settle_restores_done(&mut self) {
        while let Some(r) = self.restores.front() {
            // SAFETY: our live signal.
            if unsafe { (self.be.orig.signal_load)(r.done) } != 0 {
                break;
            }
            self.retire_restore();
        }
    }

    /// The oldest queued restore is done: its signals are spare.
    fn retire_restore(&mut self) {
        if let Some(r) = self.restores.pop_front() {
            self.spare.extend([r.after, r.copied, r.done]);
        }
    }

    /// At the window's end: queued restores still not done are stuck work (their staging and
    /// the memory they write stay theirs until `done`), and the application's later work on
    /// its queue waits for them (the gate opens behind them on the replay queue).
    fn leave_restores_stuck(&mut self) {
        for r in std::mem::take(&mut self.restores) {
            // SAFETY: our live signal.
            if unsafe { (self.be.orig.signal_load)(r.done) } == 0 {
                self.spare.extend([r.after, r.copied, r.done]);
                continue;
            }
            tracing::warn!(
                "a queued restore did not finish: its memory stays its own until it does"
            );
            if let (Some(gate), false) = (self.gate, self.gate_open) {
                // Behind the packet that waits for the copies.
                self.gate_open = self.signal_behind(gate);
            }
            // `after` and `copied` are left alive (a copy or the packet may still read them);
            // `done` is released by the stuck-work registry once it is 0.
            self.be
                .stuck
                .add_touching(self.gpu.index, r.done.handle, r.touches);
        }
    }

    /// Submits the batch's copies, each decrementing `signal` (which holds their count) once
    /// every signal of `deps` is 0; a refused copy takes the rest off the count: `false`.
    fn submit_copies(
        &self,
        direction: Direction,
        transfers: &[Transfer],
        deps: &[hsa_signal_t],
        signal: hsa_signal_t,
    ) -> bool {
        let Some((_, cpu)) = self.be.staging_pool else {
            // SAFETY: our live signal.
            unsafe { (self.be.orig.signal_subtract)(signal, transfers.len() as i64) };
            return false;
        };
        let o = &self.be.orig;
        let gpu = self.gpu.agent;
        let arena = self.gpu.arena.lock();
        let agent_of = |addr: usize| if arena.is_device(addr) { gpu } else { cpu };
        let n = transfers.len() as i64;
        for (k, t) in transfers.iter().enumerate() {
            // The device side is the GPU's memory: an application region, a module variable
            // or (a diff reading a snapshot back) a VRAM chunk of the arena.
            let (dst, dst_agent, src, src_agent) = match direction {
                Direction::Capture => (t.staging, agent_of(t.staging), t.device, gpu),
                Direction::Restore => (t.device, gpu, t.staging, agent_of(t.staging)),
            };
            // SAFETY: `device` is a pinned region of the agent (or a module variable) and
            // `staging` a buffer of ours of at least `len` bytes, accessible to the agent;
            // `deps` are live signals of ours.
            let st = unsafe {
                (o.async_copy)(
                    dst as *mut c_void,
                    dst_agent,
                    src as *const c_void,
                    src_agent,
                    t.len,
                    deps.len() as u32,
                    if deps.is_empty() {
                        std::ptr::null()
                    } else {
                        deps.as_ptr()
                    },
                    signal,
                )
            };
            if st != HSA_STATUS_SUCCESS {
                tracing::warn!(status = %Status(st), "a snapshot copy could not be submitted");
                // The rest are never submitted: take them off the count.
                // SAFETY: our live signal.
                unsafe { (o.signal_subtract)(signal, n - k as i64) };
                return false;
            }
        }
        true
    }

    /// A restore queued on the replay queue ([`QueuedRestore`]); `Err(Failed)` with nothing
    /// submitted when its signals or its first barrier could not be had. A copy refused
    /// midway: what was submitted is waited for (copy deadline), then `Err`.
    fn queue_copies(&mut self, transfers: &[Transfer]) -> Result<(), CopyError> {
        let n = transfers.len() as i64;
        let (Some(after), Some(copied), Some(done)) = (
            self.take_signal(1),
            self.take_signal(n),
            self.take_signal(1),
        ) else {
            return Err(CopyError::Failed);
        };
        if !self.signal_behind(after) {
            self.spare.extend([after, copied, done]);
            return Err(CopyError::Failed);
        }
        let submitted = self.submit_copies(Direction::Restore, transfers, &[after], copied);
        let behind = barrier_and(
            &[copied],
            done,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        );
        // SAFETY: one packet of ours, waiting for our live signal.
        let ordered =
            unsafe { self.submit((&behind as *const hsa_barrier_and_packet_t).cast(), 1) };
        let touches: Vec<(usize, usize)> = transfers
            .iter()
            .flat_map(|t| [(t.device, t.len), (t.staging, t.len)])
            .collect();
        if !ordered {
            // No packet on the replay queue waits for the copies (no room there): they are
            // waited for here, and then nothing refers to the signals any more.
            let end = Instant::now() + self.be.settings().copy;
            let finished = self.wait_zero(after, self.be.settings().copy)
                && self.wait_zero(copied, end.saturating_duration_since(Instant::now()));
            if finished {
                self.spare.extend([after, copied, done]);
                return Err(CopyError::Failed);
            }
            // `after` (its barrier may still run) and `done` are left alive.
            self.be
                .stuck
                .add_touching(self.gpu.index, copied.handle, touches);
            return Err(CopyError::Stuck);
        }
        self.restores.push_back(QueuedRestore {
            before_pass: self.passes_submitted,
            after,
            copied,
            done,
            touches,
        });
        if submitted {
            return Ok(());
        }
        // Some copies were refused: the batch failed; what was submitted is waited for.
        self.settle_restores()?;
        Err(CopyError::Failed)
    }

    /// After a drain ran out of time (or gave way) waiting for `queue` to retire its first `n`
    /// tracked submissions: the GPU's next drains check that instead of waiting again
    /// ([`StuckDrain`](crate::engine::agent::StuckDrain)).
    fn remember_stuck(&self, queue: Arc<QueueState>, n: u64) {
        if queue.inflight.handle == 0 {
            return;
        }
        tracing::warn!(
            "a queue of the GPU did not drain (drain deadline, or yield deadline with work that \
             may wait for the window): the GPU's later windows decline at once until that work \
             is done"
        );
        drop(self.gpu.stuck_drain.remember((queue, n)));
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

    /// [`wait_zero`](Self::wait_zero), giving up early ([`Waited::HeldUp`]) when `yield_after`
    /// is given and work blocked on the GPU's window (an asynchronous or host copy waiting for
    /// the lock) has waited at least that long.
    fn wait_zero_unless_held_up(
        &self,
        signal: hsa_signal_t,
        deadline: Duration,
        yield_after: Option<Duration>,
    ) -> Waited {
        let Some(yield_after) = yield_after else {
            return if self.wait_zero(signal, deadline) {
                Waited::Zero
            } else {
                Waited::TimedOut
            };
        };
        let end = Instant::now() + deadline;
        // Slices short enough to notice held-up work soon after the yield deadline.
        let slice = (yield_after / 4).clamp(Duration::from_millis(1), Duration::from_millis(100));
        // When work of the GPU's other queues was first seen behind the isolation gate.
        let mut gated_since: Option<Instant> = None;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if self.wait_zero(signal, left.min(slice)) {
                return Waited::Zero;
            }
            if left.is_zero() {
                return Waited::TimedOut;
            }
            // A blocked copy may be what the kernel waits for (copies are not ordered with the
            // dispatch), unless it waits for a signal that resolves only after it.
            if self.gpu.lock.held_up(yield_after, |lane| {
                lane != Some(super::copies::AFTER_WINDOW)
            }) {
                return Waited::HeldUp;
            }
            // So may work another queue submitted behind the isolation gate — unless that
            // queue's first such submission waits for a signal held behind this dispatch's
            // gate or the gate of a later dispatch of its queue (`note_held`: a barrier on a
            // marker behind them), which blocks that queue until after this dispatch. A later
            // window's gate on another queue does not count as such: that dispatch may run
            // once this window ends. The dispatch's own queue is ordered after it anyway.
            let after_this: smallvec::SmallVec<[u64; 4]> = self
                .gate
                .iter()
                .map(|g| g.handle)
                .chain(
                    self.queue
                        .pending_gates
                        .lock()
                        .iter()
                        .map(|(_, g)| g.handle),
                )
                .collect();
            let gated = self.others.iter().any(|(q, n)| {
                q.submitted.load(Ordering::Acquire) > *n
                    && !q
                        .pending_gates
                        .lock()
                        .iter()
                        .any(|(i, g)| *i == n + 1 && after_this.contains(&g.handle))
            });
            if gated {
                let since = *gated_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= yield_after {
                    return Waited::HeldUp;
                }
            }
        }
    }

    /// The window gives up its first pass, still running on the replay queue
    /// ([`PassError::Yielded`]): a marker, then the application's completion and the gate's
    /// opening are queued behind it there (the packet processor delivers them when it ends, as for an
    /// ordinary run), the isolation gate opens at the window's end (the GPU's other queues may
    /// run beside the pass, as without the tool), and what the pass uses is tracked as stuck
    /// work until it ends.
    fn give_way(&mut self, signal: hsa_signal_t) {
        // Until the pass ends it holds the replay queue: the GPU's next windows decline at once
        // and run their dispatches on aside lanes (the pass may wait for one of them). The
        // marker goes first, so it has resolved by the time the application sees the
        // completion queued after it: a dispatch the application submits once it has seen it
        // finds the replay queue free (queued after the completion, the marker could still read
        // 1 then, and that dispatch went to an aside lane, where a later window's drain
        // waited for it — for good, when it waits for that later dispatch).
        if let Some(marker) = new_signal(self.be) {
            if self.signal_behind(marker) {
                if let Some(old) = self.gpu.yielded.lock().replace(marker) {
                    self.gpu.gates.retire(&[old]);
                }
            } else {
                // SAFETY: our signal, referenced by nothing.
                unsafe { (self.be.orig.signal_destroy)(marker) };
            }
        }
        let app = self.packet.completion_signal;
        let life = self.queue.life.lock();
        if app.handle == 0 || life.destroyed {
            // Nothing to deliver (ROCclr often leaves it out), or the application may have
            // destroyed it with its queue: left alone, as `settle_dispatch` would.
            self.completed = true;
        } else if !self.completed {
            self.completed = self.signal_behind(app);
        }
        drop(life);
        if let (Some(gate), false) = (self.gate, self.gate_open) {
            self.gate_open = self.signal_behind(gate);
        }
        if !self.completed || (self.gate.is_some() && !self.gate_open) {
            // The replay queue had no room: the completion (and the gate) are delivered at the
            // window's end, before the pass has finished — as for a pass past every deadline.
            tracing::warn!(
                "no room on the replay queue behind a first pass that gave way: the application \
                 gets its completion before that pass has finished"
            );
        }
        self.signal = None;
        self.be.stuck.add(
            self.gpu.index,
            signal.handle,
            self.packet.kernarg_address as usize,
        );
    }

    /// Queues a barrier (barrier bit, system-scope fences) that decrements `signal` once
    /// everything submitted before it has finished; `false` when it could not be submitted.
    fn signal_behind(&self, signal: hsa_signal_t) -> bool {
        let barrier = barrier_and(
            &[],
            signal,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        );
        // SAFETY: one packet of ours.
        unsafe { self.submit((&barrier as *const hsa_barrier_and_packet_t).cast(), 1) }
    }

    /// Submits packets of ours to the replay queue (or, for a window that stays on the
    /// submitting thread, the application's queue). `false`: nothing was submitted.
    ///
    /// # Safety
    /// `count` valid packets at `pkts`.
    unsafe fn submit(&self, pkts: *const c_void, count: u64) -> bool {
        match self.sink {
            Sink::Replay(q) => {
                // SAFETY: caller contract.
                unsafe { q.submit(self.be, pkts, count as usize, self.be.settings().drain) }
            }
            Sink::App(write) => {
                // SAFETY: caller contract; only inside the handler.
                unsafe { write(pkts, count) };
                true
            }
        }
    }

    /// A pass of ours still running past its deadline (`signal`, its completion): the
    /// application gets its completion now, so what the pass still uses is protected (see
    /// `stuck`).
    fn leave_stuck(&mut self, signal: hsa_signal_t) {
        // The application's later work (behind the gate) waits for the pass: the gate opens
        // by a barrier behind it on the replay queue; later windows drain that queue first.
        if let (Sink::Replay(q), Some(gate), false) = (self.sink, self.gate, self.gate_open) {
            let open = barrier_and(
                &[],
                gate,
                true,
                HSA_FENCE_SCOPE_SYSTEM,
                HSA_FENCE_SCOPE_SYSTEM,
            );
            // SAFETY: one packet of ours.
            if unsafe {
                q.submit(
                    self.be,
                    (&open as *const hsa_barrier_and_packet_t).cast(),
                    1,
                    self.be.settings().drain,
                )
            } {
                self.gate_open = true;
            }
        }
        if self.signal == Some(signal) {
            self.signal = None;
        }
        self.left_stuck = true;
        // Its stop packet may still write the counters' buffers: never free them.
        self.profiles.drain(..).for_each(std::mem::forget);
        self.be.stuck.add(
            self.gpu.index,
            signal.handle,
            self.packet.kernarg_address as usize,
        );
    }

    /// A completed pass's kernel time from the runtime's dispatch timestamps of `signal`
    /// (kept as the ones the application is given); `None` when not `timed` or unknown.
    fn pass_time(&mut self, signal: hsa_signal_t, timed: bool) -> Option<Duration> {
        let mut t = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: our completed signal on a profiled queue.
        let st = unsafe { (self.be.orig.dispatch_time)(self.gpu.agent, signal, &mut t) };
        let valid = st == HSA_STATUS_SUCCESS && t.end >= t.start && t.end != 0;
        self.last_time = valid.then_some(t);
        if !timed || !valid {
            return None;
        }
        let ns = (t.end - t.start) as u128 * 1_000_000_000 / self.be.ticks_per_second as u128;
        Some(Duration::from_nanos(ns as u64))
    }

    /// Opens the dispatch's gate now (idempotent), and the isolation gate.
    fn open_gate(&mut self) {
        if let (Some(gate), false) = (self.gate, self.gate_open) {
            // SAFETY: our gate signal.
            unsafe { (self.be.orig.signal_store)(gate, 0) };
        }
        self.gate_open = true;
        self.open_isolation();
    }

    /// Lets the GPU's other queues go on (idempotent).
    fn open_isolation(&mut self) {
        if let Some(gate) = self.isolation {
            // SAFETY: our gate signal.
            unsafe { (self.be.orig.signal_store)(gate, 0) };
        }
    }

    /// After the window (or a panic in it): the dispatch has run, the application has its one
    /// completion and the gate is open, whatever happened; the window's signals retire.
    fn settle_dispatch(&mut self) {
        if matches!(self.sink, Sink::App(_)) || self.settled {
            return;
        }
        self.settled = true;
        if !self.ran {
            tracing::error!("a replay window ended without running its dispatch: it runs now");
            self.run_once();
        }
        if !self.completed {
            self.completed = true;
            let app = self.packet.completion_signal;
            // Under the queue's life lock: once its queue is destroyed the application may
            // destroy the signals of the work it abandoned there (the runtime would never
            // signal them), so this one is left alone.
            let life = self.queue.life.lock();
            if app.handle != 0 && !life.destroyed {
                // SAFETY: the application's completion signal, decremented once as the
                // hardware would have after its single execution.
                unsafe { (self.be.orig.signal_subtract)(app, 1) };
            }
        }
        self.open_gate();
        if let Some(ready) = self.ready {
            // Unlisted before it retires (`QueueState::retire_destroyed` stores to listed ones).
            self.queue.life.lock().ready.retain(|r| *r != ready);
        }
        let signals: Vec<hsa_signal_t> =
            [self.ready.take(), self.gate.take(), self.isolation.take()]
                .into_iter()
                .flatten()
                .collect();
        self.gpu.gates.retire(&signals);
        self.gpu.lock.window_ended();
    }
}

impl Drop for HsaTarget {
    fn drop(&mut self) {
        // A later member of a run dropped without its release (its window panicked): its
        // dispatch still runs once and completes (a no-op once settled).
        self.settle_dispatch();
        // Restores still queued (a window that panicked before its end): stuck work unless
        // done.
        self.leave_restores_stuck();
        // Spare signals go to the GPU's next windows, as many as it keeps.
        let mut spare = std::mem::take(&mut self.spare);
        {
            let mut kept = self.gpu.spare_signals.lock();
            let room = super::SPARE_SIGNALS.saturating_sub(kept.len());
            let give = spare.len().min(room);
            kept.extend(spare.drain(..give));
        }
        for s in [self.signal.take(), self.copy_signal.take()]
            .into_iter()
            .flatten()
            .chain(spare)
        {
            // SAFETY: our own signal; nothing waits on it or will signal it any more.
            unsafe { (self.be.orig.signal_destroy)(s) };
        }
    }
}

/// Most buffers one staging allocation carves before giving up (each one it skips is held
/// for stuck work: [`super::stuck::StuckWork::hold_if_touched`]).
const STAGING_TRIES: usize = 4096;

/// Gives a scratch buffer back to the staging cache (or frees it).
unsafe fn release_scratch(ptr: NonNull<u8>, capacity: usize, _tier: Tier) {
    if let Some(be) = BACKEND.get() {
        // SAFETY: `ptr` came from the staging pool (caller contract).
        unsafe { be.staging.give(&be.orig, ptr.as_ptr(), capacity) };
    }
}

impl DeviceMemory for HsaTarget {
    /// A buffer carved from the GPU's snapshot arena: VRAM while the GPU keeps its reserve
    /// free, else pinned host memory.
    ///
    /// A buffer where stuck copies or compare kernels may still read or write (staging a
    /// window gave back although they use it) is held for them and another one carved.
    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        let mem = ArenaMemory {
            be: self.be,
            gpu: self.gpu,
        };
        let mut arena = self.gpu.arena.lock();
        // Each held buffer moves the arena past it, to fresh memory at worst; bounded anyway.
        for _ in 0..STAGING_TRIES {
            if let Some(buf) = self.be.stuck.hold_if_touched(arena.carve(&mem, size)?) {
                return Some(buf);
            }
        }
        tracing::warn!("no snapshot staging away from memory stuck replay copies still use");
        None
    }

    /// One arena chunk for the plan, reused while plans fit it.
    fn reserve_staging(&mut self, bytes: usize) {
        let mem = ArenaMemory {
            be: self.be,
            gpu: self.gpu,
        };
        self.gpu.arena.lock().prepare(&mem, bytes);
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
        if self.be.staging_pool.is_none() {
            return Err(CopyError::Failed);
        }
        if direction == Direction::Restore && self.queue_restores {
            return self.queue_copies(transfers);
        }
        // Queued restores first: these copies are not ordered behind them.
        self.settle_restores()?;
        let signal = match self.copy_signal {
            Some(s) => s,
            None => {
                let s = new_signal(self.be).ok_or(CopyError::Failed)?;
                self.copy_signal = Some(s);
                s
            }
        };
        // SAFETY: our live signal.
        unsafe { (self.be.orig.signal_store)(signal, transfers.len() as i64) };
        let failed = !self.submit_copies(direction, transfers, &[], signal);
        if !self.wait_zero(signal, self.be.settings().copy) {
            // The copies may still read or write the regions and the staging: frees of the
            // GPU's memory wait for them, the staging stays theirs (see `stuck`), and the
            // signal stays alive until they end.
            self.copy_signal = None;
            let touches = transfers
                .iter()
                .flat_map(|t| [(t.device, t.len), (t.staging, t.len)])
                .collect();
            self.be
                .stuck
                .add_touching(self.gpu.index, signal.handle, touches);
            return Err(CopyError::Stuck);
        }
        if failed {
            Err(CopyError::Failed)
        } else {
            Ok(())
        }
    }

    /// On the replay queue, behind the barrier that waits for their copies (every later
    /// packet there waits for them); restores need a staging pool and the replay queue.
    fn queue_restores(&mut self, on: bool) -> bool {
        self.queue_restores =
            on && matches!(self.sink, Sink::Replay(_)) && self.be.staging_pool.is_some();
        self.queue_restores
    }

    /// Whether a restore queued in front of the late pass (not one queued behind it, which
    /// waits for it) has not finished its copies.
    fn restore_pending(&mut self) -> bool {
        let late = self.late_pass.unwrap_or(u64::MAX);
        self.restores
            .iter()
            .filter(|r| r.before_pass <= late)
            .any(|r| {
                // SAFETY: our live signal.
                unsafe { (self.be.orig.signal_load)(r.copied) != 0 }
            })
    }

    /// The compare kernel for snapshots in the GPU's VRAM ([`super::compare::diff`]); the host
    /// compares the others, and everything where the kernel cannot be had.
    fn diff(
        &mut self,
        regions: &[Transfer],
        on_device: &[bool],
        granule: usize,
    ) -> Result<DirtyRanges, DiffError> {
        // The host reads memory queued restores write.
        self.settle_restores()?;
        let launcher = self.launcher();
        let (found, on_gpu) = super::compare::diff(self, &launcher, regions, on_device, granule)?;
        self.diffed_on_device = on_gpu;
        Ok(found)
    }

    fn diffs_on_device(&self) -> bool {
        self.diffed_on_device
    }

    /// The fingerprint kernel over watched memory ([`super::compare::fingerprint`]); the host
    /// reads it back where the kernel cannot be had.
    fn fingerprint(
        &mut self,
        regions: &[(usize, usize)],
        granule: usize,
    ) -> Result<Vec<u64>, DiffError> {
        self.settle_restores()?;
        let launcher = self.launcher();
        super::compare::fingerprint(self, &launcher, regions, granule)
    }
}

impl HsaTarget {
    /// What the device kernels need of this window: the GPU and its replay queue.
    fn launcher(&self) -> super::compare::Launcher<'static> {
        super::compare::Launcher {
            be: self.be,
            gpu: self.gpu,
            queue: match self.sink {
                Sink::Replay(q) => Some(q),
                Sink::App(_) => None,
            },
        }
    }
}

impl ReplayTarget for HsaTarget {
    fn refusal(&self) -> Option<DeclineReason> {
        refusal(self.be, self.gpu, &self.packet)
    }

    fn unrestorable_memory_exists(&self) -> bool {
        !self.be.host_memory.read().is_empty()
            || unrestorable_exists(self.be).is_some()
            || peers_own_memory(self.be, self.gpu)
    }

    fn stored_pointers(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, DeclineReason> {
        gate::reach(
            &Reach {
                be: self.be,
                gpu: self.gpu,
                pointers: None,
            },
            words,
        )
    }

    fn argument_bytes(&self) -> Option<Vec<u8>> {
        let size = *self
            .be
            .kernarg_sizes
            .read()
            .get(&self.packet.kernel_object)?;
        if size == 0 || self.packet.kernarg_address.is_null() {
            return Some(Vec::new());
        }
        // SAFETY: the kernarg segment of a dispatch the application has not seen complete (it
        // does not reuse the segment before): its kernel's KERNARG_SEGMENT_SIZE bytes of
        // host-accessible kernarg memory.
        let args = unsafe {
            std::slice::from_raw_parts(self.packet.kernarg_address.cast::<u8>(), size as usize)
        };
        Some(args.to_vec())
    }

    fn host_watch(&mut self) -> Vec<(usize, usize)> {
        // Read while the dispatch has not completed for the application, which does not free
        // memory a kernel it has not seen finish still uses (if it did, the kernel itself
        // would fault there first).
        self.watch.clone()
    }

    fn begin(&mut self) -> Result<(), DeclineReason> {
        if matches!(self.sink, Sink::App(_)) {
            return Err(DeclineReason::SubmitFailed);
        }
        let gpu: &'static Gpu = self.gpu;
        // Listed as blocked work of its queue while it waits: a window draining may give way
        // to it (its dispatch may be what the drained work waits for).
        match gpu
            .lock
            .write_for_on(self.be.settings().lock, Some(self.queue.queue as u64))
        {
            Some(guard) => {
                self.window = Some(guard);
                // Stuck work that ended since: the staging it held and the arena chunks whose
                // frees it held back are released before this window sizes the arena.
                self.be.stuck.settle(self.be);
                Ok(())
            }
            None => Err(DeclineReason::LockTimeout),
        }
    }

    fn drain(&mut self) -> Result<(), DeclineReason> {
        let drain = self.be.settings().drain;
        // Work an earlier drain of the GPU waited the whole deadline for, still running: this
        // drain would wait for it too. Decline at once.
        let be = self.be;
        let stuck = self.gpu.stuck_drain.still_pending(
            |(queue, n)| {
                !queue.life.lock().destroyed
                    && gates::retired(be, queue.inflight, &queue.submitted) < *n
            },
            drop,
        );
        if stuck {
            tracing::debug!(
                "work an earlier drain of this GPU timed out on is still running: declined \
                 without waiting again"
            );
            return Err(DeclineReason::DrainTimeout);
        }
        // A first pass that gave way still holds the replay queue (it may wait for this very
        // dispatch): decline at once, the ordinary run going to an aside lane.
        if matches!(self.sink, Sink::Replay(_)) && replay_held(self.be, self.gpu) {
            tracing::debug!(
                "a first pass that gave way still runs on the replay queue: declined at once"
            );
            return Err(DeclineReason::DrainTimeout);
        }
        // The dispatch waits behind its gate while the drain waits: work drained on another
        // queue (or an ordinary run on ours) may be waiting for it, as it may for work that
        // waits for the window. Past the yield deadline such a wait gives way.
        let limits = DrainLimits::new(drain, self.be.settings().yield_after);
        // Everything before the dispatch on its own queue: the ready barrier resolved. That
        // work cannot wait for this dispatch (it is ahead of it on its queue), but it may wait
        // for a dispatch of another queue that waits for this window.
        if let Some(ready) = self.ready {
            let own = Some(self.queue.queue as u64);
            let waited = limits.wait(
                |slice| self.wait_zero(ready, slice),
                || {
                    self.gpu
                        .lock
                        .held_up(limits.yield_after, |lane| lane != own)
                        || self
                            .gpu
                            .pending
                            .lock()
                            .fresh
                            .iter()
                            .any(|Detached(_, t)| !Arc::ptr_eq(&t.queue, &self.queue))
                },
            );
            if waited != DrainWait::Done {
                self.remember_stuck(self.queue.clone(), self.ready_after);
                return waited.declined("its own queue's earlier work");
            }
            // Resolved because the queue was destroyed (`QueueState::retire_destroyed`): the
            // dispatch was dropped with it.
            if self.queue.life.lock().destroyed {
                return Err(DeclineReason::QueueDestroyed);
            }
        }
        // The replay queue: an earlier window's pass may still run there (stuck), or the
        // ordinary run of a declined one with its gate's opening behind it. The aside lanes:
        // ordinary runs. All before the isolation gate: a dispatch gate closed when it is
        // armed must wait for a window that has not ended (this one, a later one), never for
        // packets already queued here, which would open it during this window and let what
        // the application submitted behind it (before the isolation gate, so not behind that)
        // run beside the passes. An ordinary run may wait for this dispatch; the tool's own
        // work never does (it is waited for up to the drain deadline).
        if let Sink::Replay(q) = self.sink {
            for lane in std::iter::once(q).chain(self.gpu.aside.all()) {
                let waited = limits.wait(
                    |slice| lane.wait_idle(self.be, slice),
                    || lane.tool_work_done(self.be),
                );
                if waited == DrainWait::TimedOut {
                    tracing::warn!(
                        "an earlier replay pass still runs on this GPU: the dispatch runs once, \
                         after it"
                    );
                }
                if waited != DrainWait::Done {
                    return waited.declined("an ordinary run on a queue of ours");
                }
            }
        }
        // From now on the GPU's other queues wait behind the isolation gate; what they
        // submitted before is drained.
        if let (Sink::Replay(_), None) = (self.sink, self.isolation) {
            let gate = new_signal(self.be).ok_or(DeclineReason::SubmitFailed)?;
            self.isolation = Some(gate);
            self.others = arm_isolation(self.be, self.gpu, &self.queue, gate);
        }
        // Work of the GPU that cannot be waited for or held back (a queue the backend could
        // not intercept, a copy that ran unfenced) could run during the window: decline.
        if self.gpu.undrainable.any() {
            tracing::warn!(
                "the GPU has work the replay window cannot wait for (a queue that could not be \
                 intercepted, or an unfenced copy)"
            );
            return Err(DeclineReason::QueueNotDrainable);
        }
        // What the GPU's other queues submitted before the gate (later work waits behind it).
        for (other, n) in &self.others {
            if other.inflight.handle == 0 {
                // Its work cannot be waited for, so it could run during the window: decline.
                tracing::warn!("a queue of the agent has no progress signal and cannot be drained");
                return Err(DeclineReason::QueueNotDrainable);
            }
            let waited = limits.wait(
                |slice| gates::wait_retired(self.be, other.inflight, &other.submitted, *n, slice),
                || true,
            );
            if waited != DrainWait::Done {
                self.remember_stuck(other.clone(), *n);
                return waited.declined("another queue's earlier work");
            }
        }
        // Asynchronous copies already submitted (new ones wait for the window to end).
        let deadline = Instant::now() + drain;
        match self
            .gpu
            .copies
            .wait_idle(self.packet.completion_signal, deadline)
        {
            Ok(()) => Ok(()),
            Err(Busy::Held) => Err(DeclineReason::CopyWaitsForDispatch),
            Err(Busy::TimedOut) => {
                tracing::warn!(
                    "asynchronous copies touching the agent outlived the drain deadline: the \
                     agent's later windows decline at once until they are done"
                );
                Err(DeclineReason::DrainTimeout)
            }
            Err(Busy::Stuck) => {
                tracing::debug!(
                    "asynchronous copies an earlier drain timed out on still run: declined \
                     without waiting again"
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
        Ok(ctx.vars)
    }

    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        if self.splits_passes() {
            // A later pass without counters: submitted, then waited for.
            self.submit_pass(timed)?;
            return self.collect_pass();
        }
        let submitting = phases::enabled().then(Instant::now);
        // The first pass is the application's own execution: it may wait for work this window
        // holds up (an asynchronous copy the application submits after the dispatch).
        let first = !self.ran && matches!(self.sink, Sink::Replay(_));
        let signal = self.signal().map_err(PassError::NotSubmitted)?;
        let o = &self.be.orig;
        // SAFETY: our signal.
        unsafe { (o.signal_store)(signal, 1) };
        let pass = pass_packet(&self.packet, signal);
        let profile = self.armed.and_then(|p| self.profiles.get(p as usize));
        let profile_armed = profile.is_some();
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
            // SAFETY: three 64-byte packets in a row.
            if !unsafe { self.submit((&packets as *const CounterPass).cast(), 3) } {
                return Err(PassError::NotSubmitted(DeclineReason::SubmitFailed));
            }
        } else {
            // SAFETY: one packet.
            if !unsafe { self.submit((&pass as *const hsa_kernel_dispatch_packet_t).cast(), 1) } {
                return Err(PassError::NotSubmitted(DeclineReason::SubmitFailed));
            }
        }
        self.ran = true;
        if let Some(t) = submitting {
            phases::add(Phase::PassSubmit, t.elapsed());
        }
        let deadline = self.be.settings().pass;
        let yield_after = first.then_some(self.be.settings().yield_after);
        match phases::timed(Phase::PassWait, || {
            self.wait_zero_unless_held_up(signal, deadline, yield_after)
        }) {
            Waited::Zero => {}
            Waited::TimedOut => return Err(PassError::Late),
            Waited::HeldUp => {
                self.give_way(signal);
                return Err(PassError::Yielded);
            }
        }
        if profile_armed {
            // A counter pass's times include the counters' set-up: the application is given
            // those of the last pass without counters.
            return Ok(None);
        }
        Ok(self.pass_time(signal, timed))
    }

    fn run_once(&mut self) -> bool {
        let replay = match self.sink {
            Sink::App(write) => {
                // The window never left the submitting thread: an ordinary submission.
                // SAFETY: the application's packet, forwarded inside the handler.
                unsafe {
                    forward_tracked(
                        self.be,
                        &self.queue,
                        Some(self.gpu),
                        write,
                        (&self.packet as *const hsa_kernel_dispatch_packet_t).cast(),
                        1,
                        Some(&self.sent),
                        None,
                    )
                };
                self.ran = true;
                self.completed = true;
                return true;
            }
            Sink::Replay(q) => q,
        };
        if self.queue.life.lock().destroyed {
            // The runtime dropped the dispatch with its queue: it does not run, and its
            // completion signal (which the application may have destroyed) is left alone.
            // The other queues go on once this window's queued restores are done (below).
            self.ran = true;
            self.completed = true;
            if self.settle_restores().is_ok() {
                self.open_isolation();
            }
            return true;
        }
        if let Some(ready) = self.ready {
            // SAFETY: our ready signal, alive until this window retires it.
            let waiting = unsafe { (self.be.orig.signal_load)(ready) } != 0;
            // Its predecessors have not finished (the window declined at its drain deadline):
            // on the GPU's in-order replay queue its run would hold every later window's
            // passes and runs until they do — possibly for good, when the application
            // finishes them only after another dispatch of the GPU completed. The run is
            // submitted once they have finished, outside any window.
            if waiting && self.defer_run(replay, ready) {
                self.ready = None;
                self.ran = true;
                self.completed = true;
                self.gate_open = true;
                self.open_isolation();
                return true;
            }
        }
        let chain = RunChain::new(
            &self.packet,
            self.ready.unwrap_or_default(),
            self.gate.unwrap_or_default(),
        );
        let ok = submit_ordinary_run(self.be, self.gpu, replay, &chain);
        if ok {
            self.ran = true;
            self.completed = true;
            self.gate_open = true;
        }
        // One ordinary run needs no isolation: the other queues go on now (what it waits for
        // may be among their later work) — once this window's restores queued ahead of it on
        // the replay queue are done (a window that ends early: a policy panic, a pass not
        // submitted). A restore rewrites the whole snapshot, module variables included, and
        // another queue's kernel writing there meanwhile would lose its write. A restore that
        // does not finish within the copy deadline leaves the isolation to the window's end.
        if self.settle_restores().is_ok() {
            self.open_isolation();
        }
        ok
    }

    fn complete(&mut self) {
        let app = self.packet.completion_signal;
        if let (Some(t), true) = (self.last_time, app.handle != 0) {
            // What the runtime would report for the application's signal: the dispatch it
            // sees ran as the last pass.
            self.be.dispatch_times.record(app, t);
        }
        if matches!(self.sink, Sink::App(_)) {
            self.completed = true;
            if app.handle != 0 {
                // SAFETY: the application's completion signal, decremented once.
                unsafe { (self.be.orig.signal_subtract)(app, 1) };
            }
        }
        // Asynchronous window: the completion is delivered and the gate opened once the
        // window has ended, the tool's `on_end` has run and the record is written
        // (`settle_dispatch`), so an application that exits as soon as it sees the completion
        // loses neither.
    }

    fn settle_late_pass(&mut self) -> bool {
        if let Some(signal) = self.late.take() {
            // A queued pass.
            if self.wait_zero(signal, self.be.settings().late_pass) {
                self.spare.push(signal);
                self.settle_restores_done();
                return true;
            }
            self.leave_stuck(signal);
            return false;
        }
        let Some(signal) = self.signal else {
            return false;
        };
        if self.wait_zero(signal, self.be.settings().late_pass) {
            return true;
        }
        self.leave_stuck(signal);
        false
    }

    /// After the application's own execution, a pass is a packet of ours on the replay
    /// queue, with the barrier bit: a run's members queue theirs one behind the other.
    fn splits_passes(&self) -> bool {
        self.ran && matches!(self.sink, Sink::Replay(_)) && self.armed.is_none()
    }

    fn submit_pass(&mut self, timed: bool) -> Result<(), PassError> {
        let not_submitted = PassError::NotSubmitted(DeclineReason::SubmitFailed);
        if !self.splits_passes() || (!self.queued.is_empty() && !self.queues_ahead()) {
            return Err(not_submitted);
        }
        let submitting = phases::enabled().then(Instant::now);
        // Each queued pass has its own signal: its own completion and its own timestamps.
        let signal = self.take_signal(1).ok_or(not_submitted)?;
        let pass = pass_packet(&self.packet, signal);
        // SAFETY: one packet.
        if !unsafe { self.submit((&pass as *const hsa_kernel_dispatch_packet_t).cast(), 1) } {
            self.spare.push(signal);
            return Err(not_submitted);
        }
        if let Some(t) = submitting {
            phases::add(Phase::PassSubmit, t.elapsed());
        }
        self.queued
            .push_back((timed, signal, self.passes_submitted));
        self.passes_submitted += 1;
        Ok(())
    }

    fn collect_pass(&mut self) -> Result<Option<Duration>, PassError> {
        let Some((timed, signal, number)) = self.queued.pop_front() else {
            return Err(PassError::NotSubmitted(DeclineReason::SubmitFailed));
        };
        let deadline = self.be.settings().pass;
        match phases::timed(Phase::PassWait, || {
            self.wait_zero_unless_held_up(signal, deadline, None)
        }) {
            Waited::Zero => {}
            Waited::TimedOut | Waited::HeldUp => {
                self.late = Some(signal);
                self.late_pass = Some(number);
                return Err(PassError::Late);
            }
        }
        let t = self.pass_time(signal, timed);
        // Nothing refers to it any more; nor to the signals of the restores before it.
        self.spare.push(signal);
        self.settle_restores_done();
        Ok(t)
    }

    fn await_pass(&mut self) {
        if let Some(&(_, signal, _)) = self.queued.back() {
            self.wait_zero(signal, self.be.settings().pass);
        }
    }

    fn queues_ahead(&self) -> bool {
        self.splits_passes()
    }

    fn abandon_pass(&mut self) {
        if let Some((_, signal, _)) = self.queued.pop_front() {
            self.leave_stuck(signal);
        }
    }

    fn contended(&self) -> bool {
        // Work waited for the window lock past the lock deadline, or another queue of the GPU
        // has work behind the gate and the window is older than that deadline.
        self.gpu.lock.contended()
            || (self.opened.elapsed() > self.be.settings().lock
                && self
                    .others
                    .iter()
                    .any(|(q, n)| q.submitted.load(Ordering::Acquire) > *n))
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

    /// Each member of a run brings its own profiles (prepared when it joins) and wraps its own
    /// pass in their start and stop packets: a counter pass measures as many dispatches as
    /// the run holds.
    fn counter_ranges(&self) -> u32 {
        u32::MAX
    }

    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let aql = self.be.counters.as_ref().map_err(Clone::clone)?;
        let profile = self
            .profiles
            .get(pass as usize)
            .ok_or("no counter profile for this pass")?;
        aql.values(profile).map_err(|e| e.to_string())
    }

    fn released(&mut self) {
        self.settle_dispatch();
    }

    fn end(&mut self) {
        if let Some(signal) = self.late.take() {
            // A late pass nobody settled: still running as far as anyone knows.
            self.leave_stuck(signal);
        }
        // Restores queued with no pass collected behind them: done, or stuck work (at once
        // behind a pass left running: they wait for it).
        if self.left_stuck {
            self.settle_restores_done();
        } else if self.settle_restores().is_err() {
            tracing::warn!("a queued restore did not finish within the copy deadline");
        }
        self.leave_restores_stuck();
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

    /// Forward steps that panic where told and record what is written.
    struct Steps {
        panic_in: &'static [&'static str],
        tracked: bool,
        app: *const c_void,
        written: Vec<String>,
        noted: bool,
    }

    const RETIRE: hsa_signal_t = hsa_signal_t { handle: 99 };

    impl Steps {
        fn new(panic_in: &'static [&'static str], tracked: bool, app: *const c_void) -> Self {
            Steps {
                panic_in,
                tracked,
                app,
                written: Vec::new(),
                noted: false,
            }
        }
        fn step(&self, name: &str) {
            if self.panic_in.contains(&name) {
                panic!("injected panic in {name}");
            }
        }
    }

    impl ForwardSteps for Steps {
        fn wait_for_room(&mut self, _packets: u64) {
            self.step("wait_for_room");
        }
        fn gate_barriers(&mut self) -> GateBarriers {
            self.step("gate_barriers");
            barriers_on(&[hsa_signal_t { handle: 5 }])
        }
        fn every_gate_barrier(&mut self) -> GateBarriers {
            self.step("every_gate_barrier");
            barriers_on(
                &(1..=6)
                    .map(|handle| hsa_signal_t { handle })
                    .collect::<Vec<_>>(),
            )
        }
        fn count(&mut self, _packets: u64) -> Option<hsa_barrier_and_packet_t> {
            self.tracked.then(|| {
                barrier_and(
                    &[],
                    RETIRE,
                    true,
                    HSA_FENCE_SCOPE_NONE,
                    HSA_FENCE_SCOPE_NONE,
                )
            })
        }
        fn note_held(&mut self) {
            self.noted = true;
            self.step("note_held");
        }
        unsafe fn write(&mut self, pkts: *const c_void, count: u64) {
            if pkts == self.app {
                self.written.push(format!("app x{count}"));
                return;
            }
            // SAFETY: the steps write barrier packets of theirs.
            let first = unsafe { *pkts.cast::<hsa_barrier_and_packet_t>() };
            if first.completion_signal == RETIRE {
                self.written.push("retire".into());
            } else {
                self.written.push(format!("gates x{count}"));
            }
        }
    }

    fn forward(panic_in: &'static [&'static str], tracked: bool) -> (Steps, Progress) {
        let app = [app_packet()];
        let pkts = app.as_ptr().cast::<c_void>();
        let mut steps = Steps::new(panic_in, tracked, pkts);
        let progress = Progress::default();
        // SAFETY: one packet at `pkts`; the fake writer only records.
        unsafe { forward_steps(&mut steps, pkts, 1, Some(&progress)) };
        (steps, progress)
    }

    #[test]
    fn a_forward_writes_gates_then_the_packets_then_their_retiring_barrier() {
        let (steps, progress) = forward(&[], true);
        assert_eq!(steps.written, ["gates x1", "app x1", "retire"]);
        assert!(steps.noted);
        assert!(progress.forwarded.get() && progress.completed.get());
        let (steps, _) = forward(&[], false);
        assert_eq!(steps.written, ["gates x1", "app x1"], "an untracked queue");
        assert!(!steps.noted, "nothing to note without tracking");
    }

    #[test]
    fn a_panic_in_the_bookkeeping_never_loses_or_repeats_the_submission() {
        for (panic_in, want) in [
            (
                &["wait_for_room"][..],
                &["gates x1", "app x1", "retire"][..],
            ),
            // Its gates may count as placed: every closed gate gets a barrier (2 for 6 gates).
            (&["gate_barriers"], &["gates x2", "app x1", "retire"]),
            (
                &["gate_barriers", "every_gate_barrier"],
                &["app x1", "retire"],
            ),
            (&["note_held"], &["gates x1", "app x1", "retire"]),
            (
                &["wait_for_room", "gate_barriers", "note_held"],
                &["gates x2", "app x1", "retire"],
            ),
        ] {
            let (steps, progress) = forward(panic_in, true);
            assert_eq!(steps.written, want, "panics in {panic_in:?}");
            assert!(
                progress.forwarded.get(),
                "{panic_in:?}: the handler's recovery must not write the packets again"
            );
        }
    }

    /// An application's dispatch with the narrowest fences and no barrier bit.
    fn app_packet() -> hsa_kernel_dispatch_packet_t {
        hsa_kernel_dispatch_packet_t {
            header: packet_header(
                HSA_PACKET_TYPE_KERNEL_DISPATCH,
                false,
                HSA_FENCE_SCOPE_NONE,
                HSA_FENCE_SCOPE_AGENT,
            ),
            kernel_object: 0x1234,
            completion_signal: hsa_signal_t { handle: 77 },
            ..Default::default()
        }
    }

    #[test]
    fn the_ordinary_run_after_a_restore_acquires_at_system_scope_whatever_the_app_asked() {
        let app = app_packet();
        let chain = RunChain::new(&app, hsa_signal_t { handle: 5 }, hsa_signal_t { handle: 6 });
        // The run sees the restore's copies: system acquire, after everything before it.
        assert_eq!(
            header_type(chain.run.header),
            HSA_PACKET_TYPE_KERNEL_DISPATCH
        );
        assert_eq!(
            header_acquire_scope(chain.run.header),
            HSA_FENCE_SCOPE_SYSTEM
        );
        assert_eq!(
            header_release_scope(chain.run.header),
            HSA_FENCE_SCOPE_SYSTEM
        );
        assert!(header_barrier(chain.run.header));
        // Everything else is the application's dispatch, its completion signal included.
        assert_eq!(chain.run.kernel_object, app.kernel_object);
        assert_eq!(chain.run.completion_signal.handle, 77);
        // The barrier before it waits for the ready signal and acquires at system scope too.
        assert_eq!(header_type(chain.wait.header), HSA_PACKET_TYPE_BARRIER_AND);
        assert_eq!(
            header_acquire_scope(chain.wait.header),
            HSA_FENCE_SCOPE_SYSTEM
        );
        assert_eq!(chain.wait.dep_signal[0].handle, 5);
        // The gate opens after the run, releasing at system scope.
        assert_eq!(chain.open.completion_signal.handle, 6);
        assert_eq!(
            header_release_scope(chain.open.header),
            HSA_FENCE_SCOPE_SYSTEM
        );
        assert!(header_barrier(chain.open.header));
    }

    #[test]
    fn every_pass_acquires_and_releases_at_system_scope_with_its_own_signal() {
        let app = app_packet();
        let pass = pass_packet(&app, hsa_signal_t { handle: 9 });
        assert_eq!(header_acquire_scope(pass.header), HSA_FENCE_SCOPE_SYSTEM);
        assert_eq!(header_release_scope(pass.header), HSA_FENCE_SCOPE_SYSTEM);
        assert!(header_barrier(pass.header));
        assert_eq!(
            pass.completion_signal.handle, 9,
            "never the application's signal"
        );
        assert_eq!(pass.kernel_object, app.kernel_object);
    }
}
