//! The one shim through which the runtime uses atomics and locks, so `loom` can model them
//! (`RUSTFLAGS="--cfg loom"`). Nothing else in the crate imports `std::sync::atomic` directly.

#[cfg(loom)]
pub use loom::sync::atomic;
#[cfg(loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard};

#[cfg(not(loom))]
pub use std::sync::atomic;
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex, MutexGuard};
