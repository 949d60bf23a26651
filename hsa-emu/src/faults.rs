//! Fault injection for the replay engine's tests, configured by environment variables or, at
//! run time, by the exported `hsa_emu_set_fault` (so a test application can arm a fault for
//! exactly the work that follows, counting from then).
//!
//! | variable | effect |
//! |---|---|
//! | `HSA_EMU_FAIL_ALLOC_NTH=N` | the N-th memory allocation of the process (1-based, pools, regions and vmem handles together; IPC export and attach are not allocations) fails with `HSA_STATUS_ERROR_OUT_OF_RESOURCES` |
//! | `HSA_EMU_FAIL_ALLOC_FROM=N` | every allocation from the N-th on fails |
//! | `HSA_EMU_FAIL_COPY_NTH=N` | the N-th `hsa_memory_copy` / async copy of the process fails with `HSA_STATUS_ERROR` |
//! | `HSA_EMU_FAIL_COPY_FROM=N` | every `hsa_memory_copy` / async copy from the N-th on fails with `HSA_STATUS_ERROR` (async copies leave their completion signal untouched) |
//! | `HSA_EMU_COPY_DELAY_MS=MS` | every asynchronous copy waits MS milliseconds on the copy engine before it runs (a slow DMA engine; later copies on that engine wait too) |
//! | `HSA_EMU_DELAY_COPY_NTH=N` | with `HSA_EMU_COPY_DELAY_MS`: only the N-th asynchronous copy that runs is delayed |
//! | `HSA_EMU_COPY_ERROR_NTH=N` | the N-th asynchronous copy that runs fails on the copy engine: nothing is copied and its completion signal is set to -1 (an engine error reported through the signal, after a successful submission) |
//! | `HSA_EMU_HOLD_BARRIERS_MS=MS` | packet processors hold every barrier-AND/OR packet for MS milliseconds before resolving it (a stuck drain) |
//! | `HSA_EMU_HOLD_BARRIER_NTH=N` | with `HSA_EMU_HOLD_BARRIERS_MS`: only the N-th barrier packet processed is held |
//! | `HSA_EMU_HOLD_PLAIN_ONLY=1` | with `HSA_EMU_HOLD_BARRIERS_MS`: only barriers of queues a plain `hsa_queue_create` made are held and counted (not those under intercept queues: under an interposing tool, the tool's own queues) |
//! | `HSA_EMU_REPLAY_KERNEL_DELAY_MS=MS` | every dispatch of rocprof-replay's compare and fingerprint kernels (their built-in shadows, [`crate::replay_kernels`]) waits MS milliseconds before its first work-group runs (a slow device compare) |
//! | `HSA_EMU_DELAY_REPLAY_KERNEL_NTH=N` | with `HSA_EMU_REPLAY_KERNEL_DELAY_MS`: only the N-th such dispatch is delayed |
//! | `HSA_EMU_AMD_EXT_MAJOR=N` | the AMD extension table is presented with `major_id` N (an unknown layout, for tools' version checks) |
//! | `HSA_EMU_FAIL_PROFILE_START=1` | every aqlprofile `start` with buffers (the one that fills the start packet) fails with `HSA_STATUS_ERROR_OUT_OF_RESOURCES` and an error string naming the knob (a counter set-up that fails after the set was validated) |
//! | `HSA_EMU_FAIL_QUEUE_CREATE=1` | every plain `hsa_queue_create` fails with `HSA_STATUS_ERROR_OUT_OF_RESOURCES` (intercept queues are still created: a tool's own queues fail, the application's intercepted ones do not) |
//! | `HSA_EMU_FAIL_QUEUE_INTERCEPT=1` | every `hsa_amd_queue_intercept_create` fails with `HSA_STATUS_ERROR_OUT_OF_RESOURCES` (a tool then falls back to a plain queue it cannot intercept) |
//! | `HSA_EMU_FAIL_SIGNAL_CREATE_NTH=N` | the N-th `hsa_signal_create` / `hsa_amd_signal_create` of the process fails with `HSA_STATUS_ERROR_OUT_OF_RESOURCES` (a tool's proxy or gate signal among them) |
//! | `HSA_EMU_FAIL_SYMBOL_ITERATION=1` | `hsa_executable_iterate_symbols` and its agent/program variants fail with `HSA_STATUS_ERROR` |
//!
//! `hsa_emu_set_fault(name, value)` takes the same names without the `HSA_EMU_` prefix (all but
//! `AMD_EXT_MAJOR`, which is fixed when the tables are built); it sets the knob (0 turns it
//! off) and restarts the count of what the knob counts.
//!
//! Counters are process-wide. Nothing here is active unless its knob is set.

use std::ffi::{CStr, c_char};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rocprof_replay_sys::*;

/// The knobs; 0 means "not set" for every counter and duration.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    fail_alloc_nth: AtomicU64,
    fail_alloc_from: AtomicU64,
    fail_copy_nth: AtomicU64,
    fail_copy_from: AtomicU64,
    fail_signal_create_nth: AtomicU64,
    amd_ext_major: Option<u32>,
    hold_barriers_ms: AtomicU64,
    hold_barrier_nth: AtomicU64,
    hold_plain_only: AtomicBool,
    copy_delay_ms: AtomicU64,
    delay_copy_nth: AtomicU64,
    copy_error_nth: AtomicU64,
    replay_kernel_delay_ms: AtomicU64,
    delay_replay_kernel_nth: AtomicU64,
    fail_symbol_iteration: AtomicBool,
    fail_profile_start: AtomicBool,
    fail_queue_intercept: AtomicBool,
    fail_queue_create: AtomicBool,
    allocs: AtomicU64,
    copies: AtomicU64,
    signals: AtomicU64,
    async_runs: AtomicU64,
    error_runs: AtomicU64,
    barriers: AtomicU64,
    replay_kernels: AtomicU64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn knob(name: &str) -> AtomicU64 {
    AtomicU64::new(env_u64(name).unwrap_or(0))
}

/// The process's fault configuration (read once from the environment).
pub(crate) fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(|| Faults {
        fail_alloc_nth: knob("HSA_EMU_FAIL_ALLOC_NTH"),
        fail_alloc_from: knob("HSA_EMU_FAIL_ALLOC_FROM"),
        fail_copy_nth: knob("HSA_EMU_FAIL_COPY_NTH"),
        fail_copy_from: knob("HSA_EMU_FAIL_COPY_FROM"),
        fail_signal_create_nth: knob("HSA_EMU_FAIL_SIGNAL_CREATE_NTH"),
        amd_ext_major: env_u64("HSA_EMU_AMD_EXT_MAJOR").and_then(|v| u32::try_from(v).ok()),
        hold_barriers_ms: knob("HSA_EMU_HOLD_BARRIERS_MS"),
        hold_barrier_nth: knob("HSA_EMU_HOLD_BARRIER_NTH"),
        hold_plain_only: AtomicBool::new(env_u64("HSA_EMU_HOLD_PLAIN_ONLY") == Some(1)),
        copy_delay_ms: knob("HSA_EMU_COPY_DELAY_MS"),
        delay_copy_nth: knob("HSA_EMU_DELAY_COPY_NTH"),
        copy_error_nth: knob("HSA_EMU_COPY_ERROR_NTH"),
        replay_kernel_delay_ms: knob("HSA_EMU_REPLAY_KERNEL_DELAY_MS"),
        delay_replay_kernel_nth: knob("HSA_EMU_DELAY_REPLAY_KERNEL_NTH"),
        fail_symbol_iteration: AtomicBool::new(env_u64("HSA_EMU_FAIL_SYMBOL_ITERATION") == Some(1)),
        fail_profile_start: AtomicBool::new(env_u64("HSA_EMU_FAIL_PROFILE_START") == Some(1)),
        fail_queue_intercept: AtomicBool::new(env_u64("HSA_EMU_FAIL_QUEUE_INTERCEPT") == Some(1)),
        fail_queue_create: AtomicBool::new(env_u64("HSA_EMU_FAIL_QUEUE_CREATE") == Some(1)),
        ..Faults::default()
    })
}

/// Counts one event on `counter`; whether it is the `nth` or at or past `from` (0: unset).
fn hits(counter: &AtomicU64, nth: &AtomicU64, from: &AtomicU64) -> bool {
    let (nth, from) = (nth.load(Ordering::Relaxed), from.load(Ordering::Relaxed));
    if nth == 0 && from == 0 {
        return false;
    }
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    n == nth || (from != 0 && n >= from)
}

fn millis(v: &AtomicU64) -> Option<Duration> {
    match v.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

impl Faults {
    /// Counts one allocation; `true` if it must fail.
    pub(crate) fn allocation_fails(&self) -> bool {
        hits(&self.allocs, &self.fail_alloc_nth, &self.fail_alloc_from)
    }

    /// Counts one copy; `true` if it must fail.
    pub(crate) fn copy_fails(&self) -> bool {
        hits(&self.copies, &self.fail_copy_nth, &self.fail_copy_from)
    }

    /// Counts one signal creation; `true` if it must fail.
    pub(crate) fn signal_create_fails(&self) -> bool {
        hits(
            &self.signals,
            &self.fail_signal_create_nth,
            &AtomicU64::new(0),
        )
    }

    /// How long the asynchronous copy about to run waits first (counts the copy).
    pub(crate) fn copy_delay(&self) -> Option<Duration> {
        let delay = millis(&self.copy_delay_ms)?;
        let n = self.async_runs.fetch_add(1, Ordering::Relaxed) + 1;
        let nth = self.delay_copy_nth.load(Ordering::Relaxed);
        (nth == 0 || nth == n).then_some(delay)
    }

    /// Whether the asynchronous copy about to run fails on the engine (counts the copy).
    pub(crate) fn copy_errs(&self) -> bool {
        hits(&self.error_runs, &self.copy_error_nth, &AtomicU64::new(0))
    }

    /// How long the dispatch of a rocprof-replay kernel about to run waits first (counts the
    /// dispatch).
    pub(crate) fn replay_kernel_delay(&self) -> Option<Duration> {
        let delay = millis(&self.replay_kernel_delay_ms)?;
        let n = self.replay_kernels.fetch_add(1, Ordering::Relaxed) + 1;
        let nth = self.delay_replay_kernel_nth.load(Ordering::Relaxed);
        (nth == 0 || nth == n).then_some(delay)
    }

    /// The `major_id` to present for the AMD extension table instead of the real one.
    pub(crate) fn amd_ext_major(&self) -> Option<u32> {
        self.amd_ext_major
    }

    /// How long the barrier packet about to be resolved on a queue (`plain`: one a plain
    /// `hsa_queue_create` made) is held first (counts the barrier).
    pub(crate) fn barrier_hold(&self, plain: bool) -> Option<Duration> {
        let hold = millis(&self.hold_barriers_ms)?;
        if !plain && self.hold_plain_only.load(Ordering::Relaxed) {
            return None;
        }
        let n = self.barriers.fetch_add(1, Ordering::Relaxed) + 1;
        let nth = self.hold_barrier_nth.load(Ordering::Relaxed);
        (nth == 0 || nth == n).then_some(hold)
    }

    /// Whether symbol iteration must fail.
    pub(crate) fn symbol_iteration_fails(&self) -> bool {
        self.fail_symbol_iteration.load(Ordering::Relaxed)
    }

    /// Whether aqlprofile's `start` with buffers must fail.
    pub(crate) fn profile_start_fails(&self) -> bool {
        self.fail_profile_start.load(Ordering::Relaxed)
    }

    /// Whether a plain `hsa_queue_create` must fail.
    pub(crate) fn queue_create_fails(&self) -> bool {
        self.fail_queue_create.load(Ordering::Relaxed)
    }

    /// Whether `hsa_amd_queue_intercept_create` must fail.
    pub(crate) fn queue_intercept_fails(&self) -> bool {
        self.fail_queue_intercept.load(Ordering::Relaxed)
    }

    /// Sets a knob by name (without `HSA_EMU_`) and restarts its count.
    fn set(&self, name: &str, value: u64) -> bool {
        let restart = |counter: &AtomicU64, knob: &AtomicU64| {
            knob.store(value, Ordering::Relaxed);
            counter.store(0, Ordering::Relaxed);
        };
        match name {
            "FAIL_ALLOC_NTH" => restart(&self.allocs, &self.fail_alloc_nth),
            "FAIL_ALLOC_FROM" => restart(&self.allocs, &self.fail_alloc_from),
            "FAIL_COPY_NTH" => restart(&self.copies, &self.fail_copy_nth),
            "FAIL_COPY_FROM" => restart(&self.copies, &self.fail_copy_from),
            "FAIL_SIGNAL_CREATE_NTH" => restart(&self.signals, &self.fail_signal_create_nth),
            "COPY_DELAY_MS" => restart(&self.async_runs, &self.copy_delay_ms),
            "DELAY_COPY_NTH" => restart(&self.async_runs, &self.delay_copy_nth),
            "COPY_ERROR_NTH" => restart(&self.error_runs, &self.copy_error_nth),
            "HOLD_BARRIERS_MS" => restart(&self.barriers, &self.hold_barriers_ms),
            "HOLD_BARRIER_NTH" => restart(&self.barriers, &self.hold_barrier_nth),
            "REPLAY_KERNEL_DELAY_MS" => restart(&self.replay_kernels, &self.replay_kernel_delay_ms),
            "DELAY_REPLAY_KERNEL_NTH" => {
                restart(&self.replay_kernels, &self.delay_replay_kernel_nth)
            }
            "FAIL_SYMBOL_ITERATION" => self
                .fail_symbol_iteration
                .store(value == 1, Ordering::Relaxed),
            "FAIL_PROFILE_START" => self.fail_profile_start.store(value == 1, Ordering::Relaxed),
            "HOLD_PLAIN_ONLY" => self.hold_plain_only.store(value == 1, Ordering::Relaxed),
            "FAIL_QUEUE_CREATE" => self.fail_queue_create.store(value == 1, Ordering::Relaxed),
            "FAIL_QUEUE_INTERCEPT" => self
                .fail_queue_intercept
                .store(value == 1, Ordering::Relaxed),
            _ => return false,
        }
        true
    }
}

/// `hsa_status_t hsa_emu_set_fault(const char* name, uint64_t value)`: sets a fault knob at run
/// time (see the module documentation). `HSA_STATUS_ERROR_INVALID_ARGUMENT` for an unknown
/// name. Not an HSA function: test applications find it with `dlsym`.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hsa_emu_set_fault(name: *const c_char, value: u64) -> hsa_status_t {
    crate::ffi::guard_status(|| {
        if name.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: caller contract.
        let name = unsafe { CStr::from_ptr(name) };
        match name.to_str() {
            Ok(n) if faults().set(n, value) => HSA_STATUS_SUCCESS,
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_knob_set_at_run_time_counts_from_then() {
        let f = Faults::default();
        assert!(!f.copy_fails());
        assert!(f.set("FAIL_COPY_NTH", 2));
        assert!(!f.copy_fails());
        assert!(f.copy_fails());
        assert!(!f.copy_fails());
        assert!(f.set("FAIL_COPY_NTH", 0));
        assert!(f.set("FAIL_COPY_FROM", 1));
        assert!(f.copy_fails() && f.copy_fails());
        assert!(!f.set("NO_SUCH_KNOB", 1));
        assert!(f.set("COPY_DELAY_MS", 5));
        assert_eq!(f.copy_delay(), Some(Duration::from_millis(5)));
        assert!(f.set("REPLAY_KERNEL_DELAY_MS", 7));
        assert!(f.set("DELAY_REPLAY_KERNEL_NTH", 2));
        assert_eq!(
            (f.replay_kernel_delay(), f.replay_kernel_delay()),
            (None, Some(Duration::from_millis(7)))
        );
        assert!(f.set("COPY_ERROR_NTH", 2));
        assert_eq!(
            (f.copy_errs(), f.copy_errs(), f.copy_errs()),
            (false, true, false)
        );
        assert!(!f.signal_create_fails());
        assert!(f.set("FAIL_SIGNAL_CREATE_NTH", 1));
        assert_eq!(
            (f.signal_create_fails(), f.signal_create_fails()),
            (true, false)
        );
    }
}
