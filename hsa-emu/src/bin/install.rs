//! `hsa-emu-install [DIR]`: puts the emulator into DIR as `libhsa-runtime64.so.1` (plus the
//! `libhsa-runtime64.so` link name), ready for `LD_LIBRARY_PATH=DIR`.
//!
//! `cargo run -p hsa-emu --bin hsa-emu-install -- DIR` is the one command: run under Cargo, the
//! installer first builds the library itself (`cargo build -p hsa-emu --lib` in its own profile
//! and target directory — Cargo does not build a package's `cdylib` just to run one of its
//! binaries), then installs it. DIR defaults to `<target>/hsa-emu`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Builds the cdylib with the Cargo that runs us, in the same profile and target directory.
fn build_library(profile_dir: &Path) -> Result<(), String> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(()); // not run by Cargo: install what is there (checked below)
    };
    let target_dir = profile_dir
        .parent()
        .ok_or("this program is not in a target directory")?;
    let profile = profile_dir
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "hsa-emu", "--lib", "--target-dir"])
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("building the library failed ({status})"))
    }
}

fn run() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let profile_dir = exe.parent().ok_or("this program has no directory")?;
    build_library(profile_dir)?;
    let built = profile_dir.join("libhsa_emu.so");
    if !built.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build -p hsa-emu` (same profile)",
            built.display()
        ));
    }
    let dir = match std::env::args_os().nth(1) {
        Some(d) => PathBuf::from(d),
        None => profile_dir.parent().unwrap_or(profile_dir).join("hsa-emu"),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let lib = dir.join("libhsa-runtime64.so.1");
    let tmp = dir.join(".libhsa-runtime64.so.1.tmp");
    std::fs::copy(&built, &tmp).map_err(|e| format!("cannot copy to {}: {e}", tmp.display()))?;
    // Rename over the old file so a process that has the old one mapped keeps it intact.
    std::fs::rename(&tmp, &lib).map_err(|e| format!("cannot install {}: {e}", lib.display()))?;
    let link = dir.join("libhsa-runtime64.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(Path::new("libhsa-runtime64.so.1"), &link)
        .map_err(|e| format!("cannot link {}: {e}", link.display()))?;
    Ok(dir)
}

fn main() -> ExitCode {
    match run() {
        Ok(dir) => {
            println!("{}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hsa-emu-install: {e}");
            ExitCode::FAILURE
        }
    }
}
