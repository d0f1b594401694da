//! Session execution and linearisation (SB-1.5, SB-4.3, SB-5.6, SB-5.7, SB-6.8, SB-10.1, SB-13):
//! what runs where, what a bind publishes before its success is observable, and how replacement
//! cleans the old connection.

mod node_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use node_common::*;
use tokio::sync::Notify;
use zlink::actor::{ActorId, ActorRef, ActorTypeBuilder, DispatchKey, Handled, Message, SpotHooks};
use zlink::node::client::Placement;
use zlink::node::{Create, Node};
use zlink::session::{PacketError, SessionHandlers};
use zlink_apps::demo::session::{Bind, Bound};
use zlink_apps::demo::{self, Add, Echo, EchoPush};
use zlink_wire::{DisconnectReason, ErrorKind};

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Slow(u32);
impl Message for Slow {
    const KEY: DispatchKey = DispatchKey::new(500);
    type Reply = usize;
}

// spec: SB-10.1
// spec: SB-10
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_callbacks_of_one_session_never_overlap() {
    let running = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (r, m, d) = (running.clone(), max.clone(), done.clone());
    let sessions = SessionHandlers::new().packet(move |_s, Slow(n)| {
        let (r, m, d) = (r.clone(), m.clone(), d.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            for _ in 0..n {
                tokio::task::yield_now().await;
            }
            r.fetch_sub(1, Ordering::SeqCst);
            Ok(d.fetch_add(1, Ordering::SeqCst) + 1)
        }
    });
    let node = start_session_node(SessionNodeSpec::new("a", sessions), memory_store()).await;
    let c = client_of(&node);
    for i in 0..200 {
        c.packet_send(&Slow(i % 7)).await.unwrap();
    }
    // A request after the 200 one-way packets runs after all of them (one lane, FIFO).
    assert_eq!(c.packet(&Slow(0)).await.unwrap(), 201);
    assert_eq!(max.load(Ordering::SeqCst), 1, "two callbacks overlapped");
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Wait;
impl Message for Wait {
    const KEY: DispatchKey = DispatchKey::new(60);
    type Reply = ();
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Release;
impl Message for Release {
    const KEY: DispatchKey = DispatchKey::new(61);
    type Reply = ();
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct BothOnce {
    first: String,
    second: String,
}
impl Message for BothOnce {
    const KEY: DispatchKey = DispatchKey::new(501);
    type Reply = ();
}

// spec: SB-1.5
// spec: SB-5.3
// spec: SB-10.1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_actors_are_never_serialised_on_the_session_context() {
    // `waiter` blocks its turn until `releaser` has run; were the session's context running
    // actor handlers, or serialising the two actors, the second relay could never run.
    let gate = Arc::new(Notify::new());
    let mut registry = demo::registry().unwrap();
    let (g1, g2) = (gate.clone(), gate.clone());
    registry
        .register(
            ActorTypeBuilder::new("waiter", |_i, _b| Ok(()))
                .handle(move |_: &mut (), _ctx, _: Wait| {
                    let g = g1.clone();
                    Handled::later(async move {
                        g.notified().await;
                        Ok(())
                    })
                })
                .build()
                .unwrap(),
        )
        .unwrap();
    registry
        .register(
            ActorTypeBuilder::new("releaser", |_i, _b| Ok(()))
                .handle(move |_: &mut (), _ctx, _: Release| {
                    g2.notify_one();
                    Handled::ok(())
                })
                .build()
                .unwrap(),
        )
        .unwrap();
    let sessions = demo::sessions().packet(|s, b: BothOnce| async move {
        let w = s.actors().find(&ActorId::new(&b.first).unwrap()).unwrap();
        let r = s.actors().find(&ActorId::new(&b.second).unwrap()).unwrap();
        // The session callback awaits the first actor's reply while the second runs.
        let first = w.request(&Wait, Duration::from_secs(20));
        let second = r.request(&Release, Duration::from_secs(20));
        let (x, y) = tokio::join!(first, second);
        x?;
        y?;
        Ok::<(), PacketError>(())
    });
    let (a, _b, _ta, _tb) = session_pair(memory_store(), sessions, Some(registry)).await;
    let c = client_of(&a);
    let w = c.create("waiter", "w", Placement::on("a")).await.unwrap();
    let r = c.create("releaser", "r", Placement::on("b")).await.unwrap();
    bind(&c, &w).await;
    bind(&c, &r).await;
    c.packet(&BothOnce {
        first: "w".into(),
        second: "r".into(),
    })
    .await
    .unwrap();
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct BindAndPush(ActorRef);
impl Message for BindAndPush {
    const KEY: DispatchKey = DispatchKey::new(502);
    type Reply = ();
}

// spec: SB-5.6
// spec: SB-5.7
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_right_after_the_bind_sees_the_binding() {
    // In one callback: bind, then at once ask the actor to push. The actor side registered the
    // binding (and what its push path reads) before the 38 reply; the session side published
    // it before the bind's success was observable: the push is never refused.
    let sessions = demo::sessions().packet(|s, BindAndPush(actor)| async move {
        let bound = s.actors().bind(&actor).await?;
        bound
            .request(&EchoPush(b"now".to_vec()), Duration::from_secs(20))
            .await?;
        Ok::<(), PacketError>(())
    });
    let (a, _b, _ta, _tb) = session_pair(memory_store(), sessions, None).await;
    let c = client_of(&a);
    for (i, node) in ["a", "b"].iter().cycle().take(40).enumerate() {
        let e = c
            .create("echo", &format!("e{i}"), Placement::on(*node))
            .await
            .unwrap();
        c.packet(&BindAndPush(e)).await.unwrap();
        let p = c.recv_push_timeout(TIMEOUT).await.expect("the push");
        assert_eq!(p.key, Echo::KEY);
    }
    assert_eq!(a.session_flow().total(zlink::session::FlowRecord::Push), 0);
}

// spec: SB-4.3
// spec: SB-6.1
// spec: SB-4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_generations_are_compared_only_within_one_session_owner() {
    // Session owner a has handed out larger binding generations than b ever will; b's bind of
    // the same actor still replaces a's: registration is by identity, never by comparing
    // counters of different owners.
    let (a, b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let ca = client_of(&a);
    let cb = client_of(&b);
    for i in 0..5 {
        let e = ca
            .create("echo", &format!("x{i}"), Placement::on("b"))
            .await
            .unwrap();
        ca.packet(&Bind { actor: e }).await.unwrap();
    }
    let counter = ca.create("counter", "c", Placement::on("b")).await.unwrap();
    bind(&ca, &counter).await;
    bind(&cb, &counter).await;
    let n: u64 =
        rmp_serde::from_slice(&cb.packet(&relay_packet(&counter, &Add(3))).await.unwrap()).unwrap();
    assert_eq!(n, 3);
    assert_eq!(
        tokio::time::timeout(TIMEOUT, ca.closed()).await.unwrap(),
        DisconnectReason::Replaced
    );
}

fn counting_hooks(registry: &mut zlink::actor::ActorRegistry, spot: &str) -> Arc<AtomicUsize> {
    let n = Arc::new(AtomicUsize::new(0));
    let h = n.clone();
    registry.spot_hooks(
        spot,
        SpotHooks::new().on_disconnect_actor(move |_, _| {
            h.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        }),
    );
    n
}

async fn create_in(node: &Node, ty: &str, id: &str, spot: &str) -> ActorRef {
    node.create(
        Create::new(ty, ActorId::new(id).unwrap())
            .in_spot(zlink::actor::SpotSpec {
                name: spot.to_owned(),
                kind: zlink::actor::SpotKind::User(zlink::actor::UserMode::PerActor),
            })
            .on(zlink_wire::NodeRid::new("b").unwrap()),
    )
    .await
    .unwrap()
}

// spec: SB-6.8
// spec: SB-1.4
// spec: SB-6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_replaced_connection_cleans_its_other_bindings_once() {
    let mut registry = demo::registry().unwrap();
    let moved_hook = counting_hooks(&mut registry, "moved");
    let other_hook = counting_hooks(&mut registry, "other");
    let (a, _b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), Some(registry)).await;
    let moved = create_in(&a, "echo", "m", "moved").await;
    let other = create_in(&a, "echo", "o", "other").await;
    let old = client_of(&a);
    let new = client_of(&a);
    bind(&old, &moved).await;
    bind(&old, &other).await;
    bind(&new, &moved).await;
    assert_eq!(
        tokio::time::timeout(TIMEOUT, old.closed()).await.unwrap(),
        DisconnectReason::Replaced
    );
    // The old connection's other binding is notified once through the disconnect path.
    wait_until("the other actor notified", || {
        other_hook.load(Ordering::SeqCst) == 1
    })
    .await;
    // The moved actor's new binding is untouched: it still pushes to the new session.
    new.packet(&relay_packet(&moved, &EchoPush(b"still".to_vec())))
        .await
        .unwrap();
    new.recv_push_timeout(TIMEOUT)
        .await
        .expect("push to the new session");
    assert_eq!(moved_hook.load(Ordering::SeqCst), 0);
    assert_eq!(new.packet(&Bound).await.unwrap(), vec![moved]);
    // The other actor's binding was tombstoned at its owner: it has no session any more. The
    // tombstone follows the Spot callback's terminal (the binding stays current while it runs,
    // SB-7.4), so the count above may be seen a moment before it: wait for the refusal.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let e = loop {
        match a.request(&other, &EchoPush(b"x".to_vec()), TIMEOUT).await {
            Err(e) => break e,
            Ok(()) => assert!(
                tokio::time::Instant::now() < deadline,
                "the other binding was never tombstoned"
            ),
        }
    };
    assert!(e.to_string().contains("session not bound"), "{e}");
    assert_eq!(other_hook.load(Ordering::SeqCst), 1);
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Surface(ActorRef);
impl Message for Surface {
    const KEY: DispatchKey = DispatchKey::new(503);
    type Reply = Vec<String>;
}

// spec: SB-13
// spec: SB-1
// spec: SB-5.13
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_session_surface() {
    let sessions = SessionHandlers::new().packet(|s, Surface(actor)| async move {
        let mut seen = Vec::new();
        let actors = s.actors();
        assert!(actors.bound().is_empty());
        assert!(actors.find(actor.id()).is_none());
        let bound = actors.bind(&actor).await?;
        seen.push(format!("bound {}", bound.actor_ref().id()));
        assert_eq!(bound.actor_ref(), actor);
        let again = actors.bind_or_get(&actor).await?;
        assert_eq!(again.binding().generation, bound.binding().generation);
        let found = actors.find(actor.id()).expect("find");
        let reply = found
            .relay(
                Echo::KEY,
                rmp_serde::to_vec_named(&Echo(b"r".to_vec()))
                    .unwrap()
                    .into(),
                Some(Duration::from_secs(20)),
            )
            .await?
            .expect("a reply");
        let e: Echo = rmp_serde::from_slice(&reply).unwrap();
        seen.push(format!("relayed {}", String::from_utf8_lossy(&e.0)));
        assert_eq!(actors.bound().len(), 1);
        found.notify_disconnected().await?;
        assert!(actors.find(actor.id()).is_none());
        let err = found.relay(Echo::KEY, Default::default(), None).await;
        seen.push(format!(
            "after notify {:?}",
            err.map_err(|e| e.kind()).err()
        ));
        Ok::<_, PacketError>(seen)
    });
    let (a, _b, _ta, _tb) = session_pair(memory_store(), sessions, None).await;
    let c = client_of(&a);
    let echo = c.create("echo", "e", Placement::on("b")).await.unwrap();
    assert_eq!(
        c.packet(&Surface(echo)).await.unwrap(),
        vec![
            "bound e".to_owned(),
            "relayed r".to_owned(),
            format!("after notify {:?}", Some(ErrorKind::InvalidOperation)),
        ]
    );
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Tick;
impl Message for Tick {
    const KEY: DispatchKey = DispatchKey::new(504);
    type Reply = usize;
}

// spec: SB-10
// spec: SB-5
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_session_lane_applies_backpressure_and_loses_nothing() {
    // 5,000 one-way packets, far more than the session lane's 1,024 items, sent without
    // pacing: every one runs (the inbound loop waits for lane space), in order.
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let sessions = SessionHandlers::new().packet(move |_s, _: Tick| {
        let s2 = s2.clone();
        async move {
            tokio::task::yield_now().await;
            Ok(s2.fetch_add(1, Ordering::SeqCst) + 1)
        }
    });
    let node = start_session_node(SessionNodeSpec::new("a", sessions), memory_store()).await;
    let c = client_of(&node);
    for _ in 0..5_000 {
        c.packet_send(&Tick).await.unwrap();
    }
    assert_eq!(c.packet(&Tick).await.unwrap(), 5_001);
    assert_eq!(
        node.session_flow()
            .total(zlink::session::FlowRecord::Packet),
        0
    );
}

// spec: SB-10
// spec: SB-5
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_the_clients_window_through_a_full_lane_gets_every_held_credit_back() {
    // Three client windows of one-way packets through a session lane held full until a whole
    // window waits in the session's backlog: those packets kept the client's credit until
    // they entered the lane and must give it back (the backlog's drain returns it per run),
    // or the client stalls for good.
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let (open_tx, open_rx) = tokio::sync::watch::channel(false);
    let sessions = SessionHandlers::new().packet(move |_s, _: Tick| {
        let s2 = s2.clone();
        let mut open = open_rx.clone();
        async move {
            let _ = open.wait_for(|open| *open).await;
            Ok(s2.fetch_add(1, Ordering::SeqCst) + 1)
        }
    });
    let node = start_session_node(SessionNodeSpec::new("a", sessions), memory_store()).await;
    let c = client_of(&node);
    const WINDOW: u64 = 4_096; // `MeshConfig::client_window`
    const N: usize = 3 * WINDOW as usize;
    let sender = tokio::spawn(async move {
        for _ in 0..N {
            c.packet_send(&Tick).await.unwrap();
        }
        c
    });
    // The lane is full and a whole window waits in the backlog: the client cannot send more
    // until that credit comes back.
    wait_until("a window's worth of packets waits in the backlog", || {
        node.inbound_backlogs().sessions.waiting_now >= WINDOW
    })
    .await;
    open_tx.send(true).unwrap();
    let c = tokio::time::timeout(TIMEOUT, sender)
        .await
        .expect("the client stalled: held credit was not returned")
        .unwrap();
    assert_eq!(c.packet(&Tick).await.unwrap(), N + 1);
}

// spec: SB-9
// spec: SB-7
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_are_forgotten() {
    // What the session owner holds for a session ends with it: after 50 clients connected,
    // bound and left, no session remains and every binding was tombstoned at the owner.
    let (a, _b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let setup = client_of(&a);
    let echo = setup.create("echo", "e", Placement::on("b")).await.unwrap();
    for _ in 0..50 {
        let c = client_of(&a);
        bind(&c, &echo).await;
        c.close().await;
    }
    wait_until("every session gone", || a.session_count() == 1).await;
    setup.close().await;
    wait_until("no session left", || a.session_count() == 0).await;
    // The last binding was tombstoned by the disconnect path: the actor has no session.
    let mut unbound = false;
    for _ in 0..2_000 {
        let e = a.request(&echo, &EchoPush(b"x".to_vec()), TIMEOUT).await;
        if e.is_err_and(|e| e.to_string().contains("session not bound")) {
            unbound = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(unbound, "the last binding was never tombstoned");
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Hold;
impl Message for Hold {
    const KEY: DispatchKey = DispatchKey::new(505);
    type Reply = String;
}

// spec: SB-10
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_packets_drains_accepted_ones_then_closes() {
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (st, rl) = (started.clone(), release.clone());
    let sessions = SessionHandlers::new()
        .packet(move |_s, _: Hold| {
            let (st, rl) = (st.clone(), rl.clone());
            async move {
                st.notify_one();
                rl.notified().await;
                Ok("done".to_owned())
            }
        })
        .packet(|_s, _: Tick| async { Ok(0) });
    let node = start_session_node(SessionNodeSpec::new("a", sessions), memory_store()).await;
    let c = Arc::new(client_of(&node));
    let other = client_of(&node);
    // `other`'s session exists before the shutdown (a session that begins during the
    // shutdown is closed at once, see `fresh` below).
    other.packet(&Tick).await.unwrap();
    let accepted = {
        let c = c.clone();
        tokio::spawn(async move { c.packet(&Hold).await })
    };
    started.notified().await;
    let shutdown = tokio::spawn(node.clone().shutdown(3 * TIMEOUT));
    // New packets are refused while the accepted one drains.
    let refused = async {
        loop {
            match other.packet(&Tick).await {
                Err(e) if e.kind() == ErrorKind::Unavailable => return e,
                Err(e) => panic!("unexpected {e}"),
                Ok(_) => tokio::task::yield_now().await,
            }
        }
    };
    let e = tokio::time::timeout(TIMEOUT, refused).await.unwrap();
    assert!(e.to_string().contains("shutting down"), "{e}");
    assert!(
        !shutdown.is_finished(),
        "shutdown did not wait for the accepted packet"
    );
    // A new session is not accepted during the shutdown: closed with `Shutdown`.
    let fresh = client_of(&node);
    assert_eq!(
        fresh.packet(&Tick).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(
        tokio::time::timeout(TIMEOUT, fresh.closed()).await.unwrap(),
        DisconnectReason::Shutdown
    );
    release.notify_one();
    assert_eq!(accepted.await.unwrap().unwrap(), "done");
    drop(node);
    tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        tokio::time::timeout(TIMEOUT, c.closed()).await.unwrap(),
        DisconnectReason::Shutdown
    );
}

// spec: SB-10.1
// spec: SB-1 (the session callback is the application's entry: connected, packets, disconnected)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connected_runs_first_and_disconnected_last_on_the_session_lane() {
    let log = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let sessions = SessionHandlers::new()
        .on_connected(move |s| {
            let l1 = l1.clone();
            async move {
                // A slow first turn: packets that arrive meanwhile wait behind it.
                for _ in 0..50 {
                    tokio::task::yield_now().await;
                }
                l1.lock().unwrap().push(format!("connected {}", s.rid()));
                Ok(())
            }
        })
        .packet(move |s, Slow(n)| {
            let l2 = l2.clone();
            async move {
                l2.lock().unwrap().push(format!("packet {n} {}", s.rid()));
                Ok(n as usize)
            }
        })
        .on_disconnected(move |s| {
            let (l3, done_tx) = (l3.clone(), done_tx.clone());
            async move {
                l3.lock().unwrap().push(format!("disconnected {}", s.rid()));
                let _ = done_tx.send(());
                Ok(())
            }
        });
    let node = start_session_node(SessionNodeSpec::new("a", sessions), memory_store()).await;
    let c = client_of(&node);
    for n in 1..=3 {
        c.packet_send(&Slow(n)).await.unwrap();
    }
    assert_eq!(c.packet(&Slow(4)).await.unwrap(), 4);
    // One-way packets sent right before the close are accepted and run before the
    // disconnected-callback: nothing accepted is lost.
    for n in 5..=40 {
        c.packet_send(&Slow(n)).await.unwrap();
    }
    c.close().await;
    done_rx.recv().await.unwrap();
    let log = log.lock().unwrap().clone();
    let rid = log[0].split(' ').nth(1).unwrap().to_owned();
    let mut expected = vec![format!("connected {rid}")];
    expected.extend((1..=40).map(|n| format!("packet {n} {rid}")));
    expected.push(format!("disconnected {rid}"));
    assert_eq!(log, expected);
}

// spec: SB-10 (a node that is shutting down refuses new bindings of its actors)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_owner_shutting_down_refuses_new_binds() {
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (st, rl) = (started.clone(), release.clone());
    let sessions = demo::sessions().packet(move |_s, _: Hold| {
        let (st, rl) = (st.clone(), rl.clone());
        async move {
            st.notify_one();
            rl.notified().await;
            Ok("done".to_owned())
        }
    });
    let (a, b, _ta, _tb) = session_pair(memory_store(), sessions, None).await;
    let c = client_of(&a);
    let echo = c.create("echo", "e", Placement::on("b")).await.unwrap();
    // A packet on b keeps b draining while the bind arrives.
    let cb = Arc::new(client_of(&b));
    let held = {
        let cb = cb.clone();
        tokio::spawn(async move { cb.packet(&Hold).await })
    };
    started.notified().await;
    let shutdown = tokio::spawn(b.clone().shutdown(3 * TIMEOUT));
    let refused = async {
        loop {
            match c
                .packet(&Bind {
                    actor: echo.clone(),
                })
                .await
            {
                Err(e) if e.kind() == ErrorKind::Unavailable => return e,
                Err(e) => panic!("unexpected {e}"),
                // Bound before b stopped accepting: let it go and try again.
                Ok(_) => {
                    c.packet(&zlink_apps::demo::session::Unbind {
                        actor_id: "e".into(),
                    })
                    .await
                    .unwrap();
                    tokio::task::yield_now().await;
                }
            }
        }
    };
    tokio::time::timeout(TIMEOUT, refused).await.unwrap();
    assert!(
        b.session_flow().get(
            zlink::session::FlowRecord::Bind,
            zlink::session::FlowReject::ShuttingDown
        ) >= 1
    );
    release.notify_one();
    let _ = held.await;
    drop(b);
    tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .unwrap()
        .unwrap();
}

// spec: SB-5.11 (the owner-lease part: a stored route is valid only within the current owner
// lease; the local admission deadline during a store outage is issue 10's)
// spec: SB-5.10
// spec: SB-4.1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_ends_with_its_owner_lease_and_is_never_re_resolved() {
    let counting = Arc::new(zlink::store::CountingStore::new(
        zlink::store::MemoryStore::new(),
    ));
    let store: Arc<dyn zlink::store::LocationStore> = counting.clone();
    let mut sb = SessionNodeSpec::new("b", demo::sessions());
    sb.lease_ttl = Some(Duration::from_secs(3));
    let b = start_session_node(sb, store.clone()).await;
    let mut sa = SessionNodeSpec::new("a", demo::sessions());
    sa.peers = vec![b.address()];
    let a = start_session_node(sa, store.clone()).await;
    assert!(a.wait_peers(TIMEOUT).await.is_empty());
    let c = client_of(&a);
    let counter = c.create("counter", "c", Placement::on("b")).await.unwrap();
    bind(&c, &counter).await;
    let n: u64 =
        rmp_serde::from_slice(&c.packet(&relay_packet(&counter, &Add(1))).await.unwrap()).unwrap();
    assert_eq!(n, 1);
    // b's lease ends (superseded in the store): b ends its incarnations at its next renewal.
    let old = b.lease().holder.lease_generation;
    store.release_owner(b.lease().holder).await.unwrap();
    wait_until("b registered a new lease", || {
        b.lease().holder.lease_generation != old
    })
    .await;
    let lookups = counting.count(zlink::store::StoreOp::Lookup);
    let e = c
        .packet(&relay_packet(&counter, &Add(1)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    // The session owner did not look for another owner.
    assert_eq!(counting.count(zlink::store::StoreOp::Lookup), lookups);
}

// What one client can make its session owner hold is bounded: bindings per session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_at_most_its_binding_limit() {
    let mut spec = SessionNodeSpec::new("a", demo::sessions());
    spec.max_bindings = Some(2);
    let node = start_session_node(spec, memory_store()).await;
    let c = client_of(&node);
    let mut refs = Vec::new();
    for i in 0..3 {
        refs.push(
            c.create("echo", &format!("e{i}"), Placement::default())
                .await
                .unwrap(),
        );
    }
    bind(&c, &refs[0]).await;
    bind(&c, &refs[1]).await;
    let e = c
        .packet(&Bind {
            actor: refs[2].clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidOperation);
    assert_eq!(
        node.session_flow().get(
            zlink::session::FlowRecord::Bind,
            zlink::session::FlowReject::TooManyBindings
        ),
        1
    );
    // An operator sees it through NODE_INFO.
    let info = c.info().await.unwrap();
    assert_eq!(info.sessions, 1);
    assert_eq!(info.session_rejects.get("bind/too_many_bindings"), Some(&1));
    // Unbinding makes room again; other sessions have their own limit.
    c.packet(&zlink_apps::demo::session::Unbind {
        actor_id: "e0".into(),
    })
    .await
    .unwrap();
    bind(&c, &refs[2]).await;
    let other = client_of(&node);
    bind(&other, &refs[0]).await;
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct StaleHandle(ActorRef);
impl Message for StaleHandle {
    const KEY: DispatchKey = DispatchKey::new(506);
    type Reply = Vec<String>;
}

// spec: SB-4.1
// spec: SB-6.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_of_a_retired_binding_never_acts_on_the_current_one() {
    let sessions = SessionHandlers::new().packet(|s, StaleHandle(actor)| async move {
        let old = s.actors().bind(&actor).await?;
        old.unbind().await?;
        let current = s.actors().bind(&actor).await?;
        assert_ne!(old.binding().generation, current.binding().generation);
        let mut seen = Vec::new();
        let kind = |r: Result<(), zlink::session::SessionError>| {
            format!("{:?}", r.err().map(|e| e.kind()))
        };
        seen.push(kind(old.send(&Add(1)).await));
        seen.push(kind(old.unbind().await));
        seen.push(kind(old.notify_disconnected().await));
        // The current binding is untouched and still relays.
        assert_eq!(s.actors().bound().len(), 1);
        let n = current.request(&Add(1), Duration::from_secs(20)).await?;
        seen.push(format!("current {n}"));
        Ok::<_, PacketError>(seen)
    });
    let (a, _b, _ta, _tb) = session_pair(memory_store(), sessions, None).await;
    let c = client_of(&a);
    let counter = c.create("counter", "c", Placement::on("b")).await.unwrap();
    let invalid = format!("{:?}", Some(ErrorKind::InvalidOperation));
    assert_eq!(
        c.packet(&StaleHandle(counter)).await.unwrap(),
        vec![
            invalid.clone(),
            invalid.clone(),
            invalid,
            "current 1".to_owned()
        ]
    );
}

// spec: SB-5.9
// spec: SB-6.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_binds_and_relays_are_counted_at_the_actor_owner() {
    use zlink::session::{FlowRecord, FlowReject};
    let (a, b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let c = client_of(&a);
    let counter = c.create("counter", "c", Placement::on("b")).await.unwrap();
    // Another incarnation: refused and counted by b.
    let mut v = serde_json::to_value(&counter).unwrap();
    v["object_generation"] = serde_json::json!(counter.object_generation().get() + 9);
    let other: ActorRef = serde_json::from_value(v).unwrap();
    assert_eq!(
        c.packet(&Bind { actor: other }).await.unwrap_err().kind(),
        ErrorKind::InvalidOperation
    );
    assert_eq!(
        b.session_flow()
            .get(FlowRecord::Bind, FlowReject::ObjectGenerationMismatch),
        1
    );
    // A relay request to a destroyed incarnation: refused, answered and counted by b.
    bind(&c, &counter).await;
    c.destroy(&counter).await.unwrap();
    assert_eq!(
        c.packet(&relay_packet(&counter, &Add(1)))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        b.session_flow()
            .get(FlowRecord::Relay, FlowReject::ActorGone),
        1
    );
}
