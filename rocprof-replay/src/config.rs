//! Tool settings from `ROCPROF_REPLAY_*` environment variables: the shared names, parsers and
//! one way to report a bad value.
//!
//! The ready-made tools and the `rocprof-replay` command agree on these names, so a tool that
//! reads them is configured by the command's options (`--passes`, `--until-stable`,
//! `--kernel`, ...) too.
//!
//! ```
//! use rocprof_replay::config;
//!
//! // Unset or blank: the default. Invalid: a message on stderr and the default.
//! let passes = config::setting("my_tool", config::PASSES, 5, config::passes);
//! assert!(passes >= 1);
//!
//! assert_eq!(config::passes("8"), Ok(8));
//! assert_eq!(config::passes("0").unwrap_err().to_string(), "expected a positive integer");
//! assert_eq!(config::fraction("2%"), Ok(0.02));
//! assert_eq!(config::fraction("0.5"), Ok(0.5));
//! assert_eq!(config::index_list(" 3, 0 ,3"), Ok(vec![0, 3]));
//! ```

use std::fmt::Display;
use std::ops::RangeInclusive;

/// Passes per replayed dispatch (a positive integer).
pub const PASSES: &str = "ROCPROF_REPLAY_PASSES";
/// Target relative standard error of the kernel time (`2%` or `0.02`): replay until below it.
pub const TARGET_RSE: &str = "ROCPROF_REPLAY_TARGET_RSE";
/// Cap on passes of a replay that stops by itself.
pub const MAX_PASSES: &str = "ROCPROF_REPLAY_MAX_PASSES";
/// Regular expression: only kernels whose name matches are replayed.
pub const KERNEL: &str = "ROCPROF_REPLAY_KERNEL";
/// Regular expression: kernels whose name matches are not replayed.
pub const EXCLUDE: &str = "ROCPROF_REPLAY_EXCLUDE";
/// Dispatches of the selected kernels that run once, the ordinary way, before any is replayed
/// (a non-negative integer; see [`launch_skip`]).
pub const LAUNCH_SKIP: &str = "ROCPROF_REPLAY_LAUNCH_SKIP";
/// Most dispatches of the selected kernels replayed, counted after [`LAUNCH_SKIP`]; later
/// ones run once (a positive integer; see [`launch_count`]).
pub const LAUNCH_COUNT: &str = "ROCPROF_REPLAY_LAUNCH_COUNT";
/// Comma-separated hardware counter names to collect for every replayed dispatch
/// (`SQ_WAVES,SQ_ITEMS`; see [`metric_names`]).
pub const METRICS: &str = "ROCPROF_REPLAY_METRICS";
/// A file to which the SDK appends, when it is set, one JSON line per GPU agent with the
/// counters it offers (`{"gpu":0,"agent":"gfx90a","blocks":{"SQ":2},"counters":[["SQ_WAVES",
/// "SQ",4]]}`, or `{"gpu":0,"error":"..."}`): how `rocprof-replay list-metrics` and `run
/// --metrics` learn the catalog before the application runs.
pub const CATALOG: &str = "ROCPROF_REPLAY_CATALOG";
/// Comma-separated 0-based pass indices (the `user_state` example's timed passes).
pub const TIMED_PASSES: &str = "ROCPROF_REPLAY_TIMED_PASSES";

/// A value that does not parse: what was expected instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected {0}")]
pub struct Invalid(pub String);

impl Invalid {
    /// `expected {what}`.
    pub fn expected(what: impl Into<String>) -> Invalid {
        Invalid(what.into())
    }
}

/// The value of `name`: `None` when unset or blank; a non-UTF-8 value is passed on lossily,
/// so that it fails to parse rather than being ignored.
pub fn var(name: &str) -> Option<String> {
    let value = std::env::var_os(name)?.to_string_lossy().into_owned();
    (!value.trim().is_empty()).then_some(value)
}

/// The setting `name`, parsed with `parse`: `default` when unset or blank; when invalid, a
/// message `{tool}: {name}="{value}": expected ...; using the default ({default})` on stderr and
/// `default`.
pub fn setting<T: Display>(
    tool: &str,
    name: &str,
    default: T,
    parse: impl FnOnce(&str) -> Result<T, Invalid>,
) -> T {
    match try_setting(name, parse) {
        Ok(Some(value)) => value,
        Ok(None) => default,
        Err(message) => {
            eprintln!("{tool}: {message}; using the default ({default})");
            default
        }
    }
}

/// The setting `name`, parsed with `parse`: `Ok(None)` when unset or blank, or the message
/// `{name}="{value}": expected ...`.
pub fn try_setting<T>(
    name: &str,
    parse: impl FnOnce(&str) -> Result<T, Invalid>,
) -> Result<Option<T>, String> {
    let Some(text) = var(name) else {
        return Ok(None);
    };
    parse(text.trim())
        .map(Some)
        .map_err(|e| format!("{name}={text:?}: {e}"))
}

/// A positive integer.
pub fn passes(text: &str) -> Result<u32, Invalid> {
    match text.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Invalid::expected("a positive integer")),
    }
}

/// A non-negative integer (the value of [`LAUNCH_SKIP`]).
pub fn launch_skip(text: &str) -> Result<u64, Invalid> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| Invalid::expected("a non-negative integer"))
}

/// A positive integer (the value of [`LAUNCH_COUNT`]).
pub fn launch_count(text: &str) -> Result<u64, Invalid> {
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Invalid::expected("a positive integer")),
    }
}

/// An integer in `range`.
pub fn integer_in(text: &str, range: RangeInclusive<u32>) -> Result<u32, Invalid> {
    match text.trim().parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(Invalid::expected(format!(
            "an integer from {} to {}",
            range.start(),
            range.end()
        ))),
    }
}

/// A fraction strictly between 0 and 1, written as one (`0.02`) or as a percentage (`2%`).
pub fn fraction(text: &str) -> Result<f64, Invalid> {
    let invalid = || {
        Invalid::expected(
            "a fraction between 0 and 1 exclusive, such as 0.02, or a percentage such as 2%",
        )
    };
    let text = text.trim();
    let (number, scale) = match text.strip_suffix('%') {
        Some(percent) => (percent.trim(), 100.0),
        None => (text, 1.0),
    };
    let value = number.parse::<f64>().map_err(|_| invalid())? / scale;
    if value.is_finite() && value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(invalid())
    }
}

/// Comma-separated 0-based indices (spaces allowed), returned sorted and deduplicated; an empty
/// text is the empty list.
pub fn index_list(text: &str) -> Result<Vec<u32>, Invalid> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut indices = text
        .split(',')
        .map(|item| item.trim().parse::<u32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| Invalid::expected("a comma-separated list of pass indices, such as 0,2"))?;
    indices.sort_unstable();
    indices.dedup();
    Ok(indices)
}

/// Metric names from a list separated by commas, blanks or new lines; `#` starts a comment
/// that runs to the end of its line (the format of `--metrics-file`). Empty entries are
/// dropped.
///
/// ```
/// use rocprof_replay::config::metric_names;
/// assert_eq!(metric_names("SQ_WAVES, SQ_ITEMS"), ["SQ_WAVES", "SQ_ITEMS"]);
/// assert_eq!(metric_names("# waves\nSQ_WAVES\n\nGRBM_COUNT # clocks\n"), ["SQ_WAVES", "GRBM_COUNT"]);
/// ```
pub fn metric_names(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_are_positive_integers() {
        assert_eq!(passes(" 6 "), Ok(6));
        for bad in ["0", "-1", "x", "", "1.5"] {
            assert!(passes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn launch_skips_are_non_negative_and_launch_counts_positive() {
        assert_eq!(launch_skip(" 0 "), Ok(0));
        assert_eq!(launch_skip("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(launch_count("5000000000"), Ok(5_000_000_000));
        for bad in ["-1", "x", "", "1.5", "18446744073709551616"] {
            assert!(launch_skip(bad).is_err(), "{bad}");
        }
        assert_eq!(
            launch_count("0").unwrap_err().to_string(),
            "expected a positive integer"
        );
        assert_eq!(
            launch_skip("-1").unwrap_err().to_string(),
            "expected a non-negative integer"
        );
    }

    #[test]
    fn fractions_and_percentages() {
        assert_eq!(fraction("2%"), Ok(0.02));
        assert_eq!(fraction(" 2.5 % "), Ok(0.025));
        assert_eq!(fraction("0.1"), Ok(0.1));
        for bad in ["0", "1", "100%", "-1%", "abc", "nan", "inf"] {
            assert!(fraction(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn integers_in_a_range() {
        assert_eq!(integer_in("3", 3..=1000), Ok(3));
        assert_eq!(
            integer_in("2", 3..=1000).unwrap_err().to_string(),
            "expected an integer from 3 to 1000"
        );
    }

    #[test]
    fn index_lists() {
        assert_eq!(index_list(""), Ok(vec![]));
        assert_eq!(index_list("2"), Ok(vec![2]));
        assert_eq!(index_list(" 3, 0 ,3"), Ok(vec![0, 3]));
        for bad in ["1;2", "a", "1,,2", "-1", "1,"] {
            assert!(index_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_come_from_the_environment_and_name_the_variable() {
        // A variable no other test uses.
        let name = "ROCPROF_REPLAY_CONFIG_TEST_ONLY";
        // SAFETY: no other thread of this test binary reads or writes this variable.
        unsafe { std::env::remove_var(name) };
        assert_eq!(try_setting(name, passes), Ok(None));
        assert_eq!(setting("t", name, 5, passes), 5);
        // SAFETY: as above.
        unsafe { std::env::set_var(name, "7") };
        assert_eq!(setting("t", name, 5, passes), 7);
        // SAFETY: as above.
        unsafe { std::env::set_var(name, "zero") };
        assert_eq!(
            try_setting(name, passes).unwrap_err(),
            "ROCPROF_REPLAY_CONFIG_TEST_ONLY=\"zero\": expected a positive integer"
        );
        assert_eq!(setting("t", name, 5, passes), 5);
        // SAFETY: as above.
        unsafe { std::env::set_var(name, "  ") };
        assert_eq!(try_setting(name, passes), Ok(None));
        // SAFETY: as above.
        unsafe { std::env::remove_var(name) };
    }
}
