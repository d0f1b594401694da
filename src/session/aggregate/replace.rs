//! The aggregate's replacements and ends: a 51 (SB-6.2, SB-6.3, SB-6.6), the replaced-callback's
//! timer, `remove` and `disconnect`.

use super::*;

impl SessionBindingAggregate {
    /// A 51 boundSessionReplaced (SB-6.2, SB-6.3, SB-6.6) from `sender` (authenticated by the
    /// mesh). Applies at most once: only if the sender is the record's authority target and
    /// every previous-owner value matches this session and its current binding of the actor.
    ///
    /// # Errors
    /// [`FlowReject::DuplicateReplacement`] for a retired identity,
    /// [`FlowReject::ReplacedIdentityMismatch`] for anything else that does not match; the
    /// session and its bindings are unchanged.
    pub fn handle_replaced(
        &mut self,
        now: Instant,
        sender: (&NodeRid, NodeGeneration),
        rec: &BoundSessionReplaced,
    ) -> Result<ReplacedOutcome, FlowReject> {
        let p = &rec.previous;
        if *sender.0 != rec.authority_target.node
            || sender.1 != rec.authority_target.node_generation
            || p.node != self.id.owner
            || p.lifecycle != self.id.lifecycle
            || p.session != self.id.session
            || p.owner != self.owner_id
        {
            return Err(FlowReject::ReplacedIdentityMismatch);
        }
        // A session closed (by its close timer or a seal timeout) keeps its bindings until its
        // connection's disconnect: a 51 then is refused before anything changes (SB-6.6).
        if let Phase::Closed(_) = self.phase {
            return Err(FlowReject::SessionClosed);
        }
        let Some(b) = self.bindings.get(&rec.actor) else {
            return Err(if self.retired.contains(&p.retired_binding_generation) {
                FlowReject::DuplicateReplacement
            } else {
                FlowReject::ReplacedIdentityMismatch
            });
        };
        if b.generation != p.retired_binding_generation {
            return Err(if self.retired.contains(&p.retired_binding_generation) {
                FlowReject::DuplicateReplacement
            } else {
                FlowReject::ReplacedIdentityMismatch
            });
        }
        if b.owner_lease != p.owner_lease_generation {
            return Err(FlowReject::ReplacedIdentityMismatch);
        }
        self.last_relayed = None;
        // Its seal (if a relocation runs) ends with it: held relays answered by the drop.
        self.seals.remove(&rec.actor);
        let retired = self
            .bindings
            .remove(&rec.actor)
            .map(Arc::unwrap_or_clone)
            .ok_or(FlowReject::ReplacedIdentityMismatch)?;
        self.retire(retired.generation);
        let seq = self.next_replacement;
        self.next_replacement += 1;
        match &mut self.phase {
            Phase::Open => {
                self.phase = Phase::Closing(Replacement {
                    seq,
                    actor: retired.actor.clone(),
                    retired: retired.generation,
                    started: now,
                    callback_done: None,
                    first_done: false,
                    later: Vec::new(),
                });
                Ok(ReplacedOutcome::Closing { seq, retired })
            }
            Phase::Closing(r) => {
                // Its callback runs too: the close waits for it again.
                r.callback_done = None;
                r.later.push(LaterReplacement {
                    seq,
                    actor: retired.actor.clone(),
                    retired: retired.generation,
                    done: false,
                });
                Ok(ReplacedOutcome::AlsoClosing { seq, retired })
            }
            // Refused above, before the binding was taken.
            Phase::Closed(_) => Err(FlowReject::SessionClosed),
        }
    }

    /// The replaced-callback of replacement `seq` reached its terminal (success or failure);
    /// once every replaced-callback of the closing session has, the close is due
    /// [`REPLACEMENT_CLOSE_DELAY`] later. Returns `true` when that deadline was set now
    /// (`false` for another relation, a second report, or while another callback runs).
    pub fn callback_finished(&mut self, now: Instant, seq: u64) -> bool {
        let Phase::Closing(r) = &mut self.phase else {
            return false;
        };
        if r.seq == seq && !r.first_done {
            r.first_done = true;
        } else if let Some(l) = r.later.iter_mut().find(|l| l.seq == seq && !l.done) {
            l.done = true;
        } else {
            return false;
        }
        if r.first_done && r.later.iter().all(|l| l.done) {
            r.callback_done = Some(now);
            true
        } else {
            false
        }
    }

    /// The next instant at which [`SessionBindingAggregate::handle_timeout`] has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Closing(r) => {
                let forced = r.started + self.callback_timeout;
                Some(match r.callback_done {
                    Some(done) => (done + REPLACEMENT_CLOSE_DELAY).min(forced),
                    None => forced,
                })
            }
            _ => None,
        }
    }

    /// Fires due timers: the close of a replaced session 100 ms after its callback terminal, or
    /// at the callback timeout (SB-6.4). The timer rechecks that the relation is still the
    /// replacement target: `seq` must be the current closing relation.
    pub fn handle_timeout(&mut self, now: Instant, seq: u64) -> Option<CloseDecision> {
        let Phase::Closing(r) = &self.phase else {
            return None;
        };
        if r.seq != seq || self.poll_timeout().is_none_or(|t| now < t) {
            return None;
        }
        let forced = r
            .callback_done
            .is_none_or(|done| now < done + REPLACEMENT_CLOSE_DELAY);
        self.phase = Phase::Closed(SessionEnd::Replaced);
        Some(CloseDecision { seq, forced })
    }

    /// Removes this session's binding of `actor` for an application unbind or a public
    /// `NotifyDisconnected` (SB-6.6, SB-7.5); the caller sends the 38 tombstone for exactly this
    /// identity. A second call finds nothing (at most once per binding identity, SB-7.3).
    ///
    /// # Errors
    /// [`FlowReject::NotBound`]; [`FlowReject::SessionClosed`].
    pub fn remove(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
    ) -> Result<Binding, FlowReject> {
        let b = self.take_current(actor, generation)?;
        self.retire(b.generation);
        Ok(Arc::unwrap_or_clone(b))
    }

    /// The current binding `generation` of `actor`, taken out of the current bindings.
    pub(super) fn take_current(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
    ) -> Result<Arc<Binding>, FlowReject> {
        if let Phase::Closed(_) = self.phase
            && self.bindings.is_empty()
        {
            return Err(FlowReject::SessionClosed);
        }
        match self.bindings.get(actor) {
            None => return Err(self.stale(generation)),
            Some(b) if b.generation != generation => return Err(self.stale(generation)),
            Some(_) => {}
        }
        self.last_relayed = None;
        self.seals.remove(actor);
        self.bindings.remove(actor).ok_or(FlowReject::NotBound)
    }

    /// The physical connection ended (SB-7.1): the session is closed and the binding snapshot
    /// frozen — every current binding identity, each to be notified once over its stored route.
    /// A second call returns nothing. Binds still in flight become late (their replies are
    /// tombstoned, never applied).
    pub fn disconnect(&mut self) -> Vec<Binding> {
        if !matches!(self.phase, Phase::Closed(_)) {
            self.phase = Phase::Closed(SessionEnd::Disconnected);
        }
        self.last_relayed = None;
        // Seals and what they hold end with the session (held requests are answered by the
        // drop of their waiters).
        self.seals.clear();
        let mut snapshot: Vec<Binding> = self
            .bindings
            .drain()
            .map(|(_, b)| Arc::unwrap_or_clone(b))
            .collect();
        snapshot.sort_by_key(|b| b.token);
        for b in &snapshot {
            self.retire(b.generation);
        }
        // Being notified already (SB-7.3): not notified again.
        for b in std::mem::take(&mut self.notifying) {
            self.retire(b.generation);
        }
        self.notified.clear();
        snapshot
    }
}
