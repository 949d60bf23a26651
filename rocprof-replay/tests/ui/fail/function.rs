// #[rocprof_tool] on a function.
#[rocprof_replay::rocprof_tool]
fn tool() {}

fn main() {}
