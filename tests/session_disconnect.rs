//! Disconnect notification (SB-7, SB-14.16 … SB-14.19): the physical disconnect and the public
//! `NotifyDisconnected` of bound actors, end to end over ClientServer and RouteMesh, verified
//! through the public surface, the client's view of its connection, the counting Location
//! Store and the wire tap.
//!
//! "The binding is gone at the actor owner" is observed through the actor itself: a framework
//! CALL of `EchoPush` answers session-not-bound once the owner's binding slot is empty, and is
//! accepted (the push leaves for the session owner) while the binding is registered.

mod node_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use node_common::*;
use tokio::sync::Semaphore;
use zlink::actor::{HandlerError, Message, SpotHooks, SpotKind, SpotSpec, UserMode};
use zlink::node::Create;
use zlink::session::{FlowRecord, FlowReject};
use zlink::store::{CountingStore, MemoryStore, StoreOp};
use zlink_apps::demo::session::{Bound, NotifyDisconnected};
use zlink_apps::demo::{self, Echo, EchoPush};
use zlink_mesh::zlink_wire::BindOperation;
use zlink_mesh::{Record, TapDirection, WireTap};

use node_common::hooks::*;

/// 38 records `tap` saw sent with `operation` for `actor`.
fn sent_38(tap: &WireTap, actor: &str, operation: BindOperation) -> usize {
    tapped(tap, TapDirection::Sent, 38)
        .into_iter()
        .filter(|f| match &f.decoded {
            Ok(d) => matches!(&d.record, Record::BoundSessionBind(r)
                if r.operation == operation && r.actor.as_str() == actor),
            Err(_) => false,
        })
        .count()
}

// spec: SB-14.16
// spec: SB-7.1
// spec: SB-7.2
// spec: SB-7.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_runs_each_spots_callback_once_and_one_failure_does_not_stop_the_other() {
    let log = HookLog::default();
    // A SpotWide Spot whose callback fails for one of its actors (`d-fail`, an error) and
    // panics for another (`d-panic`): the callbacks of the Spot's other actors run behind
    // them on the same Spot lane, and every binding is still tombstoned (SB-7.2, SB-7.4).
    let shared = {
        let log = log.clone();
        SpotHooks::new().on_disconnect_actor(move |spot: String, ctx: zlink::actor::ActorCtx| {
            let log = log.clone();
            let actor = ctx.actor_ref().clone();
            async move {
                log.record(&spot, &actor);
                match actor.id().as_str() {
                    "d-fail" => Err(HandlerError::new("deliberate on_disconnect_actor failure")),
                    "d-panic" => panic!("deliberate on_disconnect_actor panic"),
                    _ => Ok(()),
                }
            }
        })
    };
    let registry = registry_with(vec![
        ("ok-spot", counting_hook(&log, false)),
        ("failing-spot", counting_hook(&log, true)),
        ("shared", shared),
    ]);
    let store = Arc::new(CountingStore::new(MemoryStore::new()));
    let (a, b, tap_a, _tb) = session_pair(store.clone(), demo::sessions(), Some(registry)).await;
    // One actor cross-node (38 over the mesh), one on the session owner itself.
    let remote = echo_in(&a, "b", "d-remote", per_actor("ok-spot")).await;
    let local = echo_in(&a, "a", "d-local", per_actor("failing-spot")).await;
    let wide = spot("shared", SpotKind::User(UserMode::SpotWide));
    let mut in_shared = Vec::new();
    for id in ["d-fail", "d-panic", "d-next-1", "d-next-2"] {
        in_shared.push(echo_in(&a, "b", id, wide.clone()).await);
    }
    let c = client_of(&a);
    // The failing Spot's actor is bound first: its notification is the first of the snapshot.
    bind(&c, &local).await;
    bind(&c, &remote).await;
    for actor in &in_shared {
        bind(&c, actor).await;
    }
    assert_eq!(
        relay_req(&c, &remote, &Echo(b"r".to_vec()))
            .await
            .unwrap()
            .0,
        b"r"
    );
    assert_eq!(
        relay_req(&c, &local, &Echo(b"l".to_vec())).await.unwrap().0,
        b"l"
    );
    let observer = client_of(&a);
    assert!(bound_at_owner(&observer, &remote).await);
    assert!(bound_at_owner(&observer, &local).await);
    let local_actors = (a.info().local_actors, b.info().local_actors);
    let lookups = store.count(StoreOp::Lookup);

    c.close().await;

    wait_until("every Spot callback ran", || {
        log.count("ok-spot", "d-remote") >= 1
            && log.count("failing-spot", "d-local") >= 1
            && ["d-fail", "d-panic", "d-next-1", "d-next-2"]
                .iter()
                .all(|id| log.count("shared", id) >= 1)
    })
    .await;
    wait_unbound_at_owner(&observer, &remote).await;
    wait_unbound_at_owner(&observer, &local).await;
    for actor in &in_shared {
        wait_unbound_at_owner(&observer, actor).await;
    }
    wait_until("the session left its owner", || a.session_count() == 1).await;

    assert_eq!(log.count("ok-spot", "d-remote"), 1);
    assert_eq!(log.count("failing-spot", "d-local"), 1);
    for id in ["d-fail", "d-panic", "d-next-1", "d-next-2"] {
        assert_eq!(log.count("shared", id), 1, "{id}");
    }
    assert_eq!(log.total(), 6, "no other Spot callback ran");
    // The cross-node notification is one 38 Disconnect over the stored route, no store lookup.
    assert_eq!(sent_38(&tap_a, "d-remote", BindOperation::Disconnect), 1);
    assert_eq!(
        store.count(StoreOp::Lookup),
        lookups,
        "disconnect read the store"
    );
    // Neither notification destroyed the actors (SB-7.6).
    assert_eq!((a.info().local_actors, b.info().local_actors), local_actors);
    assert_eq!(
        observer
            .request(&remote, &Echo(b"x".to_vec()))
            .await
            .unwrap()
            .0,
        b"x"
    );
    assert_eq!(
        observer
            .request(&local, &Echo(b"y".to_vec()))
            .await
            .unwrap()
            .0,
        b"y"
    );
}

// spec: SB-14.17
// spec: SB-7.3
// spec: SB-7.5
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_disconnected_racing_the_physical_disconnect_runs_the_callback_once() {
    let log = HookLog::default();
    let registry = registry_with(vec![("race-spot", counting_hook(&log, false))]);
    let (a, _b, tap_a, _tb) = session_pair(memory_store(), demo::sessions(), Some(registry)).await;
    let observer = client_of(&a);
    for round in 0..6 {
        // Alternate the actor owner: remote (38 over the mesh) and local (direct call).
        let owner = if round % 2 == 0 { "b" } else { "a" };
        let id = format!("race-{round}");
        let actor = echo_in(&a, owner, &id, per_actor("race-spot")).await;
        let c = client_of(&a);
        bind(&c, &actor).await;
        assert!(bound_at_owner(&observer, &actor).await);
        // One-way NotifyDisconnected, then the physical disconnect right behind it.
        c.packet_send(&NotifyDisconnected {
            actor_id: id.clone(),
        })
        .await
        .unwrap();
        c.close().await;

        wait_until("the Spot callback ran", || log.count("race-spot", &id) >= 1).await;
        wait_unbound_at_owner(&observer, &actor).await;
        wait_until("the session left its owner", || a.session_count() == 1).await;
        if owner == "b" {
            wait_until("the 38 Disconnect was sent", || {
                sent_38(&tap_a, &id, BindOperation::Disconnect) >= 1
            })
            .await;
            assert_eq!(
                sent_38(&tap_a, &id, BindOperation::Disconnect),
                1,
                "round {round}: one notification per binding identity"
            );
        }
        assert_eq!(log.count("race-spot", &id), 1, "round {round}");
        // The actor lives on.
        assert_eq!(
            observer
                .request(&actor, &Echo(b"z".to_vec()))
                .await
                .unwrap()
                .0,
            b"z"
        );
    }
    assert_eq!(log.total(), 6);
}

// spec: SB-14.18
// spec: SB-5.14
// spec: SB-7.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_disconnect_notification_the_actor_lives_and_stays_in_its_spot() {
    let log = HookLog::default();
    let registry = registry_with(vec![("wide", counting_hook(&log, false))]);
    let (a, b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), Some(registry)).await;
    let wide = spot("wide", SpotKind::User(UserMode::SpotWide));
    let m1 = echo_in(&a, "b", "m1", wide.clone()).await;
    let m2 = echo_in(&a, "b", "m2", wide.clone()).await;
    let members = b.info().local_actors;
    let c = client_of(&a);
    bind(&c, &m1).await;

    // Public NotifyDisconnected: its terminal comes after the Spot callback's terminal.
    c.packet(&NotifyDisconnected {
        actor_id: "m1".into(),
    })
    .await
    .unwrap();
    assert_eq!(log.count("wide", "m1"), 1);
    // The connection stays; the binding is gone on both sides.
    assert!(c.close_reason().is_none());
    assert!(c.packet(&Bound).await.unwrap().is_empty());
    assert!(!bound_at_owner(&c, &m1).await);
    // The actor lives, same incarnation, still a member of its Spot.
    assert_eq!(c.request(&m1, &Echo(b"a".to_vec())).await.unwrap().0, b"a");
    assert_eq!(c.get("m1").await.unwrap(), m1);
    assert_eq!(b.info().local_actors, members);
    // Joining the same Spot name with another kind is refused: the Spot (with m1 and m2 in it)
    // still exists with its SpotWide kind.
    let other = b
        .create(Create::new("echo", aid("m3")).in_spot(per_actor("wide")))
        .await;
    assert_eq!(
        other.unwrap_err().kind(),
        zlink::actor::ErrorKind::InvalidOperation,
        "the SpotWide Spot changed"
    );
    assert_eq!(c.request(&m2, &Echo(b"b".to_vec())).await.unwrap().0, b"b");

    // The physical disconnect after a new bind: same outcome.
    bind(&c, &m1).await;
    assert!(bound_at_owner(&c, &m1).await);
    c.close().await;
    wait_until("the second Spot callback ran", || {
        log.count("wide", "m1") >= 2
    })
    .await;
    let observer = client_of(&a);
    wait_unbound_at_owner(&observer, &m1).await;
    assert_eq!(log.count("wide", "m1"), 2);
    assert_eq!(log.count("wide", "m2"), 0);
    assert_eq!(
        observer.request(&m1, &Echo(b"c".to_vec())).await.unwrap().0,
        b"c"
    );
    assert_eq!(observer.get("m1").await.unwrap(), m1);
    assert_eq!(b.info().local_actors, members);
}

// spec: SB-14.19
// spec: SB-9
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnected_client_does_not_get_the_old_bindings_back() {
    let (a, _b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let echo = echo_in(&a, "b", "rc", SpotSpec::entry()).await;
    let old = client_of(&a);
    bind(&old, &echo).await;
    assert_eq!(
        relay_req(&old, &echo, &Echo(b"1".to_vec()))
            .await
            .unwrap()
            .0,
        b"1"
    );
    old.close().await;

    let new = client_of(&a);
    wait_unbound_at_owner(&new, &echo).await;
    assert!(new.packet(&Bound).await.unwrap().is_empty());
    let refused = relay_req(&new, &echo, &Echo(b"2".to_vec())).await;
    assert!(refused.is_err(), "relay without a bind: {refused:?}");
    // No push reaches the new client through the old binding.
    assert!(!bound_at_owner(&new, &echo).await);

    let bound = bind(&new, &echo).await;
    assert_eq!(bound, echo);
    assert_eq!(new.packet(&Bound).await.unwrap(), vec![echo.clone()]);
    assert_eq!(
        relay_req(&new, &echo, &Echo(b"3".to_vec()))
            .await
            .unwrap()
            .0,
        b"3"
    );
    new.request(&echo, &EchoPush(b"hi".to_vec())).await.unwrap();
    let push = new.recv_push_timeout(TIMEOUT).await.expect("push");
    assert_eq!(push.key, Echo::KEY);
    let Echo(bytes) = rmp_serde::from_slice(&push.payload.unwrap()).unwrap();
    assert_eq!(bytes, b"hi");
}

// spec: SB-7.4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_notification_tombstones_only_after_the_callback_terminal() {
    let entered = Arc::new(Semaphore::new(0));
    let release = Arc::new(Semaphore::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let hooks = {
        let (entered, release, finished) = (entered.clone(), release.clone(), finished.clone());
        SpotHooks::new().on_disconnect_actor(move |_spot, _actor| {
            let (entered, release, finished) = (entered.clone(), release.clone(), finished.clone());
            async move {
                entered.add_permits(1);
                release.acquire().await.unwrap().forget();
                finished.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
    };
    let registry = registry_with(vec![("slow", hooks)]);
    let (a, _b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), Some(registry)).await;
    let actor = echo_in(&a, "b", "held", per_actor("slow")).await;
    let c = client_of(&a);
    bind(&c, &actor).await;
    c.close().await;

    tokio::time::timeout(TIMEOUT, entered.acquire())
        .await
        .expect("the Spot callback never started")
        .unwrap()
        .forget();
    // The callback is not terminal: the actor owner still holds the binding, so the actor's
    // push is accepted and sent; the session owner, whose session is gone, drops and counts it.
    let observer = client_of(&a);
    let dropped = a
        .session_flow()
        .get(FlowRecord::Push, FlowReject::UnknownSession);
    let still_bound = bound_at_owner(&observer, &actor).await;
    let callback_done = finished.load(Ordering::SeqCst);
    release.add_permits(1);
    assert_eq!(callback_done, 0);
    assert!(
        still_bound,
        "the binding was tombstoned before the Spot callback's terminal"
    );
    wait_until("the session owner counted the push", || {
        a.session_flow()
            .get(FlowRecord::Push, FlowReject::UnknownSession)
            > dropped
    })
    .await;

    // After the terminal: tombstoned and cleaned up.
    wait_until("the callback finished", || {
        finished.load(Ordering::SeqCst) == 1
    })
    .await;
    wait_unbound_at_owner(&observer, &actor).await;
    assert_eq!(
        observer
            .request(&actor, &Echo(b"e".to_vec()))
            .await
            .unwrap()
            .0,
        b"e"
    );
}

// spec: SB-7.5
// spec: SB-7.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_from_on_disconnect_actor_reaches_the_client_that_notified() {
    // Public NotifyDisconnected: the client stays connected, so the actor's Spot callback may
    // still tell it something. Its push is checked against the binding being notified — which
    // stays until the callback's terminal, then is tombstoned — and reaches the client, never
    // refused as `binding_retired`. Both placements (a 38 over the mesh, the direct call).
    let hooks =
        SpotHooks::new().on_disconnect_actor(|_spot, ctx: zlink::actor::ActorCtx| async move {
            ctx.push(&Echo(b"goodbye".to_vec()))
                .await
                .map_err(|e| HandlerError::new(e.to_string()))
        });
    let registry = registry_with(vec![("farewell", hooks)]);
    let (a, _b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), Some(registry)).await;
    let c = client_of(&a);
    for owner in ["b", "a"] {
        let id = format!("bye-{owner}");
        let actor = echo_in(&a, owner, &id, per_actor("farewell")).await;
        bind(&c, &actor).await;
        let refused = a.session_flow().total(FlowRecord::Push);
        c.packet(&NotifyDisconnected {
            actor_id: id.clone(),
        })
        .await
        .unwrap();
        let push = c
            .recv_push_timeout(TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("{owner}: the callback's push never arrived"));
        assert_eq!(push.key, Echo::KEY);
        let Echo(bytes) = rmp_serde::from_slice(&push.payload.unwrap()).unwrap();
        assert_eq!(bytes, b"goodbye");
        assert_eq!(
            a.session_flow().total(FlowRecord::Push),
            refused,
            "{owner}: a push was refused: {:?}",
            a.session_flow().snapshot()
        );
        // After the terminal: tombstoned on both sides; the connection stays.
        assert!(c.packet(&Bound).await.unwrap().is_empty());
        assert!(!bound_at_owner(&c, &actor).await);
        assert!(c.close_reason().is_none());
    }
}

// spec: SB-7.5
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_push_that_arrives_after_the_notify_terminal_is_delivered() {
    // The Spot callback's push travels on the relay connection, the 38 terminal on the
    // completion connection: with the relay link from b delayed, the terminal (and the
    // binding's end) reaches a first. The push, sent while the binding was still registered
    // at b, is delivered all the same.
    let hooks =
        SpotHooks::new().on_disconnect_actor(|_spot, ctx: zlink::actor::ActorCtx| async move {
            ctx.push(&Echo(b"late goodbye".to_vec()))
                .await
                .map_err(|e| HandlerError::new(e.to_string()))
        });
    let store = memory_store();
    let tap_a = WireTap::new(10_000);
    let mut sb = SessionNodeSpec::new("b", demo::sessions());
    sb.registry = Some(registry_with(vec![("farewell", hooks.clone())]));
    let b = start_session_node(sb, store.clone()).await;
    let (gate, open) = tokio::sync::watch::channel(true);
    let mut to_b = b.address();
    to_b.relay = gated_proxy(&to_b.relay, open).await;
    let mut sa = SessionNodeSpec::new("a", demo::sessions());
    sa.registry = Some(registry_with(vec![("farewell", hooks)]));
    sa.tap = Some(tap_a.clone());
    sa.peers = vec![to_b];
    let a = start_session_node(sa, store).await;
    wait_pair_up(&a, &b).await;
    let c = client_of(&a);
    let actor = echo_in(&a, "b", "late-bye", per_actor("farewell")).await;
    bind(&c, &actor).await;
    gate.send(false).unwrap();
    c.packet(&NotifyDisconnected {
        actor_id: "late-bye".into(),
    })
    .await
    .unwrap();
    // The terminal is in: the binding is gone for the application.
    assert!(c.packet(&Bound).await.unwrap().is_empty());
    let pushes = tapped(&tap_a, TapDirection::Received, 36).len();
    gate.send(true).unwrap();
    let push = c
        .recv_push_timeout(TIMEOUT)
        .await
        .expect("the callback's push that arrived after the terminal");
    let Echo(bytes) = rmp_serde::from_slice(&push.payload.unwrap()).unwrap();
    assert_eq!(bytes, b"late goodbye");
    assert_eq!(
        tapped(&tap_a, TapDirection::Received, 36).len(),
        pushes + 1,
        "the push came after the terminal"
    );
    assert_eq!(a.session_flow().total(FlowRecord::Push), 0);
}
