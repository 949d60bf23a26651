//! The HSA backend: installs hooks into the runtime's live API table in `OnLoad`, tracks
//! allocations and executables, turns application queues into intercept queues, and runs the
//! replay window for intercepted kernel dispatches.

mod compare;
mod copies;
mod counters;
mod gates;
mod hooks;
mod intercept;
pub(crate) mod kernel_args;
mod originals;
mod stuck;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rocprof_replay_sys::*;

use crate::engine::agent::AgentLock;
use crate::engine::arena::{self, Arena};
use crate::engine::settings::Settings;
use crate::engine::state::{Engine, INVENTORY};
use crate::error::Error;

pub(crate) use originals::Originals;

/// One GPU agent.
pub(crate) struct Gpu {
    pub(crate) agent: hsa_agent_t,
    pub(crate) index: u32,
    /// The window lock (writer: a replay window; readers: ordinary submissions, copies and
    /// host operations on the GPU's memory), with the windows opened and not ended.
    pub(crate) lock: AgentLock,
    /// Asynchronous copies in flight that touch this GPU's memory.
    pub(crate) copies: copies::CopyFence,
    /// The application has submitted vendor-specific (PM4) packets to a queue of this GPU —
    /// its own hardware-counter windows (aqlprofile) among them, which would count every
    /// replay pass: its dispatches are no longer replayed ([`DeclineReason::VendorPackets`]).
    ///
    /// [`DeclineReason::VendorPackets`]: crate::DeclineReason::VendorPackets
    pub(crate) vendor_packets: std::sync::atomic::AtomicBool,
    /// Work on this GPU that windows cannot wait for or hold back: queues of the GPU the
    /// backend could not intercept (`hsa_amd_queue_intercept_create` or the handler's
    /// registration failed) still alive, plus, for good, one if an asynchronous copy touching
    /// the GPU ran unfenced. While non-zero its windows decline
    /// ([`DeclineReason::QueueNotDrainable`](crate::DeclineReason::QueueNotDrainable)).
    pub(crate) undrainable: crate::engine::agent::Undrainable,
    /// A queue and the tracked submission a drain ran out of time waiting for: while that
    /// submission has not retired, drains decline at once (one bounded wait for a queue that
    /// may never drain).
    pub(crate) stuck_drain: crate::engine::agent::StuckDrain<(Arc<QueueState>, u64)>,
    /// The GPU's own coarse-grained memory pool (VRAM) and its size in bytes: where the
    /// snapshot arena's device chunks come from.
    pub(crate) device_pool: Option<(hsa_amd_memory_pool_t, usize)>,
    /// The gates of this GPU's asynchronous replay windows ([`gates`]).
    pub(crate) gates: gates::Gates,
    /// The queue replay windows run their passes on, created with the first window.
    pub(crate) replay: std::sync::OnceLock<Option<gates::ReplayQueue>>,
    /// More queues of ours, for ordinary runs that must not wait behind what runs on
    /// `replay`: a first pass that gave way ([`yielded`](Self::yielded)), or another
    /// dispatch's ordinary run ([`gates::AsideLanes`]).
    pub(crate) aside: gates::AsideLanes,
    /// A signal of ours that a barrier behind a first pass that gave way
    /// ([`PassError::Yielded`](crate::engine::window::PassError::Yielded)) decrements when that
    /// pass ends: while it reads 1 the pass holds `replay` (the application's own execution,
    /// possibly waiting for a later dispatch), and the GPU's windows decline at once, their
    /// ordinary runs going to `aside`.
    pub(crate) yielded: Mutex<Option<hsa_signal_t>>,
    /// Snapshot staging of this GPU: VRAM first, pinned host memory when VRAM is short
    /// ([`Arena`]). Its chunks come from the original (unhooked) allocator, so they are never
    /// application allocations: never tracked, never snapshotted.
    pub(crate) arena: Mutex<Arena>,
    /// The device compare and fingerprint kernels of this GPU ([`compare`]), loaded at first
    /// use.
    pub(crate) kernels: compare::DeviceKernels,
    /// Asynchronous windows of this GPU not started yet, in submission order.
    pub(crate) pending: Mutex<intercept::PendingWindows>,
    /// Signals of ours that ended windows left behind (no packet or copy refers to them any
    /// more): later windows' queued passes and restores take them before creating new ones.
    /// At most [`SPARE_SIGNALS`]; kept for the process's life.
    pub(crate) spare_signals: Mutex<Vec<hsa_signal_t>>,
}

/// Most signals a GPU keeps for its next windows ([`Gpu::spare_signals`]).
pub(crate) const SPARE_SIGNALS: usize = 256;

impl Gpu {
    /// Notes work on this GPU that windows cannot wait for: an asynchronous copy that could not
    /// be fenced (its end cannot be known, so this lasts).
    pub(crate) fn copy_unfenced(&self) {
        if self.undrainable.mark_unfenced() {
            tracing::warn!(
                gpu = self.index,
                "an asynchronous copy touching this GPU runs unfenced: its dispatches are no \
                 longer replayed"
            );
        }
    }
}

/// The snapshot arena's memory on one GPU: its VRAM pool and the host staging pool, through
/// the original allocators.
pub(crate) struct ArenaMemory<'a> {
    pub(crate) be: &'a Backend,
    pub(crate) gpu: &'a Gpu,
}

/// `HSA_AMD_AGENT_INFO_MEMORY_AVAIL` (u64): free bytes of the agent's memory (ROCm 5.x+; an
/// older runtime refuses it, and the arena then never uses VRAM).
const AGENT_INFO_MEMORY_AVAIL: hsa_agent_info_t = 0xA015;

impl arena::Memory for ArenaMemory<'_> {
    fn device_info(&self) -> Option<(usize, usize)> {
        let (_, total) = self.gpu.device_pool?;
        let mut free = 0u64;
        // SAFETY: MEMORY_AVAIL writes a u64.
        let st = unsafe {
            (self.be.orig.agent_get_info)(
                self.gpu.agent,
                AGENT_INFO_MEMORY_AVAIL,
                (&mut free as *mut u64).cast(),
            )
        };
        (st == HSA_STATUS_SUCCESS).then_some((free as usize, total))
    }
    fn alloc_device(&self, size: usize) -> Option<usize> {
        let (pool, _) = self.gpu.device_pool?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the original allocator (never recorded as an application allocation).
        let st = unsafe { (self.be.orig.pool_allocate)(pool, size, 0, &mut p) };
        (st == HSA_STATUS_SUCCESS && !p.is_null()).then_some(p as usize)
    }
    fn free_device(&self, ptr: usize) {
        self.free_chunk(ptr);
    }
    fn alloc_pinned(&self, size: usize) -> Option<usize> {
        let (pool, _) = self.be.staging_pool?;
        alloc_host(&self.be.orig, pool, &self.be.gpus, size).map(|p| p.as_ptr() as usize)
    }
    fn free_pinned(&self, ptr: usize) {
        self.free_chunk(ptr);
    }
    fn reserve(&self, total: usize) -> usize {
        device_reserve(self.be.device_reserve, total)
    }
}

impl ArenaMemory<'_> {
    /// Frees an arena chunk — unless stuck copies or compare kernels of this GPU may still
    /// read or write memory of ours: then the free waits until they end (the arena only knows
    /// which buffers are handed out, and a window can give back staging that stuck work still
    /// reads, such as after a stuck final restore).
    fn free_chunk(&self, ptr: usize) {
        let free = self.be.orig.pool_free;
        let parked = move || {
            // SAFETY: a chunk of ours, freed once no stuck work of its GPU may touch our
            // memory.
            unsafe { free(ptr as *mut std::ffi::c_void) };
        };
        if self.be.stuck.park_free(self.gpu.index, parked) {
            tracing::warn!(
                gpu = self.gpu.index,
                "a snapshot arena chunk is freed only once stuck replay copies of its GPU end"
            );
            return;
        }
        // SAFETY: a chunk of ours that no snapshot holds (the arena's rule) and no stuck work
        // may touch (checked above).
        unsafe { (self.be.orig.pool_free)(ptr as *mut std::ffi::c_void) };
    }
}

/// VRAM the arena leaves free: `ROCPROF_REPLAY_DEVICE_RESERVE_MB` when set, else a tenth of
/// the pool.
pub(crate) fn device_reserve(configured: Option<u64>, total: usize) -> usize {
    configured.map_or(total / 10, |b| usize::try_from(b).unwrap_or(usize::MAX))
}

impl Gpu {
    /// After an application allocation from this GPU's VRAM pool failed for lack of memory:
    /// releases the snapshot arena's idle chunks when it holds VRAM and no window runs on the
    /// GPU (the reader side of the GPU lock is taken, bounded by the lock deadline, so no
    /// window can be using or growing the arena meanwhile). Stuck copies or compare kernels of
    /// the GPU may still read or write the arena: they are waited for as a free of the GPU's
    /// memory waits (twice the copy deadline), and while any runs the arena is kept. Returns
    /// the VRAM bytes released.
    pub(crate) fn release_arena_for_application(&self, be: &Backend) -> usize {
        let deadline = be.settings().lock;
        let holds = self
            .arena
            .try_lock_for(deadline)
            .is_some_and(|a| a.device_bytes() > 0);
        if !holds {
            return 0;
        }
        let stuck_wait = be.settings().copy.saturating_mul(2);
        if !be
            .stuck
            .wait_for_memory_of(be, Some(self.index), stuck_wait)
        {
            tracing::warn!(
                gpu = self.index,
                "an application allocation failed while the snapshot arena held device memory; \
                 the arena is kept: stuck replay copies may still use it"
            );
            return 0;
        }
        let Some(_no_window) = self.lock.try_read_for(deadline) else {
            return 0;
        };
        // Under the reader side no window runs, so nothing gets stuck meanwhile; what a window
        // left stuck between the wait and the lock keeps the arena.
        if be.stuck.touches_memory_of(self.index) {
            return 0;
        }
        let Some(mut arena) = self.arena.try_lock_for(deadline) else {
            return 0;
        };
        let freed = arena.release_now(&ArenaMemory { be, gpu: self });
        if freed > 0 {
            tracing::warn!(
                bytes = freed,
                "an application allocation failed while the snapshot arena held device memory; \
                 the arena is released and the allocation retried"
            );
        }
        freed
    }
}

/// What the backend keeps about an intercept queue.
pub(crate) struct QueueState {
    pub(crate) queue: *mut hsa_queue_t,
    pub(crate) agent: hsa_agent_t,
    /// Work forwarded on this queue and not yet finished: incremented before each ordinary
    /// submission, decremented by a barrier-AND packet forwarded right after it. A replay window
    /// drains other queues by waiting for this to reach 0, without submitting to them (their
    /// interceptor may be blocked on the agent lock the window holds). Handle 0: not tracked.
    pub(crate) inflight: hsa_signal_t,
    /// The tracked submissions behind `inflight`, to keep the runtime's ring from overflowing.
    pub(crate) backlog: Mutex<Backlog>,
    /// Tracked submissions forwarded so far (each decrements `inflight` when it finishes).
    pub(crate) submitted: std::sync::atomic::AtomicU64,
    /// The newest isolation gate this queue has a barrier for
    /// ([`gates::GateList::pending_for`]).
    pub(crate) gated_epoch: std::sync::atomic::AtomicU64,
    /// Windows of this queue whose gate may still be closed: (the tracked submission that
    /// holds it, the gate). A drain of this queue stops short of them.
    pub(crate) pending_gates: Mutex<Vec<(u64, hsa_signal_t)>>,
    /// Whether the runtime destroyed the queue, and the ready signals of its asynchronous
    /// windows still running ([`QueueState::retire_destroyed`]).
    pub(crate) life: Mutex<QueueLife>,
}

/// What a queue's windows need to know of its destruction.
#[derive(Default)]
pub(crate) struct QueueLife {
    /// `hsa_queue_destroy` returned: nothing submitted to the queue runs any more, and the
    /// application may destroy the signals of the work it abandoned there.
    pub(crate) destroyed: bool,
    /// Ready signals of windows of this queue not yet settled: each is resolved by a barrier
    /// on this queue, which never runs once the queue is destroyed.
    pub(crate) ready: Vec<hsa_signal_t>,
}

/// Packets forwarded on a queue and not yet known to have finished.
///
/// ROCr never blocks a submission to an intercept queue's hidden ring: what does not fit goes
/// to an overflow buffer, flushed later by the runtime's async thread — which needs the queue's
/// intercept lock, held by whoever is inside our handler. A replay window is inside the handler
/// for its whole length, so a drain barrier that landed in the overflow buffer would only run
/// after the window gave up. The backlog keeps the ring from overflowing in the first place:
/// before forwarding, the handler waits (bounded) until the ring has room for the submission,
/// our barrier, and the slot ROCr keeps for its retry packet.
#[derive(Default)]
pub(crate) struct Backlog {
    /// Packets of each tracked submission (its own plus our barrier), oldest first. The
    /// barriers complete in order, so when `inflight` reads `n`, all but the newest `n` are done.
    submissions: std::collections::VecDeque<u32>,
    /// Their sum: an upper bound of the packets in the ring.
    packets: u64,
}

impl Backlog {
    /// Forgets the submissions that finished, given that `pending` are still in flight.
    fn settle(&mut self, pending: u64) {
        while self.submissions.len() as u64 > pending {
            if let Some(done) = self.submissions.pop_front() {
                self.packets = self.packets.saturating_sub(u64::from(done));
            }
        }
    }

    /// Records a submission of `packets` packets (never panics: it runs between a forward's
    /// bookkeeping and its writes).
    pub(crate) fn push(&mut self, packets: u32) {
        self.submissions.push_back(packets);
        self.packets = self.packets.saturating_add(u64::from(packets));
    }
}

impl QueueState {
    /// The ring size in packets.
    pub(crate) fn size(&self) -> u64 {
        // SAFETY: a live queue object of the runtime; `size` never changes.
        u64::from(unsafe { (*self.queue).size })
    }

    /// Waits until `backlog` leaves room for `packets` more packets plus one spare slot, or
    /// until `deadline` passes (then the submission goes ahead: the runtime copes, we may
    /// wait longer in a later drain). A submission that can never fit does not wait.
    pub(crate) fn wait_for_room(
        &self,
        be: &Backend,
        backlog: &mut Backlog,
        packets: u64,
        deadline: Duration,
    ) {
        let size = self.size();
        if self.inflight.handle == 0 || packets + 1 > size {
            return;
        }
        let limit = size - 1 - packets;
        if backlog.packets <= limit {
            return;
        }
        let end = std::time::Instant::now() + deadline;
        loop {
            // SAFETY: our own live signal.
            let pending = unsafe { (be.orig.signal_load)(self.inflight) };
            backlog.settle(u64::try_from(pending).unwrap_or(0));
            if backlog.packets <= limit {
                return;
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                warn_ring_full_once();
                return;
            }
            let slice = left.min(Duration::from_millis(100));
            // SAFETY: our own live signal; a bounded wait for it to drop below `pending`.
            unsafe {
                (be.orig.signal_wait)(
                    self.inflight,
                    HSA_SIGNAL_CONDITION_LT,
                    pending,
                    be.ticks(slice),
                    HSA_WAIT_STATE_BLOCKED,
                )
            };
        }
    }
}

fn warn_ring_full_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            "a queue stayed full past the drain deadline; submitting anyway (the runtime \
             buffers what does not fit)"
        );
    });
}

impl QueueState {
    /// After `hsa_queue_destroy` returned: what was submitted to the queue and has not run
    /// never will (the runtime drops it), so every tracked submission counts as retired —
    /// a drain waiting for this queue (a window that listed it before it was destroyed) goes
    /// on at once instead of at its deadline — and the ready barriers of its windows count as
    /// resolved. From now on its windows leave the application's completion signal alone.
    pub(crate) fn retire_destroyed(&self, be: &Backend) {
        let mut life = self.life.lock();
        life.destroyed = true;
        if self.inflight.handle != 0 {
            // SAFETY: our own live signal (alive as long as this state).
            unsafe { (be.orig.signal_store)(self.inflight, 0) };
        }
        for ready in life.ready.drain(..) {
            // SAFETY: a window's ready signal, alive while listed (the window unlists it
            // under this lock before it retires it).
            unsafe { (be.orig.signal_store)(ready, 0) };
        }
    }
}

impl Drop for QueueState {
    fn drop(&mut self) {
        if let (Some(be), true) = (BACKEND.get(), self.inflight.handle != 0) {
            // SAFETY: our own signal; the last reference to the queue state is going away.
            unsafe { (be.orig.signal_destroy)(self.inflight) };
        }
    }
}
// SAFETY: the queue pointer is a runtime object valid until hsa_queue_destroy; we only use it
// for AQL producer operations, which are thread-safe.
unsafe impl Send for QueueState {}
// SAFETY: as above.
unsafe impl Sync for QueueState {}

/// The backend's state, built in `OnLoad`.
pub(crate) struct Backend {
    pub(crate) orig: Originals,
    /// The process-wide engine (policy and settings).
    pub(crate) engine: &'static Engine,
    pub(crate) gpus: Vec<Gpu>,
    pub(crate) ticks_per_second: u64,
    /// Host pool for snapshot buffers (pinned host memory) and the CPU agent owning it.
    pub(crate) staging_pool: Option<(hsa_amd_memory_pool_t, hsa_agent_t)>,
    /// Scratch buffers (pinned host) kept between replays: the diff's read-backs.
    pub(crate) staging: StagingCache,
    /// `ROCPROF_REPLAY_DEVICE_RESERVE_MB` in bytes, when set.
    pub(crate) device_reserve: Option<u64>,
    pub(crate) kernel_names: RwLock<HashMap<u64, Arc<str>>>,
    /// Kernel object -> its kernarg segment size (the bytes scanned for host-visible memory).
    pub(crate) kernarg_sizes: RwLock<HashMap<u64, u32>>,
    /// The application's host-visible allocations (fine-grained pools and regions, not
    /// kernarg): base -> size. A dispatch whose arguments point into one is not replayed
    /// ([`DeclineReason::HostMemory`](crate::DeclineReason::HostMemory)): the host may write it
    /// while the window runs, so it can be neither restored nor left to be written N times.
    pub(crate) host_memory: RwLock<std::collections::BTreeMap<usize, usize>>,
    /// Host memory the application locked (`hsa_amd_memory_lock*`): host pointer -> (the
    /// agents' address of it, size); both ranges are in `host_memory` while locked.
    pub(crate) locked: Mutex<HashMap<usize, (usize, usize)>>,
    /// The part of `host_memory` the host can read, with the host address of its bytes:
    /// base -> (size, host base). System-memory allocations are their own host base; a locked
    /// range's agents' alias maps to the host range. A dispatch naming only such memory is
    /// replayed with that memory watched (checked after the first pass, never restored).
    pub(crate) host_readable: RwLock<std::collections::BTreeMap<usize, (usize, usize)>>,
    pub(crate) executables: Mutex<Vec<hsa_executable_t>>,
    /// The runtime says every agent may access all system memory by default
    /// (`HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT`: XNACK on, an APU such as the MI300A,
    /// hsa-emu): a kernel given a `malloc`'d pointer writes memory no call made reachable, so
    /// its pointer arguments are looked at ([`intercept`]'s system-memory check).
    pub(crate) system_memory_reachable: bool,
    /// Code objects' argument layouts, from reader creation to executable destruction.
    pub(crate) layouts: Mutex<kernel_args::Layouts>,
    /// Kernel object -> the words of its kernarg segment that may hold addresses (from its
    /// code object's metadata; absent for kernels without it).
    pub(crate) pointer_words: RwLock<HashMap<u64, kernel_args::PointerWords>>,
    /// Module variables of frozen executables (address -> size): memory a pointer argument
    /// may name that the window snapshots, never system memory.
    pub(crate) variables: RwLock<std::collections::BTreeMap<usize, usize>>,
    pub(crate) queues: RwLock<HashMap<usize, Arc<QueueState>>>,
    /// Queues of a GPU the backend could not intercept (queue -> the GPU's index), counted in
    /// the GPU's `undrainable` until destroyed.
    pub(crate) untracked: Mutex<HashMap<usize, u32>>,
    pub(crate) pool_flags: RwLock<HashMap<u64, u32>>,
    /// vmem handle -> what its mappings are ([`hooks`]' vmem hooks).
    pub(crate) vmem_handles: Mutex<HashMap<u64, hooks::VmemKind>>,
    /// Live vmem mappings: address -> (handle, size), to find a handle's mappings when it is
    /// exported.
    pub(crate) vmem_mappings: Mutex<HashMap<usize, (u64, usize)>>,
    /// Memory another process or GPU writes — IPC attachments (`hsa_amd_ipc_memory_attach`) and
    /// allocations exported for them (`hsa_amd_ipc_memory_create`), mappings of imported or
    /// exported vmem handles, graphics interop buffers: base -> size. A dispatch
    /// whose arguments point into it is never replayed
    /// ([`DeclineReason::ForeignMemory`](crate::DeclineReason::ForeignMemory)): the window can
    /// neither fence its writers nor restore under them.
    pub(crate) foreign_memory: RwLock<std::collections::BTreeMap<usize, usize>>,
    /// System memory the application made reachable by a GPU (`hsa_amd_svm_attributes_set`
    /// with an `AGENT_ACCESSIBLE*` attribute naming a GPU): disjoint, merged ranges, base ->
    /// size, trimmed when an allocation reuses their addresses. A dispatch pointing into one is
    /// not replayed ([`DeclineReason::HostMemory`](crate::DeclineReason::HostMemory)), as for
    /// `malloc`'d memory where the GPU reaches all system memory.
    pub(crate) svm_memory: RwLock<std::collections::BTreeMap<usize, usize>>,
    pub(crate) next_dispatch: AtomicU64,
    /// Fenced asynchronous copies (proxy signals, timestamps).
    pub(crate) copies: copies::CopyTracker,
    /// Timestamps of replayed dispatches, answered for the application's completion signal.
    pub(crate) dispatch_times: SignalTimes<hsa_amd_profiling_dispatch_time_t>,
    /// Passes and snapshot copies still running after their deadlines.
    pub(crate) stuck: stuck::StuckWork,
    /// The AQL profile extension (hardware counters), or why there is none.
    pub(crate) counters: Result<counters::AqlProfile, String>,
}

impl Backend {
    /// The runtime's pointer info of `addr` (no agent list), `None` when it fails.
    pub(crate) fn pointer_info(&self, addr: usize) -> Option<hsa_amd_pointer_info_t> {
        let mut info = hsa_amd_pointer_info_t::default();
        // SAFETY: `info.size` is set; no agent list requested; any address may be asked about.
        let st = unsafe {
            (self.orig.pointer_info)(
                addr as *mut std::ffi::c_void,
                &mut info,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        (st == HSA_STATUS_SUCCESS).then_some(info)
    }

    pub(crate) fn gpu(&self, agent: hsa_agent_t) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.agent == agent)
    }

    /// Deadlines and budget.
    pub(crate) fn settings(&self) -> &Settings {
        &self.engine.settings
    }

    /// Converts a duration to runtime timestamp ticks (at least 1).
    pub(crate) fn ticks(&self, d: Duration) -> u64 {
        ((d.as_nanos() * self.ticks_per_second as u128 / 1_000_000_000) as u64).max(1)
    }
}

/// Most signals whose timestamps are kept (the table is emptied when it grows past this).
const SIGNAL_TIMES_LIMIT: usize = 4096;

/// Timestamps the runtime cannot give for an application's signal because the work it
/// signals ran under another signal of ours (a replayed dispatch, a fenced copy), keyed by the
/// application's signal handle. An entry is forgotten when the signal is used again.
pub(crate) struct SignalTimes<T> {
    times: Mutex<HashMap<u64, T>>,
    /// Whether `times` may hold anything (the fast path skips the lock when not).
    any: AtomicBool,
}

impl<T: Copy> SignalTimes<T> {
    pub(crate) fn new() -> Self {
        SignalTimes {
            times: Mutex::new(HashMap::new()),
            any: AtomicBool::new(false),
        }
    }

    /// Keeps `time` for `signal`.
    pub(crate) fn record(&self, signal: hsa_signal_t, time: T) {
        let mut times = self.times.lock();
        if times.len() >= SIGNAL_TIMES_LIMIT {
            times.clear();
        }
        times.insert(signal.handle, time);
        self.any.store(true, Ordering::Release);
    }

    /// Forgets `signal`'s entry (it is being used for new work).
    pub(crate) fn forget(&self, signal: hsa_signal_t) {
        if signal.handle != 0 && self.any.load(Ordering::Acquire) {
            self.times.lock().remove(&signal.handle);
        }
    }

    /// The timestamps kept for `signal`.
    pub(crate) fn get(&self, signal: hsa_signal_t) -> Option<T> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.times.lock().get(&signal.handle).copied()
    }
}

/// Most bytes of snapshot buffers kept between replays.
const STAGING_CACHE_LIMIT: u64 = 512 << 20;

/// Snapshot buffers retained between replay windows: a fresh runtime allocation costs a mapping
/// and a page fault per page on first touch, which dominated the fixed cost of a replay.
pub(crate) struct StagingCache {
    buffers: Mutex<Vec<(usize, usize)>>,
    limit: u64,
}

impl StagingCache {
    fn new(limit: u64) -> Self {
        StagingCache {
            buffers: Mutex::new(Vec::new()),
            limit,
        }
    }

    /// A buffer of at least `size` bytes: a retained one that is not much larger, else a new
    /// allocation from `pool`, made accessible to every GPU (real ROCr requires that before a
    /// GPU's copy engine may touch host memory). Returns (pointer, capacity).
    pub(crate) fn take(
        &self,
        orig: &Originals,
        pool: hsa_amd_memory_pool_t,
        gpus: &[Gpu],
        size: usize,
    ) -> Option<(std::ptr::NonNull<u8>, usize)> {
        let size = size.max(1);
        {
            let mut buffers = self.buffers.lock();
            let fits = |cap: usize| cap >= size && cap <= size.saturating_mul(2).max(64 << 10);
            let best = buffers
                .iter()
                .enumerate()
                .filter(|(_, (_, cap))| fits(*cap))
                .min_by_key(|(_, (_, cap))| *cap)
                .map(|(i, _)| i);
            if let Some(i) = best {
                let (ptr, cap) = buffers.swap_remove(i);
                return std::ptr::NonNull::new(ptr as *mut u8).map(|p| (p, cap));
            }
        }
        alloc_host(orig, pool, gpus, size).map(|p| (p, size))
    }

    /// Keeps a buffer for later replays, or frees it when the cache is full.
    ///
    /// # Safety
    /// `ptr` was returned by [`take`](Self::take) with this `capacity` and is not used again.
    pub(crate) unsafe fn give(&self, orig: &Originals, ptr: *mut u8, capacity: usize) {
        let mut buffers = self.buffers.lock();
        let held: u64 = buffers.iter().map(|(_, c)| *c as u64).sum();
        if held + capacity as u64 <= self.limit {
            buffers.push((ptr as usize, capacity));
            return;
        }
        drop(buffers);
        // SAFETY: a pool allocation of ours (caller contract).
        unsafe { (orig.pool_free)(ptr.cast()) };
    }

    /// Frees every retained buffer (OnUnload).
    pub(crate) fn clear(&self, orig: &Originals) {
        for (ptr, _) in std::mem::take(&mut *self.buffers.lock()) {
            // SAFETY: pool allocations of ours, no longer referenced.
            unsafe { (orig.pool_free)(ptr as *mut std::ffi::c_void) };
        }
    }
}

/// `size` bytes from the host pool `pool` with the original allocator (our own buffers are not
/// recorded in the inventory), made accessible to every GPU (real ROCr requires that before a
/// GPU's copy engine may touch host memory).
pub(super) fn alloc_host(
    orig: &Originals,
    pool: hsa_amd_memory_pool_t,
    gpus: &[Gpu],
    size: usize,
) -> Option<std::ptr::NonNull<u8>> {
    let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: allocating from a host pool with the original allocator.
    let st = unsafe { (orig.pool_allocate)(pool, size.max(1), 0, &mut p) };
    let ptr = std::ptr::NonNull::new(p.cast::<u8>()).filter(|_| st == HSA_STATUS_SUCCESS)?;
    let agents: Vec<hsa_agent_t> = gpus.iter().map(|g| g.agent).collect();
    // SAFETY: a live allocation of ours and a list of the runtime's GPU agents.
    let st = unsafe {
        (orig.agents_allow_access)(
            agents.len() as u32,
            agents.as_ptr(),
            std::ptr::null(),
            ptr.as_ptr().cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS {
        tracing::warn!(status = %Status(st), "cannot make a snapshot buffer accessible to the GPUs");
        // SAFETY: our allocation, not used.
        unsafe { (orig.pool_free)(ptr.as_ptr().cast()) };
        return None;
    }
    Some(ptr)
}

static BACKEND: OnceLock<Backend> = OnceLock::new();
/// Fast-path switch: a policy is registered and the backend is live.
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);

pub(crate) fn backend() -> Option<&'static Backend> {
    if ACTIVE.load(Ordering::Relaxed) {
        BACKEND.get()
    } else {
        None
    }
}

/// Installs the backend into the live table handed to `OnLoad`.
///
/// # Safety
/// `table` must be the live root table passed to `OnLoad`.
pub(crate) unsafe fn install(
    table: *mut HsaApiTable,
    engine: &'static Engine,
) -> Result<(), Error> {
    // SAFETY: the caller passes the live root table.
    let core = unsafe { slots::root::CORE.read(table) }?;
    // SAFETY: as above.
    let amd = unsafe { slots::root::AMD_EXT.read(table) }?;
    // Refuse unknown layouts before touching anything.
    // SAFETY: `core`/`amd` come from the live root table.
    unsafe {
        slots::core::QUEUE_CREATE.read(core)?;
        slots::amd_ext::MEMORY_POOL_ALLOCATE.read(amd)?;
    }
    // SAFETY: live tables.
    let orig = unsafe { Originals::read(core, amd) }?;
    let (gpus, cpus) = enumerate_agents(&orig)?;
    let staging_pool = cpus
        .iter()
        .find_map(|cpu| host_pool(&orig, *cpu).map(|p| (p, *cpu)));
    let mut ticks_per_second = 0u64;
    // SAFETY: the attribute writes a u64.
    let st = unsafe {
        (orig.system_get_info)(
            HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
            (&mut ticks_per_second as *mut u64).cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS || ticks_per_second == 0 {
        ticks_per_second = 1_000_000_000;
    }
    let mut accessible = false;
    // SAFETY: the attribute writes a bool.
    let st = unsafe {
        (orig.system_get_info)(
            HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT,
            (&mut accessible as *mut bool).cast(),
        )
    };
    let system_memory_reachable = st == HSA_STATUS_SUCCESS && accessible;
    let budget = engine.settings.budget;
    let backend = Backend {
        orig,
        engine,
        gpus,
        ticks_per_second,
        staging_pool,
        staging: StagingCache::new(budget.min(STAGING_CACHE_LIMIT)),
        device_reserve: crate::engine::settings::device_reserve_from_env(),
        kernel_names: RwLock::new(HashMap::new()),
        kernarg_sizes: RwLock::new(HashMap::new()),
        host_memory: RwLock::new(std::collections::BTreeMap::new()),
        locked: Mutex::new(HashMap::new()),
        host_readable: RwLock::new(std::collections::BTreeMap::new()),
        executables: Mutex::new(Vec::new()),
        system_memory_reachable,
        layouts: Mutex::new(kernel_args::Layouts::default()),
        pointer_words: RwLock::new(HashMap::new()),
        variables: RwLock::new(std::collections::BTreeMap::new()),
        queues: RwLock::new(HashMap::new()),
        untracked: Mutex::new(HashMap::new()),
        pool_flags: RwLock::new(HashMap::new()),
        vmem_handles: Mutex::new(HashMap::new()),
        vmem_mappings: Mutex::new(HashMap::new()),
        foreign_memory: RwLock::new(std::collections::BTreeMap::new()),
        svm_memory: RwLock::new(std::collections::BTreeMap::new()),
        next_dispatch: AtomicU64::new(1),
        copies: copies::CopyTracker::default(),
        dispatch_times: SignalTimes::new(),
        stuck: stuck::StuckWork::default(),
        counters: counters::AqlProfile::of_runtime(&orig),
    };
    if BACKEND.set(backend).is_err() {
        return Err(Error::ServiceAlreadyConfigured {
            owner: "this library (OnLoad ran twice)".into(),
        });
    }
    if let Some(be) = BACKEND.get() {
        // What each GPU offers, for the policy to build its metric sets at set-up.
        for gpu in &be.gpus {
            let catalog = be.counters.as_ref().map_err(Clone::clone).and_then(|aql| {
                aql.catalog(gpu.agent, &agent_name(&orig, gpu.agent))
                    .map_err(|e| e.to_string())
            });
            engine.on_agent(gpu.index, catalog.as_ref().map_err(String::as_str));
        }
    }
    INVENTORY.enable();
    // SAFETY: live tables; the originals were saved above. On failure every slot written so
    // far is put back, so the runtime never calls into a library it is about to unload.
    if let Err(e) = unsafe { hooks::install(core, amd) } {
        INVENTORY.disable();
        return Err(e);
    }
    ACTIVE.store(true, Ordering::Release);
    tracing::info!(
        gpus = BACKEND.get().map_or(0, |b| b.gpus.len()),
        "kernel replay installed"
    );
    Ok(())
}

/// Stops replay (OnUnload): hooks pass everything through from now on.
pub(crate) fn shutdown() {
    ACTIVE.store(false, Ordering::Release);
    if let Some(be) = BACKEND.get() {
        // Windows still running finish first (each bounded by its own deadlines).
        let s = be.settings();
        let bound = s.drain + s.pass.saturating_mul(4) + s.late_pass + s.copy.saturating_mul(4);
        if !be.engine.workers.wait_idle(bound) {
            tracing::warn!(
                windows = be.engine.workers.pending(),
                "replay windows still running at shutdown"
            );
        }
        be.copies.shutdown(be);
        be.staging.clear(&be.orig);
        // Stuck copies and compare kernels may still read or write the arenas: an arena they
        // may touch is left allocated (the process is ending; nothing is waited for).
        be.stuck.settle(be);
        for gpu in &be.gpus {
            if be.stuck.touches_memory_of(gpu.index) {
                tracing::warn!(
                    gpu = gpu.index,
                    "stuck replay copies may still use the snapshot arena: it is not freed"
                );
                continue;
            }
            if let Some(mut arena) = gpu.arena.try_lock() {
                arena.release_now(&ArenaMemory { be, gpu });
            }
        }
    }
}

/// In a forked child: replay is off, hooks only forward. Nothing is freed or waited for (other
/// threads of the parent do not exist here and may have held our locks).
pub(crate) fn disable_in_child() {
    ACTIVE.store(false, Ordering::Relaxed);
}

/// The agent's name (`gfx90a`), or `gpu` when the runtime does not say.
pub(super) fn agent_name(orig: &Originals, agent: hsa_agent_t) -> String {
    let mut name = [0u8; 64];
    // SAFETY: HSA_AGENT_INFO_NAME writes at most 64 bytes.
    let st = unsafe { (orig.agent_get_info)(agent, HSA_AGENT_INFO_NAME, name.as_mut_ptr().cast()) };
    let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    match std::str::from_utf8(&name[..len]) {
        Ok(n) if st == HSA_STATUS_SUCCESS && !n.is_empty() => n.to_owned(),
        _ => "gpu".into(),
    }
}

/// The GPUs (with their locks) and the CPU agents.
fn enumerate_agents(orig: &Originals) -> Result<(Vec<Gpu>, Vec<hsa_agent_t>), Error> {
    struct Ctx<'a> {
        orig: &'a Originals,
        gpus: Vec<Gpu>,
        cpus: Vec<hsa_agent_t>,
    }
    unsafe extern "C" fn each(agent: hsa_agent_t, data: *mut std::ffi::c_void) -> hsa_status_t {
        // SAFETY: `data` is the Ctx passed below.
        let ctx = unsafe { &mut *data.cast::<Ctx<'_>>() };
        let mut device: hsa_device_type_t = 0;
        // SAFETY: HSA_AGENT_INFO_DEVICE writes a 4-byte enum.
        let st = unsafe {
            (ctx.orig.agent_get_info)(
                agent,
                HSA_AGENT_INFO_DEVICE,
                (&mut device as *mut u32).cast(),
            )
        };
        if st == HSA_STATUS_SUCCESS && device == HSA_DEVICE_TYPE_GPU {
            let index = ctx.gpus.len() as u32;
            ctx.gpus.push(Gpu {
                agent,
                index,
                lock: AgentLock::new(),
                gates: gates::Gates::default(),
                replay: std::sync::OnceLock::new(),
                aside: gates::AsideLanes::default(),
                yielded: Mutex::new(None),
                copies: copies::CopyFence::default(),
                vendor_packets: std::sync::atomic::AtomicBool::new(false),
                undrainable: crate::engine::agent::Undrainable::new(),
                stuck_drain: crate::engine::agent::StuckDrain::new(),
                device_pool: device_pool(ctx.orig, agent),
                arena: Mutex::new(Arena::default()),
                kernels: compare::DeviceKernels::default(),
                pending: Mutex::new(intercept::PendingWindows::default()),
                spare_signals: Mutex::new(Vec::new()),
            });
        } else if st == HSA_STATUS_SUCCESS && device == HSA_DEVICE_TYPE_CPU {
            ctx.cpus.push(agent);
        }
        HSA_STATUS_SUCCESS
    }
    let mut ctx = Ctx {
        orig,
        gpus: Vec::new(),
        cpus: Vec::new(),
    };
    // SAFETY: the callback only touches `ctx`, which outlives the call.
    let st = unsafe { (orig.iterate_agents)(Some(each), (&mut ctx as *mut Ctx<'_>).cast()) };
    if st != HSA_STATUS_SUCCESS {
        return Err(Error::Runtime {
            call: "hsa_iterate_agents",
            status: Status(st),
        });
    }
    Ok((ctx.gpus, ctx.cpus))
}

/// A global memory pool of an agent that the runtime lets applications allocate from, with its
/// flags (`HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_*`) and size.
#[derive(Clone, Copy)]
struct GlobalPool {
    pool: hsa_amd_memory_pool_t,
    flags: u32,
    size: usize,
}

impl GlobalPool {
    fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

/// The agent's global pools that allow runtime allocation and that `keep` accepts, in the
/// runtime's order; empty when they cannot be listed.
fn runtime_pools(
    orig: &Originals,
    agent: hsa_agent_t,
    keep: &dyn Fn(&GlobalPool) -> bool,
) -> Vec<GlobalPool> {
    struct Ctx<'a> {
        orig: &'a Originals,
        keep: &'a dyn Fn(&GlobalPool) -> bool,
        found: Vec<GlobalPool>,
    }
    unsafe extern "C" fn each(
        pool: hsa_amd_memory_pool_t,
        data: *mut std::ffi::c_void,
    ) -> hsa_status_t {
        // SAFETY: `data` is the Ctx passed below.
        let ctx = unsafe { &mut *data.cast::<Ctx<'_>>() };
        let (mut segment, mut flags, mut allowed, mut size) = (0u32, 0u32, false, 0usize);
        // SAFETY: each attribute writes the documented type (SIZE: a size_t).
        let ok = unsafe {
            (ctx.orig.pool_get_info)(
                pool,
                HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
                (&mut segment as *mut u32).cast(),
            ) == HSA_STATUS_SUCCESS
                && (ctx.orig.pool_get_info)(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                    (&mut flags as *mut u32).cast(),
                ) == HSA_STATUS_SUCCESS
                && (ctx.orig.pool_get_info)(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                    (&mut allowed as *mut bool).cast(),
                ) == HSA_STATUS_SUCCESS
                && (ctx.orig.pool_get_info)(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_SIZE,
                    (&mut size as *mut usize).cast(),
                ) == HSA_STATUS_SUCCESS
        };
        let found = GlobalPool { pool, flags, size };
        // The predicate is ours and does not panic (a flag test); no unwind crosses this
        // callback.
        if ok && allowed && segment == HSA_AMD_SEGMENT_GLOBAL && (ctx.keep)(&found) {
            ctx.found.push(found);
        }
        HSA_STATUS_SUCCESS
    }
    let mut ctx = Ctx {
        orig,
        keep,
        found: Vec::new(),
    };
    // SAFETY: the callback only touches `ctx`, which outlives the call.
    let st =
        unsafe { (orig.agent_iterate_pools)(agent, Some(each), (&mut ctx as *mut Ctx<'_>).cast()) };
    if st != HSA_STATUS_SUCCESS {
        return Vec::new();
    }
    ctx.found
}

/// The agent's global pools that allow runtime allocation, kernarg pools left out, in the
/// runtime's order; empty when they cannot be listed.
fn global_pools(orig: &Originals, agent: hsa_agent_t) -> Vec<GlobalPool> {
    runtime_pools(orig, agent, &|p| {
        !p.has(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT)
    })
}

/// The CPU agent's kernarg pool (`KERNARG_INIT`, runtime allocation allowed), where kernel
/// arguments of our own dispatches live.
pub(super) fn kernarg_pool(orig: &Originals, cpu: hsa_agent_t) -> Option<hsa_amd_memory_pool_t> {
    runtime_pools(orig, cpu, &|p| {
        p.has(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT)
    })
    .first()
    .map(|p| p.pool)
}

/// A CPU pool the runtime allocates from: fine-grained preferred, else coarse-grained.
fn host_pool(orig: &Originals, cpu: hsa_agent_t) -> Option<hsa_amd_memory_pool_t> {
    let pools = global_pools(orig, cpu);
    let first = |flag| pools.iter().find(|p| p.has(flag)).map(|p| p.pool);
    first(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)
        .or_else(|| first(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED))
}

/// The GPU's coarse-grained global pool the runtime allocates from (its VRAM) and its size.
fn device_pool(orig: &Originals, gpu: hsa_agent_t) -> Option<(hsa_amd_memory_pool_t, usize)> {
    global_pools(orig, gpu)
        .into_iter()
        .find(|p| p.size > 0 && p.has(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED))
        .map(|p| (p.pool, p.size))
}

#[cfg(test)]
mod tests {
    use super::device_reserve;

    #[test]
    fn the_device_reserve_is_a_tenth_of_the_pool_unless_configured() {
        assert_eq!(device_reserve(None, 1000 << 20), 100 << 20);
        assert_eq!(device_reserve(Some(7 << 20), 1000 << 20), 7 << 20);
        assert_eq!(device_reserve(Some(0), 1000 << 20), 0);
    }
}
