//! The tool-facing contract: [`ReplayPolicy`] and the types its callbacks see.
//!
//! # How the reference semantics map to Rust
//!
//! | reference (rocprofiler-sdk) | rocprof-replay |
//! |---|---|
//! | `replay_pass_count` | [`ReplayPolicy::pass_count`]: returns the [`PassPlan`] and creates the per-dispatch state |
//! | `replay_continue` | [`ReplayPolicy::should_continue`]: consulted after each completed pass but the last allowed one, by a consulting plan only |
//! | PASS ENTER / PASS EXIT | [`ReplayPolicy::on_pass`] / [`ReplayPolicy::on_pass_end`] |
//! | `replay_pass_count` left NULL | `pass_count` returns [`PassPlan::Skip`]: not replayed, no snapshot |
//! | returns 1 | a plan with 1 pass (or 0 for [`PassPlan::exactly`]): not replayed, no snapshot |
//! | returns N > 1, no continue callback | [`PassPlan::exactly`]`(N, state)`: exactly N passes, `should_continue` never consulted |
//! | returns N > 1 with a continue callback | [`PassPlan::up_to`]`(N, state)`: up to N passes, `should_continue` may stop early |
//! | returns 0 with a continue callback | [`PassPlan::until`]`(state)`: until `should_continue` says stop, capped at [`MAX_OPEN_ENDED_PASSES`] |
//! | returns 0 without one | does not build: a consulting plan of a policy that does not implement `should_continue` is a compile-time error (below) |
//!
//! # The continue decision: a trait method, checked when the tool is built
//!
//! [`should_continue`](ReplayPolicy::should_continue) is a method of the trait, like the
//! reference's `replay_continue`, so it can read the policy's settings (`&self`), the
//! dispatch, the per-dispatch state and the number of completed passes. The plan says whether
//! it is consulted: [`PassPlan::exactly`] never consults it, [`PassPlan::up_to`] and
//! [`PassPlan::until`] consult it after every completed pass but the last allowed one. So a
//! tool that implements `should_continue` and returns a consulting plan always has it asked;
//! nothing else in the engine decides to skip it.
//!
//! The other direction — a consulting plan from a policy that does *not* implement
//! `should_continue` — is rejected when the tool is built, with no declaration to write:
//!
//! - `should_continue` has a default body (so the 90% case, `PassPlan::exactly(5, ())`, writes
//!   nothing for it), but that body refers to an associated constant whose evaluation fails
//!   with the message "this policy returns a consulting plan ... but does not implement
//!   `ReplayPolicy::should_continue`". Rust evaluates such a constant only for the
//!   instantiations that are actually used.
//! - The only place that uses `P::should_continue` is [`PassPlan::up_to`] / [`PassPlan::until`]:
//!   they store it in the plan (in a [`Consults`] value, which nothing else can make) and the
//!   engine calls what the plan carries. So the default body is instantiated — and the build
//!   fails, naming the policy type (`MissingShouldContinue::<Tool>`) — exactly when a policy
//!   that kept the default builds a consulting plan; a policy that overrides the method never
//!   instantiates the default, and one that only returns `exactly` plans never instantiates
//!   either.
//!
//! Why not a declaration (an associated type or const stating "this policy decides", with the
//! consulting constructors bounded on it): associated type defaults are not stable Rust, so
//! every policy would have to write `type Continuation = Fixed;`, and an associated const
//! cannot bound a constructor; both would also check the *declaration*, not the method — a
//! policy could declare the decision and forget to implement it. Here the implementation
//! itself is what is checked. The costs: the error is reported by `cargo build` and `cargo
//! test`, not by `cargo check` or an editor, which stop before constants of generic code are
//! evaluated; and it is reported where the policy is used — exported by
//! [`#[rocprof_tool]`](crate::rocprof_tool), run by [`testing::simulate`](crate::testing::simulate),
//! its `pass_count` called — which every tool is before it can run. The message names the
//! policy (`MissingShouldContinue::<Tool>`, "while instantiating `<Tool as
//! ReplayPolicy>::should_continue`"); `tests/ui/fail/*_without_should_continue.rs` hold it.
//!
//! User data: the reference copies a `user_data` union per pass. Here the per-dispatch state is
//! the typed [`ReplayPolicy::State`], created by `pass_count` together with the plan:
//!
//! | observed from | reference value | rocprof-replay |
//! |---|---|---|
//! | `replay_pass_count` | the CONFIG ENTER value | the state does not exist yet: `pass_count` creates it |
//! | PASS ENTER | the CONFIG value, every pass | `on_pass(&mut State, &mut PassState)`: the per-dispatch state as left by earlier callbacks, and a fresh `PassState::default()` |
//! | PASS EXIT | what PASS ENTER of the same pass wrote | `on_pass_end(&mut State, &mut PassState)`: the same `PassState` value `on_pass` wrote |
//! | `replay_continue` | the CONFIG value | `should_continue(&DispatchInfo, &State, completed)`: the per-dispatch state (mutations made in pass callbacks are visible, as through the reference's `ptr`) |
//! | CONFIG EXIT | the CONFIG value | `on_end(State, &Outcome)`: the state by value, dropped afterwards |
//!
//! A pass's `PassState` is dropped when the pass ends, so nothing in it leaks into the next
//! pass; anything that must influence `should_continue` belongs in `State`. A
//! [`PassGuard`] kept in the `PassState` ends its context override when the pass ends.

use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

use crate::context::{Context, LoopContexts, PassGuard};
use crate::dispatch::DispatchInfo;

/// Most passes an open-ended ([`PassPlan::Until`]) replay may run.
pub const MAX_OPEN_ENDED_PASSES: u32 = 1000;

/// Most passes any plan may ask for; a larger [`PassPlan::Exactly`] or [`PassPlan::UpTo`] is
/// declined ([`DeclineReason::TooManyPasses`]) and the dispatch runs once.
pub const MAX_PASSES: u32 = 10_000;

/// The decision a consulting plan ([`PassPlan::UpTo`], [`PassPlan::Until`]) carries: the
/// policy's [`should_continue`](ReplayPolicy::should_continue).
///
/// Only [`PassPlan::up_to`] and [`PassPlan::until`] make one, which is what makes a consulting
/// plan of a policy without `should_continue` fail to build (see the [module
/// docs](self#the-continue-decision-a-trait-method-checked-when-the-tool-is-built)).
pub struct Consults<P: ReplayPolicy + ?Sized> {
    decide: fn(&P, &DispatchInfo, &P::State, u32) -> bool,
}

impl<P: ReplayPolicy + ?Sized> Consults<P> {
    fn of_policy() -> Self {
        Consults {
            decide: P::should_continue,
        }
    }

    /// Asks the policy whether another pass runs after `completed` passes.
    pub(crate) fn ask(
        &self,
        policy: &P,
        info: &DispatchInfo,
        state: &P::State,
        completed: u32,
    ) -> bool {
        (self.decide)(policy, info, state, completed)
    }
}

/// Evaluated only when a policy that kept the default
/// [`should_continue`](ReplayPolicy::should_continue) builds a consulting plan: the build fails
/// with this message, naming the policy as the type parameter.
pub(crate) struct MissingShouldContinue<P: ?Sized>(PhantomData<P>);

impl<P: ?Sized> MissingShouldContinue<P> {
    pub(crate) const ERROR: () = panic!(
        "this policy returns a consulting plan (`PassPlan::up_to` or `PassPlan::until`) but does \
         not implement `ReplayPolicy::should_continue`, which such a plan asks after every pass: \
         implement `should_continue`, or return `PassPlan::exactly(n, state)` for a fixed \
         number of passes"
    );
}

/// How many times to run a dispatch, with the per-dispatch state that lives until the end.
///
/// `P` is the policy the plan came from (`fn pass_count(&self, ..) -> PassPlan<Self>`); the
/// state is its [`State`](ReplayPolicy::State). Build one with [`skip`](Self::skip),
/// [`exactly`](Self::exactly) (a fixed number of passes), or [`up_to`](Self::up_to) and
/// [`until`](Self::until) (consulting plans: [`ReplayPolicy::should_continue`] decides after
/// each pass). Match on the variants in tests (`PassPlan::Exactly { passes: 5, .. }`).
pub enum PassPlan<P: ReplayPolicy + ?Sized> {
    /// Do not replay: the dispatch runs once, the ordinary way, with no snapshot.
    Skip,
    /// Run exactly `passes` times (0 or 1 means: do not replay); never consults
    /// [`should_continue`](ReplayPolicy::should_continue).
    Exactly {
        /// Number of passes.
        passes: u32,
        /// Per-dispatch state.
        state: P::State,
    },
    /// Run at most `passes` times (0 or 1 means: do not replay);
    /// [`should_continue`](ReplayPolicy::should_continue) may stop earlier.
    UpTo {
        /// Upper bound on passes.
        passes: u32,
        /// Per-dispatch state.
        state: P::State,
        /// The continue decision (made by [`PassPlan::up_to`] only).
        decision: Consults<P>,
    },
    /// Run until [`should_continue`](ReplayPolicy::should_continue) returns false, at most
    /// [`MAX_OPEN_ENDED_PASSES`] times.
    Until {
        /// Per-dispatch state.
        state: P::State,
        /// The continue decision (made by [`PassPlan::until`] only).
        decision: Consults<P>,
    },
}

impl<P: ReplayPolicy + ?Sized> std::fmt::Debug for PassPlan<P>
where
    P::State: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassPlan::Skip => f.write_str("Skip"),
            PassPlan::Exactly { passes, state } => f
                .debug_struct("Exactly")
                .field("passes", passes)
                .field("state", state)
                .finish(),
            PassPlan::UpTo { passes, state, .. } => f
                .debug_struct("UpTo")
                .field("passes", passes)
                .field("state", state)
                .finish_non_exhaustive(),
            PassPlan::Until { state, .. } => f
                .debug_struct("Until")
                .field("state", state)
                .finish_non_exhaustive(),
        }
    }
}

impl<P: ReplayPolicy + ?Sized> PassPlan<P> {
    /// [`PassPlan::Skip`]: the dispatch runs once, the ordinary way.
    pub fn skip() -> Self {
        PassPlan::Skip
    }

    /// [`PassPlan::Exactly`]: `passes` passes, no early stop;
    /// [`should_continue`](ReplayPolicy::should_continue) is never consulted.
    pub fn exactly(passes: u32, state: P::State) -> Self {
        PassPlan::Exactly { passes, state }
    }

    /// [`PassPlan::UpTo`]: at most `passes` passes; after each completed pass but the last,
    /// [`should_continue`](ReplayPolicy::should_continue)`(info, &state, completed)` decides
    /// whether another one runs. The policy must implement `should_continue`, or it does not
    /// build (see the [module docs](self#the-continue-decision-a-trait-method-checked-when-the-tool-is-built)).
    ///
    /// ```
    /// use rocprof_replay::{DispatchInfo, PassPlan, PassReport, ReplayPolicy};
    /// use std::time::Duration;
    ///
    /// /// Up to 20 passes; stops once 3 passes took under `fast` each.
    /// struct UntilThreeFast { fast: Duration }
    ///
    /// impl ReplayPolicy for UntilThreeFast {
    ///     type State = u32; // fast passes so far
    ///     type PassState = ();
    ///     fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
    ///         PassPlan::up_to(20, 0)
    ///     }
    ///     fn on_pass_end(&self, pass: &PassReport<'_>, fast: &mut u32, _: &mut ()) {
    ///         *fast += u32::from(pass.kernel_time.is_some_and(|t| t < self.fast));
    ///     }
    ///     // Sees the state as `on_pass_end` left it.
    ///     fn should_continue(&self, _: &DispatchInfo, fast: &u32, _completed: u32) -> bool {
    ///         *fast < 3
    ///     }
    /// }
    /// ```
    pub fn up_to(passes: u32, state: P::State) -> Self {
        PassPlan::UpTo {
            passes,
            state,
            decision: Consults::of_policy(),
        }
    }

    /// [`PassPlan::Until`]: open-ended; after each completed pass
    /// [`should_continue`](ReplayPolicy::should_continue)`(info, &state, completed)` decides
    /// whether another one runs, and at most [`MAX_OPEN_ENDED_PASSES`] run. The policy must
    /// implement `should_continue`, as for [`up_to`](Self::up_to).
    pub fn until(state: P::State) -> Self {
        PassPlan::Until {
            state,
            decision: Consults::of_policy(),
        }
    }
}

/// A kernel-replay policy: decides how often each dispatch runs and what happens per pass.
///
/// The engine calls every method on the thread that submitted the dispatch, inside the
/// replay window (`on_end` after it), so keep them short; a panic in any of them is caught, reported, and ends
/// replay of that dispatch safely (outcome `declined`, reason `policy_panicked`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `ReplayPolicy`",
    label = "`#[rocprof_tool]` exports a `ReplayPolicy`",
    note = "add `impl rocprof_replay::ReplayPolicy for {Self}` (`pass_count` is the one required method)"
)]
pub trait ReplayPolicy: Send + Sync + 'static {
    /// Per-dispatch state: created by [`pass_count`](Self::pass_count), visible to every
    /// callback of the dispatch, handed to [`on_end`](Self::on_end) and dropped.
    type State: Send + 'static;

    /// Per-pass state: a fresh `Default` value at each pass start, seen by
    /// [`on_pass`](Self::on_pass) and [`on_pass_end`](Self::on_pass_end) of that pass only.
    type PassState: Default + Send + 'static;

    /// Decides how this dispatch is replayed and creates its state: [`PassPlan::exactly`] for
    /// a fixed number of passes, [`PassPlan::up_to`] or [`PassPlan::until`] to have
    /// [`should_continue`](Self::should_continue) decide after each pass.
    fn pass_count(&self, info: &DispatchInfo) -> PassPlan<Self>;

    /// The continue decision of a consulting plan ([`PassPlan::up_to`], [`PassPlan::until`]):
    /// called after each completed pass but the last allowed one, with the dispatch, the
    /// per-dispatch state (as the pass callbacks left it) and the number of passes completed;
    /// `false` stops the loop, and the application sees the last pass's result. Never called
    /// for [`PassPlan::exactly`].
    ///
    /// Implement it if and only if `pass_count` returns consulting plans: a policy that keeps
    /// this default and builds one does not compile (the build fails in
    /// `MissingShouldContinue::<YourPolicy>`; see the [module
    /// docs](crate::policy#the-continue-decision-a-trait-method-checked-when-the-tool-is-built)).
    fn should_continue(&self, info: &DispatchInfo, state: &Self::State, completed: u32) -> bool {
        let _ = (info, state, completed);
        let () = MissingShouldContinue::<Self>::ERROR;
        false
    }

    /// Called at the start of every pass, before the kernel runs.
    fn on_pass(&self, pass: &mut Pass<'_>, state: &mut Self::State, scope: &mut Self::PassState) {
        let _ = (pass, state, scope);
    }

    /// Called after every pass's kernel finished, with its measurements. Each dispatch's
    /// `on_pass` and `on_pass_end` alternate, pass after pass — unless the policy lets its
    /// passes be queued ahead ([`passes_ahead`](Self::passes_ahead)); when consecutive
    /// dispatches share a window ([`Outcome::run`]), a dispatch's `on_pass_end` may come after
    /// the other dispatches' `on_pass` of the same pass (their passes were queued together;
    /// each kernel still ran with its own dispatch's contexts).
    fn on_pass_end(
        &self,
        pass: &PassReport<'_>,
        state: &mut Self::State,
        scope: &mut Self::PassState,
    ) {
        let _ = (pass, state, scope);
    }

    /// Called once per dispatch the policy created state for, after the last pass (or the
    /// single ordinary run when replay was declined).
    ///
    /// Keep it cheap: it runs on the application's submitting thread before the application
    /// sees its completion (formatting one line is fine; blocking I/O is not). Everything it
    /// needs to report is in `outcome` (pass times included) and the
    /// [`Display`](std::fmt::Display) implementations of [`Outcome`] and [`DispatchInfo`] format
    /// it.
    fn on_end(&self, info: &DispatchInfo, state: Self::State, outcome: &Outcome) {
        let _ = (info, state, outcome);
    }

    /// Called once per GPU agent when the backend first sees it (the HSA backend: at
    /// `OnLoad`), with the hardware counters the agent offers or why it offers none. Build the
    /// tool's [`MetricSet`](crate::counters::MetricSet)s here
    /// ([`MetricSets::validate`](crate::counters::MetricSets::validate)): an unknown name is an
    /// error naming the closest valid ones, at set-up. The default ignores it.
    fn on_agent(&self, agent: u32, counters: Result<&crate::counters::CounterCatalog, &str>) {
        let _ = (agent, counters);
    }

    /// The hardware counters to collect for this dispatch (called once, after
    /// [`pass_count`](Self::pass_count), for dispatches it did not skip), or `None` (the
    /// default). The engine runs [`MetricSet::pass_count`](crate::counters::MetricSet::pass_count)
    /// counter passes after the policy's own passes (a plan of 0 or 1 pass then replays with
    /// 1 + those), each from restored inputs with its counter configuration around that pass
    /// only; they are not timed and not shown to `on_pass`/`on_pass_end`. The values arrive in
    /// [`Outcome::metrics`].
    fn metrics(&self, info: &DispatchInfo) -> Option<std::sync::Arc<crate::counters::MetricSet>> {
        let _ = info;
        None
    }

    /// Whether passes 2..N of this dispatch may be queued on the device *ahead*, all before the
    /// first of them completes (asked once per window, after the first pass, and only for
    /// [`PassPlan::exactly`] plans without counters). The default, `false`, keeps each pass's
    /// `on_pass` after the previous pass's [`on_pass_end`](Self::on_pass_end).
    ///
    /// With `true`, `on_pass` of passes 2..N is called in order, each with its own
    /// [`PassState`](Self::PassState) and per-pass contexts, while their kernels queue up;
    /// then `on_pass_end` of each, in order, with its pass's kernel time. Every pass still
    /// starts from restored inputs and runs with the contexts its own `on_pass` left; what
    /// changes is that `on_pass_end` of pass *k* (and what it does to the per-dispatch state
    /// or sticky contexts) can no longer affect passes after *k*. A tool that reads its
    /// figures in [`on_end`](Self::on_end), or whose `on_pass` does not depend on earlier
    /// passes' results, loses nothing and gains the most: on a GPU the passes then run back
    /// to back, with one wait for all of them (backends that cannot queue restores — HSA
    /// today — run them one by one as before). `ROCPROF_REPLAY_AHEAD=0` turns it off for
    /// the process. A panic here counts as `false` (and is logged).
    fn passes_ahead(&self, info: &DispatchInfo) -> bool {
        let _ = info;
        false
    }

    /// How memory is brought back between passes of this dispatch (called once, after
    /// [`pass_count`](Self::pass_count) chose more than one pass: when its window runs, or
    /// earlier, on the thread of another dispatch's window, when it is offered to that
    /// window's run). The default,
    /// [`RestoreMode::Auto`], lets the engine choose from what the first pass wrote;
    /// `ROCPROF_REPLAY_RESTORE` overrides `Auto` (never an explicit choice).
    fn restore_mode(&self, info: &DispatchInfo) -> RestoreMode {
        let _ = info;
        RestoreMode::Auto
    }

    /// What this dispatch's snapshot holds and how the memory it leaves out is checked
    /// (called once per dispatch, right after [`restore_mode`](Self::restore_mode)). The default,
    /// [`FootprintMode::Auto`], leaves it to `ROCPROF_REPLAY_FOOTPRINT`; an explicit choice
    /// wins over the environment. A `strict` restore always captures everything.
    fn footprint(&self, info: &DispatchInfo) -> FootprintMode {
        let _ = info;
        FootprintMode::Auto
    }

    /// What happens to a dispatch whose kernel may write memory the application's host code
    /// can see (pinned, mapped, registered or managed memory on CUDA; fine-grained, host or
    /// shared virtual memory on HSA), which no restore may rewrite under a host writer
    /// (called once per dispatch whose plan gives it a window — more than one pass from
    /// [`pass_count`](Self::pass_count), or counter passes — before that window). The default, [`HostMemory::Auto`], leaves it to
    /// `ROCPROF_REPLAY_HOST_MEMORY` (declined: `host_memory` before the window, or replay
    /// stops after a first pass that wrote watched memory, `host_memory_written`).
    /// [`HostMemory::Repeat`] opts this dispatch in to the reference design's behaviour: it is
    /// replayed and its writes there are repeated once per pass (to count passes from the
    /// kernel, say); its record says `"host_memory": "repeated"`. Memory another process or
    /// GPU writes (`foreign_memory`) is never replayed, whatever this says. A panic here
    /// declines the dispatch (`policy_panicked`).
    fn host_memory(&self, info: &DispatchInfo) -> HostMemory {
        let _ = info;
        HostMemory::Auto
    }
}

/// A policy's answer for a dispatch whose kernel may write host-visible memory
/// ([`ReplayPolicy::host_memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HostMemory {
    /// `ROCPROF_REPLAY_HOST_MEMORY` decides (`decline` when unset).
    #[default]
    Auto,
    /// Never rewrite or repeat writes to host-visible memory: the dispatch declines
    /// (`host_memory`), or replay stops after a first pass that wrote watched host memory
    /// (`host_memory_written`), whatever the environment says.
    Decline,
    /// Replay anyway, the kernel's writes to host-visible memory repeated once per pass
    /// (recorded as `"host_memory": "repeated"`).
    Repeat,
}

/// A pass about to run.
pub struct Pass<'a> {
    pub(crate) index: u32,
    pub(crate) total: Option<u32>,
    pub(crate) info: &'a DispatchInfo,
    pub(crate) contexts: &'a mut LoopContexts,
}

impl<'a> Pass<'a> {
    /// 0-based index of this pass.
    pub fn index(&self) -> u32 {
        self.index
    }
    /// Total passes when fixed in advance ([`PassPlan::Exactly`]); `None` otherwise.
    pub fn total(&self) -> Option<u32> {
        self.total
    }
    /// The dispatch.
    pub fn info(&self) -> &DispatchInfo {
        self.info
    }

    /// Activates `context` for this pass only, for as long as the returned guard lives: keep
    /// the guard in the pass state (`type PassState = PassGuard;` and `*scope =
    /// pass.enable(..)`), which the engine drops when the pass ends.
    ///
    /// A guard dropped before the pass's kernel ran (inside `on_pass`) covered no kernel; the
    /// engine reports that on stderr.
    ///
    /// ```
    /// use rocprof_replay::{Context, DispatchInfo, Pass, PassGuard, PassPlan, ReplayPolicy, Service};
    ///
    /// /// Times the even passes only.
    /// struct EvenPasses { timing: Context }
    ///
    /// impl ReplayPolicy for EvenPasses {
    ///     type State = ();
    ///     type PassState = PassGuard; // ends the override when the pass ends
    ///     fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
    ///         PassPlan::exactly(4, ())
    ///     }
    ///     fn on_pass(&self, pass: &mut Pass<'_>, _: &mut (), guard: &mut PassGuard) {
    ///         if pass.index() % 2 == 0 {
    ///             *guard = pass.enable(&self.timing);
    ///         }
    ///     }
    /// }
    /// # let _ = EvenPasses { timing: Context::new("t", &[Service::DispatchTiming]) };
    /// ```
    pub fn enable(&mut self, context: &Context) -> PassGuard {
        PassGuard::new(context, true)
    }

    /// Deactivates `context` (started globally, say) for this pass only, for as long as the
    /// returned guard lives; see [`enable`](Self::enable).
    pub fn disable(&mut self, context: &Context) -> PassGuard {
        PassGuard::new(context, false)
    }

    /// The sticky form: overrides made through [`LoopContexts`] stay in force for this and
    /// the following passes of the loop until changed, and are undone when the loop ends.
    /// A [`PassGuard`] of the same context takes precedence while it lives.
    pub fn contexts(&mut self) -> &mut LoopContexts {
        self.contexts
    }
}

/// What one pass measured.
#[derive(Debug)]
#[non_exhaustive]
pub struct PassReport<'a> {
    /// 0-based pass index.
    pub index: u32,
    /// Total passes when fixed in advance.
    pub total: Option<u32>,
    /// The dispatch.
    pub info: &'a DispatchInfo,
    /// Whether a context with [`Service::DispatchTiming`](crate::Service::DispatchTiming) was
    /// active for this pass, i.e. whether a kernel time was asked for.
    pub timed: bool,
    /// Kernel time of this pass (start to end timestamp). `None` when the pass was not
    /// [`timed`](Self::timed), or when it was but the runtime gave no usable timestamps.
    pub kernel_time: Option<Duration>,
}

/// Why a dispatch was not replayed as planned. The application still saw one correct
/// execution: either the dispatch ran once the ordinary way, or the replay stopped after a
/// pass that ran from the captured inputs and whose result was left in place.
///
/// New reasons are added as the engine learns new ways to refuse safely (the enum is
/// `#[non_exhaustive]`); [`code`](Self::code) is the stable name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeclineReason {
    /// Memory for the snapshot could not be allocated.
    SnapshotAllocFailed,
    /// A copy into the snapshot failed.
    CopyFailed,
    /// Copies into the snapshot did not complete before the copy deadline.
    CopyTimeout,
    /// Module-scope variables could not be enumerated.
    SymbolsUnavailable,
    /// The agent did not go idle before the drain deadline.
    DrainTimeout,
    /// An asynchronous copy in flight waits for this very dispatch: it cannot finish before
    /// the replay would, and the snapshot's own copies could queue behind it on the runtime's
    /// in-order copy engines.
    CopyWaitsForDispatch,
    /// The agent's lock could not be taken before the lock deadline.
    LockTimeout,
    /// Other work waited for the agent longer than the lock deadline: the replay stopped after
    /// the pass that was running, whose result the application sees. Also: work the window
    /// held up (CUDA: on another stream; HSA: a copy, or work of another queue) waited longer
    /// than `ROCPROF_REPLAY_YIELD_MS` while the first pass had not finished: the window ended
    /// without waiting for it (the kernel may be waiting for that work).
    LockContention,
    /// A pass did not complete before the pass deadline, but did before the late-pass
    /// deadline. Nothing was restored or run again: the application sees that pass's result.
    PassTimeout,
    /// A policy callback panicked.
    PolicyPanicked,
    /// The submission held more than one packet that could not be replayed together.
    MultiPacket,
    /// A launch into a stream that is capturing a graph (CUDA): it only records a graph node.
    StreamCapture,
    /// A graph launch (CUDA `cuGraphLaunch`): its kernels are not visible one by one.
    GraphLaunch,
    /// The snapshot would exceed the memory budget.
    OverBudget,
    /// The plan asked for more than [`MAX_PASSES`] passes.
    TooManyPasses,
    /// The dispatch was submitted from the runtime's own asynchronous-event thread, which a
    /// synchronous replay window would have had to wait for. No longer produced by the HSA
    /// backend since its windows are asynchronous (kept so records and tools naming it still
    /// parse).
    RuntimeThread,
    /// A pass could not be submitted.
    SubmitFailed,
    /// A kernel of a communication library (NCCL, RCCL, NVSHMEM, MSCCL++): it waits for
    /// peers that write once per collective, so a second pass would never complete.
    CommunicationKernel,
    /// The launch is queued behind a stream memory wait (CUDA `cuStreamWaitValue*`): the
    /// stream waits for memory another agent writes.
    StreamMemoryWait,
    /// An argument of the kernel points into host memory the device can reach (CUDA pinned,
    /// registered or managed memory; on HSA, fine-grained or locked memory the host cannot read,
    /// shared virtual memory (`hsa_amd_svm_attributes_set`), or any such memory when the
    /// kernel's arguments cannot be sized): the application's host
    /// threads may read and write it at any time, so repeating the kernel's writes there, or
    /// restoring them, is not safe.
    HostMemory,
    /// An argument of the kernel points into memory another process or GPU writes (CUDA: an
    /// IPC import, `cuIpcOpenMemHandle`, or a virtual-memory mapping of a handle imported from
    /// another process or GPU, `cuMemImportFromShareableHandle`, or of a multicast object;
    /// HSA: an IPC attachment, `hsa_amd_ipc_memory_attach`, a vmem mapping of an imported
    /// handle, `hsa_amd_vmem_import_shareable_handle`, or a graphics interop buffer),
    /// or the kernel's arguments cannot be sized while such memory exists: the engine can
    /// neither fence those writers nor restore under them, so a restore could undo their
    /// writes and a repeated pass could wait for writes that come once. Never replayed, even
    /// where the policy opts in to repeated host writes.
    ForeignMemory,
    /// An argument of the kernel points into an allocation of another context of the process
    /// (CUDA peer access) or of another GPU (HSA, `hsa_amd_agents_allow_access`), or the
    /// kernel's arguments cannot be sized while other contexts or GPUs own allocations: the
    /// window drains and fences only the launching context or GPU, so the owner's
    /// work could write that memory during a restore, and the memory is not captured, so the
    /// kernel's writes there would be repeated once per pass.
    PeerMemory,
    /// CUDA: an 8-byte argument of the kernel is a live surface object (`cuSurfObjectCreate`),
    /// or the kernel's arguments cannot be read while surface objects exist: the kernel may
    /// write a CUDA array through it, which the engine does not snapshot, so its writes there
    /// would be repeated once per pass.
    ArrayMemory,
    /// The kernel's arguments point into host memory the host can read, and that memory
    /// changed during the first pass (the kernel wrote it, or a host thread did): replay
    /// stops after the first pass, whose result — the application's own execution — stands.
    /// Nothing there is restored.
    HostMemoryWritten,
    /// The application submits vendor-specific (PM4) packets to this GPU, such as its own
    /// hardware-counter windows (aqlprofile): they would count every replay pass.
    VendorPackets,
    /// The agent has work the engine cannot wait for or hold back — HSA: a queue without a
    /// progress signal, a queue the backend could not intercept, or an asynchronous copy that
    /// ran unfenced; CUDA: work of another context reaching the context's memory with no event
    /// behind it that was still running at its submission's deadline — so it could run during
    /// the window.
    QueueNotDrainable,
    /// HSA: the application destroyed the dispatch's queue before the dispatch ran there. The
    /// runtime drops what a destroyed queue still holds, so the dispatch does not run either,
    /// and its completion signal is left alone (the application may have destroyed it too).
    QueueDestroyed,
    /// The first pass wrote device memory outside the snapshot (allocations the kernel's
    /// arguments do not name: it writes through pointers stored in device memory). Replay
    /// stopped after it, the application's own execution, whose result stands; later
    /// dispatches of the kernel capture every allocation.
    WroteOutsideFootprint,
    /// Whether the first pass wrote memory outside the snapshot could not be checked (the
    /// fingerprint read failed): replay stopped after it, whose result stands.
    FootprintUnchecked,
}

impl DeclineReason {
    /// The stable reason code used in outcome records and logs.
    pub fn code(self) -> &'static str {
        match self {
            DeclineReason::SnapshotAllocFailed => "snapshot_alloc_failed",
            DeclineReason::CopyFailed => "copy_failed",
            DeclineReason::CopyTimeout => "copy_timeout",
            DeclineReason::SymbolsUnavailable => "symbols_unavailable",
            DeclineReason::DrainTimeout => "drain_timeout",
            DeclineReason::CopyWaitsForDispatch => "copy_waits_for_dispatch",
            DeclineReason::LockTimeout => "lock_timeout",
            DeclineReason::LockContention => "lock_contention",
            DeclineReason::PassTimeout => "pass_timeout",
            DeclineReason::PolicyPanicked => "policy_panicked",
            DeclineReason::MultiPacket => "multi_packet",
            DeclineReason::StreamCapture => "stream_capture",
            DeclineReason::GraphLaunch => "graph_launch",
            DeclineReason::OverBudget => "over_budget",
            DeclineReason::TooManyPasses => "too_many_passes",
            DeclineReason::RuntimeThread => "runtime_thread",
            DeclineReason::SubmitFailed => "submit_failed",
            DeclineReason::QueueNotDrainable => "queue_not_drainable",
            DeclineReason::QueueDestroyed => "queue_destroyed",
            DeclineReason::CommunicationKernel => "communication_kernel",
            DeclineReason::HostMemory => "host_memory",
            DeclineReason::HostMemoryWritten => "host_memory_written",
            DeclineReason::ForeignMemory => "foreign_memory",
            DeclineReason::PeerMemory => "peer_memory",
            DeclineReason::ArrayMemory => "array_memory",
            DeclineReason::VendorPackets => "vendor_packets",
            DeclineReason::StreamMemoryWait => "stream_memory_wait",
            DeclineReason::WroteOutsideFootprint => "wrote_outside_footprint",
            DeclineReason::FootprintUnchecked => "footprint_unchecked",
        }
    }
}

impl std::fmt::Display for DeclineReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// Why a replay ended in a state where the application may not have seen a correct result.
///
/// These are the only outcomes where rocprof-replay breaks its promise; each is logged as an
/// error and recorded as `failed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureReason {
    /// Restoring device memory between passes failed (after one retry): memory was partly
    /// restored when the dispatch ran its final time.
    RestoreFailed,
    /// Restore copies were still in flight at the copy deadline; they may have landed after
    /// the final run.
    RestoreStuck,
    /// A pass was still running at the late-pass deadline: the application was given its
    /// completion (rather than a hang) while the pass may still be writing its memory.
    PassStuck,
    /// After passes had run, the final run that gives the application its result could not
    /// be submitted: its memory holds the dispatch's inputs.
    RunFailed,
    /// An internal error (a bug in rocprof-replay) interrupted the replay window.
    InternalError,
    /// A later pass wrote device memory outside the snapshot that the first pass did not
    /// write (a kernel whose write addresses change from run to run): it cannot be undone,
    /// so memory there holds that pass's writes. `ROCPROF_REPLAY_FOOTPRINT=all` (or a `strict`
    /// restore) captures every allocation.
    LateWriteOutsideFootprint,
}

impl FailureReason {
    /// The stable reason code used in outcome records and logs.
    pub fn code(self) -> &'static str {
        match self {
            FailureReason::RestoreFailed => "restore_failed",
            FailureReason::RestoreStuck => "restore_stuck",
            FailureReason::PassStuck => "pass_stuck",
            FailureReason::RunFailed => "run_failed",
            FailureReason::InternalError => "internal_error",
            FailureReason::LateWriteOutsideFootprint => "late_write_outside_footprint",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// How the dispatch went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeKind {
    /// Ran more than once with memory restored between passes.
    Replayed,
    /// The policy asked for no replay: it ran once, the ordinary way.
    Skipped,
    /// Replay was refused or cut short for a reason; the application still saw one correct
    /// execution.
    Declined(DeclineReason),
    /// The application may have seen a wrong result (see [`FailureReason`]).
    Failed(FailureReason),
}

impl OutcomeKind {
    /// `"replayed"`, `"skipped"`, `"declined"` or `"failed"`.
    pub fn label(self) -> &'static str {
        match self {
            OutcomeKind::Replayed => "replayed",
            OutcomeKind::Skipped => "skipped",
            OutcomeKind::Declined(_) => "declined",
            OutcomeKind::Failed(_) => "failed",
        }
    }
    /// The decline reason, if any.
    pub fn reason(self) -> Option<DeclineReason> {
        match self {
            OutcomeKind::Declined(r) => Some(r),
            _ => None,
        }
    }
    /// The failure reason, if any.
    pub fn failure(self) -> Option<FailureReason> {
        match self {
            OutcomeKind::Failed(r) => Some(r),
            _ => None,
        }
    }
    /// The stable code of the decline or failure reason, if any.
    pub fn reason_code(self) -> Option<&'static str> {
        match self {
            OutcomeKind::Declined(r) => Some(r.code()),
            OutcomeKind::Failed(r) => Some(r.code()),
            _ => None,
        }
    }
}

/// The outcome of one dispatch.
///
/// `#[non_exhaustive]`: tests build one with [`testing::outcome`](crate::testing::outcome) and
/// set the fields they need.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Outcome {
    /// Replayed, skipped or declined.
    pub kind: OutcomeKind,
    /// Passes that ran (an ordinary run counts as 1).
    pub passes: u32,
    /// Kernel time of each pass, where timing was active.
    pub pass_times: Vec<Option<Duration>>,
    /// Bytes captured in the snapshot.
    pub snapshot_bytes: u64,
    /// Bytes written back by all restores together.
    pub restored_bytes: u64,
    /// Regions skipped at restore (or left out of a comparison with the snapshot) because
    /// they were freed or reallocated; counted once per restore or comparison.
    pub skipped_regions: u32,
    /// Time spent capturing the snapshot.
    pub snapshot_time: Duration,
    /// Time spent restoring, all restores together. A restore queued in front of the next
    /// pass (CUDA) counts the time to submit it: its copies run inside that pass's wait.
    pub restore_time: Duration,
    /// Wall-clock time at which the engine took the dispatch (before the pass decision);
    /// `None` in values built by [`testing::outcome`](crate::testing::outcome).
    pub started_at: Option<SystemTime>,
    /// How memory was restored between passes; `None` when no restore ran.
    pub restore_mode: Option<RestoreKind>,
    /// Bytes the first pass wrote (granules of the snapshot that differed from it after the
    /// first pass); 0 when no diff ran (full restore chosen up front, or unsupported).
    pub written_bytes: u64,
    /// Bytes compared with the snapshot, all diffs together.
    pub verified_bytes: u64,
    /// Where memory was compared with the snapshot, all diffs together: `device` (by a device
    /// kernel, where a snapshot in device memory lives), `host` (host-staged snapshots, or
    /// device ones read back), or `device+host`; `None` when no diff ran.
    pub compared_on: Option<&'static str>,
    /// Time spent comparing memory with the snapshot, all diffs together.
    pub diff_time: Duration,
    /// Whether every pass after the first started from restored inputs (the snapshot
    /// engine's verdict: every restore completed, none skipped a region; `strict` also verified
    /// them; in `write_set` mode, false when the final comparison found writes outside the
    /// first pass's write set, which a later pass then saw); `None` when fewer than two passes
    /// ran. Counters of several passes are combined
    /// only when `Some(true)`.
    pub inputs_restored: Option<bool>,
    /// The hardware counters of the dispatch ([`ReplayPolicy::metrics`]).
    pub metrics: crate::counters::Metrics,
    /// Where the snapshot lived: `device`, `pinned_host` or `host`, or a mix joined with `+`
    /// (`device+pinned_host`); `None` when no snapshot was taken.
    pub staging: Option<&'static str>,
    /// The dispatch's arguments point into host-visible memory and it was replayed anyway
    /// (`ROCPROF_REPLAY_HOST_MEMORY=repeat`): what it writes there was written once per pass.
    pub host_writes_repeated: bool,
    /// Which allocations the snapshot held; `None` when no snapshot was taken.
    pub footprint: Option<FootprintKind>,
    /// Bytes of the agent's allocations left out of the snapshot and watched by fingerprints
    /// instead ([`FootprintKind::Arguments`]).
    pub watched_bytes: u64,
    /// Watched bytes whose fingerprints before the first pass came from the previous window
    /// of the GPU instead of being read again.
    pub carried_bytes: u64,
    /// Time spent fingerprinting watched memory, all checks together.
    pub fingerprint_time: Duration,
    /// Regions (allocations and module variables) the snapshot held; 0 when none was taken.
    pub snapshot_regions: u32,
    /// Wall time of the replay window, from taking the agent to its end (passes, copies,
    /// compares and the engine's own work); zero for a dispatch that did not enter one.
    pub window_time: Duration,
    /// Dispatches the window covered, this one included: more than 1 when consecutive
    /// dispatches of its queue shared one window (`ROCPROF_REPLAY_RUN`), which then ran their
    /// passes in turn and shares its snapshot, checks and times among them; 1 for a window of
    /// its own, 0 for a dispatch that entered none.
    pub run: u32,
}

impl Outcome {
    /// The kernel times of the passes that got one, in pass order.
    pub fn kernel_times(&self) -> impl Iterator<Item = Duration> + '_ {
        self.pass_times.iter().flatten().copied()
    }

    /// Statistics of [`kernel_times`](Self::kernel_times); `None` when no pass was timed.
    pub fn kernel_stats(&self) -> Option<crate::stats::Summary> {
        crate::stats::Summary::of(&self.kernel_times().collect::<Vec<_>>())
    }

    pub(crate) fn ordinary(kind: OutcomeKind) -> Outcome {
        Outcome {
            kind,
            passes: 1,
            pass_times: Vec::new(),
            snapshot_bytes: 0,
            restored_bytes: 0,
            skipped_regions: 0,
            snapshot_time: Duration::ZERO,
            restore_time: Duration::ZERO,
            started_at: None,
            restore_mode: None,
            written_bytes: 0,
            verified_bytes: 0,
            compared_on: None,
            diff_time: Duration::ZERO,
            inputs_restored: None,
            metrics: crate::counters::Metrics::NotAsked,
            staging: None,
            host_writes_repeated: false,
            footprint: None,
            watched_bytes: 0,
            carried_bytes: 0,
            fingerprint_time: Duration::ZERO,
            snapshot_regions: 0,
            window_time: Duration::ZERO,
            run: 0,
        }
    }
}

/// What a policy asks of the restore between passes ([`ReplayPolicy::restore_mode`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RestoreMode {
    /// The engine chooses: after the first pass it finds what the kernel wrote and restores
    /// only that ([`RestoreKind::WriteSet`]), or everything when the kernel wrote most of the
    /// snapshot or the backend cannot compare ([`RestoreKind::Full`]).
    #[default]
    Auto,
    /// As `Auto`'s write-set restore, and before every later pass memory is compared with
    /// the snapshot and anything still different restored ([`RestoreKind::Strict`]).
    Strict,
    /// Every byte of the snapshot before every later pass, no diff (the last pass's result
    /// is the application's).
    Full,
}

impl RestoreMode {
    /// Parses `auto`, `strict` or `full` (any case, surrounding blanks ignored).
    pub fn parse(s: &str) -> Option<RestoreMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(RestoreMode::Auto),
            "strict" => Some(RestoreMode::Strict),
            "full" => Some(RestoreMode::Full),
            _ => None,
        }
    }
}

/// How memory was restored between the passes of a dispatch ([`Outcome::restore_mode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RestoreKind {
    /// Every byte of the snapshot; the application sees the last pass's result.
    Full,
    /// Only what the first pass wrote; the application sees the first pass's result.
    WriteSet,
    /// As `WriteSet`, with memory verified against the snapshot before every later pass.
    Strict,
}

/// Which of the agent's allocations a snapshot held (the record's `footprint` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FootprintKind {
    /// Every live allocation of the agent (and the module variables).
    All,
    /// The allocations the dispatch's arguments point into and the module variables; the
    /// agent's other allocations were fingerprinted before and after the first pass
    /// ([`Outcome::watched_bytes`]).
    Arguments,
    /// As `Arguments`, and the watched allocations were fingerprinted again after the last
    /// pass ([`FootprintMode::Verified`]).
    Verified,
    /// The allocations the arguments name and the module variables; the agent's others were
    /// **not checked**: the kernel's earlier dispatches wrote only what their arguments named,
    /// and [`FootprintMode::Sampled`] trusted it with this one.
    Unchecked,
}

impl FootprintKind {
    /// `all`, `arguments`, `verified` or `unchecked`.
    pub fn label(self) -> &'static str {
        match self {
            FootprintKind::All => "all",
            FootprintKind::Arguments => "arguments",
            FootprintKind::Verified => "verified",
            FootprintKind::Unchecked => "unchecked",
        }
    }
}

/// What a snapshot holds, and how the memory it leaves out is checked
/// ([`ReplayPolicy::footprint`], `ROCPROF_REPLAY_FOOTPRINT`, `rocprof-replay run --footprint`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FootprintMode {
    /// `ROCPROF_REPLAY_FOOTPRINT` decides (`arguments` when unset).
    #[default]
    Auto,
    /// The allocations the dispatch's arguments name (and the module variables); the agent's
    /// other allocations are fingerprinted before the first pass and after it, and replay
    /// stops after a first pass that wrote there (its result stands). One read of the watched
    /// memory per dispatch: the fingerprints before the first pass are, as a rule, those the
    /// previous window left. A *later* pass writing there (only a kernel whose write addresses
    /// change between identical runs) is found by the next window of the GPU that carries
    /// those fingerprints (`footprint_unchecked`), not in this dispatch's record.
    Arguments,
    /// As `Arguments`, and the watched memory is fingerprinted again after the last pass: a
    /// later pass that wrote there is reported in the dispatch's own record
    /// (`late_write_outside_footprint`). One more read of the watched memory per dispatch.
    Verified,
    /// **Faster, with a risk.** A kernel's first [`SAMPLED_TRUST_AFTER`] dispatches and then
    /// one in [`SAMPLED_EVERY`] are checked as with `Arguments`; the dispatches between them
    /// are not (`footprint: unchecked`): a kernel that writes memory its arguments do not name
    /// only on some dispatches (a pointer read from device memory that changes) has those
    /// writes repeated once per pass there, and the application's result may differ. A
    /// sampled check that finds such a write declines that dispatch
    /// (`wrote_outside_footprint`) and captures everything for the kernel from then on.
    /// Sampled dispatches form runs (`ROCPROF_REPLAY_RUN`): a checked run checks every member,
    /// and a run whose first member goes unchecked takes in only dispatches whose kernels are
    /// not due a check.
    Sampled,
    /// Every live allocation of the agent: nothing to check, the most bytes to copy. Its
    /// dispatches form runs (`ROCPROF_REPLAY_RUN`), whose later members capture every
    /// allocation the run's snapshot does not hold yet.
    All,
}

/// [`FootprintMode::Sampled`]: checked dispatches of a kernel before it is trusted.
pub const SAMPLED_TRUST_AFTER: u32 = 4;
/// [`FootprintMode::Sampled`]: once trusted, one dispatch of the kernel in this many is checked.
pub const SAMPLED_EVERY: u32 = 64;

impl FootprintMode {
    /// Parses `auto`, `arguments`, `verified`, `sampled` or `all` (any case, surrounding
    /// blanks ignored).
    pub fn parse(s: &str) -> Option<FootprintMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(FootprintMode::Auto),
            "arguments" => Some(FootprintMode::Arguments),
            "verified" => Some(FootprintMode::Verified),
            "sampled" => Some(FootprintMode::Sampled),
            "all" => Some(FootprintMode::All),
            _ => None,
        }
    }
}

impl RestoreKind {
    /// `full`, `write_set` or `strict`: the value of the record's `restore_mode` field.
    pub fn label(self) -> &'static str {
        match self {
            RestoreKind::Full => "full",
            RestoreKind::WriteSet => "write_set",
            RestoreKind::Strict => "strict",
        }
    }
}
