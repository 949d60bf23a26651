//! Kernel replay for GPU profiling tools.
//!
//! A tool implements [`ReplayPolicy`]: for each kernel dispatch it decides how many passes to
//! run ([`PassPlan`]) and does its per-pass work in [`on_pass`](ReplayPolicy::on_pass) and
//! [`on_pass_end`](ReplayPolicy::on_pass_end). The engine snapshots the device memory the
//! kernel may touch, runs the dispatch that many times restoring memory between passes, and
//! lets the application see exactly one execution and one completion. Put
//! [`#[rocprof_tool]`](rocprof_tool) on the type, build a `cdylib`, and run any HSA or HIP
//! application with `LD_PRELOAD=libmytool.so` (or `HSA_TOOLS_LIB=libmytool.so`). With the `cuda`
//! feature the library also replays CUDA launches: `CUDA_INJECTION64_PATH=libmytool.so app`.
//!
//! ```
//! use rocprof_replay::{Context, DispatchInfo, Outcome, PassPlan, ReplayPolicy, Service};
//!
//! /// Times every kernel over 5 passes and prints one line per dispatch.
//! pub struct Timer {
//!     timing: Context,
//! }
//!
//! impl Default for Timer {
//!     fn default() -> Self {
//!         Timer { timing: Context::started("timing", &[Service::DispatchTiming]) }
//!     }
//! }
//!
//! impl ReplayPolicy for Timer {
//!     type State = ();
//!     type PassState = ();
//!
//!     fn pass_count(&self, _info: &DispatchInfo) -> PassPlan<Self> {
//!         PassPlan::exactly(5, ())
//!     }
//!
//!     fn on_end(&self, info: &DispatchInfo, _: (), outcome: &Outcome) {
//!         // "vector_add dispatch 3 on agent 0: replayed, 5 passes, kernel median 12.4 us ..."
//!         eprintln!("{}: {info}: {outcome}", self.timing.name());
//!     }
//! }
//!
//! // In a tool crate (crate-type = ["cdylib"]) one line exports it:
//! // #[rocprof_replay::rocprof_tool] on the struct.
//! let timer = Timer::default();
//! let info = rocprof_replay::testing::dispatch("vector_add");
//! assert!(matches!(timer.pass_count(&info), PassPlan::Exactly { passes: 5, .. }));
//! ```
//!
//! # Modules
//! | module | what it holds |
//! |---|---|
//! | [`policy`] | [`ReplayPolicy`], [`PassPlan`], [`Pass`], [`PassReport`], [`Outcome`], [`DeclineReason`], and how the reference semantics map to them |
//! | [`context`] | [`Context`], [`Service`], [`PassGuard`] (per pass, RAII), [`LoopContexts`] (sticky): localized contexts |
//! | [`counters`] | hardware counters as typed metric sets validated against an agent's catalog, split into passes; the engine runs their counter passes after the policy's ([`ReplayPolicy::metrics`]) |
//! | [`config`] | tool settings from `ROCPROF_REPLAY_*` variables: the shared names, parsers, one way to report a bad value |
//! | [`stats`] | [`stats::Summary`]: min, median, max, mean, standard deviation, relative standard error of pass times |
//! | [`report`] | [`report::Bytes`], [`report::Time`], [`report::Millis`], and `Display` for [`Outcome`], [`OutcomeKind`], [`DispatchInfo`] |
//! | [`dispatch`] | [`DispatchInfo`] and identifiers |
//! | [`error`] | [`Error`] |
//! | [`testing`] | [`testing::simulate`]: run a policy through the real engine against host memory, for unit tests; [`testing::dispatch`], [`testing::outcome`], [`testing::pass_report`] build the engine's values for tests |
//! | `engine` | vendor-neutral: allocation inventory, snapshot, replay window, outcome records |
//! | `hsa` | the HSA backend: table hooks, intercept queues, drains, allocation tracking |
//! | `cuda` | the CUDA backend (feature `cuda`): CUPTI callbacks, the window across a launch's enter and exit callbacks, device arena |
//!
//! # Environment
//! | variable | effect |
//! |---|---|
//! | `ROCPROF_REPLAY_LOG` | log level on stderr (`error` by default; `warn`, `info`, `debug`, `trace`, `off`) |
//! | `ROCPROF_REPLAY_OUTPUT` | append one JSON object per dispatch (JSON Lines) to this file |
//! | `ROCPROF_REPLAY_BUDGET_MB` | largest snapshot (default: half the available host memory) |
//! | `ROCPROF_REPLAY_DRAIN_TIMEOUT_MS` | deadline for the agent to go idle (default 60000) |
//! | `ROCPROF_REPLAY_PASS_TIMEOUT_MS` | deadline for one pass (default 120000) |
//! | `ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS` | how much longer a late pass is waited for (default 60000) |
//! | `ROCPROF_REPLAY_LOCK_TIMEOUT_MS` | deadline for the per-agent lock (default 60000) |
//! | `ROCPROF_REPLAY_YIELD_MS` | how long work the window holds up (CUDA: on another stream; HSA: a copy, or work of another queue) may wait while its first pass has not finished (default 1000) |
//! | `ROCPROF_REPLAY_COPY_TIMEOUT_MS` | deadline for one capture or restore (default 60000) |

pub mod config;
pub mod context;
pub mod counters;
#[cfg(feature = "cuda")]
mod cuda;
pub mod dispatch;
mod engine;
pub mod error;
mod hsa;
mod log;
pub mod policy;
mod registration;
pub mod report;
pub mod stats;
pub mod testing;

pub use context::{Context, LoopContexts, PassGuard, Service};
pub use dispatch::{AgentId, DispatchId, DispatchInfo, QueueId, Runtime};
pub use error::Error;
pub use policy::{
    Consults, DeclineReason, FailureReason, FootprintKind, FootprintMode, HostMemory,
    MAX_OPEN_ENDED_PASSES, MAX_PASSES, Outcome, OutcomeKind, Pass, PassPlan, PassReport,
    ReplayPolicy, RestoreKind, RestoreMode, SAMPLED_EVERY, SAMPLED_TRUST_AFTER,
};
pub use rocprof_replay_macros::rocprof_tool;

/// Support for the code `#[rocprof_tool]` generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::registration::{Claim, PREFLIGHT_VAR, TOOL_PRIORITY, on_load, on_unload};
    #[cfg(feature = "cuda")]
    pub use crate::registration::{cuda_preload, initialize_injection};
    pub use rocprof_replay_sys::HsaApiTable;

    /// The kernels' pointer words read from an AMDGPU code object (the `code_object` fuzz
    /// target): `Ok` with the number of kernels described, or why there is no layout.
    pub fn code_object_layout(elf: &[u8]) -> Result<usize, String> {
        crate::hsa::kernel_args::parse(elf)
            .map(|l| l.len())
            .map_err(|e| e.to_string())
    }
}

/// Support for the crate's benchmarks (`benches/restore.rs`): the real snapshot path over
/// host memory. Not a public API.
#[doc(hidden)]
pub mod __bench {
    use std::marker::PhantomData;

    use crate::AgentId;
    use crate::engine::inventory::{AllocationInventory, Origin};
    use crate::engine::snapshot::{
        CopyError, DeviceMemory, Direction, GRANULE, MERGE_GAP, Snapshot, SnapshotPlan, Transfer,
        WriteSet, host_copy,
    };

    /// "Device" memory that is this process's memory: addresses are pointers into the buffers
    /// a [`RestoreBench`] holds exclusively.
    struct HostMemory;

    impl DeviceMemory for HostMemory {
        fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
            // SAFETY: the engine only passes planned regions, every one a live buffer that the
            // `RestoreBench` borrows exclusively, and its own separate heap staging.
            unsafe { host_copy(direction, transfers) };
            Ok(())
        }
    }

    /// A snapshot of some host buffers taken through the engine's real `SnapshotPlan` and
    /// `Snapshot::capture`, ready to be restored over and over with `Snapshot::restore`.
    pub struct RestoreBench<'a> {
        inventory: AllocationInventory,
        snapshot: Snapshot,
        mem: HostMemory,
        /// The write set the last [`diff`](Self::diff) found, merged as the engine does.
        written: WriteSet,
        /// The buffers stay borrowed (and so alive and untouched by anyone else) while their
        /// addresses are in the inventory.
        _regions: PhantomData<&'a mut [Vec<u8>]>,
    }

    impl<'a> RestoreBench<'a> {
        /// Records every buffer as an allocation of one agent and captures them.
        ///
        /// # Panics
        /// When the capture is declined (the staging memory cannot be allocated).
        pub fn capture(regions: &'a mut [Vec<u8>]) -> RestoreBench<'a> {
            let inventory = AllocationInventory::new();
            let agent = AgentId(1);
            for region in regions.iter_mut().filter(|r| !r.is_empty()) {
                inventory.record(
                    region.as_mut_ptr() as usize,
                    region.len(),
                    agent,
                    Origin::Pool,
                );
            }
            let plan = SnapshotPlan::new(&inventory, agent, &[], u64::MAX)
                .expect("a plan without a budget is never declined");
            let mut mem = HostMemory;
            let snapshot = Snapshot::capture(plan, &inventory, &mut mem)
                .unwrap_or_else(|reason| panic!("capture declined: {reason}"));
            RestoreBench {
                inventory,
                snapshot,
                mem,
                written: WriteSet::default(),
                _regions: PhantomData,
            }
        }

        /// Bytes captured.
        pub fn bytes(&self) -> u64 {
            self.snapshot.bytes
        }

        /// One restore, as between two passes: every region is re-validated (pinned) in the
        /// inventory and written back. Returns the bytes written.
        ///
        /// # Panics
        /// When the restore fails or skips a region (neither can happen here).
        pub fn restore(&mut self) -> u64 {
            let stats = self
                .snapshot
                .restore(&self.inventory, &mut self.mem)
                .unwrap_or_else(|e| panic!("restore failed: {e:?}"));
            assert_eq!(stats.skipped, 0, "no region was freed");
            stats.bytes
        }

        /// Compares the buffers with the snapshot as the engine does after pass 1 (default
        /// diff: chunked read-back, 4 KiB granules) and keeps the write set, merged as the
        /// engine merges it, for [`restore_write_set`](Self::restore_write_set). Returns the
        /// granule-rounded bytes found written.
        ///
        /// # Panics
        /// When the diff fails (it cannot here).
        pub fn diff(&mut self) -> u64 {
            let found = self
                .snapshot
                .diff(&self.inventory, &mut self.mem, GRANULE)
                .unwrap_or_else(|e| panic!("diff failed: {e:?}"));
            let bytes = found.bytes();
            self.written = found.merged(MERGE_GAP);
            bytes
        }

        /// Plays a kernel: flips the first byte of every `step`-th 4 KiB granule of every
        /// region (`step` 1: every granule; 100: 1% of the footprint, scattered).
        pub fn scribble(&mut self, step: usize) {
            for (base, size) in self.snapshot.spans() {
                for g in (0..size.div_ceil(GRANULE)).step_by(step.max(1)) {
                    // SAFETY: `base..base + size` is one of the buffers this value borrows
                    // exclusively (`_regions`), and `g * GRANULE < size`.
                    unsafe { *((base + g * GRANULE) as *mut u8) ^= 0xFF };
                }
            }
        }

        /// One write-set restore, as between two passes: only the last diff's write set is
        /// written back. Returns the bytes written.
        ///
        /// # Panics
        /// When the restore fails.
        pub fn restore_write_set(&mut self) -> u64 {
            self.snapshot
                .restore_ranges(&self.inventory, &mut self.mem, &self.written)
                .unwrap_or_else(|e| panic!("restore failed: {e:?}"))
                .bytes
        }
    }
}
