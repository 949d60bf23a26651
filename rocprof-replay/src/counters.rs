//! Hardware counters as typed metric sets: built once, validated against what an agent offers,
//! split into the passes the hardware needs, collected by the engine on passes of their own.
//!
//! How a tool uses them (the guide's "Hardware counters" chapter has a complete tool,
//! `examples/counters`):
//!
//! 1. The backend builds each GPU agent's [`CounterCatalog`] when it first sees the agent (the
//!    HSA backend at `OnLoad`, from the AQL profile extension: `validate_event` for each known
//!    counter, `get_info(BLOCK_COUNTERS)` for each block's limit; hsa-emu emulates it) and
//!    hands it to [`ReplayPolicy::on_agent`](crate::ReplayPolicy::on_agent). The tool builds its
//!    [`MetricSet`] there, once per agent: an unknown name is [`MetricError::Unknown`] naming
//!    the closest valid names (edit distance), a counter whose block holds none per pass is
//!    [`MetricError::NeverCollectable`]: errors at set-up, never a silent zero later.
//!    [`MetricSets`] keeps one set per agent for the tool.
//! 2. Per dispatch, [`ReplayPolicy::metrics`](crate::ReplayPolicy::metrics) returns the set to
//!    collect (or `None`). The engine runs the policy's own passes first — pass 0 is the
//!    application's own execution and never carries counters — and then
//!    [`MetricSet::pass_count`] counter passes, each from restored inputs, each with its own
//!    counter configuration around that pass only (HSA: a start packet, the pass's dispatch and a
//!    stop packet on the application's queue; values read after completion). Counter passes are
//!    not timed and not shown to `on_pass`/`on_pass_end`.
//! 3. [`Outcome::metrics`](crate::Outcome::metrics) hands the tool one value per metric, with
//!    the window pass it came from ([`Metrics::Values`]), or why there are none
//!    ([`Metrics::Absent`]): values of different passes are combined only when every pass
//!    started from restored inputs (every restore completed, no region skipped); otherwise
//!    they are absent, never a silent mix.
//!
//! The schedule: each metric goes into the first pass that still has room in its block, which
//! needs exactly `max over blocks of ceil(metrics of the block / its limit)` passes, the fewest
//! possible.
//!
//! An application that collects counters itself is not replayed (decline reason
//! `vendor_packets`): its own counter window would count every pass.
//!
//! ```
//! use rocprof_replay::counters::{CounterCatalog, MetricError, MetricSet};
//!
//! let gfx90a = CounterCatalog::new("gfx90a")
//!     .block("SQ", 2)
//!     .block("GRBM", 2)
//!     .counter("SQ_WAVES", "SQ", 4)
//!     .counter("SQ_ITEMS", "SQ", 14)
//!     .counter("SQ_WAVES_EQ_64", "SQ", 6)
//!     .counter("GRBM_COUNT", "GRBM", 0);
//! let set = MetricSet::new(&gfx90a, ["SQ_WAVES", "SQ_ITEMS", "SQ_WAVES_EQ_64", "GRBM_COUNT"])?;
//! assert_eq!(set.pass_count(), 2); // three SQ counters, two per pass
//!
//! let err = MetricSet::new(&gfx90a, ["SQ_WAVE"]).unwrap_err();
//! assert!(matches!(&err, MetricError::Unknown { suggestions, .. } if suggestions[0] == "SQ_WAVES"));
//! # Ok::<(), MetricError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// One counter an agent offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterInfo {
    /// Vendor name, e.g. `SQ_WAVES`.
    pub name: String,
    /// Hardware block, e.g. `SQ`.
    pub block: String,
    /// The counter's id (select value) in its block, e.g. 4.
    pub event: u32,
}

/// How many passes a vendor needs for a set of metrics, when the vendor decides that itself
/// (NVIDIA: CUPTI's profiler host API builds a configuration image for the set and says how
/// many passes it takes). A catalog with a scheduler ([`CounterCatalog::scheduled_by`]) does
/// not use per-block limits.
pub trait PassScheduler: Send + Sync + fmt::Debug {
    /// The passes that collect `names` together (at least 1), or why the set cannot be
    /// collected on this agent (e.g. the vendor rejects a sub-metric).
    fn passes(&self, names: &[&str]) -> Result<u32, String>;
}

/// What one agent offers: its counters and each block's counters per pass.
#[derive(Clone, Debug, Default)]
pub struct CounterCatalog {
    agent: String,
    counters: BTreeMap<String, CounterInfo>,
    limits: BTreeMap<String, u32>,
    scheduler: Option<Arc<dyn PassScheduler>>,
    /// Blocks whose metrics the backend computes from the dispatch itself (no counter pass).
    computed: std::collections::BTreeSet<String>,
    /// Why the vendor's counters are missing from this catalog (only computed metrics left).
    unavailable: Option<String>,
}

impl CounterCatalog {
    /// An empty catalog for the agent named `agent` (e.g. `gfx90a`).
    pub fn new(agent: impl Into<String>) -> CounterCatalog {
        CounterCatalog {
            agent: agent.into(),
            ..CounterCatalog::default()
        }
    }

    /// Declares a block that holds `per_pass` counters in one pass.
    pub fn block(mut self, name: impl Into<String>, per_pass: u32) -> CounterCatalog {
        self.limits.insert(name.into(), per_pass);
        self
    }

    /// Declares a counter `name` with id `event` in `block` (a later one of the same name
    /// replaces it). A block that was not declared holds no counters per pass.
    pub fn counter(
        mut self,
        name: impl Into<String>,
        block: impl Into<String>,
        event: u32,
    ) -> CounterCatalog {
        let name = name.into();
        self.counters.insert(
            name.clone(),
            CounterInfo {
                name,
                block: block.into(),
                event,
            },
        );
        self
    }

    /// Lets `scheduler` decide how many passes a set needs (instead of per-block limits).
    /// Such a catalog lists *base* metrics (e.g. NVIDIA's `sm__cycles_elapsed`): a set may name
    /// a base metric or a metric derived from one by suffixes (`sm__cycles_elapsed.avg`,
    /// `dram__bytes_read.sum.per_second`); the scheduler has the last word on the suffixes.
    /// The values of such a set are floating point ([`MetricValue::gpu_value`]), all
    /// labelled with the set's last pass (the vendor combines counters of every pass).
    pub fn scheduled_by(mut self, scheduler: Arc<dyn PassScheduler>) -> CounterCatalog {
        self.scheduler = Some(scheduler);
        self
    }

    /// Whether a vendor scheduler decides the passes ([`scheduled_by`](Self::scheduled_by)).
    pub fn is_scheduled(&self) -> bool {
        self.scheduler.is_some()
    }

    /// Declares that the metrics of `block` are computed by the backend from the dispatch
    /// itself (NVIDIA's `launch__*`: the launch configuration and the kernel's attributes),
    /// not counted by the hardware: in a scheduled set ([`scheduled_by`](Self::scheduled_by))
    /// they are not handed to the scheduler and need no counter pass of their own, and their
    /// values are labelled with pass 0, the application's own execution, whose configuration
    /// they describe ([`MetricSet::is_computed`]).
    pub fn computed_block(mut self, block: impl Into<String>) -> CounterCatalog {
        self.computed.insert(block.into());
        self
    }

    /// Whether the metric `name` (a catalog name) is computed by the backend
    /// ([`computed_block`](Self::computed_block)).
    pub fn is_computed(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|c| self.computed.contains(&c.block))
    }

    /// Records why the vendor's counters are missing from this catalog, which then lists only
    /// computed metrics (NVIDIA: CUPTI's profiler is unavailable, the `launch__*` metrics are
    /// still offered). A set that names another metric is
    /// [`MetricError::Unschedulable`] with this reason.
    pub fn without_counters(mut self, why: impl Into<String>) -> CounterCatalog {
        self.unavailable = Some(why.into());
        self
    }

    /// Why the vendor's counters are missing from this catalog
    /// ([`without_counters`](Self::without_counters)); `None`: they are not.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// The agent's name.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// Every declared block and its counters per pass, by name.
    pub fn blocks(&self) -> impl Iterator<Item = (&str, u32)> {
        self.limits.iter().map(|(b, n)| (b.as_str(), *n))
    }

    /// The counter named `name`, if the agent has it.
    pub fn get(&self, name: &str) -> Option<&CounterInfo> {
        self.counters.get(name)
    }

    /// Counters one pass can hold of `block` (0 for an unknown block).
    pub fn per_pass(&self, block: &str) -> u32 {
        self.limits.get(block).copied().unwrap_or(0)
    }

    /// Every counter, by name.
    pub fn counters(&self) -> impl Iterator<Item = &CounterInfo> {
        self.counters.values()
    }

    /// Up to `n` valid names closest to `name`: case-insensitive edit distance at most a third
    /// of the longer name (at least 2), nearest first, ties by name; names that contain `name`
    /// (or that it contains) count as distance 1.
    pub fn closest(&self, name: &str, n: usize) -> Vec<&str> {
        let wanted = name.to_ascii_uppercase();
        let mut scored: Vec<(usize, &str)> = self
            .counters
            .keys()
            .filter_map(|candidate| {
                let c = candidate.to_ascii_uppercase();
                let d = if !wanted.is_empty() && (c.contains(&wanted) || wanted.contains(&c)) {
                    edit_distance(&wanted, &c).min(1)
                } else {
                    edit_distance(&wanted, &c)
                };
                let limit = (wanted.len().max(c.len()) / 3).max(2);
                (d <= limit).then_some((d, candidate.as_str()))
            })
            .collect();
        scored.sort();
        scored.into_iter().take(n).map(|(_, s)| s).collect()
    }
}

/// Levenshtein distance between two strings (by `char`).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = (diag + usize::from(ca != *cb)).min(up + 1).min(row[j] + 1);
            diag = up;
        }
    }
    row[b.len()]
}

/// Why a metric set cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricError {
    /// No metrics were asked for.
    #[error("the metric set is empty")]
    Empty,
    /// The agent has no counter of that name.
    #[error("unknown metric `{name}` on {agent}{}", suggest(.suggestions))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The agent's name.
        agent: String,
        /// The closest valid names, nearest first (possibly none).
        suggestions: Vec<String>,
    },
    /// The counter exists, but its block holds no counters per pass on this agent.
    #[error(
        "metric `{name}` can never be collected on {agent}: block {block} holds no counters per pass"
    )]
    NeverCollectable {
        /// The metric.
        name: String,
        /// The agent's name.
        agent: String,
        /// Its block.
        block: String,
    },
    /// The same metric was asked for twice.
    #[error("metric `{name}` is listed twice")]
    Duplicate {
        /// The metric.
        name: String,
    },
    /// The vendor's scheduler cannot collect the set ([`PassScheduler`]).
    #[error("the metric set cannot be collected on {agent}: {reason}")]
    Unschedulable {
        /// The agent's name.
        agent: String,
        /// The vendor's reason.
        reason: String,
    },
}

fn suggest(s: &[String]) -> String {
    if s.is_empty() {
        "; no counter of the agent has a similar name".into()
    } else {
        format!("; did you mean {}?", s.join(", "))
    }
}

/// A metric's position in its [`MetricSet`], for lookups without the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricId(usize);

/// One metric of a set: the counter and the pass that collects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metric {
    /// The counter.
    pub counter: CounterInfo,
    /// Index of the pass that collects it (0-based).
    pub pass: u32,
}

/// The metrics a tool asks for, validated against one agent and split into passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricSet {
    agent: String,
    metrics: Vec<Metric>,
    passes: Vec<Vec<MetricId>>,
    /// Values are floating point, every one from the last pass (a vendor-scheduled set).
    float: bool,
    /// Per metric: computed by the backend from the dispatch
    /// ([`CounterCatalog::computed_block`]).
    computed: Vec<bool>,
}

impl MetricSet {
    /// Validates `names` against `catalog` and schedules them: each metric in the first pass
    /// with room in its block.
    pub fn new<I, S>(catalog: &CounterCatalog, names: I) -> Result<MetricSet, MetricError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        if let Some(scheduler) = &catalog.scheduler {
            return MetricSet::scheduled(catalog, scheduler.as_ref(), names);
        }
        let mut metrics: Vec<Metric> = Vec::new();
        // Per pass: counters used of each block.
        let mut used: Vec<BTreeMap<&str, u32>> = Vec::new();
        let mut passes: Vec<Vec<MetricId>> = Vec::new();
        for name in names {
            let name = name.as_ref();
            let Some(counter) = catalog.get(name) else {
                return Err(MetricError::Unknown {
                    name: name.to_owned(),
                    agent: catalog.agent.clone(),
                    suggestions: catalog
                        .closest(name, 3)
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                });
            };
            if metrics.iter().any(|m| m.counter.name == name) {
                return Err(MetricError::Duplicate {
                    name: name.to_owned(),
                });
            }
            let limit = catalog.per_pass(&counter.block);
            if limit == 0 {
                return Err(MetricError::NeverCollectable {
                    name: name.to_owned(),
                    agent: catalog.agent.clone(),
                    block: counter.block.clone(),
                });
            }
            let block = counter.block.as_str();
            let pass = match used
                .iter()
                .position(|u| u.get(block).copied().unwrap_or(0) < limit)
            {
                Some(p) => p,
                None => {
                    used.push(BTreeMap::new());
                    passes.push(Vec::new());
                    used.len() - 1
                }
            };
            *used[pass].entry(block).or_insert(0) += 1;
            passes[pass].push(MetricId(metrics.len()));
            metrics.push(Metric {
                counter: counter.clone(),
                pass: pass as u32,
            });
        }
        if metrics.is_empty() {
            return Err(MetricError::Empty);
        }
        Ok(MetricSet {
            agent: catalog.agent.clone(),
            computed: vec![false; metrics.len()],
            metrics,
            passes,
            float: false,
        })
    }

    /// A set whose passes the vendor decides: names are checked against the catalog's base
    /// metrics, the scheduler gives the number of passes, and every metric is labelled with
    /// the last one.
    fn scheduled<I, S>(
        catalog: &CounterCatalog,
        scheduler: &dyn PassScheduler,
        names: I,
    ) -> Result<MetricSet, MetricError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut metrics: Vec<Metric> = Vec::new();
        let mut computed: Vec<bool> = Vec::new();
        for name in names {
            let name = name.as_ref();
            if metrics.iter().any(|m| m.counter.name == name) {
                return Err(MetricError::Duplicate {
                    name: name.to_owned(),
                });
            }
            let (base, suffix) = match name.split_once('.') {
                Some((b, s)) => (b, Some(s)),
                None => (name, None),
            };
            let Some(known) = catalog.get(name).or_else(|| catalog.get(base)) else {
                let suggestions: Vec<String> = catalog
                    .closest(base, 3)
                    .into_iter()
                    .map(|b| match suffix {
                        Some(s) => format!("{b}.{s}"),
                        None => b.to_owned(),
                    })
                    .collect();
                if let Some(why) = &catalog.unavailable
                    && suggestions.is_empty()
                {
                    // Not a typo of a metric offered: a counter this agent cannot collect now.
                    return Err(MetricError::Unschedulable {
                        agent: catalog.agent.clone(),
                        reason: format!("`{name}` is not offered: {why}"),
                    });
                }
                return Err(MetricError::Unknown {
                    name: name.to_owned(),
                    agent: catalog.agent.clone(),
                    suggestions,
                });
            };
            computed.push(catalog.computed.contains(&known.block));
            metrics.push(Metric {
                counter: CounterInfo {
                    name: name.to_owned(),
                    block: known.block.clone(),
                    event: known.event,
                },
                pass: 0,
            });
        }
        if metrics.is_empty() {
            return Err(MetricError::Empty);
        }
        // Computed metrics are the backend's: the vendor schedules the rest. A set of computed
        // metrics only still has one pass, the one after which the backend hands over values.
        let listed: Vec<&str> = metrics
            .iter()
            .zip(&computed)
            .filter(|(_, c)| !**c)
            .map(|(m, _)| m.counter.name.as_str())
            .collect();
        let count = if listed.is_empty() {
            1
        } else {
            scheduler
                .passes(&listed)
                .map_err(|reason| MetricError::Unschedulable {
                    agent: catalog.agent.clone(),
                    reason,
                })?
                .max(1)
        };
        for m in &mut metrics {
            m.pass = count - 1;
        }
        let mut passes = vec![Vec::new(); count as usize];
        passes[count as usize - 1] = (0..metrics.len()).map(MetricId).collect();
        Ok(MetricSet {
            agent: catalog.agent.clone(),
            metrics,
            passes,
            float: true,
            computed,
        })
    }

    /// Whether the values are floating point and the vendor decided the passes
    /// ([`CounterCatalog::scheduled_by`]).
    pub fn is_scheduled(&self) -> bool {
        self.float
    }

    /// The agent the set was validated for.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The metrics, in the order they were asked for.
    pub fn metrics(&self) -> &[Metric] {
        &self.metrics
    }

    /// How many passes collect the whole set.
    pub fn pass_count(&self) -> u32 {
        self.passes.len() as u32
    }

    /// The metrics pass `pass` collects (empty past the last pass).
    pub fn pass(&self, pass: u32) -> impl Iterator<Item = &Metric> {
        self.passes
            .get(pass as usize)
            .into_iter()
            .flatten()
            .map(|id| &self.metrics[id.0])
    }

    /// Whether the metric named `name` is computed by the backend from the dispatch itself
    /// (NVIDIA's `launch__*`, [`CounterCatalog::computed_block`]) rather than counted: it adds
    /// no pass ([`pass_count`](Self::pass_count) is the vendor's for the other metrics, or 1
    /// when there are none — the engine then runs no counter pass at all, and a dispatch the
    /// policy does not replay is not replayed for it), it is delivered with the last pass's
    /// values, and its [`MetricValue::pass`] is 0, the application's own execution, whose
    /// launch it describes.
    pub fn is_computed(&self, name: &str) -> bool {
        self.id(name).is_some_and(|id| self.computed[id.0])
    }

    /// Whether any metric of the set is counted by the hardware (not computed).
    pub fn has_counters(&self) -> bool {
        self.computed.iter().any(|c| !c)
    }

    /// The id of the metric named `name`, if the set has it.
    pub fn id(&self, name: &str) -> Option<MetricId> {
        self.metrics
            .iter()
            .position(|m| m.counter.name == name)
            .map(MetricId)
    }

    /// Values for one dispatch, in metric order, each `(value, pass it came from)`: `None` if
    /// their number is not the set's or a value claims another pass than the one scheduled.
    pub fn values(&self, values: Vec<MetricValue>) -> Option<MetricValues> {
        let fits = values.len() == self.metrics.len()
            && values
                .iter()
                .zip(&self.metrics)
                .all(|(v, m)| v.pass == m.pass);
        fits.then(|| MetricValues {
            names: self
                .metrics
                .iter()
                .map(|m| m.counter.name.clone())
                .collect(),
            values,
            floating: self.float,
        })
    }
}

impl MetricSet {
    /// The values of one dispatch from the counter passes' raw values (`per_pass[p]`: pass
    /// `p`'s values, in [`pass`](Self::pass) order), each labelled with the window pass it came
    /// from (`first_pass + p`). `None` when a pass's values do not match its metrics. For a
    /// scheduled set ([`is_scheduled`](Self::is_scheduled)) each raw value is the bit pattern
    /// of an `f64` ([`f64::to_bits`]); otherwise a count.
    pub(crate) fn values_from(
        &self,
        first_pass: u32,
        per_pass: &[Vec<u64>],
    ) -> Option<MetricValues> {
        if per_pass.len() != self.passes.len() {
            return None;
        }
        let mut values = vec![MetricValue::count(0, 0); self.metrics.len()];
        for (p, ids) in self.passes.iter().enumerate() {
            if per_pass[p].len() != ids.len() {
                return None;
            }
            for (id, v) in ids.iter().zip(&per_pass[p]) {
                // A computed metric describes the application's own execution, pass 0.
                let pass = if self.computed[id.0] {
                    0
                } else {
                    first_pass + p as u32
                };
                values[id.0] = if self.float {
                    MetricValue::real(f64::from_bits(*v), pass)
                } else {
                    MetricValue::count(*v, pass)
                };
            }
        }
        Some(MetricValues {
            names: self
                .metrics
                .iter()
                .map(|m| m.counter.name.clone())
                .collect(),
            values,
            floating: self.float,
        })
    }
}

/// The counters of one dispatch in its [`Outcome`](crate::Outcome).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Metrics {
    /// The policy asked for none.
    #[default]
    NotAsked,
    /// One value per metric, each with the window pass it came from.
    Values(MetricValues),
    /// The policy asked for a set but there are no values, and why (the record's
    /// `metrics_reason`), e.g. `not_restored: ...` or `counters_unavailable: ...`.
    Absent(String),
}

impl Metrics {
    /// The values, when collected.
    pub fn values(&self) -> Option<&MetricValues> {
        match self {
            Metrics::Values(v) => Some(v),
            _ => None,
        }
    }

    /// Why there are no values, when a set was asked for and none came.
    pub fn absent_reason(&self) -> Option<&str> {
        match self {
            Metrics::Absent(r) => Some(r),
            _ => None,
        }
    }
}

/// One [`MetricSet`] per agent for a tool that asks for the same metric names everywhere:
/// built in [`ReplayPolicy::on_agent`](crate::ReplayPolicy::on_agent), looked up in
/// [`ReplayPolicy::metrics`](crate::ReplayPolicy::metrics).
///
/// ```
/// use rocprof_replay::counters::{CounterCatalog, MetricSets};
///
/// let sets = MetricSets::new(["SQ_WAVES", "SQ_ITEMS"]);
/// let gfx90a = CounterCatalog::new("gfx90a").block("SQ", 2)
///     .counter("SQ_WAVES", "SQ", 4).counter("SQ_ITEMS", "SQ", 14);
/// assert_eq!(sets.validate(0, &gfx90a).unwrap().pass_count(), 1);
/// assert!(sets.get(0).is_some());
/// assert!(sets.get(1).is_none(), "agent 1 was never validated");
/// ```
#[derive(Debug, Default)]
pub struct MetricSets {
    names: Vec<String>,
    /// Per agent index (at most [`MetricSets::MAX_AGENTS`]).
    sets: Vec<OnceLock<Arc<MetricSet>>>,
}

impl MetricSets {
    /// Agents beyond this index get no set.
    pub const MAX_AGENTS: usize = 64;

    /// The names to ask for on every agent.
    pub fn new<I, S>(names: I) -> MetricSets
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MetricSets {
            names: names.into_iter().map(Into::into).collect(),
            sets: (0..Self::MAX_AGENTS).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The names asked for.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Builds the set for agent `agent` from its catalog (once; later calls return the first
    /// set).
    pub fn validate(
        &self,
        agent: u32,
        catalog: &CounterCatalog,
    ) -> Result<Arc<MetricSet>, MetricError> {
        let set = Arc::new(MetricSet::new(catalog, &self.names)?);
        match self.sets.get(agent as usize) {
            Some(slot) => Ok(slot.get_or_init(|| set).clone()),
            None => Ok(set),
        }
    }

    /// The set validated for agent `agent`, if any.
    pub fn get(&self, agent: u32) -> Option<Arc<MetricSet>> {
        self.sets.get(agent as usize)?.get().cloned()
    }
}

impl fmt::Display for MetricSet {
    /// `gfx90a: 4 metrics in 2 passes (SQ_WAVES@0, SQ_ITEMS@0, ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} metrics in {} passes (",
            self.agent,
            self.metrics.len(),
            self.passes.len()
        )?;
        for (i, m) in self.metrics.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}@{}", m.counter.name, m.pass)?;
        }
        f.write_str(")")
    }
}

/// One metric's value for one dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricValue {
    /// The value as a count: exact for counters (HSA); for a floating-point metric (NVIDIA's
    /// `sm__cycles_elapsed.avg`) [`gpu_value`](Self::gpu_value) rounded to the nearest
    /// integer (0 for a negative or non-finite one).
    pub value: u64,
    /// The pass it was collected in.
    pub pass: u32,
    /// The value as the vendor evaluates it: NVIDIA's metric value
    /// (`cuptiProfilerHostEvaluateToGpuValues`); for counters `value` as `f64`.
    pub gpu_value: f64,
}

impl MetricValue {
    /// A counter's value.
    pub fn count(value: u64, pass: u32) -> MetricValue {
        MetricValue {
            value,
            pass,
            gpu_value: value as f64,
        }
    }

    /// A floating-point metric's value ([`value`](Self::value) is it rounded).
    pub fn real(gpu_value: f64, pass: u32) -> MetricValue {
        let value = if gpu_value.is_finite() && gpu_value > 0.0 {
            gpu_value.round().min(u64::MAX as f64) as u64
        } else {
            0
        };
        MetricValue {
            value,
            pass,
            gpu_value,
        }
    }
}

/// The values of a [`MetricSet`] for one dispatch.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricValues {
    names: Vec<String>,
    values: Vec<MetricValue>,
    /// From a vendor-scheduled set: [`MetricValue::gpu_value`] is the value.
    floating: bool,
}

impl MetricValues {
    /// The value of the metric named `name`.
    pub fn get(&self, name: &str) -> Option<MetricValue> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| self.values[i])
    }

    /// The value of a metric by its id in the set these values belong to.
    pub fn by_id(&self, id: MetricId) -> Option<MetricValue> {
        self.values.get(id.0).copied()
    }

    /// Whether the values are floating point (a vendor-scheduled set, e.g. NVIDIA's): then
    /// [`MetricValue::gpu_value`] is the value and [`MetricValue::value`] it rounded.
    pub fn is_floating(&self) -> bool {
        self.floating
    }

    /// Every `(name, value)`, in the set's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, MetricValue)> {
        self.names
            .iter()
            .map(String::as_str)
            .zip(self.values.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters and limits hsa-emu emulates (its README), as the HSA backend will see them.
    fn emulated_gfx90a() -> CounterCatalog {
        CounterCatalog::new("gfx90a")
            .block("GRBM", 2)
            .block("SQ", 2)
            .block("SPI", 2)
            .counter("GRBM_COUNT", "GRBM", 0)
            .counter("GRBM_GUI_ACTIVE", "GRBM", 2)
            .counter("SQ_WAVES", "SQ", 4)
            .counter("SQ_WAVES_EQ_64", "SQ", 6)
            .counter("SQ_WAVES_LT_64", "SQ", 7)
            .counter("SQ_ITEMS", "SQ", 14)
            .counter("SPI_CSN_NUM_THREADGROUPS", "SPI", 49)
            .counter("SPI_CSN_WAVE", "SPI", 52)
            .counter("TCC_HIT", "TCC", 20) // a block without a per-pass limit
    }

    #[test]
    fn edit_distance_is_levenshtein() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("SQ_WAVE", "SQ_WAVES"), 1);
        assert_eq!(edit_distance("GRBM_CONT", "GRBM_COUNT"), 1);
    }

    #[test]
    fn a_set_that_fits_one_pass_has_one() {
        let c = emulated_gfx90a();
        let set = MetricSet::new(&c, ["SQ_WAVES", "GRBM_COUNT"]).unwrap();
        assert_eq!(set.pass_count(), 1);
        assert_eq!(set.pass(0).count(), 2);
        assert_eq!(set.pass(1).count(), 0);
        assert_eq!(set.agent(), "gfx90a");
    }

    #[test]
    fn passes_are_the_fewest_the_block_limits_allow() {
        let c = emulated_gfx90a();
        // SQ: 4 counters, 2 per pass -> 2 passes; GRBM: 2 -> 1; SPI: 1 -> 1.
        let set = MetricSet::new(
            &c,
            [
                "SQ_WAVES",
                "SQ_ITEMS",
                "GRBM_COUNT",
                "SQ_WAVES_EQ_64",
                "SPI_CSN_WAVE",
                "GRBM_GUI_ACTIVE",
                "SQ_WAVES_LT_64",
            ],
        )
        .unwrap();
        assert_eq!(set.pass_count(), 2);
        let pass_of = |n: &str| set.metrics()[set.id(n).unwrap().0].pass;
        assert_eq!(pass_of("SQ_WAVES"), 0);
        assert_eq!(pass_of("SQ_ITEMS"), 0);
        assert_eq!(pass_of("SQ_WAVES_EQ_64"), 1);
        assert_eq!(pass_of("SQ_WAVES_LT_64"), 1);
        // GRBM and SPI fill pass 0 first.
        assert_eq!(pass_of("GRBM_COUNT"), 0);
        assert_eq!(pass_of("GRBM_GUI_ACTIVE"), 0);
        assert_eq!(pass_of("SPI_CSN_WAVE"), 0);
        for p in 0..set.pass_count() {
            let sq = set.pass(p).filter(|m| m.counter.block == "SQ").count();
            assert!(sq <= 2, "pass {p} holds {sq} SQ counters");
        }
        assert_eq!(
            set.to_string(),
            "gfx90a: 7 metrics in 2 passes (SQ_WAVES@0, SQ_ITEMS@0, GRBM_COUNT@0, \
             SQ_WAVES_EQ_64@1, SPI_CSN_WAVE@0, GRBM_GUI_ACTIVE@0, SQ_WAVES_LT_64@1)"
        );
    }

    #[test]
    fn an_unknown_metric_names_the_closest_valid_ones() {
        let c = emulated_gfx90a();
        let err = MetricSet::new(&c, ["SQ_WAVES", "sq_wave"]).unwrap_err();
        let MetricError::Unknown {
            name, suggestions, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(name, "sq_wave");
        assert_eq!(suggestions[0], "SQ_WAVES");
        assert!(suggestions.len() <= 3);
        assert!(
            err.to_string()
                .starts_with("unknown metric `sq_wave` on gfx90a; did you mean SQ_WAVES"),
            "{err}"
        );
        let err = MetricSet::new(&c, ["GRBM_CONT"]).unwrap_err();
        assert!(err.to_string().contains("did you mean GRBM_COUNT"), "{err}");
        // Nothing close: says so instead of guessing.
        let err = MetricSet::new(&c, ["sm__cycles_elapsed.avg"]).unwrap_err();
        assert!(
            matches!(&err, MetricError::Unknown { suggestions, .. } if suggestions.is_empty()),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("no counter of the agent has a similar name")
        );
    }

    #[test]
    fn a_counter_that_can_never_be_collected_is_an_error_at_set_up() {
        let c = emulated_gfx90a();
        let err = MetricSet::new(&c, ["SQ_WAVES", "TCC_HIT"]).unwrap_err();
        assert_eq!(
            err,
            MetricError::NeverCollectable {
                name: "TCC_HIT".into(),
                agent: "gfx90a".into(),
                block: "TCC".into()
            }
        );
        assert_eq!(
            MetricSet::new(&c, Vec::<String>::new()).unwrap_err(),
            MetricError::Empty
        );
        assert_eq!(
            MetricSet::new(&c, ["SQ_WAVES", "SQ_WAVES"]).unwrap_err(),
            MetricError::Duplicate {
                name: "SQ_WAVES".into()
            }
        );
    }

    #[test]
    fn values_are_found_by_name_or_id_and_must_match_the_schedule() {
        let c = emulated_gfx90a();
        let set = MetricSet::new(&c, ["SQ_WAVES", "SQ_ITEMS", "SQ_WAVES_EQ_64"]).unwrap();
        let v = MetricValue::count;
        assert!(
            set.values(vec![v(256, 0), v(16384, 0)]).is_none(),
            "one missing"
        );
        assert!(
            set.values(vec![v(256, 0), v(16384, 1), v(256, 1)])
                .is_none(),
            "SQ_ITEMS was scheduled in pass 0"
        );
        let values = set
            .values(vec![v(256, 0), v(16384, 0), v(256, 1)])
            .expect("as scheduled");
        assert_eq!(values.get("SQ_ITEMS"), Some(v(16384, 0)));
        assert_eq!(values.get("GRBM_COUNT"), None);
        let id = set.id("SQ_WAVES_EQ_64").unwrap();
        assert_eq!(values.by_id(id), Some(v(256, 1)));
        assert_eq!(
            values.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            ["SQ_WAVES", "SQ_ITEMS", "SQ_WAVES_EQ_64"]
        );
    }

    /// A vendor scheduler that needs one pass per three metrics and rejects `.bogus` suffixes.
    #[derive(Debug)]
    struct ByThree(std::sync::Mutex<Vec<Vec<String>>>);

    impl PassScheduler for ByThree {
        fn passes(&self, names: &[&str]) -> Result<u32, String> {
            self.0
                .lock()
                .unwrap()
                .push(names.iter().map(|n| n.to_string()).collect());
            if let Some(bad) = names.iter().find(|n| n.ends_with(".bogus")) {
                return Err(format!("no sub-metric {bad}"));
            }
            Ok(names.len().div_ceil(3) as u32)
        }
    }

    #[test]
    fn a_scheduled_catalog_lets_the_vendor_decide_the_passes_and_labels_values_with_the_last() {
        let scheduler = Arc::new(ByThree(Default::default()));
        let c = CounterCatalog::new("GH100")
            .counter("sm__cycles_elapsed", "counter", 0)
            .counter("sm__inst_executed", "counter", 1)
            .counter("dram__bytes_read", "counter", 2)
            .counter("launch__grid_size", "counter", 3)
            .scheduled_by(scheduler.clone());
        assert!(c.is_scheduled());
        let names = [
            "sm__cycles_elapsed.avg",
            "sm__inst_executed.sum",
            "dram__bytes_read.sum",
            "launch__grid_size",
        ];
        let set = MetricSet::new(&c, names).unwrap();
        assert!(set.is_scheduled());
        assert_eq!(set.pass_count(), 2, "four metrics, three per pass");
        assert_eq!(
            scheduler.0.lock().unwrap().as_slice(),
            [names.map(String::from).to_vec()]
        );
        assert_eq!(set.pass(0).count(), 0);
        assert_eq!(
            set.pass(1)
                .map(|m| m.counter.name.as_str())
                .collect::<Vec<_>>(),
            names
        );
        // Raw values are f64 bits, labelled with the window pass of the set's last pass.
        let raw: Vec<u64> = [2.5e6, 1e9, 4096.0, 512.0].map(f64::to_bits).to_vec();
        let values = set.values_from(1, &[vec![], raw]).unwrap();
        assert!(values.is_floating());
        let cycles = values.get("sm__cycles_elapsed.avg").unwrap();
        assert_eq!(
            (cycles.gpu_value, cycles.value, cycles.pass),
            (2.5e6, 2_500_000, 2)
        );
        assert_eq!(values.get("launch__grid_size").unwrap().value, 512);
        assert_eq!(MetricValue::real(f64::NAN, 0).value, 0);
        assert_eq!(MetricValue::real(2.49, 0).value, 2);

        // An unknown base names the closest ones with the same suffix.
        let err = MetricSet::new(&c, ["sm__cycles_elapsd.avg"]).unwrap_err();
        assert!(
            matches!(&err, MetricError::Unknown { suggestions, .. }
                if suggestions[0] == "sm__cycles_elapsed.avg"),
            "{err:?}"
        );
        // The vendor's verdict on a suffix is an error at set-up, with its reason.
        let err = MetricSet::new(&c, ["sm__cycles_elapsed.bogus"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the metric set cannot be collected on GH100: no sub-metric sm__cycles_elapsed.bogus"
        );
        assert!(matches!(
            MetricSet::new(&c, ["launch__grid_size", "launch__grid_size"]),
            Err(MetricError::Duplicate { .. })
        ));
        // HSA sets are unchanged: counts, not floats.
        let hsa = MetricSet::new(&emulated_gfx90a(), ["SQ_WAVES"]).unwrap();
        assert!(!hsa.is_scheduled());
        let v = hsa.values_from(1, &[vec![256]]).unwrap();
        assert!(!v.is_floating());
        assert_eq!(v.get("SQ_WAVES"), Some(MetricValue::count(256, 1)));
    }
}
