//! Lane admission, priority, starvation, post-processing and budget tests (EG-6.3, EG-6.4, EG-7,
//! EG-8, EG-9, EG-16.16–16.20), plus a proptest of the lane rules against a reference model.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tokio::sync::oneshot;
use zlink::runtime::core::{GateCore, LaneId, Turn};
use zlink::runtime::*;

const GUARD: Duration = Duration::from_secs(30);

fn runtime_with(f: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    let mut c = RuntimeConfig {
        application_workers: 2,
        ..Default::default()
    };
    f(&mut c);
    Runtime::new(c).unwrap()
}

/// An actor whose message `0` holds its gate until released; other messages log their value.
struct Held {
    actor: ActorRef<u32, ()>,
    log: Arc<Mutex<Vec<String>>>,
    release: Option<oneshot::Sender<()>>,
    ran_on: Arc<Mutex<Vec<std::thread::ThreadId>>>,
}

fn held<K: SpotKind>(spot: &SpotRef<K>) -> Held {
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let started_tx = Arc::new(Mutex::new(started_tx));
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let log = Arc::new(Mutex::new(Vec::new()));
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let (l, r) = (log.clone(), ran_on.clone());
    let actor = spot
        .spawn_actor(move |_c: Ctx<K::Yield>, m: u32| {
            r.lock().unwrap().push(std::thread::current().id());
            if m != 0 {
                l.lock().unwrap().push(format!("app{m}"));
                return Handled::ok(());
            }
            let (s, rel) = (
                started_tx.clone(),
                release_rx.lock().unwrap().take().unwrap(),
            );
            Handled::later(async move {
                s.lock().unwrap().send(()).unwrap();
                rel.await.ok();
                Ok(())
            })
        })
        .unwrap();
    actor.tell(0).unwrap();
    started_rx.recv_timeout(GUARD).unwrap();
    Held {
        actor,
        log,
        release: Some(release_tx),
        ran_on,
    }
}

/// Wait (on the runtime, yielding, no sleeps) until `cond` holds.
fn wait_until(rt: &Runtime, cond: impl Fn() -> bool) {
    let r = rt.block_on(async {
        tokio::time::timeout(GUARD, async {
            while !cond() {
                tokio::task::yield_now().await;
            }
        })
        .await
    });
    assert!(r.unwrap().is_ok(), "condition not reached");
}

impl Held {
    fn release(&mut self) {
        let _ = self.release.take().unwrap().send(());
    }
}

// spec: EG-16.16, EG-6.3, EG-7.2, EG-16.19 — a full queue refuses; the handler never runs at the
// call site; the running record keeps its reservation; empty payloads still hit the count limit.
#[test]
fn full_queue_refuses_and_never_runs_inline() {
    let rt = runtime_with(|_| {});
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let mut h = held(&spot);
    let s = h.actor.stats();
    // EG-7.2: the running record's reservation is held until its terminal
    assert_eq!(s.application_queued, 0);
    assert_eq!(s.application_reserved_items, 1);
    assert_eq!(s.application_reserved_bytes, 4 + 256);
    for i in 1..1024 {
        h.actor.tell(i).unwrap();
    }
    let ran_before = h.ran_on.lock().unwrap().len();
    let err = h.actor.tell(5000).unwrap_err();
    assert_eq!(
        err,
        RuntimeError::ApplicationLaneFull(ApplicationLaneFull {
            limit: LaneLimitKind::Count
        })
    );
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    // not run inline: no handler ran since, and none on this thread
    assert_eq!(h.ran_on.lock().unwrap().len(), ran_before);
    let me = std::thread::current().id();
    assert!(!h.ran_on.lock().unwrap().contains(&me));
    h.release();
    let log = h.log.clone();
    wait_until(&rt, || log.lock().unwrap().len() == 1023);
    assert!(!h.ran_on.lock().unwrap().contains(&me));
}

// spec: EG-16.19, EG-7.1, EG-1.2 — empty payloads hit the count limit; byte and count limits of
// the two lanes are separate, with distinct error types.
#[test]
fn count_and_byte_limits_per_lane() {
    let rt = runtime_with(|c| {
        c.limits.application_items = 8;
        c.limits.application_bytes = 8 * 1024;
        c.limits.lifecycle_items = 3;
    });
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let h = held(&spot);
    for i in 1..8 {
        h.actor.tell(i).unwrap();
    }
    assert_eq!(
        h.actor.tell(8),
        Err(RuntimeError::ApplicationLaneFull(ApplicationLaneFull {
            limit: LaneLimitKind::Count
        }))
    );
    // lifecycle lane: own count limit and own error type, unaffected by the full app lane
    for _ in 0..3 {
        spot.actor_lifecycle(&h.actor, |_c| Handled::ok(()))
            .unwrap();
    }
    assert_eq!(
        spot.actor_lifecycle(&h.actor, |_c| Handled::ok(())),
        Err(RuntimeError::LifecycleLaneFull(LifecycleLaneFull {
            limit: LaneLimitKind::Count
        }))
    );
    // byte limit: core-level check with payload + 256 B per work
    let mut core: GateCore<u32, ()> = GateCore::new(LaneLimits {
        application_bytes: 2 * (1000 + 256),
        ..Default::default()
    });
    let l = core.add_lane(()).unwrap();
    core.handle_submit(l, LaneClass::Application, 1000, 1)
        .unwrap();
    core.handle_submit(l, LaneClass::Application, 1000, 2)
        .unwrap();
    let e = core
        .handle_submit(l, LaneClass::Application, 0, 3)
        .unwrap_err();
    assert_eq!(
        e.reason,
        zlink::runtime::core::SubmitRefusal::Admission(AdmissionError::Application(
            ApplicationLaneFull {
                limit: LaneLimitKind::Bytes
            }
        ))
    );
    assert_eq!(e.item, 3);
}

// spec: EG-16.17, EG-7, EG-7.3, EG-7.6 — lifecycle does not consume application limits; a full
// application lane does not block lifecycle; with both ready, lifecycle runs first.
#[test]
fn lifecycle_first_and_separate_limits() {
    let rt = runtime_with(|c| c.limits.application_items = 4);
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let mut h = held(&spot);
    for i in 1..4 {
        h.actor.tell(i).unwrap();
    }
    assert!(h.actor.tell(4).is_err());
    for i in 0..3 {
        let l = h.log.clone();
        spot.actor_lifecycle(&h.actor, move |c| {
            assert_eq!(c.lane_class(), LaneClass::Lifecycle);
            l.lock().unwrap().push(format!("life{i}"));
            Handled::ok(())
        })
        .unwrap();
    }
    let s = h.actor.stats();
    assert_eq!(s.application_reserved_items, 4);
    assert_eq!(s.lifecycle_reserved_items, 3);
    h.release();
    let log = h.log.clone();
    wait_until(&rt, || log.lock().unwrap().len() == 6);
    assert_eq!(
        *h.log.lock().unwrap(),
        ["life0", "life1", "life2", "app1", "app2", "app3"]
    );
}

// spec: EG-16.18, EG-7.4, EG-7.5 — with lifecycle work arriving continuously (each lifecycle
// record submits the next), application turns still run: after at most 8 lifecycle turns.
#[test]
fn continuous_lifecycle_does_not_starve_application() {
    let rt = runtime_with(|_| {});
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let mut h = held(&spot);
    let stop = Arc::new(AtomicBool::new(false));
    let life_turns = Arc::new(AtomicUsize::new(0));
    fn chain<K: SpotKind>(
        spot: SpotRef<K>,
        actor: ActorRef<u32, ()>,
        stop: Arc<AtomicBool>,
        n: Arc<AtomicUsize>,
        log: Arc<Mutex<Vec<String>>>,
    ) {
        let (s2, a2) = (spot.clone(), actor.clone());
        spot.actor_lifecycle(&actor, move |_c| {
            n.fetch_add(1, Ordering::SeqCst);
            log.lock().unwrap().push("life".into());
            if !stop.load(Ordering::SeqCst) {
                chain(s2, a2, stop, n, log);
            }
            Handled::ok(())
        })
        .unwrap();
    }
    // two lifecycle chains keep the lifecycle lane always ready
    for _ in 0..2 {
        chain(
            spot.clone(),
            h.actor.clone(),
            stop.clone(),
            life_turns.clone(),
            h.log.clone(),
        );
    }
    h.actor.tell(1).unwrap();
    h.release();
    let l2 = h.log.clone();
    let stop2 = stop.clone();
    // the application record runs in finite time even though lifecycle never drains
    let r = rt.block_on(async {
        tokio::time::timeout(GUARD, async {
            loop {
                if l2.lock().unwrap().iter().any(|s| s == "app1") {
                    stop2.store(true, Ordering::SeqCst);
                    return;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
    });
    assert!(r.unwrap().is_ok(), "application turn starved");
    let log = h.log.lock().unwrap().clone();
    let pos = log.iter().position(|s| s == "app1").unwrap();
    assert_eq!(
        pos, 8,
        "exactly 8 lifecycle turns, then the yield debt is paid: {log:?}"
    );
}

// spec: EG-16.20, EG-8 — post-processing runs before the right moves on: it never overlaps the
// next record and changes owner state exactly once.
#[test]
fn post_processing_never_overlaps_the_next_record() {
    let rt = runtime_with(|_| {});
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let state = Arc::new(Mutex::new((Vec::<String>::new(), false)));
    let mk = |name: &'static str| {
        let st = state.clone();
        spot.spawn_actor(move |ctx: SpotWideCtx, m: u32| {
            {
                let mut s = st.lock().unwrap();
                assert!(!s.1, "record started while post-processing pending");
                s.1 = true;
                s.0.push(format!("{name}{m}"));
            }
            let st2 = st.clone();
            ctx.after_turn(move || {
                let mut s = st2.lock().unwrap();
                assert!(s.1);
                s.1 = false;
                s.0.push(format!("post-{name}{m}"));
            })
            .unwrap();
            Handled::later(async move {
                tokio::task::yield_now().await;
                Ok(())
            })
        })
        .unwrap()
    };
    let (a, b) = (mk("a"), mk("b"));
    for i in 0..100 {
        a.tell(i).unwrap();
        b.tell(i).unwrap();
    }
    rt.block_on(a.ask(100)).unwrap().unwrap();
    rt.block_on(b.ask(100)).unwrap().unwrap();
    rt.block_on(a.ask(101)).unwrap().unwrap();
    let s = state.lock().unwrap();
    let log = &s.0;
    // strictly alternating record / its own post-processing
    for pair in log.chunks(2).take(202) {
        assert_eq!(pair[1], format!("post-{}", pair[0]));
    }
    let posts = log.iter().filter(|e| e.starts_with("post-")).count();
    assert!(posts >= 202);
}

// spec: EG-9, EG-7.4 — the occupancy/batch budget is checked after each handler (injected clock),
// never interrupts a handler, and hands the right off (new fencing number) when spent.
#[test]
fn budget_hands_off_at_handler_boundaries() {
    let clock = Arc::new(ManualClock::new());
    let c2 = clock.clone();
    let rt = runtime_with(move |c| c.clock = c2);
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let fences = Arc::new(Mutex::new(Vec::new()));
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let started_tx = Arc::new(Mutex::new(started_tx));
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let (f2, ck) = (fences.clone(), clock.clone());
    let a = spot
        .spawn_actor(move |ctx: SerialCtx, m: u64| {
            if m == 0 {
                let (s, r) = (
                    started_tx.clone(),
                    release_rx.lock().unwrap().take().unwrap(),
                );
                return Handled::later(async move {
                    s.lock().unwrap().send(()).unwrap();
                    r.await.ok();
                    Ok(())
                });
            }
            // a long handler runs to its end: the budget never pre-empts it
            ck.advance(Duration::from_millis(m));
            f2.lock().unwrap().push(ctx.right_fence());
            Handled::ok(())
        })
        .unwrap();
    a.tell(0).unwrap();
    started_rx.recv_timeout(GUARD).unwrap();
    for _ in 0..9 {
        a.tell(4).unwrap();
    }
    let _ = release_tx.send(());
    rt.block_on(a.ask(50)).unwrap().unwrap();
    let f = fences.lock().unwrap().clone();
    assert_eq!(f.len(), 10);
    // 0 + 4 + 4 + 4 ms -> hand-off after the third 4 ms record (12 >= 10), and so on
    assert_eq!(f[0], f[1]);
    assert_eq!(f[1], f[2]);
    assert!(f[3] > f[2]);
    assert_eq!(f[3], f[4]);
    assert_eq!(f[4], f[5]);
    assert!(f[6] > f[5]);
}

// ---------------------------------------------------------------------------------------------
// Proptest: the scheduling core against a small reference model of EG-7.3–7.6 and EG-6.4.

#[derive(Clone, Debug)]
enum Op {
    Submit { lane: usize, lifecycle: bool },
    Turn,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3usize, any::<bool>()).prop_map(|(lane, lifecycle)| Op::Submit { lane, lifecycle }),
        2 => Just(Op::Turn),
    ]
}

/// Reference: per lane two FIFOs; a lane's debt is "8 or more lifecycle turns since its last
/// application turn"; ready lanes are served in FIFO order of becoming ready.
#[derive(Default)]
struct Model {
    app: Vec<VecDeque<u32>>,
    life: Vec<VecDeque<u32>>,
    since_app: Vec<u32>,
    ready: VecDeque<usize>,
}

const APP_LIMIT: usize = 5;
const LIFE_LIMIT: usize = 3;
const CAP: u32 = 8;

impl Model {
    fn new(lanes: usize) -> Model {
        Model {
            app: vec![VecDeque::new(); lanes],
            life: vec![VecDeque::new(); lanes],
            since_app: vec![0; lanes],
            ready: VecDeque::new(),
        }
    }

    fn has_work(&self, l: usize) -> bool {
        !self.app[l].is_empty() || !self.life[l].is_empty()
    }

    fn submit(&mut self, l: usize, lifecycle: bool, v: u32) -> bool {
        let (q, limit) = if lifecycle {
            (&mut self.life[l], LIFE_LIMIT)
        } else {
            (&mut self.app[l], APP_LIMIT)
        };
        if q.len() >= limit {
            return false;
        }
        q.push_back(v);
        if !self.ready.contains(&l) {
            self.ready.push_back(l);
        }
        true
    }

    fn turn(&mut self) -> Option<(usize, bool, u32)> {
        let l = self.ready.pop_front()?;
        let debt = self.since_app[l] >= CAP;
        let use_life = !self.life[l].is_empty() && (!debt || self.app[l].is_empty());
        let v = if use_life {
            self.since_app[l] += 1;
            self.life[l].pop_front().unwrap()
        } else {
            self.since_app[l] = 0;
            self.app[l].pop_front().unwrap()
        };
        if self.has_work(l) {
            self.ready.push_back(l);
        }
        Some((l, use_life, v))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    // spec: EG-7.3, EG-7.4, EG-7.5, EG-7.6, EG-6.4, EG-16.17, EG-16.18
    #[test]
    fn lane_rules_match_the_reference_model(ops in prop::collection::vec(op(), 1..400)) {
        let mut core: GateCore<u32, usize> = GateCore::new(LaneLimits {
            application_items: APP_LIMIT,
            lifecycle_items: LIFE_LIMIT,
            lifecycle_turn_cap: CAP,
            ..Default::default()
        });
        let lanes: Vec<LaneId> = (0..3).map(|i| core.add_lane(i).unwrap()).collect();
        let mut model = Model::new(3);
        let mut next = 0u32;
        for op in ops {
            match op {
                Op::Submit { lane, lifecycle } => {
                    next += 1;
                    let class = if lifecycle { LaneClass::Lifecycle } else { LaneClass::Application };
                    let got = core.handle_submit(lanes[lane], class, 0, next).is_ok();
                    prop_assert_eq!(got, model.submit(lane, lifecycle, next));
                }
                Op::Turn => {
                    let got = match core.poll_turn() {
                        Some(Turn::Run { lane, data, class, invocation, item }) => {
                            core.handle_turn_finished(lane, invocation).unwrap();
                            Some((data, class == LaneClass::Lifecycle, item))
                        }
                        Some(Turn::Resume { .. }) => unreachable!(),
                        None => None,
                    };
                    prop_assert_eq!(got, model.turn());
                }
            }
            for (i, l) in lanes.iter().enumerate() {
                let s = core.lane_stats(*l).unwrap();
                prop_assert_eq!(s.application_queued, model.app[i].len());
                prop_assert_eq!(s.lifecycle_queued, model.life[i].len());
                prop_assert_eq!(s.decision.debt, model.since_app[i] >= CAP);
            }
        }
    }
}

fn logging_actor<K: SpotKind>(
    spot: &SpotRef<K>,
    name: &'static str,
    tx: &Arc<Mutex<mpsc::Sender<String>>>,
) -> ActorRef<u32, ()> {
    let tx = tx.clone();
    spot.spawn_actor(move |_c: Ctx<K::Yield>, m: u32| {
        tx.lock().unwrap().send(format!("{name}:{m}")).unwrap();
        Handled::ok(())
    })
    .unwrap()
}

// spec: EG-1.4, EG-7.5 — per-actor queues let relocation split the leftover work: return_pending
// hands back each object's queued records, owned and in FIFO order, with their reservations
// released and the lane decision counters dropped (the object moves); carried to target actors
// they run there in the same order.
#[test]
fn return_pending_hands_back_records_per_object_in_fifo_order() {
    let rt = runtime_with(|_| {});
    let (tx, rx) = mpsc::channel::<String>();
    let tx = Arc::new(Mutex::new(tx));
    let next = || rx.recv_timeout(GUARD).expect("event did not arrive");
    let src = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let a = logging_actor(&src, "a", &tx);
    let b = logging_actor(&src, "b", &tx);
    // build up a's lifecycle counter: three lifecycle turns with an empty application lane
    for i in 0..3 {
        let t = tx.clone();
        src.actor_lifecycle(&a, move |_c| {
            t.lock().unwrap().send(format!("lc{i}")).unwrap();
            Handled::ok(())
        })
        .unwrap();
    }
    for i in 0..3 {
        assert_eq!(next(), format!("lc{i}"));
    }
    let deadline = std::time::Instant::now() + GUARD;
    while a.stats().claimed {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert_eq!(a.stats().decision.consecutive_lifecycle, 3);

    src.lane().seal();
    for m in [1, 2, 3] {
        a.tell(m).unwrap();
    }
    for m in [10, 11] {
        b.tell(m).unwrap();
    }
    let t = tx.clone();
    src.actor_lifecycle(&a, move |_c| {
        t.lock().unwrap().send("a-lifecycle".into()).unwrap();
        Handled::ok(())
    })
    .unwrap();
    assert_eq!(a.stats().application_reserved_items, 3);

    let pending = src.lane().return_pending();
    let shape: Vec<(u64, LaneClass, usize)> = pending
        .iter()
        .map(|p| (p.object(), p.class(), p.payload_len()))
        .collect();
    let (ao, bo) = (a.object_id(), b.object_id());
    assert_eq!(
        shape,
        [
            (ao, LaneClass::Lifecycle, 0),
            (ao, LaneClass::Application, 4),
            (ao, LaneClass::Application, 4),
            (ao, LaneClass::Application, 4),
            (bo, LaneClass::Application, 4),
            (bo, LaneClass::Application, 4),
        ]
    );
    for s in [a.stats(), b.stats()] {
        assert_eq!(s.application_queued + s.lifecycle_queued, 0);
        assert_eq!(s.application_reserved_items, 0);
        assert_eq!(s.application_reserved_bytes, 0);
        assert_eq!(s.lifecycle_reserved_items, 0);
    }
    // EG-7.5: counters and debt are dropped when the object moves
    assert_eq!(a.stats().decision, LaneDecision::default());

    // a relocation driver carries each object's records to its target
    let dst = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let a2 = logging_actor(&dst, "a2", &tx);
    let b2 = logging_actor(&dst, "b2", &tx);
    for p in pending {
        let target = if p.object() == ao { &a2 } else { &b2 };
        p.resubmit_to(target).map_err(|(e, _)| e).unwrap();
    }
    let got: Vec<String> = (0..6).map(|_| next()).collect();
    let only = |prefix: &str| -> Vec<String> {
        got.iter()
            .filter(|s| s.starts_with(prefix))
            .cloned()
            .collect()
    };
    assert_eq!(only("a"), ["a-lifecycle", "a2:1", "a2:2", "a2:3"]);
    assert_eq!(only("b2"), ["b2:10", "b2:11"]);
    // nothing ran at the sealed source
    assert!(rx.try_recv().is_err());
}

// Issue 12: the record that ends an actor (destroy, or its last handle dropped) ends only that
// actor: handed back by return_pending and carried to another actor, it ends nothing there.
#[test]
fn an_end_record_carried_to_another_actor_ends_nothing() {
    let rt = runtime_with(|_| {});
    let src = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let a = src
        .spawn_actor(|_c: SpotWideCtx, n: u64| Handled::ok(n + 1))
        .unwrap();
    src.lane().seal();
    a.destroy().unwrap();
    let pending = src.lane().return_pending();
    assert_eq!(pending.len(), 1);
    let dst = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let a2 = dst
        .spawn_actor(|_c: SpotWideCtx, n: u64| Handled::ok(n + 1))
        .unwrap();
    for p in pending {
        p.resubmit_to(&a2).map_err(|(e, _)| e).unwrap();
    }
    assert_eq!(rt.block_on(a2.ask(1)).unwrap().unwrap(), 2);
    assert_eq!(rt.block_on(a2.ask(2)).unwrap().unwrap(), 3);
}

/// Queue lengths of a Spot's lanes and of the runtime's, read from the FIFOs: records behind a
/// held record are the held actor's depth, per FIFO; an idle actor counts as a lane of depth 0;
/// released, the depths return to 0.
fn lane_depths_of<K: SpotKind>() {
    let rt = runtime_with(|_| {});
    let spot = rt.create_spot::<K, _>(|_c, b| Handled::ok(b)).unwrap();
    let session = rt.session_lane().unwrap();
    let mut h = held(&spot);
    let idle = spot
        .spawn_actor(|_c: Ctx<K::Yield>, _m: u32| Handled::ok(()))
        .unwrap();
    for i in 1..=3 {
        h.actor.tell(i).unwrap();
    }
    for _ in 0..2 {
        spot.actor_lifecycle(&h.actor, |_c| Handled::ok(()))
            .unwrap();
    }
    let want = LaneDepths {
        lanes: 2,
        application_queued: 3,
        lifecycle_queued: 2,
        deepest: 5,
    };
    assert_eq!(spot.lane_depths().get(LaneKind::Actor), want, "{}", K::NAME);
    let all = rt.lane_depths();
    assert_eq!(all.get(LaneKind::Actor), want, "{}", K::NAME);
    assert_eq!(all.get(LaneKind::Session).lanes, 1);
    assert_eq!(all.get(LaneKind::Session).queued(), 0);
    assert_eq!(session.lane_depths().lanes, 1);
    assert_eq!(h.actor.stats().application_queued, 3);
    assert_eq!(all.total().queued(), 5);
    h.release();
    wait_until(&rt, || spot.lane_depths().total().queued() == 0);
    assert_eq!(rt.lane_depths().get(LaneKind::Actor).deepest, 0);
    drop(idle);
}

#[test]
fn lane_depths_are_the_fifo_lengths() {
    lane_depths_of::<PerActorUser>();
    lane_depths_of::<SpotWideUser>();
}
