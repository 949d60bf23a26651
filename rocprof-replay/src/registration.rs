//! Tool registration: what `#[rocprof_tool]` expands to calls into here.
//!
//! Kernel replay has a single subscriber per process. Every tool library built with this SDK
//! exports a `ROCPROF_REPLAY_CLAIM` word; at `OnLoad` a tool finds the first loaded library that
//! exports one (load order, so every tool picks the same word) and writes its identity there
//! with a compare-and-swap. A second tool finds the word taken and gets
//! [`Error::ServiceAlreadyConfigured`]: it logs why and declines to load, and the application
//! keeps running with the first tool.

use std::ffi::{CStr, CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};

use rocprof_replay_sys::HsaApiTable;

use crate::error::Error;
use crate::policy::ReplayPolicy;

/// Priority exported as `HSA_AMD_TOOL_PRIORITY` (lower loads first among preloaded tools).
pub const TOOL_PRIORITY: u32 = 25;

/// The claim word a tool library exports as `ROCPROF_REPLAY_CLAIM`.
#[repr(transparent)]
pub struct Claim(AtomicUsize);

impl Claim {
    /// An unclaimed word.
    pub const fn new() -> Self {
        Claim(AtomicUsize::new(0))
    }
}

impl Default for Claim {
    fn default() -> Self {
        Self::new()
    }
}

/// The first loaded object exporting `ROCPROF_REPLAY_CLAIM` (its own definition).
fn first_claim() -> Option<&'static Claim> {
    let mut paths: Vec<CString> = Vec::new();
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info and our `data`.
        let (info, paths) = unsafe { (&*info, &mut *data.cast::<Vec<CString>>()) };
        if !info.dlpi_name.is_null() {
            // SAFETY: NUL-terminated object name.
            paths.push(unsafe { CStr::from_ptr(info.dlpi_name) }.to_owned());
        }
        0
    }
    // SAFETY: the callback only pushes into `paths`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut paths as *mut Vec<CString>).cast()) };
    for path in paths {
        let handle = if path.as_bytes().is_empty() {
            // SAFETY: dlopen(NULL) returns the main program.
            unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) }
        } else {
            // SAFETY: NUL-terminated path of an already-loaded object.
            unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) }
        };
        if handle.is_null() {
            continue;
        }
        // SAFETY: live handle, NUL-terminated name.
        let sym = unsafe { libc::dlsym(handle, c"ROCPROF_REPLAY_CLAIM".as_ptr()) };
        // Drop the reference RTLD_NOLOAD took; the object stays loaded through its own.
        // SAFETY: a handle from the dlopen above, closed once.
        unsafe { libc::dlclose(handle) };
        if sym.is_null() {
            continue;
        }
        // Only a definition in this very object counts (dlsym also searches dependencies).
        if object_of(sym).is_some_and(|owner| path.as_bytes().is_empty() || owner == path) {
            // SAFETY: the symbol is a `Claim` exported by a tool built with this SDK.
            return Some(unsafe { &*sym.cast::<Claim>() });
        }
    }
    None
}

/// The file of the object containing `addr`.
fn object_of(addr: *const c_void) -> Option<CString> {
    // SAFETY: zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: NUL-terminated file name.
    Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_owned())
}

/// This library's identity: a private (never exported, so never interposed) static whose
/// address is unique to each tool library that links this SDK.
static IDENTITY: u8 = 0;

/// Claims kernel replay for this library. The exported `ROCPROF_REPLAY_CLAIM` words are only
/// the meeting place: an exported symbol may be interposed (every library's own reference can
/// resolve to the first definition), so identity comes from [`IDENTITY`].
fn claim() -> Result<(), Error> {
    static FALLBACK: Claim = Claim::new();
    let id = &IDENTITY as *const u8 as usize;
    let first = first_claim();
    tracing::debug!(identity = id, word = ?first.map(|c| c as *const Claim), "claiming kernel replay");
    let word = first.unwrap_or(&FALLBACK);
    match word
        .0
        .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => Ok(()),
        Err(owner) if owner == id => Ok(()),
        Err(owner) => Err(Error::ServiceAlreadyConfigured {
            owner: object_of(owner as *const c_void)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| "another tool".into()),
        }),
    }
}

/// Builds the process-wide engine around the policy `make` constructs (once per process; a
/// second backend attaching later reuses it). A panicking constructor is an error.
fn engine<P: ReplayPolicy>(
    make: impl FnOnce() -> P,
) -> Result<&'static crate::engine::state::Engine, Error> {
    crate::engine::state::install(|| {
        let policy = catch_unwind(AssertUnwindSafe(make)).map_err(|p| {
            Error::ToolPanicked(
                p.downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default(),
            )
        })?;
        watch_forks();
        Ok(Box::new(policy))
    })
}

/// A forked child runs without replay: its copy of the engine may hold locks taken by threads
/// that do not exist in it, so every hook only forwards there and no record is written.
fn watch_forks() {
    extern "C" fn in_child() {
        crate::hsa::disable_in_child();
        #[cfg(feature = "cuda")]
        crate::cuda::disable_in_child();
        crate::engine::state::INVENTORY.disable();
        crate::engine::records::disable_in_child();
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain extern "C" function that only stores to atomics.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            tracing::warn!("pthread_atfork failed ({rc}): a forked child would keep replaying");
        }
    });
}

/// The backend a tool attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// The HSA runtime called `OnLoad`.
    Hsa,
    /// The CUDA driver called `InitializeInjection`.
    #[cfg(feature = "cuda")]
    Cuda,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Hsa => "hsa",
            #[cfg(feature = "cuda")]
            Backend::Cuda => "cuda",
        }
    }

    /// What a refusal means for the application.
    fn without(self) -> &'static str {
        match self {
            Backend::Hsa => "this tool is not loaded and the application runs without it",
            #[cfg(feature = "cuda")]
            Backend::Cuda => {
                "kernel replay is off for CUDA in this process and the application runs without it"
            }
        }
    }
}

/// The one load path of every backend: claims replay, builds the policy and the engine (or
/// reuses them when another backend of this library attached first), runs the backend's
/// `install`, reports the verdict to a preflight ([`PREFLIGHT_VAR`]) and, on refusal, says why
/// on stderr. Returns whether the tool is attached.
fn attach<P: ReplayPolicy>(
    backend: Backend,
    make: impl FnOnce() -> P,
    install: impl FnOnce(&'static crate::engine::state::Engine) -> Result<(), String>,
) -> bool {
    crate::log::init();
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        claim().map_err(|e| e.to_string())?;
        let engine = engine(make).map_err(|e| e.to_string())?;
        install(engine)
    }))
    .unwrap_or_else(|_| Err("internal error (panic) while loading".into()));
    report_verdict(backend, &result);
    match result {
        Ok(()) => {
            tracing::info!(backend = backend.name(), "rocprof-replay tool loaded");
            true
        }
        Err(e) => {
            // Printed directly, not through tracing: it must reach the user even when the
            // application installed its own tracing subscriber.
            eprintln!("rocprof-replay: {e}; {}", backend.without());
            false
        }
    }
}

/// The variable naming the file to which a tool appends its load verdict (one JSON line:
/// `{"tool": path, "backend": "hsa"|"cuda", "verdict": "loaded"|"refused", "reason": ...}`,
/// the reason being what it prints on stderr). The `rocprof-replay` command's preflight sets
/// it, loads the tool the way the runtime will, and reports a refusal before the application
/// starts.
pub const PREFLIGHT_VAR: &str = "ROCPROF_REPLAY_PREFLIGHT";

/// Appends this library's verdict to `$ROCPROF_REPLAY_PREFLIGHT`, when set (errors ignored: a
/// preflight that finds no verdict falls back to its symbol check).
fn report_verdict(backend: Backend, result: &Result<(), String>) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os(PREFLIGHT_VAR).filter(|p| !p.is_empty()) else {
        return;
    };
    let tool = object_of((&IDENTITY as *const u8).cast())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (verdict, reason) = match result {
        Ok(()) => ("loaded", None),
        Err(e) => ("refused", Some(e.as_str())),
    };
    let line = serde_json::json!({
        "tool": tool,
        "backend": backend.name(),
        "verdict": verdict,
        "reason": reason,
    });
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write: verdicts of several tools never interleave.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// `OnLoad` of a tool: claims replay, builds the policy and the engine, installs the HSA
/// backend.
///
/// # Safety
/// Called by the runtime with its live table, as `OnLoad`.
pub unsafe fn on_load<P: ReplayPolicy>(
    table: *mut HsaApiTable,
    runtime_version: u64,
    _failed_tool_count: u64,
    _failed_tool_names: *const *const c_char,
    make: impl FnOnce() -> P,
) -> bool {
    tracing::debug!(runtime_version, "OnLoad");
    attach(Backend::Hsa, make, |engine| {
        // SAFETY: the live table handed to OnLoad.
        unsafe { crate::hsa::install(table, engine) }.map_err(|e| e.to_string())
    })
}

/// `InitializeInjection` of a tool (feature `cuda`): called by the CUDA driver during `cuInit`
/// when `CUDA_INJECTION64_PATH` names the tool library. Claims replay, builds the policy and
/// the engine (or reuses them when the HSA backend of this library attached first), and
/// attaches the CUDA backend. Always reports success to the driver: a tool that cannot attach
/// says why on stderr and the application runs without it.
#[cfg(feature = "cuda")]
pub fn initialize_injection<P: ReplayPolicy>(make: impl FnOnce() -> P) -> std::ffi::c_int {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        attach(Backend::Cuda, make, |engine| {
            crate::cuda::install(engine).map_err(|e| e.to_string())
        });
    });
    1
}

/// Library constructor of a tool (feature `cuda`): when the tool was preloaded
/// (`LD_PRELOAD` names it) and `CUDA_INJECTION64_PATH` is unset, points that variable at the
/// tool, so the CUDA driver calls the tool's `InitializeInjection` at `cuInit`. A process that
/// never initialises CUDA never loads anything of CUDA because of this.
#[cfg(feature = "cuda")]
pub extern "C" fn cuda_preload() {
    let _ = catch_unwind(|| {
        let Some(preload) = std::env::var_os("LD_PRELOAD") else {
            return;
        };
        let Some(me) = object_of(cuda_preload as *const c_void) else {
            return;
        };
        let me = std::path::PathBuf::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(me.as_bytes()),
        );
        if !preloads(&preload.to_string_lossy(), &me) {
            return;
        }
        let path = std::fs::canonicalize(&me).unwrap_or(me);
        match std::env::var_os("CUDA_INJECTION64_PATH") {
            None => {
                // SAFETY: runs in a library constructor at program start (the tool is
                // preloaded), before the program's own threads exist.
                unsafe { std::env::set_var("CUDA_INJECTION64_PATH", &path) };
            }
            Some(other) => {
                let same = std::fs::canonicalize(&other).is_ok_and(|o| o == path);
                if !same {
                    eprintln!(
                        "rocprof-replay: CUDA_INJECTION64_PATH names another library ({}); \
                         CUDA kernels are not replayed by {} in this process",
                        other.to_string_lossy(),
                        path.display()
                    );
                }
            }
        }
    });
}

/// Whether an `LD_PRELOAD` value names the library at `me` (by path or by file name).
#[cfg(feature = "cuda")]
pub(crate) fn preloads(ld_preload: &str, me: &std::path::Path) -> bool {
    let file = me.file_name();
    ld_preload
        .split([' ', ':'])
        .filter(|p| !p.is_empty())
        .any(|p| {
            let p = std::path::Path::new(p);
            p == me || (file.is_some() && p.file_name() == file)
        })
}

/// `OnUnload` of a tool: stops replay on every backend that runs (each is a no-op where its
/// backend never attached); the windows it waits for write their records as they end.
pub fn on_unload() {
    let _ = catch_unwind(|| {
        crate::hsa::shutdown();
        #[cfg(feature = "cuda")]
        crate::cuda::shutdown();
    });
}

/// Emits the C entry points of a tool (`OnLoad`, `OnUnload`, `HSA_AMD_TOOL_PRIORITY`,
/// `ROCPROF_REPLAY_CLAIM`, and with the `cuda` feature `InitializeInjection`). Used by
/// `#[rocprof_tool]`; not meant to be called by hand.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_tool {
    ($ty:ty, $make:expr) => {
        // A library exports one tool. Two `#[rocprof_tool]`s in different modules do not clash
        // by name, only by exported symbol, and that clash is found late (at code generation,
        // naming whichever symbol the compiler happens to emit first). This crate-root macro
        // makes the mistake a name-resolution error, found early and named the same every time.
        #[doc(hidden)]
        #[macro_export]
        macro_rules! one_rocprof_tool_per_library {
            () => {};
        }

        /// Tool priority among preloaded HSA tools (read by the runtime).
        #[unsafe(no_mangle)]
        pub static HSA_AMD_TOOL_PRIORITY: u32 = $crate::__private::TOOL_PRIORITY;

        /// This tool's kernel-replay claim word (single subscriber per process).
        #[unsafe(no_mangle)]
        pub static ROCPROF_REPLAY_CLAIM: $crate::__private::Claim = $crate::__private::Claim::new();

        /// Called by the HSA runtime with its live API table.
        ///
        /// # Safety
        /// Called by the runtime only.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn OnLoad(
            table: *mut $crate::__private::HsaApiTable,
            runtime_version: u64,
            failed_tool_count: u64,
            failed_tool_names: *const *const ::core::ffi::c_char,
        ) -> bool {
            // SAFETY: forwarded from the runtime.
            unsafe {
                $crate::__private::on_load::<$ty>(
                    table,
                    runtime_version,
                    failed_tool_count,
                    failed_tool_names,
                    || ($make)(),
                )
            }
        }

        /// Called by the HSA runtime at its last `hsa_shut_down`.
        #[unsafe(no_mangle)]
        pub extern "C" fn OnUnload() {
            $crate::__private::on_unload()
        }

        $crate::__export_cuda_injection!($ty, $make);
    };
}

/// Emits the CUDA entry points of a tool (feature `cuda`): `InitializeInjection`, called by the
/// CUDA driver when `CUDA_INJECTION64_PATH` names the library, and a library constructor that
/// sets that variable when the library is preloaded. Used by `__export_tool!`.
#[cfg(feature = "cuda")]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_cuda_injection {
    ($ty:ty, $make:expr) => {
        /// Called by the CUDA driver during `cuInit` (`CUDA_INJECTION64_PATH`).
        #[unsafe(no_mangle)]
        pub extern "C" fn InitializeInjection() -> ::core::ffi::c_int {
            $crate::__private::initialize_injection::<$ty>(|| ($make)())
        }

        /// Points `CUDA_INJECTION64_PATH` at this library when it is preloaded.
        #[used]
        #[unsafe(link_section = ".init_array")]
        static __ROCPROF_REPLAY_CUDA_PRELOAD: extern "C" fn() = $crate::__private::cuda_preload;
    };
}

/// Without the `cuda` feature a tool has no CUDA entry points.
#[cfg(not(feature = "cuda"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_cuda_injection {
    ($ty:ty, $make:expr) => {};
}
