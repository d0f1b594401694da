//! Live relocation, actor-owner side (issue 27): the source and target hand-off cores driven
//! against a real Location Store (memory and SQLite), so the store's relocation fence and owner
//! CAS decide what the cores are told. Sessions are played by the test (42 answered with 43
//! Installed); the runtime seal is proven in `tests/runtime_yield.rs`.
//!
//! Time: the cores get `now` from the test (the 3 s seal, 1 s cutover and restore timeouts on
//! injected time), the store reads a `ManualClock`. Nothing sleeps.

mod node_common;

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
    /// The target's result never reaches the source (lost with its connection).
    lose_result: bool,
    /// The store cannot be read when the source asks for its records.
    store_unreadable: bool,
    /// The target's next CAS is applied but its answer is lost (`handle_cas_lost`).
    lose_cas_answer: bool,
    /// The target's record reads after a lost CAS answer so far.
    read_back: usize,
    /// The source's `QueryOwners` effects so far.
    queried: usize,
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
            SourceEffect::QueryOwners { actors } => {
                self.queried += 1;
                let records = if self.store_unreadable {
                    Err(())
                } else {
                    let mut records = Vec::new();
                    for id in actors {
                        let l = self.store.lookup(id.clone()).await.unwrap();
                        records.push((id, l));
                    }
                    Ok(records)
                };
                self.source.handle_owners(now, records);
            }
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
                if std::mem::take(&mut self.lose_cas_answer) {
                    t.handle_cas_lost(now, &actor, self.target_lease.holder.clone());
                } else {
                    t.handle_cas(now, &actor, r);
                }
            }
            TargetEffect::ReadOwner { actor } => {
                self.read_back += 1;
                let r = self.store.lookup(actor.clone()).await.map_err(|_| ());
                t.handle_owner_read(now, &actor, r);
            }
            TargetEffect::SendRoute { record, .. } => self.sessions.routes.push(record),
            TargetEffect::ReportToSource {
                committed, failed, ..
            } => {
                if !self.lose_result {
                    self.source.handle_target_result(now, committed, failed);
                }
            }
            TargetEffect::OpenDispatch { .. }
            | TargetEffect::DiscardQueue { .. }
            | TargetEffect::WarnCutoverTimeout
            | TargetEffect::WarnSourceWaitExpired
            | TargetEffect::ReleaseIngress { .. }
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
        lose_result: false,
        store_unreadable: false,
        lose_cas_answer: false,
        read_back: 0,
        queried: 0,
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

// spec: SB-8.6, SB-8.4 — the target's result is lost after its CAS won (a short partition broke
// the connection it travelled on): the source does not wait forever. Exactly at the result
// timeout after the cutover it reads the store, which names the target: moved, the source's
// incarnation ends. A store that cannot be read is asked again a second later.
async fn a_lost_result_is_decided_by_the_store<S: LocationStore>(store: &S) {
    let t0 = Instant::now();
    let mut h = harness(store, t0).await;
    h.lose_result = true;
    h.store_unreadable = true;
    h.step(t0).await;
    assert!(matches!(
        h.target.as_ref().unwrap().outcome(),
        Some(TargetOutcome::Cas { committed, .. }) if committed.len() == 1
    ));
    assert_eq!(h.source.outcome(), None, "still waiting for the result");
    let due = t0 + RelocationConfig::default().result_timeout;
    assert_eq!(h.source.poll_timeout(), Some(due));
    h.source.handle_timeout(due - Duration::from_millis(1));
    h.step(due - Duration::from_millis(1)).await;
    assert_eq!(h.queried, 0, "not before the result timeout");
    h.source.handle_timeout(due);
    h.step(due).await;
    assert_eq!(h.queried, 1);
    assert_eq!(h.source.outcome(), None, "the store could not be read");
    let again = due + zlink::relocation::RESULT_QUERY_RETRY;
    assert_eq!(h.source.poll_timeout(), Some(again));
    h.store_unreadable = false;
    h.source.handle_timeout(again);
    h.step(again).await;
    assert_eq!(h.queried, 2);
    let record = store
        .lookup(contract::actor("room-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.owner_node, h.target_lease.holder.node);
    assert_eq!(
        h.source.outcome(),
        Some(&SourceOutcome::Moved(vec![record.clone()]))
    );
    assert_eq!(h.ended, vec![record]);
    assert!(!h.unsealed);
    assert_eq!(h.source.poll_timeout(), None);
}

// spec: SB-8.6, SB-4.1 — the cutover is lost and the target never falls back (it is gone): at
// the result timeout the store still names the source, so the relocation failed and never
// reopens. The source's recovery replaces the record with a new incarnation, so the target's
// CAS with the relocation fence, should it come after all, is refused.
async fn a_silent_target_after_the_cutover_fails_at_the_result_timeout<S: LocationStore>(
    store: &S,
) {
    let t0 = Instant::now();
    let mut h = harness(store, t0).await;
    h.lose_cutover = true;
    h.step(t0).await;
    assert_eq!(h.source.outcome(), None);
    let due = h.source.poll_timeout().expect("the result wait is bounded");
    assert_eq!(due, t0 + RelocationConfig::default().result_timeout);
    h.source.handle_timeout(due);
    h.step(due).await;
    assert_eq!(
        h.source.outcome(),
        Some(&SourceOutcome::Failed(
            FailReason::TargetFailedAfterRelayReady
        ))
    );
    assert!(!h.unsealed, "SB-8.6: the source route never reopens");
    assert!(h.ended.is_empty());
    let fenced = store
        .lookup(contract::actor("room-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fenced.owner_node, h.source_lease.holder.node);
    let recovered = store
        .reincarnate(contract::actor("room-1"), fenced.owner_fence())
        .await
        .unwrap();
    assert!(recovered.object_generation > fenced.object_generation);
    let late = store
        .cas_owner(
            contract::actor("room-1"),
            fenced.fence(),
            contract::owner(&h.target_lease),
        )
        .await;
    assert!(late.is_err(), "the target's late CAS: {late:?}");
}

#[tokio::test]
async fn a_lost_result_is_decided_by_the_store_memory() {
    let clock = ManualClock::at_wall(contract::START);
    a_lost_result_is_decided_by_the_store(&memory(&clock)).await;
}

#[tokio::test]
async fn a_lost_result_is_decided_by_the_store_sqlite() {
    let (dir, clock) = (
        tempfile::tempdir().unwrap(),
        ManualClock::at_wall(contract::START),
    );
    a_lost_result_is_decided_by_the_store(&sqlite(&dir, &clock)).await;
}

// spec: SB-8.6, SB-8.9 — the target's CAS is applied but its answer is lost: the target reads
// the record back, finds its own lease under the moving incarnation, and commits (dispatch,
// the 44 commits, its result); the source ends its incarnation on that result (the other
// decisions of the read-back: `src/relocation/tests.rs`). Seen failing (the relocation failed,
// no 44 commit) with the lost answer taken as a refusal.
async fn a_lost_cas_answer_is_decided_by_the_record<S: LocationStore>(store: &S) {
    let t0 = Instant::now();
    let mut h = harness(store, t0).await;
    h.lose_cas_answer = true;
    h.step(t0).await;
    let record = store
        .lookup(contract::actor("room-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.owner_node, h.target_lease.holder.node);
    assert!(matches!(
        h.target.as_ref().unwrap().outcome(),
        Some(TargetOutcome::Cas { committed, failed, .. })
            if committed == &vec![record.clone()] && failed.is_empty()
    ));
    assert_eq!(commits(&h.sessions), 2);
    assert_eq!(
        h.source.outcome(),
        Some(&SourceOutcome::Moved(vec![record.clone()]))
    );
    assert_eq!(h.ended, vec![record]);
    assert_eq!(h.read_back, 1);
}

#[tokio::test]
async fn a_lost_cas_answer_is_decided_by_the_record_memory() {
    let clock = ManualClock::at_wall(contract::START);
    a_lost_cas_answer_is_decided_by_the_record(&memory(&clock)).await;
}

#[tokio::test]
async fn a_lost_cas_answer_is_decided_by_the_record_sqlite() {
    let clock = ManualClock::at_wall(contract::START);
    let dir = tempfile::tempdir().unwrap();
    a_lost_cas_answer_is_decided_by_the_record(&sqlite(&dir, &clock)).await;
}

#[tokio::test]
async fn a_silent_target_after_the_cutover_fails_at_the_result_timeout_memory() {
    let clock = ManualClock::at_wall(contract::START);
    a_silent_target_after_the_cutover_fails_at_the_result_timeout(&memory(&clock)).await;
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

// ---------------------------------------------------------------------------------------------
// The drivers between two real in-process nodes (`Node::relocate`): the hand-off records on the
// mesh, the actor's state and its queued work travel, the store names the target.

mod live {
    use super::node_common::{TIMEOUT, start_node, wait_pair_up};
    use serde::{Deserialize, Serialize};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::sync::watch;
    use zlink::actor::{
        ActorId, ActorRegistry, ActorTypeBuilder, Create, DispatchKey, Handled, HandlerError,
        Message,
    };
    use zlink::node::{Node, RelocateError};
    use zlink::relocation::AbortReason;
    use zlink::store::LocationStore;
    use zlink_mesh::{TapDirection, WireTap};
    use zlink_wire::Record;

    /// The counter's state: every sequence number it processed, in order.
    #[derive(Default, Serialize, Deserialize)]
    pub struct Seen {
        pub seqs: Vec<u64>,
    }

    #[derive(Serialize, Deserialize)]
    pub struct Add(pub u64);
    impl Message for Add {
        const KEY: DispatchKey = DispatchKey::new(1);
        type Reply = u64;
    }

    #[derive(Serialize, Deserialize)]
    pub struct GetSeen;
    impl Message for GetSeen {
        const KEY: DispatchKey = DispatchKey::new(2);
        type Reply = Vec<u64>;
    }

    /// Keeps the turn until the gate opens (so work queues behind it).
    #[derive(Serialize, Deserialize)]
    pub struct Hold;
    impl Message for Hold {
        const KEY: DispatchKey = DispatchKey::new(3);
        type Reply = ();
    }

    /// Registry with the migratable `counter` (and the plain `sticky`, which did not opt in).
    pub fn registry(
        gate: watch::Receiver<bool>,
        rehydrated: Arc<AtomicU64>,
        fail_rehydrate: Arc<std::sync::atomic::AtomicBool>,
    ) -> ActorRegistry {
        let counter = ActorTypeBuilder::new("counter", |_info, _init| Ok(Seen::default()))
            .handle(|s: &mut Seen, _ctx, Add(n)| {
                s.seqs.push(n);
                Handled::ok(s.seqs.len() as u64)
            })
            .handle(|s: &mut Seen, _ctx, GetSeen| Handled::ok(s.seqs.clone()))
            .handle(move |_s: &mut Seen, _ctx, Hold| {
                let mut gate = gate.clone();
                Handled::later(async move {
                    while !*gate.borrow_and_update() {
                        if gate.changed().await.is_err() {
                            break;
                        }
                    }
                    Ok(())
                })
            })
            .migrate(
                |s: &Seen| Ok::<_, HandlerError>(s.seqs.clone()),
                move |_info, seqs: Vec<u64>| {
                    if fail_rehydrate.load(Ordering::SeqCst) {
                        return Err(HandlerError::Failed("rehydrate refused by the test".into()));
                    }
                    rehydrated.fetch_add(1, Ordering::SeqCst);
                    Ok(Seen { seqs })
                },
            )
            .build()
            .unwrap();
        let sticky = ActorTypeBuilder::new("sticky", |_info, _init| Ok(()))
            .handle(|_s: &mut (), _ctx, Add(n)| Handled::ok(n))
            .build()
            .unwrap();
        let mut r = ActorRegistry::new();
        r.register(counter).unwrap();
        r.register(sticky).unwrap();
        r
    }

    pub struct Pair {
        pub a: Node,
        pub b: Node,
        pub tap_a: WireTap,
        pub gate: watch::Sender<bool>,
        pub rehydrated: Arc<AtomicU64>,
        pub fail_rehydrate: Arc<std::sync::atomic::AtomicBool>,
    }

    pub async fn pair(store: Arc<dyn LocationStore>) -> Pair {
        pair_with(store.clone(), store).await
    }

    /// `a` and `b` with their own handles on one store (`store_b` may wrap it).
    pub async fn pair_with(store: Arc<dyn LocationStore>, store_b: Arc<dyn LocationStore>) -> Pair {
        pair_lanes(store, store_b, None).await
    }

    /// A node as [`start_node`] starts it, with its actor lanes holding at most `lane_items`
    /// queued application records when given.
    async fn start_live(
        name: &str,
        store: Arc<dyn LocationStore>,
        peers: Vec<zlink_mesh::PeerAddress>,
        tap: Option<WireTap>,
        registry: ActorRegistry,
        lane_items: Option<usize>,
    ) -> Node {
        let Some(items) = lane_items else {
            return start_node(name, store, peers, tap, Some(registry)).await;
        };
        let mut mc = super::node_common::mesh_config(name);
        mc.tap = tap;
        let mut options = zlink::node::NodeOptions::new(mc, store, registry)
            .with_client_access(zlink::node::access::ClientAccess::open());
        options.peers = peers;
        options.lanes.application_items = items;
        Node::start(options).await.unwrap()
    }

    /// [`pair_with`] with lanes of `lane_items` queued records on both nodes.
    pub async fn pair_lanes(
        store: Arc<dyn LocationStore>,
        store_b: Arc<dyn LocationStore>,
        lane_items: Option<usize>,
    ) -> Pair {
        let (gate, rx) = watch::channel(false);
        let rehydrated = Arc::new(AtomicU64::new(0));
        let fail_rehydrate = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let b = start_live(
            "b",
            store_b,
            vec![],
            None,
            registry(rx.clone(), rehydrated.clone(), fail_rehydrate.clone()),
            lane_items,
        )
        .await;
        let tap_a = WireTap::new(100_000);
        let a = start_live(
            "a",
            store,
            vec![b.address()],
            Some(tap_a.clone()),
            registry(rx, rehydrated.clone(), fail_rehydrate.clone()),
            lane_items,
        )
        .await;
        wait_pair_up(&a, &b).await;
        Pair {
            a,
            b,
            tap_a,
            gate,
            rehydrated,
            fail_rehydrate,
        }
    }

    /// The relocation hand-off keys `a` sent as 144 Requests, in order.
    pub fn handoff_keys(tap: &WireTap) -> Vec<u32> {
        tap.frames()
            .into_iter()
            .filter(|f| f.direction == TapDirection::Sent)
            .filter_map(|f| match f.decoded {
                Ok(d) => match d.record {
                    Record::Request(r) if r.key.get() >= 0xFFFF_FF03 => Some(r.key.get()),
                    _ => None,
                },
                Err(_) => None,
            })
            .collect()
    }

    pub fn aid(s: &str) -> ActorId {
        ActorId::new(s).unwrap()
    }

    pub async fn counter_on(node: &Node, id: &str) -> zlink::actor::ActorRef {
        node.create(Create::new("counter", aid(id))).await.unwrap()
    }

    pub const RESTORE: u32 = 0xFFFF_FF03;
    pub const WORK: u32 = 0xFFFF_FF04;
    pub const CUTOVER: u32 = 0xFFFF_FF05;

    pub use zlink::node::RelocateError as Error;
    pub use zlink::relocation::{AbortReason as Abort, FailReason as Fail};

    /// Holds the actor's turn, queues `n` sends (sequence numbers from `from`) behind it, starts
    /// the relocation to `b` and releases the turn once the relocation's seal-and-dehydrate
    /// record is queued behind it: the sends are the actor's queued work at capture.
    pub async fn relocate_busy(
        p: &Pair,
        actor: &zlink::actor::ActorRef,
        from: u64,
        n: u64,
    ) -> Result<zlink::node::RelocationReport, RelocateError> {
        let _ = p.gate.send(false);
        let turns = p.a.counters().turns;
        let hold = {
            let (a, actor) = (p.a.clone(), actor.clone());
            tokio::spawn(async move { a.request(&actor, &Hold, TIMEOUT).await })
        };
        super::node_common::wait_until("hold running", || p.a.counters().turns > turns).await;
        for i in from..from + n {
            p.a.send(actor, &Add(i)).await.unwrap();
        }
        let relocating = {
            let (a, actor) = (p.a.clone(), actor.clone());
            tokio::spawn(async move { a.relocate(&actor, super::node_common::rid("b")).await })
        };
        super::node_common::wait_until("quiescing", || {
            p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
        })
        .await;
        p.gate.send(true).unwrap();
        hold.await.unwrap().unwrap();
        tokio::time::timeout(TIMEOUT, relocating)
            .await
            .unwrap()
            .unwrap()
    }

    pub fn _unused(_: AbortReason) {}

    pub const fn timeout() -> std::time::Duration {
        TIMEOUT
    }
}

// spec: SB-8.9, SB-8.4, SB-14.21, SB-1.3
// An actor busy in a turn, with requests (local and from another node) and sends queued behind
// it, moves from `a` to `b`: the state travels, the queued work is captured and relayed in
// arrival order as hand-off records on the wire, every request is answered exactly once with its
// own reply, ActorId and ObjectGeneration are kept, the store names `b`, and `a` holds nothing
// for the relocation afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relocate_moves_the_state_and_the_queued_work_in_order() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    let actor = counter_on(&p.a, "c1").await;
    for i in 0..3 {
        assert_eq!(p.a.request(&actor, &Add(i), T).await.unwrap(), i + 1);
    }
    // The actor keeps its turn; work queues behind it.
    let hold = {
        let (a, actor) = (p.a.clone(), actor.clone());
        tokio::spawn(async move { a.request(&actor, &Hold, T).await })
    };
    node_common::wait_until("hold running", || p.a.counters().turns >= 4).await;
    let mut replies = Vec::new();
    for i in 3..8 {
        // requests from the owner itself and from the other node, alternating
        let (via, actor) = if i % 2 == 0 {
            (p.a.clone(), actor.clone())
        } else {
            (p.b.clone(), actor.clone())
        };
        replies.push((
            i,
            tokio::spawn(async move { via.request(&actor, &Add(i), T).await }),
        ));
    }
    for i in 8..10 {
        p.a.send(&actor, &Add(i)).await.unwrap();
    }
    node_common::wait_until("work queued", || p.b.counters().calls_out >= 3).await;
    let relocating = {
        let (a, actor) = (p.a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, node_common::rid("b")).await })
    };
    // The seal-and-dehydrate record waits behind the held turn; then the turn ends.
    node_common::wait_until("quiescing", || {
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    p.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    let report = tokio::time::timeout(timeout(), relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // Same identity, new owner (SB-1.3); the store agrees.
    assert_eq!(report.actor.id(), actor.id());
    assert_eq!(report.actor.object_generation(), actor.object_generation());
    assert_eq!(report.actor.node(), &node_common::rid("b"));
    let loc = store.lookup(actor.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, node_common::rid("b"));
    assert_eq!(loc.object_generation, actor.object_generation());
    assert_eq!(p.rehydrated.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The state arrived and the queued work ran on `b` once each (no loss, no double), in
    // arrival order (the two sends, sent one after the other, kept theirs).
    let seen = p.b.request(&report.actor, &GetSeen, T).await.unwrap();
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..10).collect::<Vec<u64>>(), "{seen:?}");
    assert_eq!(&seen[..3], &[0, 1, 2]);
    let pos = |v: u64| seen.iter().position(|s| *s == v).unwrap();
    assert!(pos(8) < pos(9), "{seen:?}");
    // Every request answered once, with its own reply: the position it was processed at.
    for (i, r) in replies {
        let n = r.await.unwrap().unwrap();
        assert_eq!(
            seen[n as usize - 1],
            i,
            "request {i} answered with another's reply"
        );
    }
    // The hand-off records on the real ROUTER path: Restore, the captured records, cutover.
    let keys = handoff_keys(&p.tap_a);
    assert_eq!(keys.first(), Some(&RESTORE), "{keys:x?}");
    assert_eq!(keys.iter().filter(|k| **k == WORK).count(), 7, "{keys:x?}");
    assert_eq!(report.relayed, 7);
    assert_eq!(keys.last(), Some(&CUTOVER), "{keys:x?}");
    // `a` no longer serves it: the old ref is forwarded once to `b` (Message Follow,
    // `tests/relocation_follow.rs`); nothing of the relocation stays on either node.
    assert_eq!(p.a.request(&actor, &GetSeen, T).await.unwrap(), seen);
    assert_eq!(p.a.follow_counters().forwarded, 1);
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
    let (list, counters) = p.a.relocations();
    assert_eq!(counters.committed, 1);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].outcome.as_deref(), Some("moved"));
}

// spec: SB-8.4, SB-14.21, SB-8.9
// The moving actor's lane is full and more records wait for it in its backlog (records from `b`
// that found the lane full on `a`'s mesh I/O thread): the relocation commits, capturing the
// lane's records and then the backlog's in arrival order; each runs once on the target, in the
// order `b` sent them, and each request is answered once with its own reply (its original
// correlation). Nothing waits in `a`'s backlog afterwards. Seen failing (the relocation aborted
// as busy) with the backlog left out of the capture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_lane_and_its_backlog_move_in_arrival_order() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    const LANE: usize = 4;
    const N: u64 = 24;
    let store = node_common::memory_store();
    let p = pair_lanes(store.clone(), store.clone(), Some(LANE)).await;
    let actor = counter_on(&p.a, "c6").await;
    let turns = p.a.counters().turns;
    let calls_in = p.a.counters().calls_in;
    let hold = {
        let (a, actor) = (p.a.clone(), actor.clone());
        tokio::spawn(async move { a.request(&actor, &Hold, T).await })
    };
    node_common::wait_until("hold running", || p.a.counters().turns > turns).await;
    // From `b`, in this order: sends, and every fourth record a request (each on the wire
    // before the next record is sent).
    let mut replies = Vec::new();
    for i in 0..N {
        if i % 4 == 3 {
            let out = p.b.counters().calls_out;
            let (b, actor) = (p.b.clone(), actor.clone());
            replies.push((
                i,
                tokio::spawn(async move { b.request(&actor, &Add(i), T).await }),
            ));
            node_common::wait_until("request sent", || p.b.counters().calls_out > out).await;
        } else {
            p.b.send(&actor, &Add(i)).await.unwrap();
        }
    }
    // The first records fill the lane; the rest wait in the actor's backlog on `a`.
    node_common::wait_until("the rest wait in the backlog", || {
        p.a.counters().calls_in >= calls_in + N
            && p.a.inbound_backlogs().actors.waiting_now >= N - LANE as u64
    })
    .await;
    let relocating = {
        let (a, actor) = (p.a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, node_common::rid("b")).await })
    };
    node_common::wait_until("quiescing", || {
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    p.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    let report = tokio::time::timeout(T, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(report.relayed, N);
    assert_eq!(report.actor.node(), &node_common::rid("b"));
    // Once each, in `b`'s order, on the target.
    let seen = p.b.request(&report.actor, &GetSeen, T).await.unwrap();
    assert_eq!(seen, (0..N).collect::<Vec<u64>>());
    for (i, r) in replies {
        let n = r.await.unwrap().unwrap();
        assert_eq!(n, i + 1, "request {i} answered with another's reply");
    }
    let held = p.a.inbound_backlogs().actors;
    assert_eq!(held.waiting_now, 0, "{held:?}");
    assert_eq!(held.refused, 0, "{held:?}");
    assert_eq!(p.a.counters().sends_dropped, 0);
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
}

// spec: SB-8.5, SB-14.24
// The target fails before its relay-ready is accepted (its rehydration refuses the state): the
// relocation aborts durably, the source reopens with its queued work in order and serves the
// actor as before, nothing lost, nothing doubled; the store still names the source; a later
// relocation of the same actor (its fence retired, a new one taken) succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_failing_before_relay_ready_aborts_and_the_source_serves_again() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    let actor = counter_on(&p.a, "c2").await;
    assert_eq!(p.a.request(&actor, &Add(0), T).await.unwrap(), 1);
    p.fail_rehydrate
        .store(true, std::sync::atomic::Ordering::SeqCst);
    match relocate_busy(&p, &actor, 1, 5).await {
        Err(Error::Aborted(Abort::TargetFailed)) => {}
        other => panic!("expected an abort, got {other:?}"),
    }
    // The source serves again: its queued sends ran there, in order, once each.
    assert_eq!(
        p.a.request(&actor, &GetSeen, T).await.unwrap(),
        (0..6).collect::<Vec<u64>>()
    );
    let loc = store.lookup(actor.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, node_common::rid("a"));
    assert_eq!(p.a.relocations().1.aborted, 1);
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
    // The durable abort retired the fence; a new relocation takes its own and moves the actor.
    p.fail_rehydrate
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let report = relocate_busy(&p, &actor, 6, 3).await.unwrap();
    assert_eq!(
        p.b.request(&report.actor, &GetSeen, T).await.unwrap(),
        (0..9).collect::<Vec<u64>>()
    );
}

// spec: SB-8.6, SB-14.25, SB-4.1
// After relay-ready was accepted the target's owner CAS fails (its store is down): the source
// never reopens — it does not serve the sealed incarnation any more, the relocation reports the
// failure, every request it had accepted is answered (not run twice), and both nodes free the
// relocation. The incarnation ends (NotFound from then on), and the actor comes back on the
// source as a new incarnation with the state it dehydrated for the move: get_or_create from
// either node finds it, its state intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cas_after_relay_ready_never_reopens_the_source() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store: Arc<zlink::store::MemoryStore> = Arc::new(zlink::store::MemoryStore::new());
    let b_store = Arc::new(zlink::store::FaultStore::new(store.clone()));
    let p = pair_with(store.clone(), b_store.clone()).await;
    let actor = counter_on(&p.a, "c3").await;
    assert_eq!(p.a.request(&actor, &Add(0), T).await.unwrap(), 1);
    b_store.set_down(true);
    let queued = {
        let (b, actor) = (p.b.clone(), actor.clone());
        // a request from `b` that waits in the actor's queue at capture
        tokio::spawn(async move { b.request(&actor, &Add(100), T).await })
    };
    let r = relocate_busy(&p, &actor, 1, 2).await;
    match r {
        Err(Error::Failed(Fail::CasFailed(ids))) => assert_eq!(ids, vec![actor.id().clone()]),
        other => panic!("expected a failed CAS, got {other:?}"),
    }
    // Answered once, not served anywhere: the source never reopens the sealed incarnation, a
    // ref to it is refused at once as a ref to an ended incarnation (the current one is newer).
    // It ran on the source before the seal (it overtook the held turn) or was captured and
    // refused at the target; the recovered state has it only in the first case.
    let ran_before_the_seal = tokio::time::timeout(T, queued)
        .await
        .unwrap()
        .unwrap()
        .is_ok();
    let mut state = vec![0];
    if ran_before_the_seal {
        state.push(100);
    }
    let stale = |e: zlink::actor::ActorError| {
        assert_eq!(e.kind(), zlink_wire::ErrorKind::InvalidOperation, "{e}");
        assert!(e.to_string().contains("ref incarnation 1"), "{e}");
    };
    stale(p.a.request(&actor, &GetSeen, T).await.unwrap_err());
    // No CAS happened and the source removed that incarnation's record; the actor is back on
    // the source as a new incarnation, with the state it had when it was dehydrated for the
    // move (the sends captured after that never ran, here or there).
    assert_eq!(p.a.relocations().1.failed, 1);
    assert_eq!(p.a.relocations().1.recovered, 1);
    let loc = store.lookup(actor.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, node_common::rid("a"));
    assert!(loc.object_generation > actor.object_generation());
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
    b_store.set_down(false);
    // get_or_create (from either node) finds the recovered incarnation and its state.
    let again =
        p.b.get_or_create(zlink::actor::Create::new("counter", actor.id().clone()))
            .await
            .unwrap();
    assert_eq!(again.object_generation(), loc.object_generation);
    assert_eq!(again.node(), &node_common::rid("a"));
    assert_eq!(
        p.b.request(&again, &Add(7), T).await.unwrap(),
        state.len() as u64 + 1
    );
    state.push(7);
    assert_eq!(p.b.request(&again, &GetSeen, T).await.unwrap(), state);
    // The old ref names the ended incarnation: refused, never served by the new one.
    stale(p.b.request(&actor, &GetSeen, T).await.unwrap_err());
    assert_eq!(p.b.request(&again, &GetSeen, T).await.unwrap(), state);
}

// spec: SB-8.9
// A type that neither opted in to migration nor is stateless is refused before anything is
// sealed or written: the actor keeps running on its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_type_without_migration_is_refused_and_keeps_running() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    let sticky =
        p.a.create(zlink::actor::Create::new("sticky", aid("s1")))
            .await
            .unwrap();
    let before = store.lookup(sticky.id().clone()).await.unwrap().unwrap();
    match p.a.relocate(&sticky, node_common::rid("b")).await {
        Err(Error::NotMigratable(_)) => {}
        other => panic!("expected NotMigratable, got {other:?}"),
    }
    assert_eq!(p.a.request(&sticky, &Add(5), T).await.unwrap(), 5);
    assert_eq!(
        store.lookup(sticky.id().clone()).await.unwrap().unwrap(),
        before
    );
    assert!(handoff_keys(&p.tap_a).is_empty());
}

// A hand-off record that does not decode, or names no relocation in progress at the receiver,
// is refused and counted there; the node goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stray_handoff_records_are_refused_and_counted() {
    use live::*;
    use zlink::actor::DispatchKey;
    use zlink::relocation::records::{CutoverRecord, WorkRecord, encode};
    const T: std::time::Duration = node_common::TIMEOUT;
    let p = pair(node_common::memory_store()).await;
    let actor = counter_on(&p.a, "c4").await;
    let to = node_common::rid("a");
    let garbage =
        p.b.mesh()
            .request(
                &to,
                DispatchKey::new(WORK),
                bytes::Bytes::from_static(b"\xc1\x00"),
                T,
            )
            .await;
    assert!(garbage.is_err());
    let cutover = encode(&CutoverRecord {
        relocation: zlink_wire::RelocationId::new(42),
    })
    .unwrap();
    assert!(
        p.b.mesh()
            .request(&to, DispatchKey::new(CUTOVER), cutover.into(), T)
            .await
            .is_err()
    );
    // A captured record for an actor that did not move from `b`: refused, never run.
    let work = encode(&WorkRecord {
        relocation: zlink_wire::RelocationId::new(43),
        actor: actor.id().clone(),
        key: 1,
        send: false,
        payload: rmp_serde::to_vec_named(&Add(7)).unwrap(),
    })
    .unwrap();
    assert!(
        p.b.mesh()
            .request(&to, DispatchKey::new(WORK), work.into(), T)
            .await
            .is_err()
    );
    let c = p.a.relocations().1;
    assert_eq!(c.refused_malformed, 1);
    assert_eq!(c.refused_unknown_relocation, 2);
    assert!(p.a.request(&actor, &GetSeen, T).await.unwrap().is_empty());
}

/// The session owner `s` (with the demo session application and a client endpoint, tapped), the
/// actor's owner `a` and the target `b`, all hosting the counter type, on one store.
async fn session_world() -> (Node3, Arc<zlink::node::client::NodeClient>) {
    session_world_with(WorldFaults::default()).await
}

/// What [`session_world_with`] changes: the session owner's clock (its seal timeout runs on it),
/// the target's store handle (it may wrap the shared store), the target's rehydration refusing.
#[derive(Default)]
struct WorldFaults {
    clock: Option<ManualClock>,
    /// The target `b`'s node clock (its cutover timeout and source wait run on it).
    target_clock: Option<ManualClock>,
    /// `a`'s node clock (its cutover timeout as a target runs on it).
    a_clock: Option<ManualClock>,
    faulty_b_store: bool,
    fail_rehydrate: bool,
    /// `a`'s store handle holds one lookup when armed ([`GatedLookup`]).
    gated_a_store: bool,
    /// The Spot `hooked` has an `OnDisconnectActor` on every node that logs (node, actor).
    hooks: Option<HookRuns>,
}

/// Where each `OnDisconnectActor` of the Spot `hooked` ran: (node, actor id), in order.
#[derive(Clone, Default)]
struct HookRuns(Arc<std::sync::Mutex<Vec<(String, String)>>>);

impl HookRuns {
    fn runs(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }

    /// The hook of node `node`: logs its run, then succeeds.
    fn hooks(&self, node: &'static str) -> zlink::actor::SpotHooks {
        let log = self.0.clone();
        zlink::actor::SpotHooks::new().on_disconnect_actor(
            move |_spot: String, ctx: zlink::actor::ActorCtx| {
                let log = log.clone();
                let actor = ctx.actor_ref().id().to_string();
                async move {
                    log.lock().unwrap().push((node.to_owned(), actor));
                    Ok(())
                }
            },
        )
    }
}

/// A store handle whose next `lookup` after [`GatedLookup::arm`] waits until
/// [`GatedLookup::release`] (it says when it waits): the window between a relocation's start
/// on the source and its first store read.
#[derive(Debug)]
struct GatedLookup {
    inner: Arc<MemoryStore>,
    armed: std::sync::atomic::AtomicBool,
    waiting: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

impl GatedLookup {
    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    fn release(&self) {
        self.release.add_permits(1);
    }
}

impl LocationStore for GatedLookup {
    fn register_owner(
        &self,
        node: zlink_wire::NodeRid,
        node_generation: zlink_wire::NodeGeneration,
        ttl: Duration,
    ) -> zlink::store::StoreFuture<'_, OwnerLease> {
        self.inner.register_owner(node, node_generation, ttl)
    }
    fn renew_owner(
        &self,
        holder: zlink::store::LeaseHolder,
        ttl: Duration,
    ) -> zlink::store::StoreFuture<'_, OwnerLease> {
        self.inner.renew_owner(holder, ttl)
    }
    fn release_owner(
        &self,
        holder: zlink::store::LeaseHolder,
    ) -> zlink::store::StoreFuture<'_, ()> {
        self.inner.release_owner(holder)
    }
    fn reserve_activation(
        &self,
        request: zlink::store::ActivationRequest,
    ) -> zlink::store::StoreFuture<'_, zlink::store::Reservation> {
        self.inner.reserve_activation(request)
    }
    fn mark_ready(
        &self,
        actor_id: zlink_wire::ActorId,
        fence: zlink::store::AuthorityFence,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        self.inner.mark_ready(actor_id, fence)
    }
    fn lookup(
        &self,
        actor_id: zlink_wire::ActorId,
    ) -> zlink::store::StoreFuture<'_, Option<ActorLocation>> {
        Box::pin(async move {
            if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                self.waiting.notify_one();
                self.release.acquire().await.unwrap().forget();
            }
            self.inner.lookup(actor_id).await
        })
    }
    fn cas_owner(
        &self,
        actor_id: zlink_wire::ActorId,
        expected: zlink::store::AuthorityFence,
        new_owner: zlink::store::ActorOwner,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        self.inner.cas_owner(actor_id, expected, new_owner)
    }
    fn relocation_fence(
        &self,
        actor_id: zlink_wire::ActorId,
        expected: zlink::store::AuthorityFence,
        owner: zlink::store::OwnerFence,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        self.inner.relocation_fence(actor_id, expected, owner)
    }
    fn reincarnate(
        &self,
        actor_id: zlink_wire::ActorId,
        owner: zlink::store::OwnerFence,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        self.inner.reincarnate(actor_id, owner)
    }
    fn destroy(
        &self,
        actor_id: zlink_wire::ActorId,
        fence: zlink::store::OwnerFence,
    ) -> zlink::store::StoreFuture<'_, ()> {
        self.inner.destroy(actor_id, fence)
    }
}

async fn session_world_with(f: WorldFaults) -> (Node3, Arc<zlink::node::client::NodeClient>) {
    use node_common::*;
    use zlink_apps::demo;
    let shared = Arc::new(MemoryStore::new());
    let store: Arc<dyn LocationStore> = shared.clone();
    let b_faults = f
        .faulty_b_store
        .then(|| Arc::new(zlink::store::FaultStore::new(shared.clone())));
    let b_store: Arc<dyn LocationStore> = match &b_faults {
        Some(b) => b.clone(),
        None => store.clone(),
    };
    let (gate, rx) = tokio::sync::watch::channel(true);
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(f.fail_rehydrate));
    let reg = |node: &'static str| {
        let mut r = live::registry(
            rx.clone(),
            Arc::new(std::sync::atomic::AtomicU64::new(0)),
            fail.clone(),
        );
        if let Some(h) = &f.hooks {
            r.spot_hooks("hooked", h.hooks(node));
        }
        r
    };
    let tap_s = zlink_mesh::WireTap::new(100_000);
    let mut ss = SessionNodeSpec::new("s", demo::sessions());
    ss.registry = Some(reg("s"));
    ss.tap = Some(tap_s.clone());
    ss.clock = f
        .clock
        .clone()
        .map(|c| Arc::new(c) as Arc<dyn zlink::session::Clock>);
    let s = start_session_node(ss, store.clone()).await;
    let tap_b = zlink_mesh::WireTap::new(100_000);
    let mut sb = SessionNodeSpec::new("b", demo::sessions());
    sb.registry = Some(reg("b"));
    sb.peers = vec![s.address()];
    sb.tap = Some(tap_b.clone());
    sb.clock = f
        .target_clock
        .clone()
        .map(|c| Arc::new(c) as Arc<dyn zlink::session::Clock>);
    let b = start_session_node(sb, b_store).await;
    let mut sa = SessionNodeSpec::new("a", demo::sessions());
    sa.registry = Some(reg("a"));
    sa.clock = f
        .a_clock
        .clone()
        .map(|c| Arc::new(c) as Arc<dyn zlink::session::Clock>);
    sa.peers = vec![b.address(), s.address()];
    let a_gate = f.gated_a_store.then(|| {
        Arc::new(GatedLookup {
            inner: shared.clone(),
            armed: std::sync::atomic::AtomicBool::new(false),
            waiting: tokio::sync::Notify::new(),
            release: tokio::sync::Semaphore::new(0),
        })
    });
    let a_store: Arc<dyn LocationStore> = match &a_gate {
        Some(g) => g.clone(),
        None => store.clone(),
    };
    let a = start_session_node(sa, a_store).await;
    assert!(a.wait_peers(TIMEOUT).await.is_empty());
    assert!(b.wait_peers(TIMEOUT).await.is_empty());
    for n in ["a", "b"] {
        assert!(
            s.mesh()
                .wait_peer_up(&rid(n), None, TIMEOUT)
                .await
                .is_some()
        );
    }
    let c = Arc::new(client_of(&s));
    (
        Node3 {
            s,
            a,
            b,
            tap_s,
            tap_b,
            gate,
            store,
            b_faults,
            a_gate,
        },
        c,
    )
}

struct Node3 {
    s: zlink::node::Node,
    a: zlink::node::Node,
    b: zlink::node::Node,
    tap_s: zlink_mesh::WireTap,
    tap_b: zlink_mesh::WireTap,
    /// Opens the `Hold` turns of the actors (open unless a test closes it).
    gate: tokio::sync::watch::Sender<bool>,
    store: Arc<dyn LocationStore>,
    /// `b`'s store handle when it may fail ([`WorldFaults::faulty_b_store`]).
    b_faults: Option<Arc<zlink::store::FaultStore<Arc<MemoryStore>>>>,
    /// `a`'s store handle when it holds a lookup ([`WorldFaults::gated_a_store`]).
    a_gate: Option<Arc<GatedLookup>>,
}

use node_common::TIMEOUT;

// spec: SB-14.20, SB-14.21, SB-8.9, SB-1.3
// A bound actor moves from `a` to `b` while its client relays sequence-numbered requests
// without pause through the session owner `s`: the coordinator seals the binding (42 from `a`,
// 43 back), the work `a` accepted is relayed, the target takes over the binding and sends the
// 44 commit; every relay is processed once, in order, and answered with its own reply; the
// client's connection is kept; afterwards the session's snapshot names `b` (same ActorId and
// ObjectGeneration) and relays run there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_actor_moves_under_relays_and_its_session_follows() {
    use live::{Add, GetSeen, aid};
    use node_common::{bind, relay_req, rid, tapped};
    use zlink_mesh::TapDirection;
    let (w, c) = session_world().await;
    let actor =
        w.a.create(zlink::actor::Create::new("counter", aid("bound1")))
            .await
            .unwrap();
    bind(&c, &actor).await;
    const N: u64 = 300;
    let sender = {
        let (c, actor) = (c.clone(), actor.clone());
        tokio::spawn(async move {
            let mut replies = Vec::new();
            for i in 0..N {
                replies.push(relay_req(&c, &actor, &Add(i)).await);
            }
            replies
        })
    };
    let turns = w.a.counters().turns;
    node_common::wait_until("relays flowing", || w.a.counters().turns > turns + 20).await;
    let report = w.a.relocate(&actor, rid("b")).await.unwrap();
    let replies = tokio::time::timeout(TIMEOUT, sender)
        .await
        .unwrap()
        .unwrap();
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(
            r.unwrap(),
            i as u64 + 1,
            "relay {i}: lost, doubled or another's reply"
        );
    }
    // Processed once each, in order; the state travelled (SB-14.21).
    let seen = w.b.request(&report.actor, &GetSeen, TIMEOUT).await.unwrap();
    assert_eq!(seen, (0..N).collect::<Vec<u64>>());
    // The session's snapshot is the target, identity kept (SB-1.3, SB-14.20).
    let bound = c.packet(&zlink_apps::demo::session::Bound).await.unwrap();
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].node(), &rid("b"));
    assert_eq!(bound[0].id(), actor.id());
    assert_eq!(bound[0].object_generation(), actor.object_generation());
    let loc = w.store.lookup(actor.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, rid("b"));
    // Relays after the commit run on the target, on the same connection.
    let turns_b = w.b.counters().turns;
    assert_eq!(relay_req(&c, &actor, &Add(N)).await.unwrap(), N + 1);
    assert!(w.b.counters().turns > turns_b);
    // On the wire at the session owner: one 42, one 43 back (a reply), one 44 commit naming
    // the target with the relocation's identity, no 45 (SB-14.26).
    assert_eq!(tapped(&w.tap_s, TapDirection::Received, 42).len(), 1);
    assert_eq!(tapped(&w.tap_s, TapDirection::Sent, 43).len(), 1);
    let routes = tapped(&w.tap_s, TapDirection::Received, 44);
    assert_eq!(routes.len(), 1);
    match &routes[0].decoded.as_ref().unwrap().record {
        zlink_wire::Record::SessionRelocationRoute(zlink_wire::SessionRelocationRoute::Commit(
            commit,
        )) => {
            assert_eq!(commit.relocation, report.relocation);
            assert_eq!(&commit.actor, actor.id());
            assert_eq!(commit.object_generation, actor.object_generation());
            assert_eq!(commit.target.node, rid("b"));
        }
        other => panic!("not a 44 commit: {other:?}"),
    }
    assert!(tapped(&w.tap_s, TapDirection::Received, 45).is_empty());
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
    let _ = &w.s;
}

// The operator's RELOCATE and LIST_RELOCATIONS on the client port (`zlink-node ctl relocate`,
// `ctl relocations`): refused to a session that did not present the operator credential, done
// for one that did; the node that does not own the actor answers NotFound; the list shows the
// relocation with its phases and outcome on both nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_relocates_through_the_client_port_and_lists_relocations() {
    use live::{Add, GetSeen, aid};
    use node_common::{mesh_config, rid, wait_pair_up};
    use zlink::node::access::{ClientAccess, OperatorCredential};
    use zlink::node::client::NodeClient;
    use zlink::node::protocol::RelocateActor;
    use zlink::node::{Node, NodeOptions};
    let store = node_common::memory_store();
    let (_gate, rx) = tokio::sync::watch::channel(true);
    let start = |name: &'static str, peers: Vec<zlink_mesh::PeerAddress>| {
        let store = store.clone();
        let rx = rx.clone();
        async move {
            let mut mc = mesh_config(name);
            mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
            let registry = live::registry(
                rx,
                Arc::new(std::sync::atomic::AtomicU64::new(0)),
                Arc::new(std::sync::atomic::AtomicBool::new(false)),
            );
            let mut access = ClientAccess::new();
            access.operator = Some(OperatorCredential::new(b"op-secret").unwrap());
            let mut o = NodeOptions::new(mc, store, registry).with_client_access(access);
            o.peers = peers;
            o.metrics = Some("127.0.0.1:0".parse().unwrap());
            Node::start(o).await.unwrap()
        }
    };
    let b = start("b", vec![]).await;
    let a = start("a", vec![b.address()]).await;
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(zlink::actor::Create::new("counter", aid("op1")))
        .await
        .unwrap();
    a.send(&actor, &Add(1)).await.unwrap();
    let client =
        |n: &Node| NodeClient::connect(n.endpoints().client.as_ref().unwrap(), TIMEOUT).unwrap();
    let req = RelocateActor {
        actor_id: "op1".into(),
        to: "b".into(),
    };
    let stranger = client(&a);
    let e = stranger.relocate(&req).await.unwrap_err();
    assert_eq!(e.kind(), zlink_wire::ErrorKind::InvalidOperation, "{e}");
    assert!(stranger.relocations().await.is_err());
    let op_b = client(&b);
    op_b.authenticate(b"op-secret").await.unwrap();
    let e = op_b.relocate(&req).await.unwrap_err();
    assert_eq!(e.kind(), zlink_wire::ErrorKind::NotFound, "{e}");
    let op_a = client(&a);
    op_a.authenticate(b"op-secret").await.unwrap();
    let done = op_a.relocate(&req).await.unwrap();
    assert_eq!(done.to, "b");
    assert_eq!(done.actor.node(), &rid("b"));
    assert_eq!(
        b.request(&done.actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![1]
    );
    let list = op_a.relocations().await.unwrap();
    assert_eq!(list.counters.committed, 1);
    let r = &list.relocations[0];
    assert_eq!(
        (
            r.relocation,
            r.actor.as_str(),
            r.role.as_str(),
            r.peer.as_str()
        ),
        (done.relocation, "op1", "source", "b")
    );
    assert_eq!(r.outcome.as_deref(), Some("moved"));
    assert!(r.phases.iter().any(|(p, _)| p == "Restoring"));
    node_common::wait_until("the target's entry ended", || {
        b.relocations_in_progress() == 0
    })
    .await;
    // The metrics endpoint: outcome counters and the duration histogram.
    assert_eq!(a.counters().relocations, 1);
    let text = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(a.metrics_addr().unwrap())
            .await
            .unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        body
    };
    for line in [
        "zlink_relocation_outcomes_total{outcome=\"committed\"} 1",
        "zlink_relocation_outcomes_total{outcome=\"started\"} 1",
        "zlink_relocation_outcomes_total{outcome=\"aborted\"} 0",
        "zlink_relocation_duration_seconds_count 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
    let list_b = op_b.relocations().await.unwrap();
    assert_eq!(list_b.counters.target, 1);
    assert_eq!(list_b.relocations[0].role, "target");
    assert!(
        list_b.relocations[0]
            .outcome
            .as_deref()
            .unwrap()
            .starts_with("committed")
    );
}

// spec: SB-14.21, SB-14.20, SB-8.9
// The bound actor moves back and forth between `a` and `b` ten times while its client relays
// sequence-numbered requests without pause: every relay processed once, in order, answered with
// its own reply, the connection kept, the state intact; nothing of the relocations stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_actor_moves_back_and_forth_under_relays() {
    use live::{Add, GetSeen, aid};
    use node_common::{bind, relay_req, rid};
    let (w, c) = session_world().await;
    let mut actor =
        w.a.create(zlink::actor::Create::new("counter", aid("pingpong")))
            .await
            .unwrap();
    bind(&c, &actor).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sender = {
        let (c, actor, stop, sent) = (c.clone(), actor.clone(), stop.clone(), sent.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let n = relay_req(&c, &actor, &Add(i)).await.unwrap();
                assert_eq!(n, i + 1, "relay {i}: lost, doubled or another's reply");
                i += 1;
                sent.store(i, std::sync::atomic::Ordering::SeqCst);
            }
            i
        })
    };
    let (mut from, mut to) = (w.a.clone(), w.b.clone());
    for _ in 0..10 {
        let before = sent.load(std::sync::atomic::Ordering::SeqCst);
        node_common::wait_until("relays flowing", || {
            sent.load(std::sync::atomic::Ordering::SeqCst) > before + 5
        })
        .await;
        let report = from.relocate(&actor, to.node_rid().clone()).await.unwrap();
        assert_eq!(report.actor.object_generation(), actor.object_generation());
        actor = report.actor;
        std::mem::swap(&mut from, &mut to);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let n = tokio::time::timeout(TIMEOUT, sender)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(actor.node(), &rid("a"));
    let seen = w.a.request(&actor, &GetSeen, TIMEOUT).await.unwrap();
    assert_eq!(seen, (0..n).collect::<Vec<u64>>());
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
    assert_eq!(w.a.relocations().1.committed, 5);
    assert_eq!(w.b.relocations().1.committed, 5);
    // One incarnation in all: on `a`, none left behind on `b`.
    assert_eq!(w.a.counters().actors["entry"], 1);
    assert_eq!(w.b.counters().actors["entry"], 0);
}

// ---------------------------------------------------------------------------------------------
// Whole-Spot relocation (`Node::relocate_spot`): every member of a SpotWide Spot moves as one
// unit through the same cores and driver; the Spot's seal never touches the node's other Spots.

fn spotwide(name: &str) -> zlink::actor::SpotSpec {
    zlink::actor::SpotSpec {
        name: name.to_owned(),
        kind: zlink::actor::SpotKind::User(zlink::actor::UserMode::SpotWide),
    }
}

// spec: SB-8.9, SB-14.21, SB-1.3, EG-7.5
// A SpotWide Spot of three counters, one member busy in a turn (which holds the Spot gate) and
// sends queued behind it for every member, moves from `a` to `b` as a unit: each member's state
// arrives, its queued work runs there once, in arrival order; ActorIds and ObjectGenerations are
// kept; the store names `b` for each. Another Spot of `a` keeps serving while the moving Spot is
// sealed (a request to it is answered while the relocation is still quiescing: measured by
// events). On `a` the moved Spot is freed — its members, lanes and gate go, and with them the
// per-object decision counters and reservations (EG-7.5: dropped when the object moves): the
// runtime's live lanes and gates fall back to what they were before the Spot was created. On
// `b` each member starts with its own fresh lane counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_moves_as_a_unit_and_the_source_frees_it() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    let lobby =
        p.a.create(zlink::actor::Create::new("counter", aid("lobby-1")).in_spot(spotwide("lobby")))
            .await
            .unwrap();
    assert_eq!(p.a.request(&lobby, &Add(0), T).await.unwrap(), 1);
    let base = p.a.runtime_metrics();
    let ids = ["room-m1", "room-m2", "room-m3"];
    let mut members = Vec::new();
    for id in ids {
        let m =
            p.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("room")))
                .await
                .unwrap();
        assert_eq!(p.a.request(&m, &Add(0), T).await.unwrap(), 1);
        members.push(m);
    }
    assert!(p.a.runtime_metrics().lanes_live > base.lanes_live);
    // The first member keeps its turn (and the Spot gate); sends queue behind it.
    let turns = p.a.counters().turns;
    let hold = {
        let (a, m) = (p.a.clone(), members[0].clone());
        tokio::spawn(async move { a.request(&m, &Hold, T).await })
    };
    node_common::wait_until("hold running", || p.a.counters().turns > turns).await;
    for (k, m) in members.iter().enumerate() {
        for i in 1..=4 {
            p.a.send(m, &Add(10 * k as u64 + i)).await.unwrap();
        }
    }
    let queued = p.a.lane_stats(&members[1]).unwrap();
    assert_eq!(queued.application_queued, 4);
    assert!(queued.application_reserved_bytes > 0);
    let relocating = {
        let a = p.a.clone();
        tokio::spawn(async move { a.relocate_spot("room", node_common::rid("b")).await })
    };
    node_common::wait_until("quiescing", || {
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    // The moving Spot is sealed behind its held turn; the lobby is not delayed by it.
    assert_eq!(p.a.request(&lobby, &Add(1), T).await.unwrap(), 2);
    assert!(
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing"),
        "the lobby answered only once the room had moved"
    );
    // A join of the moving Spot is refused meanwhile.
    let e =
        p.a.create(zlink::actor::Create::new("counter", aid("late")).in_spot(spotwide("room")))
            .await
            .unwrap_err();
    assert_eq!(e.kind(), zlink_wire::ErrorKind::Unavailable, "{e}");
    p.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    let report = tokio::time::timeout(T, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(report.spot, "room");
    // What the gate ran before the Spot's seal record (it queues behind the work already
    // ready, EG-4.1: starting a relocation does not stop processing until the seal) ran here;
    // the rest was captured and relayed: each record once, the states below say where.
    assert!(
        report.relayed > 0 && report.relayed <= 12,
        "{}",
        report.relayed
    );
    assert_eq!(p.rehydrated.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(report.actors.len(), 3);
    for (k, (m, moved)) in members.iter().zip(&report.actors).enumerate() {
        assert_eq!(moved.id(), m.id());
        assert_eq!(moved.object_generation(), m.object_generation());
        assert_eq!(moved.node(), &node_common::rid("b"));
        let loc = store.lookup(m.id().clone()).await.unwrap().unwrap();
        assert_eq!(loc.owner_node, node_common::rid("b"));
        let want: Vec<u64> = std::iter::once(0)
            .chain((1..=4).map(|i| 10 * k as u64 + i))
            .collect();
        assert_eq!(p.b.request(moved, &GetSeen, T).await.unwrap(), want);
        // EG-7.5: the target's lane of the member is its own, nothing carried over (its
        // last reservation goes at the terminal, after the reply: waited for).
        node_common::wait_until("the member's lane idle on b", || {
            p.b.lane_stats(moved).is_some_and(|s| {
                s.decision == zlink::runtime::LaneDecision::default()
                    && (s.application_queued, s.application_reserved_items) == (0, 0)
                    && (s.lifecycle_queued, s.lifecycle_reserved_items) == (0, 0)
            })
        })
        .await;
        assert!(
            p.a.lane_stats(m).is_none(),
            "the source still hosts {}",
            m.id()
        );
    }
    // The source freed the Spot: members, lanes, gate (counted by its runtime).
    node_common::wait_until("the moved Spot freed on the source", || {
        let m = p.a.runtime_metrics();
        m.lanes_live == base.lanes_live && m.gates_live == base.gates_live
    })
    .await;
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
    assert_eq!(p.a.info().local_actors, 1);
    let (list, counters) = p.a.relocations();
    assert_eq!(counters.committed, 1);
    assert_eq!(list.last().unwrap().actor, "spot room");
    // The Spot lives on `b` now: a new member joins it there; `a` can host a new "room".
    p.b.create(zlink::actor::Create::new("counter", aid("room-m4")).in_spot(spotwide("room")))
        .await
        .unwrap();
    // Only SpotWide User and Instance Spots move as a unit; an unknown Spot is NotFound.
    let solo = zlink::actor::SpotSpec {
        name: "solo".into(),
        kind: zlink::actor::SpotKind::User(zlink::actor::UserMode::PerActor),
    };
    p.a.create(zlink::actor::Create::new("counter", aid("solo-1")).in_spot(solo))
        .await
        .unwrap();
    match p.a.relocate_spot("solo", node_common::rid("b")).await {
        Err(Error::SpotNotMovable { .. }) => {}
        other => panic!("expected SpotNotMovable, got {other:?}"),
    }
    match p.a.relocate_spot("room", node_common::rid("b")).await {
        Err(Error::UnknownSpot(s)) => assert_eq!(s, "room"),
        other => panic!("expected UnknownSpot, got {other:?}"),
    }
}

// spec: EG-4.1
// A member of a SpotWide Spot awaits a worker with Yield (its turn released the Spot gate and
// waits for its resume) when its Spot is relocated. The worker returns while the Spot is sealed
// (its dehydrate hook, which runs in the seal's own turn, releases it): the seal refuses the
// resume — the continuation never runs, on the source or the target, and the request is
// answered once with `ResumeRefused` (`Unavailable`); the state the handler wrote before the
// Yield moves with the actor; the other member's queued work moves and runs on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_yield_resume_of_a_relocating_spot_fails() {
    use live::{Add, GetSeen, aid};
    use serde::{Deserialize, Serialize};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use zlink::actor::{ActorTypeBuilder, DispatchKey, Handled, HandlerError};
    use zlink::runtime::SpotWideCtx;
    const T: std::time::Duration = node_common::TIMEOUT;

    #[derive(Serialize, Deserialize)]
    struct Wait;
    impl zlink::actor::Message for Wait {
        const KEY: DispatchKey = DispatchKey::new(30);
        type Reply = u64;
    }
    #[derive(Serialize, Deserialize)]
    struct Started;
    impl zlink::actor::Message for Started {
        const KEY: DispatchKey = DispatchKey::new(31);
        type Reply = u64;
    }

    let (value_tx, value_rx) = std::sync::mpsc::channel::<u64>();
    let value_rx = Arc::new(Mutex::new(value_rx));
    // The first dehydration (in the Spot's seal turn) lets the parked worker return.
    let release = Arc::new(Mutex::new(Some(value_tx.clone())));
    let continued = Arc::new(AtomicU64::new(0));
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let registry = || {
        let (value_rx, continued, entered_tx, release) = (
            value_rx.clone(),
            continued.clone(),
            entered_tx.clone(),
            release.clone(),
        );
        let (_gate, rx) = tokio::sync::watch::channel(true);
        let mut r = live::registry(
            rx,
            Arc::new(AtomicU64::new(0)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        r.register(
            ActorTypeBuilder::new("waiter", |_info, _init| Ok(0u64))
                .handle_yielding(move |started: &mut u64, _ctx, rt: SpotWideCtx, Wait| {
                    *started += 1;
                    let (rx, entered, continued) =
                        (value_rx.clone(), entered_tx.clone(), continued.clone());
                    Handled::later(async move {
                        let v = rt
                            .worker(move || {
                                let _ = entered.send(());
                                rx.lock().unwrap().recv().unwrap_or(0)
                            })
                            .yielding()
                            .await
                            .map_err(|e| HandlerError::new(e.to_string()))?;
                        continued.fetch_add(1, Ordering::SeqCst);
                        Ok(v)
                    })
                })
                .handle(|started: &mut u64, _ctx, Started| Handled::ok(*started))
                .migrate(
                    move |s: &u64| {
                        if let Some(tx) = release.lock().unwrap().take() {
                            let _ = tx.send(7);
                        }
                        Ok::<_, HandlerError>(*s)
                    },
                    |_info, s: u64| Ok(s),
                )
                .build()
                .unwrap(),
        )
        .unwrap();
        r
    };
    let store = node_common::memory_store();
    let b = node_common::start_node("b", store.clone(), vec![], None, Some(registry())).await;
    let a = node_common::start_node(
        "a",
        store.clone(),
        vec![b.address()],
        None,
        Some(registry()),
    )
    .await;
    node_common::wait_pair_up(&a, &b).await;
    let hall = spotwide("hall");
    let waiter = a
        .create(zlink::actor::Create::new("waiter", aid("w")).in_spot(hall.clone()))
        .await
        .unwrap();
    let counter = a
        .create(zlink::actor::Create::new("counter", aid("c")).in_spot(hall))
        .await
        .unwrap();
    let refused_before = a.runtime_metrics().resumes_refused;
    let waiting = {
        let (a, w) = (a.clone(), waiter.clone());
        tokio::spawn(async move { a.request(&w, &Wait, T).await })
    };
    entered_rx.recv().await.unwrap();
    // The waiter yielded the gate: the other member runs, and has work queued at the seal.
    assert_eq!(a.request(&counter, &Add(1), T).await.unwrap(), 1);
    a.send(&counter, &Add(2)).await.unwrap();
    let report = a
        .relocate_spot("hall", node_common::rid("b"))
        .await
        .unwrap();
    // The resume was refused: the request is answered with the documented error, once.
    let e = tokio::time::timeout(T, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), zlink_wire::ErrorKind::Unavailable, "{e}");
    assert!(
        matches!(e, zlink::actor::ActorError::ResumeRefused),
        "{e:?}"
    );
    assert!(a.runtime_metrics().resumes_refused > refused_before);
    assert_eq!(continued.load(Ordering::SeqCst), 0, "a refused resume ran");
    let moved = |id: &str| {
        report
            .actors
            .iter()
            .find(|r| r.id().as_str() == id)
            .unwrap()
            .clone()
    };
    // The state the handler wrote before its Yield moved; nothing ran it again.
    assert_eq!(b.request(&moved("w"), &Started, T).await.unwrap(), 1);
    assert_eq!(
        b.request(&moved("c"), &GetSeen, T).await.unwrap(),
        vec![1, 2]
    );
    // On the target the actor yields and resumes as usual; the refused continuation still
    // never ran (the only one counted is this one).
    let again = {
        let (b, w) = (b.clone(), moved("w"));
        tokio::spawn(async move { b.request(&w, &Wait, T).await })
    };
    entered_rx.recv().await.unwrap();
    value_tx.send(9).unwrap();
    assert_eq!(again.await.unwrap().unwrap(), 9);
    assert_eq!(continued.load(Ordering::SeqCst), 1, "a refused resume ran");
    assert_eq!(b.request(&moved("w"), &Started, T).await.unwrap(), 2);
}

// spec: SB-8.9, SB-14.20, SB-14.21, SB-14.26
// Two members of a SpotWide Spot on `a`, both bound to one client session on `s`, move to `b`
// as one unit while the client relays sequence-numbered requests to both without pause: each
// binding is sealed (one 42 per bound member to the session owner, its 43 back) and committed
// (one 44 commit per member from the target, no 45); every relay is processed once, in order,
// and answered with its own reply; the connection is kept; the session's snapshot names `b`
// for both, identities kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_with_bound_members_moves_under_relays_and_each_session_binding_follows() {
    use live::{Add, GetSeen, aid};
    use node_common::{bind, relay_req, rid, tapped};
    use zlink_mesh::TapDirection;
    let (w, c) = session_world().await;
    let mut members = Vec::new();
    for id in ["table-p1", "table-p2"] {
        let m =
            w.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("table")))
                .await
                .unwrap();
        bind(&c, &m).await;
        members.push(m);
    }
    const N: u64 = 200;
    let sender = {
        let (c, members) = (c.clone(), members.clone());
        tokio::spawn(async move {
            let mut replies = Vec::new();
            for i in 0..N {
                for m in &members {
                    replies.push(relay_req(&c, m, &Add(i)).await);
                }
            }
            replies
        })
    };
    let turns = w.a.counters().turns;
    node_common::wait_until("relays flowing", || w.a.counters().turns > turns + 20).await;
    let report = w.a.relocate_spot("table", rid("b")).await.unwrap();
    let replies = tokio::time::timeout(TIMEOUT, sender)
        .await
        .unwrap()
        .unwrap();
    for (k, r) in replies.into_iter().enumerate() {
        assert_eq!(
            r.unwrap(),
            (k / 2) as u64 + 1,
            "relay {k}: lost, doubled or another's reply"
        );
    }
    for (m, moved) in members.iter().zip(&report.actors) {
        assert_eq!(moved.id(), m.id());
        assert_eq!(moved.object_generation(), m.object_generation());
        let seen = w.b.request(moved, &GetSeen, TIMEOUT).await.unwrap();
        assert_eq!(seen, (0..N).collect::<Vec<u64>>(), "{}", m.id());
    }
    let bound = c.packet(&zlink_apps::demo::session::Bound).await.unwrap();
    assert_eq!(bound.len(), 2);
    for b in &bound {
        assert_eq!(b.node(), &rid("b"));
        let m = members.iter().find(|m| m.id() == b.id()).unwrap();
        assert_eq!(b.object_generation(), m.object_generation());
    }
    // Relays after the commit run on the target, on the same connection.
    for m in &members {
        assert_eq!(relay_req(&c, m, &Add(N)).await.unwrap(), N + 1);
    }
    // On the wire at the session owner: a 42 and a 43 per bound member, a 44 commit per member
    // from the target with the relocation's identity, no 45.
    assert_eq!(tapped(&w.tap_s, TapDirection::Received, 42).len(), 2);
    assert_eq!(tapped(&w.tap_s, TapDirection::Sent, 43).len(), 2);
    let routes = tapped(&w.tap_s, TapDirection::Received, 44);
    assert_eq!(routes.len(), 2);
    let mut committed: Vec<String> = routes
        .iter()
        .map(|r| match &r.decoded.as_ref().unwrap().record {
            zlink_wire::Record::SessionRelocationRoute(
                zlink_wire::SessionRelocationRoute::Commit(commit),
            ) => {
                assert_eq!(commit.relocation, report.relocation);
                assert_eq!(commit.target.node, rid("b"));
                commit.actor.to_string()
            }
            other => panic!("not a 44 commit: {other:?}"),
        })
        .collect();
    committed.sort();
    assert_eq!(committed, vec!["table-p1", "table-p2"]);
    assert!(tapped(&w.tap_s, TapDirection::Received, 45).is_empty());
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
}

// spec: SB-8.5, SB-8.8, SB-14.24
// Two members of a SpotWide Spot on `a`, both bound to one client session on `s`, under relays
// to both without pause; the target refuses the Spot's Restore (a rehydration fails) before
// relay-ready: the source aborts durably, reopens the Spot with its queues first and sends one
// 44 abort per sealed binding (no commit); the session owner releases each seal and resubmits
// what it held to the source. Every relay is answered once, in order, by the source; the
// connection stays; the session's snapshot still names `a` for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_whose_target_fails_sends_44_abort_to_each_bound_session() {
    use live::{Add, Error, GetSeen, aid};
    use node_common::{bind, relay_req, rid, tapped};
    use zlink_mesh::TapDirection;
    let (w, c) = session_world_with(WorldFaults {
        fail_rehydrate: true,
        ..WorldFaults::default()
    })
    .await;
    let mut members = Vec::new();
    for id in ["booth-p1", "booth-p2"] {
        let m =
            w.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("booth")))
                .await
                .unwrap();
        bind(&c, &m).await;
        members.push(m);
    }
    const N: u64 = 200;
    let sender = {
        let (c, members) = (c.clone(), members.clone());
        tokio::spawn(async move {
            let mut replies = Vec::new();
            for i in 0..N {
                for m in &members {
                    replies.push(relay_req(&c, m, &Add(i)).await);
                }
            }
            replies
        })
    };
    let turns = w.a.counters().turns;
    node_common::wait_until("relays flowing", || w.a.counters().turns > turns + 20).await;
    match w.a.relocate_spot("booth", rid("b")).await {
        Err(Error::Aborted(zlink::relocation::AbortReason::TargetFailed)) => {}
        other => panic!("expected an abort, got {other:?}"),
    }
    let replies = tokio::time::timeout(TIMEOUT, sender)
        .await
        .unwrap()
        .unwrap();
    for (k, r) in replies.into_iter().enumerate() {
        assert_eq!(
            r.unwrap(),
            (k / 2) as u64 + 1,
            "relay {k}: lost, doubled or another's reply"
        );
    }
    for m in &members {
        let seen = w.a.request(m, &GetSeen, TIMEOUT).await.unwrap();
        assert_eq!(seen, (0..N).collect::<Vec<u64>>(), "{}", m.id());
        // The connection stays and the binding still routes to the source.
        assert_eq!(relay_req(&c, m, &Add(N)).await.unwrap(), N + 1);
        let loc = w.store.lookup(m.id().clone()).await.unwrap().unwrap();
        assert_eq!(loc.owner_node, rid("a"));
    }
    let bound = c.packet(&zlink_apps::demo::session::Bound).await.unwrap();
    assert_eq!(bound.len(), 2);
    assert!(bound.iter().all(|b| b.node() == &rid("a")), "{bound:?}");
    // On the wire at the session owner: a 42 and a 43 per bound member, then one 44 abort per
    // member naming its own seal, no commit.
    let seals = tapped(&w.tap_s, TapDirection::Received, 42);
    assert_eq!(seals.len(), 2);
    assert_eq!(tapped(&w.tap_s, TapDirection::Sent, 43).len(), 2);
    let mut sealed: Vec<_> = seals
        .iter()
        .map(|r| match &r.decoded.as_ref().unwrap().record {
            zlink_wire::Record::SessionRelocationSeal(s) => s.seal.clone(),
            other => panic!("not a 42: {other:?}"),
        })
        .collect();
    let mut aborted: Vec<_> = tapped(&w.tap_s, TapDirection::Received, 44)
        .iter()
        .map(|r| match &r.decoded.as_ref().unwrap().record {
            zlink_wire::Record::SessionRelocationRoute(
                zlink_wire::SessionRelocationRoute::Abort(a),
            ) => a.seal.clone(),
            other => panic!("not a 44 abort: {other:?}"),
        })
        .collect();
    sealed.sort_by_key(|s| format!("{s:?}"));
    aborted.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(
        aborted, sealed,
        "one 44 abort per seal, each naming its own"
    );
    assert_eq!(w.a.relocations().1.aborted, 1);
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
}

// spec: SB-8.5, SB-14.24
// The target refuses a Spot's Restore (a member's rehydration fails) before relay-ready: the
// relocation aborts durably, the Spot is unsealed on the source and every member serves there
// again with its queued work run in arrival order, nothing lost or doubled; the store still
// names the source for each; the Spot takes joins again; a second relocation then moves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_whose_target_fails_before_relay_ready_serves_again_on_the_source() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    let mut members = Vec::new();
    for id in ["club-1", "club-2"] {
        let m =
            p.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("club")))
                .await
                .unwrap();
        assert_eq!(p.a.request(&m, &Add(0), T).await.unwrap(), 1);
        members.push(m);
    }
    p.fail_rehydrate
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = p.gate.send(false);
    let turns = p.a.counters().turns;
    let hold = {
        let (a, m) = (p.a.clone(), members[0].clone());
        tokio::spawn(async move { a.request(&m, &Hold, T).await })
    };
    node_common::wait_until("hold running", || p.a.counters().turns > turns).await;
    for m in &members {
        for i in 1..=3 {
            p.a.send(m, &Add(i)).await.unwrap();
        }
    }
    let relocating = {
        let a = p.a.clone();
        tokio::spawn(async move { a.relocate_spot("club", node_common::rid("b")).await })
    };
    node_common::wait_until("quiescing", || {
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    p.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    match tokio::time::timeout(T, relocating).await.unwrap().unwrap() {
        Err(Error::Aborted(Abort::TargetFailed)) => {}
        other => panic!("expected an abort, got {other:?}"),
    }
    for m in &members {
        assert_eq!(
            p.a.request(m, &GetSeen, T).await.unwrap(),
            vec![0, 1, 2, 3],
            "{}",
            m.id()
        );
        let loc = store.lookup(m.id().clone()).await.unwrap().unwrap();
        assert_eq!(loc.owner_node, node_common::rid("a"));
    }
    assert_eq!(p.a.relocations().1.aborted, 1);
    p.a.create(zlink::actor::Create::new("counter", aid("club-3")).in_spot(spotwide("club")))
        .await
        .unwrap();
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
    p.fail_rehydrate
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let report =
        p.a.relocate_spot("club", node_common::rid("b"))
            .await
            .unwrap();
    assert_eq!(report.actors.len(), 3);
    assert_eq!(
        p.b.request(&report.actors[0], &GetSeen, T).await.unwrap(),
        vec![0, 1, 2, 3]
    );
}

// spec: SB-8.6, SB-14.25, SB-4.1
// After relay-ready the target's owner CAS fails for every member (its store is down): the
// source never reopens the Spot — no member's sealed incarnation is served any more, each
// request it had accepted is answered once (not run twice) — and the source frees the Spot;
// each member comes back on the source as a new incarnation with its dehydrated state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_whose_cas_fails_after_relay_ready_is_not_reopened() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store: Arc<zlink::store::MemoryStore> = Arc::new(zlink::store::MemoryStore::new());
    let b_store = Arc::new(zlink::store::FaultStore::new(store.clone()));
    let p = pair_with(store.clone(), b_store.clone()).await;
    let base = p.a.runtime_metrics();
    let mut members = Vec::new();
    for id in ["band-1", "band-2"] {
        let m =
            p.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("band")))
                .await
                .unwrap();
        assert_eq!(p.a.request(&m, &Add(0), T).await.unwrap(), 1);
        members.push(m);
    }
    let with_members = p.a.runtime_metrics();
    assert!(with_members.lanes_live > base.lanes_live);
    b_store.set_down(true);
    let _ = p.gate.send(false);
    let turns = p.a.counters().turns;
    let hold = {
        let (a, m) = (p.a.clone(), members[0].clone());
        tokio::spawn(async move { a.request(&m, &Hold, T).await })
    };
    node_common::wait_until("hold running", || p.a.counters().turns > turns).await;
    let queued = {
        let (b, m) = (p.b.clone(), members[1].clone());
        tokio::spawn(async move { b.request(&m, &Add(100), T).await })
    };
    node_common::wait_until("the request queued", || {
        p.a.lane_stats(&members[1])
            .is_some_and(|s| s.application_queued == 1)
    })
    .await;
    let relocating = {
        let a = p.a.clone();
        tokio::spawn(async move { a.relocate_spot("band", node_common::rid("b")).await })
    };
    node_common::wait_until("quiescing", || {
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    p.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    match tokio::time::timeout(T, relocating).await.unwrap().unwrap() {
        Err(Error::Failed(Fail::CasFailed(mut ids))) => {
            ids.sort();
            assert_eq!(ids, vec![members[0].id().clone(), members[1].id().clone()]);
        }
        other => panic!("expected a failed CAS, got {other:?}"),
    }
    // Answered once: by the old incarnation before the seal (then its state has it), or
    // refused, never run.
    let ran = tokio::time::timeout(T, queued)
        .await
        .unwrap()
        .unwrap()
        .is_ok();
    // No CAS happened: each member's sealed incarnation ended with the failed relocation
    // (SB-8.6), its record removed with the source's fence; its old ref is refused. Each member
    // is back on the source as a new incarnation in a new Spot of the same name, with the
    // state dehydrated for the move.
    assert_eq!(p.a.relocations().1.failed, 1);
    assert_eq!(p.a.relocations().1.recovered, 2);
    for m in &members {
        let e = p.a.request(m, &GetSeen, T).await.unwrap_err();
        assert_eq!(e.kind(), zlink_wire::ErrorKind::InvalidOperation, "{e}");
        let loc = store.lookup(m.id().clone()).await.unwrap().unwrap();
        assert_eq!(loc.owner_node, node_common::rid("a"));
        assert!(loc.object_generation > m.object_generation());
        let back =
            p.a.get_or_create(zlink::actor::Create::new("counter", m.id().clone()))
                .await
                .unwrap();
        assert_eq!(back.object_generation(), loc.object_generation);
        let seen = if ran && m.id() == members[1].id() {
            vec![0, 100]
        } else {
            vec![0]
        };
        assert_eq!(p.a.request(&back, &GetSeen, T).await.unwrap(), seen);
    }
    // The old Spot's gates and lanes are gone: the source holds exactly one Spot of two
    // members again, as before the move.
    node_common::wait_until("the old Spot freed on the source", || {
        let m = p.a.runtime_metrics();
        m.lanes_live == with_members.lanes_live && m.gates_live == with_members.gates_live
    })
    .await;
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
    b_store.set_down(false);
}

// spec: SB-8.5
// A Spot moves in whole: a target that hosts a Spot of the same name refuses the Restore (the
// moving members would merge into another Spot's gate), so the relocation aborts before
// relay-ready and every member serves on the source as before; the target's own Spot is
// untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_does_not_merge_into_a_spot_of_the_same_name_on_the_target() {
    use live::*;
    const T: std::time::Duration = node_common::TIMEOUT;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    let ours =
        p.a.create(zlink::actor::Create::new("counter", aid("hall-a")).in_spot(spotwide("hall")))
            .await
            .unwrap();
    let theirs =
        p.b.create(zlink::actor::Create::new("counter", aid("hall-b")).in_spot(spotwide("hall")))
            .await
            .unwrap();
    match p.a.relocate_spot("hall", node_common::rid("b")).await {
        Err(Error::Aborted(Abort::TargetFailed)) => {}
        other => panic!("expected an abort, got {other:?}"),
    }
    assert_eq!(p.a.request(&ours, &Add(1), T).await.unwrap(), 1);
    assert_eq!(p.b.request(&theirs, &Add(2), T).await.unwrap(), 1);
    let loc = store.lookup(ours.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, node_common::rid("a"));
    let (list, _) = p.b.relocations();
    assert!(
        list.iter()
            .any(|r| r.outcome.as_deref() == Some("refused: AlreadyHosted")),
        "{list:?}"
    );
}

// spec: EG-7.5
// Debt and lane decision counters are per serial execution object and dropped when it moves:
// one member of a SpotWide Spot relocates alone, before any application turn (so on the source
// its lane counts its factory's lifecycle turn and then its seal's); on the target its lane
// starts from its own first turn (one lifecycle turn: the rehydration), nothing carried; on the
// source its lane goes (one live lane fewer, counted) while its sibling under the same gate
// keeps its own counters, neither cleared nor charged by the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moving_actors_lane_counters_are_dropped_and_its_siblings_kept() {
    use live::*;
    use zlink::runtime::LaneDecision;
    const T: std::time::Duration = node_common::TIMEOUT;
    let p = pair(node_common::memory_store()).await;
    let x =
        p.a.create(zlink::actor::Create::new("counter", aid("duo-x")).in_spot(spotwide("duo")))
            .await
            .unwrap();
    let y =
        p.a.create(zlink::actor::Create::new("counter", aid("duo-y")).in_spot(spotwide("duo")))
            .await
            .unwrap();
    let after_factory = LaneDecision {
        consecutive_lifecycle: 1,
        debt: false,
    };
    assert_eq!(p.a.lane_stats(&x).unwrap().decision, after_factory);
    assert_eq!(p.a.lane_stats(&y).unwrap().decision, after_factory);
    let lanes = p.a.runtime_metrics().lanes_live;
    let report = p.a.relocate(&x, node_common::rid("b")).await.unwrap();
    // The target's lane of x: its own rehydration turn only, not the source's two.
    assert_eq!(
        p.b.lane_stats(&report.actor).unwrap().decision,
        after_factory
    );
    assert_eq!(p.b.request(&report.actor, &Add(1), T).await.unwrap(), 1);
    assert_eq!(
        p.b.lane_stats(&report.actor).unwrap().decision,
        LaneDecision::default()
    );
    // The source: x's lane and its counters freed; y's untouched.
    assert!(p.a.lane_stats(&x).is_none());
    node_common::wait_until("x's lane freed on the source", || {
        p.a.runtime_metrics().lanes_live == lanes - 1
    })
    .await;
    assert_eq!(p.a.lane_stats(&y).unwrap().decision, after_factory);
    assert_eq!(p.a.request(&y, &Add(2), T).await.unwrap(), 1);
}

// The operator's RELOCATE_SPOT on the client port (`zlink-node ctl relocate-spot`): refused to a
// session that did not present the operator credential (counted as a refusal of
// `relocate_spot`), NotFound from a node that does not host the Spot, done for the operator on
// the hosting node — the reply names every member at the target — and counted among the
// client operations; LIST_RELOCATIONS shows it as `spot <name>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_relocates_a_spot_through_the_client_port() {
    use live::{Add, GetSeen, aid};
    use node_common::{mesh_config, rid, wait_pair_up};
    use zlink::node::access::{ClientAccess, OperatorCredential};
    use zlink::node::client::NodeClient;
    use zlink::node::protocol::RelocateSpot;
    use zlink::node::{Node, NodeOptions};
    let store = node_common::memory_store();
    let (_gate, rx) = tokio::sync::watch::channel(true);
    let start = |name: &'static str, peers: Vec<zlink_mesh::PeerAddress>| {
        let store = store.clone();
        let rx = rx.clone();
        async move {
            let mut mc = mesh_config(name);
            mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
            let registry = live::registry(
                rx,
                Arc::new(std::sync::atomic::AtomicU64::new(0)),
                Arc::new(std::sync::atomic::AtomicBool::new(false)),
            );
            let mut access = ClientAccess::new();
            access.operator = Some(OperatorCredential::new(b"op-secret").unwrap());
            let mut o = NodeOptions::new(mc, store, registry).with_client_access(access);
            o.peers = peers;
            Node::start(o).await.unwrap()
        }
    };
    let b = start("b", vec![]).await;
    let a = start("a", vec![b.address()]).await;
    wait_pair_up(&a, &b).await;
    for id in ["deck-1", "deck-2"] {
        let m = a
            .create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("deck")))
            .await
            .unwrap();
        a.send(&m, &Add(7)).await.unwrap();
    }
    let client =
        |n: &Node| NodeClient::connect(n.endpoints().client.as_ref().unwrap(), TIMEOUT).unwrap();
    let req = RelocateSpot {
        spot: "deck".into(),
        to: "b".into(),
    };
    let stranger = client(&a);
    let e = stranger.relocate_spot(&req).await.unwrap_err();
    assert_eq!(e.kind(), zlink_wire::ErrorKind::InvalidOperation, "{e}");
    assert!(
        a.counters()
            .client_refusals
            .keys()
            .any(|k| k.starts_with("relocate_spot/")),
        "{:?}",
        a.counters().client_refusals
    );
    let op_b = client(&b);
    op_b.authenticate(b"op-secret").await.unwrap();
    let e = op_b.relocate_spot(&req).await.unwrap_err();
    assert_eq!(e.kind(), zlink_wire::ErrorKind::NotFound, "{e}");
    let op_a = client(&a);
    op_a.authenticate(b"op-secret").await.unwrap();
    let done = op_a.relocate_spot(&req).await.unwrap();
    assert_eq!((done.spot.as_str(), done.to.as_str()), ("deck", "b"));
    let ids: Vec<&str> = done.actors.iter().map(|r| r.id().as_str()).collect();
    assert_eq!(ids, vec!["deck-1", "deck-2"]);
    for r in &done.actors {
        assert_eq!(r.node(), &rid("b"));
        assert_eq!(b.request(r, &GetSeen, TIMEOUT).await.unwrap(), vec![7]);
    }
    assert_eq!(a.counters().client_operations["relocate_spot"], 2);
    let list = op_a.relocations().await.unwrap();
    assert_eq!(list.counters.committed, 1);
    assert_eq!(list.relocations[0].actor, "spot deck");
    assert_eq!(list.relocations[0].outcome.as_deref(), Some("moved"));
}

// spec: SB-8.5, SB-8.8, SB-14.24
// A bound actor under relays; the target refuses the Restore (its rehydration fails) before
// relay-ready: the source aborts durably, reopens with its queue first, and sends one 44 abort;
// the session owner releases the seal and resubmits what it held to the source. Every relay is
// answered once, in order, by the source; the client's connection stays; no 44 commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_failing_before_relay_ready_sends_44_abort_and_the_session_stays() {
    use live::{Add, Error, GetSeen, aid};
    use node_common::{bind, relay_req, rid, tapped};
    use zlink_mesh::TapDirection;
    let (w, c) = session_world_with(WorldFaults {
        fail_rehydrate: true,
        ..WorldFaults::default()
    })
    .await;
    let actor =
        w.a.create(zlink::actor::Create::new("counter", aid("bound2")))
            .await
            .unwrap();
    bind(&c, &actor).await;
    const N: u64 = 200;
    let sender = {
        let (c, actor) = (c.clone(), actor.clone());
        tokio::spawn(async move {
            let mut replies = Vec::new();
            for i in 0..N {
                replies.push(relay_req(&c, &actor, &Add(i)).await);
            }
            replies
        })
    };
    let turns = w.a.counters().turns;
    node_common::wait_until("relays flowing", || w.a.counters().turns > turns + 20).await;
    match w.a.relocate(&actor, rid("b")).await {
        Err(Error::Aborted(zlink::relocation::AbortReason::TargetFailed)) => {}
        other => panic!("expected an abort, got {other:?}"),
    }
    let replies = tokio::time::timeout(TIMEOUT, sender)
        .await
        .unwrap()
        .unwrap();
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(
            r.unwrap(),
            i as u64 + 1,
            "relay {i}: lost, doubled or another's reply"
        );
    }
    let seen = w.a.request(&actor, &GetSeen, TIMEOUT).await.unwrap();
    assert_eq!(seen, (0..N).collect::<Vec<u64>>());
    // The connection stays, the binding still names the source.
    assert_eq!(relay_req(&c, &actor, &Add(N)).await.unwrap(), N + 1);
    let bound = c.packet(&zlink_apps::demo::session::Bound).await.unwrap();
    assert_eq!(bound[0].node(), &rid("a"));
    let routes = tapped(&w.tap_s, TapDirection::Received, 44);
    assert_eq!(routes.len(), 1);
    assert!(
        matches!(
            &routes[0].decoded.as_ref().unwrap().record,
            zlink_wire::Record::SessionRelocationRoute(zlink_wire::SessionRelocationRoute::Abort(
                _
            ))
        ),
        "not a 44 abort: {:?}",
        routes[0].decoded
    );
    let loc = w.store.lookup(actor.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, rid("a"));
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
}

// spec: SB-8.6, SB-8.3, SB-14.25, SB-14.22
// A bound actor; after relay-ready the target's owner CAS fails (its store is down): no 44 is
// sent, the source never reopens, and the session owner's seal — on its injected clock — closes
// the client's session at SessionRelocationSealTimeout (3 s), not before; the relay it held
// meanwhile is never delivered. Then the actor is servable again through a new incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cas_after_relay_ready_leaves_the_session_to_its_seal_timeout() {
    use live::{Add, Error, aid};
    use node_common::{bind, relay_req, rid, tapped};
    use zlink_mesh::TapDirection;
    use zlink_wire::DisconnectReason;
    let clock = ManualClock::new();
    let (w, c) = session_world_with(WorldFaults {
        clock: Some(clock.clone()),
        faulty_b_store: true,
        ..WorldFaults::default()
    })
    .await;
    let actor =
        w.a.create(zlink::actor::Create::new("counter", aid("bound3")))
            .await
            .unwrap();
    bind(&c, &actor).await;
    assert_eq!(relay_req(&c, &actor, &Add(0)).await.unwrap(), 1);
    w.b_faults.as_ref().unwrap().set_down(true);
    match w.a.relocate(&actor, rid("b")).await {
        Err(Error::Failed(zlink::relocation::FailReason::CasFailed(ids))) => {
            assert_eq!(ids, vec![actor.id().clone()]);
        }
        other => panic!("expected a failed CAS, got {other:?}"),
    }
    // The seal stays: a relay now is held by the session owner, not delivered.
    let held = {
        let (c, actor) = (c.clone(), actor.clone());
        tokio::spawn(async move { relay_req(&c, &actor, &Add(1)).await })
    };
    node_common::wait_until("the relay held", || w.s.session_seals().held >= 1).await;
    clock.advance(Duration::from_millis(2_999));
    c.info()
        .await
        .expect("still served before the seal timeout");
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        tokio::time::timeout(TIMEOUT, c.closed()).await.unwrap(),
        DisconnectReason::RelocationSealTimeout
    );
    assert!(held.await.unwrap().is_err(), "a held relay never delivered");
    assert!(tapped(&w.tap_s, TapDirection::Received, 44).is_empty());
    w.b_faults.as_ref().unwrap().set_down(false);
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
    let again =
        w.b.get_or_create(zlink::actor::Create::new("counter", actor.id().clone()))
            .await
            .unwrap();
    assert!(again.object_generation() > actor.object_generation());
}

/// Polls `actor`'s seen list through `via` until it holds more than `n` timer ticks (`TICK`
/// entries); returns their count.
async fn ticks_beyond(via: &zlink::node::Node, actor: &zlink::actor::ActorRef, n: usize) -> usize {
    use live::GetSeen;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let seen = via.request(actor, &GetSeen, TIMEOUT).await.unwrap();
        let ticks = seen.iter().filter(|s| **s == TICK).count();
        if ticks > n {
            return ticks;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no more than {n} ticks: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

const TICK: u64 = 1_000_000;

// spec: SB-8.9, EG-7.1
// A timer started on the source (`Node::start_timer`) goes on on the target: its ticks kept
// arriving on the source until the seal (a tick queued then travels as captured work), and
// once the target opened dispatch the timer ticks there, in the moved state. Seen failing with the target not restarting the timer (no tick after the move).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_goes_on_on_the_target() {
    use live::*;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    let _ = p.gate.send(true);
    let actor = counter_on(&p.a, "t1").await;
    p.a.start_timer(&actor, Duration::from_millis(5), &Add(TICK))
        .unwrap();
    ticks_beyond(&p.a, &actor, 1).await;
    let report = p.a.relocate(&actor, node_common::rid("b")).await.unwrap();
    let at_move = {
        let seen = p.b.request(&report.actor, &GetSeen, TIMEOUT).await.unwrap();
        seen.iter().filter(|s| **s == TICK).count()
    };
    assert!(at_move >= 2, "the source's ticks travelled in the state");
    ticks_beyond(&p.b, &report.actor, at_move + 2).await;
}

/// Creates a SpotWide Spot `spot` of `ids` on `p.a` (each has seen `Add(0)`), then holds the
/// Spot's gate with a `Hold` turn of its first member (released by `p.gate`).
async fn held_spot(
    p: &live::Pair,
    spot: &str,
    ids: &[&str],
) -> (
    Vec<zlink::actor::ActorRef>,
    tokio::task::JoinHandle<Result<(), zlink::actor::ActorError>>,
) {
    use live::*;
    let mut members = Vec::new();
    for id in ids {
        let m =
            p.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide(spot)))
                .await
                .unwrap();
        assert_eq!(p.a.request(&m, &Add(0), TIMEOUT).await.unwrap(), 1);
        members.push(m);
    }
    let _ = p.gate.send(false);
    let turns = p.a.counters().turns;
    let hold = {
        let (a, m) = (p.a.clone(), members[0].clone());
        tokio::spawn(async move { a.request(&m, &Hold, TIMEOUT).await })
    };
    node_common::wait_until("hold running", || p.a.counters().turns > turns).await;
    (members, hold)
}

// spec: SB-8.9, SB-14.21
// A member's own relocation and its Spot's race, both ways. A member moving alone (its seal
// queued behind the Spot's held gate) makes the Spot's move fail at once with `InProgress`
// naming that member; then the member moves, with the sends queued meanwhile, and its sibling
// stays. A Spot moving (its seal queued behind the gate) makes a member's own move fail at
// once with `InProgress`; then the Spot moves whole. Nothing is lost or doubled either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_move_and_a_members_own_move_race_and_one_is_refused() {
    use live::*;
    let store = node_common::memory_store();
    let p = pair(store.clone()).await;
    // The member first.
    let (members, hold) = held_spot(&p, "duo", &["duo-1", "duo-2"]).await;
    let single = {
        let (a, m) = (p.a.clone(), members[1].clone());
        tokio::spawn(async move { a.relocate(&m, node_common::rid("b")).await })
    };
    node_common::wait_until("the member quiescing", || {
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    for i in 1..=3 {
        p.a.send(&members[1], &Add(i)).await.unwrap();
    }
    match tokio::time::timeout(TIMEOUT, p.a.relocate_spot("duo", node_common::rid("b")))
        .await
        .expect("refused at once")
    {
        Err(Error::InProgress(id)) => assert_eq!(&id, members[1].id()),
        other => panic!("expected InProgress, got {other:?}"),
    }
    p.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    let moved = tokio::time::timeout(TIMEOUT, single)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        p.b.request(&moved.actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        p.a.request(&members[0], &GetSeen, TIMEOUT).await.unwrap(),
        vec![0]
    );
    // The Spot first.
    let (members, hold) = held_spot(&p, "trio", &["trio-1", "trio-2"]).await;
    let whole = {
        let a = p.a.clone();
        tokio::spawn(async move { a.relocate_spot("trio", node_common::rid("b")).await })
    };
    node_common::wait_until("the Spot quiescing", || {
        p.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    for i in 1..=3 {
        p.a.send(&members[1], &Add(i)).await.unwrap();
    }
    match tokio::time::timeout(TIMEOUT, p.a.relocate(&members[1], node_common::rid("b")))
        .await
        .expect("refused at once")
    {
        Err(Error::InProgress(id)) => assert_eq!(&id, members[1].id()),
        other => panic!("expected InProgress, got {other:?}"),
    }
    p.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    let moved = tokio::time::timeout(TIMEOUT, whole)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(moved.actors.len(), 2);
    assert_eq!(
        p.b.request(&moved.actors[0], &GetSeen, TIMEOUT)
            .await
            .unwrap(),
        vec![0]
    );
    assert_eq!(
        p.b.request(&moved.actors[1], &GetSeen, TIMEOUT)
            .await
            .unwrap(),
        vec![0, 1, 2, 3]
    );
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
}

// spec: SB-8.9, EG-14
// An actor still activating cannot move: the operator's RELOCATE of it is refused at once as
// `NotReady` (`Unavailable`, "still activating"), not as an actor this node does not own; once
// Ready, the same operation moves it. Its factory waits behind its SpotWide Spot's gate, held
// by a sibling's turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relocating_an_actor_still_activating_is_refused_as_not_ready() {
    use live::{Add, GetSeen, Hold, aid};
    use node_common::{mesh_config, wait_pair_up};
    use zlink::node::access::{ClientAccess, OperatorCredential};
    use zlink::node::client::NodeClient;
    use zlink::node::protocol::RelocateActor;
    use zlink::node::{Node, NodeOptions};
    let store = node_common::memory_store();
    let (gate, rx) = tokio::sync::watch::channel(true);
    let start = |name: &'static str, peers: Vec<zlink_mesh::PeerAddress>| {
        let store = store.clone();
        let rx = rx.clone();
        async move {
            let mut mc = mesh_config(name);
            mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
            let registry = live::registry(
                rx,
                Arc::new(std::sync::atomic::AtomicU64::new(0)),
                Arc::new(std::sync::atomic::AtomicBool::new(false)),
            );
            let mut access = ClientAccess::new();
            access.operator = Some(OperatorCredential::new(b"op-secret").unwrap());
            let mut o = NodeOptions::new(mc, store, registry).with_client_access(access);
            o.peers = peers;
            Node::start(o).await.unwrap()
        }
    };
    let b = start("b", vec![]).await;
    let a = start("a", vec![b.address()]).await;
    wait_pair_up(&a, &b).await;
    let first = a
        .create(zlink::actor::Create::new("counter", aid("early")).in_spot(spotwide("lobby")))
        .await
        .unwrap();
    let _ = gate.send(false);
    let turns = a.counters().turns;
    let hold = {
        let (a, m) = (a.clone(), first.clone());
        tokio::spawn(async move { a.request(&m, &Hold, TIMEOUT).await })
    };
    node_common::wait_until("hold running", || a.counters().turns > turns).await;
    let late = {
        let a = a.clone();
        tokio::spawn(async move {
            a.create(zlink::actor::Create::new("counter", aid("late")).in_spot(spotwide("lobby")))
                .await
        })
    };
    // Reserved in the store (Activating), its factory waiting behind the held gate.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while store.lookup(aid("late")).await.unwrap().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no reservation");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let op = NodeClient::connect(a.endpoints().client.as_ref().unwrap(), TIMEOUT).unwrap();
    op.authenticate(b"op-secret").await.unwrap();
    let req = RelocateActor {
        actor_id: "late".into(),
        to: "b".into(),
    };
    let e = tokio::time::timeout(TIMEOUT, op.relocate(&req))
        .await
        .expect("refused at once")
        .unwrap_err();
    assert_eq!(e.kind(), zlink_wire::ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("still activating"), "{e}");
    gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    let late = tokio::time::timeout(TIMEOUT, late)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(a.request(&late, &Add(5), TIMEOUT).await.unwrap(), 1);
    let done = op.relocate(&req).await.unwrap();
    assert_eq!(done.to, "b");
    assert_eq!(
        b.request(&done.actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![5]
    );
}

// spec: SB-8.9, SB-8.1, SB-5.12, SB-6.3
// A second session binds the actor after its relocation started on the source but before the
// source's first store read (the relocation's binding snapshot was taken with the first
// session's binding): the binding sealed and carried to the target is the one current when
// the relocation takes the seal — the new session's — so that session gets its 42/44 and its
// relays run on the target after the move, once each, in order. (Before: the Restore carried
// the replaced binding, the new session was never sealed, and its relays were refused by the
// target's binding slot.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_during_a_relocations_start_is_the_binding_that_moves() {
    use live::{Add, GetSeen, aid};
    use node_common::{bind, client_of, relay_req, rid, tapped};
    use zlink_mesh::TapDirection;
    let (w, c1) = session_world_with(WorldFaults {
        gated_a_store: true,
        ..WorldFaults::default()
    })
    .await;
    let gate = w.a_gate.clone().unwrap();
    let actor =
        w.a.create(zlink::actor::Create::new("counter", aid("rebound")))
            .await
            .unwrap();
    bind(&c1, &actor).await;
    assert_eq!(relay_req(&c1, &actor, &Add(0)).await.unwrap(), 1);
    gate.arm();
    let waiting = gate.waiting.notified();
    let relocating = {
        let (a, actor) = (w.a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    tokio::time::timeout(TIMEOUT, waiting)
        .await
        .expect("the relocation reads the store");
    // The relocation started and holds; another session binds the actor now.
    let c2 = client_of(&w.s);
    bind(&c2, &actor).await;
    gate.release();
    let moved = tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(moved.to, rid("b"));
    for i in 1..=5u64 {
        assert_eq!(relay_req(&c2, &actor, &Add(i)).await.unwrap(), i + 1);
    }
    assert_eq!(
        w.b.request(&moved.actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0, 1, 2, 3, 4, 5]
    );
    let bound = c2.packet(&zlink_apps::demo::session::Bound).await.unwrap();
    assert_eq!(bound[0].node(), &rid("b"));
    // One seal and one commit, both for the new session's binding.
    assert_eq!(tapped(&w.tap_s, TapDirection::Received, 42).len(), 1);
    assert_eq!(tapped(&w.tap_s, TapDirection::Received, 44).len(), 1);
}

// spec: SB-8.9, SB-5.3, SB-8.4, SB-14.21
// The 1 s cutover fallback through the drivers on an injected clock: a bound actor on `a` has
// three of its session's relays queued behind a held turn when it starts moving to `b`; the
// source is only slow (its capture is held after relay-ready), so `b` hears no cutover. Three
// more relays of the session wait in its seal. At 999 ms on `b`'s clock nothing happens; at
// 1,000 ms `b` falls back: `cutover_timeout` counted, the CAS names `b`, the 44 releases the
// held relays to `b`. They reach `b` before the source's captured work, yet run after it: the
// session's relays run 0..6 in order, each once, and the relocation reports `moved`. Seen
// failing with the source stream's wait removed (`behind_source` false) and with the fallback
// removed (no commit: the wait for `b` to own the actor times out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cutover_fallback_keeps_captured_work_ahead_of_released_relays() {
    use live::{Add, GetSeen, Hold, aid};
    use node_common::{bind, relay_packet, rid, tapped, wait_until};
    use zlink_mesh::TapDirection;
    let clock = ManualClock::new();
    let (w, c) = session_world_with(WorldFaults {
        target_clock: Some(clock.clone()),
        ..WorldFaults::default()
    })
    .await;
    let actor =
        w.a.create(zlink::actor::Create::new("counter", aid("fallback1")))
            .await
            .unwrap();
    bind(&c, &actor).await;
    let send = |i: u64| {
        let p = relay_packet(&actor, &Add(i));
        zlink_apps::demo::session::RelaySend {
            actor_id: p.actor_id,
            key: p.key,
            payload: p.payload,
        }
    };
    // A held turn; three relays of the session queue behind it on `a`.
    w.gate.send(false).unwrap();
    let turns = w.a.counters().turns;
    let hold = {
        let (a, actor) = (w.a.clone(), actor.clone());
        tokio::spawn(async move { a.request(&actor, &Hold, TIMEOUT).await })
    };
    wait_until("hold running", || w.a.counters().turns > turns).await;
    for i in 0..3 {
        c.packet_send(&send(i)).await.unwrap();
    }
    wait_until("three relays queued on a", || {
        w.a.lane_stats(&actor)
            .is_some_and(|l| l.application_queued >= 3)
    })
    .await;
    // The source is slow: it captures only when the test lets it.
    let capture = w.a.hold_relocation_capture_for_tests();
    let relocating = {
        let (a, actor) = (w.a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("quiescing", || {
        w.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    w.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    wait_until("b relay-ready", || {
        w.b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    // Three more relays wait in the session's seal.
    for i in 3..6 {
        c.packet_send(&send(i)).await.unwrap();
    }
    wait_until("three relays held by the seal", || {
        w.s.session_seals().held == 3
    })
    .await;
    clock.advance(std::time::Duration::from_millis(999));
    assert_eq!(w.b.relocations().1.cutover_timeouts, 0);
    clock.advance(std::time::Duration::from_millis(1));
    // The fallback commits: the store names `b`, the 44 releases the held relays to `b`.
    wait_until("b counted its cutover timeout", || {
        w.b.relocations().1.cutover_timeouts == 1
    })
    .await;
    let mut owner = None;
    for _ in 0..20_000 {
        let l = w.store.lookup(actor.id().clone()).await.unwrap().unwrap();
        if l.owner_node == rid("b") {
            owner = Some(l.owner_node);
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(owner, Some(rid("b")), "the fallback's CAS names b");
    wait_until("the released relays reached b", || {
        tapped(&w.tap_b, TapDirection::Received, 24).len() >= 3
    })
    .await;
    assert_eq!(w.s.session_seals().held, 0);
    // The source goes on: its captured work, then its cutover.
    drop(capture);
    let report = tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(report.relayed, 3);
    let seen = w.b.request(&report.actor, &GetSeen, TIMEOUT).await.unwrap();
    assert_eq!(seen, (0..6).collect::<Vec<u64>>(), "the session's order");
    let (list, counters) = w.b.relocations();
    assert_eq!(counters.cutover_timeouts, 1);
    assert_eq!(counters.source_waits_expired, 0);
    assert_eq!(counters.relayed_after_source_wait, 0);
    assert!(
        list.iter()
            .any(|r| r.outcome.as_deref() == Some("committed (Timeout)")),
        "{list:?}"
    );
    wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
}

// spec: SB-8.5, SB-14.24
// What a Restore can make the target hold is bounded: a target whose `max_restore_timers` is 2
// refuses the Restore of an actor with 3 timers before relay-ready (counted as
// `too_many_timers`, nothing started there); the relocation aborts and the actor keeps running
// on the source, its timers ticking. The same actor with 2 timers moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_with_more_timers_than_the_target_starts_is_refused_and_counted() {
    use live::{Add, Error, aid};
    use node_common::{mesh_config, rid, wait_pair_up};
    use zlink::node::{Node, NodeOptions};
    let store = node_common::memory_store();
    let (_gate, rx) = tokio::sync::watch::channel(true);
    let start = |name: &'static str, peers: Vec<zlink_mesh::PeerAddress>, timers: usize| {
        let store = store.clone();
        let rx = rx.clone();
        async move {
            let registry = live::registry(
                rx,
                Arc::new(std::sync::atomic::AtomicU64::new(0)),
                Arc::new(std::sync::atomic::AtomicBool::new(false)),
            );
            let mut o = NodeOptions::new(mesh_config(name), store, registry);
            o.peers = peers;
            o.relocation.max_restore_timers = timers;
            Node::start(o).await.unwrap()
        }
    };
    let b = start("b", vec![], 2).await;
    let a = start("a", vec![b.address()], 2).await;
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(zlink::actor::Create::new("counter", aid("ticking")))
        .await
        .unwrap();
    for _ in 0..3 {
        a.start_timer(&actor, Duration::from_millis(5), &Add(TICK))
            .unwrap();
    }
    ticks_beyond(&a, &actor, 3).await;
    match tokio::time::timeout(TIMEOUT, a.relocate(&actor, rid("b")))
        .await
        .unwrap()
    {
        Err(Error::Aborted(zlink::relocation::AbortReason::TargetFailed)) => {}
        other => panic!("expected an abort, got {other:?}"),
    }
    assert_eq!(b.relocations().1.refused_too_many_timers, 1);
    assert_eq!(a.relocations().1.aborted, 1);
    // Still served here, its timers still ticking.
    let seen = ticks_beyond(&a, &actor, 3).await;
    ticks_beyond(&a, &actor, seen).await;
    node_common::wait_until("relocation state freed", || {
        a.relocations_in_progress() == 0 && b.relocations_in_progress() == 0
    })
    .await;
    // An actor with two timers moves, and they tick on the target.
    let two = a
        .create(zlink::actor::Create::new("counter", aid("ticking-2")))
        .await
        .unwrap();
    for _ in 0..2 {
        a.start_timer(&two, Duration::from_millis(5), &Add(TICK))
            .unwrap();
    }
    let moved = tokio::time::timeout(TIMEOUT, a.relocate(&two, rid("b")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.to, rid("b"));
    let at_move = ticks_beyond(&b, &moved.actor, 0).await;
    ticks_beyond(&b, &moved.actor, at_move + 2).await;
    assert_eq!(b.relocations().1.refused_too_many_timers, 1);
}

/// A client session bound to the `counter`s `ids` in the SpotWide Spot `hooked` on `a`
/// disconnects while they move to `b` (the whole Spot when `spot`, else the one actor), after
/// the move sealed them and the binding left in the Restore (the source's capture is held):
/// the two 38 disconnects wait on `a` for the move's end (counted `held`), then travel to `b`
/// by Message Follow. Each actor's `OnDisconnectActor` runs once, on `b`, and `b` holds no
/// binding of it afterwards.
async fn disconnect_mid_move(spot: bool, ids: &[&str]) {
    use live::aid;
    use node_common::{bind, client_of, rid, wait_until};
    let runs = HookRuns::default();
    let (w, _c) = session_world_with(WorldFaults {
        hooks: Some(runs.clone()),
        ..WorldFaults::default()
    })
    .await;
    let c = client_of(&w.s);
    let mut members = Vec::new();
    for id in ids {
        let m =
            w.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("hooked")))
                .await
                .unwrap();
        bind(&c, &m).await;
        members.push(m);
    }
    let capture = w.a.hold_relocation_capture_for_tests();
    let relocating = {
        let (a, first) = (w.a.clone(), members[0].clone());
        tokio::spawn(async move {
            if spot {
                a.relocate_spot("hooked", rid("b")).await.map(|r| r.actors)
            } else {
                a.relocate(&first, rid("b")).await.map(|r| vec![r.actor])
            }
        })
    };
    wait_until("b relay-ready", || {
        w.b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    c.close().await;
    wait_until("the disconnects held on a", || {
        w.a.follow_counters().held == ids.len() as u64
    })
    .await;
    assert!(runs.runs().is_empty(), "no hook runs while the move holds");
    drop(capture);
    let moved = tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(moved.len(), ids.len());
    let unbound = |n: &zlink::node::Node| {
        n.list_actors(&zlink::node::protocol::ListActors::default())
            .actors
            .iter()
            .filter(|e| ids.contains(&e.actor_id.as_str()))
            .all(|e| !e.bound)
    };
    wait_until("each hook ran and b holds no binding", || {
        runs.runs().len() == ids.len() && unbound(&w.b)
    })
    .await;
    let mut ran = runs.runs();
    ran.sort();
    let mut expected: Vec<(String, String)> = ids
        .iter()
        .map(|id| ("b".to_owned(), (*id).to_owned()))
        .collect();
    expected.sort();
    assert_eq!(ran, expected, "each hook once, on the target");
    assert!(w.a.follow_counters().forwarded >= ids.len() as u64);
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
}

// spec: SB-7.3, SB-7.4, SB-8.4, SB-5.12
// A session bound to two members of a SpotWide Spot disconnects while the Spot moves, after
// its seal (the Spot's lane is sealed: a hook queued there would be dropped with the Spot):
// each member's `OnDisconnectActor` runs exactly once, on the target, which ends the moved
// binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_arriving_while_a_spot_moves_runs_its_hook_once_on_the_target() {
    disconnect_mid_move(true, &["hooked-p1", "hooked-p2"]).await;
}

// spec: SB-7.3, SB-7.4, SB-8.4, SB-5.12
// The same for one actor moving alone (its Spot stays and is not sealed): the hook does not
// run on the source while the binding travels, it runs once on the target, which ends the
// moved binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_arriving_while_an_actor_moves_runs_its_hook_once_on_the_target() {
    disconnect_mid_move(false, &["hooked-solo"]).await;
}

// spec: SB-7.3, SB-7.4, SB-8.4, SB-5.12, SB-9
// The session owner of a binding dies (its mesh I/O stops, as after `kill -9`: no 38 is sent)
// while the bound actor moves, after the move sealed it and the binding left in the Restore.
// The source sees the session owner's lifecycle end while the binding travels: it does not
// run the hook on its own slot (the target would keep the moved binding, or run the hook a
// second time when it sees the end after the commit); it holds the end until the move ends,
// then forwards it once. The hook runs exactly once, on the target, which ends the binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_owner_dying_while_its_bound_actor_moves_ends_the_binding_once_on_the_target() {
    use live::aid;
    use node_common::{bind, client_of, rid, wait_until};
    let runs = HookRuns::default();
    // Manual clocks: no seal timeout on `s`, no cutover fallback on `b` while `a` is held.
    let (w, _c) = session_world_with(WorldFaults {
        hooks: Some(runs.clone()),
        clock: Some(ManualClock::new()),
        target_clock: Some(ManualClock::new()),
        a_clock: Some(ManualClock::new()),
        ..WorldFaults::default()
    })
    .await;
    let c = client_of(&w.s);
    let id = "owner-lost";
    let m =
        w.a.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("hooked")))
            .await
            .unwrap();
    bind(&c, &m).await;
    let capture = w.a.hold_relocation_capture_for_tests();
    let relocating = {
        let (a, m) = (w.a.clone(), m.clone());
        tokio::spawn(async move { a.relocate(&m, rid("b")).await })
    };
    wait_until("b relay-ready", || {
        w.b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    // The session owner goes silent: `a` and `b` see its lifecycle end (peer timeout).
    let io = w.s.mesh().hold_io_for_tests();
    wait_until("a ends the binding of the gone session owner", || {
        w.a.counters().bindings_owner_lost == 1
    })
    .await;
    wait_until("the end held on a, or its hook run", || {
        w.a.follow_counters().held == 1 || !runs.runs().is_empty()
    })
    .await;
    assert!(runs.runs().is_empty(), "no hook runs while the move holds");
    wait_until("s is down at b", || {
        w.b.mesh().peer_generation(&rid("s")).is_none()
    })
    .await;
    drop(capture);
    let moved = tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(moved.to, rid("b"));
    let unbound = |n: &zlink::node::Node| {
        n.list_actors(&zlink::node::protocol::ListActors::default())
            .actors
            .iter()
            .filter(|e| e.actor_id.as_str() == id)
            .all(|e| !e.bound)
    };
    wait_until("the hook ran and b holds no binding", || {
        !runs.runs().is_empty() && unbound(&w.b)
    })
    .await;
    node_common::wait_until("relocation state freed", || {
        w.a.relocations_in_progress() == 0 && w.b.relocations_in_progress() == 0
    })
    .await;
    assert_eq!(
        runs.runs(),
        vec![("b".to_owned(), id.to_owned())],
        "the hook once, on the target"
    );
    drop(io);
}

// spec: SB-5.12, SB-8.5
// A relocation that aborts before it sealed the runtime (a session refuses the seal: it still
// holds the seal of the move before, whose 44 b holds back) ends its Follow seal entry: the
// actor serves on, and a new bind is registered at once (not refused `Unavailable` until the
// entry's hold time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relocation_aborted_at_its_seals_ends_its_seal_entry() {
    use live::aid;
    use node_common::{bind, client_of, rid};
    use zlink::node::RelocationStep;
    let (w, _c) = session_world_with(WorldFaults {
        clock: Some(ManualClock::new()),
        target_clock: Some(ManualClock::new()),
        a_clock: Some(ManualClock::new()),
        ..WorldFaults::default()
    })
    .await;
    let c = client_of(&w.s);
    let m =
        w.a.create(zlink::actor::Create::new("counter", aid("resealed")))
            .await
            .unwrap();
    bind(&c, &m).await;
    let routes = w.b.hold_relocation_step_for_tests(RelocationStep::Route);
    let on_b = tokio::time::timeout(TIMEOUT, w.a.relocate(&m, rid("b")))
        .await
        .unwrap()
        .unwrap()
        .actor;
    match tokio::time::timeout(TIMEOUT, w.b.relocate(&on_b, rid("s")))
        .await
        .unwrap()
    {
        Err(zlink::node::RelocateError::Aborted(AbortReason::SealRejected)) => {}
        other => panic!("expected a refused seal, got {other:?}"),
    }
    let c2 = client_of(&w.s);
    let bound = c2
        .packet(&zlink_apps::demo::session::Bind {
            actor: on_b.clone(),
        })
        .await
        .expect("bound at once after the abort");
    assert_eq!(bound.node(), &rid("b"));
    drop(routes);
}

// spec: SB-8.6, SB-4.1
// The recovery after a failed relocation is retried while the store is out of reach: the
// target's CAS fails (its store is down) and the source's store is down too when the result
// comes, so the first attempt at bringing the actor back fails. The relocation reports the
// failure with one retry pending; the record still names the source's sealed incarnation, so
// another node's get_or_create finds it held (no blank actor is created in the gap). Once the
// source's store is back, 100 ms later on the source's clock the retry replaces the record in
// one write and the actor is back on the source with its state, as a new incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_that_cannot_reach_the_store_is_retried_on_the_source_clock() {
    use live::{Add, Error, Fail, GetSeen, aid};
    use node_common::{mesh_config, rid, wait_pair_up, wait_until};
    use zlink::node::{Node, NodeOptions};
    use zlink::store::FaultStore;
    let shared = Arc::new(MemoryStore::new());
    let a_store = Arc::new(FaultStore::new(shared.clone()));
    let b_store = Arc::new(FaultStore::new(shared.clone()));
    let clock = ManualClock::new();
    let (_gate, rx) = tokio::sync::watch::channel(true);
    let registry = || {
        live::registry(
            rx.clone(),
            Arc::new(std::sync::atomic::AtomicU64::new(0)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        )
    };
    let b = Node::start(NodeOptions::new(
        mesh_config("b"),
        b_store.clone(),
        registry(),
    ))
    .await
    .unwrap();
    let mut o = NodeOptions::new(mesh_config("a"), a_store.clone(), registry());
    o.peers = vec![b.address()];
    o.clock = Arc::new(clock.clone());
    let a = Node::start(o).await.unwrap();
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(zlink::actor::Create::new("counter", aid("retried")))
        .await
        .unwrap();
    a.send(&actor, &Add(0)).await.unwrap();
    assert_eq!(a.request(&actor, &GetSeen, TIMEOUT).await.unwrap(), vec![0]);

    // Past relay-ready both stores go down: the target's CAS fails, and so does the source's
    // first recovery attempt.
    let capture = a.hold_relocation_capture_for_tests();
    let relocating = {
        let (a, actor) = (a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("b relay-ready", || {
        b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    a_store.set_down(true);
    b_store.set_down(true);
    drop(capture);
    match tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
    {
        Err(Error::Failed(Fail::CasFailed(ids))) => assert_eq!(ids, vec![actor.id().clone()]),
        other => panic!("expected a failed CAS, got {other:?}"),
    }
    let c = a.relocations().1;
    assert_eq!((c.recovered, c.recovery_retries, c.unrecovered), (0, 1, 0));

    // The record was neither removed nor replaced: another node finds the actor held by `a`.
    b_store.set_down(false);
    let held = b
        .get_or_create(zlink::actor::Create::new("counter", actor.id().clone()))
        .await
        .unwrap();
    assert_eq!(
        (held.node(), held.object_generation()),
        (&rid("a"), actor.object_generation())
    );

    // The store is back; the retry is due 100 ms after the first attempt on `a`'s clock.
    a_store.set_down(false);
    clock.advance(Duration::from_millis(100));
    wait_until("recovered by the retry", || {
        a.relocations().1.recovered == 1
    })
    .await;
    let c = a.relocations().1;
    assert_eq!((c.recovery_retries, c.unrecovered), (1, 0));
    let loc = shared.lookup(actor.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, rid("a"));
    assert!(loc.object_generation > actor.object_generation());
    let again = b
        .get_or_create(zlink::actor::Create::new("counter", actor.id().clone()))
        .await
        .unwrap();
    assert_eq!(again.object_generation(), loc.object_generation);
    assert_eq!(b.request(&again, &GetSeen, TIMEOUT).await.unwrap(), vec![0]);
}

/// Two members of the SpotWide Spot `grp` on `a`, a third on `b` (a Spot of the same name
/// there); `a`'s and `s`'s node clocks are manual, so no cutover timeout falls back while a
/// test holds a capture.
async fn split_spot() -> (Node3, [zlink::actor::ActorRef; 3]) {
    use live::aid;
    let (w, _c) = session_world_with(WorldFaults {
        clock: Some(ManualClock::new()),
        a_clock: Some(ManualClock::new()),
        ..WorldFaults::default()
    })
    .await;
    let on = |n: &zlink::node::Node, id: &'static str| {
        let n = n.clone();
        async move {
            n.create(zlink::actor::Create::new("counter", aid(id)).in_spot(spotwide("grp")))
                .await
                .unwrap()
        }
    };
    let m0 = on(&w.a, "grp-0").await;
    let m1 = on(&w.a, "grp-1").await;
    let m3 = on(&w.b, "grp-3").await;
    assert_eq!(m3.node(), &node_common::rid("b"));
    (w, [m0, m1, m3])
}

// spec: SB-8.5, SB-8.9, EG-14
// A member of Spot `grp` moves alone from `b` to `a` while `a`'s Spot `grp` moves to `s` (held
// after relay-ready): `a` refuses the member's Restore before relay-ready (its Spot takes no
// member while it moves), so `b` aborts and keeps serving it; the Spot's move then completes,
// and the member moves to `a` afterwards and is served there. (Before, `a` took the Restore,
// the CAS named `a`, and the moved actor never opened: nothing served it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_moving_into_a_node_whose_spot_moves_away_is_refused_and_stays_served() {
    use live::{Abort, Add, Error, GetSeen};
    use node_common::{rid, wait_until};
    let (w, [_m0, _m1, m3]) = split_spot().await;
    assert_eq!(w.b.request(&m3, &Add(0), TIMEOUT).await.unwrap(), 1);
    let capture = w.a.hold_relocation_capture_for_tests();
    let spot_move = {
        let a = w.a.clone();
        tokio::spawn(async move { a.relocate_spot("grp", rid("s")).await })
    };
    wait_until("s relay-ready", || {
        w.s.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    match w.b.relocate(&m3, rid("a")).await {
        Err(Error::Aborted(Abort::TargetFailed)) => {}
        other => panic!("expected an abort before relay-ready, got {other:?}"),
    }
    assert_eq!(w.b.request(&m3, &Add(1), TIMEOUT).await.unwrap(), 2);
    drop(capture);
    let moved = tokio::time::timeout(TIMEOUT, spot_move)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(moved.actors.len(), 2);
    let report = w.b.relocate(&m3, rid("a")).await.unwrap();
    assert_eq!(
        w.a.request(&report.actor, &Add(2), TIMEOUT).await.unwrap(),
        3
    );
    assert_eq!(
        w.a.request(&report.actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0, 1, 2]
    );
    wait_until("relocation state freed", || {
        [&w.a, &w.b, &w.s]
            .iter()
            .all(|n| n.relocations_in_progress() == 0)
    })
    .await;
}

// spec: SB-8.9, EG-14
// The other order: while a member's Restore is installed on `a` (its source `b` holds the
// capture after relay-ready), `a`'s Spot `grp` does not start a move (`SpotBusy`: a member
// moves in). The member then commits and is served on `a`, and the Spot — now three members —
// moves to `s` whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_with_a_member_moving_in_does_not_start_a_move() {
    use live::{Add, Error, GetSeen};
    use node_common::{rid, wait_until};
    let (w, [_m0, _m1, m3]) = split_spot().await;
    let capture = w.b.hold_relocation_capture_for_tests();
    let member_move = {
        let (b, m3) = (w.b.clone(), m3.clone());
        tokio::spawn(async move { b.relocate(&m3, rid("a")).await })
    };
    wait_until("a relay-ready", || {
        w.a.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    match w.a.relocate_spot("grp", rid("s")).await {
        Err(Error::SpotBusy(s)) => assert_eq!(s, "grp"),
        other => panic!("expected SpotBusy, got {other:?}"),
    }
    drop(capture);
    let report = tokio::time::timeout(TIMEOUT, member_move)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        w.a.request(&report.actor, &Add(0), TIMEOUT).await.unwrap(),
        1
    );
    let moved = w.a.relocate_spot("grp", rid("s")).await.unwrap();
    assert_eq!(moved.actors.len(), 3);
    let m3_at_s = moved
        .actors
        .iter()
        .find(|r| r.id() == m3.id())
        .unwrap()
        .clone();
    assert_eq!(
        w.s.request(&m3_at_s, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0]
    );
    wait_until("relocation state freed", || {
        [&w.a, &w.b, &w.s]
            .iter()
            .all(|n| n.relocations_in_progress() == 0)
    })
    .await;
}

// spec: SB-10, SB-8.9, SB-8.4
// The source begins a graceful shutdown while it moves a bound actor (after the target's
// relay-ready, before its capture; nothing queued there): the shutdown drains the relocation
// as infrastructure work before it ends the node's actors — the relocation ends first, and
// commits: the state arrives on the target, the session gets its 44 commit and its relays go
// on to the target. Then the shutdown completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_shutting_down_mid_move_drains_the_move_first() {
    use live::{Add, Error, GetSeen, aid};
    use node_common::{bind, relay_req, rid, tapped, wait_until};
    use std::sync::atomic::{AtomicBool, Ordering};
    use zlink_mesh::TapDirection;
    let (w, c) = session_world().await;
    let actor =
        w.a.create(zlink::actor::Create::new("counter", aid("closing1")))
            .await
            .unwrap();
    bind(&c, &actor).await;
    for i in 0..3 {
        assert_eq!(relay_req(&c, &actor, &Add(i)).await.unwrap(), i + 1);
    }
    let capture = w.a.hold_relocation_capture_for_tests();
    let moved = Arc::new(AtomicBool::new(false));
    let relocating = {
        let (a, actor, moved) = (w.a.clone(), actor.clone(), moved.clone());
        tokio::spawn(async move {
            let r = a.relocate(&actor, rid("b")).await;
            moved.store(true, Ordering::SeqCst);
            r
        })
    };
    wait_until("b relay-ready", || {
        w.b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    let shutdown = {
        let (a, moved) = (w.a.clone(), moved.clone());
        tokio::spawn(async move {
            a.shutdown(std::time::Duration::from_secs(15)).await;
            moved.load(Ordering::SeqCst)
        })
    };
    // The shutdown has begun once `a` refuses to start a relocation as shutting down.
    let began = tokio::time::Instant::now() + TIMEOUT;
    while !matches!(
        w.a.relocate(&actor, rid("b")).await,
        Err(Error::ShuttingDown)
    ) {
        assert!(tokio::time::Instant::now() < began, "shutdown never began");
        tokio::task::yield_now().await;
    }
    drop(capture);
    let drained_first = tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .expect("shutdown completes")
        .unwrap();
    assert!(drained_first, "the shutdown waited for the relocation");
    let report = tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let seen = w.b.request(&report.actor, &GetSeen, TIMEOUT).await.unwrap();
    assert_eq!(seen, vec![0, 1, 2], "the state moved");
    let routes = tapped(&w.tap_s, TapDirection::Received, 44);
    assert_eq!(routes.len(), 1);
    assert!(matches!(
        &routes[0].decoded.as_ref().unwrap().record,
        zlink_wire::Record::SessionRelocationRoute(zlink_wire::SessionRelocationRoute::Commit(_))
    ));
    // The session goes on with the moved actor on `b`.
    assert_eq!(relay_req(&c, &actor, &Add(3)).await.unwrap(), 4);
}

// spec: SB-10, SB-8.6
// The target begins a graceful shutdown after its relay-ready, before the cutover: a node that
// is shutting down takes no actor in (it would end with its other actors once drained, its
// state with it), so it does not try the owner CAS. The relocation fails past relay-ready
// (SB-8.6): the source never reopens the sealed incarnation, and brings the actor back as a new
// incarnation with the state it dehydrated — nothing lost. The target's shutdown completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_shutting_down_mid_move_takes_nothing_in_and_the_source_keeps_the_state() {
    use live::{Add, Error, Fail, GetSeen, aid};
    use node_common::{rid, wait_until};
    let (w, _c) = session_world().await;
    let actor =
        w.a.create(zlink::actor::Create::new("counter", aid("closing2")))
            .await
            .unwrap();
    for i in 0..3 {
        assert_eq!(w.a.request(&actor, &Add(i), TIMEOUT).await.unwrap(), i + 1);
    }
    let capture = w.a.hold_relocation_capture_for_tests();
    let relocating = {
        let (a, actor) = (w.a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("b relay-ready", || {
        w.b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    let shutdown = {
        let b = w.b.clone();
        tokio::spawn(async move { b.shutdown(std::time::Duration::from_secs(15)).await })
    };
    let began = tokio::time::Instant::now() + TIMEOUT;
    while !matches!(
        w.b.relocate(&actor, rid("a")).await,
        Err(Error::ShuttingDown)
    ) {
        assert!(tokio::time::Instant::now() < began, "shutdown never began");
        tokio::task::yield_now().await;
    }
    drop(capture);
    match tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
    {
        Err(Error::Failed(Fail::CasFailed(ids))) => assert_eq!(ids, vec![actor.id().clone()]),
        other => panic!("expected a failed CAS, got {other:?}"),
    }
    tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .expect("shutdown completes")
        .unwrap();
    let back = w.a.get(actor.id()).await.unwrap();
    assert_eq!(back.node(), &rid("a"));
    assert_ne!(back.object_generation(), actor.object_generation());
    assert_eq!(
        w.a.request(&back, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0, 1, 2],
        "the state came back"
    );
}

// spec: SB-7.3, SB-7.4, SB-8.5
// A client disconnects while its bound actor's move is quiescing (the actor busy in a turn,
// its binding read and sealed): the 38 disconnect waits on the source (counted `held`); the
// target refuses the Restore, the move aborts, and the source then runs the hook once and
// removes the binding — the actor stays and is served there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_held_by_a_move_that_aborts_runs_its_hook_on_the_source() {
    use live::{Abort, Add, Error, Hold, aid};
    use node_common::{bind, client_of, rid, wait_until};
    let runs = HookRuns::default();
    let (w, _c) = session_world_with(WorldFaults {
        hooks: Some(runs.clone()),
        fail_rehydrate: true,
        ..WorldFaults::default()
    })
    .await;
    let c = client_of(&w.s);
    let actor =
        w.a.create(
            zlink::actor::Create::new("counter", aid("hooked-abort")).in_spot(spotwide("hooked")),
        )
        .await
        .unwrap();
    bind(&c, &actor).await;
    w.gate.send(false).unwrap();
    let turns = w.a.counters().turns;
    let hold = {
        let (a, actor) = (w.a.clone(), actor.clone());
        tokio::spawn(async move { a.request(&actor, &Hold, TIMEOUT).await })
    };
    wait_until("hold running", || w.a.counters().turns > turns).await;
    let relocating = {
        let (a, actor) = (w.a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("quiescing", || {
        w.a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    c.close().await;
    wait_until("the disconnect held on a", || {
        w.a.follow_counters().held == 1
    })
    .await;
    assert!(runs.runs().is_empty(), "no hook runs while the move holds");
    w.gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    match tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
    {
        Err(Error::Aborted(Abort::TargetFailed)) => {}
        other => panic!("expected an abort, got {other:?}"),
    }
    let unbound = || {
        w.a.list_actors(&zlink::node::protocol::ListActors::default())
            .actors
            .iter()
            .any(|e| e.actor_id == "hooked-abort" && !e.bound)
    };
    wait_until("the hook ran and a holds no binding", || {
        runs.runs().len() == 1 && unbound()
    })
    .await;
    assert_eq!(
        runs.runs(),
        vec![("a".to_owned(), "hooked-abort".to_owned())],
        "once, on the source"
    );
    assert_eq!(w.a.request(&actor, &Add(7), TIMEOUT).await.unwrap(), 1);
}

// spec: SB-8.6, SB-8.4
// A target gone after relay-ready (shut down before the cutover reached it): its result never
// comes. The source does not wait forever: at the result timeout after the cutover (11 s on its
// own clock, not a tick earlier) it reads the store, which still names it; the relocation fails
// (never reopened) and the actor comes back on the source with its state, a new incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_target_result_never_comes_asks_the_store_at_the_result_timeout() {
    use live::{Add, Error, Fail, GetSeen, aid};
    use node_common::{mesh_config, rid, wait_pair_up, wait_until};
    use zlink::node::{Node, NodeOptions};
    let store = node_common::memory_store();
    let (a_clock, b_clock) = (ManualClock::new(), ManualClock::new());
    let (_gate, rx) = tokio::sync::watch::channel(true);
    let registry = || {
        live::registry(
            rx.clone(),
            Arc::new(std::sync::atomic::AtomicU64::new(0)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        )
    };
    let mut o = NodeOptions::new(mesh_config("b"), store.clone(), registry());
    // `b`'s cutover timeout never fires: it is gone before its clock moves
    o.clock = Arc::new(b_clock.clone());
    let b = Node::start(o).await.unwrap();
    let mut o = NodeOptions::new(mesh_config("a"), store.clone(), registry());
    o.peers = vec![b.address()];
    o.clock = Arc::new(a_clock.clone());
    let a = Node::start(o).await.unwrap();
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(zlink::actor::Create::new("counter", aid("unanswered")))
        .await
        .unwrap();
    assert_eq!(a.request(&actor, &Add(0), TIMEOUT).await.unwrap(), 1);

    let capture = a.hold_relocation_capture_for_tests();
    let relocating = {
        let (a, actor) = (a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("b relay-ready", || {
        b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    b.shutdown(Duration::ZERO).await;
    drop(capture);
    wait_until("the source handed off", || {
        a.relocations().0.iter().any(|r| r.phase == "HandedOff")
    })
    .await;
    let result_timeout = zlink::relocation::RelocationConfig::default().result_timeout;
    a_clock.advance(result_timeout - Duration::from_millis(1));
    assert_eq!(a.relocations().1.result_waits_expired, 0);
    a_clock.advance(Duration::from_millis(1));
    match tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
    {
        Err(Error::Failed(Fail::TargetFailedAfterRelayReady)) => {}
        other => panic!("expected a failure after relay-ready, got {other:?}"),
    }
    let c = a.relocations().1;
    assert_eq!((c.result_waits_expired, c.failed, c.recovered), (1, 1, 1));
    let loc = store.lookup(actor.id().clone()).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, rid("a"));
    assert!(loc.object_generation > actor.object_generation());
    let again = a
        .get_or_create(zlink::actor::Create::new("counter", actor.id().clone()))
        .await
        .unwrap();
    assert_eq!(again.object_generation(), loc.object_generation);
    assert_eq!(a.request(&again, &GetSeen, TIMEOUT).await.unwrap(), vec![0]);
}

/// A session owner played by a raw mesh node `s` of the mesh: it binds a session to an actor on
/// `node` (a 38 with its own identity) and never answers a 42, so a relocation of that actor
/// waits in its seal until the source's seal timeout (on the source's node clock). Returns `s`
/// (keep it: its link is what keeps the binding) and a count of the 42s it received.
async fn silent_session_owner(
    node: &zlink::node::Node,
    actor: &zlink::actor::ActorRef,
) -> (zlink_mesh::MeshNode, Arc<std::sync::atomic::AtomicU64>) {
    use node_common::{mesh_config, rid};
    use zlink_wire::{
        BindOperation, BoundSessionBind, Deadline, OwnerId, OwnerLeaseGeneration, Record,
    };
    let (s, mut s_in) = zlink_mesh::MeshNode::start(mesh_config("s")).unwrap();
    s.connect(node.address()).unwrap();
    assert!(
        s.wait_peer_up(node.node_rid(), None, TIMEOUT)
            .await
            .is_some()
    );
    assert!(
        node.mesh()
            .wait_peer_up(&rid("s"), None, TIMEOUT)
            .await
            .is_some()
    );
    let seals = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        let seals = seals.clone();
        tokio::spawn(async move {
            // Each 42 is kept unanswered for as long as `s` runs.
            let mut unanswered = Vec::new();
            while let Some(inb) = s_in.recv().await {
                if let Record::SessionRelocationSeal(_) = &inb.record {
                    seals.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    unanswered.push(inb.reply);
                }
            }
        });
    }
    let loc = actor.wire_location();
    let bind = BoundSessionBind {
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        target_node_generation: loc.node_generation,
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        session_lifecycle: SessionLifecycleGeneration::new(1),
        session_owner: OwnerId::new(77),
        session_owner_lease_generation: OwnerLeaseGeneration::new(1),
        session: SessionRid::new(1),
        binding_generation: BindingGeneration::new(1),
        operation: BindOperation::Bind,
        deadline: Deadline::from_remaining(TIMEOUT),
    };
    let resp = s
        .request_record(
            node.node_rid(),
            Record::BoundSessionBind(bind),
            None,
            TIMEOUT,
        )
        .await
        .unwrap();
    assert!(
        matches!(&resp.record, Record::BoundSessionBindReply(b) if b.result.is_ok()),
        "{:?}",
        resp.record
    );
    (s, seals)
}

// spec: SB-8.5, SB-8.6, EG-14, SB-4.1
// A relocation of `c` waits in its seal (its session owner never answers the 42). Meanwhile the
// source's owner lease ends in the store: its renewal learns it (LeaseNotLive), every local
// incarnation ends, a new lease is registered, and `c` is activated again on the same node —
// a takeover, so the same ObjectGeneration under a new authority and the new lease. Then the
// old relocation's seal timeout fires: its durable abort is refused (the record moved on), so
// it fails. The new incarnation is not the relocation's: it keeps serving, and the work queued
// in its lane at that moment runs. Seen failing with the driver matching the incarnation on
// its ObjectGeneration alone (the stale relocation ended the new incarnation and dropped its
// queue; the store went on naming the node while nothing served the actor there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_relocation_leaves_a_newer_incarnation_of_the_same_generation_alone() {
    use live::{Abort, Add, Error, Fail, GetSeen, Hold, aid};
    use node_common::{mesh_config, rid, wait_until};
    use zlink::node::{Node, NodeOptions};
    const TTL: Duration = Duration::from_secs(3);
    let store_clock = ManualClock::at_wall(contract::START);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(store_clock.clone())));
    let (node_clock, lease_clock) = (ManualClock::new(), ManualClock::new());
    let (gate, rx) = tokio::sync::watch::channel(true);
    let registry = live::registry(
        rx,
        Arc::new(std::sync::atomic::AtomicU64::new(0)),
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let mut o = NodeOptions::new(mesh_config("a"), store.clone(), registry);
    o.clock = Arc::new(node_clock.clone());
    o.lease_clock = Arc::new(lease_clock.clone());
    o.lease_ttl = TTL;
    let a = Node::start(o).await.unwrap();
    let old = a
        .create(zlink::actor::Create::new("counter", aid("c")))
        .await
        .unwrap();
    assert_eq!(a.request(&old, &Add(0), TIMEOUT).await.unwrap(), 1);
    let (_s, seals) = silent_session_owner(&a, &old).await;

    // The relocation seals the binding and waits for the 43 that never comes.
    let relocating = {
        let (a, old) = (a.clone(), old.clone());
        tokio::spawn(async move { a.relocate(&old, rid("b")).await })
    };
    wait_until("the 42 at the session owner", || {
        seals.load(std::sync::atomic::Ordering::SeqCst) == 1
            && a.relocations().0.iter().any(|r| r.phase == "Sealing")
    })
    .await;

    // The lease ends in the store; the renewal finds it gone and a new lease is registered.
    let lease = a.lease().holder.lease_generation;
    store_clock.advance(TTL + Duration::from_secs(1));
    lease_clock.advance(Duration::from_secs(1));
    wait_until("a new owner lease", || {
        a.lease().holder.lease_generation != lease
    })
    .await;
    // `c` again on `a`: the same incarnation number, taken over under the new lease (a fresh
    // instance: a takeover does not carry the state).
    let new = a
        .get_or_create(zlink::actor::Create::new("counter", aid("c")))
        .await
        .unwrap();
    assert_eq!(new.node(), &rid("a"));
    assert_eq!(new.object_generation(), old.object_generation());
    assert!(new.location().authority_owner_generation > old.location().authority_owner_generation);
    assert_ne!(new.location().owner_lease_generation, lease);
    assert_eq!(a.request(&new, &Add(1), TIMEOUT).await.unwrap(), 1);

    // The new incarnation is busy in a turn, with sends queued in its lane behind it.
    gate.send(false).unwrap();
    let turns = a.counters().turns;
    let hold = {
        let (a, new) = (a.clone(), new.clone());
        tokio::spawn(async move { a.request(&new, &Hold, TIMEOUT).await })
    };
    wait_until("hold running", || a.counters().turns > turns).await;
    for i in 2..5 {
        a.send(&new, &Add(i)).await.unwrap();
    }

    // The old relocation's seal timeout: its abort cannot be made durable, so it fails.
    node_clock.advance(zlink::relocation::RelocationConfig::default().seal_timeout);
    match tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
    {
        Err(Error::Failed(Fail::AbortNotDurable(Abort::SealTimeout))) => {}
        other => panic!("expected a non-durable abort, got {other:?}"),
    }
    // Nothing of the new incarnation was touched: its queued work runs, in order, and it serves.
    gate.send(true).unwrap();
    tokio::time::timeout(TIMEOUT, hold)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        a.request(&new, &GetSeen, TIMEOUT).await.unwrap(),
        (1..5).collect::<Vec<u64>>()
    );
    let loc = store.lookup(aid("c")).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, rid("a"));
    assert_eq!(
        loc.owner_lease_generation,
        new.location().owner_lease_generation
    );
    assert_eq!(a.counters().sends_dropped, 0);
    assert_eq!(a.relocations_in_progress(), 0);
}

/// What [`CasAnswer`] does with the next `cas_owner` once armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CasFault {
    /// Applied to the store, its answer lost: `Unavailable`, as a timeout or a dropped
    /// connection answers.
    LoseAnswer,
    /// Applied to the store, its answer held until [`CasAnswer::release`].
    HoldAnswer,
    /// Held before it reaches the store until [`CasAnswer::release`], then applied (a CAS
    /// that lands late).
    Late,
}

/// A relocation node's store handle: its next `cas_owner` after [`CasAnswer::arm`] is applied
/// with its answer lost or held, or held and applied late ([`CasFault`]); `reincarnate` answers
/// `Unavailable` while [`CasAnswer::fail_reincarnate`] is set. Every other operation (lookups,
/// lease renewals) passes through.
#[derive(Debug)]
struct CasAnswer {
    inner: Arc<MemoryStore>,
    armed: std::sync::Mutex<Option<CasFault>>,
    /// CASes that reached the armed fault (applied with the answer lost or held, or held).
    applied: std::sync::atomic::AtomicU64,
    release: tokio::sync::Semaphore,
    fail_reincarnate: std::sync::atomic::AtomicBool,
}

impl CasAnswer {
    fn new(inner: Arc<MemoryStore>) -> Self {
        Self {
            inner,
            armed: std::sync::Mutex::new(None),
            applied: std::sync::atomic::AtomicU64::new(0),
            release: tokio::sync::Semaphore::new(0),
            fail_reincarnate: std::sync::atomic::AtomicBool::new(false),
        }
    }
    fn fail_reincarnate(&self, fail: bool) {
        self.fail_reincarnate
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }
    fn arm(&self, fault: CasFault) {
        *self.armed.lock().unwrap() = Some(fault);
    }
    fn applied(&self) -> u64 {
        self.applied.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn release(&self) {
        self.release.add_permits(1);
    }
}

impl LocationStore for CasAnswer {
    fn register_owner(
        &self,
        node: zlink_wire::NodeRid,
        node_generation: zlink_wire::NodeGeneration,
        ttl: Duration,
    ) -> zlink::store::StoreFuture<'_, OwnerLease> {
        self.inner.register_owner(node, node_generation, ttl)
    }
    fn renew_owner(
        &self,
        holder: zlink::store::LeaseHolder,
        ttl: Duration,
    ) -> zlink::store::StoreFuture<'_, OwnerLease> {
        self.inner.renew_owner(holder, ttl)
    }
    fn release_owner(
        &self,
        holder: zlink::store::LeaseHolder,
    ) -> zlink::store::StoreFuture<'_, ()> {
        self.inner.release_owner(holder)
    }
    fn reserve_activation(
        &self,
        request: zlink::store::ActivationRequest,
    ) -> zlink::store::StoreFuture<'_, zlink::store::Reservation> {
        self.inner.reserve_activation(request)
    }
    fn mark_ready(
        &self,
        actor_id: zlink_wire::ActorId,
        fence: zlink::store::AuthorityFence,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        self.inner.mark_ready(actor_id, fence)
    }
    fn lookup(
        &self,
        actor_id: zlink_wire::ActorId,
    ) -> zlink::store::StoreFuture<'_, Option<ActorLocation>> {
        self.inner.lookup(actor_id)
    }
    fn cas_owner(
        &self,
        actor_id: zlink_wire::ActorId,
        expected: zlink::store::AuthorityFence,
        new_owner: zlink::store::ActorOwner,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        Box::pin(async move {
            let fault = self.armed.lock().unwrap().take();
            if fault == Some(CasFault::Late) {
                self.applied
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                self.release.acquire().await.unwrap().forget();
                return self.inner.cas_owner(actor_id, expected, new_owner).await;
            }
            let answer = self.inner.cas_owner(actor_id, expected, new_owner).await;
            match fault {
                None => answer,
                Some(fault) => {
                    assert!(answer.is_ok(), "the CAS applies: {answer:?}");
                    self.applied
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if fault == CasFault::HoldAnswer {
                        self.release.acquire().await.unwrap().forget();
                        return answer;
                    }
                    Err(zlink::store::StoreError::Unavailable {
                        backend: "test",
                        source: "the CAS answer was lost".into(),
                    })
                }
            }
        })
    }
    fn relocation_fence(
        &self,
        actor_id: zlink_wire::ActorId,
        expected: zlink::store::AuthorityFence,
        owner: zlink::store::OwnerFence,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        self.inner.relocation_fence(actor_id, expected, owner)
    }
    fn reincarnate(
        &self,
        actor_id: zlink_wire::ActorId,
        owner: zlink::store::OwnerFence,
    ) -> zlink::store::StoreFuture<'_, ActorLocation> {
        if self
            .fail_reincarnate
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Box::pin(async {
                Err(zlink::store::StoreError::Unavailable {
                    backend: "test",
                    source: "reincarnate refused by the test".into(),
                })
            });
        }
        self.inner.reincarnate(actor_id, owner)
    }
    fn destroy(
        &self,
        actor_id: zlink_wire::ActorId,
        fence: zlink::store::OwnerFence,
    ) -> zlink::store::StoreFuture<'_, ()> {
        self.inner.destroy(actor_id, fence)
    }
}

// spec: SB-8.6, SB-8.9
// The target's owner CAS is applied in the store but its answer is lost (the store handle
// answers `Unavailable`, as a timeout or a dropped connection does). The target does not take
// the missing answer for a failure: it reads the record back, finds it names its own lease
// under the moving incarnation, and commits — the relocation moves the actor with its state,
// the target serves it, the source does not recover it behind the target's back. Counted
// (`cas_answers_lost`). Seen failing (the relocation failed with CasFailed while the store
// named `b`, and `b` served nothing) with the driver treating the lost answer as a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_whose_cas_answer_is_lost_reads_the_record_back_and_commits() {
    use live::{Add, GetSeen, aid};
    use node_common::rid;
    let shared = Arc::new(MemoryStore::new());
    let b_store = Arc::new(CasAnswer::new(shared.clone()));
    let p = live::pair_with(shared.clone(), b_store.clone()).await;
    let actor = live::counter_on(&p.a, "lost-answer").await;
    for i in 0..3 {
        assert_eq!(p.a.request(&actor, &Add(i), TIMEOUT).await.unwrap(), i + 1);
    }
    b_store.arm(CasFault::LoseAnswer);
    let report = tokio::time::timeout(TIMEOUT, p.a.relocate(&actor, rid("b")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b_store.applied(), 1);
    assert_eq!(report.actor.node(), &rid("b"));
    let loc = shared.lookup(aid("lost-answer")).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, rid("b"));
    assert_eq!(loc.object_generation, actor.object_generation());
    assert_eq!(p.b.relocations().1.cas_answers_lost, 1);
    assert_eq!(p.a.relocations().1.committed, 1);
    assert_eq!(p.a.relocations().1.recovered, 0);
    // `b` serves it with its state; the old ref follows there once.
    assert_eq!(
        p.b.request(&report.actor, &Add(3), TIMEOUT).await.unwrap(),
        4
    );
    assert_eq!(
        p.a.request(&actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0, 1, 2, 3]
    );
}

// spec: EG-14, SB-5.11, SB-8.9
// The target's CAS wins under its owner lease, but its answer is held (a slow store) while that
// lease ends in the store: the target's lease driver learns it (LeaseNotLive), ends its
// incarnations and registers a new lease. When the answer comes, the moved-in actor does not
// open under the lease its CAS won under: its lane ends and what its temporary queue held (a
// request the source captured) is answered `Unavailable`, never run; the target serves nothing
// of it, and another node takes the actor over from the store (the record names a dead lease).
// Seen failing (the captured request ran on the target and the target served the actor) with
// the lease guard of `open_moved_in` removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_in_actor_whose_cas_lease_ended_meanwhile_does_not_open() {
    use live::{Add, GetSeen, Hold, aid};
    use node_common::{mesh_config, rid, wait_pair_up, wait_until};
    use zlink::node::{Node, NodeOptions};
    const TTL: Duration = Duration::from_secs(3);
    let store_clock = ManualClock::at_wall(contract::START);
    let shared = Arc::new(MemoryStore::with_clock(Arc::new(store_clock.clone())));
    let b_store = Arc::new(CasAnswer::new(shared.clone()));
    let b_lease_clock = ManualClock::new();
    let (gate, rx) = tokio::sync::watch::channel(true);
    let registry = || {
        live::registry(
            rx.clone(),
            Arc::new(std::sync::atomic::AtomicU64::new(0)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        )
    };
    let mut o = NodeOptions::new(mesh_config("b"), b_store.clone(), registry());
    o.lease_ttl = TTL;
    o.lease_clock = Arc::new(b_lease_clock.clone());
    let b = Node::start(o).await.unwrap();
    let mut o = NodeOptions::new(mesh_config("a"), shared.clone(), registry());
    o.peers = vec![b.address()];
    // `a`'s lease outlives the store time this test moves on
    o.lease_ttl = Duration::from_secs(60);
    let a = Node::start(o).await.unwrap();
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(zlink::actor::Create::new("counter", aid("guarded")))
        .await
        .unwrap();
    assert_eq!(a.request(&actor, &Add(0), TIMEOUT).await.unwrap(), 1);

    // A request waits in the actor's queue behind a busy turn: the relocation captures it and
    // relays it into the target's temporary queue.
    gate.send(false).unwrap();
    let turns = a.counters().turns;
    let hold = {
        let (a, actor) = (a.clone(), actor.clone());
        tokio::spawn(async move { a.request(&actor, &Hold, TIMEOUT).await })
    };
    wait_until("hold running", || a.counters().turns > turns).await;
    let captured = {
        let (a, actor) = (a.clone(), actor.clone());
        tokio::spawn(async move { a.request(&actor, &Add(1), TIMEOUT).await })
    };
    wait_until("the request queued", || {
        a.lane_stats(&actor)
            .is_some_and(|s| s.application_queued == 1)
    })
    .await;
    b_store.arm(CasFault::HoldAnswer);
    let relocating = {
        let (a, actor) = (a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("quiescing", || {
        a.relocations().0.iter().any(|r| r.phase == "Quiescing")
    })
    .await;
    gate.send(true).unwrap();
    hold.await.unwrap().unwrap();
    wait_until("the target's CAS applied, its answer held", || {
        b_store.applied() == 1
    })
    .await;

    // `b`'s lease ends in the store; its renewal learns it and registers a new one.
    let lease = b.lease().holder.lease_generation;
    store_clock.advance(TTL + Duration::from_secs(1));
    b_lease_clock.advance(Duration::from_secs(1));
    wait_until("b's new owner lease", || {
        b.lease().holder.lease_generation != lease
    })
    .await;
    b_store.release();

    // The target committed in the store (the source ends its incarnation) but never opened.
    let report = tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(report.actor.location().owner_lease_generation, lease);
    let refused = tokio::time::timeout(TIMEOUT, captured)
        .await
        .unwrap()
        .unwrap()
        .expect_err("the captured request never runs on the target");
    assert_eq!(
        refused.kind(),
        zlink_wire::ErrorKind::Unavailable,
        "{refused}"
    );
    let err = b
        .request(&report.actor, &GetSeen, TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), zlink_wire::ErrorKind::Unavailable, "{err}");
    wait_until("relocation state freed", || {
        a.relocations_in_progress() == 0 && b.relocations_in_progress() == 0
    })
    .await;
    // The store names `b` under its dead lease: another node takes the actor over.
    let again = a
        .get_or_create(zlink::actor::Create::new("counter", aid("guarded")))
        .await
        .unwrap();
    assert_eq!(again.node(), &rid("a"));
    assert_eq!(again.object_generation(), actor.object_generation());
    assert_eq!(a.request(&again, &Add(2), TIMEOUT).await.unwrap(), 1);
}

// spec: SB-5.12, SB-8.6, SB-14.3
// The source decides the move failed (no result within its result timeout, and the store
// still names it), but the target's CAS lands after that, before the source's recovery could
// replace the record (its first attempt found the store out of reach): the recovery finds the
// record moved on (`unrecovered`), the target owns and serves the actor. The source's old
// route then follows it to the target (Message Follow), as after a commit: a ref to the old
// incarnation reaches the actor on `b` through `a`. Seen failing (the old ref was refused as a
// ref to an ended incarnation, nothing forwarded) without the follow of a superseded recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_superseded_by_the_targets_late_cas_follows_it_there() {
    use live::{Add, Error, Fail, GetSeen, aid};
    use node_common::{mesh_config, rid, wait_pair_up, wait_until};
    use zlink::node::{Node, NodeOptions};
    let shared = Arc::new(MemoryStore::new());
    let a_store = Arc::new(CasAnswer::new(shared.clone()));
    let b_store = Arc::new(CasAnswer::new(shared.clone()));
    let a_clock = ManualClock::new();
    let (_gate, rx) = tokio::sync::watch::channel(true);
    let registry = || {
        live::registry(
            rx.clone(),
            Arc::new(std::sync::atomic::AtomicU64::new(0)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        )
    };
    let b = Node::start(NodeOptions::new(
        mesh_config("b"),
        b_store.clone(),
        registry(),
    ))
    .await
    .unwrap();
    let mut o = NodeOptions::new(mesh_config("a"), a_store.clone(), registry());
    o.peers = vec![b.address()];
    o.clock = Arc::new(a_clock.clone());
    let a = Node::start(o).await.unwrap();
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(zlink::actor::Create::new("counter", aid("late")))
        .await
        .unwrap();
    assert_eq!(a.request(&actor, &Add(0), TIMEOUT).await.unwrap(), 1);

    // The target's CAS is held before it reaches the store; the source waits for the result.
    b_store.arm(CasFault::Late);
    let relocating = {
        let (a, actor) = (a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("the target's CAS held", || b_store.applied() == 1).await;
    wait_until("the source handed off", || {
        a.relocations().0.iter().any(|r| r.phase == "HandedOff")
    })
    .await;
    // At the result timeout the store still names `a`: failed; the recovery's first attempt
    // cannot replace the record.
    a_store.fail_reincarnate(true);
    a_clock.advance(zlink::relocation::RelocationConfig::default().result_timeout);
    match tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
    {
        Err(Error::Failed(Fail::TargetFailedAfterRelayReady)) => {}
        other => panic!("expected a failure after relay-ready, got {other:?}"),
    }
    assert_eq!(a.relocations().1.recovery_retries, 1);
    // The target's CAS lands now: `b` owns the actor and serves it with its state.
    b_store.release();
    wait_until("b committed", || {
        b.relocations().0.iter().any(|r| {
            r.role == "target"
                && r.outcome
                    .as_deref()
                    .is_some_and(|o| o.starts_with("committed"))
        })
    })
    .await;
    let loc = shared.lookup(aid("late")).await.unwrap().unwrap();
    assert_eq!(loc.owner_node, rid("b"));
    let moved = b
        .get_or_create(zlink::actor::Create::new("counter", aid("late")))
        .await
        .unwrap();
    assert_eq!(moved.object_generation(), actor.object_generation());
    assert_eq!(b.request(&moved, &GetSeen, TIMEOUT).await.unwrap(), vec![0]);
    // The recovery's retry finds the record moved on.
    a_store.fail_reincarnate(false);
    a_clock.advance(Duration::from_millis(100));
    wait_until("the recovery superseded", || {
        a.relocations().1.unrecovered == 1
    })
    .await;
    assert_eq!(a.relocations().1.recovered, 0);
    // The old route follows the actor to `b`, once per record.
    wait_until("the old route follows", || {
        a.follow_counters().installed >= 1
    })
    .await;
    assert_eq!(a.request(&actor, &Add(1), TIMEOUT).await.unwrap(), 2);
    assert_eq!(a.follow_counters().forwarded, 1);
    assert_eq!(
        b.request(&moved, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0, 1]
    );
}

// spec: SB-5.12, SB-14.3, EG-14
// The source's owner lease ends while its move waits past relay-ready (the capture held): its
// lease driver ends every local incarnation, the sealed one too, and registers a new lease.
// The target's CAS with the relocation fence still wins (the record kept it) and the move
// commits. The source's old route follows the actor to the target all the same, as after any
// commit: a ref to the old incarnation reaches it on `b` through `a` once `a` may act as an
// owner again. Seen failing (the old ref was refused, nothing forwarded) with the commit
// installing the follow entry only for an incarnation still live at the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_lease_ended_mid_move_still_follows_the_committed_actor() {
    use live::{Add, GetSeen, aid};
    use node_common::{mesh_config, rid, wait_pair_up, wait_until};
    use zlink::node::{Node, NodeOptions};
    const TTL: Duration = Duration::from_secs(3);
    let store_clock = ManualClock::at_wall(contract::START);
    let shared = Arc::new(MemoryStore::with_clock(Arc::new(store_clock.clone())));
    let a_lease_clock = ManualClock::new();
    let (_gate, rx) = tokio::sync::watch::channel(true);
    let registry = || {
        live::registry(
            rx.clone(),
            Arc::new(std::sync::atomic::AtomicU64::new(0)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        )
    };
    let mut o = NodeOptions::new(mesh_config("b"), shared.clone(), registry());
    // no cutover timeout on `b` while the test holds the source's capture
    o.clock = Arc::new(ManualClock::new());
    let b = Node::start(o).await.unwrap();
    let mut o = NodeOptions::new(mesh_config("a"), shared.clone(), registry());
    o.peers = vec![b.address()];
    o.lease_ttl = TTL;
    o.lease_clock = Arc::new(a_lease_clock.clone());
    let a = Node::start(o).await.unwrap();
    wait_pair_up(&a, &b).await;
    let actor = a
        .create(zlink::actor::Create::new("counter", aid("leased")))
        .await
        .unwrap();
    assert_eq!(a.request(&actor, &Add(0), TIMEOUT).await.unwrap(), 1);

    let capture = a.hold_relocation_capture_for_tests();
    let relocating = {
        let (a, actor) = (a.clone(), actor.clone());
        tokio::spawn(async move { a.relocate(&actor, rid("b")).await })
    };
    wait_until("b relay-ready", || {
        b.relocations().0.iter().any(|r| r.phase == "RelayReady")
    })
    .await;
    // `a`'s lease ends in the store; its renewal learns it: every incarnation ends, a new
    // lease is registered.
    let lease = a.lease().holder.lease_generation;
    store_clock.advance(TTL + Duration::from_secs(1));
    a_lease_clock.advance(Duration::from_secs(1));
    wait_until("a's new owner lease", || {
        a.lease().holder.lease_generation != lease
    })
    .await;
    drop(capture);
    let report = tokio::time::timeout(TIMEOUT, relocating)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(report.actor.node(), &rid("b"));
    assert_eq!(
        b.request(&report.actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0]
    );
    // The old ref, through `a`: forwarded once to `b`.
    assert_eq!(a.request(&actor, &Add(1), TIMEOUT).await.unwrap(), 2);
    assert_eq!(a.follow_counters().forwarded, 1);
    assert_eq!(
        b.request(&report.actor, &GetSeen, TIMEOUT).await.unwrap(),
        vec![0, 1]
    );
}
