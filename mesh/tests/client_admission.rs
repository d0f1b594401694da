//! Strangers on the client port (`ClientAdmission::OnAccept`): a session the node's session
//! layer has not accepted gets a small receive window and counts against a bound of strangers
//! in all and per source address; `MeshNode::accept_client` grants it the full
//! `client_window`. What many strangers make the node hold is counted here while an accepted
//! client keeps being served.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{self, CorrelationId, OneWay, Ping};
use zlink_mesh::{
    ClientAdmission, ClientConfig, ClientEvent, ClientEvents, DispatchKey, DropReason,
    InboundWindow, MeshClient, MeshConfig, MeshNode, Origin, Record, SessionRid, Strangers,
};

fn server_config(strangers: Strangers) -> MeshConfig {
    let mut c = config("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c.client_admission = ClientAdmission::OnAccept(strangers);
    c
}

async fn connected(events: &mut ClientEvents) -> SessionRid {
    match tokio::time::timeout(WAIT, events.recv()).await {
        Ok(Some(ClientEvent::Connected { session })) => session,
        e => panic!("expected Connected, got {e:?}"),
    }
}

fn encode(record: &Record, payload: Option<Bytes>) -> Vec<Bytes> {
    let f = zlink_wire::encode(record, CorrelationId::NONE, payload).unwrap();
    let mut parts = vec![f.envelope().clone()];
    parts.extend(f.payload().cloned());
    parts
}

fn raw_send(s: &zmq::Socket, parts: &[Bytes]) {
    let last = parts.len() - 1;
    for (i, p) in parts.iter().enumerate() {
        s.send(&p[..], if i == last { 0 } else { zmq::SNDMORE })
            .unwrap();
    }
}

/// A raw DEALER on the node's client port (from `source`, an IP of this host, if given).
fn raw_dealer(ctx: &zmq::Context, ep: &str, source: Option<&str>) -> zmq::Socket {
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.set_rcvtimeo(WAIT.as_millis() as i32).unwrap();
    let ep = match source {
        // libzmq's `tcp://source;destination` form
        Some(src) => ep.replacen("tcp://", &format!("tcp://{src}:0;"), 1),
        None => ep.to_owned(),
    };
    raw.connect(&ep).unwrap();
    raw
}

/// Pings and waits for the Pong (FlowCredit before it skipped): everything this connection sent
/// before the Ping was handled by the node (one connection is read in order).
fn ping_pong(s: &zmq::Socket, seq: u64) {
    raw_send(s, &encode(&Record::Ping(Ping { seq }), None));
    loop {
        let parts: Vec<Bytes> = s
            .recv_multipart(0)
            .expect("a Pong within WAIT")
            .into_iter()
            .map(Bytes::from)
            .collect();
        match zlink_wire::decode(&parts, &zlink_wire::Limits::default())
            .unwrap()
            .record
        {
            Record::Pong(p) if p.seq == seq => return,
            Record::Pong(_) | Record::FlowCredit(_) => {}
            r => panic!("unexpected record {r:?}"),
        }
    }
}

// spec: EG-1.2 (the receive window is its own limit), SB-1 (the session callback authenticates:
// until then a session is a stranger), SB-2.1 (rejections counted)
// Many strangers, each ignoring its window (a raw DEALER sending 40 × 1 KiB one-ways), while
// the application reads nothing: each is held to the strangers' window (8 records / 8 KiB),
// the excess dropped and counted. An accepted client meanwhile gets its full window: 500
// records beyond the strangers' window all arrive, in order, none dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_hold_only_their_small_window_while_an_accepted_client_is_served() {
    const STRANGERS: usize = 100;
    const EACH: usize = 40;
    const ACCEPTED: usize = 500;
    const PAYLOAD: usize = 1024;
    let window = InboundWindow {
        messages: 8,
        bytes: 8 * 1024,
    };
    let mut c = server_config(Strangers {
        window,
        max: 1024,
        max_per_source: 1024,
    });
    c.inbound_capacity = 16;
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let mut events = node.take_client_events().unwrap();

    let mut cc = ClientConfig::new(node.endpoints().client.clone().unwrap());
    cc.liveness = config("x").liveness;
    let client = MeshClient::connect(cc).unwrap();
    let accepted = connected(&mut events).await;
    node.accept_client(accepted).unwrap();

    // The strangers flood; each one's records were all handled once its Pong came back.
    let ep = node.endpoints().client.clone().unwrap();
    tokio::task::spawn_blocking(move || {
        let ctx = zmq::Context::new();
        let payload = Bytes::from(vec![7u8; PAYLOAD]);
        let one_way = encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(2),
            }),
            Some(payload),
        );
        let socks: Vec<zmq::Socket> = (0..STRANGERS)
            .map(|_| raw_dealer(&ctx, &ep, None))
            .collect();
        for s in &socks {
            for _ in 0..EACH {
                raw_send(s, &one_way);
            }
        }
        for (i, s) in socks.iter().enumerate() {
            ping_pong(s, i as u64);
        }
    })
    .await
    .unwrap();
    let flooded = (STRANGERS * EACH) as u64;
    let dropped = node.counters().dropped(DropReason::CreditExceeded);
    // Held or delivered: each stranger's window, plus the credit the application queue freed
    // (16 records went up and returned their credit).
    let kept = flooded - dropped;
    let bound = (STRANGERS * window.messages as usize + 16) as u64;
    assert!(
        kept <= bound,
        "strangers kept {kept} records (bound {bound}); {dropped} dropped"
    );
    eprintln!(
        "{STRANGERS} strangers × {EACH} × {PAYLOAD} B: {kept} records kept (≤ {} KiB of \
         payload), {dropped} dropped CreditExceeded",
        kept * PAYLOAD as u64 / 1024
    );
    assert!(client.server_alive(), "the accepted client is answered");

    // The accepted client sends far beyond the strangers' window; the application reads now.
    let sender = tokio::spawn(async move {
        for i in 0..ACCEPTED as u32 {
            client
                .send(DispatchKey::new(1), Bytes::from(i.to_be_bytes().to_vec()))
                .await
                .unwrap();
        }
        client
    });
    let mut got = 0u32;
    let mut strangers_got = 0u64;
    while got < ACCEPTED as u32 {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .expect("records within WAIT")
            .expect("open");
        match m.origin {
            Origin::Client { session } if session == accepted => {
                assert_eq!(m.payload.as_deref(), Some(&got.to_be_bytes()[..]), "order");
                got += 1;
            }
            _ => strangers_got += 1,
        }
    }
    let _client = sender.await.unwrap();
    assert!(strangers_got <= kept);
    assert_eq!(
        node.counters().dropped(DropReason::CreditExceeded),
        dropped,
        "nothing of the accepted client dropped"
    );
    node.shutdown().await;
}

// spec: SB-1, SB-2.1
// Strangers are bounded per source address and in all; accepting one frees its stranger slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_bounded_per_source_and_in_all_until_accepted() {
    let (node, _inbound) = MeshNode::start(server_config(Strangers {
        window: Strangers::default().window,
        max: 4,
        max_per_source: 3,
    }))
    .unwrap();
    let mut events = node.take_client_events().unwrap();
    let ep = node.endpoints().client.clone().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let driver = tokio::task::spawn_blocking(move || {
        let ctx = zmq::Context::new();
        let mut keep = Vec::new();
        let dealer = |src: Option<&str>| raw_dealer(&ctx, &ep, src);
        // Three strangers from 127.0.0.1: sessions.
        for i in 0..3 {
            let s = dealer(None);
            ping_pong(&s, i);
            keep.push(s);
        }
        // A fourth from the same address: refused (its Ping is dropped, never answered).
        let s4 = dealer(None);
        raw_send(&s4, &encode(&Record::Ping(Ping { seq: 4 }), None));
        keep.push(s4);
        tx.send("fourth sent").unwrap();
        go_rx.recv().unwrap(); // the first was accepted: its grant of the difference arrives
        loop {
            let parts: Vec<Bytes> = keep[0]
                .recv_multipart(0)
                .expect("the accepted session's grant")
                .into_iter()
                .map(Bytes::from)
                .collect();
            let rec = zlink_wire::decode(&parts, &zlink_wire::Limits::default())
                .unwrap()
                .record;
            if let Record::FlowCredit(f) = rec {
                let full = config("x").client_window;
                let small = Strangers::default().window;
                assert_eq!(f.messages, full.messages - small.messages);
                assert_eq!(f.bytes, full.bytes - small.bytes);
                break;
            }
        }
        // Now a fifth from 127.0.0.1 fits, and one from 127.0.0.2 (4 strangers in all).
        let s5 = dealer(None);
        ping_pong(&s5, 5);
        keep.push(s5);
        let s6 = dealer(Some("127.0.0.2"));
        ping_pong(&s6, 6);
        keep.push(s6);
        // A seventh, from another address: the total bound refuses it.
        let s7 = dealer(Some("127.0.0.2"));
        raw_send(&s7, &encode(&Record::Ping(Ping { seq: 7 }), None));
        keep.push(s7);
        tx.send("seventh sent").unwrap();
        go_rx.recv().unwrap();
    });
    let mut first = None;
    for _ in 0..3 {
        let s = connected(&mut events).await;
        first.get_or_insert(s);
    }
    assert_eq!(rx.recv().await, Some("fourth sent"));
    eventually("the fourth stranger from one address refused", || {
        node.counters().dropped(DropReason::SourceCapacity) >= 1
    })
    .await;
    node.accept_client(first.unwrap()).unwrap();
    go_tx.send(()).unwrap();
    connected(&mut events).await; // the fifth
    connected(&mut events).await; // the sixth
    assert_eq!(rx.recv().await, Some("seventh sent"));
    eventually("the stranger beyond the total refused", || {
        node.counters().dropped(DropReason::HandshakeCapacity) >= 1
    })
    .await;
    assert_eq!(node.counters().dropped(DropReason::SourceCapacity), 1);
    assert!(
        tokio::time::timeout(Duration::from_millis(1), events.recv())
            .await
            .is_err(),
        "no session for the refused strangers"
    );
    go_tx.send(()).unwrap();
    driver.await.unwrap();
    node.shutdown().await;
}

// spec: EG-1.2, SB-2.1 — a stranger's window bounds bytes before a record is accepted
// (issue 26, "also"): a record that does not fit in what is left of the window's bytes is
// dropped (`CreditExceeded`) however empty the window is, so one large record cannot pass a
// small window (1,024 strangers could otherwise pin a message limit each). Records that fit
// are kept; once accepted, the session's window is the usual one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_window_bounds_bytes_before_accepting() {
    let window = InboundWindow {
        messages: 8,
        bytes: 8 * 1024,
    };
    let mut c = server_config(Strangers {
        window,
        max: 16,
        max_per_source: 16,
    });
    c.inbound_capacity = 64;
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let mut events = node.take_client_events().unwrap();
    let ep = node.endpoints().client.clone().unwrap();
    let one_way = |len: usize| {
        encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(2),
            }),
            Some(Bytes::from(vec![7u8; len])),
        )
    };
    let raw = tokio::task::spawn_blocking(move || {
        let ctx = zmq::Context::new();
        let s = raw_dealer(&ctx, &ep, None);
        ping_pong(&s, 1);
        (ctx, s)
    })
    .await
    .unwrap();
    let session = connected(&mut events).await;
    let before = node.counters().dropped(DropReason::CreditExceeded);
    let (big, small) = (one_way(1024 * 1024), one_way(1024));
    let raw = tokio::task::spawn_blocking(move || {
        raw_send(&raw.1, &big);
        for _ in 0..7 {
            raw_send(&raw.1, &small);
        }
        ping_pong(&raw.1, 2);
        raw
    })
    .await
    .unwrap();
    assert_eq!(
        node.counters().dropped(DropReason::CreditExceeded),
        before + 1,
        "the 1 MiB record did not fit a stranger's 8 KiB window"
    );
    for _ in 0..7 {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.map(|p| p.len()), Some(1024));
    }
    // Accepted: the full window, and one record may be larger than what is left of it.
    node.accept_client(session).unwrap();
    let big = one_way(1024 * 1024);
    let raw = tokio::task::spawn_blocking(move || {
        // The accept's grant (the rest of the window) has arrived.
        loop {
            let parts: Vec<Bytes> = raw
                .1
                .recv_multipart(0)
                .expect("the accept's grant within WAIT")
                .into_iter()
                .map(Bytes::from)
                .collect();
            match zlink_wire::decode(&parts, &zlink_wire::Limits::default())
                .unwrap()
                .record
            {
                Record::FlowCredit(f) if f.messages > window.messages => break,
                Record::FlowCredit(_) | Record::Pong(_) => {}
                r => panic!("unexpected record {r:?}"),
            }
        }
        raw_send(&raw.1, &big);
        ping_pong(&raw.1, 4);
        raw
    })
    .await
    .unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload.map(|p| p.len()), Some(1024 * 1024));
    assert_eq!(
        node.counters().dropped(DropReason::CreditExceeded),
        before + 1
    );
    drop(raw);
    node.shutdown().await;
}

// docs/CLIENT-PROTOCOL.md 5.1, spec: EG-1.2 — the Rust `MeshClient` stays within a stranger's
// window: until the session is accepted (the node's second grant) a record goes out only if it
// fits in what is left of the window's bytes, so none of its records is dropped as
// `CreditExceeded`; the one that did not fit goes out after the acceptance, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mesh_client_never_overdraws_a_strangers_window() {
    let window = InboundWindow {
        messages: 8,
        bytes: 8 * 1024,
    };
    let mut c = server_config(Strangers {
        window,
        max: 16,
        max_per_source: 16,
    });
    // Records the application has not taken wait in the window: no credit comes back early.
    c.inbound_capacity = 1;
    let (node, mut inbound) = MeshNode::start(c).unwrap();
    let mut events = node.take_client_events().unwrap();
    let mut cc = ClientConfig::new(node.endpoints().client.clone().unwrap());
    cc.liveness = config("x").liveness;
    let client = MeshClient::connect(cc).unwrap();
    let before = node.counters().dropped(DropReason::CreditExceeded);
    // 7 × 1 KiB (with their envelopes a little over 7 KiB), then 2 KiB: more than is left.
    for i in 0..7u8 {
        client
            .send(DispatchKey::new(2), Bytes::from(vec![i; 1024]))
            .await
            .unwrap();
    }
    client
        .send(DispatchKey::new(2), Bytes::from(vec![7u8; 2048]))
        .await
        .unwrap();
    let session = connected(&mut events).await;
    for i in 0..7u8 {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_deref(), Some(&[i; 1024][..]));
    }
    node.accept_client(session).unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .expect("the 2 KiB record arrives once the session is accepted")
        .unwrap();
    assert_eq!(m.payload.map(|p| p.len()), Some(2048));
    assert_eq!(
        node.counters().dropped(DropReason::CreditExceeded),
        before,
        "nothing the client sent was dropped"
    );
    client.close().await;
    node.shutdown().await;
}
