//! Copies fenced against replay windows.
//!
//! A replay window must not see device memory change under it (a restore would overwrite the
//! change, or a pass would read it), and a copy must not read memory in the middle of a pass.
//!
//! - **Submission** of a copy that touches a GPU's memory holds that GPU's reader lock
//!   ([`Fence`]), so no copy starts while a window holds the writer lock.
//! - **Asynchronous copies already submitted** when a window starts are waited for. Each one
//!   that touches a GPU's memory runs with a *proxy* completion signal of ours and is listed in
//!   the GPU's [`CopyFence`]; a handler on the runtime's async thread ([`retire`]) takes it off
//!   the list when the proxy completes and then passes the completion on to the application's
//!   signal. The window waits, with the drain deadline, until nothing on the list can still
//!   run. A copy that waits for the dispatch being replayed (directly, or through another
//!   listed copy) cannot run before the window ends, so it is not waited for.
//! - `hsa_amd_profiling_get_async_copy_time` on the application's signal answers with the
//!   proxy's timestamps ([`copy_time`]), kept while the application has copy profiling on.

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLockReadGuard};
use rocprof_replay_sys::*;
use smallvec::SmallVec;

use super::{BACKEND, Backend, Gpu, INVENTORY, intercept};

/// Most application signals whose last copy's timestamps are kept (they are replaced when the
/// signal is used for another copy; the table is emptied when it grows past this).
const COPY_TIMES_LIMIT: usize = 4096;

/// The reader locks of the GPUs a copy touches, taken in agent order (so two copies never wait
/// for each other) and held while the copy is submitted or, for a host copy, performed.
pub(crate) struct Fence<'a> {
    gpus: SmallVec<[&'a Gpu; 2]>,
    _guards: SmallVec<[Option<RwLockReadGuard<'a, ()>>; 2]>,
}

impl<'a> Fence<'a> {
    /// Locks the GPUs that `touched` names. An address inside a tracked allocation names its
    /// owner; an untracked one names the agent given with it, if that agent is a GPU (it may
    /// be a module variable of that GPU). Inside a replay window nothing is locked: the window
    /// already holds its agent's writer lock.
    pub(crate) fn take(be: &'a Backend, touched: &[(usize, Option<hsa_agent_t>)]) -> Fence<'a> {
        let mut gpus: SmallVec<[&Gpu; 2]> = SmallVec::new();
        if !intercept::in_window() {
            for &(addr, agent) in touched {
                let gpu = match INVENTORY.agent_of(addr) {
                    Some(owner) => be.gpus.iter().find(|g| g.agent.handle == owner.0),
                    None => agent.and_then(|a| be.gpu(a)),
                };
                gpus.extend(gpu);
            }
            gpus.sort_by_key(|g| g.index);
            gpus.dedup_by_key(|g| g.index);
        }
        let _guards = gpus
            .iter()
            .map(|g| g.lock.try_read_for(be.limits.lock))
            .collect();
        Fence { gpus, _guards }
    }
}

/// Asynchronous copies in flight that touch one GPU's memory.
#[derive(Default)]
pub(crate) struct CopyFence {
    inflight: Mutex<Vec<InflightCopy>>,
    retired: Condvar,
}

/// One listed copy: what it signals and what it waits for (signal handles).
#[derive(Clone)]
struct InflightCopy {
    id: u64,
    completion: u64,
    deps: SmallVec<[u64; 2]>,
}

impl CopyFence {
    fn add(&self, copy: InflightCopy) {
        self.inflight.lock().push(copy);
    }

    fn retire(&self, id: u64) {
        let mut list = self.inflight.lock();
        if let Some(i) = list.iter().position(|c| c.id == id) {
            list.swap_remove(i);
            self.retired.notify_all();
        }
    }

    /// Waits until no listed copy can run before the dispatch whose completion signal is
    /// `replayed` finishes; `false` when `deadline` passes first.
    pub(crate) fn wait_idle(&self, replayed: hsa_signal_t, deadline: Instant) -> bool {
        let mut list = self.inflight.lock();
        while any_runnable(&list, replayed) {
            if self.retired.wait_until(&mut list, deadline).timed_out() {
                return !any_runnable(&list, replayed);
            }
        }
        true
    }
}

/// Whether some copy in `list` may still run while the dispatch that signals `replayed` is
/// held back: copies waiting for it, directly or through other listed copies, cannot.
fn any_runnable(list: &[InflightCopy], replayed: hsa_signal_t) -> bool {
    let mut held: SmallVec<[u64; 4]> = SmallVec::new();
    if replayed.handle != 0 {
        held.push(replayed.handle);
    }
    loop {
        let before = held.len();
        for c in list {
            if !held.contains(&c.completion) && c.deps.iter().any(|d| held.contains(d)) {
                held.push(c.completion);
            }
        }
        if held.len() == before {
            break;
        }
    }
    list.iter()
        .any(|c| !c.deps.iter().any(|d| held.contains(d)))
}

/// Process-wide bookkeeping of fenced asynchronous copies.
#[derive(Default)]
pub(crate) struct CopyTracker {
    next_id: AtomicU64,
    /// Proxy signals ready for reuse.
    spare: Mutex<Vec<hsa_signal_t>>,
    /// Application signal -> timestamps of its last fenced copy (only when the runtime
    /// recorded them, i.e. copy profiling is on).
    times: Mutex<HashMap<u64, hsa_amd_profiling_async_copy_time_t>>,
    has_times: AtomicBool,
    /// The application turned copy profiling on (`hsa_amd_profiling_async_copy_enable`).
    profiling: AtomicBool,
}

impl CopyTracker {
    /// A proxy signal with value 1.
    fn proxy(&self, be: &Backend) -> Option<hsa_signal_t> {
        if let Some(s) = self.spare.lock().pop() {
            // SAFETY: one of our proxy signals, no longer referenced by any copy or handler.
            unsafe { (be.orig.signal_store)(s, 1) };
            return Some(s);
        }
        let mut s = hsa_signal_t::default();
        // SAFETY: creating a plain signal with no consumer list.
        let st = unsafe { (be.orig.signal_create)(1, 0, std::ptr::null(), &mut s) };
        (st == HSA_STATUS_SUCCESS).then_some(s)
    }

    fn forget_time(&self, app: hsa_signal_t) {
        if self.has_times.load(Ordering::Relaxed) {
            self.times.lock().remove(&app.handle);
        }
    }

    fn record_time(&self, app: hsa_signal_t, time: hsa_amd_profiling_async_copy_time_t) {
        let mut times = self.times.lock();
        if times.len() >= COPY_TIMES_LIMIT {
            times.clear();
        }
        times.insert(app.handle, time);
        self.has_times.store(true, Ordering::Relaxed);
    }

    /// Destroys the spare proxies (OnUnload).
    pub(crate) fn clear(&self, be: &Backend) {
        for s in std::mem::take(&mut *self.spare.lock()) {
            // SAFETY: our own idle signals.
            unsafe { (be.orig.signal_destroy)(s) };
        }
    }
}

/// What [`retire`] needs to finish one fenced copy.
struct Ticket {
    id: u64,
    gpus: SmallVec<[u32; 2]>,
    app: hsa_signal_t,
    proxy: hsa_signal_t,
    /// The submission failed: retire without signalling the application.
    cancelled: AtomicBool,
}

fn warn_unfenced_once(why: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!("asynchronous copies run unfenced against replay windows: {why}");
    });
}

/// Submits an asynchronous copy through `submit` (which takes the completion signal to use),
/// fenced as the module documentation describes. `app` is the application's completion
/// signal and `deps` its dependency signals.
pub(crate) fn submit_async(
    be: &Backend,
    touched: &[(usize, Option<hsa_agent_t>)],
    app: hsa_signal_t,
    deps: &[hsa_signal_t],
    submit: impl FnOnce(hsa_signal_t) -> hsa_status_t,
) -> hsa_status_t {
    let fence = Fence::take(be, touched);
    be.copies.forget_time(app);
    if fence.gpus.is_empty() || app.handle == 0 {
        return submit(app);
    }
    let Some(register) = be.orig.signal_async_handler else {
        warn_unfenced_once("the runtime has no hsa_amd_signal_async_handler");
        return submit(app);
    };
    let Some(proxy) = be.copies.proxy(be) else {
        warn_unfenced_once("cannot create a signal");
        return submit(app);
    };
    let id = be.copies.next_id.fetch_add(1, Ordering::Relaxed);
    for gpu in &fence.gpus {
        gpu.copies.add(InflightCopy {
            id,
            completion: app.handle,
            deps: deps.iter().map(|d| d.handle).collect(),
        });
    }
    let ticket = Box::into_raw(Box::new(Ticket {
        id,
        gpus: fence.gpus.iter().map(|g| g.index).collect(),
        app,
        proxy,
        cancelled: AtomicBool::new(false),
    }));
    // SAFETY: `proxy` is our live signal; `retire` takes ownership of `ticket` when it runs.
    let st = unsafe {
        register(
            proxy,
            HSA_SIGNAL_CONDITION_LT,
            1,
            Some(retire),
            ticket.cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS {
        // SAFETY: the handler was not registered, so the ticket is still ours.
        drop(unsafe { Box::from_raw(ticket) });
        for gpu in &fence.gpus {
            gpu.copies.retire(id);
        }
        be.copies.spare.lock().push(proxy);
        warn_unfenced_once("hsa_amd_signal_async_handler failed");
        return submit(app);
    }
    let st = submit(proxy);
    if st != HSA_STATUS_SUCCESS {
        // Nothing will complete the proxy: complete it ourselves, telling the handler that
        // the application's signal must not move.
        // SAFETY: the handler runs only once the proxy drops below 1, which nothing but the
        // store below can cause now; until then the ticket is alive.
        unsafe { (*ticket).cancelled.store(true, Ordering::Release) };
        // SAFETY: our live signal.
        unsafe { (be.orig.signal_store)(proxy, 0) };
    }
    st
}

/// Runs on the runtime's async thread when a proxy completes: takes the copy off the lists,
/// keeps its timestamps, signals the application, and recycles the proxy. Called once (it
/// returns `false`, which unregisters it).
unsafe extern "C" fn retire(_value: hsa_signal_value_t, arg: *mut c_void) -> bool {
    // SAFETY: `arg` is the ticket leaked in `submit_async`, handed to us exactly once.
    let ticket = unsafe { Box::from_raw(arg.cast::<Ticket>()) };
    let done = catch_unwind(AssertUnwindSafe(|| {
        let Some(be) = BACKEND.get() else { return };
        for &i in &ticket.gpus {
            if let Some(gpu) = be.gpus.get(i as usize) {
                gpu.copies.retire(ticket.id);
            }
        }
        if !ticket.cancelled.load(Ordering::Acquire) {
            if be.copies.profiling.load(Ordering::Relaxed) {
                let mut time = hsa_amd_profiling_async_copy_time_t::default();
                // SAFETY: our completed proxy signal.
                let st = unsafe { (be.orig.async_copy_time)(ticket.proxy, &mut time) };
                if st == HSA_STATUS_SUCCESS {
                    be.copies.record_time(ticket.app, time);
                }
            }
            // SAFETY: the application's completion signal, decremented once, as the runtime
            // would have when the copy finished.
            unsafe { (be.orig.signal_subtract)(ticket.app, 1) };
        }
        be.copies.spare.lock().push(ticket.proxy);
    }));
    if done.is_err() {
        tracing::error!("internal error (panic) while completing an asynchronous copy");
    }
    false
}

/// Notes whether the application has copy profiling on (timestamps are kept only then).
pub(crate) fn set_profiling(be: &Backend, enabled: bool) {
    be.copies.profiling.store(enabled, Ordering::Relaxed);
}

/// `hsa_amd_profiling_get_async_copy_time` for a fenced copy: the proxy's timestamps.
pub(crate) fn copy_time(
    be: &Backend,
    signal: hsa_signal_t,
) -> Option<hsa_amd_profiling_async_copy_time_t> {
    if !be.copies.has_times.load(Ordering::Relaxed) {
        return None;
    }
    be.copies.times.lock().get(&signal.handle).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(completion: u64, deps: &[u64]) -> InflightCopy {
        InflightCopy {
            id: completion,
            completion,
            deps: deps.iter().copied().collect(),
        }
    }

    const REPLAYED: hsa_signal_t = hsa_signal_t { handle: 100 };

    #[test]
    fn a_copy_without_dependencies_can_run() {
        assert!(any_runnable(&[copy(1, &[])], REPLAYED));
        assert!(!any_runnable(&[], REPLAYED));
    }

    #[test]
    fn copies_waiting_for_the_replayed_dispatch_cannot_run() {
        // 1 waits for the dispatch, 2 for 1, 3 for 2 and 1: none can run during the window.
        let list = [copy(3, &[2, 1]), copy(2, &[1]), copy(1, &[100])];
        assert!(!any_runnable(&list, REPLAYED));
        // One more that waits for an unrelated signal may run.
        let mut list = list.to_vec();
        list.push(copy(4, &[7]));
        assert!(any_runnable(&list, REPLAYED));
    }

    #[test]
    fn without_a_completion_signal_every_copy_counts() {
        let list = [copy(1, &[0]), copy(2, &[])];
        assert!(any_runnable(&list, hsa_signal_t { handle: 0 }));
    }

    #[test]
    fn wait_idle_returns_when_the_last_runnable_copy_retires() {
        let fence = std::sync::Arc::new(CopyFence::default());
        fence.add(copy(1, &[]));
        fence.add(copy(2, &[100]));
        let f = fence.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            f.retire(1);
        });
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        assert!(fence.wait_idle(REPLAYED, deadline));
        t.join().unwrap();
        // Copy 2 waits for the replayed dispatch: still listed, not waited for.
        assert_eq!(fence.inflight.lock().len(), 1);
    }

    #[test]
    fn wait_idle_gives_up_at_the_deadline() {
        let fence = CopyFence::default();
        fence.add(copy(1, &[]));
        let deadline = Instant::now() + std::time::Duration::from_millis(10);
        assert!(!fence.wait_idle(REPLAYED, deadline));
    }
}
