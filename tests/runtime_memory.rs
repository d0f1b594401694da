//! Lifecycle memory of the lane runtime: ended lanes, gates, timers, Spots and session lanes give
//! all their memory back (issue 12). Live heap bytes are counted by a counting global allocator
//! (this binary only), lanes and gates by the runtime's own counters (`Runtime::metrics`).
//!
//! One test function: the allocator's count is process-wide, so scenarios run one after another.
//! Each scenario runs a warm-up round (pools, slab and table capacities reach their steady state),
//! then measures the live bytes around a second round of the same size: a leak of a few bytes per
//! ended object shows as growth proportional to the round's size.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use zlink::runtime::*;

#[path = "../examples/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::live;

const GUARD: Duration = Duration::from_secs(20);
/// Objects per round.
const N: usize = 2_000;
/// Growth allowed per ended object between the two rounds (allocator and tokio noise); a leak
/// of a lane or a gate is hundreds of bytes per object.
const SLACK_PER_OBJECT: isize = 16;

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        application_workers: 2,
        ..Default::default()
    })
    .unwrap()
}

/// Wait until the runtime holds exactly `lanes` lanes and `gates` gates (the drains of ended
/// lanes finish on the worker pool, so the last references go shortly after the events the test
/// awaits).
fn settle(rt: &Runtime, lanes: u64, gates: u64) {
    let start = Instant::now();
    loop {
        let m = rt.metrics();
        if m.lanes_live == lanes && m.gates_live == gates {
            return;
        }
        assert!(
            start.elapsed() < GUARD,
            "lanes/gates not released: {} lanes (want {lanes}), {} gates (want {gates})",
            m.lanes_live,
            m.gates_live
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wait until nothing of an earlier scenario is left (a fresh runtime holds no lane and no
/// gate): an ended Spot's gate goes with its last task, after the scenario returned, and a
/// baseline read while it lingers would count it as this scenario's.
fn quiet(rt: &Runtime) {
    settle(rt, 0, 0);
}

/// Run `round` twice; the second round must leave the lanes, gates and live bytes where they were.
fn check(name: &str, rt: &Runtime, round: impl Fn()) {
    let m = rt.metrics();
    let (lanes, gates) = (m.lanes_live, m.gates_live);
    round();
    settle(rt, lanes, gates);
    let before = live();
    round();
    settle(rt, lanes, gates);
    // the last tasks of the round (drains, the end records of dropped handles) free their memory
    // shortly after the lanes go: wait for it, a leak stays
    let start = Instant::now();
    let mut grown = live() - before;
    while grown >= SLACK_PER_OBJECT * N as isize && start.elapsed() < GUARD {
        std::thread::sleep(Duration::from_millis(5));
        grown = live() - before;
    }
    eprintln!("{name}: live bytes grew by {grown} over {N} objects");
    assert!(
        grown < SLACK_PER_OBJECT * N as isize,
        "{name}: {grown} live bytes kept after {N} objects ended"
    );
}

/// Create `N` actors on `spot`, ask each once, destroy each; wait until every destroy ran (a
/// lifecycle record queued behind it is dropped unrun when the lane is removed).
fn actor_round<K: SpotKind>(rt: &Runtime, spot: &SpotRef<K>) {
    rt.block_on(async {
        let mut gone = Vec::with_capacity(N);
        for _ in 0..N {
            let a = spot
                .spawn_actor(|_ctx: Ctx<K::Yield>, n: u64| Handled::ok(n + 1))
                .unwrap();
            assert_eq!(a.ask(1).await.unwrap(), 2);
            a.destroy().unwrap();
            let (tx, rx) = oneshot::channel::<()>();
            // runs never: the destroy record before it removes the lane
            let _ = spot.actor_lifecycle(&a, move |_ctx| {
                let _ = tx.send(());
                Handled::ok(())
            });
            gone.push(rx);
        }
        for rx in gone {
            assert!(rx.await.is_err(), "a record ran after destroy");
        }
    })
    .unwrap();
}

fn actors_of<K: SpotKind>(name: &str, rt: &Runtime) {
    quiet(rt);
    let m = rt.metrics();
    let spot = rt
        .create_spot::<K, _>(|_ctx: Ctx<K::Yield>, m: Bytes| Handled::ok(m))
        .unwrap();
    check(name, rt, || actor_round(rt, &spot));
    spot.end();
    drop(spot);
    // the next scenario starts from what this one found (its last tasks let go of the Spot)
    settle(rt, m.lanes_live, m.gates_live);
}

/// Create `N` actors on `spot`, tell each three messages and drop every handle without
/// `destroy`: each actor ends after its queued messages ran; an actor whose other handle is
/// still alive keeps serving.
fn dropped_round<K: SpotKind>(rt: &Runtime, spot: &SpotRef<K>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let base = rt.metrics().lanes_live;
    rt.block_on(async {
        for i in 0..N {
            let seen = ran.clone();
            let a = spot
                .spawn_actor(move |_ctx: Ctx<K::Yield>, n: u64| {
                    seen.fetch_add(1, Ordering::SeqCst);
                    Handled::ok(n + 1)
                })
                .unwrap();
            let b = a.clone();
            for i in 0..3 {
                a.tell(i).unwrap();
            }
            drop(a);
            // a clone keeps the actor
            assert_eq!(b.ask(1).await.unwrap(), 2);
            for i in 0..2 {
                b.tell(i).unwrap();
            }
            drop(b);
            if i % 16 != 15 {
                continue;
            }
            // at most 16 actors at a time: the tables' high-water marks (ready set, slabs) stay
            // far below the slack in both rounds, so only what an ended actor keeps shows
            let start = Instant::now();
            while rt.metrics().lanes_live > base {
                assert!(
                    start.elapsed() < GUARD,
                    "an actor without handles was not ended"
                );
                tokio::task::yield_now().await;
            }
        }
    })
    .unwrap();
    // every message queued before the last handle went has run (the end comes after them)
    let start = Instant::now();
    while ran.load(Ordering::SeqCst) < 6 * N {
        assert!(
            start.elapsed() < GUARD,
            "queued messages of dropped actors lost"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn dropped_actors_of<K: SpotKind>(name: &str, rt: &Runtime) {
    quiet(rt);
    let m = rt.metrics();
    let spot = rt
        .create_spot::<K, _>(|_ctx: Ctx<K::Yield>, m: Bytes| Handled::ok(m))
        .unwrap();
    check(name, rt, || dropped_round(rt, &spot));
    spot.end();
    drop(spot);
    // the next scenario starts from what this one found (its last tasks let go of the Spot)
    settle(rt, m.lanes_live, m.gates_live);
}

fn timers_of<K: SpotKind>(name: &str, rt: &Runtime) {
    quiet(rt);
    let spot = rt
        .create_spot::<K, _>(|_ctx: Ctx<K::Yield>, m: Bytes| Handled::ok(m))
        .unwrap();
    check(name, rt, || {
        rt.block_on(async {
            for _ in 0..N {
                let (tx, rx) = oneshot::channel::<()>();
                let tx = std::sync::Mutex::new(Some(tx));
                let t = spot
                    .add_timer(move |_ctx| {
                        if let Some(tx) = tx.lock().unwrap().take() {
                            let _ = tx.send(());
                        }
                        Handled::ok(())
                    })
                    .unwrap();
                t.fire().unwrap();
                rx.await.unwrap();
                drop(t);
            }
        })
        .unwrap();
    });
    spot.end();
}

/// Spots with actors and timers, ended.
fn spots_of<K: SpotKind>(name: &str, rt: &Runtime) {
    quiet(rt);
    check(name, rt, || {
        rt.block_on(async {
            for _ in 0..N / 4 {
                let spot = rt
                    .create_spot::<K, _>(|_ctx: Ctx<K::Yield>, m: Bytes| Handled::ok(m))
                    .unwrap();
                let a = spot
                    .spawn_actor(|_ctx: Ctx<K::Yield>, n: u64| Handled::ok(n + 1))
                    .unwrap();
                assert_eq!(a.ask(1).await.unwrap(), 2);
                let _t = spot.add_timer(|_ctx| Handled::ok(())).unwrap();
                assert_eq!(
                    spot.ask(Bytes::from_static(b"x")).await.unwrap(),
                    Bytes::from_static(b"x")
                );
                // queued work of an ended Spot is dropped with it
                a.tell(5).unwrap();
                spot.end();
            }
        })
        .unwrap();
    });
}

fn sessions(rt: &Runtime, close: bool) {
    quiet(rt);
    let name = if close {
        "session lanes closed"
    } else {
        "session lanes dropped"
    };
    check(name, rt, || {
        rt.block_on(async {
            for _ in 0..N {
                let lane = rt.session_lane().unwrap();
                let (tx, rx) = oneshot::channel::<()>();
                lane.submit(0, move |_ctx| {
                    let _ = tx.send(());
                    Handled::ok(())
                })
                .unwrap();
                rx.await.unwrap();
                // a record still queued when the session goes
                lane.submit(0, |_ctx| Handled::ok(())).unwrap();
                if close {
                    lane.connection_closed();
                }
                drop(lane);
            }
        })
        .unwrap();
    });
}

// Issue 12: destroyed actors and actors whose every handle was dropped (every Spot kind), dropped
// timers, ended Spots and ended or dropped
// session lanes release their lanes, gates and memory.
#[test]
fn ended_objects_release_their_memory() {
    let rt = runtime();
    actors_of::<SpotWideUser>("SpotWide actors", &rt);
    actors_of::<InstanceSpot>("Instance actors", &rt);
    actors_of::<EntrySpot>("Entry actors", &rt);
    actors_of::<PerActorUser>("PerActor actors", &rt);
    dropped_actors_of::<SpotWideUser>("SpotWide actors, handles dropped", &rt);
    dropped_actors_of::<InstanceSpot>("Instance actors, handles dropped", &rt);
    dropped_actors_of::<EntrySpot>("Entry actors, handles dropped", &rt);
    dropped_actors_of::<PerActorUser>("PerActor actors, handles dropped", &rt);
    timers_of::<SpotWideUser>("SpotWide timers", &rt);
    timers_of::<PerActorUser>("PerActor timers", &rt);
    spots_of::<SpotWideUser>("SpotWide Spots", &rt);
    spots_of::<EntrySpot>("Entry Spots", &rt);
    spots_of::<PerActorUser>("PerActor Spots", &rt);
    sessions(&rt, true);
    sessions(&rt, false);
    let m = rt.metrics();
    settle(&rt, 0, 0);
    assert_eq!((m.lanes_live, m.gates_live), (0, 0));
}
