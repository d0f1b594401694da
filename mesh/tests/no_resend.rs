//! Submitted once: the mesh never retransmits a record (SB-8.4, SB-12, SB-14.9), asserted on
//! the real wire traffic with the tap.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{AbortAction, RouteAbort, SealIdentity, SessionRelocationRoute};
use zlink_mesh::{
    DispatchKey, LinkKind, MeshNode, Record, RequestError, SessionRid, TapDirection, WireTap,
};

// spec: SB-8.4, SB-14.9, SB-12 — a timed-out request is sent exactly once and never resent;
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
    let held = tokio::time::timeout(WAIT, rb.recv())
        .await
        .unwrap()
        .unwrap();
    let corr = held.correlation;

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
    let m = tokio::time::timeout(WAIT, rb.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.record, route);
    assert!(m.reply.is_none(), "44 has no response");

    // Give any (forbidden) retransmission ample time to show up on the wire, then count.
    tokio::time::sleep(Duration::from_millis(1000)).await;
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
    assert_eq!(requests.len(), 1, "the request went out exactly once");
    assert_eq!(
        requests[0].decoded.as_ref().unwrap().header.correlation,
        corr
    );
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
