//! Shared helpers for the mesh integration tests.
#![allow(dead_code)]

use std::time::Duration;

use zlink_mesh::{InboundReceiver, Liveness, MeshConfig, MeshName, MeshNode, MeshSecret, NodeRid};

mod ports;
pub mod raw;
#[allow(unused_imports)]
pub use ports::free_port;

/// Generous wait for events on a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(20);

pub const SECRET: &[u8] = b"test-mesh-secret-0123456789abcdef-32";

pub fn rid(s: &str) -> NodeRid {
    NodeRid::new(s).unwrap()
}

pub fn config(node: &str) -> MeshConfig {
    let mut c = MeshConfig::new(MeshName::new("test").unwrap(), rid(node));
    c.secret = Some(MeshSecret::new(SECRET.to_vec()).unwrap());
    // No session layer here: every client session gets its full window at once
    // (`client_admission.rs` tests the stranger bounds).
    c.client_admission = zlink_mesh::ClientAdmission::Open;
    c.liveness = Liveness {
        heartbeat_interval: Duration::from_millis(200),
        heartbeat_timeout: Duration::from_millis(2000),
        heartbeat_ttl: Duration::from_millis(2000),
        ping_interval: Duration::from_millis(200),
        peer_timeout: Duration::from_millis(4000),
        handshake_timeout: Duration::from_millis(4000),
        reconnect_interval: Duration::from_millis(50),
        reconnect_interval_max: Duration::from_millis(500),
    };
    c
}

pub fn start(node: &str) -> (MeshNode, InboundReceiver) {
    MeshNode::start(config(node)).unwrap()
}

/// Connects `a` → `b` and waits until both see each other up.
pub async fn link(a: &MeshNode, b: &MeshNode) {
    a.connect(b.address()).unwrap();
    assert!(
        a.wait_peer_up(b.node(), None, WAIT).await.is_some(),
        "{:?} sees {:?}",
        a.node(),
        b.node()
    );
    assert!(
        b.wait_peer_up(a.node(), None, WAIT).await.is_some(),
        "{:?} sees {:?}",
        b.node(),
        a.node()
    );
}

/// Waits until `f` is true, polling (only for counters that have no event).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Waits until the node tapped by `tap` has sent `n` more mesh Pings (136) than now: its
/// housekeeping ran at least `n` ping intervals (200 ms in [`config`]) further. A negative check
/// ("nothing more was sent") waits for this instead of sleeping: anything the node would still
/// transmit from a queue or a timer of that age has had as many passes to show up on the tap.
pub async fn pings_later(tap: &zlink_mesh::WireTap, n: usize) {
    sent_later(tap, 136, n).await;
}

/// Waits until the node tapped by `tap` has sent `n` more records of `command` than now (e.g.
/// Pongs, 137: one per Ping its clients send every ping interval): evidence of elapsed protocol
/// time for a negative check, instead of a sleep.
pub async fn sent_later(tap: &zlink_mesh::WireTap, command: u8, n: usize) {
    let sent = |tap: &zlink_mesh::WireTap| {
        tap.frames()
            .iter()
            .filter(|f| {
                f.direction == zlink_mesh::TapDirection::Sent && f.command() == Some(command)
            })
            .count()
    };
    let target = sent(tap) + n;
    eventually("records sent later", || sent(tap) >= target).await;
}
