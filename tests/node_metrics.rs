//! The node's Prometheus endpoint: a node started with a metrics address serves
//! `GET /metrics` (Prometheus text format); known work done over the client protocol — creates,
//! calls, a session bind and relay, a refused bind and a malformed record — shows up as exactly
//! that much in the scraped counters, every value of the closed drop and rejection vocabularies
//! is a series (zeros included), and the `COUNTERS` client operation answers the same values.
//!
//! spec: SB-2.1, SB-5.9 (rejections counted with a closed vocabulary, visible to an operator).

mod node_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use node_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use zlink::actor::{ActorRegistry, ActorTypeBuilder, Create, ErrorKind, Handled, Message};
use zlink::node::client::Placement;
use zlink::node::{Node, NodeOptions};
use zlink::session::SessionHandlers;
use zlink_apps::demo::{self, Add, Echo, Fail};
use zlink_mesh::DispatchKey;
use zlink_wire::ActorId;

async fn start_metrics_node() -> Node {
    start_metrics_node_with(demo::registry().unwrap(), demo::sessions()).await
}

async fn start_metrics_node_with(registry: ActorRegistry, sessions: SessionHandlers) -> Node {
    let mut mc = mesh_config("m1");
    mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
    let mut options = NodeOptions::new(mc, memory_store(), registry)
        .with_sessions(sessions)
        .unwrap()
        .with_client_access(zlink::node::access::ClientAccess::open());
    options.metrics = Some("127.0.0.1:0".parse().unwrap());
    Node::start(options).await.unwrap()
}

/// One HTTP/1.1 GET; (status line, headers, body).
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(TIMEOUT, s.read_to_end(&mut buf))
        .await
        .expect("response in time")
        .unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_lowercase(), body.to_owned())
}

/// Scrapes `/metrics`: every sample by `name{labels}` (labels as written).
async fn scrape(node: &Node) -> BTreeMap<String, f64> {
    let (status, headers, body) = http_get(node.metrics_addr().unwrap(), "/metrics").await;
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4"),
        "{headers}"
    );
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse::<f64>().unwrap())
        })
        .collect()
}

fn get(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("no series {key} in\n{m:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_counters_match_the_work_done() {
    let node = start_metrics_node().await;
    let before = scrape(&node).await;
    assert_eq!(get(&before, "zlink_client_sessions"), 0.0);
    assert_eq!(get(&before, r#"zlink_actors{spot_kind="entry"}"#), 0.0);
    assert_eq!(get(&before, "zlink_relocations_total"), 0.0);
    for g in [
        "zlink_session_relocation_seals",
        "zlink_session_relocation_held",
        "zlink_session_relocation_held_bytes",
    ] {
        assert_eq!(get(&before, g), 0.0, "{g}");
    }
    // Every reason of the closed vocabularies is a series, zeros included.
    for r in zlink_mesh::DropReason::ALL {
        get(
            &before,
            &format!(r#"zlink_mesh_drops_total{{reason="{}"}}"#, r.as_str()),
        );
    }
    for rec in zlink::session::FlowRecord::ALL {
        for r in zlink::session::FlowReject::ALL {
            get(
                &before,
                &format!(
                    r#"zlink_session_rejects_total{{record="{}",reason="{}"}}"#,
                    rec.as_str(),
                    r.as_str()
                ),
            );
        }
    }

    // The work: 3 creates, 2 good calls and a failing one, NODE_INFO, a bind and a relay, a
    // bind of a stale incarnation (refused), and a malformed record on the client port.
    let c = client_of(&node);
    let counter = c
        .create("counter", "m-counter", Placement::default())
        .await
        .unwrap();
    let echo = c
        .create("echo", "m-echo", Placement::default())
        .await
        .unwrap();
    let failing = c
        .create("failing", "m-failing", Placement::default())
        .await
        .unwrap();
    assert_eq!(c.request(&counter, &Add(2)).await.unwrap(), 2);
    assert_eq!(c.request(&counter, &Add(3)).await.unwrap(), 5);
    let err = c.request(&failing, &Fail).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    c.info().await.unwrap();
    bind(&c, &echo).await;
    let reply = relay_req(&c, &echo, &Echo(b"hi".to_vec())).await.unwrap();
    assert_eq!(reply.0, b"hi");
    let mut stale = serde_json::to_value(&counter).unwrap();
    stale["object_generation"] = serde_json::json!(99);
    let stale: zlink::actor::ActorRef = serde_json::from_value(stale).unwrap();
    let err = c
        .packet(&demo::session::Bind { actor: stale })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation);
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.connect(node.endpoints().client.as_ref().unwrap())
        .unwrap();
    raw.send_multipart([&b"not a record"[..]], 0).unwrap();
    wait_until("the malformed record is counted", || {
        node.mesh()
            .counters()
            .dropped(zlink_mesh::DropReason::Malformed)
            >= 1
    })
    .await;

    let m = scrape(&node).await;
    let op = |o: &str| {
        get(
            &m,
            &format!(r#"zlink_client_operations_total{{operation="{o}"}}"#),
        )
    };
    assert_eq!(op("create"), 3.0);
    assert_eq!(op("call"), 3.0);
    assert_eq!(op("node_info"), 1.0);
    assert_eq!(op("get"), 0.0);
    assert_eq!(get(&m, r#"zlink_actors{spot_kind="entry"}"#), 3.0);
    assert_eq!(get(&m, r#"zlink_actors{spot_kind="spot_wide"}"#), 0.0);
    assert_eq!(get(&m, "zlink_activations_total"), 3.0);
    assert_eq!(get(&m, "zlink_client_sessions"), 1.0);
    assert_eq!(get(&m, "zlink_session_bindings"), 1.0);
    assert_eq!(get(&m, "zlink_peers_up"), 0.0);
    // Replies to the client: 3 creates, 2 calls, NODE_INFO, the bind and the relay packets;
    // errors: the failing call (Internal) and the stale bind (InvalidOperation).
    let replies = |r: &str| {
        get(
            &m,
            &format!(r#"zlink_replies_total{{origin="client",result="{r}"}}"#),
        )
    };
    assert_eq!(replies("ok"), 8.0);
    assert_eq!(replies("internal"), 1.0);
    assert_eq!(replies("invalid_operation"), 1.0);
    assert_eq!(replies("unavailable"), 0.0);
    assert_eq!(
        get(&m, r#"zlink_mesh_drops_total{reason="malformed"}"#),
        1.0
    );
    assert_eq!(
        get(
            &m,
            r#"zlink_session_rejects_total{record="bind",reason="object_generation_mismatch"}"#
        ),
        1.0
    );
    assert_eq!(get(&m, "zlink_relocations_total"), 0.0);
    // Store latency: one histogram per operation; the activations reserved and committed 3.
    let store = |op: &str| {
        get(
            &m,
            &format!(r#"zlink_store_operation_duration_seconds_count{{op="{op}"}}"#),
        )
    };
    assert_eq!(store("register_owner"), 1.0);
    assert_eq!(store("reserve_activation"), 3.0);
    assert_eq!(store("mark_ready"), 3.0);
    assert_eq!(store("cas_owner"), 0.0);
    assert_eq!(
        get(
            &m,
            r#"zlink_store_operation_duration_seconds_bucket{op="mark_ready",le="+Inf"}"#
        ),
        3.0
    );

    // The COUNTERS client operation answers the same snapshot.
    let counters = c.counters().await.unwrap();
    assert_eq!(counters.client_operations["create"], 3);
    assert_eq!(counters.client_operations["counters"], 1);
    assert_eq!(counters.actors["entry"], 3);
    assert_eq!(counters.bindings, 1);
    assert_eq!(counters.mesh_drops["malformed"], 1);
    assert_eq!(counters.replies["client/internal"], 1);
    assert_eq!(counters.store["reserve_activation"].count, 3);

    // Only /metrics is served.
    let (status, _, _) = http_get(node.metrics_addr().unwrap(), "/other").await;
    assert!(status.contains("404"), "{status}");
    c.close().await;
    node.shutdown(TIMEOUT).await;
}

/// Held until the test gives a permit (an actor's handler).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Wait;
impl Message for Wait {
    const KEY: DispatchKey = DispatchKey::new(700);
    type Reply = ();
}

/// Held until the test gives a permit (a session's packet handler).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Hold;
impl Message for Hold {
    const KEY: DispatchKey = DispatchKey::new(710);
    type Reply = ();
}

/// Lane depths are the lanes' own queue lengths, read when scraped: while an actor's handler
/// and a session's packet handler are held, the records sent behind them are the depth of their
/// lanes (application FIFO, deepest lane); released, the depths return to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lane_depths_are_the_queued_records_behind_a_held_handler() {
    const N: usize = 5;
    let gate = Arc::new(Semaphore::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let mut registry = demo::registry().unwrap();
    let (g, r) = (gate.clone(), ran.clone());
    registry
        .register(
            ActorTypeBuilder::new("gated", |_info, _init| Ok(()))
                .handle(move |_s: &mut (), _ctx, _: Wait| {
                    r.fetch_add(1, Ordering::SeqCst);
                    let g = g.clone();
                    Handled::later(async move {
                        g.acquire().await.unwrap().forget();
                        Ok(())
                    })
                })
                .build()
                .unwrap(),
        )
        .unwrap();
    let (g, h) = (gate.clone(), held.clone());
    let sessions = SessionHandlers::new().packet(move |_s, _: Hold| {
        let (g, h) = (g.clone(), h.clone());
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            g.acquire().await.unwrap().forget();
            Ok(())
        }
    });
    let node = start_metrics_node_with(registry, sessions).await;
    let queued = |m: &BTreeMap<String, f64>, kind: &str, lane: &str| {
        get(
            m,
            &format!(r#"zlink_lane_queued{{spot_kind="{kind}",lane="{lane}"}}"#),
        )
    };
    let deepest = |m: &BTreeMap<String, f64>, kind: &str| {
        get(m, &format!(r#"zlink_lane_depth_max{{spot_kind="{kind}"}}"#))
    };
    let before = scrape(&node).await;
    for kind in ["entry", "spot_wide", "per_actor", "instance", "session"] {
        assert_eq!(queued(&before, kind, "application"), 0.0, "{kind}");
        assert_eq!(queued(&before, kind, "lifecycle"), 0.0, "{kind}");
        assert_eq!(deepest(&before, kind), 0.0, "{kind}");
    }

    // The first Wait holds x's turn; N more wait in x's lane.
    let x = node
        .create(Create::new("gated", ActorId::new("lane-x").unwrap()))
        .await
        .unwrap();
    for _ in 0..=N {
        node.send(&x, &Wait).await.unwrap();
    }
    wait_until("x's handler is held with N records behind it", || {
        ran.load(Ordering::SeqCst) == 1
            && node.counters().lanes["entry"].application_queued == N as u64
    })
    .await;
    // The first Hold holds the session's turn; N more wait in its lane.
    let c = client_of(&node);
    for _ in 0..=N {
        c.packet_send(&Hold).await.unwrap();
    }
    wait_until(
        "the session's handler is held with N packets behind it",
        || {
            held.load(Ordering::SeqCst) == 1
                && node.counters().lanes["session"].application_queued == N as u64
        },
    )
    .await;

    let m = scrape(&node).await;
    assert_eq!(queued(&m, "entry", "application"), N as f64);
    assert_eq!(queued(&m, "entry", "lifecycle"), 0.0);
    assert_eq!(deepest(&m, "entry"), N as f64);
    // the Entry Spot's own lane and x's
    assert!(get(&m, r#"zlink_lanes{spot_kind="entry"}"#) >= 2.0);
    assert_eq!(queued(&m, "session", "application"), N as f64);
    assert_eq!(deepest(&m, "session"), N as f64);
    assert_eq!(get(&m, r#"zlink_lanes{spot_kind="session"}"#), 1.0);
    assert_eq!(queued(&m, "spot_wide", "application"), 0.0);
    // COUNTERS answers the same depths.
    let counters = c.counters().await.unwrap();
    assert_eq!(counters.lanes["entry"].deepest, N as u64);
    assert_eq!(counters.lanes["session"].application_queued, N as u64);

    // Released: every record runs and the depths return to 0.
    gate.add_permits(2 * (N + 1));
    wait_until("every held record ran", || {
        ran.load(Ordering::SeqCst) == N + 1 && held.load(Ordering::SeqCst) == N + 1
    })
    .await;
    wait_until("the lanes are empty", || {
        node.counters().lanes.values().all(|d| d.deepest == 0)
    })
    .await;
    let m = scrape(&node).await;
    for kind in ["entry", "session"] {
        assert_eq!(queued(&m, kind, "application"), 0.0, "{kind}");
        assert_eq!(deepest(&m, kind), 0.0, "{kind}");
    }
    c.close().await;
    node.shutdown(TIMEOUT).await;
}

// What a stranger on the metrics port can make the node hold is bounded: idle connections
// beyond `MAX_CONNECTIONS` are closed at once; once they go, scrapes are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_connections_are_bounded() {
    use zlink::node::metrics::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_HOST};
    let node = start_metrics_node().await;
    let addr = node.metrics_addr().unwrap();
    let mut idle = Vec::new();
    // From as many loopback hosts as the per-host bound needs to fill the bound in all.
    for i in 0..MAX_CONNECTIONS {
        let host = 1 + i / MAX_CONNECTIONS_PER_HOST;
        idle.push(connect_from(host as u8, addr).await);
    }
    // Accepted after the others (one accept loop, in order): no slot left, so it is closed
    // without an answer to its request.
    let spare = (1 + MAX_CONNECTIONS / MAX_CONNECTIONS_PER_HOST) as u8;
    let mut extra = connect_from(spare, addr).await;
    let _ = extra
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, extra.read_to_end(&mut answer))
        .await
        .expect("the extra connection is closed in time");
    assert!(
        answer.is_empty(),
        "the connection beyond the bound got an answer: {}",
        String::from_utf8_lossy(&answer)
    );
    drop(idle);
    // The idle connections' permits come back as the server sees them close.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut text = String::new();
        let _ = tokio::time::timeout(TIMEOUT, s.read_to_string(&mut text)).await;
        if text.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no scrape served again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    node.shutdown(TIMEOUT).await;
}

/// A TCP connection to `addr` from the loopback address 127.0.0.`host`.
async fn connect_from(host: u8, addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, host], 0)))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// A scrape from 127.0.0.`host`: the response, empty if the connection was closed unanswered.
async fn scrape_from(host: u8, addr: std::net::SocketAddr) -> String {
    let mut s = connect_from(host, addr).await;
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let mut text = String::new();
    let _ = tokio::time::timeout(TIMEOUT, s.read_to_string(&mut text))
        .await
        .expect("answered or closed in time");
    text
}

// spec: issue 26 "also" — one host cannot hold the metrics endpoint: its connections beyond
// MAX_CONNECTIONS_PER_HOST are closed at once (counted), and another host is served while it
// holds every connection it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_cannot_hold_the_metrics_endpoint() {
    use zlink::node::metrics::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_HOST};
    let node = start_metrics_node().await;
    let addr = node.metrics_addr().unwrap();
    // The attacker opens as many idle connections as the endpoint holds in all.
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        idle.push(connect_from(1, addr).await);
    }
    // Its connections beyond its bound are closed (in accept order, so by the time the last
    // of them is refused every earlier one was accepted or refused).
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while node.counters().metrics_refused["too_many_from_host"]
        < (MAX_CONNECTIONS - MAX_CONNECTIONS_PER_HOST) as u64
    {
        assert!(tokio::time::Instant::now() < deadline, "not refused");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Another host is served at once; the attacker's next connection is not.
    let text = scrape_from(2, addr).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(scrape_from(1, addr).await.is_empty());
    let c = node.counters();
    assert_eq!(
        c.metrics_refused["too_many_from_host"],
        (MAX_CONNECTIONS - MAX_CONNECTIONS_PER_HOST + 1) as u64
    );
    assert_eq!(c.metrics_refused["too_many"], 0);
    drop(idle);
    node.shutdown(TIMEOUT).await;
}

// LIST_ACTORS and LIST_SESSIONS page through the node's tables in id order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_page_in_id_order() {
    use zlink::node::protocol::{ListActors, ListSessions};
    let node = start_metrics_node().await;
    let c = client_of(&node);
    for id in ["p-3", "p-1", "p-5", "p-2", "p-4"] {
        c.create("echo", id, Placement::default()).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = c
            .list_actors(&ListActors { after, limit: 2 })
            .await
            .unwrap();
        assert_eq!(page.total, 5);
        assert!(page.actors.len() <= 2);
        seen.extend(page.actors.iter().map(|a| a.actor_id.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ["p-1", "p-2", "p-3", "p-4", "p-5"]);
    let all = c.list_actors(&ListActors::default()).await.unwrap();
    assert_eq!(all.actors.len(), 5);
    assert_eq!(all.next, None);
    assert!(all.actors.iter().all(|a| a.actor_type == "echo"
        && a.spot_kind == "entry"
        && a.object_generation == 1
        && !a.bound));

    let others = [client_of(&node), client_of(&node)];
    for o in &others {
        o.info().await.unwrap();
    }
    let first = c
        .list_sessions(&ListSessions {
            after: None,
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(first.total, 3);
    assert_eq!(first.sessions.len(), 2);
    assert!(first.sessions[0].session < first.sessions[1].session);
    let rest = c
        .list_sessions(&ListSessions {
            after: first.next,
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(rest.sessions.len(), 1);
    assert_eq!(rest.next, None);
    assert!(rest.sessions[0].session > first.sessions[1].session);
    assert!(rest.sessions.iter().all(|s| s.phase == "open"));
    c.close().await;
    for o in others {
        o.close().await;
    }
    node.shutdown(TIMEOUT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_metrics_endpoint_unless_configured() {
    let node = start_node("plain", memory_store(), vec![], None, None).await;
    assert_eq!(node.metrics_addr(), None);
    node.shutdown(TIMEOUT).await;
}
