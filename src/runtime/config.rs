//! Configuration of the lane runtime: lane limits, the occupancy budget, worker counts and the
//! injected [`Clock`] its driver reads at handler boundaries.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};

/// Admission limits and the lane decision cap of one serial execution object (EG-7.1, EG-7.4).
/// Defaults are the spec's admission values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneLimits {
    /// Application lane item limit (default 1,024).
    pub application_items: usize,
    /// Application lane byte limit (default 64 MiB).
    pub application_bytes: u64,
    /// Lifecycle lane item limit (default 128).
    pub lifecycle_items: usize,
    /// Lifecycle lane byte limit (default 4 MiB).
    pub lifecycle_bytes: u64,
    /// Fixed retained cost reserved per work item on top of its payload (default 256 B).
    pub per_work_overhead: u64,
    /// Consecutive lifecycle turns before a yield debt (default 8).
    pub lifecycle_turn_cap: u32,
}

impl Default for LaneLimits {
    fn default() -> Self {
        LaneLimits {
            application_items: 1024,
            application_bytes: 64 << 20,
            lifecycle_items: 128,
            lifecycle_bytes: 4 << 20,
            per_work_overhead: 256,
            lifecycle_turn_cap: 8,
        }
    }
}

/// Configuration of a [`crate::runtime::Runtime`].
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Lane limits applied to every serial execution object.
    pub limits: LaneLimits,
    /// Owner occupancy / batch budget, checked at handler boundaries (EG-7.4, EG-9; default 10 ms).
    pub occupancy_budget: Duration,
    /// Application worker threads (default: available cores). Fixed; never per Spot (EG-10).
    pub application_workers: usize,
    /// Infrastructure worker threads (default 1): a separate progress domain (EG-1.1, EG-13).
    pub infrastructure_workers: usize,
    /// At most this many `defer()` registrations per handler (EG-5.6; default 16).
    pub max_defers_per_handler: usize,
    /// The clock read at handler boundaries.
    pub clock: Arc<dyn Clock>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            limits: LaneLimits::default(),
            occupancy_budget: Duration::from_millis(10),
            application_workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            infrastructure_workers: 1,
            max_defers_per_handler: 16,
            clock: Arc::new(SystemClock),
        }
    }
}

impl fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("limits", &self.limits)
            .field("occupancy_budget", &self.occupancy_budget)
            .field("application_workers", &self.application_workers)
            .field("infrastructure_workers", &self.infrastructure_workers)
            .field("max_defers_per_handler", &self.max_defers_per_handler)
            .finish_non_exhaustive()
    }
}
