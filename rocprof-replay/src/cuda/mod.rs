//! The CUDA backend (feature `cuda`): CUPTI driver-API callbacks track allocations, streams and
//! modules, and every kernel launch goes through the shared engine's replay window.
//!
//! # How a launch is replayed
//! The application must see one launch, and the snapshot must hold the memory as it was before
//! that launch ran. CUPTI calls us twice per launch, on the application's thread: at API enter
//! (nothing enqueued yet) and at API exit (the launch is enqueued). The window runs on a
//! companion thread of the launching thread ([`window`]), so that one engine call can span
//! both callbacks:
//!
//! ```text
//! app thread (CUPTI)             companion thread (engine: Window::run)
//! enter: decide (pass_count,
//!   metrics, gate refusal);
//!   copy the arguments ── job ─►  begin (context writer lock); drain (streams idle, bounded);
//!   │                            capture (device-to-device into the arena, private stream +
//!   │ ◄──── release as pass 1 ── event, bounded)
//! gate, start event, return
//! [driver enqueues the launch: pass 1, the application's own]
//! exit: end event, open the
//!   gate; gate 2 on the stream;
//!   return to the application ►  wait pass 1 (bounded) ─ restore ─ relaunch (pass 2, private
//!   (its later work on the      stream, gated events) ─ ... ─ last pass, not restored; end;
//!    stream waits behind        open gate 2
//!    gate 2)
//! ```
//!
//! Every pass starts from the captured memory, the last one's result is left in place, and
//! the application's later work on the stream waits behind gate 2 until the window is over,
//! so the application sees one execution, once, and its stream order is kept. A launch the
//! policy skips (or that is declined before the window) never reaches the companion thread:
//! it runs as the application made it, under the context's reader lock. Where the arguments
//! cannot be copied or no gate can be had the exit callback waits for the window instead
//! ([`window`] says when).
//!
//! # What is not replayed
//! Launches into a stream that is capturing (they only record a graph node), graph launches
//! (`cuGraphLaunch`: their kernels are not visible as launches) and multi-device cooperative
//! launches run as the application made them; each is reported once on stderr through the log.

mod api;
mod classify;
mod fencing;
mod gate;
mod globals;
mod install;
pub(crate) mod kernel_clock;
mod kernels;
mod launch_metrics;
mod memory;
mod memory_calls;
mod params;
mod profiler;
mod window;
mod writes;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use rocprof_replay_sys::cuda::*;
use smallvec::SmallVec;

use crate::engine::agent::AgentLock;
use crate::engine::arena::Arena;
pub(crate) use api::Driver;
use globals::GlobalNames;

use crate::dispatch::DispatchInfo;
use crate::engine::inventory::{AllocationInventory, Origin};
use crate::engine::settings::Settings;
use crate::engine::state::Engine;
use crate::engine::window::{Ordinary, ReplayTarget};
use crate::policy::Outcome;

pub(crate) use classify::{Api, Ids, LaunchApi};
pub(crate) use install::{disable_in_child, install, shutdown, wait_at_exit};
pub(crate) use kernels::{Decider, Handles, KernelFacts};
#[cfg(test)]
use {
    classify::classify,
    install::{callback, wait_for_windows},
};

thread_local! {
    /// Non-zero while this thread makes calls of the backend's own (and always on companion
    /// threads): callbacks for them only pass through.
    static GUARD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Marks the calling thread as making the backend's own calls until dropped.
pub(crate) struct Guard(());

impl Guard {
    pub(crate) fn new() -> Guard {
        GUARD.with(|g| g.set(g.get() + 1));
        Guard(())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        GUARD.with(|g| g.set(g.get().saturating_sub(1)));
    }
}

fn guarded_thread() -> bool {
    GUARD.with(|g| g.get() > 0)
}

/// An event of ours behind work a drain of a context ran out of time on
/// ([`Ctx::stuck_drain`]): of the context's own pool (`owner` `None`), or of the context
/// `owner`, behind its work that may reach this context's memory ([`Ctx::foreign`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StuckMarker {
    pub(crate) event: usize,
    pub(crate) owner: Option<usize>,
}

impl StuckMarker {
    /// An event of the context's own pool.
    pub(crate) fn own(event: usize) -> StuckMarker {
        StuckMarker { event, owner: None }
    }
}

/// Per-context state.
pub(crate) struct Ctx {
    pub(crate) handle: usize,
    /// Device ordinal (`u32::MAX` until learned on a thread where the context is current).
    ordinal: AtomicU32,
    /// Whether the device's kernels address pageable system memory (HMM, ATS): 0 not asked
    /// yet, 1 no, 2 yes ([`Backend::pageable`]).
    pageable: std::sync::atomic::AtomicU8,
    /// The window lock (writer: a replay window; readers: ordinary launches and stream work
    /// outside a window). CUDA windows take the writer only: none is counted as opened.
    pub(crate) lock: AgentLock,
    /// Application streams of the context (resource callbacks). A stream leaves the list
    /// under this lock before it is destroyed, and a drain queries a stream only under it and
    /// while it is listed: a destroyed handle is never used.
    pub(crate) streams: Mutex<Vec<usize>>,
    /// Streams created in the context so far, the backend's own included (resource
    /// callbacks): streams beyond the GPU's hardware connections share them.
    pub(crate) streams_created: AtomicU32,
    /// Launch calls of the context waiting for their synchronous window
    /// ([`window::wait_for_synchronous_windows`]).
    pub(crate) sync_waits: AtomicU32,
    /// Events of ours recorded on application streams destroyed with work still pending
    /// (the work runs on): the next drain waits for them.
    pub(crate) retired: Mutex<Vec<usize>>,
    /// Events of other contexts of the process (event, its context), each recorded behind
    /// work of that context that may write or read this context's memory (a copy from or
    /// into it, a fill, a kernel given its allocations): the next drain waits for them, as it
    /// does for this context's own streams. Recorded before the work's hold on this context is
    /// released.
    pub(crate) foreign: Mutex<Vec<(usize, usize)>>,
    /// Work no window of this context can wait for: marked unfenced when work of another
    /// context that may reach this context's memory got no event behind it and did not
    /// finish within the drain deadline while it was held (no drain can tell when it ends),
    /// so this context's windows decline (`queue_not_drainable`) from then on.
    pub(crate) undrainable: crate::engine::agent::Undrainable,
    /// An event of ours behind the work a drain ran out of time on: while it is pending,
    /// drains decline at once (one bounded wait for a stream, or another context's work, that
    /// may never finish).
    pub(crate) stuck_drain: crate::engine::agent::StuckDrain<StuckMarker>,
    /// Streams (as the application names them) that have had a stream memory wait: kernels
    /// launched into them are not replayed.
    pub(crate) waiting_streams: Mutex<HashSet<usize>>,
    /// Variables the application looked up (`cuModuleGetGlobal`, `cuLibraryGetGlobal`), with
    /// the module or library they belong to: kept until that module or library is unloaded.
    pub(crate) requested_globals: Mutex<Vec<RequestedGlobal>>,
    /// Per module: names tried so far and the variables found.
    pub(crate) modules: Mutex<HashMap<usize, ModuleVariables>>,
    /// Some module of `modules` has `__managed__` variables (launches look it up only then).
    pub(crate) managed_modules: AtomicBool,
    pub(crate) arena: Mutex<Arena>,
    /// The backend's own stream and events (used under the writer lock or by the launching
    /// thread; the pools are locked).
    pub(crate) private: Mutex<Private>,
    /// The gate words of asynchronous windows and timed passes (allocated on first use;
    /// `None`: no stream memory operations here).
    pub(crate) gates: OnceLock<Option<Arc<gate::GatePage>>>,
    /// The gate of the asynchronous window holding the context, which the application's
    /// stream work is ordered behind on the device instead of waiting for the window
    /// ([`fencing`]).
    pub(crate) window_gate: gate::WindowGate,
    /// Work of ours that outlived its deadline on private streams given up since (a stuck
    /// copy, compare or pass), by an event recorded behind it ([`window::LateEvents`]): a new
    /// private stream waits for it, so nothing of ours runs before that work, which may still
    /// write the memory, and frees of the context's memory are ordered after it.
    pub(crate) stuck: crate::engine::stuck::StuckWork<usize>,
    /// The compare kernel of write-set restore (loaded by the first diff here).
    pub(crate) compare: Mutex<window::compare::CompareKernel>,
}

/// A variable the application looked up: its module or library handle, address and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestedGlobal {
    pub(crate) owner: usize,
    pub(crate) addr: usize,
    pub(crate) size: usize,
    /// A `__managed__` variable: never snapshotted; in the backend's managed ranges until its
    /// module or library is unloaded.
    pub(crate) managed: bool,
}

/// What the backend found of one module's `__device__` variables.
#[derive(Debug, Default)]
pub(crate) struct ModuleVariables {
    /// How many global names were tried in the module.
    pub(crate) tried: usize,
    /// The variables (address, size) found, managed ones left out.
    pub(crate) vars: Vec<(usize, usize)>,
    /// Some variable of the module is `__managed__`: managed memory the host writes directly,
    /// which a replay must neither repeat nor restore.
    pub(crate) managed: bool,
}

/// The backend's own stream and event pools of a context.
#[derive(Default)]
pub(crate) struct Private {
    pub(crate) stream: usize,
    pub(crate) timing_events: Vec<usize>,
    pub(crate) plain_events: Vec<usize>,
}

impl Ctx {
    fn new(handle: usize) -> Ctx {
        Ctx {
            handle,
            ordinal: AtomicU32::new(u32::MAX),
            pageable: std::sync::atomic::AtomicU8::new(0),
            lock: AgentLock::new(),
            streams: Mutex::new(Vec::new()),
            streams_created: AtomicU32::new(0),
            sync_waits: AtomicU32::new(0),
            retired: Mutex::new(Vec::new()),
            foreign: Mutex::new(Vec::new()),
            undrainable: crate::engine::agent::Undrainable::new(),
            stuck_drain: crate::engine::agent::StuckDrain::new(),
            waiting_streams: Mutex::new(HashSet::new()),
            requested_globals: Mutex::new(Vec::new()),
            modules: Mutex::new(HashMap::new()),
            managed_modules: AtomicBool::new(false),
            arena: Mutex::new(Arena::default()),
            private: Mutex::new(Private::default()),
            gates: OnceLock::new(),
            window_gate: gate::WindowGate::default(),
            stuck: crate::engine::stuck::StuckWork::default(),
            compare: Mutex::default(),
        }
    }
}

/// A decided window: runs it against the launch's target and returns (and records) its
/// outcome.
/// Runs a decided window against the launch's target.
pub(crate) type RunWindow = Box<dyn FnOnce(&mut dyn ReplayTarget) -> Outcome + Send>;

/// How a decided window runs.
pub(crate) enum Runner {
    /// The engine's window, which later launches may join ([runs](crate::engine::window#runs)).
    Engine(crate::engine::state::Window),
    /// A window of the backend's tests.
    #[cfg_attr(not(test), allow(dead_code))]
    Custom(RunWindow),
}

/// A decided window and what the launch callbacks need to know of it.
pub(crate) struct WindowRun {
    /// Runs the window against the launch's target.
    pub(crate) run: Runner,
    /// The window collects hardware counters: it stays synchronous, and its profiler calls
    /// run on the launching thread while it waits in its launch callback
    /// ([`window`]'s `on_app_thread`).
    pub(crate) counters: bool,
}

/// What a call other than a launch adds to [`Backend::breaks`] (launches add 1): the count
/// of launches stays in the low 32 bits (a carry past them only ends a run early).
pub(crate) const OTHER_CALL: u64 = 1 << 32;

/// The backend's state.
pub(crate) struct Backend {
    pub(crate) drv: Driver,
    pub(crate) decider: Decider,
    pub(crate) inventory: &'static AllocationInventory,
    pub(crate) settings: Settings,
    pub(crate) ids: Ids,
    pub(crate) active: AtomicBool,
    /// Calls of the application other than lookups of functions, launches included, counted
    /// at their entry: a launch joins the window's run of the launch before it only when it
    /// is the only one since that launch returned ([`Api::RunBreak`]). Launches count 1, every
    /// other call [`OTHER_CALL`]: a run's wait for the next launch ends as soon as the count
    /// above the launches' moves.
    pub(crate) breaks: std::sync::atomic::AtomicU64,
    pub(crate) contexts: RwLock<HashMap<usize, Arc<Ctx>>>,
    /// Facts per (kernel handle, context).
    pub(crate) kernels: RwLock<HashMap<(usize, usize), KernelFacts>>,
    pub(crate) handles: RwLock<Handles>,
    pub(crate) globals: GlobalNames,
    /// Host-visible memory ([`memory`]): pinned, mapped, registered and managed, process-wide.
    /// Never in the inventory (never captured, restored or fingerprinted): kernels whose
    /// arguments point into it are not replayed (`host_memory`).
    pub(crate) host_memory: RwLock<memory::Ranges>,
    /// Memory another process or GPU writes ([`memory`]): IPC imports and exports, mappings of
    /// imported or exported handles. Never in the inventory: kernels whose arguments point
    /// into it are not replayed (`foreign_memory`).
    pub(crate) foreign_memory: RwLock<memory::Ranges>,
    /// Live surface objects (`cuSurfObjectCreate`) and the context current at their creation:
    /// CUDA arrays are never snapshotted, so a launch given one declines (`array_memory`).
    pub(crate) surfaces: RwLock<HashMap<u64, usize>>,
    /// Virtual-memory handles whose mappings are foreign memory (imported, or exported).
    pub(crate) imported_handles: Mutex<memory::ImportedHandles>,
    /// Virtual-memory handles whose physical memory is host memory (`cuMemCreate` with a
    /// host location, or retained from a mapping of one): their mappings are host memory.
    pub(crate) host_handles: Mutex<memory::ImportedHandles>,
    /// The context's own virtual-memory mappings: address -> (handle, size), to find a
    /// handle's mappings when it is exported.
    pub(crate) mappings: Mutex<HashMap<usize, (u64, usize)>>,
    pub(crate) next_dispatch: AtomicU64,
    /// Launch calls may return before their window ends (gates); on unless
    /// `ROCPROF_REPLAY_CUDA_ASYNC=0`, see [`window::asynchronous_windows_from_env`].
    pub(crate) asynchronous: bool,
    /// The GPU's hardware connections per context (`CUDA_DEVICE_MAX_CONNECTIONS`, 8 by
    /// default): stream work is ordered behind a window on the device only while no two
    /// streams of the context can share one ([`fencing`]'s `order_behind_window`).
    pub(crate) connections: u32,
    /// Kernel-only pass times from CUPTI's kernel records ([`kernel_clock`]); off until the
    /// backend is installed with an activity API.
    pub(crate) clock: kernel_clock::KernelClock,
}

impl Backend {
    /// A backend over `drv`, not yet active.
    pub(crate) fn new(
        drv: Driver,
        decider: Decider,
        inventory: &'static AllocationInventory,
        settings: Settings,
        ids: Ids,
    ) -> Backend {
        Backend {
            drv,
            decider,
            inventory,
            settings,
            ids,
            active: AtomicBool::new(false),
            breaks: std::sync::atomic::AtomicU64::new(0),
            contexts: RwLock::new(HashMap::new()),
            kernels: RwLock::new(HashMap::new()),
            handles: RwLock::new(Handles::default()),
            globals: GlobalNames::default(),
            host_memory: RwLock::new(memory::Ranges::default()),
            foreign_memory: RwLock::new(memory::Ranges::default()),
            surfaces: RwLock::new(HashMap::new()),
            imported_handles: Mutex::new(memory::ImportedHandles::default()),
            host_handles: Mutex::new(memory::ImportedHandles::default()),
            mappings: Mutex::new(HashMap::new()),
            next_dispatch: AtomicU64::new(1),
            asynchronous: window::asynchronous_windows_from_env(),
            connections: fencing::connections(
                std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").ok().as_deref(),
            ),
            clock: kernel_clock::KernelClock::off(),
        }
    }

    /// The context's state, created on first sight.
    pub(crate) fn ctx(&self, handle: usize) -> Arc<Ctx> {
        if let Some(c) = self.contexts.read().get(&handle) {
            return c.clone();
        }
        self.contexts
            .write()
            .entry(handle)
            .or_insert_with(|| Arc::new(Ctx::new(handle)))
            .clone()
    }

    /// The outcome record of a graph launch: one record, `declined` / `graph_launch`, whose
    /// kernel is `<graph>` (its kernels are not visible one by one).
    fn report_graph_launch(&self, ctx_handle: usize, stream: u64) {
        let ctx = self.ctx(ctx_handle);
        let info = DispatchInfo {
            runtime: crate::dispatch::Runtime::Cuda,
            agent: crate::AgentId(ctx_handle as u64),
            agent_index: self.ordinal(&ctx),
            queue: crate::QueueId(stream),
            dispatch_id: crate::DispatchId(self.next_dispatch.fetch_add(1, Ordering::Relaxed)),
            kernel_object: 0,
            kernel_name: Some("<graph>".into()),
            grid: [0; 3],
            workgroup: [0; 3],
            blocks: [0; 3],
            group_segment_size: 0,
            private_segment_size: 0,
            context: Some(ctx_handle as u64),
        };
        crate::engine::state::report(
            &info,
            &crate::Outcome::ordinary(crate::OutcomeKind::Declined(
                crate::DeclineReason::GraphLaunch,
            )),
        );
    }

    pub(crate) fn ordinal(&self, ctx: &Ctx) -> u32 {
        let known = ctx.ordinal.load(Ordering::Relaxed);
        if known != u32::MAX {
            return known;
        }
        let mut dev: CUdevice = 0;
        let _g = Guard::new();
        // SAFETY: a plain out-parameter; the context is current on this thread.
        if unsafe { (self.drv.ctx_get_device)(&mut dev) } == CUDA_SUCCESS && dev >= 0 {
            ctx.ordinal.store(dev as u32, Ordering::Relaxed);
            return dev as u32;
        }
        0
    }

    /// Whether the driver says `addr` is managed memory (`CU_POINTER_ATTRIBUTE_IS_MANAGED`;
    /// a driver that cannot say counts as no).
    pub(crate) fn is_managed(&self, addr: usize) -> bool {
        let Some(get) = self.drv.pointer_get_attribute else {
            return false;
        };
        let mut managed = 0u32;
        let _g = Guard::new();
        // SAFETY: a zeroed 4-byte out-parameter for the attribute's boolean.
        let r = unsafe {
            get(
                (&mut managed as *mut u32).cast(),
                api::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                addr as CUdeviceptr,
            )
        };
        r == CUDA_SUCCESS && managed != 0
    }

    /// Whether kernels of `ctx` (current on this thread) can address pageable system memory
    /// (`CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`: HMM or ATS), asked once per context. A
    /// driver that cannot say counts as no: without HMM or ATS a kernel faults on such an
    /// address.
    pub(crate) fn pageable(&self, ctx: &Ctx) -> bool {
        match ctx.pageable.load(Ordering::Relaxed) {
            1 => return false,
            2 => return true,
            _ => {}
        }
        let dev = self.ordinal(ctx) as CUdevice;
        let mut v: std::ffi::c_int = 0;
        let ok = self.drv.device_get_attribute.is_some_and(|get| {
            let _g = Guard::new();
            // SAFETY: a plain out-parameter and a device ordinal of this context.
            let r = unsafe { get(&mut v, api::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, dev) };
            r == CUDA_SUCCESS
        });
        let yes = ok && v != 0;
        if yes {
            tracing::debug!(
                device = dev,
                "kernels here address pageable system memory: a launch given a pointer into \
                 it runs once (host_memory)"
            );
        }
        ctx.pageable
            .store(if yes { 2 } else { 1 }, Ordering::Relaxed);
        yes
    }

    /// Handles one CUPTI callback.
    ///
    /// # Safety
    /// `cbdata` is what CUPTI passes for `domain` and `cbid`, valid during the call.
    pub(crate) unsafe fn on_callback(&'static self, domain: u32, cbid: u32, cbdata: *const c_void) {
        if !self.active.load(Ordering::Relaxed) || cbdata.is_null() {
            return;
        }
        match domain {
            CUPTI_CB_DOMAIN_DRIVER_API => {
                let Some(api) = self.ids.get(cbid) else {
                    return;
                };
                // SAFETY: the driver domain passes a CUpti_CallbackData.
                let cb = unsafe { &*cbdata.cast::<CUpti_CallbackData>() };
                // SAFETY: forwarded.
                unsafe { self.on_driver(api, cb) }
            }
            // SAFETY: the resource domain passes a CUpti_ResourceData.
            CUPTI_CB_DOMAIN_RESOURCE => unsafe {
                self.on_resource(cbid, &*cbdata.cast::<CUpti_ResourceData>())
            },
            _ => {}
        }
    }

    unsafe fn on_driver(&'static self, api: Api, cb: &CUpti_CallbackData) {
        let enter = cb.callbackSite == CUPTI_API_ENTER;
        let result = || call_result(cb);
        let ctx_handle = cb.context as usize;
        let params = cb.functionParams;
        if params.is_null() {
            return;
        }
        let call = cb.correlationId;
        // A plain device allocation that finds room (nothing to release for it) orders no
        // work and writes nothing a window holds: it neither ends a run nor waits for a held
        // counter run (the next launch may still join; the new memory its arguments name is
        // captured when it joins).
        // SAFETY: `params` are `api`'s own, at its enter callback when `enter`.
        let keeps_runs = enter
            && self.settings.run > 1
            && !guarded_thread()
            && unsafe { self.allocation_finds_room(api, ctx_handle, params) };
        // While windows may cover runs: every call of the application but function lookups,
        // queries and allocations that find room, launches included (a launch joins a run
        // only when it is the one call since the run's last launch returned). Otherwise
        // nothing is counted: no shared counter on every call.
        if self.settings.run > 1
            && enter
            && !api.may_load()
            && api != (Api::Observe { wait: false })
            && !keeps_runs
            && !guarded_thread()
        {
            let step = if matches!(api, Api::Launch(_)) {
                1
            } else {
                OTHER_CALL
            };
            self.breaks.fetch_add(step, Ordering::AcqRel);
        }
        // While a counter run of this thread is open, its calls other than launches (which
        // may join the run, or wait for their own window) wait here, serving the run's
        // profiler calls ([`window::wait_while_held`]): one atomic load otherwise.
        // (Queries pass: they neither order nor wait for work, and one between the run's
        // launches would hold the next launch out of the run until the window gave up waiting
        // for it.)
        if enter
            && !matches!(api, Api::Launch(_) | Api::Observe { wait: false })
            && !keeps_runs
            && !guarded_thread()
        {
            window::wait_while_held(&self.settings, &|| function_name(cb));
        }
        if api.may_load() && !guarded_thread() {
            if enter {
                std::mem::forget(gate::BEHIND.begin_load(
                    self.settings.lock,
                    self.settings.pass.saturating_add(self.settings.late_pass),
                ));
                calls_push(&LOADS, call, 0);
            } else if calls_pop(&LOADS, call).is_some() {
                gate::BEHIND.end_load();
            }
        }
        match api {
            Api::Loads | Api::RunBreak => {}
            Api::Observe { .. } => {
                if enter && !guarded_thread() {
                    window::wait_for_synchronous_windows(self);
                }
            }
            Api::Launch(kind) => {
                if guarded_thread() {
                    // One of ours: a timed relaunch wants its kernel record.
                    if enter {
                        kernel_clock::on_own_launch(&self.clock, call);
                    }
                    return;
                }
                if enter {
                    // SAFETY: the parameters of this launch entry point.
                    let token = unsafe { window::enter_launch(self, kind, cb) };
                    calls_push(&LAUNCHES, call, token);
                } else if let Some(token) = calls_pop(&LAUNCHES, call) {
                    // SAFETY: forwarded.
                    unsafe { window::exit_launch(self, kind, cb, token, result()) };
                }
            }
            Api::LaunchMultiDevice => {
                if guarded_thread() || ctx_handle == 0 {
                    return;
                }
                if enter {
                    warn_once(&MULTI_DEVICE, || {
                        tracing::warn!(
                            "cuLaunchCooperativeKernelMultiDevice launches are not replayed: \
                             they run once"
                        )
                    });
                }
                // Not replayed. It launches on streams of several contexts, with arguments
                // not decoded here: held off the windows of every context that owns memory
                // (each launch's stream is its own context's, which that context's drain
                // waits for).
                self.hold_off_window_writing(
                    cb,
                    || [None, None],
                    || None,
                    || None,
                    crate::engine::footprint::note_device_write_all,
                );
            }
            Api::StreamWait { batch } => {
                if guarded_thread() || ctx_handle == 0 {
                    return;
                }
                if enter {
                    // SAFETY: every cuStreamWaitValue* and cuStreamBatchMemOp* parameter
                    // struct starts with the stream.
                    let stream = unsafe { *params.cast::<CUstream>() } as usize;
                    self.ctx(ctx_handle).waiting_streams.lock().insert(stream);
                }
                if batch {
                    // A batch may also write memory, of any context: held off, with an event
                    // behind it for the owners' drains.
                    self.hold_off_window_writing(
                        cb,
                        || [None, None],
                        // SAFETY: this call's parameters and CUPTI's NUL-terminated name.
                        || unsafe { call_stream(cb, params) },
                        // It may hold stream memory waits: never ordered behind a window.
                        || None,
                        crate::engine::footprint::note_device_write_all,
                    );
                }
            }
            Api::GraphLaunch | Api::StreamWork(_) => {
                if guarded_thread() || ctx_handle == 0 {
                    return;
                }
                if enter && api == Api::GraphLaunch {
                    warn_once(&GRAPHS, || {
                        tracing::warn!(
                            "graph launches (cuGraphLaunch) are not replayed: their kernels run \
                             once"
                        )
                    });
                    // SAFETY: the parameters of cuGraphLaunch (and _ptsz).
                    let p = unsafe { &*params.cast::<cuGraphLaunch_params>() };
                    self.report_graph_launch(ctx_handle, p.hStream as u64);
                }
                let writes = match api {
                    Api::StreamWork(w) => w,
                    _ => writes::Writes::Unknown,
                };
                self.hold_off_window_writing(
                    cb,
                    // SAFETY: this call's parameters, which `writes` was decoded for.
                    || unsafe { writes.ranges(params) },
                    // SAFETY: this call's parameters and CUPTI's NUL-terminated name.
                    || unsafe { call_stream(cb, params) },
                    || {
                        // Graph launches are not ordered behind a window (their work is not
                        // decoded).
                        let Api::StreamWork(w) = api else {
                            return None;
                        };
                        // SAFETY: CUPTI's NUL-terminated name, and this call's parameters,
                        // which `w` was decoded for.
                        unsafe {
                            let name = CStr::from_ptr(cb.functionName).to_string_lossy();
                            w.returns_at_once(&name, params, |a, n| self.locked(a, n))
                                .then(|| call_stream(cb, params))
                                .flatten()
                        }
                    },
                    // SAFETY: as for the range.
                    || unsafe { writes.note(params) },
                );
            }
            Api::MemAlloc
            | Api::MemAllocPitch
            | Api::MemAllocManaged
            | Api::MemAllocAsync
            | Api::MemAllocFromPoolAsync
            | Api::MemCreate
            | Api::MemFree
            | Api::MemFreeAsync
            | Api::MemMap
            | Api::MemUnmap
            | Api::ForeignHandle
            | Api::MemRetain
            | Api::MemRelease
            | Api::SurfCreate
            | Api::SurfDestroy
            | Api::IpcOpen
            | Api::IpcClose
            | Api::IpcExport
            | Api::PoolImport
            | Api::RangeExport
            | Api::HandleExport
            | Api::HostAlloc { .. }
            | Api::HostFree => {
                // SAFETY: forwarded.
                unsafe { self.on_memory_call(api, cb) }
            }
            Api::LibraryGetKernel
            | Api::LibraryEnumerateKernels
            | Api::KernelGetFunction
            | Api::ModuleGetFunction
            | Api::ModuleEnumerateFunctions => {
                // The backend's own lookups are recorded too: they are handles of the
                // application's kernels all the same.
                if !enter && result() == CUDA_SUCCESS {
                    // SAFETY: this entry point's parameters, at exit.
                    unsafe { self.record_handles(api, params) };
                }
            }
            Api::ModuleGetGlobal | Api::LibraryGetGlobal => {
                if enter || guarded_thread() || ctx_handle == 0 || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: both parameter structs start with (CUdeviceptr*, size_t*).
                let p = unsafe { *params.cast::<cuModuleGetGlobal_v2_params>() };
                if p.dptr.is_null() || p.bytes.is_null() {
                    return;
                }
                // SAFETY: the driver wrote both outputs.
                let (addr, size) = unsafe { (*p.dptr as usize, *p.bytes) };
                if addr != 0 && size != 0 {
                    // A `__managed__` variable (the runtime looks every one up to set its host
                    // shadow) is managed memory: kept with the context's managed ranges, which
                    // a launch given it declines on, never snapshotted.
                    let managed = self.is_managed(addr);
                    if managed {
                        self.host_memory.write().insert(
                            addr,
                            size,
                            memory::Kind::Managed,
                            ctx_handle,
                        );
                    }
                    // Both parameter structs hold the module or library third.
                    let v = RequestedGlobal {
                        owner: p.hmod as usize,
                        addr,
                        size,
                        managed,
                    };
                    let ctx = self.ctx(ctx_handle);
                    let mut g = ctx.requested_globals.lock();
                    if !g.contains(&v) {
                        g.push(v);
                    }
                }
            }
            Api::ModuleUnload | Api::LibraryUnload => {
                if guarded_thread() {
                    return;
                }
                // SAFETY: both parameter structs are one handle.
                let owner = unsafe { (*params.cast::<cuModuleUnload_params>()).hmod } as usize;
                if enter {
                    // A pass of ours past its deadline may still run the module's code.
                    window::wait_for_late_work(self);
                    let mut managed = Vec::new();
                    for ctx in self.contexts.read().values() {
                        ctx.requested_globals.lock().retain(|g| {
                            if g.owner == owner && g.managed {
                                managed.push(g.addr);
                            }
                            g.owner != owner
                        });
                    }
                    let mut host = self.host_memory.write();
                    for addr in managed {
                        host.remove(addr, &[memory::Kind::Managed]);
                    }
                }
                // The module-unload resource callback inside this call forgets this module's
                // handles only.
                if api == Api::ModuleUnload {
                    let _ = UNLOADING.try_with(|u| u.set(if enter { owner } else { 0 }));
                }
                // A window may be snapshotting the module's variables: the unload waits.
                if ctx_handle != 0 {
                    self.hold_off_window(cb);
                }
            }
        }
    }

    fn on_resource(&self, cbid: u32, data: &CUpti_ResourceData) {
        let ctx_handle = data.context as usize;
        match cbid {
            CUPTI_CBID_RESOURCE_STREAM_CREATED
                if ctx_handle != 0 && !data.resourceHandle.is_null() =>
            {
                let ctx = self.ctx(ctx_handle);
                ctx.streams_created.fetch_add(1, Ordering::Relaxed);
                if guarded_thread() {
                    // One of ours: counted, never drained as the application's.
                    return;
                }
                let s = data.resourceHandle as usize;
                let mut streams = ctx.streams.lock();
                if !streams.contains(&s) {
                    streams.push(s);
                }
            }
            CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING => {
                let ctx = self.contexts.read().get(&ctx_handle).cloned();
                if let Some(ctx) = ctx {
                    let s = data.resourceHandle as usize;
                    let mut streams = ctx.streams.lock();
                    let listed = streams.len();
                    streams.retain(|x| *x != s);
                    if streams.len() != listed && !guarded_thread() {
                        window::retire_stream(self, &ctx, s as CUstream);
                    }
                }
            }
            CUPTI_CBID_RESOURCE_MODULE_LOADED => {
                let m = data.resourceDescriptor.cast::<CUpti_ModuleResourceData>();
                if m.is_null() {
                    return;
                }
                // SAFETY: CUPTI's module data, valid during the callback.
                let m = unsafe { &*m };
                if !m.pCubin.is_null() && m.cubinSize > 0 {
                    // SAFETY: `cubinSize` bytes of the loaded image.
                    let image =
                        unsafe { std::slice::from_raw_parts(m.pCubin.cast::<u8>(), m.cubinSize) };
                    self.globals.add_cubin(m.moduleId, image);
                }
            }
            CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING => {
                // Handles of the unloaded module may be reused: forget what is keyed by them
                // (`forget_unloaded`: this module's alone inside the application's
                // cuModuleUnload, else all). The variables the application looked up stay
                // until cuModuleUnload or cuLibraryUnload names their own module or library.
                let m = data.resourceDescriptor.cast::<CUpti_ModuleResourceData>();
                if !m.is_null() {
                    // SAFETY: CUPTI's module data, valid during the callback.
                    self.globals.unloaded(unsafe { (*m).moduleId });
                }
                let unloading = UNLOADING.try_with(|u| u.get()).ok();
                self.forget_unloaded(unloading);
            }
            CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING => {
                let Some(ctx) = self.contexts.write().remove(&ctx_handle) else {
                    return;
                };
                for a in self.inventory.owned_by(crate::AgentId(ctx_handle as u64)) {
                    self.inventory.remove(a.base);
                }
                // Its managed memory and IPC imports go with it (pinned memory and
                // virtual-memory mappings are left until freed or unmapped).
                self.host_memory.write().remove_context(ctx_handle);
                self.foreign_memory.write().remove_context(ctx_handle);
                self.surfaces.write().retain(|_, c| *c != ctx_handle);
                // Its events behind work into other contexts' memory die with it: their drains
                // no longer wait for them.
                for other in self.contexts.read().values() {
                    other.foreign.lock().retain(|(_, c)| *c != ctx_handle);
                }
                // The context frees its memory, streams and events itself.
                ctx.arena.lock().abandon();
                profiler::forget_context(ctx_handle);
            }
            _ => {}
        }
    }
}

thread_local! {
    /// Launch calls of this thread between their enter and exit callbacks: (correlation id,
    /// token for the exit callback).
    static LAUNCHES: std::cell::RefCell<Vec<(u32, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Stream work of this thread holding contexts' reader locks: (correlation id, context).
    static READERS: std::cell::RefCell<Vec<(u32, Arc<Ctx>)>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Calls of this thread that may load a module, between their enter and exit callbacks.
    static LOADS: std::cell::RefCell<Vec<(u32, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The module this thread's `cuModuleUnload` is unloading (0: none).
    static UNLOADING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The status a driver call returned, as its exit callback sees it (`CUDA_ERROR_INVALID_VALUE`
/// where CUPTI gives none).
fn call_result(cb: &CUpti_CallbackData) -> CUresult {
    if cb.functionReturnValue.is_null() {
        CUDA_ERROR_INVALID_VALUE
    } else {
        // SAFETY: CUPTI's pointer to the call's CUresult, valid in exit callbacks.
        unsafe { *cb.functionReturnValue.cast::<CUresult>() }
    }
}

/// The driver function of callback `cb` (for the log).
fn function_name(cb: &CUpti_CallbackData) -> String {
    if cb.functionName.is_null() {
        return format!("driver call {}", cb.correlationId);
    }
    // SAFETY: CUPTI's NUL-terminated function name, valid during the callback.
    unsafe { CStr::from_ptr(cb.functionName) }
        .to_string_lossy()
        .into_owned()
}

/// The stream the stream-work call `cb` enqueues on ([`Writes::stream`](writes::Writes::stream)).
///
/// # Safety
/// `cb` is CUPTI's data of a driver callback and `params` its parameter struct.
unsafe fn call_stream(cb: &CUpti_CallbackData, params: *const c_void) -> Option<usize> {
    if cb.functionName.is_null() {
        return None;
    }
    // SAFETY: CUPTI's NUL-terminated function name; the parameters of that function.
    unsafe { writes::Writes::stream(&CStr::from_ptr(cb.functionName).to_string_lossy(), params) }
}

type Calls = std::thread::LocalKey<std::cell::RefCell<Vec<(u32, u64)>>>;

/// Remembers what an enter callback leaves for its exit callback. (Not CUPTI's
/// `correlationData`: the backend keeps its own record, which a nested call cannot disturb.)
fn calls_push(calls: &'static Calls, id: u32, value: u64) {
    let _ = calls.try_with(|c| c.borrow_mut().push((id, value)));
}

/// What the enter callback of call `id` left, taken out. Calls of one thread nest, so it is
/// the newest entry; the id is checked all the same.
fn calls_pop(calls: &'static Calls, id: u32) -> Option<u64> {
    calls
        .try_with(|c| {
            let mut c = c.borrow_mut();
            let i = c.iter().rposition(|(cid, _)| *cid == id)?;
            Some(c.remove(i).1)
        })
        .ok()
        .flatten()
}

static UNKNOWN_HANDLE: std::sync::Once = std::sync::Once::new();
static MULTI_DEVICE: std::sync::Once = std::sync::Once::new();
static GRAPHS: std::sync::Once = std::sync::Once::new();

pub(crate) fn warn_once(once: &std::sync::Once, warn: impl FnOnce()) {
    once.call_once(warn);
}
