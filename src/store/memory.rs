//! In-memory Location Store: one process, one mutex around the whole state. For unit tests and
//! single-process experiments; nothing survives the process.
//!
//! Invariant: every operation runs the shared core (`core.rs`) while holding the one lock, so
//! each operation is atomic exactly as a backend transaction is.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::core::{self, ActorCounters, ReserveDecision};
use super::types::{
    ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder, OwnerFence,
    OwnerLease, Reservation,
};
use super::{ActorId, LocationStore, NodeGeneration, NodeRid, StoreError, StoreFuture};
use crate::clock::{Clock, SystemClock};
use crate::sync::Mutex;

#[derive(Default)]
struct State {
    leases: HashMap<NodeRid, OwnerLease>,
    last_lease_generation: u64,
    actors: HashMap<ActorId, ActorLocation>,
    counters: HashMap<ActorId, ActorCounters>,
}

impl State {
    fn write(&mut self, write: core::ActorWrite) -> ActorLocation {
        let id = write.location.actor_id.clone();
        self.counters.insert(id.clone(), write.counters);
        self.actors.insert(id, write.location.clone());
        write.location
    }

    fn counters(&self, id: &ActorId) -> ActorCounters {
        self.counters.get(id).copied().unwrap_or_default()
    }
}

/// The in-memory backend. Clones are not provided; share it through `Arc`.
pub struct MemoryStore {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    #[must_use]
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store on `clock`.
    #[must_use]
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
        }
    }

    fn with_state<T>(
        &self,
        f: impl FnOnce(&mut State, super::StoreTime) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A panic while holding the lock can only come from a bug in this module; the state is
        // only ever replaced wholesale per entry, so continuing with it is sound.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = super::StoreTime::now(self.clock.as_ref());
        f(&mut state, now)
    }
}

impl LocationStore for MemoryStore {
    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        Box::pin(async move {
            self.with_state(|s, now| {
                let r = core::register(
                    s.leases.get(&node),
                    node.clone(),
                    node_generation,
                    ttl,
                    now,
                    s.last_lease_generation,
                )?;
                s.last_lease_generation = r.last_lease_generation;
                s.leases.insert(node, r.lease.clone());
                Ok(r.lease)
            })
        })
    }

    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        Box::pin(async move {
            self.with_state(|s, now| {
                let lease = core::renew(s.leases.get(&holder.node), &holder, ttl, now)?;
                s.leases.insert(holder.node, lease.clone());
                Ok(lease)
            })
        })
    }

    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.with_state(|s, now| {
                if let Some(lease) = core::release(s.leases.get(&holder.node), &holder, now) {
                    s.leases.insert(holder.node, lease);
                }
                Ok(())
            })
        })
    }

    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        Box::pin(async move {
            self.with_state(|s, now| {
                let record = s.actors.get(&request.actor_id);
                let owner_lease = record.and_then(|r| s.leases.get(&r.owner_node));
                let decision = core::reserve(
                    record,
                    s.counters(&request.actor_id),
                    s.leases.get(&request.owner.holder.node),
                    owner_lease,
                    &request,
                    now,
                )?;
                Ok(match decision {
                    ReserveDecision::Held(location) => Reservation::Held(location),
                    ReserveDecision::Won(write) => Reservation::Won(s.write(write)),
                })
            })
        })
    }

    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        Box::pin(async move {
            self.with_state(|s, now| {
                let record = s.actors.get(&actor_id);
                let owner_lease = record.and_then(|r| s.leases.get(&r.owner_node));
                match core::mark_ready(
                    record,
                    s.counters(&actor_id),
                    owner_lease,
                    &actor_id,
                    fence,
                    now,
                )? {
                    Some(write) => Ok(s.write(write)),
                    None => Ok(record.cloned().ok_or(StoreError::NotFound { actor_id })?),
                }
            })
        })
    }

    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        Box::pin(async move { self.with_state(|s, _| Ok(s.actors.get(&actor_id).cloned())) })
    }

    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        Box::pin(async move {
            self.with_state(|s, now| {
                let write = core::cas_owner(
                    s.actors.get(&actor_id),
                    s.counters(&actor_id),
                    s.leases.get(&new_owner.holder.node),
                    &actor_id,
                    expected,
                    &new_owner,
                    now,
                )?;
                Ok(s.write(write))
            })
        })
    }

    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        Box::pin(async move {
            self.with_state(|s, now| {
                let write = core::relocation_fence(
                    s.actors.get(&actor_id),
                    s.counters(&actor_id),
                    s.leases.get(&owner.holder.node),
                    &actor_id,
                    expected,
                    &owner,
                    now,
                )?;
                Ok(s.write(write))
            })
        })
    }

    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        Box::pin(async move {
            self.with_state(|s, now| {
                let write = core::reincarnate(
                    s.actors.get(&actor_id),
                    s.counters(&actor_id),
                    s.leases.get(&owner.holder.node),
                    &actor_id,
                    &owner,
                    now,
                )?;
                Ok(s.write(write))
            })
        })
    }

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.with_state(|s, now| {
                core::destroy(
                    s.actors.get(&actor_id),
                    s.leases.get(&fence.holder.node),
                    &actor_id,
                    &fence,
                    now,
                )?;
                s.actors.remove(&actor_id);
                Ok(())
            })
        })
    }
}
