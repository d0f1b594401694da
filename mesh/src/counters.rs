//! Drop and rejection counters with a closed reason vocabulary.
//!
//! Every inbound item the mesh refuses is counted here and logged with a `tracing` event
//! (target `zlink_mesh::drop`, field `reason`, at debug level); none of them is passed to the
//! layer above. So that an attack shows at the default log level without a line per frame, the
//! I/O thread logs a summary per reason every [`DROP_SUMMARY_INTERVAL`] (info level, target
//! `zlink_mesh::drop`, fields `reason` and `count`: drops since the previous summary), only for
//! reasons that dropped something. Operators read the totals with [`Counters::drops`] (the
//! node's `NODE_INFO` reply carries them).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the I/O thread logs the drops per reason (when there were any).
pub const DROP_SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

/// Why the mesh dropped an inbound item or an outbound message (closed vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// The frames did not decode (bad header, body, part count, ids …).
    Malformed,
    /// Command 45 (reserved): never accepted.
    ReservedCommand,
    /// A command number the codec does not know.
    UnknownCommand,
    /// A record from a connection that has not completed the handshake.
    Unauthenticated,
    /// A routing id that is not a valid NodeRid (e.g. a peer without identity).
    InvalidRoutingId,
    /// A handshake that failed (wrong secret, wrong mesh, protocol error, timeout).
    HandshakeFailed,
    /// A Hello whose NodeRid differs from the connection's routing id.
    RidMismatch,
    /// A Hello, or a record, of an older NodeGeneration than the peer's current one.
    StaleGeneration,
    /// A record that is not allowed on this kind of connection.
    WrongConnection,
    /// Too many handshakes in progress; the Hello was ignored.
    HandshakeCapacity,
    /// A reply whose request already ended (timeout, cancel, peer lost): EG-16.26.
    LateReply,
    /// A reply for a correlation id never issued (or from the wrong peer).
    UnknownReply,
    /// libzmq refused a connection at the ZMTP level (greeting/protocol error), from monitor
    /// events.
    ZmtpProtocol,
    /// An outbound message discarded because its peer lifecycle ended before libzmq took it.
    PeerLost,
    /// A reply that could not be sent (requester gone, restarted, or completion queue full).
    ReplyUndeliverable,
    /// An authenticated peer sent relay data beyond the window it was granted.
    CreditExceeded,
    /// An outbound request whose terminal (deadline passed, cancelled) came while it was
    /// still queued (PAUSED): discarded at the moment of transmission, never sent (SB-12,
    /// EG-16.26).
    RequestEnded,
    /// A record from a ClientServer connection whose session the node ended (timeout,
    /// `MeshNode::close_client`, shutdown): its routing id is tombstoned, the record is
    /// dropped and the client is answered with a 149 Disconnect again (docs/MESH.md, "Client
    /// connection lifecycle"). Also a record from a session that is being closed.
    SessionClosed,
    /// libzmq dropped a connection whose frame, or whose multipart message in total (all its
    /// parts, libzmq's bookkeeping per part included), exceeded the socket's message limit,
    /// before buffering it (patched libzmq, docs/MESH.md "Memory bounds"); from monitor
    /// events.
    MessageTooLarge,
    /// A record that would open a ClientServer session from a source address that already
    /// has `MeshConfig::max_clients_per_source` sessions, or a Hello from a source address
    /// with `max_pending_handshakes_per_source` handshakes in progress.
    SourceCapacity,
    /// A ClientServer session closed as a slow consumer (`DisconnectReason::SlowConsumer`):
    /// what was queued for it (pushes and replies) stayed over the session's outbound budget
    /// for longer than `ClientOutbound::grace`, or a reply would have taken it over twice the
    /// budget (that reply is dropped with it). Counted once per session; the records still
    /// queued are counted `PeerLost`.
    SlowConsumer,
    /// A Hello on a connection a peer dialled while our own dial to it is the link of that
    /// kind (both nodes dial each other; the node whose name sorts first keeps its own
    /// connection: docs/MESH.md, "Who dials whom"). Refused with `Reject{Duplicate}`; the
    /// peer takes our connection instead. Not an attack: expected once per link kind when
    /// both sides dial.
    DuplicateLink,
}

impl DropReason {
    /// Every reason, in a fixed order.
    pub const ALL: [DropReason; 22] = [
        DropReason::Malformed,
        DropReason::ReservedCommand,
        DropReason::UnknownCommand,
        DropReason::Unauthenticated,
        DropReason::InvalidRoutingId,
        DropReason::HandshakeFailed,
        DropReason::RidMismatch,
        DropReason::StaleGeneration,
        DropReason::WrongConnection,
        DropReason::HandshakeCapacity,
        DropReason::LateReply,
        DropReason::UnknownReply,
        DropReason::ZmtpProtocol,
        DropReason::PeerLost,
        DropReason::ReplyUndeliverable,
        DropReason::CreditExceeded,
        DropReason::RequestEnded,
        DropReason::SessionClosed,
        DropReason::MessageTooLarge,
        DropReason::SourceCapacity,
        DropReason::SlowConsumer,
        DropReason::DuplicateLink,
    ];

    /// Stable snake_case name (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::ReservedCommand => "reserved_command",
            DropReason::UnknownCommand => "unknown_command",
            DropReason::Unauthenticated => "unauthenticated",
            DropReason::InvalidRoutingId => "invalid_routing_id",
            DropReason::HandshakeFailed => "handshake_failed",
            DropReason::RidMismatch => "rid_mismatch",
            DropReason::StaleGeneration => "stale_generation",
            DropReason::WrongConnection => "wrong_connection",
            DropReason::HandshakeCapacity => "handshake_capacity",
            DropReason::LateReply => "late_reply",
            DropReason::UnknownReply => "unknown_reply",
            DropReason::ZmtpProtocol => "zmtp_protocol",
            DropReason::PeerLost => "peer_lost",
            DropReason::ReplyUndeliverable => "reply_undeliverable",
            DropReason::CreditExceeded => "credit_exceeded",
            DropReason::RequestEnded => "request_ended",
            DropReason::SessionClosed => "session_closed",
            DropReason::MessageTooLarge => "message_too_large",
            DropReason::SourceCapacity => "source_capacity",
            DropReason::SlowConsumer => "slow_consumer",
            DropReason::DuplicateLink => "duplicate_link",
        }
    }

    fn index(self) -> usize {
        DropReason::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Transport-level event counts that are not drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportEvent {
    /// A TCP connection was accepted (monitor).
    Accepted,
    /// A connection was closed by libzmq (peer gone, oversized frame, heartbeat timeout …).
    Disconnected,
    /// A peer completed the handshake on both connections.
    PeerUp,
    /// A peer lifecycle ended.
    PeerDown,
    /// Outbound sends that found libzmq's HWM full (destination PAUSED).
    Paused,
}

impl TransportEvent {
    const ALL: [TransportEvent; 5] = [
        TransportEvent::Accepted,
        TransportEvent::Disconnected,
        TransportEvent::PeerUp,
        TransportEvent::PeerDown,
        TransportEvent::Paused,
    ];
    fn index(self) -> usize {
        TransportEvent::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(0)
    }
}

/// Who a terminal reply went to (see [`Counters::replies`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyOrigin {
    /// A ClientServer client's request.
    Client,
    /// A mesh peer's request.
    Peer,
}

impl ReplyOrigin {
    /// Both origins, in a fixed order.
    pub const ALL: [ReplyOrigin; 2] = [ReplyOrigin::Client, ReplyOrigin::Peer];

    /// Stable snake_case name (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyOrigin::Client => "client",
            ReplyOrigin::Peer => "peer",
        }
    }
}

/// Slots of the reply counters per origin: success, then one per `ErrorKind` code (1..=6).
const REPLY_SLOTS: usize = 7;

/// The node's counters (shared by the I/O thread and the API).
#[derive(Debug, Default)]
pub struct Counters {
    drops: [AtomicU64; DropReason::ALL.len()],
    events: [AtomicU64; 5],
    /// Terminal replies handed to the I/O thread, per origin and result (`ReplyHandle`).
    replies: [[AtomicU64; REPLY_SLOTS]; 2],
    delivered: AtomicU64,
    summary: Mutex<Summary>,
}

/// What the last drop summary covered.
#[derive(Debug, Default)]
struct Summary {
    /// When the next summary is due (`None` before the first call).
    next: Option<Instant>,
    /// The drop totals at the last summary.
    logged: [u64; DropReason::ALL.len()],
}

impl Counters {
    pub(crate) fn drop(&self, reason: DropReason, detail: &dyn std::fmt::Display) {
        self.drops[reason.index()].fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "zlink_mesh::drop", reason = reason.as_str(), %detail, "dropped");
    }

    pub(crate) fn event(&self, e: TransportEvent) {
        self.events[e.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one terminal answer to a request: `None` = a reply, `Some(kind)` = an error
    /// reply (146) of that kind.
    pub(crate) fn reply(&self, to: ReplyOrigin, error: Option<zlink_wire::ErrorKind>) {
        self.replies[to as usize][Self::reply_slot(error)].fetch_add(1, Ordering::Relaxed);
    }

    fn reply_slot(error: Option<zlink_wire::ErrorKind>) -> usize {
        error.map_or(0, |k| usize::from(k.code()).min(REPLY_SLOTS - 1))
    }

    /// Terminal answers this node gave to requests from `to`: replies (`error` = `None`) or
    /// error replies of one kind. Every request the node accepted gets exactly one.
    pub fn replies(&self, to: ReplyOrigin, error: Option<zlink_wire::ErrorKind>) -> u64 {
        self.replies[to as usize][Self::reply_slot(error)].load(Ordering::Relaxed)
    }

    pub(crate) fn delivered(&self, n: u64) {
        self.delivered.fetch_add(n, Ordering::Relaxed);
    }

    /// How many items were dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()].load(Ordering::Relaxed)
    }

    /// Sum over every drop reason.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().map(|a| a.load(Ordering::Relaxed)).sum()
    }

    /// How many times `e` happened.
    pub fn events(&self, e: TransportEvent) -> u64 {
        self.events[e.index()].load(Ordering::Relaxed)
    }

    /// Records handed to the layer above (inbound channel).
    pub fn delivered_total(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Every drop reason that dropped something, with its total (for an operator: metrics,
    /// `NODE_INFO`).
    pub fn drops(&self) -> Vec<(DropReason, u64)> {
        DropReason::ALL
            .iter()
            .map(|r| (*r, self.dropped(*r)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Logs, once per [`DROP_SUMMARY_INTERVAL`], the drops per reason since the previous
    /// summary (info level); returns what it logged. Called by the I/O thread's timers.
    pub(crate) fn summarize(&self, now: Instant) -> Vec<(DropReason, u64)> {
        let mut s = self.summary.lock().unwrap_or_else(|e| e.into_inner());
        let due = match s.next {
            None => {
                s.next = Some(now + DROP_SUMMARY_INTERVAL);
                return Vec::new();
            }
            Some(t) => t <= now,
        };
        if !due {
            return Vec::new();
        }
        s.next = Some(now + DROP_SUMMARY_INTERVAL);
        let mut out = Vec::new();
        for (i, r) in DropReason::ALL.iter().enumerate() {
            let total = self.drops[i].load(Ordering::Relaxed);
            let since = total.saturating_sub(s.logged[i]);
            s.logged[i] = total;
            if since > 0 {
                tracing::info!(
                    target: "zlink_mesh::drop",
                    reason = r.as_str(),
                    count = since,
                    total,
                    "dropped in the last {}s",
                    DROP_SUMMARY_INTERVAL.as_secs()
                );
                out.push((*r, since));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A summary per reason per interval, only for reasons that dropped something; nothing in
    // between (rate-limited whatever the drop rate).
    #[test]
    fn drops_are_summarized_per_reason_per_interval() {
        let c = Counters::default();
        let t0 = Instant::now();
        assert!(c.summarize(t0).is_empty());
        for _ in 0..1000 {
            c.drop(DropReason::Unauthenticated, &"x");
        }
        c.drop(DropReason::MessageTooLarge, &"y");
        assert!(c.summarize(t0 + DROP_SUMMARY_INTERVAL / 2).is_empty());
        assert_eq!(
            c.summarize(t0 + DROP_SUMMARY_INTERVAL),
            vec![
                (DropReason::Unauthenticated, 1000),
                (DropReason::MessageTooLarge, 1)
            ]
        );
        c.drop(DropReason::Unauthenticated, &"x");
        assert!(c.summarize(t0 + DROP_SUMMARY_INTERVAL * 3 / 2).is_empty());
        assert_eq!(
            c.summarize(t0 + DROP_SUMMARY_INTERVAL * 2),
            vec![(DropReason::Unauthenticated, 1)]
        );
        assert!(c.summarize(t0 + DROP_SUMMARY_INTERVAL * 3).is_empty());
        assert_eq!(
            c.drops(),
            vec![
                (DropReason::Unauthenticated, 1001),
                (DropReason::MessageTooLarge, 1)
            ]
        );
    }
}
