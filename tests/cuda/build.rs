//! Tells the tests whether to run on a GPU: `cfg(gpu_tests)` when the tests are built with
//! `ROCPROF_REPLAY_GPU_TESTS=1`. Without it the GPU tests show as ignored, with the reason;
//! with it they run and fail loudly when the GPU, the CUDA toolkit or CUPTI is missing.
//! (They need an NVIDIA GPU and `nvcc`, which a machine rarely has by accident, so they are
//! asked for rather than detected.)

fn main() {
    println!("cargo::rustc-check-cfg=cfg(gpu_tests)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=ROCPROF_REPLAY_GPU_TESTS");
    if std::env::var("ROCPROF_REPLAY_GPU_TESTS").is_ok_and(|v| v == "1") {
        println!("cargo::rustc-cfg=gpu_tests");
    }
}
