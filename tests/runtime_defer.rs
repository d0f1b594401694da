//! `defer()` / Join barrier contract tests (EG-5, EG-16.9–16.12).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
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

type Events = Arc<Mutex<mpsc::Sender<String>>>;

fn events() -> (Events, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    (Arc::new(Mutex::new(tx)), rx)
}

fn emit(e: &Events, s: impl Into<String>) {
    e.lock().unwrap().send(s.into()).unwrap();
}

fn next(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(GUARD).expect("event did not arrive")
}

/// A moving actor whose completion callback reports Join results.
fn moving_actor<K: SpotKind>(spot: &SpotRef<K>, e: &Events) -> ActorRef<(), ()> {
    let e = e.clone();
    spot.spawn_actor_with_completion(
        |_ctx: Ctx<K::Yield>, _m: ()| Handled::ok(()),
        move |ctx: Ctx<K::Yield>, ev| {
            let CompletionEvent::Join(r) = ev else {
                unreachable!()
            };
            // delivered in the moving actor's own lifecycle turn
            assert_eq!(ctx.lane_class(), LaneClass::Lifecycle);
            emit(&e, format!("completion:{r:?}"));
            Handled::ok(())
        },
    )
    .unwrap()
}

fn join_op(
    io: &Arc<AtomicUsize>,
    e: &Events,
    moving: &ActorRef<(), ()>,
    result: Result<(), RuntimeError>,
) -> Join {
    let (io, e) = (io.clone(), e.clone());
    Join::new(moving, move || async move {
        io.fetch_add(1, Ordering::SeqCst);
        emit(&e, "join-io");
        result
    })
}

// spec: EG-16.9, EG-5, EG-5.1, EG-5.2, EG-16.11, EG-5.4
#[test]
fn defer_is_synchronous_and_starts_no_io_before_the_handler_ends() {
    let rt = runtime();
    let (e, rx) = events();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let moving = moving_actor(&spot, &e);
    let io = Arc::new(AtomicUsize::new(0));
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let (e2, io2, m2) = (e.clone(), io.clone(), moving.clone());
    let h = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            // a plain function returning unit: nothing to await, no result
            let registered: Result<(), RuntimeError> = ctx.defer(join_op(&io2, &e2, &m2, Ok(())));
            registered.unwrap();
            let (e, r) = (e2.clone(), release_rx.lock().unwrap().take().unwrap());
            let io = io2.clone();
            Handled::later(async move {
                // the gate and claim are kept: the handler keeps running
                assert!(ctx.in_turn());
                emit(&e, format!("deferred io={}", io.load(Ordering::SeqCst)));
                r.await.ok();
                emit(&e, "handler-end");
                Ok(())
            })
        })
        .unwrap();
    h.tell(()).unwrap();
    assert_eq!(next(&rx), "deferred io=0");
    assert_eq!(io.load(Ordering::SeqCst), 0);
    release_tx.send(()).unwrap();
    assert_eq!(next(&rx), "handler-end");
    assert_eq!(next(&rx), "join-io");
    // the result reaches the moving actor's completion callback, not the handler
    assert_eq!(next(&rx), "completion:Ok(())");
    assert_eq!(rt.metrics().barriers_activated, 1);
}

// spec: EG-5.1, EG-5.2 — registered before a Yield and in the continuation after it; both
// activate only when the last continuation ends normally.
#[test]
fn defer_before_and_after_yield_activates_at_the_final_end() {
    let rt = runtime();
    let (e, rx) = events();
    let spot = rt
        .create_spot::<InstanceSpot, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let moving = moving_actor(&spot, &e);
    let io = Arc::new(AtomicUsize::new(0));
    let (e2, io2, m2) = (e.clone(), io.clone(), moving.clone());
    let h = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (e, io, m) = (e2.clone(), io2.clone(), m2.clone());
            Handled::later(async move {
                ctx.defer(join_op(&io, &e, &m, Ok(()))).unwrap();
                ctx.request(|| async { Ok(()) }).yielding().await.unwrap();
                ctx.defer(join_op(&io, &e, &m, Err(RuntimeError::NotFound)))
                    .unwrap();
                emit(&e, format!("end io={}", io.load(Ordering::SeqCst)));
                Ok(())
            })
        })
        .unwrap();
    h.tell(()).unwrap();
    assert_eq!(next(&rx), "end io=0");
    let mut rest: Vec<String> = (0..4).map(|_| next(&rx)).collect();
    rest.sort();
    // EG-5.6: target-not-found arrives later through the actor completion
    assert_eq!(
        rest,
        [
            "completion:Err(NotFound)",
            "completion:Ok(())",
            "join-io",
            "join-io"
        ]
    );
}

fn discarded_when(fail: HandlerError) {
    let rt = runtime();
    let (e, rx) = events();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let moving = moving_actor(&spot, &e);
    let io = Arc::new(AtomicUsize::new(0));
    let (e2, io2, m2) = (e.clone(), io.clone(), moving.clone());
    let h = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            ctx.defer(join_op(&io2, &e2, &m2, Ok(()))).unwrap();
            Handled::<u32>::err(fail.clone())
        })
        .unwrap();
    let r = rt.block_on(h.ask(())).unwrap();
    assert!(matches!(r, Err(RuntimeError::Handler(_))));
    // a later record of the moving actor proves its lifecycle lane was idle: no Join arrived
    rt.block_on(moving.ask(())).unwrap().unwrap();
    let end = rt.block_on(async {
        // the barrier decision happens at the failing record's terminal, before the next record
        // of the same lane; ask the handler once more to pass that boundary
        h.ask(()).await
    });
    assert!(end.is_ok());
    assert_eq!(io.load(Ordering::SeqCst), 0);
    assert!(rx.try_recv().is_err());
    assert!(rt.metrics().barriers_discarded >= 1);
    assert_eq!(rt.metrics().barriers_activated, 0);
}

// spec: EG-16.10, EG-5.3 — exception
#[test]
fn handler_error_discards_barriers() {
    discarded_when(HandlerError::Failed("boom".into()));
}

// spec: EG-16.10, EG-5.3 — reply-encoding failure
#[test]
fn reply_encoding_failure_discards_barriers() {
    discarded_when(HandlerError::ReplyEncoding("bad reply".into()));
}

// spec: EG-16.10, EG-5.3 — cancellation
#[test]
fn cancelled_handler_discards_barriers() {
    discarded_when(HandlerError::Cancelled);
}

// spec: EG-16.10, EG-5.3, EG-4.1 — a handler cancelled because its resume was refused (Spot
// sealed while it waited) discards its barriers; Join does not run.
#[test]
fn refused_resume_discards_barriers() {
    let rt = runtime();
    let sub = rt.subscribe_status(1024);
    let (e, rx) = events();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let other = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let moving = moving_actor(&other, &e);
    let io = Arc::new(AtomicUsize::new(0));
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let (e2, io2, m2) = (e.clone(), io.clone(), moving.clone());
    let h = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            ctx.defer(join_op(&io2, &e2, &m2, Ok(()))).unwrap();
            let r = release_rx.lock().unwrap().take().unwrap();
            let e = e2.clone();
            Handled::later(async move {
                emit(&e, "waiting");
                let _ = ctx
                    .request(move || async move {
                        r.await.ok();
                        Ok(())
                    })
                    .yielding()
                    .await;
                emit(&e, "continued");
                Ok(())
            })
        })
        .unwrap();
    let ask = h.ask(());
    assert_eq!(next(&rx), "waiting");
    spot.seal();
    release_tx.send(()).unwrap();
    let source = format!("lane/{}", h.object_id());
    rt.block_on(async {
        tokio::time::timeout(GUARD, async {
            loop {
                let ev = sub.recv().await;
                if ev.source == source && ev.status == "resume-refused" {
                    return;
                }
            }
        })
        .await
        .unwrap()
    })
    .unwrap();
    // the refused continuation is dropped by its task, after its barrier was discarded: the
    // requester, answered by that drop, sees the discard counted and the barrier gone
    let r = rt
        .block_on(async { tokio::time::timeout(GUARD, ask).await })
        .unwrap()
        .expect("answered");
    assert!(r.is_err(), "{r:?}");
    assert_eq!(rt.metrics().barriers_discarded, 1);
    assert_eq!(moving.stats().barriers_inactive, 0);
    assert_eq!(io.load(Ordering::SeqCst), 0);
    assert!(rx.try_recv().is_err());
}

// spec: EG-16.12, EG-5.5, EG-5.6
#[test]
fn defer_outside_the_registration_scope_is_invalid() {
    let rt = runtime();
    let (e, _rx) = events();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let moving = moving_actor(&spot, &e);
    let kept: Arc<Mutex<Option<SerialCtx>>> = Arc::default();
    let io = Arc::new(AtomicUsize::new(0));
    let (k, io2, e2, m2) = (kept.clone(), io.clone(), e.clone(), moving.clone());
    let h = spot
        .spawn_actor(move |ctx: SerialCtx, m: u32| {
            if m == 0 {
                k.lock().unwrap().get_or_insert(ctx);
                return Handled::ok(Ok::<(), RuntimeError>(()));
            }
            // EG-5.6: registration limit exceeded is synchronous, before target I/O
            let mut last = Ok(());
            for _ in 0..17 {
                last = ctx.defer(join_op(&io2, &e2, &m2, Ok(())));
            }
            assert_eq!(last, Err(InvalidOperation::DeferLimitExceeded.into()));
            // fail the handler so the 16 accepted barriers are discarded (EG-5.3)
            Handled::err(HandlerError::Failed("discard".into()))
        })
        .unwrap();
    rt.block_on(h.ask(0)).unwrap().unwrap().unwrap();
    rt.block_on(h.ask(0)).unwrap().unwrap().unwrap();
    let stale = kept.lock().unwrap().take().unwrap();
    let r = stale.defer(join_op(&io, &e, &moving, Ok(())));
    assert_eq!(r, Err(InvalidOperation::DeferOutsideScope.into()));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidOperation);
    let r = rt.block_on(h.ask(1)).unwrap();
    assert!(matches!(r, Err(RuntimeError::Handler(_))));
    rt.block_on(h.ask(0)).unwrap().unwrap().unwrap();
    assert_eq!(io.load(Ordering::SeqCst), 0);
    assert_eq!(rt.metrics().barriers_discarded, 16);
    let _ = Bytes::new();
}

// spec: EG-5.1, EG-5.2, EG-5.4 — once the registering handler ended normally, the barrier blocks
// the moving actor's queue: a record submitted to it afterwards runs only after the Join's result
// reached its completion callback, while other actors behind the same gate keep running.
#[test]
fn active_barrier_blocks_the_moving_actors_queue_until_the_join_completes() {
    let rt = runtime();
    let (e, rx) = events();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let (em, ec) = (e.clone(), e.clone());
    let moving: ActorRef<u32, ()> = spot
        .spawn_actor_with_completion(
            move |_ctx: SpotWideCtx, m: u32| {
                emit(&em, format!("moving-msg:{m}"));
                Handled::ok(())
            },
            move |_ctx: SpotWideCtx, ev| {
                let CompletionEvent::Join(r) = ev else {
                    unreachable!()
                };
                emit(&ec, format!("completion:{r:?}"));
                Handled::ok(())
            },
        )
        .unwrap();
    let e3 = e.clone();
    let other: ActorRef<(), ()> = spot
        .spawn_actor(move |_ctx: SpotWideCtx, _m: ()| {
            emit(&e3, "other");
            Handled::ok(())
        })
        .unwrap();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let (e2, m2) = (e.clone(), moving.clone());
    let h = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            let (e, r) = (e2.clone(), release_rx.lock().unwrap().take().unwrap());
            let join = Join::new(&m2, move || async move {
                emit(&e, "join-start");
                r.await.ok();
                Ok(())
            });
            ctx.defer(join).unwrap();
            emit(&e2, "handler-end");
            Handled::ok(())
        })
        .unwrap();
    h.tell(()).unwrap();
    assert_eq!(next(&rx), "handler-end");
    // the Join starts only after activation, so the barrier stands from here on
    assert_eq!(next(&rx), "join-start");
    assert_eq!(moving.stats().barriers_active, 1);
    moving.tell(7).unwrap();
    other.tell(()).unwrap();
    // same gate, FIFO ready set: without the barrier "moving-msg:7" would come first
    assert_eq!(next(&rx), "other");
    assert_eq!(moving.stats().application_queued, 1);
    release_tx.send(()).unwrap();
    // EG-5.4: the result goes to the moving actor's completion callback, before its next record
    assert_eq!(next(&rx), "completion:Ok(())");
    assert_eq!(next(&rx), "moving-msg:7");
    assert_eq!(rt.metrics().barriers_activated, 1);
}

// spec: EG-5.3, EG-5.1 — a discarded barrier never blocks the moving actor's queue.
#[test]
fn discarded_barrier_does_not_block_the_moving_actor() {
    let rt = runtime();
    let (e, rx) = events();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let em = e.clone();
    let moving: ActorRef<u32, ()> = spot
        .spawn_actor(move |_ctx: SerialCtx, m: u32| {
            emit(&em, format!("moving-msg:{m}"));
            Handled::ok(())
        })
        .unwrap();
    let m2 = moving.clone();
    let h = spot
        .spawn_actor(move |ctx: SerialCtx, _m: ()| {
            ctx.defer(Join::new(&m2, || async { Ok(()) })).unwrap();
            assert_eq!(m2.stats().barriers_inactive, 1);
            Handled::<u32>::err(HandlerError::Failed("discard".into()))
        })
        .unwrap();
    let r = rt.block_on(h.ask(())).unwrap();
    assert!(matches!(r, Err(RuntimeError::Handler(_))));
    moving.tell(1).unwrap();
    assert_eq!(next(&rx), "moving-msg:1");
    let s = moving.stats();
    assert_eq!((s.barriers_inactive, s.barriers_active), (0, 0));
}

/// A request whose handler (optionally) registers a barrier and after-work that waits for `go`:
/// the reply must not be out while the after-work runs (the record's error is counted and its
/// barriers settle after it; the reply goes last).
fn reply_waits_until_the_record_ends(handler_ok: bool, barrier: bool) {
    let rt = runtime();
    let (e, rx) = events();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let moving = moving_actor(&spot, &e);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(Some(go_rx)));
    let (m2, e2) = (moving.clone(), e.clone());
    let h: ActorRef<(), ()> = spot
        .spawn_actor(move |ctx: SerialCtx, _m: ()| {
            if barrier {
                ctx.defer(Join::new(&m2, || async { Ok(()) })).unwrap();
            }
            let (e, go) = (e2.clone(), go_rx.lock().unwrap().take().unwrap());
            ctx.after_turn(move || {
                emit(&e, "after-work");
                go.recv_timeout(GUARD).expect("go");
            })
            .unwrap();
            if handler_ok {
                Handled::ok(())
            } else {
                Handled::err(HandlerError::Failed("discard".into()))
            }
        })
        .unwrap();
    // submitted now; polled by hand below
    let mut ask = Box::pin(h.ask(()));
    assert_eq!(next(&rx), "after-work");
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // the handler has ended and its result is known, but its record has not
    assert!(
        ask.as_mut().poll(&mut cx).is_pending(),
        "reply before the record ended"
    );
    go_tx.send(()).unwrap();
    let r = rt.block_on(ask).unwrap();
    let s = moving.stats();
    assert_eq!(s.barriers_inactive, 0, "answered with an inactive barrier");
    let m = rt.metrics();
    let barriers = u64::from(barrier);
    if handler_ok {
        assert!(r.is_ok(), "{r:?}");
        assert_eq!((m.barriers_activated, m.barriers_discarded), (barriers, 0));
        if barrier {
            assert_eq!(next(&rx), "completion:Ok(())");
        }
    } else {
        assert!(matches!(r, Err(RuntimeError::Handler(_))));
        assert_eq!(m.handler_errors, 1, "answered before the error was counted");
        assert_eq!((m.barriers_activated, m.barriers_discarded), (0, barriers));
        assert_eq!((s.barriers_inactive, s.barriers_active), (0, 0));
    }
}

// spec: EG-5.2 — a requester that acts on the reply finds the barrier already active.
#[test]
fn reply_is_released_after_the_barrier_activates() {
    reply_waits_until_the_record_ends(true, true);
}

// spec: EG-5.3 — a requester that acts on the error reply finds the barrier already discarded.
#[test]
fn error_reply_is_released_after_the_barrier_is_discarded() {
    reply_waits_until_the_record_ends(false, true);
}

// spec: EG-15 — an error reply goes out after the record's error is counted.
#[test]
fn error_reply_is_released_after_the_record_ends() {
    reply_waits_until_the_record_ends(false, false);
}

// spec: EG-5.4, EG-5.6 — a Join whose operation panics still reaches the moving actor's
// completion callback (as `Unavailable`), so its barrier never blocks the queue forever.
#[test]
fn panicking_join_still_lifts_the_barrier() {
    let rt = runtime();
    let (e, rx) = events();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let (em, ec) = (e.clone(), e.clone());
    let moving: ActorRef<u32, ()> = spot
        .spawn_actor_with_completion(
            move |_ctx: SerialCtx, m: u32| {
                emit(&em, format!("moving-msg:{m}"));
                Handled::ok(())
            },
            move |_ctx: SerialCtx, ev| {
                let CompletionEvent::Join(r) = ev else {
                    unreachable!()
                };
                emit(&ec, format!("completion:{r:?}"));
                Handled::ok(())
            },
        )
        .unwrap();
    let (e2, m2) = (e.clone(), moving.clone());
    let h = spot
        .spawn_actor(move |ctx: SerialCtx, _m: ()| {
            let m3 = m2.clone();
            let e3 = e2.clone();
            ctx.defer(Join::new(&m2, move || async move {
                // the barrier is active while the Join runs: queue a record behind it
                m3.tell(1).unwrap();
                emit(&e3, "join-panics");
                panic!("join failed");
            }))
            .unwrap();
            Handled::ok(())
        })
        .unwrap();
    h.tell(()).unwrap();
    assert_eq!(next(&rx), "join-panics");
    assert_eq!(next(&rx), "completion:Err(Unavailable(Dropped))");
    assert_eq!(next(&rx), "moving-msg:1");
    let s = moving.stats();
    assert_eq!((s.barriers_inactive, s.barriers_active), (0, 0));
}
