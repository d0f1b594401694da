//! The owner lease's timing rule: how far before the store's expiry a node stops trusting its
//! lease (the margin), how often it renews, and what that leaves one renewal to answer (the
//! slack). The node's renewal driver (`node::lease`) follows it; the configuration refuses a
//! lease TTL that a store cannot renew within the slack (`config::check_lease_ttl`).

use std::time::Duration;

/// The safety margin between the store's lease expiry and the local deadline: a tenth of the
/// TTL. It absorbs a rate difference between the store's clock and this node's monotonic clock
/// (and the latency of the store's answer is already covered by counting from the send time).
#[must_use]
pub(crate) fn lease_margin(ttl: Duration) -> Duration {
    ttl / 10
}

/// Renewals are sent every third of the TTL.
#[must_use]
pub(crate) fn renewal_period(ttl: Duration) -> Duration {
    ttl / 3
}

/// How long an owner lease renewal sent on time may take to answer before the local lease
/// deadline passes: `TTL − TTL/10 (margin) − TTL/3 (renewal period)`. A store whose writes can
/// wait longer (the SQLite busy timeout) cannot keep such a lease; the configuration refuses it
/// ([`crate::config::check_lease_ttl`]).
#[must_use]
pub fn renewal_slack(ttl: Duration) -> Duration {
    ttl.saturating_sub(lease_margin(ttl))
        .saturating_sub(renewal_period(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_renewal_slack_is_what_is_left_after_one_period_and_the_margin() {
        assert_eq!(renewal_slack(Duration::from_secs(10)).as_millis(), 5_666);
        assert_eq!(renewal_slack(ms(1_500)), ms(850));
    }
}
