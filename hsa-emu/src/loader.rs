//! Code objects: readers, executables, symbols, and the AMD loader extension (0x201).
//!
//! Two kinds of code object load:
//!
//! - **Host code objects**: a host shared library (x86-64 ELF, `ET_DYN`) of kernels written
//!   against `include/hsa_emu_kernel.h`. Every load (`hsa_executable_load_agent_code_object` /
//!   `_load_program_code_object`) writes the reader's private copy of the bytes to a fresh
//!   `memfd` and `dlopen`s it (`RTLD_NOW | RTLD_LOCAL`), so each load is a distinct instance
//!   with its own module-scope variables, like the per-agent copies of a GPU. Symbols come from
//!   the file's `.dynsym` (defined global symbols only): a data object `__hsa_emu_meta_<name>`
//!   is the KERNEL symbol `<name>.kd`, whose `KERNEL_OBJECT` is the address of a 64-byte
//!   [`KernelDescriptor`] this module allocates; any other data object whose name does not start
//!   with `__hsa_emu_` is a VARIABLE symbol (`VARIABLE_IS_CONST` when it lives in a
//!   non-writable section or `.data.rel.ro`); functions and everything else are not symbols.
//! - **AMDGPU code objects** (`EM_AMDGPU`, v3 to v5: hipcc, comgr; see [`amdgpu`]): each load
//!   copies the segments into a fresh image. The KERNEL symbols are the metadata's kernels
//!   (`N.kd`): `KERNEL_OBJECT` is the descriptor's address in the image (its real bytes), and
//!   the segment sizes, kernarg size and alignment and `DYNAMIC_CALLSTACK` are the metadata's.
//!   The VARIABLE symbols are the program's variables, each backed by a shadow library's object
//!   of the same name if one exists (see [`crate::shadow`]; the code object's initial bytes are
//!   copied into it at every load, and a size mismatch or a read-only object for a writable
//!   variable fails the load with `INVALID_CODE_OBJECT`), else by the image. A code object for
//!   another processor than the agent's (`gfx90a`), or one loaded for the CPU agent, is
//!   `HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS`, as ROCr answers. Each kernel's shadow is
//!   resolved at load; a dispatch of its `KERNEL_OBJECT` runs it (`queues::processor`).
//!
//! Symbols of an agent load belong to (executable, agent); those of a program load are program
//! symbols (agent handle 0). Iteration follows load order, then `.dynsym` order.
//!
//! Attribute choices where ROCr has nothing to copy from: `LINKAGE` is always PROGRAM,
//! `IS_DEFINITION` true, `MODULE_NAME` empty, `VARIABLE_ALIGNMENT` is the largest power of two
//! dividing the address, capped at 16 (ELF records no per-symbol alignment), host kernels
//! report `DYNAMIC_CALLSTACK` false, every kernel call convention 0; `INDIRECT_FUNCTION_*` and attributes of the
//! other symbol kind are `HSA_STATUS_ERROR_INVALID_ARGUMENT`.
//!
//! Not implemented (their slots keep the table's stub, which returns `HSA_STATUS_ERROR`): the
//! deprecated `hsa_code_object_*` API and `hsa_executable_load_code_object`, and the
//! `hsa_executable_*_variable_define` functions (code objects here have no external variables).
//!
//! Loader extension: loaded segments are the `PT_LOAD` ranges of each instance (or image),
//! relocated by its load bias; kernel descriptors also count as addresses of their executable,
//! and are their own host address (`hsa_ven_amd_loader_query_host_address`). Segment descriptors
//! and `CODE_OBJECT_STORAGE_MEMORY_BASE` point at the loader's own copy of the bytes (always
//! readable while the executable lives). `URI` is written as exactly `URI_LENGTH` bytes (no NUL),
//! like `NAME`. `hsa_ven_amd_loader_iterate_executables` iterates a snapshot: executables created
//! or destroyed by the callback are not blocked and do not change the iteration.

pub(crate) mod amdgpu;
pub(crate) mod elf;

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::mem::size_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rocprof_replay_sys::*;

use crate::api::Tables;
use crate::ffi::{guard_status, write_out};
use crate::kernel_abi::{
    KERNEL_ABI_VERSION, KERNEL_DESCRIPTOR_MAGIC, KernelDescriptor, META_PREFIX, RESERVED_PREFIX,
    hsa_emu_kernel_meta_t,
};
use crate::topology::topology;

/// Tag of code-object reader handles ("RD").
const READER_TAG: u64 = 0x5244_0000_0000;
/// Tag of executable handles ("EX").
const EXECUTABLE_TAG: u64 = 0x4558_0000_0000;
/// Tag of loaded-code-object handles ("LC").
const LOADED_TAG: u64 = 0x4C43_0000_0000;
/// Tag of executable-symbol handles ("SY").
const SYMBOL_TAG: u64 = 0x5359_0000_0000;
/// Bits of a handle that hold its id.
const ID_MASK: u64 = 0xFFFF_FFFF;

/// Most bytes `VARIABLE_ALIGNMENT` reports.
const MAX_REPORTED_ALIGNMENT: u32 = 16;

/// A new handle with `tag`: ids are never reused, so handles are unique for the process.
fn new_handle(tag: u64) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    assert!(id <= ID_MASK, "hsa-emu: loader handle space exhausted");
    tag | id
}

/// Whether `handle` carries `tag` (cheap rejection of foreign handles).
fn has_tag(handle: u64, tag: u64) -> bool {
    handle & !ID_MASK == tag && handle & ID_MASK != 0
}

/// Where a reader's bytes came from.
#[derive(Debug)]
enum Storage {
    /// A file descriptor (the application's; not used after the reader is created).
    File { fd: c_int },
    /// Application memory (copied).
    Memory,
}

/// A validated code object: its bytes and what the ELF parser found in them.
#[derive(Debug)]
struct CodeObject {
    bytes: Vec<u8>,
    storage: Storage,
    uri: String,
    elf: elf::ElfInfo,
    /// For an AMDGPU code object: its metadata, kernels and variables.
    amd: Option<amdgpu::AmdCodeObject>,
}

/// One executable.
#[derive(Debug)]
struct Executable {
    profile: hsa_profile_t,
    rounding: hsa_default_float_rounding_mode_t,
    frozen: bool,
    /// Loaded code objects in load order.
    loaded: Vec<u64>,
}

/// One `dlopen`ed instance of a code object; dropping it unloads it.
#[derive(Debug)]
struct Instance {
    /// The `dlopen` handle.
    handle: usize,
    /// The memfd the instance was opened from (kept open so that its `/proc/self/fd/N` name
    /// stays unique among live instances).
    memfd: c_int,
    /// Load bias: run-time address minus ELF virtual address.
    bias: u64,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: `handle` came from a successful dlopen and is closed exactly once, here;
        // `memfd` is our own descriptor.
        unsafe {
            libc::dlclose(self.handle as *mut c_void);
            libc::close(self.memfd);
        }
    }
}

/// One relocated `PT_LOAD` segment of an instance.
#[derive(Debug, Clone, Copy)]
struct Segment {
    base: u64,
    size: u64,
    file_offset: u64,
}

/// What holds a loaded code object's bytes.
#[derive(Debug)]
enum Backing {
    /// A host shared library, `dlopen`ed.
    Host(Instance),
    /// An AMDGPU code object's image.
    Amd(amdgpu::Image),
}

impl Backing {
    /// Load bias: run-time address minus ELF virtual address.
    fn bias(&self) -> u64 {
        match self {
            Backing::Host(i) => i.bias,
            Backing::Amd(image) => image.base(),
        }
    }
}

/// A code object loaded into an executable.
#[derive(Debug)]
struct Loaded {
    executable: u64,
    /// `None` for a program load.
    agent: Option<hsa_agent_t>,
    code: Arc<CodeObject>,
    backing: Backing,
    segments: Vec<Segment>,
    /// Symbols in `.dynsym` order.
    symbols: Vec<u64>,
}

/// What a symbol is.
#[derive(Debug)]
enum SymbolData {
    /// A kernel and the descriptor its `KERNEL_OBJECT` points at.
    Kernel(Box<KernelDescriptor>),
    /// A kernel of an AMDGPU code object: its descriptor in the loaded image and the values of
    /// its metadata.
    AmdKernel {
        object: u64,
        kernarg_size: u32,
        kernarg_alignment: u32,
        group_segment_size: u32,
        private_segment_size: u32,
        dynamic_callstack: bool,
    },
    /// A module-scope variable.
    Variable {
        address: u64,
        size: u64,
        is_const: bool,
    },
}

/// One executable symbol.
#[derive(Debug)]
struct Symbol {
    executable: u64,
    agent: Option<hsa_agent_t>,
    name: String,
    data: SymbolData,
}

impl Symbol {
    fn kernel_object(&self) -> Option<u64> {
        match &self.data {
            SymbolData::Kernel(d) => Some(&**d as *const KernelDescriptor as u64),
            SymbolData::AmdKernel { object, .. } => Some(*object),
            SymbolData::Variable { .. } => None,
        }
    }
}

/// Everything the loader owns.
struct State {
    readers: BTreeMap<u64, Arc<CodeObject>>,
    executables: BTreeMap<u64, Executable>,
    loaded: BTreeMap<u64, Loaded>,
    symbols: BTreeMap<u64, Symbol>,
    /// Kernel descriptor address -> symbol handle.
    descriptors: BTreeMap<u64, u64>,
}

static STATE: Mutex<State> = parking_lot::const_mutex(State {
    readers: BTreeMap::new(),
    executables: BTreeMap::new(),
    loaded: BTreeMap::new(),
    symbols: BTreeMap::new(),
    descriptors: BTreeMap::new(),
});

impl State {
    /// The executable owning `address`: inside a loaded segment or a kernel descriptor.
    fn executable_at(&self, address: u64) -> Option<u64> {
        if let Some((&desc, &sym)) = self.descriptors.range(..=address).next_back()
            && address < desc + size_of::<KernelDescriptor>() as u64
        {
            return self.symbols.get(&sym).map(|s| s.executable);
        }
        self.loaded
            .values()
            .find(|l| {
                l.segments
                    .iter()
                    .any(|s| address >= s.base && address - s.base < s.size)
            })
            .map(|l| l.executable)
    }

    /// Symbols of `exe` in load order, filtered by `keep(agent)`.
    fn symbols_of(
        &self,
        exe: &Executable,
        keep: impl Fn(Option<hsa_agent_t>) -> bool,
    ) -> Vec<(u64, Option<hsa_agent_t>)> {
        exe.loaded
            .iter()
            .filter_map(|l| self.loaded.get(l))
            .filter(|l| keep(l.agent))
            .flat_map(|l| l.symbols.iter().map(move |&s| (s, l.agent)))
            .collect()
    }
}

/// Name (`name.kd`) of the kernel whose descriptor this loader created at `kernel_object`.
pub(crate) fn kernel_symbol_name(kernel_object: u64) -> Option<String> {
    let state = STATE.lock();
    let sym = state.descriptors.get(&kernel_object)?;
    state.symbols.get(sym).map(|s| s.name.clone())
}

/// Fills the code-object, executable and symbol slots.
pub(crate) fn install(t: &mut Tables) {
    let c = &mut t.core;
    c.hsa_code_object_reader_create_from_file_fn = Some(hsa_code_object_reader_create_from_file);
    c.hsa_code_object_reader_create_from_memory_fn =
        Some(hsa_code_object_reader_create_from_memory);
    c.hsa_code_object_reader_destroy_fn = Some(hsa_code_object_reader_destroy);
    c.hsa_executable_create_fn = Some(hsa_executable_create);
    c.hsa_executable_create_alt_fn = Some(hsa_executable_create_alt);
    c.hsa_executable_destroy_fn = Some(hsa_executable_destroy);
    c.hsa_executable_load_agent_code_object_fn = Some(hsa_executable_load_agent_code_object);
    c.hsa_executable_load_program_code_object_fn = Some(hsa_executable_load_program_code_object);
    c.hsa_executable_freeze_fn = Some(hsa_executable_freeze);
    c.hsa_executable_get_info_fn = Some(hsa_executable_get_info);
    c.hsa_executable_validate_fn = Some(hsa_executable_validate);
    c.hsa_executable_validate_alt_fn = Some(hsa_executable_validate_alt);
    c.hsa_executable_get_symbol_fn = Some(hsa_executable_get_symbol);
    c.hsa_executable_get_symbol_by_name_fn = Some(hsa_executable_get_symbol_by_name);
    c.hsa_executable_symbol_get_info_fn = Some(hsa_executable_symbol_get_info);
    c.hsa_executable_iterate_symbols_fn = Some(hsa_executable_iterate_symbols);
    c.hsa_executable_iterate_agent_symbols_fn = Some(hsa_executable_iterate_agent_symbols);
    c.hsa_executable_iterate_program_symbols_fn = Some(hsa_executable_iterate_program_symbols);
}

// ---- readers -------------------------------------------------------------------------------

/// Percent-encodes a path for a `file://` URI (everything outside `[a-zA-Z0-9/_.~-]`).
fn uri_encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/_.~-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads `size` bytes (all that follow `offset` when `None`) of `fd` with `pread`.
fn read_fd(fd: c_int, offset: usize, size: Option<usize>) -> Result<Vec<u8>, hsa_status_t> {
    // SAFETY: all-zero is a valid `stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-buffer; a bad fd makes fstat fail, nothing else.
    if fd < 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(HSA_STATUS_ERROR_INVALID_FILE);
    }
    let file_size = usize::try_from(st.st_size).unwrap_or(0);
    if file_size == 0 || offset >= file_size {
        return Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
    }
    let size = size.unwrap_or(file_size - offset);
    if size == 0 || offset.checked_add(size).is_none_or(|end| end > file_size) {
        return Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
    }
    let mut bytes = vec![0u8; size];
    let mut done = 0;
    while done < size {
        // SAFETY: the destination is the unfilled tail of `bytes`.
        let n = unsafe {
            libc::pread(
                fd,
                bytes.as_mut_ptr().add(done).cast(),
                size - done,
                (offset + done) as libc::off_t,
            )
        };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(HSA_STATUS_ERROR_INVALID_FILE);
        }
        if n == 0 {
            return Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        }
        done += n as usize;
    }
    Ok(bytes)
}

/// Validates `bytes` and registers a reader for them.
fn new_reader(
    bytes: Vec<u8>,
    storage: Storage,
    uri: impl FnOnce(&[u8]) -> String,
) -> Result<u64, hsa_status_t> {
    let refuse = |e: &dyn std::fmt::Display| {
        eprintln!("hsa-emu: code object refused: {e}");
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT
    };
    let elf = elf::parse(&bytes).map_err(|e| refuse(&e))?;
    let amd = match elf.machine {
        elf::Machine::X86_64 => None,
        elf::Machine::Amdgpu => {
            Some(amdgpu::AmdCodeObject::parse(&elf, bytes.len()).map_err(|e| refuse(&e))?)
        }
    };
    let uri = uri(&bytes);
    let handle = new_handle(READER_TAG);
    STATE.lock().readers.insert(
        handle,
        Arc::new(CodeObject {
            bytes,
            storage,
            uri,
            elf,
            amd,
        }),
    );
    Ok(handle)
}

fn reader_from_file(
    file: hsa_file_t,
    range: Option<(usize, usize)>,
    out: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    if out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let (offset, size) = match range {
        Some((offset, size)) => (offset, Some(size)),
        None => (0, None),
    };
    let bytes = match read_fd(file, offset, size) {
        Ok(b) => b,
        Err(status) => return status,
    };
    let path = std::fs::read_link(format!("/proc/self/fd/{file}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("/proc/self/fd/{file}"));
    let made = new_reader(bytes, Storage::File { fd: file }, |b| match range {
        Some((offset, _)) => {
            format!(
                "file://{}#offset={offset:#x}&size={}",
                uri_encode(&path),
                b.len()
            )
        }
        None => format!("file://{}", uri_encode(&path)),
    });
    match made {
        Ok(handle) => {
            // SAFETY: non-null, and valid per the API contract.
            unsafe { out.write(hsa_code_object_reader_t { handle }) };
            HSA_STATUS_SUCCESS
        }
        Err(status) => status,
    }
}

/// `hsa_code_object_reader_create_from_file`: reads the whole file through `file` now.
unsafe extern "C" fn hsa_code_object_reader_create_from_file(
    file: hsa_file_t,
    code_object_reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    guard_status(|| reader_from_file(file, None, code_object_reader))
}

/// `hsa_code_object_reader_create_from_memory`: copies `size` bytes at `code_object`.
unsafe extern "C" fn hsa_code_object_reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    code_object_reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    guard_status(|| {
        if code_object.is_null() || size == 0 || code_object_reader.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: the caller guarantees `size` readable bytes at `code_object`.
        let bytes = unsafe { std::slice::from_raw_parts(code_object.cast::<u8>(), size) }.to_vec();
        let made = new_reader(bytes, Storage::Memory, |b| {
            format!(
                "memory://{}#offset={:#x}&size={}",
                std::process::id(),
                b.as_ptr() as usize,
                b.len()
            )
        });
        match made {
            Ok(handle) => {
                // SAFETY: non-null, valid per the API contract.
                unsafe { code_object_reader.write(hsa_code_object_reader_t { handle }) };
                HSA_STATUS_SUCCESS
            }
            Err(status) => status,
        }
    })
}

/// `hsa_code_object_reader_destroy`: forgets the reader (loads made from it stay valid).
unsafe extern "C" fn hsa_code_object_reader_destroy(
    code_object_reader: hsa_code_object_reader_t,
) -> hsa_status_t {
    guard_status(|| {
        let removed = STATE.lock().readers.remove(&code_object_reader.handle);
        match removed {
            Some(_) => HSA_STATUS_SUCCESS,
            None => HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        }
    })
}

// ---- executables ---------------------------------------------------------------------------

fn create_executable(
    profile: hsa_profile_t,
    rounding: hsa_default_float_rounding_mode_t,
    frozen: bool,
    out: *mut hsa_executable_t,
) -> hsa_status_t {
    if out.is_null()
        || !matches!(profile, HSA_PROFILE_BASE | HSA_PROFILE_FULL)
        || !matches!(
            rounding,
            HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT
                | HSA_DEFAULT_FLOAT_ROUNDING_MODE_ZERO
                | HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR
        )
    {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let handle = new_handle(EXECUTABLE_TAG);
    STATE.lock().executables.insert(
        handle,
        Executable {
            profile,
            rounding,
            frozen,
            loaded: Vec::new(),
        },
    );
    // SAFETY: non-null, valid per the API contract.
    unsafe { out.write(hsa_executable_t { handle }) };
    HSA_STATUS_SUCCESS
}

/// `hsa_executable_create_alt`: an empty, unfrozen executable.
unsafe extern "C" fn hsa_executable_create_alt(
    profile: hsa_profile_t,
    default_float_rounding_mode: hsa_default_float_rounding_mode_t,
    _options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t {
    guard_status(|| create_executable(profile, default_float_rounding_mode, false, executable))
}

/// `hsa_executable_create` (deprecated): an empty executable in the given state.
unsafe extern "C" fn hsa_executable_create(
    profile: hsa_profile_t,
    executable_state: hsa_executable_state_t,
    _options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t {
    guard_status(|| {
        let frozen = match executable_state {
            HSA_EXECUTABLE_STATE_UNFROZEN => false,
            HSA_EXECUTABLE_STATE_FROZEN => true,
            _ => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
        };
        create_executable(
            profile,
            HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
            frozen,
            executable,
        )
    })
}

/// `hsa_executable_destroy`: unloads every instance and frees the kernel descriptors.
unsafe extern "C" fn hsa_executable_destroy(executable: hsa_executable_t) -> hsa_status_t {
    guard_status(|| {
        let removed: Vec<Loaded> = {
            let mut state = STATE.lock();
            let Some(exe) = state.executables.remove(&executable.handle) else {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            };
            let mut removed = Vec::new();
            for lco in exe.loaded {
                let Some(loaded) = state.loaded.remove(&lco) else {
                    continue;
                };
                for sym in &loaded.symbols {
                    if let Some(s) = state.symbols.remove(sym)
                        && let Some(object) = s.kernel_object()
                    {
                        state.descriptors.remove(&object);
                        if matches!(s.data, SymbolData::AmdKernel { .. }) {
                            crate::shadow::unregister(object);
                        }
                    }
                }
                removed.push(loaded);
            }
            removed
        };
        // Unload outside the lock: library destructors may call back into the runtime.
        drop(removed);
        HSA_STATUS_SUCCESS
    })
}

/// Writes `bytes` to a new memfd and `dlopen`s it as a distinct instance.
fn open_instance(bytes: &[u8]) -> Result<Instance, String> {
    // SAFETY: the name is a NUL-terminated literal.
    let memfd = unsafe { libc::memfd_create(c"hsa-emu-code-object".as_ptr(), libc::MFD_CLOEXEC) };
    if memfd < 0 {
        return Err(format!(
            "memfd_create failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    let close_fd = |msg: String| {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(memfd) };
        Err(msg)
    };
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: the source is the unwritten tail of `bytes`.
        let n = unsafe { libc::write(memfd, bytes.as_ptr().add(done).cast(), bytes.len() - done) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return close_fd(format!("writing the memfd failed: {e}"));
        }
        done += n as usize;
    }
    let path = CString::new(format!("/proc/self/fd/{memfd}")).expect("no NUL in a path of digits");
    // SAFETY: a valid C string; dlopen runs the library's initialisers, which is what loading
    // a code object means here.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
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
        return close_fd(format!("dlopen failed: {msg}"));
    }
    let mut instance = Instance {
        handle: handle as usize,
        memfd,
        bias: 0,
    };
    let mut map: *mut LinkMap = std::ptr::null_mut();
    // SAFETY: a live handle and an out-pointer of the type RTLD_DI_LINKMAP writes.
    if unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut LinkMap).cast(),
        )
    } != 0
        || map.is_null()
    {
        return Err("dlinfo(RTLD_DI_LINKMAP) failed".to_owned()); // `instance` drops: unloads
    }
    // SAFETY: glibc returned its live link_map for this object; its first field is public ABI.
    instance.bias = unsafe { (*map).l_addr } as u64;
    Ok(instance)
}

/// The public head of glibc's `struct link_map` (`<link.h>`).
#[repr(C)]
pub(crate) struct LinkMap {
    pub(crate) l_addr: usize,
    pub(crate) l_name: *const c_char,
    l_ld: *mut c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

/// Address of `name` in `instance`, or its relocated `st_value` if dlsym cannot see it.
fn symbol_address(instance: &Instance, name: &str, value: u64) -> u64 {
    let Ok(cname) = CString::new(name) else {
        return instance.bias.wrapping_add(value);
    };
    // SAFETY: a live handle and a valid C string.
    let p = unsafe { libc::dlsym(instance.handle as *mut c_void, cname.as_ptr()) };
    if p.is_null() {
        instance.bias.wrapping_add(value)
    } else {
        p as u64
    }
}

/// Builds the symbols of one instance in `.dynsym` order: `(name, data)`.
fn collect_symbols(
    code: &CodeObject,
    instance: &Instance,
) -> Result<Vec<(String, SymbolData)>, String> {
    let mut out = Vec::new();
    for sym in code
        .elf
        .symbols
        .iter()
        .filter(|s| s.kind == elf::SymbolKind::Object)
    {
        if let Some(kernel) = sym.name.strip_prefix(META_PREFIX) {
            if kernel.is_empty() {
                continue;
            }
            if sym.size < size_of::<hsa_emu_kernel_meta_t>() as u64 {
                return Err(format!(
                    "{}: {} bytes, not a hsa_emu_kernel_meta_t",
                    sym.name, sym.size
                ));
            }
            let address = symbol_address(instance, &sym.name, sym.value);
            // SAFETY: the loaded instance defines this object with at least the record's size
            // (checked above); read unaligned in case the producer packed it.
            let meta = unsafe { (address as *const hsa_emu_kernel_meta_t).read_unaligned() };
            if meta.abi_version != KERNEL_ABI_VERSION {
                return Err(format!(
                    "kernel {kernel}: abi_version {} (this runtime speaks {KERNEL_ABI_VERSION})",
                    meta.abi_version
                ));
            }
            let Some(entry) = meta.entry else {
                return Err(format!("kernel {kernel}: null entry point"));
            };
            let descriptor = Box::new(KernelDescriptor {
                magic: KERNEL_DESCRIPTOR_MAGIC,
                entry,
                kernarg_size: meta.kernarg_size,
                kernarg_alignment: meta.kernarg_alignment,
                group_segment_size: meta.group_segment_size,
                private_segment_size: meta.private_segment_size,
                reserved: [0; 4],
            });
            out.push((format!("{kernel}.kd"), SymbolData::Kernel(descriptor)));
        } else if !sym.name.starts_with(RESERVED_PREFIX) {
            let address = symbol_address(instance, &sym.name, sym.value);
            out.push((
                sym.name.clone(),
                SymbolData::Variable {
                    address,
                    size: sym.size,
                    is_const: sym.read_only,
                },
            ));
        }
    }
    Ok(out)
}

/// Checks that `exe` exists and accepts loads.
fn check_loadable(state: &State, exe: u64) -> Result<(), hsa_status_t> {
    match state.executables.get(&exe) {
        None => Err(HSA_STATUS_ERROR_INVALID_EXECUTABLE),
        Some(e) if e.frozen => Err(HSA_STATUS_ERROR_FROZEN_EXECUTABLE),
        Some(_) => Ok(()),
    }
}

/// What loading an AMDGPU code object makes: its image, its symbols in `.dynsym` order, and
/// the shadow of each kernel object.
type AmdLoad = (
    Backing,
    Vec<(String, SymbolData)>,
    Vec<(u64, Arc<crate::shadow::ShadowKernel>)>,
);

/// One variable backed by a shadow library's object instead of the image.
struct Redirect {
    vaddr: u64,
    size: u64,
    address: u64,
    writable: bool,
}

/// Maps an AMDGPU code object for `agent`: checks its target against the agent's ISA, copies
/// its segments into a fresh image, backs its variables (shadow objects or the image), applies
/// its relocations and resolves each kernel's shadow.
fn load_amd(
    code: &CodeObject,
    amd: &amdgpu::AmdCodeObject,
    agent: Option<hsa_agent_t>,
) -> Result<AmdLoad, hsa_status_t> {
    let fail = |msg: String, status: hsa_status_t| {
        eprintln!("hsa-emu: cannot load code object {}: {msg}", code.uri);
        status
    };
    if let Some(agent) = agent {
        let isa = topology()
            .agent(agent)
            .filter(|a| a.kind == crate::topology::DeviceKind::Gpu)
            .map(|_| crate::info::ISA_NAME);
        let processor = isa.and_then(|n| n.rsplit("--").next());
        if processor != Some(amd.processor.as_str()) {
            return Err(fail(
                format!(
                    "its target {} (code object v{}) does not run on the agent ({})",
                    amd.target,
                    amd.version,
                    isa.map_or("the agent has no ISA".to_owned(), |i| format!("ISA {i}"))
                ),
                HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
            ));
        }
    }
    let image = amdgpu::Image::map(&code.elf, amd, &code.bytes)
        .map_err(|m| fail(m, HSA_STATUS_ERROR_OUT_OF_RESOURCES))?;
    let base = image.base();
    let mut redirects = Vec::new();
    for v in &amd.variables {
        let Some(obj) = crate::shadow::find_object(&v.name) else {
            continue;
        };
        if obj.size != v.size {
            return Err(fail(
                format!(
                    "variable {}: the shadow library {} exports it with {} bytes, the code object has {}",
                    v.name, obj.library, obj.size, v.size
                ),
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
            ));
        }
        if obj.read_only && !v.read_only {
            return Err(fail(
                format!(
                    "variable {}: the shadow library {} exports it read-only (const), the code object's is writable",
                    v.name, obj.library
                ),
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
            ));
        }
        if !obj.read_only {
            // SAFETY: the image holds `v.size` bytes at `vaddr` (checked when parsed); the
            // shadow object is writable and exactly as large; they cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (base + v.vaddr) as *const u8,
                    obj.address as *mut u8,
                    v.size as usize,
                )
            };
        }
        redirects.push(Redirect {
            vaddr: v.vaddr,
            size: v.size,
            address: obj.address,
            writable: !obj.read_only,
        });
    }
    let find = |vaddr: u64, writable_only: bool| {
        redirects
            .iter()
            .find(|r| {
                vaddr >= r.vaddr && vaddr - r.vaddr < r.size && (r.writable || !writable_only)
            })
            .map_or(base.wrapping_add(vaddr), |r| r.address + (vaddr - r.vaddr))
    };
    let unsupported = image.relocate(&code.elf, |v| find(v, true), |v| find(v, false));
    if !unsupported.is_empty() {
        eprintln!(
            "hsa-emu: code object {}: relocations of kinds {unsupported:?} are not applied (only code uses them)",
            code.uri
        );
    }
    let mut symbols = Vec::new();
    let mut shadows = Vec::new();
    for sym in &code.elf.symbols {
        if let Some(k) = amd.kernels.iter().find(|k| k.symbol == sym.name) {
            let object = base + k.descriptor_vaddr;
            let shadow = crate::shadow::resolve(k);
            if let Err(why) = &shadow.resolved
                && !shadow.source.is_empty()
            {
                eprintln!(
                    "hsa-emu: {why} ({}); its dispatches will fail",
                    shadow.source
                );
            }
            shadows.push((object, Arc::new(shadow)));
            symbols.push((
                sym.name.clone(),
                SymbolData::AmdKernel {
                    object,
                    kernarg_size: k.kernarg_segment_size,
                    kernarg_alignment: k.kernarg_segment_align,
                    group_segment_size: k.group_segment_fixed_size,
                    private_segment_size: k.private_segment_fixed_size,
                    dynamic_callstack: k.uses_dynamic_stack,
                },
            ));
        } else if let Some(v) = amd.variables.iter().find(|v| v.name == sym.name) {
            symbols.push((
                v.name.clone(),
                SymbolData::Variable {
                    address: find(v.vaddr, false),
                    size: v.size,
                    is_const: v.read_only,
                },
            ));
        }
    }
    Ok((Backing::Amd(image), symbols, shadows))
}

/// Loads the reader's code object into `exe` for `agent` (`None`: a program load).
fn load(
    executable: hsa_executable_t,
    agent: Option<hsa_agent_t>,
    reader: hsa_code_object_reader_t,
    out: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    let code = {
        let state = STATE.lock();
        if let Err(status) = check_loadable(&state, executable.handle) {
            return status;
        }
        match state.readers.get(&reader.handle) {
            Some(c) => Arc::clone(c),
            None => return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        }
    };
    let (backing, symbols, shadows) = if let Some(amd) = &code.amd {
        match load_amd(&code, amd, agent) {
            Ok(loaded) => loaded,
            Err(status) => return status,
        }
    } else {
        // dlopen outside the lock: library initialisers may call the runtime.
        let instance = match open_instance(&code.bytes) {
            Ok(i) => i,
            Err(msg) => {
                eprintln!("hsa-emu: cannot load code object {}: {msg}", code.uri);
                return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
            }
        };
        let symbols = match collect_symbols(&code, &instance) {
            Ok(s) => s,
            Err(msg) => {
                eprintln!("hsa-emu: cannot load code object {}: {msg}", code.uri);
                return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
            }
        };
        (Backing::Host(instance), symbols, Vec::new())
    };
    let segments = code
        .elf
        .loads
        .iter()
        .filter(|s| s.memsz > 0)
        .map(|s| Segment {
            base: backing.bias().wrapping_add(s.vaddr),
            size: s.memsz,
            file_offset: s.offset,
        })
        .collect();
    let mut state = STATE.lock();
    if let Err(status) = check_loadable(&state, executable.handle) {
        drop(state);
        drop(backing);
        return status;
    }
    for (object, shadow) in shadows {
        crate::shadow::register(object, shadow);
    }
    let lco = new_handle(LOADED_TAG);
    let mut handles = Vec::with_capacity(symbols.len());
    for (name, data) in symbols {
        let handle = new_handle(SYMBOL_TAG);
        let symbol = Symbol {
            executable: executable.handle,
            agent,
            name,
            data,
        };
        if let Some(object) = symbol.kernel_object() {
            state.descriptors.insert(object, handle);
        }
        state.symbols.insert(handle, symbol);
        handles.push(handle);
    }
    state.loaded.insert(
        lco,
        Loaded {
            executable: executable.handle,
            agent,
            code,
            backing,
            segments,
            symbols: handles,
        },
    );
    if let Some(exe) = state.executables.get_mut(&executable.handle) {
        exe.loaded.push(lco);
    }
    if !out.is_null() {
        // SAFETY: non-null, valid per the API contract (the out-pointer is optional).
        unsafe { out.write(hsa_loaded_code_object_t { handle: lco }) };
    }
    HSA_STATUS_SUCCESS
}

/// `hsa_executable_load_agent_code_object`: a distinct instance for `agent`.
unsafe extern "C" fn hsa_executable_load_agent_code_object(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    code_object_reader: hsa_code_object_reader_t,
    _options: *const c_char,
    loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    guard_status(|| {
        if topology().agent(agent).is_none() {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        load(
            executable,
            Some(agent),
            code_object_reader,
            loaded_code_object,
        )
    })
}

/// `hsa_executable_load_program_code_object`: an agent-independent instance.
unsafe extern "C" fn hsa_executable_load_program_code_object(
    executable: hsa_executable_t,
    code_object_reader: hsa_code_object_reader_t,
    _options: *const c_char,
    loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    guard_status(|| load(executable, None, code_object_reader, loaded_code_object))
}

/// `hsa_executable_freeze`: no more loads; a second freeze is FROZEN_EXECUTABLE.
unsafe extern "C" fn hsa_executable_freeze(
    executable: hsa_executable_t,
    _options: *const c_char,
) -> hsa_status_t {
    guard_status(|| {
        let mut state = STATE.lock();
        match state.executables.get_mut(&executable.handle) {
            None => HSA_STATUS_ERROR_INVALID_EXECUTABLE,
            Some(e) if e.frozen => HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
            Some(e) => {
                e.frozen = true;
                HSA_STATUS_SUCCESS
            }
        }
    })
}

/// `hsa_executable_get_info`: PROFILE, STATE, DEFAULT_FLOAT_ROUNDING_MODE.
unsafe extern "C" fn hsa_executable_get_info(
    executable: hsa_executable_t,
    attribute: hsa_executable_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let state = STATE.lock();
        let Some(e) = state.executables.get(&executable.handle) else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
        };
        let v: u32 = match attribute {
            HSA_EXECUTABLE_INFO_PROFILE => e.profile,
            HSA_EXECUTABLE_INFO_STATE => {
                if e.frozen {
                    HSA_EXECUTABLE_STATE_FROZEN
                } else {
                    HSA_EXECUTABLE_STATE_UNFROZEN
                }
            }
            HSA_EXECUTABLE_INFO_DEFAULT_FLOAT_ROUNDING_MODE => e.rounding,
            _ => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
        };
        // SAFETY: the caller provides a buffer for the attribute (a 32-bit enum).
        unsafe { write_out(value, v) }
    })
}

fn validate(executable: hsa_executable_t, result: *mut u32) -> hsa_status_t {
    if !STATE.lock().executables.contains_key(&executable.handle) {
        return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    }
    // SAFETY: null or a u32 out-buffer per the API contract.
    unsafe { write_out(result.cast(), 0u32) }
}

/// `hsa_executable_validate`: always valid (result 0).
unsafe extern "C" fn hsa_executable_validate(
    executable: hsa_executable_t,
    result: *mut u32,
) -> hsa_status_t {
    guard_status(|| validate(executable, result))
}

/// `hsa_executable_validate_alt`: always valid (result 0).
unsafe extern "C" fn hsa_executable_validate_alt(
    executable: hsa_executable_t,
    _options: *const c_char,
    result: *mut u32,
) -> hsa_status_t {
    guard_status(|| validate(executable, result))
}

// ---- symbols -------------------------------------------------------------------------------

/// Looks `name` up among the symbols of `agent` (`None`: program symbols), first in load order.
fn find_symbol(
    executable: hsa_executable_t,
    name: *const c_char,
    agent: Option<hsa_agent_t>,
    out: *mut hsa_executable_symbol_t,
) -> hsa_status_t {
    if name.is_null() || out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if let Some(a) = agent
        && topology().agent(a).is_none()
    {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    // SAFETY: non-null C string per the API contract.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    let state = STATE.lock();
    let Some(exe) = state.executables.get(&executable.handle) else {
        return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    };
    let want = agent.map(|a| a.handle);
    let found = state
        .symbols_of(exe, |a| a.map(|a| a.handle) == want)
        .into_iter()
        .find(|(s, _)| {
            state
                .symbols
                .get(s)
                .is_some_and(|s| s.name.as_bytes() == name)
        });
    match found {
        Some((handle, _)) => {
            // SAFETY: non-null, valid per the API contract.
            unsafe { out.write(hsa_executable_symbol_t { handle }) };
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
    }
}

/// `hsa_executable_get_symbol_by_name`: agent symbols when `agent` is non-null, else program
/// symbols.
unsafe extern "C" fn hsa_executable_get_symbol_by_name(
    executable: hsa_executable_t,
    symbol_name: *const c_char,
    agent: *const hsa_agent_t,
    symbol: *mut hsa_executable_symbol_t,
) -> hsa_status_t {
    guard_status(|| {
        let agent = if agent.is_null() {
            None
        } else {
            // SAFETY: non-null, so a readable agent per the API contract.
            Some(unsafe { agent.read_unaligned() })
        };
        find_symbol(executable, symbol_name, agent, symbol)
    })
}

/// `hsa_executable_get_symbol` (deprecated): the module name and call convention are ignored;
/// agent handle 0 means program symbols.
unsafe extern "C" fn hsa_executable_get_symbol(
    executable: hsa_executable_t,
    _module_name: *const c_char,
    symbol_name: *const c_char,
    agent: hsa_agent_t,
    _call_convention: i32,
    symbol: *mut hsa_executable_symbol_t,
) -> hsa_status_t {
    guard_status(|| {
        let agent = if agent.handle == 0 { None } else { Some(agent) };
        find_symbol(executable, symbol_name, agent, symbol)
    })
}

/// Writes `bytes` (no NUL) to an attribute buffer.
///
/// # Safety
/// `value` must be null or valid for `bytes.len()` bytes of writes.
unsafe fn write_bytes(value: *mut c_void, bytes: &[u8]) -> hsa_status_t {
    if value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: per the function contract; the regions cannot overlap (ours is owned).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), value.cast::<u8>(), bytes.len()) };
    HSA_STATUS_SUCCESS
}

/// `hsa_executable_symbol_get_info`.
unsafe extern "C" fn hsa_executable_symbol_get_info(
    executable_symbol: hsa_executable_symbol_t,
    attribute: hsa_executable_symbol_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        if !has_tag(executable_symbol.handle, SYMBOL_TAG) {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
        }
        let state = STATE.lock();
        let Some(s) = state.symbols.get(&executable_symbol.handle) else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
        };
        let agent = s.agent.unwrap_or(hsa_agent_t { handle: 0 });
        // SAFETY: the caller provides a buffer of the attribute's type for every write below.
        unsafe {
            match attribute {
                HSA_EXECUTABLE_SYMBOL_INFO_TYPE => {
                    let kind = match s.data {
                        SymbolData::Kernel(_) | SymbolData::AmdKernel { .. } => {
                            HSA_SYMBOL_KIND_KERNEL
                        }
                        SymbolData::Variable { .. } => HSA_SYMBOL_KIND_VARIABLE,
                    };
                    return write_out(value, kind);
                }
                HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH => {
                    return write_out(value, s.name.len() as u32);
                }
                HSA_EXECUTABLE_SYMBOL_INFO_NAME => return write_bytes(value, s.name.as_bytes()),
                HSA_EXECUTABLE_SYMBOL_INFO_MODULE_NAME_LENGTH => return write_out(value, 0u32),
                HSA_EXECUTABLE_SYMBOL_INFO_MODULE_NAME => return write_bytes(value, &[]),
                HSA_EXECUTABLE_SYMBOL_INFO_AGENT => return write_out(value, agent),
                HSA_EXECUTABLE_SYMBOL_INFO_LINKAGE => {
                    return write_out(value, HSA_SYMBOL_LINKAGE_PROGRAM);
                }
                HSA_EXECUTABLE_SYMBOL_INFO_IS_DEFINITION => return write_out(value, true),
                _ => {}
            }
            match (&s.data, attribute) {
                (
                    SymbolData::Variable { address, .. },
                    HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
                ) => write_out(value, *address),
                (SymbolData::Variable { .. }, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALLOCATION) => {
                    let allocation = if s.agent.is_some() {
                        HSA_VARIABLE_ALLOCATION_AGENT
                    } else {
                        HSA_VARIABLE_ALLOCATION_PROGRAM
                    };
                    write_out(value, allocation)
                }
                (
                    SymbolData::Variable { is_const, .. },
                    HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT,
                ) => {
                    let segment = if *is_const {
                        HSA_VARIABLE_SEGMENT_READONLY
                    } else {
                        HSA_VARIABLE_SEGMENT_GLOBAL
                    };
                    write_out(value, segment)
                }
                (
                    SymbolData::Variable { address, .. },
                    HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALIGNMENT,
                ) => write_out(value, alignment_of(*address)),
                (SymbolData::Variable { size, .. }, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE) => {
                    write_out(value, u32::try_from(*size).unwrap_or(u32::MAX))
                }
                (
                    SymbolData::Variable { is_const, .. },
                    HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST,
                ) => write_out(value, *is_const),
                (SymbolData::Kernel(d), HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT) => {
                    write_out(value, &**d as *const KernelDescriptor as u64)
                }
                (SymbolData::Kernel(d), HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE) => {
                    write_out(value, d.kernarg_size)
                }
                (
                    SymbolData::Kernel(d),
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT,
                ) => write_out(value, d.kernarg_alignment),
                (SymbolData::Kernel(d), HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE) => {
                    write_out(value, d.group_segment_size)
                }
                (SymbolData::Kernel(d), HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE) => {
                    write_out(value, d.private_segment_size)
                }
                (SymbolData::Kernel(_), HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK) => {
                    write_out(value, false)
                }
                (SymbolData::Kernel(_), HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_CALL_CONVENTION) => {
                    write_out(value, 0u32)
                }
                (
                    SymbolData::AmdKernel { object, .. },
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                ) => write_out(value, *object),
                (
                    SymbolData::AmdKernel { kernarg_size, .. },
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                ) => write_out(value, *kernarg_size),
                (
                    SymbolData::AmdKernel {
                        kernarg_alignment, ..
                    },
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT,
                ) => write_out(value, *kernarg_alignment),
                (
                    SymbolData::AmdKernel {
                        group_segment_size, ..
                    },
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                ) => write_out(value, *group_segment_size),
                (
                    SymbolData::AmdKernel {
                        private_segment_size,
                        ..
                    },
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                ) => write_out(value, *private_segment_size),
                (
                    SymbolData::AmdKernel {
                        dynamic_callstack, ..
                    },
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK,
                ) => write_out(value, *dynamic_callstack),
                (
                    SymbolData::AmdKernel { .. },
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_CALL_CONVENTION,
                ) => write_out(value, 0u32),
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

/// `VARIABLE_ALIGNMENT`: the largest power of two dividing `address`, at most 16.
fn alignment_of(address: u64) -> u32 {
    if address == 0 {
        return 1;
    }
    (1u64
        << address
            .trailing_zeros()
            .min(MAX_REPORTED_ALIGNMENT.trailing_zeros())) as u32
}

/// Runs `call` for each `(symbol, agent)` of `exe` chosen by `keep`, outside the lock.
fn iterate(
    executable: hsa_executable_t,
    agent_filter: impl Fn(Option<hsa_agent_t>) -> bool,
    mut call: impl FnMut(hsa_executable_symbol_t, Option<hsa_agent_t>) -> hsa_status_t,
) -> hsa_status_t {
    let list = {
        let state = STATE.lock();
        let Some(exe) = state.executables.get(&executable.handle) else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
        };
        state.symbols_of(exe, agent_filter)
    };
    if crate::faults::faults().symbol_iteration_fails() {
        return HSA_STATUS_ERROR;
    }
    for (handle, agent) in list {
        let status = call(hsa_executable_symbol_t { handle }, agent);
        if status != HSA_STATUS_SUCCESS {
            return status;
        }
    }
    HSA_STATUS_SUCCESS
}

/// Callback of `hsa_executable_iterate_symbols` and `_iterate_program_symbols`.
type SymbolCallback =
    unsafe extern "C" fn(hsa_executable_t, hsa_executable_symbol_t, *mut c_void) -> hsa_status_t;

/// `hsa_executable_iterate_symbols`: every symbol (agent and program), in load order.
unsafe extern "C" fn hsa_executable_iterate_symbols(
    executable: hsa_executable_t,
    callback: Option<SymbolCallback>,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        // SAFETY: the application's callback with its own data.
        iterate(
            executable,
            |_| true,
            |sym, _| unsafe { cb(executable, sym, data) },
        )
    })
}

/// `hsa_executable_iterate_program_symbols`: the symbols of program loads.
unsafe extern "C" fn hsa_executable_iterate_program_symbols(
    executable: hsa_executable_t,
    callback: Option<SymbolCallback>,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        // SAFETY: the application's callback with its own data.
        iterate(
            executable,
            |a| a.is_none(),
            |sym, _| unsafe { cb(executable, sym, data) },
        )
    })
}

/// `hsa_executable_iterate_agent_symbols`: the symbols loaded for `agent`.
unsafe extern "C" fn hsa_executable_iterate_agent_symbols(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    callback: Option<
        unsafe extern "C" fn(
            hsa_executable_t,
            hsa_agent_t,
            hsa_executable_symbol_t,
            *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if topology().agent(agent).is_none() {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        iterate(
            executable,
            |a| a.is_some_and(|a| a.handle == agent.handle),
            // SAFETY: the application's callback with its own data.
            |sym, _| unsafe { cb(executable, agent, sym, data) },
        )
    })
}

// ---- loader extension (HSA_EXTENSION_AMD_LOADER) -------------------------------------------

/// Binds an exported loader function to the `ROCR_1` version node (not in unit-test binaries).
macro_rules! rocr_1 {
    ($name:ident) => {
        #[cfg(not(test))]
        std::arch::global_asm!(concat!(
            ".symver ",
            stringify!($name),
            ", ",
            stringify!($name),
            "@@ROCR_1"
        ));
    };
}

/// `hsa_ven_amd_loader_query_host_address`: an address inside a loaded instance (or a kernel
/// descriptor) is its own host address; anything else is INVALID_ARGUMENT.
///
/// # Safety
/// `host_address` must be null or writable.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn hsa_ven_amd_loader_query_host_address(
    device_address: *const c_void,
    host_address: *mut *const c_void,
) -> hsa_status_t {
    guard_status(|| {
        if device_address.is_null() || host_address.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        if STATE.lock().executable_at(device_address as u64).is_none() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, writable per the API contract.
        unsafe { host_address.write(device_address) };
        HSA_STATUS_SUCCESS
    })
}
rocr_1!(hsa_ven_amd_loader_query_host_address);

/// `hsa_ven_amd_loader_query_segment_descriptors`: the count (null buffer, `*num == 0`) or every
/// loaded `PT_LOAD` segment of every executable.
///
/// # Safety
/// `num_segment_descriptors` must be null or valid; `segment_descriptors` null or valid for
/// `*num_segment_descriptors` entries.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn hsa_ven_amd_loader_query_segment_descriptors(
    segment_descriptors: *mut hsa_ven_amd_loader_segment_descriptor_t,
    num_segment_descriptors: *mut usize,
) -> hsa_status_t {
    guard_status(|| {
        if num_segment_descriptors.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, valid per the API contract.
        let requested = unsafe { num_segment_descriptors.read() };
        let state = STATE.lock();
        let descs: Vec<hsa_ven_amd_loader_segment_descriptor_t> = state
            .executables
            .iter()
            .flat_map(|(&exe, e)| {
                e.loaded
                    .iter()
                    .filter_map(|l| state.loaded.get(l))
                    .map(move |l| (exe, l))
            })
            .flat_map(|(exe, l)| {
                l.segments
                    .iter()
                    .map(move |s| hsa_ven_amd_loader_segment_descriptor_t {
                        agent: l.agent.unwrap_or(hsa_agent_t { handle: 0 }),
                        executable: hsa_executable_t { handle: exe },
                        code_object_storage_type:
                            HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY,
                        code_object_storage_base: l.code.bytes.as_ptr().cast(),
                        code_object_storage_size: l.code.bytes.len(),
                        code_object_storage_offset: s.file_offset as usize,
                        segment_base: s.base as *const c_void,
                        segment_size: s.size as usize,
                    })
            })
            .collect();
        match (segment_descriptors.is_null(), requested) {
            (true, 0) => {
                // SAFETY: as above.
                unsafe { num_segment_descriptors.write(descs.len()) };
                HSA_STATUS_SUCCESS
            }
            (true, _) | (false, 0) => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            (false, n) if n != descs.len() => HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
            (false, _) => {
                // SAFETY: the caller's buffer holds exactly `descs.len()` entries.
                unsafe {
                    std::ptr::copy_nonoverlapping(descs.as_ptr(), segment_descriptors, descs.len())
                };
                HSA_STATUS_SUCCESS
            }
        }
    })
}
rocr_1!(hsa_ven_amd_loader_query_segment_descriptors);

/// `hsa_ven_amd_loader_query_executable`: the executable that loaded `device_address` (a
/// segment address or a `KERNEL_OBJECT`).
///
/// # Safety
/// `executable` must be null or writable.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn hsa_ven_amd_loader_query_executable(
    device_address: *const c_void,
    executable: *mut hsa_executable_t,
) -> hsa_status_t {
    guard_status(|| {
        if device_address.is_null() || executable.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match STATE.lock().executable_at(device_address as u64) {
            Some(handle) => {
                // SAFETY: non-null, writable per the API contract.
                unsafe { executable.write(hsa_executable_t { handle }) };
                HSA_STATUS_SUCCESS
            }
            None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}
rocr_1!(hsa_ven_amd_loader_query_executable);

/// `hsa_ven_amd_loader_executable_iterate_loaded_code_objects`: in load order.
///
/// # Safety
/// `callback` must be callable with `data`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn hsa_ven_amd_loader_executable_iterate_loaded_code_objects(
    executable: hsa_executable_t,
    callback: Option<
        unsafe extern "C" fn(
            hsa_executable_t,
            hsa_loaded_code_object_t,
            *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let list = match STATE.lock().executables.get(&executable.handle) {
            Some(e) => e.loaded.clone(),
            None => return HSA_STATUS_ERROR_INVALID_EXECUTABLE,
        };
        for handle in list {
            // SAFETY: the application's callback with its own data.
            let status = unsafe { cb(executable, hsa_loaded_code_object_t { handle }, data) };
            if status != HSA_STATUS_SUCCESS {
                return status;
            }
        }
        HSA_STATUS_SUCCESS
    })
}
rocr_1!(hsa_ven_amd_loader_executable_iterate_loaded_code_objects);

/// `hsa_ven_amd_loader_loaded_code_object_get_info`.
///
/// # Safety
/// `value` must be null or a buffer of the attribute's type (`URI`: `URI_LENGTH` bytes).
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn hsa_ven_amd_loader_loaded_code_object_get_info(
    loaded_code_object: hsa_loaded_code_object_t,
    attribute: hsa_ven_amd_loader_loaded_code_object_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let state = STATE.lock();
        let Some(l) = state.loaded.get(&loaded_code_object.handle) else {
            return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
        };
        let min_vaddr = l.code.elf.loads.iter().map(|s| s.vaddr).min().unwrap_or(0);
        let end = l
            .code
            .elf
            .loads
            .iter()
            .map(|s| s.vaddr.saturating_add(s.memsz))
            .max()
            .unwrap_or(0);
        // SAFETY: the caller provides a buffer of the attribute's type for every write below.
        unsafe {
            match attribute {
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_EXECUTABLE => write_out(
                    value,
                    hsa_executable_t {
                        handle: l.executable,
                    },
                ),
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_KIND => write_out(
                    value,
                    if l.agent.is_some() {
                        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_AGENT
                    } else {
                        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_PROGRAM
                    },
                ),
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_AGENT => {
                    write_out(value, l.agent.unwrap_or(hsa_agent_t { handle: 0 }))
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_TYPE => write_out(
                    value,
                    match l.code.storage {
                        Storage::File { .. } => HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_FILE,
                        Storage::Memory => HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY,
                    },
                ),
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_BASE => {
                    write_out(value, l.code.bytes.as_ptr() as u64)
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_SIZE => {
                    write_out(value, l.code.bytes.len() as u64)
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_FILE => write_out(
                    value,
                    match l.code.storage {
                        Storage::File { fd } => fd,
                        Storage::Memory => -1 as c_int,
                    },
                ),
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_DELTA => {
                    write_out(value, l.backing.bias() as i64)
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE => {
                    write_out(value, l.backing.bias().wrapping_add(min_vaddr))
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE => {
                    write_out(value, end.saturating_sub(min_vaddr))
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI_LENGTH => {
                    write_out(value, l.code.uri.len() as u32)
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI => {
                    write_bytes(value, l.code.uri.as_bytes())
                }
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}
rocr_1!(hsa_ven_amd_loader_loaded_code_object_get_info);

/// `hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size`: reads `size`
/// bytes at `offset` of `file` now.
///
/// # Safety
/// `code_object_reader` must be null or writable.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size(
    file: hsa_file_t,
    offset: usize,
    size: usize,
    code_object_reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    guard_status(|| reader_from_file(file, Some((offset, size)), code_object_reader))
}
rocr_1!(hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size);

/// `hsa_ven_amd_loader_iterate_executables`: a snapshot, in creation order.
///
/// # Safety
/// `callback` must be callable with `data`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn hsa_ven_amd_loader_iterate_executables(
    callback: Option<unsafe extern "C" fn(hsa_executable_t, *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let list: Vec<u64> = STATE.lock().executables.keys().copied().collect();
        for handle in list {
            // SAFETY: the application's callback with its own data.
            let status = unsafe { cb(hsa_executable_t { handle }, data) };
            if status != HSA_STATUS_SUCCESS {
                return status;
            }
        }
        HSA_STATUS_SUCCESS
    })
}
rocr_1!(hsa_ven_amd_loader_iterate_executables);

/// Writes the loader extension function table (`hsa_ven_amd_loader_1_0x_pfn_t`) for
/// `hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_LOADER, version_major, size, table)`.
///
/// Entries are written in the order of `hsa_ven_amd_loader_1_03_pfn_t`, as many whole
/// pointers as `size` holds (1.00 has 3, 1.01 5, 1.02 6, 1.03 7).
///
/// # Safety
/// `table` must be valid for `size` bytes of writes.
pub(crate) unsafe fn fill_loader_extension_table(
    version_major: u16,
    size: usize,
    table: *mut c_void,
) -> hsa_status_t {
    if version_major != 1 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if table.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let entries: [*const c_void; 7] = [
        hsa_ven_amd_loader_query_host_address as *const c_void,
        hsa_ven_amd_loader_query_segment_descriptors as *const c_void,
        hsa_ven_amd_loader_query_executable as *const c_void,
        hsa_ven_amd_loader_executable_iterate_loaded_code_objects as *const c_void,
        hsa_ven_amd_loader_loaded_code_object_get_info as *const c_void,
        hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size as *const c_void,
        hsa_ven_amd_loader_iterate_executables as *const c_void,
    ];
    let n = (size / size_of::<*const c_void>()).min(entries.len());
    // SAFETY: `n` whole pointers fit in the caller's `size` bytes; unaligned writes allowed.
    unsafe {
        for (i, e) in entries.iter().take(n).enumerate() {
            table.cast::<*const c_void>().add(i).write_unaligned(*e);
        }
    }
    HSA_STATUS_SUCCESS
}

/// Unit tests that load code objects see process-wide state (segment counts, shadow libraries):
/// they run one at a time, under this lock.
#[cfg(test)]
pub(crate) static TEST_SERIAL: Mutex<()> = parking_lot::const_mutex(());

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_abi::hsa_emu_workgroup_t;
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use super::TEST_SERIAL as SERIAL;

    /// Builds `examples/kernels/sample_kernels.c` once per test process.
    fn sample_so() -> &'static PathBuf {
        static SO: OnceLock<PathBuf> = OnceLock::new();
        SO.get_or_init(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            let dir =
                std::env::temp_dir().join(format!("hsa-emu-loader-test-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let out = dir.join("libsample_kernels.so");
            let status = std::process::Command::new("gcc")
                .args([
                    "-std=c11", "-Wall", "-Werror", "-shared", "-fPIC", "-O2", "-I",
                ])
                .arg(root.join("include"))
                .arg("-o")
                .arg(&out)
                .arg(root.join("../examples/kernels/sample_kernels.c"))
                .status()
                .expect("gcc runs");
            assert!(status.success(), "gcc failed to build the sample kernels");
            out
        })
    }

    fn gpu() -> hsa_agent_t {
        topology().gpus().next().expect("a GPU agent").handle
    }

    fn reader_for(path: &std::path::Path) -> hsa_code_object_reader_t {
        let file = std::fs::File::open(path).unwrap();
        let mut reader = hsa_code_object_reader_t { handle: 0 };
        use std::os::fd::AsRawFd;
        // SAFETY: a valid fd and out-pointer.
        let st = unsafe { hsa_code_object_reader_create_from_file(file.as_raw_fd(), &mut reader) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        reader
    }

    fn new_executable() -> hsa_executable_t {
        let mut exe = hsa_executable_t { handle: 0 };
        // SAFETY: valid out-pointer.
        let st = unsafe {
            hsa_executable_create_alt(
                HSA_PROFILE_FULL,
                HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &mut exe,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        exe
    }

    /// A frozen executable with the sample kernels loaded for the first GPU.
    fn loaded_executable() -> hsa_executable_t {
        let reader = reader_for(sample_so());
        let exe = new_executable();
        let mut lco = hsa_loaded_code_object_t { handle: 0 };
        // SAFETY: valid handles and out-pointer.
        let st = unsafe {
            hsa_executable_load_agent_code_object(exe, gpu(), reader, std::ptr::null(), &mut lco)
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert!(has_tag(lco.handle, LOADED_TAG));
        // SAFETY: valid handles.
        unsafe {
            assert_eq!(
                hsa_executable_freeze(exe, std::ptr::null()),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(hsa_code_object_reader_destroy(reader), HSA_STATUS_SUCCESS);
        }
        exe
    }

    fn symbol(
        exe: hsa_executable_t,
        name: &str,
        agent: Option<hsa_agent_t>,
    ) -> Result<hsa_executable_symbol_t, hsa_status_t> {
        let cname = CString::new(name).unwrap();
        let mut sym = hsa_executable_symbol_t { handle: 0 };
        let agent_ptr = agent
            .as_ref()
            .map_or(std::ptr::null(), |a| a as *const hsa_agent_t);
        // SAFETY: valid pointers.
        match unsafe { hsa_executable_get_symbol_by_name(exe, cname.as_ptr(), agent_ptr, &mut sym) }
        {
            HSA_STATUS_SUCCESS => Ok(sym),
            st => Err(st),
        }
    }

    fn info<T: Copy>(
        sym: hsa_executable_symbol_t,
        attr: hsa_executable_symbol_info_t,
    ) -> Result<T, hsa_status_t> {
        let mut v = std::mem::MaybeUninit::<T>::zeroed();
        // SAFETY: a buffer of T.
        match unsafe { hsa_executable_symbol_get_info(sym, attr, v.as_mut_ptr().cast()) } {
            // SAFETY: zeroed and then written with a T-typed value.
            HSA_STATUS_SUCCESS => Ok(unsafe { v.assume_init() }),
            st => Err(st),
        }
    }

    fn name_of(sym: hsa_executable_symbol_t) -> String {
        let len: u32 = info(sym, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH).unwrap();
        let mut buf = vec![0xAAu8; len as usize + 1];
        // SAFETY: a buffer of NAME_LENGTH (+1 guard) bytes.
        let st = unsafe {
            hsa_executable_symbol_get_info(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_NAME,
                buf.as_mut_ptr().cast(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(
            buf[len as usize], 0xAA,
            "NAME writes exactly NAME_LENGTH bytes"
        );
        buf.truncate(len as usize);
        String::from_utf8(buf).unwrap()
    }

    fn destroy(exe: hsa_executable_t) {
        // SAFETY: a handle (validated by the function).
        assert_eq!(unsafe { hsa_executable_destroy(exe) }, HSA_STATUS_SUCCESS);
    }

    unsafe extern "C" fn collect(
        _: hsa_executable_t,
        sym: hsa_executable_symbol_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        // SAFETY: the tests pass a `Vec<u64>`.
        unsafe { (*data.cast::<Vec<u64>>()).push(sym.handle) };
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn break_after_first(
        _: hsa_executable_t,
        _: hsa_executable_symbol_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        // SAFETY: the tests pass a `u32` counter.
        unsafe { *data.cast::<u32>() += 1 };
        HSA_STATUS_INFO_BREAK
    }

    unsafe extern "C" fn fail_at_once(
        _: hsa_executable_t,
        _: hsa_executable_symbol_t,
        _: *mut c_void,
    ) -> hsa_status_t {
        HSA_STATUS_ERROR_OUT_OF_RESOURCES
    }

    unsafe extern "C" fn collect_agent(
        _: hsa_executable_t,
        agent: hsa_agent_t,
        sym: hsa_executable_symbol_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        assert_eq!(agent.handle, gpu().handle);
        // SAFETY: the tests pass a `Vec<u64>`.
        unsafe { (*data.cast::<Vec<u64>>()).push(sym.handle) };
        HSA_STATUS_SUCCESS
    }

    #[test]
    fn each_load_has_its_own_module_variables() {
        let _s = SERIAL.lock();
        let (a, b) = (loaded_executable(), loaded_executable());
        let addr = |exe| -> u64 {
            info(
                symbol(exe, "hit_counter", Some(gpu())).unwrap(),
                HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
            )
            .unwrap()
        };
        let (x, y) = (addr(a), addr(b));
        assert_ne!(x, 0);
        assert_ne!(x, y, "two loads share hit_counter");
        // SAFETY: hit_counter is a live u32 of each instance.
        unsafe {
            (x as *mut u32).write(7);
            assert_eq!((y as *const u32).read(), 0);
        }
        let table: u64 = info(
            symbol(a, "lookup_table", Some(gpu())).unwrap(),
            HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
        )
        .unwrap();
        // SAFETY: lookup_table is a live const uint32_t[4].
        assert_eq!(unsafe { (table as *const [u32; 4]).read() }, [1, 2, 3, 4]);
        destroy(a);
        destroy(b);
    }

    #[test]
    fn symbols_are_the_kernels_and_the_exported_data() {
        let _s = SERIAL.lock();
        let exe = loaded_executable();
        let mut all: Vec<u64> = Vec::new();
        // SAFETY: a valid callback and data.
        let st = unsafe {
            hsa_executable_iterate_symbols(exe, Some(collect), (&mut all as *mut Vec<u64>).cast())
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let mut names: Vec<String> = all
            .iter()
            .map(|&h| name_of(hsa_executable_symbol_t { handle: h }))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "checksum_then_scribble.kd",
                "empty_kernel.kd",
                "hit_counter",
                "inc_in_place.kd",
                "lookup_table",
                "sleep_kernel.kd",
                "vector_add.kd"
            ]
        );
        let mut agent_syms: Vec<u64> = Vec::new();
        // SAFETY: a valid callback and data.
        let st = unsafe {
            hsa_executable_iterate_agent_symbols(
                exe,
                gpu(),
                Some(collect_agent),
                (&mut agent_syms as *mut Vec<u64>).cast(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(
            agent_syms, all,
            "agent iteration follows the same load order"
        );
        let mut program: Vec<u64> = Vec::new();
        // SAFETY: a valid callback and data.
        let st = unsafe {
            hsa_executable_iterate_program_symbols(
                exe,
                Some(collect),
                (&mut program as *mut Vec<u64>).cast(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert!(program.is_empty());
        // Handles are stable: a lookup returns the handle iteration gave.
        let k = symbol(exe, "vector_add.kd", Some(gpu())).unwrap();
        assert!(all.contains(&k.handle));
        assert_eq!(
            symbol(exe, "vector_add.kd", Some(gpu())).unwrap().handle,
            k.handle
        );
        assert_eq!(
            symbol(exe, "__hsa_emu_meta_vector_add", Some(gpu())),
            Err(HSA_STATUS_ERROR_INVALID_SYMBOL_NAME)
        );
        assert_eq!(
            symbol(exe, "vector_add", Some(gpu())),
            Err(HSA_STATUS_ERROR_INVALID_SYMBOL_NAME)
        );
        assert_eq!(
            symbol(exe, "vector_add.kd", None),
            Err(HSA_STATUS_ERROR_INVALID_SYMBOL_NAME)
        );
        destroy(exe);
        assert_eq!(
            info::<u32>(k, HSA_EXECUTABLE_SYMBOL_INFO_TYPE),
            Err(HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL)
        );
    }

    #[test]
    fn symbol_attributes_match_the_sources() {
        let _s = SERIAL.lock();
        let exe = loaded_executable();
        let k = symbol(exe, "vector_add.kd", Some(gpu())).unwrap();
        assert_eq!(
            info::<u32>(k, HSA_EXECUTABLE_SYMBOL_INFO_TYPE),
            Ok(HSA_SYMBOL_KIND_KERNEL)
        );
        assert_eq!(
            info::<u32>(k, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE),
            Ok(32)
        );
        assert_eq!(
            info::<u32>(
                k,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT
            ),
            Ok(8)
        );
        assert_eq!(
            info::<u32>(k, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE),
            Ok(0)
        );
        assert_eq!(
            info::<u32>(k, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE),
            Ok(0)
        );
        assert_eq!(
            info::<bool>(k, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK),
            Ok(false)
        );
        assert_eq!(
            info::<hsa_agent_t>(k, HSA_EXECUTABLE_SYMBOL_INFO_AGENT)
                .unwrap()
                .handle,
            gpu().handle
        );
        assert_eq!(name_of(k), "vector_add.kd");
        let object: u64 = info(k, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT).unwrap();
        assert_eq!(object % 64, 0);
        // SAFETY: a descriptor this loader wrote.
        let d = unsafe { KernelDescriptor::from_object(object) }.expect("a kernel descriptor");
        assert_eq!(d.kernarg_size, 32);
        assert_eq!(kernel_symbol_name(object).as_deref(), Some("vector_add.kd"));
        assert_eq!(kernel_symbol_name(object + 64), None);
        assert_eq!(
            info::<u64>(k, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS),
            Err(HSA_STATUS_ERROR_INVALID_ARGUMENT)
        );
        assert_eq!(
            info::<u64>(k, HSA_EXECUTABLE_SYMBOL_INFO_INDIRECT_FUNCTION_OBJECT),
            Err(HSA_STATUS_ERROR_INVALID_ARGUMENT)
        );

        let t = symbol(exe, "lookup_table", Some(gpu())).unwrap();
        assert_eq!(
            info::<u32>(t, HSA_EXECUTABLE_SYMBOL_INFO_TYPE),
            Ok(HSA_SYMBOL_KIND_VARIABLE)
        );
        assert_eq!(
            info::<bool>(t, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST),
            Ok(true)
        );
        assert_eq!(
            info::<u32>(t, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE),
            Ok(16)
        );
        assert_eq!(
            info::<u32>(t, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT),
            Ok(HSA_VARIABLE_SEGMENT_READONLY)
        );
        assert_eq!(
            info::<u32>(t, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE),
            Err(HSA_STATUS_ERROR_INVALID_ARGUMENT)
        );
        assert_eq!(
            info::<u64>(t, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT),
            Err(HSA_STATUS_ERROR_INVALID_ARGUMENT)
        );

        let h = symbol(exe, "hit_counter", Some(gpu())).unwrap();
        assert_eq!(
            info::<bool>(h, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST),
            Ok(false)
        );
        assert_eq!(
            info::<u32>(h, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE),
            Ok(4)
        );
        assert_eq!(
            info::<u32>(h, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT),
            Ok(HSA_VARIABLE_SEGMENT_GLOBAL)
        );
        assert_eq!(
            info::<u32>(h, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALLOCATION),
            Ok(HSA_VARIABLE_ALLOCATION_AGENT)
        );
        assert_eq!(
            info::<u32>(h, HSA_EXECUTABLE_SYMBOL_INFO_LINKAGE),
            Ok(HSA_SYMBOL_LINKAGE_PROGRAM)
        );
        assert_eq!(
            info::<u32>(h, HSA_EXECUTABLE_SYMBOL_INFO_MODULE_NAME_LENGTH),
            Ok(0)
        );
        let addr: u64 = info(h, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS).unwrap();
        let align: u32 = info(h, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALIGNMENT).unwrap();
        assert!((4..=16).contains(&align) && addr % align as u64 == 0);
        assert_eq!(alignment_of(0x1000), 16);
        assert_eq!(alignment_of(0x1004), 4);
        destroy(exe);
    }

    #[test]
    fn a_kernel_entry_runs_one_work_group() {
        let _s = SERIAL.lock();
        let exe = loaded_executable();
        let k = symbol(exe, "inc_in_place.kd", Some(gpu())).unwrap();
        let object: u64 = info(k, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT).unwrap();
        // SAFETY: a descriptor this loader wrote.
        let d = unsafe { KernelDescriptor::from_object(object) }.unwrap();
        let mut data: Vec<u32> = (0..8).collect();
        #[repr(C)]
        struct Args {
            a: *mut u32,
            n: u32,
        }
        let args = Args {
            a: data.as_mut_ptr(),
            n: 6,
        };
        let wg = hsa_emu_workgroup_t {
            kernarg: (&args as *const Args).cast(),
            group_id: [0; 3],
            workgroup_size: [8, 1, 1],
            grid_size: [8, 1, 1],
            group_segment: std::ptr::null_mut(),
        };
        // SAFETY: the kernel's ABI: one work-group with valid kernargs.
        unsafe { (d.entry)(&wg) };
        assert_eq!(data, [1, 2, 3, 4, 5, 6, 6, 7]);
        let counter: u64 = info(
            symbol(exe, "hit_counter", Some(gpu())).unwrap(),
            HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
        )
        .unwrap();
        // SAFETY: this instance's hit_counter.
        assert_eq!(unsafe { (counter as *const u32).read() }, 1);
        destroy(exe);
    }

    #[test]
    fn iteration_stops_on_info_break_and_on_errors() {
        let _s = SERIAL.lock();
        let exe = loaded_executable();
        let mut calls = 0u32;
        // SAFETY: a valid callback and data.
        let st = unsafe {
            hsa_executable_iterate_symbols(
                exe,
                Some(break_after_first),
                (&mut calls as *mut u32).cast(),
            )
        };
        assert_eq!(st, HSA_STATUS_INFO_BREAK);
        assert_eq!(calls, 1);
        // SAFETY: as above.
        let st = unsafe {
            hsa_executable_iterate_symbols(exe, Some(fail_at_once), std::ptr::null_mut())
        };
        assert_eq!(st, HSA_STATUS_ERROR_OUT_OF_RESOURCES);
        // SAFETY: a null callback is refused.
        let st = unsafe { hsa_executable_iterate_symbols(exe, None, std::ptr::null_mut()) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        destroy(exe);
        // SAFETY: a destroyed executable is refused.
        let st = unsafe {
            hsa_executable_iterate_symbols(exe, Some(fail_at_once), std::ptr::null_mut())
        };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_EXECUTABLE);
    }

    #[test]
    fn what_is_not_an_x86_64_shared_object_is_refused() {
        let _s = SERIAL.lock();
        let mut reader = hsa_code_object_reader_t { handle: 0 };
        let junk = b"#!/bin/sh\necho this is not a code object\n";
        // SAFETY: valid buffer and out-pointer.
        let st = unsafe {
            hsa_code_object_reader_create_from_memory(junk.as_ptr().cast(), junk.len(), &mut reader)
        };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        let path = sample_so().with_file_name("junk.txt");
        std::fs::write(&path, junk).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a valid fd and out-pointer.
        let st = unsafe { hsa_code_object_reader_create_from_file(file.as_raw_fd(), &mut reader) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        // SAFETY: a bad fd is refused.
        let st = unsafe { hsa_code_object_reader_create_from_file(-1, &mut reader) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_FILE);
        // An ELF object of the right class but not a shared object (the test binary is PIE,
        // so use a relocatable object instead).
        let obj = sample_so().with_file_name("kernels.o");
        let ok = std::process::Command::new("gcc")
            .args(["-c", "-fPIC", "-I"])
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include"))
            .arg("-o")
            .arg(&obj)
            .arg(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../examples/kernels/sample_kernels.c"),
            )
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let bytes = std::fs::read(&obj).unwrap();
        // SAFETY: valid buffer and out-pointer.
        let st = unsafe {
            hsa_code_object_reader_create_from_memory(
                bytes.as_ptr().cast(),
                bytes.len(),
                &mut reader,
            )
        };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        // SAFETY: an unknown reader is refused.
        let st = unsafe { hsa_code_object_reader_destroy(reader) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER);
    }

    #[test]
    fn frozen_executables_refuse_loads() {
        let _s = SERIAL.lock();
        let reader = reader_for(sample_so());
        let exe = new_executable();
        let get_state = || {
            let mut state = 99u32;
            // SAFETY: a u32 buffer.
            let st = unsafe {
                hsa_executable_get_info(
                    exe,
                    HSA_EXECUTABLE_INFO_STATE,
                    (&mut state as *mut u32).cast(),
                )
            };
            assert_eq!(st, HSA_STATUS_SUCCESS);
            state
        };
        assert_eq!(get_state(), HSA_EXECUTABLE_STATE_UNFROZEN);
        // SAFETY: valid handles; null options and out-pointers are allowed.
        unsafe {
            assert_eq!(
                hsa_executable_freeze(exe, std::ptr::null()),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(get_state(), HSA_EXECUTABLE_STATE_FROZEN);
            assert_eq!(
                hsa_executable_freeze(exe, std::ptr::null()),
                HSA_STATUS_ERROR_FROZEN_EXECUTABLE
            );
            let st = hsa_executable_load_agent_code_object(
                exe,
                gpu(),
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            );
            assert_eq!(st, HSA_STATUS_ERROR_FROZEN_EXECUTABLE);
            let st = hsa_executable_load_program_code_object(
                exe,
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            );
            assert_eq!(st, HSA_STATUS_ERROR_FROZEN_EXECUTABLE);
            let bad_agent = hsa_agent_t { handle: 12345 };
            let st = hsa_executable_load_agent_code_object(
                exe,
                bad_agent,
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            );
            assert_eq!(st, HSA_STATUS_ERROR_INVALID_AGENT);
            let mut result = 7u32;
            assert_eq!(
                hsa_executable_validate(exe, &mut result),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(result, 0);
            assert_eq!(hsa_code_object_reader_destroy(reader), HSA_STATUS_SUCCESS);
        }
        destroy(exe);
        // SAFETY: a destroyed executable is refused.
        let st = unsafe { hsa_executable_destroy(exe) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_EXECUTABLE);
    }

    #[test]
    fn program_loads_have_program_symbols() {
        let _s = SERIAL.lock();
        let bytes = std::fs::read(sample_so()).unwrap();
        let mut reader = hsa_code_object_reader_t { handle: 0 };
        let exe = new_executable();
        // SAFETY: valid buffer, handles and out-pointers.
        unsafe {
            let st = hsa_code_object_reader_create_from_memory(
                bytes.as_ptr().cast(),
                bytes.len(),
                &mut reader,
            );
            assert_eq!(st, HSA_STATUS_SUCCESS);
            let st = hsa_executable_load_program_code_object(
                exe,
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            );
            assert_eq!(st, HSA_STATUS_SUCCESS);
            assert_eq!(hsa_code_object_reader_destroy(reader), HSA_STATUS_SUCCESS);
        }
        let h = symbol(exe, "hit_counter", None).unwrap();
        assert_eq!(
            info::<u32>(h, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALLOCATION),
            Ok(HSA_VARIABLE_ALLOCATION_PROGRAM)
        );
        assert_eq!(
            info::<hsa_agent_t>(h, HSA_EXECUTABLE_SYMBOL_INFO_AGENT)
                .unwrap()
                .handle,
            0
        );
        assert_eq!(
            symbol(exe, "hit_counter", Some(gpu())),
            Err(HSA_STATUS_ERROR_INVALID_SYMBOL_NAME)
        );
        let mut via_deprecated = hsa_executable_symbol_t { handle: 0 };
        // SAFETY: valid strings and out-pointer.
        let st = unsafe {
            hsa_executable_get_symbol(
                exe,
                std::ptr::null(),
                c"hit_counter".as_ptr(),
                hsa_agent_t { handle: 0 },
                0,
                &mut via_deprecated,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(via_deprecated.handle, h.handle);
        let mut program: Vec<u64> = Vec::new();
        // SAFETY: a valid callback and data.
        let st = unsafe {
            hsa_executable_iterate_program_symbols(
                exe,
                Some(collect),
                (&mut program as *mut Vec<u64>).cast(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(program.len(), 7);
        destroy(exe);
    }

    unsafe extern "C" fn count_loaded(
        _: hsa_executable_t,
        lco: hsa_loaded_code_object_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        // SAFETY: the tests pass a `Vec<u64>`.
        unsafe { (*data.cast::<Vec<u64>>()).push(lco.handle) };
        HSA_STATUS_SUCCESS
    }

    #[test]
    fn loader_extension_maps_addresses_to_executables() {
        let _s = SERIAL.lock();
        let exe = loaded_executable();
        let var: u64 = info(
            symbol(exe, "hit_counter", Some(gpu())).unwrap(),
            HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
        )
        .unwrap();
        let object: u64 = info(
            symbol(exe, "empty_kernel.kd", Some(gpu())).unwrap(),
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
        )
        .unwrap();
        let mut host: *const c_void = std::ptr::null();
        let on_stack = 5u64;
        let mut owner = hsa_executable_t { handle: 0 };
        // SAFETY: valid out-pointers.
        unsafe {
            assert_eq!(
                hsa_ven_amd_loader_query_host_address(var as *const c_void, &mut host),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(host as u64, var);
            let stack = (&on_stack as *const u64).cast();
            assert_eq!(
                hsa_ven_amd_loader_query_host_address(stack, &mut host),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hsa_ven_amd_loader_query_executable(object as *const c_void, &mut owner),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(owner.handle, exe.handle);
            assert_eq!(
                hsa_ven_amd_loader_query_executable(var as *const c_void, &mut owner),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(owner.handle, exe.handle);
        }

        let mut lcos: Vec<u64> = Vec::new();
        // SAFETY: a valid callback and data.
        let st = unsafe {
            hsa_ven_amd_loader_executable_iterate_loaded_code_objects(
                exe,
                Some(count_loaded),
                (&mut lcos as *mut Vec<u64>).cast(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(lcos.len(), 1);
        let lco = hsa_loaded_code_object_t { handle: lcos[0] };
        let get = |attr, value: *mut c_void| {
            // SAFETY: the tests pass buffers of the attribute's type.
            unsafe { hsa_ven_amd_loader_loaded_code_object_get_info(lco, attr, value) }
        };
        let (mut kind, mut base, mut size, mut uri_len) = (0u32, 0u64, 0u64, 0u32);
        assert_eq!(
            get(
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_KIND,
                (&mut kind as *mut u32).cast()
            ),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(kind, HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_AGENT);
        assert_eq!(
            get(
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE,
                (&mut base as *mut u64).cast()
            ),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(
            get(
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE,
                (&mut size as *mut u64).cast()
            ),
            HSA_STATUS_SUCCESS
        );
        assert!(
            base <= var && var < base + size,
            "hit_counter lies inside the loaded range"
        );
        assert_eq!(
            get(
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI_LENGTH,
                (&mut uri_len as *mut u32).cast()
            ),
            HSA_STATUS_SUCCESS
        );
        let mut uri = vec![0u8; uri_len as usize];
        assert_eq!(
            get(
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI,
                uri.as_mut_ptr().cast()
            ),
            HSA_STATUS_SUCCESS
        );
        let uri = String::from_utf8(uri).unwrap();
        assert!(
            uri.starts_with("file://") && uri.ends_with("libsample_kernels.so"),
            "{uri}"
        );

        let mut n = 0usize;
        // SAFETY: the count query (null buffer, zero count).
        let st =
            unsafe { hsa_ven_amd_loader_query_segment_descriptors(std::ptr::null_mut(), &mut n) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert!(n >= 2, "at least a code and a data segment");
        // SAFETY: all-zero is a valid descriptor (integers and null pointers).
        let mut descs =
            vec![unsafe { std::mem::zeroed::<hsa_ven_amd_loader_segment_descriptor_t>() }; n];
        let mut wrong = n + 1;
        // SAFETY: `descs` holds `n` entries; a wrong count is refused before any write.
        unsafe {
            assert_eq!(
                hsa_ven_amd_loader_query_segment_descriptors(descs.as_mut_ptr(), &mut wrong),
                HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS
            );
            assert_eq!(
                hsa_ven_amd_loader_query_segment_descriptors(descs.as_mut_ptr(), &mut n),
                HSA_STATUS_SUCCESS
            );
        }
        assert!(descs.iter().any(|d| d.executable.handle == exe.handle
            && (d.segment_base as u64) <= var
            && var < d.segment_base as u64 + d.segment_size as u64));

        destroy(exe);
        // SAFETY: valid out-pointers.
        unsafe {
            assert_eq!(
                hsa_ven_amd_loader_query_executable(object as *const c_void, &mut owner),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hsa_ven_amd_loader_loaded_code_object_get_info(
                    lco,
                    HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_KIND,
                    (&mut kind as *mut u32).cast()
                ),
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT
            );
        }
        assert_eq!(kernel_symbol_name(object), None);
    }

    #[test]
    fn reader_with_offset_and_size_reads_an_embedded_code_object() {
        let _s = SERIAL.lock();
        let mut bytes = vec![0x5Au8; 100];
        bytes.extend(std::fs::read(sample_so()).unwrap());
        let size = bytes.len() - 100;
        bytes.extend([0u8; 10]);
        let path = sample_so().with_file_name("embedded.bin");
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        let mut reader = hsa_code_object_reader_t { handle: 0 };
        let exe = new_executable();
        // SAFETY: a valid fd, handles and out-pointers.
        unsafe {
            let fd = file.as_raw_fd();
            let f = hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size;
            assert_eq!(
                f(fd, 0, size, &mut reader),
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT
            );
            assert_eq!(
                f(fd, 100, bytes.len(), &mut reader),
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT
            );
            assert_eq!(f(fd, 100, size, &mut reader), HSA_STATUS_SUCCESS);
            drop(file);
            let st = hsa_executable_load_agent_code_object(
                exe,
                gpu(),
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            );
            assert_eq!(st, HSA_STATUS_SUCCESS);
            assert_eq!(hsa_code_object_reader_destroy(reader), HSA_STATUS_SUCCESS);
        }
        assert!(symbol(exe, "inc_in_place.kd", Some(gpu())).is_ok());
        destroy(exe);
    }

    #[test]
    fn the_extension_table_is_filled_as_far_as_it_fits() {
        let mut table = [std::ptr::null::<c_void>(); 8];
        // SAFETY: `table` has room for 8 pointers; we offer 3 or 7 of them.
        unsafe {
            let st = fill_loader_extension_table(
                1,
                3 * size_of::<*const c_void>(),
                table.as_mut_ptr().cast(),
            );
            assert_eq!(st, HSA_STATUS_SUCCESS);
            assert!(table[..3].iter().all(|p| !p.is_null()));
            assert!(table[3].is_null());
            let st = fill_loader_extension_table(
                1,
                7 * size_of::<*const c_void>(),
                table.as_mut_ptr().cast(),
            );
            assert_eq!(st, HSA_STATUS_SUCCESS);
            assert_eq!(
                table[0],
                hsa_ven_amd_loader_query_host_address as *const c_void
            );
            assert_eq!(
                table[6],
                hsa_ven_amd_loader_iterate_executables as *const c_void
            );
            assert!(table[7].is_null());
            assert_eq!(
                fill_loader_extension_table(2, 64, table.as_mut_ptr().cast()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
        }
    }

    // ---- AMDGPU code objects (fixtures: tests/fixtures/amdgpu, see build.sh there) ----------

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/amdgpu")
            .join(name)
    }

    /// Builds the shadow library `tests/fixtures/amdgpu/<name>.c` once per test process.
    fn shadow_so(name: &'static str) -> PathBuf {
        static BUILT: Mutex<BTreeMap<&'static str, PathBuf>> =
            parking_lot::const_mutex(BTreeMap::new());
        let mut built = BUILT.lock();
        built
            .entry(name)
            .or_insert_with(|| {
                let dir = std::env::temp_dir()
                    .join(format!("hsa-emu-loader-test-{}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                let out = dir.join(format!("lib{name}.so"));
                let status = std::process::Command::new("gcc")
                    .args([
                        "-std=c11", "-Wall", "-Werror", "-shared", "-fPIC", "-O2", "-I",
                    ])
                    .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include"))
                    .arg("-o")
                    .arg(&out)
                    .arg(fixture(&format!("{name}.c")))
                    .status()
                    .expect("gcc runs");
                assert!(status.success(), "gcc failed to build {name}.c");
                out
            })
            .clone()
    }

    fn use_shadows(names: &[&'static str]) {
        let paths: Vec<String> = names
            .iter()
            .map(|n| shadow_so(n).to_string_lossy().into_owned())
            .collect();
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        crate::shadow::set_test_libraries(&refs);
    }

    fn try_load(path: &std::path::Path, agent: hsa_agent_t) -> (hsa_executable_t, hsa_status_t) {
        let reader = reader_for(path);
        let exe = new_executable();
        // SAFETY: valid handles; the out-pointer is optional.
        let st = unsafe {
            hsa_executable_load_agent_code_object(
                exe,
                agent,
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(
            // SAFETY: a reader of this runtime.
            unsafe { hsa_code_object_reader_destroy(reader) },
            HSA_STATUS_SUCCESS
        );
        (exe, st)
    }

    fn names(exe: hsa_executable_t) -> Vec<String> {
        let mut syms: Vec<u64> = Vec::new();
        // SAFETY: a valid callback and data.
        let st = unsafe {
            hsa_executable_iterate_symbols(exe, Some(collect), (&mut syms as *mut Vec<u64>).cast())
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let mut names: Vec<String> = syms
            .into_iter()
            .map(|handle| name_of(hsa_executable_symbol_t { handle }))
            .collect();
        names.sort();
        names
    }

    fn address_of(exe: hsa_executable_t, name: &str) -> u64 {
        info(
            symbol(exe, name, Some(gpu())).unwrap(),
            HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
        )
        .unwrap()
    }

    fn kernel_object_of(exe: hsa_executable_t, name: &str) -> u64 {
        info(
            symbol(exe, name, Some(gpu())).unwrap(),
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
        )
        .unwrap()
    }

    /// `(kernarg size, group size)` of the two kernels in each fixture, from its metadata.
    const FIXTURES: [(&str, u32, u32); 2] = [
        ("kernels-gfx90a-v4.co", 24, 12),
        ("kernels-gfx90a-v5.co", 280, 272),
    ];

    #[test]
    fn amdgpu_code_objects_have_their_kernels_variables_and_metadata() {
        let _s = SERIAL.lock();
        use_shadows(&[]);
        for (file, scale_add_kernarg, bump_kernarg) in FIXTURES {
            let bytes = std::fs::read(fixture(file)).unwrap();
            let (exe, st) = try_load(&fixture(file), gpu());
            assert_eq!(st, HSA_STATUS_SUCCESS, "{file}");
            // hipcc's __HIP_Coordinates helpers are not program variables.
            assert_eq!(
                names(exe),
                [
                    "_Z7fx_bumpILi3EEvPji.kd",
                    "fx_calls",
                    "fx_scale",
                    "fx_scale_add.kd",
                    "fx_second",
                    "fx_table"
                ],
                "{file}"
            );
            let kernel = |name: &str| symbol(exe, name, Some(gpu())).unwrap();
            let k = kernel("fx_scale_add.kd");
            let b = kernel("_Z7fx_bumpILi3EEvPji.kd");
            assert_eq!(
                info::<u32>(k, HSA_EXECUTABLE_SYMBOL_INFO_TYPE),
                Ok(HSA_SYMBOL_KIND_KERNEL)
            );
            let u32_of = |s, a| info::<u32>(s, a).unwrap();
            use HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE as GROUP;
            use HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT as ALIGN;
            use HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE as KERNARG;
            use HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE as PRIVATE;
            assert_eq!(
                (
                    u32_of(k, KERNARG),
                    u32_of(k, ALIGN),
                    u32_of(k, GROUP),
                    u32_of(k, PRIVATE)
                ),
                (scale_add_kernarg, 8, 0, 0),
                "{file}"
            );
            assert_eq!(
                (
                    u32_of(b, KERNARG),
                    u32_of(b, ALIGN),
                    u32_of(b, GROUP),
                    u32_of(b, PRIVATE)
                ),
                (bump_kernarg, 8, 256, 0),
                "{file}"
            );
            assert_eq!(
                info::<bool>(b, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK),
                Ok(false)
            );

            // KERNEL_OBJECT holds the descriptor's real bytes (the first segment maps file
            // offset 0 at address 0 in these files), is 64-aligned, and belongs to `exe`.
            let object = kernel_object_of(exe, "fx_scale_add.kd");
            assert_eq!(object % 64, 0);
            let mut owner = hsa_executable_t { handle: 0 };
            let mut host: *const c_void = std::ptr::null();
            // SAFETY: valid out-pointers.
            unsafe {
                assert_eq!(
                    hsa_ven_amd_loader_query_executable(object as *const c_void, &mut owner),
                    HSA_STATUS_SUCCESS
                );
                assert_eq!(
                    hsa_ven_amd_loader_query_host_address(object as *const c_void, &mut host),
                    HSA_STATUS_SUCCESS
                );
            }
            assert_eq!((owner.handle, host as u64), (exe.handle, object));
            let table = address_of(exe, "fx_table");
            let base = table - 0x42c0 * u64::from(file.contains("v4"));
            if file.contains("v4") {
                // SAFETY: the descriptor is 64 readable bytes of the image.
                let kd = unsafe { std::slice::from_raw_parts((object) as *const u8, 64) };
                assert_eq!(
                    kd,
                    &bytes[(object - base) as usize..(object - base) as usize + 64]
                );
                // The loaded code object reports the image: base, delta, and a size that
                // covers the last variable (fx_calls, .bss, at 0x42e0).
                let mut lcos: Vec<u64> = Vec::new();
                // SAFETY: a valid callback and data.
                let st = unsafe {
                    hsa_ven_amd_loader_executable_iterate_loaded_code_objects(
                        exe,
                        Some(count_loaded),
                        (&mut lcos as *mut Vec<u64>).cast(),
                    )
                };
                assert_eq!((st, lcos.len()), (HSA_STATUS_SUCCESS, 1));
                let lco = hsa_loaded_code_object_t { handle: lcos[0] };
                let (mut load_base, mut load_size, mut delta) = (0u64, 0u64, 0i64);
                for (attr, out) in [
                    (
                        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE,
                        (&mut load_base as *mut u64).cast::<c_void>(),
                    ),
                    (
                        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE,
                        (&mut load_size as *mut u64).cast(),
                    ),
                    (
                        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_DELTA,
                        (&mut delta as *mut i64).cast(),
                    ),
                ] {
                    // SAFETY: a buffer of the attribute's type.
                    let st =
                        unsafe { hsa_ven_amd_loader_loaded_code_object_get_info(lco, attr, out) };
                    assert_eq!(st, HSA_STATUS_SUCCESS);
                }
                assert_eq!((load_base, delta as u64), (base, base));
                assert!(load_size >= 0x42e4, "{load_size:#x}");
            }

            // Variables: .data initialisers, .bss zero, the relocated pointer.
            let var = |name| symbol(exe, name, Some(gpu())).unwrap();
            assert_eq!(
                info::<u32>(var("fx_table"), HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE),
                Ok(16)
            );
            assert_eq!(
                info::<bool>(
                    var("fx_table"),
                    HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST
                ),
                Ok(false)
            );
            assert_eq!(
                info::<u32>(var("fx_second"), HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE),
                Ok(8)
            );
            // SAFETY: the variables' addresses hold their sizes.
            unsafe {
                assert_eq!(*(table as *const [i32; 4]), [10, 20, 30, 40]);
                assert_eq!(*(address_of(exe, "fx_calls") as *const u32), 0);
                assert_eq!(*(address_of(exe, "fx_scale") as *const f32), 2.5);
                assert_eq!(*(address_of(exe, "fx_second") as *const u64), table + 4);
            }
            // Without shadow libraries, no kernel has a shadow; the reason names the variable.
            let why = crate::shadow::lookup(object)
                .unwrap()
                .resolved
                .as_ref()
                .unwrap_err()
                .clone();
            assert!(
                why.contains("fx_scale_add") && why.contains("HSA_EMU_SHADOW"),
                "{why}"
            );
            destroy(exe);
            assert!(
                crate::shadow::lookup(object).is_none(),
                "unloading forgets the kernel object"
            );
        }
    }

    #[test]
    fn amdgpu_code_objects_for_another_target_are_refused() {
        let _s = SERIAL.lock();
        use_shadows(&[]);
        let (exe, st) = try_load(&fixture("kernels-gfx1030-v4.co"), gpu());
        assert_eq!(st, HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS);
        assert!(names(exe).is_empty());
        destroy(exe);
        let cpu = topology()
            .agents
            .iter()
            .find(|a| a.kind == crate::topology::DeviceKind::Cpu)
            .unwrap()
            .handle;
        let (exe, st) = try_load(&fixture("kernels-gfx90a-v4.co"), cpu);
        assert_eq!(st, HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS);
        destroy(exe);
    }

    #[test]
    fn malformed_amdgpu_code_objects_are_refused() {
        let _s = SERIAL.lock();
        let good = std::fs::read(fixture("kernels-gfx90a-v4.co")).unwrap();
        let refused = |bytes: &[u8]| {
            let mut reader = hsa_code_object_reader_t { handle: 0 };
            // SAFETY: a valid buffer and out-pointer.
            unsafe {
                hsa_code_object_reader_create_from_memory(
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    &mut reader,
                )
            }
        };
        let mut reader = hsa_code_object_reader_t { handle: 0 };
        // SAFETY: a valid buffer and out-pointer.
        let st = unsafe {
            hsa_code_object_reader_create_from_memory(good.as_ptr().cast(), good.len(), &mut reader)
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        // SAFETY: a reader of this runtime.
        unsafe { hsa_code_object_reader_destroy(reader) };
        let mut b = good.clone();
        b[7] = 0; // OS/ABI: not AMDGPU_HSA
        assert_eq!(refused(&b), HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        let mut b = good.clone();
        b[8] = 0; // ABI version 0: code object v2
        assert_eq!(refused(&b), HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        // The metadata note's descriptor starts after "AMDGPU\0" and its padding.
        let at = good.windows(8).position(|w| w == b"AMDGPU\0\0").unwrap() + 8;
        let mut b = good.clone();
        b[at] = 0xc1; // a byte msgpack never uses
        assert_eq!(refused(&b), HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        // Truncated: the section headers are gone.
        assert_eq!(
            refused(&good[..good.len() / 2]),
            HSA_STATUS_ERROR_INVALID_CODE_OBJECT
        );
    }

    #[test]
    fn shadow_libraries_back_kernels_and_variables() {
        let _s = SERIAL.lock();
        use_shadows(&["shadow"]);
        let so = CString::new(shadow_so("shadow").to_string_lossy().as_bytes()).unwrap();
        // SAFETY: the test shadow library (already opened by the loader: same handle).
        let handle = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null());
        // SAFETY: a live handle and C strings.
        let shadow_table = unsafe { libc::dlsym(handle, c"fx_table".as_ptr()) } as u64;
        // SAFETY: as above.
        let shadow_calls = unsafe { libc::dlsym(handle, c"fx_calls".as_ptr()) } as u64;
        for (file, ..) in FIXTURES {
            let (exe, st) = try_load(&fixture(file), gpu());
            assert_eq!(st, HSA_STATUS_SUCCESS, "{file}");
            // The shadow's objects are the variables, initialised from the code object.
            assert_eq!(address_of(exe, "fx_table"), shadow_table);
            assert_eq!(address_of(exe, "fx_calls"), shadow_calls);
            // SAFETY: the variables' addresses hold their sizes.
            unsafe {
                assert_eq!(*(shadow_table as *const [i32; 4]), [10, 20, 30, 40]);
                assert_eq!(*(shadow_calls as *const u32), 0, "zeroed like .bss");
                // fx_second stays in the image and points into the shadow's fx_table.
                assert_eq!(
                    *(address_of(exe, "fx_second") as *const u64),
                    shadow_table + 4
                );
                assert_eq!(*(address_of(exe, "fx_scale") as *const f32), 2.5);
            }
            // Each kernel object runs its shadow.
            let object = kernel_object_of(exe, "fx_scale_add.kd");
            let shadow = crate::shadow::lookup(object).unwrap();
            let resolved = *shadow.resolved.as_ref().unwrap();
            assert_eq!(shadow.source, shadow_so("shadow").to_string_lossy());
            let input = [1.0f32, 2.0, 3.0];
            let mut out = [0f32; 3];
            #[repr(C)]
            struct Args {
                out: *mut f32,
                input: *const f32,
                bias: f32,
                n: i32,
            }
            let args = Args {
                out: out.as_mut_ptr(),
                input: input.as_ptr(),
                bias: 0.5,
                n: 3,
            };
            let wg = hsa_emu_workgroup_t {
                kernarg: (&args as *const Args).cast(),
                group_id: [0; 3],
                workgroup_size: [4, 1, 1],
                grid_size: [4, 1, 1],
                group_segment: std::ptr::null_mut(),
            };
            // SAFETY: the shadow's ABI with a live record and kernarg.
            unsafe { (resolved.entry)(&wg) };
            assert_eq!(out, [23.0, 25.5, 28.0], "in * 2.5 + 0.5 + fx_table[1]");
            // SAFETY: as above.
            assert_eq!(unsafe { *(shadow_calls as *const u32) }, 1);
            let bump = kernel_object_of(exe, "_Z7fx_bumpILi3EEvPji.kd");
            assert!(
                crate::shadow::lookup(bump).unwrap().resolved.is_ok(),
                "{file}"
            );
            destroy(exe);
        }
        use_shadows(&[]);
    }

    #[test]
    fn a_shadow_whose_arguments_do_not_mirror_the_kernel_is_refused() {
        let _s = SERIAL.lock();
        use_shadows(&["shadow_bad_kernarg"]);
        let (exe, st) = try_load(&fixture("kernels-gfx90a-v4.co"), gpu());
        assert_eq!(
            st, HSA_STATUS_SUCCESS,
            "the code object loads; the kernel cannot run"
        );
        let shadow = crate::shadow::lookup(kernel_object_of(exe, "fx_scale_add.kd")).unwrap();
        let why = shadow.resolved.as_ref().unwrap_err();
        assert!(
            why.contains("sizeof(args_t) = 16") && why.contains("end at byte 24"),
            "{why}"
        );
        let other =
            crate::shadow::lookup(kernel_object_of(exe, "_Z7fx_bumpILi3EEvPji.kd")).unwrap();
        assert!(
            other
                .resolved
                .as_ref()
                .unwrap_err()
                .contains("has no shadow")
        );
        destroy(exe);
        use_shadows(&[]);
    }

    #[test]
    fn a_shadow_variable_of_another_size_fails_the_load() {
        let _s = SERIAL.lock();
        use_shadows(&["shadow_bad_variable"]);
        let (exe, st) = try_load(&fixture("kernels-gfx90a-v4.co"), gpu());
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
        assert!(names(exe).is_empty());
        destroy(exe);
        use_shadows(&[]);
    }
}
