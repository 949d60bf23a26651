//! The part of the CUDA driver API and of the CUPTI callback API that rocprof-replay's CUDA
//! backend uses, hand-written (feature `cuda`).
//!
//! Nothing here links against CUDA: the backend loads `libcuda.so.1` and `libcupti.so` at run
//! time and looks the functions up by name, with the signatures below. Names follow `cuda.h`,
//! `cupti_callbacks.h` and CUPTI's `generated_cuda_meta.h`, so code reads like NVIDIA's
//! documentation.
//!
//! Every struct carries compile-time size and offset assertions. The figures were read from the
//! real headers of CUDA 13.0 (driver 580, CUPTI 13.0) on an H200 machine by the probe that
//! `tests/cuda_layout.rs` generates; that test keeps the recorded figures (and every enum value
//! and callback id below) and compares them with this module on every run, and compiles the
//! probe again wherever the CUDA headers are installed.
//!
//! Callback ids (`CUPTI_DRIVER_TRACE_CBID_*`) are CUPTI 13.0's. The backend resolves the ids it
//! subscribes to by name at run time (`cuptiGetCallbackName`), so another CUPTI version with
//! other numbers still works; the constants are the cross-check.

use core::ffi::{c_char, c_int, c_uint, c_void};

use crate::layout::{const_assert_layout, const_assert_offsets};

macro_rules! opaque {
    ($($(#[$m:meta])* $st:ident => $handle:ident;)*) => {$(
        #[doc = concat!("The opaque object behind [`", stringify!($handle), "`].")]
        #[repr(C)]
        pub struct $st {
            _private: [u8; 0],
        }
        $(#[$m])*
        pub type $handle = *mut $st;
    )*};
}

opaque! {
    /// A CUDA context (`CUcontext`).
    CUctx_st => CUcontext;
    /// A stream (`CUstream`); 0 is the legacy default stream, [`CU_STREAM_LEGACY`] and
    /// [`CU_STREAM_PER_THREAD`] are pseudo-handles.
    CUstream_st => CUstream;
    /// An event (`CUevent`).
    CUevent_st => CUevent;
    /// A kernel of a loaded module (`CUfunction`); a `CUkernel` may be passed where a launch
    /// takes one.
    CUfunc_st => CUfunction;
    /// A loaded module (`CUmodule`).
    CUmod_st => CUmodule;
    /// A library (`CUlibrary`, context-independent module).
    CUlib_st => CUlibrary;
    /// A context-independent kernel (`CUkernel`).
    CUkern_st => CUkernel;
    /// A memory pool (`CUmemoryPool`).
    CUmemPoolHandle_st => CUmemoryPool;
    /// An executable graph (`CUgraphExec`).
    CUgraphExec_st => CUgraphExec;
    /// A CUPTI callback subscriber (`CUpti_SubscriberHandle`).
    CUpti_Subscriber_st => CUpti_SubscriberHandle;
}

/// A driver API status (`CUresult`).
pub type CUresult = c_uint;
/// A device ordinal (`CUdevice`).
pub type CUdevice = c_int;
/// A device address (`CUdeviceptr`, `unsigned long long` on 64-bit hosts).
pub type CUdeviceptr = u64;
/// A physical allocation of the virtual memory management API.
pub type CUmemGenericAllocationHandle = u64;
/// `CUmemAllocationHandleType`: the kind of a shareable handle.
pub type CUmemAllocationHandleType = c_uint;

/// Where a physical allocation lives, or who may access a mapping (`CUmemLocation`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUmemLocation {
    /// `CUmemLocationType`: a device, the host, a host NUMA node.
    pub type_: c_uint,
    /// The device ordinal (or NUMA node) the type names.
    pub id: c_int,
}
const_assert_layout!(CUmemLocation, size = 8, align = 4);

/// `CUmemAllocationProp`: what `cuMemCreate` is asked for.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAllocationProp {
    /// `CUmemAllocationType` (`CU_MEM_ALLOCATION_TYPE_PINNED`).
    pub type_: c_uint,
    /// The shareable handle types the allocation may be exported as.
    pub requestedHandleTypes: CUmemAllocationHandleType,
    /// Where the physical memory lives.
    pub location: CUmemLocation,
    /// Windows only; null elsewhere.
    pub win32HandleMetaData: *mut c_void,
    /// `allocFlags` (compression, RDMA, usage): not read.
    pub allocFlags: [u8; 8],
}
const_assert_layout!(CUmemAllocationProp, size = 32, align = 8);

/// `CUmemLocationType`: a device; `id` is its ordinal.
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_uint = 0x1;
/// `CUmemLocationType`: host memory.
pub const CU_MEM_LOCATION_TYPE_HOST: c_uint = 0x2;
/// `CUmemLocationType`: host memory on a NUMA node; `id` is the node.
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA: c_uint = 0x3;
/// `CUmemLocationType`: host memory on the calling thread's NUMA node.
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: c_uint = 0x4;

/// An interprocess memory handle (`CUipcMemHandle`): opaque bytes another process exported.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUipcMemHandle {
    /// The handle's bytes.
    pub reserved: [c_char; 64],
}
const_assert_layout!(CUipcMemHandle, size = 64, align = 1);
/// `CUstreamCaptureStatus`.
pub type CUstreamCaptureStatus = c_uint;
/// `CUstreamCaptureMode`.
pub type CUstreamCaptureMode = c_uint;
/// `CUlaunchAttributeID`.
pub type CUlaunchAttributeID = c_uint;
/// `CUfunction_attribute`.
pub type CUfunction_attribute = c_uint;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CUresult = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
/// `CUDA_ERROR_NOT_INITIALIZED`.
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CUDA_ERROR_DEINITIALIZED`.
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
/// `CUDA_ERROR_NO_DEVICE`.
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
/// `CUDA_ERROR_INVALID_CONTEXT`.
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
/// `CUDA_ERROR_INVALID_HANDLE`.
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
/// `CUDA_ERROR_NOT_FOUND`.
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
/// `CUDA_ERROR_NOT_READY`: asynchronous work has not completed yet.
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
/// `CUDA_ERROR_ILLEGAL_ADDRESS`.
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
/// `CUDA_ERROR_LAUNCH_FAILED`.
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;

/// `CU_STREAM_LEGACY`: the legacy default stream, named explicitly.
pub const CU_STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`: the calling thread's default stream.
pub const CU_STREAM_PER_THREAD: usize = 0x2;
/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_EVENT_DEFAULT`.
pub const CU_EVENT_DEFAULT: c_uint = 0x0;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CU_MEMHOSTALLOC_PORTABLE`.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x1;

/// `CU_STREAM_CAPTURE_STATUS_NONE`.
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
/// `CU_STREAM_CAPTURE_STATUS_INVALIDATED`.
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;
/// `CU_STREAM_CAPTURE_MODE_GLOBAL`.
pub const CU_STREAM_CAPTURE_MODE_GLOBAL: CUstreamCaptureMode = 0;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`.
pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: CUstreamCaptureMode = 1;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`: this thread may make calls that are unsafe during
/// another thread's global-mode capture.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;

/// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`: static shared memory of a kernel.
pub const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: CUfunction_attribute = 1;
/// `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`: local memory per thread.
pub const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: CUfunction_attribute = 3;

/// `CU_LAUNCH_ATTRIBUTE_IGNORE`: an attribute slot that is skipped.
pub const CU_LAUNCH_ATTRIBUTE_IGNORE: CUlaunchAttributeID = 0;
/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
pub const CU_LAUNCH_ATTRIBUTE_COOPERATIVE: CUlaunchAttributeID = 2;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
pub const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: CUlaunchAttributeID = 4;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`.
pub const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: CUlaunchAttributeID = 6;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`: records an application event from the kernel.
pub const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT: CUlaunchAttributeID = 7;
/// `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`: records an application event when the
/// kernel's blocks have all started.
pub const CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: CUlaunchAttributeID = 12;
/// `CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE` (graph kernel nodes only).
pub const CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE: CUlaunchAttributeID = 13;

/// The value of a launch attribute (`CUlaunchAttributeValue`, a 64-byte union).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUlaunchAttributeValue {
    /// The union's bytes, as 8-byte words (the union holds pointers and 64-bit values).
    pub words: [u64; 8],
}
const_assert_layout!(CUlaunchAttributeValue, size = 64, align = 8);

/// One launch attribute (`CUlaunchAttribute`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUlaunchAttribute {
    /// Which attribute.
    pub id: CUlaunchAttributeID,
    /// Padding before the value.
    pub pad: [u8; 4],
    /// Its value.
    pub value: CUlaunchAttributeValue,
}
const_assert_layout!(CUlaunchAttribute, size = 72, align = 8);
const_assert_offsets!(CUlaunchAttribute { id: 0, value: 8 });

/// The configuration of a `cuLaunchKernelEx` launch (`CUlaunchConfig`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUlaunchConfig {
    /// Grid width in blocks.
    pub gridDimX: c_uint,
    /// Grid height in blocks.
    pub gridDimY: c_uint,
    /// Grid depth in blocks.
    pub gridDimZ: c_uint,
    /// Block width in threads.
    pub blockDimX: c_uint,
    /// Block height in threads.
    pub blockDimY: c_uint,
    /// Block depth in threads.
    pub blockDimZ: c_uint,
    /// Dynamic shared memory per block.
    pub sharedMemBytes: c_uint,
    /// The stream.
    pub hStream: CUstream,
    /// `numAttrs` attributes.
    pub attrs: *mut CUlaunchAttribute,
    /// Number of attributes.
    pub numAttrs: c_uint,
}
const_assert_layout!(CUlaunchConfig, size = 56, align = 8);
const_assert_offsets!(CUlaunchConfig {
    gridDimX: 0,
    blockDimX: 12,
    sharedMemBytes: 24,
    hStream: 32,
    attrs: 40,
    numAttrs: 48,
});

// ---------------------------------------------------------------------------------------------
// CUPTI callback API

/// A CUPTI status (`CUptiResult`).
pub type CUptiResult = c_uint;
/// `CUpti_CallbackDomain`.
pub type CUpti_CallbackDomain = c_uint;
/// `CUpti_CallbackId`: a driver, runtime, resource or synchronisation callback id.
pub type CUpti_CallbackId = u32;
/// `CUpti_ApiCallbackSite`.
pub type CUpti_ApiCallbackSite = c_uint;

/// `CUPTI_SUCCESS`.
pub const CUPTI_SUCCESS: CUptiResult = 0;
/// `CUPTI_ERROR_INVALID_PARAMETER`.
pub const CUPTI_ERROR_INVALID_PARAMETER: CUptiResult = 1;
/// `CUPTI_ERROR_NOT_INITIALIZED`.
pub const CUPTI_ERROR_NOT_INITIALIZED: CUptiResult = 15;
/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`: another subscriber (a profiler, a
/// debugger, or the application's own CUPTI use) already holds the callback API.
pub const CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: CUptiResult = 39;

/// `CUPTI_API_ENTER`.
pub const CUPTI_API_ENTER: CUpti_ApiCallbackSite = 0;
/// `CUPTI_API_EXIT`.
pub const CUPTI_API_EXIT: CUpti_ApiCallbackSite = 1;

/// `CUPTI_CB_DOMAIN_DRIVER_API`.
pub const CUPTI_CB_DOMAIN_DRIVER_API: CUpti_CallbackDomain = 1;
/// `CUPTI_CB_DOMAIN_RUNTIME_API`.
pub const CUPTI_CB_DOMAIN_RUNTIME_API: CUpti_CallbackDomain = 2;
/// `CUPTI_CB_DOMAIN_RESOURCE`.
pub const CUPTI_CB_DOMAIN_RESOURCE: CUpti_CallbackDomain = 3;

/// `CUPTI_CBID_RESOURCE_CONTEXT_CREATED`.
pub const CUPTI_CBID_RESOURCE_CONTEXT_CREATED: CUpti_CallbackId = 1;
/// `CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING`.
pub const CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING: CUpti_CallbackId = 2;
/// `CUPTI_CBID_RESOURCE_STREAM_CREATED`.
pub const CUPTI_CBID_RESOURCE_STREAM_CREATED: CUpti_CallbackId = 3;
/// `CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING`.
pub const CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING: CUpti_CallbackId = 4;
/// `CUPTI_CBID_RESOURCE_MODULE_LOADED`.
pub const CUPTI_CBID_RESOURCE_MODULE_LOADED: CUpti_CallbackId = 6;
/// `CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING`.
pub const CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING: CUpti_CallbackId = 7;

/// A CUPTI callback (`CUpti_CallbackFunc`); `cbdata` is a [`CUpti_CallbackData`] for the
/// driver and runtime domains and a [`CUpti_ResourceData`] for the resource domain.
pub type CUpti_CallbackFunc = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        domain: CUpti_CallbackDomain,
        cbid: CUpti_CallbackId,
        cbdata: *const c_void,
    ),
>;

/// What a driver or runtime API callback receives (`CUpti_CallbackData`); valid only during
/// the callback.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUpti_CallbackData {
    /// [`CUPTI_API_ENTER`] or [`CUPTI_API_EXIT`].
    pub callbackSite: CUpti_ApiCallbackSite,
    /// The API function's name (a static string).
    pub functionName: *const c_char,
    /// The call's arguments (`<function>_params`).
    pub functionParams: *const c_void,
    /// The `CUresult` the call returns (exit callbacks only).
    pub functionReturnValue: *mut c_void,
    /// The kernel's name, for launch callbacks.
    pub symbolName: *const c_char,
    /// The context current to the calling thread, or null.
    pub context: CUcontext,
    /// The context's process-unique id.
    pub contextUid: u32,
    /// 64 bits shared by the enter and exit callbacks of one call.
    pub correlationData: *mut u64,
    /// The activity-record correlation id of the call.
    pub correlationId: u32,
}
const_assert_layout!(CUpti_CallbackData, size = 72, align = 8);
const_assert_offsets!(CUpti_CallbackData {
    callbackSite: 0,
    functionName: 8,
    functionParams: 16,
    functionReturnValue: 24,
    symbolName: 32,
    context: 40,
    contextUid: 48,
    correlationData: 56,
    correlationId: 64,
});

/// What a resource callback receives (`CUpti_ResourceData`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUpti_ResourceData {
    /// The context created or destroyed, or the one owning the stream or module.
    pub context: CUcontext,
    /// The stream created or destroyed (the C union has no other member).
    pub resourceHandle: CUstream,
    /// For module callbacks a [`CUpti_ModuleResourceData`].
    pub resourceDescriptor: *mut c_void,
}
const_assert_layout!(CUpti_ResourceData, size = 24, align = 8);
const_assert_offsets!(CUpti_ResourceData {
    context: 0,
    resourceHandle: 8,
    resourceDescriptor: 16,
});

/// A module loaded or unloaded (`CUpti_ModuleResourceData`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUpti_ModuleResourceData {
    /// CUPTI's id of the module.
    pub moduleId: u32,
    /// Bytes of the cubin.
    pub cubinSize: usize,
    /// The cubin (an ELF image).
    pub pCubin: *const c_char,
}
const_assert_layout!(CUpti_ModuleResourceData, size = 24, align = 8);
const_assert_offsets!(CUpti_ModuleResourceData {
    moduleId: 0,
    cubinSize: 8,
    pCubin: 16,
});

/// Arguments of the traced driver functions, as CUPTI passes them in
/// [`CUpti_CallbackData::functionParams`] (`generated_cuda_meta.h`): one field per argument of
/// the C prototype, in order and named as there.
#[allow(missing_docs)] // the fields are the C prototype's arguments, documented by NVIDIA
pub mod params {
    use core::ffi::{c_char, c_uint, c_void};

    use super::*;

    /// `cuLaunchKernel_params` (also `cuLaunchKernel_ptsz_params`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuLaunchKernel_params {
        pub f: CUfunction,
        pub gridDimX: c_uint,
        pub gridDimY: c_uint,
        pub gridDimZ: c_uint,
        pub blockDimX: c_uint,
        pub blockDimY: c_uint,
        pub blockDimZ: c_uint,
        pub sharedMemBytes: c_uint,
        pub hStream: CUstream,
        pub kernelParams: *mut *mut c_void,
        pub extra: *mut *mut c_void,
    }
    const_assert_layout!(cuLaunchKernel_params, size = 64, align = 8);
    const_assert_offsets!(cuLaunchKernel_params {
        f: 0,
        gridDimX: 8,
        blockDimX: 20,
        sharedMemBytes: 32,
        hStream: 40,
        kernelParams: 48,
        extra: 56,
    });

    /// `cuLaunchCooperativeKernel_params` (also the `_ptsz` variant).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuLaunchCooperativeKernel_params {
        pub f: CUfunction,
        pub gridDimX: c_uint,
        pub gridDimY: c_uint,
        pub gridDimZ: c_uint,
        pub blockDimX: c_uint,
        pub blockDimY: c_uint,
        pub blockDimZ: c_uint,
        pub sharedMemBytes: c_uint,
        pub hStream: CUstream,
        pub kernelParams: *mut *mut c_void,
    }
    const_assert_layout!(cuLaunchCooperativeKernel_params, size = 56, align = 8);
    const_assert_offsets!(cuLaunchCooperativeKernel_params {
        f: 0,
        gridDimX: 8,
        sharedMemBytes: 32,
        hStream: 40,
        kernelParams: 48,
    });

    /// `cuLaunchKernelEx_params` (also the `_ptsz` variant).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuLaunchKernelEx_params {
        pub config: *const CUlaunchConfig,
        pub f: CUfunction,
        pub kernelParams: *mut *mut c_void,
        pub extra: *mut *mut c_void,
    }
    const_assert_layout!(cuLaunchKernelEx_params, size = 32, align = 8);
    const_assert_offsets!(cuLaunchKernelEx_params {
        config: 0,
        f: 8,
        kernelParams: 16,
        extra: 24,
    });

    /// `cuMemAlloc_v2_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemAlloc_v2_params {
        pub dptr: *mut CUdeviceptr,
        pub bytesize: usize,
    }
    const_assert_layout!(cuMemAlloc_v2_params, size = 16, align = 8);

    /// `cuMemAllocPitch_v2_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemAllocPitch_v2_params {
        pub dptr: *mut CUdeviceptr,
        pub pPitch: *mut usize,
        pub WidthInBytes: usize,
        pub Height: usize,
        pub ElementSizeBytes: c_uint,
    }
    const_assert_layout!(cuMemAllocPitch_v2_params, size = 40, align = 8);
    const_assert_offsets!(cuMemAllocPitch_v2_params {
        dptr: 0,
        pPitch: 8,
        WidthInBytes: 16,
        Height: 24,
        ElementSizeBytes: 32,
    });

    /// `cuMemAllocManaged_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemAllocManaged_params {
        pub dptr: *mut CUdeviceptr,
        pub bytesize: usize,
        pub flags: c_uint,
    }
    const_assert_layout!(cuMemAllocManaged_params, size = 24, align = 8);

    /// `cuMemAllocAsync_params` (also the `_ptsz` variant).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemAllocAsync_params {
        pub dptr: *mut CUdeviceptr,
        pub bytesize: usize,
        pub hStream: CUstream,
    }
    const_assert_layout!(cuMemAllocAsync_params, size = 24, align = 8);

    /// `cuMemAllocFromPoolAsync_params` (also the `_ptsz` variant).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemAllocFromPoolAsync_params {
        pub dptr: *mut CUdeviceptr,
        pub bytesize: usize,
        pub pool: CUmemoryPool,
        pub hStream: CUstream,
    }
    const_assert_layout!(cuMemAllocFromPoolAsync_params, size = 32, align = 8);
    const_assert_offsets!(cuMemAllocFromPoolAsync_params {
        dptr: 0,
        bytesize: 8,
        pool: 16,
        hStream: 24,
    });

    /// `cuMemFree_v2_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemFree_v2_params {
        pub dptr: CUdeviceptr,
    }
    const_assert_layout!(cuMemFree_v2_params, size = 8, align = 8);

    /// `cuMemFreeAsync_params` (also the `_ptsz` variant).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemFreeAsync_params {
        pub dptr: CUdeviceptr,
        pub hStream: CUstream,
    }
    const_assert_layout!(cuMemFreeAsync_params, size = 16, align = 8);

    /// `cuMemMap_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemMap_params {
        pub ptr: CUdeviceptr,
        pub size: usize,
        pub offset: usize,
        pub handle: CUmemGenericAllocationHandle,
        pub flags: u64,
    }
    const_assert_layout!(cuMemMap_params, size = 40, align = 8);

    /// `cuMemUnmap_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemUnmap_params {
        pub ptr: CUdeviceptr,
        pub size: usize,
    }
    const_assert_layout!(cuMemUnmap_params, size = 16, align = 8);

    /// `cuIpcOpenMemHandle_v2_params` (`cuIpcOpenMemHandle_params` has the same shape).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuIpcOpenMemHandle_v2_params {
        pub pdptr: *mut CUdeviceptr,
        pub handle: CUipcMemHandle,
        pub Flags: c_uint,
    }
    const_assert_layout!(cuIpcOpenMemHandle_v2_params, size = 80, align = 8);
    const_assert_offsets!(cuIpcOpenMemHandle_v2_params {
        pdptr: 0,
        handle: 8,
        Flags: 72,
    });

    /// `cuIpcGetMemHandle_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuIpcGetMemHandle_params {
        pub pHandle: *mut CUipcMemHandle,
        pub dptr: CUdeviceptr,
    }
    const_assert_layout!(cuIpcGetMemHandle_params, size = 16, align = 8);

    /// `cuMemExportToShareableHandle_params` (`handleType` is a `CUmemAllocationHandleType`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemExportToShareableHandle_params {
        pub shareableHandle: *mut c_void,
        pub handle: CUmemGenericAllocationHandle,
        pub handleType: c_uint,
        pub flags: u64,
    }
    const_assert_layout!(cuMemExportToShareableHandle_params, size = 32, align = 8);
    const_assert_offsets!(cuMemExportToShareableHandle_params {
        shareableHandle: 0,
        handle: 8,
        handleType: 16,
        flags: 24,
    });

    /// `cuMemPoolExportPointer_params` (`shareData_out` points to a 64-byte
    /// `CUmemPoolPtrExportData`, not read).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemPoolExportPointer_params {
        pub shareData_out: *mut c_void,
        pub ptr: CUdeviceptr,
    }
    const_assert_layout!(cuMemPoolExportPointer_params, size = 16, align = 8);

    /// `cuMemPoolImportPointer_params` (`shareData` points to a `CUmemPoolPtrExportData`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemPoolImportPointer_params {
        pub ptr_out: *mut CUdeviceptr,
        pub pool: CUmemoryPool,
        pub shareData: *mut c_void,
    }
    const_assert_layout!(cuMemPoolImportPointer_params, size = 24, align = 8);

    /// `cuMemGetHandleForAddressRange_params` (`handleType` is a `CUmemRangeHandleType`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemGetHandleForAddressRange_params {
        pub handle: *mut c_void,
        pub dptr: CUdeviceptr,
        pub size: usize,
        pub handleType: c_uint,
        pub flags: u64,
    }
    const_assert_layout!(cuMemGetHandleForAddressRange_params, size = 40, align = 8);
    const_assert_offsets!(cuMemGetHandleForAddressRange_params {
        handle: 0,
        dptr: 8,
        size: 16,
        handleType: 24,
        flags: 32,
    });

    /// `cuIpcCloseMemHandle_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuIpcCloseMemHandle_params {
        pub dptr: CUdeviceptr,
    }
    const_assert_layout!(cuIpcCloseMemHandle_params, size = 8, align = 8);

    /// `cuSurfObjectCreate_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuSurfObjectCreate_params {
        pub pSurfObject: *mut u64,
        pub pResDesc: *const c_void,
    }
    const_assert_layout!(cuSurfObjectCreate_params, size = 16, align = 8);

    /// `cuSurfObjectDestroy_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuSurfObjectDestroy_params {
        pub surfObject: u64,
    }
    const_assert_layout!(cuSurfObjectDestroy_params, size = 8, align = 8);

    /// `cuMemImportFromShareableHandle_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemImportFromShareableHandle_params {
        pub handle: *mut CUmemGenericAllocationHandle,
        pub osHandle: *mut c_void,
        pub shHandleType: CUmemAllocationHandleType,
    }
    const_assert_layout!(cuMemImportFromShareableHandle_params, size = 24, align = 8);

    /// `cuMemRetainAllocationHandle_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemRetainAllocationHandle_params {
        pub handle: *mut CUmemGenericAllocationHandle,
        pub addr: *mut c_void,
    }
    const_assert_layout!(cuMemRetainAllocationHandle_params, size = 16, align = 8);

    /// `cuMemCreate_params` (`prop` points to a [`CUmemAllocationProp`]).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemCreate_params {
        pub handle: *mut CUmemGenericAllocationHandle,
        pub size: usize,
        pub prop: *const c_void,
        pub flags: u64,
    }
    const_assert_layout!(cuMemCreate_params, size = 32, align = 8);

    /// `cuMemRelease_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemRelease_params {
        pub handle: CUmemGenericAllocationHandle,
    }
    const_assert_layout!(cuMemRelease_params, size = 8, align = 8);

    /// `cuMulticastCreate_params` (`prop` points to a `CUmulticastObjectProp`, not read).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMulticastCreate_params {
        pub mcHandle: *mut CUmemGenericAllocationHandle,
        pub prop: *const c_void,
    }
    const_assert_layout!(cuMulticastCreate_params, size = 16, align = 8);

    /// `cuModuleGetGlobal_v2_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuModuleGetGlobal_v2_params {
        pub dptr: *mut CUdeviceptr,
        pub bytes: *mut usize,
        pub hmod: CUmodule,
        pub name: *const c_char,
    }
    const_assert_layout!(cuModuleGetGlobal_v2_params, size = 32, align = 8);

    /// `cuLibraryGetGlobal_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuLibraryGetGlobal_params {
        pub dptr: *mut CUdeviceptr,
        pub bytes: *mut usize,
        pub library: CUlibrary,
        pub name: *const c_char,
    }
    const_assert_layout!(cuLibraryGetGlobal_params, size = 32, align = 8);

    /// `cuMemHostAlloc_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemHostAlloc_params {
        pub pp: *mut *mut c_void,
        pub bytesize: usize,
        pub Flags: c_uint,
    }
    const_assert_layout!(cuMemHostAlloc_params, size = 24, align = 8);

    /// `cuMemAllocHost_v2_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemAllocHost_v2_params {
        pub pp: *mut *mut c_void,
        pub bytesize: usize,
    }
    const_assert_layout!(cuMemAllocHost_v2_params, size = 16, align = 8);

    /// `cuMemHostRegister_v2_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemHostRegister_v2_params {
        pub p: *mut c_void,
        pub bytesize: usize,
        pub Flags: c_uint,
    }
    const_assert_layout!(cuMemHostRegister_v2_params, size = 24, align = 8);

    /// `cuMemFreeHost_params` (`cuMemHostUnregister_params` has the same shape).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuMemFreeHost_params {
        pub p: *mut c_void,
    }
    const_assert_layout!(cuMemFreeHost_params, size = 8, align = 8);

    /// `cuModuleUnload_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuModuleUnload_params {
        pub hmod: CUmodule,
    }
    const_assert_layout!(cuModuleUnload_params, size = 8, align = 8);

    /// `cuLibraryUnload_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuLibraryUnload_params {
        pub library: CUlibrary,
    }
    const_assert_layout!(cuLibraryUnload_params, size = 8, align = 8);

    /// `cuGraphLaunch_params` (also the `_ptsz` variant).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuGraphLaunch_params {
        pub hGraph: CUgraphExec,
        pub hStream: CUstream,
    }

    /// `cuLibraryGetKernel_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuLibraryGetKernel_params {
        pub pKernel: *mut CUkernel,
        pub library: CUlibrary,
        pub name: *const c_char,
    }
    const_assert_layout!(cuLibraryGetKernel_params, size = 24, align = 8);

    /// `cuLibraryEnumerateKernels_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuLibraryEnumerateKernels_params {
        pub kernels: *mut CUkernel,
        pub numKernels: c_uint,
        pub lib: CUlibrary,
    }
    const_assert_layout!(cuLibraryEnumerateKernels_params, size = 24, align = 8);

    /// `cuKernelGetFunction_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuKernelGetFunction_params {
        pub pFunc: *mut CUfunction,
        pub kernel: CUkernel,
    }
    const_assert_layout!(cuKernelGetFunction_params, size = 16, align = 8);

    /// `cuModuleGetFunction_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuModuleGetFunction_params {
        pub hfunc: *mut CUfunction,
        pub hmod: CUmodule,
        pub name: *const c_char,
    }
    const_assert_layout!(cuModuleGetFunction_params, size = 24, align = 8);

    /// `cuModuleEnumerateFunctions_params`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct cuModuleEnumerateFunctions_params {
        pub functions: *mut CUfunction,
        pub numFunctions: c_uint,
        pub r#mod: CUmodule,
    }
    const_assert_layout!(cuModuleEnumerateFunctions_params, size = 24, align = 8);
    const_assert_layout!(cuGraphLaunch_params, size = 16, align = 8);
}
pub use params::*;

/// CUPTI 13.0's ids of the driver functions the backend traces (`cupti_driver_cbid.h`).
pub mod cbid {
    use super::CUpti_CallbackId;

    macro_rules! ids {
        ($($name:ident = $value:expr;)*) => {
            $(
                #[doc = concat!("`CUPTI_DRIVER_TRACE_CBID_", stringify!($name), "`.")]
                pub const $name: CUpti_CallbackId = $value;
            )*
            /// Every id above with its function name.
            pub const ALL: &[(&str, CUpti_CallbackId)] = &[$((stringify!($name), $value)),*];
        };
    }

    ids! {
        cuMemAlloc_v2 = 243;
        cuMemAllocPitch_v2 = 244;
        cuMemFree_v2 = 245;
        cuLaunchKernel = 307;
        cuLaunchKernel_ptsz = 442;
        cuLaunchCooperativeKernel = 477;
        cuLaunchCooperativeKernel_ptsz = 478;
        cuLaunchCooperativeKernelMultiDevice = 480;
        cuLaunchKernelEx = 652;
        cuLaunchKernelEx_ptsz = 653;
        cuMemAllocManaged = 371;
        cuMemAllocAsync = 598;
        cuMemAllocAsync_ptsz = 599;
        cuMemAllocFromPoolAsync = 611;
        cuMemAllocFromPoolAsync_ptsz = 612;
        cuMemFreeAsync = 600;
        cuMemFreeAsync_ptsz = 601;
        cuMemPoolExportPointer = 615;
        cuMemPoolImportPointer = 616;
        cuMemMap = 551;
        cuMemUnmap = 552;
        cuMemRelease = 550;
        cuMemCreate = 549;
        cuMemImportFromShareableHandle = 555;
        cuMemExportToShareableHandle = 554;
        cuMemGetHandleForAddressRange = 674;
        cuMemRetainAllocationHandle = 565;
        cuMulticastCreate = 706;
        cuIpcGetMemHandle = 328;
        cuIpcOpenMemHandle = 329;
        cuIpcOpenMemHandle_v2 = 567;
        cuIpcCloseMemHandle = 330;
        cuSurfObjectCreate = 343;
        cuSurfObjectDestroy = 344;
        cuModuleGetGlobal_v2 = 241;
        cuLibraryGetGlobal = 684;
        cuGraphLaunch = 514;
        cuGraphLaunch_ptsz = 515;
        cuLibraryGetKernel = 681;
        cuLibraryEnumerateKernels = 740;
        cuKernelGetFunction = 683;
        cuModuleGetFunction = 23;
        cuModuleEnumerateFunctions = 738;
    }
}

// ---------------------------------------------------------------------------------------------
// CUPTI's activity API (`cupti_activity.h`): kernel records, for kernel-only pass times.

/// `CUpti_ActivityKind`.
pub type CUpti_ActivityKind = c_uint;
/// `CUPTI_ACTIVITY_KIND_KERNEL`: serializing kernel records (enabled only with
/// `ROCPROF_REPLAY_CUDA_PASS_TIMES=serial`).
pub const CUPTI_ACTIVITY_KIND_KERNEL: CUpti_ActivityKind = 3;
/// `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`: a record per kernel, kernels still run
/// concurrently.
pub const CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: CUpti_ActivityKind = 10;
/// `CUPTI_ERROR_MAX_LIMIT_REACHED`: `cuptiActivityGetNextRecord` has no more records.
pub const CUPTI_ERROR_MAX_LIMIT_REACHED: CUptiResult = 12;

/// The head of every kernel activity record (`CUpti_ActivityKernel4` to
/// `CUpti_ActivityKernel10` share it, field for field, up to `submitted`; the records are
/// longer). Read in place from CUPTI's buffers, never built.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUpti_ActivityKernelHead {
    /// `CUPTI_ACTIVITY_KIND_KERNEL` or `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`.
    pub kind: CUpti_ActivityKind,
    /// Requested and executed cache configuration (4 bits each).
    pub cacheConfig: u8,
    /// Shared memory bank configuration.
    pub sharedMemoryConfig: u8,
    /// Registers per thread.
    pub registersPerThread: u16,
    /// Partitioned global caching requested.
    pub partitionedGlobalCacheRequested: c_uint,
    /// Partitioned global caching executed.
    pub partitionedGlobalCacheExecuted: c_uint,
    /// Kernel start on the GPU, ns (CUPTI's timestamp).
    pub start: u64,
    /// Kernel end on the GPU, ns.
    pub end: u64,
    /// When the kernel and its child grids completed, ns.
    pub completed: u64,
    /// The device's CUPTI id.
    pub deviceId: u32,
    /// The context's CUPTI id.
    pub contextId: u32,
    /// The stream's CUPTI id.
    pub streamId: u32,
    /// Grid size, x.
    pub gridX: i32,
    /// Grid size, y.
    pub gridY: i32,
    /// Grid size, z.
    pub gridZ: i32,
    /// Block size, x.
    pub blockX: i32,
    /// Block size, y.
    pub blockY: i32,
    /// Block size, z.
    pub blockZ: i32,
    /// Static shared memory per block, bytes.
    pub staticSharedMemory: i32,
    /// Dynamic shared memory per block, bytes.
    pub dynamicSharedMemory: u32,
    /// Local memory per thread, bytes.
    pub localMemoryPerThread: u32,
    /// Local memory reserved for the kernel, bytes.
    pub localMemoryTotal: u32,
    /// The correlation id of the launch call (the callback API's `correlationId`).
    pub correlationId: u32,
    /// The grid's id, unique within the context.
    pub gridId: i64,
    /// The kernel's (mangled) name, owned by CUPTI.
    pub name: *const c_char,
    /// Reserved.
    pub reserved0: *mut c_void,
    /// When the launch was queued by the host, ns; 0 without latency timestamps
    /// (`cuptiActivityEnableLatencyTimestamps`).
    pub queued: u64,
    /// When the launch was submitted to the GPU (its front end took it), ns; 0 without
    /// latency timestamps.
    pub submitted: u64,
}

/// `CUpti_BuffersCallbackRequestFunc`: CUPTI asks for an empty record buffer.
pub type CUpti_BuffersCallbackRequestFunc =
    unsafe extern "C" fn(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize);
/// `CUpti_BuffersCallbackCompleteFunc`: CUPTI hands a buffer of records back.
pub type CUpti_BuffersCallbackCompleteFunc = unsafe extern "C" fn(
    context: CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    size: usize,
    valid_size: usize,
);
/// `cuptiActivityRegisterCallbacks`.
pub type cuptiActivityRegisterCallbacks_fn = unsafe extern "C" fn(
    requested: Option<CUpti_BuffersCallbackRequestFunc>,
    completed: Option<CUpti_BuffersCallbackCompleteFunc>,
) -> CUptiResult;
/// `cuptiActivityEnable` (and `cuptiActivityDisable`).
pub type cuptiActivityEnable_fn = unsafe extern "C" fn(kind: CUpti_ActivityKind) -> CUptiResult;
/// `cuptiActivityEnableLatencyTimestamps`: `queued` and `submitted` in kernel records.
pub type cuptiActivityEnableLatencyTimestamps_fn = unsafe extern "C" fn(enable: u8) -> CUptiResult;
/// `cuptiActivityFlushAll`.
pub type cuptiActivityFlushAll_fn = unsafe extern "C" fn(flag: u32) -> CUptiResult;
/// `cuptiGetTimestamp`: CUPTI's clock, the time base of activity records (ns).
pub type cuptiGetTimestamp_fn = unsafe extern "C" fn(timestamp: *mut u64) -> CUptiResult;
/// `cuptiGetContextId`: the id activity records name a context by.
pub type cuptiGetContextId_fn =
    unsafe extern "C" fn(context: CUcontext, id: *mut u32) -> CUptiResult;
/// `cuptiActivityGetNextRecord`.
pub type cuptiActivityGetNextRecord_fn = unsafe extern "C" fn(
    buffer: *mut u8,
    valid_size: usize,
    record: *mut *mut c_void,
) -> CUptiResult;

// ---------------------------------------------------------------------------------------------
// Signatures of the functions the backend calls.

/// `cuptiSubscribe`.
pub type cuptiSubscribe_fn = unsafe extern "C" fn(
    subscriber: *mut CUpti_SubscriberHandle,
    callback: CUpti_CallbackFunc,
    userdata: *mut c_void,
) -> CUptiResult;
/// `cuptiUnsubscribe`.
pub type cuptiUnsubscribe_fn =
    unsafe extern "C" fn(subscriber: CUpti_SubscriberHandle) -> CUptiResult;
/// `cuptiEnableCallback`.
pub type cuptiEnableCallback_fn = unsafe extern "C" fn(
    enable: u32,
    subscriber: CUpti_SubscriberHandle,
    domain: CUpti_CallbackDomain,
    cbid: CUpti_CallbackId,
) -> CUptiResult;
/// `cuptiGetCallbackName`.
pub type cuptiGetCallbackName_fn = unsafe extern "C" fn(
    domain: CUpti_CallbackDomain,
    cbid: u32,
    name: *mut *const c_char,
) -> CUptiResult;
/// `cuptiGetResultString`.
pub type cuptiGetResultString_fn =
    unsafe extern "C" fn(result: CUptiResult, str: *mut *const c_char) -> CUptiResult;

/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`: look a function up in its legacy-default-stream form.
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;

/// `cuGetProcAddress_v2`: the function `symbol` as of CUDA version `cudaVersion` (e.g. 12000
/// for 12.0), whatever its exported name (`_v2`, `_v3` suffixes).
pub type cuGetProcAddress_fn = unsafe extern "C" fn(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
    symbolStatus: *mut c_int,
) -> CUresult;
/// `cuGetErrorName`.
pub type cuGetErrorName_fn =
    unsafe extern "C" fn(error: CUresult, pStr: *mut *const c_char) -> CUresult;
/// `cuCtxGetCurrent`.
pub type cuCtxGetCurrent_fn = unsafe extern "C" fn(pctx: *mut CUcontext) -> CUresult;
/// `cuCtxSetCurrent`.
pub type cuCtxSetCurrent_fn = unsafe extern "C" fn(ctx: CUcontext) -> CUresult;
/// `cuCtxGetDevice`.
pub type cuCtxGetDevice_fn = unsafe extern "C" fn(device: *mut CUdevice) -> CUresult;
/// `cuMemGetInfo_v2`.
pub type cuMemGetInfo_fn = unsafe extern "C" fn(free: *mut usize, total: *mut usize) -> CUresult;
/// `cuMemAlloc_v2`.
pub type cuMemAlloc_fn = unsafe extern "C" fn(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult;
/// `cuMemAllocPitch_v2`.
pub type cuMemAllocPitch_fn = unsafe extern "C" fn(
    dptr: *mut CUdeviceptr,
    pPitch: *mut usize,
    WidthInBytes: usize,
    Height: usize,
    ElementSizeBytes: c_uint,
) -> CUresult;
/// `cuMemAllocAsync` (the stream's meaning of 0 is the legacy default stream; the `_ptsz`
/// entry point's is the thread's own).
pub type cuMemAllocAsync_fn =
    unsafe extern "C" fn(dptr: *mut CUdeviceptr, bytesize: usize, hStream: CUstream) -> CUresult;
/// `cuMemAllocFromPoolAsync`.
pub type cuMemAllocFromPoolAsync_fn = unsafe extern "C" fn(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    hStream: CUstream,
) -> CUresult;
/// `cuMemCreate` (`prop` points to a [`CUmemAllocationProp`]).
pub type cuMemCreate_fn = unsafe extern "C" fn(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> CUresult;
/// `cuMemFree_v2`.
pub type cuMemFree_fn = unsafe extern "C" fn(dptr: CUdeviceptr) -> CUresult;
/// `cuMemHostAlloc`.
pub type cuMemHostAlloc_fn =
    unsafe extern "C" fn(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) -> CUresult;
/// `cuMemFreeHost`.
pub type cuMemFreeHost_fn = unsafe extern "C" fn(p: *mut c_void) -> CUresult;
/// `cuMemGetAddressRange_v2`: the base and size of the allocation containing `dptr`.
pub type cuMemGetAddressRange_fn =
    unsafe extern "C" fn(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr) -> CUresult;
/// `cuMemcpyAsync` (unified addressing: either side may be device or pinned host memory).
pub type cuMemcpyAsync_fn = unsafe extern "C" fn(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    byte_count: usize,
    hStream: CUstream,
) -> CUresult;
/// `cuStreamCreate`.
pub type cuStreamCreate_fn =
    unsafe extern "C" fn(phStream: *mut CUstream, flags: c_uint) -> CUresult;
/// `cuStreamDestroy_v2`.
pub type cuStreamDestroy_fn = unsafe extern "C" fn(hStream: CUstream) -> CUresult;
/// `cuStreamQuery`.
pub type cuStreamQuery_fn = unsafe extern "C" fn(hStream: CUstream) -> CUresult;
/// `cuStreamGetFlags`.
pub type cuStreamGetFlags_fn =
    unsafe extern "C" fn(hStream: CUstream, flags: *mut c_uint) -> CUresult;
/// `cuStreamIsCapturing`.
pub type cuStreamIsCapturing_fn =
    unsafe extern "C" fn(hStream: CUstream, captureStatus: *mut CUstreamCaptureStatus) -> CUresult;
/// `cuStreamWaitEvent`.
pub type cuStreamWaitEvent_fn =
    unsafe extern "C" fn(hStream: CUstream, hEvent: CUevent, flags: c_uint) -> CUresult;
/// `cuThreadExchangeStreamCaptureMode`.
pub type cuThreadExchangeStreamCaptureMode_fn =
    unsafe extern "C" fn(mode: *mut CUstreamCaptureMode) -> CUresult;
/// `cuEventCreate`.
pub type cuEventCreate_fn = unsafe extern "C" fn(phEvent: *mut CUevent, flags: c_uint) -> CUresult;
/// `cuEventDestroy_v2`.
pub type cuEventDestroy_fn = unsafe extern "C" fn(hEvent: CUevent) -> CUresult;
/// `cuEventRecord`.
pub type cuEventRecord_fn = unsafe extern "C" fn(hEvent: CUevent, hStream: CUstream) -> CUresult;
/// `cuEventQuery`.
pub type cuEventQuery_fn = unsafe extern "C" fn(hEvent: CUevent) -> CUresult;
/// `cuEventElapsedTime` (milliseconds between two recorded events).
pub type cuEventElapsedTime_fn =
    unsafe extern "C" fn(pMilliseconds: *mut f32, hStart: CUevent, hEnd: CUevent) -> CUresult;
/// `cuFuncGetAttribute`.
pub type cuFuncGetAttribute_fn = unsafe extern "C" fn(
    pi: *mut c_int,
    attrib: CUfunction_attribute,
    hfunc: CUfunction,
) -> CUresult;
/// `cuFuncGetParamInfo` (CUDA 12.4+): offset and size of a kernel parameter;
/// `CUDA_ERROR_INVALID_VALUE` past the last one.
pub type cuFuncGetParamInfo_fn = unsafe extern "C" fn(
    func: CUfunction,
    paramIndex: usize,
    paramOffset: *mut usize,
    paramSize: *mut usize,
) -> CUresult;
/// `cuFuncGetModule`.
pub type cuFuncGetModule_fn =
    unsafe extern "C" fn(hmod: *mut CUmodule, hfunc: CUfunction) -> CUresult;
/// `cuKernelGetFunction`: the `CUfunction` of a `CUkernel` in the current context (loads
/// its module if needed).
pub type cuKernelGetFunction_fn =
    unsafe extern "C" fn(pFunc: *mut CUfunction, kernel: CUkernel) -> CUresult;
/// `cuKernelGetAttribute`.
pub type cuKernelGetAttribute_fn = unsafe extern "C" fn(
    pi: *mut c_int,
    attrib: CUfunction_attribute,
    kernel: CUkernel,
    dev: CUdevice,
) -> CUresult;
/// `cuModuleGetGlobal_v2`.
pub type cuModuleGetGlobal_fn = unsafe extern "C" fn(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult;
/// `cuModuleLoadData`: loads a module (cubin, fatbin or NUL-terminated PTX, which the driver
/// JIT-compiles) into the current context.
pub type cuModuleLoadData_fn =
    unsafe extern "C" fn(module: *mut CUmodule, image: *const c_void) -> CUresult;
/// `cuModuleGetFunction`: a kernel of a loaded module, by name.
pub type cuModuleGetFunction_fn =
    unsafe extern "C" fn(hfunc: *mut CUfunction, hmod: CUmodule, name: *const c_char) -> CUresult;
/// `cuLaunchKernel`.
pub type cuLaunchKernel_fn = unsafe extern "C" fn(
    f: CUfunction,
    gridDimX: c_uint,
    gridDimY: c_uint,
    gridDimZ: c_uint,
    blockDimX: c_uint,
    blockDimY: c_uint,
    blockDimZ: c_uint,
    sharedMemBytes: c_uint,
    hStream: CUstream,
    kernelParams: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult;
/// `cuLaunchCooperativeKernel`.
pub type cuLaunchCooperativeKernel_fn = unsafe extern "C" fn(
    f: CUfunction,
    gridDimX: c_uint,
    gridDimY: c_uint,
    gridDimZ: c_uint,
    blockDimX: c_uint,
    blockDimY: c_uint,
    blockDimZ: c_uint,
    sharedMemBytes: c_uint,
    hStream: CUstream,
    kernelParams: *mut *mut c_void,
) -> CUresult;
/// `cuLaunchKernelEx`.
pub type cuLaunchKernelEx_fn = unsafe extern "C" fn(
    config: *const CUlaunchConfig,
    f: CUfunction,
    kernelParams: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult;
