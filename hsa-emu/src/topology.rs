//! The emulated machine: one CPU agent and `HSA_EMU_GPUS` GPU agents, with their memory pools.
//!
//! | agent | pools (in iteration order) |
//! |---|---|
//! | CPU (node 0) | system fine-grained (`FINE_GRAINED`), kernarg (`KERNARG_INIT \| FINE_GRAINED`), system coarse-grained (`COARSE_GRAINED`) |
//! | GPU *i* (node *i*+1) | VRAM (`COARSE_GRAINED`, `HSA_EMU_VRAM_MB` MiB, accounted), fine-grained device memory (`FINE_GRAINED`), group segment (`SEGMENT_GROUP`, 64 KiB, not allocatable) |
//!
//! Handles are small tagged integers, so validating a handle is an index check. Regions
//! (`hsa_region_t`) are the same objects as pools and share their handles, as in ROCr.
//!
//! `HSA_EMU_SVM_BY_DEFAULT` (`1` by default, or `0`) says whether the GPUs reach all system
//! memory without being granted it (`HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT`);
//! `HSA_EMU_SVM_SUPPORTED` (`1` by default, or `0`) whether the runtime says it supports
//! shared virtual memory at all (`HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED`: a kernel without HMM).
//! HIP chooses its managed-memory path by the latter.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use rocprof_replay_sys::*;

/// Tag in the upper bits of every agent handle.
const AGENT_TAG: u64 = 0x4147_0000_0000; // "AG"
/// Tag in the upper bits of every pool (and region) handle.
const POOL_TAG: u64 = 0x504C_0000_0000; // "PL"
/// Bits that hold the index.
const INDEX_MASK: u64 = 0xFFFF_FFFF;

/// Default VRAM per GPU in MiB (`HSA_EMU_VRAM_MB`).
pub(crate) const DEFAULT_VRAM_MB: usize = 4096;
/// Size of the group segment per work-group.
pub(crate) const GROUP_SEGMENT_BYTES: usize = 64 * 1024;
/// Allocation granule of every pool (a page).
pub(crate) const GRANULE: usize = 4096;
/// Alignment of every pool allocation.
pub(crate) const ALLOC_ALIGNMENT: usize = 4096;
/// Most GPU agents `HSA_EMU_GPUS` may ask for.
pub(crate) const MAX_GPUS: usize = 16;
/// The variable that sets [`Topology::svm_by_default`].
const SVM_BY_DEFAULT_ENV: &str = "HSA_EMU_SVM_BY_DEFAULT";
/// The variable that sets [`Topology::svm_supported`].
const SVM_SUPPORTED_ENV: &str = "HSA_EMU_SVM_SUPPORTED";

/// CPU or GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeviceKind {
    /// The host processor.
    Cpu,
    /// An emulated GPU.
    Gpu,
}

/// What a pool is for; decides its flags and accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolKind {
    /// Host memory visible to every agent (fine-grained).
    SystemFine,
    /// Host memory for kernel arguments (fine-grained, `KERNARG_INIT`).
    Kernarg,
    /// Host memory, coarse-grained.
    SystemCoarse,
    /// A GPU's local memory (coarse-grained, capacity-accounted).
    Vram,
    /// A GPU's fine-grained local memory.
    DeviceFine,
    /// A GPU's group (LDS) segment: described, not allocatable.
    Group,
}

/// One agent.
#[derive(Debug)]
pub(crate) struct Agent {
    /// Its handle.
    pub(crate) handle: hsa_agent_t,
    /// CPU or GPU.
    pub(crate) kind: DeviceKind,
    /// NUMA-style node id (CPU 0, GPU i is i + 1).
    pub(crate) node: u32,
    /// For GPUs, 0-based index among GPUs.
    pub(crate) gpu_index: Option<u32>,
    /// Indices into [`Topology::pools`] in iteration order.
    pub(crate) pools: Vec<usize>,
}

/// One memory pool (and region).
#[derive(Debug)]
pub(crate) struct Pool {
    /// Its handle (also its `hsa_region_t` handle).
    pub(crate) handle: hsa_amd_memory_pool_t,
    /// Index of the owning agent in [`Topology::agents`].
    pub(crate) owner: usize,
    /// What the pool is for.
    pub(crate) kind: PoolKind,
    /// Capacity in bytes reported by `HSA_AMD_MEMORY_POOL_INFO_SIZE`.
    pub(crate) size: usize,
    /// Bytes currently allocated (only enforced for [`PoolKind::Vram`]).
    pub(crate) used: AtomicUsize,
}

impl Pool {
    /// `HSA_AMD_MEMORY_POOL_INFO_SEGMENT`.
    pub(crate) fn segment(&self) -> hsa_amd_segment_t {
        match self.kind {
            PoolKind::Group => HSA_AMD_SEGMENT_GROUP,
            _ => HSA_AMD_SEGMENT_GLOBAL,
        }
    }

    /// `HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS` (0 for non-global segments).
    pub(crate) fn global_flags(&self) -> u32 {
        match self.kind {
            PoolKind::SystemFine | PoolKind::DeviceFine => {
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
            }
            PoolKind::Kernarg => {
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT
                    | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
            }
            PoolKind::SystemCoarse | PoolKind::Vram => {
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
            }
            PoolKind::Group => 0,
        }
    }

    /// Whether `hsa_amd_memory_pool_allocate` may allocate from it.
    pub(crate) fn alloc_allowed(&self) -> bool {
        self.kind != PoolKind::Group
    }

    /// Whether the capacity is enforced (allocation past it fails with OUT_OF_RESOURCES).
    pub(crate) fn accounted(&self) -> bool {
        self.kind == PoolKind::Vram
    }

    /// Whether every agent may access it without `hsa_amd_agents_allow_access`.
    pub(crate) fn accessible_by_all(&self) -> bool {
        matches!(self.kind, PoolKind::Kernarg)
    }

    /// Tries to account `bytes` against the capacity; `false` when it does not fit.
    pub(crate) fn reserve(&self, bytes: usize) -> bool {
        if !self.accounted() {
            self.used.fetch_add(bytes, Ordering::Relaxed);
            return true;
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.size)
            })
            .is_ok()
    }

    /// Returns `bytes` to the pool.
    pub(crate) fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// The whole machine.
#[derive(Debug)]
pub(crate) struct Topology {
    /// Agents: the CPU first, then the GPUs.
    pub(crate) agents: Vec<Agent>,
    /// Every pool of every agent.
    pub(crate) pools: Vec<Pool>,
    /// Whether every GPU may access all system memory without `hsa_amd_svm_attributes_set` or
    /// `hsa_amd_memory_lock` (as with XNACK on, or an APU): what
    /// `HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT` reports. Not enforced: kernels run on the
    /// host and reach all of its memory either way.
    pub(crate) svm_by_default: bool,
    /// What `HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED` reports (the `hsa_amd_svm_*` functions work
    /// either way). HIP takes `hipMallocManaged` memory through SVM when it is true, from the
    /// coarse-grained system pool when it is false.
    pub(crate) svm_supported: bool,
}

/// Why the environment could not configure the machine.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ConfigError(pub(crate) String);

fn parse_env(name: &str, default: usize, min: usize, max: usize) -> Result<usize, ConfigError> {
    parse_value(name, std::env::var(name).ok().as_deref(), default, min, max)
}

/// The value of variable `name` (`None`: unset): an integer in `min..=max`, else an error.
fn parse_value(
    name: &str,
    value: Option<&str>,
    default: usize,
    min: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(ConfigError(format!(
                "{name}={v:?}: expected an integer in {min}..={max}"
            ))),
        },
    }
}

/// [`Topology::svm_by_default`] for a value of `HSA_EMU_SVM_BY_DEFAULT` (`None`: unset, true).
pub(crate) fn svm_by_default(value: Option<&str>) -> Result<bool, ConfigError> {
    Ok(parse_value(SVM_BY_DEFAULT_ENV, value, 1, 0, 1)? == 1)
}

/// [`Topology::svm_supported`] for a value of `HSA_EMU_SVM_SUPPORTED` (`None`: unset, true).
pub(crate) fn svm_supported(value: Option<&str>) -> Result<bool, ConfigError> {
    Ok(parse_value(SVM_SUPPORTED_ENV, value, 1, 0, 1)? == 1)
}

impl Topology {
    /// Builds the machine from `HSA_EMU_GPUS` (default 1), `HSA_EMU_VRAM_MB` (default 4096),
    /// `HSA_EMU_SVM_BY_DEFAULT` and `HSA_EMU_SVM_SUPPORTED` (default 1 both).
    pub(crate) fn from_env() -> Result<Topology, ConfigError> {
        let gpus = parse_env("HSA_EMU_GPUS", 1, 0, MAX_GPUS)?;
        let vram_mb = parse_env("HSA_EMU_VRAM_MB", DEFAULT_VRAM_MB, 1, 1 << 24)?;
        let svm = svm_by_default(std::env::var(SVM_BY_DEFAULT_ENV).ok().as_deref())?;
        let supported = svm_supported(std::env::var(SVM_SUPPORTED_ENV).ok().as_deref())?;
        Ok(Topology {
            svm_by_default: svm,
            svm_supported: supported,
            ..Topology::new(gpus, vram_mb << 20)
        })
    }

    /// Builds a machine with `gpus` GPU agents of `vram_bytes` each (system memory reachable
    /// by default).
    pub(crate) fn new(gpus: usize, vram_bytes: usize) -> Topology {
        let host_bytes = host_memory_bytes();
        let mut agents = Vec::with_capacity(gpus + 1);
        let mut pools = Vec::new();
        let mut add_agent =
            |kind: DeviceKind, gpu_index: Option<u32>, kinds: &[(PoolKind, usize)]| {
                let index = agents.len();
                let mut agent = Agent {
                    handle: hsa_agent_t {
                        handle: AGENT_TAG | (index as u64 + 1),
                    },
                    kind,
                    node: index as u32,
                    gpu_index,
                    pools: Vec::new(),
                };
                for &(pool_kind, size) in kinds {
                    let p = pools.len();
                    pools.push(Pool {
                        handle: hsa_amd_memory_pool_t {
                            handle: POOL_TAG | (p as u64 + 1),
                        },
                        owner: index,
                        kind: pool_kind,
                        size,
                        used: AtomicUsize::new(0),
                    });
                    agent.pools.push(p);
                }
                agents.push(agent);
            };
        add_agent(
            DeviceKind::Cpu,
            None,
            &[
                (PoolKind::SystemFine, host_bytes),
                (PoolKind::Kernarg, host_bytes),
                (PoolKind::SystemCoarse, host_bytes),
            ],
        );
        for g in 0..gpus {
            add_agent(
                DeviceKind::Gpu,
                Some(g as u32),
                &[
                    (PoolKind::Vram, vram_bytes),
                    (PoolKind::DeviceFine, vram_bytes),
                    (PoolKind::Group, GROUP_SEGMENT_BYTES),
                ],
            );
        }
        Topology {
            agents,
            pools,
            svm_by_default: true,
            svm_supported: true,
        }
    }

    /// The agent behind a handle.
    pub(crate) fn agent(&self, handle: hsa_agent_t) -> Option<&Agent> {
        decode(handle.handle, AGENT_TAG).and_then(|i| self.agents.get(i))
    }

    /// Index of the agent behind a handle.
    pub(crate) fn agent_index(&self, handle: hsa_agent_t) -> Option<usize> {
        decode(handle.handle, AGENT_TAG).filter(|i| *i < self.agents.len())
    }

    /// The pool behind a handle.
    pub(crate) fn pool(&self, handle: hsa_amd_memory_pool_t) -> Option<&Pool> {
        decode(handle.handle, POOL_TAG).and_then(|i| self.pools.get(i))
    }

    /// The pool behind a region handle (regions and pools are the same objects).
    pub(crate) fn region(&self, region: hsa_region_t) -> Option<&Pool> {
        self.pool(hsa_amd_memory_pool_t {
            handle: region.handle,
        })
    }

    /// The owning agent of a pool.
    pub(crate) fn owner(&self, pool: &Pool) -> &Agent {
        &self.agents[pool.owner]
    }

    /// The CPU agent.
    pub(crate) fn cpu(&self) -> &Agent {
        &self.agents[0]
    }

    /// The GPU agents (tests pick agents through it).
    #[cfg(test)]
    pub(crate) fn gpus(&self) -> impl Iterator<Item = &Agent> {
        self.agents.iter().filter(|a| a.kind == DeviceKind::Gpu)
    }

    /// The first pool of `agent` of the given kind.
    pub(crate) fn pool_of(&self, agent: &Agent, kind: PoolKind) -> Option<&Pool> {
        agent
            .pools
            .iter()
            .map(|&p| &self.pools[p])
            .find(|p| p.kind == kind)
    }
}

fn decode(handle: u64, tag: u64) -> Option<usize> {
    if handle & !INDEX_MASK != tag || handle & INDEX_MASK == 0 {
        return None;
    }
    Some((handle & INDEX_MASK) as usize - 1)
}

/// Physical memory of the host, the capacity reported for host pools.
fn host_memory_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && page > 0 {
        pages as usize * page as usize
    } else {
        16 << 30
    }
}

/// The process's machine, built on first use. A bad environment falls back to the defaults
/// and the error is kept for `hsa_init` to report.
pub(crate) fn topology() -> &'static Topology {
    TOPOLOGY.get_or_init(|| match Topology::from_env() {
        Ok(t) => t,
        Err(e) => {
            let _ = CONFIG_ERROR.set(e);
            Topology::new(1, DEFAULT_VRAM_MB << 20)
        }
    })
}

/// The configuration error met while building [`topology`], if any.
pub(crate) fn config_error() -> Option<&'static ConfigError> {
    topology();
    CONFIG_ERROR.get()
}

static TOPOLOGY: OnceLock<Topology> = OnceLock::new();
static CONFIG_ERROR: OnceLock<ConfigError> = OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_foreign_handles_are_rejected() {
        let t = Topology::new(2, 1 << 20);
        assert_eq!(t.agents.len(), 3);
        for (i, a) in t.agents.iter().enumerate() {
            assert_eq!(t.agent_index(a.handle), Some(i));
        }
        for p in &t.pools {
            assert!(std::ptr::eq(t.pool(p.handle).unwrap(), p));
        }
        assert!(t.agent(hsa_agent_t { handle: 0 }).is_none());
        assert!(
            t.agent(hsa_agent_t {
                handle: AGENT_TAG | 99
            })
            .is_none()
        );
        assert!(
            t.agent(hsa_agent_t {
                handle: t.pools[0].handle.handle
            })
            .is_none()
        );
        assert!(
            t.pool(hsa_amd_memory_pool_t {
                handle: t.agents[1].handle.handle
            })
            .is_none()
        );
    }

    #[test]
    fn svm_by_default_knob_maps_to_the_info_value() {
        assert_eq!(svm_by_default(None), Ok(true));
        assert_eq!(svm_by_default(Some("1")), Ok(true));
        assert_eq!(svm_by_default(Some(" 0 ")), Ok(false));
        for bad in ["2", "yes", ""] {
            let err = svm_by_default(Some(bad)).unwrap_err();
            assert!(err.0.starts_with("HSA_EMU_SVM_BY_DEFAULT="), "{err:?}");
        }
        assert!(Topology::new(1, 1 << 20).svm_by_default);
        assert_eq!(svm_supported(None), Ok(true));
        assert_eq!(svm_supported(Some("0")), Ok(false));
        assert!(svm_supported(Some("yes")).is_err());
        assert!(Topology::new(1, 1 << 20).svm_supported);
    }

    #[test]
    fn vram_accounting_refuses_past_capacity() {
        let t = Topology::new(1, 1 << 20);
        let vram = t.pool_of(&t.agents[1], PoolKind::Vram).unwrap();
        assert!(vram.reserve(1 << 19));
        assert!(vram.reserve(1 << 19));
        assert!(!vram.reserve(1));
        vram.release(1 << 19);
        assert!(vram.reserve(1));
    }

    #[test]
    fn pool_flags_follow_their_kind() {
        let t = Topology::new(1, 1 << 20);
        let cpu = t.cpu();
        let kernarg = t.pool_of(cpu, PoolKind::Kernarg).unwrap();
        assert_ne!(
            kernarg.global_flags() & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
            0
        );
        let gpu = &t.agents[1];
        let vram = t.pool_of(gpu, PoolKind::Vram).unwrap();
        assert_eq!(
            vram.global_flags(),
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
        );
        assert!(!t.pool_of(gpu, PoolKind::Group).unwrap().alloc_allowed());
    }
}
