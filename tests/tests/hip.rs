//! HIP programs built with Debian's hipcc for gfx90a (`examples/hip`) run unmodified on hsa-emu
//! through the real HIP runtime (ROCclr 5.2), their kernels executed by shadows: the samples'
//! shadow libraries for their own kernels, hsa-emu's built-in shadows for ROCclr's blit kernels.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rocprof_replay_e2e::{
    Run, e2e_dir, emu_dir, hip_samples, hip_shadow, run_on_emu, workspace_root,
};

const DEADLINE: Duration = Duration::from_secs(60);

/// Runs a HIP sample on hsa-emu with its shadow library and `env`.
fn run_hip(sample: &str, env: &[(&str, &str)]) -> Run {
    let shadow = hip_shadow(sample);
    let mut all = vec![("HSA_EMU_SHADOW", shadow.as_str())];
    all.extend_from_slice(env);
    run_on_emu(&hip_samples().join(sample), &[], &all, DEADLINE)
}

fn assert_ok(run: &Run, sample: &str) {
    run.assert_success();
    assert!(
        run.stdout().contains(&format!("RESULT {sample} OK")),
        "{sample} did not report OK:\n{}\n{}",
        run.stdout(),
        run.stderr()
    );
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn vector_add_runs_through_the_real_hip_runtime() {
    assert_ok(&run_hip("vector_add", &[]), "vector_add");
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn streams_events_async_copies_and_a_templated_kernel() {
    let run = run_hip("streams", &[]);
    assert_ok(&run, "streams");
    assert!(run.stdout().contains("elapsed_ms="), "{}", run.stdout());
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn device_globals_are_shared_by_memcpy_to_symbol_and_the_shadow() {
    assert_ok(&run_hip("symbols", &[]), "symbols");
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn a_code_object_file_loads_with_hip_module_load() {
    let run = run_hip("module", &[]);
    assert_ok(&run, "module");
    assert!(run.stdout().contains("global_size=4"), "{}", run.stdout());
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn memsets_and_copies_run_on_the_built_in_blit_shadows() {
    let run = run_hip("memops", &[("HSA_EMU_TRACE_PACKETS", "1")]);
    assert_ok(&run, "memops");
    // The trace names every dispatched kernel: ROCclr ran these blit kernels, each on its
    // built-in shadow (memops has no shadow library).
    let err = run.stderr();
    assert!(!err.contains("has no shadow"), "{err}");
    for kernel in [
        "__amd_rocclr_fillBufferAligned.kd",
        "__amd_rocclr_fillBufferAligned2D.kd",
        "__amd_rocclr_copyBuffer.kd",
        "__amd_rocclr_copyBufferRect.kd",
        "__amd_rocclr_copyBufferRectAligned.kd",
    ] {
        assert!(
            err.contains(&format!("kernel={kernel} ")),
            "no dispatch of {kernel}:\n{err}"
        );
    }
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn a_kernel_without_a_shadow_fails_visibly() {
    let run = run_on_emu(
        &hip_samples().join("vector_add"),
        &[],
        &[("HSA_EMU_SHADOW", "")],
        DEADLINE,
    );
    let err = run.stderr();
    assert!(
        err.contains("kernel vadd has no shadow") && err.contains("HSA_EMU_SHADOW"),
        "{err}"
    );
    // hsa-emu called the queue's error callback; HIP's callback aborts the process.
    assert!(err.contains("callbackQueue"), "{err}");
    assert_eq!(run.output.status.signal(), Some(SIGABRT), "{err}");
    assert!(!run.stdout().contains("RESULT vector_add OK"));
}

/// `SIGABRT` on Linux.
const SIGABRT: i32 = 6;

/// A shadow of vector_add's kernel whose argument struct misses the last argument.
fn bad_vector_add_shadow() -> PathBuf {
    let dir = e2e_dir().join("hip-bad-shadow");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("bad_shadow.c");
    std::fs::write(
        &src,
        "#include \"hsa_emu_kernel.h\"\n\
         typedef struct { const float* a; const float* b; float* c; } missing_n_t;\n\
         HSA_EMU_KERNEL(vadd, missing_n_t) { (void)wg; }\n",
    )
    .unwrap();
    let lib = dir.join("libbad_shadow.so");
    let ok = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Werror", "-shared", "-fPIC", "-I"])
        .arg(workspace_root().join("hsa-emu/include"))
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "building the bad shadow");
    lib
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn a_shadow_whose_arguments_do_not_mirror_the_kernel_is_refused_loudly() {
    let lib = bad_vector_add_shadow();
    let run = run_on_emu(
        &hip_samples().join("vector_add"),
        &[],
        &[("HSA_EMU_SHADOW", lib.to_str().unwrap())],
        DEADLINE,
    );
    let err = run.stderr();
    // At load: the declared size against the metadata's explicit arguments.
    assert!(
        err.contains("shadow of kernel vadd: sizeof(args_t) = 24")
            && err.contains("end at byte 28"),
        "{err}"
    );
    // At dispatch: a queue error, never a run of the wrong shadow.
    assert!(!run.output.status.success(), "{err}");
    assert!(!run.stdout().contains("RESULT vector_add OK"));
}

/// The `name@@VERSION` / `name@VERSION` dynamic symbols of `lib` (defined or undefined).
fn dynamic_symbols(lib: &std::path::Path, defined: bool) -> std::collections::BTreeSet<String> {
    let flag = if defined {
        "--defined-only"
    } else {
        "--undefined-only"
    };
    let out = Command::new("nm")
        .args(["-D", flag])
        .arg(lib)
        .output()
        .expect("nm runs");
    assert!(out.status.success(), "nm -D {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("hsa_"))
        .map(|s| s.replace("@@", "@"))
        .collect()
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn hsa_emu_exports_every_function_hip_imports() {
    let emu = dynamic_symbols(&emu_dir().join("libhsa-runtime64.so.1"), true);
    let hip = dynamic_symbols(
        std::path::Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"),
        false,
    );
    let missing: Vec<_> = hip.difference(&emu).collect();
    assert!(
        missing.is_empty(),
        "HIP imports these, hsa-emu lacks them: {missing:?}"
    );
    // So HIP loads with immediate binding too (it used to fail on hsa_ext_image_*).
    assert_ok(
        &run_hip("vector_add", &[("LD_BIND_NOW", "1")]),
        "vector_add",
    );
}

#[test]
#[cfg_attr(not(have_hsa_headers), ignore = "needs apt install libhsa-runtime-dev")]
fn hsa_emu_exports_every_function_rocr_exports() {
    let emu = dynamic_symbols(&emu_dir().join("libhsa-runtime64.so.1"), true);
    let rocr = dynamic_symbols(
        std::path::Path::new("/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1"),
        true,
    );
    let missing: Vec<_> = rocr.difference(&emu).collect();
    assert!(
        missing.is_empty(),
        "ROCr 5.2 exports these, hsa-emu does not: {missing:?}"
    );
}

// ---- replay under HIP: each sample under each example tool, both ways of loading it ---------

/// How the tool is loaded.
#[derive(Clone, Copy, Debug)]
enum Way {
    Preload,
    ToolsLib,
}

/// The sample's own kernels (symbol names) and how many times it dispatches each.
fn user_kernels(sample: &str) -> &'static [(&'static str, usize)] {
    match sample {
        "vector_add" => &[("vadd", 3)],
        "streams" => &[("_Z7scale_kILi3EEvPii", 3), ("_Z7scale_kILi2EEvPii", 3)],
        "symbols" => &[("_Z5weighPKii", 2)],
        "module" => &[("saxpy", 2)],
        "memops" => &[],
        "managed" => &[
            ("_Z4bumpi", 2),
            ("_Z7add_onePii", 1),
            ("_Z9bump_sloti", 1),
            ("_Z11sum_managedPKiiPi", 1),
        ],
        "system_memory" => &[("_Z7add_onePii", 3), ("_Z7add_two4Span", 1)],
        "flag_wait" => &[("_Z9wait_flagPViPii", 2), ("_Z8set_flagPii", 2)],
        other => panic!("unknown sample {other}"),
    }
}

/// Whether `kernel` is one of ROCclr's blit kernels.
fn is_blit(kernel: &str) -> bool {
    kernel.starts_with("__amd_rocclr_")
}

/// Runs `sample` with `tool` loaded `way` and `env`; checks the sample's own OK and returns the
/// outcome records.
fn replay(sample: &str, tool: &str, way: Way, env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let records = hip_records(&format!("{sample}-{tool}-{way:?}"));
    let lib = rocprof_replay_e2e::tool_lib(tool);
    let load = match way {
        Way::Preload => "LD_PRELOAD",
        Way::ToolsLib => "HSA_TOOLS_LIB",
    };
    let mut all = vec![
        (load, lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
    ];
    all.extend_from_slice(env);
    let run = run_hip(sample, &all);
    assert_ok(&run, sample);
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&records)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad record {l:?}: {e}")))
        .collect();
    // Every dispatch has a record with an outcome, and none ran out of time.
    for r in &recs {
        assert!(
            !matches!(r["reason"].as_str(), Some("drain_timeout" | "pass_timeout")),
            "{sample} under {tool} ({way:?}): {r}\n{}",
            run.stderr()
        );
    }
    // ROCclr's blit kernels are dispatches like any other (every sample copies).
    assert!(
        recs.iter()
            .any(|r| is_blit(r["kernel"].as_str().unwrap_or(""))),
        "{sample} under {tool} ({way:?}): no blit kernel among {recs:?}"
    );
    // Each user kernel has a record per dispatch.
    for (kernel, count) in user_kernels(sample) {
        let n = recs.iter().filter(|r| r["kernel"] == *kernel).count();
        assert_eq!(
            n, *count,
            "{sample} under {tool} ({way:?}): records of {kernel}"
        );
    }
    recs
}

/// Asserts that every record matching `pick` was replayed with `passes` passes.
fn assert_replayed(
    recs: &[serde_json::Value],
    pick: impl Fn(&str) -> bool,
    passes: impl Fn(u64) -> bool,
    what: &str,
) {
    let picked: Vec<_> = recs
        .iter()
        .filter(|r| pick(r["kernel"].as_str().unwrap_or("")))
        .collect();
    assert!(!picked.is_empty(), "{what}: no records picked");
    let own_kernels = picked
        .iter()
        .any(|r| !is_blit(r["kernel"].as_str().unwrap_or("")));
    let mut replayed = 0;
    for r in picked {
        let kernel = r["kernel"].as_str().unwrap_or("");
        if is_blit(kernel) && r["reason"] == "host_memory" {
            // The runtime reaches all system memory by default (hsa-emu says so, as ROCr does
            // with XNACK on or on an APU): ROCclr hands its blits the application's own
            // pageable host pointers, which no allocation call made reachable. Such a blit
            // runs once (the application's own copy); blits between device buffers replay.
            assert_eq!(r["passes"], 1, "{what}: {r}");
            continue;
        }
        if is_blit(kernel) && r["reason"] == "host_memory_written" {
            // ROCclr stages host copies through locked host memory and fills the next chunk
            // while a blit kernel copies the previous one: with asynchronous windows that
            // write can land during the first pass, and replay then stops after it (the
            // application keeps its one execution). Timing decides; both are right.
            assert_eq!(r["passes"], 1, "{what}: {r}");
            continue;
        }
        replayed += 1;
        assert_eq!(r["outcome"], "replayed", "{what}: {r}");
        assert!(r["reason"].is_null(), "{what}: {r}");
        let n = r["passes"].as_u64().unwrap_or(0);
        assert!(passes(n), "{what}: {n} passes: {r}");
    }
    // The sample's own kernels (never stalled by ROCclr's staging) are always replayed.
    assert!(!own_kernels || replayed > 0, "{what}: nothing replayed");
}

fn pass_timer(sample: &str) {
    for way in [Way::Preload, Way::ToolsLib] {
        let recs = replay(sample, "pass_timer", way, &[("ROCPROF_REPLAY_PASSES", "3")]);
        assert_replayed(
            &recs,
            |_| true,
            |n| n == 3,
            &format!("{sample} pass_timer {way:?}"),
        );
    }
}

fn user_state(sample: &str) {
    for way in [Way::Preload, Way::ToolsLib] {
        let recs = replay(sample, "user_state", way, &[("ROCPROF_REPLAY_PASSES", "3")]);
        assert_replayed(
            &recs,
            |_| true,
            |n| n == 3,
            &format!("{sample} user_state {way:?}"),
        );
    }
}

fn adaptive_timer(sample: &str) {
    for way in [Way::Preload, Way::ToolsLib] {
        let recs = replay(
            sample,
            "adaptive_timer",
            way,
            &[("ROCPROF_REPLAY_MAX_PASSES", "6")],
        );
        assert_replayed(
            &recs,
            |_| true,
            |n| (3..=6).contains(&n),
            &format!("{sample} adaptive_timer {way:?}"),
        );
    }
}

/// `selective` replays the sample's own kernels (for `memops`, the fills) and skips the rest.
fn selective(sample: &str) {
    let users: Vec<&str> = user_kernels(sample).iter().map(|(k, _)| *k).collect();
    let pattern = if users.is_empty() {
        "^__amd_rocclr_fillBuffer".to_owned()
    } else {
        format!("^({})$", users.join("|"))
    };
    let re = |k: &str| {
        if users.is_empty() {
            k.starts_with("__amd_rocclr_fillBuffer")
        } else {
            users.contains(&k)
        }
    };
    for way in [Way::Preload, Way::ToolsLib] {
        let env = [
            ("ROCPROF_REPLAY_KERNEL", pattern.as_str()),
            ("ROCPROF_REPLAY_PASSES", "3"),
        ];
        let recs = replay(sample, "selective", way, &env);
        let what = format!("{sample} selective {way:?}");
        assert_replayed(&recs, re, |n| n == 3, &what);
        for r in recs
            .iter()
            .filter(|r| !re(r["kernel"].as_str().unwrap_or("")))
        {
            assert_eq!(r["outcome"], "skipped", "{what}: {r}");
        }
    }
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn managed_memory_is_shared_by_kernels_and_the_host() {
    assert_ok(&run_hip("managed", &[]), "managed");
}

/// Managed memory is host memory the host writes directly: never restored. Where the runtime
/// has no SVM (HIP then takes managed memory from the coarse-grained system pool), a kernel
/// that writes it — through its arguments, a `__managed__` variable or a pointer stored in a
/// `__device__` variable — runs once (`host_memory_written`: replay stops after the first
/// pass, the program sees one execution and its own check passes); a kernel that only reads
/// it is replayed.
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn kernels_writing_managed_memory_run_once_and_readers_replay() {
    for way in [Way::Preload, Way::ToolsLib] {
        let recs = replay(
            "managed",
            "pass_timer",
            way,
            &[
                ("ROCPROF_REPLAY_PASSES", "3"),
                ("HSA_EMU_SVM_SUPPORTED", "0"),
            ],
        );
        for (kernel, _) in user_kernels("managed") {
            for r in recs.iter().filter(|r| r["kernel"] == *kernel) {
                if *kernel == "_Z11sum_managedPKiiPi" {
                    assert_eq!(r["outcome"], "replayed", "{way:?}: {r}");
                    assert_eq!(r["passes"], 3, "{way:?}: {r}");
                } else {
                    assert_eq!(r["outcome"], "declined", "{way:?}: {r}");
                    assert_eq!(r["reason"], "host_memory_written", "{way:?}: {r}");
                    assert_eq!(r["passes"], 1, "{way:?}: {r}");
                }
                assert!(r["host_memory"].is_null(), "{way:?}: {r}");
            }
        }
    }
}

/// Where the runtime supports SVM (a kernel with HMM, hsa-emu's default) HIP 5.2 allocates
/// managed memory as host memory made reachable with `hsa_amd_svm_attributes_set`: memory the
/// host reaches without any call, which the window never watches or restores. Every kernel
/// given it (readers too) runs once, declined before its window; the program's own checks
/// pass. Before the backend recorded SVM ranges, on a GPU without XNACK (here
/// `HSA_EMU_SVM_BY_DEFAULT=0`) the writers were replayed and their writes repeated.
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn managed_memory_through_svm_runs_once_declined_up_front() {
    let dir = e2e_dir().join("hip-records");
    std::fs::create_dir_all(&dir).unwrap();
    let lib = rocprof_replay_e2e::tool_lib("pass_timer");
    for by_default in ["1", "0"] {
        let records = dir.join(format!("managed-svm-{by_default}.jsonl"));
        let _ = std::fs::remove_file(&records);
        let run = run_hip(
            "managed",
            &[
                ("LD_PRELOAD", lib.to_str().unwrap()),
                ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
                ("ROCPROF_REPLAY_PASSES", "3"),
                ("HSA_EMU_SVM_BY_DEFAULT", by_default),
            ],
        );
        assert_ok(&run, "managed");
        let recs: Vec<serde_json::Value> = std::fs::read_to_string(&records)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (kernel, count) in user_kernels("managed") {
            let mine: Vec<_> = recs.iter().filter(|r| r["kernel"] == *kernel).collect();
            assert_eq!(
                mine.len(),
                *count,
                "{kernel} (SVM by default: {by_default})"
            );
            for r in mine {
                assert_declined(r, "host_memory", by_default);
            }
        }
    }
}

/// With `ROCPROF_REPLAY_HOST_MEMORY=repeat` a policy's opt-in applies to managed memory reached
/// through a module variable too: the writers are replayed, their writes repeated, and the
/// records say so.
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn the_repeat_opt_in_replays_writers_of_managed_memory_and_says_so() {
    let records = hip_records("managed-repeat");
    let lib = rocprof_replay_e2e::tool_lib("pass_timer");
    let run = run_hip(
        "managed",
        &[
            ("HSA_TOOLS_LIB", lib.to_str().unwrap()),
            ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
            ("ROCPROF_REPLAY_PASSES", "3"),
            ("ROCPROF_REPLAY_HOST_MEMORY", "repeat"),
        ],
    );
    // The writes were repeated: the program's own check sees three increments.
    assert!(
        run.stdout().contains("RESULT managed FAIL"),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
    let text = std::fs::read_to_string(&records).unwrap_or_default();
    let recs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for kernel in ["_Z4bumpi", "_Z9bump_sloti"] {
        let r = recs
            .iter()
            .find(|r| r["kernel"] == kernel)
            .unwrap_or_else(|| panic!("no record of {kernel}: {text}"));
        assert_eq!(r["outcome"], "replayed", "{r}");
        assert_eq!(r["host_memory"], "repeated", "{r}");
    }
}

macro_rules! replay_tests {
    ($($name:ident: $tool:ident($sample:literal);)*) => {$(
        #[test]
        #[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
        fn $name() {
            $tool($sample);
        }
    )*};
}

replay_tests! {
    vector_add_under_pass_timer: pass_timer("vector_add");
    vector_add_under_selective: selective("vector_add");
    vector_add_under_user_state: user_state("vector_add");
    vector_add_under_adaptive_timer: adaptive_timer("vector_add");
    streams_under_pass_timer: pass_timer("streams");
    streams_under_selective: selective("streams");
    streams_under_user_state: user_state("streams");
    streams_under_adaptive_timer: adaptive_timer("streams");
    symbols_under_pass_timer: pass_timer("symbols");
    symbols_under_selective: selective("symbols");
    symbols_under_user_state: user_state("symbols");
    symbols_under_adaptive_timer: adaptive_timer("symbols");
    module_under_pass_timer: pass_timer("module");
    module_under_selective: selective("module");
    module_under_user_state: user_state("module");
    module_under_adaptive_timer: adaptive_timer("module");
    memops_under_pass_timer: pass_timer("memops");
    memops_under_selective: selective("memops");
    memops_under_user_state: user_state("memops");
    memops_under_adaptive_timer: adaptive_timer("memops");
}

/// Where the runtime says every GPU reaches all system memory (hsa-emu, as ROCr with XNACK on
/// or on an APU), a kernel given `malloc`'d memory — as a pointer argument or inside a struct
/// passed by value — writes memory no allocation call made reachable: it runs once
/// (`host_memory`), and the program's own check sees one execution. Its code object's metadata
/// says which kernarg words are pointers, so the same kernel on device memory or on a
/// `__device__` variable's address is replayed.
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn kernels_given_malloced_memory_run_once_and_the_same_kernel_on_device_memory_replays() {
    for way in [Way::Preload, Way::ToolsLib] {
        let recs = replay(
            "system_memory",
            "pass_timer",
            way,
            &[("ROCPROF_REPLAY_PASSES", "3")],
        );
        let of = |k: &str| of_kernel(&recs, k);
        let add_one = of("_Z7add_onePii");
        let add_two = of("_Z7add_two4Span");
        // Dispatch order: add_one(heap), add_two(Span{heap2}), add_one(dev), add_one(table).
        for r in [add_one[0], add_two[0]] {
            assert_eq!(r["outcome"], "declined", "{way:?}: {r}");
            assert_eq!(r["reason"], "host_memory", "{way:?}: {r}");
            assert_eq!(r["passes"], 1, "{way:?}: {r}");
        }
        for r in &add_one[1..] {
            assert_eq!(r["outcome"], "replayed", "{way:?}: {r}");
            assert_eq!(r["passes"], 3, "{way:?}: {r}");
        }
    }
}

/// `flag_wait`: a kernel waiting for a flag the program sets with its next HIP call on another
/// stream (`hipMemcpyAsync`, then a small kernel). Under the tool that call is held up by the
/// kernel's window while the window's first pass waits for the flag: the window gives way
/// after the yield deadline (`lock_contention`, one pass) instead of waiting for the pass
/// deadline; the kernel that sets the flag, submitted while that pass still holds the replay
/// queue, runs at once on an aside lane (`drain_timeout`). Every value is that of one
/// execution.
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn a_kernel_waiting_for_the_programs_next_call_on_another_stream_completes() {
    flag_wait_completes("flag_wait-pass_timer", &[]);
}

/// `flag_wait` again with every barrier of the tool's own queues (plain `hsa_queue_create`
/// queues: the replay and aside queues) held 50 ms by hsa-emu (a busy GPU): the program sees
/// the first wait's completion, queued behind the pass that gave way, well before the replay
/// queue's later packets have run. The marker that says the replay queue is held must not be
/// among those: queued after the completion, the next `wait_flag` found the queue still held,
/// ran at once on the aside queue, and the window of the `set_flag` it waits for queued that
/// one behind it there — until `wait_flag`'s own 20 s timeout (the program read 1007, not 14;
/// seen once in CI before the marker went first).
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn a_kernel_waiting_for_the_programs_next_call_completes_when_the_replay_queue_lags() {
    flag_wait_completes(
        "flag_wait-lag-pass_timer",
        &[
            ("HSA_EMU_HOLD_BARRIERS_MS", "50"),
            ("HSA_EMU_HOLD_PLAIN_ONLY", "1"),
        ],
    );
}

/// `flag_wait chain`: two kernels waiting for flags on two streams, then the kernels that set
/// them on a third, the second waiter's setter first. Under the tool the first waiter's pass
/// gives way and holds the replay queue; the next three dispatches decline at once and run on
/// the tool's other queues. The second waiter must not hold its setter back there: with one
/// such queue for all of them, the setter waited behind it until the waiter gave up on its
/// own (20 s; the program read 1000, not 3).
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn kernels_waiting_for_each_other_while_the_replay_queue_is_held_all_complete() {
    let sample = "flag_wait";
    let plain = run_on_emu(
        &hip_samples().join(sample),
        &["chain"],
        &[("HSA_EMU_SHADOW", hip_shadow(sample).as_str())],
        DEADLINE,
    );
    assert_ok(&plain, sample);
    let records = hip_records("flag_wait-chain");
    let lib = rocprof_replay_e2e::tool_lib("pass_timer");
    let shadow = hip_shadow(sample);
    let run = run_on_emu(
        &hip_samples().join(sample),
        &["chain"],
        &[
            ("HSA_EMU_SHADOW", shadow.as_str()),
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
            ("ROCPROF_REPLAY_LOG", "warn"),
            ("ROCPROF_REPLAY_PASSES", "3"),
            ("ROCPROF_REPLAY_YIELD_MS", "300"),
            ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "15000"),
        ],
        DEADLINE,
    );
    assert_ok(&run, sample);
    assert_completed_within_5_s(&run, &["chain"]);
    let recs = read_records(&records);
    let of = |k: &str| of_kernel(&recs, k);
    let waits = of("_Z9wait_flagPViPii");
    assert_eq!(waits.len(), 2, "{recs:?}");
    assert_eq!(waits[0]["outcome"], "declined", "{}", waits[0]);
    assert_eq!(waits[0]["reason"], "lock_contention", "{}", waits[0]);
    let sets = of("_Z8set_flagPii");
    assert_eq!(sets.len(), 3, "{recs:?}");
    for r in [waits[1], sets[1], sets[2]] {
        assert_declined(r, "drain_timeout", "declined at once");
    }
}

/// `flag_wait` under `selective` replaying `set_flag` only: `wait_flag` runs once on its own
/// queue, as the program made it, spinning on a flag the replayed `set_flag` on another stream
/// sets. `set_flag`'s window drains `wait_flag`'s queue while `set_flag` waits behind its gate:
/// the drain gives way after the yield deadline (`lock_contention`, one execution). Before, it
/// waited until `wait_flag` gave up on its own (20 s; the program read 1007, not 14, and the
/// record said `replayed`).
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn a_drain_waiting_for_a_kernel_that_waits_for_its_dispatch_gives_way() {
    let sample = "flag_wait";
    let records = hip_records("flag_wait-selective");
    let lib = rocprof_replay_e2e::tool_lib("selective");
    let run = run_hip(
        sample,
        &[
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
            ("ROCPROF_REPLAY_LOG", "warn"),
            ("ROCPROF_REPLAY_KERNEL", "^_Z8set_flagPii$"),
            ("ROCPROF_REPLAY_PASSES", "3"),
            ("ROCPROF_REPLAY_YIELD_MS", "300"),
        ],
    );
    assert_ok(&run, sample);
    assert_completed_within_5_s(&run, &["copy", "kernel"]);
    let recs = read_records(&records);
    let of = |k: &str| of_kernel(&recs, k);
    let waits = of("_Z9wait_flagPViPii");
    assert_eq!(waits.len(), 2, "{recs:?}");
    assert!(waits.iter().all(|r| r["outcome"] == "skipped"), "{waits:?}");
    let sets = of("_Z8set_flagPii");
    assert_eq!(sets.len(), 2, "{recs:?}");
    assert_eq!(sets[0]["outcome"], "replayed", "the warm-up: {}", sets[0]);
    assert_eq!(sets[1]["outcome"], "declined", "{}", sets[1]);
    assert_eq!(sets[1]["reason"], "lock_contention", "{}", sets[1]);
}

/// A fresh records file under the e2e directory for `name`.
fn hip_records(name: &str) -> PathBuf {
    let dir = e2e_dir().join("hip-records");
    std::fs::create_dir_all(&dir).unwrap();
    let records = dir.join(format!("{name}.jsonl"));
    let _ = std::fs::remove_file(&records);
    records
}

/// `r` is the record of a declined dispatch (one execution) for `reason`; `what` says which.
fn assert_declined(r: &serde_json::Value, reason: &str, what: &str) {
    assert_eq!(r["outcome"], "declined", "{what}: {r}");
    assert_eq!(r["reason"], reason, "{what}: {r}");
    assert_eq!(r["passes"], 1, "{what}: {r}");
}

/// The records of kernel `k`, in order.
fn of_kernel<'a>(recs: &'a [serde_json::Value], k: &str) -> Vec<&'a serde_json::Value> {
    recs.iter().filter(|r| r["kernel"] == k).collect()
}

/// The records in `path`, one JSON object per line.
fn read_records(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Each of `ways` of a `flag_wait` run completed within 5 s (the tests' pass deadlines are
/// longer: a wait for one of them would show).
fn assert_completed_within_5_s(run: &Run, ways: &[&str]) {
    for way in ways {
        let ms = completed_ms(run, way);
        assert!(
            ms < 5000.0,
            "{way}: completed after {ms} ms\n{}",
            run.stderr()
        );
    }
}

/// `flag_wait {way} completed_ms=` of a run.
fn completed_ms(run: &Run, way: &str) -> f64 {
    run.stdout()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("flag_wait {way} completed_ms=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no completed_ms for {way}:\n{}", run.stdout()))
}

/// Runs `flag_wait` plain and under `pass_timer` with `env` (records in `name`.jsonl): both
/// ways complete at once with one execution each, and the records say how.
fn flag_wait_completes(name: &str, env: &[(&str, &str)]) {
    let sample = "flag_wait";
    let plain = run_hip(sample, &[]);
    assert_ok(&plain, sample);
    let records = hip_records(name);
    let lib = rocprof_replay_e2e::tool_lib("pass_timer");
    let mut all = vec![
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("ROCPROF_REPLAY_OUTPUT", records.to_str().unwrap()),
        ("ROCPROF_REPLAY_LOG", "warn"),
        ("ROCPROF_REPLAY_PASSES", "3"),
        ("ROCPROF_REPLAY_YIELD_MS", "300"),
        ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "15000"),
    ];
    all.extend_from_slice(env);
    let run = run_hip(sample, &all);
    assert_ok(&run, sample);
    assert_completed_within_5_s(&run, &["copy", "kernel"]);
    let recs = read_records(&records);
    let of = |k: &str| of_kernel(&recs, k);
    let waits = of("_Z9wait_flagPViPii");
    assert_eq!(waits.len(), 2, "{recs:?}");
    for r in waits {
        assert_declined(r, "lock_contention", "wait_flag");
    }
    let sets = of("_Z8set_flagPii");
    assert_eq!(sets.len(), 2, "{recs:?}");
    assert_eq!(sets[0]["outcome"], "replayed", "the warm-up: {}", sets[0]);
    assert_eq!(sets[1]["outcome"], "declined", "{}", sets[1]);
    assert_eq!(sets[1]["reason"], "drain_timeout", "{}", sets[1]);
}

/// With `ROCPROF_REPLAY_RUN`, a dispatch submitted right behind a replayed one on its queue
/// joins that window's run: the run's members are captured where the snapshot lacks their
/// memory, share one check of the watched memory, and run their passes in turn. The samples'
/// own checks see one execution (`streams` scales each part twice in place, so a pass run
/// once too often, or from the other kernel's result, would show), and every dispatch has its
/// record with its passes. `streams` runs with the default (runs of up to 16), and again with
/// the `sampled` footprint (whose dispatches form runs too), `vector_add` with 8.
#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn consecutive_dispatches_share_a_window_and_the_samples_see_one_execution() {
    for (sample, run, footprint) in [
        ("streams", None, None),
        ("streams", None, Some("sampled")),
        ("vector_add", Some("8"), None),
    ] {
        let mut env = vec![("ROCPROF_REPLAY_PASSES", "3")];
        env.extend(run.map(|n| ("ROCPROF_REPLAY_RUN", n)));
        env.extend(footprint.map(|f| ("ROCPROF_REPLAY_FOOTPRINT", f)));
        let recs = replay(sample, "pass_timer", Way::Preload, &env);
        assert_replayed(&recs, |_| true, |n| n == 3, &format!("{sample} runs"));
        // A run's members are recorded together, the first one first.
        let mut runs = Vec::new();
        let mut i = 0;
        while i < recs.len() {
            let n = recs[i]["run"].as_u64().unwrap_or(0) as usize;
            runs.push(n);
            if n > 1 {
                let members = &recs[i..(i + n).min(recs.len())];
                assert!(
                    members.len() == n && members.iter().all(|r| r["run"] == n),
                    "{sample}: a run of {n} not recorded together: {members:?}"
                );
                i += n;
            } else {
                i += 1;
            }
        }
        // Timing decides whether the next dispatch is already submitted when a window's
        // first pass ends; with streams' back-to-back launches it is, nearly always.
        if sample == "streams" {
            assert!(
                runs.iter().any(|&n| n > 1),
                "{sample} (ROCPROF_REPLAY_RUN {run:?}, footprint {footprint:?}): no dispatch \
                 joined a run: {runs:?}"
            );
        }
    }
}

#[test]
#[cfg_attr(not(have_hipcc), ignore = "needs apt install hipcc libamdhip64-dev")]
fn counters_over_runs_give_each_dispatch_its_own_values() {
    // `counters_tool`'s four metrics take two counter passes on hsa-emu. Back-to-back
    // dispatches of a stream (a copy's blit kernel, scale_k<3>, scale_k<2>, the copy back) ask
    // for the same set and share one window: each counter pass runs every member, and each
    // record must carry the values of its own dispatch.
    let recs = replay("streams", "counters_tool", Way::Preload, &[]);
    let value = |r: &serde_json::Value, m: &str| r["metrics"][m]["value"].as_u64();
    // Copies from or to page-locked host memory run once (`host_memory`); the rest replay.
    let replayed: Vec<&serde_json::Value> =
        recs.iter().filter(|r| r["outcome"] == "replayed").collect();
    assert!(
        replayed
            .iter()
            .filter(|r| r["kernel"].as_str().unwrap_or("").starts_with("_Z7scale_k"))
            .count()
            == 6,
        "{recs:?}"
    );
    for r in &replayed {
        assert_eq!(r["passes"], 3, "{r}");
        assert_eq!(r["inputs_restored"], true, "{r}");
        let kernel = r["kernel"].as_str().unwrap_or("");
        let (waves, items) = (value(r, "SQ_WAVES"), value(r, "SQ_ITEMS"));
        if kernel.starts_with("_Z7scale_k") {
            // 4099 items in work-groups of 128: 33 groups, 66 wave64 waves.
            assert_eq!((waves, items), (Some(66), Some(4224)), "{r}");
        } else {
            // A blit kernel: its own grid; each wave64 wave holds 1 to 64 work-items.
            let (w, i) = (waves.unwrap_or(0), items.unwrap_or(0));
            assert!(w > 0 && i >= w && i <= 64 * w, "{r}");
        }
        assert_eq!(value(r, "SQ_WAVES_EQ_64"), waves, "{r}");
        assert_eq!(r["metrics"]["SQ_WAVES_EQ_64"]["pass"], 2, "{r}");
    }
    let runs: Vec<u64> = replayed
        .iter()
        .map(|r| r["run"].as_u64().unwrap_or(0))
        .collect();
    assert!(
        runs.iter().any(|&n| n > 1),
        "no dispatch joined a counter run: {runs:?}"
    );
}
