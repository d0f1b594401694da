//! Actors joining Spots through the node: the Spot kind decides the gate (EG-1.3, EG-2).

mod node_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use node_common::*;
use serde::{Deserialize, Serialize};
use zlink::actor::{
    ActorId, ActorRegistry, ActorTypeBuilder, DispatchKey, ErrorKind, Handled, Message, SpotKind,
    SpotSpec, UserMode,
};
use zlink::node::{Create, Node};

#[derive(Serialize, Deserialize)]
struct Work;
impl Message for Work {
    const KEY: DispatchKey = DispatchKey::new(1);
    type Reply = ();
}

#[derive(Default)]
struct Probe {
    running: AtomicUsize,
    max: AtomicUsize,
}

/// `overlap`: handlers that count how many run at once, yielding in between;
/// `meet`: handlers that wait for each other at a barrier of 2.
fn registry(probe: Arc<Probe>, barrier: Arc<tokio::sync::Barrier>) -> ActorRegistry {
    let mut r = ActorRegistry::new();
    r.register(
        ActorTypeBuilder::new("overlap", |_i, _b| Ok(()))
            .handle(move |_: &mut (), _ctx, Work| {
                let probe = probe.clone();
                Handled::later(async move {
                    let now = probe.running.fetch_add(1, Ordering::SeqCst) + 1;
                    probe.max.fetch_max(now, Ordering::SeqCst);
                    for _ in 0..20 {
                        tokio::task::yield_now().await;
                    }
                    probe.running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                })
            })
            .build()
            .unwrap(),
    )
    .unwrap();
    r.register(
        ActorTypeBuilder::new("meet", |_i, _b| Ok(()))
            .handle(move |_: &mut (), _ctx, Work| {
                let barrier = barrier.clone();
                Handled::later(async move {
                    barrier.wait().await;
                    Ok(())
                })
            })
            .build()
            .unwrap(),
    )
    .unwrap();
    r
}

async fn node(probe: Arc<Probe>, barrier: Arc<tokio::sync::Barrier>) -> Node {
    start_node(
        "spots",
        memory_store(),
        vec![],
        None,
        Some(registry(probe, barrier)),
    )
    .await
}

fn spot(name: &str, kind: SpotKind) -> SpotSpec {
    SpotSpec {
        name: name.into(),
        kind,
    }
}

// spec: EG-16.13 (SpotWide: handlers of two actors never overlap), EG-2.2, EG-1.3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spotwide_member_actors_never_overlap() {
    for kind in [SpotKind::User(UserMode::SpotWide), SpotKind::Instance] {
        let probe = Arc::new(Probe::default());
        let n = node(probe.clone(), Arc::new(tokio::sync::Barrier::new(2))).await;
        let mut actors = Vec::new();
        for i in 0..3 {
            actors.push(
                n.create(
                    Create::new("overlap", ActorId::new(format!("o{i}")).unwrap())
                        .in_spot(spot("room", kind)),
                )
                .await
                .unwrap(),
            );
        }
        let calls = actors.iter().flat_map(|a| {
            let n = n.clone();
            (0..30).map(move |_| {
                let (n, a) = (n.clone(), a.clone());
                tokio::spawn(async move { n.request(&a, &Work, TIMEOUT).await })
            })
        });
        for c in calls.collect::<Vec<_>>() {
            c.await.unwrap().unwrap();
        }
        assert_eq!(probe.max.load(Ordering::SeqCst), 1, "{kind:?}");
    }
}

// spec: EG-16.13 (PerActor: handlers of different actors do run concurrently), EG-2.4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peractor_and_entry_actors_run_concurrently() {
    for kind in [SpotKind::User(UserMode::PerActor), SpotKind::Entry] {
        let n = node(
            Arc::new(Probe::default()),
            Arc::new(tokio::sync::Barrier::new(2)),
        )
        .await;
        let name = if kind == SpotKind::Entry {
            "entry"
        } else {
            "zone"
        };
        let a = n
            .create(Create::new("meet", ActorId::new("m1").unwrap()).in_spot(spot(name, kind)))
            .await
            .unwrap();
        let b = n
            .create(Create::new("meet", ActorId::new("m2").unwrap()).in_spot(spot(name, kind)))
            .await
            .unwrap();
        // Each handler waits for the other one: they complete only if both run at once.
        let (ra, rb) = tokio::join!(n.request(&a, &Work, TIMEOUT), n.request(&b, &Work, TIMEOUT));
        ra.unwrap();
        rb.unwrap();
    }
}

// A Spot keeps its kind: joining it with another kind is refused.
#[tokio::test]
async fn a_spot_name_keeps_its_kind() {
    let n = node(
        Arc::new(Probe::default()),
        Arc::new(tokio::sync::Barrier::new(2)),
    )
    .await;
    n.create(
        Create::new("overlap", ActorId::new("x").unwrap())
            .in_spot(spot("hall", SpotKind::Instance)),
    )
    .await
    .unwrap();
    let e = n
        .create(
            Create::new("overlap", ActorId::new("y").unwrap())
                .in_spot(spot("hall", SpotKind::User(UserMode::PerActor))),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidOperation);
}

#[derive(Serialize, Deserialize)]
struct Wait;
impl Message for Wait {
    const KEY: DispatchKey = DispatchKey::new(30);
    type Reply = u64;
}

#[derive(Serialize, Deserialize)]
struct Poke(u64);
impl Message for Poke {
    const KEY: DispatchKey = DispatchKey::new(31);
    type Reply = ();
}

// spec: EG-16.1 (in a SpotWide User / Instance Spot a handler's worker call offers Yield, which
// releases the Spot gate so another actor of the Spot runs meanwhile), EG-16.3 (no Yield
// elsewhere: a yielding actor type cannot join an Entry or PerActor Spot; ordinary handlers get
// no runtime context at all)
#[tokio::test]
async fn a_yielding_handler_releases_the_spot_gate_and_only_shared_spots_offer_it() {
    use std::sync::Mutex;
    use std::sync::mpsc as std_mpsc;
    use zlink::actor::HandlerError;
    use zlink::runtime::SpotWideCtx;

    let (value_tx, value_rx) = std_mpsc::channel::<u64>();
    let value_rx = Arc::new(Mutex::new(value_rx));
    let value_tx = Arc::new(Mutex::new(value_tx));
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut registry = ActorRegistry::new();
    registry
        .register(
            ActorTypeBuilder::new("waiter", |_info, _init| Ok(()))
                .handle_yielding(move |_s: &mut (), _ctx, rt: SpotWideCtx, Wait| {
                    let rx = value_rx.clone();
                    let entered = entered_tx.clone();
                    Handled::later(async move {
                        rt.worker(move || {
                            let _ = entered.send(());
                            rx.lock().unwrap().recv().unwrap_or(0)
                        })
                        .yielding()
                        .await
                        .map_err(|e| HandlerError::new(e.to_string()))
                    })
                })
                .build()
                .unwrap(),
        )
        .unwrap();
    registry
        .register(
            ActorTypeBuilder::new("poker", |_info, _init| Ok(()))
                .handle(move |_s: &mut (), _ctx, Poke(n)| {
                    value_tx.lock().unwrap().send(n).unwrap();
                    Handled::ok(())
                })
                .build()
                .unwrap(),
        )
        .unwrap();
    let node = start_node("solo", memory_store(), vec![], None, Some(registry)).await;
    let hall = spot("hall", SpotKind::User(UserMode::SpotWide));
    let waiter = node
        .create(Create::new("waiter", ActorId::new("w").unwrap()).in_spot(hall.clone()))
        .await
        .unwrap();
    let poker = node
        .create(Create::new("poker", ActorId::new("p").unwrap()).in_spot(hall))
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let node = node.clone();
        async move { node.request(&waiter, &Wait, TIMEOUT).await }
    });
    // The waiter's worker runs; its handler yielded the Spot gate, so the poker (same gate)
    // runs now — with a normal await this request would wait behind the waiter forever.
    entered_rx.recv().await.unwrap();
    node.request(&poker, &Poke(7), TIMEOUT).await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), 7);

    for (name, kind) in [
        ("entry", SpotKind::Entry),
        ("solo-room", SpotKind::User(UserMode::PerActor)),
    ] {
        let id = ActorId::new(format!("w-{name}")).unwrap();
        let e = node
            .create(Create::new("waiter", id.clone()).in_spot(spot(name, kind)))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidOperation, "{name}: {e}");
        // Nothing was left behind.
        assert_eq!(node.get(&id).await.unwrap_err().kind(), ErrorKind::NotFound);
    }
}
