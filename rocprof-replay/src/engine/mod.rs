//! The vendor-neutral replay engine: allocation inventory, snapshot, the replay window and
//! outcome records. Nothing here knows HSA; backends implement [`window::ReplayTarget`].

pub(crate) mod inventory;
pub(crate) mod records;
pub(crate) mod snapshot;
pub(crate) mod window;
