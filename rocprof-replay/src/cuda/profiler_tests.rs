//! The counter source against a fake CUPTI: every Profiling API function is a Rust function
//! that checks its parameter block, logs its name and answers as CUPTI would. The backend's
//! end-to-end test (`cuda/tests.rs`) uses the same fake with the fake driver.

use std::ffi::{CStr, c_char};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use rocprof_replay_sys::cuda::{CUPTI_ERROR_INVALID_PARAMETER, CUPTI_SUCCESS, CUptiResult};

use super::*;
use crate::counters::{MetricError, MetricSet};

/// What the fake CUPTI was asked and what it answers.
#[derive(Default)]
pub(crate) struct FakeCupti {
    /// Function names, in call order (`kernel` where a fake kernel ran).
    pub(crate) log: Vec<String>,
    /// What `GetNumOfPasses` says.
    pub(crate) passes: usize,
    /// What `cuptiRangeProfilerEnable` returns.
    pub(crate) enable_status: CUptiResult,
    /// `cuptiRangeProfilerEnable` calls: the cache control mode asked (`None`: 12.6 size).
    pub(crate) enables: Vec<Option<u32>>,
    /// A CUPTI before 13.4: the larger `Enable` block is refused.
    pub(crate) old_cupti: bool,
    /// `ConfigAddMetrics` fails for a metric containing this.
    pub(crate) reject: Option<&'static str>,
    /// Metric names of the last `ConfigAddMetrics`.
    pub(crate) added: Vec<String>,
    started: bool,
    pushed: bool,
    /// The range mode of the last `SetConfig`.
    pub(crate) range: u32,
    stops: usize,
    /// Kernels that ran between Start and Stop, per range.
    pub(crate) kernels_per_range: Vec<u32>,
    next: usize,
    /// Parameter blocks that were not as the counter source must fill them.
    pub(crate) bad: Vec<String>,
    /// The thread of each `Start` (its name).
    pub(crate) start_threads: Vec<String>,
    /// The ranges per pass the session must be configured for (`SetConfig`,
    /// `GetCounterDataSize`); 0 counts as 1.
    pub(crate) ranges_per_pass: usize,
    /// The user ranges the image keeps per pass (`None`: every one; CUDA 13.0's range
    /// profiler keeps 2).
    pub(crate) keep: Option<usize>,
    /// Ranges pushed in the current pass, and the most in any pass.
    pushes: usize,
    most_pushes: usize,
    /// The name of every range pushed, in order.
    pub(crate) range_names: Vec<String>,
    /// The thread of every profiler call but the catalog's (its name), for the run tests.
    pub(crate) call_threads: Vec<String>,
    /// Range profilers enabled and not disabled.
    enabled: usize,
    /// What `cuptiProfilerBeginSession` returns.
    pub(crate) begin_status: CUptiResult,
    /// Legacy API: between `BeginSession` and `EndSession`, `SetConfig` and `UnsetConfig`,
    /// `BeginPass` and `EndPass`.
    session: bool,
    configured: bool,
    in_pass: bool,
    /// The last configuration was the legacy API's.
    legacy_image: bool,
    /// The ranges a counter data image must be built for (`GetCounterDataSize`; 0: as
    /// [`ranges_per_pass`](Self::ranges_per_pass)).
    pub(crate) image_ranges: usize,
    /// Legacy API: the ranges the session's image holds (flushed windows), and how many it
    /// can (the last image built).
    session_ranges: usize,
    image_capacity: usize,
    /// Legacy API: range names of the session's earlier windows, and of this window.
    session_names: Vec<String>,
    window_names: Vec<String>,
    /// `BeginSession` calls.
    pub(crate) sessions_begun: usize,
}

static FAKE: Mutex<Option<FakeCupti>> = Mutex::new(None);
/// One test at a time uses the fake CUPTI.
static SERIAL: Mutex<()> = Mutex::new(());

pub(crate) fn fake() -> parking_lot::MappedMutexGuard<'static, FakeCupti> {
    MutexGuard::map(FAKE.lock(), |f| f.get_or_insert_with(FakeCupti::default))
}

fn log(name: &str) {
    let thread = std::thread::current();
    let mut f = fake();
    f.log.push(name.to_owned());
    f.call_threads
        .push(thread.name().unwrap_or("<unnamed>").to_owned());
}

fn bad(what: String) {
    fake().bad.push(what);
}

/// A fake kernel ran (the backend test's kernels call this).
pub(crate) fn kernel_ran() {
    let mut f = fake();
    f.log.push("kernel".into());
    let in_range = f.started && (f.pushed || f.range == CUPTI_AutoRange);
    if in_range && let Some(n) = f.kernels_per_range.last_mut() {
        *n += 1;
    }
}

/// Takes the fake for one test, reset with `passes` passes; hold the guard for the test.
pub(crate) fn reset(passes: usize) -> MutexGuard<'static, ()> {
    let serial = SERIAL.lock();
    *FAKE.lock() = Some(FakeCupti {
        passes,
        ..FakeCupti::default()
    });
    serial
}

/// The calls logged so far (and clears the log).
pub(crate) fn take_log() -> Vec<String> {
    std::mem::take(&mut fake().log)
}

fn handle() -> usize {
    let mut f = fake();
    f.next += 0x100;
    0x9000_0000 + f.next
}

unsafe extern "C" fn get_result_string(_: CUptiResult, p: *mut *const c_char) -> CUptiResult {
    // SAFETY: out-parameter.
    unsafe { *p = c"FAKE_CUPTI_ERROR".as_ptr() };
    CUPTI_SUCCESS
}
unsafe extern "C" fn initialize(p: *mut CUpti_Profiler_Initialize_Params) -> CUptiResult {
    log("Initialize");
    // SAFETY: the caller's block.
    if unsafe { (*p).structSize } != CUpti_Profiler_Initialize_Params_STRUCT_SIZE {
        bad("Initialize size".into());
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn chip_name(p: *mut CUpti_Device_GetChipName_Params) -> CUptiResult {
    log("GetChipName");
    // SAFETY: the caller's block.
    unsafe { (*p).pChipName = c"GH100".as_ptr() };
    CUPTI_SUCCESS
}
unsafe extern "C" fn host_initialize(p: *mut CUpti_Profiler_Host_Initialize_Params) -> CUptiResult {
    log("HostInitialize");
    // SAFETY: the caller's block.
    let p = unsafe { &mut *p };
    if p.structSize != 48 || p.profilerType != CUPTI_PROFILER_TYPE_RANGE_PROFILER {
        bad(format!(
            "HostInitialize size {} type {}",
            p.structSize, p.profilerType
        ));
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: the caller's chip name.
    if unsafe { CStr::from_ptr(p.pChipName) } != c"GH100" {
        bad("HostInitialize chip".into());
    }
    p.pHostObject = handle() as *mut CUpti_Profiler_Host_Object;
    CUPTI_SUCCESS
}
unsafe extern "C" fn host_deinitialize(
    _: *mut CUpti_Profiler_Host_Deinitialize_Params,
) -> CUptiResult {
    log("HostDeinitialize");
    CUPTI_SUCCESS
}
/// The fake chip's base metrics, per type (counter, ratio, throughput).
const BASE: [&[&CStr]; 3] = [
    &[
        c"sm__cycles_elapsed",
        c"sm__inst_executed",
        c"dram__bytes_read",
        c"lts__t_sectors",
    ],
    &[],
    &[c"sm__throughput"],
];
unsafe extern "C" fn host_base_metrics(
    p: *mut CUpti_Profiler_Host_GetBaseMetrics_Params,
) -> CUptiResult {
    log("GetBaseMetrics");
    // SAFETY: the caller's block.
    let p = unsafe { &mut *p };
    let names: Vec<*const c_char> = BASE[p.metricType as usize]
        .iter()
        .map(|c| c.as_ptr())
        .collect();
    p.numMetrics = names.len();
    // Leaked: CUPTI's arrays outlive the call.
    p.ppMetricNames = Box::leak(names.into_boxed_slice()).as_mut_ptr();
    CUPTI_SUCCESS
}
unsafe extern "C" fn host_add_metrics(
    p: *mut CUpti_Profiler_Host_ConfigAddMetrics_Params,
) -> CUptiResult {
    log("ConfigAddMetrics");
    // SAFETY: the caller's block and its `numMetrics` names.
    let names: Vec<String> = unsafe {
        let p = &*p;
        (0..p.numMetrics)
            .map(|i| {
                CStr::from_ptr(*p.ppMetricNames.add(i))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    };
    let mut f = fake();
    let rejected = f
        .reject
        .is_some_and(|r| names.iter().any(|n| n.contains(r)));
    f.added = names;
    if rejected {
        CUPTI_ERROR_INVALID_PARAMETER
    } else {
        CUPTI_SUCCESS
    }
}
unsafe extern "C" fn host_config_size(
    p: *mut CUpti_Profiler_Host_GetConfigImageSize_Params,
) -> CUptiResult {
    log("GetConfigImageSize");
    // SAFETY: the caller's block.
    unsafe { (*p).configImageSize = 64 };
    CUPTI_SUCCESS
}
unsafe extern "C" fn host_config_image(
    p: *mut CUpti_Profiler_Host_GetConfigImage_Params,
) -> CUptiResult {
    log("GetConfigImage");
    // SAFETY: the caller's block and its buffer.
    unsafe {
        let p = &*p;
        if p.configImageSize != 64 {
            bad("GetConfigImage size".into());
        }
        std::ptr::write_bytes(p.pConfigImage, 0xC0, p.configImageSize);
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn host_passes(p: *mut CUpti_Profiler_Host_GetNumOfPasses_Params) -> CUptiResult {
    log("GetNumOfPasses");
    // SAFETY: the caller's block and its image.
    unsafe {
        let p = &mut *p;
        if *p.pConfigImage != 0xC0 {
            bad("GetNumOfPasses image".into());
        }
        p.numOfPasses = fake().passes;
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn host_evaluate(
    p: *mut CUpti_Profiler_Host_EvaluateToGpuValues_Params,
) -> CUptiResult {
    log("Evaluate");
    // SAFETY: the caller's block, its names and its value array of `numMetrics`.
    unsafe {
        let p = &*p;
        let kept = kept_ranges();
        if p.rangeIndex >= kept.max(1) || *p.pCounterDataImage != 0xDA {
            bad(format!(
                "Evaluate range {} of {kept}, or image",
                p.rangeIndex
            ));
        }
        for i in 0..p.numMetrics {
            // Each value: the metric name's length plus a quarter (not an integer), plus
            // 1000 per range before the one evaluated.
            let name = CStr::from_ptr(*p.ppMetricNames.add(i));
            *p.pMetricValues.add(i) =
                name.to_bytes().len() as f64 + 0.25 + 1000.0 * p.rangeIndex as f64;
        }
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn enable(p: *mut CUpti_RangeProfiler_Enable_Params) -> CUptiResult {
    log("Enable");
    // SAFETY: the caller's block.
    let p = unsafe { &mut *p };
    let with_cache = p.structSize == CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE;
    if !(with_cache || p.structSize == CUpti_RangeProfiler_Enable_Params_SIZE_12_6)
        || p.ctx.is_null()
        || (!with_cache && p.cacheControlMode != 0)
    {
        bad("Enable".into());
    }
    let mut f = fake();
    f.enables.push(with_cache.then_some(p.cacheControlMode));
    if with_cache && f.old_cupti {
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    let status = f.enable_status;
    if f.session {
        f.bad
            .push("range profiler enabled inside a legacy session".into());
    }
    if status == CUPTI_SUCCESS {
        f.enabled += 1;
    }
    drop(f);
    if status == CUPTI_SUCCESS {
        p.pRangeProfilerObject = handle() as *mut CUpti_RangeProfiler_Object;
    }
    status
}
unsafe extern "C" fn disable(_: *mut CUpti_RangeProfiler_Disable_Params) -> CUptiResult {
    log("Disable");
    let mut f = fake();
    f.enabled = f.enabled.saturating_sub(1);
    CUPTI_SUCCESS
}
unsafe extern "C" fn set_config(p: *mut CUpti_RangeProfiler_SetConfig_Params) -> CUptiResult {
    log("SetConfig");
    // SAFETY: the caller's block and its images.
    unsafe {
        let p = &*p;
        if (p.range != CUPTI_AutoRange && p.range != CUPTI_UserRange)
            || p.replayMode != CUPTI_UserReplay
            || p.maxRangesPerPass != fake().ranges_per_pass.max(1)
            || p.passIndex != 0
            || p.numNestingLevels != 1
            || p.minNestingLevel != 1
            || p.targetNestingLevel != 1
            || *p.pConfig != 0xC0
            || *p.pCounterDataImage != 0xDA
            || p.structSize != CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE
        {
            bad("SetConfig".into());
        }
    }
    let mut f = fake();
    f.stops = 0;
    f.legacy_image = false;
    // SAFETY: the caller's block.
    f.range = unsafe { (*p).range };
    CUPTI_SUCCESS
}
unsafe extern "C" fn push_range(p: *mut CUpti_RangeProfiler_PushRange_Params) -> CUptiResult {
    // SAFETY: the caller's block.
    pushed(unsafe { (*p).pRangeName })
}

/// A range named `name` pushed (either API).
fn pushed(name: *const c_char) -> CUptiResult {
    log("PushRange");
    // SAFETY: the caller's name, NUL-terminated where not null.
    let name = unsafe { (!name.is_null()).then(|| CStr::from_ptr(name)) }
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let named = !name.is_empty();
    let mut f = fake();
    if !f.started || f.pushed || !named || f.range != CUPTI_UserRange {
        f.bad.push("PushRange".into());
    }
    f.pushed = true;
    f.pushes += 1;
    f.most_pushes = f.most_pushes.max(f.pushes);
    if f.legacy_image && f.session_names.contains(&name) {
        // CUPTI matches a range's passes by name: an earlier window's name would merge.
        f.bad
            .push(format!("range {name:?} reused in a legacy session"));
    }
    if f.legacy_image && !f.window_names.contains(&name) {
        f.window_names.push(name.clone());
    }
    f.range_names.push(name);
    f.kernels_per_range.push(0);
    CUPTI_SUCCESS
}

/// The ranges the image holds: the most pushed in a pass, at most [`FakeCupti::keep`] (one,
/// the pass's launch, with CUPTI's auto range).
fn kept_ranges() -> usize {
    let f = fake();
    if f.legacy_image {
        // The legacy API keeps every range (docs/performance.md): the session's image holds
        // those of every window flushed into it.
        return f.session_ranges;
    }
    if f.range == CUPTI_AutoRange {
        return 1;
    }
    f.keep.map_or(f.most_pushes, |k| f.most_pushes.min(k))
}
unsafe extern "C" fn pop_range(_: *mut CUpti_RangeProfiler_PopRange_Params) -> CUptiResult {
    popped()
}

/// The open range popped (either API).
fn popped() -> CUptiResult {
    log("PopRange");
    let mut f = fake();
    if !f.pushed {
        f.bad.push("PopRange without PushRange".into());
    }
    f.pushed = false;
    CUPTI_SUCCESS
}
unsafe extern "C" fn start(_: *mut CUpti_RangeProfiler_Start_Params) -> CUptiResult {
    log("Start");
    let mut f = fake();
    let thread = std::thread::current();
    f.start_threads
        .push(thread.name().unwrap_or("<unnamed>").to_owned());
    if f.started {
        f.bad.push("Start while started".into());
    }
    f.started = true;
    f.pushes = 0;
    if f.range == CUPTI_AutoRange {
        f.kernels_per_range.push(0);
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn stop(p: *mut CUpti_RangeProfiler_Stop_Params) -> CUptiResult {
    log("Stop");
    let mut f = fake();
    if !f.started || f.pushed {
        f.bad.push("Stop without Start, or inside a range".into());
    }
    f.started = false;
    f.stops += 1;
    // SAFETY: the caller's block.
    unsafe {
        (*p).passIndex = f.stops - 1;
        (*p).isAllPassSubmitted = u8::from(f.stops >= f.passes);
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn decode(p: *mut CUpti_RangeProfiler_DecodeData_Params) -> CUptiResult {
    log("Decode");
    // SAFETY: the caller's block.
    unsafe { (*p).numOfRangeDropped = 0 };
    CUPTI_SUCCESS
}
unsafe extern "C" fn data_size(
    p: *mut CUpti_RangeProfiler_GetCounterDataSize_Params,
) -> CUptiResult {
    log("GetCounterDataSize");
    // SAFETY: the caller's block.
    unsafe {
        let p = &mut *p;
        let f = fake();
        let ranges = match f.image_ranges {
            0 => f.ranges_per_pass.max(1),
            n => n,
        };
        drop(f);
        fake().image_capacity = ranges;
        if p.maxNumOfRanges != ranges
            || p.maxNumRangeTreeNodes as usize != ranges
            || p.numMetrics == 0
            || p.pRangeProfilerObject.is_null()
        {
            bad("GetCounterDataSize".into());
        }
        p.counterDataSize = 128;
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn data_initialize(
    p: *mut CUpti_RangeProfiler_CounterDataImage_Initialize_Params,
) -> CUptiResult {
    log("CounterDataImageInitialize");
    // SAFETY: the caller's block and its buffer.
    unsafe {
        let p = &*p;
        std::ptr::write_bytes(p.pCounterData, 0xDA, p.counterDataSize);
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn data_info(
    p: *mut CUpti_RangeProfiler_GetCounterDataInfo_Params,
) -> CUptiResult {
    log("GetCounterDataInfo");
    let kept = kept_ranges();
    // SAFETY: the caller's block.
    unsafe { (*p).numTotalRanges = kept };
    CUPTI_SUCCESS
}

// ---- the legacy Profiler API ----

unsafe extern "C" fn legacy_scratch_size(
    p: *mut CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params,
) -> CUptiResult {
    log("CalculateScratchBufferSize");
    // SAFETY: the caller's block and its image.
    unsafe {
        let p = &mut *p;
        if p.counterDataImageSize == 0 || *p.pCounterDataImage != 0xDA {
            bad("CalculateScratchBufferSize".into());
        }
        p.counterDataScratchBufferSize = 64;
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn legacy_scratch_initialize(
    p: *mut CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params,
) -> CUptiResult {
    log("InitializeScratchBuffer");
    // SAFETY: the caller's block and its buffer.
    unsafe {
        let p = &*p;
        std::ptr::write_bytes(
            p.pCounterDataScratchBuffer,
            0x5C,
            p.counterDataScratchBufferSize,
        );
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn legacy_begin_session(
    p: *mut CUpti_Profiler_BeginSession_Params,
) -> CUptiResult {
    log("BeginSession");
    let mut f = fake();
    // SAFETY: the caller's block and its buffers.
    unsafe {
        let p = &*p;
        if p.structSize != CUpti_Profiler_BeginSession_Params_STRUCT_SIZE
            || p.ctx.is_null()
            || *p.pCounterDataImage != 0xDA
            || *p.pCounterDataScratchBuffer != 0x5C
            || (p.range != CUPTI_UserRange && p.range != CUPTI_AutoRange)
            || p.replayMode != CUPTI_UserReplay
            || p.maxRangesPerPass != f.ranges_per_pass.max(1)
            || p.maxLaunchesPerPass < p.maxRangesPerPass
        {
            f.bad.push("BeginSession".into());
        }
    }
    if f.begin_status != CUPTI_SUCCESS {
        return f.begin_status;
    }
    // As far as is known, a context's range profiler and a legacy session exclude each other.
    if f.enabled > 0 {
        return CUPTI_ERROR_INVALID_OPERATION;
    }
    if f.session {
        f.bad.push("BeginSession inside a session".into());
    }
    f.session = true;
    // SAFETY: the caller's block.
    f.range = unsafe { (*p).range };
    f.sessions_begun += 1;
    f.session_ranges = 0;
    f.session_names.clear();
    f.window_names.clear();
    CUPTI_SUCCESS
}
unsafe extern "C" fn legacy_end_session(_: *mut CUpti_Profiler_Context_Params) -> CUptiResult {
    log("EndSession");
    let mut f = fake();
    if !f.session || f.configured || f.in_pass {
        f.bad
            .push("EndSession outside a session, configured or inside a pass".into());
    }
    f.session = false;
    CUPTI_SUCCESS
}
unsafe extern "C" fn legacy_set_config(p: *mut CUpti_Profiler_SetConfig_Params) -> CUptiResult {
    log("SetConfig");
    let mut f = fake();
    // SAFETY: the caller's block and its image.
    unsafe {
        let p = &*p;
        if p.structSize != CUpti_Profiler_SetConfig_Params_STRUCT_SIZE
            || p.ctx.is_null()
            || *p.pConfig != 0xC0
            || p.passIndex != 0
            || p.numNestingLevels != 1
            || p.minNestingLevel != 1
            || p.targetNestingLevel != 1
            || !f.session
            || f.configured
        {
            f.bad.push("SetConfig".into());
        }
    }
    f.configured = true;
    f.legacy_image = true;
    f.stops = 0;
    f.most_pushes = 0;
    let window = std::mem::take(&mut f.window_names);
    f.session_names.extend(window);
    CUPTI_SUCCESS
}
/// A legacy call `name` that takes only the context: `ok` says whether the fake's state allows
/// it (else `why` is recorded as a bad call), `then` is its effect.
fn legacy_step(
    name: &str,
    ok: fn(&FakeCupti) -> bool,
    why: &str,
    then: fn(&mut FakeCupti),
) -> CUptiResult {
    log(name);
    let mut f = fake();
    if !ok(&f) {
        f.bad.push(format!("{name}: {why}"));
    }
    then(&mut f);
    CUPTI_SUCCESS
}
unsafe extern "C" fn legacy_unset_config(_: *mut CUpti_Profiler_Context_Params) -> CUptiResult {
    legacy_step(
        "UnsetConfig",
        |f| f.configured && !f.in_pass,
        "unconfigured or inside a pass",
        |f| f.configured = false,
    )
}
unsafe extern "C" fn legacy_begin_pass(_: *mut CUpti_Profiler_Context_Params) -> CUptiResult {
    legacy_step(
        "BeginPass",
        |f| f.configured && !f.in_pass,
        "unconfigured or inside a pass",
        |f| {
            f.in_pass = true;
            f.pushes = 0;
        },
    )
}
unsafe extern "C" fn legacy_enable(_: *mut CUpti_Profiler_Context_Params) -> CUptiResult {
    legacy_step(
        "EnableProfiling",
        |f| f.in_pass && !f.started,
        "outside a pass or enabled",
        |f| {
            f.started = true;
            // The auto range: a range of the launches while profiling is enabled.
            if f.range == CUPTI_AutoRange {
                f.pushes += 1;
                f.most_pushes = f.most_pushes.max(f.pushes);
                f.kernels_per_range.push(0);
            }
        },
    )
}
unsafe extern "C" fn legacy_disable(_: *mut CUpti_Profiler_Context_Params) -> CUptiResult {
    legacy_step(
        "DisableProfiling",
        |f| f.started && !f.pushed,
        "not enabled or inside a range",
        |f| f.started = false,
    )
}
unsafe extern "C" fn legacy_end_pass(p: *mut CUpti_Profiler_EndPass_Params) -> CUptiResult {
    log("EndPass");
    let mut f = fake();
    if !f.in_pass || f.started {
        f.bad
            .push("EndPass outside a pass or with profiling enabled".into());
    }
    f.in_pass = false;
    f.stops += 1;
    // SAFETY: the caller's block.
    unsafe {
        (*p).passIndex = f.stops;
        (*p).allPassesSubmitted = u8::from(f.stops >= f.passes);
    }
    CUPTI_SUCCESS
}
unsafe extern "C" fn legacy_push_range(p: *mut CUpti_Profiler_PushRange_Params) -> CUptiResult {
    // SAFETY: the caller's block.
    let (size, name) = unsafe { ((*p).structSize, (*p).pRangeName) };
    if size != CUpti_Profiler_PushRange_Params_STRUCT_SIZE {
        bad("PushRange (legacy)".into());
    }
    pushed(name)
}
unsafe extern "C" fn legacy_pop_range(_: *mut CUpti_Profiler_Context_Params) -> CUptiResult {
    popped()
}
unsafe extern "C" fn legacy_flush(p: *mut CUpti_Profiler_FlushCounterData_Params) -> CUptiResult {
    log("FlushCounterData");
    let mut f = fake();
    if !f.session || f.in_pass || f.stops < f.passes {
        f.bad
            .push("FlushCounterData before every pass ended".into());
    }
    // The window's ranges join the image's; what does not fit is dropped.
    let room = f.image_capacity.saturating_sub(f.session_ranges);
    let kept = f.most_pushes.min(room);
    f.session_ranges += kept;
    // SAFETY: the caller's block.
    unsafe { (*p).numRangesDropped = f.most_pushes - kept };
    CUPTI_SUCCESS
}

/// The legacy Profiler API, faked.
pub(crate) fn fake_legacy() -> LegacyFns {
    LegacyFns {
        scratch_size: legacy_scratch_size,
        scratch_initialize: legacy_scratch_initialize,
        begin_session: legacy_begin_session,
        end_session: legacy_end_session,
        set_config: legacy_set_config,
        unset_config: legacy_unset_config,
        begin_pass: legacy_begin_pass,
        end_pass: legacy_end_pass,
        enable: legacy_enable,
        disable: legacy_disable,
        push_range: legacy_push_range,
        pop_range: legacy_pop_range,
        flush: legacy_flush,
    }
}

/// Every function present.
pub(crate) fn fake_symbols() -> Symbols {
    Symbols {
        get_result_string: Some(get_result_string),
        legacy: Some(fake_legacy()),
        initialize: Some(initialize),
        chip_name: Some(chip_name),
        host_initialize: Some(host_initialize),
        host_deinitialize: Some(host_deinitialize),
        host_base_metrics: Some(host_base_metrics),
        host_add_metrics: Some(host_add_metrics),
        host_config_size: Some(host_config_size),
        host_config_image: Some(host_config_image),
        host_passes: Some(host_passes),
        host_evaluate: Some(host_evaluate),
        enable: Some(enable),
        disable: Some(disable),
        set_config: Some(set_config),
        start: Some(start),
        stop: Some(stop),
        push_range: Some(push_range),
        pop_range: Some(pop_range),
        decode: Some(decode),
        data_size: Some(data_size),
        data_initialize: Some(data_initialize),
        data_info: Some(data_info),
    }
}

/// What `on_agent` was given, per device.
pub(crate) type Seen = Arc<Mutex<Vec<(u32, Result<CounterCatalog, String>)>>>;

/// A profiler over `symbols` that records what `on_agent` gets.
pub(crate) fn profiler(symbols: Symbols, modes: Modes) -> (Arc<Profiler>, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let p = Profiler::new(
        Ok(symbols),
        Box::new(move |agent, c| s.lock().push((agent, c.cloned().map_err(str::to_owned)))),
        modes,
    );
    (Arc::new(p), seen)
}

/// Device 0's catalog, discovered.
pub(crate) fn catalog(p: &Profiler, seen: &Seen) -> CounterCatalog {
    p.discover(0);
    let seen = seen.lock();
    let (agent, c) = seen.last().expect("on_agent was called");
    assert_eq!(*agent, 0);
    c.clone().expect("a catalog")
}

pub(crate) const NAMES: [&str; 4] = [
    "sm__cycles_elapsed.avg",
    "sm__inst_executed.sum",
    "lts__t_sectors.sum",
    "dram__bytes_read.sum",
];

const CTX: usize = 0x7777_0000;

fn count(log: &[String], name: &str) -> usize {
    log.iter().filter(|l| *l == name).count()
}

/// Runs the counter passes of `session` as the window does: arm, launch, disarm, read.
fn run_passes(session: &mut Session, passes: u32) -> Vec<Result<Vec<u64>, String>> {
    (0..passes)
        .map(|p| {
            session.arm(Some(p));
            kernel_ran();
            session.arm(None);
            session.values(p)
        })
        .collect()
}

#[test]
fn a_device_becomes_a_catalog_of_the_chips_base_metrics_scheduled_by_cupti() {
    let _g = reset(3);
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    assert_eq!(c.agent(), "GH100");
    assert!(c.is_scheduled());
    // CUPTI's five base metrics and the launch metrics the backend computes.
    assert_eq!(
        c.counters().count(),
        5 + super::super::launch_metrics::NAMES.len()
    );
    assert!(c.is_computed("launch__grid_size"));
    assert!(!c.is_computed("sm__cycles_elapsed"));
    assert_eq!(c.unavailable(), None);
    assert_eq!(
        c.get("sm__throughput").map(|i| i.block.as_str()),
        Some("throughput")
    );
    // Seen once: later windows on the device do not ask again.
    p.discover(0);
    assert_eq!(seen.lock().len(), 1);
    let log = take_log();
    assert_eq!(count(&log, "Initialize"), 1);
    assert_eq!(count(&log, "GetBaseMetrics"), 3);
    assert_eq!(
        count(&log, "HostInitialize"),
        count(&log, "HostDeinitialize"),
        "{log:?}"
    );
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn the_config_image_is_built_once_per_set_and_chip_and_the_context_enabled_once() {
    let _g = reset(3);
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    take_log();
    let set = MetricSet::new(&c, NAMES).unwrap();
    assert_eq!(set.pass_count(), 3, "CUPTI's GetNumOfPasses");
    assert_eq!(fake().added, NAMES);
    let log = take_log();
    assert_eq!(count(&log, "GetConfigImage"), 1);
    assert_eq!(count(&log, "GetNumOfPasses"), 1);
    // Three dispatches of the set (the same set built again counts as the same set).
    let again = MetricSet::new(&c, NAMES).unwrap();
    for set in [&set, &again, &set] {
        let mut s = p.prepare(CTX, 0, set, 1).unwrap();
        let values = run_passes(&mut s, 3);
        assert!(values.iter().all(Result::is_ok), "{values:?}");
    }
    let log = take_log();
    assert_eq!(count(&log, "ConfigAddMetrics"), 0, "cached: {log:?}");
    assert_eq!(count(&log, "GetConfigImage"), 0, "cached: {log:?}");
    assert_eq!(count(&log, "Enable"), 1, "one range profiler per context");
    assert_eq!(
        count(&log, "CounterDataImageInitialize"),
        3,
        "one image per dispatch"
    );
    // Another set: its own image.
    let other = MetricSet::new(&c, ["lts__t_sectors.sum"]).unwrap();
    assert_eq!(other.pass_count(), 3);
    assert_eq!(count(&take_log(), "GetConfigImage"), 1);
    // Context destroyed: its range profiler is disabled, a new one enabled next time.
    p.forget_context(CTX);
    let mut s = p.prepare(CTX, 0, &set, 1).unwrap();
    drop(run_passes(&mut s, 3));
    let log = take_log();
    assert_eq!((count(&log, "Disable"), count(&log, "Enable")), (1, 1));
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn each_counter_pass_is_one_range_around_its_launch_and_values_come_in_set_order() {
    let _g = reset(3);
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let mut s = p.prepare(CTX, 0, &set, 1).unwrap();
    // A launch before the counter passes (the application's pass 1) is not in a range.
    kernel_ran();
    take_log();
    let values = run_passes(&mut s, 3);
    assert_eq!(
        take_log(),
        [
            "SetConfig",
            "Start",
            "PushRange",
            "kernel",
            "PopRange",
            "Stop",
            "Decode",
            "Start",
            "PushRange",
            "kernel",
            "PopRange",
            "Stop",
            "Decode",
            "Start",
            "PushRange",
            "kernel",
            "PopRange",
            "Stop",
            "Decode",
            "GetCounterDataInfo",
            "Evaluate",
        ]
    );
    assert_eq!(fake().range, CUPTI_UserRange);
    assert_eq!(
        fake().kernels_per_range,
        [1, 1, 1],
        "exactly one launch per range"
    );
    assert_eq!(values[0], Ok(vec![]));
    assert_eq!(values[1], Ok(vec![]));
    let last: Vec<f64> = values[2]
        .clone()
        .unwrap()
        .into_iter()
        .map(f64::from_bits)
        .collect();
    let expected: Vec<f64> = NAMES.iter().map(|n| n.len() as f64 + 0.25).collect();
    assert_eq!(last, expected, "in the set's order");
    // The engine's combination: every value from the last counter pass, floating point.
    let v = set
        .values_from(1, &[vec![], vec![], values[2].clone().unwrap()])
        .unwrap();
    let cycles = v.get("sm__cycles_elapsed.avg").unwrap();
    assert_eq!((cycles.gpu_value, cycles.pass), (22.25, 3));
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn with_decode_last_the_data_is_decoded_once_after_the_last_pass() {
    let _g = reset(2);
    let (p, seen) = profiler(
        fake_symbols(),
        Modes {
            decode_each: false,
            ..Modes::default()
        },
    );
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let mut s = p.prepare(CTX, 0, &set, 1).unwrap();
    take_log();
    let values = run_passes(&mut s, 2);
    assert!(values[1].as_ref().is_ok_and(|v| v.len() == 4), "{values:?}");
    assert_eq!(
        take_log(),
        [
            "SetConfig",
            "Start",
            "PushRange",
            "kernel",
            "PopRange",
            "Stop",
            "Start",
            "PushRange",
            "kernel",
            "PopRange",
            "Stop",
            "Decode",
            "GetCounterDataInfo",
            "Evaluate",
        ]
    );
}

#[test]
fn with_auto_range_cupti_delimits_the_launch_and_nothing_is_pushed() {
    let _g = reset(2);
    let (p, seen) = profiler(
        fake_symbols(),
        Modes {
            user_range: false,
            ..Modes::default()
        },
    );
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let mut s = p.prepare(CTX, 0, &set, 1).unwrap();
    take_log();
    let values = run_passes(&mut s, 2);
    assert!(values[1].as_ref().is_ok_and(|v| v.len() == 4), "{values:?}");
    assert_eq!(fake().range, CUPTI_AutoRange);
    let expected = [
        "SetConfig",
        "Start",
        "kernel",
        "Stop",
        "Decode",
        "Start",
        "kernel",
        "Stop",
        "Decode",
        "GetCounterDataInfo",
        "Evaluate",
    ];
    assert_eq!(take_log(), expected);
    assert_eq!(fake().kernels_per_range, [1, 1]);
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn cache_control_is_asked_for_when_wanted_and_dropped_on_an_older_cupti() {
    for old in [false, true] {
        let _g = reset(1);
        fake().old_cupti = old;
        let modes = Modes {
            flush_caches: true,
            ..Modes::default()
        };
        let (p, seen) = profiler(fake_symbols(), modes);
        let c = catalog(&p, &seen);
        let set = MetricSet::new(&c, NAMES).unwrap();
        let mut s = p.prepare(CTX, 0, &set, 1).unwrap();
        assert!(run_passes(&mut s, 1)[0].is_ok());
        let expected: &[Option<u32>] = if old {
            &[Some(CUPTI_CACHE_CONTROL_MODE_ALL), None]
        } else {
            &[Some(CUPTI_CACHE_CONTROL_MODE_ALL)]
        };
        assert_eq!(fake().enables, expected);
    }
    // The default: the first version's block, no cache control.
    let _g = reset(1);
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    drop(p.prepare(CTX, 0, &set, 1).unwrap());
    assert_eq!(fake().enables, [None]);
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn a_window_that_ends_inside_a_counter_pass_stops_the_profiler() {
    let _g = reset(3);
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let mut s = p.prepare(CTX, 0, &set, 1).unwrap();
    take_log();
    s.arm(Some(0));
    drop(s);
    assert_eq!(
        take_log(),
        [
            "SetConfig",
            "Start",
            "PushRange",
            "PopRange",
            "Stop",
            "Decode"
        ]
    );
    // A pass that was never stopped has no values.
    let mut s = p.prepare(CTX, 0, &set, 1).unwrap();
    assert!(s.values(0).unwrap_err().contains("was not collected"));
}

#[test]
fn an_application_that_owns_the_profiler_leaves_counters_absent_with_the_reason() {
    let _g = reset(2);
    fake().enable_status = CUPTI_ERROR_NOT_COMPATIBLE;
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let err = p.prepare(CTX, 0, &set, 1).err().expect("no session");
    assert!(err.contains("already in use"), "{err}");
    assert!(err.contains("FAKE_CUPTI_ERROR (14)"), "{err}");
    assert!(err.contains("the application is unaffected"), "{err}");
    // Said again for every dispatch, without asking CUPTI again.
    take_log();
    assert_eq!(p.prepare(CTX, 0, &set, 1).err(), Some(err));
    assert_eq!(count(&take_log(), "Enable"), 0);
    // Restricted counters get their own explanation.
    let _ = p;
    fake().enable_status = CUPTI_ERROR_INSUFFICIENT_PRIVILEGES;
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let err = p.prepare(CTX, 0, &set, 1).err().unwrap();
    assert!(err.contains("NVreg_RestrictProfilingToAdminUsers"), "{err}");
}

#[test]
fn a_cupti_without_the_profiling_api_makes_counters_unavailable_naming_the_function() {
    let _g = reset(2);
    let mut symbols = fake_symbols();
    symbols.enable = None;
    let (p, seen) = profiler(symbols, Modes::default());
    p.discover(0);
    // The launch metrics are still offered; the catalog says why nothing else is.
    let c = seen.lock()[0]
        .1
        .clone()
        .expect("a catalog of the launch metrics");
    let why = c
        .unavailable()
        .expect("why there are no counters")
        .to_owned();
    assert_eq!(c.agent(), "GPU 0");
    assert_eq!(
        c.counters().count(),
        super::super::launch_metrics::NAMES.len()
    );
    assert!(c.counters().all(|m| c.is_computed(&m.name)));
    assert_eq!(
        why,
        "this CUPTI has no cuptiRangeProfilerEnable (CUPTI's range profiler and profiler host \
         API need CUDA 12.6 or later)"
    );
    assert!(take_log().is_empty(), "nothing of CUPTI was called");
    // A set from elsewhere (another agent's catalog) gets the same reason per dispatch.
    let hsa = CounterCatalog::new("gfx90a")
        .block("SQ", 2)
        .counter("SQ_WAVES", "SQ", 4);
    let set = MetricSet::new(&hsa, ["SQ_WAVES"]).unwrap();
    assert_eq!(p.prepare(CTX, 0, &set, 1).err(), Some(why));
    // No CUPTI at all.
    let none = Profiler::new(
        Err("cannot load CUPTI".into()),
        Box::new(|_, _| {}),
        Modes::default(),
    );
    assert_eq!(
        none.prepare(CTX, 0, &set, 1).err().as_deref(),
        Some("cannot load CUPTI")
    );
}

#[test]
fn a_set_not_built_from_the_cupti_catalog_or_rejected_by_cupti_fails_with_a_reason() {
    let _g = reset(2);
    fake().reject = Some("bogus");
    let (p, seen) = profiler(fake_symbols(), Modes::default());
    let c = catalog(&p, &seen);
    let err = MetricSet::new(&c, ["sm__cycles_elapsed.bogus"]).unwrap_err();
    let MetricError::Unschedulable { reason, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        reason.starts_with("cuptiProfilerHostConfigAddMetrics failed: FAKE_CUPTI_ERROR (1)"),
        "{reason}"
    );
    let hsa = CounterCatalog::new("gfx90a")
        .block("SQ", 2)
        .counter("SQ_WAVES", "SQ", 4);
    let set = MetricSet::new(&hsa, ["SQ_WAVES"]).unwrap();
    let err = p.prepare(CTX, 0, &set, 1).err().unwrap();
    assert!(
        err.contains("not built from this GPU's CUPTI catalog"),
        "{err}"
    );
}

#[test]
fn the_global_profiler_is_absent_until_installed() {
    let _g = reset(1);
    let before = current();
    set(None);
    let hsa = CounterCatalog::new("gfx90a")
        .block("SQ", 2)
        .counter("SQ_WAVES", "SQ", 4);
    let set_ = MetricSet::new(&hsa, ["SQ_WAVES"]).unwrap();
    assert_eq!(prepare(CTX, 0, &set_, 1).err().as_deref(), Some(NOT_LOADED));
    discover(0); // nothing to do, no panic
    set(before);
}

/// Modes measuring `ranges` launches per counter pass through the legacy Profiler API.
fn legacy_modes(ranges: u32) -> Modes {
    Modes {
        ranges,
        legacy: true,
        ..Modes::default()
    }
}

/// Runs `passes` counter passes of `session` over `launches` launches each, as a counter
/// run does (the first launch armed, the others pushed), then reads every launch's values.
fn run_legacy(session: &mut Session, passes: u32, launches: u32) -> Vec<Result<Vec<u64>, String>> {
    for p in 0..passes {
        session.arm(Some(p));
        kernel_ran();
        for r in 1..launches {
            session.pop_range();
            // The backend's own kernel between two ranges (the L2 flush) is not counted.
            kernel_ran();
            session.push_range(r);
            kernel_ran();
        }
        session.arm(None);
    }
    (0..launches)
        .map(|r| session.values_of(passes - 1, r))
        .collect()
}

#[test]
fn the_legacy_api_measures_each_launch_of_a_pass_in_a_range_of_its_own() {
    let _g = reset(2);
    fake().ranges_per_pass = 4;
    // A session per window (ROCPROF_REPLAY_CUPTI_SESSION=window): its image holds one window.
    let modes = Modes {
        keep_session: false,
        ..legacy_modes(4)
    };
    let (p, seen) = profiler(fake_symbols(), modes);
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    take_log();
    for dispatch in 0..2 {
        let mut s = p.prepare(CTX, 0, &set, 4).unwrap();
        assert!(s.is_legacy());
        assert_eq!(s.capacity(), 4);
        let values = run_legacy(&mut s, 2, 4);
        // Range r's values are the fake's base values + 1000 r: each launch its own.
        for (r, v) in values.iter().enumerate() {
            let v: Vec<f64> = v.clone().unwrap().into_iter().map(f64::from_bits).collect();
            let want: Vec<f64> = NAMES
                .iter()
                .map(|n| n.len() as f64 + 0.25 + 1000.0 * r as f64)
                .collect();
            assert_eq!(v, want, "launch {r}");
        }
        let log = take_log();
        let first = [
            "Enable",
            "GetCounterDataSize",
            "CounterDataImageInitialize",
            "Disable",
        ];
        let prepared = if dispatch == 0 { &first[..] } else { &[] };
        let session: Vec<&str> = [
            prepared,
            &["CalculateScratchBufferSize", "InitializeScratchBuffer"],
            &["BeginSession", "SetConfig"],
        ]
        .concat();
        let pass = [
            "BeginPass",
            "EnableProfiling",
            "PushRange",
            "kernel",
            "PopRange",
            "kernel",
            "PushRange",
            "kernel",
            "PopRange",
            "kernel",
            "PushRange",
            "kernel",
            "PopRange",
            "kernel",
            "PushRange",
            "kernel",
            "PopRange",
            "DisableProfiling",
            "EndPass",
        ];
        let end = [
            "FlushCounterData",
            "UnsetConfig",
            "GetCounterDataInfo",
            "EndSession",
            "Evaluate",
            "Evaluate",
            "Evaluate",
            "Evaluate",
        ];
        let want: Vec<&str> = [&session[..], &pass, &pass, &end].concat();
        assert_eq!(log, want, "dispatch {dispatch}");
    }
    let f = fake();
    assert_eq!(f.kernels_per_range, vec![1; 16], "one launch per range");
    assert!(f.bad.is_empty(), "{:?}", f.bad);
}

#[test]
fn a_legacy_session_ended_inside_a_pass_ends_the_pass_and_the_session() {
    let _g = reset(3);
    fake().ranges_per_pass = 4;
    fake().image_ranges = SESSION_RANGES as usize;
    let (p, seen) = profiler(fake_symbols(), legacy_modes(4));
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let mut s = p.prepare(CTX, 0, &set, 4).unwrap();
    s.arm(Some(0));
    kernel_ran();
    take_log();
    drop(s);
    assert_eq!(
        take_log(),
        [
            "PopRange",
            "DisableProfiling",
            "EndPass",
            "UnsetConfig",
            "EndSession"
        ]
    );
    // The context is free for the next dispatch's session.
    let mut s = p.prepare(CTX, 0, &set, 4).unwrap();
    assert!(run_legacy(&mut s, 3, 4).iter().all(Result::is_ok));
    let f = fake();
    assert!(f.bad.is_empty(), "{:?}", f.bad);
}

#[test]
fn a_legacy_session_the_application_owns_leaves_counters_absent_with_the_reason() {
    let _g = reset(1);
    fake().begin_status = CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED;
    let (p, seen) = profiler(fake_symbols(), legacy_modes(4));
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let mut s = p.prepare(CTX, 0, &set, 4).unwrap();
    let values = run_legacy(&mut s, 1, 4);
    for v in values {
        let why = v.unwrap_err();
        assert!(why.contains("already in use"), "{why}");
        assert!(why.starts_with("CUPTI's profiler on this context"), "{why}");
    }
    drop(s);
    let log = take_log();
    assert_eq!(count(&log, "BeginPass"), 0, "{log:?}");
    assert_eq!(
        count(&log, "EndSession"),
        0,
        "no session was begun: {log:?}"
    );
}

#[test]
fn without_the_legacy_api_a_pass_measures_what_the_range_profiler_keeps() {
    let _g = reset(2);
    fake().ranges_per_pass = 2;
    let mut symbols = fake_symbols();
    symbols.legacy = None;
    // The default: the legacy API's auto range, which the range profiler cannot take.
    let modes = Modes {
        user_range: false,
        ..legacy_modes(8)
    };
    let (p, seen) = profiler(symbols, modes);
    assert_eq!(
        (p.modes.legacy, p.modes.ranges, p.modes.user_range),
        (false, RANGE_PROFILER_RANGES, true)
    );
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    let s = p.prepare(CTX, 0, &set, p.modes.ranges).unwrap();
    assert!(!s.is_legacy());
    drop(s);
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn the_legacy_api_with_its_auto_range_is_the_default_unless_asked_otherwise() {
    let modes = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let m = Modes::from_lookup(|n| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()));
        (m.ranges, m.legacy)
    };
    let m = Modes::from_lookup(|_| None);
    assert!(m.legacy && !m.user_range && m.ranges == 1, "{m:?}");
    assert_eq!(modes(&[("ROCPROF_REPLAY_CUPTI_RUN", "2")]), (2, true));
    assert_eq!(modes(&[("ROCPROF_REPLAY_CUPTI_RUN", "3")]), (3, true));
    // User ranges on request; the range profiler always with them.
    let user = Modes::from_lookup(|n| (n == "ROCPROF_REPLAY_CUPTI_RANGE").then(|| "user".into()));
    assert!(user.legacy && user.user_range, "{user:?}");
    let range = Modes::from_lookup(|n| (n == "ROCPROF_REPLAY_CUPTI_API").then(|| "range".into()));
    assert!(!range.legacy && range.user_range, "{range:?}");
    assert_eq!(
        modes(&[("ROCPROF_REPLAY_CUPTI_RUN", "999")]),
        (MAX_RANGES, true)
    );
    let range = [
        ("ROCPROF_REPLAY_CUPTI_RUN", "8"),
        ("ROCPROF_REPLAY_CUPTI_API", "range"),
    ];
    assert_eq!(modes(&range), (8, false));
    assert_eq!(modes(&[("ROCPROF_REPLAY_CUPTI_API", "legacy")]), (1, true));
    let bogus = [
        ("ROCPROF_REPLAY_CUPTI_RUN", "4"),
        ("ROCPROF_REPLAY_CUPTI_API", "newest"),
    ];
    assert_eq!(modes(&bogus), (4, true));
    // CUPTI's auto range: with the legacy API (chosen or by K) runs keep their K launches (each
    // launch its own range, profiling enabled around it); with the range profiler one launch.
    let with = |vars: &[(&str, &str)]| {
        Modes::from_lookup(|n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| (*v).to_owned())
        })
    };
    let m = with(&[
        ("ROCPROF_REPLAY_CUPTI_RANGE", "auto"),
        ("ROCPROF_REPLAY_CUPTI_API", "legacy"),
        ("ROCPROF_REPLAY_CUPTI_RUN", "4"),
    ]);
    assert!(m.legacy && !m.user_range && m.ranges == 4, "{m:?}");
    let m = with(&[
        ("ROCPROF_REPLAY_CUPTI_RANGE", "auto"),
        ("ROCPROF_REPLAY_CUPTI_RUN", "8"),
    ]);
    assert!(m.legacy && !m.user_range && m.ranges == 8, "{m:?}");
    let m = with(&[
        ("ROCPROF_REPLAY_CUPTI_RANGE", "auto"),
        ("ROCPROF_REPLAY_CUPTI_API", "range"),
        ("ROCPROF_REPLAY_CUPTI_RUN", "2"),
    ]);
    assert!(!m.legacy && !m.user_range && m.ranges == 1, "{m:?}");
}

#[test]
fn the_legacy_auto_range_enables_profiling_around_each_launch_and_nothing_else() {
    let _g = reset(2);
    fake().ranges_per_pass = 4;
    let modes = Modes {
        user_range: false,
        ..legacy_modes(4)
    };
    fake().image_ranges = modes.image_ranges(4) as usize;
    let (p, seen) = profiler(fake_symbols(), modes);
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    take_log();
    for window in 0..2 {
        let mut s = p.prepare(CTX, 0, &set, 4).unwrap();
        let values = run_legacy(&mut s, 2, 4);
        // Each launch its own range, after the earlier window's four.
        for (r, v) in values.into_iter().enumerate() {
            assert_eq!(
                floats(v),
                range_values(window * 4 + r),
                "window {window} launch {r}"
            );
        }
    }
    let log = take_log();
    assert_eq!(
        count(&log, "PushRange") + count(&log, "PopRange"),
        0,
        "{log:?}"
    );
    assert_eq!(count(&log, "BeginSession"), 1, "kept across windows");
    // Per pass: BeginPass, then per launch EnableProfiling, the launch, DisableProfiling (the
    // backend's kernel between two launches outside), EndPass.
    let pass: Vec<&str> = log
        .iter()
        .skip_while(|l| *l != "BeginPass")
        .take_while(|l| *l != "EndPass")
        .map(String::as_str)
        .collect();
    let launch = ["EnableProfiling", "kernel", "DisableProfiling"];
    let want: Vec<&str> = [
        &["BeginPass"][..],
        &launch,
        &["kernel"],
        &launch,
        &["kernel"],
        &launch,
        &["kernel"],
        &launch,
    ]
    .concat();
    assert_eq!(pass, want);
    let f = fake();
    assert_eq!(f.range, CUPTI_AutoRange, "the session's range mode");
    assert_eq!(f.kernels_per_range, vec![1; 16], "one launch per range");
    assert!(f.bad.is_empty(), "{:?}", f.bad);
}

/// Range `r` of a window: the fake's values for image range `index`.
fn range_values(index: usize) -> Vec<f64> {
    NAMES
        .iter()
        .map(|n| n.len() as f64 + 0.25 + 1000.0 * index as f64)
        .collect()
}

/// A profiler measuring four launches per pass through the legacy API with the context's
/// session kept across windows (the default), and device 0's catalog.
fn kept_sessions() -> (Arc<Profiler>, CounterCatalog) {
    fake().ranges_per_pass = 4;
    let modes = legacy_modes(4);
    fake().image_ranges = modes.image_ranges(4) as usize;
    let (p, seen) = profiler(fake_symbols(), modes);
    let c = catalog(&p, &seen);
    (p, c)
}

fn floats(v: Result<Vec<u64>, String>) -> Vec<f64> {
    v.unwrap().into_iter().map(f64::from_bits).collect()
}

#[test]
fn a_kept_legacy_session_serves_window_after_window_until_its_image_is_full() {
    let _g = reset(1);
    fake().ranges_per_pass = 4;
    let modes = legacy_modes(4);
    let per_session = (modes.image_ranges(4) / 4) as usize;
    assert_eq!(per_session, 64, "the image holds 64 windows of 4 launches");
    fake().image_ranges = modes.image_ranges(4) as usize;
    let (p, seen) = profiler(fake_symbols(), modes);
    let c = catalog(&p, &seen);
    let set = MetricSet::new(&c, NAMES).unwrap();
    take_log();
    for window in 0..per_session + 1 {
        let mut s = p.prepare(CTX, 0, &set, 4).unwrap();
        let values = run_legacy(&mut s, 1, 4);
        // Each window's launches are its own ranges of the session's image, past the ranges
        // of the windows before it (the first window of a new session starts at 0 again).
        let first = (window % per_session) * 4;
        for (r, v) in values.into_iter().enumerate() {
            assert_eq!(
                floats(v),
                range_values(first + r),
                "window {window} launch {r}"
            );
        }
        drop(s);
    }
    let log = take_log();
    assert_eq!(
        (
            count(&log, "BeginSession"),
            count(&log, "EndSession"),
            count(&log, "SetConfig"),
            count(&log, "UnsetConfig"),
        ),
        (2, 1, per_session + 1, per_session + 1),
        "a session for 64 windows, then a new one"
    );
    // The image is built once; the scratch buffer once per session.
    assert_eq!(count(&log, "CounterDataImageInitialize"), 1);
    assert_eq!(count(&log, "InitializeScratchBuffer"), 2);
    let f = fake();
    assert!(f.bad.is_empty(), "{:?}", f.bad);
    assert_eq!(f.sessions_begun, 2);
}

#[test]
fn a_new_metric_set_on_a_context_with_a_kept_session_ends_it_first() {
    let _g = reset(1);
    let (p, c) = kept_sessions();
    let first = MetricSet::new(&c, NAMES).unwrap();
    let second = MetricSet::new(&c, &NAMES[..2]).unwrap();
    let mut s = p.prepare(CTX, 0, &first, 4).unwrap();
    assert!(run_legacy(&mut s, 1, 4).into_iter().all(|v| v.is_ok()));
    drop(s);
    take_log();
    // The second set's image is built by the range profiler, outside any session (the fake
    // flags a range profiler enabled inside one), and its windows get a session of their own.
    let mut s = p.prepare(CTX, 0, &second, 4).unwrap();
    let values = run_legacy(&mut s, 1, 4);
    assert!(values.iter().all(Result::is_ok), "{values:?}");
    let log = take_log();
    let at = |name: &str| log.iter().position(|l| l == name).unwrap();
    assert!(at("EndSession") < at("Enable"), "{log:?}");
    assert!(at("Disable") < at("BeginSession"), "{log:?}");
    // A window of the first set again: the second set's session does not fit it.
    let mut s = p.prepare(CTX, 0, &first, 4).unwrap();
    let values = run_legacy(&mut s, 1, 4);
    assert_eq!(floats(values[3].clone()), range_values(3), "a new session");
    let log = take_log();
    assert_eq!(
        (count(&log, "EndSession"), count(&log, "BeginSession")),
        (1, 1),
        "{log:?}"
    );
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn a_kept_legacy_session_ends_with_its_context_or_the_backend() {
    let _g = reset(1);
    let (p, c) = kept_sessions();
    let set = MetricSet::new(&c, NAMES).unwrap();
    let window = || {
        let mut s = p.prepare(CTX, 0, &set, 4).unwrap();
        assert!(run_legacy(&mut s, 1, 4).into_iter().all(|v| v.is_ok()));
    };
    window();
    take_log();
    p.forget_context(CTX);
    assert_eq!(
        take_log(),
        ["EndSession"],
        "the destroyed context's session"
    );
    window();
    assert_eq!(count(&take_log(), "BeginSession"), 1, "a new session");
    p.end_sessions();
    assert_eq!(take_log(), ["EndSession"], "as the backend stops");
    p.end_sessions();
    assert!(take_log().is_empty(), "nothing left open");
    assert!(fake().bad.is_empty(), "{:?}", fake().bad);
}

#[test]
fn the_session_setting_chooses_per_window_or_windows_per_kept_session() {
    let ranges_for = |session: &str, run: &str| {
        let m = Modes::from_lookup(|n| match n {
            "ROCPROF_REPLAY_CUPTI_SESSION" => Some(session.to_owned()),
            "ROCPROF_REPLAY_CUPTI_RUN" => Some(run.to_owned()),
            _ => None,
        });
        (m.keep_session, m.image_ranges(m.ranges))
    };
    // Kept (the default): 256 ranges in whole windows.
    assert_eq!(ranges_for("", "8"), (true, 256));
    assert_eq!(ranges_for("context", "12"), (true, 252));
    assert_eq!(ranges_for("", "64"), (true, 256));
    // A number of windows per session.
    assert_eq!(ranges_for("8", "8"), (true, 64));
    assert_eq!(ranges_for("1", "4"), (true, 4));
    // A session per window: one window's ranges.
    assert_eq!(ranges_for("window", "8"), (false, 8));
    // Not a setting: the default, said in a warning.
    assert_eq!(ranges_for("0", "8"), (true, 256));
    assert_eq!(ranges_for("lots", "8"), (true, 256));
    assert_eq!(ranges_for("8", "2"), (true, 16));
}
