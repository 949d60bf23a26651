// #[rocprof_tool] on an enum: only a struct can be exported.
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool]
#[derive(Default)]
enum Tool {
    #[default]
    Only,
}

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::skip()
    }
}

fn main() {}
