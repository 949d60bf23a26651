//! Dispatches that are never replayed, whatever the policy asks: the decline rules both
//! backends share, checked before the window takes the agent (no lock, no drain, no snapshot).
//!
//! - **Communication kernels** (NCCL, RCCL, NVSHMEM, MSCCL++): they wait for flags that peer
//!   GPUs or processes write once per collective. A second pass would wait for writes that never
//!   come (Nsight Compute is known to hang there), so they run once, the ordinary way.
//! - What the backend knows ([`ReplayTarget::refusal`](super::window::ReplayTarget::refusal)):
//!   work behind a stream memory wait (CUDA `cuStreamWaitValue*`, `cuStreamBatchMemOp`: the
//!   stream waits on memory another agent writes), or arguments that point into memory the
//!   engine cannot restore (host-visible memory — CUDA pinned, registered and managed memory,
//!   HSA fine-grained memory the host cannot read and shared virtual memory: the application's
//!   host threads can read and write it at any time, so its writes would be repeated per pass
//!   or a restore would race them; memory another process, GPU or device writes — imports and
//!   exports, `foreign_memory`; another context's or GPU's allocation, `peer_memory`).

use crate::dispatch::DispatchInfo;
use crate::policy::DeclineReason;

/// Substrings of kernel names (mangled or not) of the communication libraries.
const COMMUNICATION_KERNELS: &[&str] = &[
    "ncclKernel",
    "ncclDevKernel",
    "rcclKernel",
    "nvshmemi_",
    "nvshmem_",
    "mscclpp",
    "mscclKernel",
];

/// Whether `kernel` is a kernel of a communication library.
pub(crate) fn is_communication_kernel(kernel: &str) -> bool {
    COMMUNICATION_KERNELS.iter().any(|p| kernel.contains(p))
}

/// Why `info` must not be replayed, if it must not; `backend` is what the backend knows.
pub(crate) fn refuses(
    info: &DispatchInfo,
    backend: Option<DeclineReason>,
) -> Option<DeclineReason> {
    if info
        .kernel_name
        .as_deref()
        .is_some_and(is_communication_kernel)
    {
        return Some(DeclineReason::CommunicationKernel);
    }
    backend
}

/// What a dispatch's words may reach that no window restores, as one backend knows it: the
/// lookups behind [`reach`] and [`reach_unread`]. Each answers from the backend's own records of
/// its runtime's memory; the order they are asked in, and the reason each leads to, are the
/// engine's, the same on both backends.
///
/// `words` are a dispatch's argument bytes (a kernarg segment) or words stored in module
/// variables; a pointer is an 8-byte-aligned word ([`first_pointer_into`], [`address_words`]).
pub(crate) trait MemoryReach {
    /// The first word that points into memory another process or device writes (CUDA IPC
    /// imports and exports, pool imports, mappings of imported handles; HSA IPC and
    /// interop imports): `foreign_memory`.
    fn foreign(&self, words: &[u8]) -> Option<usize>;
    /// The first word that points into an allocation another agent of the process owns
    /// (another CUDA context, another HSA GPU), with that agent: `peer_memory` — the window
    /// drains, fences and captures only its own agent's memory.
    fn peer(&self, words: &[u8]) -> Option<(usize, u64)>;
    /// The first word that names memory no window captures and the host cannot be watched
    /// through, with the reason (CUDA surface objects: `array_memory`; HSA shared virtual
    /// memory: `host_memory`).
    fn uncaptured(&self, words: &[u8]) -> Option<(usize, DeclineReason)>;
    /// The first word that is system memory the agent reaches without any allocation call
    /// (pageable memory on a device with HMM or ATS; everything on a runtime that makes all
    /// system memory GPU-accessible): `host_memory`.
    fn system(&self, words: &[u8]) -> Option<usize>;
    /// The host-visible memory the words point into, as host-readable ranges (host address,
    /// length) the window checksums around the first pass (pinned and registered memory; HSA
    /// host and fine-grained memory the host reads); `Err` with the first word pointing into
    /// host-visible memory that cannot be watched (managed memory; fine-grained memory the host
    /// cannot read).
    fn host(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, usize>;
    /// Which of the kinds above exist at all, for a dispatch whose words cannot be read.
    fn present(&self) -> Present;
}

/// Which kinds of memory no window restores exist ([`MemoryReach::present`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Present {
    pub(crate) foreign: bool,
    /// Another agent owns allocations.
    pub(crate) peer: bool,
    /// Uncaptured memory exists, and the reason a dispatch that may reach it declines.
    pub(crate) uncaptured: Option<DeclineReason>,
    /// Host-visible or reachable system memory exists.
    pub(crate) host: bool,
}

/// The decline rules for what `words` reach, in their order: memory another process or device
/// writes, another agent's allocation, uncaptured memory, system memory reached without an
/// allocation call, host-visible memory that cannot be watched. `Ok` holds the host-readable
/// ranges to watch across the first pass (empty when the words reach none).
pub(crate) fn reach(
    map: &dyn MemoryReach,
    words: &[u8],
) -> Result<Vec<(usize, usize)>, DeclineReason> {
    if let Some(addr) = map.foreign(words) {
        tracing::debug!(
            addr = format_args!("{addr:#x}"),
            "a pointer leads into memory another process or device writes"
        );
        return Err(DeclineReason::ForeignMemory);
    }
    if let Some((addr, owner)) = map.peer(words) {
        tracing::debug!(
            addr = format_args!("{addr:#x}"),
            owner,
            "a pointer leads into another agent's allocation"
        );
        return Err(DeclineReason::PeerMemory);
    }
    if let Some((addr, reason)) = map.uncaptured(words) {
        tracing::debug!(
            addr = format_args!("{addr:#x}"),
            reason = reason.code(),
            "a word names memory no window captures"
        );
        return Err(reason);
    }
    if let Some(addr) = map.system(words) {
        tracing::debug!(
            addr = format_args!("{addr:#x}"),
            "a pointer leads into system memory the agent reaches without an allocation call"
        );
        return Err(DeclineReason::HostMemory);
    }
    map.host(words).map_err(|addr| {
        tracing::debug!(
            addr = format_args!("{addr:#x}"),
            "a pointer leads into host-visible memory that cannot be watched"
        );
        DeclineReason::HostMemory
    })
}

/// The decline for a dispatch whose words cannot be read, by the same order as [`reach`]:
/// whatever kind exists might be reached. `None`: nothing a window cannot restore exists.
pub(crate) fn reach_unread(map: &dyn MemoryReach) -> Option<DeclineReason> {
    let present = map.present();
    if present.foreign {
        Some(DeclineReason::ForeignMemory)
    } else if present.peer {
        Some(DeclineReason::PeerMemory)
    } else if let Some(reason) = present.uncaptured {
        Some(reason)
    } else {
        present.host.then_some(DeclineReason::HostMemory)
    }
}

/// Whether `addr` lies in a page the process has mapped and can read (`mincore`, then a
/// one-byte `process_vm_readv` of its own memory, which fails rather than faults): memory a
/// GPU that reaches all system memory (HMM, ATS, XNACK) could access there. A reserved,
/// inaccessible range (`PROT_NONE`: an allocator's or runtime's address-space reservation)
/// is not.
pub(crate) fn mapped(addr: usize) -> bool {
    // User space ends below 2^47 on x86-64 and (by default) 2^48 on aarch64.
    if addr >= 1 << 48 {
        return false;
    }
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let page = *PAGE.get_or_init(|| {
        // SAFETY: a plain query.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 { p as usize } else { 4096 }
    });
    let start = addr & !(page - 1);
    let mut resident = 0u8;
    // SAFETY: `mincore` reads no memory at `start` (page-aligned); it writes one byte into
    // `resident` for the single page a 1-byte range covers.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, 1, &mut resident) };
    if r != 0 {
        return false;
    }
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: the kernel copies one byte of this process's memory at `addr` into `byte` and
    // reports EFAULT instead of faulting when `addr` is not readable; nothing else is touched.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 1
}

/// The first 8-byte-aligned word of `args` that is an address inside one of `ranges`: (its
/// byte offset, the address, the range's base).
pub(crate) fn first_pointer_into(
    args: &[u8],
    ranges: &std::collections::BTreeMap<usize, usize>,
) -> Option<(usize, usize, usize)> {
    if ranges.is_empty() {
        return None;
    }
    args.chunks_exact(8).enumerate().find_map(|(i, w)| {
        let addr = u64::from_ne_bytes(w.try_into().expect("8 bytes")) as usize;
        ranges
            .range(..=addr)
            .next_back()
            .filter(|(base, size)| addr < base.saturating_add(**size))
            .map(|(base, _)| (i * 8, addr, *base))
    })
}

/// The 8-byte-aligned words of `args` that could be addresses (the first 64 KiB of the
/// address space is never mapped: small integers are skipped).
pub(crate) fn address_words(args: &[u8]) -> impl Iterator<Item = usize> + '_ {
    args.chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) as usize)
        .filter(|a| *a >= 0x1_0000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mapped_pages_of_the_process_count_as_system_memory() {
        let heap = Box::new([0u8; 64]);
        assert!(mapped(heap.as_ptr() as usize));
        let stack = 0u64;
        assert!(mapped(&stack as *const u64 as usize));
        assert!(!mapped(0x1_0000), "the first pages are never mapped");
        assert!(!mapped(1 << 50), "beyond user space");
        assert!(!mapped(usize::MAX));
        // A reservation without access (an allocator's or a runtime's address space): no GPU
        // reaches it either.
        // SAFETY: a fresh anonymous PROT_NONE mapping of one page, unmapped below.
        let reserved = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(reserved, libc::MAP_FAILED);
        assert!(!mapped(reserved as usize + 128), "reserved, not accessible");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(reserved, 4096) };
    }

    #[test]
    fn communication_kernels_are_recognised_mangled_or_not() {
        for name in [
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "_Z39ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
            "_Z28nvshmemi_proxy_kernel_entryv",
            "mscclpp_allreduce_kernel",
        ] {
            assert!(is_communication_kernel(name), "{name}");
        }
        for name in [
            "vector_add",
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEvT_",
            "nc_kernel",
            "uncle",
        ] {
            assert!(!is_communication_kernel(name), "{name}");
        }
    }

    #[test]
    fn the_gate_names_its_reason() {
        let mut info = crate::testing::dispatch("ncclDevKernel_Broadcast_RING_LL");
        assert_eq!(
            refuses(&info, None),
            Some(DeclineReason::CommunicationKernel)
        );
        info.kernel_name = Some("gemm".into());
        assert_eq!(refuses(&info, None), None);
        assert_eq!(
            refuses(&info, Some(DeclineReason::StreamMemoryWait)),
            Some(DeclineReason::StreamMemoryWait)
        );
    }

    /// A backend's memory as plain ranges: each lookup answers from its own map.
    #[derive(Default)]
    struct Map {
        foreign: std::collections::BTreeMap<usize, usize>,
        peer: std::collections::BTreeMap<usize, usize>,
        uncaptured: std::collections::BTreeMap<usize, usize>,
        system: std::collections::BTreeMap<usize, usize>,
        /// Watchable host memory; `unwatched`: host memory that cannot be watched.
        host: std::collections::BTreeMap<usize, usize>,
        unwatched: std::collections::BTreeMap<usize, usize>,
    }

    impl MemoryReach for Map {
        fn foreign(&self, words: &[u8]) -> Option<usize> {
            first_pointer_into(words, &self.foreign).map(|p| p.1)
        }
        fn peer(&self, words: &[u8]) -> Option<(usize, u64)> {
            first_pointer_into(words, &self.peer).map(|p| (p.1, 9))
        }
        fn uncaptured(&self, words: &[u8]) -> Option<(usize, DeclineReason)> {
            first_pointer_into(words, &self.uncaptured).map(|p| (p.1, DeclineReason::ArrayMemory))
        }
        fn system(&self, words: &[u8]) -> Option<usize> {
            first_pointer_into(words, &self.system).map(|p| p.1)
        }
        fn host(&self, words: &[u8]) -> Result<Vec<(usize, usize)>, usize> {
            if let Some(p) = first_pointer_into(words, &self.unwatched) {
                return Err(p.1);
            }
            let mut out = Vec::new();
            for w in words.chunks_exact(8) {
                if let Some(p) = first_pointer_into(w, &self.host) {
                    let range = (p.2, self.host[&p.2]);
                    if !out.contains(&range) {
                        out.push(range);
                    }
                }
            }
            Ok(out)
        }
        fn present(&self) -> Present {
            Present {
                foreign: !self.foreign.is_empty(),
                peer: !self.peer.is_empty(),
                uncaptured: (!self.uncaptured.is_empty()).then_some(DeclineReason::ArrayMemory),
                host: !self.host.is_empty()
                    || !self.unwatched.is_empty()
                    || !self.system.is_empty(),
            }
        }
    }

    #[test]
    fn the_reach_rules_decline_in_their_order_and_watch_host_memory_otherwise() {
        let words = |ws: &[u64]| ws.iter().flat_map(|w| w.to_ne_bytes()).collect::<Vec<u8>>();
        let mut map = Map::default();
        for (m, base) in [
            (&mut map.foreign, 0x10_0000),
            (&mut map.peer, 0x20_0000),
            (&mut map.uncaptured, 0x30_0000),
            (&mut map.system, 0x40_0000),
            (&mut map.unwatched, 0x50_0000),
            (&mut map.host, 0x60_0000),
        ] {
            m.insert(base, 0x1000);
        }
        let all = [
            0x60_0010, 0x50_0000, 0x40_0000, 0x30_0000, 0x20_0000, 0x10_0000,
        ];
        // Each rule wins over every later one, wherever its word sits.
        let expected = [
            DeclineReason::ForeignMemory,
            DeclineReason::PeerMemory,
            DeclineReason::ArrayMemory,
            DeclineReason::HostMemory,
            DeclineReason::HostMemory,
        ];
        for (dropped, reason) in expected.iter().enumerate() {
            let ws: Vec<u64> = all[..all.len() - dropped].to_vec();
            assert_eq!(reach(&map, &words(&ws)), Err(*reason), "{ws:x?}");
        }
        assert_eq!(
            reach(&map, &words(&[7, 0x60_0010, 0x60_0ff8, 0x7000_0000])),
            Ok(vec![(0x60_0000, 0x1000)]),
            "watchable host memory, once, and nothing else"
        );
        assert_eq!(reach(&map, &words(&[1, 2])), Ok(vec![]));
        // Words that cannot be read: the first kind that exists, in the same order.
        assert_eq!(reach_unread(&map), Some(DeclineReason::ForeignMemory));
        map.foreign.clear();
        assert_eq!(reach_unread(&map), Some(DeclineReason::PeerMemory));
        map.peer.clear();
        assert_eq!(reach_unread(&map), Some(DeclineReason::ArrayMemory));
        map.uncaptured.clear();
        assert_eq!(reach_unread(&map), Some(DeclineReason::HostMemory));
        map.system.clear();
        map.unwatched.clear();
        map.host.clear();
        assert_eq!(reach_unread(&map), None);
    }

    #[test]
    fn argument_words_are_checked_against_the_ranges() {
        let points_into = |args: &[u8], ranges: &std::collections::BTreeMap<usize, usize>| {
            first_pointer_into(args, ranges).is_some()
        };
        let mut ranges = std::collections::BTreeMap::new();
        assert!(!points_into(&[0xff; 16], &ranges));
        ranges.insert(0x1000, 0x100);
        ranges.insert(0x8000, 8);
        let words = |ws: &[u64]| ws.iter().flat_map(|w| w.to_ne_bytes()).collect::<Vec<u8>>();
        assert!(points_into(&words(&[7, 0x1000]), &ranges), "the base");
        assert!(points_into(&words(&[0x10ff]), &ranges), "the last byte");
        assert!(
            !points_into(&words(&[0x1100, 0xfff, 0x8008]), &ranges),
            "just outside"
        );
        assert!(points_into(&words(&[0x8007]), &ranges));
        assert!(
            !points_into(&[0x00, 0x10, 0, 0], &ranges),
            "a short tail is no word"
        );
    }
}
