// The same in two modules: the item names do not clash, the exported symbols do. The macro
// turns that into a name-resolution error (seen by `cargo check`, and the same every build)
// instead of a code-generation error naming whichever symbol happened to be emitted first.
mod first {
    use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

    #[rocprof_replay::rocprof_tool]
    #[derive(Default)]
    pub struct First;

    impl ReplayPolicy for First {
        type State = ();
        type PassState = ();
        fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
            PassPlan::skip()
        }
    }
}

mod second {
    use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

    #[rocprof_replay::rocprof_tool]
    #[derive(Default)]
    pub struct Second;

    impl ReplayPolicy for Second {
        type State = ();
        type PassState = ();
        fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
            PassPlan::skip()
        }
    }
}

fn main() {}
