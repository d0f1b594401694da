//! The node's I/O thread: owns every libzmq socket of a node, validates ingress, runs the
//! handshakes, the correlation table, liveness and the PAUSED queues.
//!
//! A zmq driver around sans-IO state: the protocol decisions are the connection core's
//! ([`crate::conn`]: what a record may do on its connection, window and credit, the send
//! loop, liveness), the handshakes' ([`crate::handshake`], [`crate::accept`]), the
//! correlation table's ([`crate::correlation`]) and the session admission's
//! ([`crate::admission`]); this module reads and writes the sockets and acts on their
//! verdicts. Modules: [`ingress`] (read, decode, authenticate, act on the verdict),
//! [`deliver`] (one delivery path for peers and clients), [`send`] (queues and the transport of
//! the send loop), [`link`] (handshakes, peers up and down), [`clients`] (sessions),
//! [`commands`] (the API's commands), [`timers`] (housekeeping).
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
use zlink_wire::{Decoded, Disconnect, DisconnectReason, Limits};

use crate::codec::{self, Class, HandshakeMsg, HandshakeReject, Parts, Record};
use crate::config::{MeshConfig, PeerAddress};
use crate::conn::{
    self, Alive, Conn, Flushed, Framed, Lane, Out, SendOutcome, Transport, Unlimited, Verdict,
    release,
};
use crate::correlation::{Correlations, ReplyOutcome};
use crate::counters::{Counters, DropReason, TransportEvent};
use crate::error::RequestError;
use crate::events::{ClientCloseCause, ClientEvent, DownReason, PeerEvent};
use crate::handshake::{Handshake, HandshakeFailure, LocalIdentity, Outcome};
use crate::hashing::{FastMap, SeededMap};
use crate::inbound::InboundSender;
use crate::inbound::{Inbound, Origin};
use crate::node::{Response, Shared};
use crate::outbox::{OutItem, Outbox, PeerSlot};
use crate::reply::{ReplyHandle, ReplyTarget};
use crate::sink::Offer;
use crate::tap::{TapDirection, WireTap};
use crate::types::{LinkKind, NodeGeneration, NodeRid, SessionRid};

mod clients;
mod commands;
mod deliver;
mod ingress;
mod link;
mod send;
mod timers;

use clients::{Client, Tombstones};
use deliver::{Arrived, Context, Delivered, Delivery, Held, Source};
use ingress::{Rx, ZmqFrame};

use crate::memo::DecodeMemo;

/// The receive and send buffer of each client connection in libzmq (`ZMQ_IN_BATCH_SIZE`,
/// `ZMQ_OUT_BATCH_SIZE`; libzmq's default is 8,192 bytes each), which a connection holds for
/// its whole life: most client connections are idle. Larger frames (a client's batch frames,
/// the pushes' batch frames) bypass the buffers.
const CLIENT_BATCH: std::os::raw::c_int = 1024;
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
    Hold {
        /// Dropped (disconnected) by the guard to release the thread.
        release: crossbeam_channel::Receiver<()>,
        /// Told once the thread is held.
        held: crossbeam_channel::Sender<()>,
    },
    Shutdown,
    /// Test hook ([`crate::MeshNode::abort_for_tests`]): stop like a crashed process, without
    /// telling peers or clients (no Disconnect, nothing queued flushed).
    Abort,
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
    /// Replies waiting for the completion connection (not budgeted: `bytes` is `None`).
    replies: VecDeque<Out>,
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

struct Sockets {
    relay: zmq::Socket,
    completion: zmq::Socket,
    client: Option<zmq::Socket>,
    mon_relay: zmq::Socket,
    mon_completion: zmq::Socket,
    mon_client: Option<zmq::Socket>,
    /// The `ZMQ_FD` of each socket, by bit index ([`Sockets::bit`], the doorbell at
    /// [`Sockets::DOOR`], the monitors after it); -1 for an absent one. The readiness check of
    /// the spin, of a pass and of the sleep (see [`Sockets::drained`]).
    fds: [std::os::fd::RawFd; 7],
    /// One bit per socket: the last libzmq call on it that can process its commands was a
    /// receive that ended in EAGAIN (or a `ZMQ_EVENTS` without POLLIN). libzmq then processed
    /// its commands and marked its empty pipes inactive, so a message arriving later makes
    /// the writer send `activate_read`, which signals the socket's `ZMQ_FD` (edge-triggered:
    /// readable while a command waits, not while a message does). Such a socket has nothing
    /// to read while its FD is quiet. Any other call (send, connect, disconnect) may process
    /// commands and activate a pipe without the FD: it clears the bit
    /// ([`Sockets::touched`]), and the socket is read (or asked) again.
    drained: std::cell::Cell<u8>,
}

impl Sockets {
    const RELAY: u8 = 1;
    const COMPLETION: u8 = 2;
    const CLIENT: u8 = 4;
    /// The doorbell (`Door::socket`), only ever received from on this thread.
    const DOOR: u8 = 8;
    const MON_RELAY: u8 = 16;
    const MON_COMPLETION: u8 = 32;
    const MON_CLIENT: u8 = 64;

    fn bit(kind: LinkKind) -> u8 {
        match kind {
            LinkKind::Relay => Self::RELAY,
            LinkKind::Completion => Self::COMPLETION,
            LinkKind::Client => Self::CLIENT,
        }
    }

    fn mon_bit(kind: LinkKind) -> u8 {
        Self::bit(kind) << 4
    }

    /// Every data socket this node has.
    fn all(&self) -> u8 {
        if self.client.is_some() {
            Self::RELAY | Self::COMPLETION | Self::CLIENT
        } else {
            Self::RELAY | Self::COMPLETION
        }
    }

    /// Every monitor socket this node has.
    fn monitors(&self) -> u8 {
        self.all() << 4
    }

    /// A call other than a receive was made on `kind`'s socket (see [`Sockets::drained`]).
    #[inline]
    pub(super) fn touched(&self, kind: LinkKind) {
        self.drained.set(self.drained.get() & !Self::bit(kind));
    }

    fn set_drained(&self, bits: u8, drained: bool) {
        let d = self.drained.get();
        self.drained.set(if drained { d | bits } else { d & !bits });
    }

    /// Polls the `ZMQ_FD`s of the sockets in `bits` for at most `ms` (0: without waiting):
    /// those whose FD is readable (a command waits), or `None` if the poll failed.
    fn signaled(&self, bits: u8, ms: i64) -> Option<u8> {
        let mut items: [zmq::PollItem<'_>; 7] =
            std::array::from_fn(|_| zmq::PollItem::from_fd(-1, zmq::PollEvents::empty()));
        let mut which = [0u8; 7];
        let mut n = 0;
        for (i, fd) in self.fds.iter().enumerate() {
            let bit = 1u8 << i;
            if bits & bit != 0 {
                items[n] = zmq::PollItem::from_fd(*fd, zmq::POLLIN);
                which[n] = bit;
                n += 1;
            }
        }
        zmq::poll(&mut items[..n], ms).ok()?;
        Some(
            items[..n]
                .iter()
                .zip(which)
                .filter(|(it, _)| it.is_readable())
                .fold(0, |acc, (_, bit)| acc | bit),
        )
    }

    /// Of the sockets in `undrained` that have a PAUSED queue (`waiting`, see
    /// [`Engine::waiting_room`]): those with libzmq commands not yet processed (their
    /// `ZMQ_FD` signaled; one `poll()`, none when no queue waits).
    ///
    /// A ROUTER's `ZMQ_EVENTS` says nothing about one connection's pipe, and the command that
    /// gives a full pipe room back (its write activation, sent when the reader took half of
    /// the high-water mark) signals the FD once: whatever processes it (`ZMQ_EVENTS`, a
    /// receive) must be followed by a retry of the waiting queue. So such a socket is read
    /// in a pass (which retries its queues) rather than asked for `ZMQ_EVENTS` before a
    /// sleep that only the timer would end.
    fn commands_for_waiting(&self, undrained: u8, waiting: u8) -> u8 {
        let ask = undrained & waiting;
        if ask == 0 {
            return 0;
        }
        self.signaled(ask, 0).unwrap_or(ask)
    }

    /// Of the sockets in `bits`: those not drained, and the drained ones whose `ZMQ_FD` is
    /// signaled, except those in `quiet`. One `poll()` over the FDs of two or more drained
    /// sockets replaces a receive ending in EAGAIN on each (a `poll()` inside libzmq); a
    /// single one is read directly (the same cost).
    fn to_read(&self, bits: u8, quiet: u8) -> u8 {
        let drained = self.drained.get() & bits;
        let ask = drained & !quiet;
        let mut read = bits & !drained;
        if ask.count_ones() >= 2 {
            read |= self.signaled(ask, 0).unwrap_or(ask);
        } else {
            read |= ask;
        }
        read
    }
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
    /// Session counts and bounds (in all, per source, strangers): sans-IO.
    admission: crate::admission::Admission,
    /// The source address of the message being handled, read only for a client connection
    /// without a session (it may open one) and for a Hello (it starts a handshake).
    rx_source: Option<Arc<str>>,
    paused_clients: HashSet<u64>,
    /// Client sessions whose queue went over their outbound budget (`Client::over_since`
    /// set): the only ones housekeeping looks at for slow consumers.
    over_budget: Vec<u64>,
    next_session: u64,
    corr: Correlations<(Arc<NodeRid>, NodeGeneration), Waiter>,
    /// The layer above: sink, inbound channel, held records ([`deliver`]).
    up: Delivery,
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
    /// The last actor identity a decoded 24 or 36 named (`zlink_wire::IdCache`): the next
    /// record for that actor reuses it instead of validating and allocating it again.
    ids: zlink_wire::IdCache,
    /// Peers whose relay queue or reply queue got records in this pass and that were not
    /// PAUSED: transmitted by [`Engine::flush_dirty`] at the end of the pass, small records
    /// packed into batch frames (natural batching: nothing waits for a batch to fill).
    dirty: Vec<Arc<NodeRid>>,
    /// Clients (sessions) whose queue went from empty to non-empty in this pass (pushes,
    /// replies): transmitted by [`Engine::flush_dirty`] like the peers above.
    dirty_clients: Vec<u64>,
    /// Reused buffer the items of an outbox are taken into.
    outbox_buf: Vec<OutItem>,
    _ctx: zmq::Context,
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
                let mut s = ctx.socket(zmq::ROUTER).map_err(setup_err(name))?;
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
                } else {
                    // The client port: a session is bound to its connection. Every connection
                    // gets a routing id libzmq generates (the one a client announces is
                    // ignored, so no connection can choose another's and inherit its
                    // session), and the end of a connection is read as an empty message
                    // from its routing id (`Engine::on_client_message`): its session ends.
                    crate::zmq_opt::set_int(&mut s, crate::zmq_opt::ROUTER_ASSIGN_IDS, 1)
                        .map_err(setup_err("router_assign_ids"))?;
                    crate::zmq_opt::set_int(
                        &mut s,
                        crate::zmq_opt::ROUTER_NOTIFY,
                        crate::zmq_opt::NOTIFY_DISCONNECT,
                    )
                    .map_err(setup_err("router_notify"))?;
                    // What libzmq holds per client connection (docs/MESH.md, "Slow consumers").
                    s.set_sndhwm(cfg.client_outbound.send_hwm)
                        .map_err(setup_err("client sndhwm"))?;
                    // Each connection's receive and send buffers, held for its whole life
                    // (docs/MESH.md, "Memory bounds"): small, since most client connections
                    // are idle; a frame larger than the buffer is read into (and written
                    // from) its own message, without the buffer.
                    crate::zmq_opt::set_int(&mut s, crate::zmq_opt::IN_BATCH_SIZE, CLIENT_BATCH)
                        .map_err(setup_err("client in_batch_size"))?;
                    crate::zmq_opt::set_int(&mut s, crate::zmq_opt::OUT_BATCH_SIZE, CLIENT_BATCH)
                        .map_err(setup_err("client out_batch_size"))?;
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
        let fd = |s: &zmq::Socket, what: &str| s.get_fd().map_err(setup_err(what));
        let opt_fd = |s: &Option<zmq::Socket>, what: &str| match s {
            Some(s) => fd(s, what),
            None => Ok(-1),
        };
        let fds = [
            fd(&relay, "relay fd")?,
            fd(&completion, "completion fd")?,
            opt_fd(&client, "client fd")?,
            fd(&door.socket, "doorbell fd")?,
            fd(&mon_relay, "monitor fd")?,
            fd(&mon_completion, "monitor fd")?,
            opt_fd(&mon_client, "monitor fd")?,
        ];
        let limits = codec::limits(cfg.transport.max_message_size);
        let bound = Bound {
            relay: last_endpoint(&relay),
            completion: last_endpoint(&completion),
            client: client.as_ref().map(last_endpoint),
        };
        let tombstones = Tombstones::new(cfg.max_clients);
        let admission = crate::admission::Admission::new(&cfg);
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
                    fds,
                    drained: std::cell::Cell::new(0),
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
                admission,
                rx_source: None,
                paused_clients: HashSet::new(),
                over_budget: Vec::new(),
                next_session: 1,
                corr: Correlations::new(),
                up: Delivery::new(inbound),
                tombstones,
                tomb_answered: false,
                client_events: None,
                running: true,
                aborted: false,
                limits,
                memo: DecodeMemo::default(),
                ids: zlink_wire::IdCache::default(),
                dirty: Vec::new(),
                dirty_clients: Vec::new(),
                outbox_buf: Vec::new(),
                _ctx: ctx,
            },
            bound,
        ))
    }

    pub(crate) fn run(mut self) {
        let _span = tracing::debug_span!("zlink_mesh_io", node = %self.local.node).entered();
        let mut next_housekeeping = Instant::now();
        // Sockets found quiet since their last receive by the readiness check that ended the
        // previous pass (spin or poll): this pass does not look at them again (what arrives
        // later signals their FD; the next pass or spin sees it).
        let mut quiet = 0u8;
        while self.running {
            let mut work = self.drain_commands();
            if !self.running {
                break;
            }
            if !self.paused.is_empty() || !self.paused_clients.is_empty() {
                work += self.flush_paused();
            }
            if !self.up.held.is_empty() {
                self.retry_stalled();
            }
            let now = Instant::now();
            if now >= next_housekeeping {
                self.flush_handshakes();
                self.timers(now);
                self.read_monitors();
                next_housekeeping = now + HOUSEKEEPING;
            }
            // Busy path: read every socket that may have something, without polling first.
            let read = self
                .sockets
                .to_read(self.sockets.all(), std::mem::take(&mut quiet));
            if read & Sockets::COMPLETION != 0 {
                work += self.read_socket(LinkKind::Completion);
            }
            if read & Sockets::RELAY != 0 {
                work += self.read_socket(LinkKind::Relay);
            }
            if read & Sockets::CLIENT != 0 {
                work += self.read_socket(LinkKind::Client);
            }
            self.up.end_pass();
            // Replies the reads queued (e.g. stale-generation error replies).
            self.flush_dirty();
            self.up.inbound.flush();
            // A receive processes the socket's libzmq commands, among them the write
            // activation of a PAUSED queue's pipe (its reader took messages): retry those
            // queues now, before this pass may end in a sleep that nothing would end early.
            if work == 0 && read & self.waiting_room() != 0 {
                work += self.flush_paused();
            }
            if work > 0 {
                continue;
            }
            // Idle: yield a little before sleeping (a wake-up costs 20-25 µs on small VMs).
            if let Some(q) = self.spin_for_work() {
                quiet = q;
                continue;
            }
            quiet = self.poll_once();
            next_housekeeping = next_housekeeping.min(Instant::now());
        }
        self.shutdown_sequence();
    }

    /// The data sockets with a PAUSED queue (HWM): a peer's (relay and completion) or a
    /// client's (the client socket).
    #[inline]
    fn waiting_room(&self) -> u8 {
        let mut w = 0;
        if !self.paused.is_empty() {
            w |= Sockets::RELAY | Sockets::COMPLETION;
        }
        if !self.paused_clients.is_empty() {
            w |= Sockets::CLIENT;
        }
        w
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

    /// Yields the CPU a few times while watching for commands or readable sockets. `Some`
    /// with the sockets seen quiet when there is work.
    ///
    /// Called after a pass that found no work. A socket not [`Sockets::drained`] is asked once
    /// for `ZMQ_EVENTS` (level: libzmq processes its commands); after that every socket is
    /// drained and one `poll()` over their `ZMQ_FD`s per turn sees every new message (and
    /// other commands: the pass then reads, which processes them) without the `poll()` that
    /// each `get_events` makes inside libzmq. `poll_once` keeps the level check
    /// (`zmq_poll` asks each socket's `ZMQ_EVENTS`) before any sleep.
    fn spin_for_work(&self) -> Option<u8> {
        if self.cfg.io_spin_yields == 0 {
            return None;
        }
        let all = self.sockets.all();
        let undrained = all & !self.sockets.drained.get();
        if self
            .sockets
            .commands_for_waiting(undrained, self.waiting_room())
            != 0
        {
            // A pass reads it (processing its commands) and retries its PAUSED queues.
            return Some(0);
        }
        for kind in [LinkKind::Completion, LinkKind::Relay, LinkKind::Client] {
            let bit = Sockets::bit(kind);
            if undrained & bit == 0 {
                continue;
            }
            match self.socket(kind).get_events() {
                Ok(e) if e.contains(zmq::POLLIN) => return Some(0),
                Ok(_) => self.sockets.set_drained(bit, true),
                Err(_) => return Some(0),
            }
        }
        let mut quiet = 0;
        for _ in 0..self.cfg.io_spin_yields {
            if !self.door.rx.is_empty() {
                return Some(quiet);
            }
            match self.sockets.signaled(all, 0) {
                Some(0) => {}
                Some(signaled) => return Some(all & !signaled),
                None => return Some(0),
            }
            quiet = all;
            std::thread::yield_now();
        }
        None
    }

    /// Reads the monitors that may have events (see [`Sockets::to_read`]).
    fn read_monitors(&mut self) {
        let read = self.sockets.to_read(self.sockets.monitors(), 0);
        for kind in [LinkKind::Relay, LinkKind::Completion, LinkKind::Client] {
            if read & Sockets::mon_bit(kind) != 0 {
                self.read_monitor(kind);
            }
        }
    }

    // ---------------------------------------------------------------- polling

    /// Sleeps until a socket, the doorbell or the next timer, and reads what is readable.
    /// Returns the data sockets it found quiet (see `run`).
    ///
    /// Level check first: a socket not [`Sockets::drained`] is asked for `ZMQ_EVENTS` (libzmq
    /// processes its commands; without POLLIN it is drained). When none is readable, every
    /// socket is drained and the thread sleeps in one `poll()` over their `ZMQ_FD`s, which
    /// signal anything new: two syscalls at most where `zmq_poll` made a `poll()` and a
    /// `ZMQ_EVENTS` per socket before and after the sleep.
    fn poll_once(&mut self) -> u8 {
        let now = Instant::now();
        let mut timeout = self.next_wake(now);
        let sleeping = self.shared.bell.prepare_sleep();
        if !sleeping {
            timeout = Duration::ZERO;
        }
        let present = self.sockets.all() | self.sockets.monitors() | Sockets::DOOR;
        let waiting = self.waiting_room();
        let mut ready = 0u8;
        {
            let s = &self.sockets;
            let undrained = present & !s.drained.get();
            // Commands pending on a socket with a PAUSED queue: read it (see `spin_for_work`).
            ready |= s.commands_for_waiting(undrained, waiting);
            for i in 0..7 {
                let bit = 1u8 << i;
                if (undrained & !ready) & bit == 0 {
                    continue;
                }
                let socket = match bit {
                    Sockets::RELAY => &s.relay,
                    Sockets::COMPLETION => &s.completion,
                    Sockets::DOOR => &self.door.socket,
                    Sockets::MON_RELAY => &s.mon_relay,
                    Sockets::MON_COMPLETION => &s.mon_completion,
                    Sockets::CLIENT => s.client.as_ref().expect("client socket"),
                    Sockets::MON_CLIENT => s.mon_client.as_ref().expect("client monitor"),
                    _ => continue,
                };
                match socket.get_events() {
                    Ok(e) if !e.contains(zmq::POLLIN) => s.set_drained(bit, true),
                    _ => ready |= bit,
                }
            }
        }
        let mut quiet = 0;
        if ready == 0 {
            let ms = if timeout.is_zero() {
                0
            } else {
                timeout.as_millis().max(1) as i64
            };
            match self.sockets.signaled(present, ms) {
                Some(signaled) => {
                    ready = signaled;
                    quiet = self.sockets.all() & !signaled;
                }
                // Interrupted: look at everything.
                None => ready = present,
            }
        }
        self.shared.bell.awake();
        if ready & Sockets::DOOR != 0 {
            self.door.drain_rings();
            self.sockets.set_drained(Sockets::DOOR, true);
        }
        for kind in [LinkKind::Completion, LinkKind::Relay, LinkKind::Client] {
            if ready & Sockets::bit(kind) != 0 {
                self.read_socket(kind);
            }
        }
        for kind in [LinkKind::Relay, LinkKind::Completion, LinkKind::Client] {
            if ready & Sockets::mon_bit(kind) != 0 {
                self.read_monitor(kind);
            }
        }
        quiet
    }

    fn read_socket(&mut self, kind: LinkKind) -> usize {
        let mut n = 0;
        // The receive buffers are reused for every message of the pass (libzmq closes the old
        // content on each receive): no allocation per message on this path.
        let mut rid = std::mem::replace(&mut self.rx_rid, zmq::Message::new());
        let mut parts = std::mem::take(&mut self.rx_parts);
        while n < RECV_BATCH {
            let Some(count) = recv_frames_into(self.socket(kind), &mut rid, &mut parts) else {
                break;
            };
            if n == 0 {
                // The pass's time, read once it has a message (an empty read reads no clock).
                self.rx_now = Instant::now();
            }
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
            let rid_bytes: &[u8] = &rid;
            if count == 1 && self.cfg.tap.is_none() && zlink_wire::is_batch(&parts[0]) {
                // A batch frame is not copied: the message leaves the receive buffer (a fresh
                // one takes its slot) and is wrapped as the frame's `Bytes`; it is released at
                // the end of `on_batch`, which copies each payload out of it.
                let msg = std::mem::replace(&mut parts[0], zmq::Message::new());
                let frame = Rx::Batch(Bytes::from_owner(ZmqFrame(msg)));
                match kind {
                    LinkKind::Client => self.on_client_message(rid_bytes, frame),
                    _ => self.on_peer_message(kind, rid_bytes, frame),
                }
                continue;
            }
            // Each `zmq::Message` deref is two FFI calls (data, size): take the slices once.
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
                LinkKind::Client => self.on_client_message(rid_bytes, Rx::Parts(frames)),
                _ => self.on_peer_message(kind, rid_bytes, Rx::Parts(frames)),
            }
        }
        self.rx_rid = rid;
        self.rx_parts = parts;
        // Ended in EAGAIN (not on the batch limit): drained until the next other call.
        self.sockets.set_drained(Sockets::bit(kind), n < RECV_BATCH);
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
        // Read until EAGAIN: drained (a monitor is never sent on from here).
        self.sockets.set_drained(Sockets::mon_bit(kind), true);
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
        for h in std::mem::take(&mut self.up.held) {
            if let Held::Ended(session, cause) = h {
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

impl Sender<'_> {
    /// The connection kind the message arrived on.
    #[inline]
    fn lane(&self) -> Lane {
        match self {
            Sender::Peer {
                kind: LinkKind::Relay,
                ..
            } => Lane::Relay,
            Sender::Peer { .. } => Lane::Completion,
            Sender::Client { .. } => Lane::Client,
        }
    }
}

impl std::fmt::Display for Sender<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sender::Peer { node, .. } => write!(f, "{node}"),
            Sender::Client { .. } => f.write_str("client"),
        }
    }
}

/// Connects `s` to `ep` announcing the routing id `rid` on that connection (libzmq takes the
/// socket's routing id at connect time; the bound listener keeps the one of the bind).
fn connect_as(s: &zmq::Socket, rid: &[u8], ep: &str) -> Result<(), zmq::Error> {
    s.set_identity(rid)?;
    s.connect(ep)
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
