//! Per-destination outbound admission budget (messages and bytes above libzmq's HWM), and the
//! receive side of a credit window (`RxWindow`). Plain counters: no clock, no waiting.
//!
//! A send reserves one message and its byte size before it is handed to the I/O thread; the
//! I/O thread releases the reservation when libzmq accepted the message (or when the message
//! is discarded because its peer went away). While the budget is exhausted the destination is
//! PAUSED: admission waits at most the send timeout, then fails with
//! [`crate::SendError::DeadlineExceeded`] and nothing is queued (SB-6.5). A send that failed
//! admission therefore can never be delivered later. The waiting is the driver's
//! (`crate::outbox::SendBudget`): [`Budget`] decides what is reserved and when a waiting
//! sender should look again ([`Reserve::Rolledback`], [`Budget::release_n`]).
//!
//! This limit is the *outbound admission* limit of EG-1.2. It has its own type and error and
//! shares no arithmetic with libzmq's HWM (messages inside libzmq) or the inbound application
//! queue capacity.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::{InboundWindow, OutboundBudget};

/// What [`Budget::try_reserve_n`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// Reserved.
    Reserved,
    /// Refused: no room for the messages.
    Full,
    /// Refused for want of bytes, after the messages had been counted for a moment: a sender
    /// refused meanwhile may have seen a budget fuller than it is, so waiting senders should
    /// look again.
    Rolledback,
}

/// The accounting of one destination's outbound budget: what is reserved, against its limits.
#[derive(Debug)]
pub struct Budget {
    limit: OutboundBudget,
    messages: AtomicU64,
    bytes: AtomicU64,
}

impl Budget {
    /// A budget with the given limits, nothing reserved.
    pub fn new(limit: OutboundBudget) -> Self {
        Self {
            limit,
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// Tries to reserve `n` messages totalling `bytes` at once (all or nothing); never waits.
    ///
    /// A single message larger than the byte budget is admitted only when nothing else is
    /// reserved (otherwise it could never be admitted).
    #[inline]
    pub fn try_reserve_n(&self, n: u64, bytes: u64) -> Reserve {
        let m = self.messages.fetch_add(n, Ordering::AcqRel);
        if m + n > self.limit.messages {
            self.messages.fetch_sub(n, Ordering::AcqRel);
            return Reserve::Full;
        }
        let b = self.bytes.fetch_add(bytes, Ordering::AcqRel);
        if b > 0 && b + bytes > self.limit.bytes {
            self.bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.messages.fetch_sub(n, Ordering::AcqRel);
            return Reserve::Rolledback;
        }
        Reserve::Reserved
    }

    /// Reserves one message of `bytes` whatever is reserved already (a reply to a client:
    /// it is never waited for; the caller checks the total, [`Budget::reserved_bytes`]).
    pub(crate) fn force_reserve(&self, bytes: u64) {
        self.messages.fetch_add(1, Ordering::AcqRel);
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
    }

    /// The configured limits.
    pub fn limit(&self) -> OutboundBudget {
        self.limit
    }

    /// Releases `n` messages totalling `bytes`; `true` when waiting senders should look again.
    ///
    /// With hysteresis: only once usage fell to half of a limit (or to zero), so a sender
    /// blocked on a full budget is woken once per half budget, not once per message.
    #[inline]
    pub fn release_n(&self, n: u64, bytes: u64) -> bool {
        let m = self.messages.fetch_sub(n, Ordering::AcqRel) - n;
        let b = self.bytes.fetch_sub(bytes, Ordering::AcqRel) - bytes;
        m <= self.limit.messages / 2 && b <= self.limit.bytes / 2
    }

    /// Messages currently reserved.
    #[cfg(test)]
    pub fn reserved_messages(&self) -> u64 {
        self.messages.load(Ordering::Acquire)
    }

    /// Bytes currently reserved.
    pub fn reserved_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }
}

/// Receive side of one credit window (a peer's relay data, or one ClientServer client): credit
/// the sender has used and not been given back yet, and credit freed (records handed up)
/// waiting to be returned with a FlowCredit (138). Sans-IO; the I/O thread owns one per sender.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RxWindow {
    used_msgs: u64,
    used_bytes: u64,
    ret_msgs: u64,
    ret_bytes: u64,
    /// Records dropped over the window (`CreditExceeded`), never charged: their cost is
    /// returned with the next grant all the same, so the sender's count (which paid for them)
    /// comes back to the node's — the documented resynchronisation (docs/CLIENT-PROTOCOL.md
    /// 5.3).
    refund_msgs: u64,
    refund_bytes: u64,
}

impl RxWindow {
    /// The initial grant: the whole window, as if used and freed.
    pub(crate) fn initial_grant(window: InboundWindow) -> Self {
        Self {
            used_msgs: u64::from(window.messages),
            used_bytes: window.bytes,
            ret_msgs: u64::from(window.messages),
            ret_bytes: window.bytes,
            refund_msgs: 0,
            refund_bytes: 0,
        }
    }

    /// Charges one arriving record of `bytes`; `false` (nothing charged) when the sender had
    /// already used its whole window.
    #[inline]
    pub(crate) fn try_charge(&mut self, window: InboundWindow, bytes: u64) -> bool {
        if self.used_msgs >= u64::from(window.messages) || self.used_bytes >= window.bytes {
            return false;
        }
        self.used_msgs += 1;
        self.used_bytes += bytes;
        true
    }

    /// A record of `bytes` fits in what is left of the window's bytes (no overshoot).
    #[inline]
    pub(crate) fn fits(&self, window: InboundWindow, bytes: u64) -> bool {
        self.used_bytes.saturating_add(bytes) <= window.bytes
    }

    /// One record of `bytes` left the window; `true` when a quarter of the window is freed and
    /// the credit should be returned now (credit goes back in batches).
    #[inline]
    pub(crate) fn free(&mut self, window: InboundWindow, bytes: u64) -> bool {
        self.free_n(window, 1, bytes)
    }

    /// [`RxWindow::free`] for `records` records of `bytes` bytes in total.
    #[inline]
    pub(crate) fn free_n(&mut self, window: InboundWindow, records: u32, bytes: u64) -> bool {
        self.ret_msgs += u64::from(records);
        self.ret_bytes += bytes;
        self.ret_msgs >= u64::from(window.messages / 4).max(1) || self.ret_bytes >= window.bytes / 4
    }

    /// A record of `bytes` arrived over the window and was dropped (nothing charged): its cost
    /// goes back to the sender with the next grant (housekeeping sends it), without freeing
    /// anything of the window.
    #[cold]
    pub(crate) fn refund(&mut self, bytes: u64) {
        self.refund_msgs = self.refund_msgs.saturating_add(1);
        self.refund_bytes = self.refund_bytes.saturating_add(bytes);
    }

    /// Freed (or refunded) credit is waiting to be returned.
    pub(crate) fn owes(&self) -> bool {
        self.ret_msgs > 0 || self.ret_bytes > 0 || self.refund_msgs > 0
    }

    /// The credit to return now (messages capped to the record's `u32`), if any.
    pub(crate) fn pending(&self) -> Option<(u32, u64)> {
        self.owes().then(|| {
            (
                u32::try_from(self.ret_msgs.saturating_add(self.refund_msgs)).unwrap_or(u32::MAX),
                self.ret_bytes.saturating_add(self.refund_bytes),
            )
        })
    }

    /// The window grows from `from` to `to` (a stranger's session accepted): the difference is
    /// owed to the sender as if it had been used and freed, so the next `pending()` grants it.
    pub(crate) fn widen(&mut self, from: InboundWindow, to: InboundWindow) {
        let msgs = u64::from(to.messages.saturating_sub(from.messages));
        let bytes = to.bytes.saturating_sub(from.bytes);
        self.used_msgs += msgs;
        self.used_bytes += bytes;
        self.ret_msgs += msgs;
        self.ret_bytes += bytes;
    }

    /// libzmq took the FlowCredit carrying `pending()`'s `(msgs, bytes)`: that credit is back
    /// with the sender. Until then it stays pending (a lost grant would stall the sender).
    pub(crate) fn returned(&mut self, msgs: u32, bytes: u64) {
        // Freed credit first (it frees the window), then refunds (never charged); a grant
        // made before more was freed or refunded is split the same way either way.
        let msgs = u64::from(msgs);
        let (freed_msgs, freed_bytes) = (msgs.min(self.ret_msgs), bytes.min(self.ret_bytes));
        self.used_msgs = self.used_msgs.saturating_sub(freed_msgs);
        self.used_bytes = self.used_bytes.saturating_sub(freed_bytes);
        self.ret_msgs -= freed_msgs;
        self.ret_bytes -= freed_bytes;
        self.refund_msgs = self.refund_msgs.saturating_sub(msgs - freed_msgs);
        self.refund_bytes = self.refund_bytes.saturating_sub(bytes - freed_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_limit_and_oversized_single_message() {
        let b = Budget::new(OutboundBudget {
            messages: 10,
            bytes: 100,
        });
        assert_eq!(
            b.try_reserve_n(1, 500),
            Reserve::Reserved,
            "alone, an oversized message is admitted"
        );
        assert_eq!(b.try_reserve_n(1, 1), Reserve::Rolledback);
        b.release_n(1, 500);
        assert_eq!(b.try_reserve_n(1, 60), Reserve::Reserved);
        assert_eq!(b.try_reserve_n(1, 60), Reserve::Rolledback);
        assert_eq!(b.try_reserve_n(1, 40), Reserve::Reserved);
        assert_eq!(b.reserved_messages(), 2);
        assert_eq!(b.reserved_bytes(), 100);
    }

    // spec: SB-6.5 (the PAUSED destination's senders are told when room returned). Waking
    // is decided here, with hysteresis: once usage fell to half of each limit, and after a
    // refusal that had counted its messages for a moment.
    #[test]
    fn waiting_senders_look_again_at_half_budget_and_after_a_rollback() {
        let b = Budget::new(OutboundBudget {
            messages: 4,
            bytes: 1000,
        });
        for _ in 0..4 {
            assert_eq!(b.try_reserve_n(1, 10), Reserve::Reserved);
        }
        assert_eq!(b.try_reserve_n(1, 10), Reserve::Full, "messages used up");
        assert!(!b.release_n(1, 10), "3 of 4 still reserved: no wake");
        assert!(b.release_n(1, 10), "half the messages free: wake");
        assert_eq!(b.try_reserve_n(2, 995), Reserve::Rolledback);
        assert_eq!(
            b.reserved_messages(),
            2,
            "the rollback gave the messages back"
        );
        assert!(b.release_n(2, 20), "empty: wake");
    }

    #[test]
    fn rx_window_charges_refuses_and_returns_in_batches() {
        let window = InboundWindow {
            messages: 8,
            bytes: 1 << 20,
        };
        let mut rx = RxWindow::initial_grant(window);
        assert_eq!(rx.pending(), Some((8, 1 << 20)));
        assert!(!rx.try_charge(window, 10), "nothing granted yet");
        rx.returned(8, 1 << 20);
        assert_eq!(rx, RxWindow::default());
        for _ in 0..8 {
            assert!(rx.try_charge(window, 10));
        }
        assert!(!rx.try_charge(window, 10), "window used up");
        assert!(!rx.free(window, 10));
        assert!(rx.free(window, 10), "a quarter of the window freed");
        assert_eq!(rx.pending(), Some((2, 20)));
        rx.returned(2, 20);
        assert!(!rx.owes());
        assert!(rx.try_charge(window, 10));
    }

    #[test]
    fn rx_window_frees_a_run_of_records_at_once() {
        let window = InboundWindow {
            messages: 8,
            bytes: 1 << 20,
        };
        let mut rx = RxWindow::default();
        for _ in 0..8 {
            assert!(rx.try_charge(window, 10));
        }
        assert!(!rx.free_n(window, 1, 10), "one record is not a quarter");
        assert!(rx.free_n(window, 3, 30), "four records: counted as four");
        assert_eq!(rx.pending(), Some((4, 40)));
    }

    #[test]
    fn rx_window_widens_when_a_stranger_is_accepted() {
        let small = InboundWindow {
            messages: 4,
            bytes: 100,
        };
        let full = InboundWindow {
            messages: 64,
            bytes: 10_000,
        };
        let mut rx = RxWindow::initial_grant(small);
        rx.returned(4, 100);
        for _ in 0..4 {
            assert!(rx.try_charge(small, 10));
        }
        assert!(!rx.try_charge(small, 10), "a stranger's window is small");
        rx.widen(small, full);
        // The difference is granted; what the stranger used stays charged.
        assert_eq!(rx.pending(), Some((60, 9_900)));
        assert!(
            !rx.try_charge(full, 10),
            "nothing more before the grant left"
        );
        rx.returned(60, 9_900);
        for _ in 0..60 {
            assert!(rx.try_charge(full, 10));
        }
        assert!(
            !rx.try_charge(full, 10),
            "the full window, less the 4 still held"
        );
    }
}
