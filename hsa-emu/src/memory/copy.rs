//! Asynchronous copies: `hsa_amd_memory_async_copy`, `_on_engine` and `_rect` run on one
//! copy-engine thread, started on first use.
//!
//! Jobs are queued per engine (an agent and an engine number) and run in submission order
//! within an engine. A job starts once every dependency signal reads 0; while the head of an
//! engine waits, the heads of the other engines keep running, and the thread blocks on one
//! unready dependency for at most [`WAIT_SLICE`] before looking again (no spinning). A
//! finished job records its start/end ticks in the completion signal and subtracts 1 from it.
//! A copy refused by fault injection returns `HSA_STATUS_ERROR` and never touches the signal.
//!
//! The same thread completes `hsa_amd_svm_prefetch_async`: a marker job that copies nothing,
//! each on a lane (engine number) of its own, so that it waits for its dependencies only; the
//! copy fault knobs leave markers alone.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rocprof_replay_sys::*;

use crate::api::Tables;
use crate::clock::now_ticks;
use crate::ffi::{guard_status, write_out};
use crate::signals;
use crate::topology::{DeviceKind, topology};

/// Longest single block on one unready dependency before the other engines are looked at.
const WAIT_SLICE: Duration = Duration::from_millis(2);
/// Longest idle block before the worker re-checks for shutdown.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// How long [`shutdown`] waits for the worker to exit.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);
/// Engine numbers from here up are marker lanes (copy engines are 0 to 31).
const MARKER_LANES: u32 = 1 << 31;

/// Next marker lane (below [`MARKER_LANES`]; wraps).
static NEXT_MARKER_LANE: AtomicU32 = AtomicU32::new(0);

/// Fills the async-copy and copy-engine slots.
pub(super) fn install(t: &mut Tables) {
    t.amd.hsa_amd_memory_async_copy_fn = Some(memory_async_copy);
    t.amd.hsa_amd_memory_async_copy_on_engine_fn = Some(memory_async_copy_on_engine);
    t.amd.hsa_amd_memory_async_copy_rect_fn = Some(memory_async_copy_rect);
    t.amd.hsa_amd_memory_copy_engine_status_fn = Some(memory_copy_engine_status);
    t.amd.hsa_amd_memory_get_preferred_copy_engine_fn = Some(memory_copy_engine_status);
}

/// What a job copies (addresses as integers so that jobs can cross threads).
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `size` bytes from `src` to `dst` (memmove).
    Linear { dst: usize, src: usize, size: usize },
    /// `depth` slices of `height` rows of `width` bytes.
    Rect {
        dst: usize,
        dst_pitch: usize,
        dst_slice: usize,
        src: usize,
        src_pitch: usize,
        src_slice: usize,
        width: usize,
        height: usize,
        depth: usize,
    },
    /// Nothing: completes its signal once its dependencies are met (an SVM prefetch).
    Marker,
}

/// One queued copy.
struct Job {
    op: Op,
    deps: Vec<hsa_signal_t>,
    completion: hsa_signal_t,
}

/// Engine key: (agent index, engine number).
type EngineKey = (usize, u32);

/// The copy engine's shared state.
struct Engine {
    queues: BTreeMap<EngineKey, VecDeque<Job>>,
    /// Bumped by [`shutdown`]; a worker of an older generation exits.
    generation: u64,
    /// Workers alive (0 or 1, briefly 2 after a shutdown that timed out).
    alive: usize,
    thread: Option<JoinHandle<()>>,
}

static ENGINE: Mutex<Engine> = Mutex::new(Engine {
    queues: BTreeMap::new(),
    generation: 0,
    alive: 0,
    thread: None,
});
/// Wakes the worker (new job, shutdown) and [`shutdown`] (worker exited).
static WAKE: Condvar = Condvar::new();

/// Queues a job on an engine, starting the worker if none runs.
fn submit(key: EngineKey, job: Job) -> hsa_status_t {
    let mut st = ENGINE.lock();
    if st.thread.is_none() {
        let generation = st.generation;
        let spawned = std::thread::Builder::new()
            .name("hsa-emu-copy".into())
            .spawn(move || worker(generation));
        match spawned {
            Ok(h) => {
                st.thread = Some(h);
                st.alive += 1;
            }
            Err(_) => return HSA_STATUS_ERROR_OUT_OF_RESOURCES,
        }
    }
    st.queues.entry(key).or_default().push_back(job);
    WAKE.notify_all();
    HSA_STATUS_SUCCESS
}

/// Stops the copy-engine thread: pending jobs are dropped (their signals are left alone) and
/// the thread is joined if it exits within a bounded time (otherwise it is left to finish its
/// current job and exit). A later submission starts a new thread.
pub(crate) fn shutdown() {
    let handle = {
        let mut st = ENGINE.lock();
        let Some(handle) = st.thread.take() else {
            return;
        };
        st.generation += 1;
        st.queues.clear();
        WAKE.notify_all();
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        while st.alive > 0 {
            if WAKE.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        (st.alive == 0).then_some(handle)
    };
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// Whether a dependency is satisfied (value 0; a signal that no longer exists cannot hold the
/// copy back).
fn dep_ready(s: hsa_signal_t) -> bool {
    !signals::is_valid(s) || signals::load(s) == 0
}

/// The worker loop of generation `generation`.
fn worker(generation: u64) {
    let mut turn = 0usize;
    loop {
        let heads: Vec<(EngineKey, Vec<hsa_signal_t>)> = {
            let mut st = ENGINE.lock();
            loop {
                if st.generation != generation {
                    st.alive -= 1;
                    WAKE.notify_all();
                    return;
                }
                st.queues.retain(|_, q| !q.is_empty());
                if !st.queues.is_empty() {
                    break;
                }
                WAKE.wait_for(&mut st, IDLE_WAIT);
            }
            st.queues
                .iter()
                .filter_map(|(k, q)| q.front().map(|j| (*k, j.deps.clone())))
                .collect()
        };
        let mut progressed = false;
        let mut blocked = Vec::new();
        for (key, deps) in heads {
            let ready = catch_unwind(|| deps.iter().copied().find(|d| !dep_ready(*d)));
            match ready {
                Ok(Some(dep)) => blocked.push(dep),
                Ok(None) | Err(_) => {
                    let job = {
                        let mut st = ENGINE.lock();
                        if st.generation != generation {
                            break;
                        }
                        st.queues.get_mut(&key).and_then(VecDeque::pop_front)
                    };
                    if let Some(job) = job {
                        if ready.is_err() {
                            eprintln!(
                                "hsa-emu: async copy dropped: its dependencies could not be read"
                            );
                        } else if catch_unwind(AssertUnwindSafe(|| run(&job))).is_err() {
                            eprintln!(
                                "hsa-emu: internal error (panic) while completing an async copy"
                            );
                        }
                        progressed = true;
                    }
                }
            }
        }
        if !progressed && !blocked.is_empty() {
            turn = turn.wrapping_add(1);
            let dep = blocked[turn % blocked.len()];
            let deadline = Instant::now() + WAIT_SLICE;
            let waited =
                catch_unwind(|| signals::wait(dep, HSA_SIGNAL_CONDITION_EQ, 0, Some(deadline)));
            if waited.is_err() {
                std::thread::sleep(WAIT_SLICE);
            }
        }
    }
}

/// Performs a copy.
///
/// # Safety
/// The ranges described by `op` must be valid (the submitter's contract).
unsafe fn perform(op: Op) {
    match op {
        Op::Linear { size: 0, .. } | Op::Rect { width: 0, .. } | Op::Marker => {}
        Op::Linear { dst, src, size } => {
            // SAFETY: the caller's ranges; `copy` allows overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size) };
        }
        Op::Rect {
            dst,
            dst_pitch,
            dst_slice,
            src,
            src_pitch,
            src_slice,
            width,
            height,
            depth,
        } => {
            for z in 0..depth {
                for y in 0..height {
                    let s = src + z * src_slice + y * src_pitch;
                    let d = dst + z * dst_slice + y * dst_pitch;
                    // SAFETY: rows inside the caller's pitched ranges (validated at submission).
                    unsafe { std::ptr::copy(s as *const u8, d as *mut u8, width) };
                }
            }
        }
    }
}

/// Runs a job and completes its signal.
fn run(job: &Job) {
    let copies = !matches!(job.op, Op::Marker);
    if let Some(delay) = copies
        .then(|| crate::faults::faults().copy_delay())
        .flatten()
    {
        std::thread::sleep(delay);
    }
    if copies && crate::faults::faults().copy_errs() {
        // An engine error: nothing copied, the error travels in the completion signal.
        if signals::is_valid(job.completion) {
            signals::store(job.completion, -1);
        }
        return;
    }
    let start = now_ticks();
    // SAFETY: the application guaranteed the ranges when it submitted the copy.
    unsafe { perform(job.op) };
    let end = now_ticks().max(start);
    if signals::is_valid(job.completion) {
        signals::set_timestamps(job.completion, start, end);
        signals::subtract(job.completion, 1);
    }
}

/// Queues a marker for `agent` (an agent index): once every signal of `deps` reads 0, the
/// completion signal (when it is a live signal) gets its timestamps and is decremented. Each
/// marker has a lane of its own, so it waits behind nothing but its dependencies.
pub(super) fn submit_marker(
    agent: usize,
    deps: Vec<hsa_signal_t>,
    completion: hsa_signal_t,
) -> hsa_status_t {
    let lane = MARKER_LANES | (NEXT_MARKER_LANE.fetch_add(1, Ordering::Relaxed) & !MARKER_LANES);
    submit(
        (agent, lane),
        Job {
            op: Op::Marker,
            deps,
            completion,
        },
    )
}

/// Validates the dependency list and completion signal of a submission.
fn signals_of(
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> Result<Vec<hsa_signal_t>, hsa_status_t> {
    if completion_signal.handle == 0 || (num_dep_signals > 0 && dep_signals.is_null()) {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let deps = if num_dep_signals == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller passes `num_dep_signals` signals.
        unsafe { std::slice::from_raw_parts(dep_signals, num_dep_signals as usize) }.to_vec()
    };
    if !signals::is_valid(completion_signal) || deps.iter().any(|d| !signals::is_valid(*d)) {
        return Err(HSA_STATUS_ERROR_INVALID_SIGNAL);
    }
    Ok(deps)
}

/// Validates and queues a linear copy on engine `engine` of the device side's agent.
#[allow(clippy::too_many_arguments)]
fn linear_copy(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
    engine: u32,
) -> hsa_status_t {
    let topo = topology();
    let (Some(d), Some(s)) = (topo.agent_index(dst_agent), topo.agent_index(src_agent)) else {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    };
    if (dst.is_null() || src.is_null()) && size > 0 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let deps = match signals_of(num_dep_signals, dep_signals, completion_signal) {
        Ok(d) => d,
        Err(e) => return e,
    };
    if crate::faults::faults().copy_fails() {
        return HSA_STATUS_ERROR;
    }
    let agent = if topo.agents[d].kind == DeviceKind::Gpu {
        d
    } else {
        s
    };
    let op = Op::Linear {
        dst: dst as usize,
        src: src as usize,
        size,
    };
    submit(
        (agent, engine),
        Job {
            op,
            deps,
            completion: completion_signal,
        },
    )
}

/// `hsa_amd_memory_async_copy`.
pub(super) unsafe extern "C" fn memory_async_copy(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    guard_status(|| {
        linear_copy(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion_signal,
            0,
        )
    })
}

/// `hsa_amd_memory_async_copy_on_engine`: the engine id (one `HSA_AMD_SDMA_ENGINE_*` bit)
/// picks the queue; `force_copy_on_sdma` changes nothing here.
unsafe extern "C" fn memory_async_copy_on_engine(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
    engine_id: hsa_amd_sdma_engine_id_t,
    _force_copy_on_sdma: bool,
) -> hsa_status_t {
    guard_status(|| {
        if engine_id.count_ones() != 1 {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let engine = engine_id.trailing_zeros();
        linear_copy(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion_signal,
            engine,
        )
    })
}

/// Byte offset of `off` in a pitched allocation, checking that the copied box fits the pitch
/// (rows) and slice (rows per slice); `None` if it does not or on overflow.
fn pitched_offset(p: &hsa_pitched_ptr_t, off: &hsa_dim3_t, range: &hsa_dim3_t) -> Option<usize> {
    let (x, y, z) = (off.x as usize, off.y as usize, off.z as usize);
    let (w, h, d) = (range.x as usize, range.y as usize, range.z as usize);
    if x.checked_add(w)? > p.pitch {
        return None;
    }
    if d > 1 || z > 0 {
        let rows_end = y.checked_add(h)?.checked_mul(p.pitch)?;
        if rows_end > p.slice {
            return None;
        }
    }
    z.checked_mul(p.slice)?
        .checked_add(y.checked_mul(p.pitch)?)?
        .checked_add(x)
}

/// `hsa_amd_memory_async_copy_rect`: a 3-D copy of `range` (x in bytes, y rows, z slices)
/// between pitched pointers, queued on the copy agent's engine 0.
unsafe extern "C" fn memory_async_copy_rect(
    dst: *const hsa_pitched_ptr_t,
    dst_offset: *const hsa_dim3_t,
    src: *const hsa_pitched_ptr_t,
    src_offset: *const hsa_dim3_t,
    range: *const hsa_dim3_t,
    copy_agent: hsa_agent_t,
    dir: hsa_amd_copy_direction_t,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    guard_status(|| {
        if dst.is_null()
            || dst_offset.is_null()
            || src.is_null()
            || src_offset.is_null()
            || range.is_null()
        {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some(agent) = topology().agent_index(copy_agent) else {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        };
        if dir > hsaDeviceToDevice {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null pointers to the caller's descriptors.
        let (dst, dst_offset, src, src_offset, range) =
            unsafe { (*dst, *dst_offset, *src, *src_offset, *range) };
        if dst.base.is_null() || src.base.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let (Some(d_off), Some(s_off)) = (
            pitched_offset(&dst, &dst_offset, &range),
            pitched_offset(&src, &src_offset, &range),
        ) else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let deps = match signals_of(num_dep_signals, dep_signals, completion_signal) {
            Ok(d) => d,
            Err(e) => return e,
        };
        if crate::faults::faults().copy_fails() {
            return HSA_STATUS_ERROR;
        }
        let op = Op::Rect {
            dst: dst.base as usize + d_off,
            dst_pitch: dst.pitch,
            dst_slice: dst.slice,
            src: src.base as usize + s_off,
            src_pitch: src.pitch,
            src_slice: src.slice,
            width: range.x as usize,
            height: range.y as usize,
            depth: range.z as usize,
        };
        submit(
            (agent, 0),
            Job {
                op,
                deps,
                completion: completion_signal,
            },
        )
    })
}

/// `hsa_amd_memory_copy_engine_status` and `hsa_amd_memory_get_preferred_copy_engine`:
/// engine 0 is always available (and preferred).
unsafe extern "C" fn memory_copy_engine_status(
    dst_agent: hsa_agent_t,
    src_agent: hsa_agent_t,
    engine_ids_mask: *mut u32,
) -> hsa_status_t {
    guard_status(|| {
        let topo = topology();
        if topo.agent(dst_agent).is_none() || topo.agent(src_agent).is_none() {
            return HSA_STATUS_ERROR_INVALID_AGENT;
        }
        // SAFETY: the caller's out-pointer (null is rejected by write_out).
        unsafe { write_out::<u32>(engine_ids_mask.cast(), HSA_AMD_SDMA_ENGINE_0) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> hsa_agent_t {
        topology().gpus().next().unwrap().handle
    }

    fn cpu() -> hsa_agent_t {
        topology().cpu().handle
    }

    fn wait_zero(s: hsa_signal_t) -> bool {
        signals::wait(
            s,
            HSA_SIGNAL_CONDITION_EQ,
            0,
            Some(Instant::now() + Duration::from_secs(5)),
        ) == 0
    }

    #[test]
    fn chained_copies_complete_in_dependency_order() {
        let src: Vec<u32> = (0..1024).collect();
        let mut a = vec![0u32; 1024];
        let mut b = vec![0u32; 1024];
        let mut out = vec![0u32; 1024];
        let gate = signals::create(1).unwrap();
        let s1 = signals::create(1).unwrap();
        let s2 = signals::create(1).unwrap();
        let s3 = signals::create(1).unwrap();
        let bytes = 4096;
        // SAFETY: live buffers of `bytes` bytes and live signals.
        unsafe {
            assert_eq!(
                memory_async_copy(
                    a.as_mut_ptr().cast(),
                    gpu(),
                    src.as_ptr().cast(),
                    cpu(),
                    bytes,
                    1,
                    &gate,
                    s1
                ),
                HSA_STATUS_SUCCESS
            );
            assert_eq!(
                memory_async_copy(
                    b.as_mut_ptr().cast(),
                    gpu(),
                    a.as_ptr().cast(),
                    gpu(),
                    bytes,
                    1,
                    &s1,
                    s2
                ),
                HSA_STATUS_SUCCESS
            );
            let deps = [s1, s2];
            assert_eq!(
                memory_async_copy(
                    out.as_mut_ptr().cast(),
                    cpu(),
                    b.as_ptr().cast(),
                    gpu(),
                    bytes,
                    2,
                    deps.as_ptr(),
                    s3
                ),
                HSA_STATUS_SUCCESS
            );
        }
        // Nothing may run while the gate is closed, and an unrelated copy on another engine
        // is not held back by the blocked one.
        let other_src = [7u8; 64];
        let mut other_dst = [0u8; 64];
        let s4 = signals::create(1).unwrap();
        // SAFETY: live buffers and signals.
        let st = unsafe {
            memory_async_copy_on_engine(
                other_dst.as_mut_ptr().cast(),
                cpu(),
                other_src.as_ptr().cast(),
                cpu(),
                64,
                0,
                std::ptr::null(),
                s4,
                HSA_AMD_SDMA_ENGINE_1,
                false,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert!(wait_zero(s4));
        assert_eq!(other_dst, [7u8; 64]);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(signals::load(s1), 1);
        assert_eq!(signals::load(s3), 1);
        signals::store(gate, 0);
        assert!(wait_zero(s3));
        assert_eq!(signals::load(s1), 0);
        assert_eq!(signals::load(s2), 0);
        assert_eq!(out, src);
        let (t1, _) = signals::timestamps(s1);
        let (t2_start, t2_end) = signals::timestamps(s2);
        let (t3, _) = signals::timestamps(s3);
        assert!(t1 <= t2_start && t2_start <= t2_end && t2_end <= t3);
        for s in [gate, s1, s2, s3, s4] {
            signals::destroy(s);
        }
    }

    #[test]
    fn rect_copy_moves_a_box_between_pitches() {
        // Source: 4 slices of 8 rows of 16 bytes; copy a 5x3x2 box at (2,1,1) to (0,0,0) of a
        // destination with pitch 8 and slice 32.
        let src: Vec<u8> = (0..4 * 8 * 16).map(|i| i as u8).collect();
        let mut dst = vec![0u8; 2 * 32];
        let sp = hsa_pitched_ptr_t {
            base: src.as_ptr() as *mut c_void,
            pitch: 16,
            slice: 128,
        };
        let dp = hsa_pitched_ptr_t {
            base: dst.as_mut_ptr().cast(),
            pitch: 8,
            slice: 32,
        };
        let (so, d_o) = (hsa_dim3_t { x: 2, y: 1, z: 1 }, hsa_dim3_t::default());
        let range = hsa_dim3_t { x: 5, y: 3, z: 2 };
        let done = signals::create(1).unwrap();
        // SAFETY: live descriptors, buffers and signal.
        let st = unsafe {
            memory_async_copy_rect(
                &dp,
                &d_o,
                &sp,
                &so,
                &range,
                gpu(),
                hsaHostToHost,
                0,
                std::ptr::null(),
                done,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert!(wait_zero(done));
        for z in 0..2 {
            for y in 0..3 {
                for x in 0..5 {
                    let s = src[(z + 1) * 128 + (y + 1) * 16 + x + 2];
                    assert_eq!(dst[z * 32 + y * 8 + x], s, "({x},{y},{z})");
                }
                assert_eq!(dst[z * 32 + y * 8 + 5], 0);
            }
        }
        // A box wider than the pitch is refused.
        let wide = hsa_dim3_t { x: 9, y: 1, z: 1 };
        // SAFETY: as above.
        let st = unsafe {
            memory_async_copy_rect(
                &dp,
                &d_o,
                &sp,
                &so,
                &wide,
                gpu(),
                hsaHostToHost,
                0,
                std::ptr::null(),
                done,
            )
        };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_ARGUMENT);
        signals::destroy(done);
    }

    #[test]
    fn engine_status_reports_engine_zero() {
        let mut mask = 0u32;
        // SAFETY: valid out-pointer.
        let st = unsafe { memory_copy_engine_status(gpu(), cpu(), &mut mask) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(mask, HSA_AMD_SDMA_ENGINE_0);
    }
}
