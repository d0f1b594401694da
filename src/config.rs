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

use std::path::PathBuf;
use std::time::Duration;

use zlink_wire::ids::{DispatchKey, MeshName, NodeRid};

use crate::store::StoreError;

mod file;
mod lease;
mod registry;
mod startup;

pub use file::{
    ClientConfig, LaneLimits, MeshConfig, MeshSecretText, NodeConfig, ObjectRoles, PeerConfig,
    RelocationSettings, Timeouts,
};
pub use lease::check_lease_ttl;
pub use registry::HandlerRegistry;
pub use startup::{Startup, StartupBuilder, StoreChoice};

/// Default SessionReplacementCallbackTimeout (server setting, SB-6.4): 30,000 ms.
pub const SESSION_REPLACEMENT_CALLBACK_TIMEOUT: Duration = Duration::from_millis(30_000);
/// Default SessionRelocationSealTimeout (server setting, SB-8.3): 3,000 ms.
pub const SESSION_RELOCATION_SEAL_TIMEOUT: Duration = Duration::from_millis(3_000);
/// Default cutover timeout of a relocation's target (SB-8.9): 1,000 ms.
pub const DEFAULT_RELOCATION_CUTOVER_TIMEOUT: Duration = Duration::from_millis(1_000);
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

#[cfg(test)]
mod tests {
    use super::file::check_endpoint;
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
