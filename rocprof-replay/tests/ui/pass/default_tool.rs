// A tool built with Default::default(); the exported entry points have the ABI types.
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool]
#[derive(Default)]
pub struct Tool {
    passes: u32,
}

impl ReplayPolicy for Tool {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.passes, ())
    }
}

fn main() {
    let _: unsafe extern "C" fn(
        *mut rocprof_replay::__private::HsaApiTable,
        u64,
        u64,
        *const *const std::ffi::c_char,
    ) -> bool = OnLoad;
    let _: extern "C" fn() = OnUnload;
    assert_eq!(HSA_AMD_TOOL_PRIORITY, 25);
    let _ = &ROCPROF_REPLAY_CLAIM;
}
