//! Hardware counters on NVIDIA: CUPTI's Profiling API (the profiler host API, and for the
//! passes the legacy Profiler API or the range profiler of CUDA 12.6+) in *user replay*. The
//! engine replays the launch and restores memory between passes; CUPTI configures each pass
//! and collects.
//!
//! **The default** ([`Modes::from_lookup`]): the legacy Profiler API with CUPTI's auto range,
//! profiling enabled right before each launch a counter pass measures and disabled right after
//! it, so that each range holds that kernel alone (elapsed-time metrics agree with Nsight
//! Compute's: `docs/performance.md`, "Elapsed-time metrics: the legacy API's auto range"), one
//! session kept per context. The range profiler and user ranges below are what
//! `ROCPROF_REPLAY_CUPTI_API=range` and `ROCPROF_REPLAY_CUPTI_RANGE=user` ask for, and the
//! fallback of a CUPTI without the legacy API.
//!
//! # What happens when
//! - **Install** ([`install`]): the Profiling API functions are looked up in the `libcupti` the
//!   backend already loaded, each optional ([`Symbols`]); an older CUPTI without them leaves
//!   every device without counters, with the name of the first missing function.
//! - **Device discovery** ([`discover`], on the companion thread, before the first window of a
//!   device): `cuptiProfilerInitialize` (once), `cuptiDeviceGetChipName`, a host object for the
//!   chip, and the chip's base metrics (`cuptiProfilerHostGetBaseMetrics` for counters, ratios
//!   and throughputs; at most [`MAX_CATALOG`]) become a [`CounterCatalog`] scheduled by the
//!   chip ([`PassScheduler`]), handed to the policy's `on_agent`.
//! - **Metric set** (the policy's `MetricSet::new` on that catalog): the chip builds the set's
//!   configuration image once (a fresh host object, `ConfigAddMetrics`, `GetConfigImage`) and
//!   asks `GetNumOfPasses`; the image is cached per (chip, metric names) and every later
//!   dispatch of the set reuses it.
//! - **Per dispatch** ([`Profiler::prepare`], before the window takes the context): the
//!   context's range profiler (`cuptiRangeProfilerEnable`, once per context, kept until the
//!   context is destroyed) and a counter data image for one range, or K for a counter run
//!   (`GetCounterDataSize`, `CounterDataImageInitialize`).
//! - **Per counter pass** ([`Session::arm`]): before counter pass 0, `SetConfig` (user range,
//!   user replay, one range per pass, pass index 0); before every counter pass `Start` and
//!   `PushRange`, after it `PopRange`, `Stop` (which says whether CUPTI has every pass it
//!   needs) and `DecodeData` — the sequence of NVIDIA's nvbench (`cupti_profiler.cxx`).
//! - **After the last counter pass** ([`Session::values_of`]): `GetCounterDataInfo` (one range)
//!   and `cuptiProfilerHostEvaluateToGpuValues`: one `f64` per metric, in set order.
//!
//! # One range per pass
//! The window holds the context (its writer lock) and has drained it, so between `Start` and
//! `Stop` exactly one kernel runs in the context: the pass's own relaunch on the backend's
//! private stream. A user range pushed before it and popped after it (the default) holds
//! that launch and nothing else. CUPTI's auto range (one range around each kernel launched
//! in the context, `ROCPROF_REPLAY_CUPTI_RANGE=auto`) would measure the same launch without
//! the push/pop; user range with user replay is the combination NVIDIA's own nvbench uses,
//! so it is the default.
//!
//! # Several launches per pass (counter runs)
//! With [`Modes::ranges`] = K > 1 (`ROCPROF_REPLAY_CUPTI_RUN`) a window that may take later
//! launches into its run builds its session for K ranges, and each member's launch gets a
//! user range of its own in every counter pass ([`Session::push_range`],
//! [`Session::pop_range`]; names `rocprof-replay dispatch {i}`, the same in every pass), its
//! values that range's ([`Session::values_of`]). CUDA 13.0's range profiler keeps two user
//! ranges per pass whatever it is configured for: a launch whose range was not kept gets an
//! error naming how many were.
//!
//! # The legacy Profiler API (the default)
//! A session goes through the legacy Profiler API of `cupti_profiler_target.h` unless
//! `ROCPROF_REPLAY_CUPTI_API=range`; it keeps every range of a pass (the range profiler keeps
//! [`RANGE_PROFILER_RANGES`]). With user ranges (`ROCPROF_REPLAY_CUPTI_RANGE=user`; with the
//! auto range, the default, `EnableProfiling`/`DisableProfiling` around each launch take the
//! place of the push and pop): `BeginSession` (user range, user replay, K ranges) and
//! `SetConfig` before counter pass 0; per pass `BeginPass`, `EnableProfiling`, a
//! `PushRange`/`PopRange` per launch, `DisableProfiling`, `EndPass`; after the last
//! `FlushCounterData`, `UnsetConfig`, `EndSession`. Its counter data image comes from the
//! range profiler (enabled on the context only to build it, once per set and K:
//! [`Profiler::legacy_image`]) and is evaluated as the range profiler's is. A CUPTI without the
//! legacy API keeps the range profiler and at most two launches per pass (a warning says so).
//! By default one session serves the context's windows one after another
//! ([`ContextSession`], [`Modes::keep_session`]): `BeginSession` once per [`SESSION_RANGES`]
//! ranges, each window configured in it, its ranges named uniquely and evaluated past the
//! earlier windows'.
//!
//! # Decoding
//! `DecodeData` runs after every counter pass (it must follow a `Stop`). With
//! `ROCPROF_REPLAY_CUPTI_DECODE=last` it runs once, after the last pass, as CUPTI's own
//! user-replay sample does: the fallback if a CUPTI version refuses to decode a partial
//! replay.
//!
//! # The application's own profiler
//! A context's range profiler has one owner. When the application (or another tool) already
//! enabled it, `cuptiRangeProfilerEnable` fails and dispatches on that context get
//! `counters_unavailable: ... already in use ...`; the application is not touched. The
//! other way round, an application that enables the range profiler on a context after this
//! tool collected counters there gets CUPTI's error.
//!
//! Every CUPTI status becomes a `String` reason ([`super::api::result_string`]); nothing here
//! panics across the FFI boundary (the window runs under `catch_unwind`).

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rocprof_replay_sys::cuda::{CUPTI_SUCCESS, CUcontext, CUptiResult, cuptiGetResultString_fn};
use rocprof_replay_sys::cupti_profiler::*;

use super::api;
use crate::counters::{CounterCatalog, MetricSet, PassScheduler};

/// Base metrics a catalog lists at most (GH100 has a few thousand).
pub(crate) const MAX_CATALOG: usize = 20_000;

/// Most launches one counter pass may measure (`ROCPROF_REPLAY_CUPTI_RUN`).
pub(crate) const MAX_RANGES: u32 = 64;

/// The name of the user range of the `range`th launch of a counter pass: the same in every
/// pass (CUPTI matches a range's passes by name), distinct within one.
fn range_name(range: u32) -> CString {
    CString::new(format!("rocprof-replay dispatch {range}")).unwrap_or_default()
}

/// Why there are no counters when CUPTI's profiler was never set up (no CUDA backend).
pub(crate) const NOT_LOADED: &str = "CUPTI's Profiling API was not loaded";

macro_rules! symbols {
    ($($field:ident: $ty:ty = $name:literal,)*) => {
        /// The Profiling API functions as found in CUPTI (`None`: this CUPTI lacks it).
        #[derive(Clone, Copy, Default)]
        pub(crate) struct Symbols {
            pub(crate) get_result_string: Option<cuptiGetResultString_fn>,
            /// The legacy Profiler API, whole or not at all.
            pub(crate) legacy: Option<LegacyFns>,
            $(pub(crate) $field: Option<$ty>,)*
        }

        /// Every function the counter source calls.
        #[derive(Clone, Copy)]
        pub(crate) struct Fns {
            pub(crate) get_result_string: cuptiGetResultString_fn,
            /// The legacy Profiler API (`None`: this CUPTI no longer has it).
            pub(crate) legacy: Option<LegacyFns>,
            $(pub(crate) $field: $ty,)*
        }

        impl Symbols {
            /// Looks every function up in `lib`.
            fn from_library(lib: &libloading::Library) -> Symbols {
                Symbols {
                    // SAFETY: the signature of cupti_result.h.
                    get_result_string: unsafe { lib.get(b"cuptiGetResultString\0") }.ok().map(|s| *s),
                    legacy: LegacyFns::from_library(lib),
                    $(
                        // SAFETY: the signature of the CUPTI 12.6+ headers (layouts checked by
                        // rocprof-replay-sys's cupti_profiler_layout test).
                        $field: unsafe { lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s| *s),
                    )*
                }
            }

            /// All of them, or the name of the first one missing.
            pub(crate) fn resolve(&self) -> Result<Fns, String> {
                let missing = |name: &str| {
                    format!(
                        "this CUPTI has no {name} (CUPTI's range profiler and profiler host \
                         API need CUDA 12.6 or later)"
                    )
                };
                Ok(Fns {
                    get_result_string: self
                        .get_result_string
                        .ok_or_else(|| missing("cuptiGetResultString"))?,
                    legacy: self.legacy,
                    $($field: self.$field.ok_or_else(|| missing($name))?,)*
                })
            }
        }
    };
}

symbols! {
    initialize: cuptiProfilerInitialize_fn = "cuptiProfilerInitialize",
    chip_name: cuptiDeviceGetChipName_fn = "cuptiDeviceGetChipName",
    host_initialize: cuptiProfilerHostInitialize_fn = "cuptiProfilerHostInitialize",
    host_deinitialize: cuptiProfilerHostDeinitialize_fn = "cuptiProfilerHostDeinitialize",
    host_base_metrics: cuptiProfilerHostGetBaseMetrics_fn = "cuptiProfilerHostGetBaseMetrics",
    host_add_metrics: cuptiProfilerHostConfigAddMetrics_fn = "cuptiProfilerHostConfigAddMetrics",
    host_config_size: cuptiProfilerHostGetConfigImageSize_fn = "cuptiProfilerHostGetConfigImageSize",
    host_config_image: cuptiProfilerHostGetConfigImage_fn = "cuptiProfilerHostGetConfigImage",
    host_passes: cuptiProfilerHostGetNumOfPasses_fn = "cuptiProfilerHostGetNumOfPasses",
    host_evaluate: cuptiProfilerHostEvaluateToGpuValues_fn = "cuptiProfilerHostEvaluateToGpuValues",
    enable: cuptiRangeProfilerEnable_fn = "cuptiRangeProfilerEnable",
    disable: cuptiRangeProfilerDisable_fn = "cuptiRangeProfilerDisable",
    set_config: cuptiRangeProfilerSetConfig_fn = "cuptiRangeProfilerSetConfig",
    start: cuptiRangeProfilerStart_fn = "cuptiRangeProfilerStart",
    stop: cuptiRangeProfilerStop_fn = "cuptiRangeProfilerStop",
    push_range: cuptiRangeProfilerPushRange_fn = "cuptiRangeProfilerPushRange",
    pop_range: cuptiRangeProfilerPopRange_fn = "cuptiRangeProfilerPopRange",
    decode: cuptiRangeProfilerDecodeData_fn = "cuptiRangeProfilerDecodeData",
    data_size: cuptiRangeProfilerGetCounterDataSize_fn = "cuptiRangeProfilerGetCounterDataSize",
    data_initialize: cuptiRangeProfilerCounterDataImageInitialize_fn = "cuptiRangeProfilerCounterDataImageInitialize",
    data_info: cuptiRangeProfilerGetCounterDataInfo_fn = "cuptiRangeProfilerGetCounterDataInfo",
}

/// The legacy Profiler API of `cupti_profiler_target.h` (deprecated since CUDA 13.0, still
/// shipped): sessions, passes and user ranges on a context. Used where one counter pass
/// measures more launches than the range profiler keeps ranges ([`Modes::legacy`]).
#[derive(Clone, Copy)]
pub(crate) struct LegacyFns {
    pub(crate) scratch_size: cuptiProfilerCounterDataImageCalculateScratchBufferSize_fn,
    pub(crate) scratch_initialize: cuptiProfilerCounterDataImageInitializeScratchBuffer_fn,
    pub(crate) begin_session: cuptiProfilerBeginSession_fn,
    pub(crate) end_session: cuptiProfiler_context_fn,
    pub(crate) set_config: cuptiProfilerSetConfig_fn,
    pub(crate) unset_config: cuptiProfiler_context_fn,
    pub(crate) begin_pass: cuptiProfiler_context_fn,
    pub(crate) end_pass: cuptiProfilerEndPass_fn,
    pub(crate) enable: cuptiProfiler_context_fn,
    pub(crate) disable: cuptiProfiler_context_fn,
    pub(crate) push_range: cuptiProfilerPushRange_fn,
    pub(crate) pop_range: cuptiProfiler_context_fn,
    pub(crate) flush: cuptiProfilerFlushCounterData_fn,
}

impl LegacyFns {
    /// Every function of the legacy API in `lib`, or `None` if one is missing.
    fn from_library(lib: &libloading::Library) -> Option<LegacyFns> {
        macro_rules! get {
            ($name:literal) => {
                // SAFETY: the signature of cupti_profiler_target.h (layouts checked by
                // rocprof-replay-sys's cupti_profiler_layout test).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.ok()?
            };
        }
        Some(LegacyFns {
            scratch_size: get!("cuptiProfilerCounterDataImageCalculateScratchBufferSize"),
            scratch_initialize: get!("cuptiProfilerCounterDataImageInitializeScratchBuffer"),
            begin_session: get!("cuptiProfilerBeginSession"),
            end_session: get!("cuptiProfilerEndSession"),
            set_config: get!("cuptiProfilerSetConfig"),
            unset_config: get!("cuptiProfilerUnsetConfig"),
            begin_pass: get!("cuptiProfilerBeginPass"),
            end_pass: get!("cuptiProfilerEndPass"),
            enable: get!("cuptiProfilerEnableProfiling"),
            disable: get!("cuptiProfilerDisableProfiling"),
            push_range: get!("cuptiProfilerPushRange"),
            pop_range: get!("cuptiProfilerPopRange"),
            flush: get!("cuptiProfilerFlushCounterData"),
        })
    }
}

impl Symbols {
    /// The functions of the CUPTI the backend uses (the same candidates as
    /// [`api::load_cupti`], so the same library: dlopen hands back the loaded copy).
    pub(crate) fn load() -> Result<Symbols, String> {
        let lib = api::open("CUPTI (libcupti.so)", &api::cupti_candidates())
            .map_err(|e| e.to_string())?;
        let symbols = Symbols::from_library(&lib);
        // CUPTI stays loaded for the process's lifetime, as in `load_cupti`.
        std::mem::forget(lib);
        Ok(symbols)
    }
}

impl Fns {
    /// `"{call} failed: {status text}"`.
    fn failed(&self, call: &str, status: CUptiResult) -> String {
        format!(
            "{call} failed: {}",
            api::result_string(self.get_result_string, status)
        )
    }

    /// Calls `f` with `params` (its `structSize` set by the caller); `Err` names `call`.
    fn call<P>(
        &self,
        call: &str,
        f: cupti_params_fn<P>,
        params: &mut P,
    ) -> Result<(), (CUptiResult, String)> {
        // SAFETY: `f` is the CUPTI function of this parameter block (or a test's fake), and
        // `params` a live, initialised block whose `structSize` covers what it reads.
        let status = unsafe { f(params) };
        if status == CUPTI_SUCCESS {
            Ok(())
        } else {
            Err((status, self.failed(call, status)))
        }
    }
}

/// Whether `status`, from enabling a context's profiler, means someone else owns it.
fn already_owned(status: CUptiResult) -> bool {
    matches!(
        status,
        CUPTI_ERROR_NOT_COMPATIBLE
            | CUPTI_ERROR_INVALID_OPERATION
            | CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED
    )
}

/// Explains a failure to enable a context's profiler.
fn enable_reason(status: CUptiResult, message: String) -> String {
    if already_owned(status) {
        format!(
            "CUPTI's profiler on this context is already in use (by the application or another \
             tool; the tool and the application cannot both own it): {message}; the \
             application is unaffected"
        )
    } else if status == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES {
        format!(
            "the GPU's performance counters are restricted to administrators \
             (NVreg_RestrictProfilingToAdminUsers): {message}"
        )
    } else {
        message
    }
}

/// A host object (`CUpti_Profiler_Host_Object*`), deinitialised when dropped.
struct HostObject {
    fns: Fns,
    ptr: *mut CUpti_Profiler_Host_Object,
}

// SAFETY: CUPTI's host objects are plain host-side state; every use goes through a `Mutex`.
unsafe impl Send for HostObject {}

impl HostObject {
    fn new(fns: Fns, chip: &CStr) -> Result<HostObject, String> {
        let mut p = CUpti_Profiler_Host_Initialize_Params {
            structSize: CUpti_Profiler_Host_Initialize_Params_SIZE_12_6,
            profilerType: CUPTI_PROFILER_TYPE_RANGE_PROFILER,
            pChipName: chip.as_ptr(),
            ..Default::default()
        };
        fns.call("cuptiProfilerHostInitialize", fns.host_initialize, &mut p)
            .map_err(|(_, m)| m)?;
        if p.pHostObject.is_null() {
            return Err("cuptiProfilerHostInitialize returned no host object".into());
        }
        Ok(HostObject {
            fns,
            ptr: p.pHostObject,
        })
    }
}

impl Drop for HostObject {
    fn drop(&mut self) {
        let mut p = CUpti_Profiler_Host_Deinitialize_Params {
            structSize: CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
            pHostObject: self.ptr,
            ..Default::default()
        };
        if let Err((_, m)) = self.fns.call(
            "cuptiProfilerHostDeinitialize",
            self.fns.host_deinitialize,
            &mut p,
        ) {
            tracing::debug!("{m}");
        }
    }
}

/// One metric set's configuration on one chip, built once.
pub(crate) struct Config {
    host: Mutex<HostObject>,
    image: Vec<u8>,
    passes: u32,
    names: Vec<CString>,
}

impl Config {
    /// Pointers to the metric names (valid while `self` lives).
    fn name_ptrs(&self) -> Vec<*const c_char> {
        self.names.iter().map(|n| n.as_ptr()).collect()
    }
}

/// One GPU model as CUPTI names it (`GH100`), with its cached configurations.
pub(crate) struct Chip {
    fns: Fns,
    name: CString,
    configs: Mutex<HashMap<Vec<String>, Arc<Config>>>,
}

impl std::fmt::Debug for Chip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chip")
            .field("name", &self.name)
            .field("configs", &self.configs.lock().len())
            .finish()
    }
}

/// A chip as a [`PassScheduler`]: the passes of a set are those of its configuration image.
#[derive(Debug)]
struct ChipScheduler(Arc<Chip>);

impl PassScheduler for ChipScheduler {
    fn passes(&self, names: &[&str]) -> Result<u32, String> {
        self.0.config(names).map(|c| c.passes)
    }
}

impl Chip {
    /// The chip's name, as CUPTI gives it.
    pub(crate) fn name(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }

    /// The configuration of `names` (in this order), built on first use and cached.
    pub(crate) fn config(&self, names: &[&str]) -> Result<Arc<Config>, String> {
        let key: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut configs = self.configs.lock();
        if let Some(c) = configs.get(&key) {
            return Ok(c.clone());
        }
        let config = Arc::new(self.build(&key)?);
        configs.insert(key, config.clone());
        Ok(config)
    }

    fn build(&self, names: &[String]) -> Result<Config, String> {
        let f = &self.fns;
        let names: Vec<CString> = names
            .iter()
            .map(|n| CString::new(n.as_str()).map_err(|_| format!("metric `{n}` holds a NUL")))
            .collect::<Result<_, _>>()?;
        let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        // A fresh host object: metrics added to one stay in its configuration.
        let host = HostObject::new(*f, &self.name)?;
        let mut add = CUpti_Profiler_Host_ConfigAddMetrics_Params {
            structSize: CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE,
            pHostObject: host.ptr,
            ppMetricNames: ptrs.as_mut_ptr(),
            numMetrics: ptrs.len(),
            ..Default::default()
        };
        f.call(
            "cuptiProfilerHostConfigAddMetrics",
            f.host_add_metrics,
            &mut add,
        )
        .map_err(|(_, m)| format!("{m} (a metric or sub-metric the chip lacks?)"))?;
        let mut size = CUpti_Profiler_Host_GetConfigImageSize_Params {
            structSize: CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE,
            pHostObject: host.ptr,
            ..Default::default()
        };
        f.call(
            "cuptiProfilerHostGetConfigImageSize",
            f.host_config_size,
            &mut size,
        )
        .map_err(|(_, m)| m)?;
        let mut image = vec![0u8; size.configImageSize];
        let mut get = CUpti_Profiler_Host_GetConfigImage_Params {
            structSize: CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE,
            pHostObject: host.ptr,
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
            ..Default::default()
        };
        f.call(
            "cuptiProfilerHostGetConfigImage",
            f.host_config_image,
            &mut get,
        )
        .map_err(|(_, m)| m)?;
        let mut passes = CUpti_Profiler_Host_GetNumOfPasses_Params {
            structSize: CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE,
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
            ..Default::default()
        };
        f.call(
            "cuptiProfilerHostGetNumOfPasses",
            f.host_passes,
            &mut passes,
        )
        .map_err(|(_, m)| m)?;
        let count = u32::try_from(passes.numOfPasses.max(1))
            .map_err(|_| format!("CUPTI says the set needs {} passes", passes.numOfPasses))?;
        tracing::debug!(chip = %self.name(), metrics = names.len(), passes = count, "CUPTI configuration image built");
        Ok(Config {
            host: Mutex::new(host),
            image,
            passes: count,
            names,
        })
    }

    /// The chip's base metrics (counters, ratios, throughputs) as a catalog named after the
    /// chip, scheduled by it.
    fn catalog(self: &Arc<Chip>) -> Result<CounterCatalog, String> {
        let f = &self.fns;
        let host = HostObject::new(*f, &self.name)?;
        let mut catalog = CounterCatalog::new(self.name());
        let mut listed = 0usize;
        for (kind, label) in [
            (CUPTI_METRIC_TYPE_COUNTER, "counter"),
            (CUPTI_METRIC_TYPE_RATIO, "ratio"),
            (CUPTI_METRIC_TYPE_THROUGHPUT, "throughput"),
        ] {
            let mut p = CUpti_Profiler_Host_GetBaseMetrics_Params {
                structSize: CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE,
                pHostObject: host.ptr,
                metricType: kind,
                ..Default::default()
            };
            f.call(
                "cuptiProfilerHostGetBaseMetrics",
                f.host_base_metrics,
                &mut p,
            )
            .map_err(|(_, m)| m)?;
            if p.ppMetricNames.is_null() {
                continue;
            }
            for i in 0..p.numMetrics.min(MAX_CATALOG - listed) {
                // SAFETY: CUPTI's array of `numMetrics` names, valid while the host object
                // lives; each copied now.
                let name = unsafe { *p.ppMetricNames.add(i) };
                if name.is_null() {
                    continue;
                }
                // SAFETY: a NUL-terminated name of CUPTI's.
                let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
                catalog = catalog.counter(name.as_ref(), label, listed as u32);
                listed += 1;
            }
        }
        drop(host);
        if listed == 0 {
            return Err(format!("CUPTI lists no metrics for chip {}", self.name()));
        }
        // Nsight Compute's launch metrics, computed by the backend (no counter pass).
        Ok(super::launch_metrics::offer(catalog)
            .scheduled_by(Arc::new(ChipScheduler(self.clone()))))
    }
}

/// Hands the policy a device's catalog (the engine's `on_agent`).
pub(crate) type OnAgent = Box<dyn Fn(u32, Result<&CounterCatalog, &str>) + Send + Sync>;

/// A context's range profiler object, or why it has none.
type ContextProfiler = Result<usize, String>;

/// How counter passes are delimited and decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Modes {
    /// Decode after every counter pass (else only after the last).
    pub(crate) decode_each: bool,
    /// One user range (push/pop) around each launch a counter pass measures (the range
    /// profiler's default, `ROCPROF_REPLAY_CUPTI_RANGE=user`), or CUPTI's auto range (the
    /// legacy API's default, `ROCPROF_REPLAY_CUPTI_RANGE=auto`): with the range profiler a range
    /// of every launch between `Start` and `Stop` (one launch per pass), with the legacy API a
    /// range of each launch between `EnableProfiling` and `DisableProfiling`, which the session
    /// calls around each launch it measures (the backend's own launches stay outside). An auto
    /// range holds the kernel alone; a user range also counts the host time between its push
    /// and its pop (`docs/performance.md`), which elapsed-time metrics show.
    pub(crate) user_range: bool,
    /// Have CUPTI reset the caches before each pass (CUDA 13.4+; as Nsight Compute's
    /// `--cache-control all`, its default).
    pub(crate) flush_caches: bool,
    /// Flush the L2 ourselves before each counter pass (the window reads a scratch of twice
    /// its size, `cuda::window::l2`).
    pub(crate) flush_l2: bool,
    /// Launches one counter pass may measure, each in a user range of its own
    /// (`ROCPROF_REPLAY_CUPTI_RUN`, default 1): above 1, a window that collects counters
    /// takes the launches that follow on its stream into its run
    /// (`docs/architecture.md`, "Counter passes over a run").
    pub(crate) ranges: u32,
    /// Counter passes through the legacy Profiler API (the default) rather than the range
    /// profiler (`ROCPROF_REPLAY_CUPTI_API=range`, or a CUPTI without the legacy API), which
    /// keeps [`RANGE_PROFILER_RANGES`] ranges per pass and has no auto range in user replay.
    pub(crate) legacy: bool,
    /// Keep one legacy Profiler API session per context across windows
    /// (`ROCPROF_REPLAY_CUPTI_SESSION=context`, the default; `window`: a session per window).
    /// `BeginSession` costs 64–124 ms on an H100, more than the 12 counter passes of the
    /// 29-metric set over 8 launches cost per launch (`docs/performance.md`).
    pub(crate) keep_session: bool,
    /// Windows one kept session serves (`ROCPROF_REPLAY_CUPTI_SESSION=N`; `None`: as many as
    /// fit [`SESSION_RANGES`] ranges).
    pub(crate) session_windows: Option<u32>,
}

/// The user ranges per pass CUDA 13.0's range profiler keeps, whatever it is configured for
/// (`docs/performance.md`, "CUPTI's cost per counter pass, by API shape").
pub(crate) const RANGE_PROFILER_RANGES: u32 = 2;

/// The range profiler with user ranges, one launch per pass: what the unit tests start from
/// (the process's modes come from [`Modes::from_lookup`], by default the legacy API's auto
/// range).
impl Default for Modes {
    fn default() -> Modes {
        Modes {
            decode_each: true,
            user_range: true,
            flush_caches: false,
            flush_l2: true,
            ranges: 1,
            legacy: false,
            keep_session: true,
            session_windows: None,
        }
    }
}

impl Modes {
    /// `ROCPROF_REPLAY_CUPTI_DECODE=last`, `ROCPROF_REPLAY_CUPTI_RANGE=auto`,
    /// `ROCPROF_REPLAY_CUPTI_CACHE=l2` (the default: our L2 flush), `all` (and CUPTI's cache
    /// control) or `none` (neither), `ROCPROF_REPLAY_CUPTI_RUN=K`.
    fn from_env() -> Modes {
        Modes::from_lookup(|name| std::env::var(name).ok())
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Modes {
        let var = |name| get(name).unwrap_or_default();
        let cache = var("ROCPROF_REPLAY_CUPTI_CACHE");
        let run = var("ROCPROF_REPLAY_CUPTI_RUN");
        let ranges = match run.trim() {
            "" => 1,
            raw => match raw.parse::<u32>() {
                Ok(n) => n.clamp(1, MAX_RANGES),
                Err(_) => {
                    tracing::warn!(
                        "ROCPROF_REPLAY_CUPTI_RUN={raw:?} is not a number of launches; using 1"
                    );
                    1
                }
            },
        };
        // The legacy API by default: its auto range brackets each kernel alone, so elapsed-time
        // metrics agree with Nsight Compute's (docs/performance.md), and it keeps every range
        // of a run. A CUPTI without it falls back to the range profiler (`Profiler::new`).
        let legacy = match var("ROCPROF_REPLAY_CUPTI_API").trim() {
            "legacy" | "" => true,
            "range" => false,
            other => {
                tracing::warn!(
                    "ROCPROF_REPLAY_CUPTI_API={other:?} is neither `range` nor `legacy`; the \
                     legacy Profiler API"
                );
                true
            }
        };
        // The auto range where the legacy API delimits it around each launch; the range
        // profiler's auto range refuses user replay, so it keeps user ranges by default.
        let user_range = match var("ROCPROF_REPLAY_CUPTI_RANGE").trim() {
            "user" => true,
            "auto" => false,
            "" => !legacy,
            other => {
                tracing::warn!(
                    "ROCPROF_REPLAY_CUPTI_RANGE={other:?} is neither `auto` nor `user`; the \
                     default"
                );
                !legacy
            }
        };
        // The legacy API's auto range is delimited by enabling profiling around each launch
        // measured (the backend's own launches stay outside); the range profiler's makes a
        // range of every launch between Start and Stop, the backend's own included.
        if ranges > 1 && !user_range && !legacy {
            tracing::warn!(
                "ROCPROF_REPLAY_CUPTI_RUN with the range profiler needs user ranges \
                 (ROCPROF_REPLAY_CUPTI_RANGE=auto makes a range of every launch, the backend's \
                 own included): one launch per counter pass"
            );
        }
        let ranges = if user_range || legacy { ranges } else { 1 };
        let session = var("ROCPROF_REPLAY_CUPTI_SESSION");
        let (keep_session, session_windows) = match session.trim() {
            "" | "context" => (true, None),
            "window" => (false, None),
            other => match other.parse::<u32>() {
                Ok(n) if (1..=MAX_SESSION_WINDOWS).contains(&n) => (true, Some(n)),
                _ => {
                    tracing::warn!(
                        "ROCPROF_REPLAY_CUPTI_SESSION={other:?} is neither `context`, `window` \
                         nor a number of windows per session (1 to {MAX_SESSION_WINDOWS}); one \
                         session per context"
                    );
                    (true, None)
                }
            },
        };
        Modes {
            decode_each: var("ROCPROF_REPLAY_CUPTI_DECODE") != "last",
            user_range,
            flush_caches: cache.trim() == "all",
            flush_l2: cache.trim() != "none",
            ranges,
            legacy,
            keep_session,
            session_windows,
        }
    }

    /// The ranges a legacy counter data image holds for sessions measuring `ranges` launches
    /// per pass: one window's, or where the session is kept across windows, those of
    /// [`session_windows`](Self::session_windows) windows (by default [`SESSION_RANGES`]
    /// rounded down to whole windows).
    pub(crate) fn image_ranges(&self, ranges: u32) -> u32 {
        if !(self.legacy && self.keep_session) {
            return ranges;
        }
        let windows = self
            .session_windows
            .unwrap_or((SESSION_RANGES / ranges).max(1));
        windows.saturating_mul(ranges)
    }
}

/// Most windows one kept legacy session may serve (`ROCPROF_REPLAY_CUPTI_SESSION=N`).
pub(crate) const MAX_SESSION_WINDOWS: u32 = 256;

/// The ranges one kept legacy session's counter data image holds (then the next window begins
/// a new session): 32 windows of 8 launches.
pub(crate) const SESSION_RANGES: u32 = 256;

/// The longest a thread waits for a context's legacy session another thread holds (its
/// holder is inside a CUPTI call: `BeginSession`, `EndSession` and the like take well under a
/// second).
const SESSION_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The context's legacy session, waited for at most [`SESSION_WAIT`].
fn lock_session(
    session: &Mutex<ContextSession>,
) -> Result<parking_lot::MutexGuard<'_, ContextSession>, String> {
    session.try_lock_for(SESSION_WAIT).ok_or_else(|| {
        format!(
            "the context's legacy Profiler API session stayed busy for {} s",
            SESSION_WAIT.as_secs()
        )
    })
}

/// A legacy counter data image's key: device ordinal, metric names, ranges.
type ImageKey = (u32, Vec<String>, u32);

/// The counter source of the process.
pub(crate) struct Profiler {
    fns: Result<Fns, String>,
    on_agent: OnAgent,
    initialized: Mutex<Option<Result<(), String>>>,
    devices: Mutex<HashMap<u32, Result<Arc<Chip>, String>>>,
    contexts: Mutex<HashMap<usize, ContextProfiler>>,
    /// Pristine counter data images for the legacy API, per (device, metric names, ranges):
    /// built once by the range profiler ([`Profiler::legacy_image`]).
    images: Mutex<HashMap<ImageKey, Arc<Vec<u8>>>>,
    /// Each context's legacy Profiler API session ([`ContextSession`]).
    sessions: Mutex<HashMap<usize, Arc<Mutex<ContextSession>>>>,
    modes: Modes,
}

impl Profiler {
    /// A profiler over `symbols` that reports each device's catalog to `on_agent`.
    pub(crate) fn new(
        symbols: Result<Symbols, String>,
        on_agent: OnAgent,
        modes: Modes,
    ) -> Profiler {
        let fns = symbols.and_then(|s| s.resolve());
        let mut modes = modes;
        if modes.legacy
            && let Ok(f) = &fns
        {
            if f.legacy.is_none() {
                modes.legacy = false;
                modes.ranges = modes.ranges.min(RANGE_PROFILER_RANGES);
                // The range profiler's auto range refuses user replay.
                modes.user_range = true;
                tracing::warn!(
                    "this CUPTI has no legacy Profiler API (cuptiProfilerBeginSession and its \
                     kin): counter passes go through the range profiler with user ranges, at \
                     most {} launches per pass, and elapsed-time metrics count the host time \
                     around each launch",
                    modes.ranges
                );
            } else if modes.flush_caches {
                tracing::warn!(
                    "the legacy Profiler API has no cache control (ROCPROF_REPLAY_CUPTI_CACHE=all \
                     needs the range profiler): the L2 is flushed by the backend only"
                );
            }
        }
        Profiler {
            fns,
            on_agent,
            initialized: Mutex::new(None),
            devices: Mutex::new(HashMap::new()),
            contexts: Mutex::new(HashMap::new()),
            images: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            modes,
        }
    }

    fn fns(&self) -> Result<Fns, String> {
        self.fns.clone()
    }

    /// `cuptiProfilerInitialize`, once.
    fn initialize(&self, f: &Fns) -> Result<(), String> {
        let mut done = self.initialized.lock();
        done.get_or_insert_with(|| {
            let mut p = CUpti_Profiler_Initialize_Params {
                structSize: CUpti_Profiler_Initialize_Params_STRUCT_SIZE,
                ..Default::default()
            };
            f.call("cuptiProfilerInitialize", f.initialize, &mut p)
                .map_err(|(status, m)| enable_reason(status, m))
        })
        .clone()
    }

    /// Device `ordinal`'s chip and catalog.
    fn chip(&self, ordinal: u32) -> Result<(Arc<Chip>, CounterCatalog), String> {
        let f = self.fns()?;
        self.initialize(&f)?;
        let mut p = CUpti_Device_GetChipName_Params {
            structSize: CUpti_Device_GetChipName_Params_STRUCT_SIZE,
            deviceIndex: ordinal as usize,
            ..Default::default()
        };
        f.call("cuptiDeviceGetChipName", f.chip_name, &mut p)
            .map_err(|(_, m)| m)?;
        if p.pChipName.is_null() {
            return Err("cuptiDeviceGetChipName returned no name".into());
        }
        // SAFETY: CUPTI's static NUL-terminated chip name.
        let name = unsafe { CStr::from_ptr(p.pChipName) }.to_owned();
        let chip = Arc::new(Chip {
            fns: f,
            name,
            configs: Mutex::new(HashMap::new()),
        });
        let catalog = chip.catalog()?;
        Ok((chip, catalog))
    }

    /// Sees device `ordinal`: the first time, builds its catalog and hands it (or why there
    /// is none) to the policy.
    pub(crate) fn discover(&self, ordinal: u32) {
        if self.devices.lock().contains_key(&ordinal) {
            return;
        }
        // Not under the lock: CUPTI may take its time (or, inside a callback, never answer).
        let found = self.chip(ordinal);
        let mut devices = self.devices.lock();
        if devices.contains_key(&ordinal) {
            return;
        }
        devices.insert(
            ordinal,
            found.as_ref().map(|(c, _)| c.clone()).map_err(Clone::clone),
        );
        drop(devices);
        match &found {
            Ok((chip, catalog)) => tracing::info!(
                gpu = ordinal,
                chip = %chip.name(),
                metrics = catalog.counters().count(),
                api = if self.modes.legacy { "the legacy Profiler API" } else { "the range profiler" },
                "hardware counters through CUPTI"
            ),
            Err(why) => tracing::info!(
                gpu = ordinal,
                "no hardware counters (the launch__* metrics remain): {why}"
            ),
        }
        // Without CUPTI's profiler the launch metrics are still offered; the catalog says why
        // nothing else is.
        let catalog = match found {
            Ok((_, catalog)) => catalog,
            Err(why) => {
                super::launch_metrics::catalog_without_counters(format!("GPU {ordinal}"), &why)
            }
        };
        (self.on_agent)(ordinal, Ok(&catalog));
    }

    /// The range profiler of context `ctx` (current on this thread), enabled on first use.
    fn context(&self, f: &Fns, ctx: usize) -> Result<*mut CUpti_RangeProfiler_Object, String> {
        let flush = self.modes.flush_caches;
        let mut contexts = self.contexts.lock();
        let entry = contexts.entry(ctx).or_insert_with(|| {
            let enable = |with_cache: bool| {
                let mut p = CUpti_RangeProfiler_Enable_Params {
                    structSize: if with_cache {
                        CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE
                    } else {
                        CUpti_RangeProfiler_Enable_Params_SIZE_12_6
                    },
                    ctx: ctx as CUcontext,
                    cacheControlMode: if with_cache {
                        CUPTI_CACHE_CONTROL_MODE_ALL
                    } else {
                        CUPTI_CACHE_CONTROL_MODE_NONE
                    },
                    ..Default::default()
                };
                f.call("cuptiRangeProfilerEnable", f.enable, &mut p)
                    .map(|()| p)
            };
            let mut enabled = enable(flush);
            if flush && let Err((status, m)) = &enabled {
                // A CUPTI before 13.4 has no cache control: without it, said once.
                tracing::warn!(
                    "CUPTI's range profiler without cache control (ROCPROF_REPLAY_CUPTI_CACHE=all \
                     needs CUPTI 13.4+): {m}"
                );
                if !already_owned(*status) {
                    enabled = enable(false);
                }
            }
            match enabled.map(|p| p.pRangeProfilerObject) {
                Ok(object) if !object.is_null() => Ok(object as usize),
                Ok(_) => Err("cuptiRangeProfilerEnable returned no profiler object".into()),
                Err((status, m)) => Err(enable_reason(status, m)),
            }
        });
        entry.clone().map(|p| p as *mut CUpti_RangeProfiler_Object)
    }

    /// Context `ctx` is being destroyed: its range profiler and its legacy session go with it.
    pub(crate) fn forget_context(&self, ctx: usize) {
        let Ok(f) = self.fns() else { return };
        let session = self.sessions.lock().remove(&ctx);
        if let (Some(session), Some(legacy)) = (session, f.legacy) {
            match lock_session(&session) {
                Ok(mut s) => s.end(&f, &legacy),
                Err(why) => tracing::warn!("{why}: not ended with its context"),
            }
        }
        let Some(Ok(object)) = self.contexts.lock().remove(&ctx) else {
            return;
        };
        let mut p = CUpti_RangeProfiler_Disable_Params {
            structSize: CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
            pRangeProfilerObject: object as *mut CUpti_RangeProfiler_Object,
            ..Default::default()
        };
        if let Err((_, m)) = f.call("cuptiRangeProfilerDisable", f.disable, &mut p) {
            tracing::debug!("{m}");
        }
    }

    /// Ends the legacy sessions kept open between windows (the backend stops). A session a
    /// window is configured in is left to that window.
    pub(crate) fn end_sessions(&self) {
        let Ok(f) = self.fns() else { return };
        let Some(legacy) = f.legacy else { return };
        let sessions: Vec<_> = self.sessions.lock().values().cloned().collect();
        for session in sessions {
            if let Some(mut s) = session.try_lock()
                && !s.configured
            {
                s.end(&f, &legacy);
            }
        }
    }

    /// Prepares `set` for one dispatch on device `ordinal` in context `ctx` (current on this
    /// thread): its cached configuration, the context's range profiler and a fresh counter
    /// data image.
    pub(crate) fn prepare(
        &self,
        ctx: usize,
        ordinal: u32,
        set: &MetricSet,
        ranges: u32,
    ) -> Result<Session, String> {
        let ranges = ranges.clamp(1, MAX_RANGES);
        let f = self.fns()?;
        self.discover(ordinal);
        let chip = match self.devices.lock().get(&ordinal) {
            Some(Ok(chip)) => chip.clone(),
            Some(Err(why)) => return Err(why.clone()),
            None => return Err("the device was not discovered".into()),
        };
        if !set.is_scheduled() {
            return Err(format!(
                "the metric set was not built from this GPU's CUPTI catalog ({}); build it in \
                 on_agent from the catalog given there",
                set.agent()
            ));
        }
        // The backend computes launch metrics itself: CUPTI configures the others only.
        let names: Vec<&str> = set
            .metrics()
            .iter()
            .map(|m| m.counter.name.as_str())
            .filter(|n| !set.is_computed(n))
            .collect();
        if names.is_empty() {
            return Err("the metric set has no metric for CUPTI".into());
        }
        let config = chip.config(&names)?;
        if config.passes != set.pass_count() {
            return Err(format!(
                "the set was scheduled for {} passes, CUPTI's configuration needs {}",
                set.pass_count(),
                config.passes
            ));
        }
        if self.modes.legacy {
            let legacy = f.legacy.ok_or("this CUPTI has no legacy Profiler API")?;
            let capacity = self.modes.image_ranges(ranges);
            let pristine = self.legacy_image(&f, &legacy, ctx, ordinal, &config, &names, ranges)?;
            let shared = self
                .sessions
                .lock()
                .entry(ctx)
                .or_insert_with(|| Arc::new(Mutex::new(ContextSession::new(ctx))))
                .clone();
            let api = Api::Legacy(LegacySession {
                fns: legacy,
                ctx: ctx as CUcontext,
                shared,
                key: (names.iter().map(|n| (*n).to_owned()).collect(), ranges),
                pristine,
                capacity: capacity as usize,
                keep: self.modes.keep_session,
                configured: false,
                window: None,
            });
            return Ok(Session::new(f, api, config, Vec::new(), ranges, self.modes));
        }
        let object = self.context(&f, ctx)?;
        let image = range_image(&f, object, &config, ranges)?;
        Ok(Session::new(
            f,
            Api::Range(object),
            config,
            image,
            ranges,
            self.modes,
        ))
    }

    /// A pristine counter data image of `config` for sessions measuring `ranges` launches per
    /// pass ([`Modes::image_ranges`] ranges) that the legacy API accepts, built once per
    /// (device, set, ranges). The legacy API would build it from NVPW's counter data prefix
    /// (`libnvperf_host`); the range profiler's image is the same format (`cupti_pass_cost`'s
    /// legacy modes ran on it), so the context's range profiler is enabled for the moment of
    /// building it, outside any legacy session (a kept one is ended first), and disabled again,
    /// as `cupti_pass_cost` does (whether CUPTI lets both be on at once is not known). A
    /// context whose session another window is configured in at that moment gives this
    /// dispatch no counters (the reason says so).
    #[allow(clippy::too_many_arguments)]
    fn legacy_image(
        &self,
        f: &Fns,
        legacy: &LegacyFns,
        ctx: usize,
        ordinal: u32,
        config: &Config,
        names: &[&str],
        ranges: u32,
    ) -> Result<Arc<Vec<u8>>, String> {
        let key = (
            ordinal,
            names.iter().map(|n| (*n).to_owned()).collect(),
            ranges,
        );
        // Held while building: two first dispatches of a set must not both enable the range
        // profiler of one context.
        let mut images = self.images.lock();
        if let Some(image) = images.get(&key) {
            return Ok(image.clone());
        }
        let session = self.sessions.lock().get(&ctx).cloned();
        if let Some(session) = session {
            let mut session = lock_session(&session)?;
            if session.configured {
                return Err(
                    "another window of this context is collecting counters through the legacy \
                     Profiler API, and this metric set's first counter data image must be built \
                     outside any session"
                        .into(),
                );
            }
            session.end(f, legacy);
        }
        let mut enable = CUpti_RangeProfiler_Enable_Params {
            structSize: CUpti_RangeProfiler_Enable_Params_SIZE_12_6,
            ctx: ctx as CUcontext,
            ..Default::default()
        };
        f.call("cuptiRangeProfilerEnable", f.enable, &mut enable)
            .map_err(|(status, m)| enable_reason(status, m))?;
        let object = enable.pRangeProfilerObject;
        if object.is_null() {
            return Err("cuptiRangeProfilerEnable returned no profiler object".into());
        }
        let built = range_image(f, object, config, self.modes.image_ranges(ranges));
        let mut disable = CUpti_RangeProfiler_Disable_Params {
            structSize: CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
            pRangeProfilerObject: object,
            ..Default::default()
        };
        f.call("cuptiRangeProfilerDisable", f.disable, &mut disable)
            .map_err(|(_, m)| m)?;
        let image = Arc::new(built?);
        images.insert(key, image.clone());
        Ok(image)
    }
}

/// A fresh counter data image of `config` for `ranges` ranges from the range profiler
/// `object`.
fn range_image(
    f: &Fns,
    object: *mut CUpti_RangeProfiler_Object,
    config: &Config,
    ranges: u32,
) -> Result<Vec<u8>, String> {
    let mut ptrs = config.name_ptrs();
    let mut size = CUpti_RangeProfiler_GetCounterDataSize_Params {
        structSize: CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE,
        pRangeProfilerObject: object,
        pMetricNames: ptrs.as_mut_ptr(),
        numMetrics: ptrs.len(),
        maxNumOfRanges: ranges as usize,
        maxNumRangeTreeNodes: ranges,
        ..Default::default()
    };
    f.call(
        "cuptiRangeProfilerGetCounterDataSize",
        f.data_size,
        &mut size,
    )
    .map_err(|(_, m)| m)?;
    let mut image = vec![0u8; size.counterDataSize];
    let mut init = CUpti_RangeProfiler_CounterDataImage_Initialize_Params {
        structSize: CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE,
        pRangeProfilerObject: object,
        counterDataSize: image.len(),
        pCounterData: image.as_mut_ptr(),
        ..Default::default()
    };
    f.call(
        "cuptiRangeProfilerCounterDataImageInitialize",
        f.data_initialize,
        &mut init,
    )
    .map_err(|(_, m)| m)?;
    Ok(image)
}

/// The scratch buffer the legacy API wants beside `image`, initialised.
fn legacy_scratch(f: &Fns, legacy: &LegacyFns, image: &mut [u8]) -> Result<Vec<u8>, String> {
    let mut size = CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params {
        structSize: CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params_STRUCT_SIZE,
        counterDataImageSize: image.len(),
        pCounterDataImage: image.as_mut_ptr(),
        ..Default::default()
    };
    f.call(
        "cuptiProfilerCounterDataImageCalculateScratchBufferSize",
        legacy.scratch_size,
        &mut size,
    )
    .map_err(|(_, m)| m)?;
    let mut scratch = vec![0u8; size.counterDataScratchBufferSize];
    let mut init = CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params {
        structSize: CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params_STRUCT_SIZE,
        counterDataImageSize: image.len(),
        pCounterDataImage: image.as_mut_ptr(),
        counterDataScratchBufferSize: scratch.len(),
        pCounterDataScratchBuffer: scratch.as_mut_ptr(),
        ..Default::default()
    };
    f.call(
        "cuptiProfilerCounterDataImageInitializeScratchBuffer",
        legacy.scratch_initialize,
        &mut init,
    )
    .map_err(|(_, m)| m)?;
    Ok(scratch)
}

/// CUPTI's calls of a counter collection, timed one by one ([`Session::timed`]).
#[derive(Clone, Copy)]
enum Spent {
    SetConfig,
    Start,
    PushRange,
    PopRange,
    Stop,
    Decode,
    /// `GetCounterDataInfo` and the evaluation of every metric.
    Evaluate,
    /// Legacy API: `BeginSession`.
    BeginSession,
    /// Legacy API: `UnsetConfig` and `EndSession`.
    EndSession,
}

impl Spent {
    const COUNT: usize = 9;
}

/// The CUPTI API a session's counter passes go through.
enum Api {
    /// The context's range profiler (CUDA 12.6+).
    Range(*mut CUpti_RangeProfiler_Object),
    /// A legacy Profiler API session on the context, begun at the first counter pass.
    Legacy(LegacySession),
}

/// A context's legacy Profiler API session (`cuptiProfilerBeginSession` .. `EndSession`),
/// shared by the windows of the context one after another ([`Modes::keep_session`]): begun by
/// the first window that collects counters there, each window configured in it
/// (`SetConfig` .. `UnsetConfig`) and adding its ranges to its counter data image, ended when
/// the image has no room for another window, when a window needs another metric set or
/// launches per pass, when a window ends inside it, or when the context goes.
pub(crate) struct ContextSession {
    /// The context (a `CUcontext`).
    ctx: usize,
    /// The metric names and launches per pass the session was begun for.
    key: Option<SessionKey>,
    /// The counter data image CUPTI writes (its address is CUPTI's from `BeginSession` to
    /// `EndSession`: replaced only between sessions).
    image: Vec<u8>,
    scratch: Vec<u8>,
    /// Between `BeginSession` and `EndSession`.
    begun: bool,
    /// A window is between `SetConfig` and `UnsetConfig`.
    configured: bool,
    /// Ranges in the image (after the last window's flush), and how many it holds.
    ranges: usize,
    capacity: usize,
    /// Sessions begun on the context: a window reads its values only from its own.
    generation: u64,
    /// Windows configured on the context (their range names are unique).
    windows: u64,
}

/// What a kept legacy session serves: metric names and launches per pass.
type SessionKey = (Vec<String>, u32);

impl ContextSession {
    fn new(ctx: usize) -> ContextSession {
        ContextSession {
            ctx,
            key: None,
            image: Vec::new(),
            scratch: Vec::new(),
            begun: false,
            configured: false,
            ranges: 0,
            capacity: 0,
            generation: 0,
            windows: 0,
        }
    }

    fn params(&self) -> CUpti_Profiler_Context_Params {
        CUpti_Profiler_Context_Params {
            structSize: CUpti_Profiler_Context_Params_STRUCT_SIZE,
            ctx: self.ctx as CUcontext,
            ..Default::default()
        }
    }

    /// Begins a session over a copy of `pristine` (which holds `capacity` ranges) for `key`.
    fn begin(
        &mut self,
        f: &Fns,
        legacy: &LegacyFns,
        key: &SessionKey,
        pristine: &[u8],
        capacity: usize,
        user_range: bool,
    ) -> Result<(), String> {
        self.image = pristine.to_vec();
        self.scratch = legacy_scratch(f, legacy, &mut self.image)?;
        self.generation += 1;
        self.ranges = 0;
        self.capacity = capacity;
        self.key = Some(key.clone());
        let per_pass = key.1 as usize;
        let mut p = CUpti_Profiler_BeginSession_Params {
            structSize: CUpti_Profiler_BeginSession_Params_STRUCT_SIZE,
            ctx: self.ctx as CUcontext,
            counterDataImageSize: self.image.len(),
            pCounterDataImage: self.image.as_mut_ptr(),
            counterDataScratchBufferSize: self.scratch.len(),
            pCounterDataScratchBuffer: self.scratch.as_mut_ptr(),
            range: if user_range {
                CUPTI_UserRange
            } else {
                CUPTI_AutoRange
            },
            replayMode: CUPTI_UserReplay,
            maxRangesPerPass: per_pass,
            maxLaunchesPerPass: per_pass,
            ..Default::default()
        };
        f.call("cuptiProfilerBeginSession", legacy.begin_session, &mut p)
            .map_err(|(status, m)| enable_reason(status, m))?;
        self.begun = true;
        end_sessions_at_exit();
        Ok(())
    }

    /// Whether a window measuring the launches of `key` fits in the open session.
    fn fits(&self, key: &SessionKey) -> bool {
        self.begun
            && !self.configured
            && self.key.as_ref() == Some(key)
            && self.ranges + key.1 as usize <= self.capacity
    }

    /// Unconfigures (`UnsetConfig`) and ends (`EndSession`) what is open.
    fn end(&mut self, f: &Fns, legacy: &LegacyFns) {
        if self.configured {
            self.configured = false;
            let mut p = self.params();
            if let Err((_, m)) = f.call("cuptiProfilerUnsetConfig", legacy.unset_config, &mut p) {
                tracing::debug!("{m}");
            }
        }
        if self.begun {
            self.begun = false;
            let mut p = self.params();
            if let Err((_, m)) = f.call("cuptiProfilerEndSession", legacy.end_session, &mut p) {
                tracing::warn!("the legacy Profiler API session did not end: {m}");
            }
        }
    }
}

/// A window's part in its context's legacy session ([`ContextSession`]).
struct LegacySession {
    fns: LegacyFns,
    ctx: CUcontext,
    shared: Arc<Mutex<ContextSession>>,
    key: SessionKey,
    /// The pristine counter data image a new session starts from, and its ranges.
    pristine: Arc<Vec<u8>>,
    capacity: usize,
    /// The session outlives the window ([`Modes::keep_session`]).
    keep: bool,
    /// Between this window's `SetConfig` and `UnsetConfig`.
    configured: bool,
    /// This window in the session, once configured.
    window: Option<LegacyWindow>,
}

/// Where a window's ranges are in its session's image.
#[derive(Clone, Copy)]
struct LegacyWindow {
    /// The session ([`ContextSession::generation`]).
    generation: u64,
    /// Ranges in the image before the window's.
    first: usize,
    /// The window's ranges, once flushed.
    ranges: Option<usize>,
}

impl LegacySession {
    /// The parameter block of the calls that take only the context.
    fn context_params(&self) -> CUpti_Profiler_Context_Params {
        CUpti_Profiler_Context_Params {
            structSize: CUpti_Profiler_Context_Params_STRUCT_SIZE,
            ctx: self.ctx,
            ..Default::default()
        }
    }
}

/// One dispatch's counter collection: the counter passes of one prepared set.
pub(crate) struct Session {
    fns: Fns,
    api: Api,
    config: Arc<Config>,
    image: Vec<u8>,
    /// The user range of each launch a counter pass measures (one per member of a run).
    names: Vec<CString>,
    /// The ranges in the decoded image (`GetCounterDataInfo`, asked once).
    total_ranges: Option<usize>,
    /// Between `Start` and `Stop`.
    started: bool,
    /// Inside the pass's user range.
    pushed: bool,
    /// Passes stopped so far.
    stopped: u32,
    /// CUPTI said every pass was submitted.
    all_submitted: bool,
    /// Everything submitted so far is decoded.
    decoded: bool,
    modes: Modes,
    /// The first failure; the dispatch then has no counters.
    error: Option<String>,
    /// Time spent in CUPTI's calls, per call ([`Spent`]; logged at `debug` after the last
    /// pass).
    spent: [std::time::Duration; Spent::COUNT],
}

// SAFETY: the profiler object (or the legacy session's context) is the context's, used only
// by the window that holds the context; the session lives on one companion thread and is moved
// there at most.
unsafe impl Send for Session {}

impl Session {
    fn new(
        fns: Fns,
        api: Api,
        config: Arc<Config>,
        image: Vec<u8>,
        ranges: u32,
        modes: Modes,
    ) -> Session {
        Session {
            fns,
            api,
            config,
            image,
            names: (0..ranges).map(range_name).collect(),
            total_ranges: None,
            started: false,
            pushed: false,
            stopped: 0,
            all_submitted: false,
            decoded: false,
            modes,
            error: None,
            spent: Default::default(),
        }
    }

    /// Whether the passes go through the legacy Profiler API.
    #[cfg(test)]
    pub(crate) fn is_legacy(&self) -> bool {
        matches!(self.api, Api::Legacy(_))
    }

    fn fail(&mut self, why: String) {
        tracing::warn!("hardware counters of this dispatch: {why}");
        self.error.get_or_insert(why);
    }

    /// Whether the window flushes the L2 before each counter pass of this session.
    pub(crate) fn flushes_l2(&self) -> bool {
        self.modes.flush_l2
    }

    /// Arms counter pass `pass` for the next launch (`Some`: `SetConfig` before pass 0, then
    /// `Start` and the first launch's range), or ends the pass that just ran (`None`: `Stop`,
    /// then `DecodeData`).
    pub(crate) fn arm(&mut self, pass: Option<u32>) {
        match pass {
            Some(p) => self.start(p),
            None => self.stop(),
        }
    }

    /// How many launches one counter pass of this session measures at most.
    pub(crate) fn capacity(&self) -> u32 {
        self.names.len() as u32
    }

    /// Whether a launch's range is open (pushed and not popped).
    pub(crate) fn in_range(&self) -> bool {
        self.pushed
    }

    /// Opens the range of the `range`th launch of the pass started by [`arm`](Self::arm)
    /// (a later member of a run), closing the open one first.
    pub(crate) fn push_range(&mut self, range: u32) {
        if self.error.is_some() || !self.started {
            return;
        }
        self.pop_range();
        self.push(range);
    }

    /// Closes the open range, if any (the launch it measured is over).
    pub(crate) fn pop_range(&mut self) {
        if !self.pushed {
            return;
        }
        self.pushed = false;
        let f = self.fns;
        let popped = self.timed(Spent::PopRange, |s| match &s.api {
            Api::Range(object) => {
                let mut p = CUpti_RangeProfiler_PopRange_Params {
                    structSize: CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
                    pRangeProfilerObject: *object,
                    ..Default::default()
                };
                f.call("cuptiRangeProfilerPopRange", f.pop_range, &mut p)
            }
            Api::Legacy(l) if !s.modes.user_range => {
                let mut p = l.context_params();
                f.call("cuptiProfilerDisableProfiling", l.fns.disable, &mut p)
            }
            Api::Legacy(l) => {
                let mut p = l.context_params();
                f.call("cuptiProfilerPopRange", l.fns.pop_range, &mut p)
            }
        });
        if let Err((_, m)) = popped {
            self.fail(m);
        }
    }

    fn push(&mut self, range: u32) {
        let legacy = matches!(self.api, Api::Legacy(_));
        if !self.modes.user_range && !legacy {
            // The range profiler's auto range: every launch between Start and Stop.
            return;
        }
        let Some(name) = self.names.get(range as usize) else {
            return self.fail(format!(
                "a counter pass measures at most {} launches; this was launch {}",
                self.names.len(),
                range + 1
            ));
        };
        let f = self.fns;
        let name = name.as_ptr();
        match self.timed(Spent::PushRange, |s| match &s.api {
            // The legacy API's auto range: the launch measured, profiling enabled around it.
            Api::Legacy(l) if !s.modes.user_range => {
                let mut p = l.context_params();
                f.call("cuptiProfilerEnableProfiling", l.fns.enable, &mut p)
            }
            Api::Range(object) => {
                let mut p = CUpti_RangeProfiler_PushRange_Params {
                    structSize: CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE,
                    pRangeProfilerObject: *object,
                    pRangeName: name,
                    ..Default::default()
                };
                f.call("cuptiRangeProfilerPushRange", f.push_range, &mut p)
            }
            Api::Legacy(l) => {
                let mut p = CUpti_Profiler_PushRange_Params {
                    structSize: CUpti_Profiler_PushRange_Params_STRUCT_SIZE,
                    ctx: l.ctx,
                    pRangeName: name,
                    ..Default::default()
                };
                f.call("cuptiProfilerPushRange", l.fns.push_range, &mut p)
            }
        }) {
            Ok(()) => self.pushed = true,
            Err((_, m)) => self.fail(m),
        }
    }

    /// Runs `call`, adding its time to `what`.
    fn timed<T>(&mut self, what: Spent, call: impl FnOnce(&mut Self) -> T) -> T {
        let t = std::time::Instant::now();
        let r = call(self);
        self.spent[what as usize] += t.elapsed();
        r
    }

    fn start(&mut self, pass: u32) {
        if self.error.is_some() || self.started || self.all_submitted {
            return;
        }
        let started = match self.api {
            Api::Range(object) => self.start_range(object, pass),
            Api::Legacy(_) => self
                .legacy_session(pass)
                .and_then(|()| self.timed(Spent::Start, Self::legacy_begin_pass)),
        };
        match started {
            Ok(()) => self.started = true,
            Err(why) => return self.fail(why),
        }
        self.push(0);
    }

    /// `SetConfig` before pass 0, then `Start`.
    fn start_range(
        &mut self,
        object: *mut CUpti_RangeProfiler_Object,
        pass: u32,
    ) -> Result<(), String> {
        let f = self.fns;
        if pass == 0 {
            let mut p = CUpti_RangeProfiler_SetConfig_Params {
                structSize: CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE,
                pRangeProfilerObject: object,
                configSize: self.config.image.len(),
                pConfig: self.config.image.as_ptr(),
                counterDataImageSize: self.image.len(),
                pCounterDataImage: self.image.as_mut_ptr(),
                range: if self.modes.user_range {
                    CUPTI_UserRange
                } else {
                    CUPTI_AutoRange
                },
                replayMode: CUPTI_UserReplay,
                maxRangesPerPass: self.names.len(),
                numNestingLevels: 1,
                minNestingLevel: 1,
                passIndex: 0,
                targetNestingLevel: 1,
                ..Default::default()
            };
            self.timed(Spent::SetConfig, |_| {
                f.call("cuptiRangeProfilerSetConfig", f.set_config, &mut p)
            })
            .map_err(|(_, m)| m)?;
        }
        let mut p = CUpti_RangeProfiler_Start_Params {
            structSize: CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
            pRangeProfilerObject: object,
            ..Default::default()
        };
        self.timed(Spent::Start, |_| {
            f.call("cuptiRangeProfilerStart", f.start, &mut p)
        })
        .map_err(|(status, m)| enable_reason(status, m))
    }

    /// The window's place in its context's legacy session, before counter pass 0: the open
    /// session where the window fits in it, else a new one (the old one ended); then
    /// `SetConfig` and the window's range names (unique in the session: CUPTI matches a
    /// range's passes by name).
    fn legacy_session(&mut self, pass: u32) -> Result<(), String> {
        let f = self.fns;
        let Api::Legacy(l) = &mut self.api else {
            return Err("not a legacy Profiler API session".into());
        };
        if l.configured {
            return Ok(());
        }
        if pass != 0 {
            return Err(format!(
                "counter pass {pass} of a window not configured in a legacy session"
            ));
        }
        let shared = l.shared.clone();
        let mut session = lock_session(&shared)?;
        if session.configured {
            // Windows of a context collect one after another (each holds the context).
            return Err("another window is configured in this context's legacy session".into());
        }
        let t = std::time::Instant::now();
        if !session.fits(&l.key) {
            session.end(&f, &l.fns);
            let begun = session.begin(
                &f,
                &l.fns,
                &l.key,
                &l.pristine,
                l.capacity,
                self.modes.user_range,
            );
            self.spent[Spent::BeginSession as usize] += t.elapsed();
            begun?;
        }
        let t = std::time::Instant::now();
        let mut p = CUpti_Profiler_SetConfig_Params {
            structSize: CUpti_Profiler_SetConfig_Params_STRUCT_SIZE,
            ctx: l.ctx,
            pConfig: self.config.image.as_ptr(),
            configSize: self.config.image.len(),
            minNestingLevel: 1,
            numNestingLevels: 1,
            passIndex: 0,
            targetNestingLevel: 1,
            ..Default::default()
        };
        let set = f
            .call("cuptiProfilerSetConfig", l.fns.set_config, &mut p)
            .map_err(|(_, m)| m);
        self.spent[Spent::SetConfig as usize] += t.elapsed();
        if let Err(why) = set {
            // Not knowing what CUPTI kept of it, the next window begins anew.
            session.end(&f, &l.fns);
            return Err(why);
        }
        session.configured = true;
        session.windows += 1;
        l.configured = true;
        l.window = Some(LegacyWindow {
            generation: session.generation,
            first: session.ranges,
            ranges: None,
        });
        if l.keep {
            let window = session.windows;
            self.names = (0..self.names.len() as u32)
                .map(|r| {
                    CString::new(format!("rocprof-replay window {window} dispatch {r}"))
                        .unwrap_or_default()
                })
                .collect();
        }
        Ok(())
    }

    /// `BeginPass` and, with user ranges, `EnableProfiling` (a pass begun and not enabled is
    /// ended again); with the auto range profiling is enabled around each launch
    /// ([`push`](Self::push)).
    fn legacy_begin_pass(&mut self) -> Result<(), String> {
        let f = self.fns;
        let Api::Legacy(l) = &self.api else {
            return Err("not a legacy Profiler API session".into());
        };
        let mut p = l.context_params();
        f.call("cuptiProfilerBeginPass", l.fns.begin_pass, &mut p)
            .map_err(|(_, m)| m)?;
        if !self.modes.user_range {
            return Ok(());
        }
        let mut p = l.context_params();
        if let Err((_, m)) = f.call("cuptiProfilerEnableProfiling", l.fns.enable, &mut p) {
            let mut end = CUpti_Profiler_EndPass_Params {
                structSize: CUpti_Profiler_EndPass_Params_STRUCT_SIZE,
                ctx: l.ctx,
                ..Default::default()
            };
            if let Err((_, e)) = f.call("cuptiProfilerEndPass", l.fns.end_pass, &mut end) {
                tracing::debug!("{e}");
            }
            return Err(m);
        }
        Ok(())
    }

    fn stop(&mut self) {
        if !self.started {
            return;
        }
        self.pop_range();
        self.started = false;
        let all = match self.timed(Spent::Stop, Self::end_pass) {
            Ok(all) => all,
            Err(why) => return self.fail(why),
        };
        self.stopped += 1;
        self.all_submitted = all;
        self.decoded = false;
        if self.modes.decode_each {
            self.decode();
        }
    }

    /// Ends the pass that ran (`Stop`; legacy: `DisableProfiling`, `EndPass`): whether CUPTI
    /// has every pass it needs.
    fn end_pass(&mut self) -> Result<bool, String> {
        let f = self.fns;
        match &self.api {
            Api::Range(object) => {
                let mut p = CUpti_RangeProfiler_Stop_Params {
                    structSize: CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE,
                    pRangeProfilerObject: *object,
                    ..Default::default()
                };
                f.call("cuptiRangeProfilerStop", f.stop, &mut p)
                    .map_err(|(_, m)| m)?;
                Ok(p.isAllPassSubmitted != 0)
            }
            Api::Legacy(l) => {
                // With the auto range profiling was disabled after the last launch (its pop).
                let disabled = if self.modes.user_range {
                    let mut p = l.context_params();
                    f.call("cuptiProfilerDisableProfiling", l.fns.disable, &mut p)
                } else {
                    Ok(())
                };
                let mut p = CUpti_Profiler_EndPass_Params {
                    structSize: CUpti_Profiler_EndPass_Params_STRUCT_SIZE,
                    ctx: l.ctx,
                    ..Default::default()
                };
                f.call("cuptiProfilerEndPass", l.fns.end_pass, &mut p)
                    .map_err(|(_, m)| m)?;
                disabled.map_err(|(_, m)| m)?;
                Ok(p.allPassesSubmitted != 0)
            }
        }
    }

    fn decode(&mut self) {
        if self.decoded || self.error.is_some() {
            return;
        }
        self.timed(Spent::Decode, Self::decode_once);
    }

    fn decode_once(&mut self) {
        let f = self.fns;
        let decoded = match &self.api {
            Api::Range(object) => {
                let mut p = CUpti_RangeProfiler_DecodeData_Params {
                    structSize: CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE,
                    pRangeProfilerObject: *object,
                    ..Default::default()
                };
                f.call("cuptiRangeProfilerDecodeData", f.decode, &mut p)
                    .map(|()| p.numOfRangeDropped)
            }
            // The legacy API writes the image once, when every pass is in.
            Api::Legacy(_) if !self.all_submitted => return,
            Api::Legacy(_) => self.end_legacy_window().map_err(|m| (CUPTI_SUCCESS, m)),
        };
        match decoded {
            Ok(0) => self.decoded = true,
            Ok(dropped) => self.fail(format!("CUPTI dropped {dropped} range(s) of the pass")),
            Err((_, m)) => self.fail(m),
        }
    }

    /// After the window's last pass: `FlushCounterData` (the ranges dropped), `UnsetConfig`,
    /// and the window's ranges counted in the image (`GetCounterDataInfo`: those past the
    /// ones before it). The session stays open for the next window where it is kept and all
    /// went well; otherwise it ends (`EndSession`).
    fn end_legacy_window(&mut self) -> Result<usize, String> {
        let f = self.fns;
        let Api::Legacy(l) = &mut self.api else {
            return Err("not a legacy Profiler API session".into());
        };
        let mut p = CUpti_Profiler_FlushCounterData_Params {
            structSize: CUpti_Profiler_FlushCounterData_Params_STRUCT_SIZE,
            ctx: l.ctx,
            ..Default::default()
        };
        let flushed = f
            .call("cuptiProfilerFlushCounterData", l.fns.flush, &mut p)
            .map(|()| p.numRangesDropped)
            .map_err(|(_, m)| m);
        let t = std::time::Instant::now();
        let shared = l.shared.clone();
        let mut session = lock_session(&shared)?;
        l.configured = false;
        if session.configured {
            session.configured = false;
            let mut p = session.params();
            if let Err((_, m)) = f.call("cuptiProfilerUnsetConfig", l.fns.unset_config, &mut p) {
                tracing::debug!("{m}");
            }
        }
        let counted = image_ranges(&f, &session.image);
        if let (Ok(total), Some(w)) = (&counted, &mut l.window) {
            session.ranges = *total;
            w.ranges = Some(total.saturating_sub(w.first));
        }
        if !l.keep || flushed.is_err() || counted.is_err() {
            session.end(&f, &l.fns);
        }
        self.spent[Spent::EndSession as usize] += t.elapsed();
        counted?;
        flushed
    }

    /// A window that ends configured in its legacy session (a failure, or a window dropped
    /// before its last pass): the session is unconfigured and ended, not knowing what CUPTI
    /// kept of the window; the next window begins a new one.
    fn end_legacy(&mut self) {
        let f = self.fns;
        let Api::Legacy(l) = &mut self.api else {
            return;
        };
        if !l.configured {
            return;
        }
        l.configured = false;
        let t = std::time::Instant::now();
        match lock_session(&l.shared) {
            Ok(mut session) => session.end(&f, &l.fns),
            Err(why) => tracing::warn!("{why}: a window's configuration was left to it"),
        }
        self.spent[Spent::EndSession as usize] += t.elapsed();
    }

    /// The values of counter pass `pass`, which just completed, in [`MetricSet::pass`]
    /// order: none before the last pass; after it every metric, each the bit pattern of its
    /// `f64` value.
    #[cfg(test)]
    pub(crate) fn values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        self.values_of(pass, 0)
    }

    /// The values of counter pass `pass` of the `range`th launch of each counter pass (range 0
    /// where the session measures one launch; a member of a run: its own range), in
    /// [`MetricSet::pass`] order: none before the last pass; after it every metric, each the
    /// bit pattern of its `f64` value.
    pub(crate) fn values_of(&mut self, pass: u32, range: u32) -> Result<Vec<u64>, String> {
        if let Some(why) = &self.error {
            return Err(why.clone());
        }
        if self.stopped != pass + 1 && !self.all_submitted {
            return Err(format!(
                "counter pass {pass} was not collected (CUPTI stopped {} pass(es))",
                self.stopped
            ));
        }
        let last = self.config.passes.saturating_sub(1);
        if pass < last {
            return Ok(Vec::new());
        }
        if !self.all_submitted {
            return Err(format!(
                "CUPTI wants more passes than the {} its configuration image said",
                self.config.passes
            ));
        }
        self.decode();
        if let Some(why) = &self.error {
            return Err(why.clone());
        }
        let values = self.timed(Spent::Evaluate, |s| s.evaluate(range));
        if range > 0 {
            return values;
        }
        let ms = |w: Spent| self.spent[w as usize].as_secs_f64() * 1e3;
        tracing::debug!(
            passes = self.stopped,
            set_config_ms = ms(Spent::SetConfig),
            start_ms = ms(Spent::Start),
            push_range_ms = ms(Spent::PushRange),
            pop_range_ms = ms(Spent::PopRange),
            stop_ms = ms(Spent::Stop),
            decode_ms = ms(Spent::Decode),
            begin_session_ms = ms(Spent::BeginSession),
            end_session_ms = ms(Spent::EndSession),
            evaluate_ms = ms(Spent::Evaluate),
            "CUPTI time of a dispatch's counter passes, per call"
        );
        values
    }

    /// The evaluation of every metric of this window's `range`th range: in the decoded image
    /// of the range profiler (`GetCounterDataInfo` once), or in the context's legacy session
    /// image, past the ranges of the windows before this one.
    fn evaluate(&mut self, range: u32) -> Result<Vec<u64>, String> {
        let f = self.fns;
        if let Api::Legacy(l) = &self.api {
            let Some(LegacyWindow {
                generation,
                first,
                ranges: Some(total),
            }) = l.window
            else {
                return Err("the window's counter ranges were not flushed".into());
            };
            let session = lock_session(&l.shared)?;
            if session.generation != generation {
                return Err(
                    "the context's legacy Profiler API session was replaced before this \
                     window's values were read"
                        .into(),
                );
            }
            return self.evaluate_in(&session.image, first, total, range);
        }
        let total = match self.total_ranges {
            Some(n) => n,
            None => {
                let n = image_ranges(&f, &self.image)?;
                self.total_ranges = Some(n);
                n
            }
        };
        self.evaluate_in(&self.image, 0, total, range)
    }

    /// Every metric of range `first + range` of `image`, where this window's ranges are
    /// `first..first + total`.
    fn evaluate_in(
        &self,
        image: &[u8],
        first: usize,
        total: usize,
        range: u32,
    ) -> Result<Vec<u64>, String> {
        let f = self.fns;
        if total == 0 {
            return Err("CUPTI recorded no range for the pass's launch".into());
        }
        if range as usize >= total {
            // CUDA 13.0's range profiler keeps two user ranges per pass, whatever it was
            // configured for (docs/performance.md).
            return Err(format!(
                "CUPTI kept {total} range(s) of the counter passes; this launch's was range {} \
                 (lower ROCPROF_REPLAY_CUPTI_RUN)",
                range + 1
            ));
        }
        if total > self.names.len() {
            tracing::debug!(
                ranges = total,
                "more ranges in a counter pass than launches measured; each launch's is its own \
                 by order"
            );
        }
        let mut ptrs = self.config.name_ptrs();
        let mut values = vec![0f64; ptrs.len()];
        let host = self.config.host.lock();
        let mut p = CUpti_Profiler_Host_EvaluateToGpuValues_Params {
            structSize: CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE,
            pHostObject: host.ptr,
            pCounterDataImage: image.as_ptr(),
            counterDataImageSize: image.len(),
            rangeIndex: first + range as usize,
            ppMetricNames: ptrs.as_mut_ptr(),
            numMetrics: ptrs.len(),
            pMetricValues: values.as_mut_ptr(),
            ..Default::default()
        };
        f.call(
            "cuptiProfilerHostEvaluateToGpuValues",
            f.host_evaluate,
            &mut p,
        )
        .map_err(|(_, m)| m)?;
        drop(host);
        Ok(values.into_iter().map(f64::to_bits).collect())
    }
}

/// The ranges in a decoded counter data image (`GetCounterDataInfo`).
fn image_ranges(f: &Fns, image: &[u8]) -> Result<usize, String> {
    let mut info = CUpti_RangeProfiler_GetCounterDataInfo_Params {
        structSize: CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE,
        pCounterDataImage: image.as_ptr(),
        counterDataImageSize: image.len(),
        ..Default::default()
    };
    f.call(
        "cuptiRangeProfilerGetCounterDataInfo",
        f.data_info,
        &mut info,
    )
    .map_err(|(_, m)| m)?;
    Ok(info.numTotalRanges)
}

impl Drop for Session {
    fn drop(&mut self) {
        // A window that ended between Start and Stop: the profiler must not stay started,
        // nor a legacy session begun.
        self.stop();
        self.end_legacy();
    }
}

/// The process's profiler (set at install; tests set their own).
static PROFILER: RwLock<Option<Arc<Profiler>>> = RwLock::new(None);

/// Sets the process's profiler (`None`: no counters).
pub(crate) fn set(profiler: Option<Arc<Profiler>>) {
    *PROFILER.write() = profiler;
}

fn current() -> Option<Arc<Profiler>> {
    PROFILER.read().clone()
}

/// At backend install: loads the Profiling API and reports each device to `on_agent` when it
/// is first seen. `ROCPROF_REPLAY_CUPTI_DECODE=last` decodes only after the last pass;
/// `ROCPROF_REPLAY_CUPTI_PROFILER=0` leaves CUPTI's profiler alone (no counters, said to
/// `on_agent`).
pub(crate) fn install(on_agent: OnAgent) {
    // On unless turned off. (Until 2026-12-02 it was an opt-in: a range-profiler call from
    // the replay thread while the application thread waited inside a CUPTI callback
    // deadlocked in the driver; the calls now run on the launching thread — `profiler_call` —
    // which the H200 runs of 2026-12-02 checked.)
    let symbols = match std::env::var("ROCPROF_REPLAY_CUPTI_PROFILER").as_deref() {
        Ok("0") => Err("CUPTI's profiler is not used (ROCPROF_REPLAY_CUPTI_PROFILER=0)".to_owned()),
        _ => Symbols::load(),
    };
    set(Some(Arc::new(Profiler::new(
        symbols,
        on_agent,
        Modes::from_env(),
    ))));
}

/// Device `ordinal` is in use (see [`Profiler::discover`]).
pub(crate) fn discover(ordinal: u32) {
    if let Some(p) = current() {
        p.discover(ordinal);
    }
}

/// Devices [`discover_before_decision`] has seen (bit = ordinal, for ordinals below 64).
static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sees device `ordinal` before the first decision about a launch on it, so that a policy
/// has its counter catalog (`on_agent`) before `metrics` is asked. Called inside the launch's
/// API-enter callback: the CUPTI work runs on a thread of its own, waited for with a deadline
/// (a CUPTI that will not answer there leaves the device without counters; the launch goes
/// on). After the first launch per device this is one relaxed load.
pub(crate) fn discover_before_decision(ordinal: u32) {
    use std::sync::atomic::Ordering;
    let bit = 1u64.checked_shl(ordinal).unwrap_or(0);
    if bit == 0 || SEEN.load(Ordering::Relaxed) & bit != 0 {
        return;
    }
    if SEEN.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
        return;
    }
    let Some(p) = current() else { return };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("rocprof-replay-cupti".into())
        .spawn(move || {
            p.discover(ordinal);
            let _ = tx.send(());
        });
    match spawned {
        Ok(_) => {
            if rx.recv_timeout(std::time::Duration::from_secs(20)).is_err() {
                tracing::warn!(
                    gpu = ordinal,
                    "CUPTI's profiler did not describe the device within 20 s: its launches \
                     go on without counters until it does"
                );
            }
        }
        Err(e) => tracing::warn!(gpu = ordinal, "no thread to set up counters ({e})"),
    }
}

/// See [`Profiler::prepare`].
pub(crate) fn prepare(
    ctx: usize,
    ordinal: u32,
    set: &MetricSet,
    ranges: u32,
) -> Result<Session, String> {
    current()
        .ok_or_else(|| NOT_LOADED.to_owned())?
        .prepare(ctx, ordinal, set, ranges)
}

/// How many launches one counter pass may measure ([`Modes::ranges`]; 1 without CUPTI's
/// profiler).
pub(crate) fn ranges_per_pass() -> u32 {
    current().map_or(1, |p| if p.fns.is_ok() { p.modes.ranges } else { 1 })
}

/// See [`Profiler::end_sessions`].
pub(crate) fn end_sessions() {
    if let Some(p) = current() {
        p.end_sessions();
    }
}

/// Has the process's exit end the legacy sessions kept open ([`end_sessions`]), before the
/// CUDA runtime's teardown (registered after it, at the first session).
fn end_sessions_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn at_exit() {
        let _ = std::panic::catch_unwind(end_sessions);
    }
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(at_exit) };
    });
}

/// See [`Profiler::forget_context`].
pub(crate) fn forget_context(ctx: usize) {
    if let Some(p) = current() {
        p.forget_context(ctx);
    }
}

#[cfg(test)]
#[path = "profiler_tests.rs"]
pub(crate) mod tests;
