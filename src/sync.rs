//! The one shim through which the runtime uses atomics and locks, so `loom` can model them
//! (`--features loom`, see `scripts/loom`). Nothing else in the crate imports `std::sync::atomic` directly.

#[cfg(feature = "loom")]
pub use loom::sync::atomic;
#[cfg(feature = "loom")]
pub use loom::sync::{Mutex, MutexGuard};
// `Arc` for the loom models only: types that cross into non-loom callers come from `std`.
#[cfg(all(test, feature = "loom"))]
pub use loom::sync::Arc;

#[cfg(not(feature = "loom"))]
pub use std::sync::atomic;
#[cfg(not(feature = "loom"))]
pub use std::sync::{Mutex, MutexGuard};
