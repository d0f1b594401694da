//! The source's (= coordinator's) half of a relocation, sans-IO (SB-8.5, SB-8.6, SB-8.9).
//!
//! Call order of the driver: [`SourceHandoff::start`] → repeatedly drain
//! [`SourceHandoff::poll_effect`], perform each effect, feed its result through the matching
//! `handle_*`; arm a timer at [`SourceHandoff::poll_timeout`] and call
//! [`SourceHandoff::handle_timeout`] when it fires. The last effect is always
//! [`SourceEffect::Finished`].
//!
//! After the cutover the source waits for the target's result at most
//! [`RelocationConfig::result_timeout`]; past it the store's records decide
//! ([`SourceEffect::QueryOwners`]), asked again every [`RESULT_QUERY_RETRY`] while the store
//! cannot be read.
//!
//! Invariants: the source runtime is unsealed only after the durable abort of every fence it
//! took succeeded and before any 44 abort leaves (SB-8.5); once relay-ready is accepted no
//! effect reopens the source (SB-8.6); each 42, the Restore, the cutover and each 44 are emitted
//! exactly once (SB-8.4: no retransmission, no retry timer).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zlink_wire::{
    AbortAction, Deadline, NodeRid, RelocationId, RouteAbort, SealIdentity, SealOutcome,
    SessionRelocationRoute, SessionRelocationSeal,
};

use super::{
    MigratedState, MovingActor, PhaseTimes, RelocationConfig, RestoreRequest, RestoredActor,
    SealTarget, Subject,
};
use crate::store::{ActorLocation, AuthorityFence};
use zlink_wire::ActorId;

/// How long the source waits before it asks the store again when the store could not be read
/// after the result timeout ([`SourceHandoff::handle_owners`]).
pub const RESULT_QUERY_RETRY: Duration = Duration::from_millis(1_000);

/// Why a relocation was aborted with the source still the owner (SB-8.5).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AbortReason {
    /// The store refused the relocation fence (another relocation or owner change raced it).
    FenceRefused,
    /// A session owner rejected the seal (43 `Rejected`).
    SealRejected,
    /// Not every 43 arrived within the seal timeout.
    SealTimeout,
    /// The actor type could not dehydrate its state (not opted in, or its hook failed).
    DehydrateFailed,
    /// The target refused or failed the Restore before relay-ready was accepted.
    TargetFailed,
    /// The target did not answer the Restore within the restore timeout.
    TargetSilent,
}

/// Why a relocation ended with neither side serving (after relay-ready, SB-8.6), or an abort
/// that could not be made durable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailReason {
    /// The target failed after relay-ready was accepted: the source never reopens.
    TargetFailedAfterRelayReady,
    /// The target's `cas_owner` failed for these actors: the source never reopens.
    CasFailed(Vec<ActorId>),
    /// The durable abort could not be written: the source cannot prove that no CAS happened,
    /// so it stays sealed and the sessions' seal timeout cleans up.
    AbortNotDurable(AbortReason),
}

/// How a relocation ended on the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceOutcome {
    /// Every actor is owned by the target; the source's incarnations ended.
    Moved(Vec<ActorLocation>),
    /// The source stayed the owner and reopened; the seals were released (44 abort).
    Aborted(AbortReason),
    /// Nothing reopens on the source; see [`FailReason`].
    Failed(FailReason),
}

/// An effect for the driver, in the order it must be performed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceEffect {
    /// Write the relocation fence of `actor` (`LocationStore::relocation_fence` with `expected`);
    /// answer with [`SourceHandoff::handle_fenced`].
    TakeFence {
        /// The actor.
        actor: ActorId,
        /// Its record's current fence.
        expected: AuthorityFence,
    },
    /// Send a 42 (request) to a session owner; its 43 goes to [`SourceHandoff::handle_sealed`].
    SendSeal {
        /// The session owner.
        to: NodeRid,
        /// The record.
        record: SessionRelocationSeal,
    },
    /// Seal the moving runtime unit (the actor's lane, or the Spot), wait for the turn in flight
    /// to end (a pending Yield resume fails, EG-4.1), dehydrate each actor; answer with
    /// [`SourceHandoff::handle_quiesced`].
    SealRuntime,
    /// Send the Restore request to the target; relay-ready goes to
    /// [`SourceHandoff::handle_relay_ready`].
    SendRestore {
        /// The target.
        to: NodeRid,
        /// The request.
        request: RestoreRequest,
    },
    /// Take the queued work of the moving objects in arrival order, hold new ingress, relay both
    /// to the target in that order; answer with [`SourceHandoff::handle_relayed`].
    CaptureAndRelay,
    /// Send the cutover (one-way, once, SB-8.4) to the target.
    SendCutover {
        /// The target.
        to: NodeRid,
    },
    /// Retire the relocation fence (durable abort): `LocationStore::relocation_fence` with
    /// `fence`; answer with [`SourceHandoff::handle_fence_retired`].
    RetireFence {
        /// The actor.
        actor: ActorId,
        /// The relocation fence taken for it.
        fence: AuthorityFence,
    },
    /// Lift the runtime seal: the source queue is restored (relocation aborted).
    UnsealRuntime,
    /// Send a 44 (one-way) to a session owner.
    SendRoute {
        /// The session owner.
        to: NodeRid,
        /// The record (an abort, from the source).
        record: SessionRelocationRoute,
    },
    /// The target owns these actors now: end the local incarnations (Message Follow to the new
    /// locations).
    EndIncarnations(Vec<ActorLocation>),
    /// No result from the target within [`RelocationConfig::result_timeout`] of the cutover:
    /// read the store's record of each of these actors (`LocationStore::lookup`); answer with
    /// [`SourceHandoff::handle_owners`].
    QueryOwners {
        /// The moving actors.
        actors: Vec<ActorId>,
    },
    /// The relocation ended (always the last effect).
    Finished(SourceOutcome),
}

/// The source's phase, for operators and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourcePhaseName {
    /// Taking the relocation fences.
    Fencing,
    /// Waiting for the 43s.
    Sealing,
    /// Runtime sealed, waiting for the last turn and the dehydrated state.
    Quiescing,
    /// Waiting for relay-ready.
    Restoring,
    /// Capturing and relaying work.
    Relaying,
    /// Cutover sent, waiting for the target's result.
    HandedOff,
    /// Writing the durable abort.
    Aborting,
    /// Ended.
    Done,
}

/// The phases, each holding exactly what it needs.
#[derive(Debug)]
enum Phase {
    Fencing {
        fences: Vec<Option<AuthorityFence>>,
    },
    Sealing {
        fences: Vec<AuthorityFence>,
        awaiting: Vec<SealIdentity>,
        deadline: Instant,
    },
    Quiescing {
        fences: Vec<AuthorityFence>,
    },
    Restoring {
        deadline: Instant,
        fences: Vec<AuthorityFence>,
    },
    Relaying {
        /// The target's result, when it came before the capture ended (its cutover timeout's
        /// fallback committed): applied once the cutover left.
        result: Option<(Vec<ActorLocation>, Vec<ActorId>)>,
    },
    HandedOff {
        /// When the wait for the target's result ends and the store is asked (`None` while a
        /// [`SourceEffect::QueryOwners`] is out).
        deadline: Option<Instant>,
    },
    Aborting {
        reason: AbortReason,
        /// The runtime unit was sealed (it is unsealed once the abort is durable).
        runtime_sealed: bool,
        /// 42s were sent (each seal gets a 44 abort once the abort is durable).
        seals_sent: bool,
        retired: Vec<Option<bool>>,
    },
    Done,
}

/// The source's relocation core.
#[derive(Debug)]
pub struct SourceHandoff {
    id: RelocationId,
    subject: Subject,
    target: NodeRid,
    config: RelocationConfig,
    actors: Vec<MovingActor>,
    phase: Phase,
    effects: VecDeque<SourceEffect>,
    started: Instant,
    times: PhaseTimes<SourcePhaseName>,
    outcome: Option<SourceOutcome>,
}

impl SourceHandoff {
    /// Start relocation `id` of `actors` (one, or every actor of a Spot) to `target`: the first
    /// effects take the relocation fences.
    #[must_use]
    pub fn start(
        id: RelocationId,
        subject: Subject,
        actors: Vec<MovingActor>,
        target: NodeRid,
        config: RelocationConfig,
        now: Instant,
    ) -> Self {
        let mut s = Self {
            id,
            subject,
            target,
            config,
            phase: Phase::Fencing {
                fences: vec![None; actors.len()],
            },
            actors,
            effects: VecDeque::new(),
            started: now,
            times: PhaseTimes::new(now),
            outcome: None,
        };
        for a in &s.actors {
            s.effects.push_back(SourceEffect::TakeFence {
                actor: a.actor.clone(),
                expected: a.current_fence,
            });
        }
        if s.actors.is_empty() {
            s.finish(now, SourceOutcome::Aborted(AbortReason::FenceRefused));
        }
        s
    }

    /// The relocation identity.
    pub fn id(&self) -> RelocationId {
        self.id
    }

    /// The current phase.
    pub fn phase(&self) -> SourcePhaseName {
        match self.phase {
            Phase::Fencing { .. } => SourcePhaseName::Fencing,
            Phase::Sealing { .. } => SourcePhaseName::Sealing,
            Phase::Quiescing { .. } => SourcePhaseName::Quiescing,
            Phase::Restoring { .. } => SourcePhaseName::Restoring,
            Phase::Relaying { .. } => SourcePhaseName::Relaying,
            Phase::HandedOff { .. } => SourcePhaseName::HandedOff,
            Phase::Aborting { .. } => SourcePhaseName::Aborting,
            Phase::Done => SourcePhaseName::Done,
        }
    }

    /// Each phase left so far with the time spent in it (for the relocation's span and metrics).
    pub fn phase_durations(&self) -> &[(SourcePhaseName, Duration)] {
        self.times.left()
    }

    /// When the relocation started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The outcome, once [`SourceEffect::Finished`] was emitted.
    pub fn outcome(&self) -> Option<&SourceOutcome> {
        self.outcome.as_ref()
    }

    /// The next effect to perform.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<SourceEffect> {
        self.effects.pop_front()
    }

    /// When [`SourceHandoff::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Sealing { deadline, .. } | Phase::Restoring { deadline, .. } => Some(*deadline),
            Phase::HandedOff { deadline } => *deadline,
            _ => None,
        }
    }

    fn enter(&mut self, now: Instant, phase: Phase) {
        self.times.leave(self.phase(), now);
        self.phase = phase;
    }

    fn finish(&mut self, now: Instant, outcome: SourceOutcome) {
        self.enter(now, Phase::Done);
        self.outcome = Some(outcome.clone());
        self.effects.push_back(SourceEffect::Finished(outcome));
    }

    fn seals(&self) -> impl Iterator<Item = &SealTarget> {
        self.actors.iter().flat_map(|a| a.bindings.iter())
    }

    /// The store answered a [`SourceEffect::TakeFence`]: `Ok(fence)` is the relocation fence
    /// (the record after the write), `Err(())` a refusal (fence mismatch, lease not live, store
    /// unavailable). Ignored outside the fencing phase or for an unknown actor.
    pub fn handle_fenced(
        &mut self,
        now: Instant,
        actor: &ActorId,
        result: Result<AuthorityFence, ()>,
    ) {
        let Some(i) = self.actors.iter().position(|a| &a.actor == actor) else {
            return;
        };
        let Phase::Fencing { fences } = &mut self.phase else {
            return;
        };
        match result {
            Err(()) => {
                let taken: Vec<Option<AuthorityFence>> = std::mem::take(fences);
                if taken.iter().any(Option::is_some) {
                    // fences already taken are retired before giving up (nothing was sealed)
                    self.abort(now, AbortReason::FenceRefused, false, false, Some(taken));
                } else {
                    self.finish(now, SourceOutcome::Aborted(AbortReason::FenceRefused));
                }
            }
            Ok(f) => {
                fences[i] = Some(f);
                if fences.iter().all(Option::is_some) {
                    let fences: Vec<AuthorityFence> = fences.iter().map(|f| f.unwrap()).collect();
                    self.start_sealing(now, fences);
                }
            }
        }
    }

    fn start_sealing(&mut self, now: Instant, fences: Vec<AuthorityFence>) {
        let deadline = Deadline::from_remaining(self.config.seal_timeout);
        let mut awaiting = Vec::new();
        let mut sends = Vec::new();
        for a in &self.actors {
            for b in &a.bindings {
                awaiting.push(b.seal.clone());
                sends.push(SourceEffect::SendSeal {
                    to: b.session_owner.clone(),
                    record: SessionRelocationSeal {
                        seal: b.seal.clone(),
                        actor: a.actor.clone(),
                        object_generation: a.object_generation,
                        deadline,
                    },
                });
            }
        }
        self.effects.extend(sends);
        if awaiting.is_empty() {
            self.enter(now, Phase::Quiescing { fences });
            self.effects.push_back(SourceEffect::SealRuntime);
        } else {
            self.enter(
                now,
                Phase::Sealing {
                    fences,
                    awaiting,
                    deadline: now + self.config.seal_timeout,
                },
            );
        }
    }

    /// A 43 arrived. A result for a seal this relocation does not wait for (duplicate, late,
    /// another relocation's) changes nothing.
    pub fn handle_sealed(&mut self, now: Instant, seal: &SealIdentity, outcome: SealOutcome) {
        let Phase::Sealing {
            fences, awaiting, ..
        } = &mut self.phase
        else {
            return;
        };
        let Some(i) = awaiting.iter().position(|s| s == seal) else {
            return;
        };
        match outcome {
            SealOutcome::Installed => {
                awaiting.swap_remove(i);
                if awaiting.is_empty() {
                    let fences = std::mem::take(fences);
                    self.enter(now, Phase::Quiescing { fences });
                    self.effects.push_back(SourceEffect::SealRuntime);
                }
            }
            SealOutcome::Rejected(_) => {
                let fences = std::mem::take(fences);
                self.abort(
                    now,
                    AbortReason::SealRejected,
                    false,
                    true,
                    Some(wrap(fences)),
                );
            }
        }
    }

    /// The runtime unit is sealed, its last turn ended and each actor dehydrated (`states` in
    /// the order of the moving actors); `Err(())` when an actor could not dehydrate.
    pub fn handle_quiesced(&mut self, now: Instant, states: Result<Vec<MigratedState>, ()>) {
        let Phase::Quiescing { fences } = &mut self.phase else {
            return;
        };
        let fences = std::mem::take(fences);
        let states = match states {
            Ok(s) if s.len() == self.actors.len() => s,
            _ => {
                self.abort(
                    now,
                    AbortReason::DehydrateFailed,
                    true,
                    true,
                    Some(wrap(fences)),
                );
                return;
            }
        };
        let request = RestoreRequest {
            relocation: self.id,
            subject: self.subject.clone(),
            actors: self
                .actors
                .iter()
                .zip(&fences)
                .zip(states)
                .map(|((a, f), state)| RestoredActor {
                    actor: a.actor.clone(),
                    object_generation: a.object_generation,
                    source_fence: *f,
                    state,
                    seals: a.bindings.clone(),
                })
                .collect(),
        };
        self.effects.push_back(SourceEffect::SendRestore {
            to: self.target.clone(),
            request,
        });
        self.enter(
            now,
            Phase::Restoring {
                deadline: now + self.config.restore_timeout,
                fences,
            },
        );
    }

    /// The target's relay-ready reply arrived and is accepted: from here on the source never
    /// reopens (SB-8.6). The source captures its work and holds ingress.
    pub fn handle_relay_ready(&mut self, now: Instant) {
        if !matches!(self.phase, Phase::Restoring { .. }) {
            return;
        }
        self.enter(now, Phase::Relaying { result: None });
        self.effects.push_back(SourceEffect::CaptureAndRelay);
    }

    /// The captured work and the held ingress are on their way to the target: send the cutover
    /// (after a fallback it closes the target's wait for this relay stream). A result that came
    /// during the capture is applied behind it.
    pub fn handle_relayed(&mut self, now: Instant) {
        let Phase::Relaying { result } = &mut self.phase else {
            return;
        };
        let result = result.take();
        self.effects.push_back(SourceEffect::SendCutover {
            to: self.target.clone(),
        });
        self.enter(
            now,
            Phase::HandedOff {
                deadline: Some(now + self.config.result_timeout),
            },
        );
        if let Some((committed, failed)) = result {
            self.handle_target_result(now, committed, failed);
        }
    }

    /// The target failed (an explicit refusal, or the mesh reports it down). Before relay-ready
    /// was accepted: durable abort, source restored, 44 abort (SB-8.5). After: the source never
    /// reopens (SB-8.6).
    pub fn handle_target_failed(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Restoring { fences, .. } => {
                let fences = std::mem::take(fences);
                self.abort(
                    now,
                    AbortReason::TargetFailed,
                    true,
                    true,
                    Some(wrap(fences)),
                );
            }
            Phase::Relaying { .. } | Phase::HandedOff { .. } => {
                self.finish(
                    now,
                    SourceOutcome::Failed(FailReason::TargetFailedAfterRelayReady),
                );
            }
            _ => {}
        }
    }

    /// The target's result: the locations it committed (`cas_owner` succeeded) and the actors
    /// whose CAS failed. After the cutover it ends the relocation. Before it, the target's
    /// cutover timeout fell back: during the capture the result waits for the cutover (the
    /// target keeps this relay stream open ahead of regular ingress until it arrives); while
    /// waiting for relay-ready (its reply is late or lost) a commit is the target's relay-ready
    /// — the source captures, relays and sends its cutover, then ends — and a result with
    /// nothing committed is a target that failed before relay-ready was accepted (SB-8.5).
    pub fn handle_target_result(
        &mut self,
        now: Instant,
        committed: Vec<ActorLocation>,
        failed: Vec<ActorId>,
    ) {
        match &mut self.phase {
            Phase::HandedOff { .. } => {}
            Phase::Relaying { result } => {
                *result = Some((committed, failed));
                return;
            }
            Phase::Restoring { .. } if committed.is_empty() => {
                self.handle_target_failed(now);
                return;
            }
            Phase::Restoring { .. } => {
                self.enter(
                    now,
                    Phase::Relaying {
                        result: Some((committed, failed)),
                    },
                );
                self.effects.push_back(SourceEffect::CaptureAndRelay);
                return;
            }
            _ => return,
        }
        if !committed.is_empty() {
            self.effects
                .push_back(SourceEffect::EndIncarnations(committed.clone()));
        }
        if failed.is_empty() {
            self.finish(now, SourceOutcome::Moved(committed));
        } else {
            self.finish(now, SourceOutcome::Failed(FailReason::CasFailed(failed)));
        }
    }

    /// A durable-abort write answered: `true` when the fence is retired (the record still names
    /// the source, under a fence no target holds), `false` otherwise.
    pub fn handle_fence_retired(&mut self, now: Instant, actor: &ActorId, retired_ok: bool) {
        let Some(i) = self.actors.iter().position(|a| &a.actor == actor) else {
            return;
        };
        let Phase::Aborting { retired, .. } = &mut self.phase else {
            return;
        };
        if retired.get(i).is_none_or(|r| r.is_some()) {
            return;
        }
        retired[i] = Some(retired_ok);
        self.try_finish_abort(now);
    }

    /// The deadline of [`SourceHandoff::poll_timeout`] passed (seal or restore timeout).
    pub fn handle_timeout(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Sealing {
                deadline, fences, ..
            } if now >= *deadline => {
                let fences = std::mem::take(fences);
                self.abort(
                    now,
                    AbortReason::SealTimeout,
                    false,
                    true,
                    Some(wrap(fences)),
                );
            }
            Phase::Restoring { deadline, fences } if now >= *deadline => {
                let fences = std::mem::take(fences);
                self.abort(
                    now,
                    AbortReason::TargetSilent,
                    true,
                    true,
                    Some(wrap(fences)),
                );
            }
            // No result from the target within the result timeout of the cutover (lost with a
            // connection a partition broke, or the target gone): the store decides.
            Phase::HandedOff { deadline } if deadline.is_some_and(|d| now >= d) => {
                *deadline = None;
                self.effects.push_back(SourceEffect::QueryOwners {
                    actors: self.actors.iter().map(|a| a.actor.clone()).collect(),
                });
            }
            _ => {}
        }
    }

    /// The store's records of the moving actors, asked after the result timeout
    /// ([`SourceEffect::QueryOwners`]; `Err` when the store could not be read). An actor whose
    /// record names the target with its ObjectGeneration was committed there (its CAS won); any
    /// other is failed (SB-8.6: never reopened here; the driver's recovery replaces the record
    /// only if it still names this node, so a target's CAS that comes later loses). The store
    /// out of reach: asked again [`RESULT_QUERY_RETRY`] later. The target's own result, if it
    /// arrives first, decides instead.
    pub fn handle_owners(
        &mut self,
        now: Instant,
        records: Result<Vec<(ActorId, Option<ActorLocation>)>, ()>,
    ) {
        let Phase::HandedOff { deadline: None } = self.phase else {
            return;
        };
        let Ok(records) = records else {
            self.phase = Phase::HandedOff {
                deadline: Some(now + RESULT_QUERY_RETRY),
            };
            return;
        };
        let mut committed = Vec::new();
        let mut failed = Vec::new();
        for a in &self.actors {
            match records.iter().find(|(id, _)| *id == a.actor) {
                Some((_, Some(l)))
                    if l.owner_node == self.target
                        && l.object_generation == a.object_generation =>
                {
                    committed.push(l.clone());
                }
                _ => failed.push(a.actor.clone()),
            }
        }
        if committed.is_empty() {
            self.finish(
                now,
                SourceOutcome::Failed(FailReason::TargetFailedAfterRelayReady),
            );
        } else {
            self.handle_target_result(now, committed, failed);
        }
    }

    /// Durable abort: retire every fence taken, then (in `try_finish_abort`) unseal and 44.
    fn abort(
        &mut self,
        now: Instant,
        reason: AbortReason,
        runtime_sealed: bool,
        seals_sent: bool,
        fences: Option<Vec<Option<AuthorityFence>>>,
    ) {
        let fences = fences.unwrap_or_default();
        let mut retired = Vec::with_capacity(self.actors.len());
        for (a, f) in self
            .actors
            .iter()
            .zip(fences.iter().chain(std::iter::repeat(&None)))
        {
            match f {
                Some(fence) => {
                    retired.push(None);
                    self.effects.push_back(SourceEffect::RetireFence {
                        actor: a.actor.clone(),
                        fence: *fence,
                    });
                }
                // never taken: nothing to retire
                None => retired.push(Some(true)),
            }
        }
        self.enter(
            now,
            Phase::Aborting {
                reason,
                runtime_sealed,
                seals_sent,
                retired,
            },
        );
        self.try_finish_abort(now);
    }

    fn try_finish_abort(&mut self, now: Instant) {
        let Phase::Aborting {
            reason,
            runtime_sealed,
            seals_sent,
            retired,
        } = &self.phase
        else {
            return;
        };
        if retired.iter().any(Option::is_none) {
            return;
        }
        let reason = reason.clone();
        if retired.contains(&Some(false)) {
            // not durable: stay sealed, no 44 (the seal timeout cleans the sessions up)
            self.finish(
                now,
                SourceOutcome::Failed(FailReason::AbortNotDurable(reason)),
            );
            return;
        }
        if *runtime_sealed {
            // SB-8.5: the source queue is restored before the sessions resubmit to it
            self.effects.push_back(SourceEffect::UnsealRuntime);
        }
        let seals_sent = *seals_sent;
        let routes: Vec<SourceEffect> = self
            .seals()
            .filter(|_| seals_sent)
            .map(|s| SourceEffect::SendRoute {
                to: s.session_owner.clone(),
                record: SessionRelocationRoute::Abort(RouteAbort {
                    seal: s.seal.clone(),
                    action: AbortAction::ResubmitToSource,
                }),
            })
            .collect();
        self.effects.extend(routes);
        self.finish(now, SourceOutcome::Aborted(reason));
    }
}

fn wrap(fences: Vec<AuthorityFence>) -> Vec<Option<AuthorityFence>> {
    fences.into_iter().map(Some).collect()
}
