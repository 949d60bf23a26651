//! Detects the CUDA toolkit headers for the layout test of the `cuda` declarations: emits
//! `cfg(have_cuda_headers)` when `cuda.h` and `cupti.h` are found under `CUDA_HOME`,
//! `CUDA_PATH` or `/usr/local/cuda`. Without them that test shows as ignored, with the reason;
//! the comparison against the figures recorded from CUDA 13.0 runs everywhere.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_cuda_headers)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CUDA_HOME");
    println!("cargo::rerun-if-env-changed=CUDA_PATH");
    let root = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")))
        .find(|p| p.join("include/cuda.h").is_file());
    let Some(root) = root else { return };
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
