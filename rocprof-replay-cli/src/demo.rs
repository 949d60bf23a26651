//! `rocprof-replay demo`: builds what it needs and runs the bundled sample application on
//! hsa-emu under the built-in timer with 5 passes, then prints the report.
//!
//! The build steps are those of the demo package (`rocprof_replay_demo::build`), run in this
//! program's cargo profile, with everything landing next to this program (where `run` looks):
//!
//! 1. `cargo build -p rocprof-replay-timer -p rocprof-replay-demo`: the timer library and the
//!    sample application (a Rust HSA program; no HSA headers needed);
//! 2. `cargo run -p hsa-emu --bin hsa-emu-install -- <profile>/hsa-emu`: hsa-emu as
//!    `libhsa-runtime64.so.1`;
//! 3. `$CC -shared -fPIC -O2 -I hsa-emu/include`: the sample kernels into
//!    `<profile>/demo/libsample_kernels.so`;
//! 4. `rocprof-replay run --runtime emu --passes 5 -- rocprof-replay-demo app <kernels>`.
//!
//! The application checks that it saw exactly one execution of each dispatch (exit 1
//! otherwise), so the demo fails loudly if replay ever leaks into what it computes.

use std::path::Path;

use rocprof_replay_demo::build::Builder;

use crate::Failure;
use crate::cli::{DemoArgs, RunArgs, Runtime};
use crate::launch::{self, Overrides};
use crate::locate::{self, TIMER_LIB};

fn step(n: u32, what: &str) {
    println!("demo: [{n}/4] {what}");
}

/// Runs the demo; returns the application's exit status.
pub(crate) fn run(args: &DemoArgs) -> Result<u8, Failure> {
    let profile = locate::exe_dir()?;
    let builder = Builder::new("demo:       ").map_err(|e| {
        Failure::new(format!(
            "{e}; `rocprof-replay demo` runs from the rocprof-replay sources (cargo run -p \
             rocprof-replay-cli -- demo)"
        ))
    })?;

    step(1, "building the timer tool and the sample application");
    builder.cargo(
        "build",
        &["-p", "rocprof-replay-timer", "-p", "rocprof-replay-demo"],
    )?;
    let tool = profile.join(TIMER_LIB);
    let app = profile.join("rocprof-replay-demo");
    for built in [&tool, &app] {
        if !built.is_file() {
            return Err(Failure::new(format!(
                "the build ran but {} is missing",
                built.display()
            )));
        }
    }

    step(2, "installing hsa-emu as libhsa-runtime64.so.1");
    let emu_dir = profile.join("hsa-emu");
    builder.install_emulator(&emu_dir)?;

    step(3, "compiling the sample kernels (an hsa-emu code object)");
    let kernels = profile.join("demo").join("libsample_kernels.so");
    builder.compile_kernels(&kernels)?;

    step(
        4,
        "running the application with every dispatch replayed 5 times",
    );
    println!(
        "demo:       $ rocprof-replay run --runtime emu --passes 5 -- {} app {}",
        short(builder.root(), &app).display(),
        short(builder.root(), &kernels).display()
    );
    let run = RunArgs {
        metrics: None,
        metrics_file: None,
        passes: Some(5),
        until_stable: None,
        max_passes: None,
        kernel: None,
        exclude: None,
        launch_skip: None,
        launch_count: None,
        runtime: Some(Runtime::Emu),
        shadow: Vec::new(),
        tool: None,
        output: args.output.clone(),
        format: args.format,
        quiet: false,
        allow_failed: false,
        restore: None,
        footprint: None,
        run: None,
        app: vec![app.into(), "app".into(), kernels.into()],
    };
    let status = launch::run_with(
        &run,
        &Overrides {
            tool: Some(tool),
            emu_dir: Some(emu_dir),
        },
    )?;
    if status == 0 {
        println!(
            "demo: done. Each dispatch ran 5 times with device memory restored between passes, \
             yet every result the application checked is that of one execution."
        );
    }
    Ok(status)
}

/// `path` relative to `root` when inside it (shorter to read).
fn short<'p>(root: &Path, path: &'p Path) -> &'p Path {
    path.strip_prefix(root).unwrap_or(path)
}
