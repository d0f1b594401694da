//! Sessions bound to actors (spec SB-1 … SB-7, SB-9, SB-10, SB-13).
//!
//! A ClientServer connection is a physical session. Its identity is (session owner NodeRid,
//! [`SessionLifecycleGeneration`] — the node's NodeGeneration, new per process start —,
//! [`SessionRid`]). The session owner is the node that holds the connection.
//!
//! # Rooms
//! | module | holds |
//! |---|---|
//! | `aggregate` | `SessionBindingAggregate`: the sans-IO serial section of one session (bind, relays and their sequence, push checks, 51, replacement timers, disconnect snapshot) |
//! | `slot` | the actor owner's `BindingSlot` beside each local incarnation (38 registration, 24 check, tombstones) |
//! | `flow` | the closed vocabulary of rejected records and their counters (SB-5.9: [`FlowReject`]) |
//! | `owner` | the thin driver: sessions by SessionRid, session lanes, callbacks, timers, sending 38/24/36/51 through the node's `SessionHost` |
//!
//! # Contract
//! - Session callbacks (connected, packet handlers, replaced, disconnected) run on the session's
//!   own lane (`Runtime::session_lane`): two callbacks of one session never overlap and the
//!   session context never runs an actor handler (SB-10.1). Binding updates, completions and
//!   disconnect cleanup are infrastructure work and progress while a callback awaits (SB-10).
//! - Packets from the client dispatch through the typed handler registry ([`SessionHandlers`])
//!   by packet key; application keys are below [`RESERVED_KEYS_START`], the framework's client
//!   operations above it.
//! - `session.actors().bind(actor_ref)` sends one 38 to the ref's location (no store lookup,
//!   SB-5.1) and publishes the binding at one point when its terminal arrives (SB-5.7).
//!   `BoundActor::relay` sends a 24 with the bound-session tail over the stored route (SB-5.3,
//!   SB-5.10); never re-resolved.
//! - The actor's `ActorCtx::push` sends a 36 the session owner checks against the four SB-5.5
//!   values before the client sees it; a rejected push is counted ([`FlowReject`]).
//! - Rebind from another session replaces (SB-6): the actor owner registers the new binding,
//!   answers, then sends 51 to the old session owner, whose session enters *closing*, runs the
//!   replaced-callback and closes the connection 100 ms after its terminal (or at the callback
//!   timeout).
//! - Disconnect (SB-7) freezes the binding snapshot and notifies each bound actor's current Spot
//!   once over the stored route (38 Disconnect); actor and membership stay.
//! - Relocation (SB-8): a 42 from the actor owner seals one binding (`seal`); its relays are
//!   held in order; the 44 commit switches the binding's route and ActorRef snapshot to the
//!   target and releases them there, a 44 abort releases them to the source; no 44 within
//!   SessionRelocationSealTimeout closes the session (`RelocationSealTimeout`).

//! # Relaying from a packet handler
//! The fast path of a session application is public API: a handler registered with
//! [`SessionHandlers::packet_turn`] finds the packet's actor with
//! [`SessionActors::find`] (or [`SessionActors::find_bytes`] for an id read from the packet's
//! bytes: UTF-8 checked only for an id other than the previous relay's) and returns
//! [`BoundActor::send_turn`] (a one-way relay; [`SessionActors::send_turn_bytes`] finds and
//! relays in one step, under one lock) or
//! [`BoundActor::forward`] (a relay request whose reply answers the client's request;
//! [`SessionActors::forward_bytes`] finds and forwards in one step, under one lock):
//!
//! ```no_run
//! # use bytes::Bytes;
//! # use zlink::session::{PacketTurn, SessionHandlers};
//! # use zlink_wire::DispatchKey;
//! # const SEND: DispatchKey = DispatchKey::new(10);
//! # const TO_ACTOR: DispatchKey = DispatchKey::new(1);
//! # fn actor_of(_: &Bytes) -> &str { "player-7" }
//! let app = SessionHandlers::new().packet_turn(SEND, |session, packet| {
//!     match session.actors().find(actor_of(&packet)) {
//!         // The packet's bytes travel as the actor message (no copy).
//!         Some(actor) => actor.send_turn(TO_ACTOR, packet, Bytes::new()),
//!         None => PacketTurn::Done(Err(session
//!             .not_bound(zlink::session::FlowRecord::Relay, "player-7".parse().unwrap())
//!             .into())),
//!     }
//! });
//! ```
//!
//! The turn of such a handler allocates nothing beyond the relay itself: the binding's 24 is
//! written from an envelope encoded once per binding, a relay admitted at once ends the turn
//! without a future ([`PacketTurn::Done`]), and `find` and the relay compare the binding of
//! the session's previous relay first (no hash lookup while a client talks to one actor).
//! `examples/bench_session.rs` measures this path (through the demo application's
//! `RelaySend` / `RelayRequest`), `docs/PERFORMANCE.md` its cost.

#[cfg(feature = "testing")]
pub mod aggregate;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)] // what only the tests read
pub(crate) mod aggregate;
mod cell;
use crate::clock;
pub(crate) mod flow;
#[cfg(feature = "testing")]
pub mod fuzz_harness;
#[cfg(all(test, not(feature = "testing")))]
mod fuzz_harness;
mod inline;
pub(crate) mod owner;
#[cfg(feature = "testing")]
pub mod seal;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)] // what only the tests read
pub(crate) mod seal;
#[cfg(feature = "testing")]
pub mod slot;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)] // what only the tests read
pub(crate) mod slot;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use zlink_wire::{ActorId, DispatchKey, ErrorKind, SessionLifecycleGeneration, SessionRid};

use crate::actor::{ActorError, ActorRef, Message};
use crate::config::{ConfigError, HandlerRegistry};
use crate::runtime::{BoxFuture, HandlerError};

pub use aggregate::{Binding, BindingToken};
#[cfg(feature = "testing")]
pub use aggregate::{SessionBindingAggregate, SessionIdentity};
pub use clock::{BootClock, Clock, ManualClock, SystemClock};
pub use flow::{FlowCounters, FlowRecord, FlowReject};
pub(crate) use inline::Detached;
pub(crate) use owner::{SessionHost, SessionOwner, SessionOwnerConfig};
pub use seal::SealGauges;
#[cfg(feature = "testing")]
pub use slot::{BindingSlot, RegisteredBinding};
#[cfg(not(feature = "testing"))]
pub(crate) use slot::{BindingSlot, RegisteredBinding};

pub use crate::actor::{CLOSE_SESSION_KEY, RESERVED_KEYS_START};

/// Why a session operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// No current binding of the actor on this session (session-not-bound, `InvalidOperation`,
    /// SB-12).
    #[error("session is not bound to actor {actor}")]
    NotBound {
        /// The actor.
        actor: ActorId,
    },
    /// A relay through a binding that ended (replaced by another session's bind, unbound,
    /// notified as disconnected): a stale binding fence, `Unavailable` (SB-12, SB-4.1) — the
    /// same kind the actor owner answers for a relay of a retired binding generation.
    #[error("the binding of actor {actor} is retired")]
    Retired {
        /// The actor.
        actor: ActorId,
    },
    /// A bind of that actor is already in flight on this session (`InvalidOperation`).
    #[error("a bind of actor {actor} is already in progress")]
    BindInProgress {
        /// The actor.
        actor: ActorId,
    },
    /// The session was replaced and is closing: no new binds (`Unavailable`).
    #[error("the session is closing")]
    Closing,
    /// The session has ended (`Unavailable`).
    #[error("the session has ended")]
    Closed,
    /// The session holds as many bindings as it may (`InvalidOperation`).
    #[error("the session holds its maximum of bindings")]
    TooManyBindings,
    /// The node is shutting down: no new sessions or bindings (`Unavailable`, SB-10).
    #[error("the session owner is shutting down")]
    ShuttingDown,
    /// The actor owner or the route refused (SB-12 kinds).
    #[error("{kind}: {detail}")]
    Remote {
        /// Public kind.
        kind: ErrorKind,
        /// Detail.
        detail: String,
    },
    /// A payload or reply did not (de)serialise.
    #[error("codec: {0}")]
    Codec(String),
}

impl SessionError {
    /// The public error kind.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionError::NotBound { .. }
            | SessionError::BindInProgress { .. }
            | SessionError::TooManyBindings
            | SessionError::Codec(_) => ErrorKind::InvalidOperation,
            SessionError::Retired { .. }
            | SessionError::Closing
            | SessionError::Closed
            | SessionError::ShuttingDown => ErrorKind::Unavailable,
            SessionError::Remote { kind, .. } => *kind,
        }
    }

    /// The application's error for a refusal of a `record` of `actor`: one kind per SB-12
    /// condition.
    fn of_reject(record: FlowRecord, actor: &ActorId, r: FlowReject) -> Self {
        match r {
            // A relay through a retired binding is a stale binding fence (SB-12).
            FlowReject::BindingRetired if record == FlowRecord::Relay => SessionError::Retired {
                actor: actor.clone(),
            },
            FlowReject::NotBound | FlowReject::BindingRetired => SessionError::NotBound {
                actor: actor.clone(),
            },
            FlowReject::BindInProgress => SessionError::BindInProgress {
                actor: actor.clone(),
            },
            FlowReject::SessionClosing => SessionError::Closing,
            FlowReject::TooManyBindings => SessionError::TooManyBindings,
            FlowReject::ShuttingDown => SessionError::ShuttingDown,
            _ => SessionError::Closed,
        }
    }
}

impl From<ActorError> for SessionError {
    fn from(e: ActorError) -> Self {
        SessionError::Remote {
            kind: e.kind(),
            detail: e.to_string(),
        }
    }
}

impl From<SessionError> for HandlerError {
    fn from(e: SessionError) -> Self {
        HandlerError::new(e.to_string())
    }
}

/// How a packet handler failed: the public kind the client's error reply carries and a detail.
/// A [`SessionError`] keeps its SB-12 kind (`?` converts it); a [`HandlerError`] is `Internal`
/// (EG-15).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {detail}")]
pub struct PacketError {
    /// Public kind.
    pub kind: ErrorKind,
    /// Detail for the client.
    pub detail: String,
}

impl PacketError {
    /// A failure of `kind`.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
        }
    }
}

impl From<SessionError> for PacketError {
    fn from(e: SessionError) -> Self {
        Self::new(e.kind(), e.to_string())
    }
}

impl From<HandlerError> for PacketError {
    fn from(e: HandlerError) -> Self {
        match e {
            HandlerError::Refused { kind, message } => Self::new(kind, message),
            e => Self::new(ErrorKind::Internal, e.to_string()),
        }
    }
}

impl From<ActorError> for PacketError {
    fn from(e: ActorError) -> Self {
        Self::new(e.kind(), e.to_string())
    }
}

/// A packet handler: the session and the packet's payload; the reply bytes answer a request
/// packet (ignored for a one-way packet).
pub type PacketHandler = Arc<dyn Fn(Session, Bytes) -> PacketTurn + Send + Sync>;

/// What a packet handler registered with [`SessionHandlers::packet_turn`] returns: its result
/// at once, or the turn that waits for it. A handler that usually finishes without waiting (a
/// one-way relay the peer's budget admits at once, [`BoundActor::send_turn`]) costs no future.
pub enum PacketTurn {
    /// Finished: the reply bytes (ignored for a one-way packet) or the error.
    Done(Result<Bytes, PacketError>),
    /// Waits: the turn (still holding the session's lane) ends when this future does.
    Later(BoxFuture<Result<Bytes, PacketError>>),
    /// Answered by the bound actor: a relay request handed off ([`BoundActor::forward`]). The
    /// turn ends once the 24 is in the actor owner's queue — the session's lane runs its next
    /// packets while the actor works (SB-1.5, SB-10) — and the actor's reply, converted by the
    /// forward's [`ReplyMap`], answers the client's request on its own, with the request's
    /// correlation and deadline.
    Forward(Forward),
}

/// How a forwarded relay's reply bytes become the client's reply ([`BoundActor::forward`]):
/// a plain function (no state, no session access), run wherever the reply arrives.
pub type ReplyMap = fn(Bytes) -> Result<Bytes, PacketError>;

/// A relay request handed off by a packet turn ([`PacketTurn::Forward`]).
pub struct Forward(owner::Forwarded);

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Forward(..)")
    }
}

impl std::fmt::Debug for PacketTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PacketTurn::Done(out) => f.debug_tuple("Done").field(out).finish(),
            PacketTurn::Later(_) => f.write_str("Later(..)"),
            PacketTurn::Forward(_) => f.write_str("Forward(..)"),
        }
    }
}

/// A lifecycle callback of a session (connected, disconnected).
pub type LifecycleHandler =
    Arc<dyn Fn(Session) -> BoxFuture<Result<(), HandlerError>> + Send + Sync>;

/// The replaced-callback (SB-6.3): the session and the actor whose binding moved to another
/// session. The application's last lifecycle turns to tell its client: it runs once per
/// replaced actor — a session already closing that loses another actor runs it again for that
/// one (SB-6.2, SB-6.9) — and the connection closes 100 ms after the last of them finished.
pub type ReplacedHandler =
    Arc<dyn Fn(Session, ActorId) -> BoxFuture<Result<(), HandlerError>> + Send + Sync>;

/// The session application of a node: packet handlers by key and lifecycle callbacks.
#[derive(Clone, Default)]
pub struct SessionHandlers {
    packets: Vec<(DispatchKey, PacketHandler)>,
    on_connected: Option<LifecycleHandler>,
    on_disconnected: Option<LifecycleHandler>,
    on_replaced: Option<ReplacedHandler>,
}

impl std::fmt::Debug for SessionHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandlers")
            .field(
                "packets",
                &self.packets.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Bytes, PacketError> {
    rmp_serde::to_vec_named(v)
        .map(Bytes::from)
        .map_err(|e| PacketError::new(ErrorKind::Internal, format!("reply encoding: {e}")))
}

impl SessionHandlers {
    /// No handlers.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A typed packet handler for `M::KEY`: the payload decodes as `M`, the reply encodes
    /// `M::Reply` (MessagePack, named fields).
    ///
    /// The handler runs as a turn of the session's lane. When it waits for the node's
    /// transport (a relay request), the part after that wait may run on the mesh I/O thread
    /// that received the reply, inside the lane runtime's context (so its reply leaves at
    /// once): keep what follows such an await short and never block in it.
    #[must_use]
    pub fn packet<M, F, Fut>(self, f: F) -> Self
    where
        M: Message,
        F: Fn(Session, M) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<M::Reply, PacketError>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.packet_raw(M::KEY, move |session, payload: Bytes| {
            let f = f.clone();
            Box::pin(async move {
                let msg: M = rmp_serde::from_slice(&payload).map_err(|e| {
                    PacketError::new(ErrorKind::InvalidOperation, format!("packet payload: {e}"))
                })?;
                let reply = f(session, msg).await?;
                encode(&reply)
            })
        })
    }

    /// A packet handler on raw bytes for `key` (runs as [`SessionHandlers::packet`] says).
    #[must_use]
    pub fn packet_raw<F>(self, key: DispatchKey, f: F) -> Self
    where
        F: Fn(Session, Bytes) -> BoxFuture<Result<Bytes, PacketError>> + Send + Sync + 'static,
    {
        self.packet_turn(key, move |session, payload| {
            PacketTurn::Later(f(session, payload))
        })
    }

    /// A packet handler on raw bytes for `key` that may finish without a future
    /// ([`PacketTurn::Done`]); otherwise as [`SessionHandlers::packet_raw`].
    #[must_use]
    pub fn packet_turn<F>(mut self, key: DispatchKey, f: F) -> Self
    where
        F: Fn(Session, Bytes) -> PacketTurn + Send + Sync + 'static,
    {
        self.packets.push((key, Arc::new(f)));
        self
    }

    /// The connected/authenticate callback: first turn of every session. `Ok` admits the
    /// session (it leaves the strangers' bounds); `Err` refuses it: the node closes it with
    /// `DisconnectReason::Refused` and counts it (`FlowRecord::Connected`, `FlowReject::Refused`).
    #[must_use]
    pub fn on_connected<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.on_connected = Some(Arc::new(move |s| Box::pin(f(s))));
        self
    }

    /// The disconnected callback: last turn of every session (it does not iterate bound actors;
    /// the framework notifies them, SB-7.1).
    #[must_use]
    pub fn on_disconnected<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.on_disconnected = Some(Arc::new(move |s| Box::pin(f(s))));
        self
    }

    /// The replaced-callback (duplicate connection, SB-6.3), once per replaced actor
    /// ([`ReplacedHandler`]).
    #[must_use]
    pub fn on_replaced<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, ActorId) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.on_replaced = Some(Arc::new(move |s, a| Box::pin(f(s, a))));
        self
    }

    /// The packet keys with a handler.
    pub fn keys(&self) -> impl Iterator<Item = DispatchKey> + '_ {
        self.packets.iter().map(|(k, _)| *k)
    }

    /// Checks the registry: one handler per key (SB-3.3), application keys only.
    ///
    /// # Errors
    /// [`ConfigError::DuplicateHandler`]; [`ConfigError::ReservedPacketKey`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.registry().map(|_| ())
    }

    pub(crate) fn registry(&self) -> Result<HandlerRegistry<PacketHandler>, ConfigError> {
        let mut r = HandlerRegistry::new();
        for (key, h) in &self.packets {
            if key.get() >= RESERVED_KEYS_START || key.get() == 0 {
                return Err(ConfigError::ReservedPacketKey { key: *key });
            }
            r.register(*key, h.clone()).map_err(|_| {
                let count = self.packets.iter().filter(|(k, _)| k == key).count();
                ConfigError::DuplicateHandler { key: *key, count }
            })?;
        }
        Ok(r)
    }

    pub(crate) fn into_parts(self) -> (Vec<(DispatchKey, PacketHandler)>, Callbacks) {
        (
            self.packets,
            Callbacks {
                on_connected: self.on_connected,
                on_disconnected: self.on_disconnected,
                on_replaced: self.on_replaced,
            },
        )
    }
}

/// The lifecycle callbacks of a session application.
#[derive(Clone, Default)]
pub(crate) struct Callbacks {
    pub on_connected: Option<LifecycleHandler>,
    pub on_disconnected: Option<LifecycleHandler>,
    pub on_replaced: Option<ReplacedHandler>,
}

/// A session as its callbacks see it (a handle; cheap to clone).
#[derive(Clone)]
pub struct Session {
    pub(crate) entry: Arc<owner::SessionEntry>,
    pub(crate) owner: Arc<SessionOwner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session", &self.entry.rid)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The connection's SessionRid.
    #[must_use]
    pub fn rid(&self) -> SessionRid {
        self.entry.rid
    }

    /// The session owner node (this node).
    #[must_use]
    pub fn owner(&self) -> &zlink_wire::NodeRid {
        self.owner.node()
    }

    /// The session owner's lifecycle generation.
    #[must_use]
    pub fn lifecycle(&self) -> SessionLifecycleGeneration {
        self.owner.lifecycle()
    }

    /// The Ready ref of `actor` from the Location Store (SB-1 step 2: the session callback picks
    /// the domain actor and looks it up by its global ActorId).
    ///
    /// # Errors
    /// `NotFound` when there is no incarnation; `Unavailable` while it activates.
    pub async fn get(&self, actor: &ActorId) -> Result<ActorRef, SessionError> {
        self.owner.get_actor(actor.clone()).await
    }

    /// Creates the actor explicitly (SB-1 step 2; `InvalidOperation` if an incarnation exists).
    ///
    /// # Errors
    /// As [`crate::node::Node::create`].
    pub async fn create(&self, create: crate::actor::Create) -> Result<ActorRef, SessionError> {
        self.owner.create_actor(create, false).await
    }

    /// The Ready incarnation of the actor, created if there is none (SB-1 step 2).
    ///
    /// # Errors
    /// As [`crate::node::Node::get_or_create`].
    pub async fn get_or_create(
        &self,
        create: crate::actor::Create,
    ) -> Result<ActorRef, SessionError> {
        self.owner.create_actor(create, true).await
    }

    /// Refuses an operation on `actor`, of which this session holds no current binding (a
    /// relay the application was asked for, say — `actors().find` found none): counted as
    /// `record`/`session_not_bound` (SB-5.9: `session_rejects` in NODE_INFO and the metrics)
    /// and returned as session-not-bound (`InvalidOperation`, SB-12).
    #[must_use]
    pub fn not_bound(&self, record: FlowRecord, actor: ActorId) -> SessionError {
        self.owner
            .flow()
            .reject(record, FlowReject::NotBound, &actor);
        SessionError::NotBound { actor }
    }

    /// The session's bound actors (SB-13).
    #[must_use]
    pub fn actors(&self) -> SessionActors<'_> {
        SessionActors { session: self }
    }

    /// Sends a push (148) straight to this session's client, e.g. from the replaced-callback.
    ///
    /// # Errors
    /// [`SessionError::Closed`] when the connection is gone or admission failed.
    pub async fn send<M: Message>(&self, msg: &M) -> Result<(), SessionError> {
        let payload =
            rmp_serde::to_vec_named(msg).map_err(|e| SessionError::Codec(e.to_string()))?;
        self.send_raw(M::KEY, Bytes::from(payload)).await
    }

    /// Raw form of [`Session::send`].
    ///
    /// # Errors
    /// As [`Session::send`].
    pub async fn send_raw(&self, key: DispatchKey, payload: Bytes) -> Result<(), SessionError> {
        self.owner
            .push_to_client(self.entry.rid, key, payload)
            .await
    }
}

/// `session.actors()` (SB-13).
#[derive(Debug)]
pub struct SessionActors<'a> {
    session: &'a Session,
}

impl SessionActors<'_> {
    /// Every current binding.
    #[must_use]
    pub fn bound(&self) -> Vec<BoundActor> {
        self.session
            .entry
            .bound()
            .into_iter()
            .map(|b| BoundActor {
                session: self.session.clone(),
                binding: b,
            })
            .collect()
    }

    /// The current binding of `actor` (an [`ActorId`], or its text: `find("player-7")`). The
    /// binding the session's previous relay went through is compared first, so a packet
    /// handler that finds its actor for each packet costs no hash lookup while its client
    /// talks to one actor. `None`, counted nowhere, when the session holds no current binding of
    /// it ([`Session::not_bound`] counts and refuses).
    #[must_use]
    pub fn find<Q>(&self, actor: &Q) -> Option<BoundActor>
    where
        ActorId: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.session.entry.find(actor).map(|b| BoundActor {
            session: self.session.clone(),
            binding: b,
        })
    }

    /// [`SessionActors::find`] by the id's text as bytes, as a packet handler reads it from
    /// the client's packet: the binding of the session's previous relay is compared byte for
    /// byte first, so the bytes are checked for UTF-8 only when they name another actor. Bytes
    /// that are not UTF-8 name no binding (`None`).
    #[must_use]
    pub fn find_bytes(&self, actor: &[u8]) -> Option<BoundActor> {
        self.session.entry.find_bytes(actor).map(|b| BoundActor {
            session: self.session.clone(),
            binding: b,
        })
    }

    /// [`SessionActors::find_bytes`] and [`BoundActor::send_turn`] in one step, under one
    /// lock of the session's bindings and without a [`BoundActor`] in between: the packet turn
    /// of a one-way relay to the actor whose id has these bytes, with the same checks, the
    /// same 24 and the same refusals (counted, SB-5.9). `None`, counted nowhere, when the
    /// session holds no binding with these bytes ([`Session::not_bound`] counts and refuses).
    #[must_use]
    pub fn send_turn_bytes(
        &self,
        actor: &[u8],
        key: DispatchKey,
        payload: Bytes,
        reply: Bytes,
    ) -> Option<PacketTurn> {
        let sent =
            self.session
                .owner
                .relay_bytes_start(&self.session.entry, actor, key, payload)?;
        Some(match sent {
            Err(e) => PacketTurn::Done(Err(e.into())),
            Ok(sent) => turn_of(sent, reply),
        })
    }

    /// [`SessionActors::find_bytes`] and [`BoundActor::forward`] in one step, under one lock
    /// of the session's bindings and without a [`BoundActor`] in between: the packet turn of a
    /// relay request to the actor whose id has these bytes, whose reply (converted by `map`)
    /// answers the client's packet on its own, with the same checks, the same 24 and the same
    /// refusals (counted, SB-5.9). `None`, counted nowhere, when the session holds no binding
    /// with these bytes.
    #[must_use]
    pub fn forward_bytes(
        &self,
        actor: &[u8],
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
        map: ReplyMap,
    ) -> Option<PacketTurn> {
        let f = self.session.owner.forward_bytes_start(
            &self.session.entry,
            actor,
            key,
            payload,
            timeout,
            map,
        )?;
        Some(match f {
            Ok(f) => PacketTurn::Forward(Forward(f)),
            Err(e) => PacketTurn::Done(Err(e.into())),
        })
    }

    /// Binds the session to the incarnation `actor` (SB-5.1, SB-5.2, SB-6.1): one 38 to the
    /// ref's location; the terminal is returned once the route is stored (SB-5.7). Binding the
    /// current binding again is idempotent (SB-6.7).
    ///
    /// # Errors
    /// The SB-12 kinds: `InvalidOperation` (another incarnation), `Unavailable` (stale location,
    /// owner down, session closing), `NotFound`.
    pub async fn bind(&self, actor: &ActorRef) -> Result<BoundActor, SessionError> {
        let binding = self.session.owner.bind(&self.session.entry, actor).await?;
        Ok(BoundActor {
            session: self.session.clone(),
            binding: Arc::new(binding),
        })
    }

    /// BindOrGet (SB-5.13): this session's binding of exactly that ActorId + ObjectGeneration,
    /// else a bind.
    ///
    /// # Errors
    /// As [`SessionActors::bind`].
    pub async fn bind_or_get(&self, actor: &ActorRef) -> Result<BoundActor, SessionError> {
        if let Some(b) = self.session.entry.find(actor.id())
            && b.object_generation == actor.object_generation()
        {
            return Ok(BoundActor {
                session: self.session.clone(),
                binding: b,
            });
        }
        self.bind(actor).await
    }
}

/// The packet turn of a one-way 24 handed to the host: [`PacketTurn::Done`] with `reply` (or
/// the refusal) when it was decided at once, else the turn that waits for it.
fn turn_of(sent: owner::RelaySent, reply: Bytes) -> PacketTurn {
    match sent {
        owner::RelaySent::Now(out) => {
            PacketTurn::Done(out.map(|_| reply).map_err(|e| owner::remote(e).into()))
        }
        owner::RelaySent::Later(wait) => PacketTurn::Later(Box::pin(async move {
            wait.await.map_err(owner::remote)?;
            Ok(reply)
        })),
    }
}

/// One bound actor of a session (SB-13).
#[derive(Clone, Debug)]
pub struct BoundActor {
    session: Session,
    /// Shared with the aggregate's entry (`find` takes a reference, not a copy).
    binding: Arc<Binding>,
}

impl BoundActor {
    /// The bound incarnation with its current location snapshot: after a relocation's commit
    /// the target's (SB-1.3), same ActorId and ObjectGeneration.
    #[must_use]
    pub fn actor_ref(&self) -> ActorRef {
        let b = self.binding();
        ActorRef::from_parts(
            b.actor.clone(),
            b.actor_type.to_string(),
            b.object_generation,
            b.route.clone(),
        )
    }

    /// The binding (identity, route, token) as it is now: the session's current value of this
    /// binding identity (a relocation's commit replaces its route, SB-1.3), or the value this
    /// handle was made with once the binding ended.
    #[must_use]
    pub fn binding(&self) -> Arc<Binding> {
        match self.session.entry.find(&self.binding.actor) {
            Some(b) if b.generation == self.binding.generation => b,
            _ => self.binding.clone(),
        }
    }

    /// A typed request to the bound actor over the stored route (24 with the bound-session tail;
    /// straight into the actor's queue). Exactly one terminal; never resent (SB-12).
    ///
    /// # Errors
    /// `InvalidOperation` session-not-bound (replaced or unbound), the actor owner's kinds,
    /// `DeadlineExceeded`.
    pub async fn request<M: Message>(
        &self,
        msg: &M,
        timeout: Duration,
    ) -> Result<M::Reply, SessionError> {
        let payload =
            rmp_serde::to_vec_named(msg).map_err(|e| SessionError::Codec(e.to_string()))?;
        let reply = self
            .relay(M::KEY, Bytes::from(payload), Some(timeout))
            .await?;
        rmp_serde::from_slice(&reply.unwrap_or_default())
            .map_err(|e| SessionError::Codec(e.to_string()))
    }

    /// A typed one-way send to the bound actor (24 without correlation).
    ///
    /// # Errors
    /// As [`BoundActor::request`] (local refusals only).
    pub async fn send<M: Message>(&self, msg: &M) -> Result<(), SessionError> {
        let payload =
            rmp_serde::to_vec_named(msg).map_err(|e| SessionError::Codec(e.to_string()))?;
        self.relay(M::KEY, Bytes::from(payload), None)
            .await
            .map(|_| ())
    }

    /// `relay(dispatch, payload)` (SB-13): a request when `timeout` is given (the reply bytes),
    /// a one-way send otherwise.
    ///
    /// # Errors
    /// As [`BoundActor::request`].
    pub async fn relay(
        &self,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
    ) -> Result<Option<Bytes>, SessionError> {
        self.session
            .owner
            .relay(
                &self.session.entry,
                &self.binding.actor,
                self.binding.generation,
                key,
                payload,
                timeout,
            )
            .await
    }

    /// A one-way [`BoundActor::relay`] for a [`SessionHandlers::packet_turn`] handler (the
    /// session's fast path, "Relaying from a packet handler" in the [module doc](self)):
    /// [`PacketTurn::Done`] with `reply` (or the refusal) when the 24 was admitted at once —
    /// the common case, no future allocated — else the turn that waits for the peer's budget.
    /// The same checks and the same 24 as `relay` (SB-5.3, SB-5.10): a refusal (the binding
    /// ended since `find`, the session closed) is counted (SB-5.9).
    #[must_use]
    pub fn send_turn(&self, key: DispatchKey, payload: Bytes, reply: Bytes) -> PacketTurn {
        let sent = self.session.owner.relay_start(
            &self.session.entry,
            &self.binding.actor,
            self.binding.generation,
            key,
            payload,
            None,
        );
        match sent {
            Err(e) => PacketTurn::Done(Err(e.into())),
            Ok(sent) => turn_of(sent, reply),
        }
    }

    /// A relay request that answers the packet being handled: the packet turn for a
    /// [`SessionHandlers::packet_turn`] handler to return. The 24 (a request with `timeout`)
    /// goes over the stored route as [`BoundActor::relay`]'s; the turn ends once it is in the
    /// actor owner's queue (so this session's later relays to the actor follow it, SB-5.3),
    /// not when the actor replies: the session's next packets, to this actor or another, run
    /// meanwhile (SB-1.5, SB-10). The actor's reply, converted by `map`, then answers the
    /// client's request (its refusal or `DeadlineExceeded` the same way); a one-way packet's
    /// outcome is only logged.
    #[must_use]
    pub fn forward(
        &self,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
        map: ReplyMap,
    ) -> PacketTurn {
        match self.session.owner.forward_start(
            &self.session.entry,
            &self.binding.actor,
            self.binding.generation,
            key,
            payload,
            timeout,
            map,
        ) {
            Ok(f) => PacketTurn::Forward(Forward(f)),
            Err(e) => PacketTurn::Done(Err(e.into())),
        }
    }

    /// Application unbind: tombstones exactly this binding identity at the actor owner (38,
    /// SB-6.6).
    ///
    /// # Errors
    /// `InvalidOperation` when the binding is no longer current.
    pub async fn unbind(&self) -> Result<(), SessionError> {
        self.session
            .owner
            .remove(
                &self.session.entry,
                &self.binding.actor,
                self.binding.generation,
                false,
            )
            .await
    }

    /// Public `NotifyDisconnected` (SB-7.5): runs the actor's current Spot `on_disconnect_actor`
    /// once, waits for its terminal, then tombstones the binding; the connection stays.
    ///
    /// # Errors
    /// `InvalidOperation` when the binding is no longer current (already notified).
    pub async fn notify_disconnected(&self) -> Result<(), SessionError> {
        self.session
            .owner
            .remove(
                &self.session.entry,
                &self.binding.actor,
                self.binding.generation,
                true,
            )
            .await
    }
}
