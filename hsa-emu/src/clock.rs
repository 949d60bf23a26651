//! The emulator's timestamp clock: nanoseconds of `CLOCK_MONOTONIC`.
//!
//! `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY` is therefore 1 GHz, and dispatch and copy timestamps
//! convert to the system domain unchanged.

/// Ticks per second of [`now_ticks`].
pub const TICKS_PER_SECOND: u64 = 1_000_000_000;

/// Current timestamp in ticks (nanoseconds of `CLOCK_MONOTONIC`).
pub fn now_ticks() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * TICKS_PER_SECOND + ts.tv_nsec as u64
}
