// A consulting plan (`up_to`, `until`) asks `should_continue` after every pass: a policy that
// returns one without implementing `should_continue` does not build (the reference's "0 passes
// without a continue callback" cannot be shipped). The error names the policy type.
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool]
#[derive(Default)]
struct Tool;

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::until(())
    }
}

fn main() {}
