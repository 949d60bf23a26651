//! The CUDA driver and CUPTI functions the backend calls, loaded at run time.
//!
//! `libcuda.so.1` is already loaded when the driver calls `InitializeInjection`; the driver's
//! functions are looked up through `cuGetProcAddress_v2` *as of CUDA 12.0* ([`API_VERSION`]),
//! the version whose signatures `rocprof-replay-sys` declares (so `cuMemAlloc` is
//! `cuMemAlloc_v2`), falling back to the exported names. Asking for the driver's own version
//! instead would hand out newer forms with other signatures: CUDA 13.0's `cuCtxGetDevice` is
//! `cuCtxGetDevice_v2(CUdevice*, CUcontext)`. CUPTI is the copy already loaded in the process if there is one (PyTorch
//! loads its own), else `ROCPROF_REPLAY_CUPTI`, else the usual names and toolkit paths.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::PathBuf;

use libloading::Library;
use rocprof_replay_sys::cuda::*;

/// The driver functions the backend calls. Tests build one from fakes.
#[derive(Clone, Copy)]
pub(crate) struct Driver {
    pub(crate) get_error_name: cuGetErrorName_fn,
    pub(crate) ctx_set_current: cuCtxSetCurrent_fn,
    pub(crate) ctx_get_device: cuCtxGetDevice_fn,
    pub(crate) mem_get_info: cuMemGetInfo_fn,
    pub(crate) mem_alloc: cuMemAlloc_fn,
    /// `cuMemAllocPitch_v2`, `cuMemAllocAsync`, `cuMemAllocFromPoolAsync` and `cuMemCreate`:
    /// with `mem_alloc`, what an application allocation that failed for lack of memory is made
    /// again with once the snapshot arena is released (`None`: that kind is not retried).
    pub(crate) mem_alloc_pitch: Option<cuMemAllocPitch_fn>,
    pub(crate) mem_alloc_async: Option<cuMemAllocAsync_fn>,
    pub(crate) mem_alloc_from_pool_async: Option<cuMemAllocFromPoolAsync_fn>,
    pub(crate) mem_create: Option<cuMemCreate_fn>,
    pub(crate) mem_free: cuMemFree_fn,
    pub(crate) mem_host_alloc: cuMemHostAlloc_fn,
    pub(crate) mem_free_host: cuMemFreeHost_fn,
    pub(crate) memcpy_async: cuMemcpyAsync_fn,
    pub(crate) stream_create: cuStreamCreate_fn,
    pub(crate) stream_query: cuStreamQuery_fn,
    pub(crate) stream_is_capturing: cuStreamIsCapturing_fn,
    pub(crate) stream_wait_event: cuStreamWaitEvent_fn,
    pub(crate) exchange_capture_mode: cuThreadExchangeStreamCaptureMode_fn,
    pub(crate) event_create: cuEventCreate_fn,
    pub(crate) event_record: cuEventRecord_fn,
    pub(crate) event_query: cuEventQuery_fn,
    pub(crate) event_elapsed: cuEventElapsedTime_fn,
    pub(crate) func_get_attribute: cuFuncGetAttribute_fn,
    pub(crate) func_get_module: cuFuncGetModule_fn,
    /// CUDA 12.4+.
    pub(crate) func_get_param_info: Option<cuFuncGetParamInfo_fn>,
    pub(crate) kernel_get_function: cuKernelGetFunction_fn,
    pub(crate) module_get_global: cuModuleGetGlobal_fn,
    pub(crate) launch_kernel: cuLaunchKernel_fn,
    pub(crate) launch_cooperative: cuLaunchCooperativeKernel_fn,
    pub(crate) launch_kernel_ex: cuLaunchKernelEx_fn,
    /// `cuStreamWaitValue32` (stream memory operations; `None`: windows stay synchronous).
    pub(crate) stream_wait_value32: Option<cuStreamWaitValue32_fn>,
    /// Whether a stream is non-blocking (a first pass's yield: work on the legacy stream may
    /// run before a kernel on a non-blocking stream ends).
    pub(crate) stream_get_flags: Option<cuStreamGetFlags_fn>,
    /// `cuStreamWriteValue32`.
    pub(crate) stream_write_value32: Option<cuStreamWriteValue32_fn>,
    /// `cuMemHostGetDevicePointer`.
    pub(crate) mem_host_get_device_pointer: Option<cuMemHostGetDevicePointer_fn>,
    /// `cuModuleLoadData` (loads the compare kernel; `None`: full restores).
    pub(crate) module_load_data: Option<cuModuleLoadData_fn>,
    /// `cuModuleGetFunction` (the compare kernel's entry point).
    pub(crate) module_get_function: Option<cuModuleGetFunction_fn>,
    /// `cuDeviceGetAttribute` (launch metrics that need the device's limits; `None`: those
    /// metrics are absent, with the reason).
    pub(crate) device_get_attribute: Option<cuDeviceGetAttribute_fn>,
    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor` (`launch__waves_per_multiprocessor`).
    pub(crate) occupancy_max_active_blocks: Option<cuOccupancyMaxActiveBlocksPerMultiprocessor_fn>,
    /// `cuMemGetAddressRange_v2` (the extent of an IPC import; `None`: only its first byte is
    /// known, and kernels given an interior pointer into it are not recognised).
    pub(crate) mem_get_address_range: Option<cuMemGetAddressRange_fn>,
    /// `cuPointerGetAttribute` (whether an unknown argument is device memory, on a device
    /// that addresses pageable system memory; `None`: every such mapped address counts as
    /// system memory).
    pub(crate) pointer_get_attribute: Option<cuPointerGetAttribute_fn>,
}

/// `cuPointerGetAttribute(data, attribute, ptr)`.
#[allow(non_camel_case_types)]
pub(crate) type cuPointerGetAttribute_fn =
    unsafe extern "C" fn(*mut c_void, c_int, CUdeviceptr) -> CUresult;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`: whether the address is managed memory (a boolean; read
/// into a zeroed 4-byte word).
pub(crate) const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: a `CUmemorytype` (`unsigned int`).
pub(crate) const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
/// `CU_MEMORYTYPE_DEVICE`.
pub(crate) const CU_MEMORYTYPE_DEVICE: u32 = 2;

/// `cuDeviceGetAttribute(pi, attrib, dev)`.
#[allow(non_camel_case_types)]
pub(crate) type cuDeviceGetAttribute_fn =
    unsafe extern "C" fn(*mut c_int, CUdevice_attribute, CUdevice) -> CUresult;
/// `cuOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize, dynamicSMemSize)`.
#[allow(non_camel_case_types)]
pub(crate) type cuOccupancyMaxActiveBlocksPerMultiprocessor_fn =
    unsafe extern "C" fn(*mut c_int, CUfunction, c_int, usize) -> CUresult;
/// `CUdevice_attribute`.
#[allow(non_camel_case_types)]
pub(crate) type CUdevice_attribute = std::ffi::c_uint;
/// `CU_DEVICE_ATTRIBUTE_WARP_SIZE`.
pub(crate) const CU_DEVICE_ATTRIBUTE_WARP_SIZE: CUdevice_attribute = 10;
/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub(crate) const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: CUdevice_attribute = 16;
/// `CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE`: bytes.
pub(crate) const CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: CUdevice_attribute = 38;
/// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR`.
pub(crate) const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: CUdevice_attribute = 39;
/// `CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR`.
pub(crate) const CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: CUdevice_attribute = 82;
/// `CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR`.
pub(crate) const CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: CUdevice_attribute = 106;
/// `CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK` (CUDA 11.0+).
pub(crate) const CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: CUdevice_attribute = 111;
/// `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`: kernels can address pageable system memory
/// (HMM or ATS: `malloc`'d memory, the stack, mapped files) with no registration.
pub(crate) const CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: CUdevice_attribute = 88;
/// `CU_FUNC_ATTRIBUTE_NUM_REGS`: registers per thread of a kernel.
pub(crate) const CU_FUNC_ATTRIBUTE_NUM_REGS: CUfunction_attribute = 4;

/// `cuStreamWaitValue32(stream, addr, value, flags)` (the `_v2` form, CUDA 11.7+).
#[allow(non_camel_case_types)]
pub(crate) type cuStreamWaitValue32_fn =
    unsafe extern "C" fn(CUstream, CUdeviceptr, u32, std::ffi::c_uint) -> CUresult;
/// `cuStreamWriteValue32(stream, addr, value, flags)` (the `_v2` form).
#[allow(non_camel_case_types)]
pub(crate) type cuStreamWriteValue32_fn =
    unsafe extern "C" fn(CUstream, CUdeviceptr, u32, std::ffi::c_uint) -> CUresult;
/// `cuMemHostGetDevicePointer(pdptr, p, flags)`.
#[allow(non_camel_case_types)]
pub(crate) type cuMemHostGetDevicePointer_fn =
    unsafe extern "C" fn(*mut CUdeviceptr, *mut c_void, std::ffi::c_uint) -> CUresult;
/// `CU_STREAM_WAIT_VALUE_GEQ`: waits until `(int32_t)(*addr - value) >= 0` (cyclic).
pub(crate) const CU_STREAM_WAIT_VALUE_GEQ: std::ffi::c_uint = 0x0;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub(crate) const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
/// `CU_MEMHOSTALLOC_DEVICEMAP`.
pub(crate) const CU_MEMHOSTALLOC_DEVICEMAP: std::ffi::c_uint = 0x2;

/// The CUPTI functions the backend calls.
#[derive(Clone, Copy)]
pub(crate) struct Cupti {
    pub(crate) subscribe: cuptiSubscribe_fn,
    pub(crate) unsubscribe: cuptiUnsubscribe_fn,
    pub(crate) enable_callback: cuptiEnableCallback_fn,
    pub(crate) get_callback_name: cuptiGetCallbackName_fn,
    pub(crate) get_result_string: cuptiGetResultString_fn,
    /// The activity API (kernel records: kernel-only pass times); `None` where this CUPTI
    /// lacks a function of it.
    pub(crate) activity: Option<super::kernel_clock::ActivityApi>,
}

/// Why the driver or CUPTI could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    #[error("cannot load {what}: {detail}")]
    Library { what: String, detail: String },
    #[error("{library} has no {symbol}")]
    Symbol {
        library: &'static str,
        symbol: &'static str,
    },
}

/// A driver status with its name (`CUDA_ERROR_OUT_OF_MEMORY (2)`).
impl Driver {
    /// Runs `f` with this thread's stream-capture mode relaxed, and puts the mode back after
    /// (also when `f` panics). The backend's own allocations, frees and module loads on an
    /// application thread are calls a stream capture in global or thread-local mode forbids:
    /// made in those modes they would invalidate the application's capture. Relaxed, they are
    /// allowed and join no graph.
    pub(crate) fn relaxed<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a>(&'a Driver, CUstreamCaptureMode);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                // SAFETY: a plain in/out parameter: the thread's mode from before.
                unsafe { (self.0.exchange_capture_mode)(&mut self.1) };
            }
        }
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a plain in/out parameter; `Restore` puts the thread's mode back.
        unsafe { (self.exchange_capture_mode)(&mut mode) };
        let _restore = Restore(self, mode);
        f()
    }
}

pub(crate) fn error_name(drv: &Driver, status: CUresult) -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string or leaves it null.
    let r = unsafe { (drv.get_error_name)(status, &mut p) };
    if r == CUDA_SUCCESS && !p.is_null() {
        // SAFETY: a NUL-terminated static string of the driver.
        let name = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        format!("{name} ({status})")
    } else {
        format!("CUresult {status}")
    }
}

/// A CUPTI status with its text.
pub(crate) fn cupti_error(cupti: &Cupti, status: CUptiResult) -> String {
    result_string(cupti.get_result_string, status)
}

/// A CUPTI status with its text, through `cuptiGetResultString` (`get`).
pub(crate) fn result_string(get: cuptiGetResultString_fn, status: CUptiResult) -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: writes a pointer to a static string or leaves it null.
    let r = unsafe { get(status, &mut p) };
    if r == CUPTI_SUCCESS && !p.is_null() {
        // SAFETY: a NUL-terminated static string of CUPTI.
        let text = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        format!("{text} ({status})")
    } else {
        format!("CUptiResult {status}")
    }
}

pub(crate) fn open(what: &str, candidates: &[PathBuf]) -> Result<Library, LoadError> {
    let mut errors = Vec::new();
    for c in candidates {
        // SAFETY: loading a vendor library whose initialisers are those of the CUDA stack the
        // application itself uses.
        match unsafe { Library::new(c) } {
            Ok(lib) => return Ok(lib),
            Err(e) => errors.push(format!("{}: {e}", c.display())),
        }
    }
    Err(LoadError::Library {
        what: what.into(),
        detail: errors.join("; "),
    })
}

/// The CUDA API version of the signatures the backend calls the driver with.
pub(crate) const API_VERSION: c_int = 12000;

/// Resolves driver functions, preferring `cuGetProcAddress_v2`.
struct Resolver<'a> {
    lib: &'a Library,
    get_proc: Option<cuGetProcAddress_fn>,
    version: c_int,
}

impl Resolver<'_> {
    /// The function `name` as of [`API_VERSION`], or the exported `fallback` name.
    ///
    /// # Safety
    /// `F` must be the function's signature.
    unsafe fn get<F: Copy>(
        &self,
        name: &'static str,
        fallback: &'static str,
    ) -> Result<F, LoadError> {
        assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        if let (Some(get_proc), Ok(cname)) = (self.get_proc, CString::new(name)) {
            let mut p: *mut c_void = std::ptr::null_mut();
            let mut status: c_int = 0;
            // SAFETY: plain out-parameters; the driver only writes them.
            let r = unsafe {
                get_proc(
                    cname.as_ptr(),
                    &mut p,
                    self.version,
                    CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                    &mut status,
                )
            };
            if r == CUDA_SUCCESS && !p.is_null() {
                // SAFETY: a non-null function pointer of signature `F` (caller contract).
                return Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) });
            }
        }
        let cname = CString::new(fallback).expect("no NUL in a symbol name");
        // SAFETY: the symbol has signature `F` (caller contract).
        match unsafe { self.lib.get::<F>(cname.as_bytes_with_nul()) } {
            Ok(sym) => Ok(*sym),
            Err(_) => Err(LoadError::Symbol {
                library: "libcuda.so.1",
                symbol: fallback,
            }),
        }
    }
}

/// Loads the driver's functions (the library stays loaded for the process's lifetime).
pub(crate) fn load_driver() -> Result<Driver, LoadError> {
    let lib = open("the CUDA driver", &[PathBuf::from("libcuda.so.1")])?;
    // SAFETY: the signatures are those of cuda.h (checked by rocprof-replay-sys's layout test).
    let get_proc = unsafe { lib.get::<cuGetProcAddress_fn>(b"cuGetProcAddress_v2\0") }
        .ok()
        .map(|s| *s);
    let mut driver: c_int = 0;
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> CUresult;
    // SAFETY: `cuDriverGetVersion(int*)`, as in cuda.h.
    if let Ok(get_version) = unsafe { lib.get::<GetVersion>(b"cuDriverGetVersion\0") } {
        // SAFETY: a plain out-parameter.
        unsafe { get_version(&mut driver) };
    }
    if driver != 0 && driver < API_VERSION {
        return Err(LoadError::Library {
            what: "the CUDA driver".into(),
            detail: format!("driver version {driver} is older than CUDA 12.0"),
        });
    }
    let version = API_VERSION;
    let r = Resolver {
        lib: &lib,
        get_proc,
        version,
    };
    // SAFETY: each type is the signature of that function in cuda.h.
    let drv = unsafe {
        Driver {
            get_error_name: r.get("cuGetErrorName", "cuGetErrorName")?,
            ctx_set_current: r.get("cuCtxSetCurrent", "cuCtxSetCurrent")?,
            ctx_get_device: r.get("cuCtxGetDevice", "cuCtxGetDevice")?,
            mem_get_info: r.get("cuMemGetInfo", "cuMemGetInfo_v2")?,
            mem_alloc: r.get("cuMemAlloc", "cuMemAlloc_v2")?,
            mem_alloc_pitch: r.get("cuMemAllocPitch", "cuMemAllocPitch_v2").ok(),
            mem_alloc_async: r.get("cuMemAllocAsync", "cuMemAllocAsync").ok(),
            mem_alloc_from_pool_async: r
                .get("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync")
                .ok(),
            mem_create: r.get("cuMemCreate", "cuMemCreate").ok(),
            mem_free: r.get("cuMemFree", "cuMemFree_v2")?,
            mem_host_alloc: r.get("cuMemHostAlloc", "cuMemHostAlloc")?,
            mem_free_host: r.get("cuMemFreeHost", "cuMemFreeHost")?,
            memcpy_async: r.get("cuMemcpyAsync", "cuMemcpyAsync")?,
            stream_create: r.get("cuStreamCreate", "cuStreamCreate")?,
            stream_query: r.get("cuStreamQuery", "cuStreamQuery")?,
            stream_is_capturing: r.get("cuStreamIsCapturing", "cuStreamIsCapturing")?,
            stream_wait_event: r.get("cuStreamWaitEvent", "cuStreamWaitEvent")?,
            exchange_capture_mode: r.get(
                "cuThreadExchangeStreamCaptureMode",
                "cuThreadExchangeStreamCaptureMode",
            )?,
            event_create: r.get("cuEventCreate", "cuEventCreate")?,
            event_record: r.get("cuEventRecord", "cuEventRecord")?,
            event_query: r.get("cuEventQuery", "cuEventQuery")?,
            event_elapsed: r.get("cuEventElapsedTime", "cuEventElapsedTime")?,
            func_get_attribute: r.get("cuFuncGetAttribute", "cuFuncGetAttribute")?,
            func_get_module: r.get("cuFuncGetModule", "cuFuncGetModule")?,
            func_get_param_info: r.get("cuFuncGetParamInfo", "cuFuncGetParamInfo").ok(),
            kernel_get_function: r.get("cuKernelGetFunction", "cuKernelGetFunction")?,
            module_get_global: r.get("cuModuleGetGlobal", "cuModuleGetGlobal_v2")?,
            launch_kernel: r.get("cuLaunchKernel", "cuLaunchKernel")?,
            launch_cooperative: r.get("cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel")?,
            launch_kernel_ex: r.get("cuLaunchKernelEx", "cuLaunchKernelEx")?,
            stream_wait_value32: r.get("cuStreamWaitValue32", "cuStreamWaitValue32_v2").ok(),
            stream_get_flags: r.get("cuStreamGetFlags", "cuStreamGetFlags").ok(),
            stream_write_value32: r
                .get("cuStreamWriteValue32", "cuStreamWriteValue32_v2")
                .ok(),
            mem_host_get_device_pointer: r
                .get("cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2")
                .ok(),
            module_load_data: r.get("cuModuleLoadData", "cuModuleLoadData").ok(),
            module_get_function: r.get("cuModuleGetFunction", "cuModuleGetFunction").ok(),
            device_get_attribute: r.get("cuDeviceGetAttribute", "cuDeviceGetAttribute").ok(),
            occupancy_max_active_blocks: r
                .get(
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                )
                .ok(),
            mem_get_address_range: r
                .get("cuMemGetAddressRange", "cuMemGetAddressRange_v2")
                .ok(),
            pointer_get_attribute: r.get("cuPointerGetAttribute", "cuPointerGetAttribute").ok(),
        }
    };
    // The driver is never unloaded while the process uses CUDA; neither are we.
    std::mem::forget(lib);
    Ok(drv)
}

/// A `libcupti` already loaded in this process (so that one CUPTI serves everyone).
fn loaded_cupti() -> Option<PathBuf> {
    let mut found: Option<PathBuf> = None;
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info and our `data`.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Option<PathBuf>>()) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: NUL-terminated object name.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
        let file = name.rsplit('/').next().unwrap_or("");
        if file.starts_with("libcupti.so") {
            *found = Some(PathBuf::from(name.as_ref()));
            return 1;
        }
        0
    }
    // SAFETY: the callback only writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut found as *mut Option<PathBuf>).cast()) };
    found
}

/// Where CUPTI is looked for, in order.
pub(crate) fn cupti_candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    c.extend(loaded_cupti());
    if let Some(p) = std::env::var_os("ROCPROF_REPLAY_CUPTI") {
        c.push(PathBuf::from(p));
    }
    for name in ["libcupti.so", "libcupti.so.13", "libcupti.so.12"] {
        c.push(PathBuf::from(name));
    }
    let roots = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")));
    for root in roots {
        c.push(root.join("extras/CUPTI/lib64/libcupti.so"));
        c.push(root.join("lib64/libcupti.so"));
    }
    c
}

/// CUPTI's activity functions, if this CUPTI has them all.
fn activity_api(lib: &libloading::Library) -> Option<super::kernel_clock::ActivityApi> {
    // SAFETY: the signatures of cupti_activity.h (shapes checked by rocprof-replay-sys's
    // cuda_layout test).
    unsafe {
        Some(super::kernel_clock::ActivityApi {
            register_callbacks: *lib.get(b"cuptiActivityRegisterCallbacks\0").ok()?,
            enable: *lib.get(b"cuptiActivityEnable\0").ok()?,
            disable: lib.get(b"cuptiActivityDisable\0").ok().map(|f| *f),
            flush_all: *lib.get(b"cuptiActivityFlushAll\0").ok()?,
            get_next_record: *lib.get(b"cuptiActivityGetNextRecord\0").ok()?,
            timestamp: *lib.get(b"cuptiGetTimestamp\0").ok()?,
            context_id: *lib.get(b"cuptiGetContextId\0").ok()?,
            latency: lib
                .get(b"cuptiActivityEnableLatencyTimestamps\0")
                .ok()
                .map(|f| *f),
        })
    }
}

/// Loads CUPTI's callback API.
pub(crate) fn load_cupti() -> Result<Cupti, LoadError> {
    let lib = open("CUPTI (libcupti.so)", &cupti_candidates())?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the signature is that of cupti_callbacks.h / cupti_result.h.
            match unsafe { lib.get(concat!($name, "\0").as_bytes()) } {
                Ok(s) => *s,
                Err(_) => {
                    return Err(LoadError::Symbol {
                        library: "libcupti.so",
                        symbol: $name,
                    });
                }
            }
        };
    }
    let cupti = Cupti {
        subscribe: sym!("cuptiSubscribe"),
        unsubscribe: sym!("cuptiUnsubscribe"),
        enable_callback: sym!("cuptiEnableCallback"),
        get_callback_name: sym!("cuptiGetCallbackName"),
        get_result_string: sym!("cuptiGetResultString"),
        activity: activity_api(&lib),
    };
    std::mem::forget(lib);
    Ok(cupti)
}
