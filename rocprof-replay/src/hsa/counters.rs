//! The HSA backend's counter source: the AQL profile extension (`HSA_EXTENSION_AMD_AQLPROFILE`,
//! v1 table of `hsa_ven_amd_aqlprofile.h`), turned into the engine's vendor-neutral
//! [`CounterCatalog`].
//!
//! **Not yet wired into the replay window** (issue 15, item 4 on the backend side): nothing
//! calls [`AqlProfile::load`] yet. When it is, the backend gets the table once through the
//! saved core table's `hsa_system_get_major_extension_table`, builds one catalog per GPU agent,
//! and places the start/stop packets of each pass's profile around that pass.
//!
//! The catalog holds the gfx90a counters of [`GFX90A`] that the agent's library accepts
//! (`validate_event`), with each block's counters per pass from `get_info(BLOCK_COUNTERS)`. On
//! ROCr that is `libhsa-amd-aqlprofile64.so` and most of the list; on hsa-emu only the counters
//! it emulates (its README lists them), so a metric set naming another one fails at set-up with
//! the closest emulated names.
#![cfg_attr(not(test), allow(dead_code))] // not yet wired into the window (above)

use std::ffi::c_void;

use rocprof_replay_sys::*;

use crate::counters::CounterCatalog;

/// A gfx90a counter: vendor name, block and event id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KnownCounter {
    pub(crate) name: &'static str,
    pub(crate) block: hsa_ven_amd_aqlprofile_block_name_t,
    pub(crate) event: u32,
}

const fn known(
    name: &'static str,
    block: hsa_ven_amd_aqlprofile_block_name_t,
    event: u32,
) -> KnownCounter {
    KnownCounter { name, block, event }
}

const GRBM: hsa_ven_amd_aqlprofile_block_name_t = HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_GRBM;
const SQ: hsa_ven_amd_aqlprofile_block_name_t = HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SQ;
const SPI: hsa_ven_amd_aqlprofile_block_name_t = HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SPI;
const TCC: hsa_ven_amd_aqlprofile_block_name_t = HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_TCC;

/// gfx90a counters by name, block and event id, as ROCm's rocprofiler defines them
/// (`ROCm/rocprofiler`, `src/core/counters/metrics/basic_counters.xml`, commit `044c6f8a`,
/// section `gfx90a`): the ones the examples and hsa-emu's emulated set use.
pub(crate) const GFX90A: &[KnownCounter] = &[
    known("GRBM_COUNT", GRBM, 0),
    known("GRBM_GUI_ACTIVE", GRBM, 2),
    known("SQ_WAVES", SQ, 4),
    known("SQ_WAVES_EQ_64", SQ, 6),
    known("SQ_WAVES_LT_64", SQ, 7),
    known("SQ_WAVES_LT_48", SQ, 8),
    known("SQ_WAVES_LT_32", SQ, 9),
    known("SQ_WAVES_LT_16", SQ, 10),
    known("SQ_ITEMS", SQ, 14),
    known("SQ_INSTS", SQ, 25),
    known("SQ_INSTS_VALU", SQ, 26),
    known("SQ_INSTS_SALU", SQ, 56),
    known("SPI_CSN_NUM_THREADGROUPS", SPI, 49),
    known("SPI_CSN_WAVE", SPI, 52),
];

/// Block names as `CounterCatalog` shows them.
fn block_name(block: hsa_ven_amd_aqlprofile_block_name_t) -> &'static str {
    match block {
        GRBM => "GRBM",
        SQ => "SQ",
        SPI => "SPI",
        TCC => "TCC",
        _ => "?",
    }
}

/// Why the counter source is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CounterSourceError {
    /// The runtime has no AQL profile extension (or not version 1).
    #[error("the runtime offers no HSA_EXTENSION_AMD_AQLPROFILE 1.x table ({0})")]
    NoExtension(Status),
    /// The table lacks a function the backend needs.
    #[error("the aqlprofile table has no {0}")]
    Incomplete(&'static str),
    /// A call failed.
    #[error("aqlprofile {call} failed: {status}")]
    Call {
        /// Which function.
        call: &'static str,
        /// What it returned.
        status: Status,
    },
}

/// The extension's v1 table, loaded once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AqlProfile {
    validate_event: hsa_ven_amd_aqlprofile_validate_event_fn_t,
    get_info: hsa_ven_amd_aqlprofile_get_info_fn_t,
}

impl AqlProfile {
    /// Gets the v1 table through `get_table` (the runtime's
    /// `hsa_system_get_major_extension_table`).
    ///
    /// # Safety
    /// `get_table` must be the runtime's function (or behave like it).
    pub(crate) unsafe fn load(
        get_table: hsa_system_get_major_extension_table_fn_t,
    ) -> Result<AqlProfile, CounterSourceError> {
        let mut t = hsa_ven_amd_aqlprofile_1_00_pfn_t::default();
        // SAFETY: `t` is a whole v1 table of the size passed (caller contract on `get_table`).
        let status = unsafe {
            get_table(
                HSA_EXTENSION_AMD_AQLPROFILE as u16,
                hsa_ven_amd_aqlprofile_VERSION_MAJOR,
                size_of::<hsa_ven_amd_aqlprofile_1_00_pfn_t>(),
                (&raw mut t).cast::<c_void>(),
            )
        };
        if status != HSA_STATUS_SUCCESS {
            return Err(CounterSourceError::NoExtension(Status(status)));
        }
        Ok(AqlProfile {
            validate_event: t
                .hsa_ven_amd_aqlprofile_validate_event
                .ok_or(CounterSourceError::Incomplete("validate_event"))?,
            get_info: t
                .hsa_ven_amd_aqlprofile_get_info
                .ok_or(CounterSourceError::Incomplete("get_info"))?,
        })
    }

    /// The counters of [`GFX90A`] that `agent` accepts, and each of their blocks' counters per
    /// pass, as a catalog named `agent_name`.
    pub(crate) fn catalog(
        &self,
        agent: hsa_agent_t,
        agent_name: &str,
    ) -> Result<CounterCatalog, CounterSourceError> {
        let mut catalog = CounterCatalog::new(agent_name);
        let mut blocks: Vec<hsa_ven_amd_aqlprofile_block_name_t> = Vec::new();
        for k in GFX90A {
            let event = hsa_ven_amd_aqlprofile_event_t {
                block_name: k.block,
                block_index: 0,
                counter_id: k.event,
            };
            let mut valid = false;
            // SAFETY: the library's function with a live event and out-pointer.
            let status = unsafe { (self.validate_event)(agent, &event, &mut valid) };
            if status != HSA_STATUS_SUCCESS {
                return Err(CounterSourceError::Call {
                    call: "validate_event",
                    status: Status(status),
                });
            }
            if valid {
                catalog = catalog.counter(k.name, block_name(k.block), k.event);
                if !blocks.contains(&k.block) {
                    blocks.push(k.block);
                }
            }
        }
        for block in blocks {
            let event = hsa_ven_amd_aqlprofile_event_t {
                block_name: block,
                block_index: 0,
                counter_id: 0,
            };
            let profile = hsa_ven_amd_aqlprofile_profile_t {
                agent,
                type_: HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC,
                events: &event,
                event_count: 1,
                parameters: std::ptr::null(),
                parameter_count: 0,
                output_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
                    ptr: std::ptr::null_mut(),
                    size: 0,
                },
                command_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
                    ptr: std::ptr::null_mut(),
                    size: 0,
                },
            };
            let mut per_pass = 0u32;
            // SAFETY: the library's function with a live profile and a u32 out-value.
            let status = unsafe {
                (self.get_info)(
                    &profile,
                    HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_COUNTERS,
                    (&raw mut per_pass).cast(),
                )
            };
            if status != HSA_STATUS_SUCCESS {
                return Err(CounterSourceError::Call {
                    call: "get_info(BLOCK_COUNTERS)",
                    status: Status(status),
                });
            }
            catalog = catalog.block(block_name(block), per_pass);
        }
        Ok(catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{MetricError, MetricSet};

    /// A fake library that accepts what hsa-emu emulates of [`GFX90A`] (not `SQ_INSTS*`), with
    /// SQ 2 and GRBM 2 and SPI 2 counters per pass.
    unsafe extern "C" fn validate(
        _agent: hsa_agent_t,
        e: *const hsa_ven_amd_aqlprofile_event_t,
        ok: *mut bool,
    ) -> hsa_status_t {
        // SAFETY: the backend passes live pointers.
        unsafe {
            let e = *e;
            *ok = !(e.block_name == SQ && matches!(e.counter_id, 25 | 26 | 56));
        }
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn get_info(
        p: *const hsa_ven_amd_aqlprofile_profile_t,
        attribute: hsa_ven_amd_aqlprofile_info_type_t,
        value: *mut c_void,
    ) -> hsa_status_t {
        assert_eq!(attribute, HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_COUNTERS);
        // SAFETY: the backend passes a profile with one event and a u32 out-value.
        unsafe {
            match (*(*p).events).block_name {
                GRBM | SQ | SPI => *value.cast::<u32>() = 2,
                _ => return HSA_STATUS_ERROR,
            }
        }
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn table(
        extension: u16,
        major: u16,
        size: usize,
        out: *mut c_void,
    ) -> hsa_status_t {
        if u32::from(extension) != HSA_EXTENSION_AMD_AQLPROFILE || major != 1 {
            return HSA_STATUS_ERROR;
        }
        assert_eq!(size, size_of::<hsa_ven_amd_aqlprofile_1_00_pfn_t>());
        let t = hsa_ven_amd_aqlprofile_1_00_pfn_t {
            hsa_ven_amd_aqlprofile_validate_event: Some(validate),
            hsa_ven_amd_aqlprofile_get_info: Some(get_info),
            ..Default::default()
        };
        // SAFETY: the backend passes a whole table.
        unsafe { out.cast::<hsa_ven_amd_aqlprofile_1_00_pfn_t>().write(t) };
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn no_table(_: u16, _: u16, _: usize, _: *mut c_void) -> hsa_status_t {
        HSA_STATUS_ERROR
    }

    unsafe extern "C" fn empty_table(_: u16, _: u16, _: usize, _: *mut c_void) -> hsa_status_t {
        HSA_STATUS_SUCCESS
    }

    #[test]
    fn the_catalog_holds_what_the_library_accepts_with_its_limits() {
        // SAFETY: the fake behaves like the runtime's function.
        let aql = unsafe { AqlProfile::load(table) }.unwrap();
        let catalog = aql.catalog(hsa_agent_t { handle: 1 }, "gfx90a").unwrap();
        assert!(catalog.get("SQ_WAVES").is_some());
        assert_eq!(catalog.get("SPI_CSN_WAVE").unwrap().event, 52);
        assert!(
            catalog.get("SQ_INSTS_VALU").is_none(),
            "refused by validate_event"
        );
        assert_eq!(catalog.per_pass("SQ"), 2);
        assert_eq!(catalog.per_pass("GRBM"), 2);
        let set = MetricSet::new(
            &catalog,
            ["SQ_WAVES", "SQ_ITEMS", "SQ_WAVES_EQ_64", "GRBM_COUNT"],
        )
        .unwrap();
        assert_eq!(set.pass_count(), 2);
        let err = MetricSet::new(&catalog, ["SQ_INSTS_VALU"]).unwrap_err();
        assert!(matches!(err, MetricError::Unknown { .. }), "{err}");
    }

    #[test]
    fn a_runtime_without_the_extension_is_an_error_value() {
        // SAFETY: the fakes behave like the runtime's function.
        unsafe {
            assert_eq!(
                AqlProfile::load(no_table).unwrap_err(),
                CounterSourceError::NoExtension(Status(HSA_STATUS_ERROR))
            );
            assert_eq!(
                AqlProfile::load(empty_table).unwrap_err(),
                CounterSourceError::Incomplete("validate_event")
            );
        }
    }
}
