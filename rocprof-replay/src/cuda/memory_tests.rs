//! Memory kinds the inventory does not hold ([`memory`](crate::cuda::memory)) on the fake
//! driver: managed memory, IPC imports, mappings of imported handles, and other contexts'
//! allocations (peer access). Each is either kept out of every snapshot and fingerprint, or
//! makes a launch pointing into it decline before pass 1.

use super::*;
use crate::cuda::memory::Kind;
use crate::policy::FootprintMode;

/// A second context of the process.
const CTX2: usize = 0xc1_0000;

/// Writes through a surface object: (`u32 *count`, `CUsurfObject`, `u32`). The fake "array"
/// behind every surface is the count: each execution adds one.
fn write_surface(args: *mut *mut c_void) {
    // SAFETY: WRITE_SURFACE's arguments (a pointer to a live u32 counter first).
    unsafe {
        let count = *(*args).cast::<CUdeviceptr>() as *mut u32;
        *count += 1;
    }
}

pub(super) static WRITE_SURFACE: FakeKernel = FakeKernel {
    run: write_surface,
    module: 0,
};

/// Launches [`WRITE_SURFACE`]: it increments the u32 at `counter`, and is given `surface` as
/// its second argument.
pub(super) fn launch_write_surface(h: &Harness, counter: CUdeviceptr, surface: u64) {
    let (mut ptr, mut surface, mut n) = (counter, surface, 1u32);
    let mut args: [*mut c_void; 3] = [
        (&mut ptr as *mut CUdeviceptr).cast(),
        (&mut surface as *mut u64).cast(),
        (&mut n as *mut u32).cast(),
    ];
    assert_eq!(h.launch(&WRITE_SURFACE, &mut args, 0), CUDA_SUCCESS);
}

impl Harness {
    /// `cuMemAllocManaged` of the application (zeroed).
    fn alloc_managed(&self, size: usize) -> usize {
        let mut out: CUdeviceptr = 0;
        let params = cuMemAllocManaged_params {
            dptr: &mut out,
            bytesize: size,
            flags: 1,
        };
        let r = self.call(
            ALLOC_MANAGED,
            c"cuMemAllocManaged",
            (&params as *const cuMemAllocManaged_params).cast(),
            c"",
            || {
                let p = fake_alloc(size);
                gpu().app.insert(p);
                out = p as CUdeviceptr;
                CUDA_SUCCESS
            },
        );
        assert_eq!(r, CUDA_SUCCESS);
        out as usize
    }

    /// `cuSurfObjectCreate` returning `surface`.
    fn surface_create(&self, surface: u64) {
        let mut out = 0u64;
        let params = cuSurfObjectCreate_params {
            pSurfObject: &mut out,
            pResDesc: std::ptr::null(),
        };
        let r = self.call(
            SURF_CREATE,
            c"cuSurfObjectCreate",
            (&params as *const cuSurfObjectCreate_params).cast(),
            c"",
            || {
                out = surface;
                CUDA_SUCCESS
            },
        );
        assert_eq!(r, CUDA_SUCCESS);
    }

    /// `cuSurfObjectDestroy`.
    fn surface_destroy(&self, surface: u64) {
        let params = cuSurfObjectDestroy_params {
            surfObject: surface,
        };
        self.call(
            SURF_DESTROY,
            c"cuSurfObjectDestroy",
            (&params as *const cuSurfObjectDestroy_params).cast(),
            c"",
            || CUDA_SUCCESS,
        );
    }

    /// `cuIpcOpenMemHandle` in context `ctx`: `size` bytes of "another process's" memory.
    fn ipc_open(&self, ctx: usize, size: usize) -> usize {
        let mut out: CUdeviceptr = 0;
        let params = cuIpcOpenMemHandle_v2_params {
            pdptr: &mut out,
            handle: CUipcMemHandle { reserved: [3; 64] },
            Flags: 1,
        };
        let r = self.call_in(
            ctx,
            IPC_OPEN,
            c"cuIpcOpenMemHandle_v2",
            (&params as *const cuIpcOpenMemHandle_v2_params).cast(),
            c"",
            || {
                out = fake_alloc(size) as CUdeviceptr;
                CUDA_SUCCESS
            },
        );
        assert_eq!(r, CUDA_SUCCESS);
        out as usize
    }

    /// A driver call with parameters `params` that the driver completes with success (the
    /// export calls: the backend acts at their exit).
    fn succeed<P>(&self, cbid: u32, name: &CStr, params: &P) {
        let params = (params as *const P).cast();
        assert_eq!(
            self.call(cbid, name, params, c"", || CUDA_SUCCESS),
            CUDA_SUCCESS
        );
    }

    /// `cuIpcGetMemHandle` of the context's allocation at `p`.
    fn ipc_export(&self, p: usize) {
        let mut handle = CUipcMemHandle { reserved: [0; 64] };
        let params = cuIpcGetMemHandle_params {
            pHandle: &mut handle,
            dptr: p as CUdeviceptr,
        };
        self.succeed(IPC_EXPORT, c"cuIpcGetMemHandle", &params);
    }

    /// `cuMemPoolExportPointer` of the context's pool allocation at `p`.
    fn pool_export(&self, p: usize) {
        let mut data = [0u8; 64];
        let params = cuMemPoolExportPointer_params {
            shareData_out: data.as_mut_ptr().cast(),
            ptr: p as CUdeviceptr,
        };
        self.succeed(POOL_EXPORT, c"cuMemPoolExportPointer", &params);
    }

    /// `cuMemPoolImportPointer`: `size` bytes of "another process's" pool allocation.
    fn pool_import(&self, size: usize) -> usize {
        let mut out: CUdeviceptr = 0;
        let mut data = [7u8; 64];
        let params = cuMemPoolImportPointer_params {
            ptr_out: &mut out,
            pool: std::ptr::null_mut(),
            shareData: data.as_mut_ptr().cast(),
        };
        let r = self.call(
            POOL_IMPORT,
            c"cuMemPoolImportPointer",
            (&params as *const cuMemPoolImportPointer_params).cast(),
            c"",
            || {
                let p = fake_alloc(size);
                gpu().app.insert(p);
                out = p as CUdeviceptr;
                CUDA_SUCCESS
            },
        );
        assert_eq!(r, CUDA_SUCCESS);
        out as usize
    }

    /// `cuMemGetHandleForAddressRange` of `[p, p + size)` as a dmabuf descriptor.
    fn range_export(&self, p: usize, size: usize) {
        let mut fd = 0i32;
        let params = cuMemGetHandleForAddressRange_params {
            handle: (&mut fd as *mut i32).cast(),
            dptr: p as CUdeviceptr,
            size,
            handleType: 1,
            flags: 0,
        };
        self.succeed(RANGE_EXPORT, c"cuMemGetHandleForAddressRange", &params);
    }

    /// `cuMemExportToShareableHandle` of `handle` (as a file descriptor).
    fn handle_export(&self, handle: u64) {
        let mut fd = 0i32;
        let params = cuMemExportToShareableHandle_params {
            shareableHandle: (&mut fd as *mut i32).cast(),
            handle,
            handleType: 1,
            flags: 0,
        };
        self.succeed(HANDLE_EXPORT, c"cuMemExportToShareableHandle", &params);
    }

    /// `cuIpcCloseMemHandle`.
    fn ipc_close(&self, p: usize) {
        let params = cuIpcCloseMemHandle_params {
            dptr: p as CUdeviceptr,
        };
        self.call(
            IPC_CLOSE,
            c"cuIpcCloseMemHandle",
            (&params as *const cuIpcCloseMemHandle_params).cast(),
            c"",
            || CUDA_SUCCESS,
        );
    }

    /// A call whose parameters start with a handle's out-pointer, returning `handle`
    /// (`cuMemImportFromShareableHandle`, `cuMulticastCreate`, `cuMemRetainAllocationHandle`
    /// of `addr`).
    fn get_handle(&self, cbid: u32, name: &CStr, handle: u64, addr: usize) -> u64 {
        let mut out: CUmemGenericAllocationHandle = 0;
        #[repr(C)]
        struct Params {
            handle: *mut CUmemGenericAllocationHandle,
            second: *mut c_void,
            third: u32,
        }
        let params = Params {
            handle: &mut out,
            second: addr as *mut c_void,
            third: 1,
        };
        self.call(cbid, name, (&params as *const Params).cast(), c"", || {
            out = handle;
            CUDA_SUCCESS
        });
        out
    }

    /// `cuMemRelease`.
    fn release(&self, handle: u64) {
        let params = cuMemRelease_params { handle };
        self.call(
            MEM_RELEASE,
            c"cuMemRelease",
            (&params as *const cuMemRelease_params).cast(),
            c"",
            || CUDA_SUCCESS,
        );
    }

    /// `cuMemMap` of `handle`: `size` bytes of fake memory (as if reserved and mapped).
    fn map_handle(&self, size: usize, handle: u64) -> usize {
        let p = fake_alloc(size);
        gpu().app.insert(p);
        let params = cuMemMap_params {
            ptr: p as CUdeviceptr,
            size,
            offset: 0,
            handle,
            flags: 0,
        };
        let r = self.call(
            MEM_MAP,
            c"cuMemMap",
            (&params as *const cuMemMap_params).cast(),
            c"",
            || CUDA_SUCCESS,
        );
        assert_eq!(r, CUDA_SUCCESS);
        p
    }

    /// `cuMemUnmap`.
    fn unmap(&self, p: usize, size: usize) {
        let params = cuMemUnmap_params {
            ptr: p as CUdeviceptr,
            size,
        };
        self.call(
            MEM_UNMAP,
            c"cuMemUnmap",
            (&params as *const cuMemUnmap_params).cast(),
            c"",
            || CUDA_SUCCESS,
        );
    }

    /// The last outcome's kind.
    fn last_kind(&self) -> OutcomeKind {
        self.outcomes().last().expect("an outcome").1.kind
    }
}

fn declined(reason: DeclineReason) -> OutcomeKind {
    OutcomeKind::Declined(reason)
}

/// `n` counters at `addr` (inside some allocation).
fn counters_at(addr: usize, n: u32) -> Buffer {
    Buffer {
        ptr: addr as CUdeviceptr,
        n,
    }
}

#[test]
fn a_kernel_given_managed_memory_runs_once_and_managed_memory_is_never_captured_or_watched() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let managed = h.alloc_managed(64);
    let mut buf = Buffer::new(&h, 16);
    assert_eq!(
        h.be.inventory
            .owned_by(crate::AgentId(CTX as u64))
            .iter()
            .map(|a| a.base)
            .collect::<Vec<_>>(),
        vec![buf.ptr as usize],
        "managed memory is not the inventory's"
    );
    // A kernel on device memory: replayed; the managed buffer is neither captured nor
    // fingerprinted (a fingerprint would migrate its pages, and carried ones could not
    // describe memory the host writes without a call).
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!((o.snapshot_bytes, o.watched_bytes), (64, 0));
    // A kernel given an interior pointer into managed memory: runs once.
    let before = h.launches();
    let mut counters = counters_at(managed + 8, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(counters.values(), vec![1; 4], "incremented once");
    assert_eq!(h.launches(), before + 1, "never relaunched");
    assert_eq!(h.last_kind(), declined(DeclineReason::HostMemory));
    // Freed, it is no longer host-visible memory.
    h.free(managed);
    assert!(h.be.host_memory.read().is_empty());
}

/// The probe: a host thread writes a managed buffer the kernel never touches while the
/// window runs. With every allocation captured (`footprint: all`) the restores before passes
/// 2 and 3 used to write the buffer's old bytes back over the host's write.
#[test]
fn a_host_write_to_managed_memory_during_a_window_is_never_undone() {
    let h = harness(
        3,
        Settings {
            footprint: FootprintMode::All,
            ..quick()
        },
    );
    h.obtain_function(&ADD_ONE);
    let managed = h.alloc_managed(64);
    let mut buf = Buffer::new(&h, 16);
    h.window_in_flight(&mut buf, Duration::from_millis(100));
    // The host thread's store, while pass 2 runs.
    // SAFETY: a live fake allocation of 64 bytes.
    unsafe { std::ptr::write_volatile(managed as *mut u32, 7) };
    h.settle();
    // SAFETY: as above.
    let seen = unsafe { std::ptr::read_volatile(managed as *const u32) };
    assert_eq!(seen, 7, "the host's write stands");
    assert_eq!(buf.values(), vec![1; 16]);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert_eq!(o.snapshot_bytes, 64, "only the kernel's buffer is captured");
}

#[test]
fn with_repeated_host_writes_a_kernel_given_managed_memory_is_replayed_and_recorded_so() {
    let h = harness(
        3,
        Settings {
            repeat_host_writes: true,
            ..quick()
        },
    );
    h.obtain_function(&ADD_ONE);
    let managed = h.alloc_managed(16);
    let mut counters = counters_at(managed, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    let o = &h.outcomes()[0].1;
    assert_eq!(o.kind, OutcomeKind::Replayed);
    assert!(o.host_writes_repeated);
    assert_eq!(o.snapshot_bytes, 0, "managed memory is never captured");
    assert_eq!(
        counters.values(),
        vec![3; 4],
        "written once per pass, as opted in"
    );
}

/// Three passes, and the answer `host` to [`ReplayPolicy::host_memory`] for every dispatch
/// but the `n`-th (0-based), which gets `HostMemory::Auto`; panics there when `panics`.
struct HostOptIn {
    host: crate::HostMemory,
    auto_at: u64,
    panics: bool,
    asked: std::sync::atomic::AtomicU64,
}

impl HostOptIn {
    fn new(host: crate::HostMemory, auto_at: u64, panics: bool) -> HostOptIn {
        HostOptIn {
            host,
            auto_at,
            panics,
            asked: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl ReplayPolicy for HostOptIn {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(3, ())
    }
    fn host_memory(&self, _: &DispatchInfo) -> crate::HostMemory {
        let n = self.asked.fetch_add(1, Ordering::SeqCst);
        assert!(!self.panics, "a policy that panics");
        if n == self.auto_at {
            crate::HostMemory::Auto
        } else {
            self.host
        }
    }
}

/// Launches `add_one` twice over four counters in managed memory under `policy` and
/// `settings`: the counters after each launch and each record.
fn managed_counters_under<P: ReplayPolicy>(
    policy: P,
    settings: Settings,
) -> Vec<(Vec<u32>, OutcomeKind, bool)> {
    let h = harness_with(policy, settings);
    h.obtain_function(&ADD_ONE);
    let managed = h.alloc_managed(16);
    let mut counters = counters_at(managed, 4);
    (0..2)
        .map(|i| {
            let mut args = counters.args();
            h.launch(&ADD_ONE, &mut args, 0);
            let o = &h.outcomes()[i].1;
            (counters.values(), o.kind, o.host_writes_repeated)
        })
        .collect()
}

#[test]
fn a_policy_opts_a_dispatch_in_to_repeated_host_writes_or_out_of_them() {
    use crate::HostMemory::{Decline, Repeat};
    // The policy repeats the second dispatch's host writes; the first is left to the
    // environment, which declines.
    let seen = managed_counters_under(HostOptIn::new(Repeat, 0, false), quick());
    assert_eq!(
        seen,
        vec![
            (vec![1; 4], declined(DeclineReason::HostMemory), false),
            (vec![4; 4], OutcomeKind::Replayed, true),
        ],
        "written once, then once per pass as opted in"
    );
    // The environment repeats; the policy declines the second dispatch.
    let repeat = Settings {
        repeat_host_writes: true,
        ..quick()
    };
    let seen = managed_counters_under(HostOptIn::new(Decline, 0, false), repeat);
    assert_eq!(
        seen,
        vec![
            (vec![3; 4], OutcomeKind::Replayed, true),
            (vec![4; 4], declined(DeclineReason::HostMemory), false),
        ]
    );
    // A panicking answer: each dispatch runs once.
    let seen = managed_counters_under(HostOptIn::new(Repeat, u64::MAX, true), quick());
    assert_eq!(
        seen,
        vec![
            (vec![1; 4], declined(DeclineReason::PolicyPanicked), false),
            (vec![2; 4], declined(DeclineReason::PolicyPanicked), false),
        ]
    );
}

#[test]
fn a_kernel_given_an_ipc_import_runs_once_declined_foreign_memory() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let import = h.ipc_open(CTX, 4096);
    assert_eq!(h.be.inventory.origin_of(import), None);
    assert_eq!(
        h.be.foreign_memory.read().containing(import + 4095),
        Some(Kind::IpcImport),
        "its extent came from cuMemGetAddressRange"
    );
    let mut counters = counters_at(import + 64, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(counters.values(), vec![1; 4], "incremented once");
    assert_eq!(h.launches(), 1, "never relaunched");
    assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
    // Device memory still replays beside it.
    let mut buf = Buffer::new(&h, 8);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 8]);
    h.ipc_close(import);
    assert!(h.be.foreign_memory.read().is_empty());
}

#[test]
fn foreign_memory_declines_even_where_host_writes_may_be_repeated() {
    let h = harness(
        3,
        Settings {
            repeat_host_writes: true,
            ..quick()
        },
    );
    h.obtain_function(&ADD_ONE);
    let import = h.ipc_open(CTX, 64);
    let mut counters = counters_at(import, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(counters.values(), vec![1; 4]);
    assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
}

/// `cuMemCreate` of `size` bytes at `location` (a `CU_MEM_LOCATION_TYPE_*`, device 0), the
/// driver answering with `handle`.
fn mem_create_at(h: &Harness, size: usize, location: u32, handle: u64) -> u64 {
    let prop = CUmemAllocationProp {
        type_: 1,
        requestedHandleTypes: 0,
        location: CUmemLocation {
            type_: location,
            id: 0,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: [0; 8],
    };
    mem_create_as(h, size, &prop, handle, CUDA_SUCCESS)
}

#[test]
fn a_mapping_of_host_located_physical_memory_is_host_memory() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    // Physical memory in host RAM (CUDA 12.2+), mapped into the device's address space: the
    // application's host code may write it once it grants the CPU access.
    let host = mem_create_at(&h, 256, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0x5151);
    let mapped = h.map_handle(256, host);
    assert_eq!(h.be.inventory.origin_of(mapped), None, "never captured");
    let mut counters = counters_at(mapped + 16, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(counters.values(), vec![1; 4], "incremented once");
    assert_eq!(h.last_kind(), declined(DeclineReason::HostMemory));
    // A handle retained from that mapping is host memory too, wherever it is mapped again.
    let retained = h.get_handle(MEM_RETAIN, c"cuMemRetainAllocationHandle", 0x5152, mapped);
    h.unmap(mapped, 256);
    assert!(
        h.be.host_memory.read().is_empty(),
        "forgotten at cuMemUnmap"
    );
    let again = h.map_handle(256, retained);
    let mut counters = counters_at(again, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), declined(DeclineReason::HostMemory));
    h.unmap(again, 256);
    h.release(retained);
    h.release(host);
    // Device-located physical memory is the context's own: captured and replayed.
    let device = mem_create_at(&h, 256, CU_MEM_LOCATION_TYPE_DEVICE, 0x5151);
    let mapped = h.map_handle(256, device);
    assert!(h.be.inventory.origin_of(mapped).is_some());
    let mut counters = counters_at(mapped, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), OutcomeKind::Replayed);
    assert_eq!(counters.values(), vec![1; 4]);
}

#[test]
fn a_mapping_of_an_imported_handle_is_foreign_memory_and_an_own_mapping_the_contexts() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    // NCCL's cuMem path: a peer's allocation, exported as a file descriptor and imported.
    let peer = h.get_handle(MEM_IMPORT, c"cuMemImportFromShareableHandle", 0x4242, 0);
    let mapped = h.map_handle(256, peer);
    assert_eq!(
        h.be.inventory.origin_of(mapped),
        None,
        "not this context's own"
    );
    assert_eq!(
        h.be.foreign_memory.read().containing(mapped),
        Some(Kind::ImportedMapping)
    );
    let mut counters = counters_at(mapped + 16, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(counters.values(), vec![1; 4]);
    assert_eq!(h.launches(), 1);
    assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
    // A mapping of the context's own handle is its memory: captured, replayed.
    let own = h.map(64);
    assert_eq!(
        h.be.inventory.origin_of(own),
        Some(crate::engine::inventory::Origin::VmemMapping)
    );
    let mut buf = counters_at(own, 16);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), OutcomeKind::Replayed);
    assert_eq!(buf.values(), vec![1; 16]);
    // A multicast object's mappings are written by every GPU of its team.
    let mc = h.get_handle(MULTICAST_CREATE, c"cuMulticastCreate", 0x5151, 0);
    let multicast = h.map_handle(64, mc);
    assert_eq!(
        h.be.foreign_memory.read().containing(multicast),
        Some(Kind::ImportedMapping)
    );
    // The handle retained from the peer's mapping is the imported one: mapped again
    // elsewhere, still foreign; its references released, a mapping of that value would be
    // the context's own.
    let retained = h.get_handle(MEM_RETAIN, c"cuMemRetainAllocationHandle", 0x4242, mapped);
    h.release(peer);
    let again = h.map_handle(64, retained);
    assert_eq!(
        h.be.foreign_memory.read().containing(again),
        Some(Kind::ImportedMapping)
    );
    h.release(retained);
    assert!(!h.be.imported_handles.lock().contains(0x4242));
    // A handle retained from the context's own mapping is not imported.
    h.get_handle(MEM_RETAIN, c"cuMemRetainAllocationHandle", 1, own);
    assert!(!h.be.imported_handles.lock().contains(1));
    // Unmapped, the ranges are forgotten.
    for (p, size) in [(mapped, 256), (multicast, 64), (again, 64)] {
        h.unmap(p, size);
    }
    assert!(h.be.foreign_memory.read().is_empty());
}

#[test]
fn an_allocation_exported_for_another_process_runs_once_declined_foreign_memory() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 16);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(
        h.last_kind(),
        OutcomeKind::Replayed,
        "the context's own memory"
    );
    // Exported (cuIpcGetMemHandle, as PyTorch does to share a CUDA tensor with another
    // process): the process that opens it may write it during any window.
    h.ipc_export(buf.ptr as usize);
    assert_eq!(h.be.inventory.origin_of(buf.ptr as usize), None);
    assert_eq!(
        h.be.foreign_memory.read().containing(buf.ptr as usize + 63),
        Some(Kind::IpcExport),
        "the whole allocation"
    );
    let launches = h.launches();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.launches(), launches + 1, "never relaunched");
    assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
    assert_eq!(buf.values(), vec![2; 16], "one execution of each launch");
    h.free(buf.ptr as usize);
    assert!(
        h.be.foreign_memory.read().is_empty(),
        "forgotten at its free"
    );
}

#[test]
fn pool_pointers_exported_or_imported_run_once_declined_foreign_memory() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    // The exporter's side (cuMemPoolExportPointer of a stream-ordered allocation).
    let mut buf = Buffer::new(&h, 8);
    h.pool_export(buf.ptr as usize);
    assert_eq!(h.be.inventory.origin_of(buf.ptr as usize), None);
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
    assert_eq!(buf.values(), vec![1; 8]);
    // The importer's side.
    let import = h.pool_import(256);
    assert_eq!(
        h.be.foreign_memory.read().containing(import + 255),
        Some(Kind::PoolImport)
    );
    let mut counters = counters_at(import, 4);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(counters.values(), vec![1; 4]);
    assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
    // Both forgotten at their frees.
    h.free(buf.ptr as usize);
    h.free(import);
    assert!(h.be.foreign_memory.read().is_empty());
}

#[test]
fn an_address_range_exported_as_a_dmabuf_makes_its_allocations_foreign_memory() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let mut buf = Buffer::new(&h, 64);
    let mut other = Buffer::new(&h, 8);
    // A range inside the buffer (as an RDMA registration of part of it): the whole
    // allocation leaves the inventory, the other one stays.
    h.range_export(buf.ptr as usize + 64, 32);
    assert_eq!(h.be.inventory.origin_of(buf.ptr as usize), None);
    assert!(h.be.inventory.origin_of(other.ptr as usize).is_some());
    assert_eq!(
        h.be.foreign_memory
            .read()
            .containing(buf.ptr as usize + 255),
        Some(Kind::IpcExport)
    );
    let mut args = buf.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
    assert_eq!(buf.values(), vec![1; 64]);
    let mut args = other.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), OutcomeKind::Replayed);
    h.free(buf.ptr as usize);
    assert!(h.be.foreign_memory.read().is_empty());
}

#[test]
fn mappings_of_an_exported_handle_before_and_after_the_export_are_foreign_memory() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let before = h.map_handle(256, 0x77);
    assert!(
        h.be.inventory.origin_of(before).is_some(),
        "the context's own"
    );
    h.handle_export(0x77);
    assert_eq!(h.be.inventory.origin_of(before), None);
    assert_eq!(
        h.be.foreign_memory.read().containing(before + 255),
        Some(Kind::ImportedMapping)
    );
    let after = h.map_handle(64, 0x77);
    assert_eq!(
        h.be.foreign_memory.read().containing(after),
        Some(Kind::ImportedMapping)
    );
    for p in [before, after] {
        let mut counters = counters_at(p, 4);
        let mut args = counters.args();
        h.launch(&ADD_ONE, &mut args, 0);
        assert_eq!(counters.values(), vec![1; 4], "incremented once");
        assert_eq!(h.last_kind(), declined(DeclineReason::ForeignMemory));
    }
    // Another handle's mapping is untouched by the export.
    let other = h.map_handle(64, 0x78);
    assert!(h.be.inventory.origin_of(other).is_some());
    for (p, size) in [(before, 256), (after, 64), (other, 64)] {
        h.unmap(p, size);
    }
    assert!(h.be.foreign_memory.read().is_empty());
}

#[test]
fn a_kernel_given_another_contexts_allocation_runs_once_declined_peer_memory() {
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE);
    let theirs = h.alloc_in(CTX2, 32);
    let mut own = Buffer::new(&h, 8);
    // Context A's kernel writing context B's memory (peer access): B's allocation is not in
    // A's snapshot, and B's streams are not drained.
    let mut counters = counters_at(theirs, 8);
    let mut args = counters.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(counters.values(), vec![1; 8], "incremented once");
    assert_eq!(h.launches(), 1, "never relaunched");
    assert_eq!(h.last_kind(), declined(DeclineReason::PeerMemory));
    // In its own context the same memory replays; so does A's own memory in A.
    let mut args = counters.args();
    h.launch_returning_in(CTX2, &ADD_ONE, &mut args, 0, c"_Z7add_onePji");
    h.settle();
    assert_eq!(h.last_kind(), OutcomeKind::Replayed);
    assert_eq!(counters.values(), vec![2; 8]);
    let mut args = own.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), OutcomeKind::Replayed);
    assert_eq!(own.values(), vec![1; 8]);
}

#[test]
fn a_kernel_whose_arguments_cannot_be_read_declines_while_peer_or_foreign_memory_exists() {
    // ADD_ONE's handle is never obtained: its parameters cannot be sized, so the window would
    // capture every allocation of the context and nothing else.
    let h = harness(3, quick());
    let mut own = Buffer::new(&h, 8);
    let mut args = own.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(
        h.last_kind(),
        OutcomeKind::Replayed,
        "one context, nothing foreign"
    );
    h.alloc_in(CTX2, 32);
    let mut args = own.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(h.last_kind(), declined(DeclineReason::PeerMemory));
    h.alloc_managed(16);
    h.ipc_open(CTX, 64);
    let mut args = own.args();
    h.launch(&ADD_ONE, &mut args, 0);
    assert_eq!(
        h.last_kind(),
        declined(DeclineReason::ForeignMemory),
        "foreign first: a policy may opt into replaying host memory, never foreign memory"
    );
    assert_eq!(own.values(), vec![3; 8], "each launch ran once");
}

#[test]
fn a_launch_given_a_surface_object_runs_once_and_one_given_none_is_replayed() {
    let h = harness(3, quick());
    h.obtain_function(&WRITE_SURFACE);
    let count = Buffer::new(&h, 1);
    // Surface objects are small integers: 3 here, as a driver numbers them.
    let launch = |surface: u64| launch_write_surface(&h, count.ptr, surface);
    launch(3);
    assert_eq!(
        h.last_kind(),
        OutcomeKind::Replayed,
        "no surface exists yet"
    );
    assert_eq!(
        count.values(),
        vec![1],
        "its device memory restored: one execution"
    );
    h.surface_create(3);
    launch(3);
    assert_eq!(h.last_kind(), declined(DeclineReason::ArrayMemory));
    assert_eq!(count.values(), vec![2], "declined: it ran once");
    launch(4);
    assert_eq!(
        h.last_kind(),
        OutcomeKind::Replayed,
        "a word that is no live surface object"
    );
    h.surface_destroy(3);
    launch(3);
    assert_eq!(h.last_kind(), OutcomeKind::Replayed, "the surface is gone");
    h.surface_create(9);
    h.destroy_context(CTX);
    assert!(
        h.be.surfaces.read().is_empty(),
        "surfaces go with their context"
    );
}

#[test]
fn a_destroyed_contexts_managed_memory_and_ipc_imports_are_forgotten() {
    let h = harness(3, quick());
    let managed = h.alloc_managed(16);
    let import = h.ipc_open(CTX, 64);
    let peer = h.get_handle(MEM_IMPORT, c"cuMemImportFromShareableHandle", 0x77, 0);
    let mapped = h.map_handle(64, peer);
    h.destroy_context(CTX);
    assert_eq!(h.be.host_memory.read().containing(managed), None);
    assert_eq!(h.be.foreign_memory.read().containing(import), None);
    assert_eq!(
        h.be.foreign_memory.read().containing(mapped),
        Some(Kind::ImportedMapping),
        "a mapping is the process's until unmapped"
    );
}

#[test]
fn the_import_entry_points_are_classified_and_their_callback_ids_known() {
    for (name, api) in [
        ("cuIpcOpenMemHandle", Api::IpcOpen),
        ("cuIpcOpenMemHandle_v2", Api::IpcOpen),
        ("cuIpcCloseMemHandle", Api::IpcClose),
        ("cuIpcGetMemHandle", Api::IpcExport),
        ("cuMemExportToShareableHandle", Api::HandleExport),
        ("cuMemPoolExportPointer", Api::IpcExport),
        ("cuMemPoolImportPointer", Api::PoolImport),
        ("cuMemGetHandleForAddressRange", Api::RangeExport),
        ("cuMemImportFromShareableHandle", Api::ForeignHandle),
        ("cuMulticastCreate", Api::ForeignHandle),
        ("cuMemRetainAllocationHandle", Api::MemRetain),
        ("cuMemRelease", Api::MemRelease),
        ("cuMemAllocManaged", Api::MemAllocManaged),
        ("cuSurfObjectCreate", Api::SurfCreate),
        ("cuSurfObjectDestroy", Api::SurfDestroy),
    ] {
        assert_eq!(classify(name), Some(api), "{name}");
        assert!(
            cbid::ALL.iter().any(|(n, _)| *n == name),
            "{name}: no CUPTI 13.0 id for the fallback table"
        );
    }
    let ids = Ids::from_names(cbid::ALL.iter().copied());
    assert_eq!(ids.get(cbid::cuIpcOpenMemHandle_v2), Some(Api::IpcOpen));
    assert_eq!(ids.get(cbid::cuMemRelease), Some(Api::MemRelease));
}

#[test]
fn on_a_device_addressing_system_memory_a_launch_given_a_heap_pointer_runs_once() {
    // A counter in `malloc`'d memory, which a kernel reaches through HMM or ATS with no call
    // the backend sees. Without either, such a kernel would fault: the backend does not look,
    // and the fake (which writes it anyway, once per pass) shows what it would cost.
    let launch = |h: &Harness, target: CUdeviceptr| launch_write_surface(h, target, 0);
    for pageable in [false, true] {
        let h = harness(3, quick());
        gpu().pageable = pageable;
        h.obtain_function(&WRITE_SURFACE);
        let heap = Box::into_raw(Box::new(0u32));
        launch(&h, heap as CUdeviceptr);
        // SAFETY: our live box; the fake kernels ran synchronously and hold no reference.
        let runs = unsafe { heap.read_volatile() };
        // SAFETY: the box made above, freed once.
        drop(unsafe { Box::from_raw(heap) });
        if pageable {
            assert_eq!(h.last_kind(), declined(DeclineReason::HostMemory));
            assert_eq!(runs, 1, "one execution");
        } else {
            assert_eq!(h.last_kind(), OutcomeKind::Replayed);
            assert_eq!(runs, 3);
        }
    }
    // Device memory is not system memory: an allocation the inventory holds replays, and so
    // does an address the driver calls device memory (a `__device__` variable, say), though
    // the process maps it too.
    let h = harness(3, quick());
    gpu().pageable = true;
    h.obtain_function(&WRITE_SURFACE);
    let count = Buffer::new(&h, 1);
    let var = Box::into_raw(Box::new(0u32));
    gpu().pointer_device.push(var as usize);
    for target in [count.ptr, var as CUdeviceptr] {
        launch(&h, target);
        assert_eq!(h.last_kind(), OutcomeKind::Replayed, "{target:#x}");
    }
    // SAFETY: the box made above, freed once; the fake kernels are done with it.
    drop(unsafe { Box::from_raw(var) });
    assert_eq!(
        count.values(),
        vec![1],
        "its allocation restored: one execution"
    );
}

/// `add_one` under a kernel handle of its own: what this test teaches the engine about the
/// kernel (process-wide) reaches no other test.
pub(super) static ADD_ONE_SPANNING: FakeKernel = FakeKernel {
    run: add_one,
    module: 0,
};

#[test]
fn a_tensor_spanning_two_mapped_chunks_is_captured_whole_after_its_first_dispatch() {
    // PyTorch's expandable segments: one reserved range, mapped chunk by chunk (each
    // `cuMemMap` an allocation of the context). A tensor from the middle of the first chunk
    // into the second: its kernel writes past the allocation its argument names.
    let h = harness(3, quick());
    h.obtain_function(&ADD_ONE_SPANNING);
    // Another allocation, which the kernel never names: watched, never captured.
    let _other = h.alloc(64 << 10);
    let chunk = 4096;
    let segment = fake_alloc(2 * chunk);
    gpu().app.insert(segment);
    for (i, at) in [segment, segment + chunk].into_iter().enumerate() {
        let params = cuMemMap_params {
            ptr: at as CUdeviceptr,
            size: chunk,
            offset: 0,
            handle: 1 + i as u64,
            flags: 0,
        };
        h.call(
            MEM_MAP,
            c"cuMemMap",
            (&params as *const cuMemMap_params).cast(),
            c"",
            || CUDA_SUCCESS,
        );
    }
    let mut tensor = counters_at(segment + chunk / 2, chunk as u32 / 4);
    let mut args = tensor.args();
    h.launch(&ADD_ONE_SPANNING, &mut args, 0);
    assert_eq!(
        h.last_kind(),
        declined(DeclineReason::WroteOutsideFootprint),
        "the first dispatch stops after its own execution"
    );
    assert_eq!(tensor.values(), vec![1; chunk / 4]);
    // The next one captures both chunks and is replayed.
    let mut args = tensor.args();
    h.launch(&ADD_ONE_SPANNING, &mut args, 0);
    let outcomes = h.outcomes();
    let o = &outcomes.last().expect("an outcome").1;
    assert_eq!((o.kind, o.passes), (OutcomeKind::Replayed, 3), "{o:?}");
    assert_eq!(o.footprint, Some(crate::policy::FootprintKind::Arguments));
    assert_eq!(
        o.snapshot_bytes,
        2 * chunk as u64,
        "both chunks, not the other"
    );
    assert_eq!(o.watched_bytes, 64 << 10);
    assert_eq!(tensor.values(), vec![2; chunk / 4], "one execution each");
}
