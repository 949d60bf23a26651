//! `counters_tool`: hardware counters of every kernel dispatch, collected on replay passes.
//!
//! It asks for `SQ_WAVES`, `SQ_ITEMS`, `SQ_WAVES_EQ_64` and `GRBM_COUNT` (or the names in
//! `ROCPROF_REPLAY_METRICS`), validated once per GPU when the backend first sees it: an unknown
//! name is reported at load with the closest valid ones, and that GPU collects nothing. Each
//! dispatch runs once for the application (pass 0, no counters) and then once per counter pass
//! the set needs (on hsa-emu's limits of 2 SQ counters per pass: 2), from restored inputs. It
//! prints one line per dispatch in `on_end`:
//!
//! ```text
//! counters: vector_add #1: SQ_WAVES=256 (pass 1) SQ_ITEMS=16384 (pass 1) SQ_WAVES_EQ_64=256 (pass 2) GRBM_COUNT=... (pass 1)
//! ```
//!
//! Load it with `LD_PRELOAD=libcounters_tool.so` or `HSA_TOOLS_LIB=libcounters_tool.so`.

use std::sync::Arc;

use rocprof_replay::counters::{CounterCatalog, MetricSet, MetricSets, Metrics};
use rocprof_replay::{DispatchInfo, Outcome, PassPlan, ReplayPolicy, config, rocprof_tool};

/// What the tool asks for without `ROCPROF_REPLAY_METRICS`.
pub const DEFAULT_METRICS: &[&str] = &["SQ_WAVES", "SQ_ITEMS", "SQ_WAVES_EQ_64", "GRBM_COUNT"];

/// The tool: one metric set per GPU.
#[rocprof_tool(new = Counters::from_env)]
pub struct Counters {
    sets: MetricSets,
}

impl Counters {
    /// The metrics of `ROCPROF_REPLAY_METRICS`, or [`DEFAULT_METRICS`].
    pub fn from_env() -> Counters {
        let names = config::var(config::METRICS)
            .map(|m| config::metric_names(&m))
            .unwrap_or_else(|| DEFAULT_METRICS.iter().map(|s| s.to_string()).collect());
        Counters {
            sets: MetricSets::new(names),
        }
    }

    /// The line `on_end` prints for a dispatch.
    pub fn line(info: &DispatchInfo, outcome: &Outcome) -> String {
        let mut line = format!("counters: {} #{}:", info.kernel(), info.dispatch_id);
        match &outcome.metrics {
            Metrics::Values(values) => {
                for (name, v) in values.iter() {
                    // NVIDIA's metrics are floating point (`gpu_value`); AMD's are counts.
                    if values.is_floating() {
                        line += &format!(" {name}={} (pass {})", v.gpu_value, v.pass);
                    } else {
                        line += &format!(" {name}={} (pass {})", v.value, v.pass);
                    }
                }
            }
            Metrics::Absent(why) => line += &format!(" no values ({why})"),
            Metrics::NotAsked => line += " no values (no metric set for this GPU)",
        }
        line
    }
}

impl ReplayPolicy for Counters {
    type State = ();
    type PassState = ();

    /// One pass of its own (the application's); the engine adds the counter passes.
    fn pass_count(&self, _: &DispatchInfo) -> PassPlan<Self> {
        PassPlan::exactly(1, ())
    }

    fn on_agent(&self, agent: u32, counters: Result<&CounterCatalog, &str>) {
        match counters {
            Ok(catalog) => match self.sets.validate(agent, catalog) {
                Ok(set) => eprintln!("counters: GPU {agent}: {set}"),
                Err(e) => eprintln!("counters: GPU {agent}: {e}"),
            },
            Err(why) => eprintln!("counters: GPU {agent} offers no counters: {why}"),
        }
    }

    fn metrics(&self, info: &DispatchInfo) -> Option<Arc<MetricSet>> {
        self.sets.get(info.agent_index)
    }

    fn on_end(&self, info: &DispatchInfo, _: (), outcome: &Outcome) {
        println!("{}", Counters::line(info, outcome));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocprof_replay::testing::{dispatch, simulate, simulate_with_counters};

    fn gfx90a() -> CounterCatalog {
        CounterCatalog::new("gfx90a")
            .block("SQ", 2)
            .block("GRBM", 2)
            .counter("SQ_WAVES", "SQ", 4)
            .counter("SQ_ITEMS", "SQ", 14)
            .counter("SQ_WAVES_EQ_64", "SQ", 6)
            .counter("GRBM_COUNT", "GRBM", 0)
    }

    fn tool(names: &[&str]) -> Counters {
        Counters {
            sets: MetricSets::new(names.iter().copied()),
        }
    }

    #[test]
    fn the_default_set_needs_two_counter_passes_after_the_applications() {
        let t = tool(DEFAULT_METRICS);
        t.on_agent(0, Ok(&gfx90a()));
        let mut memory = vec![0u8; 16];
        let value = |name: &str| match name {
            "SQ_WAVES" | "SQ_WAVES_EQ_64" => 256,
            "SQ_ITEMS" => 16384,
            _ => 7,
        };
        let info = dispatch("vector_add");
        let run = simulate_with_counters(&t, &info, &mut memory, |m| m[0] += 1, value);
        assert_eq!((run.kernel_runs, run.counter_passes), (3, 2));
        assert_eq!(memory[0], 1, "the application saw one execution");
        assert_eq!(
            Counters::line(&info, &run.outcome),
            "counters: vector_add #1: SQ_WAVES=256 (pass 1) SQ_ITEMS=16384 (pass 1) \
             SQ_WAVES_EQ_64=256 (pass 2) GRBM_COUNT=7 (pass 1)"
        );
    }

    #[test]
    fn an_unknown_name_leaves_the_gpu_without_a_set_and_dispatches_run_once() {
        let t = tool(&["SQ_WAVE"]);
        t.on_agent(0, Ok(&gfx90a()));
        assert!(t.sets.get(0).is_none());
        let mut memory = vec![0u8; 4];
        let run = simulate(&t, &dispatch("k"), &mut memory, |m| m[0] += 1);
        assert_eq!((run.kernel_runs, memory[0]), (1, 1));
        assert!(
            Counters::line(&dispatch("k"), &run.outcome).ends_with("no metric set for this GPU)")
        );
    }
}
