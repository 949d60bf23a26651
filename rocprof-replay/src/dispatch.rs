//! What a tool learns about a dispatch: [`DispatchInfo`] and its identifiers.

use std::fmt;
use std::sync::Arc;

/// An agent (a GPU), identified by the backend's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(pub u64);

/// A queue, identified by the runtime's queue id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u64);

/// One dispatch as the application submitted it; every pass of a replay shares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DispatchId(pub u64);

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
/// Fields are added as backends learn more (the struct is `#[non_exhaustive]`); tests build
/// one with [`testing::dispatch`](crate::testing::dispatch) and set the fields they need.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DispatchInfo {
    /// The agent the kernel runs on.
    pub agent: AgentId,
    /// 0-based index of that agent among the GPUs the runtime reports.
    pub agent_index: u32,
    /// The queue it was submitted to.
    pub queue: QueueId,
    /// Identifier of this dispatch, the same for every pass.
    pub dispatch_id: DispatchId,
    /// The kernel's code handle (`kernel_object`).
    pub kernel_object: u64,
    /// The kernel's symbol name (`name.kd` without `.kd`), when the executable was seen.
    pub kernel_name: Option<Arc<str>>,
    /// Grid size in work-items (x, y, z).
    pub grid: [u32; 3],
    /// Work-group size (x, y, z).
    pub workgroup: [u16; 3],
    /// Group (LDS) memory per work-group in bytes.
    pub group_segment_size: u32,
    /// Private (scratch) memory per work-item in bytes.
    pub private_segment_size: u32,
}

impl DispatchInfo {
    /// The kernel name, or `"<unknown>"`.
    pub fn kernel(&self) -> &str {
        self.kernel_name.as_deref().unwrap_or("<unknown>")
    }
}
