//! Shutdown order (SB-10 with EG-14 fencing): new work of every origin is refused, accepted work
//! is drained, the actors end, and only then is the owner lease released — so no second owner
//! can exist while the first still runs turns. Observed through the store (a recording wrapper
//! logs the release among the turns' start and end) and the wire tap (one terminal per request).

mod node_common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use node_common::*;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use zlink::actor::{
    ActorId, ActorRegistry, ActorTypeBuilder, DispatchKey, ErrorKind, Handled, Message,
};
use zlink::node::{Create, Node, NodeOptions};
use zlink::store::{
    ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder, LocationStore,
    NodeGeneration, NodeRid, OwnerFence, OwnerLease, Reservation, StoreFuture,
};
use zlink_apps::demo::{self, Get};
use zlink_mesh::{LinkKind, TapDirection, WireTap};
use zlink_wire::Record;

/// A request that waits for the test's gate inside its turn.
#[derive(Serialize, Deserialize)]
struct Slow(u64);
impl Message for Slow {
    const KEY: DispatchKey = DispatchKey::new(40);
    type Reply = u64;
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Ev {
    Start(u64),
    End(u64),
    Released(String),
}

type Log = Arc<Mutex<Vec<Ev>>>;

fn id(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

/// The demo types plus `slow`: each turn logs its start, waits for `gate`, logs its end.
fn registry(log: &Log, gate: &watch::Receiver<bool>) -> ActorRegistry {
    let mut r = demo::registry().unwrap();
    let (log, gate) = (log.clone(), gate.clone());
    r.register(
        ActorTypeBuilder::new("slow", |_info, _init| Ok(()))
            .handle(move |_: &mut (), _ctx, Slow(n)| {
                let (log, mut gate) = (log.clone(), gate.clone());
                log.lock().unwrap().push(Ev::Start(n));
                Handled::later(async move {
                    let _ = gate.wait_for(|open| *open).await;
                    log.lock().unwrap().push(Ev::End(n));
                    Ok(n)
                })
            })
            .build()
            .unwrap(),
    )
    .unwrap();
    r
}

/// The shared store as one node sees it: logs every owner lease release (when it is issued)
/// among the turns' events, and with `stuck` set, makes every activation hang after signalling
/// it (a store that stops answering).
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn LocationStore>,
    log: Log,
    stuck: Option<Arc<tokio::sync::Notify>>,
}

impl LocationStore for Recording {
    fn register_owner(
        &self,
        node: NodeRid,
        generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        self.inner.register_owner(node, generation, ttl)
    }
    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        self.inner.renew_owner(holder, ttl)
    }
    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        self.log
            .lock()
            .unwrap()
            .push(Ev::Released(holder.node.to_string()));
        self.inner.release_owner(holder)
    }
    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        if let Some(entered) = &self.stuck {
            entered.notify_one();
            return Box::pin(std::future::pending());
        }
        self.inner.reserve_activation(request)
    }
    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.inner.mark_ready(actor_id, fence)
    }
    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        self.inner.lookup(actor_id)
    }
    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        self.inner.cas_owner(actor_id, expected, new_owner)
    }
    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.inner.relocation_fence(actor_id, expected, owner)
    }
    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        self.inner.reincarnate(actor_id, owner)
    }
    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        self.inner.destroy(actor_id, fence)
    }
}

struct Mesh {
    a: Node,
    b: Node,
    tap_b: WireTap,
    log: Log,
    gate: watch::Sender<bool>,
    store: Arc<dyn LocationStore>,
}

/// `b` (the node that shuts down, with a client endpoint) and `a`, sharing one store; `b`'s
/// store handle logs its lease release.
async fn mesh() -> Mesh {
    let store = memory_store();
    let log: Log = Arc::default();
    let (gate, gate_rx) = watch::channel(false);
    let tap_b = WireTap::new(50_000);
    let mut mc = mesh_config("b");
    mc.tap = Some(tap_b.clone());
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    let recording: Arc<dyn LocationStore> = Arc::new(Recording {
        inner: store.clone(),
        log: log.clone(),
        stuck: None,
    });
    let b = Node::start(
        NodeOptions::new(mc, recording, registry(&log, &gate_rx))
            .with_client_access(zlink::node::access::ClientAccess::open()),
    )
    .await
    .unwrap();
    let a = start_node(
        "a",
        store.clone(),
        vec![b.address()],
        None,
        Some(registry(&log, &gate_rx)),
    )
    .await;
    wait_pair_up(&a, &b).await;
    Mesh {
        a,
        b,
        tap_b,
        log,
        gate,
        store,
    }
}

fn events(log: &Log) -> Vec<Ev> {
    log.lock().unwrap().clone()
}

/// Every 160 request `tap` received got exactly one terminal (145 / 146) sent back on the
/// completion connection (client replies share the correlation space of their connection).
fn one_terminal_per_received_request(tap: &WireTap) {
    let mut requests: HashMap<u64, usize> = HashMap::new();
    let mut terminals: HashMap<u64, usize> = HashMap::new();
    for f in tap.frames() {
        let Ok(d) = &f.decoded else { continue };
        let corr = d.header.correlation.get();
        match (&d.record, f.direction) {
            (Record::ActorCall(_), TapDirection::Received) if corr != 0 => {
                *requests.entry(corr).or_default() += 1;
            }
            (Record::Reply(_) | Record::ErrorReply(_), TapDirection::Sent)
                if f.link == LinkKind::Completion =>
            {
                *terminals.entry(corr).or_default() += 1;
            }
            _ => {}
        }
    }
    assert!(!requests.is_empty());
    for (corr, n) in &requests {
        assert_eq!(*n, 1, "request {corr} received once");
        assert_eq!(
            terminals.get(corr).copied().unwrap_or(0),
            1,
            "request {corr}: exactly one terminal sent"
        );
    }
}

// spec: SB-10, SB-12, EG-14 — shutdown under load: every request (peer 160 calls, client calls,
// client calls forwarded to the other node) is answered exactly once, with its reply or
// `Unavailable`; the lease is released only after the last turn ended, and no turn starts after.
#[tokio::test]
async fn shutdown_under_load_answers_every_request_once_and_releases_the_lease_last() {
    let Mesh {
        a,
        b,
        tap_b,
        log,
        gate,
        store,
    } = mesh().await;
    let on_b = a
        .create(Create::new("slow", id("s")).on(rid("b")))
        .await
        .unwrap();
    let on_a = a.create(Create::new("slow", id("t"))).await.unwrap();
    let client = client_of(&b);
    // Load: requests from a (160 over the mesh), from b's client, and b's client calls to the
    // actor on a, which b forwards.
    let mut calls = Vec::new();
    for i in 0..30u64 {
        let (a, r) = (a.clone(), on_b.clone());
        calls.push(tokio::spawn(async move {
            a.request(&r, &Slow(i), TIMEOUT).await.map_err(|e| e.kind())
        }));
    }
    let client = Arc::new(client);
    for i in 100..110u64 {
        for r in [on_b.clone(), on_a.clone()] {
            let c = client.clone();
            calls.push(tokio::spawn(async move {
                c.request(&r, &Slow(i)).await.map_err(|e| e.kind())
            }));
        }
    }
    wait_until("a turn running on b and one on a", || {
        events(&log)
            .iter()
            .filter(|e| matches!(e, Ev::Start(_)))
            .count()
            >= 2
    })
    .await;
    let shutdown = tokio::spawn(b.shutdown(3 * TIMEOUT));
    // New work is refused while the accepted work waits.
    let refused = async {
        loop {
            // A short deadline: a probe accepted before the gate closed must not block the loop.
            match a.request(&on_b, &Get, Duration::from_millis(300)).await {
                Err(e) if e.kind() == ErrorKind::Unavailable => return,
                _ => tokio::task::yield_now().await,
            }
        }
    };
    tokio::time::timeout(TIMEOUT, refused).await.unwrap();
    assert!(
        !events(&log).iter().any(|e| matches!(e, Ev::Released(_))),
        "the lease is held while turns run"
    );
    // Let the turns finish.
    gate.send_replace(true);
    let mut outcomes = Vec::new();
    for c in calls {
        let out = tokio::time::timeout(TIMEOUT, c)
            .await
            .expect("every request gets a terminal")
            .unwrap();
        outcomes.push(out);
    }
    tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .unwrap()
        .unwrap();
    for out in &outcomes {
        assert!(
            matches!(out, Ok(_) | Err(ErrorKind::Unavailable)),
            "a documented terminal: {out:?}"
        );
    }
    let ok = outcomes.iter().filter(|o| o.is_ok()).count();
    assert!(ok >= 2, "the running turns completed: {outcomes:?}");

    // The store's view: b's release comes after every turn that started on b ended, and no turn
    // starts after it (turns on a may go on).
    let log = events(&log);
    let released = log
        .iter()
        .position(|e| *e == Ev::Released("b".into()))
        .expect("b released its lease");
    for (i, e) in log.iter().enumerate() {
        if let Ev::Start(n) = e {
            let end = log.iter().position(|x| *x == Ev::End(*n));
            assert!(end.is_some(), "turn {n} ended");
        }
        if i > released {
            if let Ev::Start(n) = e {
                // Only turns of the actor on a can start after b released.
                assert!(*n >= 100, "turn {n} started on b after the release");
            }
        }
    }
    // The turn that ran on b when shutdown began ended before the release.
    let first_b = log
        .iter()
        .position(|e| matches!(e, Ev::Start(n) if *n < 30))
        .unwrap();
    let Ev::Start(n) = log[first_b] else {
        unreachable!()
    };
    let end = log.iter().position(|e| *e == Ev::End(n)).unwrap();
    assert!(end < released, "turn {n} ended before the release: {log:?}");
    // After the release another node may own the actor: a takes it over.
    let taken = a.get_or_create(Create::new("slow", id("s"))).await.unwrap();
    assert_eq!(taken.node(), &rid("a"));
    // On the wire: every request b received got exactly one terminal.
    one_terminal_per_received_request(&tap_b);
    drop(store);
}

// spec: SB-10, EG-14 — at the drain deadline the queued work is answered `Unavailable` (never
// `NotFound` or `Internal`), and a turn still running keeps the lease: no second owner.
#[tokio::test]
async fn a_turn_running_past_the_drain_deadline_keeps_the_lease() {
    let Mesh {
        a,
        b,
        tap_b,
        log,
        gate,
        store,
    } = mesh().await;
    let on_b = a
        .create(Create::new("slow", id("s")).on(rid("b")))
        .await
        .unwrap();
    let running = tokio::spawn({
        let (a, r) = (a.clone(), on_b.clone());
        async move { a.request(&r, &Slow(1), TIMEOUT).await }
    });
    wait_until("the turn running", || events(&log).contains(&Ev::Start(1))).await;
    let queued: Vec<_> = (2..6u64)
        .map(|i| {
            let (a, r) = (a.clone(), on_b.clone());
            tokio::spawn(async move { a.request(&r, &Slow(i), TIMEOUT).await })
        })
        .collect();
    // Wait until b holds the queued requests.
    wait_until("the queued requests at b", || {
        tap_b
            .frames()
            .iter()
            .filter(|f| {
                f.direction == TapDirection::Received
                    && matches!(&f.decoded, Ok(d) if matches!(d.record, Record::ActorCall(_)))
            })
            .count()
            >= 5
    })
    .await;
    b.shutdown(Duration::from_millis(200)).await;
    for q in queued {
        let e = tokio::time::timeout(TIMEOUT, q)
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    }
    assert!(
        !events(&log).iter().any(|e| matches!(e, Ev::Released(_))),
        "a running turn keeps the lease: {:?}",
        events(&log)
    );
    // The store still names b as the owner: nobody else can own the actor yet.
    let held = a.get_or_create(Create::new("slow", id("s"))).await.unwrap();
    assert_eq!(held.node(), &rid("b"));
    gate.send_replace(true);
    let _ = tokio::time::timeout(TIMEOUT, running).await.unwrap();
    drop(store);
}

/// A client operation that runs off the inbound loop (here a CREATE waiting on a store that
/// hangs) still gets exactly one terminal when shutdown stops waiting for it: `Unavailable`,
/// never silence.
// spec: SB-10
#[tokio::test]
async fn a_client_create_stuck_on_the_store_is_answered_unavailable_at_shutdown() {
    let entered = Arc::new(tokio::sync::Notify::new());
    let stuck: Arc<dyn LocationStore> = Arc::new(Recording {
        inner: memory_store(),
        log: Log::default(),
        stuck: Some(entered.clone()),
    });
    let mut mc = mesh_config("b");
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    let b = Node::start(
        NodeOptions::new(mc, stuck, demo::registry().unwrap())
            .with_client_access(zlink::node::access::ClientAccess::open()),
    )
    .await
    .unwrap();
    let client = client_of(&b);
    let create = tokio::spawn(async move {
        client
            .create(
                "counter",
                "stuck-1",
                zlink::node::client::Placement::default(),
            )
            .await
    });
    tokio::time::timeout(TIMEOUT, entered.notified())
        .await
        .expect("the CREATE reached the store");
    b.shutdown(Duration::from_millis(50)).await;
    let out = tokio::time::timeout(TIMEOUT, create)
        .await
        .expect("the CREATE was answered")
        .unwrap();
    match out {
        Err(zlink::node::client::ClientError::Remote { kind, .. }) => {
            assert_eq!(kind, ErrorKind::Unavailable);
        }
        other => panic!("expected an Unavailable answer, got {other:?}"),
    }
}
