//! `emu-bench`: measurements of hsa-emu, made through its C API like an application, and of
//! what kernel replay costs on it.
//!
//! | command | what it does |
//! |---|---|
//! | `emu-bench` | builds and installs hsa-emu (same cargo profile) and compiles the sample kernels under `<target>/emu-bench/` ([`prepare`], with the demo's [`build`] steps), then measures 1 and 2 |
//! | `emu-bench DIR KERNELS.so` | measures 1 and 2 on the `libhsa-runtime64.so.1` in `DIR` with the code object `KERNELS.so` (`examples/kernels/sample_kernels.c` built with `cc -shared -fPIC -O2 -I hsa-emu/include`) |
//! | `emu-bench replay` | prepares as `emu-bench` does and also builds the `pass_timer` tool (`rocprof-replay-example-pass-timer`, same profile), then measures 3 |
//! | `emu-bench replay DIR KERNELS.so TOOL.so` | measures 3 with that runtime, code object and tool library |
//! | `emu-bench replay-child DIR KERNELS.so` | internal: one configuration of measurement 3, started by `emu-bench replay` |
//!
//! 1. **Round trip**: on one queue of the first GPU agent, [`WARMUP`] then [`DISPATCHES`]
//!    dispatches of `empty_kernel` (one work-item), each timed from reserving the packet slot to
//!    the return of a blocking `hsa_signal_wait_scacquire` that saw the completion signal at 0.
//!    Prints the median, p90, p99, minimum and maximum in microseconds.
//! 2. **Idle CPU**: creates [`IDLE_QUEUES`] queues, lets them settle, sleeps [`IDLE_WINDOW`]
//!    and prints the process CPU time used meanwhile (`getrusage(RUSAGE_SELF)`, user + system,
//!    every thread) as a percentage of one core, and the context switches per second.
//! 3. **Replay overhead** ([`replay`]): in one child process per configuration (no tool, then
//!    the `pass_timer` tool with 1, 2, 4 and 8 passes), dispatches of `inc_in_place` over 1 MiB
//!    of coarse-grained device memory, each waited for; prints the median and p90 per dispatch
//!    of each, the cost per pass and the fixed cost per replayed dispatch from a least-squares
//!    fit, and the ratio of 8 passes to one plain dispatch.
//!
//! The runtime is opened by path and driven through the demo's HSA wrapper
//! ([`rocprof_replay_demo::hsa`]); its objects are released when dropped.
//!
//! Nothing about speed is asserted: this is a measurement, not a test. Exit status 0 when the
//! measurements ran, 1 when a step failed, 64 on bad usage. Run the release build for
//! meaningful figures.

mod device_tier;
mod replay;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rocprof_replay_demo::build::{self, Builder};
use rocprof_replay_demo::hsa::{Agent, Hsa, Kernel, PoolBuffer, Queue, RUNTIME_SONAME, Signal};
use rocprof_replay_sys as sys;

/// Untimed dispatches before the measured ones.
const WARMUP: usize = 200;
/// Timed dispatches.
const DISPATCHES: usize = 2000;
/// Queues alive during the idle window.
const IDLE_QUEUES: usize = 4;
/// Time between creating the idle queues and starting the window (thread start-up).
const IDLE_SETTLE: Duration = Duration::from_millis(200);
/// Length of the idle window.
const IDLE_WINDOW: Duration = Duration::from_secs(2);
/// The kernel dispatched by the round-trip measurement.
const KERNEL: &str = "empty_kernel";
/// Requested ring size of every queue, in packets (raised to the agent's minimum).
const QUEUE_SIZE: u32 = 64;
/// How long one round trip may take, from reserving the packet slot, before the benchmark
/// gives up.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

const USAGE: &str = "usage: emu-bench                     build hsa-emu and the sample kernels, then measure\n       \
                     emu-bench DIR KERNELS.so      measure DIR/libhsa-runtime64.so.1 with KERNELS.so\n       \
                     emu-bench replay              also build the pass_timer tool, then measure replay\n       \
                     emu-bench replay DIR KERNELS.so TOOL.so\n       \
                     \x20                             measure replay with that runtime, kernels and tool\n       \
                     emu-bench device-tier [DIR KERNELS.so TOOL.so]\n       \
                     \x20                             snapshot tiers with a 1 GiB footprint: host-side high-water, capture + restore vs memcpy";

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let result = match args.as_slice() {
        [] => prepare().and_then(|(dir, kernels)| measure(&dir, &kernels)),
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        [command] if command == "replay" => replay::prepare().and_then(|i| replay::run(&i)),
        [command, dir, kernels, tool] if command == "replay" => replay::run(&replay::Inputs {
            emu_dir: PathBuf::from(dir),
            kernels: PathBuf::from(kernels),
            tool: PathBuf::from(tool),
        }),
        [command] if command == "device-tier" => {
            replay::prepare().and_then(|i| device_tier::run(&i))
        }
        [command, dir, kernels, tool] if command == "device-tier" => {
            device_tier::run(&replay::Inputs {
                emu_dir: PathBuf::from(dir),
                kernels: PathBuf::from(kernels),
                tool: PathBuf::from(tool),
            })
        }
        [command, dir, kernels] if command == device_tier::CHILD_SUBCOMMAND => {
            device_tier::child(Path::new(dir), Path::new(kernels))
        }
        [command, dir, kernels] if command == replay::CHILD_SUBCOMMAND => {
            replay::child(Path::new(dir), Path::new(kernels))
        }
        [dir, kernels] => measure(Path::new(dir), Path::new(kernels)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(64);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("emu-bench: error: {why}");
            ExitCode::FAILURE
        }
    }
}

/// `emu-bench` without arguments: installs hsa-emu as
/// `<target>/emu-bench/hsa-emu/libhsa-runtime64.so.1` (`cargo run -q [--release] -p hsa-emu
/// --bin hsa-emu-install`, the profile of this program) and compiles the sample kernels into
/// `<target>/emu-bench/libsample_kernels.so`; returns the directory and the code object.
fn prepare() -> Result<(PathBuf, PathBuf), String> {
    let out = build::target_dir()?.join("emu-bench");
    let builder = Builder::new("emu-bench: ")?;
    let emu_dir = out.join("hsa-emu");
    builder.install_emulator(&emu_dir)?;
    let kernels = out.join("libsample_kernels.so");
    builder.compile_kernels(&kernels)?;
    Ok((emu_dir, kernels))
}

/// Runs both measurements against the runtime in `dir`, printing the results.
fn measure(dir: &Path, kernels: &Path) -> Result<(), String> {
    let hsa = Hsa::open_in(dir)?;
    println!(
        "emu-bench: runtime {} ({} build of emu-bench, {} CPUs available)",
        dir.join(RUNTIME_SONAME).display(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    println!("emu-bench: kernels {}", kernels.display());
    hsa.init()?;
    let result = round_trip(&hsa, kernels).and_then(|()| idle(&hsa));
    let shut = hsa.shut_down();
    result.and(shut)
}

/// The first GPU agent and the first CPU agent.
fn gpu_and_cpu(hsa: &Hsa) -> Result<(Agent, Agent), String> {
    let agents = hsa.agents()?;
    let first = |device| agents.iter().copied().find(|a| a.device == device);
    let gpu = first(sys::HSA_DEVICE_TYPE_GPU).ok_or("the runtime reports no GPU agent")?;
    let cpu = first(sys::HSA_DEVICE_TYPE_CPU).ok_or("the runtime reports no CPU agent")?;
    Ok((gpu, cpu))
}

/// Measurement 1: empty-kernel dispatch round trips.
fn round_trip(hsa: &Hsa, kernels: &Path) -> Result<(), String> {
    let (gpu, cpu) = gpu_and_cpu(hsa)?;
    let exe = hsa.load_code_object(kernels, gpu)?;
    let kernel = exe.kernel(gpu, KERNEL)?;
    let pool = hsa
        .find_pool(cpu, sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, 0)?
        .ok_or("the CPU agent has no kernarg pool")?;
    let mut kernarg = hsa.allocate(pool, (kernel.kernarg_size() as usize).max(1))?;
    // Zero is a valid `empty_kernel_args_t`.
    kernarg.host_slice_mut::<u8>()?.fill(0);
    let done = hsa.signal(0)?;
    let queue = hsa.create_queue(gpu, QUEUE_SIZE)?;
    // SAFETY: `kernarg` holds a zeroed `empty_kernel_args_t` (a valid one) for `empty_kernel`,
    // which points to no buffer; `kernarg` outlives the dispatcher (declared before it).
    let dispatcher = unsafe {
        Dispatcher::new(
            &queue,
            &kernel,
            &kernarg,
            1,
            1,
            &done,
            (hsa.timestamp_frequency() / 10).max(1),
        )
    };
    for _ in 0..WARMUP {
        dispatcher.round_trip()?;
    }
    let samples = (0..DISPATCHES)
        .map(|_| dispatcher.round_trip())
        .collect::<Result<Vec<Duration>, String>>()?;
    // Every dispatch was waited for, so nothing is in flight when the queue, the signal, the
    // kernarg buffer and the executable are dropped (in that order) here.
    let s = Stats::of(samples);
    println!(
        "round trip ({KERNEL}, 1 work-item; {DISPATCHES} dispatches after {WARMUP} warm-up): \
         median {:.2} us, p90 {:.2} us, p99 {:.2} us, min {:.2} us, max {:.2} us",
        s.median, s.p90, s.p99, s.min, s.max
    );
    Ok(())
}

/// Everything one dispatch of a kernel needs, resolved once so the timed part makes only
/// the calls an application makes per dispatch.
struct Dispatcher<'a, 'h> {
    /// The queue.
    queue: &'a Queue<'h>,
    /// The kernel.
    kernel: &'a Kernel<'a>,
    /// Its kernel arguments.
    kernarg: &'a PoolBuffer<'h>,
    /// Work-items per work-group.
    workgroup_size: u16,
    /// Work-items in the grid.
    grid_size: u32,
    /// The completion signal.
    done: &'a Signal<'h>,
    /// Timeout hint of one `hsa_signal_wait_scacquire` call, in timestamp ticks (~100 ms).
    wait_hint: u64,
}

impl<'a, 'h> Dispatcher<'a, 'h> {
    /// A dispatcher of 1-D dispatches of `kernel` over `grid_size` work-items in groups of
    /// `workgroup_size`, with the arguments in `kernarg` and the completion signal `done`;
    /// `wait_hint` is the timeout hint of one wait, in timestamp ticks.
    ///
    /// # Safety
    /// `kernarg` must hold valid arguments of `kernel` for that geometry; every buffer they
    /// point to must stay allocated while the dispatcher exists, and the host must not access
    /// them during a [`Dispatcher::round_trip`] (between round trips, nothing runs).
    unsafe fn new(
        queue: &'a Queue<'h>,
        kernel: &'a Kernel<'a>,
        kernarg: &'a PoolBuffer<'h>,
        workgroup_size: u16,
        grid_size: u32,
        done: &'a Signal<'h>,
        wait_hint: u64,
    ) -> Self {
        Self {
            queue,
            kernel,
            kernarg,
            workgroup_size,
            grid_size,
            done,
            wait_hint,
        }
    }

    /// One round trip: sets the completion signal to 1 (untimed), then times reserving a slot,
    /// writing the dispatch packet, ringing the doorbell and blocking
    /// `hsa_signal_wait_scacquire` calls until the signal reads 0.
    ///
    /// If the wait fails the dispatch may still be running, so nothing it uses may be freed:
    /// the process exits at once with status 1.
    fn round_trip(&self) -> Result<Duration, String> {
        self.done.store(1);
        let start = Instant::now();
        // SAFETY: by the contract of `Dispatcher::new`, `kernarg` holds valid arguments for
        // `kernel` at this geometry and what they point to is allocated and left alone by the
        // host until this call returns; `kernarg` is borrowed for the dispatcher's life; the
        // wait below either sees the dispatch complete or ends the process.
        unsafe {
            self.queue.dispatch_1d(
                self.kernel,
                self.kernarg,
                self.workgroup_size,
                self.grid_size,
                self.done,
            )?
        };
        if let Err(why) = self.done.wait_zero_by(
            self.kernel.name(),
            self.wait_hint,
            start,
            ROUND_TRIP_TIMEOUT,
        ) {
            eprintln!("emu-bench: error: {why}");
            std::process::exit(1);
        }
        Ok(start.elapsed())
    }
}

/// Round-trip statistics in microseconds.
struct Stats {
    median: f64,
    p90: f64,
    p99: f64,
    min: f64,
    max: f64,
}

impl Stats {
    /// Median (mean of the middle two for an even count) and nearest-rank percentiles.
    fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let n = samples.len();
        if n == 0 {
            return Stats {
                median: 0.0,
                p90: 0.0,
                p99: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        let rank = |p: f64| us(samples[((p / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1]);
        let median = if n % 2 == 1 {
            us(samples[n / 2])
        } else {
            (us(samples[n / 2 - 1]) + us(samples[n / 2])) / 2.0
        };
        Stats {
            median,
            p90: rank(90.0),
            p99: rank(99.0),
            min: us(samples[0]),
            max: us(samples[n - 1]),
        }
    }
}

/// CPU time (user + system) of every thread of the process, and its context switches.
fn process_usage() -> Result<(Duration, i64), String> {
    // SAFETY: all-zero is a valid `rusage` (integers only).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer; RUSAGE_SELF always exists.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Err(format!(
            "getrusage failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Ok((
        tv(ru.ru_utime) + tv(ru.ru_stime),
        ru.ru_nvcsw + ru.ru_nivcsw,
    ))
}

/// Measurement 2: CPU used by a process whose queues are idle.
fn idle(hsa: &Hsa) -> Result<(), String> {
    let (gpu, _) = gpu_and_cpu(hsa)?;
    let mut queues = Vec::with_capacity(IDLE_QUEUES);
    for _ in 0..IDLE_QUEUES {
        queues.push(hsa.create_queue(gpu, QUEUE_SIZE)?);
    }
    std::thread::sleep(IDLE_SETTLE);
    let (cpu0, csw0) = process_usage()?;
    let wall0 = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let (cpu1, csw1) = process_usage()?;
    let wall = wall0.elapsed();
    drop(queues);
    let (cpu, switches) = (cpu1.saturating_sub(cpu0), csw1 - csw0);
    let secs = wall.as_secs_f64();
    println!(
        "idle ({IDLE_QUEUES} queues, {secs:.2} s window): {:.1} ms CPU = {:.3} % of one core, \
         {:.0} context switches/s",
        cpu.as_secs_f64() * 1e3,
        cpu.as_secs_f64() / secs * 100.0,
        switches as f64 / secs
    );
    Ok(())
}
