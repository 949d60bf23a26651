//! The AMD AQL profile extension (`HSA_EXTENSION_AMD_AQLPROFILE`, v1 function table of
//! `hsa_ven_amd_aqlprofile.h`) with *emulated* hardware counters.
//!
//! On ROCr the table comes from `libhsa-amd-aqlprofile64.so`, whose start/stop packets carry PM4
//! commands that program the GPU's performance counters. Here the same API fills the same
//! packets with commands of this emulator's own (below), which the queue's packet processor
//! (`queues::processor`) honours: counting starts when the start packet is processed and stops
//! at the stop packet, for the kernel dispatches that queue processes in between.
//!
//! ## Emulated counters (gfx90a names and ids)
//!
//! Names, blocks and event ids are those of ROCm's rocprofiler counter definitions for gfx90a
//! (`ROCm/rocprofiler`, `src/core/counters/metrics/basic_counters.xml`, commit `044c6f8a`).
//! Only counters whose value a CPU emulator knows exactly are offered; every other event is
//! invalid (`validate_event` says false, `start` refuses it), never a silent zero.
//!
//! | counter | block | event | value here |
//! |---|---|---|---|
//! | `GRBM_COUNT` | GRBM | 0 | emulated clocks from the start packet to the stop (or read) packet |
//! | `GRBM_GUI_ACTIVE` | GRBM | 2 | emulated clocks while a dispatch ran (sum of dispatch durations) |
//! | `SQ_WAVES` | SQ | 4 | waves launched: `ceil(items of the group / 64)` per work-group (wave64) |
//! | `SQ_WAVES_EQ_64` | SQ | 6 | waves with exactly 64 active work-items |
//! | `SQ_WAVES_LT_64` / `_LT_48` / `_LT_32` / `_LT_16` | SQ | 7 / 8 / 9 / 10 | waves with fewer than 64 / 48 / 32 / 16 |
//! | `SQ_ITEMS` | SQ | 14 | work-items launched |
//! | `SPI_CSN_NUM_THREADGROUPS` | SPI | 49 | work-groups launched |
//! | `SPI_CSN_WAVE` | SPI | 52 | waves launched (as `SQ_WAVES`) |
//!
//! A work-group's items are packed into waves of 64 in flattened (x fastest) order, so a group of
//! `n` items has `n / 64` full waves and one partial wave of `n % 64` items when that is not zero;
//! partial work-groups at the grid's edge count their real size. Clocks are emulated at
//! [`EMULATED_CLOCK_HZ`] (1700 MHz, an MI250X's peak engine clock) from host time
//! (`CLOCK_MONOTONIC`): they say how long the host took, not how long a GPU would.
//!
//! Per-block limits (counters one profile may hold): [`BLOCKS`] — GRBM 2, SQ 2, SPI 2, small
//! enough that realistic sets need several passes. A profile over a limit is refused by `start`
//! with `HSA_STATUS_ERROR` and the error string `Event is out of block counter registers number
//! limit` (what ROCm's aqlprofile returns, `src/core/aql_profile.cpp`); `get_info(BLOCK_COUNTERS)`
//! reports the limit of `events[0]`'s block.
//!
//! Results: one sample per event (`sample_id` 0), the whole device's value (real per-shader-engine
//! blocks report one sample per SE; tools sum them, so the sum is the same).
//!
//! ## Encoding
//!
//! Command buffer (caller-allocated, `get_info(COMMAND_BUFFER_SIZE)` bytes, written by `start`):
//! `u32 magic "HEPB"`, `u32 version 1`, `u32 event_count`, `u32 output_size`, `u64 output_ptr`,
//! `u64 agent`, then `event_count` events of 12 bytes (`hsa_ven_amd_aqlprofile_event_t`).
//! Output buffer (`get_info(PMC_DATA_SIZE)` bytes): one little-endian `u64` per event, in event
//! order, zeroed by the start packet, written by the stop and read packets.
//!
//! Packets (`hsa_ext_amd_aql_pm4_packet_t`; `start`/`stop`/`read` set `pm4_command` only, the
//! caller sets the header `HSA_PACKET_TYPE_VENDOR_SPECIFIC` and the completion signal), laid out
//! like ROCr's `amd_aql_pm4_ib` packet: bytes 2..4 `AMD_AQL_FORMAT_PM4_IB` (1), 4..8 magic
//! `"HEPK"` (where a real packet has an `INDIRECT_BUFFER` PM4 header), 8..16 the command
//! buffer's address (low, high), 16..20 its size, 20..24 `dw_cnt_remain` 0xA, 24..28 the
//! operation (1 start, 2 stop, 3 read), the rest zero.
//!
//! Not emulated: thread traces (`HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_TRACE`), `ENABLE_CMD` /
//! `DISABLE_CMD`, and `legacy_get_pm4` (gfx8 only; the emulated agent is gfx90a): each returns
//! `HSA_STATUS_ERROR` with an error string saying so.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_void};

use rocprof_replay_sys::*;

use crate::ffi::guard_status;
use crate::topology::{DeviceKind, topology};

/// The emulated engine clock of `GRBM_COUNT` and `GRBM_GUI_ACTIVE`.
pub(crate) const EMULATED_CLOCK_HZ: u64 = 1_700_000_000;

/// What one emulated counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counter {
    GrbmCount,
    GrbmGuiActive,
    SqWaves,
    SqWavesEq64,
    SqWavesLt64,
    SqWavesLt48,
    SqWavesLt32,
    SqWavesLt16,
    SqItems,
    SpiWorkgroups,
    SpiWaves,
}

/// One emulated counter: its gfx90a name, block and event id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CounterDef {
    pub(crate) name: &'static str,
    pub(crate) block: hsa_ven_amd_aqlprofile_block_name_t,
    pub(crate) event: u32,
    pub(crate) counter: Counter,
}

const GRBM: hsa_ven_amd_aqlprofile_block_name_t = HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_GRBM;
const SQ: hsa_ven_amd_aqlprofile_block_name_t = HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SQ;
const SPI: hsa_ven_amd_aqlprofile_block_name_t = HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SPI;

/// Every emulated counter.
pub(crate) const COUNTERS: &[CounterDef] = &[
    CounterDef {
        name: "GRBM_COUNT",
        block: GRBM,
        event: 0,
        counter: Counter::GrbmCount,
    },
    CounterDef {
        name: "GRBM_GUI_ACTIVE",
        block: GRBM,
        event: 2,
        counter: Counter::GrbmGuiActive,
    },
    CounterDef {
        name: "SQ_WAVES",
        block: SQ,
        event: 4,
        counter: Counter::SqWaves,
    },
    CounterDef {
        name: "SQ_WAVES_EQ_64",
        block: SQ,
        event: 6,
        counter: Counter::SqWavesEq64,
    },
    CounterDef {
        name: "SQ_WAVES_LT_64",
        block: SQ,
        event: 7,
        counter: Counter::SqWavesLt64,
    },
    CounterDef {
        name: "SQ_WAVES_LT_48",
        block: SQ,
        event: 8,
        counter: Counter::SqWavesLt48,
    },
    CounterDef {
        name: "SQ_WAVES_LT_32",
        block: SQ,
        event: 9,
        counter: Counter::SqWavesLt32,
    },
    CounterDef {
        name: "SQ_WAVES_LT_16",
        block: SQ,
        event: 10,
        counter: Counter::SqWavesLt16,
    },
    CounterDef {
        name: "SQ_ITEMS",
        block: SQ,
        event: 14,
        counter: Counter::SqItems,
    },
    CounterDef {
        name: "SPI_CSN_NUM_THREADGROUPS",
        block: SPI,
        event: 49,
        counter: Counter::SpiWorkgroups,
    },
    CounterDef {
        name: "SPI_CSN_WAVE",
        block: SPI,
        event: 52,
        counter: Counter::SpiWaves,
    },
];

/// One emulated block: its name (as `get_info(BLOCK_ID)` takes it), id and per-profile limit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockDef {
    pub(crate) name: &'static CStr,
    pub(crate) block: hsa_ven_amd_aqlprofile_block_name_t,
    pub(crate) limit: u32,
}

/// The emulated blocks, each with one instance, and how many counters a profile may use of each.
pub(crate) const BLOCKS: &[BlockDef] = &[
    BlockDef {
        name: c"GRBM",
        block: GRBM,
        limit: 2,
    },
    BlockDef {
        name: c"SQ",
        block: SQ,
        limit: 2,
    },
    BlockDef {
        name: c"SPI",
        block: SPI,
        limit: 2,
    },
];

/// The error string of real aqlprofile for a profile over a block's limit.
const OVER_LIMIT: &str = "Event is out of block counter registers number limit";

const BUFFER_MAGIC: u32 = u32::from_le_bytes(*b"HEPB");
const PACKET_MAGIC: u32 = u32::from_le_bytes(*b"HEPK");
const BUFFER_VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
const EVENT_BYTES: usize = size_of::<hsa_ven_amd_aqlprofile_event_t>();
/// Most events one profile may hold (the sum of the block limits).
const MAX_EVENTS: usize = 6;

/// What a packet asks the processor to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Op {
    Start = 1,
    Stop = 2,
    Read = 3,
}

/// The emulated counter behind an event, if any (block instance 0 only).
pub(crate) fn counter_of(e: &hsa_ven_amd_aqlprofile_event_t) -> Option<&'static CounterDef> {
    if e.block_index != 0 {
        return None;
    }
    COUNTERS
        .iter()
        .find(|c| c.block == e.block_name && c.event == e.counter_id)
}

fn block_def(block: hsa_ven_amd_aqlprofile_block_name_t) -> Option<&'static BlockDef> {
    BLOCKS.iter().find(|b| b.block == block)
}

/// Checks a list of events: every one emulated, no block over its limit.
fn check_events(events: &[hsa_ven_amd_aqlprofile_event_t]) -> Result<Vec<Counter>, String> {
    if events.is_empty() {
        return Err("the profile has no events".into());
    }
    let mut used = [0u32; BLOCKS.len()];
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let Some(def) = counter_of(e) else {
            return Err(format!(
                "event (block {}, instance {}, counter {}) is not a counter hsa-emu emulates",
                e.block_name, e.block_index, e.counter_id
            ));
        };
        let i = BLOCKS
            .iter()
            .position(|b| b.block == def.block)
            .expect("every counter's block is listed");
        used[i] += 1;
        if used[i] > BLOCKS[i].limit {
            return Err(format!(
                "{OVER_LIMIT}, block {} holds {} counters per pass ({} asked)",
                BLOCKS[i].name.to_str().unwrap_or("?"),
                BLOCKS[i].limit,
                def.name
            ));
        }
        out.push(def.counter);
    }
    Ok(out)
}

fn command_bytes(events: usize) -> u32 {
    (HEADER_BYTES + EVENT_BYTES * events).next_multiple_of(64) as u32
}

fn output_bytes(events: usize) -> u32 {
    (8 * events.max(1)) as u32
}

// ---- the error string -------------------------------------------------------------------

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `why` as this thread's error string and returns `status`.
fn fail(status: hsa_status_t, why: impl Into<String>) -> hsa_status_t {
    let s = CString::new(why.into().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = s);
    status
}

// ---- memory helpers ---------------------------------------------------------------------

/// Whether every page of `[addr, addr + len)` is mapped.
fn mapped(addr: u64, len: usize) -> bool {
    if addr == 0 {
        return false;
    }
    let page = crate::topology::GRANULE as u64;
    let Some(end) = addr.checked_add(len.max(1) as u64) else {
        return false;
    };
    let mut p = addr & !(page - 1);
    while p < end {
        let mut vec = 0u8;
        // SAFETY: mincore only inspects the mapping of [p, p + 1) and writes one byte.
        if unsafe { libc::mincore(p as *mut c_void, 1, &mut vec) } != 0 {
            return false;
        }
        p += page;
    }
    true
}

/// Reads the events of a profile (`events`/`event_count`).
///
/// # Safety
/// `profile.events` must be null or point to `event_count` events.
unsafe fn profile_events(
    profile: &hsa_ven_amd_aqlprofile_profile_t,
) -> Result<Vec<hsa_ven_amd_aqlprofile_event_t>, hsa_status_t> {
    let n = profile.event_count as usize;
    if n == 0 {
        return Ok(Vec::new());
    }
    if profile.events.is_null() {
        return Err(fail(
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            "the profile's events pointer is null",
        ));
    }
    if n > 1024 {
        return Err(fail(
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            format!("the profile has {n} events"),
        ));
    }
    // SAFETY: caller contract; events are plain integers.
    Ok(unsafe { std::slice::from_raw_parts(profile.events, n) }.to_vec())
}

fn gpu_agent(agent: hsa_agent_t) -> bool {
    topology()
        .agent(agent)
        .is_some_and(|a| a.kind == DeviceKind::Gpu)
}

// ---- packets ----------------------------------------------------------------------------

/// The `pm4_command` words of a packet for `op` on a command buffer.
fn encode(op: Op, command: u64, size: u32) -> [u16; 27] {
    let mut b = [0u8; 54];
    b[0..2].copy_from_slice(&AMD_AQL_FORMAT_PM4_IB.to_le_bytes());
    b[2..6].copy_from_slice(&PACKET_MAGIC.to_le_bytes());
    b[6..14].copy_from_slice(&command.to_le_bytes());
    b[14..18].copy_from_slice(&size.to_le_bytes());
    b[18..22].copy_from_slice(&0xAu32.to_le_bytes());
    b[22..26].copy_from_slice(&(op as u32).to_le_bytes());
    let mut words = [0u16; 27];
    for (i, w) in words.iter_mut().enumerate() {
        *w = u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
    }
    words
}

/// A decoded counter packet (offsets into the 64-byte AQL packet).
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    op: Op,
    command: u64,
    size: u32,
}

fn u32_at(p: &[u8; 64], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes a vendor-specific packet: `None` if it is not one of this module's packets.
fn decode(p: &[u8; 64]) -> Option<Result<Decoded, &'static str>> {
    let format = u16::from_le_bytes([p[2], p[3]]);
    if format != AMD_AQL_FORMAT_PM4_IB || u32_at(p, 4) != PACKET_MAGIC {
        return None;
    }
    let command = u64::from(u32_at(p, 8)) | (u64::from(u32_at(p, 12)) << 32);
    let size = u32_at(p, 16);
    let op = match u32_at(p, 24) {
        1 => Op::Start,
        2 => Op::Stop,
        3 => Op::Read,
        _ => return Some(Err("a counter packet has an unknown operation")),
    };
    Some(Ok(Decoded { op, command, size }))
}

/// For `HSA_EMU_TRACE_PACKETS`: `AQLPROFILE start command=0x...` for this module's packets.
pub(crate) fn describe(p: &aql_packet_t) -> Option<String> {
    match decode(&p.bytes)? {
        Ok(d) => Some(format!(
            "AQLPROFILE {} command={:#x} size={}",
            match d.op {
                Op::Start => "start",
                Op::Stop => "stop",
                Op::Read => "read",
            },
            d.command,
            d.size
        )),
        Err(why) => Some(format!("AQLPROFILE malformed: {why}")),
    }
}

/// Whether a vendor-specific packet carries PM4 commands (`AMD_AQL_FORMAT_PM4_IB`).
pub(crate) fn is_pm4(p: &aql_packet_t) -> bool {
    u16::from_le_bytes([p.bytes[2], p.bytes[3]]) == AMD_AQL_FORMAT_PM4_IB
}

// ---- what the packet processor keeps per queue --------------------------------------------

/// What the dispatches of a counting window launched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Launched {
    pub(crate) workgroups: u64,
    pub(crate) waves: u64,
    pub(crate) waves_eq_64: u64,
    pub(crate) waves_lt_64: u64,
    pub(crate) waves_lt_48: u64,
    pub(crate) waves_lt_32: u64,
    pub(crate) waves_lt_16: u64,
    pub(crate) items: u64,
}

impl Launched {
    /// What a dispatch of `grid` work-items in groups of `workgroup` launches (unused
    /// dimensions 1): each group's items packed into waves of 64.
    pub(crate) fn of_dispatch(grid: [u32; 3], workgroup: [u32; 3]) -> Launched {
        // Per dimension: (number of full groups, their size), (0 or 1 partial group, its size).
        let pieces = [0, 1, 2].map(|d| {
            let (g, w) = (u64::from(grid[d]), u64::from(workgroup[d].max(1)));
            [(g / w, w), (u64::from(g % w != 0), g % w)]
        });
        let mut l = Launched::default();
        for &(cx, sx) in &pieces[0] {
            for &(cy, sy) in &pieces[1] {
                for &(cz, sz) in &pieces[2] {
                    let groups = cx * cy * cz;
                    let n = sx * sy * sz;
                    if groups == 0 || n == 0 {
                        continue;
                    }
                    let full = n / 64;
                    let rest = n % 64;
                    l.workgroups += groups;
                    l.items += groups * n;
                    l.waves += groups * n.div_ceil(64);
                    l.waves_eq_64 += groups * full;
                    if rest > 0 {
                        l.waves_lt_64 += groups;
                        l.waves_lt_48 += groups * u64::from(rest < 48);
                        l.waves_lt_32 += groups * u64::from(rest < 32);
                        l.waves_lt_16 += groups * u64::from(rest < 16);
                    }
                }
            }
        }
        l
    }

    fn add(&mut self, o: &Launched) {
        self.workgroups += o.workgroups;
        self.waves += o.waves;
        self.waves_eq_64 += o.waves_eq_64;
        self.waves_lt_64 += o.waves_lt_64;
        self.waves_lt_48 += o.waves_lt_48;
        self.waves_lt_32 += o.waves_lt_32;
        self.waves_lt_16 += o.waves_lt_16;
        self.items += o.items;
    }
}

/// Emulated clocks in `ticks` nanoseconds.
fn clocks(ticks: u64) -> u64 {
    (u128::from(ticks) * u128::from(EMULATED_CLOCK_HZ) / u128::from(crate::clock::TICKS_PER_SECOND))
        as u64
}

/// One counting window: from a start packet to its stop packet.
#[derive(Debug)]
struct Window {
    command: u64,
    counters: Vec<Counter>,
    output: u64,
    started: u64,
    busy_ticks: u64,
    launched: Launched,
}

impl Window {
    fn value(&self, c: Counter, now: u64) -> u64 {
        let l = &self.launched;
        match c {
            Counter::GrbmCount => clocks(now.saturating_sub(self.started)),
            Counter::GrbmGuiActive => clocks(self.busy_ticks),
            Counter::SqWaves | Counter::SpiWaves => l.waves,
            Counter::SqWavesEq64 => l.waves_eq_64,
            Counter::SqWavesLt64 => l.waves_lt_64,
            Counter::SqWavesLt48 => l.waves_lt_48,
            Counter::SqWavesLt32 => l.waves_lt_32,
            Counter::SqWavesLt16 => l.waves_lt_16,
            Counter::SqItems => l.items,
            Counter::SpiWorkgroups => l.workgroups,
        }
    }

    /// Writes every counter's value to the output buffer; `Err` if it is no longer mapped.
    fn write(&self, now: u64) -> Result<(), &'static str> {
        if !mapped(self.output, 8 * self.counters.len()) {
            return Err("a counter packet's output buffer is no longer mapped memory");
        }
        for (i, c) in self.counters.iter().enumerate() {
            let v = self.value(*c, now);
            // SAFETY: the output buffer holds 8 bytes per counter (checked at start) and is
            // mapped (checked above).
            unsafe { (self.output as *mut u64).add(i).write_unaligned(v) };
        }
        Ok(())
    }
}

/// The counting windows open on one queue (kept by its packet processor).
#[derive(Debug, Default)]
pub(crate) struct QueueCounting {
    windows: Vec<Window>,
}

impl QueueCounting {
    /// Whether any window is open (dispatches need timing and accounting).
    pub(crate) fn active(&self) -> bool {
        !self.windows.is_empty()
    }

    /// Accounts one dispatch that ran from `start` to `end` (ticks).
    pub(crate) fn dispatch(&mut self, launched: &Launched, start: u64, end: u64) {
        for w in &mut self.windows {
            w.launched.add(launched);
            w.busy_ticks += end.saturating_sub(start);
        }
    }

    /// Handles a vendor-specific PM4 packet: `Err` names what is wrong with it (reported by the
    /// processor, which completes the packet anyway).
    pub(crate) fn packet(&mut self, p: &aql_packet_t) -> Result<(), &'static str> {
        let d = match decode(&p.bytes) {
            None => return Err("a PM4 packet is not one of hsa-emu's counter packets"),
            Some(d) => d?,
        };
        let now = crate::clock::now_ticks();
        match d.op {
            Op::Start => {
                let w = read_window(d.command, d.size, now)?;
                // SAFETY: mapped and sized at start (read_window checked it).
                unsafe { std::ptr::write_bytes(w.output as *mut u8, 0, 8 * w.counters.len()) };
                self.windows.retain(|o| o.command != d.command);
                self.windows.push(w);
                Ok(())
            }
            Op::Stop | Op::Read => {
                let Some(i) = self.windows.iter().position(|w| w.command == d.command) else {
                    return Err("a counter stop/read packet has no start packet on this queue");
                };
                let written = self.windows[i].write(now);
                if d.op == Op::Stop {
                    self.windows.remove(i);
                }
                written
            }
        }
    }
}

/// Reads and checks a command buffer written by `start`.
fn read_window(command: u64, size: u32, now: u64) -> Result<Window, &'static str> {
    if (size as usize) < HEADER_BYTES || !mapped(command, size as usize) {
        return Err("a counter packet's command buffer is not mapped memory");
    }
    let word = |at: usize| {
        // SAFETY: inside the mapped command buffer (at + 4 <= HEADER_BYTES <= size).
        unsafe { ((command as usize + at) as *const u32).read_unaligned() }
    };
    if word(0) != BUFFER_MAGIC || word(4) != BUFFER_VERSION {
        return Err("a counter packet's command buffer was not written by start");
    }
    let n = word(8) as usize;
    if n == 0 || n > MAX_EVENTS || HEADER_BYTES + n * EVENT_BYTES > size as usize {
        return Err("a counter packet's command buffer is malformed");
    }
    let output_size = word(12) as usize;
    let output = u64::from(word(16)) | (u64::from(word(20)) << 32);
    if output_size < 8 * n || !mapped(output, 8 * n) {
        return Err("a counter packet's output buffer is not mapped memory");
    }
    let events: Vec<_> = (0..n)
        .map(|i| {
            // SAFETY: inside the mapped command buffer (checked above).
            unsafe {
                ((command as usize + HEADER_BYTES + i * EVENT_BYTES)
                    as *const hsa_ven_amd_aqlprofile_event_t)
                    .read_unaligned()
            }
        })
        .collect();
    let counters = check_events(&events).map_err(|_| "a counter packet's events are invalid")?;
    Ok(Window {
        command,
        counters,
        output,
        started: now,
        busy_ticks: 0,
        launched: Launched::default(),
    })
}

// ---- the extension's functions ------------------------------------------------------------

unsafe extern "C" fn version_major() -> u32 {
    HSA_AQLPROFILE_VERSION_MAJOR
}

unsafe extern "C" fn version_minor() -> u32 {
    HSA_AQLPROFILE_VERSION_MINOR
}

/// `error_string`: this thread's last error (valid until its next failing call).
unsafe extern "C" fn error_string(out: *mut *const c_char) -> hsa_status_t {
    guard_status(|| {
        if out.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let p = LAST_ERROR.with(|e| e.borrow().as_ptr());
        // SAFETY: non-null out-pointer (caller contract); the string lives in this thread's
        // slot until the next failure on this thread.
        unsafe { out.write_unaligned(p) };
        HSA_STATUS_SUCCESS
    })
}

/// `validate_event`: whether the event is an emulated counter of a GPU agent.
unsafe extern "C" fn validate_event(
    agent: hsa_agent_t,
    event: *const hsa_ven_amd_aqlprofile_event_t,
    result: *mut bool,
) -> hsa_status_t {
    guard_status(|| {
        if event.is_null() || result.is_null() {
            return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null event or result");
        }
        // SAFETY: non-null out-pointer (caller contract).
        unsafe { result.write_unaligned(false) };
        if !gpu_agent(agent) {
            return fail(HSA_STATUS_ERROR_INVALID_AGENT, "not a GPU agent");
        }
        // SAFETY: non-null pointers (caller contract).
        unsafe {
            let e = event.read_unaligned();
            result.write_unaligned(counter_of(&e).is_some());
        }
        HSA_STATUS_SUCCESS
    })
}

/// `start`: checks the profile, writes the command buffer and fills the start packet; with a
/// null command buffer only reports the sizes needed (in `command_buffer.size` and
/// `output_buffer.size`), as aqlprofile does.
unsafe extern "C" fn start(
    profile: *mut hsa_ven_amd_aqlprofile_profile_t,
    packet: *mut hsa_ext_amd_aql_pm4_packet_t,
) -> hsa_status_t {
    guard_status(|| {
        if profile.is_null() {
            return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null profile");
        }
        // SAFETY: non-null (caller contract: a live profile object).
        let pr = unsafe { &mut *profile };
        if !gpu_agent(pr.agent) {
            return fail(
                HSA_STATUS_ERROR_INVALID_AGENT,
                "the profile's agent is not a GPU",
            );
        }
        if pr.type_ != HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC {
            return fail(
                HSA_STATUS_ERROR,
                "hsa-emu emulates counters (PMC) only, not thread traces",
            );
        }
        // SAFETY: caller contract on `events`.
        let events = match unsafe { profile_events(pr) } {
            Ok(e) => e,
            Err(status) => return status,
        };
        if let Err(why) = check_events(&events) {
            return fail(HSA_STATUS_ERROR, why);
        }
        let cmd_size = command_bytes(events.len());
        let out_size = output_bytes(events.len());
        if pr.command_buffer.ptr.is_null() {
            pr.command_buffer.size = pr.command_buffer.size.max(cmd_size);
            pr.output_buffer.size = pr.output_buffer.size.max(out_size);
            return HSA_STATUS_SUCCESS;
        }
        if crate::faults::faults().profile_start_fails() {
            return fail(
                HSA_STATUS_ERROR_OUT_OF_RESOURCES,
                "hsa-emu fault HSA_EMU_FAIL_PROFILE_START: the profile's counters could not be \
                 reserved",
            );
        }
        if pr.command_buffer.size < cmd_size {
            return fail(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                format!(
                    "the command buffer has {} bytes, {cmd_size} needed",
                    pr.command_buffer.size
                ),
            );
        }
        if pr.output_buffer.ptr.is_null() || pr.output_buffer.size < out_size {
            return fail(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                format!("the output buffer is null or under {out_size} bytes"),
            );
        }
        if packet.is_null() {
            return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null packet");
        }
        let cmd = pr.command_buffer.ptr.cast::<u8>();
        let output = pr.output_buffer.ptr as u64;
        let mut header = [0u8; HEADER_BYTES];
        header[0..4].copy_from_slice(&BUFFER_MAGIC.to_le_bytes());
        header[4..8].copy_from_slice(&BUFFER_VERSION.to_le_bytes());
        header[8..12].copy_from_slice(&(events.len() as u32).to_le_bytes());
        header[12..16].copy_from_slice(&pr.output_buffer.size.to_le_bytes());
        header[16..24].copy_from_slice(&output.to_le_bytes());
        header[24..32].copy_from_slice(&pr.agent.handle.to_le_bytes());
        // SAFETY: the caller's command buffer holds `cmd_size` bytes (checked above); events
        // are plain integers; unaligned writes.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), cmd, HEADER_BYTES);
            for (i, e) in events.iter().enumerate() {
                cmd.add(HEADER_BYTES + i * EVENT_BYTES)
                    .cast::<hsa_ven_amd_aqlprofile_event_t>()
                    .write_unaligned(*e);
            }
            (&raw mut (*packet).pm4_command).write_unaligned(encode(
                Op::Start,
                cmd as u64,
                pr.command_buffer.size,
            ));
        }
        HSA_STATUS_SUCCESS
    })
}

/// `stop` and `read`: fill the packet for a profile that `start` prepared.
///
/// # Safety
/// `profile` and `packet` must be null or valid.
unsafe fn fill(
    op: Op,
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    packet: *mut hsa_ext_amd_aql_pm4_packet_t,
) -> hsa_status_t {
    if profile.is_null() || packet.is_null() {
        return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null profile or packet");
    }
    // SAFETY: non-null (caller contract).
    let pr = unsafe { &*profile };
    let cmd = pr.command_buffer.ptr as u64;
    let size = pr.command_buffer.size;
    let prepared = (size as usize) >= HEADER_BYTES && mapped(cmd, HEADER_BYTES) && {
        // SAFETY: mapped, at least 4 bytes.
        let magic = unsafe { (cmd as *const u32).read_unaligned() };
        magic == BUFFER_MAGIC
    };
    if !prepared {
        return fail(
            HSA_STATUS_ERROR,
            "the profile's command buffer was not prepared by start",
        );
    }
    // SAFETY: non-null packet (caller contract).
    unsafe { (&raw mut (*packet).pm4_command).write_unaligned(encode(op, cmd, size)) };
    HSA_STATUS_SUCCESS
}

unsafe extern "C" fn stop(
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    packet: *mut hsa_ext_amd_aql_pm4_packet_t,
) -> hsa_status_t {
    // SAFETY: the caller's pointers.
    guard_status(|| unsafe { fill(Op::Stop, profile, packet) })
}

unsafe extern "C" fn read(
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    packet: *mut hsa_ext_amd_aql_pm4_packet_t,
) -> hsa_status_t {
    // SAFETY: the caller's pointers.
    guard_status(|| unsafe { fill(Op::Read, profile, packet) })
}

/// `legacy_get_pm4`: gfx8 only; the emulated agent is gfx90a.
unsafe extern "C" fn legacy_get_pm4(
    packet: *const hsa_ext_amd_aql_pm4_packet_t,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        if packet.is_null() || data.is_null() {
            return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null packet or data");
        }
        fail(
            HSA_STATUS_ERROR,
            "legacy (gfx8) PM4 blobs are not emulated: hsa-emu's agent is gfx90a; submit the AQL packet",
        )
    })
}

/// Calls `callback` once per event with its value (`sample_id` 0).
///
/// # Safety
/// `profile` must be valid; its events and output buffer as `start` was given them.
unsafe fn iterate(
    profile: &hsa_ven_amd_aqlprofile_profile_t,
    mut callback: impl FnMut(&mut hsa_ven_amd_aqlprofile_info_data_t) -> hsa_status_t,
) -> hsa_status_t {
    if profile.type_ != HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC {
        return fail(HSA_STATUS_ERROR, "thread traces are not emulated");
    }
    // SAFETY: caller contract.
    let events = match unsafe { profile_events(profile) } {
        Ok(e) => e,
        Err(s) => return s,
    };
    let out = profile.output_buffer.ptr as u64;
    if (profile.output_buffer.size as usize) < 8 * events.len()
        || (!events.is_empty() && !mapped(out, 8 * events.len()))
    {
        return fail(
            HSA_STATUS_ERROR,
            "the profile's output buffer is too small for its events",
        );
    }
    for (i, e) in events.iter().enumerate() {
        // SAFETY: 8 bytes per event, mapped (checked above).
        let result = unsafe { (out as *const u64).add(i).read_unaligned() };
        let mut info = hsa_ven_amd_aqlprofile_info_data_t {
            sample_id: 0,
            data: hsa_ven_amd_aqlprofile_info_data_u {
                pmc_data: hsa_ven_amd_aqlprofile_pmc_data_t { event: *e, result },
            },
        };
        match callback(&mut info) {
            HSA_STATUS_SUCCESS => {}
            HSA_STATUS_INFO_BREAK => return HSA_STATUS_SUCCESS,
            other => return other,
        }
    }
    HSA_STATUS_SUCCESS
}

unsafe extern "C" fn iterate_data(
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    callback: hsa_ven_amd_aqlprofile_data_callback_t,
    data: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(cb) = callback else {
            return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null callback");
        };
        if profile.is_null() {
            return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null profile");
        }
        // SAFETY: non-null profile (caller contract); the application's callback with its
        // own data and a live info record.
        unsafe {
            iterate(&*profile, |info| {
                cb(HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA, info, data)
            })
        }
    })
}

unsafe extern "C" fn get_info(
    profile: *const hsa_ven_amd_aqlprofile_profile_t,
    attribute: hsa_ven_amd_aqlprofile_info_type_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        if profile.is_null() || value.is_null() {
            return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null profile or value");
        }
        // SAFETY: non-null (caller contract).
        let pr = unsafe { &*profile };
        let n = pr.event_count as usize;
        // SAFETY: (all arms) `value` is the caller's buffer for the attribute's type.
        unsafe {
            match attribute {
                HSA_VEN_AMD_AQLPROFILE_INFO_COMMAND_BUFFER_SIZE => {
                    value.cast::<u32>().write_unaligned(command_bytes(n));
                    HSA_STATUS_SUCCESS
                }
                HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA_SIZE => {
                    value.cast::<u32>().write_unaligned(output_bytes(n));
                    HSA_STATUS_SUCCESS
                }
                HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA => {
                    // In: the event and a sample id (UINT32_MAX: the sum of all samples).
                    let want = value.cast::<hsa_ven_amd_aqlprofile_info_data_t>();
                    let mut w = want.read_unaligned();
                    let (event, sample) = (w.data.pmc_data.event, w.sample_id);
                    w.data.pmc_data.result = 0;
                    let status = iterate(pr, |info| {
                        let got = info.data.pmc_data;
                        if got.event != event {
                            return HSA_STATUS_SUCCESS;
                        }
                        if sample == u32::MAX {
                            w.data.pmc_data.result += got.result;
                            HSA_STATUS_SUCCESS
                        } else if sample == info.sample_id {
                            w.data.pmc_data.result = got.result;
                            HSA_STATUS_INFO_BREAK
                        } else {
                            HSA_STATUS_SUCCESS
                        }
                    });
                    want.write_unaligned(w);
                    status
                }
                HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_COUNTERS => {
                    let first = if n == 0 || pr.events.is_null() {
                        None
                    } else {
                        Some(pr.events.read_unaligned())
                    };
                    match first.and_then(|e| block_def(e.block_name)) {
                        Some(b) => {
                            value.cast::<u32>().write_unaligned(b.limit);
                            HSA_STATUS_SUCCESS
                        }
                        None => fail(
                            HSA_STATUS_ERROR,
                            "events[0] names a block hsa-emu does not emulate",
                        ),
                    }
                }
                HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_ID => {
                    let q = value.cast::<hsa_ven_amd_aqlprofile_id_query_t>();
                    let mut query = q.read_unaligned();
                    if query.name.is_null() {
                        return fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "null block name");
                    }
                    let name = CStr::from_ptr(query.name);
                    match BLOCKS.iter().find(|b| b.name == name) {
                        Some(b) => {
                            query.id = b.block;
                            query.instance_count = 1;
                            q.write_unaligned(query);
                            HSA_STATUS_SUCCESS
                        }
                        None => fail(HSA_STATUS_ERROR, "no emulated block has that name"),
                    }
                }
                HSA_VEN_AMD_AQLPROFILE_INFO_TRACE_DATA => {
                    fail(HSA_STATUS_ERROR, "thread traces are not emulated")
                }
                HSA_VEN_AMD_AQLPROFILE_INFO_ENABLE_CMD
                | HSA_VEN_AMD_AQLPROFILE_INFO_DISABLE_CMD => fail(
                    HSA_STATUS_ERROR,
                    "counter enable/disable command buffers are not emulated",
                ),
                _ => fail(HSA_STATUS_ERROR_INVALID_ARGUMENT, "unknown attribute"),
            }
        }
    })
}

/// The v1 function table.
fn table() -> hsa_ven_amd_aqlprofile_1_00_pfn_t {
    hsa_ven_amd_aqlprofile_1_00_pfn_t {
        hsa_ven_amd_aqlprofile_version_major: Some(version_major),
        hsa_ven_amd_aqlprofile_version_minor: Some(version_minor),
        hsa_ven_amd_aqlprofile_error_string: Some(error_string),
        hsa_ven_amd_aqlprofile_validate_event: Some(validate_event),
        hsa_ven_amd_aqlprofile_start: Some(start),
        hsa_ven_amd_aqlprofile_stop: Some(stop),
        hsa_ven_amd_aqlprofile_read: Some(read),
        hsa_ven_amd_aqlprofile_legacy_get_pm4: Some(legacy_get_pm4),
        hsa_ven_amd_aqlprofile_get_info: Some(get_info),
        hsa_ven_amd_aqlprofile_iterate_data: Some(iterate_data),
    }
}

/// Number of functions in the v1 table.
pub(crate) const TABLE_FUNCTIONS: usize =
    size_of::<hsa_ven_amd_aqlprofile_1_00_pfn_t>() / size_of::<usize>();

/// Writes the v1 table for `hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_AQLPROFILE,
/// version_major, size, table)`: as many whole entries as `size` holds.
///
/// # Safety
/// `table` must be valid for `size` bytes of writes.
pub(crate) unsafe fn fill_extension_table(
    version_major: u16,
    size: usize,
    table_out: *mut c_void,
) -> hsa_status_t {
    if version_major != hsa_ven_amd_aqlprofile_VERSION_MAJOR || table_out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let t = table();
    let n = size.min(size_of::<hsa_ven_amd_aqlprofile_1_00_pfn_t>());
    // SAFETY: `n` bytes fit in the caller's `size`; the table is plain pointers.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&raw const t).cast::<u8>(),
            table_out.cast::<u8>(),
            n - n % size_of::<usize>(),
        )
    };
    HSA_STATUS_SUCCESS
}

#[cfg(test)]
mod tests;
