//! The moved-in incarnation on the target: its opening behind its temporary queue (lane,
//! binding slot, timers) and the window in which it takes its source's relayed records
//! (`LocalActor::moved_from`, until the Message Follow time after its commit).

use std::collections::VecDeque;
use std::time::Instant;

use zlink_wire::{NodeRid, RelocationId};

use crate::actor::exec::{self, EndReason, Mailbox};
use crate::actor::fence::CallFence;
use crate::actor::{ActorCtx, ActorError, ActorRef};
use crate::node::local::LocalActor;
use crate::node::{Node, bound, lock};
use crate::relocation::records::{BindingRecord, Placement, TimerRecord};
use crate::session::{BindingSlot, RegisteredBinding};
use crate::store::ActorLocation;

impl Node {
    /// The moved-in incarnations `opened` (from `source`) take their source's relayed records
    /// (`LocalActor::moved_from`) for the Message Follow time after their commit, on the
    /// node's clock — the source relays what it held at the commit right after it, and what
    /// arrives at it later travels as Message Follow — then no more: a WORK record from
    /// `source` for them is refused from then on (counted `refused_unknown_relocation`). An
    /// incarnation that ended or moved on meanwhile is left alone.
    /// `at`: when dispatch opened (the commit here).
    pub(super) async fn end_moved_from(
        &self,
        source: &NodeRid,
        opened: Vec<ActorRef>,
        at: Instant,
    ) {
        if opened.is_empty() {
            return;
        }
        let ttl = crate::node::follow::table(self).config().ttl;
        self.inner.clock.sleep_until(at + ttl).await;
        let mut actors = lock(&self.inner.actors);
        for r in &opened {
            if let Some(a) = actors
                .live
                .get_mut(r.id())
                .filter(|a| a.is_incarnation(r) && a.moved_from.as_ref() == Some(source))
            {
                a.moved_from = None;
            }
        }
    }

    /// Moved-in incarnations here that still take relayed records from the node they came
    /// from (each until the Message Follow time after its commit).
    #[must_use]
    pub fn moved_in_open(&self) -> usize {
        lock(&self.inner.actors)
            .live
            .values()
            .filter(|a| a.moved_from.is_some())
            .count()
    }

    /// The moved-in actor: its lane on its Spot with the rehydrated instance, published with
    /// its temporary queue as the closed barrier, then the barrier opens (queued records first,
    /// in order; what arrives meanwhile behind them) and its timers start.
    ///
    /// `behind_source` (the cutover timeout's fallback committed): it is published with an
    /// empty closed barrier instead — its regular ingress waits there — and its temporary
    /// queue stays in the relocation's entry, marked streaming: the target driver moves it
    /// into the lane as the source relays it ([`TargetRun`](super::target)'s pump) until
    /// [`Node::release_moved_in`]. Returns its mailbox.
    ///
    /// `rt_spot` is the Spot the Restore joined (`install`): the membership this incarnation
    /// takes, or leaves again if it does not open.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn open_moved_in(
        &self,
        relocation: RelocationId,
        source: &NodeRid,
        location: &ActorLocation,
        placement: &Placement,
        instance: Box<dyn crate::actor::ActorInstance>,
        rt_spot: exec::RtSpot,
        behind_source: bool,
    ) -> Result<Mailbox, ActorError> {
        let spot = &placement.spot;
        let actor_ref = ActorRef::from_location(location);
        let ctx = ActorCtx::new(
            actor_ref.clone(),
            std::sync::Arc::new(bound::NodeActorHost(std::sync::Arc::downgrade(&self.inner))),
        );
        let factory: exec::Factory = Box::new(move || Ok(instance));
        let mailbox = match exec::spawn(
            location.actor_id.clone(),
            factory,
            ctx,
            &rt_spot,
            self.inner.exec.clone(),
        )
        .await
        {
            Ok(m) => m,
            Err(_) => {
                self.leave_spot(&spot.name);
                return Err(ActorError::Ended);
            }
        };
        // The CAS won under the lease it presented; if that lease was lost since (its renewal
        // found it ended; a new one may be registered already), the store's record names a
        // dead lease and another node may activate the actor: it never serves here (EG-14).
        let holder = crate::store::LeaseHolder {
            node: location.owner_node.clone(),
            node_generation: location.node_generation,
            lease_generation: location.owner_lease_generation,
        };
        let refused = {
            // Lock order: relocations, then actors (as the WORK arm), then the lease. The lease
            // is checked under the actors lock, which the lease driver's `end_every_incarnation`
            // takes after marking the lease lost: an actor published here before that ends with
            // the others, and none is published after it.
            let mut t = self.inner.relocations.table();
            let entry = t.targets.get_mut(&relocation);
            let mut actors = lock(&self.inner.actors);
            if lock(&self.inner.lease).holds(&holder) {
                let queue = match entry {
                    Some(e) if behind_source => {
                        e.streaming.push(location.actor_id.clone());
                        VecDeque::new()
                    }
                    Some(e) => e.queues.remove(&location.actor_id).unwrap_or_default(),
                    None => VecDeque::new(),
                };
                actors.retired.remove(&location.actor_id);
                actors.live.insert(
                    location.actor_id.clone(),
                    LocalActor {
                        fence: CallFence::of_ref(&actor_ref),
                        actor_ref: actor_ref.clone(),
                        mailbox: mailbox.clone(),
                        spot: spot.name.clone(),
                        timers: Vec::new(),
                        held: Some(queue),
                        binding: moved_binding(placement.binding.as_ref()),
                        moved_from: Some(source.clone()),
                    },
                );
                None
            } else {
                Some(entry.and_then(|e| e.queues.remove(&location.actor_id)))
            }
        };
        if let Some(queue) = refused {
            tracing::warn!(
                "the owner lease the CAS won under is lost: the moved actor does not open"
            );
            // Each request in its queue is answered (`Unavailable`), never run.
            drop(queue);
            mailbox.end(EndReason::Fenced);
            self.leave_spot(&spot.name);
            return Err(ActorError::LeaseLapsed);
        }
        if !behind_source {
            self.open_barrier(&actor_ref, &mailbox).await?;
            self.start_carried_timers(&actor_ref, &placement.timers);
        }
        Ok(mailbox)
    }

    /// The source's relay stream of the moved-in `actor_ref` (opened `behind_source`) ends:
    /// what its temporary queue still holds goes into the lane, then the regular ingress that
    /// waited behind the barrier (and relayed records that arrived after this, in arrival
    /// order), then its timers start. Relayed records arriving later are appended behind
    /// (`moved_from`).
    pub(super) async fn release_moved_in(
        &self,
        relocation: RelocationId,
        actor_ref: &ActorRef,
        mailbox: &Mailbox,
        timers: &[TimerRecord],
    ) -> Result<(), ActorError> {
        let rest = {
            let mut t = self.inner.relocations.table();
            t.targets
                .get_mut(&relocation)
                .and_then(|e| {
                    e.streaming.retain(|a| a != actor_ref.id());
                    e.queues.remove(actor_ref.id())
                })
                .unwrap_or_default()
        };
        for work in rest {
            if mailbox.submit(work).await.is_err() {
                self.count_send_dropped();
            }
        }
        self.open_barrier(actor_ref, mailbox).await?;
        self.start_carried_timers(actor_ref, timers);
        Ok(())
    }
}

/// The moved actor's binding slot on the target: the binding its session owner registered at
/// the source, so later 24s of that session pass this node's binding check and pushes / 51s
/// come from here (SB-8.9: the target is the actor owner of every existing binding).
fn moved_binding(b: Option<&BindingRecord>) -> BindingSlot {
    let mut slot = BindingSlot::default();
    if let Some(b) = b {
        let _ = slot.bind(RegisteredBinding {
            session_owner: b.session_owner.clone(),
            lifecycle: b.lifecycle,
            owner_id: b.owner_id,
            owner_lease: b.owner_lease,
            session: b.session,
            generation: b.generation,
        });
    }
    slot
}
