//! Work of one context that may reach another's memory: stream work held off a replay window
//! of the contexts it may write (the reader side of their window locks), and the events that
//! let a later window of the owner drain it (owner fencing across the contexts of the
//! process).

use super::*;
use crate::cuda::api::{CU_STREAM_WAIT_VALUE_GEQ, error_name};

impl Backend {
    /// Holds stream work off a replay window of its context: the reader side, from the
    /// call's enter callback to its exit callback.
    pub(super) fn hold_off_window(&self, cb: &CUpti_CallbackData) {
        // Work that may write device memory, outside any window (a copy may write another
        // context's memory: all of them).
        self.hold_off_window_writing(
            cb,
            || [Some(None); 2],
            || None,
            || None,
            crate::engine::footprint::note_device_write_all,
        );
    }

    /// [`hold_off_window`](Self::hold_off_window) for work that may reach `ranges`: what it
    /// writes and what it reads (as [`Writes::ranges`](writes::Writes::ranges) says; asked at
    /// enter). The reader side of its own context and of every other context whose memory it
    /// may write or read (a read inside a window could see a pass's or a restore's state),
    /// taken in the order of the contexts' handles (so two threads holding each other's contexts never wait in a
    /// cycle). At exit, before those are released, an event recorded behind the work on its
    /// `stream` (asked only then, and only if other contexts are held; `None`: not decoded;
    /// also asked at enter where the work must wait, for [`AgentLock::held_up`]) goes to each
    /// other context, whose next drain waits for it (a restore must neither undo
    /// the work's writes nor change what it reads). `note` tells the engine what the work
    /// writes, before the call and again after it.
    ///
    /// Work that reaches no other context and whose call returns without waiting for its
    /// stream (`ordered`, asked only while an asynchronous window of the context offers its
    /// gate: the stream, or `None`) does not wait for that window: it is enqueued behind the
    /// window's gate on its stream ([`order_behind_window`](Self::order_behind_window)), and
    /// runs once the window is over, as it would have had its call waited.
    pub(super) fn hold_off_window_writing(
        &self,
        cb: &CUpti_CallbackData,
        ranges: impl FnOnce() -> [Option<Option<(usize, usize)>>; 2],
        stream: impl Fn() -> Option<usize>,
        ordered: impl FnOnce() -> Option<usize>,
        note: impl Fn(),
    ) {
        let (call, ctx_handle) = (cb.correlationId, cb.context as usize);
        if cb.callbackSite == CUPTI_API_ENTER {
            note();
            let mut held = self.contexts_reached(ctx_handle, &ranges());
            let own = self.ctx(ctx_handle);
            let alone = held.is_empty();
            // The stream it could be ordered on, decoded once, when first needed.
            let mut ordered = Some(ordered);
            let mut on: Option<Option<usize>> = None;
            let mut order = || {
                if !alone || !own.window_gate.offered() {
                    return false;
                }
                let s = *on.get_or_insert_with(|| ordered.take().and_then(|f| f()));
                self.order_behind_window(&own, || s)
            };
            if order() {
                if tracing::enabled!(tracing::Level::DEBUG) && !cb.functionName.is_null() {
                    // SAFETY: CUPTI's NUL-terminated name of the call.
                    let name = unsafe { std::ffi::CStr::from_ptr(cb.functionName) };
                    tracing::debug!(
                        call = %name.to_string_lossy(),
                        "stream work ordered behind the window's gate on the device: its call \
                         goes on"
                    );
                }
                // No reader held: the exit callback finds none to release.
                return;
            }
            held.push(ctx_handle);
            held.sort_unstable();
            held.dedup();
            for c in held {
                let c = if c == ctx_handle {
                    own.clone()
                } else {
                    self.ctx(c)
                };
                // Its stream, if it must wait: a first pass waiting for this work gives way.
                // Work of this context alone that waits for a window still draining (whose
                // gate is not offered yet: its launch was deferred) is ordered behind the gate
                // once it is, rather than waiting for the whole window.
                if alone {
                    if !c.lock.hold_outside_window_unless(
                        self.settings.lock,
                        || stream().map(lane),
                        &mut order,
                    ) {
                        return;
                    }
                } else {
                    c.lock
                        .hold_outside_window_on(self.settings.lock, || stream().map(lane));
                }
                if let Err(c) = READERS
                    .try_with(|r| r.borrow_mut().push((call, c.clone())))
                    .map_err(|_| c)
                {
                    // The thread is exiting: no exit callback could release it.
                    // SAFETY: the reader just held.
                    unsafe { c.lock.release_held() };
                }
            }
            return;
        }
        // The contexts the enter callback held (the very objects, even if one was destroyed
        // meanwhile), newest last.
        let held: SmallVec<[Arc<Ctx>; 2]> = READERS
            .try_with(|r| {
                let mut r = r.borrow_mut();
                let mut out = SmallVec::new();
                while let Some(i) = r.iter().rposition(|(id, _)| *id == call) {
                    out.push(r.remove(i).1);
                }
                out
            })
            .unwrap_or_default();
        if held.is_empty() {
            return;
        }
        note();
        let others = held.iter().filter(|c| c.handle != ctx_handle);
        if let Some(first) = others.clone().next() {
            match stream() {
                Some(stream) => {
                    for owner in others {
                        self.mark_foreign_work(ctx_handle, owner, stream);
                    }
                }
                None => tracing::debug!(
                    context = first.handle,
                    "work of another context that may reach this context's memory is on a \
                     stream the backend does not decode: held off windows while submitted, \
                     not waited for by their drains"
                ),
            }
        }
        for c in held {
            // SAFETY: the reader this call's enter callback held on this very context
            // (recorded in READERS).
            unsafe { c.lock.release_held() };
        }
    }

    /// Enqueues a wait for the gate of the asynchronous window holding `ctx` on the stream
    /// `ordered` names (asked only when a window offers its gate), so that the application's
    /// work enqueued there next runs once that window is over, and its call need not wait for
    /// the window. The work is listed as waiting for the window on that lane
    /// ([`AgentLock::ordered_behind`]): a first pass that may wait for it gives way as for
    /// work waiting at the host. `false` (the call must wait at the host) when no gate is
    /// offered, the work is not such work, the stream is capturing (the work would only become
    /// a graph node; the wait would too), or the wait cannot be enqueued.
    pub(super) fn order_behind_window(
        &self,
        ctx: &Ctx,
        ordered: impl FnOnce() -> Option<usize>,
    ) -> bool {
        if !ctx.window_gate.offered() || !self.streams_have_own_connections(ctx) {
            return false;
        }
        let Some(stream) = ordered() else {
            return false;
        };
        let Some(wait) = self.drv.stream_wait_value32 else {
            return false;
        };
        let _g = Guard::new();
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the application's stream, on the thread enqueueing work into it.
        let r = unsafe { (self.drv.stream_is_capturing)(stream as CUstream, &mut status) };
        if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
            return false;
        }
        let enqueued = ctx.window_gate.order_behind(|addr, value| {
            // SAFETY: the application's stream, of the current context; the word is mapped
            // memory of ours that lives for the process.
            unsafe { wait(stream as CUstream, addr, value, CU_STREAM_WAIT_VALUE_GEQ) }
        });
        match enqueued {
            Some(CUDA_SUCCESS) => {
                ctx.lock.ordered_behind(Some(lane(stream)));
                true
            }
            Some(r) => {
                tracing::debug!(
                    status = %error_name(&self.drv, r),
                    "stream work could not be ordered behind a window on the device: its call \
                     waits for the window"
                );
                false
            }
            // The window ended meanwhile.
            None => false,
        }
    }

    /// Whether every stream of `ctx` may have a hardware connection of its own: the streams
    /// created in it so far, and the legacy and a per-thread default stream (which have no
    /// creation callback), are no more than the GPU's connections. A stream memory wait holds
    /// its stream's connection: where streams share connections, a gate on an application
    /// stream could hold the window's own stream (its restores and relaunches) behind a gate
    /// that opens only after them.
    pub(crate) fn streams_have_own_connections(&self, ctx: &Ctx) -> bool {
        ctx.streams_created
            .load(Ordering::Relaxed)
            .saturating_add(2)
            <= self.connections
    }

    /// Whether `[addr, addr + len)` is memory a copy does not stage: device memory the
    /// backend knows (an allocation, an import, a mapping) or page-locked host memory
    /// (pinned, registered, managed).
    pub(crate) fn locked(&self, addr: usize, len: usize) -> bool {
        let last = addr.saturating_add(len.saturating_sub(1));
        let known = |a: usize| {
            self.inventory.origin_of(a).is_some()
                || self.host_memory.read().containing(a).is_some()
                || self.foreign_memory.read().containing(a).is_some()
        };
        known(addr) && known(last)
    }

    /// The other contexts of the process whose memory work of `own` may reach through its
    /// `ranges` (a destination, a source): the owner of each end of a decoded range
    /// (`Some(Some(range))`); none for a range of no device memory (`Some(None)`); every other
    /// context that owns an allocation when a range is not decoded (`None`). Empty, at the
    /// cost of one read lock, where the process has one context.
    pub(crate) fn contexts_reached(
        &self,
        own: usize,
        ranges: &[Option<Option<(usize, usize)>>],
    ) -> SmallVec<[usize; 2]> {
        if ranges.iter().any(Option::is_none) {
            let contexts = self.contexts.read();
            if contexts.len() <= 1 {
                return SmallVec::new();
            }
            return contexts
                .keys()
                .copied()
                .filter(|&c| c != own && self.inventory.owns_any(crate::AgentId(c as u64)))
                .collect();
        }
        let ends = ranges
            .iter()
            .flatten()
            .flatten()
            .flat_map(|&(start, len)| [start, start.saturating_add(len.saturating_sub(1))]);
        self.contexts_owning(own, ends)
    }

    /// The other live contexts of the process owning the allocations `addrs` point into, each
    /// once. Empty, at the cost of one read lock, where the process has one context.
    pub(crate) fn contexts_owning(
        &self,
        own: usize,
        addrs: impl IntoIterator<Item = usize>,
    ) -> SmallVec<[usize; 2]> {
        let mut out = SmallVec::new();
        let contexts = self.contexts.read();
        if contexts.len() <= 1 {
            return out;
        }
        for addr in addrs {
            if let Some(owner) = self.inventory.agent_of(addr) {
                let owner = owner.0 as usize;
                if owner != own && contexts.contains_key(&owner) && !out.contains(&owner) {
                    out.push(owner);
                }
            }
        }
        out
    }

    /// Records an event of context `own` (current on this thread) behind the work just
    /// enqueued on `stream`, for the next drain of context `owner`, whose memory the work may
    /// write or read. A capturing stream executes nothing now: no event.
    pub(crate) fn mark_foreign_work(&self, own: usize, owner: &Ctx, stream: usize) {
        if !self.contexts.read().contains_key(&owner.handle) {
            // Destroyed meanwhile: no drain of it will come.
            return;
        }
        let _g = Guard::new();
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the application's stream, on the thread that just used it.
        let r = unsafe { (self.drv.stream_is_capturing)(stream as CUstream, &mut status) };
        if r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE {
            return;
        }
        let ctx = self.ctx(own);
        let ev = window::record_marker(self, &ctx, stream as CUstream);
        if ev == 0 {
            self.wait_for_unmarked_foreign_work(owner, stream);
            return;
        }
        window::prune_foreign(self, owner);
        owner.foreign.lock().push((ev, own));
    }

    /// [`mark_foreign_work`](Self::mark_foreign_work) without an event (none could be
    /// made or recorded): the work is waited for here, on the submitting thread, while the
    /// owner is still held (no window of it starts meanwhile), at most the drain deadline. Work
    /// still running then marks the owner's [`undrainable`](Ctx::undrainable) unfenced.
    pub(super) fn wait_for_unmarked_foreign_work(&self, owner: &Ctx, stream: usize) {
        let deadline = Instant::now() + self.settings.drain;
        // SAFETY: the application's stream, on the thread that just used it.
        let r = window::poll(deadline, || unsafe {
            (self.drv.stream_query)(stream as CUstream)
        });
        if matches!(r, window::Poll::Done) {
            tracing::debug!(
                context = owner.handle,
                "no event behind work of another context that may reach this context's memory: \
                 waited for it at submission"
            );
            return;
        }
        if owner.undrainable.mark_unfenced() {
            tracing::warn!(
                context = owner.handle,
                "work of another context that may reach this context's memory got no event \
                 behind it and did not finish within the drain deadline: this context's \
                 kernels are no longer replayed (queue_not_drainable)"
            );
        }
    }
}

/// The GPU's hardware connections per context from `CUDA_DEVICE_MAX_CONNECTIONS` (the
/// driver's default, 8, when unset or not a number; at most 32).
pub(crate) fn connections(setting: Option<&str>) -> u32 {
    setting
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| n > 0)
        .map_or(8, |n| n.min(32))
}

/// The lane ([`crate::engine::agent::AgentLock`]'s name for a stream) of stream
/// `stream` as the calling thread names it. Streams are their handles, but
/// `CU_STREAM_PER_THREAD` names each thread's own per-thread default stream: its lane is one
/// per thread (the top bit set, so no handle is mistaken for it), so that work on another
/// thread's per-thread stream counts as work on another stream. Called on the application
/// thread that named the stream.
pub(crate) fn lane(stream: usize) -> u64 {
    if stream != CU_STREAM_PER_THREAD {
        return stream as u64;
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    thread_local! {
        static PER_THREAD: u64 =
            (1 << 63) | NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    PER_THREAD.try_with(|l| *l).unwrap_or(1 << 63)
}
