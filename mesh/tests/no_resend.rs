//! Submitted once: the mesh never retransmits a record (SB-8.4, SB-12, SB-14.9), asserted on
//! the real wire traffic with the tap.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{AbortAction, RouteAbort, SealIdentity, SessionRelocationRoute};
use zlink_mesh::{
    DispatchKey, DropReason, InboundWindow, LinkKind, MeshNode, Record, RequestError, SessionRid,
    TapDirection, WireTap,
};

// spec: SB-8.4, SB-14.9, SB-12 — a timed-out request is sent at most once and never resent;
// a 44 is one-way, sent once, and gets no response on the wire (SB-14.26).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_request_and_route_44_are_sent_exactly_once() {
    let tap = WireTap::new(10_000);
    let mut ca = config("na");
    ca.tap = Some(tap.clone());
    let (a, _ra) = MeshNode::start(ca).unwrap();
    let (b, mut rb) = start("nb");
    link(&a, &b).await;

    let e = a
        .request(
            b.node(),
            DispatchKey::new(1),
            Bytes::from_static(b"q"),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert_eq!(e, RequestError::DeadlineExceeded);

    let route = Record::SessionRelocationRoute(SessionRelocationRoute::Abort(RouteAbort {
        seal: SealIdentity {
            relocation: 7.into(),
            session_lifecycle: 1.into(),
            session: SessionRid::new(3),
            binding_generation: 2.into(),
        },
        action: AbortAction::ResubmitToSource,
    }));
    a.send_record(b.node(), route.clone(), None).await.unwrap();
    // b holds the timed-out request, which came first on the same relay connection (unless a's
    // I/O thread was stalled past its deadline: then it never left, which is no resend either).
    let mut held = Vec::new();
    let m = loop {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .unwrap()
            .unwrap();
        match m.record {
            Record::Request(_) => held.push(m),
            _ => break m,
        }
    };
    assert_eq!(m.record, route);
    assert!(m.reply.is_none(), "44 has no response");
    assert!(
        held.len() <= 1,
        "the request reached b {} times",
        held.len()
    );

    // Any (forbidden) retransmission shows up on the wire within a's next passes: wait for
    // three ping intervals of a's housekeeping (observed on the tap), then count.
    pings_later(&tap, 3).await;
    let frames = tap.frames();
    let sent = |cmd: u8| {
        frames
            .iter()
            .filter(|f| {
                f.direction == TapDirection::Sent
                    && f.link == LinkKind::Relay
                    && f.command() == Some(cmd)
            })
            .collect::<Vec<_>>()
    };
    let requests = sent(144);
    assert_eq!(
        requests.len(),
        held.len(),
        "the request went out at most once"
    );
    for (f, h) in requests.iter().zip(&held) {
        assert_eq!(
            f.decoded.as_ref().unwrap().header.correlation,
            h.correlation
        );
    }
    assert_eq!(sent(44).len(), 1, "44 went out exactly once");
    assert!(
        !frames
            .iter()
            .any(|f| f.direction == TapDirection::Received && f.command() == Some(44)),
        "nothing answers a 44"
    );
    assert!(rb.try_recv().is_none());
    drop(held);
    a.shutdown().await;
    b.shutdown().await;
}

// spec: SB-12, EG-16.26 — a request whose terminal (deadline passed, or cancelled) came while
// it was still queued behind PAUSED relay data is never sent afterwards, not even once when
// the queue drains; the discard is counted (`DropReason::RequestEnded`). A live request
// queued the same way is still sent and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ended_while_queued_is_never_sent_when_the_queue_drains() {
    let tap = WireTap::new(10_000);
    let mut ca = config("qa");
    ca.tap = Some(tap.clone());
    let (a, _ra) = MeshNode::start(ca).unwrap();
    let mut cb = config("qb");
    cb.inbound_capacity = 4;
    cb.peer_window = InboundWindow {
        messages: 4,
        bytes: 1 << 20,
    };
    let (b, mut rb) = MeshNode::start(cb).unwrap();
    link(&a, &b).await;

    // b's application does not read: after its window + inbound capacity, a's relay queue
    // towards b is PAUSED (no credit); everything below waits in that queue, in order.
    const ONE_WAY: u32 = 24;
    for i in 0..ONE_WAY {
        a.send(
            b.node(),
            DispatchKey::new(1),
            Bytes::from(i.to_be_bytes().to_vec()),
        )
        .await
        .unwrap();
    }
    // Terminal 1: the deadline passes while queued.
    let e = a
        .request(
            b.node(),
            DispatchKey::new(2),
            Bytes::from_static(b"expired"),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
    assert_eq!(e, RequestError::DeadlineExceeded);
    // Terminal 2: the caller cancels (drops the request future) while it is queued.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        a.request(
            b.node(),
            DispatchKey::new(3),
            Bytes::from_static(b"cancelled"),
            WAIT,
        ),
    )
    .await;
    assert!(cancelled.is_err(), "still queued: no terminal yet");
    // A live request queued behind the same data.
    let a = std::sync::Arc::new(a);
    let a2 = a.clone();
    let b_node = b.node().clone();
    let live = tokio::spawn(async move {
        a2.request(
            &b_node,
            DispatchKey::new(4),
            Bytes::from_static(b"live"),
            WAIT,
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Now b's application drains everything.
    let mut one_way = 0;
    let mut requests = Vec::new();
    while one_way < ONE_WAY || !requests.iter().any(|(k, _)| *k == DispatchKey::new(4)) {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .expect("queued records arrive")
            .unwrap();
        match &m.record {
            Record::OneWay(_) => one_way += 1,
            Record::Request(r) => {
                requests.push((r.key, m.payload.clone()));
                m.reply.unwrap().reply(Bytes::from_static(b"ok"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let r = live.await.unwrap().unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"ok"[..]));
    // Any (forbidden) late transmission would show up within a's next passes.
    pings_later(&tap, 3).await;
    assert!(rb.try_recv().is_none());
    assert_eq!(
        requests,
        vec![(DispatchKey::new(4), Some(Bytes::from_static(b"live")))],
        "only the live request reached b"
    );
    let sent_requests: Vec<_> = tap
        .frames()
        .into_iter()
        .filter(|f| f.direction == TapDirection::Sent && f.command() == Some(144))
        .collect();
    assert_eq!(sent_requests.len(), 1, "ended requests never hit the wire");
    assert_eq!(a.counters().dropped(DropReason::RequestEnded), 2);
    assert_eq!(a.counters().dropped(DropReason::PeerLost), 0);
    b.shutdown().await;
}
