//! The demo workload (run by `scripts/demo` against a mesh started by `scripts/mesh-up`).
//!
//! Connects one ClientServer client to every node, creates actors on different nodes, runs
//! cross-node requests and sends, checks every count and the SB-12 error kinds, and prints a
//! summary with latencies. Exit code 0 only when every check passed.
//!
//! Usage: `demo_workload [ENDPOINT,...]` (default: `$ZLINK_CLIENT_ENDPOINTS`).

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

// node/tests/node_process.rs includes both drivers, so this file twice.
#[allow(clippy::duplicate_mod)]
#[path = "support/progress.rs"]
mod progress;

/// A line of the driver's output on stdout (through the progress, which may show a bar).
macro_rules! say {
    ($($t:tt)*) => {
        progress::out(format_args!($($t)*))
    };
}
use hdrhistogram::Histogram;
use zlink::actor::{ActorRef, ErrorKind, SpotKind, SpotSpec, UserMode};
use zlink::node::client::{NodeClient, Placement};
use zlink_apps::demo::{Add, CallEcho, Checked, Echo, Enter, Fail, Get, Next, Say};

const ROUNDS: u64 = 200;
const SENDS: u64 = 2_000;

struct Lat {
    name: &'static str,
    h: Histogram<u64>,
}

impl Lat {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            h: Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds"),
        }
    }
    fn record(&mut self, since: Instant) {
        let us = since.elapsed().as_micros().max(1) as u64;
        let _ = self.h.record(us.min(60_000_000));
    }
    fn line(&self) -> String {
        format!(
            "  {:<34} n={:<6} p50={:>6} µs  p99={:>6} µs  max={:>6} µs",
            self.name,
            self.h.len(),
            self.h.value_at_quantile(0.50),
            self.h.value_at_quantile(0.99),
            self.h.max()
        )
    }
}

fn expect_kind<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, zlink::node::client::ClientError>,
    kind: ErrorKind,
) -> anyhow::Result<()> {
    match r {
        Err(e) if e.kind() == kind => {
            say!("  ok   {what}: {kind:?} ({e})");
            Ok(())
        }
        other => bail!("{what}: expected {kind:?}, got {other:?}"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let endpoints = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ZLINK_CLIENT_ENDPOINTS").ok())
        .context("give the client endpoints (argument or ZLINK_CLIENT_ENDPOINTS)")?;
    let endpoints: Vec<&str> = endpoints.split(',').filter(|s| !s.is_empty()).collect();
    progress::start("demo_workload", STEPS);
    let result = run(&endpoints).await;
    progress::finish();
    result
}

/// The workload's steps, for the progress.
const STEPS: u64 = 8;

/// The whole workload against the nodes serving clients at `endpoints` (also run by
/// `node/tests/node_process.rs` on a mesh of `zlink-node` processes); `Err` on the first failed check.
pub async fn run(endpoints: &[&str]) -> anyhow::Result<()> {
    ensure!(endpoints.len() >= 2, "the demo needs at least 2 nodes");
    // With 2 nodes, "the third node" is the first again.
    let n = endpoints.len();
    let started = Instant::now();

    // One client per node; learn each node's name and wait until it sees all its peers.
    progress::step("connecting a client to every node");
    let mut clients = Vec::new();
    let mut names = Vec::new();
    for ep in endpoints {
        let c = NodeClient::connect(ep, Duration::from_secs(5))?;
        let info = c
            .info()
            .await
            .with_context(|| format!("node info from {ep}"))?;
        names.push(info.node.clone());
        clients.push(c);
    }
    for (c, name) in clients.iter().zip(&names) {
        let mut tries = 0;
        loop {
            let info = c.info().await?;
            if info.peers_up.len() + 1 >= endpoints.len() {
                break;
            }
            tries += 1;
            ensure!(tries < 100, "{name} sees only peers {:?}", info.peers_up);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    say!("demo: {} nodes: {}", names.len(), names.join(", "));

    say!("checks:");
    progress::step("creating actors on every node");
    // SB-12: no factory for the type → NotFound.
    expect_kind(
        "create an unknown actor type",
        clients[0]
            .create("no-such-type", "ghost", Placement::default())
            .await,
        ErrorKind::NotFound,
    )?;

    // Actors on different nodes, all created through node 1's client (cross-node activation).
    let mut counters: Vec<ActorRef> = Vec::new();
    let mut echoes: Vec<ActorRef> = Vec::new();
    let mut create = Lat::new("create (via node 1, any owner)");
    let run = std::process::id();
    for name in &names {
        let t = Instant::now();
        counters.push(
            clients[0]
                .create(
                    "counter",
                    &format!("counter-{name}-{run}"),
                    Placement::on(name),
                )
                .await
                .with_context(|| format!("create counter on {name}"))?,
        );
        create.record(t);
        let t = Instant::now();
        echoes.push(
            clients[0]
                .create("echo", &format!("echo-{name}-{run}"), Placement::on(name))
                .await
                .with_context(|| format!("create echo on {name}"))?,
        );
        create.record(t);
    }
    for (r, name) in counters.iter().zip(&names) {
        ensure!(r.node().as_str() == name, "{r} not on {name}");
    }
    say!(
        "  ok   {} counters and {} echo actors on {} nodes",
        counters.len(),
        echoes.len(),
        names.len()
    );

    // get-or-create of an existing actor returns the same incarnation, from any node.
    let again = clients[1]
        .get_or_create("counter", counters[0].id().as_str(), Placement::default())
        .await?;
    ensure!(
        again == counters[0],
        "get-or-create returned {again}, expected {}",
        counters[0]
    );
    let looked_up = clients[2 % n].get(counters[1].id().as_str()).await?;
    ensure!(looked_up == counters[1], "get returned {looked_up}");
    say!("  ok   get-or-create and get return the Ready incarnation");

    // A room in a SpotWide User Spot on the last node.
    let lobby = SpotSpec {
        name: "lobby".into(),
        kind: SpotKind::User(UserMode::SpotWide),
    };
    let room_node = names.last().expect("nodes").clone();
    let room = clients[0]
        .create(
            "room",
            &format!("room-{run}"),
            Placement {
                node: Some(room_node.clone()),
                spot: Some(lobby),
                init: Vec::new(),
            },
        )
        .await?;

    // Cross-node requests: every client adds to every counter.
    progress::step(format!(
        "{} Add requests",
        ROUNDS * (clients.len() * counters.len()) as u64
    ));
    let mut add_local = Lat::new("counter Add, owner = client's node");
    let mut add_remote = Lat::new("counter Add, cross-node");
    let mut requests = 0u64;
    for _ in 0..ROUNDS {
        for (ci, c) in clients.iter().enumerate() {
            for (ki, k) in counters.iter().enumerate() {
                let t = Instant::now();
                c.request(k, &Add(1)).await?;
                requests += 1;
                if ci == ki {
                    add_local.record(t);
                } else {
                    add_remote.record(t);
                }
            }
        }
    }
    for k in &counters {
        let total = clients[0].request(k, &Get).await?;
        requests += 1;
        ensure!(total == ROUNDS * clients.len() as u64, "{k}: total {total}");
    }
    say!(
        "  ok   {} Add requests from {} clients: every counter = {}",
        ROUNDS * (clients.len() * counters.len()) as u64,
        clients.len(),
        ROUNDS * clients.len() as u64
    );

    // 64-byte echo requests across nodes.
    progress::step(format!("{} cross-node echo requests", ROUNDS * 3));
    let mut echo = Lat::new("echo 64 B, cross-node");
    let payload = vec![7u8; 64];
    for i in 0..ROUNDS as usize * 3 {
        let ci = i % clients.len();
        let ei = (ci + 1 + i % (echoes.len() - 1)) % echoes.len();
        let t = Instant::now();
        let Echo(back) = clients[ci]
            .request(&echoes[ei], &Echo(payload.clone()))
            .await?;
        echo.record(t);
        requests += 1;
        ensure!(back == payload, "echo payload changed");
    }
    say!(
        "  ok   {} cross-node echo requests returned their payload",
        ROUNDS * 3
    );

    progress::step("a room calling actors on other nodes");
    // Room: players join from every node, talk, and the room calls an echo actor on another
    // node from inside its handler (actor → actor, cross-node).
    for (i, c) in clients.iter().enumerate() {
        let members = c
            .request(
                &room,
                &Enter {
                    player: format!("player-{i}"),
                },
            )
            .await?;
        ensure!(members == i as u64 + 1, "room members {members}");
        requests += 1;
    }
    let mut said = 0;
    for (i, c) in clients.iter().enumerate() {
        said = c
            .request(
                &room,
                &Say {
                    from: format!("player-{i}"),
                    text: "hello".into(),
                },
            )
            .await?;
        requests += 1;
    }
    ensure!(said == clients.len() as u64, "room said {said}");
    let mut relay = Lat::new("room → echo relay (actor → actor)");
    for i in 0..ROUNDS {
        let target = &echoes[(i as usize) % (echoes.len() - 1)];
        let t = Instant::now();
        let Echo(back) = clients[0]
            .request(
                &room,
                &CallEcho {
                    target: target.clone(),
                    data: b"relay".to_vec(),
                    timeout_ms: 2_000,
                },
            )
            .await?;
        relay.record(t);
        requests += 1;
        ensure!(back == b"relay", "relay reply");
    }
    say!(
        "  ok   room on {room_node}: {} members, {said} messages, {ROUNDS} actor→actor relays",
        clients.len()
    );
    expect_kind(
        "a stranger speaks in the room (request handler error, EG-15)",
        clients[1]
            .request(
                &room,
                &Say {
                    from: "stranger".into(),
                    text: "hi".into(),
                },
            )
            .await,
        ErrorKind::Internal,
    )?;

    progress::step(format!("{SENDS} one-way sends"));
    // One-way sends from node 2's client to a `sequence` actor on node 3 (node 1 with 2 nodes),
    // then a request reads it: the actor counts every number that did not follow its
    // predecessor, so a reordering shows (a sum would not).
    let sequence = clients[0]
        .create(
            "sequence",
            &format!("sequence-{run}"),
            Placement::on(&names[2 % n]),
        )
        .await?;
    let t = Instant::now();
    for i in 0..SENDS {
        clients[1].send(&sequence, &Next(i)).await?;
    }
    let (next, out_of_order) = clients[1].request(&sequence, &Checked).await?;
    let send_secs = t.elapsed().as_secs_f64();
    ensure!(next == SENDS, "sends delivered up to {next} of {SENDS}");
    ensure!(
        out_of_order == 0,
        "{out_of_order} of {SENDS} sends arrived out of order"
    );
    say!(
        "  ok   {SENDS} one-way sends delivered in order ({:.0} msg/s incl. the final request)",
        SENDS as f64 / send_secs
    );

    progress::step("destroy, re-create and error replies");
    // Destroy + re-create: a new ObjectGeneration; the old ref gets InvalidOperation (SB-4.1).
    let old = counters[1].clone();
    clients[0].destroy(&old).await?;
    expect_kind(
        "call a destroyed incarnation",
        clients[0].request(&old, &Get).await,
        ErrorKind::NotFound,
    )?;
    let new = clients[2 % n]
        .create(
            "counter",
            old.id().as_str(),
            Placement::on(old.node().as_str()),
        )
        .await?;
    ensure!(
        new.object_generation() > old.object_generation(),
        "re-created {new} after {old}"
    );
    say!(
        "  ok   destroy + re-create: incarnation {} -> {}",
        old.object_generation(),
        new.object_generation()
    );
    expect_kind(
        "call the old incarnation after re-create",
        clients[0].request(&old, &Get).await,
        ErrorKind::InvalidOperation,
    )?;
    ensure!(
        clients[1].request(&new, &Get).await? == 0,
        "new incarnation starts at 0"
    );

    // A request handler error becomes an error reply (EG-15).
    let failing = clients[0]
        .create(
            "failing",
            &format!("failing-{run}"),
            Placement::on(&names[1]),
        )
        .await?;
    expect_kind(
        "request to a failing handler",
        clients[2 % n].request(&failing, &Fail).await,
        ErrorKind::Internal,
    )?;
    // create twice → InvalidOperation.
    expect_kind(
        "create an existing actor",
        clients[1]
            .create("failing", failing.id().as_str(), Placement::default())
            .await,
        ErrorKind::InvalidOperation,
    )?;

    // Clean up so the store holds nothing of this run.
    progress::step("cleaning up");
    for r in counters
        .iter()
        .skip(2)
        .chain([&counters[0], &new])
        .chain(&echoes)
        .chain([&room, &failing, &sequence])
    {
        clients[0].destroy(r).await?;
    }

    let mut infos = Vec::new();
    for c in &clients {
        infos.push(c.info().await?);
    }
    say!("summary:");
    say!(
        "  nodes {}, actors created {}, requests {}, one-way sends {}, elapsed {:.2} s",
        names.len(),
        counters.len() + echoes.len() + 3,
        requests,
        SENDS,
        started.elapsed().as_secs_f64()
    );
    for l in [&create, &add_local, &add_remote, &echo, &relay] {
        say!("{}", l.line());
    }
    for i in &infos {
        say!(
            "  {} (generation {}): peers up {:?}, actors now {}",
            i.node,
            i.generation,
            i.peers_up,
            i.local_actors
        );
    }
    for c in clients {
        c.close().await;
    }
    say!("demo: OK");
    Ok(())
}
