//! A lease taken over during a node freeze (SB-5.11, EG-14): the frozen owner's clock stands
//! still (an injected pause: its lease clock is a [`ManualClock`] the test does not move), so it
//! renews nothing; the store expires its lease and another node takes the actor over. When the
//! freeze ends its monotonic clock jumps forward, past its local lease deadline: it never serves
//! the actor again — while it cannot reach the store, and after its renewal learns that the
//! lease is gone.

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
use zlink_mesh::PeerAddress;

const TTL: Duration = Duration::from_secs(3);
const SECOND: Duration = Duration::from_secs(1);

struct Member {
    node: Node,
    store: Arc<FaultStore<Arc<dyn LocationStore>>>,
    clock: ManualClock,
}

async fn member(name: &str, shared: &Arc<dyn LocationStore>, peers: Vec<PeerAddress>) -> Member {
    let store = Arc::new(FaultStore::new(shared.clone()));
    let clock = ManualClock::new();
    let mut options = NodeOptions::new(mesh_config(name), store.clone(), demo::registry().unwrap());
    options.lease_ttl = TTL;
    options.lease_clock = Arc::new(clock.clone());
    options.peers = peers;
    let node = Node::start(options).await.unwrap();
    Member { node, store, clock }
}

// spec: SB-5.11, EG-14 — the old owner never serves after the new owner exists.
#[tokio::test]
async fn an_owner_frozen_past_its_lease_never_serves_after_the_takeover() {
    let store_clock = store::ManualClock::at_wall(store::contract::START);
    let shared: Arc<dyn LocationStore> =
        Arc::new(MemoryStore::with_clock(Arc::new(store_clock.clone())));
    let b = member("b", &shared, vec![]).await;
    let a = member("a", &shared, vec![b.node.address()]).await;
    wait_pair_up(&a.node, &b.node).await;
    let id = ActorId::new("c").unwrap();
    let old = b
        .node
        .create(Create::new("counter", id.clone()))
        .await
        .unwrap();
    assert_eq!(a.node.request(&old, &Add(1), TIMEOUT).await.unwrap(), 1);
    let turns = b.node.counters().turns;

    // b freezes: its clock stands still, so it renews nothing. Time passes for everyone else;
    // a keeps its lease renewed, b's expires in the store.
    for step in 1..=4u64 {
        store_clock.advance(SECOND);
        a.clock.advance(SECOND);
        if step % 2 == 1 {
            wait_until("a's renewal", || a.store.renewals() >= step.div_ceil(2)).await;
        }
    }
    // The new owner exists: a takes the actor over (same incarnation, new authority).
    let new = a
        .node
        .get_or_create(Create::new("counter", id.clone()))
        .await
        .unwrap();
    assert_eq!(new.node(), &rid("a"));
    assert_eq!(new.object_generation(), old.object_generation());
    assert!(new.location().authority_owner_generation > old.location().authority_owner_generation);

    // b wakes up cut off from the store (its renewals fail, so nothing tells it the lease is
    // gone): its monotonic clock jumped by the length of the freeze, past its local deadline,
    // and it refuses every call for the old incarnation, local and remote.
    let lease = b.node.lease().holder.lease_generation;
    b.store.set_down(true);
    b.clock.advance(4 * SECOND);
    wait_until("b's failed renewal", || b.store.failed_renewals() >= 1).await;
    let local = b.node.request(&old, &Get, TIMEOUT).await.unwrap_err();
    assert_eq!(local.kind(), ErrorKind::Unavailable, "{local}");
    let remote = a.node.request(&old, &Add(1), TIMEOUT).await.unwrap_err();
    assert_eq!(remote.kind(), ErrorKind::Unavailable, "{remote}");
    assert_eq!(
        b.node.send(&old, &Add(1)).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );

    // The store comes back: b's renewal learns the lease is gone (LeaseNotLive), the
    // incarnation ends and a new lease is registered; the old incarnation stays refused.
    b.store.set_down(false);
    b.clock.advance(SECOND);
    wait_until("b's new lease", || {
        b.node.lease().holder.lease_generation != lease
    })
    .await;
    let after = a.node.request(&old, &Get, TIMEOUT).await.unwrap_err();
    assert_eq!(after.kind(), ErrorKind::Unavailable, "{after}");
    assert_eq!(
        b.node.counters().turns,
        turns,
        "no turn ran on the old owner after the freeze"
    );
    // The new owner serves.
    assert_eq!(b.node.request(&new, &Add(5), TIMEOUT).await.unwrap(), 5);
    assert!(b.store.failed_renewals() >= 2);
}
