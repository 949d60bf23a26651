//! Fuzz targets of rocprof-replay (run with `cargo fuzz`, see `docs/reliability-tests.md`).
//!
//! | target | what |
//! |---|---|
//! | `interceptor` | [`interceptor::run`]: the queue interceptor and replay window against random packet streams, in-process on hsa-emu |
//! | `table_slots` | [`tables::slots`]: versioned slot reads and writes against random table headers, in buffers of exactly the claimed size |
//! | `table_install` | [`tables::install`]: the SDK's `OnLoad` (claim, engine, HSA backend install) against random tables |
//! | `code_object` | [`code_object`]: the kernels' argument layout read from random AMDGPU code objects (ELF notes, msgpack metadata) |
//!
//! The logic lives here so that `cargo test` (stable, no sanitizer) replays the committed
//! corpus (`fuzz/corpus/<target>/`) and every reproducer under `fuzz/artifacts/<target>/`.

pub mod interceptor;
pub mod tables;

/// Fuzz target `code_object`: reads the argument layout of `data` as an AMDGPU code object.
/// Any input gives a layout or a reason, never a panic or a hang; a layout describes at most
/// as many kernels as the input could hold.
pub fn code_object(data: &[u8]) {
    if let Ok(kernels) = rocprof_replay::__private::code_object_layout(data) {
        assert!(
            kernels <= data.len(),
            "{kernels} kernels from {} bytes",
            data.len()
        );
    }
}

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The files under `paths` (files as they are, directories' entries sorted), for replaying.
pub fn inputs(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_file())
                .collect();
            entries.sort();
            out.extend(entries);
        } else {
            out.push(p);
        }
    }
    out
}

/// Runs `target` once on every input under `args` (a fuzz binary built without `fuzzing`).
pub fn replay_files(args: impl Iterator<Item = OsString>, target: fn(&[u8])) {
    let files = inputs(args.map(PathBuf::from));
    if files.is_empty() {
        eprintln!("usage: <target> FILE|DIR...   (runs each input once)");
        std::process::exit(64);
    }
    for f in &files {
        replay_one(f, target);
    }
    println!("{} inputs ran clean", files.len());
}

/// Runs `target` on the contents of `file`, naming the file if it panics.
pub fn replay_one(file: &Path, target: fn(&[u8])) {
    let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    eprintln!("input {} ({} bytes)", file.display(), data.len());
    target(&data);
}
