//! Disconnect notification (SB-7, SB-14.16 … SB-14.19): the physical disconnect and the public
//! `NotifyDisconnected` of bound actors, end to end over ClientServer and RouteMesh, verified
//! through the public surface, the client's view of its connection, the counting Location
//! Store and the wire tap.
//!
//! "The binding is gone at the actor owner" is observed through the actor itself: a framework
//! CALL of `EchoPush` answers session-not-bound once the owner's binding slot is empty, and is
//! accepted (the push leaves for the session owner) while the binding is registered.

mod node_common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use node_common::*;
use tokio::sync::Semaphore;
use zlink::actor::{
    ActorId, ActorRef, ActorRegistry, HandlerError, Message, SpotHooks, SpotKind, SpotSpec,
    UserMode,
};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node};
use zlink::session::{FlowRecord, FlowReject};
use zlink::store::{CountingStore, MemoryStore, StoreOp};
use zlink_apps::demo::session::{Bound, NotifyDisconnected};
use zlink_apps::demo::{self, Echo, EchoPush};
use zlink_mesh::zlink_wire::BindOperation;
use zlink_mesh::{Record, TapDirection, WireTap};

fn spot(name: &str, kind: SpotKind) -> SpotSpec {
    SpotSpec {
        name: name.to_owned(),
        kind,
    }
}

fn per_actor(name: &str) -> SpotSpec {
    spot(name, SpotKind::User(UserMode::PerActor))
}

/// How often each Spot's `OnDisconnectActor` ran, by (Spot, actor id).
#[derive(Clone, Default)]
struct HookLog(Arc<Mutex<HashMap<(String, String), usize>>>);

impl HookLog {
    fn record(&self, spot: &str, actor: &ActorRef) {
        *self
            .0
            .lock()
            .unwrap()
            .entry((spot.to_owned(), actor.id().to_string()))
            .or_default() += 1;
    }

    fn count(&self, spot: &str, actor: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .get(&(spot.to_owned(), actor.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }
}

/// A hook that counts its runs and then succeeds (`fail == false`) or fails.
fn counting_hook(log: &HookLog, fail: bool) -> SpotHooks {
    let log = log.clone();
    SpotHooks::new().on_disconnect_actor(move |spot: String, ctx: zlink::actor::ActorCtx| {
        let log = log.clone();
        let actor = ctx.actor_ref().clone();
        async move {
            log.record(&spot, &actor);
            if fail {
                Err(HandlerError::new("deliberate on_disconnect_actor failure"))
            } else {
                Ok(())
            }
        }
    })
}

fn registry_with(hooks: Vec<(&str, SpotHooks)>) -> ActorRegistry {
    let mut r = demo::registry().unwrap();
    for (name, h) in hooks {
        r.spot_hooks(name, h);
    }
    r
}

fn aid(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

/// Creates an `echo` actor `id` on `owner` in `spot` (through `via`'s public `Node::create`).
async fn echo_in(via: &Node, owner: &str, id: &str, spot: SpotSpec) -> ActorRef {
    via.create(Create::new("echo", aid(id)).in_spot(spot).on(rid(owner)))
        .await
        .unwrap()
}

/// What a framework CALL of `EchoPush` says about the actor owner's binding of `actor`:
/// `true` = registered (the push was accepted), `false` = session-not-bound.
async fn bound_at_owner(c: &NodeClient, actor: &ActorRef) -> bool {
    match c.request(actor, &EchoPush(b"probe".to_vec())).await {
        Ok(()) => true,
        Err(e) if e.to_string().contains("session not bound") => false,
        Err(e) => panic!("EchoPush to {}: unexpected {e:?}", actor.id()),
    }
}

/// Waits (bounded, event-driven) until the actor owner no longer holds a binding of `actor`.
async fn wait_unbound_at_owner(c: &NodeClient, actor: &ActorRef) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while bound_at_owner(c, actor).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "binding of {} never left its owner",
            actor.id()
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

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
    let registry = registry_with(vec![
        ("ok-spot", counting_hook(&log, false)),
        ("failing-spot", counting_hook(&log, true)),
    ]);
    let store = Arc::new(CountingStore::new(MemoryStore::new()));
    let (a, b, tap_a, _tb) = session_pair(store.clone(), demo::sessions(), Some(registry)).await;
    // One actor cross-node (38 over the mesh), one on the session owner itself.
    let remote = echo_in(&a, "b", "d-remote", per_actor("ok-spot")).await;
    let local = echo_in(&a, "a", "d-local", per_actor("failing-spot")).await;
    let c = client_of(&a);
    // The failing Spot's actor is bound first: its notification is the first of the snapshot.
    bind(&c, &local).await;
    bind(&c, &remote).await;
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

    wait_until("both Spot callbacks ran", || {
        log.count("ok-spot", "d-remote") >= 1 && log.count("failing-spot", "d-local") >= 1
    })
    .await;
    wait_unbound_at_owner(&observer, &remote).await;
    wait_unbound_at_owner(&observer, &local).await;
    wait_until("the session left its owner", || a.session_count() == 1).await;

    assert_eq!(log.count("ok-spot", "d-remote"), 1);
    assert_eq!(log.count("failing-spot", "d-local"), 1);
    assert_eq!(log.total(), 2, "no other Spot callback ran");
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
