//! Records and fences of the Location Store.
//!
//! Invariants: an [`ActorLocation`] is always a complete snapshot of one stored record (never a
//! partial update); [`AuthorityFence`] is exactly the part of it a compare-and-swap checks.

use std::fmt;

use super::time::StoreTime;
use super::{
    ActorId, AuthorityOwnerGeneration, MeshName, NodeGeneration, NodeRid, ObjectGeneration,
    OwnerLeaseGeneration,
};

/// Version of one actor record: grows by one on every change of that record and never repeats
/// for an `ActorId`, also across destroy + re-create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreVersion(u64);

impl StoreVersion {
    /// Wraps a raw value.
    #[must_use]
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for StoreVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// Identity of one owner lease lifecycle: the node process and the lease generation it holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseHolder {
    /// Routing id of the node.
    pub node: NodeRid,
    /// Process generation of the node.
    pub node_generation: NodeGeneration,
    /// The lease lifecycle (fence for store and runtime, EG-14).
    pub lease_generation: OwnerLeaseGeneration,
}

/// A registered owner lease, as returned by `register_owner` / `renew_owner`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerLease {
    /// Who holds the lease.
    pub holder: LeaseHolder,
    /// Store time at which the lease stops being live (exclusive).
    pub expires_at: StoreTime,
}

impl OwnerLease {
    /// Whether the lease is live at `now`, judged by its expiry alone.
    #[must_use]
    pub fn is_live_at(&self, now: StoreTime) -> bool {
        now < self.expires_at
    }
}

/// A prospective or current owner of an actor: the mesh it is reached through and the lease of
/// the owning node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ActorOwner {
    /// Mesh through which the owner is reached (a node may belong to several, SB-3.4).
    pub mesh: MeshName,
    /// The owning node's lease.
    pub holder: LeaseHolder,
}

/// Activation state of an actor record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActivationState {
    /// Reserved; the owner runs the factory. Not handed out to applications.
    Activating,
    /// Created, initialised, able to take messages; the only state handed out.
    Ready,
}

impl fmt::Display for ActivationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ActivationState::Activating => "activating",
            ActivationState::Ready => "ready",
        })
    }
}

/// The compare-and-swap fence of an actor record: incarnation, owner authority and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AuthorityFence {
    /// Incarnation the caller acts on.
    pub object_generation: ObjectGeneration,
    /// Owner authority the caller saw.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Record version the caller saw.
    pub version: StoreVersion,
}

impl fmt::Display for AuthorityFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(object {}, authority {}, {})",
            self.object_generation, self.authority_owner_generation, self.version
        )
    }
}

/// The full owner authority over one incarnation, presented by every owner-side write that is
/// not a compare-and-swap on the version (`destroy`: a destroy proper, a burnt reservation, the
/// clearing of an orphan): the incarnation, the owner authority and the owner lease that holds
/// it. It matches only while the record still names that owner under that authority and the
/// lease is live, so a stale owner (after lease loss and takeover) can never remove the new
/// owner's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OwnerFence {
    /// Incarnation the caller acts on.
    pub object_generation: ObjectGeneration,
    /// Owner authority the caller holds.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// The owner lease the caller holds.
    pub holder: LeaseHolder,
}

impl fmt::Display for OwnerFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(object {}, authority {}, owner {} generation {} lease {})",
            self.object_generation,
            self.authority_owner_generation,
            self.holder.node,
            self.holder.node_generation,
            self.holder.lease_generation
        )
    }
}

/// One stored actor record: the current location snapshot of an incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorLocation {
    /// Global identity.
    pub actor_id: ActorId,
    /// Registered actor type (selects the factory).
    pub actor_type: String,
    /// Incarnation: kept across relocation, new after destroy + re-create.
    pub object_generation: ObjectGeneration,
    /// Mesh through which the owner is reached.
    pub mesh: MeshName,
    /// Owner node's routing id.
    pub owner_node: NodeRid,
    /// Owner node's process generation.
    pub node_generation: NodeGeneration,
    /// Owner authority fence; changes on every owner change.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Owner's lease lifecycle.
    pub owner_lease_generation: OwnerLeaseGeneration,
    /// Activation state.
    pub state: ActivationState,
    /// Record version.
    pub version: StoreVersion,
}

impl ActorLocation {
    /// The fence a later `mark_ready` / `cas_owner` presents.
    #[must_use]
    pub fn fence(&self) -> AuthorityFence {
        AuthorityFence {
            object_generation: self.object_generation,
            authority_owner_generation: self.authority_owner_generation,
            version: self.version,
        }
    }

    /// The owner authority a `destroy` by this record's owner presents.
    #[must_use]
    pub fn owner_fence(&self) -> OwnerFence {
        OwnerFence {
            object_generation: self.object_generation,
            authority_owner_generation: self.authority_owner_generation,
            holder: self.holder(),
        }
    }

    /// The owner's lease identity.
    #[must_use]
    pub fn holder(&self) -> LeaseHolder {
        LeaseHolder {
            node: self.owner_node.clone(),
            node_generation: self.node_generation,
            lease_generation: self.owner_lease_generation,
        }
    }

    /// The owner (mesh and lease).
    #[must_use]
    pub fn owner(&self) -> ActorOwner {
        ActorOwner {
            mesh: self.mesh.clone(),
            holder: self.holder(),
        }
    }
}

/// Input of `reserve_activation`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivationRequest {
    /// Actor to activate.
    pub actor_id: ActorId,
    /// Its type (must equal the stored type when a record exists).
    pub actor_type: String,
    /// The candidate owner: the calling node, through one of its meshes.
    pub owner: ActorOwner,
}

/// Outcome of `reserve_activation` (EG-14).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Reservation {
    /// The candidate is the confirmed owner of an `Activating` record: it alone runs the factory,
    /// then calls `mark_ready` with this location's fence.
    Won(ActorLocation),
    /// A live owner already holds the record (`Activating` or `Ready`); the caller must not run
    /// the factory. The owner may be the candidate itself (a repeated reservation).
    Held(ActorLocation),
}

impl Reservation {
    /// The location, whoever holds it.
    #[must_use]
    pub fn location(&self) -> &ActorLocation {
        match self {
            Reservation::Won(l) | Reservation::Held(l) => l,
        }
    }

    /// The location, whoever holds it.
    #[must_use]
    pub fn into_location(self) -> ActorLocation {
        match self {
            Reservation::Won(l) | Reservation::Held(l) => l,
        }
    }

    /// `true` for [`Reservation::Won`].
    #[must_use]
    pub fn is_won(&self) -> bool {
        matches!(self, Reservation::Won(_))
    }
}
