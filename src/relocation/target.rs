//! The target's half of a relocation, sans-IO (SB-8.9).
//!
//! Call order of the driver: [`TargetHandoff::restore`] (a Restore request arrived) → drain
//! [`TargetHandoff::poll_effect`], perform each effect, feed results back through `handle_*`;
//! arm a timer at [`TargetHandoff::poll_timeout`] (the cutover timeout) and call
//! [`TargetHandoff::handle_timeout`] when it fires. The last effect is always
//! [`TargetEffect::Finished`].
//!
//! Invariants: nothing is dispatched before the owner CAS succeeded (the temporary queue only
//! collects); the CAS presents exactly the source's relocation fence; dispatch opens before the
//! 44 commits leave, so held session messages arrive behind the captured work; a failed CAS
//! opens nothing and sends no 44 (SB-8.6).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zlink_wire::{ActorId, NodeRid, RelocationId, RouteCommit, SessionRelocationRoute};

use super::{RelocationConfig, RestoreRequest};
use crate::store::{ActorLocation, AuthorityFence};

/// Why the target refused a Restore (answered instead of relay-ready).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestoreRefusal {
    /// An actor type is not registered on the target.
    UnknownType,
    /// An actor's state could not be rehydrated.
    RehydrateFailed,
    /// The target is shutting down or its lease is not live.
    Unavailable,
    /// The target already hosts the actor.
    AlreadyHosted,
}

/// What ended the relay-ready wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CutoverCause {
    /// The source's cutover arrived.
    Cutover,
    /// No cutover within the cutover timeout: `cutover_timeout` Warning and fallback (SB-8.9).
    Timeout,
}

/// How a relocation ended on the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetOutcome {
    /// The CAS ran: the actors whose owner is now this node, and the ones whose CAS failed.
    Cas {
        /// Committed locations (dispatch open, 44 commit sent).
        committed: Vec<ActorLocation>,
        /// Actors whose CAS failed (queue discarded, no 44).
        failed: Vec<ActorId>,
        /// Whether the cutover arrived or the timeout fell back.
        cause: CutoverCause,
    },
    /// The Restore was refused before relay-ready.
    Refused(RestoreRefusal),
}

/// An effect for the driver, in the order it must be performed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetEffect {
    /// Install one temporary queue per actor (collecting, not dispatching) and rehydrate each
    /// actor before its first turn; answer with [`TargetHandoff::handle_installed`].
    InstallQueues(RestoreRequest),
    /// Reply relay-ready to the source.
    ReplyRelayReady {
        /// The source.
        to: NodeRid,
    },
    /// Reply that the Restore failed.
    ReplyRestoreFailed {
        /// The source.
        to: NodeRid,
        /// Why.
        refusal: RestoreRefusal,
    },
    /// Log the `cutover_timeout` Warning (SB-8.9) and count it.
    WarnCutoverTimeout,
    /// `cas_owner(actor, expected, this node)`; answer with [`TargetHandoff::handle_cas`].
    CasOwner {
        /// The actor.
        actor: ActorId,
        /// The source's relocation fence.
        expected: AuthorityFence,
    },
    /// Merge the temporary queue into the actor's lane, switch the regular route to `location`,
    /// open dispatch.
    OpenDispatch {
        /// The actor.
        actor: ActorId,
        /// Its committed location.
        location: ActorLocation,
    },
    /// Drop the temporary queue and the rehydrated instance of `actor` (its requests are answered
    /// `Unavailable`, never run twice).
    DiscardQueue {
        /// The actor.
        actor: ActorId,
    },
    /// Send a 44 (one-way, once) to a session owner.
    SendRoute {
        /// The session owner.
        to: NodeRid,
        /// The commit.
        record: SessionRelocationRoute,
    },
    /// Tell the source the result.
    ReportToSource {
        /// The source.
        to: NodeRid,
        /// Committed locations.
        committed: Vec<ActorLocation>,
        /// Failed actors.
        failed: Vec<ActorId>,
    },
    /// The relocation ended here (always the last effect).
    Finished(TargetOutcome),
}

/// The target's phase, for operators and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TargetPhaseName {
    /// Installing queues and rehydrating.
    Installing,
    /// Relay-ready sent; collecting relayed work, not dispatching.
    RelayReady,
    /// CAS in flight.
    Committing,
    /// Ended.
    Done,
}

#[derive(Debug)]
enum Phase {
    Installing,
    RelayReady {
        since: Instant,
    },
    Committing {
        cause: CutoverCause,
        results: Vec<Option<Result<ActorLocation, ()>>>,
    },
    Done,
}

/// The target's relocation core.
#[derive(Debug)]
pub struct TargetHandoff {
    source: NodeRid,
    request: RestoreRequest,
    config: RelocationConfig,
    phase: Phase,
    effects: VecDeque<TargetEffect>,
    phase_since: Instant,
    durations: Vec<(TargetPhaseName, Duration)>,
    relayed: u64,
    late_relayed: u64,
    late_cutovers: u64,
    outcome: Option<TargetOutcome>,
}

impl TargetHandoff {
    /// A Restore request arrived from `source`: the first effect installs the temporary queues.
    #[must_use]
    pub fn restore(
        source: NodeRid,
        request: RestoreRequest,
        config: RelocationConfig,
        now: Instant,
    ) -> Self {
        let mut t = Self {
            source,
            request: request.clone(),
            config,
            phase: Phase::Installing,
            effects: VecDeque::new(),
            phase_since: now,
            durations: Vec::new(),
            relayed: 0,
            late_relayed: 0,
            late_cutovers: 0,
            outcome: None,
        };
        t.effects.push_back(TargetEffect::InstallQueues(request));
        t
    }

    /// The relocation identity.
    pub fn id(&self) -> RelocationId {
        self.request.relocation
    }

    /// The current phase.
    pub fn phase(&self) -> TargetPhaseName {
        match self.phase {
            Phase::Installing => TargetPhaseName::Installing,
            Phase::RelayReady { .. } => TargetPhaseName::RelayReady,
            Phase::Committing { .. } => TargetPhaseName::Committing,
            Phase::Done => TargetPhaseName::Done,
        }
    }

    /// Each phase left so far with the time spent in it.
    pub fn phase_durations(&self) -> &[(TargetPhaseName, Duration)] {
        &self.durations
    }

    /// Relayed records taken while relay-ready (into the temporary queue).
    pub fn relayed(&self) -> u64 {
        self.relayed
    }

    /// Relayed records that arrived after the cutover timeout's fallback (appended behind).
    pub fn late_relayed(&self) -> u64 {
        self.late_relayed
    }

    /// Cutovers that arrived after the fallback (ignored).
    pub fn late_cutovers(&self) -> u64 {
        self.late_cutovers
    }

    /// The outcome, once [`TargetEffect::Finished`] was emitted.
    pub fn outcome(&self) -> Option<&TargetOutcome> {
        self.outcome.as_ref()
    }

    /// The next effect to perform.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<TargetEffect> {
        self.effects.pop_front()
    }

    /// When [`TargetHandoff::handle_timeout`] must be called next (the cutover timeout).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::RelayReady { since } => Some(since + self.config.cutover_timeout),
            _ => None,
        }
    }

    fn enter(&mut self, now: Instant, phase: Phase) {
        let left = self.phase();
        self.durations
            .push((left, now.saturating_duration_since(self.phase_since)));
        self.phase_since = now;
        self.phase = phase;
    }

    fn finish(&mut self, now: Instant, outcome: TargetOutcome) {
        self.enter(now, Phase::Done);
        self.outcome = Some(outcome.clone());
        self.effects.push_back(TargetEffect::Finished(outcome));
    }

    /// The temporary queues are installed and every actor rehydrated (`Ok`), or not.
    pub fn handle_installed(&mut self, now: Instant, result: Result<(), RestoreRefusal>) {
        if !matches!(self.phase, Phase::Installing) {
            return;
        }
        match result {
            Ok(()) => {
                self.effects.push_back(TargetEffect::ReplyRelayReady {
                    to: self.source.clone(),
                });
                self.enter(now, Phase::RelayReady { since: now });
            }
            Err(refusal) => {
                for a in &self.request.actors {
                    self.effects.push_back(TargetEffect::DiscardQueue {
                        actor: a.actor.clone(),
                    });
                }
                self.effects.push_back(TargetEffect::ReplyRestoreFailed {
                    to: self.source.clone(),
                    refusal: refusal.clone(),
                });
                self.finish(now, TargetOutcome::Refused(refusal));
            }
        }
    }

    /// `n` relayed records were appended to the temporary queue (counted; a record after the
    /// fallback still goes behind, counted apart).
    pub fn handle_relayed(&mut self, n: u64) {
        match self.phase {
            Phase::RelayReady { .. } => self.relayed = self.relayed.saturating_add(n),
            _ => self.late_relayed = self.late_relayed.saturating_add(n),
        }
    }

    /// The source's cutover arrived.
    pub fn handle_cutover(&mut self, now: Instant) {
        if matches!(self.phase, Phase::RelayReady { .. }) {
            self.commit(now, CutoverCause::Cutover);
        } else {
            self.late_cutovers = self.late_cutovers.saturating_add(1);
        }
    }

    /// The source failed (mesh peer down) before the cutover: nothing changes here; the cutover
    /// timeout decides (the source may have relayed everything already).
    pub fn handle_source_lost(&mut self, _now: Instant) {}

    /// The cutover timeout passed without a cutover: Warning and fallback (SB-8.9).
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Phase::RelayReady { since } = self.phase {
            if now >= since + self.config.cutover_timeout {
                self.effects.push_back(TargetEffect::WarnCutoverTimeout);
                self.commit(now, CutoverCause::Timeout);
            }
        }
    }

    fn commit(&mut self, now: Instant, cause: CutoverCause) {
        for a in &self.request.actors {
            self.effects.push_back(TargetEffect::CasOwner {
                actor: a.actor.clone(),
                expected: a.source_fence,
            });
        }
        self.enter(
            now,
            Phase::Committing {
                cause,
                results: vec![None; self.request.actors.len()],
            },
        );
    }

    /// A `cas_owner` answered: the new record, or a failure (fence mismatch after a durable
    /// abort, store unavailable, lease not live).
    pub fn handle_cas(&mut self, now: Instant, actor: &ActorId, result: Result<ActorLocation, ()>) {
        let Some(i) = self.request.actors.iter().position(|a| &a.actor == actor) else {
            return;
        };
        let Phase::Committing { results, .. } = &mut self.phase else {
            return;
        };
        if results[i].is_some() {
            return;
        }
        results[i] = Some(result);
        if results.iter().any(Option::is_none) {
            return;
        }
        let Phase::Committing { cause, results } = std::mem::replace(&mut self.phase, Phase::Done)
        else {
            unreachable!()
        };
        self.phase = Phase::Committing {
            cause,
            results: Vec::new(),
        };
        let mut committed = Vec::new();
        let mut failed = Vec::new();
        let mut routes = Vec::new();
        for (a, r) in self.request.actors.iter().zip(results) {
            match r {
                Some(Ok(location)) => {
                    self.effects.push_back(TargetEffect::OpenDispatch {
                        actor: a.actor.clone(),
                        location: location.clone(),
                    });
                    for s in &a.seals {
                        routes.push(TargetEffect::SendRoute {
                            to: s.session_owner.clone(),
                            record: SessionRelocationRoute::Commit(RouteCommit {
                                relocation: self.request.relocation,
                                actor: a.actor.clone(),
                                object_generation: a.object_generation,
                                target: zlink_wire::ActorLocation {
                                    mesh: location.mesh.clone(),
                                    node: location.owner_node.clone(),
                                    node_generation: location.node_generation,
                                    authority_owner_generation: location.authority_owner_generation,
                                    owner_lease_generation: location.owner_lease_generation,
                                },
                                session_lifecycle: s.seal.session_lifecycle,
                                session: s.seal.session,
                                binding_generation: s.seal.binding_generation,
                            }),
                        });
                    }
                    committed.push(location);
                }
                _ => {
                    self.effects.push_back(TargetEffect::DiscardQueue {
                        actor: a.actor.clone(),
                    });
                    failed.push(a.actor.clone());
                }
            }
        }
        // SB-8.9: dispatch opens, then the 44 commits leave
        self.effects.extend(routes);
        self.effects.push_back(TargetEffect::ReportToSource {
            to: self.source.clone(),
            committed: committed.clone(),
            failed: failed.clone(),
        });
        self.finish(
            now,
            TargetOutcome::Cas {
                committed,
                failed,
                cause,
            },
        );
    }
}
