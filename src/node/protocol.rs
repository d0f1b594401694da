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
//! | 0xFFFF0007 `LIST_ACTORS` | [`ListActors`] | [`ActorList`] — the node's own actors, by id, a page at a time |
//! | 0xFFFF0008 `LIST_SESSIONS` | [`ListSessions`] | [`SessionList`] — the node's client sessions, by id, a page at a time |
//! | 0xFFFF0009 `COUNTERS` | `()` | [`NodeCounters`] — what the metrics endpoint serves |
//! | 0xFFFF000A `AUTHENTICATE` | [`Authenticate`] | `()` — the session is the operator from now on |
//!
//! `LIST_ACTORS`, `LIST_SESSIONS` and `COUNTERS` are the operator's (`zlink-node ctl`); they
//! read the node's state and change nothing. Who may send which operation is decided by the
//! node's [`crate::node::access`] settings (by default: only a session that presented the
//! operator credential with `AUTHENTICATE`).
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
/// The node's actors, a page at a time (client key 0xFFFF0007, operator).
pub const LIST_ACTORS: DispatchKey = DispatchKey::new(0xFFFF_0007);
/// The node's client sessions, a page at a time (client key 0xFFFF0008, operator).
pub const LIST_SESSIONS: DispatchKey = DispatchKey::new(0xFFFF_0008);
/// The node's counters (client key 0xFFFF0009, operator).
pub const COUNTERS: DispatchKey = DispatchKey::new(0xFFFF_0009);
/// Present the operator credential (client key 0xFFFF000A, payload [`Authenticate`]): the
/// session may do every operation from then on.
pub const AUTHENTICATE: DispatchKey = DispatchKey::new(0xFFFF_000A);
/// Relocate an actor this node owns to another node of the mesh (client key 0xFFFF000B,
/// operator, payload [`RelocateActor`], reply [`RelocationDone`] once the relocation ended).
pub const RELOCATE: DispatchKey = DispatchKey::new(0xFFFF_000B);
/// The node's relocations in progress and its last finished ones, with the counters (client
/// key 0xFFFF000C, operator, payload `()`, reply [`RelocationList`]).
pub const LIST_RELOCATIONS: DispatchKey = DispatchKey::new(0xFFFF_000C);
/// Relocate a whole Spot this node hosts (every member actor, as one unit) to another node of
/// the mesh (client key 0xFFFF000D, operator, payload [`RelocateSpot`], reply
/// [`SpotRelocationDone`] once the relocation ended).
pub const RELOCATE_SPOT: DispatchKey = DispatchKey::new(0xFFFF_000D);

/// The most entries one `LIST_ACTORS` / `LIST_SESSIONS` reply carries (a larger `limit` is
/// cut to it).
pub const MAX_PAGE: u32 = 1_000;

/// Whether `key` is one of the framework's client operations or node control keys (the
/// reserved range from [`crate::session::RESERVED_KEYS_START`]); every other key is an
/// application packet for the session's handler registry.
#[must_use]
pub fn is_framework_key(key: DispatchKey) -> bool {
    key.get() >= crate::session::RESERVED_KEYS_START
}

/// Payload of `RELOCATE`: the actor (owned by the contacted node) and the node it moves to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocateActor {
    /// The actor's id.
    pub actor_id: String,
    /// The target node's routing id.
    pub to: String,
}

/// Reply of `RELOCATE`: the relocation moved the actor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocationDone {
    /// The relocation's id.
    pub relocation: u64,
    /// The actor's ref at the target (same ActorId and ObjectGeneration).
    pub actor: ActorRef,
    /// The node it left.
    pub from: String,
    /// The node that owns it now.
    pub to: String,
    /// Records captured on the source and relayed to the target.
    pub relayed: u64,
    /// From start to the target's result, in milliseconds.
    pub duration_ms: u64,
    /// The source's phases with their durations in milliseconds.
    pub phases: Vec<(String, u64)>,
}

/// Payload of `RELOCATE_SPOT`: the Spot (hosted by the contacted node, SpotWide User or
/// Instance) and the node it moves to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocateSpot {
    /// The Spot's name.
    pub spot: String,
    /// The target node's routing id.
    pub to: String,
}

/// Reply of `RELOCATE_SPOT`: the relocation moved every member of the Spot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpotRelocationDone {
    /// The relocation's id.
    pub relocation: u64,
    /// The Spot's name.
    pub spot: String,
    /// The members' refs at the target (same ActorIds and ObjectGenerations).
    pub actors: Vec<ActorRef>,
    /// The node it left.
    pub from: String,
    /// The node that hosts it now.
    pub to: String,
    /// Records captured on the source and relayed to the target.
    pub relayed: u64,
    /// From start to the target's result, in milliseconds.
    pub duration_ms: u64,
    /// The source's phases with their durations in milliseconds.
    pub phases: Vec<(String, u64)>,
}

/// Reply of `LIST_RELOCATIONS`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocationList {
    /// Finished relocations (oldest first, the last 64), then those in progress.
    pub relocations: Vec<super::RelocationSummary>,
    /// The node's relocation counters.
    pub counters: super::RelocationCounters,
}

/// Node-to-node: activate an actor on the receiving node (payload [`Activate`]).
pub(crate) const PEER_ACTIVATE: DispatchKey = DispatchKey::new(0xFFFF_FF01);
/// Node-to-node: destroy an incarnation owned by the receiving node (payload [`DestroyActor`]).
pub(crate) const PEER_DESTROY: DispatchKey = DispatchKey::new(0xFFFF_FF02);
/// Node-to-node, relocation source → target: Restore (`relocation::records::RestoreRecord`);
/// the reply is relay-ready.
pub(crate) const PEER_RELOCATE_RESTORE: DispatchKey = DispatchKey::new(0xFFFF_FF03);
/// Node-to-node, relocation source → target: one captured record
/// (`relocation::records::WorkRecord`); the reply is the request's reply (`()` for a send).
pub(crate) const PEER_RELOCATE_WORK: DispatchKey = DispatchKey::new(0xFFFF_FF04);
/// Node-to-node, relocation source → target: cutover (`relocation::records::CutoverRecord`).
pub(crate) const PEER_RELOCATE_CUTOVER: DispatchKey = DispatchKey::new(0xFFFF_FF05);
/// Node-to-node, relocation target → source: the result (`relocation::records::ResultRecord`).
pub(crate) const PEER_RELOCATE_RESULT: DispatchKey = DispatchKey::new(0xFFFF_FF06);
/// Node-to-node: a record forwarded once by a moved actor's old owner to its new owner
/// (Message Follow, SB-5.10; payload `node::follow::Followed`).
pub(crate) const PEER_FOLLOW: DispatchKey = DispatchKey::new(0xFFFF_FF10);

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

/// Payload of `AUTHENTICATE`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authenticate {
    /// The node's operator credential (its bytes as configured).
    #[serde(with = "serde_bytes")]
    pub credential: Vec<u8>,
}

impl std::fmt::Debug for Authenticate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticate { credential: .. }")
    }
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
    /// Every configured peer (itself excluded), up or not.
    #[serde(default)]
    pub peers: Vec<String>,
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
    /// Refused client operations by `"<operation>/<reason>"` (the closed vocabularies of
    /// [`crate::node::access::ClientOperation`] and [`crate::node::access::Refusal`]); only
    /// non-zero counters.
    #[serde(default)]
    pub client_refusals: std::collections::BTreeMap<String, u64>,
    /// Message Follow on this node as the old owner of moved actors (SB-5.10): `entries` (held
    /// now), `installed`, `expired`, `evicted`, `forwarded` and `refused/<reason>` (the closed
    /// vocabulary of `relocation::FollowRefusal`); only non-zero counters, and absent when
    /// all are zero.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub message_follow: std::collections::BTreeMap<String, u64>,
}

/// Payload of `LIST_ACTORS`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListActors {
    /// Only actors whose id sorts after this one (the `next` of the previous page).
    #[serde(default)]
    pub after: Option<String>,
    /// Page size; 0 or more than [`MAX_PAGE`] = [`MAX_PAGE`].
    #[serde(default)]
    pub limit: u32,
}

/// One actor owned by the answering node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorEntry {
    /// Global actor id.
    pub actor_id: String,
    /// Registered actor type.
    pub actor_type: String,
    /// The incarnation (ObjectGeneration).
    pub object_generation: u64,
    /// Name of the Spot it joined.
    pub spot: String,
    /// Kind of that Spot: `entry`, `spot_wide`, `per_actor` or `instance`.
    pub spot_kind: String,
    /// Whether a client session is bound to it now (SB-5).
    pub bound: bool,
}

/// Reply of `LIST_ACTORS`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorList {
    /// Actors the node owns now (all of them, not only this page).
    pub total: u64,
    /// This page, ascending by id.
    pub actors: Vec<ActorEntry>,
    /// `after` of the next page; `None` on the last page.
    pub next: Option<String>,
}

/// Payload of `LIST_SESSIONS`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListSessions {
    /// Only sessions whose id is greater (the `next` of the previous page).
    #[serde(default)]
    pub after: Option<u64>,
    /// Page size; 0 or more than [`MAX_PAGE`] = [`MAX_PAGE`].
    #[serde(default)]
    pub limit: u32,
}

/// One client session of the answering node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// SessionRid (node-local).
    pub session: u64,
    /// `open`, `closing` (replaced by another session, SB-6.3) or `closed`.
    pub phase: String,
    /// Actors bound to the session now, by id.
    pub bound: Vec<String>,
    /// Binds in flight.
    pub pending_binds: u64,
}

/// Reply of `LIST_SESSIONS`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionList {
    /// Sessions open on the node now (all of them).
    pub total: u64,
    /// This page, ascending by session id.
    pub sessions: Vec<SessionEntry>,
    /// `after` of the next page; `None` on the last page.
    pub next: Option<u64>,
}

/// Latency totals of one Location Store operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreOpStats {
    /// Completed calls (success or error).
    pub count: u64,
    /// Their summed duration in seconds.
    pub seconds: f64,
}

/// Reply of `COUNTERS`: one snapshot of the node's counters, read when asked — the same values
/// the metrics endpoint serves. Counters are monotonic since the process started; gauges
/// (`peers_up`, `sessions`, `bindings`, `actors`, `waiting_now`, `lanes`) are the value now. Every map
/// holds every key of its closed vocabulary, zeros included.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeCounters {
    /// NodeRid.
    pub node: String,
    /// Process generation.
    pub generation: u64,
    /// Peers in the configuration (itself excluded).
    pub peers_configured: u64,
    /// Of them, up now.
    pub peers_up: u64,
    /// Client sessions open now.
    pub sessions: u64,
    /// Bindings of those sessions now.
    pub bindings: u64,
    /// Bindings of those sessions replaced by another session's bind (51 applied, SB-6.2):
    /// each ran the replaced-callback. Absent from older nodes' replies.
    #[serde(default)]
    pub session_replacements: u64,
    /// Relocation seals the node's sessions hold now (SB-8), the relays they hold and those
    /// relays' payload bytes (gauges; 0 once every seal ended). Absent from older nodes'
    /// replies.
    #[serde(default)]
    pub session_seals: crate::session::SealGauges,
    /// Actors owned now, by Spot kind (`entry`, `spot_wide`, `per_actor`, `instance`).
    pub actors: std::collections::BTreeMap<String, u64>,
    /// Actors activated here (factory runs that reached Ready).
    pub activations: u64,
    /// Actor calls received from peers (160).
    pub calls_in: u64,
    /// Actor calls sent to peers (160).
    pub calls_out: u64,
    /// Actor handler turns run.
    pub turns: u64,
    /// Send-handler failures (EG-15).
    pub send_failures: u64,
    /// One-way sends refused and dropped.
    pub sends_dropped: u64,
    /// Timer ticks skipped.
    pub timer_ticks_skipped: u64,
    /// Bindings of this node's actors ended because their session owner's lifecycle was gone
    /// (down past its peer timeout, shut down, restarted): `OnDisconnectActor` ran, then the
    /// tombstone.
    #[serde(default)]
    pub bindings_owner_lost: u64,
    /// Client requests (144) and sends (147) by framework operation (`create`, `get_or_create`,
    /// `get`, `call`, `send`, `destroy`, `node_info`, `list_actors`, `list_sessions`,
    /// `counters`, `authenticate`, `unknown`); session packets are not in it.
    pub client_operations: std::collections::BTreeMap<String, u64>,
    /// Terminal answers to requests by `"<origin>/<result>"`: origin `client` or `peer`,
    /// result `ok` or the error kind (`unavailable`, `invalid_operation`, `not_found`,
    /// `deadline_exceeded`, `internal`, `cancelled`).
    pub replies: std::collections::BTreeMap<String, u64>,
    /// Inbound work that waited for a full lane, per kind of target (`actors`, `sessions`,
    /// `pushes`, `peer_sends`).
    pub backlogs: std::collections::BTreeMap<String, crate::backlog::BacklogStats>,
    /// Lanes' own queue lengths now, read from the lane runtime's FIFOs: per Spot kind (`entry`,
    /// `spot_wide`, `per_actor`, `instance`: every lane of those Spots — their own, their
    /// actors' and timers') and `session` (client session lanes). Absent from older nodes'
    /// replies.
    #[serde(default)]
    pub lanes: std::collections::BTreeMap<String, LaneDepthStats>,
    /// Records and connections the mesh dropped, by `zlink_mesh::DropReason` (snake_case).
    pub mesh_drops: std::collections::BTreeMap<String, u64>,
    /// Refused session records by `"<record>/<reason>"` (`session::FlowRecord` /
    /// `session::FlowReject`, SB-5.9).
    pub session_rejects: std::collections::BTreeMap<String, u64>,
    /// Refused client operations by `"<operation>/<reason>"`, every pair (the closed
    /// vocabularies of [`crate::node::access::ClientOperation`] and
    /// [`crate::node::access::Refusal`]). Absent from older nodes' replies.
    #[serde(default)]
    pub client_refusals: std::collections::BTreeMap<String, u64>,
    /// Metrics endpoint connections closed at once, by reason: `too_many` (64 open) and
    /// `too_many_from_host` (8 open from that IP address). Absent from older nodes' replies.
    #[serde(default)]
    pub metrics_refused: std::collections::BTreeMap<String, u64>,
    /// Actor relocations this node coordinated that moved the actor away (`committed` of
    /// [`super::RelocationCounters`]; the rest is in `LIST_RELOCATIONS`).
    pub relocations: u64,
    /// Message Follow (SB-5.10), every key: `entries` (held now), `installed`, `expired`,
    /// `evicted`, `forwarded` and `refused/<reason>` (`relocation::FollowRefusal`). Absent
    /// from older nodes' replies.
    #[serde(default)]
    pub message_follow: std::collections::BTreeMap<String, u64>,
    /// Location Store calls by operation (`register_owner`, `renew_owner`, …) with their
    /// summed latency.
    pub store: std::collections::BTreeMap<String, StoreOpStats>,
}

/// Queue lengths of a group of lanes now (a row of [`NodeCounters::lanes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneDepthStats {
    /// Lanes in the group.
    pub lanes: u64,
    /// Records waiting in their application FIFOs.
    pub application_queued: u64,
    /// Records waiting in their lifecycle FIFOs.
    pub lifecycle_queued: u64,
    /// The deepest lane's length (both FIFOs).
    pub deepest: u64,
}

impl LaneDepthStats {
    /// Fold the runtime's depths of some lanes into this row.
    pub(crate) fn add(&mut self, d: crate::runtime::LaneDepths) {
        self.lanes += d.lanes;
        self.application_queued += d.application_queued;
        self.lifecycle_queued += d.lifecycle_queued;
        self.deepest = self.deepest.max(d.deepest);
    }
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
