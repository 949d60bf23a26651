//! Write-set restore against host memory: kernels that write nothing, everything, unaligned
//! edges across granules, module variables, a different subset on each pass; every mode; the
//! failure paths; and a randomized test over random write subsets (fixed seeds).

use std::sync::Arc;

use super::*;
use crate::dispatch::{AgentId, DispatchId, QueueId};
use crate::engine::inventory::Origin;
use crate::engine::snapshot::{CopyError, Direction, Staging, Transfer, host_copy};

/// One write of a pass: `len` bytes at `start` of buffer `buf`.
type Write = (usize, usize, usize);

/// Host buffers as device memory; the last buffer is a module variable, the others are
/// allocations. Pass `k` applies `writes[min(k, last)]`.
struct Dev {
    bufs: Vec<Box<[u8]>>,
    writes: Vec<Vec<Write>>,
    inv: Arc<AllocationInventory>,
    passes: u32,
    inputs: Vec<Vec<Box<[u8]>>>,
    /// Capture batches since the last pass ended.
    captures: u32,
    /// (pass count, n): the n-th capture batch after that many passes fails (from then on
    /// when `n` is `u32::MAX`).
    fail_capture_at: Option<(u32, u32)>,
    /// Same, for a batch that is stuck.
    stuck_capture_at: Option<(u32, u32)>,
    /// (passes run, restore-direction copy batch since the last pass) that stays stuck.
    stuck_restore_at: Option<(u32, u32)>,
    /// Restore-direction copy batches since the last pass.
    restores: u32,
    /// `alloc_staging` refuses buffers larger than this.
    staging_limit: usize,
    late_pass: Option<u32>,
    unsubmittable_pass: Option<u32>,
    /// (after pass, buffer): the buffer is freed when that pass ends.
    free_after: Option<(u32, usize)>,
    freed: Vec<usize>,
    completions: u32,
    ordinary_runs: u32,
    restore_copies: u64,
    /// Buffers the kernel's arguments point into (`None`: arguments unknown, every allocation
    /// captured).
    args: Option<Vec<usize>>,
    /// The kernel object of the dispatch (remembered kernels are process-wide: each test that
    /// narrows uses its own).
    kernel: u64,
    /// The agent (carried fingerprints and write epochs are per agent and process-wide: a test
    /// that counts on them uses its own).
    agent: u64,
    /// Staging is counted ([`LIVE_STAGING`]) instead of heap memory.
    counted: bool,
    /// Addresses of the counted staging buffers handed out.
    staged: Vec<usize>,
}

fn apply(bufs: &mut [Box<[u8]>], writes: &[Write], freed: &[usize]) {
    for &(b, start, len) in writes {
        if freed.contains(&b) {
            continue;
        }
        for x in &mut bufs[b][start..start + len] {
            // Never a fixed point: 30x + 7 is odd.
            *x = x.wrapping_mul(31).wrapping_add(7);
        }
    }
}

impl Dev {
    fn new(sizes: &[usize], writes: Vec<Vec<Write>>) -> Dev {
        Dev::on(7, sizes, writes)
    }

    fn on(agent: u64, sizes: &[usize], writes: Vec<Vec<Write>>) -> Dev {
        let bufs: Vec<Box<[u8]>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (j * 7 + i * 13) as u8).collect())
            .collect();
        let inv = Arc::new(AllocationInventory::new());
        for b in &bufs[..bufs.len() - 1] {
            inv.record(b.as_ptr() as usize, b.len(), AgentId(agent), Origin::Pool);
        }
        Dev {
            bufs,
            writes,
            inv,
            passes: 0,
            inputs: Vec::new(),
            captures: 0,
            fail_capture_at: None,
            stuck_capture_at: None,
            stuck_restore_at: None,
            restores: 0,
            staging_limit: usize::MAX,
            late_pass: None,
            unsubmittable_pass: None,
            free_after: None,
            freed: Vec::new(),
            completions: 0,
            ordinary_runs: 0,
            restore_copies: 0,
            args: None,
            kernel: 0x1000,
            agent,
            counted: false,
            staged: Vec::new(),
        }
    }

    fn kernel(&mut self, pass: usize) {
        self.inputs.push(self.bufs.clone());
        let w = &self.writes[pass.min(self.writes.len() - 1)];
        apply(&mut self.bufs, w, &self.freed);
    }

    /// Memory after pass `pass` ran once on `initial`.
    fn one_execution(&self, initial: &[Box<[u8]>], pass: usize) -> Vec<Box<[u8]>> {
        let mut m = initial.to_vec();
        apply(&mut m, &self.writes[pass.min(self.writes.len() - 1)], &[]);
        m
    }
}

/// Staging buffers of [`Dev::counted`] devices not released yet (their addresses).
static LIVE_STAGING: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// Releases a counted staging buffer (a boxed slice of `capacity` bytes).
unsafe fn release_counted(
    ptr: std::ptr::NonNull<u8>,
    capacity: usize,
    _: crate::engine::snapshot::Tier,
) {
    LIVE_STAGING
        .lock()
        .unwrap()
        .retain(|&a| a != ptr.as_ptr() as usize);
    // SAFETY: made by `alloc_staging` below from a boxed slice of `capacity` bytes.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), capacity)) });
}

impl Dev {
    /// How many of this device's staging buffers `which` (in the order handed out) are still
    /// held (not released).
    fn unreleased_of(&self, which: std::ops::Range<usize>) -> usize {
        let live = LIVE_STAGING.lock().unwrap();
        self.staged[which]
            .iter()
            .filter(|a| live.contains(a))
            .count()
    }
}

impl DeviceMemory for Dev {
    fn alloc_staging(&mut self, size: usize) -> Option<Staging> {
        if size > self.staging_limit {
            return None;
        }
        if !self.counted {
            return Staging::heap(size);
        }
        let buf = vec![0u8; size.max(1)].into_boxed_slice();
        let capacity = buf.len();
        let ptr = std::ptr::NonNull::new(Box::into_raw(buf).cast::<u8>())?;
        LIVE_STAGING.lock().unwrap().push(ptr.as_ptr() as usize);
        self.staged.push(ptr.as_ptr() as usize);
        Some(Staging::Backend {
            ptr,
            len: size,
            capacity,
            tier: crate::engine::snapshot::Tier::Device,
            release: release_counted,
        })
    }
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
        if direction == Direction::Capture {
            let now = (self.passes, self.captures);
            self.captures += 1;
            let hit = |at: Option<(u32, u32)>| {
                at.is_some_and(|(p, n)| (n == u32::MAX && now.0 >= p) || (p, n) == now)
            };
            if hit(self.fail_capture_at) {
                return Err(CopyError::Failed);
            }
            if hit(self.stuck_capture_at) {
                return Err(CopyError::Stuck);
            }
        } else {
            let now = (self.passes, self.restores);
            self.restores += 1;
            if self.stuck_restore_at == Some(now) {
                return Err(CopyError::Stuck);
            }
            self.restore_copies += transfers.iter().map(|t| t.len as u64).sum::<u64>();
        }
        // SAFETY: the engine passes live buffers of self (pinned) and its own heap staging.
        unsafe { host_copy(direction, transfers) };
        Ok(())
    }
}

impl ReplayTarget for Dev {
    fn begin(&mut self) -> Result<(), DeclineReason> {
        Ok(())
    }
    fn drain(&mut self) -> Result<(), DeclineReason> {
        Ok(())
    }
    fn module_variables(&mut self) -> Result<Vec<(usize, usize)>, DeclineReason> {
        let v = self.bufs.last().unwrap();
        Ok(vec![(v.as_ptr() as usize, v.len())])
    }
    fn run_pass(&mut self, _timed: bool) -> Result<Option<Duration>, PassError> {
        let index = self.passes;
        if self.unsubmittable_pass == Some(index) {
            return Err(PassError::NotSubmitted(DeclineReason::SubmitFailed));
        }
        self.passes += 1;
        self.captures = 0;
        self.restores = 0;
        self.kernel(index as usize);
        if let Some((after, b)) = self.free_after
            && after == index
        {
            self.inv.remove(self.bufs[b].as_ptr() as usize);
            self.freed.push(b);
        }
        if self.late_pass == Some(index) {
            return Err(PassError::Late);
        }
        Ok(None)
    }
    fn run_once(&mut self) -> bool {
        self.ordinary_runs += 1;
        let pass = self.passes as usize;
        self.kernel(pass);
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
    fn argument_bytes(&self) -> Option<Vec<u8>> {
        // A scalar, then a pointer into the middle of each named buffer.
        let mut bytes = 42u64.to_ne_bytes().to_vec();
        for &b in self.args.as_ref()? {
            let p = self.bufs[b].as_ptr() as usize + self.bufs[b].len() / 2;
            bytes.extend_from_slice(&(p as u64).to_ne_bytes());
        }
        Some(bytes)
    }
    fn prepare_counters(&mut self, _: &crate::counters::MetricSet) -> Result<(), String> {
        Ok(())
    }
    fn counter_values(&mut self, _: u32) -> Result<Vec<u64>, String> {
        Ok(vec![u64::from(self.passes)])
    }
}

/// A policy with a fixed pass count (or up to `passes`, stopping after `stop_after`) and a
/// restore mode.
struct Policy {
    passes: u32,
    stop_after: Option<u32>,
    mode: RestoreMode,
    footprint: FootprintMode,
}

impl ReplayPolicy for Policy {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        match self.stop_after {
            None => PassPlan::exactly(self.passes, ()),
            Some(_) => PassPlan::up_to(self.passes, ()),
        }
    }
    fn should_continue(&self, _: &DispatchInfo, _: &(), done: u32) -> bool {
        self.stop_after.is_some_and(|n| done < n)
    }
    fn restore_mode(&self, _: &DispatchInfo) -> RestoreMode {
        self.mode
    }
    fn footprint(&self, _: &DispatchInfo) -> FootprintMode {
        self.footprint
    }
}

fn info() -> DispatchInfo {
    DispatchInfo {
        runtime: crate::dispatch::Runtime::Hsa,
        agent: AgentId(7),
        agent_index: 0,
        queue: QueueId(1),
        dispatch_id: DispatchId(1),
        kernel_object: 0x1000,
        kernel_name: Some("subset".into()),
        grid: [1, 1, 1],
        workgroup: [1, 1, 1],
        blocks: [1, 1, 1],
        group_segment_size: 0,
        private_segment_size: 0,
        context: None,
    }
}

const G: usize = 64;

fn settings(env: RestoreMode) -> Settings {
    Settings {
        budget: u64::MAX,
        restore: env,
        granule: G,
        merge_gap: 0,
        ..Settings::from_lookup(|_| None)
    }
}

/// Runs one window; returns the outcome and the memory before it.
fn run(dev: &mut Dev, policy: &Policy, env: RestoreMode) -> (Outcome, Vec<Box<[u8]>>) {
    let initial = dev.bufs.clone();
    let inv = dev.inv.clone();
    let info = DispatchInfo {
        kernel_object: dev.kernel,
        agent: AgentId(dev.agent),
        ..info()
    };
    let out = run_window(policy, &info, dev, &inv, &settings(env));
    (out, initial)
}

fn policy(passes: u32, mode: RestoreMode) -> Policy {
    Policy {
        passes,
        stop_after: None,
        mode,
        footprint: FootprintMode::Auto,
    }
}

/// [`policy`] with the policy's footprint choice.
fn policy_with(passes: u32, footprint: FootprintMode) -> Policy {
    Policy {
        footprint,
        ..policy(passes, RestoreMode::Auto)
    }
}

/// Granule-rounded bytes of a pass's writes (merge gap 0), per buffer.
fn granule_bytes(sizes: &[usize], writes: &[Write]) -> u64 {
    let mut dirty: Vec<Vec<bool>> = sizes.iter().map(|n| vec![false; n.div_ceil(G)]).collect();
    for &(b, s, l) in writes {
        if l > 0 {
            (s / G..=(s + l - 1) / G).for_each(|g| dirty[b][g] = true);
        }
    }
    dirty
        .iter()
        .zip(sizes)
        .map(|(d, &n)| {
            d.iter()
                .enumerate()
                .filter(|(_, x)| **x)
                .map(|(g, _)| (n - g * G).min(G) as u64)
                .sum::<u64>()
        })
        .sum()
}

const SIZES: [usize; 3] = [1000, 4096, 24];

#[test]
fn a_kernel_that_writes_nothing_restores_nothing() {
    let mut dev = Dev::new(&SIZES, vec![vec![]]);
    let (out, initial) = run(&mut dev, &policy(4, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(out.restore_mode, Some(RestoreKind::WriteSet));
    assert_eq!((out.written_bytes, out.restored_bytes), (0, 0));
    assert_eq!(dev.restore_copies, 0);
    assert_eq!(dev.bufs, initial);
    assert_eq!(
        out.verified_bytes,
        2 * (1000 + 4096 + 24),
        "pass-1 and final diff"
    );
}

#[test]
fn a_dense_writer_gets_full_restores_and_the_last_pass_result() {
    let writes = vec![vec![(0, 0, 1000), (1, 0, 4096), (2, 0, 24)]];
    let mut dev = Dev::new(&SIZES, writes);
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.restore_mode, Some(RestoreKind::Full));
    assert_eq!(out.written_bytes, 5120);
    assert_eq!(out.restored_bytes, 2 * 5120);
    assert_eq!(dev.bufs, dev.one_execution(&initial, 2));
    assert!(dev.inputs.iter().all(|i| *i == initial));
}

#[test]
fn unaligned_edges_and_module_variables_restore_their_granules_only() {
    // 60..70 crosses granules 0 and 1; 997..1000 is the short last granule; the module
    // variable's 3 bytes dirty its only (short) granule.
    let writes = vec![vec![(0, 60, 10), (0, 997, 3), (1, 4095, 1), (2, 5, 3)]];
    let mut dev = Dev::new(&SIZES, writes.clone());
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    let w = 128 + (1000 - 960) + 64 + 24;
    assert_eq!(granule_bytes(&SIZES, &writes[0]), w);
    assert_eq!(out.restore_mode, Some(RestoreKind::WriteSet));
    assert_eq!(out.written_bytes, w);
    // Two restores of W1, then the first pass's result written back.
    assert_eq!(out.restored_bytes, 3 * w);
    assert_eq!(dev.restore_copies, 3 * w);
    assert!(
        dev.inputs.iter().all(|i| *i == initial),
        "every pass from the snapshot"
    );
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

/// Pass 0 writes the start of buffer 1; later passes write elsewhere (and some of pass 0's).
fn varying() -> Vec<Vec<Write>> {
    vec![
        vec![(1, 0, 100), (2, 0, 1)],
        vec![(1, 50, 10), (1, 3000, 700), (0, 500, 1)],
        vec![(1, 2000, 64), (2, 20, 4)],
    ]
}

#[test]
fn a_varying_write_set_ends_in_the_first_pass_result_in_every_write_set_mode() {
    for mode in [RestoreMode::Auto, RestoreMode::Strict] {
        let mut dev = Dev::new(&SIZES, varying());
        let (out, initial) = run(&mut dev, &policy(4, mode), RestoreMode::Auto);
        assert_eq!(out.kind, OutcomeKind::Replayed);
        assert_eq!(dev.bufs, dev.one_execution(&initial, 0), "{mode:?}");
        if mode == RestoreMode::Strict {
            assert_eq!(out.restore_mode, Some(RestoreKind::Strict));
            assert!(
                dev.inputs.iter().all(|i| *i == initial),
                "strict: memory before every pass is the snapshot"
            );
            assert_eq!(
                out.inputs_restored,
                Some(true),
                "strict verified every pass"
            );
        } else {
            assert_eq!(out.restore_mode, Some(RestoreKind::WriteSet));
            // Pass 1's writes outside W1 are not undone before pass 2 in write-set mode.
            assert_ne!(dev.inputs[2], initial);
            assert_eq!(
                out.inputs_restored,
                Some(false),
                "the final diff found writes outside the write set: counters of these passes \
                 must not be combined"
            );
        }
    }
}

#[test]
fn full_mode_from_the_policy_or_the_environment_never_diffs() {
    for (p, env) in [
        (RestoreMode::Full, RestoreMode::Auto),
        (RestoreMode::Auto, RestoreMode::Full),
    ] {
        let mut dev = Dev::new(&SIZES, varying());
        let (out, initial) = run(&mut dev, &policy(3, p), env);
        assert_eq!(out.restore_mode, Some(RestoreKind::Full));
        assert_eq!((out.written_bytes, out.verified_bytes), (0, 0));
        assert_eq!(out.restored_bytes, 2 * 5120);
        assert_eq!(dev.bufs, dev.one_execution(&initial, 2));
    }
    // The environment asks for strict when the policy leaves it to the engine.
    let mut dev = Dev::new(&SIZES, varying());
    let (out, _) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Strict);
    assert_eq!(out.restore_mode, Some(RestoreKind::Strict));
}

#[test]
fn a_consulting_plan_that_stops_early_ends_in_the_first_pass_result() {
    let mut dev = Dev::new(&SIZES, varying());
    let p = Policy {
        passes: 10,
        stop_after: Some(3),
        mode: RestoreMode::Auto,
        footprint: FootprintMode::Auto,
    };
    let (out, initial) = run(&mut dev, &p, RestoreMode::Auto);
    assert_eq!((out.passes, dev.passes), (3, 3));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    // Stopping after the first pass needs no diff at all.
    let mut dev = Dev::new(&SIZES, varying());
    let p = Policy {
        passes: 10,
        stop_after: Some(1),
        mode: RestoreMode::Strict,
        footprint: FootprintMode::Auto,
    };
    let (out, initial) = run(&mut dev, &p, RestoreMode::Auto);
    assert_eq!(
        (out.passes, out.restore_mode, out.verified_bytes),
        (1, None, 0)
    );
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

#[test]
fn a_failed_diff_or_no_room_for_the_stash_falls_back_to_full_restore() {
    let mut dev = Dev::new(&SIZES, varying());
    dev.fail_capture_at = Some((1, 0));
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(
        (out.kind, out.restore_mode),
        (OutcomeKind::Replayed, Some(RestoreKind::Full))
    );
    assert_eq!(dev.bufs, dev.one_execution(&initial, 2));
    assert!(dev.inputs.iter().all(|i| *i == initial));
    // The stash (W1 = 4224 bytes, 34% of the snapshot) cannot be had; snapshot regions and
    // the diff's scratch buffer can.
    let mut dev = Dev::new(&[4096, 4096, 4096, 24], varying());
    dev.staging_limit = 4096;
    dev.writes[0] = vec![(0, 0, 2100), (1, 0, 2100)];
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.written_bytes, 4224, "the diff ran");
    assert_eq!(out.restore_mode, Some(RestoreKind::Full));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 2));
}

#[test]
fn a_stuck_diff_stops_after_the_first_pass() {
    // One allocation and one module variable (planned in that order) read back in two
    // batches (scratch of 4096 bytes); the stash is the batch after them.
    const DIFF_BATCHES: u32 = 2;
    for stuck in [0, DIFF_BATCHES] {
        let mut dev = Dev::new(&[4096, 24], vec![vec![(0, 0, 100), (1, 0, 1)]]);
        dev.stuck_capture_at = Some((1, stuck));
        dev.counted = true;
        let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
        assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::CopyTimeout));
        // A compare still running may read the snapshot: its two buffers (the first staged)
        // are never released. After a stuck stash (the diff done) they go back.
        let held = if stuck == 0 { 2 } else { 0 };
        assert_eq!(dev.unreleased_of(0..2), held, "stuck at batch {stuck}");
        assert_eq!(
            out.written_bytes > 0,
            stuck == DIFF_BATCHES,
            "the diff had finished"
        );
        assert_eq!((out.passes, dev.passes, dev.completions), (1, 1, 1));
        assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    }
}

#[test]
fn a_failed_final_diff_restores_everything_then_the_first_pass_result() {
    // The final diff is the only capture after pass 3.
    let mut dev = Dev::new(&SIZES, varying());
    dev.fail_capture_at = Some((3, 0));
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(out.restore_mode, Some(RestoreKind::WriteSet));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    // A failed strict verification restores everything and the promise still holds.
    let mut dev = Dev::new(&SIZES, varying());
    dev.fail_capture_at = Some((2, u32::MAX));
    let (out, initial) = run(&mut dev, &policy(4, RestoreMode::Strict), RestoreMode::Auto);
    assert_eq!(out.restore_mode, Some(RestoreKind::Strict));
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert!(dev.inputs.iter().all(|i| *i == initial));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

#[test]
fn a_region_freed_between_passes_is_never_written_again() {
    let mut dev = Dev::new(&SIZES, varying());
    dev.writes[0].push((0, 0, 10));
    dev.free_after = Some((0, 0));
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert!(out.skipped_regions > 0);
    // Buffer 0 keeps what pass 1 left in it; the rest is pass 1's result too.
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

#[test]
fn a_late_later_pass_stands_and_an_unsubmittable_one_ends_in_the_first_pass_result() {
    let mut dev = Dev::new(&SIZES, varying());
    dev.late_pass = Some(1);
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::PassTimeout));
    assert_eq!(dev.completions, 1);
    // The late pass ran from the restored snapshot: its result is the application's.
    assert_eq!(dev.bufs, dev.one_execution(&initial, 1));

    let mut dev = Dev::new(&SIZES, varying());
    dev.unsubmittable_pass = Some(2);
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::SubmitFailed));
    assert_eq!((dev.completions, dev.ordinary_runs), (1, 0));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

use crate::testing::Rng;

fn random_writes(rng: &mut Rng, sizes: &[usize]) -> Vec<Write> {
    match rng.below(8) {
        0 => vec![],
        1 => sizes.iter().enumerate().map(|(b, &n)| (b, 0, n)).collect(),
        _ => (0..rng.below(6) + 1)
            .map(|_| {
                let b = rng.below(sizes.len());
                let start = rng.below(sizes[b]);
                let cap = if rng.below(4) == 0 { 4096 } else { 9 };
                let len = rng.below((sizes[b] - start).min(cap)) + 1;
                (b, start, len)
            })
            .collect(),
    }
}

#[test]
fn random_write_subsets_keep_the_promise_in_every_mode() {
    for seed in 1..=400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let sizes: Vec<usize> = (0..rng.below(3) + 2)
            .map(|_| rng.below(3 * G * 4) + 1)
            .collect();
        let same = rng.below(2) == 0;
        let first = random_writes(&mut rng, &sizes);
        let mut writes = vec![first];
        if !same {
            for _ in 0..3 {
                writes.push(random_writes(&mut rng, &sizes));
            }
        }
        let mode = [RestoreMode::Auto, RestoreMode::Strict, RestoreMode::Full][rng.below(3)];
        let passes = rng.below(4) as u32 + 2;
        let stop_after = (rng.below(3) == 0).then(|| rng.below(passes as usize) as u32 + 1);
        // Half the seeds name a random subset of the allocations in the arguments: the rest is
        // watched (never in strict mode, which captures everything).
        let args: Option<Vec<usize>> = (rng.below(2) == 0)
            .then(|| (0..sizes.len() - 1).filter(|_| rng.below(2) == 0).collect());
        // The policy's footprint choice (a new kernel per seed: `sampled` checks it).
        let footprint = [
            FootprintMode::Auto,
            FootprintMode::Arguments,
            FootprintMode::Verified,
            FootprintMode::Sampled,
        ][rng.below(4)];
        let verified = footprint == FootprintMode::Verified;
        let mut dev = Dev::new(&sizes, writes.clone());
        dev.args = args.clone();
        dev.kernel = 0x10_0000 + seed;
        let p = Policy {
            passes,
            stop_after,
            mode,
            footprint,
        };
        let (out, initial) = run(&mut dev, &p, RestoreMode::Auto);
        let ran = out.passes as usize;
        let ctx = format!(
            "seed {seed}: {sizes:?} {writes:?} {mode:?} {footprint:?} {args:?} {ran} passes"
        );
        assert_eq!(dev.completions, 1, "{ctx}");
        let watched: Vec<usize> = match &args {
            Some(named) if mode != RestoreMode::Strict => (0..sizes.len() - 1)
                .filter(|b| !named.contains(b))
                .collect(),
            _ => Vec::new(),
        };
        let writes_watched = |pass: usize| {
            writes[pass.min(writes.len() - 1)]
                .iter()
                .any(|&(b, _, len)| len > 0 && watched.contains(&b))
        };
        assert_eq!(
            out.footprint,
            Some(if watched.is_empty() {
                FootprintKind::All
            } else if verified {
                FootprintKind::Verified
            } else {
                FootprintKind::Arguments
            }),
            "{ctx}"
        );
        if writes_watched(0) && passes > 1 && stop_after != Some(1) {
            // The first pass wrote outside the snapshot: it is the one execution.
            assert_eq!(
                out.kind,
                OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint),
                "{ctx}"
            );
            assert_eq!(ran, 1, "{ctx}");
            assert_eq!(dev.bufs, dev.one_execution(&initial, 0), "{ctx}");
            continue;
        }
        if !writes_watched(0) && (1..ran).any(writes_watched) {
            // A later pass wrote there: `verified` reports it in the record; otherwise the
            // next window finds it (`a_later_pass_writing_outside_the_snapshot_…`).
            let expected = if verified {
                OutcomeKind::Failed(FailureReason::LateWriteOutsideFootprint)
            } else {
                OutcomeKind::Replayed
            };
            assert_eq!(out.kind, expected, "{ctx}");
            continue;
        }
        assert_eq!(out.kind, OutcomeKind::Replayed, "{ctx}");
        let w1 = granule_bytes(&sizes, &writes[0]);
        let expected = match out.restore_mode {
            None => {
                assert_eq!(ran, 1, "{ctx}");
                0
            }
            Some(RestoreKind::Full) => {
                assert!(
                    mode == RestoreMode::Full || w1 * 100 > out.snapshot_bytes * DENSE_PERCENT,
                    "{ctx}"
                );
                assert!(dev.inputs.iter().all(|i| *i == initial), "{ctx}");
                ran - 1
            }
            Some(kind) => {
                assert_eq!(out.written_bytes, w1, "{ctx}");
                if kind == RestoreKind::Strict {
                    assert!(dev.inputs.iter().all(|i| *i == initial), "{ctx}");
                } else {
                    assert!(
                        out.restored_bytes >= ran as u64 * w1,
                        "W1 restored before each later pass and written back: {ctx}"
                    );
                    if same {
                        assert_eq!(out.restored_bytes, ran as u64 * w1, "{ctx}");
                        assert!(dev.inputs.iter().all(|i| *i == initial), "{ctx}");
                    }
                }
                0
            }
        };
        assert_eq!(
            dev.bufs,
            dev.one_execution(&initial, expected),
            "final memory is one execution's: {ctx}"
        );
    }
}

struct PanickingMode;
impl ReplayPolicy for PanickingMode {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(3, ())
    }
    fn restore_mode(&self, _: &DispatchInfo) -> RestoreMode {
        panic!("no mode")
    }
}

#[test]
fn a_panicking_restore_mode_declines_and_runs_once() {
    let mut dev = Dev::new(&SIZES, varying());
    let initial = dev.bufs.clone();
    let inv = dev.inv.clone();
    let out = run_window(
        &PanickingMode,
        &info(),
        &mut dev,
        &inv,
        &settings(RestoreMode::Auto),
    );
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::PolicyPanicked)
    );
    assert_eq!((dev.passes, dev.ordinary_runs, dev.completions), (0, 1, 1));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

/// One pass of its own and one counter (one counter pass).
struct OneCounter(std::sync::Arc<crate::counters::MetricSet>);

impl ReplayPolicy for OneCounter {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(2, ())
    }
    fn metrics(&self, _: &DispatchInfo) -> Option<std::sync::Arc<crate::counters::MetricSet>> {
        Some(self.0.clone())
    }
}

#[test]
fn counters_of_a_window_whose_inputs_were_not_all_restored_are_refused() {
    use crate::counters::{CounterCatalog, MetricSet, Metrics};
    let catalog = CounterCatalog::new("gfx90a")
        .block("SQ", 2)
        .counter("SQ_WAVES", "SQ", 4);
    let p = OneCounter(std::sync::Arc::new(
        MetricSet::new(&catalog, ["SQ_WAVES"]).unwrap(),
    ));
    // The same write set on every pass: every pass started from the captured inputs.
    let same = vec![vec![(1, 0, 100), (2, 0, 1)]; 3];
    let mut dev = Dev::new(&SIZES, same);
    let inv = dev.inv.clone();
    let out = run_window(&p, &info(), &mut dev, &inv, &settings(RestoreMode::Auto));
    assert_eq!(out.inputs_restored, Some(true));
    assert_eq!(
        out.metrics
            .values()
            .and_then(|v| v.get("SQ_WAVES"))
            .map(|v| v.pass),
        Some(2)
    );
    // A buffer freed after pass 0: later passes did not start from the captured inputs.
    let mut dev = Dev::new(&SIZES, varying());
    dev.writes[0].push((0, 0, 10));
    dev.free_after = Some((0, 0));
    let inv = dev.inv.clone();
    let out = run_window(&p, &info(), &mut dev, &inv, &settings(RestoreMode::Auto));
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert!(out.skipped_regions > 0);
    assert_eq!(out.inputs_restored, Some(false));
    let Metrics::Absent(why) = &out.metrics else {
        panic!("{:?}", out.metrics)
    };
    assert!(why.starts_with("not_restored: "), "{why}");
    // A write set that varies between passes, in write-set mode: a later pass started from
    // memory a previous pass wrote outside the first pass's write set.
    let mut dev = Dev::new(&SIZES, varying());
    let inv = dev.inv.clone();
    let out = run_window(&p, &info(), &mut dev, &inv, &settings(RestoreMode::Auto));
    assert_eq!(out.inputs_restored, Some(false));
    assert!(matches!(&out.metrics, Metrics::Absent(why) if why.starts_with("not_restored: ")));
    // The same kernel in strict mode: verified before every pass, the counters combine.
    let mut dev = Dev::new(&SIZES, varying());
    let inv = dev.inv.clone();
    let out = run_window(&p, &info(), &mut dev, &inv, &settings(RestoreMode::Strict));
    assert_eq!(out.inputs_restored, Some(true));
    assert!(out.metrics.values().is_some(), "{:?}", out.metrics);
}

/// A device whose kernel's arguments name buffer 0 only (buffer 1 is watched).
fn narrowed(kernel: u64, writes: Vec<Vec<Write>>) -> Dev {
    let mut dev = Dev::new(&SIZES, writes);
    dev.args = Some(vec![0]);
    dev.kernel = kernel;
    dev
}

#[test]
fn the_arguments_footprint_captures_what_they_name_and_watches_the_rest() {
    let mut dev = narrowed(0x2_0001, vec![vec![(0, 10, 100), (2, 0, 4)]]);
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(out.footprint, Some(FootprintKind::Arguments));
    assert_eq!(
        out.snapshot_bytes,
        1000 + 24,
        "buffer 0 and the module variable"
    );
    assert_eq!(out.watched_bytes, 4096);
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    assert!(dev.inputs.iter().all(|i| *i == initial));
}

#[test]
fn a_first_pass_writing_what_the_arguments_do_not_name_stands_and_the_kernel_is_remembered() {
    // The kernel writes buffer 1 through a pointer its arguments do not hold.
    let writes = vec![vec![(0, 0, 8), (1, 100, 50)]];
    let mut dev = narrowed(0x2_0002, writes.clone());
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint)
    );
    assert_eq!((out.passes, dev.passes, dev.completions), (1, 1, 1));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    // The next dispatch of that kernel captures everything and is replayed.
    let mut dev = narrowed(0x2_0002, writes);
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(out.footprint, Some(FootprintKind::All));
    assert_eq!(out.snapshot_bytes, 1000 + 4096 + 24);
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

/// A device whose buffer 1 is two allocations that touch — [0, 3072) and [3072, 4096), as the
/// virtual-memory API maps a segment chunk by chunk — and whose kernel's arguments name buffer
/// 1 in the middle of the first (its address is `base + 2048`).
fn chunked(kernel: u64, writes: Vec<Vec<Write>>) -> Dev {
    let mut dev = Dev::new(&SIZES, writes);
    let base = dev.bufs[1].as_ptr() as usize;
    dev.inv.remove(base);
    dev.inv.record(base, 3072, AgentId(7), Origin::Pool);
    dev.inv.record(base + 3072, 1024, AgentId(7), Origin::Pool);
    dev.args = Some(vec![1]);
    dev.kernel = kernel;
    dev
}

#[test]
fn a_kernel_writing_past_the_allocation_its_argument_names_into_the_touching_one_learns_its_reach()
{
    // The kernel writes buffer 1 from its argument's address across the chunk boundary (a
    // tensor spanning two mappings).
    let writes = vec![vec![(1, 2048, 1500)]];
    let mut dev = chunked(0x2_0101, writes.clone());
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint)
    );
    assert_eq!(
        out.snapshot_bytes,
        3072 + 24,
        "the first chunk and the variable"
    );
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    assert!(
        !footprint::REMEMBERED.contains(7, 0x2_0101),
        "not remembered"
    );
    assert_eq!(footprint::REACH.get(7, 0x2_0101), 4096 - 2048);
    // Its next dispatch captures both chunks, not buffer 0, and is replayed.
    let mut dev = chunked(0x2_0101, writes);
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(out.footprint, Some(FootprintKind::Arguments));
    assert_eq!(out.snapshot_bytes, 4096 + 24);
    assert_eq!(out.watched_bytes, 1000);
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    assert!(
        dev.inputs.iter().all(|i| *i == initial),
        "every pass from the same inputs"
    );
}

#[test]
fn a_write_below_the_named_address_or_into_memory_that_does_not_touch_is_remembered() {
    // Buffer 1 as [0, 1024) and [1024, 4096): the arguments name the second chunk (at 2048)
    // and the kernel writes the first, below the address. No reach covers that.
    let mut dev = Dev::new(&SIZES, vec![vec![(1, 100, 8)]]);
    let base = dev.bufs[1].as_ptr() as usize;
    dev.inv.remove(base);
    dev.inv.record(base, 1024, AgentId(7), Origin::Pool);
    dev.inv.record(base + 1024, 3072, AgentId(7), Origin::Pool);
    dev.args = Some(vec![1]);
    dev.kernel = 0x2_0102;
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint)
    );
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    assert!(footprint::REMEMBERED.contains(7, 0x2_0102));
    // Buffer 0 is its own allocation, nowhere near buffer 1: remembered too.
    let mut dev = narrowed(0x2_0103, vec![vec![(1, 0, 8)]]);
    let (out, _) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint)
    );
    assert!(footprint::REMEMBERED.contains(7, 0x2_0103));
    assert_eq!(footprint::REACH.get(7, 0x2_0103), 0);
}

#[test]
fn a_reach_that_keeps_growing_ends_in_the_kernel_being_remembered() {
    let kernel = 0x2_0104;
    let regions = [(0x1000, 0x1000), (0x2000, 0x1000), (0x3000, 0x1000)];
    let named = [0x1800];
    for grown in 1..=footprint::REACH_GROWTHS {
        assert!(
            footprint::REACH.learn(7, kernel, &named, &regions, &[(0x2000, 0x1000)]),
            "growth {grown}"
        );
    }
    assert!(!footprint::REACH.learn(7, kernel, &named, &regions, &[(0x3000, 0x1000)]));
    // A gap between the named allocation and the written one: nothing to learn.
    let gap = [(0x1000, 0x1000), (0x2100, 0x1000)];
    assert!(!footprint::REACH.learn(7, 0x2_0105, &named, &gap, &[(0x2100, 0x1000)]));
}

#[test]
fn a_later_pass_writing_outside_the_snapshot_is_a_failure_when_verified() {
    let writes = vec![vec![(0, 0, 8)], vec![(0, 0, 8), (1, 0, 1)]];
    let mut dev = narrowed(0x2_0003, writes);
    let (out, _) = run(
        &mut dev,
        &policy_with(3, FootprintMode::Verified),
        RestoreMode::Auto,
    );
    assert_eq!(out.footprint, Some(FootprintKind::Verified));
    assert_eq!(
        out.kind,
        OutcomeKind::Failed(FailureReason::LateWriteOutsideFootprint)
    );
    assert_eq!(dev.completions, 1);
}

#[test]
fn by_default_a_later_pass_writing_outside_the_snapshot_is_found_by_the_next_window() {
    // One read of the watched memory per dispatch: after the first pass. The later pass's
    // write (buffer 1, watched) is not seen by its own window, which leaves the fingerprints
    // taken after its first pass; the agent's next window finds buffer 1 different from them
    // and stops after its first pass, which is one correct execution.
    let writes = vec![vec![(0, 0, 8)], vec![(0, 0, 8), (1, 0, 1)]];
    let mut dev = Dev::on(0x3_0201, &SIZES, writes);
    dev.args = Some(vec![0]);
    dev.kernel = 0x3_0201;
    let (out, _) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.footprint, Some(FootprintKind::Arguments));
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert!(
        out.fingerprint_time > Duration::ZERO,
        "the first pass was checked"
    );
    dev.kernel = 0x3_0202;
    dev.writes = vec![vec![(0, 0, 8)]];
    dev.passes = 0;
    let (next, before) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(next.carried_bytes, 4096);
    assert_eq!(
        next.kind,
        OutcomeKind::Declined(DeclineReason::FootprintUnchecked)
    );
    assert_eq!(dev.bufs, dev.one_execution(&before, 0));
}

#[test]
fn the_sampled_footprint_checks_a_kernels_first_dispatches_then_one_in_sampled_every() {
    use crate::policy::{SAMPLED_EVERY, SAMPLED_TRUST_AFTER};
    let sampled = policy_with(3, FootprintMode::Sampled);
    let mut dev = Dev::on(0x3_0301, &SIZES, vec![vec![(0, 0, 8)]]);
    dev.args = Some(vec![0]);
    dev.kernel = 0x3_0301;
    let mut kinds = Vec::new();
    for _ in 0..SAMPLED_TRUST_AFTER + SAMPLED_EVERY + 1 {
        dev.passes = 0;
        let (out, before) = run(&mut dev, &sampled, RestoreMode::Auto);
        assert_eq!(out.kind, OutcomeKind::Replayed);
        assert_eq!(dev.bufs, dev.one_execution(&before, 0));
        match out.footprint {
            Some(FootprintKind::Unchecked) => {
                assert_eq!(out.watched_bytes, 0);
                assert_eq!(out.fingerprint_time, Duration::ZERO);
            }
            Some(FootprintKind::Arguments) => assert_eq!(out.watched_bytes, 4096),
            other => panic!("{other:?}"),
        }
        kinds.push(out.footprint == Some(FootprintKind::Arguments));
    }
    let checked: Vec<usize> = (0..kinds.len()).filter(|&i| kinds[i]).collect();
    let trust = SAMPLED_TRUST_AFTER as usize;
    let mut expected: Vec<usize> = (0..trust).collect();
    expected.push(trust + SAMPLED_EVERY as usize - 1);
    assert_eq!(checked, expected);

    // A kernel trusted, then writing through a pointer its arguments do not hold: an
    // unchecked dispatch repeats the write once per pass (the documented risk, and its record
    // says `unchecked`); the next sampled check finds it, and the kernel captures everything.
    let mut dev = Dev::on(0x3_0302, &SIZES, vec![vec![(0, 0, 8)]]);
    dev.args = Some(vec![0]);
    dev.kernel = 0x3_0302;
    for _ in 0..SAMPLED_TRUST_AFTER {
        dev.passes = 0;
        let (out, _) = run(&mut dev, &sampled, RestoreMode::Auto);
        assert_eq!(out.footprint, Some(FootprintKind::Arguments));
    }
    dev.writes = vec![vec![(0, 0, 8), (1, 0, 4)]];
    dev.passes = 0;
    let (out, before) = run(&mut dev, &sampled, RestoreMode::Auto);
    assert_eq!(
        (out.kind, out.footprint),
        (OutcomeKind::Replayed, Some(FootprintKind::Unchecked))
    );
    assert_ne!(
        dev.bufs,
        dev.one_execution(&before, 0),
        "unchecked: the write outside was repeated"
    );
    let mut caught = None;
    for _ in 0..SAMPLED_EVERY {
        dev.passes = 0;
        let (out, before) = run(&mut dev, &sampled, RestoreMode::Auto);
        if out.footprint == Some(FootprintKind::Arguments) {
            assert_eq!(
                out.kind,
                OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint)
            );
            assert_eq!(dev.bufs, dev.one_execution(&before, 0));
            caught = Some(out);
            break;
        }
    }
    assert!(
        caught.is_some(),
        "a sampled check came within SAMPLED_EVERY"
    );
    dev.passes = 0;
    let (out, before) = run(&mut dev, &sampled, RestoreMode::Auto);
    assert_eq!(
        (out.kind, out.footprint),
        (OutcomeKind::Replayed, Some(FootprintKind::All))
    );
    assert_eq!(dev.bufs, dev.one_execution(&before, 0));
}

struct PanickingFootprint;
impl ReplayPolicy for PanickingFootprint {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(3, ())
    }
    fn footprint(&self, _: &DispatchInfo) -> FootprintMode {
        panic!("no footprint")
    }
}

#[test]
fn the_policys_footprint_wins_over_the_environment_and_a_panic_declines() {
    // The environment says `all`; the policy asks for the arguments footprint.
    let mut dev = narrowed(0x2_0009, vec![vec![(0, 0, 8)]]);
    let initial = dev.bufs.clone();
    let inv = dev.inv.clone();
    let all = Settings {
        footprint: FootprintMode::All,
        ..settings(RestoreMode::Auto)
    };
    let info = DispatchInfo {
        kernel_object: dev.kernel,
        ..info()
    };
    let p = policy_with(3, FootprintMode::Arguments);
    let out = run_window(&p, &info, &mut dev, &inv, &all);
    assert_eq!(out.footprint, Some(FootprintKind::Arguments));
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    let mut dev = narrowed(0x2_000a, vec![vec![(0, 0, 8)]]);
    let initial = dev.bufs.clone();
    let out = run_window(&PanickingFootprint, &info, &mut dev, &inv, &all);
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::PolicyPanicked)
    );
    assert_eq!((dev.passes, dev.ordinary_runs), (0, 1));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

#[test]
fn strict_mode_and_the_all_setting_capture_every_allocation() {
    let mut dev = narrowed(0x2_0004, vec![vec![(1, 0, 8)]]);
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Strict), RestoreMode::Auto);
    assert_eq!(out.footprint, Some(FootprintKind::All));
    assert_eq!((out.kind, out.watched_bytes), (OutcomeKind::Replayed, 0));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    let mut dev = narrowed(0x2_0005, vec![vec![(1, 0, 8)]]);
    let initial = dev.bufs.clone();
    let inv = dev.inv.clone();
    let all = Settings {
        footprint: crate::policy::FootprintMode::All,
        ..settings(RestoreMode::Auto)
    };
    let info = DispatchInfo {
        kernel_object: dev.kernel,
        ..info()
    };
    let out = run_window(&policy(3, RestoreMode::Auto), &info, &mut dev, &inv, &all);
    assert_eq!(out.footprint, Some(FootprintKind::All));
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

#[test]
fn fingerprints_that_cannot_be_read_capture_everything_or_stop_after_the_first_pass() {
    // Before the first pass (the first capture batch is the fingerprint read): everything is
    // captured instead, and the dispatch is replayed.
    let mut dev = narrowed(0x2_0006, vec![vec![(1, 0, 8)]]);
    dev.fail_capture_at = Some((0, 0));
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.footprint, Some(FootprintKind::All));
    assert_eq!(out.kind, OutcomeKind::Replayed);
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    // After it: replay stops, its result stands.
    for (fail, reason) in [
        (true, DeclineReason::FootprintUnchecked),
        (false, DeclineReason::CopyTimeout),
    ] {
        let mut dev = narrowed(0x2_0007, vec![vec![(0, 0, 8)]]);
        if fail {
            dev.fail_capture_at = Some((1, 0));
        } else {
            dev.stuck_capture_at = Some((1, 0));
        }
        let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
        assert_eq!(out.kind, OutcomeKind::Declined(reason));
        assert_eq!((out.passes, dev.completions), (1, 1));
        assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
    }
    // A stuck read before the first pass declines the dispatch: it runs once.
    let mut dev = narrowed(0x2_0008, vec![vec![(0, 0, 8)]]);
    dev.stuck_capture_at = Some((0, 0));
    let (out, initial) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Declined(DeclineReason::CopyTimeout));
    assert_eq!(dev.bufs, dev.one_execution(&initial, 0));
}

/// Runs the next dispatch (kernel object `kernel`) on `dev` under 3 passes: replayed, memory
/// one execution of it.
fn replay_again(dev: &mut Dev, kernel: u64) -> Outcome {
    dev.kernel = kernel;
    dev.passes = 0;
    let before = dev.bufs.clone();
    let (out, _) = run(dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed, "{out:?}");
    assert_eq!(dev.bufs, dev.one_execution(&before, 0));
    out
}

#[test]
fn the_next_window_takes_the_fingerprints_the_last_one_left_unless_something_was_written() {
    // Agent 0x3_0001 is this test's own. Buffer 1 is watched; the kernels write buffer 0.
    let mut dev = Dev::on(0x3_0001, &SIZES, vec![vec![(0, 0, 8)]]);
    dev.args = Some(vec![0]);
    dev.kernel = 0x3_0001;
    let first = replay_again(&mut dev, 0x3_0001);
    assert_eq!((first.watched_bytes, first.carried_bytes), (4096, 0));
    // The next window (another kernel, same watched buffer): nothing ran in between.
    let second = replay_again(&mut dev, 0x3_0002);
    assert_eq!(second.carried_bytes, 4096, "carried from the first window");
    // Something wrote the agent's memory outside a window: read again.
    footprint::note_device_write(0x3_0001);
    let third = replay_again(&mut dev, 0x3_0003);
    assert_eq!(third.carried_bytes, 0);
    // A window that captured everything (strict) leaves nothing to carry.
    let fourth = replay_again(&mut dev, 0x3_0004);
    assert_eq!(fourth.carried_bytes, 4096);
    dev.passes = 0;
    let (out, _) = run(&mut dev, &policy(3, RestoreMode::Strict), RestoreMode::Auto);
    assert_eq!(out.footprint, Some(FootprintKind::All));
    let fifth = replay_again(&mut dev, 0x3_0005);
    assert_eq!(
        fifth.carried_bytes, 0,
        "taken by the strict window, not left"
    );
}

#[test]
fn a_stale_carried_fingerprint_costs_a_replay_never_a_missed_write() {
    // Buffer 1 changes between two windows without the engine being told (as a host store
    // into device memory would): the second window's carried "before" is stale. Its first
    // pass looks as if it wrote there: replay stops after it (not blamed on the kernel, which
    // is not remembered), and memory is that one execution.
    let mut dev = Dev::on(0x3_0101, &SIZES, vec![vec![(0, 0, 8)]]);
    dev.args = Some(vec![0]);
    dev.kernel = 0x3_0101;
    let (out, _) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.kind, OutcomeKind::Replayed);
    dev.bufs[1][7] ^= 0xff;
    dev.kernel = 0x3_0102;
    dev.passes = 0;
    let (out, before) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(out.carried_bytes, 4096);
    assert_eq!(
        out.kind,
        OutcomeKind::Declined(DeclineReason::FootprintUnchecked)
    );
    assert_eq!(dev.bufs, dev.one_execution(&before, 0));
    assert!(!footprint::REMEMBERED.contains(0x3_0101, 0x3_0102));
    // Suspected, its next dispatch reads every fingerprint fresh, finds its own pass wrote
    // nothing there, replays, and is cleared: the one after takes carried fingerprints again.
    let fresh = replay_again(&mut dev, 0x3_0102);
    assert_eq!(
        fresh.carried_bytes, 0,
        "a suspect reads its fingerprints fresh"
    );
    let cleared = replay_again(&mut dev, 0x3_0102);
    assert_eq!(cleared.carried_bytes, 4096, "cleared by its clean check");
    assert!(!footprint::REMEMBERED.contains(0x3_0101, 0x3_0102));
}

#[test]
fn a_kernel_writing_where_fingerprints_were_carried_is_remembered_at_its_next_dispatch() {
    // Kernel J writes buffer 0, its argument; kernel K writes buffer 1 as well, outside its
    // arguments. Each K dispatch follows a J window that leaves buffer 1's fingerprints. K's
    // first window cannot tell its write from an unseen one (`footprint_unchecked`); its
    // second reads buffer 1 fresh, so the write is K's: remembered; its third captures every
    // allocation and replays.
    let (agent, j, k) = (0x3_0301, 0x3_0301, 0x3_0302);
    let inside = vec![vec![(0, 0, 8)]];
    let outside = vec![vec![(0, 0, 8), (1, 0, 8)]];
    let mut dev = Dev::on(agent, &SIZES, inside.clone());
    dev.args = Some(vec![0]);
    let k_window = |dev: &mut Dev| {
        dev.writes = inside.clone();
        replay_again(dev, j);
        dev.writes = outside.clone();
        dev.kernel = k;
        dev.passes = 0;
        let (out, before) = run(dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
        assert_eq!(
            dev.bufs,
            dev.one_execution(&before, 0),
            "one execution: {out:?}"
        );
        out
    };
    let first = k_window(&mut dev);
    assert_eq!(first.carried_bytes, 4096);
    assert_eq!(
        first.kind,
        OutcomeKind::Declined(DeclineReason::FootprintUnchecked)
    );
    assert!(!footprint::REMEMBERED.contains(agent, k));
    let second = k_window(&mut dev);
    assert_eq!(second.carried_bytes, 0, "read fresh");
    assert_eq!(
        second.kind,
        OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint)
    );
    assert!(footprint::REMEMBERED.contains(agent, k));
    let third = k_window(&mut dev);
    assert_eq!(third.kind, OutcomeKind::Replayed);
    assert_eq!(third.footprint, Some(FootprintKind::All));
}

#[test]
fn a_copy_into_one_watched_allocation_makes_only_its_fingerprints_read_again() {
    // Buffers 1 and 2 are watched (the kernels write buffer 0). A copy the backend decoded
    // writes buffer 2 between two windows: the next window reads buffer 2's fingerprints again
    // and keeps buffer 1's; had it kept buffer 2's stale ones, replay would stop after the first
    // pass (`footprint_unchecked`).
    let sizes = [1000, 4096, 4096, 24];
    let mut dev = Dev::on(0x3_0201, &sizes, vec![vec![(0, 0, 8)]]);
    dev.args = Some(vec![0]);
    let first = replay_again(&mut dev, 0x3_0201);
    assert_eq!((first.watched_bytes, first.carried_bytes), (8192, 0));
    // The copy: logged before and after it is submitted, as the CUDA backend does.
    let base = dev.bufs[2].as_ptr() as usize;
    footprint::note_range_write(base + 100, 16);
    dev.bufs[2][100..116].fill(0xab);
    footprint::note_range_write(base + 100, 16);
    let second = replay_again(&mut dev, 0x3_0202);
    assert_eq!(
        second.carried_bytes, 4096,
        "buffer 1 carried, buffer 2 read again"
    );
    // A copy into memory no allocation holds (host memory, say) costs nothing carried.
    let host = [0u8; 64];
    footprint::note_range_write(host.as_ptr() as usize, host.len());
    let third = replay_again(&mut dev, 0x3_0203);
    assert_eq!(third.carried_bytes, 8192);
}

#[test]
fn a_stuck_final_write_back_never_gives_its_staging_back() {
    // After pass 3 the final diff finds nothing more; the write-back of the first pass's
    // result (the first restore batch after it) stays stuck: it may still read the snapshot
    // and the stash, so neither may be reused.
    let mut dev = Dev::new(&[4096, 24], vec![vec![(0, 0, 100), (1, 0, 1)]]);
    dev.stuck_restore_at = Some((3, 0));
    dev.counted = true;
    let (out, _) = run(&mut dev, &policy(3, RestoreMode::Auto), RestoreMode::Auto);
    assert_eq!(
        out.kind,
        OutcomeKind::Failed(FailureReason::RestoreStuck),
        "{out:?}"
    );
    assert_eq!(out.restore_mode, Some(RestoreKind::WriteSet));
    // The snapshot's two buffers come first; the diffs' scratch, done with, may go back.
    let staged = dev.staged.len();
    assert_eq!(dev.unreleased_of(0..2), 2, "the snapshot is kept");
    assert!(
        dev.unreleased_of(0..staged) >= 3,
        "the stash is kept too: {} of {staged}",
        dev.unreleased_of(0..staged)
    );
}
