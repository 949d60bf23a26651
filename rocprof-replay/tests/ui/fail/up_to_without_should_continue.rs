// The same for a bounded consulting plan in a policy without `#[rocprof_tool]` (one kept in a
// library of policies, say): the build of whatever runs it — here a test through
// `testing::simulate` — fails on `PassPlan::up_to`.
use rocprof_replay::testing::{dispatch, simulate};
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

pub struct Tool {
    pub passes: u32,
}

impl ReplayPolicy for Tool {
    type State = Vec<u32>;
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::up_to(self.passes, Vec::new())
    }
}

fn main() {
    let run = simulate(&Tool { passes: 4 }, &dispatch("k"), &mut [0u8; 4], |m| m[0] += 1);
    assert_eq!(run.kernel_runs, 4);
}
