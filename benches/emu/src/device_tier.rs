//! `emu-bench device-tier`: the HSA backend's snapshot tiers with a 1 GiB footprint — the
//! host-side memory high-water of a replay with the snapshot staged in (emulated) VRAM against
//! staging in pinned host memory, and capture + restore throughput against a plain `memcpy`.
//!
//! The parent ([`run`]) starts this program [`RUNS`] times per tier as `emu-bench
//! device-tier-child DIR KERNELS.so` ([`child`]) under the `pass_timer` tool with 2 passes,
//! `ROCPROF_REPLAY_RESTORE=full` (one capture and one full restore of the footprint, no diff),
//! `HSA_EMU_VRAM_MB=4096` and `ROCPROF_REPLAY_OUTPUT` naming a records file; the pinned-host
//! runs also set `ROCPROF_REPLAY_DEVICE_RESERVE_MB` above the VRAM's size, so the arena cannot
//! use VRAM. The child dispatches `inc_in_place` twice over a [`FOOTPRINT`] buffer from the
//! GPU's coarse-grained pool (the parent reads the second dispatch's record: the arena sized by
//! the first is reused, as in steady state; a pinned-host chunk of more than 1 GiB is not kept
//! between windows, so that tier's capture is a cold one), checks that every element is 2
//! (one execution per dispatch), reads `VmHWM`
//! and `VmRSS` from `/proc/self/status`, then times [`MEMCPY_RUNS`] plain copies of
//! [`FOOTPRINT`] between two host buffers (after the high-water was read) and prints
//!
//! ```text
//! emu-bench device-tier-child: base_kib=... hwm_kib=... memcpy_ns=... async_copy_ns=...
//! ```
//!
//! On hsa-emu "VRAM" is host memory too, so the host-side high-water is `VmHWM` minus the
//! RSS before the buffer was allocated, minus the emulated VRAM the run touched: the
//! application's buffer and, when the record says `"staging": "device"`, the snapshot (the
//! arena's VRAM chunk). The parent prints medians over the runs of each tier and
//! `2 * memcpy / (capture + restore)` (capture and restore from the record's `snapshot_ns`
//! and `restore_ns`; the memcpy measured in the same child). The child also times the
//! application's own `hsa_amd_memory_async_copy` of the footprint between two device buffers
//! (after the high-water was read; with the tool loaded it is fenced like any copy): what the
//! runtime's copy path costs outside a replay window.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use rocprof_replay_demo::hsa::Hsa;

use crate::{Dispatcher, QUEUE_SIZE, gpu_and_cpu};

/// The subcommand that runs one measurement (internal: started by [`run`]).
pub(crate) const CHILD_SUBCOMMAND: &str = "device-tier-child";
/// How the child's result line starts.
const RESULT_PREFIX: &str = "emu-bench device-tier-child:";
/// Bytes of the application's buffer: the snapshot's footprint.
const FOOTPRINT: usize = 1 << 30;
/// Children per tier.
const RUNS: usize = 3;
/// Timed plain copies in each child.
const MEMCPY_RUNS: usize = 3;
/// Work-items per work-group.
const WORKGROUP_SIZE: u16 = 256;

/// `inc_in_place_args_t` of `sample_kernels.c`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IncInPlaceArgs {
    a: *mut u32,
    n: u32,
}

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no {field} in /proc/self/status"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The child: one replayed dispatch over [`FOOTPRINT`] bytes, the high-water, the memcpy.
pub(crate) fn child(dir: &Path, kernels: &Path) -> Result<(), String> {
    let hsa = Hsa::open_in(dir)?;
    hsa.init()?;
    let result = measure(&hsa, kernels);
    let shut = hsa.shut_down();
    let (base, hwm, memcpy_ns, async_ns) = result?;
    shut?;
    println!(
        "{RESULT_PREFIX} base_kib={base} hwm_kib={hwm} memcpy_ns={memcpy_ns:.0} \
         async_copy_ns={async_ns:.0}"
    );
    Ok(())
}

/// The dispatch and the measurements: (RSS before the buffer, high-water, memcpy ns, the
/// application's own D2D async copy ns).
fn measure(hsa: &Hsa, kernels: &Path) -> Result<(u64, u64, f64, f64), String> {
    let (gpu, cpu) = gpu_and_cpu(hsa)?;
    use rocprof_replay_sys::{
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED as COARSE,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT as KERNARG,
    };
    let device_pool = hsa
        .find_pool(gpu, COARSE, 0)?
        .ok_or("the GPU agent has no coarse-grained global pool")?;
    let kernarg_pool = hsa
        .find_pool(cpu, KERNARG, 0)?
        .ok_or("the CPU agent has no kernarg pool")?;
    let exe = hsa.load_code_object(kernels, gpu)?;
    let kernel = exe.kernel(gpu, "inc_in_place")?;
    let base = status_kib("VmRSS:")?;
    let device = hsa.allocate(device_pool, FOOTPRINT)?;
    let n = u32::try_from(FOOTPRINT / 4).map_err(|_| "too many elements")?;
    let args = IncInPlaceArgs {
        a: device.as_ptr().cast(),
        n,
    };
    let kernarg = hsa.make_kernarg(kernarg_pool, &kernel, &args)?;
    let done = hsa.signal(0)?;
    let queue = hsa.create_queue(gpu, QUEUE_SIZE)?;
    // SAFETY: `kernarg` holds `inc_in_place` arguments for `device` (`n` u32) and the grid is
    // `n` work-items; `device` and `kernarg` outlive the dispatcher; the host reads `device`
    // only after the round trip waited for the dispatch.
    let dispatcher = unsafe {
        Dispatcher::new(
            &queue,
            &kernel,
            &kernarg,
            WORKGROUP_SIZE,
            n,
            &done,
            (hsa.timestamp_frequency() / 10).max(1),
        )
    };
    // The first dispatch sizes the arena (a fresh chunk: page faults on first touch); the
    // second, measured one, reuses it as every later dispatch of the same footprint does.
    dispatcher.round_trip()?;
    dispatcher.round_trip()?;
    // SAFETY: on hsa-emu (the only runtime this benchmark runs on) device memory is host
    // memory; the dispatch is complete and nothing else uses the buffer.
    let a = unsafe { std::slice::from_raw_parts(device.as_ptr().cast::<u32>(), n as usize) };
    if let Some(i) = a.iter().position(|&x| x != 2) {
        return Err(format!(
            "a[{i}] = {} after two dispatches (want 2: one execution each)",
            a[i]
        ));
    }
    let hwm = status_kib("VmHWM:")?;
    // The application's own device-to-device copy of the footprint, for comparison.
    let copy_to = hsa.allocate(device_pool, FOOTPRINT)?;
    let copied = hsa.signal(0)?;
    let mut async_times = Vec::with_capacity(MEMCPY_RUNS);
    for _ in 0..MEMCPY_RUNS {
        copied.store(1);
        let start = Instant::now();
        // SAFETY: two live device buffers of FOOTPRINT bytes that nothing else uses; the wait
        // below sees the copy done, or both buffers are leaked (the copy may still run).
        unsafe {
            hsa.async_copy(
                copy_to.as_ptr(),
                gpu,
                device.as_ptr(),
                gpu,
                FOOTPRINT,
                &copied,
            )
        }?;
        if let Err(e) = copied.wait_zero_by(
            "hsa_amd_memory_async_copy",
            (hsa.timestamp_frequency() / 10).max(1),
            start,
            std::time::Duration::from_secs(60),
        ) {
            std::mem::forget(copy_to);
            std::mem::forget(device);
            return Err(e);
        }
        async_times.push(start.elapsed().as_nanos() as f64);
    }
    drop(copy_to);
    let src = vec![1u8; FOOTPRINT];
    let mut dst = vec![0u8; FOOTPRINT];
    let times: Vec<f64> = (0..MEMCPY_RUNS)
        .map(|_| {
            let start = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            start.elapsed().as_nanos() as f64
        })
        .collect();
    drop((queue, done, kernarg, device));
    Ok((base, hwm, median(times), median(async_times)))
}

/// What one child run gave.
struct Sample {
    staging: String,
    host_side_mib: f64,
    ratio: f64,
    capture_ms: f64,
    restore_ms: f64,
    memcpy_ms: f64,
    async_copy_ms: f64,
}

fn run_child(
    exe: &Path,
    inputs: &crate::replay::Inputs,
    pinned: bool,
    i: usize,
) -> Result<Sample, String> {
    let records = std::env::temp_dir().join(format!(
        "emu-bench-device-tier-{}-{pinned}-{i}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&records);
    let mut cmd = Command::new(exe);
    cmd.arg(CHILD_SUBCOMMAND)
        .arg(&inputs.emu_dir)
        .arg(&inputs.kernels)
        .env("LD_LIBRARY_PATH", &inputs.emu_dir)
        .env("LD_PRELOAD", &inputs.tool)
        .env("ROCPROF_REPLAY_PASSES", "2")
        .env("ROCPROF_REPLAY_RESTORE", "full")
        .env("ROCPROF_REPLAY_LOG", "off")
        .env("ROCPROF_REPLAY_OUTPUT", &records)
        .env("HSA_EMU_VRAM_MB", "4096")
        .env_remove("HSA_TOOLS_LIB")
        .stdin(Stdio::null());
    if pinned {
        cmd.env("ROCPROF_REPLAY_DEVICE_RESERVE_MB", "1000000");
    } else {
        cmd.env_remove("ROCPROF_REPLAY_DEVICE_RESERVE_MB");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .ok_or_else(|| format!("no result line in {stdout:?}"))?;
    let field = |key: &str| -> Result<f64, String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {key} in {line:?}"))
    };
    let text = std::fs::read_to_string(&records)
        .map_err(|e| format!("no records in {}: {e}", records.display()))?;
    let _ = std::fs::remove_file(&records);
    let record = text
        .lines()
        .filter(|l| l.contains("\"inc_in_place\""))
        .nth(1)
        .ok_or("no record of the second inc_in_place dispatch")?;
    let num = |key: &str| -> Result<f64, String> {
        let at = record
            .find(&format!("\"{key}\":"))
            .ok_or_else(|| format!("no {key} in {record}"))?;
        let rest = &record[at + key.len() + 3..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end]
            .parse()
            .map_err(|_| format!("bad {key} in {record}"))
    };
    let staging = if record.contains("\"staging\":\"device\"") {
        "device"
    } else if record.contains("\"staging\":\"pinned_host\"") {
        "pinned_host"
    } else {
        return Err(format!("unexpected staging in {record}"));
    };
    if !record.contains("\"outcome\":\"replayed\"") || num("passes")? != 2.0 {
        return Err(format!("not replayed with 2 passes: {record}"));
    }
    let snapshot = num("snapshot_bytes")?;
    let vram_touched_kib =
        (FOOTPRINT as f64 + if staging == "device" { snapshot } else { 0.0 }) / 1024.0;
    let host_side_kib = field("hwm_kib")? - field("base_kib")? - vram_touched_kib;
    let (capture, restore, memcpy) = (num("snapshot_ns")?, num("restore_ns")?, field("memcpy_ns")?);
    Ok(Sample {
        staging: staging.into(),
        host_side_mib: host_side_kib / 1024.0,
        ratio: 2.0 * memcpy / (capture + restore),
        capture_ms: capture / 1e6,
        restore_ms: restore / 1e6,
        memcpy_ms: memcpy / 1e6,
        async_copy_ms: field("async_copy_ns")? / 1e6,
    })
}

/// The parent: [`RUNS`] children per tier, medians.
pub(crate) fn run(inputs: &crate::replay::Inputs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    println!(
        "emu-bench device-tier: 1 GiB footprint, pass_timer 2 passes, full restore, \
         HSA_EMU_VRAM_MB=4096, median of {RUNS} runs per tier"
    );
    println!(
        "tier         host-side high-water MiB  capture ms  restore ms  memcpy ms  app D2D copy ms  2*memcpy/(capture+restore)"
    );
    let mut device_hwm = 0.0;
    for pinned in [false, true] {
        let samples = (0..RUNS)
            .map(|i| run_child(&exe, inputs, pinned, i))
            .collect::<Result<Vec<_>, _>>()?;
        let want = if pinned { "pinned_host" } else { "device" };
        if let Some(s) = samples.iter().find(|s| s.staging != want) {
            return Err(format!(
                "expected staging {want}, the record says {}",
                s.staging
            ));
        }
        let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        let hwm = m(|s| s.host_side_mib);
        if !pinned {
            device_hwm = hwm;
        }
        println!(
            "{want:<12} {hwm:>24.1}  {:>10.1}  {:>10.1}  {:>9.1}  {:>15.1}  {:>26.2}",
            m(|s| s.capture_ms),
            m(|s| s.restore_ms),
            m(|s| s.memcpy_ms),
            m(|s| s.async_copy_ms),
            m(|s| s.ratio),
        );
    }
    println!("host-side high-water with the device tier: {device_hwm:.1} MiB (target <= 64 MiB)");
    Ok(())
}
