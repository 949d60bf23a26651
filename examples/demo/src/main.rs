//! `rocprof-replay-demo`: the sample HSA application of the README demo.
//!
//! `rocprof-replay-demo app KERNELS.so` runs the HSA application ([`app`]): plain HSA API
//! calls through [`Hsa`](rocprof_replay_demo::hsa::Hsa), which opens `libhsa-runtime64.so.1`
//! at run time, and checks that it saw exactly one execution of each dispatch.
//!
//! The demo itself is `cargo run --release -p rocprof-replay-cli -- demo`: it builds this
//! program, the timer tool, hsa-emu and the sample kernels (with the steps of
//! [`rocprof_replay_demo::build`], which `emu-bench` shares too) and runs this application
//! under `rocprof-replay run`. The application, the runtime and the tool are three separate
//! binaries, exactly as with a real ROCm program and a real GPU.
//!
//! Exit status: 0 all results correct, 1 a wrong result, 2 an HSA call failed or a deadline
//! expired; 64 on bad usage.

mod app;

use std::process::ExitCode;

const USAGE: &str = "usage: rocprof-replay-demo app KERNELS.so   run the HSA application\n\
                     (the demo: cargo run --release -p rocprof-replay-cli -- demo)";

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.as_slice() {
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
