//! `rocprof-replay-demo app KERNELS.so`: the HSA application of the demo.
//!
//! An ordinary HSA program, written in Rust against `rocprof-replay-sys` types. It knows
//! nothing about replay: it finds a GPU agent and its memory pools, loads the sample kernels,
//! and runs three dispatches on one queue, checking every result exactly:
//!
//! 1. `vector_add` over 65536 floats: `c[i] == a[i] + b[i]`, bit for bit;
//! 2. `inc_in_place` over 4096 `u32` in device memory: `a[i] == i + 1`, and the module
//!    variable `hit_counter` (which the kernel bumps once per execution) is 1;
//! 3. `inc_in_place` again: `a[i] == i + 2`, counter 2.
//!
//! Under a replay tool each dispatch runs several times, but the tool restores device memory
//! and module variables between passes, so these checks pass only if the application observes
//! exactly one execution of each dispatch.
//!
//! Exit status: 0 all results correct, 1 a wrong result, 2 an HSA call failed or a deadline
//! expired.

use std::path::Path;
use std::process::ExitCode;

use rocprof_replay_sys as sys;

use rocprof_replay_demo::hsa::{
    Agent, Executable, Hsa, Kernel, Pool, PoolBuffer, Queue, RUNTIME_SONAME, Signal,
};

/// Elements of the `vector_add` vectors.
const VECTOR_ADD_N: u32 = 1 << 16;
/// Elements of the `inc_in_place` buffer.
const INC_N: u32 = 4096;
/// Work-items per work-group of every dispatch.
const WORKGROUP_SIZE: u16 = 256;

/// Kernel arguments of `vector_add` (`vector_add_args_t` in `sample_kernels.c`).
#[repr(C)]
#[derive(Clone, Copy)]
struct VectorAddArgs {
    /// First input, `n` floats in device memory.
    a: *const f32,
    /// Second input, `n` floats in device memory.
    b: *const f32,
    /// Output, `n` floats in device memory.
    c: *mut f32,
    /// Number of elements.
    n: u32,
}

/// Kernel arguments of `inc_in_place` (`inc_in_place_args_t` in `sample_kernels.c`).
#[repr(C)]
#[derive(Clone, Copy)]
struct IncInPlaceArgs {
    /// The buffer incremented in place, `n` u32 in device memory.
    a: *mut u32,
    /// Number of elements.
    n: u32,
}

/// Why the application failed.
enum Failure {
    /// A result was wrong (exit 1).
    Wrong(String),
    /// An HSA call failed or a deadline expired (exit 2).
    Hsa(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Hsa(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure::Hsa(message.to_owned())
    }
}

/// Runs the application on the code object `kernels` and returns its exit status.
pub(crate) fn main(kernels: &Path) -> ExitCode {
    match run(kernels) {
        Ok(()) => {
            println!("demo: all results correct");
            ExitCode::SUCCESS
        }
        Err(Failure::Wrong(why)) => {
            eprintln!("app: WRONG RESULT: {why}");
            ExitCode::from(1)
        }
        Err(Failure::Hsa(why)) => {
            eprintln!("app: HSA error: {why}");
            ExitCode::from(2)
        }
    }
}

/// Everything the dispatches need, found once.
struct Setup<'h> {
    /// The runtime.
    hsa: &'h Hsa,
    /// The first GPU agent: every dispatch runs there.
    gpu: Agent,
    /// Its coarse-grained pool: device buffers.
    device_pool: Pool,
    /// A CPU agent's fine-grained pool: host staging buffers.
    host_pool: Pool,
    /// The kernarg pool.
    kernarg_pool: Pool,
    /// One queue on `gpu` for all dispatches.
    queue: Queue<'h>,
    /// The completion signal, reused by every dispatch (set to 1 before each).
    done: Signal<'h>,
}

/// Opens and initialises the runtime, runs the steps, shuts down.
fn run(kernels: &Path) -> Result<(), Failure> {
    let hsa = Hsa::open()?;
    hsa.init()?;
    let result = run_initialized(&hsa, kernels);
    // Shut down even after a failure; the first failure is the one reported.
    let shut_down = hsa.shut_down();
    result?;
    Ok(shut_down?)
}

/// Finds the agent and pools, loads the kernels and runs the two steps.
fn run_initialized(hsa: &Hsa, kernels: &Path) -> Result<(), Failure> {
    let agents = hsa.agents()?;
    let of_type = |device| {
        agents
            .iter()
            .copied()
            .filter(move |a: &Agent| a.device == device)
    };
    let gpu = of_type(sys::HSA_DEVICE_TYPE_GPU)
        .next()
        .ok_or("no GPU agent")?;
    println!(
        "app: {RUNTIME_SONAME} loaded, GPU agent \"{}\"",
        hsa.agent_name(gpu)?
    );

    use sys::{
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED as COARSE,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED as FINE,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT as KERNARG,
    };
    let device_pool = hsa
        .find_pool(gpu, COARSE, 0)?
        .ok_or("the GPU agent has no coarse-grained global pool")?;
    let mut host_pool = None;
    for cpu in of_type(sys::HSA_DEVICE_TYPE_CPU) {
        host_pool = host_pool.or(hsa.find_pool(cpu, FINE, KERNARG)?);
    }
    let host_pool = host_pool.ok_or("no CPU agent has a fine-grained global pool")?;
    // On ROCr the kernarg pool belongs to a CPU agent; GPU agents are searched last.
    let mut kernarg_pool = None;
    for agent in of_type(sys::HSA_DEVICE_TYPE_CPU).chain(of_type(sys::HSA_DEVICE_TYPE_GPU)) {
        kernarg_pool = kernarg_pool.or(hsa.find_pool(agent, KERNARG, 0)?);
    }
    let kernarg_pool = kernarg_pool.ok_or("no memory pool with KERNARG_INIT")?;

    let exe = hsa.load_code_object(kernels, gpu)?;
    let setup = Setup {
        hsa,
        gpu,
        device_pool,
        host_pool,
        kernarg_pool,
        queue: hsa.create_queue(gpu, 64)?,
        done: hsa.signal(1)?,
    };

    vector_add(&setup, &exe)?;
    inc_in_place(&setup, &exe)
}

/// Steps 2 and 3: two `inc_in_place` dispatches over [`INC_N`] `u32` in device memory
/// (`a[i] = i` at first), each followed by `a[i] == i + k` and `hit_counter == k` checks.
///
/// `hit_counter` counts executions of the kernel; under replay it is restored between
/// passes like device memory, so it still counts what the application sees.
fn inc_in_place(setup: &Setup<'_>, exe: &Executable<'_>) -> Result<(), Failure> {
    let hsa = setup.hsa;
    let kernel = exe.kernel(setup.gpu, "inc_in_place")?;
    let counter = exe.variable(setup.gpu, "hit_counter")?;
    let mut host = setup.alloc_host::<u32>(INC_N)?;
    for (i, x) in host.host_slice_mut::<u32>()?.iter_mut().enumerate() {
        *x = i as u32;
    }
    let mut device = setup.alloc_device::<u32>(INC_N)?;
    hsa.copy(&mut device, &host)?;
    let args = IncInPlaceArgs {
        a: device.as_ptr().cast(),
        n: INC_N,
    };
    let kernarg = hsa.make_kernarg(setup.kernarg_pool, &kernel, &args)?;
    for (k, label) in [
        (1, "one execution seen by the app"),
        (2, "two executions seen by the app"),
    ] {
        // SAFETY: `kernarg` holds `inc_in_place_args_t` for `inc_in_place`: `device`, INC_N
        // u32, which (like `kernarg`) outlives the dispatch and its wait.
        unsafe { setup.dispatch_and_wait(&kernel, &kernarg, INC_N)? };
        hsa.copy(&mut host, &device)?;
        let a = host.host_slice_mut::<u32>()?;
        if let Some(i) = (0..INC_N).find(|&i| a[i as usize] != i + k) {
            let bad = (0..INC_N).filter(|&i| a[i as usize] != i + k).count();
            return Err(Failure::Wrong(format!(
                "inc_in_place: {bad} of {INC_N} elements wrong, first a[{i}] = {} (want {})",
                a[i as usize],
                i + k
            )));
        }
        let count: u32 = hsa.read_variable(&counter)?;
        if count != k {
            return Err(Failure::Wrong(format!(
                "inc_in_place: hit_counter = {count} after {k} dispatch(es), want {k}: \
                 the application saw {count} executions"
            )));
        }
        println!(
            "inc_in_place: a[i] == i + {k} for {INC_N} elements, counter = {count} ({label}) OK"
        );
    }
    Ok(())
}

impl<'h> Setup<'h> {
    /// A device buffer (coarse-grained GPU pool) of `n` elements of `T`.
    fn alloc_device<T>(&self, n: u32) -> Result<PoolBuffer<'h>, String> {
        self.hsa
            .allocate(self.device_pool, n as usize * size_of::<T>())
    }

    /// A host buffer (fine-grained system memory) of `n` elements of `T`.
    fn alloc_host<T>(&self, n: u32) -> Result<PoolBuffer<'h>, String> {
        self.hsa
            .allocate(self.host_pool, n as usize * size_of::<T>())
    }

    /// Submits `kernel` over `grid` work-items in groups of [`WORKGROUP_SIZE`] and waits for
    /// it: `self.done` is set to 1 and must reach 0 within 30 s.
    ///
    /// If the wait fails the dispatch may still be running, so nothing it uses may be freed:
    /// the process exits at once with status 2, as the C samples do.
    ///
    /// # Safety
    /// As [`Queue::dispatch_1d`], up to this function's return.
    unsafe fn dispatch_and_wait(
        &self,
        kernel: &Kernel<'_>,
        kernarg: &PoolBuffer<'_>,
        grid: u32,
    ) -> Result<(), String> {
        self.done.store(1);
        // SAFETY: forwarded from this function's contract, which lasts until the wait below
        // has seen the dispatch complete.
        unsafe {
            self.queue
                .dispatch_1d(kernel, kernarg, WORKGROUP_SIZE, grid, &self.done)?
        };
        if let Err(why) = self.done.wait_zero(kernel.name()) {
            eprintln!("app: HSA error: {why}");
            std::process::exit(2);
        }
        Ok(())
    }
}

/// Step 1: `c = a + b` over [`VECTOR_ADD_N`] floats, compared bit for bit with the host sum.
fn vector_add(setup: &Setup<'_>, exe: &Executable<'_>) -> Result<(), Failure> {
    let hsa = setup.hsa;
    let n = VECTOR_ADD_N;
    let kernel = exe.kernel(setup.gpu, "vector_add")?;
    let (mut host_a, mut host_b, mut host_c) = (
        setup.alloc_host::<f32>(n)?,
        setup.alloc_host::<f32>(n)?,
        setup.alloc_host::<f32>(n)?,
    );
    for (i, x) in host_a.host_slice_mut::<f32>()?.iter_mut().enumerate() {
        *x = i as f32;
    }
    for (i, x) in host_b.host_slice_mut::<f32>()?.iter_mut().enumerate() {
        *x = (2.0 * i as f64) as f32;
    }
    host_c.host_slice_mut::<f32>()?.fill(-1.0);
    let (mut dev_a, mut dev_b, mut dev_c) = (
        setup.alloc_device::<f32>(n)?,
        setup.alloc_device::<f32>(n)?,
        setup.alloc_device::<f32>(n)?,
    );
    hsa.copy(&mut dev_a, &host_a)?;
    hsa.copy(&mut dev_b, &host_b)?;
    hsa.copy(&mut dev_c, &host_c)?;

    let args = VectorAddArgs {
        a: dev_a.as_ptr().cast(),
        b: dev_b.as_ptr().cast(),
        c: dev_c.as_ptr().cast(),
        n,
    };
    let kernarg = hsa.make_kernarg(setup.kernarg_pool, &kernel, &args)?;
    // SAFETY: `kernarg` holds `vector_add_args_t` for `vector_add`: three buffers of `n`
    // floats, which (like `kernarg`) outlive the dispatch and its wait.
    unsafe { setup.dispatch_and_wait(&kernel, &kernarg, n)? };
    hsa.copy(&mut host_c, &dev_c)?;

    let (a, b) = (
        host_a.host_slice_mut::<f32>()?,
        host_b.host_slice_mut::<f32>()?,
    );
    let c = host_c.host_slice_mut::<f32>()?;
    let wrong = |i: &usize| c[*i].to_bits() != (a[*i] + b[*i]).to_bits();
    if let Some(i) = (0..n as usize).find(wrong) {
        let bad = (0..n as usize).filter(wrong).count();
        return Err(Failure::Wrong(format!(
            "vector_add: {bad} of {n} elements wrong, first c[{i}] = {} (want {})",
            c[i],
            a[i] + b[i]
        )));
    }
    println!("vector_add: {n} elements OK");
    Ok(())
}
