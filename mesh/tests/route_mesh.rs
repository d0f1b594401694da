//! RouteMesh: handshake, relay, completion-path replies between 3 nodes in one process.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{OneWay, Request};
use zlink_mesh::{
    DispatchKey, ErrorKind, LinkKind, Origin, Record, RequestError, TapDirection, WireTap,
};

// spec: SB-2.1, SB-14.7 — three nodes authenticate pairwise; one-way and requests relay over
// ROUTER-ROUTER; replies come back on the completion connection (EG-4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_relay_and_completion_replies() {
    trace();
    let tap = WireTap::new(10_000);
    let mut ca = config("a");
    ca.tap = Some(tap.clone());
    let (a, _ra) = zlink_mesh::MeshNode::start(ca).unwrap();
    let (b, mut rb) = start("b");
    let (c, mut rc) = start("c");
    link(&a, &b).await;
    link(&a, &c).await;
    link(&b, &c).await;

    // one-way a -> b
    a.send(b.node(), DispatchKey::new(7), Bytes::from_static(b"hello"))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, rb.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        m.record,
        Record::OneWay(OneWay {
            key: DispatchKey::new(7)
        })
    );
    assert_eq!(m.payload.as_deref(), Some(&b"hello"[..]));
    assert_eq!(
        m.origin,
        Origin::Peer {
            node: a.node().clone(),
            generation: a.generation()
        }
    );
    assert!(m.reply.is_none());

    // request a -> c, answered by c
    let server = tokio::spawn(async move {
        let m = rc.recv().await.unwrap();
        assert!(
            matches!(m.record, Record::Request(Request { key, .. }) if key == DispatchKey::new(9))
        );
        let p = m.payload.clone().unwrap();
        m.reply
            .unwrap()
            .reply(Bytes::from([&b"re:"[..], &p[..]].concat()));
        let m = rc.recv().await.unwrap();
        m.reply.unwrap().error(ErrorKind::NotFound, "no such thing");
        rc
    });
    let r = a
        .request(
            c.node(),
            DispatchKey::new(9),
            Bytes::from_static(b"q"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"re:q"[..]));
    let e = a
        .request(
            c.node(),
            DispatchKey::new(9),
            Bytes::from_static(b"q2"),
            WAIT,
        )
        .await
        .unwrap_err();
    assert_eq!(
        e,
        RequestError::Remote {
            kind: ErrorKind::NotFound,
            detail: "no such thing".into()
        }
    );
    let _rc = server.await.unwrap();

    // The tap saw the request on the relay connection and the reply on the completion one.
    let frames = tap.frames();
    assert!(frames.iter().any(|f| f.direction == TapDirection::Sent
        && f.link == LinkKind::Relay
        && f.command() == Some(144)));
    assert!(frames.iter().any(|f| f.direction == TapDirection::Received
        && f.link == LinkKind::Completion
        && f.command() == Some(145)));
    assert!(
        !frames
            .iter()
            .any(|f| f.link == LinkKind::Relay && f.command() == Some(145)),
        "replies never on relay"
    );
    // handshake records on both links
    for link in [LinkKind::Relay, LinkKind::Completion] {
        assert!(frames.iter().any(|f| f.link == link
            && f.direction == TapDirection::Sent
            && f.command() == Some(128)));
    }
    // spec: SB-14.26 — command 45 never appears on the wire
    assert!(!frames.iter().any(|f| f.command() == Some(45)));
    for n in [a, b, c] {
        assert_eq!(n.counters().dropped_total(), 0, "{:?}", n.node());
        n.shutdown().await;
    }
    let _ = Duration::ZERO;
}

// spec: SB-5.4 — connecting twice is idempotent and control traffic keeps the pair up; a
// request to an unknown peer fails at admission (Unavailable), nothing is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_is_idempotent_and_unknown_peer_is_unavailable() {
    let (a, _ra) = start("ia");
    let (b, mut rb) = start("ib");
    link(&a, &b).await;
    a.connect(b.address()).unwrap();
    a.send(b.node(), DispatchKey::new(1), Bytes::from_static(b"one"))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, rb.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload.as_deref(), Some(&b"one"[..]));
    let e = a
        .send(&rid("nobody"), DispatchKey::new(1), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(e, zlink_mesh::SendError::Unavailable);
    assert_eq!(a.counters().events(zlink_mesh::TransportEvent::PeerDown), 0);
    a.shutdown().await;
    b.shutdown().await;
}

// spec: SB-6.5, EG-1.2 — a batch is admitted all-or-nothing against the budget and arrives
// in order; a batch larger than the whole budget is refused up front (never partially sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_batch_keeps_order_and_is_all_or_nothing() {
    let (a, _ra) = start("ba");
    let mut cb = config("bb");
    cb.peer_budget = zlink_mesh::OutboundBudget {
        messages: 64,
        bytes: 1 << 20,
    };
    let (b, mut rb) = zlink_mesh::MeshNode::start(cb).unwrap();
    link(&a, &b).await;
    let payloads: Vec<Bytes> = (0..100u8).map(|i| Bytes::from(vec![i])).collect();
    a.send_batch(b.node(), DispatchKey::new(4), payloads)
        .await
        .unwrap();
    for i in 0..100u8 {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_deref(), Some(&[i][..]));
    }
    let too_many: Vec<Bytes> = (0..65).map(|_| Bytes::new()).collect();
    let e = b
        .send_batch(a.node(), DispatchKey::new(4), too_many)
        .await
        .unwrap_err();
    assert!(matches!(e, zlink_mesh::SendError::TooLarge { .. }));
    a.shutdown().await;
    b.shutdown().await;
}

/// Answers every request on `rx` with its own payload, until the node shuts down.
fn echo(mut rx: zlink_mesh::InboundReceiver) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if let Some(r) = m.reply {
                r.reply(m.payload.unwrap_or_default());
            }
        }
    })
}

// docs/MESH.md, "Who dials whom": two nodes that dial each other, whichever name sorts first and
// whichever dials first, end on one connection per link kind — the one the node whose name sorts
// first dialled: each sees the other up once, requests are answered both ways, and no peer
// event follows for longer than the peer timeout (a link left on two different connections
// drops every record as `Unauthenticated` and times out). Eight pairs at once, so that the
// handshakes of the two dials interleave in every way. A node dialling a peer whose name sorts
// first (and that does not dial back) links as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_dial_each_other_keep_one_link_in_either_name_order() {
    trace();
    let tap = WireTap::new(100_000);
    let mut pairs = Vec::new();
    for i in 0..8 {
        let (lo, hi) = (format!("p{i}-a"), format!("p{i}-b"));
        let mut c = config(&lo);
        if i == 0 {
            c.tap = Some(tap.clone());
        }
        let (a, ra) = zlink_mesh::MeshNode::start(c).unwrap();
        let (b, rb) = start(&hi);
        let (ea, eb) = (a.subscribe(), b.subscribe());
        // Half the pairs dial lower name first, half higher name first.
        if i % 2 == 0 {
            a.connect(b.address()).unwrap();
            b.connect(a.address()).unwrap();
        } else {
            b.connect(a.address()).unwrap();
            a.connect(b.address()).unwrap();
        }
        pairs.push((a, b, ea, eb, echo(ra), echo(rb)));
    }
    let (c, rc) = start("q-a");
    let (d, rd) = start("q-b");
    let (ec, ed) = (c.subscribe(), d.subscribe());
    d.connect(c.address()).unwrap();
    pairs.push((c, d, ec, ed, echo(rc), echo(rd)));

    for (a, b, ..) in &pairs {
        for (x, y) in [(a, b), (b, a)] {
            assert!(
                x.wait_peer_up(y.node(), None, WAIT).await.is_some(),
                "{:?} sees {:?} up",
                x.node(),
                y.node()
            );
            let r = x
                .request(
                    y.node(),
                    DispatchKey::new(1),
                    Bytes::from_static(b"hi"),
                    WAIT,
                )
                .await;
            assert_eq!(
                r.map(|r| r.payload),
                Ok(Some(Bytes::from_static(b"hi"))),
                "{:?} -> {:?}",
                x.node(),
                y.node()
            );
        }
    }
    // Longer than the peer timeout (4 s) of protocol time: 30 pings at 200 ms.
    pings_later(&tap, 30).await;
    for (a, b, ea, eb, ..) in &mut pairs {
        for (x, y, ev) in [(&*a, &*b, ea), (&*b, &*a, eb)] {
            let mut seen = Vec::new();
            while let Ok(e) = ev.try_recv() {
                seen.push(e);
            }
            assert!(
                matches!(&seen[..], [zlink_mesh::PeerEvent::Up { node, .. }] if node == y.node()),
                "{:?}: {seen:?}",
                x.node()
            );
            let r = x
                .request(
                    y.node(),
                    DispatchKey::new(1),
                    Bytes::from_static(b"again"),
                    WAIT,
                )
                .await;
            assert_eq!(r.map(|r| r.payload), Ok(Some(Bytes::from_static(b"again"))));
        }
    }
    for (a, b, ..) in pairs {
        a.shutdown().await;
        b.shutdown().await;
    }
}
