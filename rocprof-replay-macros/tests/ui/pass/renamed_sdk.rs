// The SDK is a dependency named `sdk`: `crate = sdk` points the expansion at it.
use sdk::{DispatchInfo, PassPlan, ReplayPolicy};

#[sdk::rocprof_tool(crate = sdk, new = Tool::three)]
pub struct Tool {
    passes: u32,
}

impl Tool {
    fn three() -> Tool {
        Tool { passes: 3 }
    }
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
        *mut sdk::__private::HsaApiTable,
        u64,
        u64,
        *const *const std::ffi::c_char,
    ) -> bool = OnLoad;
    let _: extern "C" fn() = OnUnload;
    assert_eq!(HSA_AMD_TOOL_PRIORITY, 25);
    let _ = &ROCPROF_REPLAY_CLAIM;
}
