//! ClientServer: a node's client ROUTER and the Rust client (DEALER) — request/reply,
//! one-way DATA, server push, ordering of a reply behind unprocessed pushes.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{OneWay, Request};
use zlink_mesh::{
    ClientConfig, DispatchKey, DropReason, ErrorKind, MeshClient, MeshNode, Origin, PeerEvent,
    Record, RequestError, TransportEvent,
};

fn server() -> (MeshNode, zlink_mesh::InboundReceiver) {
    let mut c = config("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    MeshNode::start(c).unwrap()
}

fn client_config(node: &MeshNode) -> ClientConfig {
    let mut c = ClientConfig::new(node.endpoints().client.clone().unwrap());
    c.liveness = config("x").liveness;
    c
}

// spec: EG-4 (ClientServer replies on the one connection), SB-14.8 (reply completes the
// original correlation exactly once)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_reply_oneway_and_push() {
    let (node, mut inbound) = server();
    let mut events = node.subscribe();
    let client = MeshClient::connect(client_config(&node)).unwrap();

    client
        .send(DispatchKey::new(1), Bytes::from_static(b"data"))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        m.record,
        Record::OneWay(OneWay {
            key: DispatchKey::new(1)
        })
    );
    let Origin::Client { session } = m.origin else {
        panic!("not a client origin: {:?}", m.origin)
    };
    assert!(m.reply.is_none());
    let ev = tokio::time::timeout(WAIT, events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev, PeerEvent::ClientConnected { session });

    let srv = tokio::spawn(async move {
        let m = inbound.recv().await.unwrap();
        assert!(
            matches!(m.record, Record::Request(Request { key, .. }) if key == DispatchKey::new(2))
        );
        assert!(m.deadline.is_some());
        m.reply.unwrap().reply(Bytes::from_static(b"pong"));
        let m = inbound.recv().await.unwrap();
        m.reply
            .unwrap()
            .error(ErrorKind::InvalidOperation, "session not bound");
        let m = inbound.recv().await.unwrap();
        drop(m); // dropped without reply → framework Internal error reply (EG-15)
        inbound
    });
    let r = client
        .request(DispatchKey::new(2), Bytes::from_static(b"ping"), WAIT)
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"pong"[..]));
    let e = client
        .request(DispatchKey::new(2), Bytes::new(), WAIT)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidOperation);
    let e = client
        .request(DispatchKey::new(2), Bytes::new(), WAIT)
        .await
        .unwrap_err();
    assert!(matches!(
        e,
        RequestError::Remote {
            kind: ErrorKind::Internal,
            ..
        }
    ));
    let _inbound = srv.await.unwrap();

    node.push(session, DispatchKey::new(5), Bytes::from_static(b"push-1"))
        .await
        .unwrap();
    let p = client.recv_push_timeout(WAIT).await.unwrap();
    assert_eq!(p.key, DispatchKey::new(5));
    assert_eq!(p.payload.as_deref(), Some(&b"push-1"[..]));

    client.close().await;
    // The node forgets the session on Disconnect.
    loop {
        match tokio::time::timeout(WAIT, events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            PeerEvent::ClientDisconnected { session: s } if s == session => break,
            _ => {}
        }
    }
    assert!(
        node.push(session, DispatchKey::new(5), Bytes::new())
            .await
            .is_err()
    );
    assert_eq!(node.counters().dropped_total(), 0);
    node.shutdown().await;
}

// spec: EG-16.26 — the client does not process earlier one-way DATA (pushes), so the reply
// on the same DEALER-ROUTER connection is late; the request times out first; the late reply
// never makes a second terminal. Also SB-12 (no resend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_reply_behind_unprocessed_pushes_is_not_a_second_terminal() {
    let (node, mut inbound) = server();
    let mut cc = client_config(&node);
    cc.push_capacity = 1;
    let client = MeshClient::connect(cc).unwrap();
    client
        .send(DispatchKey::new(1), Bytes::new())
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    let Origin::Client { session } = m.origin else {
        panic!()
    };

    // Fill the client's push channel (capacity 1) and one more held by its I/O thread: the
    // client stops reading its connection.
    for i in 0..3u8 {
        node.push(session, DispatchKey::new(9), Bytes::from(vec![i]))
            .await
            .unwrap();
    }
    // The deadline only has to cover the request reaching the node (a request is never sent
    // after its deadline); the reply then stays stuck behind the pushes until they are read.
    let (e, _inbound) = {
        let req = client.request(DispatchKey::new(2), Bytes::new(), Duration::from_secs(3));
        tokio::pin!(req);
        let inbound = tokio::time::timeout(WAIT, async {
            tokio::select! {
                m = inbound.recv() => {
                    // Reply at once: it queues behind the unprocessed pushes on the connection.
                    m.unwrap().reply.unwrap().reply(Bytes::from_static(b"late"));
                    inbound
                }
                r = &mut req => panic!("the request ended before reaching the node: {r:?}"),
            }
        })
        .await
        .expect("the request reaches the node");
        let e = tokio::time::timeout(WAIT, req).await.unwrap().unwrap_err();
        (e, inbound)
    };
    assert_eq!(e, RequestError::DeadlineExceeded);
    // Now drain the pushes; the reply behind them arrives and is counted as late.
    for i in 0..3u8 {
        let p = client.recv_push_timeout(WAIT).await.unwrap();
        assert_eq!(p.payload.as_deref(), Some(&[i][..]));
    }
    eventually("late reply counted", || {
        client.counters().dropped(DropReason::LateReply) == 1
    })
    .await;
    assert_eq!(client.counters().dropped(DropReason::UnknownReply), 0);
    client.close().await;
    node.shutdown().await;
}

// spec: SB-5.4 (pings never enter the application queue)
// Heartbeats both ends: the client sees the node alive through its pings, and not alive once
// the node is gone; the node forgets a silent client (ClientDisconnected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ends_detect_a_dead_peer() {
    let (node, mut inbound) = server();
    let mut events = node.subscribe();
    let mut cc = client_config(&node);
    cc.liveness.peer_timeout = std::time::Duration::from_millis(800);
    let client = MeshClient::connect(cc).unwrap();
    client
        .send(DispatchKey::new(1), Bytes::new())
        .await
        .unwrap();
    let _ = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    eventually("client sees node alive", || client.server_alive()).await;
    node.shutdown().await;
    eventually("client sees node gone", || !client.server_alive()).await;
    drop(events.try_recv());

    // A client that vanishes without Disconnect is forgotten after the node's peer timeout.
    let mut c = config("srv2");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.liveness.peer_timeout = std::time::Duration::from_millis(800);
    let (node2, mut inbound2) = MeshNode::start(c).unwrap();
    let mut events2 = node2.subscribe();
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.connect(node2.endpoints().client.as_ref().unwrap())
        .unwrap();
    let ping = zlink_mesh::zlink_wire::encode(
        &Record::Ping(zlink_mesh::zlink_wire::Ping { seq: 1 }),
        zlink_mesh::CorrelationId::NONE,
        None,
    )
    .unwrap();
    raw.send(&ping.envelope()[..], 0).unwrap();
    let session = loop {
        if let PeerEvent::ClientConnected { session } = tokio::time::timeout(WAIT, events2.recv())
            .await
            .unwrap()
            .unwrap()
        {
            break session;
        }
    };
    drop(raw); // silent from now on
    loop {
        match tokio::time::timeout(WAIT, events2.recv())
            .await
            .unwrap()
            .unwrap()
        {
            PeerEvent::ClientDisconnected { session: s } if s == session => break,
            _ => {}
        }
    }
    assert!(
        inbound2.try_recv().is_none(),
        "pings never reach the layer above (SB-5.4)"
    );
    node2.shutdown().await;
}

// spec: EG-1.2, EG-4, SB-6.5, SB-5.4 — while the application queue is full, a chatty client is
// held to its receive window (per-client credit) and backs up into its own queue and budget.
// That backpressure must never cut the connection (a ZMTP heartbeat timeout did: the records
// libzmq had buffered, all accepted by `send`, were lost and the client came back under a new
// session). Every record a client's `send` accepted arrives, in order, on one session; the
// client socket keeps being read meanwhile: Pings are answered (both clients see the node
// alive past their peer timeout) and a new client gets its session during the stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_app_queue_neither_cuts_nor_loses_a_backpressured_client() {
    let mut c = config("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.inbound_capacity = 2;
    c.transport.recv_hwm = 4;
    c.liveness.heartbeat_interval = std::time::Duration::from_millis(100);
    c.liveness.heartbeat_timeout = std::time::Duration::from_millis(500);
    c.liveness.heartbeat_ttl = std::time::Duration::from_millis(500);
    let tap = zlink_mesh::WireTap::new(10_000);
    c.tap = Some(tap.clone());
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let mut events = node.subscribe();
    let mut cc = client_config(&node);
    cc.transport.send_hwm = 4;
    cc.liveness.peer_timeout = std::time::Duration::from_millis(800);
    cc.liveness.heartbeat_interval = std::time::Duration::from_millis(100);
    cc.liveness.heartbeat_timeout = std::time::Duration::from_millis(500);
    let chatty = MeshClient::connect(cc.clone()).unwrap();
    let other = MeshClient::connect(cc).unwrap();
    other
        .send(DispatchKey::new(2), Bytes::from_static(b"other"))
        .await
        .unwrap();
    // The application does not read: 2 records fill its queue, the rest backs up into
    // libzmq, TCP and the client's budget.
    const N: u32 = 2000;
    for i in 0..N {
        let mut p = vec![0u8; 8 * 1024];
        p[..4].copy_from_slice(&i.to_be_bytes());
        chatty
            .send(DispatchKey::new(1), Bytes::from(p))
            .await
            .unwrap();
    }
    // Several heartbeat and peer timeouts long: the node answered ten more Pings (two clients,
    // one Ping per 200 ms each) meanwhile.
    sent_later(&tap, 137, 10).await;
    let late = MeshClient::connect(client_config(&node)).unwrap();
    let connected = async {
        let mut n = 0;
        loop {
            if let PeerEvent::ClientConnected { .. } = events.recv().await.unwrap() {
                n += 1;
                if n == 3 {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(WAIT, connected)
        .await
        .expect("a new client gets its session while the application queue is full");
    sent_later(&tap, 137, 15).await;
    // Pings are still answered during the stall (a check at one instant would also fail on a
    // loaded machine that merely descheduled a client's I/O thread past its peer timeout)
    eventually("every client sees the node alive", || {
        chatty.server_alive() && other.server_alive() && late.server_alive()
    })
    .await;
    let mut sessions = std::collections::BTreeMap::<u64, Vec<u32>>::new();
    let mut others = 0;
    while sessions.values().map(Vec::len).sum::<usize>() < N as usize || others == 0 {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .expect("every accepted record arrives")
            .unwrap();
        let Origin::Client { session } = m.origin else {
            panic!("not a client")
        };
        let p = m.payload.unwrap();
        if &p[..] == b"other" {
            others += 1;
            continue;
        }
        let seq = u32::from_be_bytes(p[..4].try_into().unwrap());
        sessions.entry(session.get()).or_default().push(seq);
    }
    assert_eq!(others, 1);
    assert_eq!(
        sessions.len(),
        1,
        "one session: the connection was never cut"
    );
    let seqs = sessions.into_values().next().unwrap();
    assert_eq!(seqs, (0..N).collect::<Vec<_>>(), "all records, in order");
    assert_eq!(node.counters().events(TransportEvent::Disconnected), 0);
    assert_eq!(node.counters().dropped(DropReason::CreditExceeded), 0);
    assert!(inbound.try_recv().is_none());
}

// spec: SB-2.1, EG-1.2 — a client that ignores its receive window (a raw ZeroMQ DEALER that
// never waits for FlowCredit) gets at most its window plus what moved up into the application
// queue; the excess is dropped and counted (`CreditExceeded`), never held or passed up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ignoring_its_window_is_dropped_and_counted() {
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
    for _ in 0..N {
        let f = zlink_mesh::zlink_wire::encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(1),
            }),
            zlink_mesh::CorrelationId::NONE,
            Some(Bytes::from_static(b"x")),
        )
        .unwrap();
        raw.send(&f.envelope()[..], zmq::SNDMORE).unwrap();
        raw.send(&f.payload().unwrap()[..], 0).unwrap();
    }
    // At most window (4) + application queue (1) are accepted before anything is taken.
    eventually("excess dropped", || {
        node.counters().dropped(DropReason::CreditExceeded) >= (N - 5) as u64
    })
    .await;
    // Records still on their way are either delivered or counted: take deliveries until every
    // record is accounted for (no quiet-period timeout, which a loaded machine can outlast).
    let accounted = async {
        let mut got = 0;
        loop {
            let dropped = node.counters().dropped(DropReason::CreditExceeded) as usize;
            if got + dropped >= N {
                return (got, dropped);
            }
            tokio::select! {
                m = inbound.recv() => {
                    m.expect("the node keeps serving");
                    got += 1;
                }
                // a drop is a counter, not an event: look at it again shortly
                _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
            }
        }
    };
    let (got, dropped) = tokio::time::timeout(WAIT, accounted)
        .await
        .expect("every record is either delivered or counted");
    assert_eq!(got + dropped, N, "nothing is delivered and also counted");
    assert!(got <= 5);
    assert!(inbound.try_recv().is_none(), "nothing arrives twice");
}

// spec: EG-1.2, SB-9 — a client whose node crashed and restarted gets a new session on its new connection;
// the old session's credit does not carry over: the client waits for the new grant, so
// nothing it sends is dropped as `CreditExceeded`, even while the new node's application
// queue is full, and everything arrives in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnected_client_waits_for_the_new_sessions_window() {
    // an endpoint below the ephemeral range: the client keeps dialling it while no node is up
    let mut c = config("srv");
    c.client_endpoint = Some(format!("tcp://127.0.0.1:{}", free_port()));
    let (n1, mut in1) = MeshNode::start(c).unwrap();
    let ep = n1.endpoints().client.clone().unwrap();
    let mut cc = client_config(&n1);
    cc.liveness.peer_timeout = std::time::Duration::from_millis(500);
    let client = MeshClient::connect(cc).unwrap();
    client
        .send(DispatchKey::new(1), Bytes::from_static(b"first"))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, in1.recv())
        .await
        .unwrap()
        .unwrap();
    // A node that vanishes without a goodbye (a crash): a graceful shutdown would close the
    // client's session with Disconnect { Shutdown }, and a closed client does not reconnect.
    n1.abort_for_tests().await;
    drop(in1);
    // Let the client see its connection drop (it holds ~63 unused credits of the old
    // session): its I/O thread reads the monitor on every pass, and it passes at least once per
    // ping interval, so by the time the node has been silent for the peer timeout it has.
    eventually("client sees the node gone", || !client.server_alive()).await;
    // and its I/O thread has voided the old session's credit (counted after the reset, in the
    // thread that will send the records below)
    eventually("client saw its connection drop", || {
        client.counters().events(TransportEvent::Disconnected) >= 1
    })
    .await;
    let tap = zlink_mesh::WireTap::new(10_000);
    let mut c = config("srv2");
    c.client_endpoint = Some(ep);
    c.tap = Some(tap.clone());
    c.inbound_capacity = 1;
    c.client_window = zlink_mesh::InboundWindow {
        messages: 4,
        bytes: 1 << 20,
    };
    let (n2, mut in2) = MeshNode::start(c).unwrap();
    const N: u32 = 20;
    for i in 0..N {
        client
            .send(DispatchKey::new(1), Bytes::from(i.to_be_bytes().to_vec()))
            .await
            .unwrap();
    }
    // n2's application does not read for a while: five of the client's ping intervals (n2's
    // Pongs on the tap), in which a client ignoring its window would have sent the rest.
    sent_later(&tap, 137, 5).await;
    assert_eq!(n2.counters().dropped(DropReason::CreditExceeded), 0);
    let mut seqs = Vec::new();
    while seqs.len() < N as usize {
        let m = tokio::time::timeout(WAIT, in2.recv())
            .await
            .expect("every accepted record arrives")
            .unwrap();
        seqs.push(u32::from_be_bytes(
            m.payload.unwrap()[..4].try_into().unwrap(),
        ));
    }
    assert_eq!(seqs, (0..N).collect::<Vec<_>>());
}

// spec: EG-6 (flow control: credit a record freed goes back to its sender); issue 28
// (housekeeping grants owed credit to the sessions listed as owing, not by a scan of all)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_freed_below_a_quarter_of_the_window_comes_back_from_housekeeping() {
    let tap = zlink_mesh::WireTap::new(10_000);
    let mut c = config("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.tap = Some(tap.clone());
    c.client_admission = zlink_mesh::ClientAdmission::Open;
    // A grant goes out with the record that frees a quarter (4 messages); 3 never get there.
    c.client_window = zlink_mesh::InboundWindow {
        messages: 16,
        bytes: 1 << 20,
    };
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let client = MeshClient::connect(client_config(&node)).unwrap();
    let granted = |tap: &zlink_mesh::WireTap| -> u64 {
        tap.frames()
            .iter()
            .filter(|f| {
                f.direction == zlink_mesh::TapDirection::Sent
                    && f.link == zlink_mesh::LinkKind::Client
            })
            .filter_map(|f| match &f.decoded {
                Ok(d) => match &d.record {
                    zlink_mesh::zlink_wire::Record::FlowCredit(g) => Some(u64::from(g.messages)),
                    _ => None,
                },
                Err(_) => None,
            })
            .sum()
    };
    for i in 0..3u8 {
        client
            .send(DispatchKey::new(1), Bytes::from(vec![i]))
            .await
            .unwrap();
        tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
    }
    // The session's first grant (the whole window), then the 3 freed messages: only
    // housekeeping grants those (no record after them reaches a quarter).
    eventually("the 3 freed messages granted back", || {
        granted(&tap) >= 16 + 3
    })
    .await;
    assert_eq!(granted(&tap), 16 + 3);
}
