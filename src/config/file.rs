//! The operator's configuration file: [`NodeConfig`] (TOML) and its parts, each value checked
//! on its own ([`NodeConfig::validate`]).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use zlink_wire::ids::{MeshName, NodeRid};

use super::*;
use crate::store::StoreUrl;

/// Object roles of a node (SB-3.1): at least one is needed for actor dispatch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectRoles {
    /// Object Client: this node addresses actors (calls, binds).
    #[serde(default)]
    pub object_client: bool,
    /// Object Server: this node hosts actors (runs factories and handlers).
    #[serde(default)]
    pub object_server: bool,
}

impl ObjectRoles {
    /// Whether any object role is configured.
    #[must_use]
    pub fn any(self) -> bool {
        self.object_client || self.object_server
    }
}

/// A peer node of a mesh.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The peer's routing id (proved in the handshake).
    pub node: NodeRid,
    /// The peer's relay endpoint.
    pub relay: String,
    /// The peer's completion endpoint.
    pub completion: String,
}

/// One mesh this node belongs to (a node may belong to several, SB-3.4).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeshConfig {
    /// Mesh name.
    pub name: MeshName,
    /// Endpoint the relay ROUTER binds (RouteMesh).
    pub relay: String,
    /// Endpoint the completion ROUTER binds (replies, EG-4).
    pub completion: String,
    /// Peers to connect to.
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
}

/// ClientServer endpoint (DEALER-ROUTER) and the bounds of its sessions (`[client]`). Every
/// bound is optional; unset, the mesh's default holds (docs/MESH.md, "Bounds at a glance").
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Endpoint the client ROUTER binds.
    #[serde(default)]
    pub endpoint: String,
    /// Most client sessions at once (default 10,000).
    #[serde(default)]
    pub max_clients: Option<usize>,
    /// Most client sessions from one source address at once (default 1,000).
    #[serde(default)]
    pub max_clients_per_source: Option<usize>,
    /// Receive window of an accepted session, records (default 4,096).
    #[serde(default)]
    pub window_records: Option<u32>,
    /// Receive window of an accepted session, bytes (default 1 MiB).
    #[serde(default)]
    pub window_bytes: Option<u64>,
    /// Outbound budget of a session, messages: replies and pushes queued for it (default
    /// 4,096).
    #[serde(default)]
    pub outbound_messages: Option<u64>,
    /// Outbound budget of a session, bytes (default 1 MiB): over it past the grace, or
    /// getting a reply while over twice it, the session is closed `SlowConsumer`.
    #[serde(default)]
    pub outbound_bytes: Option<u64>,
    /// How long a session may stay over its outbound budget, ms (default 5,000).
    #[serde(default, rename = "slow_consumer_grace_ms")]
    pub slow_consumer_grace_ms: Option<u64>,
    /// Messages libzmq holds per client connection once they left the session's queue
    /// (`ZMQ_SNDHWM`, default 16).
    #[serde(default)]
    pub send_hwm: Option<i32>,
    /// Most records in one batch frame to a client (default 256, at most 1,024).
    #[serde(default)]
    pub batch_records: Option<usize>,
    /// Most sessions not yet accepted at once (default 1,024).
    #[serde(default)]
    pub max_strangers: Option<usize>,
    /// Most sessions not yet accepted from one source address (default 64).
    #[serde(default)]
    pub max_strangers_per_source: Option<usize>,
    /// Receive window of a session not yet accepted, records (default 16).
    #[serde(default)]
    pub stranger_window_records: Option<u32>,
    /// Receive window of a session not yet accepted, bytes (default 16 KiB).
    #[serde(default)]
    pub stranger_window_bytes: Option<u64>,
    /// Framework operations that wait (store, peer) one session may have in flight (default
    /// 64; one more is refused `busy`).
    #[serde(default)]
    pub max_operations_per_session: Option<usize>,
    /// Actors one session may be bound to (default 1,024).
    #[serde(default)]
    pub max_bindings_per_session: Option<usize>,
}

impl ClientConfig {
    /// `endpoint` with every bound at its default.
    #[must_use]
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            ..Self::default()
        }
    }

    /// Checks each bound that is set (each must be at least 1).
    fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            ("client.max_clients", self.max_clients.map(|v| v as u64)),
            (
                "client.max_clients_per_source",
                self.max_clients_per_source.map(|v| v as u64),
            ),
            ("client.window_records", self.window_records.map(u64::from)),
            ("client.window_bytes", self.window_bytes),
            ("client.outbound_messages", self.outbound_messages),
            ("client.outbound_bytes", self.outbound_bytes),
            ("client.slow_consumer_grace_ms", self.slow_consumer_grace_ms),
            (
                "client.send_hwm",
                self.send_hwm.map(|v| u64::try_from(v).unwrap_or(0)),
            ),
            ("client.batch_records", self.batch_records.map(|v| v as u64)),
            ("client.max_strangers", self.max_strangers.map(|v| v as u64)),
            (
                "client.max_strangers_per_source",
                self.max_strangers_per_source.map(|v| v as u64),
            ),
            (
                "client.stranger_window_records",
                self.stranger_window_records.map(u64::from),
            ),
            ("client.stranger_window_bytes", self.stranger_window_bytes),
            (
                "client.max_operations_per_session",
                self.max_operations_per_session.map(|v| v as u64),
            ),
            (
                "client.max_bindings_per_session",
                self.max_bindings_per_session.map(|v| v as u64),
            ),
        ];
        for (field, value) in counts {
            if value == Some(0) {
                return Err(ConfigError::InvalidValue {
                    field,
                    reason: "must be at least 1",
                });
            }
        }
        Ok(())
    }

    /// Applies the bounds that are set to `mc` (the mesh's ClientServer settings).
    pub fn apply(&self, mc: &mut zlink_mesh::MeshConfig) {
        mc.client_endpoint = Some(self.endpoint.clone());
        if let Some(v) = self.max_clients {
            mc.max_clients = v;
        }
        if let Some(v) = self.max_clients_per_source {
            mc.max_clients_per_source = v;
        }
        if let Some(v) = self.window_records {
            mc.client_window.messages = v;
        }
        if let Some(v) = self.window_bytes {
            mc.client_window.bytes = v;
        }
        if let Some(v) = self.outbound_messages {
            mc.client_budget.messages = v;
        }
        if let Some(v) = self.outbound_bytes {
            mc.client_budget.bytes = v;
        }
        if let Some(v) = self.slow_consumer_grace_ms {
            mc.client_outbound.grace = Duration::from_millis(v);
        }
        if let Some(v) = self.send_hwm {
            mc.client_outbound.send_hwm = v;
        }
        if let Some(v) = self.batch_records {
            mc.client_outbound.batch_records = v;
        }
        if let zlink_mesh::ClientAdmission::OnAccept(s) = &mut mc.client_admission {
            if let Some(v) = self.max_strangers {
                s.max = v;
            }
            if let Some(v) = self.max_strangers_per_source {
                s.max_per_source = v;
            }
            if let Some(v) = self.stranger_window_records {
                s.window.messages = v;
            }
            if let Some(v) = self.stranger_window_bytes {
                s.window.bytes = v;
            }
        }
    }
}

/// The mesh secret (HMAC key of the handshake). Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct MeshSecretText(String);

impl MeshSecretText {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The key bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for MeshSecretText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MeshSecretText(..)")
    }
}

/// Default admission limits of the two lanes (EG-7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LaneLimits {
    /// Application lane item limit (default 1,024).
    pub application_items: u32,
    /// Application lane byte limit (default 64 MiB; each work reserves payload + 256 B).
    pub application_bytes: u64,
    /// Lifecycle lane item limit (default 128).
    pub lifecycle_items: u32,
    /// Lifecycle lane byte limit (default 4 MiB).
    pub lifecycle_bytes: u64,
}

impl Default for LaneLimits {
    fn default() -> Self {
        Self {
            application_items: 1_024,
            application_bytes: 64 * 1024 * 1024,
            lifecycle_items: 128,
            lifecycle_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Time settings. In TOML each is an integer number of milliseconds (`*_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// SessionReplacementCallbackTimeout (default 30,000 ms).
    #[serde(
        rename = "session_replacement_callback_ms",
        deserialize_with = "millis"
    )]
    pub session_replacement_callback: Duration,
    /// SessionRelocationSealTimeout, the same setting as [`RelocationSettings::seal_ms`]
    /// (`[relocation] seal_ms`; setting both is a configuration error). Unset, 3,000 ms.
    #[serde(rename = "session_relocation_seal_ms", deserialize_with = "opt_millis")]
    pub session_relocation_seal: Option<Duration>,
    /// Send admission timeout (default 5,000 ms).
    #[serde(rename = "send_ms", deserialize_with = "millis")]
    pub send: Duration,
    /// Timeout of node-to-node control requests (activate, destroy) and of actor calls that name
    /// none (default 5,000 ms).
    #[serde(rename = "request_ms", deserialize_with = "millis")]
    pub request: Duration,
    /// Heartbeat interval (default 1,000 ms).
    #[serde(rename = "heartbeat_interval_ms", deserialize_with = "millis")]
    pub heartbeat_interval: Duration,
    /// Heartbeat timeout (default 3,000 ms).
    #[serde(rename = "heartbeat_timeout_ms", deserialize_with = "millis")]
    pub heartbeat_timeout: Duration,
    /// Owner lease TTL in the Location Store (default 10,000 ms).
    #[serde(rename = "owner_lease_ttl_ms", deserialize_with = "millis")]
    pub owner_lease_ttl: Duration,
    /// Inline delivery: time one receive pass of the mesh I/O thread may spend running the
    /// turns of records whose lane is idle on that thread (default 1 ms; 0: never inline).
    #[serde(rename = "inline_delivery_budget_ms", deserialize_with = "millis")]
    pub inline_delivery_budget: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            session_replacement_callback: SESSION_REPLACEMENT_CALLBACK_TIMEOUT,
            session_relocation_seal: None,
            send: SEND_TIMEOUT,
            request: REQUEST_TIMEOUT,
            heartbeat_interval: HEARTBEAT_INTERVAL,
            heartbeat_timeout: HEARTBEAT_TIMEOUT,
            owner_lease_ttl: OWNER_LEASE_TTL,
            inline_delivery_budget: INLINE_DELIVERY_BUDGET,
        }
    }
}

fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

fn opt_millis<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    millis(d).map(Some)
}

/// Live relocation's timings and bounds (`[relocation]`, SB-8). Every key is optional; unset,
/// the default holds. Times are integer milliseconds (`*_ms`). The node reads them into
/// `NodeOptions::relocation`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelocationSettings {
    /// SessionRelocationSealTimeout (SB-8.3, default 3,000 ms): how long a session owner holds
    /// a binding's relocation seal without its 44 before it closes the session, and how long
    /// the coordinator waits for the 43s. Also accepted as `timeouts.session_relocation_seal_ms`
    /// (one of the two).
    #[serde(default, deserialize_with = "opt_millis")]
    pub seal_ms: Option<Duration>,
    /// The target's cutover timeout after its relay-ready reply (SB-8.9, default 1,000 ms):
    /// without the source's cutover by then, a `cutover_timeout` Warning and the fallback.
    /// Shorter than the seal timeout.
    #[serde(default, deserialize_with = "opt_millis")]
    pub cutover_timeout_ms: Option<Duration>,
    /// The source's wait for the target's relay-ready (default 3,000 ms): a target silent that
    /// long has failed (SB-8.5: durable abort, the source keeps the actor).
    #[serde(default, deserialize_with = "opt_millis")]
    pub restore_timeout_ms: Option<Duration>,
    /// After the cutover, how long the source waits for the target's result before the store's
    /// records decide (default 11,000 ms).
    #[serde(default, deserialize_with = "opt_millis")]
    pub result_timeout_ms: Option<Duration>,
    /// After the cutover timeout's fallback, how long the target keeps the source's relay
    /// stream ahead of regular ingress while the source neither sends its cutover nor is seen
    /// gone (default 3,000 ms).
    #[serde(default, deserialize_with = "opt_millis")]
    pub source_wait_ms: Option<Duration>,
    /// The most timers the target starts for one moving actor (default 1,024): a Restore
    /// naming more is refused before relay-ready (`too_many_timers`).
    #[serde(default)]
    pub max_restore_timers: Option<usize>,
    /// Records one relocation's temporary queues on the target hold at most before dispatch
    /// opens (default 65,536); beyond, a relayed request is answered `LaneFull`.
    #[serde(default)]
    pub target_queue_records: Option<usize>,
    /// Payload bytes of those queues at most (default 268,435,456 = 256 MiB).
    #[serde(default)]
    pub target_queue_bytes: Option<usize>,
}

impl RelocationSettings {
    /// Checks each value that is set against the others and `timeouts` (the seal's other key).
    fn validate(&self, timeouts: &Timeouts) -> Result<(), ConfigError> {
        let invalid = |field, reason| Err(ConfigError::InvalidValue { field, reason });
        if self.seal_ms.is_some() && timeouts.session_relocation_seal.is_some() {
            return invalid(
                "relocation.seal_ms",
                "also set as timeouts.session_relocation_seal_ms: set one of the two",
            );
        }
        for (field, value) in [
            ("relocation.seal_ms", self.seal_ms),
            (
                "timeouts.session_relocation_seal_ms",
                timeouts.session_relocation_seal,
            ),
            ("relocation.cutover_timeout_ms", self.cutover_timeout_ms),
            ("relocation.restore_timeout_ms", self.restore_timeout_ms),
            ("relocation.result_timeout_ms", self.result_timeout_ms),
            ("relocation.source_wait_ms", self.source_wait_ms),
        ] {
            if value.is_some_and(|v| v.is_zero()) {
                return invalid(field, "must be at least 1 ms");
            }
        }
        for (field, value) in [
            ("relocation.max_restore_timers", self.max_restore_timers),
            ("relocation.target_queue_records", self.target_queue_records),
            ("relocation.target_queue_bytes", self.target_queue_bytes),
        ] {
            if value == Some(0) {
                return invalid(field, "must be at least 1");
            }
        }
        let seal = self.seal(timeouts);
        let cutover = self
            .cutover_timeout_ms
            .unwrap_or(DEFAULT_RELOCATION_CUTOVER_TIMEOUT);
        if cutover >= seal {
            return invalid(
                "relocation.cutover_timeout_ms",
                "must be shorter than the seal timeout (relocation.seal_ms): a fallback after \
                 it would find every sealed session closed",
            );
        }
        Ok(())
    }

    /// The SessionRelocationSealTimeout these settings and `timeouts` name (default 3,000 ms).
    #[must_use]
    pub fn seal(&self, timeouts: &Timeouts) -> Duration {
        self.seal_ms
            .or(timeouts.session_relocation_seal)
            .unwrap_or(SESSION_RELOCATION_SEAL_TIMEOUT)
    }
}

/// The configuration of one node process, as written in TOML:
///
/// ```toml
/// node = "node-a"
/// store = "sqlite:///var/lib/zlink/store.db"
/// actor_dispatch = true
/// mesh_secret = "at-least-16-bytes-of-secret"   # or: insecure_dev_mode = true
/// metrics = "127.0.0.1:9464"   # optional: Prometheus text format on http://ADDR/metrics
///
/// [roles]
/// object_client = true
/// object_server = true
///
/// [[mesh]]
/// name = "main"
/// relay = "tcp://127.0.0.1:5551"
/// completion = "tcp://127.0.0.1:5552"
/// peers = [{ node = "node-b", relay = "tcp://127.0.0.1:5561", completion = "tcp://127.0.0.1:5562" }]
///
/// [client]
/// endpoint = "tcp://127.0.0.1:6001"
/// # bounds of the client port, defaults shown (docs/MESH.md, "Bounds at a glance")
/// max_clients = 10000
/// max_clients_per_source = 1000
/// window_records = 4096                 # a session's receive window
/// window_bytes = 1048576
/// outbound_messages = 4096              # a session's outbound budget (replies, pushes)
/// outbound_bytes = 1048576
/// slow_consumer_grace_ms = 5000         # over the budget this long: closed SlowConsumer
/// send_hwm = 16                         # messages libzmq holds per connection
/// batch_records = 256                   # records per batch frame to a client
/// max_strangers = 1024                  # sessions not yet accepted
/// max_strangers_per_source = 64
/// stranger_window_records = 16
/// stranger_window_bytes = 16384
/// max_operations_per_session = 64       # framework operations in flight (then `busy`)
/// max_bindings_per_session = 1024
///
/// [lanes]            # defaults shown
/// application_items = 1024
/// application_bytes = 67108864
/// lifecycle_items = 128
/// lifecycle_bytes = 4194304
///
/// [timeouts]         # defaults shown, milliseconds
/// session_replacement_callback_ms = 30000
/// send_ms = 5000
/// request_ms = 5000
/// heartbeat_interval_ms = 1000
/// heartbeat_timeout_ms = 3000
/// owner_lease_ttl_ms = 10000
/// inline_delivery_budget_ms = 1         # 0: records never run on the mesh I/O thread
///
/// [relocation]       # defaults shown (SB-8)
/// seal_ms = 3000                 # a session's relocation seal without its 44 (SB-8.3); also
///                                # accepted as timeouts.session_relocation_seal_ms
/// cutover_timeout_ms = 1000      # target: no cutover this long after relay-ready → fallback
/// restore_timeout_ms = 3000      # source: no relay-ready this long → the target failed
/// result_timeout_ms = 11000      # source: no result this long after the cutover → the store decides
/// source_wait_ms = 3000          # target, after a fallback: the source's relay stream first
/// max_restore_timers = 1024      # timers one moving actor may bring
/// target_queue_records = 65536   # target: one relocation's temporary queues, records
/// target_queue_bytes = 268435456 # ... and payload bytes
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Node name: the node's routing id.
    pub node: NodeRid,
    /// Location Store URL (`sqlite:///path`, `memory:`, `redis://HOST[:PORT][/DB][?prefix=NAME]`).
    #[serde(default)]
    pub store: Option<StoreUrl>,
    /// Whether global actor dispatch is enabled (`EnableActorDispatch`, SB-3).
    #[serde(default)]
    pub actor_dispatch: bool,
    /// Object roles.
    #[serde(default)]
    pub roles: ObjectRoles,
    /// Mesh secret (required when any mesh is configured, unless insecure dev mode).
    #[serde(default)]
    pub mesh_secret: Option<MeshSecretText>,
    /// Explicit insecure development mode: meshes run without a secret (proves nothing).
    #[serde(default)]
    pub insecure_dev_mode: bool,
    /// Meshes (`[[mesh]]` tables).
    #[serde(default, rename = "mesh")]
    pub meshes: Vec<MeshConfig>,
    /// ClientServer endpoint, if this node serves clients.
    #[serde(default)]
    pub client: Option<ClientConfig>,
    /// Address of the node's Prometheus endpoint (`GET /metrics`, text format); `None` (the
    /// default) serves none. Port 0 picks a free port.
    #[serde(default)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Lane admission limits.
    #[serde(default)]
    pub lanes: LaneLimits,
    /// Time settings.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Live relocation's timings and bounds (`[relocation]`).
    #[serde(default)]
    pub relocation: RelocationSettings,
}

impl NodeConfig {
    /// A configuration with defaults: no mesh, no store, no roles, actor dispatch off.
    #[must_use]
    pub fn new(node: NodeRid) -> Self {
        Self {
            node,
            store: None,
            actor_dispatch: false,
            roles: ObjectRoles::default(),
            mesh_secret: None,
            insecure_dev_mode: false,
            meshes: Vec::new(),
            client: None,
            metrics: None,
            lanes: LaneLimits::default(),
            timeouts: Timeouts::default(),
            relocation: RelocationSettings::default(),
        }
    }

    /// Parses TOML text (schema only; call [`NodeConfig::validate`] next).
    ///
    /// # Errors
    /// [`ConfigError::Parse`] (unknown keys are errors, as are invalid ids and store URLs).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(ConfigError::Parse)
    }

    /// Reads and parses a TOML file.
    ///
    /// # Errors
    /// [`ConfigError::Read`], [`ConfigError::Parse`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// Checks every value on its own and the SB-3 startup rules (via [`StartupBuilder`]).
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_values()?;
        StartupBuilder::<()>::from_config(self).validate()
    }

    fn validate_values(&self) -> Result<(), ConfigError> {
        let mut seen = Vec::new();
        for mesh in &self.meshes {
            if seen.contains(&&mesh.name) {
                return Err(ConfigError::DuplicateMesh {
                    mesh: mesh.name.clone(),
                });
            }
            seen.push(&mesh.name);
            check_endpoint(&format!("mesh {} relay", mesh.name), &mesh.relay)?;
            check_endpoint(&format!("mesh {} completion", mesh.name), &mesh.completion)?;
            let mut peers = vec![&self.node];
            for peer in &mesh.peers {
                if peers.contains(&&peer.node) {
                    return Err(ConfigError::InvalidPeer {
                        mesh: mesh.name.clone(),
                        peer: peer.node.clone(),
                    });
                }
                peers.push(&peer.node);
                check_endpoint(
                    &format!("mesh {} peer {} relay", mesh.name, peer.node),
                    &peer.relay,
                )?;
                check_endpoint(
                    &format!("mesh {} peer {} completion", mesh.name, peer.node),
                    &peer.completion,
                )?;
            }
        }
        if let Some(client) = &self.client {
            check_endpoint("client endpoint", &client.endpoint)?;
            client.validate()?;
        }
        match (&self.mesh_secret, self.insecure_dev_mode) {
            (Some(_), true) => return Err(ConfigError::ConflictingSecurity),
            (None, false) if !self.meshes.is_empty() => return Err(ConfigError::MissingMeshSecret),
            (Some(secret), false) if secret.as_bytes().len() < MIN_MESH_SECRET_LEN => {
                return Err(ConfigError::MeshSecretTooShort {
                    len: secret.as_bytes().len(),
                });
            }
            _ => {}
        }
        let l = &self.lanes;
        if l.application_items == 0 || l.lifecycle_items == 0 {
            return Err(ConfigError::InvalidValue {
                field: "lanes",
                reason: "item limits must be at least 1",
            });
        }
        if l.application_bytes == 0 || l.lifecycle_bytes == 0 {
            return Err(ConfigError::InvalidValue {
                field: "lanes",
                reason: "byte limits must be at least 1",
            });
        }
        let t = &self.timeouts;
        for (field, value) in [
            (
                "timeouts.session_replacement_callback_ms",
                t.session_replacement_callback,
            ),
            ("timeouts.send_ms", t.send),
            ("timeouts.request_ms", t.request),
            ("timeouts.heartbeat_interval_ms", t.heartbeat_interval),
            ("timeouts.heartbeat_timeout_ms", t.heartbeat_timeout),
            ("timeouts.owner_lease_ttl_ms", t.owner_lease_ttl),
        ] {
            if value.is_zero() {
                return Err(ConfigError::InvalidValue {
                    field,
                    reason: "must be at least 1 ms",
                });
            }
        }
        if let Some(StoreUrl::Sqlite(_, options)) = &self.store {
            check_lease_ttl(t.owner_lease_ttl, options.lease_busy_timeout)?;
        }
        if t.heartbeat_timeout <= t.heartbeat_interval {
            return Err(ConfigError::InvalidValue {
                field: "timeouts.heartbeat_timeout_ms",
                reason: "must be longer than the heartbeat interval",
            });
        }
        self.relocation.validate(t)
    }
}

pub(super) fn check_endpoint(field: &str, endpoint: &str) -> Result<(), ConfigError> {
    let invalid = |reason| ConfigError::InvalidEndpoint {
        field: field.to_owned(),
        endpoint: endpoint.to_owned(),
        reason,
    };
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        return Err(invalid(
            "expected tcp://HOST:PORT, ipc://PATH or inproc://NAME",
        ));
    };
    match scheme {
        "tcp" => {
            let Some((host, port)) = rest.rsplit_once(':') else {
                return Err(invalid("tcp endpoint needs HOST:PORT"));
            };
            if host.is_empty() {
                return Err(invalid("empty host"));
            }
            if port != "*" && port.parse::<u16>().is_err() {
                return Err(invalid("port must be 0..=65535 or *"));
            }
            Ok(())
        }
        "ipc" | "inproc" if !rest.is_empty() => Ok(()),
        "ipc" | "inproc" => Err(invalid("empty path")),
        _ => Err(invalid("unsupported transport (tcp, ipc, inproc)")),
    }
}
