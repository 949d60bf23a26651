//! The vendor-neutral replay engine: allocation inventory, snapshot, the replay window, outcome
//! records, settings and the process-wide engine state. Nothing here knows a backend;
//! backends implement [`window::ReplayTarget`] and hand dispatches to [`state::Engine`].

pub(crate) mod agent;
pub(crate) mod arena;
pub(crate) mod device_compare;
pub(crate) mod drain;
pub(crate) mod footprint;
pub(crate) mod gate;
pub(crate) mod inventory;
pub(crate) mod phases;
pub(crate) mod records;
pub(crate) mod settings;
pub(crate) mod snapshot;
pub(crate) mod state;
pub(crate) mod stored;
pub(crate) mod stuck;
pub(crate) mod window;
pub(crate) mod workers;
