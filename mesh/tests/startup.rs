//! Startup configuration errors.

mod common;

use common::*;
use zlink_mesh::{ConfigError, MeshNode, MeshSecret};

// Refuse a mesh without a secret unless insecure dev mode is explicit (issue 3; the spec's
// "configuration errors at startup").
#[test]
fn missing_secret_is_a_startup_error_unless_insecure_dev_mode() {
    let mut c = config("s");
    c.secret = None;
    assert!(matches!(
        MeshNode::start(c.clone()),
        Err(ConfigError::MissingSecret)
    ));
    c.insecure_dev_mode = true;
    let (n, _rx) = MeshNode::start(c).unwrap();
    drop(n);
    assert!(matches!(
        MeshSecret::new(b"short".to_vec()),
        Err(ConfigError::SecretTooShort)
    ));
    let mut bad = config("s2");
    bad.inbound_capacity = 0;
    assert!(matches!(
        MeshNode::start(bad),
        Err(ConfigError::InvalidLimit(_))
    ));
    let mut bind = config("s3");
    bind.relay_endpoint = "tcp://256.0.0.1:1".into();
    assert!(matches!(
        MeshNode::start(bind),
        Err(ConfigError::Transport { .. })
    ));
}

// spec: SB-2.1 (peers authenticated at the transport boundary even in dev mode)
// Insecure dev mode still runs the handshake (fixed public key): two dev nodes connect, a
// dev node and a node with a real secret do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_dev_nodes_connect_only_to_each_other() {
    let dev = |n: &str| {
        let mut c = config(n);
        c.secret = None;
        c.insecure_dev_mode = true;
        MeshNode::start(c).unwrap()
    };
    let (d1, _r1) = dev("d1");
    let (d2, _r2) = dev("d2");
    link(&d1, &d2).await;
    let (s, _rs) = start("secure");
    s.connect(d1.address()).unwrap();
    eventually("handshake refused", || {
        d1.counters()
            .dropped(zlink_mesh::DropReason::HandshakeFailed)
            >= 1
    })
    .await;
    assert!(d1.peer_generation(s.node()).is_none());
    for n in [d1, d2, s] {
        n.shutdown().await;
    }
}
