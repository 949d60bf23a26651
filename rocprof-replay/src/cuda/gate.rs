//! Gates: words of pinned, mapped host memory that hold a stream back
//! (`cuStreamWaitValue32`) until the backend opens them.
//!
//! An asynchronous window puts a gate on the application's stream after the original launch
//! (pass 1): the launch call returns, and the application's later work on the stream — its
//! events, queries, host functions, kernels — waits behind the gate until the window is over.
//! Timed passes put one in front of the kernel on the stream they run in: the start event,
//! the kernel and the end event are enqueued behind it and the gate opens only then, so the
//! events bracket the kernel and not the launch latency.
//!
//! Each context has one page of [`SLOTS`] words. A gate takes a free slot and waits until the
//! word reaches the slot's next value (`CU_STREAM_WAIT_VALUE_GEQ`, a cyclic comparison); it
//! opens with a host store of that value. Words only grow, so a wait the GPU has not yet
//! evaluated when its slot is reused is satisfied all the same. A [`Gate`] opens exactly
//! once: [`Gate::open`] consumes it and dropping it opens it, so no path (an error, a
//! timeout, a panic unwinding through the backend) leaves a stream held. The one exception is
//! deliberate: [`Gate::open_after`] hands the opening to a stream whose work is still running
//! (a late replay pass), so that the application's stream stays ordered after it.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rocprof_replay_sys::cuda::*;

use super::api::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_STREAM_WAIT_VALUE_GEQ, CUDA_ERROR_NOT_SUPPORTED, Driver,
    error_name,
};

/// Gates per context page (4 KiB of words).
pub(crate) const SLOTS: usize = 1024;

/// One context's page of gate words.
pub(crate) struct GatePage {
    /// The words, as the host sees them.
    host: *mut u32,
    /// The same words, as the device addresses them.
    device: CUdeviceptr,
    free: Mutex<Vec<u16>>,
    /// Gates taken and gates opened (by the host or handed to a stream), for tests and logs.
    taken: AtomicU64,
    opened: AtomicU64,
}

// SAFETY: `host` is pinned memory of ours that lives for the process (never freed: streams
// may still wait on it); every access is a volatile word access.
unsafe impl Send for GatePage {}
// SAFETY: as above; the free list is locked.
unsafe impl Sync for GatePage {}

impl GatePage {
    /// Allocates a page in the current context (the caller holds a `Guard`). `None`: the
    /// driver offers no stream memory operations or mapped memory; windows stay synchronous.
    pub(crate) fn new(drv: &Driver) -> Option<GatePage> {
        let get_device_pointer = drv.mem_host_get_device_pointer?;
        drv.stream_wait_value32?;
        let mut p: *mut c_void = std::ptr::null_mut();
        let bytes = SLOTS * size_of::<u32>();
        // SAFETY: a plain out-parameter.
        let r = unsafe {
            (drv.mem_host_alloc)(
                &mut p,
                bytes,
                CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP,
            )
        };
        if r != CUDA_SUCCESS || p.is_null() {
            tracing::debug!(status = %error_name(drv, r), "no mapped host page for gates");
            return None;
        }
        // SAFETY: `bytes` bytes of ours, just allocated.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        let mut device: CUdeviceptr = 0;
        // SAFETY: a plain out-parameter; `p` is mapped memory of ours.
        let r = unsafe { get_device_pointer(&mut device, p, 0) };
        if r != CUDA_SUCCESS || device == 0 {
            tracing::debug!(status = %error_name(drv, r), "gate page has no device address");
            // SAFETY: ours, used by nothing yet.
            unsafe { (drv.mem_free_host)(p) };
            return None;
        }
        Some(GatePage {
            host: p.cast(),
            device,
            free: Mutex::new((0..SLOTS as u16).rev().collect()),
            taken: AtomicU64::new(0),
            opened: AtomicU64::new(0),
        })
    }

    /// Checks once, on a stream of its own, that a gate of this page holds a stream and that
    /// the device sees the host store that opens it (within `limit`). `false`: gates are not
    /// used in this context (windows stay synchronous), so a store the device never saw cannot
    /// leave an application's stream held. The stream is left to the context (it may still
    /// wait on the page, which is never freed either).
    pub(crate) fn works(page: &Arc<GatePage>, drv: &Driver, limit: Duration) -> bool {
        let mut stream: CUstream = std::ptr::null_mut();
        // SAFETY: a plain out-parameter; the context is current.
        let r = unsafe { (drv.stream_create)(&mut stream, CU_STREAM_NON_BLOCKING) };
        if r != CUDA_SUCCESS || stream.is_null() {
            return false;
        }
        let mut ev: CUevent = std::ptr::null_mut();
        // SAFETY: a plain out-parameter.
        let r = unsafe { (drv.event_create)(&mut ev, CU_EVENT_DISABLE_TIMING) };
        if r != CUDA_SUCCESS || ev.is_null() {
            return false;
        }
        let Some(gate) = Gate::take(page) else {
            return false;
        };
        if gate.hold(drv, stream) != CUDA_SUCCESS {
            return false;
        }
        // SAFETY: our event and stream.
        if unsafe { (drv.event_record)(ev, stream) } != CUDA_SUCCESS {
            return false;
        }
        // SAFETY: our recorded event.
        let held = unsafe { (drv.event_query)(ev) } == CUDA_ERROR_NOT_READY;
        gate.open();
        let deadline = Instant::now() + limit;
        let seen = loop {
            // SAFETY: as above.
            match unsafe { (drv.event_query)(ev) } {
                CUDA_SUCCESS => break true,
                CUDA_ERROR_NOT_READY if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(50))
                }
                _ => break false,
            }
        };
        if !(held && seen) {
            tracing::warn!(
                held,
                seen,
                "a stream memory wait on mapped host memory does not work here: launches wait \
                 for their replay windows"
            );
        }
        held && seen
    }

    /// Gates taken and opened so far.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.taken.load(Ordering::Acquire),
            self.opened.load(Ordering::Acquire),
        )
    }

    fn word(&self, slot: u16) -> *mut u32 {
        // SAFETY: `slot < SLOTS`, inside the page.
        unsafe { self.host.add(usize::from(slot)) }
    }
}

/// A closed gate: one slot and the value that opens it.
pub(crate) struct Gate {
    page: Arc<GatePage>,
    slot: u16,
    value: u32,
    open: bool,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gate(slot {}, value {})", self.slot, self.value)
    }
}

impl Gate {
    /// A closed gate of `page`; `None` when every slot is in use.
    pub(crate) fn take(page: &Arc<GatePage>) -> Option<Gate> {
        let slot = page.free.lock().pop()?;
        // SAFETY: our word; only the host writes it.
        let current = unsafe { std::ptr::read_volatile(page.word(slot)) };
        page.taken.fetch_add(1, Ordering::AcqRel);
        Some(Gate {
            page: Arc::clone(page),
            slot,
            value: current.wrapping_add(1),
            open: false,
        })
    }

    /// The word's device address.
    pub(crate) fn addr(&self) -> CUdeviceptr {
        self.page.device + (usize::from(self.slot) * size_of::<u32>()) as CUdeviceptr
    }

    /// Holds `stream` behind the gate: its work enqueued from now on waits until the gate
    /// opens. The caller holds a `Guard` (the call is the backend's own, not the
    /// application's stream memory wait).
    pub(crate) fn hold(&self, drv: &Driver, stream: CUstream) -> CUresult {
        let Some(wait) = drv.stream_wait_value32 else {
            return CUDA_ERROR_NOT_SUPPORTED;
        };
        // SAFETY: a stream of the current context; the word is mapped memory of ours that
        // lives for the process.
        unsafe { wait(stream, self.addr(), self.value, CU_STREAM_WAIT_VALUE_GEQ) }
    }

    /// The value the word must reach for the gate to open.
    pub(crate) fn value(&self) -> u32 {
        self.value
    }

    /// Opens the gate now (a host store).
    pub(crate) fn open(mut self) {
        self.open_now();
    }

    fn open_now(&mut self) {
        if self.open {
            return;
        }
        self.open = true;
        // SAFETY: our word.
        unsafe { std::ptr::write_volatile(self.page.word(self.slot), self.value) };
        std::sync::atomic::fence(Ordering::SeqCst);
        self.page.opened.fetch_add(1, Ordering::AcqRel);
        self.page.free.lock().push(self.slot);
    }

    /// Opens the gate when the work already enqueued on `stream` is done
    /// (`cuStreamWriteValue32` there): the stream of a replay pass still running after every
    /// deadline, so that the application's stream stays ordered after it. Falls back to
    /// opening now when the write cannot be enqueued. The slot is never reused (the GPU's
    /// store is still to come). The caller holds a `Guard`.
    pub(crate) fn open_after(mut self, drv: &Driver, stream: CUstream) {
        let enqueued = match drv.stream_write_value32 {
            // SAFETY: our stream and our word.
            Some(write) if !stream.is_null() => unsafe {
                write(stream, self.addr(), self.value, 0)
            },
            _ => CUDA_ERROR_NOT_SUPPORTED,
        };
        if enqueued == CUDA_SUCCESS {
            self.open = true;
            self.page.opened.fetch_add(1, Ordering::AcqRel);
            tracing::warn!(
                "a replay pass outlived every deadline: the application's stream waits for it \
                 before its later work"
            );
        } else {
            tracing::warn!(
                status = %error_name(drv, enqueued),
                "a late replay pass cannot order the application's stream: its gate opens now"
            );
            self.open_now();
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open_now();
    }
}

/// The gate of the asynchronous window holding a context, offered to the application's
/// stream work submitted while it holds the context ([`order_behind`](Self::order_behind)):
/// a copy, fill or host function on any stream of the context is enqueued behind the gate
/// on the device, so its call returns at once and the work runs once the window is over,
/// as it would have had the call waited for the window.
///
/// A gate is offered from when it is on the application's stream (after pass 1, at the
/// launch's exit) until the window ends ([`retire`](Self::retire)), which is before the
/// window lets go of the context and before the gate opens: work ordered behind it is never
/// released into another window. Offering, retiring and enqueueing behind the gate happen
/// under one lock, so no wait is enqueued behind a gate already opened by a window that
/// ended.
#[derive(Debug, Default)]
pub(crate) struct WindowGate {
    state: Mutex<Offered>,
    windows: AtomicU64,
}

#[derive(Debug, Default)]
struct Offered {
    /// The window holding the context (0: none).
    holder: u64,
    /// Its gate's word and value, once on the application's stream.
    gate: Option<(CUdeviceptr, u32)>,
}

impl WindowGate {
    /// A window took the context's writer: its number, for [`offer`](Self::offer).
    pub(crate) fn hold(&self) -> u64 {
        let window = self.windows.fetch_add(1, Ordering::Relaxed) + 1;
        *self.state.lock() = Offered {
            holder: window,
            gate: None,
        };
        window
    }

    /// Window `window`'s gate (`addr`, `value`) is on the application's stream: offered,
    /// unless the window no longer holds the context (it ended meanwhile).
    pub(crate) fn offer(&self, window: u64, addr: CUdeviceptr, value: u32) {
        let mut s = self.state.lock();
        if window != 0 && s.holder == window {
            s.gate = Some((addr, value));
        }
    }

    /// The window holding the context ends (before it lets go of the context and before its
    /// gate opens): nothing more is ordered behind its gate.
    pub(crate) fn retire(&self) {
        *self.state.lock() = Offered::default();
    }

    /// Whether a gate is offered now (a hint: [`order_behind`](Self::order_behind) decides).
    pub(crate) fn offered(&self) -> bool {
        self.state.lock().gate.is_some()
    }

    /// Runs `enqueue` with the offered gate's word and value while that gate cannot open
    /// (its window cannot end meanwhile); `None` when no gate is offered.
    pub(crate) fn order_behind<T>(&self, enqueue: impl FnOnce(CUdeviceptr, u32) -> T) -> Option<T> {
        let s = self.state.lock();
        let (addr, value) = s.gate?;
        Some(enqueue(addr, value))
    }
}

/// Windows in flight (behind launch calls that returned, or holding their launch call), for a
/// bounded wait at shutdown — and the module loads that must not overlap them.
///
/// **Why loads wait for windows.** With lazy module loading (CUDA's default since 12.2) the
/// driver loads a kernel the first time it is asked for it (`cuKernelGetFunction`,
/// `cuModuleGetFunction`, a first launch, attribute and occupancy queries), and a load
/// synchronises the context while holding a driver lock. A window has gates closed on the
/// application's streams that only its companion thread can open, and the companion's copies
/// need that driver lock: a load during a window never returns (seen on the H200: a GPT-2
/// step stalled after 150 replayed launches, the application thread inside
/// `cuKernelGetFunction` for a kernel it had not launched before, the companion inside
/// `cuMemcpyAsync`). So a call that may load waits for the windows in flight to end, and no
/// window starts while a load runs.
pub(crate) struct Behind {
    state: Mutex<BehindState>,
    idle: Condvar,
}

struct BehindState {
    /// Windows not done.
    windows: usize,
    /// Calls that may load a module, running.
    loads: usize,
    /// Loads that have waited past their soft limit.
    late_loads: usize,
    /// When each load now waiting for the windows began to wait.
    waiting_since: Vec<Instant>,
}

/// The process's windows in flight.
pub(crate) static BEHIND: Behind = Behind {
    state: Mutex::new(BehindState {
        windows: 0,
        loads: 0,
        late_loads: 0,
        waiting_since: Vec::new(),
    }),
    idle: Condvar::new(),
};

/// One window counted in [`BEHIND`] until dropped.
pub(crate) struct Ticket(());

impl Drop for Ticket {
    fn drop(&mut self) {
        BEHIND.leave();
    }
}

/// One call that may load a module, counted in [`BEHIND`] until dropped (or until
/// [`Behind::end_load`] for a token kept across callbacks).
pub(crate) struct Loading(());

impl Drop for Loading {
    fn drop(&mut self) {
        BEHIND.end_load();
    }
}

impl Behind {
    /// One more window, until the ticket is dropped. Waits (at most `limit`) for module loads
    /// running on other threads to end first.
    pub(crate) fn enter(&self, limit: Duration) -> Ticket {
        let end = Instant::now() + limit;
        let mut s = self.state.lock();
        while s.loads > 0 {
            if self.idle.wait_until(&mut s, end).timed_out() {
                tracing::warn!(
                    loads = s.loads,
                    "a module load took longer than {limit:?}: a replay window starts beside it"
                );
                break;
            }
        }
        s.windows += 1;
        Ticket(())
    }

    fn leave(&self) {
        let mut s = self.state.lock();
        s.windows = s.windows.saturating_sub(1);
        if s.windows == 0 {
            self.idle.notify_all();
        }
    }

    /// A call that may load a module starts: no new window starts until it ends, and this
    /// waits for the windows in flight to end. Past `soft` the windows are told to stop after
    /// their current pass ([`loads_waiting_long`](Self::loads_waiting_long)); past `hard`
    /// more (every window's own waits are bounded, so only a window stuck past them gets
    /// there) the load goes ahead, with a warning.
    pub(crate) fn begin_load(&self, soft: Duration, hard: Duration) -> Loading {
        let start = Instant::now();
        let mut s = self.state.lock();
        s.loads += 1;
        let mut late = false;
        let waits = s.windows > 0;
        if waits {
            s.waiting_since.push(start);
        }
        while s.windows > 0 {
            let end = start + if late { soft + hard } else { soft };
            if self.idle.wait_until(&mut s, end).timed_out() {
                if late {
                    tracing::warn!(
                        windows = s.windows,
                        "a call that may load a module waited {:?} for replay windows; it goes \
                         ahead",
                        soft + hard
                    );
                    break;
                }
                late = true;
                s.late_loads += 1;
            }
        }
        if late {
            s.late_loads -= 1;
        }
        if waits && let Some(i) = s.waiting_since.iter().position(|t| *t == start) {
            s.waiting_since.swap_remove(i);
        }
        Loading(())
    }

    /// Whether a call that may load a module has waited for the windows in flight at least
    /// `longer_than` (a first pass may be waiting for the kernel that call would launch:
    /// [`AgentLock::held_up`](crate::engine::agent::AgentLock::held_up)).
    pub(crate) fn loads_waiting_for(&self, longer_than: Duration) -> bool {
        let now = Instant::now();
        self.state
            .lock()
            .waiting_since
            .iter()
            .any(|t| now.saturating_duration_since(*t) >= longer_than)
    }

    /// A module load has waited long for the windows in flight: they stop after their
    /// current pass.
    pub(crate) fn loads_waiting_long(&self) -> bool {
        self.state.lock().late_loads > 0
    }

    /// Ends a load begun by [`begin_load`](Self::begin_load) whose token was forgotten (kept
    /// across a call's enter and exit callbacks).
    pub(crate) fn end_load(&self) {
        let mut s = self.state.lock();
        s.loads = s.loads.saturating_sub(1);
        if s.loads == 0 {
            self.idle.notify_all();
        }
    }

    /// Windows not done.
    pub(crate) fn pending(&self) -> usize {
        self.state.lock().windows
    }

    /// Waits until no window is pending or `limit` passes; `true` when none is left.
    pub(crate) fn wait_idle(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let mut s = self.state.lock();
        while s.windows > 0 {
            if self.idle.wait_until(&mut s, end).timed_out() {
                return s.windows == 0;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_gate_is_offered_only_while_its_window_holds_the_context() {
        let w = WindowGate::default();
        assert_eq!(w.order_behind(|a, v| (a, v)), None, "no window");
        let first = w.hold();
        assert_eq!(w.order_behind(|a, v| (a, v)), None, "not on the stream yet");
        w.offer(first, 0x1000, 5);
        assert_eq!(w.order_behind(|a, v| (a, v)), Some((0x1000, 5)));
        w.retire();
        assert_eq!(
            w.order_behind(|a, v| (a, v)),
            None,
            "retired with its window"
        );
        // A window that ended before its launch's exit offered its gate: never offered, also
        // not to the next window's callers.
        w.offer(first, 0x1000, 5);
        assert_eq!(
            w.order_behind(|a, v| (a, v)),
            None,
            "offered after its window ended"
        );
        let second = w.hold();
        assert_ne!(first, second);
        w.offer(first, 0x1000, 5);
        assert_eq!(
            w.order_behind(|a, v| (a, v)),
            None,
            "an older window's gate"
        );
        w.offer(second, 0x1004, 9);
        assert_eq!(w.order_behind(|a, v| (a, v)), Some((0x1004, 9)));
    }
}
