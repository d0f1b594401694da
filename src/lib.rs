//! ZLink node runtime: lane runtime, actors and Spots, session binding, Location Store.

pub mod config;
pub mod runtime;
pub mod store;
pub mod sync;
