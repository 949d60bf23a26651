//! Copies fenced against replay windows.
//!
//! A replay window must not see device memory change under it (a restore would overwrite the
//! change, or a pass would read it), and a copy must not read memory in the middle of a pass.
//!
//! - **Submission** of a copy that touches a GPU's memory holds that GPU's reader lock
//!   ([`Fence`]), so no copy starts while a window holds the writer lock; a copy submitted
//!   while a window runs waits for it (never goes ahead unprotected).
//! - **Asynchronous copies already submitted** when a window starts are waited for. Each one
//!   that touches a GPU's memory runs with a *proxy* completion signal of ours and is listed in
//!   the GPU's [`CopyFence`]. Our own watcher thread (`rocprof-replay-copies`) waits for the
//!   proxies; when one completes it takes the copy off the lists and then passes the
//!   completion on to the application's signal. The window waits, with the drain deadline,
//!   until nothing on the list can still run. A copy that waits for the dispatch being
//!   replayed (directly, or through another listed copy) cannot run before the window ends, so
//!   it is not waited for.
//! - Completions are never routed through the runtime's asynchronous-event thread: an
//!   application may wait for a copy inside one of its own async handlers, which run there.
//! - `hsa_amd_profiling_get_async_copy_time` on the application's signal answers with the
//!   proxy's timestamps ([`copy_time`]), kept while the application has copy profiling on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLockReadGuard};
use rocprof_replay_sys::*;
use smallvec::SmallVec;

use super::{Backend, Gpu, SignalTimes, intercept};
use crate::engine::state::INVENTORY;

/// The reader locks of the GPUs a copy touches, taken in agent order (so two copies never wait
/// for each other) and held while the copy is submitted or, for a host copy, performed.
pub(crate) struct Fence<'a> {
    gpus: SmallVec<[&'a Gpu; 2]>,
    /// What the operation writes, where known: logged as a range (carried fingerprints of
    /// other allocations still count); `None`: every locked GPU's epoch is bumped.
    written: Option<(usize, usize)>,
    _guards: SmallVec<[RwLockReadGuard<'a, ()>; 2]>,
}

/// The lane of an operation blocked on a window that waits for a signal resolving only after a
/// window's dispatch ([`Fence::take_after`]).
pub(crate) const AFTER_WINDOW: u64 = 1;

impl<'a> Fence<'a> {
    /// Locks the GPUs that `touched` names. An address inside a tracked allocation names its
    /// owner; an untracked one names the agent given with it, if that agent is a GPU (it may
    /// be a module variable of that GPU). Inside a replay window nothing is locked: the window
    /// already holds its agent's writer lock.
    ///
    /// `written` is the destination range (start, bytes) when the operation writes only there
    /// (a linear copy or fill): the write is logged as that range
    /// ([`note_range_write`](crate::engine::footprint::note_range_write)), so fingerprints
    /// carried for the GPU's other allocations still count; `None` invalidates every carried
    /// fingerprint of the GPUs touched.
    pub(crate) fn take(
        be: &'a Backend,
        touched: &[(usize, Option<hsa_agent_t>)],
        written: Option<(usize, usize)>,
    ) -> Fence<'a> {
        Fence::take_after(be, touched, written, &[])
    }

    /// [`take`](Self::take) for an operation that starts once `deps` are 0. While it waits
    /// for a window it is listed as blocked ([`AgentLock::held_up`](crate::engine::agent::AgentLock::held_up)),
    /// on lane [`AFTER_WINDOW`] when one of `deps` resolves only after a window's dispatch (it
    /// cannot be what that dispatch waits for), else on no lane.
    pub(crate) fn take_after(
        be: &'a Backend,
        touched: &[(usize, Option<hsa_agent_t>)],
        written: Option<(usize, usize)>,
        deps: &[hsa_signal_t],
    ) -> Fence<'a> {
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
        // A copy or fill outside any window: carried fingerprints of what it writes no longer
        // count.
        note_write(&gpus, written);
        let lock = be.settings().lock;
        let _guards = gpus
            .iter()
            .map(|g| {
                g.lock.read_outside_window_on(lock, || {
                    g.gates.lock().holds_any(deps).then_some(AFTER_WINDOW)
                })
            })
            .collect();
        Fence {
            gpus,
            written,
            _guards,
        }
    }
}

/// Tells the engine what an operation fenced on `gpus` writes (before it and again after it).
fn note_write(gpus: &[&Gpu], written: Option<(usize, usize)>) {
    if gpus.is_empty() {
        return;
    }
    match written {
        Some((start, len)) => crate::engine::footprint::note_range_write(start, len),
        None => {
            for g in gpus {
                crate::engine::footprint::note_device_write(g.agent.handle);
            }
        }
    }
}

impl Drop for Fence<'_> {
    fn drop(&mut self) {
        // The copy, fill or free was submitted (or done): bumped before and after it, so a
        // window that read the epoch in between sees it changed
        // ([carried fingerprints](crate::engine::footprint#carried-fingerprints)).
        note_write(&self.gpus, self.written);
    }
}

impl<'a> Fence<'a> {
    /// Locks every GPU (outside a replay window): for operations that may affect memory of
    /// any of them, such as destroying an executable whose module variables a window
    /// snapshots.
    pub(crate) fn all(be: &'a Backend) -> Fence<'a> {
        let gpus: SmallVec<[&Gpu; 2]> = if intercept::in_window() {
            SmallVec::new()
        } else {
            be.gpus.iter().collect()
        };
        let lock = be.settings().lock;
        let _guards = gpus
            .iter()
            .map(|g| g.lock.read_outside_window(lock))
            .collect();
        Fence {
            gpus,
            written: None,
            _guards,
        }
    }
}

/// Asynchronous copies in flight that touch one GPU's memory.
#[derive(Default)]
pub(crate) struct CopyFence {
    inflight: Mutex<Vec<InflightCopy>>,
    retired: Condvar,
    /// Copies a drain ran out of time on (ids; locked under `inflight`): while one is still
    /// listed, later drains decline at once instead of each waiting the drain deadline for it.
    stuck: Mutex<SmallVec<[u64; 2]>>,
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
    /// `replayed` finishes. `Err(Held)` at once when a listed copy waits for that dispatch
    /// (directly or through other listed copies): it cannot run during the window, copies
    /// queued behind it on the runtime's in-order copy engines cannot either (their own
    /// dependencies say nothing about that), and neither could the snapshot's own copies.
    /// `Err(TimedOut)` when `deadline` passes first: the copies still runnable then are
    /// remembered, and while one of them is listed later calls return `Err(Stuck)` at once
    /// (a copy that never completes costs one drain deadline, not one per dispatch).
    pub(crate) fn wait_idle(&self, replayed: hsa_signal_t, deadline: Instant) -> Result<(), Busy> {
        let mut list = self.inflight.lock();
        {
            let mut stuck = self.stuck.lock();
            stuck.retain(|id| list.iter().any(|c| c.id == *id));
            if !stuck.is_empty() {
                return Err(Busy::Stuck);
            }
        }
        loop {
            let (runnable, held) = classify(&list, replayed);
            if held {
                return Err(Busy::Held);
            }
            if !runnable {
                return Ok(());
            }
            if self.retired.wait_until(&mut list, deadline).timed_out() {
                let (runnable, held) = classify(&list, replayed);
                return match (runnable, held) {
                    (_, true) => Err(Busy::Held),
                    (true, false) => {
                        *self.stuck.lock() = runnable_ids(&list, replayed);
                        Err(Busy::TimedOut)
                    }
                    (false, false) => Ok(()),
                };
            }
        }
    }
}

/// Why [`CopyFence::wait_idle`] did not leave the GPU free of copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    /// Copies still waiting for the replayed dispatch.
    Held,
    /// Runnable copies outlived the deadline.
    TimedOut,
    /// Copies an earlier call timed out on still run (answered at once).
    Stuck,
}

/// (Whether some copy in `list` may run while the dispatch that signals `replayed` is held
/// back, whether some copy waits for it.) A copy waits for it when it depends on its signal
/// directly or through other listed copies.
fn classify(list: &[InflightCopy], replayed: hsa_signal_t) -> (bool, bool) {
    let held = held_signals(list, replayed);
    let waits = |c: &InflightCopy| c.deps.iter().any(|d| held.contains(d));
    (list.iter().any(|c| !waits(c)), list.iter().any(waits))
}

/// The ids of the copies in `list` that may run while the dispatch that signals `replayed`
/// is held back.
fn runnable_ids(list: &[InflightCopy], replayed: hsa_signal_t) -> SmallVec<[u64; 2]> {
    let held = held_signals(list, replayed);
    list.iter()
        .filter(|c| !c.deps.iter().any(|d| held.contains(d)))
        .map(|c| c.id)
        .collect()
}

/// `replayed` and the completion signals of the copies in `list` that wait for it, directly
/// or through other listed copies.
fn held_signals(list: &[InflightCopy], replayed: hsa_signal_t) -> SmallVec<[u64; 4]> {
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
    held
}

/// Whether some copy in `list` may still run while the dispatch that signals `replayed` is
/// held back.
#[cfg(test)]
fn any_runnable(list: &[InflightCopy], replayed: hsa_signal_t) -> bool {
    classify(list, replayed).0
}

/// What retiring one fenced copy needs.
struct Ticket {
    id: u64,
    gpus: SmallVec<[u32; 2]>,
    app: hsa_signal_t,
    proxy: hsa_signal_t,
}

/// Process-wide bookkeeping of fenced asynchronous copies.
#[derive(Default)]
pub(crate) struct CopyTracker {
    next_id: AtomicU64,
    /// Proxy signals ready for reuse.
    spare: Mutex<Vec<hsa_signal_t>>,
    /// Application signal -> timestamps of its last fenced copy (only when the runtime
    /// recorded them, i.e. copy profiling is on).
    times: OnceLock<SignalTimes<hsa_amd_profiling_async_copy_time_t>>,
    /// The application turned copy profiling on (`hsa_amd_profiling_async_copy_enable`).
    profiling: AtomicBool,
    watcher: OnceLock<Option<Arc<Watcher>>>,
}

/// The thread that waits for proxy signals and retires their copies.
struct Watcher {
    /// Copies whose proxies have not completed yet.
    tickets: Mutex<Vec<Ticket>>,
    /// Raised (non-zero) when `tickets` grew or the thread must stop.
    wake: hsa_signal_t,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl CopyTracker {
    fn times(&self) -> &SignalTimes<hsa_amd_profiling_async_copy_time_t> {
        self.times.get_or_init(SignalTimes::new)
    }

    /// A proxy signal with value 1.
    fn proxy(&self, be: &Backend) -> Option<hsa_signal_t> {
        if let Some(s) = self.spare.lock().pop() {
            // SAFETY: one of our proxy signals, no longer referenced by any copy or ticket.
            unsafe { (be.orig.signal_store)(s, 1) };
            return Some(s);
        }
        let mut s = hsa_signal_t::default();
        // SAFETY: creating a plain signal with no consumer list.
        let st = unsafe { (be.orig.signal_create)(1, 0, std::ptr::null(), &mut s) };
        (st == HSA_STATUS_SUCCESS).then_some(s)
    }

    /// The watcher thread, started on first use; `None` when it cannot run.
    fn watcher(&self, be: &'static Backend) -> Option<&Arc<Watcher>> {
        self.watcher
            .get_or_init(|| {
                let wait_any = be.orig.signal_wait_any?;
                let mut wake = hsa_signal_t::default();
                // SAFETY: creating a plain signal with no consumer list.
                let st = unsafe { (be.orig.signal_create)(0, 0, std::ptr::null(), &mut wake) };
                if st != HSA_STATUS_SUCCESS {
                    return None;
                }
                let watcher = Arc::new(Watcher {
                    tickets: Mutex::new(Vec::new()),
                    wake,
                    stop: AtomicBool::new(false),
                    thread: Mutex::new(None),
                });
                let w = watcher.clone();
                let spawned = std::thread::Builder::new()
                    .name("rocprof-replay-copies".into())
                    .spawn(move || watch(be, &w, wait_any));
                match spawned {
                    Ok(handle) => {
                        *watcher.thread.lock() = Some(handle);
                        Some(watcher)
                    }
                    Err(_) => {
                        // SAFETY: our signal; no thread uses it.
                        unsafe { (be.orig.signal_destroy)(wake) };
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Stops the watcher (retiring what already completed) and destroys the spare proxies
    /// (OnUnload).
    pub(crate) fn shutdown(&self, be: &Backend) {
        if let Some(Some(w)) = self.watcher.get() {
            w.stop.store(true, Ordering::Release);
            // SAFETY: our live signal.
            unsafe { (be.orig.signal_store)(w.wake, 1) };
            if let Some(handle) = w.thread.lock().take() {
                let _ = handle.join();
            }
        }
        for s in std::mem::take(&mut *self.spare.lock()) {
            // SAFETY: our own idle signals.
            unsafe { (be.orig.signal_destroy)(s) };
        }
    }
}

/// The watcher's loop: wait for any proxy (or the wake signal), retire what completed.
fn watch(be: &Backend, w: &Watcher, wait_any: hsa_amd_signal_wait_any_fn_t) {
    let slice = be.ticks(Duration::from_millis(200));
    let mut signals: Vec<hsa_signal_t> = Vec::new();
    let mut conds: Vec<hsa_signal_condition_t> = Vec::new();
    let mut values: Vec<hsa_signal_value_t> = Vec::new();
    loop {
        // Lower the wake flag before reading the list: a ticket pushed after this raises it
        // again, so the next wait returns at once.
        // SAFETY: our live signal.
        unsafe { (be.orig.signal_store)(w.wake, 0) };
        let stop = w.stop.load(Ordering::Acquire);
        let done = {
            let mut tickets = w.tickets.lock();
            let mut done = Vec::new();
            let mut i = 0;
            while i < tickets.len() {
                // SAFETY: a live proxy signal of ours.
                if unsafe { (be.orig.signal_load)(tickets[i].proxy) } < 1 {
                    done.push(tickets.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            signals.clear();
            conds.clear();
            values.clear();
            signals.push(w.wake);
            conds.push(HSA_SIGNAL_CONDITION_NE);
            values.push(0);
            for t in tickets.iter() {
                signals.push(t.proxy);
                conds.push(HSA_SIGNAL_CONDITION_LT);
                values.push(1);
            }
            done
        };
        for ticket in done {
            retire(be, ticket);
        }
        if stop {
            return;
        }
        let mut value = 0;
        // SAFETY: the arrays hold `signals.len()` live signals of ours with their conditions;
        // the wait is bounded by `slice`.
        unsafe {
            wait_any(
                signals.len() as u32,
                signals.as_mut_ptr(),
                conds.as_mut_ptr(),
                values.as_mut_ptr(),
                slice,
                HSA_WAIT_STATE_BLOCKED,
                &mut value,
            )
        };
    }
}

fn warn_unfenced_once(why: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!("asynchronous copies run unfenced against replay windows: {why}");
    });
}

/// Submits an asynchronous copy through `submit` (which takes the completion signal to use),
/// fenced as the module documentation describes. `app` is the application's completion
/// signal and `deps` its dependency signals; `written` is the destination range where the
/// copy writes only there ([`Fence::take`]). An internal panic before the copy was submitted
/// submits it unfenced; after, it returns the runtime's status.
pub(crate) fn submit_async(
    be: &'static Backend,
    touched: &[(usize, Option<hsa_agent_t>)],
    written: Option<(usize, usize)>,
    app: hsa_signal_t,
    deps: &[hsa_signal_t],
    submit: impl FnOnce(hsa_signal_t) -> hsa_status_t,
) -> hsa_status_t {
    let submit = std::cell::Cell::new(Some(submit));
    let status = std::cell::Cell::new(None);
    let once = |completion| match submit.take() {
        Some(f) => {
            let st = f(completion);
            status.set(Some(st));
            st
        }
        None => HSA_STATUS_ERROR,
    };
    match catch_unwind(AssertUnwindSafe(|| {
        fenced(be, touched, written, app, deps, once)
    })) {
        Ok(st) => st,
        Err(_) => {
            tracing::error!("internal error (panic) while fencing an asynchronous copy");
            match (status.get(), submit.take()) {
                (Some(st), _) => st,
                (None, Some(f)) => f(app),
                (None, None) => HSA_STATUS_ERROR,
            }
        }
    }
}

fn fenced(
    be: &'static Backend,
    touched: &[(usize, Option<hsa_agent_t>)],
    written: Option<(usize, usize)>,
    app: hsa_signal_t,
    deps: &[hsa_signal_t],
    submit: impl FnOnce(hsa_signal_t) -> hsa_status_t,
) -> hsa_status_t {
    let fence = Fence::take_after(be, touched, written, deps);
    be.copies.times().forget(app);
    if fence.gpus.is_empty() {
        return submit(app);
    }
    let fencing = if app.handle == 0 {
        Err("a copy without a completion signal")
    } else {
        be.copies
            .watcher(be)
            .ok_or("the completion watcher cannot run (no hsa_amd_signal_wait_any?)")
    };
    let fencing = fencing.and_then(|w| {
        be.copies
            .proxy(be)
            .map(|p| (w, p))
            .ok_or("cannot create a signal")
    });
    let (watcher, proxy) = match fencing {
        Ok(fencing) => fencing,
        Err(why) => {
            // A copy that runs unfenced cannot be waited for by later windows of its GPUs:
            // those decline from now on (`Gpu::copy_unfenced`) rather than let it run during
            // one.
            warn_unfenced_once(why);
            let st = submit(app);
            if st == HSA_STATUS_SUCCESS {
                fence.gpus.iter().for_each(|g| g.copy_unfenced());
            }
            return st;
        }
    };
    let id = be.copies.next_id.fetch_add(1, Ordering::Relaxed);
    for gpu in &fence.gpus {
        gpu.copies.add(InflightCopy {
            id,
            completion: app.handle,
            deps: deps.iter().map(|d| d.handle).collect(),
        });
    }
    let st = submit(proxy);
    if st != HSA_STATUS_SUCCESS {
        // Nothing will complete the proxy: take the copy off the lists, leave `app` alone.
        for gpu in &fence.gpus {
            gpu.copies.retire(id);
        }
        be.copies.spare.lock().push(proxy);
        return st;
    }
    watcher.tickets.lock().push(Ticket {
        id,
        gpus: fence.gpus.iter().map(|g| g.index).collect(),
        app,
        proxy,
    });
    // SAFETY: our live signal; wakes the watcher to include the new proxy.
    unsafe { (be.orig.signal_store)(watcher.wake, 1) };
    st
}

/// Runs on the watcher thread when a proxy completed: takes the copy off the lists, keeps its
/// timestamps, signals the application, and recycles the proxy.
fn retire(be: &Backend, ticket: Ticket) {
    let done = catch_unwind(AssertUnwindSafe(|| {
        for &i in &ticket.gpus {
            if let Some(gpu) = be.gpus.get(i as usize) {
                gpu.copies.retire(ticket.id);
            }
        }
        if be.copies.profiling.load(Ordering::Relaxed) {
            let mut time = hsa_amd_profiling_async_copy_time_t::default();
            // SAFETY: our completed proxy signal.
            let st = unsafe { (be.orig.async_copy_time)(ticket.proxy, &mut time) };
            if st == HSA_STATUS_SUCCESS {
                be.copies.times().record(ticket.app, time);
            }
        }
    }));
    if done.is_err() {
        tracing::error!("internal error (panic) while completing an asynchronous copy");
    }
    // The application's signal gets what the runtime did to the proxy (which started at 1): a
    // decrement by one when the copy succeeded, the same fall below 0 when the runtime
    // reported an error through the signal — whatever happened above.
    // SAFETY: our completed proxy signal.
    let end = unsafe { (be.orig.signal_load)(ticket.proxy) };
    let delta = mirrored_decrement(end);
    if delta != 1 {
        tracing::warn!(
            value = end,
            "an asynchronous copy completed with an error value; the application's signal gets it"
        );
    }
    // SAFETY: the application's completion signal, changed once, as the runtime would have
    // when the copy finished.
    unsafe { (be.orig.signal_subtract)(ticket.app, delta) };
    be.copies.spare.lock().push(ticket.proxy);
}

/// What to subtract from the application's signal for a proxy that started at 1 and ended at
/// `end` (the watcher retires a proxy only once it fell below 1): the proxy's own fall, so an
/// error value the runtime left in the proxy reaches the application as it would have.
fn mirrored_decrement(end: hsa_signal_value_t) -> hsa_signal_value_t {
    1i64.saturating_sub(end).max(1)
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
    be.copies.times.get()?.get(signal)
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
    fn the_application_signal_falls_as_far_as_the_proxy_did() {
        assert_eq!(mirrored_decrement(0), 1, "a successful copy");
        assert_eq!(
            mirrored_decrement(-1),
            2,
            "an error value of -1 from a signal at 1"
        );
        assert_eq!(mirrored_decrement(i64::MIN), i64::MAX);
    }

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
        let f = fence.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            f.retire(1);
        });
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        assert_eq!(fence.wait_idle(REPLAYED, deadline), Ok(()));
        t.join().unwrap();
        assert!(fence.inflight.lock().is_empty());
    }

    #[test]
    fn a_copy_waiting_for_the_replayed_dispatch_is_reported_at_once() {
        // Copy 2 waits for the dispatch; copy 1 may be queued behind it on an in-order engine,
        // so it is not waited for either: the answer comes without waiting.
        let fence = CopyFence::default();
        fence.add(copy(2, &[100]));
        fence.add(copy(1, &[]));
        let start = Instant::now();
        let deadline = start + std::time::Duration::from_secs(30);
        assert_eq!(fence.wait_idle(REPLAYED, deadline), Err(Busy::Held));
        // Not a speed check: waiting for copy 1 would take the whole 30 s deadline.
        assert!(start.elapsed() < std::time::Duration::from_secs(15));
        fence.retire(2);
        fence.retire(1);
        assert_eq!(fence.wait_idle(REPLAYED, deadline), Ok(()));
    }

    #[test]
    fn wait_idle_gives_up_at_the_deadline() {
        let fence = CopyFence::default();
        fence.add(copy(1, &[]));
        let deadline = Instant::now() + std::time::Duration::from_millis(10);
        assert_eq!(fence.wait_idle(REPLAYED, deadline), Err(Busy::TimedOut));
    }

    #[test]
    fn a_copy_a_drain_timed_out_on_is_answered_at_once_until_it_retires() {
        let fence = CopyFence::default();
        fence.add(copy(1, &[]));
        // Copy 2 waits for the replayed dispatch: not what the drain timed out on.
        fence.add(copy(2, &[100]));
        fence.retire(2);
        let deadline = Instant::now() + std::time::Duration::from_millis(10);
        assert_eq!(fence.wait_idle(REPLAYED, deadline), Err(Busy::TimedOut));
        // Not a speed check: the next call would otherwise wait its whole 30 s deadline.
        let start = Instant::now();
        let long = start + std::time::Duration::from_secs(30);
        assert_eq!(fence.wait_idle(REPLAYED, long), Err(Busy::Stuck));
        assert!(start.elapsed() < std::time::Duration::from_secs(15));
        // A copy listed later is waited for as usual once the stuck one retired.
        fence.add(copy(3, &[]));
        fence.retire(1);
        let short = Instant::now() + std::time::Duration::from_millis(10);
        assert_eq!(fence.wait_idle(REPLAYED, short), Err(Busy::TimedOut));
        fence.retire(3);
        assert_eq!(fence.wait_idle(REPLAYED, long), Ok(()));
        assert!(fence.stuck.lock().is_empty());
    }
}
