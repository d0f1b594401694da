//! Natural batching on the ClientServer connection: requests and one-way DATA queued in one
//! pass of the client's I/O thread travel as one 139 batch frame, and so do the pushes and
//! replies a node queued for one client in one pass; every record still arrives exactly once
//! and in order, a lone record travels alone, and both ends check every sub-record exactly like
//! a record received alone (bad ones dropped and counted by themselves, the good ones around
//! them delivered).
//!
//! spec: SB-14.7 (contract asserted on real wire traffic via the tap), EG-4 (order per
//! connection), SB-2.1 (validated once at ingress, each batched record like a lone one),
//! SB-14.26 (45 never accepted), SB-5.4 (control records travel alone), EG-1.2 (receive
//! window charged per record), EG-16.26 (exactly one terminal per request).

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{self, CorrelationId, OneWay};
use zlink_mesh::{
    ClientConfig, DispatchKey, DropReason, LinkKind, MeshClient, MeshNode, Origin, Record,
    SendError, TapDirection, TapFrame, WireTap,
};

fn payload(i: u32) -> Bytes {
    let mut p = vec![0u8; 64];
    p[..4].copy_from_slice(&i.to_be_bytes());
    Bytes::from(p)
}

fn index(p: &[u8]) -> u32 {
    u32::from_be_bytes(p[..4].try_into().unwrap())
}

fn client_frames(tap: &WireTap, direction: TapDirection) -> Vec<TapFrame> {
    tap.frames()
        .into_iter()
        .filter(|f| f.direction == direction && f.link == LinkKind::Client)
        .collect()
}

fn client_config(endpoint: String) -> ClientConfig {
    let mut c = ClientConfig::new(endpoint);
    c.liveness = config("x").liveness;
    c
}

fn server(tap: Option<WireTap>) -> (MeshNode, zlink_mesh::InboundReceiver) {
    let mut c = config("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.tap = tap;
    MeshNode::start(c).unwrap()
}

fn encode(record: Record, corr: u64, payload: Option<&'static [u8]>) -> zlink_wire::Frames {
    zlink_wire::encode(
        &record,
        CorrelationId::new(corr),
        payload.map(Bytes::from_static),
    )
    .unwrap()
}

fn one_way(tag: &'static [u8]) -> zlink_wire::Frames {
    encode(
        Record::OneWay(OneWay {
            key: DispatchKey::new(1),
        }),
        0,
        Some(tag),
    )
}

fn push(tag: &'static [u8]) -> zlink_wire::Frames {
    encode(
        Record::Push(zlink_wire::Push {
            key: DispatchKey::new(2),
        }),
        0,
        Some(tag),
    )
}

/// Sub-records no receiver may accept, each next to good ones: (envelope, payload, reason).
/// A trailing byte after the body, the reserved command 45, an unknown command number, an
/// envelope over the decoder's limit (64 KiB; the frame itself is within the message size).
fn bad_sub_records(good: &zlink_wire::Frames) -> Vec<(Vec<u8>, Option<Vec<u8>>, DropReason)> {
    let mut malformed = good.envelope().to_vec();
    malformed.push(0xc0);
    let mut reserved = good.envelope().to_vec();
    reserved[1] = 45;
    let mut unknown = good.envelope().to_vec();
    unknown[1] = 250;
    let mut oversized = good.envelope().to_vec();
    oversized.resize(70 * 1024, 0xc0);
    let p = good.payload().map(|p| p.to_vec());
    vec![
        (malformed, p.clone(), DropReason::Malformed),
        (reserved, p.clone(), DropReason::ReservedCommand),
        (unknown, p.clone(), DropReason::UnknownCommand),
        (oversized, p, DropReason::Malformed),
    ]
}

/// A batch frame whose declared count is larger than what it carries (broken framing).
fn broken_batch(good: &zlink_wire::Frames) -> Vec<u8> {
    let mut broken =
        zlink_wire::encode_batch([(&good.envelope()[..], good.payload().map(|p| &p[..]))])
            .unwrap()
            .to_vec();
    broken[zlink_wire::HEADER_LEN..zlink_wire::HEADER_LEN + 4].copy_from_slice(&3u32.to_be_bytes());
    broken
}

// spec: SB-14.7, EG-4 — a flood of one-way DATA from a client: the records the client queued
// leave as 139 batch frames (seen on the node's tap), every record is on the wire exactly once
// and the node's application gets each exactly once, in send order; afterwards a lone record
// travels alone. Deterministic: the node starts only after the client queued the whole flood,
// so the records wait in the client for the session's first credit and leave together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_flood_travels_batched_once_and_in_order() {
    // below the ephemeral range: the client dials it before the node binds it
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let client = MeshClient::connect(client_config(endpoint.clone())).unwrap();
    const N: u32 = 300;
    for i in 0..N {
        client.send(DispatchKey::new(1), payload(i)).await.unwrap();
    }
    let tap = WireTap::new(10_000);
    let mut c = config("srv");
    c.client_endpoint = Some(endpoint);
    c.tap = Some(tap.clone());
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let mut session = None;
    for i in 0..N {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(index(m.payload.as_deref().unwrap()), i, "in send order");
        let Origin::Client { session: s } = m.origin else {
            panic!("not a client origin: {:?}", m.origin)
        };
        assert_eq!(*session.get_or_insert(s), s, "one session");
        assert!(m.reply.is_none());
    }
    // Recorded by the node's I/O thread before it handed the records up.
    let received = client_frames(&tap, TapDirection::Received);
    let batches = received.iter().filter(|f| f.command() == Some(139)).count();
    assert!(batches >= N as usize / 64, "{batches} batch frames");
    let data: Vec<&TapFrame> = received
        .iter()
        .filter(|f| f.command() == Some(147))
        .collect();
    assert_eq!(
        data.iter().map(|f| index(&f.frames[1])).collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>(),
        "every record on the wire exactly once, in order"
    );
    // The first record may leave alone: the first send wakes the client's I/O thread, which
    // hands what is queued at that moment to libzmq at once (nothing waits for a batch to
    // fill); every later one was queued behind it and left in a batch.
    let alone: Vec<usize> = data
        .iter()
        .enumerate()
        .filter(|(_, f)| f.batch.is_none())
        .map(|(i, _)| i)
        .collect();
    assert!(
        alone.is_empty() || alone == [0],
        "the queued flood left in batches; alone: {alone:?}"
    );

    // A lone record is sent alone (nothing waits for a batch to fill).
    client.send(DispatchKey::new(1), payload(N)).await.unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(index(m.payload.as_deref().unwrap()), N);
    let last = client_frames(&tap, TapDirection::Received)
        .into_iter()
        .rfind(|f| f.command() == Some(147))
        .unwrap();
    assert_eq!(index(&last.frames[1]), N);
    assert_eq!(last.batch, None, "a lone record travels alone");
    assert!(inbound.try_recv().is_none(), "nothing arrives twice");
    assert_eq!(node.counters().dropped(DropReason::CreditExceeded), 0);
    client.close().await;
    node.shutdown().await;
}

// spec: SB-14.7, EG-4, EG-16.26 — pushes and a reply the node queued for one client in one
// pass (its I/O thread held meanwhile) leave as 139 batch frames; the client, whose push
// channel holds only 4, stops in the middle of a batch and resumes there: every push arrives
// exactly once and in order, the reply completes its request exactly once, in its place
// behind the pushes sent before it; afterwards a lone push travels alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_and_replies_travel_batched_once_and_in_order() {
    let tap = WireTap::new(10_000);
    let (node, mut inbound) = server(Some(tap.clone()));
    let mut cc = client_config(node.endpoints().client.clone().unwrap());
    cc.push_capacity = 4;
    let client_tap = WireTap::new(10_000);
    cc.tap = Some(client_tap.clone());
    let client = std::sync::Arc::new(MeshClient::connect(cc).unwrap());
    let requester = client.clone();
    let request = tokio::spawn(async move {
        requester
            .request(DispatchKey::new(3), Bytes::from_static(b"q"), WAIT)
            .await
    });
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    let Origin::Client { session } = m.origin else {
        panic!("not a client origin: {:?}", m.origin)
    };
    let reply = m.reply.expect("a request");
    const N: u32 = 300;
    {
        let _hold = node.hold_io_for_tests();
        for i in 0..N / 2 {
            node.push(session, DispatchKey::new(2), payload(i))
                .await
                .unwrap();
        }
        reply.reply(Bytes::from_static(b"answer"));
        for i in N / 2..N {
            node.push(session, DispatchKey::new(2), payload(i))
                .await
                .unwrap();
        }
    }
    for i in 0..N {
        let p = client.recv_push_timeout(WAIT).await.expect("push");
        assert_eq!(index(p.payload.as_deref().unwrap()), i, "in push order");
    }
    let r = tokio::time::timeout(WAIT, request)
        .await
        .unwrap()
        .unwrap()
        .expect("the reply completes the request");
    assert_eq!(r.payload.as_deref(), Some(&b"answer"[..]));
    // The client's tap (recorded before its I/O thread handled each message): pushes
    // 0..N/2, the reply, pushes N/2..N — each once, in batches.
    let received = client_frames(&client_tap, TapDirection::Received);
    assert!(
        received.iter().any(|f| f.command() == Some(139)),
        "batch frames to the client"
    );
    let records: Vec<(u8, Option<u32>, bool)> = received
        .iter()
        .filter(|f| matches!(f.command(), Some(145 | 148)))
        .map(|f| {
            let i = (f.command() == Some(148)).then(|| index(&f.frames[1]));
            (f.command().unwrap(), i, f.batch.is_some())
        })
        .collect();
    let mut expected: Vec<(u8, Option<u32>)> = (0..N / 2).map(|i| (148, Some(i))).collect();
    expected.push((145, None));
    expected.extend((N / 2..N).map(|i| (148, Some(i))));
    assert_eq!(
        records.iter().map(|&(c, i, _)| (c, i)).collect::<Vec<_>>(),
        expected,
        "every push and the reply on the wire exactly once, in order"
    );
    assert!(
        records.iter().all(|&(_, _, batched)| batched),
        "queued in one pass: all batched"
    );

    // A lone push is sent alone.
    node.push(session, DispatchKey::new(2), payload(N))
        .await
        .unwrap();
    let p = client.recv_push_timeout(WAIT).await.expect("push");
    assert_eq!(index(p.payload.as_deref().unwrap()), N);
    let last = client_frames(&client_tap, TapDirection::Received)
        .into_iter()
        .rfind(|f| f.command() == Some(148))
        .unwrap();
    assert_eq!(index(&last.frames[1]), N);
    assert_eq!(last.batch, None, "a lone push travels alone");
    assert_eq!(client.counters().dropped(DropReason::LateReply), 0);
    assert_eq!(client.counters().dropped(DropReason::UnknownReply), 0);
    // The node's tap saw the same: batches sent to the client.
    assert!(
        client_frames(&tap, TapDirection::Sent)
            .iter()
            .any(|f| f.command() == Some(139))
    );
    node.shutdown().await;
}

// spec: SB-2.1, SB-14.26, SB-5.4 — a batch frame from a client (a raw ZeroMQ DEALER): every
// sub-record is checked like a record sent alone; a bad one (malformed, reserved 45, unknown
// command, oversized envelope, a control record or a node-only record inside a batch) is
// dropped and counted by itself and the good ones around it are delivered in order; a batch
// whose framing is broken is dropped whole, once, as `Malformed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_batch_with_bad_sub_records_delivers_the_good_ones() {
    let (node, mut inbound) = server(None);
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    let (a, c) = (one_way(b"a"), one_way(b"c"));
    let ping = encode(Record::Ping(zlink_wire::Ping { seq: 1 }), 0, None);
    let from_node = push(b"p");
    let bad = bad_sub_records(&a);
    let mut subs: Vec<(&[u8], Option<&[u8]>)> =
        vec![(&a.envelope()[..], a.payload().map(|p| &p[..]))];
    for (envelope, payload, _) in &bad {
        subs.push((envelope, payload.as_deref()));
    }
    subs.push((&ping.envelope()[..], None));
    subs.push((
        &from_node.envelope()[..],
        from_node.payload().map(|p| &p[..]),
    ));
    subs.push((&c.envelope()[..], c.payload().map(|p| &p[..])));
    let frame = zlink_wire::encode_batch(subs).unwrap();
    let count = |r| node.counters().dropped(r);
    let reasons = [
        DropReason::Malformed,
        DropReason::ReservedCommand,
        DropReason::UnknownCommand,
        DropReason::WrongConnection,
    ];
    let before: Vec<u64> = reasons.iter().map(|&r| count(r)).collect();
    raw.send(&frame[..], 0).unwrap();
    let mut session = None;
    for tag in [&b"a"[..], b"c"] {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_deref(), Some(tag));
        let Origin::Client { session: s } = m.origin else {
            panic!("not a client origin: {:?}", m.origin)
        };
        assert_eq!(*session.get_or_insert(s), s);
    }
    // The sub-records are handled in order on the I/O thread: the drops before "c" are counted
    // by the time "c" arrived.
    let expected_extra = [2, 1, 1, 2]; // 2 malformed (trailing byte, oversized); ping + push
    for ((&r, b), extra) in reasons.iter().zip(&before).zip(expected_extra) {
        assert_eq!(count(r), b + extra, "{r:?}");
    }
    assert!(inbound.try_recv().is_none());

    // Broken framing, and a batch nested in a batch: each frame dropped whole, once. A lone
    // record sent after them arrives next.
    raw.send(&broken_batch(&a)[..], 0).unwrap();
    let mut nested = frame[..zlink_wire::HEADER_LEN].to_vec();
    nested.extend_from_slice(&1u32.to_be_bytes());
    nested.push(1);
    nested.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    nested.extend_from_slice(&frame);
    raw.send(&nested[..], 0).unwrap();
    let after = one_way(b"after");
    raw.send(&after.envelope()[..], zmq::SNDMORE).unwrap();
    raw.send(&after.payload().unwrap()[..], 0).unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload.as_deref(), Some(&b"after"[..]));
    assert_eq!(count(DropReason::Malformed), before[0] + 4);
    assert!(inbound.try_recv().is_none());
    node.shutdown().await;
}

// spec: SB-2.1, EG-1.2 — a client ignoring its receive window inside a batch: each sub-record
// is charged on its own, the excess is dropped and counted (`CreditExceeded`), never held or
// passed up; every record is either delivered once or counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_batch_beyond_the_window_is_dropped_per_record() {
    let mut c = config("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.inbound_capacity = 1;
    c.client_window = zlink_mesh::InboundWindow {
        messages: 4,
        bytes: 1 << 20,
    };
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    const N: usize = 10;
    let records: Vec<zlink_wire::Frames> = (0..N as u32)
        .map(|i| {
            zlink_wire::encode(
                &Record::OneWay(OneWay {
                    key: DispatchKey::new(1),
                }),
                CorrelationId::NONE,
                Some(payload(i)),
            )
            .unwrap()
        })
        .collect();
    let frame = zlink_wire::encode_batch(
        records
            .iter()
            .map(|f| (&f.envelope()[..], f.payload().map(|p| &p[..]))),
    )
    .unwrap();
    raw.send(&frame[..], 0).unwrap();
    // At most window (4) + application queue (1) are accepted before anything is taken; the
    // whole frame was handled in one go, so the drops are counted once the first record is up.
    let first = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(index(first.payload.as_deref().unwrap()), 0);
    let dropped = node.counters().dropped(DropReason::CreditExceeded) as usize;
    assert!(dropped >= N - 5, "{dropped} dropped");
    let mut got = vec![0];
    while got.len() + dropped < N {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        got.push(index(m.payload.as_deref().unwrap()));
    }
    assert_eq!(
        got,
        (0..got.len() as u32).collect::<Vec<_>>(),
        "the accepted ones, in order"
    );
    assert_eq!(
        node.counters().dropped(DropReason::CreditExceeded) as usize,
        dropped
    );
    assert!(inbound.try_recv().is_none(), "nothing arrives twice");
    node.shutdown().await;
}

// spec: SB-2.1, SB-14.26, SB-5.4, EG-16.26 — a batch frame from the node side (a raw ZeroMQ
// ROUTER standing in for a node): the client decodes every sub-record with the checks of a
// record received alone; a bad one (malformed, reserved 45, unknown command, oversized
// envelope, a control record inside a batch, a reply for a request never issued) is dropped
// and counted by itself, the pushes around it are delivered in order; a batch whose framing is
// broken is dropped whole, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_checks_every_sub_record_of_a_batch() {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER).unwrap();
    router.set_linger(0).unwrap();
    router.set_rcvtimeo(WAIT.as_millis() as i32).unwrap();
    router.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = router.get_last_endpoint().unwrap().unwrap();
    let client = MeshClient::connect(client_config(endpoint)).unwrap();
    // The client's first Ping names its routing id.
    let first = router.recv_multipart(0).expect("the client's first ping");
    let id = first[0].clone();
    let (a, c) = (push(b"a"), push(b"c"));
    let pong = encode(Record::Pong(zlink_wire::Pong { seq: 1 }), 0, None);
    let credit = encode(
        Record::FlowCredit(zlink_wire::FlowCredit {
            messages: 1,
            bytes: 1,
        }),
        0,
        None,
    );
    let stray_reply = encode(Record::Reply(zlink_wire::Reply), 999, Some(b"r"));
    let bad = bad_sub_records(&a);
    let mut subs: Vec<(&[u8], Option<&[u8]>)> =
        vec![(&a.envelope()[..], a.payload().map(|p| &p[..]))];
    for (envelope, payload, _) in &bad {
        subs.push((envelope, payload.as_deref()));
    }
    subs.push((&pong.envelope()[..], None));
    subs.push((&credit.envelope()[..], None));
    subs.push((
        &stray_reply.envelope()[..],
        stray_reply.payload().map(|p| &p[..]),
    ));
    subs.push((&c.envelope()[..], c.payload().map(|p| &p[..])));
    let frame = zlink_wire::encode_batch(subs).unwrap();
    let count = |r| client.counters().dropped(r);
    let reasons = [
        DropReason::Malformed,
        DropReason::ReservedCommand,
        DropReason::UnknownCommand,
        DropReason::WrongConnection,
        DropReason::UnknownReply,
    ];
    let before: Vec<u64> = reasons.iter().map(|&r| count(r)).collect();
    router.send(&id[..], zmq::SNDMORE).unwrap();
    router.send(&frame[..], 0).unwrap();
    for tag in [&b"a"[..], b"c"] {
        let p = client.recv_push_timeout(WAIT).await.expect("push");
        assert_eq!(p.payload.as_deref(), Some(tag));
    }
    // Handled in order on the client's I/O thread: counted by the time "c" arrived.
    let expected_extra = [2, 1, 1, 2, 1]; // malformed + oversized; Pong + FlowCredit in a batch
    for ((&r, b), extra) in reasons.iter().zip(&before).zip(expected_extra) {
        assert_eq!(count(r), b + extra, "{r:?}");
    }

    // Broken framing: dropped whole, once; a lone push after it arrives next.
    router.send(&id[..], zmq::SNDMORE).unwrap();
    router.send(&broken_batch(&a)[..], 0).unwrap();
    let after = push(b"after");
    router.send(&id[..], zmq::SNDMORE).unwrap();
    router.send(&after.envelope()[..], zmq::SNDMORE).unwrap();
    router.send(&after.payload().unwrap()[..], 0).unwrap();
    let p = client.recv_push_timeout(WAIT).await.expect("push");
    assert_eq!(p.payload.as_deref(), Some(&b"after"[..]));
    assert_eq!(count(DropReason::Malformed), before[0] + 3);
    assert!(
        client
            .recv_push_timeout(Duration::from_millis(0))
            .await
            .is_none(),
        "nothing else was delivered"
    );
    client.close().await;
}

// spec: EG-1.2 — batch limits are bounded: a client asking for more records per batch frame
// than the wire allows is a configuration error, not a silent loss.
#[test]
fn client_rejects_a_batch_limit_beyond_the_wire() {
    let mut c = client_config("tcp://127.0.0.1:1".into());
    c.batching.max_records = zlink_wire::MAX_BATCH_RECORDS as usize + 1;
    assert!(matches!(
        MeshClient::connect(c),
        Err(zlink_mesh::ConfigError::InvalidLimit(_))
    ));
}

// spec: SB-2.1, EG-1.2, EG-4 — runs of repeated one-way records in one client batch frame (the
// node's fast path for byte-identical envelopes) are checked like lone ones: runs of two keys
// arrive in order with their own key; with a window of 4 credit is returned in the middle of
// the frame and nothing is dropped; against a full application queue the window is charged
// per record and the excess dropped and counted, the rest delivered in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_batched_repeated_one_ways_are_checked_like_lone_ones() {
    let keyed = |key: u32, i: u32| {
        zlink_wire::encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(key),
            }),
            CorrelationId::NONE,
            Some(payload(i)),
        )
        .unwrap()
    };
    let frame_of = |records: &[zlink_wire::Frames]| {
        zlink_wire::encode_batch(
            records
                .iter()
                .map(|f| (&f.envelope()[..], f.payload().map(|p| &p[..]))),
        )
        .unwrap()
    };
    for capacity in [4096, 1] {
        let mut c = config("srv");
        c.client_endpoint = Some("tcp://127.0.0.1:*".into());
        c.inbound_capacity = capacity;
        c.client_window = zlink_mesh::InboundWindow {
            messages: 4,
            bytes: 1 << 20,
        };
        let (node, mut inbound) = MeshNode::start(c).unwrap();
        let ctx = zmq::Context::new();
        let raw = ctx.socket(zmq::DEALER).unwrap();
        raw.set_linger(0).unwrap();
        raw.connect(node.endpoints().client.as_ref().unwrap())
            .unwrap();
        // keys 1,1,1,1,2,2,2,1,1,1,1,1
        let keys = [1u32, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1];
        let records: Vec<zlink_wire::Frames> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| keyed(k, i as u32))
            .collect();
        raw.send(&frame_of(&records)[..], 0).unwrap();
        let mut got = Vec::new();
        let first = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        // The whole frame was handled in one pass: every drop is counted by now.
        let dropped = node.counters().dropped(DropReason::CreditExceeded) as usize;
        got.push(first);
        while got.len() + dropped < keys.len() {
            got.push(
                tokio::time::timeout(WAIT, inbound.recv())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        let seen: Vec<(u32, u32)> = got
            .iter()
            .map(|m| {
                let Record::OneWay(o) = &m.record else {
                    panic!("not a one-way: {:?}", m.record)
                };
                (o.key.get(), index(m.payload.as_deref().unwrap()))
            })
            .collect();
        let expected: Vec<(u32, u32)> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, i as u32))
            .take(seen.len())
            .collect();
        assert_eq!(seen, expected, "delivered in order, each with its key");
        if capacity > 1 {
            // Credit returned after each record moved up (window 4, quarter 1): none dropped.
            assert_eq!(dropped, 0);
            assert_eq!(seen.len(), keys.len());
        } else {
            // 1 in the application queue + 4 held within the window; the rest dropped.
            assert_eq!(seen.len(), 5);
            assert_eq!(dropped, keys.len() - 5);
        }
        assert!(inbound.try_recv().is_none(), "nothing arrives twice");
        node.shutdown().await;
    }
}

// spec: EG-4, SB-12 — one-way DATA and requests handed to the client's I/O thread keep their
// submission order on the wire, and a request cancelled (its future dropped) before it was
// transmitted is never sent. Deterministic: the node starts only after the client queued
// everything, so nothing leaves before the session's first credit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_and_requests_keep_their_order_and_a_cancelled_request_never_leaves() {
    use futures::FutureExt;
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let client = MeshClient::connect(client_config(endpoint.clone())).unwrap();
    let data = DispatchKey::new(1);
    let req = DispatchKey::new(2);
    client.send(data, payload(0)).await.unwrap();
    // Polled once: admitted and handed over, then waiting for its reply.
    let mut kept = Box::pin(client.request(req, payload(1), WAIT));
    assert!(kept.as_mut().now_or_never().is_none());
    client.send(data, payload(2)).await.unwrap();
    let mut cancelled = Box::pin(client.request(req, payload(3), WAIT));
    assert!(cancelled.as_mut().now_or_never().is_none());
    drop(cancelled);
    client.send(data, payload(4)).await.unwrap();

    let (node, mut inbound) = {
        let mut c = config("srv");
        c.client_endpoint = Some(endpoint);
        MeshNode::start(c).unwrap()
    };
    let mut got = Vec::new();
    for _ in 0..4 {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        let i = index(m.payload.as_deref().unwrap());
        got.push(i);
        if let Some(r) = m.reply {
            r.reply(payload(i));
        }
    }
    assert_eq!(
        got,
        [0, 1, 2, 4],
        "in submission order, the cancelled request never sent"
    );
    let r = tokio::time::timeout(WAIT, kept).await.unwrap().unwrap();
    assert_eq!(index(r.payload.as_deref().unwrap()), 1);
    // The next record is the next one sent: the cancelled request did not follow late.
    client.send(data, payload(5)).await.unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(index(m.payload.as_deref().unwrap()), 5);
    client.close().await;
    node.shutdown().await;
}

// spec: EG-4, SB-6.5 — `send_many` sends the same records as one `send` per payload: more than
// a chunk of them arrive exactly once and in order; a payload over the message size stops the
// call after the records before it (reported as sent, and delivered), and nothing after it is
// sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_many_sends_in_order_and_stops_at_the_first_failure() {
    let (node, mut inbound) = server(None);
    let mut cfg = client_config(node.endpoints().client.clone().unwrap());
    cfg.transport.max_message_size = 1024;
    let client = MeshClient::connect(cfg).unwrap();
    let key = DispatchKey::new(1);
    let n = zlink_mesh::SEND_MANY_CHUNK as u32 * 2 + 10;
    client.send_many(key, (0..n).map(payload)).await.unwrap();
    for i in 0..n {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(index(m.payload.as_deref().unwrap()), i, "in send order");
    }

    let mut too_large = vec![0u8; 1025];
    too_large[..4].copy_from_slice(&u32::MAX.to_be_bytes());
    let batch = vec![
        payload(n),
        payload(n + 1),
        Bytes::from(too_large),
        payload(n + 2),
    ];
    let e = client.send_many(key, batch).await.unwrap_err();
    assert_eq!(e.sent, 2);
    assert!(
        matches!(
            e.error,
            SendError::TooLarge {
                size: 1025,
                max: 1024
            }
        ),
        "{e}"
    );
    client.send(key, payload(n + 3)).await.unwrap();
    for i in [n, n + 1, n + 3] {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            index(m.payload.as_deref().unwrap()),
            i,
            "nothing after the failure"
        );
    }
    client.close().await;
    node.shutdown().await;
}
