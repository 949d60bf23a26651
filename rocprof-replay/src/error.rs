//! Errors of the SDK.

use rocprof_replay_sys::{Status, TableError};

/// Everything that can go wrong while setting a tool up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another replay tool already owns kernel replay in this process.
    #[error("kernel replay is already configured by another tool in this process ({owner})")]
    ServiceAlreadyConfigured {
        /// Who owns it.
        owner: String,
    },
    /// The runtime handed over a table whose layout this SDK does not know.
    #[error("unsupported HSA API table: {0}")]
    UnsupportedTable(#[from] TableError),
    /// A runtime function the engine needs is missing from the table.
    #[error("the HSA runtime does not provide {0}")]
    MissingFunction(&'static str),
    /// A runtime call failed.
    #[error("{call} failed: {status}")]
    Runtime {
        /// The HSA function.
        call: &'static str,
        /// Its status.
        status: Status,
    },
    /// The tool's constructor panicked.
    #[error("the tool's constructor panicked: {0}")]
    ToolPanicked(String),
}
