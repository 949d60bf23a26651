//! `selective`: an example rocprof-replay tool that replays only the kernels you name.
//!
//! A dispatch is replayed `ROCPROF_REPLAY_PASSES` times when its kernel name matches the
//! regular expression `ROCPROF_REPLAY_KERNEL` ([`regex`] syntax, searched anywhere in the name:
//! anchor it with `^...$` for an exact match); every other dispatch gets [`PassPlan::skip`] and
//! runs the ordinary way, with no snapshot and no line. A kernel whose name is unknown never
//! matches. For each selected dispatch one line goes to stderr:
//!
//! ```text
//! selective: vector_add dispatch 3 on agent 0: replayed, 5 passes, no kernel times, snapshot 512 KiB in 0.21 ms, restores 0.80 ms
//! selective: vector_add dispatch 9 on agent 0: declined (over_budget), 1 pass
//! ```
//!
//! # Usage
//! ```text
//! cargo build --release -p rocprof-replay-example-selective
//! ROCPROF_REPLAY_KERNEL='^vector_(add|mul)$' LD_PRELOAD=target/release/libselective.so ./app
//! ROCPROF_REPLAY_KERNEL=gemm HSA_TOOLS_LIB=target/release/libselective.so ./app
//! ```
//!
//! | variable | effect |
//! |---|---|
//! | `ROCPROF_REPLAY_KERNEL` | regular expression for the kernel names to replay. Unset, blank, or invalid: a message on stderr at load and nothing is replayed |
//! | `ROCPROF_REPLAY_PASSES` | passes per selected dispatch, a positive integer (default 5); invalid: a message at load and the default |

use regex::Regex;
use rocprof_replay::{DispatchInfo, Outcome, PassPlan, ReplayPolicy, config};

/// Passes per selected dispatch when `ROCPROF_REPLAY_PASSES` is not set.
pub const DEFAULT_PASSES: u32 = 5;

/// The tool: replays the dispatches of matching kernels, skips the rest.
#[rocprof_replay::rocprof_tool(new = Selective::from_env)]
#[derive(Debug)]
pub struct Selective {
    /// `None`: nothing is replayed (no pattern, or an invalid one).
    pattern: Option<Regex>,
    passes: u32,
}

impl Selective {
    /// A tool replaying kernels that match `pattern` (none when `None`) `passes` times.
    pub fn new(pattern: Option<Regex>, passes: u32) -> Selective {
        Selective { pattern, passes }
    }

    /// A tool configured from the environment; problems are reported on stderr.
    pub fn from_env() -> Selective {
        let pattern = parse_pattern(config::var(config::KERNEL).as_deref()).unwrap_or_else(|e| {
            eprintln!("selective: {e}; no kernel is replayed");
            None
        });
        let passes = config::setting("selective", config::PASSES, DEFAULT_PASSES, config::passes);
        Selective::new(pattern, passes)
    }

    /// Whether dispatches of the kernel called `name` (`None`: unknown) are replayed.
    pub fn selects(&self, name: Option<&str>) -> bool {
        match (&self.pattern, name) {
            (Some(pattern), Some(name)) => pattern.is_match(name),
            _ => false,
        }
    }

    /// Passes per selected dispatch.
    pub fn passes(&self) -> u32 {
        self.passes
    }
}

/// Compiles the kernel-name pattern. Unset or blank is an error too: with no pattern nothing
/// would ever be replayed, which is worth saying.
pub fn parse_pattern(value: Option<&str>) -> Result<Option<Regex>, String> {
    let Some(text) = value else {
        return Err(format!("{} is not set", config::KERNEL));
    };
    Regex::new(text).map(Some).map_err(|e| {
        format!(
            "{}={text:?} is not a valid regular expression: {}",
            config::KERNEL,
            // The regex crate's message spans lines; keep the report on one.
            e.to_string()
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        )
    })
}

impl ReplayPolicy for Selective {
    type State = ();
    type PassState = ();

    fn pass_count(&self, info: &DispatchInfo) -> PassPlan<Self> {
        if self.selects(info.kernel_name.as_deref()) {
            PassPlan::exactly(self.passes, ())
        } else {
            PassPlan::skip()
        }
    }

    fn on_end(&self, info: &DispatchInfo, _: (), outcome: &Outcome) {
        eprintln!("{}", format_line(info, outcome));
    }
}

/// The report line of one selected dispatch (without a trailing newline).
pub fn format_line(info: &DispatchInfo, outcome: &Outcome) -> String {
    format!("selective: {info}: {outcome}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocprof_replay::{DeclineReason, DispatchId, OutcomeKind};

    fn info(name: Option<&str>) -> DispatchInfo {
        let mut info = rocprof_replay::testing::dispatch("");
        info.kernel_name = name.map(Into::into);
        info.agent_index = 1;
        info.dispatch_id = DispatchId(3);
        info
    }

    fn tool(pattern: &str) -> Selective {
        Selective::new(parse_pattern(Some(pattern)).unwrap(), 5)
    }

    #[test]
    fn matching_kernels_are_replayed_the_others_skipped() {
        let tool = tool("^vector_(add|mul)$");
        for name in ["vector_add", "vector_mul"] {
            assert!(matches!(
                tool.pass_count(&info(Some(name))),
                PassPlan::Exactly { passes: 5, .. }
            ));
        }
        for name in ["vector_add2", "vector_sub", "", "my_vector_add"] {
            assert!(matches!(tool.pass_count(&info(Some(name))), PassPlan::Skip));
        }
    }

    #[test]
    fn the_pattern_is_searched_not_anchored() {
        let tool = tool("add");
        assert!(tool.selects(Some("vector_add")));
        assert!(tool.selects(Some("add_one")));
        assert!(!tool.selects(Some("mul")));
    }

    #[test]
    fn unnamed_kernels_never_match() {
        let tool = tool(".*");
        assert!(tool.selects(Some("")));
        assert!(!tool.selects(None));
        assert!(matches!(tool.pass_count(&info(None)), PassPlan::Skip));
    }

    #[test]
    fn no_pattern_replays_nothing() {
        let tool = Selective::new(None, 5);
        assert!(!tool.selects(Some("vector_add")));
        assert!(matches!(
            tool.pass_count(&info(Some("vector_add"))),
            PassPlan::Skip
        ));
    }

    #[test]
    fn bad_or_missing_patterns_are_clear_errors() {
        let err = parse_pattern(Some("vector_(add")).unwrap_err();
        assert!(
            err.starts_with(
                "ROCPROF_REPLAY_KERNEL=\"vector_(add\" is not a valid regular expression:"
            ),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        assert!(parse_pattern(None).unwrap_err().contains("not set"));
    }

    #[test]
    fn the_pass_count_is_the_configured_one() {
        let tool = Selective::new(parse_pattern(Some("k")).unwrap(), 9);
        assert_eq!(tool.passes(), 9);
        assert!(matches!(
            tool.pass_count(&info(Some("k"))),
            PassPlan::Exactly { passes: 9, .. }
        ));
    }

    #[test]
    fn lines() {
        let mut outcome = rocprof_replay::testing::outcome(OutcomeKind::Replayed, 5);
        outcome.snapshot_bytes = 512 * 1024;
        outcome.restored_bytes = 4 * 512 * 1024;
        assert_eq!(
            format_line(&info(Some("vector_add")), &outcome),
            "selective: vector_add dispatch 3 on agent 1: replayed, 5 passes, no kernel times, \
             snapshot 512 KiB in 0.00 ms, restores 0.00 ms"
        );
        outcome.kind = OutcomeKind::Declined(DeclineReason::OverBudget);
        outcome.passes = 1;
        outcome.snapshot_bytes = 0;
        outcome.restored_bytes = 0;
        assert_eq!(
            format_line(&info(Some("vector_add")), &outcome),
            "selective: vector_add dispatch 3 on agent 1: declined (over_budget), 1 pass"
        );
    }
}
