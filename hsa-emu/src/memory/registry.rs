//! The address registry: every range the runtime knows about (pool allocations, locked host
//! ranges, vmem reservations, vmem handles and mappings, IPC attachments), the page-mapping
//! primitives, and the description of an address that `hsa_amd_pointer_info` reports.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};

use parking_lot::RwLock;
use rocprof_replay_sys::*;

use crate::topology::{DeviceKind, GRANULE, Pool, PoolKind, Topology};

/// `HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG` of `hsa_amd_memory_pool_allocate`.
pub(super) const ALLOC_FLAG_EXECUTABLE: u32 = 4;

/// A deallocation callback registered with `hsa_amd_register_deallocation_callback`.
#[derive(Clone, Copy)]
pub(super) struct DeallocCallback {
    /// The function.
    pub(super) callback: unsafe extern "C" fn(ptr: *mut c_void, user_data: *mut c_void),
    /// Its user data.
    pub(super) user_data: usize,
    /// The pointer it was registered for (passed back to it).
    pub(super) ptr: usize,
}

/// One live pool (or region) allocation.
pub(super) struct Allocation {
    /// Mapped size in bytes (the request rounded up to the pool granule).
    pub(super) size: usize,
    /// The machine the pool belongs to.
    pub(super) topo: &'static Topology,
    /// Index of the pool in `topo.pools`.
    pub(super) pool: usize,
    /// `hsa_amd_memory_pool_allocate` flags (0 for `hsa_memory_allocate`).
    pub(super) flags: u32,
    /// `hsa_amd_pointer_info_set_userdata` value.
    pub(super) user_data: usize,
    /// Agents given access with `hsa_amd_agents_allow_access` / `hsa_memory_assign_agent`.
    pub(super) granted: Vec<hsa_agent_t>,
    /// Callbacks to run when the allocation is freed.
    pub(super) callbacks: Vec<DeallocCallback>,
    /// The memfd the allocation's pages live in since its first `hsa_amd_ipc_memory_create`
    /// (closed when the allocation is freed); `None` while it is private anonymous memory.
    pub(super) exported: Option<Exported>,
}

/// The shared backing of an allocation exported with `hsa_amd_ipc_memory_create`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Exported {
    /// The memfd (owned by the allocation).
    pub(super) fd: c_int,
    /// Its inode number, which IPC handles carry so that a reused descriptor number is caught.
    pub(super) inode: u64,
}

impl Allocation {
    /// The pool the allocation came from.
    pub(super) fn pool(&self) -> &'static Pool {
        &self.topo.pools[self.pool]
    }
}

/// A host range registered with `hsa_amd_memory_lock` / `hsa_amd_memory_lock_to_pool`.
pub(super) struct Locked {
    /// Length in bytes.
    pub(super) size: usize,
    /// Owner reported by pointer info (the CPU, or the pool's owner).
    pub(super) owner: hsa_agent_t,
    /// Global flags reported by pointer info.
    pub(super) global_flags: u32,
    /// `hsa_amd_pointer_info_set_userdata` value.
    pub(super) user_data: usize,
    /// Agents given access (empty: every agent).
    pub(super) granted: Vec<hsa_agent_t>,
    /// How many times the range was locked (unlock undoes one).
    pub(super) count: usize,
}

/// Physical memory made by `hsa_amd_vmem_handle_create` or imported.
pub(super) struct VmemHandle {
    /// The memfd backing it (owned).
    pub(super) fd: i32,
    /// Size in bytes.
    pub(super) size: usize,
    /// The machine its pool belongs to.
    pub(super) topo: &'static Topology,
    /// Index of the pool in `topo.pools`.
    pub(super) pool: usize,
    /// `hsa_amd_memory_type_t` given at creation.
    pub(super) mem_type: u32,
    /// Whether `size` was accounted against the pool (false for imports).
    pub(super) accounted: bool,
    /// References: creation/import and every `retain_alloc_handle`.
    pub(super) refs: usize,
    /// Live mappings of it.
    pub(super) maps: usize,
}

/// One `hsa_amd_vmem_map` mapping.
pub(super) struct Mapping {
    /// Length in bytes.
    pub(super) size: usize,
    /// The handle mapped.
    pub(super) handle: u64,
    /// Owner agent of the handle's pool.
    pub(super) owner: hsa_agent_t,
    /// Global flags of the handle's pool.
    pub(super) global_flags: u32,
    /// `hsa_amd_pointer_info_set_userdata` value.
    pub(super) user_data: usize,
    /// Permissions set per agent with `hsa_amd_vmem_set_access`.
    pub(super) access: Vec<(hsa_agent_t, hsa_access_permission_t)>,
}

/// One `hsa_amd_ipc_memory_attach` mapping.
pub(super) struct IpcMapping {
    /// Length in bytes (the exported allocation's rounded size).
    pub(super) size: usize,
    /// Owner reported by pointer info (the first mapping agent, else the first GPU).
    pub(super) owner: hsa_agent_t,
    /// Global flags of the exporting pool (carried in the handle).
    pub(super) global_flags: u32,
    /// `hsa_amd_pointer_info_set_userdata` value.
    pub(super) user_data: usize,
    /// Agents that may access it: the mapping agents, or every agent when none were named.
    pub(super) accessible: Vec<hsa_agent_t>,
}

/// Every range the runtime knows about, keyed by base address.
pub(super) struct Registry {
    /// Pool and region allocations.
    pub(super) allocs: BTreeMap<usize, Allocation>,
    /// Locked host ranges.
    pub(super) locked: BTreeMap<usize, Locked>,
    /// vmem address reservations: base -> size.
    pub(super) reservations: BTreeMap<usize, usize>,
    /// vmem physical handles by handle value.
    pub(super) handles: BTreeMap<u64, VmemHandle>,
    /// vmem mappings by virtual address.
    pub(super) mappings: BTreeMap<usize, Mapping>,
    /// IPC attachments by mapped address.
    pub(super) ipc: BTreeMap<usize, IpcMapping>,
    /// Next vmem handle number.
    pub(super) next_handle: u64,
}

/// The process's registry.
pub(super) static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    allocs: BTreeMap::new(),
    locked: BTreeMap::new(),
    reservations: BTreeMap::new(),
    handles: BTreeMap::new(),
    mappings: BTreeMap::new(),
    ipc: BTreeMap::new(),
    next_handle: 1,
});

/// The entry of `map` whose `[base, base + size)` contains `addr`.
pub(super) fn containing<V>(
    map: &BTreeMap<usize, V>,
    addr: usize,
    size: impl Fn(&V) -> usize,
) -> Option<(usize, &V)> {
    let (&base, v) = map.range(..=addr).next_back()?;
    (addr - base < size(v)).then_some((base, v))
}

/// Mutable variant of [`containing`].
pub(super) fn containing_mut<V>(
    map: &mut BTreeMap<usize, V>,
    addr: usize,
    size: impl Fn(&V) -> usize,
) -> Option<(usize, &mut V)> {
    let (&base, v) = map.range_mut(..=addr).next_back()?;
    (addr - base < size(v)).then_some((base, v))
}

/// Whether `[base, base + size)` overlaps any entry of `map`.
pub(super) fn overlaps<V>(
    map: &BTreeMap<usize, V>,
    base: usize,
    size: usize,
    len: impl Fn(&V) -> usize,
) -> bool {
    let end = base.saturating_add(size);
    let before = map
        .range(..base)
        .next_back()
        .is_some_and(|(&b, v)| b + len(v) > base);
    before || map.range(base..end).next().is_some()
}

/// `size` rounded up to a multiple of `granule` (a power of two); `None` on overflow.
pub(super) fn round_up(size: usize, granule: usize) -> Option<usize> {
    size.checked_add(granule - 1).map(|s| s & !(granule - 1))
}

/// Maps `size` bytes of zeroed, page-aligned anonymous memory (executable when asked).
pub(super) fn map_anonymous(size: usize, exec: bool) -> Option<usize> {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
    let mut p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            rw | if exec { libc::PROT_EXEC } else { 0 },
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED && exec {
        // W+X may be refused by policy; the host code never runs from it anyway.
        // SAFETY: as above.
        p = unsafe { libc::mmap(std::ptr::null_mut(), size, rw, flags, -1, 0) };
    }
    (p != libc::MAP_FAILED).then_some(p as usize)
}

/// Reserves `size` bytes of address space (no access, no backing), at `hint` if possible.
pub(super) fn map_reserve(hint: usize, size: usize) -> Option<usize> {
    // SAFETY: a fresh PROT_NONE mapping; without MAP_FIXED the hint never replaces a mapping.
    let p = unsafe {
        libc::mmap(
            hint as *mut c_void,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

/// Unmaps a range this module mapped.
pub(super) fn unmap(base: usize, size: usize) {
    // SAFETY: callers pass a range they own (removed from the registry first).
    unsafe { libc::munmap(base as *mut c_void, size) };
}

/// What a pool grants an agent by default (`HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS`).
pub(super) fn default_access(
    topo: &Topology,
    agent: usize,
    pool: &Pool,
) -> hsa_amd_memory_pool_access_t {
    if pool.owner == agent {
        return HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
    }
    if pool.kind == PoolKind::Group {
        return HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;
    }
    let host_pool = topo.owner(pool).kind == DeviceKind::Cpu;
    if host_pool || pool.accessible_by_all() {
        HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT
    } else {
        HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
    }
}

/// Agents that may access `pool` without being granted access, in agent order.
fn default_agents(topo: &Topology, pool: &Pool) -> Vec<hsa_agent_t> {
    (0..topo.agents.len())
        .filter(|&a| default_access(topo, a, pool) == HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT)
        .map(|a| topo.agents[a].handle)
        .collect()
}

/// Appends the agents of `extra` not already in `list`.
fn merge(mut list: Vec<hsa_agent_t>, extra: &[hsa_agent_t]) -> Vec<hsa_agent_t> {
    for a in extra {
        if !list.contains(a) {
            list.push(*a);
        }
    }
    list
}

/// What pointer info reports for an address.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Described {
    /// `HSA_EXT_POINTER_TYPE_*`.
    pub(super) type_: hsa_amd_pointer_type_t,
    /// Base address (agent and host views are the same memory).
    pub(super) base: usize,
    /// Size in bytes.
    pub(super) size: usize,
    /// User data.
    pub(super) user_data: usize,
    /// Owning agent.
    pub(super) owner: hsa_agent_t,
    /// Global flags of the backing pool.
    pub(super) global_flags: u32,
    /// Agents that may access the range.
    pub(super) accessible: Vec<hsa_agent_t>,
}

impl Described {
    fn unknown() -> Described {
        Described {
            type_: HSA_EXT_POINTER_TYPE_UNKNOWN,
            base: 0,
            size: 0,
            user_data: 0,
            owner: hsa_agent_t { handle: 0 },
            global_flags: 0,
            accessible: Vec::new(),
        }
    }
}

/// Describes `addr`: pool allocations first, then IPC attachments, vmem mappings, locked ranges
/// and vmem reservations; anything else is `UNKNOWN` with every other field zero.
pub(super) fn describe(addr: usize) -> Described {
    let reg = REGISTRY.read();
    if let Some((base, a)) = containing(&reg.allocs, addr, |a| a.size) {
        let pool = a.pool();
        return Described {
            type_: HSA_EXT_POINTER_TYPE_HSA,
            base,
            size: a.size,
            user_data: a.user_data,
            owner: a.topo.owner(pool).handle,
            global_flags: pool.global_flags(),
            accessible: merge(default_agents(a.topo, pool), &a.granted),
        };
    }
    if let Some((base, m)) = containing(&reg.ipc, addr, |m| m.size) {
        return Described {
            type_: HSA_EXT_POINTER_TYPE_IPC,
            base,
            size: m.size,
            user_data: m.user_data,
            owner: m.owner,
            global_flags: m.global_flags,
            accessible: m.accessible.clone(),
        };
    }
    if let Some((base, m)) = containing(&reg.mappings, addr, |m| m.size) {
        let granted: Vec<hsa_agent_t> = m
            .access
            .iter()
            .filter(|(_, p)| *p != 0)
            .map(|(a, _)| *a)
            .collect();
        return Described {
            type_: HSA_EXT_POINTER_TYPE_HSA,
            base,
            size: m.size,
            user_data: m.user_data,
            owner: m.owner,
            global_flags: m.global_flags,
            accessible: merge(vec![m.owner], &granted),
        };
    }
    if let Some((base, l)) = containing(&reg.locked, addr, |l| l.size) {
        let topo = crate::topology::topology();
        let accessible = if l.granted.is_empty() {
            topo.agents.iter().map(|a| a.handle).collect()
        } else {
            merge(vec![topo.cpu().handle], &l.granted)
        };
        return Described {
            type_: HSA_EXT_POINTER_TYPE_LOCKED,
            base,
            size: l.size,
            user_data: l.user_data,
            owner: l.owner,
            global_flags: l.global_flags,
            accessible,
        };
    }
    if let Some((base, &size)) = containing(&reg.reservations, addr, |s| *s) {
        return Described {
            type_: HSA_EXT_POINTER_TYPE_RESERVED_ADDR,
            base,
            size,
            ..Described::unknown()
        };
    }
    Described::unknown()
}

/// Allocates `size` bytes from pool `pool` of `topo`: fault injection, capacity accounting,
/// a zeroed page-aligned mapping, and a registry entry. Returns the base address.
pub(super) fn allocate(
    topo: &'static Topology,
    pool: usize,
    size: usize,
    flags: u32,
) -> Result<usize, hsa_status_t> {
    let p = &topo.pools[pool];
    if size == 0 {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    if !p.alloc_allowed() || size > p.size {
        return Err(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    }
    let Some(rounded) = round_up(size, GRANULE) else {
        return Err(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    };
    if crate::faults::faults().allocation_fails() {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    if !p.reserve(rounded) {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    let Some(base) = map_anonymous(rounded, flags & ALLOC_FLAG_EXECUTABLE != 0) else {
        p.release(rounded);
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    };
    REGISTRY.write().allocs.insert(
        base,
        Allocation {
            size: rounded,
            topo,
            pool,
            flags,
            user_data: 0,
            granted: Vec::new(),
            callbacks: Vec::new(),
            exported: None,
        },
    );
    Ok(base)
}

/// Frees the allocation based at `ptr`: deallocation callbacks run (outside the lock, after the
/// entry is gone), then the memory is unmapped and its bytes returned to the pool. An exported
/// allocation's memfd is closed, so its IPC handles stop attaching (existing attachments keep
/// their pages), and SVM attributes recorded on its pages are forgotten.
pub(super) fn free(ptr: usize) -> hsa_status_t {
    if ptr == 0 {
        return HSA_STATUS_SUCCESS;
    }
    let Some(a) = REGISTRY.write().allocs.remove(&ptr) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    for cb in &a.callbacks {
        // SAFETY: a callback the application registered for this allocation, called once with
        // the pointer and data it registered.
        unsafe { (cb.callback)(cb.ptr as *mut c_void, cb.user_data as *mut c_void) };
    }
    unmap(ptr, a.size);
    if let Some(e) = a.exported {
        // SAFETY: the allocation owned this descriptor; nothing else closes it.
        unsafe { libc::close(e.fd) };
    }
    super::svm::forget(ptr, a.size);
    a.pool().release(a.size);
    HSA_STATUS_SUCCESS
}

/// Flags an allocation was made with (tests and diagnostics).
#[cfg(test)]
pub(super) fn allocation_flags(ptr: usize) -> Option<u32> {
    REGISTRY.read().allocs.get(&ptr).map(|a| a.flags)
}
