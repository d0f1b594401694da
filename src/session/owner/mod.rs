//! The session owner's driver: a thin layer around [`SessionBindingAggregate`]. It keeps the
//! sessions of this node by SessionRid, runs callbacks on each session's lane, turns aggregate
//! outputs into records (38, 24) through the node's [`SessionHost`], applies 36 and 51, and
//! runs the replacement timers on the injected [`Clock`].

use crate::hashing::FastMap;
use crate::sync::{Mutex, MutexGuard};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};
use zlink_mesh::{ReplyHandle, SendError};
use zlink_wire::{
    ActorId, BindOperation, BindSnapshot, BindingGeneration, BoundSessionBind,
    BoundSessionReplaced, BoundSessionSend, Deadline, DisconnectReason, DispatchKey, ErrorKind,
    NodeGeneration, NodeRid, OwnerId, OwnerLeaseGeneration, Record, SealOutcome,
    SessionLifecycleGeneration, SessionRelocationRoute, SessionRelocationSeal,
    SessionRelocationSealed, SessionRid,
};

use super::aggregate::{
    BindCompletion, BindStart, BindTarget, Binding, RelayTicket, Released, ReplacedOutcome,
    RouteApplied, SessionBindingAggregate, SessionIdentity, Tombstone,
};
use super::cell::{AggCell, AggGuard};
use super::clock::Clock;
use super::flow::{FlowCounters, FlowRecord, FlowReject};
use super::inline::InlineTurn;
use super::seal::{HeldRelay, HeldRequest, SealGauges};
use super::{CLOSE_SESSION_KEY, Callbacks, PacketHandler, PacketTurn, Session, SessionError};
use crate::actor::ActorRef;
use crate::actor::exec::InflightGuard;
use crate::backlog::{Admitted, BacklogStats, Backlogs, CreditReturn, Done};
use crate::config::HandlerRegistry;
use crate::runtime::{BoxFuture, Handled, Inline, Runtime, SerialLane, SessionLane};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod bind;
mod push;
mod relay;
mod replace;
mod seals;

/// A terminal of a record sent to the actor owner: the public kind and a detail.
pub(crate) type Refusal = (ErrorKind, String);

/// The terminal of a 24 ([`SessionHost::send_relay`]): at once (a one-way send admitted or
/// refused without waiting, no future allocated), or to wait for.
pub(crate) enum RelaySent {
    /// Decided now.
    Now(Result<Option<Bytes>, Refusal>),
    /// Waits: admission, a request's reply, the same-node path.
    Later(BoxFuture<Result<Option<Bytes>, Refusal>>),
}

/// A relay request handed off by a packet turn ([`super::PacketTurn::Forward`]): its terminal
/// (to wait for), the end of its admission (the 24 is in the actor owner's queue) and how its
/// reply becomes the client's.
pub(crate) struct Forwarded {
    sent: RelaySent,
    /// Resolves (sent or dropped) once the 24 passed admission or failed.
    admitted: oneshot::Receiver<()>,
    map: super::ReplyMap,
}

/// What an actor owner on this node does after a bind's terminal was applied (its 51).
pub(crate) type AfterBind = BoxFuture<()>;

/// A refusal of the actor owner or the transport, as the application sees it.
pub(crate) fn remote((kind, detail): Refusal) -> SessionError {
    SessionError::Remote { kind, detail }
}

/// What the session owner needs from its node: sending to actor owners (the mesh, or the local
/// actor side when the owner is this node) and to its clients.
pub(crate) trait SessionHost: Send + Sync + 'static {
    /// A 38 to the actor owner `to`; its one terminal, and what the actor owner does only
    /// after it (the 51 of a replacement on this same node, SB-6.1): the caller runs it once
    /// the terminal is applied (the route stored).
    fn send_bind(
        &self,
        to: &NodeRid,
        req: BoundSessionBind,
        timeout: Duration,
    ) -> BoxFuture<(Result<BindSnapshot, Refusal>, Option<AfterBind>)>;
    /// The 24 of `ticket` with `key` to its actor owner: a request when `timeout` is given
    /// (its reply payload), a one-way send otherwise (to a peer: from the binding's template,
    /// [`RelayTicket::template`], when it has one). `admitted`, when given, is dropped once
    /// the 24 is in the actor owner's queue (or failed): a later 24 to that actor follows it.
    fn send_relay(
        &self,
        ticket: RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
        admitted: Option<oneshot::Sender<()>>,
    ) -> RelaySent;
    /// A push (148) to a client if its outbound budget has room now (never waits).
    fn try_push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), zlink_mesh::TryPushError>;
    /// A push (148) to a client.
    fn push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> BoxFuture<Result<(), SendError>>;
    /// Closes a client connection with a reason (the client sees it).
    fn close(&self, session: SessionRid, reason: DisconnectReason);
    /// The connected/authenticate callback admitted the session (or there is none): the
    /// transport lifts its stranger bounds and grants the full client window.
    fn accept(&self, session: SessionRid);
    /// This node's current owner lease generation.
    fn owner_lease(&self) -> OwnerLeaseGeneration;
    /// Looks up the Ready ref of `actor` (one Location Store lookup; SB-1 step 2).
    fn get_actor(&self, actor: ActorId) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>>;
    /// Creates an actor (`or_get`: returns the Ready incarnation if one exists).
    fn create_actor(
        &self,
        create: crate::actor::Create,
        or_get: bool,
    ) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>>;
    /// Counts one accepted unit of session work (a packet, a callback, a disconnect
    /// notification) until the guard drops; shutdown drains them (SB-10).
    fn enter_work(&self) -> Option<InflightGuard>;
    /// Where the clients' credit held by packets that waited for a full session lane goes
    /// back (the node's mesh; held weakly, taken once by the session backlogs).
    fn credit_return(&self) -> std::sync::Weak<dyn CreditReturn>;
}

/// Pushes to one client that may wait for its credit; more are refused (`ClientBacklogFull`).
pub(crate) const PUSH_BACKLOG: usize = 1024;

/// Settings of the session owner.
#[derive(Clone, Debug)]
pub(crate) struct SessionOwnerConfig {
    pub node: NodeRid,
    pub lifecycle: SessionLifecycleGeneration,
    pub callback_timeout: Duration,
    pub binding_limit: usize,
    pub request_timeout: Duration,
    pub clock: Arc<dyn Clock>,
    /// SessionRelocationSealTimeout (SB-8.3).
    pub seal_timeout: Duration,
    /// What one session's relocation seals hold before a relay's admission waits: the
    /// session lane's application limits (items, bytes).
    pub held_limit: (usize, u64),
}

/// One session on this node.
pub(crate) struct SessionEntry {
    pub rid: SessionRid,
    /// The aggregate, and the copy of whether it accepts packets that a packet's admission
    /// reads without the lock the session's turns take.
    agg: AggCell,
    lane: SerialLane<SessionLane>,
    /// Wakes the replacement timer task when the close deadline moves.
    timer: Notify,
    /// A push to the client timed out waiting for its credit and none went through since.
    push_stalled: AtomicBool,
    /// Left this node's sessions (set as it leaves the map, under its lock): a
    /// [`SessionCache`] no longer hands it out.
    removed: AtomicBool,
    /// The relocation seal timer task runs (set and cleared under the aggregate's lock).
    seal_timer: AtomicBool,
    /// Wakes the seal timer when a deadline moves (a seal installed, a request held).
    seal_wake: Notify,
}

/// The session a caller last delivered a packet to (the mesh I/O thread's sink keeps one), so
/// a client's packets, record after record, find their session without the sessions map's
/// lock and lookup: while the entry is in the map it is the map's entry for its SessionRid
/// (an entry is inserted once and flagged as it leaves). Between receive passes it keeps the
/// entry weakly (it keeps nothing alive); within one it holds it
/// ([`SessionCache::end_pass`] lets go), so a run of packets takes no reference count of its
/// own per packet on the entry's shared count.
#[derive(Default)]
pub(crate) struct SessionCache {
    last: Option<(SessionRid, std::sync::Weak<SessionEntry>)>,
    held: Option<Arc<SessionEntry>>,
}

impl SessionCache {
    /// `e` is the session now: held for this pass, remembered after it.
    fn remember(&mut self, e: Arc<SessionEntry>) {
        if !matches!(&self.last, Some((r, w)) if *r == e.rid && std::ptr::eq(w.as_ptr(), Arc::as_ptr(&e)))
        {
            self.last = Some((e.rid, Arc::downgrade(&e)));
        }
        self.held = Some(e);
    }

    /// The receive pass ended: the entry is no longer held (only remembered weakly).
    pub(crate) fn end_pass(&mut self) {
        self.held = None;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SessionEntry {
    fn agg(&self) -> AggGuard<'_> {
        self.agg.lock()
    }

    /// Whether the session accepts packets now (its aggregate's phase is open), read without
    /// the aggregate's lock.
    fn accepts_packets(&self) -> bool {
        self.agg.accepts_packets()
    }

    pub(crate) fn bound(&self) -> Vec<Arc<Binding>> {
        let mut v: Vec<Arc<Binding>> = self.agg().bound_shared().cloned().collect();
        v.sort_by_key(|b| b.token);
        v
    }

    pub(crate) fn find<Q>(&self, actor: &Q) -> Option<Arc<Binding>>
    where
        ActorId: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.agg().find_shared(actor)
    }

    pub(crate) fn find_bytes(&self, actor: &[u8]) -> Option<Arc<Binding>> {
        self.agg().find_shared_bytes(actor)
    }

    /// A push reached the client's queue: the session is not stalled (any more).
    fn push_sent(&self) {
        if self.push_stalled.load(Ordering::Relaxed) {
            self.push_stalled.store(false, Ordering::Release);
        }
    }
}

/// One session as an operator sees it ([`SessionOwner::views`]).
#[derive(Clone, Debug)]
pub(crate) struct SessionView {
    pub session: SessionRid,
    /// `open`, `closing` (replaced, SB-6.3) or `closed`.
    pub phase: &'static str,
    /// Actors bound now, by id.
    pub bound: Vec<ActorId>,
    /// Binds in flight.
    pub pending_binds: usize,
}

/// A packet's reply handle: answered `Unavailable` if the packet is dropped before its handler
/// ran (the session ended while it waited), so every request packet gets exactly one terminal.
struct PacketReply(Option<ReplyHandle>);

impl PacketReply {
    fn take(mut self) -> Option<ReplyHandle> {
        self.0.take()
    }
}

impl Drop for PacketReply {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.error(
                ErrorKind::Unavailable,
                "the session ended before the packet ran",
            );
        }
    }
}

/// The OwnerId of a session owner host: FNV-1a 64 of its NodeRid (stable across restarts;
/// the lifecycle generation and lease tell restarts apart). Carried in 38 and returned in 51.
#[must_use]
pub(crate) fn owner_id_of(node: &NodeRid) -> OwnerId {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    OwnerId::new(h)
}

/// The session owner of one node.
pub(crate) struct SessionOwner {
    cfg: SessionOwnerConfig,
    owner_id: OwnerId,
    host: Box<dyn SessionHost>,
    runtime: Runtime,
    packets: HandlerRegistry<PacketHandler>,
    callbacks: Callbacks,
    sessions: Mutex<FastMap<SessionRid, Arc<SessionEntry>>>,
    next_generation: AtomicU64,
    accepting: AtomicBool,
    flow: FlowCounters,
    /// Replacements applied (51s that retired a binding of a session here, SB-6.2), each
    /// with its replaced-callback.
    replacements: AtomicU64,
    /// Packets (and the disconnected-callback behind them) waiting for a full session lane.
    backlogs: Arc<Backlogs<SessionRid>>,
    /// Pushes waiting for a client's credit, per session.
    pushes: push::PushQueues,
    /// Where the push queues' drain tasks run (pushes arrive on the mesh I/O thread).
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for SessionOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionOwner")
            .field("node", &self.cfg.node)
            .field("lifecycle", &self.cfg.lifecycle)
            .finish_non_exhaustive()
    }
}

impl SessionOwner {
    pub(crate) fn new(
        cfg: SessionOwnerConfig,
        host: Box<dyn SessionHost>,
        runtime: Runtime,
        packets: HandlerRegistry<PacketHandler>,
        callbacks: Callbacks,
        rt: tokio::runtime::Handle,
    ) -> Self {
        let backlogs = Arc::new(Backlogs::new(host.credit_return()));
        Self {
            owner_id: owner_id_of(&cfg.node),
            cfg,
            host,
            runtime,
            packets,
            callbacks,
            sessions: Mutex::new(FastMap::default()),
            next_generation: AtomicU64::new(1),
            accepting: AtomicBool::new(true),
            flow: FlowCounters::default(),
            replacements: AtomicU64::new(0),
            backlogs,
            pushes: push::PushQueues::default(),
            rt,
        }
    }

    pub(crate) fn node(&self) -> &NodeRid {
        &self.cfg.node
    }

    pub(crate) fn lifecycle(&self) -> SessionLifecycleGeneration {
        self.cfg.lifecycle
    }

    pub(crate) fn flow(&self) -> &FlowCounters {
        &self.flow
    }

    /// Replacements applied to this node's sessions so far (each ran its replaced-callback).
    pub(crate) fn replacements(&self) -> u64 {
        self.replacements.load(Ordering::Relaxed)
    }

    pub(crate) fn session_count(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// The sessions now, for an operator (`ctl sessions`, metrics): id, phase and bound
    /// actors, ordered by session id. Each aggregate is locked on its own, never under the
    /// sessions lock.
    pub(crate) fn views(&self) -> Vec<SessionView> {
        let mut entries: Vec<Arc<SessionEntry>> = lock(&self.sessions).values().cloned().collect();
        entries.sort_by_key(|e| e.rid.get());
        entries
            .iter()
            .map(|e| {
                let agg = e.agg();
                let phase = match agg.phase() {
                    super::aggregate::Phase::Open => "open",
                    super::aggregate::Phase::Closing(_) => "closing",
                    super::aggregate::Phase::Closed(_) => "closed",
                };
                let mut bound: Vec<ActorId> = agg.bound().map(|b| b.actor.clone()).collect();
                bound.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                SessionView {
                    session: e.rid,
                    phase,
                    bound,
                    pending_binds: agg.pending_binds(),
                }
            })
            .collect()
    }

    /// The session lanes' queue lengths now, summed (each lane read on its own, never under the
    /// sessions lock).
    pub(crate) fn lane_depths(&self) -> crate::runtime::LaneDepths {
        let entries: Vec<Arc<SessionEntry>> = lock(&self.sessions).values().cloned().collect();
        let mut d = crate::runtime::LaneDepths::default();
        for e in &entries {
            d.merge(&e.lane.lane_depths());
        }
        d
    }

    /// Current bindings over every session of this node.
    pub(crate) fn binding_count(&self) -> usize {
        let entries: Vec<Arc<SessionEntry>> = lock(&self.sessions).values().cloned().collect();
        entries.iter().map(|e| e.agg().bound().count()).sum()
    }

    /// The replacement close deadline of a closing session.
    pub(crate) fn close_deadline(&self, rid: SessionRid) -> Option<std::time::Instant> {
        self.entry(rid).and_then(|e| e.agg().poll_timeout())
    }

    /// SB-10: no new sessions or bindings from now on.
    pub(crate) fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Release);
    }

    /// The sessions open now (shutdown ends each, SB-10).
    pub(crate) fn session_ids(&self) -> Vec<SessionRid> {
        lock(&self.sessions).keys().copied().collect()
    }

    fn entry(&self, rid: SessionRid) -> Option<Arc<SessionEntry>> {
        lock(&self.sessions).get(&rid).cloned()
    }

    /// [`SessionOwner::entry`] through the caller's [`SessionCache`] (filled on a miss), held
    /// there until the caller's pass ends.
    fn entry_cached<'c>(
        &self,
        cache: &'c mut SessionCache,
        rid: SessionRid,
    ) -> Option<&'c Arc<SessionEntry>> {
        let held =
            matches!(&cache.held, Some(e) if e.rid == rid && !e.removed.load(Ordering::Acquire));
        if !held {
            let remembered = match &cache.last {
                Some((r, weak)) if *r == rid => weak
                    .upgrade()
                    .filter(|e| !e.removed.load(Ordering::Acquire)),
                _ => None,
            };
            let e = match remembered {
                Some(e) => e,
                None => self.entry(rid)?,
            };
            cache.remember(e);
        }
        cache.held.as_ref()
    }

    fn session(self: &Arc<Self>, entry: &Arc<SessionEntry>) -> Session {
        Session {
            entry: entry.clone(),
            owner: self.clone(),
        }
    }

    /// A client connection opened: its session, its lane, then the connected callback as the
    /// session's first turn. Idempotent (the first packet may create the session too).
    pub(crate) fn connected(self: &Arc<Self>, rid: SessionRid) -> Option<Arc<SessionEntry>> {
        if !self.accepting.load(Ordering::Acquire) {
            self.host.close(rid, DisconnectReason::Shutdown);
            return None;
        }
        let entry = {
            let mut sessions = lock(&self.sessions);
            if let Some(e) = sessions.get(&rid) {
                return Some(e.clone());
            }
            let lane = match self.runtime.session_lane() {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(session = %rid, error = %e, "no session lane");
                    return None;
                }
            };
            let id = SessionIdentity {
                owner: self.cfg.node.clone(),
                lifecycle: self.cfg.lifecycle,
                session: rid,
            };
            let agg = SessionBindingAggregate::new(id, self.owner_id, self.cfg.callback_timeout)
                .with_binding_limit(self.cfg.binding_limit)
                .with_seal_limits(
                    self.cfg.seal_timeout,
                    self.cfg.held_limit.0,
                    self.cfg.held_limit.1,
                );
            let entry = Arc::new(SessionEntry {
                rid,
                agg: AggCell::new(agg),
                lane,
                timer: Notify::new(),
                push_stalled: AtomicBool::new(false),
                removed: AtomicBool::new(false),
                seal_timer: AtomicBool::new(false),
                seal_wake: Notify::new(),
            });
            // The connected-callback is the session's first turn: it is queued before the
            // entry becomes visible, so no packet can find the lane idle ahead of it (a
            // packet that finds the entry may run inline, `docs/RUNTIME.md`).
            self.submit_connected(&entry);
            sessions.insert(rid, entry.clone());
            entry
        };
        tracing::debug!(session = %rid, "session opened");
        Some(entry)
    }

    /// Queues the connected-callback as the session's first (lifecycle) turn, or accepts the
    /// session at once when the application has none.
    fn submit_connected(self: &Arc<Self>, entry: &Arc<SessionEntry>) {
        let rid = entry.rid;
        if let Some(cb) = self.callbacks.on_connected.clone() {
            let session = self.session(entry);
            let owner = self.clone();
            let submitted = entry.lane.submit_lifecycle(move |_ctx| {
                Handled::later(async move {
                    match cb(session).await {
                        // Accepted: the session leaves the transport's stranger bounds.
                        Ok(()) => owner.host.accept(rid),
                        // Refused: counted and closed, the client sees why; the close ends
                        // the session (`disconnected`) and frees what it holds.
                        Err(e) => {
                            owner
                                .flow
                                .reject(FlowRecord::Connected, FlowReject::Refused, &e);
                            owner.host.close(rid, DisconnectReason::Refused);
                        }
                    }
                    Ok(())
                })
            });
            if let Err(e) = submitted {
                tracing::warn!(session = %rid, error = %e, "connected-callback not queued");
            }
        } else {
            self.host.accept(rid);
        }
    }

    /// The physical connection ended (SB-7): freeze the binding snapshot, notify each bound
    /// actor once over its stored route (all-settled, infrastructure work), run the
    /// disconnected-callback, then end the session's lane.
    pub(crate) fn disconnected(self: &Arc<Self>, rid: SessionRid) {
        let Some(entry) = lock(&self.sessions).remove(&rid).inspect(|e| {
            // Under the map's lock: a cache that sees the entry unflagged saw it in the map.
            e.removed.store(true, Ordering::Release);
        }) else {
            return;
        };
        let snapshot = {
            let mut agg = entry.agg();
            // Relays a relocation seal held end with the session: counted (before the seal's
            // gauges drop), never silent; a held request is answered `Unavailable` as its
            // waiter drops.
            for _ in 0..agg.seal_gauges().held {
                self.flow
                    .reject(FlowRecord::Relay, FlowReject::SessionClosed, &rid);
            }
            agg.disconnect()
        };
        entry.timer.notify_one();
        tracing::debug!(session = %rid, bindings = snapshot.len(), "session disconnected");
        for b in snapshot {
            let owner = self.clone();
            let guard = self.host.enter_work();
            tokio::spawn(async move {
                let _guard = guard;
                if let Err((kind, detail)) = owner
                    .send_tombstone(rid, &b, BindOperation::Disconnect)
                    .await
                {
                    tracing::info!(session = %rid, actor = %b.actor, %kind, %detail, "disconnect notification failed");
                }
            });
        }
        // The disconnected-callback queues behind the packets already accepted (they run
        // first: nothing accepted is lost), then the lane closes.
        // It goes through the session's backlog, behind packets that wait there.
        let lane = entry.lane.clone();
        let cb = self.callbacks.on_disconnected.clone();
        let session = self.session(&entry);
        let guard = self.host.enter_work();
        let closer = lane.clone();
        let job = lane.prepare(0, move |_ctx| {
            Handled::later(async move {
                let _guard = guard;
                if let Some(cb) = cb
                    && let Err(e) = cb(session).await
                {
                    tracing::warn!(error = %e, "session disconnected-callback failed");
                }
                closer.connection_closed();
                Ok(())
            })
        });
        if self
            .backlogs
            .submit(&rid, job, Done::nothing, Inline::No)
            .is_err()
        {
            lane.connection_closed();
        }
    }

    /// A packet from the client (144 request or 147 one-way with an application key): the typed
    /// handler runs on the session's lane (SB-5, SB-10.1). Never waits: a full session lane
    /// keeps the packet in the session's backlog (behind which the session's later packets
    /// queue, FIFO) and returns [`Admitted::Queued`]; `done` runs once it entered the lane. The
    /// caller holds the client's credit until then, so the client's own window holds it back
    /// and no other session waits: nothing accepted is dropped.
    pub(crate) fn packet(
        self: &Arc<Self>,
        rid: SessionRid,
        key: DispatchKey,
        payload: Bytes,
        reply: Option<ReplyHandle>,
        done: impl FnOnce() -> Done,
        mode: Inline<'_>,
    ) -> Admitted {
        self.packet_with(
            &mut SessionCache::default(),
            rid,
            key,
            payload,
            reply,
            done,
            mode,
        )
    }

    /// [`SessionOwner::packet`] with the session found through the caller's `cache`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn packet_with(
        self: &Arc<Self>,
        cache: &mut SessionCache,
        rid: SessionRid,
        key: DispatchKey,
        payload: Bytes,
        reply: Option<ReplyHandle>,
        done: impl FnOnce() -> Done,
        mode: Inline<'_>,
    ) -> Admitted {
        let refuse = |reply: Option<ReplyHandle>, kind: ErrorKind, detail: String| {
            if let Some(r) = reply {
                r.error(kind, detail);
            }
            Admitted::Now
        };
        // During a shutdown no packet is accepted and no session begins (SB-10).
        let entry = if !self.accepting.load(Ordering::Acquire) {
            None
        } else if self.entry_cached(cache, rid).is_some() {
            cache.held.as_ref()
        } else {
            self.connected(rid).map(|e| {
                cache.remember(e);
                cache.held.as_ref().expect("just remembered")
            })
        };
        let Some(entry) = entry else {
            self.flow
                .reject(FlowRecord::Packet, FlowReject::ShuttingDown, &rid);
            return refuse(
                reply,
                ErrorKind::Unavailable,
                "session owner shutting down".into(),
            );
        };
        if !entry.accepts_packets() {
            self.flow
                .reject(FlowRecord::Packet, FlowReject::SessionClosing, &rid);
            return refuse(reply, ErrorKind::Unavailable, "session is closing".into());
        }
        // The handler is taken where the turn runs (the registry does not change): its
        // reference count is not shared with the turn's thread per packet.
        if self.packets.get(key).is_none() {
            return refuse(
                reply,
                ErrorKind::NotFound,
                format!("no session handler for key {key}"),
            );
        }
        let session = self.session(entry);
        let len = payload.len();
        let reply = PacketReply(reply);
        let guard = self.host.enter_work();
        let job = entry.lane.prepare_unboxed(len, move |_ctx| {
            let finish = |reply: PacketReply, out: Result<Bytes, super::PacketError>| match (
                reply.take(),
                out,
            ) {
                (Some(r), Ok(b)) => r.reply(b),
                (Some(r), Err(e)) => r.error(e.kind, e.detail),
                (None, Err(e)) => {
                    tracing::info!(error = %e, "one-way session packet failed");
                }
                (None, Ok(_)) => {}
            };
            // Most packet handlers finish without waiting (a one-way relay is admitted at
            // once): poll the handler once here, so such a turn ends as a synchronous one (no
            // turn future allocated) and the lane keeps its batch. A session lane cannot
            // yield (`NoYield`). A turn that waits (a relay request) is polled once more right
            // where it is woken — the mesh I/O thread that received the actor's reply — so the
            // answer to the client leaves from there (`InlineTurn`).
            let Some(handler) = session.owner.packets.get(key).cloned() else {
                // Unreachable: checked at admission, and the registry does not change.
                finish(
                    reply,
                    Err(super::PacketError::new(
                        ErrorKind::NotFound,
                        format!("no session handler for key {key}"),
                    )),
                );
                drop(guard);
                return Handled::ok(());
            };
            let mut handler_turn = match handler(session, payload) {
                PacketTurn::Done(out) => {
                    finish(reply, out);
                    drop(guard);
                    return Handled::ok(());
                }
                PacketTurn::Later(turn) => turn,
                PacketTurn::Forward(super::Forward(f)) => {
                    let map = f.map;
                    let answer = move |out: Result<Option<Bytes>, Refusal>| {
                        out.map_err(|e| super::PacketError::from(remote(e)))
                            .and_then(|b| map(b.unwrap_or_default()))
                    };
                    let wait = match f.sent {
                        RelaySent::Now(out) => {
                            finish(reply, answer(out));
                            drop(guard);
                            return Handled::ok(());
                        }
                        RelaySent::Later(wait) => wait,
                    };
                    // The reply answers the client wherever it arrives; the turn ends once
                    // the 24 is in the actor owner's queue (SB-1.5, SB-5.3, SB-10).
                    let rest: BoxFuture<()> = Box::pin(async move {
                        let _guard = guard;
                        finish(reply, answer(wait.await));
                    });
                    // Turns run in the lane runtime's context, inline ones too.
                    let Ok(rt) = tokio::runtime::Handle::try_current() else {
                        return Handled::later(async move {
                            rest.await;
                            Ok(())
                        });
                    };
                    super::inline::Detached::start(rest, rt);
                    let mut admitted = f.admitted;
                    return match admitted.try_recv() {
                        Err(oneshot::error::TryRecvError::Empty) => Handled::later(async move {
                            let _ = admitted.await;
                            Ok(())
                        }),
                        _ => Handled::ok(()),
                    };
                }
            };
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if let std::task::Poll::Ready(out) = handler_turn.as_mut().poll(&mut cx) {
                finish(reply, out);
                drop(guard);
                return Handled::ok(());
            }
            let turn: BoxFuture<Result<(), crate::runtime::HandlerError>> = Box::pin(async move {
                let _guard = guard;
                finish(reply, handler_turn.await);
                Ok(())
            });
            let out = match tokio::runtime::Handle::try_current() {
                // The lane's runtime: where the turn would be polled otherwise.
                Ok(rt) => match InlineTurn::start(turn, rt) {
                    Ok(out) => out,
                    Err(proxy) => return Handled::later(proxy),
                },
                Err(_) => return Handled::later(turn),
            };
            match out {
                Ok(()) => Handled::ok(()),
                Err(e) => Handled::err(e),
            }
        });
        match self.backlogs.submit(&rid, job, done, mode) {
            Ok(a) => a,
            Err(e) => {
                // The session ended (its lane closed): counted; a request was answered.
                self.flow
                    .reject(FlowRecord::Packet, FlowReject::SessionClosed, &e);
                Admitted::Now
            }
        }
    }

    /// Counters of the session lanes' backlogs (packets that waited for a full session lane).
    pub(crate) fn backlog_stats(&self) -> BacklogStats {
        self.backlogs.stats()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests;
