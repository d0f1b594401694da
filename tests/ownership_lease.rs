//! The owner lease on the node's own clock (SB-5.11): a store outage never extends it. The
//! store outage is injected by a [`FaultStore`] around the owner's store handle; the lease
//! clock is a [`ManualClock`], so the deadline passes exactly when the test moves it.

mod node_common;

use std::sync::Arc;
use std::time::Duration;

use node_common::*;
use zlink::actor::{ActorId, ErrorKind};
use zlink::node::{Create, Node, NodeOptions};
use zlink::session::ManualClock;
use zlink::store::{self, FaultStore, LocationStore, MemoryStore};
use zlink_apps::demo;
use zlink_apps::demo::{Add, Get};

const TTL: Duration = Duration::from_secs(3);

fn id(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

struct Owner {
    node: Node,
    store: Arc<FaultStore<Arc<dyn LocationStore>>>,
    clock: ManualClock,
}

/// A node whose store handle can be cut off and whose lease runs on a manual clock. The store
/// itself reads a manual store clock that never moves, so the lease never expires in the
/// store: only the owner's own deadline can stop it.
async fn owner(
    name: &str,
    shared: Arc<dyn LocationStore>,
    peers: Vec<zlink_mesh::PeerAddress>,
) -> Owner {
    let store = Arc::new(FaultStore::new(shared));
    let clock = ManualClock::new();
    let mut options = NodeOptions::new(mesh_config(name), store.clone(), demo::registry().unwrap())
        .with_client_access(zlink::node::access::ClientAccess::open());
    options.lease_ttl = TTL;
    options.lease_clock = Arc::new(clock.clone());
    options.peers = peers;
    let node = Node::start(options).await.unwrap();
    Owner { node, store, clock }
}

fn shared_store() -> Arc<dyn LocationStore> {
    let clock = store::ManualClock::at_wall(store::contract::START);
    Arc::new(MemoryStore::with_clock(Arc::new(clock)))
}

async fn wait_failed_renewals(o: &Owner, n: u64) {
    wait_until("a failed renewal", || o.store.failed_renewals() >= n).await;
}

// spec: SB-5.11 — a store outage longer than the TTL: the owner refuses calls, sends, timers
// and activations once its local deadline passes, and serves again after a renewal.
#[tokio::test]
async fn a_store_outage_stops_the_owner_at_its_local_deadline_and_a_renewal_restores_it() {
    let shared = shared_store();
    let b = owner("b", shared.clone(), vec![]).await;
    let a = start_node("a", shared, vec![b.node.address()], None, None).await;
    wait_pair_up(&a, &b.node).await;
    let c = b
        .node
        .create(Create::new("counter", id("c")))
        .await
        .unwrap();
    assert_eq!(b.node.request(&c, &Add(1), TIMEOUT).await.unwrap(), 1);
    assert_eq!(a.request(&c, &Add(1), TIMEOUT).await.unwrap(), 2);

    b.store.set_down(true);
    // The first renewal (at TTL/3) fails; the deadline (TTL − TTL/10 from the registration)
    // has not passed yet: still serving.
    b.clock.advance(Duration::from_secs(1));
    wait_failed_renewals(&b, 1).await;
    assert_eq!(b.node.request(&c, &Add(1), TIMEOUT).await.unwrap(), 3);
    // Past the local deadline (2.7 s), still no successful renewal.
    b.clock.advance(Duration::from_millis(1_800));
    wait_failed_renewals(&b, 2).await;
    assert_eq!(b.node.lease_remaining(), Duration::ZERO);
    let local = b.node.request(&c, &Add(1), TIMEOUT).await.unwrap_err();
    assert_eq!(local.kind(), ErrorKind::Unavailable, "{local}");
    let remote = a.request(&c, &Get, TIMEOUT).await.unwrap_err();
    assert_eq!(remote.kind(), ErrorKind::Unavailable, "{remote}");
    let send = b.node.send(&c, &Add(100)).await.unwrap_err();
    assert_eq!(send.kind(), ErrorKind::Unavailable);
    let timer = b
        .node
        .start_timer(&c, Duration::from_millis(10), &Add(100))
        .unwrap_err();
    assert_eq!(timer.kind(), ErrorKind::Unavailable);
    let create = b
        .node
        .create(Create::new("counter", id("d")))
        .await
        .unwrap_err();
    assert_eq!(create.kind(), ErrorKind::Unavailable);

    // The store comes back: the next renewal of the same lease restores service.
    let lease = b.node.lease();
    b.store.set_down(false);
    b.clock.advance(Duration::from_millis(400));
    wait_until("a renewal", || b.store.renewals() >= 1).await;
    wait_until("a live deadline", || {
        b.node.lease_remaining() > Duration::ZERO
    })
    .await;
    assert_eq!(b.node.lease().holder, lease.holder, "the same lease");
    // Nothing refused ran: the total is where it was.
    assert_eq!(b.node.request(&c, &Get, TIMEOUT).await.unwrap(), 3);
    assert_eq!(a.request(&c, &Add(1), TIMEOUT).await.unwrap(), 4);
}

// spec: SB-5.11 — a stored route is valid only within the owner's local lease deadline: past
// it the actor owner refuses the session's 24 relays and new 38 binds (`Unavailable`, counted
// as `lease_lapsed`), and serves them again after a renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_deadline_the_owner_refuses_relays_and_binds() {
    use zlink::node::client::Placement;
    use zlink::session::{FlowRecord, FlowReject};
    let shared = shared_store();
    let b = owner("b", shared.clone(), vec![]).await;
    let mut spec = SessionNodeSpec::new("a", demo::sessions());
    spec.peers = vec![b.node.address()];
    let a = start_session_node(spec, shared).await;
    wait_pair_up(&a, &b.node).await;
    let c = client_of(&a);
    let counter = c.create("counter", "c", Placement::on("b")).await.unwrap();
    bind(&c, &counter).await;
    assert_eq!(relay_req(&c, &counter, &Add(1)).await.unwrap(), 1);

    b.store.set_down(true);
    b.clock.advance(Duration::from_millis(2_800));
    wait_failed_renewals(&b, 1).await;
    let relayed = relay_req(&c, &counter, &Add(1)).await.unwrap_err();
    assert_eq!(relayed.kind(), ErrorKind::Unavailable, "{relayed}");
    let other = client_of(&a);
    let bound = other
        .packet(&demo::session::Bind {
            actor: counter.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(bound.kind(), ErrorKind::Unavailable, "{bound}");
    let flow = b.node.session_flow();
    assert!(flow.get(FlowRecord::Relay, FlowReject::LeaseLapsed) >= 1);
    assert!(flow.get(FlowRecord::Bind, FlowReject::LeaseLapsed) >= 1);

    b.store.set_down(false);
    b.clock.advance(Duration::from_millis(400));
    wait_until("a live deadline", || {
        b.node.lease_remaining() > Duration::ZERO
    })
    .await;
    assert_eq!(relay_req(&c, &counter, &Add(1)).await.unwrap(), 2);
}

// spec: SB-5.11 — a TTL the store's lease busy timeout cannot renew in time is refused at start.
#[tokio::test]
async fn a_node_refuses_a_lease_ttl_its_store_cannot_renew_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut slow = zlink::store::SqliteOptions::default();
    slow.lease_busy_timeout = Duration::from_secs(5);
    let sqlite: Arc<dyn LocationStore> = Arc::new(
        zlink::store::SqliteStore::open_with(
            dir.path().join("s.db"),
            slow,
            Arc::new(zlink::store::SystemClock),
        )
        .unwrap(),
    );
    let mut options = NodeOptions::new(mesh_config("n"), sqlite, demo::registry().unwrap());
    options.lease_ttl = TTL;
    let err = Node::start(options).await.unwrap_err();
    assert!(
        matches!(
            err,
            zlink::node::NodeError::Config(zlink::config::ConfigError::LeaseTtlTooShort { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("busy timeout"), "{err}");
}

// spec: SB-5.11 — a 1.5 s owner lease on SQLite with its default settings (the failover
// target of docs/RELIABILITY.md): the node accepts it (a renewal waits for the lock at most the
// lease busy timeout, 250 ms, within the TTL's 850 ms slack), renews every 500 ms on its clock
// and keeps the same lease, live, over two TTLs.
#[tokio::test]
async fn a_short_lease_on_sqlite_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let store_clock = store::ManualClock::at_wall(store::contract::START);
    let sqlite: Arc<dyn LocationStore> = Arc::new(
        store::SqliteStore::open_with(
            dir.path().join("s.db"),
            store::SqliteOptions::default(),
            Arc::new(store_clock.clone()),
        )
        .unwrap(),
    );
    let faults = Arc::new(FaultStore::new(sqlite));
    let clock = ManualClock::new();
    let mut options = NodeOptions::new(mesh_config("n"), faults.clone(), demo::registry().unwrap());
    options.lease_ttl = Duration::from_millis(1_500);
    options.lease_clock = Arc::new(clock.clone());
    let node = Node::start(options).await.unwrap();
    let lease = node.lease();
    for round in 1..=6 {
        clock.advance(Duration::from_millis(500));
        store_clock.advance(Duration::from_millis(500));
        wait_until("a renewal", || faults.renewals() >= round).await;
        assert!(node.lease_remaining() > Duration::ZERO, "round {round}");
    }
    assert_eq!(faults.failed_renewals(), 0);
    assert_eq!(
        node.lease().holder,
        lease.holder,
        "the same lease throughout"
    );
}

// A node that starts while the shared store is briefly unavailable (another node's write holds
// SQLite's lock past the lease connection's short busy timeout, as when the nodes of a mesh
// start together on a loaded machine) asks again and starts, instead of failing its start at
// the first refusal.
// spec: SB-9 (owner registration before serving)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_meets_a_briefly_unavailable_store_registers_once_it_answers() {
    let faults = Arc::new(FaultStore::new(store::MemoryStore::new()));
    faults.set_down(true);
    let options = NodeOptions::new(mesh_config("n"), faults.clone(), demo::registry().unwrap());
    let start = tokio::spawn(Node::start(options));
    wait_until("a refused registration", || {
        faults.refused_registrations() >= 1
    })
    .await;
    faults.set_down(false);
    let node = tokio::time::timeout(Duration::from_secs(20), start)
        .await
        .expect("the start ends")
        .unwrap()
        .expect("the node starts once the store answers");
    assert!(node.lease_remaining() > Duration::ZERO);
    node.shutdown(Duration::from_secs(5)).await;
}
