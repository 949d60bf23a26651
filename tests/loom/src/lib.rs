//! loom models of the HSA backend's synchronisation. The models are in `tests/` behind
//! `cfg(loom)`: `RUSTFLAGS="--cfg loom" cargo test --release --manifest-path tests/loom/Cargo.toml`.
