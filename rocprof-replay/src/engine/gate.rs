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
