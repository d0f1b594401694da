//! Inbound isolation (issue 10, head-of-line blocking): a full lane holds only what is
//! addressed to it, in a bounded, counted backlog, and every other target's records keep
//! flowing; nothing accepted is lost. Shown by counts (`Node::inbound_backlogs`, handler runs),
//! never by timing: each "keeps flowing" is a reply that arrives while the blocked target is
//! provably still blocked with records waiting for it.

mod node_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use node_common::*;
use tokio::sync::Semaphore;
use zlink::actor::{ActorRegistry, ActorTypeBuilder, Create, Handled, Message};
use zlink::node::client::Placement;
use zlink::node::{Node, NodeOptions};
use zlink::session::SessionHandlers;
use zlink::store::LocationStore;
use zlink_apps::demo;
use zlink_apps::demo::{Add, Get};
use zlink_mesh::{DispatchKey, InboundWindow, MeshConfig, OutboundBudget, PeerAddress};
use zlink_wire::ActorId;

/// The application lane's item limit of the nodes here: small, so a lane fills at once.
const LANE_ITEMS: usize = 16;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Wait;
impl Message for Wait {
    const KEY: DispatchKey = DispatchKey::new(700);
    type Reply = ();
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Ping;
impl Message for Ping {
    const KEY: DispatchKey = DispatchKey::new(701);
    type Reply = u32;
}

/// The demo types plus `gated`: `Wait` counts its run, then holds the actor's turn until a
/// permit of `gate` is there; `Ping` answers at once.
fn registry(gate: &Arc<Semaphore>, ran: &Arc<AtomicUsize>) -> ActorRegistry {
    let (gate, ran) = (gate.clone(), ran.clone());
    let mut r = demo::registry().unwrap();
    r.register(
        ActorTypeBuilder::new("gated", |_info, _init| Ok(()))
            .handle(move |_s: &mut (), _ctx, _: Wait| {
                ran.fetch_add(1, Ordering::SeqCst);
                let gate = gate.clone();
                Handled::later(async move {
                    gate.acquire().await.unwrap().forget();
                    Ok(())
                })
            })
            .handle(|_s: &mut (), _ctx, _: Ping| Handled::ok(7))
            .build()
            .unwrap(),
    )
    .unwrap();
    r
}

async fn start(
    name: &str,
    store: Arc<dyn LocationStore>,
    peers: Vec<PeerAddress>,
    registry: ActorRegistry,
    sessions: Option<SessionHandlers>,
) -> Node {
    start_with(name, store, peers, registry, sessions, |_| {}).await
}

async fn start_with(
    name: &str,
    store: Arc<dyn LocationStore>,
    peers: Vec<PeerAddress>,
    registry: ActorRegistry,
    sessions: Option<SessionHandlers>,
    mesh: impl FnOnce(&mut MeshConfig),
) -> Node {
    let mut mc = mesh_config(name);
    mesh(&mut mc);
    let mut options = if let Some(s) = sessions {
        mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
        NodeOptions::new(mc, store, registry)
            .with_sessions(s)
            .unwrap()
    } else {
        NodeOptions::new(mc, store, registry)
    }
    .with_client_access(zlink::node::access::ClientAccess::open());
    options.peers = peers;
    options.lanes.application_items = LANE_ITEMS;
    Node::start(options).await.unwrap()
}

fn id(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

// spec: EG-2.1 (each actor's payloads go to its own queue: another actor's full queue is not
// theirs to wait behind)
// spec: EG-6.3 (a full queue never runs work inline, and nothing accepted is dropped)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_full_actor_lane_does_not_hold_up_records_for_other_actors() {
    let gate = Arc::new(Semaphore::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let store = memory_store();
    let b = start("b", store.clone(), vec![], registry(&gate, &ran), None).await;
    let a = start("a", store, vec![b.address()], registry(&gate, &ran), None).await;
    wait_pair_up(&a, &b).await;
    let x = a
        .create(Create::new("gated", id("x")).on(rid("b")))
        .await
        .unwrap();
    let y = a
        .create(Create::new("gated", id("y")).on(rid("b")))
        .await
        .unwrap();
    // x's first Wait holds its turn; the next LANE_ITEMS fill its lane; the rest wait in x's
    // backlog on b (the relay connection's window is far larger).
    let sends = 4 * LANE_ITEMS;
    for _ in 0..sends {
        a.send(&x, &Wait).await.unwrap();
    }
    wait_until("records for x wait in its backlog", || {
        b.inbound_backlogs().actors.waiting_now > 0
    })
    .await;
    // Records for y, from the same peer over the same connection, are served meanwhile.
    for _ in 0..3 * LANE_ITEMS {
        assert_eq!(a.request(&y, &Ping, TIMEOUT).await.unwrap(), 7);
    }
    // Still blocked: x ran its first record only, and records for x still wait.
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let held = b.inbound_backlogs().actors;
    assert!(held.waiting_now > 0, "{held:?}");
    assert_eq!(held.opened, 1, "only x's lane was full: {held:?}");
    assert_eq!(held.refused, 0, "{held:?}");
    // Released: every record for x runs, in order behind the backlog; none was lost.
    gate.add_permits(sends);
    wait_until("every Wait for x ran", || {
        ran.load(Ordering::SeqCst) == sends
    })
    .await;
    assert_eq!(a.request(&x, &Ping, TIMEOUT).await.unwrap(), 7);
    wait_until("x's backlog is empty", || {
        b.inbound_backlogs().actors.waiting_now == 0
    })
    .await;
    let held = b.inbound_backlogs().actors;
    assert!(held.waited > 0, "{held:?}");
    assert_eq!(b.counters().sends_dropped, 0);
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Hold;
impl Message for Hold {
    const KEY: DispatchKey = DispatchKey::new(710);
    type Reply = ();
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Tick;
impl Message for Tick {
    const KEY: DispatchKey = DispatchKey::new(711);
    type Reply = usize;
}

// spec: SB-10.1 (a session's callbacks run on its own lane: one session's full lane is not
// another's)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_full_session_lane_does_not_hold_up_other_sessions() {
    let gate = Arc::new(Semaphore::new(0));
    let held_runs = Arc::new(AtomicUsize::new(0));
    let (g, h) = (gate.clone(), held_runs.clone());
    let ticks = Arc::new(AtomicUsize::new(0));
    let t = ticks.clone();
    let sessions = SessionHandlers::new()
        .packet(move |_s, _: Hold| {
            let (g, h) = (g.clone(), h.clone());
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                g.acquire().await.unwrap().forget();
                Ok(())
            }
        })
        .packet(move |_s, _: Tick| {
            let t = t.clone();
            async move { Ok(t.fetch_add(1, Ordering::SeqCst) + 1) }
        });
    let gate_unused = Arc::new(Semaphore::new(0));
    let ran_unused = Arc::new(AtomicUsize::new(0));
    let a = start(
        "a",
        memory_store(),
        vec![],
        registry(&gate_unused, &ran_unused),
        Some(sessions),
    )
    .await;
    let blocked = client_of(&a);
    let other = client_of(&a);
    // One packet of `blocked` holds its session's turn, LANE_ITEMS fill its lane, the rest
    // wait in its backlog (its client's window, 4,096 records, holds far more).
    let packets = 8 * LANE_ITEMS;
    for _ in 0..packets {
        blocked.packet_send(&Hold).await.unwrap();
    }
    wait_until("packets of the blocked session wait in its backlog", || {
        a.inbound_backlogs().sessions.waiting_now > 0
    })
    .await;
    // Another session's packets are served meanwhile.
    for i in 1..=3 * LANE_ITEMS {
        assert_eq!(other.packet(&Tick).await.unwrap(), i);
    }
    assert_eq!(held_runs.load(Ordering::SeqCst), 1);
    let held = a.inbound_backlogs().sessions;
    assert!(held.waiting_now > 0, "{held:?}");
    assert_eq!(held.opened, 1, "only one session's lane was full: {held:?}");
    // Released: every packet of the blocked session runs, then its next one; none was lost.
    gate.add_permits(packets);
    assert_eq!(blocked.packet(&Tick).await.unwrap(), 3 * LANE_ITEMS + 1);
    assert_eq!(held_runs.load(Ordering::SeqCst), packets);
    wait_until("the session's backlog is empty", || {
        a.inbound_backlogs().sessions.waiting_now == 0
    })
    .await;
    assert_eq!(
        a.session_flow().total(zlink::session::FlowRecord::Packet),
        0
    );
}

/// Long enough that a held peer is not declared down, nor a waiting send timed out, while
/// the test looks (the hold itself is released as soon as the checks are done).
fn patient(c: &mut MeshConfig) {
    c.liveness.peer_timeout = TIMEOUT;
    c.liveness.heartbeat_timeout = TIMEOUT;
    c.liveness.heartbeat_ttl = TIMEOUT;
    c.send_timeout = TIMEOUT;
}

// The stalled-peer half of issue 10's head-of-line item: client sends to an actor on a peer
// whose I/O is stalled wait for that peer only; a client's request to another node is served
// meanwhile, and once the peer reads again every send arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_peer_holds_up_only_what_is_addressed_to_it() {
    let store = memory_store();
    let (g, r) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
    let b = start_with("b", store.clone(), vec![], registry(&g, &r), None, patient).await;
    // c grants a small window: a few records in flight to it and its sender must wait.
    const WINDOW: u64 = 16;
    const BUDGET: u64 = 16;
    let c = start_with("c", store.clone(), vec![], registry(&g, &r), None, |m| {
        patient(m);
        m.peer_window = InboundWindow {
            messages: WINDOW as u32,
            bytes: 1 << 20,
        };
    })
    .await;
    let a = start_with(
        "a",
        store,
        vec![b.address(), c.address()],
        registry(&g, &r),
        Some(SessionHandlers::new()),
        |m| {
            patient(m);
            m.peer_budget = OutboundBudget {
                messages: BUDGET,
                bytes: 1 << 20,
            };
        },
    )
    .await;
    assert!(a.wait_peers(TIMEOUT).await.is_empty(), "peers down");
    let client = client_of(&a);
    let slow = client
        .create("counter", "slow", Placement::on("c"))
        .await
        .unwrap();
    let fast = client
        .create("counter", "fast", Placement::on("b"))
        .await
        .unwrap();
    // c's I/O thread stops: no credit comes back from it, a's budget for it fills up.
    let hold = c.mesh().hold_io_for_tests();
    let sends = 200;
    for _ in 0..sends {
        client.send(&slow, &Add(1)).await.unwrap();
    }
    // At most WINDOW sends went out to c (its credit) and BUDGET wait admitted in a's send
    // queue; the rest wait in c's backlog. Once more than WINDOW wait there, the backlog can
    // no longer run empty (what c's remaining credit lets out is less), so its episode stays
    // open: before that, a send that left within the credit may let the backlog drain and
    // open again, which is timing, not isolation.
    wait_until("client sends wait for c", || {
        a.inbound_backlogs().peer_sends.waiting_now >= sends - WINDOW - BUDGET
    })
    .await;
    let before = a.inbound_backlogs().peer_sends;
    // Records of the same client for another node are served meanwhile.
    for i in 1..=LANE_ITEMS as u64 {
        assert_eq!(client.request(&fast, &Add(1)).await.unwrap(), i);
    }
    let waiting = a.inbound_backlogs().peer_sends;
    assert!(waiting.waiting_now > 0, "c was released early: {waiting:?}");
    assert_eq!(
        waiting.opened, before.opened,
        "only c's sends waited: {before:?} then {waiting:?}"
    );
    drop(hold);
    // Every send reaches c's actor once c reads again (the request may overtake queued sends:
    // it is not one of them, so look until the total is there).
    let mut total = 0;
    for _ in 0..2_000 {
        total = a.request(&slow, &Get, TIMEOUT).await.unwrap();
        if total == sends {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(total, sends);
    assert_eq!(a.counters().sends_dropped, 0);
    wait_until("c's send queue is empty", || {
        a.inbound_backlogs().peer_sends.waiting_now == 0
    })
    .await;
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct PushSeq {
    from: u32,
    n: u32,
    pad: u32,
}
impl Message for PushSeq {
    const KEY: DispatchKey = DispatchKey::new(720);
    type Reply = ();
}

/// What a `pusher` actor pushes: a sequence number and padding (so that a few dozen pushes
/// fill the socket buffers between the node and a client that does not read).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Seq {
    i: u32,
    #[serde(with = "serde_bytes")]
    pad: Vec<u8>,
}
impl Message for Seq {
    const KEY: DispatchKey = DispatchKey::new(721);
    type Reply = ();
}

/// The demo types plus `pusher`: `PushSeq { from, n, pad }` pushes `Seq` from..from+n, each
/// with `pad` bytes, to its bound session, in order.
fn pusher_registry() -> ActorRegistry {
    let mut r = demo::registry().unwrap();
    r.register(
        ActorTypeBuilder::new("pusher", |_info, _init| Ok(()))
            .handle(|_s: &mut (), ctx, PushSeq { from, n, pad }| {
                let ctx = ctx.clone();
                Handled::later(async move {
                    for i in from..from + n {
                        ctx.push(&Seq {
                            i,
                            pad: vec![0x5a; pad as usize],
                        })
                        .await
                        .map_err(|e| zlink::actor::HandlerError::new(e.to_string()))?;
                    }
                    Ok(())
                })
            })
            .handle(|_s: &mut (), _ctx, _: Ping| Handled::ok(7))
            .build()
            .unwrap(),
    )
    .unwrap();
    r
}

fn seq_of(p: &zlink_mesh::Push) -> u32 {
    assert_eq!(p.key, Seq::KEY);
    rmp_serde::from_slice::<Seq>(p.payload.as_deref().unwrap_or_default())
        .unwrap()
        .i
}

// A client that does not read (grants no credit) holds up only its own pushes: they wait in
// its session's push queue on the session owner (bounded, counted), while another client of
// the same node, whose actor pushes over the same peer connection, keeps receiving its pushes
// and its requests are served; once the stalled client reads again, every push arrives, in
// order.
// spec: SB-5.5 (the session owner submits a push to the real connection: when that connection
// has no credit, the push waits for it, without holding up other sessions)
// spec: SB-5.9 (no push is lost or refused meanwhile: nothing counted rejected)
// spec: EG-6.3 (a full queue never runs work inline, and nothing accepted is dropped)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_credit_holds_up_only_its_own_pushes() {
    let store = memory_store();
    let b = start_with(
        "b",
        store.clone(),
        vec![],
        pusher_registry(),
        Some(demo::sessions()),
        patient,
    )
    .await;
    let a = start_with(
        "a",
        store,
        vec![b.address()],
        pusher_registry(),
        Some(demo::sessions()),
        |m| {
            patient(m);
            // Few of the stalled client's pushes in flight, so it stalls soon; 32 small pushes
            // at once always fit.
            m.client_budget = OutboundBudget {
                messages: 4096,
                bytes: 256 << 10,
            };
            m.transport.send_hwm = 16;
        },
    )
    .await;
    wait_pair_up(&a, &b).await;
    let endpoint = a.endpoints().client.clone().unwrap();
    let mut cfg = zlink_mesh::ClientConfig::new(&endpoint);
    cfg.push_capacity = 4;
    cfg.transport.recv_hwm = 4;
    let stalled = zlink::node::client::NodeClient::connect_with(cfg, TIMEOUT).unwrap();
    let other = client_of(&a);
    let slow = stalled
        .create("pusher", "slow", Placement::on("b"))
        .await
        .unwrap();
    let fast = other
        .create("pusher", "fast", Placement::on("b"))
        .await
        .unwrap();
    bind(&stalled, &slow).await;
    bind(&other, &fast).await;
    // `stalled` takes no push: its channel, its socket buffers and its budget on a fill, then
    // the pushes of its actor wait on a, in its session's queue. They are large (64 KiB): the
    // kernel may grow the connection's send buffer later (up to `tcp_wmem`'s 4 MiB), which
    // must not be able to take all that waits (at least 128 × 64 KiB = 8 MiB).
    const BATCH: u32 = 32;
    const LARGE: u32 = 64 << 10;
    let mut pushed = 0;
    // (The kernel's socket buffers take a varying amount first: push until a few batches wait.)
    while a.inbound_backlogs().pushes.waiting_now < u64::from(4 * BATCH) {
        assert!(pushed < 2_000, "the client never stalled");
        a.request(
            &slow,
            &PushSeq {
                from: pushed,
                n: BATCH,
                pad: LARGE,
            },
            TIMEOUT,
        )
        .await
        .unwrap();
        pushed += BATCH;
    }
    let before = a.inbound_backlogs().pushes;
    // The other client receives its pushes, in order, and is served, meanwhile.
    let mut next = 0;
    for round in 0..4 {
        other
            .request(
                &fast,
                &PushSeq {
                    from: next,
                    n: BATCH,
                    pad: 16,
                },
            )
            .await
            .unwrap();
        for _ in 0..BATCH {
            let p = other.recv_push_timeout(TIMEOUT).await.expect("a push");
            assert_eq!(seq_of(&p), next, "round {round}");
            next += 1;
        }
        assert_eq!(other.request(&fast, &Ping).await.unwrap(), 7);
        // (Not `stalled`'s: its replies queue behind the pushes it has not taken, EG-4.)
    }
    // Still stalled: pushes of `stalled` wait, in one session's queue only.
    let held = a.inbound_backlogs().pushes;
    assert!(
        held.waiting_now > 0,
        "the stalled client was released: {held:?}"
    );
    assert_eq!(
        held.opened, before.opened,
        "no other session's pushes waited, the stalled queue stayed: {before:?} → {held:?}"
    );
    assert_eq!(held.refused, 0, "{held:?}");
    // It reads again: every push arrives, in order, none lost.
    for i in 0..pushed {
        let p = stalled.recv_push_timeout(TIMEOUT).await.expect("a push");
        assert_eq!(seq_of(&p), i);
    }
    wait_until("the push queue is empty", || {
        a.inbound_backlogs().pushes.waiting_now == 0
    })
    .await;
    let held = a.inbound_backlogs().pushes;
    assert!(held.waited > 0, "{held:?}");
    assert_eq!(
        a.session_flow().total(zlink::session::FlowRecord::Push),
        0,
        "no push refused"
    );
}
