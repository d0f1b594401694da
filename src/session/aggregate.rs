//! `SessionBindingAggregate`: the single serial section of one session on its session owner
//! (glossary; SB-2, SB-4, SB-5, SB-6, SB-7). A plain state machine: inputs are `begin_*` /
//! `complete_*` / `handle_*` calls with `now` where time matters, outputs are return values the
//! driver turns into effects (a 38 to send, a callback to run, a connection to close). It never
//! reads the Location Store, never picks relocation targets, never re-checks transport values
//! (the sender of a record is authenticated by the mesh) and never re-validates actor authority
//! (SB-2.1).
//!
//! What it validates, once: the physical session identity (session owner NodeRid, its lifecycle
//! generation, SessionRid), the binding generation with its ActorId / ObjectGeneration, and the
//! relocation identity (SB-8.1). Per bound actor it keeps exactly the SB-4 fields ([`Binding`]).
//!
//! Relocation (SB-8): a 42 installs a [`Seal`] on one binding ([`SessionBindingAggregate::handle_seal`]);
//! its relays are then held in arrival order ([`RelayTicket::held`],
//! [`SessionBindingAggregate::hold_relay`]). A 44 ([`SessionBindingAggregate::handle_route`])
//! commits — the binding's route and ActorRef snapshot switch to the target in this one step,
//! same binding identity — or aborts; either way the held relays then leave in order over the
//! binding's route ([`SessionBindingAggregate::next_released`]) before anything submitted
//! later. The seal timeout ([`SessionBindingAggregate::handle_seal_timeouts`]) closes the
//! session instead. Seal and retired-binding rejection are distinct: a sealed binding is still
//! current (SB-8 intro).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink_wire::{
    ActorId, ActorLocation, ActorSend, ActorSendTemplate, BindSnapshot, BindingGeneration,
    BoundSessionReplaced, BoundSessionSend, BoundSessionTail, Deadline, DispatchKey, ErrorKind,
    NodeGeneration, NodeRid, ObjectGeneration, OwnerId, OwnerLeaseGeneration, RelocationId,
    SessionLifecycleGeneration, SessionRelocationRoute, SessionRelocationSeal, SessionRid,
    SessionSequence,
};

use super::flow::FlowReject;
use super::seal::{HeldRelay, Seal, SealGauges, SealPhase};
use crate::hashing::SeededMap;

/// The fixed delay between the replaced-callback terminal and the close of the old connection
/// (SB-6.4; not shortened when the outbound queue drains).
pub const REPLACEMENT_CLOSE_DELAY: Duration = Duration::from_millis(100);

/// Bindings (current and in flight) one session may hold by default: what a client can make
/// its session owner keep is bounded ([`SessionBindingAggregate::with_binding_limit`]).
pub const DEFAULT_BINDING_LIMIT: usize = 1024;

/// Pushes one session holds for binds in flight ([`SessionBindingAggregate::hold_push`]): what
/// an actor owner can make a session keep before a bind's terminal is bounded.
pub const HELD_PUSH_LIMIT: usize = 64;

/// Retired binding generations remembered per session (to tell a duplicate 51 from a foreign
/// one in the counters; rejection never depends on this memory).
const RETIRED_MEMORY: usize = 64;

/// The physical session identity (SB-4, SB-8.1): session owner NodeRid, its lifecycle
/// generation (new per process start) and the SessionRid the mesh gave the connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionIdentity {
    /// The session owner node.
    pub owner: NodeRid,
    /// The session owner's lifecycle generation.
    pub lifecycle: SessionLifecycleGeneration,
    /// The connection's session id.
    pub session: SessionRid,
}

/// A session-owner-local handle to one binding (never on the wire, SB-4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BindingToken(u64);

/// What the application asks to bind: the ActorRef's id, incarnation and location snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindTarget {
    /// Actor.
    pub actor: ActorId,
    /// The ActorRef's type name (handed back in the bound actor's ref; shared, so a binding
    /// clone on the relay path allocates nothing).
    pub actor_type: std::sync::Arc<str>,
    /// Incarnation.
    pub object_generation: ObjectGeneration,
    /// Location snapshot (the first route, SB-5.1).
    pub location: ActorLocation,
}

/// One current binding, with exactly the SB-4 fields the session owner keeps per actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// ActorId.
    pub actor: ActorId,
    /// The ActorRef's type name.
    pub actor_type: std::sync::Arc<str>,
    /// ObjectGeneration.
    pub object_generation: ObjectGeneration,
    /// Route and owner fences: MeshName, owner NodeRid, NodeGeneration,
    /// AuthorityOwnerGeneration, OwnerLeaseGeneration.
    pub route: ActorLocation,
    /// Binding generation (with the session identity: the binding identity).
    pub generation: BindingGeneration,
    /// Local token.
    pub token: BindingToken,
    /// The session owner's own lease generation sent with the 38 (returned by a 51).
    pub owner_lease: OwnerLeaseGeneration,
    /// Not state: the envelope of this binding's one-way 24s up to the key, encoded from the
    /// fields above when the binding is made ([`ActorSendTemplate`]), for an actor on another
    /// node only: `None` for an actor on this node (its relays do not cross the mesh), or if it
    /// could not be made (then each 24 is encoded whole). A binding value is never changed
    /// after that: a rebind makes a new one, and a relocation's commit replaces the shared
    /// value with one of the new route and its own template (SB-1.3), so it always matches.
    relay: Option<Arc<ActorSendTemplate>>,
}

impl Binding {
    /// The one-way 24 template of a binding with these fields in session lifecycle
    /// `lifecycle`.
    fn relay_template(
        actor: &ActorId,
        object_generation: ObjectGeneration,
        route: &ActorLocation,
        lifecycle: SessionLifecycleGeneration,
        generation: BindingGeneration,
    ) -> Option<Arc<ActorSendTemplate>> {
        ActorSendTemplate::new(&ActorSend {
            actor: actor.clone(),
            object_generation,
            authority_owner_generation: route.authority_owner_generation,
            owner_lease_generation: route.owner_lease_generation,
            session_lifecycle: lifecycle,
            key: DispatchKey::new(0),
            deadline: None,
            tail: BoundSessionTail {
                binding_generation: generation,
                session_sequence: SessionSequence::new(0),
            },
        })
        .map(Arc::new)
    }
}

/// A push (36) that arrived for a bind this session has in flight with exactly its binding
/// identity, before the bind's terminal (the terminal travels on the completion connection,
/// the push on the relay connection): held until the terminal is published, then checked as
/// any push (SB-5.6, SB-5.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldPush {
    /// The record.
    pub push: BoundSessionSend,
    /// Its payload.
    pub payload: bytes::Bytes,
}

/// A bind to send: the values of one 38 Bind request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindRequest {
    /// What to bind.
    pub target: BindTarget,
    /// The binding generation to register.
    pub generation: BindingGeneration,
}

/// The result of [`SessionBindingAggregate::begin_bind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindStart {
    /// This session already holds the current binding of that incarnation: idempotent success,
    /// no 38, no 51, no close (SB-6.7, SB-5.13).
    Current(Binding),
    /// Send this 38 Bind; answer with [`SessionBindingAggregate::complete_bind`].
    Request(BindRequest),
}

/// A binding the actor owner may still hold that this session will never use: tombstone it
/// with a 38 Unbind (SB-6.6) over `route`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tombstone {
    /// Actor.
    pub actor: ActorId,
    /// Incarnation.
    pub object_generation: ObjectGeneration,
    /// Where the actor owner is.
    pub route: ActorLocation,
    /// The binding generation to tombstone.
    pub generation: BindingGeneration,
}

/// The result of [`SessionBindingAggregate::complete_bind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindCompletion {
    /// Registered and published at one point (SB-5.7): relays and push checks use it from now
    /// on. `previous` is this session's binding of an older incarnation it replaced.
    Bound {
        /// The new binding.
        binding: Binding,
        /// The binding of another incarnation of the same actor that it replaced.
        previous: Option<Binding>,
    },
    /// The actor owner refused; any previous binding is kept (SB-6.1).
    Failed(ErrorKind),
    /// Nobody waits for this reply (the session ended, or another bind superseded it); the
    /// reply is never applied to anything else (SB-12, SB-14.15). A successful late bind leaves
    /// a binding at the actor owner that must be tombstoned.
    Late {
        /// Why it is late.
        reason: FlowReject,
        /// The binding to tombstone at the actor owner, if the bind succeeded there.
        tombstone: Option<Tombstone>,
    },
}

/// What a relay carries to the actor owner (24: route, fences and the bound-session tail): the
/// binding it goes through (shared, not copied field by field) and its session sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayTicket {
    /// The binding: target actor, incarnation, the stored route (never re-resolved, SB-5.10)
    /// and the registered binding generation.
    pub binding: Arc<Binding>,
    /// Session owner lifecycle generation (scope of the binding generation, SB-4.3).
    pub lifecycle: SessionLifecycleGeneration,
    /// The message's session sequence.
    pub sequence: SessionSequence,
    /// The binding is sealed by a relocation (SB-8.2): the relay is held by the aggregate
    /// ([`SessionBindingAggregate::hold_relay`]), not sent over the route.
    pub(crate) held: bool,
}

impl RelayTicket {
    /// Whether the binding is sealed by a relocation: the relay is held until the 44 (SB-8.2).
    #[must_use]
    pub fn held(&self) -> bool {
        self.held
    }

    /// The actor owner's node (the stored route).
    #[must_use]
    pub fn to(&self) -> &NodeRid {
        &self.binding.route.node
    }

    /// The registered binding generation.
    #[must_use]
    pub fn generation(&self) -> BindingGeneration {
        self.binding.generation
    }

    /// The 24 of this relay with `key` (a request relay: with its `deadline`).
    #[must_use]
    pub fn record(&self, key: DispatchKey, deadline: Option<Deadline>) -> ActorSend {
        let b = &*self.binding;
        ActorSend {
            actor: b.actor.clone(),
            object_generation: b.object_generation,
            authority_owner_generation: b.route.authority_owner_generation,
            owner_lease_generation: b.route.owner_lease_generation,
            session_lifecycle: self.lifecycle,
            key,
            deadline,
            tail: BoundSessionTail {
                binding_generation: b.generation,
                session_sequence: self.sequence,
            },
        }
    }

    /// The binding's one-way 24 template, which encodes [`Self::record`] without a deadline
    /// from a key and [`Self::sequence`] alone (`None`: encode the record). `Some` only for an
    /// actor on another node than the session owner's.
    pub(crate) fn template(&self) -> Option<&ActorSendTemplate> {
        self.binding.relay.as_deref()
    }
}

/// One replacement relation of a closing session (SB-6.9: told apart by the replacement
/// sequence, together with the connection's SessionRid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacement {
    /// Replacement sequence within this session.
    pub seq: u64,
    /// The replaced actor.
    pub actor: ActorId,
    /// The retired binding generation.
    pub retired: BindingGeneration,
    /// When the session entered *closing*.
    pub started: Instant,
    /// When the last outstanding replaced-callback of this closing session reached its
    /// terminal (`None` while one runs).
    pub callback_done: Option<Instant>,
    /// Whether the first replacement's callback reached its terminal.
    pub first_done: bool,
    /// Replacements applied while the session was already closing (SB-6.2, SB-6.9): each has
    /// its own sequence and its own replaced-callback; the close waits for all of them.
    pub later: Vec<LaterReplacement>,
}

/// A replacement applied to a session that was already closing ([`Replacement::later`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaterReplacement {
    /// Replacement sequence within this session.
    pub seq: u64,
    /// The replaced actor.
    pub actor: ActorId,
    /// The retired binding generation.
    pub retired: BindingGeneration,
    /// Its replaced-callback reached its terminal.
    pub done: bool,
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The connection closed (client disconnect, liveness timeout, node close, shutdown).
    Disconnected,
    /// The replacement timer closed it (SB-6.4).
    Replaced,
    /// A relocation seal timed out before its 44 (SB-8.3).
    RelocationTimeout,
}

/// The session's phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Serving.
    Open,
    /// Replaced (SB-6.3): no new inbound application dispatch; callback outbound sends allowed;
    /// the connection closes 100 ms after the replaced-callback terminal or at the callback
    /// timeout.
    Closing(Replacement),
    /// Ended; every input is refused.
    Closed(SessionEnd),
}

/// The result of a 51 that applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplacedOutcome {
    /// The binding is retired and the session entered *closing*: run the replaced-callback
    /// (replacement `seq`), then report [`SessionBindingAggregate::callback_finished`].
    Closing {
        /// Replacement sequence.
        seq: u64,
        /// The retired binding.
        retired: Binding,
    },
    /// The binding is retired; the session was already closing for an earlier replacement:
    /// run the replaced-callback for this actor too (replacement `seq`), then report
    /// [`SessionBindingAggregate::callback_finished`]; the close waits for it.
    AlsoClosing {
        /// Replacement sequence.
        seq: u64,
        /// The retired binding.
        retired: Binding,
    },
}

/// A close the timers decided (SB-6.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloseDecision {
    /// The replacement relation that closes.
    pub seq: u64,
    /// `true` when the callback did not finish within the callback timeout.
    pub forced: bool,
}

/// The serial section of one session (see the module docs).
#[derive(Debug)]
pub struct SessionBindingAggregate {
    id: SessionIdentity,
    owner_id: OwnerId,
    callback_timeout: Duration,
    binding_limit: usize,
    phase: Phase,
    /// Shared: a handle (`BoundActor`) takes a reference, not a copy of the fields' ids.
    bindings: SeededMap<ActorId, Arc<Binding>>,
    /// The binding the last [`SessionBindingAggregate::relay`] went through: a copy of its
    /// entry in `bindings`, cleared whenever `bindings` changes, so it is always current. A
    /// client relays to one actor packet after packet: `find` and `relay` compare its id (and
    /// generation) with this one's first, without a hash lookup.
    last_relayed: Option<Arc<Binding>>,
    pending: SeededMap<ActorId, BindRequest>,
    /// Pushes for binds in flight, in arrival order (at most [`HELD_PUSH_LIMIT`]).
    held: Vec<HeldPush>,
    /// Bindings whose public `NotifyDisconnected` runs (SB-7.5): no longer current for the
    /// application (no relay, not listed), but a push of exactly that identity still reaches
    /// the client until the Spot callback's terminal ([`SessionBindingAggregate::finish_notify`]).
    notifying: Vec<Arc<Binding>>,
    /// The last [`RETIRED_MEMORY`] notified bindings after their terminal: a push the actor's
    /// Spot callback sent before the actor owner's tombstone travels on the relay connection
    /// and may arrive after the 38 terminal (completion connection); it is still delivered.
    /// The actor owner sends none after its tombstone (its push path refuses).
    notified: VecDeque<Arc<Binding>>,
    retired: VecDeque<BindingGeneration>,
    /// Relocation seals by actor (SB-8): at most one per binding.
    seals: SeededMap<ActorId, Seal>,
    /// SessionRelocationSealTimeout (SB-8.3).
    seal_timeout: Duration,
    /// What the seals of this session may hold before a relay's admission waits for the
    /// release: the session lane's own limits (items, payload bytes), no capacity of the
    /// relocation's own (SB-8.2).
    held_limit: (usize, u64),
    /// The last [`RETIRED_MEMORY`] relocations whose seal ended here, and how: a 44 for one of
    /// them is a duplicate (same kind) or late (SB-8.3).
    ended_seals: VecDeque<(RelocationId, BindingGeneration, SealEnd)>,
    next_sequence: u64,
    next_token: u64,
    next_replacement: u64,
}

/// How a seal ended ([`SessionBindingAggregate::handle_route`] tells a duplicate 44 from a
/// late one by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SealEnd {
    Committed,
    Aborted,
    TimedOut,
}

/// Default SessionRelocationSealTimeout of an aggregate (SB-8.3).
pub const DEFAULT_SEAL_TIMEOUT: Duration = Duration::from_millis(3_000);

/// A 44 the aggregate applied ([`SessionBindingAggregate::handle_route`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteApplied {
    /// The route and ActorRef snapshot switched to the target (SB-8.7, SB-1.3): the binding
    /// as it is now (same identity). Release the held relays over it.
    Committed(Arc<Binding>),
    /// The seal is released, the source route kept (SB-8.5): release the held relays.
    Aborted(Arc<Binding>),
}

/// The next step of a seal being released ([`SessionBindingAggregate::next_released`]).
#[derive(Debug)]
pub enum Released {
    /// Send this held relay through this ticket (the binding's route now), then ask again.
    Send(RelayTicket, HeldRelay),
    /// A held request whose deadline passed: answer `DeadlineExceeded`, then ask again.
    Expired(HeldRelay),
    /// Nothing is held any more: the seal ended, relays go straight to the route.
    Done,
}

/// What the seal timers decided ([`SessionBindingAggregate::handle_seal_timeouts`]).
#[derive(Debug, Default)]
pub struct SealTimeouts {
    /// Held requests whose deadline passed: answer `DeadlineExceeded`.
    pub expired: Vec<HeldRelay>,
    /// A seal timed out (SB-8.3): the session is closed; close the connection
    /// (`RelocationSealTimeout`). These held relays are never delivered: answer them.
    pub closed: Option<Vec<HeldRelay>>,
}

impl SessionBindingAggregate {
    /// A new open session. `owner_id` is the session owner's host id (SB-6.2);
    /// `callback_timeout` is SessionReplacementCallbackTimeout.
    #[must_use]
    pub fn new(id: SessionIdentity, owner_id: OwnerId, callback_timeout: Duration) -> Self {
        Self {
            id,
            owner_id,
            callback_timeout,
            binding_limit: DEFAULT_BINDING_LIMIT,
            phase: Phase::Open,
            bindings: SeededMap::default(),
            last_relayed: None,
            pending: SeededMap::default(),
            held: Vec::new(),
            notifying: Vec::new(),
            notified: VecDeque::new(),
            retired: VecDeque::new(),
            seals: SeededMap::default(),
            seal_timeout: DEFAULT_SEAL_TIMEOUT,
            held_limit: (1024, 64 << 20),
            ended_seals: VecDeque::new(),
            next_sequence: 1,
            next_token: 1,
            next_replacement: 1,
        }
    }

    /// At most `limit` bindings, current and in flight (at least 1).
    #[must_use]
    pub fn with_binding_limit(mut self, limit: usize) -> Self {
        self.binding_limit = limit.max(1);
        self
    }

    /// SessionRelocationSealTimeout (SB-8.3) and what its seals may hold (items, payload
    /// bytes: the session lane's limits) before a relay's admission waits.
    #[must_use]
    pub fn with_seal_limits(
        mut self,
        timeout: Duration,
        held_items: usize,
        held_bytes: u64,
    ) -> Self {
        self.seal_timeout = timeout;
        self.held_limit = (held_items.max(1), held_bytes.max(1));
        self
    }

    /// The session identity.
    #[must_use]
    pub fn identity(&self) -> &SessionIdentity {
        &self.id
    }

    /// The phase.
    #[must_use]
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Whether new inbound application dispatch is allowed (SB-6.3).
    #[must_use]
    pub fn accepts_packets(&self) -> bool {
        matches!(self.phase, Phase::Open)
    }

    /// The current bindings (`session.actors().bound()`).
    pub fn bound(&self) -> impl Iterator<Item = &Binding> + '_ {
        self.bindings.values().map(|b| &**b)
    }

    /// [`SessionBindingAggregate::bound`] as shared handles.
    pub(crate) fn bound_shared(&self) -> impl Iterator<Item = &Arc<Binding>> + '_ {
        self.bindings.values()
    }

    /// The current binding of `actor` (`session.actors().find(id)`).
    #[must_use]
    pub fn find<Q>(&self, actor: &Q) -> Option<&Binding>
    where
        ActorId: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.bindings.get(actor).map(|b| &**b)
    }

    /// [`SessionBindingAggregate::find`] as a shared handle (one reference count, no copy).
    /// The binding of the last relay (`last_relayed`) is compared first: a client relays to
    /// one actor packet after packet, and its packet handler finds that actor by id each time.
    pub(crate) fn find_shared<Q>(&self, actor: &Q) -> Option<Arc<Binding>>
    where
        ActorId: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        use std::borrow::Borrow;
        match &self.last_relayed {
            Some(b) if Borrow::<Q>::borrow(&b.actor) == actor => Some(b.clone()),
            _ => self.bindings.get(actor).cloned(),
        }
    }

    /// [`SessionBindingAggregate::find_shared`] by the id's text as bytes: the previous
    /// relay's binding is compared byte for byte, so a packet handler that read the id from
    /// the client's bytes checks its UTF-8 only when it names another actor (bytes that are not
    /// UTF-8 name no binding).
    pub(crate) fn find_shared_bytes(&self, actor: &[u8]) -> Option<Arc<Binding>> {
        match &self.last_relayed {
            Some(b) if b.actor.as_bytes() == actor => Some(b.clone()),
            _ => self.bindings.get(std::str::from_utf8(actor).ok()?).cloned(),
        }
    }

    /// Number of binds waiting for their terminal.
    #[must_use]
    pub fn pending_binds(&self) -> usize {
        self.pending.len()
    }

    fn refuse_if_ended(&self) -> Result<(), FlowReject> {
        match self.phase {
            Phase::Open => Ok(()),
            Phase::Closing(_) => Err(FlowReject::SessionClosing),
            Phase::Closed(_) => Err(FlowReject::SessionClosed),
        }
    }

    fn retire(&mut self, generation: BindingGeneration) {
        if self.retired.len() == RETIRED_MEMORY {
            self.retired.pop_front();
        }
        self.retired.push_back(generation);
    }

    fn stale(&self, generation: BindingGeneration) -> FlowReject {
        if self.retired.contains(&generation)
            || self.notifying.iter().any(|b| b.generation == generation)
        {
            FlowReject::BindingRetired
        } else {
            FlowReject::NotBound
        }
    }

    /// Starts a bind (SB-5.1): `generation` is a fresh binding generation of this session
    /// owner's lifecycle, `owner_lease` the session owner's current lease generation.
    ///
    /// # Errors
    /// The session is closing or closed, or a bind of that actor is already in flight.
    pub fn begin_bind(
        &mut self,
        target: BindTarget,
        generation: BindingGeneration,
    ) -> Result<BindStart, FlowReject> {
        self.refuse_if_ended()?;
        if let Some(b) = self.bindings.get(&target.actor)
            && b.object_generation == target.object_generation
        {
            return Ok(BindStart::Current(Binding::clone(b)));
        }
        if self.pending.contains_key(&target.actor) {
            return Err(FlowReject::BindInProgress);
        }
        if !self.bindings.contains_key(&target.actor)
            && self.bindings.len() + self.pending.len() + self.notifying.len() >= self.binding_limit
        {
            return Err(FlowReject::TooManyBindings);
        }
        let req = BindRequest { target, generation };
        self.pending.insert(req.target.actor.clone(), req.clone());
        Ok(BindStart::Request(req))
    }

    /// The terminal of a 38 Bind (SB-5.2, SB-5.7): on success the binding is installed and
    /// every derived state is published at this one point.
    pub fn complete_bind(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
        owner_lease: OwnerLeaseGeneration,
        result: Result<BindSnapshot, ErrorKind>,
    ) -> BindCompletion {
        let tombstone = |snap: &BindSnapshot| Tombstone {
            actor: snap.actor.clone(),
            object_generation: snap.object_generation,
            route: snap.location.clone(),
            generation: snap.binding_generation,
        };
        let ours = self
            .pending
            .get(actor)
            .is_some_and(|p| p.generation == generation);
        if !ours {
            return BindCompletion::Late {
                reason: FlowReject::LateBindReply,
                tombstone: result.as_ref().ok().map(tombstone),
            };
        }
        let Some(req) = self.pending.remove(actor) else {
            return BindCompletion::Failed(ErrorKind::Unavailable);
        };
        if let Phase::Closed(_) = self.phase {
            return BindCompletion::Late {
                reason: FlowReject::SessionClosed,
                tombstone: result.as_ref().ok().map(tombstone),
            };
        }
        let snap = match result {
            Err(kind) => return BindCompletion::Failed(kind),
            Ok(s) => s,
        };
        if snap.actor != req.target.actor
            || snap.object_generation != req.target.object_generation
            || snap.binding_generation != generation
        {
            return BindCompletion::Late {
                reason: FlowReject::Malformed,
                tombstone: Some(Tombstone {
                    actor: req.target.actor.clone(),
                    object_generation: req.target.object_generation,
                    route: req.target.location.clone(),
                    generation,
                }),
            };
        }
        let token = BindingToken(self.next_token);
        self.next_token += 1;
        let relay = if snap.location.node == self.id.owner {
            None
        } else {
            Binding::relay_template(
                &snap.actor,
                snap.object_generation,
                &snap.location,
                self.id.lifecycle,
                generation,
            )
        };
        let binding = Binding {
            actor: snap.actor,
            actor_type: req.target.actor_type.clone(),
            object_generation: snap.object_generation,
            route: snap.location,
            generation,
            token,
            owner_lease,
            relay,
        };
        self.last_relayed = None;
        let previous = self
            .bindings
            .insert(binding.actor.clone(), Arc::new(binding.clone()))
            .map(Arc::unwrap_or_clone);
        if let Some(p) = &previous {
            self.retire(p.generation);
        }
        BindCompletion::Bound { binding, previous }
    }

    /// A session → actor relay (SB-5.3, SB-5.10) through the binding `generation` (the
    /// caller's handle): the stored route and the bound-session tail, with the next session
    /// sequence. Allowed while *closing* (the replaced-callback may still
    /// talk to other actors).
    ///
    /// # Errors
    /// [`FlowReject::NotBound`] without a current binding; [`FlowReject::SessionClosed`].
    pub fn relay(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
    ) -> Result<RelayTicket, FlowReject> {
        if let Phase::Closed(_) = self.phase {
            return Err(FlowReject::SessionClosed);
        }
        let b = match &self.last_relayed {
            // The binding of the previous relay, still current: no hash lookup.
            Some(b) if b.generation == generation && b.actor == *actor => b,
            _ => {
                let Some(b) = self.bindings.get(actor) else {
                    // A handle of a binding that ended: a stale binding fence (SB-12), unless
                    // this session never held it.
                    return Err(self.stale(generation));
                };
                if b.generation != generation {
                    // A handle of a retired binding never acts on a newer one (SB-4.1).
                    return Err(self.stale(generation));
                }
                &*self.last_relayed.insert(b.clone())
            }
        };
        let held = !self.seals.is_empty() && self.seals.contains_key(actor);
        Ok(Self::ticket(
            b,
            self.id.lifecycle,
            &mut self.next_sequence,
            held,
        ))
    }

    /// [`SessionBindingAggregate::find_shared_bytes`] and [`SessionBindingAggregate::relay`]
    /// in one step: the current binding of the actor whose id has these bytes (the previous
    /// relay's compared byte for byte first, UTF-8 checked only for another id) and the ticket
    /// of a relay through it. `None` when no binding has these bytes.
    ///
    /// # Errors
    /// [`FlowReject::SessionClosed`] (with the binding's actor, for the count).
    pub(crate) fn relay_bytes(
        &mut self,
        actor: &[u8],
    ) -> Option<Result<RelayTicket, (FlowReject, ActorId)>> {
        let closed = matches!(self.phase, Phase::Closed(_));
        let b = match &self.last_relayed {
            Some(b) if b.actor.as_bytes() == actor => b,
            _ => {
                let b = self.bindings.get(std::str::from_utf8(actor).ok()?)?;
                if closed {
                    return Some(Err((FlowReject::SessionClosed, b.actor.clone())));
                }
                &*self.last_relayed.insert(b.clone())
            }
        };
        if closed {
            return Some(Err((FlowReject::SessionClosed, b.actor.clone())));
        }
        let held = !self.seals.is_empty() && self.seals.contains_key(&b.actor);
        Some(Ok(Self::ticket(
            b,
            self.id.lifecycle,
            &mut self.next_sequence,
            held,
        )))
    }

    /// The ticket of a relay through `b`, with the next session sequence.
    fn ticket(
        b: &Arc<Binding>,
        lifecycle: SessionLifecycleGeneration,
        next_sequence: &mut u64,
        held: bool,
    ) -> RelayTicket {
        let sequence = SessionSequence::new(*next_sequence);
        *next_sequence += 1;
        RelayTicket {
            binding: b.clone(),
            lifecycle,
            sequence,
            held,
        }
    }

    /// Checks an actor → session push (36) against exactly the four SB-5.5 values and the
    /// binding identity (SB-5.8). Pushes of other bindings are allowed while *closing*.
    ///
    /// # Errors
    /// The reason from the closed vocabulary (SB-5.9).
    pub fn check_push(&self, push: &BoundSessionSend) -> Result<&Binding, FlowReject> {
        if push.session_lifecycle != self.id.lifecycle {
            return Err(FlowReject::LifecycleMismatch);
        }
        if push.session != self.id.session {
            return Err(FlowReject::UnknownSession);
        }
        if let Phase::Closed(_) = self.phase {
            return Err(FlowReject::SessionClosed);
        }
        let b = match self.bindings.get(&push.actor) {
            Some(b) if b.generation == push.binding_generation => b,
            current => match self
                .notifying
                .iter()
                .chain(self.notified.iter())
                .find(|b| b.actor == push.actor && b.generation == push.binding_generation)
            {
                // Its Spot callback runs (or ran, and its push overtook nothing: see
                // `notified`): the client is still connected (SB-7.5).
                Some(b) => b,
                None if current.is_some() => return Err(FlowReject::BindingRetired),
                None => return Err(self.stale(push.binding_generation)),
            },
        };
        if b.object_generation != push.object_generation {
            return Err(FlowReject::ObjectGenerationMismatch);
        }
        if b.route.node_generation != push.source_node_generation {
            return Err(FlowReject::NodeGenerationMismatch);
        }
        if b.route.authority_owner_generation != push.authority_owner_generation {
            return Err(FlowReject::AuthorityMismatch);
        }
        Ok(b)
    }

    /// A 51 boundSessionReplaced (SB-6.2, SB-6.3, SB-6.6) from `sender` (authenticated by the
    /// mesh). Applies at most once: only if the sender is the record's authority target and
    /// every previous-owner value matches this session and its current binding of the actor.
    ///
    /// # Errors
    /// [`FlowReject::DuplicateReplacement`] for a retired identity,
    /// [`FlowReject::ReplacedIdentityMismatch`] for anything else that does not match; the
    /// session and its bindings are unchanged.
    pub fn handle_replaced(
        &mut self,
        now: Instant,
        sender: (&NodeRid, NodeGeneration),
        rec: &BoundSessionReplaced,
    ) -> Result<ReplacedOutcome, FlowReject> {
        let p = &rec.previous;
        if *sender.0 != rec.authority_target.node
            || sender.1 != rec.authority_target.node_generation
            || p.node != self.id.owner
            || p.lifecycle != self.id.lifecycle
            || p.session != self.id.session
            || p.owner != self.owner_id
        {
            return Err(FlowReject::ReplacedIdentityMismatch);
        }
        // A session closed (by its close timer or a seal timeout) keeps its bindings until its
        // connection's disconnect: a 51 then is refused before anything changes (SB-6.6).
        if let Phase::Closed(_) = self.phase {
            return Err(FlowReject::SessionClosed);
        }
        let Some(b) = self.bindings.get(&rec.actor) else {
            return Err(if self.retired.contains(&p.retired_binding_generation) {
                FlowReject::DuplicateReplacement
            } else {
                FlowReject::ReplacedIdentityMismatch
            });
        };
        if b.generation != p.retired_binding_generation {
            return Err(if self.retired.contains(&p.retired_binding_generation) {
                FlowReject::DuplicateReplacement
            } else {
                FlowReject::ReplacedIdentityMismatch
            });
        }
        if b.owner_lease != p.owner_lease_generation {
            return Err(FlowReject::ReplacedIdentityMismatch);
        }
        self.last_relayed = None;
        // Its seal (if a relocation runs) ends with it: held relays answered by the drop.
        self.seals.remove(&rec.actor);
        let retired = self
            .bindings
            .remove(&rec.actor)
            .map(Arc::unwrap_or_clone)
            .ok_or(FlowReject::ReplacedIdentityMismatch)?;
        self.retire(retired.generation);
        let seq = self.next_replacement;
        self.next_replacement += 1;
        match &mut self.phase {
            Phase::Open => {
                self.phase = Phase::Closing(Replacement {
                    seq,
                    actor: retired.actor.clone(),
                    retired: retired.generation,
                    started: now,
                    callback_done: None,
                    first_done: false,
                    later: Vec::new(),
                });
                Ok(ReplacedOutcome::Closing { seq, retired })
            }
            Phase::Closing(r) => {
                // Its callback runs too: the close waits for it again.
                r.callback_done = None;
                r.later.push(LaterReplacement {
                    seq,
                    actor: retired.actor.clone(),
                    retired: retired.generation,
                    done: false,
                });
                Ok(ReplacedOutcome::AlsoClosing { seq, retired })
            }
            // Refused above, before the binding was taken.
            Phase::Closed(_) => Err(FlowReject::SessionClosed),
        }
    }

    /// The replaced-callback of replacement `seq` reached its terminal (success or failure);
    /// once every replaced-callback of the closing session has, the close is due
    /// [`REPLACEMENT_CLOSE_DELAY`] later. Returns `true` when that deadline was set now
    /// (`false` for another relation, a second report, or while another callback runs).
    pub fn callback_finished(&mut self, now: Instant, seq: u64) -> bool {
        let Phase::Closing(r) = &mut self.phase else {
            return false;
        };
        if r.seq == seq && !r.first_done {
            r.first_done = true;
        } else if let Some(l) = r.later.iter_mut().find(|l| l.seq == seq && !l.done) {
            l.done = true;
        } else {
            return false;
        }
        if r.first_done && r.later.iter().all(|l| l.done) {
            r.callback_done = Some(now);
            true
        } else {
            false
        }
    }

    /// The next instant at which [`SessionBindingAggregate::handle_timeout`] has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Closing(r) => {
                let forced = r.started + self.callback_timeout;
                Some(match r.callback_done {
                    Some(done) => (done + REPLACEMENT_CLOSE_DELAY).min(forced),
                    None => forced,
                })
            }
            _ => None,
        }
    }

    /// Fires due timers: the close of a replaced session 100 ms after its callback terminal, or
    /// at the callback timeout (SB-6.4). The timer rechecks that the relation is still the
    /// replacement target: `seq` must be the current closing relation.
    pub fn handle_timeout(&mut self, now: Instant, seq: u64) -> Option<CloseDecision> {
        let Phase::Closing(r) = &self.phase else {
            return None;
        };
        if r.seq != seq || self.poll_timeout().is_none_or(|t| now < t) {
            return None;
        }
        let forced = r
            .callback_done
            .is_none_or(|done| now < done + REPLACEMENT_CLOSE_DELAY);
        self.phase = Phase::Closed(SessionEnd::Replaced);
        Some(CloseDecision { seq, forced })
    }

    /// Removes this session's binding of `actor` for an application unbind or a public
    /// `NotifyDisconnected` (SB-6.6, SB-7.5); the caller sends the 38 tombstone for exactly this
    /// identity. A second call finds nothing (at most once per binding identity, SB-7.3).
    ///
    /// # Errors
    /// [`FlowReject::NotBound`]; [`FlowReject::SessionClosed`].
    pub fn remove(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
    ) -> Result<Binding, FlowReject> {
        let b = self.take_current(actor, generation)?;
        self.retire(b.generation);
        Ok(Arc::unwrap_or_clone(b))
    }

    /// The current binding `generation` of `actor`, taken out of the current bindings.
    fn take_current(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
    ) -> Result<Arc<Binding>, FlowReject> {
        if let Phase::Closed(_) = self.phase
            && self.bindings.is_empty()
        {
            return Err(FlowReject::SessionClosed);
        }
        match self.bindings.get(actor) {
            None => return Err(self.stale(generation)),
            Some(b) if b.generation != generation => return Err(self.stale(generation)),
            Some(_) => {}
        }
        self.last_relayed = None;
        self.seals.remove(actor);
        self.bindings.remove(actor).ok_or(FlowReject::NotBound)
    }

    /// The physical connection ended (SB-7.1): the session is closed and the binding snapshot
    /// frozen — every current binding identity, each to be notified once over its stored route.
    /// A second call returns nothing. Binds still in flight become late (their replies are
    /// tombstoned, never applied).
    pub fn disconnect(&mut self) -> Vec<Binding> {
        if !matches!(self.phase, Phase::Closed(_)) {
            self.phase = Phase::Closed(SessionEnd::Disconnected);
        }
        self.last_relayed = None;
        // Seals and what they hold end with the session (held requests are answered by the
        // drop of their waiters).
        self.seals.clear();
        let mut snapshot: Vec<Binding> = self
            .bindings
            .drain()
            .map(|(_, b)| Arc::unwrap_or_clone(b))
            .collect();
        snapshot.sort_by_key(|b| b.token);
        for b in &snapshot {
            self.retire(b.generation);
        }
        // Being notified already (SB-7.3): not notified again.
        for b in std::mem::take(&mut self.notifying) {
            self.retire(b.generation);
        }
        self.notified.clear();
        snapshot
    }

    /// A 42 from `sender` (authenticated by the mesh): installs the seal on the binding it
    /// names (SB-8.1). Validates only the physical session identity and SessionRid, the binding
    /// generation with its ActorId / ObjectGeneration (the current binding), the relocation
    /// identity, and that the sender is the binding's current route (the actor owner). A 42 of
    /// the seal installed already is answered `Installed` again (idempotent).
    ///
    /// # Errors
    /// The counted reason and the SB-12 kind of the 43 `Rejected`.
    pub fn handle_seal(
        &mut self,
        now: Instant,
        sender: (&NodeRid, NodeGeneration),
        rec: &SessionRelocationSeal,
    ) -> Result<(), (FlowReject, ErrorKind)> {
        let id = &rec.seal;
        if id.session_lifecycle != self.id.lifecycle {
            return Err((FlowReject::LifecycleMismatch, ErrorKind::Unavailable));
        }
        if id.session != self.id.session {
            return Err((FlowReject::UnknownSession, ErrorKind::Unavailable));
        }
        if let Err(r) = self.refuse_if_ended() {
            return Err((r, ErrorKind::Unavailable));
        }
        let b = match self.bindings.get(&rec.actor) {
            Some(b) if b.generation == id.binding_generation => b,
            // Not the current binding (retired, or never this session's): a stale binding.
            _ => return Err((self.stale(id.binding_generation), ErrorKind::Unavailable)),
        };
        if b.object_generation != rec.object_generation {
            return Err((
                FlowReject::ObjectGenerationMismatch,
                ErrorKind::InvalidOperation,
            ));
        }
        if *sender.0 != b.route.node || sender.1 != b.route.node_generation {
            return Err((FlowReject::NotActorOwner, ErrorKind::Unavailable));
        }
        match self.seals.get(&rec.actor) {
            Some(s) if s.identity == *id && matches!(s.phase, SealPhase::Installed { .. }) => {
                Ok(())
            }
            // Another relocation's seal, or this one's being released: the binding is in a
            // relocation (SB-12: `Unavailable`).
            Some(_) => Err((FlowReject::RelocationInProgress, ErrorKind::Unavailable)),
            None => {
                self.seals
                    .insert(rec.actor.clone(), Seal::new(id.clone(), now));
                Ok(())
            }
        }
    }

    /// Whether `actor`'s binding is sealed by a relocation (installed or releasing).
    #[must_use]
    pub fn is_sealed(&self, actor: &ActorId) -> bool {
        self.seals.contains_key(actor)
    }

    /// The seal of `actor`'s binding, if a relocation runs.
    #[must_use]
    pub fn seal(&self, actor: &ActorId) -> Option<&Seal> {
        self.seals.get(actor)
    }

    /// Holds a relay of a sealed binding in arrival order (SB-8.2). `Ok(true)` when the
    /// submitter may go on (its admission signal dropped: the relay is queued in order);
    /// `Ok(false)` when the session's seals hold more than the session lane's limits: the
    /// admission signal is kept until the relay leaves. The relay back when the binding
    /// `generation` of `actor` has no seal (any more): send it over the route.
    ///
    /// # Errors
    /// The relay, handed back.
    pub fn hold_relay(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
        mut relay: HeldRelay,
    ) -> Result<bool, HeldRelay> {
        if self
            .bindings
            .get(actor)
            .is_none_or(|b| b.generation != generation)
        {
            return Err(relay);
        }
        let (items, bytes) = self.held_limit;
        let g = self.seal_gauges();
        let Some(seal) = self.seals.get_mut(actor) else {
            return Err(relay);
        };
        let within = (g.held as usize) < items && g.held_bytes + relay.bytes() as u64 <= bytes;
        if within {
            drop(relay.admitted.take());
        }
        seal.held.push_back(relay);
        Ok(within)
    }

    /// A 44 (SB-8.3, SB-8.7, SB-8.8), from any mesh peer. A commit must match the installed
    /// seal's relocation identity, the session identity and SessionRid, the binding generation
    /// and the binding's ActorId / ObjectGeneration; it switches the binding's route and
    /// ActorRef snapshot to `target` in this one step (same binding identity: not a rebind) and
    /// starts the release of the held relays over it. An abort must match the seal identity;
    /// it starts their release over the unchanged source route.
    ///
    /// # Errors
    /// [`FlowReject::DuplicateRouteUpdate`] for a 44 this session applied already (a no-op);
    /// [`FlowReject::LateRouteUpdate`] for one of no installed seal, another relocation's, or
    /// one after the seal timed out (`late_session_route_update`, changes nothing).
    pub fn handle_route(
        &mut self,
        rec: &SessionRelocationRoute,
    ) -> Result<RouteApplied, FlowReject> {
        let (relocation, lifecycle, session, generation, kind) = match rec {
            SessionRelocationRoute::Commit(c) => (
                c.relocation,
                c.session_lifecycle,
                c.session,
                c.binding_generation,
                SealEnd::Committed,
            ),
            SessionRelocationRoute::Abort(a) => (
                a.seal.relocation,
                a.seal.session_lifecycle,
                a.seal.session,
                a.seal.binding_generation,
                SealEnd::Aborted,
            ),
        };
        if lifecycle != self.id.lifecycle || session != self.id.session {
            return Err(FlowReject::LateRouteUpdate);
        }
        let actor = match rec {
            SessionRelocationRoute::Commit(c) => Some(&c.actor),
            SessionRelocationRoute::Abort(_) => None,
        };
        let found = self.seals.iter().find(|(a, s)| {
            s.identity.relocation == relocation
                && s.identity.binding_generation == generation
                && actor.is_none_or(|x| x == *a)
        });
        let Some((actor, seal)) = found else {
            return Err(self.ended_kind(relocation, generation, kind));
        };
        if seal.phase == SealPhase::Releasing {
            // Applied already (or the other kind of 44 of an applied relocation).
            return Err(match self.ended_kind(relocation, generation, kind) {
                FlowReject::DuplicateRouteUpdate => FlowReject::DuplicateRouteUpdate,
                _ => FlowReject::LateRouteUpdate,
            });
        }
        if let SessionRelocationRoute::Abort(a) = rec
            && a.seal != seal.identity
        {
            return Err(FlowReject::LateRouteUpdate);
        }
        let actor = actor.clone();
        let Some(b) = self.bindings.get(&actor).cloned() else {
            return Err(FlowReject::LateRouteUpdate);
        };
        let applied = match rec {
            SessionRelocationRoute::Commit(c) => {
                if b.object_generation != c.object_generation || b.generation != generation {
                    return Err(FlowReject::LateRouteUpdate);
                }
                // The route and the ActorRef snapshot switch at once, same binding identity
                // (SB-8.7, SB-4.2): every derived copy (the 24 template, `last_relayed`) is
                // replaced with it.
                let relay = if c.target.node == self.id.owner {
                    None
                } else {
                    Binding::relay_template(
                        &b.actor,
                        b.object_generation,
                        &c.target,
                        self.id.lifecycle,
                        b.generation,
                    )
                };
                let moved = Arc::new(Binding {
                    route: c.target.clone(),
                    relay,
                    ..Binding::clone(&b)
                });
                self.last_relayed = None;
                self.bindings.insert(actor.clone(), moved.clone());
                RouteApplied::Committed(moved)
            }
            SessionRelocationRoute::Abort(_) => {
                // The seal's binding was retired (a rebind while sealed): not this binding's
                // 44 (its held relays never go through a newer binding, SB-4.1).
                if b.generation != generation {
                    return Err(FlowReject::LateRouteUpdate);
                }
                RouteApplied::Aborted(b)
            }
        };
        if let Some(seal) = self.seals.get_mut(&actor) {
            seal.phase = SealPhase::Releasing;
        }
        self.remember_ended(relocation, generation, kind);
        Ok(applied)
    }

    fn ended_kind(
        &self,
        relocation: RelocationId,
        generation: BindingGeneration,
        kind: SealEnd,
    ) -> FlowReject {
        match self
            .ended_seals
            .iter()
            .find(|(r, g, _)| *r == relocation && *g == generation)
        {
            Some((_, _, k)) if *k == kind => FlowReject::DuplicateRouteUpdate,
            _ => FlowReject::LateRouteUpdate,
        }
    }

    fn remember_ended(
        &mut self,
        relocation: RelocationId,
        generation: BindingGeneration,
        k: SealEnd,
    ) {
        if self.ended_seals.len() == RETIRED_MEMORY {
            self.ended_seals.pop_front();
        }
        self.ended_seals.push_back((relocation, generation, k));
    }

    /// The next held relay of `actor`'s releasing seal (SB-8.7: in arrival order, over the
    /// binding's route as it is now), skipping requests whose caller stopped waiting; when none
    /// is left the seal ends here, in the same step, so a relay submitted after it goes
    /// straight to the route, behind every held one.
    pub fn next_released(&mut self, now: Instant, actor: &ActorId) -> Released {
        loop {
            let Some(seal) = self.seals.get_mut(actor) else {
                return Released::Done;
            };
            if seal.phase != SealPhase::Releasing {
                return Released::Done;
            }
            let sealed = seal.identity.binding_generation;
            let Some(relay) = seal.held.pop_front() else {
                self.seals.remove(actor);
                return Released::Done;
            };
            if relay.cancelled() {
                continue;
            }
            if relay.request.as_ref().is_some_and(|r| r.deadline <= now) {
                return Released::Expired(relay);
            }
            // Only through the binding it was held for: one retired since (a rebind) ends the
            // seal and its held relays, as a binding that ended does (SB-4.1).
            let Some(b) = self.bindings.get(actor).filter(|b| b.generation == sealed) else {
                self.seals.remove(actor);
                return Released::Done;
            };
            let ticket = Self::ticket(b, self.id.lifecycle, &mut self.next_sequence, false);
            return Released::Send(ticket, relay);
        }
    }

    /// The next instant at which [`SessionBindingAggregate::handle_seal_timeouts`] has work: a
    /// seal's timeout or a held request's deadline.
    #[must_use]
    pub fn poll_seal_timeout(&self) -> Option<Instant> {
        self.seals
            .values()
            .flat_map(|s| {
                let timeout = match s.phase {
                    SealPhase::Installed { since } => Some(since + self.seal_timeout),
                    SealPhase::Releasing => None,
                };
                timeout.into_iter().chain(
                    s.held
                        .iter()
                        .filter_map(|h| h.request.as_ref().map(|r| r.deadline)),
                )
            })
            .min()
    }

    /// Fires due seal timers: held requests past their deadline are taken out (SB-8.2); a seal
    /// installed for SessionRelocationSealTimeout without its 44 closes the session (SB-8.3):
    /// every seal and held relay of it ends, the binding is kept for the disconnect's
    /// notification, and a 44 arriving after this is late.
    pub fn handle_seal_timeouts(&mut self, now: Instant) -> SealTimeouts {
        let mut out = SealTimeouts::default();
        for seal in self.seals.values_mut() {
            let (expired, kept): (VecDeque<HeldRelay>, VecDeque<HeldRelay>) =
                std::mem::take(&mut seal.held)
                    .into_iter()
                    .partition(|h| h.request.as_ref().is_some_and(|r| r.deadline <= now));
            seal.held = kept;
            out.expired.extend(expired);
        }
        let timeout = self.seal_timeout;
        let timed_out = self
            .seals
            .values()
            .any(|s| matches!(s.phase, SealPhase::Installed { since } if since + timeout <= now));
        if timed_out {
            let seals: Vec<(ActorId, Seal)> = self.seals.drain().collect();
            let mut dropped = Vec::new();
            for (_, s) in seals {
                if let SealPhase::Installed { .. } = s.phase {
                    self.remember_ended(
                        s.identity.relocation,
                        s.identity.binding_generation,
                        SealEnd::TimedOut,
                    );
                }
                dropped.extend(s.held);
            }
            self.last_relayed = None;
            if !matches!(self.phase, Phase::Closed(_)) {
                self.phase = Phase::Closed(SessionEnd::RelocationTimeout);
            }
            out.closed = Some(dropped);
        }
        out
    }

    /// What this session's seals hold now.
    #[must_use]
    pub fn seal_gauges(&self) -> SealGauges {
        let mut g = SealGauges::default();
        for s in self.seals.values() {
            g += SealGauges {
                seals: 1,
                held: s.held_len() as u64,
                held_bytes: s.held_bytes() as u64,
            };
        }
        g
    }

    /// A push of a sealed binding that does not pass the push check (SB-5.5) — from the
    /// relocation's target, whose 44 has not been applied yet (it travels on the completion
    /// connection or from another node) — held until the seal's 44: checked again then, after
    /// a commit against the target's values ([`SessionBindingAggregate::take_held`]).
    ///
    /// # Errors
    /// The push back with the reason: [`FlowReject::NotBound`] (no installed seal of exactly
    /// its binding identity), [`FlowReject::ClientBacklogFull`] (at [`HELD_PUSH_LIMIT`]).
    pub fn hold_sealed_push(&mut self, held: HeldPush) -> Result<(), (FlowReject, HeldPush)> {
        let ours = self.seals.get(&held.push.actor).is_some_and(|s| {
            matches!(s.phase, SealPhase::Installed { .. })
                && s.identity.binding_generation == held.push.binding_generation
        }) && self.bindings.get(&held.push.actor).is_some_and(|b| {
            b.generation == held.push.binding_generation
                && b.object_generation == held.push.object_generation
        });
        if !ours {
            return Err((FlowReject::NotBound, held));
        }
        if self.held.len() >= HELD_PUSH_LIMIT {
            return Err((FlowReject::ClientBacklogFull, held));
        }
        self.held.push(held);
        Ok(())
    }

    /// A push for a binding this session does not hold (yet): held if a bind of exactly its
    /// identity (actor, ObjectGeneration, binding generation) is in flight, until that bind's
    /// terminal ([`SessionBindingAggregate::take_held`]); handed back otherwise.
    ///
    /// # Errors
    /// The push back with the reason: [`FlowReject::NotBound`] (no such bind in flight),
    /// [`FlowReject::SessionClosed`], [`FlowReject::ClientBacklogFull`] (at
    /// [`HELD_PUSH_LIMIT`]).
    pub fn hold_push(&mut self, held: HeldPush) -> Result<(), (FlowReject, HeldPush)> {
        if let Phase::Closed(_) = self.phase {
            return Err((FlowReject::SessionClosed, held));
        }
        let ours = self.pending.get(&held.push.actor).is_some_and(|p| {
            p.generation == held.push.binding_generation
                && p.target.object_generation == held.push.object_generation
        });
        if !ours {
            return Err((FlowReject::NotBound, held));
        }
        if self.held.len() >= HELD_PUSH_LIMIT {
            return Err((FlowReject::ClientBacklogFull, held));
        }
        self.held.push(held);
        Ok(())
    }

    /// The pushes held for the bind of `actor` (in arrival order), taken after its terminal
    /// was applied ([`SessionBindingAggregate::complete_bind`]): on success each is checked as
    /// any push now ([`SessionBindingAggregate::check_push`]), else refused.
    pub fn take_held(&mut self, actor: &ActorId) -> Vec<HeldPush> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let (mine, rest) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.push.actor == *actor);
        self.held = rest;
        mine
    }

    /// Public `NotifyDisconnected` of the binding `generation` of `actor` begins (SB-7.5): it
    /// is no longer current for the application (relays refused, not listed, a second notify
    /// or unbind refused: at most once, SB-7.3), but pushes of exactly that identity still
    /// reach the client while the actor's Spot callback runs. The caller sends the 38
    /// Disconnect, then reports [`SessionBindingAggregate::finish_notify`].
    ///
    /// # Errors
    /// As [`SessionBindingAggregate::remove`].
    pub fn begin_notify(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
    ) -> Result<Binding, FlowReject> {
        let b = self.take_current(actor, generation)?;
        self.notifying.push(b.clone());
        Ok(Arc::unwrap_or_clone(b))
    }

    /// The Spot callback of a `NotifyDisconnected` reached its terminal (or the 38 failed):
    /// the binding is tombstoned here too (retired).
    pub fn finish_notify(&mut self, actor: &ActorId, generation: BindingGeneration) {
        if let Some(i) = self
            .notifying
            .iter()
            .position(|b| b.actor == *actor && b.generation == generation)
        {
            let b = self.notifying.swap_remove(i);
            self.retire(b.generation);
            if self.notified.len() == RETIRED_MEMORY {
                self.notified.pop_front();
            }
            self.notified.push_back(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use zlink_wire::{
        AuthorityFence, AuthorityOwnerGeneration, MeshName, OwnerLeaseGeneration,
        PreviousSessionOwner,
    };

    fn rid(s: &str) -> NodeRid {
        NodeRid::new(s).unwrap()
    }

    fn ident() -> SessionIdentity {
        SessionIdentity {
            owner: rid("a"),
            lifecycle: SessionLifecycleGeneration::new(7),
            session: SessionRid::new(3),
        }
    }

    const OWNER: OwnerId = OwnerId::new(99);
    const LEASE: OwnerLeaseGeneration = OwnerLeaseGeneration::new(5);

    fn agg() -> SessionBindingAggregate {
        SessionBindingAggregate::new(ident(), OWNER, Duration::from_secs(30))
    }

    fn loc(node: &str) -> ActorLocation {
        ActorLocation {
            mesh: MeshName::new("m").unwrap(),
            node: rid(node),
            node_generation: NodeGeneration::new(11),
            authority_owner_generation: AuthorityOwnerGeneration::new(2),
            owner_lease_generation: OwnerLeaseGeneration::new(3),
        }
    }

    fn actor(i: u8) -> ActorId {
        ActorId::new(format!("actor-{i}")).unwrap()
    }

    fn target(i: u8, og: u64) -> BindTarget {
        BindTarget {
            actor: actor(i),
            actor_type: "t".into(),
            object_generation: ObjectGeneration::new(og),
            location: loc("b"),
        }
    }

    fn snap(t: &BindTarget, g: BindingGeneration) -> BindSnapshot {
        BindSnapshot {
            actor: t.actor.clone(),
            object_generation: t.object_generation,
            location: t.location.clone(),
            binding_generation: g,
        }
    }

    fn bind(a: &mut SessionBindingAggregate, t: BindTarget, g: u64) -> Binding {
        let g = BindingGeneration::new(g);
        let BindStart::Request(req) = a.begin_bind(t.clone(), g).unwrap() else {
            panic!("expected a 38")
        };
        match a.complete_bind(&t.actor, req.generation, LEASE, Ok(snap(&t, g))) {
            BindCompletion::Bound { binding, .. } => binding,
            other => panic!("{other:?}"),
        }
    }

    fn push_of(b: &Binding) -> BoundSessionSend {
        BoundSessionSend {
            actor: b.actor.clone(),
            object_generation: b.object_generation,
            source_node_generation: b.route.node_generation,
            authority_owner_generation: b.route.authority_owner_generation,
            session_lifecycle: ident().lifecycle,
            session: ident().session,
            binding_generation: b.generation,
            key: zlink_wire::DispatchKey::new(1),
        }
    }

    fn fence(node: &str) -> AuthorityFence {
        AuthorityFence {
            node: rid(node),
            node_generation: NodeGeneration::new(11),
            authority_owner_generation: AuthorityOwnerGeneration::new(2),
            owner_lease_generation: OwnerLeaseGeneration::new(3),
        }
    }

    fn replaced_of(b: &Binding) -> BoundSessionReplaced {
        BoundSessionReplaced {
            actor: b.actor.clone(),
            authority_source: fence("b"),
            authority_target: fence("b"),
            previous: PreviousSessionOwner {
                node: rid("a"),
                lifecycle: ident().lifecycle,
                owner: OWNER,
                owner_lease_generation: LEASE,
                session: ident().session,
                retired_binding_generation: b.generation,
            },
        }
    }

    fn sender() -> (NodeRid, NodeGeneration) {
        (rid("b"), NodeGeneration::new(11))
    }

    fn seal_rec(b: &Binding, relocation: u64) -> SessionRelocationSeal {
        SessionRelocationSeal {
            seal: zlink_wire::SealIdentity {
                relocation: RelocationId::new(relocation),
                session_lifecycle: ident().lifecycle,
                session: ident().session,
                binding_generation: b.generation,
            },
            actor: b.actor.clone(),
            object_generation: b.object_generation,
            deadline: Deadline::from_remaining(Duration::from_secs(1)),
        }
    }

    fn commit_of(b: &Binding, relocation: u64, to: ActorLocation) -> SessionRelocationRoute {
        SessionRelocationRoute::Commit(zlink_wire::RouteCommit {
            relocation: RelocationId::new(relocation),
            actor: b.actor.clone(),
            object_generation: b.object_generation,
            target: to,
            session_lifecycle: ident().lifecycle,
            session: ident().session,
            binding_generation: b.generation,
        })
    }

    fn held(i: u8) -> HeldRelay {
        HeldRelay::one_way(DispatchKey::new(1), bytes::Bytes::from(vec![i]))
    }

    /// Takes every released relay of `actor` (their payloads, in order) until the seal ends.
    fn drain(a: &mut SessionBindingAggregate, now: Instant, actor: &ActorId) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            match a.next_released(now, actor) {
                Released::Send(t, r) => {
                    assert!(!t.held());
                    out.push(r.payload[0]);
                }
                Released::Expired(_) => panic!("nothing expires here"),
                Released::Done => return out,
            }
        }
    }

    // spec: SB-8.1
    // spec: SB-8.2
    // spec: SB-8.7
    #[test]
    fn a_seal_holds_in_order_and_a_commit_moves_the_route_then_releases() {
        let now = Instant::now();
        let mut a = agg();
        let b = bind(&mut a, target(1, 1), 1);
        let other = bind(&mut a, target(2, 1), 2);
        let s = sender();
        // Only the binding's route may seal it.
        assert_eq!(
            a.handle_seal(now, (&rid("x"), s.1), &seal_rec(&b, 9)),
            Err((FlowReject::NotActorOwner, ErrorKind::Unavailable))
        );
        a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
        // Idempotent; another relocation's is refused.
        a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
        assert_eq!(
            a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 10)),
            Err((FlowReject::RelocationInProgress, ErrorKind::Unavailable))
        );
        for i in 0..3 {
            let t = a.relay(&b.actor, b.generation).unwrap();
            assert!(t.held());
            assert_eq!(
                a.hold_relay(&b.actor, b.generation, held(i))
                    .map_err(|_| ()),
                Ok(true)
            );
        }
        // The other actor is not sealed.
        assert!(!a.relay(&other.actor, other.generation).unwrap().held());
        assert!(a.relay(&b.actor, b.generation).unwrap().held());
        assert_eq!(a.seal_gauges().held, 3);
        // Nothing is released before the 44.
        assert!(matches!(a.next_released(now, &b.actor), Released::Done));
        let to = ActorLocation {
            node: rid("c"),
            node_generation: NodeGeneration::new(21),
            authority_owner_generation: AuthorityOwnerGeneration::new(4),
            ..loc("c")
        };
        let applied = a.handle_route(&commit_of(&b, 9, to.clone())).unwrap();
        let RouteApplied::Committed(moved) = applied else {
            panic!("a commit")
        };
        assert_eq!(moved.route, to);
        assert_eq!((moved.generation, moved.token), (b.generation, b.token));
        assert_eq!(a.find(&b.actor).unwrap().route, to, "the one binding moved");
        // Relays submitted while releasing queue behind the held ones.
        let t = a.relay(&b.actor, b.generation).unwrap();
        assert!(t.held(), "still behind the held relays");
        a.hold_relay(&b.actor, b.generation, held(3)).unwrap();
        assert_eq!(drain(&mut a, now, &b.actor), vec![0, 1, 2, 3]);
        // Then straight to the new route; the pushes of the target pass, the source's not.
        let t = a.relay(&b.actor, b.generation).unwrap();
        assert!(!t.held());
        assert_eq!(t.to(), &rid("c"));
        assert_eq!(
            t.record(DispatchKey::new(1), None)
                .authority_owner_generation,
            to.authority_owner_generation
        );
        let mut p = push_of(&b);
        assert_eq!(
            a.check_push(&p).err(),
            Some(FlowReject::NodeGenerationMismatch)
        );
        p.source_node_generation = to.node_generation;
        p.authority_owner_generation = to.authority_owner_generation;
        assert!(a.check_push(&p).is_ok());
        assert_eq!(a.seal_gauges(), SealGauges::default());
        // The same 44 again is a no-op; an abort of it is late.
        assert_eq!(
            a.handle_route(&commit_of(&b, 9, to)),
            Err(FlowReject::DuplicateRouteUpdate)
        );
        let abort = SessionRelocationRoute::Abort(zlink_wire::RouteAbort {
            seal: seal_rec(&b, 9).seal,
            action: zlink_wire::AbortAction::ResubmitToSource,
        });
        assert_eq!(a.handle_route(&abort), Err(FlowReject::LateRouteUpdate));
    }

    // spec: SB-8.3
    #[test]
    fn the_seal_timeout_closes_the_session_and_a_later_44_is_late() {
        let now = Instant::now();
        let mut a = agg().with_seal_limits(Duration::from_millis(3_000), 1024, 1 << 20);
        let b = bind(&mut a, target(1, 1), 1);
        let s = sender();
        a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
        a.hold_relay(&b.actor, b.generation, held(0)).unwrap();
        let due = now + Duration::from_millis(3_000);
        assert_eq!(a.poll_seal_timeout(), Some(due));
        let early = a.handle_seal_timeouts(due - Duration::from_millis(1));
        assert!(early.closed.is_none() && early.expired.is_empty());
        let fired = a.handle_seal_timeouts(due);
        assert_eq!(fired.closed.map(|h| h.len()), Some(1));
        assert_eq!(a.phase(), &Phase::Closed(SessionEnd::RelocationTimeout));
        assert_eq!(a.seal_gauges(), SealGauges::default());
        assert_eq!(
            a.handle_route(&commit_of(&b, 9, loc("c"))),
            Err(FlowReject::LateRouteUpdate)
        );
        assert_eq!(a.find(&b.actor).unwrap().route, loc("b"), "nothing changed");
        // The binding stays for the disconnect's notification.
        assert_eq!(a.disconnect().len(), 1);
    }

    // spec: SB-8.2
    #[test]
    fn held_relays_past_the_session_limits_keep_their_admission() {
        let now = Instant::now();
        let mut a = agg().with_seal_limits(Duration::from_secs(3), 2, 1 << 20);
        let b = bind(&mut a, target(1, 1), 1);
        let s = sender();
        a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
        let mut waits = Vec::new();
        for i in 0..3 {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let mut r = held(i);
            r.admitted = Some(tx);
            waits.push((a.hold_relay(&b.actor, b.generation, r).unwrap(), rx));
        }
        let within: Vec<bool> = waits.iter().map(|(w, _)| *w).collect();
        assert_eq!(within, vec![true, true, false]);
        let (_, mut third) = waits.pop().unwrap();
        assert!(
            third
                .try_recv()
                .is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Empty)
        );
        // An unbind ends the seal and everything it held.
        a.remove(&b.actor, b.generation).unwrap();
        assert_eq!(a.seal_gauges(), SealGauges::default());
        assert!(
            third
                .try_recv()
                .is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Closed)
        );
    }

    // spec: SB-7.5
    #[test]
    fn a_notified_binding_takes_pushes_until_the_callback_terminal() {
        let mut a = agg();
        let b = bind(&mut a, target(1, 1), 1);
        let n = a.begin_notify(&b.actor, b.generation).unwrap();
        assert_eq!(n.generation, b.generation);
        // No longer current for the application: not listed, no relay, notified once.
        assert!(a.find(&b.actor).is_none());
        assert_eq!(
            a.relay(&b.actor, b.generation).unwrap_err(),
            FlowReject::BindingRetired
        );
        assert!(a.begin_notify(&b.actor, b.generation).is_err());
        // The actor's Spot callback may still push to the connected client.
        assert!(a.check_push(&push_of(&b)).is_ok());
        a.finish_notify(&b.actor, b.generation);
        assert!(a.find(&b.actor).is_none());
        // A push the callback sent before the actor owner's tombstone may arrive after the
        // terminal (it travels on another connection): still delivered, as are the new
        // binding's once the actor is bound again; another identity's is refused.
        assert!(a.check_push(&push_of(&b)).is_ok());
        let nb = bind(&mut a, target(1, 1), 9);
        assert!(a.check_push(&push_of(&nb)).is_ok());
        let mut other = push_of(&b);
        other.binding_generation = BindingGeneration::new(77);
        assert_eq!(
            a.check_push(&other).unwrap_err(),
            FlowReject::BindingRetired
        );
        // A physical disconnect meanwhile does not notify it a second time (SB-7.3).
        let b2 = bind(&mut a, target(2, 1), 2);
        a.begin_notify(&b2.actor, b2.generation).unwrap();
        let snapshot = a.disconnect();
        assert_eq!(
            snapshot.iter().map(|b| b.generation).collect::<Vec<_>>(),
            vec![nb.generation],
            "only the current binding"
        );
    }

    // spec: SB-6.2
    // spec: SB-6.9
    #[test]
    fn a_second_replacement_while_closing_runs_its_callback_and_delays_the_close() {
        let mut a = agg();
        let b1 = bind(&mut a, target(1, 1), 1);
        let b2 = bind(&mut a, target(2, 1), 2);
        let now = Instant::now();
        let (s, g) = sender();
        let ReplacedOutcome::Closing { seq: first, .. } =
            a.handle_replaced(now, (&s, g), &replaced_of(&b1)).unwrap()
        else {
            panic!("closing")
        };
        assert!(a.callback_finished(now, first));
        let due = a.poll_timeout().unwrap();
        assert_eq!(due, now + REPLACEMENT_CLOSE_DELAY);
        // The second actor replaced while closing: its own relation and callback.
        let later = now + Duration::from_millis(50);
        let ReplacedOutcome::AlsoClosing {
            seq: second,
            retired,
        } = a
            .handle_replaced(later, (&s, g), &replaced_of(&b2))
            .unwrap()
        else {
            panic!("also closing")
        };
        assert_ne!(second, first);
        assert_eq!(retired.actor, b2.actor);
        // The close waits for it: not at the first deadline.
        assert_eq!(a.handle_timeout(due, first), None);
        let done = later + Duration::from_millis(10);
        assert!(!a.callback_finished(done, first), "reported twice");
        assert!(a.callback_finished(done, second));
        assert_eq!(a.poll_timeout(), Some(done + REPLACEMENT_CLOSE_DELAY));
        assert!(
            a.handle_timeout(done + REPLACEMENT_CLOSE_DELAY, first)
                .is_some_and(|d| !d.forced)
        );
    }

    // spec: SB-5.6
    // spec: SB-5.7
    #[test]
    fn a_push_before_the_bind_terminal_is_held_until_it() {
        let mut a = agg();
        let t = target(1, 1);
        let g = BindingGeneration::new(4);
        let BindStart::Request(_) = a.begin_bind(t.clone(), g).unwrap() else {
            panic!("38")
        };
        let mut early = BoundSessionSend {
            actor: t.actor.clone(),
            object_generation: t.object_generation,
            source_node_generation: t.location.node_generation,
            authority_owner_generation: t.location.authority_owner_generation,
            session_lifecycle: ident().lifecycle,
            session: ident().session,
            binding_generation: g,
            key: zlink_wire::DispatchKey::new(1),
        };
        assert_eq!(a.check_push(&early).unwrap_err(), FlowReject::NotBound);
        // Another binding generation is not held.
        let mut other = early.clone();
        other.binding_generation = BindingGeneration::new(5);
        let held = |p: &BoundSessionSend| HeldPush {
            push: p.clone(),
            payload: bytes::Bytes::from_static(b"x"),
        };
        assert_eq!(
            a.hold_push(held(&other)).unwrap_err().0,
            FlowReject::NotBound
        );
        a.hold_push(held(&early)).unwrap();
        early.key = zlink_wire::DispatchKey::new(2);
        a.hold_push(held(&early)).unwrap();
        let BindCompletion::Bound { .. } = a.complete_bind(&t.actor, g, LEASE, Ok(snap(&t, g)))
        else {
            panic!("bound")
        };
        let out = a.take_held(&t.actor);
        assert_eq!(
            out.iter().map(|h| h.push.key.get()).collect::<Vec<_>>(),
            vec![1, 2],
            "in arrival order"
        );
        assert!(out.iter().all(|h| a.check_push(&h.push).is_ok()));
        assert!(a.take_held(&t.actor).is_empty());
        // Bounded.
        let t2 = target(2, 1);
        let g2 = BindingGeneration::new(6);
        a.begin_bind(t2.clone(), g2).unwrap();
        let mut p = early.clone();
        p.actor = t2.actor.clone();
        p.binding_generation = g2;
        for _ in 0..HELD_PUSH_LIMIT {
            a.hold_push(held(&p)).unwrap();
        }
        assert_eq!(
            a.hold_push(held(&p)).unwrap_err().0,
            FlowReject::ClientBacklogFull
        );
    }

    // spec: SB-14.2
    #[test]
    fn two_bindings_have_their_own_route_generation_and_token() {
        let mut a = agg();
        let b1 = bind(&mut a, target(1, 1), 1);
        let b2 = bind(&mut a, target(2, 1), 2);
        assert_ne!(b1.token, b2.token);
        let r1 = a.relay(&b1.actor, b1.generation).unwrap();
        let r2 = a.relay(&b2.actor, b2.generation).unwrap();
        assert_eq!(r1.generation(), b1.generation);
        assert_eq!(r2.generation(), b2.generation);
        assert!(r2.sequence > r1.sequence);
    }

    /// A relay through the binding `find` found: the binding's record and template, the next
    /// sequence; closed → `SessionClosed`; an id that names no binding finds nothing.
    #[test]
    fn find_then_relay_goes_through_the_current_binding() {
        let mut a = agg();
        let b1 = bind(&mut a, target(1, 1), 1);
        let b2 = bind(&mut a, target(2, 1), 2);
        assert!(a.find_shared("nobody").is_none());
        let r1 = a.relay(&b1.actor, b1.generation).unwrap();
        let f1 = a.find_shared(b1.actor.as_str()).unwrap();
        assert_eq!(*f1, b1);
        let c1 = a.relay(&f1.actor, f1.generation).unwrap();
        assert_eq!(c1.sequence.get(), r1.sequence.get() + 1);
        assert_eq!((&c1.binding, c1.lifecycle), (&r1.binding, r1.lifecycle));
        let key = zlink_wire::DispatchKey::new(3);
        let rec = c1.record(key, None);
        assert_eq!(
            (
                &rec.actor,
                rec.object_generation,
                rec.tail.binding_generation
            ),
            (&b1.actor, b1.object_generation, b1.generation)
        );
        assert_eq!(rec.tail.session_sequence, c1.sequence);
        // The binding's template writes exactly that record.
        let t = c1.template().expect("a template");
        assert_eq!(
            t.frames(key, c1.sequence, bytes::Bytes::from_static(b"p")),
            zlink_wire::encode(
                &zlink_wire::Record::ActorSend(rec),
                zlink_wire::CorrelationId::NONE,
                Some(bytes::Bytes::from_static(b"p"))
            )
            .map_err(|_| bytes::Bytes::new())
        );
        // Replaced and then closed: the other binding is found, its relay refused.
        let t0 = Instant::now();
        let (s, g) = sender();
        a.handle_replaced(t0, (&s, g), &replaced_of(&b1)).unwrap();
        assert!(a.callback_finished(t0, 1));
        assert!(a.handle_timeout(t0 + REPLACEMENT_CLOSE_DELAY, 1).is_some());
        assert!(a.find(&b2.actor).is_some());
        assert_eq!(
            a.relay(&b2.actor, b2.generation).unwrap_err(),
            FlowReject::SessionClosed
        );
        assert!(a.find_shared(&b1.actor).is_none());
    }

    /// `relay` remembers the binding it went through (`find` and the next `relay` compare it
    /// first), and neither goes through it again once the bindings changed: rebound, removed,
    /// replaced, disconnected; nor does a relay through a retired generation.
    #[test]
    fn the_remembered_relay_binding_never_outlives_a_change() {
        let mut a = agg();
        let id = actor(1);
        let gen_of = |a: &mut SessionBindingAggregate| {
            let f = a.find_shared(&id)?;
            Some(
                a.relay(&f.actor, f.generation)
                    .map(|t| t.binding.generation.get()),
            )
        };
        bind(&mut a, target(1, 1), 1);
        assert_eq!(gen_of(&mut a), Some(Ok(1)));
        assert_eq!(gen_of(&mut a), Some(Ok(1)), "the remembered binding");
        // Rebound (BindOrGet of a new incarnation): the new binding; the old handle is stale.
        bind(&mut a, target(1, 2), 2);
        assert_eq!(gen_of(&mut a), Some(Ok(2)));
        assert!(a.relay(&id, BindingGeneration::new(1)).is_err());
        a.remove(&id, BindingGeneration::new(2)).unwrap();
        assert_eq!(gen_of(&mut a), None);
        assert!(a.relay(&id, BindingGeneration::new(2)).is_err());
        let b = bind(&mut a, target(1, 1), 3);
        assert_eq!(gen_of(&mut a), Some(Ok(3)));
        let (s, g) = sender();
        a.handle_replaced(Instant::now(), (&s, g), &replaced_of(&b))
            .unwrap();
        assert_eq!(gen_of(&mut a), None);
        assert!(a.relay(&id, BindingGeneration::new(3)).is_err());
        let mut a = agg();
        bind(&mut a, target(1, 1), 4);
        assert_eq!(gen_of(&mut a), Some(Ok(4)));
        assert_eq!(a.disconnect().len(), 1);
        assert_eq!(gen_of(&mut a), None);
    }

    /// `find_shared_bytes` finds what `find_shared` finds: the remembered binding by its
    /// bytes, another by its text, nothing for bytes that name no binding or are not UTF-8,
    /// and not the remembered binding once it ended.
    #[test]
    fn find_by_bytes_is_find_by_text() {
        let mut a = agg();
        let b1 = bind(&mut a, target(1, 1), 1);
        let b2 = bind(&mut a, target(2, 1), 2);
        for b in [&b1, &b2] {
            assert_eq!(
                a.find_shared_bytes(b.actor.as_bytes()),
                a.find_shared(&b.actor)
            );
        }
        a.relay(&b1.actor, b1.generation).unwrap();
        assert_eq!(
            a.find_shared_bytes(b1.actor.as_bytes())
                .map(|b| b.generation),
            Some(b1.generation)
        );
        assert_eq!(
            a.find_shared_bytes(b2.actor.as_bytes())
                .map(|b| b.generation),
            Some(b2.generation)
        );
        assert!(a.find_shared_bytes(b"nobody").is_none());
        assert!(a.find_shared_bytes(&[0xff, 0xfe]).is_none());
        a.remove(&b1.actor, b1.generation).unwrap();
        assert!(a.find_shared_bytes(b1.actor.as_bytes()).is_none());
        assert!(a.find_shared_bytes(b2.actor.as_bytes()).is_some());
    }

    /// `relay_bytes` is `find_shared_bytes` then `relay`: the same binding, the next
    /// sequence, nothing for bytes that name no binding, `SessionClosed` once closed.
    #[test]
    fn relay_by_bytes_is_find_then_relay() {
        let mut a = agg();
        let b1 = bind(&mut a, target(1, 1), 1);
        let b2 = bind(&mut a, target(2, 1), 2);
        let r1 = a.relay(&b1.actor, b1.generation).unwrap();
        let t1 = a.relay_bytes(b1.actor.as_bytes()).unwrap().unwrap();
        assert_eq!(t1.sequence.get(), r1.sequence.get() + 1);
        assert_eq!((&t1.binding, t1.lifecycle), (&r1.binding, r1.lifecycle));
        let t2 = a.relay_bytes(b2.actor.as_bytes()).unwrap().unwrap();
        assert_eq!(t2.generation(), b2.generation);
        assert_eq!(t2.sequence.get(), t1.sequence.get() + 1);
        assert!(a.relay_bytes(b"nobody").is_none());
        assert!(a.relay_bytes(&[0xff, 0xfe]).is_none());
        let (s, g) = sender();
        let t0 = Instant::now();
        a.handle_replaced(t0, (&s, g), &replaced_of(&b1)).unwrap();
        assert!(a.callback_finished(t0, 1));
        assert!(a.handle_timeout(t0 + REPLACEMENT_CLOSE_DELAY, 1).is_some());
        assert!(a.relay_bytes(b1.actor.as_bytes()).is_none());
        assert_eq!(
            a.relay_bytes(b2.actor.as_bytes()).unwrap().unwrap_err(),
            (FlowReject::SessionClosed, b2.actor.clone())
        );
    }

    /// Only a binding to an actor on another node has a 24 template (its relays cross the
    /// mesh; the session host sends them without comparing the route with its node).
    #[test]
    fn only_a_binding_to_a_peer_has_a_relay_template() {
        let mut a = agg();
        let remote = bind(&mut a, target(1, 1), 1);
        assert!(remote.relay.is_some());
        let mut here = target(2, 1);
        here.location = loc("a");
        let local = bind(&mut a, here, 2);
        assert!(local.relay.is_none());
        assert!(
            a.relay(&local.actor, local.generation)
                .unwrap()
                .template()
                .is_none()
        );
    }

    // spec: SB-6.7
    #[test]
    fn rebinding_the_current_binding_is_idempotent() {
        let mut a = agg();
        let b = bind(&mut a, target(1, 1), 1);
        assert_eq!(
            a.begin_bind(target(1, 1), BindingGeneration::new(2)),
            Ok(BindStart::Current(b))
        );
        assert_eq!(a.pending_binds(), 0);
    }

    #[test]
    fn a_session_holds_at_most_its_binding_limit() {
        let mut a = agg().with_binding_limit(2);
        bind(&mut a, target(1, 1), 1);
        let BindStart::Request(_) = a
            .begin_bind(target(2, 1), BindingGeneration::new(2))
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            a.begin_bind(target(3, 1), BindingGeneration::new(3)),
            Err(FlowReject::TooManyBindings)
        );
        // Rebinding a bound actor to a new incarnation is not a new binding.
        assert!(
            a.begin_bind(target(1, 2), BindingGeneration::new(4))
                .is_ok()
        );
    }

    // spec: SB-6.1
    #[test]
    fn a_failed_rebind_keeps_the_old_route() {
        let mut a = agg();
        let old = bind(&mut a, target(1, 1), 1);
        let t2 = target(1, 2);
        let BindStart::Request(req) = a.begin_bind(t2.clone(), BindingGeneration::new(2)).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            a.complete_bind(
                &t2.actor,
                req.generation,
                LEASE,
                Err(ErrorKind::InvalidOperation)
            ),
            BindCompletion::Failed(ErrorKind::InvalidOperation)
        );
        assert_eq!(a.find(&old.actor), Some(&old));
    }

    // spec: SB-5.5
    // spec: SB-5.8
    #[test]
    fn push_is_current_only_with_all_four_values() {
        let mut a = agg();
        let b = bind(&mut a, target(1, 1), 1);
        assert!(a.check_push(&push_of(&b)).is_ok());
        let mut p = push_of(&b);
        p.object_generation = ObjectGeneration::new(9);
        assert_eq!(
            a.check_push(&p).unwrap_err(),
            FlowReject::ObjectGenerationMismatch
        );
        let mut p = push_of(&b);
        p.source_node_generation = NodeGeneration::new(9);
        assert_eq!(
            a.check_push(&p).unwrap_err(),
            FlowReject::NodeGenerationMismatch
        );
        let mut p = push_of(&b);
        p.authority_owner_generation = AuthorityOwnerGeneration::new(9);
        assert_eq!(a.check_push(&p).unwrap_err(), FlowReject::AuthorityMismatch);
        let mut p = push_of(&b);
        p.binding_generation = BindingGeneration::new(9);
        assert_eq!(a.check_push(&p).unwrap_err(), FlowReject::BindingRetired);
        let mut p = push_of(&b);
        p.session_lifecycle = SessionLifecycleGeneration::new(1);
        assert_eq!(a.check_push(&p).unwrap_err(), FlowReject::LifecycleMismatch);
    }

    // spec: SB-6.2
    // spec: SB-6.6
    #[test]
    fn replaced_applies_once_and_only_with_every_previous_owner_value() {
        let mut a = agg();
        let b = bind(&mut a, target(1, 1), 1);
        let now = Instant::now();
        let (s, g) = sender();
        for f in 0..6 {
            let mut r = replaced_of(&b);
            match f {
                0 => r.previous.owner = OwnerId::new(1),
                1 => r.previous.lifecycle = SessionLifecycleGeneration::new(1),
                2 => r.previous.session = SessionRid::new(1),
                3 => r.previous.node = rid("z"),
                4 => r.previous.owner_lease_generation = OwnerLeaseGeneration::new(1),
                _ => r.authority_target.node = rid("c"),
            }
            assert_eq!(
                a.handle_replaced(now, (&s, g), &r).unwrap_err(),
                FlowReject::ReplacedIdentityMismatch,
                "field {f}"
            );
            assert_eq!(a.phase(), &Phase::Open);
        }
        let out = a.handle_replaced(now, (&s, g), &replaced_of(&b)).unwrap();
        assert!(matches!(out, ReplacedOutcome::Closing { seq: 1, .. }));
        assert!(a.find(&b.actor).is_none());
        assert_eq!(
            a.handle_replaced(now, (&s, g), &replaced_of(&b))
                .unwrap_err(),
            FlowReject::DuplicateReplacement
        );
        assert!(!a.accepts_packets());
        // A relay through the retired binding: a stale binding fence (SB-12).
        assert_eq!(
            a.relay(&b.actor, b.generation).unwrap_err(),
            FlowReject::BindingRetired
        );
    }

    // spec: SB-6.4
    // spec: SB-14.13
    #[test]
    fn close_is_due_exactly_100ms_after_the_callback_terminal() {
        let mut a = agg();
        let b = bind(&mut a, target(1, 1), 1);
        let t0 = Instant::now();
        let (s, g) = sender();
        a.handle_replaced(t0, (&s, g), &replaced_of(&b)).unwrap();
        assert_eq!(a.poll_timeout(), Some(t0 + Duration::from_secs(30)));
        let done = t0 + Duration::from_millis(5);
        assert!(a.callback_finished(done, 1));
        assert!(!a.callback_finished(done, 1), "terminal counted once");
        assert_eq!(a.poll_timeout(), Some(done + REPLACEMENT_CLOSE_DELAY));
        assert_eq!(a.handle_timeout(done + Duration::from_millis(99), 1), None);
        assert_eq!(a.handle_timeout(done + REPLACEMENT_CLOSE_DELAY, 2), None);
        assert_eq!(
            a.handle_timeout(done + REPLACEMENT_CLOSE_DELAY, 1),
            Some(CloseDecision {
                seq: 1,
                forced: false
            })
        );
        assert_eq!(a.phase(), &Phase::Closed(SessionEnd::Replaced));
    }

    // spec: SB-6.4
    #[test]
    fn callback_timeout_forces_the_close() {
        let mut a = agg();
        let b = bind(&mut a, target(1, 1), 1);
        let t0 = Instant::now();
        let (s, g) = sender();
        a.handle_replaced(t0, (&s, g), &replaced_of(&b)).unwrap();
        assert_eq!(
            a.handle_timeout(t0 + Duration::from_millis(29_999), 1),
            None
        );
        assert_eq!(
            a.handle_timeout(t0 + Duration::from_secs(30), 1),
            Some(CloseDecision {
                seq: 1,
                forced: true
            })
        );
    }

    // spec: SB-7.1
    // spec: SB-7.3
    #[test]
    fn disconnect_freezes_the_snapshot_once() {
        let mut a = agg();
        let b1 = bind(&mut a, target(1, 1), 1);
        let b2 = bind(&mut a, target(2, 1), 2);
        let removed = a.remove(&b1.actor, b1.generation).unwrap();
        assert_eq!(removed.generation, b1.generation);
        let snap = a.disconnect();
        assert_eq!(snap, vec![b2]);
        assert!(a.disconnect().is_empty());
        assert_eq!(
            a.relay(&actor(2), BindingGeneration::new(2)).unwrap_err(),
            FlowReject::SessionClosed
        );
    }

    // spec: SB-14.15
    #[test]
    fn a_late_bind_reply_is_tombstoned_never_applied() {
        let mut a = agg();
        let t = target(1, 1);
        let g = BindingGeneration::new(1);
        a.begin_bind(t.clone(), g).unwrap();
        a.disconnect();
        let out = a.complete_bind(&t.actor, g, LEASE, Ok(snap(&t, g)));
        assert!(matches!(
            out,
            BindCompletion::Late {
                reason: FlowReject::SessionClosed,
                tombstone: Some(_)
            }
        ));
        assert!(a.find(&t.actor).is_none());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Begin(u8, u64),
        Complete(u8, u64, bool),
        Relay(u8, u64),
        RelayCurrent(u8),
        Push(u8, u64),
        Replaced(u8, u64),
        Remove(u8, u64),
        Disconnect,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..3, 1u64..3).prop_map(|(a, o)| Op::Begin(a, o)),
            (0u8..3, 1u64..12, any::<bool>()).prop_map(|(a, g, ok)| Op::Complete(a, g, ok)),
            (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Relay(a, g)),
            (0u8..3).prop_map(Op::RelayCurrent),
            (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Push(a, g)),
            (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Replaced(a, g)),
            (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Remove(a, g)),
            Just(Op::Disconnect),
        ]
    }

    proptest! {
        /// Model: at most one current binding per actor; a retired generation never becomes
        /// current again; a record for generation g changes nothing but the binding with g.
        #[test]
        fn bindings_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut a = agg();
            let mut next_gen = 1u64;
            let mut ever_retired = std::collections::HashSet::new();
            let mut pending: HashMap<u8, (BindTarget, BindingGeneration)> = HashMap::new();
            let now = Instant::now();
            let (s, sg) = sender();
            for op in ops {
                let only = match &op {
                    Op::Begin(i, _) | Op::Complete(i, _, _) | Op::Relay(i, _) | Op::Push(i, _)
                    | Op::Replaced(i, _) | Op::Remove(i, _) | Op::RelayCurrent(i) => Some(actor(*i)),
                    Op::Disconnect => None,
                };
                let before: HashMap<ActorId, Binding> =
                    a.bound().map(|b| (b.actor.clone(), b.clone())).collect();
                match op.clone() {
                    Op::Begin(i, og) => {
                        let g = BindingGeneration::new(next_gen);
                        next_gen += 1;
                        if let Ok(BindStart::Request(r)) = a.begin_bind(target(i, og), g) {
                            pending.insert(i, (r.target, r.generation));
                        }
                    }
                    Op::Complete(i, g, ok) => {
                        let (t, gen_) = match pending.get(&i) {
                            Some((t, pg)) if g % 2 == 0 => (t.clone(), *pg),
                            _ => (target(i, 1), BindingGeneration::new(g)),
                        };
                        let res = if ok { Ok(snap(&t, gen_)) } else { Err(ErrorKind::Unavailable) };
                        if let BindCompletion::Bound { binding, previous } =
                            a.complete_bind(&t.actor, gen_, LEASE, res)
                        {
                            prop_assert!(!ever_retired.contains(&binding.generation));
                            if let Some(p) = previous { ever_retired.insert(p.generation); }
                            pending.remove(&i);
                        }
                    }
                    Op::Relay(i, g) => {
                        // Only the handle of the current binding relays (SB-4.1).
                        let out = a.relay(&actor(i), BindingGeneration::new(g));
                        let current = before.get(&actor(i)).is_some_and(|b| b.generation.get() == g);
                        prop_assert_eq!(out.is_ok(), current && !matches!(a.phase(), Phase::Closed(_)));
                    }
                    Op::RelayCurrent(i) => {
                        // `find` and then `relay` through the found binding, whichever binding
                        // the previous relay went through (never a retired one).
                        let found = a.find_shared(&actor(i));
                        match (before.get(&actor(i)), found) {
                            (None, None) => {}
                            (Some(b), Some(f)) => {
                                prop_assert_eq!(&*f, b);
                                match a.relay(&f.actor, f.generation) {
                                    Ok(t) => {
                                        prop_assert!(!matches!(a.phase(), Phase::Closed(_)));
                                        prop_assert_eq!(&*t.binding, b);
                                    }
                                    Err(r) => {
                                        prop_assert!(matches!(a.phase(), Phase::Closed(_)));
                                        prop_assert_eq!(r, FlowReject::SessionClosed);
                                    }
                                }
                            }
                            (b, f) => prop_assert!(false, "{:?} found {:?}", b, f.map(|f| f.generation)),
                        }
                    }
                    Op::Push(i, g) => {
                        if let Some(b) = before.get(&actor(i)) {
                            let mut p = push_of(b);
                            p.binding_generation = BindingGeneration::new(g);
                            prop_assert_eq!(a.check_push(&p).is_ok(), b.generation.get() == g);
                        }
                    }
                    Op::Replaced(i, g) => {
                        // Half of them for the current binding (a random one rarely is).
                        let g = match before.get(&actor(i)) {
                            Some(b) if g % 2 == 0 => b.generation.get(),
                            _ => g,
                        };
                        let mut b = before.get(&actor(i)).cloned().unwrap_or_else(|| Binding {
                            actor: actor(i), actor_type: "t".into(), object_generation: ObjectGeneration::new(1),
                            route: loc("b"), generation: BindingGeneration::new(g),
                            token: BindingToken(0), owner_lease: LEASE,
                            relay: None,
                        });
                        b.generation = BindingGeneration::new(g);
                        let applied = a.handle_replaced(now, (&s, sg), &replaced_of(&b)).is_ok();
                        let was_current = before.get(&actor(i)).is_some_and(|c| c.generation.get() == g);
                        prop_assert_eq!(applied, was_current);
                        if applied { ever_retired.insert(BindingGeneration::new(g)); }
                    }
                    Op::Remove(i, g) => {
                        let g = match before.get(&actor(i)) {
                            Some(b) if g % 2 == 0 => b.generation.get(),
                            _ => g,
                        };
                        let current = before.get(&actor(i)).is_some_and(|b| b.generation.get() == g);
                        match a.remove(&actor(i), BindingGeneration::new(g)) {
                            Ok(b) => { prop_assert!(current); ever_retired.insert(b.generation); }
                            Err(_) => prop_assert!(!current),
                        }
                    }
                    Op::Disconnect => {
                        for b in a.disconnect() { ever_retired.insert(b.generation); }
                    }
                }
                // Late records touch only their own identity: every other actor's binding is
                // unchanged by this step.
                let after: HashMap<ActorId, Binding> =
                    a.bound().map(|b| (b.actor.clone(), b.clone())).collect();
                for b in after.values() {
                    prop_assert!(!ever_retired.contains(&b.generation), "retired identity revived");
                }
                if let Some(only) = only {
                    for changed in changed_actors(&before, &after) {
                        prop_assert_eq!(&changed, &only, "a record touched another binding");
                    }
                }
            }
        }
    }

    /// The actors whose binding differs between two states.
    fn changed_actors(
        before: &HashMap<ActorId, Binding>,
        after: &HashMap<ActorId, Binding>,
    ) -> Vec<ActorId> {
        before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .cloned()
            .collect()
    }
}
