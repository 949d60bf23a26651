//! The HSA backend: installs hooks into the runtime's live API table in `OnLoad`, tracks
//! allocations and executables, turns application queues into intercept queues, and runs the
//! replay window for intercepted kernel dispatches.

mod copies;
mod hooks;
mod intercept;
mod originals;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rocprof_replay_sys::*;

use crate::dispatch::DispatchInfo;
use crate::engine::inventory::AllocationInventory;
use crate::engine::window::{ReplayTarget, WindowConfig, run_window};
use crate::error::Error;
use crate::policy::{Outcome, ReplayPolicy};

pub(crate) use originals::Originals;

/// A type-erased policy.
pub(crate) trait Replayer: Send + Sync {
    fn replay(
        &self,
        info: &DispatchInfo,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        config: WindowConfig,
    ) -> Outcome;
}

impl<P: ReplayPolicy> Replayer for P {
    fn replay(
        &self,
        info: &DispatchInfo,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        config: WindowConfig,
    ) -> Outcome {
        run_window(self, info, target, inventory, config)
    }
}

/// Deadlines and budget, from the environment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) drain: Duration,
    pub(crate) pass: Duration,
    pub(crate) lock: Duration,
    pub(crate) budget: u64,
}

fn env_ms(name: &str, default_ms: u64) -> Duration {
    Duration::from_millis(
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default_ms),
    )
}

impl Limits {
    fn from_env() -> Limits {
        let budget = std::env::var("ROCPROF_REPLAY_BUDGET_MB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|mb| mb << 20)
            .unwrap_or_else(|| available_host_memory() / 2);
        Limits {
            drain: env_ms("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", 60_000),
            pass: env_ms("ROCPROF_REPLAY_PASS_TIMEOUT_MS", 120_000),
            lock: env_ms("ROCPROF_REPLAY_LOCK_TIMEOUT_MS", 60_000),
            budget,
        }
    }
}

fn available_host_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_AVPHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        pages as u64 * size as u64
    } else {
        1 << 30
    }
}

/// One GPU agent.
pub(crate) struct Gpu {
    pub(crate) agent: hsa_agent_t,
    pub(crate) index: u32,
    /// Writer: a replay window; readers: ordinary submissions and copies.
    pub(crate) lock: RwLock<()>,
    /// Asynchronous copies in flight that touch this GPU's memory.
    pub(crate) copies: copies::CopyFence,
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
                self.packets -= u64::from(done);
            }
        }
    }

    /// Records a submission of `packets` packets.
    pub(crate) fn push(&mut self, packets: u32) {
        self.submissions.push_back(packets);
        self.packets += u64::from(packets);
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
            let ticks = (slice.as_nanos() * be.ticks_per_second as u128 / 1_000_000_000) as u64;
            // SAFETY: our own live signal; a bounded wait for it to drop below `pending`.
            unsafe {
                (be.orig.signal_wait)(
                    self.inflight,
                    HSA_SIGNAL_CONDITION_LT,
                    pending,
                    ticks.max(1),
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
    pub(crate) replayer: Box<dyn Replayer>,
    pub(crate) limits: Limits,
    pub(crate) gpus: Vec<Gpu>,
    pub(crate) ticks_per_second: u64,
    /// Host pool for snapshot buffers (pinned host memory), if the runtime has one.
    pub(crate) staging_pool: Option<hsa_amd_memory_pool_t>,
    /// Snapshot buffers kept between replays.
    pub(crate) staging: StagingCache,
    pub(crate) kernel_names: RwLock<HashMap<u64, Arc<str>>>,
    pub(crate) executables: Mutex<Vec<hsa_executable_t>>,
    pub(crate) queues: RwLock<HashMap<usize, Arc<QueueState>>>,
    pub(crate) pool_flags: RwLock<HashMap<u64, u32>>,
    /// vmem handle -> whether its pool is snapshotted.
    pub(crate) vmem_handles: Mutex<HashMap<u64, bool>>,
    pub(crate) next_dispatch: AtomicU64,
    /// Fenced asynchronous copies (proxy signals, timestamps).
    pub(crate) copies: copies::CopyTracker,
}

impl Backend {
    pub(crate) fn gpu(&self, agent: hsa_agent_t) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.agent == agent)
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
    /// allocation from `pool`. Returns (pointer, capacity).
    pub(crate) fn take(
        &self,
        orig: &Originals,
        pool: hsa_amd_memory_pool_t,
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
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: allocating from a host pool with the original allocator (our own buffers are
        // not recorded in the inventory).
        let st = unsafe { (orig.pool_allocate)(pool, size, 0, &mut p) };
        std::ptr::NonNull::new(p.cast::<u8>())
            .filter(|_| st == HSA_STATUS_SUCCESS)
            .map(|p| (p, size))
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

static BACKEND: OnceLock<Backend> = OnceLock::new();
/// Fast-path switch: a policy is registered and the backend is live.
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The process-wide allocation inventory.
pub(crate) static INVENTORY: AllocationInventory = AllocationInventory::new();

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
    replayer: Box<dyn Replayer>,
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
    let staging_pool = cpus.iter().find_map(|cpu| host_pool(&orig, *cpu));
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
    let limits = Limits::from_env();
    let backend = Backend {
        orig,
        replayer,
        limits,
        gpus,
        ticks_per_second,
        staging_pool,
        staging: StagingCache::new(limits.budget.min(STAGING_CACHE_LIMIT)),
        kernel_names: RwLock::new(HashMap::new()),
        executables: Mutex::new(Vec::new()),
        queues: RwLock::new(HashMap::new()),
        pool_flags: RwLock::new(HashMap::new()),
        vmem_handles: Mutex::new(HashMap::new()),
        next_dispatch: AtomicU64::new(1),
        copies: copies::CopyTracker::default(),
    };
    if BACKEND.set(backend).is_err() {
        return Err(Error::ServiceAlreadyConfigured {
            owner: "this library (OnLoad ran twice)".into(),
        });
    }
    INVENTORY.enable();
    // SAFETY: live tables; the originals were saved above.
    unsafe { hooks::install(core, amd) }?;
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
        be.staging.clear(&be.orig);
        be.copies.clear(be);
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
                lock: RwLock::new(()),
                copies: copies::CopyFence::default(),
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

/// A CPU pool the runtime allocates from: fine-grained (not kernarg) preferred, else
/// coarse-grained.
fn host_pool(orig: &Originals, cpu: hsa_agent_t) -> Option<hsa_amd_memory_pool_t> {
    struct Ctx<'a> {
        orig: &'a Originals,
        fine: Option<hsa_amd_memory_pool_t>,
        coarse: Option<hsa_amd_memory_pool_t>,
    }
    unsafe extern "C" fn each(
        pool: hsa_amd_memory_pool_t,
        data: *mut std::ffi::c_void,
    ) -> hsa_status_t {
        // SAFETY: `data` is the Ctx passed below.
        let ctx = unsafe { &mut *data.cast::<Ctx<'_>>() };
        let (mut segment, mut flags, mut allowed) = (0u32, 0u32, false);
        // SAFETY: each attribute writes the documented type.
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
        };
        if ok
            && allowed
            && segment == HSA_AMD_SEGMENT_GLOBAL
            && flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT == 0
        {
            if flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED != 0 {
                ctx.fine.get_or_insert(pool);
            } else if flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED != 0 {
                ctx.coarse.get_or_insert(pool);
            }
        }
        HSA_STATUS_SUCCESS
    }
    let mut ctx = Ctx {
        orig,
        fine: None,
        coarse: None,
    };
    // SAFETY: the callback only touches `ctx`.
    let st =
        unsafe { (orig.agent_iterate_pools)(cpu, Some(each), (&mut ctx as *mut Ctx<'_>).cast()) };
    if st != HSA_STATUS_SUCCESS {
        return None;
    }
    ctx.fine.or(ctx.coarse)
}
