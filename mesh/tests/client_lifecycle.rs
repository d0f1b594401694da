//! ClientServer connection lifecycle (issue 9): the node closes a client's session with a
//! reason, the client sees that reason, a session that ended never comes back silently on the
//! same connection (tombstones), and the session events reach the layer above losslessly and in
//! order with the session's records.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{self, CorrelationId, Disconnect, DisconnectReason, OneWay, Ping};
use zlink_mesh::{
    ClientCloseCause, ClientConfig, ClientEvent, ClientEvents, DispatchKey, DropReason,
    InboundReceiver, MeshClient, MeshConfig, MeshNode, Origin, PeerEvent, Record, RequestError,
    SendError, SessionRid,
};

fn server_config() -> MeshConfig {
    let mut c = config("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    c
}

fn server(c: MeshConfig) -> (MeshNode, InboundReceiver, ClientEvents) {
    let (node, inbound) = MeshNode::start(c).unwrap();
    let events = node.take_client_events().expect("first take");
    assert!(node.take_client_events().is_none(), "taken once");
    (node, inbound, events)
}

fn client(node: &MeshNode) -> MeshClient {
    let mut c = ClientConfig::new(node.endpoints().client.clone().unwrap());
    c.liveness = config("x").liveness;
    MeshClient::connect(c).unwrap()
}

async fn next_event(events: &mut ClientEvents) -> ClientEvent {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("a client event within WAIT")
        .expect("event stream open")
}

async fn connected(events: &mut ClientEvents) -> SessionRid {
    match next_event(events).await {
        ClientEvent::Connected { session } => session,
        e => panic!("expected Connected, got {e:?}"),
    }
}

fn encode(record: Record, payload: Option<&'static [u8]>) -> Vec<Bytes> {
    let f = zlink_wire::encode(
        &record,
        CorrelationId::new(0),
        payload.map(Bytes::from_static),
    )
    .unwrap();
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

/// Blocking receive of the next record on a raw DEALER (RCVTIMEO = WAIT).
fn raw_recv(s: &zmq::Socket) -> Record {
    let parts: Vec<Bytes> = s
        .recv_multipart(0)
        .expect("a record from the node within WAIT")
        .into_iter()
        .map(Bytes::from)
        .collect();
    zlink_wire::decode(&parts, &zlink_wire::Limits::default())
        .unwrap()
        .record
}

/// Receives until a 149 Disconnect arrives (FlowCredit / Pong before it are skipped).
fn raw_recv_disconnect(s: &zmq::Socket) -> DisconnectReason {
    loop {
        match raw_recv(s) {
            Record::Disconnect(Disconnect { reason }) => return reason,
            Record::FlowCredit(_) | Record::Pong(_) => {}
            r => panic!("unexpected record {r:?}"),
        }
    }
}

fn raw_dealer(ctx: &zmq::Context, node: &MeshNode) -> zmq::Socket {
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(2000).unwrap();
    raw.set_rcvtimeo(WAIT.as_millis() as i32).unwrap();
    raw.connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    raw
}

// close_client with every reason: a push queued before the close arrives first, then the client
// sees the close with that reason; requests and sends after it fail at once with the typed
// error (kind Unavailable); recv_push ends; the node reports Disconnected { Closed(reason) }.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_client_with_each_reason_reaches_the_client() {
    let (node, _inbound, mut events) = server(server_config());
    for &reason in DisconnectReason::ALL {
        let c = client(&node);
        let session = connected(&mut events).await;
        node.push(session, DispatchKey::new(9), Bytes::from_static(b"before"))
            .await
            .unwrap();
        node.close_client(session, reason).unwrap();
        let seen = tokio::time::timeout(WAIT, c.closed())
            .await
            .expect("closed within WAIT");
        assert_eq!(seen, reason);
        assert_eq!(c.close_reason(), Some(reason));
        let p = c
            .recv_push_timeout(WAIT)
            .await
            .expect("the push before the close");
        assert_eq!(p.payload.as_deref(), Some(&b"before"[..]));
        assert!(c.recv_push_timeout(WAIT).await.is_none(), "pushes end");
        let e = c
            .request(DispatchKey::new(1), Bytes::new(), WAIT)
            .await
            .unwrap_err();
        assert_eq!(e, RequestError::SessionClosed(reason));
        assert_eq!(e.kind(), zlink_mesh::ErrorKind::Unavailable);
        let e = c.send(DispatchKey::new(1), Bytes::new()).await.unwrap_err();
        assert_eq!(e, SendError::SessionClosed(reason));
        assert_eq!(e.kind(), zlink_mesh::ErrorKind::Unavailable);
        assert_eq!(
            next_event(&mut events).await,
            ClientEvent::Disconnected {
                session,
                cause: ClientCloseCause::Closed(reason),
            }
        );
        // The session is gone: pushes are refused, a second close is a no-op.
        assert_eq!(
            node.push(session, DispatchKey::new(9), Bytes::new()).await,
            Err(SendError::Unavailable)
        );
        node.close_client(session, reason).unwrap();
        c.close().await;
    }
    // Unknown session: a no-op.
    node.close_client(SessionRid::new(999_999), DisconnectReason::Closed)
        .unwrap();
    node.shutdown().await;
    assert!(events.recv().await.is_none(), "stream ends after shutdown");
}

// A request in flight when the node closes the session ends with the close's reason; the
// node's late answer is undeliverable (counted), never a second terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_in_flight_fails_with_the_close_reason() {
    let (node, mut inbound, mut events) = server(server_config());
    let c = client(&node);
    let session = connected(&mut events).await;
    let (r, m) = tokio::join!(
        c.request(DispatchKey::new(1), Bytes::from_static(b"q"), WAIT),
        async {
            let m = tokio::time::timeout(WAIT, inbound.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(m.origin, Origin::Client { session });
            node.close_client(session, DisconnectReason::Replaced)
                .unwrap();
            m
        }
    );
    assert_eq!(
        r.unwrap_err(),
        RequestError::SessionClosed(DisconnectReason::Replaced)
    );
    assert!(matches!(
        next_event(&mut events).await,
        ClientEvent::Disconnected { .. }
    ));
    let undeliverable = node.counters().dropped(DropReason::ReplyUndeliverable);
    m.reply.unwrap().reply(Bytes::from_static(b"late"));
    eventually("the late reply counted", || {
        node.counters().dropped(DropReason::ReplyUndeliverable) > undeliverable
    })
    .await;
    c.close().await;
    node.shutdown().await;
}

// Node shutdown: every client gets Disconnect { Shutdown } and each session reports its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_clients_with_shutdown() {
    let (node, _inbound, mut events) = server(server_config());
    let a = client(&node);
    let sa = connected(&mut events).await;
    let b = client(&node);
    let sb = connected(&mut events).await;
    node.shutdown().await;
    for c in [&a, &b] {
        let r = tokio::time::timeout(WAIT, c.closed()).await.unwrap();
        assert_eq!(r, DisconnectReason::Shutdown);
    }
    let mut ended = Vec::new();
    while let Some(e) = events.recv().await {
        match e {
            ClientEvent::Disconnected { session, cause } => {
                assert_eq!(cause, ClientCloseCause::Shutdown);
                ended.push(session);
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    ended.sort_by_key(|s| s.get());
    assert_eq!(ended, vec![sa, sb]);
}

// Silent client: the node ends the session after the peer timeout and tells the client
// (Timeout); a later record on the same connection is dropped (SessionClosed), answered with
// Disconnect { Timeout } again, and creates no new session (no Connected event, no credit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_times_out_and_its_connection_stays_closed() {
    let mut cfg = server_config();
    cfg.liveness.peer_timeout = Duration::from_millis(300);
    let (node, _inbound, mut events) = server(cfg);

    // A MeshClient that pings far less often than the node's peer timeout.
    let mut cc = ClientConfig::new(node.endpoints().client.clone().unwrap());
    cc.liveness = config("x").liveness;
    cc.liveness.ping_interval = Duration::from_secs(3600);
    let c = MeshClient::connect(cc).unwrap();
    let session = connected(&mut events).await;
    let r = tokio::time::timeout(WAIT, c.closed()).await.unwrap();
    assert_eq!(r, DisconnectReason::Timeout);
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Disconnected {
            session,
            cause: ClientCloseCause::Timeout,
        }
    );
    c.close().await;

    // A raw DEALER keeps talking on the same connection after its session timed out.
    let ctx = zmq::Context::new();
    let raw = raw_dealer(&ctx, &node);
    let ping = encode(Record::Ping(Ping { seq: 1 }), None);
    raw_send(&raw, &ping);
    let raw_session = connected(&mut events).await;
    let raw = tokio::task::spawn_blocking(move || {
        assert_eq!(raw_recv_disconnect(&raw), DisconnectReason::Timeout);
        raw
    })
    .await
    .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Disconnected {
            session: raw_session,
            cause: ClientCloseCause::Timeout,
        }
    );
    let closed_before = node.counters().dropped(DropReason::SessionClosed);
    // One record alone, then a batch of two one-ways: each record counted, one answer per
    // frame.
    raw_send(&raw, &ping);
    let one_way = encode(
        Record::OneWay(OneWay {
            key: DispatchKey::new(1),
        }),
        Some(b"x"),
    );
    let batch = zlink_wire::encode_batch(vec![
        (&one_way[0][..], Some(&one_way[1][..])),
        (&one_way[0][..], Some(&one_way[1][..])),
    ])
    .unwrap();
    let raw = tokio::task::spawn_blocking(move || {
        assert_eq!(
            raw_recv(&raw),
            Record::Disconnect(Disconnect {
                reason: DisconnectReason::Timeout
            })
        );
        raw.send(&batch[..], 0).unwrap();
        assert_eq!(
            raw_recv(&raw),
            Record::Disconnect(Disconnect {
                reason: DisconnectReason::Timeout
            })
        );
        raw
    })
    .await
    .unwrap();
    // The batch was answered after its first record was counted: its second may still be on
    // its way through the I/O thread (a counter has no event: polled).
    let count = || node.counters().dropped(DropReason::SessionClosed);
    eventually("three records counted", || count() >= closed_before + 3).await;
    assert_eq!(count(), closed_before + 3);
    // Each record was dropped where a new session would have been created (and its Connected
    // event sent first): none was.
    assert!(
        events.try_recv().is_err(),
        "no new session on a closed connection"
    );
    drop(raw);
    node.shutdown().await;
}

// A node whose I/O thread was away for longer than the peer timeout (descheduled on a loaded
// machine, stopped, or one long pass; here held) does not count that time as its clients'
// silence: a client that kept pinging meanwhile, its Pings waiting unread in the socket, keeps
// its session (its next record from the node is a Pong, not Disconnect { Timeout }); once it
// really goes silent it is still ended after the peer timeout. (Before, the first pass after
// the hold ran the liveness sweep before reading the socket and ended the session.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_the_io_thread_was_away_is_not_a_clients_silence() {
    // The timeout the test relies on not firing during the hold's pings: at least 3 s.
    const PEER_TIMEOUT: Duration = Duration::from_secs(3);
    let mut cfg = server_config();
    cfg.liveness.peer_timeout = PEER_TIMEOUT;
    let (node, _inbound, mut events) = server(cfg);
    let ctx = zmq::Context::new();
    let raw = raw_dealer(&ctx, &node);
    let ping = |seq| encode(Record::Ping(Ping { seq }), None);
    raw_send(&raw, &ping(1));
    let session = connected(&mut events).await;
    let raw = tokio::task::spawn_blocking(move || {
        // The session's grant and the first Pong: everything the node sent before the hold.
        loop {
            match raw_recv(&raw) {
                Record::Pong(_) => break raw,
                Record::FlowCredit(_) => {}
                r => panic!("unexpected record {r:?}"),
            }
        }
    })
    .await
    .unwrap();
    let hold = node.hold_io_for_tests();
    // Held for longer than the peer timeout, the client pinging every 200 ms all along.
    let raw = tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        let mut seq = 2;
        while start.elapsed() < PEER_TIMEOUT + Duration::from_secs(1) {
            raw_send(&raw, &ping(seq));
            seq += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
        raw
    })
    .await
    .unwrap();
    drop(hold);
    let raw = tokio::task::spawn_blocking(move || {
        match raw_recv(&raw) {
            Record::Pong(_) => {}
            r => panic!("the session was ended for the I/O thread's absence: {r:?}"),
        }
        // Silent from now on: ended after the peer timeout as any silent client.
        assert_eq!(raw_recv_disconnect(&raw), DisconnectReason::Timeout);
        raw
    })
    .await
    .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Disconnected {
            session,
            cause: ClientCloseCause::Timeout,
        }
    );
    drop(raw);
    node.shutdown().await;
}

// Lossless events: many sessions begin and end while nobody reads the event stream; then every
// session has exactly one Connected followed by one Disconnected. (The PeerEvent broadcast
// holds 1,024 events and loses the rest for a subscriber this slow.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_events_are_lossless_for_a_slow_reader() {
    const CYCLES: usize = 2_000;
    const AT_ONCE: usize = 50;
    let (node, _inbound, mut events) = server(server_config());
    let mut broadcast = node.subscribe();
    let endpoint = node.endpoints().client.clone().unwrap();
    tokio::task::spawn_blocking(move || {
        let ctx = zmq::Context::new();
        let ping = encode(Record::Ping(Ping { seq: 1 }), None);
        let bye = encode(
            Record::Disconnect(Disconnect {
                reason: DisconnectReason::Shutdown,
            }),
            None,
        );
        for _ in 0..CYCLES / AT_ONCE {
            let socks: Vec<zmq::Socket> = (0..AT_ONCE)
                .map(|_| {
                    let s = ctx.socket(zmq::DEALER).unwrap();
                    s.set_linger(2000).unwrap();
                    s.set_rcvtimeo(WAIT.as_millis() as i32).unwrap();
                    s.connect(&endpoint).unwrap();
                    raw_send(&s, &ping);
                    s
                })
                .collect();
            for s in &socks {
                // The session exists once the node answered (credit, then Pong).
                while !matches!(raw_recv(s), Record::Pong(_)) {}
                raw_send(s, &bye);
            }
        }
    })
    .await
    .unwrap();
    // Only now does the reader start.
    let mut state: HashMap<SessionRid, bool> = HashMap::new();
    let mut ended = 0;
    while ended < CYCLES {
        match next_event(&mut events).await {
            ClientEvent::Connected { session } => {
                assert!(state.insert(session, false).is_none(), "one Connected");
            }
            ClientEvent::Disconnected { session, cause } => {
                // A Disconnect libzmq failed to deliver would end as a timeout instead.
                assert!(
                    matches!(cause, ClientCloseCause::Remote | ClientCloseCause::Timeout),
                    "{cause:?}"
                );
                let done = state.get_mut(&session).expect("Connected first");
                assert!(!*done, "one Disconnected");
                *done = true;
                ended += 1;
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(state.len(), CYCLES);
    assert!(events.try_recv().is_err(), "nothing more");
    // The broadcast did lose events (it is the lossy one).
    let lagged = loop {
        match broadcast.try_recv() {
            Ok(_) => continue,
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => break true,
            Err(_) => break false,
        }
    };
    assert!(lagged, "the broadcast is lossy for this reader");
    node.shutdown().await;
}

// Event order: Connected is sent before the session's first record goes up; Disconnected only
// after its last record went up, even when those records were held while the application
// queue was full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_events_bracket_the_sessions_records() {
    const N: usize = 20;
    let mut cfg = server_config();
    cfg.inbound_capacity = 4;
    let (node, mut inbound, mut events) = server(cfg);
    let mut peer_events = node.subscribe();
    let c = client(&node);
    // The client's credit arrived (it came before the Pong that makes the node alive).
    eventually("the client has its credit", || c.server_alive()).await;
    for i in 0..N {
        c.send(DispatchKey::new(1), Bytes::from(vec![i as u8]))
            .await
            .unwrap();
    }
    c.close().await;
    // The node saw the Disconnect (published at once on the broadcast) while most records are
    // still held behind the full application queue: the lossless Disconnected waits for them.
    let session = loop {
        match tokio::time::timeout(WAIT, peer_events.recv())
            .await
            .unwrap()
        {
            Ok(PeerEvent::ClientDisconnected { session }) => break session,
            Ok(_) => {}
            Err(e) => panic!("{e:?}"),
        }
    };
    assert_eq!(
        events.try_recv().ok(),
        Some(ClientEvent::Connected { session }),
        "Connected before any record"
    );
    assert!(
        events.try_recv().is_err(),
        "Disconnected must wait for the held records"
    );
    for i in 0..N {
        let m = tokio::time::timeout(WAIT, inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.origin, Origin::Client { session });
        assert_eq!(m.payload.as_deref(), Some(&[i as u8][..]));
    }
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Disconnected {
            session,
            cause: ClientCloseCause::Remote,
        }
    );
    assert!(inbound.try_recv().is_none());

    // And the other way round: when the Connected event is read, the first record may follow,
    // never precede it (a new session, records read first this time).
    let c = client(&node);
    let session = connected(&mut events).await;
    eventually("the client has its credit", || c.server_alive()).await;
    c.send(DispatchKey::new(1), Bytes::from_static(b"x"))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.origin, Origin::Client { session });
    c.close().await;
    node.shutdown().await;
}

// A stream taken after sessions began announces the live ones first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_take_announces_live_sessions() {
    let (node, _inbound) = MeshNode::start(server_config()).unwrap();
    let mut peer_events = node.subscribe();
    let c = client(&node);
    let session = loop {
        match tokio::time::timeout(WAIT, peer_events.recv())
            .await
            .unwrap()
        {
            Ok(PeerEvent::ClientConnected { session }) => break session,
            Ok(_) => {}
            Err(e) => panic!("{e:?}"),
        }
    };
    let mut events = node.take_client_events().unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Connected { session }
    );
    node.close_client(session, DisconnectReason::Closed)
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Disconnected {
            session,
            cause: ClientCloseCause::Closed(DisconnectReason::Closed),
        }
    );
    assert_eq!(
        tokio::time::timeout(WAIT, c.closed()).await.unwrap(),
        DisconnectReason::Closed
    );
    c.close().await;
    node.shutdown().await;
}

// spec: SB-2.1 — one source address cannot take every session slot: past
// `max_clients_per_source` its records open no session (dropped, `SourceCapacity`); a slot
// freed by a session that ended is usable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_per_source_address_are_bounded() {
    let mut c = server_config();
    c.max_clients_per_source = 2;
    let (node, _inbound, mut events) = server(c);
    // Every client pings at once and then every 200 ms: its first record opens its session.
    let a = client(&node);
    let sa = connected(&mut events).await;
    let b = client(&node);
    let sb = connected(&mut events).await;
    assert_ne!(sa, sb);
    let third = client(&node);
    let refused = node.counters().dropped(DropReason::SourceCapacity);
    eventually("the third session from 127.0.0.1 refused twice", || {
        node.counters().dropped(DropReason::SourceCapacity) >= refused + 2
    })
    .await;
    assert!(events.try_recv().is_err(), "no third session");
    a.close().await;
    match next_event(&mut events).await {
        ClientEvent::Disconnected { session, .. } => assert_eq!(session, sa),
        e => panic!("expected Disconnected, got {e:?}"),
    }
    // The freed slot: the third client's next Ping opens its session.
    let sc = connected(&mut events).await;
    assert!(sc != sa && sc != sb);
    drop((b, third));
    node.shutdown().await;
}

/// Receives until a 148 push arrives (FlowCredit / Pong before it are skipped); its payload.
fn raw_recv_push(s: &zmq::Socket) -> Bytes {
    loop {
        let parts: Vec<Bytes> = s
            .recv_multipart(0)
            .expect("a record from the node within WAIT")
            .into_iter()
            .map(Bytes::from)
            .collect();
        let d = zlink_wire::decode(&parts, &zlink_wire::Limits::default()).unwrap();
        match d.record {
            Record::Push(_) => return d.payload.unwrap_or_default(),
            Record::FlowCredit(_) | Record::Pong(_) => {}
            r => panic!("unexpected record {r:?}"),
        }
    }
}

// spec: SB-2.1 — a session is bound to its connection (issue 26 item 4): a client that set
// ZMQ_ROUTING_ID is killed; its session ends with its connection (long before the peer
// timeout), and another connection announcing the same routing id gets a session of its own:
// not the victim's, none of its pushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_never_inherits_a_session_by_its_routing_id() {
    let mut cfg = server_config();
    // Only the end of the connection can end the victim's session within WAIT.
    cfg.liveness.peer_timeout = Duration::from_secs(600);
    let (node, mut inbound, mut events) = server(cfg);
    let ctx = zmq::Context::new();
    let hello = encode(
        Record::OneWay(OneWay {
            key: DispatchKey::new(1),
        }),
        Some(b"hello"),
    );
    let from = |m: zlink_mesh::Inbound| match m.origin {
        Origin::Client { session } => session,
        o => panic!("{o:?}"),
    };

    let victim = ctx.socket(zmq::DEALER).unwrap();
    victim.set_identity(b"player-1").unwrap();
    victim.set_linger(0).unwrap();
    victim.set_rcvtimeo(WAIT.as_millis() as i32).unwrap();
    victim
        .connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    raw_send(&victim, &hello);
    let s1 = connected(&mut events).await;
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(from(m), s1);
    // While the victim is connected, another connection announcing its routing id is a
    // session of its own (libzmq's own rule would ignore it; the id it announces is never
    // used), and the victim's pushes still reach the victim only.
    let early = ctx.socket(zmq::DEALER).unwrap();
    early.set_identity(b"player-1").unwrap();
    early.set_linger(0).unwrap();
    early
        .connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    raw_send(&early, &hello);
    let s0 = connected(&mut events).await;
    assert_ne!(s0, s1);
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(from(m), s0);
    node.push(
        s1,
        DispatchKey::new(2),
        Bytes::from_static(b"for the victim"),
    )
    .await
    .unwrap();
    let victim = tokio::task::spawn_blocking(move || {
        assert_eq!(raw_recv_push(&victim), &b"for the victim"[..]);
        victim
    })
    .await
    .unwrap();
    drop(early);
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Disconnected {
            session: s0,
            cause: ClientCloseCause::Remote,
        }
    );

    // Killed: its TCP connection closes. The session ends with it.
    drop(victim);
    assert_eq!(
        next_event(&mut events).await,
        ClientEvent::Disconnected {
            session: s1,
            cause: ClientCloseCause::Remote,
        }
    );
    assert!(
        node.push(s1, DispatchKey::new(2), Bytes::from_static(b"late"))
            .await
            .is_err(),
        "the victim's session is gone"
    );

    // Another connection announcing the victim's routing id: a new session, its own.
    let attacker = ctx.socket(zmq::DEALER).unwrap();
    attacker.set_identity(b"player-1").unwrap();
    attacker.set_linger(0).unwrap();
    attacker.set_rcvtimeo(WAIT.as_millis() as i32).unwrap();
    attacker
        .connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    raw_send(&attacker, &hello);
    let s2 = connected(&mut events).await;
    assert_ne!(s2, s1, "a new session, not the victim's");
    let m = tokio::time::timeout(WAIT, inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(from(m), s2, "the attacker's record is its own session's");
    assert!(
        node.push(s1, DispatchKey::new(2), Bytes::from_static(b"secret"))
            .await
            .is_err()
    );
    node.push(
        s2,
        DispatchKey::new(2),
        Bytes::from_static(b"for the attacker"),
    )
    .await
    .unwrap();
    tokio::task::spawn_blocking(move || {
        // The first push it sees is its own: nothing of the victim's reached it.
        assert_eq!(raw_recv_push(&attacker), &b"for the attacker"[..]);
    })
    .await
    .unwrap();
    node.shutdown().await;
}
