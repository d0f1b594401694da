//! Sans-IO request correlation table: every registered request ends in exactly one terminal.
//!
//! Inputs: [`Correlations::register`], [`Correlations::handle_reply`],
//! [`Correlations::handle_cancel`], [`Correlations::handle_peer_lost`],
//! [`Correlations::handle_timeout`] (with the driver's `now`). Outputs: the returned values; a
//! waiter `W` is handed back exactly once, together with its terminal.
//!
//! Invariants (SB-12, EG-16.26):
//! - an id is pending at most once; removing it is the only way to produce a terminal, so a
//!   second terminal for the same id cannot be produced;
//! - a reply for an id that already ended (timeout, cancel, peer lost) is classified
//!   [`ReplyOutcome::Late`] and counted, never delivered;
//! - a reply from a peer other than the one the request was sent to is
//!   [`ReplyOutcome::WrongPeer`] and leaves the request pending;
//! - nothing is ever resent (the table has no resend path at all).

use std::collections::{BTreeSet, VecDeque};

use crate::hashing::FastMap;
use std::time::Instant;

/// How many recently ended ids are remembered to classify late replies.
const RECENT_CAPACITY: usize = 4096;

/// The terminal a request ended with, as seen by the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    /// A reply or error reply arrived in time.
    Replied,
    /// The deadline passed first.
    TimedOut,
    /// The caller cancelled (dropped the request).
    Cancelled,
    /// The peer's lifecycle ended (down or restarted with a new generation).
    PeerLost,
}

/// Classification of an inbound reply.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplyOutcome<W> {
    /// First terminal: deliver to this waiter.
    Deliver(W),
    /// The request already ended with the given terminal; the reply is recorded and dropped.
    Late(Terminal),
    /// The id was never issued, or is too old to remember.
    Unknown,
    /// The reply came from a peer the request was not sent to; dropped, request stays pending.
    WrongPeer,
}

struct Pending<P, W> {
    peer: P,
    deadline: Instant,
    waiter: W,
}

/// The table. `P` identifies a peer lifecycle, `W` is the waiter to complete.
pub struct Correlations<P, W> {
    pending: FastMap<u64, Pending<P, W>>,
    deadlines: BTreeSet<(Instant, u64)>,
    recent: FastMap<u64, Terminal>,
    recent_order: VecDeque<u64>,
    late_replies: u64,
}

impl<P: PartialEq + Clone, W> Default for Correlations<P, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: PartialEq + Clone, W> Correlations<P, W> {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            pending: FastMap::default(),
            deadlines: BTreeSet::new(),
            recent: FastMap::default(),
            recent_order: VecDeque::new(),
            late_replies: 0,
        }
    }

    /// Registers a request under `id` (issued by the caller, unique per node lifetime).
    /// Returns the waiter back if the id is already in use.
    pub fn register(&mut self, id: u64, peer: P, deadline: Instant, waiter: W) -> Result<(), W> {
        if self.pending.contains_key(&id) || self.recent.contains_key(&id) {
            return Err(waiter);
        }
        self.deadlines.insert((deadline, id));
        self.pending.insert(
            id,
            Pending {
                peer,
                deadline,
                waiter,
            },
        );
        Ok(())
    }

    /// A reply (or error reply) for `id` arrived from `from`.
    pub fn handle_reply(&mut self, id: u64, from: &P) -> ReplyOutcome<W> {
        match self.pending.get(&id) {
            Some(p) if p.peer != *from => ReplyOutcome::WrongPeer,
            Some(_) => {
                let w = self.end(id, Terminal::Replied).expect("present");
                ReplyOutcome::Deliver(w)
            }
            None => match self.recent.get(&id) {
                Some(t) => {
                    self.late_replies += 1;
                    ReplyOutcome::Late(*t)
                }
                None => ReplyOutcome::Unknown,
            },
        }
    }

    /// The caller gave up on `id`. Returns the waiter if this was the terminal.
    pub fn handle_cancel(&mut self, id: u64) -> Option<W> {
        self.end(id, Terminal::Cancelled)
    }

    /// Ends every request sent to `peer`.
    pub fn handle_peer_lost(&mut self, peer: &P) -> Vec<(u64, W)> {
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.peer == *peer)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.end(id, Terminal::PeerLost).map(|w| (id, w)))
            .collect()
    }

    /// Ends every request whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<(u64, W)> {
        let mut out = Vec::new();
        while let Some(&(d, id)) = self.deadlines.first() {
            if d > now {
                break;
            }
            if let Some(w) = self.end(id, Terminal::TimedOut) {
                out.push((id, w));
            }
        }
        out
    }

    /// The driver stops: ends every pending request (recorded as cancelled) and returns them.
    pub fn handle_close(&mut self) -> Vec<(u64, W)> {
        let ids: Vec<u64> = self.deadlines.iter().map(|&(_, id)| id).collect();
        ids.into_iter()
            .filter_map(|id| self.end(id, Terminal::Cancelled).map(|w| (id, w)))
            .collect()
    }

    /// The earliest pending deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// The deadline of `id` while it is pending; `None` once it ended (or was never issued).
    ///
    /// The driver asks this at the moment of transmission: a request that already reached
    /// its terminal must never be sent (SB-12, EG-16.26).
    #[must_use]
    pub fn pending_deadline(&self, id: u64) -> Option<Instant> {
        self.pending.get(&id).map(|p| p.deadline)
    }

    /// Asked at the moment of transmission (SB-12, EG-16.26): `None` if `id` is pending and its
    /// deadline is after `now` (send it); otherwise `id` has ended — it reached its terminal
    /// before, or its deadline is at or before `now` — and must never be sent. Then every
    /// request due at `now` is ended here, before the timer would, and returned (as
    /// [`Correlations::handle_timeout`] does) for the driver to fail its waiter.
    pub fn handle_transmit(&mut self, id: u64, now: Instant) -> Option<Vec<(u64, W)>> {
        match self.pending_deadline(id) {
            Some(d) if d > now => None,
            Some(_) => Some(self.handle_timeout(now)),
            None => Some(Vec::new()),
        }
    }

    /// Whether `id` has ended or is due at `now` (what [`Correlations::handle_transmit`] would
    /// refuse), without ending anything.
    #[must_use]
    pub fn is_ended_at(&self, id: u64, now: Instant) -> bool {
        self.pending_deadline(id).is_none_or(|d| d <= now)
    }

    /// Number of pending requests.
    #[cfg(any(test, feature = "testing"))]
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True if nothing is pending.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Replies that arrived after their request had ended.
    #[cfg(any(test, feature = "testing"))]
    pub fn late_replies(&self) -> u64 {
        self.late_replies
    }

    fn end(&mut self, id: u64, terminal: Terminal) -> Option<W> {
        let p = self.pending.remove(&id)?;
        self.deadlines.remove(&(p.deadline, id));
        if self.recent_order.len() == RECENT_CAPACITY
            && let Some(old) = self.recent_order.pop_front()
        {
            self.recent.remove(&old);
        }
        self.recent.insert(id, terminal);
        self.recent_order.push_back(id);
        Some(p.waiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // spec: SB-12, EG-16.26 (exactly one terminal; late reply recorded, not delivered)
    #[test]
    fn timeout_then_late_reply_is_not_a_second_terminal() {
        let t0 = Instant::now();
        let mut c: Correlations<u8, &str> = Correlations::new();
        c.register(1, 7, t0 + Duration::from_millis(10), "w1")
            .unwrap();
        assert_eq!(c.pending_deadline(1), Some(t0 + Duration::from_millis(10)));
        c.register(2, 7, t0 + Duration::from_millis(20), "w2")
            .unwrap();
        assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_millis(10)));
        assert!(c.handle_timeout(t0 + Duration::from_millis(5)).is_empty());
        assert_eq!(
            c.handle_timeout(t0 + Duration::from_millis(10)),
            vec![(1, "w1")]
        );
        assert_eq!(
            c.handle_reply(1, &7),
            ReplyOutcome::Late(Terminal::TimedOut)
        );
        assert_eq!(c.late_replies(), 1);
        assert_eq!(c.handle_reply(2, &7), ReplyOutcome::Deliver("w2"));
        assert_eq!(c.handle_reply(2, &7), ReplyOutcome::Late(Terminal::Replied));
        assert!(c.handle_timeout(t0 + Duration::from_secs(1)).is_empty());
        assert!(c.is_empty());
        assert_eq!(c.pending_deadline(1), None, "ended: never transmitted");
        assert_eq!(c.pending_deadline(2), None);
    }

    #[test]
    fn cancel_peer_lost_wrong_peer_unknown() {
        let t0 = Instant::now();
        let d = t0 + Duration::from_secs(1);
        let mut c: Correlations<u8, u32> = Correlations::new();
        c.register(1, 1, d, 10).unwrap();
        c.register(2, 2, d, 20).unwrap();
        c.register(3, 2, d, 30).unwrap();
        assert_eq!(c.register(3, 2, d, 31), Err(31));
        assert_eq!(c.handle_reply(1, &2), ReplyOutcome::WrongPeer);
        assert_eq!(c.handle_cancel(1), Some(10));
        assert_eq!(c.handle_cancel(1), None);
        assert_eq!(
            c.handle_reply(1, &1),
            ReplyOutcome::Late(Terminal::Cancelled)
        );
        let mut lost = c.handle_peer_lost(&2);
        lost.sort();
        assert_eq!(lost, vec![(2, 20), (3, 30)]);
        assert_eq!(c.handle_reply(99, &1), ReplyOutcome::Unknown);
        assert_eq!(c.poll_timeout(), None);
        // an ended id is not reusable while remembered
        assert_eq!(c.register(2, 2, d, 0), Err(0));
    }

    // spec: SB-12, EG-16.26 — checked at transmission: a pending request before its deadline is
    // sent; one due at `now` ends there (with every other due request, for their waiters), and
    // an ended one is refused without ending anything else.
    #[test]
    fn transmit_check_ends_due_requests_and_refuses_ended_ones() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c: Correlations<u8, &str> = Correlations::new();
        c.register(1, 7, t0 + ms(10), "w1").unwrap();
        c.register(2, 7, t0 + ms(20), "w2").unwrap();
        c.register(3, 7, t0 + ms(30), "w3").unwrap();
        assert!(!c.is_ended_at(2, t0 + ms(5)));
        assert_eq!(c.handle_transmit(2, t0 + ms(5)), None);
        assert_eq!(c.len(), 3, "a check before the deadline ends nothing");
        assert!(c.is_ended_at(2, t0 + ms(20)));
        assert_eq!(c.len(), 3, "is_ended_at ends nothing");
        assert_eq!(
            c.handle_transmit(2, t0 + ms(20)),
            Some(vec![(1, "w1"), (2, "w2")])
        );
        assert_eq!(c.handle_transmit(1, t0 + ms(20)), Some(vec![]));
        assert_eq!(
            c.handle_reply(2, &7),
            ReplyOutcome::Late(Terminal::TimedOut)
        );
        assert_eq!(c.handle_transmit(3, t0 + ms(20)), None);
        assert_eq!(c.handle_cancel(3), Some("w3"));
        assert_eq!(c.handle_transmit(3, t0), Some(vec![]), "ended: never sent");
        assert!(c.is_ended_at(3, t0));
    }

    // spec: SB-12 — a driver that stops ends every pending request exactly once, whatever its
    // deadline; a reply after that is late, never a second terminal.
    #[test]
    fn close_ends_every_pending_request_once() {
        let t0 = Instant::now();
        let mut c: Correlations<u8, u32> = Correlations::new();
        c.register(1, 7, t0 + Duration::from_secs(1), 10).unwrap();
        c.register(2, 7, t0 + Duration::from_secs(86_400 * 3650), 20)
            .unwrap();
        assert_eq!(c.handle_cancel(1), Some(10));
        c.register(3, 8, t0, 30).unwrap();
        let mut closed = c.handle_close();
        closed.sort();
        assert_eq!(closed, vec![(2, 20), (3, 30)]);
        assert!(c.is_empty());
        assert_eq!(c.poll_timeout(), None);
        assert!(c.handle_close().is_empty());
        assert_eq!(
            c.handle_reply(2, &7),
            ReplyOutcome::Late(Terminal::Cancelled)
        );
    }
}
