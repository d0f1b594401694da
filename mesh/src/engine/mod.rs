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
//! [`commands`] (the API's commands), [`timers`] (housekeeping), [`requests`] (the
//! request-ending bookkeeping this driver shares with the `MeshClient`'s), [`poll`] (the sockets
//! and their [`crate::driver::Ready`], the spin and the sleep, the batched reads).
//!
//! The loop is the mesh's one driver loop ([`crate::driver::run`], also the `MeshClient`'s).
//! One pass (the clock is read once at its start, again only after a sleep, and that `now`
//! serves everything the pass does): drain commands (batch) → flush PAUSED queues and pending
//! handshake messages → hand stalled inbound records to the layer above → timers (handshake
//! timeouts, pings, peer timeouts, request deadlines) → read the sockets that may have
//! something in batches; a pass without work is followed by the spin, then one sleeping
//! `poll()` (doorbell, sockets, monitors) and the reads of what it found readable.
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

use crate::outbox::SendBudget;
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

mod batch;
mod clients;
mod commands;
mod decode;
mod deliver;
mod ingress;
mod link;
mod poll;
mod requests;
mod send;
mod timers;

use clients::{Client, Tombstones};
use decode::{Rx, ZmqFrame};
use deliver::{Arrived, Context, Delivered, Delivery, Held, Source};
use poll::Sockets;
pub(crate) use poll::recv_multipart;
pub(crate) use requests::{close_all, ended_before_transmission, expire, fail};
pub(crate) use send::send_parts;

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
/// How often housekeeping looks at every client session for liveness (silent for the peer
/// timeout, or closing and not drained within it): a session is ended at most this much after
/// its timeout. Owed credit and slow consumers are looked at every pass, for the sessions
/// listed as needing it only, so an idle session costs housekeeping nothing in between.
const CLIENT_SWEEP: Duration = Duration::from_millis(50);
/// A gap between two passes of the I/O thread at least this long is time it was away: not
/// counted as its peers' and clients' silence ([`Engine::away`]), and logged (debug, target
/// `zlink_mesh::stall`).
const AWAY: Duration = Duration::from_millis(100);
/// Bound on commands drained per loop iteration.
const CMD_BATCH: usize = 1024;
/// Bound on replies waiting for a PAUSED completion connection, per peer.
const MAX_QUEUED_REPLIES: usize = 65_536;
/// More parts than this in one message is malformed (routing id + envelope + payload).
const MAX_PARTS: usize = 3;
/// Longest a test hold ([`Command::Hold`]) keeps the I/O thread, so a leaked guard can
/// never wedge a node (or a `shutdown` waiting for its thread) for good.
#[cfg(feature = "testing")]
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
    #[cfg(feature = "testing")]
    Hold {
        /// Dropped (disconnected) by the guard to release the thread.
        release: crossbeam_channel::Receiver<()>,
        /// Told once the thread is held.
        held: crossbeam_channel::Sender<()>,
    },
    Shutdown,
    /// Test hook ([`crate::MeshNode::abort_for_tests`]): stop like a crashed process, without
    /// telling peers or clients (no Disconnect, nothing queued flushed).
    #[cfg(feature = "testing")]
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

    fn link(&self, kind: LinkKind) -> &Link {
        if kind == LinkKind::Relay {
            &self.relay
        } else {
            &self.completion
        }
    }

    fn link_mut(&mut self, kind: LinkKind) -> &mut Link {
        if kind == LinkKind::Relay {
            &mut self.relay
        } else {
            &mut self.completion
        }
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
    /// The time of the current pass of the loop: read once per pass (at its start, and again
    /// after a sleep or a test hold) and used by everything the pass does — ingress, timers,
    /// handshakes, request deadlines at transmission, session bookkeeping.
    now: Instant,
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
    /// Client sessions whose receive window changed since housekeeping last looked
    /// (`Client::owing` set): the only ones it grants owed credit to.
    owing: Vec<u64>,
    /// When housekeeping next looks for silent clients and closing sessions that did not
    /// drain (every [`CLIENT_SWEEP`]).
    next_client_sweep: Instant,
    next_session: u64,
    /// When the next pass runs housekeeping (every [`HOUSEKEEPING`] while busy; at once after
    /// a sleep).
    next_housekeeping: Instant,
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
    /// Since the thread last slept: an application record was delivered or completed, or
    /// the API handed over commands. Without it (only control: Pings answered, credit) an
    /// idle pass sleeps at once instead of spinning ([`Engine::spin_for_work`]): nothing that
    /// follows a Ping is worth a spin's yields.
    app_work: bool,
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
                    // A record read is copied out of the receive buffer (one allocation for
                    // a record of more than 33 bytes), so the buffer carries no reference
                    // counts: 1 KiB per connection instead of 2.3 KiB ("Decoder copies").
                    crate::zmq_opt::set_int(&mut s, crate::zmq_opt::IN_ZERO_COPY, 0)
                        .map_err(setup_err("client in_zero_copy"))?;
                    // Both buffers are held only while in use: an idle connection holds
                    // neither between its Ping and the next ("Lazy buffers").
                    crate::zmq_opt::set_int(&mut s, crate::zmq_opt::LAZY_BUFFERS, 1)
                        .map_err(setup_err("client lazy_buffers"))?;
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
            -1,
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
                    ready: crate::driver::Ready::new(fds),
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
                now: Instant::now(),
                clients: FastMap::default(),
                clients_by_rid: SeededMap::default(),
                admission,
                rx_source: None,
                paused_clients: HashSet::new(),
                over_budget: Vec::new(),
                owing: Vec::new(),
                next_client_sweep: Instant::now(),
                next_session: 1,
                next_housekeeping: Instant::now(),
                corr: Correlations::new(),
                up: Delivery::new(inbound),
                tombstones,
                tomb_answered: false,
                client_events: None,
                running: true,
                app_work: false,
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
        self.next_housekeeping = self.now;
        crate::driver::run(&mut self);
    }

    /// The data sockets with a PAUSED queue (HWM): a peer's (relay and completion) or a
    /// client's (the client socket).
    #[inline]
    pub(super) fn waiting_room(&self) -> u8 {
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

    /// Sets the time of the pass starting at `now`. `self.now` is the previous pass's time (or
    /// the wake-up's, after a sleep): a gap of [`AWAY`] or more since is a pass, spin or read
    /// that kept this thread, the thread descheduled or stopped, or a test hold.
    fn resume_at(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.now);
        if gap >= AWAY {
            self.away(gap);
        }
        self.now = now;
    }

    /// The I/O thread ran no pass for `gap` (descheduled, stopped, held, or one long pass):
    /// what peers and clients sent meanwhile waits unread in the sockets, and a liveness check
    /// at the next pass would run before the reads that find it. That time is not their
    /// silence: each connection's silence is measured over the time this thread was there
    /// ([`Conn::away`]).
    fn away(&mut self, gap: Duration) {
        tracing::debug!(
            target: "zlink_mesh::stall",
            gap_ms = gap.as_millis() as u64,
            "the I/O thread ran no pass for a while"
        );
        for p in self.peers.values_mut() {
            p.conn.away(gap);
        }
        for c in self.clients.values_mut() {
            c.conn.away(gap);
        }
    }

    fn shutdown_sequence(&mut self) {
        self.now = Instant::now();
        if self.aborted {
            // A crash as seen from outside: nobody is told; the requests here still end.
            close_all(&mut self.corr, &RequestError::Closed);
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
        let now = self.now;
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
        close_all(&mut self.corr, &RequestError::Closed);
        self.shared.mark_closed();
    }
}

/// The engine as the mesh's one driver loop runs it ([`crate::driver::run`]).
impl crate::driver::Driver for Engine {
    #[inline]
    fn begin(&mut self, now: Instant) {
        self.resume_at(now);
    }

    /// Commands → PAUSED queues → stalled inbound records → housekeeping (every
    /// [`HOUSEKEEPING`]: handshake messages, timers, monitors) → reads of every data socket
    /// that may have something (busy path, without polling first) → what the reads queued.
    fn pass(&mut self, quiet: u8) -> crate::driver::Pass {
        let mut work = self.drain_commands();
        if !self.running {
            return crate::driver::Pass::Stop;
        }
        if !self.paused.is_empty() || !self.paused_clients.is_empty() {
            work += self.flush_paused();
        }
        if !self.up.held.is_empty() {
            self.retry_stalled();
            self.app_work = true;
        }
        // Commands from the API and queued data that moved: application work.
        self.app_work |= work > 0;
        let now = self.now;
        if now >= self.next_housekeeping {
            self.flush_handshakes();
            self.timers(now);
            self.read_monitors();
            self.next_housekeeping = now + HOUSEKEEPING;
        }
        // Busy path: read every socket that may have something, without polling first.
        let read = self.sockets.ready.to_read(self.sockets.all(), quiet);
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
            crate::driver::Pass::Work
        } else {
            crate::driver::Pass::Idle
        }
    }

    fn spin(&mut self) -> Option<u8> {
        self.spin_for_work()
    }

    fn sleep(&mut self) -> Option<u8> {
        self.app_work = false;
        let quiet = self.poll_once();
        self.next_housekeeping = self.next_housekeeping.min(self.now);
        Some(quiet)
    }

    fn end(&mut self) {
        self.shutdown_sequence();
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
