//! Raw ABI of the AMD HSA runtime (ROCr), hand-written and checked against the real headers.
//!
//! This crate is the bottom layer of rocprof-replay: `#[repr(C)]` mirrors and nothing else —
//! no linking, no logic beyond reading a table slot safely. Names follow the C headers so that
//! code reads like the ROCr documentation.
//!
//! | module | what it holds |
//! |---|---|
//! | [`enums`] | C enumerations as `u32` aliases with their values (status codes, info attributes, flags) |
//! | [`types`] | handles (`hsa_agent_t`, `hsa_signal_t`, ...) and plain structs (`hsa_amd_pointer_info_t`, ...) |
//! | [`packets`] | AQL packets and header encode/decode helpers |
//! | [`queue`] | `hsa_queue_t` and `amd_queue_t` |
//! | [`signal`] | `amd_signal_t`, the memory behind a signal handle |
//! | [`fns`] | one `*_fn_t` signature per API function |
//! | [`table`] | `HsaApiTable`, `CoreApiTable`, `AmdExtTable` (6.x) and `AmdExtTable52`, `ToolsApiTable`, intercept and `OnLoad` types |
//! | [`slots`] | version-aware, bounds-checked access to table slots ([`slots::Slot`]) |
//! | [`aqlprofile`] | the AMD AQL profile extension v1 (`hsa_ven_amd_aqlprofile.h`): profile, event, PM4 packet, function table |
//! | [`status`] | [`Status`] with official names, [`check`] and [`HsaResult`] |
//!
//! Every struct has compile-time size and offset assertions beside it; the test
//! `tests/header_layout.rs` compiles a C++ probe against Debian's `libhsa-runtime-dev` headers
//! and compares every mirrored size, field offset, table slot and enum value with this crate.
//!
//! The AMD extension table changed layout under the same major version (ROCm 5.6 inserted two
//! slots), so its slots are only reachable through [`slots::amd_ext`], which picks the offset
//! from the table's own header and refuses layouts it does not know:
//!
//! ```
//! use rocprof_replay_sys::{slots, AmdExtTable52, ApiTableVersion, TableError};
//!
//! let mut old: AmdExtTable52 = unsafe { core::mem::zeroed() };
//! old.version = ApiTableVersion { major_id: 1, minor_id: 400, step_id: 0, reserved: 0 };
//! let hdr = &old.version as *const ApiTableVersion;
//! // SAFETY: `hdr` starts a live 400-byte table.
//! assert_eq!(slots::amd_ext::POINTER_INFO.offset_for(unsafe { *hdr }), Ok(224));
//! // vmem functions do not exist in the 5.2 layout:
//! assert!(matches!(
//!     slots::amd_ext::VMEM_MAP.offset_for(unsafe { *hdr }),
//!     Err(TableError::SlotAbsent { .. })
//! ));
//! ```
#![no_std]
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

mod layout;

pub mod aqlprofile;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod cupti_profiler;
pub mod enums;
pub mod fns;
pub mod packets;
pub mod queue;
pub mod signal;
pub mod slots;
pub mod status;
pub mod table;
pub mod types;

pub use aqlprofile::*;
pub use enums::*;
pub use fns::*;
pub use packets::*;
pub use queue::*;
pub use signal::*;
pub use slots::{Layout, Slot, SlotInfo, TableError, TableKind};
pub use status::*;
pub use table::*;
pub use types::*;
