// A context enabled for one pass through a guard kept in the pass state, and an up-to plan
// whose `should_continue` reads the policy's settings and the per-dispatch state.
use rocprof_replay::{Context, DispatchInfo, Pass, PassGuard, PassPlan, ReplayPolicy, Service};

#[rocprof_replay::rocprof_tool(new = Tool::new)]
pub struct Tool {
    timing: Context,
    enough: u32,
}

impl Tool {
    fn new() -> Tool {
        Tool {
            timing: Context::new("per-pass", &[Service::DispatchTiming]),
            enough: 3,
        }
    }
}

impl ReplayPolicy for Tool {
    type State = u32;
    type PassState = PassGuard;
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::up_to(10, 0)
    }
    fn should_continue(&self, _: &DispatchInfo, timed: &u32, _completed: u32) -> bool {
        *timed < self.enough
    }
    fn on_pass(&self, pass: &mut Pass<'_>, timed: &mut u32, guard: &mut PassGuard) {
        if pass.index() % 2 == 0 {
            *guard = pass.enable(&self.timing);
            *timed += 1;
        }
    }
}

fn main() {
    let _: extern "C" fn() = OnUnload;
}
