//! The packet processor: one thread per queue that consumes AQL packets strictly in order.
//!
//! While the slot at the read index is INVALID it blocks on the queue's doorbell condition
//! variable in 50 ms slices (so headers written without a doorbell are noticed too). For each
//! packet it acquire-loads the header, copies the packet, runs it to completion (kernel
//! dispatch on the worker pool, barrier waits, AMD barrier-value waits), then stores the header
//! INVALID, advances the read index (release) and only then decrements the completion signal,
//! after recording profiling timestamps. Advancing the read index before the signal means a
//! waiter that sees the completion also sees the read index past the packet. Each packet
//! finishes before the next starts, so the barrier bit holds trivially.
//!
//! Vendor-specific packets of format `AMD_AQL_FORMAT_PM4_IB` are the AQL profile extension's
//! start/stop/read packets (see `crate::aqlprofile`): the processor keeps the counting windows
//! open on its queue and accounts every dispatch it runs while one is open (what it launched,
//! how long it ran); other PM4 packets are reported once and completed.
//!
//! A dispatch of an AMDGPU kernel runs its shadow (see `crate::shadow`). A dispatch of one that
//! has no usable shadow is a queue error, as an invalid code object is for ROCr: the processor
//! prints `hsa-emu: queue N: ... kernel K has no shadow ... HSA_EMU_SHADOW ...` on stderr,
//! calls the queue's error callback (the one given to `hsa_queue_create` or
//! `hsa_amd_queue_intercept_create`, with the queue handle the application holds) with
//! `HSA_STATUS_ERROR_INVALID_CODE_OBJECT`, and puts the queue in an error state: that packet
//! and every later one stay unprocessed (never completed, the read index stays on the failed
//! packet) and the processor stops. The queue can still be destroyed. (HIP's callback aborts
//! the process.)

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocprof_replay_sys::*;

use super::Queue;
use super::workers::{self, Dispatch};
use crate::kernel_abi::KernelDescriptor;
use crate::topology::GROUP_SEGMENT_BYTES;

/// Longest single block of the processor (doorbell, barrier and hold waits).
const SLICE: Duration = Duration::from_millis(50);
/// Slice per dependency while a barrier-OR watches several signals.
const OR_SLICE: Duration = Duration::from_millis(2);

/// How a packet ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Done (or malformed and skipped): complete it.
    Done,
    /// The queue is stopping while the packet waited: leave it.
    Stopped,
    /// The packet cannot run (a kernel without a shadow): the queue is now in its error state.
    Failed,
}

/// The processor thread's body.
pub(super) fn run(q: Arc<Queue>) {
    // Counting windows of the AQL profile extension open on this queue.
    let mut counting = crate::aqlprofile::QueueCounting::default();
    while !q.stop.load(Ordering::Acquire) {
        let read = q.read_index().load(Ordering::Acquire);
        let header = q.header(read).load(Ordering::Acquire);
        if header_type(header) == HSA_PACKET_TYPE_INVALID {
            q.wake.sleep_while(
                || {
                    !q.stop.load(Ordering::Acquire)
                        && q.read_index().load(Ordering::Acquire) == read
                        && header_type(q.header(read).load(Ordering::Acquire))
                            == HSA_PACKET_TYPE_INVALID
                },
                SLICE,
            );
            continue;
        }
        // SAFETY: the header was acquire-loaded as valid, so the producer finished the body;
        // the slot is ours until the read index moves past it.
        let packet = unsafe { q.slot(read).read() };
        if crate::trace::enabled() {
            crate::trace::line(format_args!(
                "q{} [{read}] {}",
                q.id(),
                crate::trace::describe(&packet)
            ));
        }
        let start = crate::clock::now_ticks();
        let outcome = crate::ffi::guard(Outcome::Done, || {
            execute(&q, &packet, header, &mut counting)
        });
        if matches!(outcome, Outcome::Stopped | Outcome::Failed) {
            break;
        }
        let end = crate::clock::now_ticks();
        q.header(read)
            .store(HSA_PACKET_TYPE_INVALID as u16, Ordering::Release);
        q.read_index()
            .store(read.wrapping_add(1), Ordering::Release);
        complete(&q, completion_signal(&packet), start, end);
    }
    q.wake.mark_exited();
}

/// The completion signal of any packet type (offset 56).
fn completion_signal(p: &aql_packet_t) -> hsa_signal_t {
    let mut b = [0u8; 8];
    b.copy_from_slice(
        &p.bytes[PACKET_COMPLETION_SIGNAL_OFFSET..PACKET_COMPLETION_SIGNAL_OFFSET + 8],
    );
    hsa_signal_t {
        handle: u64::from_le_bytes(b),
    }
}

/// Records timestamps (when profiling) and decrements the completion signal.
fn complete(q: &Queue, signal: hsa_signal_t, start: u64, end: u64) {
    if signal.handle == 0 {
        return;
    }
    if !crate::signals::is_valid(signal) {
        q.warn_once("a packet's completion signal is not a signal of this runtime");
        return;
    }
    if q.profiling() {
        crate::signals::set_timestamps(signal, start, end);
    }
    crate::signals::subtract(signal, 1);
}

/// Views a packet as one of the typed AQL packets (all 64 bytes of integers and pointers).
fn view<T>(p: &aql_packet_t) -> &T {
    const { assert!(std::mem::size_of::<T>() == AQL_PACKET_SIZE && std::mem::align_of::<T>() <= 64) };
    // SAFETY: same size, compatible alignment, and every bit pattern is valid for the AQL
    // packet structs (integers, raw pointers, signal handles).
    unsafe { &*(p as *const aql_packet_t).cast::<T>() }
}

fn execute(
    q: &Queue,
    p: &aql_packet_t,
    header: u16,
    counting: &mut crate::aqlprofile::QueueCounting,
) -> Outcome {
    match header_type(header) {
        HSA_PACKET_TYPE_KERNEL_DISPATCH => match prepare_dispatch(view(p)) {
            Ok(d) if counting.active() => {
                let launched =
                    crate::aqlprofile::Launched::of_dispatch(d.grid_size, d.workgroup_size);
                let start = crate::clock::now_ticks();
                workers::run(&d);
                counting.dispatch(&launched, start, crate::clock::now_ticks());
                Outcome::Done
            }
            Ok(d) => {
                workers::run(&d);
                Outcome::Done
            }
            Err(DispatchError::Malformed(why)) => {
                q.warn_once(why);
                Outcome::Done
            }
            Err(DispatchError::NoShadow(why)) => {
                q.fail(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, &why);
                Outcome::Failed
            }
        },
        HSA_PACKET_TYPE_BARRIER_AND => {
            let b: &hsa_barrier_and_packet_t = view(p);
            barrier(q, &b.dep_signal, false)
        }
        HSA_PACKET_TYPE_BARRIER_OR => {
            let b: &hsa_barrier_or_packet_t = view(p);
            barrier(q, &b.dep_signal, true)
        }
        // Agent dispatch: the emulator registers no agent functions; completes as a no-op.
        HSA_PACKET_TYPE_AGENT_DISPATCH => Outcome::Done,
        HSA_PACKET_TYPE_VENDOR_SPECIFIC if crate::aqlprofile::is_pm4(p) => {
            if let Err(why) = counting.packet(p) {
                q.warn_once(why);
            }
            Outcome::Done
        }
        HSA_PACKET_TYPE_VENDOR_SPECIFIC => vendor(q, p),
        _ => {
            q.warn_once("a packet has an unknown type");
            Outcome::Done
        }
    }
}

/// Why a dispatch packet does not run.
#[derive(Debug)]
pub(super) enum DispatchError {
    /// Malformed: reported once per queue and completed without running.
    Malformed(&'static str),
    /// An AMDGPU kernel without a usable shadow: a queue error.
    NoShadow(String),
}

impl From<&'static str> for DispatchError {
    fn from(why: &'static str) -> DispatchError {
        DispatchError::Malformed(why)
    }
}

/// Validates a dispatch packet and resolves its kernel: a descriptor of a host code object, or
/// an AMDGPU kernel object and its shadow.
pub(super) fn prepare_dispatch(
    p: &hsa_kernel_dispatch_packet_t,
) -> Result<Dispatch, DispatchError> {
    let dims = usize::from(p.dimensions());
    if !(1..=3).contains(&dims) {
        return Err("a dispatch packet has 0 dimensions".into());
    }
    let mut workgroup_size =
        [p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z].map(u32::from);
    let mut grid_size = [p.grid_size_x, p.grid_size_y, p.grid_size_z];
    for d in dims..3 {
        workgroup_size[d] = 1;
        grid_size[d] = 1;
    }
    if workgroup_size.contains(&0) {
        return Err("a dispatch packet has a zero work-group size".into());
    }
    let (entry, kernel_group) = match crate::shadow::lookup(p.kernel_object) {
        Some(shadow) => match &shadow.resolved {
            Ok(r) => (r.entry, r.group_segment_size),
            Err(why) => return Err(DispatchError::NoShadow(why.clone())),
        },
        None => {
            if !readable(p.kernel_object) {
                return Err("a dispatch packet's kernel_object is not mapped memory".into());
            }
            // SAFETY: the address is 0 or mapped (checked above); from_object checks 0,
            // alignment and the magic before trusting anything else.
            let Some(kd) = (unsafe { KernelDescriptor::from_object(p.kernel_object) }) else {
                return Err(
                    "a dispatch packet's kernel_object is not a kernel descriptor of this runtime"
                        .into(),
                );
            };
            (kd.entry, kd.group_segment_size)
        }
    };
    let group_bytes = p.group_segment_size.max(kernel_group) as usize;
    if group_bytes > GROUP_SEGMENT_BYTES {
        return Err("a dispatch packet asks for more group memory than the agent has".into());
    }
    let groups = [0, 1, 2].map(|d| grid_size[d].div_ceil(workgroup_size[d]));
    let total = groups
        .iter()
        .try_fold(1u64, |acc, &g| acc.checked_mul(u64::from(g)))
        .ok_or("a dispatch packet has too many work-groups")?;
    Ok(Dispatch {
        entry,
        kernarg: p.kernarg_address,
        workgroup_size,
        grid_size,
        groups,
        total,
        group_bytes,
    })
}

/// Whether the page holding `addr` is mapped (0 counts as "readable": from_object rejects it).
fn readable(addr: u64) -> bool {
    if addr == 0 {
        return true;
    }
    let page = crate::topology::GRANULE as u64;
    let base = addr & !(page - 1);
    let mut vec = 0u8;
    // SAFETY: mincore only inspects the mapping of [base, base + 1) and writes one byte.
    unsafe { libc::mincore(base as *mut libc::c_void, 1, &mut vec) == 0 }
}

/// Sleeps for the fault knob's barrier hold, in slices; `Stopped` if the queue stops.
fn hold(q: &Queue) -> Outcome {
    let plain = !q.under_proxy.load(Ordering::Relaxed);
    let Some(hold) = crate::faults::faults().barrier_hold(plain) else {
        return Outcome::Done;
    };
    let until = Instant::now() + hold;
    loop {
        if q.stop.load(Ordering::Acquire) {
            return Outcome::Stopped;
        }
        let now = Instant::now();
        if now >= until {
            return Outcome::Done;
        }
        std::thread::sleep((until - now).min(SLICE));
    }
}

/// Waits for a barrier's dependencies: all zero (AND) or any zero (OR). Null handles are
/// satisfied (AND) or ignored (OR); handles that are not signals are reported and treated alike.
fn barrier(q: &Queue, deps: &[hsa_signal_t; 5], any: bool) -> Outcome {
    if hold(q) == Outcome::Stopped {
        return Outcome::Stopped;
    }
    let mut live = [hsa_signal_t { handle: 0 }; 5];
    let mut n = 0;
    for &d in deps {
        if d.handle == 0 {
            continue;
        }
        if !crate::signals::is_valid(d) {
            q.warn_once("a barrier packet depends on a handle that is not a signal");
            continue;
        }
        live[n] = d;
        n += 1;
    }
    let live = &live[..n];
    if live.is_empty() {
        return Outcome::Done;
    }
    if !any {
        for &d in live {
            loop {
                if q.stop.load(Ordering::Acquire) {
                    return Outcome::Stopped;
                }
                if !crate::signals::is_valid(d) {
                    break;
                }
                let v = crate::signals::wait(
                    d,
                    HSA_SIGNAL_CONDITION_EQ,
                    0,
                    Some(Instant::now() + SLICE),
                );
                if v == 0 {
                    break;
                }
            }
        }
        return Outcome::Done;
    }
    let slice = if live.len() == 1 { SLICE } else { OR_SLICE };
    for k in 0.. {
        if q.stop.load(Ordering::Acquire) {
            return Outcome::Stopped;
        }
        let mut any_valid = false;
        for &d in live {
            if crate::signals::is_valid(d) {
                any_valid = true;
                if crate::signals::load(d) == 0 {
                    return Outcome::Done;
                }
            }
        }
        if !any_valid {
            return Outcome::Done;
        }
        let d = live[k % live.len()];
        if crate::signals::is_valid(d) {
            crate::signals::wait(d, HSA_SIGNAL_CONDITION_EQ, 0, Some(Instant::now() + slice));
        }
    }
    Outcome::Done
}

/// Whether `value cond compare` holds.
fn holds(value: i64, cond: u32, compare: i64) -> Option<bool> {
    match cond {
        HSA_SIGNAL_CONDITION_EQ => Some(value == compare),
        HSA_SIGNAL_CONDITION_NE => Some(value != compare),
        HSA_SIGNAL_CONDITION_LT => Some(value < compare),
        HSA_SIGNAL_CONDITION_GTE => Some(value >= compare),
        _ => None,
    }
}

/// Vendor-specific packets: the AMD barrier-value packet waits until
/// `(value & mask) cond compare`; other formats complete as no-ops.
fn vendor(q: &Queue, p: &aql_packet_t) -> Outcome {
    let b: &hsa_amd_barrier_value_packet_t = view(p);
    if u32::from(b.header.AmdFormat) != HSA_AMD_PACKET_TYPE_BARRIER_VALUE {
        return Outcome::Done;
    }
    if b.signal.handle == 0 {
        return Outcome::Done;
    }
    loop {
        if q.stop.load(Ordering::Acquire) {
            return Outcome::Stopped;
        }
        if !crate::signals::is_valid(b.signal) {
            q.warn_once("a barrier-value packet watches a handle that is not a signal");
            return Outcome::Done;
        }
        let v = crate::signals::load(b.signal);
        match holds(v & b.mask, b.cond, b.value) {
            None => {
                q.warn_once("a barrier-value packet has an unknown condition");
                return Outcome::Done;
            }
            Some(true) => return Outcome::Done,
            // Block until the value changes (or a slice passes), then test again.
            Some(false) => {
                crate::signals::wait(
                    b.signal,
                    HSA_SIGNAL_CONDITION_NE,
                    v,
                    Some(Instant::now() + SLICE),
                );
            }
        }
    }
}
