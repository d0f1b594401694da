//! Store time: the clock a Location Store reads lease expiry against.
//!
//! Invariant: one store (all handles on one SQLite file, one Redis) reads one clock, so every
//! node agrees whether a lease is live. Production uses [`SystemClock`] (wall time, shared by all
//! processes of a machine); tests inject a [`ManualClock`] and move it explicitly, so lease expiry
//! never depends on sleeping.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sync::atomic::{AtomicU64, Ordering};

/// A point in store time: milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreTime(u64);

impl StoreTime {
    /// The epoch.
    pub const ZERO: Self = Self(0);

    /// `ms` milliseconds after the epoch.
    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// Milliseconds after the epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the largest representable time.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(ms))
    }
}

impl fmt::Display for StoreTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Source of store time. Implementations must be cheap and must never go backwards by more than
/// the lease safety margin the deployment accepts (wall clocks may step; see `docs/STORE.md`).
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current store time.
    fn now(&self) -> StoreTime;
}

/// Wall-clock time ([`SystemTime`]); shared by every process on one machine.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> StoreTime {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        StoreTime(ms)
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `start`.
    #[must_use]
    pub fn new(start: StoreTime) -> Self {
        Self(Arc::new(AtomicU64::new(start.0)))
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: StoreTime) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> StoreTime {
        StoreTime(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(StoreTime::from_millis(1_000));
        let shared = clock.clone();
        assert_eq!(clock.now(), StoreTime::from_millis(1_000));
        shared.advance(Duration::from_millis(250));
        assert_eq!(clock.now(), StoreTime::from_millis(1_250));
        clock.set(StoreTime::from_millis(5));
        assert_eq!(shared.now(), StoreTime::from_millis(5));
    }

    #[test]
    fn store_time_saturates() {
        assert_eq!(
            StoreTime::from_millis(u64::MAX - 1).saturating_add(Duration::from_secs(10)),
            StoreTime::from_millis(u64::MAX)
        );
    }
}
