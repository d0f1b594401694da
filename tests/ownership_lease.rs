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
    let mut options = NodeOptions::new(mesh_config(name), store.clone(), demo::registry().unwrap());
    options.lease_ttl = TTL;
    options.lease_clock = Arc::new(clock.clone());
    options.peers = peers;
    let node = Node::start(options).await.unwrap();
    Owner { node, store, clock }
}

fn shared_store() -> Arc<dyn LocationStore> {
    let clock = store::ManualClock::new(store::contract::START);
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

// spec: SB-5.11 — a TTL the store's busy timeout cannot renew in time is refused at start.
#[tokio::test]
async fn a_node_refuses_a_lease_ttl_its_store_cannot_renew_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn LocationStore> =
        Arc::new(zlink::store::SqliteStore::open(dir.path().join("s.db")).unwrap());
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
