//! Compile-time behaviour of `#[rocprof_tool]` and the policy API: misuse is rejected with a
//! clear error (`tests/ui/fail`, expected compiler output in the `.stderr` files next to each
//! case) and correct tools build (`tests/ui/pass`). The guide's first example is built as a
//! real library by `tests/guide.rs` (trybuild allows `dead_code`).
//!
//! The expected output is that of the toolchain the project is developed with; after a
//! compiler upgrade changes a message, regenerate with
//! `TRYBUILD=overwrite cargo test -p rocprof-replay --test ui` and review the diff.
//! A renamed SDK dependency (`crate = ...`) is tested in `rocprof-replay-macros/tests/ui.rs`.

#[test]
#[cfg_attr(
    feature = "cuda",
    ignore = "the expected compiler output is that of the default features (the cuda feature adds \
              the CUDA entry points and their errors): run without --features cuda"
)]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
