//! Live relocation under load between three `zlink-node` processes, from outside (issue 27,
//! "Tests: under load, real processes"): 102 clients (34 per node, each its own connection
//! and session) each bind a `tally` actor of their own (an actor has one bound session, SB-6)
//! and send it, without pause, numbered marks — three one-way relays then one relayed
//! request — while the operator relocates 24 of the actors round the three nodes, five times
//! each, 120 relocations (`RELOCATE`, operator op 0xFFFF000B): each mover leaves its session's
//! node, comes back to it and leaves again. Between them, 4 SpotWide Spots of 6 of the actors
//! move whole round the nodes, 20 times (`RELOCATE_SPOT`). A `tally` counts per sender and notices every mark
//! that is not the next one (lost, doubled or reordered); its state travels with it (the
//! migration contract).
//!
//! Checked from the sequence numbers: every request's reply is the exact count of that
//! client's marks so far (nothing accepted before it lost or doubled, order kept), each
//! actor's final tally equals what every client sent (per client, in order, nothing out of
//! order), every request got exactly one terminal (no late or unknown reply at any client),
//! and no client connection was closed.
//!
//! One test in this file: it loads the machine with three nodes and 102 clients.

mod procs;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use procs::{TIMEOUT, operator, setup, start_all};
use tokio::sync::Notify;
use zlink::actor::{ActorRef, Message};
use zlink::actor::{SpotKind, SpotSpec, UserMode};
use zlink::node::client::{NodeClient, Placement};
use zlink::node::protocol::{RelocateActor, RelocateSpot};
use zlink_apps::demo::session::{Bind, RelayRequest, RelaySend};
use zlink_apps::demo::{Mark, Tallied, Tally};

const NODES: usize = 3;
const CLIENTS_PER_NODE: usize = 34;
/// The actors relocated one by one (the first ones).
const MOVERS: usize = 24;
const RELOCATIONS: usize = 120;
/// SpotWide Spots relocated whole, each of `SPOT_MEMBERS` actors (the next ones after the
/// movers); the actors after them stay where they were created.
const SPOTS: usize = 4;
const SPOT_MEMBERS: usize = 6;
/// Whole-Spot relocations: after every `RELOCATIONS / SPOT_RELOCATIONS` single ones, the next
/// Spot moves to the next node.
const SPOT_RELOCATIONS: usize = 20;
/// One-way relays per actor before each relayed request.
const SENDS_PER_REQUEST: u64 = 3;
/// Requests each actor answers between two of its relocations (so each one moves under
/// traffic).
const REQUESTS_BETWEEN_MOVES: u64 = 2;

/// What one client did: marks sent, requests answered, the largest gap between two answered
/// requests, the first failure.
#[derive(Debug, Default)]
struct ClientRun {
    sent: u64,
    largest_gap: Duration,
    requests: u64,
    failure: Option<String>,
}

/// Progress the relocation loop waits on: requests answered per actor.
struct Progress {
    answered: Vec<AtomicU64>,
    notify: Notify,
}

async fn client_loop(
    id: u32,
    client: Arc<NodeClient>,
    actor: ActorRef,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> ClientRun {
    let mut run = ClientRun::default();
    let mut last_answer: Option<Instant> = None;
    let a = id as usize;
    let actor_id = actor.id().to_string();
    let mark = |seq: u64| rmp_serde::to_vec_named(&Mark { from: id, seq }).unwrap();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..SENDS_PER_REQUEST {
            let seq = run.sent;
            if let Err(e) = client
                .packet_send(&RelaySend {
                    actor_id: actor_id.clone(),
                    key: Mark::KEY.get(),
                    payload: mark(seq),
                })
                .await
            {
                run.failure = Some(format!("client {id}: relay {seq} to {actor_id}: {e}"));
                return run;
            }
            run.sent += 1;
        }
        let seq = run.sent;
        let reply = client
            .packet(&RelayRequest {
                actor_id: actor_id.clone(),
                key: Mark::KEY.get(),
                payload: mark(seq),
                timeout_ms: 15_000,
            })
            .await;
        run.sent += 1;
        let counted = match reply {
            Ok(bytes) => rmp_serde::from_slice::<u64>(&bytes).unwrap(),
            Err(e) => {
                run.failure = Some(format!("client {id}: request {seq} to {actor_id}: {e}"));
                return run;
            }
        };
        // Every mark sent before this request was counted once, in order, and this one.
        if counted != seq + 1 {
            run.failure = Some(format!(
                "client {id}: {actor_id} counted {counted} marks, {} sent",
                seq + 1
            ));
            return run;
        }
        run.requests += 1;
        let now = Instant::now();
        if let Some(last) = last_answer {
            run.largest_gap = run.largest_gap.max(now - last);
        }
        last_answer = Some(now);
        progress.answered[a].fetch_add(1, Ordering::Relaxed);
        progress.notify.notify_waiters();
    }
    run
}

/// Waits until actor `a` answered at least `n` requests in total.
async fn wait_answered(progress: &Progress, a: usize, n: u64) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let notified = progress.notify.notified();
        if progress.answered[a].load(Ordering::Relaxed) >= n {
            return;
        }
        tokio::time::timeout_at(deadline.into(), notified)
            .await
            .unwrap_or_else(|_| panic!("actor {a} answered fewer than {n} requests in time"));
    }
}

// spec: SB-8.9, SB-14.21, SB-14.3, SB-1.3, SB-8.4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relocations_round_three_nodes_under_load_lose_and_double_nothing() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let specs = setup(dir.path(), NODES, "");
    let procs = start_all(&specs).await;
    let mut ops = Vec::new();
    for p in &procs {
        ops.push(operator(&p.spec.client).await);
    }
    // Each client's actor, created on the next node after the client's (so every binding
    // starts remote); `owner[a]` is the index of the node that owns actor `a`.
    let clients_n = NODES * CLIENTS_PER_NODE;
    let mut actors = Vec::new();
    let mut owner = Vec::new();
    let mut clients = Vec::new();
    // `spot_node[s]`: the node hosting Spot `band-s`.
    let mut spot_node: Vec<usize> = (0..SPOTS).map(|s| s % NODES).collect();
    let spot_of = |i: usize| {
        (MOVERS..MOVERS + SPOTS * SPOT_MEMBERS)
            .contains(&i)
            .then(|| (i - MOVERS) / SPOT_MEMBERS)
    };
    for i in 0..clients_n {
        let (on, placement) = match spot_of(i) {
            Some(s) => (
                spot_node[s],
                Placement {
                    node: Some(specs[spot_node[s]].name.clone()),
                    spot: Some(SpotSpec {
                        name: format!("band-{s}"),
                        kind: SpotKind::User(UserMode::SpotWide),
                    }),
                    ..Placement::default()
                },
            ),
            None => ((i + 1) % NODES, Placement::on(&specs[(i + 1) % NODES].name)),
        };
        let r = ops[on]
            .create("tally", &format!("tally-{i}"), placement)
            .await
            .unwrap();
        assert_eq!(r.node().as_str(), specs[on].name);
        let c = NodeClient::connect(&specs[i % NODES].client, TIMEOUT).unwrap();
        let bound: ActorRef = c.packet(&Bind { actor: r.clone() }).await.unwrap();
        assert_eq!(bound.id(), r.id());
        actors.push(r);
        owner.push(on);
        clients.push(Arc::new(c));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress {
        answered: (0..clients_n).map(|_| AtomicU64::new(0)).collect(),
        notify: Notify::new(),
    });
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            tokio::spawn(client_loop(
                u32::try_from(i).unwrap(),
                c.clone(),
                actors[i].clone(),
                stop.clone(),
                progress.clone(),
            ))
        })
        .collect();

    // Round the nodes: each mover in turn to the next node, once it has answered more
    // requests since its last move.
    let mut durations = Vec::new();
    let mut spot_durations = Vec::new();
    let mut relayed = 0u64;
    for k in 0..RELOCATIONS {
        let a = k % MOVERS;
        let seen = progress.answered[a].load(Ordering::Relaxed);
        wait_answered(&progress, a, seen + REQUESTS_BETWEEN_MOVES).await;
        let to = (owner[a] + 1) % NODES;
        let done = ops[owner[a]]
            .relocate(&RelocateActor {
                actor_id: actors[a].id().to_string(),
                to: specs[to].name.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("relocation {k} of tally-{a} to node{}: {e}", to + 1));
        assert_eq!(done.to, specs[to].name);
        assert_eq!(
            done.actor.object_generation(),
            actors[a].object_generation()
        );
        owner[a] = to;
        durations.push(done.duration_ms);
        relayed += done.relayed;
        // A whole Spot, once its members answered more requests since its last move.
        if (k + 1) % (RELOCATIONS / SPOT_RELOCATIONS) == 0 {
            let s = ((k + 1) / (RELOCATIONS / SPOT_RELOCATIONS) - 1) % SPOTS;
            let members: Vec<usize> = (0..clients_n).filter(|&i| spot_of(i) == Some(s)).collect();
            for &m in &members {
                let seen = progress.answered[m].load(Ordering::Relaxed);
                wait_answered(&progress, m, seen + REQUESTS_BETWEEN_MOVES).await;
            }
            let to = (spot_node[s] + 1) % NODES;
            let done = ops[spot_node[s]]
                .relocate_spot(&RelocateSpot {
                    spot: format!("band-{s}"),
                    to: specs[to].name.clone(),
                })
                .await
                .unwrap_or_else(|e| panic!("relocation of band-{s} to node{}: {e}", to + 1));
            assert_eq!(done.to, specs[to].name);
            assert_eq!(done.actors.len(), SPOT_MEMBERS);
            spot_node[s] = to;
            for &m in &members {
                owner[m] = to;
            }
            spot_durations.push(done.duration_ms);
            relayed += done.relayed;
        }
    }
    // Traffic after the last move too, then stop.
    for a in 0..MOVERS + SPOTS * SPOT_MEMBERS {
        let seen = progress.answered[a].load(Ordering::Relaxed);
        wait_answered(&progress, a, seen + REQUESTS_BETWEEN_MOVES).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut runs = Vec::new();
    for t in tasks {
        runs.push(tokio::time::timeout(TIMEOUT, t).await.unwrap().unwrap());
    }
    for r in &runs {
        assert_eq!(r.failure, None);
    }
    // No client connection was closed; no reply came twice or for nothing.
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(c.close_reason(), None, "client {i}");
        assert_eq!(
            c.mesh_client().counters().dropped_total(),
            0,
            "client {i}: {:?}",
            c.mesh_client().counters().drops()
        );
    }
    // Each actor's state: exactly what its client sent it, in order.
    let mut sent_total = 0u64;
    for (a, r) in runs.iter().enumerate() {
        let here = ops[owner[a]].get(&format!("tally-{a}")).await.unwrap();
        assert_eq!(here.node().as_str(), specs[owner[a]].name);
        let tally: Tally = ops[owner[a]].request(&here, &Tallied).await.unwrap();
        let i = u32::try_from(a).unwrap();
        assert_eq!(tally.out_of_order, 0, "tally-{a}");
        assert_eq!(tally.counted.get(&i), Some(&r.sent), "tally-{a}");
        assert_eq!(tally.next.get(&i), Some(&r.sent), "tally-{a}");
        assert_eq!(tally.counted.len(), 1, "tally-{a}");
        sent_total += r.sent;
    }
    // No session record was refused on any node (no relay, seal or route update turned away),
    // and what the old owners forwarded (Message Follow).
    let mut followed = 0;
    for op in &ops {
        let c = op.counters().await.unwrap();
        assert!(
            c.session_rejects.values().all(|n| *n == 0),
            "{}: {:?}",
            c.node,
            c.session_rejects
        );
        followed += c.message_follow.get("forwarded").copied().unwrap_or(0);
    }
    // Every relocation moved its actor (the sources' counters), none aborted or failed.
    let (mut committed, mut aborted, mut failed, mut target) = (0, 0, 0, 0);
    for op in &ops {
        let c = op.relocations().await.unwrap().counters;
        committed += c.committed;
        aborted += c.aborted;
        failed += c.failed;
        target += c.target;
    }
    let all = (RELOCATIONS + SPOT_RELOCATIONS) as u64;
    assert_eq!((committed, aborted, failed), (all, 0, 0));
    assert_eq!(target, all);
    durations.sort_unstable();
    // The pause: each client's largest gap between two answered requests, the movers' beside
    // the others' (same load, no relocation).
    let gaps = |rs: &[ClientRun]| {
        let mut g: Vec<u128> = rs.iter().map(|r| r.largest_gap.as_millis()).collect();
        g.sort_unstable();
        (g[g.len() / 2], g[g.len() - 1])
    };
    let moving = MOVERS + SPOTS * SPOT_MEMBERS;
    let (moved_p50, moved_max) = gaps(&runs[..moving]);
    let (still_p50, still_max) = gaps(&runs[moving..]);
    spot_durations.sort_unstable();
    eprintln!(
        "largest gap between two answered requests per client: movers p50 {moved_p50} ms, max \
         {moved_max} ms; others p50 {still_p50} ms, max {still_max} ms"
    );
    eprintln!(
        "{} clients; {RELOCATIONS} relocations of {MOVERS} actors (p50 {} ms, max {} ms), \
         {SPOT_RELOCATIONS} of {SPOTS} SpotWide Spots of {SPOT_MEMBERS} bound actors (p50 {} ms, \
         max {} ms); {sent_total} marks ({} requests) in {:.1} s; {relayed} records relayed by \
         sources, {followed} forwarded by old owners",
        runs.len(),
        durations[durations.len() / 2],
        durations[durations.len() - 1],
        spot_durations[spot_durations.len() / 2],
        spot_durations[spot_durations.len() - 1],
        runs.iter().map(|r| r.requests).sum::<u64>(),
        started.elapsed().as_secs_f64(),
    );
    drop(procs);
}
