//! The client protocol (ClientServer, DEALER → node ROUTER) and the node-to-node control
//! requests (RouteMesh). Documented in `docs/ARCHITECTURE.md` ("Client protocol").
//!
//! A client sends **Request (144)** records whose [`DispatchKey`] selects an operation; the
//! payload and the reply payload are MessagePack (`rmp-serde`, named fields) of the types below.
//! Failures come back as **ErrorReply (146)** with the public [`zlink_wire::ErrorKind`]. A
//! **OneWay (147)** with key [`CALL`] is an actor *send* (no reply; failures are logged).
//!
//! | key | request payload | reply payload |
//! |---|---|---|
//! | 0xFFFF0001 `CREATE` | [`CreateActor`] | [`ActorRef`] — a new incarnation; `InvalidOperation` if one exists |
//! | 0xFFFF0002 `GET_OR_CREATE` | [`CreateActor`] | [`ActorRef`] — the Ready incarnation, created if absent |
//! | 0xFFFF0003 `GET` | [`GetActor`] | [`ActorRef`] — `NotFound` if none, `Unavailable` while activating |
//! | 0xFFFF0004 `CALL` | [`CallActor`] | the handler's reply bytes (MessagePack of `M::Reply`) |
//! | 0xFFFF0005 `DESTROY` | [`DestroyActor`] | `()` |
//! | 0xFFFF0006 `NODE_INFO` | `()` | [`NodeInfo`] |
//!
//! `CreateActor::node` names the node that must own the new actor (any node of the mesh; the
//! contacted node forwards the activation to it); `None` = the contacted node.

use serde::{Deserialize, Serialize};
use zlink_wire::DispatchKey;

use crate::actor::{ActorRef, SpotSpec};

/// Create an actor (client key 0xFFFF0001).
pub const CREATE: DispatchKey = DispatchKey::new(0xFFFF_0001);
/// Get or create an actor (client key 0xFFFF0002).
pub const GET_OR_CREATE: DispatchKey = DispatchKey::new(0xFFFF_0002);
/// Look up the Ready ref of an actor (client key 0xFFFF0003).
pub const GET: DispatchKey = DispatchKey::new(0xFFFF_0003);
/// Call an actor: request (144) or send (147) (client key 0xFFFF0004).
pub const CALL: DispatchKey = DispatchKey::new(0xFFFF_0004);
/// Destroy an incarnation (client key 0xFFFF0005).
pub const DESTROY: DispatchKey = DispatchKey::new(0xFFFF_0005);
/// Node identity and peers (client key 0xFFFF0006).
pub const NODE_INFO: DispatchKey = DispatchKey::new(0xFFFF_0006);

/// Whether `key` is one of the framework's client operations or node control keys (the
/// reserved range from [`crate::session::RESERVED_KEYS_START`]); every other key is an
/// application packet for the session's handler registry.
#[must_use]
pub fn is_framework_key(key: DispatchKey) -> bool {
    key.get() >= crate::session::RESERVED_KEYS_START
}

/// Node-to-node: activate an actor on the receiving node (payload [`Activate`]).
pub(crate) const PEER_ACTIVATE: DispatchKey = DispatchKey::new(0xFFFF_FF01);
/// Node-to-node: destroy an incarnation owned by the receiving node (payload [`DestroyActor`]).
pub(crate) const PEER_DESTROY: DispatchKey = DispatchKey::new(0xFFFF_FF02);

/// Payload of `CREATE` / `GET_OR_CREATE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateActor {
    /// Registered actor type (`NotFound` if the owner node has no factory for it).
    pub actor_type: String,
    /// Global actor id.
    pub actor_id: String,
    /// Owner node (NodeRid); `None` = the contacted node.
    pub node: Option<String>,
    /// Spot to join; `None` = the owner's Entry Spot.
    pub spot: Option<SpotSpec>,
    /// Factory input.
    #[serde(with = "serde_bytes")]
    pub init: Vec<u8>,
}

/// Payload of `GET`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetActor {
    /// Global actor id.
    pub actor_id: String,
}

/// Payload of `CALL`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallActor {
    /// The target incarnation and its location snapshot.
    pub actor: ActorRef,
    /// The message kind's key.
    pub key: u32,
    /// MessagePack of the message.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// Time the node waits for the actor's reply, in ms (0 = the node default).
    pub timeout_ms: u32,
}

/// Payload of `DESTROY` (and of the node-to-node destroy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestroyActor {
    /// The incarnation to destroy.
    pub actor: ActorRef,
}

/// Reply of `NODE_INFO`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// NodeRid.
    pub node: String,
    /// Process generation.
    pub generation: u64,
    /// Mesh name.
    pub mesh: String,
    /// Configured peers that are up.
    pub peers_up: Vec<String>,
    /// Actor types this node hosts.
    pub actor_types: Vec<String>,
    /// Actors this node owns now.
    pub local_actors: u64,
    /// Client sessions open on this node now.
    #[serde(default)]
    pub sessions: u64,
    /// Refused session records by `"<record>/<reason>"` (the closed vocabulary of
    /// `session::FlowReject`, SB-5.9); only non-zero counters.
    #[serde(default)]
    pub session_rejects: std::collections::BTreeMap<String, u64>,
    /// Records and connections the mesh transport dropped, by reason (the closed vocabulary of
    /// `zlink_mesh::DropReason`, snake_case); only non-zero counters.
    #[serde(default)]
    pub mesh_drops: std::collections::BTreeMap<String, u64>,
}

/// Whether an activation may return an existing incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ActivateMode {
    Create,
    GetOrCreate,
}

/// Node-to-node activation request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Activate {
    pub mode: ActivateMode,
    pub actor_type: String,
    pub actor_id: String,
    pub spot: Option<SpotSpec>,
    #[serde(with = "serde_bytes")]
    pub init: Vec<u8>,
    /// The send that triggered this activation (EG-14 cold activation, step (1)); absent in
    /// older peers' requests.
    #[serde(default)]
    pub first: Option<FirstRecord>,
}

/// The first record of a cold activation: a send captured before the reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FirstRecord {
    pub key: u32,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// Encodes a protocol value (named-field MessagePack).
pub(crate) fn encode<T: Serialize>(v: &T) -> Result<bytes::Bytes, crate::actor::ActorError> {
    rmp_serde::to_vec_named(v)
        .map(bytes::Bytes::from)
        .map_err(|e| crate::actor::ActorError::Codec(e.to_string()))
}

/// Decodes a protocol value.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    b: &[u8],
) -> Result<T, crate::actor::ActorError> {
    rmp_serde::from_slice(b).map_err(|e| crate::actor::ActorError::Codec(e.to_string()))
}
