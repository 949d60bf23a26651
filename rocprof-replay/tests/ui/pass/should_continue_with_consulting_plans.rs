// A policy that implements `should_continue` may return every kind of plan: exactly (never
// consults it), up_to and until (consult it after each pass). Run with the real engine on the
// simulated device, it stops where `should_continue` says.
use rocprof_replay::testing::{dispatch, simulate};
use rocprof_replay::{DispatchInfo, OutcomeKind, PassPlan, PassReport, ReplayPolicy};

#[rocprof_replay::rocprof_tool(new = Tool::new)]
pub struct Tool {
    stop_after: u32,
}

impl Tool {
    fn new() -> Tool {
        Tool { stop_after: 3 }
    }
}

impl ReplayPolicy for Tool {
    type State = Vec<u32>;
    type PassState = ();
    fn pass_count(&self, info: &DispatchInfo) -> PassPlan<Self> {
        match info.kernel() {
            "fixed" => PassPlan::exactly(5, Vec::new()),
            "bounded" => PassPlan::up_to(8, Vec::new()),
            _ => PassPlan::until(Vec::new()),
        }
    }
    fn on_pass_end(&self, pass: &PassReport<'_>, ends: &mut Vec<u32>, _: &mut ()) {
        ends.push(pass.index);
    }
    fn should_continue(&self, _: &DispatchInfo, ends: &Vec<u32>, completed: u32) -> bool {
        assert_eq!(ends.len() as u32, completed, "sees every pass end before it");
        completed < self.stop_after
    }
}

fn main() {
    let tool = Tool::new();
    for (kernel, passes) in [("fixed", 5), ("bounded", 3), ("open", 3)] {
        let mut memory = vec![0u8; 4];
        let run = simulate(&tool, &dispatch(kernel), &mut memory, |m| m[0] += 1);
        assert_eq!(run.outcome.kind, OutcomeKind::Replayed, "{kernel}");
        assert_eq!(run.kernel_runs, passes, "{kernel}");
        assert_eq!(memory[0], 1, "{kernel}: one execution");
    }
    let _: extern "C" fn() = OnUnload;
}
