//! Emits `cfg(have_hsa_headers)` when Debian's HSA headers are installed (the C sample
//! applications the end-to-end tests run include `<hsa/hsa.h>`). With
//! `ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1` (CI) missing headers fail the build instead.
//!
//! Emits `cfg(gpu_tests)` with `ROCPROF_REPLAY_GPU_TESTS=1`: the test that runs the command on
//! an NVIDIA GPU then runs (and fails loudly without a GPU, `nvcc` or a timer built with the
//! `cuda` feature); without it the test shows as ignored, with the reason.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_hsa_headers)");
    println!("cargo::rustc-check-cfg=cfg(gpu_tests)");
    println!("cargo::rerun-if-env-changed=ROCPROF_REPLAY_GPU_TESTS");
    if std::env::var("ROCPROF_REPLAY_GPU_TESTS").is_ok_and(|v| v == "1") {
        println!("cargo::rustc-cfg=gpu_tests");
    }
    println!("cargo::rerun-if-changed=/usr/include/hsa/hsa.h");
    println!("cargo::rerun-if-env-changed=ROCPROF_REPLAY_REQUIRE_HSA_HEADERS");
    if std::path::Path::new("/usr/include/hsa/hsa.h").exists() {
        println!("cargo::rustc-cfg=have_hsa_headers");
    } else if std::env::var("ROCPROF_REPLAY_REQUIRE_HSA_HEADERS").is_ok_and(|v| v == "1") {
        panic!(
            "ROCPROF_REPLAY_REQUIRE_HSA_HEADERS=1 but /usr/include/hsa/hsa.h is missing \
             (apt-get install libhsa-runtime-dev)"
        );
    }
}
