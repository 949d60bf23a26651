//! `hsa_init` / `hsa_shut_down`, the reference count, status strings, and tool loading.
//!
//! Tool loading follows ROCr (HSA-ABI.md §1): after the machine is built, `hsa_init` loads
//! every library named in `HSA_TOOLS_LIB` (space-separated; double quotes group a name with
//! spaces; a backslash escapes the next character), then every already-loaded library that
//! exports `HSA_AMD_TOOL_PRIORITY` (for example through `LD_PRELOAD`), sorted by priority. Each
//! tool's `OnLoad(table, runtime_version, failed_tool_count, failed_tool_names)` gets the live
//! table; returning false drops it from the tool list: it gets no `OnUnload`, and its library
//! stays mapped (ROCr unloads it; unloading code that may still be referenced is not safe).
//! `OnUnload` runs in reverse order when the last `hsa_shut_down` drops the reference count to
//! zero. `HSA_TOOLS_REPORT_LOAD_FAILURE=1` prints
//! why a tool failed to load.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::OnceLock;

use parking_lot::ReentrantMutex;
use rocprof_replay_sys::*;

use crate::api::{self, Tables};
use crate::ffi::guard_status;

/// Fills the runtime slots (init, shut down, status strings).
pub(crate) fn install(t: &mut Tables) {
    t.core.hsa_init_fn = Some(hsa_init_impl);
    t.core.hsa_shut_down_fn = Some(hsa_shut_down_impl);
    t.core.hsa_status_string_fn = Some(hsa_status_string_impl);
}

/// A loaded tool library.
struct Tool {
    handle: *mut c_void,
    on_unload: Option<OnUnload_fn_t>,
}

/// Runtime state guarded by [`STATE`].
struct State {
    refcount: u32,
    tools: Vec<Tool>,
    /// The tables as built, restored after the last shut down so tools start afresh.
    pristine: Option<api::LiveSnapshot>,
}

struct StateCell(std::cell::RefCell<State>);
// SAFETY: only reached through the ReentrantMutex below, which serialises threads; the raw
// library handles inside are process-global.
unsafe impl Send for StateCell {}
// SAFETY: as above.
unsafe impl Sync for StateCell {}

static STATE: ReentrantMutex<StateCell> =
    ReentrantMutex::new(StateCell(std::cell::RefCell::new(State {
        refcount: 0,
        tools: Vec::new(),
        pristine: None,
    })));

/// Whether the runtime is initialised (reference count above zero).
pub(crate) fn is_initialized() -> bool {
    STATE.lock().0.borrow().refcount > 0
}

unsafe extern "C" fn hsa_init_impl() -> hsa_status_t {
    guard_status(|| {
        let guard = STATE.lock();
        {
            let mut state = guard.0.borrow_mut();
            if state.refcount > 0 {
                return match state.refcount.checked_add(1) {
                    Some(n) => {
                        state.refcount = n;
                        HSA_STATUS_SUCCESS
                    }
                    None => HSA_STATUS_ERROR_REFCOUNT_OVERFLOW,
                };
            }
            if let Some(err) = crate::topology::config_error() {
                eprintln!("hsa-emu: hsa_init failed: {}", err.0);
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            if state.pristine.is_none() {
                state.pristine = Some(api::snapshot());
            }
            // Counted before tools load: a tool may call hsa_init/hsa_shut_down in OnLoad.
            state.refcount = 1;
        }
        let tools = load_tools();
        guard.0.borrow_mut().tools = tools;
        HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn hsa_shut_down_impl() -> hsa_status_t {
    guard_status(|| {
        let guard = STATE.lock();
        let tools = {
            let mut state = guard.0.borrow_mut();
            match state.refcount {
                0 => return HSA_STATUS_ERROR_NOT_INITIALIZED,
                1 => {}
                _ => {
                    state.refcount -= 1;
                    return HSA_STATUS_SUCCESS;
                }
            }
            std::mem::take(&mut state.tools)
        };
        for tool in tools.iter().rev() {
            if let Some(on_unload) = tool.on_unload {
                // SAFETY: `OnUnload` of a library we keep loaded, called once, as ROCr does.
                unsafe { on_unload() };
            }
        }
        stop_background_threads();
        let mut state = guard.0.borrow_mut();
        state.refcount = 0;
        if let Some(pristine) = &state.pristine {
            api::restore(pristine);
        }
        // Tool libraries stay mapped: code they installed may still be referenced by threads
        // that outlive the runtime (as with ROCr's own teardown ordering).
        drop(tools);
        HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn hsa_status_string_impl(
    status: hsa_status_t,
    out: *mut *const c_char,
) -> hsa_status_t {
    guard_status(|| {
        if out.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some(s) = status_string(status) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        // SAFETY: `out` is non-null; the caller provides a writable pointer slot.
        unsafe { out.write(s.as_ptr()) };
        HSA_STATUS_SUCCESS
    })
}

/// NUL-terminated "NAME: description" for every named status.
fn status_string(status: hsa_status_t) -> Option<&'static CStr> {
    static STRINGS: OnceLock<HashMap<hsa_status_t, CString>> = OnceLock::new();
    let map = STRINGS.get_or_init(|| {
        let mut map = HashMap::new();
        for code in (0..=64).chain(0x1000..=0x1040).chain(0x2000..=0x2010) {
            if let Some(name) = Status(code).name() {
                let text = format!("{name}: {}", describe(code));
                map.insert(code, CString::new(text).expect("no NUL in status text"));
            }
        }
        map
    });
    map.get(&status).map(CString::as_c_str)
}

/// A short description of a status code, in our words.
fn describe(code: hsa_status_t) -> &'static str {
    match code {
        HSA_STATUS_SUCCESS => "the call succeeded",
        HSA_STATUS_INFO_BREAK => "a callback stopped the iteration",
        HSA_STATUS_ERROR_INVALID_ARGUMENT => "an argument is invalid",
        HSA_STATUS_ERROR_INVALID_QUEUE_CREATION => "the queue cannot be created as requested",
        HSA_STATUS_ERROR_INVALID_ALLOCATION => "the allocation request is invalid",
        HSA_STATUS_ERROR_INVALID_AGENT => "the agent handle is invalid",
        HSA_STATUS_ERROR_INVALID_REGION => "the region handle is invalid",
        HSA_STATUS_ERROR_INVALID_SIGNAL => "the signal handle is invalid",
        HSA_STATUS_ERROR_INVALID_QUEUE => "the queue is invalid",
        HSA_STATUS_ERROR_OUT_OF_RESOURCES => "the runtime ran out of a resource",
        HSA_STATUS_ERROR_INVALID_PACKET_FORMAT => "a packet is malformed",
        HSA_STATUS_ERROR_RESOURCE_FREE => "a resource could not be released",
        HSA_STATUS_ERROR_NOT_INITIALIZED => "the runtime is not initialized",
        HSA_STATUS_ERROR_REFCOUNT_OVERFLOW => "the reference count overflowed",
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT => "the code object is invalid",
        HSA_STATUS_ERROR_INVALID_EXECUTABLE => "the executable is invalid",
        HSA_STATUS_ERROR_FROZEN_EXECUTABLE => "the executable is frozen",
        HSA_STATUS_ERROR_INVALID_SYMBOL_NAME => "no symbol has that name",
        HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL => "the executable symbol is invalid",
        HSA_STATUS_ERROR_INVALID_FILE => "the file is invalid",
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER => "the code object reader is invalid",
        HSA_STATUS_ERROR_INVALID_ISA_NAME => "no ISA has that name",
        HSA_STATUS_ERROR_INVALID_MEMORY_POOL => "the memory pool is invalid",
        _ if code >= HSA_STATUS_ERROR => "the call failed",
        _ => "informational status",
    }
}

/// Stops the runtime's background threads (async handlers, copy engine) at the last shut down.
fn stop_background_threads() {
    crate::queues::shutdown();
    crate::memory::shutdown();
    crate::signals::shutdown();
}

/// Splits `HSA_TOOLS_LIB` into library names: spaces separate, double quotes group, a
/// backslash escapes the next character.
pub(crate) fn split_tool_list(s: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut has_token = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    cur.push(next);
                    has_token = true;
                }
            }
            '"' => {
                in_quotes = !in_quotes;
                has_token = true;
            }
            c if c.is_whitespace() && !in_quotes => {
                if has_token {
                    names.push(std::mem::take(&mut cur));
                    has_token = false;
                }
            }
            c => {
                cur.push(c);
                has_token = true;
            }
        }
    }
    if has_token {
        names.push(cur);
    }
    names
}

fn report_failure(what: &str) {
    if std::env::var("HSA_TOOLS_REPORT_LOAD_FAILURE").is_ok_and(|v| v == "1") {
        eprintln!("hsa-emu: {what}");
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated thread-local string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic-loader error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Looks up `name` defined by the object behind `handle` itself (not by its dependencies).
fn own_symbol(handle: *mut c_void, path: &CStr, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `handle` is a live dlopen handle and `name` NUL-terminated.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `sym` is an address; `info` is writable.
    if unsafe { libc::dladdr(sym, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr filled a NUL-terminated file name.
    let owner = unsafe { CStr::from_ptr(info.dli_fname) };
    same_file(owner, path).then_some(sym)
}

fn same_file(a: &CStr, b: &CStr) -> bool {
    let (Ok(a), Ok(b)) = (a.to_str(), b.to_str()) else {
        return false;
    };
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Calls a tool's `OnLoad`; keeps the tool when it returns true.
fn offer_table(
    name: String,
    handle: *mut c_void,
    path: &CStr,
    failed: &mut Vec<CString>,
    tools: &mut Vec<Tool>,
) {
    let Some(on_load) = own_symbol(handle, path, c"OnLoad") else {
        report_failure(&format!("tool {name} has no OnLoad"));
        failed.push(CString::new(name).unwrap_or_default());
        return;
    };
    // SAFETY: `OnLoad` has this signature by the tool ABI (HSA-ABI.md §1).
    let on_load: OnLoad_fn_t = unsafe { std::mem::transmute::<*mut c_void, OnLoad_fn_t>(on_load) };
    let on_unload = own_symbol(handle, path, c"OnUnload")
        // SAFETY: `OnUnload` has this signature by the tool ABI.
        .map(|p| unsafe { std::mem::transmute::<*mut c_void, OnUnload_fn_t>(p) });
    let names: Vec<*const c_char> = failed.iter().map(|c| c.as_ptr()).collect();
    let root = api::root();
    // SAFETY: the live root table is valid for the process.
    let version = unsafe { (*root).version.major_id } as u64;
    // SAFETY: calling the tool's entry point with the live table, as ROCr does.
    let keep = unsafe { on_load(root, version, names.len() as u64, names.as_ptr()) };
    if keep {
        tools.push(Tool { handle, on_unload });
    } else {
        report_failure(&format!("tool {name}: OnLoad returned false"));
        failed.push(CString::new(name).unwrap_or_default());
    }
}

fn load_tools() -> Vec<Tool> {
    let mut tools = Vec::new();
    let mut failed: Vec<CString> = Vec::new();
    let list = std::env::var("HSA_TOOLS_LIB").unwrap_or_default();
    for name in split_tool_list(&list) {
        let Ok(cname) = CString::new(name.clone()) else {
            continue;
        };
        // SAFETY: NUL-terminated name; RTLD_NOW resolves everything up front.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            report_failure(&format!("cannot load tool {name}: {}", dl_error()));
            failed.push(cname);
            continue;
        }
        let path = loaded_path(handle).unwrap_or(cname.clone());
        offer_table(name, handle, &path, &mut failed, &mut tools);
    }
    let mut preloaded = discover_priority_tools(&tools);
    preloaded.sort_by_key(|(priority, _, _)| *priority);
    for (_, path, handle) in preloaded {
        let name = path.to_string_lossy().into_owned();
        offer_table(name, handle, &path, &mut failed, &mut tools);
    }
    tools
}

/// The file name of a loaded object.
fn loaded_path(handle: *mut c_void) -> Option<CString> {
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: RTLD_DI_LINKMAP writes a `struct link_map*` into `map`.
    if unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut c_void).cast(),
        )
    } != 0
        || map.is_null()
    {
        return None;
    }
    // SAFETY: link_map starts with l_addr (usize) then l_name (char*).
    let name = unsafe {
        *(map
            .cast::<u8>()
            .add(std::mem::size_of::<usize>())
            .cast::<*const c_char>())
    };
    if name.is_null() {
        return None;
    }
    // SAFETY: l_name is NUL-terminated.
    Some(unsafe { CStr::from_ptr(name) }.to_owned())
}

/// Already-loaded libraries (other than the runtime and tools loaded above) that export
/// `HSA_AMD_TOOL_PRIORITY`, with their priority.
fn discover_priority_tools(already: &[Tool]) -> Vec<(u32, CString, *mut c_void)> {
    let mut paths: Vec<CString> = Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info and our `data`.
        let (info, paths) = unsafe { (&*info, &mut *data.cast::<Vec<CString>>()) };
        if !info.dlpi_name.is_null() {
            // SAFETY: NUL-terminated object name.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            if !name.is_empty() {
                paths.push(name.to_owned());
            }
        }
        0
    }
    // SAFETY: the callback matches the expected signature and only touches `paths`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut paths as *mut Vec<CString>).cast()) };
    let mut found = Vec::new();
    let me = own_path();
    for path in paths {
        if me.as_deref().is_some_and(|me| same_file(me, &path)) {
            continue;
        }
        // SAFETY: RTLD_NOLOAD only returns a handle for an already-loaded object.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        let tool = if already.iter().any(|t| t.handle == handle) {
            None
        } else {
            own_symbol(handle, &path, c"HSA_AMD_TOOL_PRIORITY")
        };
        match tool {
            Some(sym) => {
                // SAFETY: the symbol is a `const uint32_t` by the tool ABI.
                let priority = unsafe { sym.cast::<u32>().read_unaligned() };
                // The extra reference is kept: the tool stays loaded for the process.
                found.push((priority, path, handle));
            }
            None => {
                // Drop the reference RTLD_NOLOAD took; the object stays loaded through its own.
                // SAFETY: a handle from the dlopen above, closed once.
                unsafe { libc::dlclose(handle) };
            }
        }
    }
    found
}

/// The file this runtime was loaded from.
fn own_path() -> Option<CString> {
    // SAFETY: zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address of one of our functions; `info` is writable.
    if unsafe { libc::dladdr(own_path as *const c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: NUL-terminated file name.
    Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_list_splits_on_spaces_with_quotes_and_escapes() {
        assert_eq!(split_tool_list(""), Vec::<String>::new());
        assert_eq!(split_tool_list("  a.so   b.so "), vec!["a.so", "b.so"]);
        assert_eq!(
            split_tool_list(r#""my tool.so" c.so"#),
            vec!["my tool.so", "c.so"]
        );
        assert_eq!(split_tool_list(r"a\ b.so"), vec!["a b.so"]);
        assert_eq!(split_tool_list(r#""""#), vec![""]);
    }

    #[test]
    fn every_named_status_has_a_string_starting_with_its_name() {
        for code in [HSA_STATUS_SUCCESS, HSA_STATUS_ERROR_OUT_OF_RESOURCES, 40] {
            let s = status_string(code).unwrap().to_str().unwrap();
            assert!(s.starts_with(Status(code).name().unwrap()), "{s}");
        }
        assert!(status_string(0x7777).is_none());
    }
}
