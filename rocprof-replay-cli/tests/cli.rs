//! The `rocprof-replay` command end to end on hsa-emu: the demo (the README's main job), each
//! report format checked against the outcome records, the trace checked against a strict
//! Chrome-trace JSON Schema, filters, exit statuses and signals, and every error case.
//!
//! The first test to need them runs `rocprof-replay demo` once, which builds the timer, the
//! Rust sample application, hsa-emu and the sample kernels next to the command
//! (`target/debug/`); the other tests then run `rocprof-replay run` on those.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_rocprof-replay");
/// Generous: the first call may build hsa-emu, the timer, the app and the kernels.
const DEADLINE: Duration = Duration::from_secs(600);

fn profile_dir() -> PathBuf {
    Path::new(EXE).parent().unwrap().to_path_buf()
}

/// Waits for `child` (killing it after `DEADLINE`) and collects its output.
fn finish(mut child: Child) -> Output {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rocprof-replay ran past {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(EXE);
    cmd.args(args)
        .env_remove("ROCPROF_REPLAY_OUTPUT")
        .env_remove("ROCPROF_REPLAY_PASSES")
        .env_remove("ROCPROF_REPLAY_TARGET_RSE")
        .env_remove("ROCPROF_REPLAY_KERNEL")
        .env_remove("ROCPROF_REPLAY_EXCLUDE")
        .env_remove("ROCPROF_REPLAY_LAUNCH_SKIP")
        .env_remove("ROCPROF_REPLAY_LAUNCH_COUNT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run(cmd: &mut Command) -> Output {
    finish(cmd.spawn().expect("start rocprof-replay"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// The demo's output, run once; it builds everything the other tests use.
fn demo() -> &'static Output {
    static DEMO: OnceLock<Output> = OnceLock::new();
    DEMO.get_or_init(|| run(&mut command(&["demo"])))
}

/// The Rust sample application and its kernels, built by the demo.
fn sample_app() -> (PathBuf, PathBuf) {
    let out = demo();
    assert!(out.status.success(), "the demo failed:\n{}", show(out));
    let dir = profile_dir();
    (
        dir.join("rocprof-replay-demo"),
        dir.join("demo/libsample_kernels.so"),
    )
}

/// `rocprof-replay run OPTIONS -- <sample app> app <kernels>` with the records also written to
/// a file of the test's; returns the output and the records (as the SDK wrote them).
fn run_sample(options: &[&str], tag: &str) -> (Output, Vec<Value>) {
    let (app, kernels) = sample_app();
    let records = scratch(&format!("{tag}.records.jsonl"));
    let _ = std::fs::remove_file(&records);
    let mut args = vec!["run", "--runtime", "emu"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[
        "--",
        app.to_str().unwrap(),
        "app",
        kernels.to_str().unwrap(),
    ]);
    let out = run(command(&args).env("ROCPROF_REPLAY_OUTPUT", &records));
    let lines = std::fs::read_to_string(&records).unwrap_or_default();
    let parsed = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record is JSON"))
        .collect();
    (out, parsed)
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn of_kernel<'a>(records: &'a [Value], kernel: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kernel"] == kernel).collect()
}

fn pass_ns(records: &[&Value]) -> Vec<u64> {
    let mut v: Vec<u64> = records
        .iter()
        .flat_map(|r| r["pass_ns"].as_array().unwrap().iter())
        .filter_map(Value::as_u64)
        .collect();
    v.sort_unstable();
    v
}

fn median(sorted: &[u64]) -> u64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2
    }
}

fn sum(records: &[&Value], field: &str) -> u64 {
    records.iter().map(|r| r[field].as_u64().unwrap()).sum()
}

#[test]
fn the_demo_replays_every_dispatch_and_the_app_sees_one_execution() {
    let out = demo();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", show(out));
    assert!(
        stdout.contains("demo: all results correct"),
        "{}",
        show(out)
    );
    assert!(
        stdout.contains("3 dispatches of 2 kernels: 3 replayed (15 passes)"),
        "{}",
        show(out)
    );
    let row = |kernel: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(kernel))
            .unwrap_or_else(|| panic!("no {kernel} row:\n{stdout}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // Kernel, Dispatches, Replayed, Skipped, Declined, Failed, Passes.
    assert_eq!(row("vector_add")[1..7], ["1", "1", "0", "0", "0", "5"]);
    assert_eq!(row("inc_in_place")[1..7], ["2", "2", "0", "0", "0", "10"]);
    assert!(
        text(&out.stderr).contains("runtime: hsa-emu"),
        "{}",
        show(out)
    );
}

#[test]
fn csv_matches_the_records() {
    let path = scratch("report.csv");
    let (out, records) = run_sample(&["--passes", "4", "-o", path.to_str().unwrap()], "csv");
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(records.len(), 3);
    let mut reader = csv::Reader::from_path(&path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2, "one row per kernel");
    for row in &rows {
        let mine = of_kernel(&records, &row[col("kernel")]);
        assert!(!mine.is_empty(), "{row:?}");
        let n = |name: &str| row[col(name)].parse::<u64>().unwrap();
        assert_eq!(n("dispatches"), mine.len() as u64);
        assert_eq!(n("replayed"), mine.len() as u64);
        assert_eq!(n("passes"), sum(&mine, "passes"));
        assert_eq!(n("passes"), 4 * mine.len() as u64);
        let times = pass_ns(&mine);
        assert_eq!(n("timed_passes"), times.len() as u64);
        assert_eq!(n("min_ns"), times[0]);
        assert_eq!(n("max_ns"), *times.last().unwrap());
        assert_eq!(n("median_ns"), median(&times));
        assert_eq!(n("snapshot_bytes"), sum(&mine, "snapshot_bytes"));
        assert_eq!(n("restored_bytes"), sum(&mine, "restored_bytes"));
        assert_eq!(n("restore_ns"), sum(&mine, "restore_ns"));
    }
    // The table is still printed, and the file is named on stderr.
    assert!(text(&out.stdout).contains("Dispatches"), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("CSV report written to"),
        "{}",
        show(&out)
    );
}

#[test]
fn json_matches_the_records() {
    let path = scratch("report.json");
    let (out, records) = run_sample(&["-o", path.to_str().unwrap(), "--quiet"], "json");
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        !text(&out.stdout).contains("Dispatches"),
        "--quiet: no table"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["format"], "rocprof-replay-report");
    assert_eq!(v["exit"]["code"], 0);
    assert_eq!(v["runtime"], "emu");
    assert_eq!(v["dispatches"].as_array().unwrap(), &records);
    assert_eq!(v["totals"]["dispatches"], 3);
    assert_eq!(v["totals"]["replayed"], 3);
    for k in v["kernels"].as_array().unwrap() {
        let mine = of_kernel(&records, k["kernel"].as_str().unwrap());
        let times = pass_ns(&mine);
        assert_eq!(k["dispatches"], mine.len());
        assert_eq!(k["passes"], 5 * mine.len());
        assert_eq!(k["pass_time"]["median_ns"], median(&times));
        assert_eq!(k["pass_time"]["n"], times.len());
        assert_eq!(k["snapshot_bytes"], sum(&mine, "snapshot_bytes"));
    }
}

/// A strict schema of the Chrome Trace Event Format subset the trace uses (JSON object form):
/// metadata, complete, instant and counter events, each with exactly the fields the format
/// defines.
const TRACE_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["traceEvents"],
  "additionalProperties": false,
  "properties": {
    "displayTimeUnit": {"enum": ["ms", "ns"]},
    "otherData": {"type": "object"},
    "traceEvents": {
      "type": "array",
      "items": {
        "type": "object",
        "required": ["ph", "name", "pid", "tid"],
        "properties": {
          "ph": {"enum": ["M", "X", "i", "C"]},
          "name": {"type": "string", "minLength": 1},
          "cat": {"type": "string"},
          "pid": {"type": "integer", "minimum": 0},
          "tid": {"type": "integer", "minimum": 0},
          "ts": {"type": "number", "minimum": 0},
          "dur": {"type": "number", "minimum": 0},
          "s": {"enum": ["g", "p", "t"]},
          "args": {"type": "object"}
        },
        "additionalProperties": false,
        "allOf": [
          {"if": {"properties": {"ph": {"const": "X"}}},
           "then": {"required": ["ts", "dur"], "not": {"required": ["s"]}}},
          {"if": {"properties": {"ph": {"const": "i"}}},
           "then": {"required": ["ts", "s"], "not": {"required": ["dur"]}}},
          {"if": {"properties": {"ph": {"const": "C"}}},
           "then": {
             "required": ["ts", "args"],
             "properties": {"args": {"type": "object", "minProperties": 1,
                                     "additionalProperties": {"type": "number"}}},
             "not": {"anyOf": [{"required": ["dur"]}, {"required": ["s"]}]}
           }},
          {"if": {"properties": {"ph": {"const": "M"}}},
           "then": {
             "required": ["args"],
             "properties": {
               "name": {"enum": ["process_name", "thread_name", "thread_sort_index", "process_sort_index"]},
               "args": {"anyOf": [
                 {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
                 {"type": "object", "required": ["sort_index"], "properties": {"sort_index": {"type": "integer"}}}
               ]}
             },
             "not": {"anyOf": [{"required": ["ts"]}, {"required": ["dur"]}]}
           }}
        ]
      }
    }
  }
}"#;

#[test]
fn the_perfetto_trace_is_valid_and_matches_the_records() {
    let path = scratch("report.trace.json");
    let (out, records) = run_sample(&["--passes", "3", "-o", path.to_str().unwrap()], "trace");
    assert!(out.status.success(), "{}", show(&out));
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let schema: Value = serde_json::from_str(TRACE_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&trace)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // The schema is strict: a misspelt field or a complete event without a duration fails.
    let mut broken = trace.clone();
    let first_x = broken["traceEvents"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["ph"] == "X")
        .unwrap();
    first_x.as_object_mut().unwrap().remove("dur");
    assert!(!validator.is_valid(&broken));
    let mut broken = trace.clone();
    broken["traceEvents"][0]["duration"] = 1.into();
    assert!(!validator.is_valid(&broken));

    let events = trace["traceEvents"].as_array().unwrap();
    let x: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let dispatches: Vec<&Value> = x
        .iter()
        .copied()
        .filter(|e| e["cat"] == "dispatch")
        .collect();
    assert_eq!(
        dispatches.len(),
        records.len(),
        "one slice per replayed dispatch"
    );
    // Each dispatch: snapshot, 3 passes, 2 restores.
    assert_eq!(x.len(), records.len() * 7);
    let f = |e: &Value, k: &str| e[k].as_f64().unwrap();
    for d in &dispatches {
        let record = records
            .iter()
            .find(|r| r["dispatch_id"] == d["args"]["dispatch_id"] && r["pid"] == d["pid"])
            .expect("the slice's record");
        assert_eq!(d["name"], record["kernel"]);
        assert_eq!(
            d["tid"].as_u64().unwrap(),
            record["agent"].as_u64().unwrap() + 1
        );
        let (start, end) = (f(d, "ts"), f(d, "ts") + f(d, "dur"));
        let children: Vec<&Value> = x
            .iter()
            .copied()
            .filter(|e| {
                e["cat"] != "dispatch"
                    && e["tid"] == d["tid"]
                    && f(e, "ts") >= start - 1e-9
                    && f(e, "ts") < end + 1e-9
            })
            .filter(|e| f(e, "ts") + f(e, "dur") <= end + 1e-6)
            .collect();
        let passes: Vec<f64> = children
            .iter()
            .filter(|e| e["cat"] == "pass")
            .map(|e| f(e, "dur"))
            .collect();
        let want: Vec<f64> = record["pass_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ns| ns.as_u64().unwrap() as f64 / 1e3)
            .collect();
        assert_eq!(passes, want, "pass slices carry the records' kernel times");
        assert_eq!(children.iter().filter(|e| e["cat"] == "restore").count(), 2);
        assert_eq!(
            children.iter().filter(|e| e["cat"] == "snapshot").count(),
            1
        );
    }
    // Dispatch slices on one track never overlap (the UI nests by time).
    let mut spans: Vec<(f64, f64)> = dispatches
        .iter()
        .map(|d| (f(d, "ts"), f(d, "ts") + f(d, "dur")))
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        spans.windows(2).all(|w| w[0].1 <= w[1].0 + 1e-9),
        "{spans:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["name"] == "thread_name" && e["args"]["name"] == "GPU agent 0")
    );
}

#[test]
fn kernel_and_exclude_select_what_is_replayed() {
    let (out, records) = run_sample(&["--kernel", "^inc_"], "kernel");
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        of_kernel(&records, "vector_add")
            .iter()
            .all(|r| r["outcome"] == "skipped")
    );
    assert!(
        of_kernel(&records, "inc_in_place")
            .iter()
            .all(|r| r["outcome"] == "replayed")
    );
    assert!(text(&out.stdout).contains("1 skipped"), "{}", show(&out));
    let (out, records) = run_sample(&["--exclude", "inc"], "exclude");
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        of_kernel(&records, "vector_add")
            .iter()
            .all(|r| r["outcome"] == "replayed")
    );
    assert!(
        of_kernel(&records, "inc_in_place")
            .iter()
            .all(|r| r["outcome"] == "skipped")
    );
}

/// (kernel, outcome) of each record, in dispatch order.
fn in_dispatch_order(records: &[Value]) -> Vec<(String, String)> {
    let mut sorted: Vec<&Value> = records.iter().collect();
    sorted.sort_by_key(|r| r["dispatch_id"].as_u64().expect("a dispatch id"));
    sorted
        .iter()
        .map(|r| {
            let s = |field: &str| r[field].as_str().unwrap_or_default().to_owned();
            (s("kernel"), s("outcome"))
        })
        .collect()
}

#[test]
fn launch_skip_and_count_replay_a_range_of_the_selected_dispatches() {
    let pair = |k: &str, o: &str| (k.to_owned(), o.to_owned());
    // The sample dispatches vector_add, then inc_in_place twice; every result is checked.
    let (out, records) = run_sample(
        &["--passes", "3", "--launch-skip", "1", "--launch-count", "1"],
        "launch_range",
    );
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("demo: all results correct"),
        "{}",
        show(&out)
    );
    assert_eq!(
        in_dispatch_order(&records),
        [
            pair("vector_add", "skipped"),
            pair("inc_in_place", "replayed"),
            pair("inc_in_place", "skipped"),
        ]
    );
    assert!(
        stdout.contains("3 dispatches of 2 kernels: 1 replayed (3 passes), 2 skipped"),
        "{}",
        show(&out)
    );
    // Only what --kernel selects counts: vector_add is not one of them.
    let (out, records) = run_sample(
        &["--kernel", "^inc_", "--launch-skip", "1"],
        "launch_range_kernel",
    );
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("demo: all results correct"),
        "{}",
        show(&out)
    );
    assert_eq!(
        in_dispatch_order(&records),
        [
            pair("vector_add", "skipped"),
            pair("inc_in_place", "skipped"),
            pair("inc_in_place", "replayed"),
        ]
    );
}

#[test]
fn restore_selects_how_memory_is_restored_and_the_records_say_so() {
    // vector_add writes a third of its footprint (c of a, b, c): a write-set restore, verified
    // in strict mode; inc_in_place writes all of its buffer: a dense writer, full copies in
    // every mode. `full` makes every dispatch full.
    for (mode, vector_add) in [
        ("auto", "write_set"),
        ("strict", "strict"),
        ("full", "full"),
    ] {
        let (out, records) = run_sample(&["--passes", "3", "--restore", mode], mode);
        assert!(out.status.success(), "{}", show(&out));
        let modes = |kernel: &str| -> Vec<String> {
            of_kernel(&records, kernel)
                .iter()
                .map(|r| r["restore_mode"].as_str().unwrap_or("").to_string())
                .collect()
        };
        assert_eq!(modes("vector_add"), [vector_add], "--restore {mode}");
        assert_eq!(modes("inc_in_place"), ["full", "full"], "--restore {mode}");
    }
}

#[test]
fn every_footprint_is_accepted_and_an_unknown_value_is_refused() {
    // The sample's kernels name every live allocation: nothing is left to watch in any mode
    // (the modes themselves are tested on hsa-emu, `write_set.rs`).
    for mode in ["all", "arguments", "verified", "sampled"] {
        let (out, records) = run_sample(
            &["--passes", "3", "--footprint", mode],
            &format!("footprint_{mode}"),
        );
        assert!(out.status.success(), "{}", show(&out));
        assert!(!records.is_empty());
        for r in &records {
            assert_eq!(r["footprint"], "all", "{mode}: {r}");
            assert_eq!(r["watched_bytes"], 0, "{r}");
            assert_eq!(r["outcome"], "replayed", "{r}");
        }
    }
    let (out, _) = run_sample(&["--footprint", "some"], "footprint_bad");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("arguments"), "{}", show(&out));
}

#[test]
fn run_sets_how_many_dispatches_a_window_covers_and_refuses_values_out_of_range() {
    // The setting reaches the engine (which says so at start-up; 16 by default, nothing with
    // 1). The sample waits for each dispatch before the next: every window covers one, and
    // the records say so.
    for (option, said) in [
        (Some("8"), Some("up to 8 ")),
        (None, Some("up to 16 ")),
        (Some("1"), None),
    ] {
        let mut args = vec!["--passes", "3"];
        if let Some(n) = option {
            args.extend_from_slice(&["--run", n]);
        }
        let (app, kernels) = sample_app();
        let records = scratch(&format!("run_{option:?}.records.jsonl"));
        let _ = std::fs::remove_file(&records);
        let mut all = vec!["run", "--runtime", "emu"];
        all.extend_from_slice(&args);
        all.extend_from_slice(&[
            "--",
            app.to_str().unwrap(),
            "app",
            kernels.to_str().unwrap(),
        ]);
        let out = run(command(&all)
            .env("ROCPROF_REPLAY_OUTPUT", &records)
            .env("ROCPROF_REPLAY_LOG", "info"));
        assert!(out.status.success(), "{}", show(&out));
        let stderr = text(&out.stderr);
        match said {
            Some(n) => assert!(
                stderr.contains(&format!("runs of {n}consecutive dispatches")),
                "{option:?}: {}",
                show(&out)
            ),
            None => assert!(
                !stderr.contains("consecutive dispatches"),
                "{option:?}: {}",
                show(&out)
            ),
        }
        let lines = std::fs::read_to_string(&records).unwrap_or_default();
        assert!(!lines.is_empty());
        for l in lines.lines() {
            let r: Value = serde_json::from_str(l).expect("a record is JSON");
            assert_eq!(r["outcome"], "replayed", "{r}");
            assert_eq!(r["run"], 1, "{r}");
        }
    }
    for bad in ["0", "65", "many"] {
        let (out, _) = run_sample(&["--run", bad], &format!("run_{bad}"));
        assert_eq!(out.status.code(), Some(2), "--run {bad}: {}", show(&out));
        assert!(text(&out.stderr).contains("--run"), "{}", show(&out));
    }
}

#[test]
fn until_stable_stays_within_its_bounds() {
    let (out, records) = run_sample(&["--until-stable", "50%", "--max-passes", "4"], "stable");
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(records.len(), 3);
    for r in &records {
        let passes = r["passes"].as_u64().unwrap();
        assert!((3..=4).contains(&passes), "{r}");
    }
}

#[test]
fn a_user_tool_replaces_the_timer_and_still_gets_the_report() {
    sample_app();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--quiet",
            "-p",
            "rocprof-replay-example-pass-timer",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .status()
        .unwrap();
    assert!(status.success());
    let tool = profile_dir().join("libpass_timer.so");
    let (out, records) = run_sample(&["--tool", tool.to_str().unwrap(), "--passes", "3"], "tool");
    assert!(out.status.success(), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("pass_timer: ").count(), 3, "{stderr}");
    assert!(records.iter().all(|r| r["passes"] == 3));
    assert!(
        text(&out.stdout).contains("3 replayed (9 passes)"),
        "{}",
        show(&out)
    );
}

#[test]
fn the_applications_status_output_and_signals_pass_through() {
    sample_app();
    let out = run(&mut command(&[
        "run",
        "--runtime",
        "emu",
        "--",
        "sh",
        "-c",
        "printf 'out\\n'; printf 'err\\n' >&2; exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    assert!(text(&out.stdout).starts_with("out\n"), "{}", show(&out));
    assert!(text(&out.stderr).contains("err\n"), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("no kernel dispatch was seen"),
        "{}",
        show(&out)
    );

    let out = run(&mut command(&[
        "run",
        "--runtime",
        "emu",
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]));
    assert_eq!(out.status.code(), Some(128 + 15), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("killed by signal 15"),
        "{}",
        show(&out)
    );

    // --quiet with an output file: stdout is exactly the application's.
    let path = scratch("quiet.csv");
    let out = run(&mut command(&[
        "run",
        "--runtime",
        "emu",
        "-q",
        "-o",
        path.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "printf 'only this\\n'",
    ]));
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(text(&out.stdout), "only this\n");
}

#[test]
fn ctrl_c_reaches_the_application_and_the_report_is_still_written() {
    use std::os::unix::process::CommandExt;
    let (app, kernels) = sample_app();
    let records = scratch("ctrl-c.records.jsonl");
    let _ = std::fs::remove_file(&records);
    let json = scratch("ctrl-c.json");
    // The sample app runs to completion, then the shell waits in `sleep` until interrupted.
    let script = "\"$0\" app \"$1\" && exec sleep 60";
    let mut cmd = command(&[
        "run",
        "--runtime",
        "emu",
        "-o",
        json.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
        app.to_str().unwrap(),
        kernels.to_str().unwrap(),
    ]);
    cmd.env("ROCPROF_REPLAY_OUTPUT", &records).process_group(0);
    let child = cmd.spawn().unwrap();
    let pgid = child.id() as i32;
    let start = Instant::now();
    while std::fs::read_to_string(&records).map_or(0, |t| t.lines().count()) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the app did not finish its dispatches"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    // What a terminal does on Ctrl-C: SIGINT to the whole foreground process group.
    // SAFETY: signalling the process group this test created.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(128 + 2), "{}", show(&out));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["totals"]["replayed"], 3, "{v}");
    assert_eq!(v["exit"]["signal"], 2);
    assert!(text(&out.stdout).contains("3 replayed"), "{}", show(&out));
}

#[test]
fn sigterm_to_the_command_is_forwarded_to_the_application() {
    sample_app();
    let child = command(&["run", "--runtime", "emu", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", show(&out));
}

#[test]
fn shadows_reach_hsa_emu_colon_joined() {
    sample_app();
    let (a, b) = (scratch("shadow_a.so"), scratch("shadow_b.so"));
    std::fs::write(&a, "").unwrap();
    std::fs::write(&b, "").unwrap();
    let out = run(&mut command(&[
        "run",
        "--runtime",
        "emu",
        "--shadow",
        a.to_str().unwrap(),
        "--shadow",
        b.to_str().unwrap(),
        "-q",
        "-o",
        scratch("shadow.csv").to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "printf '%s\\n' \"$HSA_EMU_SHADOW\"",
    ]));
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        text(&out.stdout),
        format!("{}:{}\n", a.display(), b.display())
    );
}

fn assert_fails(args: &[&str], status: i32, message: &str) -> Output {
    let out = run(&mut command(args));
    assert_eq!(out.status.code(), Some(status), "{args:?}:\n{}", show(&out));
    assert!(
        text(&out.stderr).contains(message),
        "{args:?}: want {message:?}\n{}",
        show(&out)
    );
    out
}

#[test]
fn bad_input_is_a_clear_error_and_the_application_does_not_run() {
    sample_app();
    let marker = scratch("marker");
    let _ = std::fs::remove_file(&marker);
    let touch = format!("touch {}", marker.display());
    let e = ["run", "--runtime", "emu"];
    let with = |extra: &[&str], app: &[&str]| {
        let mut v: Vec<String> = e.iter().map(|s| s.to_string()).collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v.push("--".into());
        v.extend(app.iter().map(|s| s.to_string()));
        v
    };
    let call = |v: &[String], status, message| {
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        assert_fails(&refs, status, message)
    };
    call(&with(&[], &["no-such-app-xyz"]), 127, "not found in PATH");
    let plain = scratch("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    call(
        &with(&[], &[plain.to_str().unwrap()]),
        126,
        "not executable",
    );
    // A tool that is not a library: the loader's message.
    let junk = scratch("libjunk.so");
    std::fs::write(&junk, "not an ELF file").unwrap();
    call(
        &with(&["--tool", junk.to_str().unwrap()], &["sh", "-c", &touch]),
        125,
        "cannot be loaded",
    );
    let out = call(
        &with(&["--tool", junk.to_str().unwrap()], &["true"]),
        125,
        "cannot be loaded",
    );
    assert!(
        text(&out.stderr).contains("invalid ELF header") || text(&out.stderr).contains("too short"),
        "{}",
        show(&out)
    );
    // A library that is no HSA tool.
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("libm");
    call(
        &with(&["--tool", libm], &["sh", "-c", &touch]),
        125,
        "exports no OnLoad",
    );
    call(
        &with(&["--tool", "/no/such/tool.so"], &["true"]),
        125,
        "does not exist",
    );
    // Runtime library not found.
    let out = run(
        command(&["run", "--runtime", "emu", "--", "sh", "-c", &touch])
            .env("ROCPROF_REPLAY_EMU_DIR", "/nonexistent"),
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("runtime library not found"),
        "{}",
        show(&out)
    );
    // Unwritable output.
    call(
        &with(
            &["-o", "/nonexistent/dir/report.csv"],
            &["sh", "-c", &touch],
        ),
        125,
        "cannot write the output file",
    );
    // Conflicting and malformed options.
    call(
        &with(&["--passes", "3", "--until-stable", "2%"], &["true"]),
        2,
        "cannot be used with",
    );
    call(
        &with(&["--max-passes", "5"], &["true"]),
        2,
        "--until-stable",
    );
    call(
        &with(&["--kernel", "vector_(add"], &["true"]),
        2,
        "not a valid regular expression",
    );
    call(
        &with(&["--exclude", "["], &["true"]),
        2,
        "not a valid regular expression",
    );
    call(
        &with(&["--until-stable", "150%"], &["true"]),
        2,
        "expected a fraction",
    );
    call(
        &with(&["--until-stable", "two"], &["true"]),
        2,
        "expected a fraction",
    );
    call(
        &with(&["--passes", "0"], &["true"]),
        2,
        "expected a positive integer",
    );
    call(
        &with(&["--launch-count", "0"], &["sh", "-c", &touch]),
        2,
        "expected a positive integer",
    );
    call(
        &with(&["--launch-skip", "many"], &["sh", "-c", &touch]),
        2,
        "expected a non-negative integer",
    );
    assert_fails(
        &[
            "run",
            "--runtime",
            "system",
            "--shadow",
            "x.so",
            "--",
            "true",
        ],
        2,
        "--shadow is for hsa-emu",
    );
    assert!(!marker.exists(), "an application ran despite an error");
}

#[test]
fn help_documents_every_option() {
    let out = run(&mut command(&["run", "--help"]));
    assert!(out.status.success());
    let help = text(&out.stdout);
    for option in [
        "--passes",
        "--until-stable",
        "--max-passes",
        "--kernel",
        "--exclude",
        "--launch-skip",
        "--launch-count",
        "--runtime",
        "--shadow",
        "--tool",
        "--output",
        "--format",
        "--quiet",
        "--allow-failed",
        "EXIT STATUS",
        "3 when the",
        "CUDA_INJECTION64_PATH",
        "cuda",
        "perfetto",
        "ROCPROF_REPLAY_TIMER_LIB",
    ] {
        assert!(
            help.contains(option),
            "{option} missing from --help:\n{help}"
        );
    }
    let out = run(&mut command(&["--help"]));
    assert!(text(&out.stdout).contains("demo"));
}

/// The C samples (need Debian's HSA headers) under the command.
#[test]
#[cfg_attr(
    not(have_hsa_headers),
    ignore = "needs Debian's HSA headers: apt-get install libhsa-runtime-dev"
)]
fn the_c_samples_run_under_the_command() {
    sample_app();
    let dir = scratch("apps");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let built = Command::new("bash")
        .arg(format!("{root}/examples/apps/build.sh"))
        .arg(&dir)
        .env(
            "LDFLAGS",
            format!("-L{}", profile_dir().join("hsa-emu").display()),
        )
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built.stderr));
    let json = scratch("inplace.json");
    let out = run(command(&[
        "run",
        "--runtime",
        "emu",
        "--passes",
        "3",
        "-o",
        json.to_str().unwrap(),
        "--",
        dir.join("inplace_counter").to_str().unwrap(),
        dir.join("libsample_kernels.so").to_str().unwrap(),
    ])
    .env("SAMPLE_DISPATCHES", "4"));
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("RESULT inplace_counter OK counter=4"),
        "{}",
        show(&out)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["totals"]["replayed"], 4, "{v}");
    assert!(
        v["dispatches"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["passes"] == 3)
    );
}

/// `rocprof-replay run --runtime emu OPTIONS -- sh -c SCRIPT` with the records in a file of the
/// test's (`$ROCPROF_REPLAY_OUTPUT` in the script); the script may append records itself.
fn run_script(options: &[&str], script: &str, tag: &str) -> Output {
    sample_app();
    let records = scratch(&format!("{tag}.records.jsonl"));
    let _ = std::fs::remove_file(&records);
    let mut args = vec!["run", "--runtime", "emu"];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    run(command(&args).env("ROCPROF_REPLAY_OUTPUT", &records))
}

/// A shell command appending one record of `outcome` to the records file.
fn append_record(id: u32, outcome: &str, reason: &str) -> String {
    format!(
        r#"printf '%s\n' '{{"kernel":"k{id}","dispatch_id":{id},"agent":0,"outcome":"{outcome}","reason":{reason},"passes":2}}' >> "$ROCPROF_REPLAY_OUTPUT""#
    )
}

#[test]
fn a_failed_dispatch_gives_status_3_unless_allowed_or_the_application_failed() {
    let failed = format!(
        "{}; {}; {}",
        append_record(1, "replayed", "null"),
        append_record(2, "failed", r#""pass_stuck""#),
        append_record(3, "declined", r#""over_budget""#),
    );
    let out = run_script(&[], &failed, "failed");
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("1 dispatch ended `failed`")
            && stderr.contains("k2 (pass_stuck)")
            && stderr.contains("exit status 3"),
        "{}",
        show(&out)
    );
    // Its own column and count.
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("1 replayed (2 passes), 0 skipped, 1 declined, 1 failed"),
        "{}",
        show(&out)
    );
    let header = stdout.lines().find(|l| l.starts_with("Kernel")).unwrap();
    assert!(header.contains("Declined  Failed"), "{stdout}");

    let out = run_script(&["--allow-failed"], &failed, "allowed");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("ended `failed`"),
        "{}",
        show(&out)
    );

    // The application's own failure is never hidden.
    let out = run_script(&[], &format!("{failed}; exit 4"), "app-failed");
    assert_eq!(out.status.code(), Some(4), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("ended `failed`"),
        "{}",
        show(&out)
    );
    assert!(
        !text(&out.stderr).contains("exit status 3"),
        "{}",
        show(&out)
    );

    // Every other kind keeps the application's status.
    let fine = format!(
        "{}; {}; {}",
        append_record(1, "replayed", "null"),
        append_record(2, "skipped", "null"),
        append_record(3, "declined", r#""lock_timeout""#),
    );
    let out = run_script(&[], &fine, "fine");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = run_script(&[], &format!("{fine}; exit 5"), "fine-5");
    assert_eq!(out.status.code(), Some(5), "{}", show(&out));

    // CSV and JSON count failed in a column of its own, even when there is none.
    let csv_path = scratch("failed.csv");
    let out = run_script(&["-o", csv_path.to_str().unwrap()], &fine, "fine-csv");
    assert!(out.status.success(), "{}", show(&out));
    let mut reader = csv::Reader::from_path(&csv_path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header[2..6], ["replayed", "skipped", "declined", "failed"]);
    let json_path = scratch("failed.json");
    let out = run_script(
        &["--allow-failed", "-o", json_path.to_str().unwrap()],
        &failed,
        "failed-json",
    );
    assert!(out.status.success(), "{}", show(&out));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(v["totals"]["failed"], 1, "{v}");
    assert_eq!(v["kernels"][1]["outcomes"]["failed"], 1, "{v}");
}

#[test]
fn a_report_that_cannot_be_written_after_the_run_keeps_the_applications_status() {
    // /dev/full opens for writing (the check before the run passes) and fails when written.
    for (status, script) in [(0, "true"), (6, "exit 6")] {
        let out = run_script(&["-o", "/dev/full", "--format", "csv"], script, "full");
        assert_eq!(out.status.code(), Some(status), "{}", show(&out));
        assert!(
            text(&out.stderr).contains("cannot write the report to /dev/full")
                && text(&out.stderr).contains("the exit status is still the application's"),
            "{}",
            show(&out)
        );
    }
}

#[test]
fn malformed_records_are_named_on_stderr_and_the_good_ones_reported() {
    let script = format!(
        "{}; printf 'not json\\n{{}}\\n\\377\\376\\n' >> \"$ROCPROF_REPLAY_OUTPUT\"; {}; \
         printf '{{\"kernel\":\"k9\"' >> \"$ROCPROF_REPLAY_OUTPUT\"",
        append_record(1, "replayed", "null"),
        append_record(2, "replayed", "null"),
    );
    let json = scratch("malformed.json");
    let out = run_script(&["-o", json.to_str().unwrap()], &script, "malformed");
    assert!(out.status.success(), "{}", show(&out));
    let stderr = text(&out.stderr);
    for want in [
        "4 malformed record line(s)",
        "line 2: not JSON",
        "line 3: missing kernel, dispatch_id, agent, outcome, passes",
        "line 4: not valid UTF-8",
        "line 6: truncated",
    ] {
        assert!(stderr.contains(want), "want {want:?}\n{}", show(&out));
    }
    assert!(
        text(&out.stdout).contains("2 dispatches of 2 kernels: 2 replayed"),
        "{}",
        show(&out)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["malformed_records"], 4);
    assert_eq!(v["malformed_lines"][2]["line"], 4);
    assert_eq!(v["totals"]["replayed"], 2);
}

/// Builds a test fixture library from `tests/fixtures/<name>.c` with `cc` into `dir/file`.
fn build_c_library(name: &str, dir: &Path, file: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join(file);
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(format!("{src}/{name}.c"))
        .arg("-ldl")
        .status()
        .expect("a C compiler (cc) to build the fake CUDA driver");
    assert!(status.success(), "building {name}.c");
    out
}

/// A fake `libcuda.so.1` (in a directory of its own, for `LD_LIBRARY_PATH`) and a fake CUDA
/// injection tool.
fn fake_cuda() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = scratch("fake-cuda");
            build_c_library("fake_libcuda", &dir.join("driver"), "libcuda.so.1");
            let tool = build_c_library("fake_cuda_tool", &dir, "libfake_cuda_tool.so");
            (dir.join("driver"), tool)
        })
        .clone()
}

#[test]
fn a_machine_with_a_cuda_driver_gets_the_cuda_runtime_and_emu_can_still_be_forced() {
    sample_app();
    let (driver, tool) = fake_cuda();
    let marker = scratch("cuda-marker");
    let _ = std::fs::remove_file(&marker);
    // What the application gets: the injection path, no HSA tool, LD_PRELOAD untouched.
    let show_env = r#"printf '%s|%s|%s\n' "$CUDA_INJECTION64_PATH" "${HSA_TOOLS_LIB-unset}" "${LD_PRELOAD-unset}""#;
    let cuda = |extra: &[&str], envs: &[(&str, &str)], script: &str| {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--tool", tool.to_str().unwrap(), "--", "sh", "-c", script]);
        let mut cmd = command(&args);
        cmd.env("LD_LIBRARY_PATH", &driver)
            .env_remove("LD_PRELOAD")
            .env_remove("HSA_TOOLS_LIB")
            .env_remove("CUDA_INJECTION64_PATH");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        run(&mut cmd)
    };
    let out = cuda(&[], &[], show_env);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("runtime: CUDA, the tool injected through CUDA_INJECTION64_PATH (libcuda.so.1: 1 device)"),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stdout).starts_with(&format!("{}|unset|unset\n", tool.display())),
        "{}",
        show(&out)
    );
    // A user's injection path is replaced (and said), a stray verdict file never reaches the
    // application.
    let mut cmd = command(&[
        "run",
        "--tool",
        tool.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        r#"printf '%s|%s\n' "$CUDA_INJECTION64_PATH" "${ROCPROF_REPLAY_PREFLIGHT-unset}""#,
    ]);
    cmd.env("LD_LIBRARY_PATH", &driver)
        .env("CUDA_INJECTION64_PATH", "/elsewhere/libother.so")
        .env("ROCPROF_REPLAY_PREFLIGHT", scratch("stray-verdicts"));
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("CUDA_INJECTION64_PATH=/elsewhere/libother.so is replaced"),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stdout).starts_with(&format!("{}|unset\n", tool.display())),
        "{}",
        show(&out)
    );
    let out = cuda(&[], &[("FAKE_CUDA_DEVICES", "2")], "true");
    assert!(
        text(&out.stderr).contains("(libcuda.so.1: 2 devices)"),
        "{}",
        show(&out)
    );

    // No device, or a driver that does not start: the HSA choice as before.
    let out = cuda(&[], &[("FAKE_CUDA_DEVICES", "0")], "true");
    assert!(
        text(&out.stderr).contains("runtime: hsa-emu")
            && text(&out.stderr).contains("reports no device"),
        "{}",
        show(&out)
    );
    let out = cuda(&[], &[("FAKE_CUDA_INIT_ERROR", "100")], "true");
    assert!(
        text(&out.stderr).contains("runtime: hsa-emu"),
        "{}",
        show(&out)
    );

    // --runtime emu forces hsa-emu: the tool goes to HSA_TOOLS_LIB (the built-in timer here).
    let mut cmd = command(&["run", "--runtime", "emu", "--", "sh", "-c", show_env]);
    cmd.env("LD_LIBRARY_PATH", &driver)
        .env_remove("HSA_TOOLS_LIB")
        .env_remove("CUDA_INJECTION64_PATH");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("runtime: hsa-emu"),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stdout).starts_with(&format!(
            "|{}|",
            profile_dir().join("librocprof_replay_timer.so").display()
        )),
        "{}",
        show(&out)
    );

    // A refusal reported by the tool at cuInit stops the run before the application.
    let touch = format!("touch {}", marker.display());
    let out = cuda(
        &[],
        &[("FAKE_TOOL_REFUSE", "CUPTI is held by another subscriber")],
        &touch,
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("refused to load: CUPTI is held by another subscriber"),
        "{}",
        show(&out)
    );
    let out = cuda(
        &["--runtime", "cuda"],
        &[("FAKE_CUDA_INIT_ERROR", "3")],
        &touch,
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("cuInit failed with CUresult 3"),
        "{}",
        show(&out)
    );
    // A tool without InitializeInjection (the timer built without the cuda feature).
    let mut cmd = command(&["run", "--runtime", "cuda", "--", "sh", "-c", &touch]);
    cmd.env("LD_LIBRARY_PATH", &driver);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("exports no InitializeInjection"),
        "{}",
        show(&out)
    );
    // --shadow is for hsa-emu.
    assert_fails(
        &["run", "--runtime", "cuda", "--shadow", "x.so", "--", "true"],
        2,
        "--runtime cuda",
    );
    assert!(!marker.exists(), "an application ran despite an error");
}

/// Builds the fixture tool whose constructor panics with `E2E_PANIC=new`.
fn plan_tool() -> PathBuf {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--quiet",
            "-p",
            "e2e-plan-tool",
            "-p",
            "rocprof-replay-example-pass-timer",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .status()
        .unwrap();
    assert!(status.success());
    profile_dir().join("libe2e_plan_tool.so")
}

#[test]
fn a_tool_that_refuses_to_load_stops_the_run_before_the_application_with_its_reason() {
    sample_app();
    let plan = plan_tool();
    let pass_timer = profile_dir().join("libpass_timer.so");
    let marker = scratch("refusal-marker");
    let _ = std::fs::remove_file(&marker);
    let touch = format!("touch {}", marker.display());
    let refused = |extra: &[&str], envs: &[(&str, &str)], want: &str| {
        let mut args = vec!["run", "--runtime", "emu"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", &touch]);
        let mut cmd = command(&args);
        cmd.env_remove("HSA_TOOLS_LIB");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = run(&mut cmd);
        assert_eq!(out.status.code(), Some(125), "{}", show(&out));
        assert!(
            text(&out.stderr).contains(" refused to load: ") && text(&out.stderr).contains(want),
            "want {want:?}\n{}",
            show(&out)
        );
        assert!(!marker.exists(), "the application ran:\n{}", show(&out));
    };
    // An unknown table layout.
    refused(
        &[],
        &[("HSA_EMU_AMD_EXT_MAJOR", "99")],
        "unsupported HSA API table",
    );
    // A panicking constructor.
    refused(
        &["--tool", plan.to_str().unwrap()],
        &[("E2E_PANIC", "new")],
        "the tool's constructor panicked: E2E_PANIC=new",
    );
    // A second replay tool in the process: the user's own HSA_TOOLS_LIB.
    refused(
        &[],
        &[("HSA_TOOLS_LIB", pass_timer.to_str().unwrap())],
        "another replay tool loaded beside",
    );
    refused(
        &[],
        &[("HSA_TOOLS_LIB", pass_timer.to_str().unwrap())],
        "libpass_timer.so: kernel replay is already configured by another tool",
    );
    // The same tools without the fault load, and the application runs.
    let out = run(command(&[
        "run",
        "--runtime",
        "emu",
        "--tool",
        plan.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &touch,
    ])
    .env_remove("HSA_TOOLS_LIB"));
    assert!(out.status.success(), "{}", show(&out));
    assert!(marker.exists());
}

/// The command on a real NVIDIA GPU: the CUDA runtime is chosen by itself, the CUDA sample
/// `tests/cuda/apps/replay_check.cu` checks that it saw one execution of every launch, and
/// the report counts replayed launches and no failed one. Needs `nvcc`, a GPU and the timer
/// built with the `cuda` feature in `ROCPROF_REPLAY_TIMER_LIB`.
#[test]
#[cfg_attr(
    not(gpu_tests),
    ignore = "needs an NVIDIA GPU, nvcc and the timer built with --features cuda: build with ROCPROF_REPLAY_GPU_TESTS=1"
)]
fn the_command_replays_a_cuda_application_on_a_gpu() {
    let timer = std::env::var_os("ROCPROF_REPLAY_TIMER_LIB")
        .expect("ROCPROF_REPLAY_TIMER_LIB naming the timer built with --features cuda");
    let app = scratch("replay_check");
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/cuda/apps/replay_check.cu"
    );
    let built = Command::new("nvcc")
        .args(["-O2", "-std=c++17", "-arch=native", "-o"])
        .arg(&app)
        .arg(src)
        .status()
        .expect("nvcc");
    assert!(built.success(), "nvcc failed");
    let json = scratch("cuda.json");
    let out = run(command(&[
        "run",
        "--passes",
        "3",
        "-o",
        json.to_str().unwrap(),
        "--",
        app.to_str().unwrap(),
    ])
    .env("ROCPROF_REPLAY_TIMER_LIB", &timer));
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("runtime: CUDA"),
        "{}",
        show(&out)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["runtime"], "cuda");
    assert!(v["totals"]["replayed"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["totals"]["failed"], 0, "{v}");
}

/// A real `failed` outcome on hsa-emu: every copy from the 8th on fails, so the first replayed
/// dispatch's restore fails (and the application's own next copy too, so it exits non-zero).
#[test]
fn a_failed_restore_on_hsa_emu_is_summarized_and_the_applications_failure_kept() {
    let json = scratch("restore-failed.json");
    let (out, records) = run_sample(
        &["--passes", "3", "-o", json.to_str().unwrap()],
        "restore-failed",
    );
    assert!(out.status.success(), "without the fault: {}", show(&out));
    assert!(records.iter().all(|r| r["outcome"] == "replayed"));
    let (app, kernels) = sample_app();
    let out = run(command(&[
        "run",
        "--runtime",
        "emu",
        "--passes",
        "3",
        "-o",
        json.to_str().unwrap(),
        "--",
        app.to_str().unwrap(),
        "app",
        kernels.to_str().unwrap(),
    ])
    .env("HSA_EMU_FAIL_COPY_FROM", "8"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["totals"]["failed"], 1, "{v}\n{}", show(&out));
    let app_status = v["exit"]["code"].as_i64().unwrap();
    assert_ne!(app_status, 0, "{}", show(&out));
    assert_eq!(out.status.code(), Some(app_status as i32), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("1 dispatch ended `failed`")
            && stderr.contains("vector_add (restore_failed)"),
        "{}",
        show(&out)
    );
    assert!(!stderr.contains("exit status 3"), "{}", show(&out));
}

#[test]
fn metrics_get_a_column_each_in_table_csv_and_json_and_a_counter_track() {
    let dir = scratch("metrics");
    let file = dir.with_extension("txt");
    // --metrics-file: one per line, comments, merged with --metrics.
    std::fs::write(
        &file,
        "# waves of exactly 64\nSQ_WAVES_EQ_64\nGRBM_COUNT # clocks\n",
    )
    .unwrap();
    let csv = scratch("metrics.csv");
    let (out, records) = run_sample(
        &[
            "--passes",
            "2",
            "--metrics",
            "SQ_WAVES,SQ_ITEMS",
            "--metrics-file",
            file.to_str().unwrap(),
            "-o",
            csv.to_str().unwrap(),
        ],
        "metrics",
    );
    assert!(out.status.success(), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("counters on GPU 0: gfx90a: 4 metrics in 2 passes"),
        "{stderr}"
    );
    // vector_add: 65536 items in work-groups of 256 -> 1024 waves; 2 timed + 2 counter passes.
    let va = of_kernel(&records, "vector_add");
    assert_eq!(va[0]["passes"], 4, "{:?}", va[0]);
    assert_eq!(
        va[0]["pass_ns"][2],
        Value::Null,
        "counter passes are not timed"
    );
    assert_eq!(va[0]["metrics"]["SQ_WAVES"]["value"], 1024);
    assert_eq!(va[0]["metrics"]["SQ_WAVES"]["pass"], 2);
    assert_eq!(va[0]["metrics"]["SQ_ITEMS"]["value"], 65536);
    assert_eq!(va[0]["metrics"]["SQ_WAVES_EQ_64"]["pass"], 3);
    let stdout = text(&out.stdout);
    let header: Vec<&str> = stdout
        .lines()
        .find(|l| l.starts_with("Kernel"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header[header.len() - 4..],
        ["SQ_WAVES", "SQ_ITEMS", "SQ_WAVES_EQ_64", "GRBM_COUNT"],
        "the order asked for: {stdout}"
    );
    let row: Vec<&str> = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("vector_add"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row[row.len() - 4..row.len() - 1],
        ["1024", "65536", "1024"],
        "{stdout}"
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let va_row: Vec<&str> = lines
        .find(|l| l.starts_with("vector_add,"))
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(va_row[col("SQ_WAVES")], "1024", "{csv}");
    assert_eq!(va_row[col("SQ_ITEMS")], "65536", "{csv}");
    // inc_in_place: two dispatches of 4096 items -> the mean, 64 waves.
    let inc_row: Vec<&str> = csv
        .lines()
        .find(|l| l.starts_with("inc_in_place,"))
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(inc_row[col("SQ_WAVES")], "64", "{csv}");
    // JSON: per kernel and per dispatch; the trace: one counter track per metric.
    let json = scratch("metrics.json");
    let trace = scratch("metrics.trace.json");
    for (path, tag) in [(&json, "metrics-json"), (&trace, "metrics-trace")] {
        let (out, _) = run_sample(
            &[
                "--passes",
                "2",
                "--metrics",
                "SQ_WAVES",
                "-q",
                "-o",
                path.to_str().unwrap(),
            ],
            tag,
        );
        assert!(out.status.success(), "{}", show(&out));
    }
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let kernel = report["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kernel"] == "vector_add")
        .unwrap();
    assert_eq!(kernel["metrics"]["SQ_WAVES"]["mean"], 1024.0, "{kernel}");
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let schema: Value = serde_json::from_str(TRACE_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&trace)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let counters: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "SQ_WAVES")
        .collect();
    assert_eq!(counters.len(), 3, "one sample per dispatch: {counters:?}");
    assert!(counters.iter().any(|c| c["args"]["GPU 0"] == 1024));
}

#[test]
fn an_unknown_metric_is_exit_2_with_the_closest_names_before_the_application_runs() {
    let (out, records) = run_sample(&["--metrics", "SQ_WAVES,GRBM_CONT"], "metrics-unknown");
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("unknown metric `GRBM_CONT` on gfx90a; did you mean GRBM_COUNT"),
        "{stderr}"
    );
    assert!(
        !text(&out.stdout).contains("demo: all results"),
        "the app ran"
    );
    assert!(records.is_empty());
}

#[test]
fn list_metrics_prints_what_the_emulated_gpu_offers() {
    let _ = sample_app(); // builds hsa-emu and the timer
    let out = run(&mut command(&["list-metrics", "--runtime", "emu"]));
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("GPU 0 (gfx90a): 11 counters; counters per pass: GRBM 2, SPI 2, SQ 2"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["SQ_WAVES", "block", "SQ", "event", "4"]),
        "{stdout}"
    );
}

#[test]
fn a_counter_set_up_that_fails_shows_empty_columns_and_the_reason() {
    let _ = sample_app();
    let (out, records) = {
        let (app, kernels) = sample_app();
        let records = scratch("metrics-fail.records.jsonl");
        let _ = std::fs::remove_file(&records);
        let out = run(command(&[
            "run",
            "--runtime",
            "emu",
            "--passes",
            "2",
            "--metrics",
            "SQ_WAVES",
            "--",
            app.to_str().unwrap(),
            "app",
            kernels.to_str().unwrap(),
        ])
        .env("ROCPROF_REPLAY_OUTPUT", &records)
        .env("HSA_EMU_FAIL_PROFILE_START", "1"));
        (out, std::fs::read_to_string(&records).unwrap_or_default())
    };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("demo: all results correct"), "{stdout}");
    let row: Vec<&str> = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("vector_add"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row.last(), Some(&"-"), "{stdout}");
    assert!(
        stdout.contains("No counters, by reason")
            && stdout.contains("vector_add: counters_unavailable x1"),
        "{stdout}"
    );
    assert!(records.contains("HSA_EMU_FAIL_PROFILE_START"), "{records}");
}
