//! Message Follow through two in-process nodes (the old owner `a`, the new owner `b`) without a
//! relocation driver: `b` hosts an incarnation, `a` holds a follow entry to it as a commit
//! installs it, and a stale ref naming `a` is used as a caller that saw the actor on `a` would.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zlink_mesh::{MeshConfig, MeshName, MeshSecret, NodeRid};
use zlink_wire::{
    ActorId, AuthorityOwnerGeneration, DispatchKey, ErrorKind, ObjectGeneration,
    OwnerLeaseGeneration,
};

use super::super::{Node, NodeOptions};
use crate::actor::fence::CallFence;
use crate::actor::{ActorRef, ActorRegistry, ActorTypeBuilder, Create, Handled, Message};
use crate::clock::ManualClock;
use crate::relocation::{FollowConfig, FollowRefusal};
use crate::store::{FaultStore, LocationStore, MemoryStore};

const WAIT: Duration = Duration::from_secs(20);

#[derive(Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    const KEY: DispatchKey = DispatchKey::new(1);
    type Reply = u64;
}

fn registry() -> ActorRegistry {
    let t = ActorTypeBuilder::new("tally", |_info, _init| Ok(0u64))
        .handle(|total: &mut u64, _ctx, Add(n)| {
            *total += n;
            Handled::ok(*total)
        })
        .build()
        .unwrap();
    let mut r = ActorRegistry::new();
    r.register(t).unwrap();
    r
}

fn mesh(name: &str) -> MeshConfig {
    let mut c = MeshConfig::new(MeshName::new("test").unwrap(), NodeRid::new(name).unwrap());
    c.secret = Some(MeshSecret::new(b"zlink-test-secret-0123456789abcdef".to_vec()).unwrap());
    c
}

struct Pair {
    a: Node,
    b: Node,
    clock: Arc<ManualClock>,
    /// `a`'s store handle (can be cut off) and lease clock.
    a_store: Arc<FaultStore<Arc<dyn LocationStore>>>,
    lease_clock: Arc<ManualClock>,
}

async fn pair(ttl: Duration) -> Pair {
    // The store's own clock never moves: only `a`'s local deadline can stop its lease.
    let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::with_clock(Arc::new(
        ManualClock::at_wall(crate::store::contract::START),
    )));
    let b = Node::start(NodeOptions::new(mesh("b"), store.clone(), registry()))
        .await
        .unwrap();
    let clock = Arc::new(ManualClock::new());
    let lease_clock = Arc::new(ManualClock::new());
    let a_store = Arc::new(FaultStore::new(store));
    let mut oa = NodeOptions::new(mesh("a"), a_store.clone(), registry());
    oa.lease_ttl = Duration::from_secs(3);
    oa.lease_clock = lease_clock.clone();
    oa.peers = vec![b.address()];
    oa.clock = clock.clone();
    oa.message_follow = FollowConfig {
        ttl,
        ..FollowConfig::default()
    };
    let a = Node::start(oa).await.unwrap();
    assert!(a.wait_peers(WAIT).await.is_empty());
    Pair {
        a,
        b,
        clock,
        a_store,
        lease_clock,
    }
}

/// `x` lives on `b`; `a` follows it there as if it had moved from `a` (its fences on `a`:
/// `a`'s NodeGeneration, authority 1, `a`'s lease). Returns the ref a caller kept from `a`.
async fn moved(p: &Pair, id: &str) -> (ActorRef, ActorRef) {
    let on_b =
        p.b.create(Create::new("tally", ActorId::new(id).unwrap()))
            .await
            .unwrap();
    let target =
        p.b.store()
            .lookup(on_b.id().clone())
            .await
            .unwrap()
            .unwrap();
    let mut loc = on_b.wire_location();
    loc.node = p.a.node_rid().clone();
    loc.node_generation = p.a.generation();
    loc.authority_owner_generation = AuthorityOwnerGeneration::new(1);
    loc.owner_lease_generation = p.a.lease().holder.lease_generation;
    let stale = ActorRef::from_parts(
        on_b.id().clone(),
        "tally".into(),
        on_b.object_generation(),
        loc,
    );
    p.a.install_follow(&CallFence::of_ref(&stale), target);
    (stale, on_b)
}

fn request_kind(r: Result<u64, crate::actor::ActorError>) -> ErrorKind {
    r.unwrap_err().kind()
}

// spec: SB-5.10, SB-14.3 (a stale ref's request and send at the old owner reach the new owner
// once; the reply comes back on the original request)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_refs_calls_are_forwarded_once_and_served_by_the_new_owner() {
    let p = pair(Duration::from_secs(5)).await;
    let (stale, on_b) = moved(&p, "x").await;
    let t = Duration::from_secs(10);
    assert_eq!(p.a.request(&stale, &Add(2), t).await.unwrap(), 2);
    p.a.send(&stale, &Add(3)).await.unwrap();
    // The new owner ran each once: 2 + 3 + 0.
    assert_eq!(p.b.request(&on_b, &Add(0), t).await.unwrap(), 5);
    // A caller on the new owner's node with the old ref: a 160 to `a`, forwarded back to `b`.
    assert_eq!(p.b.request(&stale, &Add(1), t).await.unwrap(), 6);
    let c = p.a.follow_counters();
    assert_eq!(c.forwarded, 3);
    assert_eq!(c.entries, 1);
    assert_eq!(p.a.info().message_follow.get("forwarded"), Some(&3));
    assert_eq!(p.a.counters().message_follow["forwarded"], 3);
}

// spec: SB-5.10, SB-12 (after the follow time: Unavailable, the entry freed; another
// incarnation: InvalidOperation; never a store read and resend)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_follow_time_a_stale_ref_is_unavailable_and_the_entry_freed() {
    let p = pair(Duration::from_secs(5)).await;
    let (stale, _) = moved(&p, "x").await;
    let t = Duration::from_secs(10);
    let other = ActorRef::from_parts(
        stale.id().clone(),
        "tally".into(),
        ObjectGeneration::new(stale.object_generation().get() + 1),
        stale.wire_location(),
    );
    assert_eq!(
        request_kind(p.a.request(&other, &Add(1), t).await),
        ErrorKind::InvalidOperation
    );
    let mut old_lease = stale.wire_location();
    old_lease.owner_lease_generation =
        OwnerLeaseGeneration::new(old_lease.owner_lease_generation.get() + 7);
    let old_lease = ActorRef::from_parts(
        stale.id().clone(),
        "tally".into(),
        stale.object_generation(),
        old_lease,
    );
    assert_eq!(
        request_kind(p.a.request(&old_lease, &Add(1), t).await),
        ErrorKind::Unavailable
    );
    assert_eq!(p.a.request(&stale, &Add(1), t).await.unwrap(), 1);
    p.clock.advance(Duration::from_secs(5));
    assert_eq!(
        request_kind(p.a.request(&stale, &Add(1), t).await),
        ErrorKind::Unavailable
    );
    let c = p.a.follow_counters();
    assert_eq!((c.entries, c.expired, c.forwarded), (0, 1, 1));
    assert_eq!(c.refused(FollowRefusal::WrongGeneration), 1);
    assert_eq!(c.refused(FollowRefusal::StaleFence), 1);
    assert_eq!(c.refused(FollowRefusal::Expired), 1);
    assert_eq!(
        p.a.send(&stale, &Add(1)).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(p.a.follow_counters().refused(FollowRefusal::NoRoute), 1);
}

// spec: SB-5.10 (once: a forwarded record that finds no live incarnation at the new owner is not
// forwarded again) and SB-12 (the new owner's answer is the original request's)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_record_is_never_forwarded_again() {
    let p = pair(Duration::from_secs(5)).await;
    let (stale, on_b) = moved(&p, "x").await;
    let t = Duration::from_secs(10);
    // `b` destroys the incarnation: the forwarded call is answered NotFound by `b`.
    p.b.destroy(&on_b).await.unwrap();
    assert_eq!(
        request_kind(p.a.request(&stale, &Add(1), t).await),
        ErrorKind::NotFound
    );
    // `y` lives on `b` and `a` follows it there; then `b` too ends it as moved (to `a`): a
    // record `a` forwards finds it followed at `b`, which does not forward it again — no loop.
    let (stale_y, on_b_y) = moved(&p, "y").await;
    let mut back =
        p.b.store()
            .lookup(on_b_y.id().clone())
            .await
            .unwrap()
            .unwrap();
    back.owner_node = p.a.node_rid().clone();
    back.node_generation = p.a.generation();
    assert!(p.b.end_moved(&back));
    assert_eq!(
        request_kind(p.a.request(&stale_y, &Add(1), t).await),
        ErrorKind::Unavailable
    );
    assert_eq!(
        p.b.follow_counters()
            .refused(FollowRefusal::AlreadyFollowed),
        1
    );
    assert_eq!(p.a.follow_counters().forwarded, 2);
}

// spec: SB-5.11 (a follow route is a stored route: the old owner forwards only within its own
// local lease deadline; a store outage never extends it)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_owner_forwards_only_within_its_own_lease() {
    let p = pair(Duration::from_secs(60)).await;
    let (stale, _) = moved(&p, "x").await;
    let t = Duration::from_secs(10);
    assert_eq!(p.a.request(&stale, &Add(1), t).await.unwrap(), 1);
    p.a_store.set_down(true);
    // Past the local deadline (TTL − TTL/10 = 2.7 s) without a successful renewal.
    p.lease_clock.advance(Duration::from_secs(1));
    let renewals_failed = || p.a_store.failed_renewals();
    let deadline = tokio::time::Instant::now() + WAIT;
    while renewals_failed() < 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    p.lease_clock.advance(Duration::from_millis(1_800));
    assert_eq!(p.a.lease_remaining(), Duration::ZERO);
    assert_eq!(
        request_kind(p.a.request(&stale, &Add(1), t).await),
        ErrorKind::Unavailable
    );
    assert_eq!(
        p.b.request(&stale, &Add(1), t).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(p.a.follow_counters().forwarded, 1);
    // A renewal of the same lease restores the follow (its time had not run out).
    p.a_store.set_down(false);
    p.lease_clock.advance(Duration::from_millis(400));
    let deadline = tokio::time::Instant::now() + WAIT;
    while p.a.lease_remaining() == Duration::ZERO && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(p.a.request(&stale, &Add(1), t).await.unwrap(), 2);
}

/// The 38 of session `session` (from the session owner `s`, lifecycle 1) for the binding
/// generation 1 of `actor`, as `operation`.
fn bind_record(
    actor: &ActorRef,
    operation: zlink_wire::BindOperation,
) -> zlink_wire::BoundSessionBind {
    let loc = actor.wire_location();
    zlink_wire::BoundSessionBind {
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        target_node_generation: loc.node_generation,
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        session_lifecycle: zlink_wire::SessionLifecycleGeneration::new(1),
        session_owner: zlink_wire::OwnerId::new(1),
        session_owner_lease_generation: OwnerLeaseGeneration::new(1),
        session: zlink_wire::SessionRid::new(1),
        binding_generation: zlink_wire::BindingGeneration::new(1),
        operation,
        deadline: zlink_wire::Deadline::from_remaining(WAIT),
    }
}

// spec: SB-8.4, SB-5.12, SB-7.4
// A disconnect held for a relocation whose seal entry ends by its own time (the relocation
// neither committed nor aborted within `seal_hold`) is decided again when the entry ends, on
// the node clock — not a request timeout later. The request timeout here is far past the
// test's guard: only the seal entry's end can wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_held_on_a_seal_entry_that_ends_by_its_time_wakes_then() {
    let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new());
    let mut o = NodeOptions::new(mesh("a"), store, registry());
    o.clock = clock.clone();
    o.request_timeout = Duration::from_secs(600);
    let seal_hold = FollowConfig::default().seal_hold;
    let a = Node::start(o).await.unwrap();
    let x = a
        .create(Create::new("tally", ActorId::new("x").unwrap()))
        .await
        .unwrap();
    let s = zlink_mesh::NodeRid::new("s").unwrap();
    let (bound, _) = a
        .bind_at_owner(&s, bind_record(&x, zlink_wire::BindOperation::Bind))
        .await;
    bound.unwrap();
    // A relocation sealed the incarnation and never ends.
    a.seal_follow(x.id().clone(), x.object_generation());
    let disconnect = {
        let a = a.clone();
        let rec = bind_record(&x, zlink_wire::BindOperation::Disconnect);
        tokio::spawn(async move { a.bind_at_owner(&s, rec).await.0 })
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.follow_counters().held == 0 {
        assert!(tokio::time::Instant::now() < deadline, "not held");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Not yet: the entry holds it until its time.
    clock.advance(seal_hold - Duration::from_millis(1));
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(
        !disconnect.is_finished(),
        "decided before the seal entry ended"
    );
    clock.advance(Duration::from_millis(1));
    let out = tokio::time::timeout(WAIT, disconnect)
        .await
        .expect("woken when the seal entry ended")
        .unwrap();
    // The incarnation is still here: the disconnect is applied here.
    assert_eq!(out.unwrap().object_generation, x.object_generation());
    assert_eq!(a.follow_counters().held, 1);
}

// spec: SB-5.10, SB-14.3 (every record the old owner accepted reaches the new owner once)
// A burst of one-way sends from another node with a stale ref, far more than the forward queue
// holds, while the ordered forwarder admits one at a time: none is dropped (`queue_full`),
// the sender's receive window holds the rest back; the new owner counts every one, and the
// request behind them sees them all (one sender, one order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sends_to_a_stale_ref_is_forwarded_whole() {
    let p = pair(Duration::from_secs(60)).await;
    let (stale, on_b) = moved(&p, "x").await;
    let n = 8 * super::super::follow::FORWARD_QUEUE as u64;
    for _ in 0..n {
        p.b.send(&stale, &Add(1)).await.unwrap();
    }
    let t = Duration::from_secs(20);
    assert_eq!(p.b.request(&stale, &Add(0), t).await.unwrap(), n);
    assert_eq!(p.b.request(&on_b, &Add(0), t).await.unwrap(), n);
    let c = p.a.follow_counters();
    assert_eq!(c.refused(FollowRefusal::QueueFull), 0);
    assert_eq!(c.forwarded, n + 1);
}
