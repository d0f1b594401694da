//! Errors of the Location Store boundary.
//!
//! Three families are kept apart: *fence/state outcomes* (another node moved, destroyed or
//! re-created the actor, or a lease ended — normal in a distributed system), *local misuse*
//! (wrong type, bad URL) and *backend failure* ([`StoreError::Unavailable`]). [`StoreError::kind`]
//! maps each to the public error kind of the spec (SB-12).

use zlink_wire::ErrorKind;

use super::types::{ActivationState, AuthorityFence, OwnerFence};
use super::{ActorId, NodeGeneration, NodeRid, ObjectGeneration, OwnerLeaseGeneration};

/// Boxed backend error (SQLite, Redis, I/O).
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a Location Store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The actor has no record: never created, or destroyed. Public kind `NotFound`.
    #[error("actor {actor_id} has no location record")]
    NotFound {
        /// Actor looked up.
        actor_id: ActorId,
    },
    /// Compare-and-swap conflict: the stored fence (owner authority or version) differs from the
    /// caller's, because another node moved or re-reserved the actor. A stale fence: public kind
    /// `Unavailable`, never redirected (SB-12).
    #[error("fence mismatch for actor {actor_id}: expected {expected}, stored {actual}")]
    FenceMismatch {
        /// Actor concerned.
        actor_id: ActorId,
        /// Fence the caller presented.
        expected: AuthorityFence,
        /// Fence currently stored.
        actual: AuthorityFence,
    },
    /// An owner-side write (`destroy`) presented an owner authority that no longer holds the
    /// record: another node took it over, or the caller's owner lease is another one. A stale
    /// owner fence: public kind `Unavailable`, never redirected (SB-12).
    #[error("owner fence mismatch for actor {actor_id}: presented {presented}, stored {stored}")]
    OwnerMismatch {
        /// Actor concerned.
        actor_id: ActorId,
        /// The authority the caller presented.
        presented: Box<OwnerFence>,
        /// The authority stored.
        stored: Box<OwnerFence>,
    },
    /// The stored incarnation differs from the caller's `ObjectGeneration` (destroyed and
    /// re-created). Public kind `InvalidOperation` (SB-12, SB-4.1).
    #[error("actor {actor_id} is incarnation {actual}, not {expected}")]
    GenerationMismatch {
        /// Actor concerned.
        actor_id: ActorId,
        /// Generation the caller presented.
        expected: ObjectGeneration,
        /// Generation currently stored.
        actual: ObjectGeneration,
    },
    /// A record of another actor type exists under this `ActorId`. Public kind
    /// `InvalidOperation`.
    #[error("actor {actor_id} has type {stored:?}, not {requested:?}")]
    ActorTypeMismatch {
        /// Actor concerned.
        actor_id: ActorId,
        /// Stored type.
        stored: String,
        /// Requested type.
        requested: String,
    },
    /// The record is not in a state that allows the operation (for example `cas_owner` while
    /// still `Activating`). Public kind `Unavailable` (retry after activation completes).
    #[error("actor {actor_id} is {state}; the operation needs another state")]
    InvalidState {
        /// Actor concerned.
        actor_id: ActorId,
        /// Its current state.
        state: ActivationState,
    },
    /// The named owner lease is not live: it expired, was released, or a newer lease of the
    /// same node superseded it. The holder must stop acting as owner and register again. A stale
    /// owner fence: public kind `Unavailable`.
    #[error("owner lease {lease_generation} of node {node} is not live")]
    LeaseNotLive {
        /// Node of the lease.
        node: NodeRid,
        /// Lease generation presented.
        lease_generation: OwnerLeaseGeneration,
    },
    /// A newer process generation of this node is already registered; the caller is a stale
    /// process. Public kind `Unavailable`.
    #[error("node {node} generation {offered} is older than the registered {registered}")]
    StaleNodeGeneration {
        /// Node concerned.
        node: NodeRid,
        /// Generation already registered.
        registered: NodeGeneration,
        /// Generation offered.
        offered: NodeGeneration,
    },
    /// A counter reached its maximum (u64 overflow); the record can no longer change. Public
    /// kind `Unavailable`.
    #[error("a generation counter of {what} is exhausted")]
    Exhausted {
        /// Which counter.
        what: &'static str,
    },
    /// The store URL is malformed (startup configuration error).
    #[error("invalid store URL {url:?}: {reason}")]
    InvalidUrl {
        /// URL given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The URL names a backend this build does not provide (`rediss://`: Redis over TLS is not
    /// built in; startup configuration error).
    #[error(
        "store backend {scheme:?} is not supported (use sqlite:///path, redis://HOST or memory:)"
    )]
    UnsupportedBackend {
        /// URL scheme.
        scheme: String,
    },
    /// The backend failed or cannot be reached (I/O, lock timeout, closed store thread, corrupt
    /// data). Public kind `Unavailable`; the operation may or may not have been applied only if
    /// the backend says so (SQLite: never applied, the transaction rolled back).
    #[error("{backend} store unavailable")]
    Unavailable {
        /// Backend name (`sqlite`, `memory`, …).
        backend: &'static str,
        /// Underlying error.
        #[source]
        source: BackendError,
    },
}

impl StoreError {
    /// The public error kind of the spec this failure maps to (SB-12).
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound { .. } => ErrorKind::NotFound,
            StoreError::GenerationMismatch { .. }
            | StoreError::ActorTypeMismatch { .. }
            | StoreError::InvalidUrl { .. }
            | StoreError::UnsupportedBackend { .. } => ErrorKind::InvalidOperation,
            StoreError::FenceMismatch { .. }
            | StoreError::OwnerMismatch { .. }
            | StoreError::InvalidState { .. }
            | StoreError::LeaseNotLive { .. }
            | StoreError::StaleNodeGeneration { .. }
            | StoreError::Exhausted { .. }
            | StoreError::Unavailable { .. } => ErrorKind::Unavailable,
        }
    }

    /// `true` for the configuration errors that must fail startup (bad or unsupported URL).
    #[must_use]
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            StoreError::InvalidUrl { .. } | StoreError::UnsupportedBackend { .. }
        )
    }

    pub(crate) fn backend(backend: &'static str, source: impl Into<BackendError>) -> Self {
        StoreError::Unavailable {
            backend,
            source: source.into(),
        }
    }
}
