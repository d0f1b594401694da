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

/// An ActorCall to `actor-1` on a node of generation `target`.
fn call_to(target: zlink_mesh::NodeGeneration) -> zlink_mesh::Record {
    use zlink_mesh::zlink_wire::{ActorCall, ActorId};
    zlink_mesh::Record::ActorCall(ActorCall {
        actor: ActorId::new("actor-1").unwrap(),
        object_generation: 1.into(),
        authority_owner_generation: 1.into(),
        owner_lease_generation: 1.into(),
        target_node_generation: target,
        key: DispatchKey::new(3),
        deadline: None,
    })
}

// spec: SB-2.1, EG-1.2 — a record the receiver drops as addressed to another generation of
// itself gives its receive-window charge back (issue 26 item 2): more stale records than the
// whole window (one-ways, and requests answered `Unavailable`, alone and batched by the
// sender) leave the pair b → a serving; none is ever over the window. Without the release
// the window closed for good after 4,096 of them and every later send timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_generation_records_give_their_window_charge_back() {
    use zlink_mesh::{DropReason, InboundWindow, NodeGeneration};
    trace();
    let (a, mut ra) = start("sa");
    let (b, _rb) = start("sb");
    link(&a, &b).await;
    let window = u64::from(InboundWindow::default().messages);
    let stale = NodeGeneration::new(a.generation().get() - 1);
    let counters = a.counters();
    let dropped0 = counters.dropped(DropReason::StaleGeneration);
    // One-ways, more than the whole window: the sender's credit must come back.
    let one_ways = window + 512;
    for i in 0..one_ways {
        b.send_record(a.node(), call_to(stale), Some(Bytes::new()))
            .await
            .unwrap_or_else(|e| panic!("stale one-way {i}: {e:?}"));
    }
    // Requests, concurrently (batched by the sender): each answered `Unavailable`.
    let requests = 256u64;
    let answers = futures_join(&b, a.node(), call_to(stale), requests).await;
    for e in answers {
        assert_eq!(e, Some(zlink_mesh::ErrorKind::Unavailable));
    }
    eventually("every stale record counted", || {
        counters.dropped(DropReason::StaleGeneration) == dropped0 + one_ways + requests
    })
    .await;
    // The pair still serves: a call to the current generation is delivered.
    b.send_record(a.node(), call_to(a.generation()), Some(Bytes::new()))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, ra.recv())
        .await
        .expect("delivered after the stale flood")
        .unwrap();
    assert!(matches!(m.record, zlink_mesh::Record::ActorCall(ref c)
        if c.target_node_generation == a.generation()));
    assert_eq!(counters.dropped(DropReason::CreditExceeded), 0);
    a.shutdown().await;
    b.shutdown().await;
}

/// Sends `n` requests of `record` from `from` to `to` at once; the error kind of each answer.
async fn futures_join(
    from: &MeshNode,
    to: &zlink_mesh::NodeRid,
    record: zlink_mesh::Record,
    n: u64,
) -> Vec<Option<zlink_mesh::ErrorKind>> {
    futures::future::join_all((0..n).map(|_| {
        let record = record.clone();
        async move {
            from.request_record(to, record, Some(Bytes::new()), WAIT)
                .await
                .err()
                .map(|e| e.kind())
        }
    }))
    .await
}

// spec: SB-2.1, EG-1.2 — a client's counters resynchronise after records dropped over its
// window (issue 25, client document: `CreditExceeded` returned no credit, so a client that
// paid for a dropped record stayed short for ever): the node returns the cost of every record
// it received — delivered ones as they leave the window, dropped ones at once. A raw client
// that sends 20 one-ways into a 4-record window ends with exactly its window again, counted
// as the document says (grants added, each record's full cost subtracted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_of_records_dropped_over_the_window_comes_back() {
    use zlink_mesh::zlink_wire::{self, CorrelationId, FlowCredit, OneWay, Ping, Record};
    use zlink_mesh::{DropReason, InboundWindow};
    const WINDOW: InboundWindow = InboundWindow {
        messages: 4,
        bytes: 64 * 1024,
    };
    let mut c = config("cs");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.client_window = WINDOW;
    c.inbound_capacity = 1;
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.set_rcvtimeo(50).unwrap();
    raw.connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    // The client's counters, kept as docs/CLIENT-PROTOCOL.md 5.1 says (signed).
    let (mut msgs, mut bytes) = (0i64, 0i64);
    let read_grants = |raw: &zmq::Socket, msgs: &mut i64, bytes: &mut i64| {
        while let Ok(parts) = raw.recv_multipart(0) {
            let parts: Vec<Bytes> = parts.into_iter().map(Bytes::from).collect();
            match zlink_wire::decode(&parts, &zlink_wire::Limits::default())
                .unwrap()
                .record
            {
                Record::FlowCredit(FlowCredit { messages, bytes: b }) => {
                    *msgs += i64::from(messages);
                    *bytes += b as i64;
                }
                Record::Pong(_) => {}
                r => panic!("unexpected {r:?}"),
            }
        }
    };
    let ping =
        zlink_wire::encode(&Record::Ping(Ping { seq: 1 }), CorrelationId::NONE, None).unwrap();
    raw.send(&ping.envelope()[..], 0).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while msgs < i64::from(WINDOW.messages) {
        assert!(std::time::Instant::now() < deadline, "initial grant");
        read_grants(&raw, &mut msgs, &mut bytes);
    }
    assert_eq!((msgs, bytes), (4, WINDOW.bytes as i64));
    // Twenty one-ways in one batch frame, ignoring the window.
    let one_way = zlink_wire::encode(
        &Record::OneWay(OneWay {
            key: DispatchKey::new(1),
        }),
        CorrelationId::NONE,
        Some(Bytes::from_static(b"payload")),
    )
    .unwrap();
    let cost = (one_way.envelope().len() + one_way.payload().unwrap().len()) as i64;
    let sub = (
        &one_way.envelope()[..],
        Some(&one_way.payload().unwrap()[..]),
    );
    let batch = zlink_wire::encode_batch(vec![sub; 20]).unwrap();
    raw.send(&batch[..], 0).unwrap();
    msgs -= 20;
    bytes -= 20 * cost;
    // The application takes what was delivered (one at a time: the rest waits held, charged
    // to the window); every cost comes back.
    let counters = node.counters();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let dropped = counters.dropped(DropReason::CreditExceeded);
        if counters.delivered_total() + dropped >= 20 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "all twenty read");
        let _ = tokio::time::timeout(Duration::from_millis(50), inbound.recv()).await;
    }
    assert!(
        counters.dropped(DropReason::CreditExceeded) >= 1,
        "the window was overrun"
    );
    let (raw, msgs, bytes) = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + WAIT;
        while msgs < i64::from(WINDOW.messages) {
            assert!(
                std::time::Instant::now() < deadline,
                "the client's counters stay short: {msgs} records, {bytes} bytes"
            );
            read_grants(&raw, &mut msgs, &mut bytes);
        }
        (raw, msgs, bytes)
    })
    .await
    .unwrap();
    assert_eq!(
        (msgs, bytes),
        (4, WINDOW.bytes as i64),
        "exactly the window again"
    );
    drop(raw);
    node.shutdown().await;
}
