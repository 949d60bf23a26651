//! The part of CUPTI's Profiling API that the CUDA backend's counter source uses (feature
//! `cuda`): the profiler host API (`cupti_profiler_host.h`), the range profiler
//! (`cupti_range_profiler.h`), `cuptiProfilerInitialize` and the two enums of
//! `cupti_profiler_target.h`, and `cuptiDeviceGetChipName` (`cupti_target.h`).
//!
//! Hand-written from the CUDA 13 headers; every struct carries compile-time size and offset
//! assertions, and `tests/cupti_profiler_layout.rs` compares them with figures printed by a
//! probe compiled against those headers (CUPTI 13.5, `nvidia-cuda-cupti` 13.5.25).
//!
//! Every parameter block starts with `structSize`: CUPTI reads only the fields that size
//! covers, so a caller that passes the size of the *first* version of a struct works with
//! every CUPTI since then. The `*_SIZE_12_6` constants are those sizes (CUDA 12.6, the first
//! release of these two headers), and the backend passes them, never `size_of`, except where
//! it needs a later field.
//!
//! Nothing here links against CUPTI: the backend looks each function up at run time and treats
//! a missing one as "counters unavailable".

use core::ffi::{c_char, c_void};
use core::mem::offset_of;

use crate::cuda::{CUcontext, CUptiResult};
use crate::layout::{const_assert_layout, const_assert_offsets};

/// The profiler host object of one chip and metric configuration (opaque).
#[repr(C)]
pub struct CUpti_Profiler_Host_Object {
    _private: [u8; 0],
}

/// The range profiler object of one context (opaque).
#[repr(C)]
pub struct CUpti_RangeProfiler_Object {
    _private: [u8; 0],
}

/// `CUpti_MetricType`.
pub type CUpti_MetricType = u32;
/// A raw counter (rollups `.sum`, `.avg`, `.min`, `.max`).
pub const CUPTI_METRIC_TYPE_COUNTER: CUpti_MetricType = 0;
/// A ratio of two counters.
pub const CUPTI_METRIC_TYPE_RATIO: CUpti_MetricType = 1;
/// A throughput (percent of a peak).
pub const CUPTI_METRIC_TYPE_THROUGHPUT: CUpti_MetricType = 2;

/// `CUpti_ProfilerType`.
pub type CUpti_ProfilerType = u32;
/// The range profiler.
pub const CUPTI_PROFILER_TYPE_RANGE_PROFILER: CUpti_ProfilerType = 0;

/// `CUpti_ProfilerRange`.
pub type CUpti_ProfilerRange = u32;
/// CUPTI opens one range around each kernel launched between start and stop.
pub const CUPTI_AutoRange: CUpti_ProfilerRange = 1;
/// Ranges are pushed and popped by the caller.
pub const CUPTI_UserRange: CUpti_ProfilerRange = 2;

/// `CUpti_ProfilerReplayMode`.
pub type CUpti_ProfilerReplayMode = u32;
/// The caller replays (runs the same work once per pass, inputs restored) within the process.
pub const CUPTI_UserReplay: CUpti_ProfilerReplayMode = 3;

/// `CUpti_CacheControl_Mode` (CUDA 13.4+): no cache reset before a pass (the default).
pub const CUPTI_CACHE_CONTROL_MODE_NONE: u32 = 0;
/// Reset every cache CUPTI can before each pass (today the L2).
pub const CUPTI_CACHE_CONTROL_MODE_ALL: u32 = 1;

/// `CUPTI_ERROR_INVALID_OPERATION`.
pub const CUPTI_ERROR_INVALID_OPERATION: CUptiResult = 7;
/// `CUPTI_ERROR_NOT_COMPATIBLE`: the object is in a state the call does not fit (e.g. the
/// context's profiler is already in use).
pub const CUPTI_ERROR_NOT_COMPATIBLE: CUptiResult = 14;
/// `CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`: performance counters are restricted to admin users.
pub const CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: CUptiResult = 35;
/// `CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED`: the legacy event/metric API is in use.
pub const CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED: CUptiResult = 36;

/// Declares a parameter block: `#[repr(C)]`, zero-initialisable, with its size assertion.
macro_rules! params {
    ($(#[$m:meta])* $name:ident, size = $size:expr, { $($(#[$fm:meta])* $field:ident : $ty:ty = $off:expr),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            $(#[doc = concat!("`", stringify!($field), "`.")] $(#[$fm])* pub $field: $ty,)*
        }
        impl Default for $name {
            fn default() -> Self {
                // SAFETY: every field is an integer, a raw pointer or an integer enum: all-zero
                // is a valid value of each (null pointers, 0).
                unsafe { core::mem::zeroed() }
            }
        }
        const_assert_layout!($name, size = $size, align = 8);
        const_assert_offsets!($name { $($field: $off),* });
    };
}

// ---- The Profiler API of `cupti_profiler_target.h` (deprecated as of CUDA 13.0, still shipped
// in 13.5): sessions, passes and user ranges on a context. Unlike the range profiler of CUDA
// 13.0, it keeps every user range of a pass (see `docs/performance.md`, "CUPTI's cost per
// counter pass, by API shape"), so several dispatches can share one counter pass.

params! {
    /// `CUpti_Profiler_CounterDataImageOptions`.
    CUpti_Profiler_CounterDataImageOptions, size = 48, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        /// NVPW's counter data prefix (8-aligned).
        pCounterDataPrefix: *const u8 = 16,
        counterDataPrefixSize: usize = 24,
        maxNumRanges: u32 = 32,
        /// At least `maxNumRanges`.
        maxNumRangeTreeNodes: u32 = 36,
        /// Including the terminating NUL.
        maxRangeNameLength: u32 = 40,
    }
}

params! {
    /// `CUpti_Profiler_CounterDataImage_CalculateSize_Params`.
    CUpti_Profiler_CounterDataImage_CalculateSize_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        /// `CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE`.
        sizeofCounterDataImageOptions: usize = 16,
        pOptions: *const CUpti_Profiler_CounterDataImageOptions = 24,
        /// Out.
        counterDataImageSize: usize = 32,
    }
}

params! {
    /// `CUpti_Profiler_CounterDataImage_Initialize_Params`.
    CUpti_Profiler_CounterDataImage_Initialize_Params, size = 48, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        sizeofCounterDataImageOptions: usize = 16,
        pOptions: *const CUpti_Profiler_CounterDataImageOptions = 24,
        counterDataImageSize: usize = 32,
        pCounterDataImage: *mut u8 = 40,
    }
}

params! {
    /// `CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params`.
    CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        counterDataImageSize: usize = 16,
        pCounterDataImage: *mut u8 = 24,
        /// Out.
        counterDataScratchBufferSize: usize = 32,
    }
}

params! {
    /// `CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params`.
    CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params, size = 48, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        counterDataImageSize: usize = 16,
        pCounterDataImage: *mut u8 = 24,
        counterDataScratchBufferSize: usize = 32,
        pCounterDataScratchBuffer: *mut u8 = 40,
    }
}

params! {
    /// `CUpti_Profiler_BeginSession_Params`.
    CUpti_Profiler_BeginSession_Params, size = 96, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        /// Null: the current context.
        ctx: CUcontext = 16,
        counterDataImageSize: usize = 24,
        pCounterDataImage: *mut u8 = 32,
        counterDataScratchBufferSize: usize = 40,
        pCounterDataScratchBuffer: *mut u8 = 48,
        bDumpCounterDataInFile: u8 = 56,
        pCounterDataFilePath: *const c_char = 64,
        range: CUpti_ProfilerRange = 72,
        replayMode: CUpti_ProfilerReplayMode = 76,
        maxRangesPerPass: usize = 80,
        /// At least `maxRangesPerPass`.
        maxLaunchesPerPass: usize = 88,
    }
}

params! {
    /// The parameters of the calls that take only a context: `CUpti_Profiler_EndSession_Params`,
    /// `_UnsetConfig_`, `_BeginPass_`, `_EnableProfiling_`, `_DisableProfiling_`,
    /// `_PopRange_` (each its own type in the header, all the same fields).
    CUpti_Profiler_Context_Params, size = 24, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        /// Null: the current context.
        ctx: CUcontext = 16,
    }
}

params! {
    /// `CUpti_Profiler_SetConfig_Params`.
    CUpti_Profiler_SetConfig_Params, size = 64, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        ctx: CUcontext = 16,
        /// The configuration image (8-aligned).
        pConfig: *const u8 = 24,
        configSize: usize = 32,
        minNestingLevel: u16 = 40,
        numNestingLevels: u16 = 42,
        /// 0 for replay within the process.
        passIndex: usize = 48,
        /// `minNestingLevel` for replay within the process.
        targetNestingLevel: u16 = 56,
    }
}

params! {
    /// `CUpti_Profiler_EndPass_Params`.
    CUpti_Profiler_EndPass_Params, size = 48, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        ctx: CUcontext = 16,
        /// Out: the nesting level of the next pass.
        targetNestingLevel: u16 = 24,
        /// Out: the next pass's index.
        passIndex: usize = 32,
        /// Out: 1 once the last pass was queued.
        allPassesSubmitted: u8 = 40,
    }
}

params! {
    /// `CUpti_Profiler_FlushCounterData_Params`.
    CUpti_Profiler_FlushCounterData_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        ctx: CUcontext = 16,
        /// Out: ranges whose data was dropped.
        numRangesDropped: usize = 24,
        /// Out.
        numTraceBytesDropped: usize = 32,
    }
}

params! {
    /// `CUpti_Profiler_PushRange_Params`.
    CUpti_Profiler_PushRange_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        ctx: CUcontext = 16,
        pRangeName: *const c_char = 24,
        /// 0: CUPTI calls `strlen`.
        rangeNameLength: usize = 32,
    }
}

params! {
    /// `CUpti_Profiler_Initialize_Params`.
    CUpti_Profiler_Initialize_Params, size = 16, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
    }
}

params! {
    /// `CUpti_Device_GetChipName_Params`.
    CUpti_Device_GetChipName_Params, size = 32, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        /// The device ordinal.
        deviceIndex: usize = 16,
        /// Out: CUPTI's static chip name (e.g. `GH100`).
        pChipName: *const c_char = 24,
    }
}

params! {
    /// `CUpti_Profiler_Host_Initialize_Params` (CUDA 13 adds `pSinglePassMetricSetName`).
    CUpti_Profiler_Host_Initialize_Params, size = 56, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        profilerType: CUpti_ProfilerType = 16,
        pChipName: *const c_char = 24,
        pCounterAvailabilityImage: *const u8 = 32,
        /// Out: the host object.
        pHostObject: *mut CUpti_Profiler_Host_Object = 40,
        pSinglePassMetricSetName: *const c_char = 48,
    }
}

params! {
    /// `CUpti_Profiler_Host_Deinitialize_Params`.
    CUpti_Profiler_Host_Deinitialize_Params, size = 24, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pHostObject: *mut CUpti_Profiler_Host_Object = 16,
    }
}

params! {
    /// `CUpti_Profiler_Host_GetBaseMetrics_Params`.
    CUpti_Profiler_Host_GetBaseMetrics_Params, size = 48, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pHostObject: *mut CUpti_Profiler_Host_Object = 16,
        metricType: CUpti_MetricType = 24,
        /// Out: CUPTI's array of names.
        ppMetricNames: *mut *const c_char = 32,
        /// Out.
        numMetrics: usize = 40,
    }
}

params! {
    /// `CUpti_Profiler_Host_ConfigAddMetrics_Params`.
    CUpti_Profiler_Host_ConfigAddMetrics_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pHostObject: *mut CUpti_Profiler_Host_Object = 16,
        ppMetricNames: *mut *const c_char = 24,
        numMetrics: usize = 32,
    }
}

params! {
    /// `CUpti_Profiler_Host_GetConfigImageSize_Params`.
    CUpti_Profiler_Host_GetConfigImageSize_Params, size = 32, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pHostObject: *mut CUpti_Profiler_Host_Object = 16,
        /// Out.
        configImageSize: usize = 24,
    }
}

params! {
    /// `CUpti_Profiler_Host_GetConfigImage_Params`.
    CUpti_Profiler_Host_GetConfigImage_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pHostObject: *mut CUpti_Profiler_Host_Object = 16,
        configImageSize: usize = 24,
        pConfigImage: *mut u8 = 32,
    }
}

params! {
    /// `CUpti_Profiler_Host_GetNumOfPasses_Params`.
    CUpti_Profiler_Host_GetNumOfPasses_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        configImageSize: usize = 16,
        pConfigImage: *mut u8 = 24,
        /// Out: passes the configuration needs.
        numOfPasses: usize = 32,
    }
}

params! {
    /// `CUpti_Profiler_Host_EvaluateToGpuValues_Params`.
    CUpti_Profiler_Host_EvaluateToGpuValues_Params, size = 72, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pHostObject: *mut CUpti_Profiler_Host_Object = 16,
        pCounterDataImage: *const u8 = 24,
        counterDataImageSize: usize = 32,
        rangeIndex: usize = 40,
        ppMetricNames: *mut *const c_char = 48,
        numMetrics: usize = 56,
        /// Out: one value per metric (caller's array).
        pMetricValues: *mut f64 = 64,
    }
}

params! {
    /// `CUpti_RangeProfiler_Enable_Params` (CUDA 13.4 adds `cacheControlMode`).
    CUpti_RangeProfiler_Enable_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        ctx: CUcontext = 16,
        /// Out: the context's range profiler.
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 24,
        cacheControlMode: u32 = 32,
    }
}

params! {
    /// `CUpti_RangeProfiler_Disable_Params`; also the layout of `Start` and `PopRange`.
    CUpti_RangeProfiler_Disable_Params, size = 24, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 16,
    }
}

/// `CUpti_RangeProfiler_Start_Params` (the same fields as `Disable`).
pub type CUpti_RangeProfiler_Start_Params = CUpti_RangeProfiler_Disable_Params;
/// `CUpti_RangeProfiler_PopRange_Params` (the same fields as `Disable`).
pub type CUpti_RangeProfiler_PopRange_Params = CUpti_RangeProfiler_Disable_Params;

params! {
    /// `CUpti_RangeProfiler_PushRange_Params`.
    CUpti_RangeProfiler_PushRange_Params, size = 32, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 16,
        /// The range's name (user range mode).
        pRangeName: *const c_char = 24,
    }
}

params! {
    /// `CUpti_RangeProfiler_SetConfig_Params`.
    CUpti_RangeProfiler_SetConfig_Params, size = 96, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 16,
        configSize: usize = 24,
        pConfig: *const u8 = 32,
        counterDataImageSize: usize = 40,
        pCounterDataImage: *mut u8 = 48,
        range: CUpti_ProfilerRange = 56,
        replayMode: CUpti_ProfilerReplayMode = 60,
        maxRangesPerPass: usize = 64,
        numNestingLevels: u16 = 72,
        minNestingLevel: u16 = 74,
        passIndex: usize = 80,
        targetNestingLevel: u16 = 88,
    }
}

params! {
    /// `CUpti_RangeProfiler_Stop_Params`.
    CUpti_RangeProfiler_Stop_Params, size = 48, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 16,
        /// Out: the pass just submitted.
        passIndex: usize = 24,
        /// Out.
        targetNestingLevel: usize = 32,
        /// Out: 1 once every pass of the configuration was submitted.
        isAllPassSubmitted: u8 = 40,
    }
}

params! {
    /// `CUpti_RangeProfiler_DecodeData_Params`.
    CUpti_RangeProfiler_DecodeData_Params, size = 32, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 16,
        /// Out: ranges that did not fit the counter data image.
        numOfRangeDropped: usize = 24,
    }
}

params! {
    /// `CUpti_RangeProfiler_GetCounterDataSize_Params`.
    CUpti_RangeProfiler_GetCounterDataSize_Params, size = 64, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 16,
        pMetricNames: *mut *const c_char = 24,
        numMetrics: usize = 32,
        maxNumOfRanges: usize = 40,
        maxNumRangeTreeNodes: u32 = 48,
        /// Out.
        counterDataSize: usize = 56,
    }
}

params! {
    /// `CUpti_RangeProfiler_CounterDataImage_Initialize_Params`.
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pRangeProfilerObject: *mut CUpti_RangeProfiler_Object = 16,
        counterDataSize: usize = 24,
        pCounterData: *mut u8 = 32,
    }
}

params! {
    /// `CUpti_RangeProfiler_GetCounterDataInfo_Params`.
    CUpti_RangeProfiler_GetCounterDataInfo_Params, size = 40, {
        structSize: usize = 0,
        pPriv: *mut c_void = 8,
        pCounterDataImage: *const u8 = 16,
        counterDataImageSize: usize = 24,
        /// Out: ranges the image holds.
        numTotalRanges: usize = 32,
    }
}

/// `CUPTI_PROFILER_STRUCT_SIZE(type, last)`: the bytes up to and including `last`.
macro_rules! struct_size {
    ($t:ty, $last:ident, $last_ty:ty) => {
        offset_of!($t, $last) + size_of::<$last_ty>()
    };
}

/// `CUpti_Profiler_Initialize_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Initialize_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_Profiler_Initialize_Params, pPriv, *mut c_void);
/// `CUpti_Device_GetChipName_Params_STRUCT_SIZE`.
pub const CUpti_Device_GetChipName_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_Device_GetChipName_Params, pChipName, *const c_char);
/// CUDA 12.6's `CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE` (up to `pHostObject`).
pub const CUpti_Profiler_Host_Initialize_Params_SIZE_12_6: usize = struct_size!(
    CUpti_Profiler_Host_Initialize_Params,
    pHostObject,
    *mut CUpti_Profiler_Host_Object
);
/// `CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_Host_Deinitialize_Params,
    pHostObject,
    *mut CUpti_Profiler_Host_Object
);
/// `CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_Profiler_Host_GetBaseMetrics_Params, numMetrics, usize);
/// `CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_Host_ConfigAddMetrics_Params,
    numMetrics,
    usize
);
/// `CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_Host_GetConfigImageSize_Params,
    configImageSize,
    usize
);
/// `CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_Host_GetConfigImage_Params,
    pConfigImage,
    *mut u8
);
/// `CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_Host_GetNumOfPasses_Params,
    numOfPasses,
    usize
);
/// `CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_Host_EvaluateToGpuValues_Params,
    pMetricValues,
    *mut f64
);
/// CUDA 12.6's `CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE` (up to
/// `pRangeProfilerObject`; no cache control).
pub const CUpti_RangeProfiler_Enable_Params_SIZE_12_6: usize = struct_size!(
    CUpti_RangeProfiler_Enable_Params,
    pRangeProfilerObject,
    *mut CUpti_RangeProfiler_Object
);
/// `CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE` of CUDA 13.4+ (with `cacheControlMode`).
pub const CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_RangeProfiler_Enable_Params, cacheControlMode, u32);
/// `CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE` (also `Start`'s).
pub const CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_RangeProfiler_Disable_Params,
    pRangeProfilerObject,
    *mut CUpti_RangeProfiler_Object
);
/// `CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE`.
pub const CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_RangeProfiler_PushRange_Params,
    pRangeName,
    *const c_char
);
/// `CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE`.
pub const CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_RangeProfiler_SetConfig_Params,
    targetNestingLevel,
    u16
);
/// `CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE`.
pub const CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_RangeProfiler_Stop_Params, isAllPassSubmitted, u8);
/// `CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE`.
pub const CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_RangeProfiler_DecodeData_Params,
    numOfRangeDropped,
    usize
);
/// `CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE`.
pub const CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_RangeProfiler_GetCounterDataSize_Params,
    counterDataSize,
    usize
);
/// `CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE`.
pub const CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params,
    pCounterData,
    *mut u8
);
/// `CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE`.
pub const CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_RangeProfiler_GetCounterDataInfo_Params,
    numTotalRanges,
    usize
);

/// `CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE`.
pub const CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_CounterDataImageOptions,
    maxRangeNameLength,
    u32
);
/// `CUpti_Profiler_CounterDataImage_CalculateSize_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_CounterDataImage_CalculateSize_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_CounterDataImage_CalculateSize_Params,
    counterDataImageSize,
    usize
);
/// `CUpti_Profiler_CounterDataImage_Initialize_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_CounterDataImage_Initialize_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_CounterDataImage_Initialize_Params,
    pCounterDataImage,
    *mut u8
);
/// `CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params,
    counterDataScratchBufferSize,
    usize
);
/// `CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params,
    pCounterDataScratchBuffer,
    *mut u8
);
/// `CUpti_Profiler_BeginSession_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_BeginSession_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_BeginSession_Params,
    maxLaunchesPerPass,
    usize
);
/// The `STRUCT_SIZE` of every [`CUpti_Profiler_Context_Params`] type.
pub const CUpti_Profiler_Context_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_Profiler_Context_Params, ctx, CUcontext);
/// `CUpti_Profiler_SetConfig_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_SetConfig_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_Profiler_SetConfig_Params, targetNestingLevel, u16);
/// `CUpti_Profiler_EndPass_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_EndPass_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_Profiler_EndPass_Params, allPassesSubmitted, u8);
/// `CUpti_Profiler_FlushCounterData_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_FlushCounterData_Params_STRUCT_SIZE: usize = struct_size!(
    CUpti_Profiler_FlushCounterData_Params,
    numTraceBytesDropped,
    usize
);
/// `CUpti_Profiler_PushRange_Params_STRUCT_SIZE`.
pub const CUpti_Profiler_PushRange_Params_STRUCT_SIZE: usize =
    struct_size!(CUpti_Profiler_PushRange_Params, rangeNameLength, usize);

/// The signature every Profiling API function shares: one parameter block in, a status out.
pub type cupti_params_fn<P> = unsafe extern "C" fn(params: *mut P) -> CUptiResult;

/// `cuptiProfilerInitialize`.
pub type cuptiProfilerInitialize_fn = cupti_params_fn<CUpti_Profiler_Initialize_Params>;
/// `cuptiDeviceGetChipName`.
pub type cuptiDeviceGetChipName_fn = cupti_params_fn<CUpti_Device_GetChipName_Params>;
/// `cuptiProfilerHostInitialize`.
pub type cuptiProfilerHostInitialize_fn = cupti_params_fn<CUpti_Profiler_Host_Initialize_Params>;
/// `cuptiProfilerHostDeinitialize`.
pub type cuptiProfilerHostDeinitialize_fn =
    cupti_params_fn<CUpti_Profiler_Host_Deinitialize_Params>;
/// `cuptiProfilerHostGetBaseMetrics`.
pub type cuptiProfilerHostGetBaseMetrics_fn =
    cupti_params_fn<CUpti_Profiler_Host_GetBaseMetrics_Params>;
/// `cuptiProfilerHostConfigAddMetrics`.
pub type cuptiProfilerHostConfigAddMetrics_fn =
    cupti_params_fn<CUpti_Profiler_Host_ConfigAddMetrics_Params>;
/// `cuptiProfilerHostGetConfigImageSize`.
pub type cuptiProfilerHostGetConfigImageSize_fn =
    cupti_params_fn<CUpti_Profiler_Host_GetConfigImageSize_Params>;
/// `cuptiProfilerHostGetConfigImage`.
pub type cuptiProfilerHostGetConfigImage_fn =
    cupti_params_fn<CUpti_Profiler_Host_GetConfigImage_Params>;
/// `cuptiProfilerHostGetNumOfPasses`.
pub type cuptiProfilerHostGetNumOfPasses_fn =
    cupti_params_fn<CUpti_Profiler_Host_GetNumOfPasses_Params>;
/// `cuptiProfilerHostEvaluateToGpuValues`.
pub type cuptiProfilerHostEvaluateToGpuValues_fn =
    cupti_params_fn<CUpti_Profiler_Host_EvaluateToGpuValues_Params>;
/// `cuptiRangeProfilerEnable`.
pub type cuptiRangeProfilerEnable_fn = cupti_params_fn<CUpti_RangeProfiler_Enable_Params>;
/// `cuptiRangeProfilerDisable`.
pub type cuptiRangeProfilerDisable_fn = cupti_params_fn<CUpti_RangeProfiler_Disable_Params>;
/// `cuptiRangeProfilerSetConfig`.
pub type cuptiRangeProfilerSetConfig_fn = cupti_params_fn<CUpti_RangeProfiler_SetConfig_Params>;
/// `cuptiRangeProfilerStart`.
pub type cuptiRangeProfilerStart_fn = cupti_params_fn<CUpti_RangeProfiler_Start_Params>;
/// `cuptiRangeProfilerPushRange`.
pub type cuptiRangeProfilerPushRange_fn = cupti_params_fn<CUpti_RangeProfiler_PushRange_Params>;
/// `cuptiRangeProfilerPopRange`.
pub type cuptiRangeProfilerPopRange_fn = cupti_params_fn<CUpti_RangeProfiler_PopRange_Params>;
/// `cuptiRangeProfilerStop`.
pub type cuptiRangeProfilerStop_fn = cupti_params_fn<CUpti_RangeProfiler_Stop_Params>;
/// `cuptiRangeProfilerDecodeData`.
pub type cuptiRangeProfilerDecodeData_fn = cupti_params_fn<CUpti_RangeProfiler_DecodeData_Params>;
/// `cuptiRangeProfilerGetCounterDataSize`.
pub type cuptiRangeProfilerGetCounterDataSize_fn =
    cupti_params_fn<CUpti_RangeProfiler_GetCounterDataSize_Params>;
/// `cuptiRangeProfilerCounterDataImageInitialize`.
pub type cuptiRangeProfilerCounterDataImageInitialize_fn =
    cupti_params_fn<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>;
/// `cuptiRangeProfilerGetCounterDataInfo`.
pub type cuptiRangeProfilerGetCounterDataInfo_fn =
    cupti_params_fn<CUpti_RangeProfiler_GetCounterDataInfo_Params>;

/// `cuptiProfilerCounterDataImageCalculateSize`.
pub type cuptiProfilerCounterDataImageCalculateSize_fn =
    cupti_params_fn<CUpti_Profiler_CounterDataImage_CalculateSize_Params>;
/// `cuptiProfilerCounterDataImageInitialize`.
pub type cuptiProfilerCounterDataImageInitialize_fn =
    cupti_params_fn<CUpti_Profiler_CounterDataImage_Initialize_Params>;
/// `cuptiProfilerCounterDataImageCalculateScratchBufferSize`.
pub type cuptiProfilerCounterDataImageCalculateScratchBufferSize_fn =
    cupti_params_fn<CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params>;
/// `cuptiProfilerCounterDataImageInitializeScratchBuffer`.
pub type cuptiProfilerCounterDataImageInitializeScratchBuffer_fn =
    cupti_params_fn<CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params>;
/// `cuptiProfilerBeginSession`.
pub type cuptiProfilerBeginSession_fn = cupti_params_fn<CUpti_Profiler_BeginSession_Params>;
/// `cuptiProfilerSetConfig`.
pub type cuptiProfilerSetConfig_fn = cupti_params_fn<CUpti_Profiler_SetConfig_Params>;
/// `cuptiProfilerEndPass`.
pub type cuptiProfilerEndPass_fn = cupti_params_fn<CUpti_Profiler_EndPass_Params>;
/// `cuptiProfilerFlushCounterData`.
pub type cuptiProfilerFlushCounterData_fn = cupti_params_fn<CUpti_Profiler_FlushCounterData_Params>;
/// `cuptiProfilerPushRange`.
pub type cuptiProfilerPushRange_fn = cupti_params_fn<CUpti_Profiler_PushRange_Params>;
/// `cuptiProfilerEndSession`, `cuptiProfilerUnsetConfig`, `cuptiProfilerBeginPass`,
/// `cuptiProfilerEnableProfiling`, `cuptiProfilerDisableProfiling`, `cuptiProfilerPopRange`.
pub type cuptiProfiler_context_fn = cupti_params_fn<CUpti_Profiler_Context_Params>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_version_sizes_stop_before_the_later_fields() {
        assert_eq!(CUpti_Profiler_Host_Initialize_Params_SIZE_12_6, 48);
        assert!(
            CUpti_Profiler_Host_Initialize_Params_SIZE_12_6
                <= offset_of!(
                    CUpti_Profiler_Host_Initialize_Params,
                    pSinglePassMetricSetName
                )
        );
        assert_eq!(CUpti_RangeProfiler_Enable_Params_SIZE_12_6, 32);
        assert_eq!(CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE, 90);
        assert_eq!(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE, 41);
        assert_eq!(
            CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE,
            64
        );
    }
}
