//! Flow control: per-peer outbound budgets above libzmq's HWM, PAUSED, send admission with
//! the send timeout, and infrastructure progress while the application queue is PAUSED.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::{DispatchKey, MeshNode, OutboundBudget, PeerEvent, SendError, TransportEvent};

const PAYLOAD: usize = 64 * 1024;
/// Wide enough that a loaded machine descheduling an I/O thread does not end a peer lifecycle.
const PEER_TIMEOUT: Duration = Duration::from_millis(3000);

fn small(node: &str) -> zlink_mesh::MeshConfig {
    let mut c = config(node);
    c.transport.send_hwm = 4;
    c.transport.recv_hwm = 4;
    c.inbound_capacity = 4;
    c.peer_budget = OutboundBudget {
        messages: 8,
        bytes: 8 * PAYLOAD as u64 + 4096,
    };
    c.send_timeout = Duration::from_millis(200);
    c
}

// spec: SB-6.5 (admission waits at most the send timeout, then DeadlineExceeded; no retry),
// EG-1.2 (outbound admission budget distinct from libzmq HWM and the inbound queue),
// SB-5.4 (pings keep flowing on the completion connection while relay data is PAUSED),
// EG-16.25 (a started request completes via the completion connection while the
// application queue is PAUSED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_peer_admission_times_out_and_failed_send_is_never_delivered() {
    let tap = zlink_mesh::WireTap::new(10_000);
    let mut ca = small("fa");
    ca.liveness.peer_timeout = PEER_TIMEOUT;
    ca.tap = Some(tap.clone());
    let mut cb = small("fb");
    cb.liveness.peer_timeout = PEER_TIMEOUT;
    let (a, mut ra) = MeshNode::start(ca).unwrap();
    let (b, mut rb) = MeshNode::start(cb).unwrap();
    link(&a, &b).await;
    let mut events = a.subscribe();

    // b's application does not read: a's sends fill b's inbound channel, libzmq's HWMs, the
    // TCP buffers and finally a's budget.
    let mut sent = Vec::new();
    let mut failed = None;
    for i in 0u32..100_000 {
        let mut p = vec![0u8; PAYLOAD];
        p[..4].copy_from_slice(&i.to_be_bytes());
        match a.send(b.node(), DispatchKey::new(1), Bytes::from(p)).await {
            Ok(()) => sent.push(i),
            Err(e) => {
                assert_eq!(e, SendError::DeadlineExceeded(Duration::from_millis(200)));
                failed = Some(i);
                break;
            }
        }
    }
    let failed = failed.expect("admission must fail once the budget is exhausted");
    assert!(a.counters().events(TransportEvent::Paused) >= 1);

    // EG-16.25: b's application queue is PAUSED, yet b's request to a completes through the
    // completion connection.
    let responder = tokio::spawn(async move {
        let m = ra.recv().await.unwrap();
        m.reply.unwrap().reply(Bytes::from_static(b"done"));
        ra
    });
    let r = b
        .request(
            a.node(),
            DispatchKey::new(2),
            Bytes::from_static(b"q"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"done"[..]));
    let _ra = responder.await.unwrap();

    // SB-5.4: while relay data stays PAUSED for longer than the peer timeout, the peer stays
    // up (Ping/Pong on the completion connection are not queued behind the data).
    // Observed, not slept: a's housekeeping runs past a whole peer timeout (its pings, one per
    // ping interval, on the tap) with the peer still up.
    let ping = config("x").liveness.ping_interval;
    let intervals = (PEER_TIMEOUT.as_millis() / ping.as_millis()) as usize + 2;
    pings_later(&tap, intervals).await;
    assert!(a.peer_generation(b.node()).is_some());
    while let Ok(ev) = events.try_recv() {
        assert!(!matches!(ev, PeerEvent::Down { .. }), "unexpected {ev:?}");
    }

    // Drain b: everything admitted arrives, in order; the failed send never does.
    let mut got = Vec::new();
    while got.len() < sent.len() {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .unwrap()
            .unwrap();
        let p = m.payload.unwrap();
        got.push(u32::from_be_bytes(p[..4].try_into().unwrap()));
    }
    assert_eq!(got, sent);
    // A marker after the drain proves the channel is empty of the failed send.
    a.send(b.node(), DispatchKey::new(3), Bytes::from_static(b"end"))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, rb.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        m.payload.as_deref(),
        Some(&b"end"[..]),
        "send {failed} must never be delivered"
    );
    a.shutdown().await;
    b.shutdown().await;
}
