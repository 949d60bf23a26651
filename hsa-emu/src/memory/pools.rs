//! Pools and regions (information, iteration, allocate/free), access grants, host-memory
//! locking, synchronous copy and fill, pointer information, deallocation callbacks, coherency
//! and migration. IPC memory is in [`super::ipc`].

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};

use rocprof_replay_sys::*;

use super::registry::{self, DeallocCallback, Locked, REGISTRY, containing_mut};
use crate::api::Tables;
use crate::ffi::{guard_status, write_out};
use crate::topology::{ALLOC_ALIGNMENT, DeviceKind, GRANULE, Pool, PoolKind, Topology, topology};

/// `HSA_AMD_MEMORY_POOL_INFO_LOCATION` (ROCm 6.x): `hsa_amd_memory_pool_location_t`.
const POOL_INFO_LOCATION: hsa_amd_memory_pool_info_t = 17;
/// `HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_REC_GRANULE` (ROCm 6.x): recommended granule.
const POOL_INFO_REC_GRANULE: hsa_amd_memory_pool_info_t = 18;
/// `HSA_AMD_MEMORY_POOL_LOCATION_CPU` / `_GPU`.
const LOCATION_CPU: u32 = 0;
const LOCATION_GPU: u32 = 1;

/// Fills the pool, region, allocation, access, lock, copy, fill and pointer-info slots.
pub(super) fn install(t: &mut Tables) {
    t.core.hsa_agent_iterate_regions_fn = Some(agent_iterate_regions);
    t.core.hsa_region_get_info_fn = Some(region_get_info);
    t.core.hsa_memory_allocate_fn = Some(memory_allocate);
    t.core.hsa_memory_free_fn = Some(memory_free);
    t.core.hsa_memory_copy_fn = Some(memory_copy);
    t.core.hsa_memory_assign_agent_fn = Some(memory_assign_agent);
    t.core.hsa_memory_register_fn = Some(memory_register);
    t.core.hsa_memory_deregister_fn = Some(memory_register);

    t.amd.hsa_amd_memory_pool_get_info_fn = Some(memory_pool_get_info);
    t.amd.hsa_amd_agent_iterate_memory_pools_fn = Some(agent_iterate_memory_pools);
    t.amd.hsa_amd_agent_memory_pool_get_info_fn = Some(agent_memory_pool_get_info);
    t.amd.hsa_amd_memory_pool_allocate_fn = Some(memory_pool_allocate);
    t.amd.hsa_amd_memory_pool_free_fn = Some(memory_free);
    t.amd.hsa_amd_agents_allow_access_fn = Some(agents_allow_access);
    t.amd.hsa_amd_memory_lock_fn = Some(memory_lock);
    t.amd.hsa_amd_memory_lock_to_pool_fn = Some(memory_lock_to_pool);
    t.amd.hsa_amd_memory_unlock_fn = Some(memory_unlock);
    t.amd.hsa_amd_memory_fill_fn = Some(memory_fill);
    t.amd.hsa_amd_pointer_info_fn = Some(pointer_info);
    t.amd.hsa_amd_pointer_info_set_userdata_fn = Some(pointer_info_set_userdata);
    t.amd.hsa_amd_register_deallocation_callback_fn = Some(register_deallocation_callback);
    t.amd.hsa_amd_deregister_deallocation_callback_fn = Some(deregister_deallocation_callback);
    t.amd.hsa_amd_coherency_get_type_fn = Some(coherency_get_type);
    t.amd.hsa_amd_coherency_set_type_fn = Some(coherency_set_type);
    t.amd.hsa_amd_memory_pool_can_migrate_fn = Some(memory_pool_can_migrate);
    t.amd.hsa_amd_memory_migrate_fn = Some(memory_migrate);
}

/// Index of the pool behind a handle in the global machine.
fn pool_index(topo: &Topology, handle: u64) -> Option<usize> {
    let p = topo.pool(hsa_amd_memory_pool_t { handle })?;
    topo.pools.iter().position(|q| std::ptr::eq(q, p))
}

/// Most bytes one allocation from `pool` may ask for (0 when not allocatable).
fn alloc_max(pool: &Pool) -> usize {
    if pool.alloc_allowed() { pool.size } else { 0 }
}

// ---- pools --------------------------------------------------------------------------------

/// `hsa_amd_memory_pool_get_info`.
unsafe extern "C" fn memory_pool_get_info(
    memory_pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(pool) = topo.pool(memory_pool) else {
            return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
        };
        // SAFETY: (all arms) `value` is the caller's buffer for this attribute's type.
        unsafe {
            match attribute {
                HSA_AMD_MEMORY_POOL_INFO_SEGMENT => write_out::<u32>(value, pool.segment()),
                HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS => {
                    write_out::<u32>(value, pool.global_flags())
                }
                HSA_AMD_MEMORY_POOL_INFO_SIZE => write_out::<usize>(value, pool.size),
                HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED => {
                    write_out::<bool>(value, pool.alloc_allowed())
                }
                HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE | POOL_INFO_REC_GRANULE => {
                    write_out::<usize>(value, GRANULE)
                }
                HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT => {
                    write_out::<usize>(value, ALLOC_ALIGNMENT)
                }
                HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL => {
                    write_out::<bool>(value, pool.accessible_by_all())
                }
                HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE => {
                    write_out::<usize>(value, alloc_max(pool))
                }
                POOL_INFO_LOCATION => {
                    let cpu = topo.owner(pool).kind == DeviceKind::Cpu;
                    write_out::<u32>(value, if cpu { LOCATION_CPU } else { LOCATION_GPU })
                }
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

/// `hsa_amd_agent_iterate_memory_pools`: the agent's pools in order; a callback status other
/// than success (including `HSA_STATUS_INFO_BREAK`) stops the walk and is returned.
unsafe extern "C" fn agent_iterate_memory_pools(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(a) = topo.agent(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        for &p in &a.pools {
            // SAFETY: the application's callback with its own data.
            let st = unsafe { cb(topo.pools[p].handle, data) };
            if st != HSA_STATUS_SUCCESS {
                return st;
            }
        }
        HSA_STATUS_SUCCESS
    })
}

/// The link an agent reaches a pool through (one hop, plausible numbers).
fn link_info(topo: &Topology, agent: usize, pool: &Pool) -> hsa_amd_memory_pool_link_info_t {
    let from_cpu = topo.agents[agent].kind == DeviceKind::Cpu;
    let to_host = topo.owner(pool).kind == DeviceKind::Cpu;
    let (link_type, numa_distance, latency, bandwidth) =
        match (from_cpu, to_host, pool.owner == agent) {
            (true, true, _) => (HSA_AMD_LINK_INFO_TYPE_HYPERTRANSPORT, 10, 100, 50_000),
            (false, false, true) => (HSA_AMD_LINK_INFO_TYPE_PCIE, 10, 300, 1_000_000),
            (false, false, false) => (HSA_AMD_LINK_INFO_TYPE_PCIE, 40, 2_000, 25_000),
            _ => (HSA_AMD_LINK_INFO_TYPE_PCIE, 20, 1_000, 25_000),
        };
    hsa_amd_memory_pool_link_info_t {
        min_latency: latency,
        max_latency: latency * 2,
        min_bandwidth: bandwidth / 2,
        max_bandwidth: bandwidth,
        atomic_support_32bit: true,
        atomic_support_64bit: true,
        coherent_support: pool.kind != PoolKind::Vram,
        link_type,
        numa_distance,
    }
}

/// `hsa_amd_agent_memory_pool_get_info`.
unsafe extern "C" fn agent_memory_pool_get_info(
    agent: hsa_agent_t,
    memory_pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_agent_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(agent) = topo.agent_index(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let Some(pool) = topo.pool(memory_pool) else {
            return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
        };
        let access = registry::default_access(topo, agent, pool);
        let hops: u32 = if access == HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED {
            0
        } else {
            1
        };
        // SAFETY: (all arms) `value` is the caller's buffer for this attribute's type.
        unsafe {
            match attribute {
                HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS => write_out::<u32>(value, access),
                HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS => write_out::<u32>(value, hops),
                HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO => {
                    if hops == 0 {
                        HSA_STATUS_SUCCESS
                    } else {
                        write_out(value, link_info(topo, agent, pool))
                    }
                }
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

/// `hsa_amd_memory_pool_allocate`. A zero size or null `ptr` is `INVALID_ARGUMENT` (as the
/// header documents); a pool that does not allow runtime allocation or a size above
/// `ALLOC_MAX_SIZE` is `INVALID_ALLOCATION`; injected failures and VRAM past capacity are
/// `OUT_OF_RESOURCES`. Every flag is accepted and recorded.
unsafe extern "C" fn memory_pool_allocate(
    memory_pool: hsa_amd_memory_pool_t,
    size: usize,
    flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(pool) = pool_index(topo, memory_pool.handle) else {
            return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
        };
        if ptr.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match registry::allocate(topo, pool, size, flags) {
            // SAFETY: non-null out-pointer supplied by the caller.
            Ok(base) => unsafe { write_out(ptr.cast(), base as *mut c_void) },
            Err(e) => e,
        }
    })
}

/// `hsa_amd_memory_pool_free` and `hsa_memory_free`: NULL is a no-op; a pointer that is not
/// the base of a live allocation is `INVALID_ARGUMENT`.
unsafe extern "C" fn memory_free(ptr: *mut c_void) -> hsa_status_t {
    guard_status(|| registry::free(ptr as usize))
}

/// `hsa_amd_agents_allow_access`: records the agents on the allocation or locked range.
unsafe extern "C" fn agents_allow_access(
    num_agents: u32,
    agents: *const hsa_agent_t,
    _flags: *const u32,
    ptr: *const c_void,
) -> hsa_status_t {
    guard_status(|| {
        if num_agents == 0 || agents.is_null() || ptr.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: the caller passes `num_agents` agents.
        let list = unsafe { std::slice::from_raw_parts(agents, num_agents as usize) };
        let topo = topology();
        if list.iter().any(|a| topo.agent(*a).is_none()) {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        grant(ptr as usize, list)
    })
}

/// Adds `agents` to the grants of the allocation, mapping, IPC attachment or locked range
/// holding `addr`.
fn grant(addr: usize, agents: &[hsa_agent_t]) -> hsa_status_t {
    fn add(to: &mut Vec<hsa_agent_t>, agents: &[hsa_agent_t]) {
        for a in agents {
            if !to.contains(a) {
                to.push(*a);
            }
        }
    }
    let mut reg = REGISTRY.write();
    if let Some((_, a)) = containing_mut(&mut reg.allocs, addr, |a| a.size) {
        add(&mut a.granted, agents);
        return HSA_STATUS_SUCCESS;
    }
    if let Some((_, l)) = containing_mut(&mut reg.locked, addr, |l| l.size) {
        if !l.granted.is_empty() {
            add(&mut l.granted, agents);
        }
        return HSA_STATUS_SUCCESS;
    }
    if let Some((_, m)) = containing_mut(&mut reg.mappings, addr, |m| m.size) {
        for a in agents {
            if !m.access.iter().any(|(b, _)| b == a) {
                m.access.push((*a, HSA_ACCESS_PERMISSION_RW));
            }
        }
        return HSA_STATUS_SUCCESS;
    }
    if let Some((_, m)) = containing_mut(&mut reg.ipc, addr, |m| m.size) {
        add(&mut m.accessible, agents);
        return HSA_STATUS_SUCCESS;
    }
    HSA_STATUS_ERROR_INVALID_ARGUMENT
}

// ---- locking ------------------------------------------------------------------------------

/// Validates the agent list of the lock functions (`agents` NULL with 0 means every agent).
fn lock_agents(
    agents: *mut hsa_agent_t,
    num_agent: c_int,
) -> Result<Vec<hsa_agent_t>, hsa_status_t> {
    match (agents.is_null(), num_agent) {
        (true, 0) => Ok(Vec::new()),
        (false, n) if n > 0 => {
            // SAFETY: the caller passes `num_agent` agents.
            let list = unsafe { std::slice::from_raw_parts(agents, n as usize) }.to_vec();
            if list.iter().any(|a| topology().agent(*a).is_none()) {
                Err(HSA_STATUS_ERROR_INVALID_AGENT)
            } else {
                Ok(list)
            }
        }
        _ => Err(HSA_STATUS_ERROR_INVALID_ARGUMENT),
    }
}

/// Registers `[host, host + size)` as locked and returns the agent pointer (the host pointer).
fn lock(host: usize, size: usize, agents: Vec<hsa_agent_t>, pool: &Pool) -> usize {
    let topo = topology();
    let mut reg = REGISTRY.write();
    let inside_allocation = registry::containing(&reg.allocs, host, |a| a.size).is_some();
    if !inside_allocation {
        let entry = reg.locked.entry(host).or_insert_with(|| Locked {
            size,
            owner: topo.owner(pool).handle,
            global_flags: pool.global_flags(),
            user_data: 0,
            granted: agents.clone(),
            count: 0,
        });
        entry.count += 1;
        entry.size = entry.size.max(size);
        if entry.count > 1 && !entry.granted.is_empty() {
            if agents.is_empty() {
                entry.granted.clear();
            } else {
                for a in agents {
                    if !entry.granted.contains(&a) {
                        entry.granted.push(a);
                    }
                }
            }
        }
    }
    host
}

/// `hsa_amd_memory_lock`: host memory is already agent-accessible; the range is recorded as
/// LOCKED (fine-grained system memory of the CPU) and the agent pointer is the host pointer.
unsafe extern "C" fn memory_lock(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: c_int,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        if host_ptr.is_null() || size == 0 || agent_ptr.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let agents = match lock_agents(agents, num_agent) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let topo = topology();
        let Some(pool) = topo.pool_of(topo.cpu(), PoolKind::SystemFine) else {
            return HSA_STATUS_ERROR;
        };
        let p = lock(host_ptr as usize, size, agents, pool);
        // SAFETY: non-null out-pointer supplied by the caller.
        unsafe { write_out(agent_ptr.cast(), p as *mut c_void) }
    })
}

/// `hsa_amd_memory_lock_to_pool`: like [`memory_lock`], reporting `pool`'s flags; the pool
/// must be a global pool of a CPU agent.
unsafe extern "C" fn memory_lock_to_pool(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: c_int,
    pool: hsa_amd_memory_pool_t,
    flags: u32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(pool) = topo.pool(pool) else {
            return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
        };
        if topo.owner(pool).kind != DeviceKind::Cpu || pool.segment() != HSA_AMD_SEGMENT_GLOBAL {
            return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
        }
        if host_ptr.is_null() || size == 0 || agent_ptr.is_null() || flags != 0 {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let agents = match lock_agents(agents, num_agent) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let p = lock(host_ptr as usize, size, agents, pool);
        // SAFETY: non-null out-pointer supplied by the caller.
        unsafe { write_out(agent_ptr.cast(), p as *mut c_void) }
    })
}

/// `hsa_amd_memory_unlock`: undoes one lock of the range based at `host_ptr`; unlocking memory
/// that is not locked succeeds, as with ROCr.
unsafe extern "C" fn memory_unlock(host_ptr: *mut c_void) -> hsa_status_t {
    guard_status(|| {
        let mut reg = REGISTRY.write();
        let key = host_ptr as usize;
        if let Some(l) = reg.locked.get_mut(&key) {
            l.count -= 1;
            if l.count == 0 {
                reg.locked.remove(&key);
            }
        }
        HSA_STATUS_SUCCESS
    })
}

// ---- copy and fill ------------------------------------------------------------------------

/// `hsa_memory_copy`: a synchronous `memmove` (every address is host memory).
pub(super) unsafe extern "C" fn memory_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> hsa_status_t {
    guard_status(|| {
        if size == 0 {
            return HSA_STATUS_SUCCESS;
        }
        if dst.is_null() || src.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        if crate::faults::faults().copy_fails() {
            return HSA_STATUS_ERROR;
        }
        // SAFETY: the caller guarantees both ranges are valid for `size` bytes; `copy` allows
        // overlap.
        unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), size) };
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_memory_fill`: stores `value` into `count` consecutive dwords at `ptr` (4-byte
/// aligned), synchronously.
pub(super) unsafe extern "C" fn memory_fill(
    ptr: *mut c_void,
    value: u32,
    count: usize,
) -> hsa_status_t {
    guard_status(|| {
        if ptr.is_null() || (ptr as usize) % 4 != 0 || count.checked_mul(4).is_none() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let p = ptr.cast::<u32>();
        for i in 0..count {
            // SAFETY: the caller guarantees `count` aligned dwords at `ptr` are writable.
            unsafe { p.add(i).write(value) };
        }
        HSA_STATUS_SUCCESS
    })
}

// ---- pointer info -------------------------------------------------------------------------

/// Writes `value` into field `off` of the caller's struct when it lies within `limit` bytes.
///
/// # Safety
/// `base` must be valid for writes of `limit` bytes.
unsafe fn put<T>(base: *mut u8, limit: usize, off: usize, value: T) {
    if off + size_of::<T>() <= limit {
        // SAFETY: inside the caller's `limit` bytes (checked above).
        unsafe { base.add(off).cast::<T>().write_unaligned(value) };
    }
}

/// `hsa_amd_pointer_info`: see [`registry::describe`] for what is reported. Only the fields
/// that fit in the caller's `info->size` are written, and `size` becomes
/// `min(info->size, sizeof(hsa_amd_pointer_info_t))`. The accessible-agent list is allocated
/// with `alloc` when `alloc`, `num_agents_accessible` and `accessible` are all given.
unsafe extern "C" fn pointer_info(
    ptr: *const c_void,
    info: *mut hsa_amd_pointer_info_t,
    alloc: Option<unsafe extern "C" fn(usize) -> *mut c_void>,
    num_agents_accessible: *mut u32,
    accessible: *mut *mut hsa_agent_t,
) -> hsa_status_t {
    guard_status(|| {
        if info.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: `info` is non-null and starts with the caller-set `size` field.
        let caller_size = unsafe { info.cast::<u32>().read_unaligned() } as usize;
        let limit = caller_size.min(size_of::<hsa_amd_pointer_info_t>());
        let d = registry::describe(ptr as usize);
        let b = info.cast::<u8>();
        type I = hsa_amd_pointer_info_t;
        // SAFETY: the caller's struct holds at least `caller_size >= limit` bytes.
        unsafe {
            put(b, limit, offset_of!(I, size), limit as u32);
            put(b, limit, offset_of!(I, type_), d.type_);
            put(b, limit, offset_of!(I, agentBaseAddress), d.base);
            put(b, limit, offset_of!(I, hostBaseAddress), d.base);
            put(b, limit, offset_of!(I, sizeInBytes), d.size);
            put(b, limit, offset_of!(I, userData), d.user_data);
            put(b, limit, offset_of!(I, agentOwner), d.owner);
            put(b, limit, offset_of!(I, global_flags), d.global_flags);
        }
        if let (Some(alloc), false, false) =
            (alloc, num_agents_accessible.is_null(), accessible.is_null())
        {
            let n = d.accessible.len();
            let array = if n == 0 {
                std::ptr::null_mut()
            } else {
                // SAFETY: the application's allocator.
                let p = unsafe { alloc(n * size_of::<hsa_agent_t>()) }.cast::<hsa_agent_t>();
                if p.is_null() {
                    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
                }
                // SAFETY: `p` holds `n` agents, freshly allocated.
                unsafe { std::ptr::copy_nonoverlapping(d.accessible.as_ptr(), p, n) };
                p
            };
            // SAFETY: non-null out-pointers supplied by the caller.
            unsafe {
                num_agents_accessible.write(n as u32);
                accessible.write(array);
            }
        }
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_pointer_info_set_userdata`: for any address inside an allocation, mapping, IPC
/// attachment or locked range; anything else is `INVALID_ARGUMENT`.
unsafe extern "C" fn pointer_info_set_userdata(
    ptr: *const c_void,
    userdata: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let addr = ptr as usize;
        let data = userdata as usize;
        let mut reg = REGISTRY.write();
        if let Some((_, a)) = containing_mut(&mut reg.allocs, addr, |a| a.size) {
            a.user_data = data;
        } else if let Some((_, m)) = containing_mut(&mut reg.mappings, addr, |m| m.size) {
            m.user_data = data;
        } else if let Some((_, m)) = containing_mut(&mut reg.ipc, addr, |m| m.size) {
            m.user_data = data;
        } else if let Some((_, l)) = containing_mut(&mut reg.locked, addr, |l| l.size) {
            l.user_data = data;
        } else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_register_deallocation_callback`: `ptr` may be any address inside an allocation;
/// the callback gets `ptr` back when the allocation is freed.
unsafe extern "C" fn register_deallocation_callback(
    ptr: *mut c_void,
    callback: hsa_amd_deallocation_callback_t,
    user_data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if ptr.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let mut reg = REGISTRY.write();
        let Some((_, a)) = containing_mut(&mut reg.allocs, ptr as usize, |a| a.size) else {
            return HSA_STATUS_ERROR_INVALID_ALLOCATION;
        };
        a.callbacks.push(DeallocCallback {
            callback,
            user_data: user_data as usize,
            ptr: ptr as usize,
        });
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_deregister_deallocation_callback`: removes the callback registered for the
/// allocation holding `ptr`; `INVALID_ARGUMENT` if it was not registered.
unsafe extern "C" fn deregister_deallocation_callback(
    ptr: *mut c_void,
    callback: hsa_amd_deallocation_callback_t,
) -> hsa_status_t {
    guard_status(|| {
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let mut reg = REGISTRY.write();
        let Some((_, a)) = containing_mut(&mut reg.allocs, ptr as usize, |a| a.size) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let before = a.callbacks.len();
        a.callbacks
            .retain(|c| !std::ptr::fn_addr_eq(c.callback, callback));
        if a.callbacks.len() == before {
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        } else {
            HSA_STATUS_SUCCESS
        }
    })
}

// ---- coherency, migration ---------------------------------------------------------------

/// `hsa_amd_coherency_get_type`: every GPU is coherent with the host (it is the host).
unsafe extern "C" fn coherency_get_type(
    agent: hsa_agent_t,
    type_: *mut hsa_amd_coherency_type_t,
) -> hsa_status_t {
    guard_status(|| match topology().agent(agent) {
        Some(a) if a.kind == DeviceKind::Gpu => {
            // SAFETY: the caller's out-pointer (null is rejected by write_out).
            unsafe { write_out::<u32>(type_.cast(), HSA_AMD_COHERENCY_TYPE_COHERENT) }
        }
        _ => HSA_STATUS_ERROR_INVALID_AGENT,
    })
}

/// `hsa_amd_coherency_set_type`: accepted and ignored (memory stays coherent).
unsafe extern "C" fn coherency_set_type(
    agent: hsa_agent_t,
    type_: hsa_amd_coherency_type_t,
) -> hsa_status_t {
    guard_status(|| match topology().agent(agent) {
        Some(a) if a.kind == DeviceKind::Gpu => {
            if type_ == HSA_AMD_COHERENCY_TYPE_COHERENT
                || type_ == HSA_AMD_COHERENCY_TYPE_NONCOHERENT
            {
                HSA_STATUS_SUCCESS
            } else {
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            }
        }
        _ => HSA_STATUS_ERROR_INVALID_AGENT,
    })
}

/// `hsa_amd_memory_pool_can_migrate`: migration is not supported; reports false.
unsafe extern "C" fn memory_pool_can_migrate(
    src_memory_pool: hsa_amd_memory_pool_t,
    dst_memory_pool: hsa_amd_memory_pool_t,
    result: *mut bool,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        if topo.pool(src_memory_pool).is_none() || topo.pool(dst_memory_pool).is_none() {
            return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
        }
        // SAFETY: the caller's out-pointer (null is rejected by write_out).
        unsafe { write_out(result.cast(), false) }
    })
}

/// `hsa_amd_memory_migrate`: not supported (`HSA_STATUS_ERROR`).
unsafe extern "C" fn memory_migrate(
    _ptr: *const c_void,
    _pool: hsa_amd_memory_pool_t,
    _flags: u32,
) -> hsa_status_t {
    HSA_STATUS_ERROR
}

// ---- regions (core API) -------------------------------------------------------------------

/// `hsa_agent_iterate_regions`: one region per pool of the agent, with the pool's handle.
unsafe extern "C" fn agent_iterate_regions(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(hsa_region_t, *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(a) = topo.agent(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        for &p in &a.pools {
            let region = hsa_region_t {
                handle: topo.pools[p].handle.handle,
            };
            // SAFETY: the application's callback with its own data.
            let st = unsafe { cb(region, data) };
            if st != HSA_STATUS_SUCCESS {
                return st;
            }
        }
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_region_global_flag_t` bits of a pool (KERNARG 1, FINE_GRAINED 2, COARSE_GRAINED 4).
fn region_flags(pool: &Pool) -> u32 {
    let f = pool.global_flags();
    let mut out = 0;
    if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT != 0 {
        out |= HSA_REGION_GLOBAL_FLAG_KERNARG;
    }
    if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED != 0 {
        out |= HSA_REGION_GLOBAL_FLAG_FINE_GRAINED;
    }
    if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED != 0 {
        out |= HSA_REGION_GLOBAL_FLAG_COARSE_GRAINED;
    }
    out
}

/// `hsa_region_get_info`, including the `HSA_AMD_REGION_INFO_*` attributes.
unsafe extern "C" fn region_get_info(
    region: hsa_region_t,
    attribute: hsa_region_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(pool) = topo.region(region) else {
            return HSA_STATUS_ERROR_INVALID_REGION;
        };
        let host = topo.owner(pool).kind == DeviceKind::Cpu;
        // SAFETY: (all arms) `value` is the caller's buffer for this attribute's type.
        unsafe {
            match attribute {
                HSA_REGION_INFO_SEGMENT => {
                    let seg = if pool.kind == PoolKind::Group {
                        HSA_REGION_SEGMENT_GROUP
                    } else {
                        HSA_REGION_SEGMENT_GLOBAL
                    };
                    write_out::<u32>(value, seg)
                }
                HSA_REGION_INFO_GLOBAL_FLAGS => write_out::<u32>(value, region_flags(pool)),
                HSA_REGION_INFO_SIZE => write_out::<usize>(value, pool.size),
                HSA_REGION_INFO_ALLOC_MAX_SIZE => write_out::<usize>(value, alloc_max(pool)),
                HSA_REGION_INFO_RUNTIME_ALLOC_ALLOWED => {
                    write_out::<bool>(value, pool.alloc_allowed())
                }
                HSA_REGION_INFO_RUNTIME_ALLOC_GRANULE => write_out::<usize>(value, GRANULE),
                HSA_REGION_INFO_RUNTIME_ALLOC_ALIGNMENT => {
                    write_out::<usize>(value, ALLOC_ALIGNMENT)
                }
                HSA_AMD_REGION_INFO_HOST_ACCESSIBLE => write_out::<bool>(value, host),
                HSA_AMD_REGION_INFO_BASE => write_out::<*mut c_void>(value, std::ptr::null_mut()),
                HSA_AMD_REGION_INFO_BUS_WIDTH => {
                    write_out::<u32>(value, if host { 64 } else { 256 })
                }
                HSA_AMD_REGION_INFO_MAX_CLOCK_FREQUENCY => write_out::<u32>(value, 1000),
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

/// `hsa_memory_allocate`: the same registry and rules as `hsa_amd_memory_pool_allocate`
/// (an invalid region is `INVALID_REGION`).
unsafe extern "C" fn memory_allocate(
    region: hsa_region_t,
    size: usize,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(pool) = pool_index(topo, region.handle) else {
            return HSA_STATUS_ERROR_INVALID_REGION;
        };
        if ptr.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match registry::allocate(topo, pool, size, 0) {
            // SAFETY: non-null out-pointer supplied by the caller.
            Ok(base) => unsafe { write_out(ptr.cast(), base as *mut c_void) },
            Err(e) => e,
        }
    })
}

/// `hsa_memory_assign_agent`: validates and records the agent on a known allocation.
unsafe extern "C" fn memory_assign_agent(
    ptr: *mut c_void,
    agent: hsa_agent_t,
    access: hsa_access_permission_t,
) -> hsa_status_t {
    guard_status(|| {
        if ptr.is_null() || !(HSA_ACCESS_PERMISSION_RO..=HSA_ACCESS_PERMISSION_RW).contains(&access)
        {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        if topology().agent(agent).is_none() {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        let _ = grant(ptr as usize, &[agent]);
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_memory_register` / `hsa_memory_deregister`: host memory needs no registration;
/// a zero size with a non-null pointer is `INVALID_ARGUMENT`, as documented.
unsafe extern "C" fn memory_register(ptr: *mut c_void, size: usize) -> hsa_status_t {
    if size == 0 && !ptr.is_null() {
        HSA_STATUS_ERROR_INVALID_ARGUMENT
    } else {
        HSA_STATUS_SUCCESS
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::topology::DEFAULT_VRAM_MB;

    /// The global machine's first GPU VRAM pool handle.
    pub(crate) fn vram_pool() -> hsa_amd_memory_pool_t {
        let topo = topology();
        topo.pool_of(topo.gpus().next().unwrap(), PoolKind::Vram)
            .unwrap()
            .handle
    }

    pub(crate) fn alloc(
        pool: hsa_amd_memory_pool_t,
        size: usize,
        flags: u32,
    ) -> Result<*mut c_void, hsa_status_t> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe { memory_pool_allocate(pool, size, flags, &mut p) };
        if st == HSA_STATUS_SUCCESS {
            Ok(p)
        } else {
            Err(st)
        }
    }

    pub(crate) fn info_of(ptr: *const c_void) -> hsa_amd_pointer_info_t {
        let mut info = hsa_amd_pointer_info_t::default();
        // SAFETY: valid info; no accessible list asked.
        let st = unsafe {
            pointer_info(
                ptr,
                &mut info,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        info
    }

    unsafe extern "C" fn test_alloc(n: usize) -> *mut c_void {
        // SAFETY: plain malloc.
        unsafe { libc::malloc(n) }
    }

    #[test]
    fn allocate_free_and_exact_pointer_info() {
        let topo = topology();
        let gpu = topo.gpus().next().unwrap();
        let p = alloc(vram_pool(), 10_000, 4).unwrap();
        assert_eq!(p as usize % ALLOC_ALIGNMENT, 0);
        assert_eq!(registry::allocation_flags(p as usize), Some(4));
        // SAFETY: 10_000 bytes were allocated; mmap memory is zeroed.
        unsafe {
            assert_eq!(*p.cast::<u8>().add(9_999), 0);
            p.cast::<u8>().add(9_999).write(7);
        }
        // SAFETY: inside the allocation.
        let inner = unsafe { p.cast::<u8>().add(5000) };
        let info = info_of(inner.cast());
        assert_eq!(info.size as usize, size_of::<hsa_amd_pointer_info_t>());
        assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_HSA);
        assert_eq!(info.agentBaseAddress, p);
        assert_eq!(info.hostBaseAddress, p);
        assert_eq!(info.sizeInBytes, 12_288);
        assert_eq!(info.agentOwner, gpu.handle);
        assert_eq!(
            info.global_flags,
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
        );
        assert!(info.userData.is_null());

        // SAFETY: valid pointer inside the allocation.
        let st = unsafe { pointer_info_set_userdata(inner.cast(), 0x1234 as *mut c_void) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(info_of(p).userData as usize, 0x1234);

        // Accessible list: the owner, then agents granted access.
        let cpu = topo.cpu().handle;
        let mut n = 0u32;
        let mut list: *mut hsa_agent_t = std::ptr::null_mut();
        let mut info = hsa_amd_pointer_info_t::default();
        // SAFETY: valid out-pointers and allocator.
        let st = unsafe { pointer_info(p, &mut info, Some(test_alloc), &mut n, &mut list) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(n, 1);
        // SAFETY: one agent was written; the array came from malloc.
        unsafe {
            assert_eq!(*list, gpu.handle);
            libc::free(list.cast());
        }
        // SAFETY: one valid agent.
        let st = unsafe { agents_allow_access(1, &cpu, std::ptr::null(), p) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        // SAFETY: as above.
        let st = unsafe { pointer_info(p, &mut info, Some(test_alloc), &mut n, &mut list) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(n, 2);
        // SAFETY: two agents were written.
        unsafe {
            assert_eq!(*list.add(1), cpu);
            libc::free(list.cast());
        }

        // SAFETY: not a base address / base address.
        unsafe {
            assert_eq!(memory_free(inner.cast()), HSA_STATUS_ERROR_INVALID_ARGUMENT);
            assert_eq!(memory_free(p), HSA_STATUS_SUCCESS);
            assert_eq!(memory_free(p), HSA_STATUS_ERROR_INVALID_ARGUMENT);
            assert_eq!(memory_free(std::ptr::null_mut()), HSA_STATUS_SUCCESS);
        }
        assert_eq!(info_of(p).type_, HSA_EXT_POINTER_TYPE_UNKNOWN);
    }

    #[test]
    fn unknown_pointer_reports_zeros_and_small_info_is_honoured() {
        let local = 5u64;
        let mut info = hsa_amd_pointer_info_t {
            type_: 99,
            sizeInBytes: 77,
            agentOwner: hsa_agent_t { handle: 5 },
            ..Default::default()
        };
        // SAFETY: valid info.
        let st = unsafe {
            pointer_info(
                (&local as *const u64).cast(),
                &mut info,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_UNKNOWN);
        assert!(info.agentBaseAddress.is_null() && info.hostBaseAddress.is_null());
        assert_eq!(
            (info.sizeInBytes, info.agentOwner.handle, info.global_flags),
            (0, 0, 0)
        );

        // A caller that only knows the first 24 bytes gets nothing past them.
        let p = alloc(vram_pool(), 4096, 0).unwrap();
        let mut small = hsa_amd_pointer_info_t {
            size: 24,
            sizeInBytes: 77,
            ..Default::default()
        };
        // SAFETY: valid info.
        let st = unsafe {
            pointer_info(
                p,
                &mut small,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!((small.size, small.type_), (24, HSA_EXT_POINTER_TYPE_HSA));
        assert_eq!((small.agentBaseAddress, small.hostBaseAddress), (p, p));
        assert_eq!(small.sizeInBytes, 77);
        // SAFETY: null info.
        let st = unsafe {
            pointer_info(
                p,
                std::ptr::null_mut(),
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        // SAFETY: live allocation.
        assert_eq!(unsafe { memory_free(p) }, HSA_STATUS_SUCCESS);
    }

    #[test]
    fn allocation_argument_errors() {
        let mut p = std::ptr::null_mut();
        let topo = topology();
        let group = topo
            .pool_of(topo.gpus().next().unwrap(), PoolKind::Group)
            .unwrap()
            .handle;
        // SAFETY: valid out-pointers (or deliberately null).
        unsafe {
            assert_eq!(
                memory_pool_allocate(vram_pool(), 0, 0, &mut p),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                memory_pool_allocate(vram_pool(), 64, 0, std::ptr::null_mut()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                memory_pool_allocate(group, 64, 0, &mut p),
                HSA_STATUS_ERROR_INVALID_ALLOCATION
            );
            let bad = hsa_amd_memory_pool_t { handle: 42 };
            assert_eq!(
                memory_pool_allocate(bad, 64, 0, &mut p),
                HSA_STATUS_ERROR_INVALID_MEMORY_POOL
            );
            assert_eq!(
                memory_allocate(hsa_region_t { handle: 42 }, 64, &mut p),
                HSA_STATUS_ERROR_INVALID_REGION
            );
        }
        // More than the whole VRAM in one call.
        assert_eq!(
            alloc(vram_pool(), (DEFAULT_VRAM_MB << 20) + 1, 0),
            Err(HSA_STATUS_ERROR_INVALID_ALLOCATION)
        );
    }

    #[test]
    fn vram_accounting_refuses_past_capacity_and_recovers_after_free() {
        let topo: &'static Topology = Box::leak(Box::new(Topology::new(1, 64 * 4096)));
        let vram = topo.pool_of(&topo.agents[1], PoolKind::Vram).unwrap();
        let idx = pool_index(topo, vram.handle.handle).unwrap();
        let mut live = Vec::new();
        for _ in 0..64 {
            live.push(registry::allocate(topo, idx, 4000, 0).unwrap());
        }
        assert_eq!(
            registry::allocate(topo, idx, 1, 0),
            Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES)
        );
        assert_eq!(registry::free(live.pop().unwrap()), HSA_STATUS_SUCCESS);
        live.push(registry::allocate(topo, idx, 4096, 0).unwrap());
        for p in live {
            assert_eq!(registry::free(p), HSA_STATUS_SUCCESS);
        }
        assert_eq!(vram.used.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn pool_and_region_info() {
        let topo = topology();
        let cpu = topo.cpu();
        let kernarg = topo.pool_of(cpu, PoolKind::Kernarg).unwrap();
        let mut flags = 0u32;
        let mut size = 0usize;
        let mut allowed = false;
        let mut seg = 9u32;
        // SAFETY: out-pointers of the right types.
        unsafe {
            assert_eq!(
                memory_pool_get_info(
                    kernarg.handle,
                    HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                    (&mut flags as *mut u32).cast()
                ),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(flags, kernarg.global_flags());
            memory_pool_get_info(
                vram_pool(),
                HSA_AMD_MEMORY_POOL_INFO_SIZE,
                (&mut size as *mut usize).cast(),
            );
            assert_eq!(size, DEFAULT_VRAM_MB << 20);
            memory_pool_get_info(
                vram_pool(),
                HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                (&mut allowed as *mut bool).cast(),
            );
            assert!(allowed);
            assert_eq!(
                memory_pool_get_info(vram_pool(), 3, (&mut size as *mut usize).cast()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            let region = hsa_region_t {
                handle: kernarg.handle.handle,
            };
            region_get_info(
                region,
                HSA_REGION_INFO_GLOBAL_FLAGS,
                (&mut flags as *mut u32).cast(),
            );
            assert_eq!(
                flags,
                HSA_REGION_GLOBAL_FLAG_KERNARG | HSA_REGION_GLOBAL_FLAG_FINE_GRAINED
            );
            region_get_info(
                region,
                HSA_REGION_INFO_SEGMENT,
                (&mut seg as *mut u32).cast(),
            );
            assert_eq!(seg, HSA_REGION_SEGMENT_GLOBAL);
        }
        // Access: a GPU sees host pools by default, the CPU must be granted VRAM.
        let gpu = topo.gpus().next().unwrap();
        let mut access = 0u32;
        // SAFETY: out-pointer of the right type.
        unsafe {
            agent_memory_pool_get_info(
                gpu.handle,
                kernarg.handle,
                HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
                (&mut access as *mut u32).cast(),
            );
            assert_eq!(access, HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT);
            agent_memory_pool_get_info(
                cpu.handle,
                vram_pool(),
                HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
                (&mut access as *mut u32).cast(),
            );
            assert_eq!(access, HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT);
            let mut link = hsa_amd_memory_pool_link_info_t::default();
            assert_eq!(
                agent_memory_pool_get_info(
                    gpu.handle,
                    kernarg.handle,
                    HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO,
                    (&mut link as *mut hsa_amd_memory_pool_link_info_t).cast()
                ),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(link.link_type, HSA_AMD_LINK_INFO_TYPE_PCIE);
        }
    }

    unsafe extern "C" fn count_then_break(
        _pool: hsa_amd_memory_pool_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        // SAFETY: the test passes a u32 counter.
        let n = unsafe { &mut *data.cast::<u32>() };
        *n += 1;
        if *n == 2 {
            HSA_STATUS_INFO_BREAK
        } else {
            HSA_STATUS_SUCCESS
        }
    }

    unsafe extern "C" fn count_regions(_r: hsa_region_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: the test passes a u32 counter.
        unsafe { *data.cast::<u32>() += 1 };
        HSA_STATUS_SUCCESS
    }

    #[test]
    fn iteration_stops_on_break_and_regions_mirror_pools() {
        let cpu = topology().cpu();
        let mut n = 0u32;
        // SAFETY: callback and counter match.
        let st = unsafe {
            agent_iterate_memory_pools(
                cpu.handle,
                Some(count_then_break),
                (&mut n as *mut u32).cast(),
            )
        };
        assert_eq!((st, n), (HSA_STATUS_INFO_BREAK, 2));
        let mut r = 0u32;
        // SAFETY: as above.
        let st = unsafe {
            agent_iterate_regions(cpu.handle, Some(count_regions), (&mut r as *mut u32).cast())
        };
        assert_eq!((st, r as usize), (HSA_STATUS_SUCCESS, cpu.pools.len()));
        // SAFETY: bad agent.
        let st = unsafe {
            agent_iterate_regions(
                hsa_agent_t { handle: 1 },
                Some(count_regions),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_AGENT);
    }

    unsafe extern "C" fn on_free(ptr: *mut c_void, data: *mut c_void) {
        // SAFETY: the test passes a usize slot.
        unsafe { *data.cast::<usize>() = ptr as usize };
    }

    #[test]
    fn deallocation_callbacks_run_on_free() {
        let p = alloc(vram_pool(), 4096, 0).unwrap();
        let mut seen = 0usize;
        let data = (&mut seen as *mut usize).cast::<c_void>();
        // SAFETY: live allocation, valid callback.
        unsafe {
            assert_eq!(
                register_deallocation_callback(p, Some(on_free), data),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(
                deregister_deallocation_callback(p, Some(on_free)),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(
                deregister_deallocation_callback(p, Some(on_free)),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                register_deallocation_callback(p, Some(on_free), data),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(memory_free(p), HSA_STATUS_SUCCESS);
        }
        assert_eq!(seen, p as usize);
    }

    #[test]
    fn lock_reports_locked_and_unlock_forgets() {
        let mut buf = vec![0u8; 1000];
        let host = buf.as_mut_ptr().cast::<c_void>();
        let mut agent_ptr = std::ptr::null_mut();
        // SAFETY: a live buffer of 1000 bytes.
        unsafe {
            assert_eq!(
                memory_lock(host, 1000, std::ptr::null_mut(), 0, &mut agent_ptr),
                HSA_STATUS_SUCCESS
            );
        }
        assert_eq!(agent_ptr, host);
        let info = info_of(buf[500..].as_ptr().cast());
        assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_LOCKED);
        assert_eq!((info.agentBaseAddress, info.sizeInBytes), (host, 1000));
        assert_eq!(info.agentOwner, topology().cpu().handle);
        // SAFETY: locked range.
        assert_eq!(unsafe { memory_unlock(host) }, HSA_STATUS_SUCCESS);
        assert_eq!(info_of(host).type_, HSA_EXT_POINTER_TYPE_UNKNOWN);
    }

    #[test]
    fn fill_writes_count_dwords_and_copy_moves_bytes() {
        let p = alloc(vram_pool(), 4096, 0).unwrap();
        // SAFETY: 4096 bytes are allocated; fill 10 dwords.
        unsafe {
            assert_eq!(memory_fill(p, 0xA5A5_A5A5, 10), HSA_STATUS_SUCCESS);
            let d = p.cast::<u32>();
            assert_eq!(*d.add(9), 0xA5A5_A5A5);
            assert_eq!(*d.add(10), 0);
            assert_eq!(
                memory_fill(p.cast::<u8>().add(1).cast(), 1, 1),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            let mut out = [0u32; 11];
            assert_eq!(
                memory_copy(out.as_mut_ptr().cast(), p, 44),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(out[0], 0xA5A5_A5A5);
            assert_eq!(out[10], 0);
            assert_eq!(memory_free(p), HSA_STATUS_SUCCESS);
        }
    }
}
