//! The aggregate's held pushes and disconnect notices: pushes held while their binding is sealed or its bind
//! is in flight, and the `NotifyDisconnected` bookkeeping (SB-7.5).

use super::*;

impl SessionBindingAggregate {
    /// A push of a sealed binding that does not pass the push check (SB-5.5) — from the
    /// relocation's target, whose 44 has not been applied yet (it travels on the completion
    /// connection or from another node) — held until the seal's 44: checked again then, after
    /// a commit against the target's values ([`SessionBindingAggregate::take_held`]).
    ///
    /// # Errors
    /// The push back with the reason: [`FlowReject::NotBound`] (no installed seal of exactly
    /// its binding identity), [`FlowReject::ClientBacklogFull`] (at [`HELD_PUSH_LIMIT`]).
    pub fn hold_sealed_push(&mut self, held: HeldPush) -> Result<(), (FlowReject, HeldPush)> {
        let ours = self.seals.get(&held.push.actor).is_some_and(|s| {
            matches!(s.phase, SealPhase::Installed { .. })
                && s.identity.binding_generation == held.push.binding_generation
        }) && self.bindings.get(&held.push.actor).is_some_and(|b| {
            b.generation == held.push.binding_generation
                && b.object_generation == held.push.object_generation
        });
        if !ours {
            return Err((FlowReject::NotBound, held));
        }
        if self.held.len() >= HELD_PUSH_LIMIT {
            return Err((FlowReject::ClientBacklogFull, held));
        }
        self.held.push(held);
        Ok(())
    }

    /// A push for a binding this session does not hold (yet): held if a bind of exactly its
    /// identity (actor, ObjectGeneration, binding generation) is in flight, until that bind's
    /// terminal ([`SessionBindingAggregate::take_held`]); handed back otherwise.
    ///
    /// # Errors
    /// The push back with the reason: [`FlowReject::NotBound`] (no such bind in flight),
    /// [`FlowReject::SessionClosed`], [`FlowReject::ClientBacklogFull`] (at
    /// [`HELD_PUSH_LIMIT`]).
    pub fn hold_push(&mut self, held: HeldPush) -> Result<(), (FlowReject, HeldPush)> {
        if let Phase::Closed(_) = self.phase {
            return Err((FlowReject::SessionClosed, held));
        }
        let ours = self.pending.get(&held.push.actor).is_some_and(|p| {
            p.generation == held.push.binding_generation
                && p.target.object_generation == held.push.object_generation
        });
        if !ours {
            return Err((FlowReject::NotBound, held));
        }
        if self.held.len() >= HELD_PUSH_LIMIT {
            return Err((FlowReject::ClientBacklogFull, held));
        }
        self.held.push(held);
        Ok(())
    }

    /// The pushes held for the bind of `actor` (in arrival order), taken after its terminal
    /// was applied ([`SessionBindingAggregate::complete_bind`]): on success each is checked as
    /// any push now ([`SessionBindingAggregate::check_push`]), else refused.
    pub fn take_held(&mut self, actor: &ActorId) -> Vec<HeldPush> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let (mine, rest) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.push.actor == *actor);
        self.held = rest;
        mine
    }

    /// Public `NotifyDisconnected` of the binding `generation` of `actor` begins (SB-7.5): it
    /// is no longer current for the application (relays refused, not listed, a second notify
    /// or unbind refused: at most once, SB-7.3), but pushes of exactly that identity still
    /// reach the client while the actor's Spot callback runs. The caller sends the 38
    /// Disconnect, then reports [`SessionBindingAggregate::finish_notify`].
    ///
    /// # Errors
    /// As [`SessionBindingAggregate::remove`].
    pub fn begin_notify(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
    ) -> Result<Binding, FlowReject> {
        let b = self.take_current(actor, generation)?;
        self.notifying.push(b.clone());
        Ok(Arc::unwrap_or_clone(b))
    }

    /// The Spot callback of a `NotifyDisconnected` reached its terminal (or the 38 failed):
    /// the binding is tombstoned here too (retired).
    pub fn finish_notify(&mut self, actor: &ActorId, generation: BindingGeneration) {
        if let Some(i) = self
            .notifying
            .iter()
            .position(|b| b.actor == *actor && b.generation == generation)
        {
            let b = self.notifying.swap_remove(i);
            self.retire(b.generation);
            if self.notified.len() == RETIRED_MEMORY {
                self.notified.pop_front();
            }
            self.notified.push_back(b);
        }
    }
}
