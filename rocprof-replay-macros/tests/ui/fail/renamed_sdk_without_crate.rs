// The SDK is a dependency named `sdk`, but the attribute is not told: `::rocprof_replay` does
// not resolve.
use sdk::{DispatchInfo, PassPlan, ReplayPolicy};

#[sdk::rocprof_tool]
#[derive(Default)]
pub struct Tool;

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(3, ())
    }
}

fn main() {}
