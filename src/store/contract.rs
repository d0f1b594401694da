//! The Location Store contract suite: one set of checks that every backend must pass.
//!
//! Each check takes a fresh, empty store and the [`ManualClock`] that store reads, drives it only
//! through the [`LocationStore`] trait and panics (with a message naming the spec rule) on the
//! first violation. [`run_all`] runs every check on fresh stores from a factory; backend tests
//! (in-memory and SQLite here, Redis later) call it or the single checks:
//!
//! ```ignore
//! zlink::store::contract::run_all(|clock| MemoryStore::with_clock(Arc::new(clock))).await;
//! ```
//!
//! Time moves only through the clock, never by sleeping, so the suite is deterministic.
//!
//! The Redis backend is checked against a real server named by [`REDIS_URL_VAR`]
//! ([`redis_test_url`]); each check uses its own key prefix ([`unique_prefix`]).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use super::{
    ActivationRequest, ActivationState, ActorId, ActorOwner, AuthorityFence, LeaseHolder,
    LocationStore, ManualClock, MeshName, NodeGeneration, NodeRid, ObjectGeneration, OwnerLease,
    Reservation, StoreError, StoreTime,
};

/// Lease time-to-live the suite registers with.
pub const TTL: Duration = Duration::from_secs(10);

/// Store time the suite's clocks start at.
pub const START: StoreTime = StoreTime::from_millis(1_700_000_000_000);

/// A node name as a [`NodeRid`] (panics on an invalid name: test helper).
#[must_use]
pub fn node(name: &str) -> NodeRid {
    NodeRid::new(name).expect("valid node rid")
}

/// An actor id (panics on an invalid id: test helper).
#[must_use]
pub fn actor(id: &str) -> ActorId {
    ActorId::new(id).expect("valid actor id")
}

/// The mesh the suite places actors in.
#[must_use]
pub fn mesh() -> MeshName {
    MeshName::new("contract").expect("valid mesh name")
}

/// The owner a lease holder is, on the suite's mesh.
#[must_use]
pub fn owner(lease: &OwnerLease) -> ActorOwner {
    ActorOwner {
        mesh: mesh(),
        holder: lease.holder.clone(),
    }
}

/// A reservation request for `id` of type `ty` by `lease`'s holder.
#[must_use]
pub fn request(id: &str, ty: &str, lease: &OwnerLease) -> ActivationRequest {
    ActivationRequest {
        actor_id: actor(id),
        actor_type: ty.to_owned(),
        owner: owner(lease),
    }
}

/// Registers `name` at generation `generation` with [`TTL`].
///
/// # Panics
/// When the store refuses.
pub async fn register<S: LocationStore + ?Sized>(
    store: &S,
    name: &str,
    generation: u64,
) -> OwnerLease {
    store
        .register_owner(node(name), NodeGeneration::new(generation), TTL)
        .await
        .expect("register_owner")
}

/// Reserves and commits Ready; returns the Ready location.
///
/// # Panics
/// When the reservation is not won or Ready is refused.
pub async fn create_ready<S: LocationStore + ?Sized>(
    store: &S,
    id: &str,
    ty: &str,
    lease: &OwnerLease,
) -> super::ActorLocation {
    let Reservation::Won(won) = store
        .reserve_activation(request(id, ty, lease))
        .await
        .expect("reserve_activation")
    else {
        panic!("EG-14: reservation of fresh actor {id} must be won");
    };
    store
        .mark_ready(actor(id), won.fence())
        .await
        .expect("mark_ready")
}

/// Polls every future to completion concurrently on the current task (a tiny `join_all`), so a
/// check can race operations without spawning (which would need `'static` stores).
pub async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("completed")).collect()
}

/// Leases: register, idempotent re-register, renew, expiry, restart, stale generation, release.
///
/// # Panics
/// On a contract violation.
pub async fn check_owner_leases<S: LocationStore + ?Sized>(store: &S, clock: &ManualClock) {
    let a = register(store, "node-a", 1).await;
    assert_eq!(a.expires_at, START.saturating_add(TTL));
    let again = register(store, "node-a", 1).await;
    assert_eq!(
        again.holder, a.holder,
        "same live process keeps its lease lifecycle"
    );

    clock.advance(TTL / 2);
    let renewed = store
        .renew_owner(a.holder.clone(), TTL)
        .await
        .expect("renew");
    assert_eq!(renewed.holder, a.holder);
    assert_eq!(renewed.expires_at, START.saturating_add(TTL / 2 + TTL));

    // Expiry is exclusive: at expires_at the lease is no longer live and is never revived.
    clock.set_wall(renewed.expires_at);
    let err = store.renew_owner(a.holder.clone(), TTL).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    let fresh = register(store, "node-a", 1).await;
    assert!(
        fresh.holder.lease_generation > a.holder.lease_generation,
        "a new lease lifecycle after expiry gets a fresh OwnerLeaseGeneration"
    );

    // A restarted process (new NodeGeneration) supersedes the live lease at once.
    let restarted = register(store, "node-a", 2).await;
    assert!(restarted.holder.lease_generation > fresh.holder.lease_generation);
    let err = store
        .renew_owner(fresh.holder.clone(), TTL)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    let err = store
        .register_owner(node("node-a"), NodeGeneration::new(1), TTL)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::StaleNodeGeneration { .. }),
        "{err}"
    );

    // Lease generations are unique across nodes.
    let b = register(store, "node-b", 1).await;
    assert!(b.holder.lease_generation > restarted.holder.lease_generation);

    // Release ends the lease now; releasing again is a no-op.
    store
        .release_owner(b.holder.clone())
        .await
        .expect("release");
    store
        .release_owner(b.holder.clone())
        .await
        .expect("release is idempotent");
    let err = store
        .reserve_activation(request("after-release", "T", &b))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
}

/// EG-14: reserve → Activating (one winner), others see Held, Ready commits, lookup reads it.
///
/// # Panics
/// On a contract violation.
pub async fn check_reserve_ready_lookup<S: LocationStore + ?Sized>(
    store: &S,
    _clock: &ManualClock,
) {
    let a = register(store, "node-a", 1).await;
    let b = register(store, "node-b", 1).await;
    assert_eq!(store.lookup(actor("p1")).await.expect("lookup"), None);

    let Reservation::Won(won) = store
        .reserve_activation(request("p1", "Player", &a))
        .await
        .expect("reserve")
    else {
        panic!("EG-14: first reservation wins");
    };
    assert_eq!(won.state, ActivationState::Activating);
    assert_eq!(won.owner_node, a.holder.node);
    assert_eq!(won.node_generation, a.holder.node_generation);
    assert_eq!(won.owner_lease_generation, a.holder.lease_generation);
    assert_eq!(won.mesh, mesh());
    assert_eq!(won.actor_type, "Player");

    // EG-14: only the reservation winner runs the factory; everyone else sees Held.
    let held = store
        .reserve_activation(request("p1", "Player", &b))
        .await
        .expect("reserve");
    assert_eq!(held, Reservation::Held(won.clone()));
    let held_self = store
        .reserve_activation(request("p1", "Player", &a))
        .await
        .expect("reserve");
    assert_eq!(
        held_self,
        Reservation::Held(won.clone()),
        "repeat by the owner is Held"
    );
    assert_eq!(
        store.lookup(actor("p1")).await.expect("lookup"),
        Some(won.clone())
    );

    let ready = store
        .mark_ready(actor("p1"), won.fence())
        .await
        .expect("ready");
    assert_eq!(ready.state, ActivationState::Ready);
    assert_eq!(ready.object_generation, won.object_generation);
    assert_eq!(
        ready.authority_owner_generation,
        won.authority_owner_generation
    );
    assert!(
        ready.version > won.version,
        "every change bumps the version"
    );
    let again = store
        .mark_ready(actor("p1"), won.fence())
        .await
        .expect("idempotent");
    assert_eq!(again, ready, "a repeated Ready commit changes nothing");
    assert_eq!(
        store.lookup(actor("p1")).await.expect("lookup"),
        Some(ready.clone())
    );
    let held = store
        .reserve_activation(request("p1", "Player", &b))
        .await
        .expect("reserve");
    assert_eq!(held, Reservation::Held(ready));

    // Wrong type under an existing id.
    let err = store
        .reserve_activation(request("p1", "Monster", &b))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ActorTypeMismatch { .. }), "{err}");
    assert_eq!(err.kind(), zlink_wire::ErrorKind::InvalidOperation);

    // Distinct actors are independent.
    let other = create_ready(store, "p2", "Player", &b).await;
    assert_eq!(other.owner_node, b.holder.node);
}

/// A candidate without a live lease can never reserve (stale owner fence, SB-12).
///
/// # Panics
/// On a contract violation.
pub async fn check_reservation_needs_live_lease<S: LocationStore + ?Sized>(
    store: &S,
    clock: &ManualClock,
) {
    let a = register(store, "node-a", 1).await;
    let forged = OwnerLease {
        holder: LeaseHolder {
            node: node("node-x"),
            node_generation: NodeGeneration::new(1),
            lease_generation: a.holder.lease_generation,
        },
        expires_at: a.expires_at,
    };
    let err = store
        .reserve_activation(request("q", "T", &forged))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    assert_eq!(err.kind(), zlink_wire::ErrorKind::Unavailable);

    clock.advance(TTL);
    let err = store
        .reserve_activation(request("q", "T", &a))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseNotLive { .. }),
        "expired lease: {err}"
    );
    assert_eq!(store.lookup(actor("q")).await.expect("lookup"), None);
}

/// `mark_ready` fences: wrong authority/version, wrong incarnation, unknown actor, dead owner.
///
/// # Panics
/// On a contract violation.
pub async fn check_mark_ready_fences<S: LocationStore + ?Sized>(store: &S, clock: &ManualClock) {
    let a = register(store, "node-a", 1).await;
    let err = store
        .mark_ready(
            actor("nobody"),
            AuthorityFence {
                object_generation: ObjectGeneration::new(1),
                authority_owner_generation: super::AuthorityOwnerGeneration::new(1),
                version: super::StoreVersion::new(1),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    assert_eq!(err.kind(), zlink_wire::ErrorKind::NotFound);

    let won = store
        .reserve_activation(request("m", "T", &a))
        .await
        .expect("reserve")
        .into_location();
    let mut stale = won.fence();
    stale.authority_owner_generation =
        super::AuthorityOwnerGeneration::new(won.authority_owner_generation.get() + 1);
    let err = store.mark_ready(actor("m"), stale).await.unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
    let mut stale = won.fence();
    stale.version = super::StoreVersion::new(won.version.get() + 7);
    let err = store.mark_ready(actor("m"), stale).await.unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
    let mut other = won.fence();
    other.object_generation = ObjectGeneration::new(won.object_generation.get() + 1);
    let err = store.mark_ready(actor("m"), other).await.unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );

    // The owner's lease ends before Ready: the reservation cannot be committed.
    clock.advance(TTL);
    let err = store.mark_ready(actor("m"), won.fence()).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    let still = store
        .lookup(actor("m"))
        .await
        .expect("lookup")
        .expect("record");
    assert_eq!(
        still.state,
        ActivationState::Activating,
        "failed commits write nothing"
    );
}

/// `cas_owner` (SB-8.9 target CAS with the source fence): success moves the owner and the
/// authority fence and keeps the ObjectGeneration (SB-1.3); a stale fence loses.
///
/// # Panics
/// On a contract violation.
pub async fn check_cas_owner_fences<S: LocationStore + ?Sized>(store: &S, clock: &ManualClock) {
    let a = register(store, "node-a", 1).await;
    let b = register(store, "node-b", 1).await;
    let c = register(store, "node-c", 1).await;

    let err = store
        .cas_owner(
            actor("r"),
            AuthorityFence {
                object_generation: ObjectGeneration::new(1),
                authority_owner_generation: super::AuthorityOwnerGeneration::new(1),
                version: super::StoreVersion::new(1),
            },
            owner(&b),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");

    let won = store
        .reserve_activation(request("r", "T", &a))
        .await
        .expect("reserve")
        .into_location();
    let err = store
        .cas_owner(actor("r"), won.fence(), owner(&b))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidState {
                state: ActivationState::Activating,
                ..
            }
        ),
        "an Activating actor cannot move: {err}"
    );
    let ready = store
        .mark_ready(actor("r"), won.fence())
        .await
        .expect("ready");

    let moved = store
        .cas_owner(actor("r"), ready.fence(), owner(&b))
        .await
        .expect("cas with the current fence");
    assert_eq!(moved.owner_node, b.holder.node);
    assert_eq!(moved.owner_lease_generation, b.holder.lease_generation);
    assert_eq!(
        moved.object_generation, ready.object_generation,
        "SB-1.3 keeps the incarnation"
    );
    assert!(moved.authority_owner_generation > ready.authority_owner_generation);
    assert!(moved.version > ready.version);
    assert_eq!(moved.state, ActivationState::Ready);
    assert_eq!(
        store.lookup(actor("r")).await.expect("lookup"),
        Some(moved.clone())
    );

    // The same source fence again (a second, racing relocation) loses.
    let err = store
        .cas_owner(actor("r"), ready.fence(), owner(&c))
        .await
        .unwrap_err();
    match &err {
        StoreError::FenceMismatch {
            expected, actual, ..
        } => {
            assert_eq!(*expected, ready.fence());
            assert_eq!(*actual, moved.fence());
        }
        other => panic!("expected FenceMismatch, got {other}"),
    }
    assert_eq!(
        err.kind(),
        zlink_wire::ErrorKind::Unavailable,
        "SB-12 stale fence"
    );

    let mut wrong = moved.fence();
    wrong.object_generation = ObjectGeneration::new(moved.object_generation.get() + 1);
    let err = store
        .cas_owner(actor("r"), wrong, owner(&c))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );
    assert_eq!(err.kind(), zlink_wire::ErrorKind::InvalidOperation);

    // The target's lease must be live.
    clock.advance(TTL / 2);
    let b2 = store
        .renew_owner(b.holder.clone(), TTL)
        .await
        .expect("renew b");
    clock.advance(TTL / 2);
    let err = store
        .cas_owner(actor("r"), moved.fence(), owner(&c))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    assert_eq!(
        store.lookup(actor("r")).await.expect("lookup"),
        Some(moved.clone())
    );
    let back = store
        .cas_owner(actor("r"), moved.fence(), owner(&b2))
        .await
        .expect("cas to a live owner (same holder) still works");
    assert!(back.authority_owner_generation > moved.authority_owner_generation);
}

/// The relocation fence (SB-8.5, SB-8.9): the owner moves the record's version forward without
/// changing the owner; only the fence it got lets a target's `cas_owner` succeed; retiring it is
/// a durable abort (a late CAS with it is refused); after the target's CAS the source can no
/// longer retire (the abort is then known not to be durable). Fenced by the exact record fence,
/// the recorded owner and a live lease.
///
/// # Panics
/// On a contract violation.
pub async fn check_relocation_fence<S: LocationStore + ?Sized>(store: &S, clock: &ManualClock) {
    let a = register(store, "node-a", 1).await;
    let b = register(store, "node-b", 1).await;

    let won = store
        .reserve_activation(request("r", "T", &a))
        .await
        .expect("reserve")
        .into_location();
    let err = store
        .relocation_fence(actor("r"), won.fence(), won.owner_fence())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidState { .. }),
        "an Activating actor does not relocate: {err}"
    );
    let ready = store
        .mark_ready(actor("r"), won.fence())
        .await
        .expect("ready");

    // Only the recorded owner takes the fence.
    let mut foreign = ready.owner_fence();
    foreign.holder = b.holder.clone();
    let err = store
        .relocation_fence(actor("r"), ready.fence(), foreign)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::OwnerMismatch { .. }), "{err}");

    let fenced = store
        .relocation_fence(actor("r"), ready.fence(), ready.owner_fence())
        .await
        .expect("the owner takes the relocation fence");
    assert!(fenced.version > ready.version);
    assert_eq!(
        (
            fenced.object_generation,
            fenced.authority_owner_generation,
            fenced.owner_lease_generation,
            &fenced.owner_node,
            fenced.state
        ),
        (
            ready.object_generation,
            ready.authority_owner_generation,
            ready.owner_lease_generation,
            &ready.owner_node,
            ActivationState::Ready
        ),
        "no owner change: bound routes stay valid"
    );
    assert_eq!(
        store.lookup(actor("r")).await.expect("lookup"),
        Some(fenced.clone())
    );

    // A second relocation with the old fence, and a CAS with the pre-relocation fence, lose.
    let err = store
        .relocation_fence(actor("r"), ready.fence(), ready.owner_fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
    let err = store
        .cas_owner(actor("r"), ready.fence(), owner(&b))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");

    // Durable abort: the fence handed to the target is retired; its late CAS is refused and the
    // record still names the source.
    let retired = store
        .relocation_fence(actor("r"), fenced.fence(), fenced.owner_fence())
        .await
        .expect("durable abort");
    let err = store
        .cas_owner(actor("r"), fenced.fence(), owner(&b))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::FenceMismatch { .. }),
        "SB-8.5: no CAS after a durable abort: {err}"
    );
    assert_eq!(
        store.lookup(actor("r")).await.expect("lookup"),
        Some(retired.clone())
    );

    // A new relocation: the target's CAS with its fence wins; the source can then no longer
    // retire that fence (its abort would not be durable) and the record stays the target's.
    let fenced = store
        .relocation_fence(actor("r"), retired.fence(), retired.owner_fence())
        .await
        .expect("second relocation");
    let moved = store
        .cas_owner(actor("r"), fenced.fence(), owner(&b))
        .await
        .expect("the target's CAS with the relocation fence");
    assert_eq!(moved.owner_node, b.holder.node);
    assert_eq!(moved.object_generation, ready.object_generation, "SB-1.3");
    let err = store
        .relocation_fence(actor("r"), fenced.fence(), fenced.owner_fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
    assert_eq!(
        store.lookup(actor("r")).await.expect("lookup"),
        Some(moved.clone())
    );

    // The owner's lease must be live.
    clock.advance(TTL);
    let err = store
        .relocation_fence(actor("r"), moved.fence(), moved.owner_fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    assert_eq!(store.lookup(actor("r")).await.expect("lookup"), Some(moved));
}

/// SB-8.6's recovery, SB-4.1: the owner replaces its incarnation with a new one in one write —
/// a new ObjectGeneration, authority and version, `Activating` until `mark_ready` — while the
/// record never disappears: no other node reserves the actor meanwhile, and no fence of the
/// old incarnation (a relocation target's CAS with the relocation fence among them) succeeds
/// afterwards. Fenced as destroy: only the recorded owner, with a live lease. A replacement not
/// yet committed (`Activating`) can itself be replaced.
///
/// # Panics
/// On a contract violation.
pub async fn check_reincarnate<S: LocationStore + ?Sized>(store: &S, clock: &ManualClock) {
    let a = register(store, "node-a", 1).await;
    let b = register(store, "node-b", 1).await;

    let ready = create_ready(store, "n", "T", &a).await;
    let fenced = store
        .relocation_fence(actor("n"), ready.fence(), ready.owner_fence())
        .await
        .expect("relocation fence");

    // Only the recorded owner replaces the incarnation.
    let mut foreign = fenced.owner_fence();
    foreign.holder = b.holder.clone();
    let err = store.reincarnate(actor("n"), foreign).await.unwrap_err();
    assert!(matches!(err, StoreError::OwnerMismatch { .. }), "{err}");
    let mut other = fenced.owner_fence();
    other.object_generation = ObjectGeneration::new(fenced.object_generation.get() + 1);
    let err = store.reincarnate(actor("n"), other).await.unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );

    let next = store
        .reincarnate(actor("n"), fenced.owner_fence())
        .await
        .expect("the owner replaces its incarnation");
    assert!(
        next.object_generation > fenced.object_generation,
        "SB-4.1: a new ObjectGeneration ({} then {})",
        fenced.object_generation,
        next.object_generation
    );
    assert!(next.authority_owner_generation > fenced.authority_owner_generation);
    assert!(next.version > fenced.version);
    assert_eq!(next.state, ActivationState::Activating);
    assert_eq!(
        (
            &next.owner_node,
            next.owner_lease_generation,
            &next.actor_type
        ),
        (
            &a.holder.node,
            a.holder.lease_generation,
            &fenced.actor_type
        )
    );
    assert_eq!(
        store.lookup(actor("n")).await.expect("lookup"),
        Some(next.clone())
    );

    // The record never disappeared: another node's reservation finds it held.
    match store
        .reserve_activation(request("n", "T", &b))
        .await
        .expect("reserve")
    {
        Reservation::Held(l) => assert_eq!(l, next),
        Reservation::Won(l) => panic!("another node won an actor whose owner replaced it: {l:?}"),
    }
    // The relocation fence of the old incarnation no longer wins a CAS, nor a second replace.
    let err = store
        .cas_owner(actor("n"), fenced.fence(), owner(&b))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "SB-8.6: no target CAS after the source's recovery: {err}"
    );
    let err = store
        .reincarnate(actor("n"), fenced.owner_fence())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );
    // A replacement not committed (its `mark_ready` never reached the store) is replaced again.
    let again = store
        .reincarnate(actor("n"), next.owner_fence())
        .await
        .expect("the uncommitted replacement is replaced");
    assert!(again.object_generation > next.object_generation);
    assert_eq!(again.state, ActivationState::Activating);
    let err = store
        .mark_ready(actor("n"), next.fence())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );
    let ready = store
        .mark_ready(actor("n"), again.fence())
        .await
        .expect("the new incarnation commits Ready");

    // After a target's CAS won, the source's replace is refused and the record stays the
    // target's.
    let fenced = store
        .relocation_fence(actor("n"), ready.fence(), ready.owner_fence())
        .await
        .expect("relocation fence");
    let moved = store
        .cas_owner(actor("n"), fenced.fence(), owner(&b))
        .await
        .expect("the target's CAS");
    let err = store
        .reincarnate(actor("n"), fenced.owner_fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::OwnerMismatch { .. }), "{err}");
    assert_eq!(
        store.lookup(actor("n")).await.expect("lookup"),
        Some(moved.clone())
    );

    // The owner's lease must be live.
    clock.advance(TTL);
    let err = store
        .reincarnate(actor("n"), moved.owner_fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    assert_eq!(store.lookup(actor("n")).await.expect("lookup"), Some(moved));
}

/// SB-4.1: destroy ends the incarnation; a re-create gets a new ObjectGeneration, and no fence of
/// the old incarnation ever matches again.
///
/// # Panics
/// On a contract violation.
pub async fn check_destroy_and_recreate<S: LocationStore + ?Sized>(
    store: &S,
    _clock: &ManualClock,
) {
    let a = register(store, "node-a", 1).await;
    let first = create_ready(store, "d", "T", &a).await;

    let mut wrong = first.owner_fence();
    wrong.object_generation = ObjectGeneration::new(first.object_generation.get() + 1);
    let err = store.destroy(actor("d"), wrong).await.unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );
    store
        .destroy(actor("d"), first.owner_fence())
        .await
        .expect("destroy");
    assert_eq!(store.lookup(actor("d")).await.expect("lookup"), None);
    let err = store
        .destroy(actor("d"), first.owner_fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");

    let second = create_ready(store, "d", "T", &a).await;
    assert!(
        second.object_generation > first.object_generation,
        "SB-4.1: re-create gets a new ObjectGeneration ({} then {})",
        first.object_generation,
        second.object_generation
    );
    assert!(second.authority_owner_generation > first.authority_owner_generation);
    assert!(second.version > first.version);

    let err = store
        .cas_owner(actor("d"), first.fence(), owner(&a))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );
    let err = store
        .mark_ready(actor("d"), first.fence())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::GenerationMismatch { .. }),
        "{err}"
    );

    // Destroy + re-create under another type is allowed (the old record is gone).
    store
        .destroy(actor("d"), second.owner_fence())
        .await
        .expect("destroy");
    let third = create_ready(store, "d", "Other", &a).await;
    assert!(third.object_generation > second.object_generation);
    assert_eq!(third.actor_type, "Other");
}

/// Failover: once the owner's lease expired (or was superseded by a restart), another node can
/// reserve the same incarnation with a new authority fence; the old owner's fences are refused.
///
/// # Panics
/// On a contract violation.
pub async fn check_dead_owner_takeover<S: LocationStore + ?Sized>(store: &S, clock: &ManualClock) {
    let a = register(store, "node-a", 1).await;
    let b = register(store, "node-b", 1).await;
    let ready = create_ready(store, "f", "T", &a).await;

    // Still live: held.
    assert!(
        !store
            .reserve_activation(request("f", "T", &b))
            .await
            .expect("reserve")
            .is_won()
    );

    clock.advance(TTL / 2);
    let b = store
        .renew_owner(b.holder.clone(), TTL)
        .await
        .expect("renew b");
    clock.advance(TTL / 2); // a expired, b live
    let Reservation::Won(taken) = store
        .reserve_activation(request("f", "T", &b))
        .await
        .expect("reserve")
    else {
        panic!("a dead owner's actor must be re-reservable after lease expiry");
    };
    assert_eq!(
        taken.object_generation, ready.object_generation,
        "failover keeps the incarnation"
    );
    assert!(taken.authority_owner_generation > ready.authority_owner_generation);
    assert_eq!(taken.owner_node, b.holder.node);
    assert_eq!(taken.state, ActivationState::Activating);
    let err = store
        .cas_owner(actor("f"), ready.fence(), owner(&b))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
    store
        .mark_ready(actor("f"), taken.fence())
        .await
        .expect("ready");

    // Restart: node-b generation 2 supersedes generation 1 at once, without waiting for expiry.
    let b2 = register(store, "node-b", 2).await;
    let Reservation::Won(again) = store
        .reserve_activation(request("f", "T", &b2))
        .await
        .expect("reserve")
    else {
        panic!("a restarted node re-reserves the actors of its superseded lease");
    };
    assert_eq!(again.node_generation, NodeGeneration::new(2));
    assert_eq!(again.owner_lease_generation, b2.holder.lease_generation);
    assert_eq!(again.object_generation, ready.object_generation);
    let err = store
        .mark_ready(actor("f"), taken.fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
}

/// Owner-side writes are fenced by the full owner authority: after a takeover (same
/// ObjectGeneration, new AuthorityOwnerGeneration) the old owner's destroy — a destroy proper,
/// a burnt reservation or an orphan clearing, all the same call — leaves the new owner's record
/// intact; a destroy under another lease of the same node, or under a lease that is no longer
/// live, is refused too.
///
/// # Panics
/// On a contract violation.
pub async fn check_stale_destroy_after_takeover<S: LocationStore + ?Sized>(
    store: &S,
    clock: &ManualClock,
) {
    let a = register(store, "node-a", 1).await;
    let b = register(store, "node-b", 1).await;
    let old = create_ready(store, "t", "T", &a).await;
    // a's lease expires (a store outage, a freeze); b stays live and takes the actor over.
    clock.advance(TTL / 2);
    let b = store
        .renew_owner(b.holder.clone(), TTL)
        .await
        .expect("renew b");
    clock.advance(TTL / 2);
    let Reservation::Won(taken) = store
        .reserve_activation(request("t", "T", &b))
        .await
        .expect("reserve")
    else {
        panic!("EG-14: the dead owner's actor is re-reservable");
    };
    assert_eq!(taken.object_generation, old.object_generation);
    let new = store
        .mark_ready(actor("t"), taken.fence())
        .await
        .expect("ready");

    // The stale owner's destroy, whatever it was for, is refused and changes nothing.
    let err = store
        .destroy(actor("t"), old.owner_fence())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::OwnerMismatch { .. }),
        "a stale owner's destroy is refused: {err}"
    );
    assert_eq!(err.kind(), zlink_wire::ErrorKind::Unavailable);
    // Even re-registered (a new lease of node-a), the old authority matches nothing.
    let a2 = register(store, "node-a", 1).await;
    assert_ne!(a2.holder, a.holder);
    let mut forged = old.owner_fence();
    forged.holder = a2.holder.clone();
    let err = store.destroy(actor("t"), forged).await.unwrap_err();
    assert!(matches!(err, StoreError::OwnerMismatch { .. }), "{err}");
    assert_eq!(
        store.lookup(actor("t")).await.expect("lookup").as_ref(),
        Some(&new),
        "the new owner's record is intact"
    );

    // The owner itself cannot destroy once its lease ended: it must not act as owner.
    clock.advance(TTL);
    let err = store
        .destroy(actor("t"), new.owner_fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
    assert_eq!(
        store.lookup(actor("t")).await.expect("lookup").as_ref(),
        Some(&new)
    );
    // With a live lease the owner's destroy succeeds.
    let b = store
        .register_owner(node("node-b"), NodeGeneration::new(1), TTL)
        .await
        .expect("register b");
    let Reservation::Won(again) = store
        .reserve_activation(request("t", "T", &b))
        .await
        .expect("reserve")
    else {
        panic!("re-reservable");
    };
    store
        .destroy(actor("t"), again.owner_fence())
        .await
        .expect("the owner's destroy");
    assert_eq!(store.lookup(actor("t")).await.expect("lookup"), None);
}

/// Concurrency on one handle: many candidates' reservations of one actor in flight together —
/// exactly one wins, and every loser sees the winner's record (EG-14). On a handle that
/// serialises its calls this is interleaving, not a race; [`check_racing_reservations`] races
/// independent handles on threads.
///
/// # Panics
/// On a contract violation.
pub async fn check_concurrent_reservations<S: LocationStore + ?Sized>(
    store: &S,
    _clock: &ManualClock,
) {
    let mut leases = Vec::new();
    for i in 0..8 {
        leases.push(register(store, &format!("node-{i}"), 1).await);
    }
    for round in 0..4 {
        let id = format!("race-{round}");
        let outcomes = join_all(
            leases
                .iter()
                .map(|l| store.reserve_activation(request(&id, "T", l)))
                .collect(),
        )
        .await;
        let outcomes: Vec<Reservation> =
            outcomes.into_iter().map(|r| r.expect("reserve")).collect();
        let winners: Vec<_> = outcomes.iter().filter(|r| r.is_won()).collect();
        assert_eq!(winners.len(), 1, "EG-14: exactly one reservation wins");
        let winner = winners[0].location();
        for o in &outcomes {
            assert_eq!(o.location(), winner, "every loser sees the winner's record");
        }
    }
}

/// Racing reservations: every handle in `handles` (independent connections to one store, as
/// separate processes would hold) reserves the same actor at the same moment from its own
/// tokio task, released together by a barrier; exactly one wins and every loser sees the
/// winner's record (EG-14). Run it on a multi-thread runtime so the tasks truly overlap.
///
/// # Panics
/// On a contract violation.
pub async fn check_racing_reservations<S: LocationStore + 'static>(
    handles: Vec<std::sync::Arc<S>>,
    rounds: usize,
) {
    let mut leases = Vec::new();
    for (i, h) in handles.iter().enumerate() {
        leases.push(register(h.as_ref(), &format!("racer-{i}"), 1).await);
    }
    for round in 0..rounds {
        let id = format!("racing-{round}");
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(handles.len()));
        let tasks: Vec<_> = handles
            .iter()
            .zip(&leases)
            .map(|(h, l)| {
                let (h, barrier, req) = (h.clone(), barrier.clone(), request(&id, "T", l));
                tokio::spawn(async move {
                    barrier.wait().await;
                    h.reserve_activation(req).await
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for t in tasks {
            outcomes.push(t.await.expect("racer task").expect("reserve"));
        }
        let winners: Vec<_> = outcomes.iter().filter(|r| r.is_won()).collect();
        assert_eq!(
            winners.len(),
            1,
            "EG-14: exactly one racing reservation wins"
        );
        let winner = winners[0].location();
        for o in &outcomes {
            assert_eq!(o.location(), winner, "every loser sees the winner's record");
        }
    }
}

/// Environment variable naming the Redis server the Redis tests run against, e.g.
/// `redis://127.0.0.1:16379` (`.ci/run` starts one and sets it).
pub const REDIS_URL_VAR: &str = "ZLINK_TEST_REDIS_URL";

/// The Redis URL of the test server, from [`REDIS_URL_VAR`].
///
/// When it is unset: in CI (`CI` set) the test fails with a message saying so — a Redis test is
/// never skipped silently there; elsewhere a `SKIPPED` line naming `test` goes straight to
/// stderr (past the test harness's capture) and `None` is returned.
///
/// # Panics
/// When the variable is unset and `CI` is set.
#[must_use]
pub fn redis_test_url(test: &str) -> Option<String> {
    use std::io::Write as _;
    if let Some(url) = std::env::var(REDIS_URL_VAR).ok().filter(|u| !u.is_empty()) {
        return Some(url);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {REDIS_URL_VAR} is not set but CI is: the Redis tests need a server \
         (.ci/run starts redis-server and exports {REDIS_URL_VAR}=redis://127.0.0.1:16379)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {REDIS_URL_VAR} is not set (start redis-server and set it to run the \
         Redis tests)"
    );
    None
}

/// A key prefix no other test (or test process) uses: `zlink-test-{tag}-{pid}-{n}-{nanos}`.
#[must_use]
pub fn unique_prefix(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "zlink-test-{tag}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `url` with `prefix=` set to a fresh [`unique_prefix`].
#[must_use]
pub fn with_unique_prefix(url: &str, tag: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}prefix={}", unique_prefix(tag))
}

/// Runs every check, each on a fresh store from `make` reading a fresh [`ManualClock`] at
/// [`START`].
///
/// # Panics
/// On the first contract violation.
pub async fn run_all<S, F>(mut make: F)
where
    S: LocationStore,
    F: FnMut(ManualClock) -> S,
{
    macro_rules! each {
        ($($check:ident),* $(,)?) => {$(
            let clock = ManualClock::at_wall(START);
            let store = make(clock.clone());
            $check(&store, &clock).await;
        )*};
    }
    each!(
        check_owner_leases,
        check_reserve_ready_lookup,
        check_reservation_needs_live_lease,
        check_mark_ready_fences,
        check_cas_owner_fences,
        check_relocation_fence,
        check_reincarnate,
        check_destroy_and_recreate,
        check_dead_owner_takeover,
        check_stale_destroy_after_takeover,
        check_concurrent_reservations,
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::{MemoryStore, SqliteOptions, SqliteStore};

    // spec: EG-14, SB-4.1, SB-12 — the whole contract on the in-memory backend.
    #[tokio::test]
    async fn memory_store_meets_the_contract() {
        run_all(|clock| MemoryStore::with_clock(Arc::new(clock))).await;
    }

    // spec: EG-14, SB-4.1, SB-12 — the whole contract on the SQLite backend.
    #[tokio::test]
    async fn sqlite_store_meets_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = 0;
        run_all(|clock| {
            n += 1;
            SqliteStore::open_with(
                dir.path().join(format!("store-{n}.db")),
                SqliteOptions::default(),
                Arc::new(clock),
            )
            .unwrap()
        })
        .await;
    }
}
