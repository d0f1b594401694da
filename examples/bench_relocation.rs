//! Relocation benchmark (issue 27, "Benchmark"): three nodes in one process (tokio
//! multi-thread, 2 workers; TCP loopback, one in-memory Location Store), public API only
//! (`Node::relocate`, `Node::send`, `Node::create`). Prints JSON lines
//! `{"bench","metric","value","baseline","ratio"}`.
//!
//! - `relocation` `duration_p50_ms` / `duration_p99_ms`: one actor moved back and forth
//!   between nodes a and b (`Node::relocate` on its owner) while node c sends it a steady
//!   10,000 messages/s: from the call to its return (the target's result; the actor has no
//!   bound session, so no 44 follows). Baseline: the same actor's request round trip from c in
//!   the same run (p50 / p99, `Node::request` between the relocations).
//! - `relocation` `pause_p50_ms` / `pause_p99_ms`: the moving actor's processing pause, the
//!   largest gap between two messages it processed around each relocation (from the call to
//!   25 ms after its return). Baseline: the largest gap in a window of the same length while
//!   the actor does not move (one per relocation, between the relocations), same run.
//! - `relocation` `idle_per_s`: idle actors (the demo `counter`, state travelling) relocated
//!   from a to b, 32 at a time. Baseline: the rate at which the same actors were created on a.
//! - `relocation` `last44_p50_ms` / `last44_p99_ms`: a SpotWide Spot of N demo `counter`s,
//!   each bound to its own client session on node c (the demo session app), moved back and
//!   forth between a and b (`Node::relocate_spot` on its host): from the call to the moment the
//!   last of the N sessions applied its 44 commit — the session owner's seal gauge
//!   (`Node::session_seals().seals`, sampled every ≈ 50 µs by a thread of its own) falls back to
//!   0 for the last time. Baseline: a relay request's round trip through one of the sessions
//!   (client → c → the bound actor → c → client), between the moves.
//!
//! The sender paces itself on a thread of its own (a sleep to each message's due time, then
//! `Node::send`), so its messages arrive evenly rather than in timer-tick bursts; the actor
//! records when it processes each message (handler code, as an application would). A send
//! with the stale ref after a move is forwarded by the old owner (Message Follow); the sender
//! takes the new ref once `relocate` returns. `BENCH_QUICK=1`: 5 moves, 200 idle actors, 4
//! moves of a Spot of 4 bound actors; otherwise 40 moves, 2,000 idle actors and 20 moves of a
//! Spot of 16 (`BENCH_MOVES`, `BENCH_IDLE_ACTORS`, `BENCH_SPOT_MOVES`, `BENCH_BOUND_SESSIONS`
//! override).
//! Progress on stderr.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use zlink::actor::{ActorId, ActorRef, ActorTypeBuilder, Handled, HandlerError, Message};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node, NodeOptions};
use zlink::store::MemoryStore;
use zlink_apps::demo;
use zlink_mesh::{DispatchKey, MeshConfig, MeshName, MeshSecret, NodeRid};

#[path = "support/progress.rs"]
mod progress;

/// Messages per second the sender keeps up.
const RATE: u64 = 10_000;
/// Steady sending between two relocations.
const STEADY: Duration = Duration::from_millis(300);
/// What a relocation's pause window covers after `relocate` returns (work the old owner
/// forwarded, the sender's switch to the new ref).
const AFTER: Duration = Duration::from_millis(25);
/// Idle relocations in flight at once.
const IDLE_CONCURRENCY: usize = 32;

fn quick() -> bool {
    std::env::var_os("BENCH_QUICK").is_some()
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn line(bench: &str, metric: &str, value: f64, baseline: f64) {
    let ratio = if baseline > 0.0 {
        value / baseline
    } else {
        0.0
    };
    progress::out(format_args!(
        "{{\"bench\":{},\"metric\":{},\"value\":{:.3},\"baseline\":{:.3},\"ratio\":{:.3}}}",
        serde_json::Value::from(bench),
        serde_json::Value::from(metric),
        value,
        baseline,
        ratio
    ));
}

/// One paced message to the `mover`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Tick(u64);
impl Message for Tick {
    const KEY: DispatchKey = DispatchKey::new(900);
    type Reply = ();
}

/// A request to the `mover` (the round-trip baseline).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Ping;
impl Message for Ping {
    const KEY: DispatchKey = DispatchKey::new(901);
    type Reply = u64;
}

/// When the process started: the mover's processing times are nanoseconds since then.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// When the mover processed each `Tick`, in processing order (whichever node ran it).
fn processed() -> &'static Mutex<Vec<u64>> {
    static SEEN: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    &SEEN
}

/// The demo types and the `mover`: counts its ticks, the count travels when it moves.
fn registry() -> zlink::actor::ActorRegistry {
    let mut r = demo::registry().expect("demo types");
    r.register(
        ActorTypeBuilder::new("mover", |_info, _init: Bytes| Ok(0u64))
            .handle(|n: &mut u64, _ctx, Tick(_)| {
                let now = since_epoch(Instant::now());
                processed()
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(now);
                *n += 1;
                Handled::ok(())
            })
            .handle(|n: &mut u64, _ctx, Ping| Handled::ok(*n))
            .migrate(|n: &u64| Ok::<_, HandlerError>(*n), |_info, n: u64| Ok(n))
            .build()
            .expect("mover type"),
    )
    .expect("register mover");
    r
}

/// Starts node `name`; `sessions`: it hosts the demo session application and takes any client
/// (the session owner of the bound-session line).
async fn start(
    name: &str,
    peers: Vec<zlink_mesh::PeerAddress>,
    store: Arc<MemoryStore>,
    sessions: bool,
) -> Node {
    let mut mc = MeshConfig::new(MeshName::new("bench").unwrap(), NodeRid::new(name).unwrap());
    mc.secret = Some(MeshSecret::new(b"zlink-bench-secret-0123456789abcdef".to_vec()).unwrap());
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    let mut o = NodeOptions::new(mc, store, registry());
    if sessions {
        o = o
            .with_sessions(demo::sessions())
            .expect("demo sessions")
            .with_client_access(zlink::node::access::ClientAccess::open());
    }
    o.peers = peers;
    Node::start(o).await.unwrap()
}

/// Samples `node`'s seal gauge every ≈ 50 µs until `stop`: the highest count of seals seen at
/// once, and when the gauge last fell from non-zero to 0 (the last 44 applied).
fn sample_seals(
    node: Node,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, Option<Instant>)> {
    std::thread::spawn(move || {
        let (mut peak, mut released, mut last) = (0u64, None, 0u64);
        loop {
            let done = stop.load(Ordering::Acquire);
            let now = node.session_seals().seals;
            let at = Instant::now();
            if now == 0 && last > 0 {
                released = Some(at);
            }
            peak = peak.max(now);
            last = now;
            if done {
                return (peak, released);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    })
}

/// A relay request through the demo session app to the bound `actor`: its reply.
async fn relay_add(client: &NodeClient, actor: &ActorRef, n: u64) -> u64 {
    let packet = demo::session::RelayRequest {
        actor_id: actor.id().to_string(),
        key: <demo::Add as Message>::KEY.get(),
        payload: rmp_serde::to_vec_named(&demo::Add(n)).expect("encode"),
        timeout_ms: 10_000,
    };
    let bytes = client.packet(&packet).await.expect("relay");
    rmp_serde::from_slice(&bytes).expect("reply")
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds")
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The largest gap (µs) between consecutive processing times that overlaps `[from, to]`
/// (nanoseconds since the epoch); `None` without two times around the window.
fn largest_gap(times: &[u64], from: u64, to: u64) -> Option<u64> {
    let first = times.partition_point(|&t| t < from).saturating_sub(1);
    let last = times.partition_point(|&t| t <= to).min(times.len() - 1);
    times
        .get(first..=last)?
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .map(|ns| ns / 1000)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    epoch();
    let moves = env_or("BENCH_MOVES", if quick() { 5 } else { 40 });
    let idle = env_or("BENCH_IDLE_ACTORS", if quick() { 200 } else { 2_000 });
    let spot_moves = env_or("BENCH_SPOT_MOVES", if quick() { 4 } else { 20 });
    let bound = env_or("BENCH_BOUND_SESSIONS", if quick() { 4 } else { 16 });
    progress::start("bench_relocation", 4);
    let store = Arc::new(MemoryStore::new());
    // Each node dials the nodes whose names sort after its own (as the mesh's tests do).
    let c = start("c", vec![], store.clone(), true).await;
    let b = start("b", vec![c.address()], store.clone(), false).await;
    let a = start("a", vec![b.address(), c.address()], store, false).await;
    for n in [&a, &b, &c] {
        let down = n.wait_peers(Duration::from_secs(20)).await;
        assert!(down.is_empty(), "{}: peers down: {down:?}", n.node_rid());
    }
    let timeout = Duration::from_secs(10);

    // One actor moved back and forth under a steady 10 k msg/s from c.
    progress::step(format!("{moves} relocations under {RATE} msg/s"));
    let actor = a
        .create(Create::new("mover", ActorId::new("bench-mover").unwrap()))
        .await
        .unwrap();
    let current = Arc::new(Mutex::new(actor.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let sender = {
        let (c, current, stop, failed) = (c.clone(), current.clone(), stop.clone(), failed.clone());
        let rt = tokio::runtime::Handle::current();
        std::thread::spawn(move || {
            let interval = Duration::from_nanos(1_000_000_000 / RATE);
            let mut due = Instant::now();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                due += interval;
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let to: ActorRef = current
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone();
                if rt.block_on(c.send(&to, &Tick(sent))).is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                sent += 1;
            }
            sent
        })
    };
    let mut durations = hist();
    let mut pauses = hist();
    let mut steady_gaps = hist();
    let mut rtts = hist();
    let mut windows = Vec::new();
    let (mut owner, mut other) = (&a, &b);
    tokio::time::sleep(STEADY).await;
    for _ in 0..moves {
        // Round trips while the actor stays put: the baseline of the move's duration.
        let from = current.lock().unwrap().clone();
        for _ in 0..20 {
            let t = Instant::now();
            c.request(&from, &Ping, timeout).await.unwrap();
            let _ = rtts.record(t.elapsed().as_micros().max(1) as u64);
        }
        let started = Instant::now();
        let report = owner
            .relocate(&from, other.node_rid().clone())
            .await
            .expect("relocation");
        let took = started.elapsed();
        *current.lock().unwrap() = report.actor.clone();
        let _ = durations.record(took.as_micros().max(1) as u64);
        windows.push((started, started + took + AFTER));
        std::mem::swap(&mut owner, &mut other);
        tokio::time::sleep(STEADY).await;
    }
    stop.store(true, Ordering::Relaxed);
    let sent = tokio::task::spawn_blocking(move || sender.join().unwrap())
        .await
        .unwrap();
    let last = current.lock().unwrap().clone();
    let counted = c.request(&last, &Ping, timeout).await.unwrap();
    // The count above can overtake sends still on their way (an old owner's forwards): the
    // processed log settles once nothing more arrives for a second (or all arrived).
    let processed_now = || processed().lock().unwrap().len() as u64;
    let (mut settled, mut still) = (processed_now(), Instant::now());
    while settled < sent && still.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let n = processed_now();
        if n != settled {
            (settled, still) = (n, Instant::now());
        }
    }
    let dropped: Vec<String> = [&a, &b, &c]
        .iter()
        .map(|n| {
            let f = n.follow_counters();
            let refused: Vec<String> = zlink::node::FollowRefusal::ALL
                .iter()
                .filter(|r| f.refused(**r) > 0)
                .map(|r| format!("{} {}", r.as_str(), f.refused(*r)))
                .collect();
            format!(
                "{}: {} sends dropped, follow refusals {refused:?}",
                n.node_rid(),
                n.counters().sends_dropped
            )
        })
        .collect();
    eprintln!(
        "bench_relocation: settled {settled} processed of {sent} sent; {}",
        dropped.join("; ")
    );
    let times = processed().lock().unwrap().clone();
    for &(from, to) in &windows {
        let (from, to) = (since_epoch(from), since_epoch(to));
        if let Some(gap) = largest_gap(&times, from, to) {
            let _ = pauses.record(gap.max(1));
        }
        // A window of the same length while the actor stays put: the steady state just
        // before this move (its round trips done, well after the previous move's window).
        let len = to - from;
        let steady_to = from.saturating_sub(50_000_000);
        if let Some(gap) = largest_gap(&times, steady_to.saturating_sub(len), steady_to) {
            let _ = steady_gaps.record(gap.max(1));
        }
    }
    eprintln!(
        "bench_relocation: {moves} moves, {sent} sent, {counted} processed, {} send errors",
        failed.load(Ordering::Relaxed)
    );
    for (metric, q) in [("p50", 0.5), ("p99", 0.99)] {
        line(
            "relocation",
            &format!("duration_{metric}_ms"),
            ms(durations.value_at_quantile(q)),
            ms(rtts.value_at_quantile(q)),
        );
    }
    for (metric, q) in [("p50", 0.5), ("p99", 0.99)] {
        line(
            "relocation",
            &format!("pause_{metric}_ms"),
            ms(pauses.value_at_quantile(q)),
            ms(steady_gaps.value_at_quantile(q)),
        );
    }

    // Idle actors: created on a, then relocated to b, 32 at a time.
    progress::step(format!("{idle} idle actors created, then relocated"));
    let t = Instant::now();
    let mut refs = Vec::with_capacity(idle);
    for i in 0..idle {
        refs.push(
            a.create(Create::new(
                "counter",
                ActorId::new(format!("idle-{i}")).unwrap(),
            ))
            .await
            .unwrap(),
        );
    }
    let created = idle as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut pending = tokio::task::JoinSet::new();
    let mut moved = 0usize;
    for r in refs {
        if pending.len() >= IDLE_CONCURRENCY {
            pending.join_next().await.unwrap().unwrap();
            moved += 1;
        }
        let (a, to) = (a.clone(), b.node_rid().clone());
        pending.spawn(async move {
            a.relocate(&r, to).await.expect("idle relocation");
        });
    }
    while let Some(done) = pending.join_next().await {
        done.unwrap();
        moved += 1;
    }
    let rate = moved as f64 / t.elapsed().as_secs_f64();
    line("relocation", "idle_per_s", rate, created);

    // A Spot of `bound` counters, each bound to its own session on c, moved back and forth.
    progress::step(format!(
        "{spot_moves} moves of a Spot with {bound} bound sessions"
    ));
    let spot = zlink::actor::SpotSpec {
        name: "bench-bound".to_owned(),
        kind: zlink::actor::SpotKind::User(zlink::actor::UserMode::SpotWide),
    };
    let endpoint = c.endpoints().client.clone().expect("c's client endpoint");
    let mut members = Vec::with_capacity(bound);
    for i in 0..bound {
        let m = a
            .create(
                Create::new("counter", ActorId::new(format!("bound-{i}")).unwrap())
                    .in_spot(spot.clone()),
            )
            .await
            .unwrap();
        let client = NodeClient::connect(&endpoint, timeout).expect("client");
        let _: ActorRef = client
            .packet(&demo::session::Bind { actor: m.clone() })
            .await
            .expect("bind");
        members.push((client, m));
    }
    let mut last44 = hist();
    let mut relay_rtts = hist();
    let mut counts = vec![0u64; bound];
    let mut unobserved = 0usize;
    let (mut owner, mut other) = (&a, &b);
    for _ in 0..spot_moves {
        for (k, (client, m)) in members.iter().enumerate() {
            let t = Instant::now();
            counts[k] += 1;
            assert_eq!(
                relay_add(client, m, 1).await,
                counts[k],
                "a relay lost or doubled"
            );
            let _ = relay_rtts.record(t.elapsed().as_micros().max(1) as u64);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let sampler = sample_seals(c.clone(), stop.clone());
        owner
            .relocate_spot(&spot.name, other.node_rid().clone())
            .await
            .expect("spot relocation");
        // The 44s may still be on their way: wait for every seal to be released.
        let deadline = Instant::now() + timeout;
        while c.session_seals().seals > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        stop.store(true, Ordering::Release);
        let (peak, released) = tokio::task::spawn_blocking(move || sampler.join().unwrap())
            .await
            .unwrap();
        assert!(peak as usize <= bound, "{peak} seals for {bound} sessions");
        match released {
            Some(at) => {
                let _ = last44.record(at.duration_since(started).as_micros().max(1) as u64);
            }
            // the sampler was not scheduled while the seals were up
            None => unobserved += 1,
        }
        std::mem::swap(&mut owner, &mut other);
    }
    eprintln!(
        "bench_relocation: {spot_moves} Spot moves with {bound} bound sessions, {unobserved} with the seals unobserved"
    );
    for (metric, q) in [("p50", 0.5), ("p99", 0.99)] {
        line(
            "relocation",
            &format!("last44_{metric}_ms"),
            ms(last44.value_at_quantile(q)),
            ms(relay_rtts.value_at_quantile(q)),
        );
    }
    for (client, _) in members {
        client.close().await;
    }

    progress::step("shutdown");
    for n in [a, b, c] {
        n.shutdown(Duration::from_secs(1)).await;
    }
    progress::finish();
}
