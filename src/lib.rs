//! ZLink node runtime: lane runtime, actors and Spots, session binding, Location Store.
// Every type a public item names is exported (a private module's type is re-exported).
#![warn(unnameable_types)]

pub mod actor;
mod backlog;
pub mod clock;
pub mod config;
mod hashing;
pub mod node;
// The hand-off cores are public only for the tests' simulator (feature `testing`); what an
// application names of relocation (its configuration, reports, reasons) is re-exported by `node`.
#[cfg(feature = "testing")]
pub mod relocation;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports, unnameable_types)] // what the simulator alone reads
mod relocation;
pub mod runtime;
pub mod session;
pub mod store;
mod sync;
