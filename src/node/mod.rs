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
//!   owner validates the fences ([`crate::actor::fence::check_call`]) and appends the payload to
//!   the actor's own queue (EG-2.1). Nothing is resent after a timeout or a failure (SB-12);
//!   the Location Store is not read per call (SB-1.2).
//! - [`Node::shutdown`] (SB-10): stop accepting new client work and activations, drain accepted
//!   work until a deadline, release the owner lease, close the mesh (peers get Disconnect).

mod bound;
pub mod chat;
pub mod client;
pub mod demo;
mod dispatch;
pub mod protocol;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use zlink_mesh::{
    BoundEndpoints, InboundReceiver, MeshConfig, MeshNode, MeshSecret, PeerAddress, Record,
    RequestError, SendError,
};
use zlink_wire::{
    ActorCall, ActorId, BindingGeneration, Deadline, DisconnectReason, DispatchKey, ErrorKind,
    MeshName, NodeGeneration, NodeRid, ObjectGeneration, SessionLifecycleGeneration, SessionRid,
};

use crate::actor::exec::{self, ExecShared, Inflight, Mailbox, ReplyTo, RtSpot, Work};
use crate::actor::fence::{self, CallFence};
use crate::actor::{
    ActivationInfo, ActorCtx, ActorError, ActorRef, ActorRegistry, ActorType, Message, SpotKind,
    SpotSpec,
};
use crate::config::{
    ConfigError, NodeConfig, OWNER_LEASE_TTL, REQUEST_TIMEOUT, SESSION_RELOCATION_SEAL_TIMEOUT,
    SESSION_REPLACEMENT_CALLBACK_TIMEOUT, StartupBuilder,
};
use crate::runtime::{LaneLimits, Runtime, RuntimeConfig};
use crate::session::{
    BindingSlot, Clock, FlowCounters, SessionHandlers, SessionOwner, SessionOwnerConfig,
    SystemClock,
};
use crate::store::{
    ActivationRequest, ActivationState, ActorLocation, ActorOwner, LocationStore, OwnerLease,
    Reservation, StoreError,
};
use protocol::{Activate, ActivateMode, DestroyActor, FirstRecord, NodeInfo};

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
    /// Peers of the mesh (this node dials those whose name sorts after its own; itself is
    /// skipped).
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
    /// SessionRelocationSealTimeout (SB-8.3; `timeouts.session_relocation_seal_ms`).
    pub session_relocation_seal_timeout: Duration,
    /// The session application: packet handlers by key and session callbacks (SB-5, SB-6).
    pub sessions: SessionHandlers,
    /// The clock of the session timers (the 100 ms replacement close, the callback timeout);
    /// tests inject a [`crate::session::ManualClock`].
    pub clock: Arc<dyn Clock>,
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
            session_relocation_seal_timeout: SESSION_RELOCATION_SEAL_TIMEOUT,
            sessions: SessionHandlers::new(),
            clock: Arc::new(SystemClock),
        }
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
        mc.client_endpoint = config.client.as_ref().map(|c| c.endpoint.clone());
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
        options.lease_ttl = config.timeouts.owner_lease_ttl;
        options.request_timeout = config.timeouts.request;
        options.session_replacement_callback_timeout = config.timeouts.session_replacement_callback;
        options.session_relocation_seal_timeout = config.timeouts.session_relocation_seal;
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
    /// The configuration does not enable actor dispatch, which a node hosting actors needs.
    #[error("configuration: actor dispatch is not enabled (actor_dispatch = true)")]
    ActorDispatchDisabled,
}

/// Counters of one node (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Actors activated here (factory runs that reached Ready).
    pub activations: u64,
    /// Actor calls received over the mesh.
    pub calls_in: u64,
    /// Actor calls sent over the mesh.
    pub calls_out: u64,
    /// Handler turns run.
    pub turns: u64,
    /// Send-handler failures (EG-15).
    pub send_failures: u64,
    /// One-way sends refused (lane full, stale ref) and dropped.
    pub sends_dropped: u64,
}

struct LocalActor {
    actor_ref: ActorRef,
    fence: CallFence,
    mailbox: Mailbox,
    spot: String,
    timers: Vec<JoinHandle<()>>,
    /// `Some` while the activation barrier is closed (EG-14 (4)): records admitted by the fence
    /// wait here in arrival order and enter the lane after the first record.
    held: Option<VecDeque<Work>>,
    /// The incarnation's bound session (SB-5.6): written and read under the actors lock, the
    /// same lock as submission. Dropped with the incarnation (destroy, lease loss: SB-4.1).
    binding: BindingSlot,
}

impl LocalActor {
    fn end(&mut self) {
        for t in self.timers.drain(..) {
            t.abort();
        }
        self.mailbox.end();
    }
}

#[derive(Default)]
struct Actors {
    live: HashMap<ActorId, LocalActor>,
    /// Last incarnation destroyed here per actor (answers `NotFound` instead of `Unavailable`).
    retired: HashMap<ActorId, ObjectGeneration>,
}

struct SpotState {
    kind: SpotKind,
    spot: RtSpot,
    members: usize,
}

type ActivationWaiter = oneshot::Sender<Result<ActorRef, (ErrorKind, String)>>;

struct Inner {
    mesh: MeshNode,
    /// The session owner of this node's client connections.
    sessions: Arc<SessionOwner>,
    runtime: Runtime,
    mesh_name: MeshName,
    store: Arc<dyn LocationStore>,
    registry: ActorRegistry,
    lease: Mutex<OwnerLease>,
    actors: Mutex<Actors>,
    spots: Mutex<HashMap<String, SpotState>>,
    activations: Mutex<HashMap<ActorId, Vec<ActivationWaiter>>>,
    exec: Arc<ExecShared>,
    paused: watch::Sender<bool>,
    inflight: Arc<Inflight>,
    accepting: AtomicBool,
    peers: Vec<PeerAddress>,
    request_timeout: Duration,
    /// Records one activation barrier holds at most (the application lane's item limit).
    held_limit: usize,
    lease_ttl: Duration,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    activations_done: AtomicU64,
    calls_in: AtomicU64,
    calls_out: AtomicU64,
    sends_dropped: AtomicU64,
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
        let mesh_name = options.mesh.mesh.clone();
        let (mesh, inbound) = MeshNode::start(options.mesh)?;
        let lease = options
            .store
            .register_owner(mesh.node().clone(), mesh.generation(), options.lease_ttl)
            .await?;
        let (paused, paused_rx) = watch::channel(false);
        let mut limits = options.lanes;
        limits.application_items = limits.application_items.max(1);
        limits.lifecycle_items = limits.lifecycle_items.max(1);
        let held_limit = limits.application_items;
        let runtime = Runtime::new(RuntimeConfig {
            limits,
            ..RuntimeConfig::default()
        })
        .map_err(NodeError::Runtime)?;
        let (packets, callbacks) = {
            let registry = options.sessions.registry()?;
            (registry, options.sessions.into_parts().1)
        };
        let session_cfg = SessionOwnerConfig {
            node: mesh.node().clone(),
            lifecycle: SessionLifecycleGeneration::new(mesh.generation().get()),
            callback_timeout: options.session_replacement_callback_timeout,
            request_timeout: options.request_timeout,
            clock: options.clock,
        };
        let session_runtime = runtime.clone();
        let node = Node {
            inner: Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| Inner {
                sessions: Arc::new(SessionOwner::new(
                    session_cfg,
                    Box::new(bound::NodeSessionHost(weak.clone())),
                    session_runtime,
                    packets,
                    callbacks,
                )),
                mesh,
                runtime,
                mesh_name,
                store: options.store,
                registry: options.registry,
                lease: Mutex::new(lease),
                actors: Mutex::new(Actors::default()),
                spots: Mutex::new(HashMap::new()),
                activations: Mutex::new(HashMap::new()),
                exec: Arc::new(ExecShared {
                    paused: paused_rx,
                    send_failures: AtomicU64::new(0),
                    turns: AtomicU64::new(0),
                }),
                paused,
                inflight: Arc::new(Inflight::default()),
                accepting: AtomicBool::new(true),
                peers: options.peers,
                request_timeout: options.request_timeout,
                held_limit,
                lease_ttl: options.lease_ttl,
                tasks: Mutex::new(Vec::new()),
                activations_done: AtomicU64::new(0),
                calls_in: AtomicU64::new(0),
                calls_out: AtomicU64::new(0),
                sends_dropped: AtomicU64::new(0),
            }),
        };
        node.spawn_background(inbound, options.lease_ttl);
        let me = node.node_rid().clone();
        for p in &node.inner.peers {
            if p.node.as_str() > me.as_str() {
                // A connect failure only means the mesh is closing.
                let _ = node.inner.mesh.connect(p.clone());
            }
        }
        tracing::info!(node = %me, generation = %node.generation(), "node started");
        Ok(node)
    }

    fn spawn_background(&self, inbound: InboundReceiver, ttl: Duration) {
        let events = self.inner.mesh.take_client_events();
        let d = tokio::spawn(dispatch::run(self.clone(), inbound, events));
        let weak = Arc::downgrade(&self.inner);
        let renew = tokio::spawn(async move {
            let period = ttl / 3;
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                let holder = lock(&inner.lease).holder.clone();
                match inner.store.renew_owner(holder, ttl).await {
                    Ok(l) => *lock(&inner.lease) = l,
                    Err(StoreError::LeaseNotLive { .. }) => {
                        Node { inner }.handle_lease_lost(ttl).await;
                    }
                    Err(e) => tracing::error!(error = %e, "owner lease renewal failed"),
                }
            }
        });
        lock(&self.inner.tasks).extend([d, renew]);
    }

    /// The owner lease ended (expired or superseded) before it was renewed: other nodes may
    /// already own this node's actors. The lease fences the runtime (EG-14): every local
    /// incarnation ends at once (later calls with their refs are `Unavailable`), then a new
    /// lease — a new OwnerLeaseGeneration — is registered for future activations.
    async fn handle_lease_lost(&self, ttl: Duration) {
        let ended: Vec<LocalActor> = lock(&self.inner.actors)
            .live
            .drain()
            .map(|(_, a)| a)
            .collect();
        tracing::error!(
            actors = ended.len(),
            "owner lease lost: ending every local actor"
        );
        for mut a in ended {
            a.end();
            self.leave_spot(&a.spot);
        }
        match self
            .inner
            .store
            .register_owner(self.node_rid().clone(), self.generation(), ttl)
            .await
        {
            Ok(l) => {
                tracing::warn!(lease = %l.holder.lease_generation, "new owner lease registered");
                *lock(&self.inner.lease) = l;
            }
            Err(e) => tracing::error!(error = %e, "registering a new owner lease failed"),
        }
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
        lock(&self.inner.lease).clone()
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

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> NodeStats {
        let i = &self.inner;
        NodeStats {
            activations: i.activations_done.load(Ordering::Relaxed),
            calls_in: i.calls_in.load(Ordering::Relaxed),
            calls_out: i.calls_out.load(Ordering::Relaxed),
            turns: i.exec.turns.load(Ordering::Relaxed),
            send_failures: i.exec.send_failures.load(Ordering::Relaxed),
            sends_dropped: i.sends_dropped.load(Ordering::Relaxed),
        }
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
        NodeInfo {
            node: self.node_rid().to_string(),
            generation: self.generation().get(),
            mesh: self.inner.mesh_name.to_string(),
            peers_up,
            actor_types: self.inner.registry.names(),
            local_actors: lock(&self.inner.actors).live.len() as u64,
        }
    }

    fn check_accepting(&self) -> Result<(), ActorError> {
        if self.inner.accepting.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(ActorError::ShuttingDown)
        }
    }

    fn is_local(&self, node: &NodeRid) -> bool {
        node == self.node_rid()
    }

    // ---------------------------------------------------------------------------------------
    // Create, get, destroy
    // ---------------------------------------------------------------------------------------

    /// Creates a new incarnation of `c.actor_id` on `c.node` (default: this node).
    ///
    /// # Errors
    /// `NotFound` ([`ActorError::UnknownActorType`]) when the owner has no factory for the
    /// type; `InvalidOperation` ([`ActorError::AlreadyExists`]) when an incarnation exists;
    /// `Unavailable` when the owner node is not connected; `Internal` when the factory fails.
    pub async fn create(&self, c: Create) -> Result<ActorRef, ActorError> {
        self.activate(c, ActivateMode::Create).await
    }

    /// Returns the Ready incarnation of `c.actor_id`, creating it on `c.node` if there is none.
    /// An existing incarnation is returned wherever it lives.
    ///
    /// # Errors
    /// As [`Node::create`], except that an existing incarnation is not an error.
    pub async fn get_or_create(&self, c: Create) -> Result<ActorRef, ActorError> {
        self.activate(c, ActivateMode::GetOrCreate).await
    }

    async fn activate(&self, c: Create, mode: ActivateMode) -> Result<ActorRef, ActorError> {
        self.check_accepting()?;
        let req = Activate {
            mode,
            actor_type: c.actor_type,
            actor_id: c.actor_id.to_string(),
            spot: c.spot,
            init: c.init.to_vec(),
            first: c.first.map(|(key, payload)| FirstRecord {
                key: key.get(),
                payload: payload.to_vec(),
            }),
        };
        match c.node {
            Some(n) if !self.is_local(&n) => self.activate_remote(&n, &req).await,
            _ => self.activate_local(req).await,
        }
    }

    async fn activate_remote(
        &self,
        node: &NodeRid,
        req: &Activate,
    ) -> Result<ActorRef, ActorError> {
        let payload = protocol::encode(req)?;
        let resp = self
            .inner
            .mesh
            .request(
                node,
                protocol::PEER_ACTIVATE,
                payload,
                self.inner.request_timeout,
            )
            .await
            .map_err(|e| request_error(node, e))?;
        protocol::decode(resp.payload.as_deref().unwrap_or_default())
    }

    /// Activation on this node as the candidate owner (EG-14).
    pub(crate) async fn activate_local(&self, mut req: Activate) -> Result<ActorRef, ActorError> {
        let mut first = req.first.take();
        let result = self.activate_here(req, &mut first).await;
        // The first record did not trigger an activation here: it is an ordinary send to the
        // Ready incarnation (never for a refused `create`).
        if let (Ok(r), Some(f)) = (&result, first) {
            if let Err(e) = self
                .send_raw(r, DispatchKey::new(f.key), Bytes::from(f.payload))
                .await
            {
                self.count_send_dropped();
                tracing::warn!(actor = %r, error = %e, "first record not delivered");
            }
        }
        result
    }

    async fn activate_here(
        &self,
        req: Activate,
        first: &mut Option<FirstRecord>,
    ) -> Result<ActorRef, ActorError> {
        self.check_accepting()?;
        let actor_id =
            ActorId::new(&req.actor_id).map_err(|e| ActorError::Codec(format!("actor id: {e}")))?;
        let ty = self
            .inner
            .registry
            .get(&req.actor_type)
            .cloned()
            .ok_or_else(|| ActorError::UnknownActorType {
                actor_type: req.actor_type.clone(),
            })?;
        if let Some(spot) = &req.spot {
            self.check_spot(spot)?;
        }
        if let Some(r) = self.local_ref(&actor_id) {
            return existing(req.mode, r);
        }
        // One local activator per actor id; concurrent local callers wait for its result.
        let waiter = {
            let mut acts = lock(&self.inner.activations);
            match acts.get_mut(&actor_id) {
                Some(waiters) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    acts.insert(actor_id.clone(), Vec::new());
                    None
                }
            }
        };
        if let Some(rx) = waiter {
            return match rx.await {
                Ok(Ok(r)) => existing(req.mode, r),
                Ok(Err((kind, detail))) => Err(ActorError::Remote { kind, detail }),
                Err(_) => Err(ActorError::ShuttingDown),
            };
        }
        // The slot answers the waiters even if this future is dropped half-way.
        let slot = ActivatorSlot {
            node: self,
            actor_id: actor_id.clone(),
            done: false,
        };
        let result = self.reserve_and_activate(&ty, &actor_id, &req, first).await;
        slot.finish(match &result {
            Ok(r) => Ok(r.clone()),
            Err(e) => Err((e.kind(), e.to_string())),
        });
        result
    }

    async fn reserve_and_activate(
        &self,
        ty: &ActorType,
        actor_id: &ActorId,
        req: &Activate,
        first: &mut Option<FirstRecord>,
    ) -> Result<ActorRef, ActorError> {
        let store = &self.inner.store;
        let mut orphan_cleared = false;
        loop {
            let holder = lock(&self.inner.lease).holder.clone();
            let reservation = store
                .reserve_activation(ActivationRequest {
                    actor_id: actor_id.clone(),
                    actor_type: ty.name().to_owned(),
                    owner: ActorOwner {
                        mesh: self.inner.mesh_name.clone(),
                        holder: holder.clone(),
                    },
                })
                .await?;
            let loc = match reservation {
                Reservation::Won(loc) => return self.run_factory(ty, loc, req, first.take()).await,
                Reservation::Held(loc) => loc,
            };
            let mine = loc.owner_node == *self.node_rid()
                && loc.node_generation == self.generation()
                && loc.owner_lease_generation == holder.lease_generation;
            if mine {
                // Held by this process but not live here and no local activator: an orphan of
                // a failed activation. Clear it once and reserve again.
                if let Some(r) = self.local_ref(actor_id) {
                    return existing(req.mode, r);
                }
                if orphan_cleared {
                    return Err(ActorError::NotReady {
                        actor_id: actor_id.clone(),
                    });
                }
                orphan_cleared = true;
                match store.destroy(actor_id.clone(), loc.object_generation).await {
                    Ok(()) | Err(StoreError::NotFound { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            return match (loc.state, req.mode) {
                (ActivationState::Ready, ActivateMode::GetOrCreate) => {
                    Ok(ActorRef::from_location(&loc))
                }
                (_, ActivateMode::Create) => Err(ActorError::AlreadyExists {
                    actor_id: actor_id.clone(),
                    object_generation: loc.object_generation,
                }),
                (ActivationState::Activating, ActivateMode::GetOrCreate) => {
                    // The owner runs the factory; it answers when Ready.
                    let node = loc.owner_node.clone();
                    self.activate_remote(&node, req).await
                }
            };
        }
    }

    /// The reservation winner's part of EG-14: the factory runs as the first lifecycle record
    /// on the new actor's own lane (an application turn, EG-13, EG-1.1) while this
    /// infrastructure task awaits it; then `Ready` is committed and the mailbox published. A
    /// failure before `Ready` burns the reservation (the ObjectGeneration is never reused).
    async fn run_factory(
        &self,
        ty: &ActorType,
        loc: ActorLocation,
        req: &Activate,
        first: Option<FirstRecord>,
    ) -> Result<ActorRef, ActorError> {
        let info = ActivationInfo {
            actor_id: loc.actor_id.clone(),
            object_generation: loc.object_generation,
        };
        let spot = req.spot.clone().unwrap_or_else(SpotSpec::entry);
        if ty.yields() && !spot.kind.shares_gate() {
            self.burn_reservation(&loc).await;
            return Err(ActorError::YieldNotOffered {
                actor_type: ty.name().to_owned(),
                spot: spot.name,
            });
        }
        let rt_spot = match self.join_spot(&spot) {
            Ok(s) => s,
            Err(e) => {
                self.burn_reservation(&loc).await;
                return Err(e);
            }
        };
        let ctx = ActorCtx::new(
            ActorRef::from_location(&loc),
            Arc::new(bound::NodeActorHost(Arc::downgrade(&self.inner))),
        );
        let factory: exec::Factory = {
            let ty = ty.clone();
            let init = Bytes::from(req.init.clone());
            Box::new(move || ty.instantiate(&info, init))
        };
        let spawned = exec::spawn(
            loc.actor_id.clone(),
            factory,
            ctx,
            &rt_spot,
            self.inner.exec.clone(),
        )
        .await;
        let mailbox = match spawned {
            Ok(m) => m,
            Err(failed) => {
                self.leave_spot(&spot.name);
                self.burn_reservation(&loc).await;
                return Err(match failed {
                    exec::FactoryFailed::Factory(e) => ActorError::Handler(format!("factory: {e}")),
                    exec::FactoryFailed::Lane(e) => e,
                });
            }
        };
        // Cold activation (EG-14): (1) the first record was captured before the reservation;
        // the local entry is published with a closed barrier, so a call that arrives once Ready
        // is visible waits instead of missing the incarnation.
        let expected = ActorRef::from_location(&loc);
        {
            let mut actors = lock(&self.inner.actors);
            actors.retired.remove(&loc.actor_id);
            actors.live.insert(
                loc.actor_id.clone(),
                LocalActor {
                    fence: CallFence::of_ref(&expected),
                    actor_ref: expected.clone(),
                    mailbox: mailbox.clone(),
                    spot: spot.name.clone(),
                    timers: Vec::new(),
                    held: Some(VecDeque::new()),
                    binding: BindingSlot::default(),
                },
            );
        }
        // (2) commit Ready.
        let ready = match self
            .inner
            .store
            .mark_ready(loc.actor_id.clone(), loc.fence())
            .await
        {
            Ok(r) => r,
            Err(e) => {
                self.abort_activation(&expected);
                return Err(e.into());
            }
        };
        let actor_ref = ActorRef::from_location(&ready);
        // (3) the first record goes to the head of the new lane (nothing else can enter while
        // the barrier is closed), admitted before the owner lease could have expired.
        if let Some(f) = first {
            let work = Work {
                key: DispatchKey::new(f.key),
                payload: Bytes::from(f.payload),
                reply: None,
                deadline: None,
                guard: Some(self.inner.inflight.enter()),
            };
            let admitted =
                tokio::time::timeout(self.admission_window(), mailbox.submit(work)).await;
            if !matches!(admitted, Ok(Ok(()))) {
                self.count_send_dropped();
                tracing::warn!(actor = %actor_ref, "first record not admitted before the lease deadline");
            }
        }
        // (4) open the barrier: the held records enter in arrival order, then the gate is open.
        self.open_barrier(&expected, &mailbox).await?;
        self.inner.activations_done.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(actor = %actor_ref, "actor ready");
        Ok(actor_ref)
    }

    /// The admission deadline of a first record, derived from the owner lease: renewals run
    /// every third of the TTL, so while the lease is live at least two thirds of the TTL are
    /// left on it; a first record not admitted by then is dropped (and counted).
    fn admission_window(&self) -> Duration {
        self.inner.lease_ttl * 2 / 3
    }

    /// Moves the records held during activation into the lane in arrival order, then opens the
    /// barrier. Records arriving meanwhile queue behind the held ones.
    async fn open_barrier(&self, expected: &ActorRef, mailbox: &Mailbox) -> Result<(), ActorError> {
        loop {
            let batch =
                {
                    let mut actors = lock(&self.inner.actors);
                    let Some(local) = actors.live.get_mut(expected.id()).filter(|a| {
                        a.actor_ref.object_generation() == expected.object_generation()
                    }) else {
                        // Ended during activation (destroy, lease lost, shutdown).
                        return Err(ActorError::Ended);
                    };
                    match local.held.as_mut() {
                        Some(held) if !held.is_empty() => std::mem::take(held),
                        _ => {
                            local.held = None;
                            return Ok(());
                        }
                    }
                };
            for work in batch {
                // A refused submission dropped the work, which answered its request.
                if mailbox.submit(work).await.is_err() {
                    self.count_send_dropped();
                }
            }
        }
    }

    /// Undoes a published activation that failed before Ready, unless something else (destroy,
    /// lease lost, shutdown) ended it already.
    fn abort_activation(&self, expected: &ActorRef) {
        let removed = {
            let mut actors = lock(&self.inner.actors);
            let ours = actors
                .live
                .get(expected.id())
                .is_some_and(|a| a.actor_ref.object_generation() == expected.object_generation());
            if ours {
                actors.live.remove(expected.id())
            } else {
                None
            }
        };
        if let Some(mut a) = removed {
            a.end();
            self.leave_spot(&a.spot);
        }
    }

    /// Destroys a reservation that never reached `Ready` (its ObjectGeneration is burnt).
    async fn burn_reservation(&self, loc: &ActorLocation) {
        if let Err(e) = self
            .inner
            .store
            .destroy(loc.actor_id.clone(), loc.object_generation)
            .await
        {
            tracing::debug!(actor = %loc.actor_id, error = %e, "reservation not destroyed");
        }
    }

    fn check_spot(&self, spot: &SpotSpec) -> Result<(), ActorError> {
        match lock(&self.inner.spots).get(&spot.name) {
            Some(s) if s.kind != spot.kind => Err(ActorError::Codec(format!(
                "spot {:?} is {:?}, not {:?}",
                spot.name, s.kind, spot.kind
            ))),
            _ => Ok(()),
        }
    }

    fn join_spot(&self, spot: &SpotSpec) -> Result<RtSpot, ActorError> {
        self.check_spot(spot)?;
        let mut spots = lock(&self.inner.spots);
        if !spots.contains_key(&spot.name) {
            let rt_spot = RtSpot::create(&self.inner.runtime, spot.kind)?;
            spots.insert(
                spot.name.clone(),
                SpotState {
                    kind: spot.kind,
                    spot: rt_spot,
                    members: 0,
                },
            );
        }
        let s = spots.get_mut(&spot.name).ok_or(ActorError::ShuttingDown)?;
        s.members += 1;
        Ok(s.spot.clone())
    }

    fn leave_spot(&self, name: &str) {
        let mut spots = lock(&self.inner.spots);
        if let Some(s) = spots.get_mut(name) {
            s.members = s.members.saturating_sub(1);
            if s.members == 0 && s.kind != SpotKind::Entry {
                if let Some(s) = spots.remove(name) {
                    s.spot.end();
                }
            }
        }
    }

    fn local_ref(&self, actor_id: &ActorId) -> Option<ActorRef> {
        lock(&self.inner.actors)
            .live
            .get(actor_id)
            .filter(|a| a.held.is_none())
            .map(|a| a.actor_ref.clone())
    }

    /// The Ready ref of `actor_id` from the Location Store (one lookup).
    ///
    /// # Errors
    /// `NotFound` when there is no incarnation; `Unavailable` while it is activating.
    pub async fn get(&self, actor_id: &ActorId) -> Result<ActorRef, ActorError> {
        match self.inner.store.lookup(actor_id.clone()).await? {
            Some(loc) if loc.state == ActivationState::Ready => Ok(ActorRef::from_location(&loc)),
            Some(_) => Err(ActorError::NotReady {
                actor_id: actor_id.clone(),
            }),
            None => Err(ActorError::ActorNotFound {
                actor_id: actor_id.clone(),
            }),
        }
    }

    /// Destroys the incarnation `actor` (on its owner): it ends, queued work fails with
    /// `NotFound`, and a later create gets a new ObjectGeneration (SB-4.1).
    ///
    /// # Errors
    /// `InvalidOperation` when `actor` is not the current incarnation; `Unavailable` for a
    /// stale fence or an unreachable owner.
    pub async fn destroy(&self, actor: &ActorRef) -> Result<(), ActorError> {
        self.check_accepting()?;
        if self.is_local(actor.node()) {
            return self.destroy_local(actor).await;
        }
        let payload = protocol::encode(&DestroyActor {
            actor: actor.clone(),
        })?;
        self.inner
            .mesh
            .request(
                actor.node(),
                protocol::PEER_DESTROY,
                payload,
                self.inner.request_timeout,
            )
            .await
            .map_err(|e| request_error(actor.node(), e))?;
        Ok(())
    }

    pub(crate) async fn destroy_local(&self, actor: &ActorRef) -> Result<(), ActorError> {
        {
            let actors = lock(&self.inner.actors);
            let cur = actors.live.get(actor.id()).map(|a| &a.fence);
            let retired = actors.retired.get(actor.id()).copied();
            fence::check_call(self.generation(), cur, retired, &CallFence::of_ref(actor))?;
        }
        self.inner
            .store
            .destroy(actor.id().clone(), actor.object_generation())
            .await?;
        let removed = {
            let mut actors = lock(&self.inner.actors);
            let removed = actors.live.remove(actor.id());
            actors
                .retired
                .insert(actor.id().clone(), actor.object_generation());
            removed
        };
        if let Some(mut a) = removed {
            a.end();
            self.leave_spot(&a.spot);
        }
        tracing::debug!(actor = %actor, "actor destroyed");
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Calls
    // ---------------------------------------------------------------------------------------

    /// Sends a typed request to `actor` and waits for its typed reply, at most `timeout`.
    ///
    /// # Errors
    /// See [`Node::request_raw`]; a reply that does not decode as `M::Reply` is
    /// [`ActorError::Codec`].
    pub async fn request<M: Message>(
        &self,
        actor: &ActorRef,
        msg: &M,
        timeout: Duration,
    ) -> Result<M::Reply, ActorError> {
        let payload =
            rmp_serde::to_vec_named(msg).map_err(|e| ActorError::Codec(format!("payload: {e}")))?;
        let reply = self
            .request_raw(actor, M::KEY, Bytes::from(payload), timeout)
            .await?;
        rmp_serde::from_slice(&reply).map_err(|e| ActorError::Codec(format!("reply: {e}")))
    }

    /// Sends a typed message to `actor` (no reply). Delivery to a remote owner is at most once;
    /// a handler failure is logged on the owner (EG-15).
    ///
    /// # Errors
    /// Local refusals (stale ref, full lane) and admission failures; remote refusals are only
    /// logged on the owner.
    pub async fn send<M: Message>(&self, actor: &ActorRef, msg: &M) -> Result<(), ActorError> {
        let payload =
            rmp_serde::to_vec_named(msg).map_err(|e| ActorError::Codec(format!("payload: {e}")))?;
        self.send_raw(actor, M::KEY, Bytes::from(payload)).await
    }

    /// A request with an encoded payload: local owner → straight into the actor's queue;
    /// remote owner → a 160 ActorCall on the relay connection, the reply back on the
    /// completion connection. Exactly one terminal; never resent (SB-12).
    ///
    /// # Errors
    /// `InvalidOperation` (another incarnation), `Unavailable` (stale fence, owner down, lane
    /// full), `NotFound` (destroyed, unknown key), `DeadlineExceeded`, `Internal` (the handler
    /// failed, EG-15).
    pub async fn request_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, ActorError> {
        if self.is_local(actor.node()) {
            let (tx, rx) = oneshot::channel();
            let fence = CallFence::of_ref(actor);
            // A refusal is delivered through the reply channel.
            let submit = self.submit_local(
                &fence,
                Work {
                    key,
                    payload,
                    reply: Some(ReplyTo::Local(tx)),
                    deadline: Some(Instant::now() + timeout),
                    guard: None,
                },
            );
            let waited = async move {
                let _ = submit.await;
                rx.await
            };
            return match tokio::time::timeout(timeout, waited).await {
                Ok(Ok(out)) => out,
                Ok(Err(_)) => Err(ActorError::ActorNotFound {
                    actor_id: actor.id().clone(),
                }),
                Err(_) => Err(ActorError::DeadlineExceeded),
            };
        }
        self.inner.calls_out.fetch_add(1, Ordering::Relaxed);
        let record = Record::ActorCall(actor_call(actor, key, Some(timeout)));
        let resp = self
            .inner
            .mesh
            .request_record(actor.node(), record, Some(payload), timeout)
            .await
            .map_err(|e| request_error(actor.node(), e))?;
        Ok(resp.payload.unwrap_or_default())
    }

    /// A send with an encoded payload (see [`Node::send`]).
    ///
    /// # Errors
    /// As [`Node::send`].
    pub async fn send_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), ActorError> {
        if self.is_local(actor.node()) {
            return match self
                .submit_local(
                    &CallFence::of_ref(actor),
                    Work {
                        key,
                        payload,
                        reply: None,
                        deadline: None,
                        guard: None,
                    },
                )
                .await
            {
                None => Ok(()),
                Some(e) => Err(e),
            };
        }
        self.inner.calls_out.fetch_add(1, Ordering::Relaxed);
        let record = Record::ActorCall(actor_call(actor, key, None));
        self.inner
            .mesh
            .send_record(actor.node(), record, Some(payload))
            .await
            .map_err(|e| send_error(actor.node(), e))
    }

    /// Validates `call` against the local incarnation and appends `work` to its queue,
    /// waiting while the queue is full (backpressure; work never runs inline, EG-6.3). A
    /// refusal of a request is answered through its reply (and `None` returned); the refusal
    /// of a send is returned.
    pub(crate) async fn submit_local(&self, call: &CallFence, work: Work) -> Option<ActorError> {
        self.submit_checked(call, work, None).await
    }

    /// [`Node::submit_local`] with the bound-session check of a 24 (SB-5.3): under the same
    /// lock as the fence check, the record's binding identity must be the incarnation's current
    /// binding, else it is refused and counted.
    pub(crate) async fn submit_checked(
        &self,
        call: &CallFence,
        work: Work,
        bound: Option<&BoundCheck>,
    ) -> Option<ActorError> {
        let mut work = work;
        // One lock for the fence check and the barrier decision, so a record is held only by
        // the incarnation that admitted it.
        let checked = {
            let mut guard = lock(&self.inner.actors);
            let actors = &mut *guard;
            let live = actors.live.get_mut(&call.actor_id);
            let checked = fence::check_call(
                self.generation(),
                live.as_deref().map(|a| &a.fence),
                actors.retired.get(&call.actor_id).copied(),
                call,
            );
            let bound_ok = match (&checked, live.as_deref(), bound) {
                (Ok(()), Some(a), Some(b)) => a
                    .binding
                    .check_relay(&b.node, b.lifecycle, b.generation)
                    .map_err(|r| {
                        self.inner.sessions.flow().reject(
                            crate::session::FlowRecord::Relay,
                            r,
                            &call.actor_id,
                        );
                        ActorError::StaleFence {
                            actor_id: call.actor_id.clone(),
                            fence: "binding",
                        }
                    }),
                _ => Ok(()),
            };
            let checked = checked.and(bound_ok);
            match (checked, live) {
                (Err(e), _) => Err(e),
                (Ok(()), None) => Err(ActorError::StaleFence {
                    actor_id: call.actor_id.clone(),
                    fence: "location",
                }),
                // The activation barrier is closed: wait behind the first record (EG-14 (4)).
                (Ok(()), Some(a)) => match a.held.as_mut() {
                    Some(held) if held.len() >= self.inner.held_limit => {
                        Err(ActorError::LaneFull {
                            actor_id: call.actor_id.clone(),
                        })
                    }
                    Some(held) => {
                        held.push_back(work);
                        return None;
                    }
                    None => Ok(a.mailbox.clone()),
                },
            }
        };
        match checked {
            // A failed submission dropped the work, which answered a request already.
            Ok(mailbox) => mailbox.submit(work).await.err(),
            Err(error) => match work.reply.take() {
                Some(r) => {
                    r.complete(Err(error));
                    None
                }
                None => Some(error),
            },
        }
    }

    /// Starts a timer on the owner of `actor` (this node): every `period` the actor's Spot
    /// timer appends `msg` to the actor's queue as a send (EG-7.1 timer work; a tick that finds
    /// the lane full is skipped). The timer ends with the incarnation (destroy, shutdown).
    ///
    /// # Errors
    /// `InvalidOperation` when the actor is not owned by this node or `actor` is not its current
    /// incarnation; `Unavailable` for a stale fence.
    pub fn start_timer<M: Message>(
        &self,
        actor: &ActorRef,
        period: Duration,
        msg: &M,
    ) -> Result<(), ActorError> {
        if !self.is_local(actor.node()) {
            return Err(ActorError::Codec(format!(
                "timers run on the actor's owner ({}), not on {}",
                actor.node(),
                self.node_rid()
            )));
        }
        let payload = Bytes::from(
            rmp_serde::to_vec_named(msg).map_err(|e| ActorError::Codec(format!("payload: {e}")))?,
        );
        let mut actors = lock(&self.inner.actors);
        let retired = actors.retired.get(actor.id()).copied();
        let fence = CallFence::of_ref(actor);
        fence::check_call(
            self.generation(),
            actors.live.get(actor.id()).map(|a| &a.fence),
            retired,
            &fence,
        )?;
        let Some(local) = actors.live.get_mut(actor.id()) else {
            return Err(ActorError::ActorNotFound {
                actor_id: actor.id().clone(),
            });
        };
        let spot = lock(&self.inner.spots)
            .get(&local.spot)
            .map(|s| s.spot.clone())
            .ok_or(ActorError::ShuttingDown)?;
        let mailbox = local.mailbox.clone();
        let handle = spot.start_timer(period, move || {
            let work = Work {
                key: M::KEY,
                payload: payload.clone(),
                reply: None,
                deadline: None,
                guard: None,
            };
            if let Err(e) = mailbox.tell(work) {
                tracing::debug!(error = %e, "timer tick skipped");
            }
        })?;
        local.timers.push(handle);
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Shutdown
    // ---------------------------------------------------------------------------------------

    /// Graceful shutdown (SB-10): refuse new client work and activations, wait until accepted
    /// work has its terminal or `drain` passes, release the owner lease, end every actor and
    /// close the mesh (peers get Disconnect).
    pub async fn shutdown(self, drain: Duration) {
        let inner = &self.inner;
        inner.accepting.store(false, Ordering::Release);
        inner.sessions.stop_accepting();
        tracing::info!(inflight = inner.inflight.current(), "shutdown: draining");
        if tokio::time::timeout(drain, inner.inflight.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                inflight = inner.inflight.current(),
                "shutdown: drain deadline passed"
            );
        }
        let holder = lock(&inner.lease).holder.clone();
        if let Err(e) = inner.store.release_owner(holder).await {
            tracing::warn!(error = %e, "shutdown: releasing the owner lease failed");
        }
        let mut live: Vec<LocalActor> = lock(&inner.actors).live.drain().map(|(_, a)| a).collect();
        for a in &mut live {
            a.end();
        }
        drop(live);
        for t in lock(&inner.tasks).drain(..) {
            t.abort();
        }
        lock(&inner.spots).clear();
        let report = inner.runtime.shutdown().await;
        tracing::debug!(gates = report.gates_ended, "shutdown: lane runtime stopped");
        // Wait (bounded) until every other handle is gone, then join the mesh I/O thread.
        let mut inner = self.inner;
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match Arc::try_unwrap(inner) {
                Ok(i) => {
                    i.mesh.shutdown().await;
                    break;
                }
                Err(again) => {
                    if Instant::now() >= deadline {
                        // Dropping the last handle later still closes the mesh.
                        tracing::warn!("shutdown: node handles still alive; closing without join");
                        break;
                    }
                    inner = again;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        tracing::info!("shutdown: closed");
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

    pub(crate) fn inflight(&self) -> &Arc<Inflight> {
        &self.inner.inflight
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

/// The bound-session identity a 24 presents (SB-5.3): its session owner (the authenticated
/// sender), that owner's lifecycle generation and the binding generation.
pub(crate) struct BoundCheck {
    pub node: NodeRid,
    pub lifecycle: SessionLifecycleGeneration,
    pub generation: BindingGeneration,
}

/// The local activator's claim on one actor id: answers every waiting local caller exactly once,
/// also when the activation future is dropped before it finished.
struct ActivatorSlot<'a> {
    node: &'a Node,
    actor_id: ActorId,
    done: bool,
}

impl ActivatorSlot<'_> {
    fn answer(&mut self, result: Result<ActorRef, (ErrorKind, String)>) {
        self.done = true;
        let waiters = lock(&self.node.inner.activations)
            .remove(&self.actor_id)
            .unwrap_or_default();
        for w in waiters {
            let _ = w.send(result.clone());
        }
    }

    fn finish(mut self, result: Result<ActorRef, (ErrorKind, String)>) {
        self.answer(result);
    }
}

impl Drop for ActivatorSlot<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.answer(Err((
                ErrorKind::Unavailable,
                "the activation was abandoned".to_owned(),
            )));
        }
    }
}

fn existing(mode: ActivateMode, r: ActorRef) -> Result<ActorRef, ActorError> {
    match mode {
        ActivateMode::GetOrCreate => Ok(r),
        ActivateMode::Create => Err(ActorError::AlreadyExists {
            actor_id: r.id().clone(),
            object_generation: r.object_generation(),
        }),
    }
}

pub(crate) fn actor_call(
    actor: &ActorRef,
    key: DispatchKey,
    timeout: Option<Duration>,
) -> ActorCall {
    let loc = actor.location();
    ActorCall {
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        target_node_generation: loc.node_generation,
        key,
        deadline: timeout.map(Deadline::from_remaining),
    }
}

pub(crate) fn request_error(node: &NodeRid, e: RequestError) -> ActorError {
    match e {
        RequestError::Remote { kind, detail } => ActorError::Remote { kind, detail },
        RequestError::DeadlineExceeded => ActorError::DeadlineExceeded,
        RequestError::Send(s) => send_error(node, s),
        _ => ActorError::NodeUnavailable { node: node.clone() },
    }
}

pub(crate) fn send_error(node: &NodeRid, e: SendError) -> ActorError {
    match e {
        SendError::DeadlineExceeded(_) => ActorError::DeadlineExceeded,
        SendError::TooLarge { .. } | SendError::Encode(_) => ActorError::Codec(e.to_string()),
        _ => ActorError::NodeUnavailable { node: node.clone() },
    }
}
