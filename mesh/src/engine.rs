//! The node's I/O thread: owns every libzmq socket of a node, validates ingress, runs the
//! handshakes, the correlation table, liveness and the PAUSED queues.
//!
//! Loop order (one iteration): drain commands (batch) → flush PAUSED queues and pending
//! handshake messages → hand stalled inbound records to the layer above → timers (handshake
//! timeouts, pings, peer timeouts, request deadlines) → `zmq::poll` (doorbell, sockets,
//! monitors) → read readable sockets in batches.
//!
//! Invariants:
//! - no call here blocks: every send is `DONTWAIT` (EAGAIN = PAUSED), every receive too;
//! - a record from a connection whose handshake has not completed, or from an older
//!   NodeGeneration, is dropped and counted, never passed up (SB-2.1);
//! - control records (handshake, Ping/Pong, Disconnect) are answered on the I/O thread and
//!   never enter the inbound application channel (SB-5.4); Ping/Pong travel on the completion
//!   connection, never behind relay data;
//! - replies travel only on the completion connection (RouteMesh) and complete the
//!   correlation table here, so they progress while the application is blocked or its
//!   inbound channel is full (EG-16.21, EG-16.25);
//! - every outbound message admitted against a budget is released exactly once (sent or
//!   discarded on peer loss).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::budget::Budget;
use zlink_wire::{Decoded, Disconnect, DisconnectReason, Limits, Ping};

use crate::codec::{self, Class, HandshakeMsg, HandshakeReject, Parts, Record};
use crate::config::{ClientAdmission, MeshConfig, PeerAddress};
use crate::conn::{Conn, Lane, Out, Verdict, batch_run, out_len, release};
use crate::correlation::{Correlations, ReplyOutcome};
use crate::counters::{Counters, DropReason, TransportEvent};
use crate::error::RequestError;
use crate::handshake::{Handshake, HandshakeFailure, LocalIdentity, Outcome};
use crate::hashing::{FastMap, SeededMap};
use crate::inbound::InboundSender;
use crate::node::{
    ClientCloseCause, ClientEvent, DownReason, Inbound, Origin, OutItem, Outbox, PeerEvent,
    PeerSlot, ReplyHandle, ReplyTarget, Response, Shared,
};
use crate::sink::Offer;
use crate::tap::{TapDirection, WireTap};
use crate::types::{LinkKind, NodeGeneration, NodeRid, SessionRid};

/// Bound on how many messages one socket is read per loop iteration.
const RECV_BATCH: usize = 512;
/// Housekeeping cadence (timers, handshake retries, monitor events) while busy.
const HOUSEKEEPING: Duration = Duration::from_millis(1);
/// Bound on commands drained per loop iteration.
const CMD_BATCH: usize = 1024;
/// Bound on replies waiting for a PAUSED completion connection, per peer.
const MAX_QUEUED_REPLIES: usize = 65_536;
/// More parts than this in one message is malformed (routing id + envelope + payload).
const MAX_PARTS: usize = 3;
/// Longest a test hold ([`Command::Hold`]) keeps the I/O thread, so a leaked guard can
/// never wedge a node (or a `shutdown` waiting for its thread) for good.
const HOLD_LIMIT: Duration = Duration::from_secs(60);

pub(crate) type Waiter = oneshot::Sender<Result<Response, RequestError>>;

/// Destination of an application send.
#[derive(Clone, Debug)]
pub(crate) enum Dest {
    Peer {
        node: Arc<NodeRid>,
        generation: NodeGeneration,
    },
    Client {
        session: u64,
    },
}

pub(crate) enum Command {
    Connect(PeerAddress),
    Send {
        dest: Dest,
        frames: Parts,
        bytes: u64,
    },
    /// A peer's outbox went from empty to non-empty: take everything in it, in order.
    Flush(Arc<Outbox>),
    Reply {
        to: ReplyTarget,
        frames: Parts,
    },
    /// [`crate::MeshNode::take_client_events`]: from now on session events go here.
    ClientEvents(tokio::sync::mpsc::UnboundedSender<ClientEvent>),
    /// [`crate::MeshNode::close_client`].
    CloseClient {
        session: u64,
        reason: DisconnectReason,
    },
    /// [`crate::MeshNode::accept_client`].
    AcceptClient {
        session: u64,
    },
    /// [`crate::MeshNode::set_sink`]: application records are offered to it from now on.
    SetSink(Box<dyn crate::sink::InboundSink>),
    /// [`crate::MeshNode::release_credit`]: records the sink held left their senders' windows
    /// (the list is in `Shared::released`).
    ReleaseCredit,
    /// Test hook ([`crate::MeshNode::hold_io_for_tests`]): the I/O thread blocks until the
    /// sender of this channel is dropped (at most [`HOLD_LIMIT`]). Commands submitted behind
    /// it are drained in the same pass once it is released.
    Hold(crossbeam_channel::Receiver<()>),
    Shutdown,
    /// Test hook ([`crate::MeshNode::abort_for_tests`]): stop like a crashed process, without
    /// telling peers or clients (no Disconnect, nothing queued flushed).
    Abort,
}

enum SendOutcome {
    Sent,
    Paused,
    Unreachable,
}

enum Link {
    Idle,
    Handshaking {
        hs: Box<Handshake>,
        out: VecDeque<Parts>,
    },
    Retry {
        at: Instant,
    },
    Up(NodeGeneration),
}

struct Peer {
    node: NodeRid,
    /// The routing id this peer's relay / completion connection has on our socket: its
    /// NodeRid on a connection we opened (the acceptor announces it), the routing id that
    /// proved itself in the handshake on a connection it opened (`accept.rs`).
    rids: [Vec<u8>; 2],
    /// The fresh random routing id our own relay / completion connection to it announced (we
    /// opened it), bound into the handshake transcript.
    own_rids: [Vec<u8>; 2],
    addr: Option<PeerAddress>,
    generation: Option<NodeGeneration>,
    relay: Link,
    completion: Link,
    up: bool,
    replies: VecDeque<Parts>,
    next_ping: Instant,
    ping_seq: u64,
    /// Flow of relay data both ways (the peer's receive window; our send credit, queue and
    /// budget) and liveness: the sans-IO core ([`crate::conn`]).
    conn: Conn,
}

/// Index of a mesh link kind in a peer's per-link arrays.
fn link_index(kind: LinkKind) -> usize {
    usize::from(kind != LinkKind::Relay)
}

/// A fresh random routing id for an outgoing mesh connection (printable, 32 hex digits).
fn fresh_rid() -> Vec<u8> {
    format!("{:032x}", rand::random::<u128>()).into_bytes()
}

impl Peer {
    fn rid(&self, kind: LinkKind) -> &[u8] {
        &self.rids[link_index(kind)]
    }

    fn link_mut(&mut self, kind: LinkKind) -> &mut Link {
        if kind == LinkKind::Relay {
            &mut self.relay
        } else {
            &mut self.completion
        }
    }
}

struct Client {
    rid: Vec<u8>,
    /// Receive window (like a peer's; `client_window`, or the strangers' window until
    /// accepted), the queue of pushes and replies with the push budget, and liveness: the
    /// sans-IO core ([`crate::conn`]).
    conn: Conn,
    /// Not yet accepted ([`crate::ClientAdmission::OnAccept`]): counted in
    /// `Engine::strangers` (and per source).
    stranger: bool,
    /// The node is closing this session (cause, since when): its queue drains first, then it
    /// gets a Disconnect and is removed ([`Engine::close_client`]).
    closing: Option<(ClientCloseCause, Instant)>,
    /// The connection's source address (peer IP), counted in `sessions_by_source`.
    source: Option<Arc<str>>,
}

/// Routing ids of client connections whose session the node ended, with the reason it sent.
/// Bounded by a count (`MeshConfig::max_clients`, at least 1): the oldest is forgotten first,
/// after which a record on that connection would start a new session again.
struct Tombstones {
    reasons: SeededMap<Vec<u8>, DisconnectReason>,
    order: VecDeque<Vec<u8>>,
    cap: usize,
}

impl Tombstones {
    fn new(cap: usize) -> Self {
        Self {
            reasons: SeededMap::default(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    fn insert(&mut self, rid: Vec<u8>, reason: DisconnectReason) {
        if let Some(r) = self.reasons.get_mut(&rid) {
            *r = reason;
            return;
        }
        while self.order.len() >= self.cap {
            if let Some(old) = self.order.pop_front() {
                self.reasons.remove(&old);
            }
        }
        self.reasons.insert(rid.clone(), reason);
        self.order.push_back(rid);
    }

    fn get(&self, rid: &[u8]) -> Option<DisconnectReason> {
        if self.reasons.is_empty() {
            return None;
        }
        self.reasons.get(rid).copied()
    }
}

/// An entry of the held client FIFO. Not boxed: almost every entry is a record (as before the
/// `Ended` marker existed), and a box would cost an allocation per held record.
#[allow(clippy::large_enum_variant)]
enum HeldClient {
    /// A record waiting for room in the inbound channel: (session, bytes, record).
    Record(u64, u64, Inbound),
    /// The `Disconnected` event of a session that ended while records of it were held: sent
    /// once those went up (ordering rule of [`ClientEvent`]).
    Ended(u64, ClientCloseCause),
}

struct Sockets {
    relay: zmq::Socket,
    completion: zmq::Socket,
    client: Option<zmq::Socket>,
    mon_relay: zmq::Socket,
    mon_completion: zmq::Socket,
    mon_client: Option<zmq::Socket>,
}

pub(crate) struct Engine {
    // Dropped last: sockets must close before the context terminates.
    sockets: Sockets,
    door: crate::bridge::Door<Command>,
    shared: Arc<Shared>,
    cfg: MeshConfig,
    local: LocalIdentity,
    peers: FastMap<NodeRid, Peer>,
    endpoints: FastMap<String, (NodeRid, LinkKind)>,
    paused: crate::hashing::FastSet<NodeRid>,
    /// Accepted relay/completion connections: handshakes in progress, proved routing ids.
    accepts: crate::accept::Accepts,
    /// Routing id bytes → NodeRid of known peers (avoids validating text per record).
    rid_cache: SeededMap<Vec<u8>, Arc<NodeRid>>,
    /// Receive buffers reused across reads (no allocation per message).
    rx_rid: zmq::Message,
    rx_parts: Vec<zmq::Message>,
    /// Time of the current read pass (one clock read per batch, not per record).
    rx_now: Instant,
    clients: FastMap<u64, Client>,
    clients_by_rid: SeededMap<Vec<u8>, u64>,
    /// Sessions per source address (`max_clients_per_source`).
    sessions_by_source: SeededMap<Arc<str>, usize>,
    /// Sessions not yet accepted, in all and per source address (`ClientAdmission::OnAccept`).
    strangers: usize,
    strangers_by_source: SeededMap<Arc<str>, usize>,
    /// The source address of the message being handled, read only for a client connection
    /// without a session (it may open one) and for a Hello (it starts a handshake).
    rx_source: Option<Arc<str>>,
    paused_clients: HashSet<u64>,
    next_session: u64,
    corr: Correlations<(Arc<NodeRid>, NodeGeneration), Waiter>,
    inbound: InboundSender,
    /// Offered every application record before the inbound channel ([`crate::sink`]).
    sink: Option<Box<dyn crate::sink::InboundSink>>,
    /// Relay records read but not yet taken by the inbound channel (bounded by the peers'
    /// windows): (peer, generation, bytes, record).
    held: VecDeque<(Arc<NodeRid>, NodeGeneration, u64, Inbound)>,
    /// Client records read but not yet taken by the inbound channel (FIFO; bounded by the
    /// clients' windows): (session, bytes, record).
    held_clients: VecDeque<HeldClient>,
    /// Routing ids of client connections whose session the node ended (not the client's own
    /// Disconnect), with the reason sent: a record from one is dropped (`SessionClosed`) and
    /// answered with that Disconnect again, never a new session. Bounded by `max_clients`
    /// entries, oldest forgotten first (`tombstone_order`).
    tombstones: Tombstones,
    /// A tombstoned connection was answered in this frame (at most one answer per frame).
    tomb_answered: bool,
    /// The lossless session event channel, once taken ([`Command::ClientEvents`]).
    client_events: Option<tokio::sync::mpsc::UnboundedSender<ClientEvent>>,
    running: bool,
    /// Stopped by [`Command::Abort`]: no goodbyes at shutdown.
    aborted: bool,
    limits: Limits,
    /// The last one-way envelope decoded (see [`DecodeMemo`]).
    memo: DecodeMemo,
    /// Peers whose relay queue or reply queue got records in this pass and that were not
    /// PAUSED: transmitted by [`Engine::flush_dirty`] at the end of the pass, small records
    /// packed into batch frames (natural batching: nothing waits for a batch to fill).
    dirty: Vec<Arc<NodeRid>>,
    /// Clients (sessions) whose queue went from empty to non-empty in this pass (pushes,
    /// replies): transmitted by [`Engine::flush_dirty`] like the peers above.
    dirty_clients: Vec<u64>,
    /// Reused buffer of the batch frame being built.
    batch_buf: Vec<u8>,
    /// Reused buffer the items of an outbox are taken into.
    outbox_buf: Vec<OutItem>,
    _ctx: zmq::Context,
}

/// Memo of the last decoded one-way envelope. A one-way 147 envelope depends only on its
/// dispatch key (no correlation, no deadline), so a sender repeats the same bytes record after
/// record. Decoding is a pure function of (envelope bytes, payload presence, limits): a
/// byte-identical envelope gives the same header and record, so the msgpack decode is skipped.
/// Every other check still runs per record (payload size, routing id, generation, window).
/// The node memoizes one-way 147s; a `MeshClient` memoizes pushes (148, also a function of
/// the key alone) with [`DecodeMemo::for_command`].
pub(crate) struct DecodeMemo {
    /// The only command this memo keeps (records without correlation and with a payload).
    command: zlink_wire::Command,
    len: usize,
    bytes: [u8; MEMO_ENVELOPE],
    hit: Option<(zlink_wire::Header, Record)>,
}

const MEMO_ENVELOPE: usize = 32;

/// The batch fast path's view of the engine (see [`Engine::on_peer_batch`],
/// [`Engine::on_client_batch`]): the fields a run of repeated one-way records reads or updates
/// besides its connection, borrowed apart from the connection maps.
struct OneWayRun<'e> {
    memo: &'e DecodeMemo,
    inbound: &'e mut InboundSender,
    counters: &'e Counters,
    max_payload: usize,
    now: Instant,
    /// The key of the memoized one-way record.
    key: crate::types::DispatchKey,
}

impl OneWayRun<'_> {
    /// Takes, for one connection (its core `conn`: receive window, liveness), the
    /// records from `next` on that are byte-identical to the memoized one-way, each exactly as
    /// a lone record: payload bounded, window charged (over it: dropped, `CreditExceeded`,
    /// counted against `who`), handed up in the compact form from `origin()`, credit freed.
    /// Stops at the first record it may not take — another envelope, a payload over the
    /// bound, a full application queue — and returns it, or after a record whose return
    /// frees credit the caller must grant first (then with `true`).
    fn take<'a>(
        &mut self,
        conn: &mut Conn,
        origin: &dyn Fn() -> Origin,
        who: &dyn std::fmt::Display,
        mut next: Option<zlink_wire::BatchRecord<'a>>,
        records: &mut impl Iterator<Item = zlink_wire::BatchRecord<'a>>,
    ) -> (Option<zlink_wire::BatchRecord<'a>>, bool) {
        while let Some(sub) = next.take() {
            let eligible = sub
                .payload
                .as_ref()
                .is_some_and(|pl| pl.len() <= self.max_payload)
                && self.memo.header(sub.envelope).is_some()
                && self.inbound.has_room();
            if !eligible {
                return (Some(sub), false);
            }
            let payload = sub.payload.expect("checked");
            let bytes = (sub.envelope.len() + payload.len()) as u64;
            conn.last_rx = self.now;
            next = records.next();
            if !conn.try_charge(bytes) {
                // The sender ignored its window: a protocol violation, counted.
                self.counters.drop(DropReason::CreditExceeded, who);
                continue;
            }
            self.inbound.push_one_way(origin(), self.key, payload);
            self.counters.delivered(1);
            if conn.released(bytes) {
                return (next, true);
            }
        }
        (None, false)
    }
}

/// A record as [`Engine::decode_memoized`] gives it.
struct MemoDecoded {
    header: zlink_wire::Header,
    class: Class,
    /// `None` for a memo hit (cloned from the memo where it is handed up) or a record whose
    /// class carries it.
    record: Option<Record>,
    payload: Option<Bytes>,
    from_memo: bool,
}

/// A client session as the detail of a recorded drop.
struct ClientLabel(u64);

impl std::fmt::Display for ClientLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "client {}", self.0)
    }
}

impl Default for DecodeMemo {
    fn default() -> Self {
        Self::for_command(zlink_wire::Command::OneWay)
    }
}

impl DecodeMemo {
    /// A memo that keeps records of `command` only.
    pub(crate) fn for_command(command: zlink_wire::Command) -> Self {
        Self {
            command,
            len: 0,
            bytes: [0; MEMO_ENVELOPE],
            hit: None,
        }
    }

    /// The memoized header if `envelope` is byte-identical to the memoized one.
    #[inline]
    pub(crate) fn header(&self, envelope: &[u8]) -> Option<zlink_wire::Header> {
        match &self.hit {
            Some((h, _)) if envelope.len() == self.len && envelope == &self.bytes[..self.len] => {
                Some(*h)
            }
            _ => None,
        }
    }

    /// The memoized record (after a hit of [`DecodeMemo::header`]).
    #[inline]
    pub(crate) fn record(&self) -> Record {
        self.hit.as_ref().map(|(_, r)| r.clone()).expect("memo hit")
    }

    /// The dispatch key of the memoized one-way record (the memo holds only 147s).
    fn one_way_key(&self) -> Option<crate::types::DispatchKey> {
        match &self.hit {
            Some((_, Record::OneWay(o))) => Some(o.key),
            _ => None,
        }
    }

    #[cfg(test)]
    fn lookup(&self, envelope: &[u8]) -> Option<(zlink_wire::Header, Record)> {
        self.header(envelope).map(|h| (h, self.record()))
    }

    /// Keeps `decoded` (decoded from `envelope` with a payload present) if it is a record of
    /// this memo's command without correlation.
    pub(crate) fn store(&mut self, envelope: &[u8], decoded: &Decoded) {
        if envelope.len() <= MEMO_ENVELOPE
            && decoded.header.correlation.get() == 0
            && decoded.record.command() == self.command
        {
            self.len = envelope.len();
            self.bytes[..envelope.len()].copy_from_slice(envelope);
            self.hit = Some((decoded.header, decoded.record.clone()));
        }
    }
}

pub(crate) struct Bound {
    pub relay: String,
    pub completion: String,
    pub client: Option<String>,
}

fn setup_err(what: impl Into<String>) -> impl FnOnce(zmq::Error) -> crate::error::ConfigError {
    let what = what.into();
    move |source| crate::error::ConfigError::Transport { what, source }
}

/// Applies the options every network-facing socket gets.
///
/// `zmtp_heartbeats` is true only for the completion socket: libzmq stops reading a
/// connection whose pipe is full, so a PAUSED application queue starves ZMTP PINGs and the
/// heartbeat timeout would cut a healthy, merely backpressured connection, losing everything
/// libzmq had buffered (records `send` had accepted). That applies to relay and to
/// ClientServer (a client that is out of credit backs up into libzmq; the client stops
/// reading while its pushes are not taken). Relay liveness
/// comes from the completion connection (never backpressured by the application: ZMTP
/// heartbeats + mesh Ping/Pong); ClientServer liveness from mesh Ping/Pong (`peer_timeout`,
/// `MeshClient::server_alive`); both also use TCP keepalive.
pub(crate) fn configure_network_socket(
    s: &zmq::Socket,
    cfg: &MeshConfig,
    zmtp_heartbeats: bool,
) -> Result<(), zmq::Error> {
    let l = &cfg.transport;
    let v = &cfg.liveness;
    s.set_maxmsgsize(codec::socket_message_limit(l.max_message_size))?;
    s.set_sndhwm(l.send_hwm)?;
    s.set_rcvhwm(l.recv_hwm)?;
    s.set_linger(l.linger.as_millis() as i32)?;
    s.set_tcp_keepalive(1)?;
    s.set_tcp_keepalive_idle(30)?;
    s.set_tcp_keepalive_intvl(5)?;
    s.set_tcp_keepalive_cnt(3)?;
    if zmtp_heartbeats {
        s.set_heartbeat_ivl(v.heartbeat_interval.as_millis() as i32)?;
        s.set_heartbeat_timeout(v.heartbeat_timeout.as_millis() as i32)?;
        s.set_heartbeat_ttl(v.heartbeat_ttl.as_millis() as i32)?;
    }
    s.set_reconnect_ivl(v.reconnect_interval.as_millis() as i32)?;
    s.set_reconnect_ivl_max(v.reconnect_interval_max.as_millis() as i32)?;
    s.set_handshake_ivl(v.handshake_timeout.as_millis() as i32)?;
    Ok(())
}

pub(crate) fn monitor(
    ctx: &zmq::Context,
    s: &zmq::Socket,
    name: &str,
) -> Result<zmq::Socket, crate::error::ConfigError> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let ep = format!(
        "inproc://zlink-mesh-mon-{name}-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let events = zmq::SocketEvent::ACCEPTED as i32
        | zmq::SocketEvent::DISCONNECTED as i32
        | zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32
        | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32
        | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32
        | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32;
    s.monitor(&ep, events).map_err(setup_err("monitor"))?;
    let m = ctx.socket(zmq::PAIR).map_err(setup_err("monitor socket"))?;
    m.set_linger(0).map_err(setup_err("monitor linger"))?;
    m.connect(&ep).map_err(setup_err("monitor connect"))?;
    Ok(m)
}

fn last_endpoint(s: &zmq::Socket) -> String {
    match s.get_last_endpoint() {
        Ok(Ok(e)) => e,
        _ => String::new(),
    }
}

impl Engine {
    #[allow(clippy::type_complexity)]
    pub(crate) fn new(
        ctx: zmq::Context,
        door: crate::bridge::Door<Command>,
        shared: Arc<Shared>,
        cfg: MeshConfig,
        local: LocalIdentity,
        inbound: InboundSender,
    ) -> Result<(Self, Bound), crate::error::ConfigError> {
        let router =
            |name: &str, ep: &str, mesh: bool| -> Result<zmq::Socket, crate::error::ConfigError> {
                let s = ctx.socket(zmq::ROUTER).map_err(setup_err(name))?;
                configure_network_socket(&s, &cfg, name == "completion")
                    .map_err(setup_err(format!("{name} options")))?;
                s.set_router_mandatory(true)
                    .map_err(setup_err("router_mandatory"))?;
                if mesh {
                    // Announced on accepted connections (the listener keeps the options of
                    // the bind); each outgoing connection announces a fresh random routing id
                    // instead (`fresh_rid`). No ROUTER_HANDOVER: a connection announcing a
                    // routing id in use is ignored, it never takes over the pipe.
                    s.set_identity(cfg.node.as_bytes())
                        .map_err(setup_err("identity"))?;
                }
                s.bind(ep).map_err(setup_err(format!("bind {name} {ep}")))?;
                Ok(s)
            };
        let relay = router("relay", &cfg.relay_endpoint, true)?;
        let completion = router("completion", &cfg.completion_endpoint, true)?;
        let client = match &cfg.client_endpoint {
            Some(ep) => Some(router("client", ep, false)?),
            None => None,
        };
        let mon_relay = monitor(&ctx, &relay, "relay")?;
        let mon_completion = monitor(&ctx, &completion, "completion")?;
        let mon_client = match &client {
            Some(c) => Some(monitor(&ctx, c, "client")?),
            None => None,
        };
        let limits = codec::limits(cfg.transport.max_message_size);
        let bound = Bound {
            relay: last_endpoint(&relay),
            completion: last_endpoint(&completion),
            client: client.as_ref().map(last_endpoint),
        };
        let tombstones = Tombstones::new(cfg.max_clients);
        let accepts = crate::accept::Accepts::new(
            cfg.max_pending_handshakes,
            cfg.max_pending_handshakes_per_source,
        );
        Ok((
            Self {
                sockets: Sockets {
                    relay,
                    completion,
                    client,
                    mon_relay,
                    mon_completion,
                    mon_client,
                },
                door,
                shared,
                cfg,
                local,
                peers: FastMap::default(),
                endpoints: FastMap::default(),
                paused: Default::default(),
                rid_cache: SeededMap::default(),
                accepts,
                rx_rid: zmq::Message::new(),
                rx_parts: Vec::with_capacity(MAX_PARTS),
                rx_now: Instant::now(),
                clients: FastMap::default(),
                clients_by_rid: SeededMap::default(),
                sessions_by_source: SeededMap::default(),
                strangers: 0,
                strangers_by_source: SeededMap::default(),
                rx_source: None,
                paused_clients: HashSet::new(),
                next_session: 1,
                corr: Correlations::new(),
                inbound,
                sink: None,
                held: VecDeque::new(),
                held_clients: VecDeque::new(),
                tombstones,
                tomb_answered: false,
                client_events: None,
                running: true,
                aborted: false,
                limits,
                memo: DecodeMemo::default(),
                dirty: Vec::new(),
                dirty_clients: Vec::new(),
                batch_buf: Vec::new(),
                outbox_buf: Vec::new(),
                _ctx: ctx,
            },
            bound,
        ))
    }

    pub(crate) fn run(mut self) {
        let _span = tracing::debug_span!("zlink_mesh_io", node = %self.local.node).entered();
        let mut next_housekeeping = Instant::now();
        while self.running {
            let mut work = self.drain_commands();
            if !self.running {
                break;
            }
            if !self.paused.is_empty() || !self.paused_clients.is_empty() {
                self.flush_paused();
            }
            if !self.held.is_empty() || !self.held_clients.is_empty() {
                self.retry_stalled();
            }
            let now = Instant::now();
            if now >= next_housekeeping {
                self.flush_handshakes();
                self.timers(now);
                self.read_monitors();
                next_housekeeping = now + HOUSEKEEPING;
            }
            // Busy path: read every socket without polling first.
            work += self.read_socket(LinkKind::Completion);
            work += self.read_socket(LinkKind::Relay);
            if self.sockets.client.is_some() {
                work += self.read_socket(LinkKind::Client);
            }
            // Replies the reads queued (e.g. stale-generation error replies).
            self.flush_dirty();
            self.inbound.flush();
            if work > 0 {
                continue;
            }
            // Idle: yield a little before sleeping (a wake-up costs 20-25 µs on small VMs).
            if self.spin_for_work() {
                continue;
            }
            self.poll_once();
            next_housekeeping = next_housekeeping.min(Instant::now());
        }
        self.shutdown_sequence();
    }

    // ---------------------------------------------------------------- commands

    fn drain_commands(&mut self) -> usize {
        let mut n = 0;
        while n < CMD_BATCH {
            match self.door.rx.try_recv() {
                Ok(cmd) => {
                    self.handle_command(cmd);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        self.flush_dirty();
        n
    }

    /// Transmits what this pass queued for each dirty peer: the records queued behind each
    /// other for one peer go out together, small ones packed into 139 batch frames (see
    /// [`Engine::flush_peer`]). A peer that libzmq refuses (HWM) becomes PAUSED.
    fn flush_dirty(&mut self) {
        if !self.dirty.is_empty() {
            let mut dirty = std::mem::take(&mut self.dirty);
            for node in dirty.drain(..) {
                if !self.flush_peer(&node) {
                    self.shared.counters.event(TransportEvent::Paused);
                    self.mark_paused(&node);
                }
            }
            self.dirty = dirty;
        }
        if !self.dirty_clients.is_empty() {
            let mut dirty = std::mem::take(&mut self.dirty_clients);
            for session in dirty.drain(..) {
                if !self.flush_client(session) {
                    self.shared.counters.event(TransportEvent::Paused);
                    self.paused_clients.insert(session);
                }
            }
            self.dirty_clients = dirty;
        }
    }

    /// Yields the CPU a few times while watching for commands or readable sockets.
    fn spin_for_work(&self) -> bool {
        for _ in 0..self.cfg.io_spin_yields {
            if !self.door.rx.is_empty() {
                return true;
            }
            let readable = |s: &zmq::Socket| {
                s.get_events()
                    .map(|e| e.contains(zmq::POLLIN))
                    .unwrap_or(false)
            };
            if readable(&self.sockets.relay)
                || readable(&self.sockets.completion)
                || self.sockets.client.as_ref().is_some_and(readable)
            {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    fn read_monitors(&mut self) {
        self.read_monitor(LinkKind::Relay);
        self.read_monitor(LinkKind::Completion);
        if self.sockets.mon_client.is_some() {
            self.read_monitor(LinkKind::Client);
        }
    }

    fn handle_command(&mut self, cmd: Command) {
        match cmd {
            Command::Connect(addr) => self.connect(addr),
            Command::Send {
                dest,
                frames,
                bytes,
            } => self.send_app(
                dest,
                Out {
                    frames,
                    bytes: Some(bytes),
                    corr: 0,
                },
            ),
            Command::Flush(outbox) => {
                let mut items = std::mem::take(&mut self.outbox_buf);
                outbox.take_into(&mut items);
                let mut items_iter = items.drain(..);
                while let Some(item) = items_iter.next() {
                    match item {
                        OutItem::Send { frames, bytes } => {
                            // A run of one-way records: one peer lookup for the run.
                            let mut run =
                                std::iter::once((frames, bytes)).chain(std::iter::from_fn(|| {
                                    let next = items_iter.as_slice().first()?;
                                    if !matches!(next, OutItem::Send { .. }) {
                                        return None;
                                    }
                                    match items_iter.next() {
                                        Some(OutItem::Send { frames, bytes }) => {
                                            Some((frames, bytes))
                                        }
                                        _ => None,
                                    }
                                }));
                            self.queue_sends(&outbox, &mut run);
                        }
                        OutItem::Cancel { corr } => {
                            if let Some(w) = self.corr.handle_cancel(corr) {
                                drop(w);
                            }
                        }
                        OutItem::Request {
                            corr,
                            deadline,
                            frames,
                            bytes,
                            waiter,
                        } => self.start_request(
                            outbox.node.clone(),
                            outbox.generation,
                            corr,
                            deadline,
                            Out {
                                frames,
                                bytes: Some(bytes),
                                corr,
                            },
                            waiter,
                        ),
                    }
                }
                drop(items_iter);
                self.outbox_buf = items;
            }
            Command::Reply { to, frames } => self.send_reply(to, frames),
            Command::ClientEvents(tx) => {
                // Live sessions are announced first (they began before the channel existed).
                let mut live: Vec<u64> = self.clients.keys().copied().collect();
                live.sort_unstable();
                self.client_events = Some(tx);
                for session in live {
                    self.client_event(ClientEvent::Connected {
                        session: SessionRid::new(session),
                    });
                }
            }
            Command::CloseClient { session, reason } => {
                self.close_client(session, ClientCloseCause::Closed(reason), Instant::now());
            }
            Command::AcceptClient { session } => self.accept_client(session),
            Command::SetSink(sink) => self.sink = Some(sink),
            Command::ReleaseCredit => {
                let released = std::mem::take(
                    &mut *self
                        .shared
                        .released
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()),
                );
                for (origin, bytes) in released {
                    match origin {
                        Origin::Peer { node, generation } => {
                            self.credit_freed(ConnRef::Peer(&node, Some(generation)), bytes)
                        }
                        Origin::Client { session } => {
                            self.credit_freed(ConnRef::Client(session.get()), bytes)
                        }
                    }
                }
            }
            Command::Hold(release) => {
                // Released when the guard (the only sender) is dropped: `recv` then fails.
                if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    release.recv_timeout(HOLD_LIMIT)
                {
                    tracing::warn!("test hold of the mesh I/O thread expired");
                }
            }
            Command::Shutdown => self.running = false,
            Command::Abort => {
                self.running = false;
                self.aborted = true;
            }
        }
    }

    /// Queues a run of admitted one-way records of `outbox`'s lifecycle (transmitted at the end
    /// of the pass, like [`Engine::send_app`]): one peer lookup for the whole run. Records of
    /// a lifecycle that ended are discarded, their budget released, each counted `PeerLost`.
    fn queue_sends(&mut self, outbox: &Outbox, run: &mut dyn Iterator<Item = (Parts, u64)>) {
        let node = &outbox.node;
        let Some(p) = self
            .peers
            .get_mut(&**node)
            .filter(|p| p.up && p.generation == Some(outbox.generation))
        else {
            for (_, bytes) in run {
                outbox.budget.release(bytes);
                self.shared.counters.drop(DropReason::PeerLost, node);
            }
            return;
        };
        let was_empty = p.conn.queue.is_empty();
        for (frames, bytes) in run {
            p.conn.queue.push_back(Out {
                frames,
                bytes: Some(bytes),
                corr: 0,
            });
        }
        if was_empty && !p.conn.queue.is_empty() {
            self.dirty.push(node.clone());
        }
    }

    /// Registers a request in the correlation table (its deadline and waiter live here from
    /// now on) and queues it like relay data; a request for a lifecycle that already ended
    /// ends at once with `PeerLost`.
    fn start_request(
        &mut self,
        node: Arc<NodeRid>,
        generation: NodeGeneration,
        corr: u64,
        deadline: Instant,
        out: Out,
        waiter: Waiter,
    ) {
        let bytes = out.bytes.unwrap_or(0);
        let current = self
            .peers
            .get(&node)
            .filter(|p| p.up && p.generation == Some(generation))
            .is_some();
        if !current {
            self.release_peer_budget(&node, bytes);
            let _ = waiter.send(Err(RequestError::PeerLost));
            return;
        }
        if let Err(w) = self
            .corr
            .register(corr, (node.clone(), generation), deadline, waiter)
        {
            self.release_peer_budget(&node, bytes);
            let _ = w.send(Err(RequestError::Closed));
            return;
        }
        self.send_app(Dest::Peer { node, generation }, out);
    }

    /// True if `corr` is a request that must not be transmitted any more: it already reached
    /// its terminal (timeout, cancel, peer lost), or its deadline has passed (it is ended
    /// here, with `DeadlineExceeded`, before the timer would). Asked at the moment of
    /// transmission, so a request queued behind PAUSED data is never sent after its terminal.
    fn request_ended(&mut self, corr: u64) -> bool {
        if corr == 0 {
            return false;
        }
        match self.corr.pending_deadline(corr) {
            None => true,
            Some(d) => {
                let now = Instant::now();
                if d <= now {
                    self.expire_requests(now);
                    true
                } else {
                    false
                }
            }
        }
    }

    fn drop_ended(&self, node: &NodeRid, corr: u64) {
        self.shared.counters.drop(
            DropReason::RequestEnded,
            &format_args!("{node}: corr {corr} ended before transmission"),
        );
    }

    /// Ends every request whose deadline passed (`DeadlineExceeded`).
    fn expire_requests(&mut self, now: Instant) {
        for (_, w) in self.corr.handle_timeout(now) {
            let _ = w.send(Err(RequestError::DeadlineExceeded));
        }
    }

    fn mark_paused(&mut self, node: &NodeRid) {
        if !self.paused.contains(node) {
            self.paused.insert(node.clone());
        }
    }

    fn release_peer_budget(&self, node: &NodeRid, bytes: u64) {
        if let Some(p) = self.peers.get(node) {
            p.conn.budget.release(bytes);
        } else if let Some(slot) = self.shared.peer_slot(node) {
            slot.budget.release(bytes);
        }
    }

    fn connect(&mut self, addr: PeerAddress) {
        if addr.node == self.local.node {
            return;
        }
        if self
            .peers
            .get(&addr.node)
            .and_then(|p| p.addr.as_ref())
            .is_some_and(|a| *a == addr)
        {
            // Idempotent: already connecting/connected to this address.
            return;
        }
        let own_rids = [fresh_rid(), fresh_rid()];
        if let Err(e) = connect_as(&self.sockets.relay, &own_rids[0], &addr.relay) {
            tracing::warn!(peer = %addr.node, error = %e, "relay connect failed");
            return;
        }
        if let Err(e) = connect_as(&self.sockets.completion, &own_rids[1], &addr.completion) {
            tracing::warn!(peer = %addr.node, error = %e, "completion connect failed");
            return;
        }
        self.endpoints
            .insert(addr.relay.clone(), (addr.node.clone(), LinkKind::Relay));
        self.endpoints.insert(
            addr.completion.clone(),
            (addr.node.clone(), LinkKind::Completion),
        );
        let node = addr.node.clone();
        let p = self.peer_entry(&node);
        p.addr = Some(addr);
        p.own_rids = own_rids;
        p.rids = [node.as_bytes().to_vec(), node.as_bytes().to_vec()];
        let now = Instant::now();
        self.start_initiator(&node, LinkKind::Relay, now);
        self.start_initiator(&node, LinkKind::Completion, now);
    }

    fn peer_entry(&mut self, node: &NodeRid) -> &mut Peer {
        let budget = self.cfg.peer_budget;
        let peer_window = self.cfg.peer_window;
        let now = Instant::now();
        self.peers.entry(node.clone()).or_insert_with(|| Peer {
            node: node.clone(),
            rids: [node.as_bytes().to_vec(), node.as_bytes().to_vec()],
            own_rids: [Vec::new(), Vec::new()],
            addr: None,
            generation: None,
            relay: Link::Idle,
            completion: Link::Idle,
            up: false,
            replies: VecDeque::new(),
            next_ping: now,
            ping_seq: 0,
            conn: Conn::idle(peer_window, Arc::new(Budget::new(budget)), now),
        })
    }

    fn start_initiator(&mut self, node: &NodeRid, kind: LinkKind, now: Instant) {
        let local = self.local.clone();
        let timeout = self.cfg.liveness.handshake_timeout;
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        let hs = Handshake::initiator(
            local,
            kind,
            &p.own_rids[link_index(kind)],
            Some(node.clone()),
            rand::random(),
            now,
            timeout,
        );
        *p.link_mut(kind) = Link::Handshaking {
            hs: Box::new(hs),
            out: VecDeque::new(),
        };
        self.pump_handshake(node, kind);
    }

    // ---------------------------------------------------------------- sending

    fn socket(&self, kind: LinkKind) -> &zmq::Socket {
        match kind {
            LinkKind::Relay => &self.sockets.relay,
            LinkKind::Completion => &self.sockets.completion,
            LinkKind::Client => self.sockets.client.as_ref().expect("client socket"),
        }
    }

    fn raw_send(&self, kind: LinkKind, rid: &[u8], frames: &[Bytes]) -> SendOutcome {
        raw_send_on(self.socket(kind), self.cfg.tap.as_ref(), kind, rid, frames)
    }

    /// Sends `run` (one or more encoded records for one peer) as one message: a lone record as
    /// its own frame, several as one 139 batch frame built in the reused buffer.
    fn send_run<'a>(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        mut run: impl ExactSizeIterator<Item = &'a Parts>,
    ) -> SendOutcome {
        if run.len() <= 1 {
            let Some(frames) = run.next() else {
                return SendOutcome::Sent;
            };
            return self.raw_send(kind, rid, frames);
        }
        let mut enc = zlink_wire::BatchEncoder::new(std::mem::take(&mut self.batch_buf));
        for frames in run {
            // Cannot fail: an application record is never a batch, a run holds at most
            // `Batching::max_records` (≤ MAX_BATCH_RECORDS, checked at start) records and
            // every part is bounded by the message size.
            let pushed = enc.push(&frames[0], frames.get(1).map(|p| &p[..]));
            debug_assert!(pushed.is_ok(), "batch push: {pushed:?}");
        }
        let frame = enc.finish();
        let outcome = raw_send_one(self.socket(kind), self.cfg.tap.as_ref(), kind, rid, &frame);
        self.batch_buf = frame;
        outcome
    }

    fn send_app(&mut self, dest: Dest, out: Out) {
        match dest {
            Dest::Peer { node, generation } => {
                // A request that reached its terminal before transmission (e.g. the deadline
                // passed while it waited for admission) is never sent (SB-12). Asked first only
                // for requests (one-way records have no correlation): one peer lookup below.
                let ended = out.corr != 0
                    && self
                        .peers
                        .get(&node)
                        .is_some_and(|p| p.up && p.generation == Some(generation))
                    && self.request_ended(out.corr);
                let Some(p) = self.peers.get_mut(&node) else {
                    if let Some(b) = out.bytes {
                        self.release_peer_budget(&node, b);
                    }
                    self.shared.counters.drop(DropReason::PeerLost, &node);
                    return;
                };
                if !p.up || p.generation != Some(generation) {
                    release(&p.conn.budget, &out);
                    self.shared.counters.drop(DropReason::PeerLost, &node);
                    return;
                }
                if ended {
                    release(&p.conn.budget, &out);
                    self.drop_ended(&node, out.corr);
                    return;
                }
                // Queued and transmitted at the end of this pass (`flush_dirty`), together
                // with whatever else the pass queued for this peer. A queue that was not empty
                // is already PAUSED (HWM: listed in `paused`; credit: a FlowCredit lists it)
                // or dirty: the record waits behind, FIFO.
                let was_empty = p.conn.queue.is_empty();
                p.conn.queue.push_back(out);
                if was_empty {
                    self.dirty.push(node);
                }
            }
            Dest::Client { session } => {
                match self.clients.get(&session) {
                    None => {
                        if let Some(b) = self.shared.client_budget(session)
                            && let Some(n) = out.bytes
                        {
                            b.release(n);
                        }
                        self.shared.counters.drop(DropReason::PeerLost, &session);
                        return;
                    }
                    // Admitted before the close but handed over after it: never sent after
                    // the Disconnect.
                    Some(c) if c.closing.is_some() => {
                        release(&c.conn.budget, &out);
                        self.shared.counters.drop(DropReason::PeerLost, &session);
                        return;
                    }
                    Some(_) => {}
                }
                self.queue_client(session, out);
            }
        }
    }

    fn send_reply(&mut self, to: ReplyTarget, frames: Parts) {
        match to {
            ReplyTarget::Peer { node, generation } => {
                let Some(p) = self.peers.get(&node) else {
                    self.shared
                        .counters
                        .drop(DropReason::ReplyUndeliverable, &node);
                    return;
                };
                if p.generation != Some(generation) || !matches!(p.completion, Link::Up(_)) {
                    self.shared
                        .counters
                        .drop(DropReason::ReplyUndeliverable, &node);
                    return;
                }
                // Like relay data: queued, transmitted at the end of the pass with the other
                // replies queued for this peer (`flush_dirty`); behind a PAUSED queue, FIFO.
                let was_empty = p.replies.is_empty();
                self.queue_reply(&node, frames);
                if was_empty {
                    self.dirty.push(node);
                }
            }
            ReplyTarget::Client { session } => {
                if self
                    .clients
                    .get(&session)
                    .is_none_or(|c| c.closing.is_some())
                {
                    self.shared
                        .counters
                        .drop(DropReason::ReplyUndeliverable, &session);
                    return;
                }
                // ClientServer: one connection, so the reply is ordered after earlier pushes
                // (EG-4: it may wait behind them and PAUSED); it does not take a budget.
                self.queue_client(
                    session,
                    Out {
                        frames,
                        bytes: None,
                        corr: 0,
                    },
                );
            }
        }
    }

    /// Queues a push or a reply for a client (FIFO: the connection's order). Transmitted at the
    /// end of the pass ([`Engine::flush_dirty`]) with whatever else the pass queued for it,
    /// small records packed into 139 batch frames; a queue that was not empty is already dirty
    /// or PAUSED, and the record waits behind.
    fn queue_client(&mut self, session: u64, out: Out) {
        let Some(c) = self.clients.get_mut(&session) else {
            return;
        };
        let was_empty = c.conn.queue.is_empty();
        c.conn.queue.push_back(out);
        if was_empty {
            self.dirty_clients.push(session);
        }
    }

    fn queue_reply(&mut self, node: &NodeRid, frames: Parts) {
        let p = self.peers.get_mut(node).expect("peer");
        if p.replies.len() >= MAX_QUEUED_REPLIES {
            self.shared
                .counters
                .drop(DropReason::ReplyUndeliverable, node);
        } else {
            p.replies.push_back(frames);
        }
    }

    fn flush_paused(&mut self) {
        if !self.paused.is_empty() {
            let nodes: Vec<NodeRid> = self.paused.iter().cloned().collect();
            for node in nodes {
                if self.flush_peer(&node) {
                    self.paused.remove(&node);
                }
            }
        }
        if !self.paused_clients.is_empty() {
            let sessions: Vec<u64> = self.paused_clients.iter().copied().collect();
            for s in sessions {
                if self.flush_client(s) {
                    self.paused_clients.remove(&s);
                    if self.clients.get(&s).is_some_and(|c| c.closing.is_some()) {
                        self.finish_client(s);
                    }
                }
            }
        }
    }

    /// Returns true when both queues of the peer are empty.
    fn flush_peer(&mut self, node: &NodeRid) -> bool {
        let Some(mut p) = self.peers.remove(node) else {
            return true;
        };
        while !p.replies.is_empty() {
            let n = batch_run(
                &self.cfg.batching,
                p.replies.iter().map(|f| (&**f, 0)),
                |_| true,
            );
            match self.send_run(
                LinkKind::Completion,
                p.rid(LinkKind::Completion),
                p.replies.iter().take(n),
            ) {
                SendOutcome::Sent => {
                    p.replies.drain(..n);
                }
                SendOutcome::Paused => break,
                SendOutcome::Unreachable => {
                    for _ in p.replies.drain(..n) {
                        self.shared
                            .counters
                            .drop(DropReason::ReplyUndeliverable, node);
                    }
                }
            }
        }
        // Blocked on the peer's credit (not on libzmq): no need to retry until a FlowCredit
        // arrives (which puts the peer back into `paused`).
        let mut credit_blocked = false;
        while let Some(out) = p.conn.queue.front() {
            if self.request_ended(out.corr) {
                // The request reached its terminal (deadline, cancel) while queued: it must
                // never be sent afterwards (SB-12, EG-16.26).
                release(&p.conn.budget, out);
                let corr = out.corr;
                p.conn.queue.pop_front();
                self.drop_ended(node, corr);
                continue;
            }
            if !p.conn.credit.open() {
                credit_blocked = true;
                break;
            }
            // The run of records that go out as one frame: each within the peer's credit
            // (every record is charged on its own, as if sent alone), stopping before a
            // request that already ended (it is discarded at the front next round).
            let corr = &self.corr;
            let now = Instant::now();
            let n = p.conn.credit.run(
                &self.cfg.batching,
                p.conn.queue.iter().map(|o| (&*o.frames, o.corr)),
                |c| corr.pending_deadline(c).is_none_or(|d| d <= now),
            );
            match self.send_run(
                LinkKind::Relay,
                p.rid(LinkKind::Relay),
                p.conn.queue.iter().take(n).map(|o| &o.frames),
            ) {
                SendOutcome::Sent => {
                    // Each record of the run is charged to the credit on its own; the budget
                    // of the run is released at once.
                    let (mut reserved_n, mut reserved_bytes) = (0, 0);
                    for out in p.conn.queue.drain(..n) {
                        p.conn.credit.charge(out_len(&out));
                        if let Some(b) = out.bytes {
                            reserved_n += 1;
                            reserved_bytes += b;
                        }
                    }
                    if reserved_n > 0 {
                        p.conn.budget.release_n(reserved_n, reserved_bytes);
                    }
                }
                SendOutcome::Paused => break,
                SendOutcome::Unreachable => {
                    for out in p.conn.queue.drain(..n) {
                        release(&p.conn.budget, &out);
                        self.shared.counters.drop(DropReason::PeerLost, node);
                    }
                }
            }
        }
        let done = (p.conn.queue.is_empty() || credit_blocked) && p.replies.is_empty();
        self.peers.insert(node.clone(), p);
        done
    }

    /// Transmits a client's queue (pushes and replies, in order) while libzmq takes it: a run
    /// of small records as one 139 batch frame, a lone or large record alone (as for peers,
    /// [`Engine::flush_peer`]). Returns true when the queue is empty.
    fn flush_client(&mut self, session: u64) -> bool {
        let Some(mut c) = self.clients.remove(&session) else {
            return true;
        };
        while !c.conn.queue.is_empty() {
            let n = batch_run(
                &self.cfg.batching,
                c.conn.queue.iter().map(|o| (&*o.frames, 0)),
                |_| true,
            );
            match self.send_run(
                LinkKind::Client,
                &c.rid,
                c.conn.queue.iter().take(n).map(|o| &o.frames),
            ) {
                SendOutcome::Sent => {
                    let (mut reserved_n, mut reserved_bytes) = (0, 0);
                    for out in c.conn.queue.drain(..n) {
                        if let Some(b) = out.bytes {
                            reserved_n += 1;
                            reserved_bytes += b;
                        }
                    }
                    if reserved_n > 0 {
                        c.conn.budget.release_n(reserved_n, reserved_bytes);
                    }
                }
                SendOutcome::Paused => break,
                SendOutcome::Unreachable => {
                    for out in c.conn.queue.drain(..n) {
                        release(&c.conn.budget, &out);
                        let reason = if out.bytes.is_some() {
                            DropReason::PeerLost
                        } else {
                            DropReason::ReplyUndeliverable
                        };
                        self.shared.counters.drop(reason, &session);
                    }
                }
            }
        }
        let done = c.conn.queue.is_empty();
        self.clients.insert(session, c);
        done
    }

    /// Moves handshake messages from the state machine to the link's out queue and tries to
    /// send them; an unreachable peer (not yet connected) keeps them for the next tick.
    fn pump_handshake(&mut self, node: &NodeRid, kind: LinkKind) {
        let Some(mut p) = self.peers.remove(node) else {
            return;
        };
        if let Link::Handshaking { hs, out } = p.link_mut(kind) {
            while let Some(m) = hs.poll_transmit() {
                out.push_back(codec::encode_control(m.into_record()));
            }
        }
        let rid = p.rid(kind).to_vec();
        if let Link::Handshaking { out, .. } = p.link_mut(kind) {
            while let Some(f) = out.front() {
                match self.raw_send(kind, &rid, f) {
                    SendOutcome::Sent => {
                        out.pop_front();
                    }
                    SendOutcome::Paused | SendOutcome::Unreachable => break,
                }
            }
        }
        self.peers.insert(node.clone(), p);
        self.check_handshake(node, kind);
    }

    fn flush_handshakes(&mut self) {
        let pending: Vec<(NodeRid, LinkKind)> = self
            .peers
            .values()
            .flat_map(|p| {
                let mut v = Vec::new();
                for (kind, link) in [
                    (LinkKind::Relay, &p.relay),
                    (LinkKind::Completion, &p.completion),
                ] {
                    if let Link::Handshaking { out, .. } = link
                        && !out.is_empty()
                    {
                        v.push((p.node.clone(), kind));
                    }
                }
                v
            })
            .collect();
        for (node, kind) in pending {
            self.pump_handshake(&node, kind);
        }
    }

    // ---------------------------------------------------------------- handshake

    /// A handshake message on connection `rid` of `kind`; `node` is the routing id read as a
    /// NodeRid. On our own outgoing connection to `node` (the acceptor announces its NodeRid)
    /// it feeds our initiator; on any other connection it goes to that connection's acceptor
    /// handshake (`accept.rs`), which touches no peer until it completes.
    fn handle_handshake_msg(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        node: NodeRid,
        msg: HandshakeMsg,
    ) {
        let now = Instant::now();
        let outgoing = self
            .peers
            .get(&node)
            .is_some_and(|p| p.addr.is_some() && p.rid(kind) == rid);
        if !outgoing {
            self.accept_handshake_msg(kind, rid, msg, now);
            return;
        }
        let p = self.peers.get_mut(&node).expect("peer");
        match p.link_mut(kind) {
            Link::Handshaking { hs, .. } if !matches!(msg, HandshakeMsg::Hello { .. }) => {
                hs.handle_message(msg, now)
            }
            _ => {
                self.shared
                    .counters
                    .drop(DropReason::Unauthenticated, &node);
                return;
            }
        }
        self.pump_handshake(&node, kind);
    }

    /// The acceptor side of a handshake on connection `rid`: a Hello starts (or restarts) the
    /// connection's handshake, bounded by `max_pending_handshakes`; nothing about any peer
    /// changes before the initiator proved the secret on this very connection.
    fn accept_handshake_msg(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        msg: HandshakeMsg,
        now: Instant,
    ) {
        let hs = if let HandshakeMsg::Hello {
            node, generation, ..
        } = &msg
        {
            let known = self.peers.get(node).and_then(|p| p.generation);
            if known.is_some_and(|g| *generation < g) {
                self.shared.counters.drop(
                    DropReason::StaleGeneration,
                    &format_args!("{node} hello gen {generation}"),
                );
                self.send_control(
                    kind,
                    rid,
                    HandshakeMsg::Reject {
                        reason: HandshakeReject::Duplicate,
                    }
                    .into_record(),
                );
                return;
            }
            let hs = Handshake::acceptor(
                self.local.clone(),
                kind,
                rid,
                None,
                rand::random(),
                now,
                self.cfg.liveness.handshake_timeout,
            );
            match self.accepts.start(kind, rid, self.rx_source.clone(), hs) {
                Ok(hs) => hs,
                Err(full) => {
                    let reason = match full {
                        crate::accept::Full::Total => DropReason::HandshakeCapacity,
                        crate::accept::Full::Source => DropReason::SourceCapacity,
                    };
                    self.shared.counters.drop(reason, node);
                    return;
                }
            }
        } else {
            match self.accepts.pending_mut(kind, rid) {
                Some(hs) => hs,
                None => {
                    self.shared.counters.drop(
                        DropReason::Unauthenticated,
                        &format_args!("{kind:?} handshake message without a Hello"),
                    );
                    return;
                }
            }
        };
        hs.handle_message(msg, now);
        let mut out = Vec::new();
        while let Some(m) = hs.poll_transmit() {
            out.push(m);
        }
        let outcome = hs.poll_outcome().cloned();
        for m in out {
            self.send_control(kind, rid, m.into_record());
        }
        match outcome {
            None => {}
            Some(Outcome::Failed(why)) => {
                self.accepts.finish(kind, rid);
                let reason = match why {
                    HandshakeFailure::RidMismatch => DropReason::RidMismatch,
                    _ => DropReason::HandshakeFailed,
                };
                self.shared
                    .counters
                    .drop(reason, &format_args!("{kind:?} acceptor: {why:?}"));
            }
            Some(Outcome::Established(id)) => {
                if let Some(hs) = self.accepts.finish(kind, rid) {
                    self.install_accepted(kind, rid, id, hs);
                }
            }
        }
    }

    /// A connection another node opened completed its handshake: from now on its routing id
    /// (and only it) speaks for `id.node` on this link. A newer generation replaces the old
    /// lifecycle (`check_handshake`); the same generation on a new connection is the peer
    /// reconnecting (its old connection is forgotten); an older one is refused.
    fn install_accepted(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        id: crate::handshake::PeerIdentity,
        hs: Box<Handshake>,
    ) {
        let node = id.node.clone();
        let known = self.peers.get(&node).and_then(|p| p.generation);
        if known.is_some_and(|g| id.generation < g) {
            self.shared
                .counters
                .drop(DropReason::StaleGeneration, &node);
            return;
        }
        if known == Some(id.generation) && self.peers.get(&node).is_some_and(|p| p.up) {
            self.peer_down(&node, DownReason::Reconnected, false);
        }
        self.accepts.prove(kind, rid, Arc::new(node.clone()));
        let p = self.peer_entry(&node);
        p.rids[link_index(kind)] = rid.to_vec();
        *p.link_mut(kind) = Link::Handshaking {
            hs,
            out: VecDeque::new(),
        };
        self.check_handshake(&node, kind);
    }

    fn check_handshake(&mut self, node: &NodeRid, kind: LinkKind) {
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        let outcome = match p.link_mut(kind) {
            Link::Handshaking { hs, out } if out.is_empty() => hs.poll_outcome().cloned(),
            _ => None,
        };
        match outcome {
            None => {}
            Some(Outcome::Failed(why)) => {
                let reason = match why {
                    HandshakeFailure::RidMismatch => DropReason::RidMismatch,
                    _ => DropReason::HandshakeFailed,
                };
                self.shared
                    .counters
                    .drop(reason, &format_args!("{node}: {why:?}"));
                let retry = self.cfg.liveness.reconnect_interval;
                let p = self.peers.get_mut(node).expect("peer");
                if p.addr.is_some() {
                    *p.link_mut(kind) = Link::Retry {
                        at: Instant::now() + retry,
                    };
                } else {
                    *p.link_mut(kind) = Link::Idle;
                    if p.generation.is_none()
                        && matches!(p.relay, Link::Idle)
                        && matches!(p.completion, Link::Idle)
                    {
                        self.peers.remove(node);
                    }
                }
            }
            Some(Outcome::Established(id)) => {
                if id.node != *node {
                    self.shared.counters.drop(DropReason::RidMismatch, node);
                    *self.peers.get_mut(node).expect("peer").link_mut(kind) = Link::Idle;
                    return;
                }
                let old = self.peers.get(node).and_then(|p| p.generation);
                if let Some(g) = old
                    && id.generation < g
                {
                    self.shared.counters.drop(DropReason::StaleGeneration, node);
                    *self.peers.get_mut(node).expect("peer").link_mut(kind) = Link::Idle;
                    return;
                }
                if old.is_some_and(|g| g != id.generation) {
                    // A restarted peer: the old lifecycle ends here.
                    self.peer_down(node, DownReason::Restarted, false);
                    let p = self.peers.get_mut(node).expect("peer");
                    let other = if kind == LinkKind::Relay {
                        &mut p.completion
                    } else {
                        &mut p.relay
                    };
                    if matches!(other, Link::Up(_)) {
                        *other = Link::Idle;
                    }
                }
                let now = Instant::now();
                let p = self.peers.get_mut(node).expect("peer");
                p.generation = Some(id.generation);
                *p.link_mut(kind) = Link::Up(id.generation);
                p.conn.last_rx = now;
                if matches!(p.relay, Link::Up(g) if g == id.generation)
                    && matches!(p.completion, Link::Up(g) if g == id.generation)
                    && !p.up
                {
                    p.up = true;
                    p.next_ping = now + self.cfg.liveness.ping_interval;
                    let shared_node = Arc::new(node.clone());
                    let slot = PeerSlot {
                        generation: id.generation,
                        budget: p.conn.budget.clone(),
                        outbox: Arc::new(Outbox::new(
                            shared_node,
                            id.generation,
                            p.conn.budget.clone(),
                        )),
                    };
                    self.shared.set_peer(node.clone(), Some(slot));
                    self.shared.counters.event(TransportEvent::PeerUp);
                    p.conn.regrant();
                    self.flush_grant(ConnRef::Peer(node, None));
                    tracing::debug!(peer = %node, generation = %id.generation, "peer up");
                    self.shared.publish(PeerEvent::Up {
                        node: node.clone(),
                        generation: id.generation,
                    });
                }
            }
        }
    }

    /// Ends the peer's current lifecycle (if up): fails its requests, discards its queues.
    fn peer_down(&mut self, node: &NodeRid, reason: DownReason, restart: bool) {
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        let generation = p.generation;
        let was_up = std::mem::replace(&mut p.up, false);
        p.conn.reset();
        for out in p.conn.queue.drain(..) {
            release(&p.conn.budget, &out);
            self.shared.counters.drop(DropReason::PeerLost, node);
        }
        for _ in p.replies.drain(..) {
            self.shared
                .counters
                .drop(DropReason::ReplyUndeliverable, node);
        }
        self.paused.remove(node);
        if was_up {
            self.shared.set_peer(node.clone(), None);
            self.shared.counters.event(TransportEvent::PeerDown);
            let generation = generation.expect("up peer has a generation");
            tracing::debug!(peer = %node, %generation, ?reason, "peer down");
            for (_, w) in self
                .corr
                .handle_peer_lost(&(Arc::new(node.clone()), generation))
            {
                let _ = w.send(Err(RequestError::PeerLost));
            }
            self.shared.publish(PeerEvent::Down {
                node: node.clone(),
                generation,
                reason,
            });
        }
        if restart {
            let p = self.peers.get_mut(node).expect("peer");
            if p.addr.is_some() {
                let now = Instant::now();
                for kind in [LinkKind::Relay, LinkKind::Completion] {
                    self.reconnect(node, kind);
                    self.start_initiator(node, kind, now);
                }
            } else {
                p.relay = Link::Idle;
                p.completion = Link::Idle;
            }
        }
    }

    /// Replaces our outbound connection of `kind` to `node` with a fresh TCP connection that
    /// announces a fresh random routing id (the next handshake is bound to it; whatever the
    /// remote side still holds of the old connection can never speak for us again).
    fn reconnect(&mut self, node: &NodeRid, kind: LinkKind) {
        let Some(addr) = self.peers.get(node).and_then(|p| p.addr.clone()) else {
            return;
        };
        let ep = if kind == LinkKind::Relay {
            &addr.relay
        } else {
            &addr.completion
        };
        let rid = fresh_rid();
        let s = self.socket(kind);
        let _ = s.disconnect(ep);
        if let Err(e) = connect_as(s, &rid, ep) {
            tracing::warn!(peer = %node, error = %e, "reconnect failed");
        }
        if let Some(p) = self.peers.get_mut(node) {
            p.own_rids[link_index(kind)] = rid;
        }
    }

    fn send_control(&self, kind: LinkKind, rid: &[u8], record: Record) {
        let frames = codec::encode_control(record);
        // Control never waits: if libzmq's pipe is full the next tick sends a fresh one.
        let _ = self.raw_send(kind, rid, &frames);
    }

    // ---------------------------------------------------------------- timers

    fn timers(&mut self, now: Instant) {
        self.expire_requests(now);
        self.shared.counters.summarize(now);
        let mut to_check = Vec::new();
        let mut to_retry = Vec::new();
        let mut timed_out = Vec::new();
        let mut ping = Vec::new();
        let ping_ivl = self.cfg.liveness.ping_interval;
        let peer_timeout = self.cfg.liveness.peer_timeout;
        for p in self.peers.values_mut() {
            for kind in [LinkKind::Relay, LinkKind::Completion] {
                match p.link_mut(kind) {
                    Link::Handshaking { hs, .. } if hs.poll_timeout().is_some_and(|t| t <= now) => {
                        hs.handle_timeout(now);
                        to_check.push((p.node.clone(), kind));
                    }
                    Link::Retry { at } if *at <= now => to_retry.push((p.node.clone(), kind)),
                    _ => {}
                }
            }
            if p.up {
                if now.duration_since(p.conn.last_rx) > peer_timeout {
                    timed_out.push(p.node.clone());
                } else if p.next_ping <= now {
                    p.ping_seq += 1;
                    p.next_ping = now + ping_ivl;
                    ping.push((p.rid(LinkKind::Completion).to_vec(), p.ping_seq));
                }
            }
        }
        for (node, kind) in to_check {
            self.check_handshake(&node, kind);
        }
        for (kind, hs) in self.accepts.expire(now) {
            self.shared.counters.drop(
                DropReason::HandshakeFailed,
                &format_args!("{kind:?} acceptor: {:?}", hs.poll_outcome()),
            );
        }
        for (node, kind) in to_retry {
            self.reconnect(&node, kind);
            self.start_initiator(&node, kind, now);
        }
        for node in timed_out {
            self.peer_down(&node, DownReason::Timeout, true);
        }
        let owed: Vec<NodeRid> = self
            .peers
            .values()
            .filter(|p| p.up && p.conn.owes())
            .map(|p| p.node.clone())
            .collect();
        for node in owed {
            self.flush_grant(ConnRef::Peer(&node, None));
        }
        for (rid, seq) in ping {
            self.send_control(LinkKind::Completion, &rid, Record::Ping(Ping { seq }));
        }
        let owed: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| c.conn.owes())
            .map(|(s, _)| *s)
            .collect();
        for s in owed {
            self.flush_grant(ConnRef::Client(s));
        }
        // ClientServer liveness: end the sessions of clients silent for the peer timeout (they
        // are told Disconnect { Timeout }); a closing session whose queue did not drain within
        // the peer timeout is ended with what it still holds dropped.
        let dead: Vec<(u64, bool)> = self
            .clients
            .iter()
            .filter_map(|(s, c)| match c.closing {
                Some((_, since)) => {
                    (now.duration_since(since) > peer_timeout).then_some((*s, true))
                }
                None => (now.duration_since(c.conn.last_rx) > peer_timeout).then_some((*s, false)),
            })
            .collect();
        for (s, closing) in dead {
            if closing {
                self.finish_client(s);
            } else {
                self.close_client(s, ClientCloseCause::Timeout, now);
                // A silent client is not waited for: what did not go out now is dropped.
                if self.clients.contains_key(&s) {
                    self.finish_client(s);
                }
            }
        }
    }

    /// The node ends a session (`close_client`, timeout, shutdown): no new pushes are admitted
    /// and records from the client are dropped from now on; what is queued for it goes out
    /// first (FIFO), then [`Engine::finish_client`] sends the Disconnect and removes it. A
    /// PAUSED queue is finished by `flush_paused` once it drained, or by the timers after the
    /// peer timeout. Unknown or already closing sessions: nothing.
    fn close_client(&mut self, session: u64, cause: ClientCloseCause, now: Instant) {
        let Some(c) = self.clients.get_mut(&session) else {
            return;
        };
        if c.closing.is_some() {
            return;
        }
        c.closing = Some((cause, now));
        self.shared.set_client(session, None);
        if self.flush_client(session) {
            self.paused_clients.remove(&session);
            self.finish_client(session);
        } else {
            self.paused_clients.insert(session);
        }
    }

    /// Ends a closing session: one last try at its queue, then Disconnect { reason } to the
    /// client (best effort: control never waits), its routing id tombstoned, and removal
    /// (what is still queued is dropped, counted `PeerLost`).
    fn finish_client(&mut self, session: u64) {
        let Some((cause, _)) = self.clients.get(&session).and_then(|c| c.closing) else {
            return;
        };
        self.flush_client(session);
        if let Some(reason) = cause.disconnect_reason()
            && let Some(c) = self.clients.get(&session)
        {
            let rid = c.rid.clone();
            self.send_control(
                LinkKind::Client,
                &rid,
                Record::Disconnect(Disconnect { reason }),
            );
            self.tombstones.insert(rid, reason);
        }
        self.remove_client(session, cause);
    }

    /// Removes a session: queued records released (counted `PeerLost`), maps cleaned, events
    /// published (the lossless `Disconnected` after the session's last record went up).
    fn remove_client(&mut self, session: u64, cause: ClientCloseCause) {
        let Some(mut c) = self.clients.remove(&session) else {
            return;
        };
        for out in c.conn.queue.drain(..) {
            release(&c.conn.budget, &out);
            self.shared.counters.drop(DropReason::PeerLost, &session);
        }
        self.clients_by_rid.remove(&c.rid);
        if let Some(src) = &c.source {
            count_down(&mut self.sessions_by_source, src);
        }
        if c.stranger {
            self.strangers = self.strangers.saturating_sub(1);
            if let Some(src) = &c.source {
                count_down(&mut self.strangers_by_source, src);
            }
        }
        self.paused_clients.remove(&session);
        self.shared.set_client(session, None);
        self.shared.publish(PeerEvent::ClientDisconnected {
            session: SessionRid::new(session),
        });
        if self.client_events.is_none() {
            return;
        }
        let held = self
            .held_clients
            .iter()
            .any(|h| matches!(h, HeldClient::Record(s, ..) if *s == session));
        if held {
            self.held_clients
                .push_back(HeldClient::Ended(session, cause));
        } else {
            // Records of this pass still in the inbound batch go up first.
            self.inbound.flush();
            self.client_event(ClientEvent::Disconnected {
                session: SessionRid::new(session),
                cause,
            });
        }
    }

    /// The node's session layer accepted a stranger's session: full window (the difference
    /// granted now), no longer counted as a stranger. A no-op for unknown or accepted sessions.
    fn accept_client(&mut self, session: u64) {
        let full = self.cfg.client_window;
        let Some(c) = self.clients.get_mut(&session).filter(|c| c.stranger) else {
            return;
        };
        c.stranger = false;
        c.conn.widen(full);
        let source = c.source.clone();
        self.strangers = self.strangers.saturating_sub(1);
        if let Some(src) = &source {
            count_down(&mut self.strangers_by_source, src);
        }
        self.flush_grant(ConnRef::Client(session));
    }

    /// Sends a session event on the lossless channel, if it was taken (and is still read).
    fn client_event(&mut self, ev: ClientEvent) {
        if let Some(tx) = &self.client_events
            && tx.send(ev).is_err()
        {
            self.client_events = None;
        }
    }

    fn next_wake(&self, now: Instant) -> Duration {
        let mut t = Duration::from_millis(100);
        if !self.paused.is_empty()
            || !self.paused_clients.is_empty()
            || !self.held.is_empty()
            || !self.held_clients.is_empty()
        {
            t = Duration::from_millis(1);
        }
        let pending_hs = self.peers.values().any(|p| {
            matches!(&p.relay, Link::Handshaking { out, .. } if !out.is_empty())
                || matches!(&p.completion, Link::Handshaking { out, .. } if !out.is_empty())
        });
        if pending_hs {
            t = t.min(Duration::from_millis(5));
        }
        if let Some(d) = self.corr.poll_timeout() {
            t = t.min(d.saturating_duration_since(now));
        }
        if let Some(d) = self.accepts.poll_timeout() {
            t = t.min(d.saturating_duration_since(now));
        }
        for p in self.peers.values() {
            if p.up {
                t = t.min(p.next_ping.saturating_duration_since(now));
            }
            for l in [&p.relay, &p.completion] {
                match l {
                    Link::Handshaking { hs, .. } => {
                        if let Some(d) = hs.poll_timeout() {
                            t = t.min(d.saturating_duration_since(now));
                        }
                    }
                    Link::Retry { at } => t = t.min(at.saturating_duration_since(now)),
                    _ => {}
                }
            }
        }
        t
    }

    // ---------------------------------------------------------------- polling

    fn poll_once(&mut self) {
        let now = Instant::now();
        let mut timeout = self.next_wake(now);
        let sleeping = self.shared.bell.prepare_sleep();
        if !sleeping {
            timeout = Duration::ZERO;
        }
        let (rd, rr, rc, rcl, mr, mc, mcl) = {
            let s = &self.sockets;
            let mut items = Vec::with_capacity(7);
            items.push(self.door.socket.as_poll_item(zmq::POLLIN));
            // The relay socket is always read: peer windows bound what is held.
            items.push(s.relay.as_poll_item(zmq::POLLIN));
            items.push(s.completion.as_poll_item(zmq::POLLIN));
            items.push(s.mon_relay.as_poll_item(zmq::POLLIN));
            items.push(s.mon_completion.as_poll_item(zmq::POLLIN));
            if let (Some(c), Some(m)) = (&s.client, &s.mon_client) {
                // Always read: the client windows bound what is held.
                items.push(c.as_poll_item(zmq::POLLIN));
                items.push(m.as_poll_item(zmq::POLLIN));
            }
            let ms = if timeout.is_zero() {
                0
            } else {
                timeout.as_millis().max(1) as i64
            };
            let _ = zmq::poll(&mut items, ms);
            let r = |i: usize| items.get(i).is_some_and(|it| it.is_readable());
            (r(0), r(1), r(2), r(5), r(3), r(4), r(6))
        };
        self.shared.bell.awake();
        if rd {
            self.door.drain_rings();
        }
        if rc {
            self.read_socket(LinkKind::Completion);
        }
        if rr {
            self.read_socket(LinkKind::Relay);
        }
        if rcl {
            self.read_socket(LinkKind::Client);
        }
        if mr {
            self.read_monitor(LinkKind::Relay);
        }
        if mc {
            self.read_monitor(LinkKind::Completion);
        }
        if mcl {
            self.read_monitor(LinkKind::Client);
        }
    }

    fn read_socket(&mut self, kind: LinkKind) -> usize {
        let mut n = 0;
        // The receive buffers are reused for every message of the pass (libzmq closes the old
        // content on each receive): no allocation per message on this path.
        let mut rid = std::mem::replace(&mut self.rx_rid, zmq::Message::new());
        let mut parts = std::mem::take(&mut self.rx_parts);
        self.rx_now = Instant::now();
        while n < RECV_BATCH {
            let Some(count) = recv_frames_into(self.socket(kind), &mut rid, &mut parts) else {
                break;
            };
            n += 1;
            self.rx_source = if kind == LinkKind::Client {
                // A connection without a session may open one: its source address counts.
                if self.clients_by_rid.contains_key(&rid[..]) {
                    None
                } else {
                    parts
                        .first_mut()
                        .and_then(|m| m.gets("Peer-Address"))
                        .map(Arc::from)
                }
            } else if count == 1 && parts[0].get(1) == Some(&zlink_wire::Command::Hello.number()) {
                // A Hello starts a handshake that counts against its source address.
                parts[0].gets("Peer-Address").map(Arc::from)
            } else {
                None
            };
            // Each `zmq::Message` deref is two FFI calls (data, size): take the slices once.
            let rid_bytes: &[u8] = &rid;
            let mut slices: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
            for (slot, m) in slices.iter_mut().zip(&parts[..count]) {
                *slot = m;
            }
            let frames = &slices[..count.min(MAX_PARTS)];
            if let Some(tap) = &self.cfg.tap {
                let copy: Vec<Bytes> = frames.iter().map(|m| Bytes::copy_from_slice(m)).collect();
                tap.record(TapDirection::Received, kind, rid_bytes, &copy);
            }
            match kind {
                LinkKind::Client => self.on_client_message(rid_bytes, frames),
                _ => self.on_peer_message(kind, rid_bytes, frames),
            }
        }
        self.rx_rid = rid;
        self.rx_parts = parts;
        n
    }

    fn read_monitor(&mut self, kind: LinkKind) {
        let m = match kind {
            LinkKind::Relay => &self.sockets.mon_relay,
            LinkKind::Completion => &self.sockets.mon_completion,
            LinkKind::Client => match &self.sockets.mon_client {
                Some(m) => m,
                None => return,
            },
        };
        let mut events = Vec::new();
        while let Some((first, parts)) = recv_multipart(m) {
            if first.len() < 6 {
                continue;
            }
            let ev = u16::from_le_bytes([first[0], first[1]]);
            let addr = parts
                .first()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .unwrap_or_default();
            let value = u32::from_le_bytes([first[2], first[3], first[4], first[5]]);
            events.push((ev, value, addr));
        }
        for (ev, value, addr) in events {
            let ev = zmq::SocketEvent::from_raw(ev);
            match ev {
                zmq::SocketEvent::ACCEPTED => self.shared.counters.event(TransportEvent::Accepted),
                zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL
                    if value == codec::ZMQ_PROTOCOL_ERROR_MESSAGE_TOO_LARGE =>
                {
                    self.shared.counters.drop(
                        DropReason::MessageTooLarge,
                        &format_args!("{kind:?} {addr}"),
                    );
                }
                zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL
                | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL
                | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH => {
                    self.shared
                        .counters
                        .drop(DropReason::ZmtpProtocol, &format_args!("{kind:?} {addr}"));
                }
                zmq::SocketEvent::DISCONNECTED => {
                    self.shared.counters.event(TransportEvent::Disconnected);
                    if let Some((node, k)) = self.endpoints.get(&addr).cloned()
                        && k == kind
                    {
                        // Our outbound connection dropped: libzmq reconnects; the handshake
                        // re-runs on the new connection.
                        self.peer_down(&node, DownReason::Disconnected, false);
                        let now = Instant::now();
                        self.start_initiator(&node, kind, now);
                    }
                }
                zmq::SocketEvent::HANDSHAKE_SUCCEEDED => {
                    if let Some((node, k)) = self.endpoints.get(&addr).cloned()
                        && k == kind
                    {
                        self.pump_handshake(&node, kind);
                    }
                }
                _ => {}
            }
        }
    }

    // ---------------------------------------------------------------- ingress

    fn on_peer_message(&mut self, kind: LinkKind, rid: &[u8], parts: &[&[u8]]) {
        let cached = self.rid_cache.get(rid).cloned();
        let was_cached = cached.is_some();
        let node: Arc<NodeRid> = match cached.or_else(|| {
            // A connection another node opened, proved; else our own connection to the node
            // named by its routing id (checked against the peer in `on_peer_record`).
            if let Some(n) = self.accepts.proved(kind, rid) {
                return Some(n.clone());
            }
            std::str::from_utf8(rid)
                .ok()
                .and_then(|s| NodeRid::new(s).ok())
                .map(Arc::new)
        }) {
            Some(n) => n,
            None => {
                self.shared
                    .counters
                    .drop(DropReason::InvalidRoutingId, &format_args!("{kind:?}"));
                return;
            }
        };
        let from = Sender::Peer {
            kind,
            rid,
            node: &node,
            was_cached,
        };
        self.on_parts(from, parts);
    }

    /// One message from a peer or a client: a 139 batch frame, or one record (envelope and
    /// optional payload); any other part count is `Malformed`.
    fn on_parts(&mut self, from: Sender<'_>, parts: &[&[u8]]) {
        match parts {
            [frame] if zlink_wire::is_batch(frame) => self.on_batch(from, frame),
            [envelope] => {
                self.on_record(from, envelope, Pl::None, false);
            }
            [envelope, payload] => {
                self.on_record(from, envelope, Pl::Copy(payload), false);
            }
            _ => {
                let e = zlink_wire::DecodeError::PartCount { count: parts.len() };
                self.shared
                    .counters
                    .drop(codec::drop_reason(&e), &format_args!("{from}: {e}"));
            }
        }
    }

    /// One record from a peer or a client (alone or from a batch), through the path of its
    /// kind of connection. `Some` when it was a plain one-way handed up in the compact form:
    /// a batch's fast path may follow it for that connection.
    fn on_record(
        &mut self,
        from: Sender<'_>,
        envelope: &[u8],
        payload: Pl<'_>,
        in_batch: bool,
    ) -> Option<Run> {
        match from {
            Sender::Peer {
                kind,
                rid,
                node,
                was_cached,
            } => self
                .on_peer_record(kind, rid, node, was_cached, envelope, payload, in_batch)
                .map(Run::Peer),
            Sender::Client { rid } => self
                .on_client_record(rid, envelope, payload, in_batch)
                .map(Run::Client),
        }
    }

    /// A 139 batch frame (from a peer or a client): copied once into one buffer, its framing
    /// validated as a whole (a broken frame is dropped once, `Malformed`, none of its records
    /// delivered), then every sub-record goes through exactly the checks of a record received
    /// alone (authentication, generation, frame format, connection kind, window), each
    /// rejected sub-record dropped and counted by itself. Payloads are copied out of the
    /// buffer ([`unpin`]): a held record pins only its bytes.
    fn on_batch(&mut self, from: Sender<'_>, frame: &[u8]) {
        let batch = match zlink_wire::BatchFrame::parse(Bytes::copy_from_slice(frame)) {
            Ok(b) => b,
            Err(e) => {
                self.shared
                    .counters
                    .drop(codec::drop_reason(&e), &format_args!("{from}: batch: {e}"));
                return;
            }
        };
        let mut records = batch.records().map(unpin);
        let mut next = records.next();
        while let Some(sub) = next.take() {
            let payload = match sub.payload {
                Some(p) => Pl::Shared(p),
                None => Pl::None,
            };
            let run = self.on_record(from, sub.envelope, payload, true);
            next = records.next();
            // That record was a memoized one-way handed up in the compact form: the sender is
            // authenticated (a peer up in that generation on relay, a session not closing) and
            // nothing can change that between two sub-records of one frame (control inside a
            // batch is rejected, timers do not run here). The records after it that are
            // byte-identical one-ways take the same path with the connection looked up once;
            // each still has its payload bounded, its window charged and its credit freed,
            // exactly as a lone record. Anything else goes back through `on_record`.
            match (run, from) {
                (Some(Run::Peer(generation)), Sender::Peer { node, .. }) => {
                    let origin = || Origin::Peer {
                        node: NodeRid::clone(node),
                        generation,
                    };
                    next = self.fast_one_ways(
                        ConnRef::Peer(node, Some(generation)),
                        &origin,
                        &**node,
                        next,
                        &mut records,
                    );
                }
                (Some(Run::Client(session)), Sender::Client { .. }) => {
                    let origin = || Origin::Client {
                        session: SessionRid::new(session),
                    };
                    next = self.fast_one_ways(
                        ConnRef::Client(session),
                        &origin,
                        &ClientLabel(session),
                        next,
                        &mut records,
                    );
                }
                _ => {}
            }
        }
    }

    /// The run of memoized one-way records that follows one handed up by `on_peer_record` or
    /// `on_client_record` (see [`Engine::on_peer_batch`], [`Engine::on_client_batch`]), for the
    /// connection `of` (a peer in the generation the first record proved, or a session), each
    /// taken by [`OneWayRun::take`] exactly as a lone record would be; returns the first
    /// record it did not take.
    fn fast_one_ways<'a>(
        &mut self,
        of: ConnRef<'_>,
        origin: &dyn Fn() -> Origin,
        who: &dyn std::fmt::Display,
        mut next: Option<zlink_wire::BatchRecord<'a>>,
        records: &mut impl Iterator<Item = zlink_wire::BatchRecord<'a>>,
    ) -> Option<zlink_wire::BatchRecord<'a>> {
        let Some(key) = self.memo.one_way_key() else {
            return next;
        };
        // Held records go first (FIFO); nothing in a run adds to them.
        let held = match of {
            ConnRef::Peer(..) => !self.held.is_empty(),
            ConnRef::Client(_) => !self.held_clients.is_empty(),
        };
        if held {
            return next;
        }
        loop {
            // Looked up again after each grant: the peer must still be up in the generation
            // of the run on relay, the session not closing.
            let conn = match of {
                ConnRef::Peer(node, Some(generation)) => self
                    .peers
                    .get_mut(node)
                    .filter(|p| {
                        p.generation == Some(generation)
                            && matches!(p.relay, Link::Up(g) if g == generation)
                    })
                    .map(|p| &mut p.conn),
                ConnRef::Peer(_, None) => None,
                ConnRef::Client(session) => self
                    .clients
                    .get_mut(&session)
                    .filter(|c| c.closing.is_none())
                    .map(|c| &mut c.conn),
            };
            let Some(conn) = conn else {
                return next;
            };
            let mut run = OneWayRun {
                memo: &self.memo,
                inbound: &mut self.inbound,
                counters: &self.shared.counters,
                max_payload: self.limits.max_payload,
                now: self.rx_now,
                key,
            };
            let credit;
            (next, credit) = run.take(conn, origin, who, next, records);
            if !credit {
                return next;
            }
            self.flush_grant(of);
        }
    }

    /// Decodes one record (from a peer or a client, alone or from a batch) through the one-way
    /// memo: a repeated one-way envelope (byte-identical to the last one decoded) is not
    /// decoded again, its payload bounded and copied as [`decode_counted`] does; anything else
    /// is decoded (rejections counted against `who`) and classified. On a memo hit the record
    /// is cloned from the memo only where it is handed up (`record` is `None`).
    fn decode_memoized(
        &mut self,
        envelope: &[u8],
        payload: Pl<'_>,
        who: &dyn std::fmt::Display,
    ) -> Option<MemoDecoded> {
        let memo = match &payload {
            Pl::None => None,
            p if p.len() <= self.limits.max_payload => self.memo.header(envelope),
            _ => None,
        };
        Some(match memo {
            // The memo holds only one-way 147 records: application class.
            Some(header) => MemoDecoded {
                header,
                class: Class::App,
                record: None,
                payload: payload.into_bytes(),
                from_memo: true,
            },
            None => {
                let has_payload = !matches!(payload, Pl::None);
                let d = decode_counted(&self.shared, &self.limits, envelope, payload, who)?;
                if has_payload {
                    self.memo.store(envelope, &d);
                }
                let (class, record) = codec::classify(d.record);
                MemoDecoded {
                    header: d.header,
                    class,
                    record,
                    payload: d.payload,
                    from_memo: false,
                }
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn on_peer_record(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        node: &Arc<NodeRid>,
        was_cached: bool,
        envelope: &[u8],
        payload: Pl<'_>,
        in_batch: bool,
    ) -> Option<NodeGeneration> {
        let bytes = (envelope.len() + payload.len()) as u64;
        let MemoDecoded {
            header,
            class,
            record,
            payload,
            from_memo,
        } = self.decode_memoized(envelope, payload, node)?;
        let corr = header.correlation.get();
        if in_batch && !matches!(class, Class::App | Class::Reply) {
            // Handshake and control records never travel in a batch (SB-5.4: control is sent
            // alone, on the completion connection).
            self.shared.counters.drop(
                DropReason::WrongConnection,
                &format_args!("{node}: control record inside a batch on {kind:?}"),
            );
            return None;
        }
        if let Class::Handshake(m) = class {
            self.handle_handshake_msg(kind, rid, NodeRid::clone(node), m);
            return None;
        }
        let Some(p) = self.peers.get_mut(&**node).filter(|p| p.rid(kind) == rid) else {
            // Unknown, or not the connection that proved itself for this node.
            self.shared.counters.drop(DropReason::Unauthenticated, node);
            return None;
        };
        if !was_cached && self.rid_cache.len() < 4096 {
            self.rid_cache.insert(rid.to_vec(), node.clone());
        }
        let current = p.generation;
        let generation = match (p.link_mut(kind), current) {
            (Link::Up(g), Some(cur)) if *g == cur => cur,
            (Link::Up(_), _) => {
                self.shared.counters.drop(DropReason::StaleGeneration, node);
                return None;
            }
            _ => {
                self.shared.counters.drop(DropReason::Unauthenticated, node);
                return None;
            }
        };
        // The connection core decides (window charged, credit added, liveness noted) with
        // this one lookup of the peer; the rest here acts on its verdict.
        let lane = if kind == LinkKind::Relay {
            Lane::Relay
        } else {
            Lane::Completion
        };
        match (p.conn.ingress(lane, &class, bytes, self.rx_now), record) {
            (Verdict::Answer(pong), _) => {
                let rid_vec = p.rid(LinkKind::Completion).to_vec();
                self.send_control(LinkKind::Completion, &rid_vec, Record::Pong(pong));
            }
            (Verdict::Control { resume }, _) => {
                if resume && !p.conn.queue.is_empty() {
                    self.paused.insert(NodeRid::clone(node));
                }
            }
            (Verdict::Disconnect, _) => self.peer_down(node, DownReason::Remote, true),
            (Verdict::Complete, Some(rec)) => {
                self.complete(corr, (node.clone(), generation), rec, payload)
            }
            (Verdict::Drop(DropReason::CreditExceeded), _) => {
                // The peer ignored its window: a protocol violation, counted.
                self.shared.counters.drop(DropReason::CreditExceeded, node);
            }
            (Verdict::Deliver, rec) if rec.is_some() || from_memo => {
                // A plain one-way record (no correlation, so no reply and no deadline) goes up
                // in the compact form (see `inbound`); on a memo hit the record is not even
                // cloned.
                let one_way_key = match &rec {
                    None => self.memo.one_way_key(),
                    Some(Record::OneWay(o)) if corr == 0 => Some(o.key),
                    Some(_) => None,
                };
                if let Some(key) = one_way_key
                    && corr == 0
                    && payload.is_some()
                    && self.held.is_empty()
                    && self.inbound.has_room()
                {
                    let origin = Origin::Peer {
                        node: NodeRid::clone(node),
                        generation,
                    };
                    self.inbound
                        .push_one_way(origin, key, payload.expect("checked"));
                    self.shared.counters.delivered(1);
                    if p.conn.released(bytes) {
                        self.flush_grant(ConnRef::Peer(node, None));
                    }
                    return Some(generation);
                }
                let rec = match rec {
                    Some(r) => r,
                    None => self.memo.record(),
                };
                if let Some(target) = codec::target_generation(&rec)
                    && target != self.local.generation
                {
                    // A record addressed to an older (or other) lifecycle of this node.
                    self.shared.counters.drop(
                        DropReason::StaleGeneration,
                        &format_args!("{node}: targets generation {target}"),
                    );
                    if corr != 0 {
                        let frames = codec::encode(
                            &Record::ErrorReply(zlink_wire::ErrorReply::new(
                                codec::ErrorKind::Unavailable,
                                "stale target node generation",
                            )),
                            corr,
                            None,
                        )
                        .unwrap_or_default();
                        self.send_reply(
                            ReplyTarget::Peer {
                                node: node.clone(),
                                generation,
                            },
                            frames,
                        );
                    }
                    return None;
                }
                let reply = (corr != 0).then(|| {
                    ReplyHandle::new(
                        self.shared.clone(),
                        ReplyTarget::Peer {
                            node: node.clone(),
                            generation,
                        },
                        corr,
                    )
                });
                let deadline = codec::record_deadline(&rec).map(|d| self.rx_now + d);
                let origin = Origin::Peer {
                    node: NodeRid::clone(node),
                    generation,
                };
                if let Some(sink) = self.sink.as_mut() {
                    // Direct delivery (`crate::sink`); what it passes goes up as below.
                    let inb = Inbound {
                        origin,
                        correlation: header.correlation,
                        record: rec,
                        payload,
                        deadline,
                        reply,
                    };
                    match sink.offer(inb, bytes) {
                        Offer::Taken => {
                            self.shared.counters.delivered(1);
                            if p.conn.released(bytes) {
                                self.flush_grant(ConnRef::Peer(node, None));
                            }
                        }
                        Offer::Held => self.shared.counters.delivered(1),
                        Offer::Pass(inb) => self.hand_up_peer(node, generation, bytes, inb),
                    }
                    return None;
                }
                // Hand up (or hold, FIFO, while the inbound channel is full) and count the
                // freed credit with this same lookup of the peer. Room is checked before the
                // record is built so that it is moved once, straight into the batch.
                if self.held.is_empty() && self.inbound.has_room() {
                    self.inbound.push(Inbound {
                        origin,
                        correlation: header.correlation,
                        record: rec,
                        payload,
                        deadline,
                        reply,
                    });
                    self.shared.counters.delivered(1);
                    if p.conn.released(bytes) {
                        self.flush_grant(ConnRef::Peer(node, None));
                    }
                } else {
                    let inb = Inbound {
                        origin,
                        correlation: header.correlation,
                        record: rec,
                        payload,
                        deadline,
                        reply,
                    };
                    self.held.push_back((node.clone(), generation, bytes, inb));
                }
            }
            (Verdict::Drop(reason), _) => self
                .shared
                .counters
                .drop(reason, &format_args!("{node} on {kind:?}")),
            (Verdict::Complete | Verdict::Deliver, _) => self.shared.counters.drop(
                DropReason::WrongConnection,
                &format_args!("{node} on {kind:?}"),
            ),
        }
        None
    }

    /// Hands a relay record up through the inbound channel, or holds it (FIFO) while the
    /// channel is full; credit is returned once it moved up.
    fn hand_up_peer(
        &mut self,
        node: &Arc<NodeRid>,
        generation: NodeGeneration,
        bytes: u64,
        inb: Inbound,
    ) {
        if self.held.is_empty() {
            match self.inbound.try_push(inb) {
                Ok(()) => {
                    self.shared.counters.delivered(1);
                    self.credit_freed(ConnRef::Peer(node, Some(generation)), bytes);
                }
                Err(inb) => self.held.push_back((node.clone(), generation, bytes, inb)),
            }
        } else {
            self.held.push_back((node.clone(), generation, bytes, inb));
        }
    }

    fn complete(
        &mut self,
        corr: u64,
        from: (Arc<NodeRid>, NodeGeneration),
        rec: Record,
        payload: Option<Bytes>,
    ) {
        match self.corr.handle_reply(corr, &from) {
            ReplyOutcome::Deliver(w) => {
                let _ = w.send(reply_result(rec, payload));
            }
            ReplyOutcome::Late(t) => self.shared.counters.drop(
                DropReason::LateReply,
                &format_args!("corr {corr} after {t:?}"),
            ),
            ReplyOutcome::Unknown | ReplyOutcome::WrongPeer => self
                .shared
                .counters
                .drop(DropReason::UnknownReply, &format_args!("corr {corr}")),
        }
    }

    fn on_client_message(&mut self, rid: &[u8], parts: &[&[u8]]) {
        self.tomb_answered = false;
        self.on_parts(Sender::Client { rid }, parts);
    }

    /// One record from a client (alone or from a batch): decode (the one-way memo applies, as
    /// for peers), control inside a batch rejected, session (created on the first record of a
    /// connection, within `max_clients`), Ping/Pong/Disconnect answered here, requests and
    /// one-way DATA charged to the client's receive window (`CreditExceeded`) and handed up —
    /// a plain one-way in the compact form — or held (FIFO) while the application queue is
    /// full; anything else `WrongConnection`. Returns the session when the record was a plain
    /// one-way handed up in the compact form (a batch's fast path may follow it).
    fn on_client_record(
        &mut self,
        rid: &[u8],
        envelope: &[u8],
        payload: Pl<'_>,
        in_batch: bool,
    ) -> Option<u64> {
        let bytes = (envelope.len() + payload.len()) as u64;
        let MemoDecoded {
            header,
            class,
            record,
            payload,
            from_memo,
        } = self.decode_memoized(envelope, payload, &"client")?;
        if in_batch && !matches!(class, Class::App) {
            // Control records (Ping, Disconnect, …) never travel in a batch (SB-5.4).
            self.shared.counters.drop(
                DropReason::WrongConnection,
                &"client: control record inside a batch",
            );
            return None;
        }
        let now = self.rx_now;
        let session = match self.clients_by_rid.get(rid) {
            Some(s) => *s,
            None => {
                if let Some(reason) = self.tombstones.get(rid) {
                    // The node ended this connection's session: no new one on it.
                    self.shared.counters.drop(
                        DropReason::SessionClosed,
                        &"client: record on a closed session's connection",
                    );
                    if !self.tomb_answered && !matches!(class, Class::Disconnect(_)) {
                        self.tomb_answered = true;
                        self.send_control(
                            LinkKind::Client,
                            rid,
                            Record::Disconnect(Disconnect { reason }),
                        );
                    }
                    return None;
                }
                if self.clients.len() >= self.cfg.max_clients {
                    self.shared
                        .counters
                        .drop(DropReason::HandshakeCapacity, &"client");
                    return None;
                }
                let source = self.rx_source.clone();
                let stranger = match self.cfg.client_admission {
                    ClientAdmission::Open => None,
                    ClientAdmission::OnAccept(strangers) => Some(strangers),
                };
                if let Some(st) = stranger
                    && self.strangers >= st.max
                {
                    self.shared
                        .counters
                        .drop(DropReason::HandshakeCapacity, &"client: strangers");
                    return None;
                }
                if let Some(src) = &source {
                    let n = self.sessions_by_source.get(src).copied().unwrap_or(0);
                    let m = self.strangers_by_source.get(src).copied().unwrap_or(0);
                    if n >= self.cfg.max_clients_per_source
                        || stranger.is_some_and(|st| m >= st.max_per_source)
                    {
                        self.shared
                            .counters
                            .drop(DropReason::SourceCapacity, &format_args!("client {src}"));
                        return None;
                    }
                    *self.sessions_by_source.entry(src.clone()).or_insert(0) += 1;
                    if stranger.is_some() {
                        *self.strangers_by_source.entry(src.clone()).or_insert(0) += 1;
                    }
                }
                if stranger.is_some() {
                    self.strangers += 1;
                }
                let window = stranger.map_or(self.cfg.client_window, |st| st.window);
                let s = self.next_session;
                self.next_session += 1;
                let budget = Arc::new(Budget::new(self.cfg.client_budget));
                self.clients.insert(
                    s,
                    Client {
                        rid: rid.to_vec(),
                        conn: Conn::granted(window, budget.clone(), now),
                        stranger: stranger.is_some(),
                        closing: None,
                        source,
                    },
                );
                self.clients_by_rid.insert(rid.to_vec(), s);
                self.shared.set_client(s, Some(budget));
                self.flush_grant(ConnRef::Client(s));
                self.shared.publish(PeerEvent::ClientConnected {
                    session: SessionRid::new(s),
                });
                self.client_event(ClientEvent::Connected {
                    session: SessionRid::new(s),
                });
                s
            }
        };
        let corr = header.correlation;
        let c = self.clients.get_mut(&session)?;
        if matches!(class, Class::App) {
            if !(from_memo || matches!(record, Some(Record::Request(_) | Record::OneWay(_)))) {
                // Only requests and one-way DATA are application records from a client.
                c.conn.last_rx = now;
                self.shared
                    .counters
                    .drop(DropReason::WrongConnection, &"client");
                return None;
            }
            if c.closing.is_some() {
                self.shared.counters.drop(
                    DropReason::SessionClosed,
                    &format_args!("client {session}: session closing"),
                );
                return None;
            }
        }
        // The connection core decides (window charged, liveness noted); the rest here acts on
        // its verdict.
        match (c.conn.ingress(Lane::Client, &class, bytes, now), record) {
            (Verdict::Answer(pong), _) => {
                self.send_control(LinkKind::Client, rid, Record::Pong(pong))
            }
            (Verdict::Control { .. }, _) => {}
            (Verdict::Disconnect, _) => {
                if self
                    .clients
                    .get(&session)
                    .is_some_and(|c| c.closing.is_some())
                {
                    // The node was already closing it: that close stands.
                    self.finish_client(session);
                } else {
                    self.remove_client(session, ClientCloseCause::Remote);
                }
            }
            (Verdict::Deliver, rec) => {
                let c = self.clients.get_mut(&session)?;
                if let Some(sink) = self.sink.as_mut() {
                    // Direct delivery (`crate::sink`); what it passes goes up as below.
                    let rec = match rec {
                        Some(r) => r,
                        None => self.memo.record(),
                    };
                    let deadline = codec::record_deadline(&rec).map(|d| now + d);
                    let reply = corr.is_some().then(|| {
                        ReplyHandle::new(
                            self.shared.clone(),
                            ReplyTarget::Client { session },
                            corr.get(),
                        )
                    });
                    let inb = Inbound {
                        origin: Origin::Client {
                            session: SessionRid::new(session),
                        },
                        correlation: corr,
                        record: rec,
                        payload,
                        deadline,
                        reply,
                    };
                    match sink.offer(inb, bytes) {
                        Offer::Taken => {
                            self.shared.counters.delivered(1);
                            if c.conn.released(bytes) {
                                self.flush_grant(ConnRef::Client(session));
                            }
                        }
                        Offer::Held => self.shared.counters.delivered(1),
                        Offer::Pass(inb) => self.deliver_client(session, bytes, inb),
                    }
                    return None;
                }
                // A plain one-way record (no correlation: no reply, no deadline) goes up in the
                // compact form, as from peers; on a memo hit the record is not even cloned.
                let one_way_key = match &rec {
                    None => self.memo.one_way_key(),
                    Some(Record::OneWay(o)) if corr.is_none() => Some(o.key),
                    Some(_) => None,
                };
                if let Some(key) = one_way_key
                    && corr.is_none()
                    && payload.is_some()
                    && self.held_clients.is_empty()
                    && self.inbound.has_room()
                {
                    let origin = Origin::Client {
                        session: SessionRid::new(session),
                    };
                    self.inbound
                        .push_one_way(origin, key, payload.expect("checked"));
                    self.shared.counters.delivered(1);
                    if c.conn.released(bytes) {
                        self.flush_grant(ConnRef::Client(session));
                    }
                    return Some(session);
                }
                let rec = match rec {
                    Some(r) => r,
                    None => self.memo.record(),
                };
                let deadline = codec::record_deadline(&rec).map(|d| now + d);
                let reply = corr.is_some().then(|| {
                    ReplyHandle::new(
                        self.shared.clone(),
                        ReplyTarget::Client { session },
                        corr.get(),
                    )
                });
                let inb = Inbound {
                    origin: Origin::Client {
                        session: SessionRid::new(session),
                    },
                    correlation: corr,
                    record: rec,
                    payload,
                    deadline,
                    reply,
                };
                self.deliver_client(session, bytes, inb);
            }
            (Verdict::Drop(reason), _) => {
                // CreditExceeded: the client ignored its window, a protocol violation.
                self.shared
                    .counters
                    .drop(reason, &format_args!("client {session}"));
            }
            (Verdict::Complete, _) => self
                .shared
                .counters
                .drop(DropReason::WrongConnection, &"client"),
        }
        None
    }

    /// Hands a client record up, or holds it (FIFO over all clients, so each client's order is
    /// kept, EG-4) while the inbound channel is full. Each client's window bounds what is held,
    /// so the client socket is always read (Pings, new clients); credit is returned once the
    /// record moved up.
    fn deliver_client(&mut self, session: u64, bytes: u64, inb: Inbound) {
        if self.held_clients.is_empty() {
            match self.inbound.try_push(inb) {
                Ok(()) => {
                    self.shared.counters.delivered(1);
                    self.credit_freed(ConnRef::Client(session), bytes);
                }
                Err(inb) => self
                    .held_clients
                    .push_back(HeldClient::Record(session, bytes, inb)),
            }
        } else {
            self.held_clients
                .push_back(HeldClient::Record(session, bytes, inb));
        }
    }

    /// The connection core of a peer (in `generation`, if given) or a client session, with
    /// the connection its grants go out on.
    fn conn_of(&self, to: ConnRef<'_>) -> Option<(&Conn, LinkKind, &[u8])> {
        match to {
            ConnRef::Peer(node, generation) => self
                .peers
                .get(node)
                .filter(|p| generation.is_none() || p.generation == generation)
                .map(|p| (&p.conn, LinkKind::Completion, p.rid(LinkKind::Completion))),
            ConnRef::Client(session) => self
                .clients
                .get(&session)
                .map(|c| (&c.conn, LinkKind::Client, &c.rid[..])),
        }
    }

    fn conn_mut(&mut self, to: ConnRef<'_>) -> Option<&mut Conn> {
        match to {
            ConnRef::Peer(node, generation) => self
                .peers
                .get_mut(node)
                .filter(|p| generation.is_none() || p.generation == generation)
                .map(|p| &mut p.conn),
            ConnRef::Client(session) => self.clients.get_mut(&session).map(|c| &mut c.conn),
        }
    }

    /// One delivered record of `bytes` left the receive window of `from`; credit goes back in
    /// batches (a peer's only within the generation that sent the record).
    fn credit_freed(&mut self, from: ConnRef<'_>, bytes: u64) {
        if self.conn_mut(from).is_some_and(|c| c.released(bytes)) {
            self.flush_grant(from);
        }
    }

    /// Grants `to` its freed credit now (a FlowCredit on the peer's completion connection or
    /// on the client connection). Only once libzmq took the record is the credit considered
    /// returned; otherwise it stays owed and housekeeping retries (a lost grant would stall
    /// the sender for ever).
    fn flush_grant(&mut self, to: ConnRef<'_>) {
        let Some((conn, kind, rid)) = self.conn_of(to) else {
            return;
        };
        let Some(grant) = conn.poll_grant() else {
            return;
        };
        let frames = codec::encode_control(Record::FlowCredit(grant));
        if matches!(self.raw_send(kind, rid, &frames), SendOutcome::Sent)
            && let Some(conn) = self.conn_mut(to)
        {
            conn.grant_sent(grant);
        }
    }

    fn retry_stalled(&mut self) {
        while let Some((node, generation, bytes, inb)) = self.held.pop_front() {
            match self.inbound.try_push(inb) {
                Ok(()) => {
                    self.shared.counters.delivered(1);
                    self.credit_freed(ConnRef::Peer(&node, Some(generation)), bytes);
                }
                Err(inb) => {
                    self.held.push_front((node, generation, bytes, inb));
                    break;
                }
            }
        }
        while let Some(h) = self.held_clients.pop_front() {
            match h {
                HeldClient::Ended(session, cause) => {
                    // Its last record went up just before: make it visible first.
                    self.inbound.flush();
                    self.client_event(ClientEvent::Disconnected {
                        session: SessionRid::new(session),
                        cause,
                    });
                }
                HeldClient::Record(session, bytes, inb) => match self.inbound.try_push(inb) {
                    Ok(()) => {
                        self.shared.counters.delivered(1);
                        self.credit_freed(ConnRef::Client(session), bytes);
                    }
                    Err(inb) => {
                        self.held_clients
                            .push_front(HeldClient::Record(session, bytes, inb));
                        break;
                    }
                },
            }
        }
        self.inbound.flush();
    }

    fn shutdown_sequence(&mut self) {
        if self.aborted {
            // A crash as seen from outside: nobody is told; the requests here still end.
            for (_, w) in self
                .corr
                .handle_timeout(Instant::now() + Duration::from_secs(86_400 * 365))
            {
                let _ = w.send(Err(RequestError::Closed));
            }
            self.shared.mark_closed();
            return;
        }
        let ups: Vec<Vec<u8>> = self
            .peers
            .values()
            .filter(|p| p.up)
            .map(|p| p.rid(LinkKind::Completion).to_vec())
            .collect();
        for rid in ups {
            self.send_control(
                LinkKind::Completion,
                &rid,
                Record::Disconnect(Disconnect {
                    reason: DisconnectReason::Shutdown,
                }),
            );
        }
        // Clients: what is queued goes out as far as libzmq takes it now, then Disconnect
        // { Shutdown } (or the reason of a close in progress); each session reports its end.
        let now = Instant::now();
        let mut sessions: Vec<u64> = self.clients.keys().copied().collect();
        sessions.sort_unstable();
        for s in sessions {
            self.close_client(s, ClientCloseCause::Shutdown, now);
            if self.clients.contains_key(&s) {
                self.finish_client(s);
            }
        }
        // Held records are never handed up now; a pending end is still reported.
        for h in std::mem::take(&mut self.held_clients) {
            if let HeldClient::Ended(session, cause) = h {
                self.client_event(ClientEvent::Disconnected {
                    session: SessionRid::new(session),
                    cause,
                });
            }
        }
        for (_, w) in self
            .corr
            .handle_timeout(Instant::now() + Duration::from_secs(86_400 * 365))
        {
            let _ = w.send(Err(RequestError::Closed));
        }
        self.shared.mark_closed();
    }
}

/// Whose connection core: a peer's (in a generation; `None`: the current one) or a client
/// session's.
#[derive(Clone, Copy, Debug)]
enum ConnRef<'a> {
    Peer(&'a NodeRid, Option<NodeGeneration>),
    Client(u64),
}

/// A record was a plain one-way handed up in the compact form ([`Engine::on_record`]): the
/// connection a batch's fast path may continue with — the sending peer in the generation it
/// proved, or the session.
#[derive(Clone, Copy, Debug)]
enum Run {
    Peer(NodeGeneration),
    Client(u64),
}

/// Who sent the message being handled: a peer (on which mesh connection, by which routing
/// id, resolved to which node, whether from the routing-id cache) or a client connection.
#[derive(Clone, Copy)]
enum Sender<'m> {
    Peer {
        kind: LinkKind,
        rid: &'m [u8],
        node: &'m Arc<NodeRid>,
        was_cached: bool,
    },
    Client {
        rid: &'m [u8],
    },
}

impl std::fmt::Display for Sender<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sender::Peer { node, .. } => write!(f, "{node}"),
            Sender::Client { .. } => f.write_str("client"),
        }
    }
}

/// One session from `src` ended (or stopped being a stranger): count it down, forget the
/// source at zero.
fn count_down(by_source: &mut SeededMap<Arc<str>, usize>, src: &Arc<str>) {
    if let Some(n) = by_source.get_mut(src) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            by_source.remove(src);
        }
    }
}

/// A batch sub-record whose payload no longer points into the batch frame (copied out): a
/// record the node holds pins only its own bytes, which its window charge counts. Slices would
/// keep the whole frame alive — a frame of junk around one small valid record pinned the frame
/// (up to the message limit) for a few bytes charged.
fn unpin(mut r: zlink_wire::BatchRecord<'_>) -> zlink_wire::BatchRecord<'_> {
    r.payload = r.payload.map(|p| Bytes::copy_from_slice(&p));
    r
}

/// Connects `s` to `ep` announcing the routing id `rid` on that connection (libzmq takes the
/// socket's routing id at connect time; the bound listener keeps the one of the bind).
fn connect_as(s: &zmq::Socket, rid: &[u8], ep: &str) -> Result<(), zmq::Error> {
    s.set_identity(rid)?;
    s.connect(ep)
}

/// Sends the routing id that starts a message, without blocking: `Err` with the outcome when
/// libzmq refuses it (HWM: PAUSED; no such peer: unreachable). Once it is accepted, the rest of
/// the message is too.
#[inline]
fn send_routing_id(s: &zmq::Socket, rid: &[u8]) -> Result<(), SendOutcome> {
    match s.send(rid, zmq::SNDMORE | zmq::DONTWAIT) {
        Ok(()) => Ok(()),
        Err(zmq::Error::EAGAIN) => Err(SendOutcome::Paused),
        Err(_) => Err(SendOutcome::Unreachable),
    }
}

/// Sends one message (routing id, then the parts) without blocking.
#[inline]
fn raw_send_on(
    s: &zmq::Socket,
    tap: Option<&WireTap>,
    kind: LinkKind,
    rid: &[u8],
    frames: &[Bytes],
) -> SendOutcome {
    if let Err(refused) = send_routing_id(s, rid) {
        return refused;
    }
    // Recorded once the routing id was accepted (the message will be sent) and before its
    // last part completes it: the tap entry exists before the peer can receive the message.
    if let Some(tap) = tap {
        tap.record(TapDirection::Sent, kind, rid, frames);
    }
    let last = frames.len().saturating_sub(1);
    for (i, f) in frames.iter().enumerate() {
        let flags = if i == last {
            zmq::DONTWAIT
        } else {
            zmq::SNDMORE | zmq::DONTWAIT
        };
        // After the routing id was accepted the remaining parts of the message are too.
        let _ = s.send(&f[..], flags);
    }
    SendOutcome::Sent
}

/// The payload part of a received record: none, a slice of a libzmq frame (copied once into
/// its own `Bytes` after the size check, so libzmq's receive buffer is not pinned), or a slice
/// already shared from a batch frame's buffer.
pub(crate) enum Pl<'a> {
    None,
    Copy(&'a [u8]),
    Shared(Bytes),
}

impl Pl<'_> {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Pl::None => 0,
            Pl::Copy(p) => p.len(),
            Pl::Shared(p) => p.len(),
        }
    }

    #[inline]
    fn into_bytes(self) -> Option<Bytes> {
        match self {
            Pl::None => None,
            Pl::Copy(p) => Some(Bytes::copy_from_slice(p)),
            Pl::Shared(p) => Some(p),
        }
    }
}

/// Sends a one-part message (routing id, then `frame`) without blocking.
fn raw_send_one(
    s: &zmq::Socket,
    tap: Option<&WireTap>,
    kind: LinkKind,
    rid: &[u8],
    frame: &[u8],
) -> SendOutcome {
    if let Err(refused) = send_routing_id(s, rid) {
        return refused;
    }
    // Tap entry before the message is complete, as in `raw_send_on`.
    if let Some(tap) = tap {
        tap.record(
            TapDirection::Sent,
            kind,
            rid,
            &[Bytes::copy_from_slice(frame)],
        );
    }
    // After the routing id was accepted the remaining part of the message is too.
    let _ = s.send(frame, zmq::DONTWAIT);
    SendOutcome::Sent
}

#[inline]
fn decode_counted(
    shared: &Shared,
    limits: &Limits,
    envelope: &[u8],
    payload: Pl<'_>,
    who: &dyn std::fmt::Display,
) -> Option<Decoded> {
    // Bound before copying: the decoder re-checks the same limit.
    let decoded = if payload.len() > limits.max_payload {
        Err(zlink_wire::DecodeError::PayloadTooLarge {
            len: payload.len(),
            max: limits.max_payload,
        })
    } else {
        zlink_wire::decode_parts(envelope, payload.into_bytes(), limits)
    };
    match decoded {
        Ok(f) => Some(f),
        Err(e) => {
            shared
                .counters
                .drop(codec::drop_reason(&e), &format_args!("{who}: {e}"));
            None
        }
    }
}

/// Turns a terminal reply record into the request's result.
pub(crate) fn reply_result(rec: Record, payload: Option<Bytes>) -> Result<Response, RequestError> {
    match rec {
        Record::ErrorReply(e) => Err(RequestError::Remote {
            kind: e.kind,
            detail: e.detail,
        }),
        record => Ok(Response { record, payload }),
    }
}

/// Reads one multipart message without blocking, without copying and without allocating,
/// into reused buffers: the routing id into `rid`, the remaining parts into `parts[..count]`.
/// Returns `count`. Messages with more than [`MAX_PARTS`] parts are consumed and returned
/// with one extra empty part so that they fail decoding.
pub(crate) fn recv_frames_into(
    s: &zmq::Socket,
    rid: &mut zmq::Message,
    parts: &mut Vec<zmq::Message>,
) -> Option<usize> {
    s.recv(rid, zmq::DONTWAIT).ok()?;
    let mut more = rid.get_more();
    let mut count = 0;
    let mut n = 1;
    while more {
        if count == parts.len() {
            parts.push(zmq::Message::new());
        }
        if s.recv(&mut parts[count], zmq::DONTWAIT).is_err() {
            break;
        }
        more = parts[count].get_more();
        n += 1;
        // Up to MAX_PARTS parts are kept; one more is kept as the marker (decoding fails on
        // the part count); any further part is received into that scratch slot.
        if n <= MAX_PARTS + 1 {
            count += 1;
        }
    }
    Some(count)
}

/// Reads one multipart message without blocking: (first part, remaining parts). Messages with
/// more than [`MAX_PARTS`] parts are consumed and returned truncated to one extra empty part
/// so that they fail decoding.
pub(crate) fn recv_multipart(s: &zmq::Socket) -> Option<(Bytes, Vec<Bytes>)> {
    let first = s.recv_msg(zmq::DONTWAIT).ok()?;
    let first_bytes = Bytes::copy_from_slice(&first);
    let mut more = first.get_more();
    let mut parts = Vec::new();
    let mut n = 1;
    while more {
        let Ok(m) = s.recv_msg(zmq::DONTWAIT) else {
            break;
        };
        more = m.get_more();
        n += 1;
        if n <= MAX_PARTS {
            parts.push(Bytes::copy_from_slice(&m));
        } else if n == MAX_PARTS + 1 {
            parts.push(Bytes::new());
        }
    }
    Some((first_bytes, parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlink_wire::DispatchKey;

    fn one_way(key: u32) -> Parts {
        codec::encode(
            &Record::OneWay(zlink_wire::OneWay {
                key: DispatchKey::new(key),
            }),
            0,
            Some(Bytes::from_static(b"payload")),
        )
        .unwrap()
    }

    // spec: EG-1.2, SB-2.1 — the batch fast path charges the receive window per record, like
    // a lone record: a sender past its window (here: the node's grants could not be sent, so
    // the credit never came back) has each further record dropped and counted
    // `CreditExceeded`, never handed up; the records before go up in order; the run stops
    // after a record whose freed credit must be granted first, and at another envelope.
    #[test]
    fn one_way_run_charges_the_window_per_record() {
        let limits = codec::limits(1 << 20);
        let mut memo = DecodeMemo::default();
        let a = one_way(7);
        let d = zlink_wire::decode_parts(&a[0], Some(a[1].clone()), &limits).unwrap();
        memo.store(&a[0], &d);
        let other = one_way(8);
        let mut parts: Vec<&Parts> = vec![&a; 10];
        parts.push(&other);
        let frame =
            zlink_wire::encode_batch(parts.iter().map(|p| (&p[0][..], Some(&p[1][..])))).unwrap();
        let batch = zlink_wire::BatchFrame::parse(frame).unwrap();
        let mut records = batch.records();
        let (mut inbound, mut app) = crate::inbound::channel(1024);
        let counters = Counters::default();
        // window of 4 records, a quarter (1 record) freed asks for a grant
        let window = crate::config::InboundWindow {
            messages: 4,
            bytes: 1 << 20,
        };
        let now = Instant::now();
        let budget = Arc::new(Budget::new(crate::budget::OutboundBudget::default()));
        let mut conn = Conn::granted(window, budget, now - Duration::from_secs(1));
        conn.grant_sent(conn.poll_grant().expect("initial grant"));
        let mut run = OneWayRun {
            memo: &memo,
            inbound: &mut inbound,
            counters: &counters,
            max_payload: 1 << 20,
            now,
            key: DispatchKey::new(7),
        };
        let origin = || Origin::Client {
            session: SessionRid::new(1),
        };
        let mut next = records.next();
        let mut stops = 0;
        loop {
            let credit;
            (next, credit) = run.take(&mut conn, &origin, &ClientLabel(1), next, &mut records);
            if !credit {
                break;
            }
            // the grant cannot be sent: nothing is returned to the sender
            stops += 1;
        }
        assert_eq!(stops, 4, "one stop per freed record, for its grant");
        let rest = next.expect("stopped at the other envelope");
        assert_eq!(rest.envelope, &other[0][..]);
        assert!(records.next().is_none());
        assert_eq!(conn.last_rx, now);
        assert_eq!(counters.dropped(DropReason::CreditExceeded), 6);
        assert_eq!(counters.delivered_total(), 4);
        inbound.flush();
        let mut up = 0;
        while let Some(m) = app.try_recv() {
            let Record::OneWay(o) = m.record else {
                panic!("{:?}", m.record)
            };
            assert_eq!(o.key, DispatchKey::new(7));
            up += 1;
        }
        assert_eq!(up, 4, "exactly the charged records went up");
    }

    // Tombstones are bounded by their count: the oldest routing id is forgotten first; closing
    // the same connection again keeps one entry (with the latest reason).
    #[test]
    fn tombstones_forget_the_oldest_beyond_their_bound() {
        let mut t = Tombstones::new(2);
        assert_eq!(t.get(b"a"), None);
        t.insert(b"a".to_vec(), DisconnectReason::Timeout);
        t.insert(b"b".to_vec(), DisconnectReason::Closed);
        t.insert(b"b".to_vec(), DisconnectReason::Replaced);
        assert_eq!(t.get(b"a"), Some(DisconnectReason::Timeout));
        assert_eq!(t.get(b"b"), Some(DisconnectReason::Replaced));
        t.insert(b"c".to_vec(), DisconnectReason::Shutdown);
        assert_eq!(t.get(b"a"), None, "oldest forgotten");
        assert_eq!(t.get(b"b"), Some(DisconnectReason::Replaced));
        assert_eq!(t.get(b"c"), Some(DisconnectReason::Shutdown));
        assert_eq!((t.reasons.len(), t.order.len()), (2, 2));
        // A bound of 0 still remembers the last one.
        let mut t = Tombstones::new(0);
        t.insert(b"x".to_vec(), DisconnectReason::Closed);
        assert_eq!(t.get(b"x"), Some(DisconnectReason::Closed));
    }

    // The memo answers only for a byte-identical one-way envelope, with exactly what the
    // decoder returns for it; other envelopes (other key, requests) are decoded afresh.
    #[test]
    fn decode_memo_matches_the_decoder() {
        let limits = codec::limits(1 << 20);
        let mut memo = DecodeMemo::default();
        let a = one_way(7);
        assert!(memo.lookup(&a[0]).is_none());
        let d = zlink_wire::decode_parts(&a[0], Some(a[1].clone()), &limits).unwrap();
        memo.store(&a[0], &d);
        let (h, r) = memo.lookup(&one_way(7)[0]).expect("hit");
        assert_eq!((h, r), (d.header, d.record));
        assert!(memo.lookup(&one_way(8)[0]).is_none());
        let mut truncated = a[0].to_vec();
        truncated.pop();
        assert!(memo.lookup(&truncated).is_none());

        // A record with a correlation (a request, 42) is never memoized, even by a memo for its
        // command and short enough (its bytes depend on more than the key); nor is a record of
        // another command than the memo's.
        let req = codec::encode(
            &Record::Request(zlink_wire::Request {
                key: DispatchKey::new(7),
                deadline: zlink_wire::Deadline::from_millis(1000),
            }),
            42,
            Some(Bytes::from_static(b"payload")),
        )
        .expect("a request encodes");
        let d = zlink_wire::decode_parts(&req[0], Some(req[1].clone()), &limits).unwrap();
        assert_eq!(d.header.correlation.get(), 42);
        assert!(
            req[0].len() <= MEMO_ENVELOPE,
            "short enough to be memoized by size"
        );
        let mut m = DecodeMemo::for_command(zlink_wire::Command::Request);
        m.store(&req[0], &d);
        assert!(
            m.lookup(&req[0]).is_none(),
            "records with a correlation are not memoized"
        );
        let mut m = DecodeMemo::default();
        m.store(&req[0], &d);
        assert!(
            m.lookup(&req[0]).is_none(),
            "another command is not memoized"
        );
    }
}
