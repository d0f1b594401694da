//! Inline delivery (`docs/RUNTIME.md`, "Inline delivery"): a record the mesh I/O thread receives
//! for an idle lane — a client packet for its session's lane, a 24 for its actor's lane — runs
//! its turn right on that thread, in the application domain (EG-13), within a time budget per
//! receive pass; a record that finds its lane busy queues behind what waits (EG-6.3), so order
//! per sender is kept. Verified through the public surface: where handlers ran (thread names,
//! the domain marker), what they saw, and what the client got back.

mod node_common;

use std::sync::Arc;
use std::time::Duration;

use node_common::*;
use zlink::actor::{
    ActorId, ActorRef, ActorRegistry, ActorTypeBuilder, DispatchKey, Handled, Message,
};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node, NodeOptions};
use zlink::runtime::Domain;
use zlink::session::SessionHandlers;
use zlink::store::LocationStore;
use zlink_apps::demo::{self, session::RelaySend};

/// Where the handler that got it ran: the thread's name and the runtime domain.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Where;
impl Message for Where {
    const KEY: DispatchKey = DispatchKey::new(700);
    type Reply = (String, bool);
}

/// The session packet twin of [`Where`].
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct SessionWhere;
impl Message for SessionWhere {
    const KEY: DispatchKey = DispatchKey::new(701);
    type Reply = (String, bool);
}

/// One of a numbered flood; every 50th handler waits once (its turn goes on in a drain, the lane
/// stays busy meanwhile).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Seq(u64);
impl Message for Seq {
    const KEY: DispatchKey = DispatchKey::new(702);
    type Reply = ();
}

/// What the flood's actor saw: (records, all in order, records run on a mesh I/O thread).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Seen;
impl Message for Seen {
    const KEY: DispatchKey = DispatchKey::new(703);
    type Reply = (u64, bool, u64);
}

/// Panics in its handler.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Boom;
impl Message for Boom {
    const KEY: DispatchKey = DispatchKey::new(704);
    type Reply = ();
}

/// Spawns a task from its handler and answers what the task sent back.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Spawn;
impl Message for Spawn {
    const KEY: DispatchKey = DispatchKey::new(705);
    type Reply = u32;
}

fn here() -> (String, bool) {
    let name = std::thread::current().name().unwrap_or("").to_owned();
    (
        name,
        zlink::runtime::current_domain() == Some(Domain::Application),
    )
}

fn on_io_thread() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("zlink-mesh-"))
}

#[derive(Default)]
struct Flood {
    next: u64,
    in_order: bool,
    inline: u64,
}

fn registry() -> ActorRegistry {
    let mut r = demo::registry().unwrap();
    r.register(
        ActorTypeBuilder::new("probe", |_i, _b| {
            Ok(Flood {
                in_order: true,
                ..Flood::default()
            })
        })
        .handle(|_: &mut Flood, _ctx, _: Where| Handled::ok(here()))
        .handle(|f: &mut Flood, _ctx, Seq(n)| {
            f.in_order &= n == f.next;
            f.next = n + 1;
            f.inline += u64::from(on_io_thread());
            if n % 50 == 49 {
                Handled::later(async {
                    tokio::task::yield_now().await;
                    Ok(())
                })
            } else {
                Handled::ok(())
            }
        })
        .handle(|f: &mut Flood, _ctx, _: Seen| Handled::ok((f.next, f.in_order, f.inline)))
        .handle(|_: &mut Flood, _ctx, _: Boom| -> Handled<()> { panic!("boom") })
        .handle(|_: &mut Flood, _ctx, _: Spawn| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _ = tx.send(7u32);
            });
            Handled::later(async move { Ok(rx.await.unwrap_or(0)) })
        })
        .build()
        .unwrap(),
    )
    .unwrap();
    r
}

fn sessions() -> SessionHandlers {
    demo::sessions().packet(|_s, _: SessionWhere| async move { Ok(here()) })
}

async fn start(
    name: &'static str,
    store: Arc<dyn LocationStore>,
    peers: Vec<zlink_mesh::PeerAddress>,
    budget: Duration,
) -> Node {
    let mut mc = mesh_config(name);
    mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
    let mut o = NodeOptions::new(mc, store, registry())
        .with_sessions(sessions())
        .unwrap();
    o.peers = peers;
    o.inline_delivery_budget = budget;
    Node::start(o).await.unwrap()
}

/// Relays `Seq(0)`, …, `Seq(n - 1)` one way to `actor` (the demo `RelaySend` packet).
async fn send_seq(client: &NodeClient, actor: &ActorRef, n: u64) {
    for i in 0..n {
        client
            .packet_send(&RelaySend {
                actor_id: actor.id().to_string(),
                key: Seq::KEY.get(),
                payload: rmp_serde::to_vec_named(&Seq(i)).unwrap(),
            })
            .await
            .unwrap();
    }
}

/// Nodes a (the session owner) and b (the actor's owner), a client of a bound to a `probe`
/// actor on b.
async fn setup(budget: Duration) -> (Node, Node, NodeClient, ActorRef) {
    let store = memory_store();
    let b = start("b", store.clone(), vec![], budget).await;
    let a = start("a", store, vec![b.address()], budget).await;
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(Create::new("probe", ActorId::new("p1").unwrap()).on(b.node_rid().clone()))
        .await
        .unwrap();
    let client = client_of(&a);
    bind(&client, &actor).await;
    (a, b, client, actor)
}

// spec: EG-12
// spec: EG-13
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_for_idle_lanes_run_on_the_io_thread_that_received_them() {
    let (a, _b, client, actor) = setup(Duration::from_millis(1)).await;
    // The actor's turn (a 24 from a) ran on b's mesh I/O thread, in the application domain.
    let (thread, app) = relay_req(&client, &actor, &Where).await.unwrap();
    assert_eq!(thread, "zlink-mesh-b");
    assert!(app, "an inline turn runs in the application domain");
    // The session's packet turn ran on a's mesh I/O thread. A new session, whose lane nothing
    // has used (the app has no connected-callback): the first client's lane may still be
    // ending the relay request's turn on a lane worker when its answer reached the client,
    // and a packet that finds its lane busy queues (as it must).
    let fresh = client_of(&a);
    let (thread, app) = fresh.packet(&SessionWhere).await.unwrap();
    assert_eq!(thread, "zlink-mesh-a");
    assert!(app);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_budget_runs_every_record_on_the_lane_runtimes_workers() {
    let (_a, _b, client, actor) = setup(Duration::ZERO).await;
    let (thread, app) = relay_req(&client, &actor, &Where).await.unwrap();
    assert!(!thread.starts_with("zlink-mesh-"), "ran on {thread}");
    assert!(app);
    let (thread, _) = client.packet(&SessionWhere).await.unwrap();
    assert!(!thread.starts_with("zlink-mesh-"), "ran on {thread}");
}

// spec: EG-6.3
// spec: EG-2.1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_that_find_their_lane_busy_queue_behind_it_in_order() {
    let (_a, _b, client, actor) = setup(Duration::from_millis(1)).await;
    let n = 3_000u64;
    send_seq(&client, &actor, n).await;
    // The request goes behind the flood (one client, one session lane, one actor lane).
    let (seen, in_order, inline) = relay_req(&client, &actor, &Seen).await.unwrap();
    assert_eq!(seen, n, "every record ran once");
    assert!(in_order, "a record overtook one that waited");
    assert!(inline > 0, "the first record found the lane idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_inline_handler_fails_its_record_and_the_io_thread_serves_on() {
    let (_a, _b, client, actor) = setup(Duration::from_millis(1)).await;
    assert!(relay_req(&client, &actor, &Boom).await.is_err());
    let (thread, _) = relay_req(&client, &actor, &Where).await.unwrap();
    assert_eq!(thread, "zlink-mesh-b", "b's I/O thread still runs turns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_handler_may_spawn_tasks_and_wait_for_them() {
    let (_a, _b, client, actor) = setup(Duration::from_millis(1)).await;
    assert_eq!(relay_req(&client, &actor, &Spawn).await.unwrap(), 7);
}

// A receive pass that ran consecutive records of one lane inline keeps the gate's right
// between them (a held inline run) and gives it back when the pass ends, before its thread
// sleeps: a record another thread submits to that lane afterwards runs at once.
// spec: EG-6.3
// spec: EG-2.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_right_kept_between_inline_records_is_released_when_the_pass_ends() {
    let (_a, b, client, actor) = setup(Duration::from_millis(1)).await;
    let n = 200u64;
    send_seq(&client, &actor, n).await;
    let (seen, in_order, _) = relay_req(&client, &actor, &Seen).await.unwrap();
    assert_eq!(seen, n);
    assert!(in_order);
    // Two records in a row on b's I/O thread: the second one's right is kept to the pass's end.
    for _ in 0..2 {
        let (thread, _) = relay_req(&client, &actor, &Where).await.unwrap();
        assert_eq!(thread, "zlink-mesh-b");
    }
    // b's I/O thread is idle now; a request from b itself goes through the actor's lane.
    let (thread, app) = tokio::time::timeout(TIMEOUT, b.request(&actor, &Where, TIMEOUT))
        .await
        .expect("the lane's right was not given back at the end of the pass")
        .unwrap();
    assert!(!thread.starts_with("zlink-mesh-"), "ran on {thread}");
    assert!(app);
    let (seen, in_order, _) = relay_req(&client, &actor, &Seen).await.unwrap();
    assert_eq!(seen, n);
    assert!(in_order);
}
