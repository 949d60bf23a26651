//! The HSA backend's counter source: the AQL profile extension (`HSA_EXTENSION_AMD_AQLPROFILE`,
//! v1 table of `hsa_ven_amd_aqlprofile.h`), turned into the engine's vendor-neutral
//! [`CounterCatalog`].
//!
//! The backend gets the table once at `OnLoad` ([`AqlProfile::of_runtime`], through the saved
//! core table's `hsa_system_get_major_extension_table`), builds one catalog per GPU agent for
//! the policy's `on_agent`, prepares one [`PassProfile`] per counter pass of a dispatch's metric
//! set ([`AqlProfile::prepare_set`], buffers in the host pool the snapshot uses) and places its
//! start and stop packets around that pass's dispatch on the application's queue.
//!
//! [`AqlProfile::prepare`] builds one pass's [`PassProfile`] (buffers sized by the library,
//! start and stop packets ready to submit) and [`AqlProfile::values`] reads it after the stop
//! packet completed, summing each event's samples.
//!
//! The catalog holds the gfx90a counters of [`GFX90A`] that the agent's library accepts
//! (`validate_event`), with each block's counters per pass from `get_info(BLOCK_COUNTERS)`. On
//! ROCr that is `libhsa-amd-aqlprofile64.so` and most of the list; on hsa-emu only the counters
//! it emulates (its README lists them), so a metric set naming another one fails at set-up with
//! the closest emulated names.

use std::ffi::c_void;

use rocprof_replay_sys::*;

use crate::counters::{CounterCatalog, MetricSet};

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

/// The block of a `CounterCatalog` block name.
fn block_of(name: &str) -> Option<hsa_ven_amd_aqlprofile_block_name_t> {
    [GRBM, SQ, SPI, TCC]
        .into_iter()
        .find(|b| block_name(*b) == name)
}

/// Counter buffers in a host pool every GPU may access (the pool snapshots use), allocated
/// and freed with the runtime's original functions.
pub(crate) struct HostPoolMemory {
    pub(crate) orig: super::Originals,
    pub(crate) pool: hsa_amd_memory_pool_t,
    pub(crate) agent: hsa_agent_t,
}

impl CounterMemory for HostPoolMemory {
    fn allocate(&self, bytes: usize) -> Option<*mut c_void> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: allocating from a host pool with the original allocator (not recorded in
        // the inventory: the counters' buffers are never part of a snapshot).
        let st = unsafe { (self.orig.pool_allocate)(self.pool, bytes.max(64), 0, &mut p) };
        if st != HSA_STATUS_SUCCESS || p.is_null() {
            return None;
        }
        // SAFETY: a live allocation of ours and a GPU agent of the runtime.
        let st = unsafe { (self.orig.agents_allow_access)(1, &self.agent, std::ptr::null(), p) };
        if st != HSA_STATUS_SUCCESS {
            self.free(p);
            return None;
        }
        // SAFETY: `bytes` writable bytes of ours; the library expects zeroed buffers.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        Some(p)
    }
    fn free(&self, ptr: *mut c_void) {
        // SAFETY: allocated above, no longer used by any packet (the pass completed).
        unsafe { (self.orig.pool_free)(ptr) };
    }
}

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
    /// The library refused a profile (`start`), with its error string.
    #[error("aqlprofile refused the pass's counters ({status}): {why}")]
    Refused {
        /// What `start` returned.
        status: Status,
        /// The library's error string.
        why: String,
    },
    /// The backend could not allocate a profile's buffers.
    #[error("no memory for a counter profile's buffers ({0} bytes)")]
    NoMemory(usize),
}

/// Where a pass's command and output buffers live (the backend allocates them in host memory
/// the GPU can read and write; tests in plain host memory).
pub(crate) trait CounterMemory: Send + Sync {
    /// `bytes` bytes, or `None`.
    fn allocate(&self, bytes: usize) -> Option<*mut c_void>;
    /// Frees what `allocate` returned.
    fn free(&self, ptr: *mut c_void);
}

/// One pass's counter configuration: a profile with its buffers and the start and stop packets
/// to place around the pass (vendor-specific, barrier bit, system scope, no completion signal;
/// the window sets one where it waits). Frees its buffers when dropped.
pub(crate) struct PassProfile {
    /// The profile's events (the profile points into this heap array).
    events: Box<[hsa_ven_amd_aqlprofile_event_t]>,
    profile: hsa_ven_amd_aqlprofile_profile_t,
    memory: std::sync::Arc<dyn CounterMemory>,
    /// Submit before the pass's dispatch.
    pub(crate) start: hsa_ext_amd_aql_pm4_packet_t,
    /// Submit after it; the values are readable once it completed.
    pub(crate) stop: hsa_ext_amd_aql_pm4_packet_t,
}

// SAFETY: the raw pointers in `profile` point into `events` and the buffers this object owns;
// nothing else holds them.
unsafe impl Send for PassProfile {}

impl Drop for PassProfile {
    fn drop(&mut self) {
        self.memory.free(self.profile.command_buffer.ptr);
        self.memory.free(self.profile.output_buffer.ptr);
    }
}

impl PassProfile {
    /// The events, in the order asked.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn events(&self) -> &[hsa_ven_amd_aqlprofile_event_t] {
        &self.events
    }
}

/// The packet header of counter packets.
const PM4_HEADER: u16 = packet_header(
    HSA_PACKET_TYPE_VENDOR_SPECIFIC,
    true,
    HSA_FENCE_SCOPE_SYSTEM,
    HSA_FENCE_SCOPE_SYSTEM,
);

/// The extension's v1 table, loaded once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AqlProfile {
    validate_event: hsa_ven_amd_aqlprofile_validate_event_fn_t,
    get_info: hsa_ven_amd_aqlprofile_get_info_fn_t,
    start: hsa_ven_amd_aqlprofile_start_fn_t,
    stop: hsa_ven_amd_aqlprofile_stop_fn_t,
    iterate_data: hsa_ven_amd_aqlprofile_iterate_data_fn_t,
    error_string: Option<hsa_ven_amd_aqlprofile_error_string_fn_t>,
}

impl AqlProfile {
    /// The runtime's extension table, or why it has none (as the policy sees it).
    pub(crate) fn of_runtime(orig: &super::Originals) -> Result<AqlProfile, String> {
        let get = orig.get_extension_table.ok_or_else(|| {
            "the runtime's table has no hsa_system_get_major_extension_table".to_owned()
        })?;
        // SAFETY: the runtime's own function, saved from its table.
        unsafe { AqlProfile::load(get) }.map_err(|e| e.to_string())
    }

    /// One profile per pass of `set` on `agent`, its metrics in [`MetricSet::pass`] order.
    pub(crate) fn prepare_set(
        &self,
        agent: hsa_agent_t,
        set: &MetricSet,
        memory: std::sync::Arc<dyn CounterMemory>,
    ) -> Result<Vec<PassProfile>, CounterSourceError> {
        (0..set.pass_count())
            .map(|p| {
                let events: Vec<hsa_ven_amd_aqlprofile_event_t> = set
                    .pass(p)
                    .map(|m| hsa_ven_amd_aqlprofile_event_t {
                        block_name: block_of(&m.counter.block).unwrap_or(u32::MAX),
                        block_index: 0,
                        counter_id: m.counter.event,
                    })
                    .collect();
                self.prepare(agent, &events, memory.clone())
            })
            .collect()
    }

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
            start: t
                .hsa_ven_amd_aqlprofile_start
                .ok_or(CounterSourceError::Incomplete("start"))?,
            stop: t
                .hsa_ven_amd_aqlprofile_stop
                .ok_or(CounterSourceError::Incomplete("stop"))?,
            iterate_data: t
                .hsa_ven_amd_aqlprofile_iterate_data
                .ok_or(CounterSourceError::Incomplete("iterate_data"))?,
            error_string: t.hsa_ven_amd_aqlprofile_error_string,
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

    /// The library's error string for the last failure (empty without one).
    fn last_error(&self) -> String {
        let Some(f) = self.error_string else {
            return String::new();
        };
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the library's function with a valid out-pointer.
        if unsafe { f(&mut p) } != HSA_STATUS_SUCCESS || p.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string of the library, read before any other call.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    /// Builds one pass's profile for `events` on `agent`: asks `start` for the buffer sizes,
    /// allocates them from `memory`, and fills the start and stop packets. A set over a block's
    /// limit (or with an event the agent lacks) is [`CounterSourceError::Refused`] with the
    /// library's reason.
    pub(crate) fn prepare(
        &self,
        agent: hsa_agent_t,
        events: &[hsa_ven_amd_aqlprofile_event_t],
        memory: std::sync::Arc<dyn CounterMemory>,
    ) -> Result<PassProfile, CounterSourceError> {
        let events: Box<[hsa_ven_amd_aqlprofile_event_t]> = events.into();
        let empty = hsa_ven_amd_aqlprofile_descriptor_t {
            ptr: std::ptr::null_mut(),
            size: 0,
        };
        let mut profile = hsa_ven_amd_aqlprofile_profile_t {
            agent,
            type_: HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC,
            events: events.as_ptr(),
            event_count: events.len() as u32,
            parameters: std::ptr::null(),
            parameter_count: 0,
            output_buffer: empty,
            command_buffer: empty,
        };
        let mut start = hsa_ext_amd_aql_pm4_packet_t::default();
        let refused = |status| CounterSourceError::Refused {
            status: Status(status),
            why: self.last_error(),
        };
        // Null buffers: `start` only reports the sizes it needs.
        // SAFETY: the library's function with a live profile (events in `events`) and packet.
        let status = unsafe { (self.start)(&mut profile, &mut start) };
        if status != HSA_STATUS_SUCCESS {
            return Err(refused(status));
        }
        let (cmd_size, out_size) = (
            profile.command_buffer.size as usize,
            profile.output_buffer.size as usize,
        );
        let cmd = memory
            .allocate(cmd_size)
            .ok_or(CounterSourceError::NoMemory(cmd_size))?;
        let Some(out) = memory.allocate(out_size) else {
            memory.free(cmd);
            return Err(CounterSourceError::NoMemory(out_size));
        };
        profile.command_buffer.ptr = cmd;
        profile.output_buffer.ptr = out;
        let mut pass = PassProfile {
            events,
            profile,
            memory,
            start,
            stop: hsa_ext_amd_aql_pm4_packet_t::default(),
        };
        // SAFETY: as above, now with the buffers (owned by `pass`, freed on drop).
        let status = unsafe { (self.start)(&mut pass.profile, &mut pass.start) };
        if status != HSA_STATUS_SUCCESS {
            return Err(refused(status));
        }
        // SAFETY: as above.
        let status = unsafe { (self.stop)(&pass.profile, &mut pass.stop) };
        if status != HSA_STATUS_SUCCESS {
            return Err(refused(status));
        }
        for p in [&mut pass.start, &mut pass.stop] {
            p.header = PM4_HEADER;
            p.completion_signal = hsa_signal_t { handle: 0 };
        }
        Ok(pass)
    }

    /// The values of a pass whose stop packet completed: per event, the sum of its samples
    /// (one per shader engine for such blocks on a GPU; one on hsa-emu).
    pub(crate) fn values(&self, pass: &PassProfile) -> Result<Vec<u64>, CounterSourceError> {
        struct Sums<'a> {
            events: &'a [hsa_ven_amd_aqlprofile_event_t],
            sums: Vec<u64>,
        }
        unsafe extern "C" fn add(
            info_type: hsa_ven_amd_aqlprofile_info_type_t,
            info: *mut hsa_ven_amd_aqlprofile_info_data_t,
            data: *mut c_void,
        ) -> hsa_status_t {
            if info_type != HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA || info.is_null() {
                return HSA_STATUS_SUCCESS;
            }
            // SAFETY: `data` is the `Sums` below; `info` a live PMC sample of the library.
            unsafe {
                let s = &mut *data.cast::<Sums<'_>>();
                let pmc = (*info).data.pmc_data;
                if let Some(i) = s.events.iter().position(|e| *e == pmc.event) {
                    s.sums[i] = s.sums[i].wrapping_add(pmc.result);
                }
            }
            HSA_STATUS_SUCCESS
        }
        let mut sums = Sums {
            events: &pass.events,
            sums: vec![0; pass.events.len()],
        };
        // SAFETY: the library's function with the pass's live profile; `sums` outlives it.
        let status = unsafe {
            (self.iterate_data)(&pass.profile, Some(add), (&raw mut sums).cast::<c_void>())
        };
        if status != HSA_STATUS_SUCCESS {
            return Err(CounterSourceError::Call {
                call: "iterate_data",
                status: Status(status),
            });
        }
        Ok(sums.sums)
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
            hsa_ven_amd_aqlprofile_start: Some(start),
            hsa_ven_amd_aqlprofile_stop: Some(stop),
            hsa_ven_amd_aqlprofile_iterate_data: Some(iterate),
            hsa_ven_amd_aqlprofile_error_string: Some(error_string),
            ..Default::default()
        };
        // SAFETY: the backend passes a whole table.
        unsafe { out.cast::<hsa_ven_amd_aqlprofile_1_00_pfn_t>().write(t) };
        HSA_STATUS_SUCCESS
    }

    static ERROR: &std::ffi::CStr = c"Event is out of block counter registers number limit";

    /// Like aqlprofile: null buffers report sizes; more than 2 SQ events are refused.
    unsafe extern "C" fn start(
        p: *mut hsa_ven_amd_aqlprofile_profile_t,
        packet: *mut hsa_ext_amd_aql_pm4_packet_t,
    ) -> hsa_status_t {
        // SAFETY: the backend passes a live profile and packet.
        unsafe {
            let p = &mut *p;
            let events = std::slice::from_raw_parts(p.events, p.event_count as usize);
            if events.iter().filter(|e| e.block_name == SQ).count() > 2 {
                return HSA_STATUS_ERROR;
            }
            if p.command_buffer.ptr.is_null() {
                p.command_buffer.size = 64;
                p.output_buffer.size = 16 * p.event_count; // two samples per event
                return HSA_STATUS_SUCCESS;
            }
            (*packet).pm4_command[0] = 1;
            (*packet).pm4_command[1] = 1; // start
        }
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn stop(
        _p: *const hsa_ven_amd_aqlprofile_profile_t,
        packet: *mut hsa_ext_amd_aql_pm4_packet_t,
    ) -> hsa_status_t {
        // SAFETY: the backend passes a live packet.
        unsafe {
            (*packet).pm4_command[0] = 1;
            (*packet).pm4_command[1] = 2; // stop
        }
        HSA_STATUS_SUCCESS
    }

    /// Two samples per event (as per-shader-engine blocks), from the output buffer.
    unsafe extern "C" fn iterate(
        p: *const hsa_ven_amd_aqlprofile_profile_t,
        cb: hsa_ven_amd_aqlprofile_data_callback_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        // SAFETY: the backend passes a live profile whose output holds 2 u64 per event.
        unsafe {
            let p = &*p;
            let out = p.output_buffer.ptr.cast::<u64>();
            for i in 0..p.event_count as usize {
                for se in 0..2 {
                    let mut info = hsa_ven_amd_aqlprofile_info_data_t {
                        sample_id: se,
                        data: hsa_ven_amd_aqlprofile_info_data_u {
                            pmc_data: hsa_ven_amd_aqlprofile_pmc_data_t {
                                event: *p.events.add(i),
                                result: *out.add(2 * i + se as usize),
                            },
                        },
                    };
                    let st = cb.unwrap()(HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA, &mut info, data);
                    if st != HSA_STATUS_SUCCESS {
                        return st;
                    }
                }
            }
        }
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn error_string(out: *mut *const std::ffi::c_char) -> hsa_status_t {
        // SAFETY: the backend passes a valid out-pointer.
        unsafe { *out = ERROR.as_ptr() };
        HSA_STATUS_SUCCESS
    }

    /// Host memory that counts what is live.
    #[derive(Default)]
    struct HostMemory {
        live: std::sync::Mutex<Vec<(usize, std::alloc::Layout)>>,
    }

    impl CounterMemory for HostMemory {
        fn allocate(&self, bytes: usize) -> Option<*mut c_void> {
            let layout = std::alloc::Layout::from_size_align(bytes.max(8), 64).ok()?;
            // SAFETY: non-zero size.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            self.live.lock().unwrap().push((p as usize, layout));
            Some(p.cast())
        }
        fn free(&self, ptr: *mut c_void) {
            let mut live = self.live.lock().unwrap();
            let i = live.iter().position(|(p, _)| *p == ptr as usize).unwrap();
            let (_, layout) = live.swap_remove(i);
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr.cast(), layout) };
        }
    }

    fn ev(block: u32, counter_id: u32) -> hsa_ven_amd_aqlprofile_event_t {
        hsa_ven_amd_aqlprofile_event_t {
            block_name: block,
            block_index: 0,
            counter_id,
        }
    }

    #[test]
    fn a_pass_profile_has_vendor_packets_its_values_and_frees_its_buffers() {
        // SAFETY: the fake behaves like the runtime's function.
        let aql = unsafe { AqlProfile::load(table) }.unwrap();
        let memory = std::sync::Arc::new(HostMemory::default());
        let events = [ev(SQ, 4), ev(GRBM, 0)];
        let pass = aql
            .prepare(hsa_agent_t { handle: 1 }, &events, memory.clone())
            .unwrap();
        assert_eq!(memory.live.lock().unwrap().len(), 2);
        assert_eq!(pass.events(), &events);
        for (p, op) in [(&pass.start, 1), (&pass.stop, 2)] {
            assert_eq!(header_type(p.header), HSA_PACKET_TYPE_VENDOR_SPECIFIC);
            assert!(header_barrier(p.header));
            assert_eq!(p.completion_signal.handle, 0);
            assert_eq!(p.pm4_command[..2], [1, op]);
        }
        // What the GPU would have written: two samples per event.
        let out = pass.profile.output_buffer.ptr.cast::<u64>();
        // SAFETY: the output buffer holds 4 u64 (16 bytes per event).
        unsafe {
            for (i, v) in [128u64, 128, 7, 0].into_iter().enumerate() {
                *out.add(i) = v;
            }
        }
        assert_eq!(aql.values(&pass).unwrap(), vec![256, 7]);
        drop(pass);
        assert!(memory.live.lock().unwrap().is_empty(), "buffers freed");
    }

    #[test]
    fn a_pass_over_a_block_limit_is_refused_with_the_librarys_reason() {
        // SAFETY: the fake behaves like the runtime's function.
        let aql = unsafe { AqlProfile::load(table) }.unwrap();
        let memory = std::sync::Arc::new(HostMemory::default());
        let err = aql
            .prepare(
                hsa_agent_t { handle: 1 },
                &[ev(SQ, 4), ev(SQ, 6), ev(SQ, 14)],
                memory.clone(),
            )
            .err()
            .unwrap();
        assert_eq!(
            err,
            CounterSourceError::Refused {
                status: Status(HSA_STATUS_ERROR),
                why: "Event is out of block counter registers number limit".into()
            }
        );
        assert!(memory.live.lock().unwrap().is_empty(), "nothing allocated");
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
