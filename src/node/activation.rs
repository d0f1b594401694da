//! Activation and destruction (EG-14, SB-4.1): create / get_or_create on this node or a peer,
//! the reservation in the Location Store, the factory run on the new actor's lane, the
//! activation barrier, Spot membership, `get` and `destroy`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tokio::sync::oneshot;
use zlink_wire::{ActorId, DispatchKey, ErrorKind, NodeRid};

use super::local::{LocalActor, SpotState};
use super::protocol::{self, Activate, ActivateMode, DestroyActor, FirstRecord};
use super::{Create, Node, bound, lock, request_error};
use crate::actor::exec::{self, EndReason, Mailbox, RtSpot, Work};
use crate::actor::fence::{self, CallFence};
use crate::actor::{
    ActivationInfo, ActorCtx, ActorError, ActorRef, ActorType, MigratedState, SpotKind, SpotSpec,
};
use crate::session::BindingSlot;
use crate::store::{
    ActivationRequest, ActivationState, ActorLocation, ActorOwner, LeaseHolder, OwnerFence,
    Reservation, StoreError,
};

/// A local caller waiting for the local activator of the same actor id.
pub(super) type ActivationWaiter = oneshot::Sender<Result<ActorRef, (ErrorKind, String)>>;

/// How a new incarnation's store record is claimed.
enum Claim<'a> {
    /// `reserve_activation`: an ordinary activation (EG-14).
    Reserve,
    /// `reincarnate` with this owner fence, then set to the replacement's (SB-8.6's recovery:
    /// the owner replaces its own incarnation, the record never disappears).
    Replace(&'a mut OwnerFence),
}

/// What a new incarnation's instance is built from.
enum Seed {
    /// The type's factory, with the create request's init payload.
    Init(Bytes),
    /// The type's rehydrate hook, with the state an incarnation dehydrated for a relocation that
    /// failed past relay-ready ([`Node::reactivate`]).
    State(MigratedState),
}

impl Node {
    /// Creates a new incarnation of `c.actor_id` on `c.node` (default: this node).
    ///
    /// # Errors
    /// `NotFound` ([`ActorError::UnknownActorType`]) when the owner has no factory for the
    /// type; `InvalidOperation` ([`ActorError::AlreadyExists`]) when an incarnation exists;
    /// `Unavailable` when the owner node is not connected; `Internal` when the factory fails.
    pub async fn create(&self, c: Create) -> Result<ActorRef, ActorError> {
        self.activate(c, ActivateMode::Create).await
    }

    /// Returns the Ready incarnation of `c.actor_id`, creating it on `c.node` if there is none.
    /// An existing incarnation is returned wherever it lives.
    ///
    /// # Errors
    /// As [`Node::create`], except that an existing incarnation is not an error.
    pub async fn get_or_create(&self, c: Create) -> Result<ActorRef, ActorError> {
        self.activate(c, ActivateMode::GetOrCreate).await
    }

    async fn activate(&self, c: Create, mode: ActivateMode) -> Result<ActorRef, ActorError> {
        self.check_accepting()?;
        let req = Activate {
            mode,
            actor_type: c.actor_type,
            actor_id: c.actor_id.to_string(),
            spot: c.spot,
            init: c.init.to_vec(),
            first: c.first.map(|(key, payload)| FirstRecord {
                key: key.get(),
                payload: payload.to_vec(),
            }),
        };
        match c.node {
            Some(n) if !self.is_local(&n) => self.activate_remote(&n, &req).await,
            _ => self.activate_local(req).await,
        }
    }

    async fn activate_remote(
        &self,
        node: &NodeRid,
        req: &Activate,
    ) -> Result<ActorRef, ActorError> {
        let payload = protocol::encode(req)?;
        let resp = self
            .inner
            .mesh
            .request(
                node,
                protocol::PEER_ACTIVATE,
                payload,
                self.inner.request_timeout,
            )
            .await
            .map_err(|e| request_error(node, e))?;
        protocol::decode(resp.payload.as_deref().unwrap_or_default())
    }

    /// Activation on this node as the candidate owner (EG-14).
    pub(crate) async fn activate_local(&self, mut req: Activate) -> Result<ActorRef, ActorError> {
        let mut first = req.first.take();
        let seed = Seed::Init(Bytes::from(req.init.clone()));
        let result = self
            .activate_here(req, seed, &mut first, Claim::Reserve)
            .await;
        // The first record did not trigger an activation here: it is an ordinary send to the
        // Ready incarnation (never for a refused `create`).
        if let (Ok(r), Some(f)) = (&result, first) {
            if let Err(e) = self
                .send_raw(r, DispatchKey::new(f.key), Bytes::from(f.payload))
                .await
            {
                self.count_send_dropped();
                tracing::warn!(actor = %r, error = %e, "first record not delivered");
            }
        }
        result
    }

    /// One attempt at a new incarnation of an actor whose relocation failed past relay-ready
    /// (SB-8.6), on this node (its source), built from the state it dehydrated for the move:
    /// the source route of the old incarnation is never reopened — its record is replaced in
    /// one store write (`LocationStore::reincarnate` with `owner`, this node's owner fence) and
    /// its ObjectGeneration is retired here — but the actor comes back with its state under a
    /// new ObjectGeneration (SB-4.1), committed `Ready` like any activation. The record never
    /// disappears, so no other node activates a blank actor meanwhile. Work captured for the
    /// target after the dehydration was never run here; the sessions bound to the old
    /// incarnation are closed by their seal timeout (SB-8.3) and bind the new one like any other.
    ///
    /// `owner` becomes the replacement's fence once the store wrote it, so an attempt whose
    /// `Ready` commit did not reach the store is repeated on that record.
    ///
    /// # Errors
    /// [`ActorError::Store`] with the store's verdict (unavailable, or the record moved on);
    /// as [`Node::create`] otherwise ([`ActorError::AlreadyExists`] when an incarnation is
    /// live here already).
    pub(super) async fn reactivate(
        &self,
        actor_type: &str,
        actor_id: &ActorId,
        spot: SpotSpec,
        state: MigratedState,
        owner: &mut OwnerFence,
    ) -> Result<ActorRef, ActorError> {
        let req = Activate {
            mode: ActivateMode::Create,
            actor_type: actor_type.to_owned(),
            actor_id: actor_id.to_string(),
            spot: Some(spot),
            init: Vec::new(),
            first: None,
        };
        self.activate_here(req, Seed::State(state), &mut None, Claim::Replace(owner))
            .await
    }

    async fn activate_here(
        &self,
        req: Activate,
        seed: Seed,
        first: &mut Option<FirstRecord>,
        claim: Claim<'_>,
    ) -> Result<ActorRef, ActorError> {
        self.check_accepting()?;
        // No activation starts here past the local lease deadline (SB-5.11).
        self.standing().admit()?;
        let actor_id =
            ActorId::new(&req.actor_id).map_err(|e| ActorError::Codec(format!("actor id: {e}")))?;
        let ty = self
            .inner
            .registry
            .get(&req.actor_type)
            .cloned()
            .ok_or_else(|| ActorError::UnknownActorType {
                actor_type: req.actor_type.clone(),
            })?;
        if let Some(spot) = &req.spot {
            self.check_spot(spot)?;
        }
        if let Some(r) = self.local_ref(&actor_id) {
            return existing(req.mode, r);
        }
        // One local activator per actor id; concurrent local callers wait for its result.
        let waiter = {
            let mut acts = lock(&self.inner.activations);
            match acts.get_mut(&actor_id) {
                Some(waiters) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    acts.insert(actor_id.clone(), Vec::new());
                    None
                }
            }
        };
        if let Some(rx) = waiter {
            return match rx.await {
                Ok(Ok(r)) => existing(req.mode, r),
                Ok(Err((kind, detail))) => Err(ActorError::Remote { kind, detail }),
                Err(_) => Err(ActorError::ShuttingDown),
            };
        }
        // The slot answers the waiters even if this future is dropped half-way.
        let slot = ActivatorSlot {
            node: self,
            actor_id: actor_id.clone(),
            done: false,
        };
        let result = self
            .reserve_and_activate(&ty, &actor_id, &req, seed, first, claim)
            .await;
        slot.finish(match &result {
            Ok(r) => Ok(r.clone()),
            Err(e) => Err((e.kind(), e.to_string())),
        });
        result
    }

    async fn reserve_and_activate(
        &self,
        ty: &ActorType,
        actor_id: &ActorId,
        req: &Activate,
        seed: Seed,
        first: &mut Option<FirstRecord>,
        claim: Claim<'_>,
    ) -> Result<ActorRef, ActorError> {
        let store = &self.inner.store;
        if let Claim::Replace(owner) = claim {
            let old = owner.object_generation;
            let loc = store.reincarnate(actor_id.clone(), owner.clone()).await?;
            *owner = loc.owner_fence();
            lock(&self.inner.actors)
                .retired
                .insert(actor_id.clone(), old);
            return self.run_factory(ty, loc, req, seed, first.take()).await;
        }
        let mut orphan_cleared = false;
        let mut seed = Some(seed);
        loop {
            let holder = lock(&self.inner.lease).lease().holder.clone();
            let reservation = store
                .reserve_activation(ActivationRequest {
                    actor_id: actor_id.clone(),
                    actor_type: ty.name().to_owned(),
                    owner: ActorOwner {
                        mesh: self.inner.mesh_name.clone(),
                        holder: holder.clone(),
                    },
                })
                .await?;
            let loc = match reservation {
                Reservation::Won(loc) => {
                    let seed = seed.take().unwrap_or(Seed::Init(Bytes::new()));
                    return self.run_factory(ty, loc, req, seed, first.take()).await;
                }
                Reservation::Held(loc) => loc,
            };
            let mine = loc.owner_node == *self.node_rid()
                && loc.node_generation == self.generation()
                && loc.owner_lease_generation == holder.lease_generation;
            if mine {
                // Held by this process but not live here and no local activator: an orphan of
                // a failed activation. Clear it once and reserve again.
                if let Some(r) = self.local_ref(actor_id) {
                    return existing(req.mode, r);
                }
                if orphan_cleared {
                    return Err(ActorError::NotReady {
                        actor_id: actor_id.clone(),
                    });
                }
                orphan_cleared = true;
                match store.destroy(actor_id.clone(), loc.owner_fence()).await {
                    Ok(()) | Err(StoreError::NotFound { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            return match (loc.state, req.mode) {
                (ActivationState::Ready, ActivateMode::GetOrCreate) => {
                    Ok(ActorRef::from_location(&loc))
                }
                (_, ActivateMode::Create) => Err(ActorError::AlreadyExists {
                    actor_id: actor_id.clone(),
                    object_generation: loc.object_generation,
                }),
                (ActivationState::Activating, ActivateMode::GetOrCreate) => {
                    // The owner runs the factory; it answers when Ready.
                    let node = loc.owner_node.clone();
                    self.activate_remote(&node, req).await
                }
            };
        }
    }

    /// The reservation winner's part of EG-14: the factory runs as the first lifecycle record
    /// on the new actor's own lane (an application turn, EG-13, EG-1.1) while this
    /// infrastructure task awaits it; then `Ready` is committed and the mailbox published. A
    /// failure before `Ready` burns the reservation (the ObjectGeneration is never reused).
    async fn run_factory(
        &self,
        ty: &ActorType,
        loc: ActorLocation,
        req: &Activate,
        seed: Seed,
        first: Option<FirstRecord>,
    ) -> Result<ActorRef, ActorError> {
        let info = ActivationInfo {
            actor_id: loc.actor_id.clone(),
            object_generation: loc.object_generation,
        };
        let spot = req.spot.clone().unwrap_or_else(SpotSpec::entry);
        if ty.yields() && !spot.kind.shares_gate() {
            self.burn_reservation(&loc).await;
            return Err(ActorError::YieldNotOffered {
                actor_type: ty.name().to_owned(),
                spot: spot.name,
            });
        }
        let rt_spot = match self.join_spot(&spot) {
            Ok(s) => s,
            Err(e) => {
                self.burn_reservation(&loc).await;
                return Err(e);
            }
        };
        let ctx = ActorCtx::new(
            ActorRef::from_location(&loc),
            Arc::new(bound::NodeActorHost(Arc::downgrade(&self.inner))),
        );
        let factory: exec::Factory = {
            let ty = ty.clone();
            match seed {
                Seed::Init(init) => Box::new(move || ty.instantiate(&info, init)),
                Seed::State(state) => Box::new(move || {
                    ty.rehydrate(&info, state)
                        .map_err(|e| crate::runtime::HandlerError::Failed(e.to_string()))
                }),
            }
        };
        let spawned = exec::spawn(
            loc.actor_id.clone(),
            factory,
            ctx,
            &rt_spot,
            self.inner.exec.clone(),
        )
        .await;
        let mailbox = match spawned {
            Ok(m) => m,
            Err(failed) => {
                self.leave_spot(&spot.name);
                self.burn_reservation(&loc).await;
                return Err(match failed {
                    exec::FactoryFailed::Factory(e) => ActorError::Handler(format!("factory: {e}")),
                    exec::FactoryFailed::Lane(e) => e,
                });
            }
        };
        // Cold activation (EG-14): (1) the first record was captured before the reservation;
        // the local entry is published with a closed barrier, so a call that arrives once Ready
        // is visible waits instead of missing the incarnation.
        let expected = ActorRef::from_location(&loc);
        {
            let mut actors = lock(&self.inner.actors);
            actors.retired.remove(&loc.actor_id);
            actors.live.insert(
                loc.actor_id.clone(),
                LocalActor {
                    fence: CallFence::of_ref(&expected),
                    actor_ref: expected.clone(),
                    mailbox: mailbox.clone(),
                    spot: spot.name.clone(),
                    timers: Vec::new(),
                    held: Some(VecDeque::new()),
                    binding: BindingSlot::default(),
                    moved_from: None,
                },
            );
        }
        // (2) commit Ready — only while this node may still act as owner.
        if let Err(e) = self.standing().admit() {
            self.abort_activation(&expected);
            self.burn_reservation(&loc).await;
            return Err(e);
        }
        let ready = match self
            .inner
            .store
            .mark_ready(loc.actor_id.clone(), loc.fence())
            .await
        {
            Ok(r) => r,
            Err(e) => {
                self.abort_activation(&expected);
                return Err(e.into());
            }
        };
        let actor_ref = ActorRef::from_location(&ready);
        // (3) the first record goes to the head of the new lane (nothing else can enter while
        // the barrier is closed), admitted before the owner lease could have expired.
        if let Some(f) = first {
            let work = Work {
                key: DispatchKey::new(f.key),
                payload: Bytes::from(f.payload),
                reply: None,
                deadline: None,
                guard: Some(self.inner.inflight.enter()),
            };
            // The admission deadline is the local lease deadline itself (SB-5.11): the real
            // time left on the lease, on the lease clock.
            let gate = &self.inner.gate;
            let admitted = tokio::select! {
                biased;
                r = mailbox.submit(work) => r.is_ok(),
                () = gate.clock().sleep_until(gate.deadline()) => false,
            };
            if !admitted {
                self.count_send_dropped();
                tracing::warn!(actor = %actor_ref, "first record not admitted before the lease deadline");
            }
        }
        // (4) open the barrier: the held records enter in arrival order, then the gate is open.
        self.open_barrier(&expected, &mailbox).await?;
        self.inner.activations_done.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(actor = %actor_ref, "actor ready");
        Ok(actor_ref)
    }

    /// Moves the records held during activation into the lane in arrival order, then opens the
    /// barrier. Records arriving meanwhile queue behind the held ones.
    pub(super) async fn open_barrier(
        &self,
        expected: &ActorRef,
        mailbox: &Mailbox,
    ) -> Result<(), ActorError> {
        loop {
            let batch = {
                let mut actors = lock(&self.inner.actors);
                let Some(local) = actors
                    .live
                    .get_mut(expected.id())
                    .filter(|a| a.is_incarnation(expected))
                else {
                    // Ended during activation (destroy, lease lost, shutdown).
                    return Err(ActorError::Ended);
                };
                match local.held.as_mut() {
                    Some(held) if !held.is_empty() => std::mem::take(held),
                    _ => {
                        local.held = None;
                        return Ok(());
                    }
                }
            };
            for work in batch {
                // A refused submission dropped the work, which answered its request.
                if mailbox.submit(work).await.is_err() {
                    self.count_send_dropped();
                }
            }
        }
    }

    /// Undoes a published activation that failed before Ready, unless something else (destroy,
    /// lease lost, shutdown) ended it already.
    fn abort_activation(&self, expected: &ActorRef) {
        let removed = {
            let mut actors = lock(&self.inner.actors);
            let ours = actors
                .live
                .get(expected.id())
                .is_some_and(|a| a.is_incarnation(expected));
            if ours {
                actors.live.remove(expected.id())
            } else {
                None
            }
        };
        if let Some(mut a) = removed {
            a.end(EndReason::Fenced);
            self.leave_spot(&a.spot);
        }
    }

    /// Destroys a reservation that never reached `Ready` (its ObjectGeneration is burnt).
    async fn burn_reservation(&self, loc: &ActorLocation) {
        if let Err(e) = self
            .inner
            .store
            .destroy(loc.actor_id.clone(), loc.owner_fence())
            .await
        {
            tracing::debug!(actor = %loc.actor_id, error = %e, "reservation not destroyed");
        }
    }

    pub(super) fn check_spot(&self, spot: &SpotSpec) -> Result<(), ActorError> {
        match lock(&self.inner.spots).get(&spot.name) {
            Some(s) if s.kind != spot.kind => Err(ActorError::Codec(format!(
                "spot {:?} is {:?}, not {:?}",
                spot.name, s.kind, spot.kind
            ))),
            _ => Ok(()),
        }
    }

    pub(super) fn join_spot(&self, spot: &SpotSpec) -> Result<RtSpot, ActorError> {
        self.check_spot(spot)?;
        let mut spots = lock(&self.inner.spots);
        if !spots.contains_key(&spot.name) {
            let rt_spot = RtSpot::create(&self.inner.runtime, spot.kind)?;
            spots.insert(
                spot.name.clone(),
                SpotState {
                    kind: spot.kind,
                    spot: rt_spot,
                    members: 0,
                    relocating: false,
                },
            );
        }
        let s = spots.get_mut(&spot.name).ok_or(ActorError::ShuttingDown)?;
        if s.relocating {
            return Err(ActorError::Refused {
                kind: zlink_wire::ErrorKind::Unavailable,
                detail: format!("spot {:?} is relocating", spot.name),
            });
        }
        s.members += 1;
        Ok(s.spot.clone())
    }

    pub(super) fn leave_spot(&self, name: &str) {
        let mut spots = lock(&self.inner.spots);
        if let Some(s) = spots.get_mut(name) {
            s.members = s.members.saturating_sub(1);
            if s.members == 0 && s.kind != SpotKind::Entry {
                if let Some(s) = spots.remove(name) {
                    s.spot.end();
                }
            }
        }
    }

    fn local_ref(&self, actor_id: &ActorId) -> Option<ActorRef> {
        lock(&self.inner.actors)
            .live
            .get(actor_id)
            .filter(|a| a.held.is_none())
            .map(|a| a.actor_ref.clone())
    }

    /// The Ready ref of `actor_id` from the Location Store (one lookup).
    ///
    /// # Errors
    /// `NotFound` when there is no incarnation; `Unavailable` while it is activating.
    pub async fn get(&self, actor_id: &ActorId) -> Result<ActorRef, ActorError> {
        match self.inner.store.lookup(actor_id.clone()).await? {
            Some(loc) if loc.state == ActivationState::Ready => Ok(ActorRef::from_location(&loc)),
            Some(_) => Err(ActorError::NotReady {
                actor_id: actor_id.clone(),
            }),
            None => Err(ActorError::ActorNotFound {
                actor_id: actor_id.clone(),
            }),
        }
    }

    /// Destroys the incarnation `actor` (on its owner): it ends, queued work fails with
    /// `NotFound`, and a later create gets a new ObjectGeneration (SB-4.1).
    ///
    /// # Errors
    /// `InvalidOperation` when `actor` is not the current incarnation; `Unavailable` for a
    /// stale fence or an unreachable owner.
    pub async fn destroy(&self, actor: &ActorRef) -> Result<(), ActorError> {
        self.check_accepting()?;
        if self.is_local(actor.node()) {
            return self.destroy_local(actor).await;
        }
        let payload = protocol::encode(&DestroyActor {
            actor: actor.clone(),
        })?;
        self.inner
            .mesh
            .request(
                actor.node(),
                protocol::PEER_DESTROY,
                payload,
                self.inner.request_timeout,
            )
            .await
            .map_err(|e| request_error(actor.node(), e))?;
        Ok(())
    }

    pub(crate) async fn destroy_local(&self, actor: &ActorRef) -> Result<(), ActorError> {
        {
            let actors = lock(&self.inner.actors);
            let cur = actors.live.get(actor.id()).map(|a| &a.fence);
            let retired = actors.retired.get(actor.id()).copied();
            fence::check_call(
                self.standing(),
                self.generation(),
                cur,
                retired,
                &CallFence::of_ref(actor),
            )?;
        }
        self.inner
            .store
            .destroy(actor.id().clone(), owner_fence(actor))
            .await?;
        let removed = {
            let mut actors = lock(&self.inner.actors);
            let removed = actors.live.remove(actor.id());
            actors
                .retired
                .insert(actor.id().clone(), actor.object_generation());
            removed
        };
        if let Some(mut a) = removed {
            a.end(EndReason::Destroyed);
            self.leave_spot(&a.spot);
        }
        tracing::debug!(actor = %actor, "actor destroyed");
        Ok(())
    }
}

/// The local activator's claim on one actor id: answers every waiting local caller exactly once,
/// also when the activation future is dropped before it finished.
struct ActivatorSlot<'a> {
    node: &'a Node,
    actor_id: ActorId,
    done: bool,
}

impl ActivatorSlot<'_> {
    fn answer(&mut self, result: Result<ActorRef, (ErrorKind, String)>) {
        self.done = true;
        let waiters = lock(&self.node.inner.activations)
            .remove(&self.actor_id)
            .unwrap_or_default();
        for w in waiters {
            let _ = w.send(result.clone());
        }
    }

    fn finish(mut self, result: Result<ActorRef, (ErrorKind, String)>) {
        self.answer(result);
    }
}

impl Drop for ActivatorSlot<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.answer(Err((
                ErrorKind::Unavailable,
                "the activation was abandoned".to_owned(),
            )));
        }
    }
}

/// The owner authority of the incarnation `actor` names (its owner's destroy presents it).
fn owner_fence(actor: &ActorRef) -> OwnerFence {
    let loc = actor.location();
    OwnerFence {
        object_generation: actor.object_generation(),
        authority_owner_generation: loc.authority_owner_generation,
        holder: LeaseHolder {
            node: actor.node().clone(),
            node_generation: loc.node_generation,
            lease_generation: loc.owner_lease_generation,
        },
    }
}

fn existing(mode: ActivateMode, r: ActorRef) -> Result<ActorRef, ActorError> {
    match mode {
        ActivateMode::GetOrCreate => Ok(r),
        ActivateMode::Create => Err(ActorError::AlreadyExists {
            actor_id: r.id().clone(),
            object_generation: r.object_generation(),
        }),
    }
}
