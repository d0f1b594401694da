//! Graceful shutdown (SB-10): stop accepting, drain accepted work until the deadline, close.

mod node_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use node_common::*;
use tokio::sync::Semaphore;
use zlink::actor::{ActorId, ErrorKind, SpotHooks, SpotKind, SpotSpec, UserMode};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node, NodeOptions};
use zlink::session::{FlowRecord, FlowReject};
use zlink_apps::demo::{self, Add, EchoPush, Get};
use zlink_mesh::zlink_wire::{BindOperation, DisconnectReason};
use zlink_mesh::{Record, TapDirection};

async fn node_with_clients(name: &str) -> Node {
    let mut mc = mesh_config(name);
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    Node::start(
        NodeOptions::new(mc, memory_store(), demo::registry().unwrap())
            .with_client_access(zlink::node::access::ClientAccess::open()),
    )
    .await
    .unwrap()
}

// spec: SB-10 (shutdown rejects new work, drains accepted work until a deadline, then closes)
#[tokio::test]
async fn shutdown_refuses_new_work_and_drains_accepted_work() {
    let node = node_with_clients("n").await;
    let endpoint = node.endpoints().client.clone().unwrap();
    let c = node
        .create(Create::new("counter", ActorId::new("c").unwrap()))
        .await
        .unwrap();
    let client = NodeClient::connect(&endpoint, TIMEOUT).unwrap();
    assert_eq!(client.request(&c, &Add(1)).await.unwrap(), 1);
    // Accept a request that cannot run yet.
    node.set_application_paused(true);
    let turns = node.counters().turns;
    let accepted = tokio::spawn({
        let client = NodeClient::connect(&endpoint, TIMEOUT).unwrap();
        let c = c.clone();
        async move { client.request(&c, &Add(1)).await }
    });
    wait_until("the accepted request's turn", || {
        node.counters().turns > turns
    })
    .await;
    let handle = node.clone();
    // a drain deadline well past every wait below: the drain ends when the accepted work does
    let shutdown = tokio::spawn(node.shutdown(3 * TIMEOUT));
    // New client work is refused while draining (NODE_INFO is answered inline, so it shows
    // when the node stopped accepting).
    let refused = async {
        loop {
            match client.info().await {
                Err(e) if e.kind() == ErrorKind::Unavailable => return e,
                Err(e) => panic!("unexpected {e}"),
                Ok(_) => tokio::task::yield_now().await,
            }
        }
    };
    let e = tokio::time::timeout(TIMEOUT, refused).await.unwrap();
    assert!(e.to_string().contains("shutting down"), "{e}");
    assert_eq!(
        client.request(&c, &Get).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert!(
        !shutdown.is_finished(),
        "shutdown did not wait for accepted work"
    );
    // The accepted request still completes once the application runs again.
    handle.set_application_paused(false);
    drop(handle);
    assert_eq!(accepted.await.unwrap().unwrap(), 2);
    tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .unwrap()
        .unwrap();
}

/// A Spot hook that counts its runs, tells `entered` and waits for `release`.
fn held_hook(
    runs: &Arc<AtomicUsize>,
    entered: &Arc<Semaphore>,
    release: &Arc<Semaphore>,
) -> SpotHooks {
    let (runs, entered, release) = (runs.clone(), entered.clone(), release.clone());
    SpotHooks::new().on_disconnect_actor(move |_spot, _ctx| {
        let (runs, entered, release) = (runs.clone(), entered.clone(), release.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            entered.add_permits(1);
            release.acquire().await.unwrap().forget();
            Ok(())
        }
    })
}

// spec: SB-10 (shutdown drains session cleanup until the deadline, then closes connections)
// spec: SB-7.1
// spec: SB-7.4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_runs_each_sessions_disconnect_cleanup_before_it_closes_the_connection() {
    let (runs, entered, release) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Semaphore::new(0)),
        Arc::new(Semaphore::new(0)),
    );
    let mut registry = demo::registry().unwrap();
    registry.spot_hooks("watched", held_hook(&runs, &entered, &release));
    let (a, b, tap_a, _tb) = session_pair(memory_store(), demo::sessions(), Some(registry)).await;
    // The actor lives on b; the session on a.
    let actor = b
        .create(
            Create::new("echo", ActorId::new("kept").unwrap()).in_spot(SpotSpec {
                name: "watched".into(),
                kind: SpotKind::User(UserMode::PerActor),
            }),
        )
        .await
        .unwrap();
    let c = client_of(&a);
    bind(&c, &actor).await;
    let observer = client_of(&b);
    observer
        .request(&actor, &EchoPush(b"p".to_vec()))
        .await
        .unwrap();

    let shutdown = tokio::spawn(a.shutdown(3 * TIMEOUT));
    // The actor owner's callback runs while a drains: the session's connection is still open.
    tokio::time::timeout(TIMEOUT, entered.acquire())
        .await
        .expect("OnDisconnectActor never ran")
        .unwrap()
        .forget();
    assert_eq!(
        tapped(&tap_a, TapDirection::Sent, 38)
            .iter()
            .filter(|f| matches!(&f.decoded, Ok(d) if matches!(&d.record,
                Record::BoundSessionBind(r) if r.operation == BindOperation::Disconnect
                    && r.actor.as_str() == "kept")))
            .count(),
        1,
        "one 38 Disconnect over the stored route"
    );
    assert_eq!(
        c.close_reason(),
        None,
        "closed before the cleanup's terminal"
    );
    assert!(
        !shutdown.is_finished(),
        "shutdown did not wait for the cleanup"
    );
    release.add_permits(1);

    // Then the connection closes, with reason Shutdown.
    let reason = tokio::time::timeout(TIMEOUT, c.closed()).await.unwrap();
    assert_eq!(reason, DisconnectReason::Shutdown);
    tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .unwrap()
        .unwrap();
    // The binding is tombstoned at the actor owner: the actor's push is refused and counted.
    let refused = b.session_flow().get(FlowRecord::Push, FlowReject::NotBound);
    let e = observer
        .request(&actor, &EchoPush(b"q".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidOperation, "{e}");
    assert_eq!(
        b.session_flow().get(FlowRecord::Push, FlowReject::NotBound),
        refused + 1
    );
    // Exactly once, also after b saw a go (its lifecycle gone: nothing left to end).
    wait_until("a is down at b", || {
        b.mesh().peer_generation(&rid("a")).is_none()
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(b.counters().bindings_owner_lost, 0);
}
