//! Version-aware access to API-table slots.
//!
//! A [`Slot`] names one function of one table and knows its byte offset in every supported
//! layout of that table. [`Slot::read`] and [`Slot::write`] find the layout from the table's
//! [`ApiTableVersion`], refuse an unknown major version, and refuse a slot that lies at or
//! beyond the table's `minor_id` (its size), so a tool never reads past a short table or
//! writes into the wrong function of another layout.
//!
//! ```
//! use rocprof_replay_sys::{slots, AmdExtTable, ApiTableVersion};
//! # unsafe extern "C" fn my_allocate(
//! #     _: rocprof_replay_sys::hsa_amd_memory_pool_t, _: usize, _: u32, _: *mut *mut ::core::ffi::c_void,
//! # ) -> rocprof_replay_sys::hsa_status_t { 0 }
//! // A zeroed 6.x table, as a runtime would hand one out (with real pointers).
//! let mut table: AmdExtTable = unsafe { ::core::mem::zeroed() };
//! table.version = ApiTableVersion { major_id: 2, minor_id: 608, step_id: 7, reserved: 0 };
//! let header = &mut table.version as *mut ApiTableVersion;
//! // SAFETY: `header` starts a live table of `minor_id` bytes.
//! let old = unsafe { slots::amd_ext::MEMORY_POOL_ALLOCATE.write(header, Some(my_allocate)) };
//! assert!(old.unwrap().is_none());
//! assert!(table.hsa_amd_memory_pool_allocate_fn.is_some());
//! ```

use ::core::fmt;
use ::core::marker::PhantomData;
use ::core::mem::offset_of;

use crate::fns::*;
use crate::table::*;

/// Which API table a slot belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableKind {
    /// The root `HsaApiTable`.
    Root,
    /// `CoreApiTable`.
    Core,
    /// `AmdExtTable`.
    AmdExt,
    /// `ToolsApiTable`.
    Tools,
}

impl fmt::Display for TableKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TableKind::Root => "HsaApiTable",
            TableKind::Core => "CoreApiTable",
            TableKind::AmdExt => "AmdExtTable",
            TableKind::Tools => "ToolsApiTable",
        })
    }
}

/// A supported layout of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// The one layout of a table that never moved a slot (root, core, tools).
    Stable,
    /// `AmdExtTable` of ROCm 5.0-5.4: major 1, at most 400 bytes.
    AmdExtRocm5,
    /// `AmdExtTable` of ROCm 6.x: major 2.
    AmdExtRocm6,
}

impl Layout {
    /// Identifies the layout of a table of `kind` from its header.
    pub fn detect(kind: TableKind, version: ApiTableVersion) -> Result<Layout, TableError> {
        let unknown = || TableError::UnknownLayout {
            table: kind,
            major: version.major_id,
            size: version.minor_id,
        };
        match kind {
            TableKind::Root if (1..=3).contains(&version.major_id) => Ok(Layout::Stable),
            TableKind::Core if (1..=2).contains(&version.major_id) => Ok(Layout::Stable),
            TableKind::Tools if version.major_id == 1 => Ok(Layout::Stable),
            // 5.5/5.6 grew the table under major 1 and moved slots: only the 5.2-sized table
            // is known to have the 5.2 offsets.
            TableKind::AmdExt if version.major_id == 1 && version.minor_id <= 400 => {
                Ok(Layout::AmdExtRocm5)
            }
            TableKind::AmdExt if version.major_id == 2 => Ok(Layout::AmdExtRocm6),
            _ => Err(unknown()),
        }
    }

    /// Index of this layout in a slot's offset list.
    const fn index(self) -> usize {
        match self {
            Layout::Stable | Layout::AmdExtRocm5 => 0,
            Layout::AmdExtRocm6 => 1,
        }
    }
}

/// Why a slot could not be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableError {
    /// The table pointer was null.
    NullTable {
        /// Table kind.
        table: TableKind,
    },
    /// The table's version is not one this crate knows.
    UnknownLayout {
        /// Table kind.
        table: TableKind,
        /// `major_id` found.
        major: u32,
        /// `minor_id` (size) found.
        size: u32,
    },
    /// The function does not exist in this layout or lies beyond the table's size.
    SlotAbsent {
        /// Table kind.
        table: TableKind,
        /// Function name.
        slot: &'static str,
        /// The slot's offset in this layout, if it has one.
        offset: Option<usize>,
        /// `minor_id` (size) of the table.
        size: u32,
    },
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TableError::NullTable { table } => write!(f, "{table} pointer is null"),
            TableError::UnknownLayout { table, major, size } => write!(
                f,
                "unknown {table} layout (major {major}, {size} bytes): refusing to touch its slots"
            ),
            TableError::SlotAbsent {
                table,
                slot,
                offset: Some(o),
                size,
            } => write!(
                f,
                "{table} slot {slot} at offset {o} lies beyond the table's {size} bytes"
            ),
            TableError::SlotAbsent {
                table,
                slot,
                offset: None,
                ..
            } => {
                write!(f, "{table} slot {slot} does not exist in this layout")
            }
        }
    }
}

impl ::core::error::Error for TableError {}

/// One function slot of a versioned table, typed by its function signature `F`.
pub struct Slot<F> {
    table: TableKind,
    name: &'static str,
    offsets: [Option<usize>; 2],
    _f: PhantomData<F>,
}

impl<F> Clone for Slot<F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F> Copy for Slot<F> {}

impl<F> fmt::Debug for Slot<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("table", &self.table)
            .field("name", &self.name)
            .field("offsets", &self.offsets)
            .finish()
    }
}

/// A slot's name, table and offsets without its function type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// C name of the slot's field.
    pub name: &'static str,
    /// Table the slot belongs to.
    pub table: TableKind,
    offsets: [Option<usize>; 2],
}

impl SlotInfo {
    /// Byte offset of the slot in `layout`, if the layout has it.
    pub const fn offset_in(&self, layout: Layout) -> Option<usize> {
        self.offsets[layout.index()]
    }
}

impl<F: Copy> Slot<F> {
    /// The slot without its function type.
    pub const fn info(&self) -> SlotInfo {
        SlotInfo {
            name: self.name,
            table: self.table,
            offsets: self.offsets,
        }
    }

    /// A slot at `offsets[layout index]` (`None` where the layout lacks the function).
    ///
    /// `F` must be an `unsafe extern "C" fn` type: the slot stores `Option<F>` (8 bytes,
    /// null = `None`).
    pub const fn new(table: TableKind, name: &'static str, offsets: [Option<usize>; 2]) -> Self {
        assert!(::core::mem::size_of::<Option<F>>() == ::core::mem::size_of::<usize>());
        Slot {
            table,
            name,
            offsets,
            _f: PhantomData,
        }
    }

    /// C name of the function.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Table this slot belongs to.
    pub const fn table(&self) -> TableKind {
        self.table
    }

    /// Byte offset of the slot in `layout`, if the layout has it.
    pub const fn offset_in(&self, layout: Layout) -> Option<usize> {
        self.offsets[layout.index()]
    }

    /// Byte offset of this slot in the table whose header is `version`, checked against its size.
    pub fn offset_for(&self, version: ApiTableVersion) -> Result<usize, TableError> {
        let layout = Layout::detect(self.table, version)?;
        let offset = self.offset_in(layout);
        match offset {
            Some(o) if o + ::core::mem::size_of::<usize>() <= version.minor_id as usize => Ok(o),
            _ => Err(TableError::SlotAbsent {
                table: self.table,
                slot: self.name,
                offset,
                size: version.minor_id,
            }),
        }
    }

    /// Reads the slot: `Ok(None)` when the runtime left it null.
    ///
    /// # Safety
    /// `table` must be null or point at a live table of this slot's kind whose `minor_id`
    /// bytes are readable.
    pub unsafe fn read(&self, table: *const ApiTableVersion) -> Result<Option<F>, TableError> {
        if table.is_null() {
            return Err(TableError::NullTable { table: self.table });
        }
        // SAFETY: `table` is non-null and points at a readable table header (caller contract).
        let version = unsafe { table.read_unaligned() };
        let offset = self.offset_for(version)?;
        // SAFETY: offset + 8 <= minor_id, so the slot lies inside the table the caller vouched
        // for; `Option<F>` of an fn pointer type has the layout of a nullable pointer.
        Ok(unsafe {
            table
                .cast::<u8>()
                .add(offset)
                .cast::<Option<F>>()
                .read_unaligned()
        })
    }

    /// Replaces the slot's function and returns the previous one.
    ///
    /// # Safety
    /// `table` must be null or point at a live, writable table of this slot's kind whose
    /// `minor_id` bytes are valid; no other thread may call through the slot while it changes
    /// unless the runtime tolerates that (tools patch tables inside `OnLoad`).
    pub unsafe fn write(
        &self,
        table: *mut ApiTableVersion,
        f: Option<F>,
    ) -> Result<Option<F>, TableError> {
        if table.is_null() {
            return Err(TableError::NullTable { table: self.table });
        }
        // SAFETY: non-null table header (caller contract).
        let version = unsafe { table.read_unaligned() };
        let offset = self.offset_for(version)?;
        // SAFETY: the slot lies inside the writable table (offset checked against minor_id).
        let slot = unsafe { table.cast::<u8>().add(offset).cast::<Option<F>>() };
        // SAFETY: `slot` is valid for reads and writes of one pointer-sized value.
        let old = unsafe { slot.read_unaligned() };
        // SAFETY: as above.
        unsafe { slot.write_unaligned(f) };
        Ok(old)
    }
}

macro_rules! core_slot {
    ($name:ident, $field:ident, $ty:ty) => {
        #[doc = concat!("Slot of `", stringify!($field), "` in `CoreApiTable`.")]
        pub const $name: Slot<$ty> = Slot::new(
            TableKind::Core,
            stringify!($field),
            [Some(offset_of!(CoreApiTable, $field)), None],
        );
    };
}

macro_rules! amd_ext_slot {
    ($name:ident, $field:ident, $ty:ty) => {
        #[doc = concat!("Slot of `", stringify!($field), "` in `AmdExtTable` (ROCm 5.2 and 6.x).")]
        pub const $name: Slot<$ty> = Slot::new(
            TableKind::AmdExt,
            stringify!($field),
            [
                Some(offset_of!(AmdExtTable52, $field)),
                Some(offset_of!(AmdExtTable, $field)),
            ],
        );
    };
}

macro_rules! amd_ext_v2_slot {
    ($name:ident, $field:ident, $ty:ty) => {
        #[doc = concat!("Slot of `", stringify!($field), "` in `AmdExtTable` (ROCm 6.x only).")]
        pub const $name: Slot<$ty> = Slot::new(
            TableKind::AmdExt,
            stringify!($field),
            [None, Some(offset_of!(AmdExtTable, $field))],
        );
    };
}

/// Slots of the root [`HsaApiTable`] that hold sub-table pointers.
pub mod root {
    use super::*;

    /// A pointer slot of the root table.
    #[derive(Clone, Copy, Debug)]
    pub struct TablePointer {
        /// Field name.
        pub name: &'static str,
        /// Byte offset in the root table.
        pub offset: usize,
    }

    impl TablePointer {
        /// Reads the sub-table pointer, or an error when the root table is too short for it.
        ///
        /// # Safety
        /// `root` must be null or point at a live root table of `minor_id` readable bytes.
        pub unsafe fn read(
            &self,
            root: *const HsaApiTable,
        ) -> Result<*mut ApiTableVersion, TableError> {
            if root.is_null() {
                return Err(TableError::NullTable {
                    table: TableKind::Root,
                });
            }
            // SAFETY: non-null root table (caller contract).
            let version = unsafe { (*root).version };
            Layout::detect(TableKind::Root, version)?;
            if self.offset + 8 > version.minor_id as usize {
                return Err(TableError::SlotAbsent {
                    table: TableKind::Root,
                    slot: self.name,
                    offset: Some(self.offset),
                    size: version.minor_id,
                });
            }
            // SAFETY: the pointer field lies inside the root table's `minor_id` bytes.
            Ok(unsafe {
                root.cast::<u8>()
                    .add(self.offset)
                    .cast::<*mut ApiTableVersion>()
                    .read()
            })
        }
    }

    /// `core_`.
    pub const CORE: TablePointer = TablePointer {
        name: "core_",
        offset: offset_of!(HsaApiTable, core_),
    };
    /// `amd_ext_`.
    pub const AMD_EXT: TablePointer = TablePointer {
        name: "amd_ext_",
        offset: offset_of!(HsaApiTable, amd_ext_),
    };
    /// `tools_` (6.1+).
    pub const TOOLS: TablePointer = TablePointer {
        name: "tools_",
        offset: offset_of!(HsaApiTable, tools_),
    };
    /// `pc_sampling_ext_` (6.2+).
    pub const PC_SAMPLING_EXT: TablePointer = TablePointer {
        name: "pc_sampling_ext_",
        offset: offset_of!(HsaApiTable, pc_sampling_ext_),
    };
}

/// Slots of [`CoreApiTable`] (one layout for every supported major version).
pub mod core {
    use super::*;
    core_slot!(INIT, hsa_init_fn, hsa_init_fn_t);
    core_slot!(SHUT_DOWN, hsa_shut_down_fn, hsa_shut_down_fn_t);
    core_slot!(
        SYSTEM_GET_INFO,
        hsa_system_get_info_fn,
        hsa_system_get_info_fn_t
    );
    core_slot!(
        SYSTEM_EXTENSION_SUPPORTED,
        hsa_system_extension_supported_fn,
        hsa_system_extension_supported_fn_t
    );
    core_slot!(
        SYSTEM_GET_EXTENSION_TABLE,
        hsa_system_get_extension_table_fn,
        hsa_system_get_extension_table_fn_t
    );
    core_slot!(
        ITERATE_AGENTS,
        hsa_iterate_agents_fn,
        hsa_iterate_agents_fn_t
    );
    core_slot!(
        AGENT_GET_INFO,
        hsa_agent_get_info_fn,
        hsa_agent_get_info_fn_t
    );
    core_slot!(QUEUE_CREATE, hsa_queue_create_fn, hsa_queue_create_fn_t);
    core_slot!(
        SOFT_QUEUE_CREATE,
        hsa_soft_queue_create_fn,
        hsa_soft_queue_create_fn_t
    );
    core_slot!(QUEUE_DESTROY, hsa_queue_destroy_fn, hsa_queue_destroy_fn_t);
    core_slot!(
        QUEUE_INACTIVATE,
        hsa_queue_inactivate_fn,
        hsa_queue_inactivate_fn_t
    );
    core_slot!(
        QUEUE_LOAD_READ_INDEX_SCACQUIRE,
        hsa_queue_load_read_index_scacquire_fn,
        hsa_queue_load_read_index_scacquire_fn_t
    );
    core_slot!(
        QUEUE_LOAD_READ_INDEX_RELAXED,
        hsa_queue_load_read_index_relaxed_fn,
        hsa_queue_load_read_index_relaxed_fn_t
    );
    core_slot!(
        QUEUE_LOAD_WRITE_INDEX_SCACQUIRE,
        hsa_queue_load_write_index_scacquire_fn,
        hsa_queue_load_write_index_scacquire_fn_t
    );
    core_slot!(
        QUEUE_LOAD_WRITE_INDEX_RELAXED,
        hsa_queue_load_write_index_relaxed_fn,
        hsa_queue_load_write_index_relaxed_fn_t
    );
    core_slot!(
        QUEUE_STORE_WRITE_INDEX_RELAXED,
        hsa_queue_store_write_index_relaxed_fn,
        hsa_queue_store_write_index_relaxed_fn_t
    );
    core_slot!(
        QUEUE_STORE_WRITE_INDEX_SCRELEASE,
        hsa_queue_store_write_index_screlease_fn,
        hsa_queue_store_write_index_screlease_fn_t
    );
    core_slot!(
        QUEUE_CAS_WRITE_INDEX_SCACQ_SCREL,
        hsa_queue_cas_write_index_scacq_screl_fn,
        hsa_queue_cas_write_index_scacq_screl_fn_t
    );
    core_slot!(
        QUEUE_CAS_WRITE_INDEX_SCACQUIRE,
        hsa_queue_cas_write_index_scacquire_fn,
        hsa_queue_cas_write_index_scacquire_fn_t
    );
    core_slot!(
        QUEUE_CAS_WRITE_INDEX_RELAXED,
        hsa_queue_cas_write_index_relaxed_fn,
        hsa_queue_cas_write_index_relaxed_fn_t
    );
    core_slot!(
        QUEUE_CAS_WRITE_INDEX_SCRELEASE,
        hsa_queue_cas_write_index_screlease_fn,
        hsa_queue_cas_write_index_screlease_fn_t
    );
    core_slot!(
        QUEUE_ADD_WRITE_INDEX_SCACQ_SCREL,
        hsa_queue_add_write_index_scacq_screl_fn,
        hsa_queue_add_write_index_scacq_screl_fn_t
    );
    core_slot!(
        QUEUE_ADD_WRITE_INDEX_SCACQUIRE,
        hsa_queue_add_write_index_scacquire_fn,
        hsa_queue_add_write_index_scacquire_fn_t
    );
    core_slot!(
        QUEUE_ADD_WRITE_INDEX_RELAXED,
        hsa_queue_add_write_index_relaxed_fn,
        hsa_queue_add_write_index_relaxed_fn_t
    );
    core_slot!(
        QUEUE_ADD_WRITE_INDEX_SCRELEASE,
        hsa_queue_add_write_index_screlease_fn,
        hsa_queue_add_write_index_screlease_fn_t
    );
    core_slot!(
        QUEUE_STORE_READ_INDEX_RELAXED,
        hsa_queue_store_read_index_relaxed_fn,
        hsa_queue_store_read_index_relaxed_fn_t
    );
    core_slot!(
        QUEUE_STORE_READ_INDEX_SCRELEASE,
        hsa_queue_store_read_index_screlease_fn,
        hsa_queue_store_read_index_screlease_fn_t
    );
    core_slot!(
        AGENT_ITERATE_REGIONS,
        hsa_agent_iterate_regions_fn,
        hsa_agent_iterate_regions_fn_t
    );
    core_slot!(
        REGION_GET_INFO,
        hsa_region_get_info_fn,
        hsa_region_get_info_fn_t
    );
    core_slot!(
        AGENT_GET_EXCEPTION_POLICIES,
        hsa_agent_get_exception_policies_fn,
        hsa_agent_get_exception_policies_fn_t
    );
    core_slot!(
        AGENT_EXTENSION_SUPPORTED,
        hsa_agent_extension_supported_fn,
        hsa_agent_extension_supported_fn_t
    );
    core_slot!(
        MEMORY_REGISTER,
        hsa_memory_register_fn,
        hsa_memory_register_fn_t
    );
    core_slot!(
        MEMORY_DEREGISTER,
        hsa_memory_deregister_fn,
        hsa_memory_deregister_fn_t
    );
    core_slot!(
        MEMORY_ALLOCATE,
        hsa_memory_allocate_fn,
        hsa_memory_allocate_fn_t
    );
    core_slot!(MEMORY_FREE, hsa_memory_free_fn, hsa_memory_free_fn_t);
    core_slot!(MEMORY_COPY, hsa_memory_copy_fn, hsa_memory_copy_fn_t);
    core_slot!(
        MEMORY_ASSIGN_AGENT,
        hsa_memory_assign_agent_fn,
        hsa_memory_assign_agent_fn_t
    );
    core_slot!(SIGNAL_CREATE, hsa_signal_create_fn, hsa_signal_create_fn_t);
    core_slot!(
        SIGNAL_DESTROY,
        hsa_signal_destroy_fn,
        hsa_signal_destroy_fn_t
    );
    core_slot!(
        SIGNAL_LOAD_RELAXED,
        hsa_signal_load_relaxed_fn,
        hsa_signal_load_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_LOAD_SCACQUIRE,
        hsa_signal_load_scacquire_fn,
        hsa_signal_load_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_STORE_RELAXED,
        hsa_signal_store_relaxed_fn,
        hsa_signal_store_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_STORE_SCRELEASE,
        hsa_signal_store_screlease_fn,
        hsa_signal_store_screlease_fn_t
    );
    core_slot!(
        SIGNAL_WAIT_RELAXED,
        hsa_signal_wait_relaxed_fn,
        hsa_signal_wait_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_WAIT_SCACQUIRE,
        hsa_signal_wait_scacquire_fn,
        hsa_signal_wait_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_AND_RELAXED,
        hsa_signal_and_relaxed_fn,
        hsa_signal_and_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_AND_SCACQUIRE,
        hsa_signal_and_scacquire_fn,
        hsa_signal_and_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_AND_SCRELEASE,
        hsa_signal_and_screlease_fn,
        hsa_signal_and_screlease_fn_t
    );
    core_slot!(
        SIGNAL_AND_SCACQ_SCREL,
        hsa_signal_and_scacq_screl_fn,
        hsa_signal_and_scacq_screl_fn_t
    );
    core_slot!(
        SIGNAL_OR_RELAXED,
        hsa_signal_or_relaxed_fn,
        hsa_signal_or_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_OR_SCACQUIRE,
        hsa_signal_or_scacquire_fn,
        hsa_signal_or_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_OR_SCRELEASE,
        hsa_signal_or_screlease_fn,
        hsa_signal_or_screlease_fn_t
    );
    core_slot!(
        SIGNAL_OR_SCACQ_SCREL,
        hsa_signal_or_scacq_screl_fn,
        hsa_signal_or_scacq_screl_fn_t
    );
    core_slot!(
        SIGNAL_XOR_RELAXED,
        hsa_signal_xor_relaxed_fn,
        hsa_signal_xor_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_XOR_SCACQUIRE,
        hsa_signal_xor_scacquire_fn,
        hsa_signal_xor_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_XOR_SCRELEASE,
        hsa_signal_xor_screlease_fn,
        hsa_signal_xor_screlease_fn_t
    );
    core_slot!(
        SIGNAL_XOR_SCACQ_SCREL,
        hsa_signal_xor_scacq_screl_fn,
        hsa_signal_xor_scacq_screl_fn_t
    );
    core_slot!(
        SIGNAL_EXCHANGE_RELAXED,
        hsa_signal_exchange_relaxed_fn,
        hsa_signal_exchange_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_EXCHANGE_SCACQUIRE,
        hsa_signal_exchange_scacquire_fn,
        hsa_signal_exchange_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_EXCHANGE_SCRELEASE,
        hsa_signal_exchange_screlease_fn,
        hsa_signal_exchange_screlease_fn_t
    );
    core_slot!(
        SIGNAL_EXCHANGE_SCACQ_SCREL,
        hsa_signal_exchange_scacq_screl_fn,
        hsa_signal_exchange_scacq_screl_fn_t
    );
    core_slot!(
        SIGNAL_ADD_RELAXED,
        hsa_signal_add_relaxed_fn,
        hsa_signal_add_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_ADD_SCACQUIRE,
        hsa_signal_add_scacquire_fn,
        hsa_signal_add_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_ADD_SCRELEASE,
        hsa_signal_add_screlease_fn,
        hsa_signal_add_screlease_fn_t
    );
    core_slot!(
        SIGNAL_ADD_SCACQ_SCREL,
        hsa_signal_add_scacq_screl_fn,
        hsa_signal_add_scacq_screl_fn_t
    );
    core_slot!(
        SIGNAL_SUBTRACT_RELAXED,
        hsa_signal_subtract_relaxed_fn,
        hsa_signal_subtract_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_SUBTRACT_SCACQUIRE,
        hsa_signal_subtract_scacquire_fn,
        hsa_signal_subtract_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_SUBTRACT_SCRELEASE,
        hsa_signal_subtract_screlease_fn,
        hsa_signal_subtract_screlease_fn_t
    );
    core_slot!(
        SIGNAL_SUBTRACT_SCACQ_SCREL,
        hsa_signal_subtract_scacq_screl_fn,
        hsa_signal_subtract_scacq_screl_fn_t
    );
    core_slot!(
        SIGNAL_CAS_RELAXED,
        hsa_signal_cas_relaxed_fn,
        hsa_signal_cas_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_CAS_SCACQUIRE,
        hsa_signal_cas_scacquire_fn,
        hsa_signal_cas_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_CAS_SCRELEASE,
        hsa_signal_cas_screlease_fn,
        hsa_signal_cas_screlease_fn_t
    );
    core_slot!(
        SIGNAL_CAS_SCACQ_SCREL,
        hsa_signal_cas_scacq_screl_fn,
        hsa_signal_cas_scacq_screl_fn_t
    );
    core_slot!(ISA_FROM_NAME, hsa_isa_from_name_fn, hsa_isa_from_name_fn_t);
    core_slot!(ISA_GET_INFO, hsa_isa_get_info_fn, hsa_isa_get_info_fn_t);
    core_slot!(
        ISA_COMPATIBLE,
        hsa_isa_compatible_fn,
        hsa_isa_compatible_fn_t
    );
    core_slot!(
        CODE_OBJECT_SERIALIZE,
        hsa_code_object_serialize_fn,
        hsa_code_object_serialize_fn_t
    );
    core_slot!(
        CODE_OBJECT_DESERIALIZE,
        hsa_code_object_deserialize_fn,
        hsa_code_object_deserialize_fn_t
    );
    core_slot!(
        CODE_OBJECT_DESTROY,
        hsa_code_object_destroy_fn,
        hsa_code_object_destroy_fn_t
    );
    core_slot!(
        CODE_OBJECT_GET_INFO,
        hsa_code_object_get_info_fn,
        hsa_code_object_get_info_fn_t
    );
    core_slot!(
        CODE_OBJECT_GET_SYMBOL,
        hsa_code_object_get_symbol_fn,
        hsa_code_object_get_symbol_fn_t
    );
    core_slot!(
        CODE_SYMBOL_GET_INFO,
        hsa_code_symbol_get_info_fn,
        hsa_code_symbol_get_info_fn_t
    );
    core_slot!(
        CODE_OBJECT_ITERATE_SYMBOLS,
        hsa_code_object_iterate_symbols_fn,
        hsa_code_object_iterate_symbols_fn_t
    );
    core_slot!(
        EXECUTABLE_CREATE,
        hsa_executable_create_fn,
        hsa_executable_create_fn_t
    );
    core_slot!(
        EXECUTABLE_DESTROY,
        hsa_executable_destroy_fn,
        hsa_executable_destroy_fn_t
    );
    core_slot!(
        EXECUTABLE_LOAD_CODE_OBJECT,
        hsa_executable_load_code_object_fn,
        hsa_executable_load_code_object_fn_t
    );
    core_slot!(
        EXECUTABLE_FREEZE,
        hsa_executable_freeze_fn,
        hsa_executable_freeze_fn_t
    );
    core_slot!(
        EXECUTABLE_GET_INFO,
        hsa_executable_get_info_fn,
        hsa_executable_get_info_fn_t
    );
    core_slot!(
        EXECUTABLE_GLOBAL_VARIABLE_DEFINE,
        hsa_executable_global_variable_define_fn,
        hsa_executable_global_variable_define_fn_t
    );
    core_slot!(
        EXECUTABLE_AGENT_GLOBAL_VARIABLE_DEFINE,
        hsa_executable_agent_global_variable_define_fn,
        hsa_executable_agent_global_variable_define_fn_t
    );
    core_slot!(
        EXECUTABLE_READONLY_VARIABLE_DEFINE,
        hsa_executable_readonly_variable_define_fn,
        hsa_executable_readonly_variable_define_fn_t
    );
    core_slot!(
        EXECUTABLE_VALIDATE,
        hsa_executable_validate_fn,
        hsa_executable_validate_fn_t
    );
    core_slot!(
        EXECUTABLE_GET_SYMBOL,
        hsa_executable_get_symbol_fn,
        hsa_executable_get_symbol_fn_t
    );
    core_slot!(
        EXECUTABLE_SYMBOL_GET_INFO,
        hsa_executable_symbol_get_info_fn,
        hsa_executable_symbol_get_info_fn_t
    );
    core_slot!(
        EXECUTABLE_ITERATE_SYMBOLS,
        hsa_executable_iterate_symbols_fn,
        hsa_executable_iterate_symbols_fn_t
    );
    core_slot!(STATUS_STRING, hsa_status_string_fn, hsa_status_string_fn_t);
    core_slot!(
        EXTENSION_GET_NAME,
        hsa_extension_get_name_fn,
        hsa_extension_get_name_fn_t
    );
    core_slot!(
        SYSTEM_MAJOR_EXTENSION_SUPPORTED,
        hsa_system_major_extension_supported_fn,
        hsa_system_major_extension_supported_fn_t
    );
    core_slot!(
        SYSTEM_GET_MAJOR_EXTENSION_TABLE,
        hsa_system_get_major_extension_table_fn,
        hsa_system_get_major_extension_table_fn_t
    );
    core_slot!(
        AGENT_MAJOR_EXTENSION_SUPPORTED,
        hsa_agent_major_extension_supported_fn,
        hsa_agent_major_extension_supported_fn_t
    );
    core_slot!(
        CACHE_GET_INFO,
        hsa_cache_get_info_fn,
        hsa_cache_get_info_fn_t
    );
    core_slot!(
        AGENT_ITERATE_CACHES,
        hsa_agent_iterate_caches_fn,
        hsa_agent_iterate_caches_fn_t
    );
    core_slot!(
        SIGNAL_SILENT_STORE_RELAXED,
        hsa_signal_silent_store_relaxed_fn,
        hsa_signal_silent_store_relaxed_fn_t
    );
    core_slot!(
        SIGNAL_SILENT_STORE_SCRELEASE,
        hsa_signal_silent_store_screlease_fn,
        hsa_signal_silent_store_screlease_fn_t
    );
    core_slot!(
        SIGNAL_GROUP_CREATE,
        hsa_signal_group_create_fn,
        hsa_signal_group_create_fn_t
    );
    core_slot!(
        SIGNAL_GROUP_DESTROY,
        hsa_signal_group_destroy_fn,
        hsa_signal_group_destroy_fn_t
    );
    core_slot!(
        SIGNAL_GROUP_WAIT_ANY_SCACQUIRE,
        hsa_signal_group_wait_any_scacquire_fn,
        hsa_signal_group_wait_any_scacquire_fn_t
    );
    core_slot!(
        SIGNAL_GROUP_WAIT_ANY_RELAXED,
        hsa_signal_group_wait_any_relaxed_fn,
        hsa_signal_group_wait_any_relaxed_fn_t
    );
    core_slot!(
        AGENT_ITERATE_ISAS,
        hsa_agent_iterate_isas_fn,
        hsa_agent_iterate_isas_fn_t
    );
    core_slot!(
        ISA_GET_INFO_ALT,
        hsa_isa_get_info_alt_fn,
        hsa_isa_get_info_alt_fn_t
    );
    core_slot!(
        ISA_GET_EXCEPTION_POLICIES,
        hsa_isa_get_exception_policies_fn,
        hsa_isa_get_exception_policies_fn_t
    );
    core_slot!(
        ISA_GET_ROUND_METHOD,
        hsa_isa_get_round_method_fn,
        hsa_isa_get_round_method_fn_t
    );
    core_slot!(
        WAVEFRONT_GET_INFO,
        hsa_wavefront_get_info_fn,
        hsa_wavefront_get_info_fn_t
    );
    core_slot!(
        ISA_ITERATE_WAVEFRONTS,
        hsa_isa_iterate_wavefronts_fn,
        hsa_isa_iterate_wavefronts_fn_t
    );
    core_slot!(
        CODE_OBJECT_GET_SYMBOL_FROM_NAME,
        hsa_code_object_get_symbol_from_name_fn,
        hsa_code_object_get_symbol_from_name_fn_t
    );
    core_slot!(
        CODE_OBJECT_READER_CREATE_FROM_FILE,
        hsa_code_object_reader_create_from_file_fn,
        hsa_code_object_reader_create_from_file_fn_t
    );
    core_slot!(
        CODE_OBJECT_READER_CREATE_FROM_MEMORY,
        hsa_code_object_reader_create_from_memory_fn,
        hsa_code_object_reader_create_from_memory_fn_t
    );
    core_slot!(
        CODE_OBJECT_READER_DESTROY,
        hsa_code_object_reader_destroy_fn,
        hsa_code_object_reader_destroy_fn_t
    );
    core_slot!(
        EXECUTABLE_CREATE_ALT,
        hsa_executable_create_alt_fn,
        hsa_executable_create_alt_fn_t
    );
    core_slot!(
        EXECUTABLE_LOAD_PROGRAM_CODE_OBJECT,
        hsa_executable_load_program_code_object_fn,
        hsa_executable_load_program_code_object_fn_t
    );
    core_slot!(
        EXECUTABLE_LOAD_AGENT_CODE_OBJECT,
        hsa_executable_load_agent_code_object_fn,
        hsa_executable_load_agent_code_object_fn_t
    );
    core_slot!(
        EXECUTABLE_VALIDATE_ALT,
        hsa_executable_validate_alt_fn,
        hsa_executable_validate_alt_fn_t
    );
    core_slot!(
        EXECUTABLE_GET_SYMBOL_BY_NAME,
        hsa_executable_get_symbol_by_name_fn,
        hsa_executable_get_symbol_by_name_fn_t
    );
    core_slot!(
        EXECUTABLE_ITERATE_AGENT_SYMBOLS,
        hsa_executable_iterate_agent_symbols_fn,
        hsa_executable_iterate_agent_symbols_fn_t
    );
    core_slot!(
        EXECUTABLE_ITERATE_PROGRAM_SYMBOLS,
        hsa_executable_iterate_program_symbols_fn,
        hsa_executable_iterate_program_symbols_fn_t
    );
}

/// Slots of the AMD extension table, in both the ROCm 5.2 and the 6.x layout.
pub mod amd_ext {
    use super::*;
    amd_ext_slot!(
        COHERENCY_GET_TYPE,
        hsa_amd_coherency_get_type_fn,
        hsa_amd_coherency_get_type_fn_t
    );
    amd_ext_slot!(
        COHERENCY_SET_TYPE,
        hsa_amd_coherency_set_type_fn,
        hsa_amd_coherency_set_type_fn_t
    );
    amd_ext_slot!(
        PROFILING_SET_PROFILER_ENABLED,
        hsa_amd_profiling_set_profiler_enabled_fn,
        hsa_amd_profiling_set_profiler_enabled_fn_t
    );
    amd_ext_slot!(
        PROFILING_ASYNC_COPY_ENABLE,
        hsa_amd_profiling_async_copy_enable_fn,
        hsa_amd_profiling_async_copy_enable_fn_t
    );
    amd_ext_slot!(
        PROFILING_GET_DISPATCH_TIME,
        hsa_amd_profiling_get_dispatch_time_fn,
        hsa_amd_profiling_get_dispatch_time_fn_t
    );
    amd_ext_slot!(
        PROFILING_GET_ASYNC_COPY_TIME,
        hsa_amd_profiling_get_async_copy_time_fn,
        hsa_amd_profiling_get_async_copy_time_fn_t
    );
    amd_ext_slot!(
        PROFILING_CONVERT_TICK_TO_SYSTEM_DOMAIN,
        hsa_amd_profiling_convert_tick_to_system_domain_fn,
        hsa_amd_profiling_convert_tick_to_system_domain_fn_t
    );
    amd_ext_slot!(
        SIGNAL_ASYNC_HANDLER,
        hsa_amd_signal_async_handler_fn,
        hsa_amd_signal_async_handler_fn_t
    );
    amd_ext_slot!(
        ASYNC_FUNCTION,
        hsa_amd_async_function_fn,
        hsa_amd_async_function_fn_t
    );
    amd_ext_slot!(
        SIGNAL_WAIT_ANY,
        hsa_amd_signal_wait_any_fn,
        hsa_amd_signal_wait_any_fn_t
    );
    amd_ext_slot!(
        QUEUE_CU_SET_MASK,
        hsa_amd_queue_cu_set_mask_fn,
        hsa_amd_queue_cu_set_mask_fn_t
    );
    amd_ext_slot!(
        MEMORY_POOL_GET_INFO,
        hsa_amd_memory_pool_get_info_fn,
        hsa_amd_memory_pool_get_info_fn_t
    );
    amd_ext_slot!(
        AGENT_ITERATE_MEMORY_POOLS,
        hsa_amd_agent_iterate_memory_pools_fn,
        hsa_amd_agent_iterate_memory_pools_fn_t
    );
    amd_ext_slot!(
        MEMORY_POOL_ALLOCATE,
        hsa_amd_memory_pool_allocate_fn,
        hsa_amd_memory_pool_allocate_fn_t
    );
    amd_ext_slot!(
        MEMORY_POOL_FREE,
        hsa_amd_memory_pool_free_fn,
        hsa_amd_memory_pool_free_fn_t
    );
    amd_ext_slot!(
        MEMORY_ASYNC_COPY,
        hsa_amd_memory_async_copy_fn,
        hsa_amd_memory_async_copy_fn_t
    );
    amd_ext_v2_slot!(
        MEMORY_ASYNC_COPY_ON_ENGINE,
        hsa_amd_memory_async_copy_on_engine_fn,
        hsa_amd_memory_async_copy_on_engine_fn_t
    );
    amd_ext_v2_slot!(
        MEMORY_COPY_ENGINE_STATUS,
        hsa_amd_memory_copy_engine_status_fn,
        hsa_amd_memory_copy_engine_status_fn_t
    );
    amd_ext_slot!(
        AGENT_MEMORY_POOL_GET_INFO,
        hsa_amd_agent_memory_pool_get_info_fn,
        hsa_amd_agent_memory_pool_get_info_fn_t
    );
    amd_ext_slot!(
        AGENTS_ALLOW_ACCESS,
        hsa_amd_agents_allow_access_fn,
        hsa_amd_agents_allow_access_fn_t
    );
    amd_ext_slot!(
        MEMORY_POOL_CAN_MIGRATE,
        hsa_amd_memory_pool_can_migrate_fn,
        hsa_amd_memory_pool_can_migrate_fn_t
    );
    amd_ext_slot!(
        MEMORY_MIGRATE,
        hsa_amd_memory_migrate_fn,
        hsa_amd_memory_migrate_fn_t
    );
    amd_ext_slot!(
        MEMORY_LOCK,
        hsa_amd_memory_lock_fn,
        hsa_amd_memory_lock_fn_t
    );
    amd_ext_slot!(
        MEMORY_UNLOCK,
        hsa_amd_memory_unlock_fn,
        hsa_amd_memory_unlock_fn_t
    );
    amd_ext_slot!(
        MEMORY_FILL,
        hsa_amd_memory_fill_fn,
        hsa_amd_memory_fill_fn_t
    );
    amd_ext_slot!(
        INTEROP_MAP_BUFFER,
        hsa_amd_interop_map_buffer_fn,
        hsa_amd_interop_map_buffer_fn_t
    );
    amd_ext_slot!(
        INTEROP_UNMAP_BUFFER,
        hsa_amd_interop_unmap_buffer_fn,
        hsa_amd_interop_unmap_buffer_fn_t
    );
    amd_ext_slot!(
        IMAGE_CREATE,
        hsa_amd_image_create_fn,
        hsa_amd_image_create_fn_t
    );
    amd_ext_slot!(
        POINTER_INFO,
        hsa_amd_pointer_info_fn,
        hsa_amd_pointer_info_fn_t
    );
    amd_ext_slot!(
        POINTER_INFO_SET_USERDATA,
        hsa_amd_pointer_info_set_userdata_fn,
        hsa_amd_pointer_info_set_userdata_fn_t
    );
    amd_ext_slot!(
        IPC_MEMORY_CREATE,
        hsa_amd_ipc_memory_create_fn,
        hsa_amd_ipc_memory_create_fn_t
    );
    amd_ext_slot!(
        IPC_MEMORY_ATTACH,
        hsa_amd_ipc_memory_attach_fn,
        hsa_amd_ipc_memory_attach_fn_t
    );
    amd_ext_slot!(
        IPC_MEMORY_DETACH,
        hsa_amd_ipc_memory_detach_fn,
        hsa_amd_ipc_memory_detach_fn_t
    );
    amd_ext_slot!(
        SIGNAL_CREATE,
        hsa_amd_signal_create_fn,
        hsa_amd_signal_create_fn_t
    );
    amd_ext_slot!(
        IPC_SIGNAL_CREATE,
        hsa_amd_ipc_signal_create_fn,
        hsa_amd_ipc_signal_create_fn_t
    );
    amd_ext_slot!(
        IPC_SIGNAL_ATTACH,
        hsa_amd_ipc_signal_attach_fn,
        hsa_amd_ipc_signal_attach_fn_t
    );
    amd_ext_slot!(
        REGISTER_SYSTEM_EVENT_HANDLER,
        hsa_amd_register_system_event_handler_fn,
        hsa_amd_register_system_event_handler_fn_t
    );
    amd_ext_slot!(
        QUEUE_INTERCEPT_CREATE,
        hsa_amd_queue_intercept_create_fn,
        hsa_amd_queue_intercept_create_fn_t
    );
    amd_ext_slot!(
        QUEUE_INTERCEPT_REGISTER,
        hsa_amd_queue_intercept_register_fn,
        hsa_amd_queue_intercept_register_fn_t
    );
    amd_ext_slot!(
        QUEUE_SET_PRIORITY,
        hsa_amd_queue_set_priority_fn,
        hsa_amd_queue_set_priority_fn_t
    );
    amd_ext_slot!(
        MEMORY_ASYNC_COPY_RECT,
        hsa_amd_memory_async_copy_rect_fn,
        hsa_amd_memory_async_copy_rect_fn_t
    );
    amd_ext_slot!(
        RUNTIME_QUEUE_CREATE_REGISTER,
        hsa_amd_runtime_queue_create_register_fn,
        hsa_amd_runtime_queue_create_register_fn_t
    );
    amd_ext_slot!(
        MEMORY_LOCK_TO_POOL,
        hsa_amd_memory_lock_to_pool_fn,
        hsa_amd_memory_lock_to_pool_fn_t
    );
    amd_ext_slot!(
        REGISTER_DEALLOCATION_CALLBACK,
        hsa_amd_register_deallocation_callback_fn,
        hsa_amd_register_deallocation_callback_fn_t
    );
    amd_ext_slot!(
        DEREGISTER_DEALLOCATION_CALLBACK,
        hsa_amd_deregister_deallocation_callback_fn,
        hsa_amd_deregister_deallocation_callback_fn_t
    );
    amd_ext_slot!(
        SIGNAL_VALUE_POINTER,
        hsa_amd_signal_value_pointer_fn,
        hsa_amd_signal_value_pointer_fn_t
    );
    amd_ext_slot!(
        SVM_ATTRIBUTES_SET,
        hsa_amd_svm_attributes_set_fn,
        hsa_amd_svm_attributes_set_fn_t
    );
    amd_ext_slot!(
        SVM_ATTRIBUTES_GET,
        hsa_amd_svm_attributes_get_fn,
        hsa_amd_svm_attributes_get_fn_t
    );
    amd_ext_slot!(
        SVM_PREFETCH_ASYNC,
        hsa_amd_svm_prefetch_async_fn,
        hsa_amd_svm_prefetch_async_fn_t
    );
    amd_ext_v2_slot!(
        SPM_ACQUIRE,
        hsa_amd_spm_acquire_fn,
        hsa_amd_spm_acquire_fn_t
    );
    amd_ext_v2_slot!(
        SPM_RELEASE,
        hsa_amd_spm_release_fn,
        hsa_amd_spm_release_fn_t
    );
    amd_ext_v2_slot!(
        SPM_SET_DEST_BUFFER,
        hsa_amd_spm_set_dest_buffer_fn,
        hsa_amd_spm_set_dest_buffer_fn_t
    );
    amd_ext_slot!(
        QUEUE_CU_GET_MASK,
        hsa_amd_queue_cu_get_mask_fn,
        hsa_amd_queue_cu_get_mask_fn_t
    );
    amd_ext_v2_slot!(
        PORTABLE_EXPORT_DMABUF,
        hsa_amd_portable_export_dmabuf_fn,
        hsa_amd_portable_export_dmabuf_fn_t
    );
    amd_ext_v2_slot!(
        PORTABLE_CLOSE_DMABUF,
        hsa_amd_portable_close_dmabuf_fn,
        hsa_amd_portable_close_dmabuf_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_ADDRESS_RESERVE,
        hsa_amd_vmem_address_reserve_fn,
        hsa_amd_vmem_address_reserve_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_ADDRESS_FREE,
        hsa_amd_vmem_address_free_fn,
        hsa_amd_vmem_address_free_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_HANDLE_CREATE,
        hsa_amd_vmem_handle_create_fn,
        hsa_amd_vmem_handle_create_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_HANDLE_RELEASE,
        hsa_amd_vmem_handle_release_fn,
        hsa_amd_vmem_handle_release_fn_t
    );
    amd_ext_v2_slot!(VMEM_MAP, hsa_amd_vmem_map_fn, hsa_amd_vmem_map_fn_t);
    amd_ext_v2_slot!(VMEM_UNMAP, hsa_amd_vmem_unmap_fn, hsa_amd_vmem_unmap_fn_t);
    amd_ext_v2_slot!(
        VMEM_SET_ACCESS,
        hsa_amd_vmem_set_access_fn,
        hsa_amd_vmem_set_access_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_GET_ACCESS,
        hsa_amd_vmem_get_access_fn,
        hsa_amd_vmem_get_access_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_EXPORT_SHAREABLE_HANDLE,
        hsa_amd_vmem_export_shareable_handle_fn,
        hsa_amd_vmem_export_shareable_handle_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_IMPORT_SHAREABLE_HANDLE,
        hsa_amd_vmem_import_shareable_handle_fn,
        hsa_amd_vmem_import_shareable_handle_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_RETAIN_ALLOC_HANDLE,
        hsa_amd_vmem_retain_alloc_handle_fn,
        hsa_amd_vmem_retain_alloc_handle_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_GET_ALLOC_PROPERTIES_FROM_HANDLE,
        hsa_amd_vmem_get_alloc_properties_from_handle_fn,
        hsa_amd_vmem_get_alloc_properties_from_handle_fn_t
    );
    amd_ext_v2_slot!(
        AGENT_SET_ASYNC_SCRATCH_LIMIT,
        hsa_amd_agent_set_async_scratch_limit_fn,
        hsa_amd_agent_set_async_scratch_limit_fn_t
    );
    amd_ext_v2_slot!(
        QUEUE_GET_INFO,
        hsa_amd_queue_get_info_fn,
        hsa_amd_queue_get_info_fn_t
    );
    amd_ext_v2_slot!(
        VMEM_ADDRESS_RESERVE_ALIGN,
        hsa_amd_vmem_address_reserve_align_fn,
        hsa_amd_vmem_address_reserve_align_fn_t
    );
    amd_ext_v2_slot!(
        ENABLE_LOGGING,
        hsa_amd_enable_logging_fn,
        hsa_amd_enable_logging_fn_t
    );
    amd_ext_v2_slot!(
        SIGNAL_WAIT_ALL,
        hsa_amd_signal_wait_all_fn,
        hsa_amd_signal_wait_all_fn_t
    );
    amd_ext_v2_slot!(
        MEMORY_GET_PREFERRED_COPY_ENGINE,
        hsa_amd_memory_get_preferred_copy_engine_fn,
        hsa_amd_memory_get_preferred_copy_engine_fn_t
    );
    amd_ext_v2_slot!(
        PORTABLE_EXPORT_DMABUF_V2,
        hsa_amd_portable_export_dmabuf_v2_fn,
        hsa_amd_portable_export_dmabuf_v2_fn_t
    );

    /// Every slot of the AMD extension table, in 6.x order, type-erased: for code that walks
    /// the whole table (copying between layouts, filling empty slots).
    pub const ALL: &[SlotInfo] = &[
        COHERENCY_GET_TYPE.info(),
        COHERENCY_SET_TYPE.info(),
        PROFILING_SET_PROFILER_ENABLED.info(),
        PROFILING_ASYNC_COPY_ENABLE.info(),
        PROFILING_GET_DISPATCH_TIME.info(),
        PROFILING_GET_ASYNC_COPY_TIME.info(),
        PROFILING_CONVERT_TICK_TO_SYSTEM_DOMAIN.info(),
        SIGNAL_ASYNC_HANDLER.info(),
        ASYNC_FUNCTION.info(),
        SIGNAL_WAIT_ANY.info(),
        QUEUE_CU_SET_MASK.info(),
        MEMORY_POOL_GET_INFO.info(),
        AGENT_ITERATE_MEMORY_POOLS.info(),
        MEMORY_POOL_ALLOCATE.info(),
        MEMORY_POOL_FREE.info(),
        MEMORY_ASYNC_COPY.info(),
        MEMORY_ASYNC_COPY_ON_ENGINE.info(),
        MEMORY_COPY_ENGINE_STATUS.info(),
        AGENT_MEMORY_POOL_GET_INFO.info(),
        AGENTS_ALLOW_ACCESS.info(),
        MEMORY_POOL_CAN_MIGRATE.info(),
        MEMORY_MIGRATE.info(),
        MEMORY_LOCK.info(),
        MEMORY_UNLOCK.info(),
        MEMORY_FILL.info(),
        INTEROP_MAP_BUFFER.info(),
        INTEROP_UNMAP_BUFFER.info(),
        IMAGE_CREATE.info(),
        POINTER_INFO.info(),
        POINTER_INFO_SET_USERDATA.info(),
        IPC_MEMORY_CREATE.info(),
        IPC_MEMORY_ATTACH.info(),
        IPC_MEMORY_DETACH.info(),
        SIGNAL_CREATE.info(),
        IPC_SIGNAL_CREATE.info(),
        IPC_SIGNAL_ATTACH.info(),
        REGISTER_SYSTEM_EVENT_HANDLER.info(),
        QUEUE_INTERCEPT_CREATE.info(),
        QUEUE_INTERCEPT_REGISTER.info(),
        QUEUE_SET_PRIORITY.info(),
        MEMORY_ASYNC_COPY_RECT.info(),
        RUNTIME_QUEUE_CREATE_REGISTER.info(),
        MEMORY_LOCK_TO_POOL.info(),
        REGISTER_DEALLOCATION_CALLBACK.info(),
        DEREGISTER_DEALLOCATION_CALLBACK.info(),
        SIGNAL_VALUE_POINTER.info(),
        SVM_ATTRIBUTES_SET.info(),
        SVM_ATTRIBUTES_GET.info(),
        SVM_PREFETCH_ASYNC.info(),
        SPM_ACQUIRE.info(),
        SPM_RELEASE.info(),
        SPM_SET_DEST_BUFFER.info(),
        QUEUE_CU_GET_MASK.info(),
        PORTABLE_EXPORT_DMABUF.info(),
        PORTABLE_CLOSE_DMABUF.info(),
        VMEM_ADDRESS_RESERVE.info(),
        VMEM_ADDRESS_FREE.info(),
        VMEM_HANDLE_CREATE.info(),
        VMEM_HANDLE_RELEASE.info(),
        VMEM_MAP.info(),
        VMEM_UNMAP.info(),
        VMEM_SET_ACCESS.info(),
        VMEM_GET_ACCESS.info(),
        VMEM_EXPORT_SHAREABLE_HANDLE.info(),
        VMEM_IMPORT_SHAREABLE_HANDLE.info(),
        VMEM_RETAIN_ALLOC_HANDLE.info(),
        VMEM_GET_ALLOC_PROPERTIES_FROM_HANDLE.info(),
        AGENT_SET_ASYNC_SCRATCH_LIMIT.info(),
        QUEUE_GET_INFO.info(),
        VMEM_ADDRESS_RESERVE_ALIGN.info(),
        ENABLE_LOGGING.info(),
        SIGNAL_WAIT_ALL.info(),
        MEMORY_GET_PREFERRED_COPY_ENGINE.info(),
        PORTABLE_EXPORT_DMABUF_V2.info(),
    ];
}
