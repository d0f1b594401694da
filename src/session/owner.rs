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
use crate::backlog::{Admitted, BacklogStats, Backlogs, CreditReturn, Done, WaitQueues};
use crate::config::HandlerRegistry;
use crate::runtime::{BoxFuture, Handled, Inline, Runtime, SerialLane, SessionLane};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    pushes: Arc<WaitQueues<SessionRid>>,
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
            pushes: Arc::new(WaitQueues::default()),
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

    fn fresh_generation(&self) -> BindingGeneration {
        BindingGeneration::new(self.next_generation.fetch_add(1, Ordering::Relaxed))
    }

    /// The 38 for binding identity `t` of session `rid`.
    fn bind_record(
        &self,
        rid: SessionRid,
        t: &Tombstone,
        owner_lease: OwnerLeaseGeneration,
        operation: BindOperation,
    ) -> BoundSessionBind {
        BoundSessionBind {
            actor: t.actor.clone(),
            object_generation: t.object_generation,
            target_node_generation: t.route.node_generation,
            authority_owner_generation: t.route.authority_owner_generation,
            owner_lease_generation: t.route.owner_lease_generation,
            session_lifecycle: self.cfg.lifecycle,
            session_owner: self.owner_id,
            session_owner_lease_generation: owner_lease,
            session: rid,
            binding_generation: t.generation,
            operation,
            deadline: Deadline::from_remaining(self.cfg.request_timeout),
        }
    }

    /// `session.actors().bind(actor)` (SB-5.1, SB-5.2, SB-5.7, SB-6.1). The 38 and its
    /// completion run as infrastructure work: the aggregate gets the terminal even if the
    /// caller's future is dropped.
    pub(crate) async fn bind(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        actor: &ActorRef,
    ) -> Result<Binding, SessionError> {
        if !self.accepting.load(Ordering::Acquire) {
            self.flow
                .reject(FlowRecord::Bind, FlowReject::ShuttingDown, actor);
            return Err(SessionError::ShuttingDown);
        }
        let target = BindTarget {
            actor: actor.id().clone(),
            actor_type: actor.actor_type().into(),
            object_generation: actor.object_generation(),
            location: actor.wire_location(),
        };
        let generation = self.fresh_generation();
        let start = entry.agg().begin_bind(target, generation);
        let req = match start {
            Ok(BindStart::Current(b)) => return Ok(b),
            Ok(BindStart::Request(req)) => req,
            Err(r) => {
                self.flow.reject(FlowRecord::Bind, r, actor);
                return Err(SessionError::of_reject(FlowRecord::Bind, actor.id(), r));
            }
        };
        let owner_lease = self.host.owner_lease();
        let identity = Tombstone {
            actor: req.target.actor.clone(),
            object_generation: req.target.object_generation,
            route: req.target.location.clone(),
            generation: req.generation,
        };
        let rec = self.bind_record(entry.rid, &identity, owner_lease, BindOperation::Bind);
        let (tx, rx) = oneshot::channel();
        let owner = self.clone();
        let entry2 = entry.clone();
        let actor_id = req.target.actor.clone();
        let to = req.target.location.node.clone();
        tokio::spawn(async move {
            let (result, after) = owner
                .host
                .send_bind(&to, rec, owner.cfg.request_timeout)
                .await;
            let detail = result.as_ref().err().map(|(_, d)| d.clone());
            let completion = {
                let mut agg = entry2.agg();
                let completion = agg.complete_bind(
                    &actor_id,
                    generation,
                    owner_lease,
                    result.map_err(|(k, _)| k),
                );
                // Pushes that arrived before the terminal: sent now, before any later push of
                // the binding (SB-5.6, SB-5.7); refused with the bind otherwise.
                if matches!(completion, BindCompletion::Bound { .. }) {
                    owner.release_held(&entry2, &mut agg, &actor_id);
                } else {
                    for h in agg.take_held(&actor_id) {
                        owner
                            .flow
                            .reject(FlowRecord::Push, FlowReject::NotBound, &h.push.actor);
                    }
                }
                completion
            };
            // The route is stored: only now what the actor owner does after the terminal
            // (SB-6.1).
            if let Some(after) = after {
                tokio::spawn(after);
            }
            let out = match completion {
                BindCompletion::Bound { binding, .. } => Ok(binding),
                BindCompletion::Failed(kind) => {
                    // An outcome the actor owner may not have decided (the request timed out,
                    // the route failed) could have left the binding registered there: tombstone
                    // exactly this identity (a no-op when it never was, SB-6.6). A refusal the
                    // owner decided (another incarnation, no such actor) registered nothing.
                    if !matches!(kind, ErrorKind::InvalidOperation | ErrorKind::NotFound) {
                        owner.spawn_tombstone(entry2.rid, identity);
                    }
                    Err(SessionError::Remote {
                        kind,
                        detail: detail.unwrap_or_else(|| "bind refused".into()),
                    })
                }
                BindCompletion::Late { reason, tombstone } => {
                    owner.flow.reject(FlowRecord::Bind, reason, &actor_id);
                    if let Some(t) = tombstone {
                        owner.spawn_tombstone(entry2.rid, t);
                    }
                    Err(SessionError::Closed)
                }
            };
            let _ = tx.send(out);
        });
        rx.await.unwrap_or(Err(SessionError::Closed))
    }

    fn spawn_tombstone(self: &Arc<Self>, rid: SessionRid, t: Tombstone) {
        let owner = self.clone();
        tokio::spawn(async move {
            let rec = owner.bind_record(rid, &t, owner.host.owner_lease(), BindOperation::Unbind);
            if let (Err((kind, detail)), _) = owner
                .host
                .send_bind(&t.route.node, rec, owner.cfg.request_timeout)
                .await
            {
                tracing::debug!(actor = %t.actor, %kind, %detail, "tombstone of a late bind failed");
            }
        });
    }

    async fn send_tombstone(
        &self,
        rid: SessionRid,
        b: &Binding,
        operation: BindOperation,
    ) -> Result<BindSnapshot, Refusal> {
        let identity = Tombstone {
            actor: b.actor.clone(),
            object_generation: b.object_generation,
            route: b.route.clone(),
            generation: b.generation,
        };
        let rec = self.bind_record(rid, &identity, b.owner_lease, operation);
        self.host
            .send_bind(&b.route.node, rec, self.cfg.request_timeout)
            .await
            .0
    }

    /// Unbind (`notify == false`) or `NotifyDisconnected` (`notify == true`) of one binding
    /// (SB-6.6, SB-7.5): removed from the aggregate at once (at most once per identity), then
    /// the 38 tombstone; waits for its terminal (the Spot callback's, for a notify).
    pub(crate) async fn remove(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        notify: bool,
    ) -> Result<(), SessionError> {
        let b = {
            let mut agg = entry.agg();
            if notify {
                agg.begin_notify(actor, generation)
            } else {
                agg.remove(actor, generation)
            }
        }
        .map_err(|r| {
            self.flow.reject(FlowRecord::Bind, r, actor);
            SessionError::of_reject(FlowRecord::Bind, actor, r)
        })?;
        let op = if notify {
            BindOperation::Disconnect
        } else {
            BindOperation::Unbind
        };
        let owner = self.clone();
        let entry = entry.clone();
        // Infrastructure work: the tombstone is sent even if the caller stops waiting. A
        // notified binding stays for the actor's pushes until the Spot callback's terminal
        // (SB-7.5), then is tombstoned here too.
        let task = tokio::spawn(async move {
            let out = owner.send_tombstone(entry.rid, &b, op).await;
            if notify {
                entry.agg().finish_notify(&b.actor, b.generation);
            }
            out
        });
        match task.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((kind, detail))) => Err(SessionError::Remote { kind, detail }),
            Err(_) => Err(SessionError::Closed),
        }
    }

    /// `BoundActor::relay` (SB-5.3, SB-5.10): a 24 over the stored route with the bound-session
    /// tail.
    pub(crate) async fn relay(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
    ) -> Result<Option<Bytes>, SessionError> {
        let out = match self.relay_start(entry, actor, generation, key, payload, timeout)? {
            RelaySent::Now(out) => out,
            RelaySent::Later(wait) => wait.await,
        };
        out.map_err(remote)
    }

    /// [`SessionOwner::relay`] up to the 24's hand-off: the aggregate's ticket (a refusal is
    /// counted) and the send, which either completed at once or waits.
    pub(crate) fn relay_start(
        &self,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
    ) -> Result<RelaySent, SessionError> {
        let ticket = entry.agg().relay(actor, generation).map_err(|r| {
            self.flow.reject(FlowRecord::Relay, r, actor);
            SessionError::of_reject(FlowRecord::Relay, actor, r)
        })?;
        Ok(self.send_ticket(entry, ticket, key, payload, timeout))
    }

    /// [`SessionOwner::relay_start`] of a one-way relay to the actor whose id has these bytes,
    /// found and stepped under one lock of the aggregate (`relay_bytes`); `None` when no
    /// binding has these bytes (nothing counted: the caller decides what that is).
    pub(crate) fn relay_bytes_start(
        &self,
        entry: &Arc<SessionEntry>,
        actor: &[u8],
        key: DispatchKey,
        payload: Bytes,
    ) -> Option<Result<RelaySent, SessionError>> {
        let step = entry.agg().relay_bytes(actor)?;
        Some(match step {
            Ok(ticket) => Ok(self.send_ticket(entry, ticket, key, payload, None)),
            Err((r, actor)) => {
                self.flow.reject(FlowRecord::Relay, r, &actor);
                Err(SessionError::of_reject(FlowRecord::Relay, &actor, r))
            }
        })
    }

    /// The 24 of a relay ticket, handed to the host: [`SessionOwner::relay_start`] after the
    /// aggregate's step. A ticket of a sealed binding is held by the aggregate instead
    /// ([`SessionOwner::hold`]).
    pub(crate) fn send_ticket(
        &self,
        entry: &Arc<SessionEntry>,
        ticket: RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
    ) -> RelaySent {
        if ticket.held() {
            return self.hold(entry, &ticket, key, payload, timeout, None);
        }
        self.host.send_relay(ticket, key, payload, timeout, None)
    }

    /// A relay of a binding sealed by a relocation (SB-8.2): held in the aggregate in arrival
    /// order with its own deadline, until the 44 releases it over the binding's route then (or
    /// the session ends: then it is answered `Unavailable`). A one-way relay is done once
    /// held; a request waits for its terminal. While the session's seals hold more than the
    /// session lane's limits, the submitter's admission waits for the release. If the seal
    /// ended meanwhile the relay goes over the route as any.
    fn hold(
        &self,
        entry: &Arc<SessionEntry>,
        ticket: &RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
        admitted: Option<oneshot::Sender<()>>,
    ) -> RelaySent {
        let now = self.cfg.clock.now();
        let (request, reply) = match timeout {
            Some(t) => {
                let (tx, rx) = oneshot::channel();
                (
                    Some(HeldRequest {
                        deadline: now + t,
                        waiter: tx,
                    }),
                    Some(rx),
                )
            }
            None => (None, None),
        };
        // A one-way relay's submitter waits for its admission only past the session's limits.
        let (admitted, own) = match (admitted, timeout) {
            (Some(a), _) => (Some(a), None),
            (None, None) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            (None, Some(_)) => (None, None),
        };
        let relay = HeldRelay {
            key,
            payload,
            request,
            admitted,
        };
        let actor = &ticket.binding.actor;
        let mut agg = entry.agg();
        let within = match agg.hold_relay(actor, ticket.binding.generation, relay) {
            Ok(within) => within,
            Err(relay) => {
                // The seal ended between the ticket and now: the route as it is now.
                let fresh = agg.relay(actor, ticket.binding.generation);
                drop(agg);
                let HeldRelay {
                    key,
                    payload,
                    request,
                    admitted,
                } = relay;
                return match fresh {
                    Err(r) => {
                        self.flow.reject(FlowRecord::Relay, r, actor);
                        let e = SessionError::of_reject(FlowRecord::Relay, actor, r);
                        RelaySent::Now(Err((e.kind(), e.to_string())))
                    }
                    Ok(t) if t.held() => RelaySent::Now(Err((
                        ErrorKind::Unavailable,
                        "the binding was sealed again".into(),
                    ))),
                    Ok(t) => {
                        drop(request);
                        self.host.send_relay(t, key, payload, timeout, admitted)
                    }
                };
            }
        };
        drop(agg);
        if timeout.is_some() {
            // Its deadline may be the seal timer's next.
            entry.seal_wake.notify_one();
        }
        match (reply, own) {
            (Some(rx), _) => RelaySent::Later(Box::pin(async move {
                rx.await.unwrap_or_else(|_| {
                    Err((
                        ErrorKind::Unavailable,
                        "the session ended while a relocation seal held the relay".into(),
                    ))
                })
            })),
            (None, Some(_)) if within => RelaySent::Now(Ok(None)),
            (None, Some(rx)) => RelaySent::Later(Box::pin(async move {
                let _ = rx.await;
                Ok(None)
            })),
            (None, None) => RelaySent::Now(Ok(None)),
        }
    }

    /// [`SessionOwner::relay_start`] of a forwarded request ([`super::BoundActor::forward`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward_start(
        &self,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
        map: super::ReplyMap,
    ) -> Result<Forwarded, SessionError> {
        let ticket = entry.agg().relay(actor, generation).map_err(|r| {
            self.flow.reject(FlowRecord::Relay, r, actor);
            SessionError::of_reject(FlowRecord::Relay, actor, r)
        })?;
        Ok(self.forward_ticket(entry, ticket, key, payload, timeout, map))
    }

    /// The 24 request of a relay ticket whose reply answers the client's packet on its own.
    /// A held one (sealed binding) ends the packet's turn once held: the seal keeps its order.
    pub(crate) fn forward_ticket(
        &self,
        entry: &Arc<SessionEntry>,
        ticket: RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
        map: super::ReplyMap,
    ) -> Forwarded {
        let (tx, admitted) = oneshot::channel();
        let sent = if ticket.held() {
            self.hold(entry, &ticket, key, payload, Some(timeout), Some(tx))
        } else {
            self.host
                .send_relay(ticket, key, payload, Some(timeout), Some(tx))
        };
        Forwarded {
            sent,
            admitted,
            map,
        }
    }

    pub(crate) async fn get_actor(&self, actor: ActorId) -> Result<ActorRef, SessionError> {
        Ok(self.host.get_actor(actor).await?)
    }

    pub(crate) async fn create_actor(
        &self,
        create: crate::actor::Create,
        or_get: bool,
    ) -> Result<ActorRef, SessionError> {
        if !self.accepting.load(Ordering::Acquire) {
            return Err(SessionError::ShuttingDown);
        }
        Ok(self.host.create_actor(create, or_get).await?)
    }

    /// Pushes straight to a session's client (the session's own sends).
    pub(crate) async fn push_to_client(
        &self,
        rid: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), SessionError> {
        if self.entry(rid).is_none() {
            return Err(SessionError::Closed);
        }
        self.host
            .push(rid, key, payload)
            .await
            .map_err(|_| SessionError::Closed)
    }

    /// The checks of a 36 (or the same-node push): the session must be known and the four
    /// SB-5.5 values current (SB-5.8); otherwise counted with its reason (SB-5.9). A 36 with
    /// [`CLOSE_SESSION_KEY`] closes the connection instead (SB-5.14). `Some` when the payload
    /// goes to the client.
    fn accept_push(
        self: &Arc<Self>,
        push: &BoundSessionSend,
        payload: &mut Option<Bytes>,
    ) -> Option<Arc<SessionEntry>> {
        let Some(entry) = self.entry(push.session) else {
            let reason = if push.session_lifecycle == self.cfg.lifecycle {
                FlowReject::UnknownSession
            } else {
                FlowReject::LifecycleMismatch
            };
            self.flow.reject(FlowRecord::Push, reason, &push.actor);
            return None;
        };
        let mut agg = entry.agg();
        match agg.check_push(push).map(|_| ()) {
            Ok(()) => {}
            // A bind of exactly this identity may be in flight: its terminal (on the
            // completion connection) can arrive after this push (on the relay connection).
            Err(FlowReject::NotBound) if payload.is_some() => {
                let held = super::aggregate::HeldPush {
                    push: push.clone(),
                    payload: payload.take().unwrap_or_default(),
                };
                if let Err((r, _)) = agg.hold_push(held) {
                    self.flow.reject(FlowRecord::Push, r, &push.actor);
                }
                return None;
            }
            // The binding is sealed: the push may be the target's, ahead of its 44.
            Err(FlowReject::NodeGenerationMismatch | FlowReject::AuthorityMismatch)
                if payload.is_some() && agg.is_sealed(&push.actor) =>
            {
                let held = super::aggregate::HeldPush {
                    push: push.clone(),
                    payload: payload.take().unwrap_or_default(),
                };
                if let Err((r, h)) = agg.hold_sealed_push(held) {
                    let reason = if r == FlowReject::NotBound {
                        // Not of the sealed identity: the push check's own reason.
                        agg.check_push(&h.push).err().unwrap_or(r)
                    } else {
                        r
                    };
                    self.flow.reject(FlowRecord::Push, reason, &push.actor);
                }
                return None;
            }
            Err(r) => {
                self.flow.reject(FlowRecord::Push, r, &push.actor);
                return None;
            }
        }
        drop(agg);
        if push.key == CLOSE_SESSION_KEY {
            tracing::debug!(session = %push.session, actor = %push.actor, "bound actor closed the session");
            self.host.close(push.session, DisconnectReason::Closed);
            return None;
        }
        Some(entry)
    }

    /// A push from a bound actor on this node: checked as a 36, then sent, waiting for the
    /// client's credit (the pushing handler is held back, as a remote one is by its window).
    pub(crate) async fn handle_local_push(
        self: &Arc<Self>,
        push: BoundSessionSend,
        payload: Bytes,
    ) {
        let mut payload = Some(payload);
        if self.accept_push(&push, &mut payload).is_none() {
            return;
        }
        let payload = payload.unwrap_or_default();
        if let Err(e) = self.host.push(push.session, push.key, payload).await {
            self.flow
                .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
        }
    }

    /// A 36 from a peer (see [`SessionOwner::accept_push`] for the checks). Never waits: a
    /// client without credit (its outbound budget full) holds up only its own pushes, which
    /// wait in order in the session's push queue, each at most the send timeout; once one timed
    /// out the session is *stalled* and its pushes are sent only if there is room at once
    /// (else refused, counted `ClientBacklogFull`) until the client takes one again. With
    /// `release` the sender's credit for a waiting push stays charged until it left the queue
    /// (its window bounds the queue); without, at most [`PUSH_BACKLOG`] wait (more are
    /// refused, counted).
    pub(crate) fn handle_push(
        self: &Arc<Self>,
        push: BoundSessionSend,
        payload: Bytes,
        release: Option<impl FnOnce() -> Done>,
    ) -> Admitted {
        let mut payload = Some(payload);
        let Some(entry) = self.accept_push(&push, &mut payload) else {
            return Admitted::Now;
        };
        self.send_accepted(entry, &push, payload.unwrap_or_default(), release)
    }

    /// The pushes held for a bind that just completed (in arrival order), checked against the
    /// published binding and sent, under the aggregate's lock `agg` (so no later push of the
    /// binding overtakes them); refused ones counted.
    fn release_held(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        agg: &mut AggGuard<'_>,
        actor: &ActorId,
    ) {
        for h in agg.take_held(actor) {
            if let Err(r) = agg.check_push(&h.push) {
                self.flow.reject(FlowRecord::Push, r, &h.push.actor);
                continue;
            }
            if h.push.key == CLOSE_SESSION_KEY {
                self.host.close(h.push.session, DisconnectReason::Closed);
                continue;
            }
            let _ = self.send_accepted(entry.clone(), &h.push, h.payload, None::<fn() -> Done>);
        }
    }

    /// [`SessionOwner::handle_push`] after its checks.
    fn send_accepted(
        self: &Arc<Self>,
        entry: Arc<SessionEntry>,
        push: &BoundSessionSend,
        payload: Bytes,
        release: Option<impl FnOnce() -> Done>,
    ) -> Admitted {
        let (session, key) = (push.session, push.key);
        let owner = self.clone();
        let mut payload = Some(payload);
        let mut release = Some(release);
        let limit = if matches!(release, Some(Some(_))) {
            usize::MAX
        } else {
            PUSH_BACKLOG
        };
        let attempt = |try_now: bool| -> Option<BoxFuture<()>> {
            let mut payload = payload.take().expect("one attempt");
            if try_now {
                match owner.host.try_push(session, key, payload) {
                    Ok(()) => {
                        entry.push_sent();
                        return None;
                    }
                    Err(zlink_mesh::TryPushError::Full(p)) => payload = p,
                    Err(zlink_mesh::TryPushError::Failed(e)) => {
                        owner
                            .flow
                            .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
                        return None;
                    }
                    // A refusal this version does not know: not sent, as a failure.
                    Err(_) => {
                        let e = zlink_mesh::SendError::Unavailable;
                        owner
                            .flow
                            .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
                        return None;
                    }
                }
            }
            let owner = owner.clone();
            let entry = entry.clone();
            let done = release.take().flatten().map(|r| r());
            Some(Box::pin(async move {
                owner.push_waiting(&entry, key, payload).await;
                if let Some(done) = done {
                    // The session backlogs' place for credit: this node's mesh.
                    owner.backlogs.release(done);
                }
            }))
        };
        match self.pushes.run(&session, limit, attempt, &self.rt) {
            Ok(a) => a,
            Err(_) => {
                self.flow
                    .reject(FlowRecord::Push, FlowReject::ClientBacklogFull, &push.actor);
                Admitted::Now
            }
        }
    }

    /// A push that waits for the client's credit, unless the session is stalled (a push of it
    /// timed out and none went through since): then only if there is room at once.
    async fn push_waiting(&self, entry: &SessionEntry, key: DispatchKey, payload: Bytes) {
        let session = entry.rid;
        let out = if entry.push_stalled.load(Ordering::Acquire) {
            match self.host.try_push(session, key, payload) {
                Ok(()) => Ok(()),
                Err(zlink_mesh::TryPushError::Full(_)) => {
                    self.flow
                        .reject(FlowRecord::Push, FlowReject::ClientBacklogFull, &session);
                    return;
                }
                Err(zlink_mesh::TryPushError::Failed(e)) => Err(e),
                Err(_) => Err(zlink_mesh::SendError::Unavailable),
            }
        } else {
            // Room comes back in batches: most waiting pushes find it at once.
            match self.host.try_push(session, key, payload) {
                Ok(()) => Ok(()),
                Err(zlink_mesh::TryPushError::Full(p)) => self.host.push(session, key, p).await,
                Err(zlink_mesh::TryPushError::Failed(e)) => Err(e),
                Err(_) => Err(zlink_mesh::SendError::Unavailable),
            }
        };
        match out {
            Ok(()) => entry.push_sent(),
            Err(e) => {
                if matches!(e, SendError::DeadlineExceeded(_)) {
                    entry.push_stalled.store(true, Ordering::Release);
                }
                self.flow
                    .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
            }
        }
    }

    /// Counters of the session push queues (pushes that waited for a client's credit).
    pub(crate) fn push_backlog_stats(&self) -> BacklogStats {
        self.pushes.stats()
    }

    /// A 51 (or the same-node replacement) from `sender` (SB-6.2 … SB-6.5): retire the
    /// binding, enter *closing*, run the replaced-callback, close 100 ms after its terminal.
    pub(crate) fn handle_replaced(
        self: &Arc<Self>,
        sender: (&NodeRid, NodeGeneration),
        rec: &BoundSessionReplaced,
    ) {
        let Some(entry) = self.entry(rec.previous.session) else {
            self.flow
                .reject(FlowRecord::Replaced, FlowReject::UnknownSession, &rec.actor);
            return;
        };
        let now = self.cfg.clock.now();
        let outcome = entry.agg().handle_replaced(now, sender, rec);
        let seq = match outcome {
            Err(r) => {
                self.flow.reject(FlowRecord::Replaced, r, &rec.actor);
                return;
            }
            Ok(ReplacedOutcome::Closing { seq, .. }) => {
                tracing::info!(session = %entry.rid, actor = %rec.actor, "session replaced: closing");
                self.spawn_close_timer(&entry, seq);
                seq
            }
            // Closing already: this actor's replaced-callback runs too, and the close waits
            // for it (SB-6.2, SB-6.9).
            Ok(ReplacedOutcome::AlsoClosing { seq, .. }) => {
                tracing::info!(session = %entry.rid, actor = %rec.actor, seq, "closing session replaced again");
                entry.timer.notify_one();
                seq
            }
        };
        self.replacements.fetch_add(1, Ordering::Relaxed);
        let owner = self.clone();
        let session = self.session(&entry);
        let cb = self.callbacks.on_replaced.clone();
        let actor = rec.actor.clone();
        let entry2 = entry.clone();
        let finished = move |owner: &Arc<SessionOwner>| {
            let now = owner.cfg.clock.now();
            if entry2.agg().callback_finished(now, seq) {
                entry2.timer.notify_one();
            }
        };
        let submitted = entry.lane.submit_lifecycle(move |_ctx| {
            Handled::later(async move {
                if let Some(cb) = cb
                    && let Err(e) = cb(session, actor).await
                {
                    tracing::info!(error = %e, "replaced-callback failed");
                }
                finished(&owner);
                Ok(())
            })
        });
        if submitted.is_err() {
            let now = self.cfg.clock.now();
            if entry.agg().callback_finished(now, seq) {
                entry.timer.notify_one();
            }
        }
    }

    /// What the relocation seals of this node's sessions hold now (0 once every seal ended).
    pub(crate) fn seal_gauges(&self) -> SealGauges {
        let entries: Vec<Arc<SessionEntry>> = lock(&self.sessions).values().cloned().collect();
        let mut g = SealGauges::default();
        for e in &entries {
            g += e.agg().seal_gauges();
        }
        g
    }

    /// A 42 from `sender` (SB-8.1): the seal is installed (or was, for a duplicate) and the
    /// 43 says `Installed`, else `Rejected` with the SB-12 kind (counted). The 43 is the 42's
    /// reply on its correlation (no sequence, no high-water: SB-8.2, SB-14.26).
    pub(crate) fn handle_seal(
        self: &Arc<Self>,
        sender: (&NodeRid, NodeGeneration),
        rec: &SessionRelocationSeal,
        reply: Option<ReplyHandle>,
    ) {
        let outcome = match self.entry(rec.seal.session) {
            None => {
                let reason = if rec.seal.session_lifecycle == self.cfg.lifecycle {
                    FlowReject::UnknownSession
                } else {
                    FlowReject::LifecycleMismatch
                };
                Err((reason, ErrorKind::Unavailable))
            }
            Some(entry) => {
                let now = self.cfg.clock.now();
                let out = entry.agg().handle_seal(now, sender, rec);
                if out.is_ok() {
                    tracing::debug!(session = %entry.rid, actor = %rec.actor, relocation = %rec.seal.relocation, "relocation seal installed");
                    self.arm_seal_timer(&entry);
                }
                out
            }
        };
        let outcome = match outcome {
            Ok(()) => SealOutcome::Installed,
            Err((reason, kind)) => {
                self.flow.reject(FlowRecord::Seal, reason, &rec.actor);
                SealOutcome::Rejected(kind)
            }
        };
        let Some(reply) = reply else {
            return;
        };
        let sealed = Record::SessionRelocationSealed(SessionRelocationSealed {
            seal: rec.seal.clone(),
            outcome,
        });
        if let Err(e) = reply.reply_record(sealed, None) {
            let (reply, e) = *e;
            reply.error(ErrorKind::Internal, e.to_string());
        }
    }

    /// A 44 from any mesh peer (SB-8.3, SB-8.7, SB-8.8); never answered (SB-8.4). Applied:
    /// the held pushes of the binding are checked again (after a commit against the target's
    /// values) and the held relays leave in order. A late or foreign one is a
    /// `late_session_route_update` Warning, counted, and changes nothing; a duplicate is a
    /// counted no-op.
    pub(crate) fn handle_route(self: &Arc<Self>, rec: &SessionRelocationRoute) {
        let (session, lifecycle) = match rec {
            SessionRelocationRoute::Commit(c) => (c.session, c.session_lifecycle),
            SessionRelocationRoute::Abort(a) => (a.seal.session, a.seal.session_lifecycle),
        };
        let late = |reason: FlowReject, detail: &dyn std::fmt::Display| {
            self.flow.reject(FlowRecord::Route, reason, detail);
            if reason == FlowReject::LateRouteUpdate {
                tracing::warn!(session = %session, %lifecycle, record = ?rec, "late_session_route_update: ignored");
            }
        };
        let Some(entry) = self.entry(session) else {
            late(FlowReject::LateRouteUpdate, &session);
            return;
        };
        let applied = {
            let mut agg = entry.agg();
            let applied = agg.handle_route(rec);
            if let Ok(a) = &applied {
                let actor = match a {
                    RouteApplied::Committed(b) | RouteApplied::Aborted(b) => b.actor.clone(),
                };
                // Target pushes that overtook the 44 pass now; after an abort they are refused.
                self.release_held(&entry, &mut agg, &actor);
            }
            applied
        };
        match applied {
            Err(reason) => late(reason, &session),
            Ok(RouteApplied::Committed(b)) => {
                tracing::debug!(session = %entry.rid, actor = %b.actor, to = %b.route.node, "relocation committed: route switched");
                self.release(&entry, b.actor.clone());
            }
            Ok(RouteApplied::Aborted(b)) => {
                tracing::debug!(session = %entry.rid, actor = %b.actor, "relocation aborted: held relays go to the source");
                self.release(&entry, b.actor.clone());
            }
        }
    }

    /// Sends the held relays of `actor`'s releasing seal in arrival order over the binding's
    /// route (infrastructure work): each one's admission before the next is taken; relays
    /// submitted meanwhile queue behind them; the seal ends with the last.
    fn release(self: &Arc<Self>, entry: &Arc<SessionEntry>, actor: ActorId) {
        let owner = self.clone();
        let entry = entry.clone();
        self.rt.spawn(async move {
            loop {
                let now = owner.cfg.clock.now();
                let step = entry.agg().next_released(now, &actor);
                let (ticket, relay) = match step {
                    Released::Done => return,
                    Released::Expired(r) => {
                        r.answer(Err((
                            ErrorKind::DeadlineExceeded,
                            "the deadline passed while a relocation seal held the relay".into(),
                        )));
                        continue;
                    }
                    Released::Send(t, r) => (t, r),
                };
                let HeldRelay {
                    key,
                    payload,
                    request,
                    admitted,
                } = relay;
                let timeout = request
                    .as_ref()
                    .map(|q| q.deadline.saturating_duration_since(now));
                let (tx, in_queue) = oneshot::channel();
                match owner
                    .host
                    .send_relay(ticket, key, payload, timeout, Some(tx))
                {
                    RelaySent::Now(out) => {
                        if let Some(q) = request {
                            let _ = q.waiter.send(out);
                        } else if let Err((kind, detail)) = out {
                            tracing::debug!(%actor, %kind, %detail, "released relay refused");
                        }
                    }
                    RelaySent::Later(wait) => match request {
                        // A one-way send's future ends at its admission.
                        None => {
                            if let Err((kind, detail)) = wait.await {
                                tracing::debug!(%actor, %kind, %detail, "released relay refused");
                            }
                        }
                        Some(q) => {
                            tokio::spawn(async move {
                                let _ = q.waiter.send(wait.await);
                            });
                            let _ = in_queue.await;
                        }
                    },
                }
                // In the actor owner's queue (or refused): its submitter goes on.
                drop(admitted);
            }
        });
    }

    /// Starts the session's seal timer unless it runs (then wakes it: a deadline moved).
    fn arm_seal_timer(self: &Arc<Self>, entry: &Arc<SessionEntry>) {
        {
            let _agg = entry.agg();
            if entry.seal_timer.load(Ordering::Acquire) {
                entry.seal_wake.notify_one();
                return;
            }
            entry.seal_timer.store(true, Ordering::Release);
        }
        let owner = self.clone();
        let entry = entry.clone();
        self.rt.spawn(async move {
            loop {
                let deadline = {
                    let agg = entry.agg();
                    match agg.poll_seal_timeout() {
                        Some(d) => d,
                        None => {
                            entry.seal_timer.store(false, Ordering::Release);
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = owner.cfg.clock.sleep_until(deadline) => {}
                    () = entry.seal_wake.notified() => continue,
                }
                let now = owner.cfg.clock.now();
                let fired = entry.agg().handle_seal_timeouts(now);
                for r in fired.expired {
                    r.answer(Err((
                        ErrorKind::DeadlineExceeded,
                        "the deadline passed while a relocation seal held the relay".into(),
                    )));
                }
                if let Some(dropped) = fired.closed {
                    tracing::warn!(session = %entry.rid, held = dropped.len(), "relocation seal timed out: closing the session");
                    for r in dropped {
                        owner
                            .flow
                            .reject(FlowRecord::Relay, FlowReject::RelocationTimeout, &entry.rid);
                        r.answer(Err((
                            ErrorKind::Unavailable,
                            "the relocation seal timed out: the session is closed".into(),
                        )));
                    }
                    {
                        let _agg = entry.agg();
                        entry.seal_timer.store(false, Ordering::Release);
                    }
                    owner
                        .host
                        .close(entry.rid, DisconnectReason::RelocationSealTimeout);
                    return;
                }
            }
        });
    }

    /// The non-blocking replacement close timer (SB-6.4): sleeps on the injected clock until
    /// the aggregate's deadline, re-reads it when woken, closes when the aggregate decides.
    fn spawn_close_timer(self: &Arc<Self>, entry: &Arc<SessionEntry>, seq: u64) {
        let owner = self.clone();
        let entry = entry.clone();
        tokio::spawn(async move {
            loop {
                let Some(deadline) = entry.agg().poll_timeout() else {
                    return;
                };
                let woken = entry.timer.notified();
                tokio::select! {
                    () = owner.cfg.clock.sleep_until(deadline) => {}
                    () = woken => continue,
                }
                let now = owner.cfg.clock.now();
                let decision = entry.agg().handle_timeout(now, seq);
                if let Some(d) = decision {
                    if d.forced {
                        tracing::warn!(session = %entry.rid, "replaced-callback timed out: closing");
                    }
                    owner.host.close(entry.rid, DisconnectReason::Replaced);
                    return;
                }
            }
        });
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::runtime::{Runtime, RuntimeConfig};

    /// A host that accepts sessions and refuses everything else (the cache needs no more).
    struct Host;

    impl SessionHost for Host {
        fn send_bind(
            &self,
            _: &NodeRid,
            _: BoundSessionBind,
            _: Duration,
        ) -> BoxFuture<(Result<BindSnapshot, Refusal>, Option<AfterBind>)> {
            Box::pin(async { (Err((ErrorKind::Unavailable, "test".into())), None) })
        }
        fn send_relay(
            &self,
            _: RelayTicket,
            _: DispatchKey,
            _: Bytes,
            _: Option<Duration>,
            _: Option<oneshot::Sender<()>>,
        ) -> RelaySent {
            RelaySent::Now(Err((ErrorKind::Unavailable, "test".into())))
        }
        fn try_push(
            &self,
            _: SessionRid,
            _: DispatchKey,
            _: Bytes,
        ) -> Result<(), zlink_mesh::TryPushError> {
            Ok(())
        }
        fn push(
            &self,
            _: SessionRid,
            _: DispatchKey,
            _: Bytes,
        ) -> BoxFuture<Result<(), SendError>> {
            Box::pin(async { Ok(()) })
        }
        fn close(&self, _: SessionRid, _: DisconnectReason) {}
        fn accept(&self, _: SessionRid) {}
        fn owner_lease(&self) -> OwnerLeaseGeneration {
            OwnerLeaseGeneration::new(1)
        }
        fn get_actor(&self, _: ActorId) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
            Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
        }
        fn create_actor(
            &self,
            _: crate::actor::Create,
            _: bool,
        ) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
            Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
        }
        fn enter_work(&self) -> Option<InflightGuard> {
            None
        }

        fn credit_return(&self) -> std::sync::Weak<dyn CreditReturn> {
            std::sync::Weak::<Nowhere>::new()
        }
    }

    /// Credit returned nowhere (this host's packets hold none).
    struct Nowhere;

    impl CreditReturn for Nowhere {
        fn return_credit(&self, _: zlink_mesh::Origin, _: u32, _: u64) {}
    }

    /// What the actor owner's after-terminal work (its 51) saw of the bind's session: whether
    /// the binding was published when it ran.
    type Seen = Arc<Mutex<Vec<bool>>>;

    /// A host whose actor owner (this node) registers every bind and returns an after-terminal
    /// step that records whether the session owner had stored the route by then.
    struct BindingHost {
        owner: Arc<std::sync::OnceLock<(std::sync::Weak<SessionOwner>, SessionRid)>>,
        seen: Seen,
    }

    impl SessionHost for BindingHost {
        fn send_bind(
            &self,
            _: &NodeRid,
            req: BoundSessionBind,
            _: Duration,
        ) -> BoxFuture<(Result<BindSnapshot, Refusal>, Option<AfterBind>)> {
            let (owner, seen) = (self.owner.clone(), self.seen.clone());
            let snap = BindSnapshot {
                actor: req.actor.clone(),
                object_generation: req.object_generation,
                location: zlink_wire::ActorLocation {
                    mesh: zlink_wire::MeshName::new("m").unwrap(),
                    node: NodeRid::new("a").unwrap(),
                    node_generation: req.target_node_generation,
                    authority_owner_generation: req.authority_owner_generation,
                    owner_lease_generation: req.owner_lease_generation,
                },
                binding_generation: req.binding_generation,
            };
            let actor = req.actor;
            let after: AfterBind = Box::pin(async move {
                let (o, rid) = owner.get().expect("set").clone();
                let o = o.upgrade().expect("owner");
                let published = o.entry(rid).is_some_and(|e| e.find(&actor).is_some());
                seen.lock().unwrap().push(published);
            });
            Box::pin(async move { (Ok(snap), Some(after)) })
        }
        fn send_relay(
            &self,
            _: RelayTicket,
            _: DispatchKey,
            _: Bytes,
            _: Option<Duration>,
            _: Option<oneshot::Sender<()>>,
        ) -> RelaySent {
            RelaySent::Now(Err((ErrorKind::Unavailable, "test".into())))
        }
        fn try_push(
            &self,
            _: SessionRid,
            _: DispatchKey,
            _: Bytes,
        ) -> Result<(), zlink_mesh::TryPushError> {
            Ok(())
        }
        fn push(
            &self,
            _: SessionRid,
            _: DispatchKey,
            _: Bytes,
        ) -> BoxFuture<Result<(), SendError>> {
            Box::pin(async { Ok(()) })
        }
        fn close(&self, _: SessionRid, _: DisconnectReason) {}
        fn accept(&self, _: SessionRid) {}
        fn owner_lease(&self) -> OwnerLeaseGeneration {
            OwnerLeaseGeneration::new(1)
        }
        fn get_actor(&self, _: ActorId) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
            Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
        }
        fn create_actor(
            &self,
            _: crate::actor::Create,
            _: bool,
        ) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
            Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
        }
        fn enter_work(&self) -> Option<InflightGuard> {
            None
        }
        fn credit_return(&self) -> std::sync::Weak<dyn CreditReturn> {
            std::sync::Weak::<Nowhere>::new()
        }
    }

    // spec: SB-6.1
    // The actor owner's 51 after a same-node bind runs only once the terminal is applied: the
    // session owner has stored the route (the bind is published) when it runs.
    #[test]
    fn a_same_node_replacement_51_runs_after_the_route_is_stored() {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let cell = Arc::new(std::sync::OnceLock::new());
        let seen = Seen::default();
        let owner = Arc::new(SessionOwner::new(
            SessionOwnerConfig {
                node: NodeRid::new("a").unwrap(),
                lifecycle: SessionLifecycleGeneration::new(1),
                callback_timeout: Duration::from_secs(1),
                binding_limit: 32,
                request_timeout: Duration::from_secs(1),
                clock: Arc::new(super::super::clock::SystemClock),
                seal_timeout: Duration::from_secs(3),
                held_limit: (1024, 1 << 20),
            },
            Box::new(BindingHost {
                owner: cell.clone(),
                seen: seen.clone(),
            }),
            runtime.clone(),
            HandlerRegistry::default(),
            Callbacks::default(),
            tokio.handle().clone(),
        ));
        let rid = SessionRid::new(5);
        let entered = tokio.enter();
        let entry = owner.connected(rid).unwrap();
        cell.set((Arc::downgrade(&owner), rid)).unwrap();
        let actor = |i: u32| {
            ActorRef::from_parts(
                ActorId::new(format!("x{i}")).unwrap(),
                "t".into(),
                zlink_wire::ObjectGeneration::new(1),
                zlink_wire::ActorLocation {
                    mesh: zlink_wire::MeshName::new("m").unwrap(),
                    node: NodeRid::new("a").unwrap(),
                    node_generation: NodeGeneration::new(1),
                    authority_owner_generation: zlink_wire::AuthorityOwnerGeneration::new(1),
                    owner_lease_generation: OwnerLeaseGeneration::new(1),
                },
            )
        };
        for i in 0..20 {
            tokio.block_on(owner.bind(&entry, &actor(i))).unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while seen.lock().unwrap().len() < 20 {
            assert!(std::time::Instant::now() < deadline, "the 51s never ran");
            std::thread::yield_now();
        }
        assert!(
            seen.lock().unwrap().iter().all(|p| *p),
            "a 51 ran before the route was stored: {:?}",
            seen.lock().unwrap()
        );
        drop((entry, entered));
        tokio.block_on(runtime.shutdown());
    }

    /// A session owner of node "a" with no handlers or callbacks, on `runtime`.
    fn owner_on(tokio: &tokio::runtime::Runtime, runtime: &Runtime) -> Arc<SessionOwner> {
        Arc::new(SessionOwner::new(
            SessionOwnerConfig {
                node: NodeRid::new("a").unwrap(),
                lifecycle: SessionLifecycleGeneration::new(1),
                callback_timeout: Duration::from_secs(1),
                binding_limit: 4,
                request_timeout: Duration::from_secs(1),
                clock: Arc::new(super::super::clock::SystemClock),
                seal_timeout: Duration::from_secs(3),
                held_limit: (1024, 1 << 20),
            },
            Box::new(Host),
            runtime.clone(),
            HandlerRegistry::default(),
            Callbacks::default(),
            tokio.handle().clone(),
        ))
    }

    // A packet's admission reads the entry's copy of whether the aggregate accepts packets
    // (no lock): it follows every change made under the aggregate's lock, and the session that
    // ended refuses packets.
    #[test]
    fn a_sessions_copy_of_accepting_packets_follows_its_aggregate() {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let owner = owner_on(&tokio, &runtime);
        let entered = tokio.enter();
        let e = owner.connected(SessionRid::new(3)).unwrap();
        assert!(e.accepts_packets() && e.agg().accepts_packets());
        let _ = e.agg().disconnect();
        assert!(!e.agg().accepts_packets());
        assert!(
            !e.accepts_packets(),
            "the copy did not follow the aggregate"
        );
        // refused at admission: no handler is looked up, no turn submitted
        let admitted = owner.packet(
            SessionRid::new(3),
            DispatchKey::new(1),
            Bytes::new(),
            None,
            Done::nothing,
            Inline::No,
        );
        assert_eq!(admitted, Admitted::Now);
        assert_eq!(
            owner
                .flow()
                .get(FlowRecord::Packet, FlowReject::SessionClosing),
            1,
            "{:?}",
            owner.flow().snapshot()
        );
        drop((e, entered));
        tokio.block_on(runtime.shutdown());
    }

    /// A session cache hands out exactly the map's entry for its SessionRid: an entry that
    /// left the map (disconnected) is not handed out again, even while something still holds
    /// it, and the session opened again for that SessionRid is found instead.
    #[test]
    fn a_session_cache_never_hands_out_an_entry_that_left_the_map() {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let owner = owner_on(&tokio, &runtime);
        let entered = tokio.enter();
        let rid = SessionRid::new(9);
        let mut cache = SessionCache::default();
        assert!(
            owner.entry_cached(&mut cache, rid).is_none(),
            "no session yet"
        );
        let first = owner.connected(rid).unwrap();
        let got = owner.entry_cached(&mut cache, rid).unwrap().clone();
        assert!(Arc::ptr_eq(&got, &first));
        assert!(Arc::ptr_eq(
            owner.entry_cached(&mut cache, rid).unwrap(),
            &first
        ));
        // Held within a pass, only remembered (weakly) after it: found again without the map.
        cache.end_pass();
        assert!(cache.held.is_none());
        assert!(Arc::ptr_eq(
            owner.entry_cached(&mut cache, rid).unwrap(),
            &first
        ));
        owner.disconnected(rid);
        assert!(
            owner.entry_cached(&mut cache, rid).is_none(),
            "the disconnected entry is still alive (held here) but not handed out"
        );
        let second = owner.connected(rid).unwrap();
        assert!(!Arc::ptr_eq(&second, &first));
        assert!(Arc::ptr_eq(
            owner.entry_cached(&mut cache, rid).unwrap(),
            &second
        ));
        // Another session: looked up, and cached in its place.
        let other = owner.connected(SessionRid::new(10)).unwrap();
        assert!(Arc::ptr_eq(
            owner.entry_cached(&mut cache, SessionRid::new(10)).unwrap(),
            &other
        ));
        // A pass's end lets go of the entry: the cache keeps nothing alive between passes.
        let held = Arc::strong_count(&other);
        cache.end_pass();
        assert_eq!(
            Arc::strong_count(&other),
            held - 1,
            "still held by the cache"
        );
        drop((got, first, entered));
        tokio.block_on(runtime.shutdown());
    }
}
