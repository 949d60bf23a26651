//! Helpers every `extern "C"` entry point of the emulator uses.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rocprof_replay_sys::*;

/// Runs `f`, turning a panic into `on_panic` so that no panic crosses the C ABI.
///
/// The panic message is printed once per panic on stderr (the emulator has no other channel).
#[inline]
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            eprintln!("hsa-emu: internal error (panic) in an API call: {msg}");
            on_panic
        }
    }
}

/// [`guard`] for functions returning `hsa_status_t`: a panic becomes `HSA_STATUS_ERROR`.
#[inline]
pub(crate) fn guard_status(f: impl FnOnce() -> hsa_status_t) -> hsa_status_t {
    guard(HSA_STATUS_ERROR, f)
}

/// Writes `value` to an attribute out-pointer, or returns INVALID_ARGUMENT for null.
///
/// # Safety
/// `out` must be null or valid for a write of `T` (the caller's contract with the API user).
pub(crate) unsafe fn write_out<T>(out: *mut std::ffi::c_void, value: T) -> hsa_status_t {
    if out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null and valid per the caller's contract; unaligned writes are allowed for
    // attribute buffers.
    unsafe { out.cast::<T>().write_unaligned(value) };
    HSA_STATUS_SUCCESS
}
