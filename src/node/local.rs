//! The node's table of local incarnations: [`LocalActor`] (fence, mailbox, timers, activation
//! barrier, bound-session slot), [`Actors`] (live and retired, under the actors lock) and
//! [`SpotState`] (one runtime Spot per `SpotSpec` name with its member count).

use std::collections::VecDeque;

use tokio::task::JoinHandle;
use zlink_wire::{ActorId, ObjectGeneration};

use crate::actor::exec::{EndReason, Mailbox, RtSpot, Work};
use crate::actor::fence::CallFence;
use crate::actor::{ActorRef, SpotKind};
use crate::hashing::SeededMap;
use crate::session::BindingSlot;

pub(super) struct LocalActor {
    pub(super) actor_ref: ActorRef,
    pub(super) fence: CallFence,
    pub(super) mailbox: Mailbox,
    pub(super) spot: String,
    pub(super) timers: Vec<LocalTimer>,
    /// `Some` while the activation barrier is closed (EG-14 (4)): records admitted by the fence
    /// wait here in arrival order and enter the lane after the first record.
    pub(super) held: Option<VecDeque<Work>>,
    /// The incarnation's bound session (SB-5.6): written and read under the actors lock, the
    /// same lock as submission. Dropped with the incarnation (destroy, lease loss: SB-4.1).
    pub(super) binding: BindingSlot,
    /// The node this incarnation moved in from (live relocation): records that node relays
    /// for it after the commit are taken (`relocate/target.rs`), for the Message Follow time after
    /// the commit (`Node::end_moved_from` clears it). `None` for an activation here, and
    /// after that time.
    pub(super) moved_from: Option<zlink_wire::NodeRid>,
}

impl LocalActor {
    /// Whether this is the incarnation `r` names, under the owner fence `r` carries
    /// (ObjectGeneration, AuthorityOwnerGeneration, owner lease, process). A failover keeps the
    /// ObjectGeneration, so a driver that matched on it alone could act on a newer incarnation
    /// of the same actor that took over under a new lease (a stale relocation ending it).
    pub(super) fn is_incarnation(&self, r: &ActorRef) -> bool {
        let l = r.location();
        self.fence.object_generation == r.object_generation()
            && self.fence.authority_owner_generation == l.authority_owner_generation
            && self.fence.owner_lease_generation == l.owner_lease_generation
            && self.fence.node_generation == l.node_generation
    }

    /// Ends the incarnation: its timers stop and its lane ends for `reason` (work that finds
    /// it ended answers `NotFound` after a destroy, `Unavailable` otherwise).
    pub(super) fn end(&mut self, reason: EndReason) {
        for t in self.timers.drain(..) {
            t.handle.abort();
        }
        self.mailbox.end(reason);
    }
}

/// A timer of an incarnation (`Node::start_timer`): its task and what it sends, so a
/// relocation starts it again on the target.
pub(super) struct LocalTimer {
    pub(super) handle: JoinHandle<()>,
    pub(super) spec: crate::relocation::records::TimerRecord,
}

#[derive(Default)]
pub(super) struct Actors {
    pub(super) live: SeededMap<ActorId, LocalActor>,
    /// Last incarnation destroyed here per actor (answers `NotFound` instead of `Unavailable`),
    /// bounded ([`Retired`]).
    pub(super) retired: Retired,
}

/// The destroyed incarnations a node remembers for SB-12 `NotFound` answers: the last
/// [`Retired::CAP`] destroyed actors, oldest forgotten first. A call naming an incarnation
/// forgotten here is answered as for an actor this node never held. Bounded by count, so a
/// client that creates and destroys actors all day cannot grow the node's memory.
#[derive(Default)]
pub(crate) struct Retired {
    by_actor: SeededMap<ActorId, (ObjectGeneration, u64)>,
    /// Insertion order (actor, sequence); entries whose sequence no longer matches are stale.
    order: VecDeque<(ActorId, u64)>,
    next: u64,
}

impl Retired {
    /// Destroyed incarnations remembered.
    pub(crate) const CAP: usize = 65_536;

    pub(crate) fn get(&self, actor: &ActorId) -> Option<&ObjectGeneration> {
        self.by_actor.get(actor).map(|(g, _)| g)
    }

    pub(crate) fn insert(&mut self, actor: ActorId, generation: ObjectGeneration) {
        self.next += 1;
        self.by_actor.insert(actor.clone(), (generation, self.next));
        self.order.push_back((actor, self.next));
        while self.by_actor.len() > Self::CAP || self.order.len() > 2 * Self::CAP {
            let Some((old, seq)) = self.order.pop_front() else {
                break;
            };
            if self.by_actor.get(&old).is_some_and(|(_, s)| *s == seq) {
                self.by_actor.remove(&old);
            }
        }
    }

    pub(crate) fn remove(&mut self, actor: &ActorId) {
        self.by_actor.remove(actor);
    }

    /// Incarnations remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_actor.len()
    }
}

pub(super) struct SpotState {
    pub(super) kind: SpotKind,
    pub(super) spot: RtSpot,
    pub(super) members: usize,
    /// A whole-Spot relocation of it is in progress (`relocate_spot.rs`): no actor joins it
    /// meanwhile.
    pub(super) relocating: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 12: the record of destroyed incarnations is bounded by count, oldest first.
    #[test]
    fn retired_incarnations_are_bounded() {
        let mut r = Retired::default();
        let id = |i: usize| ActorId::new(format!("a{i}")).unwrap();
        for i in 0..Retired::CAP + 10 {
            r.insert(id(i), ObjectGeneration::new(1));
        }
        assert_eq!(r.len(), Retired::CAP);
        assert!(r.get(&id(0)).is_none());
        assert_eq!(
            r.get(&id(Retired::CAP + 9)),
            Some(&ObjectGeneration::new(1))
        );
        // re-destroyed and re-activated actors do not grow the order past its bound
        for _ in 0..3 * Retired::CAP {
            r.insert(id(1), ObjectGeneration::new(2));
            r.remove(&id(1));
        }
        assert!(r.order.len() <= 2 * Retired::CAP);
    }
}
