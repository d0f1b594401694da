//! Session path benchmarks (issue 9): a ClientServer client → its session owner (node a) → the
//! bound actor on node b, and back, each against the raw libzmq two-hop path of the same shape
//! measured **in the same run** (`bench_mesh --only raw_2hop`, run as a child process between
//! the session runs). Prints JSON lines `{"bench","metric","value","baseline","ratio"}`, then
//! the raw lines it measured (`{"bench":"raw_2hop_…","metric","value"}`, no baseline).
//!
//! | line | path | baseline |
//! |---|---|---|
//! | `session_relay` `msgs_per_s_1_client` | one client sends one-way `RelaySend` packets (147; one `MeshClient::send` per packet, `BENCH_RELAY_MANY=1`: each window handed over with one `MeshClient::send_many`) to node a's session app, whose handler relays each over the stored route (24) to a bound actor on b; counted at the actor: messages 2..=n over first → last arrival | `raw_2hop_pipeline` |
//! | `session_relay` `msgs_per_s_100_clients` | 100 clients (one task each, n/100 each), each bound to its own actor on b | `raw_2hop_pipeline_100` |
//! | `session_push` `msgs_per_s` | an actor on b pushes n messages with `ctx.push_raw` (36 → a's session owner → 148 → client); at the client, messages 2..=n | `raw_2hop_push` |
//! | `session_request` `p50_us` / `p99_us` | a `RelayRequest` packet (144) → handler → `BoundActor::forward`: a request (24) → `Echo` handler on b → reply → client; one outstanding, 1,000 warm-up round trips | `raw_2hop_echo` |
//!
//! Two nodes in this process (tokio multi-thread, 2 workers, plus each node's lane runtime and
//! mesh I/O thread), TCP loopback, 64-byte actor payloads (the packet adds the demo app's
//! `RelaySend`/`RelayRequest` fields: actor id, key). Session app: `demo::sessions()` (the one
//! `zlink-node` hosts); `BENCH_SESSION_APP=lean` uses raw packet handlers instead (keys 200,
//! 201: the payload is the actor message, relayed to the session's one binding; lines named
//! `…_lean`), i.e. what an application with one actor per session would write.
//!
//! Rounds: 5 (`BENCH_ROUNDS=<n>` to change; throughputs: median of the rounds' rates; latency:
//! median of the rounds' percentiles), each round first the raw child (which itself reports
//! medians of 3 runs), then the session lines: a run's figures vary ±20 % on the 2-core VMs,
//! and five paired rounds keep one slow round from setting the median. Args: `[msgs] [rtt_samples]` (default 200,000 and 10,000; the raw child
//! gets the same); `BENCH_QUICK=1`: 20,000 and 2,000. `BENCH_MESH_BIN` overrides the raw child
//! (default: `bench_mesh` next to this executable: `cargo build --release -p zlink-mesh
//! --example bench_mesh`). `BENCH_SESSION_ONLY=<letters>` picks session lines (`r` relay 1
//! client, `m` relay 100 clients, `p` push, `q` request; raw child still runs every line);
//! `BENCH_NO_RAW=1` skips the raw child (no baselines; for profiling); `BENCH_SPIN=<yields>`
//! sets both nodes' `MeshConfig::io_spin_yields` (default 100); `BENCH_INLINE_BUDGET_US=<µs>`
//! sets both nodes' `NodeOptions::inline_delivery_budget` (0: no inline delivery);
//! `BENCH_RELAY_WINDOW` below.
//! `BENCH_SAMPLES=FILE` appends the request round trips (and the raw child's echo ones, as the
//! baseline) to FILE for `bench_plot`'s histograms. Progress on stderr.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use zlink::actor::{ActorId, ActorRef, ActorTypeBuilder, Handled, HandlerError, Message};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node, NodeOptions};
use zlink::session::{PacketTurn, SessionHandlers};
use zlink::store::MemoryStore;
use zlink_apps::demo::{self, Echo};
use zlink_mesh::{DispatchKey, MeshConfig, MeshName, MeshSecret, NodeRid};

#[path = "support/progress.rs"]
mod progress;
#[path = "support/samples.rs"]
mod samples;
/// The allocator `zlink-node` links, so the session path is measured as it ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PAYLOAD: usize = 64;
/// Rounds by default (`BENCH_ROUNDS` overrides).
const ROUNDS: usize = 5;
const WARM_UP: usize = 1000;
const MANY_CLIENTS: usize = 100;
/// One-way relay packets a client sends before it waits for the previous window's barrier
/// (see `relay`); default: no barriers (the session lane applies backpressure, nothing is
/// dropped); `BENCH_RELAY_WINDOW=<packets>` sets one.
fn window() -> usize {
    std::env::var("BENCH_RELAY_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(usize::MAX, |w: usize| if w == 0 { usize::MAX } else { w })
}
/// `BENCH_RELAY_MANY=1`: the relay clients hand each window over with one
/// `MeshClient::send_many` instead of one `MeshClient::send` per packet (the default, like the
/// raw baseline's one `zmq_send` per message; the same records on the wire, only the client's
/// cost per packet differs).
fn single_sends() -> bool {
    !std::env::var("BENCH_RELAY_MANY").is_ok_and(|v| v == "1")
}
const TIMEOUT: Duration = Duration::from_secs(10);
/// Lean app: one-way relay packet key.
const LEAN_SEND: DispatchKey = DispatchKey::new(200);
/// Lean app: request relay packet key.
const LEAN_REQUEST: DispatchKey = DispatchKey::new(201);

// ---------------------------------------------------------------- the bench actor type

/// One-way message counted at the actor (its bytes are the 64 B payload).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Sink(#[serde(with = "serde_bytes")] Vec<u8>);
impl Message for Sink {
    const KEY: DispatchKey = DispatchKey::new(40);
    type Reply = ();
}

/// Asks the actor to push `n` 64 B messages to its bound session.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PushMany {
    n: u64,
}
impl Message for PushMany {
    const KEY: DispatchKey = DispatchKey::new(41);
    type Reply = ();
}

/// Key of the pushes `PushMany` sends.
const PUSHED: DispatchKey = DispatchKey::new(42);

/// Arrivals at the sink actors of one run: count and first/last arrival (ns since `epoch()`).
/// Like the raw pipeline's receiver, it reads the clock at the first arrival and at the
/// expected last one only (an arrival costs one atomic add otherwise).
struct Meter {
    count: AtomicU64,
    /// Arrivals expected in this run.
    expected: AtomicU64,
    first: AtomicU64,
    last: AtomicU64,
}

static METER: Meter = Meter {
    count: AtomicU64::new(0),
    expected: AtomicU64::new(0),
    first: AtomicU64::new(0),
    last: AtomicU64::new(0),
};

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Meter {
    fn reset(&self, expected: u64) {
        self.expected.store(expected, Ordering::SeqCst);
        self.count.store(0, Ordering::SeqCst);
        self.first.store(0, Ordering::SeqCst);
        self.last.store(0, Ordering::SeqCst);
    }

    fn arrive(&self) {
        let c = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        if c == 1 {
            self.first.store(now_ns(), Ordering::Release);
        }
        if c == self.expected.load(Ordering::Acquire) {
            self.last.store(now_ns(), Ordering::Release);
        }
    }

    /// Waits until the expected arrivals arrived (or 5 s without progress: then the last
    /// arrival is taken as when the count was last seen to change); the rate over arrivals
    /// 2..=count.
    async fn wait(&self) -> f64 {
        let n = self.expected.load(Ordering::Acquire);
        let mut seen = 0;
        let mut since = Instant::now();
        loop {
            let c = self.count.load(Ordering::Acquire);
            if c >= n {
                break;
            }
            if c != seen {
                seen = c;
                since = Instant::now();
            } else if since.elapsed() > Duration::from_secs(5) {
                progress::note(format_args!(
                    "bench_session: only {c} of {n} messages arrived at the actors"
                ));
                let at = u64::try_from(since.duration_since(epoch()).as_nanos());
                self.last.store(at.unwrap_or(u64::MAX), Ordering::Release);
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let c = self.count.load(Ordering::Acquire);
        let span = self
            .last
            .load(Ordering::Acquire)
            .saturating_sub(self.first.load(Ordering::Acquire));
        if c < 2 || span == 0 {
            return 0.0;
        }
        (c - 1) as f64 / (span as f64 / 1e9)
    }
}

/// The demo types plus `bench`: `Sink` (counted), `PushMany`, `Echo`.
fn registry() -> zlink::actor::ActorRegistry {
    let mut r = demo::registry().unwrap();
    r.register(
        ActorTypeBuilder::new("bench", |_info, _init| Ok(()))
            .handle(|_: &mut (), _ctx, _: Sink| {
                METER.arrive();
                Handled::ok(())
            })
            .handle(|_: &mut (), _ctx, msg: Echo| Handled::ok(msg))
            .handle(|_: &mut (), ctx, PushMany { n }| {
                let ctx = ctx.clone();
                Handled::later(async move {
                    let payload = Bytes::from(vec![0x5a; PAYLOAD]);
                    for _ in 0..n {
                        ctx.push_raw(PUSHED, payload.clone())
                            .await
                            .map_err(|e| HandlerError::new(e.to_string()))?;
                    }
                    Ok(())
                })
            })
            .build()
            .unwrap(),
    )
    .unwrap();
    r
}

/// The session app: the demo app, plus the lean raw handlers (payload = the actor message,
/// relayed to the session's one binding).
fn sessions() -> SessionHandlers {
    demo::sessions()
        // A one-way relay admitted at once finishes without a future (`send_turn`).
        .packet_turn(LEAN_SEND, |s, payload| match s.actors().bound().pop() {
            Some(b) => b.send_turn(Sink::KEY, payload, Bytes::new()),
            None => PacketTurn::Done(Err(HandlerError::new("unbound").into())),
        })
        .packet_raw(LEAN_REQUEST, |s, payload| {
            Box::pin(async move {
                let b = s
                    .actors()
                    .bound()
                    .pop()
                    .ok_or_else(|| HandlerError::new("unbound"))?;
                Ok(b.relay(Echo::KEY, payload, Some(TIMEOUT))
                    .await?
                    .unwrap_or_default())
            })
        })
}

// ---------------------------------------------------------------- nodes and clients

async fn start(name: &str, peers: Vec<zlink_mesh::PeerAddress>, store: Arc<MemoryStore>) -> Node {
    let mut mc = MeshConfig::new(MeshName::new("bench").unwrap(), NodeRid::new(name).unwrap());
    mc.secret = Some(MeshSecret::new(b"zlink-bench-secret-0123456789abcdef".to_vec()).unwrap());
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    if let Some(spin) = std::env::var("BENCH_SPIN")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        mc.io_spin_yields = spin;
    }
    let mut o = NodeOptions::new(mc, store, registry())
        .with_sessions(sessions())
        .unwrap()
        .with_client_access(zlink::node::access::ClientAccess::open());
    o.peers = peers;
    if let Some(us) = std::env::var("BENCH_INLINE_BUDGET_US")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        o.inline_delivery_budget = Duration::from_micros(us);
    }
    Node::start(o).await.unwrap()
}

fn enc<T: Serialize>(v: &T) -> Bytes {
    Bytes::from(rmp_serde::to_vec_named(v).unwrap())
}

/// A client of node a bound (demo `Bind` packet) to a new `bench` actor on node b.
struct Bound {
    client: NodeClient,
    actor: ActorRef,
}

async fn bound_client(a: &Node, b: &Node, id: &str) -> Bound {
    let actor = a
        .create(Create::new("bench", ActorId::new(id).unwrap()).on(b.node_rid().clone()))
        .await
        .unwrap();
    let client = NodeClient::connect(a.endpoints().client.as_deref().unwrap(), TIMEOUT).unwrap();
    let got = client
        .packet(&demo::session::Bind {
            actor: actor.clone(),
        })
        .await
        .unwrap();
    assert_eq!(got, actor);
    Bound { client, actor }
}

/// The packet (key, payload) that relays `msg` one-way (`RelaySend`) or as a request
/// (`RelayRequest`) to `actor` through the session app.
fn relay_packet<M: Message>(
    lean: bool,
    actor: &ActorRef,
    msg: &M,
    request: bool,
) -> (DispatchKey, Bytes) {
    let inner = rmp_serde::to_vec_named(msg).unwrap();
    match (lean, request) {
        (true, false) => (LEAN_SEND, Bytes::from(inner)),
        (true, true) => (LEAN_REQUEST, Bytes::from(inner)),
        (false, false) => (
            demo::session::RelaySend::KEY,
            enc(&demo::session::RelaySend {
                actor_id: actor.id().to_string(),
                key: M::KEY.get(),
                payload: inner,
            }),
        ),
        (false, true) => (
            demo::session::RelayRequest::KEY,
            enc(&demo::session::RelayRequest {
                actor_id: actor.id().to_string(),
                key: M::KEY.get(),
                payload: inner,
                timeout_ms: 10_000,
            }),
        ),
    }
}

/// `session_relay`: every client sends `per` one-way relay packets (one task each); the rate
/// at the actors.
async fn relay(clients: &[Arc<Bound>], lean: bool, per: usize) -> f64 {
    METER.reset((per * clients.len()) as u64);
    let tasks: Vec<_> = clients
        .iter()
        .map(|c| {
            let c = c.clone();
            tokio::spawn(async move {
                let (key, p) = relay_packet(lean, &c.actor, &Sink(vec![0x5a; PAYLOAD]), false);
                let mc = c.client.mesh_client();
                let mut barrier: Option<tokio::task::JoinHandle<()>> = None;
                let mut sent = 0;
                let window = window();
                let single = single_sends();
                while sent < per {
                    let w = window.min(per - sent);
                    if single {
                        for _ in 0..w {
                            mc.send(key, p.clone()).await.unwrap();
                        }
                    } else {
                        mc.send_many(key, std::iter::repeat_n(p.clone(), w))
                            .await
                            .unwrap();
                    }
                    sent += w;
                    // Wait for the previous window's barrier, then put one behind this window:
                    // at most two windows queued on the session lane.
                    if let Some(b) = barrier.take() {
                        b.await.unwrap();
                    }
                    if window == usize::MAX {
                        break;
                    }
                    let c = c.clone();
                    barrier = Some(tokio::spawn(async move {
                        c.client
                            .packet(&demo::session::Bound)
                            .await
                            .expect("barrier packet");
                    }));
                }
                if let Some(b) = barrier {
                    b.await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    METER.wait().await
}

/// `session_push`: the client's actor pushes `n`; the rate at the client over pushes 2..=n.
async fn push(c: &Bound, n: usize) -> f64 {
    // The trigger is one packet: always the demo app's `RelaySend` (the lean handler relays
    // `Sink` only).
    let (key, p) = relay_packet(false, &c.actor, &PushMany { n: n as u64 }, false);
    c.client.mesh_client().send(key, p).await.unwrap();
    let mut first = None;
    for i in 0..n {
        let push = c
            .client
            .recv_push_timeout(TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("push {i} of {n} did not arrive"));
        assert_eq!(push.key, PUSHED);
        if i == 0 {
            first = Some(Instant::now());
        }
    }
    (n - 1) as f64 / first.unwrap().elapsed().as_secs_f64()
}

/// `session_request`: `n` round trips (µs) after `WARM_UP`.
async fn request(c: &Bound, lean: bool, n: usize) -> Vec<f64> {
    let (key, p) = relay_packet(lean, &c.actor, &Echo(vec![0x5a; PAYLOAD]), true);
    let mc = c.client.mesh_client();
    let mut v = Vec::with_capacity(n);
    for i in 0..n + WARM_UP {
        let t = Instant::now();
        let r = mc.request(key, p.clone(), TIMEOUT).await.unwrap();
        if i >= WARM_UP {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        if i == 0 {
            assert!(r.payload.is_some_and(|b| !b.is_empty()), "empty echo");
        }
    }
    v
}

// ---------------------------------------------------------------- raw baselines, output

/// Runs the raw two-hop baselines (`bench_mesh --only raw_2hop n rtt_n`) in a child process;
/// their `(bench/metric, value)` pairs.
fn raw_child(n: usize, rtt_n: usize) -> Vec<(String, f64)> {
    let bin = std::env::var_os("BENCH_MESH_BIN").map_or_else(
        || {
            std::env::current_exe()
                .unwrap()
                .with_file_name("bench_mesh")
        },
        std::path::PathBuf::from,
    );
    let out = Command::new(&bin)
        .args(["--only", "raw_2hop", &n.to_string(), &rtt_n.to_string()])
        // Its echo samples (BENCH_SAMPLES) are the baseline of session_request.
        .env("BENCH_SAMPLES_BENCH", "session_request")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (build it: cargo build --release -p zlink-mesh --example bench_mesh)",
                bin.display()
            )
        });
    assert!(
        out.status.success(),
        "raw child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            Some((
                format!("{}/{}", v["bench"].as_str()?, v["metric"].as_str()?),
                v["value"].as_f64()?,
            ))
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// Values by name, over the rounds.
#[derive(Default)]
struct Series(Vec<(String, Vec<f64>)>);

impl Series {
    fn add(&mut self, name: &str, v: f64) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, vs)) => vs.push(v),
            None => self.0.push((name.to_owned(), vec![v])),
        }
    }

    fn median(&mut self, name: &str) -> Option<f64> {
        self.0
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, v)| median(v))
    }
}

fn line(bench: &str, metric: &str, value: f64, baseline: Option<f64>) {
    let b = serde_json::Value::from(bench);
    let m = serde_json::Value::from(metric);
    match baseline {
        Some(base) if base > 0.0 => progress::out(format_args!(
            "{{\"bench\":{b},\"metric\":{m},\"value\":{value:.1},\"baseline\":{base:.1},\"ratio\":{:.3}}}",
            value / base
        )),
        _ => progress::out(format_args!(
            "{{\"bench\":{b},\"metric\":{m},\"value\":{value:.1}}}"
        )),
    }
}

fn main() {
    epoch();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().collect();
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let n: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if quick { 20_000 } else { 200_000 });
    let rtt_n: usize = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if quick { 2_000 } else { 10_000 });
    let lean = std::env::var("BENCH_SESSION_APP").is_ok_and(|v| v == "lean");
    let only = std::env::var("BENCH_SESSION_ONLY").unwrap_or_else(|_| "rmpq".into());
    let no_raw = std::env::var_os("BENCH_NO_RAW").is_some();
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(ROUNDS);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut s = Series::default();
    let parts = u64::from(!no_raw)
        + ["r", "m", "p", "q"]
            .iter()
            .filter(|p| only.contains(*p))
            .count() as u64;
    progress::start("bench_session", 1 + rounds as u64 * parts);
    progress::step("starting two nodes and binding the clients");
    rt.block_on(async {
        let store = Arc::new(MemoryStore::new());
        let b = start("b", vec![], store.clone()).await;
        let a = start("a", vec![b.address()], store).await;
        assert!(a.wait_peers(TIMEOUT).await.is_empty(), "peer b down");
        let one = Arc::new(bound_client(&a, &b, "bench-0").await);
        let many: Vec<Arc<Bound>> = if only.contains('m') {
            let mut v = Vec::with_capacity(MANY_CLIENTS);
            for i in 0..MANY_CLIENTS {
                v.push(Arc::new(
                    bound_client(&a, &b, &format!("bench-many-{i}")).await,
                ));
            }
            v
        } else {
            Vec::new()
        };
        for round in 0..rounds {
            let round_no = round + 1;
            if !no_raw {
                progress::step(format!(
                    "round {round_no}/{rounds}: raw libzmq 2-hop baselines (bench_mesh child)"
                ));
                for (name, v) in tokio::task::spawn_blocking(move || raw_child(n, rtt_n))
                    .await
                    .unwrap()
                {
                    s.add(&name, v);
                }
            }
            if only.contains('r') {
                progress::step(format!("round {round_no}/{rounds}: relay, 1 client ({n})"));
                s.add("relay1", relay(std::slice::from_ref(&one), lean, n).await);
            }
            if only.contains('m') {
                progress::step(format!(
                    "round {round_no}/{rounds}: relay, {MANY_CLIENTS} clients ({n})"
                ));
                s.add("relay100", relay(&many, lean, n / MANY_CLIENTS).await);
            }
            if only.contains('p') {
                progress::step(format!("round {round_no}/{rounds}: push ({n})"));
                s.add("push", push(&one, n).await);
            }
            if only.contains('q') {
                progress::step(format!("round {round_no}/{rounds}: requests ({rtt_n})"));
                let mut v = request(&one, lean, rtt_n).await;
                samples::write("session_request", samples::ZLINK, &v);
                s.add("p50", percentile(&mut v, 0.5));
                s.add("p99", percentile(&mut v, 0.99));
            }
        }
        for (name, node) in [("a", &a), ("b", &b)] {
            let c = node.mesh().counters();
            let drops: Vec<_> = zlink_mesh::DropReason::ALL
                .iter()
                .filter(|r| c.dropped(**r) > 0)
                .map(|r| format!("{r:?}={}", c.dropped(*r)))
                .collect();
            if !drops.is_empty() {
                progress::note(format_args!(
                    "bench_session: mesh drops at {name}: {}",
                    drops.join(" ")
                ));
            }
            let w = node.inbound_backlogs();
            if w.actors.waited + w.sessions.waited + w.pushes.waited > 0 {
                progress::note(format_args!(
                    "bench_session: inbound work that waited at {name}: for actor lanes {} (queues opened {}), for session lanes {} (opened {}), pushes for client credit {} (opened {}, refused {})",
                    w.actors.waited,
                    w.actors.opened,
                    w.sessions.waited,
                    w.sessions.opened,
                    w.pushes.waited,
                    w.pushes.opened,
                    w.pushes.refused
                ));
            }
        }
        a.shutdown(Duration::from_secs(1)).await;
        b.shutdown(Duration::from_secs(1)).await;
    });
    let suffix = if lean { "_lean" } else { "" };
    let lines = [
        (
            "relay1",
            "session_relay",
            "msgs_per_s_1_client",
            "raw_2hop_pipeline/msgs_per_s",
        ),
        (
            "relay100",
            "session_relay",
            "msgs_per_s_100_clients",
            "raw_2hop_pipeline_100/msgs_per_s",
        ),
        (
            "push",
            "session_push",
            "msgs_per_s",
            "raw_2hop_push/msgs_per_s",
        ),
        ("p50", "session_request", "p50_us", "raw_2hop_echo/p50_us"),
        ("p99", "session_request", "p99_us", "raw_2hop_echo/p99_us"),
    ];
    for (key, bench, metric, base) in lines {
        if let Some(v) = s.median(key) {
            line(&format!("{bench}{suffix}"), metric, v, s.median(base));
        }
    }
    for (_, _, _, base) in lines {
        if let Some(v) = s.median(base) {
            let (bench, metric) = base.split_once('/').unwrap();
            line(bench, metric, v, None);
        }
    }
    progress::finish();
}
