//! Finding the application, the built-in timer library and hsa-emu.
//!
//! The timer (`librocprof_replay_timer.so`) and hsa-emu (`hsa-emu/libhsa-runtime64.so.1`) are
//! looked for next to this program — `target/<profile>/` when cargo built it, where
//! `rocprof-replay demo` builds them — unless `ROCPROF_REPLAY_TIMER_LIB` /
//! `ROCPROF_REPLAY_EMU_DIR` name them.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::{EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, Failure};

/// File name of the built-in timer library.
pub(crate) const TIMER_LIB: &str = "librocprof_replay_timer.so";
/// Variable naming the timer library.
pub(crate) const TIMER_LIB_VAR: &str = "ROCPROF_REPLAY_TIMER_LIB";
/// Variable naming hsa-emu's directory.
pub(crate) const EMU_DIR_VAR: &str = "ROCPROF_REPLAY_EMU_DIR";
/// The runtime's file name.
pub(crate) const RUNTIME_SONAME: &str = "libhsa-runtime64.so.1";

/// The directory of this program.
pub(crate) fn exe_dir() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(format!("cannot find this program: {e}")))?;
    Ok(exe
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".")))
}

/// How to get the timer and hsa-emu when they are missing.
fn how_to_build(profile_flag: &str) -> String {
    format!(
        "run `cargo run{profile_flag} -p rocprof-replay-cli -- demo` once in the rocprof-replay \
         sources (it builds both), or build them: `cargo build{profile_flag} -p \
         rocprof-replay-timer` and `cargo run{profile_flag} -p hsa-emu --bin hsa-emu-install -- \
         target/{}/hsa-emu` (on NVIDIA: `--features rocprof-replay-timer/cuda`)",
        if profile_flag.is_empty() {
            "debug"
        } else {
            "release"
        }
    )
}

fn profile_flag() -> &'static str {
    if cfg!(debug_assertions) {
        ""
    } else {
        " --release"
    }
}

/// The timer library: `$ROCPROF_REPLAY_TIMER_LIB`, else next to this program.
pub(crate) fn timer_lib() -> Result<PathBuf, Failure> {
    if let Some(path) = std::env::var_os(TIMER_LIB_VAR).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Failure::new(format!(
                "{TIMER_LIB_VAR}={} is not a file",
                path.display()
            )))
        };
    }
    let path = exe_dir()?.join(TIMER_LIB);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Failure::new(format!(
            "the built-in timer library {} is missing; {} (or set {TIMER_LIB_VAR}, or pass \
             --tool)",
            path.display(),
            how_to_build(profile_flag())
        )))
    }
}

/// hsa-emu's directory (holding `libhsa-runtime64.so.1`): `$ROCPROF_REPLAY_EMU_DIR`, else
/// `hsa-emu/` next to this program.
pub(crate) fn emu_dir() -> Result<PathBuf, Failure> {
    let (dir, from_var) = match std::env::var_os(EMU_DIR_VAR).filter(|v| !v.is_empty()) {
        Some(dir) => (PathBuf::from(dir), true),
        None => (exe_dir()?.join("hsa-emu"), false),
    };
    let lib = dir.join(RUNTIME_SONAME);
    if lib.is_file() {
        return Ok(dir);
    }
    Err(Failure::new(if from_var {
        format!(
            "runtime library not found: {EMU_DIR_VAR}={} holds no {RUNTIME_SONAME}",
            dir.display()
        )
    } else {
        format!(
            "runtime library not found: hsa-emu ({}) is missing; {} (or set {EMU_DIR_VAR})",
            lib.display(),
            how_to_build(profile_flag())
        )
    }))
}

/// The application's path, found like `execvp` would: a name with a `/` as given, else the
/// first match in `$PATH`. 127 when nothing is there, 126 when it is not an executable file.
pub(crate) fn application(name: &OsStr) -> Result<PathBuf, Failure> {
    let not_found = |why: String| Failure {
        message: why,
        status: EXIT_NOT_FOUND,
    };
    if name.is_empty() {
        return Err(not_found("the application's name is empty".into()));
    }
    let shown = Path::new(name).display().to_string();
    let candidate = if name.as_bytes().contains(&b'/') {
        let path = PathBuf::from(name);
        if !path.exists() {
            return Err(not_found(format!("cannot run {shown}: no such file")));
        }
        path
    } else {
        let path_var = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
        let mut first_non_executable = None;
        let mut found = None;
        for dir in std::env::split_paths(&path_var) {
            let dir = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            };
            let path = dir.join(name);
            if path.is_file() {
                if is_executable(&path) {
                    found = Some(path);
                    break;
                }
                first_non_executable.get_or_insert(path);
            }
        }
        match (found, first_non_executable) {
            (Some(path), _) => path,
            (None, Some(path)) => path,
            (None, None) => {
                return Err(not_found(format!("cannot run {shown}: not found in PATH")));
            }
        }
    };
    if candidate.is_dir() {
        return Err(Failure {
            message: format!("cannot run {}: it is a directory", candidate.display()),
            status: EXIT_NOT_EXECUTABLE,
        });
    }
    if !is_executable(&candidate) {
        return Err(Failure {
            message: format!(
                "cannot run {}: permission denied (not executable)",
                candidate.display()
            ),
            status: EXIT_NOT_EXECUTABLE,
        });
    }
    Ok(candidate)
}

/// Whether this process may execute `path`.
fn is_executable(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn applications_are_found_like_execvp() {
        let sh = application(OsStr::new("sh")).unwrap();
        assert!(sh.ends_with("sh"), "{}", sh.display());
        let e = application(OsStr::new("no-such-program-rocprof-replay")).unwrap_err();
        assert_eq!(e.status, EXIT_NOT_FOUND);
        assert!(e.message.contains("not found in PATH"), "{}", e.message);
        let e = application(OsStr::new("./no/such/file")).unwrap_err();
        assert_eq!(e.status, EXIT_NOT_FOUND);
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = application(plain.as_os_str()).unwrap_err();
        assert_eq!(e.status, EXIT_NOT_EXECUTABLE);
        assert!(e.message.contains("not executable"), "{}", e.message);
        let e = application(dir.path().as_os_str()).unwrap_err();
        assert_eq!(e.status, EXIT_NOT_EXECUTABLE);
    }
}
