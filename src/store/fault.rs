//! A Location Store wrapper that injects an outage: while it is *down* every operation fails
//! with [`StoreError::Unavailable`] without reaching the wrapped store, as a store that is
//! locked, partitioned away or down would answer. Tests wrap one node's handle to cut that node
//! (and only it) off the shared store, and observe its lease renewals.

use std::fmt;
use std::time::Duration;

use super::types::{
    ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder, OwnerFence,
    OwnerLease, Reservation,
};
use super::{ActorId, LocationStore, NodeGeneration, NodeRid, StoreError, StoreFuture};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The fault-injecting wrapper (see the module docs).
pub struct FaultStore<S> {
    inner: S,
    down: AtomicBool,
    renewed: AtomicU64,
    renew_failed: AtomicU64,
    register_refused: AtomicU64,
}

impl<S: fmt::Debug> fmt::Debug for FaultStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStore")
            .field("inner", &self.inner)
            .field("down", &self.down.load(Ordering::SeqCst))
            .finish()
    }
}

impl<S: LocationStore> FaultStore<S> {
    /// Wraps `inner`, up.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            down: AtomicBool::new(false),
            renewed: AtomicU64::new(0),
            renew_failed: AtomicU64::new(0),
            register_refused: AtomicU64::new(0),
        }
    }

    /// Owner registrations refused by an outage so far.
    pub fn refused_registrations(&self) -> u64 {
        self.register_refused.load(Ordering::SeqCst)
    }

    /// Starts (`true`) or ends an outage.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Whether an outage is on.
    #[must_use]
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// Lease renewals that succeeded.
    #[must_use]
    pub fn renewals(&self) -> u64 {
        self.renewed.load(Ordering::SeqCst)
    }

    /// Lease renewals that failed (outage or store verdict).
    #[must_use]
    pub fn failed_renewals(&self) -> u64 {
        self.renew_failed.load(Ordering::SeqCst)
    }

    fn outage<T: Send + 'static>(&self) -> Option<StoreFuture<'_, T>> {
        self.is_down().then(|| {
            Box::pin(async {
                Err(StoreError::Unavailable {
                    backend: "fault",
                    source: "injected store outage".into(),
                })
            }) as StoreFuture<'_, T>
        })
    }
}

impl<S: LocationStore> LocationStore for FaultStore<S> {
    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        match self.outage() {
            Some(refused) => {
                self.register_refused.fetch_add(1, Ordering::SeqCst);
                refused
            }
            None => self.inner.register_owner(node, node_generation, ttl),
        }
    }

    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        let down = self.is_down();
        Box::pin(async move {
            let out = if down {
                Err(StoreError::Unavailable {
                    backend: "fault",
                    source: "injected store outage".into(),
                })
            } else {
                self.inner.renew_owner(holder, ttl).await
            };
            let counter = if out.is_ok() {
                &self.renewed
            } else {
                &self.renew_failed
            };
            counter.fetch_add(1, Ordering::SeqCst);
            out
        })
    }

    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        self.outage()
            .unwrap_or_else(|| self.inner.release_owner(holder))
    }

    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        self.outage()
            .unwrap_or_else(|| self.inner.reserve_activation(request))
    }

    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.outage()
            .unwrap_or_else(|| self.inner.mark_ready(actor_id, fence))
    }

    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        self.outage().unwrap_or_else(|| self.inner.lookup(actor_id))
    }

    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        self.outage()
            .unwrap_or_else(|| self.inner.cas_owner(actor_id, expected, new_owner))
    }

    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.outage()
            .unwrap_or_else(|| self.inner.relocation_fence(actor_id, expected, owner))
    }

    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        self.outage()
            .unwrap_or_else(|| self.inner.reincarnate(actor_id, owner))
    }

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        self.outage()
            .unwrap_or_else(|| self.inner.destroy(actor_id, fence))
    }

    fn write_wait_limit(&self) -> Option<Duration> {
        self.inner.write_wait_limit()
    }
}
