//! The aggregate's relocation seals (SB-8): a 42 installs a seal, relays held while sealed, the
//! route switch (44), released relays, seal timeouts and gauges.

use super::*;

impl SessionBindingAggregate {
    /// A 42 from `sender` (authenticated by the mesh): installs the seal on the binding it
    /// names (SB-8.1). Validates only the physical session identity and SessionRid, the binding
    /// generation with its ActorId / ObjectGeneration (the current binding), the relocation
    /// identity, and that the sender is the binding's current route (the actor owner). A 42 of
    /// the seal installed already is answered `Installed` again (idempotent).
    ///
    /// # Errors
    /// The counted reason and the SB-12 kind of the 43 `Rejected`.
    pub fn handle_seal(
        &mut self,
        now: Instant,
        sender: (&NodeRid, NodeGeneration),
        rec: &SessionRelocationSeal,
    ) -> Result<(), (FlowReject, ErrorKind)> {
        let id = &rec.seal;
        if id.session_lifecycle != self.id.lifecycle {
            return Err((FlowReject::LifecycleMismatch, ErrorKind::Unavailable));
        }
        if id.session != self.id.session {
            return Err((FlowReject::UnknownSession, ErrorKind::Unavailable));
        }
        if let Err(r) = self.refuse_if_ended() {
            return Err((r, ErrorKind::Unavailable));
        }
        let b = match self.bindings.get(&rec.actor) {
            Some(b) if b.generation == id.binding_generation => b,
            // Not the current binding (retired, or never this session's): a stale binding.
            _ => return Err((self.stale(id.binding_generation), ErrorKind::Unavailable)),
        };
        if b.object_generation != rec.object_generation {
            return Err((
                FlowReject::ObjectGenerationMismatch,
                ErrorKind::InvalidOperation,
            ));
        }
        if *sender.0 != b.route.node || sender.1 != b.route.node_generation {
            return Err((FlowReject::NotActorOwner, ErrorKind::Unavailable));
        }
        match self.seals.get(&rec.actor) {
            Some(s) if s.identity == *id && matches!(s.phase, SealPhase::Installed { .. }) => {
                Ok(())
            }
            // Another relocation's seal, or this one's being released: the binding is in a
            // relocation (SB-12: `Unavailable`).
            Some(_) => Err((FlowReject::RelocationInProgress, ErrorKind::Unavailable)),
            None => {
                self.seals
                    .insert(rec.actor.clone(), Seal::new(id.clone(), now));
                Ok(())
            }
        }
    }

    /// Whether `actor`'s binding is sealed by a relocation (installed or releasing).
    #[must_use]
    pub fn is_sealed(&self, actor: &ActorId) -> bool {
        self.seals.contains_key(actor)
    }

    /// The seal of `actor`'s binding, if a relocation runs.
    #[must_use]
    pub fn seal(&self, actor: &ActorId) -> Option<&Seal> {
        self.seals.get(actor)
    }

    /// Holds a relay of a sealed binding in arrival order (SB-8.2). `Ok(true)` when the
    /// submitter may go on (its admission signal dropped: the relay is queued in order);
    /// `Ok(false)` when the session's seals hold more than the session lane's limits: the
    /// admission signal is kept until the relay leaves. The relay back when the binding
    /// `generation` of `actor` has no seal (any more): send it over the route.
    ///
    /// # Errors
    /// The relay, handed back.
    pub fn hold_relay(
        &mut self,
        actor: &ActorId,
        generation: BindingGeneration,
        mut relay: HeldRelay,
    ) -> Result<bool, HeldRelay> {
        if self
            .bindings
            .get(actor)
            .is_none_or(|b| b.generation != generation)
        {
            return Err(relay);
        }
        let (items, bytes) = self.held_limit;
        let g = self.seal_gauges();
        let Some(seal) = self.seals.get_mut(actor) else {
            return Err(relay);
        };
        let within = (g.held as usize) < items && g.held_bytes + relay.bytes() as u64 <= bytes;
        if within {
            drop(relay.admitted.take());
        }
        seal.held.push_back(relay);
        Ok(within)
    }

    /// A 44 (SB-8.3, SB-8.7, SB-8.8), from any mesh peer. A commit must match the installed
    /// seal's relocation identity, the session identity and SessionRid, the binding generation
    /// and the binding's ActorId / ObjectGeneration; it switches the binding's route and
    /// ActorRef snapshot to `target` in this one step (same binding identity: not a rebind) and
    /// starts the release of the held relays over it. An abort must match the seal identity;
    /// it starts their release over the unchanged source route.
    ///
    /// # Errors
    /// [`FlowReject::DuplicateRouteUpdate`] for a 44 this session applied already (a no-op);
    /// [`FlowReject::LateRouteUpdate`] for one of no installed seal, another relocation's, or
    /// one after the seal timed out (`late_session_route_update`, changes nothing).
    pub fn handle_route(
        &mut self,
        rec: &SessionRelocationRoute,
    ) -> Result<RouteApplied, FlowReject> {
        let (relocation, lifecycle, session, generation, kind) = match rec {
            SessionRelocationRoute::Commit(c) => (
                c.relocation,
                c.session_lifecycle,
                c.session,
                c.binding_generation,
                SealEnd::Committed,
            ),
            SessionRelocationRoute::Abort(a) => (
                a.seal.relocation,
                a.seal.session_lifecycle,
                a.seal.session,
                a.seal.binding_generation,
                SealEnd::Aborted,
            ),
        };
        if lifecycle != self.id.lifecycle || session != self.id.session {
            return Err(FlowReject::LateRouteUpdate);
        }
        let actor = match rec {
            SessionRelocationRoute::Commit(c) => Some(&c.actor),
            SessionRelocationRoute::Abort(_) => None,
        };
        let found = self.seals.iter().find(|(a, s)| {
            s.identity.relocation == relocation
                && s.identity.binding_generation == generation
                && actor.is_none_or(|x| x == *a)
        });
        let Some((actor, seal)) = found else {
            return Err(self.ended_kind(relocation, generation, kind));
        };
        if seal.phase == SealPhase::Releasing {
            // Applied already (or the other kind of 44 of an applied relocation).
            return Err(match self.ended_kind(relocation, generation, kind) {
                FlowReject::DuplicateRouteUpdate => FlowReject::DuplicateRouteUpdate,
                _ => FlowReject::LateRouteUpdate,
            });
        }
        if let SessionRelocationRoute::Abort(a) = rec
            && a.seal != seal.identity
        {
            return Err(FlowReject::LateRouteUpdate);
        }
        let actor = actor.clone();
        let Some(b) = self.bindings.get(&actor).cloned() else {
            return Err(FlowReject::LateRouteUpdate);
        };
        let applied = match rec {
            SessionRelocationRoute::Commit(c) => {
                if b.object_generation != c.object_generation || b.generation != generation {
                    return Err(FlowReject::LateRouteUpdate);
                }
                // The route and the ActorRef snapshot switch at once, same binding identity
                // (SB-8.7, SB-4.2): every derived copy (the 24 template, `last_relayed`) is
                // replaced with it.
                let relay = if c.target.node == self.id.owner {
                    None
                } else {
                    Binding::relay_template(
                        &b.actor,
                        b.object_generation,
                        &c.target,
                        self.id.lifecycle,
                        b.generation,
                    )
                };
                let moved = Arc::new(Binding {
                    route: c.target.clone(),
                    relay,
                    ..Binding::clone(&b)
                });
                self.last_relayed = None;
                self.bindings.insert(actor.clone(), moved.clone());
                RouteApplied::Committed(moved)
            }
            SessionRelocationRoute::Abort(_) => {
                // The seal's binding was retired (a rebind while sealed): not this binding's
                // 44 (its held relays never go through a newer binding, SB-4.1).
                if b.generation != generation {
                    return Err(FlowReject::LateRouteUpdate);
                }
                RouteApplied::Aborted(b)
            }
        };
        if let Some(seal) = self.seals.get_mut(&actor) {
            seal.phase = SealPhase::Releasing;
        }
        self.remember_ended(relocation, generation, kind);
        Ok(applied)
    }

    fn ended_kind(
        &self,
        relocation: RelocationId,
        generation: BindingGeneration,
        kind: SealEnd,
    ) -> FlowReject {
        match self
            .ended_seals
            .iter()
            .find(|(r, g, _)| *r == relocation && *g == generation)
        {
            Some((_, _, k)) if *k == kind => FlowReject::DuplicateRouteUpdate,
            _ => FlowReject::LateRouteUpdate,
        }
    }

    fn remember_ended(
        &mut self,
        relocation: RelocationId,
        generation: BindingGeneration,
        k: SealEnd,
    ) {
        if self.ended_seals.len() == RETIRED_MEMORY {
            self.ended_seals.pop_front();
        }
        self.ended_seals.push_back((relocation, generation, k));
    }

    /// The next held relay of `actor`'s releasing seal (SB-8.7: in arrival order, over the
    /// binding's route as it is now), skipping requests whose caller stopped waiting; when none
    /// is left the seal ends here, in the same step, so a relay submitted after it goes
    /// straight to the route, behind every held one.
    pub fn next_released(&mut self, now: Instant, actor: &ActorId) -> Released {
        loop {
            let Some(seal) = self.seals.get_mut(actor) else {
                return Released::Done;
            };
            if seal.phase != SealPhase::Releasing {
                return Released::Done;
            }
            let sealed = seal.identity.binding_generation;
            let Some(relay) = seal.held.pop_front() else {
                self.seals.remove(actor);
                return Released::Done;
            };
            if relay.cancelled() {
                continue;
            }
            if relay.request.as_ref().is_some_and(|r| r.deadline <= now) {
                return Released::Expired(relay);
            }
            // Only through the binding it was held for: one retired since (a rebind) ends the
            // seal and its held relays, as a binding that ended does (SB-4.1).
            let Some(b) = self.bindings.get(actor).filter(|b| b.generation == sealed) else {
                self.seals.remove(actor);
                return Released::Done;
            };
            let ticket = Self::ticket(b, self.id.lifecycle, &mut self.next_sequence, false);
            return Released::Send(ticket, relay);
        }
    }

    /// The next instant at which [`SessionBindingAggregate::handle_seal_timeouts`] has work: a
    /// seal's timeout or a held request's deadline.
    #[must_use]
    pub fn poll_seal_timeout(&self) -> Option<Instant> {
        self.seals
            .values()
            .flat_map(|s| {
                let timeout = match s.phase {
                    SealPhase::Installed { since } => Some(since + self.seal_timeout),
                    SealPhase::Releasing => None,
                };
                timeout.into_iter().chain(
                    s.held
                        .iter()
                        .filter_map(|h| h.request.as_ref().map(|r| r.deadline)),
                )
            })
            .min()
    }

    /// Fires due seal timers: held requests past their deadline are taken out (SB-8.2); a seal
    /// installed for SessionRelocationSealTimeout without its 44 closes the session (SB-8.3):
    /// every seal and held relay of it ends, the binding is kept for the disconnect's
    /// notification, and a 44 arriving after this is late.
    pub fn handle_seal_timeouts(&mut self, now: Instant) -> SealTimeouts {
        let mut out = SealTimeouts::default();
        for seal in self.seals.values_mut() {
            let (expired, kept): (VecDeque<HeldRelay>, VecDeque<HeldRelay>) =
                std::mem::take(&mut seal.held)
                    .into_iter()
                    .partition(|h| h.request.as_ref().is_some_and(|r| r.deadline <= now));
            seal.held = kept;
            out.expired.extend(expired);
        }
        let timeout = self.seal_timeout;
        let timed_out = self
            .seals
            .values()
            .any(|s| matches!(s.phase, SealPhase::Installed { since } if since + timeout <= now));
        if timed_out {
            let seals: Vec<(ActorId, Seal)> = self.seals.drain().collect();
            let mut dropped = Vec::new();
            for (_, s) in seals {
                if let SealPhase::Installed { .. } = s.phase {
                    self.remember_ended(
                        s.identity.relocation,
                        s.identity.binding_generation,
                        SealEnd::TimedOut,
                    );
                }
                dropped.extend(s.held);
            }
            self.last_relayed = None;
            if !matches!(self.phase, Phase::Closed(_)) {
                self.phase = Phase::Closed(SessionEnd::RelocationTimeout);
            }
            out.closed = Some(dropped);
        }
        out
    }

    /// What this session's seals hold now.
    #[must_use]
    pub fn seal_gauges(&self) -> SealGauges {
        let mut g = SealGauges::default();
        for s in self.seals.values() {
            g += SealGauges {
                seals: 1,
                held: s.held_len() as u64,
                held_bytes: s.held_bytes() as u64,
            };
        }
        g
    }
}
