//! Fuzz target `table_install`: see `rocprof_replay_fuzz::tables::install`.
//!
//! With `cargo fuzz run table_install` (nightly, `--cfg fuzzing`) this is a libFuzzer target; built
//! plainly it runs the inputs named on its command line (files, or directories of them) once
//! each: `cargo run --manifest-path fuzz/Cargo.toml --bin table_install -- fuzz/artifacts/table_install/crash-...`.
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rocprof_replay_fuzz::tables::install(data));

#[cfg(not(fuzzing))]
fn main() {
    rocprof_replay_fuzz::replay_files(
        std::env::args_os().skip(1),
        rocprof_replay_fuzz::tables::install,
    );
}
