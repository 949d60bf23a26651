//! Contexts (groups of services a tool turns on and off) and their localized per-pass forms.
//!
//! A [`Context`] is started and stopped globally by the tool. Inside a replay loop the tool
//! may override a context on the thread running that loop, in two forms:
//!
//! | form | made with | lasts |
//! |---|---|---|
//! | per pass (RAII) | [`Pass::enable`](crate::Pass::enable) / [`Pass::disable`](crate::Pass::disable) return a [`PassGuard`] | while the guard lives: kept in the pass state (`type PassState = PassGuard`), it ends with the pass |
//! | sticky | [`Pass::contexts`](crate::Pass::contexts)`().enable(..)` / `.disable(..)` on the loop's [`LoopContexts`] | from this pass on, until changed, at most until the loop ends |
//!
//! A live [`PassGuard`] wins over a sticky override of the same context, which wins over the
//! global state. Whatever the form, nothing leaks out of the loop: when it ends, the state
//! before it comes back.
//!
//! A `Context` serves while a handle to it lives; dropping the last handle of a started context
//! stops its services, and that is reported on stderr (it is almost always a tool that forgot
//! to keep the context, e.g. as a field).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use smallvec::SmallVec;

/// A service a context can provide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Service {
    /// Start/end timestamps of each pass's kernel, from the runtime's profiling API.
    DispatchTiming,
}

struct ContextInner {
    id: u64,
    name: Arc<str>,
    services: SmallVec<[Service; 2]>,
    active: AtomicBool,
}

/// A named group of services, started and stopped as one.
///
/// Clones are handles to the same context. Keep one for as long as the context should serve
/// (typically as a field of the tool): the engine finds contexts through weak references, so
/// dropping the last handle stops the services — loudly, when the context was started.
pub struct Context {
    inner: Arc<ContextInner>,
}

impl Clone for Context {
    fn clone(&self) -> Self {
        Context {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.name)
            .field("services", &self.inner.services)
            .field("active", &self.is_active())
            .finish()
    }
}

static REGISTRY: RwLock<Vec<Weak<ContextInner>>> = RwLock::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One override: (unique token, context id, active).
type Override = (u64, u64, bool);

thread_local! {
    /// Sticky overrides of the replay loop running on this thread.
    static STICKY: RefCell<SmallVec<[Override; 4]>> = const { RefCell::new(SmallVec::new_const()) };
    /// Per-pass overrides (live [`PassGuard`]s) on this thread.
    static PER_PASS: RefCell<SmallVec<[Override; 4]>> = const { RefCell::new(SmallVec::new_const()) };
    /// Counts kernels about to run on this thread (see [`service_active`]).
    static KERNEL_EPOCH: Cell<u64> = const { Cell::new(0) };
    /// Started contexts whose last handle this thread dropped (each reported on stderr).
    static DROPPED_WHILE_STARTED: Cell<usize> = const { Cell::new(0) };
    /// Per-pass guards this thread dropped before any kernel ran after their creation.
    static GUARDS_DROPPED_EARLY: Cell<usize> = const { Cell::new(0) };
}

impl Context {
    /// Creates a stopped context providing `services`.
    pub fn new(name: impl Into<String>, services: &[Service]) -> Context {
        let inner = Arc::new(ContextInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: name.into().into(),
            services: services.iter().copied().collect(),
            active: AtomicBool::new(false),
        });
        let mut reg = REGISTRY.write();
        reg.retain(|w| w.strong_count() > 0);
        reg.push(Arc::downgrade(&inner));
        Context { inner }
    }

    /// Creates a context providing `services` and starts it: the usual form for a tool that
    /// wants a service on every pass.
    pub fn started(name: impl Into<String>, services: &[Service]) -> Context {
        let context = Context::new(name, services);
        context.start();
        context
    }

    /// The context's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Starts the context everywhere (outside localized overrides).
    pub fn start(&self) {
        self.inner.active.store(true, Ordering::Release);
    }

    /// Stops the context everywhere (outside localized overrides).
    pub fn stop(&self) {
        self.inner.active.store(false, Ordering::Release);
    }

    /// Whether the context is active on this thread: a per-pass override if a guard for it
    /// lives on this thread, else a sticky override of the replay loop running here, else the
    /// global state.
    pub fn is_active(&self) -> bool {
        is_active(&self.inner)
    }

    /// Whether the context provides `service`.
    pub fn provides(&self, service: Service) -> bool {
        self.inner.services.contains(&service)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // The registry holds weak references only, so this is the last handle exactly when the
        // strong count is 1.
        if Arc::strong_count(&self.inner) == 1 && self.inner.active.load(Ordering::Acquire) {
            DROPPED_WHILE_STARTED.with(|n| n.set(n.get() + 1));
            eprintln!(
                "rocprof-replay: the started context {:?} was dropped, so its services stop; keep \
                 the Context alive for as long as it should serve (e.g. as a field of the tool)",
                self.inner.name
            );
        }
    }
}

fn lookup(stack: &RefCell<SmallVec<[Override; 4]>>, id: u64) -> Option<bool> {
    stack
        .borrow()
        .iter()
        .rev()
        .find(|(_, ctx, _)| *ctx == id)
        .map(|(_, _, on)| *on)
}

fn is_active(inner: &ContextInner) -> bool {
    PER_PASS
        .with(|o| lookup(o, inner.id))
        .or_else(|| STICKY.with(|o| lookup(o, inner.id)))
        .unwrap_or_else(|| inner.active.load(Ordering::Acquire))
}

/// Whether any context providing `service` is active on this thread.
///
/// The engine asks this right before a pass's kernel runs, so it also marks that moment for
/// the guards' misuse check (a [`PassGuard`] dropped before any kernel ran).
pub(crate) fn service_active(service: Service) -> bool {
    KERNEL_EPOCH.with(|e| e.set(e.get() + 1));
    REGISTRY
        .read()
        .iter()
        .filter_map(Weak::upgrade)
        .any(|c| c.services.contains(&service) && is_active(&c))
}

/// The sticky context overrides of one replay loop (the engine makes one per loop and drops it
/// when the loop ends, undoing every override made in the loop, sticky or per pass).
pub struct LoopContexts {
    /// Lengths of this thread's override stacks when the loop began.
    sticky_depth: usize,
    per_pass_depth: usize,
}

impl std::fmt::Debug for LoopContexts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopContexts")
            .field("sticky_depth", &self.sticky_depth)
            .field("per_pass_depth", &self.per_pass_depth)
            .finish()
    }
}

impl LoopContexts {
    /// Opens the scope of a replay loop on this thread.
    pub(crate) fn new() -> LoopContexts {
        LoopContexts {
            sticky_depth: STICKY.with(|o| o.borrow().len()),
            per_pass_depth: PER_PASS.with(|o| o.borrow().len()),
        }
    }

    /// Another loop at this one's depth: a later dispatch of a window's run has a loop of its
    /// own, whose sticky overrides are on this thread's stack only around its own passes
    /// ([`park`](Self::park), [`unpark`](Self::unpark)).
    pub(crate) fn sibling(&self) -> LoopContexts {
        LoopContexts {
            sticky_depth: self.sticky_depth,
            per_pass_depth: self.per_pass_depth,
        }
    }

    /// Takes this loop's sticky overrides off this thread's stack (another loop's passes come
    /// next).
    pub(crate) fn park(&self) -> Parked {
        STICKY.with(|o| {
            let mut o = o.borrow_mut();
            let depth = self.sticky_depth.min(o.len());
            Parked {
                sticky: o.drain(depth..).collect(),
                per_pass: SmallVec::new(),
            }
        })
    }

    /// As [`park`](Self::park), the per-pass overrides of the pass under way too (its
    /// kernel submitted, another loop's pass about to begin): the loop's every override off
    /// this thread's stack until [`unpark`](Self::unpark).
    pub(crate) fn set_aside(&self) -> Parked {
        let mut parked = self.park();
        parked.per_pass = PER_PASS.with(|o| {
            let mut o = o.borrow_mut();
            let depth = self.per_pass_depth.min(o.len());
            o.drain(depth..).collect()
        });
        parked
    }

    /// Puts overrides [`park`](Self::park) took back on this thread's stack.
    pub(crate) fn unpark(&self, parked: Parked) {
        STICKY.with(|o| {
            let mut o = o.borrow_mut();
            o.truncate(self.sticky_depth);
            o.extend(parked.sticky);
        });
        if !parked.per_pass.is_empty() {
            PER_PASS.with(|o| o.borrow_mut().extend(parked.per_pass));
        }
    }

    /// Activates `context` for this and the following passes of the loop (sticky).
    pub fn enable(&mut self, context: &Context) {
        self.set(context, true);
    }

    /// Deactivates `context` for this and the following passes of the loop (sticky).
    pub fn disable(&mut self, context: &Context) {
        self.set(context, false);
    }

    fn set(&mut self, context: &Context, on: bool) {
        STICKY.with(|o| {
            let mut o = o.borrow_mut();
            let depth = self.sticky_depth.min(o.len());
            if let Some(entry) = o[depth..]
                .iter_mut()
                .find(|(_, id, _)| *id == context.inner.id)
            {
                entry.2 = on;
            } else {
                o.push((0, context.inner.id, on));
            }
        });
    }
}

/// Overrides of a loop, off the thread's stack ([`LoopContexts::park`]: the sticky ones;
/// [`LoopContexts::set_aside`]: the per-pass ones of the pass under way too).
#[derive(Debug, Default)]
pub(crate) struct Parked {
    sticky: SmallVec<[Override; 4]>,
    per_pass: SmallVec<[Override; 4]>,
}

impl Parked {
    /// The sticky overrides and the per-pass ones apart: a loop whose passes are queued
    /// ahead carries the first into its next pass and keeps the second with the pass they
    /// belong to until it ends.
    pub(crate) fn split(self) -> (Parked, Parked) {
        (
            Parked {
                sticky: self.sticky,
                per_pass: SmallVec::new(),
            },
            Parked {
                sticky: SmallVec::new(),
                per_pass: self.per_pass,
            },
        )
    }

    /// `sticky`'s sticky overrides with `per_pass`'s per-pass ones.
    pub(crate) fn join(sticky: Parked, per_pass: Parked) -> Parked {
        Parked {
            sticky: sticky.sticky,
            per_pass: per_pass.per_pass,
        }
    }
}

impl Drop for LoopContexts {
    fn drop(&mut self) {
        STICKY.with(|o| o.borrow_mut().truncate(self.sticky_depth));
        PER_PASS.with(|o| o.borrow_mut().truncate(self.per_pass_depth));
    }
}

/// A per-pass context override (RAII): made by [`Pass::enable`](crate::Pass::enable) or
/// [`Pass::disable`](crate::Pass::disable), it ends when the guard drops.
///
/// Keep it in the pass state — `type PassState = PassGuard;` — which the engine drops when the
/// pass ends, so the override covers exactly this pass's kernel. `PassGuard::default()` is an
/// empty guard that overrides nothing. A guard dropped before any kernel ran (inside
/// `on_pass`, say) is reported on stderr: its override covered nothing.
#[must_use = "the override ends when the guard drops: keep it in the pass state (`type PassState = PassGuard`)"]
#[derive(Default)]
pub struct PassGuard {
    /// The override's token and the context's name; `None` for an empty guard.
    entry: Option<(u64, Arc<str>)>,
    /// This thread's kernel epoch when the guard was made.
    epoch: u64,
}

impl std::fmt::Debug for PassGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassGuard")
            .field("context", &self.entry.as_ref().map(|(_, name)| name))
            .finish()
    }
}

impl PassGuard {
    pub(crate) fn new(context: &Context, on: bool) -> PassGuard {
        let token = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        PER_PASS.with(|o| o.borrow_mut().push((token, context.inner.id, on)));
        PassGuard {
            entry: Some((token, Arc::clone(&context.inner.name))),
            epoch: KERNEL_EPOCH.with(Cell::get),
        }
    }

    /// Whether the guard overrides a context (an empty `PassGuard::default()` does not).
    pub fn is_active(&self) -> bool {
        self.entry.is_some()
    }
}

impl Drop for PassGuard {
    fn drop(&mut self) {
        let Some((token, name)) = self.entry.take() else {
            return;
        };
        // Only the thread that made the guard has its entry; elsewhere this finds nothing.
        let removed = PER_PASS.with(|o| {
            let mut o = o.borrow_mut();
            let at = o.iter().position(|(t, _, _)| *t == token);
            at.map(|i| o.remove(i)).is_some()
        });
        if removed && KERNEL_EPOCH.with(Cell::get) == self.epoch {
            GUARDS_DROPPED_EARLY.with(|n| n.set(n.get() + 1));
            eprintln!(
                "rocprof-replay: a PassGuard for context {name:?} was dropped before the pass's \
                 kernel ran, so it covered nothing; keep it in the pass state \
                 (type PassState = PassGuard; *scope = pass.enable(..))"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_overrides_last_until_the_loop_ends() {
        // No service: starting it globally must not affect tests that look at timing.
        let ctx = Context::new("t", &[]);
        assert!(!ctx.is_active());
        {
            let mut lp = LoopContexts::new();
            lp.enable(&ctx);
            assert!(ctx.is_active());
            lp.disable(&ctx);
            assert!(!ctx.is_active());
            lp.enable(&ctx);
        }
        assert!(!ctx.is_active(), "the loop's override leaked out");
        ctx.start();
        {
            let mut lp = LoopContexts::new();
            lp.disable(&ctx);
            assert!(!ctx.is_active());
        }
        assert!(ctx.is_active());
        ctx.stop();
    }

    #[test]
    fn overrides_apply_only_to_the_thread_of_the_loop() {
        let ctx = Context::new("t2", &[]);
        let mut lp = LoopContexts::new();
        lp.enable(&ctx);
        let c2 = ctx.clone();
        assert!(!std::thread::spawn(move || c2.is_active()).join().unwrap());
        assert!(ctx.is_active());
    }

    #[test]
    fn a_pass_guard_ends_its_override_when_dropped_and_wins_over_sticky() {
        let ctx = Context::new("t3", &[]);
        let mut lp = LoopContexts::new();
        lp.enable(&ctx);
        let guard = PassGuard::new(&ctx, false);
        assert!(guard.is_active());
        assert!(!ctx.is_active(), "the per-pass override wins");
        service_active(Service::DispatchTiming); // a kernel ran
        drop(guard);
        assert!(ctx.is_active(), "the sticky override is back");
        drop(lp);
        assert!(!ctx.is_active());
        assert!(!PassGuard::default().is_active());
    }

    #[test]
    fn the_loop_end_undoes_a_guard_that_outlives_it() {
        let ctx = Context::new("t4", &[]);
        let lp = LoopContexts::new();
        let guard = PassGuard::new(&ctx, true);
        assert!(ctx.is_active());
        drop(lp);
        assert!(!ctx.is_active(), "nothing leaks out of the loop");
        drop(guard); // finds nothing to remove
        assert!(!ctx.is_active());
    }

    #[test]
    fn a_guard_dropped_before_any_kernel_is_reported() {
        let ctx = Context::new("t5", &[]);
        let before = GUARDS_DROPPED_EARLY.with(Cell::get);
        drop(PassGuard::new(&ctx, true));
        assert_eq!(GUARDS_DROPPED_EARLY.with(Cell::get), before + 1);
        let kept = PassGuard::new(&ctx, true);
        service_active(Service::DispatchTiming);
        drop(kept);
        assert_eq!(GUARDS_DROPPED_EARLY.with(Cell::get), before + 1);
    }

    #[test]
    fn dropping_the_last_handle_of_a_started_context_is_reported() {
        let before = DROPPED_WHILE_STARTED.with(Cell::get);
        let ctx = Context::started("t6", &[]);
        let clone = ctx.clone();
        drop(ctx);
        assert_eq!(DROPPED_WHILE_STARTED.with(Cell::get), before);
        assert!(clone.is_active());
        drop(clone);
        assert_eq!(DROPPED_WHILE_STARTED.with(Cell::get), before + 1);
        drop(Context::new("t7", &[])); // stopped: silent
        assert_eq!(DROPPED_WHILE_STARTED.with(Cell::get), before + 1);
    }
}
