//! Signals: `amd_signal_t`-compatible memory, every atomic operation and ordering, blocking
//! waits with deadlines, `hsa_amd_signal_wait_any`, async handlers and `hsa_amd_async_function`.
//!
//! A signal is a 64-byte aligned [`Signal`] whose first 64 bytes have the layout of
//! `amd_signal_t` (kind `AMD_SIGNAL_KIND_USER`, value at offset 8, `start_ts`/`end_ts` at 32/40),
//! so `hsa_signal_t.handle` is its address, as tools expect. Behind it lives bookkeeping: an
//! epoch word bumped on every change made through the API (the futex that waiters sleep on),
//! a waiter count (so that a store makes no syscall when nobody waits), an incarnation number and
//! the optional store hook.
//!
//! - Hot operations (load, store, read-modify-write, wait) never take a global lock: the caller's
//!   contract says the handle is valid. Handle 0 and misaligned handles are tolerated (loads read
//!   0, changes are ignored, waits return at once).
//! - Signal memory is never returned to the allocator: a destroyed signal goes to a free list and
//!   is reused by a later create, so a racing access to a destroyed handle reads stale data
//!   instead of faulting. Live handles are kept in a registry for `is_valid`/`destroy`.
//! - Every change through the API bumps the signal's epoch, wakes its waiters, bumps the
//!   process-wide epoch (wakes `wait_any` and the async-handler thread) and then runs the store
//!   hook, with no internal lock held, on the calling thread.
//! - Waits spin for about a microsecond, then sleep on the futex for at most [`MAX_SLEEP`] at a
//!   time, so values written directly into the memory (not through the API) are still noticed.
//! - One lazily started thread runs `hsa_amd_signal_async_handler` handlers and
//!   `hsa_amd_async_function` callbacks; [`shutdown`] stops it and a later use restarts it.
//! - Signals work whether or not `hsa_init` has been called (the runtime itself creates some).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::c_void;
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, mpsc};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rocprof_replay_sys::*;

use crate::api::Tables;
use crate::ffi::{guard, guard_status};

/// Longest single futex sleep: bounds how late a value written straight into memory is seen.
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// How long a waiter spins before it sleeps.
const SPIN: Duration = Duration::from_micros(1);

/// How long [`shutdown`] waits for the async thread to finish.
const SHUTDOWN_JOIN: Duration = Duration::from_secs(1);

/// A signal: `amd_signal_t` (the first 64 bytes) followed by the emulator's bookkeeping.
#[repr(C, align(64))]
struct Signal {
    /// `amd_signal_t::kind`: USER while live, INVALID once destroyed.
    kind: AtomicI64,
    /// `amd_signal_t::value`.
    value: AtomicI64,
    event_mailbox_ptr: u64,
    event_id: u32,
    reserved1: u32,
    /// `amd_signal_t::start_ts`.
    start_ts: AtomicU64,
    /// `amd_signal_t::end_ts`.
    end_ts: AtomicU64,
    queue_ptr: u64,
    reserved3: [u32; 2],
    /// Bumped on every change made through the API; the futex word waiters sleep on.
    epoch: AtomicU32,
    /// Threads sleeping (or about to sleep) on `epoch`.
    waiters: AtomicU32,
    /// Bumped at destroy, so an async handler registered on an earlier life of this memory
    /// never fires for a later one.
    incarnation: AtomicU64,
    /// Whether `hook` may be set (keeps stores lock-free when no hook exists).
    has_hook: AtomicBool,
    /// Run after every change made through the API.
    hook: Mutex<Option<Arc<StoreHook>>>,
}

// The first 64 bytes must be an `amd_signal_t`.
const _: () = {
    assert!(offset_of!(Signal, kind) == offset_of!(amd_signal_t, kind));
    assert!(offset_of!(Signal, value) == offset_of!(amd_signal_t, value));
    assert!(offset_of!(Signal, event_mailbox_ptr) == offset_of!(amd_signal_t, event_mailbox_ptr));
    assert!(offset_of!(Signal, event_id) == offset_of!(amd_signal_t, event_id));
    assert!(offset_of!(Signal, start_ts) == offset_of!(amd_signal_t, start_ts));
    assert!(offset_of!(Signal, end_ts) == offset_of!(amd_signal_t, end_ts));
    assert!(offset_of!(Signal, queue_ptr) == offset_of!(amd_signal_t, queue_ptr));
    assert!(offset_of!(Signal, epoch) == std::mem::size_of::<amd_signal_t>());
    assert!(std::mem::align_of::<Signal>() == 64);
};

/// Addresses of live signals.
static REGISTRY: LazyLock<RwLock<HashSet<u64>>> = LazyLock::new(|| RwLock::new(HashSet::new()));

/// Addresses of destroyed signals, ready for reuse (their memory is never freed).
static FREE: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Bumped after every change of any signal: `wait_any` and the async thread sleep on it.
static GLOBAL_EPOCH: AtomicU32 = AtomicU32::new(0);

/// Threads that need a wake-up on [`GLOBAL_EPOCH`] when a signal changes.
static GLOBAL_WAITERS: AtomicU32 = AtomicU32::new(0);

/// The signal behind a handle; `None` for 0 or a misaligned handle.
#[inline]
fn get(s: hsa_signal_t) -> Option<&'static Signal> {
    let addr = s.handle;
    if addr == 0 || addr % 64 != 0 {
        return None;
    }
    // SAFETY: the caller's contract: a non-zero handle is one this module created. Signal
    // memory is never freed (destroyed signals are recycled), so the reference stays valid for
    // the life of the process, and every field that changes is atomic or behind a mutex.
    Some(unsafe { &*(addr as *const Signal) })
}

// ---------------------------------------------------------------------------------------------
// futex

/// Sleeps on `word` while it holds `expected`, for at most `timeout`.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned u32 and `ts` a valid timespec for the duration of the
    // call; FUTEX_WAIT only reads them. Spurious returns (EAGAIN, EINTR, timeout) are fine:
    // every caller re-checks its condition in a loop.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread sleeping on `word`.
fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not access memory through it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// Bumps the process-wide epoch and wakes the threads that asked to be woken.
fn notify_global() {
    GLOBAL_EPOCH.fetch_add(1, Ordering::SeqCst);
    if GLOBAL_WAITERS.load(Ordering::SeqCst) != 0 {
        futex_wake_all(&GLOBAL_EPOCH);
    }
}

/// Bumps the process-wide epoch and wakes every sleeper unconditionally (the async thread
/// sleeps without counting itself while it has nothing registered).
fn kick_global() {
    GLOBAL_EPOCH.fetch_add(1, Ordering::SeqCst);
    futex_wake_all(&GLOBAL_EPOCH);
}

/// Counts a sleeper on a word for as long as it lives.
struct WaiterCount<'a>(&'a AtomicU32);

impl<'a> WaiterCount<'a> {
    fn new(c: &'a AtomicU32) -> Self {
        c.fetch_add(1, Ordering::SeqCst);
        WaiterCount(c)
    }
}

impl Drop for WaiterCount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Spins for about [`SPIN`] while `done` is false; returns whether it became true.
fn short_spin(mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..16 {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return false;
        }
    }
}

/// Time to sleep now: the rest of the deadline, capped at [`MAX_SLEEP`]; `None` once past.
fn next_sleep(deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        None => Some(MAX_SLEEP),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                None
            } else {
                Some(left.min(MAX_SLEEP))
            }
        }
    }
}

/// The deadline of an API `timeout_hint` (ticks of `clock`, i.e. ns); `u64::MAX` = none.
fn deadline_of(timeout_hint: u64) -> Option<Instant> {
    if timeout_hint == u64::MAX {
        return None;
    }
    let ns = timeout_hint.saturating_mul(1_000_000_000 / crate::clock::TICKS_PER_SECOND.max(1));
    Instant::now().checked_add(Duration::from_nanos(ns))
}

// ---------------------------------------------------------------------------------------------
// core operations

/// Whether `v cond compare` holds; `None` for an unknown condition.
fn holds(cond: hsa_signal_condition_t, v: i64, compare: i64) -> Option<bool> {
    match cond {
        HSA_SIGNAL_CONDITION_EQ => Some(v == compare),
        HSA_SIGNAL_CONDITION_NE => Some(v != compare),
        HSA_SIGNAL_CONDITION_LT => Some(v < compare),
        HSA_SIGNAL_CONDITION_GTE => Some(v >= compare),
        _ => None,
    }
}

/// Publishes a change of `sig` to `new`: wakes its waiters and global waiters, runs the hook.
fn changed(sig: &Signal, new: i64) {
    sig.epoch.fetch_add(1, Ordering::SeqCst);
    if sig.waiters.load(Ordering::SeqCst) != 0 {
        futex_wake_all(&sig.epoch);
    }
    notify_global();
    if sig.has_hook.load(Ordering::Acquire) {
        let hook = sig.hook.lock().clone();
        if let Some(hook) = hook {
            hook(new);
        }
    }
}

/// A read-modify-write operation of the API.
#[derive(Clone, Copy, Debug)]
enum Rmw {
    And,
    Or,
    Xor,
    Add,
    Sub,
    Exchange,
}

/// Applies `op` with operand `v` and ordering `ord`; returns the previous value (0 for no signal).
fn rmw(s: hsa_signal_t, op: Rmw, v: i64, ord: Ordering) -> i64 {
    let Some(sig) = get(s) else { return 0 };
    let a = &sig.value;
    let (old, new) = match op {
        Rmw::And => {
            let o = a.fetch_and(v, ord);
            (o, o & v)
        }
        Rmw::Or => {
            let o = a.fetch_or(v, ord);
            (o, o | v)
        }
        Rmw::Xor => {
            let o = a.fetch_xor(v, ord);
            (o, o ^ v)
        }
        Rmw::Add => {
            let o = a.fetch_add(v, ord);
            (o, o.wrapping_add(v))
        }
        Rmw::Sub => {
            let o = a.fetch_sub(v, ord);
            (o, o.wrapping_sub(v))
        }
        Rmw::Exchange => (a.swap(v, ord), v),
    };
    changed(sig, new);
    old
}

/// Compare-and-swap with ordering `ord`; returns the value observed (the old value).
fn cas(s: hsa_signal_t, expected: i64, v: i64, ord: Ordering) -> i64 {
    let Some(sig) = get(s) else { return 0 };
    let failure = match ord {
        Ordering::Release | Ordering::Relaxed => Ordering::Relaxed,
        Ordering::SeqCst => Ordering::SeqCst,
        _ => Ordering::Acquire,
    };
    match sig.value.compare_exchange(expected, v, ord, failure) {
        Ok(old) => {
            changed(sig, v);
            old
        }
        Err(old) => old,
    }
}

/// Loads the value with `ord` (Relaxed or Acquire); 0 for no signal.
fn load_ord(s: hsa_signal_t, ord: Ordering) -> i64 {
    get(s).map_or(0, |sig| sig.value.load(ord))
}

/// Stores `v` with `ord` (Relaxed or Release) and publishes the change.
fn store_ord(s: hsa_signal_t, v: i64, ord: Ordering) {
    if let Some(sig) = get(s) {
        sig.value.store(v, ord);
        changed(sig, v);
    }
}

/// Waits until `value cond compare` holds or `deadline` passes; returns the last value seen.
fn wait_ord(
    s: hsa_signal_t,
    cond: hsa_signal_condition_t,
    compare: i64,
    deadline: Option<Instant>,
    ord: Ordering,
) -> i64 {
    let Some(sig) = get(s) else { return 0 };
    let check = || {
        let v = sig.value.load(ord);
        (v, holds(cond, v, compare).unwrap_or(true))
    };
    let (v, ok) = check();
    if ok {
        return v;
    }
    if short_spin(|| check().1) {
        return check().0;
    }
    let _count = WaiterCount::new(&sig.waiters);
    loop {
        let e = sig.epoch.load(Ordering::SeqCst);
        let (v, ok) = check();
        if ok || sig.kind.load(Ordering::Relaxed) != AMD_SIGNAL_KIND_USER {
            return v;
        }
        let Some(sleep) = next_sleep(deadline) else {
            return v;
        };
        futex_wait(&sig.epoch, e, sleep);
    }
}

/// Waits until one of `conds` holds (index, value) or `deadline` passes (`None`).
///
/// Handle 0 and unknown conditions never hold.
fn wait_any_ord(
    signals: &[hsa_signal_t],
    conds: &[hsa_signal_condition_t],
    values: &[i64],
    deadline: Option<Instant>,
    ord: Ordering,
) -> Option<(usize, i64)> {
    let check = || {
        signals
            .iter()
            .zip(conds)
            .zip(values)
            .enumerate()
            .find_map(|(i, ((s, c), cmp))| {
                let sig = get(*s)?;
                let v = sig.value.load(ord);
                holds(*c, v, *cmp).unwrap_or(false).then_some((i, v))
            })
    };
    if let Some(hit) = check() {
        return Some(hit);
    }
    let mut spun = None;
    if short_spin(|| {
        spun = check();
        spun.is_some()
    }) {
        return spun;
    }
    let _count = WaiterCount::new(&GLOBAL_WAITERS);
    loop {
        let e = GLOBAL_EPOCH.load(Ordering::SeqCst);
        if let Some(hit) = check() {
            return Some(hit);
        }
        futex_wait(&GLOBAL_EPOCH, e, next_sleep(deadline)?);
    }
}

// ---------------------------------------------------------------------------------------------
// the crate interface

/// Fills the signal slots of the core and AMD extension tables.
pub(crate) fn install(t: &mut Tables) {
    let c = &mut t.core;
    c.hsa_signal_create_fn = Some(signal_create);
    c.hsa_signal_destroy_fn = Some(signal_destroy);
    c.hsa_signal_load_relaxed_fn = Some(load_relaxed);
    c.hsa_signal_load_scacquire_fn = Some(load_scacquire);
    c.hsa_signal_store_relaxed_fn = Some(store_relaxed);
    c.hsa_signal_store_screlease_fn = Some(store_screlease);
    c.hsa_signal_silent_store_relaxed_fn = Some(store_relaxed);
    c.hsa_signal_silent_store_screlease_fn = Some(store_screlease);
    c.hsa_signal_wait_relaxed_fn = Some(wait_relaxed);
    c.hsa_signal_wait_scacquire_fn = Some(wait_scacquire);
    c.hsa_signal_and_relaxed_fn = Some(and_relaxed);
    c.hsa_signal_and_scacquire_fn = Some(and_scacquire);
    c.hsa_signal_and_screlease_fn = Some(and_screlease);
    c.hsa_signal_and_scacq_screl_fn = Some(and_scacq_screl);
    c.hsa_signal_or_relaxed_fn = Some(or_relaxed);
    c.hsa_signal_or_scacquire_fn = Some(or_scacquire);
    c.hsa_signal_or_screlease_fn = Some(or_screlease);
    c.hsa_signal_or_scacq_screl_fn = Some(or_scacq_screl);
    c.hsa_signal_xor_relaxed_fn = Some(xor_relaxed);
    c.hsa_signal_xor_scacquire_fn = Some(xor_scacquire);
    c.hsa_signal_xor_screlease_fn = Some(xor_screlease);
    c.hsa_signal_xor_scacq_screl_fn = Some(xor_scacq_screl);
    c.hsa_signal_exchange_relaxed_fn = Some(exchange_relaxed);
    c.hsa_signal_exchange_scacquire_fn = Some(exchange_scacquire);
    c.hsa_signal_exchange_screlease_fn = Some(exchange_screlease);
    c.hsa_signal_exchange_scacq_screl_fn = Some(exchange_scacq_screl);
    c.hsa_signal_add_relaxed_fn = Some(add_relaxed);
    c.hsa_signal_add_scacquire_fn = Some(add_scacquire);
    c.hsa_signal_add_screlease_fn = Some(add_screlease);
    c.hsa_signal_add_scacq_screl_fn = Some(add_scacq_screl);
    c.hsa_signal_subtract_relaxed_fn = Some(subtract_relaxed);
    c.hsa_signal_subtract_scacquire_fn = Some(subtract_scacquire);
    c.hsa_signal_subtract_screlease_fn = Some(subtract_screlease);
    c.hsa_signal_subtract_scacq_screl_fn = Some(subtract_scacq_screl);
    c.hsa_signal_cas_relaxed_fn = Some(cas_relaxed);
    c.hsa_signal_cas_scacquire_fn = Some(cas_scacquire);
    c.hsa_signal_cas_screlease_fn = Some(cas_screlease);
    c.hsa_signal_cas_scacq_screl_fn = Some(cas_scacq_screl);
    c.hsa_signal_group_create_fn = Some(group_create);
    c.hsa_signal_group_destroy_fn = Some(group_destroy);
    c.hsa_signal_group_wait_any_scacquire_fn = Some(group_wait_any_scacquire);
    c.hsa_signal_group_wait_any_relaxed_fn = Some(group_wait_any_relaxed);

    let a = &mut t.amd;
    a.hsa_amd_signal_create_fn = Some(amd_signal_create);
    a.hsa_amd_signal_value_pointer_fn = Some(amd_signal_value_pointer);
    a.hsa_amd_signal_wait_any_fn = Some(amd_signal_wait_any);
    a.hsa_amd_signal_wait_all_fn = Some(amd_signal_wait_all);
    a.hsa_amd_signal_async_handler_fn = Some(amd_signal_async_handler);
    a.hsa_amd_async_function_fn = Some(amd_async_function);
}

/// Creates a user signal with `initial` value; `None` when out of memory.
pub(crate) fn create(initial: i64) -> Option<hsa_signal_t> {
    let recycled = FREE.lock().pop();
    let addr = match recycled {
        Some(addr) => {
            let sig = get(hsa_signal_t { handle: addr })?;
            sig.start_ts.store(0, Ordering::Relaxed);
            sig.end_ts.store(0, Ordering::Relaxed);
            sig.value.store(initial, Ordering::Relaxed);
            sig.kind.store(AMD_SIGNAL_KIND_USER, Ordering::Release);
            addr
        }
        None => {
            let layout = std::alloc::Layout::new::<Signal>();
            // SAFETY: `Signal` has a non-zero size.
            let p = unsafe { std::alloc::alloc(layout) }.cast::<Signal>();
            if p.is_null() {
                return None;
            }
            // SAFETY: `p` is a fresh allocation with the layout of `Signal`.
            unsafe {
                p.write(Signal {
                    kind: AtomicI64::new(AMD_SIGNAL_KIND_USER),
                    value: AtomicI64::new(initial),
                    event_mailbox_ptr: 0,
                    event_id: 0,
                    reserved1: 0,
                    start_ts: AtomicU64::new(0),
                    end_ts: AtomicU64::new(0),
                    queue_ptr: 0,
                    reserved3: [0; 2],
                    epoch: AtomicU32::new(0),
                    waiters: AtomicU32::new(0),
                    incarnation: AtomicU64::new(0),
                    has_hook: AtomicBool::new(false),
                    hook: Mutex::new(None),
                })
            };
            p as u64
        }
    };
    REGISTRY.write().insert(addr);
    Some(hsa_signal_t { handle: addr })
}

/// Destroys a signal; `HSA_STATUS_ERROR_INVALID_SIGNAL` if `s` is not a live signal.
///
/// Sleeping waiters are woken (they return the current value); async handlers registered on
/// it are dropped; the memory is kept for reuse.
pub(crate) fn destroy_checked(s: hsa_signal_t) -> hsa_status_t {
    if !REGISTRY.write().remove(&s.handle) {
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    }
    let Some(sig) = get(s) else {
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    };
    sig.incarnation.fetch_add(1, Ordering::SeqCst);
    sig.kind.store(AMD_SIGNAL_KIND_INVALID, Ordering::Release);
    sig.has_hook.store(false, Ordering::Release);
    let hook = sig.hook.lock().take();
    drop(hook);
    sig.epoch.fetch_add(1, Ordering::SeqCst);
    futex_wake_all(&sig.epoch);
    notify_global();
    FREE.lock().push(s.handle);
    HSA_STATUS_SUCCESS
}

/// Destroys a signal created by [`create`] or the API (unknown handles are ignored).
pub(crate) fn destroy(s: hsa_signal_t) {
    let _ = destroy_checked(s);
}

/// Whether `s` is a live signal of this runtime.
pub(crate) fn is_valid(s: hsa_signal_t) -> bool {
    s.handle != 0 && REGISTRY.read().contains(&s.handle)
}

/// Current value (acquire).
pub(crate) fn load(s: hsa_signal_t) -> i64 {
    load_ord(s, Ordering::Acquire)
}

/// Stores `v` (release) and wakes waiters and the store hook.
pub(crate) fn store(s: hsa_signal_t, v: i64) {
    store_ord(s, v, Ordering::Release);
}

/// Atomically subtracts `v` (acq-rel) and wakes waiters and the store hook: packet completion.
pub(crate) fn subtract(s: hsa_signal_t, v: i64) {
    rmw(s, Rmw::Sub, v, Ordering::AcqRel);
}

/// Blocks without spinning until `value cond compare` holds or `deadline` passes; returns the
/// last value observed.
///
/// An unknown condition returns the current value at once, as does handle 0 (value 0).
pub(crate) fn wait(
    s: hsa_signal_t,
    cond: hsa_signal_condition_t,
    compare: i64,
    deadline: Option<Instant>,
) -> i64 {
    wait_ord(s, cond, compare, deadline, Ordering::Acquire)
}

/// Records start/end timestamps in the signal's `amd_signal_t` (profiling).
pub(crate) fn set_timestamps(s: hsa_signal_t, start: u64, end: u64) {
    if let Some(sig) = get(s) {
        sig.start_ts.store(start, Ordering::Relaxed);
        sig.end_ts.store(end, Ordering::Release);
    }
}

/// The start/end timestamps recorded in the signal.
pub(crate) fn timestamps(s: hsa_signal_t) -> (u64, u64) {
    get(s).map_or((0, 0), |sig| {
        let end = sig.end_ts.load(Ordering::Acquire);
        (sig.start_ts.load(Ordering::Relaxed), end)
    })
}

/// Called on the storing thread after every value change of `s` made through the API.
pub(crate) type StoreHook = Box<dyn Fn(i64) + Send + Sync>;

/// Installs a hook run after every value change of `s` (doorbells use it).
///
/// It replaces any earlier hook and is dropped when the signal is destroyed. It runs on the
/// thread that made the change, with no lock of this module held, so it may use signals.
pub(crate) fn set_store_hook(s: hsa_signal_t, hook: StoreHook) {
    if let Some(sig) = get(s) {
        let old = sig.hook.lock().replace(Arc::new(hook));
        sig.has_hook.store(true, Ordering::Release);
        drop(old);
    }
}

// ---------------------------------------------------------------------------------------------
// core API slots

/// Shared body of `hsa_signal_create` and `hsa_amd_signal_create`.
///
/// # Safety
/// `consumers` must be null or valid for `num_consumers` reads; `out` null or writable.
unsafe fn create_api(
    initial: i64,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    out: *mut hsa_signal_t,
) -> hsa_status_t {
    if out.is_null() || (num_consumers > 0 && consumers.is_null()) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if num_consumers > 0 {
        // SAFETY: non-null and valid for `num_consumers` reads (caller contract).
        let list = unsafe { std::slice::from_raw_parts(consumers, num_consumers as usize) };
        let topo = crate::topology::topology();
        if list.iter().any(|a| topo.agent(*a).is_none()) {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        let unique: HashSet<u64> = list.iter().map(|a| a.handle).collect();
        if unique.len() != list.len() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
    }
    if crate::faults::faults().signal_create_fails() {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    match create(initial) {
        Some(s) => {
            // SAFETY: non-null and writable (caller contract).
            unsafe { out.write(s) };
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_OUT_OF_RESOURCES,
    }
}

unsafe extern "C" fn signal_create(
    initial_value: hsa_signal_value_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    signal: *mut hsa_signal_t,
) -> hsa_status_t {
    // SAFETY: the API user's pointers, forwarded under the same contract.
    guard_status(|| unsafe { create_api(initial_value, num_consumers, consumers, signal) })
}

unsafe extern "C" fn amd_signal_create(
    initial_value: hsa_signal_value_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    attributes: u64,
    signal: *mut hsa_signal_t,
) -> hsa_status_t {
    guard_status(|| {
        // SAFETY: the API user's pointers, forwarded under the same contract.
        let status = unsafe { create_api(initial_value, num_consumers, consumers, signal) };
        if status == HSA_STATUS_SUCCESS && crate::trace::enabled() {
            // SAFETY: written by create_api on success.
            let s = unsafe { signal.read() };
            crate::trace::line(format_args!(
                "signal {:#x} created: value {initial_value}, attributes {attributes:#x}",
                s.handle
            ));
        }
        status
    })
}

unsafe extern "C" fn signal_destroy(signal: hsa_signal_t) -> hsa_status_t {
    guard_status(|| destroy_checked(signal))
}

unsafe extern "C" fn load_relaxed(s: hsa_signal_t) -> hsa_signal_value_t {
    guard(0, || load_ord(s, Ordering::Relaxed))
}

unsafe extern "C" fn load_scacquire(s: hsa_signal_t) -> hsa_signal_value_t {
    guard(0, || load_ord(s, Ordering::Acquire))
}

unsafe extern "C" fn store_relaxed(s: hsa_signal_t, v: hsa_signal_value_t) {
    guard((), || store_ord(s, v, Ordering::Relaxed))
}

unsafe extern "C" fn store_screlease(s: hsa_signal_t, v: hsa_signal_value_t) {
    guard((), || store_ord(s, v, Ordering::Release))
}

unsafe extern "C" fn wait_relaxed(
    s: hsa_signal_t,
    cond: hsa_signal_condition_t,
    compare: hsa_signal_value_t,
    timeout_hint: u64,
    _wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t {
    guard(0, || {
        wait_ord(
            s,
            cond,
            compare,
            deadline_of(timeout_hint),
            Ordering::Relaxed,
        )
    })
}

unsafe extern "C" fn wait_scacquire(
    s: hsa_signal_t,
    cond: hsa_signal_condition_t,
    compare: hsa_signal_value_t,
    timeout_hint: u64,
    _wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t {
    guard(0, || {
        wait_ord(
            s,
            cond,
            compare,
            deadline_of(timeout_hint),
            Ordering::Acquire,
        )
    })
}

/// Defines `unsafe extern "C" fn name(signal, value)` slots applying an [`Rmw`] operation.
macro_rules! rmw_slots {
    ($($name:ident => $op:ident, $ord:ident;)*) => {$(
        unsafe extern "C" fn $name(s: hsa_signal_t, v: hsa_signal_value_t) {
            guard((), || {
                rmw(s, Rmw::$op, v, Ordering::$ord);
            })
        }
    )*};
}

rmw_slots! {
    and_relaxed => And, Relaxed;
    and_scacquire => And, Acquire;
    and_screlease => And, Release;
    and_scacq_screl => And, AcqRel;
    or_relaxed => Or, Relaxed;
    or_scacquire => Or, Acquire;
    or_screlease => Or, Release;
    or_scacq_screl => Or, AcqRel;
    xor_relaxed => Xor, Relaxed;
    xor_scacquire => Xor, Acquire;
    xor_screlease => Xor, Release;
    xor_scacq_screl => Xor, AcqRel;
    add_relaxed => Add, Relaxed;
    add_scacquire => Add, Acquire;
    add_screlease => Add, Release;
    add_scacq_screl => Add, AcqRel;
    subtract_relaxed => Sub, Relaxed;
    subtract_scacquire => Sub, Acquire;
    subtract_screlease => Sub, Release;
    subtract_scacq_screl => Sub, AcqRel;
}

/// Defines `hsa_signal_exchange_*` slots (return the previous value).
macro_rules! exchange_slots {
    ($($name:ident => $ord:ident;)*) => {$(
        unsafe extern "C" fn $name(s: hsa_signal_t, v: hsa_signal_value_t) -> hsa_signal_value_t {
            guard(0, || rmw(s, Rmw::Exchange, v, Ordering::$ord))
        }
    )*};
}

exchange_slots! {
    exchange_relaxed => Relaxed;
    exchange_scacquire => Acquire;
    exchange_screlease => Release;
    exchange_scacq_screl => AcqRel;
}

/// Defines `hsa_signal_cas_*` slots (return the observed value).
macro_rules! cas_slots {
    ($($name:ident => $ord:ident;)*) => {$(
        unsafe extern "C" fn $name(
            s: hsa_signal_t,
            expected: hsa_signal_value_t,
            v: hsa_signal_value_t,
        ) -> hsa_signal_value_t {
            guard(0, || cas(s, expected, v, Ordering::$ord))
        }
    )*};
}

cas_slots! {
    cas_relaxed => Relaxed;
    cas_scacquire => Acquire;
    cas_screlease => Release;
    cas_scacq_screl => AcqRel;
}

// ---------------------------------------------------------------------------------------------
// signal groups

/// Live signal groups by handle.
static GROUPS: LazyLock<Mutex<HashMap<u64, Arc<[hsa_signal_t]>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Next group handle (never 0).
static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

unsafe extern "C" fn group_create(
    num_signals: u32,
    signals: *const hsa_signal_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    signal_group: *mut hsa_signal_group_t,
) -> hsa_status_t {
    guard_status(|| {
        if num_signals == 0
            || signals.is_null()
            || signal_group.is_null()
            || (num_consumers > 0 && consumers.is_null())
        {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null and valid for `num_signals` reads (API contract).
        let list = unsafe { std::slice::from_raw_parts(signals, num_signals as usize) };
        if !list.iter().all(|s| is_valid(*s)) {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let handle = NEXT_GROUP.fetch_add(1, Ordering::Relaxed);
        GROUPS.lock().insert(handle, Arc::from(list));
        // SAFETY: non-null and writable (API contract).
        unsafe { signal_group.write(hsa_signal_group_t { handle }) };
        HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn group_destroy(signal_group: hsa_signal_group_t) -> hsa_status_t {
    guard_status(|| match GROUPS.lock().remove(&signal_group.handle) {
        Some(_) => HSA_STATUS_SUCCESS,
        None => HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP,
    })
}

/// Shared body of the `hsa_signal_group_wait_any_*` slots (no deadline, as the API defines).
///
/// # Safety
/// `conditions`/`compare_values` null or valid for the group's size; outputs null or writable.
unsafe fn group_wait_any(
    group: hsa_signal_group_t,
    conditions: *const hsa_signal_condition_t,
    compare_values: *const hsa_signal_value_t,
    signal: *mut hsa_signal_t,
    value: *mut hsa_signal_value_t,
    ord: Ordering,
) -> hsa_status_t {
    let Some(list) = GROUPS.lock().get(&group.handle).cloned() else {
        return HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP;
    };
    if conditions.is_null() || compare_values.is_null() || signal.is_null() || value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null and valid for one entry per signal of the group (API contract).
    let conds = unsafe { std::slice::from_raw_parts(conditions, list.len()) };
    // SAFETY: as above.
    let cmps = unsafe { std::slice::from_raw_parts(compare_values, list.len()) };
    // No deadline: the API has none; this is a loop of bounded futex sleeps.
    match wait_any_ord(&list, conds, cmps, None, ord) {
        Some((i, v)) => {
            // SAFETY: non-null and writable (API contract).
            unsafe {
                signal.write(list[i]);
                value.write(v);
            }
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR,
    }
}

unsafe extern "C" fn group_wait_any_scacquire(
    group: hsa_signal_group_t,
    conditions: *const hsa_signal_condition_t,
    compare_values: *const hsa_signal_value_t,
    _wait_state_hint: hsa_wait_state_t,
    signal: *mut hsa_signal_t,
    value: *mut hsa_signal_value_t,
) -> hsa_status_t {
    guard_status(|| {
        // SAFETY: the API user's pointers, forwarded under the same contract.
        unsafe {
            group_wait_any(
                group,
                conditions,
                compare_values,
                signal,
                value,
                Ordering::Acquire,
            )
        }
    })
}

unsafe extern "C" fn group_wait_any_relaxed(
    group: hsa_signal_group_t,
    conditions: *const hsa_signal_condition_t,
    compare_values: *const hsa_signal_value_t,
    _wait_state_hint: hsa_wait_state_t,
    signal: *mut hsa_signal_t,
    value: *mut hsa_signal_value_t,
) -> hsa_status_t {
    guard_status(|| {
        // SAFETY: the API user's pointers, forwarded under the same contract.
        unsafe {
            group_wait_any(
                group,
                conditions,
                compare_values,
                signal,
                value,
                Ordering::Relaxed,
            )
        }
    })
}

// ---------------------------------------------------------------------------------------------
// AMD extension: value pointer, wait any / all

unsafe extern "C" fn amd_signal_value_pointer(
    signal: hsa_signal_t,
    value_ptr: *mut *mut hsa_signal_value_t,
) -> hsa_status_t {
    guard_status(|| {
        if !is_valid(signal) {
            return HSA_STATUS_ERROR_INVALID_SIGNAL;
        }
        if value_ptr.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some(sig) = get(signal) else {
            return HSA_STATUS_ERROR_INVALID_SIGNAL;
        };
        // SAFETY: non-null and writable (API contract).
        unsafe { value_ptr.write(sig.value.as_ptr()) };
        HSA_STATUS_SUCCESS
    })
}

/// The three input arrays of `wait_any`/`wait_all` as slices; `None` if one is null.
///
/// # Safety
/// Each pointer must be null or valid for `count` reads for `'a`.
unsafe fn wait_arrays<'a>(
    count: u32,
    signals: *const hsa_signal_t,
    conds: *const hsa_signal_condition_t,
    values: *const hsa_signal_value_t,
) -> Option<(&'a [hsa_signal_t], &'a [hsa_signal_condition_t], &'a [i64])> {
    if count == 0 || signals.is_null() || conds.is_null() || values.is_null() {
        return None;
    }
    let n = count as usize;
    // SAFETY: non-null and valid for `count` reads (caller contract).
    unsafe {
        Some((
            std::slice::from_raw_parts(signals, n),
            std::slice::from_raw_parts(conds, n),
            std::slice::from_raw_parts(values, n),
        ))
    }
}

unsafe extern "C" fn amd_signal_wait_any(
    signal_count: u32,
    signals: *mut hsa_signal_t,
    conds: *mut hsa_signal_condition_t,
    values: *mut hsa_signal_value_t,
    timeout_hint: u64,
    _wait_hint: hsa_wait_state_t,
    satisfying_value: *mut hsa_signal_value_t,
) -> u32 {
    guard(u32::MAX, || {
        // SAFETY: the API user's arrays of `signal_count` entries.
        let Some((s, c, v)) = (unsafe { wait_arrays(signal_count, signals, conds, values) }) else {
            return u32::MAX;
        };
        match wait_any_ord(s, c, v, deadline_of(timeout_hint), Ordering::Acquire) {
            Some((i, value)) => {
                if !satisfying_value.is_null() {
                    // SAFETY: non-null and writable (API contract).
                    unsafe { satisfying_value.write(value) };
                }
                i as u32
            }
            None => u32::MAX,
        }
    })
}

/// Waits until every condition holds at once or `deadline` passes; returns whether they all
/// held and the values last observed.
///
/// Handle 0 counts as satisfied with value 0 (ROCr's behaviour: barrier packets pass their
/// unused dependency slots); unknown conditions never hold.
fn wait_all_ord(
    signals: &[hsa_signal_t],
    conds: &[hsa_signal_condition_t],
    values: &[i64],
    deadline: Option<Instant>,
) -> (bool, Vec<i64>) {
    let mut seen = vec![0i64; signals.len()];
    let check = |seen: &mut Vec<i64>| {
        let mut all = true;
        for (i, ((s, c), cmp)) in signals.iter().zip(conds).zip(values).enumerate() {
            let Some(sig) = get(*s) else {
                seen[i] = 0;
                continue;
            };
            let v = sig.value.load(Ordering::Acquire);
            seen[i] = v;
            all &= holds(*c, v, *cmp).unwrap_or(false);
        }
        all
    };
    if check(&mut seen) {
        return (true, seen);
    }
    let _count = WaiterCount::new(&GLOBAL_WAITERS);
    loop {
        let e = GLOBAL_EPOCH.load(Ordering::SeqCst);
        if check(&mut seen) {
            return (true, seen);
        }
        let Some(sleep) = next_sleep(deadline) else {
            return (false, seen);
        };
        futex_wait(&GLOBAL_EPOCH, e, sleep);
    }
}

/// `hsa_amd_signal_wait_all`: 0 when every condition holds, `UINT32_MAX` on timeout or bad
/// arguments; the values last observed go to `satisfying_values` (which may be null).
unsafe extern "C" fn amd_signal_wait_all(
    signal_count: u32,
    signals: *mut hsa_signal_t,
    conds: *mut hsa_signal_condition_t,
    values: *mut hsa_signal_value_t,
    timeout_hint: u64,
    _wait_hint: hsa_wait_state_t,
    satisfying_values: *mut hsa_signal_value_t,
) -> u32 {
    guard(u32::MAX, || {
        // SAFETY: the API user's arrays of `signal_count` entries.
        let Some((s, c, v)) = (unsafe { wait_arrays(signal_count, signals, conds, values) }) else {
            return u32::MAX;
        };
        let (all, seen) = wait_all_ord(s, c, v, deadline_of(timeout_hint));
        if !satisfying_values.is_null() {
            // SAFETY: non-null and valid for `signal_count` writes (API contract).
            unsafe { std::ptr::copy_nonoverlapping(seen.as_ptr(), satisfying_values, seen.len()) };
        }
        if all { 0 } else { u32::MAX }
    })
}

// ---------------------------------------------------------------------------------------------
// async handlers and functions

/// A registered `hsa_amd_signal_async_handler`.
struct AsyncHandler {
    signal: hsa_signal_t,
    incarnation: u64,
    cond: hsa_signal_condition_t,
    value: i64,
    handler: unsafe extern "C" fn(hsa_signal_value_t, *mut c_void) -> bool,
    arg: usize,
}

/// A queued `hsa_amd_async_function` call.
struct AsyncCall {
    callback: unsafe extern "C" fn(*mut c_void),
    arg: usize,
}

/// The running async thread.
struct Worker {
    stop: Arc<AtomicBool>,
    done: mpsc::Receiver<()>,
    handle: JoinHandle<()>,
    id: ThreadId,
}

/// State shared with the async thread.
struct AsyncState {
    handlers: Vec<AsyncHandler>,
    calls: VecDeque<AsyncCall>,
    worker: Option<Worker>,
}

static ASYNC: Mutex<AsyncState> = Mutex::new(AsyncState {
    handlers: Vec::new(),
    calls: VecDeque::new(),
    worker: None,
});

/// Starts the async thread if none runs; `false` if it cannot be started.
fn ensure_worker(st: &mut AsyncState) -> bool {
    if st.worker.is_some() {
        return true;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("hsa-emu-async".into())
        .spawn(move || {
            async_loop(&flag);
            let _ = tx.send(());
        });
    match spawned {
        Ok(handle) => {
            let id = handle.thread().id();
            st.worker = Some(Worker {
                stop,
                done: rx,
                handle,
                id,
            });
            true
        }
        Err(e) => {
            eprintln!("hsa-emu: cannot start the async handler thread: {e}");
            false
        }
    }
}

/// Whether the signal an async handler was registered on is still that signal.
fn handler_signal(h: &AsyncHandler) -> Option<&'static Signal> {
    get(h.signal).filter(|sig| sig.incarnation.load(Ordering::Acquire) == h.incarnation)
}

/// The async thread: runs queued functions and fires handlers whose condition holds.
fn async_loop(stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let epoch = GLOBAL_EPOCH.load(Ordering::SeqCst);
        let (calls, handlers) = {
            let mut st = ASYNC.lock();
            (
                std::mem::take(&mut st.calls),
                std::mem::take(&mut st.handlers),
            )
        };
        let mut progressed = !calls.is_empty();
        for call in calls {
            // SAFETY: a callback and argument the API user registered for this purpose.
            guard((), || unsafe { (call.callback)(call.arg as *mut c_void) });
        }
        let mut keep = Vec::with_capacity(handlers.len());
        for h in handlers {
            let Some(sig) = handler_signal(&h) else {
                continue;
            };
            let v = sig.value.load(Ordering::Acquire);
            if holds(h.cond, v, h.value).unwrap_or(false) {
                progressed = true;
                // SAFETY: a handler and argument the API user registered for this purpose.
                if guard(false, || unsafe { (h.handler)(v, h.arg as *mut c_void) }) {
                    keep.push(h);
                }
            } else {
                keep.push(h);
            }
        }
        let (has_handlers, more_calls) = {
            let mut st = ASYNC.lock();
            if stop.load(Ordering::Acquire) {
                // Shut down while we ran: the state was cleared; do not bring entries back.
                return;
            }
            keep.append(&mut st.handlers);
            st.handlers = keep;
            (!st.handlers.is_empty(), !st.calls.is_empty())
        };
        if progressed || more_calls {
            continue;
        }
        // Registered handlers need a wake-up on every change; with none we wake only for new
        // work (kick_global) or the periodic timeout.
        let _count = has_handlers.then(|| WaiterCount::new(&GLOBAL_WAITERS));
        futex_wait(&GLOBAL_EPOCH, epoch, MAX_SLEEP);
    }
}

unsafe extern "C" fn amd_signal_async_handler(
    signal: hsa_signal_t,
    cond: hsa_signal_condition_t,
    value: hsa_signal_value_t,
    handler: hsa_amd_signal_handler,
    arg: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(handler) = handler else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if holds(cond, 0, 0).is_none() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        if !is_valid(signal) {
            return HSA_STATUS_ERROR_INVALID_SIGNAL;
        }
        let Some(sig) = get(signal) else {
            return HSA_STATUS_ERROR_INVALID_SIGNAL;
        };
        let incarnation = sig.incarnation.load(Ordering::Acquire);
        {
            let mut st = ASYNC.lock();
            if !ensure_worker(&mut st) {
                return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
            }
            st.handlers.push(AsyncHandler {
                signal,
                incarnation,
                cond,
                value,
                handler,
                arg: arg as usize,
            });
        }
        kick_global();
        HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn amd_async_function(
    callback: Option<unsafe extern "C" fn(arg: *mut c_void)>,
    arg: *mut c_void,
) -> hsa_status_t {
    guard_status(|| {
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        {
            let mut st = ASYNC.lock();
            if !ensure_worker(&mut st) {
                return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
            }
            st.calls.push_back(AsyncCall {
                callback,
                arg: arg as usize,
            });
        }
        kick_global();
        HSA_STATUS_SUCCESS
    })
}

/// Stops the async thread (at the last `hsa_shut_down`): registered handlers and queued
/// functions are dropped; waits at most one second for the thread. A later registration
/// starts a new thread. Called from a handler (on the async thread itself) it only asks the
/// thread to stop after the handler returns.
pub(crate) fn shutdown() {
    let worker = {
        let mut st = ASYNC.lock();
        st.handlers.clear();
        st.calls.clear();
        st.worker.take()
    };
    let Some(w) = worker else { return };
    w.stop.store(true, Ordering::Release);
    kick_global();
    if w.id == std::thread::current().id() {
        return;
    }
    match w.done.recv_timeout(SHUTDOWN_JOIN) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            let _ = w.handle.join();
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            eprintln!("hsa-emu: the async handler thread did not stop within 1 s; leaving it");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn sig(v: i64) -> hsa_signal_t {
        create(v).expect("create")
    }

    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer; the clock exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// Serialises the tests that use the shared async thread (one of them shuts it down, which
    /// also discards queued async calls and registered handlers): other modules' tests that
    /// rely on the async thread take it too.
    pub(crate) static ASYNC_TESTS: Mutex<()> = Mutex::new(());

    #[test]
    fn layout_is_an_amd_signal_with_user_kind_and_value_at_8() {
        let s = sig(42);
        // SAFETY: the handle is the address of a live signal whose prefix is an amd_signal_t.
        let raw = unsafe { &*(s.handle as *const amd_signal_t) };
        assert_eq!(s.handle % 64, 0);
        assert_eq!(raw.kind, AMD_SIGNAL_KIND_USER);
        assert_eq!(raw.value, 42);
        set_timestamps(s, 11, 22);
        // SAFETY: as above.
        let raw = unsafe { &*(s.handle as *const amd_signal_t) };
        assert_eq!((raw.start_ts, raw.end_ts), (11, 22));
        assert_eq!(timestamps(s), (11, 22));
        destroy(s);
    }

    #[test]
    fn value_ops_in_every_ordering() {
        let s = sig(0);
        // SAFETY: `s` is live for every call below.
        unsafe {
            for (store, loadf) in [
                (
                    store_relaxed as hsa_signal_store_relaxed_fn_t,
                    load_relaxed as hsa_signal_load_relaxed_fn_t,
                ),
                (store_screlease, load_scacquire),
            ] {
                store(s, 0b1100);
                assert_eq!(loadf(s), 0b1100);
            }
            for f in [and_relaxed, and_scacquire, and_screlease, and_scacq_screl] {
                store_relaxed(s, 0b1100);
                f(s, 0b1010);
                assert_eq!(load_scacquire(s), 0b1000);
            }
            for f in [or_relaxed, or_scacquire, or_screlease, or_scacq_screl] {
                store_relaxed(s, 0b1100);
                f(s, 0b1010);
                assert_eq!(load_scacquire(s), 0b1110);
            }
            for f in [xor_relaxed, xor_scacquire, xor_screlease, xor_scacq_screl] {
                store_relaxed(s, 0b1100);
                f(s, 0b1010);
                assert_eq!(load_scacquire(s), 0b0110);
            }
            for f in [add_relaxed, add_scacquire, add_screlease, add_scacq_screl] {
                store_relaxed(s, 5);
                f(s, 7);
                assert_eq!(load_scacquire(s), 12);
            }
            for f in [
                subtract_relaxed,
                subtract_scacquire,
                subtract_screlease,
                subtract_scacq_screl,
            ] {
                store_relaxed(s, 5);
                f(s, 7);
                assert_eq!(load_scacquire(s), -2);
            }
            for f in [
                exchange_relaxed,
                exchange_scacquire,
                exchange_screlease,
                exchange_scacq_screl,
            ] {
                store_relaxed(s, 3);
                assert_eq!(f(s, 9), 3);
                assert_eq!(load_scacquire(s), 9);
            }
            for f in [cas_relaxed, cas_scacquire, cas_screlease, cas_scacq_screl] {
                store_relaxed(s, 3);
                assert_eq!(f(s, 4, 8), 3, "failed cas returns the current value");
                assert_eq!(load_scacquire(s), 3, "failed cas changes nothing");
                assert_eq!(f(s, 3, 8), 3, "successful cas returns the old value");
                assert_eq!(load_scacquire(s), 8);
            }
            // Handle 0 is tolerated.
            assert_eq!(load_scacquire(hsa_signal_t { handle: 0 }), 0);
            add_relaxed(hsa_signal_t { handle: 0 }, 1);
        }
        destroy(s);
    }

    #[test]
    fn create_destroy_and_validity() {
        let mut out = hsa_signal_t { handle: 0 };
        // SAFETY: valid out-pointer; no consumers.
        let got = unsafe { signal_create(7, 0, std::ptr::null(), &mut out) };
        assert_eq!(got, HSA_STATUS_SUCCESS);
        assert!(is_valid(out));
        assert_eq!(load(out), 7);
        // SAFETY: null out-pointer is rejected before use.
        let got = unsafe { signal_create(0, 0, std::ptr::null(), std::ptr::null_mut()) };
        assert_eq!(got, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        // SAFETY: consumers null with a count is rejected before use.
        let got = unsafe { signal_create(0, 1, std::ptr::null(), &mut out.clone()) };
        assert_eq!(got, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        let bogus = hsa_agent_t { handle: 12345 };
        let mut out2 = hsa_signal_t { handle: 0 };
        // SAFETY: one valid consumer entry and a valid out-pointer.
        let got = unsafe { amd_signal_create(0, 1, &bogus, 0, &mut out2) };
        assert_eq!(got, HSA_STATUS_ERROR_INVALID_AGENT);
        let cpu = crate::topology::topology().cpu().handle;
        // SAFETY: as above.
        let got = unsafe { amd_signal_create(0, 1, &cpu, 0, &mut out2) };
        assert_eq!(got, HSA_STATUS_SUCCESS);

        let mut p: *mut hsa_signal_value_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let got = unsafe { amd_signal_value_pointer(out2, &mut p) };
        assert_eq!(got, HSA_STATUS_SUCCESS);
        store(out2, 99);
        // SAFETY: the pointer is the live signal's value word.
        assert_eq!(unsafe { p.read_volatile() }, 99);

        // SAFETY: plain handle arguments.
        unsafe {
            assert_eq!(signal_destroy(out), HSA_STATUS_SUCCESS);
            assert!(!is_valid(out));
            assert_eq!(
                signal_destroy(out),
                HSA_STATUS_ERROR_INVALID_SIGNAL,
                "double destroy"
            );
            assert_eq!(
                signal_destroy(hsa_signal_t {
                    handle: 0xdead_0000
                }),
                HSA_STATUS_ERROR_INVALID_SIGNAL
            );
            assert_eq!(
                signal_destroy(hsa_signal_t { handle: 0 }),
                HSA_STATUS_ERROR_INVALID_SIGNAL
            );
            assert_eq!(signal_destroy(out2), HSA_STATUS_SUCCESS);
        }
    }

    #[test]
    fn wait_returns_at_once_when_satisfied() {
        let s = sig(5);
        let t = Instant::now();
        // SAFETY: live signal.
        unsafe {
            assert_eq!(
                wait_scacquire(
                    s,
                    HSA_SIGNAL_CONDITION_EQ,
                    5,
                    u64::MAX,
                    HSA_WAIT_STATE_BLOCKED
                ),
                5
            );
            assert_eq!(
                wait_relaxed(
                    s,
                    HSA_SIGNAL_CONDITION_NE,
                    4,
                    u64::MAX,
                    HSA_WAIT_STATE_ACTIVE
                ),
                5
            );
            assert_eq!(
                wait_scacquire(
                    s,
                    HSA_SIGNAL_CONDITION_LT,
                    6,
                    u64::MAX,
                    HSA_WAIT_STATE_BLOCKED
                ),
                5
            );
            assert_eq!(
                wait_scacquire(
                    s,
                    HSA_SIGNAL_CONDITION_GTE,
                    5,
                    u64::MAX,
                    HSA_WAIT_STATE_BLOCKED
                ),
                5
            );
        }
        assert_eq!(wait(s, HSA_SIGNAL_CONDITION_GTE, 5, None), 5);
        assert!(t.elapsed() < Duration::from_millis(20));
        destroy(s);
    }

    #[test]
    fn timed_wait_sleeps_until_the_timeout_without_burning_cpu() {
        let s = sig(1);
        let cpu0 = thread_cpu_ns();
        let t = Instant::now();
        // SAFETY: live signal.
        let v = unsafe {
            wait_scacquire(
                s,
                HSA_SIGNAL_CONDITION_EQ,
                0,
                20_000_000,
                HSA_WAIT_STATE_BLOCKED,
            )
        };
        let wall = t.elapsed();
        let cpu = thread_cpu_ns() - cpu0;
        assert_eq!(v, 1);
        assert!(wall >= Duration::from_millis(19), "returned after {wall:?}");
        assert!(
            cpu < wall.as_nanos() as u64 / 10,
            "burned {cpu} ns of CPU in {wall:?}"
        );

        let t = Instant::now();
        let v = wait(
            s,
            HSA_SIGNAL_CONDITION_LT,
            0,
            Some(Instant::now() + Duration::from_millis(120)),
        );
        assert_eq!(v, 1);
        assert!(t.elapsed() >= Duration::from_millis(119));
        destroy(s);
    }

    #[test]
    fn a_store_wakes_a_waiter_on_another_thread_quickly() {
        let s = sig(1);
        let h = s.handle;
        let waiter = std::thread::spawn(move || {
            let s = hsa_signal_t { handle: h };
            let v = wait(
                s,
                HSA_SIGNAL_CONDITION_EQ,
                0,
                Some(Instant::now() + Duration::from_secs(5)),
            );
            (v, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(100));
        let stored = Instant::now();
        subtract(s, 1);
        let (v, woke) = waiter.join().unwrap();
        assert_eq!(v, 0);
        let latency = woke.saturating_duration_since(stored);
        assert!(
            latency < Duration::from_millis(30),
            "woken after {latency:?}"
        );
        destroy(s);
    }

    #[test]
    fn a_direct_memory_write_is_noticed_by_a_sleeping_waiter() {
        let s = sig(1);
        let h = s.handle;
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: the value word of a live signal, written as a tool or GPU would.
            unsafe {
                ((h + 8) as *const AtomicI64)
                    .as_ref()
                    .unwrap()
                    .store(0, Ordering::Release)
            };
        });
        let t = Instant::now();
        let v = wait(
            s,
            HSA_SIGNAL_CONDITION_EQ,
            0,
            Some(Instant::now() + Duration::from_secs(2)),
        );
        assert_eq!(v, 0);
        assert!(t.elapsed() < Duration::from_millis(500));
        writer.join().unwrap();
        destroy(s);
    }

    #[test]
    fn wait_any_returns_the_satisfied_index_or_uint32_max() {
        let a = sig(1);
        let b = sig(1);
        let mut signals = [a, b];
        let mut conds = [HSA_SIGNAL_CONDITION_EQ, HSA_SIGNAL_CONDITION_EQ];
        let mut values = [0i64, 0];
        let mut sat = -1i64;
        // SAFETY: arrays of 2 entries and a valid out-pointer.
        let r = unsafe {
            amd_signal_wait_any(
                2,
                signals.as_mut_ptr(),
                conds.as_mut_ptr(),
                values.as_mut_ptr(),
                10_000_000,
                0,
                &mut sat,
            )
        };
        assert_eq!(r, u32::MAX);
        let bh = b.handle;
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store(hsa_signal_t { handle: bh }, 0);
        });
        let start = Instant::now();
        // SAFETY: as above.
        let r = unsafe {
            amd_signal_wait_any(
                2,
                signals.as_mut_ptr(),
                conds.as_mut_ptr(),
                values.as_mut_ptr(),
                5_000_000_000,
                0,
                &mut sat,
            )
        };
        t.join().unwrap();
        assert_eq!((r, sat), (1, 0));
        assert!(start.elapsed() < Duration::from_secs(1));

        // wait_all: both must hold.
        let mut sats = [7i64; 2];
        // SAFETY: as above.
        let r = unsafe {
            amd_signal_wait_all(
                2,
                signals.as_mut_ptr(),
                conds.as_mut_ptr(),
                values.as_mut_ptr(),
                10_000_000,
                0,
                sats.as_mut_ptr(),
            )
        };
        assert_eq!(r, u32::MAX);
        store(a, 0);
        // SAFETY: as above.
        let r = unsafe {
            amd_signal_wait_all(
                2,
                signals.as_mut_ptr(),
                conds.as_mut_ptr(),
                values.as_mut_ptr(),
                10_000_000,
                0,
                sats.as_mut_ptr(),
            )
        };
        assert_eq!((r, sats), (0, [0, 0]));
        // A null handle counts as satisfied in wait_all and never satisfies wait_any.
        let mut with_null = [hsa_signal_t { handle: 0 }, a];
        let mut eq1 = [HSA_SIGNAL_CONDITION_EQ, HSA_SIGNAL_CONDITION_EQ];
        let mut ones = [1i64, 0];
        // SAFETY: as above.
        let r = unsafe {
            amd_signal_wait_all(
                2,
                with_null.as_mut_ptr(),
                eq1.as_mut_ptr(),
                ones.as_mut_ptr(),
                10_000_000,
                0,
                sats.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: as above.
        let r = unsafe {
            amd_signal_wait_any(
                2,
                with_null.as_mut_ptr(),
                eq1.as_mut_ptr(),
                ones.as_mut_ptr(),
                10_000_000,
                0,
                &mut sat,
            )
        };
        assert_eq!((r, sat), (1, 0));

        // Groups.
        let mut g = hsa_signal_group_t { handle: 0 };
        store(a, 1);
        // SAFETY: array of 2 signals and a valid out-pointer.
        unsafe {
            assert_eq!(
                group_create(2, signals.as_ptr(), 0, std::ptr::null(), &mut g),
                HSA_STATUS_SUCCESS
            );
            let mut which = hsa_signal_t { handle: 0 };
            let mut v = -1;
            assert_eq!(
                group_wait_any_scacquire(g, conds.as_ptr(), values.as_ptr(), 0, &mut which, &mut v),
                HSA_STATUS_SUCCESS
            );
            assert_eq!((which, v), (b, 0));
            assert_eq!(group_destroy(g), HSA_STATUS_SUCCESS);
            assert_eq!(group_destroy(g), HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP);
            assert_eq!(
                group_wait_any_relaxed(g, conds.as_ptr(), values.as_ptr(), 0, &mut which, &mut v),
                HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP
            );
        }
        destroy(a);
        destroy(b);
    }

    #[test]
    fn store_hook_runs_on_the_storing_thread_after_the_change() {
        let s = sig(0);
        let h = s.handle;
        let seen: Arc<Mutex<Vec<(i64, i64, ThreadId)>>> = Arc::default();
        let seen2 = seen.clone();
        set_store_hook(
            s,
            Box::new(move |new| {
                let now = load(hsa_signal_t { handle: h });
                seen2.lock().push((new, now, std::thread::current().id()));
            }),
        );
        store(s, 5);
        // SAFETY: live signal.
        unsafe { add_relaxed(s, 2) };
        // SAFETY: live signal.
        unsafe { cas_relaxed(s, 100, 1) }; // fails: no hook call
        let other = std::thread::spawn(move || subtract(hsa_signal_t { handle: h }, 1));
        let other_id = other.thread().id();
        other.join().unwrap();
        let me = std::thread::current().id();
        let seen = seen.lock().clone();
        assert_eq!(seen, vec![(5, 5, me), (7, 7, me), (6, 6, other_id)]);
        destroy(s);
    }

    struct HandlerArg {
        signal: hsa_signal_t,
        calls: AtomicUsize,
        rearm: bool,
        thread: Mutex<Option<ThreadId>>,
    }

    unsafe extern "C" fn on_signal(value: hsa_signal_value_t, arg: *mut c_void) -> bool {
        // SAFETY: the test keeps the HandlerArg alive until the handler is unregistered.
        let a = unsafe { &*(arg as *const HandlerArg) };
        assert_eq!(value, 1);
        *a.thread.lock() = Some(std::thread::current().id());
        a.calls.fetch_add(1, Ordering::SeqCst);
        store(a.signal, 0);
        a.rearm
    }

    unsafe extern "C" fn bump(arg: *mut c_void) {
        // SAFETY: the test passes a live AtomicUsize.
        unsafe { &*(arg as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
    }

    fn until(deadline_ms: u64, f: impl Fn() -> bool) -> bool {
        let end = Instant::now() + Duration::from_millis(deadline_ms);
        while Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        f()
    }

    #[test]
    fn async_handlers_fire_rearm_and_unregister() {
        let _serial = ASYNC_TESTS.lock();
        for rearm in [true, false] {
            let s = sig(0);
            let arg = Box::new(HandlerArg {
                signal: s,
                calls: AtomicUsize::new(0),
                rearm,
                thread: Mutex::new(None),
            });
            let argp = &*arg as *const HandlerArg as *mut c_void;
            // SAFETY: valid handler and argument that outlives the registration.
            let st = unsafe {
                amd_signal_async_handler(s, HSA_SIGNAL_CONDITION_EQ, 1, Some(on_signal), argp)
            };
            assert_eq!(st, HSA_STATUS_SUCCESS);
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(
                arg.calls.load(Ordering::SeqCst),
                0,
                "fired before the condition held"
            );
            store(s, 1);
            assert!(until(1000, || arg.calls.load(Ordering::SeqCst) == 1));
            assert_ne!(*arg.thread.lock(), Some(std::thread::current().id()));
            assert!(until(1000, || load(s) == 0));
            store(s, 1);
            if rearm {
                assert!(until(1000, || arg.calls.load(Ordering::SeqCst) == 2));
            } else {
                std::thread::sleep(Duration::from_millis(100));
                assert_eq!(
                    arg.calls.load(Ordering::SeqCst),
                    1,
                    "unregistered handler fired again"
                );
                assert_eq!(load(s), 1);
            }
            destroy(s);
            // A destroyed signal's handler is dropped by the thread; give it time before freeing arg.
            std::thread::sleep(Duration::from_millis(60));
            drop(arg);
        }

        // Bad arguments.
        let s = sig(0);
        // SAFETY: handler None / bad cond / bad signal are rejected before use.
        unsafe {
            assert_eq!(
                amd_signal_async_handler(s, HSA_SIGNAL_CONDITION_EQ, 1, None, std::ptr::null_mut()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                amd_signal_async_handler(s, 77, 1, Some(on_signal), std::ptr::null_mut()),
                HSA_STATUS_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                amd_signal_async_handler(
                    hsa_signal_t { handle: 64 },
                    0,
                    1,
                    Some(on_signal),
                    std::ptr::null_mut()
                ),
                HSA_STATUS_ERROR_INVALID_SIGNAL
            );
        }
        destroy(s);

        // Async functions run soon, on the async thread; shutdown stops it; later use restarts.
        let count = AtomicUsize::new(0);
        let cp = &count as *const AtomicUsize as *mut c_void;
        // SAFETY: valid callback; `count` outlives the calls (we wait for them).
        unsafe {
            assert_eq!(amd_async_function(Some(bump), cp), HSA_STATUS_SUCCESS);
            assert_eq!(amd_async_function(Some(bump), cp), HSA_STATUS_SUCCESS);
        }
        assert!(until(1000, || count.load(Ordering::SeqCst) == 2));
        let t = Instant::now();
        shutdown();
        assert!(t.elapsed() < Duration::from_millis(1100));
        assert!(ASYNC.lock().worker.is_none());
        // SAFETY: as above.
        unsafe { assert_eq!(amd_async_function(Some(bump), cp), HSA_STATUS_SUCCESS) };
        assert!(until(1000, || count.load(Ordering::SeqCst) == 3));
        // SAFETY: a None callback is rejected.
        let got = unsafe { amd_async_function(None, cp) };
        assert_eq!(got, HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }

    #[test]
    fn destroy_wakes_waiters_and_memory_is_recycled() {
        let s = sig(1);
        let h = s.handle;
        let waiter = std::thread::spawn(move || {
            wait(
                hsa_signal_t { handle: h },
                HSA_SIGNAL_CONDITION_EQ,
                0,
                Some(Instant::now() + Duration::from_secs(5)),
            )
        });
        std::thread::sleep(Duration::from_millis(30));
        let t = Instant::now();
        destroy(s);
        waiter.join().unwrap();
        assert!(t.elapsed() < Duration::from_millis(200));
        // A later create may reuse the memory; it comes back with the new value and kind USER.
        let n = sig(3);
        assert_eq!(load(n), 3);
        // SAFETY: live signal.
        let got = unsafe { (*(n.handle as *const amd_signal_t)).kind };
        assert_eq!(got, AMD_SIGNAL_KIND_USER);
        destroy(n);
    }
}
