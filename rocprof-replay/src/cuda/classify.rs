//! Which driver callbacks the backend handles, and how: a callback's name classified once
//! ([`classify()`]) into an [`Api`], looked up by callback id at every call ([`Ids`]).

use super::*;

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
    /// `cuMemCreate`: physical memory of the virtual-memory API (PyTorch's expandable
    /// segments), mapped later with `cuMemMap`.
    MemCreate,
    /// `cuIpcOpenMemHandle` (and `_v2`): memory of another process mapped into this one.
    IpcOpen,
    /// `cuIpcCloseMemHandle`.
    IpcClose,
    /// `cuIpcGetMemHandle`, `cuMemPoolExportPointer`: an allocation of this process exported
    /// for another to open (both parameter structs hold the device pointer second).
    IpcExport,
    /// `cuMemPoolImportPointer`: an allocation of another process's pool mapped into this one.
    PoolImport,
    /// `cuMemExportToShareableHandle`: a physical allocation exported for another process.
    HandleExport,
    /// `cuMemGetHandleForAddressRange`: a range of device memory exported as a dmabuf (RDMA,
    /// another process or device).
    RangeExport,
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
    /// A call that orders, waits for or observes stream work without being work the backend
    /// handles otherwise (event records, stream waits on events, synchronisations, captures,
    /// graphs, prefetches): subscribed only while windows may cover runs of launches
    /// (`ROCPROF_REPLAY_RUN`), where it ends a run ([`Backend::breaks`]).
    RunBreak,
    /// A call that observes whether stream work is done (`cuStreamQuery`, `cuEventQuery`,
    /// `cuStreamSynchronize`, `cuEventSynchronize`, `cuCtxSynchronize`): while a synchronous
    /// window holds a context (its launch call waits for it, and no gate on the stream hides
    /// its first pass), another thread's such call waits at its entry until that window is
    /// over. `wait`: a synchronization, which also ends runs ([`Api::RunBreak`]); a query
    /// does not (it neither orders nor waits for work).
    Observe { wait: bool },
}

impl Api {
    /// Whether the call may load a module lazily, synchronising the context under a driver
    /// lock: it must not overlap a replay window ([`gate::Behind`]).
    pub(super) fn may_load(self) -> bool {
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
    pub(super) fn ptsz(self) -> bool {
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
        "cuMemCreate" => Api::MemCreate,
        "cuIpcOpenMemHandle" | "cuIpcOpenMemHandle_v2" => Api::IpcOpen,
        "cuIpcCloseMemHandle" => Api::IpcClose,
        "cuIpcGetMemHandle" | "cuMemPoolExportPointer" => Api::IpcExport,
        "cuMemPoolImportPointer" => Api::PoolImport,
        "cuMemExportToShareableHandle" => Api::HandleExport,
        "cuMemGetHandleForAddressRange" => Api::RangeExport,
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
        b if b.starts_with("cuStreamQuery") || b.starts_with("cuEventQuery") => {
            Api::Observe { wait: false }
        }
        b if b.starts_with("cuEventSynchronize")
            || b.starts_with("cuStreamSynchronize")
            || b.starts_with("cuCtxSynchronize") =>
        {
            Api::Observe { wait: true }
        }
        b if b.starts_with("cuEventRecord")
            || b.starts_with("cuStreamWaitEvent")
            || b.starts_with("cuStreamBeginCapture")
            || b.starts_with("cuStreamEndCapture")
            || b.starts_with("cuMemPrefetchAsync")
            || b.starts_with("cuMemAdvise")
            || b.starts_with("cuStreamAttachMemAsync")
            || b.starts_with("cuSignalExternalSemaphoresAsync")
            || b.starts_with("cuWaitExternalSemaphoresAsync")
            || (b.starts_with("cuGraph") && b != "cuGraphLaunch") =>
        {
            Api::RunBreak
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

    pub(super) fn get(&self, cbid: u32) -> Option<Api> {
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

    /// The table without the calls that only end runs ([`Api::RunBreak`]): not subscribed
    /// while windows cover one launch each.
    pub(crate) fn without_run_breaks(mut self) -> Ids {
        for a in &mut self.table {
            if *a == Some(Api::RunBreak) {
                *a = None;
            }
        }
        self
    }

    /// Whether the launch entry points were found.
    pub(super) fn has_launches(&self) -> bool {
        self.table
            .iter()
            .any(|a| matches!(a, Some(Api::Launch(LaunchApi::Kernel { ptsz: false }))))
    }
}
