//! Detects the tooling the end-to-end tests need and tells the tests through `cfg`s:
//!
//! - `have_hsa_headers`: Debian's ROCm 5.2 HSA headers (`/usr/include/hsa/hsa.h`, package
//!   `libhsa-runtime-dev`), needed by the C sample applications and probes;
//! - `have_hipcc`: Debian's HIP compiler and headers (`hipcc` on `PATH` or `$HIPCC`, and
//!   `/usr/include/hip/hip_runtime.h`; packages `hipcc libamdhip64-dev`), needed by the HIP
//!   samples.
//!
//! Tests that need a tool carry `#[cfg_attr(not(have_...), ignore = "...")]`, so they show as
//! ignored, with the reason, when it is missing. With `ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1`
//! (CI sets it) a missing tool fails the build instead.
//!
//! The script reruns when those variables change or a detected file changes; after installing
//! a missing tool, `touch tests/build.rs` (or `cargo clean -p rocprof-replay-e2e`).

use std::path::{Path, PathBuf};

const HSA_HEADER: &str = "/usr/include/hsa/hsa.h";
const HIP_HEADER: &str = "/usr/include/hip/hip_runtime.h";

/// `name` as found on `PATH` (or the path itself when it contains a `/`).
fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_hsa_headers)");
    println!("cargo::rustc-check-cfg=cfg(have_hipcc)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=ROCPROF_REPLAY_REQUIRE_HSA_HEADERS");
    println!("cargo::rerun-if-env-changed=HIPCC");
    let required = std::env::var("ROCPROF_REPLAY_REQUIRE_HSA_HEADERS").is_ok_and(|v| v == "1");

    let hsa = Path::new(HSA_HEADER).is_file();
    if hsa {
        println!("cargo::rerun-if-changed={HSA_HEADER}");
        println!("cargo::rustc-cfg=have_hsa_headers");
    } else if required {
        panic!(
            "ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1 but {HSA_HEADER} is missing: \
             apt-get install -y libhsa-runtime-dev"
        );
    }

    let hipcc = find_program(&std::env::var("HIPCC").unwrap_or_else(|_| "hipcc".into()));
    let hip_header = Path::new(HIP_HEADER).is_file();
    match (&hipcc, hip_header) {
        (Some(hipcc), true) => {
            println!("cargo::rerun-if-changed={}", hipcc.display());
            println!("cargo::rerun-if-changed={HIP_HEADER}");
            println!("cargo::rustc-cfg=have_hipcc");
        }
        _ if required => panic!(
            "ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1 but {} is missing: \
             apt-get install -y hipcc libamdhip64-dev",
            if hipcc.is_none() { "hipcc" } else { HIP_HEADER }
        ),
        _ => {}
    }
}
