//! Run a policy against a simulated device, for tool authors' unit tests.
//!
//! [`simulate`] drives the real replay engine — the same pass loop, snapshot and restore code
//! the HSA backend uses — against "device memory" that is a host buffer and a "kernel" that is
//! a closure. Every policy callback sees real [`Pass`](crate::Pass) and
//! [`PassReport`] values, so a tool's per-pass logic can be tested without a
//! GPU or a runtime.
//!
//! ```
//! use rocprof_replay::testing::{simulate, dispatch};
//! use rocprof_replay::{DispatchInfo, OutcomeKind, PassPlan, ReplayPolicy};
//!
//! struct Three;
//! impl ReplayPolicy for Three {
//!     type State = ();
//!     type PassState = ();
//!     fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
//!         PassPlan::exactly(3, ())
//!     }
//! }
//!
//! let mut memory = vec![0u8; 16];
//! let run = simulate(&Three, &dispatch("add_one"), &mut memory, |m| m.iter_mut().for_each(|b| *b += 1));
//! assert_eq!(run.outcome.kind, OutcomeKind::Replayed);
//! assert_eq!(run.kernel_runs, 3);        // the kernel ran three times...
//! assert_eq!(run.completions, 1);        // ...the application saw one completion...
//! assert!(memory.iter().all(|b| *b == 1)); // ...and the memory of one execution.
//! ```

use std::time::{Duration, Instant};

use crate::dispatch::{AgentId, DispatchId, DispatchInfo, QueueId};
use crate::engine::inventory::{AllocationInventory, Origin};
use crate::engine::settings::Settings;
use crate::engine::snapshot::{CopyError, DeviceMemory, Direction, Transfer, host_copy};
use crate::engine::window::{PassError, ReplayTarget, run_window};
use crate::policy::{DeclineReason, Outcome, PassReport, ReplayPolicy};

/// What a simulated dispatch did.
#[derive(Debug)]
pub struct SimulatedRun {
    /// The engine's outcome, as a tool's `on_end` saw it.
    pub outcome: Outcome,
    /// How many times the kernel closure ran (passes, or 1 for an ordinary run).
    pub kernel_runs: u32,
    /// How many completions the "application" observed (always 1 if the engine is right).
    pub completions: u32,
    /// How many of the kernel runs were counter passes ([`simulate_with_counters`]).
    pub counter_passes: u32,
}

/// An [`Outcome`] of `kind` with `passes` passes and nothing measured (no pass times, no
/// bytes, zero durations), for testing what a tool does with outcomes; set the fields the test
/// needs:
///
/// ```
/// use rocprof_replay::OutcomeKind;
/// use std::time::Duration;
///
/// let mut outcome = rocprof_replay::testing::outcome(OutcomeKind::Replayed, 2);
/// outcome.pass_times = vec![Some(Duration::from_micros(5)); 2];
/// assert_eq!(outcome.passes, 2);
/// ```
pub fn outcome(kind: crate::OutcomeKind, passes: u32) -> Outcome {
    Outcome {
        passes,
        ..Outcome::ordinary(kind)
    }
}

/// A [`PassReport`] as the engine hands it to `on_pass_end`, for testing a policy's per-pass
/// logic without running the engine (prefer [`simulate`], which runs it). The pass counts as
/// [`timed`](PassReport::timed) when `kernel_time` is given.
pub fn pass_report(
    index: u32,
    total: Option<u32>,
    info: &DispatchInfo,
    kernel_time: Option<Duration>,
) -> PassReport<'_> {
    PassReport {
        index,
        total,
        info,
        timed: kernel_time.is_some(),
        kernel_time,
    }
}

/// A [`DispatchInfo`] for a kernel named `kernel` on agent 0 (one work-item, dispatch id 1),
/// for tests; set the fields the test needs:
///
/// ```
/// let mut info = rocprof_replay::testing::dispatch("vector_add");
/// info.grid = [1024, 1, 1];
/// assert_eq!(info.kernel(), "vector_add");
/// ```
pub fn dispatch(kernel: &str) -> DispatchInfo {
    DispatchInfo {
        runtime: crate::dispatch::Runtime::Hsa,
        agent: AgentId(1),
        agent_index: 0,
        queue: QueueId(0),
        dispatch_id: DispatchId(1),
        kernel_object: 0,
        kernel_name: Some(kernel.into()),
        grid: [1, 1, 1],
        workgroup: [1, 1, 1],
        blocks: [1, 1, 1],
        group_segment_size: 0,
        private_segment_size: 0,
        context: None,
    }
}

/// A simulated counter source: each metric's value by name.
type CounterFn<'a> = &'a mut dyn FnMut(&str) -> u64;

struct Simulated<'a, 'c, K: FnMut(&mut [u8])> {
    base: *mut u8,
    len: usize,
    kernel: &'a mut K,
    kernel_runs: u32,
    completions: u32,
    counters: Option<CounterFn<'c>>,
    set: Option<crate::counters::MetricSet>,
    armed: Option<u32>,
    counter_passes: u32,
}

impl<K: FnMut(&mut [u8])> Simulated<'_, '_, K> {
    fn run_kernel(&mut self) -> Duration {
        // SAFETY: `base`/`len` describe the caller's buffer, borrowed mutably for the whole
        // simulation; the engine only touches it through this struct, never concurrently.
        let memory = unsafe { std::slice::from_raw_parts_mut(self.base, self.len) };
        let start = Instant::now();
        (self.kernel)(memory);
        self.kernel_runs += 1;
        start.elapsed()
    }
}

impl<K: FnMut(&mut [u8])> DeviceMemory for Simulated<'_, '_, K> {
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
        // SAFETY: the engine copies only the region recorded below (inside the caller's
        // buffer, borrowed for the whole simulation) and its own heap staging.
        unsafe { host_copy(direction, transfers) };
        Ok(())
    }
}

impl<K: FnMut(&mut [u8])> ReplayTarget for Simulated<'_, '_, K> {
    fn begin(&mut self) -> Result<(), DeclineReason> {
        Ok(())
    }
    fn drain(&mut self) -> Result<(), DeclineReason> {
        Ok(())
    }
    fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason> {
        Ok(Vec::new())
    }
    fn run_pass(&mut self, timed: bool) -> Result<Option<Duration>, PassError> {
        self.counter_passes += u32::from(self.armed.is_some());
        let t = self.run_kernel();
        Ok(timed.then_some(t))
    }
    fn run_once(&mut self) -> bool {
        self.run_kernel();
        self.completions += 1;
        true
    }
    fn complete(&mut self) {
        self.completions += 1;
    }
    fn settle_late_pass(&mut self) -> bool {
        true
    }
    fn contended(&self) -> bool {
        false
    }
    fn end(&mut self) {}
    fn prepare_counters(&mut self, set: &crate::counters::MetricSet) -> Result<(), String> {
        if self.counters.is_none() {
            return Err("the simulation has no counters (use simulate_with_counters)".into());
        }
        self.set = Some(set.clone());
        Ok(())
    }
    fn arm_counters(&mut self, pass: Option<u32>) {
        self.armed = pass;
    }
    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let (Some(set), Some(counter)) = (&self.set, self.counters.as_mut()) else {
            return Err("no counters were prepared".into());
        };
        Ok(set.pass(pass).map(|m| counter(&m.counter.name)).collect())
    }
}

/// Replays one dispatch of `kernel` over `memory` under `policy`, with the real engine.
///
/// `memory` plays the device memory the dispatch's agent owns (it is snapshotted and restored
/// between passes); `kernel` is called once per pass (or once for an ordinary run). Kernel
/// times are the closure's wall time, reported for passes where a context with
/// [`Service::DispatchTiming`](crate::Service::DispatchTiming) is active.
pub fn simulate<P: ReplayPolicy>(
    policy: &P,
    info: &DispatchInfo,
    memory: &mut [u8],
    kernel: impl FnMut(&mut [u8]),
) -> SimulatedRun {
    simulate_inner(policy, info, memory, kernel, None)
}

/// As [`simulate`], with hardware counters: a metric set the policy asks for
/// ([`ReplayPolicy::metrics`]) is collected on counter passes after the policy's own, each
/// metric's value being `counter(name)`, so a tool's `on_end` can be tested with values:
///
/// ```
/// use std::sync::Arc;
/// use rocprof_replay::counters::{CounterCatalog, MetricSet};
/// use rocprof_replay::testing::{dispatch, simulate_with_counters};
/// use rocprof_replay::{DispatchInfo, PassPlan, ReplayPolicy};
///
/// struct Waves(Arc<MetricSet>);
/// impl ReplayPolicy for Waves {
///     type State = ();
///     type PassState = ();
///     fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
///         PassPlan::exactly(1, ())
///     }
///     fn metrics(&self, _: &DispatchInfo) -> Option<Arc<MetricSet>> {
///         Some(self.0.clone())
///     }
/// }
///
/// let gfx90a = CounterCatalog::new("gfx90a").block("SQ", 2).counter("SQ_WAVES", "SQ", 4);
/// let set = Arc::new(MetricSet::new(&gfx90a, ["SQ_WAVES"]).unwrap());
/// let mut memory = vec![0u8; 8];
/// let run = simulate_with_counters(&Waves(set), &dispatch("k"), &mut memory, |m| m[0] += 1, |_| 256);
/// let waves = run.outcome.metrics.values().unwrap().get("SQ_WAVES").unwrap();
/// assert_eq!((waves.value, waves.pass), (256, 1)); // pass 0 is the application's
/// assert_eq!((run.kernel_runs, run.counter_passes, memory[0]), (2, 1, 1));
/// ```
pub fn simulate_with_counters<P: ReplayPolicy>(
    policy: &P,
    info: &DispatchInfo,
    memory: &mut [u8],
    kernel: impl FnMut(&mut [u8]),
    mut counter: impl FnMut(&str) -> u64,
) -> SimulatedRun {
    simulate_inner(policy, info, memory, kernel, Some(&mut counter))
}

fn simulate_inner<P: ReplayPolicy>(
    policy: &P,
    info: &DispatchInfo,
    memory: &mut [u8],
    mut kernel: impl FnMut(&mut [u8]),
    counters: Option<CounterFn<'_>>,
) -> SimulatedRun {
    let inventory = AllocationInventory::new();
    if !memory.is_empty() {
        inventory.record(
            memory.as_mut_ptr() as usize,
            memory.len(),
            info.agent,
            Origin::Pool,
        );
    }
    let mut target = Simulated {
        base: memory.as_mut_ptr(),
        len: memory.len(),
        kernel: &mut kernel,
        kernel_runs: 0,
        completions: 0,
        counters,
        set: None,
        armed: None,
        counter_passes: 0,
    };
    let settings = Settings {
        budget: u64::MAX,
        ..Settings::from_lookup(|_| None)
    };
    let outcome = run_window(policy, info, &mut target, &inventory, &settings);
    SimulatedRun {
        outcome,
        kernel_runs: target.kernel_runs,
        completions: target.completions,
        counter_passes: target.counter_passes,
    }
}

/// A small deterministic generator (xorshift64*) for the crate's own randomized tests.
#[cfg(test)]
pub(crate) struct Rng(pub(crate) u64);

#[cfg(test)]
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in `0..n` (`0` when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
