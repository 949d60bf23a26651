//! Runs the work-groups of one kernel dispatch: inline for a single group, otherwise on a
//! process-wide pool of worker threads (one per available CPU) that the submitting packet
//! processor joins in.
//!
//! Work-groups are claimed in chunks from an atomic counter, so every group runs exactly once.
//! Each group gets a zeroed group segment from a per-thread buffer (no allocation per group).
//! Idle workers block on a condition variable in bounded slices; they never spin.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::kernel_abi::{KernelEntry, hsa_emu_workgroup_t};

/// How long an idle worker or a waiting submitter blocks before looking again.
const IDLE_SLICE: Duration = Duration::from_millis(500);
/// How long a submitter waits for the last groups before re-checking.
const JOIN_SLICE: Duration = Duration::from_millis(50);

/// One kernel dispatch, already validated and normalised (unused dimensions are 1).
#[derive(Clone, Copy, Debug)]
pub(super) struct Dispatch {
    /// The kernel.
    pub(super) entry: KernelEntry,
    /// The packet's `kernarg_address`.
    pub(super) kernarg: *const c_void,
    /// Work-items per group.
    pub(super) workgroup_size: [u32; 3],
    /// Work-items in the grid.
    pub(super) grid_size: [u32; 3],
    /// Work-groups per dimension (partial last groups included).
    pub(super) groups: [u32; 3],
    /// Total work-groups.
    pub(super) total: u64,
    /// Group segment bytes per group (at most the agent's group segment).
    pub(super) group_bytes: usize,
}

// SAFETY: `kernarg` is an address the application handed to the device; the kernel (not this
// module) dereferences it, from whichever thread runs a group, as on a real GPU.
unsafe impl Send for Dispatch {}
// SAFETY: as above; the struct is read-only once built.
unsafe impl Sync for Dispatch {}

impl Dispatch {
    /// Runs work-group number `linear` (x fastest, then y, then z).
    fn run_group(&self, linear: u64) {
        let gx = u64::from(self.groups[0]);
        let gy = u64::from(self.groups[1]);
        let group_id = [
            (linear % gx) as u32,
            ((linear / gx) % gy) as u32,
            (linear / (gx * gy)) as u32,
        ];
        with_group_segment(self.group_bytes, |segment| {
            let wg = hsa_emu_workgroup_t {
                kernarg: self.kernarg,
                group_id,
                workgroup_size: self.workgroup_size,
                grid_size: self.grid_size,
                group_segment: segment,
            };
            // SAFETY: `entry` comes from a kernel descriptor whose magic was checked; the
            // kernel ABI passes a pointer to a live `hsa_emu_workgroup_t`.
            unsafe { (self.entry)(&wg) };
        });
    }
}

/// 64 bytes with 64-byte alignment: the unit of the per-thread group segment buffer.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Chunk([u8; 64]);

thread_local! {
    static GROUP_SEGMENT: RefCell<Vec<Chunk>> = const { RefCell::new(Vec::new()) };
}

/// Calls `f` with a zeroed, 64-byte-aligned buffer of `bytes` bytes (null when `bytes` is 0).
fn with_group_segment(bytes: usize, f: impl FnOnce(*mut c_void)) {
    if bytes == 0 {
        f(std::ptr::null_mut());
        return;
    }
    GROUP_SEGMENT.with(|cell| {
        // A kernel cannot re-enter the dispatcher on this thread, but if it somehow did, give
        // the nested group its own buffer instead of panicking.
        let Ok(mut buf) = cell.try_borrow_mut() else {
            let mut own = vec![Chunk([0; 64]); bytes.div_ceil(64)];
            f(own.as_mut_ptr().cast());
            return;
        };
        let chunks = bytes.div_ceil(64);
        if buf.len() < chunks {
            buf.resize(chunks, Chunk([0; 64]));
        }
        // SAFETY: the buffer holds at least `chunks * 64 >= bytes` bytes.
        unsafe { std::ptr::write_bytes(buf.as_mut_ptr().cast::<u8>(), 0, bytes) };
        f(buf.as_mut_ptr().cast());
    });
}

/// A dispatch shared between the submitter and the workers.
struct Job {
    dispatch: Dispatch,
    /// Groups per claim.
    chunk: u64,
    /// Next unclaimed group.
    next: AtomicU64,
    /// Groups finished.
    done: AtomicU64,
    /// Set (under the lock) when `done` reaches `total`.
    finished: Mutex<bool>,
    finished_cv: Condvar,
}

impl Job {
    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.dispatch.total
    }

    /// Claims and runs chunks until none are left.
    fn work(&self) {
        let total = self.dispatch.total;
        loop {
            let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
            if start >= total {
                return;
            }
            let end = (start + self.chunk).min(total);
            for linear in start..end {
                self.dispatch.run_group(linear);
            }
            // AcqRel: publishes this chunk's memory effects to whoever observes completion.
            let before = self.done.fetch_add(end - start, Ordering::AcqRel);
            if before + (end - start) == total {
                let mut finished = self.finished.lock();
                *finished = true;
                self.finished_cv.notify_all();
            }
        }
    }
}

/// The process-wide worker pool.
struct Pool {
    jobs: Mutex<VecDeque<Arc<Job>>>,
    work_cv: Condvar,
    threads: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 256);
        let mut started = 0;
        for i in 0..threads {
            let spawned = std::thread::Builder::new()
                .name(format!("hsa-emu-worker-{i}"))
                .spawn(worker_main);
            if spawned.is_ok() {
                started += 1;
            }
        }
        if started == 0 {
            eprintln!(
                "hsa-emu: could not start any worker thread; dispatches run on the queue thread"
            );
        }
        Pool {
            jobs: Mutex::new(VecDeque::new()),
            work_cv: Condvar::new(),
            threads: started,
        }
    })
}

fn worker_main() {
    let pool = pool();
    loop {
        let job = {
            let mut jobs = pool.jobs.lock();
            loop {
                match jobs.front() {
                    Some(j) if j.exhausted() => {
                        jobs.pop_front();
                    }
                    Some(j) => break j.clone(),
                    None => {
                        pool.work_cv.wait_for(&mut jobs, IDLE_SLICE);
                    }
                }
            }
        };
        job.work();
    }
}

/// Runs every work-group of `d` exactly once and returns when all have finished.
///
/// The caller's thread runs groups too; a dispatch of one group runs only on it.
pub(super) fn run(d: &Dispatch) {
    match d.total {
        0 => {}
        1 => d.run_group(0),
        total => {
            let pool = pool();
            if pool.threads == 0 {
                (0..total).for_each(|i| d.run_group(i));
                return;
            }
            let helpers = pool.threads as u64 + 1;
            let job = Arc::new(Job {
                dispatch: *d,
                chunk: (total / (helpers * 8)).max(1),
                next: AtomicU64::new(0),
                done: AtomicU64::new(0),
                finished: Mutex::new(false),
                finished_cv: Condvar::new(),
            });
            {
                let mut jobs = pool.jobs.lock();
                jobs.push_back(job.clone());
            }
            let wake = (total - 1).min(pool.threads as u64);
            for _ in 0..wake {
                pool.work_cv.notify_one();
            }
            job.work();
            {
                let mut finished = job.finished.lock();
                while !*finished {
                    job.finished_cv.wait_for(&mut finished, JOIN_SLICE);
                }
            }
            // Acquire pairs with the workers' AcqRel adds: their writes are visible now.
            debug_assert_eq!(job.done.load(Ordering::Acquire), total);
            pool.jobs.lock().retain(|j| !Arc::ptr_eq(j, &job));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    struct Counts {
        hits: Vec<AtomicU32>,
        groups: [u32; 3],
        zeroed: AtomicU32,
    }

    unsafe extern "C" fn count_kernel(wg: *const hsa_emu_workgroup_t) {
        // SAFETY: the pool passes a live work-group record; kernarg is a `Counts`.
        let wg = unsafe { &*wg };
        // SAFETY: as above.
        let c = unsafe { &*wg.kernarg.cast::<Counts>() };
        let [x, y, z] = wg.group_id;
        let i = x + c.groups[0] * (y + c.groups[1] * z);
        c.hits[i as usize].fetch_add(1, Ordering::Relaxed);
        // SAFETY: the group segment has 256 bytes.
        let seg = unsafe { std::slice::from_raw_parts_mut(wg.group_segment.cast::<u8>(), 256) };
        if seg.iter().all(|b| *b == 0) {
            c.zeroed.fetch_add(1, Ordering::Relaxed);
        }
        seg.fill(0xAB);
    }

    #[test]
    fn every_group_runs_once_with_a_zeroed_segment() {
        let groups = [7u32, 3, 2];
        let total = groups.iter().product::<u32>();
        let counts = Counts {
            hits: (0..total).map(|_| AtomicU32::new(0)).collect(),
            groups,
            zeroed: AtomicU32::new(0),
        };
        let d = Dispatch {
            entry: count_kernel,
            kernarg: (&counts as *const Counts).cast(),
            workgroup_size: [4, 1, 1],
            grid_size: [28, 3, 2],
            groups,
            total: u64::from(total),
            group_bytes: 256,
        };
        run(&d);
        assert!(counts.hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        assert_eq!(counts.zeroed.load(Ordering::Relaxed), total);
    }
}
