//! Tests of the queues module: creation, indices, dispatch, barriers, profiling, interception.

use std::sync::Mutex as StdMutex;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::thread::ThreadId;

/// What the test handlers record: (name, user_pkt_index, thread).
type Log = Arc<StdMutex<Vec<(&'static str, u64, ThreadId)>>>;

use super::intercept::{intercept_create, intercept_register, runtime_queue_create_register};
use super::*;
use crate::kernel_abi::{KERNEL_DESCRIPTOR_MAGIC, KernelDescriptor, hsa_emu_workgroup_t};

const WAIT: Duration = Duration::from_secs(10);

fn gpu() -> hsa_agent_t {
    topology()
        .agents
        .iter()
        .find(|a| a.kind == DeviceKind::Gpu)
        .expect("the default machine has a GPU")
        .handle
}

fn create(size: u32) -> *mut hsa_queue_t {
    let mut q = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let st = unsafe {
        queue_create(
            gpu(),
            size,
            HSA_QUEUE_TYPE_MULTI,
            None,
            std::ptr::null_mut(),
            0,
            0,
            &mut q,
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
    q
}

fn create_intercept(size: u32) -> *mut hsa_queue_t {
    let mut q = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let st = unsafe {
        intercept_create(
            gpu(),
            size,
            HSA_QUEUE_TYPE_MULTI,
            None,
            std::ptr::null_mut(),
            0,
            0,
            &mut q,
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
    q
}

fn destroy(q: *mut hsa_queue_t) {
    // SAFETY: a queue of this runtime.
    assert_eq!(unsafe { queue_destroy(q) }, HSA_STATUS_SUCCESS);
}

fn signal(v: i64) -> hsa_signal_t {
    crate::signals::create(v).expect("signal")
}

fn wait_zero(s: hsa_signal_t) -> i64 {
    crate::signals::wait(s, HSA_SIGNAL_CONDITION_EQ, 0, Some(Instant::now() + WAIT))
}

/// What the test kernel records.
struct Hits {
    groups: [u32; 3],
    hits: Vec<AtomicU32>,
    items: AtomicU64,
}

impl Hits {
    fn new(groups: [u32; 3]) -> Box<Hits> {
        let n = groups.iter().product::<u32>() as usize;
        Box::new(Hits {
            groups,
            hits: (0..n).map(|_| AtomicU32::new(0)).collect(),
            items: AtomicU64::new(0),
        })
    }
    fn all_once(&self) -> bool {
        self.hits.iter().all(|h| h.load(Ordering::Relaxed) == 1)
    }
    fn total(&self) -> u32 {
        self.hits.iter().map(|h| h.load(Ordering::Relaxed)).sum()
    }
}

/// Counts its work-group and the work-items of it that lie inside the grid.
unsafe extern "C" fn count_kernel(wg: *const hsa_emu_workgroup_t) {
    // SAFETY: the dispatcher passes a live record whose kernarg is a `Hits`.
    let wg = unsafe { &*wg };
    // SAFETY: as above.
    let h = unsafe { &*wg.kernarg.cast::<Hits>() };
    let [x, y, z] = wg.group_id;
    h.hits[(x + h.groups[0] * (y + h.groups[1] * z)) as usize].fetch_add(1, Ordering::Relaxed);
    let mut items = 1u64;
    for d in 0..3 {
        let start = wg.group_id[d] * wg.workgroup_size[d];
        let end = (start + wg.workgroup_size[d]).min(wg.grid_size[d]);
        items *= u64::from(end - start);
    }
    h.items.fetch_add(items, Ordering::Relaxed);
}

unsafe extern "C" fn empty_kernel(_wg: *const hsa_emu_workgroup_t) {}

fn descriptor(entry: crate::kernel_abi::KernelEntry) -> Box<KernelDescriptor> {
    Box::new(KernelDescriptor {
        magic: KERNEL_DESCRIPTOR_MAGIC,
        entry,
        kernarg_size: 0,
        kernarg_alignment: 8,
        group_segment_size: 0,
        private_segment_size: 0,
        reserved: [0; 4],
    })
}

fn dispatch_packet(
    kd: &KernelDescriptor,
    kernarg: *const c_void,
    dims: u16,
    wg: [u16; 3],
    grid: [u32; 3],
    completion: hsa_signal_t,
) -> hsa_kernel_dispatch_packet_t {
    hsa_kernel_dispatch_packet_t {
        header: packet_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        ),
        setup: dims,
        workgroup_size_x: wg[0],
        workgroup_size_y: wg[1],
        workgroup_size_z: wg[2],
        grid_size_x: grid[0],
        grid_size_y: grid[1],
        grid_size_z: grid[2],
        kernel_object: kd as *const KernelDescriptor as u64,
        kernarg_address: kernarg.cast_mut(),
        completion_signal: completion,
        ..Default::default()
    }
}

fn barrier_and(deps: &[hsa_signal_t], completion: hsa_signal_t) -> hsa_barrier_and_packet_t {
    let mut p = hsa_barrier_and_packet_t {
        header: packet_header(
            HSA_PACKET_TYPE_BARRIER_AND,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        ),
        completion_signal: completion,
        ..Default::default()
    };
    p.dep_signal[..deps.len()].copy_from_slice(deps);
    p
}

/// Writes one packet the way applications do (reserve, wait for room, body, header last,
/// doorbell) and returns its index.
fn submit<T: Copy>(q: *mut hsa_queue_t, packet: &T) -> u64 {
    assert_eq!(std::mem::size_of::<T>(), 64);
    // SAFETY: `q` is a live queue of this runtime.
    let (size, base, doorbell) = unsafe {
        (
            (*q).size as u64,
            (*q).base_address.cast::<u8>(),
            (*q).doorbell_signal,
        )
    };
    // SAFETY: as above.
    let index = unsafe { add_write_index_scacq_screl(q, 1) };
    let deadline = Instant::now() + WAIT;
    // SAFETY: as above.
    while index - unsafe { load_read_index_scacquire(q) } >= size {
        assert!(Instant::now() < deadline, "queue full");
        std::thread::yield_now();
    }
    // SAFETY: slot `index` is reserved for us and free (checked above).
    unsafe { write_slot(base, size, index, packet) };
    crate::signals::store(doorbell, index as i64);
    index
}

/// Copies `packet` into slot `index` of a ring at `base` with `size` slots: body first, then
/// header and setup as one release store.
///
/// # Safety
/// The slot must be reserved by the caller and free; `T` is a 64-byte packet.
unsafe fn write_slot<T: Copy>(base: *mut u8, size: u64, index: u64, packet: &T) {
    let src = (packet as *const T).cast::<u8>();
    // SAFETY: the slot is inside the ring (masked index) and ours (caller contract).
    unsafe {
        let slot = base.add(((index & (size - 1)) * 64) as usize);
        std::ptr::copy_nonoverlapping(src.add(4), slot.add(4), 60);
        AtomicU32::from_ptr(slot.cast())
            .store(src.cast::<u32>().read_unaligned(), Ordering::Release);
    }
}

#[test]
fn create_validates_its_arguments() {
    let mut q = std::ptr::null_mut();
    let call = |agent, size, ty, out: *mut *mut hsa_queue_t| {
        // SAFETY: `out` is null or valid.
        unsafe { queue_create(agent, size, ty, None, std::ptr::null_mut(), 0, 0, out) }
    };
    for size in [0, 32, 63, 100, QUEUE_MAX_SIZE * 2] {
        assert_eq!(
            call(gpu(), size, HSA_QUEUE_TYPE_MULTI, &mut q),
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            "{size}"
        );
    }
    assert_eq!(
        call(gpu(), 64, 7, &mut q),
        HSA_STATUS_ERROR_INVALID_ARGUMENT
    );
    assert_eq!(
        call(gpu(), 64, HSA_QUEUE_TYPE_MULTI, std::ptr::null_mut()),
        HSA_STATUS_ERROR_INVALID_ARGUMENT
    );
    assert_eq!(
        call(topology().cpu().handle, 64, HSA_QUEUE_TYPE_MULTI, &mut q),
        HSA_STATUS_ERROR_INVALID_QUEUE_CREATION
    );
    assert_eq!(
        call(
            hsa_agent_t { handle: 12345 },
            64,
            HSA_QUEUE_TYPE_MULTI,
            &mut q
        ),
        HSA_STATUS_ERROR_INVALID_AGENT
    );
    assert!(q.is_null());
    // SAFETY: null out-pointer is never written.
    let soft = unsafe {
        soft_queue_create(
            hsa_region_t { handle: 1 },
            64,
            0,
            1,
            signal(0),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(soft, HSA_STATUS_ERROR);
}

#[test]
fn created_queue_has_the_amd_layout_and_an_invalid_ring() {
    let a = create(128);
    let b = create(64);
    // SAFETY: live queues of this runtime.
    let (qa, qb) = unsafe { (&*a, &*b) };
    assert_eq!(a as usize % 64, 0);
    assert_eq!(qa.base_address as usize % 64, 0);
    assert_eq!(qa.size, 128);
    assert_eq!(
        qa.features,
        HSA_QUEUE_FEATURE_KERNEL_DISPATCH | HSA_QUEUE_FEATURE_AGENT_DISPATCH
    );
    assert_eq!(qa.type_, HSA_QUEUE_TYPE_MULTI);
    assert_ne!(qa.id, qb.id);
    assert!(crate::signals::is_valid(qa.doorbell_signal));
    for i in 0..128 {
        // SAFETY: inside the ring.
        let h = unsafe {
            qa.base_address
                .cast::<u8>()
                .add(i * 64)
                .cast::<u16>()
                .read()
        };
        assert_eq!(h, HSA_PACKET_TYPE_INVALID as u16);
    }
    // SAFETY: `a` is an amd_queue_t.
    let amd = unsafe { &*a.cast::<amd_queue_t>() };
    assert_eq!(amd.read_dispatch_id_field_base_byte_offset, 128);
    let mut agent = hsa_agent_t { handle: 0 };
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe {
            queue_get_info(
                a,
                HSA_AMD_QUEUE_INFO_AGENT,
                (&mut agent as *mut hsa_agent_t).cast(),
            )
        },
        0
    );
    assert_eq!(agent.handle, gpu().handle);
    destroy(a);
    destroy(b);
    // SAFETY: a stale pointer is only looked up, never dereferenced.
    assert_eq!(unsafe { queue_destroy(a) }, HSA_STATUS_ERROR_INVALID_QUEUE);
}

#[test]
fn index_functions_follow_the_atomic_semantics() {
    let q = create(64);
    // SAFETY: a live queue of this runtime (no packets are written, so the processor idles).
    unsafe {
        assert_eq!(add_write_index_relaxed(q, 3), 0);
        assert_eq!(add_write_index_screlease(q, 2), 3);
        assert_eq!(load_write_index_relaxed(q), 5);
        assert_eq!(cas_write_index_scacq_screl(q, 4, 9), 5); // fails: returns the observed value
        assert_eq!(load_write_index_scacquire(q), 5);
        assert_eq!(cas_write_index_relaxed(q, 5, 9), 5);
        assert_eq!(load_write_index_scacquire(q), 9);
        store_write_index_screlease(q, 11);
        assert_eq!((*q.cast::<amd_queue_t>()).write_dispatch_id, 11);
        assert_eq!(load_read_index_relaxed(q), 0);
        assert_eq!(load_index_null(), 0);
    }
    destroy(q);
}

fn load_index_null() -> u64 {
    // SAFETY: null is handled.
    unsafe {
        load_read_index_scacquire(std::ptr::null()) + add_write_index_relaxed(std::ptr::null(), 1)
    }
}

#[test]
fn dispatch_runs_every_group_once_including_partial_and_2d_grids() {
    let q = create(64);
    let kd = descriptor(count_kernel);
    // 1-D: 1000 items in groups of 64 -> 16 groups, the last one partial.
    let one = Hits::new([16, 1, 1]);
    // 2-D: 10 x 7 items in groups of 4 x 3 -> 3 x 3 groups.
    let two = Hits::new([3, 3, 1]);
    let done = signal(2);
    submit(
        q,
        &dispatch_packet(
            &kd,
            (&*one as *const Hits).cast(),
            1,
            [64, 1, 1],
            [1000, 1, 1],
            done,
        ),
    );
    // Unused dimensions are ignored even when the packet leaves garbage there.
    submit(
        q,
        &dispatch_packet(
            &kd,
            (&*two as *const Hits).cast(),
            2,
            [4, 3, 9],
            [10, 7, 5],
            done,
        ),
    );
    assert_eq!(wait_zero(done), 0);
    assert!(one.all_once() && two.all_once());
    assert_eq!(one.items.load(Ordering::Relaxed), 1000);
    assert_eq!(two.items.load(Ordering::Relaxed), 70);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(crate::signals::load(done), 0, "one subtract per packet");
    // SAFETY: live queue.
    assert_eq!(unsafe { load_read_index_scacquire(q) }, 2);
    // SAFETY: the slots are inside the ring.
    let headers = unsafe {
        [0, 1].map(|i| {
            (*q).base_address
                .cast::<u8>()
                .add(i * 64)
                .cast::<u16>()
                .read_volatile()
        })
    };
    assert_eq!(headers, [HSA_PACKET_TYPE_INVALID as u16; 2]);
    destroy(q);
}

#[test]
fn many_dispatches_wrap_the_ring_in_order() {
    let q = create(64);
    let kd = descriptor(count_kernel);
    let hits = Hits::new([1, 1, 1]);
    let done = signal(200);
    for _ in 0..200 {
        submit(
            q,
            &dispatch_packet(
                &kd,
                (&*hits as *const Hits).cast(),
                1,
                [1, 1, 1],
                [1, 1, 1],
                done,
            ),
        );
    }
    assert_eq!(wait_zero(done), 0);
    assert_eq!(hits.total(), 200);
    // SAFETY: live queue.
    assert_eq!(unsafe { load_read_index_scacquire(q) }, 200);
    destroy(q);
}

#[test]
fn malformed_dispatch_still_completes() {
    let q = create(64);
    let kd = descriptor(empty_kernel);
    let done = signal(3);
    let bogus = Box::new([0u64; 8]); // not a descriptor (no magic)
    let mut p = dispatch_packet(&kd, std::ptr::null(), 1, [1, 1, 1], [1, 1, 1], done);
    p.kernel_object = bogus.as_ptr() as u64;
    submit(q, &p);
    p.kernel_object = 0x40; // unmapped
    submit(q, &p);
    let mut p = dispatch_packet(&kd, std::ptr::null(), 1, [0, 1, 1], [1, 1, 1], done);
    p.workgroup_size_x = 0;
    submit(q, &p);
    assert_eq!(wait_zero(done), 0);
    destroy(q);
}

#[test]
fn barrier_and_waits_for_its_dependencies() {
    let q = create(64);
    let kd = descriptor(count_kernel);
    let hits = Hits::new([1, 1, 1]);
    let (dep1, dep2) = (signal(1), signal(1));
    let barrier_done = signal(1);
    let after = signal(1);
    submit(
        q,
        &barrier_and(&[hsa_signal_t { handle: 0 }, dep1, dep2], barrier_done),
    );
    submit(
        q,
        &dispatch_packet(
            &kd,
            (&*hits as *const Hits).cast(),
            1,
            [1, 1, 1],
            [1, 1, 1],
            after,
        ),
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(crate::signals::load(barrier_done), 1);
    crate::signals::store(dep1, 0);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        crate::signals::load(barrier_done),
        1,
        "AND needs every dependency"
    );
    assert_eq!(hits.total(), 0, "packets behind the barrier wait");
    crate::signals::store(dep2, 0);
    assert_eq!(wait_zero(barrier_done), 0);
    assert_eq!(wait_zero(after), 0);
    assert_eq!(hits.total(), 1);
    destroy(q);
}

#[test]
fn barrier_or_resolves_on_any_dependency() {
    let q = create(64);
    let (dep1, dep2) = (signal(1), signal(1));
    let done = signal(1);
    let mut p = barrier_and(&[dep1, dep2], done);
    p.header = packet_header(
        HSA_PACKET_TYPE_BARRIER_OR,
        true,
        HSA_FENCE_SCOPE_SYSTEM,
        HSA_FENCE_SCOPE_SYSTEM,
    );
    submit(q, &p);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(crate::signals::load(done), 1);
    crate::signals::store(dep2, 0);
    assert_eq!(wait_zero(done), 0);
    destroy(q);
}

#[test]
fn barrier_value_packet_waits_for_the_masked_condition() {
    let q = create(64);
    let watched = signal(0);
    let done = signal(1);
    let p = hsa_amd_barrier_value_packet_t {
        header: hsa_amd_vendor_packet_header_t {
            header: packet_header(HSA_PACKET_TYPE_VENDOR_SPECIFIC, true, 0, 0),
            AmdFormat: HSA_AMD_PACKET_TYPE_BARRIER_VALUE as u8,
            reserved: 0,
        },
        signal: watched,
        value: 0x10,
        mask: 0xF0,
        cond: HSA_SIGNAL_CONDITION_EQ,
        completion_signal: done,
        ..Default::default()
    };
    submit(q, &p);
    crate::signals::store(watched, 0x0F); // masked: 0x00
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(crate::signals::load(done), 1);
    crate::signals::store(watched, 0x1F); // masked: 0x10
    assert_eq!(wait_zero(done), 0);
    destroy(q);
}

#[test]
fn profiling_records_timestamps_only_when_enabled() {
    let q = create(64);
    let kd = descriptor(empty_kernel);
    let plain = signal(1);
    submit(
        q,
        &dispatch_packet(&kd, std::ptr::null(), 1, [1, 1, 1], [1, 1, 1], plain),
    );
    assert_eq!(wait_zero(plain), 0);
    assert_eq!(crate::signals::timestamps(plain), (0, 0));

    assert_eq!(
        // SAFETY: live queue.
        unsafe { profiling_set_profiler_enabled(q, 1) },
        HSA_STATUS_SUCCESS
    );
    assert_ne!(
        // SAFETY: live queue.
        unsafe { (*q.cast::<amd_queue_t>()).queue_properties }
            & AMD_QUEUE_PROPERTIES_ENABLE_PROFILING,
        0
    );
    let before = crate::clock::now_ticks();
    let timed = signal(1);
    submit(
        q,
        &dispatch_packet(&kd, std::ptr::null(), 1, [1, 1, 1], [1, 1, 1], timed),
    );
    assert_eq!(wait_zero(timed), 0);
    let mut t = hsa_amd_profiling_dispatch_time_t::default();
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe { profiling_get_dispatch_time(gpu(), timed, &mut t) },
        HSA_STATUS_SUCCESS
    );
    assert!(
        t.start >= before && t.start <= t.end && t.end <= crate::clock::now_ticks(),
        "{t:?}"
    );
    // SAFETY: valid arguments / deliberately bad ones.
    unsafe {
        assert_eq!(
            profiling_get_dispatch_time(gpu(), hsa_signal_t { handle: 8 }, &mut t),
            HSA_STATUS_ERROR_INVALID_SIGNAL
        );
        assert_eq!(
            profiling_get_dispatch_time(gpu(), timed, std::ptr::null_mut()),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        let mut out = 0;
        assert_eq!(
            profiling_convert_tick(gpu(), 1234, &mut out),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(out, 1234);
        assert_eq!(profiling_set_profiler_enabled(q, 0), HSA_STATUS_SUCCESS);
        assert!(!lookup(q).unwrap().profiling());
        assert_eq!(
            profiling_set_profiler_enabled(std::ptr::null_mut(), 1),
            HSA_STATUS_ERROR_INVALID_QUEUE
        );
    }
    destroy(q);
}

#[test]
fn cu_mask_priority_and_info_are_accepted() {
    let q = create(64);
    let mut mask = [0u32; 2];
    // SAFETY: valid pointers / deliberately bad ones.
    unsafe {
        assert_eq!(queue_cu_set_mask(q, 32, mask.as_ptr()), HSA_STATUS_SUCCESS);
        assert_eq!(
            queue_cu_get_mask(q, 40, mask.as_mut_ptr()),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(
            queue_set_priority(q, HSA_AMD_QUEUE_PRIORITY_HIGH),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(queue_set_priority(q, 9), HSA_STATUS_ERROR_INVALID_ARGUMENT);
        assert_eq!(
            queue_set_priority(std::ptr::null_mut(), 0),
            HSA_STATUS_ERROR_INVALID_QUEUE
        );
        let mut id = u64::MAX;
        assert_eq!(
            queue_get_info(
                q,
                HSA_AMD_QUEUE_INFO_DOORBELL_ID,
                (&mut id as *mut u64).cast()
            ),
            0
        );
        assert_eq!(id, (*q).id);
        assert_eq!(
            queue_get_info(q, 77, (&mut id as *mut u64).cast()),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
    }
    assert_eq!(mask, [u32::MAX, 0xFF]);
    destroy(q);
}

#[test]
fn destroy_with_a_stuck_barrier_returns_promptly() {
    let q = create(64);
    let never = signal(1);
    submit(q, &barrier_and(&[never], hsa_signal_t { handle: 0 }));
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    destroy(q);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[test]
fn back_to_back_empty_dispatches_each_complete_once() {
    // Speed is measured by the emu-bench benchmark, not here.
    let q = create(64);
    let kd = descriptor(empty_kernel);
    let done = signal(1);
    for _ in 0..200 {
        crate::signals::store(done, 1);
        submit(
            q,
            &dispatch_packet(&kd, std::ptr::null(), 1, [1, 1, 1], [1, 1, 1], done),
        );
        assert_eq!(wait_zero(done), 0);
    }
    assert_eq!(crate::signals::load(done), 0, "one completion per dispatch");
    destroy(q);
}

// ---- interception ----------------------------------------------------------------------------

/// What a test handler does and records.
struct HandlerCtx {
    name: &'static str,
    forward: bool,
    log: Log,
    /// If set, the first call submits one more packet (a copy) to this proxy from inside.
    resubmit_to: AtomicUsize,
}

unsafe extern "C" fn test_handler(
    pkts: *const c_void,
    count: u64,
    user_pkt_index: u64,
    data: *mut c_void,
    writer: hsa_amd_queue_intercept_packet_writer,
) {
    // SAFETY: `data` is the HandlerCtx registered with this handler.
    let ctx = unsafe { &*data.cast::<HandlerCtx>() };
    ctx.log
        .lock()
        .unwrap()
        .push((ctx.name, user_pkt_index, std::thread::current().id()));
    let target = ctx.resubmit_to.swap(0, Ordering::Relaxed);
    if target != 0 {
        // SAFETY: the proxy passed one 64-byte packet.
        let copy = unsafe { pkts.cast::<hsa_kernel_dispatch_packet_t>().read() };
        submit(target as *mut hsa_queue_t, &copy);
    }
    if ctx.forward {
        // SAFETY: called inside the handler with the packets we got.
        unsafe { writer.unwrap()(pkts, count) };
    }
}

fn handler_ctx(name: &'static str, forward: bool, log: &Log) -> Box<HandlerCtx> {
    Box::new(HandlerCtx {
        name,
        forward,
        log: log.clone(),
        resubmit_to: AtomicUsize::new(0),
    })
}

fn register_handler(q: *mut hsa_queue_t, ctx: &HandlerCtx) {
    // SAFETY: `ctx` outlives the queue in every test.
    let st = unsafe {
        intercept_register(
            q,
            Some(test_handler),
            (ctx as *const HandlerCtx).cast_mut().cast(),
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
}

#[test]
fn intercept_calls_the_newest_handler_first_on_the_storing_thread() {
    let q = create_intercept(64);
    let log = Arc::new(StdMutex::new(Vec::new()));
    let older = handler_ctx("older", true, &log);
    let newer = handler_ctx("newer", true, &log);
    register_handler(q, &older);
    register_handler(q, &newer);
    let kd = descriptor(count_kernel);
    let hits = Hits::new([2, 1, 1]);
    let done = signal(1);
    let index = submit(
        q,
        &dispatch_packet(
            &kd,
            (&*hits as *const Hits).cast(),
            1,
            [4, 1, 1],
            [8, 1, 1],
            done,
        ),
    );
    // The handlers ran synchronously inside the doorbell store.
    let me = std::thread::current().id();
    assert_eq!(
        *log.lock().unwrap(),
        vec![("newer", index, me), ("older", index, me)]
    );
    assert_eq!(
        // SAFETY: live proxy.
        unsafe { load_read_index_scacquire(q) },
        index + 1,
        "proxy read index = intercepted"
    );
    assert_eq!(wait_zero(done), 0);
    assert!(hits.all_once());
    destroy(q);
}

#[test]
fn intercept_without_handlers_forwards_and_a_dropping_handler_drops() {
    let q = create_intercept(64);
    let kd = descriptor(count_kernel);
    let hits = Hits::new([1, 1, 1]);
    let done = signal(1);
    submit(
        q,
        &dispatch_packet(
            &kd,
            (&*hits as *const Hits).cast(),
            1,
            [1, 1, 1],
            [1, 1, 1],
            done,
        ),
    );
    assert_eq!(wait_zero(done), 0);
    assert_eq!(hits.total(), 1);

    let log = Arc::new(StdMutex::new(Vec::new()));
    let dropper = handler_ctx("dropper", false, &log);
    register_handler(q, &dropper);
    let dropped = signal(1);
    submit(
        q,
        &dispatch_packet(
            &kd,
            (&*hits as *const Hits).cast(),
            1,
            [1, 1, 1],
            [1, 1, 1],
            dropped,
        ),
    );
    assert_eq!(log.lock().unwrap().len(), 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        crate::signals::load(dropped),
        1,
        "a dropped packet never runs"
    );
    assert_eq!(hits.total(), 1);
    destroy(q);
}

#[test]
fn intercept_handler_may_resubmit_to_its_own_queue() {
    let q = create_intercept(64);
    let log = Arc::new(StdMutex::new(Vec::new()));
    let ctx = handler_ctx("h", true, &log);
    ctx.resubmit_to.store(q as usize, Ordering::Relaxed);
    register_handler(q, &ctx);
    let kd = descriptor(count_kernel);
    let hits = Hits::new([1, 1, 1]);
    let done = signal(2);
    submit(
        q,
        &dispatch_packet(
            &kd,
            (&*hits as *const Hits).cast(),
            1,
            [1, 1, 1],
            [1, 1, 1],
            done,
        ),
    );
    assert_eq!(wait_zero(done), 0);
    assert_eq!(hits.total(), 2);
    let indices: Vec<u64> = log.lock().unwrap().iter().map(|e| e.1).collect();
    assert_eq!(indices, vec![0, 1]);
    destroy(q);
}

#[test]
fn intercept_register_needs_an_intercept_queue() {
    let q = create(64);
    let log = Arc::new(StdMutex::new(Vec::new()));
    let ctx = handler_ctx("h", true, &log);
    // SAFETY: valid arguments except the queue kind / handler.
    unsafe {
        let data = (&*ctx as *const HandlerCtx).cast_mut().cast();
        assert_eq!(
            intercept_register(q, Some(test_handler), data),
            HSA_STATUS_ERROR_INVALID_QUEUE
        );
        assert_eq!(
            intercept_register(std::ptr::null_mut(), Some(test_handler), data),
            HSA_STATUS_ERROR_INVALID_QUEUE
        );
        let p = create_intercept(64);
        assert_eq!(
            intercept_register(p, None, data),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        destroy(p);
        assert_eq!(
            runtime_queue_create_register(None, data),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
    }
    destroy(q);
}

#[test]
fn intercept_profiling_reaches_the_hardware_queue() {
    let q = create_intercept(64);
    assert_eq!(
        // SAFETY: live proxy.
        unsafe { profiling_set_profiler_enabled(q, 1) },
        HSA_STATUS_SUCCESS
    );
    let kd = descriptor(empty_kernel);
    let done = signal(1);
    submit(
        q,
        &dispatch_packet(&kd, std::ptr::null(), 1, [1, 1, 1], [1, 1, 1], done),
    );
    assert_eq!(wait_zero(done), 0);
    let (start, end) = crate::signals::timestamps(done);
    assert!(start != 0 && start <= end);
    destroy(q);
}

#[test]
fn concurrent_queues_share_the_worker_pool() {
    let kd = descriptor(count_kernel);
    let kd_addr = &*kd as *const KernelDescriptor as usize;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let q = create(64);
                // SAFETY: the descriptor outlives the threads (joined below).
                let kd = unsafe { &*(kd_addr as *const KernelDescriptor) };
                let hits = Hits::new([8, 2, 1]);
                let done = signal(50);
                for _ in 0..50 {
                    let p = dispatch_packet(
                        kd,
                        (&*hits as *const Hits).cast(),
                        2,
                        [3, 2, 1],
                        [24, 3, 1],
                        done,
                    );
                    submit(q, &p);
                }
                assert_eq!(wait_zero(done), 0);
                assert!(hits.hits.iter().all(|h| h.load(Ordering::Relaxed) == 50));
                assert_eq!(hits.items.load(Ordering::Relaxed), 50 * 72);
                destroy(q);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

// ---- interception: a full hardware queue ------------------------------------------------------

/// How long a doorbell store may take while the hardware queue is full: a bound on blocking
/// (the old code waited up to 10 s for room), not a speed target.
const PROMPT: Duration = Duration::from_secs(2);

/// Polls `f` every millisecond until it holds or [`WAIT`] passes; whether it held.
fn until(f: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while !f() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Completion signals (initial value 1) whose drops to 0 are logged, in the order the packet
/// processor completes them (the store hook runs on the completing thread).
struct Completions {
    signals: Vec<hsa_signal_t>,
    order: Arc<StdMutex<Vec<usize>>>,
}

impl Completions {
    fn new(n: usize) -> Completions {
        let order = Arc::new(StdMutex::new(Vec::new()));
        let signals = (0..n)
            .map(|i| {
                let s = signal(1);
                let log = order.clone();
                crate::signals::set_store_hook(
                    s,
                    Box::new(move |v| {
                        if v == 0 {
                            log.lock().unwrap().push(i);
                        }
                    }),
                );
                s
            })
            .collect();
        Completions { signals, order }
    }

    /// Barrier-AND packets gated on `gate`, one per signal.
    fn gated(&self, gate: hsa_signal_t) -> Vec<hsa_barrier_and_packet_t> {
        self.signals
            .iter()
            .map(|&s| barrier_and(&[gate], s))
            .collect()
    }

    fn order(&self) -> Vec<usize> {
        self.order.lock().unwrap().clone()
    }

    /// Waits (with a deadline each) until every signal is 0 and its hook has logged it (the
    /// hook runs after waiters are woken).
    fn wait_all(&self) {
        for (i, &s) in self.signals.iter().enumerate() {
            assert_eq!(wait_zero(s), 0, "packet {i} never completed");
        }
        let n = self.signals.len();
        assert!(until(|| self.order.lock().unwrap().len() == n));
    }

    fn still_pending(&self, range: std::ops::Range<usize>) -> bool {
        self.signals[range]
            .iter()
            .all(|&s| crate::signals::load(s) == 1)
    }
}

impl Drop for Completions {
    fn drop(&mut self) {
        for &s in &self.signals {
            crate::signals::destroy(s);
        }
    }
}

/// Writes `packets` into consecutive slots of `q` (which must have room for all of them), then
/// rings the doorbell once; returns how long the doorbell store took.
fn write_batch<T: Copy>(q: *mut hsa_queue_t, packets: &[T]) -> Duration {
    assert_eq!(std::mem::size_of::<T>(), 64);
    // SAFETY: `q` is a live queue of this runtime.
    let (size, base, doorbell) = unsafe {
        (
            (*q).size as u64,
            (*q).base_address.cast::<u8>(),
            (*q).doorbell_signal,
        )
    };
    let n = packets.len() as u64;
    // SAFETY: as above.
    let first = unsafe { add_write_index_scacq_screl(q, n) };
    // SAFETY: as above.
    let read = unsafe { load_read_index_scacquire(q) };
    assert!(
        first + n - read <= size,
        "the proxy ring has room for the batch"
    );
    for (k, packet) in packets.iter().enumerate() {
        // SAFETY: slots first..first + n are reserved for us and free (checked above).
        unsafe { write_slot(base, size, first + k as u64, packet) };
    }
    let t = Instant::now();
    crate::signals::store(doorbell, (first + n - 1) as i64);
    t.elapsed()
}

/// A forwarding handler for the full-queue tests.
#[derive(Default)]
struct Forwarder {
    /// (user_pkt_index, count, thread name) of every call.
    calls: StdMutex<Vec<(u64, u64, Option<String>)>>,
    /// Forwarded instead of the intercepted packets, if not empty.
    replacement: Vec<hsa_barrier_and_packet_t>,
    /// After forwarding in call number `.0` (0-based): report on `.1`, wait for `.2`.
    block: Option<(usize, mpsc::Sender<()>, StdMutex<mpsc::Receiver<()>>)>,
}

unsafe extern "C" fn forwarding_handler(
    pkts: *const c_void,
    count: u64,
    user_pkt_index: u64,
    data: *mut c_void,
    writer: hsa_amd_queue_intercept_packet_writer,
) {
    // SAFETY: `data` is the Forwarder registered with this handler.
    let ctx = unsafe { &*data.cast::<Forwarder>() };
    let call = {
        let mut calls = ctx.calls.lock().unwrap();
        let name = std::thread::current().name().map(String::from);
        calls.push((user_pkt_index, count, name));
        calls.len() - 1
    };
    let writer = writer.unwrap();
    if ctx.replacement.is_empty() {
        // SAFETY: called inside the handler with the packets we got.
        unsafe { writer(pkts, count) };
    } else {
        // SAFETY: called inside the handler with an array of 64-byte packets.
        unsafe {
            writer(
                ctx.replacement.as_ptr().cast(),
                ctx.replacement.len() as u64,
            )
        };
    }
    if let Some((at, entered, release)) = &ctx.block
        && *at == call
    {
        // No panics here (an extern "C" function): a failed test just stops waiting.
        let _ = entered.send(());
        if let Ok(release) = release.lock() {
            let _ = release.recv_timeout(WAIT);
        }
    }
}

fn register_forwarder(q: *mut hsa_queue_t, ctx: &Forwarder) {
    // SAFETY: `ctx` outlives the queue in every test.
    let st = unsafe {
        intercept_register(
            q,
            Some(forwarding_handler),
            (ctx as *const Forwarder).cast_mut().cast(),
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
}

/// The interception state of a proxy.
fn intercept_state(q: *mut hsa_queue_t) -> Arc<Queue> {
    let proxy = lookup(q).expect("live proxy");
    assert!(proxy.intercept.is_some());
    proxy
}

#[test]
fn intercept_full_hardware_queue_overflows_without_blocking_or_dropping() {
    // The retry runs on the async thread, which a signals test shuts down.
    let _async = crate::signals::tests::ASYNC_TESTS.lock();
    let q = create_intercept(64);
    let ctx = Forwarder::default();
    register_forwarder(q, &ctx);
    let gate = signal(1);
    let done = Completions::new(128);
    let packets = done.gated(gate);
    let proxy = intercept_state(q);
    let state = proxy.intercept.as_ref().unwrap();

    // Two batches of 32: the first fits the hardware ring (64 slots, one kept for the retry
    // barrier), the second overflows and a retry barrier goes in after the first.
    let took = write_batch(q, &packets[..64]);
    assert!(took < PROMPT, "doorbell store blocked for {took:?}");
    assert_eq!(state.overflow_len(), 32);
    assert!(state.retry_pending());
    assert_eq!(crate::signals::load(state.retry_signal()), 1);
    assert_eq!(state.real().write_index().load(Ordering::Acquire), 33);

    // The next doorbell flushes what fits (31 slots are left beside the retry barrier) and
    // leaves the new packets un-intercepted in the proxy ring: back-pressure, no loss.
    let took = write_batch(q, &packets[64..]);
    assert!(took < PROMPT, "doorbell store blocked for {took:?}");
    assert_eq!(state.overflow_len(), 1);
    assert_eq!(state.real().write_index().load(Ordering::Acquire), 64);
    // SAFETY: live proxy.
    let intercepted = unsafe { load_read_index_scacquire(q) };
    assert_eq!(intercepted, 64, "not intercepted");
    assert_eq!(ctx.calls.lock().unwrap().len(), 2);
    assert!(done.order().is_empty() && done.still_pending(0..128));

    // Only the gate is released: retries on the async thread do the rest.
    crate::signals::store(gate, 0);
    done.wait_all();
    assert_eq!(
        done.order(),
        (0..128).collect::<Vec<_>>(),
        "completion order"
    );
    let calls = ctx.calls.lock().unwrap().clone();
    let indices: Vec<(u64, u64)> = calls.iter().map(|c| (c.0, c.1)).collect();
    assert_eq!(indices, vec![(0, 32), (32, 32), (64, 32), (96, 32)]);
    for c in &calls[2..] {
        assert_eq!(
            c.2.as_deref(),
            Some("hsa-emu-async"),
            "re-processed by the retry"
        );
    }
    assert!(until(|| !state.retry_pending()));
    assert_eq!(state.overflow_len(), 0);
    drop(proxy);
    destroy(q);
    crate::signals::destroy(gate);
}

#[test]
fn intercept_overflow_is_flushed_by_the_async_retry_without_another_doorbell() {
    // The retry runs on the async thread, which a signals test shuts down.
    let _async = crate::signals::tests::ASYNC_TESTS.lock();
    // No handler: packets go straight to the final submission.
    let q = create_intercept(64);
    let gate = signal(1);
    let done = Completions::new(128);
    let packets = done.gated(gate);
    let proxy = intercept_state(q);
    let state = proxy.intercept.as_ref().unwrap();

    // Twice as many packets as the hardware ring holds, in two doorbells, before anything runs.
    for half in packets.chunks(64) {
        let took = write_batch(q, half);
        assert!(took < PROMPT, "doorbell store blocked for {took:?}");
    }
    assert!(state.retry_pending());
    assert_eq!(state.overflow_len(), 1);
    // SAFETY: live proxy.
    let intercepted = unsafe { load_read_index_scacquire(q) };
    assert_eq!(intercepted, 64, "not intercepted");
    std::thread::sleep(Duration::from_millis(50));
    assert!(done.still_pending(0..128), "the gate holds everything");

    // From here on the application stores no doorbell: only the gate is released.
    crate::signals::store(gate, 0);
    done.wait_all();
    assert_eq!(
        done.order(),
        (0..128).collect::<Vec<_>>(),
        "completion order"
    );
    assert!(until(|| !state.retry_pending()));
    assert_eq!(state.overflow_len(), 0);
    assert_eq!(crate::signals::load(state.retry_signal()), 0);
    // SAFETY: live proxy.
    assert_eq!(unsafe { load_read_index_scacquire(q) }, 128);
    drop(proxy);
    destroy(q);
    crate::signals::destroy(gate);
}

#[test]
fn intercept_retry_during_a_handler_waits_for_it_to_return() {
    // The retry runs on the async thread, which a signals test shuts down.
    let _async = crate::signals::tests::ASYNC_TESTS.lock();
    let q = create_intercept(64);
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    // Leaked: if an assertion fails, thread A may still be inside the handler.
    let ctx: &'static Forwarder = Box::leak(Box::new(Forwarder {
        block: Some((1, entered_tx, StdMutex::new(release_rx))),
        ..Forwarder::default()
    }));
    register_forwarder(q, ctx);
    let gate = signal(1);
    let done = Completions::new(64);
    let packets = done.gated(gate);
    let proxy = intercept_state(q);
    let state = proxy.intercept.as_ref().unwrap();

    // Thread A: one doorbell for 64 packets; its second handler call overflows the hardware
    // queue, then blocks.
    let (a_done_tx, a_done) = mpsc::channel();
    let q_addr = q as usize;
    let a = std::thread::spawn(move || {
        let took = write_batch(q_addr as *mut hsa_queue_t, &packets);
        a_done_tx.send(took).unwrap();
    });
    entered.recv_timeout(WAIT).expect("handler call 2 reached");
    assert_eq!(state.overflow_len(), 32);
    assert!(state.retry_pending());

    // The retry barrier completes and its retry runs on the async thread while A's handler is
    // still blocked: it only leaves the work to A.
    crate::signals::store(gate, 0);
    assert!(
        until(|| done.order().len() == 32 && !state.retry_pending()),
        "the first 32 packets completed and the retry ran"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        state.overflow_len(),
        32,
        "not flushed while A's handler runs"
    );
    assert!(done.still_pending(32..64));
    assert!(a_done.try_recv().is_err(), "A is still in its handler");

    // A's handler returns: A flushes the overflow before its doorbell store returns.
    release.send(()).unwrap();
    a_done
        .recv_timeout(WAIT)
        .expect("A's doorbell store returned");
    a.join().unwrap();
    assert_eq!(state.overflow_len(), 0);
    done.wait_all();
    assert_eq!(
        done.order(),
        (0..64).collect::<Vec<_>>(),
        "completion order"
    );
    assert_eq!(ctx.calls.lock().unwrap().len(), 2);
    drop(proxy);
    destroy(q);
    crate::signals::destroy(gate);
}

#[test]
fn intercept_writer_call_larger_than_the_ring_is_split_without_loss() {
    // The retry runs on the async thread, which a signals test shuts down.
    let _async = crate::signals::tests::ASYNC_TESTS.lock();
    let q = create_intercept(64);
    let gate = signal(1);
    let done = Completions::new(100);
    let ctx = Forwarder {
        replacement: done.gated(gate),
        ..Forwarder::default()
    };
    register_forwarder(q, &ctx);
    let proxy = intercept_state(q);
    let state = proxy.intercept.as_ref().unwrap();

    // One intercepted packet becomes one writer call of 100 packets: 63 fit beside the kept
    // slot, which takes the retry barrier; 37 overflow.
    let took = write_batch(q, &[barrier_and(&[], hsa_signal_t { handle: 0 })]);
    assert!(took < PROMPT, "doorbell store blocked for {took:?}");
    assert_eq!(state.overflow_len(), 37);
    assert_eq!(state.real().write_index().load(Ordering::Acquire), 64);

    crate::signals::store(gate, 0);
    done.wait_all();
    assert_eq!(
        done.order(),
        (0..100).collect::<Vec<_>>(),
        "completion order"
    );
    assert!(until(|| !state.retry_pending()));
    drop(proxy);
    destroy(q);
    crate::signals::destroy(gate);
}

#[test]
fn intercept_destroy_with_overflow_drops_it() {
    // The retry runs on the async thread, which a signals test shuts down.
    let _async = crate::signals::tests::ASYNC_TESTS.lock();
    let q = create_intercept(64);
    let gate = signal(1);
    let done = Completions::new(64);
    let took = write_batch(q, &done.gated(gate));
    assert!(took < PROMPT, "doorbell store blocked for {took:?}");
    let weak = Arc::downgrade(&intercept_state(q));
    let t = Instant::now();
    destroy(q);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(weak.upgrade().is_none(), "the proxy is freed");
    // Unprocessed packets, overflowed ones included, are dropped; nothing runs any more.
    crate::signals::store(gate, 0);
    std::thread::sleep(Duration::from_millis(100));
    assert!(done.still_pending(0..64));
    crate::signals::destroy(gate);
}

// ---- AMDGPU kernel objects: shadows and the queue error callback -----------------------------

/// A stand-in for an AMDGPU kernel descriptor (what a loaded image holds at `N.kd`).
#[repr(C, align(64))]
struct FakeAmdDescriptor([u8; 64]);

fn amd_kernel(resolved: Result<crate::shadow::Resolved, String>) -> Box<FakeAmdDescriptor> {
    let kd = Box::new(FakeAmdDescriptor([0; 64]));
    crate::shadow::register(
        &*kd as *const FakeAmdDescriptor as u64,
        Arc::new(crate::shadow::ShadowKernel {
            source: "test".into(),
            resolved,
        }),
    );
    kd
}

fn amd_dispatch(
    kd: &FakeAmdDescriptor,
    kernarg: *const c_void,
    grid: [u32; 3],
    completion: hsa_signal_t,
) -> hsa_kernel_dispatch_packet_t {
    let mut p = dispatch_packet(
        &descriptor(empty_kernel),
        kernarg,
        3,
        [4, 2, 1],
        grid,
        completion,
    );
    p.kernel_object = kd as *const FakeAmdDescriptor as u64;
    p
}

#[test]
fn an_amdgpu_kernel_object_runs_its_shadow() {
    let q = create(64);
    let kd = amd_kernel(Ok(crate::shadow::Resolved {
        entry: count_kernel,
        group_segment_size: 0,
    }));
    let hits = Hits::new([3, 2, 1]);
    let done = signal(1);
    let p = amd_dispatch(&kd, (&*hits as *const Hits).cast(), [10, 3, 1], done);
    submit(q, &p);
    assert_eq!(wait_zero(done), 0);
    assert!(hits.all_once());
    assert_eq!(hits.items.load(Ordering::Relaxed), 30);
    crate::shadow::unregister(&*kd as *const FakeAmdDescriptor as u64);
    destroy(q);
}

/// What the error callback saw.
#[derive(Default)]
struct Reported {
    calls: StdMutex<Vec<(hsa_status_t, usize)>>,
}

unsafe extern "C" fn on_queue_error(
    status: hsa_status_t,
    queue: *mut hsa_queue_t,
    data: *mut c_void,
) {
    // SAFETY: the tests pass a live `Reported`.
    let r = unsafe { &*data.cast::<Reported>() };
    r.calls.lock().unwrap().push((status, queue as usize));
}

#[test]
fn a_kernel_without_a_shadow_calls_the_error_callback_and_stops_the_queue() {
    for intercepted in [false, true] {
        let reported = Box::new(Reported::default());
        let mut q = std::ptr::null_mut();
        let make = if intercepted {
            intercept_create
        } else {
            queue_create
        };
        // SAFETY: valid out-pointer; the callback's data outlives the queue.
        let st = unsafe {
            make(
                gpu(),
                64,
                HSA_QUEUE_TYPE_MULTI,
                Some(on_queue_error),
                (&*reported as *const Reported).cast_mut().cast(),
                0,
                0,
                &mut q,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let kd = amd_kernel(Err("kernel k_missing has no shadow".into()));
        let failed = signal(1);
        let later = signal(1);
        let empty = descriptor(empty_kernel);
        submit(q, &amd_dispatch(&kd, std::ptr::null(), [1, 1, 1], failed));
        submit(
            q,
            &dispatch_packet(&empty, std::ptr::null(), 1, [1, 1, 1], [1, 1, 1], later),
        );
        assert!(
            until(|| !reported.calls.lock().unwrap().is_empty()),
            "the callback is called"
        );
        assert_eq!(
            *reported.calls.lock().unwrap(),
            [(HSA_STATUS_ERROR_INVALID_CODE_OBJECT, q as usize)],
            "once, with the queue the application holds (intercepted: {intercepted})"
        );
        // Error state: neither the failed packet nor the next one completes.
        let v = crate::signals::wait(
            later,
            HSA_SIGNAL_CONDITION_EQ,
            0,
            Some(Instant::now() + Duration::from_millis(200)),
        );
        assert_eq!((crate::signals::load(failed), v), (1, 1));
        if !intercepted {
            assert_eq!(
                // SAFETY: a live queue.
                unsafe { load_read_index_scacquire(q) },
                0,
                "the read index stays on the failed packet"
            );
        }
        crate::shadow::unregister(&*kd as *const FakeAmdDescriptor as u64);
        destroy(q);
    }
}

/// The AQL profile extension's v1 table, as a tool gets it.
fn aqlprofile_table() -> hsa_ven_amd_aqlprofile_1_00_pfn_t {
    let mut t = hsa_ven_amd_aqlprofile_1_00_pfn_t::default();
    // SAFETY: `t` is a whole v1 table.
    let st = unsafe {
        crate::aqlprofile::fill_extension_table(
            1,
            size_of::<hsa_ven_amd_aqlprofile_1_00_pfn_t>(),
            (&raw mut t).cast(),
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
    t
}

fn pm4(p: hsa_ext_amd_aql_pm4_packet_t, completion: hsa_signal_t) -> hsa_ext_amd_aql_pm4_packet_t {
    hsa_ext_amd_aql_pm4_packet_t {
        header: packet_header(
            HSA_PACKET_TYPE_VENDOR_SPECIFIC,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        ),
        completion_signal: completion,
        ..p
    }
}

#[test]
fn aqlprofile_counts_the_dispatches_of_its_queue_between_start_and_stop() {
    let t = aqlprofile_table();
    let q = create(64);
    let other = create(64);
    let kd = descriptor(count_kernel);
    let events = [
        hsa_ven_amd_aqlprofile_event_t {
            block_name: HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SQ,
            block_index: 0,
            counter_id: 4, // SQ_WAVES
        },
        hsa_ven_amd_aqlprofile_event_t {
            block_name: HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SPI,
            block_index: 0,
            counter_id: 49, // SPI_CSN_NUM_THREADGROUPS
        },
        hsa_ven_amd_aqlprofile_event_t {
            block_name: HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_GRBM,
            block_index: 0,
            counter_id: 0, // GRBM_COUNT
        },
        hsa_ven_amd_aqlprofile_event_t {
            block_name: HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_GRBM,
            block_index: 0,
            counter_id: 2, // GRBM_GUI_ACTIVE
        },
    ];
    let mut cmd = vec![0u8; 4096];
    let mut out = [u64::MAX; 4];
    let mut profile = hsa_ven_amd_aqlprofile_profile_t {
        agent: gpu(),
        type_: HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC,
        events: events.as_ptr(),
        event_count: 4,
        parameters: std::ptr::null(),
        parameter_count: 0,
        output_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
            ptr: out.as_mut_ptr().cast(),
            size: 32,
        },
        command_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
            ptr: cmd.as_mut_ptr().cast(),
            size: 4096,
        },
    };
    let mut start = hsa_ext_amd_aql_pm4_packet_t::default();
    let mut stop = hsa_ext_amd_aql_pm4_packet_t::default();
    // SAFETY: the emulator's own functions with a live profile and packets.
    unsafe {
        assert_eq!(
            (t.hsa_ven_amd_aqlprofile_start.unwrap())(&mut profile, &mut start),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(
            (t.hsa_ven_amd_aqlprofile_stop.unwrap())(&profile, &mut stop),
            HSA_STATUS_SUCCESS
        );
    }
    let hits = Hits::new([16, 1, 1]);
    let two = Hits::new([3, 3, 1]);
    let kernarg = (&*hits as *const Hits).cast();
    let kernarg2 = (&*two as *const Hits).cast();
    let none = hsa_signal_t { handle: 0 };
    // Before the window: not counted.
    let before = signal(1);
    submit(
        q,
        &dispatch_packet(&kd, kernarg, 1, [64, 1, 1], [1000, 1, 1], before),
    );
    let started = signal(1);
    submit(q, &pm4(start, started));
    assert_eq!(wait_zero(started), 0);
    assert_eq!(out, [0; 4], "the start packet zeroes the output");
    // In the window: 1000 items in groups of 64 (16 groups, 16 waves) and 10 x 7 items in
    // groups of 4 x 3 (9 groups of 12, 4, 6 or 2 items: 9 waves).
    submit(
        q,
        &dispatch_packet(&kd, kernarg, 1, [64, 1, 1], [1000, 1, 1], none),
    );
    submit(
        q,
        &dispatch_packet(&kd, kernarg2, 2, [4, 3, 1], [10, 7, 1], none),
    );
    // Another queue's dispatch during the window: not counted.
    let elsewhere = signal(1);
    submit(
        other,
        &dispatch_packet(&kd, kernarg, 1, [64, 1, 1], [1000, 1, 1], elsewhere),
    );
    assert_eq!(wait_zero(elsewhere), 0);
    let stopped = signal(1);
    submit(q, &pm4(stop, stopped));
    assert_eq!(wait_zero(stopped), 0);
    // After the window: not counted.
    let after = signal(1);
    submit(
        q,
        &dispatch_packet(&kd, kernarg, 1, [64, 1, 1], [1000, 1, 1], after),
    );
    assert_eq!(wait_zero(after), 0);
    assert_eq!(out[0], 25, "SQ_WAVES");
    assert_eq!(out[1], 25, "SPI_CSN_NUM_THREADGROUPS");
    assert!(out[3] > 0, "GRBM_GUI_ACTIVE counts the dispatches' time");
    assert!(out[2] >= out[3], "GRBM_COUNT spans the window: {out:?}");
    assert_eq!(hits.total(), 16 * 4, "every dispatch ran");

    let mut seen: Vec<(u32, u64)> = Vec::new();
    unsafe extern "C" fn collect(
        info_type: hsa_ven_amd_aqlprofile_info_type_t,
        info: *mut hsa_ven_amd_aqlprofile_info_data_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        assert_eq!(info_type, HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA);
        // SAFETY: `data` is the test's Vec; `info` a live PMC sample.
        unsafe {
            let seen = &mut *data.cast::<Vec<(u32, u64)>>();
            seen.push((
                (*info).data.pmc_data.event.counter_id,
                (*info).data.pmc_data.result,
            ));
        }
        HSA_STATUS_SUCCESS
    }
    // SAFETY: the emulator's own function; `seen` outlives the call.
    let st = unsafe {
        (t.hsa_ven_amd_aqlprofile_iterate_data.unwrap())(
            &profile,
            Some(collect),
            (&raw mut seen).cast(),
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
    assert_eq!(seen, vec![(4, 25), (49, 25), (0, out[2]), (2, out[3])]);
    destroy(other);
    destroy(q);
}

#[test]
fn aqlprofile_packets_work_through_an_intercept_queue() {
    let t = aqlprofile_table();
    let q = create_intercept(64);
    let kd = descriptor(count_kernel);
    let events = [hsa_ven_amd_aqlprofile_event_t {
        block_name: HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_SQ,
        block_index: 0,
        counter_id: 14, // SQ_ITEMS
    }];
    let mut cmd = vec![0u8; 256];
    let mut out = [u64::MAX; 1];
    let mut profile = hsa_ven_amd_aqlprofile_profile_t {
        agent: gpu(),
        type_: HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC,
        events: events.as_ptr(),
        event_count: 1,
        parameters: std::ptr::null(),
        parameter_count: 0,
        output_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
            ptr: out.as_mut_ptr().cast(),
            size: 8,
        },
        command_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
            ptr: cmd.as_mut_ptr().cast(),
            size: 256,
        },
    };
    let mut start = hsa_ext_amd_aql_pm4_packet_t::default();
    let mut read = hsa_ext_amd_aql_pm4_packet_t::default();
    let mut stop = hsa_ext_amd_aql_pm4_packet_t::default();
    // SAFETY: the emulator's own functions with a live profile and packets.
    unsafe {
        assert_eq!(
            (t.hsa_ven_amd_aqlprofile_start.unwrap())(&mut profile, &mut start),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(
            (t.hsa_ven_amd_aqlprofile_read.unwrap())(&profile, &mut read),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(
            (t.hsa_ven_amd_aqlprofile_stop.unwrap())(&profile, &mut stop),
            HSA_STATUS_SUCCESS
        );
    }
    let hits = Hits::new([16, 1, 1]);
    let kernarg = (&*hits as *const Hits).cast();
    let none = hsa_signal_t { handle: 0 };
    submit(q, &pm4(start, none));
    submit(
        q,
        &dispatch_packet(&kd, kernarg, 1, [64, 1, 1], [1000, 1, 1], none),
    );
    let read_done = signal(1);
    submit(q, &pm4(read, read_done));
    assert_eq!(wait_zero(read_done), 0);
    assert_eq!(out[0], 1000, "a read packet writes the values so far");
    submit(
        q,
        &dispatch_packet(&kd, kernarg, 1, [64, 1, 1], [1000, 1, 1], none),
    );
    let stopped = signal(1);
    submit(q, &pm4(stop, stopped));
    assert_eq!(wait_zero(stopped), 0);
    assert_eq!(out[0], 2000, "SQ_ITEMS of both dispatches");
    destroy(q);
}
