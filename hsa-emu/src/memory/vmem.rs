//! The virtual-memory API of ROCm 6.x (`hsa_amd_vmem_*`), on real page mappings.
//!
//! - A reservation is a `PROT_NONE`, `MAP_NORESERVE` anonymous mapping.
//! - A physical handle is a memfd of the requested size, accounted against its pool like an
//!   allocation (fault injection applies); it lives while it has references (creation, import,
//!   every `retain_alloc_handle`) or mappings, whichever ends last.
//! - `hsa_amd_vmem_map` maps the memfd `MAP_SHARED | MAP_FIXED` at the address, so two
//!   mappings of one handle see the same bytes. A new mapping is readable and writable (the
//!   emulator's agents all run on the host, and no agent should fault on it); `set_access`
//!   records per-agent permissions and sets the pages to the union of them with `mprotect`.
//!   Unmapping puts a `PROT_NONE` reservation back.
//! - `hsa_amd_pointer_info` on a mapped address reports type `HSA`, base and size of that
//!   mapping, the handle pool's owner and flags; on an unmapped address of a reservation it
//!   reports `RESERVED_ADDR` with the reservation's base and size.
//! - Shareable handles are duplicated memfd descriptors.

use std::ffi::{c_int, c_void};

use rocprof_replay_sys::*;

use super::registry::{self, Mapping, REGISTRY, Registry, VmemHandle, containing, overlaps};
use crate::api::Tables;
use crate::ffi::{guard_status, write_out};
use crate::topology::{GRANULE, PoolKind, Topology, topology};

/// Tag in the upper bits of every vmem handle ("VM").
const HANDLE_TAG: u64 = 0x564D_0000_0000;

/// Fills the vmem slots (6.x layout only).
pub(super) fn install(t: &mut Tables) {
    t.amd.hsa_amd_vmem_address_reserve_fn = Some(address_reserve);
    t.amd.hsa_amd_vmem_address_reserve_align_fn = Some(address_reserve_align);
    t.amd.hsa_amd_vmem_address_free_fn = Some(address_free);
    t.amd.hsa_amd_vmem_handle_create_fn = Some(handle_create);
    t.amd.hsa_amd_vmem_handle_release_fn = Some(handle_release);
    t.amd.hsa_amd_vmem_map_fn = Some(vmem_map);
    t.amd.hsa_amd_vmem_unmap_fn = Some(vmem_unmap);
    t.amd.hsa_amd_vmem_set_access_fn = Some(set_access);
    t.amd.hsa_amd_vmem_get_access_fn = Some(get_access);
    t.amd.hsa_amd_vmem_export_shareable_handle_fn = Some(export_shareable_handle);
    t.amd.hsa_amd_vmem_import_shareable_handle_fn = Some(import_shareable_handle);
    t.amd.hsa_amd_vmem_retain_alloc_handle_fn = Some(retain_alloc_handle);
    t.amd.hsa_amd_vmem_get_alloc_properties_from_handle_fn = Some(get_alloc_properties_from_handle);
}

/// Reserves `size` bytes aligned to `align` (a power of two, at least a page), at `hint` when
/// the kernel grants it.
fn reserve(size: usize, hint: usize, align: usize) -> Result<usize, hsa_status_t> {
    if size == 0 || !align.is_power_of_two() {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let align = align.max(GRANULE);
    let size = registry::round_up(size, GRANULE).ok_or(HSA_STATUS_ERROR_INVALID_ARGUMENT)?;
    let hint = if hint % align == 0 { hint } else { 0 };
    let base = if align == GRANULE {
        registry::map_reserve(hint, size).ok_or(HSA_STATUS_ERROR_OUT_OF_RESOURCES)?
    } else {
        let span = size
            .checked_add(align)
            .ok_or(HSA_STATUS_ERROR_INVALID_ARGUMENT)?;
        let raw = match registry::map_reserve(hint, size) {
            Some(p) if p % align == 0 => {
                REGISTRY.write().reservations.insert(p, size);
                return Ok(p);
            }
            Some(p) => {
                registry::unmap(p, size);
                registry::map_reserve(0, span).ok_or(HSA_STATUS_ERROR_OUT_OF_RESOURCES)?
            }
            None => registry::map_reserve(0, span).ok_or(HSA_STATUS_ERROR_OUT_OF_RESOURCES)?,
        };
        let base = registry::round_up(raw, align).ok_or(HSA_STATUS_ERROR_OUT_OF_RESOURCES)?;
        if base > raw {
            registry::unmap(raw, base - raw);
        }
        let tail = raw + span - (base + size);
        if tail > 0 {
            registry::unmap(base + size, tail);
        }
        base
    };
    REGISTRY.write().reservations.insert(base, size);
    Ok(base)
}

/// `hsa_amd_vmem_address_reserve`.
unsafe extern "C" fn address_reserve(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    _flags: u64,
) -> hsa_status_t {
    guard_status(|| {
        if va.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match reserve(size, address as usize, GRANULE) {
            // SAFETY: non-null out-pointer supplied by the caller.
            Ok(p) => unsafe { write_out(va.cast(), p as *mut c_void) },
            Err(e) => e,
        }
    })
}

/// `hsa_amd_vmem_address_reserve_align`: `alignment` 0 means a page.
unsafe extern "C" fn address_reserve_align(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    alignment: u64,
    _flags: u64,
) -> hsa_status_t {
    guard_status(|| {
        if va.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let align = if alignment == 0 {
            GRANULE
        } else {
            alignment as usize
        };
        match reserve(size, address as usize, align) {
            // SAFETY: non-null out-pointer supplied by the caller.
            Ok(p) => unsafe { write_out(va.cast(), p as *mut c_void) },
            Err(e) => e,
        }
    })
}

/// `hsa_amd_vmem_address_free`: the base of a reservation with nothing mapped in it (SVM
/// attributes set on it are forgotten).
unsafe extern "C" fn address_free(va: *mut c_void, _size: usize) -> hsa_status_t {
    guard_status(|| {
        let base = va as usize;
        let mut reg = REGISTRY.write();
        let Some(&size) = reg.reservations.get(&base) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if overlaps(&reg.mappings, base, size, |m| m.size) {
            return HSA_STATUS_ERROR_RESOURCE_FREE;
        }
        reg.reservations.remove(&base);
        registry::unmap(base, size);
        super::svm::forget(base, size);
        HSA_STATUS_SUCCESS
    })
}

/// Index of the pool behind a handle.
fn pool_index(topo: &Topology, handle: hsa_amd_memory_pool_t) -> Option<usize> {
    let p = topo.pool(handle)?;
    topo.pools.iter().position(|q| std::ptr::eq(q, p))
}

/// Makes a memfd of `size` bytes.
fn memfd(size: usize) -> Option<c_int> {
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe { libc::memfd_create(c"hsa-emu-vmem".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the memfd just created.
    if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// Adds a handle record and returns its value.
fn insert_handle(reg: &mut Registry, h: VmemHandle) -> u64 {
    let value = HANDLE_TAG | reg.next_handle;
    reg.next_handle += 1;
    reg.handles.insert(value, h);
    value
}

/// Creates a physical handle of `size` bytes from pool `pool` of `topo`.
fn create_handle(
    topo: &'static Topology,
    pool: usize,
    size: usize,
    mem_type: u32,
) -> Result<u64, hsa_status_t> {
    let p = &topo.pools[pool];
    if size == 0 {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    if !p.alloc_allowed() || size > p.size {
        return Err(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    }
    let size = registry::round_up(size, GRANULE).ok_or(HSA_STATUS_ERROR_INVALID_ALLOCATION)?;
    if crate::faults::faults().allocation_fails() || !p.reserve(size) {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    let Some(fd) = memfd(size) else {
        p.release(size);
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    };
    let h = VmemHandle {
        fd,
        size,
        topo,
        pool,
        mem_type,
        accounted: true,
        refs: 1,
        maps: 0,
    };
    Ok(insert_handle(&mut REGISTRY.write(), h))
}

/// Destroys a handle with no references and no mappings left.
fn destroy_if_unused(reg: &mut Registry, handle: u64) {
    let unused = reg
        .handles
        .get(&handle)
        .is_some_and(|h| h.refs == 0 && h.maps == 0);
    if !unused {
        return;
    }
    if let Some(h) = reg.handles.remove(&handle) {
        // SAFETY: the handle owns its descriptor.
        unsafe { libc::close(h.fd) };
        if h.accounted {
            h.topo.pools[h.pool].release(h.size);
        }
    }
}

/// `hsa_amd_vmem_handle_create`.
unsafe extern "C" fn handle_create(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    type_: hsa_amd_memory_type_t,
    _flags: u64,
    memory_handle: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        let Some(pool) = pool_index(topo, pool) else {
            return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
        };
        if memory_handle.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match create_handle(topo, pool, size, type_) {
            // SAFETY: non-null out-pointer supplied by the caller.
            Ok(h) => unsafe {
                write_out(
                    memory_handle.cast(),
                    hsa_amd_vmem_alloc_handle_t { handle: h },
                )
            },
            Err(e) => e,
        }
    })
}

/// `hsa_amd_vmem_handle_release`: drops one reference; the memory goes when the last
/// reference and the last mapping are gone.
unsafe extern "C" fn handle_release(memory_handle: hsa_amd_vmem_alloc_handle_t) -> hsa_status_t {
    guard_status(|| {
        let mut reg = REGISTRY.write();
        let Some(h) = reg.handles.get_mut(&memory_handle.handle) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if h.refs == 0 {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        h.refs -= 1;
        destroy_if_unused(&mut reg, memory_handle.handle);
        HSA_STATUS_SUCCESS
    })
}

/// Whether `[base, base + size)` lies inside one reservation.
fn inside_reservation(reg: &Registry, base: usize, size: usize) -> bool {
    containing(&reg.reservations, base, |s| *s).is_some_and(|(b, &s)| base - b + size <= s)
}

/// `hsa_amd_vmem_map`: maps `size` bytes of the handle from `in_offset` at `va` (page-aligned,
/// inside a reservation, not overlapping another mapping).
unsafe extern "C" fn vmem_map(
    va: *mut c_void,
    size: usize,
    in_offset: usize,
    memory_handle: hsa_amd_vmem_alloc_handle_t,
    _flags: u64,
) -> hsa_status_t {
    guard_status(|| {
        let base = va as usize;
        if base == 0
            || size == 0
            || base % GRANULE != 0
            || size % GRANULE != 0
            || in_offset % GRANULE != 0
        {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let mut reg = REGISTRY.write();
        let Some(h) = reg.handles.get(&memory_handle.handle) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if in_offset.checked_add(size).is_none_or(|end| end > h.size) {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let (fd, pool) = (h.fd, &h.topo.pools[h.pool]);
        let (owner, global_flags) = (h.topo.owner(pool).handle, pool.global_flags());
        if !inside_reservation(&reg, base, size) || overlaps(&reg.mappings, base, size, |m| m.size)
        {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: the range lies inside a reservation this module owns and holds no mapping,
        // so MAP_FIXED replaces only our own PROT_NONE pages.
        let p = unsafe {
            libc::mmap(
                va,
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                in_offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        reg.mappings.insert(
            base,
            Mapping {
                size,
                handle: memory_handle.handle,
                owner,
                global_flags,
                user_data: 0,
                access: Vec::new(),
            },
        );
        if let Some(h) = reg.handles.get_mut(&memory_handle.handle) {
            h.maps += 1;
        }
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_unmap`: `va` must be the start of a mapping; its pages become reserved
/// (`PROT_NONE`) again.
unsafe extern "C" fn vmem_unmap(va: *mut c_void, _size: usize) -> hsa_status_t {
    guard_status(|| {
        let base = va as usize;
        let mut reg = REGISTRY.write();
        let Some(m) = reg.mappings.remove(&base) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        // SAFETY: the range is our own mapping inside our reservation; MAP_FIXED replaces it
        // with reserved pages.
        unsafe {
            libc::mmap(
                va,
                m.size,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if let Some(h) = reg.handles.get_mut(&m.handle) {
            h.maps -= 1;
        }
        destroy_if_unused(&mut reg, m.handle);
        HSA_STATUS_SUCCESS
    })
}

/// Page protection for the union of permissions.
fn prot_of(perms: u32) -> c_int {
    let mut prot = libc::PROT_NONE;
    if perms & HSA_ACCESS_PERMISSION_RO != 0 {
        prot |= libc::PROT_READ;
    }
    if perms & HSA_ACCESS_PERMISSION_WO != 0 {
        prot |= libc::PROT_READ | libc::PROT_WRITE;
    }
    prot
}

/// `hsa_amd_vmem_set_access`: records each descriptor on every mapping overlapping
/// `[va, va + size)` and sets those mappings' pages to the union of the recorded permissions.
unsafe extern "C" fn set_access(
    va: *mut c_void,
    size: usize,
    desc: *const hsa_amd_memory_access_desc_t,
    desc_cnt: usize,
) -> hsa_status_t {
    guard_status(|| {
        if va.is_null() || size == 0 || desc.is_null() || desc_cnt == 0 {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: the caller passes `desc_cnt` descriptors.
        let descs = unsafe { std::slice::from_raw_parts(desc, desc_cnt) };
        let topo = topology();
        for d in descs {
            if topo.agent(d.agent_handle).is_none() {
                return HSA_STATUS_ERROR_INVALID_AGENT;
            }
            if d.permissions > HSA_ACCESS_PERMISSION_RW {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
        }
        let base = va as usize;
        let end = base.saturating_add(size);
        let mut reg = REGISTRY.write();
        let first = containing(&reg.mappings, base, |m| m.size).map_or(base, |(b, _)| b);
        let keys: Vec<usize> = reg.mappings.range(first..end).map(|(k, _)| *k).collect();
        if keys.is_empty() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        for k in keys {
            let Some(m) = reg.mappings.get_mut(&k) else {
                continue;
            };
            for d in descs {
                match m.access.iter_mut().find(|(a, _)| *a == d.agent_handle) {
                    Some(entry) => entry.1 = d.permissions,
                    None => m.access.push((d.agent_handle, d.permissions)),
                }
            }
            let union = m.access.iter().fold(0, |acc, (_, p)| acc | p);
            // SAFETY: our own mapping.
            unsafe { libc::mprotect(k as *mut c_void, m.size, prot_of(union)) };
        }
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_get_access`: the permission recorded for `agent_handle` on the mapping
/// holding `va` (`HSA_ACCESS_PERMISSION_NONE`, 0, when none was set).
unsafe extern "C" fn get_access(
    va: *mut c_void,
    perms: *mut hsa_access_permission_t,
    agent_handle: hsa_agent_t,
) -> hsa_status_t {
    guard_status(|| {
        if topology().agent(agent_handle).is_none() {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        let reg = REGISTRY.read();
        let Some((_, m)) = containing(&reg.mappings, va as usize, |m| m.size) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let p = m
            .access
            .iter()
            .find(|(a, _)| *a == agent_handle)
            .map_or(0, |(_, p)| *p);
        // SAFETY: the caller's out-pointer (null is rejected by write_out).
        unsafe { write_out::<u32>(perms.cast(), p) }
    })
}

/// `hsa_amd_vmem_export_shareable_handle`: a duplicate of the handle's memfd.
unsafe extern "C" fn export_shareable_handle(
    dmabuf_fd: *mut c_int,
    handle: hsa_amd_vmem_alloc_handle_t,
    _flags: u64,
) -> hsa_status_t {
    guard_status(|| {
        if dmabuf_fd.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let reg = REGISTRY.read();
        let Some(h) = reg.handles.get(&handle.handle) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        // SAFETY: duplicating the handle's live descriptor.
        let fd = unsafe { libc::fcntl(h.fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        // SAFETY: non-null out-pointer supplied by the caller.
        unsafe { write_out(dmabuf_fd.cast(), fd) }
    })
}

/// Device and inode of a descriptor.
fn file_id(fd: c_int) -> Option<(u64, u64, usize)> {
    // SAFETY: zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable; a bad `fd` makes fstat fail.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino, st.st_size as usize))
}

/// `hsa_amd_vmem_import_shareable_handle`: a new handle on a duplicate of `dmabuf_fd`; it
/// inherits pool and type from the exporting handle when that is found in this process
/// (otherwise the CPU's fine-grained pool), and is not accounted again.
unsafe extern "C" fn import_shareable_handle(
    dmabuf_fd: c_int,
    handle: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    guard_status(|| {
        if handle.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some((dev, ino, size)) = file_id(dmabuf_fd) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if size == 0 {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let mut reg = REGISTRY.write();
        let origin = reg
            .handles
            .values()
            .find(|h| file_id(h.fd).is_some_and(|(d, i, _)| d == dev && i == ino))
            .map(|h| (h.topo, h.pool, h.mem_type));
        let (topo, pool, mem_type) = match origin {
            Some(o) => o,
            None => {
                let topo = topology();
                let Some(fine) = topo.pool_of(topo.cpu(), PoolKind::SystemFine) else {
                    return HSA_STATUS_ERROR;
                };
                let Some(idx) = pool_index(topo, fine.handle) else {
                    return HSA_STATUS_ERROR;
                };
                (topo, idx, MEMORY_TYPE_NONE)
            }
        };
        // SAFETY: duplicating the caller's descriptor (validated by fstat above).
        let fd = unsafe { libc::fcntl(dmabuf_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        let value = insert_handle(
            &mut reg,
            VmemHandle {
                fd,
                size,
                topo,
                pool,
                mem_type,
                accounted: false,
                refs: 1,
                maps: 0,
            },
        );
        // SAFETY: non-null out-pointer supplied by the caller.
        unsafe { write_out(handle.cast(), hsa_amd_vmem_alloc_handle_t { handle: value }) }
    })
}

/// `hsa_amd_vmem_retain_alloc_handle`: the handle mapped at `addr`, with one more reference
/// (release it with `hsa_amd_vmem_handle_release`).
unsafe extern "C" fn retain_alloc_handle(
    memory_handle: *mut hsa_amd_vmem_alloc_handle_t,
    addr: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        if memory_handle.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let mut reg = REGISTRY.write();
        let Some((_, m)) = containing(&reg.mappings, addr as usize, |m| m.size) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let value = m.handle;
        let Some(h) = reg.handles.get_mut(&value) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        h.refs += 1;
        // SAFETY: non-null out-pointer supplied by the caller.
        unsafe {
            write_out(
                memory_handle.cast(),
                hsa_amd_vmem_alloc_handle_t { handle: value },
            )
        }
    })
}

/// `hsa_amd_vmem_get_alloc_properties_from_handle`: the pool and memory type of a handle.
unsafe extern "C" fn get_alloc_properties_from_handle(
    memory_handle: hsa_amd_vmem_alloc_handle_t,
    pool: *mut hsa_amd_memory_pool_t,
    type_: *mut hsa_amd_memory_type_t,
) -> hsa_status_t {
    guard_status(|| {
        if pool.is_null() || type_.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let reg = REGISTRY.read();
        let Some(h) = reg.handles.get(&memory_handle.handle) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        // SAFETY: non-null out-pointers supplied by the caller.
        unsafe {
            write_out(pool.cast(), h.topo.pools[h.pool].handle);
            write_out::<u32>(type_.cast(), h.mem_type)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::pools::tests::vram_pool;

    fn info_of(p: usize) -> hsa_amd_pointer_info_t {
        let d = registry::describe(p);
        hsa_amd_pointer_info_t {
            type_: d.type_,
            agentBaseAddress: d.base as *mut c_void,
            sizeInBytes: d.size,
            agentOwner: d.owner,
            ..Default::default()
        }
    }

    #[test]
    fn two_mappings_of_one_handle_share_bytes() {
        let topo = topology();
        let gpu = topo.gpus().next().unwrap().handle;
        let mut va: *mut c_void = std::ptr::null_mut();
        let mut h = hsa_amd_vmem_alloc_handle_t::default();
        // SAFETY: valid out-pointers; every address used below comes from the reservation.
        unsafe {
            assert_eq!(
                address_reserve_align(&mut va, 4 * GRANULE, 0, 1 << 20, 0),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(va as usize % (1 << 20), 0);
            assert_eq!(
                handle_create(vram_pool(), 2 * GRANULE, MEMORY_TYPE_NONE, 0, &mut h),
                HSA_STATUS_SUCCESS
            );
            let second = va.cast::<u8>().add(2 * GRANULE).cast::<c_void>();
            assert_eq!(vmem_map(va, 2 * GRANULE, 0, h, 0), HSA_STATUS_SUCCESS);
            assert_eq!(vmem_map(second, 2 * GRANULE, 0, h, 0), HSA_STATUS_SUCCESS);
            // Overlapping or outside the handle is refused.
            assert_eq!(
                vmem_map(va, GRANULE, 0, h, 0),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            let desc = hsa_amd_memory_access_desc_t {
                permissions: HSA_ACCESS_PERMISSION_RW,
                agent_handle: gpu,
            };
            assert_eq!(set_access(va, 4 * GRANULE, &desc, 1), HSA_STATUS_SUCCESS);
            let mut perm = 0u32;
            assert_eq!(get_access(second, &mut perm, gpu), HSA_STATUS_SUCCESS);
            assert_eq!(perm, HSA_ACCESS_PERMISSION_RW);

            va.cast::<u32>().add(100).write(0xDEAD_BEEF);
            assert_eq!(second.cast::<u32>().add(100).read(), 0xDEAD_BEEF);
            second.cast::<u8>().add(GRANULE + 3).write(9);
            assert_eq!(va.cast::<u8>().add(GRANULE + 3).read(), 9);

            let info = info_of(second as usize + 10);
            assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_HSA);
            assert_eq!(
                (info.agentBaseAddress, info.sizeInBytes),
                (second, 2 * GRANULE)
            );
            assert_eq!(info.agentOwner, gpu);

            let mut again = hsa_amd_vmem_alloc_handle_t::default();
            assert_eq!(retain_alloc_handle(&mut again, second), HSA_STATUS_SUCCESS);
            assert_eq!(again, h);
            let (mut pool, mut ty) = (hsa_amd_memory_pool_t::default(), 9u32);
            assert_eq!(
                get_alloc_properties_from_handle(h, &mut pool, &mut ty),
                HSA_STATUS_SUCCESS
            );
            assert_eq!((pool, ty), (vram_pool(), MEMORY_TYPE_NONE));

            // Export and import: a third mapping through the imported handle sees the data.
            let mut fd = -1;
            assert_eq!(export_shareable_handle(&mut fd, h, 0), HSA_STATUS_SUCCESS);
            let mut imported = hsa_amd_vmem_alloc_handle_t::default();
            assert_eq!(
                import_shareable_handle(fd, &mut imported),
                HSA_STATUS_SUCCESS
            );
            libc::close(fd);
            assert_eq!(
                address_free(va, 4 * GRANULE),
                HSA_STATUS_ERROR_RESOURCE_FREE
            );
            assert_eq!(vmem_unmap(second, 2 * GRANULE), HSA_STATUS_SUCCESS);
            assert_eq!(
                info_of(second as usize).type_,
                HSA_EXT_POINTER_TYPE_RESERVED_ADDR
            );
            assert_eq!(
                vmem_map(second, GRANULE, 0, imported, 0),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(second.cast::<u32>().add(100).read(), 0xDEAD_BEEF);
            assert_eq!(vmem_unmap(second, GRANULE), HSA_STATUS_SUCCESS);
            assert_eq!(handle_release(imported), HSA_STATUS_SUCCESS);

            assert_eq!(vmem_unmap(va, 2 * GRANULE), HSA_STATUS_SUCCESS);
            assert_eq!(handle_release(again), HSA_STATUS_SUCCESS);
            assert!(REGISTRY.read().handles.contains_key(&h.handle));
            assert_eq!(handle_release(h), HSA_STATUS_SUCCESS);
            assert!(!REGISTRY.read().handles.contains_key(&h.handle));
            assert_eq!(handle_release(h), HSA_STATUS_ERROR_INVALID_ARGUMENT);
            assert_eq!(address_free(va, 4 * GRANULE), HSA_STATUS_SUCCESS);
            assert_eq!(info_of(va as usize).type_, HSA_EXT_POINTER_TYPE_UNKNOWN);
        }
    }

    #[test]
    fn handles_are_accounted_against_vram() {
        let topo: &'static Topology = Box::leak(Box::new(Topology::new(1, 4 * GRANULE)));
        let vram = topo.pool_of(&topo.agents[1], PoolKind::Vram).unwrap();
        let idx = pool_index(topo, vram.handle).unwrap();
        let a = create_handle(topo, idx, 3 * GRANULE, 0).unwrap();
        assert_eq!(
            create_handle(topo, idx, 2 * GRANULE, 0),
            Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES)
        );
        // SAFETY: a live handle.
        let st = unsafe { handle_release(hsa_amd_vmem_alloc_handle_t { handle: a }) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(vram.used.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}
