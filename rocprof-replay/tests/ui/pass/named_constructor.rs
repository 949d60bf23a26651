// A tool built by a named constructor (`new = Tool::from_env`), with no Default impl.
use rocprof_replay::{Context, DispatchInfo, PassPlan, ReplayPolicy, Service};

#[rocprof_replay::rocprof_tool(new = Tool::from_env)]
pub struct Tool {
    passes: u32,
    _timing: Context,
}

impl Tool {
    fn from_env() -> Tool {
        let passes = std::env::var("MY_TOOL_PASSES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3);
        Tool {
            passes,
            _timing: Context::new("my_tool", &[Service::DispatchTiming]),
        }
    }
}

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::up_to(self.passes, ())
    }
    fn should_continue(&self, _: &DispatchInfo, _: &(), completed: u32) -> bool {
        completed < 2
    }
}

fn main() {
    let _: extern "C" fn() = OnUnload;
    assert_eq!(HSA_AMD_TOOL_PRIORITY, 25);
}
