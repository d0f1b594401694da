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
    pub fn registry(gate: watch::Receiver<bool>, rehydrated: Arc<AtomicU64>) -> ActorRegistry {
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
    }

    pub async fn pair(store: Arc<dyn LocationStore>) -> Pair {
        let (gate, rx) = watch::channel(false);
        let rehydrated = Arc::new(AtomicU64::new(0));
        let b = start_node(
            "b",
            store.clone(),
            vec![],
            None,
            Some(registry(rx.clone(), rehydrated.clone())),
        )
        .await;
        let tap_a = WireTap::new(100_000);
        let a = start_node(
            "a",
            store,
            vec![b.address()],
            Some(tap_a.clone()),
            Some(registry(rx, rehydrated.clone())),
        )
        .await;
        wait_pair_up(&a, &b).await;
        Pair {
            a,
            b,
            tap_a,
            gate,
            rehydrated,
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

    pub fn _unused(_: RelocateError, _: AbortReason) {}

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
    node_common::wait_until("hold running", || p.a.stats().turns >= 4).await;
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
    node_common::wait_until("work queued", || p.b.stats().calls_out >= 3).await;
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
    // `a` no longer serves it; nothing of the relocation stays on either node.
    assert!(p.a.request(&actor, &GetSeen, T).await.is_err());
    node_common::wait_until("relocation state freed", || {
        p.a.relocations_in_progress() == 0 && p.b.relocations_in_progress() == 0
    })
    .await;
    let (list, counters) = p.a.relocations();
    assert_eq!(counters.committed, 1);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].outcome.as_deref(), Some("moved"));
}
