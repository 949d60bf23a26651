//! Restore throughput: one snapshot restore (the work done between two replay passes) against
//! a plain `copy_from_slice` of the same bytes, for 1, 16 and 256 MiB split over 4 regions.
//!
//! The restore goes through the real engine path (`SnapshotPlan` → `Snapshot::capture` →
//! `Snapshot::restore`, with the inventory's read lock and per-region liveness check) over
//! host memory, via `rocprof_replay::__bench`. Run with
//! `cargo bench -p rocprof-replay --bench restore`; criterion's usual arguments (a filter,
//! `--measurement-time`, `--sample-size`, ...) override the short defaults below. After the
//! criterion report a summary table gives the median time per restore and per copy, both as
//! GB/s (10^9 bytes per second), and the ratio restore / memcpy.
//!
//! Then (with `--bench` only) the write-set rows: a 1 GiB footprint (4 regions) of which the
//! "kernel" wrote 1% (one 4 KiB granule in every 100, scattered, so nothing merges) or 100%.
//! The engine restores the 1% case with a write-set restore and the 100% case with full copies
//! (a dense writer); the table gives the median restore per pass of each, their ratio (target
//! ≤ 0.05, issue 14) and the median diff (one read and compare of the whole footprint; a
//! write-set dispatch runs two: after pass 1 and after the last pass).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use rocprof_replay::__bench::RestoreBench;

const MIB: usize = 1 << 20;
/// Total bytes per case.
const SIZES: [usize; 3] = [MIB, 16 * MIB, 256 * MIB];
/// Regions each total is split into.
const REGIONS: usize = 4;
/// Samples per benchmark unless `--sample-size` says otherwise.
const SAMPLE_SIZE: usize = 10;

/// `REGIONS` buffers of `total / REGIONS` bytes filled with `byte` (non-zero, so every page is
/// really touched before timing starts).
fn buffers(total: usize, byte: u8) -> Vec<Vec<u8>> {
    (0..REGIONS).map(|_| vec![byte; total / REGIONS]).collect()
}

/// Median of per-iteration times, in seconds.
fn median(mut samples: Vec<f64>) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    Some(if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    })
}

/// Times `iters` calls of `f` and records the time per call.
fn timed(iters: u64, record: &mut Vec<f64>, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    let elapsed = start.elapsed();
    record.push(elapsed.as_secs_f64() / iters.max(1) as f64);
    elapsed
}

/// One size: the measured medians (seconds per restore, per copy), when both ran.
struct Row {
    total: usize,
    restore: Option<f64>,
    memcpy: Option<f64>,
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) criterion runs every
    // routine once as a smoke test and the medians mean nothing.
    let args: Vec<String> = std::env::args().collect();
    let measuring = args.iter().any(|a| a == "--bench");
    let samples = args
        .iter()
        .position(|a| a == "--sample-size")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(SAMPLE_SIZE);

    let mut rows = Vec::new();
    for total in SIZES {
        let label = format!("{} MiB", total / MIB);
        let mut group = c.benchmark_group("restore");
        group.throughput(Throughput::Bytes(total as u64));
        // Same iteration count in every sample: a 256 MiB copy is too slow for linear sampling
        // to fit the short measurement time.
        group.sampling_mode(SamplingMode::Flat);

        // The engine's restore. Criterion calls the routine once per sample after the
        // warm-up, so the last `sample_size` records are the measured samples.
        let mut regions = buffers(total, 0xA5);
        let mut restore_times = Vec::new();
        {
            let mut bench = RestoreBench::capture(&mut regions);
            assert_eq!(bench.bytes(), total as u64);
            group.bench_function(BenchmarkId::new("snapshot_restore", &label), |b| {
                b.iter_custom(|iters| {
                    timed(iters, &mut restore_times, || {
                        black_box(bench.restore());
                    })
                })
            });
        }
        drop(regions);

        // The baseline: the same bytes in the same 4 pieces, host to host.
        let src = buffers(total, 0x5A);
        let mut dst = buffers(total, 0xA5);
        let mut memcpy_times = Vec::new();
        group.bench_function(BenchmarkId::new("memcpy", &label), |b| {
            b.iter_custom(|iters| {
                timed(iters, &mut memcpy_times, || {
                    for (d, s) in dst.iter_mut().zip(&src) {
                        d.copy_from_slice(black_box(s));
                    }
                    black_box(&mut dst);
                })
            })
        });
        group.finish();

        let keep = |mut v: Vec<f64>| v.split_off(v.len().saturating_sub(samples));
        rows.push(Row {
            total,
            restore: median(keep(restore_times)),
            memcpy: median(keep(memcpy_times)),
        });
    }
    c.final_summary();

    if !measuring {
        return;
    }
    write_set_rows();
    let gbps = |total: usize, secs: f64| total as f64 / secs / 1e9;
    println!();
    println!("restore vs memcpy (median per call; GB = 10^9 bytes, {REGIONS} regions)");
    println!(
        "{:>8}  {:>12} {:>9}  {:>12} {:>9}  {:>15}",
        "total", "restore", "GB/s", "memcpy", "GB/s", "restore/memcpy"
    );
    for row in rows {
        let (Some(r), Some(m)) = (row.restore, row.memcpy) else {
            continue; // filtered out on the command line
        };
        println!(
            "{:>8}  {:>12} {:>9.2}  {:>12} {:>9.2}  {:>15.3}",
            format!("{} MiB", row.total / MIB),
            format!("{:.1?}", Duration::from_secs_f64(r)),
            gbps(row.total, r),
            format!("{:.1?}", Duration::from_secs_f64(m)),
            gbps(row.total, m),
            r / m
        );
    }
}

/// Restore per pass when the kernel wrote 1% of a 1 GiB footprint, against 100%.
fn write_set_rows() {
    const TOTAL: usize = 1 << 30;
    const RUNS: usize = 11;
    let mut regions = buffers(TOTAL, 0xA5);
    let mut bench = RestoreBench::capture(&mut regions);
    let mut rows = Vec::new();
    for (label, step, write_set) in [("1%", 100usize, true), ("100%", 1, false)] {
        bench.scribble(step);
        let mut diffs = Vec::new();
        let mut written = 0;
        for _ in 0..3 {
            let s = Instant::now();
            written = black_box(bench.diff());
            diffs.push(s.elapsed().as_secs_f64());
        }
        let mut restores = Vec::new();
        for _ in 0..RUNS {
            bench.scribble(step);
            let s = Instant::now();
            // As the engine would: the 1% writer gets a write-set restore, the 100% one
            // (a dense writer) plain full copies.
            black_box(if write_set {
                bench.restore_write_set()
            } else {
                bench.restore()
            });
            restores.push(s.elapsed().as_secs_f64());
        }
        rows.push((
            label,
            written,
            median(restores).unwrap_or(f64::NAN),
            median(diffs).unwrap_or(f64::NAN),
        ));
    }
    println!();
    println!("write-set restore, 1 GiB footprint in {REGIONS} regions (median of {RUNS})");
    println!(
        "{:>6}  {:>14}  {:>16}  {:>12}",
        "wrote", "written bytes", "restore / pass", "diff"
    );
    for (label, written, restore, diff) in &rows {
        println!(
            "{:>6}  {:>14}  {:>16}  {:>12}",
            label,
            written,
            format!("{:.1?}", Duration::from_secs_f64(*restore)),
            format!("{:.1?}", Duration::from_secs_f64(*diff)),
        );
    }
    println!(
        "restore per pass, 1% / 100%: {:.4} (target <= 0.05)",
        rows[0].2 / rows[1].2
    );
}
