//! Test fixture: returns [`PassPlan::Until`] without `DECIDES_CONTINUE` (the reference's
//! "returns 0 without a continue callback" row): the engine must warn and not replay.

use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy, rocprof_tool};

/// The fixture tool.
#[rocprof_tool]
#[derive(Default)]
pub struct OpenEnded;

impl ReplayPolicy for OpenEnded {
    type State = ();
    type PassState = ();

    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<()> {
        PassPlan::until(())
    }
}
