//! Inter-process memory: `hsa_amd_ipc_memory_create`, `_attach` and `_detach`, on memfds.
//!
//! - **Export.** `create` takes the base of a live allocation of a GPU's pool and a length that
//!   is the allocation's (ROCr's rule: the full length, or it rounded up to a page). The first
//!   export moves the allocation, in place, into a memfd: the pages holding a non-zero byte are
//!   written into it, and the memfd is mapped `MAP_SHARED | MAP_FIXED` over the same address
//!   range, so the exporter's pointer stays valid and from then on shares its pages with every
//!   attachment. Pages never written stay holes of the memfd, so exporting a large, mostly
//!   unused allocation does not make it resident. The memfd belongs to the allocation and is
//!   closed when the allocation is freed. Later exports of the allocation reuse it.
//! - **Handle.** The 32-byte `hsa_amd_ipc_memory_t` holds eight `u32` words: the magic
//!   `"HEIP"`, the version (low 16 bits) with the exporting pool's global flags (high 16 bits),
//!   the exporter's pid, the memfd's descriptor number, the length (low, high) and the memfd's
//!   inode number (low, high).
//! - **Attach.** `attach` opens `/proc/<pid>/fd/<fd>` (allowed to a process of the same user,
//!   and to the exporting process itself), checks that it is a regular file with the handle's
//!   inode and at least its length, and maps it `MAP_SHARED` at a fresh address, so attaching a
//!   handle in the process that made it gives a second address aliasing the same bytes. The
//!   mapping is registered: `hsa_amd_pointer_info` reports it as `HSA_EXT_POINTER_TYPE_IPC`
//!   with its base and the handle's length, the exporting pool's flags, and as owner the first
//!   mapping agent (the first GPU when none is named). Copies, fills and kernels use it like any
//!   other memory, since every address is host memory.
//! - **Detach** unmaps an attachment; anything but an attachment's base is `INVALID_ARGUMENT`.
//!
//! Caveats: bytes written into an allocation by another thread (a kernel, a copy) while its
//! first export runs may be lost, because they can land in the private pages after they were
//! copied. Freeing the exporter's allocation invalidates its handles: a later attach fails
//! with `INVALID_ARGUMENT`, while attachments made before keep the pages. Neither export nor
//! attach is an allocation for the fault knobs (`HSA_EMU_FAIL_ALLOC_*` do not count them) or
//! for VRAM accounting: the exported allocation is already accounted, and an attachment maps
//! the same memory, as an imported vmem handle does.

use std::ffi::{CString, c_int, c_void};

use rocprof_replay_sys::*;

use super::registry::{self, ALLOC_FLAG_EXECUTABLE, Exported, IpcMapping, REGISTRY};
use crate::api::Tables;
use crate::ffi::{guard_status, write_out};
use crate::topology::{DeviceKind, GRANULE, topology};

/// First word of every handle hsa-emu makes: `"HEIP"`.
const HANDLE_MAGIC: u32 = u32::from_le_bytes(*b"HEIP");
/// Layout version of the handle (low 16 bits of its second word).
const HANDLE_VERSION: u32 = 1;
/// Largest length one handle may share: ROCr refuses more (a limit of its thunk, about 8 TB).
const MAX_LEN: usize = 0x7FF_FFFF_F000;

/// Fills the IPC memory slots.
pub(super) fn install(t: &mut Tables) {
    t.amd.hsa_amd_ipc_memory_create_fn = Some(ipc_memory_create);
    t.amd.hsa_amd_ipc_memory_attach_fn = Some(ipc_memory_attach);
    t.amd.hsa_amd_ipc_memory_detach_fn = Some(ipc_memory_detach);
    t.amd.hsa_amd_portable_export_dmabuf_fn = Some(portable_export_dmabuf);
    t.amd.hsa_amd_portable_export_dmabuf_v2_fn = Some(portable_export_dmabuf_v2);
    t.amd.hsa_amd_portable_close_dmabuf_fn = Some(portable_close_dmabuf);
}

/// What an IPC handle carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IpcHandle {
    /// The exporting process.
    pid: u32,
    /// The memfd's descriptor number in the exporting process.
    fd: c_int,
    /// Length of the shared memory (the allocation's rounded size).
    size: usize,
    /// The memfd's inode number.
    inode: u64,
    /// `HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_*` of the exporting pool.
    global_flags: u32,
}

impl IpcHandle {
    /// The handle's words (see the module documentation).
    fn encode(&self) -> hsa_amd_ipc_memory_t {
        let size = self.size as u64;
        hsa_amd_ipc_memory_t {
            handle: [
                HANDLE_MAGIC,
                HANDLE_VERSION | (self.global_flags << 16),
                self.pid,
                self.fd as u32,
                size as u32,
                (size >> 32) as u32,
                self.inode as u32,
                (self.inode >> 32) as u32,
            ],
        }
    }

    /// Reads a handle; `None` unless it has hsa-emu's magic and version and a plausible
    /// descriptor and length.
    fn decode(h: &hsa_amd_ipc_memory_t) -> Option<IpcHandle> {
        let w = h.handle;
        if w[0] != HANDLE_MAGIC || w[1] & 0xFFFF != HANDLE_VERSION {
            return None;
        }
        let fd = c_int::try_from(w[3]).ok()?;
        let size = usize::try_from(u64::from(w[4]) | (u64::from(w[5]) << 32)).ok()?;
        if size == 0 || size % GRANULE != 0 || size > MAX_LEN {
            return None;
        }
        Some(IpcHandle {
            pid: w[2],
            fd,
            size,
            inode: u64::from(w[6]) | (u64::from(w[7]) << 32),
            global_flags: w[1] >> 16,
        })
    }
}

/// Whether `len` names the whole of `size` bytes: itself, or it rounded up to a page (ROCr
/// accepts the allocation's requested size or its page-aligned size; hsa-emu keeps only the
/// rounded one).
fn is_full_length(len: usize, size: usize) -> bool {
    len != 0 && len <= MAX_LEN && registry::round_up(len, GRANULE) == Some(size)
}

/// Whether the page at `addr` holds only zero bytes.
///
/// # Safety
/// `addr` must be the start of a readable page that stays mapped during the call.
unsafe fn page_is_zero(addr: usize) -> bool {
    let words = addr as *const u64;
    (0..GRANULE / 8).all(|i| {
        // SAFETY: inside the page (caller contract); volatile, as other threads may write it.
        unsafe { words.add(i).read_volatile() == 0 }
    })
}

/// Writes `len` bytes at `src` into `fd` at `offset`; false on an error.
///
/// # Safety
/// `[src, src + len)` must be readable and stay mapped during the call.
unsafe fn write_all(fd: c_int, src: usize, len: usize, offset: usize) -> bool {
    let mut done = 0;
    while done < len {
        let Ok(at) = libc::off_t::try_from(offset + done) else {
            return false;
        };
        // SAFETY: the caller's readable range; `fd` is our memfd.
        let n = unsafe { libc::pwrite(fd, (src + done) as *const c_void, len - done, at) };
        if n > 0 {
            done += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {
            continue;
        } else {
            return false;
        }
    }
    true
}

/// Writes the pages of `[base, base + size)` holding a non-zero byte into `fd` at the same
/// offsets; false on an error.
///
/// # Safety
/// The range must be page-aligned, readable, and stay mapped during the call.
unsafe fn copy_written_pages(base: usize, size: usize, fd: c_int) -> bool {
    let mut page = 0;
    while page < size {
        // SAFETY: a page of the caller's range.
        if unsafe { page_is_zero(base + page) } {
            page += GRANULE;
            continue;
        }
        let start = page;
        // SAFETY: as above.
        while page < size && !unsafe { page_is_zero(base + page) } {
            page += GRANULE;
        }
        // SAFETY: a sub-range of the caller's range.
        if !unsafe { write_all(fd, base + start, page - start, start) } {
            return false;
        }
    }
    true
}

/// Maps `size` bytes of `fd` shared and writable (and executable when asked and allowed), at
/// `fixed` when given (replacing what is there) or at an address of the kernel's choosing.
///
/// # Safety
/// A `fixed` range must be one this module may replace (the caller owns it).
unsafe fn map_shared(fixed: Option<usize>, size: usize, fd: c_int, exec: bool) -> Option<usize> {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let (addr, flags) = match fixed {
        Some(a) => (a as *mut c_void, libc::MAP_SHARED | libc::MAP_FIXED),
        None => (std::ptr::null_mut(), libc::MAP_SHARED),
    };
    let map = |prot| {
        // SAFETY: a shared mapping of our memfd; a fixed address is the caller's own range.
        unsafe { libc::mmap(addr, size, prot, flags, fd, 0) }
    };
    let mut p = if exec {
        map(rw | libc::PROT_EXEC)
    } else {
        libc::MAP_FAILED
    };
    if p == libc::MAP_FAILED {
        // W+X may be refused by policy; the host code never runs from it anyway.
        p = map(rw);
    }
    (p != libc::MAP_FAILED).then_some(p as usize)
}

/// Inode, kind and size of an open descriptor.
fn fstat(fd: c_int) -> Option<libc::stat> {
    // SAFETY: zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable; a bad `fd` makes fstat fail.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st)
}

/// Whether `st` is the memfd a handle names.
fn is_exported_file(st: &libc::stat, h: &IpcHandle) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
        && st.st_ino == h.inode
        && usize::try_from(st.st_size).is_ok_and(|s| s >= h.size)
}

/// Moves the allocation `[base, base + size)` into a new memfd, in place.
///
/// # Safety
/// The range must be a live allocation that stays allocated during the call (the caller holds
/// the registry's write lock).
unsafe fn move_to_memfd(base: usize, size: usize, exec: bool) -> Result<Exported, hsa_status_t> {
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe { libc::memfd_create(c"hsa-emu-ipc".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    let fail = |status| {
        // SAFETY: closing the memfd made above, which nothing else uses.
        unsafe { libc::close(fd) };
        Err(status)
    };
    let Ok(len) = libc::off_t::try_from(size) else {
        return fail(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    };
    // SAFETY: `fd` is the memfd made above.
    if unsafe { libc::ftruncate(fd, len) } != 0 {
        return fail(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    // SAFETY: the live, page-aligned allocation (caller contract).
    if !unsafe { copy_written_pages(base, size, fd) } {
        return fail(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    let Some(st) = fstat(fd) else {
        return fail(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    };
    // SAFETY: the allocation's own range (caller contract); MAP_FIXED replaces its private pages
    // with the memfd's, which now hold the same bytes.
    if unsafe { map_shared(Some(base), size, fd, exec) } != Some(base) {
        return fail(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    Ok(Exported {
        fd,
        inode: st.st_ino,
    })
}

/// Exports the allocation based at `ptr` (see the module documentation).
fn create(ptr: usize, len: usize) -> Result<IpcHandle, hsa_status_t> {
    let mut reg = REGISTRY.write();
    let Some(a) = reg.allocs.get_mut(&ptr) else {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    };
    let pool = a.pool();
    if a.topo.owner(pool).kind != DeviceKind::Gpu || !is_full_length(len, a.size) {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let exported = shareable(ptr, a)?;
    Ok(IpcHandle {
        pid: std::process::id(),
        fd: exported.fd,
        size: a.size,
        inode: exported.inode,
        global_flags: pool.global_flags(),
    })
}

/// The shared backing of the allocation `a` based at `base`, made on first use (the caller
/// holds the registry's write lock).
fn shareable(base: usize, a: &mut registry::Allocation) -> Result<Exported, hsa_status_t> {
    if let Some(e) = a.exported {
        return Ok(e);
    }
    let exec = a.flags & ALLOC_FLAG_EXECUTABLE != 0;
    // SAFETY: a live allocation; the caller's write lock keeps it from being freed meanwhile.
    let e = unsafe { move_to_memfd(base, a.size, exec) }?;
    a.exported = Some(e);
    Ok(e)
}

/// A new descriptor of the memory of the GPU allocation holding `[ptr, ptr + size)` and the
/// offset of `ptr` in it (`hsa_amd_portable_export_dmabuf`): a duplicate of the allocation's
/// memfd, made shareable on first use as for IPC. The caller closes it
/// (`hsa_amd_portable_close_dmabuf`).
fn export_dmabuf(ptr: usize, size: usize) -> Result<(c_int, u64), hsa_status_t> {
    if ptr == 0 || size == 0 {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let mut reg = REGISTRY.write();
    let Some((base, a)) = registry::containing_mut(&mut reg.allocs, ptr, |a| a.size) else {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    };
    if a.topo.owner(a.pool()).kind != DeviceKind::Gpu
        || ptr.checked_add(size).is_none_or(|end| end > base + a.size)
    {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let e = shareable(base, a)?;
    // SAFETY: duplicating the allocation's own memfd, which its registry entry keeps open.
    let fd = unsafe { libc::fcntl(e.fd, libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    Ok((fd, (ptr - base) as u64))
}

/// `hsa_amd_portable_export_dmabuf`: see [`export_dmabuf`]. Null out-pointers, or a range
/// not inside one GPU allocation, are `INVALID_ARGUMENT`.
unsafe extern "C" fn portable_export_dmabuf(
    ptr: *const c_void,
    size: usize,
    dmabuf: *mut c_int,
    offset: *mut u64,
) -> hsa_status_t {
    guard_status(|| {
        if dmabuf.is_null() || offset.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match export_dmabuf(ptr as usize, size) {
            Ok((fd, off)) => {
                // SAFETY: non-null out-pointers supplied by the caller.
                unsafe {
                    dmabuf.write(fd);
                    offset.write(off);
                }
                HSA_STATUS_SUCCESS
            }
            Err(e) => e,
        }
    })
}

/// `hsa_amd_portable_export_dmabuf_v2`: as the first form; `flags` may ask for a PCIe mapping
/// (1), which changes nothing here; other bits are `INVALID_ARGUMENT`.
unsafe extern "C" fn portable_export_dmabuf_v2(
    ptr: *const c_void,
    size: usize,
    dmabuf: *mut c_int,
    offset: *mut u64,
    flags: u64,
) -> hsa_status_t {
    if flags & !1 != 0 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's arguments, forwarded.
    unsafe { portable_export_dmabuf(ptr, size, dmabuf, offset) }
}

/// `hsa_amd_portable_close_dmabuf`: closes a descriptor [`export_dmabuf`] made.
unsafe extern "C" fn portable_close_dmabuf(dmabuf: c_int) -> hsa_status_t {
    guard_status(|| {
        // SAFETY: closing a descriptor number; a bad one fails with EBADF.
        if dmabuf < 0 || unsafe { libc::close(dmabuf) } != 0 {
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        } else {
            HSA_STATUS_SUCCESS
        }
    })
}

/// Opens the memfd a handle names, checked against its inode and length.
fn open_exported(h: &IpcHandle) -> Option<c_int> {
    let path = CString::new(format!("/proc/{}/fd/{}", h.pid, h.fd)).ok()?;
    // SAFETY: zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable `stat`. Checked before opening, so that a
    // reused descriptor number naming a device or a FIFO is never opened.
    let named = unsafe { libc::stat(path.as_ptr(), &mut st) } == 0;
    let fd = if named {
        if !is_exported_file(&st, h) {
            return None;
        }
        // SAFETY: a NUL-terminated path naming a regular file.
        unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) }
    } else if h.pid == std::process::id() {
        // No /proc: the exporter is this process, so its descriptor is ours to duplicate.
        // SAFETY: F_DUPFD_CLOEXEC on a number that may not be open fails harmlessly.
        unsafe { libc::fcntl(h.fd, libc::F_DUPFD_CLOEXEC, 0) }
    } else {
        return None;
    };
    if fd < 0 {
        return None;
    }
    if fstat(fd).is_some_and(|st| is_exported_file(&st, h)) {
        Some(fd)
    } else {
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        None
    }
}

/// Maps the memory a handle names at a fresh address and registers the mapping.
fn attach(h: &IpcHandle, len: usize, agents: &[hsa_agent_t]) -> Result<usize, hsa_status_t> {
    if !is_full_length(len, h.size) {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let fd = open_exported(h).ok_or(HSA_STATUS_ERROR_INVALID_ARGUMENT)?;
    // SAFETY: not fixed: a fresh range of the kernel's choosing.
    let mapped = unsafe { map_shared(None, h.size, fd, false) };
    // SAFETY: closing the descriptor opened above; the mapping keeps the memory.
    unsafe { libc::close(fd) };
    let base = mapped.ok_or(HSA_STATUS_ERROR_OUT_OF_RESOURCES)?;
    let topo = topology();
    let owner = agents
        .first()
        .copied()
        .or_else(|| {
            topo.agents
                .iter()
                .find(|a| a.kind == DeviceKind::Gpu)
                .map(|a| a.handle)
        })
        .unwrap_or(topo.cpu().handle);
    let accessible = if agents.is_empty() {
        topo.agents.iter().map(|a| a.handle).collect()
    } else {
        let mut list: Vec<hsa_agent_t> = Vec::with_capacity(agents.len());
        for a in agents {
            if !list.contains(a) {
                list.push(*a);
            }
        }
        list
    };
    REGISTRY.write().ipc.insert(
        base,
        IpcMapping {
            size: h.size,
            owner,
            global_flags: h.global_flags,
            user_data: 0,
            accessible,
        },
    );
    Ok(base)
}

/// Unmaps the attachment based at `ptr`.
fn detach(ptr: usize) -> hsa_status_t {
    let Some(m) = REGISTRY.write().ipc.remove(&ptr) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    registry::unmap(ptr, m.size);
    super::svm::forget(ptr, m.size);
    HSA_STATUS_SUCCESS
}

/// `hsa_amd_ipc_memory_create`: `ptr` must be the base of a live allocation of a GPU's pool and
/// `len` its length (or that rounded up to a page); otherwise, or for a null `ptr` or `handle`,
/// `INVALID_ARGUMENT`. `OUT_OF_RESOURCES` when the memfd cannot be made.
unsafe extern "C" fn ipc_memory_create(
    ptr: *mut c_void,
    len: usize,
    handle: *mut hsa_amd_ipc_memory_t,
) -> hsa_status_t {
    guard_status(|| {
        if ptr.is_null() || handle.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match create(ptr as usize, len) {
            // SAFETY: non-null out-pointer supplied by the caller.
            Ok(h) => unsafe { write_out(handle.cast(), h.encode()) },
            Err(e) => e,
        }
    })
}

/// `hsa_amd_ipc_memory_attach`: maps the memory of `handle` at a fresh address. A null
/// `mapped_ptr` or `handle`, a null agent list with agents, a handle hsa-emu did not make, one
/// whose allocation is gone, or a `len` other than the shared length is `INVALID_ARGUMENT`; an
/// invalid agent is `INVALID_AGENT`.
unsafe extern "C" fn ipc_memory_attach(
    handle: *const hsa_amd_ipc_memory_t,
    len: usize,
    num_agents: u32,
    mapping_agents: *const hsa_agent_t,
    mapped_ptr: *mut *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        if handle.is_null() || mapped_ptr.is_null() || (num_agents > 0 && mapping_agents.is_null())
        {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let agents = if num_agents == 0 {
            &[][..]
        } else {
            // SAFETY: the caller passes `num_agents` agents.
            unsafe { std::slice::from_raw_parts(mapping_agents, num_agents as usize) }
        };
        let topo = topology();
        if agents.iter().any(|a| topo.agent(*a).is_none()) {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        // SAFETY: non-null handle supplied by the caller.
        let raw = unsafe { handle.read_unaligned() };
        let Some(h) = IpcHandle::decode(&raw) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        match attach(&h, len, agents) {
            // SAFETY: non-null out-pointer supplied by the caller.
            Ok(p) => unsafe { write_out(mapped_ptr.cast(), p as *mut c_void) },
            Err(e) => e,
        }
    })
}

/// `hsa_amd_ipc_memory_detach`: `mapped_ptr` must be the base of an attachment, otherwise
/// `INVALID_ARGUMENT`.
unsafe extern "C" fn ipc_memory_detach(mapped_ptr: *mut c_void) -> hsa_status_t {
    guard_status(|| detach(mapped_ptr as usize))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::memory::copy::memory_async_copy;
    use crate::memory::pools::tests::{alloc, info_of, vram_pool};
    use crate::memory::pools::{memory_copy, memory_fill};
    use crate::signals;

    type Words = [u32; 8];

    fn create_handle(ptr: *mut c_void, len: usize) -> Result<Words, hsa_status_t> {
        let mut h = hsa_amd_ipc_memory_t::default();
        // SAFETY: a valid out-pointer.
        match unsafe { ipc_memory_create(ptr, len, &mut h) } {
            HSA_STATUS_SUCCESS => Ok(h.handle),
            e => Err(e),
        }
    }

    fn attach_handle(
        words: &Words,
        len: usize,
        agents: &[hsa_agent_t],
    ) -> Result<*mut c_void, hsa_status_t> {
        let h = hsa_amd_ipc_memory_t { handle: *words };
        let mut p = std::ptr::null_mut();
        let list = if agents.is_empty() {
            std::ptr::null()
        } else {
            agents.as_ptr()
        };
        // SAFETY: valid handle, agent list and out-pointer.
        match unsafe { ipc_memory_attach(&h, len, agents.len() as u32, list, &mut p) } {
            HSA_STATUS_SUCCESS => Ok(p),
            e => Err(e),
        }
    }

    fn free(p: *mut c_void) -> hsa_status_t {
        registry::free(p as usize)
    }

    fn first_gpu() -> hsa_agent_t {
        let topo = topology();
        let gpu = topo.agents.iter().find(|a| a.kind == DeviceKind::Gpu);
        gpu.expect("the default machine has a GPU").handle
    }

    #[test]
    fn attach_in_the_same_process_aliases_the_exported_allocation() {
        let gpu = first_gpu();
        let p = alloc(vram_pool(), 3 * GRANULE, 0).unwrap();
        // Written before the export: must survive the move into the memfd.
        // SAFETY: inside the 3-page allocation.
        unsafe {
            p.cast::<u32>().write(0x1234_5678);
            p.cast::<u8>().add(2 * GRANULE + 7).write(42);
        }
        let h = create_handle(p, 3 * GRANULE - 100).unwrap();
        assert_eq!(h[0], HANDLE_MAGIC);
        assert_eq!(h[2], std::process::id());
        // A second export of the same allocation names the same memory.
        assert_eq!(create_handle(p, 3 * GRANULE), Ok(h));

        let q = attach_handle(&h, 3 * GRANULE, &[gpu]).unwrap();
        assert!(!q.is_null());
        assert_ne!(q, p);
        // SAFETY: both are live 3-page mappings of the same memory.
        unsafe {
            assert_eq!(q.cast::<u32>().read(), 0x1234_5678);
            assert_eq!(q.cast::<u8>().add(2 * GRANULE + 7).read(), 42);
            q.cast::<u64>().add(600).write(0xABCD);
            assert_eq!(p.cast::<u64>().add(600).read_volatile(), 0xABCD);
            p.cast::<u8>().add(GRANULE).write(9);
            assert_eq!(q.cast::<u8>().add(GRANULE).read_volatile(), 9);
        }

        // Pointer info: the attachment is IPC memory, the exporter still an allocation.
        // SAFETY: inside the attachment.
        let inner = unsafe { q.cast::<u8>().add(GRANULE + 5) }.cast::<c_void>();
        let info = info_of(inner);
        assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_IPC);
        assert_eq!((info.agentBaseAddress, info.hostBaseAddress), (q, q));
        assert_eq!(info.sizeInBytes, 3 * GRANULE);
        assert_eq!(info.agentOwner, gpu);
        assert_eq!(
            info.global_flags,
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
        );
        let exporter = info_of(p);
        assert_eq!(exporter.type_, HSA_EXT_POINTER_TYPE_HSA);
        assert_eq!(exporter.sizeInBytes, 3 * GRANULE);

        // Fill, copy and async copy work on it like on any device memory.
        let mut out = [0u32; 4];
        // SAFETY: the attachment holds 3 pages; `out` 16 bytes.
        unsafe {
            assert_eq!(memory_fill(q, 0x5A5A_5A5A, 4), HSA_STATUS_SUCCESS);
            assert_eq!(p.cast::<u32>().add(3).read_volatile(), 0x5A5A_5A5A);
            assert_eq!(
                memory_copy(out.as_mut_ptr().cast(), q, 16),
                HSA_STATUS_SUCCESS
            );
        }
        assert_eq!(out, [0x5A5A_5A5A; 4]);
        let done = signals::create(1).unwrap();
        let src = [7u32; 4];
        // SAFETY: 16 bytes at both ends, a live signal.
        let st = unsafe {
            memory_async_copy(
                q.cast::<u8>().add(GRANULE * 2).cast(),
                gpu,
                src.as_ptr().cast(),
                topology().cpu().handle,
                16,
                0,
                std::ptr::null(),
                done,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let deadline = Some(Instant::now() + Duration::from_secs(5));
        assert_eq!(signals::wait(done, HSA_SIGNAL_CONDITION_EQ, 0, deadline), 0);
        // SAFETY: the first word of the allocation's third page.
        let copied = unsafe { p.cast::<u32>().add(GRANULE / 2).read_volatile() };
        assert_eq!(copied, 7);
        signals::destroy(done);

        // SAFETY: an address inside the attachment, the exporter, the attachment twice.
        unsafe {
            assert_eq!(ipc_memory_detach(inner), HSA_STATUS_ERROR_INVALID_ARGUMENT);
            assert_eq!(ipc_memory_detach(p), HSA_STATUS_ERROR_INVALID_ARGUMENT);
            assert_eq!(ipc_memory_detach(q), HSA_STATUS_SUCCESS);
            assert_eq!(ipc_memory_detach(q), HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        assert_eq!(info_of(q).type_, HSA_EXT_POINTER_TYPE_UNKNOWN);
        // The exporter keeps its bytes after the attachment is gone.
        // SAFETY: the live allocation.
        assert_eq!(unsafe { p.cast::<u64>().add(600).read() }, 0xABCD);
        assert_eq!(free(p), HSA_STATUS_SUCCESS);
    }

    #[test]
    fn attach_without_agents_is_owned_by_a_gpu_and_reachable_by_all() {
        let p = alloc(vram_pool(), GRANULE, 0).unwrap();
        let h = create_handle(p, GRANULE).unwrap();
        let q = attach_handle(&h, GRANULE, &[]).unwrap();
        let d = registry::describe(q as usize);
        assert_eq!(
            (d.type_, d.base, d.size),
            (HSA_EXT_POINTER_TYPE_IPC, q as usize, GRANULE)
        );
        assert_eq!(d.owner, first_gpu());
        assert_eq!(d.accessible.len(), topology().agents.len());
        // SAFETY: a live attachment.
        assert_eq!(unsafe { ipc_memory_detach(q) }, HSA_STATUS_SUCCESS);
        assert_eq!(free(p), HSA_STATUS_SUCCESS);
    }

    #[test]
    fn create_refuses_what_is_not_a_whole_gpu_allocation() {
        let topo = topology();
        let p = alloc(vram_pool(), 2 * GRANULE, 0).unwrap();
        // SAFETY: inside the allocation.
        let inner = unsafe { p.cast::<u8>().add(GRANULE) }.cast::<c_void>();
        let invalid = Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        assert_eq!(create_handle(inner, GRANULE), invalid);
        assert_eq!(create_handle(p, 0), invalid);
        assert_eq!(create_handle(p, GRANULE), invalid);
        assert_eq!(create_handle(p, 2 * GRANULE + 1), invalid);
        assert_eq!(create_handle(std::ptr::null_mut(), GRANULE), invalid);
        let mut local = [0u8; 64];
        assert_eq!(create_handle(local.as_mut_ptr().cast(), 64), invalid);
        // SAFETY: null handle out-pointer.
        let st = unsafe { ipc_memory_create(p, 2 * GRANULE, std::ptr::null_mut()) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        // A host pool's allocation is not GPU memory.
        let fine = topo.pool_of(topo.cpu(), crate::topology::PoolKind::SystemFine);
        let host = alloc(fine.unwrap().handle, GRANULE, 0).unwrap();
        assert_eq!(create_handle(host, GRANULE), invalid);
        // Nothing was exported by the refusals.
        let exported = REGISTRY
            .read()
            .allocs
            .get(&(p as usize))
            .map(|a| a.exported);
        assert_eq!(exported, Some(None));
        assert_eq!(free(host), HSA_STATUS_SUCCESS);
        assert_eq!(free(p), HSA_STATUS_SUCCESS);
    }

    #[test]
    fn bad_handles_lengths_and_agents_are_refused() {
        let p = alloc(vram_pool(), GRANULE, 0).unwrap();
        let h = create_handle(p, GRANULE).unwrap();
        let invalid = Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        let mut bad_magic = h;
        bad_magic[0] ^= 1;
        assert_eq!(attach_handle(&bad_magic, GRANULE, &[]), invalid);
        assert_eq!(attach_handle(&[0; 8], GRANULE, &[]), invalid);
        let mut other_inode = h;
        other_inode[6] ^= 1;
        assert_eq!(attach_handle(&other_inode, GRANULE, &[]), invalid);
        let mut closed_fd = h;
        closed_fd[3] = 1_000_000;
        assert_eq!(attach_handle(&closed_fd, GRANULE, &[]), invalid);
        assert_eq!(attach_handle(&h, 2 * GRANULE, &[]), invalid);
        assert_eq!(attach_handle(&h, 0, &[]), invalid);
        assert_eq!(
            attach_handle(&h, GRANULE, &[hsa_agent_t { handle: 0xdead }]),
            Err(HSA_STATUS_ERROR_INVALID_AGENT)
        );
        let raw = hsa_amd_ipc_memory_t { handle: h };
        let mut out = std::ptr::null_mut();
        // SAFETY: null pointers must be refused.
        unsafe {
            assert_eq!(
                ipc_memory_attach(&raw, GRANULE, 0, std::ptr::null(), std::ptr::null_mut()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                ipc_memory_attach(std::ptr::null(), GRANULE, 0, std::ptr::null(), &mut out),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                ipc_memory_attach(&raw, GRANULE, 1, std::ptr::null(), &mut out),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
        }
        assert!(out.is_null());
        assert_eq!(free(p), HSA_STATUS_SUCCESS);
    }

    #[test]
    fn freeing_the_exporter_invalidates_its_handles_but_not_attachments() {
        let p = alloc(vram_pool(), GRANULE, 0).unwrap();
        let h = create_handle(p, GRANULE).unwrap();
        let q = attach_handle(&h, GRANULE, &[]).unwrap();
        // SAFETY: the live allocation.
        unsafe { p.cast::<u32>().write(77) };
        assert_eq!(free(p), HSA_STATUS_SUCCESS);
        assert_eq!(
            attach_handle(&h, GRANULE, &[]),
            Err(HSA_STATUS_ERROR_INVALID_ARGUMENT)
        );
        // SAFETY: the attachment keeps the pages.
        assert_eq!(unsafe { q.cast::<u32>().read() }, 77);
        // SAFETY: a live attachment.
        assert_eq!(unsafe { ipc_memory_detach(q) }, HSA_STATUS_SUCCESS);
    }

    #[test]
    fn a_dmabuf_export_names_the_allocations_memory_at_its_offset() {
        let p = alloc(vram_pool(), 2 * GRANULE, 0).unwrap();
        // SAFETY: inside the allocation.
        unsafe { p.cast::<u8>().add(GRANULE + 3).write(77) };
        let inner = (p as usize + GRANULE) as *const c_void;
        let (mut fd, mut off) = (-1, 0u64);
        // SAFETY: valid out-pointers.
        let st = unsafe { portable_export_dmabuf(inner, 16, &mut fd, &mut off) };
        assert_eq!((st, off), (HSA_STATUS_SUCCESS, GRANULE as u64));
        assert!(fd >= 0);
        // The descriptor maps the allocation's pages: writes either way are shared.
        // SAFETY: a fresh shared mapping of the descriptor, unmapped below.
        let q = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * GRANULE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(q, libc::MAP_FAILED);
        // SAFETY: both map the same two pages.
        unsafe {
            assert_eq!(q.cast::<u8>().add(off as usize + 3).read_volatile(), 77);
            q.cast::<u8>().write_volatile(5);
            assert_eq!(p.cast::<u8>().read_volatile(), 5);
            libc::munmap(q, 2 * GRANULE);
        }
        // SAFETY: the descriptor made above.
        assert_eq!(unsafe { portable_close_dmabuf(fd) }, HSA_STATUS_SUCCESS);
        // SAFETY: no descriptor (a closed number is not tried again: another test's thread
        // may have opened one with it meanwhile).
        let bad = unsafe { portable_close_dmabuf(-1) };
        assert_eq!(bad, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        // A range past the allocation, a null out-pointer, unknown v2 flags: refused.
        let past = (p as usize + GRANULE) as *const c_void;
        // SAFETY: valid out-pointers (or a deliberately null one).
        unsafe {
            assert_eq!(
                portable_export_dmabuf(past, GRANULE + 1, &mut fd, &mut off),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                portable_export_dmabuf(p, 16, std::ptr::null_mut(), &mut off),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                portable_export_dmabuf_v2(p, 16, &mut fd, &mut off, 2),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                portable_export_dmabuf_v2(p, 16, &mut fd, &mut off, 1),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(portable_close_dmabuf(fd), HSA_STATUS_SUCCESS);
        }
        assert_eq!(free(p), HSA_STATUS_SUCCESS);
    }

    #[test]
    fn handles_round_trip_through_their_words() {
        let h = IpcHandle {
            pid: 4242,
            fd: 17,
            size: 5 << 32,
            inode: 0x1_0000_0002,
            global_flags: HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
        };
        assert_eq!(IpcHandle::decode(&h.encode()), Some(h));
        let mut other_version = h.encode();
        other_version.handle[1] = 2;
        assert_eq!(IpcHandle::decode(&other_version), None);
        let unaligned = IpcHandle { size: 100, ..h };
        assert_eq!(IpcHandle::decode(&unaligned.encode()), None);
    }
}
