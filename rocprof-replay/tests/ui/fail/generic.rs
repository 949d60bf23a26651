// A generic struct: the library needs one concrete tool type.
use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

#[rocprof_replay::rocprof_tool]
#[derive(Default)]
struct Tool<T> {
    inner: T,
}

impl<T: Send + Sync + 'static> ReplayPolicy for Tool<T> {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        let _ = &self.inner;
        PassPlan::skip()
    }
}

fn main() {}
