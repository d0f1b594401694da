//! A client session is a stranger to the transport until the node's connected/authenticate
//! callback accepts it: until then its receive window is the strangers' small one
//! (`zlink_mesh::Strangers`), and once the callback returns `Ok` the node calls
//! `MeshNode::accept_client`, which grants the full client window.

mod node_common;

use std::sync::Arc;

use bytes::Bytes;
use node_common::*;
use tokio::sync::Notify;
use zlink::session::SessionHandlers;
use zlink_mesh::zlink_wire::{self, CorrelationId, OneWay, Ping};
use zlink_mesh::{DispatchKey, DropReason, Record, Strangers};

const KEY: DispatchKey = DispatchKey::new(4242);

fn encode(record: &Record, payload: Option<Bytes>) -> Vec<Bytes> {
    let f = zlink_wire::encode(record, CorrelationId::NONE, payload).unwrap();
    let mut parts = vec![f.envelope().clone()];
    parts.extend(f.payload().cloned());
    parts
}

fn send(s: &zmq::Socket, parts: &[Bytes]) {
    let last = parts.len() - 1;
    for (i, p) in parts.iter().enumerate() {
        s.send(&p[..], if i == last { 0 } else { zmq::SNDMORE })
            .unwrap();
    }
}

fn recv(s: &zmq::Socket) -> Record {
    let parts: Vec<Bytes> = s
        .recv_multipart(0)
        .expect("a record from the node within TIMEOUT")
        .into_iter()
        .map(Bytes::from)
        .collect();
    zlink_wire::decode(&parts, &zlink_wire::Limits::default())
        .unwrap()
        .record
}

/// The next FlowCredit from the node (Pongs skipped): (messages, bytes).
fn next_grant(s: &zmq::Socket) -> (u32, u64) {
    loop {
        if let Record::FlowCredit(f) = recv(s) {
            return (f.messages, f.bytes);
        }
    }
}

// spec: SB-1 (step 1: the session callback authenticates), EG-1.2
// A client's first record opens its session with the strangers' window; once the connected
// callback returns Ok the node accepts the session and grants it the rest of the full client
// window (a FlowCredit of the difference).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connected_callback_accepting_a_session_grants_the_full_window() {
    let release = Arc::new(Notify::new());
    let gate = release.clone();
    let sessions = SessionHandlers::new()
        .on_connected(move |_s| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                Ok(())
            }
        })
        .packet_raw(KEY, |_s, _payload| Box::pin(async { Ok(Bytes::new()) }));
    let node = start_session_node(SessionNodeSpec::new("a", sessions), memory_store()).await;
    let endpoint = node.endpoints().client.clone().unwrap();
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.set_rcvtimeo(TIMEOUT.as_millis() as i32).unwrap();
    raw.connect(&endpoint).unwrap();
    let (raw, first) = tokio::task::spawn_blocking(move || {
        send(&raw, &encode(&Record::Ping(Ping { seq: 1 }), None));
        let first = next_grant(&raw);
        (raw, first)
    })
    .await
    .unwrap();
    let small = Strangers::default().window;
    assert_eq!(first, (small.messages, small.bytes), "a stranger's window");
    release.notify_one();
    let (raw, rest) = tokio::task::spawn_blocking(move || {
        let rest = next_grant(&raw);
        (raw, rest)
    })
    .await
    .unwrap();
    let full = mesh_config("x").client_window;
    assert_eq!(
        rest,
        (full.messages - small.messages, full.bytes - small.bytes),
        "accepted: the rest of the full window"
    );
    // Within the full window nothing is dropped.
    let one_way = encode(
        &Record::OneWay(OneWay { key: KEY }),
        Some(Bytes::from_static(b"x")),
    );
    let raw = tokio::task::spawn_blocking(move || {
        for _ in 0..1_000 {
            send(&raw, &one_way);
        }
        send(&raw, &encode(&Record::Ping(Ping { seq: 2 }), None));
        while !matches!(recv(&raw), Record::Pong(p) if p.seq == 2) {}
        raw
    })
    .await
    .unwrap();
    assert_eq!(
        node.mesh().counters().dropped(DropReason::CreditExceeded),
        0
    );
    drop(raw);
    node.shutdown(TIMEOUT).await;
}

// spec: SB-1 (step 1: the session callback authenticates)
// A connected/authenticate callback that returns Err refuses the session: the node closes it
// with `DisconnectReason::Refused` (the client sees the reason), counts it
// (`FlowRecord::Connected` / `FlowReject::Refused`) and frees the session (its entry, its
// lane). Without the close the session stayed a stranger, open and holding its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_connected_callback_refuses_is_closed_and_freed() {
    let sessions = SessionHandlers::new()
        .on_connected(|_s| async { Err(zlink::actor::HandlerError::new("bad credentials")) })
        .packet_raw(KEY, |_s, _payload| Box::pin(async { Ok(Bytes::new()) }));
    let node = start_session_node(SessionNodeSpec::new("a", sessions), memory_store()).await;
    for n in 1..=2u64 {
        let c = client_of(&node);
        // Any first record opens the session (its answer may or may not arrive first).
        let _ = c.info().await;
        let reason = tokio::time::timeout(TIMEOUT, c.closed())
            .await
            .expect("the node closes a refused session");
        assert_eq!(reason, zlink_wire::DisconnectReason::Refused);
        assert_eq!(
            c.close_reason(),
            Some(zlink_wire::DisconnectReason::Refused)
        );
        wait_until("the refused session left its owner", || {
            node.session_count() == 0
        })
        .await;
        assert_eq!(
            node.session_flow().get(
                zlink::session::FlowRecord::Connected,
                zlink::session::FlowReject::Refused
            ),
            n
        );
    }
    node.shutdown(TIMEOUT).await;
}
