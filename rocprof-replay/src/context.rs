//! Contexts (groups of services a tool turns on and off) and the localized per-pass scope.
//!
//! A [`Context`] is started and stopped globally by the tool. Inside a replay loop the tool
//! may override a context for the coming passes through the loop's [`PassGuard`]
//! ([`Pass::contexts`](crate::Pass::contexts)): overrides are sticky across passes, apply only
//! to the thread running that loop, and are undone when the guard drops at the end of the
//! loop, so the state before the loop comes back after it.

use std::cell::RefCell;
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
    name: String,
    services: SmallVec<[Service; 2]>,
    active: AtomicBool,
}

/// A named group of services, started and stopped as one.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
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

thread_local! {
    /// Overrides of the replay loop running on this thread: (context id, active).
    static OVERRIDES: RefCell<SmallVec<[(u64, bool); 4]>> = const { RefCell::new(SmallVec::new_const()) };
}

impl Context {
    /// Creates a stopped context providing `services`.
    ///
    /// The engine finds contexts through a registry of weak references: keep the `Context`
    /// (or a clone) alive, typically as a field of the tool, or its services stop.
    pub fn new(name: impl Into<String>, services: &[Service]) -> Context {
        let inner = Arc::new(ContextInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: name.into(),
            services: services.iter().copied().collect(),
            active: AtomicBool::new(false),
        });
        let mut reg = REGISTRY.write();
        reg.retain(|w| w.strong_count() > 0);
        reg.push(Arc::downgrade(&inner));
        Context { inner }
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

    /// Whether the context is active on this thread: a localized override if the thread is
    /// in a replay loop that set one, else the global state.
    pub fn is_active(&self) -> bool {
        is_active(&self.inner)
    }

    /// Whether the context provides `service`.
    pub fn provides(&self, service: Service) -> bool {
        self.inner.services.contains(&service)
    }
}

fn is_active(inner: &ContextInner) -> bool {
    let local = OVERRIDES.with(|o| {
        o.borrow()
            .iter()
            .rev()
            .find(|(id, _)| *id == inner.id)
            .map(|(_, on)| *on)
    });
    local.unwrap_or_else(|| inner.active.load(Ordering::Acquire))
}

/// Whether any context providing `service` is active on this thread.
pub(crate) fn service_active(service: Service) -> bool {
    REGISTRY
        .read()
        .iter()
        .filter_map(Weak::upgrade)
        .any(|c| c.services.contains(&service) && is_active(&c))
}

/// The localized-context scope of one replay loop (RAII): overrides made through it last until
/// it drops, then the state before the loop is back.
pub struct PassGuard {
    /// Length of this thread's override stack when the guard was made.
    depth: usize,
}

impl std::fmt::Debug for PassGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassGuard")
            .field("depth", &self.depth)
            .finish()
    }
}

impl PassGuard {
    /// Opens the scope for a replay loop on this thread.
    pub(crate) fn new() -> PassGuard {
        PassGuard {
            depth: OVERRIDES.with(|o| o.borrow().len()),
        }
    }

    /// Activates `context` for this and the following passes of the loop.
    pub fn enable(&mut self, context: &Context) {
        self.set(context, true);
    }

    /// Deactivates `context` for this and the following passes of the loop.
    pub fn disable(&mut self, context: &Context) {
        self.set(context, false);
    }

    fn set(&mut self, context: &Context, on: bool) {
        OVERRIDES.with(|o| {
            let mut o = o.borrow_mut();
            let depth = self.depth;
            if let Some(entry) = o[depth..]
                .iter_mut()
                .find(|(id, _)| *id == context.inner.id)
            {
                entry.1 = on;
            } else {
                o.push((context.inner.id, on));
            }
        });
    }
}

impl Drop for PassGuard {
    fn drop(&mut self) {
        OVERRIDES.with(|o| o.borrow_mut().truncate(self.depth));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_are_sticky_and_undone_when_the_guard_drops() {
        // No service: starting it globally must not affect tests that look at timing.
        let ctx = Context::new("t", &[]);
        assert!(!ctx.is_active());
        {
            let mut guard = PassGuard::new();
            guard.enable(&ctx);
            assert!(ctx.is_active());
            guard.disable(&ctx);
            assert!(!ctx.is_active());
            guard.enable(&ctx);
        }
        assert!(!ctx.is_active(), "the loop's override leaked out");
        ctx.start();
        {
            let mut guard = PassGuard::new();
            guard.disable(&ctx);
            assert!(!ctx.is_active());
        }
        assert!(ctx.is_active());
    }

    #[test]
    fn overrides_apply_only_to_the_thread_of_the_loop() {
        let ctx = Context::new("t2", &[Service::DispatchTiming]);
        let mut guard = PassGuard::new();
        guard.enable(&ctx);
        let c2 = ctx.clone();
        assert!(!std::thread::spawn(move || c2.is_active()).join().unwrap());
        assert!(ctx.is_active());
    }
}
