//! The closed flow-tracing vocabulary of rejected session records (SB-5.9, SB-6.6): every
//! relay, push, bind reply, replacement or close that the session owner or the actor owner
//! refuses is counted under exactly one [`FlowReject`] and traced — never dropped silently.

use std::fmt;

use crate::sync::atomic::{AtomicU64, Ordering};

/// Why a session record was refused. The set is closed: an operator's dashboard can list every
/// value ([`FlowReject::ALL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowReject {
    /// No current binding of that actor on the session (push, close, relay: session-not-bound,
    /// public kind `InvalidOperation`, SB-12).
    NotBound,
    /// The session is closing after a replacement: no new inbound application dispatch (SB-6.3).
    SessionClosing,
    /// The session has ended (disconnect, close).
    SessionClosed,
    /// No session with that SessionRid on this session owner.
    UnknownSession,
    /// The record names another session owner lifecycle generation (SB-4.3, SB-6.6).
    LifecycleMismatch,
    /// The binding generation is not the current one: retired by a rebind, an unbind or a
    /// disconnect (SB-4.1, SB-5.3, SB-6.1).
    BindingRetired,
    /// Source ObjectGeneration differs from the binding's (SB-5.5).
    ObjectGenerationMismatch,
    /// Source NodeGeneration differs from the binding's route (SB-5.5).
    NodeGenerationMismatch,
    /// AuthorityOwnerGeneration differs from the binding's route (SB-5.5).
    AuthorityMismatch,
    /// A 51 whose previous-owner values do not all match the replacement target (SB-6.2).
    ReplacedIdentityMismatch,
    /// A late or duplicate 51 for a binding identity already retired (SB-6.6).
    DuplicateReplacement,
    /// A 38 reply for a bind this session no longer waits for (SB-12, SB-14.15).
    LateBindReply,
    /// A record whose fields contradict each other or the request it answers.
    Malformed,
    /// The actor owner refused a record for an actor it does not own in that incarnation.
    ActorGone,
    /// The session owner is shutting down (SB-10): no new sessions or bindings.
    ShuttingDown,
    /// A bind of that actor is already waiting for its terminal on this session.
    BindInProgress,
    /// The session holds as many bindings as it may (`NodeOptions::max_bindings_per_session`).
    TooManyBindings,
    /// The actor owner's local lease deadline passed without a renewal (SB-5.11).
    LeaseLapsed,
    /// The client takes no pushes (no credit) and its session's push queue is full.
    ClientBacklogFull,
    /// The connected/authenticate callback refused the session (returned `Err`): the session
    /// is closed with `DisconnectReason::Refused`.
    Refused,
    /// A 42 from a node that is not the sealed binding's current route (its actor owner,
    /// SB-8.1).
    NotActorOwner,
    /// A 42 for a binding that another relocation's seal holds, or whose seal is being
    /// released (SB-12: actor in relocation, `Unavailable`).
    RelocationInProgress,
    /// A 44 for no installed seal, another relocation's, or one after the seal timed out
    /// (SB-8.3: `late_session_route_update`, a Warning; nothing changes).
    LateRouteUpdate,
    /// A 44 this session applied already (SB-8.3: a no-op).
    DuplicateRouteUpdate,
    /// A relay held by a relocation seal that timed out: never delivered, the session is
    /// closed (SB-8.3, SB-14.22).
    RelocationTimeout,
}

impl FlowReject {
    /// Every value, in a fixed order.
    pub const ALL: [FlowReject; 25] = [
        FlowReject::NotBound,
        FlowReject::SessionClosing,
        FlowReject::SessionClosed,
        FlowReject::UnknownSession,
        FlowReject::LifecycleMismatch,
        FlowReject::BindingRetired,
        FlowReject::ObjectGenerationMismatch,
        FlowReject::NodeGenerationMismatch,
        FlowReject::AuthorityMismatch,
        FlowReject::ReplacedIdentityMismatch,
        FlowReject::DuplicateReplacement,
        FlowReject::LateBindReply,
        FlowReject::Malformed,
        FlowReject::ActorGone,
        FlowReject::ShuttingDown,
        FlowReject::BindInProgress,
        FlowReject::TooManyBindings,
        FlowReject::LeaseLapsed,
        FlowReject::ClientBacklogFull,
        FlowReject::Refused,
        FlowReject::NotActorOwner,
        FlowReject::RelocationInProgress,
        FlowReject::LateRouteUpdate,
        FlowReject::DuplicateRouteUpdate,
        FlowReject::RelocationTimeout,
    ];

    /// The stable name used in logs and metrics.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FlowReject::NotBound => "session_not_bound",
            FlowReject::SessionClosing => "session_closing",
            FlowReject::SessionClosed => "session_closed",
            FlowReject::UnknownSession => "unknown_session",
            FlowReject::LifecycleMismatch => "lifecycle_mismatch",
            FlowReject::BindingRetired => "binding_retired",
            FlowReject::ObjectGenerationMismatch => "object_generation_mismatch",
            FlowReject::NodeGenerationMismatch => "node_generation_mismatch",
            FlowReject::AuthorityMismatch => "authority_mismatch",
            FlowReject::ReplacedIdentityMismatch => "replaced_identity_mismatch",
            FlowReject::DuplicateReplacement => "duplicate_replacement",
            FlowReject::LateBindReply => "late_bind_reply",
            FlowReject::Malformed => "malformed",
            FlowReject::ActorGone => "actor_gone",
            FlowReject::ShuttingDown => "shutting_down",
            FlowReject::BindInProgress => "bind_in_progress",
            FlowReject::TooManyBindings => "too_many_bindings",
            FlowReject::LeaseLapsed => "lease_lapsed",
            FlowReject::ClientBacklogFull => "client_backlog_full",
            FlowReject::Refused => "refused",
            FlowReject::NotActorOwner => "not_actor_owner",
            FlowReject::RelocationInProgress => "relocation_in_progress",
            FlowReject::LateRouteUpdate => "late_session_route_update",
            FlowReject::DuplicateRouteUpdate => "duplicate_session_route_update",
            FlowReject::RelocationTimeout => "relocation_timeout",
        }
    }

    fn index(self) -> usize {
        Self::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(Self::ALL.len() - 1)
    }
}

impl FlowReject {
    /// The reason for an actor owner's fence refusal of a session record (38 bind, 24 relay):
    /// another incarnation, a stale authority or node generation, else the actor is gone.
    #[must_use]
    pub fn of_fence(e: &crate::actor::ActorError) -> FlowReject {
        use crate::actor::ActorError;
        match e {
            ActorError::GenerationMismatch { .. } => FlowReject::ObjectGenerationMismatch,
            ActorError::StaleFence {
                fence: "authority", ..
            } => FlowReject::AuthorityMismatch,
            ActorError::StaleFence {
                fence: "node generation",
                ..
            } => FlowReject::NodeGenerationMismatch,
            ActorError::ShuttingDown => FlowReject::ShuttingDown,
            ActorError::LeaseLapsed => FlowReject::LeaseLapsed,
            _ => FlowReject::ActorGone,
        }
    }
}

impl fmt::Display for FlowReject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which record kind a rejection refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowRecord {
    /// A session → actor relay (24, or the same-node path).
    Relay,
    /// An actor → session push (36, or the same-node path).
    Push,
    /// A bind, unbind or disconnect (38).
    Bind,
    /// A binding-replaced notice (51).
    Replaced,
    /// A session packet from the client.
    Packet,
    /// A session's admission by the connected/authenticate callback.
    Connected,
    /// A relocation seal request (42, SB-8.1).
    Seal,
    /// A relocation route update (44 commit or abort, SB-8.3).
    Route,
}

impl FlowRecord {
    /// Every value, in a fixed order.
    pub const ALL: [FlowRecord; 8] = [
        FlowRecord::Relay,
        FlowRecord::Push,
        FlowRecord::Bind,
        FlowRecord::Replaced,
        FlowRecord::Packet,
        FlowRecord::Connected,
        FlowRecord::Seal,
        FlowRecord::Route,
    ];

    /// The stable name used in logs and metrics.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FlowRecord::Relay => "relay",
            FlowRecord::Push => "push",
            FlowRecord::Bind => "bind",
            FlowRecord::Replaced => "replaced",
            FlowRecord::Packet => "packet",
            FlowRecord::Connected => "connected",
            FlowRecord::Seal => "seal",
            FlowRecord::Route => "route",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

const N: usize = FlowReject::ALL.len() * FlowRecord::ALL.len();

/// Counters of rejected records by (record kind, reason); monotonic.
#[derive(Debug)]
pub struct FlowCounters {
    counts: [AtomicU64; N],
}

impl Default for FlowCounters {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl FlowCounters {
    /// Counts one rejection and traces it.
    pub fn reject(&self, record: FlowRecord, reason: FlowReject, detail: &dyn fmt::Display) {
        let i = record.index() * FlowReject::ALL.len() + reason.index();
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        tracing::debug!(record = record.as_str(), reason = reason.as_str(), %detail, "session record rejected");
    }

    /// Rejections of `record` for `reason`.
    #[must_use]
    pub fn get(&self, record: FlowRecord, reason: FlowReject) -> u64 {
        let i = record.index() * FlowReject::ALL.len() + reason.index();
        self.counts[i].load(Ordering::Relaxed)
    }

    /// Rejections of `record`, any reason.
    #[must_use]
    pub fn total(&self, record: FlowRecord) -> u64 {
        FlowReject::ALL.iter().map(|r| self.get(record, *r)).sum()
    }

    /// Every non-zero counter as `(record, reason, count)`.
    #[must_use]
    pub fn snapshot(&self) -> Vec<(FlowRecord, FlowReject, u64)> {
        let mut out = Vec::new();
        for rec in FlowRecord::ALL {
            for reason in FlowReject::ALL {
                let n = self.get(rec, reason);
                if n > 0 {
                    out.push((rec, reason, n));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_counter_and_name() {
        let c = FlowCounters::default();
        let mut names = std::collections::HashSet::new();
        for (i, r) in FlowReject::ALL.iter().enumerate() {
            assert!(names.insert(r.as_str()));
            for _ in 0..=i {
                c.reject(FlowRecord::Push, *r, &"t");
            }
        }
        for (i, r) in FlowReject::ALL.iter().enumerate() {
            assert_eq!(c.get(FlowRecord::Push, *r), i as u64 + 1);
            assert_eq!(c.get(FlowRecord::Relay, *r), 0);
        }
    }
}
