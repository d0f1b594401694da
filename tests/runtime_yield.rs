//! Yield, re-entrancy and resume contract tests (EG-3, EG-4, EG-6.5, EG-16.1–16.8).
//!
//! Every wait is on an event (channels, status events); no sleeps decide an outcome.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use zlink::runtime::*;

const GUARD: Duration = Duration::from_secs(30);

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        application_workers: 2,
        ..Default::default()
    })
    .unwrap()
}

fn next(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(GUARD).expect("event did not arrive")
}

fn expect(rx: &mpsc::Receiver<String>, want: &str) {
    assert_eq!(next(rx), want);
}

/// A one-shot release the test triggers; the handler's request awaits it.
#[derive(Clone, Default)]
struct Gate(
    Arc<Mutex<Option<oneshot::Receiver<()>>>>,
    Arc<Mutex<Option<oneshot::Sender<()>>>>,
);

impl Gate {
    fn new() -> Gate {
        let (tx, rx) = oneshot::channel();
        Gate(
            Arc::new(Mutex::new(Some(rx))),
            Arc::new(Mutex::new(Some(tx))),
        )
    }
    fn take(&self) -> oneshot::Receiver<()> {
        self.0.lock().unwrap().take().unwrap()
    }
    fn open(&self) {
        let _ = self.1.lock().unwrap().take().unwrap().send(());
    }
}

fn wait_status(sub: &StatusSubscriber, rt: &Runtime, source: &str, status: &str) {
    let fut = async {
        loop {
            let e = sub.recv().await;
            if e.source == source && e.status == status {
                return;
            }
        }
    };
    let within = async { tokio::time::timeout(GUARD, fut).await.expect("status") };
    rt.block_on(within).unwrap();
}

fn spot_noop<Y>() -> impl Fn(Ctx<Y>, Bytes) -> Handled<Bytes> + Send + Sync + 'static {
    |_ctx, b| Handled::ok(b)
}

// spec: EG-16.6, EG-3.1, EG-3.2, EG-1.3, EG-2.2
#[test]
fn spotwide_yield_lets_others_run_but_not_the_same_actor() {
    let rt = runtime();
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let e = ev.clone();
    let spot = rt
        .create_spot::<SpotWideUser, _>(move |_ctx, _b| {
            e.lock().unwrap().send("spot".into()).unwrap();
            Handled::ok(Bytes::new())
        })
        .unwrap();
    let release = Gate::new();
    let (e, r) = (ev.clone(), release.clone());
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, msg: &'static str| {
            let e = e.clone();
            match msg {
                "first" => {
                    let r = r.clone();
                    Handled::later(async move {
                        e.lock().unwrap().send("A:first".into()).unwrap();
                        let out = ctx
                            .request(move || async move {
                                r.take().await.ok();
                                Ok(7u32)
                            })
                            .yielding()
                            .await;
                        assert_eq!(out, Ok(7));
                        e.lock().unwrap().send("A:resumed".into()).unwrap();
                        Ok(())
                    })
                }
                _ => {
                    e.lock().unwrap().send("A:second".into()).unwrap();
                    Handled::ok(())
                }
            }
        })
        .unwrap();
    let e = ev.clone();
    let b = spot
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            e.lock().unwrap().send("B".into()).unwrap();
            Handled::ok(())
        })
        .unwrap();
    let e = ev.clone();
    let timer = spot
        .add_timer(move |_ctx| {
            e.lock().unwrap().send("timer".into()).unwrap();
            Handled::ok(())
        })
        .unwrap();

    a.tell("first").unwrap();
    expect(&rx, "A:first");
    a.tell("second").unwrap();
    b.tell(()).unwrap();
    spot.tell(Bytes::new()).unwrap();
    timer.fire().unwrap();
    let mut others: Vec<String> = (0..3).map(|_| next(&rx)).collect();
    others.sort();
    assert_eq!(others, ["B", "spot", "timer"]);
    // the same actor's next record has not run: its claim is kept
    assert_eq!(a.stats().application_queued, 1);
    assert!(a.stats().claimed);
    release.open();
    expect(&rx, "A:resumed");
    expect(&rx, "A:second");
}

// spec: EG-16.8, EG-3, EG-4.1
#[test]
fn yielded_call_resumes_in_a_new_turn_at_the_back_of_the_queue() {
    let rt = runtime();
    let sub = rt.subscribe_status(1024);
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let release_a = Gate::new();
    let (e, r) = (ev.clone(), release_a.clone());
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (e, r) = (e.clone(), r.clone());
            Handled::later(async move {
                let before = (ctx.turn_number(), ctx.invocation());
                e.lock().unwrap().send("A:start".into()).unwrap();
                ctx.request(move || async move {
                    r.take().await.ok();
                    Ok(())
                })
                .yielding()
                .await
                .unwrap();
                let after = (ctx.turn_number(), ctx.invocation());
                // same record (invocation), new turn
                assert_eq!(before.1, after.1);
                assert!(after.0 > before.0);
                e.lock().unwrap().send("A:resumed".into()).unwrap();
                Ok(())
            })
        })
        .unwrap();
    let release_b = Gate::new();
    let (e, r) = (ev.clone(), release_b.clone());
    let b = spot
        .spawn_actor(move |_ctx: SpotWideCtx, m: &'static str| {
            let (e, r) = (e.clone(), r.clone());
            Handled::later(async move {
                e.lock().unwrap().send(format!("B:{m}")).unwrap();
                if m == "b1" {
                    // a normal await keeps the gate (EG-2.6)
                    r.take().await.ok();
                }
                Ok(())
            })
        })
        .unwrap();
    let e = ev.clone();
    let c = spot
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            e.lock().unwrap().send("C".into()).unwrap();
            Handled::ok(())
        })
        .unwrap();

    a.tell(()).unwrap();
    expect(&rx, "A:start");
    b.tell("b1").unwrap();
    expect(&rx, "B:b1");
    b.tell("b2").unwrap();
    c.tell(()).unwrap();
    release_a.open();
    wait_status(
        &sub,
        &rt,
        &format!("lane/{}", a.object_id()),
        "resume-queued",
    );
    release_b.open();
    expect(&rx, "C");
    expect(&rx, "A:resumed");
    expect(&rx, "B:b2");
}

fn sealed_or_ended_resume_fails(seal: bool) {
    let rt = runtime();
    let sub = rt.subscribe_status(1024);
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<InstanceSpot, _>(spot_noop()).unwrap();
    let release = Gate::new();
    let (e, r) = (ev.clone(), release.clone());
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (e, r) = (e.clone(), r.clone());
            Handled::later(async move {
                e.lock().unwrap().send("A:start".into()).unwrap();
                let _ = ctx
                    .request(move || async move {
                        r.take().await.ok();
                        Ok(())
                    })
                    .yielding()
                    .await;
                e.lock().unwrap().send("A:resumed".into()).unwrap();
                Ok(())
            })
        })
        .unwrap();
    a.tell(()).unwrap();
    expect(&rx, "A:start");
    if seal {
        spot.seal();
    } else {
        spot.end();
    }
    release.open();
    wait_status(
        &sub,
        &rt,
        &format!("lane/{}", a.object_id()),
        "resume-refused",
    );
    // the continuation never runs
    assert!(rx.try_recv().is_err());
    assert_eq!(rt.metrics().resumes_refused, 1);
    assert!(!a.stats().claimed);
}

// spec: EG-4.1, EG-16.8
#[test]
fn resume_after_seal_fails_instead_of_running() {
    sealed_or_ended_resume_fails(true);
}

// spec: EG-4.1
#[test]
fn resume_after_spot_end_fails_instead_of_running() {
    sealed_or_ended_resume_fails(false);
}

// spec: EG-4.1 — starting relocation alone does not stop processing; after unseal work continues
#[test]
fn seal_stops_new_turns_until_unsealed() {
    let rt = runtime();
    let (ev, rx) = mpsc::channel::<u32>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let e = ev.clone();
    let a = spot
        .spawn_actor(move |_ctx: SpotWideCtx, m: u32| {
            e.lock().unwrap().send(m).unwrap();
            Handled::ok(())
        })
        .unwrap();
    a.tell(1).unwrap();
    assert_eq!(rx.recv_timeout(GUARD).unwrap(), 1);
    spot.lane().seal();
    a.tell(2).unwrap();
    assert_eq!(a.stats().application_queued, 1);
    spot.lane().unseal();
    assert_eq!(rx.recv_timeout(GUARD).unwrap(), 2);
    // wait (no sleep) for record 2's terminal, which returns its reservation
    let deadline = std::time::Instant::now() + GUARD;
    while a.stats().claimed {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    spot.lane().seal();
    a.tell(3).unwrap();
    assert_eq!(spot.lane().return_pending().len(), 1);
    assert_eq!(a.stats().application_reserved_items, 0);
}

// spec: EG-4.1, EG-2.1 — relocating one actor holds only that actor's records: under a shared
// SpotWide gate, its sibling keeps running (a record submitted after the sealed actor's runs
// first), its queue is taken back alone, and after an unseal it runs again.
#[test]
fn sealing_one_actor_holds_only_its_records() {
    let rt = runtime();
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let mk = |name: &'static str| {
        let e = ev.clone();
        spot.spawn_actor(move |_ctx: SpotWideCtx, m: u32| {
            e.lock().unwrap().send(format!("{name}{m}")).unwrap();
            Handled::ok(())
        })
        .unwrap()
    };
    let (a, b) = (mk("A"), mk("B"));
    a.seal();
    assert!(a.is_sealed() && !b.is_sealed());
    a.tell(1).unwrap();
    b.tell(10).unwrap();
    // without the seal A1 (queued first, same gate) would run before B10
    expect(&rx, "B10");
    b.tell(11).unwrap();
    expect(&rx, "B11");
    assert_eq!(a.stats().application_queued, 1);
    a.unseal();
    expect(&rx, "A1");
    // wait (no sleep) for A1's terminal, which returns its reservation
    let deadline = std::time::Instant::now() + GUARD;
    while a.stats().claimed {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    // taken back alone: B's queue is untouched
    a.seal();
    a.tell(2).unwrap();
    a.tell(3).unwrap();
    let back = a.return_pending();
    assert_eq!(back.len(), 2);
    assert!(back.iter().all(|r| r.object() == a.object_id()));
    assert_eq!(a.stats().application_reserved_items, 0);
    b.tell(12).unwrap();
    expect(&rx, "B12");
}

// spec: EG-1.4, EG-7.6 — a sealed actor's queued sends come back as their messages, unrun and
// in arrival order (`tell` and `prepare_send` alike), so a relocation can carry them to the
// target; a request is not a send and comes back as a record, and a wrong message type leaves
// a record intact.
#[test]
fn captured_sends_come_back_as_messages_in_arrival_order() {
    let rt = runtime();
    let (ev, rx) = mpsc::channel::<u32>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let e = ev.clone();
    let a = spot
        .spawn_actor(move |_ctx: SpotWideCtx, m: u32| {
            e.lock().unwrap().send(m).unwrap();
            Handled::ok(())
        })
        .unwrap();
    a.seal();
    a.tell(1).unwrap();
    a.prepare_send(2).retry().unwrap();
    let asked = a.ask(3);
    a.tell(4).unwrap();
    let mut back = a.return_pending().into_iter();
    let first = back.next().unwrap();
    let first = first.into_message::<u64, ()>().unwrap_err();
    assert_eq!(first.into_message::<u32, ()>().unwrap(), 1);
    assert_eq!(back.next().unwrap().into_message::<u32, ()>().unwrap(), 2);
    let request = back.next().unwrap().into_message::<u32, ()>().unwrap_err();
    assert_eq!(back.next().unwrap().into_message::<u32, ()>().unwrap(), 4);
    assert!(back.next().is_none());
    // the request's record, dropped, answers its requester: exactly one terminal
    drop(request);
    let answer = block_on(asked);
    assert!(answer.is_err());
    assert!(rx.try_recv().is_err(), "nothing ran");
}

// spec: SB-8.9, SB-14.21 (runtime half) — the hand-off of one actor's queue between two Spots:
// the target's lane is installed sealed (a temporary queue that does not dispatch), the source's
// sends are captured in arrival order and appended there, later arrivals go behind them, and
// opening dispatch runs every message exactly once, in order, on the target only.
#[test]
fn handed_off_sends_run_once_in_order_on_the_target() {
    let rt = runtime();
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let from = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let to = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let mk = |spot_name: &'static str, e: Arc<Mutex<mpsc::Sender<String>>>| {
        move |_ctx: SpotWideCtx, m: u32| {
            e.lock().unwrap().send(format!("{spot_name}{m}")).unwrap();
            Handled::ok(())
        }
    };
    let source = from.spawn_actor(mk("source:", ev.clone())).unwrap();
    source.tell(0).unwrap();
    expect(&rx, "source:0");
    source.seal();
    for m in 1..=3 {
        source.tell(m).unwrap();
    }
    // the target installs its queue without dispatching
    let target = to.spawn_actor(mk("target:", ev.clone())).unwrap();
    target.seal();
    for record in source.return_pending() {
        target
            .tell(record.into_message::<u32, ()>().unwrap())
            .unwrap();
    }
    // a message that arrived after the capture (a held session message) goes behind
    target.tell(4).unwrap();
    assert!(rx.try_recv().is_err(), "nothing dispatched before the open");
    target.unseal();
    for m in 1..=4 {
        expect(&rx, &format!("target:{m}"));
    }
    assert_eq!(source.stats().application_queued, 0);
    assert!(rx.try_recv().is_err(), "nothing twice");
}

// spec: EG-1.4, EG-4.1 — a whole Spot moves: the Spot seal holds every member, and its queued
// sends come back per object, each object's in arrival order, as messages.
#[test]
fn a_sealed_spot_gives_back_each_members_sends_in_order() {
    let rt = runtime();
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let a = spot
        .spawn_actor(|_ctx: SpotWideCtx, _m: u32| Handled::ok(()))
        .unwrap();
    let b = spot
        .spawn_actor(|_ctx: SpotWideCtx, _m: u32| Handled::ok(()))
        .unwrap();
    spot.seal();
    for m in 0..3 {
        a.tell(m).unwrap();
        b.tell(10 + m).unwrap();
    }
    let mut per_object: std::collections::BTreeMap<u64, Vec<u32>> = Default::default();
    for record in spot.lane().return_pending() {
        let object = record.object();
        per_object
            .entry(object)
            .or_default()
            .push(record.into_message::<u32, ()>().unwrap());
    }
    assert_eq!(per_object[&a.object_id()], [0, 1, 2]);
    assert_eq!(per_object[&b.object_id()], [10, 11, 12]);
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { tokio::time::timeout(GUARD, f).await.expect("answered") })
}

// spec: EG-4.1 — a pending Yield resume of a sealed actor fails instead of running, while the
// other actors of its Instance Spot go on.
#[test]
fn resume_of_a_sealed_actor_fails_and_its_spot_goes_on() {
    let rt = runtime();
    let sub = rt.subscribe_status(1024);
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<InstanceSpot, _>(spot_noop()).unwrap();
    let release = Gate::new();
    let (e, r) = (ev.clone(), release.clone());
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (e, r) = (e.clone(), r.clone());
            Handled::later(async move {
                e.lock().unwrap().send("A:start".into()).unwrap();
                let _ = ctx
                    .request(move || async move {
                        r.take().await.ok();
                        Ok(())
                    })
                    .yielding()
                    .await;
                e.lock().unwrap().send("A:resumed".into()).unwrap();
                Ok(())
            })
        })
        .unwrap();
    let e = ev.clone();
    let b = spot
        .spawn_actor(move |_ctx: SpotWideCtx, m: u32| {
            e.lock().unwrap().send(format!("B{m}")).unwrap();
            Handled::ok(())
        })
        .unwrap();
    a.tell(()).unwrap();
    expect(&rx, "A:start");
    a.seal();
    release.open();
    wait_status(
        &sub,
        &rt,
        &format!("lane/{}", a.object_id()),
        "resume-refused",
    );
    assert_eq!(rt.metrics().resumes_refused, 1);
    assert!(!a.stats().claimed);
    b.tell(1).unwrap();
    expect(&rx, "B1");
    // the continuation never ran
    assert!(rx.try_recv().is_err());
}

// spec: EG-7.5 — debt and counters are per object and dropped when it moves: the moving actor's
// yield debt goes with its returned work, its sibling's stays.
#[test]
fn moving_actor_drops_its_debt_and_its_sibling_keeps_its_own() {
    let rt = runtime();
    let (ev, rx) = mpsc::channel::<u32>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let a = spot
        .spawn_actor(|_ctx: SpotWideCtx, _m: u32| Handled::ok(()))
        .unwrap();
    let b = spot
        .spawn_actor(|_ctx: SpotWideCtx, _m: u32| Handled::ok(()))
        .unwrap();
    let cap = RuntimeConfig::default().limits.lifecycle_turn_cap;
    for actor in [&a, &b] {
        for i in 0..cap {
            let e = ev.clone();
            spot.actor_lifecycle(actor, move |_ctx| {
                e.lock().unwrap().send(i).unwrap();
                Handled::ok(())
            })
            .unwrap();
        }
    }
    for _ in 0..2 * cap {
        rx.recv_timeout(GUARD).unwrap();
    }
    let deadline = std::time::Instant::now() + GUARD;
    while a.stats().claimed || b.stats().claimed {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert!(a.stats().decision.debt && b.stats().decision.debt);
    a.seal();
    assert!(a.return_pending().is_empty());
    assert_eq!(a.stats().decision, LaneDecision::default());
    assert!(b.stats().decision.debt, "another actor's debt is its own");
}

type Slot<T> = Arc<OnceLock<T>>;

// spec: EG-16.7, EG-6, EG-6.5, EG-3.3
#[test]
fn awaiting_oneself_fails_before_submission() {
    let rt = runtime();
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let me: Slot<ActorRef<u32, u32>> = Arc::default();
    let peer: Slot<ActorRef<u32, u32>> = Arc::default();
    let submitted = Arc::new(AtomicUsize::new(0));
    let (m2, p2, s2) = (me.clone(), peer.clone(), submitted.clone());
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, m: u32| {
            let (me, peer, submitted) = (m2.clone(), p2.clone(), s2.clone());
            if m != 0 {
                return Handled::ok(m);
            }
            Handled::later(async move {
                let me = me.get().unwrap().clone();
                let peer = peer.get().unwrap().clone();
                // own actor, normal terminal
                let r = ctx.ask(&me, 1).await;
                assert_eq!(r, Err(InvalidOperation::AwaitOwnActor.into()));
                // own actor, even with Yield: the actor-queue claim is kept
                let r = ctx.ask(&me, 1).yielding().await;
                assert_eq!(r, Err(InvalidOperation::AwaitOwnActor.into()));
                // nothing was submitted to the own queue
                assert_eq!(me.stats().application_queued, 0);
                // same-gate target with the turn-holding terminal
                let r = ctx.ask(&peer, 1).await;
                assert_eq!(r, Err(InvalidOperation::AwaitSameGate.into()));
                assert_eq!(peer.stats().application_queued, 0);
                // ... allowed with Yield: the shared gate is released first
                assert_eq!(ctx.ask(&peer, 5).yielding().await, Ok(5));
                // fire-and-forget to oneself is appended
                ctx.send(&me, 9).unwrap();
                assert_eq!(me.stats().application_queued, 1);
                let s = submitted.clone();
                let r = ctx
                    .request(move || {
                        s.fetch_add(1, Ordering::SeqCst);
                        async { Ok(()) }
                    })
                    .await;
                assert_eq!(r, Ok(()));
                Ok(1)
            })
        })
        .unwrap();
    let b = spot
        .spawn_actor(|_ctx: SpotWideCtx, m: u32| Handled::ok(m))
        .unwrap();
    me.set(a.clone()).unwrap();
    peer.set(b).unwrap();
    assert_eq!(rt.block_on(a.ask(0)).unwrap(), Ok(1));
    assert_eq!(submitted.load(Ordering::SeqCst), 1);
}

// spec: EG-16.7, EG-6.5 — a Spot handler awaiting its own Spot, and awaiting across gates
#[test]
fn spot_awaiting_itself_fails_other_gates_succeed() {
    let rt = runtime();
    let me: Slot<SpotRef<EntrySpot>> = Arc::default();
    let actor: Slot<ActorRef<u32, u32>> = Arc::default();
    let (m2, a2) = (me.clone(), actor.clone());
    let entry = rt
        .create_spot::<EntrySpot, _>(move |ctx: SerialCtx, b: Bytes| {
            if b.is_empty() {
                return Handled::ok(Bytes::from_static(b"pong"));
            }
            let (me, actor) = (m2.get().unwrap().clone(), a2.get().unwrap().clone());
            Handled::later(async move {
                let r = ctx.ask_spot(&me, Bytes::new()).await;
                assert_eq!(r, Err(InvalidOperation::AwaitOwnActor.into()));
                // Entry actors have their own gates (EG-2.4): not re-entrant
                assert_eq!(ctx.ask(&actor, 3).await, Ok(4));
                Ok(Bytes::from_static(b"done"))
            })
        })
        .unwrap();
    let a = entry
        .spawn_actor(|_ctx: SerialCtx, m: u32| Handled::ok(m + 1))
        .unwrap();
    me.set(entry.clone()).unwrap();
    actor.set(a).unwrap();
    let r = rt.block_on(entry.ask(Bytes::from_static(b"go"))).unwrap();
    assert_eq!(r.unwrap(), Bytes::from_static(b"done"));
}

// spec: EG-16.5, EG-4.2
#[test]
fn yield_outside_the_owner_turn_fails_before_submission() {
    let rt = runtime();
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let kept: Arc<Mutex<Option<SpotWideCtx>>> = Arc::default();
    let k = kept.clone();
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            k.lock().unwrap().get_or_insert(ctx);
            Handled::ok(())
        })
        .unwrap();
    // the second record starts only after the first one's turn ended
    rt.block_on(a.ask(())).unwrap().unwrap();
    rt.block_on(a.ask(())).unwrap().unwrap();
    let ctx = kept.lock().unwrap().take().unwrap();
    assert!(!ctx.in_turn());
    let submitted = Arc::new(AtomicUsize::new(0));
    let s = submitted.clone();
    assert_eq!(a.stats().application_queued, 0);
    let r = rt
        .block_on(
            ctx.request(move || {
                s.fetch_add(1, Ordering::SeqCst);
                async { Ok(()) }
            })
            .yielding(),
        )
        .unwrap();
    assert_eq!(r, Err(InvalidOperation::YieldOutsideTurn.into()));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidOperation);
    let r = rt.block_on(ctx.ask(&a, ()).yielding()).unwrap();
    assert_eq!(r, Err(InvalidOperation::YieldOutsideTurn.into()));
    assert_eq!(submitted.load(Ordering::SeqCst), 0);
    // no queue change
    assert_eq!(a.stats().application_queued, 0);
}

// spec: EG-16.5 — a stale context used inside another record's turn is still outside its turn
#[test]
fn stale_context_inside_another_turn_fails() {
    let rt = runtime();
    let spot = rt.create_spot::<InstanceSpot, _>(spot_noop()).unwrap();
    let kept: Arc<Mutex<Option<SpotWideCtx>>> = Arc::default();
    let k = kept.clone();
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, m: u32| {
            if m == 0 {
                *k.lock().unwrap() = Some(ctx);
                return Handled::ok(Ok(()));
            }
            let stale = k.lock().unwrap().take().unwrap();
            Handled::later(async move {
                let r = stale.request(|| async { Ok(()) }).yielding().await;
                Ok(r)
            })
        })
        .unwrap();
    rt.block_on(a.ask(0)).unwrap().unwrap().unwrap();
    let r = rt.block_on(a.ask(1)).unwrap().unwrap();
    assert_eq!(r, Err(InvalidOperation::YieldOutsideTurn.into()));
}

// spec: EG-16.1, EG-16.2, EG-3.4 — SpotWide User and Instance turns offer both terminals
fn both_terminals<K: SpotKind<Yield = CanYield>>() {
    let rt = runtime();
    let spot = rt.create_spot::<K, _>(|_c, b| Handled::ok(b)).unwrap();
    let other = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let remote = other
        .spawn_actor(|_c: SpotWideCtx, m: u32| Handled::ok(m * 2))
        .unwrap();
    let target = spot.clone();
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (remote, other, target) = (remote.clone(), other.clone(), target.clone());
            Handled::later(async move {
                // Actor request
                assert_eq!(ctx.ask(&remote, 2).await, Ok(4));
                assert_eq!(ctx.ask(&remote, 3).yielding().await, Ok(6));
                // Spot request
                let r = ctx.ask_spot(&other, Bytes::from_static(b"x")).await;
                assert_eq!(r.unwrap(), Bytes::from_static(b"x"));
                let r = ctx
                    .ask_spot(&other, Bytes::from_static(b"y"))
                    .yielding()
                    .await;
                assert_eq!(r.unwrap(), Bytes::from_static(b"y"));
                // Channel/remote request
                assert_eq!(ctx.request(|| async { Ok(1u8) }).await, Ok(1));
                assert_eq!(ctx.request(|| async { Ok(2u8) }).yielding().await, Ok(2));
                // CPU/IO worker
                assert_eq!(ctx.worker(|| 40 + 2).await, Ok(42));
                assert_eq!(ctx.worker(|| 43).yielding().await, Ok(43));
                // create / get-or-create in the same Spot: Yield only (the new actor's
                // activation needs this gate), in another Spot: both
                let r = ctx
                    .create_actor(&target, |_c: SpotWideCtx, m: u32| Handled::ok(m))
                    .await;
                assert_eq!(r.unwrap_err(), InvalidOperation::AwaitSameGate.into());
                let made = ctx
                    .create_actor(&target, |_c: SpotWideCtx, m: u32| Handled::ok(m + 1))
                    .yielding()
                    .await
                    .unwrap();
                assert_eq!(ctx.ask(&made, 1).yielding().await, Ok(2));
                let g1 = ctx
                    .get_or_create_actor(&target, "k", |_c: SpotWideCtx, m: u32| Handled::ok(m))
                    .yielding()
                    .await
                    .unwrap();
                let g2 = ctx
                    .get_or_create_actor(&target, "k", |_c: SpotWideCtx, m: u32| Handled::ok(m))
                    .yielding()
                    .await
                    .unwrap();
                assert_eq!(g1.object_id(), g2.object_id());
                let elsewhere = ctx
                    .create_actor(&other, |_c: SpotWideCtx, m: u32| Handled::ok(m))
                    .await
                    .unwrap();
                assert_eq!(ctx.ask(&elsewhere, 8).await, Ok(8));
                let g3 = ctx
                    .get_or_create_actor(&other, "z", |_c: SpotWideCtx, m: u32| Handled::ok(m))
                    .await
                    .unwrap();
                assert_eq!(ctx.ask(&g3, 9).yielding().await, Ok(9));
                assert!(ctx.yield_offered());
                Ok(())
            })
        })
        .unwrap();
    rt.block_on(a.ask(())).unwrap().unwrap();
}

// spec: EG-16.1, EG-16.2
#[test]
fn spotwide_user_turn_offers_normal_and_yield() {
    both_terminals::<SpotWideUser>();
}

// spec: EG-16.1, EG-16.2
#[test]
fn instance_turn_offers_normal_and_yield() {
    both_terminals::<InstanceSpot>();
}

// spec: EG-16.3 — Entry Spot, PerActor, Entry actor, Node and Channel handlers get a context
// without Yield (statically: tests/ui/no_yield_*.rs), and the normal terminal works there.
#[test]
fn other_turns_offer_only_the_normal_terminal() {
    let rt = runtime();
    let per = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let peer = per
        .spawn_actor(|ctx: SerialCtx, m: u32| {
            assert!(!ctx.yield_offered());
            Handled::ok(m + 1)
        })
        .unwrap();
    let p = peer.clone();
    let a = per
        .spawn_actor(move |ctx: SerialCtx, _m: ()| {
            let p = p.clone();
            Handled::later(async move {
                // PerActor: a different actor has its own gate, so the normal terminal works
                let r = ctx.ask(&p, 1).await;
                Ok(r)
            })
        })
        .unwrap();
    assert_eq!(rt.block_on(a.ask(())).unwrap().unwrap(), Ok(2));
    let node = rt.handler_lane().unwrap();
    let (tx, rx) = mpsc::channel();
    let p = peer.clone();
    node.submit(0, move |ctx: SerialCtx| {
        Handled::later(async move {
            let r = ctx.ask(&p, 10).await;
            tx.send((r, ctx.yield_offered())).unwrap();
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(rx.recv_timeout(GUARD).unwrap(), (Ok(11), false));
}

/// How a test abandons a Yield.
#[derive(Clone, Copy, Debug)]
enum Abandon {
    /// `tokio::time::timeout` of zero (it fires at the timer's next tick).
    TimeoutNow,
    /// `tokio::time::timeout` that fires while the record is parked.
    TimeoutParked,
    /// `select!` whose other branch the test completes while the record is parked.
    SelectParked,
    /// biased `select!` whose other branch is ready at once.
    SelectReady,
}

/// A SpotWide actor abandons a yielding call whose result never comes; afterwards it still holds
/// the gate in its own turn (a normal await works, EG-2.6), finishes, and serves its next record.
fn abandoned_yield_leaves_the_actor_serving(how: Abandon) {
    let rt = runtime();
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let other = Gate::new();
    let (e, o) = (ev.clone(), other.clone());
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, msg: &'static str| {
            let (e, o) = (e.clone(), o.clone());
            if msg != "first" {
                e.lock().unwrap().send(format!("A:{msg}")).unwrap();
                return Handled::ok(());
            }
            Handled::later(async move {
                let never = ctx
                    .request(std::future::pending::<Result<u32, RuntimeError>>)
                    .yielding();
                let turn = ctx.turn_number();
                let abandoned = match how {
                    Abandon::TimeoutNow => {
                        tokio::time::timeout(Duration::ZERO, never).await.is_err()
                    }
                    Abandon::TimeoutParked => {
                        tokio::time::timeout(Duration::from_millis(50), never)
                            .await
                            .is_err()
                    }
                    Abandon::SelectParked => {
                        let branch = o.take();
                        tokio::select! {
                            _ = never => false,
                            _ = branch => true,
                        }
                    }
                    Abandon::SelectReady => {
                        tokio::select! {
                            biased;
                            _ = never => false,
                            _ = std::future::ready(()) => true,
                        }
                    }
                };
                assert!(abandoned);
                if matches!(how, Abandon::SelectReady) {
                    // withdrawn before the gate was given up: still the same turn
                    assert_eq!(ctx.turn_number(), turn);
                }
                // the record holds the gate again: a normal await is allowed (EG-2.6)
                let n = ctx.request(|| async { Ok(1u32) }).await;
                e.lock()
                    .unwrap()
                    .send(format!("A:abandoned {n:?}"))
                    .unwrap();
                Ok(())
            })
        })
        .unwrap();
    let e = ev.clone();
    let b = spot
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            e.lock().unwrap().send("B".into()).unwrap();
            Handled::ok(())
        })
        .unwrap();
    a.tell("first").unwrap();
    if matches!(how, Abandon::SelectParked) {
        // B runs behind the same gate: A gave it up (parked)
        b.tell(()).unwrap();
        expect(&rx, "B");
        other.open();
    }
    expect(&rx, "A:abandoned Ok(1)");
    a.tell("second").unwrap();
    expect(&rx, "A:second");
    b.tell(()).unwrap();
    expect(&rx, "B");
    // the record's terminal returned its reservation and the claim
    let deadline = std::time::Instant::now() + GUARD;
    while a.stats().claimed || a.stats().application_reserved_items > 0 {
        assert!(std::time::Instant::now() < deadline, "claim kept");
        std::thread::yield_now();
    }
}

// spec: EG-2.6, EG-16.13, EG-3 — a Yield dropped by a zero timeout
#[test]
fn yield_cancelled_by_a_zero_timeout_serves_the_next_record() {
    abandoned_yield_leaves_the_actor_serving(Abandon::TimeoutNow);
}

// spec: EG-2.6, EG-16.13, EG-3 — a Yield dropped by a timeout while the record is parked
#[test]
fn yield_cancelled_by_a_timeout_while_parked_serves_the_next_record() {
    abandoned_yield_leaves_the_actor_serving(Abandon::TimeoutParked);
}

// spec: EG-2.6, EG-16.13, EG-3 — a Yield dropped by `select!` while the record is parked
#[test]
fn yield_cancelled_by_select_while_parked_serves_the_next_record() {
    abandoned_yield_leaves_the_actor_serving(Abandon::SelectParked);
}

// spec: EG-2.6, EG-16.13, EG-3 — a Yield dropped by a biased `select!` whose other branch is ready
#[test]
fn yield_cancelled_by_a_ready_select_branch_keeps_the_turn() {
    abandoned_yield_leaves_the_actor_serving(Abandon::SelectReady);
}

// spec: EG-4.1, EG-6.1 — seal during a Yield, then unseal: the refused record is cancelled, and
// nothing of it (its yield signal, its cancellation) reaches the lane's next record, which awaits
// normally across several polls and finishes.
#[test]
fn seal_during_yield_then_unseal_leaves_the_next_record_alone() {
    let rt = runtime();
    let sub = rt.subscribe_status(1024);
    let (ev, rx) = mpsc::channel::<String>();
    let ev = Arc::new(Mutex::new(ev));
    let spot = rt.create_spot::<SpotWideUser, _>(spot_noop()).unwrap();
    let (first, second) = (Gate::new(), Gate::new());
    let (e, f, s) = (ev.clone(), first.clone(), second.clone());
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, msg: &'static str| {
            let (e, f, s) = (e.clone(), f.clone(), s.clone());
            Handled::later(async move {
                e.lock().unwrap().send(format!("A:{msg}")).unwrap();
                if msg == "first" {
                    let _ = ctx
                        .request(move || async move {
                            f.take().await.ok();
                            Ok(())
                        })
                        .yielding()
                        .await;
                    e.lock().unwrap().send("A:first resumed".into()).unwrap();
                } else {
                    let r = ctx
                        .request(move || async move {
                            s.take().await.ok();
                            Ok(2u32)
                        })
                        .await;
                    e.lock().unwrap().send(format!("A:second {r:?}")).unwrap();
                }
                Ok(())
            })
        })
        .unwrap();
    a.tell("first").unwrap();
    expect(&rx, "A:first");
    spot.seal();
    first.open();
    wait_status(
        &sub,
        &rt,
        &format!("lane/{}", a.object_id()),
        "resume-refused",
    );
    spot.unseal();
    a.tell("second").unwrap();
    expect(&rx, "A:second");
    second.open();
    expect(&rx, "A:second Ok(2)");
    assert!(rx.try_recv().is_err(), "the refused record ran");
}
