//! A small safe layer over the HSA runtime, which is opened at run time with `libloading`.
//!
//! Nothing links `libhsa-runtime64` at build time: [`Hsa::open`] loads
//! `libhsa-runtime64.so.1` the way the dynamic linker would for a C program (so
//! `LD_LIBRARY_PATH` picks hsa-emu or a real ROCr), [`Hsa::open_in`] loads it from a given
//! directory, and either resolves each function by name with its `rocprof-replay-sys`
//! signature. Every call returns `Result<_, String>`; the message names the
//! call and the [`Status`] it returned. The objects the runtime hands out are RAII values that
//! borrow the [`Hsa`] (and kernels and variables borrow their [`Executable`]), so nothing can
//! outlive what it belongs to. A release that fails in `Drop` is remembered and reported by
//! [`Hsa::shut_down`].

use std::cell::Cell;
use std::ffi::{CString, c_void};
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, size_of};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rocprof_replay_sys::{self as sys, Status};

/// The runtime's file name, as an HSA program links it; `LD_LIBRARY_PATH` decides which loads
/// with [`Hsa::open`], the directory given to [`Hsa::open_in`] otherwise.
pub const RUNTIME_SONAME: &str = "libhsa-runtime64.so.1";

/// How long a dispatch may wait for a free slot in the queue.
const QUEUE_ROOM_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a completion signal may take to reach 0 in [`Signal::wait_zero`].
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Declares [`Api`], one field per runtime function, and its by-name resolver.
macro_rules! api {
    ($($name:ident: $fn_t:ident,)*) => {
        /// The runtime functions this wrapper calls, resolved by name from the loaded library.
        struct Api {
            $($name: sys::$fn_t,)*
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
    hsa_memory_copy: hsa_memory_copy_fn_t,
    hsa_amd_memory_async_copy: hsa_amd_memory_async_copy_fn_t,
    hsa_signal_create: hsa_signal_create_fn_t,
    hsa_signal_store_screlease: hsa_signal_store_screlease_fn_t,
    hsa_signal_wait_scacquire: hsa_signal_wait_scacquire_fn_t,
    hsa_signal_destroy: hsa_signal_destroy_fn_t,
    hsa_queue_create: hsa_queue_create_fn_t,
    hsa_queue_add_write_index_scacq_screl: hsa_queue_add_write_index_scacq_screl_fn_t,
    hsa_queue_load_read_index_scacquire: hsa_queue_load_read_index_scacquire_fn_t,
    hsa_queue_destroy: hsa_queue_destroy_fn_t,
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
    // `name` (checked against the real headers there), so the symbol has exactly this type.
    let sym = unsafe { lib.get::<T>(nul_terminated.as_bytes()) }
        .map_err(|e| format!("{RUNTIME_SONAME} has no function {name}: {e}"))?;
    Ok(*sym)
}

/// `Ok(())` on success, otherwise a message naming `what` and the [`Status`].
fn check(what: &str, raw: sys::hsa_status_t) -> Result<(), String> {
    sys::check(raw).map_err(|status: Status| format!("{what} failed: {status}"))
}

/// Iteration callback that appends each handle to the `Vec<H>` behind `data`.
unsafe extern "C" fn push_handle<H: Copy>(handle: H, data: *mut c_void) -> sys::hsa_status_t {
    // SAFETY: `data` is the `&mut Vec<H>` that `Hsa::collect` passed to the iteration, which
    // is alive and not otherwise used for the duration of that call.
    let out = unsafe { &mut *data.cast::<Vec<H>>() };
    out.push(handle);
    sys::HSA_STATUS_SUCCESS
}

/// Plain data: every byte pattern of its size is a valid value (`u8`, `u32`, `f32`).
///
/// # Safety
/// Implement only for types without padding, pointers or invalid bit patterns.
pub unsafe trait Plain: Copy + Default {}
// SAFETY: every 8-bit pattern is a valid `u8`.
unsafe impl Plain for u8 {}
// SAFETY: every 32-bit pattern is a valid `u32`.
unsafe impl Plain for u32 {}
// SAFETY: every 32-bit pattern is a valid `f32`.
unsafe impl Plain for f32 {}

/// An agent and its device type.
#[derive(Clone, Copy, Debug)]
pub struct Agent {
    /// The runtime's handle.
    pub raw: sys::hsa_agent_t,
    /// `HSA_DEVICE_TYPE_CPU`, `_GPU` or `_DSP`.
    pub device: sys::hsa_device_type_t,
}

/// A memory pool and whether the host can read and write its memory directly.
#[derive(Clone, Copy, Debug)]
pub struct Pool {
    raw: sys::hsa_amd_memory_pool_t,
    host_accessible: bool,
}

/// The loaded runtime: the library (never unloaded) and its resolved functions.
pub struct Hsa {
    api: Api,
    /// First failure of a release done in `Drop`; [`Hsa::shut_down`] reports it.
    teardown_error: Cell<Option<String>>,
    /// Kept loaded for the life of the process: the runtime's threads and exit handlers may
    /// still run code from it after `hsa_shut_down`, as with a linked library.
    _lib: ManuallyDrop<libloading::Library>,
}

impl Hsa {
    /// Loads `libhsa-runtime64.so.1` (found like a linked library: `LD_LIBRARY_PATH` first)
    /// and resolves every function this wrapper uses.
    pub fn open() -> Result<Self, String> {
        Self::load(Path::new(RUNTIME_SONAME), |e| {
            format!(
                "cannot load {RUNTIME_SONAME}: {e} (set LD_LIBRARY_PATH to a directory \
                 holding it, e.g. one made by `cargo run -p hsa-emu --bin hsa-emu-install`)"
            )
        })
    }

    /// Loads `dir/libhsa-runtime64.so.1` by path (whatever `LD_LIBRARY_PATH` says) and
    /// resolves every function this wrapper uses.
    pub fn open_in(dir: &Path) -> Result<Self, String> {
        let path = dir.join(RUNTIME_SONAME);
        Self::load(&path, |e| format!("cannot load {}: {e}", path.display()))
    }

    /// Loads the runtime `file` (a bare file name is searched like a linked library, a path
    /// with a `/` is opened as is) and resolves the API; `load_error` words a failure to load.
    fn load(
        file: &Path,
        load_error: impl FnOnce(libloading::Error) -> String,
    ) -> Result<Self, String> {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: loading the runtime runs its initialisers, which are written to run in any
        // process that links it; this program does exactly what linking would do.
        let lib =
            unsafe { Library::open(Some(file), RTLD_NOW | RTLD_GLOBAL) }.map_err(load_error)?;
        let lib = libloading::Library::from(lib);
        let api = Api::resolve(&lib)?;
        Ok(Self {
            api,
            teardown_error: Cell::new(None),
            _lib: ManuallyDrop::new(lib),
        })
    }

    /// `hsa_init`.
    pub fn init(&self) -> Result<(), String> {
        // SAFETY: `hsa_init` has no preconditions.
        check("hsa_init", unsafe { (self.api.hsa_init)() })
    }

    /// `hsa_shut_down`; also reports the first release that failed in a `Drop`.
    pub fn shut_down(self) -> Result<(), String> {
        // SAFETY: `hsa_shut_down` has no preconditions; every object borrowing `self` (pool
        // buffers, signals, queues, executables) is gone, since this consumes `self`.
        let status = unsafe { (self.api.hsa_shut_down)() };
        if let Some(e) = self.teardown_error.take() {
            return Err(e);
        }
        check("hsa_shut_down", status)
    }

    /// `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY` in ticks per second, 1 GHz if the runtime reports
    /// none: the unit of the timeout hint of [`Signal::wait_zero_by`].
    pub fn timestamp_frequency(&self) -> u64 {
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

    /// Records the first failure of a release done in `Drop`.
    fn note_teardown(&self, result: Result<(), String>) {
        if let Err(e) = result {
            let first = self.teardown_error.take().unwrap_or(e);
            self.teardown_error.set(Some(first));
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

    /// Every agent, in `hsa_iterate_agents` order, with its device type.
    pub fn agents(&self) -> Result<Vec<Agent>, String> {
        let handles = self.collect("hsa_iterate_agents", |callback, data| {
            // SAFETY: `callback` has the C callback signature and `data` is what it expects.
            unsafe { (self.api.hsa_iterate_agents)(Some(callback), data) }
        })?;
        handles
            .into_iter()
            .map(|raw| {
                Ok(Agent {
                    raw,
                    device: self.agent_u32(raw, sys::HSA_AGENT_INFO_DEVICE, "DEVICE")?,
                })
            })
            .collect()
    }

    /// A 32-bit agent attribute.
    fn agent_u32(
        &self,
        agent: sys::hsa_agent_t,
        attribute: sys::hsa_agent_info_t,
        name: &str,
    ) -> Result<u32, String> {
        let mut value = 0u32;
        // SAFETY: the attributes passed here (DEVICE, QUEUE_MIN_SIZE, QUEUE_MAX_SIZE) each
        // write one 32-bit value.
        let status =
            unsafe { (self.api.hsa_agent_get_info)(agent, attribute, (&raw mut value).cast()) };
        check(&format!("hsa_agent_get_info({name})"), status)?;
        Ok(value)
    }

    /// The agent's name (`HSA_AGENT_INFO_NAME`).
    pub fn agent_name(&self, agent: Agent) -> Result<String, String> {
        let mut name = [0u8; 64];
        // SAFETY: NAME writes at most 64 bytes (a NUL-terminated string).
        let status = unsafe {
            (self.api.hsa_agent_get_info)(
                agent.raw,
                sys::HSA_AGENT_INFO_NAME,
                name.as_mut_ptr().cast(),
            )
        };
        check("hsa_agent_get_info(NAME)", status)?;
        let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Ok(String::from_utf8_lossy(&name[..len]).into_owned())
    }

    /// A memory-pool attribute of type `T`.
    ///
    /// # Safety
    /// `attribute` must write exactly one `T`.
    unsafe fn pool_info<T: Default>(
        &self,
        pool: sys::hsa_amd_memory_pool_t,
        attribute: sys::hsa_amd_memory_pool_info_t,
        name: &str,
    ) -> Result<T, String> {
        let mut value = T::default();
        // SAFETY: the caller promises that `attribute` writes one `T` to `value`.
        let status = unsafe {
            (self.api.hsa_amd_memory_pool_get_info)(pool, attribute, (&raw mut value).cast())
        };
        check(&format!("hsa_amd_memory_pool_get_info({name})"), status)?;
        Ok(value)
    }

    /// The first allocatable GLOBAL pool of `agent` that has every `want` flag, preferring one
    /// with none of the `avoid` flags (`HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_*`).
    pub fn find_pool(&self, agent: Agent, want: u32, avoid: u32) -> Result<Option<Pool>, String> {
        let pools = self.collect("hsa_amd_agent_iterate_memory_pools", |callback, data| {
            // SAFETY: `callback` has the C callback signature and `data` is what it expects.
            unsafe {
                (self.api.hsa_amd_agent_iterate_memory_pools)(agent.raw, Some(callback), data)
            }
        })?;
        let (mut best, mut fallback) = (None, None);
        for raw in pools {
            // SAFETY: SEGMENT writes an `hsa_amd_segment_t` (u32), GLOBAL_FLAGS a u32 and
            // RUNTIME_ALLOC_ALLOWED a bool.
            let (segment, flags, alloc_allowed) = unsafe {
                (
                    self.pool_info::<u32>(raw, sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT, "SEGMENT")?,
                    self.pool_info::<u32>(
                        raw,
                        sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                        "GLOBAL_FLAGS",
                    )?,
                    self.pool_info::<bool>(
                        raw,
                        sys::HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                        "RUNTIME_ALLOC_ALLOWED",
                    )?,
                )
            };
            if segment != sys::HSA_AMD_SEGMENT_GLOBAL || !alloc_allowed || flags & want != want {
                continue;
            }
            // System memory (a CPU agent's pools) and kernarg memory are host accessible.
            let host_accessible = agent.device == sys::HSA_DEVICE_TYPE_CPU
                || flags & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT != 0;
            let pool = Pool {
                raw,
                host_accessible,
            };
            if flags & avoid == 0 {
                best = best.or(Some(pool));
            } else {
                fallback = fallback.or(Some(pool));
            }
        }
        Ok(best.or(fallback))
    }

    /// `hsa_amd_memory_pool_allocate` of `bytes` from `pool`.
    pub fn allocate(&self, pool: Pool, bytes: usize) -> Result<PoolBuffer<'_>, String> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid place for the result; `pool` came from this runtime.
        let status =
            unsafe { (self.api.hsa_amd_memory_pool_allocate)(pool.raw, bytes, 0, &raw mut ptr) };
        check("hsa_amd_memory_pool_allocate", status)?;
        let ptr = NonNull::new(ptr).ok_or("hsa_amd_memory_pool_allocate returned NULL")?;
        Ok(PoolBuffer {
            hsa: self,
            ptr,
            bytes,
            host_accessible: pool.host_accessible,
        })
    }

    /// `hsa_memory_copy` of all of `src` into `dst` (both the same size).
    pub fn copy(&self, dst: &mut PoolBuffer<'_>, src: &PoolBuffer<'_>) -> Result<(), String> {
        if dst.bytes != src.bytes {
            return Err(format!(
                "hsa_memory_copy: {} bytes into a {}-byte buffer",
                src.bytes, dst.bytes
            ));
        }
        // SAFETY: both buffers are live allocations of `src.bytes` bytes; `dst` is borrowed
        // mutably, so no host slice of it exists.
        let status =
            unsafe { (self.api.hsa_memory_copy)(dst.ptr.as_ptr(), src.ptr.as_ptr(), src.bytes) };
        check("hsa_memory_copy", status)
    }

    /// Submits `hsa_amd_memory_async_copy` of `bytes` bytes from `src` (memory of `src_agent`)
    /// to `dst` (memory of `dst_agent`), without dependencies; `done` is decremented when the
    /// copy has finished. Returns once the copy is submitted.
    ///
    /// # Safety
    /// `dst` and `src` must be `bytes` bytes of live memory the runtime can copy between, and
    /// must stay live and untouched by the host until `done` has been decremented.
    pub unsafe fn async_copy(
        &self,
        dst: *mut c_void,
        dst_agent: Agent,
        src: *const c_void,
        src_agent: Agent,
        bytes: usize,
        done: &Signal<'_>,
    ) -> Result<(), String> {
        // SAFETY: the memory is valid for the copy (caller contract); `done` is a live signal.
        let status = unsafe {
            (self.api.hsa_amd_memory_async_copy)(
                dst,
                dst_agent.raw,
                src,
                src_agent.raw,
                bytes,
                0,
                std::ptr::null(),
                done.raw,
            )
        };
        check("hsa_amd_memory_async_copy", status)
    }

    /// Reads a module-scope variable of type `T` with `hsa_memory_copy` from its address.
    pub fn read_variable<T: Plain>(&self, var: &Variable<'_>) -> Result<T, String> {
        if var.size as usize != size_of::<T>() {
            return Err(format!(
                "variable {} has {} bytes, expected {}",
                var.name,
                var.size,
                size_of::<T>()
            ));
        }
        let mut value = T::default();
        // SAFETY: `var.address` is the VARIABLE_ADDRESS of a live executable's variable of
        // `size_of::<T>()` bytes (checked above); any bytes are a valid `T` (`Plain`).
        let status = unsafe {
            (self.api.hsa_memory_copy)(
                (&raw mut value).cast(),
                var.address as *const c_void,
                size_of::<T>(),
            )
        };
        check(&format!("hsa_memory_copy({} -> host)", var.name), status)?;
        Ok(value)
    }

    /// A buffer from the kernarg `pool` for `kernel`: `KERNARG_SEGMENT_SIZE` bytes, zeroed,
    /// starting with `args`.
    pub fn make_kernarg<A: Copy>(
        &self,
        pool: Pool,
        kernel: &Kernel<'_>,
        args: &A,
    ) -> Result<PoolBuffer<'_>, String> {
        let bytes = kernel.kernarg_size as usize;
        if bytes < size_of::<A>() {
            return Err(format!(
                "{}: KERNARG_SEGMENT_SIZE {bytes} < {} bytes of arguments",
                kernel.name,
                size_of::<A>()
            ));
        }
        let mut buf = self.allocate(pool, bytes)?;
        let start = buf.host_slice_mut::<u8>()?;
        start.fill(0);
        // SAFETY: `start` is `bytes >= size_of::<A>()` writable host bytes; the write is
        // unaligned-tolerant and copies `A` as a value (its padding is not read as bytes).
        unsafe { start.as_mut_ptr().cast::<A>().write_unaligned(*args) };
        Ok(buf)
    }

    /// `hsa_signal_create` with `initial` value and no consumer restriction.
    pub fn signal(&self, initial: sys::hsa_signal_value_t) -> Result<Signal<'_>, String> {
        let mut raw = sys::hsa_signal_t::default();
        // SAFETY: no consumer list (0, NULL); `raw` is a valid place for the result.
        let status =
            unsafe { (self.api.hsa_signal_create)(initial, 0, std::ptr::null(), &raw mut raw) };
        check("hsa_signal_create", status)?;
        Ok(Signal { hsa: self, raw })
    }

    /// `hsa_queue_create` (MULTI, no callback) with `size` packets, clamped to what the agent
    /// supports.
    pub fn create_queue(&self, agent: Agent, size: u32) -> Result<Queue<'_>, String> {
        let min = self.agent_u32(
            agent.raw,
            sys::HSA_AGENT_INFO_QUEUE_MIN_SIZE,
            "QUEUE_MIN_SIZE",
        )?;
        let max = self.agent_u32(
            agent.raw,
            sys::HSA_AGENT_INFO_QUEUE_MAX_SIZE,
            "QUEUE_MAX_SIZE",
        )?;
        let size = if max != 0 {
            size.max(min).min(max)
        } else {
            size.max(min)
        };
        let mut q: *mut sys::hsa_queue_t = std::ptr::null_mut();
        // SAFETY: no error callback; `q` is a valid place for the result.
        let status = unsafe {
            (self.api.hsa_queue_create)(
                agent.raw,
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
        let raw = NonNull::new(q).ok_or("hsa_queue_create returned NULL")?;
        let queue = Queue { hsa: self, raw };
        // SAFETY: `raw` is the live queue the runtime just created.
        let (base, ring) = unsafe { ((*q).base_address, (*q).size) };
        if base.is_null() || !ring.is_power_of_two() {
            return Err(format!(
                "hsa_queue_create returned an unusable queue (base {base:?}, size {ring})"
            ));
        }
        Ok(queue)
    }

    /// Loads the code object at `path` for `agent` into a new executable and freezes it.
    pub fn load_code_object(&self, path: &Path, agent: Agent) -> Result<Executable<'_>, String> {
        let file = std::fs::File::open(path)
            .map_err(|e| format!("cannot open code object {}: {e}", path.display()))?;
        let mut reader = sys::hsa_code_object_reader_t::default();
        // SAFETY: `file` is an open descriptor for the whole call and the reader's life
        // (closed after the reader is destroyed, below).
        let status = unsafe {
            (self.api.hsa_code_object_reader_create_from_file)(file.as_raw_fd(), &raw mut reader)
        };
        check("hsa_code_object_reader_create_from_file", status)?;
        let loaded = self.load_with_reader(reader, agent);
        // SAFETY: `reader` is live and no longer needed (the executable is frozen or failed).
        let destroyed = unsafe { (self.api.hsa_code_object_reader_destroy)(reader) };
        let exe = loaded?;
        check("hsa_code_object_reader_destroy", destroyed)?;
        drop(file);
        Ok(exe)
    }

    /// The part of [`Hsa::load_code_object`] that needs the reader.
    fn load_with_reader(
        &self,
        reader: sys::hsa_code_object_reader_t,
        agent: Agent,
    ) -> Result<Executable<'_>, String> {
        let mut raw = sys::hsa_executable_t::default();
        // SAFETY: no options (NULL); `raw` is a valid place for the result.
        let status = unsafe {
            (self.api.hsa_executable_create_alt)(
                sys::HSA_PROFILE_FULL,
                sys::HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &raw mut raw,
            )
        };
        check("hsa_executable_create_alt", status)?;
        let exe = Executable { hsa: self, raw };
        // SAFETY: live executable and reader; no options, no loaded-code-object output.
        let status = unsafe {
            (self.api.hsa_executable_load_agent_code_object)(
                raw,
                agent.raw,
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        check("hsa_executable_load_agent_code_object", status)?;
        // SAFETY: live executable; no options.
        check("hsa_executable_freeze", unsafe {
            (self.api.hsa_executable_freeze)(raw, std::ptr::null())
        })?;
        Ok(exe)
    }
}

/// Memory from a pool, freed (`hsa_amd_memory_pool_free`) on drop.
pub struct PoolBuffer<'h> {
    hsa: &'h Hsa,
    ptr: NonNull<c_void>,
    bytes: usize,
    host_accessible: bool,
}

impl PoolBuffer<'_> {
    /// The address, as a kernel argument.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr.as_ptr()
    }

    /// The whole buffer as host memory, if its pool is host accessible.
    pub fn host_slice_mut<T: Plain>(&mut self) -> Result<&mut [T], String> {
        if !self.host_accessible {
            return Err("a device-only buffer cannot be read or written by the host".into());
        }
        if !self.ptr.as_ptr().cast::<T>().is_aligned() {
            return Err(format!(
                "pool memory at {:p} is not aligned for the host",
                self.ptr
            ));
        }
        // SAFETY: host-accessible memory of `bytes` bytes, aligned for `T`, borrowed mutably
        // for the slice's life; any bytes are a valid `T` (`Plain`).
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr.as_ptr().cast::<T>(),
                self.bytes / size_of::<T>(),
            )
        })
    }
}

impl Drop for PoolBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `hsa_amd_memory_pool_allocate` and is freed only here.
        let status = unsafe { (self.hsa.api.hsa_amd_memory_pool_free)(self.ptr.as_ptr()) };
        self.hsa
            .note_teardown(check("hsa_amd_memory_pool_free", status));
    }
}

/// A signal, destroyed on drop.
pub struct Signal<'h> {
    hsa: &'h Hsa,
    raw: sys::hsa_signal_t,
}

impl Signal<'_> {
    /// `hsa_signal_store_screlease`.
    pub fn store(&self, value: sys::hsa_signal_value_t) {
        // SAFETY: live signal.
        unsafe { (self.hsa.api.hsa_signal_store_screlease)(self.raw, value) }
    }

    /// Waits until the value is 0: timed `hsa_signal_wait_scacquire` calls (~100 ms each)
    /// until 30 s have passed. A negative value (an error) or the deadline is an error.
    pub fn wait_zero(&self, what: &str) -> Result<(), String> {
        let hint = (self.hsa.timestamp_frequency() / 10).max(1);
        self.wait_zero_by(what, hint, Instant::now(), SIGNAL_TIMEOUT)
    }

    /// Waits until the value is 0 with blocking `hsa_signal_wait_scacquire` calls of `hint`
    /// timestamp ticks each (see [`Hsa::timestamp_frequency`]) until `timeout` after `start`.
    /// A negative value (an error) or the deadline is an error naming `what`.
    ///
    /// Nothing but the waits runs until the signal reads 0 (the clock is read only after a
    /// wait that timed out), so a caller can time a dispatch round trip around it.
    pub fn wait_zero_by(
        &self,
        what: &str,
        hint: u64,
        start: Instant,
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = start + timeout;
        loop {
            // SAFETY: live signal.
            let value = unsafe {
                (self.hsa.api.hsa_signal_wait_scacquire)(
                    self.raw,
                    sys::HSA_SIGNAL_CONDITION_EQ,
                    0,
                    hint,
                    sys::HSA_WAIT_STATE_BLOCKED,
                )
            };
            match value {
                0 => return Ok(()),
                v if v < 0 => return Err(format!("{what}: completion signal went negative ({v})")),
                v if Instant::now() > deadline => {
                    return Err(format!(
                        "{what}: completion signal still {v} after {} s",
                        timeout.as_secs()
                    ));
                }
                _ => {}
            }
        }
    }
}

impl Drop for Signal<'_> {
    fn drop(&mut self) {
        // SAFETY: live signal, destroyed only here.
        let status = unsafe { (self.hsa.api.hsa_signal_destroy)(self.raw) };
        self.hsa.note_teardown(check("hsa_signal_destroy", status));
    }
}

/// A user-mode AQL queue, destroyed on drop.
pub struct Queue<'h> {
    hsa: &'h Hsa,
    raw: NonNull<sys::hsa_queue_t>,
}

impl Queue<'_> {
    /// Submits one 1-D kernel dispatch, like `hsu_dispatch_1d` of the C samples: reserve a
    /// slot, wait (at most 10 s) for room, write the body, release-store header and setup as
    /// one 32-bit word, ring the doorbell. `done` is decremented when the kernel completes.
    ///
    /// # Safety
    /// `kernarg` must hold valid arguments for `kernel`, and every buffer they point to (and
    /// `kernarg` itself) must stay allocated, and untouched by the host, until `done` says the
    /// dispatch completed.
    pub unsafe fn dispatch_1d(
        &self,
        kernel: &Kernel<'_>,
        kernarg: &PoolBuffer<'_>,
        workgroup_size: u16,
        grid_size: u32,
        done: &Signal<'_>,
    ) -> Result<(), String> {
        if workgroup_size == 0 || grid_size == 0 {
            return Err(format!(
                "bad dispatch geometry: workgroup {workgroup_size}, grid {grid_size}"
            ));
        }
        let api = &self.hsa.api;
        let q = self.raw.as_ptr();
        // SAFETY: `q` is a live queue; these fields never change after creation.
        let (base, size, doorbell) =
            unsafe { ((*q).base_address, (*q).size, (*q).doorbell_signal) };
        // SAFETY: live queue.
        let index = unsafe { (api.hsa_queue_add_write_index_scacq_screl)(q, 1) };
        let read_index = || {
            // SAFETY: live queue.
            unsafe { (api.hsa_queue_load_read_index_scacquire)(q) }
        };
        // The clock is read only when the queue is full, so a dispatch with room costs no more
        // than the runtime calls and the packet stores.
        let mut deadline = None;
        while index.wrapping_sub(read_index()) >= u64::from(size) {
            let now = Instant::now();
            if now > *deadline.get_or_insert(now + QUEUE_ROOM_TIMEOUT) {
                return Err(format!(
                    "queue full for {} s (packet {index})",
                    QUEUE_ROOM_TIMEOUT.as_secs()
                ));
            }
            std::thread::yield_now();
        }
        let body = sys::hsa_kernel_dispatch_packet_t {
            workgroup_size_x: workgroup_size,
            workgroup_size_y: 1,
            workgroup_size_z: 1,
            grid_size_x: grid_size,
            grid_size_y: 1,
            grid_size_z: 1,
            private_segment_size: kernel.private_size,
            group_segment_size: kernel.group_size,
            kernel_object: kernel.object,
            kernarg_address: kernarg.as_ptr(),
            completion_signal: done.raw,
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
        // SAFETY: `packet` is the ring slot this producer reserved (`index`, with room
        // checked above) inside a ring of `size` 64-byte packets, 64-byte aligned. The packet
        // processor reads nothing but the header word until that word says KERNEL_DISPATCH,
        // so the body is written with plain stores and the header word last, with release
        // order, so the body is visible first. The packet type has no padding.
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
        Ok(())
    }
}

impl Drop for Queue<'_> {
    fn drop(&mut self) {
        // SAFETY: live queue, destroyed only here.
        let status = unsafe { (self.hsa.api.hsa_queue_destroy)(self.raw.as_ptr()) };
        self.hsa.note_teardown(check("hsa_queue_destroy", status));
    }
}

/// A frozen executable, destroyed on drop.
pub struct Executable<'h> {
    hsa: &'h Hsa,
    raw: sys::hsa_executable_t,
}

/// A kernel of an [`Executable`], as a dispatch packet needs it.
pub struct Kernel<'e> {
    name: String,
    object: u64,
    kernarg_size: u32,
    group_size: u32,
    private_size: u32,
    _exe: PhantomData<&'e ()>,
}

/// A module-scope variable of an [`Executable`].
pub struct Variable<'e> {
    name: String,
    address: u64,
    size: u32,
    _exe: PhantomData<&'e ()>,
}

impl Kernel<'_> {
    /// The kernel's name (without `.kd`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its `KERNARG_SEGMENT_SIZE`: the bytes of kernel arguments a dispatch must provide.
    pub fn kernarg_size(&self) -> u32 {
        self.kernarg_size
    }
}

impl Executable<'_> {
    /// The symbol `name` as loaded for `agent`, checked to be of `kind`.
    fn symbol(
        &self,
        agent: Agent,
        name: &str,
        kind: sys::hsa_symbol_kind_t,
    ) -> Result<sys::hsa_executable_symbol_t, String> {
        let cname = CString::new(name).map_err(|_| format!("symbol name {name:?} contains NUL"))?;
        let mut sym = sys::hsa_executable_symbol_t::default();
        // SAFETY: live executable; `cname` is NUL-terminated; `agent.raw` and `sym` are valid
        // for the call.
        let status = unsafe {
            (self.hsa.api.hsa_executable_get_symbol_by_name)(
                self.raw,
                cname.as_ptr(),
                &raw const agent.raw,
                &raw mut sym,
            )
        };
        check(
            &format!("hsa_executable_get_symbol_by_name({name})"),
            status,
        )?;
        // SAFETY: TYPE writes an `hsa_symbol_kind_t` (u32).
        let found =
            unsafe { self.symbol_info::<u32>(sym, sys::HSA_EXECUTABLE_SYMBOL_INFO_TYPE, "TYPE")? };
        if found != kind {
            return Err(format!("symbol {name} has kind {found}, expected {kind}"));
        }
        Ok(sym)
    }

    /// A symbol attribute of type `T`.
    ///
    /// # Safety
    /// `attribute` must write exactly one `T`.
    unsafe fn symbol_info<T: Default>(
        &self,
        sym: sys::hsa_executable_symbol_t,
        attribute: sys::hsa_executable_symbol_info_t,
        name: &str,
    ) -> Result<T, String> {
        let mut value = T::default();
        // SAFETY: the caller promises that `attribute` writes one `T` to `value`.
        let status = unsafe {
            (self.hsa.api.hsa_executable_symbol_get_info)(sym, attribute, (&raw mut value).cast())
        };
        check(&format!("hsa_executable_symbol_get_info({name})"), status)?;
        Ok(value)
    }

    /// Kernel `name` (symbol `<name>.kd`) as loaded for `agent`.
    pub fn kernel(&self, agent: Agent, name: &str) -> Result<Kernel<'_>, String> {
        let sym = self.symbol(agent, &format!("{name}.kd"), sys::HSA_SYMBOL_KIND_KERNEL)?;
        use sys::{
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE as GROUP,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE as KERNARG,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT as OBJECT,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE as PRIVATE,
        };
        // SAFETY: KERNEL_OBJECT writes a u64; the three segment sizes each write a u32.
        let kernel = unsafe {
            Kernel {
                name: name.to_owned(),
                object: self.symbol_info::<u64>(sym, OBJECT, "KERNEL_OBJECT")?,
                kernarg_size: self.symbol_info::<u32>(sym, KERNARG, "KERNARG_SEGMENT_SIZE")?,
                group_size: self.symbol_info::<u32>(sym, GROUP, "GROUP_SEGMENT_SIZE")?,
                private_size: self.symbol_info::<u32>(sym, PRIVATE, "PRIVATE_SEGMENT_SIZE")?,
                _exe: PhantomData,
            }
        };
        if kernel.object == 0 {
            return Err(format!("kernel {name} has KERNEL_OBJECT 0"));
        }
        Ok(kernel)
    }

    /// Module-scope variable `name` as loaded for `agent`.
    pub fn variable(&self, agent: Agent, name: &str) -> Result<Variable<'_>, String> {
        let sym = self.symbol(agent, name, sys::HSA_SYMBOL_KIND_VARIABLE)?;
        // SAFETY: VARIABLE_ADDRESS writes a u64, VARIABLE_SIZE a u32.
        let var = unsafe {
            Variable {
                name: name.to_owned(),
                address: self.symbol_info::<u64>(
                    sym,
                    sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
                    "VARIABLE_ADDRESS",
                )?,
                size: self.symbol_info::<u32>(
                    sym,
                    sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE,
                    "VARIABLE_SIZE",
                )?,
                _exe: PhantomData,
            }
        };
        if var.address == 0 {
            return Err(format!("variable {name} has VARIABLE_ADDRESS 0"));
        }
        Ok(var)
    }
}

impl Drop for Executable<'_> {
    fn drop(&mut self) {
        // SAFETY: live executable, destroyed only here; its kernels and variables borrowed it
        // and are gone.
        let status = unsafe { (self.hsa.api.hsa_executable_destroy)(self.raw) };
        self.hsa
            .note_teardown(check("hsa_executable_destroy", status));
    }
}
