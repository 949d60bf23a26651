//! The runtime's own, live `HsaApiTable`: built once, patched by tools, used by every export.
//!
//! Each module fills the slots it implements through its `install` function; every slot left
//! empty gets [`unimplemented_slot`], which returns `HSA_STATUS_ERROR`, so no slot is ever NULL.
//! `HSA_EMU_ABI=5.2` presents the ROCm 5.2 tables (root major 1, 48 bytes; AMD extension major 1,
//! 400 bytes); otherwise the newest layout (root major 3, 64 bytes; AMD extension major 2, 608).

use std::ffi::c_void;
use std::mem::size_of;
use std::sync::OnceLock;

use rocprof_replay_sys::*;

/// The slots modules fill before the live table is laid out.
pub(crate) struct Tables {
    /// Core API.
    pub(crate) core: CoreApiTable,
    /// AMD extension, in the 6.x layout (copied into the 5.2 layout when that is presented).
    pub(crate) amd: AmdExtTable,
}

/// Which table layout the runtime presents to tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AbiPresentation {
    /// ROCm 6.2+ tables (default).
    Newest,
    /// ROCm 5.2 tables (`HSA_EMU_ABI=5.2`).
    Rocm52,
}

impl AbiPresentation {
    fn from_env() -> AbiPresentation {
        match std::env::var("HSA_EMU_ABI").as_deref() {
            Ok("5.2") => AbiPresentation::Rocm52,
            Ok("") | Ok("6") | Ok("newest") | Err(_) => AbiPresentation::Newest,
            Ok(other) => {
                eprintln!(
                    "hsa-emu: HSA_EMU_ABI={other:?} is not 5.2 or newest; presenting the newest ABI"
                );
                AbiPresentation::Newest
            }
        }
    }
}

/// The live tables, at fixed addresses for the life of the process.
pub(crate) struct LiveTables {
    pub(crate) root: HsaApiTable,
    pub(crate) core: CoreApiTable,
    pub(crate) amd6: AmdExtTable,
    pub(crate) amd52: AmdExtTable52,
    pub(crate) finalizer: FinalizerExtTable,
    pub(crate) image: ImageExtTable,
    pub(crate) tools: ToolsApiTable,
    pub(crate) abi: AbiPresentation,
}

/// Stand-in for every function the emulator does not implement.
///
/// Stored in slots of other signatures: on x86-64 System V the caller owns the argument
/// registers and stack, so ignoring arguments is sound, and the status lands in `eax`.
unsafe extern "C" fn unimplemented_slot() -> hsa_status_t {
    HSA_STATUS_ERROR
}

/// Fills every null slot after the header of a table of `size` bytes with the stub.
///
/// # Safety
/// `table` must point at a writable table of `size` bytes whose slots are pointer-sized.
unsafe fn fill_empty_slots(table: *mut u8, size: usize) {
    let header = size_of::<ApiTableVersion>();
    for offset in (header..size).step_by(size_of::<usize>()) {
        // SAFETY: offset + 8 <= size, inside the table (caller contract).
        let slot = unsafe { table.add(offset).cast::<*const c_void>() };
        // SAFETY: as above.
        if unsafe { slot.read() }.is_null() {
            // SAFETY: as above.
            unsafe { slot.write(unimplemented_slot as *const c_void) };
        }
    }
}

fn version(major: u32, size: usize, step: u32) -> ApiTableVersion {
    ApiTableVersion {
        major_id: major,
        minor_id: size as u32,
        step_id: step,
        reserved: 0,
    }
}

/// Copies the slots the 5.2 layout has from a 6.x table (each to its 5.2 offset).
fn to_rocm52(amd: &AmdExtTable) -> AmdExtTable52 {
    // SAFETY: all-zero is a valid table (integers and nullable pointers).
    let mut old: AmdExtTable52 = unsafe { std::mem::zeroed() };
    old.version = version(1, size_of::<AmdExtTable52>(), 0);
    let from = (amd as *const AmdExtTable).cast::<u8>();
    let to = (&mut old as *mut AmdExtTable52).cast::<u8>();
    for slot in slots::amd_ext::ALL {
        if let (Some(old_offset), Some(new_offset)) = (
            slot.offset_in(Layout::AmdExtRocm5),
            slot.offset_in(Layout::AmdExtRocm6),
        ) {
            // SAFETY: both offsets come from `offset_of!` on the two table types, so each
            // pointer-sized slot lies inside its table.
            unsafe {
                to.add(old_offset)
                    .cast::<usize>()
                    .write_unaligned(from.add(new_offset).cast::<usize>().read_unaligned())
            };
        }
    }
    old
}

fn build() -> &'static mut LiveTables {
    let mut tables = Tables {
        // SAFETY: every field is an integer or a nullable pointer: all-zero is valid.
        core: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        amd: unsafe { std::mem::zeroed() },
    };
    crate::runtime::install(&mut tables);
    crate::info::install(&mut tables);
    crate::signals::install(&mut tables);
    crate::memory::install(&mut tables);
    crate::queues::install(&mut tables);
    crate::loader::install(&mut tables);

    tables.core.version = version(1, size_of::<CoreApiTable>(), 0);
    tables.amd.version = version(2, size_of::<AmdExtTable>(), 7);
    let abi = AbiPresentation::from_env();
    let live = Box::leak(Box::new(LiveTables {
        // SAFETY: all-zero is valid for these tables (integers and nullable pointers).
        root: unsafe { std::mem::zeroed() },
        core: tables.core,
        amd52: to_rocm52(&tables.amd),
        amd6: tables.amd,
        // SAFETY: as above.
        finalizer: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        image: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        tools: unsafe { std::mem::zeroed() },
        abi,
    }));
    live.finalizer.version = version(1, size_of::<FinalizerExtTable>(), 0);
    live.image.version = version(1, size_of::<ImageExtTable>(), 0);
    live.tools.version = version(1, size_of::<ToolsApiTable>(), 0);
    // SAFETY: each pointer is a live table of the given size owned by `live`.
    unsafe {
        fill_empty_slots(
            (&mut live.core as *mut CoreApiTable).cast(),
            size_of::<CoreApiTable>(),
        );
        fill_empty_slots(
            (&mut live.amd6 as *mut AmdExtTable).cast(),
            size_of::<AmdExtTable>(),
        );
        fill_empty_slots(
            (&mut live.amd52 as *mut AmdExtTable52).cast(),
            size_of::<AmdExtTable52>(),
        );
        fill_empty_slots(
            (&mut live.finalizer as *mut FinalizerExtTable).cast(),
            size_of::<FinalizerExtTable>(),
        );
        fill_empty_slots(
            (&mut live.image as *mut ImageExtTable).cast(),
            size_of::<ImageExtTable>(),
        );
    }
    if let Some(major) = crate::faults::faults().amd_ext_major() {
        live.amd6.version.major_id = major;
        live.amd52.version.major_id = major;
    }
    live.root.core_ = &mut live.core;
    live.root.finalizer_ext_ = &mut live.finalizer;
    live.root.image_ext_ = &mut live.image;
    match abi {
        AbiPresentation::Newest => {
            live.root.version = version(3, size_of::<HsaApiTable>(), 1);
            live.root.amd_ext_ = (&mut live.amd6 as *mut AmdExtTable).cast();
            live.root.tools_ = &mut live.tools;
            live.root.pc_sampling_ext_ = std::ptr::null_mut();
        }
        AbiPresentation::Rocm52 => {
            live.root.version = version(1, HSA_API_TABLE_SIZE_V1 as usize, 0);
            live.root.amd_ext_ = (&mut live.amd52 as *mut AmdExtTable52).cast();
        }
    }
    live
}

struct LivePtr(*mut LiveTables);
// SAFETY: the tables are leaked, so the pointer stays valid; tools mutate them only inside
// OnLoad (on the thread running hsa_init) as with ROCr, and readers tolerate that.
unsafe impl Send for LivePtr {}
// SAFETY: as above.
unsafe impl Sync for LivePtr {}

static LIVE: OnceLock<LivePtr> = OnceLock::new();

/// The live tables (built on first use).
pub(crate) fn live() -> *mut LiveTables {
    LIVE.get_or_init(|| LivePtr(build())).0
}

/// The live root table, as handed to tools.
pub(crate) fn root() -> *mut HsaApiTable {
    // SAFETY: `live()` is a leaked, valid allocation.
    unsafe { &raw mut (*live()).root }
}

/// The live core table (stable layout in every presentation).
#[inline]
pub(crate) fn core() -> *const CoreApiTable {
    // SAFETY: `live()` is a leaked, valid allocation.
    unsafe { &raw const (*live()).core }
}

/// The live AMD extension table's header (its layout depends on the presentation).
#[inline]
pub(crate) fn amd_ext() -> *mut ApiTableVersion {
    // SAFETY: `live()` is a leaked, valid allocation; root.amd_ext_ points into it.
    unsafe { (*live()).root.amd_ext_ }
}

/// The presented ABI.
pub(crate) fn abi() -> AbiPresentation {
    // SAFETY: `live()` is a leaked, valid allocation.
    unsafe { (*live()).abi }
}

/// A copy of the live tables' slots, to undo what tools patched.
pub(crate) struct LiveSnapshot {
    core: CoreApiTable,
    amd6: AmdExtTable,
    amd52: AmdExtTable52,
    tools: ToolsApiTable,
}

/// Copies the live tables' slots.
pub(crate) fn snapshot() -> LiveSnapshot {
    let live = live();
    // SAFETY: the live tables are valid for the process; plain copies of POD tables.
    unsafe {
        LiveSnapshot {
            core: (*live).core,
            amd6: (*live).amd6,
            amd52: (*live).amd52,
            tools: (*live).tools,
        }
    }
}

/// Writes a snapshot back into the live tables (after the last `hsa_shut_down`).
pub(crate) fn restore(s: &LiveSnapshot) {
    let live = live();
    // SAFETY: as above; tools are unloaded, nobody patches the tables concurrently.
    unsafe {
        (*live).core = s.core;
        (*live).amd6 = s.amd6;
        (*live).amd52 = s.amd52;
        (*live).tools = s.tools;
    }
}

/// Reads an AMD extension slot at its offset in the presented layout (independent of the
/// version the table header claims, which the fault knobs may falsify).
#[inline]
pub(crate) fn amd_slot<F: Copy>(slot: Slot<F>) -> Option<F> {
    let layout = match abi() {
        AbiPresentation::Newest => Layout::AmdExtRocm6,
        AbiPresentation::Rocm52 => Layout::AmdExtRocm5,
    };
    let offset = slot.offset_in(layout)?;
    // SAFETY: the live AMD table has this layout; `offset` lies inside it; slots hold
    // `Option<F>` (a nullable function pointer).
    unsafe {
        amd_ext()
            .cast::<u8>()
            .add(offset)
            .cast::<Option<F>>()
            .read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_slot_is_null_in_any_table() {
        let live = live();
        // SAFETY: the live tables are valid for the whole process.
        unsafe {
            let check = |p: *const u8, size: usize| {
                for off in (16..size).step_by(8) {
                    assert!(
                        !p.add(off).cast::<*const c_void>().read().is_null(),
                        "slot {off} is null"
                    );
                }
            };
            check((&raw const (*live).core).cast(), size_of::<CoreApiTable>());
            check((&raw const (*live).amd6).cast(), size_of::<AmdExtTable>());
            check(
                (&raw const (*live).amd52).cast(),
                size_of::<AmdExtTable52>(),
            );
        }
    }

    #[test]
    fn rocm52_copy_keeps_each_function_in_its_own_slot() {
        // SAFETY: all-zero is a valid table.
        let mut amd: AmdExtTable = unsafe { std::mem::zeroed() };
        amd.hsa_amd_pointer_info_fn = Some({
            unsafe extern "C" fn f(
                _: *const c_void,
                _: *mut hsa_amd_pointer_info_t,
                _: Option<unsafe extern "C" fn(usize) -> *mut c_void>,
                _: *mut u32,
                _: *mut *mut hsa_agent_t,
            ) -> hsa_status_t {
                7
            }
            f
        });
        let old = to_rocm52(&amd);
        assert_eq!(old.version.minor_id, 400);
        let header = &old.version as *const ApiTableVersion;
        // SAFETY: `old` is a live 400-byte table.
        let f = unsafe { slots::amd_ext::POINTER_INFO.read(header) }
            .unwrap()
            .unwrap();
        // SAFETY: the stub ignores its arguments.
        let r = unsafe {
            f(
                std::ptr::null(),
                std::ptr::null_mut(),
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, 7);
    }
}
