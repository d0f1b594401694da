//! ZLink node runtime: lane runtime, actors and Spots, session binding, Location Store.

pub mod actor;
mod backlog;
pub mod clock;
pub mod config;
mod hashing;
pub mod node;
pub mod runtime;
pub mod session;
pub mod store;
pub mod sync;
