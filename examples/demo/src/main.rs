//! `rocprof-replay-demo`: the README demo of rocprof-replay.
//!
//! One binary, two roles:
//!
//! | command | role |
//! |---|---|
//! | `rocprof-replay-demo` | the orchestrator ([`orchestrate`]): builds hsa-emu and the `pass_timer` tool, compiles the sample kernels, then runs this program again as the application with the emulator on `LD_LIBRARY_PATH` and the tool in `LD_PRELOAD` |
//! | `rocprof-replay-demo app KERNELS.so` | the HSA application ([`app`]): plain HSA API calls through [`Hsa`](rocprof_replay_demo::hsa::Hsa), which opens `libhsa-runtime64.so.1` at run time |
//!
//! The HSA wrapper ([`rocprof_replay_demo::hsa`]) and the build steps
//! ([`rocprof_replay_demo::build`]) live in this package's library, which `emu-bench` shares.
//!
//! `cargo run -p rocprof-replay-demo` needs only the Rust toolchain and a C compiler (`CC`,
//! default `cc`); no HSA headers or ROCm installation. The application, the runtime and the
//! tool are three separate binaries, exactly as with a real ROCm program and a real GPU.
//!
//! Exit status: the application's (0 all results correct, 1 a wrong result, 2 an HSA call
//! failed or a deadline expired); 1 when the orchestrator cannot prepare the run; 64 on bad
//! usage.

mod app;
mod orchestrate;

use std::process::ExitCode;

const USAGE: &str = "usage: rocprof-replay-demo            build everything and run the demo\n       \
                     rocprof-replay-demo app KERNELS.so   run only the HSA application";

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.as_slice() {
        [] => orchestrate::main(),
        [cmd, kernels] if cmd == "app" => app::main(std::path::Path::new(kernels)),
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(64)
        }
    }
}
