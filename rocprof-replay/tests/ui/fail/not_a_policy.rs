// The struct does not implement ReplayPolicy.
#[rocprof_replay::rocprof_tool]
#[derive(Default)]
struct Tool {
    passes: u32,
}

fn main() {
    let _ = Tool::default().passes;
}
