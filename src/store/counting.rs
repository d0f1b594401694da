//! A Location Store wrapper that counts every call per operation, so contract tests can observe
//! the provider's lookups (SB-14: "verified only through ... the Location Store provider's
//! observed lookups"; SB-14.6 "relays cause zero Location Store lookups").
//!
//! Invariant: a call is counted when the operation is *called* (before the future is polled), so
//! even a call whose future is dropped unpolled shows up.

use std::fmt;
use std::time::Duration;

use super::types::{
    ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder, OwnerFence,
    OwnerLease, Reservation,
};
use super::{ActorId, LocationStore, NodeGeneration, NodeRid, StoreFuture};
use crate::sync::atomic::{AtomicU64, Ordering};

/// One operation of [`LocationStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreOp {
    /// [`LocationStore::register_owner`].
    RegisterOwner,
    /// [`LocationStore::renew_owner`].
    RenewOwner,
    /// [`LocationStore::release_owner`].
    ReleaseOwner,
    /// [`LocationStore::reserve_activation`].
    ReserveActivation,
    /// [`LocationStore::mark_ready`].
    MarkReady,
    /// [`LocationStore::lookup`].
    Lookup,
    /// [`LocationStore::cas_owner`].
    CasOwner,
    /// [`LocationStore::destroy`].
    Destroy,
    /// [`LocationStore::relocation_fence`].
    RelocationFence,
    /// [`LocationStore::reincarnate`].
    Reincarnate,
}

impl StoreOp {
    /// Every operation, in declaration order.
    pub const ALL: [StoreOp; 10] = [
        StoreOp::RegisterOwner,
        StoreOp::RenewOwner,
        StoreOp::ReleaseOwner,
        StoreOp::ReserveActivation,
        StoreOp::MarkReady,
        StoreOp::Lookup,
        StoreOp::CasOwner,
        StoreOp::Destroy,
        StoreOp::RelocationFence,
        StoreOp::Reincarnate,
    ];

    /// Stable snake_case name (metric label).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            StoreOp::RegisterOwner => "register_owner",
            StoreOp::RenewOwner => "renew_owner",
            StoreOp::ReleaseOwner => "release_owner",
            StoreOp::ReserveActivation => "reserve_activation",
            StoreOp::MarkReady => "mark_ready",
            StoreOp::Lookup => "lookup",
            StoreOp::CasOwner => "cas_owner",
            StoreOp::Destroy => "destroy",
            StoreOp::RelocationFence => "relocation_fence",
            StoreOp::Reincarnate => "reincarnate",
        }
    }

    const fn index(self) -> usize {
        match self {
            StoreOp::RegisterOwner => 0,
            StoreOp::RenewOwner => 1,
            StoreOp::ReleaseOwner => 2,
            StoreOp::ReserveActivation => 3,
            StoreOp::MarkReady => 4,
            StoreOp::Lookup => 5,
            StoreOp::CasOwner => 6,
            StoreOp::Destroy => 7,
            StoreOp::RelocationFence => 8,
            StoreOp::Reincarnate => 9,
        }
    }
}

/// A snapshot of the counters of a [`CountingStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCallCounts([u64; StoreOp::ALL.len()]);

impl StoreCallCounts {
    /// Calls of `op`.
    #[must_use]
    pub fn get(&self, op: StoreOp) -> u64 {
        self.0[op.index()]
    }

    /// Calls of every operation together.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Per-operation difference `self - earlier` (saturating), for "what happened since".
    #[must_use]
    pub fn since(&self, earlier: &StoreCallCounts) -> StoreCallCounts {
        let mut out = [0; StoreOp::ALL.len()];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = self.0[i].saturating_sub(earlier.0[i]);
        }
        StoreCallCounts(out)
    }
}

/// Wraps a store and counts every call per [`StoreOp`]; otherwise forwards unchanged.
pub struct CountingStore<S> {
    inner: S,
    counts: [AtomicU64; StoreOp::ALL.len()],
}

impl<S: fmt::Debug> fmt::Debug for CountingStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingStore")
            .field("inner", &self.inner)
            .field("counts", &self.counts())
            .finish()
    }
}

impl<S> CountingStore<S> {
    /// Wraps `inner` with all counters at zero.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Calls of `op` so far.
    pub fn count(&self, op: StoreOp) -> u64 {
        self.counts[op.index()].load(Ordering::SeqCst)
    }

    /// Snapshot of every counter.
    pub fn counts(&self) -> StoreCallCounts {
        StoreCallCounts(std::array::from_fn(|i| {
            self.counts[i].load(Ordering::SeqCst)
        }))
    }

    /// Sets every counter back to zero.
    pub fn reset(&self) {
        for c in &self.counts {
            c.store(0, Ordering::SeqCst);
        }
    }

    fn hit(&self, op: StoreOp) {
        self.counts[op.index()].fetch_add(1, Ordering::SeqCst);
    }
}

impl<S: LocationStore> LocationStore for CountingStore<S> {
    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        self.hit(StoreOp::RegisterOwner);
        self.inner.register_owner(node, node_generation, ttl)
    }

    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        self.hit(StoreOp::RenewOwner);
        self.inner.renew_owner(holder, ttl)
    }

    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        self.hit(StoreOp::ReleaseOwner);
        self.inner.release_owner(holder)
    }

    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        self.hit(StoreOp::ReserveActivation);
        self.inner.reserve_activation(request)
    }

    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.hit(StoreOp::MarkReady);
        self.inner.mark_ready(actor_id, fence)
    }

    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        self.hit(StoreOp::Lookup);
        self.inner.lookup(actor_id)
    }

    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        self.hit(StoreOp::CasOwner);
        self.inner.cas_owner(actor_id, expected, new_owner)
    }

    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.hit(StoreOp::RelocationFence);
        self.inner.relocation_fence(actor_id, expected, owner)
    }

    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        self.hit(StoreOp::Reincarnate);
        self.inner.reincarnate(actor_id, owner)
    }

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        self.hit(StoreOp::Destroy);
        self.inner.destroy(actor_id, fence)
    }

    fn write_wait_limit(&self) -> Option<Duration> {
        self.inner.write_wait_limit()
    }
}
