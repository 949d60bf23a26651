//! Hooks installed into the live table: queue creation (intercept queues), allocation tracking,
//! executable tracking (kernel names, module variables).
//!
//! Every hook calls the saved original first or last as the operation requires and never lets
//! a panic out; after `OnUnload` (or before install completes) it only forwards.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use rocprof_replay_sys::*;

use super::copies::{self, Fence};
use super::{BACKEND, INVENTORY, QueueState, backend, intercept, kernel_args};
use crate::dispatch::AgentId;
use crate::engine::inventory::Origin;
use crate::error::Error;

/// Runs bookkeeping that must never unwind into the runtime.
fn quietly(what: &str, f: impl FnOnce()) {
    let _ = guarded(what, f);
}

/// Runs a hook's own work: a panic (a bug of ours) is logged and becomes `None`, so the hook
/// can go on as if the tool were not there — it never unwinds into the runtime.
pub(crate) fn guarded<R>(what: &str, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(_) => {
            tracing::error!("internal error (panic) while {what}; continuing without it");
            None
        }
    }
}

/// Table writes made so far, undone if installing does not complete: a tool that fails to
/// load is unloaded by the runtime, so no slot may keep pointing into it.
struct Patcher {
    undo: Vec<Box<dyn FnOnce()>>,
}

impl Patcher {
    /// Writes `f` into `slot` and remembers the old value.
    ///
    /// # Safety
    /// `table` is the live table of the slot's kind.
    unsafe fn set<F: Copy + 'static>(
        &mut self,
        slot: Slot<F>,
        table: *mut ApiTableVersion,
        f: F,
    ) -> Result<(), Error> {
        // SAFETY: caller contract.
        let old = unsafe { slot.write(table, Some(f)) }?;
        self.undo.push(Box::new(move || {
            // SAFETY: the same live table; puts back the value read above.
            let _ = unsafe { slot.write(table, old) };
        }));
        Ok(())
    }

    fn rollback(self) {
        for undo in self.undo.into_iter().rev() {
            undo();
        }
    }
}

/// Writes our hooks into the live tables; on any failure every slot written is put back.
///
/// # Safety
/// `core` and `amd` are the live tables; originals were saved first.
pub(crate) unsafe fn install(
    core: *mut ApiTableVersion,
    amd: *mut ApiTableVersion,
) -> Result<(), Error> {
    let mut p = Patcher { undo: Vec::new() };
    // SAFETY: caller contract.
    let result = unsafe { install_all(&mut p, core, amd) };
    if result.is_err() {
        p.rollback();
    }
    result
}

/// Every hook, in one sequence that stops at the first failure.
///
/// # Safety
/// As [`install`].
unsafe fn install_all(
    p: &mut Patcher,
    core: *mut ApiTableVersion,
    amd: *mut ApiTableVersion,
) -> Result<(), Error> {
    use slots::amd_ext as a;
    use slots::core as c;
    // SAFETY: live tables (caller contract); each slot is checked against the layout.
    unsafe {
        p.set(c::QUEUE_CREATE, core, queue_create)?;
        p.set(c::QUEUE_DESTROY, core, queue_destroy)?;
        p.set(c::MEMORY_ALLOCATE, core, memory_allocate)?;
        p.set(c::MEMORY_FREE, core, memory_free)?;
        p.set(c::MEMORY_COPY, core, memory_copy)?;
        p.set(a::MEMORY_FILL, amd, memory_fill)?;
        p.set(a::MEMORY_ASYNC_COPY, amd, async_copy)?;
        p.set(a::PROFILING_GET_ASYNC_COPY_TIME, amd, async_copy_time)?;
        p.set(a::PROFILING_ASYNC_COPY_ENABLE, amd, async_copy_profiling)?;
        p.set(a::PROFILING_GET_DISPATCH_TIME, amd, dispatch_time)?;
        if a::MEMORY_ASYNC_COPY_RECT.read(amd)?.is_some() {
            p.set(a::MEMORY_ASYNC_COPY_RECT, amd, async_copy_rect)?;
        }
        if let Ok(Some(_)) = a::MEMORY_ASYNC_COPY_ON_ENGINE.read(amd) {
            p.set(a::MEMORY_ASYNC_COPY_ON_ENGINE, amd, async_copy_on_engine)?;
        }
        p.set(c::EXECUTABLE_FREEZE, core, executable_freeze)?;
        // Code objects' argument layouts: only needed where kernels reach all system memory.
        if BACKEND.get().is_some_and(|be| be.system_memory_reachable) {
            if c::CODE_OBJECT_READER_CREATE_FROM_MEMORY
                .read(core)?
                .is_some()
            {
                p.set(
                    c::CODE_OBJECT_READER_CREATE_FROM_MEMORY,
                    core,
                    reader_create_from_memory,
                )?;
            }
            if c::CODE_OBJECT_READER_CREATE_FROM_FILE.read(core)?.is_some() {
                p.set(
                    c::CODE_OBJECT_READER_CREATE_FROM_FILE,
                    core,
                    reader_create_from_file,
                )?;
            }
            if c::CODE_OBJECT_READER_DESTROY.read(core)?.is_some() {
                p.set(c::CODE_OBJECT_READER_DESTROY, core, reader_destroy)?;
            }
            if c::EXECUTABLE_LOAD_AGENT_CODE_OBJECT.read(core)?.is_some() {
                p.set(
                    c::EXECUTABLE_LOAD_AGENT_CODE_OBJECT,
                    core,
                    load_agent_code_object,
                )?;
            }
            if c::EXECUTABLE_LOAD_PROGRAM_CODE_OBJECT.read(core)?.is_some() {
                p.set(
                    c::EXECUTABLE_LOAD_PROGRAM_CODE_OBJECT,
                    core,
                    load_program_code_object,
                )?;
            }
        }
        p.set(c::EXECUTABLE_DESTROY, core, executable_destroy)?;
        if let Ok(Some(_)) = a::MEMORY_LOCK.read(amd) {
            p.set(a::MEMORY_LOCK, amd, memory_lock)?;
        }
        if let Ok(Some(_)) = a::MEMORY_LOCK_TO_POOL.read(amd) {
            p.set(a::MEMORY_LOCK_TO_POOL, amd, memory_lock_to_pool)?;
        }
        if let Ok(Some(_)) = a::MEMORY_UNLOCK.read(amd) {
            p.set(a::MEMORY_UNLOCK, amd, memory_unlock)?;
        }
        p.set(a::MEMORY_POOL_ALLOCATE, amd, pool_allocate)?;
        p.set(a::MEMORY_POOL_FREE, amd, pool_free)?;
        if a::VMEM_MAP.read(amd).is_ok() {
            p.set(a::VMEM_HANDLE_CREATE, amd, vmem_handle_create)?;
            p.set(a::VMEM_HANDLE_RELEASE, amd, vmem_handle_release)?;
            p.set(a::VMEM_MAP, amd, vmem_map)?;
            p.set(a::VMEM_UNMAP, amd, vmem_unmap)?;
        }
        if let Ok(Some(_)) = a::VMEM_IMPORT_SHAREABLE_HANDLE.read(amd) {
            p.set(a::VMEM_IMPORT_SHAREABLE_HANDLE, amd, vmem_import)?;
        }
        if let Ok(Some(_)) = a::VMEM_RETAIN_ALLOC_HANDLE.read(amd) {
            p.set(a::VMEM_RETAIN_ALLOC_HANDLE, amd, vmem_retain)?;
        }
        if let Ok(Some(_)) = a::VMEM_EXPORT_SHAREABLE_HANDLE.read(amd) {
            p.set(a::VMEM_EXPORT_SHAREABLE_HANDLE, amd, vmem_export)?;
        }
        if let Ok(Some(_)) = a::IPC_MEMORY_CREATE.read(amd) {
            p.set(a::IPC_MEMORY_CREATE, amd, ipc_create)?;
        }
        if let Ok(Some(_)) = a::PORTABLE_EXPORT_DMABUF.read(amd) {
            p.set(a::PORTABLE_EXPORT_DMABUF, amd, export_dmabuf)?;
        }
        if let Ok(Some(_)) = a::PORTABLE_EXPORT_DMABUF_V2.read(amd) {
            p.set(a::PORTABLE_EXPORT_DMABUF_V2, amd, export_dmabuf_v2)?;
        }
        if let Ok(Some(_)) = a::IPC_MEMORY_ATTACH.read(amd) {
            p.set(a::IPC_MEMORY_ATTACH, amd, ipc_attach)?;
        }
        if let Ok(Some(_)) = a::IPC_MEMORY_DETACH.read(amd) {
            p.set(a::IPC_MEMORY_DETACH, amd, ipc_detach)?;
        }
        if let Ok(Some(_)) = a::INTEROP_MAP_BUFFER.read(amd) {
            p.set(a::INTEROP_MAP_BUFFER, amd, interop_map)?;
        }
        if let Ok(Some(_)) = a::INTEROP_UNMAP_BUFFER.read(amd) {
            p.set(a::INTEROP_UNMAP_BUFFER, amd, interop_unmap)?;
        }
        if let Ok(Some(_)) = a::SVM_ATTRIBUTES_SET.read(amd) {
            p.set(a::SVM_ATTRIBUTES_SET, amd, svm_attributes_set)?;
        }
    }
    Ok(())
}

// ---- queues --------------------------------------------------------------------------------

unsafe extern "C" fn queue_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: hsa_queue_error_callback_t,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let o = &be.orig;
    if backend().is_none() || be.gpu(agent).is_none() {
        // SAFETY: forwarding the caller's arguments unchanged.
        return unsafe {
            (o.queue_create)(
                agent,
                size,
                type_,
                callback,
                data,
                private_segment_size,
                group_segment_size,
                queue,
            )
        };
    }
    // SAFETY: same contract as hsa_queue_create.
    let st = unsafe {
        (o.intercept_create)(
            agent,
            size,
            type_,
            callback,
            data,
            private_segment_size,
            group_segment_size,
            queue,
        )
    };
    if st != HSA_STATUS_SUCCESS || queue.is_null() {
        tracing::warn!(status = %Status(st), "cannot create an intercept queue: this queue is not replayed, and while it lives no dispatch of its GPU is");
        // SAFETY: forwarding unchanged.
        let st = unsafe {
            (o.queue_create)(
                agent,
                size,
                type_,
                callback,
                data,
                private_segment_size,
                group_segment_size,
                queue,
            )
        };
        if st == HSA_STATUS_SUCCESS && !queue.is_null() {
            // SAFETY: the runtime wrote a valid queue pointer.
            let q = unsafe { *queue };
            quietly("noting a queue that cannot be intercepted", || {
                untracked(be, q, agent)
            });
        }
        return st;
    }
    // SAFETY: the runtime wrote a valid queue pointer.
    let q = unsafe { *queue };
    // The queue exists now: whatever happens below, the application gets it.
    if guarded("setting up an intercept queue", || attach(be, q, agent)) != Some(true) {
        quietly("noting a queue that cannot be intercepted", || {
            untracked(be, q, agent)
        });
    }
    HSA_STATUS_SUCCESS
}

/// Notes a queue of a GPU whose work the backend does not see: windows cannot drain it or hold
/// it back, so while it lives the GPU's dispatches are declined (`queue_not_drainable`).
fn untracked(be: &super::Backend, q: *mut hsa_queue_t, agent: hsa_agent_t) {
    if let Some(gpu) = be.gpu(agent) {
        be.untracked.lock().insert(q as usize, gpu.index);
        gpu.undrainable.add();
    }
}

/// Registers our interceptor on a new intercept queue, with its progress signal; `false` when
/// the handler could not be registered (the queue's work is then not seen).
fn attach(be: &super::Backend, q: *mut hsa_queue_t, agent: hsa_agent_t) -> bool {
    let o = &be.orig;
    let mut inflight = hsa_signal_t::default();
    // SAFETY: creating a plain signal with no consumer list.
    if unsafe { (o.signal_create)(0, 0, std::ptr::null(), &mut inflight) } != HSA_STATUS_SUCCESS {
        tracing::warn!("cannot create a progress signal: replay windows cannot drain this queue");
        inflight = hsa_signal_t::default();
    }
    let state = Arc::new(QueueState {
        queue: q,
        agent,
        inflight,
        backlog: parking_lot::Mutex::new(super::Backlog::default()),
        submitted: std::sync::atomic::AtomicU64::new(0),
        gated_epoch: std::sync::atomic::AtomicU64::new(0),
        pending_gates: parking_lot::Mutex::new(Vec::new()),
        life: parking_lot::Mutex::new(super::QueueLife::default()),
    });
    // The handler's reference; released in queue_destroy once the runtime stops calling it.
    let data_ptr = Arc::into_raw(state.clone()) as *mut c_void;
    // SAFETY: registering our handler on the queue just created; `data_ptr` stays valid until
    // queue_destroy.
    let st = unsafe { (o.intercept_register)(q, Some(intercept::handler), data_ptr) };
    if st != HSA_STATUS_SUCCESS {
        tracing::warn!(status = %Status(st), "cannot register the queue interceptor: this queue is not replayed");
        // SAFETY: the reference made above, never handed out.
        drop(unsafe { Arc::from_raw(data_ptr.cast::<QueueState>()) });
        return false;
    }
    // SAFETY: a live queue.
    let st = unsafe { (o.profiler_enable)(q, 1) };
    if st != HSA_STATUS_SUCCESS {
        tracing::warn!(status = %Status(st), "cannot enable dispatch profiling: pass times are unavailable");
    }
    be.queues.write().insert(q as usize, state);
    true
}

unsafe extern "C" fn queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let key = queue as usize;
    // Looked up before the destroy, while the address is still this queue's (after it, a
    // queue created on another thread may get the same address).
    let mut listed = None;
    let mut untracked = None;
    quietly("looking up a queue", || {
        listed = be.queues.read().get(&key).cloned();
        untracked = be.untracked.lock().remove(&key);
    });
    // SAFETY: forwarding unchanged. The queue stays listed until the runtime destroyed it:
    // until then its work may run, so windows must still drain it and gate it.
    let st = unsafe { (be.orig.queue_destroy)(queue) };
    if st != HSA_STATUS_SUCCESS {
        if let Some(index) = untracked {
            quietly("keeping a queue that could not be intercepted", || {
                be.untracked.lock().insert(key, index);
            });
        }
        return st;
    }
    if let Some(gpu) = untracked.and_then(|index| be.gpus.get(index as usize)) {
        gpu.undrainable.remove();
    }
    if let Some(state) = listed {
        quietly("forgetting a queue", || {
            // Before it is unlisted: a window that listed it stops waiting for it.
            state.retire_destroyed(be);
            let mut queues = be.queues.write();
            if queues.get(&key).is_some_and(|q| Arc::ptr_eq(q, &state)) {
                queues.remove(&key);
            }
        });
        // The runtime no longer calls the handler: release its reference.
        // SAFETY: the pointer registered with the handler in queue_create (one reference).
        drop(unsafe { Arc::from_raw(Arc::as_ptr(&state)) });
    }
    st
}

// ---- allocations ---------------------------------------------------------------------------

/// Global flags of a pool (cached).
fn pool_flags(pool: hsa_amd_memory_pool_t) -> Option<u32> {
    let be = BACKEND.get()?;
    if let Some(f) = be.pool_flags.read().get(&pool.handle) {
        return Some(*f);
    }
    let mut flags = 0u32;
    // SAFETY: GLOBAL_FLAGS writes a u32.
    let st = unsafe {
        (be.orig.pool_get_info)(
            pool,
            HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
            (&mut flags as *mut u32).cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS {
        return None;
    }
    be.pool_flags.write().insert(pool.handle, flags);
    Some(flags)
}

/// The owning GPU of an allocation, if the runtime knows the pointer and a GPU owns it.
fn owner_gpu(ptr: *mut c_void) -> Option<(AgentId, u32)> {
    let be = BACKEND.get()?;
    let info = be.pointer_info(ptr as usize)?;
    if info.type_ != HSA_EXT_POINTER_TYPE_HSA {
        return None;
    }
    be.gpu(info.agentOwner)
        .map(|g| (AgentId(g.agent.handle), info.global_flags))
}

/// Whether memory with these pool flags is snapshotted: coarse-grained, not kernarg.
fn trackable(global_flags: u32) -> bool {
    global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED != 0
        && global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT == 0
        && global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED == 0
}

/// Whether memory with these pool flags is host-visible application memory a kernel may be
/// handed (fine-grained, not kernarg).
fn host_visible(global_flags: u32) -> bool {
    global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED != 0
        && global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT == 0
}

/// Records a host-visible allocation (see [`super::Backend::host_memory`]).
fn record_host(be: &super::Backend, p: *mut c_void, size: usize) {
    quietly("recording host memory", || {
        be.host_memory.write().insert(p as usize, size);
        if owner_gpu(p).is_none() {
            // System memory (a CPU agent's pool): the host reads it at this address.
            be.host_readable
                .write()
                .insert(p as usize, (size, p as usize));
        }
    });
}

/// Records host memory the application locked: the host range and the agents' alias of it.
fn record_locked(be: &super::Backend, host: *mut c_void, size: usize, agent: *mut c_void) {
    if !INVENTORY.is_tracking() || backend().is_none() || size == 0 {
        return;
    }
    quietly("recording locked host memory", || {
        let agent = if agent.is_null() { host } else { agent };
        let mut map = be.host_memory.write();
        map.insert(host as usize, size);
        map.insert(agent as usize, size);
        drop(map);
        let mut readable = be.host_readable.write();
        readable.insert(host as usize, (size, host as usize));
        readable.insert(agent as usize, (size, host as usize));
        drop(readable);
        be.locked
            .lock()
            .insert(host as usize, (agent as usize, size));
    });
}

unsafe extern "C" fn memory_lock(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: std::ffi::c_int,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    let Some((be, lock)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.memory_lock?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { lock(host_ptr, size, agents, num_agent, agent_ptr) };
    if st == HSA_STATUS_SUCCESS && !agent_ptr.is_null() {
        // SAFETY: on success the runtime wrote the agents' pointer.
        record_locked(be, host_ptr, size, unsafe { *agent_ptr });
    }
    st
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn memory_lock_to_pool(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: std::ffi::c_int,
    pool: hsa_amd_memory_pool_t,
    flags: u32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    let Some((be, lock)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.memory_lock_to_pool?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { lock(host_ptr, size, agents, num_agent, pool, flags, agent_ptr) };
    if st == HSA_STATUS_SUCCESS && !agent_ptr.is_null() {
        // SAFETY: on success the runtime wrote the agents' pointer.
        record_locked(be, host_ptr, size, unsafe { *agent_ptr });
    }
    st
}

unsafe extern "C" fn memory_unlock(host_ptr: *mut c_void) -> hsa_status_t {
    let Some((be, unlock)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.memory_unlock?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    quietly("forgetting locked host memory", || {
        if let Some((agent, _)) = be.locked.lock().remove(&(host_ptr as usize)) {
            let mut map = be.host_memory.write();
            map.remove(&(host_ptr as usize));
            map.remove(&agent);
            drop(map);
            let mut readable = be.host_readable.write();
            readable.remove(&(host_ptr as usize));
            readable.remove(&agent);
        }
    });
    // SAFETY: forwarding unchanged.
    unsafe { unlock(host_ptr) }
}

/// Records a new allocation of a pool or region with these global flags by what it is: a
/// GPU's coarse-grained memory goes into the inventory (snapshotted; coarse-grained, not
/// kernarg, not fine-grained, as the runtime's pointer info reports); host-visible memory into
/// the host ranges ([`record_host`]: watched, never restored) — fine-grained memory of any
/// agent, and system memory (a CPU agent's pool) of any granularity, which is host memory the
/// host reads and writes at the same address: HIP 5.2 allocates `hipMallocManaged` memory
/// and `__managed__` variables from the coarse-grained system pool. Kernarg memory is
/// neither.
fn record(be: &super::Backend, p: *mut c_void, size: usize, flags: u32, origin: Origin) {
    quietly("trimming shared virtual memory", || {
        trim_svm(be, p as usize, size)
    });
    if host_visible(flags) {
        record_host(be, p, size);
        return;
    }
    if !trackable(flags) {
        return;
    }
    let gpu = guarded("recording an allocation", || {
        let owner = owner_gpu(p);
        if let Some((agent, flags)) = owner
            && trackable(flags)
        {
            INVENTORY.record(p as usize, size, agent, origin);
        }
        owner.is_some()
    });
    if gpu == Some(false) {
        record_host(be, p, size);
    }
}

/// Forgets an allocation before its memory goes. Removed under the inventory's write lock: a
/// restore holding the read lock finishes first and never writes this region afterwards.
fn forget(p: *mut c_void) {
    if INVENTORY.is_tracking() {
        quietly("forgetting an allocation", || {
            INVENTORY.remove(p as usize);
        });
    }
}

/// `HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG`: HIP puts kernarg pools there; never snapshotted.
const POOL_ALLOC_EXECUTABLE: u32 = 1 << 2;

unsafe extern "C" fn pool_allocate(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let mut st = unsafe { (be.orig.pool_allocate)(pool, size, flags, ptr) };
    if st == HSA_STATUS_ERROR_OUT_OF_RESOURCES && arena_released_for(be, pool) {
        // Once, transparently: the memory the arena held is free now.
        // SAFETY: as above.
        st = unsafe { (be.orig.pool_allocate)(pool, size, flags, ptr) };
    }
    if st == HSA_STATUS_SUCCESS
        && INVENTORY.is_tracking()
        && backend().is_some()
        && flags & POOL_ALLOC_EXECUTABLE == 0
    {
        // SAFETY: on success the runtime wrote the pointer.
        let p = unsafe { *ptr };
        if let Some(f) = pool_flags(pool) {
            record(be, p, size, f, Origin::Pool);
        }
    }
    st
}

/// After an allocation from `pool` failed for lack of memory: whether the snapshot arena of
/// the GPU owning `pool` gave VRAM back (never on a thread running a replay window: its GPU
/// lock is held).
fn arena_released_for(be: &super::Backend, pool: hsa_amd_memory_pool_t) -> bool {
    if backend().is_none() || super::intercept::in_window() {
        return false;
    }
    guarded("releasing the snapshot arena", || {
        be.gpus
            .iter()
            .find(|g| g.device_pool.is_some_and(|(p, _)| p == pool))
            .is_some_and(|g| g.release_arena_for_application(be) > 0)
    })
    .unwrap_or(false)
}

unsafe extern "C" fn pool_free(ptr: *mut c_void) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    if before_free(be, ptr, be.orig.pool_free) {
        return HSA_STATUS_SUCCESS;
    }
    // SAFETY: forwarding unchanged.
    unsafe { (be.orig.pool_free)(ptr) }
}

/// Bookkeeping before memory is released: forgets a tracked allocation (waiting for snapshot
/// copies and stuck work that use it). Returns `true` when the free is deferred instead (the
/// kernarg of a stuck pass; see `stuck`).
fn before_free(be: &super::Backend, ptr: *mut c_void, free: super::stuck::Free) -> bool {
    guarded("releasing memory", || {
        be.host_memory.write().remove(&(ptr as usize));
        be.host_readable.write().remove(&(ptr as usize));
        be.foreign_memory.write().remove(&(ptr as usize));
        if !be.stuck.any() {
            forget(ptr);
            return false;
        }
        let addr = ptr as usize;
        let deferred = move || {
            // SAFETY: the application's free of a stuck pass's kernarg, done once that pass
            // ended.
            unsafe { free(addr as *mut c_void) };
        };
        if be.stuck.defer_free(be, addr, deferred) {
            return true;
        }
        if let Some(owner) = INVENTORY.agent_of(addr) {
            let gpu = be.gpus.iter().find(|g| g.agent.handle == owner.0);
            super::stuck::wait_for_stuck(be, gpu.map(|g| g.index));
        }
        forget(ptr);
        false
    })
    .unwrap_or(false)
}

unsafe extern "C" fn memory_allocate(
    region: hsa_region_t,
    size: usize,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let mut st = unsafe { (be.orig.memory_allocate)(region, size, ptr) };
    // A region is the same runtime object as the pool of the same handle (ROCr and hsa-emu).
    let as_pool = hsa_amd_memory_pool_t {
        handle: region.handle,
    };
    if st == HSA_STATUS_ERROR_OUT_OF_RESOURCES && arena_released_for(be, as_pool) {
        // SAFETY: as above.
        st = unsafe { (be.orig.memory_allocate)(region, size, ptr) };
    }
    if st == HSA_STATUS_SUCCESS && INVENTORY.is_tracking() && backend().is_some() {
        // SAFETY: on success the runtime wrote the pointer.
        let p = unsafe { *ptr };
        if let Some(f) = pool_flags(as_pool) {
            record(be, p, size, f, Origin::Region);
        }
    }
    st
}

unsafe extern "C" fn memory_free(ptr: *mut c_void) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    if before_free(be, ptr, be.orig.memory_free) {
        return HSA_STATUS_SUCCESS;
    }
    // SAFETY: forwarding unchanged.
    unsafe { (be.orig.memory_free)(ptr) }
}

// ---- copies: fenced against replay windows (see `copies`) -----------------------------------

unsafe extern "C" fn memory_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let _fence = backend().and_then(|be| {
        guarded("fencing a copy", || {
            Fence::take(
                be,
                &[(dst as usize, None), (src as usize, None)],
                Some((dst as usize, size)),
            )
        })
    });
    // SAFETY: forwarding unchanged.
    unsafe { (be.orig.memory_copy)(dst, src, size) }
}

unsafe extern "C" fn memory_fill(ptr: *mut c_void, value: u32, count: usize) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let _fence = backend().and_then(|be| {
        guarded("fencing a fill", || {
            Fence::take(
                be,
                &[(ptr as usize, None)],
                Some((ptr as usize, count.saturating_mul(4))),
            )
        })
    });
    // SAFETY: forwarding unchanged.
    unsafe { (be.orig.memory_fill)(ptr, value, count) }
}

/// The dependency signals of a copy call.
///
/// # Safety
/// `deps` points to `count` signals, or `count` is 0.
unsafe fn dependencies<'a>(deps: *const hsa_signal_t, count: u32) -> &'a [hsa_signal_t] {
    if deps.is_null() || count == 0 {
        return &[];
    }
    // SAFETY: caller contract (the runtime's own argument contract).
    unsafe { std::slice::from_raw_parts(deps, count as usize) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn async_copy(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged, except (when fenced) the completion signal.
    let submit = |completion| unsafe {
        (be.orig.async_copy)(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion,
        )
    };
    let Some(live) = backend() else {
        return submit(completion_signal);
    };
    let touched = [
        (dst as usize, Some(dst_agent)),
        (src as usize, Some(src_agent)),
    ];
    // SAFETY: the runtime's argument contract.
    let deps = unsafe { dependencies(dep_signals, num_dep_signals) };
    let written = Some((dst as usize, size));
    copies::submit_async(live, &touched, written, completion_signal, deps, submit)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn async_copy_on_engine(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
    engine_id: hsa_amd_sdma_engine_id_t,
    force_copy_on_sdma: bool,
) -> hsa_status_t {
    let Some(original) = BACKEND.get().and_then(|be| be.orig.async_copy_on_engine) else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged, except (when fenced) the completion signal.
    let submit = |completion| unsafe {
        original(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion,
            engine_id,
            force_copy_on_sdma,
        )
    };
    let Some(live) = backend() else {
        return submit(completion_signal);
    };
    let touched = [
        (dst as usize, Some(dst_agent)),
        (src as usize, Some(src_agent)),
    ];
    // SAFETY: the runtime's argument contract.
    let deps = unsafe { dependencies(dep_signals, num_dep_signals) };
    let written = Some((dst as usize, size));
    copies::submit_async(live, &touched, written, completion_signal, deps, submit)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn async_copy_rect(
    dst: *const hsa_pitched_ptr_t,
    dst_offset: *const hsa_dim3_t,
    src: *const hsa_pitched_ptr_t,
    src_offset: *const hsa_dim3_t,
    range: *const hsa_dim3_t,
    copy_agent: hsa_agent_t,
    dir: hsa_amd_copy_direction_t,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    let Some(original) = BACKEND.get().and_then(|be| be.orig.async_copy_rect) else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged, except (when fenced) the completion signal.
    let submit = |completion| unsafe {
        original(
            dst,
            dst_offset,
            src,
            src_offset,
            range,
            copy_agent,
            dir,
            num_dep_signals,
            dep_signals,
            completion,
        )
    };
    let Some(live) = backend() else {
        return submit(completion_signal);
    };
    // SAFETY: null or the runtime's pitched-pointer arguments.
    let base = |p: *const hsa_pitched_ptr_t| unsafe { p.as_ref() }.map_or(0, |p| p.base as usize);
    let touched = [(base(dst), Some(copy_agent)), (base(src), Some(copy_agent))];
    // SAFETY: the runtime's argument contract.
    let deps = unsafe { dependencies(dep_signals, num_dep_signals) };
    // A rectangle's bytes are not one range: every carried fingerprint of the GPU goes.
    copies::submit_async(live, &touched, None, completion_signal, deps, submit)
}

unsafe extern "C" fn async_copy_profiling(enable: bool) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { (be.orig.async_copy_profiling)(enable) };
    if st == HSA_STATUS_SUCCESS {
        copies::set_profiling(be, enable);
    }
    st
}

unsafe extern "C" fn async_copy_time(
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_async_copy_time_t,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    if !time.is_null() {
        if let Some(t) = copies::copy_time(be, signal) {
            // SAFETY: the caller's output argument, checked non-null.
            unsafe { time.write(t) };
            return HSA_STATUS_SUCCESS;
        }
    }
    // SAFETY: forwarding unchanged.
    unsafe { (be.orig.async_copy_time)(signal, time) }
}

unsafe extern "C" fn dispatch_time(
    agent: hsa_agent_t,
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_dispatch_time_t,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    if !time.is_null() {
        if let Some(t) = be.dispatch_times.get(signal) {
            // SAFETY: the caller's output argument, checked non-null.
            unsafe { time.write(t) };
            return HSA_STATUS_SUCCESS;
        }
    }
    // SAFETY: forwarding unchanged.
    unsafe { (be.orig.dispatch_time)(agent, signal, time) }
}

// ---- vmem (6.x) ----------------------------------------------------------------------------

/// What the mappings of a vmem handle are, known when the handle is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VmemKind {
    /// Made from a pool with these global flags (`hsa_amd_vmem_handle_create`): a GPU's
    /// coarse-grained memory is snapshotted, host-visible memory is not.
    Pool(u32),
    /// Imported from a shareable handle (`hsa_amd_vmem_import_shareable_handle`) or exported as
    /// one (`hsa_amd_vmem_export_shareable_handle`): another process or GPU may write it.
    Shared,
}

unsafe extern "C" fn vmem_handle_create(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    type_: hsa_amd_memory_type_t,
    flags: u64,
    handle: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(f) = be.orig.vmem_handle_create else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(pool, size, type_, flags, handle) };
    if st == HSA_STATUS_SUCCESS {
        quietly("recording a vmem handle", || {
            // SAFETY: on success the runtime wrote the handle.
            let h = unsafe { *handle };
            // The owning agent is known once the memory is mapped (pointer info). Unknown
            // pool flags: as memory the engine cannot restore.
            let kind = pool_flags(pool).map_or(VmemKind::Shared, VmemKind::Pool);
            be.vmem_handles.lock().insert(h.handle, kind);
        });
    }
    st
}

unsafe extern "C" fn vmem_import(
    dmabuf_fd: std::ffi::c_int,
    handle: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.vmem_import?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(dmabuf_fd, handle) };
    if st == HSA_STATUS_SUCCESS && !handle.is_null() {
        quietly("recording an imported vmem handle", || {
            // SAFETY: on success the runtime wrote the handle.
            let h = unsafe { *handle };
            be.vmem_handles.lock().insert(h.handle, VmemKind::Shared);
        });
    }
    st
}

unsafe extern "C" fn vmem_export(
    dmabuf_fd: *mut std::ffi::c_int,
    handle: hsa_amd_vmem_alloc_handle_t,
    flags: u64,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.vmem_export?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(dmabuf_fd, handle, flags) };
    if st == HSA_STATUS_SUCCESS {
        quietly("recording an exported vmem handle", || {
            be.vmem_handles
                .lock()
                .insert(handle.handle, VmemKind::Shared);
            // Its mappings so far: another process may write them from now on.
            let mapped: Vec<(usize, usize)> = be
                .vmem_mappings
                .lock()
                .iter()
                .filter(|(_, (h, _))| *h == handle.handle)
                .map(|(va, (_, size))| (*va, *size))
                .collect();
            for (va, size) in mapped {
                share(be, va, size);
            }
        });
    }
    st
}

/// Memory of this process that another process may now write (it was exported): out of the
/// inventory (never captured, restored or fingerprinted again; waits for snapshot copies
/// using it) and the host ranges, into the foreign ranges.
fn share(be: &super::Backend, base: usize, size: usize) {
    INVENTORY.remove_range(base, size);
    be.host_memory.write().remove(&base);
    be.host_readable.write().remove(&base);
    be.foreign_memory.write().insert(base, size);
}

unsafe extern "C" fn vmem_retain(
    handle: *mut hsa_amd_vmem_alloc_handle_t,
    addr: *mut c_void,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.vmem_retain?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(handle, addr) };
    if st == HSA_STATUS_SUCCESS && !handle.is_null() {
        quietly("recording a retained vmem handle", || {
            // SAFETY: on success the runtime wrote the handle.
            let h = unsafe { *handle };
            // The handle of memory mapped at `addr`: what that mapping was recorded as.
            let kind = if INVENTORY.agent_of(addr as usize).is_some() {
                VmemKind::Pool(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)
            } else if within(&be.host_memory.read(), addr as usize) {
                VmemKind::Pool(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)
            } else {
                VmemKind::Shared
            };
            be.vmem_handles.lock().entry(h.handle).or_insert(kind);
        });
    }
    st
}

unsafe extern "C" fn vmem_handle_release(handle: hsa_amd_vmem_alloc_handle_t) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(f) = be.orig.vmem_handle_release else {
        return HSA_STATUS_ERROR;
    };
    quietly("forgetting a vmem handle", || {
        be.vmem_handles.lock().remove(&handle.handle);
    });
    // SAFETY: forwarding unchanged.
    unsafe { f(handle) }
}

/// Records a new vmem mapping by what its handle is: a GPU's coarse-grained memory goes into
/// the inventory; host-visible memory into the host ranges, as memory the host cannot read
/// (the host reaches a mapping only once the application grants the CPU access, which the
/// window cannot tell); an imported handle's memory — or a handle made before the tool saw
/// it — into the foreign ranges.
fn record_mapping(be: &super::Backend, va: *mut c_void, size: usize, kind: Option<VmemKind>) {
    let base = va as usize;
    trim_svm(be, base, size);
    match kind {
        Some(VmemKind::Pool(flags)) if trackable(flags) => {
            match owner_gpu(va) {
                Some((agent, flags)) if trackable(flags) => {
                    INVENTORY.record(base, size, agent, Origin::VmemMapping);
                }
                // System memory (a CPU agent's pool) the host and the GPUs reach.
                None => {
                    be.host_memory.write().insert(base, size);
                }
                Some(_) => {}
            }
        }
        Some(VmemKind::Pool(flags)) if host_visible(flags) => {
            be.host_memory.write().insert(base, size);
        }
        Some(VmemKind::Pool(_)) => {}
        Some(VmemKind::Shared) | None => {
            be.foreign_memory.write().insert(base, size);
        }
    }
}

unsafe extern "C" fn vmem_map(
    va: *mut c_void,
    size: usize,
    offset: usize,
    handle: hsa_amd_vmem_alloc_handle_t,
    flags: u64,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(f) = be.orig.vmem_map else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(va, size, offset, handle, flags) };
    if st == HSA_STATUS_SUCCESS && INVENTORY.is_tracking() && backend().is_some() {
        quietly("recording a vmem mapping", || {
            let kind = be.vmem_handles.lock().get(&handle.handle).copied();
            record_mapping(be, va, size, kind);
            be.vmem_mappings
                .lock()
                .insert(va as usize, (handle.handle, size));
        });
    }
    st
}

unsafe extern "C" fn vmem_unmap(va: *mut c_void, size: usize) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(f) = be.orig.vmem_unmap else {
        return HSA_STATUS_ERROR;
    };
    if INVENTORY.is_tracking() {
        quietly("forgetting a vmem mapping", || {
            if let Some(owner) = INVENTORY.agent_of(va as usize) {
                let gpu = be.gpus.iter().find(|g| g.agent.handle == owner.0);
                super::stuck::wait_for_stuck(be, gpu.map(|g| g.index));
            }
            INVENTORY.remove_range(va as usize, size);
            be.host_memory.write().remove(&(va as usize));
            be.foreign_memory.write().remove(&(va as usize));
            be.vmem_mappings.lock().remove(&(va as usize));
        });
    }
    // SAFETY: forwarding unchanged.
    unsafe { f(va, size) }
}

// ---- memory other processes write, shared virtual memory ----------------------------------

unsafe extern "C" fn ipc_create(
    ptr: *mut c_void,
    len: usize,
    handle: *mut hsa_amd_ipc_memory_t,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND.get().and_then(|be| Some((be, be.orig.ipc_create?))) else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(ptr, len, handle) };
    if st == HSA_STATUS_SUCCESS {
        quietly("recording an exported allocation", || {
            let base = ptr as usize;
            share(be, base, extent(be, base, len));
        });
    }
    st
}

unsafe extern "C" fn export_dmabuf(
    ptr: *const c_void,
    size: usize,
    dmabuf: *mut std::ffi::c_int,
    offset: *mut u64,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.export_dmabuf?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(ptr, size, dmabuf, offset) };
    if st == HSA_STATUS_SUCCESS {
        share_allocation_of(be, ptr as usize);
    }
    st
}

unsafe extern "C" fn export_dmabuf_v2(
    ptr: *const c_void,
    size: usize,
    dmabuf: *mut std::ffi::c_int,
    offset: *mut u64,
    flags: u64,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.export_dmabuf_v2?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(ptr, size, dmabuf, offset, flags) };
    if st == HSA_STATUS_SUCCESS {
        share_allocation_of(be, ptr as usize);
    }
    st
}

/// After a dmabuf export of memory at `p`: the whole allocation holding it may be written by
/// whatever imports the descriptor (another process, a NIC for RDMA).
fn share_allocation_of(be: &super::Backend, p: usize) {
    quietly("recording an exported dmabuf", || {
        match be.pointer_info(p) {
            Some(info) if info.sizeInBytes > 0 => {
                share(be, info.agentBaseAddress as usize, info.sizeInBytes)
            }
            _ => share(be, p, 1),
        }
    });
}

unsafe extern "C" fn ipc_attach(
    handle: *const hsa_amd_ipc_memory_t,
    len: usize,
    num_agents: u32,
    mapping_agents: *const hsa_agent_t,
    mapped_ptr: *mut *mut c_void,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND.get().and_then(|be| Some((be, be.orig.ipc_attach?))) else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(handle, len, num_agents, mapping_agents, mapped_ptr) };
    if st == HSA_STATUS_SUCCESS && !mapped_ptr.is_null() {
        quietly("recording an IPC attachment", || {
            // SAFETY: on success the runtime wrote the mapped pointer.
            let p = unsafe { *mapped_ptr } as usize;
            record_foreign(be, p, extent(be, p, len));
        });
    }
    st
}

unsafe extern "C" fn ipc_detach(mapped_ptr: *mut c_void) -> hsa_status_t {
    let Some((be, f)) = BACKEND.get().and_then(|be| Some((be, be.orig.ipc_detach?))) else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(mapped_ptr) };
    if st == HSA_STATUS_SUCCESS {
        quietly("forgetting an IPC attachment", || {
            be.foreign_memory.write().remove(&(mapped_ptr as usize));
        });
    }
    st
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn interop_map(
    num_agents: u32,
    agents: *mut hsa_agent_t,
    interop_handle: std::ffi::c_int,
    flags: u32,
    size: *mut usize,
    ptr: *mut *mut c_void,
    metadata_size: *mut usize,
    metadata: *mut *const c_void,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.interop_map?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe {
        f(
            num_agents,
            agents,
            interop_handle,
            flags,
            size,
            ptr,
            metadata_size,
            metadata,
        )
    };
    if st == HSA_STATUS_SUCCESS && !ptr.is_null() {
        quietly("recording an interop buffer", || {
            // SAFETY: on success the runtime wrote the pointer and (when asked) the size.
            let (p, len) = unsafe { (*ptr as usize, if size.is_null() { 0 } else { *size }) };
            record_foreign(be, p, extent(be, p, len));
        });
    }
    st
}

unsafe extern "C" fn interop_unmap(ptr: *mut c_void) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.interop_unmap?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    quietly("forgetting an interop buffer", || {
        be.foreign_memory.write().remove(&(ptr as usize));
    });
    // SAFETY: forwarding unchanged.
    unsafe { f(ptr) }
}

/// The size of the memory mapped at `p`: what the runtime's pointer info says, else `len`
/// (at least one byte, so the start is always known).
fn extent(be: &super::Backend, p: usize, len: usize) -> usize {
    match be.pointer_info(p) {
        Some(info) if info.agentBaseAddress as usize == p && info.sizeInBytes > 0 => {
            info.sizeInBytes
        }
        _ => len.max(1),
    }
}

fn record_foreign(be: &super::Backend, p: usize, size: usize) {
    if p == 0 {
        return;
    }
    trim_svm(be, p, size);
    be.foreign_memory.write().insert(p, size);
}

unsafe extern "C" fn svm_attributes_set(
    ptr: *mut c_void,
    size: usize,
    attributes: *mut hsa_amd_svm_attribute_pair_t,
    count: usize,
) -> hsa_status_t {
    let Some((be, f)) = BACKEND
        .get()
        .and_then(|be| Some((be, be.orig.svm_attributes_set?)))
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(ptr, size, attributes, count) };
    if st == HSA_STATUS_SUCCESS && !attributes.is_null() && size > 0 {
        quietly("recording shared virtual memory", || {
            // SAFETY: the runtime accepted `count` attribute pairs at `attributes`.
            let list = unsafe { std::slice::from_raw_parts(attributes, count) };
            let access = [
                HSA_AMD_SVM_ATTRIB_AGENT_ACCESSIBLE,
                HSA_AMD_SVM_ATTRIB_AGENT_ACCESSIBLE_IN_PLACE,
            ]
            .map(|a| a as u64);
            let reachable = list.iter().any(|a| {
                access.contains(&a.attribute) && be.gpu(hsa_agent_t { handle: a.value }).is_some()
            });
            if reachable {
                merge_range(&mut be.svm_memory.write(), ptr as usize, size);
            }
        });
    }
    st
}

/// Forgets the shared-virtual-memory ranges `[base, base + size)` overlaps: memory the runtime
/// just handed out there is not the memory the application once made reachable (that was
/// unmapped, and its attributes with it).
fn trim_svm(be: &super::Backend, base: usize, size: usize) {
    if be.svm_memory.read().is_empty() {
        return;
    }
    subtract_range(&mut be.svm_memory.write(), base, size);
}

/// Whether `addr` lies in one of `map`'s ranges (base -> size).
pub(crate) fn within(map: &std::collections::BTreeMap<usize, usize>, addr: usize) -> bool {
    map.range(..=addr)
        .next_back()
        .is_some_and(|(&base, &size)| addr - base < size)
}

/// Adds `[base, base + size)` to a map of disjoint ranges, merging it with those it overlaps
/// or touches.
pub(crate) fn merge_range(
    map: &mut std::collections::BTreeMap<usize, usize>,
    base: usize,
    size: usize,
) {
    if size == 0 {
        return;
    }
    let (mut start, mut end) = (base, base.saturating_add(size));
    let touching: Vec<(usize, usize)> = map
        .range(..=end)
        .rev()
        .take_while(|(b, s)| b.saturating_add(**s) >= start)
        .map(|(b, s)| (*b, *s))
        .collect();
    for (b, s) in touching {
        map.remove(&b);
        start = start.min(b);
        end = end.max(b.saturating_add(s));
    }
    map.insert(start, end - start);
}

/// Removes `[base, base + size)` from a map of disjoint ranges, keeping what lies outside it.
pub(crate) fn subtract_range(
    map: &mut std::collections::BTreeMap<usize, usize>,
    base: usize,
    size: usize,
) {
    let end = base.saturating_add(size);
    let overlapping: Vec<(usize, usize)> = map
        .range(..end)
        .rev()
        .take_while(|(b, s)| b.saturating_add(**s) > base)
        .map(|(b, s)| (*b, *s))
        .collect();
    for (b, s) in overlapping {
        map.remove(&b);
        if b < base {
            map.insert(b, base - b);
        }
        let e = b.saturating_add(s);
        if e > end {
            map.insert(end, e - end);
        }
    }
}

// ---- code objects --------------------------------------------------------------------------

/// Keeps the argument layout of a reader's code object (or says why there is none).
fn remember_layout(
    be: &super::Backend,
    reader: hsa_code_object_reader_t,
    layout: Result<kernel_args::CodeObjectArgs, kernel_args::NoLayout>,
) {
    match layout {
        Ok(layout) => {
            tracing::debug!(
                kernels = layout.len(),
                "read a code object's argument layout"
            );
            be.layouts
                .lock()
                .reader_created(reader.handle, Arc::new(layout));
        }
        // hsa-emu's host code objects: not GPU code, no metadata to read.
        Err(kernel_args::NoLayout::NotAmdgpu) => {}
        Err(e) => tracing::warn!(
            "the kernels of a code object are not checked for system-memory arguments: {e}"
        ),
    }
}

unsafe extern "C" fn reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    let Some(f) = BACKEND
        .get()
        .and_then(|be| be.orig.reader_create_from_memory)
    else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(code_object, size, reader) };
    if st == HSA_STATUS_SUCCESS
        && !code_object.is_null()
        && !reader.is_null()
        && let Some(be) = backend()
    {
        quietly("reading a code object's argument layout", || {
            // SAFETY: the runtime accepted `size` bytes at `code_object` for the reader, which
            // the caller keeps valid while the reader lives; the reader was just written.
            let (bytes, reader) = unsafe {
                (
                    std::slice::from_raw_parts(code_object.cast::<u8>(), size),
                    *reader,
                )
            };
            remember_layout(be, reader, kernel_args::parse(bytes));
        });
    }
    st
}

/// The whole file behind `fd`, read without moving its offset; `None` past 1 GiB or on error.
fn read_whole(fd: hsa_file_t) -> Option<Vec<u8>> {
    // SAFETY: a zeroed stat buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes the buffer; a bad descriptor is an error, not a fault.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_size <= 0 || st.st_size > 1 << 30 {
        return None;
    }
    let mut bytes = vec![0u8; st.st_size as usize];
    let mut at = 0usize;
    while at < bytes.len() {
        // SAFETY: pread writes at most the rest of `bytes` into it.
        let n = unsafe {
            libc::pread(
                fd,
                bytes[at..].as_mut_ptr().cast(),
                bytes.len() - at,
                at as libc::off_t,
            )
        };
        if n <= 0 {
            return None;
        }
        at += n as usize;
    }
    Some(bytes)
}

unsafe extern "C" fn reader_create_from_file(
    file: hsa_file_t,
    reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    let Some(f) = BACKEND.get().and_then(|be| be.orig.reader_create_from_file) else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(file, reader) };
    if st == HSA_STATUS_SUCCESS
        && !reader.is_null()
        && let Some(be) = backend()
    {
        quietly("reading a code object's argument layout", || {
            // SAFETY: the reader was just written.
            let reader = unsafe { *reader };
            let layout = read_whole(file)
                .ok_or_else(|| {
                    kernel_args::NoLayout::Malformed("its file could not be read".into())
                })
                .and_then(|bytes| kernel_args::parse(&bytes));
            remember_layout(be, reader, layout);
        });
    }
    st
}

unsafe extern "C" fn reader_destroy(reader: hsa_code_object_reader_t) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(f) = be.orig.reader_destroy else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    quietly("forgetting a code object reader", || {
        be.layouts.lock().reader_destroyed(reader.handle)
    });
    // SAFETY: forwarding unchanged.
    unsafe { f(reader) }
}

/// After an agent or program code-object load returned `st`: the reader's layout goes with
/// the executable it was loaded into.
fn loaded_code_object(
    be: &super::Backend,
    st: hsa_status_t,
    executable: hsa_executable_t,
    reader: hsa_code_object_reader_t,
) -> hsa_status_t {
    if st == HSA_STATUS_SUCCESS {
        quietly("noting a code object load", || {
            be.layouts.lock().loaded(executable.handle, reader.handle)
        });
    }
    st
}

unsafe extern "C" fn load_agent_code_object(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    reader: hsa_code_object_reader_t,
    options: *const std::ffi::c_char,
    loaded: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(f) = be.orig.load_agent_code_object else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(executable, agent, reader, options, loaded) };
    loaded_code_object(be, st, executable, reader)
}

unsafe extern "C" fn load_program_code_object(
    executable: hsa_executable_t,
    reader: hsa_code_object_reader_t,
    options: *const std::ffi::c_char,
    loaded: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(f) = be.orig.load_program_code_object else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { f(executable, reader, options, loaded) };
    loaded_code_object(be, st, executable, reader)
}

// ---- executables ---------------------------------------------------------------------------

unsafe extern "C" fn executable_freeze(
    executable: hsa_executable_t,
    options: *const std::ffi::c_char,
) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding unchanged.
    let st = unsafe { (be.orig.executable_freeze)(executable, options) };
    if st == HSA_STATUS_SUCCESS {
        quietly("reading kernel names", || {
            be.executables.lock().push(executable);
            record_kernel_names(executable);
        });
    }
    st
}

unsafe extern "C" fn executable_destroy(executable: hsa_executable_t) -> hsa_status_t {
    let Some(be) = BACKEND.get() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    quietly("forgetting an executable", || {
        be.executables.lock().retain(|e| *e != executable);
        let (objects, variables) = be.layouts.lock().destroyed(executable.handle);
        let mut words = be.pointer_words.write();
        for object in objects {
            words.remove(&object);
        }
        drop(words);
        let mut known = be.variables.write();
        for address in variables {
            known.remove(&address);
        }
        drop(known);
        // A stuck pass may still run code of this executable.
        super::stuck::wait_for_stuck(be, None);
    });
    // Its module variables may be in a window's snapshot: destroy it outside every window.
    let _fence = backend().and_then(|be| guarded("fencing an executable", || Fence::all(be)));
    // SAFETY: forwarding unchanged.
    unsafe { (be.orig.executable_destroy)(executable) }
}

/// Reads a symbol's name.
pub(crate) fn symbol_name(
    orig: &super::Originals,
    symbol: hsa_executable_symbol_t,
) -> Option<String> {
    let mut len = 0u32;
    // SAFETY: NAME_LENGTH writes a u32.
    let st = unsafe {
        (orig.symbol_get_info)(
            symbol,
            HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
            (&mut len as *mut u32).cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS || len > 1 << 16 {
        return None;
    }
    let mut buf = vec![0u8; len as usize + 1];
    // SAFETY: NAME writes `len` bytes (not NUL-terminated) into a buffer of len + 1.
    let st = unsafe {
        (orig.symbol_get_info)(
            symbol,
            HSA_EXECUTABLE_SYMBOL_INFO_NAME,
            buf.as_mut_ptr().cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS {
        return None;
    }
    buf.truncate(len as usize);
    while buf.last() == Some(&0) {
        buf.pop();
    }
    String::from_utf8(buf).ok()
}

/// Records, for every kernel of a frozen executable, its name, kernarg size and (with its code
/// object's metadata) pointer words; and the executable's module variables.
fn record_kernel_names(executable: hsa_executable_t) {
    let Some(be) = BACKEND.get() else { return };
    struct Found {
        /// (kernel object, symbol name as reported, kernarg size)
        kernels: Vec<(u64, String, Option<u32>)>,
        /// (address, size) of module variables.
        variables: Vec<(usize, usize)>,
    }
    unsafe extern "C" fn each(
        _exe: hsa_executable_t,
        symbol: hsa_executable_symbol_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        let Some(be) = BACKEND.get() else {
            return HSA_STATUS_SUCCESS;
        };
        // SAFETY: `data` is the `Found` below, alive for the iteration.
        let found = unsafe { &mut *data.cast::<Found>() };
        let get = be.orig.symbol_get_info;
        let mut kind = 0u32;
        // SAFETY: TYPE writes a 4-byte enum.
        let st = unsafe {
            get(
                symbol,
                HSA_EXECUTABLE_SYMBOL_INFO_TYPE,
                (&mut kind as *mut u32).cast(),
            )
        };
        if st != HSA_STATUS_SUCCESS {
            return HSA_STATUS_SUCCESS;
        }
        if kind == HSA_SYMBOL_KIND_VARIABLE {
            let mut address = 0u64;
            let mut size = 0u32;
            // SAFETY: VARIABLE_ADDRESS writes a u64, VARIABLE_SIZE a u32.
            let ok = unsafe {
                get(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
                    (&mut address as *mut u64).cast(),
                ) == HSA_STATUS_SUCCESS
                    && get(
                        symbol,
                        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE,
                        (&mut size as *mut u32).cast(),
                    ) == HSA_STATUS_SUCCESS
            };
            if ok && address != 0 && size != 0 {
                found.variables.push((address as usize, size as usize));
            }
            return HSA_STATUS_SUCCESS;
        }
        if kind != HSA_SYMBOL_KIND_KERNEL {
            return HSA_STATUS_SUCCESS;
        }
        let mut object = 0u64;
        // SAFETY: KERNEL_OBJECT writes a u64.
        let st = unsafe {
            get(
                symbol,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                (&mut object as *mut u64).cast(),
            )
        };
        if st != HSA_STATUS_SUCCESS {
            return HSA_STATUS_SUCCESS;
        }
        let mut kernarg = 0u32;
        // SAFETY: KERNEL_KERNARG_SEGMENT_SIZE writes a u32.
        let st = unsafe {
            get(
                symbol,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                (&mut kernarg as *mut u32).cast(),
            )
        };
        let name = symbol_name(&be.orig, symbol).unwrap_or_default();
        found
            .kernels
            .push((object, name, (st == HSA_STATUS_SUCCESS).then_some(kernarg)));
        HSA_STATUS_SUCCESS
    }
    let mut found = Found {
        kernels: Vec::new(),
        variables: Vec::new(),
    };
    // SAFETY: iterating a frozen executable with a callback that only reads symbols into
    // `found`, which outlives the call.
    let st = unsafe {
        (be.orig.executable_iterate_symbols)(
            executable,
            Some(each),
            (&mut found as *mut Found).cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS {
        tracing::warn!(status = %Status(st), "cannot list the kernels of an executable: their names are unknown");
    }
    let mut layouts = be.layouts.lock();
    let mut described = Vec::new();
    for (object, name, kernarg) in found.kernels {
        if !name.is_empty() {
            let short = name.strip_suffix(".kd").unwrap_or(&name);
            be.kernel_names.write().insert(object, Arc::from(short));
            // The metadata names the descriptor (`name.kd`); runtimes report it so.
            let words = layouts
                .lookup(executable.handle, &name)
                .or_else(|| layouts.lookup(executable.handle, &format!("{short}.kd")));
            if let Some(words) = words {
                be.pointer_words.write().insert(object, words);
                described.push(object);
            }
        }
        if let Some(size) = kernarg {
            be.kernarg_sizes.write().insert(object, size);
        }
    }
    {
        let mut variables = be.variables.write();
        for &(address, size) in &found.variables {
            variables.insert(address, size);
        }
    }
    layouts.frozen(
        executable.handle,
        described,
        found.variables.iter().map(|v| v.0).collect(),
    );
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{merge_range, subtract_range, within};

    fn map(ranges: &[(usize, usize)]) -> BTreeMap<usize, usize> {
        ranges.iter().copied().collect()
    }

    #[test]
    fn merged_ranges_stay_disjoint_and_cover_every_byte_set() {
        let mut m = BTreeMap::new();
        merge_range(&mut m, 0x1000, 0x1000);
        merge_range(&mut m, 0x4000, 0x1000);
        assert_eq!(m, map(&[(0x1000, 0x1000), (0x4000, 0x1000)]));
        // Inside an existing range: a lookup of its tail must still find it.
        merge_range(&mut m, 0x1800, 0x10);
        assert_eq!(m, map(&[(0x1000, 0x1000), (0x4000, 0x1000)]));
        assert!(within(&m, 0x1f00));
        // Touching one, overlapping the other: one range.
        merge_range(&mut m, 0x2000, 0x2800);
        assert_eq!(m, map(&[(0x1000, 0x4000)]));
        merge_range(&mut m, 0x800, 0x10);
        assert_eq!(m, map(&[(0x800, 0x10), (0x1000, 0x4000)]));
        merge_range(&mut m, 0x0, 0x6000);
        assert_eq!(m, map(&[(0x0, 0x6000)]));
        merge_range(&mut m, 0x9000, 0);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn subtracted_ranges_keep_what_lies_outside() {
        let mut m = map(&[(0x1000, 0x3000), (0x6000, 0x1000)]);
        subtract_range(&mut m, 0x2000, 0x800);
        assert_eq!(
            m,
            map(&[(0x1000, 0x1000), (0x2800, 0x1800), (0x6000, 0x1000)])
        );
        assert!(!within(&m, 0x2400) && within(&m, 0x2800) && within(&m, 0x1fff));
        // Across two ranges.
        subtract_range(&mut m, 0x3000, 0x3800);
        assert_eq!(
            m,
            map(&[(0x1000, 0x1000), (0x2800, 0x800), (0x6800, 0x800)])
        );
        // Nothing overlaps: unchanged.
        subtract_range(&mut m, 0x5000, 0x100);
        assert_eq!(m.len(), 3);
        subtract_range(&mut m, 0, usize::MAX);
        assert!(m.is_empty());
    }
}
