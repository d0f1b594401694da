//! The embedded SQLite Location Store shared by several handles and processes on one file:
//! agreement on owners, a single reservation winner under real lock contention, restart
//! survival and stale-fence refusal after a node restart (issue: "two node processes sharing the
//! SQLite store agree on owners"; "a node restart gets a new NodeGeneration and stale refs are
//! refused").

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use zlink::store::contract::{self, actor, node, owner, request};
use zlink::store::{
    ActivationState, LocationStore, ManualClock, NodeGeneration, Reservation, SqliteOptions,
    SqliteStore, StoreError, SystemClock,
};

/// Generous lock wait: these tests run on loaded machines; only `lock_timeout_is_unavailable`
/// wants a short one.
fn patient() -> SqliteOptions {
    let mut o = SqliteOptions::default();
    o.busy_timeout = Duration::from_secs(60);
    o
}

fn open(path: &Path, clock: &ManualClock) -> SqliteStore {
    SqliteStore::open_with(path, patient(), Arc::new(clock.clone())).expect("open sqlite store")
}

fn open_system(path: impl AsRef<Path>) -> SqliteStore {
    SqliteStore::open_with(path, patient(), Arc::new(SystemClock)).expect("open sqlite store")
}

// spec: EG-14, SB-8.9 — two independent handles (own connection and thread each) on one file
// see each other's writes at once and refuse each other's stale fences.
#[tokio::test]
async fn two_handles_on_one_file_agree_on_owners() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let clock = ManualClock::at_wall(contract::START);
    let h1 = open(&path, &clock);
    let h2 = open(&path, &clock);

    let a = contract::register(&h1, "node-a", 1).await;
    let b = contract::register(&h2, "node-b", 1).await;
    assert_ne!(a.holder.lease_generation, b.holder.lease_generation);

    let ready = contract::create_ready(&h1, "shared-1", "T", &a).await;
    assert_eq!(
        h2.lookup(actor("shared-1")).await.unwrap(),
        Some(ready.clone())
    );
    let held = h2
        .reserve_activation(request("shared-1", "T", &b))
        .await
        .unwrap();
    assert_eq!(
        held,
        Reservation::Held(ready.clone()),
        "EG-14: the other handle does not win"
    );

    let moved = h2
        .cas_owner(actor("shared-1"), ready.fence(), owner(&b))
        .await
        .unwrap();
    assert_eq!(
        h1.lookup(actor("shared-1")).await.unwrap(),
        Some(moved.clone())
    );
    let err = h1
        .cas_owner(actor("shared-1"), ready.fence(), owner(&a))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
}

// spec: EG-14 — four handles (four connections, four threads) race for the same 40 actors on a
// multi-threaded runtime; SQLite's write lock and the IMMEDIATE transactions let exactly one win
// each actor, and all handles end with the same view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_handles_have_one_winner_per_actor() {
    const ACTORS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    let clock = ManualClock::at_wall(contract::START);
    let mut tasks = Vec::new();
    for h in 0..4 {
        let store = open(&path, &clock);
        let lease = contract::register(&store, &format!("racer-{h}"), 1).await;
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for i in 0..ACTORS {
                let id = format!("contended-{i}");
                if let Reservation::Won(l) = store
                    .reserve_activation(request(&id, "T", &lease))
                    .await
                    .unwrap()
                {
                    store.mark_ready(actor(&id), l.fence()).await.unwrap();
                    won.push(id);
                }
            }
            (store, lease, won)
        }));
    }
    let mut winners: BTreeMap<String, String> = BTreeMap::new();
    let mut stores = Vec::new();
    for t in tasks {
        let (store, lease, won) = t.await.unwrap();
        for id in won {
            let previous = winners.insert(id.clone(), lease.holder.node.to_string());
            assert!(previous.is_none(), "EG-14: {id} reserved twice");
        }
        stores.push((store, lease));
    }
    assert_eq!(winners.len(), ACTORS, "every actor has exactly one winner");
    for (store, _) in &stores {
        for (id, winner) in &winners {
            let l = store.lookup(actor(id)).await.unwrap().expect("record");
            assert_eq!(
                l.owner_node.as_str(),
                winner,
                "all handles agree on the owner of {id}"
            );
            assert_eq!(l.state, ActivationState::Ready);
        }
    }
}

// spec: SB-4.1, SB-12 — the store survives a node restart (close, reopen: data there); the
// restarted node registers a new NodeGeneration and lease, re-reserves its actors with a new
// authority fence, and every fence of the previous process is refused (stale refs).
#[tokio::test]
async fn restart_reopens_data_and_refuses_stale_fences() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restart.db");
    let clock = ManualClock::at_wall(contract::START);

    let before = {
        let first = open(&path, &clock);
        let lease = contract::register(&first, "node-a", 1).await;
        let ready = contract::create_ready(&first, "survivor", "T", &lease).await;
        let gone = contract::create_ready(&first, "destroyed", "T", &lease).await;
        first
            .destroy(actor("destroyed"), gone.owner_fence())
            .await
            .unwrap();
        (lease, ready, gone)
        // `first` is dropped here: its thread and connection close.
    };
    let (old_lease, old_ready, old_gone) = before;

    let reopened = open(&path, &clock);
    assert_eq!(
        reopened.lookup(actor("survivor")).await.unwrap(),
        Some(old_ready.clone()),
        "the record survives closing and reopening the file"
    );
    assert_eq!(reopened.lookup(actor("destroyed")).await.unwrap(), None);

    let err = reopened
        .register_owner(node("node-a"), NodeGeneration::new(0), contract::TTL)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::StaleNodeGeneration { .. }),
        "{err}"
    );
    let new_lease = contract::register(&reopened, "node-a", 2).await;
    assert!(new_lease.holder.lease_generation > old_lease.holder.lease_generation);
    let err = reopened
        .renew_owner(old_lease.holder.clone(), contract::TTL)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");

    let Reservation::Won(taken) = reopened
        .reserve_activation(request("survivor", "T", &new_lease))
        .await
        .unwrap()
    else {
        panic!("the restarted node re-reserves actors of its superseded lease");
    };
    assert_eq!(taken.object_generation, old_ready.object_generation);
    assert_eq!(taken.node_generation, NodeGeneration::new(2));
    assert!(taken.authority_owner_generation > old_ready.authority_owner_generation);
    let err = reopened
        .cas_owner(actor("survivor"), old_ready.fence(), owner(&new_lease))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::FenceMismatch { .. }),
        "stale ref: {err}"
    );
    assert_eq!(err.kind(), zlink_wire::ErrorKind::Unavailable);

    // The destroyed actor's counters survived the restart too (SB-4.1).
    let recreated = contract::create_ready(&reopened, "destroyed", "T", &new_lease).await;
    assert!(recreated.object_generation > old_gone.object_generation);
}

// spec: SB-12 — a writer that cannot get the lock within the busy timeout fails `Unavailable`
// (the transaction is not applied) instead of blocking forever.
#[tokio::test]
async fn lock_timeout_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let clock = ManualClock::at_wall(contract::START);
    let options = {
        let mut o = SqliteOptions::default();
        o.busy_timeout = Duration::from_millis(50);
        o
    };
    let store =
        SqliteStore::open_with(&path, options, Arc::new(clock.clone())).expect("open store");
    // Another "process" holds the write lock.
    let blocker = rusqlite_lock(&path);
    let err = store
        .register_owner(node("node-a"), NodeGeneration::new(1), contract::TTL)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert_eq!(err.kind(), zlink_wire::ErrorKind::Unavailable);
    drop(blocker);
    contract::register(&store, "node-a", 1).await;
}

// spec: SB-5.11 — owner lease operations wait for the write lock at most the lease busy
// timeout, never the (much longer) busy timeout of the other writes: with the lock held by
// another process, a renewal answers `Unavailable` at once while an activation would wait a
// minute; once the lock is free the same lease renews.
#[tokio::test]
async fn a_renewal_waits_only_the_lease_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lease-wait.db");
    let clock = ManualClock::at_wall(contract::START);
    let mut options = patient();
    options.lease_busy_timeout = Duration::from_millis(100);
    let store =
        SqliteStore::open_with(&path, options, Arc::new(clock.clone())).expect("open store");
    assert_eq!(store.write_wait_limit(), Some(Duration::from_millis(100)));
    let lease = contract::register(&store, "node-a", 1).await;
    let blocker = rusqlite_lock(&path);
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        store.renew_owner(lease.holder.clone(), contract::TTL),
    )
    .await
    .expect("the renewal gave up within its lease busy timeout, not the 60 s busy timeout")
    .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    drop(blocker);
    let renewed = store
        .renew_owner(lease.holder.clone(), contract::TTL)
        .await
        .unwrap();
    assert_eq!(renewed.holder, lease.holder);
}

/// The payload of a line the child printed: libtest may print `test NAME ... ` before it on the
/// same line, so the marker is searched, not matched at the start.
fn marked(line: &str) -> Option<&str> {
    line.find("ZLINK ").map(|at| &line[at + "ZLINK ".len()..])
}

/// Holds SQLite's write lock on `path` from another process until dropped. The child exits when
/// its stdin closes, so it never outlives this handle (nor a panicking test).
fn rusqlite_lock(path: &Path) -> impl Drop {
    struct Lock(std::process::Child, BufReader<std::process::ChildStdout>);
    impl Drop for Lock {
        fn drop(&mut self) {
            drop(self.0.stdin.take());
            let _ = self.0.wait();
        }
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_holder_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LOCK_ENV, path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn lock holder");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lock = Lock(child, stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let n = lock
            .1
            .read_line(&mut line)
            .expect("read lock holder output");
        assert!(
            n > 0,
            "the lock holder process ended without reporting LOCKED"
        );
        if marked(line.trim_end()) == Some("LOCKED") {
            break lock;
        }
    }
}

const LOCK_ENV: &str = "ZLINK_STORE_TEST_LOCK_DB";

/// Child half of `lock_timeout_is_unavailable`: takes the write lock and waits to be killed.
/// Without its environment variable it does nothing (and passes).
#[test]
fn lock_holder_child() {
    let Ok(path) = std::env::var(LOCK_ENV) else {
        return;
    };
    // Make sure the file exists with its schema, then hold the write lock on a raw connection
    // (the store's own connections never leave a transaction open).
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    println!("ZLINK LOCKED");
    // Held until the parent closes our stdin (or dies).
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    drop(conn);
}

const CHILD_ENV: &str = "ZLINK_STORE_TEST_CHILD_DB";
const CHILD_ACTORS: usize = 60;

// spec: EG-14 — two OS processes on one store file: the parent and a child process (this test
// binary re-executed with a filter) race to reserve the same actors; exactly one process wins
// each actor and both processes report the same owner, authority and incarnation for all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_the_store_and_agree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processes.db");
    let store = open_system(&path);
    let lease = store
        .register_owner(
            node("parent"),
            NodeGeneration::new(1),
            Duration::from_secs(3600),
        )
        .await
        .unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child process");
    let stdout = child.stdout.take().unwrap();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let reader = std::thread::spawn(move || {
        let mut ready_tx = Some(ready_tx);
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            match marked(&line) {
                Some("READY") => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Some(rest) => lines.push(rest.to_owned()),
                None => {}
            }
        }
        lines
    });
    ready_rx.await.expect("child reports READY");

    let mut parent_won = Vec::new();
    for i in 0..CHILD_ACTORS {
        let id = format!("proc-{i}");
        if let Reservation::Won(l) = store
            .reserve_activation(request(&id, "T", &lease))
            .await
            .unwrap()
        {
            store.mark_ready(actor(&id), l.fence()).await.unwrap();
            parent_won.push(id);
        }
    }
    let status = child.wait().expect("child exits");
    let lines = reader.join().unwrap();
    assert!(status.success(), "child process failed: {lines:?}");

    let mut child_won = Vec::new();
    let mut child_view = BTreeMap::new();
    for line in &lines {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["WON", id] => child_won.push((*id).to_owned()),
            ["VIEW", id, node, object, authority] => {
                child_view.insert(
                    (*id).to_owned(),
                    (
                        (*node).to_owned(),
                        (*object).to_owned(),
                        (*authority).to_owned(),
                    ),
                );
            }
            _ => {}
        }
    }
    for id in &child_won {
        assert!(
            !parent_won.contains(id),
            "EG-14: {id} won by both processes"
        );
    }
    assert_eq!(
        parent_won.len() + child_won.len(),
        CHILD_ACTORS,
        "every actor has one winner"
    );
    assert_eq!(child_view.len(), CHILD_ACTORS);
    for (id, (node, object, authority)) in &child_view {
        let l = store.lookup(actor(id)).await.unwrap().expect("record");
        assert_eq!(
            l.owner_node.as_str(),
            node,
            "processes agree on the owner of {id}"
        );
        assert_eq!(&l.object_generation.to_string(), object);
        assert_eq!(&l.authority_owner_generation.to_string(), authority);
        let expected = if child_won.contains(id) {
            "child"
        } else {
            "parent"
        };
        assert_eq!(node, expected);
    }
}

/// Child half of `two_processes_share_the_store_and_agree`. Without its environment variable it
/// does nothing (and passes).
#[test]
fn store_child_process() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = open_system(&path);
        let lease = store
            .register_owner(
                node("child"),
                NodeGeneration::new(1),
                Duration::from_secs(3600),
            )
            .await
            .unwrap();
        println!("ZLINK READY");
        for i in 0..CHILD_ACTORS {
            let id = format!("proc-{i}");
            if let Reservation::Won(l) = store
                .reserve_activation(request(&id, "T", &lease))
                .await
                .unwrap()
            {
                store.mark_ready(actor(&id), l.fence()).await.unwrap();
                println!("ZLINK WON {id}");
            }
        }
        for i in 0..CHILD_ACTORS {
            let id = format!("proc-{i}");
            let l = store.lookup(actor(&id)).await.unwrap().expect("record");
            println!(
                "ZLINK VIEW {id} {} {} {}",
                l.owner_node, l.object_generation, l.authority_owner_generation
            );
        }
    });
}
