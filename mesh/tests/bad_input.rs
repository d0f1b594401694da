//! Bad input at every network-facing port: each case is rejected and counted, the node keeps
//! serving its good peers, and nothing reaches the layer above.
//!
//! spec: SB-2.1 (validated once at transport ingress: authenticated peer RID, node
//! generation, frame format), SB-14.26 (45 never accepted), EG-16.23 (peer accept keeps
//! progressing).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use bytes::Bytes;
use common::raw::RawPeer;
use common::*;
use zlink_mesh::handshake::Outcome;
use zlink_mesh::zlink_wire::{self, CorrelationId, OneWay, Record};
use zlink_mesh::{
    DispatchKey, DropReason, InboundReceiver, LinkKind, MeshName, MeshNode, MeshSecret,
    NodeGeneration, NodeRid, TransportEvent,
};

fn port(ep: &str) -> u16 {
    ep.rsplit(':').next().unwrap().parse().unwrap()
}

/// Proves the node still serves a good peer and passes nothing else up.
async fn still_serves(node: &MeshNode, good: &MeshNode, inbound: &mut InboundReceiver, tag: &str) {
    good.send(
        node.node(),
        DispatchKey::new(1),
        Bytes::from(tag.to_string()),
    )
    .await
    .unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        m.payload.as_deref(),
        Some(tag.as_bytes()),
        "only the good peer's record arrives"
    );
    assert!(
        inbound.try_recv().is_none(),
        "nothing else reached the layer above"
    );
}

fn setup() -> (MeshNode, InboundReceiver, MeshNode) {
    let mut c = config("victim");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.transport.max_message_size = 64 * 1024;
    c.max_pending_handshakes = 16;
    let (node, inbound) = MeshNode::start(c).unwrap();
    let (good, _) = start("good");
    (node, inbound, good)
}

// spec: SB-2.1 — garbage bytes, a ZMTP greeting + huge frame header, and a flood of
// short-lived connections on each TCP port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tcp_garbage_huge_header_and_connection_flood() {
    trace();
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let eps = [
        node.endpoints().relay.clone(),
        node.endpoints().completion.clone(),
        node.endpoints().client.clone().unwrap(),
    ];
    for ep in &eps {
        let before = node.counters().events(TransportEvent::Accepted);
        // Garbage.
        let mut s = TcpStream::connect(("127.0.0.1", port(ep))).unwrap();
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let _ = s.write_all(&garbage);
        // ZMTP 3.0 greeting (NULL) + a frame header declaring 1 TiB (issue's hostile header).
        let mut h = TcpStream::connect(("127.0.0.1", port(ep))).unwrap();
        let mut greet = vec![0xffu8, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
        greet.extend_from_slice(b"NULL");
        greet.resize(64, 0);
        h.write_all(&greet).unwrap();
        let mut peer_greet = [0u8; 64];
        h.set_read_timeout(Some(WAIT)).unwrap();
        h.read_exact(&mut peer_greet[..10]).unwrap();
        let mut hdr = vec![0x06u8];
        hdr.extend_from_slice(&(1u64 << 40).to_be_bytes());
        let _ = h.write_all(&hdr);
        let _ = h.write_all(&[b'x'; 1000]);
        // libzmq drops this connection: the read side sees EOF (or reset), never a crash.
        let mut buf = [0u8; 256];
        let deadline = Instant::now() + WAIT;
        loop {
            match h.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => assert!(Instant::now() < deadline, "hostile connection never closed"),
            }
        }
        // Flood of short-lived connections.
        for _ in 0..100 {
            let c = TcpStream::connect(("127.0.0.1", port(ep))).unwrap();
            drop(c);
        }
        drop(s);
        eventually("connections accepted", || {
            node.counters().events(TransportEvent::Accepted) >= before + 102
        })
        .await;
        still_serves(&node, &good, &mut inbound, ep).await;
    }
    assert!(
        node.counters().dropped(DropReason::ZmtpProtocol) >= 1,
        "protocol errors counted"
    );
    node.shutdown().await;
    good.shutdown().await;
}

// spec: SB-2.1 — a ZeroMQ peer without the handshake, a peer without identity, frames over
// the size limit: dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zmq_peers_without_handshake_and_oversized_frames() {
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let raw = RawPeer::connect("intruder", &node);
    let rec = Record::OneWay(OneWay {
        key: DispatchKey::new(1),
    });
    raw.send_record(LinkKind::Relay, &rec, 0, Some(Bytes::from_static(b"evil")));
    eventually("unauthenticated drop", || {
        node.counters().dropped(DropReason::Unauthenticated) >= 1
    })
    .await;

    // A DEALER without identity: libzmq gives it a generated routing id, never a NodeRid.
    let ctx = zmq::Context::new();
    let d = ctx.socket(zmq::DEALER).unwrap();
    d.set_linger(0).unwrap();
    d.connect(&node.endpoints().relay).unwrap();
    let f = zlink_wire::encode(&rec, CorrelationId::NONE, Some(Bytes::from_static(b"evil")))
        .unwrap()
        .into_vec();
    d.send_multipart(f.iter().map(|b| &b[..]), 0).unwrap();
    eventually("invalid routing id drop", || {
        node.counters().dropped(DropReason::InvalidRoutingId) >= 1
    })
    .await;

    // Over the size limit (64 KiB payload + 64 KiB envelope here): libzmq drops the
    // connection, nothing is delivered, the drop is counted.
    let before = node.counters().events(TransportEvent::Disconnected);
    let too_large = node.counters().dropped(DropReason::MessageTooLarge);
    let big = vec![0u8; 200 * 1024];
    raw.send(LinkKind::Completion, &[&big]);
    eventually("oversized frame disconnects", || {
        node.counters().events(TransportEvent::Disconnected) > before
    })
    .await;
    // Also through the client port.
    let c = ctx.socket(zmq::DEALER).unwrap();
    c.set_linger(0).unwrap();
    c.connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    c.send(&big[..], 0).unwrap();
    eventually("oversized client frame disconnects", || {
        node.counters().events(TransportEvent::Disconnected) > before + 1
    })
    .await;
    eventually("oversized frames counted", || {
        node.counters().dropped(DropReason::MessageTooLarge) >= too_large + 2
    })
    .await;
    still_serves(&node, &good, &mut inbound, "after-no-handshake").await;
    node.shutdown().await;
    good.shutdown().await;
}

// spec: SB-2.1 — wrong secret, a Hello claiming an up peer's RID, too many pending
// handshakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_other_rid_and_handshake_flood() {
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;

    // A real node with the wrong secret never comes up, on either side.
    let mut wc = config("wrong");
    wc.secret = Some(MeshSecret::new(b"another-secret-entirely-different-32".to_vec()).unwrap());
    let (wrong, _rw) = MeshNode::start(wc).unwrap();
    wrong.connect(node.address()).unwrap();
    eventually("bad proof counted", || {
        node.counters().dropped(DropReason::HandshakeFailed) >= 1
    })
    .await;
    assert!(node.peer_generation(wrong.node()).is_none());
    assert!(wrong.peer_generation(node.node()).is_none());
    wrong.shutdown().await;

    // Identity "liar" claiming NodeRid "good" (which is up): the Hello is answered with a
    // Challenge and changes nothing; a proof made without the secret fails the handshake, and
    // the real "good" stays up throughout (impersonation is covered in impersonation.rs).
    let liar = RawPeer::connect("liar", &node);
    let local = |n: &str| zlink_wire::Hello {
        mesh: MeshName::new("test").unwrap(),
        node: NodeRid::new(n).unwrap(),
        generation: NodeGeneration::new(u64::MAX),
        nonce: [1; 32],
    };
    let failed = node.counters().dropped(DropReason::HandshakeFailed);
    liar.send_record(LinkKind::Relay, &Record::Hello(local("good")), 0, None);
    let challenge = liar
        .recv(LinkKind::Relay, Instant::now() + WAIT)
        .expect("a Challenge");
    let bytes: Vec<Bytes> = challenge.into_iter().map(Bytes::from).collect();
    let d = zlink_wire::decode(&bytes, &zlink_wire::Limits::DEFAULT).unwrap();
    assert!(matches!(d.record, Record::Challenge(_)), "{:?}", d.record);
    liar.send_record(
        LinkKind::Relay,
        &Record::Proof(zlink_wire::Proof { proof: [0; 32] }),
        0,
        None,
    );
    eventually("bad proof counted", || {
        node.counters().dropped(DropReason::HandshakeFailed) > failed
    })
    .await;
    assert_eq!(node.counters().events(TransportEvent::PeerDown), 0);
    assert!(node.peer_generation(good.node()).is_some());

    // Handshake flood: more distinct identities than max_pending_handshakes (16).
    let flood: Vec<RawPeer> = (0..24)
        .map(|i| RawPeer::connect(&format!("flood-{i}"), &node))
        .collect();
    for (i, p) in flood.iter().enumerate() {
        p.send_record(
            LinkKind::Relay,
            &Record::Hello(local(&format!("flood-{i}"))),
            0,
            None,
        );
    }
    eventually("handshake capacity enforced", || {
        node.counters().dropped(DropReason::HandshakeCapacity) >= 8
    })
    .await;
    drop(flood);
    still_serves(&node, &good, &mut inbound, "after-flood").await;
    node.shutdown().await;
    good.shutdown().await;
}

// spec: SB-14.26 (45 never accepted), SB-2.1 (frame format; records on the wrong
// connection) — from a peer that completed the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_peer_sending_reserved_unknown_and_misplaced_records() {
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let raw = RawPeer::connect("rawauth", &node);
    for kind in [LinkKind::Relay, LinkKind::Completion] {
        let o = raw.handshake(kind, "rawauth", 5, SECRET);
        assert!(matches!(o, Some(Outcome::Established(_))), "{o:?}");
    }
    assert_eq!(
        node.wait_peer_up(&NodeRid::new("rawauth").unwrap(), None, WAIT)
            .await,
        Some(NodeGeneration::new(5))
    );

    let header = |cmd: u8| {
        let mut h = vec![1u8, cmd, 0, 0];
        h.extend_from_slice(&0u64.to_be_bytes());
        h
    };
    raw.send(LinkKind::Relay, &[&header(45)]);
    eventually("45 rejected", || {
        node.counters().dropped(DropReason::ReservedCommand) == 1
    })
    .await;
    raw.send(LinkKind::Relay, &[&header(200)]);
    raw.send(LinkKind::Relay, &[&header(99)]);
    eventually("unknown rejected", || {
        node.counters().dropped(DropReason::UnknownCommand) == 2
    })
    .await;
    raw.send(LinkKind::Relay, &[b"\x01"]);
    raw.send(LinkKind::Relay, &[&[7u8; 40]]);
    raw.send(LinkKind::Relay, &[b"a", b"b", b"c", b"d"]);
    eventually("malformed rejected", || {
        node.counters().dropped(DropReason::Malformed) >= 3
    })
    .await;
    // A one-way on the completion connection and a Ping on the relay connection.
    let rec = Record::OneWay(OneWay {
        key: DispatchKey::new(1),
    });
    raw.send_record(
        LinkKind::Completion,
        &rec,
        0,
        Some(Bytes::from_static(b"misplaced")),
    );
    raw.send_record(
        LinkKind::Relay,
        &Record::Ping(zlink_wire::Ping { seq: 1 }),
        0,
        None,
    );
    eventually("wrong connection", || {
        node.counters().dropped(DropReason::WrongConnection) >= 2
    })
    .await;
    // A reply nobody asked for.
    raw.send_record(
        LinkKind::Completion,
        &Record::Reply(zlink_wire::Reply),
        77,
        Some(Bytes::new()),
    );
    eventually("unknown reply", || {
        node.counters().dropped(DropReason::UnknownReply) >= 1
    })
    .await;
    // The authenticated raw peer's valid record does arrive.
    raw.send_record(LinkKind::Relay, &rec, 0, Some(Bytes::from_static(b"valid")));
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload.as_deref(), Some(&b"valid"[..]));
    still_serves(&node, &good, &mut inbound, "after-garbage-records").await;
    node.shutdown().await;
    good.shutdown().await;
}

// spec: SB-2.1 — an independent ZeroMQ implementation (pyzmq, bundling its own libzmq)
// speaking to the node: it gets a valid Challenge, fails the proof, then sends a reserved
// and a garbage frame; all are rejected and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyzmq_peer_is_rejected() {
    if std::process::Command::new("python3")
        .args(["-c", "import zmq"])
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        panic!("pyzmq is required: python3 -m pip install pyzmq");
    }
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let hello = zlink_wire::encode(
        &Record::Hello(zlink_wire::Hello {
            mesh: MeshName::new("test").unwrap(),
            node: NodeRid::new("py").unwrap(),
            generation: NodeGeneration::new(1),
            nonce: [9; 32],
        }),
        CorrelationId::NONE,
        None,
    )
    .unwrap();
    let proof = zlink_wire::encode(
        &Record::Proof(zlink_wire::Proof { proof: [0; 32] }),
        CorrelationId::NONE,
        None,
    )
    .unwrap();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let script = r#"
import sys, zmq
ep, target, hello, proof = sys.argv[1], sys.argv[2].encode(), bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4])
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.setsockopt(zmq.IDENTITY, b"py")
s.setsockopt(zmq.ROUTER_MANDATORY, 1)
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.RCVTIMEO, 20000)
s.connect(ep)
import time
for _ in range(2000):
    try:
        s.send_multipart([target, hello]); break
    except zmq.ZMQError:
        time.sleep(0.01)
rid, env = s.recv_multipart()
print("challenge", env[0], env[1])
s.send_multipart([target, proof])
rid, env = s.recv_multipart()
print("reply", env[1])
s.send_multipart([target, bytes([1, 45, 0, 0]) + bytes(8)])
s.send_multipart([target, b"\x00garbage"])
time.sleep(0.2)
"#;
    let out = tokio::process::Command::new("python3")
        .args([
            "-c",
            script,
            &node.endpoints().relay,
            node.node().as_str(),
            &hex(hello.envelope()),
            &hex(proof.envelope()),
        ])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pyzmq peer failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("challenge 1 129"), "{stdout}");
    assert!(
        stdout.contains("reply 132"),
        "a Reject after the bad proof: {stdout}"
    );
    eventually("py handshake failed", || {
        node.counters().dropped(DropReason::HandshakeFailed) >= 1
    })
    .await;
    eventually("py reserved", || {
        node.counters().dropped(DropReason::ReservedCommand) >= 1
    })
    .await;
    eventually("py garbage", || {
        node.counters().dropped(DropReason::Malformed) >= 1
    })
    .await;
    assert!(node.peer_generation(&NodeRid::new("py").unwrap()).is_none());
    still_serves(&node, &good, &mut inbound, "after-pyzmq").await;
    node.shutdown().await;
    good.shutdown().await;
}

// spec: EG-1.2 (the receive window is its own limit), SB-2.1 — an authenticated peer that
// overdraws its relay window, driven from outside (a raw ROUTER that ran the handshake): the
// excess is dropped and counted (`CreditExceeded`), what fit is delivered in order, memory
// held for it stays bounded by the window, and another peer is served meanwhile on its own
// window. The dropped records' cost still comes back in FlowCredit (docs/MESH.md "Memory
// bounds", docs/CLIENT-PROTOCOL.md 5.3): once the node has passed up what it held, the grants
// equal the window plus everything the peer sent, so its counters agree with the node's again
// and it goes on sending within its window with nothing dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_peer_ignoring_its_window_is_bounded() {
    const WINDOW: u32 = 4;
    let mut c = config("windowed");
    c.inbound_capacity = 1;
    c.peer_window = zlink_mesh::InboundWindow {
        messages: WINDOW,
        bytes: 1 << 20,
    };
    // The raw peer never answers Pings: it must not be declared down during the test.
    c.liveness.peer_timeout = WAIT * 3;
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let (good, _) = start("good");
    link(&good, &node).await;
    let raw = RawPeer::connect("greedy", &node);
    for kind in [LinkKind::Relay, LinkKind::Completion] {
        assert!(matches!(
            raw.handshake(kind, "greedy", 1, SECRET),
            Some(Outcome::Established(_))
        ));
    }
    assert!(
        node.wait_peer_up(&NodeRid::new("greedy").unwrap(), None, WAIT)
            .await
            .is_some()
    );
    // What the window is charged for a record: its envelope and payload.
    let record = |i: u8| {
        zlink_wire::encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(1),
            }),
            CorrelationId::NONE,
            Some(Bytes::from(vec![i])),
        )
        .unwrap()
        .into_vec()
    };
    let cost = |i: u8| record(i).iter().map(|f| f.len() as u64).sum::<u64>();
    let send = |i: u8| {
        let frames = record(i);
        let parts: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        raw.send(LinkKind::Relay, &parts);
    };
    let flood = 10u8;
    for i in 0..flood {
        send(i);
    }
    // 1 in the inbound channel + 4 held (the window) are accepted, 5 are over the window.
    eventually("excess dropped", || {
        node.counters().dropped(DropReason::CreditExceeded) == 5
    })
    .await;
    // The other peer's record waits on its own window, behind the held ones (FIFO).
    good.send(
        node.node(),
        DispatchKey::new(1),
        Bytes::from_static(b"good"),
    )
    .await
    .unwrap();
    for i in 0..5u8 {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_deref(), Some(&[i][..]));
    }
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        m.payload.as_deref(),
        Some(&b"good"[..]),
        "the good peer served"
    );
    assert!(inbound.try_recv().is_none());

    // Resynchronised: the grants come to the window plus every record sent, dropped or not.
    let sent = (u64::from(flood), (0..flood).map(cost).sum::<u64>());
    let mut granted = (0u64, 0u64);
    let until = Instant::now() + WAIT;
    while granted != (u64::from(WINDOW) + sent.0, (1 << 20) + sent.1) {
        let Some(parts) = raw.recv(LinkKind::Completion, until) else {
            panic!("credit not given back: granted {granted:?}, sent {sent:?}");
        };
        let bytes: Vec<Bytes> = parts.into_iter().map(Bytes::from).collect();
        if let Ok(d) = zlink_wire::decode(&bytes, &zlink_wire::Limits::DEFAULT)
            && let Record::FlowCredit(g) = d.record
        {
            granted.0 += u64::from(g.messages);
            granted.1 += g.bytes;
        }
    }
    // The peer's counters say the whole window is free again, and it is: a window's worth
    // while the layer above does not read (1 in the channel + the window held) is all kept.
    for i in 0..=WINDOW as u8 {
        send(100 + i);
    }
    for i in 0..=WINDOW as u8 {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_deref(), Some(&[100 + i][..]), "in order");
    }
    assert_eq!(
        node.counters().dropped(DropReason::CreditExceeded),
        5,
        "nothing dropped within the resynchronised window"
    );
    still_serves(&node, &good, &mut inbound, "after-overdraw").await;
    node.shutdown().await;
    good.shutdown().await;
}

// spec: SB-2.1, EG-4 — a peer's batch of 24s (the relay run: after the first one goes up, the
// peer's connection is looked up once for the records that follow): each sub-record is still
// decoded and checked by itself — a malformed 24 and a 24 whose payload part is missing are
// dropped and counted, a control record in the middle ends the run and is dropped as
// `WrongConnection` — and the good 24s before and after are delivered once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_relay_records_are_checked_one_by_one() {
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let raw = RawPeer::connect("rawrun", &node);
    for kind in [LinkKind::Relay, LinkKind::Completion] {
        let o = raw.handshake(kind, "rawrun", 5, SECRET);
        assert!(matches!(o, Some(Outcome::Established(_))), "{o:?}");
    }
    assert!(
        node.wait_peer_up(&NodeRid::new("rawrun").unwrap(), None, WAIT)
            .await
            .is_some()
    );
    let send = |seq: u64| {
        zlink_wire::encode(
            &Record::ActorSend(zlink_wire::ActorSend {
                actor: zlink_wire::ActorId::new("actor-1").unwrap(),
                object_generation: 3.into(),
                authority_owner_generation: 4.into(),
                owner_lease_generation: 5.into(),
                session_lifecycle: 6.into(),
                key: DispatchKey::new(7),
                deadline: None,
                tail: zlink_wire::BoundSessionTail {
                    binding_generation: 8.into(),
                    session_sequence: seq.into(),
                },
            }),
            CorrelationId::NONE,
            Some(Bytes::from(seq.to_string())),
        )
        .unwrap()
    };
    let records: Vec<_> = (0..5).map(send).collect();
    let mut malformed = records[1].envelope().to_vec();
    malformed.push(0xc0); // trailing byte after the body
    let ping = zlink_wire::encode(
        &Record::Ping(zlink_wire::Ping { seq: 1 }),
        CorrelationId::NONE,
        None,
    )
    .unwrap();
    let payload = |f: &zlink_wire::Frames| f.payload().map(|p| p.to_vec());
    let p: Vec<_> = records.iter().map(payload).collect();
    let frame = zlink_wire::encode_batch([
        (&records[0].envelope()[..], p[0].as_deref()),
        (&malformed[..], p[1].as_deref()),
        (&records[2].envelope()[..], p[2].as_deref()),
        (&records[1].envelope()[..], None),
        (&records[3].envelope()[..], p[3].as_deref()),
        (&ping.envelope()[..], None),
        (&records[4].envelope()[..], p[4].as_deref()),
    ])
    .unwrap();
    let before = |r| node.counters().dropped(r);
    let (m0, f0, w0) = (
        before(DropReason::Malformed),
        node.counters().dropped_total(),
        before(DropReason::WrongConnection),
    );
    raw.send(LinkKind::Relay, &[&frame]);
    for seq in [0u64, 2, 3, 4] {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_deref(), Some(seq.to_string().as_bytes()));
        let Record::ActorSend(a) = &m.record else {
            panic!("{:?}", m.record)
        };
        assert_eq!(a.tail.session_sequence, seq.into());
    }
    // Handled in order on the I/O thread: the drops before the last record are counted.
    assert_eq!(
        before(DropReason::Malformed),
        m0 + 2,
        "the trailing byte, the missing payload part"
    );
    assert_eq!(before(DropReason::WrongConnection), w0 + 1);
    assert_eq!(node.counters().dropped_total(), f0 + 3);
    assert!(inbound.try_recv().is_none());
    still_serves(&node, &good, &mut inbound, "after-run").await;
}

// spec: SB-2.1 — a batch frame from an authenticated peer: every sub-record is validated like
// a record sent alone, a bad one (malformed, reserved 45, stale target generation, control
// inside a batch) is dropped and counted by itself and the good ones around it are delivered
// in order; a batch whose framing is broken is dropped whole, once, as `Malformed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_with_bad_sub_records_delivers_the_good_ones() {
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let raw = RawPeer::connect("rawbatch", &node);
    for kind in [LinkKind::Relay, LinkKind::Completion] {
        let o = raw.handshake(kind, "rawbatch", 5, SECRET);
        assert!(matches!(o, Some(Outcome::Established(_))), "{o:?}");
    }
    assert!(
        node.wait_peer_up(&NodeRid::new("rawbatch").unwrap(), None, WAIT)
            .await
            .is_some()
    );
    let one_way = |tag: &'static [u8]| {
        zlink_wire::encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(1),
            }),
            CorrelationId::NONE,
            Some(Bytes::from_static(tag)),
        )
        .unwrap()
    };
    let (a, c) = (one_way(b"a"), one_way(b"c"));
    let mut malformed = a.envelope().to_vec();
    malformed.push(0xc0); // trailing byte after the body
    let mut reserved = a.envelope().to_vec();
    reserved[1] = 45;
    let stale = zlink_wire::encode(
        &Record::ActorCall(zlink_wire::ActorCall {
            actor: zlink_wire::ActorId::new("x").unwrap(),
            object_generation: zlink_wire::ObjectGeneration::new(1),
            authority_owner_generation: zlink_wire::AuthorityOwnerGeneration::new(1),
            owner_lease_generation: zlink_wire::OwnerLeaseGeneration::new(1),
            target_node_generation: NodeGeneration::new(node.generation().get() ^ 1),
            key: DispatchKey::new(1),
            deadline: None,
        }),
        CorrelationId::NONE,
        Some(Bytes::from_static(b"stale")),
    )
    .unwrap();
    let ping = zlink_wire::encode(
        &Record::Ping(zlink_wire::Ping { seq: 1 }),
        CorrelationId::NONE,
        None,
    )
    .unwrap();
    let payload = |f: &zlink_wire::Frames| f.payload().map(|p| p.to_vec());
    let frame = zlink_wire::encode_batch([
        (&a.envelope()[..], payload(&a).as_deref()),
        (&malformed[..], Some(&b"m"[..])),
        (&reserved[..], Some(&b"r"[..])),
        (&stale.envelope()[..], payload(&stale).as_deref()),
        (&ping.envelope()[..], None),
        (&c.envelope()[..], payload(&c).as_deref()),
    ])
    .unwrap();
    let before = |r| node.counters().dropped(r);
    let (m0, r0, s0, w0) = (
        before(DropReason::Malformed),
        before(DropReason::ReservedCommand),
        before(DropReason::StaleGeneration),
        before(DropReason::WrongConnection),
    );
    raw.send(LinkKind::Relay, &[&frame]);
    for tag in [&b"a"[..], b"c"] {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_deref(), Some(tag));
        assert_eq!(
            m.origin,
            zlink_mesh::Origin::Peer {
                node: NodeRid::new("rawbatch").unwrap(),
                generation: NodeGeneration::new(5)
            }
        );
    }
    // The sub-records are handled in order on the I/O thread, so the drops before "c" are
    // counted by the time "c" arrived.
    assert_eq!(before(DropReason::Malformed), m0 + 1);
    assert_eq!(before(DropReason::ReservedCommand), r0 + 1);
    assert_eq!(before(DropReason::StaleGeneration), s0 + 1);
    assert_eq!(before(DropReason::WrongConnection), w0 + 1);
    assert!(inbound.try_recv().is_none());

    // Broken framing (3 records declared, 1 present): the whole frame is dropped, once; the
    // valid record inside it is not delivered. A lone record sent after it arrives next.
    let mut broken = zlink_wire::encode_batch([(&a.envelope()[..], payload(&a).as_deref())])
        .unwrap()
        .to_vec();
    broken[zlink_wire::HEADER_LEN..zlink_wire::HEADER_LEN + 4].copy_from_slice(&3u32.to_be_bytes());
    raw.send(LinkKind::Relay, &[&broken]);
    // A batch nested in a batch is broken framing too (the encoder refuses to build one).
    assert!(zlink_wire::encode_batch([(&frame[..], None)]).is_err());
    let mut nested = broken[..zlink_wire::HEADER_LEN].to_vec();
    nested.extend_from_slice(&1u32.to_be_bytes());
    nested.push(1);
    nested.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    nested.extend_from_slice(&frame);
    raw.send(LinkKind::Relay, &[&nested]);
    raw.send_record(
        LinkKind::Relay,
        &Record::OneWay(OneWay {
            key: DispatchKey::new(1),
        }),
        0,
        Some(Bytes::from_static(b"after")),
    );
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload.as_deref(), Some(&b"after"[..]));
    assert_eq!(before(DropReason::Malformed), m0 + 3);

    // Replies batched on the completion connection: the node's request to the raw peer ends
    // with the batched reply; a reply for a correlation never issued, in the same batch, is
    // dropped alone (`UnknownReply`).
    let unknown0 = before(DropReason::UnknownReply);
    let rawbatch = NodeRid::new("rawbatch").unwrap();
    // The raw peer grants the node credit for relay data (as a mesh node does on peer up).
    raw.send_record(
        LinkKind::Completion,
        &Record::FlowCredit(zlink_wire::FlowCredit {
            messages: 4,
            bytes: 1 << 20,
        }),
        0,
        None,
    );
    let call = node.request(
        &rawbatch,
        DispatchKey::new(3),
        Bytes::from_static(b"q"),
        WAIT,
    );
    let answer = async {
        let parts = tokio::task::block_in_place(|| {
            raw.recv(LinkKind::Relay, Instant::now() + WAIT)
                .expect("request reaches the raw peer")
        });
        let bytes: Vec<Bytes> = parts.into_iter().map(Bytes::from).collect();
        let d = zlink_wire::decode(&bytes, &zlink_wire::Limits::DEFAULT).unwrap();
        let corr = d.header.correlation;
        let reply = |c: CorrelationId| {
            zlink_wire::encode(
                &Record::Reply(zlink_wire::Reply),
                c,
                Some(Bytes::from_static(b"r")),
            )
            .unwrap()
        };
        let (mine, other) = (reply(corr), reply(CorrelationId::new(999_999)));
        let batch = zlink_wire::encode_batch([
            (&other.envelope()[..], Some(&b"r"[..])),
            (&mine.envelope()[..], Some(&b"r"[..])),
        ])
        .unwrap();
        raw.send(LinkKind::Completion, &[&batch]);
    };
    let (r, ()) = tokio::join!(call, answer);
    assert_eq!(r.unwrap().payload.as_deref(), Some(&b"r"[..]));
    assert_eq!(before(DropReason::UnknownReply), unknown0 + 1);
    still_serves(&node, &good, &mut inbound, "after-batches").await;
    node.shutdown().await;
    good.shutdown().await;
}

// spec: SB-2.1, EG-1.2, EG-4 — one 139 frame from an authenticated peer carrying runs of
// byte-identical one-way records (the receiver's fast path for repeated 147s) with the key
// changing between runs: every record is delivered once, in order, with its own key, while
// credit is returned in the middle of the frame (window of 4). Then the same kind of frame
// while the application queue is full: what fits in the window is held and delivered in
// order, the excess is dropped as `CreditExceeded`, exactly as for records sent alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_repeated_one_ways_are_checked_like_lone_ones() {
    let window = zlink_mesh::InboundWindow {
        messages: 4,
        bytes: 1 << 20,
    };
    let one_way = |key: u32, i: u8| {
        zlink_wire::encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(key),
            }),
            CorrelationId::NONE,
            Some(Bytes::from(vec![i])),
        )
        .unwrap()
    };
    let key_of = |i: u8| if (i / 7) % 2 == 0 { 1 } else { 2 };
    for (capacity, n, delivered) in [(4096usize, 40u8, 40u8), (1, 10, 5)] {
        let mut c = config("fastpath");
        c.inbound_capacity = capacity;
        c.peer_window = window;
        let (node, mut inbound) = MeshNode::start(c).unwrap();
        let raw = RawPeer::connect("repeater", &node);
        for kind in [LinkKind::Relay, LinkKind::Completion] {
            assert!(matches!(
                raw.handshake(kind, "repeater", 1, SECRET),
                Some(Outcome::Established(_))
            ));
        }
        assert!(
            node.wait_peer_up(&NodeRid::new("repeater").unwrap(), None, WAIT)
                .await
                .is_some()
        );
        let records: Vec<_> = (0..n).map(|i| one_way(key_of(i), i)).collect();
        let frame = zlink_wire::encode_batch(
            records
                .iter()
                .map(|r| (&r.envelope()[..], r.payload().map(|p| &p[..]))),
        )
        .unwrap();
        raw.send(LinkKind::Relay, &[&frame]);
        if delivered < n {
            eventually("excess dropped", || {
                node.counters().dropped(DropReason::CreditExceeded) == u64::from(n - delivered)
            })
            .await;
        }
        for i in 0..delivered {
            let m = tokio::time::timeout(WAIT, inbound.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(m.payload.as_deref(), Some(&[i][..]), "in order");
            assert_eq!(
                m.record,
                Record::OneWay(OneWay {
                    key: DispatchKey::new(key_of(i))
                })
            );
            assert_eq!(
                m.origin,
                zlink_mesh::Origin::Peer {
                    node: NodeRid::new("repeater").unwrap(),
                    generation: NodeGeneration::new(1)
                }
            );
        }
        assert!(inbound.try_recv().is_none());
        assert_eq!(
            node.counters().dropped(DropReason::CreditExceeded),
            u64::from(n - delivered)
        );
        assert_eq!(
            node.counters().dropped_total(),
            u64::from(n - delivered),
            "nothing else dropped"
        );
        node.shutdown().await;
    }
}

/// FlowCredit with the largest values the wire allows, twice (a `u64 +=` would overflow).
fn extreme_credit() -> Record {
    Record::FlowCredit(zlink_wire::FlowCredit {
        messages: u32::MAX,
        bytes: u64::MAX,
    })
}

// spec: SB-2.1 — wire arithmetic saturates: an authenticated peer granting the largest credit
// twice neither panics nor wraps the node's I/O thread; the node keeps sending to it and
// serving its good peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_flow_credit_from_a_peer_saturates() {
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let raw = RawPeer::connect("generous", &node);
    for kind in [LinkKind::Relay, LinkKind::Completion] {
        let o = raw.handshake(kind, "generous", 1, SECRET);
        assert!(matches!(o, Some(Outcome::Established(_))), "{o:?}");
    }
    let generous = NodeRid::new("generous").unwrap();
    assert!(node.wait_peer_up(&generous, None, WAIT).await.is_some());
    raw.send_record(LinkKind::Completion, &extreme_credit(), 0, None);
    raw.send_record(LinkKind::Completion, &extreme_credit(), 0, None);
    for i in 0..3u8 {
        node.send(&generous, DispatchKey::new(5), Bytes::from(vec![i]))
            .await
            .unwrap();
    }
    let until = Instant::now() + WAIT;
    let mut got = Vec::new();
    while got.len() < 3 {
        let parts = raw
            .recv(LinkKind::Relay, until)
            .expect("relay data after the credit");
        let bytes: Vec<Bytes> = parts.into_iter().map(Bytes::from).collect();
        if zlink_wire::is_batch(&bytes[0]) {
            let batch = zlink_wire::BatchFrame::parse(bytes[0].clone()).unwrap();
            for r in batch.records() {
                got.push(r.payload.unwrap().to_vec());
            }
        } else {
            got.push(bytes[1].to_vec());
        }
    }
    assert_eq!(got, vec![vec![0], vec![1], vec![2]]);
    still_serves(&node, &good, &mut inbound, "after-extreme-credit").await;
    node.shutdown().await;
    good.shutdown().await;
}

// spec: SB-2.1 — the client side too: a node granting the largest credit twice; the client's
// I/O thread neither panics nor wraps and keeps sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_flow_credit_to_a_client_saturates() {
    let ctx = zmq::Context::new();
    let fake_node = ctx.socket(zmq::ROUTER).unwrap();
    fake_node.set_linger(0).unwrap();
    fake_node.set_rcvtimeo(20_000).unwrap();
    fake_node.bind("tcp://127.0.0.1:*").unwrap();
    let ep = fake_node.get_last_endpoint().unwrap().unwrap();
    let mut cc = zlink_mesh::ClientConfig::new(ep);
    cc.liveness = config("x").liveness;
    let client = zlink_mesh::MeshClient::connect(cc).unwrap();
    // The client's first message (a Ping) tells its routing id.
    let first = fake_node.recv_multipart(0).expect("the client speaks");
    let rid = first[0].clone();
    let credit = zlink_wire::encode(&extreme_credit(), CorrelationId::NONE, None)
        .unwrap()
        .into_vec();
    for _ in 0..2 {
        fake_node.send(&rid[..], zmq::SNDMORE).unwrap();
        fake_node.send(&credit[0][..], 0).unwrap();
    }
    client
        .send(DispatchKey::new(3), Bytes::from_static(b"still-here"))
        .await
        .unwrap();
    loop {
        let m = fake_node.recv_multipart(0).expect("the DATA record");
        let bytes: Vec<Bytes> = m[1..].iter().cloned().map(Bytes::from).collect();
        let d = zlink_wire::decode(&bytes, &zlink_wire::Limits::DEFAULT).unwrap();
        if matches!(d.record, Record::OneWay(_)) {
            assert_eq!(d.payload.as_deref(), Some(&b"still-here"[..]));
            break;
        }
    }
    client.close().await;
}

// spec: SB-2.1 — one source address cannot take every handshake slot: past
// `max_pending_handshakes_per_source` its Hellos start nothing (`SourceCapacity`), while
// the total bound is not reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_handshakes_are_bounded_per_source() {
    let mut c = config("victim");
    c.max_pending_handshakes = 64;
    c.max_pending_handshakes_per_source = 4;
    let (node, _inbound) = MeshNode::start(c).unwrap();
    let hello = |n: &str| {
        Record::Hello(zlink_wire::Hello {
            mesh: MeshName::new("test").unwrap(),
            node: NodeRid::new(n).unwrap(),
            generation: NodeGeneration::new(1),
            nonce: [1; 32],
        })
    };
    let flood: Vec<RawPeer> = (0..10)
        .map(|i| RawPeer::connect(&format!("src-{i}"), &node))
        .collect();
    for (i, p) in flood.iter().enumerate() {
        p.send_record(LinkKind::Relay, &hello(&format!("src-{i}")), 0, None);
    }
    eventually("per-source bound enforced", || {
        node.counters().dropped(DropReason::SourceCapacity) >= 6
    })
    .await;
    assert_eq!(node.counters().dropped(DropReason::HandshakeCapacity), 0);
    node.shutdown().await;
}

// spec: SB-2.1 — the node's decode memo keeps the last repeated envelope it decoded, a peer's
// 36 (BoundSessionSend) included; a client that replays that envelope byte for byte is refused
// like any 36 from a client (`WrongConnection`): a memo hit is checked like a decoded record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_replaying_a_peers_bound_session_send_is_refused() {
    use zlink_wire::{
        ActorId, AuthorityOwnerGeneration, BindingGeneration, ObjectGeneration,
        SessionLifecycleGeneration, SessionRid,
    };
    let (node, mut inbound, good) = setup();
    link(&good, &node).await;
    let rec = Record::BoundSessionSend(zlink_wire::BoundSessionSend {
        actor: ActorId::new("user:42").unwrap(),
        object_generation: ObjectGeneration::new(3),
        source_node_generation: good.generation(),
        authority_owner_generation: AuthorityOwnerGeneration::new(4),
        session_lifecycle: SessionLifecycleGeneration::new(5),
        session: SessionRid::new(6),
        binding_generation: BindingGeneration::new(7),
        key: DispatchKey::new(8),
    });
    let payload = Bytes::from_static(b"from the peer");
    good.send_record(node.node(), rec.clone(), Some(payload.clone()))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.record, rec, "the peer's 36 goes up (and is memoized)");

    let ctx = zmq::Context::new();
    let c = ctx.socket(zmq::DEALER).unwrap();
    c.set_linger(0).unwrap();
    c.connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    let wrong = node.counters().dropped(DropReason::WrongConnection);
    let f = zlink_wire::encode(&rec, CorrelationId::NONE, Some(payload))
        .unwrap()
        .into_vec();
    c.send_multipart(f.iter().map(|b| &b[..]), 0).unwrap();
    eventually("the replayed 36 is refused", || {
        node.counters().dropped(DropReason::WrongConnection) > wrong
    })
    .await;
    // The same client's one-way DATA still goes up, alone.
    let data = Record::OneWay(OneWay {
        key: DispatchKey::new(1),
    });
    let f = zlink_wire::encode(
        &data,
        CorrelationId::NONE,
        Some(Bytes::from_static(b"data")),
    )
    .unwrap()
    .into_vec();
    c.send_multipart(f.iter().map(|b| &b[..]), 0).unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.record, data, "nothing but the client's one-way went up");
    assert!(inbound.try_recv().is_none());
    node.shutdown().await;
    good.shutdown().await;
}
