//! Progress domains, status subscribers and handler errors (EG-1.1, EG-10, EG-13, EG-15,
//! EG-16.21–16.24). The application pool has ONE worker here, and a handler blocks it
//! synchronously: whatever still progresses does so in the infrastructure domain.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use zlink::runtime::*;

const GUARD: Duration = Duration::from_secs(30);

fn one_worker() -> Runtime {
    Runtime::new(RuntimeConfig {
        application_workers: 1,
        ..Default::default()
    })
    .unwrap()
}

/// An actor whose handler blocks the (only) application worker until `unblock` is sent.
struct Blocker {
    actor: ActorRef<(), ()>,
    blocking: mpsc::Receiver<()>,
    unblock: mpsc::Sender<()>,
}

fn blocker<K: SpotKind>(spot: &SpotRef<K>) -> Blocker {
    let (b_tx, b_rx) = mpsc::channel::<()>();
    let (u_tx, u_rx) = mpsc::channel::<()>();
    let (b_tx, u_rx) = (Mutex::new(b_tx), Mutex::new(u_rx));
    let actor = spot
        .spawn_actor(move |_c: Ctx<K::Yield>, _m: ()| {
            b_tx.lock().unwrap().send(()).unwrap();
            // deliberately blocks the worker thread (the strongest form of "blocked")
            let _ = u_rx.lock().unwrap().recv_timeout(GUARD);
            Handled::ok(())
        })
        .unwrap();
    Blocker {
        actor,
        blocking: b_rx,
        unblock: u_tx,
    }
}

impl Blocker {
    fn block(&self) {
        self.actor.tell(()).unwrap();
        self.blocking.recv_timeout(GUARD).unwrap();
    }
}

fn wait_status(rt: &Runtime, sub: &StatusSubscriber, source: &str) -> String {
    rt.block_on(async {
        tokio::time::timeout(GUARD, async {
            loop {
                let e = sub.recv().await;
                if e.source == source {
                    return e.status;
                }
            }
        })
        .await
        .expect("status did not arrive")
    })
    .unwrap()
}

// spec: EG-16.21, EG-1.1, EG-4, EG-10 — a waiting handler's call timeout fires even while the
// whole application pool is blocked.
#[test]
fn call_timeout_fires_while_application_is_blocked() {
    let rt = one_worker();
    let sub = rt.subscribe_status(64);
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let (res_tx, res_rx) = mpsc::channel();
    let (wait_tx, wait_rx) = mpsc::channel::<()>();
    let (res_tx, wait_tx) = (Mutex::new(res_tx), Mutex::new(wait_tx));
    let waiter = spot
        .spawn_actor(move |ctx: SerialCtx, _m: ()| {
            let res_tx = res_tx.lock().unwrap().clone();
            let wait_tx = wait_tx.lock().unwrap().clone();
            Handled::later(async move {
                let r = ctx
                    .request(move || {
                        wait_tx.send(()).unwrap();
                        std::future::pending::<Result<(), RuntimeError>>()
                    })
                    .deadline(Duration::from_millis(20))
                    .await;
                res_tx.send(r).unwrap();
                Ok(())
            })
        })
        .unwrap();
    waiter.tell(()).unwrap();
    wait_rx.recv_timeout(GUARD).unwrap();
    let b = blocker(&spot);
    b.block();
    // the deadline fires in the infrastructure domain while the only app worker is blocked
    assert_eq!(wait_status(&rt, &sub, "deadline"), "fired");
    assert_eq!(rt.metrics().deadlines_fired, 1);
    b.unblock.send(()).unwrap();
    let r = res_rx.recv_timeout(GUARD).unwrap();
    assert_eq!(r, Err(RuntimeError::DeadlineExceeded));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::DeadlineExceeded);
}

// spec: EG-16.22, EG-13 — shutdown proceeds while an application handler is blocked
#[test]
fn shutdown_proceeds_while_application_is_blocked() {
    let rt = one_worker();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let waiting = spot
        .spawn_actor(|_c: SpotWideCtx, _m: ()| {
            Handled::later(std::future::pending::<Result<(), HandlerError>>())
        })
        .unwrap();
    let other = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let b = blocker(&other);
    waiting.tell(()).unwrap();
    b.block();
    let report = rt.block_on(rt.shutdown()).unwrap();
    assert!(report.gates_ended >= 3);
    assert_eq!(
        waiting.tell(()),
        Err(RuntimeError::Unavailable(Unavailable::ShutDown))
    );
    assert!(
        rt.create_spot::<EntrySpot, _>(|_c, b| Handled::ok(b))
            .is_err()
    );
    b.unblock.send(()).unwrap();
}

// spec: EG-16.23, EG-13, EG-10 — a new peer connection is accepted (infrastructure) while an
// application handler is blocked. `Runtime::spawn_infrastructure` is the hook the mesh uses.
#[test]
fn peer_accept_progresses_while_application_is_blocked() {
    let rt = one_worker();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let b = blocker(&spot);
    let (addr_tx, addr_rx) = mpsc::channel();
    let (acc_tx, acc_rx) = mpsc::channel();
    rt.spawn_infrastructure(async move {
        assert_eq!(current_domain(), Some(Domain::Infrastructure));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addr_tx.send(l.local_addr().unwrap()).unwrap();
        let (_s, peer) = l.accept().await.unwrap();
        acc_tx.send(peer).unwrap();
    });
    let addr = addr_rx.recv_timeout(GUARD).unwrap();
    b.block();
    let s = std::net::TcpStream::connect(addr).unwrap();
    let peer = acc_rx.recv_timeout(GUARD).expect("accept stalled");
    assert_eq!(peer, s.local_addr().unwrap());
    b.unblock.send(()).unwrap();
}

// spec: EG-16.24, EG-13 — a slow (never reading) status subscriber neither slows processing nor
// is cut off: its buffer stays bounded and coalesces to the latest status per source.
#[test]
fn slow_status_subscriber_does_not_slow_processing() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let slow = rt.subscribe_status(8);
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let actors: Vec<ActorRef<u32, ()>> = (0..4)
        .map(|i| {
            spot.spawn_actor(move |ctx: SerialCtx, m: u32| {
                ctx.publish_status(&format!("actor{i}"), &m.to_string());
                Handled::ok(())
            })
            .unwrap()
        })
        .collect();
    for m in 0..20_000u32 {
        for a in &actors {
            rt.block_on(a.send(m)).unwrap().unwrap();
        }
    }
    for a in &actors {
        rt.block_on(a.ask(20_000)).unwrap().unwrap();
    }
    // bounded: at most the buffer plus one coalesced entry per source
    assert!(slow.pending() <= 8 + 4, "pending {}", slow.pending());
    assert!(slow.coalesced() > 0);
    // not cut off, and the latest status of every source is there
    let mut latest = std::collections::HashMap::new();
    while let Some(e) = slow.try_recv() {
        latest.insert(e.source, e.status);
    }
    for i in 0..4 {
        assert_eq!(latest[&format!("actor{i}")], "20000");
    }
    rt.status().publish("actor0", "later");
    assert_eq!(slow.try_recv().unwrap().status, "later");
}

// spec: EG-13, EG-6.2 — the running domain is recorded by a context marker; a cross-domain call
// fails immediately instead of waiting.
#[test]
fn cross_domain_calls_fail_immediately() {
    let rt = Runtime::new(RuntimeConfig {
        application_workers: 2,
        ..Default::default()
    })
    .unwrap();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let rt2 = rt.clone();
    let a = spot
        .spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
            assert_eq!(ctx.domain(), Domain::Application);
            assert_eq!(current_domain(), Some(Domain::Application));
            let r1 = require_domain(Domain::Infrastructure);
            // blocking on another domain from a handler would stall it: fails at once
            let r2 = rt2.block_on(async {}).map(|_| ());
            Handled::ok((r1, r2))
        })
        .unwrap();
    let (r1, r2) = rt.block_on(a.ask(())).unwrap().unwrap();
    assert_eq!(r1, Err(InvalidOperation::CrossDomain.into()));
    assert_eq!(r2, Err(InvalidOperation::CrossDomain.into()));
    let h = rt.spawn_infrastructure(async { require_domain(Domain::Application) });
    let r = rt.block_on(h).unwrap().unwrap();
    assert_eq!(r, Err(InvalidOperation::CrossDomain.into()));
    assert_eq!(current_domain(), None);
}

// spec: EG-15 — a send handler's error is logged and metered; a request handler's error becomes
// a framework error reply; a panicking handler is a handler error, and the lane keeps going.
#[test]
fn handler_errors_are_metered_or_replied() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let spot = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let a = spot
        .spawn_actor(|_c: SerialCtx, m: u32| match m {
            0 => Handled::err(HandlerError::Failed("send failed".into())),
            1 => Handled::later(async { Err(HandlerError::Failed("request failed".into())) }),
            2 => panic!("handler panic"),
            _ => Handled::ok(m),
        })
        .unwrap();
    a.tell(0).unwrap();
    // the next record of the same lane starts after the failed one's terminal
    assert_eq!(rt.block_on(a.ask(7)).unwrap(), Ok(7));
    assert_eq!(rt.metrics().handler_errors, 1);
    let r = rt.block_on(a.ask(1)).unwrap();
    assert_eq!(
        r,
        Err(RuntimeError::Handler(HandlerError::Failed(
            "request failed".into()
        )))
    );
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Internal);
    let r = rt.block_on(a.ask(2)).unwrap();
    assert_eq!(r, Err(RuntimeError::Handler(HandlerError::Panicked)));
    assert_eq!(rt.block_on(a.ask(8)).unwrap(), Ok(8));
    assert_eq!(rt.metrics().handler_errors, 3);
    let _ = Bytes::new();
    let _ = Arc::new(());
}
