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

mod held;
mod replace;
mod seals;

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
}

#[cfg(test)]
mod tests;
