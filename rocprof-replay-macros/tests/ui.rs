//! `#[rocprof_tool(crate = ...)]` with the SDK under another name: this crate's tests see the
//! SDK only as `sdk` (`sdk = { package = "rocprof-replay", ... }` in `Cargo.toml`), so
//! `::rocprof_replay` does not resolve here.
//!
//! - `tests/ui/pass/renamed_sdk.rs`: with `crate = sdk` the tool builds and exports its entry
//!   points;
//! - `tests/ui/fail/renamed_sdk_without_crate.rs`: without it the expansion's
//!   `::rocprof_replay` fails to resolve (what `crate = ...` is for).
//!
//! Regenerate the expected output after a compiler upgrade with
//! `TRYBUILD=overwrite cargo test -p rocprof-replay-macros --test ui` and review the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
