//! Builds what the interceptor target loads at run time: the stress kernels (an hsa-emu code
//! object: a host shared library) and the table shim tool (`shim/table_shim.c`). Their paths
//! reach the code as `FUZZ_KERNELS` and `FUZZ_SHIM`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cc(args: &[&str], out: &Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC",
        ])
        .args(args)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed building {}", out.display());
}

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = here.parent().unwrap();
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let kernels_src = root.join("tests/fixtures/stress_kernels.c");
    let shim_src = here.join("shim/table_shim.c");
    for p in [
        &kernels_src,
        &shim_src,
        &root.join("examples/kernels/sample_kernels.c"),
        &root.join("hsa-emu/include/hsa_emu_kernel.h"),
    ] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let kernels = out.join("libfuzz_kernels.so");
    let include = format!("-I{}", root.join("hsa-emu/include").display());
    cc(&[&include, kernels_src.to_str().unwrap()], &kernels);
    let shim = out.join("libfuzz_table_shim.so");
    cc(&[shim_src.to_str().unwrap()], &shim);
    println!("cargo:rustc-env=FUZZ_KERNELS={}", kernels.display());
    println!("cargo:rustc-env=FUZZ_SHIM={}", shim.display());
}
