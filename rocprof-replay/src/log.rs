//! Logging: `tracing` events go to stderr, quiet by default; `ROCPROF_REPLAY_LOG` sets the
//! level (`error`, `warn`, `info`, `debug`, `trace`, or `off`).

use std::sync::Once;

use tracing_subscriber::fmt;

/// Installs the stderr subscriber once (unless the application installed its own).
pub(crate) fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let level = match std::env::var("ROCPROF_REPLAY_LOG")
            .as_deref()
            .map(str::trim)
        {
            Ok("trace") => Some(tracing::Level::TRACE),
            Ok("debug") => Some(tracing::Level::DEBUG),
            Ok("info") => Some(tracing::Level::INFO),
            Ok("warn") | Ok("warning") => Some(tracing::Level::WARN),
            Ok("off") | Ok("none") => None,
            // Quiet by default: errors only.
            _ => Some(tracing::Level::ERROR),
        };
        let Some(level) = level else { return };
        let subscriber = fmt()
            .with_writer(std::io::stderr)
            .with_max_level(level)
            .with_target(false)
            .with_ansi(false)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}
