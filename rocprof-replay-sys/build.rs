//! Tells the layout-proof test (`tests/header_layout.rs`) whether Debian's HSA headers are
//! installed: `cfg(have_hsa_headers)`. Without them the test shows as ignored, with the reason;
//! with `ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1` (CI) it runs and fails instead. Nothing in the
//! library depends on the headers.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_hsa_headers)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=HSA_INCLUDE_DIR");
    println!("cargo::rerun-if-env-changed=ROCPROF_REPLAY_REQUIRE_HSA_HEADERS");
    let dir = std::env::var_os("HSA_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/include/hsa".into());
    let header = dir.join("hsa_api_trace.h");
    println!("cargo::rerun-if-changed={}", header.display());
    let required = std::env::var("ROCPROF_REPLAY_REQUIRE_HSA_HEADERS").is_ok_and(|v| v == "1");
    if header.is_file() || required {
        println!("cargo::rustc-cfg=have_hsa_headers");
    }
}
