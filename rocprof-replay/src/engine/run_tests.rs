//! Windows over runs of dispatches (`ROCPROF_REPLAY_RUN`) against a simulated device: the
//! engine's own decision and window, with targets that offer the next dispatches of their
//! queue ([`ReplayTarget::next_in_run`]). Kernels accumulate (`dst += src + 1`), so a pass
//! that ran once too often, or from the wrong inputs, shows in the memory the application
//! keeps.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::*;
use crate::counters::{CounterCatalog, MetricSet, Metrics};
use crate::dispatch::{AgentId, DispatchId, QueueId};
use crate::engine::inventory::Origin;
use crate::engine::snapshot::{CopyError, Direction, Transfer, host_copy};
use crate::engine::state::{Engine, Window};

/// Words per buffer.
const N: usize = 512;

/// A test's memory: buffers of `N` words.
struct Dev {
    bufs: Vec<Box<[u64]>>,
}

impl Dev {
    /// `count` buffers with distinct contents; buffer `table` (if any) holds the address of
    /// buffer `target` in its first word (a pointer stored in device memory).
    fn new(count: usize, table: Option<(usize, usize)>) -> Dev {
        let mut bufs: Vec<Box<[u64]>> = (0..count)
            .map(|b| (0..N as u64).map(|i| i * 7 + b as u64 * 1000).collect())
            .collect();
        if let Some((table, target)) = table {
            let addr = bufs[target].as_ptr() as u64;
            bufs[table][0] = addr;
        }
        Dev { bufs }
    }

    fn addr(&self, b: usize) -> usize {
        self.bufs[b].as_ptr() as usize
    }

    /// Every buffer as an allocation of `agent`, but buffer `late` (allocated later).
    fn inventory(&self, agent: u64, late: Option<usize>) -> AllocationInventory {
        let inv = AllocationInventory::new();
        for (i, b) in self.bufs.iter().enumerate() {
            if late != Some(i) {
                inv.record(b.as_ptr() as usize, N * 8, AgentId(agent), Origin::Pool);
            }
        }
        inv
    }

    /// Every buffer but the pointer tables, as the application would read them.
    fn values(&self) -> Vec<Vec<u64>> {
        self.bufs.iter().map(|b| b[1..].to_vec()).collect()
    }
}

/// A kernel, by buffer numbers.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    /// `dst[i] += src[i] + 1`; its arguments name both.
    Add { src: usize, dst: usize },
    /// The same into the buffer whose address buffer `table` holds; its arguments name
    /// `table` and `src` only.
    Through { table: usize, src: usize },
}

impl Kernel {
    fn object(&self) -> u64 {
        match *self {
            Kernel::Add { src, dst } => 0x100 + (src * 16 + dst) as u64,
            Kernel::Through { table, src } => 0x900 + (table * 16 + src) as u64,
        }
    }

    fn args(&self, dev: &Dev) -> Vec<u8> {
        let words = match *self {
            Kernel::Add { src, dst } => [dev.addr(src), dev.addr(dst)],
            Kernel::Through { table, src } => [dev.addr(table), dev.addr(src)],
        };
        words
            .iter()
            .flat_map(|w| (*w as u64).to_le_bytes())
            .collect()
    }

    /// Runs on `dev`; returns its input (`src`) as it found it.
    fn run(&self, dev: &mut Dev) -> Vec<u64> {
        let (src, dst) = match *self {
            Kernel::Add { src, dst } => (src, dev.addr(dst)),
            Kernel::Through { table, src } => (src, dev.bufs[table][0] as usize),
        };
        let input = dev.bufs[src].to_vec();
        let at = dev.bufs.iter().position(|b| b.as_ptr() as usize == dst);
        let d = at.expect("a kernel writes one of the test's buffers");
        for (w, x) in dev.bufs[d].iter_mut().zip(&input).skip(1) {
            *w = w.wrapping_add(*x).wrapping_add(1);
        }
        input
    }
}

/// What the test sees of the targets.
#[derive(Default)]
struct Log {
    /// Per kernel run: its object and its input.
    inputs: Mutex<Vec<(u64, Vec<u64>)>>,
    completions: AtomicU64,
    /// Kernel objects in the order their completions were released.
    released: Mutex<Vec<u64>>,
    /// Targets queue later passes ([`ReplayTarget::splits_passes`]) on this device queue:
    /// (ticket, pass or restore), run in order when a pass is collected.
    split: bool,
    queued: Mutex<VecDeque<(u64, Item)>>,
    /// Restores are queued too ([`DeviceMemory::queue_restores`]); `stuck_restore`: the
    /// first one queued never ends (nor anything behind it).
    queue_restores: bool,
    stuck_restore: bool,
    /// Restores queued.
    restores_queued: AtomicU64,
    /// Queued restores that ran while a buffer they write was not pinned (a free would not
    /// have waited for them).
    unpinned_restores: AtomicU64,
    /// Policies allow passes ahead ([`ReplayPolicy::passes_ahead`]) and targets queue them.
    ahead: bool,
    /// The footprint the policies ask for, but for kernel `checked`'s dispatches: `arguments`.
    footprint: FootprintMode,
    checked: Option<u64>,
    /// `footprint` calls: the policy is asked once per dispatch, whether its dispatch joined a
    /// run, was offered to one and not taken, or had a window of its own.
    footprint_calls: AtomicU64,
    /// A buffer left out of the inventory until the first kernel runs, on agent `agent`.
    late: Option<usize>,
    late_recorded: std::sync::atomic::AtomicBool,
    agent: u64,
    /// The policies' pass calls, in order: (kernel, pass, `true` for `on_pass`).
    calls: Mutex<Vec<(u64, u32, bool)>>,
    tickets: AtomicU64,
    /// The most passes queued at once.
    deepest: AtomicU64,
    /// A kernel whose queued pass never ends (and everything queued behind it).
    stuck: Option<u64>,
    /// Kernel objects whose queued pass the window abandoned.
    abandoned: Mutex<Vec<u64>>,
    /// The metric set every policy asks for, but kernel `other_metrics.0`'s (the second set).
    metrics: Option<Arc<MetricSet>>,
    other_metrics: Option<(u64, Arc<MetricSet>)>,
    /// Ranges one counter pass holds ([`ReplayTarget::counter_ranges`]); 0: no counters.
    counter_ranges: u32,
    /// A kernel whose counter passes cannot be submitted.
    refuse_counted: Option<u64>,
    /// The counter calls, in order: `arm P K` (kernel K's target armed for counter pass P),
    /// `end K` (its `arm_counters(None)`), objects in hex.
    counting: Mutex<Vec<String>>,
}

/// Work on the fake device queue.
enum Item {
    Pass(Kernel),
    Restore(Vec<Transfer>),
}

/// The backend's handle on one dispatch.
struct Fake {
    kernel: Kernel,
    dev: Arc<Mutex<Dev>>,
    log: Arc<Log>,
    args: Vec<u8>,
    /// Its passes on the device queue, not collected yet, oldest first.
    tickets: VecDeque<u64>,
    /// Restores are queued ([`DeviceMemory::queue_restores`]) until asked otherwise.
    queuing: bool,
    inventory: Arc<AllocationInventory>,
    /// Metrics per counter pass of the prepared set.
    prepared: Vec<u32>,
    /// The kernel runs logged before its last counter pass began.
    armed: Option<usize>,
    /// Between `arm_counters(Some)` and `arm_counters(None)`.
    counting: bool,
}

/// The dispatches submitted after the one whose window runs, in order: all on one queue, each
/// right behind the one before.
#[derive(Default)]
struct Queue {
    pending: VecDeque<(Window, Fake)>,
    /// Shown by `peek`, not taken yet (back at the front when the window ends).
    held: Option<(Window, Fake)>,
}

impl Joins<'static> for Queue {
    fn peek(&mut self) -> Option<(&Window, &mut (dyn ReplayTarget + 'static))> {
        if self.held.is_none() {
            self.held = self.pending.pop_front();
        }
        let (window, target) = self.held.as_mut()?;
        Some((&*window, target as &mut dyn ReplayTarget))
    }
    fn take(&mut self) -> Option<Joiner<'static>> {
        let (window, target) = self.held.take()?;
        Some(Joiner {
            window,
            target: Box::new(target),
        })
    }
}

impl Queue {
    /// The next window to run: one shown and not taken first.
    fn next(&mut self) -> Option<(Window, Fake)> {
        self.held.take().or_else(|| self.pending.pop_front())
    }
}

impl Fake {
    fn run_kernel(&mut self) {
        // Buffer `late` is allocated (by another thread, say) while the first kernel runs.
        if let Some(b) = self.log.late
            && !self.log.late_recorded.swap(true, Ordering::SeqCst)
        {
            let addr = self.dev.lock().addr(b);
            self.inventory
                .record(addr, N * 8, AgentId(self.log.agent), Origin::Pool);
        }
        let input = self.kernel.run(&mut self.dev.lock());
        self.log.inputs.lock().push((self.kernel.object(), input));
    }
}

impl Fake {
    /// Runs the restores at the queue's front (a copy that is not queued comes after them);
    /// `false`: a stuck one is there.
    fn settle_restores(&mut self) -> bool {
        let mut q = self.log.queued.lock();
        while let Some((_, Item::Restore(transfers))) = q.front() {
            if self.log.stuck_restore {
                return false;
            }
            let _held = self.dev.lock();
            let pinned = transfers.iter().all(|t| {
                _held
                    .bufs
                    .iter()
                    .map(|b| b.as_ptr() as usize)
                    .find(|&b| b <= t.device && t.device < b + N * 8)
                    .is_some_and(|b| self.inventory.is_pinned_now(b))
            });
            if !pinned {
                self.log.unpinned_restores.fetch_add(1, Ordering::SeqCst);
            }
            // SAFETY: as in `copy`.
            unsafe { host_copy(Direction::Restore, transfers) };
            drop(_held);
            q.pop_front();
        }
        true
    }
}

impl DeviceMemory for Fake {
    fn copy(&mut self, direction: Direction, transfers: &[Transfer]) -> Result<(), CopyError> {
        if direction == Direction::Restore && self.queuing {
            let ticket = self.log.tickets.fetch_add(1, Ordering::SeqCst);
            self.log
                .queued
                .lock()
                .push_back((ticket, Item::Restore(transfers.to_vec())));
            self.log.restores_queued.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        if !self.settle_restores() {
            return Err(CopyError::Stuck);
        }
        let _held = self.dev.lock();
        // SAFETY: the engine passes the test's live buffers and its own heap staging.
        unsafe { host_copy(direction, transfers) };
        Ok(())
    }
    fn queue_restores(&mut self, on: bool) -> bool {
        self.queuing = on && self.log.queue_restores;
        self.queuing
    }
    fn restore_pending(&mut self) -> bool {
        matches!(self.log.queued.lock().front(), Some((_, Item::Restore(_))))
    }
}

impl Ordinary for Fake {
    fn refusal(&self) -> Option<DeclineReason> {
        None
    }
    fn run_once(&mut self) -> bool {
        ReplayTarget::run_once(self)
    }
}

impl ReplayTarget for Fake {
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
        if self.counting && self.log.refuse_counted == Some(self.kernel.object()) {
            return Err(PassError::NotSubmitted(DeclineReason::SubmitFailed));
        }
        // Behind the queued restores, as on the device queue.
        if !self.settle_restores() {
            return Err(PassError::Late);
        }
        self.run_kernel();
        Ok(timed.then_some(Duration::from_micros(1)))
    }
    fn splits_passes(&self) -> bool {
        self.log.split
    }
    fn queues_ahead(&self) -> bool {
        self.log.split && self.log.ahead
    }
    fn submit_pass(&mut self, _: bool) -> Result<(), PassError> {
        let ticket = self.log.tickets.fetch_add(1, Ordering::SeqCst);
        let mut q = self.log.queued.lock();
        q.push_back((ticket, Item::Pass(self.kernel)));
        let passes = q.iter().filter(|(_, i)| matches!(i, Item::Pass(_))).count();
        self.log.deepest.fetch_max(passes as u64, Ordering::SeqCst);
        self.tickets.push_back(ticket);
        Ok(())
    }
    fn collect_pass(&mut self) -> Result<Option<Duration>, PassError> {
        let ticket = self.tickets.pop_front().expect("collected after submitted");
        // The device runs the queue in order up to this pass; a stuck kernel holds the rest.
        loop {
            let mut q = self.log.queued.lock();
            let kernel = match q.front() {
                None => panic!("pass {ticket} collected twice"),
                Some((_, Item::Restore(_))) if self.log.stuck_restore => {
                    return Err(PassError::Late);
                }
                Some((_, Item::Restore(_))) => {
                    drop(q);
                    self.settle_restores();
                    continue;
                }
                Some(&(_, Item::Pass(kernel))) => kernel,
            };
            let t = q.front().map_or(0, |f| f.0);
            if Some(kernel.object()) == self.log.stuck {
                return Err(PassError::Late);
            }
            q.pop_front();
            drop(q);
            let input = kernel.run(&mut self.dev.lock());
            self.log.inputs.lock().push((kernel.object(), input));
            if t == ticket {
                return Ok(Some(Duration::from_micros(1)));
            }
        }
    }
    fn abandon_pass(&mut self) {
        assert!(
            self.tickets.pop_front().is_some(),
            "abandoned a pass never submitted"
        );
        self.log.abandoned.lock().push(self.kernel.object());
    }
    fn run_once(&mut self) -> bool {
        if !self.settle_restores() {
            return false;
        }
        self.run_kernel();
        self.log.completions.fetch_add(1, Ordering::SeqCst);
        true
    }
    fn complete(&mut self) {
        self.log.completions.fetch_add(1, Ordering::SeqCst);
    }
    fn settle_late_pass(&mut self) -> bool {
        Some(self.kernel.object()) != self.log.stuck && !self.log.stuck_restore
    }
    fn contended(&self) -> bool {
        false
    }
    fn end(&mut self) {}
    fn argument_bytes(&self) -> Option<Vec<u8>> {
        Some(self.args.clone())
    }
    fn released(&mut self) {
        self.log.released.lock().push(self.kernel.object());
    }
    fn prepare_counters(&mut self, set: &MetricSet) -> Result<(), String> {
        if self.log.counter_ranges == 0 {
            return Err("no counters here".into());
        }
        self.prepared = (0..set.pass_count())
            .map(|p| set.pass(p).count() as u32)
            .collect();
        Ok(())
    }
    fn counter_ranges(&self) -> u32 {
        self.log.counter_ranges.max(1)
    }
    fn arm_counters(&mut self, pass: Option<u32>) {
        let k = self.kernel.object();
        match pass {
            Some(p) => {
                self.armed = Some(self.log.inputs.lock().len());
                self.counting = true;
                self.log.counting.lock().push(format!("arm {p} {k:x}"));
            }
            None if self.counting => {
                self.counting = false;
                self.log.counting.lock().push(format!("end {k:x}"));
            }
            None => {}
        }
    }
    /// Each metric's value: the kernel that ran in its armed pass (its object times a
    /// million), what it read (its input's second word, mod 1000, times 10), its position.
    fn counter_values(&mut self, pass: u32) -> Result<Vec<u64>, String> {
        let at = self.armed.ok_or("no counter pass was armed")?;
        let inputs = self.log.inputs.lock();
        let (kernel, input) = inputs.get(at).ok_or("no kernel ran in the armed pass")?;
        if *kernel != self.kernel.object() {
            return Err(format!("another kernel ran in the armed pass: {kernel:x}"));
        }
        Ok((0..self.prepared[pass as usize])
            .map(|i| kernel * 1_000_000 + (input[1] % 1000) * 10 + u64::from(i))
            .collect())
    }
}

/// Fixed passes; `on_pass` panics for one kernel at one pass; every outcome is kept.
struct Policy {
    passes: u32,
    panic_at: Option<(u64, u32)>,
    restore: RestoreMode,
    ended: Arc<Mutex<Vec<(u64, Outcome)>>>,
    log: Arc<Log>,
}

impl ReplayPolicy for Policy {
    type State = ();
    type PassState = ();
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.passes, ())
    }
    fn on_pass(&self, pass: &mut Pass<'_>, _: &mut (), _: &mut ()) {
        let k = pass.info().kernel_object;
        self.log.calls.lock().push((k, pass.index(), true));
        if self.panic_at == Some((k, pass.index())) {
            panic!("a policy's own bug");
        }
    }
    fn on_pass_end(&self, pass: &crate::PassReport<'_>, _: &mut (), _: &mut ()) {
        let k = pass.info.kernel_object;
        self.log.calls.lock().push((k, pass.index, false));
    }
    fn passes_ahead(&self, _: &DispatchInfo) -> bool {
        self.log.ahead
    }
    fn footprint(&self, info: &DispatchInfo) -> FootprintMode {
        self.log.footprint_calls.fetch_add(1, Ordering::SeqCst);
        if self.log.checked == Some(info.kernel_object) {
            FootprintMode::Arguments
        } else {
            self.log.footprint
        }
    }
    fn restore_mode(&self, _: &DispatchInfo) -> RestoreMode {
        self.restore
    }
    fn metrics(&self, info: &DispatchInfo) -> Option<Arc<MetricSet>> {
        match &self.log.other_metrics {
            Some((k, set)) if *k == info.kernel_object => Some(Arc::clone(set)),
            _ => self.log.metrics.clone(),
        }
    }
    fn on_end(&self, info: &DispatchInfo, _: (), outcome: &Outcome) {
        self.ended
            .lock()
            .push((info.kernel_object, outcome.clone()));
    }
}

fn info(agent: u64, kernel: &Kernel, n: u64) -> DispatchInfo {
    DispatchInfo {
        runtime: crate::dispatch::Runtime::Hsa,
        agent: AgentId(agent),
        agent_index: 0,
        queue: QueueId(1),
        dispatch_id: DispatchId(n),
        kernel_object: kernel.object(),
        kernel_name: Some(format!("{kernel:?}").into()),
        grid: [N as u32, 1, 1],
        workgroup: [64, 1, 1],
        blocks: [1, 1, 1],
        group_segment_size: 0,
        private_segment_size: 0,
        context: None,
    }
}

/// What a run of `kernels` left.
struct Ran {
    /// Per dispatch, in submission order: its kernel and outcome.
    outcomes: Vec<(u64, Outcome)>,
    /// The memory the application keeps, and that of one plain execution of the kernels.
    memory: Vec<Vec<u64>>,
    expected: Vec<Vec<u64>>,
    log: Arc<Log>,
}

/// Submits `kernels` as consecutive dispatches of one queue under a policy of `passes` fixed
/// passes and `ROCPROF_REPLAY_RUN=run`: the first's window runs, offering the others in
/// order; a candidate not taken gets its own window afterwards, as a backend would run it.
fn submit(
    agent: u64,
    buffers: usize,
    table: Option<(usize, usize)>,
    kernels: &[Kernel],
    passes: u32,
    run: u32,
    panic_at: Option<(u64, u32, RestoreMode)>,
) -> Ran {
    submit_to(
        Log::default(),
        agent,
        buffers,
        table,
        kernels,
        passes,
        run,
        panic_at,
    )
}

/// [`submit`] with targets that see `log` (whether they queue passes, which kernel sticks).
#[allow(clippy::too_many_arguments)]
fn submit_to(
    log: Log,
    agent: u64,
    buffers: usize,
    table: Option<(usize, usize)>,
    kernels: &[Kernel],
    passes: u32,
    run: u32,
    panic_at: Option<(u64, u32, RestoreMode)>,
) -> Ran {
    let mut reference = Dev::new(buffers, table);
    for k in kernels {
        k.run(&mut reference);
    }
    let dev = Arc::new(Mutex::new(Dev::new(buffers, table)));
    let inventory = Arc::new(dev.lock().inventory(agent, log.late));
    let ended = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::new(log);
    let policy = Policy {
        passes,
        panic_at: panic_at.map(|(k, p, _)| (k, p)),
        restore: panic_at.map_or(RestoreMode::Auto, |(_, _, r)| r),
        ended: Arc::clone(&ended),
        log: Arc::clone(&log),
    };
    let settings = Settings {
        run,
        budget: u64::MAX,
        ..Settings::from_lookup(|_| None)
    };
    let engine = Engine::leaked(Box::new(policy), settings);
    let mut queue = Queue::default();
    for (n, k) in kernels.iter().enumerate() {
        let mut target = Fake {
            kernel: *k,
            dev: Arc::clone(&dev),
            log: Arc::clone(&log),
            args: k.args(&dev.lock()),
            tickets: VecDeque::new(),
            queuing: false,
            inventory: Arc::clone(&inventory),
            prepared: Vec::new(),
            armed: None,
            counting: false,
        };
        let window = engine
            .decide(&info(agent, k, n as u64), &mut target)
            .expect("every dispatch enters a window");
        queue.pending.push_back((window, target));
    }
    // Window after window, as a backend's lane runs them: each may take the next ones in.
    while let Some((window, mut target)) = queue.next() {
        let (_, later) = window.run_in(&mut target, &inventory, Some(&mut queue));
        for mut t in later {
            t.released();
        }
    }
    let memory = dev.lock().values();
    let mut outcomes = ended.lock().clone();
    outcomes.sort_by_key(|(_, o)| o.started_at);
    Ran {
        outcomes,
        memory,
        expected: reference.values(),
        log,
    }
}

fn kinds(ran: &Ran) -> Vec<(OutcomeKind, u32, u32)> {
    ran.outcomes
        .iter()
        .map(|(_, o)| (o.kind, o.passes, o.run))
        .collect()
}

/// Each kernel's inputs over its runs: all equal when every pass started from its inputs.
fn inputs_of(ran: &Ran, kernel: &Kernel) -> Vec<Vec<u64>> {
    ran.log
        .inputs
        .lock()
        .iter()
        .filter(|(k, _)| *k == kernel.object())
        .map(|(_, i)| i.clone())
        .collect()
}

#[test]
fn a_run_replays_each_dispatch_from_its_own_inputs_and_leaves_one_execution() {
    // A chain: each kernel reads what the one before wrote.
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
        Kernel::Add { src: 3, dst: 1 },
    ];
    let ran = submit(8101, 5, None, &kernels, 3, 8, None);
    assert_eq!(
        ran.memory, ran.expected,
        "one execution of the four, in order"
    );
    assert_eq!(
        kinds(&ran),
        vec![(OutcomeKind::Replayed, 3, 4); 4],
        "one window of four, three passes each"
    );
    for k in &kernels {
        let inputs = inputs_of(&ran, k);
        assert!(
            !inputs.is_empty() && inputs.iter().all(|i| i == &inputs[0]),
            "{k:?} saw other inputs in a later pass"
        );
    }
    // Kernels 1 and 3 both read buffer 1 and 3 … each pass of the run saw the same chain.
    assert_eq!(ran.log.inputs.lock().len(), 4 * 3);
    assert_eq!(
        ran.log.completions.load(Ordering::SeqCst),
        4,
        "one completion each"
    );
    let objects: Vec<u64> = kernels[1..].iter().map(Kernel::object).collect();
    assert_eq!(
        *ran.log.released.lock(),
        objects,
        "later members released in order"
    );
    let (_, first) = &ran.outcomes[0];
    assert_eq!(first.restore_mode, Some(RestoreKind::WriteSet));
    assert!(first.inputs_restored == Some(true), "{first:?}");
}

#[test]
fn a_run_stops_at_its_limit_and_the_rest_get_windows_of_their_own() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 0 },
    ];
    let ran = submit(8102, 3, None, &kernels, 2, 2, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        kinds(&ran),
        vec![
            (OutcomeKind::Replayed, 2, 2),
            (OutcomeKind::Replayed, 2, 2),
            (OutcomeKind::Replayed, 2, 1)
        ]
    );
}

#[test]
fn a_member_writing_memory_no_member_names_ends_the_run_after_its_first_passes() {
    // The second kernel writes buffer 3 through a pointer stored in buffer 2; no argument
    // names buffer 3. Buffer 3 is then read by nobody in the run: only the watch finds it.
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Through { table: 2, src: 1 },
        Kernel::Add { src: 1, dst: 4 },
    ];
    let ran = submit(8103, 5, Some((2, 3)), &kernels, 3, 8, None);
    assert_eq!(ran.memory, ran.expected, "one execution: nothing ran twice");
    assert_eq!(
        kinds(&ran),
        vec![
            (
                OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint),
                1,
                3
            );
            3
        ]
    );
    for k in &kernels {
        assert!(
            footprint::SOLO.contains(8103, k.object()),
            "{k:?} gets windows of its own from now on"
        );
    }
    // A later run of the same kernels: each in a window of its own, where the writer stops
    // after its first pass (found by the fingerprints its window carried over from the one
    // before, or by its own).
    let again = submit(8103, 5, Some((2, 3)), &kernels, 3, 8, None);
    assert_eq!(again.memory, again.expected);
    let got = kinds(&again);
    assert_eq!(
        (got[0], got[2]),
        ((OutcomeKind::Replayed, 3, 1), (OutcomeKind::Replayed, 3, 1))
    );
    assert!(
        matches!(
            got[1],
            (
                OutcomeKind::Declined(
                    DeclineReason::WroteOutsideFootprint | DeclineReason::FootprintUnchecked
                ),
                1,
                1
            )
        ),
        "{got:?}"
    );
}

#[test]
fn a_candidate_whose_memory_an_earlier_member_changed_does_not_join() {
    // The first kernel writes buffer 3 through a stored pointer; the second names buffer 3.
    // It must not join (its capture would take the first's write as its "before"): it gets a
    // window of its own, and the first kernel's own check finds the write.
    let kernels = [
        Kernel::Through { table: 2, src: 0 },
        Kernel::Add { src: 3, dst: 1 },
    ];
    let ran = submit(8104, 4, Some((2, 3)), &kernels, 3, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        kinds(&ran),
        vec![
            (
                OutcomeKind::Declined(DeclineReason::WroteOutsideFootprint),
                1,
                1
            ),
            (OutcomeKind::Replayed, 3, 1)
        ]
    );
    let inputs = inputs_of(&ran, &kernels[1]);
    assert!(inputs.iter().all(|i| i == &inputs[0]));
}

#[test]
fn a_later_member_whose_policy_panics_mid_run_leaves_the_first_passes_result() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 1 },
    ];
    // The second kernel's policy panics before its third pass: the first kernel already ran
    // it, the third has not. Write-set restores end it by writing the first passes' result
    // back; full restores, by restoring everything and running the whole run once more.
    // The same when the first member's policy panics before its third pass.
    for (agent, who, mode, passes) in [
        (8105, 1, RestoreMode::Auto, [3, 2, 2]),
        (8108, 1, RestoreMode::Full, [4, 3, 3]),
        (8109, 0, RestoreMode::Auto, [2, 2, 2]),
        (8110, 0, RestoreMode::Full, [3, 3, 3]),
    ] {
        let panic_at = Some((kernels[who].object(), 2, mode));
        let ran = submit(agent, 3, None, &kernels, 4, 8, panic_at);
        assert_eq!(
            ran.memory, ran.expected,
            "{mode:?}: one execution of the run"
        );
        let got = kinds(&ran);
        assert_eq!(
            got.iter().map(|k| k.0).collect::<Vec<_>>(),
            vec![OutcomeKind::Declined(DeclineReason::PolicyPanicked); 3],
            "{mode:?}: {got:?}"
        );
        assert_eq!(
            got.iter().map(|k| k.1).collect::<Vec<_>>(),
            passes,
            "{mode:?}"
        );
        assert_eq!(ran.log.completions.load(Ordering::SeqCst), 3);
        let (_, first) = &ran.outcomes[0];
        let kind = if mode == RestoreMode::Full {
            RestoreKind::Full
        } else {
            RestoreKind::WriteSet
        };
        assert_eq!(first.restore_mode, Some(kind));
    }
}

#[test]
fn a_joiner_whose_first_pass_policy_panics_still_runs_once_and_the_run_ends_there() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 0 },
    ];
    let ran = submit(
        8106,
        3,
        None,
        &kernels,
        3,
        8,
        Some((kernels[1].object(), 0, RestoreMode::Auto)),
    );
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        kinds(&ran),
        vec![
            (OutcomeKind::Declined(DeclineReason::PolicyPanicked), 1, 2),
            (OutcomeKind::Declined(DeclineReason::PolicyPanicked), 1, 2),
            (OutcomeKind::Replayed, 3, 1)
        ]
    );
}

#[test]
fn without_runs_every_dispatch_has_its_own_window() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
    ];
    let ran = submit(8107, 3, None, &kernels, 3, 1, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 1); 2]);
}

/// The footprint each dispatch's record gives, in submission order.
fn footprints(ran: &Ran) -> Vec<Option<FootprintKind>> {
    ran.outcomes.iter().map(|(_, o)| o.footprint).collect()
}

fn sampled() -> Log {
    Log {
        footprint: FootprintMode::Sampled,
        ..Log::default()
    }
}

#[test]
fn sampled_dispatches_form_runs_checked_until_trusted_then_unchecked() {
    use crate::policy::SAMPLED_TRUST_AFTER;
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
        Kernel::Add { src: 3, dst: 1 },
    ];
    // Every member of a checked run is checked: the run's one watch covers them all, so each
    // kernel earns a clean check per run, the later members included.
    for round in 0..SAMPLED_TRUST_AFTER {
        let ran = submit_to(sampled(), 8121, 6, None, &kernels, 3, 8, None);
        assert_eq!(ran.memory, ran.expected, "round {round}");
        assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 4); 4]);
        assert_eq!(
            footprints(&ran),
            vec![Some(FootprintKind::Arguments); 4],
            "round {round}"
        );
    }
    // Trusted, all four: one unchecked run (no fingerprint read), still one execution.
    let ran = submit_to(sampled(), 8121, 6, None, &kernels, 3, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 4); 4]);
    assert_eq!(footprints(&ran), vec![Some(FootprintKind::Unchecked); 4]);
    assert_eq!(ran.log.footprint_calls.load(Ordering::SeqCst), 4);
    assert!(ran.outcomes.iter().all(|(_, o)| o.watched_bytes == 0));
    for k in &kernels {
        let inputs = inputs_of(&ran, k);
        assert!(
            inputs.len() == 3 && inputs.iter().all(|i| i == &inputs[0]),
            "{k:?}"
        );
    }
}

#[test]
fn an_unchecked_sampled_run_takes_in_only_dispatches_not_due_a_check() {
    use crate::policy::SAMPLED_TRUST_AFTER;
    let trusted = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
    ];
    for _ in 0..SAMPLED_TRUST_AFTER {
        submit_to(sampled(), 8122, 6, None, &trusted, 3, 8, None);
    }
    // A kernel never checked follows the trusted two: the unchecked run ends before it, and
    // its own window checks it.
    let new = Kernel::Add { src: 2, dst: 4 };
    let kernels = [trusted[0], trusted[1], new, trusted[0]];
    let ran = submit_to(sampled(), 8122, 6, None, &kernels, 3, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        kinds(&ran),
        vec![
            (OutcomeKind::Replayed, 3, 2),
            (OutcomeKind::Replayed, 3, 2),
            (OutcomeKind::Replayed, 3, 2),
            (OutcomeKind::Replayed, 3, 2),
        ]
    );
    assert_eq!(
        footprints(&ran),
        vec![
            Some(FootprintKind::Unchecked),
            Some(FootprintKind::Unchecked),
            // The new kernel's checked run takes in a trusted one: checked as its member.
            Some(FootprintKind::Arguments),
            Some(FootprintKind::Arguments),
        ]
    );
    // A dispatch whose policy asks for `arguments` never rides an unchecked run either.
    let log = Log {
        checked: Some(trusted[1].object()),
        ..sampled()
    };
    let ran = submit_to(log, 8122, 6, None, &trusted, 3, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        (kinds(&ran), footprints(&ran)),
        (
            vec![(OutcomeKind::Replayed, 3, 1); 2],
            vec![
                Some(FootprintKind::Unchecked),
                Some(FootprintKind::Arguments)
            ]
        )
    );
    assert_eq!(
        ran.log.footprint_calls.load(Ordering::SeqCst),
        2,
        "offered and not taken, the second dispatch's policy was still asked once"
    );
}

#[test]
fn all_footprint_dispatches_form_runs_that_capture_allocations_made_since() {
    // The second kernel writes buffer 3 through the pointer buffer 2 holds; no argument names
    // it. With every allocation captured there is nothing to check: one run of three, each
    // pass from its own inputs, one execution.
    let all = || Log {
        footprint: FootprintMode::All,
        ..Log::default()
    };
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Through { table: 2, src: 1 },
        Kernel::Add { src: 3, dst: 4 },
    ];
    let ran = submit_to(all(), 8123, 5, Some((2, 3)), &kernels, 3, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 3); 3]);
    assert_eq!(footprints(&ran), vec![Some(FootprintKind::All); 3]);
    for k in &kernels {
        let inputs = inputs_of(&ran, k);
        assert!(inputs.iter().all(|i| i == &inputs[0]), "{k:?}");
    }
    // Buffer 3 is allocated while the first pass runs, after the run's capture: the member
    // that joins captures it too (every allocation its snapshot does not hold), so the
    // writes through the stored pointer are restored between passes, not repeated.
    let log = Log {
        late: Some(3),
        agent: 8124,
        ..all()
    };
    let ran = submit_to(log, 8124, 5, Some((2, 3)), &kernels, 3, 8, None);
    assert!(ran.log.late_recorded.load(Ordering::SeqCst));
    assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 3); 3]);
    assert_eq!(ran.memory, ran.expected, "one execution, buffer 3 included");
    let last = inputs_of(&ran, &kernels[2]);
    assert!(last.iter().all(|i| i == &last[0]), "{last:?}");
}

/// A log whose targets queue later passes; `stuck`: a kernel whose queued pass never ends.
fn queuing(stuck: Option<&Kernel>) -> Log {
    Log {
        split: true,
        stuck: stuck.map(Kernel::object),
        ..Log::default()
    }
}

#[test]
fn queued_later_passes_of_a_run_start_from_their_own_inputs_and_leave_one_execution() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
        Kernel::Add { src: 3, dst: 1 },
    ];
    // Restores waited for, then queued in front of the passes (each restore in the queue
    // with the four passes behind it).
    for (agent, queue_restores) in [(8111, false), (8115, true)] {
        let log = Log {
            queue_restores,
            ..queuing(None)
        };
        let ran = submit_to(log, agent, 5, None, &kernels, 3, 8, None);
        assert_eq!(ran.memory, ran.expected, "one execution of the four");
        assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 4); 4]);
        for k in &kernels {
            let inputs = inputs_of(&ran, k);
            assert_eq!(inputs.len(), 3, "{k:?}");
            assert!(
                inputs.iter().all(|i| i == &inputs[0]),
                "{k:?} saw other inputs in a later pass (queued restores: {queue_restores})"
            );
        }
        assert_eq!(
            ran.log.deepest.load(Ordering::SeqCst),
            4,
            "the four members' passes were queued together"
        );
        assert_eq!(
            ran.log.restores_queued.load(Ordering::SeqCst),
            if queue_restores { 2 } else { 0 },
            "the restores before passes 2 and 3"
        );
        assert_eq!(
            ran.log.unpinned_restores.load(Ordering::SeqCst),
            0,
            "a queued restore ran with its memory unpinned"
        );
        assert!(ran.log.queued.lock().is_empty());
        for (_, o) in &ran.outcomes {
            assert_eq!(o.pass_times.len(), 3, "{o:?}");
        }
    }
}

#[test]
fn a_queued_restore_that_never_ends_fails_the_run_and_nothing_waits_twice() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 0 },
    ];
    let log = Log {
        queue_restores: true,
        stuck_restore: true,
        ..queuing(None)
    };
    let ran = submit_to(log, 8116, 4, None, &kernels, 3, 8, None);
    let got = kinds(&ran);
    assert_eq!(
        got,
        vec![
            // The first member's pass 2 never started: the restore before it is stuck.
            (OutcomeKind::Failed(FailureReason::RestoreStuck), 2, 3),
            // The others' passes queued behind it are abandoned, never waited for.
            (OutcomeKind::Failed(FailureReason::PassStuck), 2, 3),
            (OutcomeKind::Failed(FailureReason::PassStuck), 2, 3),
        ],
    );
    let mut abandoned = ran.log.abandoned.lock().clone();
    abandoned.sort_unstable();
    let mut behind = vec![kernels[1].object(), kernels[2].object()];
    behind.sort_unstable();
    assert_eq!(abandoned, behind);
    assert_eq!(
        ran.log.completions.load(Ordering::SeqCst),
        3,
        "every completion given"
    );
}

#[test]
fn a_queued_pass_whose_policy_panics_ends_the_run_after_the_passes_before_it_ran() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 1 },
    ];
    // The third kernel's policy panics before its third pass: the second's pass is queued
    // by then and must run (and be collected) before the run ends.
    for (agent, mode, passes) in [
        (8112, RestoreMode::Auto, [3, 3, 2]),
        (8113, RestoreMode::Full, [4, 4, 3]),
    ] {
        let panic_at = Some((kernels[2].object(), 2, mode));
        let ran = submit_to(queuing(None), agent, 3, None, &kernels, 4, 8, panic_at);
        assert_eq!(ran.memory, ran.expected, "{mode:?}: one execution");
        let got = kinds(&ran);
        assert!(
            got.iter()
                .all(|k| k.0 == OutcomeKind::Declined(DeclineReason::PolicyPanicked)),
            "{mode:?}: {got:?}"
        );
        assert_eq!(
            got.iter().map(|k| k.1).collect::<Vec<_>>(),
            passes,
            "{mode:?}"
        );
        assert!(
            ran.log.queued.lock().is_empty(),
            "{mode:?}: a pass left queued"
        );
    }
}

#[test]
fn passes_queued_behind_a_stuck_pass_are_abandoned_not_waited_for() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
        Kernel::Add { src: 3, dst: 0 },
    ];
    let ran = submit_to(
        queuing(Some(&kernels[2])),
        8114,
        4,
        None,
        &kernels,
        3,
        8,
        None,
    );
    let got = kinds(&ran);
    assert_eq!(
        got.iter().map(|k| k.0).collect::<Vec<_>>(),
        vec![OutcomeKind::Failed(FailureReason::PassStuck); 4],
        "{got:?}"
    );
    assert_eq!(
        *ran.log.abandoned.lock(),
        vec![kernels[3].object()],
        "the pass behind the stuck one is abandoned"
    );
    assert_eq!(
        ran.log.completions.load(Ordering::SeqCst),
        4,
        "every completion given"
    );
}

/// A log whose targets queue later passes and restores, ahead where `ahead`.
fn queued_restores(ahead: bool, stuck: Option<&Kernel>) -> Log {
    Log {
        queue_restores: true,
        ahead,
        ..queuing(stuck)
    }
}

#[test]
fn passes_queued_ahead_start_from_their_own_inputs_and_leave_one_execution() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
        Kernel::Add { src: 3, dst: 1 },
    ];
    for (agent, mode) in [(8117, RestoreMode::Auto), (8118, RestoreMode::Full)] {
        let panic_never = Some((u64::MAX, 0, mode));
        let ran = submit_to(
            queued_restores(true, None),
            agent,
            5,
            None,
            &kernels,
            4,
            8,
            panic_never,
        );
        assert_eq!(
            ran.memory, ran.expected,
            "{mode:?}: one execution of the four"
        );
        assert_eq!(
            kinds(&ran),
            vec![(OutcomeKind::Replayed, 4, 4); 4],
            "{mode:?}"
        );
        for k in &kernels {
            let inputs = inputs_of(&ran, k);
            assert_eq!(inputs.len(), 4, "{mode:?} {k:?}");
            assert!(
                inputs.iter().all(|i| i == &inputs[0]),
                "{mode:?}: {k:?} saw other inputs in a later pass"
            );
        }
        // Passes 2, 3 and 4 of the four members, all queued before the first was collected,
        // each behind its restore.
        assert_eq!(ran.log.deepest.load(Ordering::SeqCst), 12, "{mode:?}");
        assert_eq!(
            ran.log.restores_queued.load(Ordering::SeqCst),
            3,
            "{mode:?}"
        );
        assert_eq!(
            ran.log.unpinned_restores.load(Ordering::SeqCst),
            0,
            "{mode:?}: a queued restore ran with its memory unpinned"
        );
        assert!(ran.log.queued.lock().is_empty());
        // Each member's `on_pass` of passes 2..4 came before the first of their `on_pass_end`s,
        // which followed in order.
        let calls = ran.log.calls.lock().clone();
        for k in &kernels {
            let mine: Vec<(u32, bool)> = calls
                .iter()
                .filter(|c| c.0 == k.object())
                .map(|c| (c.1, c.2))
                .collect();
            assert_eq!(
                mine,
                vec![
                    (0, true),
                    (0, false),
                    (1, true),
                    (2, true),
                    (3, true),
                    (1, false),
                    (2, false),
                    (3, false)
                ],
                "{mode:?} {k:?}"
            );
        }
        for (_, o) in &ran.outcomes {
            assert_eq!(o.pass_times.len(), 4, "{o:?}");
        }
    }
}

#[test]
fn without_the_policy_s_consent_passes_alternate_with_their_ends() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
    ];
    let ran = submit_to(
        queued_restores(false, None),
        8119,
        3,
        None,
        &kernels,
        4,
        8,
        None,
    );
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        ran.log.deepest.load(Ordering::SeqCst),
        2,
        "one pass index at a time"
    );
    let calls = ran.log.calls.lock().clone();
    for k in &kernels {
        let mine: Vec<(u32, bool)> = calls
            .iter()
            .filter(|c| c.0 == k.object())
            .map(|c| (c.1, c.2))
            .collect();
        let alternating: Vec<(u32, bool)> = (0..4).flat_map(|p| [(p, true), (p, false)]).collect();
        assert_eq!(mine, alternating, "{k:?}");
    }
}

#[test]
fn a_policy_panic_among_passes_queued_ahead_leaves_one_execution_and_nothing_queued() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 1 },
    ];
    // The first member's `on_pass` of its third pass, then a later member's.
    for (agent, at, mode) in [
        (8120, 0, RestoreMode::Auto),
        (8121, 0, RestoreMode::Full),
        (8122, 1, RestoreMode::Auto),
        (8123, 2, RestoreMode::Full),
    ] {
        let panic_at = Some((kernels[at].object(), 2, mode));
        let ran = submit_to(
            queued_restores(true, None),
            agent,
            3,
            None,
            &kernels,
            5,
            8,
            panic_at,
        );
        assert_eq!(ran.memory, ran.expected, "{at} {mode:?}: one execution");
        assert!(
            kinds(&ran)
                .iter()
                .all(|k| k.0 == OutcomeKind::Declined(DeclineReason::PolicyPanicked)),
            "{at} {mode:?}: {:?}",
            kinds(&ran)
        );
        assert!(
            ran.log.queued.lock().is_empty(),
            "{at} {mode:?}: something left queued"
        );
        assert_eq!(ran.log.completions.load(Ordering::SeqCst), 3);
    }
}

#[test]
fn passes_queued_ahead_behind_a_stuck_one_or_a_stuck_restore_are_abandoned() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
    ];
    // A member's pass that never ends: everything queued behind it is abandoned, never
    // waited for (passes 3 and 4 of every member included).
    let ran = submit_to(
        queued_restores(true, Some(&kernels[1])),
        8124,
        4,
        None,
        &kernels,
        4,
        8,
        None,
    );
    let got = kinds(&ran);
    assert_eq!(
        got.iter().map(|k| k.0).collect::<Vec<_>>(),
        vec![OutcomeKind::Failed(FailureReason::PassStuck); 3],
        "{got:?}"
    );
    assert_eq!(
        ran.log.abandoned.lock().len(),
        // Pass 2: the third member; passes 3 and 4: all three.
        1 + 3 + 3,
        "{:?}",
        ran.log.abandoned.lock()
    );
    assert_eq!(ran.log.completions.load(Ordering::SeqCst), 3);
    // A restore that never ends: the first member's record names it.
    let ran = submit_to(
        Log {
            stuck_restore: true,
            ..queued_restores(true, None)
        },
        8125,
        4,
        None,
        &kernels,
        4,
        8,
        None,
    );
    let got = kinds(&ran);
    assert_eq!(got[0].0, OutcomeKind::Failed(FailureReason::RestoreStuck));
    assert!(
        got[1..]
            .iter()
            .all(|k| k.0 == OutcomeKind::Failed(FailureReason::PassStuck)),
        "{got:?}"
    );
    assert_eq!(ran.log.completions.load(Ordering::SeqCst), 3);
}

/// Three SQ counters (two per pass: two counter passes) and one of GRBM.
fn metric_set(names: &[&str]) -> Arc<MetricSet> {
    let catalog = CounterCatalog::new("gfx90a")
        .block("SQ", 2)
        .block("GRBM", 2)
        .counter("SQ_WAVES", "SQ", 4)
        .counter("SQ_ITEMS", "SQ", 14)
        .counter("SQ_WAVES_EQ_64", "SQ", 6)
        .counter("GRBM_COUNT", "GRBM", 0);
    Arc::new(MetricSet::new(&catalog, names).unwrap())
}

/// What [`Fake::member_counter_values`] reports for `kernel` reading `input`, metric `i` of
/// its counter pass.
fn counted(kernel: &Kernel, input: &[u64], i: u64) -> u64 {
    kernel.object() * 1_000_000 + (input[1] % 1000) * 10 + i
}

const FOUR: [&str; 4] = ["SQ_WAVES", "SQ_ITEMS", "GRBM_COUNT", "SQ_WAVES_EQ_64"];

/// A log whose policies ask for [`FOUR`] (two counter passes) on a backend whose counter pass
/// measures `ranges` dispatches.
fn counting_log(ranges: u32) -> Log {
    Log {
        metrics: Some(metric_set(&FOUR)),
        counter_ranges: ranges,
        ..Log::default()
    }
}

/// Each dispatch's `metric` (position `i` in its counter pass) is its own kernel's, on the
/// inputs its first pass had.
fn assert_own_values(ran: &Ran, kernels: &[Kernel], metric: &str, i: u64) {
    for (n, k) in kernels.iter().enumerate() {
        let inputs = inputs_of(ran, k);
        let v = ran.outcomes[n].1.metrics.values().cloned().unwrap();
        assert_eq!(
            v.get(metric).map(|m| m.value),
            Some(counted(k, &inputs[0], i)),
            "{k:?}"
        );
    }
}

#[test]
fn a_counter_run_measures_each_member_in_a_range_of_its_own_in_every_counter_pass() {
    // A chain: each kernel reads what the one before wrote, so each member's counter passes
    // must see its own inputs (the run's earlier members' results), not the run's.
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
    ];
    let log = counting_log(8);
    // Counters only: the application's pass, then the two counter passes.
    let ran = submit_to(log, 8201, 4, None, &kernels, 1, 8, None);
    assert_eq!(ran.memory, ran.expected, "one execution of the three");
    assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 3); 3]);
    // Each counter pass: the first member armed, its pass; the others armed, run and ended
    // in order inside it; then the first member's pass ends.
    let [a, b, c] = kernels.map(|k| k.object());
    let pass = |p: u32| {
        [
            format!("arm {p} {a:x}"),
            format!("arm {p} {b:x}"),
            format!("end {b:x}"),
            format!("arm {p} {c:x}"),
            format!("end {c:x}"),
            format!("end {a:x}"),
        ]
    };
    assert_eq!(*ran.log.counting.lock(), [pass(0), pass(1)].concat());
    for (n, k) in kernels.iter().enumerate() {
        let inputs = inputs_of(&ran, k);
        assert_eq!(
            inputs.len(),
            3,
            "{k:?}: its own pass and two counter passes"
        );
        assert!(inputs.iter().all(|i| i == &inputs[0]), "{k:?}");
        let (object, outcome) = &ran.outcomes[n];
        assert_eq!(*object, k.object());
        assert_eq!(outcome.inputs_restored, Some(true), "{outcome:?}");
        let Metrics::Values(v) = &outcome.metrics else {
            panic!("{k:?}: {:?}", outcome.metrics)
        };
        // Its own kernel and its own inputs: pass 1 holds SQ_WAVES, SQ_ITEMS, GRBM_COUNT;
        // pass 2 SQ_WAVES_EQ_64.
        let at = |name: &str| v.get(name).map(|m| (m.value, m.pass));
        assert_eq!(at("SQ_WAVES"), Some((counted(k, &inputs[0], 0), 1)));
        assert_eq!(at("SQ_ITEMS"), Some((counted(k, &inputs[0], 1), 1)));
        assert_eq!(at("GRBM_COUNT"), Some((counted(k, &inputs[0], 2), 1)));
        assert_eq!(at("SQ_WAVES_EQ_64"), Some((counted(k, &inputs[0], 0), 2)));
    }
    assert_eq!(ran.log.completions.load(Ordering::SeqCst), 3);
}

#[test]
fn counter_windows_keep_to_themselves_where_a_counter_pass_measures_one_dispatch() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
    ];
    let log = counting_log(1);
    let ran = submit_to(log, 8202, 3, None, &kernels, 1, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(kinds(&ran), vec![(OutcomeKind::Replayed, 3, 1); 2]);
    let [a, b] = kernels.map(|k| k.object());
    assert_eq!(
        *ran.log.counting.lock(),
        [
            format!("arm 0 {a:x}"),
            format!("end {a:x}"),
            format!("arm 1 {a:x}"),
            format!("end {a:x}"),
            format!("arm 0 {b:x}"),
            format!("end {b:x}"),
            format!("arm 1 {b:x}"),
            format!("end {b:x}"),
        ]
    );
    assert_own_values(&ran, &kernels, "SQ_WAVES", 0);
}

#[test]
fn a_counter_run_takes_no_more_members_than_a_counter_pass_has_ranges() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 0 },
    ];
    let log = counting_log(2);
    let ran = submit_to(log, 8203, 3, None, &kernels, 1, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        kinds(&ran),
        vec![
            (OutcomeKind::Replayed, 3, 2),
            (OutcomeKind::Replayed, 3, 2),
            (OutcomeKind::Replayed, 3, 1)
        ]
    );
    assert_own_values(&ran, &kernels, "SQ_ITEMS", 1);
}

#[test]
fn a_dispatch_with_another_metric_set_or_none_does_not_join_a_counter_run() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
    ];
    let log = Log {
        other_metrics: Some((kernels[1].object(), metric_set(&["GRBM_COUNT"]))),
        ..counting_log(8)
    };
    let ran = submit_to(log, 8204, 4, None, &kernels, 1, 8, None);
    assert_eq!(ran.memory, ran.expected);
    // The second's set differs: the first keeps to itself; the second's run cannot take
    // the third (its set differs again).
    assert_eq!(
        kinds(&ran),
        vec![
            (OutcomeKind::Replayed, 3, 1),
            (OutcomeKind::Replayed, 2, 1),
            (OutcomeKind::Replayed, 3, 1)
        ]
    );
    let grbm = ran.outcomes[1].1.metrics.values().cloned().unwrap();
    assert!(grbm.get("SQ_WAVES").is_none() && grbm.get("GRBM_COUNT").is_some());
    // A run without counters takes no member that collects them, and the other way round.
    let log = Log {
        metrics: None,
        other_metrics: Some((kernels[1].object(), metric_set(&FOUR))),
        counter_ranges: 8,
        ..Log::default()
    };
    let ran = submit_to(log, 8205, 4, None, &kernels, 3, 8, None);
    assert_eq!(ran.memory, ran.expected);
    assert_eq!(
        kinds(&ran),
        vec![
            (OutcomeKind::Replayed, 3, 1),
            (OutcomeKind::Replayed, 5, 1),
            (OutcomeKind::Replayed, 3, 1)
        ]
    );
}

#[test]
fn a_counter_pass_that_stops_at_a_later_member_leaves_one_execution_and_no_values() {
    let kernels = [
        Kernel::Add { src: 0, dst: 1 },
        Kernel::Add { src: 1, dst: 2 },
        Kernel::Add { src: 2, dst: 3 },
    ];
    for restore in [RestoreMode::Auto, RestoreMode::Full] {
        let log = Log {
            refuse_counted: Some(kernels[1].object()),
            ..counting_log(8)
        };
        // `panic_at` only for the restore mode: no policy panics (kernel 0 has no pass 9).
        let ran = submit_to(log, 8206, 4, None, &kernels, 1, 8, Some((0, 9, restore)));
        assert_eq!(
            ran.memory, ran.expected,
            "{restore:?}: one execution of the run"
        );
        for (_, o) in &ran.outcomes {
            assert_eq!(o.run, 3, "{restore:?}: {o:?}");
            assert_eq!(
                o.kind,
                OutcomeKind::Declined(DeclineReason::SubmitFailed),
                "{restore:?}"
            );
            assert!(
                matches!(&o.metrics, Metrics::Absent(_)),
                "{restore:?}: no member has values of a pass that did not measure them all: {:?}",
                o.metrics
            );
        }
    }
}
