//! Impersonation: a TCP peer that announces another node's NodeRid (as its routing id and in
//! its Hello), before and after that node is up. Authentication is bound to the connection
//! (docs/MESH.md, "Handshake"): no ROUTER_HANDOVER, every outgoing connection announces a fresh
//! random routing id that the HMAC transcript covers, and a record is attributed to a node only
//! from the routing id that proved itself. So no record of the impostor is accepted, its Hello
//! tears nothing down, and the real node comes up and stays up.
//!
//! spec: SB-2.1 (authenticated peer RID at the transport boundary), SB-9 (lifecycle only
//! changed by a proved generation).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{self, CorrelationId, Hello, OneWay, Proof, Record};
use zlink_mesh::{
    DispatchKey, DropReason, InboundReceiver, MeshName, MeshNode, NodeGeneration, TransportEvent,
};

/// A raw ROUTER pair connecting to the victim's relay and completion ports, announcing
/// `identity` as its routing id.
struct Impostor {
    _ctx: zmq::Context,
    links: [zmq::Socket; 2],
    target: Vec<u8>,
}

impl Impostor {
    fn connect(identity: &str, victim: &MeshNode) -> Impostor {
        let ctx = zmq::Context::new();
        let mk = |ep: &str| {
            let s = ctx.socket(zmq::ROUTER).unwrap();
            s.set_identity(identity.as_bytes()).unwrap();
            s.set_router_mandatory(true).unwrap();
            s.set_linger(0).unwrap();
            s.connect(ep).unwrap();
            s
        };
        let links = [
            mk(&victim.endpoints().relay),
            mk(&victim.endpoints().completion),
        ];
        Impostor {
            _ctx: ctx,
            links,
            target: victim.node().as_bytes().to_vec(),
        }
    }

    /// Sends `record` on both links, waiting until each connection is routable.
    fn send(&self, record: &Record, payload: Option<Bytes>) {
        let f = zlink_wire::encode(record, CorrelationId::NONE, payload)
            .unwrap()
            .into_vec();
        for s in &self.links {
            let deadline = Instant::now() + WAIT;
            while s
                .send(&self.target[..], zmq::SNDMORE | zmq::DONTWAIT)
                .is_err()
            {
                assert!(Instant::now() < deadline, "victim never routable");
                std::thread::yield_now();
            }
            for (i, p) in f.iter().enumerate() {
                let more = if i + 1 < f.len() { zmq::SNDMORE } else { 0 };
                s.send(&p[..], more).unwrap();
            }
        }
    }

    /// Reads and discards what the victim sent so far (earlier Challenges, Rejects).
    fn drain(&self) {
        for s in &self.links {
            while s.recv_multipart(zmq::DONTWAIT).is_ok() {}
        }
    }

    /// A Hello claiming `node` (with a generation newer than any real one) on both links.
    fn hello(&self, node: &str) {
        self.drain();
        self.send(
            &Record::Hello(Hello {
                mesh: MeshName::new("test").unwrap(),
                node: rid(node),
                generation: NodeGeneration::new(u64::MAX),
                nonce: [9; 32],
            }),
            None,
        );
    }

    /// Whether the victim answered the Hello with a Challenge on both links by `deadline`.
    fn answered(&self, deadline: Instant) -> bool {
        for s in &self.links {
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let ms = i64::try_from(left.as_millis()).unwrap_or(i64::MAX);
                if ms == 0 || s.poll(zmq::POLLIN, ms).unwrap() == 0 {
                    return false;
                }
                let parts = s.recv_multipart(0).unwrap();
                // The first frame is the victim's routing id.
                let frames: Vec<Bytes> = parts.into_iter().skip(1).map(Bytes::from).collect();
                if let Ok(d) = zlink_wire::decode(&frames, &zlink_wire::Limits::DEFAULT) {
                    if matches!(d.record, Record::Challenge(_)) {
                        break;
                    }
                }
            }
        }
        true
    }

    /// The whole impersonation attempt: a Hello claiming `node`, answered by the victim, a
    /// made-up Proof, then `n` one-way records. Returns how many records the victim must count
    /// as dropped (`Unauthenticated`): the records, on both links.
    fn attempt(&self, node: &str, n: usize) -> u64 {
        self.hello(node);
        assert!(
            self.answered(Instant::now() + WAIT),
            "the victim answers the impostor's Hello"
        );
        self.send(&Record::Proof(Proof { proof: [0; 32] }), None);
        for _ in 0..n {
            self.send(
                &Record::OneWay(OneWay {
                    key: DispatchKey::new(66),
                }),
                Some(Bytes::from_static(b"forged")),
            );
        }
        (2 * n) as u64
    }

    /// A connection announcing `identity` whose Hello the victim answers. libzmq ignores a
    /// connection announcing a routing id still in use (no ROUTER_HANDOVER, docs/MESH.md), and
    /// the victim's ROUTER releases a closed connection's routing id only once it has read
    /// that connection's last messages and acknowledged its pipe's end — after the
    /// `Disconnected` event. A connection made in between is never read, so it is replaced by
    /// a new one (waiting longer each time) until the victim answers one.
    fn served(identity: &str, victim: &MeshNode) -> Impostor {
        let deadline = Instant::now() + WAIT;
        let mut patience = Duration::from_millis(100);
        loop {
            let imp = Impostor::connect(identity, victim);
            imp.hello("good");
            if imp.answered((Instant::now() + patience).min(deadline)) {
                return imp;
            }
            assert!(
                Instant::now() < deadline,
                "the victim never served a connection announcing {identity}"
            );
            patience = (patience * 2).min(Duration::from_secs(2));
        }
    }
}

/// One impersonation attempt by `imp`: both proofs fail, every record is dropped as
/// `Unauthenticated` (counted, so the victim has handled them all).
async fn attempt_is_refused(victim: &MeshNode, imp: &Impostor) {
    let c = victim.counters();
    let unauth = c.dropped(DropReason::Unauthenticated);
    let failed = c.dropped(DropReason::HandshakeFailed);
    let expect = imp.attempt("good", 3);
    eventually("impostor's proofs fail", || {
        c.dropped(DropReason::HandshakeFailed) >= failed + 2
    })
    .await;
    eventually("impostor's records dropped", || {
        c.dropped(DropReason::Unauthenticated) >= unauth + expect
    })
    .await;
}

/// An attempt while "good" is up: refused, and only good's record reaches the application.
async fn try_impersonation(
    victim: &MeshNode,
    good: &MeshNode,
    inbound: &mut InboundReceiver,
    imp: &Impostor,
) {
    attempt_is_refused(victim, imp).await;
    only_good_arrives(victim, good, inbound).await;
}

/// Only `good`'s tagged record reaches the victim's application, nothing of the impostor.
async fn only_good_arrives(victim: &MeshNode, good: &MeshNode, inbound: &mut InboundReceiver) {
    good.send(
        victim.node(),
        DispatchKey::new(1),
        Bytes::from_static(b"real"),
    )
    .await
    .unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload.as_deref(), Some(&b"real"[..]));
    assert!(inbound.try_recv().is_none(), "nothing forged was delivered");
}

// spec: SB-2.1, SB-9 — an impostor announcing "good" before "good" is up, then again while it
// is up: no record accepted, no link torn down, the real node unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impostor_before_and_after_the_real_node_is_up() {
    trace();
    let (victim, mut inbound) = start("victim");
    let (good, _rg) = start("good");
    let c = victim.counters();

    // Before "good" is up: its NodeRid is free; the impostor takes it as routing id.
    let early = Impostor::connect("good", &victim);
    attempt_is_refused(&victim, &early).await;
    assert!(victim.peer_generation(good.node()).is_none());

    // The real node comes up although the impostor still holds the routing id "good". The
    // subscription starts before the link, so the link's own Up is in it (subscribing after
    // `link` raced with that Up: the state is set before the event is published).
    let mut events = victim.subscribe();
    link(&good, &victim).await;
    let generation = victim.peer_generation(good.node()).unwrap();
    match tokio::time::timeout(WAIT, events.recv()).await {
        Ok(Ok(zlink_mesh::PeerEvent::Up {
            node,
            generation: g,
        })) if &node == good.node() && g == generation => {}
        other => panic!("expected good's Up first, got {other:?}"),
    }
    only_good_arrives(&victim, &good, &mut inbound).await;

    // While "good" is up: the early impostor again; a connection announcing another routing
    // id but claiming "good" in its Hello; then, once the early impostor is gone, a new
    // connection announcing the routing id "good" (with ROUTER_HANDOVER it took the pipe over).
    let other = Impostor::connect("intruder", &victim);
    try_impersonation(&victim, &good, &mut inbound, &early).await;
    try_impersonation(&victim, &good, &mut inbound, &other).await;
    let closed = c.events(TransportEvent::Disconnected);
    drop(early);
    eventually("early impostor's connections closed", || {
        c.events(TransportEvent::Disconnected) >= closed + 2
    })
    .await;
    let late = Impostor::served("good", &victim);
    try_impersonation(&victim, &good, &mut inbound, &late).await;
    assert_eq!(c.events(TransportEvent::PeerDown), 0, "no link torn down");
    assert_eq!(victim.peer_generation(good.node()), Some(generation));
    assert!(events.try_recv().is_err(), "no peer event at all");
    victim.shutdown().await;
    good.shutdown().await;
}
