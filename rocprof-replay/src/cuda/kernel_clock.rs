//! Kernel-only pass times from CUPTI's activity records.
//!
//! Events recorded around a pass (even behind a gate, so that start event, kernel and end
//! event are enqueued before any of them runs) time the stream from the start event to the
//! end event: that includes the front end's fetch and launch of the kernel, about 2 µs on an
//! H200, so a 7 µs kernel measured 9 µs. CUPTI's kernel records
//! (`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`, which leaves kernels concurrent) carry GPU
//! timestamps of the launch itself: when the front end took it, when it started, when it
//! ended.
//!
//! # How a pass gets its record
//! - Record buffers are handed to CUPTI when the backend is installed
//!   (`cuptiActivityRegisterCallbacks`), before the application can use the activity API
//!   itself. Kernel records are on only while a timed pass is in flight ([`Timing`]): enabled
//!   before its kernel is submitted, disabled once its record is taken (about 2 µs both). A
//!   flush's cost grows with the records it delivers (on an H100 about 0.9 µs a record with
//!   latency timestamps, 0.2 µs without, over 20 µs fixed: `tests/cuda/apps/flush_cost.cu`),
//!   and records left on would describe every kernel of the process, the window's own copy,
//!   compare and fingerprint kernels included; a tool that never times costs nothing.
//! - A timed pass names the launch whose record it wants, by the launch call's correlation id,
//!   before the kernel can run: pass 1 is the application's own launch (the id of its call,
//!   registered before the window releases it to the driver; as a runtime-API launch's record
//!   may carry the runtime call's id instead, it also matches the first kernel of its context
//!   to start after the release — the window holds the context, so no other kernel runs
//!   there); a relaunch is armed on the replay thread ([`arm`]), and the backend's CUPTI
//!   callback registers the relaunch's id at its enter ([`on_own_launch`]).
//! - Once the pass has completed (its end event), the records are flushed
//!   (`cuptiActivityFlushAll(0)`: buffers whose records are all complete) until the wanted
//!   one arrives, at most [`RECORD_WAIT`] (on an H200 the first flush has it); the pass's
//!   time is then the record's span ([`Span`]); when no record came, pass 1's events' time,
//!   and none for a relaunch (which records no start event while its record is due).
//! - After [`MISSES`] passes in a row without their record (the application registered its
//!   own activity buffers, which replaces ours, or disabled kernel records) the clock stops
//!   and every later pass is timed by its events, with one warning; kernel records are then
//!   left on (an application that took the buffers may want its own).
//!
//! # Which span
//! A record's `end - start` is the kernel's own execution; Nsight Compute's
//! `gpu__time_duration` also spans the front end's work on the launch before the first block
//! starts (about 0.6 µs on an H200). So by default CUPTI's latency timestamps are on too and
//! a pass runs from the record's `submitted` (the front end took the launch) to its `end`.
//! `submitted` is not queueing time: with a 50 µs kernel ahead on the stream it still falls
//! 560 ns before the start (`queued` is the one that waits; `tests/cuda/apps/record_kinds.cu`).
//!
//! `ROCPROF_REPLAY_CUDA_PASS_TIMES=kernel` takes `end - start`; `serial` enables
//! `CUPTI_ACTIVITY_KIND_KERNEL` records instead, which serialize every kernel of the process;
//! `events` keeps the events' times (no activity records). All measured against Nsight
//! Compute in `docs/performance.md`.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocprof_replay_sys::cuda::*;

/// How long a completed pass waits for its kernel's record (then pass 1 takes its events'
/// time, a relaunch has none).
pub(crate) const RECORD_WAIT: Duration = Duration::from_millis(20);

/// Passes in a row without their record after which the clock stops.
pub(crate) const MISSES: u32 = 4;

/// Wanted records kept at most (a want whose pass never asked for it is dropped oldest
/// first).
const WANTED: usize = 64;

/// The bytes of one record buffer. CUPTI zeroes each buffer it is handed on the thread that
/// asks for it (inside the flush of a timed pass): on an H200, 1 MiB buffers cost a 5 µs
/// kernel's 3-pass window 415 µs, 64 KiB buffers 280 µs (events alone: 150 µs). A buffer
/// holds about 300 kernel records; a timed pass flushes a handful.
const BUFFER_BYTES: usize = 64 << 10;

/// Free buffers kept for CUPTI's next request.
const POOL: usize = 8;

/// The activity functions, looked up in CUPTI (all or none).
#[derive(Clone, Copy)]
pub(crate) struct ActivityApi {
    pub(crate) register_callbacks: cuptiActivityRegisterCallbacks_fn,
    pub(crate) enable: cuptiActivityEnable_fn,
    /// `cuptiActivityDisable` (optional: without it kernel records stay on from the first
    /// timed pass).
    pub(crate) disable: Option<cuptiActivityEnable_fn>,
    pub(crate) flush_all: cuptiActivityFlushAll_fn,
    pub(crate) get_next_record: cuptiActivityGetNextRecord_fn,
    pub(crate) timestamp: cuptiGetTimestamp_fn,
    pub(crate) context_id: cuptiGetContextId_fn,
    /// `cuptiActivityEnableLatencyTimestamps` (optional: without it pass times are
    /// `end - start`).
    pub(crate) latency: Option<cuptiActivityEnableLatencyTimestamps_fn>,
}

/// Which span of a kernel record is a pass's time (`ROCPROF_REPLAY_CUDA_PASS_TIMES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// From the front end's submission to the end, `end - submitted` (the default,
    /// `submitted`): what Nsight Compute's `gpu__time_duration` spans. A record without the
    /// timestamp (latency timestamps refused) falls back to `end - start`.
    Submitted,
    /// The kernel's own execution, `end - start` of concurrent kernel records (`kernel`).
    Kernel,
    /// `end - start` of serializing kernel records (`serial`).
    Serial,
}

impl Span {
    /// The span `ROCPROF_REPLAY_CUDA_PASS_TIMES` asks for (`events` is handled before: no
    /// records at all); an unknown value is the default, with a warning.
    pub(crate) fn from_env() -> Span {
        match std::env::var("ROCPROF_REPLAY_CUDA_PASS_TIMES")
            .as_deref()
            .map(str::trim)
        {
            Err(_) | Ok("" | "submitted" | "events") => Span::Submitted,
            Ok("kernel") => Span::Kernel,
            Ok("serial") => Span::Serial,
            Ok(other) => {
                tracing::warn!(
                    value = other,
                    "unknown ROCPROF_REPLAY_CUDA_PASS_TIMES (submitted, kernel, serial, \
                     events): pass times run from the launch's submission"
                );
                Span::Submitted
            }
        }
    }

    /// The kind of kernel record to enable: concurrent ones (kernels stay concurrent), or
    /// serializing ones for [`Span::Serial`] (CUPTI then serializes every kernel of the
    /// process).
    fn record_kind(self) -> CUpti_ActivityKind {
        match self {
            Span::Serial => CUPTI_ACTIVITY_KIND_KERNEL,
            Span::Kernel | Span::Submitted => CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        }
    }

    /// A record's time under this span.
    fn time(self, t: Stamps) -> Duration {
        let from = match self {
            // A submission after the start would be a foreign clock: not trusted.
            Span::Submitted if t.submitted != 0 && t.submitted <= t.start => t.submitted,
            _ => t.start,
        };
        Duration::from_nanos(t.end.saturating_sub(from))
    }
}

/// Where the clock stands.
const UNREGISTERED: u8 = 0;
const REGISTERED: u8 = 1;
const ON: u8 = 2;
const OFF: u8 = 3;

/// The kernel clock of a backend.
pub(crate) struct KernelClock {
    api: Option<ActivityApi>,
    state: AtomicU8,
    misses: AtomicU32,
    /// Timed passes in flight, and whether kernel records are on; held while CUPTI enables or
    /// disables them.
    records: Mutex<Records>,
    /// Which span of a record is a pass's time.
    span: Span,
}

/// Whether kernel records are on, and for how many timed passes.
#[derive(Default)]
struct Records {
    passes: u32,
    on: bool,
}

/// A timed pass in flight ([`KernelClock::timing`]): kernel records stay on while one lives,
/// and go off when the last one is dropped.
pub(crate) struct Timing<'a> {
    clock: &'a KernelClock,
}

impl Drop for Timing<'_> {
    fn drop(&mut self) {
        let clock = self.clock;
        let mut records = clock.records.lock();
        records.passes = records.passes.saturating_sub(1);
        // A stopped clock leaves them on: the application may have taken CUPTI's buffers and
        // want its own kernel records.
        if records.passes > 0 || !records.on || clock.state.load(Ordering::Acquire) != ON {
            return;
        }
        let (Some(api), kind) = (clock.api, clock.span.record_kind()) else {
            return;
        };
        let Some(disable) = api.disable else { return };
        // SAFETY: a plain kind, enabled by us.
        if unsafe { disable(kind) } == CUPTI_SUCCESS {
            records.on = false;
        }
    }
}

/// Correlation id -> the kernel's (start, end) once its record arrived. Process-wide: CUPTI's
/// buffer callbacks carry no user data.
static WANTED_RECORDS: Mutex<VecDeque<Wanted>> = Mutex::new(VecDeque::new());

/// A wanted record.
struct Wanted {
    /// The launch call's correlation id.
    id: u32,
    /// Also the first kernel of CUPTI context `.0` that starts at or after `.1` (CUPTI's
    /// clock): for the application's own launch, while its window holds the context (no other
    /// kernel can run there), whichever correlation id CUPTI gave its record (a runtime-API
    /// launch's may be the runtime call's).
    window: Option<(u32, u64)>,
    /// The kernel's record once it arrived, and whether by its id.
    found: Option<(Stamps, bool)>,
}

/// A kernel record's timestamps (CUPTI's clock, ns; `submitted` is 0 without latency
/// timestamps).
#[derive(Clone, Copy, Debug)]
struct Stamps {
    start: u64,
    end: u64,
    submitted: u64,
}

/// Free record buffers (`BUFFER_BYTES / 8` words each).
static BUFFERS: Mutex<Vec<Box<[u64]>>> = Mutex::new(Vec::new());

thread_local! {
    /// This replay thread's next launch is a timed pass.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    /// The correlation id of the armed launch, once its enter callback ran.
    static ARMED_ID: Cell<Option<u32>> = const { Cell::new(None) };
}

impl KernelClock {
    /// A clock without activity records: every pass is timed by its events.
    pub(crate) fn off() -> KernelClock {
        KernelClock {
            api: None,
            state: AtomicU8::new(OFF),
            misses: AtomicU32::new(0),
            records: Mutex::new(Records::default()),
            span: Span::Kernel,
        }
    }

    /// A clock over `api` (`None`: this CUPTI lacks the activity API, or the user asked for
    /// events) timing passes by `span` of their records.
    pub(crate) fn new(api: Option<ActivityApi>, span: Span) -> KernelClock {
        match api {
            None => KernelClock::off(),
            Some(api) => KernelClock {
                api: Some(api),
                state: AtomicU8::new(UNREGISTERED),
                misses: AtomicU32::new(0),
                records: Mutex::new(Records::default()),
                span,
            },
        }
    }

    /// Hands CUPTI our record buffers (at install, before the application can register its
    /// own). Kernel records stay off until a timed pass.
    pub(crate) fn register(&self) {
        let Some(api) = self.api else { return };
        // SAFETY: two extern "C" callbacks that catch every panic; they live for the process.
        let r = unsafe { (api.register_callbacks)(Some(buffer_requested), Some(buffer_completed)) };
        if r == CUPTI_SUCCESS {
            let _ = self.state.compare_exchange(
                UNREGISTERED,
                REGISTERED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        } else {
            tracing::debug!(
                status = r,
                "cuptiActivityRegisterCallbacks failed: pass times come from events"
            );
            self.state.store(OFF, Ordering::Release);
        }
    }

    /// A timed pass about to be submitted: kernel records on until the returned guard is
    /// dropped (after the pass's record was taken). `None`: passes are timed by their events
    /// (no activity API, or CUPTI refused, or the clock stopped).
    pub(crate) fn timing(&self) -> Option<Timing<'_>> {
        let api = self.api?;
        let mut records = self.records.lock();
        match self.state.load(Ordering::Acquire) {
            ON => {}
            REGISTERED => self.set_up(api),
            _ => return None,
        }
        if !records.on {
            let kind = self.span.record_kind();
            // SAFETY: a plain kind.
            let r = unsafe { (api.enable)(kind) };
            if r != CUPTI_SUCCESS {
                tracing::debug!(
                    status = r,
                    kind,
                    "cuptiActivityEnable(kernel records) failed: pass times come from events"
                );
                self.state.store(OFF, Ordering::Release);
                return None;
            }
            records.on = true;
        }
        records.passes += 1;
        Some(Timing { clock: self })
    }

    /// The first timed pass: latency timestamps asked for where the span wants them (before
    /// the kind is enabled: CUPTI takes the setting for records enabled after it).
    fn set_up(&self, api: ActivityApi) {
        if self.span == Span::Submitted {
            // SAFETY: a plain flag.
            let r = api.latency.map(|f| unsafe { f(1) });
            if r != Some(CUPTI_SUCCESS) {
                tracing::warn!(
                    status = ?r,
                    "CUPTI refused latency timestamps: pass times are the kernels' own \
                     (end - start), without the front end's submission"
                );
            }
        }
        tracing::debug!("CUPTI kernel records set up: pass times are the kernels' own");
        self.state.store(ON, Ordering::Release);
    }

    /// Asks for the record of the launch with correlation id `id` (before it can run).
    pub(crate) fn want(&self, id: u32) {
        push_want(id, None);
    }

    /// As [`want`](Self::want), for a launch that will be the only kernel of `ctx` from now
    /// until its record is taken (the application's launch inside its window): also matched
    /// as the first kernel of the context to start from now on.
    pub(crate) fn want_only_kernel(&self, id: u32, ctx: CUcontext) {
        let window = self.api.and_then(|api| {
            let (mut ctx_id, mut now) = (0u32, 0u64);
            // SAFETY: plain out-parameters; `ctx` is a live context of the application.
            let ok = unsafe {
                (api.context_id)(ctx, &mut ctx_id) == CUPTI_SUCCESS
                    && (api.timestamp)(&mut now) == CUPTI_SUCCESS
            };
            ok.then_some((ctx_id, now))
        });
        push_want(id, window);
    }

    /// The kernel time of launch `id` (wanted before): its record — already delivered by an
    /// earlier flush (a run's queued passes: one flush brings them all), else flushing
    /// CUPTI's buffers until it arrives, at most [`RECORD_WAIT`]. `None`: no record (the
    /// caller uses its events); the want is dropped either way.
    pub(crate) fn kernel_time(&self, id: u32) -> Option<Duration> {
        let api = self.api?;
        if let Some(found) = take(id, false, self.span) {
            self.misses.store(0, Ordering::Relaxed);
            return Some(found);
        }
        let started = Instant::now();
        let deadline = started + RECORD_WAIT;
        let mut flushes = 0u32;
        loop {
            let r = crate::engine::phases::timed(crate::engine::phases::Phase::RecordFlush, || {
                // SAFETY: a plain flag; the completion callback runs on this thread or CUPTI's.
                unsafe { (api.flush_all)(0) }
            });
            flushes += 1;
            if let Some(found) = take(id, false, self.span) {
                self.misses.store(0, Ordering::Relaxed);
                tracing::trace!(
                    flushes,
                    waited_ns = started.elapsed().as_nanos() as u64,
                    "kernel record taken"
                );
                return Some(found);
            }
            if r != CUPTI_SUCCESS || Instant::now() >= deadline {
                take(id, true, self.span);
                self.missed();
                return None;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    fn missed(&self) {
        if self.misses.fetch_add(1, Ordering::Relaxed) + 1 >= MISSES
            && self.state.swap(OFF, Ordering::AcqRel) == ON
        {
            tracing::warn!(
                "CUPTI delivered no kernel record for {MISSES} timed passes in a row (the \
                 application may use CUPTI's activity API itself): pass times come from events \
                 from now on, which include the launch's front end (about 2 µs)"
            );
        }
    }
}

fn push_want(id: u32, window: Option<(u32, u64)>) {
    let mut w = WANTED_RECORDS.lock();
    if w.len() >= WANTED {
        w.pop_front();
    }
    w.push_back(Wanted {
        id,
        window,
        found: None,
    });
}

/// The kernel time of `id` (`span` of its record) if its record arrived, taken out; `drop`
/// also forgets a want still waiting.
fn take(id: u32, drop: bool, span: Span) -> Option<Duration> {
    let mut w = WANTED_RECORDS.lock();
    let i = w.iter().position(|x| x.id == id)?;
    match w[i].found {
        Some((t, _)) => {
            w.remove(i);
            Some(span.time(t))
        }
        None => {
            if drop {
                w.remove(i);
            }
            None
        }
    }
}

/// The replay thread's next launch is a timed relaunch (its enter callback registers it).
pub(crate) fn arm() {
    ARMED.with(|a| a.set(true));
    ARMED_ID.with(|a| a.set(None));
}

/// The correlation id the armed launch got (`None`: its callback did not run), disarming.
pub(crate) fn disarm() -> Option<u32> {
    ARMED.with(|a| a.set(false));
    ARMED_ID.with(|a| a.take())
}

/// A launch of the backend's own threads entered the driver: if it is an armed pass, its
/// record is wanted.
pub(crate) fn on_own_launch(clock: &KernelClock, id: u32) {
    if ARMED.with(|a| a.replace(false)) {
        clock.want(id);
        ARMED_ID.with(|a| a.set(Some(id)));
    }
}

/// Reads kernel records out of a completed buffer into the wanted ones.
///
/// # Safety
/// `buffer` holds `valid` bytes of CUPTI activity records.
unsafe fn read_records(get_next: cuptiActivityGetNextRecord_fn, buffer: *mut u8, valid: usize) {
    let mut wanted = WANTED_RECORDS.lock();
    if wanted.iter().all(|w| w.found.is_some_and(|f| f.1)) {
        return;
    }
    let mut record: *mut c_void = std::ptr::null_mut();
    // Bounded by the buffer: each record is at least 8 bytes.
    for _ in 0..valid / 8 + 1 {
        // SAFETY: caller contract; `record` is CUPTI's cursor into the buffer.
        if unsafe { get_next(buffer, valid, &mut record) } != CUPTI_SUCCESS || record.is_null() {
            return;
        }
        // SAFETY: every record starts with its kind.
        let kind = unsafe { *record.cast::<CUpti_ActivityKind>() };
        if kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && kind != CUPTI_ACTIVITY_KIND_KERNEL {
            continue;
        }
        // SAFETY: a kernel record starts with the common head (checked against the headers by
        // rocprof-replay-sys's cuda_layout test); records are 8-aligned in CUPTI's buffer.
        let head = unsafe { std::ptr::read_unaligned(record.cast::<CUpti_ActivityKernelHead>()) };
        let stamps = Stamps {
            start: head.start,
            end: head.end,
            submitted: head.submitted,
        };
        for w in wanted.iter_mut() {
            if w.found.is_some_and(|f| f.1) {
                continue;
            }
            if w.id == head.correlationId {
                w.found = Some((stamps, true));
            } else if let Some((ctx, after)) = w.window
                && head.contextId == ctx
                && head.start >= after
                && w.found.is_none_or(|f| head.start < f.0.start)
            {
                w.found = Some((stamps, false));
            }
        }
    }
}

/// The activity functions of the installed backend's CUPTI (the buffer callbacks carry no
/// user data).
static API: std::sync::OnceLock<ActivityApi> = std::sync::OnceLock::new();

/// Makes `api` the one the buffer callbacks read records with (the first one given stays).
pub(crate) fn set_callback_api(api: ActivityApi) {
    let _ = API.set(api);
}

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if buffer.is_null() || size.is_null() {
            return;
        }
        let b = BUFFERS
            .lock()
            .pop()
            .unwrap_or_else(|| vec![0u64; BUFFER_BYTES / 8].into_boxed_slice());
        let len = b.len() * 8;
        // SAFETY: CUPTI's out-parameters; the buffer comes back through `buffer_completed`.
        unsafe {
            *buffer = Box::into_raw(b).cast::<u8>();
            *size = len;
            if !max.is_null() {
                *max = 0;
            }
        }
    }));
}

unsafe extern "C" fn buffer_completed(
    _: CUcontext,
    _: u32,
    buffer: *mut u8,
    size: usize,
    valid: usize,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if buffer.is_null() || size != BUFFER_BYTES {
            // Not one of ours (the sizes of ours never change): leave it alone.
            return;
        }
        if let Some(api) = API.get() {
            // SAFETY: CUPTI hands back `valid` bytes of records.
            unsafe { read_records(api.get_next_record, buffer, valid.min(size)) };
        }
        // SAFETY: a buffer of ours (`buffer_requested`), of `BUFFER_BYTES / 8` words; CUPTI
        // gave up its ownership with this call.
        let b = unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                buffer.cast::<u64>(),
                BUFFER_BYTES / 8,
            ))
        };
        let mut pool = BUFFERS.lock();
        if pool.len() < POOL {
            pool.push(b);
        }
    }));
}

/// Whether pass times may come from activity records: unless
/// `ROCPROF_REPLAY_CUDA_PASS_TIMES` is `events`.
pub(crate) fn wanted_from_env() -> bool {
    std::env::var("ROCPROF_REPLAY_CUDA_PASS_TIMES").map_or(true, |v| v.trim() != "events")
}

#[cfg(test)]
pub(crate) mod fake {
    //! A fake activity API for the fake driver: launches (`launched`) become kernel records,
    //! delivered by `flush_all` through the registered completion callback.
    use super::*;

    pub(crate) struct FakeActivity {
        pub(crate) requested: Option<CUpti_BuffersCallbackRequestFunc>,
        pub(crate) completed: Option<CUpti_BuffersCallbackCompleteFunc>,
        pub(crate) enabled: bool,
        /// Records not yet delivered: (correlation id, start, end).
        pub(crate) pending: Vec<(u32, u64, u64)>,
        /// Flushes deliver nothing (an application that took the callbacks).
        pub(crate) withhold: bool,
        pub(crate) flushes: u32,
        /// Latency timestamps asked for and granted: records carry `submitted`.
        pub(crate) latency: bool,
        /// `cuptiActivityEnableLatencyTimestamps` fails.
        pub(crate) refuse_latency: bool,
        /// `cuptiActivityEnable` calls.
        pub(crate) enables: u32,
    }

    /// How long before its start a fake kernel was submitted (with latency timestamps).
    pub(crate) const FRONT_END_NS: u64 = 700;

    pub(crate) static FAKE: Mutex<FakeActivity> = Mutex::new(FakeActivity {
        requested: None,
        completed: None,
        enabled: false,
        pending: Vec::new(),
        withhold: false,
        flushes: 0,
        latency: false,
        refuse_latency: false,
        enables: 0,
    });

    unsafe extern "C" fn register(
        r: Option<CUpti_BuffersCallbackRequestFunc>,
        c: Option<CUpti_BuffersCallbackCompleteFunc>,
    ) -> CUptiResult {
        let mut f = FAKE.lock();
        f.requested = r;
        f.completed = c;
        CUPTI_SUCCESS
    }
    unsafe extern "C" fn enable(kind: CUpti_ActivityKind) -> CUptiResult {
        assert_eq!(kind, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        let mut f = FAKE.lock();
        f.enabled = true;
        f.enables += 1;
        CUPTI_SUCCESS
    }
    unsafe extern "C" fn disable(kind: CUpti_ActivityKind) -> CUptiResult {
        assert_eq!(kind, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        FAKE.lock().enabled = false;
        CUPTI_SUCCESS
    }
    unsafe extern "C" fn latency(enable: u8) -> CUptiResult {
        let mut f = FAKE.lock();
        if f.refuse_latency {
            return CUPTI_ERROR_NOT_INITIALIZED;
        }
        f.latency = enable != 0;
        CUPTI_SUCCESS
    }
    unsafe extern "C" fn flush_all(_: u32) -> CUptiResult {
        let (req, done, records, latency) = {
            let mut f = FAKE.lock();
            f.flushes += 1;
            if f.withhold || f.pending.is_empty() {
                return CUPTI_SUCCESS;
            }
            (
                f.requested,
                f.completed,
                std::mem::take(&mut f.pending),
                f.latency,
            )
        };
        let (Some(req), Some(done)) = (req, done) else {
            return CUPTI_SUCCESS;
        };
        let (mut buf, mut size, mut max) = (std::ptr::null_mut(), 0usize, 0usize);
        // SAFETY: the registered request callback.
        unsafe { req(&mut buf, &mut size, &mut max) };
        let rec = std::mem::size_of::<CUpti_ActivityKernelHead>().next_multiple_of(8);
        // A memcpy record first: not a kernel, skipped by the reader.
        let mut off = 0;
        let put = |bytes: &[u8], at: &mut usize| {
            assert!(*at + rec <= size);
            // SAFETY: within the buffer of `size` bytes (asserted above).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.add(*at), bytes.len()) };
            *at += rec;
        };
        put(&1u32.to_ne_bytes(), &mut off);
        for (id, start, end) in records {
            let head = CUpti_ActivityKernelHead {
                kind: CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                cacheConfig: 0,
                sharedMemoryConfig: 0,
                registersPerThread: 16,
                partitionedGlobalCacheRequested: 0,
                partitionedGlobalCacheExecuted: 0,
                start,
                end,
                completed: end,
                deviceId: 0,
                contextId: 1,
                streamId: 7,
                gridX: 1,
                gridY: 1,
                gridZ: 1,
                blockX: 1,
                blockY: 1,
                blockZ: 1,
                staticSharedMemory: 0,
                dynamicSharedMemory: 0,
                localMemoryPerThread: 0,
                localMemoryTotal: 0,
                correlationId: id,
                gridId: i64::from(id),
                name: c"fake_kernel".as_ptr(),
                reserved0: std::ptr::null_mut(),
                queued: 0,
                submitted: if latency {
                    start.saturating_sub(FRONT_END_NS)
                } else {
                    0
                },
            };
            // SAFETY: a plain repr(C) value viewed as bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    (&head as *const CUpti_ActivityKernelHead).cast::<u8>(),
                    std::mem::size_of::<CUpti_ActivityKernelHead>(),
                )
            };
            put(bytes, &mut off);
        }
        // SAFETY: the registered completion callback, given back the buffer it was handed.
        unsafe { done(std::ptr::null_mut(), 0, buf, size, off) };
        CUPTI_SUCCESS
    }
    /// Walks the fake's fixed-size records.
    unsafe extern "C" fn get_next_record(
        buffer: *mut u8,
        valid: usize,
        record: *mut *mut c_void,
    ) -> CUptiResult {
        let rec = std::mem::size_of::<CUpti_ActivityKernelHead>().next_multiple_of(8);
        // SAFETY: the reader's cursor.
        let cur = unsafe { *record }.cast::<u8>();
        let next = if cur.is_null() {
            0
        } else {
            cur as usize - buffer as usize + rec
        };
        if next + rec > valid {
            return CUPTI_ERROR_MAX_LIMIT_REACHED;
        }
        // SAFETY: within the buffer.
        unsafe { *record = buffer.add(next).cast() };
        CUPTI_SUCCESS
    }

    /// CUPTI's clock: before every fake kernel's start (they start at 50 000 ns or later).
    unsafe extern "C" fn timestamp(t: *mut u64) -> CUptiResult {
        // SAFETY: an out-parameter.
        unsafe { *t = 40_000 };
        CUPTI_SUCCESS
    }
    /// Every context is CUPTI context 1 (the fake's records say so).
    unsafe extern "C" fn context_id(_: CUcontext, id: *mut u32) -> CUptiResult {
        // SAFETY: an out-parameter.
        unsafe { *id = 1 };
        CUPTI_SUCCESS
    }

    /// The fake's activity API.
    pub(crate) fn api() -> ActivityApi {
        ActivityApi {
            register_callbacks: register,
            enable,
            disable: Some(disable),
            flush_all,
            get_next_record,
            timestamp,
            context_id,
            latency: Some(latency),
        }
    }

    /// A kernel with correlation id `id` ran from `start` to `end` ns (a record when enabled).
    pub(crate) fn launched(id: u32, start: u64, end: u64) {
        let mut f = FAKE.lock();
        if f.enabled {
            f.pending.push((id, start, end));
        }
    }

    /// Back to a fresh fake (callbacks kept: registration happens once per backend).
    pub(crate) fn reset(withhold: bool) {
        let mut f = FAKE.lock();
        f.enabled = false;
        f.pending.clear();
        f.withhold = withhold;
        f.flushes = 0;
        f.latency = false;
        f.refuse_latency = false;
        f.enables = 0;
        WANTED_RECORDS.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_reach_the_wanted_launch_and_others_are_ignored() {
        let _g = crate::cuda::tests::serial();
        fake::reset(false);
        set_callback_api(fake::api());
        let clock = KernelClock::new(Some(fake::api()), Span::Kernel);
        clock.register();
        let timing = clock.timing();
        assert!(timing.is_some());
        clock.want(5);
        fake::launched(4, 100, 900);
        fake::launched(5, 1_000, 8_000);
        assert_eq!(clock.kernel_time(5), Some(Duration::from_nanos(7_000)));
        // Taken out: a second ask finds nothing, within the wait.
        clock.want(5);
        assert_eq!(clock.kernel_time(5), None);
    }

    #[test]
    fn kernel_records_are_on_only_while_a_timed_pass_is_in_flight() {
        let _g = crate::cuda::tests::serial();
        fake::reset(false);
        set_callback_api(fake::api());
        let clock = KernelClock::new(Some(fake::api()), Span::Kernel);
        clock.register();
        assert!(!fake::FAKE.lock().enabled, "no timed pass yet");
        let a = clock.timing().expect("the clock times");
        let b = clock
            .timing()
            .expect("a second pass in flight (another context's window)");
        assert!(fake::FAKE.lock().enabled);
        assert_eq!(fake::FAKE.lock().enables, 1, "enabled once for both");
        drop(a);
        assert!(
            fake::FAKE.lock().enabled,
            "on while a timed pass is in flight"
        );
        clock.want(3);
        fake::launched(3, 1_000, 4_000);
        assert_eq!(clock.kernel_time(3), Some(Duration::from_nanos(3_000)));
        drop(b);
        assert!(!fake::FAKE.lock().enabled, "off after the last timed pass");
        // The window's own kernels between timed passes make no records.
        fake::launched(4, 5_000, 6_000);
        assert!(fake::FAKE.lock().pending.is_empty());
        let c = clock.timing().expect("on again for the next timed pass");
        assert!(fake::FAKE.lock().enabled);
        assert_eq!(fake::FAKE.lock().enables, 2);
        drop(c);
        assert!(!fake::FAKE.lock().enabled);
    }

    #[test]
    fn without_cupti_activity_disable_kernel_records_stay_on() {
        let _g = crate::cuda::tests::serial();
        fake::reset(false);
        let api = ActivityApi {
            disable: None,
            ..fake::api()
        };
        set_callback_api(api);
        let clock = KernelClock::new(Some(api), Span::Kernel);
        clock.register();
        drop(clock.timing().expect("the clock times"));
        assert!(fake::FAKE.lock().enabled);
        drop(clock.timing().expect("the clock times"));
        assert_eq!(fake::FAKE.lock().enables, 1, "enabled once, never disabled");
    }

    #[test]
    fn submitted_pass_times_start_at_the_front_end_and_fall_back_without_latency_stamps() {
        let _g = crate::cuda::tests::serial();
        for refuse in [false, true] {
            fake::reset(false);
            fake::FAKE.lock().refuse_latency = refuse;
            set_callback_api(fake::api());
            let clock = KernelClock::new(Some(fake::api()), Span::Submitted);
            clock.register();
            let timing = clock.timing();
            assert!(
                timing.is_some(),
                "refused latency stamps still leave kernel records"
            );
            assert_eq!(fake::FAKE.lock().latency, !refuse);
            clock.want(9);
            fake::launched(9, 10_000, 15_000);
            let front = if refuse { 0 } else { fake::FRONT_END_NS };
            assert_eq!(
                clock.kernel_time(9),
                Some(Duration::from_nanos(5_000 + front)),
                "latency stamps refused: {refuse}"
            );
        }
        // The kernel span never asks for latency stamps.
        fake::reset(false);
        let clock = KernelClock::new(Some(fake::api()), Span::Kernel);
        clock.register();
        assert!(clock.timing().is_some());
        assert!(!fake::FAKE.lock().latency);
    }

    #[test]
    fn a_span_ignores_a_submission_stamped_after_the_start() {
        let ns = |span: Span, submitted: u64| {
            let t = Stamps {
                start: 1_000,
                end: 6_000,
                submitted,
            };
            span.time(t).as_nanos()
        };
        assert_eq!(ns(Span::Submitted, 300), 5_700);
        assert_eq!(
            ns(Span::Submitted, 1_500),
            5_000,
            "after the start: not trusted"
        );
        assert_eq!(ns(Span::Submitted, 0), 5_000, "no latency timestamps");
        assert_eq!(ns(Span::Kernel, 300), 5_000);
        assert_eq!(ns(Span::Serial, 300), 5_000);
    }

    #[test]
    fn an_armed_launch_registers_its_id_and_an_unarmed_one_does_not() {
        let _g = crate::cuda::tests::serial();
        fake::reset(false);
        let clock = KernelClock::new(Some(fake::api()), Span::Kernel);
        on_own_launch(&clock, 11);
        assert_eq!(disarm(), None);
        arm();
        on_own_launch(&clock, 12);
        // The next launch (a copy kernel, say) is not the pass.
        on_own_launch(&clock, 13);
        assert_eq!(disarm(), Some(12));
        assert!(WANTED_RECORDS.lock().iter().any(|w| w.id == 12));
        assert!(!WANTED_RECORDS.lock().iter().any(|w| w.id == 13));
    }

    #[test]
    fn missing_records_stop_the_clock_after_a_few_passes() {
        let _g = crate::cuda::tests::serial();
        fake::reset(true);
        set_callback_api(fake::api());
        let clock = KernelClock::new(Some(fake::api()), Span::Kernel);
        clock.register();
        for id in 0..MISSES {
            let timing = clock.timing();
            assert!(timing.is_some());
            clock.want(id);
            fake::launched(id, 0, 10);
            assert_eq!(clock.kernel_time(id), None);
        }
        assert!(
            clock.timing().is_none(),
            "the clock stops after {MISSES} misses"
        );
        assert!(
            fake::FAKE.lock().enabled,
            "a stopped clock leaves kernel records on (the application may want its own)"
        );
    }

    #[test]
    fn wants_never_asked_for_are_dropped_oldest_first() {
        let _g = crate::cuda::tests::serial();
        fake::reset(false);
        let clock = KernelClock::new(Some(fake::api()), Span::Kernel);
        for id in 0..(WANTED as u32 + 10) {
            clock.want(id);
        }
        let w = WANTED_RECORDS.lock();
        assert_eq!(w.len(), WANTED);
        assert_eq!(w.front().map(|e| e.id), Some(10));
    }

    #[test]
    fn without_the_api_the_clock_is_off() {
        let clock = KernelClock::new(None, Span::Kernel);
        clock.register();
        assert!(clock.timing().is_none());
        assert_eq!(clock.kernel_time(1), None);
    }
}
