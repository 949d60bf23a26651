//! Kernel shadows: host implementations of the kernels of AMDGPU code objects.
//!
//! hsa-emu never runs AMDGPU machine code. A dispatch of AMDGPU kernel `N` runs its *shadow*, a
//! host function with the hsa-emu kernel ABI (`include/hsa_emu_kernel.h`), found when the code
//! object is loaded:
//!
//! 1. in the shadow libraries named by `HSA_EMU_SHADOW` (separated by `:`, read once per
//!    process, each `dlopen`ed `RTLD_NOW | RTLD_LOCAL` the first time an AMDGPU code object is
//!    loaded, so a name without `/` is searched like any `dlopen` name), in that order: the library that exports `HSA_EMU_KERNEL(N, args_t)` (the record
//!    `__hsa_emu_meta_N` in its own `.dynsym`). Its `sizeof(args_t)` must be the kernel's
//!    explicit-argument extent (end of the last non-hidden argument of the metadata) rounded up
//!    to `_Alignof(args_t)`, and `_Alignof(args_t)` at most `.kernarg_segment_align`;
//! 2. else among the built-in shadows of the ROCclr blit kernels (see [`crate::blit`]) and of
//!    rocprof-replay's compare and fingerprint kernels (see [`crate::replay_kernels`]), whose
//!    argument layout is checked against the metadata.
//!
//! A kernel whose shadow is missing or refused (declared size mismatch, wrong ABI version) is
//! still loaded: the reason is printed at load and kept, and a dispatch of the kernel fails
//! through the queue's error callback (see `queues::processor`).
//!
//! A variable `N` of the code object is backed by the object `N` a shadow library exports (a
//! defined data object of its own `.dynsym`), if one does, so that the application
//! (`hipMemcpyToSymbol`), the shadows and tools see the same memory. See `loader` for how it is
//! initialised.
//!
//! Libraries are never unloaded. A library that cannot be opened is reported on stderr and
//! skipped.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_void};
use std::sync::Arc;
#[cfg(not(test))]
use std::sync::OnceLock;

use parking_lot::RwLock;

use crate::kernel_abi::{KERNEL_ABI_VERSION, KernelEntry, META_PREFIX, hsa_emu_kernel_meta_t};
use crate::loader::amdgpu::KernelMeta;
use crate::loader::elf;

/// The environment variable naming the shadow libraries.
pub(crate) const SHADOW_ENV: &str = "HSA_EMU_SHADOW";

/// One opened shadow library.
struct Library {
    path: String,
    handle: usize,
    elf: elf::ElfInfo,
}

/// The libraries of `HSA_EMU_SHADOW`, opened on first use (in unit tests: those set by
/// `set_test_libraries`).
fn libraries() -> Vec<&'static Library> {
    #[cfg(test)]
    {
        TEST_LIBS.lock().clone()
    }
    #[cfg(not(test))]
    {
        static LIBS: OnceLock<Vec<&'static Library>> = OnceLock::new();
        LIBS.get_or_init(|| match std::env::var(SHADOW_ENV) {
            Ok(list) => open_all(list.split(':')),
            Err(_) => Vec::new(),
        })
        .clone()
    }
}

/// Opens each non-empty path; a library that cannot be opened is reported and skipped.
fn open_all<'a>(paths: impl Iterator<Item = &'a str>) -> Vec<&'static Library> {
    paths
        .filter(|p| !p.is_empty())
        .filter_map(|path| match open(path) {
            // Leaked on purpose: shadow libraries are never unloaded.
            Ok(lib) => Some(&*Box::leak(Box::new(lib))),
            Err(e) => {
                eprintln!("hsa-emu: {SHADOW_ENV}: cannot load {path}: {e}");
                None
            }
        })
        .collect()
}

#[cfg(test)]
static TEST_LIBS: parking_lot::Mutex<Vec<&'static Library>> = parking_lot::const_mutex(Vec::new());

/// Unit tests: replaces the shadow libraries (the environment is read once per process, too
/// late for tests that share one).
#[cfg(test)]
pub(crate) fn set_test_libraries(paths: &[&str]) {
    let libs = open_all(paths.iter().copied());
    assert_eq!(libs.len(), paths.len(), "every test shadow library opens");
    *TEST_LIBS.lock() = libs;
}

/// The paths of the opened shadow libraries, for messages.
pub(crate) fn library_paths() -> Vec<String> {
    libraries().iter().map(|l| l.path.clone()).collect()
}

/// `dlopen`s `path` (a name without `/` is searched like any `dlopen` name) and reads the
/// symbol table of the file the dynamic loader opened.
fn open(path: &str) -> Result<Library, String> {
    let cpath = CString::new(path).map_err(|_| "the path contains a NUL byte".to_string())?;
    // SAFETY: a valid C string; dlopen runs the library's initialisers, which is what loading
    // a shadow library means.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns null or a C string valid until the next dl* call.
        let msg = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_owned()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(msg);
    }
    let mut map: *mut crate::loader::LinkMap = std::ptr::null_mut();
    // SAFETY: a live handle and an out-pointer of the type RTLD_DI_LINKMAP writes.
    let found = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut crate::loader::LinkMap).cast(),
        )
    } == 0
        && !map.is_null();
    let file = if found {
        // SAFETY: glibc's live link_map of this object; `l_name` is its NUL-terminated name.
        let name = unsafe { CStr::from_ptr((*map).l_name) };
        name.to_string_lossy().into_owned()
    } else {
        path.to_owned()
    };
    let bytes = std::fs::read(&file).map_err(|e| format!("{file}: {e}"))?;
    let elf = elf::parse(&bytes).map_err(|e| format!("{file}: {e}"))?;
    if elf.machine != elf::Machine::X86_64 {
        return Err("not a host (x86-64) shared library".into());
    }
    Ok(Library {
        path: path.to_owned(),
        handle: handle as usize,
        elf,
    })
}

impl Library {
    /// The address of `name` if this library itself defines it as a data object.
    fn object(&self, name: &str) -> Option<(u64, &elf::DynSymbol)> {
        let sym = self
            .elf
            .symbols
            .iter()
            .find(|s| s.kind == elf::SymbolKind::Object && s.name == name)?;
        let cname = CString::new(name).ok()?;
        // SAFETY: a live handle and a valid C string.
        let p = unsafe { libc::dlsym(self.handle as *mut c_void, cname.as_ptr()) };
        (!p.is_null()).then_some((p as u64, sym))
    }
}

/// How a kernel with a shadow runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolved {
    /// The shadow's entry point.
    pub(crate) entry: KernelEntry,
    /// Group memory the shadow declared (`HSA_EMU_KERNEL_WITH_GROUP`), in bytes.
    pub(crate) group_segment_size: u32,
}

/// The shadow of one AMDGPU kernel, or why it has none.
#[derive(Debug)]
pub(crate) struct ShadowKernel {
    /// Where the shadow came from (`built-in`, or a library path), for messages.
    pub(crate) source: String,
    /// The shadow, or why there is none.
    pub(crate) resolved: Result<Resolved, String>,
}

/// `n` rounded up to a multiple of `align` (a power of two, or 0 for no rounding).
fn round_up(n: u64, align: u64) -> u64 {
    if align <= 1 {
        n
    } else {
        n.div_ceil(align) * align
    }
}

/// Finds the shadow of `meta`'s kernel (libraries first, then the built-ins).
pub(crate) fn resolve(meta: &KernelMeta) -> ShadowKernel {
    let mut shadow = ShadowKernel {
        source: String::new(),
        resolved: Err(String::new()),
    };
    let record = format!("{META_PREFIX}{}", meta.name);
    for lib in libraries() {
        let Some((address, sym)) = lib.object(&record) else {
            continue;
        };
        shadow.source = lib.path.clone();
        shadow.resolved = check_library_shadow(meta, address, sym.size);
        return shadow;
    }
    if let Some(b) =
        crate::blit::find(&meta.name).or_else(|| crate::replay_kernels::find(&meta.name))
    {
        shadow.source = "built-in".into();
        shadow.resolved = b.check(meta).map(|()| Resolved {
            entry: b.entry,
            group_segment_size: 0,
        });
        return shadow;
    }
    let libs = library_paths();
    shadow.resolved = Err(if libs.is_empty() {
        format!(
            "kernel {} has no shadow: {SHADOW_ENV} names no library",
            meta.name
        )
    } else {
        format!(
            "kernel {} has no shadow: none of the {SHADOW_ENV} libraries ({}) exports HSA_EMU_KERNEL({}, ...)",
            meta.name,
            libs.join(":"),
            meta.name
        )
    });
    shadow
}

fn check_library_shadow(
    meta: &KernelMeta,
    address: u64,
    record_size: u64,
) -> Result<Resolved, String> {
    let name = &meta.name;
    if record_size < std::mem::size_of::<hsa_emu_kernel_meta_t>() as u64 {
        return Err(format!(
            "shadow of kernel {name}: {META_PREFIX}{name} is {record_size} bytes, not a hsa_emu_kernel_meta_t"
        ));
    }
    // SAFETY: the library defines this object with at least the record's size (checked).
    let rec = unsafe { (address as *const hsa_emu_kernel_meta_t).read_unaligned() };
    if rec.abi_version != KERNEL_ABI_VERSION {
        return Err(format!(
            "shadow of kernel {name}: abi_version {} (this runtime speaks {KERNEL_ABI_VERSION})",
            rec.abi_version
        ));
    }
    let Some(entry) = rec.entry else {
        return Err(format!("shadow of kernel {name}: null entry point"));
    };
    let extent = meta.explicit_extent();
    let align = u64::from(rec.kernarg_alignment);
    let size = u64::from(rec.kernarg_size);
    let fits = if extent == 0 {
        size <= 1 // an empty struct (0 in C, 1 in C++) or one placeholder byte
    } else {
        align.is_power_of_two() && size == round_up(extent, align)
    };
    if !fits {
        return Err(format!(
            "shadow of kernel {name}: sizeof(args_t) = {size} (alignment {align}), but the kernel's explicit arguments [{}] end at byte {extent}; args_t must mirror them in declaration order",
            meta.explicit_layout()
        ));
    }
    if align > u64::from(meta.kernarg_segment_align) {
        return Err(format!(
            "shadow of kernel {name}: _Alignof(args_t) = {align} exceeds the kernarg segment alignment {}",
            meta.kernarg_segment_align
        ));
    }
    Ok(Resolved {
        entry,
        group_segment_size: rec.group_segment_size,
    })
}

/// A shadow library's object backing a code object variable.
#[derive(Debug, Clone)]
pub(crate) struct ShadowObject {
    /// Its run-time address.
    pub(crate) address: u64,
    /// Its `st_size`.
    pub(crate) size: u64,
    /// Whether it lives in the library's read-only data.
    pub(crate) read_only: bool,
    /// The library's path.
    pub(crate) library: String,
}

/// The object `name` of the first shadow library that defines one.
pub(crate) fn find_object(name: &str) -> Option<ShadowObject> {
    libraries().into_iter().find_map(|lib| {
        lib.object(name).map(|(address, sym)| ShadowObject {
            address,
            size: sym.size,
            read_only: sym.read_only,
            library: lib.path.clone(),
        })
    })
}

/// AMDGPU kernel objects (descriptor addresses) of loaded code objects -> their shadows.
static KERNELS: RwLock<BTreeMap<u64, Arc<ShadowKernel>>> = RwLock::new(BTreeMap::new());

/// Makes dispatches of `kernel_object` run `shadow`.
pub(crate) fn register(kernel_object: u64, shadow: Arc<ShadowKernel>) {
    KERNELS.write().insert(kernel_object, shadow);
}

/// Forgets `kernel_object` (its code object was unloaded).
pub(crate) fn unregister(kernel_object: u64) {
    KERNELS.write().remove(&kernel_object);
}

/// The shadow registered for `kernel_object`, if it is an AMDGPU kernel of a loaded code object.
pub(crate) fn lookup(kernel_object: u64) -> Option<Arc<ShadowKernel>> {
    KERNELS.read().get(&kernel_object).cloned()
}
