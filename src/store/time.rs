//! Store time: the point in time a Location Store reads lease expiry against, the wall reading
//! of the store's [`Clock`] ([`Clock::wall`]) in milliseconds.
//!
//! Invariant: one store (all handles on one SQLite file, one Redis) reads one clock, so every
//! node agrees whether a lease is live. Production uses [`crate::clock::SystemClock`] (wall
//! time, shared by all processes of a machine); tests inject a [`crate::clock::ManualClock`] and
//! move it explicitly, so lease expiry never depends on sleeping.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::Clock;

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

impl StoreTime {
    /// The store time of `clock`: its wall reading ([`Clock::wall`]) in milliseconds since the
    /// epoch (a reading before the epoch is the epoch).
    #[must_use]
    pub fn now(clock: &dyn Clock) -> Self {
        Self::from(clock.wall())
    }
}

impl From<SystemTime> for StoreTime {
    fn from(t: SystemTime) -> Self {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self(ms)
    }
}

impl From<StoreTime> for SystemTime {
    fn from(t: StoreTime) -> Self {
        UNIX_EPOCH + Duration::from_millis(t.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_manual_clocks_store_time_moves_only_when_told() {
        let clock = ManualClock::at_wall(StoreTime::from_millis(1_000));
        let shared = clock.clone();
        assert_eq!(StoreTime::now(&clock), StoreTime::from_millis(1_000));
        shared.advance(Duration::from_millis(250));
        assert_eq!(StoreTime::now(&clock), StoreTime::from_millis(1_250));
        clock.set_wall(StoreTime::from_millis(5));
        assert_eq!(StoreTime::now(&shared), StoreTime::from_millis(5));
    }

    #[test]
    fn store_time_saturates() {
        assert_eq!(
            StoreTime::from_millis(u64::MAX - 1).saturating_add(Duration::from_secs(10)),
            StoreTime::from_millis(u64::MAX)
        );
    }
}
