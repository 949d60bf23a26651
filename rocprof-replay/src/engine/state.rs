//! The process-wide engine: the registered policy, the settings and the allocation inventory,
//! shared by every backend.
//!
//! Registration builds the [`Engine`] once per process ([`install`]); each backend then
//! attaches to it (the HSA backend in `OnLoad`, the CUDA backend at injection) and hands every
//! intercepted dispatch to [`Engine::decide`] (and runs the [`Window`] it returns). Neither backend owns the policy, so one tool
//! library serves an HSA process and a CUDA process alike.

use std::sync::OnceLock;

use crate::context::LoopContexts;
use crate::counters::{CounterCatalog, MetricSet};
use crate::dispatch::DispatchInfo;
use crate::engine::inventory::AllocationInventory;
use crate::engine::records;
use crate::engine::settings::Settings;
use crate::engine::window::{Decided, Joins, Later, Member, Ordinary, ReplayTarget, decide};
use crate::engine::workers::Workers;
use crate::error::Error;
use crate::policy::{FootprintMode, Outcome, ReplayPolicy};

/// A type-erased policy.
pub(crate) trait Replayer: Send + Sync {
    /// Decides on the submitting thread whether the dispatch enters the window: `Err` is the
    /// outcome of one that ran once already ([`decide`]).
    // The outcome is moved once per dispatch; boxing it would cost an allocation on the
    // path of every skipped dispatch.
    #[allow(clippy::result_large_err)]
    fn decide(
        &'static self,
        info: &DispatchInfo,
        target: &mut dyn Ordinary,
        settings: &Settings,
    ) -> Result<Box<dyn Pending>, Outcome>;
    /// Hands the policy an agent's counter catalog (or why it has none).
    fn on_agent(&self, agent: u32, counters: Result<&CounterCatalog, &str>);
}

/// A decided window, type-erased: runs on any thread ([`Decided::run`]).
pub(crate) trait Pending: Send {
    /// Whether the window collects hardware counters.
    fn collects_counters(&self) -> bool;

    /// The passes it asks for when it may join a run ([`Decided::run_passes`]).
    fn run_passes(&self) -> Option<u32>;

    /// The footprint it asks for when it may join a run ([`Decided::run_footprint`]).
    fn run_footprint(&self, info: &DispatchInfo, settings: &Settings) -> Option<FootprintMode>;

    /// The metric set it collects ([`Decided::run_counters`]).
    fn run_counters(&self) -> Option<&MetricSet>;

    /// The dispatch as a later member of a run whose first member's loop is `first`.
    fn into_member(self: Box<Self>, first: &LoopContexts) -> Box<dyn Member>;

    /// Runs the window against `target` ([`Decided::run`]).
    fn run<'s>(
        self: Box<Self>,
        info: &DispatchInfo,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        settings: &Settings,
        joins: Option<&mut dyn Joins<'s>>,
        later: &mut Vec<Later<'s>>,
    ) -> Outcome;
}

impl<P: ReplayPolicy> Pending for Decided<'static, P> {
    fn collects_counters(&self) -> bool {
        Decided::collects_counters(self)
    }

    fn run_passes(&self) -> Option<u32> {
        Decided::run_passes(self)
    }

    fn run_footprint(&self, info: &DispatchInfo, settings: &Settings) -> Option<FootprintMode> {
        Decided::run_footprint(self, info, settings)
    }

    fn run_counters(&self) -> Option<&MetricSet> {
        Decided::run_counters(self)
    }

    fn into_member(self: Box<Self>, first: &LoopContexts) -> Box<dyn Member> {
        Decided::into_member(*self, first)
    }

    fn run<'s>(
        self: Box<Self>,
        info: &DispatchInfo,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        settings: &Settings,
        joins: Option<&mut dyn Joins<'s>>,
        later: &mut Vec<Later<'s>>,
    ) -> Outcome {
        Decided::run(*self, info, target, inventory, settings, joins, later)
    }
}

impl<P: ReplayPolicy> Replayer for P {
    fn decide(
        &'static self,
        info: &DispatchInfo,
        target: &mut dyn Ordinary,
        settings: &Settings,
    ) -> Result<Box<dyn Pending>, Outcome> {
        decide(self, info, target, settings).map(|d| Box::new(d) as Box<dyn Pending>)
    }
    fn on_agent(&self, agent: u32, counters: Result<&CounterCatalog, &str>) {
        let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ReplayPolicy::on_agent(self, agent, counters)
        }));
        if call.is_err() {
            tracing::error!(agent, "replay policy panicked in on_agent");
        }
    }
}

/// The process-wide allocation inventory (records nothing until a backend enables it).
pub(crate) static INVENTORY: AllocationInventory = AllocationInventory::new();

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// The registered policy and the settings every backend uses.
pub(crate) struct Engine {
    replayer: Box<dyn Replayer>,
    /// Deadlines and budget.
    pub(crate) settings: Settings,
    /// The lanes that run asynchronous windows.
    pub(crate) workers: Workers,
}

/// A dispatch that entered the replay window and whose window has not run yet
/// ([`Engine::decide`]): [`Window::run`] runs it, on any thread, logs it and emits its record.
pub(crate) struct Window {
    engine: &'static Engine,
    pending: Box<dyn Pending>,
    info: DispatchInfo,
}

impl Window {
    /// The dispatch.
    pub(crate) fn info(&self) -> &DispatchInfo {
        &self.info
    }

    /// Whether the window collects hardware counters.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn collects_counters(&self) -> bool {
        self.pending.collects_counters()
    }

    /// The passes it asks for when it may join a window's run: `None`, it may not.
    pub(crate) fn run_passes(&self) -> Option<u32> {
        self.pending.run_passes()
    }

    /// The footprint it asks for when it may join a window's run (`arguments`, `sampled` or
    /// `all`): `None`, it may not.
    pub(crate) fn run_footprint(&self) -> Option<FootprintMode> {
        self.pending
            .run_footprint(&self.info, &self.engine.settings)
    }

    /// The metric set it collects (`None`: none): a run's members all collect the same.
    pub(crate) fn run_counters(&self) -> Option<&MetricSet> {
        self.pending.run_counters()
    }

    /// The dispatch as a later member of a run whose first member's loop is `first`.
    pub(crate) fn into_member(self, first: &LoopContexts) -> (DispatchInfo, Box<dyn Member>) {
        (self.info, self.pending.into_member(first))
    }

    /// [`run_with`](Self::run_with) with an inventory of the test's own.
    #[cfg(test)]
    pub(crate) fn run_in<'s>(
        self,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        joins: Option<&mut dyn Joins<'s>>,
    ) -> (Outcome, Vec<Box<dyn ReplayTarget + 's>>) {
        self.run_inner(target, inventory, joins)
    }

    /// Runs the window against `target`, then logs and records its outcome.
    pub(crate) fn run(self, target: &mut dyn ReplayTarget) -> Outcome {
        self.run_inner(target, &INVENTORY, None).0
    }

    /// Runs the window against `target` (its memory known to `inventory`, the backend's),
    /// with the dispatches `joins` offers joining its run; logs and records its outcome, then
    /// the later members' in order, and returns the later members' handles for the backend to
    /// release, in order, after this dispatch's completion ([`ReplayTarget::released`]).
    pub(crate) fn run_with<'s>(
        self,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        joins: &mut dyn Joins<'s>,
    ) -> (Outcome, Vec<Box<dyn ReplayTarget + 's>>) {
        self.run_inner(target, inventory, Some(joins))
    }

    fn run_inner<'s>(
        self,
        target: &mut dyn ReplayTarget,
        inventory: &AllocationInventory,
        joins: Option<&mut dyn Joins<'s>>,
    ) -> (Outcome, Vec<Box<dyn ReplayTarget + 's>>) {
        let mut later = Vec::new();
        let outcome = self.pending.run(
            &self.info,
            target,
            inventory,
            &self.engine.settings,
            joins,
            &mut later,
        );
        // The run's first member, then its later ones in order (their completions follow).
        report(&self.info, &outcome);
        let mut targets = Vec::with_capacity(later.len());
        for l in later {
            report(&l.info, &l.outcome);
            targets.push(l.target);
        }
        (outcome, targets)
    }
}

/// Builds the engine with the policy `make` returns, or returns the engine already built in
/// this process (a second backend attaching to the same tool).
pub(crate) fn install(
    make: impl FnOnce() -> Result<Box<dyn Replayer>, Error>,
) -> Result<&'static Engine, Error> {
    if let Some(engine) = ENGINE.get() {
        return Ok(engine);
    }
    let replayer = make()?;
    let settings = Settings::from_env();
    if settings.run > 1 {
        tracing::info!(
            run = settings.run,
            "replay windows may cover runs of up to {} consecutive dispatches (ROCPROF_REPLAY_RUN)",
            settings.run
        );
    }
    INVENTORY.set_free_wait(settings.copy.saturating_mul(2));
    Ok(ENGINE.get_or_init(|| Engine {
        replayer,
        settings,
        workers: Workers::new(),
    }))
}

#[cfg(test)]
impl Engine {
    /// An engine of its own for a test (leaked, as the process's is static).
    pub(crate) fn leaked(replayer: Box<dyn Replayer>, settings: Settings) -> &'static Engine {
        Box::leak(Box::new(Engine {
            replayer,
            settings,
            workers: Workers::new(),
        }))
    }
}

impl Engine {
    /// Decides whether the dispatch enters the replay window, on the submitting thread. `None`:
    /// it did not (skipped, or declined before the window); it ran once through `target`, and
    /// its outcome is logged and recorded. `Some`: the window to run, now or on another thread.
    pub(crate) fn decide(
        &'static self,
        info: &DispatchInfo,
        target: &mut dyn Ordinary,
    ) -> Option<Window> {
        let replayer: &'static dyn Replayer = &*self.replayer;
        match replayer.decide(info, target, &self.settings) {
            Ok(pending) => Some(Window {
                engine: self,
                pending,
                info: info.clone(),
            }),
            Err(outcome) => {
                report(info, &outcome);
                None
            }
        }
    }

    /// Hands the policy the counters agent `agent` offers (a backend calls it once per agent,
    /// when it first sees it).
    pub(crate) fn on_agent(&self, agent: u32, counters: Result<&CounterCatalog, &str>) {
        if let Some(path) = crate::config::var(crate::config::CATALOG) {
            write_catalog(std::path::Path::new(&path), agent, counters);
        }
        self.replayer.on_agent(agent, counters);
    }
}

/// Appends agent `agent`'s catalog to `path` as one JSON line (see [`crate::config::CATALOG`]).
fn write_catalog(path: &std::path::Path, agent: u32, counters: Result<&CounterCatalog, &str>) {
    use std::io::Write as _;
    let line = match counters {
        Ok(c) => serde_json::json!({
            "gpu": agent,
            "agent": c.agent(),
            "blocks": c.blocks().collect::<std::collections::BTreeMap<_, _>>(),
            "counters": c
                .counters()
                .map(|i| serde_json::json!([i.name, i.block, i.event]))
                .collect::<Vec<_>>(),
        }),
        Err(why) => serde_json::json!({"gpu": agent, "error": why}),
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        tracing::warn!("writing the counter catalog to {}: {e}", path.display());
    }
}

/// Logs and records an outcome the engine or a backend decided.
pub(crate) fn report(info: &DispatchInfo, outcome: &Outcome) {
    if outcome.kind.failure().is_some() {
        tracing::error!(
            kernel = info.kernel(),
            dispatch = %info.dispatch_id,
            reason = outcome.kind.reason_code(),
            "replay failed: the application may have seen a wrong result of this dispatch"
        );
    }
    tracing::info!(
        kernel = info.kernel(),
        dispatch = %info.dispatch_id,
        outcome = outcome.kind.label(),
        reason = outcome.kind.reason_code(),
        passes = outcome.passes,
        snapshot_bytes = outcome.snapshot_bytes,
        "dispatch"
    );
    records::emit(info, outcome);
}
