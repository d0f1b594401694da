//! Batch drain (EG-9: several items per right) against the one-by-one lane rules: a holder that
//! took several application records of one lane in one turn boundary must behave exactly as if
//! it had taken them one by one. Each test queues records while the unit is sealed, so that the
//! unseal hands the drain a lane with several records (a batch), then makes an input arrive
//! from inside the first records' handlers (deterministic: the handler runs at a known point of
//! the batch). Each fails if the batch ignores that input.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use zlink::runtime::*;

const GUARD: Duration = Duration::from_secs(30);

type Log = Arc<Mutex<mpsc::Sender<String>>>;

fn runtime_with(f: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    let mut c = RuntimeConfig {
        application_workers: 2,
        ..Default::default()
    };
    f(&mut c);
    Runtime::new(c).unwrap()
}

fn log_channel() -> (Log, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    (Arc::new(Mutex::new(tx)), rx)
}

fn emit(log: &Log, s: String) {
    log.lock().unwrap().send(s).unwrap();
}

fn next(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(GUARD).expect("event did not arrive")
}

fn logging_actor(spot: &SpotRef<SpotWideUser>, name: &'static str, log: &Log) -> ActorRef<u32> {
    let log = log.clone();
    spot.spawn_actor(move |_c: SpotWideCtx, m: u32| {
        emit(&log, format!("{name}:{m}"));
        Handled::ok(())
    })
    .unwrap()
}

// spec: EG-7.3, EG-16.17, EG-9 — a lifecycle record that arrives while the holder runs a batch of
// the same object's application records wins the next turn boundary: it runs right after the
// record in flight, before the rest of the batch.
#[test]
fn lifecycle_record_arriving_mid_batch_runs_before_the_rest_of_the_batch() {
    let rt = runtime_with(|_| {});
    let (log, rx) = log_channel();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let me: Arc<OnceLock<ActorRef<u32>>> = Arc::new(OnceLock::new());
    let (l, s, m2) = (log.clone(), spot.clone(), me.clone());
    let a = spot
        .spawn_actor(move |_c: SpotWideCtx, m: u32| {
            emit(&l, format!("a:{m}"));
            if m == 1 {
                let l2 = l.clone();
                s.actor_lifecycle(m2.get().unwrap(), move |_c| {
                    emit(&l2, "lifecycle".into());
                    Handled::ok(())
                })
                .unwrap();
            }
            Handled::ok(())
        })
        .unwrap();
    me.set(a.clone()).unwrap();
    spot.seal();
    for m in 1..=6 {
        a.tell(m).unwrap();
    }
    spot.unseal();
    let got: Vec<String> = (0..7).map(|_| next(&rx)).collect();
    assert_eq!(
        got,
        ["a:1", "lifecycle", "a:2", "a:3", "a:4", "a:5", "a:6"],
        "the lifecycle record must not wait for the rest of the batch"
    );
}

// spec: EG-4.1, EG-7.5, EG-1.4, EG-7.2 — a seal during a batch stops it at the record in flight;
// return_pending then hands back every record not started, in FIFO order, nothing lost and
// nothing run twice; only the record in flight keeps its reservation.
#[test]
fn seal_during_a_batch_returns_the_records_not_started_in_fifo_order() {
    let rt = runtime_with(|_| {});
    let (log, rx) = log_channel();
    let src = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let me: Arc<OnceLock<ActorRef<u32>>> = Arc::new(OnceLock::new());
    let (ptx, prx) = mpsc::channel::<(Vec<PendingRecord>, LaneStats)>();
    let ptx = Mutex::new(ptx);
    let (l, s, m2) = (log.clone(), src.clone(), me.clone());
    let a = src
        .spawn_actor(move |_c: SpotWideCtx, m: u32| {
            emit(&l, format!("a:{m}"));
            if m == 2 {
                s.seal();
                let pending = s.lane().return_pending();
                let stats = m2.get().unwrap().stats();
                ptx.lock().unwrap().send((pending, stats)).unwrap();
            }
            Handled::ok(())
        })
        .unwrap();
    me.set(a.clone()).unwrap();
    src.seal();
    for m in 1..=6 {
        a.tell(m).unwrap();
    }
    src.unseal();
    assert_eq!(next(&rx), "a:1");
    assert_eq!(next(&rx), "a:2");
    let (pending, in_flight) = prx.recv_timeout(GUARD).unwrap();
    let shape: Vec<(u64, LaneClass, usize)> = pending
        .iter()
        .map(|p| (p.object(), p.class(), p.payload_len()))
        .collect();
    let ao = a.object_id();
    assert_eq!(shape, vec![(ao, LaneClass::Application, 4); 4]);
    // only the record in flight (a:2) is still reserved, nothing is queued
    assert_eq!(in_flight.application_reserved_items, 1);
    assert_eq!(in_flight.application_queued, 0);

    let dst = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let a2 = logging_actor(&dst, "a2", &log);
    for p in pending {
        p.resubmit_to(&a2).map_err(|(e, _)| e).unwrap();
    }
    let got: Vec<String> = (0..4).map(|_| next(&rx)).collect();
    assert_eq!(got, ["a2:3", "a2:4", "a2:5", "a2:6"]);
    // nothing of the batch ran at the sealed source, and its reservations are all back
    assert!(rx.try_recv().is_err());
    let deadline = std::time::Instant::now() + GUARD;
    while a.stats().claimed {
        assert!(std::time::Instant::now() < deadline, "record never ended");
        std::thread::yield_now();
    }
    assert_eq!(a.stats().application_reserved_items, 0);
    assert_eq!(a.stats().application_reserved_bytes, 0);
}

// spec: EG-2.6, EG-9, EG-6.4 — another object of the same gate that becomes ready during a batch
// runs after the record in flight, as in the one-by-one protocol (the batch's lane goes to the
// back of the ready set); the batch does not run ahead of it.
#[test]
fn another_object_ready_during_a_batch_runs_after_the_record_in_flight() {
    let rt = runtime_with(|_| {});
    let (log, rx) = log_channel();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let b = logging_actor(&spot, "b", &log);
    let (l, b2) = (log.clone(), b.clone());
    let a = spot
        .spawn_actor(move |_c: SpotWideCtx, m: u32| {
            emit(&l, format!("a:{m}"));
            if m == 1 {
                b2.tell(100).unwrap();
            }
            Handled::ok(())
        })
        .unwrap();
    spot.seal();
    for m in 1..=5 {
        a.tell(m).unwrap();
    }
    spot.unseal();
    let got: Vec<String> = (0..6).map(|_| next(&rx)).collect();
    assert_eq!(got, ["a:1", "b:100", "a:2", "a:3", "a:4", "a:5"]);
}

// spec: EG-7.1, EG-7.2, EG-16.19 — admission stays exact during a batch: the records of the batch
// that reached their terminal have returned their reservations, so a lane that is full only on
// paper admits; the record in flight and the records not started stay reserved.
#[test]
fn admission_during_a_batch_counts_only_records_not_ended() {
    let rt = runtime_with(|c| c.limits.application_items = 4);
    let (log, rx) = log_channel();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let me: Arc<OnceLock<ActorRef<u32>>> = Arc::new(OnceLock::new());
    let (l, m2) = (log.clone(), me.clone());
    let a = spot
        .spawn_actor(move |_c: SpotWideCtx, m: u32| {
            emit(&l, format!("a:{m}"));
            if m == 3 {
                // records 1 and 2 ended: 3 (in flight) and 4 (not started) hold 2 of 4 places
                let me = m2.get().unwrap();
                emit(&l, format!("tell:{:?}", me.tell(30).map_err(|e| e.kind())));
                emit(&l, format!("tell:{:?}", me.tell(31).map_err(|e| e.kind())));
                let refused = matches!(me.tell(32), Err(RuntimeError::ApplicationLaneFull(_)));
                emit(&l, format!("full:{refused}"));
                emit(
                    &l,
                    format!("reserved:{}", me.stats().application_reserved_items),
                );
            }
            Handled::ok(())
        })
        .unwrap();
    me.set(a.clone()).unwrap();
    spot.seal();
    for m in 1..=4 {
        a.tell(m).unwrap();
    }
    assert!(matches!(
        a.tell(5),
        Err(RuntimeError::ApplicationLaneFull(_))
    ));
    spot.unseal();
    let got: Vec<String> = (0..10).map(|_| next(&rx)).collect();
    assert_eq!(
        got,
        [
            "a:1",
            "a:2",
            "a:3",
            "tell:Ok(())",
            "tell:Ok(())",
            "full:true",
            "reserved:4",
            "a:4",
            "a:30",
            "a:31"
        ]
    );
}
