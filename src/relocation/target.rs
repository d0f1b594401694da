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
//!
//! The cutover timeout's fallback keeps that order: it commits (CAS, dispatch, 44s, so the
//! sealed sessions stay up), but the source's relay stream stays open ahead of everything else
//! — the committed actors' regular ingress (what the 44s release, other senders) waits behind
//! it ([`TargetEffect::OpenDispatch`] with `behind_source`) until the source's cutover arrives,
//! the source is known gone ([`TargetHandoff::handle_source_lost`]), or
//! [`RelocationConfig::source_wait`] passes ([`TargetEffect::WarnSourceWaitExpired`]); then
//! [`TargetEffect::ReleaseIngress`] lets it in. Only relayed work arriving after that is
//! appended behind ([`TargetHandoff::late_relayed`]).
//!
//! A CAS whose answer was lost (the store timed out or the connection dropped:
//! [`TargetHandoff::handle_cas_lost`]) may have been applied. The target never decides it from
//! the missing answer: it reads the record back ([`TargetEffect::ReadOwner`]) and the store
//! decides ([`TargetHandoff::handle_owner_read`]) — the record names this node's lease under the
//! moving ObjectGeneration: committed (with that record); the record still carries the
//! source's relocation fence: the CAS was not applied, it is sent again (an answer lost again,
//! or a refusal, is read back again: the earlier CAS may have landed meanwhile); anything else
//! (the fence retired, the actor recovered or taken over, no record): failed. While the store
//! cannot be read it is asked again every [`CAS_READ_BACK_RETRY`]; the actor whose CAS is still
//! undecided [`CAS_READ_BACK_WAIT`] after its answer was first lost is failed (SB-8.6), well
//! within the source's result timeout.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zlink_wire::{ActorId, NodeRid, RelocationId, RouteCommit, SessionRelocationRoute};

use super::{PhaseTimes, RelocationConfig, RestoreRequest};
use crate::store::{ActivationState, ActorLocation, AuthorityFence, LeaseHolder};

/// How often the target reads the record of an actor whose CAS answer was lost while the store
/// cannot be read ([`TargetHandoff::handle_owner_read`]).
pub const CAS_READ_BACK_RETRY: Duration = Duration::from_millis(200);

/// How long after a CAS answer was first lost the target keeps reading the record back (and
/// sending the CAS again while the record shows it was not applied) before the actor fails
/// (SB-8.6). Below the source's result timeout, so the source hears the target's result.
pub const CAS_READ_BACK_WAIT: Duration = Duration::from_millis(3_000);

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
    /// An actor's Restore names more timers than the target starts for one actor
    /// ([`super::RelocationConfig::max_restore_timers`]).
    TooManyTimers,
}

/// What ended the relay-ready wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CutoverCause {
    /// The source's cutover arrived.
    Cutover,
    /// No cutover within the cutover timeout: `cutover_timeout` Warning and fallback (SB-8.9).
    Timeout,
}

/// What ended the wait for the source's relay stream after a fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceWaitEnd {
    /// The source's cutover arrived: everything it captured is here, in order.
    Cutover,
    /// The source is gone (mesh peer down, or a new lifecycle of it): it relays nothing more.
    SourceLost,
    /// [`RelocationConfig::source_wait`] passed: what the source relays later is appended
    /// behind (`source_wait_expired` Warning).
    Expired,
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
    /// `cas_owner(actor, expected, this node)`; answer with [`TargetHandoff::handle_cas`], or
    /// [`TargetHandoff::handle_cas_lost`] when its answer was lost.
    CasOwner {
        /// The actor.
        actor: ActorId,
        /// The source's relocation fence.
        expected: AuthorityFence,
    },
    /// The CAS answer of `actor` was lost: read its record (`LocationStore::lookup`); answer
    /// with [`TargetHandoff::handle_owner_read`].
    ReadOwner {
        /// The actor.
        actor: ActorId,
    },
    /// Merge the temporary queue into the actor's lane, switch the regular route to `location`,
    /// open dispatch.
    OpenDispatch {
        /// The actor.
        actor: ActorId,
        /// Its committed location.
        location: ActorLocation,
        /// The cutover timeout's fallback committed: the source's relay stream stays open
        /// ahead of everything else — work relayed by the source goes into the lane as it
        /// arrives, the actor's regular ingress waits behind it until
        /// [`TargetEffect::ReleaseIngress`].
        behind_source: bool,
    },
    /// The wait for the source's relay stream ended ([`SourceWaitEnd`]): the regular ingress
    /// `actor` held behind it goes into the lane, in arrival order; work the source relays
    /// from now on is appended behind.
    ReleaseIngress {
        /// The actor.
        actor: ActorId,
    },
    /// Log the `source_wait_expired` Warning and count it: the source, alive as far as the
    /// mesh knows, sent no cutover within [`RelocationConfig::source_wait`] of the fallback.
    WarnSourceWaitExpired,
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
    /// Committed by the fallback; regular ingress waits behind the source's relay stream.
    AwaitingSource,
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
        results: Vec<Cas>,
    },
    AwaitingSource {
        /// The source wait's end.
        until: Instant,
        /// The committed actors whose regular ingress waits.
        actors: Vec<ActorId>,
    },
    Done,
}

/// One actor's owner CAS while the target commits.
#[derive(Clone, Debug)]
enum Cas {
    /// Sent; `lost` once an earlier answer of it was lost (its holder and the read-back's end):
    /// a refusal may then be of a CAS sent again after the first one landed, so it is read
    /// back too.
    Sent {
        lost: Option<(LeaseHolder, Instant)>,
    },
    /// Its answer was lost: the record is read back (`retry`: when to ask again, `None` while
    /// a read is out), until `until`.
    ReadingBack {
        holder: LeaseHolder,
        until: Instant,
        retry: Option<Instant>,
    },
    /// Decided.
    Done(Result<ActorLocation, ()>),
}

/// The target's relocation core.
#[derive(Debug)]
pub struct TargetHandoff {
    source: NodeRid,
    request: RestoreRequest,
    config: RelocationConfig,
    phase: Phase,
    effects: VecDeque<TargetEffect>,
    times: PhaseTimes<TargetPhaseName>,
    relayed: u64,
    late_relayed: u64,
    late_cutovers: u64,
    source_lost: bool,
    wait_end: Option<SourceWaitEnd>,
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
            times: PhaseTimes::new(now),
            relayed: 0,
            late_relayed: 0,
            late_cutovers: 0,
            source_lost: false,
            wait_end: None,
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
            Phase::AwaitingSource { .. } => TargetPhaseName::AwaitingSource,
            Phase::Done => TargetPhaseName::Done,
        }
    }

    /// Each phase left so far with the time spent in it.
    pub fn phase_durations(&self) -> &[(TargetPhaseName, Duration)] {
        self.times.left()
    }

    /// Relayed records taken in order: while relay-ready (into the temporary queue), and after
    /// a fallback while the source's relay stream is open (into the lane, ahead of regular
    /// ingress).
    pub fn relayed(&self) -> u64 {
        self.relayed
    }

    /// Relayed records that arrived after the wait for the source's relay stream ended
    /// (appended behind what arrived meanwhile).
    pub fn late_relayed(&self) -> u64 {
        self.late_relayed
    }

    /// Cutovers that arrived after the relocation ended here (ignored).
    pub fn late_cutovers(&self) -> u64 {
        self.late_cutovers
    }

    /// What ended the wait for the source's relay stream after a fallback (`None`: no fallback
    /// committed, or the wait goes on).
    pub fn source_wait_end(&self) -> Option<SourceWaitEnd> {
        self.wait_end
    }

    /// The outcome, once the CAS results are in ([`TargetEffect::Finished`] carries it when
    /// the relocation ends here; after a fallback that is when the source wait ends).
    pub fn outcome(&self) -> Option<&TargetOutcome> {
        self.outcome.as_ref()
    }

    /// The next effect to perform.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<TargetEffect> {
        self.effects.pop_front()
    }

    /// When [`TargetHandoff::handle_timeout`] must be called next (the cutover timeout, then
    /// after a fallback the source wait).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::RelayReady { since } => Some(*since + self.config.cutover_timeout),
            Phase::AwaitingSource { until, .. } => Some(*until),
            Phase::Committing { results, .. } => results
                .iter()
                .filter_map(|c| match c {
                    Cas::ReadingBack { retry, .. } => *retry,
                    _ => None,
                })
                .min(),
            _ => None,
        }
    }

    fn enter(&mut self, now: Instant, phase: Phase) {
        self.times.leave(self.phase(), now);
        self.phase = phase;
    }

    fn finish(&mut self, now: Instant, outcome: TargetOutcome) {
        self.enter(now, Phase::Done);
        self.outcome = Some(outcome.clone());
        self.effects.push_back(TargetEffect::Finished(outcome));
    }

    /// The wait for the source's relay stream ends: regular ingress goes in behind it.
    fn end_wait(&mut self, now: Instant, end: SourceWaitEnd) {
        let Phase::AwaitingSource { actors, .. } = &mut self.phase else {
            return;
        };
        let actors = std::mem::take(actors);
        if end == SourceWaitEnd::Expired {
            self.effects.push_back(TargetEffect::WarnSourceWaitExpired);
        }
        for actor in actors {
            self.effects
                .push_back(TargetEffect::ReleaseIngress { actor });
        }
        self.wait_end = Some(end);
        let outcome = self.outcome.clone().expect("decided at the CAS");
        self.finish(now, outcome);
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

    /// `n` relayed records were taken: in order (the temporary queue while relay-ready, the
    /// lane ahead of regular ingress while the source's relay stream is open after a fallback),
    /// or appended behind once the relocation ended here (counted apart).
    pub fn handle_relayed(&mut self, n: u64) {
        match self.phase {
            Phase::RelayReady { .. } | Phase::Committing { .. } | Phase::AwaitingSource { .. } => {
                self.relayed = self.relayed.saturating_add(n);
            }
            Phase::Installing | Phase::Done => {
                self.late_relayed = self.late_relayed.saturating_add(n);
            }
        }
    }

    /// The source's cutover arrived: before the cutover timeout it commits; after a fallback
    /// it closes the source's relay stream (everything captured is here, in order).
    pub fn handle_cutover(&mut self, now: Instant) {
        match self.phase {
            Phase::RelayReady { .. } => self.commit(now, CutoverCause::Cutover),
            Phase::AwaitingSource { .. } => self.end_wait(now, SourceWaitEnd::Cutover),
            // the fallback's CAS is in flight: its results decide (no wait then)
            Phase::Committing {
                cause: CutoverCause::Timeout,
                ..
            } => self.wait_end = Some(SourceWaitEnd::Cutover),
            _ => self.late_cutovers = self.late_cutovers.saturating_add(1),
        }
    }

    /// The source is gone (mesh peer down, or a new lifecycle of it): it relays nothing more.
    /// Before the cutover nothing changes (the cutover timeout decides: the source may have
    /// relayed everything already), but a fallback then opens regular ingress at once; after
    /// a fallback it ends the wait for the source's relay stream.
    pub fn handle_source_lost(&mut self, now: Instant) {
        self.source_lost = true;
        if matches!(self.phase, Phase::AwaitingSource { .. }) {
            self.end_wait(now, SourceWaitEnd::SourceLost);
        }
    }

    /// The deadline of [`TargetHandoff::poll_timeout`] passed: the cutover timeout (Warning and
    /// fallback, SB-8.9), or after a fallback the source wait.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::RelayReady { since } if now >= since + self.config.cutover_timeout => {
                self.effects.push_back(TargetEffect::WarnCutoverTimeout);
                self.commit(now, CutoverCause::Timeout);
            }
            Phase::AwaitingSource { until, .. } if now >= until => {
                self.end_wait(now, SourceWaitEnd::Expired);
            }
            Phase::Committing { .. } => self.retry_reads(now),
            _ => {}
        }
    }

    /// The reads back that are due: sent again, or failed past their wait.
    fn retry_reads(&mut self, now: Instant) {
        let Phase::Committing { results, .. } = &mut self.phase else {
            return;
        };
        for (a, c) in self.request.actors.iter().zip(results.iter_mut()) {
            let Cas::ReadingBack { until, retry, .. } = c else {
                continue;
            };
            if retry.is_none_or(|r| now < r) {
                continue;
            }
            if now >= *until {
                *c = Cas::Done(Err(()));
            } else {
                *retry = None;
                self.effects.push_back(TargetEffect::ReadOwner {
                    actor: a.actor.clone(),
                });
            }
        }
        self.try_decide(now);
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
                results: vec![Cas::Sent { lost: None }; self.request.actors.len()],
            },
        );
    }

    /// The CAS of `actor` (whose record's owner would be `holder`: this node's lease the CAS
    /// presented) got no answer: the store timed out or the connection dropped, so it may have
    /// been applied. The record is read back ([`TargetEffect::ReadOwner`]) and decides.
    pub fn handle_cas_lost(&mut self, now: Instant, actor: &ActorId, holder: LeaseHolder) {
        let Some((i, lost)) = self.sent_cas(actor) else {
            return;
        };
        let until = lost.map_or(now + CAS_READ_BACK_WAIT, |(_, u)| u);
        self.read_back(now, i, holder, until);
    }

    /// The index of `actor` and its earlier lost answer, while its CAS is out (`None`
    /// otherwise: an answer that is late, duplicate or for another actor changes nothing).
    fn sent_cas(&self, actor: &ActorId) -> Option<(usize, Option<(LeaseHolder, Instant)>)> {
        let i = self.request.actors.iter().position(|a| &a.actor == actor)?;
        match &self.phase {
            Phase::Committing { results, .. } => match &results[i] {
                Cas::Sent { lost } => Some((i, lost.clone())),
                _ => None,
            },
            _ => None,
        }
    }

    fn read_back(&mut self, now: Instant, i: usize, holder: LeaseHolder, until: Instant) {
        let Phase::Committing { results, .. } = &mut self.phase else {
            return;
        };
        if now >= until {
            results[i] = Cas::Done(Err(()));
            self.try_decide(now);
            return;
        }
        results[i] = Cas::ReadingBack {
            holder,
            until,
            retry: None,
        };
        self.effects.push_back(TargetEffect::ReadOwner {
            actor: self.request.actors[i].actor.clone(),
        });
    }

    /// The record of `actor` read back after its CAS answer was lost (`Err`: the store could
    /// not be read; `Ok(None)`: no record). See the module documentation for the decision.
    pub fn handle_owner_read(
        &mut self,
        now: Instant,
        actor: &ActorId,
        record: Result<Option<ActorLocation>, ()>,
    ) {
        let Some(i) = self.request.actors.iter().position(|a| &a.actor == actor) else {
            return;
        };
        let Phase::Committing { results, .. } = &mut self.phase else {
            return;
        };
        let Cas::ReadingBack {
            holder,
            until,
            retry: None,
        } = &results[i]
        else {
            return;
        };
        let (holder, until) = (holder.clone(), *until);
        let moving = &self.request.actors[i];
        match record {
            Ok(Some(l))
                if l.object_generation == moving.object_generation
                    && l.holder() == holder
                    && l.state == ActivationState::Ready =>
            {
                results[i] = Cas::Done(Ok(l));
            }
            Ok(Some(l)) if l.fence() == moving.source_fence => {
                // Not applied: the CAS goes again (its answer decides, or is read back).
                if now >= until {
                    results[i] = Cas::Done(Err(()));
                } else {
                    results[i] = Cas::Sent {
                        lost: Some((holder, until)),
                    };
                    self.effects.push_back(TargetEffect::CasOwner {
                        actor: moving.actor.clone(),
                        expected: moving.source_fence,
                    });
                }
            }
            Ok(_) => results[i] = Cas::Done(Err(())),
            Err(()) if now >= until => results[i] = Cas::Done(Err(())),
            Err(()) => {
                results[i] = Cas::ReadingBack {
                    holder,
                    until,
                    retry: Some(now + CAS_READ_BACK_RETRY),
                };
            }
        }
        self.try_decide(now);
    }

    /// A `cas_owner` answered: the new record, or a refusal (fence mismatch after a durable
    /// abort, lease not live). A refusal of a CAS sent again after a lost answer is read back
    /// (the first one may have landed). An answer that was lost goes to
    /// [`TargetHandoff::handle_cas_lost`] instead.
    pub fn handle_cas(&mut self, now: Instant, actor: &ActorId, result: Result<ActorLocation, ()>) {
        let Some((i, lost)) = self.sent_cas(actor) else {
            return;
        };
        match (result, lost) {
            (Err(()), Some((holder, until))) => self.read_back(now, i, holder, until),
            (result, _) => {
                if let Phase::Committing { results, .. } = &mut self.phase {
                    results[i] = Cas::Done(result);
                }
                self.try_decide(now);
            }
        }
    }

    /// Once every CAS is decided: open what committed, discard the rest, 44s, the result.
    fn try_decide(&mut self, now: Instant) {
        let Phase::Committing { results, .. } = &self.phase else {
            return;
        };
        if results.iter().any(|c| !matches!(c, Cas::Done(_))) {
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
        // After a fallback the source's relay stream stays open ahead of regular ingress,
        // unless the source is gone or its cutover came while the CAS ran.
        let behind_source =
            cause == CutoverCause::Timeout && !self.source_lost && self.wait_end.is_none();
        let mut committed = Vec::new();
        let mut failed = Vec::new();
        let mut routes = Vec::new();
        for (a, r) in self.request.actors.iter().zip(results) {
            match r {
                Cas::Done(Ok(location)) => {
                    self.effects.push_back(TargetEffect::OpenDispatch {
                        actor: a.actor.clone(),
                        location: location.clone(),
                        behind_source,
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
        let waiting: Vec<ActorId> = committed.iter().map(|l| l.actor_id.clone()).collect();
        let outcome = TargetOutcome::Cas {
            committed,
            failed,
            cause,
        };
        if behind_source && !waiting.is_empty() {
            self.outcome = Some(outcome);
            self.enter(
                now,
                Phase::AwaitingSource {
                    until: now + self.config.source_wait,
                    actors: waiting,
                },
            );
        } else {
            self.finish(now, outcome);
        }
    }
}
