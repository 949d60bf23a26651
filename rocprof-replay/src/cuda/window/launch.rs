//! The launch callbacks: the decision on the launching thread, the copy of the arguments, the
//! gates on the application's stream, and the release of the original launch.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocprof_replay_sys::cuda::*;
use smallvec::SmallVec;

use crate::cuda::api::error_name;
use crate::cuda::gate::{BEHIND, Gate, GatePage};
use crate::cuda::params::{self, Launch};
use crate::cuda::{Backend, Ctx, Guard, KernelFacts, LaunchApi, warn_once};
use crate::dispatch::{AgentId, DispatchId, DispatchInfo, QueueId, Runtime};

use crate::engine::window::Ordinary;
use crate::policy::{DeclineReason, Outcome, OutcomeKind};

use super::*;

/// What the exit callback needs (passed through CUPTI's per-call word).
pub(super) struct Pending {
    /// The meeting point with the window (`None`: the launch never entered one).
    pub(super) hand: Option<Arc<Handoff>>,
    pub(super) ctx: Arc<Ctx>,
    pub(super) stream: CUstream,
    pub(super) release: Release,
    /// The gate in front of pass 1's start event (kernel-only timing), opened at exit.
    pub(super) go: Option<Gate>,
    /// The arguments were copied and gates are available: the call returns before the
    /// window ends.
    pub(super) asynchronous: Option<Arc<GatePage>>,
    /// The arguments were copied for a counter run ([`Job::held`]): the call returns after
    /// pass 1 without a gate, holding the thread's later calls.
    pub(super) held: bool,
    /// Other contexts whose allocations the arguments of an ordinary run name (or may name):
    /// their reader sides are held too, from enter to exit, and each gets an event behind
    /// the launch for its next drain.
    pub(super) others: SmallVec<[Arc<Ctx>; 2]>,
}

/// The launch as the decision sees it, on the launching thread: the gate's verdict, and the
/// ordinary run, which is the driver's own enqueueing once the enter callback returns.
pub(super) struct FirstLook<'a> {
    pub(super) be: &'a Backend,
    pub(super) ctx: &'a Ctx,
    pub(super) launch: &'a Launch,
    pub(super) params: Option<&'a [(usize, usize)]>,
    /// The kernel's module, when known.
    pub(super) module: Option<usize>,
}

impl Ordinary for FirstLook<'_> {
    fn refusal(&self) -> Option<DeclineReason> {
        // SAFETY: the application is inside this launch call.
        unsafe { refusal(self.be, self.ctx, self.launch, self.params) }.or_else(|| {
            // A module found to have `__managed__` variables (by an earlier window's scan,
            // `module_globals`) declines here, without a window and its drain.
            let module = self.module?;
            if !self.ctx.managed_modules.load(Ordering::Relaxed) {
                return None;
            }
            let managed = self
                .ctx
                .modules
                .lock()
                .get(&module)
                .is_some_and(|m| m.managed);
            managed.then_some(DeclineReason::HostMemory)
        })
    }
    fn run_once(&mut self) -> bool {
        true
    }
}

/// Why the backend knows a launch must not be replayed ([`ReplayTarget::refusal`](crate::engine::window::ReplayTarget::refusal)),
/// before pass 1: it is queued behind a stream memory wait, or its arguments point into
/// memory a replay must not repeat or restore ([`memory`](crate::cuda::memory)) — memory
/// another process or GPU writes (`foreign_memory`), an allocation of another context of the
/// process (`peer_memory`: its owner's streams are not drained or fenced by this window), a
/// CUDA array reached through a surface object (`array_memory`: arrays are never captured), or
/// host-visible memory it cannot watch (`host_memory`: managed memory, or arguments that
/// cannot be read; checked last: it is the one a policy may opt into replaying, and the
/// others must not ride on that; on a device that addresses pageable system memory — HMM or
/// ATS — an argument pointing into mapped process memory that no allocation holds is
/// host-visible memory too). Pinned and registered memory is watched instead
/// ([`host_watch`]).
///
/// # Safety
/// The launch's arguments are alive.
pub(super) unsafe fn refusal(
    be: &Backend,
    ctx: &Ctx,
    launch: &Launch,
    params: Option<&[(usize, usize)]>,
) -> Option<DeclineReason> {
    if ctx
        .waiting_streams
        .lock()
        .contains(&(launch.stream as usize))
    {
        return Some(DeclineReason::StreamMemoryWait);
    }
    if !unrestorable_memory_exists(be, ctx) {
        return None;
    }
    // SAFETY: caller contract.
    let Some(bytes) = (unsafe { launch.argument_bytes(params) }) else {
        // Every allocation of the context is captured; nothing says what else it may write.
        let reason = crate::engine::gate::reach_unread(&Reach { be, ctx })?;
        warn_once(&NO_PARAM_INFO, || {
            tracing::warn!(
                "a kernel's parameters cannot be inspected (no cuFuncGetParamInfo, or an \
                 unknown handle) while host-visible, foreign or another context's memory \
                 exists: it is not replayed, as it may write that memory"
            )
        });
        return Some(reason);
    };
    classify_words(be, ctx, &bytes)
}

/// Whether memory exists that no window of `ctx` can restore or fingerprint: foreign,
/// host-visible or array memory, another context's allocations, or (on a device with HMM or
/// ATS) the process's pageable memory. Without it, no argument or stored word needs a look.
pub(super) fn unrestorable_memory_exists(be: &Backend, ctx: &Ctx) -> bool {
    !be.foreign_memory.read().is_empty()
        || !be.host_memory.read().is_empty()
        || !be.surfaces.read().is_empty()
        // Other contexts' allocations matter only where there are other contexts.
        || be.contexts.read().len() > 1
        || be.pageable(ctx)
}

/// Why the 8-byte-aligned words `bytes` (a launch's arguments, or words stored in module
/// variables) make a launch of `ctx` run once, by the engine's rules
/// ([`reach`](crate::engine::gate::reach)): they point into foreign memory, another context's
/// allocation, a surface object, pageable system memory (HMM, ATS) or host-visible memory
/// that cannot be watched (managed memory). `None`: what they reach is restored or watched
/// ([`host_watch`]).
pub(super) fn classify_words(be: &Backend, ctx: &Ctx, bytes: &[u8]) -> Option<DeclineReason> {
    crate::engine::gate::reach(&Reach { be, ctx }, bytes).err()
}

/// What a launch of `ctx` may reach, as this backend records it
/// ([`MemoryReach`](crate::engine::gate::MemoryReach)).
pub(super) struct Reach<'a> {
    pub(super) be: &'a Backend,
    pub(super) ctx: &'a Ctx,
}

impl crate::engine::gate::MemoryReach for Reach<'_> {
    fn foreign(&self, words: &[u8]) -> Option<usize> {
        self.be
            .foreign_memory
            .read()
            .first_pointer_into(words)
            .map(|(addr, kind)| {
                tracing::trace!(addr, ?kind, "foreign memory");
                addr
            })
    }

    fn peer(&self, words: &[u8]) -> Option<(usize, u64)> {
        if self.be.contexts.read().len() <= 1 {
            return None;
        }
        let own = AgentId(self.ctx.handle as u64);
        crate::engine::gate::address_words(words).find_map(|a| {
            self.be
                .inventory
                .agent_of(a)
                .filter(|o| *o != own)
                .map(|o| (a, o.0))
        })
    }

    /// A surface object is a handle, not an address: an 8-byte-aligned word equal to a live
    /// one (an integer argument of the same value declines too: replays lost, never results).
    fn uncaptured(&self, words: &[u8]) -> Option<(usize, DeclineReason)> {
        let surfaces = self.be.surfaces.read();
        if surfaces.is_empty() {
            return None;
        }
        words
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
            .find(|w| surfaces.contains_key(w))
            .map(|w| (w as usize, DeclineReason::ArrayMemory))
    }

    /// System memory a kernel can write without any call the backend sees (HMM, ATS): a word
    /// that no allocation of the inventory or host range holds and that is a mapped address of
    /// the process. Never captured (the host may write it at any time). A number that happens
    /// to be such an address declines too: replays lost, never results.
    fn system(&self, words: &[u8]) -> Option<usize> {
        if !self.be.pageable(self.ctx) {
            return None;
        }
        let host = self.be.host_memory.read();
        crate::engine::gate::address_words(words).find(|&a| {
            self.be.inventory.agent_of(a).is_none()
                && host.containing(a).is_none()
                && crate::engine::gate::mapped(a)
                && !device_memory(self.be, a)
        })
    }

    /// Pinned and registered memory is watched (checksummed around the first pass, replay
    /// stops after it when it changed); managed memory cannot be.
    fn host(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, usize> {
        self.be.host_memory.read().watchable(words)
    }

    fn present(&self) -> crate::engine::gate::Present {
        let be = self.be;
        // Other contexts' allocations matter only where there are other contexts.
        let peer = be.contexts.read().len() > 1
            && be
                .contexts
                .read()
                .keys()
                .filter(|c| **c != self.ctx.handle)
                .any(|c| !be.inventory.owned_by(AgentId(*c as u64)).is_empty());
        crate::engine::gate::Present {
            foreign: !be.foreign_memory.read().is_empty(),
            peer,
            uncaptured: (!be.surfaces.read().is_empty()).then_some(DeclineReason::ArrayMemory),
            host: !be.host_memory.read().is_empty() || be.pageable(self.ctx),
        }
    }
}

/// Whether the driver says `addr` is device memory (a `__device__` variable, an allocation
/// made before the backend was installed): the device's address space is mapped in the
/// process too (unified addressing), but it is not the system memory a kernel could reach
/// through HMM or ATS.
fn device_memory(be: &Backend, addr: usize) -> bool {
    let Some(get) = be.drv.pointer_get_attribute else {
        return false;
    };
    let mut kind = 0u32;
    let _g = Guard::new();
    // SAFETY: a plain out-parameter of the attribute's type (`CUmemorytype`, 4 bytes).
    let r = unsafe {
        get(
            (&mut kind as *mut u32).cast(),
            crate::cuda::api::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            addr as CUdeviceptr,
        )
    };
    r == CUDA_SUCCESS && kind == crate::cuda::api::CU_MEMORYTYPE_DEVICE
}

/// The pinned and registered host memory (base, size) the launch's arguments point into,
/// which the window watches across the first pass
/// ([`Ranges::watchable`](crate::cuda::memory::Ranges::watchable)); empty when the
/// arguments cannot be read or point into no such memory (a launch with pointers into
/// managed memory was refused before).
///
/// # Safety
/// The launch's arguments are alive.
pub(super) unsafe fn host_watch(
    be: &Backend,
    launch: &Launch,
    params: Option<&[(usize, usize)]>,
) -> Vec<(usize, usize)> {
    let host = be.host_memory.read();
    if host.is_empty() {
        return Vec::new();
    }
    // SAFETY: caller contract.
    unsafe { launch.argument_bytes(params) }
        .and_then(|bytes| host.watchable(&bytes).ok())
        .unwrap_or_default()
}

/// The enter callback of a launch: decides pass-through or window; returns the token for the
/// exit callback (0: nothing to do there).
///
/// # Safety
/// `cb` is CUPTI's data of an enter callback of `kind`.
pub(crate) unsafe fn enter_launch(
    be: &'static Backend,
    kind: LaunchApi,
    cb: &CUpti_CallbackData,
) -> u64 {
    if cb.context.is_null() {
        return 0;
    }
    // SAFETY: caller contract.
    let Some(launch) = (unsafe { Launch::decode(kind, cb.functionParams) }) else {
        // It runs as submitted, outside any window (after this thread's counter run).
        companion::wait_while_held(&be.settings, &|| "a launch that cannot be decoded".into());
        crate::engine::footprint::note_device_write(cb.context as u64);
        return 0;
    };
    let stream = launch.app_stream();
    // Its lane, as this thread names the stream (each thread's per-thread stream has its own).
    let lane = crate::cuda::fencing::lane(stream as usize);
    let capturing = {
        let _g = Guard::new();
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the application's stream, on its own thread.
        let r = unsafe { (be.drv.stream_is_capturing)(stream, &mut status) };
        r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE
    };
    let ctx = be.ctx(cb.context as usize);
    let facts = be.kernel_facts(cb.context as usize, launch.f, cb.symbolName);
    if !capturing {
        // Where no allocation prepared it (the kernel of write-set restore is never loaded
        // inside a window). Not for a captured launch, which is not replayed.
        let _g = Guard::new();
        compare::prepare_compare(be, &ctx);
    }
    let info = dispatch_info(be, &ctx, &launch, &facts);
    if capturing {
        companion::wait_while_held(&be.settings, &|| "a launch into a capturing stream".into());
        warn_once(&CAPTURE, || {
            tracing::warn!(
                "launches into a capturing stream are not replayed: they only add a node to \
                 the graph being captured, which runs as a graph launch"
            )
        });
        crate::engine::state::report(
            &info,
            &Outcome::ordinary(OutcomeKind::Declined(DeclineReason::StreamCapture)),
        );
        return 0;
    }
    tracing::trace!(
        kernel = info.kernel(),
        dispatch = %info.dispatch_id,
        stream = launch.stream as usize,
        module = ?facts.module,
        "launch intercepted"
    );
    // The policy gets the device's counter catalog before its first decision there.
    crate::cuda::profiler::discover_before_decision(info.agent_index);
    // The decision, on this thread (pass count, metrics, the gate's refusal).
    let mut first = FirstLook {
        be,
        ctx: &ctx,
        launch: &launch,
        params: facts.params.as_deref(),
        module: facts.module,
    };
    let Some(window) = (be.decider)(&info, &mut first) else {
        // Skipped, or declined before the window: the driver enqueues the launch once, as
        // without the tool, outside any window (the write epoch is bumped before and after:
        // carried fingerprints of the context no longer count) — after this thread's counter
        // run, if one holds its calls.
        companion::wait_while_held(&be.settings, &|| {
            let name = info.kernel_name.as_deref().unwrap_or("?");
            format!("a launch not replayed ({name})")
        });
        crate::engine::footprint::note_device_write(cb.context as u64);
        // SAFETY: the application is inside this launch call: its arguments are alive.
        let others = unsafe { contexts_named(be, &ctx, &launch, facts.params.as_deref()) };
        // A launch returns without waiting for its stream: where it reaches no other
        // context, it is ordered behind an asynchronous window of its own on the device
        // rather than waiting for it.
        let ordered = others.is_empty() && be.order_behind_window(&ctx, || Some(stream as usize));
        let others = if ordered {
            SmallVec::new()
        } else {
            hold_in_order(be, &ctx, &others, stream)
        };
        let pending = Box::new(Pending {
            hand: None,
            ctx,
            stream,
            release: Release::Ordinary { reader: !ordered },
            go: None,
            asynchronous: None,
            held: false,
            others,
        });
        return Box::into_raw(pending) as u64;
    };
    let before = if stream as usize == CU_STREAM_PER_THREAD {
        record_marker(be, &ctx, stream)
    } else {
        0
    };
    let gates = {
        let _g = Guard::new();
        gate_page(be, &ctx)
    };
    // An asynchronous window relaunches after this call returned: it needs its own copy of
    // the arguments.
    // A window that collects counters stays synchronous: its profiler calls run on this
    // thread while it waits in the launch's callbacks (`Mailbox::on_app_thread`). So does one
    // where the launch's stream may share a hardware connection with the window's own stream:
    // the gate after pass 1 would hold the window's restores and relaunches too, behind a gate
    // that opens only after them (seen on an H100 with `CUDA_DEVICE_MAX_CONNECTIONS=1`: the
    // first restore timed out and the application's stream never ran again).
    let own_connections = be.streams_have_own_connections(&ctx);
    if gates.is_some() && !own_connections {
        warn_once(&SHARED_CONNECTIONS, || {
            tracing::warn!(
                connections = be.connections,
                "this context has more streams than the GPU has hardware connections \
                 (CUDA_DEVICE_MAX_CONNECTIONS): replay windows are synchronous from now on \
                 (each launch call waits for its window)"
            )
        });
    }
    // A window that collects counters where one counter pass may measure a run of launches
    // (`ROCPROF_REPLAY_CUPTI_RUN`): its call returns after pass 1 without any gate (CUPTI
    // must not find a closed one on the device), and the thread's later calls wait at their
    // entry until the window is over, serving its profiler calls there.
    let held =
        window.counters && be.settings.run > 1 && crate::cuda::profiler::ranges_per_pass() > 1;
    let copied = ((gates.is_some() && !window.counters && own_connections) || held)
        // SAFETY: the application is inside this launch call.
        .then(|| unsafe { params::copy(&launch, facts.params.as_deref()) });
    let (launch, owned) = match copied {
        None => (launch, None),
        Some(Ok((copied, owned))) => {
            crate::cuda::wait_at_exit();
            (copied, Some(owned))
        }
        Some(Err(why)) => {
            tracing::debug!(
                kernel = info.kernel(),
                "the launch's arguments cannot be copied ({why}): its call waits for its \
                 replay window"
            );
            (launch, None)
        }
    };
    let held = held && owned.is_some();
    let asynchronous = owned.as_ref().filter(|_| !held).and(gates.clone());
    // The arguments as the application passed them (alive while it is inside this call), for
    // a withdrawal's check of the contexts they reach.
    let original = launch;
    let hand = Arc::new(Handoff::for_this_thread());
    let job = Job {
        be,
        ctx: ctx.clone(),
        info,
        launch,
        module: facts.module,
        function: facts.function,
        params: facts.params.clone(),
        hand: hand.clone(),
        correlation: cb.correlationId,
        lane,
        before,
        _owned: owned,
        gates: gates.clone(),
        window: Some(window),
        _behind: BEHIND.enter(be.settings.lock),
        breaks: be.breaks.load(std::sync::atomic::Ordering::Acquire),
        held,
    };
    if let Err(job) = submit(job) {
        if let Some(job) = job {
            give_event(&job.ctx, job.before, false);
        }
        companion::wait_while_held(&be.settings, &|| "a launch without a replay thread".into());
        warn_once(&NO_COMPANION, || {
            tracing::error!("no replay thread could be started: launches run without replay")
        });
        return 0;
    }
    // An asynchronous launch waiting behind an earlier window of this thread on its own lane
    // whose first pass does not finish (the kernel may wait for what this thread does after
    // this call: set a flag, copy) stops waiting after the yield deadline: it runs without
    // replay, ordered behind that window on the device. (On another lane, that window gives
    // way instead: `blocked` below.)
    let may = || running_first_pass_on(lane, &hand);
    let order = || {
        // SAFETY: the application is inside this launch call: its arguments are alive.
        let alone =
            unsafe { contexts_named(be, &ctx, &original, facts.params.as_deref()) }.is_empty();
        alone && be.order_behind_window(&ctx, || Some(stream as usize))
    };
    let withdraw = asynchronous.is_some().then_some(Withdraw {
        after: be.settings.yield_after,
        may: &may,
        order: &order,
    });
    let release = {
        // Listed while it waits: another window of the context whose first pass has not
        // finished gives way when this launch (on another stream) may be what it waits for.
        let _blocked = ctx.lock.blocked(Some(lane));
        hand.wait_release(withdraw)
    };
    let Some(release) = release else {
        return 0;
    };
    if hand.withdrawn() {
        crate::engine::footprint::note_device_write(ctx.handle as u64);
        tracing::info!(
            waited_ms = be.settings.yield_after.as_millis() as u64,
            "a launch waited behind the first pass of this thread's previous replayed launch \
             on the same stream, which has not finished (it may wait for what this thread does \
             next): it runs without replay, after that window (ROCPROF_REPLAY_YIELD_MS)"
        );
    }
    let mut go = None;
    // Enqueued behind a closed gate while the window drained (`defer`): the start event is
    // on the stream already, the gate opens when pass 1 may start.
    let deferred = matches!(release, Release::Pass { .. }) && hand.is_deferred();
    match release {
        Release::Pass { .. } if deferred => {}
        Release::Pass { start, .. } => {
            let _g = Guard::new();
            // Kernel-only timing: the start event waits behind a gate that opens once the
            // launch is enqueued (at exit).
            go = gates.as_ref().and_then(Gate::take).and_then(|g| {
                let r = g.hold(&be.drv, stream);
                if r == CUDA_SUCCESS {
                    Some(g)
                } else {
                    tracing::debug!(status = %error_name(&be.drv, r), "no gate before pass 1: its time includes the launch");
                    None
                }
            });
            // SAFETY: our event, the application's stream, on its own thread.
            let r = unsafe { (be.drv.event_record)(start as CUevent, stream) };
            if r != CUDA_SUCCESS {
                tracing::debug!(status = %error_name(&be.drv, r), "pass 1 start event not recorded");
            }
        }
        Release::Ordinary { reader: true } => ctx
            .lock
            .hold_outside_window_on(be.settings.lock, || Some(lane)),
        Release::Ordinary { reader: false } => {}
    }
    let pending = Box::new(Pending {
        hand: Some(hand),
        ctx,
        stream,
        release,
        go,
        asynchronous,
        held,
        others: SmallVec::new(),
    });
    Box::into_raw(pending) as u64
}

/// A launch enqueued behind a closed gate of its window while the window still drains the
/// context ([`defer`]).
pub(super) struct Deferred {
    /// Holds the application's stream in front of the launch: opened when pass 1 (or the
    /// ordinary run, if the window declines) may start. Dropped, it opens.
    pub(super) gate: Gate,
    /// One event per stream of the context, recorded before the gate (the launch's own last,
    /// right in front of it), keyed by the stream as the drain lists it (the legacy stream as
    /// 0, the launch's per-thread stream as `CU_STREAM_PER_THREAD`): the drain waits for these
    /// instead of the streams, whose later work may now wait behind the window's gates (an
    /// event the application records behind the launch, another stream made to wait for it).
    pub(super) markers: Vec<(usize, usize)>,
    /// How many events of streams destroyed with work pending (`Ctx::retired`) there were
    /// when the markers were recorded: the drain waits for those, not for later ones (their
    /// streams had a marker).
    pub(super) retired: usize,
    /// Pass 1's events, recorded around the launch (behind the gate).
    pub(super) start: usize,
    pub(super) end: usize,
}

/// On the application thread, inside its launch call, while its window drains the context
/// (asked by the window after [`Settings::defer_after`](crate::engine::settings::Settings)):
/// records a marker on every stream of the context (the launch's own last), puts a closed
/// gate behind the launch's own marker, then pass 1's start event, so the driver enqueues the
/// launch behind the gate and the call can return while the window finishes its drain and
/// capture. A kernel already on the device that waits for what the application does after
/// this call (a flag it sets, a peer it talks to) can then finish, and the drain with it.
/// `None` (nothing enqueued, every event given back) when the launch's stream is capturing,
/// or an event or a gate cannot be had: the call keeps waiting for its release.
pub(super) fn defer(
    be: &Backend,
    ctx: &Ctx,
    stream: CUstream,
    page: &Arc<GatePage>,
) -> Option<Deferred> {
    let _g = Guard::new();
    let capturing = |s: CUstream| {
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a live stream of the context (the launch's own, inside its call; the legacy
        // stream; or one listed, under the list's lock).
        let r = unsafe { (be.drv.stream_is_capturing)(s, &mut status) };
        r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE
    };
    if capturing(stream) {
        return None;
    }
    let own = stream as usize;
    let own_key = if own == CU_STREAM_LEGACY { 0 } else { own };
    let mut markers: Vec<(usize, usize)> = Vec::new();
    let retired;
    let give_back = |markers: &[(usize, usize)]| {
        for &(_, ev) in markers {
            give_event(ctx, ev, false);
        }
    };
    let mark = |key: usize, s: CUstream, markers: &mut Vec<(usize, usize)>| -> bool {
        let Some(ev) = take_event(be, ctx, false) else {
            return false;
        };
        // SAFETY: our event, a live stream of the context (see `capturing`).
        if unsafe { (be.drv.event_record)(ev as CUevent, s) } != CUDA_SUCCESS {
            give_event(ctx, ev, false);
            return false;
        }
        markers.push((key, ev));
        true
    };
    {
        // Held while marking: no listed stream is destroyed meanwhile.
        let listed = ctx.streams.lock();
        let mut others: Vec<usize> = listed.iter().copied().chain([0]).collect();
        others.sort_unstable();
        others.dedup();
        for s in others {
            // Capturing streams execute nothing (the drain counts them drained); recording
            // there would add a node to the application's graph.
            if s == own_key || capturing(s as CUstream) {
                continue;
            }
            if !mark(s, s as CUstream, &mut markers) {
                drop(listed);
                give_back(&markers);
                return None;
            }
        }
        if !mark(own_key, stream, &mut markers) {
            drop(listed);
            give_back(&markers);
            return None;
        }
        // A stream is retired under the list's lock: none can be meanwhile.
        retired = ctx.retired.lock().len();
    }
    let events = take_event(be, ctx, true).zip(take_event(be, ctx, true));
    let Some((start, end)) = events else {
        give_back(&markers);
        return None;
    };
    let fail = |markers: &[(usize, usize)]| {
        give_back(markers);
        give_event(ctx, start, true);
        give_event(ctx, end, true);
    };
    let Some(gate) = Gate::take(page) else {
        fail(&markers);
        return None;
    };
    let r = gate.hold(&be.drv, stream);
    if r != CUDA_SUCCESS {
        tracing::debug!(status = %error_name(&be.drv, r), "no gate to defer the launch behind");
        gate.open();
        fail(&markers);
        return None;
    }
    // SAFETY: our event, the application's stream, on its own thread.
    let r = unsafe { (be.drv.event_record)(start as CUevent, stream) };
    if r != CUDA_SUCCESS {
        tracing::debug!(status = %error_name(&be.drv, r), "pass 1 start event not recorded");
    }
    Some(Deferred {
        gate,
        markers,
        retired,
        start,
        end,
    })
}

/// The other contexts of the process whose allocations the arguments of a launch of `ctx`
/// name; every other context that owns an allocation where the arguments cannot be read.
/// Empty where the process has one context.
///
/// # Safety
/// The launch's arguments are alive.
unsafe fn contexts_named(
    be: &Backend,
    ctx: &Ctx,
    launch: &Launch,
    params: Option<&[(usize, usize)]>,
) -> SmallVec<[usize; 2]> {
    if be.contexts.read().len() <= 1 {
        return SmallVec::new();
    }
    // SAFETY: caller contract.
    let Some(bytes) = (unsafe { launch.argument_bytes(params) }) else {
        return be.contexts_reached(ctx.handle, &[None]);
    };
    be.contexts_owning(ctx.handle, crate::engine::gate::address_words(&bytes))
}

/// Takes the reader side of `ctx` and of `others`, in the order of their handles (see
/// `Backend::hold_off_window_writing`); returns the other contexts held, whose readers the
/// exit callback releases. `stream` is the launch's, for [`AgentLock::held_up`](crate::engine::agent::AgentLock::held_up).
fn hold_in_order(
    be: &Backend,
    ctx: &Arc<Ctx>,
    others: &[usize],
    stream: CUstream,
) -> SmallVec<[Arc<Ctx>; 2]> {
    let mut all: SmallVec<[usize; 3]> = others.iter().copied().collect();
    all.push(ctx.handle);
    all.sort_unstable();
    all.dedup();
    let mut held = SmallVec::new();
    for c in all {
        let lane = || Some(crate::cuda::fencing::lane(stream as usize));
        if c == ctx.handle {
            ctx.lock.hold_outside_window_on(be.settings.lock, lane);
        } else {
            let other = be.ctx(c);
            other.lock.hold_outside_window_on(be.settings.lock, lane);
            held.push(other);
        }
    }
    held
}

/// Whether launches may return before their window ends: yes unless `ROCPROF_REPLAY_CUDA_ASYNC`
/// is `0` (or `off`, `false`, `no`), which keeps every launch call waiting for its window (the
/// synchronous window). (Off by default until 2026-12-02: a GPT-2 step stalled with it on the
/// H200 — lazy module loading during a window, [`gate::Behind`](crate::cuda::gate::Behind).)
pub(crate) fn asynchronous_windows_from_env() -> bool {
    asynchronous_windows(std::env::var("ROCPROF_REPLAY_CUDA_ASYNC").ok().as_deref())
}

/// [`asynchronous_windows_from_env`] for the setting's value.
pub(crate) fn asynchronous_windows(setting: Option<&str>) -> bool {
    !matches!(setting.map(str::trim), Some("0" | "off" | "false" | "no"))
}

/// Sets the context's gates up ahead of its first launch (after an allocation: the context is
/// current). Idempotent.
pub(crate) fn prepare_gates(be: &Backend, ctx: &Ctx) {
    // The gate page is the backend's own host memory, not the application's.
    let _g = Guard::new();
    let _ = gate_page(be, ctx);
    compare::prepare_compare(be, ctx);
}

pub(super) fn gate_page(be: &Backend, ctx: &Ctx) -> Option<Arc<GatePage>> {
    ctx.gates
        .get_or_init(|| {
            if !be.asynchronous {
                tracing::debug!(
                    "asynchronous windows are off (ROCPROF_REPLAY_CUDA_ASYNC): launches wait \
                     for their replay window"
                );
                return None;
            }
            // Allocating is a call stream capture in global mode forbids on every thread:
            // this thread's mode is relaxed for it, so another thread's capture is not broken.
            let page = be.drv.relaxed(|| {
                GatePage::new(&be.drv)
                    .map(Arc::new)
                    .filter(|p| GatePage::works(p, &be.drv, Duration::from_secs(2)))
            });
            if page.is_none() {
                tracing::debug!(
                    context = ctx.handle,
                    "no gates (stream memory operations) in this context: launches wait for \
                     their replay window"
                );
            }
            page
        })
        .clone()
}

/// The exit callback of a launch.
///
/// # Safety
/// `token` is what [`enter_launch`] returned for this call.
pub(crate) unsafe fn exit_launch(
    be: &'static Backend,
    _kind: LaunchApi,
    _cb: &CUpti_CallbackData,
    token: u64,
    result: CUresult,
) {
    if token == 0 {
        // A launch the backend did not take (it ran as submitted, or only recorded a graph
        // node).
        crate::engine::footprint::note_device_write(_cb.context as u64);
        return;
    }
    // SAFETY: the box `enter_launch` leaked for this call, taken back once.
    let p = unsafe { Box::from_raw(token as *mut Pending) };
    let Pending {
        hand,
        ctx,
        stream,
        release,
        go,
        asynchronous,
        held,
        others,
    } = *p;
    for owner in &others {
        // The launch is enqueued: the other context's next drain waits for it.
        let on = if stream.is_null() {
            CU_STREAM_LEGACY
        } else {
            stream as usize
        };
        be.mark_foreign_work(ctx.handle, owner, on);
        // SAFETY: the enter callback held this reader, on this very context, for the
        // ordinary run (`hold_in_order`).
        unsafe { owner.lock.release_held() };
    }
    // Pass 1's timing gate: start event, kernel and end event are enqueued once the end event
    // is, and the kernel's time starts when it opens — after the gate behind the launch (an
    // asynchronous window) is on the stream too, so that no thread's query of the stream sees
    // pass 1 done before the window is over.
    let mut go = go;
    match release {
        Release::Pass { end, .. } => {
            let _g = Guard::new();
            // SAFETY: our event, the application's stream, on its own thread.
            unsafe { (be.drv.event_record)(end as CUevent, stream) };
        }
        Release::Ordinary { reader: true } => {
            crate::engine::footprint::note_device_write(ctx.handle as u64);
            // SAFETY: the enter callback held the context's reader for every pending launch it
            // left with `reader: true` (the decision's ordinary path and the release above).
            unsafe { ctx.lock.release_held() };
        }
        Release::Ordinary { reader: false } => {}
    }
    let Some(hand) = hand else {
        return;
    };
    if let Some(page) = asynchronous {
        match release {
            // The window is over already (the ordinary run needs nothing more of this call):
            // the arguments are copies, the call returns.
            Release::Ordinary { .. } => {
                hand.set_launched(result);
                return;
            }
            Release::Pass { .. } if result != CUDA_SUCCESS => {
                // Nothing was enqueued: nothing to hold the stream behind.
                hand.set_launched(result);
                return;
            }
            Release::Pass { .. } => {
                let behind = hold_behind(be, &page, &hand, stream);
                drop(go.take());
                if let Some(gate) = behind {
                    // While windows may cover runs of launches, the gate after this launch
                    // opens early when the next launch joins: other streams' work is ordered
                    // behind a word of its own, which opens when the window is over.
                    let word = if be.settings.run > 1 {
                        Gate::take(&page)
                    } else {
                        None
                    };
                    let (addr, value) = word
                        .as_ref()
                        .map_or((gate.addr(), gate.value()), |w| (w.addr(), w.value()));
                    match hand.set_launched_behind(result, gate) {
                        Some(back) => {
                            back.open();
                            if let Some(w) = word {
                                w.open();
                            }
                        }
                        // The application's work on other streams may now be ordered behind
                        // it, on the device (`fencing`).
                        None => {
                            if let Some(window) = hand.exit_offer(addr, value) {
                                ctx.window_gate.offer(window, addr, value);
                            }
                            let breaks = be.breaks.load(std::sync::atomic::Ordering::Acquire);
                            hand.set_exit(breaks, word);
                        }
                    }
                    return;
                }
            }
        }
    }
    // No gate behind the launch: pass 1 may start now, and until the window is over
    // (`wait_done` below) other threads' queries and synchronizations wait for it at their
    // entry, as nothing on the stream hides pass 1's completion from them.
    let _observed = SynchronousWait::new(&ctx);
    drop(go.take());
    if held {
        hand.set_launched(result);
        let enqueued = matches!(release, Release::Pass { .. }) && result == CUDA_SUCCESS;
        if !enqueued {
            // Nothing of the window's on the stream (the ordinary run, or a launch that
            // failed): the arguments are copies, the call returns.
            return;
        }
        if hand.hold_thread() {
            // The next launch may join the run: this call is the last one counted.
            let breaks = be.breaks.load(std::sync::atomic::Ordering::Acquire);
            hand.set_exit(breaks, None);
            return;
        }
        // The window is over already: nothing to hold.
    } else {
        hand.set_launched(result);
    }
    let wait = hand.wait_done();
    if wait != 0 {
        let _g = Guard::new();
        // SAFETY: our event; the application's stream waits for the pass still running.
        let r = unsafe { (be.drv.stream_wait_event)(stream, wait as CUevent, 0) };
        if r != CUDA_SUCCESS {
            tracing::error!(
                status = %error_name(&be.drv, r),
                "the application's stream could not be ordered after a late replay pass"
            );
        }
    }
}

/// Launch calls waiting for their synchronous window, process-wide: one load tells a call
/// that observes stream work whether it may have to wait ([`wait_for_synchronous_windows`]).
static SYNC_WAITS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A launch call waiting for its synchronous window: counted on its context
/// ([`Ctx::sync_waits`]) and process-wide while it lives.
struct SynchronousWait<'a>(&'a Ctx);

impl<'a> SynchronousWait<'a> {
    fn new(ctx: &'a Ctx) -> SynchronousWait<'a> {
        ctx.sync_waits.fetch_add(1, Ordering::AcqRel);
        SYNC_WAITS.fetch_add(1, Ordering::AcqRel);
        SynchronousWait(ctx)
    }
}

impl Drop for SynchronousWait<'_> {
    fn drop(&mut self) {
        self.0.sync_waits.fetch_sub(1, Ordering::AcqRel);
        SYNC_WAITS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// At the entry of an application call that observes whether stream work is done
/// ([`Api::Observe`](crate::cuda::classify::Api::Observe)): while a synchronous window
/// holds a context, its first pass is done on the application's stream before its restores
/// and later passes have run, and no gate hides that; so the call waits until no such window
/// holds any context (each context's lock deadline, past which the window stops after its
/// current pass). A first pass waiting for what this thread does next gives way after
/// `ROCPROF_REPLAY_YIELD_MS` all the same: the launch call waits for its window meanwhile
/// ([`Handoff::call_waits`]).
pub(crate) fn wait_for_synchronous_windows(be: &Backend) {
    if SYNC_WAITS.load(Ordering::Acquire) == 0 {
        return;
    }
    let held: SmallVec<[Arc<Ctx>; 2]> = be
        .contexts
        .read()
        .values()
        .filter(|c| c.sync_waits.load(Ordering::Acquire) > 0)
        .cloned()
        .collect();
    for ctx in held {
        drop(ctx.lock.read_outside_window(be.settings.lock));
    }
}

/// Puts a gate on the application's stream after pass 1, for the window to open; `None`
/// when it cannot (the call then waits for the window, as a synchronous one).
pub(super) fn hold_behind(
    be: &Backend,
    page: &Arc<GatePage>,
    hand: &Handoff,
    stream: CUstream,
) -> Option<Gate> {
    if hand.is_done() {
        return None;
    }
    let _g = Guard::new();
    let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the application's stream, on its own thread.
    let r = unsafe { (be.drv.stream_is_capturing)(stream, &mut status) };
    if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
        // A capture began during the call (another thread, global mode): a gate would be a
        // node of the graph.
        tracing::debug!("the launch's stream is capturing at exit: the call waits for its window");
        return None;
    }
    let Some(gate) = Gate::take(page) else {
        tracing::debug!("every gate is in use: the call waits for its window");
        return None;
    };
    let r = gate.hold(&be.drv, stream);
    if r != CUDA_SUCCESS {
        tracing::debug!(status = %error_name(&be.drv, r), "no gate after the launch: the call waits for its window");
        gate.open();
        return None;
    }
    Some(gate)
}

pub(super) static CAPTURE: std::sync::Once = std::sync::Once::new();

static SHARED_CONNECTIONS: std::sync::Once = std::sync::Once::new();

pub(super) static NO_COMPANION: std::sync::Once = std::sync::Once::new();

/// Records a plain event of ours on `stream` (the application thread's own default stream).
pub(crate) fn record_marker(be: &Backend, ctx: &Ctx, stream: CUstream) -> usize {
    let _g = Guard::new();
    let Some(ev) = take_event(be, ctx, false) else {
        return 0;
    };
    // SAFETY: our event, the application's stream, on its own thread.
    if unsafe { (be.drv.event_record)(ev as CUevent, stream) } == CUDA_SUCCESS {
        ev
    } else {
        give_event(ctx, ev, false);
        0
    }
}

/// An event of ours from the context's pool (or a new one; the context must be current).
pub(super) fn take_event(be: &Backend, ctx: &Ctx, timing: bool) -> Option<usize> {
    {
        let mut p = ctx.private.lock();
        let pool = if timing {
            &mut p.timing_events
        } else {
            &mut p.plain_events
        };
        if let Some(e) = pool.pop() {
            return Some(e);
        }
    }
    let mut ev: CUevent = std::ptr::null_mut();
    let flags = if timing {
        CU_EVENT_DEFAULT
    } else {
        CU_EVENT_DISABLE_TIMING
    };
    let _g = Guard::new();
    // SAFETY: a plain out-parameter.
    let r = unsafe { (be.drv.event_create)(&mut ev, flags) };
    (r == CUDA_SUCCESS && !ev.is_null()).then_some(ev as usize)
}

/// An application stream is being destroyed (its resource callback, on the destroying
/// thread, with the context's stream list locked): if work is still pending on it, an event
/// of ours recorded behind that work lets the next drain wait for it, as the stream's handle
/// is gone by then.
pub(crate) fn retire_stream(be: &Backend, ctx: &Ctx, stream: CUstream) {
    let _g = Guard::new();
    // SAFETY: the stream is alive until its destroy call, which is in progress.
    if unsafe { (be.drv.stream_query)(stream) } != CUDA_ERROR_NOT_READY {
        return;
    }
    // An event of the context's pool, or a new one in the current context (the stream's,
    // when the record below succeeds).
    let pooled = ctx.private.lock().plain_events.pop();
    let Some(ev) = pooled.or_else(|| take_event(be, ctx, false)) else {
        tracing::debug!(
            "no event for a stream destroyed with work pending: drains cannot wait for it"
        );
        return;
    };
    // SAFETY: our event, the application's stream (alive, see above).
    let r = unsafe { (be.drv.event_record)(ev as CUevent, stream) };
    if r == CUDA_SUCCESS {
        ctx.retired.lock().push(ev);
    } else {
        tracing::debug!(status = %error_name(&be.drv, r), "a stream destroyed with work pending: no event behind its work");
        if pooled.is_some() {
            give_event(ctx, ev, false);
        }
        // A new event of another context (the current one): left alone.
    }
}

/// The application frees memory of `ctx` (`cuMemFree`, or `cuMemFreeAsync` on `stream`):
/// copies of ours that outlived their deadline (a stuck capture or restore, whose events
/// are listed in the context's `stuck` registry) may still read or write it, and the memory must not be
/// handed out again (or unmapped: `cuMemUnmap`) under them. A stream-ordered free is ordered after them on its stream (the
/// allocator reuses the memory only after the free executes); a synchronous free waits for
/// them on the host, at most the late-pass deadline. Nothing to do (one relaxed load) when no
/// work of ours is late.
pub(crate) fn order_free_after_late_copies(be: &Backend, ctx: &Ctx, stream: Option<CUstream>) {
    if !ctx.stuck.any() {
        return;
    }
    let _g = Guard::new();
    let late = LateEvents::new(&be.drv, ctx);
    match stream {
        Some(stream) => {
            let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: the application's stream, inside its call.
            let r = unsafe { (be.drv.stream_is_capturing)(stream, &mut status) };
            if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
                // A captured free is a graph node: waiting for an event outside the capture
                // would invalidate it.
                return;
            }
            for &ev in ctx.stuck.pending(&late).iter() {
                // SAFETY: the application's stream; our recorded event, held listed until
                // the loop is over.
                let r = unsafe { (be.drv.stream_wait_event)(stream, ev as CUevent, 0) };
                if r != CUDA_SUCCESS {
                    tracing::error!(
                        status = %error_name(&be.drv, r),
                        "a stream-ordered free cannot wait for a late copy of ours: the \
                         memory may be reused while that copy still runs"
                    );
                }
            }
        }
        None => {
            if !ctx.stuck.wait_for(&late, None, be.settings.late_pass) {
                tracing::error!(
                    "memory is freed while a copy of ours that outlived its deadline may \
                     still use it (waited the late-pass deadline)"
                );
            }
        }
    }
}

/// The application unloads a module or library (`cuModuleUnload`, `cuLibraryUnload`): a
/// pass of ours that outlived its deadline may still run its code. Waits for the late work of
/// every context (the late-pass deadline at most, all contexts together), as HSA's
/// executable destruction does; goes ahead, with an error logged, at the deadline. Nothing to
/// do (one relaxed load per context) when no work of ours is late.
pub(crate) fn wait_for_late_work(be: &Backend) {
    let late: Vec<Arc<Ctx>> = be
        .contexts
        .read()
        .values()
        .filter(|c| c.stuck.any())
        .cloned()
        .collect();
    if late.is_empty() {
        return;
    }
    let _g = Guard::new();
    let deadline = std::time::Instant::now() + be.settings.late_pass;
    for ctx in late {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !ctx
            .stuck
            .wait_for(&LateEvents::new(&be.drv, &ctx), None, left)
        {
            tracing::error!(
                "code is unloaded while replay work of ours that outlived its deadline may \
                 still run it (waited the late-pass deadline)"
            );
            return;
        }
    }
}

/// Gives the events of `owner.foreign` whose work has finished back to their contexts, so
/// the list holds only work still in flight (a context that never opens a window again would
/// otherwise keep one event per fenced call of the other contexts).
pub(crate) fn prune_foreign(be: &Backend, owner: &Ctx) {
    let _g = Guard::new();
    let contexts = be.contexts.read();
    owner.foreign.lock().retain(|&(ev, ctx)| {
        let Some(c) = contexts.get(&ctx) else {
            // Destroyed (an entry a drain had out while its context went): never queried.
            return false;
        };
        // SAFETY: an event of ours, of a context still listed, which is not destroyed while
        // the map's read lock is held.
        let r = unsafe { (be.drv.event_query)(ev as CUevent) };
        if r == CUDA_ERROR_NOT_READY {
            return true;
        }
        if r == CUDA_SUCCESS {
            give_event(c, ev, false);
        }
        false
    });
}

pub(super) fn give_event(ctx: &Ctx, ev: usize, timing: bool) {
    if ev == 0 {
        return;
    }
    let mut p = ctx.private.lock();
    if timing {
        p.timing_events.push(ev);
    } else {
        p.plain_events.push(ev);
    }
}

pub(super) fn dispatch_info(
    be: &Backend,
    ctx: &Ctx,
    l: &Launch,
    facts: &KernelFacts,
) -> DispatchInfo {
    let grid = std::array::from_fn(|i| {
        u32::try_from(u64::from(l.grid[i]) * u64::from(l.block[i])).unwrap_or(u32::MAX)
    });
    DispatchInfo {
        runtime: Runtime::Cuda,
        agent: AgentId(ctx.handle as u64),
        agent_index: be.ordinal(ctx),
        queue: QueueId(l.stream as u64),
        dispatch_id: DispatchId(be.next_dispatch.fetch_add(1, Ordering::Relaxed)),
        kernel_object: l.f as u64,
        kernel_name: facts.name.clone(),
        grid,
        workgroup: l.block.map(|b| u16::try_from(b).unwrap_or(u16::MAX)),
        blocks: l.grid,
        group_segment_size: l.shared.saturating_add(facts.static_shared),
        private_segment_size: facts.local,
        context: Some(ctx.handle as u64),
    }
}
