//! What a tool learns about a dispatch: [`DispatchInfo`] and its identifiers.

use std::fmt;
use std::sync::Arc;

/// An agent (a GPU), identified by the backend's handle: the HSA agent handle, or on CUDA the
/// device's `CUcontext`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(pub u64);

/// A queue: the HSA runtime's queue id, or on CUDA the `CUstream` handle (0: the legacy
/// default stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u64);

/// One dispatch as the application submitted it; every pass of a replay shares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DispatchId(pub u64);

/// The runtime a dispatch came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Runtime {
    /// The HSA runtime (ROCr, or hsa-emu): HIP and HSA applications.
    Hsa,
    /// The CUDA driver API.
    Cuda,
}

impl Runtime {
    /// `"hsa"` or `"cuda"`.
    pub fn label(self) -> &'static str {
        match self {
            Runtime::Hsa => "hsa",
            Runtime::Cuda => "cuda",
        }
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "agent:{:#x}", self.0)
    }
}

impl fmt::Display for DispatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Everything known about a kernel dispatch when the tool decides how to replay it.
///
/// The fields mean the same on every runtime:
///
/// | field | HSA | CUDA |
/// |---|---|---|
/// | `agent` | agent handle | `CUcontext` |
/// | `agent_index` | index among the GPU agents | device ordinal |
/// | `context` | `None` | `Some(CUcontext)` |
/// | `queue` | queue id | `CUstream` |
/// | `kernel_object` | kernel descriptor address | `CUfunction` |
/// | `grid` | grid size in work-items | `gridDim × blockDim` in threads |
/// | `workgroup` | work-group size | `blockDim` |
/// | `blocks` | work-groups per dimension (rounded up) | `gridDim` |
/// | `group_segment_size` | group (LDS) bytes | dynamic + static shared memory bytes |
///
/// Fields are added as backends learn more (the struct is `#[non_exhaustive]`); tests build
/// one with [`testing::dispatch`](crate::testing::dispatch) and set the fields they need.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DispatchInfo {
    /// The runtime the dispatch came from.
    pub runtime: Runtime,
    /// The agent the kernel runs on.
    pub agent: AgentId,
    /// 0-based index of that agent among the GPUs the runtime reports.
    pub agent_index: u32,
    /// The queue (stream) it was submitted to.
    pub queue: QueueId,
    /// Identifier of this dispatch, the same for every pass.
    pub dispatch_id: DispatchId,
    /// The kernel's code handle.
    pub kernel_object: u64,
    /// The kernel's symbol name (`name.kd` without `.kd` on HSA), when known.
    pub kernel_name: Option<Arc<str>>,
    /// Grid size in work-items (threads) per dimension; saturates at `u32::MAX`.
    pub grid: [u32; 3],
    /// Work-group (block) size.
    pub workgroup: [u16; 3],
    /// Work-groups (blocks) per dimension.
    pub blocks: [u32; 3],
    /// Group (LDS, shared) memory per work-group in bytes.
    pub group_segment_size: u32,
    /// Private (scratch) memory per work-item in bytes.
    pub private_segment_size: u32,
    /// The CUDA context the launch was made in (`None` on HSA, where a queue belongs to one
    /// agent and there are no contexts).
    pub context: Option<u64>,
}

impl DispatchInfo {
    /// The kernel name, or `"<unknown>"`.
    pub fn kernel(&self) -> &str {
        self.kernel_name.as_deref().unwrap_or("<unknown>")
    }
}

/// Work-groups per dimension for a grid of work-items (a partial last group counts).
pub(crate) fn blocks_of(grid: [u32; 3], workgroup: [u16; 3]) -> [u32; 3] {
    std::array::from_fn(|i| grid[i].div_ceil(u32::from(workgroup[i]).max(1)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn blocks_round_up_and_survive_a_zero_work_group() {
        assert_eq!(super::blocks_of([1000, 1, 1], [256, 1, 1]), [4, 1, 1]);
        assert_eq!(super::blocks_of([1024, 2, 0], [256, 0, 1]), [4, 2, 0]);
    }
}
