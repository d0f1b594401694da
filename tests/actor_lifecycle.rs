//! Actor lifecycle across nodes: factories, create / get-or-create / destroy, incarnations,
//! handler errors.

mod node_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use node_common::*;
use serde::{Deserialize, Serialize};
use zlink::actor::{
    ActorConfigError, ActorId, ActorRegistry, ActorTypeBuilder, DispatchKey, ErrorKind, Handled,
    Message,
};
use zlink::node::Create;
use zlink_apps::demo::{self, Add, Fail, Get};

fn id(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

// spec: SB-12 (no actor factory for the type → NotFound), SB-3.3
#[tokio::test]
async fn unknown_actor_type_is_not_found_locally_and_on_the_owner() {
    let (a, b, _, _) = pair(memory_store()).await;
    let local = a
        .create(Create::new("no-such-type", id("x")))
        .await
        .unwrap_err();
    assert_eq!(local.kind(), ErrorKind::NotFound);
    let remote = a
        .create(Create::new("no-such-type", id("x")).on(rid("b")))
        .await
        .unwrap_err();
    assert_eq!(remote.kind(), ErrorKind::NotFound);
    // Nothing was reserved: the actor has no record.
    assert_eq!(
        a.get(&id("x")).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    drop(b);
}

// spec: SB-4.1, SB-12 (different ObjectGeneration → InvalidOperation)
#[tokio::test]
async fn destroy_and_recreate_gives_a_new_incarnation_and_the_old_ref_is_invalid() {
    let (a, b, _, _) = pair(memory_store()).await;
    let old = a
        .create(Create::new("counter", id("c1")).on(rid("b")))
        .await
        .unwrap();
    assert_eq!(old.node(), &rid("b"));
    assert_eq!(a.request(&old, &Add(5), TIMEOUT).await.unwrap(), 5);
    a.destroy(&old).await.unwrap();
    // Destroyed, nothing re-created yet: NotFound, and only Ready actors are handed out.
    assert_eq!(
        a.request(&old, &Get, TIMEOUT).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        b.get(&id("c1")).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let new = b.create(Create::new("counter", id("c1"))).await.unwrap();
    assert!(new.object_generation() > old.object_generation());
    assert_eq!(
        a.request(&old, &Get, TIMEOUT).await.unwrap_err().kind(),
        ErrorKind::InvalidOperation
    );
    assert_eq!(
        a.destroy(&old).await.unwrap_err().kind(),
        ErrorKind::InvalidOperation
    );
    // The new incarnation starts fresh.
    assert_eq!(a.request(&new, &Get, TIMEOUT).await.unwrap(), 0);
}

// spec: EG-14 (only the owner confirmed by a reservation runs the factory)
#[tokio::test]
async fn concurrent_get_or_create_from_two_nodes_runs_the_factory_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let registry = || {
        let runs = runs.clone();
        let mut r = demo::registry().unwrap();
        r.register(
            ActorTypeBuilder::new("counted", move |_info, _init| {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(0u64)
            })
            .handle(|n: &mut u64, _ctx, Add(k)| {
                *n += k;
                Handled::ok(*n)
            })
            .build()
            .unwrap(),
        )
        .unwrap();
        r
    };
    let store = memory_store();
    let b = start_node("b", store.clone(), vec![], None, Some(registry())).await;
    let a = start_node("a", store, vec![b.address()], None, Some(registry())).await;
    // Both directions: b asks a (the reservation's holder) as often as a asks b.
    wait_pair_up(&a, &b).await;
    for i in 0..20 {
        let actor = id(&format!("k{i}"));
        let (ra, rb, ra2, rb2) = tokio::join!(
            a.get_or_create(Create::new("counted", actor.clone())),
            b.get_or_create(Create::new("counted", actor.clone())),
            a.get_or_create(Create::new("counted", actor.clone())),
            b.get_or_create(Create::new("counted", actor.clone())),
        );
        let ra = ra.unwrap();
        assert_eq!(ra, rb.unwrap());
        assert_eq!(ra, ra2.unwrap());
        assert_eq!(ra, rb2.unwrap());
        assert_eq!(
            runs.load(Ordering::SeqCst),
            i + 1,
            "factory runs for {actor}"
        );
        // Every caller's ref reaches the same incarnation.
        assert_eq!(a.request(&ra, &Add(1), TIMEOUT).await.unwrap(), 1);
        assert_eq!(b.request(&ra, &Add(1), TIMEOUT).await.unwrap(), 2);
    }
}

// spec: EG-15 (a request handler's error becomes an error reply; a send handler's is logged)
#[tokio::test]
async fn handler_errors_become_error_replies_and_send_failures_are_counted() {
    let (a, b, _, _) = pair(memory_store()).await;
    let f = a
        .create(Create::new("failing", id("f")).on(rid("b")))
        .await
        .unwrap();
    let e = a.request(&f, &Fail, TIMEOUT).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert!(e.to_string().contains("deliberate failure"), "{e}");
    a.send(&f, &Fail).await.unwrap();
    wait_until("the send failure on b", || b.counters().send_failures == 1).await;
    // The actor keeps serving after failures.
    assert_eq!(
        a.request(&f, &Fail, TIMEOUT).await.unwrap_err().kind(),
        ErrorKind::Internal
    );
}

// spec: SB-12 (create of an existing incarnation is refused; get-or-create returns it)
#[tokio::test]
async fn create_refuses_an_existing_actor_and_get_or_create_returns_it() {
    let (a, b, _, _) = pair(memory_store()).await;
    let r = b.create(Create::new("echo", id("e"))).await.unwrap();
    let e = a
        .create(Create::new("echo", id("e")).on(rid("a")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidOperation);
    // get-or-create on another node returns the owner's incarnation, no second factory run.
    assert_eq!(
        a.get_or_create(Create::new("echo", id("e"))).await.unwrap(),
        r
    );
    assert_eq!(a.get(&id("e")).await.unwrap(), r);
    // A type mismatch on an existing id is refused by the store.
    let e = a
        .get_or_create(Create::new("counter", id("e")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidOperation);
}

#[derive(Serialize, Deserialize)]
struct Ping;
impl Message for Ping {
    const KEY: DispatchKey = DispatchKey::new(1);
    type Reply = ();
}

// spec: SB-3.3 (duplicate handler registration for one packet key → configuration error)
#[test]
fn duplicate_keys_and_types_are_configuration_errors() {
    let e = ActorTypeBuilder::new("t", |_i, _b: Bytes| Ok(()))
        .handle(|_: &mut (), _c, Ping| Handled::ok(()))
        .handle(|_: &mut (), _c, Ping| Handled::ok(()))
        .build()
        .unwrap_err();
    assert!(matches!(e, ActorConfigError::DuplicateHandler { .. }));
    // Add (key 1) and Ping (key 1) on one type collide as well.
    let e = ActorTypeBuilder::new("t", |_i, _b: Bytes| Ok(0u64))
        .handle(|n: &mut u64, _c, Add(k)| Handled::ok(*n + k))
        .handle(|_: &mut u64, _c, Ping| Handled::ok(()))
        .build()
        .unwrap_err();
    assert!(matches!(e, ActorConfigError::DuplicateHandler { .. }));
    let mut r = ActorRegistry::new();
    let t = || {
        ActorTypeBuilder::new("t", |_i, _b: Bytes| Ok(()))
            .build()
            .unwrap()
    };
    r.register(t()).unwrap();
    assert!(matches!(
        r.register(t()).unwrap_err(),
        ActorConfigError::DuplicateType { .. }
    ));
}

// spec: EG-7.1 (timer callbacks are application work), EG-2.1 (they land in the actor's
// queue), SB-4.1 (the timer ends with its incarnation)
#[tokio::test]
async fn a_spot_timer_sends_to_its_actor_until_the_actor_is_destroyed() {
    let (a, b, _, _) = pair(memory_store()).await;
    let c = a
        .create(Create::new("counter", id("ticks")).on(rid("b")))
        .await
        .unwrap();
    // Timers run on the owner.
    assert_eq!(
        a.start_timer(&c, std::time::Duration::from_millis(5), &Add(1))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidOperation
    );
    b.start_timer(&c, std::time::Duration::from_millis(5), &Add(1))
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while a.request(&c, &Get, TIMEOUT).await.unwrap() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "timer did not tick");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    b.destroy(&c).await.unwrap();
    // A re-created incarnation does not inherit the old incarnation's timer.
    let c2 = b.create(Create::new("counter", id("ticks"))).await.unwrap();
    let turns = b.counters().turns;
    a.request(&c2, &Add(0), TIMEOUT).await.unwrap();
    assert_eq!(a.request(&c2, &Get, TIMEOUT).await.unwrap(), 0);
    assert_eq!(b.counters().turns, turns + 2);
    // The old timer ended with its incarnation: while a new timer of the same period ticks six
    // times on the new incarnation, an old timer still running would have had its ticks
    // refused by the ended lane and counted as skipped (one tick in flight at the destroy may
    // still be).
    let skipped = b.counters().timer_ticks_skipped;
    b.start_timer(&c2, std::time::Duration::from_millis(5), &Add(1))
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while a.request(&c2, &Get, TIMEOUT).await.unwrap() < 6 {
        assert!(tokio::time::Instant::now() < deadline, "timer did not tick");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let late = b.counters().timer_ticks_skipped - skipped;
    assert!(
        late <= 1,
        "the destroyed incarnation's timer still ticks ({late} skipped)"
    );
}

// spec: EG-14 (the owner lease fences store and runtime; ObjectGeneration stays the public
// incarnation)
#[tokio::test]
async fn a_lost_owner_lease_ends_the_local_actors_and_another_node_can_take_over() {
    use std::time::Duration;
    use zlink::store::{ManualClock, MemoryStore, StoreTime};
    let clock = ManualClock::at_wall(StoreTime::from_millis(1_000_000));
    let store: Arc<dyn zlink::store::LocationStore> =
        Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let mut mc = mesh_config("b");
    mc.client_endpoint = None;
    let mut o = zlink::node::NodeOptions::new(mc, store.clone(), demo::registry().unwrap());
    o.lease_ttl = Duration::from_millis(300);
    let b = zlink::node::Node::start(o).await.unwrap();
    let a = start_node("a", store, vec![b.address()], None, None).await;
    assert!(a.wait_peers(TIMEOUT).await.is_empty());
    let c = b
        .create(Create::new("counter", id("leased")))
        .await
        .unwrap();
    assert_eq!(a.request(&c, &Add(1), TIMEOUT).await.unwrap(), 1);
    let lease = b.lease().holder.lease_generation;
    // b's lease (300 ms) expires in store time before its next renewal; a's (10 s) does not.
    clock.advance(Duration::from_secs(1));
    wait_until("b's new lease", || {
        b.lease().holder.lease_generation != lease
    })
    .await;
    // The old incarnation is fenced off on b …
    assert_eq!(
        a.request(&c, &Get, TIMEOUT).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    // … and another node may take the actor over: same incarnation, new authority.
    let taken = a
        .get_or_create(Create::new("counter", id("leased")))
        .await
        .unwrap();
    assert_eq!(taken.node(), &rid("a"));
    assert_eq!(taken.object_generation(), c.object_generation());
    assert!(taken.location().authority_owner_generation > c.location().authority_owner_generation);
    assert_eq!(b.request(&taken, &Get, TIMEOUT).await.unwrap(), 0);
}

// spec: EG-14, EG-13 (the reservation winner's factory runs as lifecycle work in an application
// turn of the new actor's lane — not in the infrastructure activation task, which awaits it; a
// failed factory burns the reservation)
#[tokio::test]
async fn the_factory_runs_in_a_lifecycle_turn_of_the_actors_lane() {
    use std::sync::Mutex;
    use zlink::runtime::{Domain, current_domain};
    let seen: Arc<Mutex<Vec<Option<Domain>>>> = Arc::new(Mutex::new(Vec::new()));
    let mut registry = demo::registry().unwrap();
    let s = seen.clone();
    registry
        .register(
            ActorTypeBuilder::new("probed", move |_info, init: Bytes| {
                s.lock().unwrap().push(current_domain());
                if &init[..] == b"fail" {
                    return Err(zlink::actor::HandlerError::new("factory refused"));
                }
                Ok(0u64)
            })
            .handle(|n: &mut u64, _ctx, Add(k)| {
                *n += k;
                Handled::ok(*n)
            })
            .build()
            .unwrap(),
        )
        .unwrap();
    let node = start_node("solo", memory_store(), vec![], None, Some(registry)).await;
    // The caller (this test task) runs outside both domains; the factory does not run here.
    assert_eq!(current_domain(), None);
    let r = node
        .create(Create::new("probed", id("p")).in_spot(zlink::actor::SpotSpec::entry()))
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![Some(Domain::Application)]);
    assert_eq!(node.request(&r, &Add(2), TIMEOUT).await.unwrap(), 2);

    let e = node
        .create(Create::new("probed", id("q")).init(Bytes::from_static(b"fail")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert!(e.to_string().contains("factory refused"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(seen.lock().unwrap()[1], Some(Domain::Application));
    // The failed activation left nothing behind: no record, and a new create succeeds.
    assert_eq!(
        node.get(&id("q")).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let q = node.create(Create::new("probed", id("q"))).await.unwrap();
    assert_eq!(node.request(&q, &Add(1), TIMEOUT).await.unwrap(), 1);
    assert_eq!(node.counters().activations, 2);
}
