//! Helpers shared by the node and actor integration tests: in-process nodes on loopback with a
//! shared Location Store, waiting on conditions (never sleeping for correctness).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use zlink::actor::ActorRegistry;
use zlink::node::{Node, NodeOptions, demo};
use zlink::store::{LocationStore, MemoryStore};
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
    c.secret = Some(MeshSecret::new(b"zlink-test-secret-0123456789".to_vec()).unwrap());
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
    let mut options = NodeOptions::new(mc, store, registry);
    options.peers = peers;
    Node::start(options).await.unwrap()
}

/// Two connected nodes `a` (dials) and `b`, sharing `store`, with wire taps.
pub async fn pair(store: Arc<dyn LocationStore>) -> (Node, Node, WireTap, WireTap) {
    let tap_b = WireTap::new(10_000);
    let b = start_node("b", store.clone(), vec![], Some(tap_b.clone()), None).await;
    let tap_a = WireTap::new(10_000);
    let a = start_node("a", store, vec![b.address()], Some(tap_a.clone()), None).await;
    assert!(a.wait_peers(TIMEOUT).await.is_empty(), "b did not come up");
    assert!(
        b.mesh()
            .wait_peer_up(&rid("a"), None, TIMEOUT)
            .await
            .is_some(),
        "a did not come up at b"
    );
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
