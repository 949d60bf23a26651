//! Replays the committed corpus and reproducers of the `table_slots`, `table_install` and
//! `code_object` fuzz targets (regression tests that need no nightly toolchain and no
//! cargo-fuzz).

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let files = rocprof_replay_fuzz::inputs(
        [format!("corpus/{target}"), format!("artifacts/{target}")]
            .map(|d| root.join(d))
            .into_iter()
            .filter(|d| d.is_dir()),
    );
    assert!(!files.is_empty(), "the {target} corpus is committed");
    for f in &files {
        rocprof_replay_fuzz::replay_one(f, run);
    }
}

#[test]
fn the_table_slots_corpus_runs_clean() {
    replay("table_slots", rocprof_replay_fuzz::tables::slots);
}

#[test]
fn the_table_install_corpus_runs_clean() {
    replay("table_install", rocprof_replay_fuzz::tables::install);
}

#[test]
fn the_code_object_corpus_runs_clean() {
    replay("code_object", rocprof_replay_fuzz::code_object);
}
