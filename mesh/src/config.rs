//! Mesh node configuration.

use std::time::Duration;

use crate::handshake::MeshSecret;
use crate::tap::WireTap;
use crate::types::{MeshName, NodeGeneration, NodeRid};

/// Outbound admission limits for one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboundBudget {
    /// Messages admitted but not yet accepted by libzmq.
    pub messages: u64,
    /// Bytes (all frames) admitted but not yet accepted by libzmq.
    pub bytes: u64,
}

impl Default for OutboundBudget {
    fn default() -> Self {
        Self {
            messages: 4096,
            bytes: 16 * 1024 * 1024,
        }
    }
}

/// Limits of the libzmq sockets (the *transport* limits of EG-1.2; distinct from the
/// outbound admission budgets and from the inbound application channel capacity).
#[derive(Clone, Copy, Debug)]
pub struct TransportLimits {
    /// `ZMQ_MAXMSGSIZE`: a peer sending a larger frame is disconnected by libzmq.
    pub max_message_size: usize,
    /// `ZMQ_SNDHWM` (messages per connection inside libzmq).
    pub send_hwm: i32,
    /// `ZMQ_RCVHWM`.
    pub recv_hwm: i32,
    /// `ZMQ_LINGER` (bounded, so shutdown never hangs on a dead peer).
    pub linger: Duration,
}

impl Default for TransportLimits {
    fn default() -> Self {
        Self {
            max_message_size: 16 * 1024 * 1024,
            send_hwm: 1000,
            recv_hwm: 1000,
            linger: Duration::from_millis(200),
        }
    }
}

/// Per-peer receive window of the relay connection (credit-based flow control).
///
/// The receiver grants this many messages/bytes with a FlowCredit record (on the completion
/// connection) and returns credit as records move into the inbound channel, so it can always
/// keep reading its relay socket (handshakes and other peers progress while one peer's data
/// waits, EG-16.23) with at most this much held per peer. Distinct from the outbound
/// admission budget and from libzmq's HWM (EG-1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboundWindow {
    /// Messages a peer may have in flight towards this node.
    pub messages: u32,
    /// Bytes (all frames) a peer may have in flight towards this node (one message may
    /// overshoot).
    pub bytes: u64,
}

impl Default for InboundWindow {
    /// 4,096 records / 16 MiB. The record count covers the credit round trip at full rate
    /// (credit comes back in quarters of the window, through the receiver's inbound hand-off
    /// and the completion connection; with batching a sender otherwise idles waiting for it —
    /// 1,024 cost about a third of the one-way throughput); the byte bound is what bounds
    /// memory per peer.
    fn default() -> Self {
        Self {
            messages: 4096,
            bytes: 16 * 1024 * 1024,
        }
    }
}

/// Natural batching of the relay connection: when the I/O thread finds several small records
/// queued for one peer, it packs up to `max_records` of them (at most `max_bytes`) into one
/// 139 batch frame, so libzmq moves one message instead of one per record. It never waits to
/// fill a batch (no timer): a lone record goes out as its own frame, with unchanged latency.
/// Every record still has its own credit, window charge and ingress checks. Distinct from the
/// transport, budget and window limits (EG-1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Most records in one batch frame (at most `zlink_wire::MAX_BATCH_RECORDS`); 0 or 1 turns
    /// batching off.
    pub max_records: usize,
    /// Most bytes of one batch frame (a first record larger than this travels alone).
    pub max_bytes: usize,
    /// Records whose payload is larger than this travel as their own message (not copied into
    /// a batch).
    pub max_record_payload: usize,
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            max_records: 64,
            max_bytes: 64 * 1024,
            max_record_payload: 4 * 1024,
        }
    }
}

/// What the node holds for one ClientServer session that does not read (docs/MESH.md, "Slow
/// consumers"). Pushes and replies to a client count against its outbound budget
/// (`MeshConfig::client_budget`, bytes and messages): pushes wait for room, replies never
/// wait. A session whose queue stays over the budget for longer than `grace`, or that gets a
/// reply while its queue already holds more than twice the budget's bytes, is closed with
/// `DisconnectReason::SlowConsumer` and what it holds is dropped. So the session's queue holds
/// at most twice the budget plus one reply: a reply larger than the budget by itself is
/// queued whole and leaves as soon as libzmq takes it (a client that reads gets it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOutbound {
    /// How long a session's queue may stay over its budget. Default 5 s.
    pub grace: Duration,
    /// `ZMQ_SNDHWM` of the client socket: messages per client connection inside libzmq once
    /// they left the session's queue (each a 139 batch frame of at most `Batching::max_bytes`,
    /// or one record). Default 16 (16 × 64 KiB = 1 MiB of batch frames).
    pub send_hwm: i32,
    /// Most records in one 139 batch frame to a client (at most
    /// `zlink_wire::MAX_BATCH_RECORDS`; its bytes stay within `Batching::max_bytes`). libzmq
    /// holds `send_hwm` messages per connection and gives a full pipe room back once its
    /// reader took half of them: records per message set how many small pushes wait in
    /// libzmq between two write activations, without raising its byte bound. Default 256
    /// (docs/PERFORMANCE.md, "Pushes to a client").
    pub batch_records: usize,
}

impl ClientOutbound {
    /// The default outbound budget of a client session (`MeshConfig::client_budget`): 4,096
    /// messages / 1 MiB.
    pub const BUDGET: OutboundBudget = OutboundBudget {
        messages: 4096,
        bytes: 1024 * 1024,
    };
}

impl Default for ClientOutbound {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(5),
            send_hwm: 16,
            batch_records: 256,
        }
    }
}

/// Liveness, handshake and reconnect timing.
#[derive(Clone, Copy, Debug)]
pub struct Liveness {
    /// `ZMQ_HEARTBEAT_IVL`: ZMTP PING interval on the completion connections (relay and
    /// ClientServer connections carry none: a backpressured connection would be cut).
    pub heartbeat_interval: Duration,
    /// `ZMQ_HEARTBEAT_TIMEOUT`: libzmq closes a connection silent for this long.
    pub heartbeat_timeout: Duration,
    /// `ZMQ_HEARTBEAT_TTL` announced to the remote side.
    pub heartbeat_ttl: Duration,
    /// Interval of mesh Ping records on the completion connection.
    pub ping_interval: Duration,
    /// A peer (or client) silent for this long is reported down.
    pub peer_timeout: Duration,
    /// A handshake not finished within this time fails.
    pub handshake_timeout: Duration,
    /// `ZMQ_RECONNECT_IVL`; also the retry delay after a failed handshake.
    pub reconnect_interval: Duration,
    /// `ZMQ_RECONNECT_IVL_MAX`: bound of libzmq's exponential reconnect backoff.
    pub reconnect_interval_max: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_millis(1000),
            heartbeat_timeout: Duration::from_millis(3000),
            heartbeat_ttl: Duration::from_millis(3000),
            ping_interval: Duration::from_millis(500),
            peer_timeout: Duration::from_millis(3000),
            handshake_timeout: Duration::from_millis(3000),
            reconnect_interval: Duration::from_millis(100),
            reconnect_interval_max: Duration::from_millis(2000),
        }
    }
}

/// How ClientServer sessions are admitted to the full receive window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAdmission {
    /// Every session is granted `MeshConfig::client_window` on its first record (a mesh used
    /// without a session layer that authenticates clients: tests, benchmarks).
    Open,
    /// A session is a stranger until the node's session layer admits it
    /// ([`crate::MeshNode::accept_client`], called when its connected/authenticate callback
    /// accepts the session): strangers get a small window and are bounded in count, in all and
    /// per source address; accepting one grants the full `client_window`.
    OnAccept(Strangers),
}

impl Default for ClientAdmission {
    /// [`ClientAdmission::OnAccept`] with [`Strangers::default`].
    fn default() -> Self {
        Self::OnAccept(Strangers::default())
    }
}

/// Bounds on ClientServer sessions not yet accepted ([`ClientAdmission::OnAccept`]): what a
/// stranger can make the node hold is at most `window` (plus a few hundred bytes of session
/// state), and at most `max` strangers (`max_per_source` from one address) exist at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strangers {
    /// The receive window of a session until it is accepted. Default 16 records / 16 KiB
    /// (room for a login request and its retries, not for a stream).
    pub window: InboundWindow,
    /// Most sessions not yet accepted at once (beyond: `HandshakeCapacity`). Default 1,024.
    pub max: usize,
    /// Most sessions not yet accepted from one source address (the connection's peer IP) at
    /// once (beyond: `SourceCapacity`). Default 64.
    pub max_per_source: usize,
}

impl Default for Strangers {
    fn default() -> Self {
        Self {
            window: InboundWindow {
                messages: 16,
                bytes: 16 * 1024,
            },
            max: 1024,
            max_per_source: 64,
        }
    }
}

/// Configuration of one mesh node.
#[derive(Clone, Debug)]
pub struct MeshConfig {
    /// The mesh this node joins.
    pub mesh: MeshName,
    /// This node's routing id.
    pub node: NodeRid,
    /// Override of the NodeGeneration (tests); `None` = fresh at start.
    pub generation: Option<NodeGeneration>,
    /// Endpoint the relay ROUTER binds (`tcp://127.0.0.1:*` picks a free port).
    pub relay_endpoint: String,
    /// Endpoint the completion ROUTER binds.
    pub completion_endpoint: String,
    /// Endpoint the ClientServer ROUTER binds; `None` = no ClientServer.
    pub client_endpoint: Option<String>,
    /// The mesh secret (HMAC key). Required unless `insecure_dev_mode`.
    pub secret: Option<MeshSecret>,
    /// Allows starting without a secret (a fixed public key is used; proves nothing).
    pub insecure_dev_mode: bool,
    /// libzmq socket limits.
    pub transport: TransportLimits,
    /// Outbound admission budget per peer (relay data).
    pub peer_budget: OutboundBudget,
    /// Receive window granted to each peer (relay data).
    pub peer_window: InboundWindow,
    /// Natural batching of relay records (and of replies on the completion connection).
    pub batching: Batching,
    /// Outbound budget per ClientServer client: pushes wait for room in it, replies are
    /// counted in it without waiting ([`ClientOutbound`]). Default 4,096 messages / 1 MiB
    /// ([`ClientOutbound::BUDGET`]): with the slow-consumer rules a session that does not read
    /// costs at most about 3 MiB (docs/MESH.md, "Slow consumers").
    pub client_budget: OutboundBudget,
    /// Slow consumers: how long a client's queue may stay over `client_budget`, and libzmq's
    /// share per client connection.
    pub client_outbound: ClientOutbound,
    /// Receive window granted to each ClientServer client (requests and one-way DATA). The
    /// node holds at most this much per client while its application queue is full and keeps
    /// reading the client socket (Pings, other and new clients progress). Held memory is
    /// bounded by this window times `max_clients`. Default 4,096 records / 1 MiB.
    pub client_window: InboundWindow,
    /// Whether a session gets `client_window` at once or only once accepted (strangers are
    /// bounded until then). Default [`ClientAdmission::OnAccept`].
    pub client_admission: ClientAdmission,
    /// Capacity of the inbound channel to the layer above (application records).
    pub inbound_capacity: usize,
    /// How long a send waits for admission before `DeadlineExceeded` (SB-6.5).
    pub send_timeout: Duration,
    /// Liveness and handshake timing.
    pub liveness: Liveness,
    /// Most handshakes in progress at once (bounds state under a connection flood).
    pub max_pending_handshakes: usize,
    /// Most handshakes in progress from one source address (the connection's peer IP), so one
    /// address cannot take all of `max_pending_handshakes` (`SourceCapacity`). Default 64.
    pub max_pending_handshakes_per_source: usize,
    /// Most ClientServer clients tracked at once.
    pub max_clients: usize,
    /// Most ClientServer sessions from one source address (the connection's peer IP) at once,
    /// so one address cannot take all of `max_clients` (`SourceCapacity`). Default 1,000
    /// (players behind one NAT share an address).
    pub max_clients_per_source: usize,
    /// How many times the I/O thread yields the CPU, watching for work, before it sleeps in
    /// `zmq::poll` (a sleep/wake-up costs 20-25 µs on small VMs; 0 = never spin).
    pub io_spin_yields: usize,
    /// Test-facing wire tap (off when `None`).
    pub tap: Option<WireTap>,
}

impl MeshConfig {
    /// Defaults: ephemeral loopback ports, no ClientServer, no secret (must be set).
    pub fn new(mesh: MeshName, node: NodeRid) -> Self {
        Self {
            mesh,
            node,
            generation: None,
            relay_endpoint: "tcp://127.0.0.1:*".into(),
            completion_endpoint: "tcp://127.0.0.1:*".into(),
            client_endpoint: None,
            secret: None,
            insecure_dev_mode: false,
            transport: TransportLimits::default(),
            peer_budget: OutboundBudget::default(),
            peer_window: InboundWindow::default(),
            batching: Batching::default(),
            client_budget: ClientOutbound::BUDGET,
            client_outbound: ClientOutbound::default(),
            // 4,096 records as for peers (64 capped a client's one-way throughput at about
            // 0.1× raw libzmq: the client idled waiting for credit); the bytes stay 1 MiB.
            client_window: InboundWindow {
                messages: 4096,
                bytes: 1024 * 1024,
            },
            client_admission: ClientAdmission::default(),
            inbound_capacity: 4096,
            send_timeout: Duration::from_secs(5),
            liveness: Liveness::default(),
            max_pending_handshakes: 256,
            max_pending_handshakes_per_source: 64,
            max_clients: 10_000,
            max_clients_per_source: 1_000,
            io_spin_yields: 100,
            tap: None,
        }
    }
}

/// Where to reach a peer node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerAddress {
    /// The peer's NodeRid (it must prove it in the handshake).
    pub node: NodeRid,
    /// The peer's relay endpoint (IP literal, e.g. `tcp://127.0.0.1:5555`).
    pub relay: String,
    /// The peer's completion endpoint.
    pub completion: String,
}
