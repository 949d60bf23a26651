//! Fuzz target `code_object`: see `rocprof_replay_fuzz::code_object`.
//!
//! With `cargo fuzz run code_object` (nightly, `--cfg fuzzing`) this is a libFuzzer target; built
//! plainly it runs the inputs named on its command line (files, or directories of them) once
//! each: `cargo run --manifest-path fuzz/Cargo.toml --bin code_object -- fuzz/artifacts/code_object/crash-...`.
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rocprof_replay_fuzz::code_object(data));

#[cfg(not(fuzzing))]
fn main() {
    rocprof_replay_fuzz::replay_files(
        std::env::args_os().skip(1),
        rocprof_replay_fuzz::code_object,
    );
}
