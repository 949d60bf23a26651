//! Fault injection for the replay engine's tests, configured by environment variables.
//!
//! | variable | effect |
//! |---|---|
//! | `HSA_EMU_FAIL_ALLOC_NTH=N` | the N-th memory allocation of the process (1-based, pools and regions together) fails with `HSA_STATUS_ERROR_OUT_OF_RESOURCES` |
//! | `HSA_EMU_FAIL_ALLOC_FROM=N` | every allocation from the N-th on fails |
//! | `HSA_EMU_FAIL_COPY_NTH=N` | the N-th `hsa_memory_copy` / async copy of the process fails with `HSA_STATUS_ERROR` |
//! | `HSA_EMU_FAIL_COPY_FROM=N` | every `hsa_memory_copy` / async copy from the N-th on fails with `HSA_STATUS_ERROR` (async copies leave their completion signal untouched) |
//! | `HSA_EMU_HOLD_BARRIERS_MS=MS` | packet processors hold every barrier-AND/OR packet for MS milliseconds before resolving it (a stuck drain) |
//! | `HSA_EMU_AMD_EXT_MAJOR=N` | the AMD extension table is presented with `major_id` N (an unknown layout, for tools' version checks) |
//! | `HSA_EMU_FAIL_SYMBOL_ITERATION=1` | `hsa_executable_iterate_symbols` and its agent/program variants fail with `HSA_STATUS_ERROR` |
//!
//! Counters are process-wide. Nothing here is active unless its variable is set.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The parsed knobs.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    fail_alloc_nth: Option<u64>,
    fail_alloc_from: Option<u64>,
    fail_copy_nth: Option<u64>,
    fail_copy_from: Option<u64>,
    amd_ext_major: Option<u32>,
    hold_barriers: Option<Duration>,
    fail_symbol_iteration: bool,
    allocs: AtomicU64,
    copies: AtomicU64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The process's fault configuration (read once).
pub(crate) fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(|| Faults {
        fail_alloc_nth: env_u64("HSA_EMU_FAIL_ALLOC_NTH"),
        fail_alloc_from: env_u64("HSA_EMU_FAIL_ALLOC_FROM"),
        fail_copy_nth: env_u64("HSA_EMU_FAIL_COPY_NTH"),
        fail_copy_from: env_u64("HSA_EMU_FAIL_COPY_FROM"),
        amd_ext_major: env_u64("HSA_EMU_AMD_EXT_MAJOR").and_then(|v| u32::try_from(v).ok()),
        hold_barriers: env_u64("HSA_EMU_HOLD_BARRIERS_MS").map(Duration::from_millis),
        fail_symbol_iteration: env_u64("HSA_EMU_FAIL_SYMBOL_ITERATION") == Some(1),
        ..Faults::default()
    })
}

impl Faults {
    /// Counts one allocation; `true` if it must fail.
    pub(crate) fn allocation_fails(&self) -> bool {
        if self.fail_alloc_nth.is_none() && self.fail_alloc_from.is_none() {
            return false;
        }
        let n = self.allocs.fetch_add(1, Ordering::Relaxed) + 1;
        self.fail_alloc_nth == Some(n) || self.fail_alloc_from.is_some_and(|from| n >= from)
    }

    /// Counts one copy; `true` if it must fail.
    pub(crate) fn copy_fails(&self) -> bool {
        if self.fail_copy_nth.is_none() && self.fail_copy_from.is_none() {
            return false;
        }
        let n = self.copies.fetch_add(1, Ordering::Relaxed) + 1;
        self.fail_copy_nth == Some(n) || self.fail_copy_from.is_some_and(|from| n >= from)
    }

    /// The `major_id` to present for the AMD extension table instead of the real one.
    pub(crate) fn amd_ext_major(&self) -> Option<u32> {
        self.amd_ext_major
    }

    /// How long a barrier packet is held before it may resolve.
    pub(crate) fn barrier_hold(&self) -> Option<Duration> {
        self.hold_barriers
    }

    /// Whether symbol iteration must fail.
    pub(crate) fn symbol_iteration_fails(&self) -> bool {
        self.fail_symbol_iteration
    }
}
