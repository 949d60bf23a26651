//! Fuzz target `interceptor`: see `rocprof_replay_fuzz::interceptor::run`.
//!
//! With `cargo fuzz run interceptor` (nightly, `--cfg fuzzing`) this is a libFuzzer target; built
//! plainly it runs the inputs named on its command line (files, or directories of them) once
//! each: `cargo run --manifest-path fuzz/Cargo.toml --bin interceptor -- fuzz/artifacts/interceptor/crash-...`.
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rocprof_replay_fuzz::interceptor::run(data));

#[cfg(not(fuzzing))]
fn main() {
    rocprof_replay_fuzz::replay_files(
        std::env::args_os().skip(1),
        rocprof_replay_fuzz::interceptor::run,
    );
}
