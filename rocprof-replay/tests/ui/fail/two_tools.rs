// One library exports one tool: a second #[rocprof_tool] would define OnLoad twice.
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool]
#[derive(Default)]
struct First;

#[rocprof_replay::rocprof_tool]
#[derive(Default)]
struct Second;

impl ReplayPolicy for First {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::skip()
    }
}

impl ReplayPolicy for Second {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::skip()
    }
}

fn main() {}
