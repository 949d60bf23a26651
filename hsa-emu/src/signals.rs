//! Signals: `amd_signal_t`-compatible memory, every atomic operation and ordering, blocking
//! waits with deadlines, `hsa_amd_signal_wait_any`, async handlers and `hsa_amd_async_function`.
//!
//! OWNER: helper A. Interface used by other modules is below; keep these signatures.

use std::time::Instant;

use rocprof_replay_sys::*;

use crate::api::Tables;

/// Fills the signal slots of the core and AMD extension tables.
pub(crate) fn install(_t: &mut Tables) {}

/// Creates a user signal with `initial` value; `None` when out of memory.
pub(crate) fn create(_initial: i64) -> Option<hsa_signal_t> {
    unimplemented!("signals::create")
}

/// Destroys a signal created by [`create`] or the API.
pub(crate) fn destroy(_s: hsa_signal_t) {
    unimplemented!("signals::destroy")
}

/// Whether `s` is a live signal of this runtime.
pub(crate) fn is_valid(_s: hsa_signal_t) -> bool {
    unimplemented!("signals::is_valid")
}

/// Current value (acquire).
pub(crate) fn load(_s: hsa_signal_t) -> i64 {
    unimplemented!("signals::load")
}

/// Stores `v` (release) and wakes waiters and the store hook.
pub(crate) fn store(_s: hsa_signal_t, _v: i64) {
    unimplemented!("signals::store")
}

/// Atomically subtracts `v` (acq-rel) and wakes waiters and the store hook: packet completion.
pub(crate) fn subtract(_s: hsa_signal_t, _v: i64) {
    unimplemented!("signals::subtract")
}

/// Blocks without spinning until `value cond compare` holds or `deadline` passes; returns the
/// last value observed.
pub(crate) fn wait(
    _s: hsa_signal_t,
    _cond: hsa_signal_condition_t,
    _compare: i64,
    _deadline: Option<Instant>,
) -> i64 {
    unimplemented!("signals::wait")
}

/// Records start/end timestamps in the signal's `amd_signal_t` (profiling).
pub(crate) fn set_timestamps(_s: hsa_signal_t, _start: u64, _end: u64) {
    unimplemented!("signals::set_timestamps")
}

/// The start/end timestamps recorded in the signal.
pub(crate) fn timestamps(_s: hsa_signal_t) -> (u64, u64) {
    unimplemented!("signals::timestamps")
}

/// Called on the storing thread after every value change of `s` made through the API.
pub(crate) type StoreHook = Box<dyn Fn(i64) + Send + Sync>;

/// Installs a hook run after every value change of `s` (doorbells use it).
pub(crate) fn set_store_hook(_s: hsa_signal_t, _hook: StoreHook) {
    unimplemented!("signals::set_store_hook")
}
