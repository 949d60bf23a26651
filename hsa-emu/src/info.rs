//! Agent, system, ISA, cache and wavefront information; agent iteration; extension queries.
//!
//! OWNER: helper E.
//!
//! Every answer comes from [`crate::topology`] and a few constants, so the module holds no state.
//! The emulated GPUs present themselves as `gfx90a` (agent `NAME`, ISA
//! `amdgcn-amd-amdhsa--gfx90a`) so that tools parsing target names keep working; what marks them
//! as emulated is `HSA_AMD_AGENT_INFO_PRODUCT_NAME` ([`GPU_PRODUCT_NAME`]) and the UUID
//! (`GPU-hsaemu…`). The CPU agent has no ISA and no queues, as in ROCr.
//!
//! Handles: the ISA, the wavefront and every cache are small tagged integers, so validating one
//! is an index check, as for agents and pools.

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

use rocprof_replay_sys::*;

use crate::api::Tables;
use crate::ffi::{guard_status, write_out};
use crate::topology::{Agent, DeviceKind, PoolKind, Topology, topology};

// ---- values the 5.2 enum list lacks (later hsa_ext_amd.h; values from the public header) ----

/// `HSA_AMD_AGENT_INFO_MEMORY_AVAIL` (u64): free bytes in the agent's global pools.
const HSA_AMD_AGENT_INFO_MEMORY_AVAIL: u32 = 0xA015;
/// `HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY` (u64, Hz).
const HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY: u32 = 0xA016;
/// `HSA_AMD_AGENT_INFO_UCODE_VERSION` (u32).
const HSA_AMD_AGENT_INFO_UCODE_VERSION: u32 = 0xA108;
/// `HSA_AMD_AGENT_INFO_SDMA_UCODE_VERSION` (u32).
const HSA_AMD_AGENT_INFO_SDMA_UCODE_VERSION: u32 = 0xA109;
/// `HSA_AMD_AGENT_INFO_NUM_SDMA_ENG` (u32).
const HSA_AMD_AGENT_INFO_NUM_SDMA_ENG: u32 = 0xA10A;
/// `HSA_AMD_AGENT_INFO_NUM_SDMA_XGMI_ENG` (u32).
const HSA_AMD_AGENT_INFO_NUM_SDMA_XGMI_ENG: u32 = 0xA10B;
/// `HSA_AMD_AGENT_INFO_IOMMU_SUPPORT` (`hsa_amd_iommu_version_t`, 0 = none).
const HSA_AMD_AGENT_INFO_IOMMU_SUPPORT: u32 = 0xA110;
/// `HSA_AMD_AGENT_INFO_NUM_XCC` (u32).
const HSA_AMD_AGENT_INFO_NUM_XCC: u32 = 0xA111;
/// `HSA_AMD_AGENT_INFO_DRIVER_UID` (u32).
const HSA_AMD_AGENT_INFO_DRIVER_UID: u32 = 0xA112;
/// `HSA_AMD_AGENT_INFO_NEAREST_CPU` (`hsa_agent_t`).
const HSA_AMD_AGENT_INFO_NEAREST_CPU: u32 = 0xA113;
/// `HSA_AMD_AGENT_INFO_MEMORY_PROPERTIES` (u8[8] bit mask).
const HSA_AMD_AGENT_INFO_MEMORY_PROPERTIES: u32 = 0xA114;
/// `HSA_AMD_AGENT_INFO_AQL_EXTENSIONS` (u8[8] bit mask).
const HSA_AMD_AGENT_INFO_AQL_EXTENSIONS: u32 = 0xA115;
/// `HSA_AMD_SYSTEM_INFO_MWAITX_ENABLED` (bool).
const HSA_AMD_SYSTEM_INFO_MWAITX_ENABLED: u32 = 0x203;
/// `HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED` (bool).
const HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED: u32 = 0x204;
/// `HSA_AMD_SYSTEM_INFO_VIRTUAL_MEM_API_SUPPORTED` (bool).
const HSA_AMD_SYSTEM_INFO_VIRTUAL_MEM_API_SUPPORTED: u32 = 0x205;
/// `HSA_AMD_SYSTEM_INFO_XNACK_ENABLED` (bool).
const HSA_AMD_SYSTEM_INFO_XNACK_ENABLED: u32 = 0x206;

// ---- the emulated GPU's limits (other modules may rely on them) ----

/// Work-items per wavefront of every GPU agent.
pub(crate) const WAVEFRONT_SIZE: u32 = 64;
/// Most work-items in one work-group, and in each work-group dimension.
pub(crate) const WORKGROUP_MAX_SIZE: u32 = 1024;
/// Smallest queue a GPU agent accepts (packets).
pub(crate) const QUEUE_MIN_SIZE: u32 = 64;
/// Largest queue a GPU agent accepts (packets).
pub(crate) const QUEUE_MAX_SIZE: u32 = 131_072;
/// Most queues one GPU agent may have at a time (`HSA_AGENT_INFO_QUEUES_MAX`).
pub(crate) const QUEUES_MAX: u32 = 128;
/// Name of the one ISA every GPU agent supports.
pub(crate) const ISA_NAME: &str = "amdgcn-amd-amdhsa--gfx90a";
/// `HSA_AGENT_INFO_NAME` of every GPU agent: a real target name, so tools can parse it.
const GPU_AGENT_NAME: &str = "gfx90a";
/// `HSA_AMD_AGENT_INFO_PRODUCT_NAME` of every GPU agent: this is what marks the emulator.
pub(crate) const GPU_PRODUCT_NAME: &str = "hsa-emu CPU-backed GPU";
/// `HSA_AMD_AGENT_INFO_CHIP_ID` of the GPUs (an MI210's, consistent with gfx90a).
const GPU_CHIP_ID: u32 = 0x740F;
/// Fallback CPU agent name when `/proc/cpuinfo` has no model name.
const CPU_FALLBACK_NAME: &str = "hsa-emu-cpu";
/// GPU caches: (level, bytes).
const GPU_CACHES: [(u8, u32); 2] = [(1, 16 << 10), (2, 8 << 20)];

/// `HSA_AMD_SYSTEM_INFO_BUILD_VERSION`: a static NUL-terminated string.
static BUILD_VERSION: &str = concat!("hsa-emu ", env!("CARGO_PKG_VERSION"), "\0");

const ISA_TAG: u64 = 0x4953_0000_0000; // "IS"
const WAVEFRONT_TAG: u64 = 0x5746_0000_0000; // "WF"
const CACHE_TAG: u64 = 0x4341_0000_0000; // "CA"

/// The ISA handle shared by every GPU agent.
pub(crate) fn gpu_isa() -> hsa_isa_t {
    hsa_isa_t {
        handle: ISA_TAG | 1,
    }
}

/// The ISA a name designates, if it is the GPUs' ISA (exact match).
pub(crate) fn isa_from_name(name: &[u8]) -> Option<hsa_isa_t> {
    (name == ISA_NAME.as_bytes()).then(gpu_isa)
}

fn isa_valid(isa: hsa_isa_t) -> bool {
    isa.handle == gpu_isa().handle
}

fn wavefront() -> hsa_wavefront_t {
    hsa_wavefront_t {
        handle: WAVEFRONT_TAG | 1,
    }
}

// ---- extensions ----

/// Highest supported minor version of each supported (extension, major).
fn extension_max_minor(extension: u16, major: u16) -> Option<u16> {
    match (u32::from(extension), major) {
        (HSA_EXTENSION_AMD_LOADER, 1) => Some(3),
        (HSA_EXTENSION_AMD_PROFILER, 1) => Some(0),
        (HSA_EXTENSION_AMD_AQLPROFILE, 1) => Some(0),
        _ => None,
    }
}

/// Name of a valid extension id (`None` for ids that are not extensions at all).
fn extension_name(extension: u16) -> Option<&'static CStr> {
    Some(match u32::from(extension) {
        HSA_EXTENSION_FINALIZER => c"HSA_EXTENSION_FINALIZER",
        HSA_EXTENSION_IMAGES => c"HSA_EXTENSION_IMAGES",
        HSA_EXTENSION_PERFORMANCE_COUNTERS => c"HSA_EXTENSION_PERFORMANCE_COUNTERS",
        HSA_EXTENSION_PROFILING_EVENTS => c"HSA_EXTENSION_PROFILING_EVENTS",
        HSA_EXTENSION_AMD_PROFILER => c"HSA_EXTENSION_AMD_PROFILER",
        HSA_EXTENSION_AMD_LOADER => c"HSA_EXTENSION_AMD_LOADER",
        HSA_EXTENSION_AMD_AQLPROFILE => c"HSA_EXTENSION_AMD_AQLPROFILE",
        _ => return None,
    })
}

/// Extensions an agent supports: the loader everywhere, the profiler and the AQL profile
/// extension (emulated counters, `crate::aqlprofile`) on GPUs.
fn agent_extensions(agent: &Agent) -> &'static [u32] {
    match agent.kind {
        DeviceKind::Gpu => &[
            HSA_EXTENSION_AMD_PROFILER,
            HSA_EXTENSION_AMD_LOADER,
            HSA_EXTENSION_AMD_AQLPROFILE,
        ],
        DeviceKind::Cpu => &[HSA_EXTENSION_AMD_LOADER],
    }
}

/// The `uint8_t[128]` bit mask of `HSA_*_INFO_EXTENSIONS`: bit `i` set when extension `i` is.
fn extension_mask(ids: &[u32]) -> [u8; 128] {
    let mut mask = [0u8; 128];
    for &id in ids {
        mask[id as usize / 8] |= 1 << (id % 8);
    }
    mask
}

const SYSTEM_EXTENSIONS: &[u32] = &[
    HSA_EXTENSION_AMD_PROFILER,
    HSA_EXTENSION_AMD_LOADER,
    HSA_EXTENSION_AMD_AQLPROFILE,
];

// ---- host facts ----

fn host_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn cpu_model_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| CPU_FALLBACK_NAME.to_string())
    })
}

fn cpu_max_mhz() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(0, |khz| (khz / 1000) as u32)
}

fn sysconf(name: libc::c_int) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(name) };
    if v > 0 { v as u64 } else { 0 }
}

/// Caches of an agent as (level, bytes), in iteration order. CPU caches come from `sysconf`
/// (levels the C library does not know are left out).
fn caches(agent: &Agent) -> Vec<(u8, u32)> {
    match agent.kind {
        DeviceKind::Gpu => GPU_CACHES.to_vec(),
        DeviceKind::Cpu => [
            (1, libc::_SC_LEVEL1_DCACHE_SIZE),
            (2, libc::_SC_LEVEL2_CACHE_SIZE),
            (3, libc::_SC_LEVEL3_CACHE_SIZE),
            (4, libc::_SC_LEVEL4_CACHE_SIZE),
        ]
        .into_iter()
        .map(|(level, name)| (level, sysconf(name).min(u64::from(u32::MAX)) as u32))
        .filter(|&(_, size)| size > 0)
        .collect(),
    }
}

fn cache_handle(agent_index: usize, position: usize) -> hsa_cache_t {
    hsa_cache_t {
        handle: CACHE_TAG | ((agent_index as u64) << 8) | (position as u64 + 1),
    }
}

/// The (level, bytes) behind a cache handle.
fn cache_lookup(t: &Topology, cache: hsa_cache_t) -> Option<(u8, u32)> {
    if cache.handle & !0xFFFF_FFFF != CACHE_TAG {
        return None;
    }
    let agent = t.agents.get(((cache.handle >> 8) & 0xFF_FFFF) as usize)?;
    let position = (cache.handle & 0xFF) as usize;
    caches(agent).get(position.checked_sub(1)?).copied()
}

// ---- attribute values ----

/// One attribute value, written in its C type.
enum Out {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    Bool(bool),
    U16x3([u16; 3]),
    U32x4([u32; 4]),
    Bool2([bool; 2]),
    Bool3([bool; 3]),
    Dim3(hsa_dim3_t),
    Mask8([u8; 8]),
    Mask128([u8; 128]),
    Agent(hsa_agent_t),
    Isa(hsa_isa_t),
    /// Two null pointers (`hsa_amd_hdp_flush_t`).
    NullPtrs2,
    Ptr(*const c_char),
    /// `text` in a `char[size]`: truncated to `size - 1` bytes, NUL-padded to `size`.
    Text(&'static str, usize),
    /// Owned text in a `char[size]`, as [`Out::Text`].
    String(String, usize),
}

impl Out {
    /// Writes the value to `out`.
    ///
    /// # Safety
    /// `out` must be null or valid for writes of the value's C type.
    unsafe fn write(self, out: *mut c_void) -> hsa_status_t {
        // SAFETY: every arm: `out` is null (write_out refuses it) or valid (caller contract).
        unsafe {
            match self {
                Out::U8(v) => write_out(out, v),
                Out::U16(v) => write_out(out, v),
                Out::U32(v) => write_out(out, v),
                Out::U64(v) => write_out(out, v),
                Out::Bool(v) => write_out(out, v),
                Out::U16x3(v) => write_out(out, v),
                Out::U32x4(v) => write_out(out, v),
                Out::Bool2(v) => write_out(out, v),
                Out::Bool3(v) => write_out(out, v),
                Out::Dim3(v) => write_out(out, v),
                Out::Mask8(v) => write_out(out, v),
                Out::Mask128(v) => write_out(out, v),
                Out::Agent(v) => write_out(out, v),
                Out::Isa(v) => write_out(out, v),
                Out::NullPtrs2 => write_out(out, [0usize; 2]),
                Out::Ptr(v) => write_out(out, v),
                Out::Text(s, size) => write_text(out, s, size),
                Out::String(s, size) => write_text(out, &s, size),
            }
        }
    }
}

/// Writes `text` into a `char[size]` buffer, truncated to leave a NUL, padded with NULs.
///
/// # Safety
/// `out` must be null or valid for `size` bytes of writes.
unsafe fn write_text(out: *mut c_void, text: &str, size: usize) -> hsa_status_t {
    if out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let n = text.len().min(size.saturating_sub(1));
    // SAFETY: `out` is valid for `size` bytes (caller contract) and `n < size`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast::<u8>(), n);
        std::ptr::write_bytes(out.cast::<u8>().add(n), 0, size - n);
    }
    HSA_STATUS_SUCCESS
}

/// The value of an `hsa_agent_info_t` / `hsa_amd_agent_info_t` attribute, `None` if unknown.
///
/// GPU-only attributes read 0 (or zeros) on the CPU agent, as ROCr's CPU agent answers.
fn agent_attribute(t: &Topology, agent: &Agent, attribute: u32) -> Option<Out> {
    let gpu = agent.kind == DeviceKind::Gpu;
    let on_gpu = |v: u32| if gpu { v } else { 0 };
    let cache_sizes = || {
        let mut sizes = [0u32; 4];
        for (level, size) in caches(agent) {
            sizes[usize::from(level - 1)] = size;
        }
        sizes
    };
    let gpu_index = agent.gpu_index.unwrap_or(0);
    Some(match attribute {
        HSA_AGENT_INFO_NAME => {
            if gpu {
                Out::Text(GPU_AGENT_NAME, 64)
            } else {
                Out::Text(cpu_model_name(), 64)
            }
        }
        HSA_AGENT_INFO_VENDOR_NAME => Out::Text(if gpu { "AMD" } else { "CPU" }, 64),
        HSA_AGENT_INFO_FEATURE => Out::U32(on_gpu(HSA_AGENT_FEATURE_KERNEL_DISPATCH)),
        HSA_AGENT_INFO_MACHINE_MODEL => Out::U32(HSA_MACHINE_MODEL_LARGE),
        HSA_AGENT_INFO_PROFILE => Out::U32(if gpu {
            HSA_PROFILE_BASE
        } else {
            HSA_PROFILE_FULL
        }),
        HSA_AGENT_INFO_DEFAULT_FLOAT_ROUNDING_MODE => {
            Out::U32(HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR)
        }
        HSA_AGENT_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES => {
            Out::U32(HSA_DEFAULT_FLOAT_ROUNDING_MODE_ZERO | HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR)
        }
        HSA_AGENT_INFO_FAST_F16_OPERATION => Out::Bool(gpu),
        HSA_AGENT_INFO_WAVEFRONT_SIZE => Out::U32(on_gpu(WAVEFRONT_SIZE)),
        HSA_AGENT_INFO_WORKGROUP_MAX_DIM => Out::U16x3([on_gpu(WORKGROUP_MAX_SIZE) as u16; 3]),
        HSA_AGENT_INFO_WORKGROUP_MAX_SIZE => Out::U32(on_gpu(WORKGROUP_MAX_SIZE)),
        HSA_AGENT_INFO_GRID_MAX_DIM => {
            let m = on_gpu(u32::MAX);
            Out::Dim3(hsa_dim3_t { x: m, y: m, z: m })
        }
        HSA_AGENT_INFO_GRID_MAX_SIZE => Out::U32(on_gpu(u32::MAX)),
        HSA_AGENT_INFO_FBARRIER_MAX_SIZE => Out::U32(on_gpu(32)),
        HSA_AGENT_INFO_QUEUES_MAX => Out::U32(on_gpu(QUEUES_MAX)),
        HSA_AGENT_INFO_QUEUE_MIN_SIZE => Out::U32(on_gpu(QUEUE_MIN_SIZE)),
        HSA_AGENT_INFO_QUEUE_MAX_SIZE => Out::U32(on_gpu(QUEUE_MAX_SIZE)),
        HSA_AGENT_INFO_QUEUE_TYPE => Out::U32(HSA_QUEUE_TYPE_MULTI),
        HSA_AGENT_INFO_NODE => Out::U32(agent.node),
        HSA_AGENT_INFO_DEVICE => Out::U32(if gpu {
            HSA_DEVICE_TYPE_GPU
        } else {
            HSA_DEVICE_TYPE_CPU
        }),
        HSA_AGENT_INFO_CACHE_SIZE => Out::U32x4(cache_sizes()),
        HSA_AGENT_INFO_ISA => Out::Isa(if gpu {
            gpu_isa()
        } else {
            hsa_isa_t { handle: 0 }
        }),
        HSA_AGENT_INFO_EXTENSIONS => Out::Mask128(extension_mask(agent_extensions(agent))),
        HSA_AGENT_INFO_VERSION_MAJOR | HSA_AGENT_INFO_VERSION_MINOR => Out::U16(1),

        HSA_AMD_AGENT_INFO_CHIP_ID => Out::U32(on_gpu(GPU_CHIP_ID)),
        HSA_AMD_AGENT_INFO_CACHELINE_SIZE => Out::U32(if gpu { 128 } else { 64 }),
        HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT => Out::U32(host_cpus()),
        HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY => Out::U32(if gpu { 1700 } else { cpu_max_mhz() }),
        HSA_AMD_AGENT_INFO_DRIVER_NODE_ID | HSA_AMD_AGENT_INFO_DRIVER_UID => Out::U32(agent.node),
        HSA_AMD_AGENT_INFO_MAX_ADDRESS_WATCH_POINTS => Out::U32(on_gpu(4)),
        // Bus number gpu_index + 1, device 0, function 0.
        HSA_AMD_AGENT_INFO_BDFID => Out::U32(on_gpu((gpu_index + 1) << 8)),
        HSA_AMD_AGENT_INFO_MEMORY_WIDTH => Out::U32(on_gpu(4096)),
        HSA_AMD_AGENT_INFO_MEMORY_MAX_FREQUENCY => Out::U32(on_gpu(1600)),
        HSA_AMD_AGENT_INFO_PRODUCT_NAME => Out::Text(
            if gpu {
                GPU_PRODUCT_NAME
            } else {
                cpu_model_name()
            },
            64,
        ),
        HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU => Out::U32(on_gpu(32)),
        HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU => Out::U32(on_gpu(4)),
        HSA_AMD_AGENT_INFO_NUM_SHADER_ENGINES | HSA_AMD_AGENT_INFO_NUM_SHADER_ARRAYS_PER_SE => {
            Out::U32(on_gpu(1))
        }
        HSA_AMD_AGENT_INFO_HDP_FLUSH => Out::NullPtrs2,
        HSA_AMD_AGENT_INFO_DOMAIN => Out::U32(0),
        HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES => Out::Bool(false),
        HSA_AMD_AGENT_INFO_UUID => Out::String(
            if gpu {
                format!("GPU-hsaemu{gpu_index:010}")
            } else {
                "CPU-XX".to_string()
            },
            21,
        ),
        HSA_AMD_AGENT_INFO_ASIC_REVISION => Out::U32(0),
        HSA_AMD_AGENT_INFO_SVM_DIRECT_HOST_ACCESS => Out::Bool(true),
        HSA_AMD_AGENT_INFO_COOPERATIVE_COMPUTE_UNIT_COUNT => Out::U32(on_gpu(host_cpus())),
        HSA_AMD_AGENT_INFO_MEMORY_AVAIL => Out::U64(match t.pool_of(agent, PoolKind::Vram) {
            Some(vram) if gpu => vram
                .size
                .saturating_sub(vram.used.load(std::sync::atomic::Ordering::Relaxed))
                as u64,
            _ => sysconf(libc::_SC_AVPHYS_PAGES) * sysconf(libc::_SC_PAGESIZE),
        }),
        HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY => Out::U64(crate::clock::TICKS_PER_SECOND),
        HSA_AMD_AGENT_INFO_UCODE_VERSION
        | HSA_AMD_AGENT_INFO_SDMA_UCODE_VERSION
        | HSA_AMD_AGENT_INFO_NUM_SDMA_ENG
        | HSA_AMD_AGENT_INFO_NUM_SDMA_XGMI_ENG
        | HSA_AMD_AGENT_INFO_IOMMU_SUPPORT => Out::U32(0),
        HSA_AMD_AGENT_INFO_NUM_XCC => Out::U32(on_gpu(1)),
        HSA_AMD_AGENT_INFO_NEAREST_CPU => Out::Agent(t.cpu().handle),
        HSA_AMD_AGENT_INFO_MEMORY_PROPERTIES | HSA_AMD_AGENT_INFO_AQL_EXTENSIONS => {
            Out::Mask8([0; 8])
        }
        _ => return None,
    })
}

/// The value of an `hsa_system_info_t` attribute, `None` if unknown.
///
/// SVM: the `hsa_amd_svm_*` functions are implemented (attributes are recorded, nothing
/// migrates), so `SVM_SUPPORTED` is true unless `HSA_EMU_SVM_SUPPORTED=0`; `SVM_ACCESSIBLE_BY_DEFAULT` is
/// `HSA_EMU_SVM_BY_DEFAULT` (default true: kernels run on the host and reach all of its memory;
/// `0` presents a discrete GPU without XNACK).
/// `VIRTUAL_MEM_API_SUPPORTED` is true when the 6.x table (which has the vmem slots) is presented.
fn system_attribute(attribute: u32) -> Option<Out> {
    Some(match attribute {
        HSA_SYSTEM_INFO_VERSION_MAJOR | HSA_SYSTEM_INFO_VERSION_MINOR => Out::U16(1),
        HSA_SYSTEM_INFO_TIMESTAMP => Out::U64(crate::clock::now_ticks()),
        HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY => Out::U64(crate::clock::TICKS_PER_SECOND),
        HSA_SYSTEM_INFO_SIGNAL_MAX_WAIT => Out::U64(u64::MAX),
        HSA_SYSTEM_INFO_ENDIANNESS => Out::U32(HSA_ENDIANNESS_LITTLE),
        HSA_SYSTEM_INFO_MACHINE_MODEL => Out::U32(HSA_MACHINE_MODEL_LARGE),
        HSA_SYSTEM_INFO_EXTENSIONS => Out::Mask128(extension_mask(SYSTEM_EXTENSIONS)),
        HSA_AMD_SYSTEM_INFO_BUILD_VERSION => Out::Ptr(BUILD_VERSION.as_ptr().cast()),
        HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED => Out::Bool(topology().svm_supported),
        HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT => Out::Bool(topology().svm_by_default),
        HSA_AMD_SYSTEM_INFO_VIRTUAL_MEM_API_SUPPORTED => {
            Out::Bool(crate::api::abi() == crate::api::AbiPresentation::Newest)
        }
        // dmabuf export: the allocation's memfd (see `memory::ipc`).
        HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED => Out::Bool(true),
        HSA_AMD_SYSTEM_INFO_MWAITX_ENABLED | HSA_AMD_SYSTEM_INFO_XNACK_ENABLED => Out::Bool(false),
        _ => return None,
    })
}

/// The value of an `hsa_isa_info_t` attribute of the GPU ISA, `None` if unknown.
///
/// `NAME_LENGTH` counts the terminating NUL and `NAME` writes it, as ROCr does (hsa.h says the
/// length excludes it): a caller that allocates `NAME_LENGTH` bytes, following either, gets a
/// terminated string and no overflow.
fn isa_attribute(attribute: u32) -> Option<Out> {
    Some(match attribute {
        HSA_ISA_INFO_NAME_LENGTH => Out::U32(ISA_NAME.len() as u32 + 1),
        HSA_ISA_INFO_NAME => Out::Text(ISA_NAME, ISA_NAME.len() + 1),
        HSA_ISA_INFO_CALL_CONVENTION_COUNT => Out::U32(1),
        HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONT_SIZE => Out::U32(WAVEFRONT_SIZE),
        HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONTS_PER_COMPUTE_UNIT => Out::U32(40),
        HSA_ISA_INFO_MACHINE_MODELS => Out::Bool2([false, true]),
        HSA_ISA_INFO_PROFILES => Out::Bool2([true, true]),
        HSA_ISA_INFO_DEFAULT_FLOAT_ROUNDING_MODES => Out::Bool3([true, true, true]),
        HSA_ISA_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES => Out::Bool3([false, true, true]),
        HSA_ISA_INFO_FAST_F16_OPERATION => Out::Bool(true),
        HSA_ISA_INFO_WORKGROUP_MAX_DIM => Out::U16x3([WORKGROUP_MAX_SIZE as u16; 3]),
        HSA_ISA_INFO_WORKGROUP_MAX_SIZE => Out::U32(WORKGROUP_MAX_SIZE),
        HSA_ISA_INFO_GRID_MAX_DIM => Out::Dim3(hsa_dim3_t {
            x: u32::MAX,
            y: u32::MAX,
            z: u32::MAX,
        }),
        HSA_ISA_INFO_GRID_MAX_SIZE => Out::U64(u64::from(u32::MAX)),
        HSA_ISA_INFO_FBARRIER_MAX_SIZE => Out::U32(32),
        _ => return None,
    })
}

// ---- entry points ----

/// Runs an API call: `NOT_INITIALIZED` before `hsa_init` (the reference count is counted before
/// tools load, so tools may query from `OnLoad`), and no panic crosses the C ABI.
/// Unit tests skip the initialisation check so that they need not call `hsa_init`.
fn entry(f: impl FnOnce() -> hsa_status_t) -> hsa_status_t {
    guard_status(|| {
        if !cfg!(test) && !crate::runtime::is_initialized() {
            return HSA_STATUS_ERROR_NOT_INITIALIZED;
        }
        f()
    })
}

// ---- agents ----

type AgentCallback = unsafe extern "C" fn(hsa_agent_t, *mut c_void) -> hsa_status_t;

/// `hsa_iterate_agents`: calls `callback` for the CPU agent, then each GPU, stopping at the
/// first status other than SUCCESS and returning it (INFO_BREAK included).
unsafe extern "C" fn iterate_agents(
    callback: Option<AgentCallback>,
    data: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        for agent in &topology().agents {
            // SAFETY: the application's callback, called with the data it passed.
            let status = unsafe { callback(agent.handle, data) };
            if status != HSA_STATUS_SUCCESS {
                return status;
            }
        }
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_agent_get_info`.
unsafe extern "C" fn agent_get_info(
    agent: hsa_agent_t,
    attribute: hsa_agent_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        let t = topology();
        let Some(a) = t.agent(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        match agent_attribute(t, a, attribute) {
            // SAFETY: `value` is the caller's buffer for this attribute's type.
            Some(out) => unsafe { out.write(value) },
            None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

fn profile_valid(profile: hsa_profile_t) -> bool {
    profile == HSA_PROFILE_BASE || profile == HSA_PROFILE_FULL
}

/// `hsa_agent_get_exception_policies` (deprecated): DETECT on GPUs, none on the CPU.
unsafe extern "C" fn agent_get_exception_policies(
    agent: hsa_agent_t,
    profile: hsa_profile_t,
    mask: *mut u16,
) -> hsa_status_t {
    entry(|| {
        let Some(a) = topology().agent(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        if !profile_valid(profile) {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let policies = if a.kind == DeviceKind::Gpu {
            HSA_EXCEPTION_POLICY_DETECT as u16
        } else {
            0
        };
        // SAFETY: `mask` is null or the caller's u16.
        unsafe { write_out(mask.cast(), policies) }
    })
}

// ---- extensions ----

/// Writes the result of an extension query.
///
/// # Safety
/// `result` and `minor_out` must be null or valid for writes.
unsafe fn answer_extension(
    extension: u16,
    supported_here: bool,
    major: u16,
    minor: Option<u16>,
    minor_out: Option<*mut u16>,
    result: *mut bool,
) -> hsa_status_t {
    if extension_name(extension).is_none()
        || result.is_null()
        || minor_out.is_some_and(|p| p.is_null())
    {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let max_minor = extension_max_minor(extension, major).filter(|_| supported_here);
    let supported = match (max_minor, minor) {
        (Some(max), Some(asked)) => asked <= max,
        (Some(_), None) => true,
        (None, _) => false,
    };
    // SAFETY: both pointers are non-null and valid (caller contract).
    unsafe {
        if let Some(p) = minor_out {
            p.write_unaligned(max_minor.unwrap_or(0));
        }
        result.write_unaligned(supported);
    }
    HSA_STATUS_SUCCESS
}

/// `hsa_system_extension_supported` (deprecated): loader 1.0–1.3, profiler 1.0.
unsafe extern "C" fn system_extension_supported(
    extension: u16,
    major: u16,
    minor: u16,
    result: *mut bool,
) -> hsa_status_t {
    // SAFETY: `result` is the caller's out-pointer.
    entry(|| unsafe { answer_extension(extension, true, major, Some(minor), None, result) })
}

/// `hsa_system_major_extension_supported`: writes the highest minor supported.
unsafe extern "C" fn system_major_extension_supported(
    extension: u16,
    major: u16,
    minor: *mut u16,
    result: *mut bool,
) -> hsa_status_t {
    // SAFETY: `minor` and `result` are the caller's out-pointers.
    entry(|| unsafe { answer_extension(extension, true, major, None, Some(minor), result) })
}

/// `hsa_agent_extension_supported` (deprecated).
unsafe extern "C" fn agent_extension_supported(
    extension: u16,
    agent: hsa_agent_t,
    major: u16,
    minor: u16,
    result: *mut bool,
) -> hsa_status_t {
    entry(|| {
        let Some(a) = topology().agent(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let here = agent_extensions(a).contains(&u32::from(extension));
        // SAFETY: `result` is the caller's out-pointer.
        unsafe { answer_extension(extension, here, major, Some(minor), None, result) }
    })
}

/// `hsa_agent_major_extension_supported`.
unsafe extern "C" fn agent_major_extension_supported(
    extension: u16,
    agent: hsa_agent_t,
    major: u16,
    minor: *mut u16,
    result: *mut bool,
) -> hsa_status_t {
    entry(|| {
        let Some(a) = topology().agent(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let here = agent_extensions(a).contains(&u32::from(extension));
        // SAFETY: `minor` and `result` are the caller's out-pointers.
        unsafe { answer_extension(extension, here, major, None, Some(minor), result) }
    })
}

/// `hsa_extension_get_name`: a static NUL-terminated name for every valid extension id.
unsafe extern "C" fn extension_get_name(extension: u16, name: *mut *const c_char) -> hsa_status_t {
    entry(|| match extension_name(extension) {
        // SAFETY: `name` is null or the caller's out-pointer.
        Some(n) => unsafe { write_out(name.cast(), n.as_ptr()) },
        None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
    })
}

/// `hsa_system_get_major_extension_table`: the loader's table comes from
/// [`crate::loader::fill_loader_extension_table`], the AQL profile extension's v1 table from
/// [`crate::aqlprofile::fill_extension_table`]; no other extension has a function table
/// here (the profiler extension is advertised for tools that only test its bit), so those
/// return `HSA_STATUS_ERROR`.
unsafe extern "C" fn system_get_major_extension_table(
    extension: u16,
    major: u16,
    table_length: usize,
    table: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        if extension_name(extension).is_none() || table.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match u32::from(extension) {
            // SAFETY: `table` is the caller's buffer of `table_length` bytes.
            HSA_EXTENSION_AMD_LOADER => unsafe {
                crate::loader::fill_loader_extension_table(major, table_length, table)
            },
            // SAFETY: as above.
            HSA_EXTENSION_AMD_AQLPROFILE => unsafe {
                crate::aqlprofile::fill_extension_table(major, table_length, table)
            },
            _ => HSA_STATUS_ERROR,
        }
    })
}

/// `hsa_system_get_extension_table` (deprecated): as the major-version call, with the table size
/// of the asked loader minor (1.00: 3 functions, 1.01: 5, 1.02: 6, 1.03: 7); the AQL profile
/// extension has 1.00 only (10 functions).
unsafe extern "C" fn system_get_extension_table(
    extension: u16,
    major: u16,
    minor: u16,
    table: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        let functions = match (u32::from(extension), major, minor) {
            (HSA_EXTENSION_AMD_LOADER, 1, 0) => 3,
            (HSA_EXTENSION_AMD_LOADER, 1, 1) => 5,
            (HSA_EXTENSION_AMD_LOADER, 1, 2) => 6,
            (HSA_EXTENSION_AMD_LOADER, 1, 3) => 7,
            (HSA_EXTENSION_AMD_LOADER, _, _) => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
            (HSA_EXTENSION_AMD_AQLPROFILE, 1, 0) => crate::aqlprofile::TABLE_FUNCTIONS,
            (HSA_EXTENSION_AMD_AQLPROFILE, _, _) => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
            _ => 0,
        };
        let size = functions * size_of::<usize>();
        // SAFETY: same contract; for the loader `table` holds the asked minor's table.
        unsafe { system_get_major_extension_table(extension, major, size, table) }
    })
}

/// `hsa_system_get_info`.
unsafe extern "C" fn system_get_info(
    attribute: hsa_system_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    entry(|| match system_attribute(attribute) {
        // SAFETY: `value` is the caller's buffer for this attribute's type.
        Some(out) => unsafe { out.write(value) },
        None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
    })
}

// ---- ISA and wavefronts ----

type IsaCallback = unsafe extern "C" fn(hsa_isa_t, *mut c_void) -> hsa_status_t;
type WavefrontCallback = unsafe extern "C" fn(hsa_wavefront_t, *mut c_void) -> hsa_status_t;

/// `hsa_agent_iterate_isas`: the GPU ISA on GPUs, nothing on the CPU.
unsafe extern "C" fn agent_iterate_isas(
    agent: hsa_agent_t,
    callback: Option<IsaCallback>,
    data: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        let Some(a) = topology().agent(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if a.kind != DeviceKind::Gpu {
            return HSA_STATUS_SUCCESS;
        }
        // SAFETY: the application's callback, called with the data it passed.
        unsafe { callback(gpu_isa(), data) }
    })
}

/// `hsa_isa_from_name`: exact name match.
unsafe extern "C" fn isa_from_name_c(name: *const c_char, isa: *mut hsa_isa_t) -> hsa_status_t {
    entry(|| {
        if name.is_null() || isa.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: a non-null name is a NUL-terminated string (API contract).
        let name = unsafe { CStr::from_ptr(name) };
        match isa_from_name(name.to_bytes()) {
            // SAFETY: `isa` is non-null and the caller's out-pointer.
            Some(h) => unsafe { write_out(isa.cast(), h) },
            None => HSA_STATUS_ERROR_INVALID_ISA_NAME,
        }
    })
}

/// `hsa_isa_get_info_alt`.
unsafe extern "C" fn isa_get_info_alt(
    isa: hsa_isa_t,
    attribute: hsa_isa_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        if !isa_valid(isa) {
            return HSA_STATUS_ERROR_INVALID_ISA;
        }
        match isa_attribute(attribute) {
            // SAFETY: `value` is the caller's buffer for this attribute's type.
            Some(out) => unsafe { out.write(value) },
            None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

/// `hsa_isa_get_info` (deprecated): as `_alt`; `index` picks the call convention (only 0) and
/// is checked only for the call-convention attributes.
unsafe extern "C" fn isa_get_info(
    isa: hsa_isa_t,
    attribute: hsa_isa_info_t,
    index: u32,
    value: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        let per_convention = matches!(
            attribute,
            HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONT_SIZE
                | HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONTS_PER_COMPUTE_UNIT
        );
        if isa_valid(isa) && per_convention && index != 0 {
            return HSA_STATUS_ERROR_INVALID_INDEX;
        }
        // SAFETY: same contract.
        unsafe { isa_get_info_alt(isa, attribute, value) }
    })
}

/// `hsa_isa_compatible`: true for equal handles.
unsafe extern "C" fn isa_compatible(
    code_object_isa: hsa_isa_t,
    agent_isa: hsa_isa_t,
    result: *mut bool,
) -> hsa_status_t {
    entry(|| {
        if !isa_valid(code_object_isa) || !isa_valid(agent_isa) {
            return HSA_STATUS_ERROR_INVALID_ISA;
        }
        // SAFETY: `result` is null or the caller's out-pointer.
        unsafe { write_out(result.cast(), code_object_isa.handle == agent_isa.handle) }
    })
}

/// `hsa_isa_get_exception_policies`: DETECT in both profiles.
unsafe extern "C" fn isa_get_exception_policies(
    isa: hsa_isa_t,
    profile: hsa_profile_t,
    mask: *mut u16,
) -> hsa_status_t {
    entry(|| {
        if !isa_valid(isa) {
            return HSA_STATUS_ERROR_INVALID_ISA;
        }
        if !profile_valid(profile) {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: `mask` is null or the caller's out-pointer.
        unsafe { write_out(mask.cast(), HSA_EXCEPTION_POLICY_DETECT as u16) }
    })
}

/// `hsa_isa_get_round_method`: single rounding for every type and flush mode.
unsafe extern "C" fn isa_get_round_method(
    isa: hsa_isa_t,
    fp_type: hsa_fp_type_t,
    flush_mode: hsa_flush_mode_t,
    round_method: *mut hsa_round_method_t,
) -> hsa_status_t {
    entry(|| {
        if !isa_valid(isa) {
            return HSA_STATUS_ERROR_INVALID_ISA;
        }
        let type_ok = matches!(fp_type, HSA_FP_TYPE_16 | HSA_FP_TYPE_32 | HSA_FP_TYPE_64);
        let flush_ok = matches!(flush_mode, HSA_FLUSH_MODE_FTZ | HSA_FLUSH_MODE_NON_FTZ);
        if !type_ok || !flush_ok {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: `round_method` is null or the caller's out-pointer.
        unsafe { write_out(round_method.cast(), HSA_ROUND_METHOD_SINGLE) }
    })
}

/// `hsa_isa_iterate_wavefronts`: one wavefront of [`WAVEFRONT_SIZE`] work-items.
unsafe extern "C" fn isa_iterate_wavefronts(
    isa: hsa_isa_t,
    callback: Option<WavefrontCallback>,
    data: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        if !isa_valid(isa) {
            return HSA_STATUS_ERROR_INVALID_ISA;
        }
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        // SAFETY: the application's callback, called with the data it passed.
        unsafe { callback(wavefront(), data) }
    })
}

/// `hsa_wavefront_get_info`: `SIZE` (u32).
unsafe extern "C" fn wavefront_get_info(
    wf: hsa_wavefront_t,
    attribute: hsa_wavefront_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        if wf.handle != wavefront().handle {
            return HSA_STATUS_ERROR_INVALID_WAVEFRONT;
        }
        if attribute != HSA_WAVEFRONT_INFO_SIZE {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: `value` is null or the caller's u32.
        unsafe { write_out(value, WAVEFRONT_SIZE) }
    })
}

// ---- caches ----

type CacheCallback = unsafe extern "C" fn(hsa_cache_t, *mut c_void) -> hsa_status_t;

/// `hsa_agent_iterate_caches`: GPUs have an L1 and an L2; the CPU has what `sysconf` reports.
unsafe extern "C" fn agent_iterate_caches(
    agent: hsa_agent_t,
    callback: Option<CacheCallback>,
    data: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        let t = topology();
        let Some(index) = t.agent_index(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        for position in 0..caches(&t.agents[index]).len() {
            // SAFETY: the application's callback, called with the data it passed.
            let status = unsafe { callback(cache_handle(index, position), data) };
            if status != HSA_STATUS_SUCCESS {
                return status;
            }
        }
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_cache_get_info`: `NAME_LENGTH` (u32, without the NUL), `NAME` ("L1".., NUL-terminated),
/// `LEVEL` (u8), `SIZE` (u32 bytes).
unsafe extern "C" fn cache_get_info(
    cache: hsa_cache_t,
    attribute: hsa_cache_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    entry(|| {
        let Some((level, size)) = cache_lookup(topology(), cache) else {
            return HSA_STATUS_ERROR_INVALID_CACHE;
        };
        let name = format!("L{level}");
        let out = match attribute {
            HSA_CACHE_INFO_NAME_LENGTH => Out::U32(name.len() as u32),
            HSA_CACHE_INFO_NAME => {
                let n = name.len() + 1;
                Out::String(name, n)
            }
            HSA_CACHE_INFO_LEVEL => Out::U8(level),
            HSA_CACHE_INFO_SIZE => Out::U32(size),
            _ => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
        };
        // SAFETY: `value` is the caller's buffer for this attribute's type.
        unsafe { out.write(value) }
    })
}

/// Fills the information slots.
pub(crate) fn install(t: &mut Tables) {
    let c = &mut t.core;
    c.hsa_system_get_info_fn = Some(system_get_info);
    c.hsa_system_extension_supported_fn = Some(system_extension_supported);
    c.hsa_system_major_extension_supported_fn = Some(system_major_extension_supported);
    c.hsa_system_get_extension_table_fn = Some(system_get_extension_table);
    c.hsa_system_get_major_extension_table_fn = Some(system_get_major_extension_table);
    c.hsa_extension_get_name_fn = Some(extension_get_name);
    c.hsa_iterate_agents_fn = Some(iterate_agents);
    c.hsa_agent_get_info_fn = Some(agent_get_info);
    c.hsa_agent_get_exception_policies_fn = Some(agent_get_exception_policies);
    c.hsa_agent_extension_supported_fn = Some(agent_extension_supported);
    c.hsa_agent_major_extension_supported_fn = Some(agent_major_extension_supported);
    c.hsa_agent_iterate_isas_fn = Some(agent_iterate_isas);
    c.hsa_isa_from_name_fn = Some(isa_from_name_c);
    c.hsa_isa_get_info_fn = Some(isa_get_info);
    c.hsa_isa_get_info_alt_fn = Some(isa_get_info_alt);
    c.hsa_isa_compatible_fn = Some(isa_compatible);
    c.hsa_isa_get_exception_policies_fn = Some(isa_get_exception_policies);
    c.hsa_isa_get_round_method_fn = Some(isa_get_round_method);
    c.hsa_isa_iterate_wavefronts_fn = Some(isa_iterate_wavefronts);
    c.hsa_wavefront_get_info_fn = Some(wavefront_get_info);
    c.hsa_agent_iterate_caches_fn = Some(agent_iterate_caches);
    c.hsa_cache_get_info_fn = Some(cache_get_info);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every agent attribute with the size of its C type.
    const AGENT_ATTRIBUTES: &[(u32, usize)] = &[
        (HSA_AGENT_INFO_NAME, 64),
        (HSA_AGENT_INFO_VENDOR_NAME, 64),
        (HSA_AGENT_INFO_FEATURE, 4),
        (HSA_AGENT_INFO_MACHINE_MODEL, 4),
        (HSA_AGENT_INFO_PROFILE, 4),
        (HSA_AGENT_INFO_DEFAULT_FLOAT_ROUNDING_MODE, 4),
        (HSA_AGENT_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES, 4),
        (HSA_AGENT_INFO_FAST_F16_OPERATION, 1),
        (HSA_AGENT_INFO_WAVEFRONT_SIZE, 4),
        (HSA_AGENT_INFO_WORKGROUP_MAX_DIM, 6),
        (HSA_AGENT_INFO_WORKGROUP_MAX_SIZE, 4),
        (HSA_AGENT_INFO_GRID_MAX_DIM, 12),
        (HSA_AGENT_INFO_GRID_MAX_SIZE, 4),
        (HSA_AGENT_INFO_FBARRIER_MAX_SIZE, 4),
        (HSA_AGENT_INFO_QUEUES_MAX, 4),
        (HSA_AGENT_INFO_QUEUE_MIN_SIZE, 4),
        (HSA_AGENT_INFO_QUEUE_MAX_SIZE, 4),
        (HSA_AGENT_INFO_QUEUE_TYPE, 4),
        (HSA_AGENT_INFO_NODE, 4),
        (HSA_AGENT_INFO_DEVICE, 4),
        (HSA_AGENT_INFO_CACHE_SIZE, 16),
        (HSA_AGENT_INFO_ISA, 8),
        (HSA_AGENT_INFO_EXTENSIONS, 128),
        (HSA_AGENT_INFO_VERSION_MAJOR, 2),
        (HSA_AGENT_INFO_VERSION_MINOR, 2),
        (HSA_AMD_AGENT_INFO_CHIP_ID, 4),
        (HSA_AMD_AGENT_INFO_CACHELINE_SIZE, 4),
        (HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, 4),
        (HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY, 4),
        (HSA_AMD_AGENT_INFO_DRIVER_NODE_ID, 4),
        (HSA_AMD_AGENT_INFO_MAX_ADDRESS_WATCH_POINTS, 4),
        (HSA_AMD_AGENT_INFO_BDFID, 4),
        (HSA_AMD_AGENT_INFO_MEMORY_WIDTH, 4),
        (HSA_AMD_AGENT_INFO_MEMORY_MAX_FREQUENCY, 4),
        (HSA_AMD_AGENT_INFO_PRODUCT_NAME, 64),
        (HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU, 4),
        (HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU, 4),
        (HSA_AMD_AGENT_INFO_NUM_SHADER_ENGINES, 4),
        (HSA_AMD_AGENT_INFO_NUM_SHADER_ARRAYS_PER_SE, 4),
        (HSA_AMD_AGENT_INFO_HDP_FLUSH, 16),
        (HSA_AMD_AGENT_INFO_DOMAIN, 4),
        (HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES, 1),
        (HSA_AMD_AGENT_INFO_UUID, 21),
        (HSA_AMD_AGENT_INFO_ASIC_REVISION, 4),
        (HSA_AMD_AGENT_INFO_SVM_DIRECT_HOST_ACCESS, 1),
        (HSA_AMD_AGENT_INFO_COOPERATIVE_COMPUTE_UNIT_COUNT, 4),
        (HSA_AMD_AGENT_INFO_MEMORY_AVAIL, 8),
        (HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY, 8),
        (HSA_AMD_AGENT_INFO_UCODE_VERSION, 4),
        (HSA_AMD_AGENT_INFO_SDMA_UCODE_VERSION, 4),
        (HSA_AMD_AGENT_INFO_NUM_SDMA_ENG, 4),
        (HSA_AMD_AGENT_INFO_NUM_SDMA_XGMI_ENG, 4),
        (HSA_AMD_AGENT_INFO_IOMMU_SUPPORT, 4),
        (HSA_AMD_AGENT_INFO_NUM_XCC, 4),
        (HSA_AMD_AGENT_INFO_DRIVER_UID, 4),
        (HSA_AMD_AGENT_INFO_NEAREST_CPU, 8),
        (HSA_AMD_AGENT_INFO_MEMORY_PROPERTIES, 8),
        (HSA_AMD_AGENT_INFO_AQL_EXTENSIONS, 8),
    ];

    const SYSTEM_ATTRIBUTES: &[(u32, usize)] = &[
        (HSA_SYSTEM_INFO_VERSION_MAJOR, 2),
        (HSA_SYSTEM_INFO_VERSION_MINOR, 2),
        (HSA_SYSTEM_INFO_TIMESTAMP, 8),
        (HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, 8),
        (HSA_SYSTEM_INFO_SIGNAL_MAX_WAIT, 8),
        (HSA_SYSTEM_INFO_ENDIANNESS, 4),
        (HSA_SYSTEM_INFO_MACHINE_MODEL, 4),
        (HSA_SYSTEM_INFO_EXTENSIONS, 128),
        (HSA_AMD_SYSTEM_INFO_BUILD_VERSION, 8),
        (HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED, 1),
        (HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT, 1),
        (HSA_AMD_SYSTEM_INFO_MWAITX_ENABLED, 1),
        (HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED, 1),
        (HSA_AMD_SYSTEM_INFO_VIRTUAL_MEM_API_SUPPORTED, 1),
        (HSA_AMD_SYSTEM_INFO_XNACK_ENABLED, 1),
    ];

    const ISA_ATTRIBUTES: &[(u32, usize)] = &[
        (HSA_ISA_INFO_NAME_LENGTH, 4),
        (HSA_ISA_INFO_NAME, ISA_NAME.len() + 1),
        (HSA_ISA_INFO_CALL_CONVENTION_COUNT, 4),
        (HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONT_SIZE, 4),
        (
            HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONTS_PER_COMPUTE_UNIT,
            4,
        ),
        (HSA_ISA_INFO_MACHINE_MODELS, 2),
        (HSA_ISA_INFO_PROFILES, 2),
        (HSA_ISA_INFO_DEFAULT_FLOAT_ROUNDING_MODES, 3),
        (HSA_ISA_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES, 3),
        (HSA_ISA_INFO_FAST_F16_OPERATION, 1),
        (HSA_ISA_INFO_WORKGROUP_MAX_DIM, 6),
        (HSA_ISA_INFO_WORKGROUP_MAX_SIZE, 4),
        (HSA_ISA_INFO_GRID_MAX_DIM, 12),
        (HSA_ISA_INFO_GRID_MAX_SIZE, 8),
        (HSA_ISA_INFO_FBARRIER_MAX_SIZE, 4),
    ];

    /// Queries one attribute into a canary-filled buffer; returns the status and the bytes,
    /// after checking that nothing past `size` was written.
    fn query(size: usize, f: impl FnOnce(*mut c_void) -> hsa_status_t) -> (hsa_status_t, Vec<u8>) {
        let mut buf = vec![0xA5u8; size + 32];
        let status = f(buf.as_mut_ptr().cast());
        assert!(
            buf[size..].iter().all(|&b| b == 0xA5),
            "wrote past {size} bytes"
        );
        buf.truncate(size);
        (status, buf)
    }

    fn agent_info(agent: hsa_agent_t, attribute: u32, size: usize) -> Vec<u8> {
        // SAFETY: the buffer holds `size` bytes, the attribute's size.
        let (status, bytes) = query(size, |p| unsafe { agent_get_info(agent, attribute, p) });
        assert_eq!(status, HSA_STATUS_SUCCESS, "attribute {attribute:#x}");
        bytes
    }

    fn u32_of(b: &[u8]) -> u32 {
        u32::from_ne_bytes(b[..4].try_into().unwrap())
    }

    fn text(b: &[u8]) -> &str {
        CStr::from_bytes_until_nul(b).unwrap().to_str().unwrap()
    }

    fn cpu() -> hsa_agent_t {
        topology().cpu().handle
    }

    fn gpu() -> hsa_agent_t {
        topology()
            .gpus()
            .next()
            .expect("the default machine has a GPU")
            .handle
    }

    unsafe extern "C" fn collect(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the Vec the test passed.
        unsafe { (*data.cast::<Vec<u64>>()).push(agent.handle) };
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn stop_after_first(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: as in `collect`.
        unsafe { collect(agent, data) };
        HSA_STATUS_INFO_BREAK
    }

    #[test]
    fn iterate_agents_lists_cpu_first_and_honours_break() {
        let mut seen: Vec<u64> = Vec::new();
        let data = (&raw mut seen).cast();
        // SAFETY: `collect` pushes into `seen`.
        let status = unsafe { iterate_agents(Some(collect), data) };
        assert_eq!(status, HSA_STATUS_SUCCESS);
        let expected: Vec<u64> = topology().agents.iter().map(|a| a.handle.handle).collect();
        assert_eq!(seen, expected);
        let devices: Vec<u32> = seen
            .iter()
            .map(|&h| {
                u32_of(&agent_info(
                    hsa_agent_t { handle: h },
                    HSA_AGENT_INFO_DEVICE,
                    4,
                ))
            })
            .collect();
        assert_eq!(devices[0], HSA_DEVICE_TYPE_CPU);
        assert!(devices[1..].iter().all(|&d| d == HSA_DEVICE_TYPE_GPU));

        seen.clear();
        // SAFETY: as above.
        let status = unsafe { iterate_agents(Some(stop_after_first), data) };
        assert_eq!(status, HSA_STATUS_INFO_BREAK);
        assert_eq!(seen.len(), 1);
        // SAFETY: no callback is called.
        let status = unsafe { iterate_agents(None, data) };
        assert_eq!(status, HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }

    #[test]
    fn per_agent_identity_and_queue_limits() {
        // (agent, NAME, DEVICE, NODE, QUEUE_MIN, QUEUE_MAX, WAVEFRONT)
        let cases = [
            (cpu(), cpu_model_name(), HSA_DEVICE_TYPE_CPU, 0, 0, 0, 0),
            (
                gpu(),
                "gfx90a",
                HSA_DEVICE_TYPE_GPU,
                1,
                QUEUE_MIN_SIZE,
                QUEUE_MAX_SIZE,
                64,
            ),
        ];
        for (agent, name, device, node, qmin, qmax, wave) in cases {
            assert_eq!(text(&agent_info(agent, HSA_AGENT_INFO_NAME, 64)), name);
            assert_eq!(u32_of(&agent_info(agent, HSA_AGENT_INFO_DEVICE, 4)), device);
            assert_eq!(u32_of(&agent_info(agent, HSA_AGENT_INFO_NODE, 4)), node);
            assert_eq!(
                u32_of(&agent_info(agent, HSA_AGENT_INFO_QUEUE_MIN_SIZE, 4)),
                qmin
            );
            assert_eq!(
                u32_of(&agent_info(agent, HSA_AGENT_INFO_QUEUE_MAX_SIZE, 4)),
                qmax
            );
            assert_eq!(
                u32_of(&agent_info(agent, HSA_AGENT_INFO_WAVEFRONT_SIZE, 4)),
                wave
            );
        }
        let product = agent_info(gpu(), HSA_AMD_AGENT_INFO_PRODUCT_NAME, 64);
        assert_eq!(text(&product), GPU_PRODUCT_NAME);
        assert_eq!(
            text(&agent_info(gpu(), HSA_AMD_AGENT_INFO_UUID, 21)),
            "GPU-hsaemu0000000000"
        );
        let feature = u32_of(&agent_info(gpu(), HSA_AGENT_INFO_FEATURE, 4));
        assert_ne!(feature & HSA_AGENT_FEATURE_KERNEL_DISPATCH, 0);
        assert_eq!(
            u32_of(&agent_info(cpu(), HSA_AGENT_INFO_FEATURE, 4))
                & HSA_AGENT_FEATURE_KERNEL_DISPATCH,
            0
        );
        let avail = u64::from_ne_bytes(
            agent_info(gpu(), HSA_AMD_AGENT_INFO_MEMORY_AVAIL, 8)
                .try_into()
                .unwrap(),
        );
        let vram = topology()
            .pool_of(topology().agent(gpu()).unwrap(), PoolKind::Vram)
            .unwrap();
        assert!(avail > 0 && avail <= vram.size as u64);
    }

    #[test]
    fn every_attribute_answers_within_its_size() {
        for agent in [cpu(), gpu()] {
            for &(attribute, size) in AGENT_ATTRIBUTES {
                agent_info(agent, attribute, size);
            }
        }
        for &(attribute, size) in SYSTEM_ATTRIBUTES {
            // SAFETY: the buffer holds the attribute's size.
            let (status, _) = query(size, |p| unsafe { system_get_info(attribute, p) });
            assert_eq!(
                status, HSA_STATUS_SUCCESS,
                "system attribute {attribute:#x}"
            );
        }
        for &(attribute, size) in ISA_ATTRIBUTES {
            // SAFETY: as above.
            let (status, _) = query(size, |p| unsafe {
                isa_get_info_alt(gpu_isa(), attribute, p)
            });
            assert_eq!(status, HSA_STATUS_SUCCESS, "isa attribute {attribute:#x}");
        }
    }

    #[test]
    fn bad_agents_attributes_and_pointers_are_refused() {
        let mut v = 0u64;
        let out = (&raw mut v).cast();
        // SAFETY: all calls: `out` holds 8 bytes; null pointers must be refused.
        unsafe {
            let bogus = hsa_agent_t { handle: 0xdead };
            assert_eq!(
                agent_get_info(bogus, HSA_AGENT_INFO_NAME, out),
                HSA_STATUS_ERROR_INVALID_AGENT
            );
            assert_eq!(
                agent_get_info(gpu(), 0x7777, out),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                agent_get_info(gpu(), HSA_AGENT_INFO_NODE, std::ptr::null_mut()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                system_get_info(0x7777, out),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                isa_get_info_alt(hsa_isa_t { handle: 1 }, 0, out),
                HSA_STATUS_ERROR_INVALID_ISA
            );
            assert_eq!(
                isa_get_info_alt(gpu_isa(), 0x55, out),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                isa_get_info(
                    gpu_isa(),
                    HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONT_SIZE,
                    1,
                    out
                ),
                HSA_STATUS_ERROR_INVALID_INDEX
            );
            assert_eq!(
                isa_get_info(gpu_isa(), HSA_ISA_INFO_WORKGROUP_MAX_SIZE, 9, out),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(v as u32, WORKGROUP_MAX_SIZE);
            let mut mask = 0u16;
            assert_eq!(
                agent_get_exception_policies(gpu(), 7, &mut mask),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                agent_get_exception_policies(gpu(), HSA_PROFILE_BASE, &mut mask),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(mask, HSA_EXCEPTION_POLICY_DETECT as u16);
        }
    }

    #[test]
    fn svm_is_supported_and_reachability_follows_the_knob() {
        // SAFETY: both attributes are one-byte bools.
        let (st, supported) = query(1, |p| unsafe {
            system_get_info(HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED, p)
        });
        let knob =
            crate::topology::svm_supported(std::env::var("HSA_EMU_SVM_SUPPORTED").ok().as_deref());
        assert_eq!(
            (st, supported),
            (HSA_STATUS_SUCCESS, vec![u8::from(knob.unwrap_or(true))])
        );
        // SAFETY: as above.
        let (st, by_default) = query(1, |p| unsafe {
            system_get_info(HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT, p)
        });
        let knob = crate::topology::svm_by_default(
            std::env::var("HSA_EMU_SVM_BY_DEFAULT").ok().as_deref(),
        );
        assert_eq!(
            (st, by_default),
            (HSA_STATUS_SUCCESS, vec![u8::from(knob.unwrap_or(true))])
        );
    }

    #[test]
    fn extensions_advertise_the_loader() {
        let loader = HSA_EXTENSION_AMD_LOADER as usize;
        // SAFETY: the buffer holds 128 bytes.
        let (status, mask) = query(128, |p| unsafe {
            system_get_info(HSA_SYSTEM_INFO_EXTENSIONS, p)
        });
        assert_eq!(status, HSA_STATUS_SUCCESS);
        assert_ne!(mask[loader / 8] & (1 << (loader % 8)), 0);
        assert_eq!(mask[0], 0, "no finalizer or images");
        let agent_mask = agent_info(gpu(), HSA_AGENT_INFO_EXTENSIONS, 128);
        assert_ne!(agent_mask[loader / 8] & (1 << (loader % 8)), 0);

        let ext = HSA_EXTENSION_AMD_LOADER as u16;
        let (mut ok, mut minor) = (false, 0u16);
        // SAFETY: all calls: valid out-pointers.
        unsafe {
            // (major, minor, supported)
            for (major, asked, expected) in
                [(1, 0, true), (1, 3, true), (1, 4, false), (2, 0, false)]
            {
                assert_eq!(
                    system_extension_supported(ext, major, asked, &mut ok),
                    HSA_STATUS_SUCCESS
                );
                assert_eq!(ok, expected, "loader {major}.{asked}");
            }
            assert_eq!(
                system_major_extension_supported(ext, 1, &mut minor, &mut ok),
                HSA_STATUS_SUCCESS
            );
            assert!(ok);
            assert_eq!(minor, 3);
            assert_eq!(
                agent_major_extension_supported(ext, cpu(), 1, &mut minor, &mut ok),
                HSA_STATUS_SUCCESS
            );
            assert!(ok);
            let finalizer = HSA_EXTENSION_FINALIZER as u16;
            assert_eq!(
                agent_extension_supported(finalizer, gpu(), 1, 0, &mut ok),
                HSA_STATUS_SUCCESS
            );
            assert!(!ok);
            assert_eq!(
                system_extension_supported(0x150, 1, 0, &mut ok),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );

            let mut name: *const c_char = std::ptr::null();
            assert_eq!(extension_get_name(ext, &mut name), HSA_STATUS_SUCCESS);
            assert_eq!(CStr::from_ptr(name), c"HSA_EXTENSION_AMD_LOADER");

            let mut table = [0usize; 8];
            let t = table.as_mut_ptr().cast();
            let images = HSA_EXTENSION_IMAGES as u16;
            assert_eq!(
                system_get_major_extension_table(images, 1, 64, t),
                HSA_STATUS_ERROR
            );
            assert_eq!(
                system_get_major_extension_table(ext, 1, 64, std::ptr::null_mut()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                system_get_extension_table(ext, 1, 9, t),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
        }
    }

    #[test]
    fn extensions_advertise_aqlprofile_on_gpus_with_its_v1_table() {
        let aql = HSA_EXTENSION_AMD_AQLPROFILE as usize;
        let agent_mask = agent_info(gpu(), HSA_AGENT_INFO_EXTENSIONS, 128);
        assert_ne!(agent_mask[aql / 8] & (1 << (aql % 8)), 0);
        let cpu_mask = agent_info(cpu(), HSA_AGENT_INFO_EXTENSIONS, 128);
        assert_eq!(cpu_mask[aql / 8] & (1 << (aql % 8)), 0);
        let ext = aql as u16;
        let (mut ok, mut minor) = (false, 9u16);
        let mut table = hsa_ven_amd_aqlprofile_1_00_pfn_t::default();
        let t = (&raw mut table).cast::<c_void>();
        // SAFETY: valid out-pointers; `table` is a whole v1 table.
        unsafe {
            assert_eq!(
                agent_major_extension_supported(ext, gpu(), 1, &mut minor, &mut ok),
                HSA_STATUS_SUCCESS
            );
            assert!(ok);
            assert_eq!(minor, 0);
            assert_eq!(
                agent_extension_supported(ext, cpu(), 1, 0, &mut ok),
                HSA_STATUS_SUCCESS
            );
            assert!(!ok);
            assert_eq!(
                system_extension_supported(ext, 1, 0, &mut ok),
                HSA_STATUS_SUCCESS
            );
            assert!(ok);
            assert_eq!(
                system_get_major_extension_table(ext, 1, size_of_val(&table), t),
                HSA_STATUS_SUCCESS
            );
            assert!(table.hsa_ven_amd_aqlprofile_iterate_data.is_some());
            let mut old = hsa_ven_amd_aqlprofile_1_00_pfn_t::default();
            assert_eq!(
                system_get_extension_table(ext, 1, 0, (&raw mut old).cast()),
                HSA_STATUS_SUCCESS
            );
            assert!(old.hsa_ven_amd_aqlprofile_iterate_data.is_some());
            assert_eq!(
                system_get_major_extension_table(ext, 2, size_of_val(&table), t),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
        }
    }

    #[test]
    fn system_clock_and_build_version() {
        let read = |attribute| {
            let mut v = 0u64;
            // SAFETY: an 8-byte out-pointer.
            let status = unsafe { system_get_info(attribute, (&raw mut v).cast()) };
            assert_eq!(status, HSA_STATUS_SUCCESS);
            v
        };
        let t0 = read(HSA_SYSTEM_INFO_TIMESTAMP);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(read(HSA_SYSTEM_INFO_TIMESTAMP) > t0);
        assert_eq!(
            read(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY),
            crate::clock::TICKS_PER_SECOND
        );
        // SAFETY: the build version is a pointer to a static NUL-terminated string.
        let version =
            unsafe { CStr::from_ptr(read(HSA_AMD_SYSTEM_INFO_BUILD_VERSION) as *const c_char) };
        assert!(version.to_str().unwrap().starts_with("hsa-emu "));
    }

    unsafe extern "C" fn first_isa(isa: hsa_isa_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the Vec the test passed.
        unsafe { (*data.cast::<Vec<u64>>()).push(isa.handle) };
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn wave_size(wf: hsa_wavefront_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is a u32.
        unsafe { wavefront_get_info(wf, HSA_WAVEFRONT_INFO_SIZE, data) }
    }

    #[test]
    fn isa_round_trips_by_name() {
        let mut isas: Vec<u64> = Vec::new();
        // SAFETY: all calls: callbacks and out-pointers match their types.
        unsafe {
            assert_eq!(
                agent_iterate_isas(cpu(), Some(first_isa), (&raw mut isas).cast()),
                HSA_STATUS_SUCCESS
            );
            assert!(isas.is_empty(), "the CPU agent has no ISA");
            assert_eq!(
                agent_iterate_isas(gpu(), Some(first_isa), (&raw mut isas).cast()),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(isas.len(), 1);
            let isa = hsa_isa_t { handle: isas[0] };
            let agent_isa = agent_info(gpu(), HSA_AGENT_INFO_ISA, 8);
            assert_eq!(
                u64::from_ne_bytes(agent_isa.try_into().unwrap()),
                isa.handle
            );

            let mut len = 0u32;
            assert_eq!(
                isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, (&raw mut len).cast()),
                HSA_STATUS_SUCCESS
            );
            let (status, name) = query(len as usize, |p| {
                isa_get_info_alt(isa, HSA_ISA_INFO_NAME, p)
            });
            assert_eq!(status, HSA_STATUS_SUCCESS);
            let name = CStr::from_bytes_until_nul(&name).unwrap();
            assert_eq!(name.to_str().unwrap(), ISA_NAME);

            let mut back = hsa_isa_t { handle: 0 };
            assert_eq!(
                isa_from_name_c(name.as_ptr(), &mut back),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(back.handle, isa.handle);
            assert_eq!(
                isa_from_name_c(c"amdgcn-amd-amdhsa--gfx908".as_ptr(), &mut back),
                HSA_STATUS_ERROR_INVALID_ISA_NAME
            );
            let mut same = false;
            assert_eq!(isa_compatible(isa, back, &mut same), HSA_STATUS_SUCCESS);
            assert!(same);

            let mut size = 0u32;
            assert_eq!(
                isa_iterate_wavefronts(isa, Some(wave_size), (&raw mut size).cast()),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(size, 64);
            let mut round = 0;
            assert_eq!(
                isa_get_round_method(isa, HSA_FP_TYPE_32, HSA_FLUSH_MODE_FTZ, &mut round),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(round, HSA_ROUND_METHOD_SINGLE);
            assert_eq!(
                isa_get_round_method(isa, 3, HSA_FLUSH_MODE_FTZ, &mut round),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
        }
    }

    unsafe extern "C" fn collect_cache(cache: hsa_cache_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the Vec the test passed.
        unsafe { (*data.cast::<Vec<hsa_cache_t>>()).push(cache) };
        HSA_STATUS_SUCCESS
    }

    #[test]
    fn gpu_caches_iterate_as_l1_then_l2() {
        let mut found: Vec<hsa_cache_t> = Vec::new();
        // SAFETY: all calls: callbacks and out-pointers match their types.
        unsafe {
            assert_eq!(
                agent_iterate_caches(gpu(), Some(collect_cache), (&raw mut found).cast()),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(found.len(), 2);
            for (cache, (level, bytes)) in found.iter().zip(GPU_CACHES) {
                let (mut got_level, mut size, mut len) = (0u8, 0u32, 0u32);
                assert_eq!(
                    cache_get_info(*cache, HSA_CACHE_INFO_LEVEL, (&raw mut got_level).cast()),
                    HSA_STATUS_SUCCESS
                );
                assert_eq!(
                    cache_get_info(*cache, HSA_CACHE_INFO_SIZE, (&raw mut size).cast()),
                    HSA_STATUS_SUCCESS
                );
                assert_eq!(
                    cache_get_info(*cache, HSA_CACHE_INFO_NAME_LENGTH, (&raw mut len).cast()),
                    HSA_STATUS_SUCCESS
                );
                let (status, name) = query(len as usize + 1, |p| {
                    cache_get_info(*cache, HSA_CACHE_INFO_NAME, p)
                });
                assert_eq!(status, HSA_STATUS_SUCCESS);
                assert_eq!(
                    (got_level, size, text(&name)),
                    (level, bytes, format!("L{level}").as_str())
                );
            }
            let sizes = agent_info(gpu(), HSA_AGENT_INFO_CACHE_SIZE, 16);
            assert_eq!(u32_of(&sizes[4..]), GPU_CACHES[1].1);
            let mut v = 0u32;
            let bogus = hsa_cache_t {
                handle: found[1].handle + 1,
            };
            assert_eq!(
                cache_get_info(bogus, HSA_CACHE_INFO_SIZE, (&raw mut v).cast()),
                HSA_STATUS_ERROR_INVALID_CACHE
            );
            let mut cpu_caches: Vec<hsa_cache_t> = Vec::new();
            assert_eq!(
                agent_iterate_caches(cpu(), Some(collect_cache), (&raw mut cpu_caches).cast()),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(cpu_caches.len(), caches(topology().cpu()).len());
        }
    }
}
