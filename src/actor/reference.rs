//! [`ActorRef`]: ActorId + ObjectGeneration + the current location snapshot.

use serde::{Deserialize, Serialize};
use zlink_wire::{
    ActorId, AuthorityOwnerGeneration, MeshName, NodeGeneration, NodeRid, ObjectGeneration,
    OwnerLeaseGeneration,
};

use crate::store::ActorLocation;

/// Where an incarnation lived when the ref was handed out (glossary "ActorRef"; the fields the
/// spec assumes). Used as the route and as the fences a call presents to the owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LocationSnapshot {
    /// Mesh through which the owner is reached.
    pub mesh: MeshName,
    /// Owner node's routing id.
    pub node: NodeRid,
    /// Owner node's process generation.
    pub node_generation: NodeGeneration,
    /// Owner authority fence.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Owner lease fence.
    pub owner_lease_generation: OwnerLeaseGeneration,
}

/// A handle to one **Ready** incarnation of an actor. Cheap to clone; serialisable (the client
/// protocol carries it as an opaque value).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActorRef {
    actor_id: ActorId,
    actor_type: String,
    object_generation: ObjectGeneration,
    location: LocationSnapshot,
}

impl ActorRef {
    /// The ref of a Ready store record.
    pub(crate) fn from_location(loc: &ActorLocation) -> Self {
        Self {
            actor_id: loc.actor_id.clone(),
            actor_type: loc.actor_type.clone(),
            object_generation: loc.object_generation,
            location: LocationSnapshot {
                mesh: loc.mesh.clone(),
                node: loc.owner_node.clone(),
                node_generation: loc.node_generation,
                authority_owner_generation: loc.authority_owner_generation,
                owner_lease_generation: loc.owner_lease_generation,
            },
        }
    }

    /// A ref from its parts: id, type name, incarnation and a wire location snapshot (a
    /// binding's stored route).
    pub(crate) fn from_parts(
        actor_id: ActorId,
        actor_type: String,
        object_generation: ObjectGeneration,
        loc: zlink_wire::ActorLocation,
    ) -> Self {
        Self {
            actor_id,
            actor_type,
            object_generation,
            location: LocationSnapshot {
                mesh: loc.mesh,
                node: loc.node,
                node_generation: loc.node_generation,
                authority_owner_generation: loc.authority_owner_generation,
                owner_lease_generation: loc.owner_lease_generation,
            },
        }
    }

    /// The wire form of the location snapshot (route and fences).
    #[must_use]
    pub fn wire_location(&self) -> zlink_wire::ActorLocation {
        zlink_wire::ActorLocation {
            mesh: self.location.mesh.clone(),
            node: self.location.node.clone(),
            node_generation: self.location.node_generation,
            authority_owner_generation: self.location.authority_owner_generation,
            owner_lease_generation: self.location.owner_lease_generation,
        }
    }

    /// The global id.
    #[must_use]
    pub fn id(&self) -> &ActorId {
        &self.actor_id
    }

    /// The registered actor type.
    #[must_use]
    pub fn actor_type(&self) -> &str {
        &self.actor_type
    }

    /// The incarnation.
    #[must_use]
    pub fn object_generation(&self) -> ObjectGeneration {
        self.object_generation
    }

    /// The location snapshot.
    #[must_use]
    pub fn location(&self) -> &LocationSnapshot {
        &self.location
    }

    /// The owner node.
    #[must_use]
    pub fn node(&self) -> &NodeRid {
        &self.location.node
    }
}

impl std::fmt::Display for ActorRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}#{}@{}",
            self.actor_id, self.object_generation, self.location.node
        )
    }
}
