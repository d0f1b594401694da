//! Live relocation, actor-owner side (issue 27): the source and target hand-off cores driven
//! against a real Location Store (memory and SQLite), so the store's relocation fence and owner
//! CAS decide what the cores are told. Sessions are played by the test (42 answered with 43
//! Installed); the runtime seal is proven in `tests/runtime_yield.rs`.
//!
//! Time: the cores get `now` from the test (the 3 s seal, 1 s cutover and restore timeouts on
//! injected time), the store reads a `ManualClock`. Nothing sleeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink::relocation::{
    AbortReason, CutoverCause, FailReason, MigratedState, MovingActor, RelocationConfig,
    SealTarget, SourceEffect, SourceHandoff, SourceOutcome, Subject, TargetEffect, TargetHandoff,
    TargetOutcome,
};
use zlink::store::{
    ActorLocation, LocationStore, ManualClock, MemoryStore, OwnerLease, SqliteOptions, SqliteStore,
    contract,
};
use zlink_wire::{
    BindingGeneration, RelocationId, SealIdentity, SealOutcome, SessionLifecycleGeneration,
    SessionRelocationRoute, SessionRid,
};

fn seal(n: u64) -> SealTarget {
    SealTarget {
        session_owner: contract::node("sessions"),
        seal: SealIdentity {
            relocation: RelocationId::new(1),
            session_lifecycle: SessionLifecycleGeneration::new(1),
            session: SessionRid::new(n),
            binding_generation: BindingGeneration::new(n),
        },
    }
}

/// What the test's session owner received.
#[derive(Default, Debug)]
struct Sessions {
    sealed: Vec<SealIdentity>,
    routes: Vec<SessionRelocationRoute>,
}

/// The two nodes' drivers in one: performs each effect against the store and hands the result
/// to the other core, as the node drivers will over the mesh. `lose_relay_ready` drops the
/// target's relay-ready reply (a target the source hears nothing from).
struct Harness<'a, S: LocationStore> {
    store: &'a S,
    source_lease: OwnerLease,
    target_lease: OwnerLease,
    source: SourceHandoff,
    target: Option<TargetHandoff>,
    sessions: Sessions,
    lose_relay_ready: bool,
    lose_cutover: bool,
    unsealed: bool,
    ended: Vec<ActorLocation>,
}

impl<S: LocationStore> Harness<'_, S> {
    async fn step(&mut self, now: Instant) {
        loop {
            let mut progressed = false;
            while let Some(e) = self.source.poll_effect() {
                progressed = true;
                self.source_effect(now, e).await;
            }
            if let Some(t) = self.target.as_mut() {
                let mut effects = Vec::new();
                while let Some(e) = t.poll_effect() {
                    effects.push(e);
                }
                for e in effects {
                    progressed = true;
                    self.target_effect(now, e).await;
                }
            }
            if !progressed {
                return;
            }
        }
    }

    async fn source_effect(&mut self, now: Instant, e: SourceEffect) {
        match e {
            SourceEffect::TakeFence { actor, expected }
            | SourceEffect::RetireFence {
                actor,
                fence: expected,
            } => {
                let retiring = self.source.phase() == zlink::relocation::SourcePhaseName::Aborting;
                let owner = self
                    .store
                    .lookup(actor.clone())
                    .await
                    .unwrap()
                    .unwrap()
                    .owner_fence();
                let r = self
                    .store
                    .relocation_fence(actor.clone(), expected, owner)
                    .await;
                if retiring {
                    self.source.handle_fence_retired(now, &actor, r.is_ok());
                } else {
                    self.source
                        .handle_fenced(now, &actor, r.map(|l| l.fence()).map_err(|_| ()));
                }
            }
            SourceEffect::SendSeal { record, .. } => {
                self.sessions.sealed.push(record.seal.clone());
                self.source
                    .handle_sealed(now, &record.seal, SealOutcome::Installed);
            }
            SourceEffect::SealRuntime => {
                self.source
                    .handle_quiesced(now, Ok(vec![MigratedState::Bytes(vec![0x07])]));
            }
            SourceEffect::SendRestore { request, .. } => {
                self.target = Some(TargetHandoff::restore(
                    contract::node("node-a"),
                    request,
                    RelocationConfig::default(),
                    now,
                ));
            }
            SourceEffect::CaptureAndRelay => {
                if let Some(t) = self.target.as_mut() {
                    t.handle_relayed(2);
                }
                self.source.handle_relayed(now);
            }
            SourceEffect::SendCutover { .. } => {
                if let Some(t) = self.target.as_mut().filter(|_| !self.lose_cutover) {
                    t.handle_cutover(now);
                }
            }
            SourceEffect::UnsealRuntime => self.unsealed = true,
            SourceEffect::SendRoute { record, .. } => self.sessions.routes.push(record),
            SourceEffect::EndIncarnations(l) => self.ended = l,
            SourceEffect::Finished(_) => {}
        }
    }

    async fn target_effect(&mut self, now: Instant, e: TargetEffect) {
        let t = self.target.as_mut().unwrap();
        match e {
            TargetEffect::InstallQueues(_) => t.handle_installed(now, Ok(())),
            TargetEffect::ReplyRelayReady { .. } => {
                if !self.lose_relay_ready {
                    self.source.handle_relay_ready(now);
                }
            }
            TargetEffect::CasOwner { actor, expected } => {
                let r = self
                    .store
                    .cas_owner(actor.clone(), expected, contract::owner(&self.target_lease))
                    .await
                    .map_err(|_| ());
                t.handle_cas(now, &actor, r);
            }
            TargetEffect::SendRoute { record, .. } => self.sessions.routes.push(record),
            TargetEffect::ReportToSource {
                committed, failed, ..
            } => self.source.handle_target_result(now, committed, failed),
            TargetEffect::OpenDispatch { .. }
            | TargetEffect::DiscardQueue { .. }
            | TargetEffect::WarnCutoverTimeout
            | TargetEffect::ReplyRestoreFailed { .. }
            | TargetEffect::Finished(_) => {}
        }
    }
}

async fn harness<S: LocationStore>(store: &S, t0: Instant) -> Harness<'_, S> {
    let a = contract::register(store, "node-a", 1).await;
    let b = contract::register(store, "node-b", 1).await;
    let ready = contract::create_ready(store, "room-1", "room", &a).await;
    let source = SourceHandoff::start(
        RelocationId::new(1),
        Subject::Actor,
        vec![MovingActor {
            actor: ready.actor_id.clone(),
            object_generation: ready.object_generation,
            current_fence: ready.fence(),
            bindings: vec![seal(1), seal(2)],
        }],
        b.holder.node.clone(),
        RelocationConfig::default(),
        t0,
    );
    Harness {
        store,
        source_lease: a,
        target_lease: b,
        source,
        target: None,
        sessions: Sessions::default(),
        lose_relay_ready: false,
        lose_cutover: false,
        unsealed: false,
        ended: Vec::new(),
    }
}

fn commits(s: &Sessions) -> usize {
    s.routes
        .iter()
        .filter(|r| matches!(r, SessionRelocationRoute::Commit(_)))
        .count()
}

fn aborts(s: &Sessions) -> usize {
    s.routes
        .iter()
        .filter(|r| matches!(r, SessionRelocationRoute::Abort(_)))
        .count()
}

// spec: SB-8.9, SB-8.7, SB-1.3, SB-14.20 — the normal order end to end against the store: the
// target's CAS with the source's relocation fence moves the owner, the ObjectGeneration is
// kept, one 44 commit per sealed session carries the store's new location, the source's
// incarnation ends.
async fn normal_relocation_moves_the_owner<S: LocationStore>(store: &S) {
    let t0 = Instant::now();
    let mut h = harness(store, t0).await;
    h.step(t0).await;
    let record = store
        .lookup(contract::actor("room-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.owner_node, h.target_lease.holder.node);
    assert_eq!(record.object_generation.get(), 1, "SB-1.3");
    assert_eq!(h.sessions.sealed.len(), 2);
    assert_eq!(commits(&h.sessions), 2);
    for r in &h.sessions.routes {
        let SessionRelocationRoute::Commit(c) = r else {
            unreachable!()
        };
        assert_eq!(c.target.node, record.owner_node);
        assert_eq!(
            c.target.authority_owner_generation,
            record.authority_owner_generation
        );
        assert_eq!(c.object_generation, record.object_generation);
    }
    assert_eq!(
        h.source.outcome(),
        Some(&SourceOutcome::Moved(vec![record.clone()]))
    );
    assert_eq!(h.ended, vec![record]);
    assert!(!h.unsealed);
    assert!(matches!(
        h.target.as_ref().unwrap().outcome(),
        Some(TargetOutcome::Cas {
            cause: CutoverCause::Cutover,
            ..
        })
    ));
    assert_eq!(h.target.as_ref().unwrap().relayed(), 2);
}

// spec: SB-8.5, SB-14.24 — the source hears no relay-ready: at the restore timeout it aborts
// durably, reopens (unseal) and releases every seal (44 abort). The target, which did install,
// falls back at its cutover timeout and CASes with the source's fence: the store refuses it,
// so the target opens nothing and sends no 44 commit; the source stays the owner.
async fn durable_abort_defeats_a_late_target_cas<S: LocationStore>(store: &S) {
    let t0 = Instant::now();
    let mut h = harness(store, t0).await;
    h.lose_relay_ready = true;
    h.step(t0).await;
    assert!(h.target.is_some(), "the target installed");
    let restore_deadline = h.source.poll_timeout().unwrap();
    h.source.handle_timeout(restore_deadline);
    h.step(restore_deadline).await;
    assert_eq!(
        h.source.outcome(),
        Some(&SourceOutcome::Aborted(AbortReason::TargetSilent))
    );
    assert!(h.unsealed);
    assert_eq!(aborts(&h.sessions), 2);
    // the target's fallback, after the durable abort
    let t = h.target.as_mut().unwrap();
    let cutover_deadline = t.poll_timeout().unwrap();
    t.handle_timeout(cutover_deadline);
    h.step(cutover_deadline).await;
    let record = store
        .lookup(contract::actor("room-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.owner_node, h.source_lease.holder.node,
        "the source stays owner"
    );
    assert_eq!(commits(&h.sessions), 0, "no 44 commit after a refused CAS");
    assert!(matches!(
        h.target.as_ref().unwrap().outcome(),
        Some(TargetOutcome::Cas { committed, cause: CutoverCause::Timeout, .. }) if committed.is_empty()
    ));
}

// spec: SB-8.6, SB-14.25 — the target's CAS fails after relay-ready was accepted (its lease
// ended): the source never reopens and no 44 is sent by anyone; the seal timeout of the
// sessions owns the clean-up.
async fn failed_cas_after_relay_ready_never_reopens<S: LocationStore>(
    store: &S,
    clock: &ManualClock,
) {
    let t0 = Instant::now();
    let mut h = harness(store, t0).await;
    // the target's lease lapses while the source's is renewed
    clock.advance(contract::TTL / 2);
    store
        .renew_owner(h.source_lease.holder.clone(), contract::TTL)
        .await
        .unwrap();
    clock.advance(contract::TTL / 2 + Duration::from_millis(1));
    h.step(t0).await;
    assert!(matches!(
        h.source.outcome(),
        Some(SourceOutcome::Failed(FailReason::CasFailed(_)))
    ));
    assert!(!h.unsealed, "SB-8.6: the source route never reopens");
    assert!(h.sessions.routes.is_empty(), "no 44 at all");
    let record = store
        .lookup(contract::actor("room-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.owner_node, h.source_lease.holder.node);
}

fn memory(clock: &ManualClock) -> MemoryStore {
    MemoryStore::with_clock(Arc::new(clock.clone()))
}

fn sqlite(dir: &tempfile::TempDir, clock: &ManualClock) -> SqliteStore {
    SqliteStore::open_with(
        dir.path().join("store.db"),
        SqliteOptions::default(),
        Arc::new(clock.clone()),
    )
    .unwrap()
}

#[tokio::test]
async fn normal_relocation_moves_the_owner_memory() {
    let clock = ManualClock::at_wall(contract::START);
    normal_relocation_moves_the_owner(&memory(&clock)).await;
}

#[tokio::test]
async fn normal_relocation_moves_the_owner_sqlite() {
    let (dir, clock) = (
        tempfile::tempdir().unwrap(),
        ManualClock::at_wall(contract::START),
    );
    normal_relocation_moves_the_owner(&sqlite(&dir, &clock)).await;
}

#[tokio::test]
async fn durable_abort_defeats_a_late_target_cas_memory() {
    let clock = ManualClock::at_wall(contract::START);
    durable_abort_defeats_a_late_target_cas(&memory(&clock)).await;
}

#[tokio::test]
async fn durable_abort_defeats_a_late_target_cas_sqlite() {
    let (dir, clock) = (
        tempfile::tempdir().unwrap(),
        ManualClock::at_wall(contract::START),
    );
    durable_abort_defeats_a_late_target_cas(&sqlite(&dir, &clock)).await;
}

#[tokio::test]
async fn failed_cas_after_relay_ready_never_reopens_memory() {
    let clock = ManualClock::at_wall(contract::START);
    failed_cas_after_relay_ready_never_reopens(&memory(&clock), &clock).await;
}

#[tokio::test]
async fn failed_cas_after_relay_ready_never_reopens_sqlite() {
    let (dir, clock) = (
        tempfile::tempdir().unwrap(),
        ManualClock::at_wall(contract::START),
    );
    failed_cas_after_relay_ready_never_reopens(&sqlite(&dir, &clock), &clock).await;
}

/// A small deterministic generator (xorshift64*), so each seed replays exactly.
struct Rng(u64);

impl Rng {
    fn chance(&mut self, percent: u64) -> bool {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % 100 < percent
    }
}

// spec: SB-8.5, SB-8.6, SB-8.4 — 300 seeded runs with lost relay-ready replies, lost cutovers,
// dead target leases and the two timeouts in either order: the source reopening and the target
// committing never both happen; the store names whoever serves; each seal gets at most one 44,
// a commit only with the target as owner, an abort only with the source as owner.
#[tokio::test]
async fn seeded_faults_never_let_both_sides_serve() {
    for seed in 1..=300u64 {
        let clock = ManualClock::at_wall(contract::START);
        let store = memory(&clock);
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let t0 = Instant::now();
        let mut h = harness(&store, t0).await;
        h.lose_relay_ready = rng.chance(40);
        h.lose_cutover = rng.chance(40);
        if rng.chance(20) {
            // the target's lease lapses, the source's is renewed
            clock.advance(contract::TTL / 2);
            store
                .renew_owner(h.source_lease.holder.clone(), contract::TTL)
                .await
                .unwrap();
            clock.advance(contract::TTL / 2 + Duration::from_millis(1));
        }
        h.step(t0).await;
        let source_first = rng.chance(50);
        for round in 0..2 {
            if (round == 0) == source_first {
                if let Some(d) = h.source.poll_timeout() {
                    h.source.handle_timeout(d);
                    h.step(d).await;
                }
            } else if let Some(d) = h.target.as_ref().and_then(|t| t.poll_timeout()) {
                h.target.as_mut().unwrap().handle_timeout(d);
                h.step(d).await;
            }
        }
        let record = store
            .lookup(contract::actor("room-1"))
            .await
            .unwrap()
            .unwrap();
        let committed = matches!(
            h.target.as_ref().and_then(|t| t.outcome()),
            Some(TargetOutcome::Cas { committed, .. }) if !committed.is_empty()
        );
        assert!(!(h.unsealed && committed), "seed {seed}: both sides serve");
        if committed {
            assert_eq!(record.owner_node, h.target_lease.holder.node, "seed {seed}");
            assert_eq!(commits(&h.sessions), 2, "seed {seed}");
            assert_eq!(aborts(&h.sessions), 0, "seed {seed}");
        } else {
            assert_eq!(record.owner_node, h.source_lease.holder.node, "seed {seed}");
            assert_eq!(commits(&h.sessions), 0, "seed {seed}");
        }
        if h.unsealed {
            assert_eq!(aborts(&h.sessions), 2, "seed {seed}");
        } else {
            assert_eq!(
                aborts(&h.sessions),
                0,
                "seed {seed}: an abort without reopening"
            );
        }
        assert!(h.source.outcome().is_some(), "seed {seed}: the source ends");
    }
}
