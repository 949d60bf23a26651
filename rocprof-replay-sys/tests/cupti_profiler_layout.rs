//! Layout proof of the CUPTI Profiling API declarations (`cupti_profiler`, feature `cuda`).
//!
//! Every mirrored size, field offset, `STRUCT_SIZE` and enum value is compared two ways, as
//! `cuda_layout.rs` does for the callback API:
//!
//! - with figures printed by the probe below compiled against CUPTI 13.5's headers
//!   (`nvidia-cuda-cupti` 13.5.25 wheel, `cupti_profiler_host.h`, `cupti_range_profiler.h`,
//!   `cupti_target.h`; a two-line `cuda.h` stand-in for `CUcontext`), recorded in
//!   `cupti_profiler_layout.recorded`: always;
//! - with the headers installed on this machine (`have_cuda_headers`): the probe is compiled
//!   against them and run. `ROCPROF_REPLAY_CUPTI_PROBE_OUT=file` writes its figures.
#![cfg(feature = "cuda")]

use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use rocprof_replay_sys::cupti_profiler::*;

struct Check {
    c_expr: String,
    rust: u64,
}

fn check(out: &mut Vec<Check>, c_expr: String, rust: usize) {
    out.push(Check {
        c_expr,
        rust: rust as u64,
    });
}

macro_rules! strukt {
    ($out:expr, $t:ident { $($f:ident),* $(,)? }) => {{
        check($out, format!("sizeof({})", stringify!($t)), size_of::<$t>());
        $( check($out, format!("offsetof({}, {})", stringify!($t), stringify!($f)), offset_of!($t, $f)); )*
    }};
}

macro_rules! values {
    ($out:expr, $($c:literal => $v:expr),* $(,)?) => {{
        $( check($out, $c.to_string(), $v as usize); )*
    }};
}

fn checks() -> Vec<Check> {
    let mut c = Vec::new();
    let o = &mut c;
    strukt!(o, CUpti_Profiler_Initialize_Params { structSize, pPriv });
    strukt!(
        o,
        CUpti_Device_GetChipName_Params {
            structSize,
            pPriv,
            deviceIndex,
            pChipName
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_Initialize_Params {
            structSize,
            pPriv,
            profilerType,
            pChipName,
            pCounterAvailabilityImage,
            pHostObject,
            pSinglePassMetricSetName,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_Deinitialize_Params {
            structSize,
            pPriv,
            pHostObject
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_GetBaseMetrics_Params {
            structSize,
            pPriv,
            pHostObject,
            metricType,
            ppMetricNames,
            numMetrics,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_ConfigAddMetrics_Params {
            structSize,
            pPriv,
            pHostObject,
            ppMetricNames,
            numMetrics,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_GetConfigImageSize_Params {
            structSize,
            pPriv,
            pHostObject,
            configImageSize,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_GetConfigImage_Params {
            structSize,
            pPriv,
            pHostObject,
            configImageSize,
            pConfigImage,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_GetNumOfPasses_Params {
            structSize,
            pPriv,
            configImageSize,
            pConfigImage,
            numOfPasses,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_Host_EvaluateToGpuValues_Params {
            structSize,
            pPriv,
            pHostObject,
            pCounterDataImage,
            counterDataImageSize,
            rangeIndex,
            ppMetricNames,
            numMetrics,
            pMetricValues,
        }
    );
    strukt!(
        o,
        CUpti_RangeProfiler_Enable_Params {
            structSize,
            pPriv,
            ctx,
            pRangeProfilerObject,
            cacheControlMode,
        }
    );
    strukt!(
        o,
        CUpti_RangeProfiler_Disable_Params {
            structSize,
            pPriv,
            pRangeProfilerObject
        }
    );
    // `Start` shares `Disable`'s layout (a type alias here).
    check(
        o,
        "sizeof(CUpti_RangeProfiler_Start_Params)".into(),
        size_of::<CUpti_RangeProfiler_Start_Params>(),
    );
    check(
        o,
        "offsetof(CUpti_RangeProfiler_Start_Params, pRangeProfilerObject)".into(),
        offset_of!(CUpti_RangeProfiler_Start_Params, pRangeProfilerObject),
    );
    strukt!(
        o,
        CUpti_RangeProfiler_SetConfig_Params {
            structSize,
            pPriv,
            pRangeProfilerObject,
            configSize,
            pConfig,
            counterDataImageSize,
            pCounterDataImage,
            range,
            replayMode,
            maxRangesPerPass,
            numNestingLevels,
            minNestingLevel,
            passIndex,
            targetNestingLevel,
        }
    );
    strukt!(
        o,
        CUpti_RangeProfiler_Stop_Params {
            structSize,
            pPriv,
            pRangeProfilerObject,
            passIndex,
            targetNestingLevel,
            isAllPassSubmitted,
        }
    );
    strukt!(
        o,
        CUpti_RangeProfiler_DecodeData_Params {
            structSize,
            pPriv,
            pRangeProfilerObject,
            numOfRangeDropped,
        }
    );
    strukt!(
        o,
        CUpti_RangeProfiler_GetCounterDataSize_Params {
            structSize,
            pPriv,
            pRangeProfilerObject,
            pMetricNames,
            numMetrics,
            maxNumOfRanges,
            maxNumRangeTreeNodes,
            counterDataSize,
        }
    );
    strukt!(
        o,
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params {
            structSize,
            pPriv,
            pRangeProfilerObject,
            counterDataSize,
            pCounterData,
        }
    );
    strukt!(
        o,
        CUpti_RangeProfiler_GetCounterDataInfo_Params {
            structSize,
            pPriv,
            pCounterDataImage,
            counterDataImageSize,
            numTotalRanges,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_CounterDataImageOptions {
            structSize,
            pPriv,
            pCounterDataPrefix,
            counterDataPrefixSize,
            maxNumRanges,
            maxNumRangeTreeNodes,
            maxRangeNameLength,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_CounterDataImage_CalculateSize_Params {
            structSize,
            pPriv,
            sizeofCounterDataImageOptions,
            pOptions,
            counterDataImageSize,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_CounterDataImage_Initialize_Params {
            structSize,
            pPriv,
            sizeofCounterDataImageOptions,
            pOptions,
            counterDataImageSize,
            pCounterDataImage,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params {
            structSize,
            pPriv,
            counterDataImageSize,
            pCounterDataImage,
            counterDataScratchBufferSize,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params {
            structSize,
            pPriv,
            counterDataImageSize,
            pCounterDataImage,
            counterDataScratchBufferSize,
            pCounterDataScratchBuffer,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_BeginSession_Params {
            structSize,
            pPriv,
            ctx,
            counterDataImageSize,
            pCounterDataImage,
            counterDataScratchBufferSize,
            pCounterDataScratchBuffer,
            bDumpCounterDataInFile,
            pCounterDataFilePath,
            range,
            replayMode,
            maxRangesPerPass,
            maxLaunchesPerPass,
        }
    );
    // One Rust type for the header's six context-only parameter blocks.
    for name in [
        "EndSession",
        "UnsetConfig",
        "BeginPass",
        "EnableProfiling",
        "DisableProfiling",
        "PopRange",
    ] {
        let t = format!("CUpti_Profiler_{name}_Params");
        check(
            o,
            format!("sizeof({t})"),
            size_of::<CUpti_Profiler_Context_Params>(),
        );
        check(
            o,
            format!("offsetof({t}, structSize)"),
            offset_of!(CUpti_Profiler_Context_Params, structSize),
        );
        check(
            o,
            format!("offsetof({t}, pPriv)"),
            offset_of!(CUpti_Profiler_Context_Params, pPriv),
        );
        check(
            o,
            format!("offsetof({t}, ctx)"),
            offset_of!(CUpti_Profiler_Context_Params, ctx),
        );
        check(
            o,
            format!("{t}_STRUCT_SIZE"),
            CUpti_Profiler_Context_Params_STRUCT_SIZE,
        );
    }
    strukt!(
        o,
        CUpti_Profiler_SetConfig_Params {
            structSize,
            pPriv,
            ctx,
            pConfig,
            configSize,
            minNestingLevel,
            numNestingLevels,
            passIndex,
            targetNestingLevel,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_EndPass_Params {
            structSize,
            pPriv,
            ctx,
            targetNestingLevel,
            passIndex,
            allPassesSubmitted,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_FlushCounterData_Params {
            structSize,
            pPriv,
            ctx,
            numRangesDropped,
            numTraceBytesDropped,
        }
    );
    strukt!(
        o,
        CUpti_Profiler_PushRange_Params {
            structSize,
            pPriv,
            ctx,
            pRangeName,
            rangeNameLength,
        }
    );
    values!(o,
        "CUpti_Profiler_Initialize_Params_STRUCT_SIZE" => CUpti_Profiler_Initialize_Params_STRUCT_SIZE,
        "CUpti_Device_GetChipName_Params_STRUCT_SIZE" => CUpti_Device_GetChipName_Params_STRUCT_SIZE,
        "CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_Initialize_Params, pHostObject)" =>
            CUpti_Profiler_Host_Initialize_Params_SIZE_12_6,
        "CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE" => CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
        "CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE" => CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE,
        "CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE" => CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE,
        "CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE" => CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE,
        "CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE" => CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE,
        "CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE" => CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE,
        "CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE" => CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE,
        "CUPTI_PROFILER_STRUCT_SIZE(CUpti_RangeProfiler_Enable_Params, pRangeProfilerObject)" =>
            CUpti_RangeProfiler_Enable_Params_SIZE_12_6,
        "CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE" => CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE,
        "CUPTI_CACHE_CONTROL_MODE_NONE" => CUPTI_CACHE_CONTROL_MODE_NONE,
        "CUPTI_CACHE_CONTROL_MODE_ALL" => CUPTI_CACHE_CONTROL_MODE_ALL,
        "CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE" => CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_Start_Params_STRUCT_SIZE" => CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE" => CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE" => CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE" => CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE" => CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE" => CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE" => CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE" =>
            CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE,
        "CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE" => CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE,
        "CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE" => CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE,
        "CUpti_Profiler_CounterDataImage_CalculateSize_Params_STRUCT_SIZE" =>
            CUpti_Profiler_CounterDataImage_CalculateSize_Params_STRUCT_SIZE,
        "CUpti_Profiler_CounterDataImage_Initialize_Params_STRUCT_SIZE" =>
            CUpti_Profiler_CounterDataImage_Initialize_Params_STRUCT_SIZE,
        "CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params_STRUCT_SIZE" =>
            CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params_STRUCT_SIZE,
        "CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params_STRUCT_SIZE" =>
            CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params_STRUCT_SIZE,
        "CUpti_Profiler_BeginSession_Params_STRUCT_SIZE" => CUpti_Profiler_BeginSession_Params_STRUCT_SIZE,
        "CUpti_Profiler_SetConfig_Params_STRUCT_SIZE" => CUpti_Profiler_SetConfig_Params_STRUCT_SIZE,
        "CUpti_Profiler_EndPass_Params_STRUCT_SIZE" => CUpti_Profiler_EndPass_Params_STRUCT_SIZE,
        "CUpti_Profiler_FlushCounterData_Params_STRUCT_SIZE" => CUpti_Profiler_FlushCounterData_Params_STRUCT_SIZE,
        "CUpti_Profiler_PushRange_Params_STRUCT_SIZE" => CUpti_Profiler_PushRange_Params_STRUCT_SIZE,
        "CUPTI_METRIC_TYPE_COUNTER" => CUPTI_METRIC_TYPE_COUNTER,
        "CUPTI_METRIC_TYPE_RATIO" => CUPTI_METRIC_TYPE_RATIO,
        "CUPTI_METRIC_TYPE_THROUGHPUT" => CUPTI_METRIC_TYPE_THROUGHPUT,
        "CUPTI_PROFILER_TYPE_RANGE_PROFILER" => CUPTI_PROFILER_TYPE_RANGE_PROFILER,
        "CUPTI_AutoRange" => CUPTI_AutoRange,
        "CUPTI_UserRange" => CUPTI_UserRange,
        "CUPTI_UserReplay" => CUPTI_UserReplay,
        "CUPTI_ERROR_INVALID_OPERATION" => CUPTI_ERROR_INVALID_OPERATION,
        "CUPTI_ERROR_NOT_COMPATIBLE" => CUPTI_ERROR_NOT_COMPATIBLE,
        "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" => CUPTI_ERROR_INSUFFICIENT_PRIVILEGES,
        "CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED" => CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED,
    );
    c
}

/// The probe's C++ source: one `expression<TAB>value` line per check.
fn probe_source(checks: &[Check]) -> String {
    let mut s = String::from(
        "#include <cstddef>\n#include <cstdio>\n#include <cupti_target.h>\n\
         #include <cupti_profiler_target.h>\n#include <cupti_profiler_host.h>\n\
         #include <cupti_range_profiler.h>\nint main() {\n",
    );
    for c in checks {
        writeln!(
            s,
            "  std::printf(\"%s\\t%llu\\n\", {:?}, (unsigned long long)({}));",
            c.c_expr, c.c_expr
        )
        .unwrap();
    }
    s.push_str("  return 0;\n}\n");
    s
}

fn mismatches(checks: &[Check], figures: &str) -> Vec<String> {
    let figures: Vec<(&str, &str)> = figures
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once('\t').unwrap_or((l, "")))
        .collect();
    let mut out = Vec::new();
    for c in checks {
        match figures.iter().find(|(k, _)| *k == c.c_expr) {
            None => out.push(format!("{}: no figure (rust says {})", c.c_expr, c.rust)),
            Some((_, v)) if v.trim() != c.rust.to_string() => out.push(format!(
                "{}: header says {v}, rust says {}",
                c.c_expr, c.rust
            )),
            Some(_) => {}
        }
    }
    for (k, _) in &figures {
        if !checks.iter().any(|c| c.c_expr == *k) {
            out.push(format!("{k}: a figure no check asks for"));
        }
    }
    out
}

const RECORDED: &str = include_str!("cupti_profiler_layout.recorded");

#[test]
fn declarations_match_the_figures_recorded_from_cupti_13_headers() {
    let bad = mismatches(&checks(), RECORDED);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn a_wrong_figure_is_reported() {
    let wrong = RECORDED.replace(
        "offsetof(CUpti_RangeProfiler_SetConfig_Params, passIndex)\t80",
        "offsetof(CUpti_RangeProfiler_SetConfig_Params, passIndex)\t76",
    );
    assert_ne!(wrong, RECORDED, "the recorded figure is there");
    let bad = mismatches(&checks(), &wrong);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("passIndex") && bad[0].contains("76"),
        "{bad:?}"
    );
}

/// The toolkit's root and the directory holding `cupti_range_profiler.h` under it.
fn cupti_include() -> Option<(PathBuf, PathBuf)> {
    ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")))
        .flat_map(|r| [r.join("extras/CUPTI/include"), r.join("include")].map(|i| (r.clone(), i)))
        .find(|(_, i)| i.join("cupti_range_profiler.h").is_file())
}

#[test]
#[cfg_attr(
    not(have_cuda_headers),
    ignore = "needs the CUDA toolkit headers (cuda.h, cupti_range_profiler.h): install the CUDA toolkit or set CUDA_HOME"
)]
fn declarations_match_the_installed_cupti_headers() {
    let (root, include) = cupti_include().expect("no cupti_range_profiler.h under the toolkit");
    let all = checks();
    let dir =
        std::env::temp_dir().join(format!("rocprof-replay-cupti-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (checks, text) = match probe(&root, &include, &dir, &all) {
        Ok(text) => (all, text),
        Err(full) => {
            // Headers older than the declarations' newest fields: every other figure is
            // checked, and the sizes of the structs that grew against the first versions' the
            // backend falls back to.
            let older = older_headers(all);
            let text = probe(&root, &include, &dir, &older).unwrap_or_else(|e| {
                panic!("the probe does not compile, with or without the later fields:\n{full}\n{e}")
            });
            println!(
                "installed CUPTI headers predate {} declared fields and constants ({}): \
                 checked against the first versions' sizes",
                LATER.len(),
                LATER.join(", ")
            );
            (older, text)
        }
    };
    if let Some(path) = std::env::var_os("ROCPROF_REPLAY_CUPTI_PROBE_OUT") {
        std::fs::write(path, &text).unwrap();
    }
    let bad = mismatches(&checks, &text);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Declarations newer than CUDA 13.0's CUPTI headers (CUDA 13.4+).
const LATER: [&str; 4] = [
    "offsetof(CUpti_Profiler_Host_Initialize_Params, pSinglePassMetricSetName)",
    "offsetof(CUpti_RangeProfiler_Enable_Params, cacheControlMode)",
    "CUPTI_CACHE_CONTROL_MODE_NONE",
    "CUPTI_CACHE_CONTROL_MODE_ALL",
];

/// `checks` for headers without [`LATER`]: those left out, and the grown structs' sizes
/// those of their first versions (what the backend passes to such a CUPTI).
fn older_headers(checks: Vec<Check>) -> Vec<Check> {
    let first_versions = [
        (
            "sizeof(CUpti_Profiler_Host_Initialize_Params)",
            CUpti_Profiler_Host_Initialize_Params_SIZE_12_6,
        ),
        (
            "sizeof(CUpti_RangeProfiler_Enable_Params)",
            CUpti_RangeProfiler_Enable_Params_SIZE_12_6,
        ),
        (
            "CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE",
            CUpti_RangeProfiler_Enable_Params_SIZE_12_6,
        ),
    ];
    checks
        .into_iter()
        .filter(|c| !LATER.contains(&c.c_expr.as_str()))
        .map(|mut c| {
            if let Some((_, size)) = first_versions.iter().find(|(e, _)| *e == c.c_expr) {
                c.rust = *size as u64;
            }
            c
        })
        .collect()
}

/// Compiles the probe of `checks` against the headers and runs it: its figures, or the
/// compiler's complaint.
fn probe(
    root: &std::path::Path,
    include: &std::path::Path,
    dir: &std::path::Path,
    checks: &[Check],
) -> Result<String, String> {
    let src = dir.join("probe.cpp");
    std::fs::write(&src, probe_source(checks)).unwrap();
    let exe = dir.join("probe");
    let _ = std::fs::remove_file(&exe);
    let out = Command::new("c++")
        .arg("-std=c++17")
        .arg("-I")
        .arg(include)
        .arg("-I")
        .arg(root.join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run c++");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let run = Command::new(&exe).output().expect("run the probe");
    assert!(run.status.success(), "the probe failed");
    Ok(String::from_utf8(run.stdout).unwrap())
}

#[test]
fn figures_of_older_headers_are_checked_against_the_first_versions() {
    // What CUDA 13.0's headers print: the recorded figures without the later fields, and the
    // grown structs at their first sizes.
    let older: String = RECORDED
        .lines()
        .filter(|l| !LATER.iter().any(|e| l.split('\t').next() == Some(*e)))
        .map(|l| {
            let l = l
                .replace(
                    "sizeof(CUpti_Profiler_Host_Initialize_Params)\t56",
                    "sizeof(CUpti_Profiler_Host_Initialize_Params)\t48",
                )
                .replace(
                    "sizeof(CUpti_RangeProfiler_Enable_Params)\t40",
                    "sizeof(CUpti_RangeProfiler_Enable_Params)\t32",
                )
                .replace(
                    "CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE\t36",
                    "CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE\t32",
                );
            l + "\n"
        })
        .collect();
    assert_ne!(older, RECORDED);
    let bad = mismatches(&older_headers(checks()), &older);
    assert!(bad.is_empty(), "{bad:?}");
    // The full declarations do not match such headers.
    assert!(!mismatches(&checks(), &older).is_empty());
}

/// Prints the probe's source (to record new figures by hand: compile it against the headers).
#[test]
#[ignore = "prints the probe source; run with --ignored --nocapture to record figures"]
fn print_probe_source() {
    println!("{}", probe_source(&checks()));
}
