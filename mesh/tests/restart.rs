//! Peer kill + restart: a new NodeGeneration is a new peer lifecycle; in-flight requests of
//! the old lifecycle end once (PeerLost); records of the old generation are rejected.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{self, ActorCall, ActorId, CorrelationId, Hello, Record};
use zlink_mesh::{
    DispatchKey, DownReason, DropReason, MeshNode, NodeGeneration, PeerEvent, RequestError,
};

fn node_with_gen(name: &str, generation: u64) -> (MeshNode, zlink_mesh::InboundReceiver) {
    let mut c = config(name);
    c.generation = Some(NodeGeneration::new(generation));
    MeshNode::start(c).unwrap()
}

async fn next_event(rx: &mut tokio::sync::broadcast::Receiver<PeerEvent>) -> PeerEvent {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap()
}

// spec: SB-9 (restart = new lifecycle, old responses never apply to it), SB-12 (in-flight
// request ends exactly once, never resent), SB-2.1 (node generation checked at ingress)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_peer_is_a_new_lifecycle_and_old_generation_is_rejected() {
    trace();
    let (a, mut ra) = start("ra");
    let mut events = a.subscribe();
    let (b1, mut rb1) = node_with_gen("rb", 100);
    b1.connect(a.address()).unwrap();
    assert_eq!(
        b1.wait_peer_up(a.node(), None, WAIT).await,
        Some(a.generation())
    );
    assert_eq!(
        next_event(&mut events).await,
        PeerEvent::Up {
            node: b1.node().clone(),
            generation: NodeGeneration::new(100)
        }
    );

    // A request from a to b1 that b1 holds unanswered, then b1 is killed.
    let held = {
        let b1_rid = b1.node().clone();
        let req = a.request(&b1_rid, DispatchKey::new(1), Bytes::from_static(b"x"), WAIT);
        tokio::pin!(req);
        let m = tokio::select! {
            m = rb1.recv() => m.unwrap(),
            r = &mut req => panic!("request ended early: {r:?}"),
        };
        b1.shutdown().await;
        drop(rb1);
        assert_eq!(req.await.unwrap_err(), RequestError::PeerLost);
        m
    };
    match next_event(&mut events).await {
        PeerEvent::Down {
            node,
            generation,
            reason,
        } => {
            assert_eq!(node.as_str(), "rb");
            assert_eq!(generation, NodeGeneration::new(100));
            assert_eq!(reason, DownReason::Remote);
        }
        e => panic!("unexpected {e:?}"),
    }
    // The old lifecycle's reply handle answers into the void: counted, not delivered.
    held.reply.unwrap().reply(Bytes::from_static(b"stale"));

    // Restart with a new generation.
    let (b2, mut rb2) = node_with_gen("rb", 200);
    b2.connect(a.address()).unwrap();
    assert_eq!(
        a.wait_peer_up(b2.node(), None, WAIT).await,
        Some(NodeGeneration::new(200))
    );
    assert_eq!(
        b2.wait_peer_up(a.node(), None, WAIT).await,
        Some(a.generation())
    );

    let echo = tokio::spawn(async move {
        while let Some(m) = rb2.recv().await {
            if let Some(r) = m.reply {
                r.reply(m.payload.unwrap_or_default());
            }
        }
    });
    let r = a
        .request(
            b2.node(),
            DispatchKey::new(1),
            Bytes::from_static(b"new"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"new"[..]));

    // A record that targets an older generation of `a` (as a restarted owner would see it):
    // rejected at ingress, never passed up; a request gets an Unavailable error reply.
    let stale_call = |target: NodeGeneration| {
        Record::ActorCall(ActorCall {
            actor: ActorId::new("actor-1").unwrap(),
            object_generation: 1.into(),
            authority_owner_generation: 1.into(),
            owner_lease_generation: 1.into(),
            target_node_generation: target,
            key: DispatchKey::new(3),
            deadline: None,
        })
    };
    let old_a = NodeGeneration::new(a.generation().get() - 1);
    b2.send_record(a.node(), stale_call(old_a), Some(Bytes::new()))
        .await
        .unwrap();
    let e = b2
        .request_record(a.node(), stale_call(old_a), Some(Bytes::new()), WAIT)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), zlink_mesh::ErrorKind::Unavailable);
    // The current generation passes.
    b2.send_record(a.node(), stale_call(a.generation()), Some(Bytes::new()))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, ra.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(m.record, Record::ActorCall(ref c) if c.target_node_generation == a.generation())
    );
    assert_eq!(a.counters().dropped(DropReason::StaleGeneration), 2);

    // A Hello announcing b's old generation (a late connection of the dead process) is
    // rejected with StaleGeneration.
    {
        let ctx = zmq::Context::new();
        let s = ctx.socket(zmq::ROUTER).unwrap();
        s.set_identity(b"rb").unwrap();
        s.set_router_mandatory(true).unwrap();
        s.set_linger(0).unwrap();
        s.connect(&a.endpoints().completion).unwrap();
        let hello = zlink_wire::encode(
            &Record::Hello(Hello {
                mesh: zlink_mesh::MeshName::new("test").unwrap(),
                node: zlink_mesh::NodeRid::new("rb").unwrap(),
                generation: NodeGeneration::new(100),
                nonce: [7; 32],
            }),
            CorrelationId::NONE,
            None,
        )
        .unwrap();
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            // ROUTER_MANDATORY: EHOSTUNREACH until the connection is up.
            if s.send("ra", zmq::SNDMORE | zmq::DONTWAIT).is_ok() {
                s.send(&hello.envelope()[..], 0).unwrap();
                break;
            }
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eventually("stale hello rejected", || {
            a.counters().dropped(DropReason::StaleGeneration) == 3
        })
        .await;
    }
    // b2 survives the intrusion (no ROUTER_HANDOVER, the Hello changes nothing before a
    // proof; see impersonation.rs). The old generation never comes back up.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        assert!(tokio::time::Instant::now() < deadline, "b2 never recovered");
        let Some(g) = a.wait_peer_up(b2.node(), None, WAIT).await else {
            continue;
        };
        assert_eq!(g, NodeGeneration::new(200));
        match a
            .request(
                b2.node(),
                DispatchKey::new(1),
                Bytes::from_static(b"again"),
                Duration::from_secs(2),
            )
            .await
        {
            Ok(r) => {
                assert_eq!(r.payload.as_deref(), Some(&b"again"[..]));
                break;
            }
            Err(
                RequestError::PeerLost | RequestError::DeadlineExceeded | RequestError::Send(_),
            ) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    while let Ok(ev) = events.try_recv() {
        if let PeerEvent::Up { generation, .. } = ev {
            assert_ne!(generation, NodeGeneration::new(100));
        }
    }
    b2.shutdown().await;
    echo.await.unwrap();
    a.shutdown().await;
}

// spec: SB-9, SB-2.1 — the *accepting* side restarts on the same endpoints: the connecting
// side's libzmq reconnects by itself (bounded backoff), the handshake re-runs and the new
// generation is a new lifecycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptor_restart_on_same_endpoints_reconnects() {
    let (a, _ra) = start("xa");
    // endpoints below the ephemeral range: a keeps dialling them while b is down
    let mut c = config("xb");
    c.generation = Some(NodeGeneration::new(10));
    c.relay_endpoint = format!("tcp://127.0.0.1:{}", free_port());
    c.completion_endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let (b1, _rb1) = MeshNode::start(c).unwrap();
    let addr = b1.address();
    a.connect(addr.clone()).unwrap();
    assert_eq!(
        a.wait_peer_up(b1.node(), None, WAIT).await,
        Some(NodeGeneration::new(10))
    );
    let mut events = a.subscribe();
    b1.shutdown().await;
    loop {
        if let PeerEvent::Down {
            node, generation, ..
        } = next_event(&mut events).await
        {
            assert_eq!(node.as_str(), "xb");
            assert_eq!(generation, NodeGeneration::new(10));
            break;
        }
    }
    let mut c = config("xb");
    c.generation = Some(NodeGeneration::new(20));
    c.relay_endpoint = addr.relay.clone();
    c.completion_endpoint = addr.completion.clone();
    let (b2, mut rb2) = MeshNode::start(c).unwrap();
    assert_eq!(
        a.wait_peer_up(b2.node(), Some(NodeGeneration::new(10)), WAIT)
            .await,
        Some(NodeGeneration::new(20))
    );
    let echo = tokio::spawn(async move {
        let m = rb2.recv().await.unwrap();
        m.reply.unwrap().reply(m.payload.unwrap());
        rb2
    });
    let r = a
        .request(
            b2.node(),
            DispatchKey::new(1),
            Bytes::from_static(b"back"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"back"[..]));
    let _rb2 = echo.await.unwrap();
    b2.shutdown().await;
    a.shutdown().await;
}

/// A node on fixed endpoints below the ephemeral range (its peer keeps dialling them while it
/// is down), with a given generation.
fn fixed(
    name: &str,
    generation: u64,
    at: Option<&zlink_mesh::PeerAddress>,
) -> (MeshNode, zlink_mesh::InboundReceiver) {
    let mut c = config(name);
    c.generation = Some(NodeGeneration::new(generation));
    c.relay_endpoint = at.map_or_else(
        || format!("tcp://127.0.0.1:{}", free_port()),
        |a| a.relay.clone(),
    );
    c.completion_endpoint = at.map_or_else(
        || format!("tcp://127.0.0.1:{}", free_port()),
        |a| a.completion.clone(),
    );
    MeshNode::start(c).unwrap()
}

/// Answers every request on `rx` with its own payload.
fn echo(mut rx: zlink_mesh::InboundReceiver) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if let Some(r) = m.reply {
                r.reply(m.payload.unwrap_or_default());
            }
        }
    })
}

/// Both see each other up on the expected generations and a request goes each way.
async fn linked(x: &MeshNode, y: &MeshNode) {
    for (p, q) in [(x, y), (y, x)] {
        assert_eq!(
            p.wait_peer_up(q.node(), None, WAIT).await,
            Some(q.generation()),
            "{:?} sees {:?}",
            p.node(),
            q.node()
        );
        let r = p
            .request(
                q.node(),
                DispatchKey::new(1),
                Bytes::from_static(b"hi"),
                WAIT,
            )
            .await;
        assert_eq!(
            r.map(|r| r.payload),
            Ok(Some(Bytes::from_static(b"hi"))),
            "{:?} -> {:?}",
            p.node(),
            q.node()
        );
    }
}

// spec: SB-9 — docs/MESH.md, "Who dials whom": two nodes that dial each other relink after
// either of them restarts on the same endpoints and dials again (the one whose name sorts
// second, then the first): both up on the new generation, requests answered both ways. Four
// pairs at once, so that the restarted node's dial and the other's redial interleave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_dial_each_other_relink_after_either_restarts() {
    trace();
    let mut pairs = Vec::new();
    for i in 0..4 {
        let (a, ra) = fixed(&format!("m{i}a"), 10, None);
        let (b, rb) = fixed(&format!("m{i}b"), 10, None);
        a.connect(b.address()).unwrap();
        b.connect(a.address()).unwrap();
        pairs.push((a, b, echo(ra), echo(rb)));
    }
    for (a, b, ..) in &pairs {
        linked(a, b).await;
    }
    // The second name restarts, then the first.
    for restart_first in [false, true] {
        let mut next = Vec::new();
        for (a, b, ea, eb) in pairs {
            let (stay, gone, e_stay, e_gone) = if restart_first {
                (b, a, eb, ea)
            } else {
                (a, b, ea, eb)
            };
            let mut events = stay.subscribe();
            let (name, at) = (gone.node().to_string(), gone.address());
            gone.shutdown().await;
            let _ = e_gone.await;
            loop {
                if let PeerEvent::Down { node, .. } = next_event(&mut events).await {
                    assert_eq!(node.as_str(), name);
                    break;
                }
            }
            let (back, rx) = fixed(&name, 20 + u64::from(restart_first), Some(&at));
            back.connect(stay.address()).unwrap();
            let e_back = echo(rx);
            next.push(if restart_first {
                (back, stay, e_back, e_stay)
            } else {
                (stay, back, e_stay, e_back)
            });
        }
        for (a, b, ..) in &next {
            linked(a, b).await;
        }
        pairs = next;
    }
    for (a, b, ..) in pairs {
        a.shutdown().await;
        b.shutdown().await;
    }
}

/// The listen ports handed to nodes that have not bound them yet never repeat within a process:
/// two nodes of one test, or of two tests side by side, never share a port. With a seed read
/// per call (as before) 1,000 ports repeated almost surely (the birthday bound over ~12,000),
/// and one node of a pair died at bind, leaving its peer "not ready".
#[test]
fn free_ports_never_repeat_within_a_process() {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        let p = free_port();
        assert!(seen.insert(p), "port {p} handed out twice");
    }
}
