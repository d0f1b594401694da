//! Gate layout and overlap contract tests (EG-1.3, EG-2, EG-16.13–16.15, SB-10.1, SB-11.1).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Barrier, oneshot};
use zlink::runtime::*;

const GUARD: Duration = Duration::from_secs(30);

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        application_workers: 2,
        ..Default::default()
    })
    .unwrap()
}

/// Counts handlers inside their critical section and remembers the maximum.
#[derive(Default)]
struct Overlap {
    active: AtomicUsize,
    max: AtomicUsize,
    done: AtomicUsize,
}

impl Overlap {
    async fn section(&self) {
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.active.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

fn wait_done(o: &Overlap, n: usize, rx: &mpsc::Receiver<()>) {
    while o.done.load(Ordering::SeqCst) < n {
        rx.recv_timeout(GUARD).expect("handlers did not finish");
    }
}

type Done = Arc<Mutex<mpsc::Sender<()>>>;

fn overlap_handler<Y: YieldMode>(
    o: &Arc<Overlap>,
    d: &Done,
) -> impl Fn(Ctx<Y>, u32) -> Handled<()> + Send + Sync + 'static {
    let (o, d) = (o.clone(), d.clone());
    move |_ctx, _m| {
        let (o, d) = (o.clone(), d.clone());
        Handled::later(async move {
            o.section().await;
            let _ = d.lock().unwrap().send(());
            Ok(())
        })
    }
}

// spec: EG-16.13, EG-1, EG-2, EG-2.2, EG-1.3, EG-1.4, EG-2.6 — SpotWide: handlers of different actors never
// overlap, even when they await inside the turn.
#[test]
fn spotwide_actor_handlers_never_overlap() {
    let rt = runtime();
    let o = Arc::new(Overlap::default());
    let (tx, rx) = mpsc::channel();
    let d: Done = Arc::new(Mutex::new(tx));
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let actors: Vec<ActorRef<u32>> = (0..8)
        .map(|_| spot.spawn_actor(overlap_handler(&o, &d)).unwrap())
        .collect();
    let senders: Vec<_> = (0..2)
        .map(|t| {
            let actors = actors.clone();
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    actors[((i as usize) + t) % actors.len()].tell(i).unwrap();
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    wait_done(&o, 400, &rx);
    assert_eq!(o.max.load(Ordering::SeqCst), 1);
}

async fn rendezvous(b: &Barrier) {
    b.wait().await;
}

// spec: EG-16.13, EG-2.4 — PerActor: handlers of different actors run concurrently (each waits
// for the other inside its handler; this finishes only if both run at the same time).
#[test]
fn peractor_actor_handlers_run_concurrently() {
    let rt = runtime();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let mk = |b: Arc<Barrier>| {
        move |_ctx: SerialCtx, _m: ()| {
            let b = b.clone();
            Handled::later(async move {
                rendezvous(&b).await;
                Ok(())
            })
        }
    };
    let a = spot.spawn_actor(mk(barrier.clone())).unwrap();
    let b = spot.spawn_actor(mk(barrier.clone())).unwrap();
    let (ra, rb) = (a.ask(()), b.ask(()));
    let both = rt
        .block_on(async { tokio::time::timeout(GUARD, async { (ra.await, rb.await) }).await })
        .unwrap()
        .expect("PerActor handlers did not overlap");
    assert!(both.0.is_ok() && both.1.is_ok());
}

// spec: EG-16.14, EG-2.2 — SpotWide: timer callbacks never overlap actor or Spot handlers
#[test]
fn spotwide_timers_never_overlap_handlers() {
    let rt = runtime();
    let o = Arc::new(Overlap::default());
    let (tx, rx) = mpsc::channel();
    let d: Done = Arc::new(Mutex::new(tx));
    let (o2, d2) = (o.clone(), d.clone());
    let spot = rt
        .create_spot::<SpotWideUser, _>(move |_c, b| {
            let (o, d) = (o2.clone(), d2.clone());
            Handled::later(async move {
                o.section().await;
                let _ = d.lock().unwrap().send(());
                Ok(b)
            })
        })
        .unwrap();
    let actor = spot.spawn_actor(overlap_handler(&o, &d)).unwrap();
    let timers: Vec<TimerRef> = (0..3)
        .map(|_| {
            let h = overlap_handler::<CanYield>(&o, &d);
            spot.add_timer(move |ctx| h(ctx, 0)).unwrap()
        })
        .collect();
    for i in 0..50 {
        actor.tell(i).unwrap();
        spot.tell(Bytes::new()).unwrap();
        for t in &timers {
            t.fire().unwrap();
        }
    }
    wait_done(&o, 250, &rx);
    assert_eq!(o.max.load(Ordering::SeqCst), 1);
}

// spec: EG-16.14, EG-2.5 — PerActor: different timers' callbacks run concurrently
#[test]
fn peractor_timers_run_concurrently() {
    let rt = runtime();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let (tx, rx) = mpsc::channel::<()>();
    let tx = Arc::new(Mutex::new(tx));
    let mk = || {
        let (b, tx) = (barrier.clone(), tx.clone());
        spot.add_timer(move |_ctx: SerialCtx| {
            let (b, tx) = (b.clone(), tx.clone());
            Handled::later(async move {
                rendezvous(&b).await;
                tx.lock().unwrap().send(()).unwrap();
                Ok(())
            })
        })
        .unwrap()
    };
    let (t1, t2) = (mk(), mk());
    t1.fire().unwrap();
    t2.fire().unwrap();
    rx.recv_timeout(GUARD).expect("timers did not overlap");
    rx.recv_timeout(GUARD).expect("timers did not overlap");
}

// spec: EG-2.3, EG-2.4 — Entry Spot: the Spot handler and its timers share the Spot gate; Entry
// actors have their own gates (an Entry actor and the Spot handler can run at the same time).
#[test]
fn entry_spot_gates() {
    let rt = runtime();
    let o = Arc::new(Overlap::default());
    let (tx, rx) = mpsc::channel();
    let d: Done = Arc::new(Mutex::new(tx));
    let barrier = Arc::new(Barrier::new(2));
    let (o2, d2, b2) = (o.clone(), d.clone(), barrier.clone());
    let spot = rt
        .create_spot::<EntrySpot, _>(move |_c, msg| {
            let (o, d, b) = (o2.clone(), d2.clone(), b2.clone());
            Handled::later(async move {
                if msg.is_empty() {
                    o.section().await;
                    let _ = d.lock().unwrap().send(());
                } else {
                    rendezvous(&b).await;
                }
                Ok(msg)
            })
        })
        .unwrap();
    let timer = {
        let h = overlap_handler::<NoYield>(&o, &d);
        spot.add_timer(move |ctx| h(ctx, 0)).unwrap()
    };
    for _ in 0..50 {
        spot.tell(Bytes::new()).unwrap();
        timer.fire().unwrap();
    }
    wait_done(&o, 100, &rx);
    assert_eq!(o.max.load(Ordering::SeqCst), 1);
    let b3 = barrier.clone();
    let actor = spot
        .spawn_actor(move |_c: SerialCtx, _m: ()| {
            let b = b3.clone();
            Handled::later(async move {
                rendezvous(&b).await;
                Ok(())
            })
        })
        .unwrap();
    let (ra, rs) = (actor.ask(()), spot.ask(Bytes::from_static(b"x")));
    let (ra, rs) = rt
        .block_on(async { tokio::time::timeout(GUARD, async { (ra.await, rs.await) }).await })
        .unwrap()
        .expect("Entry actor gate is not separate from the Spot gate");
    assert!(ra.is_ok() && rs.is_ok());
}

fn hold_and_queue<K: SpotKind>() {
    let rt = runtime();
    let spot = rt.create_spot::<K, _>(|_c, b| Handled::ok(b)).unwrap();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let started_tx = Arc::new(Mutex::new(started_tx));
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let a = spot
        .spawn_actor(move |_c: Ctx<K::Yield>, m: u32| {
            if m != 0 {
                return Handled::ok(());
            }
            let (s, r) = (
                started_tx.clone(),
                release_rx.lock().unwrap().take().unwrap(),
            );
            Handled::later(async move {
                s.lock().unwrap().send(()).unwrap();
                r.await.ok();
                Ok(())
            })
        })
        .unwrap();
    let b = spot
        .spawn_actor(|_c: Ctx<K::Yield>, _m: u32| Handled::ok(()))
        .unwrap();
    a.tell(0).unwrap();
    started_rx.recv_timeout(GUARD).unwrap();
    a.tell(1).unwrap();
    a.tell(2).unwrap();
    // the payloads are in A's own queue, not the Spot's and not B's
    assert_eq!(a.stats().application_queued, 2);
    assert_eq!(spot.stats().application_queued, 0);
    assert_eq!(b.stats().application_queued, 0);
    let _ = release_tx.send(());
    rt.block_on(a.ask(3)).unwrap().unwrap();
}

// spec: EG-16.15, EG-2.1
#[test]
fn payloads_land_in_the_actor_queue_spotwide() {
    hold_and_queue::<SpotWideUser>();
}

// spec: EG-16.15, EG-2.1
#[test]
fn payloads_land_in_the_actor_queue_instance() {
    hold_and_queue::<InstanceSpot>();
}

// spec: EG-16.15, EG-2.1
#[test]
fn payloads_land_in_the_actor_queue_peractor() {
    hold_and_queue::<PerActorUser>();
}

// spec: EG-16.15, EG-2.1
#[test]
fn payloads_land_in_the_actor_queue_entry() {
    hold_and_queue::<EntrySpot>();
}

// spec: SB-10.1, SB-11.1 — a session's callbacks never overlap and get a context without Yield;
// the session lane is the same primitive as Spot and actor lanes.
#[test]
fn session_callbacks_never_overlap() {
    let rt = runtime();
    let session = rt.session_lane().unwrap();
    assert_eq!(session.policy(), "session");
    let o = Arc::new(Overlap::default());
    let (tx, rx) = mpsc::channel();
    let d: Done = Arc::new(Mutex::new(tx));
    for i in 0..100u32 {
        let h = overlap_handler::<NoYield>(&o, &d);
        session
            .submit(4, move |ctx: SerialCtx| {
                assert!(!ctx.yield_offered());
                h(ctx, i)
            })
            .unwrap();
    }
    wait_done(&o, 100, &rx);
    assert_eq!(o.max.load(Ordering::SeqCst), 1);
    session.connection_closed();
    assert!(matches!(
        session.submit(0, |_c| Handled::ok(())),
        Err(RuntimeError::Unavailable(Unavailable::Ended))
    ));
}

// spec: EG-2.6, EG-12, EG-6.2 — records of one gate are processed in order while work hops
// between the pool's threads (the observable order is the same as with pinning)
#[test]
fn fifo_order_per_actor() {
    let rt = runtime();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let a = spot
        .spawn_actor(move |_c: SpotWideCtx, m: u32| {
            let s = s.clone();
            Handled::later(async move {
                tokio::task::yield_now().await;
                s.lock().unwrap().push(m);
                Ok(())
            })
        })
        .unwrap();
    for i in 0..500 {
        rt.block_on(a.send(i)).unwrap().unwrap();
    }
    rt.block_on(a.ask(500)).unwrap().unwrap();
    assert_eq!(*seen.lock().unwrap(), (0..=500).collect::<Vec<_>>());
}

// Issue 12: an actor ends when its last handle is dropped; handles dropped after the runtime
// (shut down, or dropped without a shutdown) end nothing and do not panic.
#[test]
fn handles_dropped_after_the_runtime_go_quietly() {
    let rt = runtime();
    let spot = rt
        .create_spot::<EntrySpot, _>(|_c: SerialCtx, m: Bytes| Handled::ok(m))
        .unwrap();
    let a = spot
        .spawn_actor(|_c: SerialCtx, n: u64| Handled::ok(n + 1))
        .unwrap();
    let b = spot
        .spawn_actor(|_c: SerialCtx, n: u64| Handled::ok(n + 1))
        .unwrap();
    assert_eq!(rt.block_on(a.ask(1)).unwrap().unwrap(), 2);
    rt.block_on(rt.shutdown()).unwrap();
    drop(a);
    drop(rt);
    drop(b);
    drop(spot);
}
