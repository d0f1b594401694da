//! The ZLink node: one mesh process hosting actors (EG-14 placement and activation, direct actor
//! send/request across nodes, SB-12 failures, SB-10 shutdown).
//!
//! # Contract
//! - [`Node::start`] starts the mesh node, registers this process' owner lease in the Location
//!   Store (a new `OwnerLeaseGeneration` per process start) and renews it; then it connects to
//!   the configured peers (one direction per pair: a node dials the peers whose name sorts
//!   after its own) and serves RouteMesh and ClientServer records.
//! - Activation is infrastructure work: the node that is asked to own an actor reserves it in
//!   the Location Store; only a `Won` reservation runs the factory, then commits `Ready`; every
//!   other caller gets the holder's Ready ref or waits for it (EG-14). Only Ready actors are
//!   handed out.
//! - A call to an actor goes to the owner in the ref's location snapshot — as a 160 ActorCall on
//!   the relay connection when it is another node, its reply on the completion connection. The
//!   owner validates the fences (`actor::fence::check_call`) and appends the payload to
//!   the actor's own queue (EG-2.1). Nothing is resent after a timeout or a failure (SB-12);
//!   the Location Store is not read per call (SB-1.2).
//! - [`Node::shutdown`] (SB-10): refuse new work of every origin, drain accepted work until a
//!   deadline, end the actors and wait for running turns, and only then release the owner
//!   lease and close the mesh (peers get Disconnect).

pub mod access;
mod activation;
mod admin;
mod bound;
mod calls;
pub mod client;
mod dispatch;
mod follow;
mod lease;
pub use lease::{LeaseState, LeaseStep};
mod local;
pub mod metrics;
mod peers;
pub mod protocol;
mod relocate;
mod relocate_spot;
pub use crate::relocation::{
    AbortReason, FailReason, FollowConfig, FollowCounters, FollowRefusal, RelocationConfig,
    SourcePhaseName,
};
#[doc(hidden)]
pub use relocate::RelocationStep;
pub use relocate::{RelocateError, RelocationCounters, RelocationReport, RelocationSummary};
pub use relocate_spot::SpotRelocationReport;
mod shutdown;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use zlink_mesh::{BoundEndpoints, InboundReceiver, MeshConfig, MeshNode, MeshSecret, PeerAddress};
use zlink_wire::{
    ActorId, BindingGeneration, DisconnectReason, MeshName, NodeGeneration, NodeRid,
    SessionLifecycleGeneration, SessionRid,
};

use crate::actor::exec::{ExecShared, Inflight};
use crate::actor::fence::{OwnerGate, OwnerStanding};
use crate::actor::{ActorError, ActorRegistry};
pub use crate::backlog::BacklogStats;
use crate::backlog::{Backlogs, WaitQueues};
use crate::config::{
    ConfigError, INLINE_DELIVERY_BUDGET, NodeConfig, OWNER_LEASE_TTL, REQUEST_TIMEOUT,
    SESSION_REPLACEMENT_CALLBACK_TIMEOUT, StartupBuilder,
};
use crate::runtime::{LaneLimits, Runtime, RuntimeConfig};
use crate::session::{
    Clock, FlowCounters, SessionHandlers, SessionOwner, SessionOwnerConfig, SystemClock,
};
use crate::store::{LocationStore, OwnerLease, StoreError};
use activation::ActivationWaiter;

/// How long a starting node asks a store that answers unavailable again before its start fails
/// (the first owner registration; `Node::start`).
const STARTUP_STORE_PATIENCE: Duration = Duration::from_secs(5);

/// How long a node waits for a listed peer whose name sorts before its own to dial it before
/// dialling that peer itself (docs/MESH.md, "Who dials whom").
const LATE_DIAL_AFTER: Duration = Duration::from_secs(5);

/// The dial of a listed peer whose name sorts first: that peer dials us when it lists us too,
/// so we wait [`LATE_DIAL_AFTER`] for it to come up, and dial it only if it has not (it may not
/// list us). Should it dial us after all, the mesh keeps one of the two connections.
async fn late_dial(inner: std::sync::Weak<Inner>, peer: PeerAddress) {
    tokio::time::sleep(LATE_DIAL_AFTER).await;
    let Some(inner) = inner.upgrade() else {
        return;
    };
    if inner.mesh.peer_generation(&peer.node).is_none() {
        tracing::info!(peer = %peer.node, "listed peer has not dialled us; dialling it");
        let _ = inner.mesh.connect(peer);
    }
}
use calls::{request_error, send_error};
use local::{Actors, SpotState};
use protocol::NodeInfo;

pub use crate::actor::Create;

/// Options of [`Node::start`].
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The mesh node's configuration (name, endpoints, secret, limits).
    pub mesh: MeshConfig,
    /// The Location Store (shared by every node of the mesh).
    pub store: Arc<dyn LocationStore>,
    /// The actor types this node hosts.
    pub registry: ActorRegistry,
    /// Peers of the mesh: this node dials those whose name sorts after its own (itself is
    /// skipped), so every node of a mesh must list every other (docs/MESH.md, "Who dials whom").
    pub peers: Vec<PeerAddress>,
    /// Owner lease time to live; renewed every third of it.
    pub lease_ttl: Duration,
    /// Timeout of node-to-node control requests (activate, destroy) and of client calls that
    /// name none (`timeouts.request_ms`).
    pub request_timeout: Duration,
    /// Admission limits of every actor lane (`[lanes]`, EG-7.1): items and bytes of the
    /// application and lifecycle FIFOs. `application_items` also bounds the records one
    /// activation barrier holds (beyond it a call is refused as `LaneFull`).
    pub lanes: LaneLimits,
    /// SessionReplacementCallbackTimeout (SB-6.4; `timeouts.session_replacement_callback_ms`).
    pub session_replacement_callback_timeout: Duration,
    /// Inline delivery (`docs/RUNTIME.md`, "Inline delivery"): how long one receive pass of the
    /// mesh I/O thread may spend running the turns of records whose lane was idle right there,
    /// instead of handing them to the lane runtime's workers (default 1 ms; zero: never). Past
    /// it, the rest of the pass goes through the lanes (`timeouts.inline_delivery_budget_ms`).
    pub inline_delivery_budget: Duration,
    /// Bindings one session may hold, current and in flight (default 1,024): a bound on what a
    /// client can make its session owner keep; a bind beyond it fails `InvalidOperation`.
    pub max_bindings_per_session: usize,
    /// The timings and bounds of the relocations this node takes part in (`[relocation]`):
    /// SessionRelocationSealTimeout (SB-8.3, `seal_timeout`, 3,000 ms), which the session owner
    /// also holds a binding's seal for; the cutover timeout (SB-8.9, 1,000 ms); the source's
    /// wait for relay-ready (3,000 ms) and for the target's result after the cutover (11,000
    /// ms, then the store decides); the target's wait for the source's relay stream after a
    /// fallback (`source_wait`, 3,000 ms); the most timers one moving actor's Restore may start
    /// (1,024); the target's temporary queue bound (65,536 records / 256 MiB).
    pub relocation: crate::relocation::RelocationConfig,
    /// The session application: packet handlers by key and session callbacks (SB-5, SB-6).
    pub sessions: SessionHandlers,
    /// The clock of the session timers (the 100 ms replacement close, the callback timeout);
    /// tests inject a [`crate::session::ManualClock`].
    pub clock: Arc<dyn Clock>,
    /// The clock of the owner lease: its renewal timer and the local lease deadline (SB-5.11).
    /// Default [`crate::clock::BootClock`] (`CLOCK_BOOTTIME`: it counts time the machine was
    /// suspended, so a lease that ran out during a suspend has lapsed at once after the
    /// resume); tests inject a [`crate::session::ManualClock`].
    pub lease_clock: Arc<dyn Clock>,
    /// Where to serve the Prometheus endpoint (`GET /metrics`, [`metrics`]); `None` (the
    /// default) serves none. Port 0 picks a free port ([`Node::metrics_addr`]).
    pub metrics: Option<std::net::SocketAddr>,
    /// Who may do what on the client port ([`access`]): the policy for clients that are not
    /// the operator, the operator credential and the bound on a session's operations in
    /// flight. The default ([`access::ClientAccess::new`]) refuses every framework operation
    /// to every session (only session packets pass) and has no operator credential.
    pub client_access: access::ClientAccess,
    /// Message Follow on this node as the old owner of a moved actor (SB-5.10, SB-5.12): how
    /// long it forwards what still arrives at the old route after a commit (default 5 s, read
    /// on [`NodeOptions::clock`]) and how many moved actors it remembers at most.
    pub message_follow: crate::relocation::FollowConfig,
}

impl NodeOptions {
    /// Defaults (those of [`NodeConfig`]): 10 s lease, 5 s request timeout, the EG-7.1 lane
    /// limits (1,024 items / 64 MiB application, 128 items / 4 MiB lifecycle), 30 s session
    /// replacement callback and 3 s relocation seal timeouts, no peers.
    #[must_use]
    pub fn new(mesh: MeshConfig, store: Arc<dyn LocationStore>, registry: ActorRegistry) -> Self {
        Self {
            mesh,
            store,
            registry,
            peers: Vec::new(),
            lease_ttl: OWNER_LEASE_TTL,
            request_timeout: REQUEST_TIMEOUT,
            lanes: LaneLimits::default(),
            session_replacement_callback_timeout: SESSION_REPLACEMENT_CALLBACK_TIMEOUT,
            inline_delivery_budget: INLINE_DELIVERY_BUDGET,
            max_bindings_per_session: crate::session::aggregate::DEFAULT_BINDING_LIMIT,
            relocation: crate::relocation::RelocationConfig::default(),
            sessions: SessionHandlers::new(),
            clock: Arc::new(SystemClock),
            lease_clock: Arc::new(crate::clock::BootClock::new()),
            metrics: None,
            client_access: access::ClientAccess::new(),
            message_follow: crate::relocation::FollowConfig::default(),
        }
    }

    /// Who may do what on the client port ([`access`]); e.g.
    /// `with_client_access(ClientAccess::open())` for a trusted network.
    #[must_use]
    pub fn with_client_access(mut self, access: access::ClientAccess) -> Self {
        self.client_access = access;
        self
    }

    /// The session application (packet handlers, callbacks).
    ///
    /// # Errors
    /// [`NodeError::Config`] for a duplicate packet key (SB-3.3) or a reserved one.
    pub fn with_sessions(mut self, sessions: SessionHandlers) -> Result<Self, NodeError> {
        sessions.validate()?;
        self.sessions = sessions;
        Ok(self)
    }
}

impl NodeOptions {
    /// Options from an operator's [`NodeConfig`], through the SB-3 startup rules:
    /// [`NodeConfig::validate`] and [`StartupBuilder`] (`EnableActorDispatch` without a
    /// MeshName; no object role or no Location Store is a configuration error). The first mesh
    /// of the configuration carries actor traffic (several meshes are accepted, SB-3.4).
    ///
    /// # Errors
    /// [`NodeError::Config`] for every startup configuration error, including a configuration
    /// that does not enable actor dispatch.
    pub fn from_config(
        config: &NodeConfig,
        registry: ActorRegistry,
        sessions: SessionHandlers,
    ) -> Result<Self, NodeError> {
        config.validate()?;
        sessions.validate()?;
        let mut builder = StartupBuilder::from_config(config);
        for (key, handler) in sessions.clone().into_parts().0 {
            builder = builder.handler(key, handler);
        }
        let startup = builder.build()?;
        if !startup.actor_dispatch {
            return Err(NodeError::ActorDispatchDisabled);
        }
        let store = startup.open_store()?.ok_or(ConfigError::NoLocationStore)?;
        let mesh = config.meshes.first().ok_or(ConfigError::NoMesh)?;
        let mut mc = MeshConfig::new(mesh.name.clone(), config.node.clone());
        mc.relay_endpoint = mesh.relay.clone();
        mc.completion_endpoint = mesh.completion.clone();
        if let Some(client) = &config.client {
            client.apply(&mut mc);
        }
        mc.insecure_dev_mode = config.insecure_dev_mode;
        if let Some(secret) = &config.mesh_secret {
            mc.secret = Some(MeshSecret::new(secret.as_bytes().to_vec()).map_err(NodeError::Mesh)?);
        }
        mc.send_timeout = config.timeouts.send;
        mc.liveness.heartbeat_interval = config.timeouts.heartbeat_interval;
        mc.liveness.heartbeat_timeout = config.timeouts.heartbeat_timeout;
        mc.liveness.heartbeat_ttl = config.timeouts.heartbeat_timeout;
        mc.liveness.peer_timeout = config.timeouts.heartbeat_timeout;
        let mut options = NodeOptions::new(mc, store, registry);
        options.sessions = sessions;
        options.peers = mesh
            .peers
            .iter()
            .map(|p| PeerAddress {
                node: p.node.clone(),
                relay: p.relay.clone(),
                completion: p.completion.clone(),
            })
            .collect();
        options.metrics = config.metrics;
        options.lease_ttl = config.timeouts.owner_lease_ttl;
        options.request_timeout = config.timeouts.request;
        options.session_replacement_callback_timeout = config.timeouts.session_replacement_callback;
        let r = &config.relocation;
        let rc = &mut options.relocation;
        rc.seal_timeout = r.seal(&config.timeouts);
        if let Some(v) = r.cutover_timeout_ms {
            rc.cutover_timeout = v;
        }
        if let Some(v) = r.restore_timeout_ms {
            rc.restore_timeout = v;
        }
        if let Some(v) = r.result_timeout_ms {
            rc.result_timeout = v;
        }
        if let Some(v) = r.source_wait_ms {
            rc.source_wait = v;
        }
        if let Some(v) = r.max_restore_timers {
            rc.max_restore_timers = v;
        }
        if let Some(v) = r.target_queue_records {
            rc.target_queue_records = v;
        }
        if let Some(v) = r.target_queue_bytes {
            rc.target_queue_bytes = v;
        }
        options.inline_delivery_budget = config.timeouts.inline_delivery_budget;
        if let Some(client) = &config.client {
            if let Some(v) = client.max_operations_per_session {
                options.client_access.max_operations_per_session = v;
            }
            if let Some(v) = client.max_bindings_per_session {
                options.max_bindings_per_session = v;
            }
        }
        let lanes = &config.lanes;
        options.lanes = LaneLimits {
            application_items: lanes.application_items as usize,
            application_bytes: lanes.application_bytes,
            lifecycle_items: lanes.lifecycle_items as usize,
            lifecycle_bytes: lanes.lifecycle_bytes,
            ..LaneLimits::default()
        };
        Ok(options)
    }
}

/// A node that could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The mesh could not start (configuration or bind failure).
    #[error("mesh: {0}")]
    Mesh(#[from] zlink_mesh::ConfigError),
    /// The owner lease could not be registered.
    #[error("location store: {0}")]
    Store(#[from] StoreError),
    /// The lane runtime could not start its worker pools.
    #[error("lane runtime: {0}")]
    Runtime(std::io::Error),
    /// A startup configuration error (SB-3, SB-14.1).
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// The metrics endpoint could not be bound.
    #[error("metrics endpoint {addr}: {source}")]
    Metrics {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The configuration does not enable actor dispatch, which a node hosting actors needs.
    #[error("configuration: actor dispatch is not enabled (actor_dispatch = true)")]
    ActorDispatchDisabled,
}

struct Inner {
    mesh: MeshNode,
    /// The session owner of this node's client connections.
    sessions: Arc<SessionOwner>,
    runtime: Runtime,
    mesh_name: MeshName,
    store: Arc<dyn LocationStore>,
    registry: ActorRegistry,
    /// The owner lease and its local deadline (`lease.rs`).
    lease: Mutex<LeaseState>,
    /// The owner's standing read by every admission and turn start (local lease deadline,
    /// shutdown).
    gate: Arc<OwnerGate>,
    actors: Mutex<Actors>,
    spots: Mutex<HashMap<String, SpotState>>,
    activations: Mutex<HashMap<ActorId, Vec<ActivationWaiter>>>,
    exec: Arc<ExecShared>,
    paused: watch::Sender<bool>,
    /// `true` once shutdown gave up draining: work still waiting elsewhere (a client call
    /// forwarded to another node) answers `Unavailable` now, before the mesh closes.
    closing: watch::Sender<bool>,
    inflight: Arc<Inflight>,
    accepting: AtomicBool,
    peers: Vec<PeerAddress>,
    request_timeout: Duration,
    /// What one receive pass of the mesh I/O thread may spend running records inline.
    inline_budget: Duration,
    /// Records one activation barrier holds at most (the application lane's item limit); also
    /// the limit of an actor's backlog.
    held_limit: usize,
    /// Records from the mesh waiting for a full actor lane ([`crate::backlog`]).
    actor_backlogs: Arc<Backlogs<ActorId>>,
    /// Client sends waiting for a target node (a full lane, a peer's window), per node.
    peer_sends: Arc<WaitQueues<NodeRid>>,
    /// The tokio runtime the node was started on (backlog drains started off it).
    rt: tokio::runtime::Handle,
    lease_ttl: Duration,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The owner lease driver; stopped by shutdown before the lease is released.
    lease_task: Mutex<Option<JoinHandle<()>>>,
    activations_done: AtomicU64,
    calls_in: AtomicU64,
    calls_out: AtomicU64,
    sends_dropped: AtomicU64,
    timer_ticks_skipped: Arc<AtomicU64>,
    /// [`NodeCounters::bindings_owner_lost`].
    bindings_owner_lost: crate::sync::atomic::AtomicU64,
    /// Client operations and store latency ([`metrics`]).
    metrics: metrics::NodeMetrics,
    /// The bound metrics endpoint.
    metrics_addr: Option<std::net::SocketAddr>,
    /// Client sessions' rights and the refusal counters ([`access`]).
    access: Arc<access::ClientAccessTable>,
    /// Relocations in progress, the last finished ones, counters ([`relocate`]).
    relocations: relocate::Relocations,
    /// The timings of the relocations this node takes part in.
    relocation: crate::relocation::RelocationConfig,
    /// The node's clock ([`NodeOptions::clock`]): the relocation drivers' timers and Message
    /// Follow's deadlines.
    clock: Arc<dyn Clock>,
    /// Message Follow of the actors that moved away from here (`follow.rs`); locked after
    /// `actors` when both are held.
    follow: crate::sync::Mutex<crate::relocation::FollowTable>,
    /// Message Follow's ordered sender of forwards (`follow.rs`).
    follow_out: follow::Forwarder,
}

/// A running node. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node", self.node_rid())
            .field("generation", &self.generation())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    /// Starts the mesh node, registers the owner lease, connects to peers and serves.
    ///
    /// # Errors
    /// [`NodeError::Mesh`] when the mesh cannot start; [`NodeError::Store`] when the lease cannot
    /// be registered.
    pub async fn start(options: NodeOptions) -> Result<Node, NodeError> {
        if let Some(wait) = options.store.write_wait_limit() {
            crate::config::check_lease_ttl(options.lease_ttl, wait)?;
        }
        let relocation = options.relocation;
        let node_metrics = metrics::NodeMetrics::default();
        let store: Arc<dyn LocationStore> = Arc::new(metrics::TimedStore::new(
            options.store,
            node_metrics.store.clone(),
        ));
        let metrics_listener = match options.metrics {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| NodeError::Metrics { addr, source })?;
                let bound = l
                    .local_addr()
                    .map_err(|source| NodeError::Metrics { addr, source })?;
                Some((l, bound))
            }
            None => None,
        };
        let mesh_name = options.mesh.mesh.clone();
        let peer_timeout = options.mesh.liveness.peer_timeout;
        let (mesh, inbound) = MeshNode::start(options.mesh)?;
        let lease_clock = options.lease_clock;
        // The first registration can meet another node's write on a shared store (SQLite's
        // file lock held past the lease connection's short busy timeout on a loaded machine,
        // e.g. when the nodes of a mesh start together): a store that is only unavailable is
        // asked again, for up to STARTUP_STORE_PATIENCE, before the start fails. Registering
        // is idempotent for one NodeGeneration (store core), so a retry after a write that did
        // land keeps that lease; its deadline counts from the answered attempt's send.
        let asked = std::time::Instant::now();
        let (lease, sent) = loop {
            let sent = lease_clock.now();
            match store
                .register_owner(mesh.node().clone(), mesh.generation(), options.lease_ttl)
                .await
            {
                Ok(lease) => break (lease, sent),
                Err(StoreError::Unavailable { .. }) if asked.elapsed() < STARTUP_STORE_PATIENCE => {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let lease = LeaseState::new(lease, options.lease_ttl, sent);
        let gate = Arc::new(OwnerGate::new(lease_clock, lease.deadline()));
        let (paused, paused_rx) = watch::channel(false);
        let mut limits = options.lanes;
        limits.application_items = limits.application_items.max(1);
        limits.lifecycle_items = limits.lifecycle_items.max(1);
        let held_limit = limits.application_items;
        let seal_held_limit = (limits.application_items, limits.application_bytes);
        let runtime = Runtime::new(RuntimeConfig {
            limits,
            ..RuntimeConfig::default()
        })
        .map_err(NodeError::Runtime)?;
        let node_clock = options.clock.clone();
        let (packets, callbacks) = {
            let registry = options.sessions.registry()?;
            (registry, options.sessions.into_parts().1)
        };
        let session_cfg = SessionOwnerConfig {
            node: mesh.node().clone(),
            lifecycle: SessionLifecycleGeneration::new(mesh.generation().get()),
            callback_timeout: options.session_replacement_callback_timeout,
            binding_limit: options.max_bindings_per_session,
            request_timeout: options.request_timeout,
            clock: options.clock.clone(),
            seal_timeout: options.relocation.seal_timeout,
            held_limit: seal_held_limit,
        };
        let session_runtime = runtime.clone();
        let inflight = Arc::new(Inflight::default());
        let node = Node {
            inner: Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| Inner {
                sessions: Arc::new(SessionOwner::new(
                    session_cfg,
                    Box::new(bound::NodeSessionHost(weak.clone(), inflight.clone())),
                    session_runtime,
                    packets,
                    callbacks,
                    tokio::runtime::Handle::current(),
                )),
                mesh,
                runtime,
                mesh_name,
                store,
                registry: options.registry,
                lease: Mutex::new(lease),
                gate: gate.clone(),
                actors: Mutex::new(Actors::default()),
                spots: Mutex::new(HashMap::new()),
                activations: Mutex::new(HashMap::new()),
                exec: Arc::new(ExecShared {
                    paused: paused_rx,
                    send_failures: AtomicU64::new(0),
                    turns: AtomicU64::new(0),
                    gate,
                    running: Arc::new(Inflight::default()),
                }),
                paused,
                closing: watch::channel(false).0,
                inflight,
                accepting: AtomicBool::new(true),
                peers: options.peers,
                request_timeout: options.request_timeout,
                inline_budget: options.inline_delivery_budget,
                held_limit,
                actor_backlogs: Arc::new(Backlogs::new(weak.clone())),
                peer_sends: Arc::new(WaitQueues::default()),
                rt: tokio::runtime::Handle::current(),
                lease_ttl: options.lease_ttl,
                tasks: Mutex::new(Vec::new()),
                lease_task: Mutex::new(None),
                activations_done: AtomicU64::new(0),
                calls_in: AtomicU64::new(0),
                calls_out: AtomicU64::new(0),
                sends_dropped: AtomicU64::new(0),
                timer_ticks_skipped: Arc::new(AtomicU64::new(0)),
                bindings_owner_lost: crate::sync::atomic::AtomicU64::new(0),
                metrics: node_metrics,
                metrics_addr: metrics_listener.as_ref().map(|(_, a)| *a),
                access: access::ClientAccessTable::new(options.client_access),
                relocations: relocate::Relocations::default(),
                relocation,
                clock: node_clock,
                follow: crate::sync::Mutex::new(crate::relocation::FollowTable::new(
                    options.message_follow,
                )),
                follow_out: follow::Forwarder::default(),
            }),
        };
        node.spawn_background(inbound);
        // Before any peer is dialled: no peer event of this process is missed.
        let watch = tokio::spawn(peers::watch(
            Arc::downgrade(&node.inner),
            node.inner.mesh.subscribe(),
            peer_timeout,
        ));
        lock(&node.inner.tasks).push(watch);
        if let Some((listener, addr)) = metrics_listener {
            let server = tokio::spawn(metrics::serve(
                listener,
                Arc::downgrade(&node.inner),
                node.inner.metrics.endpoint.clone(),
            ));
            lock(&node.inner.tasks).push(server);
            tracing::info!(%addr, "metrics served at /metrics");
        }
        let me = node.node_rid().clone();
        for p in &node.inner.peers {
            // The peers whose name sorts after ours at once (docs/MESH.md, "Who dials whom"): a
            // pair that lists each other then has one dialler and one connection per link from
            // the start. The others only if they have not dialled us within LATE_DIAL_AFTER.
            // A connect failure only means the mesh is closing.
            if p.node.as_str() > me.as_str() {
                let _ = node.inner.mesh.connect(p.clone());
            } else {
                let late = tokio::spawn(late_dial(Arc::downgrade(&node.inner), p.clone()));
                lock(&node.inner.tasks).push(late);
            }
        }
        tracing::info!(node = %me, generation = %node.generation(), "node started");
        Ok(node)
    }

    fn spawn_background(&self, inbound: InboundReceiver) {
        let events = self.inner.mesh.take_client_events();
        // Records go from the mesh I/O thread straight into lanes where they can
        // (`dispatch::Sink`); the rest comes through the inbound loop.
        if let Err(e) = self
            .inner
            .mesh
            .set_sink(Box::new(dispatch::Sink::new(self)))
        {
            tracing::debug!(error = %e, "mesh closed before the sink was installed");
        }
        let d = tokio::spawn(dispatch::run(self.clone(), inbound, events));
        lock(&self.inner.tasks).push(d);
        *lock(&self.inner.lease_task) = Some(self.spawn_lease_renewal());
    }

    /// This node's routing id.
    #[must_use]
    pub fn node_rid(&self) -> &NodeRid {
        self.inner.mesh.node()
    }

    /// This process' generation (new on every start).
    #[must_use]
    pub fn generation(&self) -> NodeGeneration {
        self.inner.mesh.generation()
    }

    /// The mesh name.
    #[must_use]
    pub fn mesh_name(&self) -> &MeshName {
        &self.inner.mesh_name
    }

    /// The bound endpoints.
    #[must_use]
    pub fn endpoints(&self) -> &BoundEndpoints {
        self.inner.mesh.endpoints()
    }

    /// The address peers dial.
    #[must_use]
    pub fn address(&self) -> PeerAddress {
        self.inner.mesh.address()
    }

    /// The mesh node (counters, peer events).
    #[must_use]
    pub fn mesh(&self) -> &MeshNode {
        &self.inner.mesh
    }

    /// The Location Store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn LocationStore> {
        &self.inner.store
    }

    /// The current owner lease.
    #[must_use]
    pub fn lease(&self) -> OwnerLease {
        lock(&self.inner.lease).lease().clone()
    }

    /// Time left before the local owner lease deadline (SB-5.11): zero once it passed without
    /// a successful renewal — then the node serves nothing for its actors.
    #[must_use]
    pub fn lease_remaining(&self) -> Duration {
        self.inner.gate.remaining()
    }

    /// Connects to a peer that was not in the options (dial direction is the caller's choice).
    ///
    /// # Errors
    /// [`ActorError::ShuttingDown`] when the mesh is closed.
    pub fn connect(&self, peer: PeerAddress) -> Result<(), ActorError> {
        self.inner
            .mesh
            .connect(peer)
            .map_err(|_| ActorError::ShuttingDown)
    }

    /// Waits until every configured peer is up, at most `timeout`; returns the peers still down.
    pub async fn wait_peers(&self, timeout: Duration) -> Vec<NodeRid> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut down = Vec::new();
        for p in &self.inner.peers {
            if p.node == *self.node_rid() {
                continue;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if self
                .inner
                .mesh
                .wait_peer_up(&p.node, None, left)
                .await
                .is_none()
            {
                down.push(p.node.clone());
            }
        }
        down
    }

    /// PAUSES (`true`) or resumes the application domain: while paused no actor turn starts;
    /// infrastructure (transport, completions, activation bookkeeping) keeps running
    /// (EG-16.25). Turns already running continue.
    pub fn set_application_paused(&self, paused: bool) {
        self.inner.paused.send_replace(paused);
    }

    /// Identity, peers that are up, hosted types and local actor count.
    #[must_use]
    pub fn info(&self) -> NodeInfo {
        let peers_up = self
            .inner
            .peers
            .iter()
            .filter(|p| p.node != *self.node_rid())
            .filter(|p| self.inner.mesh.peer_generation(&p.node).is_some())
            .map(|p| p.node.to_string())
            .collect();
        let peers = self
            .inner
            .peers
            .iter()
            .filter(|p| p.node != *self.node_rid())
            .map(|p| p.node.to_string())
            .collect();
        NodeInfo {
            node: self.node_rid().to_string(),
            generation: self.generation().get(),
            mesh: self.inner.mesh_name.to_string(),
            peers_up,
            peers,
            actor_types: self.inner.registry.names(),
            local_actors: lock(&self.inner.actors).live.len() as u64,
            sessions: self.inner.sessions.session_count() as u64,
            session_rejects: self
                .inner
                .sessions
                .flow()
                .snapshot()
                .into_iter()
                .map(|(record, reason, n)| (format!("{}/{}", record.as_str(), reason.as_str()), n))
                .collect(),
            mesh_drops: self
                .inner
                .mesh
                .counters()
                .drops()
                .into_iter()
                .map(|(reason, n)| (reason.as_str().to_owned(), n))
                .collect(),
            client_refusals: self
                .inner
                .access
                .refusals()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
            message_follow: follow::counters_map(&self.follow_counters())
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }

    /// Client sessions the node keeps access state for now (rights, created incarnations,
    /// operations in flight, [`access`]): each is dropped when its session ends.
    #[must_use]
    pub fn access_sessions(&self) -> usize {
        self.inner.access.sessions()
    }

    fn check_accepting(&self) -> Result<(), ActorError> {
        if self.inner.accepting.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(ActorError::ShuttingDown)
        }
    }

    /// The owner's standing now (local lease deadline, shutdown).
    pub(crate) fn standing(&self) -> OwnerStanding {
        self.inner.gate.standing()
    }

    fn is_local(&self, node: &NodeRid) -> bool {
        node == self.node_rid()
    }

    /// This node's session owner.
    pub(crate) fn sessions(&self) -> &Arc<SessionOwner> {
        &self.inner.sessions
    }

    /// Counters of rejected session records by kind and reason (SB-5.9).
    #[must_use]
    pub fn session_flow(&self) -> &FlowCounters {
        self.inner.sessions.flow()
    }

    /// What the relocation seals of this node's sessions hold now (SB-8.2): seals, held
    /// relays and their payload bytes; all 0 once every seal ended (commit, abort, timeout or
    /// session end).
    #[must_use]
    pub fn session_seals(&self) -> crate::session::SealGauges {
        self.inner.sessions.seal_gauges()
    }

    /// Inbound work that had to wait, per kind of target: actor lanes (24 and 160 from peers),
    /// session lanes (client packets), clients without credit (pushes) and target nodes of
    /// client sends. Each kind's `waited` counts work that could not go on at once and was
    /// kept (FIFO per target) instead of making other targets wait; `refused` what a full
    /// queue refused.
    #[must_use]
    pub fn inbound_backlogs(&self) -> InboundBacklogs {
        InboundBacklogs {
            actors: self.inner.actor_backlogs.stats(),
            sessions: self.inner.sessions.backlog_stats(),
            pushes: self.inner.sessions.push_backlog_stats(),
            peer_sends: self.inner.peer_sends.stats(),
        }
    }

    /// Open client sessions on this node.
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.inner.sessions.session_count()
    }

    /// When a replaced session's connection is due to close (SB-6.4), on the session clock;
    /// `None` when the session is not closing.
    #[must_use]
    pub fn session_close_deadline(&self, session: SessionRid) -> Option<std::time::Instant> {
        self.inner.sessions.close_deadline(session)
    }

    /// Closes a client connection; the client sees `reason` (SB-6.4, SB-5.14).
    pub(crate) fn close_client(&self, session: SessionRid, reason: DisconnectReason) {
        if let Err(e) = self.inner.mesh.close_client(session, reason) {
            tracing::debug!(%session, error = %e, "close of a client connection failed");
        }
    }

    /// The session layer admitted a client session: it gets the full client window.
    pub(crate) fn accept_client(&self, session: SessionRid) {
        if let Err(e) = self.inner.mesh.accept_client(session) {
            tracing::debug!(%session, error = %e, "accept of a client connection failed");
        }
    }

    pub(crate) fn inflight(&self) -> &Arc<Inflight> {
        &self.inner.inflight
    }

    /// Completes once shutdown stopped waiting for accepted work (SB-10): whoever still holds
    /// a request then answers it `Unavailable` at once, so it gets its one terminal before the
    /// mesh closes.
    pub(crate) fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.inner.closing.subscribe();
        async move {
            // An error means the node is gone, which is closed too.
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }

    pub(crate) fn accepting(&self) -> bool {
        self.inner.accepting.load(Ordering::Acquire)
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    pub(crate) fn count_call_in(&self) {
        self.inner.calls_in.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_send_dropped(&self) {
        self.inner.sends_dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// What waited for full lanes on one node ([`Node::inbound_backlogs`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InboundBacklogs {
    /// Actor lanes.
    pub actors: BacklogStats,
    /// Session lanes.
    pub sessions: BacklogStats,
    /// Pushes waiting for a client's credit (per session).
    pub pushes: BacklogStats,
    /// Client `CALL` sends waiting for a target node (per node).
    pub peer_sends: BacklogStats,
}

/// The bound-session identity a 24 presents (SB-5.3): its session owner (the authenticated
/// sender), that owner's lifecycle generation and the binding generation.
pub(crate) struct BoundCheck<'a> {
    pub node: &'a NodeRid,
    pub lifecycle: SessionLifecycleGeneration,
    pub generation: BindingGeneration,
    /// The record's session sequence (carried on when Message Follow forwards it).
    pub sequence: zlink_wire::SessionSequence,
}
