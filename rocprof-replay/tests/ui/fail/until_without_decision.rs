// An open-ended plan needs its continue decision: `PassPlan::until(state)` alone does not
// compile (the reference's "0 passes without a continue callback" cannot be written).
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool]
#[derive(Default)]
struct Tool;

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<'_, ()> {
        PassPlan::until(())
    }
}

fn main() {}
