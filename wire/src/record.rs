//! Records: one struct per command body, and [`Record`], the sum of them all.
//!
//! Invariants:
//! - Every record struct is `#[serde(deny_unknown_fields)]` and encoded in msgpack's compact form
//!   (a struct is an array of its fields in declaration order); the decoder rejects an array with
//!   more or fewer elements than the struct has fields. Field order is therefore wire format:
//!   never reorder, only append under a new [`crate::frame::VERSION`].
//! - The application payload is never part of a record; it travels as the frame's second part.
//! - A binding *token* never appears in any record (glossary "Binding").
//! - Enums without data ([`ErrorKind`], [`BindOperation`], …) travel as one `u8` code; enums with
//!   data ([`SessionRelocationRoute`], [`SealOutcome`], `Result`) as a one-entry map
//!   `{variant name: fields}`.

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::error::ErrorKind;
use crate::ids::{
    ActorId, AuthorityOwnerGeneration, BindingGeneration, Deadline, DispatchKey, MeshName,
    NodeGeneration, NodeRid, ObjectGeneration, OwnerId, OwnerLeaseGeneration, RelocationId,
    SessionLifecycleGeneration, SessionRid, SessionSequence,
};

// ---------------------------------------------------------------------------------------------
// Shared parts
// ---------------------------------------------------------------------------------------------

/// The bound-session tail of an actorSend (24) record (SB-5, SB-5.3): the registered binding
/// generation and the session sequence. The binding token stays on the session owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundSessionTail {
    /// Binding generation registered at bind; the actor owner rejects retired generations.
    pub binding_generation: BindingGeneration,
    /// Order number of the message on its session.
    pub session_sequence: SessionSequence,
}

/// Location snapshot of an actor (glossary "ActorRef"): route (MeshName, owner Node RID) plus the
/// owner fences.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorLocation {
    /// Mesh that carries the route.
    pub mesh: MeshName,
    /// Owner node's routing id.
    pub node: NodeRid,
    /// Owner node's process generation.
    pub node_generation: NodeGeneration,
    /// Owner authority fence.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Owner host lease.
    pub owner_lease_generation: OwnerLeaseGeneration,
}

/// A fence on actor authority: the owner node and the generations that fence its authority
/// (SB-6.2 "actor authority source fence" / "actor authority target").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorityFence {
    /// Owner node's routing id.
    pub node: NodeRid,
    /// Owner node's process generation.
    pub node_generation: NodeGeneration,
    /// Owner authority fence.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Owner host lease.
    pub owner_lease_generation: OwnerLeaseGeneration,
}

/// Identity of a relocation seal on one binding of one session (SB-8.1, SB-8.8). A 44 abort and a
/// 43 result match a seal by equality of this value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealIdentity {
    /// The relocation that installed the seal.
    pub relocation: RelocationId,
    /// Session owner lifecycle generation (the physical session identity on its owner).
    pub session_lifecycle: SessionLifecycleGeneration,
    /// The sealed session.
    pub session: SessionRid,
    /// Binding generation of the sealed binding.
    pub binding_generation: BindingGeneration,
}

wire_enum! {
    /// What a boundSessionBind (38) request asks the actor owner to do.
    pub enum BindOperation {
        /// Register the binding generation as the actor's current binding (SB-5.2, SB-6.1).
        Bind = 1,
        /// Tombstone exactly this binding identity: application unbind (SB-6.6).
        Unbind = 2,
        /// Tombstone exactly this binding identity after disconnect notification (SB-6.6, SB-7).
        Disconnect = 3,
    }
}

wire_enum! {
    /// The action of a 44 abort (SB-8.5, SB-8.8).
    pub enum AbortAction {
        /// Release the matching seal and resubmit held messages to the source route.
        ResubmitToSource = 1,
    }
}

wire_enum! {
    /// Why a mesh handshake was rejected (record 132).
    pub enum HandshakeReject {
        /// The peer belongs to another mesh.
        WrongMesh = 1,
        /// The HMAC proof did not verify.
        BadProof = 2,
        /// The handshake records were out of order or malformed.
        Protocol = 3,
        /// The node is already connected with this or a newer generation.
        Duplicate = 4,
    }
}

wire_enum! {
    /// Why a peer announces a disconnect, or why a node ended a client's session (record 149).
    ///
    /// Between nodes only `Shutdown` is sent today. On a ClientServer connection the node sends
    /// it to the client when the session ends for any reason other than the client's own
    /// Disconnect (docs/MESH.md, "Client connection lifecycle").
    pub enum DisconnectReason {
        /// Orderly shutdown of the sending node.
        Shutdown = 1,
        /// The peer violated the protocol (bad frames, bad sequence).
        Protocol = 2,
        /// The session timed out: the peer was silent for longer than the peer timeout.
        Timeout = 3,
        /// A newer generation of the same node, or a newer login of the same client session
        /// (SB-6.4), replaced this connection / session.
        Replaced = 4,
        /// The application on the node closed the session.
        Closed = 5,
        /// A session relocation's seal timed out and the session was ended (SB-8.3).
        RelocationSealTimeout = 6,
        /// The node's connected/authenticate callback refused the session (it returned an
        /// error): the client was not admitted.
        Refused = 7,
        /// The client did not read what the node sent it: its session's outbound queue
        /// (pushes and replies) stayed over its budget for longer than the node allows, or
        /// reached twice the budget (docs/MESH.md, "Slow consumers").
        SlowConsumer = 8,
    }
}

// ---------------------------------------------------------------------------------------------
// Spec records
// ---------------------------------------------------------------------------------------------

/// 24 actorSend — session owner → actor owner: a session→actor payload (payload part required),
/// appended directly to the actor's application queue (SB-5.3). A send when the header
/// correlation is `NONE`, a request relay otherwise (normal correlation and deadline contract).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorSend {
    /// Target actor.
    pub actor: ActorId,
    /// Target incarnation.
    pub object_generation: ObjectGeneration,
    /// Authority fence the route was validated with.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Owner lease the route was validated with.
    pub owner_lease_generation: OwnerLeaseGeneration,
    /// Session owner lifecycle generation: scope of the binding generation (SB-4.3).
    pub session_lifecycle: SessionLifecycleGeneration,
    /// Handler key of the payload.
    pub key: DispatchKey,
    /// Deadline of a request relay; `None` for a send without deadline.
    pub deadline: Option<Deadline>,
    /// Binding generation and session sequence.
    pub tail: BoundSessionTail,
}

/// 36 boundSessionSend — actor owner → session owner: an actor→session push (payload part
/// required). The session owner submits it only if the four SB-5.5 values are current.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundSessionSend {
    /// Source actor.
    pub actor: ActorId,
    /// Source ObjectGeneration (SB-5.5).
    pub object_generation: ObjectGeneration,
    /// Source NodeGeneration (SB-5.5).
    pub source_node_generation: NodeGeneration,
    /// AuthorityOwnerGeneration (SB-5.5).
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Session owner lifecycle generation of the binding.
    pub session_lifecycle: SessionLifecycleGeneration,
    /// Target session (binding identity, SB-5.8).
    pub session: SessionRid,
    /// Expected binding generation (SB-5.5).
    pub binding_generation: BindingGeneration,
    /// Handler key of the payload.
    pub key: DispatchKey,
}

/// 38 boundSessionBind request — session owner → actor owner (SB-5.1, SB-5.2, SB-6.6). Exactly
/// one terminal [`BoundSessionBindReply`] answers it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundSessionBind {
    /// Actor to bind.
    pub actor: ActorId,
    /// Incarnation from the submitted ActorRef (bind-approval input).
    pub object_generation: ObjectGeneration,
    /// Target NodeGeneration from the submitted ActorRef (bind-approval input).
    pub target_node_generation: NodeGeneration,
    /// AuthorityOwnerGeneration from the submitted ActorRef (bind-approval input).
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Carried but never a bind-approval input (SB-5.2).
    pub owner_lease_generation: OwnerLeaseGeneration,
    /// Session owner lifecycle generation.
    pub session_lifecycle: SessionLifecycleGeneration,
    /// The session owner's host identity (its [`OwnerId`]); the actor owner returns it in the
    /// 51 that replaces this binding (SB-6.2 "previous session owner … owner id").
    pub session_owner: OwnerId,
    /// The session owner's own owner lease generation at bind time; returned in that 51 too.
    pub session_owner_lease_generation: OwnerLeaseGeneration,
    /// Session being bound.
    pub session: SessionRid,
    /// Binding generation to register (or to tombstone).
    pub binding_generation: BindingGeneration,
    /// Bind, or tombstone this identity.
    pub operation: BindOperation,
    /// Request deadline.
    pub deadline: Deadline,
}

/// What the actor owner registered: the bound actor and its current location.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindSnapshot {
    /// Bound actor.
    pub actor: ActorId,
    /// Bound incarnation.
    pub object_generation: ObjectGeneration,
    /// Current location of the actor.
    pub location: ActorLocation,
    /// Registered binding generation.
    pub binding_generation: BindingGeneration,
}

/// 38 boundSessionBind terminal reply — actor owner → session owner (REPLY flag, the request's
/// correlation).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundSessionBindReply {
    /// The registered binding, or the public error kind (SB-12).
    pub result: Result<BindSnapshot, ErrorKind>,
}

/// 42 sessionRelocationSeal — coordinator → session owner: install a seal on the moving binding
/// (request; answered by 43).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRelocationSeal {
    /// Identity of the seal to install.
    pub seal: SealIdentity,
    /// Actor of the sealed binding (SB-8.1).
    pub actor: ActorId,
    /// Incarnation of the sealed binding (SB-8.1).
    pub object_generation: ObjectGeneration,
    /// Request deadline.
    pub deadline: Deadline,
}

/// Result of a seal installation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SealOutcome {
    /// The seal is installed; messages of the binding are now held.
    Installed,
    /// The seal was not installed.
    Rejected(ErrorKind),
}

/// 43 sessionRelocationSealed — session owner → coordinator: the seal installation result
/// (REPLY flag, the 42's correlation).
///
/// **This record has no session sequence and no high-water field, and must never get one**
/// (SB-8.2, SB-14.26): a relocation never waits for a numeric high-water or per-message ack.
/// `deny_unknown_fields`, the compact array length check, a golden fixture pinning the exact
/// encoding and a test that rejects a 43 body with an extra field all enforce this.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRelocationSealed {
    /// Identity of the seal the result is for.
    pub seal: SealIdentity,
    /// Installed, or why not.
    pub outcome: SealOutcome,
}

/// 44 commit: apply the target route (SB-8.7).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteCommit {
    /// Relocation identity.
    pub relocation: RelocationId,
    /// Moved actor.
    pub actor: ActorId,
    /// Its incarnation (unchanged by relocation).
    pub object_generation: ObjectGeneration,
    /// Target route (MeshName, NodeRid) and the target's fences for the new ActorRef snapshot.
    pub target: ActorLocation,
    /// Session identity: the session owner lifecycle generation.
    pub session_lifecycle: SessionLifecycleGeneration,
    /// Session RID.
    pub session: SessionRid,
    /// Binding generation whose route changes.
    pub binding_generation: BindingGeneration,
}

/// 44 abort: release the matching seal (SB-8.5). Carries only the seal identity and the action
/// (SB-8.8).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteAbort {
    /// The seal to release.
    pub seal: SealIdentity,
    /// What to do with held messages.
    pub action: AbortAction,
}

/// 44 sessionRelocationRoute — target runtime or coordinator → session owner; one-way, no
/// response (SB-8.4, SB-14.26).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SessionRelocationRoute {
    /// Apply the target route, submit held messages, lift the seal.
    Commit(RouteCommit),
    /// Release the matching seal, resubmit held messages to the source.
    Abort(RouteAbort),
}

/// The previous session owner's identity in a 51 record (SB-6.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviousSessionOwner {
    /// Node RID of the previous session owner.
    pub node: NodeRid,
    /// Its lifecycle generation.
    pub lifecycle: SessionLifecycleGeneration,
    /// Its owner id.
    pub owner: OwnerId,
    /// Its owner lease generation.
    pub owner_lease_generation: OwnerLeaseGeneration,
    /// The replaced session.
    pub session: SessionRid,
    /// The retired binding generation.
    pub retired_binding_generation: BindingGeneration,
}

/// 51 boundSessionReplaced — actor owner → previous session owner: the binding was replaced;
/// one-way, at most once, no ACK (SB-6.1, SB-6.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundSessionReplaced {
    /// The actor whose binding was replaced (for the duplicate-connection callback).
    pub actor: ActorId,
    /// Actor authority source fence; never used by the receiver to locate a local actor.
    pub authority_source: AuthorityFence,
    /// Actor authority target; the (transport-authenticated) sender must equal it.
    pub authority_target: AuthorityFence,
    /// Previous session owner identity; the callback runs only if all of it matches.
    pub previous: PreviousSessionOwner,
}

// ---------------------------------------------------------------------------------------------
// Mesh records (128..=191)
// ---------------------------------------------------------------------------------------------

/// 128 Hello — handshake initiator → acceptor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Mesh the initiator belongs to.
    pub mesh: MeshName,
    /// Initiator's routing id.
    pub node: NodeRid,
    /// Initiator's process generation.
    pub generation: NodeGeneration,
    /// Initiator's random nonce.
    #[serde(with = "crate::support::bytes32")]
    pub nonce: [u8; 32],
}

/// 129 Challenge — acceptor → initiator.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Challenge {
    /// Mesh the acceptor belongs to.
    pub mesh: MeshName,
    /// Acceptor's routing id.
    pub node: NodeRid,
    /// Acceptor's process generation.
    pub generation: NodeGeneration,
    /// Acceptor's random nonce.
    #[serde(with = "crate::support::bytes32")]
    pub nonce: [u8; 32],
    /// Acceptor's HMAC proof.
    #[serde(with = "crate::support::bytes32")]
    pub proof: [u8; 32],
}

/// 130 Proof — initiator → acceptor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proof {
    /// Initiator's HMAC proof.
    #[serde(with = "crate::support::bytes32")]
    pub proof: [u8; 32],
}

/// 131 Welcome — acceptor → initiator: the handshake succeeded. Empty body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Welcome;

/// 132 Reject — the handshake failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reject {
    /// Why.
    pub reason: HandshakeReject,
}

/// 136 Ping — heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ping {
    /// Heartbeat number, echoed by the pong.
    pub seq: u64,
}

/// 137 Pong — heartbeat answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pong {
    /// The ping's number.
    pub seq: u64,
}

/// 138 FlowCredit — grants the peer more sending credit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowCredit {
    /// Additional messages the peer may send.
    pub messages: u32,
    /// Additional payload bytes the peer may send.
    pub bytes: u64,
}

/// 144 Request — generic request envelope (payload part required, correlation non-zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Handler key.
    pub key: DispatchKey,
    /// Request deadline.
    pub deadline: Deadline,
}

/// 145 Reply — generic successful reply (payload part required, correlation of the request).
/// Empty body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reply;

/// 146 ErrorReply — a request failed (correlation of the request).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// Public error kind.
    pub kind: ErrorKind,
    /// Human-readable detail, at most [`ErrorReply::MAX_DETAIL`] bytes.
    #[serde(with = "crate::support::detail")]
    pub detail: String,
}

impl ErrorReply {
    /// Largest detail in bytes.
    pub const MAX_DETAIL: usize = 256;

    /// An error reply whose detail is cut (at a character boundary) to
    /// [`ErrorReply::MAX_DETAIL`] bytes.
    #[must_use]
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        let mut detail = detail.into();
        if detail.len() > Self::MAX_DETAIL {
            let mut cut = Self::MAX_DETAIL;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
        Self { kind, detail }
    }
}

/// 147 OneWay — generic one-way envelope (payload part required, correlation `NONE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OneWay {
    /// Handler key.
    pub key: DispatchKey,
}

/// 148 Push — server → client push (payload part required, correlation `NONE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Push {
    /// Handler key.
    pub key: DispatchKey,
}

/// 149 Disconnect — the sender is closing the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disconnect {
    /// Why.
    pub reason: DisconnectReason,
}

/// 160 ActorCall — direct actor send (correlation `NONE`) or request (non-zero correlation),
/// payload part required.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorCall {
    /// Target actor.
    pub actor: ActorId,
    /// Target incarnation.
    pub object_generation: ObjectGeneration,
    /// Authority fence of the route.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Owner lease of the route.
    pub owner_lease_generation: OwnerLeaseGeneration,
    /// Target node's process generation.
    pub target_node_generation: NodeGeneration,
    /// Handler key.
    pub key: DispatchKey,
    /// Request deadline; `None` for a send without deadline.
    pub deadline: Option<Deadline>,
}

// ---------------------------------------------------------------------------------------------
// Record
// ---------------------------------------------------------------------------------------------

/// Every record that can travel in a frame. The command number follows from the variant
/// ([`Record::command`]); 38's request and reply share the number and differ in the REPLY flag.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Record {
    /// 24 actorSend.
    ActorSend(ActorSend),
    /// 36 boundSessionSend.
    BoundSessionSend(BoundSessionSend),
    /// 38 boundSessionBind request.
    BoundSessionBind(BoundSessionBind),
    /// 38 boundSessionBind terminal reply (REPLY flag).
    BoundSessionBindReply(BoundSessionBindReply),
    /// 42 sessionRelocationSeal.
    SessionRelocationSeal(SessionRelocationSeal),
    /// 43 sessionRelocationSealed.
    SessionRelocationSealed(SessionRelocationSealed),
    /// 44 sessionRelocationRoute (commit or abort).
    SessionRelocationRoute(SessionRelocationRoute),
    /// 51 boundSessionReplaced.
    BoundSessionReplaced(BoundSessionReplaced),
    /// 128 mesh handshake hello.
    Hello(Hello),
    /// 129 mesh handshake challenge.
    Challenge(Challenge),
    /// 130 mesh handshake proof.
    Proof(Proof),
    /// 131 mesh handshake welcome.
    Welcome(Welcome),
    /// 132 mesh handshake reject.
    Reject(Reject),
    /// 136 heartbeat ping.
    Ping(Ping),
    /// 137 heartbeat pong.
    Pong(Pong),
    /// 138 flow credit.
    FlowCredit(FlowCredit),
    /// 144 request envelope.
    Request(Request),
    /// 145 reply envelope.
    Reply(Reply),
    /// 146 error reply.
    ErrorReply(ErrorReply),
    /// 147 one-way envelope.
    OneWay(OneWay),
    /// 148 push.
    Push(Push),
    /// 149 disconnect notification.
    Disconnect(Disconnect),
    /// 160 direct actor call.
    ActorCall(ActorCall),
}

macro_rules! record_from {
    ($($variant:ident),+ $(,)?) => {
        $(impl From<$variant> for Record {
            fn from(record: $variant) -> Record {
                Record::$variant(record)
            }
        })+
    };
}

record_from!(
    ActorSend,
    BoundSessionSend,
    BoundSessionBind,
    BoundSessionBindReply,
    SessionRelocationSeal,
    SessionRelocationSealed,
    SessionRelocationRoute,
    BoundSessionReplaced,
    Hello,
    Challenge,
    Proof,
    Welcome,
    Reject,
    Ping,
    Pong,
    FlowCredit,
    Request,
    Reply,
    ErrorReply,
    OneWay,
    Push,
    Disconnect,
    ActorCall,
);

impl Record {
    /// The command number of this record.
    #[must_use]
    pub const fn command(&self) -> Command {
        match self {
            Record::ActorSend(_) => Command::ActorSend,
            Record::BoundSessionSend(_) => Command::BoundSessionSend,
            Record::BoundSessionBind(_) | Record::BoundSessionBindReply(_) => {
                Command::BoundSessionBind
            }
            Record::SessionRelocationSeal(_) => Command::SessionRelocationSeal,
            Record::SessionRelocationSealed(_) => Command::SessionRelocationSealed,
            Record::SessionRelocationRoute(_) => Command::SessionRelocationRoute,
            Record::BoundSessionReplaced(_) => Command::BoundSessionReplaced,
            Record::Hello(_) => Command::Hello,
            Record::Challenge(_) => Command::Challenge,
            Record::Proof(_) => Command::Proof,
            Record::Welcome(_) => Command::Welcome,
            Record::Reject(_) => Command::Reject,
            Record::Ping(_) => Command::Ping,
            Record::Pong(_) => Command::Pong,
            Record::FlowCredit(_) => Command::FlowCredit,
            Record::Request(_) => Command::Request,
            Record::Reply(_) => Command::Reply,
            Record::ErrorReply(_) => Command::ErrorReply,
            Record::OneWay(_) => Command::OneWay,
            Record::Push(_) => Command::Push,
            Record::Disconnect(_) => Command::Disconnect,
            Record::ActorCall(_) => Command::ActorCall,
        }
    }

    /// `true` if the record is a reply (its header carries the REPLY flag).
    #[must_use]
    pub const fn is_reply(&self) -> bool {
        matches!(
            self,
            Record::BoundSessionBindReply(_)
                | Record::SessionRelocationSealed(_)
                | Record::Reply(_)
                | Record::ErrorReply(_)
        )
    }
}
