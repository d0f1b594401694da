//! The owner lease TTL checked against the store's longest write wait ([`check_lease_ttl`]).

use std::time::Duration;

use super::*;

/// Refuses an owner lease TTL whose renewal slack is not longer than `write_wait`, the longest
/// the store may make a write wait
/// ([`LocationStore::write_wait_limit`](crate::store::LocationStore::write_wait_limit)).
///
/// # Errors
/// [`ConfigError::LeaseTtlTooShort`].
pub fn check_lease_ttl(ttl: Duration, write_wait: Duration) -> Result<(), ConfigError> {
    let slack = crate::store::renewal_slack(ttl);
    if slack > write_wait {
        return Ok(());
    }
    // slack = TTL − TTL/10 − TTL/3 = TTL · 17/30: the smallest TTL with slack > write_wait.
    let ms = u64::try_from(write_wait.as_millis()).unwrap_or(u64::MAX);
    let minimum = Duration::from_millis(ms.saturating_mul(30) / 17 + 2);
    Err(ConfigError::LeaseTtlTooShort {
        ttl,
        slack,
        write_wait,
        minimum,
    })
}
