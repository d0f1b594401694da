//! The hand-off records between a relocation's source and target (`docs/MESH.md`, "Relocation
//! hand-off"). They travel as generic 144 Requests on the relay connection with keys of the
//! framework's reserved node range (the node's `protocol::PEER_RELOCATE_*`), their reply on the
//! completion connection; the body is MessagePack (`rmp-serde`, named fields) of the types here.
//! No new wire command: 42 / 43 / 44 stay the sessions' records.
//!
//! | record | from → to | reply |
//! |---|---|---|
//! | [`RestoreRecord`] | source → target | `()` = relay-ready; an ErrorReply = the Restore failed |
//! | [`WorkRecord`] | source → target | a request's reply (forwarded by the source to the original requester), `()` for a send |
//! | [`CutoverRecord`] | source → target | `()` |
//! | [`ResultRecord`] | target → source | `()` |
//!
//! Decoding is strict (unknown fields refused) and never panics; a record that does not decode,
//! or comes from a node that is not the relocation's source (target), is refused and counted.

use serde::{Deserialize, Serialize};
use zlink_wire::{
    ActorId, AuthorityOwnerGeneration, BindingGeneration, MeshName, NodeGeneration, NodeRid,
    ObjectGeneration, OwnerId, OwnerLeaseGeneration, RelocationId, SealIdentity,
    SessionLifecycleGeneration, SessionRid,
};

use super::{MigratedState, RestoreRequest, RestoredActor, SealTarget, Subject};
use crate::actor::SpotSpec;
use crate::store::{ActivationState, ActorLocation, AuthorityFence, StoreVersion};

/// Why a hand-off record was refused (the closed vocabulary of the `relocation_refused`
/// counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum HandoffRefusal {
    /// The body did not decode.
    #[error("malformed hand-off record")]
    Malformed,
    /// No relocation with this id is in progress here.
    #[error("unknown relocation")]
    UnknownRelocation,
    /// The sender is not this relocation's source (or target).
    #[error("hand-off record from a node that is not the relocation's peer")]
    WrongPeer,
    /// The record names an actor that is not part of the relocation.
    #[error("actor not part of the relocation")]
    UnknownActor,
}

impl HandoffRefusal {
    /// Every refusal, for counters.
    pub const ALL: [HandoffRefusal; 4] = [
        HandoffRefusal::Malformed,
        HandoffRefusal::UnknownRelocation,
        HandoffRefusal::WrongPeer,
        HandoffRefusal::UnknownActor,
    ];

    /// The counter label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            HandoffRefusal::Malformed => "malformed",
            HandoffRefusal::UnknownRelocation => "unknown_relocation",
            HandoffRefusal::WrongPeer => "wrong_peer",
            HandoffRefusal::UnknownActor => "unknown_actor",
        }
    }
}

/// One session seal whose owner gets the 44 commit from the target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealRecord {
    /// The session owner node.
    pub session_owner: NodeRid,
    /// The seal identity.
    pub seal: SealIdentity,
}

/// The moving actor's bound session as its owner registered it (SB-5.6): the target is the
/// actor owner of this binding after the commit (SB-8.9).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingRecord {
    /// The session owner node.
    pub session_owner: NodeRid,
    /// The session owner's lifecycle generation.
    pub lifecycle: SessionLifecycleGeneration,
    /// The session owner's host id.
    pub owner_id: OwnerId,
    /// The session owner's lease generation at bind.
    pub owner_lease: OwnerLeaseGeneration,
    /// The bound session.
    pub session: SessionRid,
    /// The binding generation.
    pub generation: BindingGeneration,
}

/// Where a moving actor lives on the target: its type, its Spot, its bound session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The registered type.
    pub actor_type: String,
    /// The Spot (same name and kind as on the source).
    pub spot: SpotSpec,
    /// The bound session, if any.
    pub binding: Option<BindingRecord>,
}

/// One moving actor in a [`RestoreRecord`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreActor {
    /// The actor (kept).
    pub actor: ActorId,
    /// Its registered type (the target must host it).
    pub actor_type: String,
    /// The Spot it joins on the target (same name and kind as on the source).
    pub spot: SpotSpec,
    /// Its incarnation (kept).
    pub object_generation: ObjectGeneration,
    /// The relocation fence's authority generation.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// The relocation fence's record version.
    pub version: u64,
    /// The dehydrated state; `None` for a stateless type.
    #[serde(with = "serde_bytes")]
    pub state: Option<Vec<u8>>,
    /// The seals whose sessions get the 44 commit from the target.
    pub seals: Vec<SealRecord>,
    /// The bound session the target takes over.
    pub binding: Option<BindingRecord>,
}

/// Restore (source → target): install a temporary queue per actor and rehydrate; no dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreRecord {
    /// The relocation.
    pub relocation: RelocationId,
    /// A whole-Spot relocation: the Spot's name (every actor below is a member of it); absent
    /// for one actor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<String>,
    /// The moving actors.
    pub actors: Vec<RestoreActor>,
}

/// One captured record (source → target), in arrival order: a request (its reply goes back on
/// this record's reply and the source forwards it to the original requester with its own
/// correlation) or a send.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkRecord {
    /// The relocation.
    pub relocation: RelocationId,
    /// The actor the record is for.
    pub actor: ActorId,
    /// The message key.
    pub key: u32,
    /// `true`: a send (the target acknowledges at once); `false`: a request (the target replies
    /// once the actor ran it).
    pub send: bool,
    /// The message payload.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// Cutover (source → target): everything captured was sent before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CutoverRecord {
    /// The relocation.
    pub relocation: RelocationId,
}

/// One committed location in a [`ResultRecord`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommittedActor {
    /// The actor.
    pub actor: ActorId,
    /// Its type.
    pub actor_type: String,
    /// Its incarnation (kept).
    pub object_generation: ObjectGeneration,
    /// The mesh of the new owner.
    pub mesh: MeshName,
    /// The new owner.
    pub owner_node: NodeRid,
    /// The new owner's process generation.
    pub node_generation: NodeGeneration,
    /// The new authority generation.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// The new owner's lease generation.
    pub owner_lease_generation: OwnerLeaseGeneration,
    /// The record version after the CAS.
    pub version: u64,
}

/// The target's result (target → source) after its `cas_owner`s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultRecord {
    /// The relocation.
    pub relocation: RelocationId,
    /// Actors now owned by the target.
    pub committed: Vec<CommittedActor>,
    /// Actors whose CAS failed.
    pub failed: Vec<ActorId>,
}

/// Encodes a hand-off record.
///
/// # Errors
/// The encoder's message (never for these types in practice).
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, String> {
    rmp_serde::to_vec_named(v).map_err(|e| e.to_string())
}

/// Decodes a hand-off record from untrusted bytes (never panics).
///
/// # Errors
/// [`HandoffRefusal::Malformed`].
pub fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, HandoffRefusal> {
    rmp_serde::from_slice(b).map_err(|_| HandoffRefusal::Malformed)
}

impl RestoreRecord {
    /// The record for `request`; `placement` gives each actor's type, Spot and binding, in
    /// order.
    #[must_use]
    pub fn of(request: &RestoreRequest, placement: &[Placement]) -> Self {
        RestoreRecord {
            relocation: request.relocation,
            spot: match &request.subject {
                Subject::Actor => None,
                Subject::Spot(name) => Some(name.clone()),
            },
            actors: request
                .actors
                .iter()
                .zip(placement)
                .map(|(a, p)| RestoreActor {
                    actor: a.actor.clone(),
                    actor_type: p.actor_type.clone(),
                    spot: p.spot.clone(),
                    binding: p.binding.clone(),
                    object_generation: a.object_generation,
                    authority_owner_generation: a.source_fence.authority_owner_generation,
                    version: a.source_fence.version.get(),
                    state: match &a.state {
                        MigratedState::Stateless => None,
                        MigratedState::Bytes(b) => Some(b.clone()),
                    },
                    seals: a
                        .seals
                        .iter()
                        .map(|s| SealRecord {
                            session_owner: s.session_owner.clone(),
                            seal: s.seal.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The request the target core takes, and each actor's placement.
    #[must_use]
    pub fn into_request(self) -> (RestoreRequest, Vec<Placement>) {
        let mut placement = Vec::with_capacity(self.actors.len());
        let actors = self
            .actors
            .into_iter()
            .map(|a| {
                placement.push(Placement {
                    actor_type: a.actor_type,
                    spot: a.spot,
                    binding: a.binding,
                });
                RestoredActor {
                    source_fence: AuthorityFence {
                        object_generation: a.object_generation,
                        authority_owner_generation: a.authority_owner_generation,
                        version: StoreVersion::new(a.version),
                    },
                    actor: a.actor,
                    object_generation: a.object_generation,
                    state: match a.state {
                        None => MigratedState::Stateless,
                        Some(b) => MigratedState::Bytes(b),
                    },
                    seals: a
                        .seals
                        .into_iter()
                        .map(|s| SealTarget {
                            session_owner: s.session_owner,
                            seal: s.seal,
                        })
                        .collect(),
                }
            })
            .collect();
        (
            RestoreRequest {
                relocation: self.relocation,
                subject: self.spot.map_or(Subject::Actor, Subject::Spot),
                actors,
            },
            placement,
        )
    }
}

impl From<&ActorLocation> for CommittedActor {
    fn from(l: &ActorLocation) -> Self {
        CommittedActor {
            actor: l.actor_id.clone(),
            actor_type: l.actor_type.clone(),
            object_generation: l.object_generation,
            mesh: l.mesh.clone(),
            owner_node: l.owner_node.clone(),
            node_generation: l.node_generation,
            authority_owner_generation: l.authority_owner_generation,
            owner_lease_generation: l.owner_lease_generation,
            version: l.version.get(),
        }
    }
}

impl From<CommittedActor> for ActorLocation {
    fn from(c: CommittedActor) -> Self {
        ActorLocation {
            actor_id: c.actor,
            actor_type: c.actor_type,
            object_generation: c.object_generation,
            mesh: c.mesh,
            owner_node: c.owner_node,
            node_generation: c.node_generation,
            authority_owner_generation: c.authority_owner_generation,
            owner_lease_generation: c.owner_lease_generation,
            state: ActivationState::Ready,
            version: StoreVersion::new(c.version),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Decoding untrusted bytes never panics and refuses what is not a record.
    #[test]
    fn garbage_and_unknown_fields_are_refused() {
        for bytes in [
            &b""[..],
            &[0xc1],
            &[0x91, 0xff],
            &[0xdf, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert_eq!(
                decode::<RestoreRecord>(bytes).unwrap_err(),
                HandoffRefusal::Malformed
            );
            assert_eq!(
                decode::<WorkRecord>(bytes).unwrap_err(),
                HandoffRefusal::Malformed
            );
        }
        #[derive(Serialize)]
        struct Extra {
            relocation: RelocationId,
            extra: u8,
        }
        let b = encode(&Extra {
            relocation: RelocationId::new(1),
            extra: 1,
        })
        .unwrap();
        assert_eq!(
            decode::<CutoverRecord>(&b).unwrap_err(),
            HandoffRefusal::Malformed
        );
    }

    // A Spot's Restore names the Spot and comes back as a Spot subject; one actor's carries no
    // `spot` field at all (a node that never moves Spots reads it as before).
    #[test]
    fn restore_names_the_spot_of_a_spot_relocation() {
        let request = |subject| RestoreRequest {
            relocation: RelocationId::new(5),
            subject,
            actors: Vec::new(),
        };
        let spot = RestoreRecord::of(&request(Subject::Spot("room".into())), &[]);
        let back: RestoreRecord = decode(&encode(&spot).unwrap()).unwrap();
        assert_eq!(back.spot.as_deref(), Some("room"));
        assert_eq!(back.into_request().0.subject, Subject::Spot("room".into()));
        let one = RestoreRecord::of(&request(Subject::Actor), &[]);
        let bytes = encode(&one).unwrap();
        assert!(!bytes.windows(4).any(|w| w == b"spot"));
        let back: RestoreRecord = decode(&bytes).unwrap();
        assert_eq!(back.into_request().0.subject, Subject::Actor);
    }

    #[test]
    fn work_round_trips() {
        let w = WorkRecord {
            relocation: RelocationId::new(7),
            actor: ActorId::new("a").unwrap(),
            key: 3,
            send: false,
            payload: vec![1, 2, 3],
        };
        assert_eq!(decode::<WorkRecord>(&encode(&w).unwrap()).unwrap(), w);
    }
}
