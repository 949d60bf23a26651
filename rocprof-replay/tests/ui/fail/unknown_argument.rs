// The arguments are `new = ...` and `crate = ...`.
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool(make = f)]
#[derive(Default)]
struct Tool;

fn f() -> Tool {
    Tool
}

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::skip()
    }
}

fn main() {}
