// The same in two modules: the names do not clash, the exported symbols do (found when the
// library is built; `cargo check` does not see it).
mod first {
    use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};

    #[rocprof_replay::rocprof_tool]
    #[derive(Default)]
    pub struct First;

    impl ReplayPolicy for First {
        type State = ();
        type PassState = ();
        fn pass_count(&self, _: &DispatchInfo) -> PassPlan<()> {
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
        fn pass_count(&self, _: &DispatchInfo) -> PassPlan<()> {
            PassPlan::skip()
        }
    }
}

fn main() {}
