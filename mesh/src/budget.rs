//! Per-destination outbound admission budget (messages and bytes above libzmq's HWM).
//!
//! A send reserves one message and its byte size before it is handed to the I/O thread; the
//! I/O thread releases the reservation when libzmq accepted the message (or when the message
//! is discarded because its peer went away). While the budget is exhausted the destination is
//! PAUSED: admission waits at most the send timeout, then fails with
//! [`crate::SendError::DeadlineExceeded`] and nothing is queued (SB-6.5). A send that failed
//! admission therefore can never be delivered later.
//!
//! This limit is the *outbound admission* limit of EG-1.2. It has its own type and error and
//! shares no arithmetic with libzmq's HWM (messages inside libzmq) or the inbound application
//! queue capacity.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Outbound admission limits for one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboundBudget {
    /// Messages admitted but not yet accepted by libzmq.
    pub messages: u64,
    /// Bytes (all frames) admitted but not yet accepted by libzmq.
    pub bytes: u64,
}

impl Default for OutboundBudget {
    fn default() -> Self {
        Self {
            messages: 4096,
            bytes: 16 * 1024 * 1024,
        }
    }
}

/// Admission failed: the budget stayed exhausted for the whole send timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("outbound admission: budget exhausted for {waited:?}")]
pub struct AdmissionTimeout {
    /// How long admission waited.
    pub waited: Duration,
}

/// Shared accounting of one destination's budget.
#[derive(Debug)]
pub struct Budget {
    limit: OutboundBudget,
    messages: AtomicU64,
    bytes: AtomicU64,
    waiters: AtomicUsize,
    notify: Notify,
}

impl Budget {
    /// A budget with the given limits, nothing reserved.
    pub fn new(limit: OutboundBudget) -> Self {
        Self {
            limit,
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            notify: Notify::new(),
        }
    }

    /// Tries to reserve one message of `bytes`; never waits.
    ///
    /// A single message larger than the byte budget is admitted only when nothing else is
    /// reserved (otherwise it could never be admitted).
    pub fn try_reserve(&self, bytes: u64) -> bool {
        self.try_reserve_n(1, bytes)
    }

    /// Tries to reserve `n` messages totalling `bytes` at once (all or nothing).
    pub fn try_reserve_n(&self, n: u64, bytes: u64) -> bool {
        let m = self.messages.fetch_add(n, Ordering::AcqRel);
        if m + n > self.limit.messages {
            self.messages.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        let b = self.bytes.fetch_add(bytes, Ordering::AcqRel);
        if b > 0 && b + bytes > self.limit.bytes {
            self.bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.messages.fetch_sub(n, Ordering::AcqRel);
            self.wake();
            return false;
        }
        true
    }

    /// The configured limits.
    pub fn limit(&self) -> OutboundBudget {
        self.limit
    }

    /// Reserves, waiting at most `timeout` for room.
    pub async fn reserve(&self, bytes: u64, timeout: Duration) -> Result<(), AdmissionTimeout> {
        self.reserve_n(1, bytes, timeout).await
    }

    /// Reserves `n` messages totalling `bytes` (all or nothing), waiting at most `timeout`.
    pub async fn reserve_n(
        &self,
        n: u64,
        bytes: u64,
        timeout: Duration,
    ) -> Result<(), AdmissionTimeout> {
        if self.try_reserve_n(n, bytes) {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let _guard = WaiterGuard(&self.waiters);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_reserve_n(n, bytes) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                // One last attempt: room may have appeared exactly at the deadline.
                return if self.try_reserve_n(n, bytes) {
                    Ok(())
                } else {
                    Err(AdmissionTimeout { waited: timeout })
                };
            }
        }
    }

    /// Releases one message of `bytes` (called by the I/O thread).
    ///
    /// Waiters are woken with hysteresis: only once usage fell to half of a limit (or to
    /// zero), so a sender blocked on a full budget is woken once per half budget, not once
    /// per message.
    pub fn release(&self, bytes: u64) {
        self.release_n(1, bytes);
    }

    /// Releases `n` messages totalling `bytes`.
    pub fn release_n(&self, n: u64, bytes: u64) {
        let m = self.messages.fetch_sub(n, Ordering::AcqRel) - n;
        let b = self.bytes.fetch_sub(bytes, Ordering::AcqRel) - bytes;
        if m <= self.limit.messages / 2 && b <= self.limit.bytes / 2 {
            self.wake();
        }
    }

    /// Messages currently reserved.
    pub fn reserved_messages(&self) -> u64 {
        self.messages.load(Ordering::Acquire)
    }

    /// Bytes currently reserved.
    pub fn reserved_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    fn wake(&self) {
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.notify.notify_waiters();
        }
    }
}

struct WaiterGuard<'a>(&'a AtomicUsize);

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    // spec: SB-6.5 (admission waits at most the send timeout), EG-1.2 (own limit type)
    #[tokio::test]
    async fn admission_times_out_then_succeeds_after_release() {
        let b = Arc::new(Budget::new(OutboundBudget {
            messages: 2,
            bytes: 100,
        }));
        assert!(b.try_reserve(10));
        assert!(b.try_reserve(10));
        assert!(!b.try_reserve(1));
        let err = b.reserve(1, Duration::from_millis(20)).await.unwrap_err();
        assert_eq!(err.waited, Duration::from_millis(20));
        assert_eq!(b.reserved_messages(), 2);

        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.reserve(5, Duration::from_secs(30)).await });
        tokio::task::yield_now().await;
        b.release(10);
        waiter.await.unwrap().unwrap();
        assert_eq!(b.reserved_messages(), 2);
        assert_eq!(b.reserved_bytes(), 15);
    }

    #[test]
    fn byte_limit_and_oversized_single_message() {
        let b = Budget::new(OutboundBudget {
            messages: 10,
            bytes: 100,
        });
        assert!(
            b.try_reserve(500),
            "alone, an oversized message is admitted"
        );
        assert!(!b.try_reserve(1));
        b.release(500);
        assert!(b.try_reserve(60));
        assert!(!b.try_reserve(60));
        assert!(b.try_reserve(40));
    }
}
