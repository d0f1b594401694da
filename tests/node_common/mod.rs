//! Helpers shared by the node and actor integration tests: in-process nodes on loopback with a
//! shared Location Store, waiting on conditions (never sleeping for correctness).

#![allow(dead_code)]

pub mod hooks;

use std::sync::Arc;
use std::time::Duration;

use zlink::actor::ActorRegistry;
use zlink::node::{Node, NodeOptions};
use zlink::store::{LocationStore, MemoryStore};
use zlink_apps::demo;
use zlink_mesh::{MeshConfig, MeshName, MeshSecret, NodeRid, PeerAddress, WireTap};

pub const TIMEOUT: Duration = Duration::from_secs(20);

pub fn rid(s: &str) -> NodeRid {
    NodeRid::new(s).unwrap()
}

pub fn memory_store() -> Arc<dyn LocationStore> {
    Arc::new(MemoryStore::new())
}

pub fn mesh_config(name: &str) -> MeshConfig {
    let mut c = MeshConfig::new(MeshName::new("test").unwrap(), rid(name));
    c.secret = Some(MeshSecret::new(b"zlink-test-secret-0123456789abcdef".to_vec()).unwrap());
    c
}

/// Starts a node hosting the demo types (plus `extra`'s types when given).
pub async fn start_node(
    name: &str,
    store: Arc<dyn LocationStore>,
    peers: Vec<PeerAddress>,
    tap: Option<WireTap>,
    registry: Option<ActorRegistry>,
) -> Node {
    let mut mc = mesh_config(name);
    mc.tap = tap;
    let registry = registry.unwrap_or_else(|| demo::registry().unwrap());
    // The tests' clients use every framework operation: a trusted network.
    let mut options = NodeOptions::new(mc, store, registry)
        .with_client_access(zlink::node::access::ClientAccess::open());
    options.peers = peers;
    Node::start(options).await.unwrap()
}

/// Waits until `a` (which dials `b`) sees `b` up and `b` sees `a` up.
pub async fn wait_pair_up(a: &Node, b: &Node) {
    assert!(a.wait_peers(TIMEOUT).await.is_empty(), "b did not come up");
    assert!(
        b.mesh()
            .wait_peer_up(&rid("a"), None, TIMEOUT)
            .await
            .is_some(),
        "a did not come up at b"
    );
}

/// Two connected nodes `a` (dials) and `b`, sharing `store`, with wire taps.
pub async fn pair(store: Arc<dyn LocationStore>) -> (Node, Node, WireTap, WireTap) {
    let tap_b = WireTap::new(10_000);
    let b = start_node("b", store.clone(), vec![], Some(tap_b.clone()), None).await;
    let tap_a = WireTap::new(10_000);
    let a = start_node("a", store, vec![b.address()], Some(tap_a.clone()), None).await;
    wait_pair_up(&a, &b).await;
    (a, b, tap_a, tap_b)
}

/// Waits (bounded) until `cond` holds, re-checking every millisecond.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Options of a node for the session tests: demo types, the given session application, a
/// client endpoint on loopback, an optional tap and clock.
pub struct SessionNodeSpec {
    pub name: &'static str,
    pub peers: Vec<PeerAddress>,
    pub tap: Option<WireTap>,
    pub registry: Option<ActorRegistry>,
    pub sessions: zlink::session::SessionHandlers,
    pub clock: Option<Arc<dyn zlink::session::Clock>>,
    pub lease_ttl: Option<Duration>,
    pub max_bindings: Option<usize>,
    pub seal_timeout: Option<Duration>,
}

impl SessionNodeSpec {
    pub fn new(name: &'static str, sessions: zlink::session::SessionHandlers) -> Self {
        Self {
            name,
            peers: Vec::new(),
            tap: None,
            registry: None,
            sessions,
            clock: None,
            lease_ttl: None,
            max_bindings: None,
            seal_timeout: None,
        }
    }
}

/// Starts a node that serves ClientServer sessions.
pub async fn start_session_node(spec: SessionNodeSpec, store: Arc<dyn LocationStore>) -> Node {
    let mut mc = mesh_config(spec.name);
    mc.tap = spec.tap;
    mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
    let registry = spec.registry.unwrap_or_else(|| demo::registry().unwrap());
    let mut options = NodeOptions::new(mc, store, registry)
        .with_sessions(spec.sessions)
        .unwrap()
        .with_client_access(zlink::node::access::ClientAccess::open());
    options.peers = spec.peers;
    if let Some(c) = spec.clock {
        options.clock = c;
    }
    if let Some(t) = spec.lease_ttl {
        options.lease_ttl = t;
    }
    if let Some(m) = spec.max_bindings {
        options.max_bindings_per_session = m;
    }
    if let Some(t) = spec.seal_timeout {
        options.relocation.seal_timeout = t;
    }
    Node::start(options).await.unwrap()
}

/// Two connected session nodes: `a` (dials `b`), both with the demo session application unless
/// `sessions` gives another, with wire taps.
pub async fn session_pair(
    store: Arc<dyn LocationStore>,
    sessions: zlink::session::SessionHandlers,
    registry: Option<ActorRegistry>,
) -> (Node, Node, WireTap, WireTap) {
    let tap_b = WireTap::new(20_000);
    let mut sb = SessionNodeSpec::new("b", sessions.clone());
    sb.tap = Some(tap_b.clone());
    sb.registry = registry.clone();
    let b = start_session_node(sb, store.clone()).await;
    let tap_a = WireTap::new(20_000);
    let mut sa = SessionNodeSpec::new("a", sessions);
    sa.tap = Some(tap_a.clone());
    sa.registry = registry;
    sa.peers = vec![b.address()];
    let a = start_session_node(sa, store).await;
    wait_pair_up(&a, &b).await;
    (a, b, tap_a, tap_b)
}

/// A client of `node`'s ClientServer endpoint.
pub fn client_of(node: &Node) -> zlink::node::client::NodeClient {
    let endpoint = node.endpoints().client.clone().expect("client endpoint");
    zlink::node::client::NodeClient::connect(&endpoint, TIMEOUT).unwrap()
}

/// Records of `command` the tap saw in `direction`.
pub fn tapped(
    tap: &WireTap,
    direction: zlink_mesh::TapDirection,
    command: u8,
) -> Vec<zlink_mesh::TapFrame> {
    tap.frames()
        .into_iter()
        .filter(|f| f.direction == direction && f.command() == Some(command))
        .collect()
}

/// Binds `client`'s session to `actor` through the demo session app's `Bind` packet.
pub async fn bind(
    client: &zlink::node::client::NodeClient,
    actor: &zlink::actor::ActorRef,
) -> zlink::actor::ActorRef {
    client
        .packet(&demo::session::Bind {
            actor: actor.clone(),
        })
        .await
        .unwrap()
}

/// The demo session app's `RelayRequest` packet carrying `msg` for the bound `actor`.
pub fn relay_packet<M: zlink::actor::Message>(
    actor: &zlink::actor::ActorRef,
    msg: &M,
) -> demo::session::RelayRequest {
    demo::session::RelayRequest {
        actor_id: actor.id().to_string(),
        key: M::KEY.get(),
        payload: rmp_serde::to_vec_named(msg).unwrap(),
        timeout_ms: 10_000,
    }
}

/// Relays `msg` to the bound `actor` as a request through the demo session app; the actor's
/// typed reply.
pub async fn relay_req<M: zlink::actor::Message>(
    c: &zlink::node::client::NodeClient,
    actor: &zlink::actor::ActorRef,
    msg: &M,
) -> Result<M::Reply, zlink::node::client::ClientError> {
    let bytes = c.packet(&relay_packet(actor, msg)).await?;
    Ok(rmp_serde::from_slice(&bytes).unwrap())
}

/// A TCP proxy in front of `target` whose target → dialler direction passes bytes only while
/// `open` is `true` (the test's way to delay one mesh link: the completion connection).
pub async fn gated_proxy(target: &str, open: tokio::sync::watch::Receiver<bool>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let target = target.trim_start_matches("tcp://").to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((inbound, _)) = listener.accept().await else {
                return;
            };
            let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let (mut in_r, mut in_w) = inbound.into_split();
            let (mut out_r, mut out_w) = outbound.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut in_r, &mut out_w).await;
            });
            let mut open = open.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match out_r.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if open.wait_for(|o| *o).await.is_err() {
                        return;
                    }
                    if in_w.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("tcp://{addr}")
}
