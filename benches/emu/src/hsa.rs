//! The few HSA calls the benchmarks make, on a runtime opened at run time with `libloading`.
//!
//! [`Hsa::open`] loads `DIR/libhsa-runtime64.so.1` by path and resolves each function by name
//! with its `rocprof-replay-sys` signature (the pattern of `examples/demo/src/hsa.rs`, cut down).
//! Objects are plain handles; the caller releases them in reverse order of creation.

use std::ffi::{CString, c_void};
use std::mem::{ManuallyDrop, size_of};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rocprof_replay_sys::{self as sys, Status};

/// The runtime's file name inside the directory given to [`Hsa::open`].
pub(crate) const RUNTIME_SONAME: &str = "libhsa-runtime64.so.1";

/// How long one completion may take before the benchmark gives up.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Declares [`Api`], one field per runtime function, and its by-name resolver.
macro_rules! api {
    ($($name:ident: $fn_t:ident,)*) => {
        /// The runtime functions the benchmarks call, resolved by name from the library.
        pub(crate) struct Api {
            $(pub(crate) $name: sys::$fn_t,)*
        }

        impl Api {
            /// Resolves every function; a missing one is an error naming it.
            fn resolve(lib: &libloading::Library) -> Result<Self, String> {
                Ok(Self { $($name: symbol::<sys::$fn_t>(lib, stringify!($name))?,)* })
            }
        }
    };
}

api! {
    hsa_init: hsa_init_fn_t,
    hsa_shut_down: hsa_shut_down_fn_t,
    hsa_system_get_info: hsa_system_get_info_fn_t,
    hsa_iterate_agents: hsa_iterate_agents_fn_t,
    hsa_agent_get_info: hsa_agent_get_info_fn_t,
    hsa_amd_agent_iterate_memory_pools: hsa_amd_agent_iterate_memory_pools_fn_t,
    hsa_amd_memory_pool_get_info: hsa_amd_memory_pool_get_info_fn_t,
    hsa_amd_memory_pool_allocate: hsa_amd_memory_pool_allocate_fn_t,
    hsa_amd_memory_pool_free: hsa_amd_memory_pool_free_fn_t,
    hsa_signal_create: hsa_signal_create_fn_t,
    hsa_signal_destroy: hsa_signal_destroy_fn_t,
    hsa_signal_store_relaxed: hsa_signal_store_relaxed_fn_t,
    hsa_signal_store_screlease: hsa_signal_store_screlease_fn_t,
    hsa_signal_wait_scacquire: hsa_signal_wait_scacquire_fn_t,
    hsa_queue_create: hsa_queue_create_fn_t,
    hsa_queue_destroy: hsa_queue_destroy_fn_t,
    hsa_queue_add_write_index_scacq_screl: hsa_queue_add_write_index_scacq_screl_fn_t,
    hsa_queue_load_read_index_scacquire: hsa_queue_load_read_index_scacquire_fn_t,
    hsa_code_object_reader_create_from_file: hsa_code_object_reader_create_from_file_fn_t,
    hsa_code_object_reader_destroy: hsa_code_object_reader_destroy_fn_t,
    hsa_executable_create_alt: hsa_executable_create_alt_fn_t,
    hsa_executable_load_agent_code_object: hsa_executable_load_agent_code_object_fn_t,
    hsa_executable_freeze: hsa_executable_freeze_fn_t,
    hsa_executable_get_symbol_by_name: hsa_executable_get_symbol_by_name_fn_t,
    hsa_executable_symbol_get_info: hsa_executable_symbol_get_info_fn_t,
    hsa_executable_destroy: hsa_executable_destroy_fn_t,
}

/// Looks up the C function `name` in `lib` as a `T`.
fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    let nul_terminated = format!("{name}\0");
    // SAFETY: every `T` passed here is the `rocprof-replay-sys` signature of the C function
    // `name` (layout-checked against the real headers there), so the symbol has this type.
    let sym = unsafe { lib.get::<T>(nul_terminated.as_bytes()) }
        .map_err(|e| format!("{RUNTIME_SONAME} has no function {name}: {e}"))?;
    Ok(*sym)
}

/// `Ok(())` on success, otherwise a message naming `what` and the [`Status`].
pub(crate) fn check(what: &str, raw: sys::hsa_status_t) -> Result<(), String> {
    sys::check(raw).map_err(|status: Status| format!("{what} failed: {status}"))
}

/// Iteration callback that appends each handle to the `Vec<H>` behind `data`.
unsafe extern "C" fn push_handle<H: Copy>(handle: H, data: *mut c_void) -> sys::hsa_status_t {
    // SAFETY: `data` is the `&mut Vec<H>` that `Hsa::collect` passed to the iteration, alive
    // and not otherwise used for the duration of that call.
    let out = unsafe { &mut *data.cast::<Vec<H>>() };
    out.push(handle);
    sys::HSA_STATUS_SUCCESS
}

/// The loaded runtime: its resolved functions and the library (never unloaded).
pub(crate) struct Hsa {
    /// The functions.
    pub(crate) api: Api,
    /// Kept loaded for the life of the process: the runtime's threads may still run code from
    /// it after `hsa_shut_down`.
    _lib: ManuallyDrop<libloading::Library>,
}

/// A kernel as a dispatch packet needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Kernel {
    /// `KERNEL_OBJECT`.
    pub(crate) object: u64,
    /// `KERNEL_KERNARG_SEGMENT_SIZE`.
    pub(crate) kernarg_size: u32,
    /// `KERNEL_GROUP_SEGMENT_SIZE`.
    pub(crate) group_size: u32,
    /// `KERNEL_PRIVATE_SEGMENT_SIZE`.
    pub(crate) private_size: u32,
}

impl Hsa {
    /// Loads `dir/libhsa-runtime64.so.1` and resolves every function the benchmarks use.
    pub(crate) fn open(dir: &Path) -> Result<Self, String> {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        let path = dir.join(RUNTIME_SONAME);
        // SAFETY: loading the runtime runs its initialisers, which are written to run in any
        // process that links it; this is what linking would do.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
        let lib = libloading::Library::from(lib);
        let api = Api::resolve(&lib)?;
        Ok(Self {
            api,
            _lib: ManuallyDrop::new(lib),
        })
    }

    /// `hsa_init`.
    pub(crate) fn init(&self) -> Result<(), String> {
        // SAFETY: `hsa_init` has no preconditions.
        check("hsa_init", unsafe { (self.api.hsa_init)() })
    }

    /// `hsa_shut_down`.
    pub(crate) fn shut_down(&self) -> Result<(), String> {
        // SAFETY: the caller has released every object it created.
        check("hsa_shut_down", unsafe { (self.api.hsa_shut_down)() })
    }

    /// `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY` (1 GHz if the runtime reports none).
    pub(crate) fn timestamp_frequency(&self) -> u64 {
        let mut freq = 0u64;
        // SAFETY: TIMESTAMP_FREQUENCY writes one u64.
        let status = unsafe {
            (self.api.hsa_system_get_info)(
                sys::HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
                (&raw mut freq).cast(),
            )
        };
        if status != sys::HSA_STATUS_SUCCESS || freq == 0 {
            1_000_000_000
        } else {
            freq
        }
    }

    /// Runs an iteration function with [`push_handle`] and returns what it visited.
    fn collect<H: Copy>(
        &self,
        what: &str,
        iterate: impl FnOnce(
            unsafe extern "C" fn(H, *mut c_void) -> sys::hsa_status_t,
            *mut c_void,
        ) -> sys::hsa_status_t,
    ) -> Result<Vec<H>, String> {
        let mut out: Vec<H> = Vec::new();
        check(what, iterate(push_handle::<H>, (&raw mut out).cast()))?;
        Ok(out)
    }

    /// A 32-bit agent attribute.
    fn agent_u32(&self, agent: sys::hsa_agent_t, attribute: sys::hsa_agent_info_t) -> u32 {
        let mut value = 0u32;
        // SAFETY: the attributes passed here (DEVICE, QUEUE_MIN_SIZE) each write one u32.
        let status =
            unsafe { (self.api.hsa_agent_get_info)(agent, attribute, (&raw mut value).cast()) };
        if status == sys::HSA_STATUS_SUCCESS {
            value
        } else {
            0
        }
    }

    /// The first GPU agent and the first CPU agent.
    pub(crate) fn gpu_and_cpu(&self) -> Result<(sys::hsa_agent_t, sys::hsa_agent_t), String> {
        let agents = self.collect("hsa_iterate_agents", |callback, data| {
            // SAFETY: `callback` has the C callback signature and `data` is what it expects.
            unsafe { (self.api.hsa_iterate_agents)(Some(callback), data) }
        })?;
        let of = |device| {
            agents
                .iter()
                .copied()
                .find(|&a| self.agent_u32(a, sys::HSA_AGENT_INFO_DEVICE) == device)
        };
        let gpu = of(sys::HSA_DEVICE_TYPE_GPU).ok_or("the runtime reports no GPU agent")?;
        let cpu = of(sys::HSA_DEVICE_TYPE_CPU).ok_or("the runtime reports no CPU agent")?;
        Ok((gpu, cpu))
    }

    /// The kernarg pool of `cpu` (a GLOBAL pool with `KERNARG_INIT` that allows allocation).
    pub(crate) fn kernarg_pool(
        &self,
        cpu: sys::hsa_agent_t,
    ) -> Result<sys::hsa_amd_memory_pool_t, String> {
        let pools = self.collect("hsa_amd_agent_iterate_memory_pools", |callback, data| {
            // SAFETY: `callback` has the C callback signature and `data` is what it expects.
            unsafe { (self.api.hsa_amd_agent_iterate_memory_pools)(cpu, Some(callback), data) }
        })?;
        for pool in pools {
            let (mut segment, mut flags, mut alloc) = (0u32, 0u32, false);
            // SAFETY: SEGMENT writes an `hsa_amd_segment_t` (u32), GLOBAL_FLAGS a u32 and
            // RUNTIME_ALLOC_ALLOWED a bool.
            let ok = unsafe {
                let info = self.api.hsa_amd_memory_pool_get_info;
                info(
                    pool,
                    sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
                    (&raw mut segment).cast(),
                ) == sys::HSA_STATUS_SUCCESS
                    && info(
                        pool,
                        sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                        (&raw mut flags).cast(),
                    ) == sys::HSA_STATUS_SUCCESS
                    && info(
                        pool,
                        sys::HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                        (&raw mut alloc).cast(),
                    ) == sys::HSA_STATUS_SUCCESS
            };
            if ok
                && segment == sys::HSA_AMD_SEGMENT_GLOBAL
                && alloc
                && flags & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT != 0
            {
                return Ok(pool);
            }
        }
        Err("the CPU agent has no kernarg pool".into())
    }

    /// `hsa_amd_memory_pool_allocate` of `bytes` (zero-filled by the caller if needed).
    pub(crate) fn allocate(
        &self,
        pool: sys::hsa_amd_memory_pool_t,
        bytes: usize,
    ) -> Result<NonNull<c_void>, String> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid place for the result; `pool` came from this runtime.
        let status =
            unsafe { (self.api.hsa_amd_memory_pool_allocate)(pool, bytes, 0, &raw mut ptr) };
        check("hsa_amd_memory_pool_allocate", status)?;
        NonNull::new(ptr).ok_or_else(|| "hsa_amd_memory_pool_allocate returned NULL".into())
    }

    /// `hsa_amd_memory_pool_free`.
    pub(crate) fn free(&self, ptr: NonNull<c_void>) -> Result<(), String> {
        // SAFETY: `ptr` came from `allocate` and is freed once.
        let status = unsafe { (self.api.hsa_amd_memory_pool_free)(ptr.as_ptr()) };
        check("hsa_amd_memory_pool_free", status)
    }

    /// `hsa_signal_create` with `initial` value and no consumer restriction.
    pub(crate) fn signal(&self, initial: i64) -> Result<sys::hsa_signal_t, String> {
        let mut raw = sys::hsa_signal_t::default();
        // SAFETY: no consumer list (0, NULL); `raw` is a valid place for the result.
        let status =
            unsafe { (self.api.hsa_signal_create)(initial, 0, std::ptr::null(), &raw mut raw) };
        check("hsa_signal_create", status)?;
        Ok(raw)
    }

    /// `hsa_signal_destroy`.
    pub(crate) fn destroy_signal(&self, signal: sys::hsa_signal_t) -> Result<(), String> {
        // SAFETY: a live signal of this runtime, destroyed once.
        check("hsa_signal_destroy", unsafe {
            (self.api.hsa_signal_destroy)(signal)
        })
    }

    /// `hsa_queue_create` (MULTI, no callback) with the agent's smallest ring size.
    pub(crate) fn create_queue(
        &self,
        gpu: sys::hsa_agent_t,
    ) -> Result<NonNull<sys::hsa_queue_t>, String> {
        let size = self
            .agent_u32(gpu, sys::HSA_AGENT_INFO_QUEUE_MIN_SIZE)
            .max(64);
        let mut q: *mut sys::hsa_queue_t = std::ptr::null_mut();
        // SAFETY: no error callback; `q` is a valid place for the result.
        let status = unsafe {
            (self.api.hsa_queue_create)(
                gpu,
                size,
                sys::HSA_QUEUE_TYPE_MULTI,
                None,
                std::ptr::null_mut(),
                u32::MAX,
                u32::MAX,
                &raw mut q,
            )
        };
        check("hsa_queue_create", status)?;
        let q = NonNull::new(q).ok_or("hsa_queue_create returned NULL")?;
        // SAFETY: `q` is the live queue the runtime just created.
        let (base, ring) = unsafe { (q.as_ref().base_address, q.as_ref().size) };
        if base.is_null() || !ring.is_power_of_two() {
            return Err(format!(
                "hsa_queue_create returned an unusable queue (base {base:?}, size {ring})"
            ));
        }
        Ok(q)
    }

    /// `hsa_queue_destroy`.
    pub(crate) fn destroy_queue(&self, q: NonNull<sys::hsa_queue_t>) -> Result<(), String> {
        // SAFETY: a live queue of this runtime with no packet in flight, destroyed once.
        check("hsa_queue_destroy", unsafe {
            (self.api.hsa_queue_destroy)(q.as_ptr())
        })
    }

    /// Loads the code object at `path` for `gpu`, freezes the executable and returns it with
    /// the kernel `name` (symbol `<name>.kd`).
    pub(crate) fn load_kernel(
        &self,
        path: &Path,
        gpu: sys::hsa_agent_t,
        name: &str,
    ) -> Result<(sys::hsa_executable_t, Kernel), String> {
        let file = std::fs::File::open(path)
            .map_err(|e| format!("cannot open code object {}: {e}", path.display()))?;
        let mut reader = sys::hsa_code_object_reader_t::default();
        // SAFETY: `file` is an open descriptor for the reader's whole life (it is destroyed
        // before `file` is closed).
        let status = unsafe {
            (self.api.hsa_code_object_reader_create_from_file)(file.as_raw_fd(), &raw mut reader)
        };
        check("hsa_code_object_reader_create_from_file", status)?;
        let mut exe = sys::hsa_executable_t::default();
        // SAFETY: no options (NULL); `exe` is a valid place for the result.
        let status = unsafe {
            (self.api.hsa_executable_create_alt)(
                sys::HSA_PROFILE_FULL,
                sys::HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &raw mut exe,
            )
        };
        let loaded = check("hsa_executable_create_alt", status).and_then(|()| {
            // SAFETY: live executable and reader; no options, no loaded-code-object output.
            let status = unsafe {
                (self.api.hsa_executable_load_agent_code_object)(
                    exe,
                    gpu,
                    reader,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            };
            check("hsa_executable_load_agent_code_object", status)?;
            // SAFETY: live executable; no options.
            check("hsa_executable_freeze", unsafe {
                (self.api.hsa_executable_freeze)(exe, std::ptr::null())
            })?;
            self.kernel(exe, gpu, name)
        });
        // SAFETY: `reader` is live and no longer needed.
        unsafe { (self.api.hsa_code_object_reader_destroy)(reader) };
        drop(file);
        match loaded {
            Ok(kernel) => Ok((exe, kernel)),
            Err(e) => {
                if exe.handle != 0 {
                    // Best effort: the error above is what matters.
                    let _ = self.destroy_executable(exe);
                }
                Err(e)
            }
        }
    }

    /// The kernel `name` of a frozen executable.
    fn kernel(
        &self,
        exe: sys::hsa_executable_t,
        gpu: sys::hsa_agent_t,
        name: &str,
    ) -> Result<Kernel, String> {
        let symbol_name = format!("{name}.kd");
        let cname = CString::new(symbol_name.as_str())
            .map_err(|_| format!("kernel name {name:?} contains NUL"))?;
        let mut sym = sys::hsa_executable_symbol_t::default();
        // SAFETY: live executable; `cname` is NUL-terminated; `gpu` and `sym` are valid for
        // the call.
        let status = unsafe {
            (self.api.hsa_executable_get_symbol_by_name)(
                exe,
                cname.as_ptr(),
                &raw const gpu,
                &raw mut sym,
            )
        };
        check(
            &format!("hsa_executable_get_symbol_by_name({symbol_name})"),
            status,
        )?;
        let get_u32 = |attribute, what: &str| -> Result<u32, String> {
            let mut v = 0u32;
            // SAFETY: the segment-size attributes each write one u32.
            let status = unsafe {
                (self.api.hsa_executable_symbol_get_info)(sym, attribute, (&raw mut v).cast())
            };
            check(&format!("hsa_executable_symbol_get_info({what})"), status)?;
            Ok(v)
        };
        let mut object = 0u64;
        // SAFETY: KERNEL_OBJECT writes one u64.
        let status = unsafe {
            (self.api.hsa_executable_symbol_get_info)(
                sym,
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                (&raw mut object).cast(),
            )
        };
        check("hsa_executable_symbol_get_info(KERNEL_OBJECT)", status)?;
        if object == 0 {
            return Err(format!("{symbol_name} has KERNEL_OBJECT 0"));
        }
        Ok(Kernel {
            object,
            kernarg_size: get_u32(
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                "KERNARG_SEGMENT_SIZE",
            )?,
            group_size: get_u32(
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                "GROUP_SEGMENT_SIZE",
            )?,
            private_size: get_u32(
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                "PRIVATE_SEGMENT_SIZE",
            )?,
        })
    }

    /// `hsa_executable_destroy`.
    pub(crate) fn destroy_executable(&self, exe: sys::hsa_executable_t) -> Result<(), String> {
        // SAFETY: a live executable of this runtime, destroyed once.
        check("hsa_executable_destroy", unsafe {
            (self.api.hsa_executable_destroy)(exe)
        })
    }
}

/// Everything one dispatch of a kernel needs, resolved once so the timed loop makes only the
/// calls an application makes per dispatch.
pub(crate) struct Dispatcher<'h> {
    /// The runtime.
    pub(crate) hsa: &'h Hsa,
    /// The queue.
    pub(crate) queue: NonNull<sys::hsa_queue_t>,
    /// The kernel.
    pub(crate) kernel: Kernel,
    /// Its kernel arguments (`kernarg_size` bytes of kernarg memory).
    pub(crate) kernarg: NonNull<c_void>,
    /// The completion signal.
    pub(crate) done: sys::hsa_signal_t,
    /// Timeout hint of one `hsa_signal_wait_scacquire` call, in timestamp ticks (~100 ms).
    pub(crate) wait_hint: u64,
}

impl Dispatcher<'_> {
    /// One round trip: sets the completion signal to 1 (untimed), then times reserving a slot,
    /// writing a 1-work-item dispatch packet, ringing the doorbell and a blocking
    /// `hsa_signal_wait_scacquire` until the signal reads 0.
    pub(crate) fn round_trip(&self) -> Result<Duration, String> {
        let api = &self.hsa.api;
        let q = self.queue.as_ptr();
        // SAFETY: live signal; no dispatch of this dispatcher is in flight.
        unsafe { (api.hsa_signal_store_relaxed)(self.done, 1) };
        let start = Instant::now();
        // SAFETY: `q` is a live queue; these fields never change after creation.
        let (base, size, doorbell) =
            unsafe { ((*q).base_address, (*q).size, (*q).doorbell_signal) };
        // SAFETY: live queue.
        let index = unsafe { (api.hsa_queue_add_write_index_scacq_screl)(q, 1) };
        // SAFETY: live queue.
        while index.wrapping_sub(unsafe { (api.hsa_queue_load_read_index_scacquire)(q) })
            >= u64::from(size)
        {
            if start.elapsed() > SIGNAL_TIMEOUT {
                return Err(format!(
                    "queue full for {SIGNAL_TIMEOUT:?} (packet {index})"
                ));
            }
            std::thread::yield_now();
        }
        let body = sys::hsa_kernel_dispatch_packet_t {
            workgroup_size_x: 1,
            workgroup_size_y: 1,
            workgroup_size_z: 1,
            grid_size_x: 1,
            grid_size_y: 1,
            grid_size_z: 1,
            private_segment_size: self.kernel.private_size,
            group_segment_size: self.kernel.group_size,
            kernel_object: self.kernel.object,
            kernarg_address: self.kernarg.as_ptr(),
            completion_signal: self.done,
            ..Default::default()
        };
        let header = sys::packet_header(
            sys::HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            sys::HSA_FENCE_SCOPE_SYSTEM,
            sys::HSA_FENCE_SCOPE_SYSTEM,
        );
        let setup = 1u16 << sys::HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
        let slot = (index & (u64::from(size) - 1)) as usize;
        let packet = base
            .cast::<sys::hsa_kernel_dispatch_packet_t>()
            .wrapping_add(slot);
        const FIRST_WORD: usize = size_of::<u32>();
        // SAFETY: `packet` is the ring slot this producer reserved (`index`, room checked
        // above) in a ring of `size` 64-byte packets, 64-byte aligned. The packet processor
        // reads only the header word until it says KERNEL_DISPATCH, so the body is written
        // with plain stores and the header word last with release order. The packet type has
        // no padding. The doorbell is the queue's own signal.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const body).cast::<u8>().add(FIRST_WORD),
                packet.cast::<u8>().add(FIRST_WORD),
                size_of::<sys::hsa_kernel_dispatch_packet_t>() - FIRST_WORD,
            );
            AtomicU32::from_ptr(packet.cast::<u32>()).store(
                u32::from(header) | (u32::from(setup) << 16),
                Ordering::Release,
            );
            (api.hsa_signal_store_screlease)(doorbell, index as sys::hsa_signal_value_t);
        }
        loop {
            // SAFETY: live signal.
            let value = unsafe {
                (api.hsa_signal_wait_scacquire)(
                    self.done,
                    sys::HSA_SIGNAL_CONDITION_EQ,
                    0,
                    self.wait_hint,
                    sys::HSA_WAIT_STATE_BLOCKED,
                )
            };
            if value == 0 {
                return Ok(start.elapsed());
            }
            if value < 0 {
                return Err(format!("completion signal went negative ({value})"));
            }
            if start.elapsed() > SIGNAL_TIMEOUT {
                return Err(format!(
                    "completion signal still {value} after {SIGNAL_TIMEOUT:?}"
                ));
            }
        }
    }
}
