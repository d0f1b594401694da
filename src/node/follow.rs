//! Message Follow on this node as the old owner of a moved actor (SB-5.10, SB-5.12, SB-14.3):
//! the node's [`FollowTable`](crate::relocation::FollowTable), the calls the relocation
//! drivers make at seal, commit and abort, and the decision the admission paths ask for a
//! record whose actor is not live here.

use std::time::Instant;

use zlink_wire::{ActorId, ObjectGeneration};

use super::{Node, lock};
use crate::actor::ActorError;
use crate::actor::exec::EndReason;
use crate::actor::fence::CallFence;
use crate::relocation::FollowTable;
use crate::relocation::follow::{self, FenceUse, FollowCounters, FollowRefusal, FollowRoute};
use crate::store::ActorLocation;

fn table(node: &Node) -> crate::sync::MutexGuard<'_, FollowTable> {
    node.inner.follow.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    fn follow_now(&self) -> Instant {
        self.inner.follow_clock.now()
    }

    /// Message Follow's counters (forwarded, refused by reason, entries held).
    #[must_use]
    pub fn follow_counters(&self) -> FollowCounters {
        let now = self.follow_now();
        let mut t = table(self);
        t.expire(now);
        t.counters()
    }

    /// A relocation sealed `actor`'s incarnation `object_generation` here and has not committed:
    /// binds naming it answer `Unavailable` (SB-5.12) until [`Node::install_follow`] /
    /// [`Node::end_moved`] (commit) or [`Node::release_follow`] (abort).
    #[allow(dead_code)] // called by the relocation drivers
    pub(crate) fn seal_follow(&self, actor: ActorId, object_generation: ObjectGeneration) {
        let now = self.follow_now();
        table(self).seal(actor, object_generation, now);
    }

    /// The relocation of that incarnation aborted: its pre-commit seal entry ends.
    #[allow(dead_code)] // called by the relocation drivers
    pub(crate) fn release_follow(&self, actor: &ActorId, object_generation: ObjectGeneration) {
        table(self).release(actor, object_generation);
    }

    /// The relocation of the incarnation whose fences here were `source` committed at `target`
    /// (the target's committed store record): records for it are forwarded there for
    /// [`crate::relocation::FollowConfig::ttl`].
    #[allow(dead_code)] // called by the relocation drivers
    pub(crate) fn install_follow(&self, source: &CallFence, target: ActorLocation) {
        let now = self.follow_now();
        table(self).install(source.clone(), target, now);
    }

    /// At commit, in one step under the actors lock: ends the local incarnation `target`
    /// names (same ActorId and ObjectGeneration) and installs its follow entry, so no record
    /// finds the actor neither live nor followed. Queued work still in its lane answers
    /// `Unavailable` (the hand-off captured it before). `false` when no such incarnation
    /// lives here (nothing installed).
    #[allow(dead_code)] // called by the relocation drivers
    pub(crate) fn end_moved(&self, target: &ActorLocation) -> bool {
        let now = self.follow_now();
        let removed = {
            let mut actors = lock(&self.inner.actors);
            let ours = actors
                .live
                .get(&target.actor_id)
                .is_some_and(|a| a.fence.object_generation == target.object_generation);
            if !ours {
                return false;
            }
            let removed = actors.live.remove(&target.actor_id);
            if let Some(a) = &removed {
                table(self).install(a.fence.clone(), target.clone(), now);
            }
            removed
        };
        if let Some(mut a) = removed {
            a.end(EndReason::Fenced);
            self.leave_spot(&a.spot);
        }
        true
    }

    /// The old owner's decision for `call`, whose actor is not live here (`follow::decide`):
    /// the route to forward on, or the refusal (counted). Called under the actors lock
    /// (`retired` read under it).
    #[allow(dead_code)] // the admission paths call it
    pub(super) fn follow_decide(
        &self,
        retired: Option<ObjectGeneration>,
        call: &CallFence,
        fences: FenceUse,
    ) -> Result<FollowRoute, ActorError> {
        let now = self.follow_now();
        let mut t = table(self);
        follow::decide(
            &mut t,
            self.standing(),
            self.generation(),
            retired,
            call,
            fences,
            now,
        )
        .map_err(|(e, reason)| {
            if let Some(r) = reason {
                t.count_refused(r);
            }
            e
        })
    }

    /// Counts a record refused by Message Follow outside [`Node::follow_decide`].
    #[allow(dead_code)]
    pub(super) fn count_follow_refused(&self, reason: FollowRefusal) {
        table(self).count_refused(reason);
    }

    /// Counts a record forwarded to the new owner.
    #[allow(dead_code)]
    pub(super) fn count_followed(&self) {
        table(self).count_forwarded();
    }
}
