//! Test fixture for the end-to-end tests: a replay tool configured by environment variables.
//!
//! | variable | meaning |
//! |---|---|
//! | `E2E_PLAN` | `skip`, `exactly:N`, `upto:N` or `until` (default `exactly:3`) |
//! | `E2E_STOP_AFTER` | `should_continue` returns false once this many passes completed |
//! | `E2E_KERNEL` | only kernels whose name contains one of these comma-separated strings are replayed |
//! | `E2E_PANIC` | `new` (the constructor), `pass_count`, `on_pass:K`, `on_pass_end:K`, `should_continue` or `on_end`: panic there |
//! | `E2E_PANIC_KERNEL` | with `E2E_PANIC` (other than `new`): panic only in dispatches of kernels whose name contains this |
//! | `E2E_PASS_SLEEP_MS` | `on_pass` of the first pass sleeps this long (a window that lasts) |
//! | `E2E_AHEAD` | `1`: `passes_ahead` says yes (later passes may be queued ahead) |
//!
//! On every dispatch's end it prints `e2e_plan_tool: {json}` to stderr.

use rocprof_replay::{
    Context, DispatchInfo, Outcome, Pass, PassPlan, PassReport, ReplayPolicy, Service, rocprof_tool,
};

/// The fixture tool.
#[rocprof_tool]
pub struct PlanTool {
    plan: String,
    stop_after: Option<u32>,
    kernel: Option<String>,
    panic_at: Option<String>,
    panic_kernel: Option<String>,
    pass_sleep: std::time::Duration,
    ahead: bool,
    _timing: Context,
}

impl Default for PlanTool {
    fn default() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if var("E2E_PANIC").as_deref() == Some("new") {
            panic!("E2E_PANIC=new");
        }
        let timing = Context::new("e2e-timing", &[Service::DispatchTiming]);
        timing.start();
        PlanTool {
            plan: var("E2E_PLAN").unwrap_or_else(|| "exactly:3".into()),
            stop_after: var("E2E_STOP_AFTER").and_then(|v| v.parse().ok()),
            kernel: var("E2E_KERNEL"),
            panic_at: var("E2E_PANIC"),
            panic_kernel: var("E2E_PANIC_KERNEL"),
            pass_sleep: std::time::Duration::from_millis(
                var("E2E_PASS_SLEEP_MS")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            ahead: var("E2E_AHEAD").as_deref() == Some("1"),
            _timing: timing,
        }
    }
}

impl PlanTool {
    fn panics_at(&self, what: &str, info: &DispatchInfo) -> bool {
        self.panic_at.as_deref() == Some(what)
            && self
                .panic_kernel
                .as_deref()
                .is_none_or(|k| info.kernel().contains(k))
    }
}

/// Per-dispatch state: the callbacks seen, in order.
pub struct Seen(Vec<String>);

impl ReplayPolicy for PlanTool {
    type State = Seen;
    type PassState = Option<u32>;

    fn pass_count(&self, info: &DispatchInfo) -> PassPlan<Self> {
        if self.panics_at("pass_count", info) {
            panic!("E2E_PANIC=pass_count");
        }
        if let Some(k) = &self.kernel {
            if !k.split(',').any(|k| info.kernel().contains(k)) {
                return PassPlan::skip();
            }
        }
        let state = Seen(Vec::new());
        let n = |s: &str| s.parse::<u32>().unwrap_or(3);
        match self.plan.split_once(':') {
            Some(("exactly", v)) => PassPlan::exactly(n(v), state),
            Some(("upto", v)) => PassPlan::up_to(n(v), state),
            _ if self.plan == "until" => PassPlan::until(state),
            _ => PassPlan::skip(),
        }
    }

    /// The continue decision of the `upto` and `until` plans.
    fn should_continue(&self, info: &DispatchInfo, _: &Seen, completed: u32) -> bool {
        if self.panics_at("should_continue", info) {
            panic!("E2E_PANIC=should_continue");
        }
        self.stop_after.is_none_or(|n| completed < n)
    }

    fn on_pass(&self, pass: &mut Pass<'_>, seen: &mut Seen, scope: &mut Option<u32>) {
        if self.panics_at(&format!("on_pass:{}", pass.index()), pass.info()) {
            panic!("E2E_PANIC=on_pass");
        }
        if pass.index() == 0 {
            std::thread::sleep(self.pass_sleep);
        }
        assert!(scope.is_none(), "per-pass state leaked");
        *scope = Some(pass.index());
        seen.0.push(format!(
            "start {} id={}",
            pass.index(),
            pass.info().dispatch_id
        ));
    }

    fn on_pass_end(&self, pass: &PassReport<'_>, seen: &mut Seen, scope: &mut Option<u32>) {
        if self.panics_at(&format!("on_pass_end:{}", pass.index), pass.info) {
            panic!("E2E_PANIC=on_pass_end");
        }
        seen.0.push(format!("end {} scope={:?}", pass.index, scope));
    }

    fn passes_ahead(&self, _: &DispatchInfo) -> bool {
        self.ahead
    }

    fn on_end(&self, info: &DispatchInfo, seen: Seen, outcome: &Outcome) {
        if self.panics_at("on_end", info) {
            panic!("E2E_PANIC=on_end");
        }
        let line = serde_json::json!({
            "kernel": info.kernel(),
            "dispatch_id": info.dispatch_id.0,
            "outcome": outcome.kind.label(),
            "reason": outcome.kind.reason_code(),
            "passes": outcome.passes,
            "seen": seen.0,
        });
        eprintln!("e2e_plan_tool: {line}");
    }
}
