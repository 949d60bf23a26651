//! Dispatches that are never replayed, whatever the policy asks: the decline rules both
//! backends share, checked before the window takes the agent (no lock, no drain, no snapshot).
//!
//! - **Communication kernels** (NCCL, RCCL, NVSHMEM, MSCCL++): they wait for flags that peer
//!   GPUs or processes write once per collective. A second pass would wait for writes that never
//!   come (Nsight Compute is known to hang there), so they run once, the ordinary way.
//! - **Work behind a stream memory wait** (CUDA `cuStreamWaitValue*`, wait operations of
//!   `cuStreamBatchMemOp`): the stream waits on memory another agent writes; the backend says so
//!   through [`ReplayTarget::waits_on_peers`](super::window::ReplayTarget::waits_on_peers).

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

/// Why `info` must not be replayed, if it must not.
pub(crate) fn refuses(info: &DispatchInfo, waits_on_peers: bool) -> Option<DeclineReason> {
    if info
        .kernel_name
        .as_deref()
        .is_some_and(is_communication_kernel)
    {
        return Some(DeclineReason::CommunicationKernel);
    }
    waits_on_peers.then_some(DeclineReason::StreamMemoryWait)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            refuses(&info, false),
            Some(DeclineReason::CommunicationKernel)
        );
        info.kernel_name = Some("gemm".into());
        assert_eq!(refuses(&info, false), None);
        assert_eq!(refuses(&info, true), Some(DeclineReason::StreamMemoryWait));
    }
}
