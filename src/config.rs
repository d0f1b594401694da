//! Startup configuration of a node and the `EnableActorDispatch` step (SB-3).
//!
//! Two layers:
//! - [`NodeConfig`]: what an operator writes (TOML; later also environment and CLI flags in the
//!   `zlink-node` binary). [`NodeConfig::validate`] checks values that make sense on their own
//!   (endpoints, secrets, limits, store URL).
//! - [`StartupBuilder`]: the programmatic startup of a node: meshes, object roles, Location Store,
//!   [`StartupBuilder::enable_actor_dispatch`] (takes **no** `MeshName`, SB-3) and packet-key
//!   handler registration. [`StartupBuilder::build`] fails with a typed [`ConfigError`] when
//!   actor dispatch is enabled without an object role (SB-3.1) or without a Location Store
//!   (SB-3.2), or when one packet key has two handlers (SB-3.3). Several meshes are fine (SB-3.4);
//!   a node without actor dispatch (STREAM/ClientServer only) needs neither mesh, role nor store.
//!
//! Call order: `NodeConfig::from_toml_str` / `load` → `validate` → `StartupBuilder::from_config`
//! → `handler(..)`… → `build` → [`Startup`], which the node code consumes (it opens the store
//! with [`Startup::open_store`] and installs [`HandlerRegistry`]).
//!
//! Implementation rule (not in the originals, documented in `docs/STORE.md`): actor dispatch
//! also needs at least one mesh ([`ConfigError::NoMesh`]): without a MeshNode no owner can be
//! reached.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use zlink_wire::ids::{DispatchKey, MeshName, NodeRid};

use crate::store::{self, LocationStore, StoreError, StoreUrl};

/// Default SessionReplacementCallbackTimeout (server setting, SB-6.4): 30,000 ms.
pub const SESSION_REPLACEMENT_CALLBACK_TIMEOUT: Duration = Duration::from_millis(30_000);
/// Default SessionRelocationSealTimeout (server setting, SB-8.3): 3,000 ms.
pub const SESSION_RELOCATION_SEAL_TIMEOUT: Duration = Duration::from_millis(3_000);
/// Time one receive pass of a mesh I/O thread may spend running records inline (inline
/// delivery, `docs/RUNTIME.md`).
pub const INLINE_DELIVERY_BUDGET: Duration = Duration::from_millis(1);
/// Default send admission timeout (SB-6.5: wait up to the send timeout, then `DeadlineExceeded`).
pub const SEND_TIMEOUT: Duration = Duration::from_millis(5_000);
/// Default timeout of node-to-node control requests (activate, destroy) and of actor calls that
/// name none (`timeouts.request_ms`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(5_000);
/// Default heartbeat interval of mesh connections.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(1_000);
/// Default heartbeat timeout (a peer silent this long is down).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(3_000);
/// Default owner lease time-to-live in the Location Store (renewed at a third of it).
pub const OWNER_LEASE_TTL: Duration = Duration::from_millis(10_000);
/// Shortest accepted mesh secret, in bytes.
pub const MIN_MESH_SECRET_LEN: usize = zlink_mesh::MeshSecret::MIN_LEN;

/// Why a node cannot start: every startup configuration error of the spec ("configuration
/// errors at startup") and of this implementation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// SB-3.1: actor dispatch is enabled but neither Object Client nor Object Server role is.
    #[error(
        "actor dispatch is enabled but no object role (object_client / object_server) is configured"
    )]
    NoObjectRole,
    /// SB-3.2: actor dispatch is enabled but no Location Store is configured.
    #[error("actor dispatch is enabled but no Location Store is configured")]
    NoLocationStore,
    /// SB-3.3: two handlers are registered for one packet key.
    #[error("packet key {key} has {count} handlers registered; exactly one is allowed")]
    DuplicateHandler {
        /// The packet key.
        key: DispatchKey,
        /// How many handlers were registered for it.
        count: usize,
    },
    /// A session packet handler is registered for a key the framework reserves (0, or
    /// `session::RESERVED_KEYS_START` and above: the client operations and node control).
    #[error("packet key {key} is reserved for the framework (application keys are 1..0xFFFF0000)")]
    ReservedPacketKey {
        /// The packet key.
        key: DispatchKey,
    },
    /// Actor dispatch is enabled but the node belongs to no mesh (no owner could be reached).
    #[error("actor dispatch is enabled but no mesh is configured")]
    NoMesh,
    /// The same mesh is configured twice.
    #[error("mesh {mesh} is configured twice")]
    DuplicateMesh {
        /// The repeated mesh.
        mesh: MeshName,
    },
    /// A mesh lists the same peer twice, or the node itself as a peer.
    #[error("mesh {mesh}: peer {peer} is listed twice or is this node")]
    InvalidPeer {
        /// The mesh.
        mesh: MeshName,
        /// The peer.
        peer: NodeRid,
    },
    /// An endpoint is not `tcp://HOST:PORT` (PORT may be `*`), `ipc://PATH` or `inproc://NAME`.
    #[error("{field}: endpoint {endpoint:?} is invalid: {reason}")]
    InvalidEndpoint {
        /// Where the endpoint was configured.
        field: String,
        /// The endpoint.
        endpoint: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Meshes are configured but neither a mesh secret nor explicit insecure dev mode.
    #[error("a mesh secret is required (or set insecure_dev_mode = true for local development)")]
    MissingMeshSecret,
    /// Both a mesh secret and insecure dev mode are configured.
    #[error("mesh_secret and insecure_dev_mode exclude each other")]
    ConflictingSecurity,
    /// The mesh secret is shorter than [`MIN_MESH_SECRET_LEN`].
    #[error("the mesh secret has {len} bytes; at least {MIN_MESH_SECRET_LEN} are required")]
    MeshSecretTooShort {
        /// Its length.
        len: usize,
    },
    /// The store URL is malformed or names a backend this build does not provide (`rediss://`:
    /// Redis over TLS is not built in).
    #[error("location store: {0}")]
    Store(#[source] StoreError),
    /// The owner lease TTL leaves a renewal less time than the store may make a write wait
    /// (SB-5.11): a renewal sent on time could answer after the local lease deadline, so the
    /// node would stop serving while its store is merely busy.
    #[error(
        "timeouts.owner_lease_ttl_ms = {} ms is too short for this store: a renewal sent every \
         third of the TTL must answer before the local lease deadline (TTL minus a tenth), which \
         leaves it {} ms, but a renewal may wait up to {} ms in the store (its lease busy timeout); \
         use a TTL of at least {} ms",
        ttl.as_millis(),
        slack.as_millis(),
        write_wait.as_millis(),
        minimum.as_millis()
    )]
    LeaseTtlTooShort {
        /// The configured TTL.
        ttl: Duration,
        /// What the TTL leaves a renewal ([`crate::store::renewal_slack`]).
        slack: Duration,
        /// The longest a store write may wait.
        write_wait: Duration,
        /// The shortest TTL this store accepts.
        minimum: Duration,
    },
    /// A numeric setting is out of range.
    #[error("{field}: {reason}")]
    InvalidValue {
        /// The setting.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// The TOML text does not parse or does not match the schema.
    #[error("configuration does not parse")]
    Parse(#[source] toml::de::Error),
    /// The configuration file cannot be read.
    #[error("cannot read configuration file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

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
    /// SessionRelocationSealTimeout (default 3,000 ms). Reaches `NodeOptions` and the
    /// coordinator's timings (`NodeOptions::relocation_config`); the node does not run
    /// relocations yet, so today it has no effect on a running node.
    #[serde(rename = "session_relocation_seal_ms", deserialize_with = "millis")]
    pub session_relocation_seal: Duration,
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
            session_relocation_seal: SESSION_RELOCATION_SEAL_TIMEOUT,
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
/// session_relocation_seal_ms = 3000     # the relocation seal (SB-8); no relocation runs yet
/// send_ms = 5000
/// request_ms = 5000
/// heartbeat_interval_ms = 1000
/// heartbeat_timeout_ms = 3000
/// owner_lease_ttl_ms = 10000
/// inline_delivery_budget_ms = 1         # 0: records never run on the mesh I/O thread
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
            (
                "timeouts.session_relocation_seal_ms",
                t.session_relocation_seal,
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
        Ok(())
    }
}

fn check_endpoint(field: &str, endpoint: &str) -> Result<(), ConfigError> {
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

/// Where the Location Store comes from.
#[derive(Clone)]
pub enum StoreChoice {
    /// Opened from a URL at startup ([`Startup::open_store`]).
    Url(StoreUrl),
    /// Provided by the embedding program (tests: a [`crate::store::CountingStore`]).
    Provided(Arc<dyn LocationStore>),
}

impl fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::Url(url) => write!(f, "Url({url})"),
            StoreChoice::Provided(store) => write!(f, "Provided({store:?})"),
        }
    }
}

/// Handlers by packet key: at most one per [`DispatchKey`] (SB-3.3). `H` is whatever the node
/// code dispatches to (a boxed typed handler); the registry only guards uniqueness.
#[derive(Debug)]
pub struct HandlerRegistry<H> {
    handlers: BTreeMap<DispatchKey, H>,
}

impl<H> Default for HandlerRegistry<H> {
    fn default() -> Self {
        Self {
            handlers: BTreeMap::new(),
        }
    }
}

impl<H> HandlerRegistry<H> {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` for `key`.
    ///
    /// # Errors
    /// [`ConfigError::DuplicateHandler`] when `key` already has a handler (the registry is
    /// unchanged).
    pub fn register(&mut self, key: DispatchKey, handler: H) -> Result<(), ConfigError> {
        match self.handlers.entry(key) {
            Entry::Occupied(_) => Err(ConfigError::DuplicateHandler { key, count: 2 }),
            Entry::Vacant(slot) => {
                slot.insert(handler);
                Ok(())
            }
        }
    }

    /// The handler of `key`.
    #[must_use]
    pub fn get(&self, key: DispatchKey) -> Option<&H> {
        self.handlers.get(&key)
    }

    /// Number of registered keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// `true` when nothing is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// Registered keys, ascending.
    pub fn keys(&self) -> impl Iterator<Item = DispatchKey> + '_ {
        self.handlers.keys().copied()
    }

    /// Key and handler pairs, ascending by key.
    pub fn iter(&self) -> impl Iterator<Item = (DispatchKey, &H)> + '_ {
        self.handlers.iter().map(|(k, h)| (*k, h))
    }
}

impl<H> IntoIterator for HandlerRegistry<H> {
    type Item = (DispatchKey, H);
    type IntoIter = std::collections::btree_map::IntoIter<DispatchKey, H>;

    fn into_iter(self) -> Self::IntoIter {
        self.handlers.into_iter()
    }
}

/// Programmatic node startup, ending in [`StartupBuilder::build`] (SB-3).
///
/// Registration never fails on the spot: a duplicate packet key is remembered and reported by
/// `validate`/`build`, so startup fails as a whole with a configuration error (SB-3.3).
#[derive(Debug)]
pub struct StartupBuilder<H> {
    node: NodeRid,
    meshes: Vec<MeshName>,
    roles: ObjectRoles,
    store: Option<StoreChoice>,
    actor_dispatch: bool,
    handlers: Vec<(DispatchKey, H)>,
}

impl<H> StartupBuilder<H> {
    /// A node with nothing configured.
    #[must_use]
    pub fn new(node: NodeRid) -> Self {
        Self {
            node,
            meshes: Vec::new(),
            roles: ObjectRoles::default(),
            store: None,
            actor_dispatch: false,
            handlers: Vec::new(),
        }
    }

    /// Node, meshes, roles, store URL and the actor-dispatch switch of `config`.
    #[must_use]
    pub fn from_config(config: &NodeConfig) -> Self {
        let mut b = Self::new(config.node.clone());
        b.meshes = config.meshes.iter().map(|m| m.name.clone()).collect();
        b.roles = config.roles;
        b.store = config.store.clone().map(StoreChoice::Url);
        b.actor_dispatch = config.actor_dispatch;
        b
    }

    /// Adds a mesh (several are fine, SB-3.4).
    #[must_use]
    pub fn mesh(mut self, mesh: MeshName) -> Self {
        self.meshes.push(mesh);
        self
    }

    /// Enables the Object Client role.
    #[must_use]
    pub fn object_client(mut self) -> Self {
        self.roles.object_client = true;
        self
    }

    /// Enables the Object Server role.
    #[must_use]
    pub fn object_server(mut self) -> Self {
        self.roles.object_server = true;
        self
    }

    /// Uses the Location Store at `url`.
    #[must_use]
    pub fn location_store_url(mut self, url: StoreUrl) -> Self {
        self.store = Some(StoreChoice::Url(url));
        self
    }

    /// Uses an already opened Location Store.
    #[must_use]
    pub fn location_store(mut self, store: Arc<dyn LocationStore>) -> Self {
        self.store = Some(StoreChoice::Provided(store));
        self
    }

    /// `EnableActorDispatch()`: enables global object dispatch. Takes no `MeshName` (SB-3): the
    /// global ActorId authority (the Location Store) finds each actor's mesh and owner.
    #[must_use]
    pub fn enable_actor_dispatch(mut self) -> Self {
        self.actor_dispatch = true;
        self
    }

    /// Registers `handler` for packet `key`; a second handler for the same key fails `build`
    /// (SB-3.3).
    #[must_use]
    pub fn handler(mut self, key: DispatchKey, handler: H) -> Self {
        self.handlers.push((key, handler));
        self
    }

    /// Checks the SB-3 startup rules without consuming the builder.
    ///
    /// Order: duplicate packet key (SB-3.3), then — only with actor dispatch — object role
    /// (SB-3.1), Location Store (SB-3.2), mesh; then duplicate meshes and store URL support.
    ///
    /// # Errors
    /// The first [`ConfigError`] in that order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut counts: BTreeMap<DispatchKey, usize> = BTreeMap::new();
        for (key, _) in &self.handlers {
            *counts.entry(*key).or_default() += 1;
        }
        if let Some((&key, &count)) = counts.iter().find(|(_, c)| **c > 1) {
            return Err(ConfigError::DuplicateHandler { key, count });
        }
        if self.actor_dispatch {
            if !self.roles.any() {
                return Err(ConfigError::NoObjectRole);
            }
            if self.store.is_none() {
                return Err(ConfigError::NoLocationStore);
            }
            if self.meshes.is_empty() {
                return Err(ConfigError::NoMesh);
            }
        }
        for (i, mesh) in self.meshes.iter().enumerate() {
            if self.meshes[..i].contains(mesh) {
                return Err(ConfigError::DuplicateMesh { mesh: mesh.clone() });
            }
        }
        if let Some(StoreChoice::Url(StoreUrl::Redis(url))) = &self.store {
            if url.starts_with("rediss:") {
                return Err(ConfigError::Store(StoreError::UnsupportedBackend {
                    scheme: "rediss".to_owned(),
                }));
            }
        }
        Ok(())
    }

    /// Validates and produces the startup plan.
    ///
    /// # Errors
    /// As [`StartupBuilder::validate`].
    pub fn build(self) -> Result<Startup<H>, ConfigError> {
        self.validate()?;
        let mut handlers = HandlerRegistry::new();
        for (key, handler) in self.handlers {
            handlers.register(key, handler)?;
        }
        Ok(Startup {
            node: self.node,
            meshes: self.meshes,
            roles: self.roles,
            store: self.store,
            actor_dispatch: self.actor_dispatch,
            handlers,
        })
    }
}

/// A validated startup plan: what the node code starts.
#[derive(Debug)]
#[non_exhaustive]
pub struct Startup<H> {
    /// The node's routing id.
    pub node: NodeRid,
    /// Meshes to join (distinct).
    pub meshes: Vec<MeshName>,
    /// Object roles.
    pub roles: ObjectRoles,
    /// The Location Store (always `Some` when actor dispatch is enabled).
    pub store: Option<StoreChoice>,
    /// Whether global actor dispatch is enabled.
    pub actor_dispatch: bool,
    /// Handlers by packet key, each key once.
    pub handlers: HandlerRegistry<H>,
}

/// Refuses an owner lease TTL whose renewal slack is not longer than `write_wait`, the longest
/// the store may make a write wait ([`LocationStore::write_wait_limit`]).
///
/// # Errors
/// [`ConfigError::LeaseTtlTooShort`].
pub fn check_lease_ttl(ttl: Duration, write_wait: Duration) -> Result<(), ConfigError> {
    let slack = crate::store::renewal_slack(ttl);
    if slack > write_wait {
        return Ok(());
    }
    // slack = TTL − TTL/10 − TTL/3 = TTL · 17/30: the smallest TTL with slack > write_wait.
    let ms = u64::try_from(write_wait.as_millis()).unwrap_or(u64::MAX);
    let minimum = Duration::from_millis(ms.saturating_mul(30) / 17 + 2);
    Err(ConfigError::LeaseTtlTooShort {
        ttl,
        slack,
        write_wait,
        minimum,
    })
}

impl<H> Startup<H> {
    /// Opens (or hands out) the configured Location Store; `None` when none is configured.
    ///
    /// # Errors
    /// [`ConfigError::Store`] when the backend cannot be opened.
    pub fn open_store(&self) -> Result<Option<Arc<dyn LocationStore>>, ConfigError> {
        match &self.store {
            None => Ok(None),
            Some(StoreChoice::Provided(store)) => Ok(Some(Arc::clone(store))),
            Some(StoreChoice::Url(url)) => store::open(url).map(Some).map_err(ConfigError::Store),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rid(s: &str) -> NodeRid {
        NodeRid::new(s).unwrap()
    }

    #[test]
    fn endpoints_are_checked() {
        for ok in [
            "tcp://127.0.0.1:5555",
            "tcp://*:*",
            "tcp://[::1]:80",
            "ipc:///tmp/x",
            "inproc://a",
        ] {
            check_endpoint("f", ok).unwrap();
        }
        for bad in [
            "",
            "127.0.0.1:5",
            "tcp://",
            "tcp://:5",
            "tcp://h:99999",
            "udp://h:1",
            "ipc://",
        ] {
            assert!(check_endpoint("f", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn registry_refuses_a_second_handler_and_keeps_the_first() {
        let mut r = HandlerRegistry::new();
        r.register(DispatchKey::new(1), "first").unwrap();
        let err = r.register(DispatchKey::new(1), "second").unwrap_err();
        assert!(matches!(
            err,
            ConfigError::DuplicateHandler { count: 2, .. }
        ));
        assert_eq!(r.get(DispatchKey::new(1)), Some(&"first"));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_stream_only_node_needs_nothing() {
        // spec: SB-3.4 — a node without actor dispatch needs no MeshNode, role or store.
        let plan = StartupBuilder::<()>::new(rid("stream-only"))
            .build()
            .unwrap();
        assert!(!plan.actor_dispatch);
        assert!(plan.open_store().unwrap().is_none());
    }
}
