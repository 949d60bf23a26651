//! Kernel replay for GPU profiling tools.
//!
//! A tool implements [`ReplayPolicy`]: for each kernel dispatch it decides how many passes to
//! run ([`PassPlan`]) and does its per-pass work in [`on_pass`](ReplayPolicy::on_pass) /
//! [`on_pass_end`](ReplayPolicy::on_pass_end). The engine snapshots the device memory the
//! kernel may touch, runs the dispatch that many times restoring memory between passes, and
//! lets the application see exactly one execution and one completion.
