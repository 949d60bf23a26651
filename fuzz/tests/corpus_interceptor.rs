//! Replays the committed corpus and reproducers of the `interceptor` fuzz target (a
//! regression test that needs no nightly toolchain and no cargo-fuzz). Its own process: the
//! target installs rocprof-replay into the runtime of the process it runs in.

use std::path::PathBuf;

#[test]
fn the_interceptor_corpus_runs_clean() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let files = rocprof_replay_fuzz::inputs(
        ["corpus/interceptor", "artifacts/interceptor"]
            .map(|d| root.join(d))
            .into_iter()
            .filter(|d| d.is_dir()),
    );
    assert!(!files.is_empty(), "the interceptor corpus is committed");
    for f in &files {
        rocprof_replay_fuzz::replay_one(f, rocprof_replay_fuzz::interceptor::run);
    }
}
