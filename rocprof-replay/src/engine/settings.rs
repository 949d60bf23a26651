//! Engine settings: deadlines and the snapshot budget, read once from the environment.
//!
//! | variable | default | bounds |
//! |---|---|---|
//! | `ROCPROF_REPLAY_BUDGET_MB` | half the available host memory | largest snapshot |
//! | `ROCPROF_REPLAY_DRAIN_TIMEOUT_MS` | 60000 | the agent going idle before a window |
//! | `ROCPROF_REPLAY_PASS_TIMEOUT_MS` | 120000 | one pass; a pass past it ends replay of the dispatch |
//! | `ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS` | 60000 | how much longer a late pass is waited for before the application is given its completion anyway (outcome `failed`) |
//! | `ROCPROF_REPLAY_LOCK_TIMEOUT_MS` | 60000 | taking the agent's lock; other work waiting longer cuts a window short |
//! | `ROCPROF_REPLAY_YIELD_MS` | 1000 | how long work the window holds up (CUDA: on another stream; HSA: a copy, or work of another queue) may wait while the window's first pass — the application's own execution — has not finished; past it the window gives up replaying that dispatch (its kernel may be waiting for that work). On CUDA also how long a replayed launch waits behind its thread's previous window on the same stream while that window's first pass has not finished; past it the launch runs without replay, behind that window |
//! | `ROCPROF_REPLAY_COPY_TIMEOUT_MS` | 60000 | one capture or restore |
//! | `ROCPROF_REPLAY_DEVICE_RESERVE_MB` | a tenth of the GPU's VRAM pool | VRAM the HSA backend's snapshot arena always leaves free ([`device_reserve_from_env`]) |
//! | `ROCPROF_REPLAY_DEVICE_KERNELS` | `on` | `on` or `off`: whether the HSA backend compares VRAM snapshots and fingerprints watched memory with its device kernels; `off`: the host reads memory back, as on a GPU without a code object ([`device_kernels_from_env`]) |
//! | `ROCPROF_REPLAY_RESTORE` | `auto` | `auto`, `strict` or `full`: the restore mode of dispatches whose policy leaves it to the engine ([`RestoreMode`]) |
//! | `ROCPROF_REPLAY_FOOTPRINT` | `arguments` | `arguments`, `verified`, `sampled` or `all`: what a snapshot captures — the allocations the dispatch's arguments point into, the agent's other allocations watched by fingerprints ([`footprint`](crate::engine::footprint)), or every allocation ([`FootprintMode`]) |
//! | `ROCPROF_REPLAY_RUN` | 16 | most dispatches one window covers: consecutive dispatches of one queue with nothing between them share one read of the watched memory and run their passes in turn ([runs](crate::engine::window#runs)); 1: a window per dispatch |
//! | `ROCPROF_REPLAY_HOST_MEMORY` | `decline` | `decline` or `repeat`: a dispatch whose arguments point into host-visible memory runs once (`host_memory`), or is replayed with its writes there repeated once per pass (recorded) |
//!
//! A value that is not a number (or not a mode) is ignored with a warning (the default
//! applies).

use std::time::Duration;

use crate::engine::snapshot::{GRANULE, MERGE_GAP};
use crate::policy::{FootprintMode, RestoreMode};

/// Deadlines and budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The agent going idle before a window.
    pub(crate) drain: Duration,
    /// One pass.
    pub(crate) pass: Duration,
    /// How much longer a pass that outlived `pass` is waited for.
    pub(crate) late_pass: Duration,
    /// Taking the agent's lock; also how long other work may wait for a window before the
    /// window is cut short.
    pub(crate) lock: Duration,
    /// How long work on another lane may wait for a window whose first pass has not finished
    /// before the window gives up replaying its dispatch
    /// ([`AgentLock::held_up`](crate::engine::agent::AgentLock::held_up)); also how long a
    /// drain waits for work that may be waiting for the dispatch the window holds.
    pub(crate) yield_after: Duration,
    /// CUDA: how long a window's drain may wait while the application thread waits inside its
    /// launch call before the launch is enqueued behind a closed gate and the call returns
    /// (`ROCPROF_REPLAY_CUDA_DEFER_US`, default [`DEFER_AFTER`]): the drain and the capture
    /// then finish behind it.
    pub(crate) defer_after: Duration,
    /// One capture or restore batch.
    pub(crate) copy: Duration,
    /// Largest snapshot in bytes.
    pub(crate) budget: u64,
    /// The restore mode when the policy says `Auto`.
    pub(crate) restore: RestoreMode,
    /// Granule of write-set restore ([`GRANULE`]; tests use smaller ones).
    pub(crate) granule: usize,
    /// Dirty ranges closer than this are restored as one ([`MERGE_GAP`]).
    pub(crate) merge_gap: usize,
    /// Replay dispatches whose arguments point into host-visible memory, repeating their
    /// writes there once per pass (`ROCPROF_REPLAY_HOST_MEMORY=repeat`), instead of declining
    /// them.
    pub(crate) repeat_host_writes: bool,
    /// What a snapshot captures when the policy leaves it to the engine
    /// (`ROCPROF_REPLAY_FOOTPRINT`, default `arguments`; never `Auto`).
    pub(crate) footprint: FootprintMode,
    /// Most dispatches one window covers (`ROCPROF_REPLAY_RUN`, 1 to [`MAX_RUN`], default
    /// [`DEFAULT_RUN`]; 1: a window per dispatch).
    pub(crate) run: u32,
    /// CUDA: how long a run waits for its thread's next launch after a member's first pass
    /// ([`RUN_WAIT`]; tests lengthen it).
    pub(crate) run_wait: Duration,
    /// Later passes of policies that allow it are queued ahead ([`ReplayPolicy::passes_ahead`];
    /// `ROCPROF_REPLAY_AHEAD=0` turns it off).
    ///
    /// [`ReplayPolicy::passes_ahead`]: crate::ReplayPolicy::passes_ahead
    pub(crate) ahead: bool,
}

/// How long a run waits for the next launch of its thread (CUDA): the launch call usually
/// waits already (its thread returned from the previous one before that pass ended).
pub(crate) const RUN_WAIT: Duration = Duration::from_micros(200);

/// How long a CUDA drain waits with the application thread inside its launch call before
/// the launch goes behind a closed gate and the call returns ([`Settings::defer_after`]).
pub(crate) const DEFER_AFTER: Duration = Duration::from_micros(1000);

/// Most dispatches one window may cover.
pub(crate) const MAX_RUN: u32 = 64;

/// Most dispatches one window covers unless asked otherwise: 96-98% of the launches of a
/// GPT-2 training step lie in runs of at least 16 (`docs/performance.md`).
pub(crate) const DEFAULT_RUN: u32 = 16;

impl Settings {
    /// Reads the settings from the environment.
    pub(crate) fn from_env() -> Settings {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `get` (the environment, or a test's map).
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Settings {
        let number = |name: &str| -> Option<u64> {
            let raw = get(name)?;
            match raw.trim().parse::<u64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    tracing::warn!(
                        "{name}={raw:?} is not a number of the expected unit; using the default"
                    );
                    None
                }
            }
        };
        let ms = |name: &str, default: u64| Duration::from_millis(number(name).unwrap_or(default));
        Settings {
            drain: ms("ROCPROF_REPLAY_DRAIN_TIMEOUT_MS", 60_000),
            pass: ms("ROCPROF_REPLAY_PASS_TIMEOUT_MS", 120_000),
            late_pass: ms("ROCPROF_REPLAY_LATE_PASS_TIMEOUT_MS", 60_000),
            lock: ms("ROCPROF_REPLAY_LOCK_TIMEOUT_MS", 60_000),
            yield_after: ms("ROCPROF_REPLAY_YIELD_MS", 1_000),
            defer_after: number("ROCPROF_REPLAY_CUDA_DEFER_US")
                .map_or(DEFER_AFTER, Duration::from_micros),
            copy: ms("ROCPROF_REPLAY_COPY_TIMEOUT_MS", 60_000),
            budget: number("ROCPROF_REPLAY_BUDGET_MB")
                .map(|mb| mb.saturating_mul(1 << 20))
                .unwrap_or_else(|| available_host_memory() / 2),
            repeat_host_writes: match get("ROCPROF_REPLAY_HOST_MEMORY").as_deref().map(str::trim) {
                None | Some("decline") => false,
                Some("repeat") => true,
                Some(raw) => {
                    tracing::warn!(
                        "ROCPROF_REPLAY_HOST_MEMORY={raw:?} is not decline or repeat; using decline"
                    );
                    false
                }
            },
            restore: match get("ROCPROF_REPLAY_RESTORE") {
                None => RestoreMode::Auto,
                Some(raw) => RestoreMode::parse(&raw).unwrap_or_else(|| {
                    tracing::warn!(
                        "ROCPROF_REPLAY_RESTORE={raw:?} is not auto, strict or full; using auto"
                    );
                    RestoreMode::Auto
                }),
            },
            footprint: match get("ROCPROF_REPLAY_FOOTPRINT") {
                None => FootprintMode::Arguments,
                Some(raw) => match FootprintMode::parse(&raw) {
                    Some(FootprintMode::Auto) => FootprintMode::Arguments,
                    Some(mode) => mode,
                    None => {
                        tracing::warn!(
                            "ROCPROF_REPLAY_FOOTPRINT={raw:?} is not arguments, verified, sampled \
                             or all; using arguments"
                        );
                        FootprintMode::Arguments
                    }
                },
            },
            run: number("ROCPROF_REPLAY_RUN")
                .map_or(DEFAULT_RUN, |n| n.clamp(1, u64::from(MAX_RUN)) as u32),
            run_wait: RUN_WAIT,
            ahead: match get("ROCPROF_REPLAY_AHEAD").as_deref().map(str::trim) {
                None | Some("1") => true,
                Some("0") => false,
                Some(raw) => {
                    tracing::warn!("ROCPROF_REPLAY_AHEAD={raw:?} is not 0 or 1; using 1");
                    true
                }
            },
            granule: GRANULE,
            merge_gap: MERGE_GAP,
        }
    }
}

/// `ROCPROF_REPLAY_DEVICE_RESERVE_MB` in bytes: the device memory the HSA backend's snapshot
/// arena leaves free (unset or not a number: `None`, the backend's default).
pub(crate) fn device_reserve_from_env() -> Option<u64> {
    let raw = std::env::var("ROCPROF_REPLAY_DEVICE_RESERVE_MB").ok()?;
    match raw.trim().parse::<u64>() {
        Ok(mb) => Some(mb.saturating_mul(1 << 20)),
        Err(_) => {
            tracing::warn!(
                "ROCPROF_REPLAY_DEVICE_RESERVE_MB={raw:?} is not a number of MiB; using the default"
            );
            None
        }
    }
}

/// `ROCPROF_REPLAY_DEVICE_KERNELS`: `false` for `off` (also `0`, `false`, `no`), `true`
/// otherwise (the default, `on`; an unknown value is ignored with a warning).
pub(crate) fn device_kernels_from_env() -> bool {
    let Ok(raw) = std::env::var("ROCPROF_REPLAY_DEVICE_KERNELS") else {
        return true;
    };
    match raw.trim().to_ascii_lowercase().as_str() {
        "off" | "0" | "false" | "no" => false,
        "on" | "1" | "true" | "yes" | "" => true,
        _ => {
            tracing::warn!("ROCPROF_REPLAY_DEVICE_KERNELS={raw:?} is neither on nor off; using on");
            true
        }
    }
}

/// Host memory available now, in bytes (1 GiB when the system cannot say).
fn available_host_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_AVPHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        pages as u64 * size as u64
    } else {
        1 << 30
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_and_values_override_them() {
        let s = Settings::from_lookup(|_| None);
        assert_eq!(s.drain, Duration::from_secs(60));
        assert_eq!(s.pass, Duration::from_secs(120));
        assert_eq!(s.copy, Duration::from_secs(60));
        assert!(s.budget > 0);
        assert_eq!(s.restore, RestoreMode::Auto);
        assert_eq!(s.granule, GRANULE);
        assert_eq!(s.defer_after, DEFER_AFTER);
        let defer = |v: &str| {
            Settings::from_lookup(|n| (n == "ROCPROF_REPLAY_CUDA_DEFER_US").then(|| v.into()))
                .defer_after
        };
        assert_eq!(
            (defer("0"), defer("250"), defer("soon")),
            (Duration::ZERO, Duration::from_micros(250), DEFER_AFTER)
        );
        assert_eq!(
            s.run, DEFAULT_RUN,
            "windows cover runs unless asked otherwise"
        );
        let run =
            |v: &str| Settings::from_lookup(|n| (n == "ROCPROF_REPLAY_RUN").then(|| v.into())).run;
        assert_eq!(
            (run("8"), run("1"), run("0"), run("100000"), run("many")),
            (8, 1, 1, MAX_RUN, DEFAULT_RUN)
        );
        assert_eq!(
            s.footprint,
            FootprintMode::Arguments,
            "the arguments footprint is the default"
        );
        let footprint = |v: &str| {
            Settings::from_lookup(|n| (n == "ROCPROF_REPLAY_FOOTPRINT").then(|| v.into())).footprint
        };
        assert_eq!(footprint("all"), FootprintMode::All);
        assert_eq!(footprint(" Sampled "), FootprintMode::Sampled);
        assert_eq!(footprint("verified"), FootprintMode::Verified);
        assert_eq!(footprint("auto"), FootprintMode::Arguments);
        assert_eq!(
            footprint("narrow"),
            FootprintMode::Arguments,
            "unknown: the default"
        );
        let s = Settings::from_lookup(|n| match n {
            "ROCPROF_REPLAY_PASS_TIMEOUT_MS" => Some(" 500 ".into()),
            "ROCPROF_REPLAY_BUDGET_MB" => Some("3".into()),
            "ROCPROF_REPLAY_LOCK_TIMEOUT_MS" => Some("soon".into()),
            "ROCPROF_REPLAY_RESTORE" => Some(" Strict".into()),
            _ => None,
        });
        assert_eq!(s.restore, RestoreMode::Strict);
        let bad = Settings::from_lookup(|n| (n == "ROCPROF_REPLAY_RESTORE").then(|| "fast".into()));
        assert_eq!(bad.restore, RestoreMode::Auto, "an unknown mode falls back");
        assert_eq!(s.pass, Duration::from_millis(500));
        assert_eq!(s.budget, 3 << 20);
        assert_eq!(
            s.lock,
            Duration::from_secs(60),
            "a malformed value falls back"
        );
    }
}
