//! Errors of the actor layer: configuration errors at startup, and call/lifecycle errors that
//! map to the public error kinds of SB-12.

use zlink_wire::{ActorId, DispatchKey, ErrorKind, NodeRid, ObjectGeneration};

use crate::store::StoreError;

/// A registration that cannot start (SB-3.3): reported when the registry is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ActorConfigError {
    /// Two handlers were registered for one packet key of one actor type (SB-3.3).
    #[error("actor type {actor_type:?} registers two handlers for dispatch key {key}")]
    DuplicateHandler {
        /// The actor type.
        actor_type: String,
        /// The key registered twice.
        key: DispatchKey,
    },
    /// Two actor types of one name were registered.
    #[error("actor type {actor_type:?} is registered twice")]
    DuplicateType {
        /// The type name.
        actor_type: String,
    },
    /// An actor type name is empty or longer than 64 bytes.
    #[error("invalid actor type name {actor_type:?}")]
    InvalidTypeName {
        /// The rejected name.
        actor_type: String,
    },
}

/// Why an actor cannot move, or its state could not travel (the migration contract of
/// relocation, issue 27; [`crate::actor::ActorTypeBuilder::migrate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MigrationError {
    /// The type neither opted in to migration nor is registered as stateless: relocation is
    /// refused before anything is sealed (`InvalidOperation`).
    #[error(
        "actor type {actor_type:?} cannot be relocated: it neither implements migration \
         (ActorTypeBuilder::migrate) nor is registered stateless (ActorTypeBuilder::stateless)"
    )]
    NotMigratable {
        /// The type.
        actor_type: String,
    },
    /// The type's dehydrate hook failed or its state did not encode (`Internal`).
    #[error("actor type {actor_type:?}: dehydrate failed: {reason}")]
    Dehydrate {
        /// The type.
        actor_type: String,
        /// What failed.
        reason: String,
    },
    /// The state did not decode or the type's rehydrate hook failed (`Internal`).
    #[error("actor type {actor_type:?}: rehydrate failed: {reason}")]
    Rehydrate {
        /// The type.
        actor_type: String,
        /// What failed.
        reason: String,
    },
    /// Stateful bytes for a stateless type, or no state for a stateful one (the source and
    /// target registries disagree on the type) (`InvalidOperation`).
    #[error("actor type {actor_type:?}: the migrated state does not fit its migration mode")]
    StateMismatch {
        /// The type.
        actor_type: String,
    },
}

impl MigrationError {
    /// The public error kind (SB-12).
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            MigrationError::NotMigratable { .. } | MigrationError::StateMismatch { .. } => {
                ErrorKind::InvalidOperation
            }
            MigrationError::Dehydrate { .. } | MigrationError::Rehydrate { .. } => {
                ErrorKind::Internal
            }
        }
    }
}

/// Why an actor operation (create, get, call, destroy) failed. [`ActorError::kind`] gives the
/// public error kind (SB-12).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActorError {
    /// No factory is registered for the type on the owner node (`NotFound`; retrying cannot
    /// help).
    #[error("no actor factory for type {actor_type:?}")]
    UnknownActorType {
        /// The requested type.
        actor_type: String,
    },
    /// No Ready incarnation of the actor exists (`NotFound`).
    #[error("actor {actor_id} not found")]
    ActorNotFound {
        /// The actor.
        actor_id: ActorId,
    },
    /// `create` found an existing incarnation (`InvalidOperation`; use get-or-create).
    #[error("actor {actor_id} already exists (incarnation {object_generation})")]
    AlreadyExists {
        /// The actor.
        actor_id: ActorId,
        /// The existing incarnation.
        object_generation: ObjectGeneration,
    },
    /// The ref names another incarnation than the current one (`InvalidOperation`, SB-12).
    #[error("actor {actor_id}: ref incarnation {expected}, current incarnation {actual}")]
    GenerationMismatch {
        /// The actor.
        actor_id: ActorId,
        /// Incarnation in the ref.
        expected: ObjectGeneration,
        /// Current incarnation at the owner.
        actual: ObjectGeneration,
    },
    /// A stale location, node, authority or lease fence (`Unavailable`, never redirected).
    #[error("actor {actor_id}: stale {fence} fence")]
    StaleFence {
        /// The actor.
        actor_id: ActorId,
        /// Which fence did not match (`node generation`, `authority`, `lease`, `location`).
        fence: &'static str,
    },
    /// The actor is still activating (`Unavailable`; only Ready actors are handed out).
    #[error("actor {actor_id} is not Ready yet")]
    NotReady {
        /// The actor.
        actor_id: ActorId,
    },
    /// Push or close without a current bound session (session-not-bound, `InvalidOperation`,
    /// SB-12, SB-14.5); succeeds once bound.
    #[error("actor {actor_id}: session not bound")]
    SessionNotBound {
        /// The actor.
        actor_id: ActorId,
    },
    /// The owner node is not connected (`Unavailable`).
    #[error("node {node} is unavailable")]
    NodeUnavailable {
        /// The node.
        node: NodeRid,
    },
    /// The actor's application lane is full (`Unavailable`; the work was not queued).
    #[error("actor {actor_id}: application lane full")]
    LaneFull {
        /// The actor.
        actor_id: ActorId,
    },
    /// The work was dropped before its terminal: the actor ended or the runtime shut down
    /// while it was queued (`Unavailable`).
    #[error("the actor ended before this work ran")]
    Ended,
    /// The owner's local lease deadline passed without a successful renewal: the node may no
    /// longer be the owner and acts as none until a renewal succeeds (`Unavailable`, SB-5.11).
    #[error("owner lease deadline passed without a renewal")]
    LeaseLapsed,
    /// The node is shutting down and accepts no new work (`Unavailable`, SB-10).
    #[error("node is shutting down")]
    ShuttingDown,
    /// The handler's turn was dropped before its terminal: its Yield resume was refused because
    /// the unit was sealed for relocation or ended while it waited (`Unavailable`, EG-4.1). The
    /// continuation never ran and never runs; what the handler did before the Yield stands.
    #[error("the handler's resume was refused: its unit was sealed for relocation or ended")]
    ResumeRefused,
    /// The deadline passed first; the call is not resent (`DeadlineExceeded`, SB-12).
    #[error("deadline exceeded")]
    DeadlineExceeded,
    /// The actor type has no handler for the key (`NotFound`).
    #[error("actor type {actor_type:?} has no handler for key {key}")]
    UnknownMessage {
        /// The actor type.
        actor_type: String,
        /// The key.
        key: DispatchKey,
    },
    /// A payload or reply could not be (de)serialised (`InvalidOperation`).
    #[error("codec: {0}")]
    Codec(String),
    /// An actor type with Yield handlers asked to join a Spot whose turns cannot yield (only
    /// SpotWide User and Instance Spots can, EG-16.1, EG-16.3) (`InvalidOperation`).
    #[error("actor type {actor_type:?} yields; spot {spot:?} is not SpotWide or Instance")]
    YieldNotOffered {
        /// The actor type.
        actor_type: String,
        /// The requested Spot.
        spot: String,
    },
    /// The request handler failed: the framework error reply of EG-15 (`Internal`).
    #[error("handler failed: {0}")]
    Handler(String),
    /// A request handler refused the work with this public kind
    /// ([`crate::runtime::HandlerError::Refused`], e.g. a push of the handler without a bound
    /// session: `InvalidOperation`).
    #[error("{detail}")]
    Refused {
        /// Public kind.
        kind: ErrorKind,
        /// Detail for the caller.
        detail: String,
    },
    /// The remote side answered with an error reply of this kind.
    #[error("remote {kind}: {detail}")]
    Remote {
        /// Public kind sent by the remote node.
        kind: ErrorKind,
        /// Bounded detail text.
        detail: String,
    },
    /// A Location Store operation failed.
    #[error("location store: {0}")]
    Store(#[from] StoreError),
    /// The actor cannot be relocated, or its state could not travel.
    #[error("migration: {0}")]
    Migration(#[from] MigrationError),
}

impl ActorError {
    /// The public error kind (SB-12).
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            ActorError::UnknownActorType { .. }
            | ActorError::ActorNotFound { .. }
            | ActorError::UnknownMessage { .. } => ErrorKind::NotFound,
            ActorError::AlreadyExists { .. }
            | ActorError::GenerationMismatch { .. }
            | ActorError::Codec(_)
            | ActorError::SessionNotBound { .. }
            | ActorError::YieldNotOffered { .. } => ErrorKind::InvalidOperation,
            ActorError::StaleFence { .. }
            | ActorError::NotReady { .. }
            | ActorError::NodeUnavailable { .. }
            | ActorError::LaneFull { .. }
            | ActorError::Ended
            | ActorError::LeaseLapsed
            | ActorError::ShuttingDown
            | ActorError::ResumeRefused => ErrorKind::Unavailable,
            ActorError::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            ActorError::Handler(_) => ErrorKind::Internal,
            ActorError::Remote { kind, .. } | ActorError::Refused { kind, .. } => *kind,
            ActorError::Store(e) => e.kind(),
            ActorError::Migration(e) => e.kind(),
        }
    }
}

/// A handler passes on the error of a framework operation it called with its kind (`?` in a
/// handler): a push without a bound session answers `InvalidOperation` (SB-12), not
/// `Internal`.
impl From<ActorError> for crate::runtime::HandlerError {
    fn from(e: ActorError) -> Self {
        crate::runtime::HandlerError::refused(e.kind(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{HandlerError, RuntimeError};

    // spec: SB-12 (push without a current binding → InvalidOperation, wherever it is passed on)
    #[test]
    fn a_handler_passing_an_actor_error_on_keeps_its_kind() {
        let not_bound = ActorError::SessionNotBound {
            actor_id: ActorId::new("e1").unwrap(),
        };
        let text = not_bound.to_string();
        let passed = HandlerError::from(not_bound);
        assert!(matches!(passed, HandlerError::Refused { .. }), "{passed:?}");
        assert_eq!(
            RuntimeError::Handler(passed.clone()).kind(),
            ErrorKind::InvalidOperation
        );
        assert_eq!(passed.to_string(), text);
        // A handler's own failure, and an `Internal` passed on, stay `Internal`.
        let failed = HandlerError::from(ActorError::Handler("boom".into()));
        assert!(matches!(failed, HandlerError::Failed(_)), "{failed:?}");
        assert_eq!(
            RuntimeError::Handler(HandlerError::new("x")).kind(),
            ErrorKind::Internal
        );
    }
}
