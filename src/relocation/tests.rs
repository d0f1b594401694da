//! Unit tests of the two relocation cores: one per transition and per failure, time injected.

use std::time::{Duration, Instant};

use zlink_wire::{
    ActorId, BindingGeneration, ErrorKind, NodeRid, ObjectGeneration, RelocationId, SealIdentity,
    SealOutcome, SessionLifecycleGeneration, SessionRelocationRoute, SessionRid,
};

use super::*;
use crate::store::{
    ActivationState, ActorLocation, AuthorityFence, MeshName, NodeGeneration, StoreVersion,
};
use zlink_wire::{AuthorityOwnerGeneration, OwnerLeaseGeneration};

fn fence(version: u64) -> AuthorityFence {
    AuthorityFence {
        object_generation: ObjectGeneration::new(1),
        authority_owner_generation: AuthorityOwnerGeneration::new(3),
        version: StoreVersion::new(version),
    }
}

fn seal(binding: u64) -> SealTarget {
    SealTarget {
        session_owner: NodeRid::new("sessions").unwrap(),
        seal: SealIdentity {
            relocation: RelocationId::new(9),
            session_lifecycle: SessionLifecycleGeneration::new(1),
            session: SessionRid::new(binding),
            binding_generation: BindingGeneration::new(binding),
        },
    }
}

fn actor(name: &str, bindings: &[u64]) -> MovingActor {
    MovingActor {
        actor: ActorId::new(name).unwrap(),
        object_generation: ObjectGeneration::new(1),
        current_fence: fence(10),
        bindings: bindings.iter().map(|b| seal(*b)).collect(),
    }
}

fn target() -> NodeRid {
    NodeRid::new("target").unwrap()
}

fn location(name: &str) -> ActorLocation {
    ActorLocation {
        actor_id: ActorId::new(name).unwrap(),
        actor_type: "T".into(),
        object_generation: ObjectGeneration::new(1),
        mesh: MeshName::new("m").unwrap(),
        owner_node: target(),
        node_generation: NodeGeneration::new(7),
        authority_owner_generation: AuthorityOwnerGeneration::new(4),
        owner_lease_generation: OwnerLeaseGeneration::new(2),
        state: ActivationState::Ready,
        version: StoreVersion::new(12),
    }
}

fn drain_source(s: &mut SourceHandoff) -> Vec<SourceEffect> {
    std::iter::from_fn(|| s.poll_effect()).collect()
}

fn drain_target(t: &mut TargetHandoff) -> Vec<TargetEffect> {
    std::iter::from_fn(|| t.poll_effect()).collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A source that has taken its fence and sent its 42s for actor `a` with bindings 1 and 2.
fn sealing(t0: Instant) -> SourceHandoff {
    let mut s = SourceHandoff::start(
        RelocationId::new(9),
        Subject::Actor,
        vec![actor("a", &[1, 2])],
        target(),
        RelocationConfig::default(),
        t0,
    );
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::TakeFence {
            actor: ActorId::new("a").unwrap(),
            expected: fence(10)
        }]
    );
    s.handle_fenced(t0, &ActorId::new("a").unwrap(), Ok(fence(11)));
    s
}

/// A source past relay-ready (its runtime sealed, state sent).
fn relay_ready(t0: Instant) -> SourceHandoff {
    let mut s = sealing(t0);
    drain_source(&mut s);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    s.handle_quiesced(t0, Ok(vec![MigratedState::Bytes(vec![1])]));
    drain_source(&mut s);
    s.handle_relay_ready(t0);
    s
}

// spec: SB-8.9 — the source's normal order: fence, 42 to every bound session, runtime seal after
// the 43s, Restore with the relocation fence and the state, capture after relay-ready, cutover,
// then the source's incarnation ends.
#[test]
fn source_runs_the_normal_order() {
    let t0 = Instant::now();
    let mut s = sealing(t0);
    let sends = drain_source(&mut s);
    assert_eq!(sends.len(), 2);
    for (e, b) in sends.iter().zip([1, 2]) {
        let SourceEffect::SendSeal { to, record } = e else {
            panic!("{e:?}")
        };
        assert_eq!(to, &seal(b).session_owner);
        assert_eq!(record.seal, seal(b).seal);
        assert_eq!(record.deadline.as_millis(), 3_000);
    }
    assert_eq!(s.phase(), SourcePhaseName::Sealing);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    assert!(drain_source(&mut s).is_empty(), "waits for every 43");
    s.handle_sealed(t0 + ms(5), &seal(2).seal, SealOutcome::Installed);
    assert_eq!(drain_source(&mut s), vec![SourceEffect::SealRuntime]);
    s.handle_quiesced(t0 + ms(6), Ok(vec![MigratedState::Bytes(vec![7])]));
    let effects = drain_source(&mut s);
    let [SourceEffect::SendRestore { to, request }] = &effects[..] else {
        panic!("{effects:?}")
    };
    assert_eq!(to, &target());
    assert_eq!(
        request.actors[0].source_fence,
        fence(11),
        "the relocation fence"
    );
    assert_eq!(request.actors[0].state, MigratedState::Bytes(vec![7]));
    assert_eq!(request.actors[0].seals, vec![seal(1), seal(2)]);
    s.handle_relay_ready(t0 + ms(7));
    assert_eq!(drain_source(&mut s), vec![SourceEffect::CaptureAndRelay]);
    s.handle_relayed(t0 + ms(8));
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::SendCutover { to: target() }]
    );
    s.handle_target_result(t0 + ms(9), vec![location("a")], vec![]);
    assert_eq!(
        drain_source(&mut s),
        vec![
            SourceEffect::EndIncarnations(vec![location("a")]),
            SourceEffect::Finished(SourceOutcome::Moved(vec![location("a")]))
        ]
    );
    let phases: Vec<SourcePhaseName> = s.phase_durations().iter().map(|(p, _)| *p).collect();
    assert_eq!(
        phases,
        [
            SourcePhaseName::Fencing,
            SourcePhaseName::Sealing,
            SourcePhaseName::Quiescing,
            SourcePhaseName::Restoring,
            SourcePhaseName::Relaying,
            SourcePhaseName::HandedOff
        ]
    );
    assert_eq!(s.phase_durations()[1].1, ms(5));
}

// spec: SB-8.3, SB-8.4 — the coordinator waits for the 43s at most the seal timeout (3 s,
// injected time), then aborts durably and releases every seal with a 44 abort; nothing is sent
// twice.
#[test]
fn seal_timeout_aborts_after_three_seconds() {
    let t0 = Instant::now();
    let mut s = sealing(t0);
    drain_source(&mut s);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    assert_eq!(s.poll_timeout(), Some(t0 + ms(3_000)));
    s.handle_timeout(t0 + ms(2_999));
    assert!(drain_source(&mut s).is_empty());
    s.handle_timeout(t0 + ms(3_000));
    let a = ActorId::new("a").unwrap();
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::RetireFence {
            actor: a.clone(),
            fence: fence(11)
        }]
    );
    s.handle_fence_retired(t0 + ms(3_001), &a, true);
    let effects = drain_source(&mut s);
    assert!(
        !effects.contains(&SourceEffect::UnsealRuntime),
        "never sealed"
    );
    let aborts = effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                SourceEffect::SendRoute {
                    record: SessionRelocationRoute::Abort(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(aborts, 2);
    assert_eq!(
        effects.last(),
        Some(&SourceEffect::Finished(SourceOutcome::Aborted(
            AbortReason::SealTimeout
        )))
    );
    // a late 43 and a second timeout change nothing
    s.handle_sealed(t0 + ms(3_002), &seal(2).seal, SealOutcome::Installed);
    s.handle_timeout(t0 + ms(9_000));
    assert!(drain_source(&mut s).is_empty());
}

// spec: SB-8.1 — a 43 for another seal identity (another relocation, another binding) is not
// this relocation's; a rejected seal aborts.
#[test]
fn foreign_43_is_ignored_and_rejection_aborts() {
    let t0 = Instant::now();
    let mut s = sealing(t0);
    drain_source(&mut s);
    let mut foreign = seal(1).seal;
    foreign.relocation = RelocationId::new(8);
    s.handle_sealed(t0, &foreign, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    assert!(drain_source(&mut s).is_empty(), "seal 1 still awaited");
    s.handle_sealed(
        t0,
        &seal(1).seal,
        SealOutcome::Rejected(ErrorKind::Unavailable),
    );
    assert_eq!(s.phase(), SourcePhaseName::Aborting);
    let effects = drain_source(&mut s);
    assert!(matches!(effects[..], [SourceEffect::RetireFence { .. }]));
    s.handle_fence_retired(t0, &ActorId::new("a").unwrap(), true);
    assert_eq!(
        s.outcome(),
        Some(&SourceOutcome::Aborted(AbortReason::SealRejected))
    );
}

// spec: SB-8.5, SB-14.24 — the target fails before relay-ready is accepted: durable abort first,
// then the source queue is restored (unseal), then the 44 aborts.
#[test]
fn target_failure_before_relay_ready_aborts_durably_then_restores_then_44() {
    let t0 = Instant::now();
    let mut s = sealing(t0);
    drain_source(&mut s);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    s.handle_quiesced(t0, Ok(vec![MigratedState::Stateless]));
    drain_source(&mut s);
    s.handle_target_failed(t0 + ms(1));
    let a = ActorId::new("a").unwrap();
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::RetireFence {
            actor: a.clone(),
            fence: fence(11)
        }],
        "nothing reopens before the abort is durable"
    );
    s.handle_fence_retired(t0 + ms(2), &a, true);
    let effects = drain_source(&mut s);
    assert_eq!(effects[0], SourceEffect::UnsealRuntime);
    assert!(matches!(
        &effects[1],
        SourceEffect::SendRoute { record: SessionRelocationRoute::Abort(r), .. } if r.seal == seal(1).seal
    ));
    assert!(matches!(
        &effects[2],
        SourceEffect::SendRoute { record: SessionRelocationRoute::Abort(r), .. } if r.seal == seal(2).seal
    ));
    assert_eq!(
        effects[3],
        SourceEffect::Finished(SourceOutcome::Aborted(AbortReason::TargetFailed))
    );
}

// spec: SB-8.5 — a target that never answers the Restore is a failed target (restore timeout).
#[test]
fn silent_target_is_aborted_at_the_restore_timeout() {
    let t0 = Instant::now();
    let mut s = sealing(t0);
    drain_source(&mut s);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    s.handle_quiesced(t0, Ok(vec![MigratedState::Stateless]));
    drain_source(&mut s);
    assert_eq!(s.poll_timeout(), Some(t0 + DEFAULT_RESTORE_TIMEOUT));
    s.handle_timeout(t0 + DEFAULT_RESTORE_TIMEOUT - ms(1));
    assert!(drain_source(&mut s).is_empty());
    s.handle_timeout(t0 + DEFAULT_RESTORE_TIMEOUT);
    s.handle_fence_retired(t0, &ActorId::new("a").unwrap(), true);
    let effects = drain_source(&mut s);
    assert!(effects.contains(&SourceEffect::UnsealRuntime));
    assert_eq!(
        s.outcome(),
        Some(&SourceOutcome::Aborted(AbortReason::TargetSilent))
    );
}

// spec: SB-8.6, SB-14.25 — after relay-ready is accepted, a failed target or a failed CAS never
// reopens the source and sends no 44 (the sessions' seal timeout cleans up).
#[test]
fn failures_after_relay_ready_never_reopen_the_source() {
    let t0 = Instant::now();
    let mut s = relay_ready(t0);
    drain_source(&mut s);
    s.handle_target_failed(t0);
    let effects = drain_source(&mut s);
    assert_eq!(
        effects,
        vec![SourceEffect::Finished(SourceOutcome::Failed(
            FailReason::TargetFailedAfterRelayReady
        ))]
    );

    let mut s = relay_ready(t0);
    drain_source(&mut s);
    s.handle_relayed(t0);
    drain_source(&mut s);
    s.handle_target_failed(t0);
    s.handle_target_result(t0, vec![], vec![ActorId::new("a").unwrap()]);
    let effects = drain_source(&mut s);
    assert!(!effects.contains(&SourceEffect::UnsealRuntime));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, SourceEffect::SendRoute { .. }))
    );

    let mut s = relay_ready(t0);
    drain_source(&mut s);
    s.handle_relayed(t0);
    drain_source(&mut s);
    s.handle_target_result(t0, vec![], vec![ActorId::new("a").unwrap()]);
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::Finished(SourceOutcome::Failed(
            FailReason::CasFailed(vec![ActorId::new("a").unwrap()])
        ))]
    );
}

// spec: SB-8.5 — an abort the store did not confirm is not durable: the source stays sealed and
// sends no 44 (a target could still CAS).
#[test]
fn abort_that_is_not_durable_keeps_the_source_sealed() {
    let t0 = Instant::now();
    let mut s = sealing(t0);
    drain_source(&mut s);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    s.handle_quiesced(t0, Ok(vec![MigratedState::Stateless]));
    drain_source(&mut s);
    s.handle_target_failed(t0);
    drain_source(&mut s);
    s.handle_fence_retired(t0, &ActorId::new("a").unwrap(), false);
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::Finished(SourceOutcome::Failed(
            FailReason::AbortNotDurable(AbortReason::TargetFailed)
        ))]
    );
}

// A refused relocation fence (another relocation raced) ends before anything was sealed; a
// dehydration failure restores the source after the durable abort.
#[test]
fn fence_refusal_and_dehydrate_failure_abort() {
    let t0 = Instant::now();
    let mut s = SourceHandoff::start(
        RelocationId::new(1),
        Subject::Actor,
        vec![actor("a", &[1])],
        target(),
        RelocationConfig::default(),
        t0,
    );
    drain_source(&mut s);
    s.handle_fenced(t0, &ActorId::new("a").unwrap(), Err(()));
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::Finished(SourceOutcome::Aborted(
            AbortReason::FenceRefused
        ))]
    );

    let mut s = sealing(t0);
    drain_source(&mut s);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    drain_source(&mut s);
    s.handle_quiesced(t0, Err(()));
    drain_source(&mut s);
    s.handle_fence_retired(t0, &ActorId::new("a").unwrap(), true);
    let effects = drain_source(&mut s);
    assert_eq!(effects[0], SourceEffect::UnsealRuntime);
    assert_eq!(
        s.outcome(),
        Some(&SourceOutcome::Aborted(AbortReason::DehydrateFailed))
    );
}

// A whole Spot: one fence per actor, every binding of every actor sealed; a fence refused after
// another was taken retires the taken one.
#[test]
fn spot_relocation_fences_and_seals_every_actor() {
    let t0 = Instant::now();
    let mut s = SourceHandoff::start(
        RelocationId::new(9),
        Subject::Spot("room".into()),
        vec![actor("a", &[1]), actor("b", &[2]), actor("c", &[])],
        target(),
        RelocationConfig::default(),
        t0,
    );
    assert_eq!(drain_source(&mut s).len(), 3);
    for n in ["a", "b", "c"] {
        s.handle_fenced(t0, &ActorId::new(n).unwrap(), Ok(fence(11)));
    }
    assert_eq!(drain_source(&mut s).len(), 2, "one 42 per binding");
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    assert_eq!(drain_source(&mut s), vec![SourceEffect::SealRuntime]);
    s.handle_quiesced(t0, Ok(vec![MigratedState::Stateless; 2]));
    assert_eq!(s.phase(), SourcePhaseName::Aborting, "one state per actor");

    let mut s = SourceHandoff::start(
        RelocationId::new(9),
        Subject::Spot("room".into()),
        vec![actor("a", &[1]), actor("b", &[2])],
        target(),
        RelocationConfig::default(),
        t0,
    );
    drain_source(&mut s);
    s.handle_fenced(t0, &ActorId::new("a").unwrap(), Ok(fence(11)));
    s.handle_fenced(t0, &ActorId::new("b").unwrap(), Err(()));
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::RetireFence {
            actor: ActorId::new("a").unwrap(),
            fence: fence(11)
        }]
    );
    // nothing was sealed: no 44 abort, no unseal
    s.handle_fence_retired(t0, &ActorId::new("a").unwrap(), true);
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::Finished(SourceOutcome::Aborted(
            AbortReason::FenceRefused
        ))]
    );
}

fn restore_request() -> RestoreRequest {
    RestoreRequest {
        relocation: RelocationId::new(9),
        subject: Subject::Actor,
        actors: vec![RestoredActor {
            actor: ActorId::new("a").unwrap(),
            object_generation: ObjectGeneration::new(1),
            source_fence: fence(11),
            state: MigratedState::Bytes(vec![1]),
            seals: vec![seal(1), seal(2)],
        }],
    }
}

fn source() -> NodeRid {
    NodeRid::new("source").unwrap()
}

// spec: SB-8.9, SB-8.7 — the target installs the queue without dispatching, replies relay-ready,
// CASes with the source's relocation fence at the cutover, opens dispatch, then sends one 44
// commit per sealed session carrying the new location, and reports to the source.
#[test]
fn target_runs_the_normal_order() {
    let t0 = Instant::now();
    let mut t =
        TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::InstallQueues(restore_request())]
    );
    t.handle_installed(t0, Ok(()));
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::ReplyRelayReady { to: source() }]
    );
    t.handle_relayed(3);
    assert!(
        drain_target(&mut t).is_empty(),
        "relay-ready does not dispatch"
    );
    t.handle_cutover(t0 + ms(10));
    let a = ActorId::new("a").unwrap();
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::CasOwner {
            actor: a.clone(),
            expected: fence(11)
        }]
    );
    t.handle_cas(t0 + ms(11), &a, Ok(location("a")));
    let effects = drain_target(&mut t);
    assert_eq!(
        effects[0],
        TargetEffect::OpenDispatch {
            actor: a.clone(),
            location: location("a"),
            behind_source: false
        }
    );
    for (e, b) in effects[1..3].iter().zip([1, 2]) {
        let TargetEffect::SendRoute {
            to,
            record: SessionRelocationRoute::Commit(c),
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!(to, &seal(b).session_owner);
        assert_eq!(c.session, seal(b).seal.session);
        assert_eq!(c.binding_generation, seal(b).seal.binding_generation);
        assert_eq!(c.relocation, RelocationId::new(9));
        assert_eq!(c.object_generation, ObjectGeneration::new(1));
        assert_eq!(c.target.node, target());
        assert_eq!(c.target.authority_owner_generation.get(), 4);
    }
    assert!(matches!(effects[3], TargetEffect::ReportToSource { .. }));
    assert_eq!(
        effects[4],
        TargetEffect::Finished(TargetOutcome::Cas {
            committed: vec![location("a")],
            failed: vec![],
            cause: CutoverCause::Cutover
        })
    );
    assert_eq!(t.relayed(), 3);
}

// spec: SB-8.9 — no cutover within 1,000 ms of relay-ready (injected time): `cutover_timeout`
// Warning, then the CAS (fallback).
#[test]
fn cutover_timeout_falls_back_after_one_second() {
    let t0 = Instant::now();
    let mut t =
        TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
    drain_target(&mut t);
    t.handle_installed(t0 + ms(5), Ok(()));
    drain_target(&mut t);
    assert_eq!(t.poll_timeout(), Some(t0 + ms(1_005)));
    t.handle_timeout(t0 + ms(1_004));
    assert!(drain_target(&mut t).is_empty());
    t.handle_timeout(t0 + ms(1_005));
    let effects = drain_target(&mut t);
    assert_eq!(effects[0], TargetEffect::WarnCutoverTimeout);
    assert!(matches!(effects[1], TargetEffect::CasOwner { .. }));
    t.handle_cas(
        t0 + ms(1_006),
        &ActorId::new("a").unwrap(),
        Ok(location("a")),
    );
    assert!(matches!(
        t.outcome(),
        Some(TargetOutcome::Cas {
            cause: CutoverCause::Timeout,
            ..
        })
    ));
}

/// A target that fell back at `t0 + 1,000 ms` and committed `a`: its effects up to the wait.
fn fallen_back(t0: Instant) -> (TargetHandoff, Vec<TargetEffect>) {
    let mut t =
        TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
    drain_target(&mut t);
    t.handle_installed(t0, Ok(()));
    drain_target(&mut t);
    t.handle_timeout(t0 + ms(1_000));
    drain_target(&mut t);
    t.handle_cas(
        t0 + ms(1_001),
        &ActorId::new("a").unwrap(),
        Ok(location("a")),
    );
    let effects = drain_target(&mut t);
    (t, effects)
}

// spec: SB-8.9, SB-5.3, SB-8.4 — the fallback commits (dispatch, the 44s, the result) but keeps
// the source's relay stream open ahead of regular ingress: the actor opens `behind_source`, and
// the source's late cutover releases the ingress that waited (nothing lost, order kept).
#[test]
fn fallback_keeps_the_source_stream_ahead_until_its_cutover() {
    let t0 = Instant::now();
    let (mut t, effects) = fallen_back(t0);
    let a = ActorId::new("a").unwrap();
    assert_eq!(
        effects[0],
        TargetEffect::OpenDispatch {
            actor: a.clone(),
            location: location("a"),
            behind_source: true
        }
    );
    assert!(matches!(effects[1], TargetEffect::SendRoute { .. }));
    assert!(matches!(effects[3], TargetEffect::ReportToSource { .. }));
    assert_eq!(effects.len(), 4, "no Finished while the stream is open");
    assert_eq!(t.phase(), TargetPhaseName::AwaitingSource);
    assert_eq!(t.poll_timeout(), Some(t0 + ms(1_001) + DEFAULT_SOURCE_WAIT));
    // work the slow source relays now is still in order (ahead of regular ingress)
    t.handle_relayed(2);
    assert_eq!((t.relayed(), t.late_relayed()), (2, 0));
    t.handle_cutover(t0 + ms(1_500));
    assert_eq!(
        drain_target(&mut t),
        vec![
            TargetEffect::ReleaseIngress { actor: a },
            TargetEffect::Finished(t.outcome().cloned().unwrap())
        ]
    );
    assert_eq!(t.source_wait_end(), Some(SourceWaitEnd::Cutover));
    // after the end: appended behind, counted apart; a second cutover is late
    t.handle_relayed(1);
    t.handle_cutover(t0 + ms(1_600));
    assert_eq!((t.late_relayed(), t.late_cutovers()), (1, 1));
}

// spec: SB-8.9 — the wait for the source's relay stream ends when the source is known gone
// (it relays nothing more), or at the bounded source wait with a `source_wait_expired` Warning.
#[test]
fn fallback_wait_ends_with_the_source_or_its_bound() {
    let t0 = Instant::now();
    let a = ActorId::new("a").unwrap();
    let (mut t, _) = fallen_back(t0);
    t.handle_source_lost(t0 + ms(2_000));
    assert_eq!(
        drain_target(&mut t)[0],
        TargetEffect::ReleaseIngress { actor: a.clone() }
    );
    assert_eq!(t.source_wait_end(), Some(SourceWaitEnd::SourceLost));

    let (mut t, _) = fallen_back(t0);
    let end = t0 + ms(1_001) + DEFAULT_SOURCE_WAIT;
    t.handle_timeout(end - ms(1));
    assert!(drain_target(&mut t).is_empty());
    t.handle_timeout(end);
    let effects = drain_target(&mut t);
    assert_eq!(effects[0], TargetEffect::WarnSourceWaitExpired);
    assert_eq!(effects[1], TargetEffect::ReleaseIngress { actor: a });
    assert!(matches!(effects[2], TargetEffect::Finished(_)));
    assert_eq!(t.source_wait_end(), Some(SourceWaitEnd::Expired));
    assert_eq!(t.poll_timeout(), None);
}

// spec: SB-8.9 — a source already known gone when the fallback commits, or whose cutover came
// while the fallback's CAS ran: no wait, regular ingress opens with dispatch.
#[test]
fn fallback_without_a_source_to_wait_for_opens_at_once() {
    let t0 = Instant::now();
    for lost in [true, false] {
        let mut t =
            TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
        drain_target(&mut t);
        t.handle_installed(t0, Ok(()));
        if lost {
            t.handle_source_lost(t0 + ms(500));
        }
        t.handle_timeout(t0 + ms(1_000));
        if !lost {
            t.handle_cutover(t0 + ms(1_000));
        }
        drain_target(&mut t);
        t.handle_cas(
            t0 + ms(1_001),
            &ActorId::new("a").unwrap(),
            Ok(location("a")),
        );
        let effects = drain_target(&mut t);
        assert!(matches!(
            effects[0],
            TargetEffect::OpenDispatch {
                behind_source: false,
                ..
            }
        ));
        assert!(matches!(effects.last(), Some(TargetEffect::Finished(_))));
    }
}

// spec: SB-8.6, SB-14.25 — a failed CAS opens nothing and sends no 44; the queue is discarded.
#[test]
fn failed_cas_opens_nothing_and_sends_no_44() {
    let t0 = Instant::now();
    let mut t =
        TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
    drain_target(&mut t);
    t.handle_installed(t0, Ok(()));
    t.handle_cutover(t0);
    drain_target(&mut t);
    let a = ActorId::new("a").unwrap();
    t.handle_cas(t0, &a, Err(()));
    let effects = drain_target(&mut t);
    assert_eq!(effects[0], TargetEffect::DiscardQueue { actor: a.clone() });
    assert!(!effects.iter().any(|e| matches!(
        e,
        TargetEffect::OpenDispatch { .. } | TargetEffect::SendRoute { .. }
    )));
    assert!(matches!(
        &effects[1],
        TargetEffect::ReportToSource { failed, .. } if failed == &vec![a.clone()]
    ));
    // a duplicate CAS answer changes nothing
    t.handle_cas(t0, &a, Ok(location("a")));
    assert!(drain_target(&mut t).is_empty());
}

/// A target in `Committing` with its CAS of `a` sent (cutover at `t0`).
fn committing(t0: Instant) -> TargetHandoff {
    let mut t =
        TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
    drain_target(&mut t);
    t.handle_installed(t0, Ok(()));
    t.handle_cutover(t0);
    drain_target(&mut t);
    t
}

/// The lease the target's CAS presented (the holder of [`location`]).
fn target_holder() -> crate::store::LeaseHolder {
    location("a").holder()
}

/// The record still as the source's relocation fence left it (owned by the source).
fn unchanged_record() -> ActorLocation {
    let mut l = location("a");
    l.owner_node = source();
    l.node_generation = NodeGeneration::new(3);
    l.owner_lease_generation = OwnerLeaseGeneration::new(1);
    l.authority_owner_generation = fence(11).authority_owner_generation;
    l.version = fence(11).version;
    l
}

// spec: SB-8.6, SB-8.9 — a CAS whose answer was lost is decided by the record read back: the
// record names this node's lease under the moving incarnation, so the CAS was applied: the
// target commits with it (dispatch, 44s, result) as if the answer had come.
#[test]
fn a_lost_cas_answer_is_decided_by_the_record_read_back() {
    let t0 = Instant::now();
    let a = ActorId::new("a").unwrap();
    let mut t = committing(t0);
    t.handle_cas_lost(t0 + ms(5), &a, target_holder());
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::ReadOwner { actor: a.clone() }]
    );
    assert_eq!(t.phase(), TargetPhaseName::Committing);
    // The store cannot be read: asked again after the retry interval, not before.
    t.handle_owner_read(t0 + ms(10), &a, Err(()));
    assert!(drain_target(&mut t).is_empty());
    assert_eq!(t.poll_timeout(), Some(t0 + ms(10) + CAS_READ_BACK_RETRY));
    t.handle_timeout(t0 + ms(11));
    assert!(drain_target(&mut t).is_empty());
    t.handle_timeout(t0 + ms(10) + CAS_READ_BACK_RETRY);
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::ReadOwner { actor: a.clone() }]
    );
    t.handle_owner_read(t0 + ms(300), &a, Ok(Some(location("a"))));
    let effects = drain_target(&mut t);
    assert_eq!(
        effects[0],
        TargetEffect::OpenDispatch {
            actor: a.clone(),
            location: location("a"),
            behind_source: false
        }
    );
    assert_eq!(
        effects
            .iter()
            .filter(|e| matches!(e, TargetEffect::SendRoute { .. }))
            .count(),
        2
    );
    assert!(matches!(
        effects.last(),
        Some(TargetEffect::Finished(TargetOutcome::Cas { committed, failed, .. }))
            if committed == &vec![location("a")] && failed.is_empty()
    ));
}

// spec: SB-8.6 — the record read back still carries the source's relocation fence: the CAS was
// not applied and is sent again; a refusal of that second CAS is read back too (the first may
// have landed in between), and the record decides.
#[test]
fn a_lost_cas_that_was_not_applied_is_sent_again() {
    let t0 = Instant::now();
    let a = ActorId::new("a").unwrap();
    let mut t = committing(t0);
    t.handle_cas_lost(t0, &a, target_holder());
    drain_target(&mut t);
    t.handle_owner_read(t0 + ms(1), &a, Ok(Some(unchanged_record())));
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::CasOwner {
            actor: a.clone(),
            expected: fence(11)
        }]
    );
    // the first CAS landed meanwhile: the second is refused (fence mismatch) → read back
    t.handle_cas(t0 + ms(2), &a, Err(()));
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::ReadOwner { actor: a.clone() }]
    );
    t.handle_owner_read(t0 + ms(3), &a, Ok(Some(location("a"))));
    assert!(matches!(
        drain_target(&mut t).last(),
        Some(TargetEffect::Finished(TargetOutcome::Cas { committed, .. })) if committed.len() == 1
    ));
}

// spec: SB-8.6 — a record that moved on (the fence retired by a durable abort, the actor
// recovered or taken over, no record) fails the actor at once; a store that stays unreadable
// fails it once the read-back's wait is over. Either way nothing opens and no 44 leaves.
#[test]
fn a_lost_cas_fails_when_the_record_moved_on_or_cannot_be_read_in_time() {
    let t0 = Instant::now();
    let a = ActorId::new("a").unwrap();
    let failed_only = |effects: &[TargetEffect]| {
        assert!(!effects.iter().any(|e| matches!(
            e,
            TargetEffect::OpenDispatch { .. } | TargetEffect::SendRoute { .. }
        )));
        assert!(matches!(
            effects.last(),
            Some(TargetEffect::Finished(TargetOutcome::Cas { committed, failed, .. }))
                if committed.is_empty() && failed.len() == 1
        ));
    };
    let mut retired = unchanged_record();
    retired.version = StoreVersion::new(12);
    for record in [Some(retired), None] {
        let mut t = committing(t0);
        t.handle_cas_lost(t0, &a, target_holder());
        drain_target(&mut t);
        t.handle_owner_read(t0 + ms(1), &a, Ok(record));
        failed_only(&drain_target(&mut t));
    }
    // Unreadable until the wait is over: asked again every retry interval, then failed.
    let mut t = committing(t0);
    t.handle_cas_lost(t0, &a, target_holder());
    assert_eq!(
        drain_target(&mut t),
        vec![TargetEffect::ReadOwner { actor: a.clone() }]
    );
    let (mut now, mut reads) = (t0, 1);
    let last = loop {
        t.handle_owner_read(now, &a, Err(()));
        let effects = drain_target(&mut t);
        if !effects.is_empty() {
            break effects;
        }
        now = t.poll_timeout().expect("asked again");
        t.handle_timeout(now);
        let effects = drain_target(&mut t);
        if effects != vec![TargetEffect::ReadOwner { actor: a.clone() }] {
            break effects;
        }
        reads += 1;
    };
    failed_only(&last);
    assert!(now >= t0 + CAS_READ_BACK_WAIT, "failed early");
    assert!(now < t0 + CAS_READ_BACK_WAIT + CAS_READ_BACK_RETRY);
    assert_eq!(reads, 15);
    assert!(t.outcome().is_some());
}

// spec: SB-8.5 — a target that cannot install or rehydrate refuses before relay-ready.
#[test]
fn target_refuses_restore_it_cannot_install() {
    let t0 = Instant::now();
    let mut t =
        TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
    drain_target(&mut t);
    t.handle_installed(t0, Err(RestoreRefusal::RehydrateFailed));
    let effects = drain_target(&mut t);
    assert_eq!(
        effects,
        vec![
            TargetEffect::DiscardQueue {
                actor: ActorId::new("a").unwrap()
            },
            TargetEffect::ReplyRestoreFailed {
                to: source(),
                refusal: RestoreRefusal::RehydrateFailed
            },
            TargetEffect::Finished(TargetOutcome::Refused(RestoreRefusal::RehydrateFailed))
        ]
    );
    assert_eq!(t.poll_timeout(), None);
}

// The two cores wired together (no store: its answers are scripted): the source's Restore is
// the target's input, the target's report the source's.
#[test]
fn source_and_target_together() {
    let t0 = Instant::now();
    let mut s = relay_ready(t0);
    assert_eq!(drain_source(&mut s), vec![SourceEffect::CaptureAndRelay]);
    s.handle_relayed(t0);
    assert_eq!(
        drain_source(&mut s),
        vec![SourceEffect::SendCutover { to: target() }]
    );
    let mut t =
        TargetHandoff::restore(source(), restore_request(), RelocationConfig::default(), t0);
    drain_target(&mut t);
    t.handle_installed(t0, Ok(()));
    t.handle_cutover(t0);
    drain_target(&mut t);
    t.handle_cas(t0, &ActorId::new("a").unwrap(), Ok(location("a")));
    let report = drain_target(&mut t)
        .into_iter()
        .find_map(|e| match e {
            TargetEffect::ReportToSource {
                committed, failed, ..
            } => Some((committed, failed)),
            _ => None,
        })
        .unwrap();
    s.handle_target_result(t0, report.0, report.1);
    assert_eq!(
        s.outcome(),
        Some(&SourceOutcome::Moved(vec![location("a")]))
    );
}

/// A source waiting for relay-ready (the Restore sent).
fn restoring(t0: Instant) -> SourceHandoff {
    let mut s = sealing(t0);
    drain_source(&mut s);
    s.handle_sealed(t0, &seal(1).seal, SealOutcome::Installed);
    s.handle_sealed(t0, &seal(2).seal, SealOutcome::Installed);
    s.handle_quiesced(t0, Ok(vec![MigratedState::Bytes(vec![1])]));
    drain_source(&mut s);
    assert_eq!(s.phase(), SourcePhaseName::Restoring);
    s
}

// spec: SB-8.9, SB-8.4 — the target's result arrives before its relay-ready (the reply is late
// or lost and the target fell back): the commit is relay-ready — the source captures, relays,
// sends its cutover (which ends the target's wait) and only then ends its incarnation; nothing
// it accepted stays behind.
#[test]
fn a_result_before_relay_ready_captures_and_sends_the_cutover_first() {
    let t0 = Instant::now();
    let mut s = restoring(t0);
    s.handle_target_result(t0 + ms(1_100), vec![location("a")], vec![]);
    assert_eq!(drain_source(&mut s), vec![SourceEffect::CaptureAndRelay]);
    assert_eq!(
        s.poll_timeout(),
        None,
        "no restore timeout: relay-ready is implied"
    );
    // the late relay-ready changes nothing
    s.handle_relay_ready(t0 + ms(1_200));
    assert!(drain_source(&mut s).is_empty());
    s.handle_relayed(t0 + ms(1_300));
    assert_eq!(
        drain_source(&mut s),
        vec![
            SourceEffect::SendCutover { to: target() },
            SourceEffect::EndIncarnations(vec![location("a")]),
            SourceEffect::Finished(SourceOutcome::Moved(vec![location("a")])),
        ]
    );
}

// spec: SB-8.5 — a result with nothing committed before relay-ready is a target that failed
// before relay-ready was accepted: durable abort.
#[test]
fn a_failed_result_before_relay_ready_aborts() {
    let t0 = Instant::now();
    let mut s = restoring(t0);
    s.handle_target_result(t0, vec![], vec![ActorId::new("a").unwrap()]);
    assert!(matches!(
        drain_source(&mut s)[0],
        SourceEffect::RetireFence { .. }
    ));
    assert_eq!(s.phase(), SourcePhaseName::Aborting);
}

// spec: SB-8.9 — a result during the capture waits for the cutover, which leaves first.
#[test]
fn a_result_during_the_capture_waits_for_the_cutover() {
    let t0 = Instant::now();
    let mut s = relay_ready(t0);
    assert_eq!(drain_source(&mut s), vec![SourceEffect::CaptureAndRelay]);
    s.handle_target_result(t0, vec![location("a")], vec![]);
    assert!(drain_source(&mut s).is_empty());
    s.handle_relayed(t0);
    let effects = drain_source(&mut s);
    assert_eq!(effects[0], SourceEffect::SendCutover { to: target() });
    assert!(matches!(
        effects.last(),
        Some(SourceEffect::Finished(SourceOutcome::Moved(_)))
    ));
}
