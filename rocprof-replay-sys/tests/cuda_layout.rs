//! Layout proof of the CUDA and CUPTI declarations (feature `cuda`).
//!
//! One list of checks — every mirrored size, alignment, field offset, constant, callback id
//! and function signature shape — is compared two ways:
//!
//! - with the figures recorded from the real CUDA 13.0 / CUPTI 13.0 headers on an H200
//!   machine (`cuda_layout.recorded`, written by the probe below): always, here and in CI;
//! - with the headers installed on this machine, by compiling the same probe with `nvcc` (or
//!   `c++`) and running it: where the CUDA toolkit is found (`have_cuda_headers`, set by
//!   `build.rs` from `CUDA_HOME`, `CUDA_PATH` or `/usr/local/cuda`); elsewhere the test is
//!   ignored with the reason. `ROCPROF_REPLAY_CUDA_PROBE_OUT=file` also writes the probe's
//!   figures to `file`, in the recorded format, to record a new CUDA version.
#![cfg(feature = "cuda")]

use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use rocprof_replay_sys::cuda::*;

/// One figure: a C++ expression and what Rust says it is.
struct Check {
    c_expr: String,
    rust: String,
}

#[derive(Default)]
struct Probe {
    checks: Vec<Check>,
}

/// Return and argument sizes of an `extern "C"` function type.
trait FnShape {
    fn shape() -> String;
}

macro_rules! impl_fn_shape {
    ($($arg:ident),*) => {
        impl<R, $($arg),*> FnShape for unsafe extern "C" fn($($arg),*) -> R {
            fn shape() -> String {
                let v: Vec<usize> = vec![size_of::<R>() $(, size_of::<$arg>())*];
                v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")
            }
        }
    };
}
impl_fn_shape!(A1);
impl_fn_shape!(A1, A2);
impl_fn_shape!(A1, A2, A3);
impl_fn_shape!(A1, A2, A3, A4);
impl_fn_shape!(A1, A2, A3, A4, A5);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7, A8, A9, A10);
impl_fn_shape!(A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11);

impl Probe {
    fn number(&mut self, c_expr: String, rust: u64) {
        self.checks.push(Check {
            c_expr,
            rust: rust.to_string(),
        });
    }

    fn layout(&mut self, c_type: &str, size: usize, align: usize) {
        self.number(format!("sizeof({c_type})"), size as u64);
        self.number(format!("alignof({c_type})"), align as u64);
    }

    fn offset(&mut self, c_type: &str, field: &str, rust: usize) {
        self.number(format!("offsetof({c_type}, {field})"), rust as u64);
    }

    fn constant(&mut self, c_name: &str, rust: u64) {
        self.number(c_name.to_string(), rust);
    }

    fn shape(&mut self, c_fn: &str, rust: String) {
        self.checks.push(Check {
            c_expr: format!("SHAPE({c_fn})"),
            rust,
        });
    }

    fn source(&self) -> String {
        let mut s = String::from(
            r#"#include <cuda.h>
#include <cupti.h>
#include <cstddef>
#include <cstdio>
#include <string>
template <class T> struct Size { static constexpr unsigned long long v = sizeof(T); };
template <> struct Size<void> { static constexpr unsigned long long v = 0; };
template <class F> struct Shape;
template <class R, class... A> struct Shape<R (*)(A...)> {
  static std::string get() {
    std::string s = std::to_string(Size<R>::v);
    ((s += "," + std::to_string(Size<A>::v)), ...);
    return s;
  }
};
// decltype only: nothing is linked.
#define SHAPE(f) Shape<decltype(&f)>::get()
static std::string show(unsigned long long v) { return std::to_string(v); }
static std::string show(const std::string& v) { return v; }
int main() {
"#,
        );
        for c in &self.checks {
            let expr = if c.c_expr.starts_with("SHAPE(") {
                c.c_expr.clone()
            } else {
                format!("(unsigned long long)({})", c.c_expr)
            };
            writeln!(
                s,
                "  std::printf(\"%s\\t%s\\n\", {:?}, show({expr}).c_str());",
                c.c_expr
            )
            .unwrap();
        }
        s.push_str("  return 0;\n}\n");
        s
    }
}

macro_rules! strukt {
    ($p:expr, $rust:ty, $c:literal { $($f:ident),* $(,)? }) => {{
        $p.layout($c, size_of::<$rust>(), align_of::<$rust>());
        $( $p.offset($c, stringify!($f), offset_of!($rust, $f)); )*
    }};
}

macro_rules! constants {
    ($p:expr, $($name:ident),* $(,)?) => {{
        $( $p.constant(stringify!($name), $name as u64); )*
    }};
}

fn checks() -> Probe {
    let mut p = Probe::default();
    p.layout("CUresult", size_of::<CUresult>(), align_of::<CUresult>());
    p.layout("CUdevice", size_of::<CUdevice>(), align_of::<CUdevice>());
    p.layout(
        "CUmemAllocationHandleType",
        size_of::<CUmemAllocationHandleType>(),
        align_of::<CUmemAllocationHandleType>(),
    );
    p.layout(
        "CUdeviceptr",
        size_of::<CUdeviceptr>(),
        align_of::<CUdeviceptr>(),
    );
    p.layout(
        "CUstreamCaptureStatus",
        size_of::<CUstreamCaptureStatus>(),
        align_of::<CUstreamCaptureStatus>(),
    );
    p.layout(
        "CUlaunchAttributeID",
        size_of::<CUlaunchAttributeID>(),
        align_of::<CUlaunchAttributeID>(),
    );
    p.layout(
        "CUptiResult",
        size_of::<CUptiResult>(),
        align_of::<CUptiResult>(),
    );
    p.layout(
        "CUpti_CallbackDomain",
        size_of::<CUpti_CallbackDomain>(),
        align_of::<CUpti_CallbackDomain>(),
    );
    p.layout(
        "CUlaunchAttributeValue",
        size_of::<CUlaunchAttributeValue>(),
        align_of::<CUlaunchAttributeValue>(),
    );
    strukt!(p, CUlaunchAttribute, "CUlaunchAttribute" { id, value });
    strukt!(p, CUlaunchConfig, "CUlaunchConfig" {
        gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
        attrs, numAttrs,
    });
    strukt!(p, CUpti_CallbackData, "CUpti_CallbackData" {
        callbackSite, functionName, functionParams, functionReturnValue, symbolName, context,
        contextUid, correlationData, correlationId,
    });
    p.layout(
        "CUpti_ResourceData",
        size_of::<CUpti_ResourceData>(),
        align_of::<CUpti_ResourceData>(),
    );
    p.offset(
        "CUpti_ResourceData",
        "context",
        offset_of!(CUpti_ResourceData, context),
    );
    p.offset(
        "CUpti_ResourceData",
        "resourceHandle.stream",
        offset_of!(CUpti_ResourceData, resourceHandle),
    );
    p.offset(
        "CUpti_ResourceData",
        "resourceDescriptor",
        offset_of!(CUpti_ResourceData, resourceDescriptor),
    );
    strukt!(p, CUpti_ModuleResourceData, "CUpti_ModuleResourceData" {
        moduleId, cubinSize, pCubin,
    });
    strukt!(p, cuLaunchKernel_params, "cuLaunchKernel_params" {
        f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
        hStream, kernelParams, extra,
    });
    strukt!(p, cuLaunchKernel_params, "cuLaunchKernel_ptsz_params" {
        f, gridDimX, sharedMemBytes, hStream, kernelParams, extra,
    });
    strukt!(p, cuLaunchCooperativeKernel_params, "cuLaunchCooperativeKernel_params" {
        f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
        hStream, kernelParams,
    });
    strukt!(p, cuLaunchCooperativeKernel_params, "cuLaunchCooperativeKernel_ptsz_params" {
        f, gridDimX, sharedMemBytes, hStream, kernelParams,
    });
    strukt!(p, cuLaunchKernelEx_params, "cuLaunchKernelEx_params" {
        config, f, kernelParams, extra,
    });
    strukt!(p, cuLaunchKernelEx_params, "cuLaunchKernelEx_ptsz_params" {
        config, f, kernelParams, extra,
    });
    strukt!(p, cuMemAlloc_v2_params, "cuMemAlloc_v2_params" { dptr, bytesize });
    strukt!(p, cuMemAllocPitch_v2_params, "cuMemAllocPitch_v2_params" {
        dptr, pPitch, WidthInBytes, Height, ElementSizeBytes,
    });
    strukt!(p, cuMemAllocManaged_params, "cuMemAllocManaged_params" { dptr, bytesize, flags });
    strukt!(p, cuMemAllocAsync_params, "cuMemAllocAsync_params" { dptr, bytesize, hStream });
    strukt!(p, cuMemAllocAsync_params, "cuMemAllocAsync_ptsz_params" { dptr, bytesize, hStream });
    strukt!(p, cuMemAllocFromPoolAsync_params, "cuMemAllocFromPoolAsync_params" {
        dptr, bytesize, pool, hStream,
    });
    strukt!(p, cuMemAllocFromPoolAsync_params, "cuMemAllocFromPoolAsync_ptsz_params" {
        dptr, bytesize, pool, hStream,
    });
    strukt!(p, cuMemFree_v2_params, "cuMemFree_v2_params" { dptr });
    strukt!(p, cuMemFreeAsync_params, "cuMemFreeAsync_params" { dptr, hStream });
    strukt!(p, cuMemFreeAsync_params, "cuMemFreeAsync_ptsz_params" { dptr, hStream });
    strukt!(p, cuMemMap_params, "cuMemMap_params" { ptr, size, offset, handle, flags });
    strukt!(p, cuMemUnmap_params, "cuMemUnmap_params" { ptr, size });
    strukt!(p, CUipcMemHandle, "CUipcMemHandle" { reserved });
    strukt!(p, cuIpcOpenMemHandle_v2_params, "cuIpcOpenMemHandle_v2_params" {
        pdptr, handle, Flags,
    });
    strukt!(p, cuIpcOpenMemHandle_v2_params, "cuIpcOpenMemHandle_params" { pdptr, handle, Flags });
    strukt!(p, cuIpcCloseMemHandle_params, "cuIpcCloseMemHandle_params" { dptr });
    strukt!(p, cuIpcGetMemHandle_params, "cuIpcGetMemHandle_params" { pHandle, dptr });
    strukt!(p, cuMemExportToShareableHandle_params, "cuMemExportToShareableHandle_params" {
        shareableHandle, handle, handleType, flags,
    });
    strukt!(p, cuMemPoolExportPointer_params, "cuMemPoolExportPointer_params" {
        shareData_out, ptr,
    });
    strukt!(p, cuMemPoolImportPointer_params, "cuMemPoolImportPointer_params" {
        ptr_out, pool, shareData,
    });
    strukt!(p, cuMemGetHandleForAddressRange_params, "cuMemGetHandleForAddressRange_params" {
        handle, dptr, size, handleType, flags,
    });
    strukt!(p, cuMemImportFromShareableHandle_params, "cuMemImportFromShareableHandle_params" {
        handle, osHandle, shHandleType,
    });
    strukt!(p, cuMemRetainAllocationHandle_params, "cuMemRetainAllocationHandle_params" {
        handle, addr,
    });
    strukt!(p, cuMemRelease_params, "cuMemRelease_params" { handle });
    strukt!(p, cuMemCreate_params, "cuMemCreate_params" { handle, size, prop, flags });
    p.layout(
        "CUmemLocation",
        size_of::<CUmemLocation>(),
        align_of::<CUmemLocation>(),
    );
    p.offset("CUmemLocation", "type", offset_of!(CUmemLocation, type_));
    p.offset("CUmemLocation", "id", offset_of!(CUmemLocation, id));
    p.layout(
        "CUmemAllocationProp",
        size_of::<CUmemAllocationProp>(),
        align_of::<CUmemAllocationProp>(),
    );
    p.offset(
        "CUmemAllocationProp",
        "type",
        offset_of!(CUmemAllocationProp, type_),
    );
    p.offset(
        "CUmemAllocationProp",
        "requestedHandleTypes",
        offset_of!(CUmemAllocationProp, requestedHandleTypes),
    );
    p.offset(
        "CUmemAllocationProp",
        "location",
        offset_of!(CUmemAllocationProp, location),
    );
    p.offset(
        "CUmemAllocationProp",
        "win32HandleMetaData",
        offset_of!(CUmemAllocationProp, win32HandleMetaData),
    );
    p.offset(
        "CUmemAllocationProp",
        "allocFlags",
        offset_of!(CUmemAllocationProp, allocFlags),
    );
    strukt!(p, cuMulticastCreate_params, "cuMulticastCreate_params" { mcHandle, prop });
    strukt!(p, cuMemHostAlloc_params, "cuMemHostAlloc_params" { pp, bytesize, Flags });
    strukt!(p, cuMemAllocHost_v2_params, "cuMemAllocHost_v2_params" { pp, bytesize });
    strukt!(p, cuMemHostRegister_v2_params, "cuMemHostRegister_v2_params" { p, bytesize, Flags });
    strukt!(p, cuMemFreeHost_params, "cuMemFreeHost_params" { p });
    strukt!(p, cuMemFreeHost_params, "cuMemHostUnregister_params" { p });
    strukt!(p, cuModuleUnload_params, "cuModuleUnload_params" { hmod });
    strukt!(p, cuLibraryUnload_params, "cuLibraryUnload_params" { library });
    strukt!(p, cuModuleGetGlobal_v2_params, "cuModuleGetGlobal_v2_params" {
        dptr, bytes, hmod, name,
    });
    strukt!(p, cuLibraryGetGlobal_params, "cuLibraryGetGlobal_params" {
        dptr, bytes, library, name,
    });
    strukt!(p, cuGraphLaunch_params, "cuGraphLaunch_params" { hGraph, hStream });
    // The `_ptsz` variant names its first argument `hGraphExec`.
    p.layout(
        "cuGraphLaunch_ptsz_params",
        size_of::<cuGraphLaunch_params>(),
        align_of::<cuGraphLaunch_params>(),
    );
    p.offset(
        "cuGraphLaunch_ptsz_params",
        "hGraphExec",
        offset_of!(cuGraphLaunch_params, hGraph),
    );
    p.offset(
        "cuGraphLaunch_ptsz_params",
        "hStream",
        offset_of!(cuGraphLaunch_params, hStream),
    );
    strukt!(p, cuLibraryGetKernel_params, "cuLibraryGetKernel_params" { pKernel, library, name });
    strukt!(p, cuLibraryEnumerateKernels_params, "cuLibraryEnumerateKernels_params" {
        kernels, numKernels, lib,
    });
    strukt!(p, cuKernelGetFunction_params, "cuKernelGetFunction_params" { pFunc, kernel });
    strukt!(p, cuModuleGetFunction_params, "cuModuleGetFunction_params" { hfunc, hmod, name });
    p.layout(
        "cuModuleEnumerateFunctions_params",
        size_of::<cuModuleEnumerateFunctions_params>(),
        align_of::<cuModuleEnumerateFunctions_params>(),
    );
    p.offset(
        "cuModuleEnumerateFunctions_params",
        "functions",
        offset_of!(cuModuleEnumerateFunctions_params, functions),
    );
    p.offset(
        "cuModuleEnumerateFunctions_params",
        "numFunctions",
        offset_of!(cuModuleEnumerateFunctions_params, numFunctions),
    );
    p.offset(
        "cuModuleEnumerateFunctions_params",
        "mod",
        offset_of!(cuModuleEnumerateFunctions_params, r#mod),
    );

    constants!(
        p,
        CUDA_SUCCESS,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_DEINITIALIZED,
        CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_INVALID_HANDLE,
        CUDA_ERROR_NOT_FOUND,
        CUDA_ERROR_NOT_READY,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CU_STREAM_LEGACY,
        CU_STREAM_PER_THREAD,
        CU_STREAM_NON_BLOCKING,
        CU_EVENT_DEFAULT,
        CU_EVENT_DISABLE_TIMING,
        CU_MEMHOSTALLOC_PORTABLE,
        CU_MEM_LOCATION_TYPE_DEVICE,
        CU_MEM_LOCATION_TYPE_HOST,
        CU_MEM_LOCATION_TYPE_HOST_NUMA,
        CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT,
        CU_STREAM_CAPTURE_STATUS_NONE,
        CU_STREAM_CAPTURE_STATUS_ACTIVE,
        CU_STREAM_CAPTURE_STATUS_INVALIDATED,
        CU_STREAM_CAPTURE_MODE_GLOBAL,
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CU_STREAM_CAPTURE_MODE_RELAXED,
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        CU_LAUNCH_ATTRIBUTE_IGNORE,
        CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
        CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
        CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
        CU_GET_PROC_ADDRESS_LEGACY_STREAM,
        CUPTI_SUCCESS,
        CUPTI_ERROR_INVALID_PARAMETER,
        CUPTI_ERROR_NOT_INITIALIZED,
        CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
        CUPTI_API_ENTER,
        CUPTI_API_EXIT,
        CUPTI_CB_DOMAIN_DRIVER_API,
        CUPTI_CB_DOMAIN_RUNTIME_API,
        CUPTI_CB_DOMAIN_RESOURCE,
        CUPTI_CBID_RESOURCE_CONTEXT_CREATED,
        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
        CUPTI_CBID_RESOURCE_STREAM_CREATED,
        CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING,
        CUPTI_CBID_RESOURCE_MODULE_LOADED,
        CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING,
        CUPTI_ACTIVITY_KIND_KERNEL,
        CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        CUPTI_ERROR_MAX_LIMIT_REACHED,
    );
    // Kernel records are read through their common head: its offsets in the newest record.
    for (field, off) in [
        ("kind", offset_of!(CUpti_ActivityKernelHead, kind)),
        ("start", offset_of!(CUpti_ActivityKernelHead, start)),
        ("end", offset_of!(CUpti_ActivityKernelHead, end)),
        ("deviceId", offset_of!(CUpti_ActivityKernelHead, deviceId)),
        ("contextId", offset_of!(CUpti_ActivityKernelHead, contextId)),
        ("streamId", offset_of!(CUpti_ActivityKernelHead, streamId)),
        (
            "correlationId",
            offset_of!(CUpti_ActivityKernelHead, correlationId),
        ),
        ("gridId", offset_of!(CUpti_ActivityKernelHead, gridId)),
        ("name", offset_of!(CUpti_ActivityKernelHead, name)),
        ("queued", offset_of!(CUpti_ActivityKernelHead, queued)),
        ("submitted", offset_of!(CUpti_ActivityKernelHead, submitted)),
    ] {
        p.offset("CUpti_ActivityKernel10", field, off);
        p.offset("CUpti_ActivityKernel4", field, off);
    }
    for (name, id) in cbid::ALL {
        p.constant(&format!("CUPTI_DRIVER_TRACE_CBID_{name}"), u64::from(*id));
    }

    macro_rules! shapes {
        ($($c:literal => $t:ty,)*) => { $( p.shape($c, <$t as FnShape>::shape()); )* };
    }
    shapes! {
        "cuptiSubscribe" => cuptiSubscribe_fn,
        "cuptiUnsubscribe" => cuptiUnsubscribe_fn,
        "cuptiEnableCallback" => cuptiEnableCallback_fn,
        "cuptiGetCallbackName" => cuptiGetCallbackName_fn,
        "cuptiGetResultString" => cuptiGetResultString_fn,
        "cuptiActivityRegisterCallbacks" => cuptiActivityRegisterCallbacks_fn,
        "cuptiActivityEnable" => cuptiActivityEnable_fn,
        "cuptiActivityDisable" => cuptiActivityEnable_fn,
        "cuptiActivityFlushAll" => cuptiActivityFlushAll_fn,
        "cuptiActivityEnableLatencyTimestamps" => cuptiActivityEnableLatencyTimestamps_fn,
        "cuptiActivityGetNextRecord" => cuptiActivityGetNextRecord_fn,
        "cuptiGetTimestamp" => cuptiGetTimestamp_fn,
        "cuptiGetContextId" => cuptiGetContextId_fn,
        "cuGetProcAddress_v2" => cuGetProcAddress_fn,
        "cuGetErrorName" => cuGetErrorName_fn,
        "cuCtxGetCurrent" => cuCtxGetCurrent_fn,
        "cuCtxSetCurrent" => cuCtxSetCurrent_fn,
        "cuCtxGetDevice" => cuCtxGetDevice_fn,
        "cuMemGetInfo_v2" => cuMemGetInfo_fn,
        "cuMemAlloc_v2" => cuMemAlloc_fn,
        "cuMemFree_v2" => cuMemFree_fn,
        "cuMemHostAlloc" => cuMemHostAlloc_fn,
        "cuMemFreeHost" => cuMemFreeHost_fn,
        "cuMemcpyAsync" => cuMemcpyAsync_fn,
        "cuMemGetAddressRange_v2" => cuMemGetAddressRange_fn,
        "cuStreamCreate" => cuStreamCreate_fn,
        "cuStreamDestroy_v2" => cuStreamDestroy_fn,
        "cuStreamQuery" => cuStreamQuery_fn,
        "cuStreamIsCapturing" => cuStreamIsCapturing_fn,
        "cuStreamWaitEvent" => cuStreamWaitEvent_fn,
        "cuThreadExchangeStreamCaptureMode" => cuThreadExchangeStreamCaptureMode_fn,
        "cuEventCreate" => cuEventCreate_fn,
        "cuEventDestroy_v2" => cuEventDestroy_fn,
        "cuEventRecord" => cuEventRecord_fn,
        "cuEventQuery" => cuEventQuery_fn,
        "cuEventElapsedTime_v2" => cuEventElapsedTime_fn,
        "cuFuncGetAttribute" => cuFuncGetAttribute_fn,
        "cuFuncGetModule" => cuFuncGetModule_fn,
        "cuFuncGetParamInfo" => cuFuncGetParamInfo_fn,
        "cuKernelGetFunction" => cuKernelGetFunction_fn,
        "cuModuleGetGlobal_v2" => cuModuleGetGlobal_fn,
        "cuModuleLoadData" => cuModuleLoadData_fn,
        "cuModuleGetFunction" => cuModuleGetFunction_fn,
        "cuKernelGetAttribute" => cuKernelGetAttribute_fn,
        "cuLaunchKernel" => cuLaunchKernel_fn,
        "cuLaunchCooperativeKernel" => cuLaunchCooperativeKernel_fn,
        "cuLaunchKernelEx" => cuLaunchKernelEx_fn,
    }
    p
}

/// The figures recorded from CUDA 13.0's headers: `expression<TAB>value` lines.
const RECORDED: &str = include_str!("cuda_layout.recorded");

fn parse(figures: &str) -> Vec<(String, String)> {
    figures
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap_or((l, ""));
            (k.to_string(), v.trim().to_string())
        })
        .collect()
}

/// Every mismatch between the checks and `figures`, one line each.
fn mismatches(probe: &Probe, figures: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for c in &probe.checks {
        match figures.iter().find(|(k, _)| *k == c.c_expr) {
            None => out.push(format!("{}: no figure (rust says {})", c.c_expr, c.rust)),
            Some((_, v)) if *v != c.rust => out.push(format!(
                "{}: header says {v}, rust says {}",
                c.c_expr, c.rust
            )),
            Some(_) => {}
        }
    }
    for (k, _) in figures {
        if !probe.checks.iter().any(|c| c.c_expr == *k) {
            out.push(format!("{k}: a figure no check asks for"));
        }
    }
    out
}

#[test]
fn declarations_match_the_figures_recorded_from_cuda_13_headers() {
    let probe = checks();
    let figures = parse(RECORDED);
    assert!(
        figures.len() >= probe.checks.len(),
        "the recorded file is incomplete"
    );
    let bad = mismatches(&probe, &figures);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn a_wrong_figure_is_reported() {
    let probe = checks();
    let mut figures = parse(RECORDED);
    let i = figures
        .iter()
        .position(|(k, _)| k == "offsetof(cuLaunchKernel_params, hStream)")
        .expect("recorded");
    figures[i].1 = "36".into();
    figures.pop();
    let bad = mismatches(&probe, &figures);
    assert!(
        bad.iter()
            .any(|m| m.contains("cuLaunchKernel_params, hStream") && m.contains("36")),
        "{bad:?}"
    );
    assert!(bad.iter().any(|m| m.contains("no figure")), "{bad:?}");
}

/// The CUDA toolkit's root: `CUDA_HOME`, `CUDA_PATH` or `/usr/local/cuda`.
fn cuda_root() -> Option<PathBuf> {
    ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")))
        .find(|p| p.join("include/cuda.h").is_file())
}

/// The directory holding `cupti.h` under a toolkit root.
fn cupti_include(root: &Path) -> Option<PathBuf> {
    [root.join("extras/CUPTI/include"), root.join("include")]
        .into_iter()
        .find(|p| p.join("cupti.h").is_file())
}

#[test]
#[cfg_attr(
    not(have_cuda_headers),
    ignore = "needs the CUDA toolkit headers (cuda.h, cupti.h): install the CUDA toolkit or set CUDA_HOME"
)]
fn declarations_match_the_installed_cuda_headers() {
    let root = cuda_root().expect("no CUDA toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda)");
    let cupti = cupti_include(&root).expect("no cupti.h under the toolkit");
    let probe = checks();
    let dir =
        std::env::temp_dir().join(format!("rocprof-replay-cuda-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.cpp");
    std::fs::write(&src, probe.source()).unwrap();
    let exe = dir.join("probe");
    let nvcc = root.join("bin/nvcc");
    let mut cmd = if nvcc.is_file() {
        let mut c = Command::new(nvcc);
        c.arg("-std=c++17");
        c
    } else {
        let mut c = Command::new("c++");
        c.arg("-std=c++17");
        c
    };
    let out = cmd
        .arg("-I")
        .arg(root.join("include"))
        .arg("-I")
        .arg(&cupti)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the compiler");
    assert!(
        out.status.success(),
        "the probe does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the probe");
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    if let Some(path) = std::env::var_os("ROCPROF_REPLAY_CUDA_PROBE_OUT") {
        std::fs::write(path, &text).unwrap();
    }
    let bad = mismatches(&probe, &parse(&text));
    assert!(
        bad.is_empty(),
        "{} mismatches against {}:\n{}",
        bad.len(),
        root.display(),
        bad.join("\n")
    );
}
