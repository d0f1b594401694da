//! Inline ask contract tests (`docs/RUNTIME.md`, "Inline ask"): a request from a handler turn
//! (`Ctx::ask`, normal terminal, no deadline) to an idle actor of another, free gate with nothing
//! waiting runs in the asker's task; in every other case it is queued. EG-2.6, EG-3, EG-5.2,
//! EG-6.3–6.5, EG-7, EG-9, EG-13.
//!
//! Whether a handler ran inline is seen through tokio task ids: the asker's and the target
//! handler's are the same only when the target ran in the asker's task. Every wait is on an
//! event or a condition, with a guard; no sleep decides an outcome.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use zlink::runtime::*;

const GUARD: Duration = Duration::from_secs(20);

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        application_workers: 2,
        ..Default::default()
    })
    .unwrap()
}

type Events = Arc<Mutex<mpsc::Sender<String>>>;

fn events() -> (Events, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    (Arc::new(Mutex::new(tx)), rx)
}

fn emit(e: &Events, s: impl Into<String>) {
    let _ = e.lock().unwrap().send(s.into());
}

fn next(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(GUARD).expect("event did not arrive")
}

/// Wait (guarded) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let until = Instant::now() + GUARD;
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn spot<K: SpotKind>(rt: &Runtime) -> SpotRef<K> {
    rt.create_spot::<K, _>(|_c, b: Bytes| Handled::ok(b))
        .unwrap()
}

fn task_id() -> Option<tokio::task::Id> {
    tokio::task::try_id()
}

/// A one-shot release the test triggers (a handler awaits it).
#[derive(Clone)]
struct Release(Arc<Mutex<Option<oneshot::Receiver<()>>>>);

fn release() -> (oneshot::Sender<()>, Release) {
    let (tx, rx) = oneshot::channel();
    (tx, Release(Arc::new(Mutex::new(Some(rx)))))
}

impl Release {
    fn take(&self) -> oneshot::Receiver<()> {
        self.0.lock().unwrap().take().expect("taken once")
    }
}

/// What the target actor saw for one request.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    value: i64,
    inline: bool,
}

/// A target actor: doubles its input; -1 fails, -2 panics. Records each request (in order) and
/// whether it ran in the asker's task (`asker`: the asker's task id, set by the asker).
fn target<K: SpotKind>(
    spot: &SpotRef<K>,
    seen: Arc<Mutex<Vec<Seen>>>,
    asker: Arc<Mutex<Option<tokio::task::Id>>>,
) -> ActorRef<i64, i64> {
    spot.spawn_actor(move |_ctx: Ctx<K::Yield>, v: i64| {
        let inline = task_id().is_some() && task_id() == *asker.lock().unwrap();
        seen.lock().unwrap().push(Seen { value: v, inline });
        match v {
            -1 => Handled::err(HandlerError::new("negative")),
            -2 => panic!("target panics"),
            v => Handled::ok(v * 2),
        }
    })
    .unwrap()
}

/// The results of `inputs` asked in order from an actor handler of another Spot, with the normal
/// terminal (`deadline` off: the inline path may apply) or with a deadline (always queued).
fn ask_all(inputs: Vec<i64>, deadline: bool) -> (Vec<Result<i64, String>>, Vec<Seen>, u64) {
    let rt = runtime();
    let (sa, sb) = (spot::<SpotWideUser>(&rt), spot::<SpotWideUser>(&rt));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let asker_id = Arc::new(Mutex::new(None));
    let t = target(&sb, seen.clone(), asker_id.clone());
    let asker: ActorRef<Inputs, Vec<Result<i64, String>>> = sa
        .spawn_actor(move |ctx: SpotWideCtx, Inputs(inputs): Inputs| {
            let (t, id) = (t.clone(), asker_id.clone());
            Handled::later(async move {
                *id.lock().unwrap() = task_id();
                let mut out = Vec::new();
                for v in inputs {
                    let call = ctx.ask(&t, v);
                    let call = if deadline { call.deadline(GUARD) } else { call };
                    out.push(call.await.map_err(|e| e.to_string()));
                }
                Ok(out)
            })
        })
        .unwrap();
    let out = rt.block_on(asker.ask(Inputs(inputs))).unwrap().unwrap();
    let seen = seen.lock().unwrap().clone();
    (out, seen, rt.metrics().handler_errors)
}

/// The inputs of [`ask_all`], as one message.
struct Inputs(Vec<i64>);

impl Payload for Inputs {
    fn payload_len(&self) -> usize {
        self.0.len() * 8
    }
}

// spec: EG-15, EG-7.2, EG-2.6 — an inline ask gives the same replies, in the same order, with
// the same error replies and error counts as the queued path; and it did run inline (fails
// without the inline path).
#[test]
fn inline_ask_gives_the_same_results_and_order_as_the_queued_path() {
    let inputs: Vec<i64> = vec![1, 2, -1, 3, -2, 4, 5, 0, -1, 6];
    let (inline_out, inline_seen, inline_errors) = ask_all(inputs.clone(), false);
    let (queued_out, queued_seen, queued_errors) = ask_all(inputs.clone(), true);
    assert_eq!(inline_out, queued_out);
    assert_eq!(
        inline_out[..3],
        [
            Ok(2),
            Ok(4),
            Err("request handler failed: handler failed: negative".into())
        ]
    );
    assert_eq!(
        inline_out[4],
        Err("request handler failed: handler panicked".into())
    );
    let values = |s: &[Seen]| s.iter().map(|s| s.value).collect::<Vec<_>>();
    assert_eq!(values(&inline_seen), inputs);
    assert_eq!(values(&queued_seen), inputs);
    // the error replies were counted before the asker saw them (EG-15), in both paths
    assert_eq!(inline_errors, 3);
    assert_eq!(queued_errors, 3);
    assert!(
        inline_seen.iter().all(|s| s.inline),
        "every request to the idle actor ran in the asker's task: {inline_seen:?}"
    );
    assert!(queued_seen.iter().all(|s| !s.inline));
}

/// An asker actor (own Spot) that, on `()`, asks `t` once and emits the reply.
fn asker_of(rt: &Runtime, t: &ActorRef<i64, i64>, e: &Events, v: i64) -> ActorRef<(), ()> {
    let (t, e) = (t.clone(), e.clone());
    spot::<SpotWideUser>(rt)
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (t, e) = (t.clone(), e.clone());
            Handled::later(async move {
                emit(&e, "asking");
                let r = ctx.ask(&t, v).await;
                emit(&e, format!("reply:{r:?}"));
                Ok(())
            })
        })
        .unwrap()
}

/// A target that emits `b:<v>` and replies `v`.
fn logging_target<K: SpotKind>(spot: &SpotRef<K>, e: &Events) -> ActorRef<i64, i64> {
    let e = e.clone();
    spot.spawn_actor(move |_ctx: Ctx<K::Yield>, v: i64| {
        emit(&e, format!("b:{v}"));
        Handled::ok(v)
    })
    .unwrap()
}

// spec: EG-4.1, EG-6.4 — a sealed gate runs nothing: an ask to an idle actor of a sealed Spot
// (its gate free, its ready set empty) is queued, not run inline, and runs after the unseal.
#[test]
fn sealed_target_is_not_run_inline() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<EntrySpot>(&rt);
    let b = logging_target(&sb, &e);
    let a = asker_of(&rt, &b, &e, 7);
    sb.seal();
    a.tell(()).unwrap();
    assert_eq!(next(&rx), "asking");
    wait_until("the request queued", || {
        b.stats().application_queued == 1 || b.stats().claimed
    });
    assert_eq!(b.stats().application_queued, 1, "ran while sealed");
    sb.unseal();
    assert_eq!(next(&rx), "b:7");
    assert_eq!(next(&rx), "reply:Ok(7)");
}

/// A SpotWide target `b` that logs `b:{v}` and answers `v`, except that its record 0 yields
/// (releasing the gate, keeping its claim) until `go` is sent, then logs `b:0-end`; and `c`,
/// behind the same gate, which logs `c` — it runs only once `b`'s record released the gate.
fn yielding_target(
    sb: &SpotRef<SpotWideUser>,
    e: &Events,
) -> (oneshot::Sender<()>, ActorRef<i64, i64>, ActorRef<(), ()>) {
    let (go, hold) = release();
    let e2 = e.clone();
    let b = sb
        .spawn_actor(move |ctx: SpotWideCtx, v: i64| {
            emit(&e2, format!("b:{v}"));
            if v != 0 {
                return Handled::ok(v);
            }
            let (r, e) = (hold.take(), e2.clone());
            Handled::later(async move {
                ctx.request(move || async move {
                    r.await.ok();
                    Ok(())
                })
                .yielding()
                .await
                .unwrap();
                emit(&e, "b:0-end");
                Ok(0)
            })
        })
        .unwrap();
    let e3 = e.clone();
    let c = sb
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            emit(&e3, "c");
            Handled::ok(())
        })
        .unwrap();
    (go, b, c)
}

// spec: EG-6.4, EG-7.6, EG-3.1 — records queued for the target run before the ask, in FIFO
// order, even while the target's gate is free (its record in flight yielded): an ask never
// overtakes them.
#[test]
fn queued_records_are_never_overtaken() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<SpotWideUser>(&rt);
    let (go, b, c) = yielding_target(&sb, &e);
    let a = asker_of(&rt, &b, &e, 3);
    b.tell(0).unwrap();
    assert_eq!(next(&rx), "b:0");
    b.tell(1).unwrap();
    b.tell(2).unwrap();
    // B's record yielded (C ran behind the same gate); B's gate goes free
    c.tell(()).unwrap();
    assert_eq!(next(&rx), "c");
    a.tell(()).unwrap();
    assert_eq!(next(&rx), "asking");
    wait_until("the request queued", || b.stats().application_queued == 3);
    go.send(()).unwrap();
    for want in ["b:0-end", "b:1", "b:2", "b:3", "reply:Ok(3)"] {
        assert_eq!(next(&rx), want);
    }
}

// spec: EG-3.1, EG-16.6 — a SpotWide actor whose record yielded keeps its claim: an ask to it
// (its gate free meanwhile) is not run inline; it runs after the yielded record finished.
#[test]
fn yielded_target_is_not_run_inline() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<SpotWideUser>(&rt);
    let (go, b, c) = yielding_target(&sb, &e);
    let a = asker_of(&rt, &b, &e, 5);
    b.tell(0).unwrap();
    assert_eq!(next(&rx), "b:0");
    c.tell(()).unwrap();
    assert_eq!(next(&rx), "c");
    a.tell(()).unwrap();
    assert_eq!(next(&rx), "asking");
    wait_until("the request queued", || b.stats().application_queued == 1);
    go.send(()).unwrap();
    for want in ["b:0-end", "b:5", "reply:Ok(5)"] {
        assert_eq!(next(&rx), want);
    }
}

// spec: EG-5.2, EG-5.4 — an active barrier blocks the moving actor's queue: an ask to it (idle,
// its gate free) is not run inline; it runs after the Join's result reached the completion.
#[test]
fn barrier_blocked_target_is_not_run_inline() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<EntrySpot>(&rt);
    let (ev, ec) = (e.clone(), e.clone());
    let b: ActorRef<i64, i64> = sb
        .spawn_actor_with_completion(
            move |_ctx: SerialCtx, v: i64| {
                emit(&ev, format!("b:{v}"));
                Handled::ok(v)
            },
            move |_ctx: SerialCtx, _ev| {
                emit(&ec, "completion");
                Handled::ok(())
            },
        )
        .unwrap();
    let (go, hold) = release();
    let (ej, b2) = (e.clone(), b.clone());
    let registrar: ActorRef<(), ()> = spot::<EntrySpot>(&rt)
        .spawn_actor(move |ctx: SerialCtx, _m: ()| {
            let (r, e) = (hold.take(), ej.clone());
            ctx.defer(Join::new(&b2, move || async move {
                emit(&e, "join-start");
                r.await.ok();
                Ok(())
            }))
            .unwrap();
            Handled::ok(())
        })
        .unwrap();
    registrar.tell(()).unwrap();
    assert_eq!(next(&rx), "join-start");
    let a = asker_of(&rt, &b, &e, 9);
    a.tell(()).unwrap();
    assert_eq!(next(&rx), "asking");
    wait_until("the request queued", || b.stats().application_queued == 1);
    go.send(()).unwrap();
    for want in ["completion", "b:9", "reply:Ok(9)"] {
        assert_eq!(next(&rx), want);
    }
}

// spec: EG-6.5, EG-3.3, EG-16.7 — no re-entrancy: asking one's own actor or a same-gate actor
// fails before submission (nothing runs, inline or queued).
#[test]
fn own_and_same_gate_asks_fail_before_submission() {
    let rt = runtime();
    let sa = spot::<SpotWideUser>(&rt);
    let ran = Arc::new(AtomicU64::new(0));
    let r2 = ran.clone();
    let sibling: ActorRef<i64, i64> = sa
        .spawn_actor(move |_c: SpotWideCtx, v: i64| {
            r2.fetch_add(1, Ordering::SeqCst);
            Handled::ok(v)
        })
        .unwrap();
    let me: Arc<Mutex<Option<ActorRef<i64, i64>>>> = Arc::default();
    let me2 = me.clone();
    let a: ActorRef<i64, i64> = sa
        .spawn_actor(move |ctx: SpotWideCtx, v: i64| {
            if v == 1 {
                return Handled::ok(1);
            }
            let (me, s) = (me2.lock().unwrap().clone().unwrap(), sibling.clone());
            Handled::later(async move {
                let own = ctx.ask(&me, 1).await;
                assert!(matches!(
                    own,
                    Err(RuntimeError::InvalidOperation(
                        InvalidOperation::AwaitOwnActor
                    ))
                ));
                let same = ctx.ask(&s, 1).await;
                assert!(matches!(
                    same,
                    Err(RuntimeError::InvalidOperation(
                        InvalidOperation::AwaitSameGate
                    ))
                ));
                Ok(0)
            })
        })
        .unwrap();
    *me.lock().unwrap() = Some(a.clone());
    let r = rt.block_on(async { tokio::time::timeout(GUARD, a.ask(0)).await });
    assert_eq!(r.unwrap().expect("answered").unwrap(), 0);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(a.stats().application_queued, 0);
}

// spec: EG-2.6, EG-6.5, EG-16.13 — a cycle A → B → C where C shares A's gate (A's record holds
// it while it awaits B): B's request to C, made from B's continuation, must not run inline (C's
// handler would overlap A's turn on their gate); it is queued (here it times out, as a cycle
// with normal awaits does) and C runs only after A's record ended.
#[test]
fn cyclic_ask_through_a_held_gate_is_not_run_inline() {
    let rt = runtime();
    let (e, rx) = events();
    let s1 = spot::<SpotWideUser>(&rt);
    let s2 = spot::<SpotWideUser>(&rt);
    let a_running = Arc::new(AtomicBool::new(false));
    let (e_c, ar) = (e.clone(), a_running.clone());
    let c: ActorRef<i64, i64> = s1
        .spawn_actor(move |_ctx: SpotWideCtx, v: i64| {
            let overlap = ar.load(Ordering::SeqCst);
            emit(&e_c, format!("c:{v} overlap:{overlap}"));
            Handled::ok(v)
        })
        .unwrap();
    let (e_b, c2) = (e.clone(), c.clone());
    let b: ActorRef<i64, i64> = s2
        .spawn_actor(move |ctx: SpotWideCtx, v: i64| {
            let (e, c) = (e_b.clone(), c2.clone());
            Handled::later(async move {
                // timed out from outside the call: the normal terminal (inline allowed) is used
                let r = tokio::time::timeout(Duration::from_millis(100), ctx.ask(&c, v)).await;
                emit(&e, format!("b timed out:{}", r.is_err()));
                Ok(v)
            })
        })
        .unwrap();
    let (e_a, ar) = (e.clone(), a_running.clone());
    let a: ActorRef<(), ()> = s1
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (e, b, ar) = (e_a.clone(), b.clone(), ar.clone());
            ar.store(true, Ordering::SeqCst);
            Handled::later(async move {
                let r = ctx.ask(&b, 4).await;
                emit(&e, format!("a:{r:?}"));
                ar.store(false, Ordering::SeqCst);
                Ok(())
            })
        })
        .unwrap();
    a.tell(()).unwrap();
    for want in ["b timed out:true", "a:Ok(4)", "c:4 overlap:false"] {
        assert_eq!(next(&rx), want);
    }
}

// spec: EG-2.6, EG-3, EG-16.8, EG-6.1 — a target handler that returns a future is continued by
// a drain (not by the asker's task) holding the target's gate: it may await and even yield; the
// asker gets its reply, and the target's next record runs after it, in order.
#[test]
fn suspending_target_continues_in_a_drain() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<SpotWideUser>(&rt);
    let e2 = e.clone();
    let asker_task: Arc<Mutex<Option<tokio::task::Id>>> = Arc::default();
    let at = asker_task.clone();
    let b: ActorRef<i64, i64> = sb
        .spawn_actor(move |ctx: SpotWideCtx, v: i64| {
            let (e, at) = (e2.clone(), at.clone());
            emit(&e, format!("b:{v} start"));
            Handled::later(async move {
                let turn = ctx.turn_number();
                tokio::task::yield_now().await;
                assert!(ctx.in_turn(), "the awaiting record keeps the gate");
                ctx.request(|| async { Ok(()) }).yielding().await.unwrap();
                let elsewhere = task_id() != *at.lock().unwrap();
                emit(
                    &e,
                    format!(
                        "b:{v} end, new turn:{}, in a drain:{elsewhere}",
                        ctx.turn_number() != turn
                    ),
                );
                Ok(v + 100)
            })
        })
        .unwrap();
    let e3 = e.clone();
    let a: ActorRef<(), ()> = spot::<SpotWideUser>(&rt)
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (b, e, at) = (b.clone(), e3.clone(), asker_task.clone());
            Handled::later(async move {
                *at.lock().unwrap() = task_id();
                let r1 = ctx.ask(&b, 1).await;
                let r2 = ctx.ask(&b, 2).await;
                emit(&e, format!("a:{r1:?} {r2:?}"));
                Ok(())
            })
        })
        .unwrap();
    a.tell(()).unwrap();
    for want in [
        "b:1 start",
        "b:1 end, new turn:true, in a drain:true",
        "b:2 start",
        "b:2 end, new turn:true, in a drain:true",
        "a:Ok(101) Ok(102)",
    ] {
        assert_eq!(next(&rx), want);
    }
}

// spec: EG-9, EG-7.4, EG-6.1 — one record per right: every inline record of the target runs
// under a right of its own (a new fencing number each time), and a record of another lane of
// the target's gate, readied while an inline record runs, runs before the next request and is
// never stranded (the inline terminal re-checks the ready set).
#[test]
fn inline_records_take_one_right_each_and_let_waiting_work_run() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<SpotWideUser>(&rt);
    let e_d = e.clone();
    let d: ActorRef<(), ()> = sb
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            emit(&e_d, "d");
            Handled::ok(())
        })
        .unwrap();
    let (e_b, d2) = (e.clone(), d.clone());
    let asker_task: Arc<Mutex<Option<tokio::task::Id>>> = Arc::default();
    let at = asker_task.clone();
    let b: ActorRef<i64, (u64, bool)> = sb
        .spawn_actor(move |ctx: SpotWideCtx, v: i64| {
            let inline = task_id() == *at.lock().unwrap();
            emit(&e_b, format!("b:{v} inline:{inline}"));
            if v == 2 || v == 4 {
                // another lane of this gate becomes ready while this record runs
                ctx.send(&d2, ()).unwrap();
            }
            Handled::ok((ctx.right_fence(), inline))
        })
        .unwrap();
    let e_a = e.clone();
    let a: ActorRef<(), Vec<(u64, bool)>> = spot::<SpotWideUser>(&rt)
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (b, e, at) = (b.clone(), e_a.clone(), asker_task.clone());
            Handled::later(async move {
                *at.lock().unwrap() = task_id();
                let mut fences = Vec::new();
                for v in 1..=4 {
                    fences.push(ctx.ask(&b, v).await.unwrap());
                }
                emit(&e, "a done");
                Ok(fences)
            })
        })
        .unwrap();
    let fences = rt.block_on(a.ask(())).unwrap().unwrap();
    // D's second record, readied by the last request, is not stranded either
    let mut log = Vec::new();
    while log.iter().filter(|s| *s == "d").count() < 2 {
        log.push(next(&rx));
    }
    assert_eq!(&log[..2], ["b:1 inline:true", "b:2 inline:true"]);
    let d_at = log.iter().position(|s| s == "d").expect("d ran");
    let b3_at = log.iter().position(|s| s.starts_with("b:3")).unwrap();
    assert!(d_at < b3_at, "the readied lane ran first: {log:?}");
    let inline: Vec<u64> = fences.iter().filter(|f| f.1).map(|f| f.0).collect();
    assert!(inline.len() >= 2);
    assert!(
        inline.windows(2).all(|w| w[0] < w[1]),
        "a right per inline record: {fences:?}"
    );
}

// spec: EG-13, EG-1.1 — only application-domain callers run a handler inline: an ask from an
// external task (`ActorRef::ask`) is queued and runs in a drain.
#[test]
fn external_asks_are_queued() {
    let rt = runtime();
    let sb = spot::<SpotWideUser>(&rt);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let asker = Arc::new(Mutex::new(None));
    let t = target(&sb, seen.clone(), asker.clone());
    let h = rt.application_handle().spawn(async move {
        *asker.lock().unwrap() = task_id();
        t.ask(21).await
    });
    assert_eq!(rt.block_on(h).unwrap().unwrap().unwrap(), 42);
    assert_eq!(
        *seen.lock().unwrap(),
        [Seen {
            value: 21,
            inline: false
        }]
    );
}

// spec: EG-11, EG-2.6 — work readied while an inline record runs (here: by the record itself,
// a send to another lane of the same gate) is never stranded: the inline terminal re-checks the
// ready set under the lock it releases the right in, and starts a drain.
#[test]
fn work_readied_by_an_inline_record_is_not_stranded() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<SpotWideUser>(&rt);
    let e_d = e.clone();
    let d: ActorRef<(), ()> = sb
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            emit(&e_d, "d");
            Handled::ok(())
        })
        .unwrap();
    let asker_task: Arc<Mutex<Option<tokio::task::Id>>> = Arc::default();
    let (e_b, at) = (e.clone(), asker_task.clone());
    let b: ActorRef<i64, i64> = sb
        .spawn_actor(move |ctx: SpotWideCtx, v: i64| {
            let inline = task_id() == *at.lock().unwrap();
            emit(&e_b, format!("b:{v} inline:{inline}"));
            ctx.send(&d, ()).unwrap();
            Handled::ok(v)
        })
        .unwrap();
    let a: ActorRef<(), i64> = spot::<SpotWideUser>(&rt)
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (b, at) = (b.clone(), asker_task.clone());
            Handled::later(async move {
                *at.lock().unwrap() = task_id();
                Ok(ctx.ask(&b, 1).await.unwrap())
            })
        })
        .unwrap();
    assert_eq!(rt.block_on(a.ask(())).unwrap().unwrap(), 1);
    assert_eq!(next(&rx), "b:1 inline:true");
    assert_eq!(next(&rx), "d");
}

// spec: EG-2.6, EG-16.8 — a target handler that returns a future is polled once in the asker's
// task, holding the target's gate: one ready at that poll finishes inline (its continuation ran
// in the asker's task, in its turn), with its reply by value.
#[test]
fn target_future_ready_at_first_poll_finishes_inline() {
    let rt = runtime();
    let sb = spot::<EntrySpot>(&rt);
    let asker_task: Arc<Mutex<Option<tokio::task::Id>>> = Arc::default();
    let at = asker_task.clone();
    let b: ActorRef<i64, (i64, bool, bool)> = sb
        .spawn_actor(move |ctx: SerialCtx, v: i64| {
            let at = at.clone();
            Handled::later(async move {
                let inline = task_id() == *at.lock().unwrap();
                Ok((v + 1, inline, ctx.in_turn()))
            })
        })
        .unwrap();
    let a: ActorRef<(), (i64, bool, bool)> = spot::<EntrySpot>(&rt)
        .spawn_actor(move |ctx: SerialCtx, _m: ()| {
            let (b, at) = (b.clone(), asker_task.clone());
            Handled::later(async move {
                *at.lock().unwrap() = task_id();
                Ok(ctx.ask(&b, 1).await.unwrap())
            })
        })
        .unwrap();
    assert_eq!(rt.block_on(a.ask(())).unwrap().unwrap(), (2, true, true));
}

// spec: EG-3, EG-3.1, EG-16.6, EG-16.8 — a target whose future asks to yield at its first (inline)
// poll is parked as a drain parks it: the target's gate is released (another actor behind it
// runs), its claim is kept, and it resumes in a new turn and replies.
#[test]
fn target_yielding_at_first_poll_is_parked_and_resumes() {
    let rt = runtime();
    let (e, rx) = events();
    let sb = spot::<SpotWideUser>(&rt);
    let (go, hold) = release();
    let e_c = e.clone();
    let c: ActorRef<(), ()> = sb
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            emit(&e_c, "c");
            Handled::ok(())
        })
        .unwrap();
    let (e_b, c2) = (e.clone(), c.clone());
    let b: ActorRef<i64, i64> = sb
        .spawn_actor(move |ctx: SpotWideCtx, v: i64| {
            let (e, r, c) = (e_b.clone(), hold.take(), c2.clone());
            Handled::later(async move {
                let turn = ctx.turn_number();
                // while B is parked, C (same gate) can run: the right was released
                ctx.send(&c, ()).unwrap();
                ctx.request(move || async move {
                    r.await.ok();
                    Ok(())
                })
                .yielding()
                .await
                .unwrap();
                emit(
                    &e,
                    format!("b resumed, new turn:{}", ctx.turn_number() != turn),
                );
                Ok(v * 10)
            })
        })
        .unwrap();
    let (e_a, b2) = (e.clone(), b.clone());
    let a: ActorRef<(), ()> = spot::<SpotWideUser>(&rt)
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (b, e) = (b2.clone(), e_a.clone());
            Handled::later(async move {
                let r = ctx.ask(&b, 3).await;
                emit(&e, format!("a:{r:?}"));
                Ok(())
            })
        })
        .unwrap();
    a.tell(()).unwrap();
    assert_eq!(next(&rx), "c");
    assert!(b.stats().claimed, "the yielded record keeps its claim");
    go.send(()).unwrap();
    assert_eq!(next(&rx), "b resumed, new turn:true");
    assert_eq!(next(&rx), "a:Ok(30)");
}

// A record run inline from a plain thread (`PendingSubmit::try_run_inline`, as a mesh I/O thread
// runs one) runs there, in the application domain; an ask its handler makes is queued, never
// nested on that thread: a plain thread has no task budget to bound a chain of inline asks, so
// nesting there could grow its stack without bound (fails without the task check in `Ctx::ask`).
#[test]
fn a_record_run_inline_on_a_plain_thread_never_nests_an_ask_there() {
    let rt = runtime();
    let (sa, sb) = (spot::<SpotWideUser>(&rt), spot::<SpotWideUser>(&rt));
    let (e, rx) = events();
    let here = || std::thread::current().name().unwrap_or("?").to_owned();
    let t: ActorRef<i64, i64> = {
        let e = e.clone();
        sb.spawn_actor(move |_ctx: SpotWideCtx, v: i64| {
            emit(&e, format!("target on {}", here()));
            Handled::ok(v)
        })
        .unwrap()
    };
    let a: ActorRef<(), ()> = {
        let e = e.clone();
        sa.spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            emit(&e, format!("asker on {}", here()));
            let (t, e) = (t.clone(), e.clone());
            Handled::later(async move {
                let r = ctx.ask(&t, 7).await;
                emit(&e, format!("reply:{r:?}"));
                Ok(())
            })
        })
        .unwrap()
    };
    let pending = a.prepare_send(());
    std::thread::Builder::new()
        .name("plain-io".into())
        .spawn(move || {
            assert!(
                pending.try_run_inline().is_ok(),
                "the idle actor's record ran here"
            );
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(next(&rx), "asker on plain-io");
    let target = next(&rx);
    assert_ne!(
        target, "target on plain-io",
        "the ask was nested on the plain thread"
    );
    assert_eq!(next(&rx), "reply:Ok(7)");
}
