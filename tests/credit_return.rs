//! Every record that ends on the node gives its receive-window charge back (issue 26, "every
//! path that ends a record — stale, refused, expired, failed decode after charge, backlog
//! refusal — gives its window charge back, and a test walks each path").
//!
//! One node `b` under test, driven from outside: clients over its client port (a `NodeClient`
//! and a raw ZeroMQ DEALER that ignores its window) and a raw mesh peer `p` over its relay
//! port. Each drop path is walked while the actors and session lanes it targets are held, so
//! records wait above the mesh with their credit charged; then everything is let go. The proof
//! reads b's own wire tap: for each connection, the FlowCredit (138) b granted beyond the
//! initial window equals, in records and in bytes, every application record b received from
//! it. A record whose charge leaked keeps that sum short for ever (the check waits for it with
//! the usual 20 s guard). While the lanes are held the same sum is seen short, so it measures
//! what it claims.

mod node_common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use node_common::*;
use zlink::actor::{ActorRef, ActorRegistry, ActorTypeBuilder, Handled, Message};
use zlink::node::access::{ClientAccess, ClientOperation, ClientPolicy};
use zlink::node::client::Placement;
use zlink::node::protocol::{self, CallActor};
use zlink::node::{Node, NodeOptions};
use zlink::session::SessionHandlers;
use zlink_apps::demo;
use zlink_mesh::{
    DispatchKey, DropReason, InboundWindow, LinkKind, MeshConfig, MeshNode, ReplyOrigin,
    RequestError, TapDirection, WireTap,
};
use zlink_wire::{CorrelationId, Deadline, ErrorKind, Record};

/// Both windows of b: small, so a held window's worth is a few dozen records.
const WINDOW: InboundWindow = InboundWindow {
    messages: 64,
    bytes: 1 << 20,
};
/// The application lane's item limit (actors and sessions): small, so lanes fill at once.
const LANE_ITEMS: usize = 4;
/// A session's framework operations in flight.
const OPS: usize = 2;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Wait;
impl Message for Wait {
    const KEY: DispatchKey = DispatchKey::new(700);
    type Reply = ();
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Ping(u32);
impl Message for Ping {
    const KEY: DispatchKey = DispatchKey::new(701);
    type Reply = u32;
}

/// A session packet that holds its session's lane until the gate opens.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Hold;
impl Message for Hold {
    const KEY: DispatchKey = DispatchKey::new(1);
    type Reply = ();
}

/// A session packet answered at once.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Echo(u32);
impl Message for Echo {
    const KEY: DispatchKey = DispatchKey::new(2);
    type Reply = u32;
}

type Gate = tokio::sync::watch::Receiver<bool>;

/// The demo types plus `gated`: `Wait` holds the actor's turn until the gate opens, `Ping`
/// answers at once.
fn registry(gate: &Gate) -> ActorRegistry {
    let gate = gate.clone();
    let mut r = demo::registry().unwrap();
    r.register(
        ActorTypeBuilder::new("gated", |_info, _init| Ok(()))
            .handle(move |_s: &mut (), _ctx, _: Wait| {
                let mut gate = gate.clone();
                Handled::later(async move {
                    let _ = gate.wait_for(|open| *open).await;
                    Ok(())
                })
            })
            .handle(|_s: &mut (), _ctx, Ping(n)| Handled::ok(n))
            .build()
            .unwrap(),
    )
    .unwrap();
    r
}

fn sessions(gate: &Gate) -> SessionHandlers {
    let gate = gate.clone();
    SessionHandlers::new()
        .packet(move |_s, Hold| {
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok(())
            }
        })
        .packet(|_s, Echo(n)| async move { Ok(n) })
}

fn patient(c: &mut MeshConfig) {
    c.liveness.peer_timeout = TIMEOUT * 3;
    c.liveness.heartbeat_timeout = TIMEOUT * 3;
    c.liveness.heartbeat_ttl = TIMEOUT * 3;
    c.send_timeout = TIMEOUT;
}

/// What one connection sent b (application records: envelope + payload bytes, what b charges
/// to its window) and what b granted it (FlowCredit), as b's tap saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Credit {
    records: i64,
    bytes: i64,
    granted_records: i64,
    granted_bytes: i64,
}

impl Credit {
    /// Records and bytes charged to the window and not given back: (0, 0) when the whole
    /// window is back (the first grant is the window itself).
    fn outstanding(&self) -> (i64, i64) {
        (
            self.records - (self.granted_records - i64::from(WINDOW.messages)),
            self.bytes - (self.granted_bytes - WINDOW.bytes as i64),
        )
    }
}

/// Application records a sender's window is charged for.
fn charged(command: u8) -> bool {
    matches!(command, 24 | 36 | 38 | 42 | 44 | 51 | 144 | 147 | 160)
}

/// Per connection (a client's routing id; for the peer, which dialled b, the routing ids of
/// its relay and completion connections), from b's tap: application records received
/// (`received_on`) and FlowCredit sent (`granted_on`).
fn credit(tap: &WireTap, received_on: LinkKind, granted_on: LinkKind) -> HashMap<Bytes, Credit> {
    let mut by: HashMap<Bytes, Credit> = HashMap::new();
    assert_eq!(tap.overflowed(), 0, "the tap must hold the whole test");
    for f in tap.frames() {
        let Some(command) = f.command() else { continue };
        if f.direction == TapDirection::Received && f.link == received_on && charged(command) {
            let c = by.entry(f.peer.clone()).or_default();
            c.records += 1;
            c.bytes += f.frames.iter().map(|p| p.len() as i64).sum::<i64>();
        } else if f.direction == TapDirection::Sent
            && f.link == granted_on
            && let Ok(d) = &f.decoded
            && let Record::FlowCredit(g) = &d.record
        {
            let c = by.entry(f.peer.clone()).or_default();
            c.granted_records += i64::from(g.messages);
            c.granted_bytes += g.bytes as i64;
        }
    }
    by
}

/// The peer p's records (relay) and grants (completion), its only connections to b.
fn peer_credit(tap: &WireTap) -> Credit {
    credit(tap, LinkKind::Relay, LinkKind::Completion)
        .values()
        .fold(Credit::default(), |a, c| Credit {
            records: a.records + c.records,
            bytes: a.bytes + c.bytes,
            granted_records: a.granted_records + c.granted_records,
            granted_bytes: a.granted_bytes + c.granted_bytes,
        })
}

/// Waits until every connection of b on the client port and the peer `p` have their whole
/// window back.
async fn wait_whole_windows_back(tap: &WireTap, clients: usize) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let c = credit(tap, LinkKind::Client, LinkKind::Client);
        let p = peer_credit(tap);
        let back = c.len() == clients
            && c.values().all(|c| c.outstanding() == (0, 0))
            && p.outstanding() == (0, 0);
        if back {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a window was not given back: clients {c:?}, peer {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A `CALL` of `key` with a message body that does not decode.
fn undecodable_call(actor: &ActorRef, key: DispatchKey) -> Bytes {
    let p = CallActor {
        actor: actor.clone(),
        key: key.get(),
        payload: b"\xc1".to_vec(),
        timeout_ms: 0,
    };
    Bytes::from(rmp_serde::to_vec_named(&p).unwrap())
}

fn call_of<M: Message>(actor: &ActorRef, msg: &M, timeout_ms: u32) -> Bytes {
    let p = CallActor {
        actor: actor.clone(),
        key: M::KEY.get(),
        payload: rmp_serde::to_vec(msg).unwrap(),
        timeout_ms,
    };
    Bytes::from(rmp_serde::to_vec_named(&p).unwrap())
}

/// `actor` as if it lived on node `node` in `generation`.
fn moved(actor: &ActorRef, node: &str, generation: u64) -> ActorRef {
    let mut v = serde_json::to_value(actor).unwrap();
    v["location"]["node"] = node.into();
    v["location"]["node_generation"] = generation.into();
    serde_json::from_value(v).unwrap()
}

/// The error kind of a client request's outcome.
fn kind_of(r: Result<zlink_mesh::Response, RequestError>) -> Option<ErrorKind> {
    match r {
        Ok(_) => None,
        Err(RequestError::Remote { kind, .. }) => Some(kind),
        Err(e) => panic!("not answered by the node: {e}"),
    }
}

// Issue 26 item "every path that ends a record gives its window charge back, and a test walks
// each path": refused (authorization, `busy`, stale generation, fences), expired (deadline
// passed before dispatch), backlog refusal (actor backlog full), failed decode after charge,
// CreditExceeded, and records that waited in an actor's or a session's backlog — from clients
// and from a mesh peer; afterwards each connection has its whole window back.
// spec: SB-2.1 (every drop counted), EG-1.2 (the window is its own limit)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_path_that_ends_a_record_gives_its_window_back() {
    let (open, gate) = tokio::sync::watch::channel(false);
    let tap = WireTap::new(400_000);
    let mut mc = mesh_config("b");
    patient(&mut mc);
    mc.tap = Some(tap.clone());
    mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
    mc.client_window = WINDOW;
    mc.peer_window = WINDOW;
    // Everything is allowed but DESTROY: the authorization refusal.
    let policy = ClientPolicy::Custom(Arc::new(|r: &zlink::node::access::AccessRequest<'_>| {
        r.operation != ClientOperation::Destroy
    }));
    let mut access = ClientAccess::new();
    access.policy = policy;
    access.max_operations_per_session = OPS;
    let mut options = NodeOptions::new(mc, memory_store(), registry(&gate))
        .with_sessions(sessions(&gate))
        .unwrap()
        .with_client_access(access);
    options.lanes.application_items = LANE_ITEMS;
    let b = Node::start(options).await.unwrap();
    let b_gen = b.mesh().generation().get();

    // The raw peer p: a member of the mesh that sends b whatever records it likes.
    let mut pc = mesh_config("p");
    patient(&mut pc);
    let (p, mut p_inbound) = MeshNode::start(pc).unwrap();
    let p = Arc::new(p);
    p.connect(b.address()).unwrap();
    assert!(
        p.wait_peer_up(&rid("b"), None, TIMEOUT).await.is_some(),
        "b up at p"
    );
    let b_rid = rid("b");

    let client = Arc::new(client_of(&b));
    let g1 = client
        .create("gated", "g1", Placement::on("b"))
        .await
        .unwrap();
    let g2 = client
        .create("gated", "g2", Placement::on("b"))
        .await
        .unwrap();
    let mc = client.mesh_client();

    // ---- a client's records --------------------------------------------------------------
    // Refused by the authorization.
    let destroy = Bytes::from(
        rmp_serde::to_vec_named(&protocol::DestroyActor { actor: g1.clone() }).unwrap(),
    );
    let r = mc.request(protocol::DESTROY, destroy, TIMEOUT).await;
    assert_eq!(kind_of(r), Some(ErrorKind::InvalidOperation), "denied");
    // Failed decode after charge: a framework operation's body, and a typed packet's.
    let r = mc
        .request(protocol::CALL, Bytes::from_static(b"\xc1junk"), TIMEOUT)
        .await;
    assert!(kind_of(r).is_some(), "a CALL body that does not decode");
    let r = mc
        .request(Echo::KEY, Bytes::from_static(b"\xc1junk"), TIMEOUT)
        .await;
    assert_eq!(kind_of(r), Some(ErrorKind::InvalidOperation), "packet body");
    let r = mc
        .request(protocol::CALL, undecodable_call(&g1, Ping::KEY), TIMEOUT)
        .await;
    assert!(kind_of(r).is_some(), "a CALL whose message does not decode");
    // Stale generation: a ref to p in a generation p does not have (refused before any send).
    let stale = moved(&g1, "p", p.generation().get() + 1);
    let r = mc
        .request(protocol::CALL, call_of(&stale, &Ping(2), 0), TIMEOUT)
        .await;
    assert_eq!(kind_of(r), Some(ErrorKind::Unavailable), "stale ref");
    // Busy: OPS calls to an actor "on p" wait for p's answer; one more is refused.
    let on_p = moved(&g1, "p", p.generation().get());
    let waiting: Vec<_> = (0..OPS)
        .map(|i| {
            let c = client.clone();
            let body = call_of(&on_p, &Ping(i as u32), 0);
            tokio::spawn(
                async move { c.mesh_client().request(protocol::CALL, body, TIMEOUT).await },
            )
        })
        .collect();
    let mut held_at_p = Vec::new();
    while held_at_p.len() < OPS {
        let m = tokio::time::timeout(TIMEOUT, p_inbound.recv())
            .await
            .expect("b forwards the calls to p")
            .expect("p's inbound open");
        held_at_p.push(m.reply.expect("a request"));
    }
    let r = mc
        .request(protocol::CALL, call_of(&on_p, &Ping(9), 0), TIMEOUT)
        .await;
    assert_eq!(kind_of(r), Some(ErrorKind::Unavailable), "busy");
    assert!(
        b.counters().client_refusals["call/busy"] >= 1,
        "{:?}",
        b.counters().client_refusals
    );
    // Expired and backlog refusal: g1's turn is held; calls with a short deadline fill its
    // lane and backlog, the rest are refused at once (the actor's backlog is full).
    client.send(&g1, &Wait).await.unwrap();
    let mut expiring = Vec::new();
    for i in 0..(2 * LANE_ITEMS) {
        let c = client.clone();
        let body = call_of(&g1, &Ping(i as u32), 100);
        expiring.push(tokio::spawn(async move {
            c.mesh_client().request(protocol::CALL, body, TIMEOUT).await
        }));
    }
    wait_until("g1's backlog is full", || {
        b.inbound_backlogs().actors.waiting_now >= LANE_ITEMS as u64
    })
    .await;
    let mut full = 0;
    for _ in 0..4 {
        let r = mc
            .request(protocol::CALL, call_of(&g1, &Ping(99), 100), TIMEOUT)
            .await;
        if kind_of(r) == Some(ErrorKind::Unavailable) {
            full += 1;
        }
    }
    assert!(full >= 1, "the actor's backlog refused calls");
    // Session packets that wait in the session's lane and backlog, their credit held.
    let held_packets: Vec<_> = (0..(3 * LANE_ITEMS))
        .map(|_| {
            let c = client.clone();
            let body = Bytes::from(rmp_serde::to_vec(&Hold).unwrap());
            tokio::spawn(async move { c.mesh_client().request(Hold::KEY, body, TIMEOUT).await })
        })
        .collect();

    // ---- a raw client that ignores its window: CreditExceeded ----------------------------
    let zctx = zmq::Context::new();
    let raw = zctx.socket(zmq::DEALER).unwrap();
    raw.set_linger(0).unwrap();
    raw.connect(b.endpoints().client.as_ref().unwrap()).unwrap();
    let hold = Bytes::from(rmp_serde::to_vec(&Hold).unwrap());
    let frames = zlink_wire::encode(
        &Record::OneWay(zlink_wire::OneWay { key: Hold::KEY }),
        CorrelationId::NONE,
        Some(hold),
    )
    .unwrap()
    .into_vec();
    let over = 20;
    for _ in 0..(WINDOW.messages as usize + over) {
        raw.send_multipart(frames.iter().map(|f| f.to_vec()), 0)
            .unwrap();
    }
    wait_until("the raw client's excess is dropped", || {
        b.mesh().counters().dropped(DropReason::CreditExceeded) >= 1
    })
    .await;

    // ---- a peer's records --------------------------------------------------------------
    let call = |actor: &ActorRef, key: DispatchKey, target: u64, deadline: Option<Duration>| {
        Record::ActorCall(zlink_wire::ActorCall {
            actor: actor.id().clone(),
            object_generation: actor.object_generation(),
            authority_owner_generation: actor.location().authority_owner_generation,
            owner_lease_generation: actor.location().owner_lease_generation,
            target_node_generation: zlink_wire::NodeGeneration::new(target),
            key,
            deadline: deadline.map(Deadline::from_remaining),
        })
    };
    let ping = || Some(Bytes::from(rmp_serde::to_vec(&Ping(5)).unwrap()));
    // Answered at once, and the kinds the owner gives.
    let ok = p
        .request_record(
            &b_rid,
            call(&g2, Ping::KEY, b_gen, Some(TIMEOUT)),
            ping(),
            TIMEOUT,
        )
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    // Stale target generation (dropped by b's mesh, answered Unavailable).
    let r = p
        .request_record(
            &b_rid,
            call(&g2, Ping::KEY, b_gen + 1, Some(TIMEOUT)),
            ping(),
            TIMEOUT,
        )
        .await;
    assert_eq!(kind_of(r), Some(ErrorKind::Unavailable), "stale");
    p.send_record(&b_rid, call(&g2, Ping::KEY, b_gen + 1, None), ping())
        .await
        .unwrap();
    // Refused by the fences: another incarnation, an actor b does not own.
    let other = {
        let mut v = serde_json::to_value(&g2).unwrap();
        v["object_generation"] = (g2.object_generation().get() + 7).into();
        serde_json::from_value::<ActorRef>(v).unwrap()
    };
    let r = p
        .request_record(
            &b_rid,
            call(&other, Ping::KEY, b_gen, Some(TIMEOUT)),
            ping(),
            TIMEOUT,
        )
        .await;
    assert!(kind_of(r).is_some(), "another incarnation");
    let nobody = {
        let mut v = serde_json::to_value(&g2).unwrap();
        v["actor_id"] = "nobody".into();
        serde_json::from_value::<ActorRef>(v).unwrap()
    };
    p.send_record(&b_rid, call(&nobody, Ping::KEY, b_gen, None), ping())
        .await
        .unwrap();
    // Failed decode after charge: a message body the handler cannot read.
    let r = p
        .request_record(
            &b_rid,
            call(&g2, Ping::KEY, b_gen, Some(TIMEOUT)),
            Some(Bytes::from_static(b"\xc1")),
            TIMEOUT,
        )
        .await;
    assert!(kind_of(r).is_some(), "undecodable message");
    // A relay through a binding b never made, and a push to a session b does not have.
    let loc = g2.location();
    p.send_record(
        &b_rid,
        Record::ActorSend(zlink_wire::ActorSend {
            actor: g2.id().clone(),
            object_generation: g2.object_generation(),
            authority_owner_generation: loc.authority_owner_generation,
            owner_lease_generation: loc.owner_lease_generation,
            session_lifecycle: 1.into(),
            key: Ping::KEY,
            deadline: None,
            tail: zlink_wire::BoundSessionTail {
                binding_generation: 1.into(),
                session_sequence: 1.into(),
            },
        }),
        ping(),
    )
    .await
    .unwrap();
    p.send_record(
        &b_rid,
        Record::BoundSessionSend(zlink_wire::BoundSessionSend {
            actor: g2.id().clone(),
            object_generation: g2.object_generation(),
            source_node_generation: zlink_wire::NodeGeneration::new(b_gen),
            authority_owner_generation: loc.authority_owner_generation,
            session_lifecycle: b_gen.into(),
            session: zlink_wire::SessionRid::new(424_242),
            binding_generation: 1.into(),
            key: Ping::KEY,
        }),
        ping(),
    )
    .await
    .unwrap();
    // Expired: g2's turn is held; requests with a short deadline wait in its lane and backlog
    // (their credit held) past their deadline.
    p.send_record(
        &b_rid,
        call(&g2, Wait::KEY, b_gen, None),
        Some(Bytes::from(rmp_serde::to_vec(&Wait).unwrap())),
    )
    .await
    .unwrap();
    let expiring_at_p = 3 * LANE_ITEMS;
    let short = Duration::from_millis(100);
    let peer_expired = b
        .mesh()
        .counters()
        .replies(ReplyOrigin::Peer, Some(ErrorKind::DeadlineExceeded));
    let mut at_p = Vec::new();
    for i in 0..expiring_at_p {
        let p = p.clone();
        let rec = call(&g2, Ping::KEY, b_gen, Some(short));
        let body = Some(Bytes::from(rmp_serde::to_vec(&Ping(i as u32)).unwrap()));
        let b_rid = b_rid.clone();
        at_p.push(tokio::spawn(async move {
            p.request_record(&b_rid, rec, body, short).await
        }));
    }
    for r in at_p {
        // p gives up at its deadline; b still holds them.
        let _ = r.await.unwrap();
    }

    // Everything above has reached b (each deadline is at most 100 ms after b received its
    // record, and b received it before its tap shows it).
    let sent_at_p = 1 + expiring_at_p; // the Wait and the short requests, last of p's records
    let before = 8; // the records of p above
    wait_until("b received p's records", || {
        peer_credit(&tap).records >= before + sent_at_p as i64
    })
    .await;
    let seen = Instant::now();
    // While the lanes are held, records wait with their credit charged: the sums are short.
    let held_peer = peer_credit(&tap).outstanding();
    assert!(
        held_peer.0 > 0,
        "p's waiting records hold credit: {held_peer:?}"
    );
    wait_until("both clients' waiting packets hold credit", || {
        let c = credit(&tap, LinkKind::Client, LinkKind::Client);
        c.values().filter(|c| c.outstanding().0 > 0).count() == 2
    })
    .await;
    // Past every deadline (a wait for the deadlines themselves, not for a race).
    tokio::time::sleep_until((seen + Duration::from_millis(150)).into()).await;

    // ---- let everything go ---------------------------------------------------------------
    open.send(true).unwrap();
    for reply in held_at_p {
        reply.reply(Bytes::from(rmp_serde::to_vec(&0u32).unwrap()));
    }
    for w in waiting {
        w.await.unwrap().expect("the calls p held are answered");
    }
    let mut expired = 0;
    for e in expiring {
        if kind_of(e.await.unwrap()) == Some(ErrorKind::DeadlineExceeded) {
            expired += 1;
        }
    }
    assert!(expired >= 1, "a client's call expired before it ran");
    for h in held_packets {
        h.await.unwrap().expect("a held packet ran");
    }
    wait_until("p's calls expired at b", || {
        b.mesh()
            .counters()
            .replies(ReplyOrigin::Peer, Some(ErrorKind::DeadlineExceeded))
            > peer_expired
    })
    .await;

    wait_whole_windows_back(&tap, 2).await;
    let drops = b.mesh().counters();
    assert!(drops.dropped(DropReason::StaleGeneration) >= 2);
    assert!(drops.dropped(DropReason::CreditExceeded) >= (over - LANE_ITEMS - 1) as u64);
    b.shutdown(TIMEOUT).await;
    if let Ok(p) = Arc::try_unwrap(p) {
        p.shutdown().await;
    }
}
