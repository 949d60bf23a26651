//! Shared virtual memory: `hsa_amd_svm_attributes_set`, `_get` and `hsa_amd_svm_prefetch_async`.
//!
//! On a GPU these drive KFD's SVM ranges (HMM): access, placement and migration of ordinary
//! host memory. hsa-emu keeps the attributes and reports them back; it never moves memory and
//! enforces no access rule, since every agent's kernels run on host threads and reach all host
//! memory whatever the attributes say.
//!
//! - **Ranges.** A call's range is `ptr` rounded down and `ptr + size` rounded up to a page, as
//!   in ROCr. A null `ptr` or a zero `size` is `INVALID_ARGUMENT`; a range that is not entirely
//!   mapped in the process (a reserved, `PROT_NONE` range counts as mapped) is `HSA_STATUS_ERROR`,
//!   which is what ROCr returns when KFD refuses it. Attributes live in one table of disjoint
//!   page ranges: a set splits the ranges it partly covers and applies its changes to every
//!   page, in the list's order. Pages nobody set have KFD's defaults: fine-grained, not read
//!   only, not hive local, not read mostly, migration granularity 9 (2 MiB), no preferred or
//!   prefetch location, the CPU allowed, and each GPU allowed when
//!   `HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT` is true (`HSA_EMU_SVM_BY_DEFAULT`, default
//!   `1`) and denied otherwise. hsa-emu cannot see an application's `munmap`, so attributes
//!   stay with the addresses until memory the runtime frees (a pool allocation, an IPC
//!   attachment, a vmem reservation) takes them away.
//! - **Set** checks the list as ROCr does before changing anything: an unknown attribute, a
//!   `GLOBAL_FLAG` other than fine or coarse, or `PREFETCH_LOCATION` / `ACCESS_QUERY` (get
//!   only) is `INVALID_ARGUMENT`; an agent that is not valid (null allowed only for
//!   `PREFERRED_LOCATION`, meaning none) is `INVALID_AGENT`; a non-agent attribute given twice,
//!   or two access attributes for one agent, is `INCOMPATIBLE_ARGUMENTS`.
//!   `MIGRATION_GRANULARITY` is capped at 18 (1 GiB), as ROCr does.
//! - **Get** answers every pair or none. Over a range with several values it answers as KFD
//!   does: `GLOBAL_FLAG` is `INDETERMINATE` when fine and coarse pages are mixed, a boolean is
//!   true only if it holds on every page, the granularity is the smallest, a location is the
//!   null agent unless every page has the same one, and `ACCESS_QUERY` (the agent in `value`;
//!   the answer replaces `attribute`) is `AGENT_ACCESSIBLE` or `AGENT_ACCESSIBLE_IN_PLACE` only
//!   when every page grants it, else `AGENT_NO_ACCESS`. Booleans are 1 or 0 (ROCr returns the
//!   KFD flag bit, also non-zero). `GPU_EXEC` and the three access attributes cannot be read
//!   (`INVALID_ARGUMENT`), as with ROCr.
//! - **Prefetch** moves nothing. It records the agent as the range's `PREFETCH_LOCATION` at
//!   once (ROCr reports the most recently issued prefetch), then completes: on the copy-engine
//!   thread, once every dependency signal reads 0, it subtracts 1 from the completion signal
//!   (handle 0: none). Each prefetch waits on its own, never behind a copy or another
//!   prefetch, and no wait of that thread is unbounded. The copy fault knobs do not apply to
//!   it.

use std::collections::BTreeMap;
use std::ffi::c_void;

use parking_lot::Mutex;
use rocprof_replay_sys::*;

use super::{copy, registry};
use crate::api::Tables;
use crate::ffi::guard_status;
use crate::signals;
use crate::topology::{DeviceKind, GRANULE, Topology, topology};

/// `HSA_AMD_SVM_ATTRIB_GPU_EXEC` (ROCm 5.6+ header; settable, not readable through ROCr).
const ATTRIB_GPU_EXEC: u64 = 7;
/// KFD's default migration granularity, log2 of pages (2 MiB).
const DEFAULT_GRANULARITY: u64 = 9;
/// Largest granularity ROCr passes on, log2 of pages (1 GiB).
const MAX_GRANULARITY: u64 = 18;

// The attribute ids as the `u64` the pairs carry.
const GLOBAL_FLAG: u64 = HSA_AMD_SVM_ATTRIB_GLOBAL_FLAG as u64;
const READ_ONLY: u64 = HSA_AMD_SVM_ATTRIB_READ_ONLY as u64;
const HIVE_LOCAL: u64 = HSA_AMD_SVM_ATTRIB_HIVE_LOCAL as u64;
const MIGRATION_GRANULARITY: u64 = HSA_AMD_SVM_ATTRIB_MIGRATION_GRANULARITY as u64;
const PREFERRED_LOCATION: u64 = HSA_AMD_SVM_ATTRIB_PREFERRED_LOCATION as u64;
const PREFETCH_LOCATION: u64 = HSA_AMD_SVM_ATTRIB_PREFETCH_LOCATION as u64;
const READ_MOSTLY: u64 = HSA_AMD_SVM_ATTRIB_READ_MOSTLY as u64;
const AGENT_ACCESSIBLE: u64 = HSA_AMD_SVM_ATTRIB_AGENT_ACCESSIBLE as u64;
const AGENT_ACCESSIBLE_IN_PLACE: u64 = HSA_AMD_SVM_ATTRIB_AGENT_ACCESSIBLE_IN_PLACE as u64;
const AGENT_NO_ACCESS: u64 = HSA_AMD_SVM_ATTRIB_AGENT_NO_ACCESS as u64;
const ACCESS_QUERY: u64 = HSA_AMD_SVM_ATTRIB_ACCESS_QUERY as u64;
const FINE_GRAINED: u64 = HSA_AMD_SVM_GLOBAL_FLAG_FINE_GRAINED as u64;
const COARSE_GRAINED: u64 = HSA_AMD_SVM_GLOBAL_FLAG_COARSE_GRAINED as u64;
const INDETERMINATE: u64 = HSA_AMD_SVM_GLOBAL_FLAG_INDETERMINATE as u64;

/// Fills the SVM slots.
pub(super) fn install(t: &mut Tables) {
    t.amd.hsa_amd_svm_attributes_set_fn = Some(svm_attributes_set);
    t.amd.hsa_amd_svm_attributes_get_fn = Some(svm_attributes_get);
    t.amd.hsa_amd_svm_prefetch_async_fn = Some(svm_prefetch_async);
}

/// How an agent may reach a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// `AGENT_ACCESSIBLE`: may access, migrating on fault.
    Accessible,
    /// `AGENT_ACCESSIBLE_IN_PLACE`: may access where the memory is.
    InPlace,
    /// `AGENT_NO_ACCESS`.
    Denied,
}

impl Access {
    /// The `hsa_amd_svm_attribute_t` that names it.
    fn attribute(self) -> u64 {
        match self {
            Access::Accessible => AGENT_ACCESSIBLE,
            Access::InPlace => AGENT_ACCESSIBLE_IN_PLACE,
            Access::Denied => AGENT_NO_ACCESS,
        }
    }
}

/// The attributes of one page range.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Attrs {
    fine_grained: bool,
    read_only: bool,
    hive_local: bool,
    read_mostly: bool,
    gpu_exec: bool,
    /// Migration granularity, log2 of pages.
    granularity: u64,
    /// Agent handle, 0 for none.
    preferred: u64,
    /// Agent handle of the latest prefetch, 0 for none.
    prefetch: u64,
    /// Whether the CPU may access it.
    host: bool,
    /// GPUs whose access was set, by agent handle; the others have the default.
    gpus: BTreeMap<u64, Access>,
}

impl Default for Attrs {
    /// KFD's attributes of a range nobody configured.
    fn default() -> Attrs {
        Attrs {
            fine_grained: true,
            read_only: false,
            hive_local: false,
            read_mostly: false,
            gpu_exec: false,
            granularity: DEFAULT_GRANULARITY,
            preferred: 0,
            prefetch: 0,
            host: true,
            gpus: BTreeMap::new(),
        }
    }
}

/// One change a set (or a prefetch) makes to every page of its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    FineGrained(bool),
    ReadOnly(bool),
    HiveLocal(bool),
    ReadMostly(bool),
    GpuExec(bool),
    Granularity(u64),
    Preferred(u64),
    Prefetch(u64),
    Host(Access),
    Gpu(u64, Access),
}

impl Attrs {
    fn apply(&mut self, c: Change) {
        match c {
            Change::FineGrained(v) => self.fine_grained = v,
            Change::ReadOnly(v) => self.read_only = v,
            Change::HiveLocal(v) => self.hive_local = v,
            Change::ReadMostly(v) => self.read_mostly = v,
            Change::GpuExec(v) => self.gpu_exec = v,
            Change::Granularity(v) => self.granularity = v,
            Change::Preferred(a) => self.preferred = a,
            Change::Prefetch(a) => self.prefetch = a,
            Change::Host(a) => self.host = a != Access::Denied,
            Change::Gpu(agent, a) => {
                self.gpus.insert(agent, a);
            }
        }
    }
}

/// Page ranges with attributes: start -> (end, attributes). Disjoint, page-aligned, never
/// empty; a range with the default attributes is not kept.
type Ranges = BTreeMap<usize, (usize, Attrs)>;

/// The process's SVM attributes.
static RANGES: Mutex<Ranges> = Mutex::new(BTreeMap::new());

/// Makes a range start at `at` if one runs across it.
fn split_at(map: &mut Ranges, at: usize) {
    let Some((&start, (end, attrs))) = map.range(..at).next_back() else {
        return;
    };
    if *end <= at {
        return;
    }
    let tail = (*end, attrs.clone());
    if let Some(head) = map.get_mut(&start) {
        head.0 = at;
    }
    map.insert(at, tail);
}

/// Drops default ranges and merges equal neighbours among the ranges from the one before
/// `base` to the one starting at `end`.
fn tidy(map: &mut Ranges, base: usize, end: usize) {
    let from = map.range(..base).next_back().map_or(base, |(&s, _)| s);
    let keys: Vec<usize> = map.range(from..=end).map(|(&s, _)| s).collect();
    let default = Attrs::default();
    let mut prev: Option<usize> = None;
    for k in keys {
        let Some((k_end, k_attrs)) = map.get(&k).cloned() else {
            continue;
        };
        if k_attrs == default {
            map.remove(&k);
            prev = None;
            continue;
        }
        let merge = prev
            .and_then(|p| map.get(&p))
            .is_some_and(|(p_end, p_attrs)| *p_end == k && *p_attrs == k_attrs);
        match prev {
            Some(p) if merge => {
                map.remove(&k);
                if let Some(r) = map.get_mut(&p) {
                    r.0 = k_end;
                }
            }
            _ => prev = Some(k),
        }
    }
}

/// Applies `changes`, in order, to every page of `[base, end)`.
fn update(map: &mut Ranges, base: usize, end: usize, changes: &[Change]) {
    split_at(map, base);
    split_at(map, end);
    let covered: Vec<(usize, usize)> = map.range(base..end).map(|(&s, (e, _))| (s, *e)).collect();
    let mut cursor = base;
    for (s, e) in covered {
        if cursor < s {
            map.insert(cursor, (s, Attrs::default()));
        }
        cursor = e;
    }
    if cursor < end {
        map.insert(cursor, (end, Attrs::default()));
    }
    for (_, (_, attrs)) in map.range_mut(base..end) {
        for c in changes {
            attrs.apply(*c);
        }
    }
    tidy(map, base, end);
}

/// The attributes of every piece of `[base, end)`, the pages nobody set included.
fn pieces(map: &Ranges, base: usize, end: usize) -> Vec<Attrs> {
    let first = map
        .range(..base)
        .next_back()
        .filter(|(_, (e, _))| *e > base)
        .map_or(base, |(&s, _)| s);
    let mut out = Vec::new();
    let mut cursor = base;
    for (&s, (e, attrs)) in map.range(first..end) {
        if s > cursor {
            out.push(Attrs::default());
        }
        out.push(attrs.clone());
        cursor = *e;
    }
    if cursor < end {
        out.push(Attrs::default());
    }
    out
}

/// Forgets the attributes of `[base, base + size)`: memory the runtime freed there.
pub(super) fn forget(base: usize, size: usize) {
    let mut map = RANGES.lock();
    if map.is_empty() {
        return;
    }
    let end = base.saturating_add(size);
    split_at(&mut map, base);
    split_at(&mut map, end);
    let keys: Vec<usize> = map.range(base..end).map(|(&s, _)| s).collect();
    for k in keys {
        map.remove(&k);
    }
}

/// The page range of `[ptr, ptr + size)`: null or empty is `INVALID_ARGUMENT`, a range not
/// entirely mapped in the process `HSA_STATUS_ERROR`.
fn page_range(ptr: *mut c_void, size: usize) -> Result<(usize, usize), hsa_status_t> {
    if ptr.is_null() || size == 0 {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let base = ptr as usize & !(GRANULE - 1);
    let end = (ptr as usize)
        .checked_add(size)
        .and_then(|e| registry::round_up(e, GRANULE))
        .ok_or(HSA_STATUS_ERROR_INVALID_ARGUMENT)?;
    // SAFETY: with MS_ASYNC, msync only checks that the page-aligned range is mapped (Linux
    // starts no write-back for it) and touches no memory.
    let mapped = unsafe { libc::msync(base as *mut c_void, end - base, libc::MS_ASYNC) } == 0;
    if mapped {
        Ok((base, end))
    } else {
        Err(HSA_STATUS_ERROR)
    }
}

/// The changes a set's list asks for, checked as ROCr checks them (see the module
/// documentation).
fn parse_set(
    topo: &Topology,
    list: &[hsa_amd_svm_attribute_pair_t],
) -> Result<Vec<Change>, hsa_status_t> {
    let mut seen_attributes = 0u32;
    let mut seen_agents: Vec<u64> = Vec::new();
    let mut once = |attribute: u64| {
        let bit = 1u32 << attribute;
        if seen_attributes & bit != 0 {
            return Err(HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS);
        }
        seen_attributes |= bit;
        Ok(())
    };
    let mut changes = Vec::with_capacity(list.len());
    for pair in list {
        let (attribute, value) = (pair.attribute, pair.value);
        let change = match attribute {
            GLOBAL_FLAG => {
                once(attribute)?;
                match value {
                    FINE_GRAINED => Change::FineGrained(true),
                    COARSE_GRAINED => Change::FineGrained(false),
                    _ => return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT),
                }
            }
            READ_ONLY | HIVE_LOCAL | READ_MOSTLY | ATTRIB_GPU_EXEC => {
                once(attribute)?;
                let on = value != 0;
                match attribute {
                    READ_ONLY => Change::ReadOnly(on),
                    HIVE_LOCAL => Change::HiveLocal(on),
                    READ_MOSTLY => Change::ReadMostly(on),
                    _ => Change::GpuExec(on),
                }
            }
            MIGRATION_GRANULARITY => {
                once(attribute)?;
                Change::Granularity(value.min(MAX_GRANULARITY))
            }
            PREFERRED_LOCATION => {
                once(attribute)?;
                if value != 0 && topo.agent(hsa_agent_t { handle: value }).is_none() {
                    return Err(HSA_STATUS_ERROR_INVALID_AGENT);
                }
                Change::Preferred(value)
            }
            AGENT_ACCESSIBLE | AGENT_ACCESSIBLE_IN_PLACE | AGENT_NO_ACCESS => {
                let Some(agent) = topo.agent(hsa_agent_t { handle: value }) else {
                    return Err(HSA_STATUS_ERROR_INVALID_AGENT);
                };
                if seen_agents.contains(&value) {
                    return Err(HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS);
                }
                seen_agents.push(value);
                let access = match attribute {
                    AGENT_ACCESSIBLE => Access::Accessible,
                    AGENT_ACCESSIBLE_IN_PLACE => Access::InPlace,
                    _ => Access::Denied,
                };
                if agent.kind == DeviceKind::Cpu {
                    Change::Host(access)
                } else {
                    Change::Gpu(value, access)
                }
            }
            _ => return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT),
        };
        changes.push(change);
    }
    Ok(changes)
}

/// The answer to one get pair over `pieces`: the new `(attribute, value)`.
fn answer(
    topo: &Topology,
    pieces: &[Attrs],
    pair: hsa_amd_svm_attribute_pair_t,
) -> Result<(u64, u64), hsa_status_t> {
    let all = |f: &dyn Fn(&Attrs) -> bool| pieces.iter().all(f);
    let uniform = |f: &dyn Fn(&Attrs) -> u64| {
        let first = pieces.first().map_or(0, f);
        if pieces.iter().all(|p| f(p) == first) {
            first
        } else {
            0
        }
    };
    let (attribute, value) = (pair.attribute, pair.value);
    let flag = |b: bool| u64::from(b);
    Ok(match attribute {
        GLOBAL_FLAG => {
            let v = if all(&|p| p.fine_grained) {
                FINE_GRAINED
            } else if all(&|p| !p.fine_grained) {
                COARSE_GRAINED
            } else {
                INDETERMINATE
            };
            (attribute, v)
        }
        READ_ONLY => (attribute, flag(all(&|p| p.read_only))),
        HIVE_LOCAL => (attribute, flag(all(&|p| p.hive_local))),
        READ_MOSTLY => (attribute, flag(all(&|p| p.read_mostly))),
        MIGRATION_GRANULARITY => {
            let g = pieces.iter().map(|p| p.granularity).min();
            (attribute, g.unwrap_or(DEFAULT_GRANULARITY))
        }
        PREFERRED_LOCATION => (attribute, uniform(&|p| p.preferred)),
        PREFETCH_LOCATION => (attribute, uniform(&|p| p.prefetch)),
        ACCESS_QUERY => {
            let Some(agent) = topo.agent(hsa_agent_t { handle: value }) else {
                return Err(HSA_STATUS_ERROR_INVALID_AGENT);
            };
            let access = if agent.kind == DeviceKind::Cpu {
                if all(&|p| p.host) {
                    Access::Accessible
                } else {
                    Access::Denied
                }
            } else {
                let default = if topo.svm_by_default {
                    Access::Accessible
                } else {
                    Access::Denied
                };
                let of = |p: &Attrs| p.gpus.get(&value).copied().unwrap_or(default);
                if all(&|p| of(p) == Access::Accessible) {
                    Access::Accessible
                } else if all(&|p| of(p) == Access::InPlace) {
                    Access::InPlace
                } else {
                    Access::Denied
                }
            };
            (access.attribute(), value)
        }
        _ => return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT),
    })
}

/// The caller's attribute list (empty for a zero count); `INVALID_ARGUMENT` for a null list
/// with a count.
///
/// # Safety
/// A non-null `list` must hold `count` pairs.
unsafe fn pairs<'a>(
    list: *mut hsa_amd_svm_attribute_pair_t,
    count: usize,
) -> Result<&'a mut [hsa_amd_svm_attribute_pair_t], hsa_status_t> {
    if count == 0 {
        return Ok(&mut []);
    }
    if list.is_null() {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: the caller passes `count` pairs at `list`.
    Ok(unsafe { std::slice::from_raw_parts_mut(list, count) })
}

/// `hsa_amd_svm_attributes_set`: see the module documentation.
unsafe extern "C" fn svm_attributes_set(
    ptr: *mut c_void,
    size: usize,
    attribute_list: *mut hsa_amd_svm_attribute_pair_t,
    attribute_count: usize,
) -> hsa_status_t {
    guard_status(|| {
        // SAFETY: the caller passes `attribute_count` pairs.
        let list = match unsafe { pairs(attribute_list, attribute_count) } {
            Ok(l) => l,
            Err(e) => return e,
        };
        let changes = match parse_set(topology(), list) {
            Ok(c) => c,
            Err(e) => return e,
        };
        let (base, end) = match page_range(ptr, size) {
            Ok(r) => r,
            Err(e) => return e,
        };
        update(&mut RANGES.lock(), base, end, &changes);
        HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_svm_attributes_get`: see the module documentation.
unsafe extern "C" fn svm_attributes_get(
    ptr: *mut c_void,
    size: usize,
    attribute_list: *mut hsa_amd_svm_attribute_pair_t,
    attribute_count: usize,
) -> hsa_status_t {
    guard_status(|| {
        // SAFETY: the caller passes `attribute_count` pairs.
        let list = match unsafe { pairs(attribute_list, attribute_count) } {
            Ok(l) => l,
            Err(e) => return e,
        };
        let (base, end) = match page_range(ptr, size) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let pieces = pieces(&RANGES.lock(), base, end);
        let topo = topology();
        let answers: Result<Vec<(u64, u64)>, hsa_status_t> =
            list.iter().map(|p| answer(topo, &pieces, *p)).collect();
        match answers {
            Ok(answers) => {
                for (pair, (attribute, value)) in list.iter_mut().zip(answers) {
                    pair.attribute = attribute;
                    pair.value = value;
                }
                HSA_STATUS_SUCCESS
            }
            Err(e) => e,
        }
    })
}

/// `hsa_amd_svm_prefetch_async`: see the module documentation. An invalid agent is
/// `INVALID_AGENT`; a null dependency list with a count `INVALID_ARGUMENT`; a dependency or a
/// non-zero completion signal that is not a live signal `INVALID_SIGNAL`.
unsafe extern "C" fn svm_prefetch_async(
    ptr: *mut c_void,
    size: usize,
    agent: hsa_agent_t,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    guard_status(|| {
        let Some(agent_index) = topology().agent_index(agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        if num_dep_signals > 0 && dep_signals.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let deps = if num_dep_signals == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller passes `num_dep_signals` signals.
            unsafe { std::slice::from_raw_parts(dep_signals, num_dep_signals as usize) }.to_vec()
        };
        let completion_bad = completion_signal.handle != 0 && !signals::is_valid(completion_signal);
        if completion_bad || deps.iter().any(|d| !signals::is_valid(*d)) {
            return HSA_STATUS_ERROR_INVALID_SIGNAL;
        }
        let (base, end) = match page_range(ptr, size) {
            Ok(r) => r,
            Err(e) => return e,
        };
        update(
            &mut RANGES.lock(),
            base,
            end,
            &[Change::Prefetch(agent.handle)],
        );
        copy::submit_marker(agent_index, deps, completion_signal)
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A page-aligned private mapping of `pages` pages for one test (no other test uses its
    /// addresses, so the process-wide attribute table is not shared between tests).
    /// `pages` granules of a mapping of their own, with an unused granule on either side: the
    /// attribute ranges are process-wide, and two tests' pages mapped back to back would merge
    /// their neighbouring ranges.
    struct Pages {
        base: usize,
        size: usize,
    }

    impl Pages {
        fn new(pages: usize) -> Pages {
            let size = pages * GRANULE;
            let mapped = registry::map_anonymous(size + 2 * GRANULE, false).expect("mmap");
            Pages {
                base: mapped + GRANULE,
                size,
            }
        }

        fn at(&self, page: usize) -> *mut c_void {
            (self.base + page * GRANULE) as *mut c_void
        }
    }

    impl Drop for Pages {
        fn drop(&mut self) {
            forget(self.base, self.size);
            registry::unmap(self.base - GRANULE, self.size + 2 * GRANULE);
        }
    }

    fn pair(attribute: u64, value: u64) -> hsa_amd_svm_attribute_pair_t {
        hsa_amd_svm_attribute_pair_t { attribute, value }
    }

    fn set(ptr: *mut c_void, size: usize, list: &mut [hsa_amd_svm_attribute_pair_t]) -> u32 {
        // SAFETY: `list` holds its length of pairs.
        unsafe { svm_attributes_set(ptr, size, list.as_mut_ptr(), list.len()) }
    }

    fn get(
        ptr: *mut c_void,
        size: usize,
        list: &mut [hsa_amd_svm_attribute_pair_t],
    ) -> Result<Vec<(u64, u64)>, hsa_status_t> {
        // SAFETY: `list` holds its length of pairs.
        match unsafe { svm_attributes_get(ptr, size, list.as_mut_ptr(), list.len()) } {
            HSA_STATUS_SUCCESS => Ok(list.iter().map(|p| (p.attribute, p.value)).collect()),
            e => Err(e),
        }
    }

    fn gpu() -> u64 {
        let topo = topology();
        let gpu = topo.agents.iter().find(|a| a.kind == DeviceKind::Gpu);
        gpu.expect("the default machine has a GPU").handle.handle
    }

    fn cpu() -> u64 {
        topology().cpu().handle.handle
    }

    #[test]
    fn set_then_get_round_trips_and_mixed_ranges_answer_like_kfd() {
        let mem = Pages::new(4);
        let all = 4 * GRANULE;
        // Defaults first.
        let mut q = [
            pair(GLOBAL_FLAG, 9),
            pair(READ_ONLY, 9),
            pair(MIGRATION_GRANULARITY, 0),
            pair(PREFERRED_LOCATION, 9),
            pair(PREFETCH_LOCATION, 9),
            pair(ACCESS_QUERY, cpu()),
        ];
        assert_eq!(
            get(mem.at(0), all, &mut q),
            Ok(vec![
                (GLOBAL_FLAG, FINE_GRAINED),
                (READ_ONLY, 0),
                (MIGRATION_GRANULARITY, DEFAULT_GRANULARITY),
                (PREFERRED_LOCATION, 0),
                (PREFETCH_LOCATION, 0),
                (AGENT_ACCESSIBLE, cpu()),
            ])
        );
        // Pages 1 and 2 (an unaligned pointer and size cover both).
        let mut s = [
            pair(GLOBAL_FLAG, COARSE_GRAINED),
            pair(READ_ONLY, 1),
            pair(MIGRATION_GRANULARITY, 40),
            pair(PREFERRED_LOCATION, gpu()),
            pair(AGENT_ACCESSIBLE_IN_PLACE, gpu()),
            pair(AGENT_NO_ACCESS, cpu()),
        ];
        // SAFETY: inside the mapping.
        let unaligned = unsafe { mem.at(1).cast::<u8>().add(100) }.cast::<c_void>();
        assert_eq!(
            set(unaligned, 2 * GRANULE - 200, &mut s),
            HSA_STATUS_SUCCESS
        );
        let mut q = [
            pair(GLOBAL_FLAG, 0),
            pair(READ_ONLY, 0),
            pair(MIGRATION_GRANULARITY, 0),
            pair(PREFERRED_LOCATION, 0),
            pair(ACCESS_QUERY, gpu()),
            pair(ACCESS_QUERY, cpu()),
        ];
        assert_eq!(
            get(mem.at(2), GRANULE, &mut q),
            Ok(vec![
                (GLOBAL_FLAG, COARSE_GRAINED),
                (READ_ONLY, 1),
                (MIGRATION_GRANULARITY, MAX_GRANULARITY),
                (PREFERRED_LOCATION, gpu()),
                (AGENT_ACCESSIBLE_IN_PLACE, gpu()),
                (AGENT_NO_ACCESS, cpu()),
            ])
        );
        // Over pages 0..4 the values are mixed.
        let mut q = [
            pair(GLOBAL_FLAG, 0),
            pair(READ_ONLY, 0),
            pair(MIGRATION_GRANULARITY, 0),
            pair(PREFERRED_LOCATION, 0),
            pair(ACCESS_QUERY, gpu()),
        ];
        let default_gpu = if topology().svm_by_default {
            AGENT_ACCESSIBLE
        } else {
            AGENT_NO_ACCESS
        };
        assert_eq!(
            get(mem.at(0), all, &mut q),
            Ok(vec![
                (GLOBAL_FLAG, INDETERMINATE),
                (READ_ONLY, 0),
                (MIGRATION_GRANULARITY, DEFAULT_GRANULARITY),
                (PREFERRED_LOCATION, 0),
                (AGENT_NO_ACCESS, gpu()),
            ])
        );
        let mut q = [pair(ACCESS_QUERY, gpu())];
        assert_eq!(
            get(mem.at(3), GRANULE, &mut q),
            Ok(vec![(default_gpu, gpu())])
        );
    }

    #[test]
    fn neighbouring_ranges_merge_and_default_ranges_are_dropped() {
        let mem = Pages::new(3);
        let mine = || -> Vec<(usize, usize)> {
            RANGES
                .lock()
                .range(mem.base..mem.base + 3 * GRANULE)
                .map(|(&s, (e, _))| (s - mem.base, *e - mem.base))
                .collect()
        };
        let mut on = [pair(READ_MOSTLY, 1)];
        assert_eq!(set(mem.at(0), GRANULE, &mut on), HSA_STATUS_SUCCESS);
        assert_eq!(set(mem.at(2), GRANULE, &mut on), HSA_STATUS_SUCCESS);
        assert_eq!(mine(), vec![(0, GRANULE), (2 * GRANULE, 3 * GRANULE)]);
        assert_eq!(set(mem.at(1), GRANULE, &mut on), HSA_STATUS_SUCCESS);
        assert_eq!(mine(), vec![(0, 3 * GRANULE)]);
        let mut off = [pair(READ_MOSTLY, 0)];
        assert_eq!(set(mem.at(1), GRANULE, &mut off), HSA_STATUS_SUCCESS);
        assert_eq!(mine(), vec![(0, GRANULE), (2 * GRANULE, 3 * GRANULE)]);
        assert_eq!(set(mem.at(0), 3 * GRANULE, &mut off), HSA_STATUS_SUCCESS);
        assert_eq!(mine(), vec![]);
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_changes() {
        let mem = Pages::new(2);
        let size = 2 * GRANULE;
        let bogus = 0xdead_u64;
        let cases: Vec<(Vec<hsa_amd_svm_attribute_pair_t>, u32)> = vec![
            (
                vec![pair(AGENT_ACCESSIBLE, bogus)],
                HSA_STATUS_ERROR_INVALID_AGENT,
            ),
            (
                vec![pair(PREFERRED_LOCATION, bogus)],
                HSA_STATUS_ERROR_INVALID_AGENT,
            ),
            (
                vec![pair(READ_ONLY, 1), pair(AGENT_NO_ACCESS, bogus)],
                HSA_STATUS_ERROR_INVALID_AGENT,
            ),
            (
                vec![pair(GLOBAL_FLAG, INDETERMINATE)],
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
            ),
            (
                vec![pair(PREFETCH_LOCATION, gpu())],
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
            ),
            (
                vec![pair(ACCESS_QUERY, gpu())],
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
            ),
            (vec![pair(0x999, 0)], HSA_STATUS_ERROR_INVALID_ARGUMENT),
            (
                vec![pair(READ_ONLY, 1), pair(READ_ONLY, 0)],
                HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
            ),
            (
                vec![pair(AGENT_ACCESSIBLE, gpu()), pair(AGENT_NO_ACCESS, gpu())],
                HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
            ),
        ];
        for (mut list, status) in cases {
            assert_eq!(set(mem.at(0), size, &mut list), status, "{list:?}");
        }
        // Nothing was recorded by the refused calls.
        let mut q = [pair(READ_ONLY, 7)];
        assert_eq!(get(mem.at(0), size, &mut q), Ok(vec![(READ_ONLY, 0)]));
        assert!(
            RANGES
                .lock()
                .range(mem.base..mem.base + size)
                .next()
                .is_none()
        );

        // Null and empty ranges, unmapped memory, null lists.
        let mut ok = [pair(READ_ONLY, 1)];
        assert_eq!(
            set(std::ptr::null_mut(), size, &mut ok),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            set(mem.at(0), 0, &mut ok),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        // The page above NULL: below `vm.mmap_min_addr`, never mapped. (Unmapping a page of our
        // own would race with the other tests, whose mappings may land there.)
        let unmapped = GRANULE;
        assert_eq!(
            set(unmapped as *mut c_void, GRANULE, &mut ok),
            HSA_STATUS_ERROR
        );
        assert_eq!(
            get(unmapped as *mut c_void, GRANULE, &mut q),
            Err(HSA_STATUS_ERROR)
        );
        // SAFETY: a null list with a count must be refused.
        let st = unsafe { svm_attributes_set(mem.at(0), size, std::ptr::null_mut(), 1) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        // Get: write-only attributes, an invalid agent to query; the list is left alone.
        let mut wrong = [pair(READ_ONLY, 5), pair(AGENT_ACCESSIBLE, gpu())];
        assert_eq!(
            get(mem.at(0), size, &mut wrong),
            Err(HSA_STATUS_ERROR_INVALID_ARGUMENT)
        );
        assert_eq!(wrong[0].value, 5);
        let mut wrong = [pair(ACCESS_QUERY, bogus)];
        assert_eq!(
            get(mem.at(0), size, &mut wrong),
            Err(HSA_STATUS_ERROR_INVALID_AGENT)
        );
        let mut exec = [pair(ATTRIB_GPU_EXEC, 0)];
        assert_eq!(
            get(mem.at(0), size, &mut exec),
            Err(HSA_STATUS_ERROR_INVALID_ARGUMENT)
        );
        assert_eq!(set(mem.at(0), size, &mut exec), HSA_STATUS_SUCCESS);
    }

    #[test]
    fn forget_drops_the_attributes_of_freed_memory() {
        let mem = Pages::new(3);
        let mut s = [pair(READ_MOSTLY, 1)];
        assert_eq!(set(mem.at(0), 3 * GRANULE, &mut s), HSA_STATUS_SUCCESS);
        forget(mem.base + GRANULE, GRANULE);
        let mut q = [pair(READ_MOSTLY, 0)];
        assert_eq!(get(mem.at(0), GRANULE, &mut q), Ok(vec![(READ_MOSTLY, 1)]));
        assert_eq!(get(mem.at(1), GRANULE, &mut q), Ok(vec![(READ_MOSTLY, 0)]));
        assert_eq!(get(mem.at(2), GRANULE, &mut q), Ok(vec![(READ_MOSTLY, 1)]));
    }

    #[test]
    fn prefetch_completes_after_its_dependency_and_records_the_location() {
        let mem = Pages::new(2);
        let gate = signals::create(1).unwrap();
        let done = signals::create(1).unwrap();
        let agent = hsa_agent_t { handle: gpu() };
        // SAFETY: a live mapping, one live dependency, a live completion signal.
        let st = unsafe { svm_prefetch_async(mem.at(0), 2 * GRANULE, agent, 1, &gate, done) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let mut q = [pair(PREFETCH_LOCATION, 0)];
        assert_eq!(
            get(mem.at(1), GRANULE, &mut q),
            Ok(vec![(PREFETCH_LOCATION, gpu())])
        );
        let soon = Some(Instant::now() + Duration::from_millis(50));
        assert_eq!(signals::wait(done, HSA_SIGNAL_CONDITION_EQ, 0, soon), 1);
        signals::store(gate, 0);
        let deadline = Some(Instant::now() + Duration::from_secs(5));
        assert_eq!(signals::wait(done, HSA_SIGNAL_CONDITION_EQ, 0, deadline), 0);

        // No dependencies and no completion signal: accepted.
        let cpu_agent = hsa_agent_t { handle: cpu() };
        // SAFETY: as above, without signals.
        let st = unsafe {
            svm_prefetch_async(
                mem.at(1),
                GRANULE,
                cpu_agent,
                0,
                std::ptr::null(),
                hsa_signal_t { handle: 0 },
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(
            get(mem.at(0), 2 * GRANULE, &mut q),
            Ok(vec![(PREFETCH_LOCATION, 0)])
        );

        // Refusals.
        let bogus = hsa_agent_t { handle: 0xdead };
        let dead = hsa_signal_t { handle: 8 };
        // SAFETY: arguments the function must refuse without using them.
        unsafe {
            assert_eq!(
                svm_prefetch_async(mem.at(0), GRANULE, bogus, 0, std::ptr::null(), done),
                HSA_STATUS_ERROR_INVALID_AGENT
            );
            assert_eq!(
                svm_prefetch_async(mem.at(0), GRANULE, agent, 1, std::ptr::null(), done),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                svm_prefetch_async(mem.at(0), GRANULE, agent, 1, &dead, done),
                HSA_STATUS_ERROR_INVALID_SIGNAL
            );
            assert_eq!(
                svm_prefetch_async(mem.at(0), GRANULE, agent, 0, std::ptr::null(), dead),
                HSA_STATUS_ERROR_INVALID_SIGNAL
            );
            assert_eq!(
                svm_prefetch_async(std::ptr::null_mut(), GRANULE, agent, 0, &gate, done),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
        }
        signals::destroy(gate);
        signals::destroy(done);
    }
}
