//! Tells the layout-proof tests which headers are installed:
//!
//! - `cfg(have_hsa_headers)` (`tests/header_layout.rs`): Debian's HSA headers. With
//!   `ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1` (CI) the test runs and fails when they are missing.
//! - `cfg(have_cuda_headers)` (`tests/cuda_layout.rs`, feature `cuda`): `cuda.h` and `cupti.h`
//!   under `CUDA_HOME`, `CUDA_PATH` or `/usr/local/cuda`; the comparison against the figures
//!   recorded from CUDA 13.0 runs everywhere.
//!
//! Without them the tests show as ignored, with the reason. Nothing in the library depends on
//! the headers.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_hsa_headers)");
    println!("cargo::rustc-check-cfg=cfg(have_cuda_headers)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=HSA_INCLUDE_DIR");
    println!("cargo::rerun-if-env-changed=ROCPROF_REPLAY_REQUIRE_HSA_HEADERS");
    println!("cargo::rerun-if-env-changed=CUDA_HOME");
    println!("cargo::rerun-if-env-changed=CUDA_PATH");

    let dir = std::env::var_os("HSA_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/include/hsa".into());
    let header = dir.join("hsa_api_trace.h");
    println!("cargo::rerun-if-changed={}", header.display());
    let required = std::env::var("ROCPROF_REPLAY_REQUIRE_HSA_HEADERS").is_ok_and(|v| v == "1");
    if header.is_file() || required {
        println!("cargo::rustc-cfg=have_hsa_headers");
    }

    let root = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")))
        .find(|p| p.join("include/cuda.h").is_file());
    if let Some(root) = root {
        let cupti = [root.join("extras/CUPTI/include"), root.join("include")]
            .into_iter()
            .any(|p| p.join("cupti.h").is_file());
        if cupti {
            println!(
                "cargo::rerun-if-changed={}",
                root.join("include/cuda.h").display()
            );
            println!("cargo::rustc-cfg=have_cuda_headers");
        }
    }
}
