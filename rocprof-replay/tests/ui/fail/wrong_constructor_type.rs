// `new = ...` must name a `fn() -> Self`; this one returns the pass count.
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool(new = Tool::passes_from_env)]
struct Tool {
    passes: u32,
}

impl Tool {
    fn passes_from_env() -> u32 {
        5
    }
}

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.passes, ())
    }
}

fn main() {}
