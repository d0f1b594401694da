//! The node-facing API: [`MeshNode`] (start, connect, send, request), the inbound stream
//! ([`Inbound`] with its [`ReplyHandle`]) and peer events.
//!
//! Call order for a node binary: [`MeshNode::start`] → keep the returned
//! [`InboundReceiver`] and read it in a task → [`MeshNode::connect`] to peers →
//! [`MeshNode::wait_peer_up`] (or [`MeshNode::subscribe`]) → `send`/`request`/`push` →
//! [`MeshNode::shutdown`].

use crate::hashing::FastMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{broadcast, oneshot};

use crate::bridge::Bell;
use crate::budget::Budget;
use crate::codec::{self, ErrorKind, Parts, Record};
use crate::config::{Batching, MeshConfig, PeerAddress};
use crate::conn::Framed;
use crate::counters::{Counters, ReplyOrigin};
use crate::engine::{Command, Dest, Engine};
use crate::error::{ConfigError, RequestError, SendError};
use crate::handshake::{LocalIdentity, MeshSecret};
use crate::types::{
    CorrelationId, Deadline, DispatchKey, NodeGeneration, NodeRid, SessionRid, fresh_generation,
};

/// Where an inbound record came from (authenticated at the transport boundary, SB-2.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An authenticated mesh peer in its current lifecycle.
    Peer {
        /// Proved NodeRid.
        node: NodeRid,
        /// Proved NodeGeneration.
        generation: NodeGeneration,
    },
    /// A ClientServer client connection.
    Client {
        /// The connection's session id.
        session: SessionRid,
    },
}

/// One application record for the layer above. Control records never appear here (SB-5.4).
#[derive(Debug)]
pub struct Inbound {
    /// Sender.
    pub origin: Origin,
    /// Correlation id (`NONE` for one-way).
    pub correlation: CorrelationId,
    /// The decoded record.
    pub record: Record,
    /// The payload frame, never copied after receipt.
    pub payload: Option<Bytes>,
    /// Local deadline of a request (receipt time + the remaining time it carried).
    pub deadline: Option<Instant>,
    /// Present for requests: answer exactly once through it.
    pub reply: Option<ReplyHandle>,
}

impl Inbound {
    /// A plain one-way 147 record (no correlation, deadline or reply handle) from `origin`.
    #[must_use]
    #[inline]
    pub fn one_way(origin: Origin, key: DispatchKey, payload: Bytes) -> Self {
        Inbound {
            origin,
            correlation: CorrelationId::NONE,
            record: Record::OneWay(zlink_wire::OneWay { key }),
            payload: Some(payload),
            deadline: None,
            reply: None,
        }
    }
}

pub use crate::inbound::InboundReceiver;

/// Why [`MeshNode::try_push`] did not push.
#[derive(Debug)]
#[non_exhaustive]
pub enum TryPushError {
    /// The client's outbound budget has no room now: the payload, back.
    Full(Bytes),
    /// The push cannot be sent (as [`MeshNode::push`] fails).
    Failed(SendError),
}

/// A one-way record that [`MeshNode::try_send_record`] encoded but could not admit at once
/// (the peer's outbound budget is full): wait for admission with [`MeshNode::send_pending`].
#[derive(Debug)]
pub struct PendingRecord {
    frames: Parts,
    bytes: u64,
}

/// Why [`MeshNode::try_send_record`] did not send.
#[derive(Debug)]
#[non_exhaustive]
pub enum TrySendError {
    /// The peer's outbound budget has no room now: the encoded record, back.
    Full(PendingRecord),
    /// The record cannot be sent (as [`MeshNode::send_record`] fails).
    Failed(SendError),
}

/// Why a peer lifecycle ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DownReason {
    /// No traffic within the peer timeout.
    Timeout,
    /// Our outbound connection was closed by libzmq (heartbeat, peer exit …).
    Disconnected,
    /// The peer announced a Disconnect (graceful shutdown).
    Remote,
    /// The peer re-ran the handshake (reconnect of the same process).
    Reconnected,
    /// The peer restarted: a new NodeGeneration began a new lifecycle.
    Restarted,
}

/// Peer and client lifecycle events (bounded broadcast; a slow subscriber loses old events
/// and never slows the I/O thread, EG-13).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerEvent {
    /// Both connections of the peer completed the handshake.
    Up {
        /// Peer.
        node: NodeRid,
        /// Its generation.
        generation: NodeGeneration,
    },
    /// The peer lifecycle ended; its in-flight requests ended with `PeerLost`.
    Down {
        /// Peer.
        node: NodeRid,
        /// The generation that ended.
        generation: NodeGeneration,
        /// Why.
        reason: DownReason,
    },
    /// A ClientServer client sent its first record.
    ClientConnected {
        /// Its session id.
        session: SessionRid,
    },
    /// A client said Disconnect or stayed silent past the peer timeout.
    ClientDisconnected {
        /// Its session id.
        session: SessionRid,
    },
}

/// Who ended a ClientServer session ([`ClientEvent::Disconnected`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientCloseCause {
    /// The client ended it: it said Disconnect (149) itself, or its connection closed.
    Remote,
    /// The client was silent for longer than the peer timeout; it was sent
    /// Disconnect { `Timeout` }.
    Timeout,
    /// [`MeshNode::close_client`] closed it; the client was sent Disconnect with this reason.
    Closed(zlink_wire::DisconnectReason),
    /// The node shut down; the client was sent Disconnect { `Shutdown` }.
    Shutdown,
}

impl ClientCloseCause {
    /// The reason a 149 Disconnect to the client carries for this cause (`None` for
    /// `Remote`: the client ended it and is not told).
    pub fn disconnect_reason(self) -> Option<zlink_wire::DisconnectReason> {
        use zlink_wire::DisconnectReason as R;
        match self {
            ClientCloseCause::Remote => None,
            ClientCloseCause::Timeout => Some(R::Timeout),
            ClientCloseCause::Closed(r) => Some(r),
            ClientCloseCause::Shutdown => Some(R::Shutdown),
        }
    }
}

/// The lifecycle of one ClientServer session, delivered losslessly on [`ClientEvents`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// A session began (the connection's first record). Sent before any record of the
    /// session is handed to the [`InboundReceiver`].
    Connected {
        /// The session.
        session: SessionRid,
    },
    /// A session ended. Sent after the last record of the session was handed to the
    /// [`InboundReceiver`] (records held while the application queue was full go up first).
    Disconnected {
        /// The session.
        session: SessionRid,
        /// Who ended it.
        cause: ClientCloseCause,
    },
}

/// The lossless stream of [`ClientEvent`]s ([`MeshNode::take_client_events`]).
///
/// Unbounded, which is bounded in practice by the session count: each session produces at
/// most two events (Connected, Disconnected) and live sessions are bounded by
/// `MeshConfig::max_clients`, so the backlog is at most two events per session that began
/// since the reader last read. Ends (`None`) after the node shut down and every event was
/// read. Dropping it stops the events (they are not kept for anyone).
#[derive(Debug)]
pub struct ClientEvents {
    rx: tokio::sync::mpsc::UnboundedReceiver<ClientEvent>,
}

impl ClientEvents {
    /// The next event, in the order the I/O thread produced them; `None` once the node has
    /// shut down and everything was read.
    pub async fn recv(&mut self) -> Option<ClientEvent> {
        self.rx.recv().await
    }

    /// The next event if one is ready.
    ///
    /// # Errors
    /// `Empty` if none is ready, `Disconnected` once the node has shut down and everything
    /// was read.
    pub fn try_recv(&mut self) -> Result<ClientEvent, tokio::sync::mpsc::error::TryRecvError> {
        self.rx.try_recv()
    }
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The reply record.
    pub record: Record,
    /// Its payload.
    pub payload: Option<Bytes>,
}

#[derive(Clone, Debug)]
pub(crate) struct PeerSlot {
    pub generation: NodeGeneration,
    pub budget: Arc<Budget>,
    /// Relay data of this lifecycle on its way to the I/O thread.
    pub outbox: Arc<Outbox>,
}

/// Outcome of the synchronous admission attempt.
/// The rest of an admission that has to wait for budget (see `MeshNode::admit_frames`).
type AdmitWait<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'a>>;

enum Admit<I> {
    /// Admitted and appended (the outbox if it was asked for).
    Queued(Option<Arc<Outbox>>),
    /// The budget is full: the items back, and the slot to wait on.
    Wait(I, PeerSlot),
}

/// One admitted relay record on its way to the I/O thread.
pub(crate) enum OutItem {
    /// A one-way record (one that does not travel in a batch frame: its payload is large, or
    /// batching is off).
    Send { frames: Parts, bytes: u64 },
    /// One-way records framed as the sub-records of one 139 batch frame by the threads that
    /// sent them ([`Outbox::push`]).
    Framed(Box<Framed>),
    /// The cancellation of an earlier request of this outbox (its future was dropped).
    Cancel { corr: u64 },
    /// A request: registered in the correlation table when the I/O thread takes it.
    Request {
        corr: u64,
        deadline: Instant,
        frames: Parts,
        bytes: u64,
        waiter: crate::engine::Waiter,
    },
}

/// The relay records of one peer lifecycle, admitted and waiting for the I/O thread, in send
/// order. A sender appends under a short lock and submits [`Command::Flush`] only when the
/// outbox was empty, so a burst of sends costs one command and one doorbell check instead of
/// one per record; the I/O thread takes everything at once. One outbox carries one-way
/// records and requests alike, so the order of a peer's relay records is the order in which
/// their sends were admitted (EG-4).
///
/// Small one-way records are framed here, by the sending thread while their bytes are in its
/// cache: appended as sub-records to the run being filled at the end of the outbox (a
/// [`Framed`] 139 frame, cut where the batching rule cuts a run: `max_records`, `max_bytes`),
/// so the I/O thread sends each run as one message without copying its records. The memory
/// this holds is what the records reserved against the peer's budget (which still counts each
/// record's bytes) plus the framing (9 bytes a record, 16 a frame); a run's buffer is handed
/// to libzmq with the frame, never kept, and a new run's buffer is sized by the last run's
/// frame, so a burst's size is not kept either.
pub(crate) struct Outbox {
    pub node: Arc<NodeRid>,
    pub generation: NodeGeneration,
    /// The peer's outbound budget (the same as its slot's).
    pub budget: Arc<Budget>,
    /// How runs are cut (the node's [`Batching`]).
    batching: Batching,
    pending: Mutex<Pending>,
}

/// What an [`Outbox`] holds.
pub(crate) struct Pending {
    items: Vec<OutItem>,
    /// The capacity a new run's frame buffer starts with: the size of the last run's frame
    /// (closed full or taken), so a flood's frames are not regrown record by record and a
    /// trickle's are small again after one run.
    run_capacity: usize,
}

impl Pending {
    /// Appends one item: a small one-way record into the run being filled, anything else as
    /// it is.
    fn append(&mut self, item: OutItem, batching: &Batching) {
        match item {
            OutItem::Send { frames, bytes } if self.frame(&frames, bytes, batching) => {}
            item => self.items.push(item),
        }
    }

    /// Frames one one-way record of `bytes` into the run being filled at the end (a new one
    /// when the last item is not a run with room for it); `false` (nothing appended) for a
    /// record that does not travel in a batch frame (a large payload, batching off).
    #[inline]
    fn frame(&mut self, frames: &[Bytes], bytes: u64, batching: &Batching) -> bool {
        let payload = frames.get(1).map(|p| &p[..]);
        let envelope = &frames[0][..];
        debug_assert_eq!(
            (envelope.len() + payload.map_or(0, <[u8]>::len)) as u64,
            bytes,
            "a record's reservation is its bytes"
        );
        self.frame_with(
            envelope.len(),
            payload.map(<[u8]>::len),
            bytes,
            batching,
            |f| zlink_wire::batch::push_sub_record(f, envelope, payload),
        )
    }

    /// [`Pending::frame`] for a record of an `envelope` and a `payload` of these lengths
    /// (`bytes` in all) that `write` appends as a sub-record.
    #[inline]
    fn frame_with(
        &mut self,
        envelope: usize,
        payload: Option<usize>,
        bytes: u64,
        batching: &Batching,
        write: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> bool {
        if !Framed::batchable(batching, payload.unwrap_or(0)) {
            return false;
        }
        let sub = zlink_wire::batch::sub_record_len(envelope, payload);
        let fresh = match self.items.last() {
            Some(OutItem::Framed(run)) if run.has_room(batching, sub) => false,
            Some(OutItem::Framed(full)) => {
                self.run_capacity = full.frame_len();
                true
            }
            _ => true,
        };
        if fresh {
            let capacity = self
                .run_capacity
                .max(zlink_wire::batch::BATCH_PREFIX_LEN + sub);
            self.items
                .push(OutItem::Framed(Box::new(Framed::new(capacity))));
        }
        if let Some(OutItem::Framed(run)) = self.items.last_mut()
            && run.push_with(bytes, write)
        {
            return true;
        }
        // Never for the records the mesh sends (an envelope that is a batch, a part longer
        // than `u32::MAX`): sent as it is.
        if fresh {
            self.items.pop();
        }
        false
    }
}

/// What one admission appends to an [`Outbox`] ([`Outbox::push`]).
pub(crate) trait Enqueue {
    /// What is left to drop once the outbox's lock is released.
    type Spent;
    /// Appends in order.
    fn append_to(self, pending: &mut Pending, batching: &Batching) -> Self::Spent;
}

impl<I: IntoIterator<Item = OutItem>> Enqueue for I {
    type Spent = ();

    fn append_to(self, pending: &mut Pending, batching: &Batching) {
        for item in self {
            pending.append(item, batching);
        }
    }
}

/// One admitted one-way record ([`OutItem::Send`] without building the item, so its parts are
/// read in place and dropped after the lock when they were framed).
pub(crate) struct SendOne {
    frames: Parts,
    bytes: u64,
}

/// One admitted one-way 24 of a binding's template ([`MeshNode::try_send_template`]): framed
/// straight from the template, its envelope never written anywhere else (when it does not
/// travel in a batch frame: encoded as its frames then).
pub(crate) struct SendTemplate<'a> {
    record: zlink_wire::TemplateRecord<'a>,
    bytes: u64,
}

impl Enqueue for SendTemplate<'_> {
    type Spent = Option<Bytes>;

    #[inline]
    fn append_to(self, pending: &mut Pending, batching: &Batching) -> Option<Bytes> {
        let SendTemplate { record, bytes } = self;
        let (envelope, payload) = (record.envelope_len(), record.payload().len());
        if pending.frame_with(envelope, Some(payload), bytes, batching, |f| {
            record.push_sub_record(f)
        }) {
            // The payload is dropped after the lock.
            return Some(record.into_payload());
        }
        let (envelope, payload) = record.into_frames().into_parts();
        pending.items.push(OutItem::Send {
            frames: Parts::new(envelope, payload),
            bytes,
        });
        None
    }
}

impl Enqueue for SendOne {
    type Spent = Option<Parts>;

    #[inline]
    fn append_to(self, pending: &mut Pending, batching: &Batching) -> Option<Parts> {
        let SendOne { frames, bytes } = self;
        if pending.frame(&frames, bytes, batching) {
            return Some(frames);
        }
        pending.items.push(OutItem::Send { frames, bytes });
        None
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("node", &self.node)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Outbox {
    pub(crate) fn new(
        node: Arc<NodeRid>,
        generation: NodeGeneration,
        budget: Arc<Budget>,
        batching: Batching,
    ) -> Self {
        Self {
            node,
            generation,
            budget,
            batching,
            pending: Mutex::new(Pending {
                items: Vec::new(),
                run_capacity: 0,
            }),
        }
    }

    /// Appends `items` in order (small one-way records framed, [`Outbox`]); true if the
    /// outbox was empty (the caller submits a Flush).
    #[inline]
    pub(crate) fn push(&self, items: impl Enqueue) -> bool {
        let mut g = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = g.items.is_empty();
        let spent = items.append_to(&mut g, &self.batching);
        drop(g);
        drop(spent);
        was_empty
    }

    /// Takes everything (I/O thread): swaps with `into`, which must be empty, so both
    /// vectors keep their capacity. The run being filled is taken too (later records start
    /// a new one).
    pub(crate) fn take_into(&self, into: &mut Vec<OutItem>) {
        let mut g = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(OutItem::Framed(run)) = g.items.last() {
            g.run_capacity = run.frame_len();
        }
        std::mem::swap(&mut g.items, into);
    }
}

#[derive(Clone, Debug)]
pub(crate) enum ReplyTarget {
    Peer {
        node: Arc<NodeRid>,
        generation: NodeGeneration,
    },
    Client {
        session: u64,
    },
}

/// Credit the layer above returned ([`MeshNode::release_credits`]): `records` records of
/// `bytes` bytes in total from `origin`.
pub(crate) struct Released {
    pub origin: Origin,
    pub records: u32,
    pub bytes: u64,
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

    fn submit(&self, cmd: Command) -> Result<(), SendError> {
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

/// Answers one inbound request exactly once. Dropping it unanswered sends an `Internal`
/// error reply (EG-15), so the requester always gets a terminal.
#[derive(Debug)]
pub struct ReplyHandle {
    shared: Option<Arc<Shared>>,
    target: ReplyTarget,
    corr: u64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl ReplyHandle {
    pub(crate) fn new(shared: Arc<Shared>, target: ReplyTarget, corr: u64) -> Self {
        Self {
            shared: Some(shared),
            target,
            corr,
        }
    }

    /// The request's correlation id.
    pub fn correlation(&self) -> u64 {
        self.corr
    }

    /// Whether the answer can still reach the requester: `false` once a client session ended
    /// or began closing (a reply to it is dropped, `ReplyUndeliverable`), so work for it can be
    /// skipped. A peer's request: always `true` (its lifecycle is checked when the reply goes).
    pub fn is_live(&self) -> bool {
        match (&self.target, &self.shared) {
            (ReplyTarget::Client { session }, Some(shared)) => {
                shared.client_budget(*session).is_some()
            }
            (ReplyTarget::Client { .. }, None) => false,
            (ReplyTarget::Peer { .. }, _) => true,
        }
    }

    /// Sends a successful reply (record 145) with `payload` (RouteMesh: on the completion
    /// connection).
    pub fn reply(mut self, payload: Bytes) {
        self.send(Record::Reply(zlink_wire::Reply), Some(payload));
    }

    /// Sends a terminal reply record (e.g. the 38 reply or 43) — it must be a reply record.
    ///
    /// # Errors
    /// [`SendError::Encode`] if `record` is not a reply or its payload rule is violated; the
    /// handle is given back so the caller can still answer.
    pub fn reply_record(
        mut self,
        record: Record,
        payload: Option<Bytes>,
    ) -> Result<(), Box<(Self, SendError)>> {
        if !record.is_reply() {
            return Err(Box::new((
                self,
                SendError::Encode("not a reply record".into()),
            )));
        }
        if let Err(e) = codec::encode(&record, self.corr, payload.clone()) {
            return Err(Box::new((self, SendError::Encode(e.to_string()))));
        }
        self.send(record, payload);
        Ok(())
    }

    /// Sends an error reply (146); `detail` is cut to 256 bytes.
    pub fn error(mut self, kind: ErrorKind, detail: impl Into<String>) {
        self.send(
            Record::ErrorReply(zlink_wire::ErrorReply::new(kind, detail)),
            None,
        );
    }

    fn send(&mut self, record: Record, payload: Option<Bytes>) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let to = match self.target {
            ReplyTarget::Peer { .. } => ReplyOrigin::Peer,
            ReplyTarget::Client { .. } => ReplyOrigin::Client,
        };
        let error = match &record {
            Record::ErrorReply(e) => Some(e.kind),
            _ => None,
        };
        shared.counters.reply(to, error);
        let Ok(frames) = codec::encode(&record, self.corr, payload) else {
            return;
        };
        let _ = shared.submit(Command::Reply {
            to: self.target.clone(),
            frames,
        });
    }
}

impl Drop for ReplyHandle {
    fn drop(&mut self) {
        if self.shared.is_some() {
            self.send(
                Record::ErrorReply(zlink_wire::ErrorReply::new(
                    ErrorKind::Internal,
                    "request dropped without reply",
                )),
                None,
            );
        }
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

/// Most distinct (command, dispatch key) pairs whose envelope is kept for the life of the
/// process.
const MAX_STATIC_ENVELOPES: usize = 4096;

/// One-way (147) and push (148) envelopes by (command, key), encoded once per process and
/// never freed (at most [`MAX_STATIC_ENVELOPES`] of ~14 bytes; keys come from local code, not
/// the network). Such an envelope depends only on its key, so every send with that key shares
/// one static buffer: nothing is allocated by the sender nor freed by the I/O thread, and no
/// reference count is touched per record.
static STATIC_ENVELOPES: Mutex<Option<FastMap<u64, &'static [u8]>>> = Mutex::new(None);

/// Slots of [`ENVELOPE_SLOTS`].
const ENVELOPE_SLOT_COUNT: usize = 1024;

/// Lock-free front of [`STATIC_ENVELOPES`]: a direct-mapped table, each slot set once to the
/// first kept envelope whose key hashes there and never changed. A send finds its envelope
/// with one acquire load and no lock, from any thread (no thread-local cache); a key whose slot
/// belongs to another key takes the lock instead.
static ENVELOPE_SLOTS: [OnceLock<(u64, &'static [u8])>; ENVELOPE_SLOT_COUNT] =
    [const { OnceLock::new() }; ENVELOPE_SLOT_COUNT];

fn static_key(command: zlink_wire::Command, key: DispatchKey) -> u64 {
    (u64::from(command.number()) << 32) | u64::from(key.get())
}

fn envelope_slot(key: u64) -> &'static OnceLock<(u64, &'static [u8])> {
    // Fibonacci hashing: the top bits of the product spread consecutive keys over the table.
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - ENVELOPE_SLOT_COUNT.trailing_zeros());
    &ENVELOPE_SLOTS[h as usize]
}

/// Keeps `envelope` as the envelope of `key` (or returns the one already kept); `None` once
/// [`MAX_STATIC_ENVELOPES`] are kept.
fn static_envelope(key: u64, envelope: &[u8]) -> Option<&'static [u8]> {
    let kept = {
        let mut g = STATIC_ENVELOPES.lock().unwrap_or_else(|e| e.into_inner());
        let map = g.get_or_insert_with(FastMap::default);
        match map.get(&key) {
            Some(e) => *e,
            None if map.len() >= MAX_STATIC_ENVELOPES => return None,
            None => {
                let kept: &'static [u8] = Box::leak(envelope.to_vec().into_boxed_slice());
                map.insert(key, kept);
                kept
            }
        }
    };
    // First key to reach the slot keeps it; another key's envelope stays behind the lock.
    let _ = envelope_slot(key).set((key, kept));
    Some(kept)
}

/// The kept envelope for `key`, if any: its slot without a lock, else one short lock; no
/// allocation.
fn kept_envelope(key: u64) -> Option<&'static [u8]> {
    match envelope_slot(key).get() {
        Some(&(k, e)) if k == key => Some(e),
        // An empty slot: nothing is kept for `key` (keeping sets the slot first time round).
        None => None,
        Some(_) => {
            let g = STATIC_ENVELOPES.lock().unwrap_or_else(|e| e.into_inner());
            g.as_ref().and_then(|m| m.get(&key).copied())
        }
    }
}

/// The parts of a record without correlation that depends on `key` only (one-way 147, push
/// 148): the kept envelope shared from [`STATIC_ENVELOPES`] after the first use of that key,
/// else a fresh encode of `record`, then kept.
fn keyed_parts(
    command: zlink_wire::Command,
    key: DispatchKey,
    record: impl FnOnce() -> Record,
    payload: Bytes,
) -> Result<Parts, SendError> {
    let skey = static_key(command, key);
    if let Some(envelope) = kept_envelope(skey) {
        return Ok(Parts::new(Bytes::from_static(envelope), Some(payload)));
    }
    let parts =
        codec::encode(&record(), 0, Some(payload)).map_err(|e| SendError::Encode(e.to_string()))?;
    static_envelope(skey, &parts[0]);
    Ok(parts)
}

/// The parts of a push 148 record with `key` and `payload`, byte-identical to
/// `codec::encode(&Record::Push(..), 0, Some(payload))`.
pub(crate) fn push_parts(key: DispatchKey, payload: Bytes) -> Result<Parts, SendError> {
    keyed_parts(
        zlink_wire::Command::Push,
        key,
        || Record::Push(zlink_wire::Push { key }),
        payload,
    )
}

/// The parts of a one-way 147 record with `key` and `payload`, byte-identical to
/// `codec::encode(&Record::OneWay(..), 0, Some(payload))`.
pub(crate) fn one_way_parts(key: DispatchKey, payload: Bytes) -> Result<Parts, SendError> {
    keyed_parts(
        zlink_wire::Command::OneWay,
        key,
        || Record::OneWay(zlink_wire::OneWay { key }),
        payload,
    )
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
