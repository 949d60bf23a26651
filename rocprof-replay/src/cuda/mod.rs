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
mod gate;
mod globals;
pub(crate) mod kernel_clock;
mod launch_metrics;
mod memory;
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

/// What the backend does with a driver callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// A kernel launch that may be replayed.
    Launch(LaunchApi),
    /// `cuLaunchCooperativeKernelMultiDevice`: not replayed.
    LaunchMultiDevice,
    /// `cuMemAlloc_v2`.
    MemAlloc,
    /// `cuMemAllocPitch_v2`.
    MemAllocPitch,
    /// `cuMemAllocManaged`.
    MemAllocManaged,
    /// `cuMemAllocAsync` (and `_ptsz`).
    MemAllocAsync,
    /// `cuMemAllocFromPoolAsync` (and `_ptsz`).
    MemAllocFromPoolAsync,
    /// `cuMemFree_v2`.
    MemFree,
    /// `cuMemFreeAsync` (and `_ptsz`).
    MemFreeAsync,
    /// `cuMemMap`.
    MemMap,
    /// `cuMemUnmap`.
    MemUnmap,
    /// `cuMemImportFromShareableHandle`, `cuMulticastCreate`: a virtual-memory handle whose
    /// physical memory another process or GPU writes (both parameter structs start with the
    /// handle's out-pointer).
    ForeignHandle,
    /// `cuMemRetainAllocationHandle`: the handle of a mapped address (foreign if the mapping
    /// is).
    MemRetain,
    /// `cuMemRelease`.
    MemRelease,
    /// `cuIpcOpenMemHandle` (and `_v2`): memory of another process mapped into this one.
    IpcOpen,
    /// `cuIpcCloseMemHandle`.
    IpcClose,
    /// `cuSurfObjectCreate`: a handle through which kernels write a CUDA array.
    SurfCreate,
    /// `cuSurfObjectDestroy`.
    SurfDestroy,
    /// `cuModuleGetGlobal_v2`.
    ModuleGetGlobal,
    /// `cuLibraryGetGlobal`.
    LibraryGetGlobal,
    /// `cuMemHostAlloc`, `cuMemAllocHost_v2`, `cuMemHostRegister_v2`: host memory the device
    /// can reach (`register`: the range is the caller's, else the driver returns it).
    HostAlloc { register: bool, flags: bool },
    /// `cuMemFreeHost`, `cuMemHostUnregister`.
    HostFree,
    /// `cuModuleUnload`: the variables the application looked up in the module go.
    ModuleUnload,
    /// `cuLibraryUnload`: the variables the application looked up in the library go.
    LibraryUnload,
    /// `cuGraphLaunch` (and `_ptsz`): not replayed, held off a window like stream work.
    GraphLaunch,
    /// `cuLibraryGetKernel`: a `CUkernel` handle.
    LibraryGetKernel,
    /// `cuLibraryEnumerateKernels`: `CUkernel` handles.
    LibraryEnumerateKernels,
    /// `cuKernelGetFunction`: a `CUfunction` handle.
    KernelGetFunction,
    /// `cuModuleGetFunction`: a `CUfunction` handle.
    ModuleGetFunction,
    /// `cuModuleEnumerateFunctions`: `CUfunction` handles.
    ModuleEnumerateFunctions,
    /// Work that writes device memory from a stream (`cuMemcpy*`, `cuMemset*`,
    /// `cuStreamWriteValue*`), legacy launches that are not replayed (`cuLaunch`,
    /// `cuLaunchGrid*`) and host functions enqueued into a stream (`cuLaunchHostFunc`,
    /// `cuStreamAddCallback`): held off a window (reader lock), so that a window's drain sees
    /// them queued before it or they queue after it. What it writes decides which carried
    /// fingerprints it invalidates ([`writes`]).
    StreamWork(writes::Writes),
    /// A stream memory wait (`cuStreamWaitValue*`, and `cuStreamBatchMemOp*`, which may hold
    /// waits): the stream waits for memory another agent writes, so kernels launched into it
    /// are not replayed. A batch is also stream work.
    StreamWait { batch: bool },
    /// Other calls that may load a module lazily (`cuModuleLoad*`, `cuLibraryLoad*`,
    /// `cuLibraryGetModule`, `cuFunc*`, `cuKernel*` queries, `cuOccupancy*`): they wait for the
    /// replay windows in flight ([`gate::Behind`]).
    Loads,
}

impl Api {
    /// Whether the call may load a module lazily, synchronising the context under a driver
    /// lock: it must not overlap a replay window ([`gate::Behind`]).
    fn may_load(self) -> bool {
        matches!(
            self,
            Api::Loads
                | Api::ModuleGetGlobal
                | Api::LibraryGetGlobal
                | Api::KernelGetFunction
                | Api::ModuleGetFunction
                | Api::ModuleEnumerateFunctions
                | Api::LibraryEnumerateKernels
                | Api::LibraryGetKernel
        )
    }
}

/// The launch entry points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaunchApi {
    /// `cuLaunchKernel`.
    Kernel { ptsz: bool },
    /// `cuLaunchCooperativeKernel`.
    Cooperative { ptsz: bool },
    /// `cuLaunchKernelEx`.
    KernelEx { ptsz: bool },
}

impl LaunchApi {
    fn ptsz(self) -> bool {
        match self {
            LaunchApi::Kernel { ptsz }
            | LaunchApi::Cooperative { ptsz }
            | LaunchApi::KernelEx { ptsz } => ptsz,
        }
    }
}

/// Classifies a driver function by name.
pub(crate) fn classify(name: &str) -> Option<Api> {
    let (base, ptsz) = match name.strip_suffix("_ptsz") {
        Some(b) => (b, true),
        None => (name, false),
    };
    Some(match base {
        "cuLaunchKernel" => Api::Launch(LaunchApi::Kernel { ptsz }),
        "cuLaunchCooperativeKernel" => Api::Launch(LaunchApi::Cooperative { ptsz }),
        "cuLaunchKernelEx" => Api::Launch(LaunchApi::KernelEx { ptsz }),
        "cuLaunchCooperativeKernelMultiDevice" => Api::LaunchMultiDevice,
        "cuMemAlloc_v2" => Api::MemAlloc,
        "cuMemAllocPitch_v2" => Api::MemAllocPitch,
        "cuMemAllocManaged" => Api::MemAllocManaged,
        "cuMemAllocAsync" => Api::MemAllocAsync,
        "cuMemAllocFromPoolAsync" => Api::MemAllocFromPoolAsync,
        "cuMemFree_v2" => Api::MemFree,
        "cuMemFreeAsync" => Api::MemFreeAsync,
        "cuMemMap" => Api::MemMap,
        "cuMemUnmap" => Api::MemUnmap,
        "cuMemImportFromShareableHandle" | "cuMulticastCreate" => Api::ForeignHandle,
        "cuMemRetainAllocationHandle" => Api::MemRetain,
        "cuMemRelease" => Api::MemRelease,
        "cuIpcOpenMemHandle" | "cuIpcOpenMemHandle_v2" => Api::IpcOpen,
        "cuIpcCloseMemHandle" => Api::IpcClose,
        "cuSurfObjectCreate" => Api::SurfCreate,
        "cuSurfObjectDestroy" => Api::SurfDestroy,
        "cuModuleGetGlobal_v2" => Api::ModuleGetGlobal,
        "cuLibraryGetGlobal" => Api::LibraryGetGlobal,
        "cuMemHostAlloc" => Api::HostAlloc {
            register: false,
            flags: true,
        },
        "cuMemAllocHost_v2" => Api::HostAlloc {
            register: false,
            flags: false,
        },
        "cuMemHostRegister_v2" => Api::HostAlloc {
            register: true,
            flags: true,
        },
        "cuMemFreeHost" | "cuMemHostUnregister" => Api::HostFree,
        "cuModuleUnload" => Api::ModuleUnload,
        "cuLibraryUnload" => Api::LibraryUnload,
        "cuGraphLaunch" => Api::GraphLaunch,
        "cuLibraryGetKernel" => Api::LibraryGetKernel,
        "cuLibraryEnumerateKernels" => Api::LibraryEnumerateKernels,
        "cuKernelGetFunction" => Api::KernelGetFunction,
        "cuModuleGetFunction" => Api::ModuleGetFunction,
        "cuModuleEnumerateFunctions" => Api::ModuleEnumerateFunctions,
        b if b.starts_with("cuModuleLoad")
            || b.starts_with("cuLibraryLoad")
            || b.starts_with("cuFunc")
            || b.starts_with("cuKernel")
            || b.starts_with("cuOccupancy")
            || b == "cuLibraryGetModule" =>
        {
            Api::Loads
        }
        b if b.starts_with("cuStreamWaitValue") => Api::StreamWait { batch: false },
        b if b.starts_with("cuStreamBatchMemOp") => Api::StreamWait { batch: true },
        b if b.starts_with("cuMemcpy")
            || b.starts_with("cuMemset")
            || b.starts_with("cuStreamWriteValue")
            || b.starts_with("cuLaunchGrid")
            || b == "cuLaunch"
            || b == "cuLaunchHostFunc"
            || b == "cuStreamAddCallback" =>
        {
            Api::StreamWork(writes::Writes::of(b))
        }
        _ => return None,
    })
}

/// Driver callback ids the backend handles, by id.
#[derive(Default)]
pub(crate) struct Ids {
    table: Vec<Option<Api>>,
}

impl Ids {
    /// Builds the table from `(name, id)` pairs.
    pub(crate) fn from_names<'a>(names: impl IntoIterator<Item = (&'a str, u32)>) -> Ids {
        let mut table = Vec::new();
        for (name, id) in names {
            if let Some(api) = classify(name) {
                let i = id as usize;
                if table.len() <= i {
                    table.resize(i + 1, None);
                }
                table[i] = Some(api);
            }
        }
        Ids { table }
    }

    fn get(&self, cbid: u32) -> Option<Api> {
        self.table.get(cbid as usize).copied().flatten()
    }

    /// Every id handled.
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.table
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_some())
            .map(|(i, _)| i as u32)
    }

    /// Whether the launch entry points were found.
    fn has_launches(&self) -> bool {
        self.table
            .iter()
            .any(|a| matches!(a, Some(Api::Launch(LaunchApi::Kernel { ptsz: false }))))
    }
}

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
    /// Streams (as the application names them) that have had a stream memory wait: kernels
    /// launched into them are not replayed.
    pub(crate) waiting_streams: Mutex<HashSet<usize>>,
    /// Variables the application looked up (`cuModuleGetGlobal`, `cuLibraryGetGlobal`), with
    /// the module or library they belong to: kept until that module or library is unloaded.
    pub(crate) requested_globals: Mutex<Vec<RequestedGlobal>>,
    /// Per module: names tried so far and the variables found.
    pub(crate) modules: Mutex<HashMap<usize, ModuleVariables>>,
    pub(crate) arena: Mutex<Arena>,
    /// The backend's own stream and events (used under the writer lock or by the launching
    /// thread; the pools are locked).
    pub(crate) private: Mutex<Private>,
    /// The gate words of asynchronous windows and timed passes (allocated on first use;
    /// `None`: no stream memory operations here).
    pub(crate) gates: OnceLock<Option<Arc<gate::GatePage>>>,
    /// The compare kernel of write-set restore (loaded by the first diff here).
    pub(crate) compare: Mutex<window::compare::CompareKernel>,
}

/// A variable the application looked up: its module or library handle, address and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestedGlobal {
    pub(crate) owner: usize,
    pub(crate) addr: usize,
    pub(crate) size: usize,
}

/// How many global names were tried in a module, and the variables (address, size) found.
pub(crate) type ModuleVariables = (usize, Vec<(usize, usize)>);

/// The backend's own stream and event pools of a context.
#[derive(Default)]
pub(crate) struct Private {
    pub(crate) stream: usize,
    /// Events of ours recorded behind work that outlived its deadline on private streams
    /// given up since (a stuck copy, compare or pass): a new private stream waits for them,
    /// so nothing of ours runs before that work, which may still write the memory.
    pub(crate) late: Vec<usize>,
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
            retired: Mutex::new(Vec::new()),
            foreign: Mutex::new(Vec::new()),
            undrainable: crate::engine::agent::Undrainable::new(),
            waiting_streams: Mutex::new(HashSet::new()),
            requested_globals: Mutex::new(Vec::new()),
            modules: Mutex::new(HashMap::new()),
            arena: Mutex::new(Arena::default()),
            private: Mutex::new(Private::default()),
            gates: OnceLock::new(),
            compare: Mutex::default(),
        }
    }
}

/// Cached facts about a launched kernel handle in one context.
#[derive(Clone)]
pub(crate) struct KernelFacts {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) static_shared: u32,
    pub(crate) local: u32,
    /// The kernel's module, when the handle is known (`None`: its `__device__` variables
    /// cannot be looked up).
    pub(crate) module: Option<usize>,
    /// The kernel's `CUfunction` (a `CUkernel`'s, in this context), when the handle is known.
    pub(crate) function: Option<usize>,
    /// Offset and size of each parameter (`None`: unknown — no handle to ask, or a driver
    /// before CUDA 12.4).
    pub(crate) params: Option<Arc<[(usize, usize)]>>,
}

/// Kernel handles the application obtained, by kind. A launch takes either a `CUfunction` or
/// a `CUkernel`; the driver's `cuFunc*` and `cuKernel*` queries must each be given their own
/// kind (a handle of the other kind can crash the driver), so a handle seen nowhere is never
/// queried.
#[derive(Default)]
pub(crate) struct Handles {
    pub(crate) kernels: std::collections::HashSet<usize>,
    /// `CUfunction`s, with the module they came from (`cuModuleGetFunction`,
    /// `cuModuleEnumerateFunctions`; 0: not known, as for `cuKernelGetFunction`).
    pub(crate) functions: HashMap<usize, usize>,
}

impl Handles {
    /// Forgets the functions of module `module` (it is being unloaded: the driver may reuse
    /// their handles); returns them.
    fn forget_module(&mut self, module: usize) -> Vec<usize> {
        let gone: Vec<usize> = self
            .functions
            .iter()
            .filter(|(_, m)| **m == module)
            .map(|(f, _)| *f)
            .collect();
        for f in &gone {
            self.functions.remove(f);
        }
        gone
    }
}

/// Decides on the launching thread whether a launch enters the replay window (the engine's
/// [`Engine::decide`], or a test's own policy): `None`: it ran once through the
/// [`Ordinary`] (skipped, or declined before the window — its outcome is recorded); `Some`:
/// the window, to run against the launch's [`ReplayTarget`] on the companion thread.
pub(crate) type Decider =
    Box<dyn Fn(&DispatchInfo, &mut dyn Ordinary) -> Option<WindowRun> + Send + Sync>;

/// A decided window: runs it against the launch's target and returns (and records) its
/// outcome.
/// Runs a decided window against the launch's target.
pub(crate) type RunWindow = Box<dyn FnOnce(&mut dyn ReplayTarget) -> Outcome + Send>;

/// A decided window and what the launch callbacks need to know of it.
pub(crate) struct WindowRun {
    /// Runs the window against the launch's target.
    pub(crate) run: RunWindow,
    /// The window collects hardware counters: it stays synchronous, and its profiler calls
    /// run on the launching thread while it waits in its launch callback
    /// ([`window`]'s `on_app_thread`).
    pub(crate) counters: bool,
}

/// The backend's state.
pub(crate) struct Backend {
    pub(crate) drv: Driver,
    pub(crate) decider: Decider,
    pub(crate) inventory: &'static AllocationInventory,
    pub(crate) settings: Settings,
    pub(crate) ids: Ids,
    pub(crate) active: AtomicBool,
    pub(crate) contexts: RwLock<HashMap<usize, Arc<Ctx>>>,
    /// Facts per (kernel handle, context).
    pub(crate) kernels: RwLock<HashMap<(usize, usize), KernelFacts>>,
    pub(crate) handles: RwLock<Handles>,
    pub(crate) globals: GlobalNames,
    /// Host-visible memory ([`memory`]): pinned, mapped, registered and managed, process-wide.
    /// Never in the inventory (never captured, restored or fingerprinted): kernels whose
    /// arguments point into it are not replayed (`host_memory`).
    pub(crate) host_memory: RwLock<memory::Ranges>,
    /// Memory another process or GPU writes ([`memory`]): IPC imports and mappings of imported
    /// handles. Never in the inventory: kernels whose arguments point into it are not
    /// replayed (`foreign_memory`).
    pub(crate) foreign_memory: RwLock<memory::Ranges>,
    /// Live surface objects (`cuSurfObjectCreate`) and the context current at their creation:
    /// CUDA arrays are never snapshotted, so a launch given one declines (`array_memory`).
    pub(crate) surfaces: RwLock<HashMap<u64, usize>>,
    /// Virtual-memory handles whose mappings are foreign memory.
    pub(crate) imported_handles: Mutex<memory::ImportedHandles>,
    pub(crate) next_dispatch: AtomicU64,
    /// Launch calls may return before their window ends (gates); on unless
    /// `ROCPROF_REPLAY_CUDA_ASYNC=0`, see [`window::asynchronous_windows_from_env`].
    pub(crate) asynchronous: bool,
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
            contexts: RwLock::new(HashMap::new()),
            kernels: RwLock::new(HashMap::new()),
            handles: RwLock::new(Handles::default()),
            globals: GlobalNames::default(),
            host_memory: RwLock::new(memory::Ranges::default()),
            foreign_memory: RwLock::new(memory::Ranges::default()),
            surfaces: RwLock::new(HashMap::new()),
            imported_handles: Mutex::new(memory::ImportedHandles::default()),
            next_dispatch: AtomicU64::new(1),
            asynchronous: window::asynchronous_windows_from_env(),
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

    /// Holds stream work off a replay window of its context: the reader side, from the
    /// call's enter callback to its exit callback.
    fn hold_off_window(&self, enter: bool, call: u32, ctx_handle: usize) {
        // Work that may write device memory, outside any window (a copy may write another
        // context's memory: all of them).
        self.hold_off_window_writing(
            enter,
            call,
            ctx_handle,
            || [Some(None); 2],
            || None,
            crate::engine::footprint::note_device_write_all,
        );
    }

    /// [`hold_off_window`](Self::hold_off_window) for work that may reach `ranges`: what it
    /// writes and what it reads (as [`Writes::ranges`](writes::Writes::ranges) says; asked at
    /// enter). The reader side of its own context and of every other context whose memory it
    /// may write or read (a read inside a window could see a pass's or a restore's state),
    /// taken in the order of the contexts' handles (so two threads holding each other's contexts never wait in a
    /// cycle). At exit, before those are released, an event recorded behind the work on its
    /// `stream` (asked only then, and only if other contexts are held; `None`: not decoded)
    /// goes to each other context, whose next drain waits for it (a restore must neither undo
    /// the work's writes nor change what it reads). `note` tells the engine what the work
    /// writes, before the call and again after it.
    fn hold_off_window_writing(
        &self,
        enter: bool,
        call: u32,
        ctx_handle: usize,
        ranges: impl FnOnce() -> [Option<Option<(usize, usize)>>; 2],
        stream: impl FnOnce() -> Option<usize>,
        note: impl Fn(),
    ) {
        if enter {
            note();
            let mut held = self.contexts_reached(ctx_handle, &ranges());
            held.push(ctx_handle);
            held.sort_unstable();
            held.dedup();
            for c in held {
                let c = self.ctx(c);
                c.lock.hold_outside_window(self.settings.lock);
                if let Err(c) = READERS
                    .try_with(|r| r.borrow_mut().push((call, c.clone())))
                    .map_err(|_| c)
                {
                    // The thread is exiting: no exit callback could release it.
                    // SAFETY: the reader just held.
                    unsafe { c.lock.release_held() };
                }
            }
            return;
        }
        // The contexts the enter callback held (the very objects, even if one was destroyed
        // meanwhile), newest last.
        let held: SmallVec<[Arc<Ctx>; 2]> = READERS
            .try_with(|r| {
                let mut r = r.borrow_mut();
                let mut out = SmallVec::new();
                while let Some(i) = r.iter().rposition(|(id, _)| *id == call) {
                    out.push(r.remove(i).1);
                }
                out
            })
            .unwrap_or_default();
        if held.is_empty() {
            return;
        }
        note();
        let others = held.iter().filter(|c| c.handle != ctx_handle);
        if let Some(first) = others.clone().next() {
            match stream() {
                Some(stream) => {
                    for owner in others {
                        self.mark_foreign_work(ctx_handle, owner, stream);
                    }
                }
                None => tracing::debug!(
                    context = first.handle,
                    "work of another context that may reach this context's memory is on a \
                     stream the backend does not decode: held off windows while submitted, \
                     not waited for by their drains"
                ),
            }
        }
        for c in held {
            // SAFETY: the reader this call's enter callback held on this very context
            // (recorded in READERS).
            unsafe { c.lock.release_held() };
        }
    }

    /// The other contexts of the process whose memory work of `own` may reach through its
    /// `ranges` (a destination, a source): the owner of each end of a decoded range
    /// (`Some(Some(range))`); none for a range of no device memory (`Some(None)`); every other
    /// context that owns an allocation when a range is not decoded (`None`). Empty, at the
    /// cost of one read lock, where the process has one context.
    pub(crate) fn contexts_reached(
        &self,
        own: usize,
        ranges: &[Option<Option<(usize, usize)>>],
    ) -> SmallVec<[usize; 2]> {
        if ranges.iter().any(Option::is_none) {
            let contexts = self.contexts.read();
            if contexts.len() <= 1 {
                return SmallVec::new();
            }
            return contexts
                .keys()
                .copied()
                .filter(|&c| c != own && self.inventory.owns_any(crate::AgentId(c as u64)))
                .collect();
        }
        let ends = ranges
            .iter()
            .flatten()
            .flatten()
            .flat_map(|&(start, len)| [start, start.saturating_add(len.saturating_sub(1))]);
        self.contexts_owning(own, ends)
    }

    /// The other live contexts of the process owning the allocations `addrs` point into, each
    /// once. Empty, at the cost of one read lock, where the process has one context.
    pub(crate) fn contexts_owning(
        &self,
        own: usize,
        addrs: impl IntoIterator<Item = usize>,
    ) -> SmallVec<[usize; 2]> {
        let mut out = SmallVec::new();
        let contexts = self.contexts.read();
        if contexts.len() <= 1 {
            return out;
        }
        for addr in addrs {
            if let Some(owner) = self.inventory.agent_of(addr) {
                let owner = owner.0 as usize;
                if owner != own && contexts.contains_key(&owner) && !out.contains(&owner) {
                    out.push(owner);
                }
            }
        }
        out
    }

    /// Records an event of context `own` (current on this thread) behind the work just
    /// enqueued on `stream`, for the next drain of context `owner`, whose memory the work may
    /// write or read. A capturing stream executes nothing now: no event.
    pub(crate) fn mark_foreign_work(&self, own: usize, owner: &Ctx, stream: usize) {
        if !self.contexts.read().contains_key(&owner.handle) {
            // Destroyed meanwhile: no drain of it will come.
            return;
        }
        let _g = Guard::new();
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the application's stream, on the thread that just used it.
        let r = unsafe { (self.drv.stream_is_capturing)(stream as CUstream, &mut status) };
        if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
            return;
        }
        let ctx = self.ctx(own);
        let ev = window::record_marker(self, &ctx, stream as CUstream);
        if ev == 0 {
            self.wait_for_unmarked_foreign_work(owner, stream);
            return;
        }
        window::prune_foreign(self, owner);
        owner.foreign.lock().push((ev, own));
    }

    /// [`mark_foreign_work`](Self::mark_foreign_work) without an event (none could be
    /// made or recorded): the work is waited for here, on the submitting thread, while the
    /// owner is still held (no window of it starts meanwhile), at most the drain deadline. Work
    /// still running then marks the owner's [`undrainable`](Ctx::undrainable) unfenced.
    fn wait_for_unmarked_foreign_work(&self, owner: &Ctx, stream: usize) {
        let deadline = Instant::now() + self.settings.drain;
        // SAFETY: the application's stream, on the thread that just used it.
        let r = window::poll(deadline, || unsafe {
            (self.drv.stream_query)(stream as CUstream)
        });
        if matches!(r, window::Poll::Done) {
            tracing::debug!(
                context = owner.handle,
                "no event behind work of another context that may reach this context's memory: \
                 waited for it at submission"
            );
            return;
        }
        if owner.undrainable.mark_unfenced() {
            tracing::warn!(
                context = owner.handle,
                "work of another context that may reach this context's memory got no event \
                 behind it and did not finish within the drain deadline: this context's \
                 kernels are no longer replayed (queue_not_drainable)"
            );
        }
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

    /// Name, static shared memory, local memory and module of a kernel handle launched in
    /// `ctx` (current on this thread), cached.
    pub(crate) fn kernel_facts(
        &self,
        ctx: usize,
        f: CUfunction,
        symbol: *const std::ffi::c_char,
    ) -> KernelFacts {
        let key = (f as usize, ctx);
        if let Some(k) = self.kernels.read().get(&key) {
            return k.clone();
        }
        let name = (!symbol.is_null())
            // SAFETY: CUPTI's symbol name, NUL-terminated, valid during the callback.
            .then(|| unsafe { CStr::from_ptr(symbol) }.to_string_lossy().into());
        // Asking for a kernel's function may load its module, which must not overlap a
        // replay window ([`gate::Behind`]).
        let _loading = (!guarded_thread()).then(|| {
            gate::BEHIND.begin_load(
                self.settings.lock,
                self.settings.pass.saturating_add(self.settings.late_pass),
            )
        });
        let (is_kernel, is_function) = {
            let h = self.handles.read();
            (
                h.kernels.contains(&(f as usize)),
                h.functions.contains_key(&(f as usize)),
            )
        };
        let _g = Guard::new();
        let function = if is_kernel {
            let mut g: CUfunction = std::ptr::null_mut();
            // SAFETY: `f` is a CUkernel the application obtained; the context is current.
            let r = unsafe { (self.drv.kernel_get_function)(&mut g, f.cast()) };
            (r == CUDA_SUCCESS && !g.is_null()).then_some(g)
        } else if is_function {
            Some(f)
        } else {
            // A handle obtained where the callbacks do not show it (cuFFT's kernels come
            // through its own static runtime). A launch takes a CUfunction or a CUkernel and
            // the driver tells them apart, so it is asked: as a kernel first (its function in
            // this context), then as a function (its module).
            let mut g: CUfunction = std::ptr::null_mut();
            // SAFETY: `f` is the handle of a launch being made in this context; a handle that
            // is no CUkernel is an error of this call.
            let r = unsafe { (self.drv.kernel_get_function)(&mut g, f.cast()) };
            let as_function = || {
                let mut m: CUmodule = std::ptr::null_mut();
                // SAFETY: as above; a handle that is no CUfunction is an error of this call.
                let r = unsafe { (self.drv.func_get_module)(&mut m, f) };
                r == CUDA_SUCCESS && !m.is_null()
            };
            if r == CUDA_SUCCESS && !g.is_null() {
                Some(g)
            } else if as_function() {
                Some(f)
            } else {
                warn_once(&UNKNOWN_HANDLE, || {
                    tracing::warn!(
                        kernel = name.as_deref().unwrap_or("<unknown>"),
                        "a kernel was launched through a handle the application never obtained \
                         and the driver answers for neither as a kernel nor as a function: \
                         its module cannot be queried"
                    )
                });
                None
            }
        };
        let attr = |func: CUfunction, a: CUfunction_attribute| {
            let mut v: std::ffi::c_int = 0;
            // SAFETY: a plain out-parameter; `func` is a CUfunction of this context.
            let r = unsafe { (self.drv.func_get_attribute)(&mut v, a, func) };
            if r == CUDA_SUCCESS {
                v.max(0) as u32
            } else {
                0
            }
        };
        let module = function.and_then(|func| {
            let mut m: CUmodule = std::ptr::null_mut();
            // SAFETY: a plain out-parameter; `func` is a CUfunction of this context.
            let r = unsafe { (self.drv.func_get_module)(&mut m, func) };
            (r == CUDA_SUCCESS && !m.is_null()).then_some(m as usize)
        });
        let params = function.and_then(|func| {
            let get = self.drv.func_get_param_info?;
            let mut out = Vec::new();
            loop {
                let (mut offset, mut size) = (0usize, 0usize);
                // SAFETY: plain out-parameters; `func` is a CUfunction of this context; an
                // index past the last parameter is an error, not undefined.
                let r = unsafe { get(func, out.len(), &mut offset, &mut size) };
                if r != CUDA_SUCCESS || out.len() >= 4096 {
                    break;
                }
                out.push((offset, size));
            }
            Some(Arc::from(out))
        });
        let facts = KernelFacts {
            name,
            params,
            static_shared: function.map_or(0, |g| attr(g, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)),
            local: function.map_or(0, |g| attr(g, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)),
            module,
            function: function.map(|g| g as usize),
        };
        let mut kernels = self.kernels.write();
        if kernels.len() > 65_536 {
            kernels.clear();
        }
        kernels.insert(key, facts.clone());
        facts
    }

    /// Records kernel handles an application call returned.
    ///
    /// # Safety
    /// `params` are the parameters of `api`, whose exit callback this is.
    unsafe fn record_handles(&self, api: Api, params: *const c_void) {
        let mut found: Vec<usize> = Vec::new();
        let mut module = 0usize;
        // SAFETY: caller contract; each arm reads that entry point's parameters and the
        // outputs the driver wrote.
        unsafe {
            let one = |p: *const usize| (!p.is_null()).then(|| *p).filter(|h| *h != 0);
            let many = |p: *const usize, n: u32| {
                if p.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(p, n as usize).to_vec()
                }
            };
            match api {
                Api::LibraryGetKernel => {
                    let p = *params.cast::<cuLibraryGetKernel_params>();
                    found.extend(one(p.pKernel.cast()));
                }
                Api::LibraryEnumerateKernels => {
                    let p = *params.cast::<cuLibraryEnumerateKernels_params>();
                    found = many(p.kernels.cast(), p.numKernels);
                }
                Api::KernelGetFunction => {
                    let p = *params.cast::<cuKernelGetFunction_params>();
                    found.extend(one(p.pFunc.cast()));
                }
                Api::ModuleGetFunction => {
                    let p = *params.cast::<cuModuleGetFunction_params>();
                    found.extend(one(p.hfunc.cast()));
                    module = p.hmod as usize;
                }
                Api::ModuleEnumerateFunctions => {
                    let p = *params.cast::<cuModuleEnumerateFunctions_params>();
                    found = many(p.functions.cast(), p.numFunctions);
                    module = p.r#mod as usize;
                }
                _ => {}
            }
        }
        found.retain(|h| *h != 0);
        if found.is_empty() {
            return;
        }
        let kernels = matches!(api, Api::LibraryGetKernel | Api::LibraryEnumerateKernels);
        let mut h = self.handles.write();
        if kernels {
            h.kernels.extend(found);
        } else {
            h.functions.extend(found.into_iter().map(|f| (f, module)));
        }
    }

    /// A module is being unloaded: forgets what is keyed by handles the driver may reuse.
    /// Where the unload is the application's `cuModuleUnload` on this thread (`unloading`),
    /// only that module's functions, their facts and its variable scan go; otherwise (a
    /// library's modules, the runtime's own unloads: CUPTI names the module by its id, not its
    /// handle) every handle cache goes.
    fn forget_unloaded(&self, unloading: Option<usize>) {
        let Some(module) = unloading.filter(|m| *m != 0) else {
            self.kernels.write().clear();
            *self.handles.write() = Handles::default();
            for ctx in self.contexts.read().values() {
                ctx.modules.lock().clear();
            }
            return;
        };
        let gone = self.handles.write().forget_module(module);
        self.kernels.write().retain(|(f, _), facts| {
            facts.module != Some(module)
                && !gone.contains(f)
                && !facts.function.is_some_and(|g| gone.contains(&g))
        });
        for ctx in self.contexts.read().values() {
            ctx.modules.lock().remove(&module);
        }
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
        let result = || {
            if cb.functionReturnValue.is_null() {
                CUDA_ERROR_INVALID_VALUE
            } else {
                // SAFETY: a CUresult, valid in exit callbacks.
                unsafe { *cb.functionReturnValue.cast::<CUresult>() }
            }
        };
        let ctx_handle = cb.context as usize;
        let params = cb.functionParams;
        if params.is_null() {
            return;
        }
        let call = cb.correlationId;
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
            Api::Loads => {}
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
                    enter,
                    call,
                    ctx_handle,
                    || [None, None],
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
                        enter,
                        call,
                        ctx_handle,
                        || [None, None],
                        // SAFETY: this call's parameters and CUPTI's NUL-terminated name.
                        || unsafe { call_stream(cb, params) },
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
                    enter,
                    call,
                    ctx_handle,
                    // SAFETY: this call's parameters, which `writes` was decoded for.
                    || unsafe { writes.ranges(params) },
                    // SAFETY: this call's parameters and CUPTI's NUL-terminated name.
                    || unsafe { call_stream(cb, params) },
                    // SAFETY: as for the range.
                    || unsafe { writes.note(params) },
                );
            }
            Api::MemAlloc
            | Api::MemAllocPitch
            | Api::MemAllocManaged
            | Api::MemAllocAsync
            | Api::MemAllocFromPoolAsync => {
                if guarded_thread() || ctx_handle == 0 {
                    return;
                }
                // SAFETY: the parameters of this allocation entry point.
                let (out, size) = unsafe { allocation_of(api, params, !enter) };
                let ctx = self.ctx(ctx_handle);
                if enter {
                    self.relieve(&ctx, size);
                    return;
                }
                match result() {
                    CUDA_SUCCESS if !out.is_null() => {
                        // SAFETY: the driver wrote the new address.
                        let base = unsafe { *out } as usize;
                        if api == Api::MemAllocManaged {
                            // The host writes it without an API call, at any time: never
                            // captured, restored or fingerprinted (so no carried fingerprint
                            // describes it); kernels given it are not replayed.
                            self.host_memory.write().insert(
                                base,
                                size,
                                memory::Kind::Managed,
                                ctx_handle,
                            );
                        } else if base != 0 && size != 0 {
                            self.inventory.record(
                                base,
                                size,
                                crate::AgentId(ctx_handle as u64),
                                Origin::Pool,
                            );
                        }
                        // The context's gates are set up now (once), not inside its first
                        // launch, which would wait for their self-test.
                        if api == Api::MemAlloc {
                            window::prepare_gates(self, &ctx);
                        }
                    }
                    CUDA_ERROR_OUT_OF_MEMORY => self.after_oom(&ctx),
                    _ => {}
                }
            }
            Api::MemFree | Api::MemFreeAsync => {
                if enter && !guarded_thread() {
                    // SAFETY: both parameter structs start with the device pointer.
                    let ptr = unsafe { *params.cast::<CUdeviceptr>() } as usize;
                    if ptr != 0 {
                        // Waits while a snapshot copy uses the memory.
                        self.inventory.remove(ptr);
                        self.host_memory
                            .write()
                            .remove(ptr, &[memory::Kind::Managed]);
                    }
                }
            }
            Api::MemMap => {
                if !enter && !guarded_thread() && result() == CUDA_SUCCESS {
                    // SAFETY: cuMemMap's parameters.
                    let p = unsafe { *params.cast::<cuMemMap_params>() };
                    if self.imported_handles.lock().contains(p.handle) {
                        // Another process's or GPU's memory, not this context's own.
                        self.foreign_memory.write().insert(
                            p.ptr as usize,
                            p.size,
                            memory::Kind::ImportedMapping,
                            ctx_handle,
                        );
                    } else if ctx_handle != 0 {
                        self.inventory.record(
                            p.ptr as usize,
                            p.size,
                            crate::AgentId(ctx_handle as u64),
                            Origin::VmemMapping,
                        );
                    }
                }
            }
            Api::MemUnmap => {
                if enter && !guarded_thread() {
                    // SAFETY: cuMemUnmap's parameters.
                    let p = unsafe { *params.cast::<cuMemUnmap_params>() };
                    self.inventory.remove_range(p.ptr as usize, p.size);
                    self.foreign_memory
                        .write()
                        .remove_range(p.ptr as usize, p.size);
                }
            }
            Api::ForeignHandle | Api::MemRetain => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuMemImportFromShareableHandle's, cuMulticastCreate's and
                // cuMemRetainAllocationHandle's parameters start with the handle's
                // out-pointer.
                let out = unsafe { *params.cast::<*mut CUmemGenericAllocationHandle>() };
                if out.is_null() {
                    return;
                }
                let foreign = match api {
                    Api::MemRetain => {
                        // SAFETY: cuMemRetainAllocationHandle's parameters.
                        let p = unsafe { *params.cast::<cuMemRetainAllocationHandle_params>() };
                        self.foreign_memory
                            .read()
                            .containing(p.addr as usize)
                            .is_some()
                    }
                    _ => true,
                };
                if foreign {
                    // SAFETY: the driver wrote the handle.
                    let handle = unsafe { *out };
                    self.imported_handles.lock().add(handle);
                }
            }
            Api::MemRelease => {
                if enter && !guarded_thread() {
                    // SAFETY: cuMemRelease's parameters.
                    let p = unsafe { *params.cast::<cuMemRelease_params>() };
                    self.imported_handles.lock().release(p.handle);
                }
            }
            Api::SurfCreate => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuSurfObjectCreate's parameters, at its successful exit.
                let p = unsafe { *params.cast::<cuSurfObjectCreate_params>() };
                if !p.pSurfObject.is_null() {
                    // SAFETY: the driver wrote the new object there.
                    let surface = unsafe { *p.pSurfObject };
                    self.surfaces.write().insert(surface, ctx_handle);
                }
            }
            Api::SurfDestroy => {
                if enter && !guarded_thread() {
                    // SAFETY: cuSurfObjectDestroy's parameters.
                    let p = unsafe { *params.cast::<cuSurfObjectDestroy_params>() };
                    self.surfaces.write().remove(&p.surfObject);
                }
            }
            Api::IpcOpen => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: both forms' parameters (same shape).
                let p = unsafe { *params.cast::<cuIpcOpenMemHandle_v2_params>() };
                if p.pdptr.is_null() {
                    return;
                }
                // SAFETY: the driver wrote the address of the import.
                let base = unsafe { *p.pdptr } as usize;
                let size = self.extent_of(base);
                self.foreign_memory
                    .write()
                    .insert(base, size, memory::Kind::IpcImport, ctx_handle);
            }
            Api::IpcClose => {
                if enter && !guarded_thread() {
                    // SAFETY: cuIpcCloseMemHandle's parameters.
                    let p = unsafe { *params.cast::<cuIpcCloseMemHandle_params>() };
                    self.foreign_memory
                        .write()
                        .remove(p.dptr as usize, &[memory::Kind::IpcImport]);
                }
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
                    // Both parameter structs hold the module or library third.
                    let v = RequestedGlobal {
                        owner: p.hmod as usize,
                        addr,
                        size,
                    };
                    let ctx = self.ctx(ctx_handle);
                    let mut g = ctx.requested_globals.lock();
                    if !g.contains(&v) {
                        g.push(v);
                    }
                }
            }
            Api::HostAlloc { register, .. } => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: the three parameter structs start with the pointer (or where the
                // driver wrote it) and the size.
                let p = unsafe { *params.cast::<cuMemAllocHost_v2_params>() };
                let base = if register {
                    p.pp as usize
                } else if p.pp.is_null() {
                    0
                } else {
                    // SAFETY: the driver wrote the new allocation's address.
                    unsafe { *p.pp as usize }
                };
                let kind = if register {
                    memory::Kind::Registered
                } else {
                    memory::Kind::Pinned
                };
                self.host_memory
                    .write()
                    .insert(base, p.bytesize, kind, ctx_handle);
            }
            Api::HostFree => {
                if enter && !guarded_thread() {
                    // SAFETY: both parameter structs are the pointer.
                    let p = unsafe { (*params.cast::<cuMemFreeHost_params>()).p } as usize;
                    self.host_memory
                        .write()
                        .remove(p, &[memory::Kind::Pinned, memory::Kind::Registered]);
                }
            }
            Api::ModuleUnload | Api::LibraryUnload => {
                if guarded_thread() {
                    return;
                }
                // SAFETY: both parameter structs are one handle.
                let owner = unsafe { (*params.cast::<cuModuleUnload_params>()).hmod } as usize;
                if enter {
                    for ctx in self.contexts.read().values() {
                        ctx.requested_globals.lock().retain(|g| g.owner != owner);
                    }
                }
                // The module-unload resource callback inside this call forgets this module's
                // handles only.
                if api == Api::ModuleUnload {
                    let _ = UNLOADING.try_with(|u| u.set(if enter { owner } else { 0 }));
                }
                // A window may be snapshotting the module's variables: the unload waits.
                if ctx_handle != 0 {
                    self.hold_off_window(enter, call, ctx_handle);
                }
            }
        }
    }

    fn on_resource(&self, cbid: u32, data: &CUpti_ResourceData) {
        let ctx_handle = data.context as usize;
        match cbid {
            CUPTI_CBID_RESOURCE_STREAM_CREATED
                if !guarded_thread() && ctx_handle != 0 && !data.resourceHandle.is_null() =>
            {
                let s = data.resourceHandle as usize;
                let ctx = self.ctx(ctx_handle);
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

    /// Before an application allocation: releases an idle arena that would leave the
    /// allocation short of memory.
    fn relieve(&self, ctx: &Ctx, request: usize) {
        let mem = window::ArenaMemory { drv: &self.drv };
        let _g = Guard::new();
        let (short, in_window) = {
            let arena = ctx.arena.lock();
            (arena.short_for(&mem, request), arena.in_window())
        };
        if !short {
            return;
        }
        // A window uses the arena: the allocation waits for it to end (the reader side,
        // bounded by the lock deadline, after which the window stops after its current pass),
        // so that it finds the memory the window held.
        let waited = in_window;
        if waited {
            ctx.lock.hold_outside_window(self.settings.lock);
        }
        let freed = ctx.arena.lock().relieve(&mem, request);
        if waited {
            // SAFETY: held just above.
            unsafe { ctx.lock.release_held() };
        }
        if freed > 0 {
            tracing::info!(
                bytes = freed,
                "snapshot arena released for an application allocation"
            );
        }
    }

    /// The size of the allocation starting at `base` (an IPC import, in the current context):
    /// `cuMemGetAddressRange`, or 1 where the driver does not say (only pointers to its first
    /// byte are then recognised).
    fn extent_of(&self, base: usize) -> usize {
        let Some(range) = self.drv.mem_get_address_range else {
            return 1;
        };
        let (mut b, mut size): (CUdeviceptr, usize) = (0, 0);
        let _g = Guard::new();
        // SAFETY: plain out-parameters; `base` is a live import of the current context.
        let r = unsafe { range(&mut b, &mut size, base as CUdeviceptr) };
        if r == CUDA_SUCCESS && b as usize <= base && size > 0 {
            (b as usize).saturating_add(size).saturating_sub(base)
        } else {
            tracing::debug!(status = %api::error_name(&self.drv, r), "the extent of an IPC import is unknown");
            1
        }
    }

    /// After an application allocation failed for lack of memory.
    fn after_oom(&self, ctx: &Ctx) {
        let Some(mut arena) = ctx.arena.try_lock() else {
            return;
        };
        let mem = window::ArenaMemory { drv: &self.drv };
        let _g = Guard::new();
        let freed = arena.release_now(&mem);
        if freed > 0 {
            tracing::warn!(
                bytes = freed,
                "an application allocation failed while the snapshot arena held device memory; \
                 the arena is released (a retry finds the memory)"
            );
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

/// The out-pointer and size of an allocation call (`exit`: the call has returned, so its
/// outputs are written).
///
/// # Safety
/// `params` are the parameters of `api`.
unsafe fn allocation_of(api: Api, params: *const c_void, exit: bool) -> (*mut CUdeviceptr, usize) {
    // SAFETY: caller contract; each arm reads that entry point's parameter struct.
    unsafe {
        match api {
            Api::MemAlloc => {
                let p = *params.cast::<cuMemAlloc_v2_params>();
                (p.dptr, p.bytesize)
            }
            Api::MemAllocPitch => {
                let p = *params.cast::<cuMemAllocPitch_v2_params>();
                // The pitch is known only at exit; before it, the unpadded size.
                let pitch = if exit && !p.pPitch.is_null() {
                    *p.pPitch
                } else {
                    0
                };
                (p.dptr, pitch.max(p.WidthInBytes).saturating_mul(p.Height))
            }
            Api::MemAllocManaged => {
                let p = *params.cast::<cuMemAllocManaged_params>();
                (p.dptr, p.bytesize)
            }
            Api::MemAllocAsync => {
                let p = *params.cast::<cuMemAllocAsync_params>();
                (p.dptr, p.bytesize)
            }
            Api::MemAllocFromPoolAsync => {
                let p = *params.cast::<cuMemAllocFromPoolAsync_params>();
                (p.dptr, p.bytesize)
            }
            _ => (std::ptr::null_mut(), 0),
        }
    }
}

static UNKNOWN_HANDLE: std::sync::Once = std::sync::Once::new();
static MULTI_DEVICE: std::sync::Once = std::sync::Once::new();
static GRAPHS: std::sync::Once = std::sync::Once::new();

pub(crate) fn warn_once(once: &std::sync::Once, warn: impl FnOnce()) {
    once.call_once(warn);
}

static BACKEND: OnceLock<Backend> = OnceLock::new();

/// The callback registered with CUPTI; `userdata` is the backend.
pub(crate) unsafe extern "C" fn callback(
    userdata: *mut c_void,
    domain: CUpti_CallbackDomain,
    cbid: CUpti_CallbackId,
    cbdata: *const c_void,
) {
    if userdata.is_null() {
        return;
    }
    // SAFETY: `userdata` is the &'static Backend given to cuptiSubscribe.
    let be: &'static Backend = unsafe { &*userdata.cast::<Backend>() };
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: CUPTI's data for this callback.
        unsafe { be.on_callback(domain, cbid, cbdata) }
    }));
    if r.is_err() {
        tracing::error!("internal error (panic) in a CUPTI callback; continuing without it");
    }
}

/// Why the CUDA backend did not attach.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InstallError {
    #[error(transparent)]
    Load(#[from] api::LoadError),
    #[error(
        "CUPTI already has a subscriber in this process (a profiler such as Nsight Systems or \
         Nsight Compute, a debugger, or the application's own CUPTI use)"
    )]
    Taken,
    #[error("{0}")]
    Cupti(String),
    #[error("this library's CUDA backend is already installed")]
    Twice,
}

/// With `ROCPROF_REPLAY_DEBUG_SIGNALS=1`, a fatal signal (a crash in the driver, CUPTI or this
/// library) first prints the crashing thread's backtrace on stderr, then takes its default
/// action. A debugging aid for machines without a debugger; off by default.
fn report_fatal_signals() {
    if std::env::var_os("ROCPROF_REPLAY_DEBUG_SIGNALS").is_none_or(|v| v != "1") {
        return;
    }
    extern "C" fn on_fatal(sig: libc::c_int) {
        let bt = std::backtrace::Backtrace::force_capture();
        eprintln!(
            "rocprof-replay: fatal signal {sig} on thread {:?}\n{bt}",
            std::thread::current().name()
        );
        // SAFETY: restores the default action and re-raises: the process ends as it would
        // have without the handler.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ] {
        // SAFETY: installs a handler for a fatal signal; see above.
        unsafe {
            libc::signal(
                sig,
                on_fatal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

/// Attaches the CUDA backend to the engine: loads the driver and CUPTI, subscribes to the
/// driver callbacks and resource events.
pub(crate) fn install(engine: &'static Engine) -> Result<(), InstallError> {
    report_fatal_signals();
    tracing::debug!("loading the CUDA driver and CUPTI");
    let drv = api::load_driver()?;
    let cupti = api::load_cupti()?;
    // Resolve callback ids by name: CUPTI versions number them differently.
    let mut names = Vec::new();
    for id in 1..4096u32 {
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: a plain out-parameter.
        let r = unsafe { (cupti.get_callback_name)(CUPTI_CB_DOMAIN_DRIVER_API, id, &mut p) };
        if r == CUPTI_SUCCESS && !p.is_null() {
            // SAFETY: CUPTI's static NUL-terminated name.
            names.push((
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned(),
                id,
            ));
        }
    }
    tracing::debug!(names = names.len(), "CUPTI callback names read");
    let mut ids = Ids::from_names(names.iter().map(|(n, i)| (n.as_str(), *i)));
    if !ids.has_launches() {
        tracing::warn!("CUPTI did not name its callbacks; using CUPTI 13.0's callback ids");
        ids = Ids::from_names(cbid::ALL.iter().copied());
    }
    let decider: Decider = Box::new(move |info, ordinary| {
        engine.decide(info, ordinary).map(|window| WindowRun {
            counters: window.collects_counters(),
            run: Box::new(move |target: &mut dyn ReplayTarget| window.run(target)),
        })
    });
    let mut backend = Backend::new(
        drv,
        decider,
        &crate::engine::state::INVENTORY,
        engine.settings,
        ids,
    );
    let activity = cupti.activity.filter(|_| kernel_clock::wanted_from_env());
    if let Some(api) = activity {
        kernel_clock::set_callback_api(api);
    }
    backend.clock = kernel_clock::KernelClock::new(activity, kernel_clock::Span::from_env());
    if BACKEND.set(backend).is_err() {
        return Err(InstallError::Twice);
    }
    let be = BACKEND.get().ok_or(InstallError::Twice)?;
    let mut sub: CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: `callback` handles every domain; `be` lives for the process.
    let r = unsafe {
        (cupti.subscribe)(
            &mut sub,
            Some(callback),
            (be as *const Backend).cast_mut().cast(),
        )
    };
    match r {
        CUPTI_SUCCESS => {}
        CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => return Err(InstallError::Taken),
        other => {
            return Err(InstallError::Cupti(format!(
                "cuptiSubscribe failed: {}",
                api::cupti_error(&cupti, other)
            )));
        }
    }
    let enable = |domain: u32, id: u32| {
        // SAFETY: our subscriber; a plain id.
        let r = unsafe { (cupti.enable_callback)(1, sub, domain, id) };
        (r == CUPTI_SUCCESS).then_some(()).ok_or(r)
    };
    let mut failed = Vec::new();
    for id in be.ids.ids() {
        if let Err(r) = enable(CUPTI_CB_DOMAIN_DRIVER_API, id) {
            failed.push((id, r));
        }
    }
    for id in [
        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
        CUPTI_CBID_RESOURCE_STREAM_CREATED,
        CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING,
        CUPTI_CBID_RESOURCE_MODULE_LOADED,
        CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING,
    ] {
        if let Err(r) = enable(CUPTI_CB_DOMAIN_RESOURCE, id) {
            failed.push((id, r));
        }
    }
    if let Some((id, r)) = failed.first() {
        // SAFETY: our subscriber, no longer used.
        unsafe { (cupti.unsubscribe)(sub) };
        return Err(InstallError::Cupti(format!(
            "cuptiEnableCallback({id}) failed: {}",
            api::cupti_error(&cupti, *r)
        )));
    }
    // Kernel records get our buffers now (the subscription is ours, so no other profiler is
    // attached), before the application can register its own.
    be.clock.register();
    crate::engine::state::INVENTORY.enable();
    be.active.store(true, Ordering::Release);
    // Counters through CUPTI's range profiler: each device's catalog reaches the policy when
    // the device is first seen (device ordinals are not known before the application's cuInit).
    profiler::install(Box::new(|agent, counters| engine.on_agent(agent, counters)));
    tracing::info!(
        callbacks = be.ids.ids().count(),
        "kernel replay installed on CUDA"
    );
    Ok(())
}

/// Stops replay (the tool's `OnUnload`): callbacks pass everything through from now on. A
/// window already running finishes; nothing is freed.
pub(crate) fn shutdown() {
    if let Some(be) = BACKEND.get() {
        be.active.store(false, Ordering::Release);
        wait_for_windows(be);
    }
}

/// Makes the process's exit wait (bounded, [`wait_for_windows`]) for windows behind returned
/// launch calls, and write their records. Registered at the first such window, after the CUDA
/// runtime registered its own teardown, so it runs before that teardown.
pub(crate) fn wait_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn at_exit() {
        let _ = catch_unwind(|| {
            if let Some(be) = BACKEND.get() {
                wait_for_windows(be);
            }
        });
    }
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(at_exit) };
    });
}

/// Waits (bounded by one pass and its late-pass deadline) for the windows still running
/// behind launch calls that returned, so none is cut off by the backend's teardown.
fn wait_for_windows(be: &Backend) {
    let pending = gate::BEHIND.pending();
    if pending == 0 {
        return;
    }
    let limit = be.settings.pass.saturating_add(be.settings.late_pass);
    tracing::debug!(pending, "waiting for replay windows before shutdown");
    if !gate::BEHIND.wait_idle(limit) {
        tracing::warn!(
            pending = gate::BEHIND.pending(),
            "replay windows still running at shutdown after {limit:?}"
        );
    }
}

/// In a forked child: replay is off, callbacks only pass through.
pub(crate) fn disable_in_child() {
    if let Some(be) = BACKEND.get() {
        be.active.store(false, Ordering::Relaxed);
    }
}
