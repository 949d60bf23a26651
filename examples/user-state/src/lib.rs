//! `user_state`: an example rocprof-replay tool that shows per-dispatch state, per-pass state,
//! and a context enabled on chosen passes only.
//!
//! Every dispatch is replayed `ROCPROF_REPLAY_PASSES` times. The tool owns a timing context
//! ([`Service::DispatchTiming`]) that is *not* started globally: at the start of each pass
//! listed in `ROCPROF_REPLAY_TIMED_PASSES` it enables the context for that pass only, with
//! [`Pass::enable`], and keeps the returned [`PassGuard`] in the per-pass state; the engine
//! drops the per-pass state when the pass ends, and with it the override. No pass has to undo
//! what an earlier one did.
//!
//! - The per-dispatch state ([`Record`]) collects events in order: `pass 0 start`,
//!   `pass 0 end timed=false`, ... and the indices of the passes that got a kernel time.
//! - The per-pass state ([`Scope`]) is fresh at each pass start, where its index is set to
//!   `Some(index)`, and checked at that pass's end. A violation is recorded as an event
//!   (`pass 1 start scope not fresh: Some(0)`, `pass 1 end scope mismatch: None`).
//!
//! When the dispatch ends, one line goes to stderr: `user_state: ` and a compact JSON object,
//!
//! ```text
//! user_state: {"kernel":"vector_add","dispatch_id":3,"passes":4,"outcome":"replayed","reason":null,"timed_passes":[2],"events":["pass 0 start","pass 0 end timed=false",...]}
//! ```
//!
//! `passes` is the number of passes that ran ([`Outcome::passes`]), `outcome`/`reason` the
//! outcome label and decline reason code.
//!
//! # Usage
//! ```text
//! cargo build --release -p rocprof-replay-example-user-state
//! ROCPROF_REPLAY_TIMED_PASSES=0,2 LD_PRELOAD=target/release/libuser_state.so ./app
//! HSA_TOOLS_LIB=target/release/libuser_state.so ./app
//! ```
//!
//! | variable | effect |
//! |---|---|
//! | `ROCPROF_REPLAY_PASSES` | passes per dispatch, a positive integer (default 4) |
//! | `ROCPROF_REPLAY_TIMED_PASSES` | comma-separated 0-based pass indices to time (default `2`; empty: none) |
//!
//! An invalid value is reported on stderr at load and the default is used.

use rocprof_replay::{
    Context, DispatchInfo, Outcome, Pass, PassGuard, PassPlan, PassReport, ReplayPolicy, Service,
    config,
};

/// Passes per dispatch when `ROCPROF_REPLAY_PASSES` is not set.
pub const DEFAULT_PASSES: u32 = 4;

/// Timed passes when `ROCPROF_REPLAY_TIMED_PASSES` is not set.
pub const DEFAULT_TIMED_PASSES: &[u32] = &[2];

/// The tool's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Passes per dispatch.
    pub passes: u32,
    /// 0-based indices of the passes with the timing context enabled, sorted, no duplicates.
    pub timed_passes: Vec<u32>,
}

/// Reads the settings from the environment; invalid values are reported on stderr and their
/// defaults are used.
pub fn config() -> Settings {
    let tool = "user_state";
    let passes = config::setting(tool, config::PASSES, DEFAULT_PASSES, config::passes);
    let timed_passes = parse_timed_passes(std::env::var(config::TIMED_PASSES).ok().as_deref())
        .unwrap_or_else(|message| {
            eprintln!("{tool}: {message}; using the default {DEFAULT_TIMED_PASSES:?}");
            DEFAULT_TIMED_PASSES.to_vec()
        });
    if let Some(beyond) = timed_passes.iter().find(|&&i| i >= passes) {
        eprintln!(
            "{tool}: {} names pass {beyond}, but only passes 0 to {} run",
            config::TIMED_PASSES,
            passes.saturating_sub(1)
        );
    }
    Settings {
        passes,
        timed_passes,
    }
}

/// Parses the timed pass list: `None` gives [`DEFAULT_TIMED_PASSES`], an empty value no pass,
/// otherwise comma-separated 0-based indices (spaces allowed), returned sorted and deduplicated.
pub fn parse_timed_passes(value: Option<&str>) -> Result<Vec<u32>, String> {
    match value {
        None => Ok(DEFAULT_TIMED_PASSES.to_vec()),
        Some(text) => {
            config::index_list(text).map_err(|e| format!("{}={text:?}: {e}", config::TIMED_PASSES))
        }
    }
}

/// The per-pass state: the pass index written at its start, and the timing override of a timed
/// pass (dropped, and so ended, with the pass).
#[derive(Debug, Default)]
pub struct Scope {
    /// `Some(index)` once `on_pass` of pass `index` ran.
    pub index: Option<u32>,
    /// The per-pass timing override; an empty guard on untimed passes.
    pub timing: PassGuard,
}

/// The per-dispatch state: what happened, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// `pass N start`, `pass N end timed=BOOL`, and any per-pass state violations.
    pub events: Vec<String>,
    /// Indices of the passes that got a kernel time.
    pub timed_passes: Vec<u32>,
}

/// The tool: replays every dispatch and times the chosen passes only.
#[rocprof_replay::rocprof_tool(new = UserState::from_env)]
#[derive(Debug)]
pub struct UserState {
    settings: Settings,
    /// Enabled per pass with a guard; never started globally.
    timing: Context,
}

impl UserState {
    /// A tool with these settings; its timing context is created stopped.
    pub fn new(settings: Settings) -> UserState {
        UserState {
            settings,
            timing: Context::new("user_state", &[Service::DispatchTiming]),
        }
    }

    /// A tool configured from the environment (see the crate docs).
    pub fn from_env() -> UserState {
        UserState::new(config())
    }

    /// The configuration.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The timing context (stopped outside replay loops).
    pub fn timing(&self) -> &Context {
        &self.timing
    }

    /// Whether pass `index` is timed.
    pub fn is_timed(&self, index: u32) -> bool {
        self.settings.timed_passes.binary_search(&index).is_ok()
    }
}

impl ReplayPolicy for UserState {
    type State = Record;
    type PassState = Scope;

    fn pass_count(&self, _info: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(self.settings.passes, Record::default())
    }

    fn on_pass(&self, pass: &mut Pass<'_>, record: &mut Record, scope: &mut Scope) {
        let index = pass.index();
        if self.is_timed(index) {
            // Ends when the engine drops `scope` at the end of this pass.
            scope.timing = pass.enable(&self.timing);
        }
        record.events.push(pass_start(index, &mut scope.index));
    }

    fn on_pass_end(&self, pass: &PassReport<'_>, record: &mut Record, scope: &mut Scope) {
        pass_end(record, pass.index, pass.kernel_time.is_some(), &scope.index);
    }

    fn on_end(&self, info: &DispatchInfo, record: Record, outcome: &Outcome) {
        eprintln!("user_state: {}", summary_json(info, &record, outcome));
    }
}

/// Per-pass state at pass start: checks it is fresh, writes `Some(index)`, and returns the
/// event to record (`pass N start`, with the violation if it was not fresh).
pub fn pass_start(index: u32, scope: &mut Option<u32>) -> String {
    let event = match scope {
        None => format!("pass {index} start"),
        Some(_) => format!("pass {index} start scope not fresh: {scope:?}"),
    };
    *scope = Some(index);
    event
}

/// Per-pass state at pass end: checks it still holds what [`pass_start`] wrote, and records
/// the pass's events and whether it was timed.
pub fn pass_end(record: &mut Record, index: u32, timed: bool, scope: &Option<u32>) {
    if *scope != Some(index) {
        record
            .events
            .push(format!("pass {index} end scope mismatch: {scope:?}"));
    }
    if timed {
        record.timed_passes.push(index);
    }
    record
        .events
        .push(format!("pass {index} end timed={timed}"));
}

/// The compact JSON object printed for one dispatch, keys in a fixed order: `kernel`,
/// `dispatch_id`, `passes`, `outcome`, `reason`, `timed_passes`, `events`.
pub fn summary_json(info: &DispatchInfo, record: &Record, outcome: &Outcome) -> String {
    use serde_json::{Value, json};
    // serde_json's map sorts keys; write the object by hand to keep a readable order.
    let fields: [(&str, Value); 7] = [
        ("kernel", json!(info.kernel())),
        ("dispatch_id", json!(info.dispatch_id.0)),
        ("passes", json!(outcome.passes)),
        ("outcome", json!(outcome.kind.label())),
        ("reason", json!(outcome.kind.reason_code())),
        ("timed_passes", json!(record.timed_passes)),
        ("events", json!(record.events)),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(key, value)| format!("{}:{value}", Value::from(*key)))
        .collect();
    format!("{{{}}}", body.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocprof_replay::{DeclineReason, DispatchId, OutcomeKind};
    use serde_json::{Value, json};

    fn info(name: Option<&str>) -> DispatchInfo {
        let mut info = rocprof_replay::testing::dispatch("");
        info.kernel_name = name.map(Into::into);
        info.dispatch_id = DispatchId(3);
        info
    }

    fn outcome(kind: OutcomeKind, passes: u32) -> Outcome {
        rocprof_replay::testing::outcome(kind, passes)
    }

    #[test]
    fn events_are_recorded_in_order_and_only_the_chosen_pass_is_timed() {
        let tool = UserState::new(Settings {
            passes: 4,
            timed_passes: vec![2],
        });
        assert!(!tool.timing().is_active(), "must not be started globally");
        let mut memory = vec![0u8; 8];
        let run =
            rocprof_replay::testing::simulate(&tool, &info(Some("k")), &mut memory, |m| m[0] += 1);
        assert_eq!((run.kernel_runs, run.completions, memory[0]), (4, 1, 1));
        let timed: Vec<bool> = run.outcome.pass_times.iter().map(Option::is_some).collect();
        assert_eq!(timed, [false, false, true, false]);
        assert!(
            !tool.timing().is_active(),
            "the override ended with its pass"
        );
    }

    #[test]
    fn per_pass_state_violations_are_recorded() {
        let mut scope = Some(0);
        assert_eq!(
            pass_start(1, &mut scope),
            "pass 1 start scope not fresh: Some(0)"
        );
        assert_eq!(scope, Some(1));
        let mut record = Record::default();
        pass_end(&mut record, 1, false, &None);
        assert_eq!(
            record.events,
            ["pass 1 end scope mismatch: None", "pass 1 end timed=false"]
        );
    }

    #[test]
    fn summary_is_one_line_of_json_with_the_documented_keys() {
        let record = Record {
            events: vec!["pass 0 start".into(), "pass 0 end timed=true".into()],
            timed_passes: vec![0],
        };
        let text = summary_json(
            &info(Some("vec\"add")),
            &record,
            &outcome(OutcomeKind::Replayed, 4),
        );
        assert!(!text.contains('\n'));
        assert!(
            text.starts_with(r#"{"kernel":"vec\"add","dispatch_id":3,"passes":4,"#),
            "{text}"
        );
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            json!({
                "kernel": "vec\"add",
                "dispatch_id": 3,
                "passes": 4,
                "outcome": "replayed",
                "reason": null,
                "timed_passes": [0],
                "events": ["pass 0 start", "pass 0 end timed=true"],
            })
        );
        let declined = summary_json(
            &info(None),
            &Record::default(),
            &outcome(OutcomeKind::Declined(DeclineReason::DrainTimeout), 1),
        );
        let value: Value = serde_json::from_str(&declined).unwrap();
        assert_eq!(value["kernel"], "<unknown>");
        assert_eq!(value["outcome"], "declined");
        assert_eq!(value["reason"], "drain_timeout");
        assert_eq!(value["events"], json!([]));
    }

    #[test]
    fn settings_parsing() {
        assert_eq!(parse_timed_passes(None), Ok(vec![2]));
        assert_eq!(parse_timed_passes(Some("")), Ok(vec![]));
        assert_eq!(parse_timed_passes(Some(" 3, 0 ,3")), Ok(vec![0, 3]));
        for bad in ["1;2", "a", "1,,2", "-1", "1,"] {
            let err = parse_timed_passes(Some(bad)).unwrap_err();
            assert!(err.contains(config::TIMED_PASSES), "{bad}: {err}");
        }
    }
}
