//! The node-facing API: [`MeshNode`] (start, connect, send, request), the inbound stream
//! ([`Inbound`] with its [`ReplyHandle`]) and peer events.
//!
//! Call order for a node binary: [`MeshNode::start`] → keep the returned
//! [`InboundReceiver`] and read it in a task → [`MeshNode::connect`] to peers →
//! [`MeshNode::wait_peer_up`] (or [`MeshNode::subscribe`]) → `send`/`request`/`push` →
//! [`MeshNode::shutdown`].

use crate::hashing::FastMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{broadcast, oneshot};

use crate::bridge::Bell;
use crate::budget::Budget;
use crate::codec::{self, Parts, Record};
use crate::config::{MeshConfig, PeerAddress};
use crate::counters::Counters;
use crate::engine::{Command, Dest, Engine};
use crate::error::{ConfigError, RequestError, SendError};
use crate::handshake::{LocalIdentity, MeshSecret};
use crate::types::{Deadline, DispatchKey, NodeGeneration, NodeRid, SessionRid, fresh_generation};
use crate::{envelope::*, error::*, events::*, inbound::*, outbox::*, reply::*};

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The reply record.
    pub record: Record,
    /// Its payload.
    pub payload: Option<Bytes>,
}

/// State shared by the API handles and the I/O thread.
pub(crate) struct Shared {
    pub bell: Bell<Command>,
    peers: RwLock<FastMap<NodeRid, PeerSlot>>,
    clients: RwLock<FastMap<u64, Arc<Budget>>>,
    pub counters: Counters,
    next_corr: AtomicU64,
    events: broadcast::Sender<PeerEvent>,
    /// [`MeshNode::take_client_events`] was called.
    client_events_taken: AtomicBool,
    closed: AtomicBool,
    max_message_size: usize,
    send_timeout: Duration,
    /// Credit released by the layer above ([`MeshNode::release_credit`]) and not yet taken by
    /// the I/O thread: one command per burst, not per record.
    pub released: std::sync::Mutex<Vec<Released>>,
}

impl Shared {
    /// A `Shared` with no node behind it (its doorbell goes nowhere): for the unit tests of
    /// the I/O thread's sans-IO parts.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Arc<Self> {
        let ctx = zmq::Context::new();
        let (bell, _door) = crate::bridge::pair(&ctx).expect("doorbell");
        Arc::new(Shared {
            bell,
            peers: RwLock::new(FastMap::default()),
            clients: RwLock::new(FastMap::default()),
            counters: Counters::default(),
            next_corr: AtomicU64::new(1),
            events: broadcast::channel(16).0,
            client_events_taken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            max_message_size: 1 << 20,
            send_timeout: Duration::from_secs(1),
            released: std::sync::Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn peer_slot(&self, node: &NodeRid) -> Option<PeerSlot> {
        self.peers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
    }

    /// Runs `f` on `node`'s slot under the read lock (no clone of the slot).
    pub(crate) fn with_peer<R>(&self, node: &NodeRid, f: impl FnOnce(&PeerSlot) -> R) -> Option<R> {
        self.peers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .map(f)
    }

    pub(crate) fn set_peer(&self, node: NodeRid, slot: Option<PeerSlot>) {
        let mut g = self.peers.write().unwrap_or_else(|e| e.into_inner());
        match slot {
            Some(s) => g.insert(node, s),
            None => g.remove(&node),
        };
    }

    pub(crate) fn client_budget(&self, session: u64) -> Option<Arc<Budget>> {
        self.clients
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&session)
            .cloned()
    }

    pub(crate) fn set_client(&self, session: u64, budget: Option<Arc<Budget>>) {
        let mut g = self.clients.write().unwrap_or_else(|e| e.into_inner());
        match budget {
            Some(b) => g.insert(session, b),
            None => g.remove(&session),
        };
    }

    pub(crate) fn publish(&self, e: PeerEvent) {
        let _ = self.events.send(e);
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn submit(&self, cmd: Command) -> Result<(), SendError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed);
        }
        self.bell.submit(cmd).map_err(|_| SendError::Closed)
    }

    /// [`Shared::check_size`] for parts of these lengths.
    fn check_lens(&self, envelope: usize, payload: Option<usize>) -> Result<u64, SendError> {
        let mut total = 0u64;
        for len in std::iter::once(envelope).chain(payload) {
            if len > self.max_message_size {
                return Err(SendError::TooLarge {
                    size: len,
                    max: self.max_message_size,
                });
            }
            total += len as u64;
        }
        Ok(total)
    }

    fn check_size(&self, frames: &[Bytes]) -> Result<u64, SendError> {
        let mut total = 0u64;
        for f in frames {
            if f.len() > self.max_message_size {
                return Err(SendError::TooLarge {
                    size: f.len(),
                    max: self.max_message_size,
                });
            }
            total += f.len() as u64;
        }
        Ok(total)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

/// Endpoints actually bound (ephemeral ports resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundEndpoints {
    /// Relay ROUTER.
    pub relay: String,
    /// Completion ROUTER.
    pub completion: String,
    /// ClientServer ROUTER, if configured.
    pub client: Option<String>,
}

/// A running mesh node. Dropping it shuts the I/O thread down (without waiting).
pub struct MeshNode {
    shared: Arc<Shared>,
    node: NodeRid,
    generation: NodeGeneration,
    endpoints: BoundEndpoints,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for MeshNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshNode")
            .field("node", &self.node)
            .field("generation", &self.generation)
            .field("endpoints", &self.endpoints)
            .finish()
    }
}

impl MeshNode {
    /// Creates the sockets, binds them and starts the I/O thread.
    ///
    /// # Errors
    /// [`ConfigError::MissingSecret`] without a secret unless `insecure_dev_mode`; transport
    /// setup errors (bind failures).
    pub fn start(cfg: MeshConfig) -> Result<(MeshNode, InboundReceiver), ConfigError> {
        let secret = match (&cfg.secret, cfg.insecure_dev_mode) {
            (Some(s), _) => s.clone(),
            (None, true) => {
                tracing::warn!(node = %cfg.node, "mesh started in INSECURE dev mode");
                MeshSecret::insecure_dev()
            }
            (None, false) => return Err(ConfigError::MissingSecret),
        };
        if cfg.inbound_capacity == 0 {
            return Err(ConfigError::InvalidLimit("inbound_capacity"));
        }
        if cfg.peer_budget.messages == 0 || cfg.client_budget.messages == 0 {
            return Err(ConfigError::InvalidLimit("budget messages"));
        }
        if cfg.client_window.messages == 0 || cfg.client_window.bytes == 0 {
            return Err(ConfigError::InvalidLimit("client_window"));
        }
        if let crate::config::ClientAdmission::OnAccept(s) = cfg.client_admission
            && (s.window.messages == 0
                || s.window.bytes == 0
                || s.window.messages > cfg.client_window.messages
                || s.window.bytes > cfg.client_window.bytes)
        {
            return Err(ConfigError::InvalidLimit("client_admission window"));
        }
        if cfg.batching.max_records > zlink_wire::MAX_BATCH_RECORDS as usize {
            return Err(ConfigError::InvalidLimit("batching.max_records"));
        }
        if cfg.client_outbound.batch_records > zlink_wire::MAX_BATCH_RECORDS as usize {
            return Err(ConfigError::InvalidLimit("client_outbound.batch_records"));
        }
        let generation = cfg.generation.unwrap_or_else(fresh_generation);
        let local = LocalIdentity {
            mesh: cfg.mesh.clone(),
            node: cfg.node.clone(),
            generation,
            secret,
        };
        let ctx = zmq::Context::new();
        let (bell, door) = crate::bridge::pair(&ctx).map_err(|source| ConfigError::Transport {
            what: "doorbell".into(),
            source,
        })?;
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            bell,
            peers: RwLock::new(FastMap::default()),
            clients: RwLock::new(FastMap::default()),
            counters: Counters::default(),
            next_corr: AtomicU64::new(1),
            events,
            client_events_taken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            max_message_size: cfg.transport.max_message_size,
            send_timeout: cfg.send_timeout,
            released: std::sync::Mutex::new(Vec::new()),
        });
        let (tx, rx) = crate::inbound::channel(cfg.inbound_capacity);
        let node = cfg.node.clone();
        let (engine, bound) = Engine::new(ctx, door, shared.clone(), cfg, local, tx)?;
        let thread = std::thread::Builder::new()
            .name(format!("zlink-mesh-{node}"))
            .spawn(move || engine.run())
            .map_err(ConfigError::Thread)?;
        Ok((
            MeshNode {
                shared,
                node,
                generation,
                endpoints: BoundEndpoints {
                    relay: bound.relay,
                    completion: bound.completion,
                    client: bound.client,
                },
                thread: Some(thread),
            },
            rx,
        ))
    }

    /// This node's routing id.
    pub fn node(&self) -> &NodeRid {
        &self.node
    }

    /// This process' generation.
    pub fn generation(&self) -> NodeGeneration {
        self.generation
    }

    /// The bound endpoints.
    pub fn endpoints(&self) -> &BoundEndpoints {
        &self.endpoints
    }

    /// The address other nodes use to connect to this one.
    pub fn address(&self) -> PeerAddress {
        PeerAddress {
            node: self.node.clone(),
            relay: self.endpoints.relay.clone(),
            completion: self.endpoints.completion.clone(),
        }
    }

    /// Drop and event counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Subscribes to peer/client lifecycle events.
    pub fn subscribe(&self) -> broadcast::Receiver<PeerEvent> {
        self.shared.events.subscribe()
    }

    /// Takes the lossless stream of ClientServer session events (once: `None` after the first
    /// call). Take it right after [`MeshNode::start`]: the channel exists only once taken
    /// (nothing accumulates for nobody), and sessions that are live when the I/O thread gets
    /// it are announced first with a `Connected` each (their earlier records may already have
    /// gone up). From then on every session gets `Connected` before any of its records is
    /// handed to the [`InboundReceiver`] and `Disconnected` after the last of them. The
    /// [`PeerEvent`] broadcast keeps carrying `ClientConnected`/`ClientDisconnected` too
    /// (lossy for slow subscribers).
    pub fn take_client_events(&self) -> Option<ClientEvents> {
        if self.shared.client_events_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        // After shutdown the sender is dropped here: the stream ends at once.
        let _ = self.shared.submit(Command::ClientEvents(tx));
        Some(ClientEvents { rx })
    }

    /// Closes a ClientServer session with `reason`; returns at once. On the I/O thread, in
    /// this order: what is already queued for the client (pushes, replies admitted before this
    /// call) is transmitted first (FIFO; if the client is PAUSED this waits, at most the peer
    /// timeout, after which the rest is dropped and counted `PeerLost`); then the client gets a
    /// 149 Disconnect { `reason` }; then the session is removed (budget released, maps
    /// cleaned), its routing id tombstoned (a later record on that connection is dropped as
    /// `DropReason::SessionClosed` and answered with Disconnect { `reason` } again) and
    /// `ClientEvent::Disconnected { cause: ClientCloseCause::Closed(reason) }` plus
    /// `PeerEvent::ClientDisconnected` are published. From this call on, pushes to the session
    /// fail `Unavailable` and records it sends are dropped (`SessionClosed`).
    ///
    /// Closing an unknown or already closed (or closing) session is a no-op: `Ok(())`.
    ///
    /// # Errors
    /// [`SendError::Closed`] after the node shut down.
    pub fn close_client(
        &self,
        session: SessionRid,
        reason: zlink_wire::DisconnectReason,
    ) -> Result<(), SendError> {
        self.shared.submit(Command::CloseClient {
            session: session.get(),
            reason,
        })
    }

    /// Admits a ClientServer session ([`crate::ClientAdmission::OnAccept`]): the node's session
    /// layer calls it when its connected/authenticate callback accepts the session. Until
    /// then the session is a stranger (a small window, counted against the strangers' bounds,
    /// [`crate::Strangers`]); from now on it has the full `client_window` (the difference is
    /// granted to the client with a FlowCredit) and no longer counts as a stranger.
    ///
    /// Accepting an unknown, ended or already accepted session, or any session with
    /// [`crate::ClientAdmission::Open`], is a no-op: `Ok(())`.
    ///
    /// # Errors
    /// [`SendError::Closed`] after the node shut down.
    pub fn accept_client(&self, session: SessionRid) -> Result<(), SendError> {
        self.shared.submit(Command::AcceptClient {
            session: session.get(),
        })
    }

    /// Installs the direct-delivery sink ([`crate::sink`]): from the I/O thread's next pass on,
    /// every application record is offered to it before the inbound channel. Install it before
    /// records arrive (right after [`MeshNode::start`]): records already in the channel are
    /// not offered again.
    ///
    /// # Errors
    /// [`SendError::Closed`] after the node shut down.
    pub fn set_sink(&self, sink: Box<dyn crate::sink::InboundSink>) -> Result<(), SendError> {
        self.shared.submit(Command::SetSink(sink))
    }

    /// Returns the receive-window credit of a record the sink took with
    /// [`Offer::Held`](crate::Offer::Held): `origin` and `bytes` as it was offered. Credit of a
    /// peer lifecycle or a session that ended meanwhile is ignored.
    pub fn release_credit(&self, origin: Origin, bytes: u64) {
        self.release_credits(origin, 1, bytes);
    }

    /// [`MeshNode::release_credit`] for `records` records of `bytes` bytes in total, all from
    /// `origin` (a run of held records that left the layer above together: one entry for the
    /// I/O thread instead of one per record).
    pub fn release_credits(&self, origin: Origin, records: u32, bytes: u64) {
        if records == 0 {
            return;
        }
        let first = {
            let mut released = self
                .shared
                .released
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            released.push(Released {
                origin,
                records,
                bytes,
            });
            released.len() == 1
        };
        if first {
            // The I/O thread takes everything released until it handles this command.
            let _ = self.shared.submit(Command::ReleaseCredit);
        }
    }

    /// The current generation of `node` if it is up.
    pub fn peer_generation(&self, node: &NodeRid) -> Option<NodeGeneration> {
        self.shared.with_peer(node, |s| s.generation)
    }

    /// Connects to a peer (idempotent per address); the handshake runs in the background and
    /// re-runs after every reconnect. Connect in one direction per pair of nodes.
    pub fn connect(&self, peer: PeerAddress) -> Result<(), SendError> {
        self.shared.submit(Command::Connect(peer))
    }

    /// Waits until `node` is up (any generation other than `not`), at most `timeout`.
    pub async fn wait_peer_up(
        &self,
        node: &NodeRid,
        not: Option<NodeGeneration>,
        timeout: Duration,
    ) -> Option<NodeGeneration> {
        let mut events = self.subscribe();
        let fits = |g: NodeGeneration| not != Some(g);
        if let Some(g) = self.peer_generation(node).filter(|g| fits(*g)) {
            return Some(g);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Err(_) => return self.peer_generation(node).filter(|g| fits(*g)),
                Ok(Ok(PeerEvent::Up {
                    node: n,
                    generation,
                })) if n == *node && fits(generation) => return Some(generation),
                Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                Ok(_) => {
                    if let Some(g) = self.peer_generation(node).filter(|g| fits(*g)) {
                        return Some(g);
                    }
                }
            }
        }
    }

    /// Admits `n` records of `bytes` in total against `to`'s outbound budget (all or nothing,
    /// waiting at most `timeout`) and appends `items` to the peer's outbox, submitting a Flush
    /// when it was empty. A failed admission appends nothing, so it is never delivered later.
    /// Fast path (room in the budget): one read lock, no clone of the peer's slot.
    async fn enqueue<I: Enqueue>(
        &self,
        to: &NodeRid,
        n: u64,
        bytes: u64,
        timeout: Duration,
        items: I,
        keep: bool,
    ) -> Result<Option<Arc<Outbox>>, SendError> {
        match self.try_enqueue(to, n, bytes, items, keep)? {
            Admit::Queued(kept) => Ok(kept),
            // Boxed: the waiting path is rare, and inline it would make every send's future
            // (moved on each poll) several times larger.
            Admit::Wait(items, slot) => {
                Box::pin(self.enqueue_waiting(slot, n, bytes, timeout, items, keep)).await
            }
        }
    }

    /// The synchronous part of [`MeshNode::enqueue`]: admits and appends when the budget has
    /// room (one read lock, no clone of the peer's slot), else hands the items back with the
    /// slot to wait on.
    fn try_enqueue<I: Enqueue>(
        &self,
        to: &NodeRid,
        n: u64,
        bytes: u64,
        items: I,
        keep: bool,
    ) -> Result<Admit<I>, SendError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed);
        }
        // Admission and append under the peers' read lock, as `Shared::with_peer` does, but
        // without a closure: the items (≈ 110 bytes each) are not copied into its captures.
        let (outbox, flush) = {
            let peers = self.shared.peers.read().unwrap_or_else(|e| e.into_inner());
            let slot = peers.get(to).ok_or(SendError::Unavailable)?;
            if !slot.budget.try_reserve_n(n, bytes) {
                return Ok(Admit::Wait(items, slot.clone()));
            }
            let flush = slot.outbox.push(items);
            ((flush || keep).then(|| slot.outbox.clone()), flush)
        };
        let Some(outbox) = outbox else {
            return Ok(Admit::Queued(None));
        };
        let kept = keep.then(|| outbox.clone());
        if flush {
            self.flush_outbox(outbox, n, bytes)?;
        }
        Ok(Admit::Queued(kept))
    }

    /// Admission when the budget is exhausted: waits at most `timeout` for room.
    async fn enqueue_waiting<I: Enqueue>(
        &self,
        slot: PeerSlot,
        n: u64,
        bytes: u64,
        timeout: Duration,
        items: I,
        keep: bool,
    ) -> Result<Option<Arc<Outbox>>, SendError> {
        slot.budget
            .reserve_n(n, bytes, timeout)
            .await
            .map_err(|e| SendError::DeadlineExceeded(e.waited))?;
        let kept = keep.then(|| slot.outbox.clone());
        if slot.outbox.push(items) {
            self.flush_outbox(slot.outbox, n, bytes)?;
        }
        Ok(kept)
    }

    /// Tells the I/O thread that `outbox` has records (it was empty before this send).
    fn flush_outbox(&self, outbox: Arc<Outbox>, n: u64, bytes: u64) -> Result<(), SendError> {
        let budget = outbox.budget.clone();
        self.shared
            .submit(Command::Flush(outbox))
            .inspect_err(|_| budget.release_n(n, bytes))
    }

    /// Sends a one-way application record (any spec record or 147/160 without correlation)
    /// to a peer on the relay connection. Waits at most the send timeout for admission
    /// (SB-6.5); a send that failed admission is never delivered.
    pub async fn send_record(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
    ) -> Result<(), SendError> {
        if !codec::is_app_record(&record) || record.is_reply() {
            return Err(SendError::Encode(format!(
                "{} is not an application record",
                record.command()
            )));
        }
        match self.try_send_record(to, record, payload) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(p)) => self.send_pending(to, p).await,
            Err(TrySendError::Failed(e)) => Err(e),
        }
    }

    /// [`MeshNode::send_record`] without waiting: the record is admitted now or handed back
    /// encoded ([`TrySendError::Full`]) to be waited for with [`MeshNode::send_pending`] (so
    /// the common case costs no future). Order: a record handed back is not queued; records
    /// admitted after it may overtake it unless the caller waits for it first.
    ///
    /// # Errors
    /// As [`MeshNode::send_record`], and [`TrySendError::Full`].
    pub fn try_send_record(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
    ) -> Result<(), TrySendError> {
        if !codec::is_app_record(&record) || record.is_reply() {
            return Err(TrySendError::Failed(SendError::Encode(format!(
                "{} is not an application record",
                record.command()
            ))));
        }
        let frames = codec::encode(&record, 0, payload)
            .map_err(|e| TrySendError::Failed(SendError::Encode(e.to_string())))?;
        self.try_send_parts(to, frames)
    }

    /// [`MeshNode::try_send_record`] for a record encoded already (a binding's one-way 24
    /// from its [`zlink_wire::ActorSendTemplate`], whose envelope repeats): the same rule on
    /// its header — an application record, not a reply, no correlation — and the same size
    /// check and admission.
    ///
    /// # Errors
    /// As [`MeshNode::try_send_record`].
    pub fn try_send_frames(
        &self,
        to: &NodeRid,
        frames: zlink_wire::Frames,
    ) -> Result<(), TrySendError> {
        // Frames are made only by `zlink_wire` (`encode`, a template), which knows the header
        // it wrote: no need to read it back.
        let header = frames.header();
        if !codec::is_app_command(header.command)
            || header.is_reply()
            || header.correlation.is_some()
        {
            return Err(TrySendError::Failed(SendError::Encode(format!(
                "{} is not a one-way application record",
                header.command
            ))));
        }
        let (envelope, payload) = frames.into_parts();
        self.try_send_parts(to, Parts::new(envelope, payload))
    }

    /// [`MeshNode::try_send_frames`] for a binding's one-way 24 not yet written
    /// ([`zlink_wire::ActorSendTemplate::record`]): the same size check and admission, and the
    /// record written by this thread straight into the peer's outbox as a batch sub-record (no
    /// envelope allocated for it) when it travels in a batch frame. A record handed back
    /// ([`TrySendError::Full`]) is encoded.
    ///
    /// # Errors
    /// As [`MeshNode::try_send_record`].
    pub fn try_send_template(
        &self,
        to: &NodeRid,
        record: zlink_wire::TemplateRecord<'_>,
    ) -> Result<(), TrySendError> {
        // A template's records are one-way 24s with a payload, no correlation (its header).
        debug_assert!(codec::is_app_command(record.header().command));
        let (envelope, payload) = (record.envelope_len(), record.payload().len());
        let bytes = self
            .shared
            .check_lens(envelope, Some(payload))
            .map_err(TrySendError::Failed)?;
        match self.try_enqueue(to, 1, bytes, SendTemplate { record, bytes }, false) {
            Ok(Admit::Queued(_)) => Ok(()),
            Ok(Admit::Wait(SendTemplate { record, bytes }, _)) => {
                let (envelope, payload) = record.into_frames().into_parts();
                Err(TrySendError::Full(PendingRecord {
                    frames: Parts::new(envelope, payload),
                    bytes,
                }))
            }
            Err(e) => Err(TrySendError::Failed(e)),
        }
    }

    /// Admits one encoded one-way record now, or hands it back.
    fn try_send_parts(&self, to: &NodeRid, frames: Parts) -> Result<(), TrySendError> {
        let bytes = self
            .shared
            .check_size(&frames)
            .map_err(TrySendError::Failed)?;
        match self.try_enqueue(to, 1, bytes, SendOne { frames, bytes }, false) {
            Ok(Admit::Queued(_)) => Ok(()),
            Ok(Admit::Wait(SendOne { frames, bytes }, _)) => {
                Err(TrySendError::Full(PendingRecord { frames, bytes }))
            }
            Err(e) => Err(TrySendError::Failed(e)),
        }
    }

    /// Waits (at most the send timeout) for the admission of a record
    /// [`MeshNode::try_send_record`] handed back.
    ///
    /// # Errors
    /// As [`MeshNode::send_record`].
    pub async fn send_pending(&self, to: &NodeRid, p: PendingRecord) -> Result<(), SendError> {
        let PendingRecord { frames, bytes } = p;
        match self.try_enqueue(to, 1, bytes, SendOne { frames, bytes }, false)? {
            Admit::Queued(_) => Ok(()),
            Admit::Wait(items, slot) => self
                .enqueue_waiting(slot, 1, bytes, self.shared.send_timeout, items, false)
                .await
                .map(drop),
        }
    }

    /// Sends several one-way 147 records to one peer with one admission (all or nothing,
    /// within the send timeout) and one hand-off to the I/O thread. Order is kept. A batch
    /// larger than the peer's budget can never be admitted: `SendError::TooLarge`.
    pub async fn send_batch(
        &self,
        to: &NodeRid,
        key: DispatchKey,
        payloads: impl IntoIterator<Item = Bytes>,
    ) -> Result<(), SendError> {
        let mut items = Vec::new();
        let mut total = 0u64;
        for p in payloads {
            let frames = one_way_parts(key, p)?;
            let bytes = self.shared.check_size(&frames)?;
            total += bytes;
            items.push(OutItem::Send { frames, bytes });
        }
        if items.is_empty() {
            return Ok(());
        }
        let n = items.len() as u64;
        let limit = self
            .shared
            .with_peer(to, |slot| slot.budget.limit())
            .ok_or(SendError::Unavailable)?;
        if n > limit.messages || (n > 1 && total > limit.bytes) {
            return Err(SendError::TooLarge {
                size: items.len(),
                max: limit.messages as usize,
            });
        }
        self.enqueue(to, n, total, self.shared.send_timeout, items, false)
            .await
            .map(drop)
    }

    /// Sends a one-way 147 record with `key` and `payload`.
    pub async fn send(
        &self,
        to: &NodeRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), SendError> {
        match self.admit_frames(to, one_way_parts(key, payload)?)? {
            None => Ok(()),
            Some(wait) => wait.await,
        }
    }

    /// Admits encoded one-way frames against the peer's outbound budget and hands them to the
    /// I/O thread. Admitted synchronously when the budget has room (`None`: no future holds the
    /// record, no async layer per send); otherwise the returned future waits at most the send
    /// timeout. The reservation is released if the hand-off fails, so a send that failed
    /// admission is never delivered later.
    fn admit_frames(
        &self,
        to: &NodeRid,
        frames: Parts,
    ) -> Result<Option<AdmitWait<'_>>, SendError> {
        let bytes = self.shared.check_size(&frames)?;
        match self.try_enqueue(to, 1, bytes, SendOne { frames, bytes }, false)? {
            Admit::Queued(_) => Ok(None),
            Admit::Wait(items, slot) => Ok(Some(Box::pin(async move {
                self.enqueue_waiting(slot, 1, bytes, self.shared.send_timeout, items, false)
                    .await
                    .map(drop)
            }))),
        }
    }

    /// Sends a request record (any record whose command takes a correlation: 38, 42, 144,
    /// 160, 24) on the relay connection; the terminal comes back on the completion
    /// connection. Exactly one terminal; never resent (SB-12).
    pub async fn request_record(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
        timeout: Duration,
    ) -> Result<Response, RequestError> {
        self.request_record_admitted(to, record, payload, timeout, || {})
            .await
    }

    /// [`MeshNode::request_record`] that calls `admitted` once the record is in the peer's
    /// send queue (past admission, so any record sent to that peer after this call leaves
    /// after it), before it waits for the terminal; not called when admission fails.
    pub async fn request_record_admitted(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
        timeout: Duration,
        admitted: impl FnOnce(),
    ) -> Result<Response, RequestError> {
        if !codec::is_app_record(&record) || record.is_reply() {
            return Err(SendError::Encode(format!(
                "{} is not an application record",
                record.command()
            ))
            .into());
        }
        let deadline = Instant::now() + timeout;
        let corr = self.shared.next_corr.fetch_add(1, Ordering::Relaxed);
        let frames =
            codec::encode(&record, corr, payload).map_err(|e| SendError::Encode(e.to_string()))?;
        let bytes = self.shared.check_size(&frames)?;
        let (tx, rx) = oneshot::channel();
        let item = OutItem::Request {
            corr,
            deadline,
            frames,
            bytes,
            waiter: tx,
        };
        let outbox = self
            .enqueue(
                to,
                1,
                bytes,
                self.shared.send_timeout.min(timeout),
                [item],
                true,
            )
            .await?;
        // `keep` asked for the outbox: always there.
        let Some(outbox) = outbox else {
            return Err(RequestError::Closed);
        };
        admitted();
        let mut guard = CancelGuard {
            shared: &self.shared,
            outbox,
            corr,
            armed: true,
        };
        let r = rx.await;
        guard.armed = false;
        r.unwrap_or(Err(RequestError::Closed))
    }

    /// Sends a 144 request with `key` and `payload`; its deadline field is `timeout`.
    pub async fn request(
        &self,
        to: &NodeRid,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Response, RequestError> {
        let record = Record::Request(zlink_wire::Request {
            key,
            deadline: Deadline::from_remaining(timeout),
        });
        self.request_record(to, record, Some(payload), timeout)
            .await
    }

    /// Pushes a 148 record to a ClientServer client (server push), with admission.
    pub async fn push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), SendError> {
        let frames = push_parts(key, payload)?;
        let bytes = self.shared.check_size(&frames)?;
        let budget = self
            .shared
            .client_budget(session.get())
            .ok_or(SendError::Unavailable)?;
        budget
            .reserve(bytes, self.shared.send_timeout)
            .await
            .map_err(|e| SendError::DeadlineExceeded(e.waited))?;
        self.shared
            .submit(Command::Send {
                dest: Dest::Client {
                    session: session.get(),
                },
                frames,
                bytes,
            })
            .inspect_err(|_| budget.release(bytes))
    }

    /// [`MeshNode::push`] without waiting: pushes only if the client's outbound budget has
    /// room now, else hands the payload back ([`TryPushError::Full`]) to be retried or waited
    /// for with [`MeshNode::push`].
    ///
    /// # Errors
    /// [`TryPushError::Full`] without room; [`TryPushError::Failed`] as [`MeshNode::push`]
    /// fails (no such session, too large, closed).
    pub fn try_push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), TryPushError> {
        let frames = push_parts(key, payload.clone()).map_err(TryPushError::Failed)?;
        let bytes = self
            .shared
            .check_size(&frames)
            .map_err(TryPushError::Failed)?;
        let budget = self
            .shared
            .client_budget(session.get())
            .ok_or(TryPushError::Failed(SendError::Unavailable))?;
        if !budget.try_reserve(bytes) {
            return Err(TryPushError::Full(payload));
        }
        self.shared
            .submit(Command::Send {
                dest: Dest::Client {
                    session: session.get(),
                },
                frames,
                bytes,
            })
            .inspect_err(|_| budget.release(bytes))
            .map_err(TryPushError::Failed)
    }

    /// **For tests only.** Holds this node's I/O thread until the returned guard is dropped
    /// (also on panic; at most 60 s): every command submitted after this call — sends,
    /// replies (`ReplyHandle::reply` never blocks, the command channel is unbounded), flushes
    /// — is handled only after the release, in one pass, so a test can make the I/O thread
    /// find several of them queued together (e.g. to see them batched). Sockets are neither
    /// read nor written while held; keep the hold short (peers time out after
    /// `peer_timeout`). Returns once the thread is held (what it received before was handled
    /// first); blocks the caller for that long (at most 20 s).
    #[doc(hidden)]
    pub fn hold_io_for_tests(&self) -> IoHold {
        let (release, held_rx) = crossbeam_channel::bounded(0);
        let (held, is_held) = crossbeam_channel::bounded(1);
        let _ = self.shared.submit(Command::Hold {
            release: held_rx,
            held,
        });
        let _ = is_held.recv_timeout(std::time::Duration::from_secs(20));
        IoHold { _release: release }
    }

    /// **For tests only.** Stops the I/O thread like a crashed process and waits for it: no
    /// peer or client is told (no Disconnect, nothing queued is flushed), so they see the
    /// connection drop, as after `kill -9`.
    #[doc(hidden)]
    pub async fn abort_for_tests(mut self) {
        let _ = self.shared.bell.submit(Command::Abort);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }

    /// Stops the I/O thread and waits for it. Peers get a Disconnect; clients get what is
    /// queued for them (best effort, without waiting) and a Disconnect { `Shutdown` }, and each
    /// live session reports `ClientEvent::Disconnected { cause: Shutdown }`.
    pub async fn shutdown(mut self) {
        let _ = self.shared.bell.submit(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

/// Guard of [`MeshNode::hold_io_for_tests`] (tests only): dropping it releases the I/O thread.
#[doc(hidden)]
#[derive(Debug)]
#[must_use = "the I/O thread is released when the hold is dropped"]
pub struct IoHold {
    _release: crossbeam_channel::Sender<()>,
}

impl Drop for MeshNode {
    fn drop(&mut self) {
        let _ = self.shared.bell.submit(Command::Shutdown);
    }
}

/// Cancels a request whose future is dropped before its terminal. The cancel travels through
/// the request's outbox, behind the request itself, so it can never overtake a request that
/// is still waiting there (a cancelled request is never sent, SB-12).
struct CancelGuard<'a> {
    shared: &'a Shared,
    outbox: Arc<Outbox>,
    corr: u64,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed && self.outbox.push([OutItem::Cancel { corr: self.corr }]) {
            let _ = self.shared.submit(Command::Flush(self.outbox.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Batching;

    // Each close cause maps to the reason its Disconnect carries; the client's own Disconnect
    // is not answered.
    #[test]
    fn close_causes_map_to_disconnect_reasons() {
        use zlink_wire::DisconnectReason as R;
        assert_eq!(ClientCloseCause::Remote.disconnect_reason(), None);
        assert_eq!(
            ClientCloseCause::Timeout.disconnect_reason(),
            Some(R::Timeout)
        );
        assert_eq!(
            ClientCloseCause::Shutdown.disconnect_reason(),
            Some(R::Shutdown)
        );
        for &r in R::ALL {
            assert_eq!(ClientCloseCause::Closed(r).disconnect_reason(), Some(r));
        }
        assert!(
            crate::DropReason::ALL.contains(&crate::DropReason::SessionClosed)
                && crate::DropReason::SessionClosed.as_str() == "session_closed"
        );
    }

    // The outbox frames small one-way records into runs cut as batch runs are (max_records),
    // in admission order with everything else (a run never spans another item); large ones
    // stay records of their own; the frames are the encoder's; a run's buffer starts at the
    // last run's frame size, so a burst's size is kept for one run at most (bounded memory).
    #[test]
    fn the_outbox_frames_small_records_into_runs_in_order() {
        let batching = Batching {
            max_records: 4,
            max_record_payload: 100,
            ..Batching::default()
        };
        let outbox = Outbox::new(
            Arc::new(NodeRid::new("peer").unwrap()),
            NodeGeneration::new(1),
            Arc::new(Budget::new(crate::budget::OutboundBudget::default())),
            batching,
        );
        let record = |i: u8, len: usize| {
            let frames = one_way_parts(DispatchKey::new(7), Bytes::from(vec![i; len])).unwrap();
            let bytes = frames.iter().map(|f| f.len() as u64).sum();
            SendOne { frames, bytes }
        };
        assert!(outbox.push(record(0, 10)), "the first push rings");
        for i in 1..10 {
            assert!(!outbox.push(record(i, 10)));
        }
        assert!(!outbox.push([OutItem::Cancel { corr: 3 }]));
        assert!(!outbox.push(record(10, 10)));
        assert!(!outbox.push(record(11, 101)));
        let mut taken = Vec::new();
        outbox.take_into(&mut taken);
        let shape: Vec<String> = taken
            .iter()
            .map(|item| match item {
                OutItem::Framed(run) => format!("run {}", run.records()),
                OutItem::Send { .. } => "send".into(),
                OutItem::Cancel { .. } => "cancel".into(),
                OutItem::Request { .. } => "request".into(),
            })
            .collect();
        assert_eq!(
            shape,
            ["run 4", "run 4", "run 2", "cancel", "run 1", "send"],
            "cut at max_records, never across another item"
        );
        // The first run is the frame the encoder writes for its records.
        let OutItem::Framed(first) = &mut taken[0] else {
            panic!("a run first");
        };
        let parts: Vec<Parts> = (0..4).map(|i| record(i, 10).frames).collect();
        let expected =
            zlink_wire::encode_batch(parts.iter().map(|p| (&p[0][..], Some(&p[1][..])))).unwrap();
        let full = first.frame_len();
        assert_eq!(first.take_frame(), expected.to_vec());
        // Bounded memory: a run after the burst starts at the burst's frame size, one after a
        // small run at the small run's.
        taken.clear();
        assert!(outbox.push(record(0, 10)));
        outbox.take_into(&mut taken);
        let Some(OutItem::Framed(lone)) = taken.last() else {
            panic!("a run");
        };
        let lone_len = lone.frame_len();
        assert!(lone.capacity() < 2 * full, "{}", lone.capacity());
        taken.clear();
        assert!(outbox.push(record(1, 10)));
        outbox.take_into(&mut taken);
        let Some(OutItem::Framed(next)) = taken.last() else {
            panic!("a run");
        };
        assert_eq!(
            next.capacity(),
            lone_len,
            "sized by the last run, not the burst"
        );
    }

    // The cached one-way envelope is byte-identical to a fresh encode, for any key sequence.
    #[test]
    fn one_way_parts_match_the_codec() {
        for key in [7u32, 7, 9, 7, 9, 9] {
            let payload = Bytes::from_static(b"payload");
            let cached = one_way_parts(DispatchKey::new(key), payload.clone()).unwrap();
            let fresh = codec::encode(
                &Record::OneWay(zlink_wire::OneWay {
                    key: DispatchKey::new(key),
                }),
                0,
                Some(payload),
            )
            .unwrap();
            assert_eq!(&cached[..], &fresh[..]);
        }
    }

    // Keys that share a slot each get their own envelope (the slot's owner lock-free, the
    // others behind the lock), byte-identical to a fresh encode.
    #[test]
    fn colliding_keys_keep_their_own_envelopes() {
        let first = 1_000_000u32;
        let slot =
            |k: u32| envelope_slot(static_key(zlink_wire::Command::OneWay, DispatchKey::new(k)));
        let other = (first + 1..)
            .find(|&k| std::ptr::eq(slot(k), slot(first)))
            .expect("a colliding key");
        for key in [first, other, first, other] {
            let payload = Bytes::from_static(b"p");
            let cached = one_way_parts(DispatchKey::new(key), payload.clone()).unwrap();
            let fresh = codec::encode(
                &Record::OneWay(zlink_wire::OneWay {
                    key: DispatchKey::new(key),
                }),
                0,
                Some(payload),
            )
            .unwrap();
            assert_eq!(&cached[..], &fresh[..], "key {key}");
        }
    }

    // The kept push envelope is byte-identical to a fresh encode, for any key sequence, and
    // never confused with the one-way envelope of the same key.
    #[test]
    fn push_parts_match_the_codec() {
        for key in [7u32, 7, 9, 7, 9, 9] {
            let payload = Bytes::from_static(b"payload");
            let _ = one_way_parts(DispatchKey::new(key), payload.clone()).unwrap();
            let cached = push_parts(DispatchKey::new(key), payload.clone()).unwrap();
            let fresh = codec::encode(
                &Record::Push(zlink_wire::Push {
                    key: DispatchKey::new(key),
                }),
                0,
                Some(payload),
            )
            .unwrap();
            assert_eq!(&cached[..], &fresh[..]);
        }
    }
}
