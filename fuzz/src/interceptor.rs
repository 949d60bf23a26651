//! The queue interceptor against random packet streams, in-process.
//!
//! One process holds the application side (this harness), the runtime (hsa-emu, linked as an
//! rlib: its exported C API is this process's HSA runtime) and the tool (rocprof-replay with
//! [`FuzzPolicy`], installed into the live table hsa-emu hands the table shim tool). Once per
//! process [`harness`] starts the runtime with two GPU agents, loads the stress kernels for
//! both and creates two intercepted queues per agent ("lanes"); the queues live on, so their
//! ring indices wrap around many times over a fuzzing run.
//!
//! Each input decodes to a [`Scenario`]: steps, each a batch of packets written to one lane
//! and published with one doorbell store — kernel dispatches of real kernels (replayed or not
//! as the packet's plan says) and of garbage kernel objects, with valid and invalid
//! geometries; barrier-AND and barrier-OR packets whose dependencies are satisfied, released
//! later by a helper thread (gates), or earlier packets' completions; AMD barrier-value
//! packets; agent-dispatch packets; packets of reserved types; a packet whose header is
//! published late by a helper thread (the slot stays INVALID for a while, holding back what
//! follows it). Steps run on one thread or on one thread per lane.
//!
//! Invariants checked after every scenario (a violation panics, which the fuzzer reports):
//! - no wait outlives [`HANG`] (a hang is a failure, never a stuck fuzzer);
//! - every packet's completion signal ends at exactly 0 (one completion, none lost);
//! - every lane's buffers hold exactly what one execution of each of its valid dispatches
//!   gives (`stress_replayed` is not idempotent), and each agent's module counter grew by
//!   exactly its valid `inc_in_place` dispatches;
//! - no outcome is `failed`; a replayed dispatch ran exactly the passes its plan asked for; a
//!   `policy_panicked` or `too_many_passes` decline only where the plan asked for it.

use std::cell::Cell;
use std::ffi::{CString, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use rocprof_replay::{
    DeclineReason, DispatchInfo, MAX_OPEN_ENDED_PASSES, MAX_PASSES, Outcome, OutcomeKind, Pass,
    PassPlan, PassReport, ReplayPolicy,
};
use rocprof_replay_sys::*;

// The runtime of this process: hsa-emu's exported C API (and its live tables).
use hsa_emu as _;

unsafe extern "C" {
    fn hsa_init() -> hsa_status_t;
}

/// The longest the harness waits for anything; past it the scenario hangs (a failure).
pub const HANG: Duration = Duration::from_secs(20);
/// Elements of each lane buffer.
const N: usize = 128;
/// Work-items per work-group of valid dispatches.
const WG: u16 = 32;
/// Intercepted queues: two per GPU agent.
const LANES: usize = 4;
/// Completion signals available to one scenario (one per packet at most).
const MAX_PACKETS: usize = 160;
const MAX_STEPS: usize = 40;
const MAX_BATCH: usize = 4;
const GATES: usize = 3;

// ---- the scenario -------------------------------------------------------------------------

/// A decoded fuzz input (see [`Scenario::decode`]).
#[derive(Debug)]
pub struct Scenario {
    /// One submitting thread per lane instead of one for all.
    pub threaded: bool,
    /// Milliseconds until the helper releases the gates.
    pub gate_delay: u8,
    pub steps: Vec<Step>,
}

/// Packets written to one lane and published with one doorbell store.
#[derive(Debug)]
pub struct Step {
    pub lane: usize,
    /// The first packet's header is published by a helper thread a little later.
    pub late: bool,
    pub packets: Vec<Packet>,
}

/// Bytes of input per packet.
pub const PACKET_BYTES: usize = 32;

impl Scenario {
    /// A flat, mutation-friendly format: one flags byte (bit 0: threaded, bits 1-2: gate
    /// delay in ms), then steps, each one header byte (bits 0-1: lane, bit 2: late, bits 3-4:
    /// packets - 1) followed by [`PACKET_BYTES`] bytes per packet, decoded with `arbitrary`
    /// (a short tail decodes too). Every input is a scenario.
    pub fn decode(data: &[u8]) -> Scenario {
        let (flags, mut rest) = data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        let mut steps = Vec::new();
        while let Some((&h, tail)) = rest.split_first() {
            if steps.len() == MAX_STEPS {
                break;
            }
            rest = tail;
            let mut packets = Vec::new();
            for _ in 0..=(h >> 3) & 3 {
                let (chunk, tail) = rest.split_at(rest.len().min(PACKET_BYTES));
                rest = tail;
                if let Ok(p) = Packet::arbitrary(&mut Unstructured::new(chunk)) {
                    packets.push(p);
                }
            }
            steps.push(Step {
                lane: usize::from(h & 3),
                late: h & 4 != 0,
                packets,
            });
        }
        Scenario {
            threaded: flags & 1 != 0,
            gate_delay: (flags >> 1) & 3,
            steps,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Packet {
    Dispatch {
        kernel: Kernel,
        geometry: Geometry,
        plan: Plan,
        header: HeaderBits,
        signal: bool,
    },
    BarrierAnd {
        deps: [Dep; 5],
        header: HeaderBits,
        signal: bool,
    },
    BarrierOr {
        deps: [Dep; 5],
        header: HeaderBits,
        signal: bool,
    },
    /// AMD vendor packet: a barrier-value packet (format 2) watching `watch`, or another
    /// format (a no-op).
    Vendor {
        format: u8,
        watch: Dep,
        cond: u8,
        mask: i64,
        value: i64,
        signal: bool,
    },
    AgentDispatch {
        signal: bool,
    },
    /// A packet type the AQL specification reserves (6 and up).
    Reserved {
        ty: u8,
        signal: bool,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct HeaderBits {
    pub barrier: bool,
    /// Acquire and release fence scopes, 2 bits each (3 is reserved), and the 3 high bits.
    pub bits: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Kernel {
    /// `stress_replayed`: a[i] = a[i] * 3 + k (not idempotent).
    Replayed,
    /// `inc_in_place`: e[i] += 1 and the module counter += 1.
    Inc,
    Empty,
    /// `sleep_kernel` for 1 ms.
    Sleep,
    /// A kernel object that is not a kernel descriptor of the runtime.
    Garbage(Garbage),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Garbage {
    Null,
    /// A real descriptor's address plus 8.
    Misaligned,
    /// Mapped memory of ours that holds no descriptor.
    Heap,
    /// An address outside the canonical address space.
    NonCanonical(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Geometry {
    /// `groups % 6 + 1` work-groups of [`WG`] work-items (the grid may exceed the buffer).
    Valid {
        groups: u8,
    },
    ZeroDimensions,
    ZeroWorkgroup,
    TooMuchGroupMemory,
}

/// What the policy does with a dispatch (carried in its `private_segment_size`, which
/// hsa-emu ignores).
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Skip,
    /// `n % 7` passes (0 and 1 run once, as skipped).
    Exactly(u8),
    /// Up to `n % 7` passes; `should_continue` stops after `stop % 7` completed.
    UpTo(u8, u8),
    /// Open-ended; `should_continue` stops after `stop % 7` completed.
    Until(u8),
    /// More than `MAX_PASSES`.
    TooMany,
    PanicInPassCount,
    /// Exactly 4 passes; `on_pass` panics at pass `k % 4`.
    PanicInOnPass(u8),
    /// Exactly 4 passes; `on_pass_end` panics at pass `k % 4`.
    PanicInOnPassEnd(u8),
    /// Up to 4 passes; `should_continue` panics.
    PanicInShouldContinue,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Dep {
    None,
    /// A signal that is already 0.
    Done,
    /// A gate, released by a helper thread after the scenario's gate delay.
    Gate(u8),
    /// The completion signal of the `k`-th packet before this one (in submission order on
    /// one thread; none if that packet has no completion signal or, with one thread per
    /// lane, is on another lane).
    Earlier(u8),
    /// A handle that is not a signal of the runtime.
    Bogus(u64),
}

impl Plan {
    fn encode(self) -> u32 {
        let (tag, a, b): (u8, u8, u8) = match self {
            Plan::Skip => (0, 0, 0),
            Plan::Exactly(n) => (1, n % 7, 0),
            Plan::UpTo(n, s) => (2, n % 7, s % 7),
            Plan::Until(s) => (3, s % 7, 0),
            Plan::TooMany => (4, 0, 0),
            Plan::PanicInPassCount => (5, 0, 0),
            Plan::PanicInOnPass(k) => (6, k % 4, 0),
            Plan::PanicInOnPassEnd(k) => (7, k % 4, 0),
            Plan::PanicInShouldContinue => (8, 0, 0),
        };
        u32::from(tag) | u32::from(a) << 8 | u32::from(b) << 16
    }

    fn decode(code: u32) -> Plan {
        let (a, b) = ((code >> 8) as u8, (code >> 16) as u8);
        match code & 0xff {
            1 => Plan::Exactly(a),
            2 => Plan::UpTo(a, b),
            3 => Plan::Until(a),
            4 => Plan::TooMany,
            5 => Plan::PanicInPassCount,
            6 => Plan::PanicInOnPass(a),
            7 => Plan::PanicInOnPassEnd(a),
            8 => Plan::PanicInShouldContinue,
            _ => Plan::Skip,
        }
    }

    /// Whether the plan panics somewhere the window reaches.
    fn panics(self) -> bool {
        matches!(
            self,
            Plan::PanicInPassCount
                | Plan::PanicInOnPass(_)
                | Plan::PanicInOnPassEnd(_)
                | Plan::PanicInShouldContinue
        )
    }

    /// The passes a replayed (not declined) dispatch with this plan runs.
    fn replayed_passes(self) -> Option<u32> {
        let stop = |s: u8| u32::from(s).max(1);
        match self {
            Plan::Exactly(n) => Some(u32::from(n)),
            Plan::UpTo(n, s) => Some(u32::from(n).min(stop(s))),
            Plan::Until(s) => Some(stop(s).min(MAX_OPEN_ENDED_PASSES)),
            Plan::PanicInOnPass(_) | Plan::PanicInOnPassEnd(_) => Some(4),
            _ => None,
        }
    }
}

// ---- the policy ---------------------------------------------------------------------------

thread_local! {
    /// Set right before a panic the policy raises on purpose (the panic hook stays quiet).
    static EXPECTED_PANIC: Cell<bool> = const { Cell::new(false) };
}

fn planned_panic(what: &str) -> ! {
    EXPECTED_PANIC.with(|e| e.set(true));
    panic!("fuzz plan: panic in {what}");
}

/// Makes the panics the policy raises on purpose silent (the engine catches them); every
/// other panic goes to the hook that was installed before (libFuzzer's aborts).
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !EXPECTED_PANIC.with(|e| e.replace(false)) {
            previous(info);
        }
    }));
}

/// Outcomes the policy saw end, with the plan of their dispatch.
/// (plan, outcome, passes, whether the kernel object is a kernel of a loaded executable).
/// How a dispatch ended.
struct Ended {
    plan: Plan,
    kind: OutcomeKind,
    passes: u32,
    /// Its kernel is one of the harness's (a name was found).
    known: bool,
    /// Dispatches its window covered (a run: `ROCPROF_REPLAY_RUN`, 16 by default).
    run: u32,
}

static OUTCOMES: Mutex<Vec<Ended>> = Mutex::new(Vec::new());

/// Replays each dispatch as its packet's plan says.
#[derive(Default)]
pub struct FuzzPolicy;

impl ReplayPolicy for FuzzPolicy {
    type State = Plan;
    type PassState = ();

    fn pass_count(&self, info: &DispatchInfo) -> PassPlan<Self> {
        let plan = Plan::decode(info.private_segment_size);
        match plan {
            Plan::Skip => PassPlan::skip(),
            Plan::Exactly(n) => PassPlan::exactly(u32::from(n), plan),
            Plan::UpTo(n, _) => PassPlan::up_to(u32::from(n), plan),
            Plan::Until(_) => PassPlan::until(plan),
            Plan::TooMany => PassPlan::exactly(MAX_PASSES + 1, plan),
            Plan::PanicInPassCount => planned_panic("pass_count"),
            Plan::PanicInOnPass(_) | Plan::PanicInOnPassEnd(_) => PassPlan::exactly(4, plan),
            Plan::PanicInShouldContinue => PassPlan::up_to(4, plan),
        }
    }

    fn should_continue(&self, _: &DispatchInfo, plan: &Plan, done: u32) -> bool {
        match *plan {
            Plan::UpTo(_, s) | Plan::Until(s) => done < u32::from(s),
            Plan::PanicInShouldContinue => planned_panic("should_continue"),
            _ => unreachable!("only consulting plans ask should_continue"),
        }
    }

    fn on_pass(&self, pass: &mut Pass<'_>, plan: &mut Plan, _: &mut ()) {
        if let Plan::PanicInOnPass(k) = *plan {
            if pass.index() == u32::from(k % 4) {
                planned_panic("on_pass");
            }
        }
    }

    fn on_pass_end(&self, pass: &PassReport<'_>, plan: &mut Plan, _: &mut ()) {
        if let Plan::PanicInOnPassEnd(k) = *plan {
            if pass.index == u32::from(k % 4) {
                planned_panic("on_pass_end");
            }
        }
    }

    fn on_end(&self, info: &DispatchInfo, plan: Plan, outcome: &Outcome) {
        OUTCOMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Ended {
                plan,
                kind: outcome.kind,
                passes: outcome.passes,
                known: info.kernel_name.is_some(),
                run: outcome.run,
            });
    }
}

// ---- the runtime, through its live (hooked) tables ----------------------------------------

/// The functions the harness calls, read from the live tables after the tool installed its
/// hooks (so queue creation, allocation and copies go through rocprof-replay, as in an
/// application).
struct Api {
    core: CoreApiTable,
    amd: *mut ApiTableVersion,
}

// SAFETY: the tables are the runtime's process-wide live tables; only read here.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

macro_rules! core {
    ($api:expr, $f:ident) => {
        $api.core
            .$f
            .expect(concat!(stringify!($f), " is in the table"))
    };
}

impl Api {
    fn amd<F: Copy>(&self, slot: slots::Slot<F>) -> F {
        // SAFETY: `amd` is the runtime's live AMD extension table.
        unsafe { slot.read(self.amd) }
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("{} is in the table", slot.name()))
    }
}

fn check(st: hsa_status_t, what: &str) {
    assert_eq!(st, HSA_STATUS_SUCCESS, "{what} failed: {}", Status(st));
}

#[derive(Clone, Copy)]
struct Kernels {
    replayed: u64,
    inc: u64,
    empty: u64,
    sleep: u64,
}

/// One intercepted queue and the buffers only its dispatches touch.
struct Lane {
    queue: *mut hsa_queue_t,
    agent: usize,
    /// `stress_replayed` works on `a`, `inc_in_place` on `e` (device memory of the agent).
    a: *mut u32,
    e: *mut u32,
    ka_replayed: *mut c_void,
    ka_inc: *mut c_void,
    ka_sleep: *mut c_void,
    ka_empty: *mut c_void,
    /// `k` of this lane's `stress_replayed` kernarg.
    k: u32,
    /// Completion signal of the final barrier.
    fence: hsa_signal_t,
}

struct Harness {
    api: Api,
    kernels: [Kernels; 2],
    hit_counter: [*mut u32; 2],
    lanes: [Lane; LANES],
    signals: Vec<hsa_signal_t>,
    gates: [hsa_signal_t; GATES],
    done: hsa_signal_t,
    /// Host memory holding no kernel descriptor (a garbage kernel object).
    junk: Box<[u64; 64]>,
    /// Host staging buffer for reading and writing lane buffers.
    staging: *mut u32,
    /// One scenario at a time.
    serial: Mutex<()>,
}

// SAFETY: raw pointers to runtime objects (queues, device and host allocations, signals) that
// live for the process; access to them follows the HSA API's thread-safety rules, and the
// harness runs one scenario at a time (`serial`).
unsafe impl Send for Harness {}
// SAFETY: as above.
unsafe impl Sync for Harness {}

fn ticks(d: Duration) -> u64 {
    d.as_nanos() as u64 // hsa-emu's timestamp frequency is 1 GHz
}

impl Harness {
    fn new() -> Harness {
        // Short engine deadlines keep honest declines (a drain behind a gate) cheap, and a lock
        // deadline of 2 ms makes windows of concurrent lanes cut each other short
        // (lock_contention, lock_timeout); every deadline stays far below HANG.
        for (k, v) in [
            ("HSA_EMU_GPUS", "2"),
            ("ROCPROF_REPLAY_LOG", "off"),
            ("HSA_TOOLS_LIB", env!("FUZZ_SHIM")),
            ("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", "250"),
            ("ROCPROF_REPLAY_LOCK_TIMEOUT_MS", "2"),
            ("ROCPROF_REPLAY_PASS_TIMEOUT_MS", "3000"),
            ("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", "3000"),
            ("ROCPROF_REPLAY_COPY_TIMEOUT_MS", "3000"),
        ] {
            if std::env::var_os(k).is_none() {
                // SAFETY: set once, before any other thread of this process reads the
                // environment (the runtime and the tool start below).
                unsafe { std::env::set_var(k, v) };
            }
        }
        install_panic_hook();
        // SAFETY: the runtime's entry point; loads the shim tool, which keeps the table.
        check(unsafe { hsa_init() }, "hsa_init");
        let root = shim_table();
        // SAFETY: the live root table hsa-emu handed the shim's OnLoad.
        let version = unsafe { (*root).version.major_id } as u64;
        // SAFETY: installing the tool into the live table, as its OnLoad would.
        let loaded = unsafe {
            rocprof_replay::__private::on_load::<FuzzPolicy>(
                root,
                version,
                0,
                std::ptr::null(),
                FuzzPolicy::default,
            )
        };
        assert!(loaded, "rocprof-replay did not install");
        // SAFETY: the live root table: its core and AMD extension tables.
        let api = unsafe {
            let core = slots::root::CORE.read(root).expect("core table");
            let amd = slots::root::AMD_EXT
                .read(root)
                .expect("AMD extension table");
            Api {
                core: *core.cast::<CoreApiTable>(),
                amd,
            }
        };
        let (gpus, cpu) = agents(&api);
        assert_eq!(gpus.len(), 2, "HSA_EMU_GPUS=2");
        let agents = [gpus[0], gpus[1]];
        let fine = pool(
            &api,
            cpu,
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
            true,
        );
        let kernarg = pool(
            &api,
            cpu,
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
            false,
        );
        let coarse = agents.map(|g| {
            pool(
                &api,
                g,
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
                false,
            )
        });
        let exe = load_kernels(&api, &agents);
        let kernels = agents.map(|g| Kernels {
            replayed: kernel(&api, exe, g, "stress_replayed"),
            inc: kernel(&api, exe, g, "inc_in_place"),
            empty: kernel(&api, exe, g, "empty_kernel"),
            sleep: kernel(&api, exe, g, "sleep_kernel"),
        });
        let hit_counter = agents.map(|g| variable(&api, exe, g, "hit_counter").cast::<u32>());
        let alloc = |pool, bytes: usize| -> *mut c_void {
            let mut p = std::ptr::null_mut();
            // SAFETY: a pool of the runtime and an out-pointer.
            check(
                unsafe { api.amd(slots::amd_ext::MEMORY_POOL_ALLOCATE)(pool, bytes, 0, &mut p) },
                "hsa_amd_memory_pool_allocate",
            );
            p
        };
        let signal = |v| {
            let mut s = hsa_signal_t::default();
            // SAFETY: creating a plain signal.
            check(
                unsafe { core!(api, hsa_signal_create_fn)(v, 0, std::ptr::null(), &mut s) },
                "hsa_signal_create",
            );
            s
        };
        let lanes = std::array::from_fn(|l| {
            let agent = l / 2;
            let mut queue = std::ptr::null_mut();
            // SAFETY: a GPU agent; the hooked queue_create returns an intercepted queue.
            check(
                unsafe {
                    core!(api, hsa_queue_create_fn)(
                        agents[agent],
                        64,
                        HSA_QUEUE_TYPE_MULTI,
                        None,
                        std::ptr::null_mut(),
                        u32::MAX,
                        u32::MAX,
                        &mut queue,
                    )
                },
                "hsa_queue_create",
            );
            let a = alloc(coarse[agent], N * 4).cast::<u32>();
            let e = alloc(coarse[agent], N * 4).cast::<u32>();
            let k = l as u32 + 1;
            let kernarg_of = |words: [u64; 2]| {
                let p = alloc(kernarg, 16).cast::<u64>();
                // SAFETY: a fresh 16-byte kernarg allocation (host memory).
                unsafe { p.cast::<[u64; 2]>().write(words) };
                p.cast::<c_void>()
            };
            Lane {
                queue,
                agent,
                a,
                e,
                ka_replayed: kernarg_of([a as u64, N as u64 | u64::from(k) << 32]),
                ka_inc: kernarg_of([e as u64, N as u64]),
                ka_sleep: kernarg_of([1, 0]),
                ka_empty: kernarg_of([0, 0]),
                k,
                fence: signal(1),
            }
        });
        Harness {
            signals: (0..MAX_PACKETS).map(|_| signal(1)).collect(),
            gates: std::array::from_fn(|_| signal(1)),
            done: signal(0),
            junk: Box::new([0x5a5a_5a5a_5a5a_5a5a; 64]),
            staging: alloc(fine, N * 4).cast::<u32>(),
            api,
            kernels,
            hit_counter,
            lanes,
            serial: Mutex::new(()),
        }
    }

    fn store(&self, s: hsa_signal_t, v: i64) {
        // SAFETY: a live signal.
        unsafe { core!(self.api, hsa_signal_store_screlease_fn)(s, v) }
    }

    fn load(&self, s: hsa_signal_t) -> i64 {
        // SAFETY: a live signal.
        unsafe { core!(self.api, hsa_signal_load_scacquire_fn)(s) }
    }

    /// Waits until `s` is 0; panics (a hang) past `HANG`.
    fn wait_zero(&self, s: hsa_signal_t, what: &str) {
        let end = Instant::now() + HANG;
        loop {
            // SAFETY: a live signal; a bounded wait.
            let v = unsafe {
                core!(self.api, hsa_signal_wait_scacquire_fn)(
                    s,
                    HSA_SIGNAL_CONDITION_EQ,
                    0,
                    ticks(Duration::from_millis(50)),
                    HSA_WAIT_STATE_BLOCKED,
                )
            };
            if v == 0 {
                return;
            }
            assert!(
                Instant::now() < end,
                "hang: {what} still {v} after {HANG:?}"
            );
        }
    }

    fn copy(&self, dst: *mut c_void, src: *const c_void, bytes: usize) {
        // SAFETY: both are live allocations of at least `bytes` bytes.
        check(
            unsafe { core!(self.api, hsa_memory_copy_fn)(dst, src, bytes) },
            "hsa_memory_copy",
        );
    }

    fn read_buffer(&self, from: *const u32) -> Vec<u32> {
        self.copy(self.staging.cast(), from.cast(), N * 4);
        // SAFETY: the staging buffer holds N u32 (host memory).
        unsafe { std::slice::from_raw_parts(self.staging, N) }.to_vec()
    }

    fn write_buffer(&self, to: *mut u32, data: &[u32]) {
        // SAFETY: the staging buffer holds N u32 (host memory).
        unsafe { std::slice::from_raw_parts_mut(self.staging, N) }.copy_from_slice(data);
        self.copy(to.cast(), self.staging.cast(), N * 4);
    }

    fn read_counter(&self, agent: usize) -> u32 {
        let mut v = 0u32;
        self.copy(
            (&mut v as *mut u32).cast(),
            self.hit_counter[agent].cast(),
            4,
        );
        v
    }
}

/// The table the shim tool was handed in `OnLoad`.
fn shim_table() -> *mut HsaApiTable {
    let path = CString::new(env!("FUZZ_SHIM")).unwrap();
    // SAFETY: the shim is loaded already (HSA_TOOLS_LIB); RTLD_NOLOAD only finds it.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!handle.is_null(), "the table shim was not loaded as a tool");
    // SAFETY: a live handle and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(handle, c"rocprof_replay_fuzz_table".as_ptr()) };
    assert!(!sym.is_null(), "the table shim has no table slot");
    // SAFETY: the shim's `void*` that OnLoad stored (with release) before hsa_init returned.
    let table = unsafe {
        (*sym.cast::<std::sync::atomic::AtomicPtr<HsaApiTable>>()).load(Ordering::Acquire)
    };
    assert!(!table.is_null(), "the shim's OnLoad did not run");
    table
}

fn agents(api: &Api) -> (Vec<hsa_agent_t>, hsa_agent_t) {
    struct Found<'a> {
        api: &'a Api,
        gpus: Vec<hsa_agent_t>,
        cpu: Option<hsa_agent_t>,
    }
    unsafe extern "C" fn each(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the `Found` below.
        let found = unsafe { &mut *data.cast::<Found<'_>>() };
        let mut device: hsa_device_type_t = 0;
        // SAFETY: HSA_AGENT_INFO_DEVICE writes a 4-byte enum.
        let st = unsafe {
            core!(found.api, hsa_agent_get_info_fn)(
                agent,
                HSA_AGENT_INFO_DEVICE,
                (&mut device as *mut u32).cast(),
            )
        };
        if st == HSA_STATUS_SUCCESS && device == HSA_DEVICE_TYPE_GPU {
            found.gpus.push(agent);
        } else if st == HSA_STATUS_SUCCESS && device == HSA_DEVICE_TYPE_CPU {
            found.cpu.get_or_insert(agent);
        }
        HSA_STATUS_SUCCESS
    }
    let mut found = Found {
        api,
        gpus: Vec::new(),
        cpu: None,
    };
    // SAFETY: the callback only touches `found`.
    check(
        unsafe {
            core!(api, hsa_iterate_agents_fn)(Some(each), (&mut found as *mut Found<'_>).cast())
        },
        "hsa_iterate_agents",
    );
    (found.gpus, found.cpu.expect("a CPU agent"))
}

/// The first allocatable global pool of `agent` with `flag` (and, when `alone`, without
/// KERNARG_INIT).
fn pool(api: &Api, agent: hsa_agent_t, flag: u32, alone: bool) -> hsa_amd_memory_pool_t {
    struct Search<'a> {
        api: &'a Api,
        flag: u32,
        alone: bool,
        found: Option<hsa_amd_memory_pool_t>,
    }
    unsafe extern "C" fn each(pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the `Search` below.
        let s = unsafe { &mut *data.cast::<Search<'_>>() };
        let info = s.api.amd(slots::amd_ext::MEMORY_POOL_GET_INFO);
        let (mut segment, mut flags, mut allowed) = (0u32, 0u32, false);
        // SAFETY: each attribute writes the documented type.
        let ok = unsafe {
            info(
                pool,
                HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
                (&mut segment as *mut u32).cast(),
            ) == HSA_STATUS_SUCCESS
                && info(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                    (&mut flags as *mut u32).cast(),
                ) == HSA_STATUS_SUCCESS
                && info(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                    (&mut allowed as *mut bool).cast(),
                ) == HSA_STATUS_SUCCESS
        };
        let kernarg = flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT != 0;
        if ok
            && allowed
            && segment == HSA_AMD_SEGMENT_GLOBAL
            && flags & s.flag != 0
            && !(s.alone && kernarg)
        {
            s.found.get_or_insert(pool);
        }
        HSA_STATUS_SUCCESS
    }
    let mut s = Search {
        api,
        flag,
        alone,
        found: None,
    };
    // SAFETY: the callback only touches `s`.
    check(
        unsafe {
            api.amd(slots::amd_ext::AGENT_ITERATE_MEMORY_POOLS)(
                agent,
                Some(each),
                (&mut s as *mut Search<'_>).cast(),
            )
        },
        "hsa_amd_agent_iterate_memory_pools",
    );
    s.found.expect("a memory pool")
}

fn load_kernels(api: &Api, agents: &[hsa_agent_t; 2]) -> hsa_executable_t {
    let code = std::fs::read(env!("FUZZ_KERNELS")).expect("the fuzz kernels were built");
    let mut reader = hsa_code_object_reader_t::default();
    let mut exe = hsa_executable_t::default();
    // SAFETY: a code object in memory that outlives the reader; plain out-pointers.
    unsafe {
        check(
            core!(api, hsa_code_object_reader_create_from_memory_fn)(
                code.as_ptr().cast(),
                code.len(),
                &mut reader,
            ),
            "hsa_code_object_reader_create_from_memory",
        );
        check(
            core!(api, hsa_executable_create_alt_fn)(
                HSA_PROFILE_FULL,
                HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &mut exe,
            ),
            "hsa_executable_create_alt",
        );
        for &agent in agents {
            check(
                core!(api, hsa_executable_load_agent_code_object_fn)(
                    exe,
                    agent,
                    reader,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                ),
                "hsa_executable_load_agent_code_object",
            );
        }
        check(
            core!(api, hsa_executable_freeze_fn)(exe, std::ptr::null()),
            "hsa_executable_freeze",
        );
    }
    exe
}

fn symbol(
    api: &Api,
    exe: hsa_executable_t,
    agent: hsa_agent_t,
    name: &str,
) -> hsa_executable_symbol_t {
    let cname = CString::new(name).unwrap();
    let mut sym = hsa_executable_symbol_t::default();
    // SAFETY: a frozen executable, a NUL-terminated name, an out-pointer.
    check(
        unsafe {
            core!(api, hsa_executable_get_symbol_by_name_fn)(exe, cname.as_ptr(), &agent, &mut sym)
        },
        "hsa_executable_get_symbol_by_name",
    );
    sym
}

fn kernel(api: &Api, exe: hsa_executable_t, agent: hsa_agent_t, name: &str) -> u64 {
    let sym = symbol(api, exe, agent, &format!("{name}.kd"));
    let mut object = 0u64;
    // SAFETY: KERNEL_OBJECT writes a u64.
    check(
        unsafe {
            core!(api, hsa_executable_symbol_get_info_fn)(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                (&mut object as *mut u64).cast(),
            )
        },
        "KERNEL_OBJECT",
    );
    object
}

fn variable(api: &Api, exe: hsa_executable_t, agent: hsa_agent_t, name: &str) -> *mut c_void {
    let sym = symbol(api, exe, agent, name);
    let mut address = 0u64;
    // SAFETY: VARIABLE_ADDRESS writes a u64.
    check(
        unsafe {
            core!(api, hsa_executable_symbol_get_info_fn)(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
                (&mut address as *mut u64).cast(),
            )
        },
        "VARIABLE_ADDRESS",
    );
    address as *mut c_void
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(Harness::new)
}

// ---- one scenario -------------------------------------------------------------------------

/// Packets published with one doorbell store on one lane.
struct Batch {
    lane: usize,
    /// The first packet's header is published later, by the helper thread.
    late: bool,
    packets: Vec<Built>,
}

/// A packet ready to write, and what it means for the checks.
struct Built {
    bytes: aql_packet_t,
    signal: Option<hsa_signal_t>,
    /// What executing it does to the lane buffers.
    effect: Effect,
}

#[derive(Clone, Copy)]
enum Effect {
    /// `stress_replayed` over the first `items` elements.
    Replayed {
        items: usize,
    },
    /// `inc_in_place` over the first `items` elements (and the module counter).
    Inc {
        items: usize,
    },
    None,
}

fn header(ty: u32, h: HeaderBits) -> u16 {
    // Fence scopes from the input (3 is reserved), the barrier bit, the high reserved bits.
    (ty as u16) | u16::from(h.barrier) << 8 | u16::from(h.bits) << 9
}

impl Harness {
    /// Turns the scenario into packets (signals assigned in submission order).
    fn build(&self, s: &Scenario) -> Vec<Batch> {
        let mut used = 0usize;
        // Completion signals of earlier packets, in submission order, with their lane.
        let mut earlier: Vec<(usize, Option<hsa_signal_t>)> = Vec::new();
        let mut steps = Vec::new();
        for step in s.steps.iter().take(MAX_STEPS) {
            let lane = step.lane % LANES;
            let mut batch = Vec::new();
            for p in step.packets.iter().take(MAX_BATCH) {
                let want_signal = match *p {
                    Packet::Dispatch { signal, .. }
                    | Packet::BarrierAnd { signal, .. }
                    | Packet::BarrierOr { signal, .. }
                    | Packet::Vendor { signal, .. }
                    | Packet::AgentDispatch { signal }
                    | Packet::Reserved { signal, .. } => signal,
                };
                let signal = (want_signal && used < MAX_PACKETS).then(|| {
                    used += 1;
                    self.signals[used - 1]
                });
                let dep = |d: Dep| -> hsa_signal_t {
                    match d {
                        Dep::None => hsa_signal_t::default(),
                        Dep::Done => self.done,
                        Dep::Gate(g) => self.gates[usize::from(g) % GATES],
                        Dep::Earlier(k) => {
                            let k = usize::from(k);
                            match earlier.len().checked_sub(k + 1).map(|i| earlier[i]) {
                                Some((l, Some(sig))) if !s.threaded || l == lane => sig,
                                _ => hsa_signal_t::default(),
                            }
                        }
                        // Not a signal (hsa-emu reports it and treats it as satisfied); a
                        // low handle could alias a real signal, so keep it out of the heap.
                        Dep::Bogus(x) => hsa_signal_t {
                            handle: x | 0x8000_0000_0000_0000,
                        },
                    }
                };
                let completion = signal.unwrap_or_default();
                let mut bytes = aql_packet_t {
                    bytes: [0; AQL_PACKET_SIZE],
                };
                let mut effect = Effect::None;
                match *p {
                    Packet::Dispatch {
                        kernel,
                        geometry,
                        plan,
                        header: h,
                        ..
                    } => {
                        let l = &self.lanes[lane];
                        let ks = self.kernels[l.agent];
                        let (object, kernarg, real) = match kernel {
                            Kernel::Replayed => (ks.replayed, l.ka_replayed, Some(true)),
                            Kernel::Inc => (ks.inc, l.ka_inc, Some(false)),
                            Kernel::Empty => (ks.empty, l.ka_empty, None),
                            Kernel::Sleep => (ks.sleep, l.ka_sleep, None),
                            Kernel::Garbage(g) => {
                                let object = match g {
                                    Garbage::Null => 0,
                                    Garbage::Misaligned => ks.replayed + 8,
                                    Garbage::Heap => self.junk.as_ptr() as u64 + 64,
                                    Garbage::NonCanonical(x) => x | 0x8000_0000_0000_0000,
                                };
                                (object, l.ka_empty, None)
                            }
                        };
                        let garbage = matches!(kernel, Kernel::Garbage(_));
                        let mut d = hsa_kernel_dispatch_packet_t {
                            header: header(HSA_PACKET_TYPE_KERNEL_DISPATCH, h),
                            setup: 1,
                            workgroup_size_x: WG,
                            workgroup_size_y: 1,
                            workgroup_size_z: 1,
                            grid_size_x: u32::from(WG),
                            grid_size_y: 1,
                            grid_size_z: 1,
                            private_segment_size: plan.encode(),
                            group_segment_size: 0,
                            kernel_object: object,
                            kernarg_address: kernarg,
                            completion_signal: completion,
                            ..Default::default()
                        };
                        let valid = match geometry {
                            Geometry::Valid { groups } => {
                                d.grid_size_x = u32::from(WG) * (u32::from(groups % 6) + 1);
                                true
                            }
                            Geometry::ZeroDimensions => {
                                d.setup = 0;
                                false
                            }
                            Geometry::ZeroWorkgroup => {
                                d.workgroup_size_x = 0;
                                false
                            }
                            Geometry::TooMuchGroupMemory => {
                                d.group_segment_size = 1 << 20;
                                false
                            }
                        };
                        if valid && !garbage {
                            let items = (d.grid_size_x as usize).min(N);
                            effect = match real {
                                Some(true) => Effect::Replayed { items },
                                Some(false) => Effect::Inc { items },
                                None => Effect::None,
                            };
                        }
                        // SAFETY: both are 64-byte plain-data packets.
                        bytes = unsafe {
                            std::mem::transmute::<hsa_kernel_dispatch_packet_t, aql_packet_t>(d)
                        };
                    }
                    Packet::BarrierAnd {
                        deps, header: h, ..
                    } => {
                        let b = hsa_barrier_and_packet_t {
                            header: header(HSA_PACKET_TYPE_BARRIER_AND, h),
                            dep_signal: deps.map(dep),
                            completion_signal: completion,
                            ..Default::default()
                        };
                        // SAFETY: both are 64-byte plain-data packets.
                        bytes = unsafe {
                            std::mem::transmute::<hsa_barrier_and_packet_t, aql_packet_t>(b)
                        };
                    }
                    Packet::BarrierOr {
                        deps, header: h, ..
                    } => {
                        let b = hsa_barrier_or_packet_t {
                            header: header(HSA_PACKET_TYPE_BARRIER_OR, h),
                            dep_signal: deps.map(dep),
                            completion_signal: completion,
                            ..Default::default()
                        };
                        // SAFETY: both are 64-byte plain-data packets.
                        bytes = unsafe {
                            std::mem::transmute::<hsa_barrier_or_packet_t, aql_packet_t>(b)
                        };
                    }
                    Packet::Vendor {
                        format,
                        watch,
                        cond,
                        mask,
                        mut value,
                        ..
                    } => {
                        // Any vendor format but PM4 (1): a PM4 packet is an application's own
                        // counter window, after which the GPU's dispatches are declined
                        // (`vendor_packets`) for the rest of the process.
                        let format = [0u8, 2, 3][usize::from(format % 3)];
                        let cond = u32::from(cond % 6);
                        // Every watched signal ends at 0 (or is not a signal): the condition
                        // must hold for 0, or the packet would wait forever (an application
                        // bug, not the interceptor's).
                        let masked = 0; // (0 & mask)
                        match cond {
                            HSA_SIGNAL_CONDITION_EQ => value = masked,
                            HSA_SIGNAL_CONDITION_NE if value == masked => value = masked + 1,
                            HSA_SIGNAL_CONDITION_LT if value <= masked => value = masked + 1,
                            HSA_SIGNAL_CONDITION_GTE if value > masked => value = masked,
                            _ => {}
                        }
                        let b = hsa_amd_barrier_value_packet_t {
                            header: hsa_amd_vendor_packet_header_t {
                                header: HSA_PACKET_TYPE_VENDOR_SPECIFIC as u16 | 1 << 8,
                                AmdFormat: format as _,
                                reserved: 0,
                            },
                            signal: dep(watch),
                            value,
                            mask,
                            cond,
                            completion_signal: completion,
                            ..Default::default()
                        };
                        // SAFETY: both are 64-byte plain-data packets.
                        bytes = unsafe {
                            std::mem::transmute::<hsa_amd_barrier_value_packet_t, aql_packet_t>(b)
                        };
                    }
                    Packet::AgentDispatch { .. } => {
                        let h = HSA_PACKET_TYPE_AGENT_DISPATCH as u16 | 1 << 8;
                        bytes.bytes[..2].copy_from_slice(&h.to_le_bytes());
                        bytes.bytes[PACKET_COMPLETION_SIGNAL_OFFSET..][..8]
                            .copy_from_slice(&completion.handle.to_le_bytes());
                    }
                    Packet::Reserved { ty, .. } => {
                        let ty = 6 + u16::from(ty % 250);
                        bytes.bytes[..2].copy_from_slice(&(ty | 1 << 8).to_le_bytes());
                        bytes.bytes[PACKET_COMPLETION_SIGNAL_OFFSET..][..8]
                            .copy_from_slice(&completion.handle.to_le_bytes());
                    }
                }
                earlier.push((lane, signal));
                batch.push(Built {
                    bytes,
                    signal,
                    effect,
                });
            }
            if !batch.is_empty() {
                steps.push(Batch {
                    lane,
                    late: step.late,
                    packets: batch,
                });
            }
        }
        steps
    }
}

/// Work for the helper threads.
enum Job {
    /// Release the gates after `delay`.
    Gates {
        delay: Duration,
        done: mpsc::Sender<()>,
    },
    /// Publish a header.
    Late(Late),
    /// Reply once every earlier job of this thread is done.
    Flush(mpsc::Sender<()>),
    /// Submit this thread's lane's batches, in order.
    Submit {
        batches: Arc<Vec<Batch>>,
        done: mpsc::Sender<()>,
    },
}

/// The helper threads: the gate releaser, the late publisher, one submitter per lane.
struct Workers {
    releaser: mpsc::Sender<Job>,
    publisher: mpsc::Sender<Job>,
    lanes: Vec<mpsc::Sender<Job>>,
}

fn workers() -> &'static Workers {
    static W: OnceLock<Workers> = OnceLock::new();
    W.get_or_init(|| {
        let h = harness();
        let spawn = |name: String, lane: Option<usize>| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    for job in rx {
                        match job {
                            Job::Gates { delay, done } => {
                                std::thread::sleep(delay);
                                for g in &h.gates {
                                    h.store(*g, 0);
                                }
                                let _ = done.send(());
                            }
                            Job::Late(late) => h.publish_late(late),
                            Job::Flush(done) => {
                                let _ = done.send(());
                            }
                            Job::Submit { batches, done } => {
                                let lane = lane.expect("a lane submitter");
                                for b in batches.iter().filter(|b| b.lane == lane) {
                                    h.submit(b, &workers().publisher);
                                }
                                let _ = done.send(());
                            }
                        }
                    }
                })
                .expect("spawning a helper thread");
            tx
        };
        Workers {
            releaser: spawn("fuzz-gates".into(), None),
            publisher: spawn("fuzz-late".into(), None),
            lanes: (0..LANES)
                .map(|l| spawn(format!("fuzz-lane-{l}"), Some(l)))
                .collect(),
        }
    })
}

/// A header the helper thread publishes later.
struct Late {
    lane: usize,
    index: u64,
    word: u32,
}

impl Harness {
    fn queue(&self, lane: usize) -> &hsa_queue_t {
        // SAFETY: the lane's queue lives for the process.
        unsafe { &*self.lanes[lane].queue }
    }

    fn slot(&self, lane: usize, index: u64) -> *mut aql_packet_t {
        let q = self.queue(lane);
        let mask = u64::from(q.size) - 1;
        // SAFETY: the index is masked into the ring.
        unsafe {
            q.base_address
                .cast::<aql_packet_t>()
                .add((index & mask) as usize)
        }
    }

    fn ring(&self, lane: usize, index: u64) {
        self.store(self.queue(lane).doorbell_signal, index as i64);
    }

    /// Writes a batch as an AQL producer does: reserve the slots, wait for room, write each
    /// body, publish each header (release), one doorbell store for all.
    fn submit(&self, b: &Batch, late: &mpsc::Sender<Job>) {
        let q = self.lanes[b.lane].queue;
        let n = b.packets.len() as u64;
        // SAFETY: a live queue.
        let first = unsafe { core!(self.api, hsa_queue_add_write_index_scacq_screl_fn)(q, n) };
        let size = u64::from(self.queue(b.lane).size);
        let end = Instant::now() + HANG;
        // SAFETY: a live queue.
        while first + n - 1 - unsafe { core!(self.api, hsa_queue_load_read_index_scacquire_fn)(q) }
            >= size
        {
            assert!(
                Instant::now() < end,
                "hang: no room in lane {} for {HANG:?}",
                b.lane
            );
            std::thread::yield_now();
        }
        for (j, p) in b.packets.iter().enumerate() {
            let index = first + j as u64;
            let slot = self.slot(b.lane, index).cast::<u8>();
            let word = u32::from_le_bytes(p.bytes.bytes[..4].try_into().unwrap());
            // SAFETY: the slot is reserved for us and free (room checked); the body goes
            // first, then header and setup with release, as the AQL protocol requires.
            unsafe {
                std::ptr::copy_nonoverlapping(p.bytes.bytes.as_ptr().add(4), slot.add(4), 60);
            }
            if j == 0 && b.late {
                late.send(Job::Late(Late {
                    lane: b.lane,
                    index,
                    word,
                }))
                .expect("the late publisher runs");
            } else {
                // SAFETY: as above; the header word is 4-byte aligned in the ring.
                unsafe { AtomicU32::from_ptr(slot.cast()).store(word, Ordering::Release) };
            }
        }
        self.ring(b.lane, first + n - 1);
    }

    fn publish_late(&self, job: Late) {
        std::thread::sleep(Duration::from_micros(300));
        let slot = self.slot(job.lane, job.index);
        // SAFETY: the submitter left this reserved slot's header INVALID for us.
        unsafe { AtomicU32::from_ptr(slot.cast()).store(job.word, Ordering::Release) };
        self.ring(job.lane, job.index);
    }

    /// Runs one scenario and checks every invariant (panics on a violation).
    fn run(&self, s: &Scenario) {
        let batches = self.build(s);
        OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for sig in self.signals.iter().chain(&self.gates) {
            self.store(*sig, 1);
        }
        // Known contents, and what one execution of each valid dispatch makes of them.
        let mut want_a: Vec<Vec<u32>> = Vec::new();
        let mut want_e: Vec<Vec<u32>> = Vec::new();
        for (l, lane) in self.lanes.iter().enumerate() {
            let a: Vec<u32> = (0..N as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) ^ (l as u32) << 24)
                .collect();
            let e: Vec<u32> = (0..N as u32).collect();
            self.write_buffer(lane.a, &a);
            self.write_buffer(lane.e, &e);
            want_a.push(a);
            want_e.push(e);
        }
        let before = [self.read_counter(0), self.read_counter(1)];
        let mut incs = [0u32; 2];
        for b in &batches {
            let lane = &self.lanes[b.lane];
            for p in &b.packets {
                match p.effect {
                    Effect::Replayed { items } => {
                        for x in &mut want_a[b.lane][..items] {
                            *x = x.wrapping_mul(3).wrapping_add(lane.k);
                        }
                    }
                    Effect::Inc { items } => {
                        for x in &mut want_e[b.lane][..items] {
                            *x = x.wrapping_add(1);
                        }
                        incs[lane.agent] += 1;
                    }
                    Effect::None => {}
                }
            }
        }

        let gate_delay = Duration::from_millis(u64::from(s.gate_delay));
        // Helper threads live as long as the process (threads started per scenario would
        // leave thread-local allocations that LeakSanitizer reports after each input).
        let w = workers();
        let batches = Arc::new(batches);
        let (done, finished) = mpsc::channel();
        w.releaser
            .send(Job::Gates {
                delay: gate_delay,
                done: done.clone(),
            })
            .expect("the gate releaser runs");
        let mut pending = 1;
        if s.threaded {
            for lane in &w.lanes {
                lane.send(Job::Submit {
                    batches: batches.clone(),
                    done: done.clone(),
                })
                .expect("the lane submitter runs");
                pending += 1;
            }
        } else {
            for b in batches.iter() {
                self.submit(b, &w.publisher);
            }
        }
        for _ in 0..pending {
            finished
                .recv_timeout(HANG)
                .expect("hang: a submitter did not finish");
        }
        // Every late header is published (the submitters are done, so no new ones come).
        w.publisher
            .send(Job::Flush(done.clone()))
            .expect("the late publisher runs");
        finished
            .recv_timeout(HANG)
            .expect("hang: the late publisher did not finish");

        // A final barrier on every lane: once it completes, everything before it has.
        for (l, lane) in self.lanes.iter().enumerate() {
            self.store(lane.fence, 1);
            let fence = hsa_barrier_and_packet_t {
                header: packet_header(
                    HSA_PACKET_TYPE_BARRIER_AND,
                    true,
                    HSA_FENCE_SCOPE_SYSTEM,
                    HSA_FENCE_SCOPE_SYSTEM,
                ),
                completion_signal: lane.fence,
                ..Default::default()
            };
            let batch = Batch {
                lane: l,
                late: false,
                packets: vec![Built {
                    // SAFETY: both are 64-byte plain-data packets.
                    bytes: unsafe {
                        std::mem::transmute::<hsa_barrier_and_packet_t, aql_packet_t>(fence)
                    },
                    signal: None,
                    effect: Effect::None,
                }],
            };
            self.submit(&batch, &workers().publisher);
            self.wait_zero(lane.fence, "the final barrier");
        }
        let signals: Vec<hsa_signal_t> = batches
            .iter()
            .flat_map(|b| b.packets.iter().filter_map(|p| p.signal))
            .collect();
        for (i, sig) in signals.iter().enumerate() {
            self.wait_zero(*sig, &format!("completion signal of packet {i}"));
        }
        for (i, sig) in signals.iter().enumerate() {
            let v = self.load(*sig);
            assert_eq!(
                v, 0,
                "packet {i}: completion signal is {v}: not exactly one completion"
            );
        }
        for (l, lane) in self.lanes.iter().enumerate() {
            for (what, got, want) in [
                ("stress_replayed", self.read_buffer(lane.a), &want_a[l]),
                ("inc_in_place", self.read_buffer(lane.e), &want_e[l]),
            ] {
                if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
                    panic!(
                        "lane {l}: {what} buffer[{i}] = {}, want {}: not one execution per dispatch",
                        got[i], want[i]
                    );
                }
            }
        }
        for g in 0..2 {
            let grew = self.read_counter(g).wrapping_sub(before[g]);
            assert_eq!(
                grew, incs[g],
                "agent {g}: hit_counter grew by {grew} for {} inc_in_place dispatches",
                incs[g]
            );
        }
        let outcomes = std::mem::take(&mut *OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()));
        if std::env::var_os("FUZZ_VERBOSE").is_some() {
            let packets: usize = batches.iter().map(|b| b.packets.len()).sum();
            let mut kinds = std::collections::BTreeMap::<String, usize>::new();
            for e in &outcomes {
                *kinds
                    .entry(e.kind.reason_code().unwrap_or(e.kind.label()).to_owned())
                    .or_default() += 1;
            }
            eprintln!(
                "scenario: {} batches, {packets} packets, threaded={}, outcomes {kinds:?}",
                batches.len(),
                s.threaded
            );
        }
        for e in &outcomes {
            check_outcome(e);
        }
    }
}

fn check_outcome(
    &Ended {
        plan,
        kind,
        passes,
        known,
        run,
    }: &Ended,
) {
    let what = format!("plan {plan:?}: {kind:?} after {passes} passes, window of {run}");
    assert!(kind.failure().is_none(), "{what}: a failed outcome");
    match kind {
        OutcomeKind::Replayed => {
            assert!(
                !plan.panics(),
                "{what}: replayed although the policy panicked"
            );
            assert_eq!(
                plan.replayed_passes(),
                Some(passes),
                "{what}: not the planned passes"
            );
        }
        OutcomeKind::Skipped => {
            assert!(
                matches!(plan, Plan::Exactly(n) | Plan::UpTo(n, _) if n % 7 <= 1),
                "{what}: only a plan of at most one pass is skipped with on_end"
            );
            assert_eq!(passes, 1, "{what}");
        }
        OutcomeKind::Declined(reason) => {
            assert!(passes >= 1, "{what}: a declined dispatch still runs once");
            match reason {
                // A run ends for all its dispatches when one's policy panics: each says so.
                DeclineReason::PolicyPanicked => assert!(plan.panics() || run > 1, "{what}"),
                // A garbage kernel object: its arguments cannot be inspected while the
                // harness's fine-grained staging buffer exists.
                DeclineReason::HostMemory => assert!(!known, "{what}: a known kernel"),
                // The same while the other GPU owns allocations (checked first).
                DeclineReason::PeerMemory => assert!(!known, "{what}: a known kernel"),
                DeclineReason::TooManyPasses => assert_eq!(plan, Plan::TooMany, "{what}"),
                // Timing: windows of other lanes, drains behind gates or late headers.
                DeclineReason::LockTimeout
                | DeclineReason::LockContention
                | DeclineReason::DrainTimeout
                | DeclineReason::PassTimeout => {}
                other => panic!("{what}: unexpected decline {other:?}"),
            }
        }
        OutcomeKind::Failed(_) => unreachable!(),
    }
}

/// Runs one fuzz input (the fuzz target and the corpus regression tests).
pub fn run(data: &[u8]) {
    let scenario = Scenario::decode(data);
    let h = harness();
    let _one = h.serial.lock().unwrap_or_else(|e| e.into_inner());
    h.run(&scenario);
}
