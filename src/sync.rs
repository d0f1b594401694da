//! The one shim through which the runtime uses atomics and locks, so `loom` can model them
//! (`--features loom`, see `scripts/loom`). Nothing else in the crate imports `std::sync::atomic` directly.

#[cfg(feature = "loom")]
pub use loom::sync::atomic;
#[cfg(feature = "loom")]
pub use loom::sync::{Arc, Mutex, MutexGuard};

#[cfg(not(feature = "loom"))]
pub use std::sync::atomic;
#[cfg(not(feature = "loom"))]
pub use std::sync::{Arc, Mutex, MutexGuard};
