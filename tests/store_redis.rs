//! The Redis Location Store against real `redis-server` processes: truly concurrent nodes on the
//! shared test server (`ZLINK_TEST_REDIS_URL`), and failures on servers of the tests' own (a
//! paused server, a restart with and without persistence), and two in-process nodes on a Redis
//! store. The contract suite itself runs in `tests/store_contract.rs`.
//!
//! In CI (`CI` set) a missing server or `redis-server` binary fails these tests; elsewhere they
//! print `SKIPPED …` to stderr and pass.

mod node_common;
#[path = "../mesh/tests/common/ports.rs"]
mod ports;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zlink::store::contract::{self, START, TTL};
use zlink::store::{
    ActivationState, Clock, LocationStore, ManualClock, RedisOptions, RedisStore, Reservation,
    StoreError, StoreTime,
};
use zlink_wire::ErrorKind;

/// Guard for anything a test waits for.
const WAIT: Duration = Duration::from_secs(20);

/// Options that notice an unreachable server quickly.
fn fast_options() -> RedisOptions {
    let mut options = RedisOptions::default();
    options.response_timeout = Duration::from_secs(1);
    options.connection_timeout = Duration::from_secs(1);
    options
}

fn unavailable<T: std::fmt::Debug>(result: Result<T, StoreError>) -> StoreError {
    let err = result.expect_err("the store must refuse while Redis is unreachable");
    assert!(
        matches!(err, StoreError::Unavailable { .. }),
        "SB-5.11: expected Unavailable, got {err}"
    );
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    err
}

/// Full error text, sources included.
fn chain(err: &StoreError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The `redis-server` binary on PATH; fails in CI, skips loudly elsewhere.
fn redis_server_binary(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("redis-server"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: redis-server is not on PATH but CI is set (apt-get install redis-server)"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: redis-server is not on PATH"
        );
    }
    found
}

/// A `redis-server` child process of one test, on a port of its own.
struct OwnServer {
    binary: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    persistent: bool,
    child: Option<Child>,
}

impl OwnServer {
    /// Starts a server; `persistent` turns on the append-only file with fsync on every write, so
    /// a restart keeps every acknowledged write.
    fn start(test: &str, persistent: bool) -> Option<Self> {
        let binary = redis_server_binary(test)?;
        let mut server = Self {
            binary,
            port: ports::free_port(),
            dir: tempfile::tempdir().unwrap(),
            persistent,
            child: None,
        };
        server.spawn();
        Some(server)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", if self.persistent { "yes" } else { "no" }])
            .args(["--appendfsync", "always"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        // Wait for the server to answer PING (an external process: polled, with a guard).
        let deadline = Instant::now() + WAIT;
        loop {
            if ping(self.port) {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Freezes the server: connections stay open, nothing is answered.
    fn pause(&self) {
        self.signal("-STOP");
    }

    fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL: no shutdown save).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0_u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Repeats `op` until it stops failing `Unavailable` (the handle reconnected), within [`WAIT`].
async fn until_reachable<T, F, Fut>(mut op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match op().await {
            Err(StoreError::Unavailable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

fn own_store(server: &OwnServer, clock: &ManualClock) -> RedisStore {
    RedisStore::open_with_clock(&server.url(), fast_options(), Arc::new(clock.clone())).unwrap()
}

// spec: SB-5.11 — a lease that expires while Redis is unreachable: every call during the outage
// fails Unavailable (none is guessed), the handle reconnects by itself, and afterwards the lease
// is dead for good (never extended) and its actor re-reservable by a live node.
#[tokio::test]
async fn a_lease_that_expires_while_redis_is_unreachable_is_never_extended() {
    let Some(server) = OwnServer::start("lease_expires_while_unreachable", false) else {
        return;
    };
    let clock = ManualClock::at_wall(START);
    let node_a = own_store(&server, &clock);
    let node_b = own_store(&server, &clock);
    let a = contract::register(&node_a, "node-a", 1).await;
    let ready = contract::create_ready(&node_a, "p", "T", &a).await;
    clock.advance(TTL / 2);
    let b = contract::register(&node_b, "node-b", 1).await;

    server.pause();
    unavailable(node_a.renew_owner(a.holder.clone(), TTL).await);
    unavailable(node_a.lookup(contract::actor("p")).await);
    unavailable(
        node_b
            .reserve_activation(contract::request("p", "T", &b))
            .await,
    );
    clock.advance(TTL / 2); // a's lease ends during the outage; b's is live.
    server.resume();

    let err = until_reachable(|| node_a.renew_owner(a.holder.clone(), TTL))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseNotLive { .. }),
        "SB-5.11: a lease that ended while Redis was unreachable is never extended: {err}"
    );
    assert_eq!(
        node_a.lookup(contract::actor("p")).await.unwrap(),
        Some(ready.clone()),
        "the record is what it was: nothing was written during the outage"
    );
    let Reservation::Won(taken) =
        until_reachable(|| node_b.reserve_activation(contract::request("p", "T", &b)))
            .await
            .unwrap()
    else {
        panic!("the actor of an expired lease is re-reservable");
    };
    assert_eq!(taken.object_generation, ready.object_generation);
    assert!(taken.authority_owner_generation > ready.authority_owner_generation);
    let err = node_a
        .mark_ready(contract::actor("p"), ready.fence())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FenceMismatch { .. }), "{err}");
}

// spec: SB-5.11 — a Redis restart (with persistence): calls fail Unavailable while it is down,
// the handle reconnects by itself, and every record, lease and fence is as before.
#[tokio::test]
async fn a_restart_of_a_persistent_redis_reconnects_and_keeps_every_fence() {
    let Some(mut server) = OwnServer::start("restart_persistent", true) else {
        return;
    };
    let clock = ManualClock::at_wall(START);
    let store = own_store(&server, &clock);
    let a = contract::register(&store, "node-a", 1).await;
    let ready = contract::create_ready(&store, "p", "T", &a).await;

    server.kill();
    unavailable(store.lookup(contract::actor("p")).await);
    unavailable(store.renew_owner(a.holder.clone(), TTL).await);
    server.restart();

    let found = until_reachable(|| store.lookup(contract::actor("p")))
        .await
        .unwrap();
    assert_eq!(found, Some(ready.clone()));
    let renewed = store.renew_owner(a.holder.clone(), TTL).await.unwrap();
    assert_eq!(renewed.holder, a.holder, "the same lease lifecycle");
    let b = contract::register(&store, "node-b", 1).await;
    let moved = store
        .cas_owner(contract::actor("p"), ready.fence(), contract::owner(&b))
        .await
        .unwrap();
    assert_eq!(moved.object_generation, ready.object_generation);
}

// spec: SB-5.11, SB-4.1 — a Redis restart that lost the data: the handle never answers from the
// empty store (no "no owner" guess, no counters restarted under it); it fails Unavailable and
// says why. A new handle (a restarted node) starts on the new store.
#[tokio::test]
async fn a_redis_that_lost_its_data_is_unavailable_never_a_guess() {
    let Some(mut server) = OwnServer::start("restart_lost_data", false) else {
        return;
    };
    let clock = ManualClock::at_wall(START);
    let store = own_store(&server, &clock);
    let a = contract::register(&store, "node-a", 1).await;
    contract::create_ready(&store, "p", "T", &a).await;

    server.restart();
    // The first answers after the restart may be connection errors; then the verdict. Never a
    // record or "no record" from the emptied store.
    let deadline = Instant::now() + WAIT;
    loop {
        let err = unavailable(store.lookup(contract::actor("p")).await);
        if chain(&err).contains("lost its data") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no data-loss verdict: {}",
            chain(&err)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The lease has a connection of its own, which notices the restart on its first use.
    loop {
        let err = unavailable(store.renew_owner(a.holder.clone(), TTL).await);
        if chain(&err).contains("lost its data") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no data-loss verdict on the lease connection: {}",
            chain(&err)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unavailable(
        store
            .reserve_activation(contract::request("p", "T", &a))
            .await,
    );

    let fresh = own_store(&server, &clock);
    let a2 = contract::register(&fresh, "node-a", 2).await;
    assert_eq!(fresh.lookup(contract::actor("p")).await.unwrap(), None);
    contract::create_ready(&fresh, "p", "T", &a2).await;
}

/// A clock that jumps once: after `after` more reads, it stands at `to`.
#[derive(Debug)]
struct JumpClock {
    clock: ManualClock,
    jump: Mutex<Option<(u32, StoreTime)>>,
}

impl JumpClock {
    fn arm(&self, after: u32, to: StoreTime) {
        *self.jump.lock().unwrap() = Some((after, to));
    }
}

impl Clock for JumpClock {
    fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> zlink::clock::Sleep {
        self.clock.sleep_until(deadline)
    }

    fn wall(&self) -> std::time::SystemTime {
        let now = self.clock.wall();
        let mut jump = self.jump.lock().unwrap();
        if let Some((after, to)) = jump.as_mut() {
            *after -= 1;
            if *after == 0 {
                self.clock.set_wall(*to);
                *jump = None;
            }
        }
        now
    }
}

// spec: EG-14, SB-12 — a CAS racing a lease expiry: the core decided while the lease was live,
// but the lease ended before the write; the write is refused and decided again (LeaseNotLive),
// so no owner is confirmed and no lease extended after its end.
#[tokio::test]
async fn a_cas_racing_a_lease_expiry_never_confirms_an_expired_owner() {
    let Some(url) = contract::redis_test_url("a_cas_racing_a_lease_expiry") else {
        return;
    };
    let clock = Arc::new(JumpClock {
        clock: ManualClock::at_wall(START),
        jump: Mutex::new(None),
    });
    let store = RedisStore::open_with_clock(
        &contract::with_unique_prefix(&url, "race"),
        RedisOptions::default(),
        Arc::clone(&clock) as Arc<dyn Clock>,
    )
    .unwrap();
    let a = contract::register(&store, "node-a", 1).await;
    let b = contract::register(&store, "node-b", 1).await;
    let p = contract::create_ready(&store, "p", "T", &a).await;
    let q = contract::create_ready(&store, "q", "T", &a).await;
    let expiry = b.expires_at;
    clock
        .clock
        .set_wall(StoreTime::from_millis(expiry.as_millis() - 1));

    // Control: just before the expiry, with no race, the CAS to b succeeds.
    let moved = store
        .cas_owner(contract::actor("q"), q.fence(), contract::owner(&b))
        .await
        .unwrap();
    assert_eq!(moved.owner_node, b.holder.node);

    // The decision read sees b live; the lease ends before the write.
    clock.arm(1, expiry);
    let err = store
        .cas_owner(contract::actor("p"), p.fence(), contract::owner(&b))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseNotLive { .. }),
        "a CAS decided before the new owner's lease ended must not be written after: {err}"
    );
    assert_eq!(
        store.lookup(contract::actor("p")).await.unwrap(),
        Some(p.clone())
    );

    // The same race on a renewal: the lease is not extended past its end.
    clock
        .clock
        .set_wall(StoreTime::from_millis(a.expires_at.as_millis() - 1));
    clock.arm(1, a.expires_at);
    let err = store.renew_owner(a.holder.clone(), TTL).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotLive { .. }), "{err}");
}

// spec: EG-14 — two (here four) nodes, each with its own handle and connection, reserving the
// same actors at the same moment from different threads: exactly one wins each actor and every
// other sees the winner's record; then the winner commits Ready while the others retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_reserving_one_actor_concurrently_have_exactly_one_winner() {
    let Some(url) = contract::redis_test_url("nodes_reserving_one_actor_concurrently") else {
        return;
    };
    const NODES: usize = 4;
    const ACTORS: usize = 40;
    let url = contract::with_unique_prefix(&url, "race");
    // Default clock: the server's TIME, as between machines.
    let mut stores = Vec::new();
    let mut leases = Vec::new();
    for i in 0..NODES {
        let store = Arc::new(RedisStore::open(&url, RedisOptions::default()).unwrap());
        leases.push(contract::register(&*store, &format!("node-{i}"), 1).await);
        stores.push(store);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(NODES));
    let tasks: Vec<_> = (0..NODES)
        .map(|i| {
            let (store, lease, barrier) = (
                Arc::clone(&stores[i]),
                leases[i].clone(),
                Arc::clone(&barrier),
            );
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for n in 0..ACTORS {
                    barrier.wait().await;
                    let id = format!("race-{n}");
                    let outcome = store
                        .reserve_activation(contract::request(&id, "T", &lease))
                        .await
                        .expect("reserve");
                    let location = if outcome.is_won() {
                        store
                            .mark_ready(contract::actor(&id), outcome.location().fence())
                            .await
                            .expect("the winner commits Ready")
                    } else {
                        outcome.location().clone()
                    };
                    outcomes.push((outcome, location));
                }
                outcomes
            })
        })
        .collect();
    let mut per_node = Vec::new();
    for task in tasks {
        per_node.push(task.await.unwrap());
    }
    for n in 0..ACTORS {
        let won: Vec<_> = per_node.iter().filter(|o| o[n].0.is_won()).collect();
        assert_eq!(won.len(), 1, "EG-14: exactly one winner for race-{n}");
        let winner = won[0][n].0.location().clone();
        for outcomes in &per_node {
            let seen = outcomes[n].0.location();
            assert_eq!(seen.object_generation, winner.object_generation);
            assert_eq!(
                seen.authority_owner_generation,
                winner.authority_owner_generation
            );
            assert_eq!(seen.owner_node, winner.owner_node);
        }
        let stored = stores[0]
            .lookup(contract::actor(&format!("race-{n}")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.state, ActivationState::Ready);
        assert_eq!(stored.owner_node, winner.owner_node);
    }
}

// The default clock is the Redis server's TIME (one clock for every machine of a mesh).
#[tokio::test]
async fn the_default_clock_is_the_servers_time() {
    let Some(url) = contract::redis_test_url("the_default_clock_is_the_servers_time") else {
        return;
    };
    let url = contract::with_unique_prefix(&url, "time");
    let store = RedisStore::open(&url, RedisOptions::default()).unwrap();
    let mut conn = redis::Client::open(url.split('?').next().unwrap())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let time = |(s, us): (u64, u64)| s * 1_000 + us / 1_000;
    let before: (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let lease = contract::register(&store, "node-a", 1).await;
    let after: (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let ttl = u64::try_from(TTL.as_millis()).unwrap();
    let expires = lease.expires_at.as_millis();
    assert!(
        (time(before) + ttl..=time(after) + ttl).contains(&expires),
        "expiry {expires} is server TIME + TTL ({} ..= {})",
        time(before) + ttl,
        time(after) + ttl
    );
}

// spec: SB-1.2, EG-14, SB-4.1 — two in-process nodes on one Redis store (server TIME): actors are
// created on either node, found by the other through the store, called across nodes without a
// single store call per message, destroyed and re-created as a new incarnation.
#[tokio::test]
async fn two_nodes_run_actors_on_a_redis_store() {
    use node_common::{TIMEOUT, pair, rid};
    use zlink::actor::ActorId;
    use zlink::node::Create;
    use zlink::store::{CountingStore, StoreOp};
    use zlink_apps::demo::{Add, Get};

    let Some(url) = contract::redis_test_url("two_nodes_run_actors_on_a_redis_store") else {
        return;
    };
    let redis = RedisStore::open(
        &contract::with_unique_prefix(&url, "nodes"),
        RedisOptions::default(),
    )
    .unwrap();
    let store = Arc::new(CountingStore::new(redis));
    let (a, b, _, _) = pair(store.clone()).await;
    let id = |s: &str| ActorId::new(s).unwrap();
    let on_b = a
        .create(Create::new("counter", id("c-b")).on(rid("b")))
        .await
        .unwrap();
    let on_a = b
        .create(Create::new("counter", id("c-a")).on(rid("a")))
        .await
        .unwrap();
    let found = b.get(&id("c-b")).await.unwrap();
    assert_eq!(found.object_generation(), on_b.object_generation());

    let before = store.counts();
    for _ in 0..50 {
        a.request(&on_b, &Add(1), TIMEOUT).await.unwrap();
        b.send(&on_a, &Add(2)).await.unwrap();
    }
    assert_eq!(a.request(&on_b, &Get, TIMEOUT).await.unwrap(), 50);
    assert_eq!(b.request(&on_a, &Get, TIMEOUT).await.unwrap(), 100);
    let used = store.counts().since(&before);
    for op in [
        StoreOp::Lookup,
        StoreOp::ReserveActivation,
        StoreOp::MarkReady,
        StoreOp::CasOwner,
        StoreOp::Destroy,
    ] {
        assert_eq!(used.get(op), 0, "SB-1.2: {op:?} during calls");
    }

    a.destroy(&on_b).await.unwrap();
    let again = a
        .create(Create::new("counter", id("c-b")).on(rid("b")))
        .await
        .unwrap();
    assert!(again.object_generation() > on_b.object_generation());
    assert_eq!(b.request(&again, &Get, TIMEOUT).await.unwrap(), 0);
}

/// `CLIENT LIST` of the server at `url`: (name, last command) of each named client.
async fn clients(url: &str) -> Vec<(String, String)> {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    list.lines()
        .filter_map(|line| {
            let field = |k: &str| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(k))
                    .map(str::to_owned)
            };
            let name = field("name=")?;
            (!name.is_empty()).then(|| (name, field("cmd=").unwrap_or_default()))
        })
        .collect()
}

// spec: SB-5.11, issue 26 "also" — the owner lease's calls (register, renew, release) travel on
// a connection of their own, never queued behind the actor operations on the other: the
// server sees two named connections, and a renewal is the lease connection's last command
// while a lookup stays the actor connection's.
#[tokio::test]
async fn lease_renewals_have_their_own_connection() {
    let Some(server) = OwnServer::start("lease_renewals_have_their_own_connection", false) else {
        return;
    };
    let store = RedisStore::open(&server.url(), fast_options()).unwrap();
    let lease = contract::register(&store, "node-a", 1).await;
    let id = zlink::actor::ActorId::new("a1").unwrap();
    assert!(store.lookup(id.clone()).await.unwrap().is_none());
    store.renew_owner(lease.holder.clone(), TTL).await.unwrap();
    let seen = clients(&server.url()).await;
    let cmd_of = |name: &str| {
        seen.iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| panic!("no connection named {name}: {seen:?}"))
    };
    assert_eq!(cmd_of("zlink-store"), "mget", "{seen:?}");
    assert_ne!(cmd_of("zlink-store-lease"), "mget", "{seen:?}");
    // And the other way round: a lookup after the renewal leaves the lease connection alone.
    assert!(store.lookup(id).await.unwrap().is_none());
    let lease_cmd = cmd_of("zlink-store-lease");
    let seen = clients(&server.url()).await;
    assert_eq!(
        seen.iter()
            .find(|(n, _)| n == "zlink-store-lease")
            .map(|(_, c)| c.clone()),
        Some(lease_cmd)
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
}

// spec: SB-5.11, issue 30 (failover) — a renewal never waits longer than the lease allows: with
// the server paused, an owner lease operation gives up after its lease timeout (100 ms here)
// with `Unavailable`, while an actor operation on the other connection still waits for its
// own, far longer response timeout (60 s). So a 1.5 s lease is kept on Redis: its renewal
// slack (850 ms) is longer than the 500 ms default lease timeout (the node's configuration
// check, `write_wait_limit`).
#[tokio::test]
async fn a_renewal_waits_only_the_lease_timeout() {
    let Some(server) = OwnServer::start("a_renewal_waits_only_the_lease_timeout", false) else {
        return;
    };
    let mut options = RedisOptions::default();
    options.response_timeout = Duration::from_secs(60);
    options.connection_timeout = Duration::from_secs(60);
    options.lease_timeout = Duration::from_millis(100);
    let store = RedisStore::open(&server.url(), options).unwrap();
    assert_eq!(store.write_wait_limit(), Some(Duration::from_millis(100)));
    let lease = contract::register(&store, "node-a", 1).await;
    let id = zlink::actor::ActorId::new("a1").unwrap();
    assert!(store.lookup(id.clone()).await.unwrap().is_none());

    server.pause();
    let lookup = tokio::spawn({
        let store = store.clone();
        async move { store.lookup(id).await }
    });
    let renewal = tokio::time::timeout(WAIT, store.renew_owner(lease.holder.clone(), TTL))
        .await
        .expect("a renewal against a paused server waited past the test's guard");
    unavailable(renewal);
    assert!(
        !lookup.is_finished(),
        "the actor operation waits for its own response timeout"
    );
    server.resume();
    assert!(lookup.await.unwrap().unwrap().is_none());
    // the lease connection works again once the server answers
    until_reachable(|| store.renew_owner(lease.holder.clone(), TTL))
        .await
        .unwrap();
}
