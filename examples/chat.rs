//! The chat client driver (run by `scripts/demo` after `demo_workload`, against the same mesh).
//!
//! Logs players into two rooms whose actors live on different nodes (each player's session on
//! another node than its player actor, so relays, actor sends and pushes cross the mesh),
//! exchanges lines and checks that every member receives every line of its room and none of the
//! other, performs a duplicate login (the old client must get `Kicked`, then the close reason
//! `Replaced`), disconnects a client (the room's other members must see its `Presence`
//! `Offline`, and it stays a member), and prints the counts. With the operator credential it
//! also relocates both rooms and two players to other nodes and back while every player keeps
//! saying lines (live relocation, `RELOCATE`), and prints lines sent / processed / lost /
//! duplicated and the pause (the largest gap between two answered lines of a room). Exit code
//! 0 only when every check passed. Names carry a per-run tag, so it can run again on the same
//! mesh.
//!
//! Usage: `chat [ENDPOINT,...]` (default: `$ZLINK_CLIENT_ENDPOINTS`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

// node/tests/node_process.rs includes both drivers, so this file twice.
#[allow(clippy::duplicate_mod)]
#[path = "support/operator.rs"]
mod operator;
#[allow(clippy::duplicate_mod)]
#[path = "support/progress.rs"]
mod progress;

/// A line of the driver's output on stdout (through the progress, which may show a bar).
macro_rules! say {
    ($($t:tt)*) => {
        progress::out(format_args!($($t)*))
    };
}
use zlink::actor::Message;
use zlink::node::client::NodeClient;
use zlink::node::protocol::RelocateActor;
use zlink_apps::chat::{
    self, ChatLine, Kicked, LoggedIn, Login, Member, Presence, PresenceStatus, Say, Who,
};
use zlink_wire::DisconnectReason;

/// Players per room.
const PER_ROOM: usize = 3;
/// Lines each player says.
const LINES: usize = 5;
/// Bound on every wait for a push or a close.
const WAIT: Duration = Duration::from_secs(10);
/// Lines each room answers between two relocations (so each one moves under traffic).
const LINES_BETWEEN_MOVES: u64 = 5;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Got {
    Line(ChatLine),
    Presence(Presence),
    Kicked(Kicked),
    Other(u32),
}

fn decode(p: zlink_mesh::Push) -> anyhow::Result<Got> {
    let bytes = p.payload.unwrap_or_default();
    Ok(if p.key == ChatLine::KEY {
        Got::Line(rmp_serde::from_slice(&bytes)?)
    } else if p.key == Presence::KEY {
        Got::Presence(rmp_serde::from_slice(&bytes)?)
    } else if p.key == Kicked::KEY {
        Got::Kicked(rmp_serde::from_slice(&bytes)?)
    } else {
        Got::Other(p.key.get())
    })
}

/// One logged-in client and the pushes it received.
struct Player {
    name: String,
    room: String,
    node: usize,
    c: NodeClient,
    got: Vec<Got>,
    unread: VecDeque<Got>,
}

impl Player {
    async fn login(&mut self) -> anyhow::Result<LoggedIn> {
        self.c
            .packet(&Login {
                player: self.name.clone(),
                room: self.room.clone(),
            })
            .await
            .with_context(|| format!("login {} into {}", self.name, self.room))
    }

    /// Waits for the first push matching `pred` not yet taken (others stay unread).
    async fn expect(&mut self, what: &str, pred: impl Fn(&Got) -> bool) -> anyhow::Result<Got> {
        if let Some(i) = self.unread.iter().position(&pred) {
            return Ok(self.unread.remove(i).expect("index"));
        }
        loop {
            let Some(p) = self.c.recv_push_timeout(WAIT).await else {
                bail!("{}: no push {what} within {WAIT:?}", self.name);
            };
            let g = decode(p)?;
            self.got.push(g.clone());
            if pred(&g) {
                return Ok(g);
            }
            self.unread.push_back(g);
        }
    }

    fn lines(&self) -> impl Iterator<Item = &ChatLine> {
        self.got.iter().filter_map(|g| match g {
            Got::Line(l) => Some(l),
            _ => None,
        })
    }
}

fn ok(what: impl std::fmt::Display) {
    say!("  ok   {what}");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let endpoints = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ZLINK_CLIENT_ENDPOINTS").ok())
        .context("give the client endpoints (argument or ZLINK_CLIENT_ENDPOINTS)")?;
    let endpoints: Vec<String> = endpoints
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    progress::start("chat", STEPS);
    let credential = operator::from_env()?;
    let result = run(&endpoints, credential.as_deref()).await;
    progress::finish();
    result
}

/// The driver's steps, for the progress.
const STEPS: u64 = 7;

/// The whole chat driver against the nodes serving clients at `endpoints` (also run by
/// `node/tests/node_process.rs` on a mesh of `zlink-node` processes); `Err` on the first failed check.
///
/// The players use session packets only (the application's path); the first step reads each
/// node's `NODE_INFO`, which a node with the default client policy answers only to the
/// operator: with `credential` it is presented first.
pub async fn run(endpoints: &[String], credential: Option<&[u8]>) -> anyhow::Result<()> {
    ensure!(endpoints.len() >= 2, "the chat needs at least 2 nodes");
    let started = Instant::now();

    // Node names (the placement hash's domain), each node seeing all its peers.
    progress::step("waiting for every node to see its peers");
    let mut names = Vec::new();
    for ep in endpoints {
        let c = NodeClient::connect(ep, WAIT)?;
        if let Some(credential) = credential {
            c.authenticate(credential)
                .await
                .with_context(|| format!("operator credential at {ep}"))?;
        }
        let mut tries = 0;
        let info = loop {
            let info = c
                .info()
                .await
                .with_context(|| format!("node info from {ep}"))?;
            if info.peers_up.len() + 1 >= endpoints.len() {
                break info;
            }
            tries += 1;
            ensure!(
                tries < 100,
                "{} sees only peers {:?}",
                info.node,
                info.peers_up
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        ensure!(
            info.actor_types.iter().any(|t| t == chat::PLAYER_TYPE),
            "{} does not host the chat types",
            info.node
        );
        names.push(info.node);
        c.close().await;
    }
    let node_index = |name: &str| names.iter().position(|n| n == name);
    let home = |id: &str| -> anyhow::Result<usize> {
        let h = chat::home_node(id, &names).context("no nodes")?;
        node_index(&h).context("home node not among the endpoints")
    };
    say!("chat: {} nodes: {}", names.len(), names.join(", "));

    // Two rooms on different nodes; a per-run tag keeps names fresh on a reused mesh.
    let tag = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
            % 0xff_ffff
    );
    let mut rooms: Vec<String> = Vec::new();
    for base in [
        "lobby", "arena", "garden", "dock", "forge", "atrium", "cellar", "deck",
    ] {
        let name = format!("{base}-{tag}");
        let h = home(&chat::room_id(&name))?;
        if rooms
            .iter()
            .all(|r| home(&chat::room_id(r)).ok() != Some(h))
        {
            rooms.push(name);
        }
        if rooms.len() == 2 {
            break;
        }
    }
    ensure!(rooms.len() == 2, "no two room names on different nodes");

    // Players: each session on the node after its player's home node.
    progress::step("logging players into two rooms");
    let mut players: Vec<Player> = Vec::new();
    for (ri, room) in rooms.iter().enumerate() {
        for i in 0..PER_ROOM {
            let name = format!("p{ri}{i}-{tag}");
            let node = (home(&chat::player_id(&name))? + 1) % names.len();
            players.push(Player {
                name,
                room: room.clone(),
                node,
                c: NodeClient::connect(&endpoints[node], WAIT)?,
                got: Vec::new(),
                unread: VecDeque::new(),
            });
        }
    }

    say!("checks:");
    let mut cross_node = 0;
    let mut room_nodes = BTreeSet::new();
    // Where each player's and room's actor lives (the relocation step moves them).
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    for p in &mut players {
        let li = p.login().await?;
        owners.insert(chat::player_id(&p.name), li.player_node.clone());
        owners.insert(chat::room_id(&p.room), li.room_node.clone());
        ensure!(
            li.session_node == names[p.node],
            "{}: session on {}",
            p.name,
            li.session_node
        );
        ensure!(
            li.members.iter().any(|m| m.player == p.name && m.online),
            "{}: not among the members {:?}",
            p.name,
            li.members
        );
        if li.player_node != li.session_node {
            cross_node += 1;
        }
        room_nodes.insert((li.room.clone(), li.room_node.clone()));
    }
    ensure!(
        room_nodes.len() == 2
            && room_nodes
                .iter()
                .map(|(_, n)| n)
                .collect::<BTreeSet<_>>()
                .len()
                == 2,
        "rooms not on two nodes: {room_nodes:?}"
    );
    ok(format!(
        "{} logins into 2 rooms on {}; {cross_node} player actors on another node than their session",
        players.len(),
        room_nodes
            .iter()
            .map(|(r, n)| format!("{r}@{n}"))
            .collect::<Vec<_>>()
            .join(" and ")
    ));
    // Joined presence: member k of a room sees the PER_ROOM - 1 - k who came after it.
    let mut joined = 0;
    for (k, p) in players.iter_mut().enumerate() {
        let later: Vec<String> = (k % PER_ROOM + 1..PER_ROOM)
            .map(|j| format!("p{}{j}-{tag}", k / PER_ROOM))
            .collect();
        for who in later {
            let room = p.room.clone();
            p.expect("a Joined presence", |g| {
                matches!(g, Got::Presence(x) if x.room == room && x.player == who && x.status == PresenceStatus::Joined)
            })
            .await?;
            joined += 1;
        }
    }
    ok(format!("{joined} Joined presence pushes"));

    progress::step("every player says its lines");
    // Lines: every player says LINES lines; every member of the room must get all of them.
    let t = Instant::now();
    let mut said = 0u64;
    for round in 0..LINES {
        for p in &players {
            let r =
                p.c.packet(&Say {
                    text: format!("line {round} from {}", p.name),
                })
                .await
                .with_context(|| format!("{} says", p.name))?;
            ensure!(
                r.recipients as usize == PER_ROOM,
                "{}: line sent to {} members",
                p.name,
                r.recipients
            );
            said += 1;
        }
    }
    let mut delivered = 0u64;
    for k in 0..players.len() {
        let room = players[k].room.clone();
        let speakers: Vec<String> = players
            .iter()
            .filter(|q| q.room == room)
            .map(|q| q.name.clone())
            .collect();
        let p = &mut players[k];
        for round in 0..LINES {
            for s in &speakers {
                let text = format!("line {round} from {s}");
                p.expect(&format!("{text:?}"), |g| {
                    matches!(g, Got::Line(l) if l.room == room && &l.from == s && l.text == text)
                })
                .await?;
                delivered += 1;
            }
        }
        let foreign = p.lines().filter(|l| l.room != room).count();
        ensure!(foreign == 0, "{}: {foreign} lines of another room", p.name);
    }
    let expected = (players.len() * PER_ROOM * LINES) as u64;
    ensure!(
        delivered == expected,
        "delivered {delivered}, expected {expected}"
    );
    ok(format!(
        "{said} lines said, {delivered} delivered = every member got every line of its room, none of the other ({:?})",
        t.elapsed()
    ));

    progress::step("a duplicate login");
    // Duplicate login: the first player of room 0 logs in from another node.
    let old_node = players[0].node;
    let new_node = (old_node + 1) % names.len();
    let mut again = Player {
        name: players[0].name.clone(),
        room: players[0].room.clone(),
        node: new_node,
        c: NodeClient::connect(&endpoints[new_node], WAIT)?,
        got: Vec::new(),
        unread: VecDeque::new(),
    };
    let li = again.login().await?;
    ensure!(
        li.members.iter().filter(|m| m.online).count() == PER_ROOM,
        "members after the duplicate login: {:?}",
        li.members
    );
    let kicked = players[0]
        .expect("Kicked", |g| matches!(g, Got::Kicked(_)))
        .await?;
    let reason = tokio::time::timeout(WAIT, players[0].c.closed())
        .await
        .context("the replaced session was not closed")?;
    ensure!(
        reason == DisconnectReason::Replaced,
        "old session closed with {reason:?}"
    );
    ok(format!(
        "duplicate login of {} ({} → {}): old client got {kicked:?}, then close reason {reason:?}",
        again.name, names[old_node], names[new_node]
    ));
    let text = "after the duplicate login".to_owned();
    players[1]
        .c
        .packet(&Say { text: text.clone() })
        .await
        .context("say after the duplicate login")?;
    let from = players[1].name.clone();
    again
        .expect(
            "the line at the new session",
            |g| matches!(g, Got::Line(l) if l.from == from && l.text == text),
        )
        .await?;
    ok("the new session of the player receives the room's lines");

    progress::step("a disconnect");
    // Disconnect: the first player of room 1 closes its client; the others see it offline.
    let gone = players.remove(PER_ROOM);
    let gone_name = gone.name.clone();
    let gone_room = gone.room.clone();
    gone.c.close().await;
    let mut saw_offline = 0;
    for p in players.iter_mut().filter(|p| p.room == gone_room) {
        let (room, who) = (gone_room.clone(), gone_name.clone());
        p.expect("an Offline presence", |g| {
            matches!(g, Got::Presence(x) if x.room == room && x.player == who && x.status == PresenceStatus::Offline)
        })
        .await?;
        saw_offline += 1;
    }
    ensure!(
        saw_offline == PER_ROOM - 1,
        "{saw_offline} saw the disconnect"
    );
    let who: Vec<Member> = players[PER_ROOM]
        .c
        .packet(&Who)
        .await
        .context("who after the disconnect")?;
    ensure!(
        who.iter().any(|m| m.player == gone_name && !m.online) && who.len() == PER_ROOM,
        "members after the disconnect: {who:?}"
    );
    ok(format!(
        "disconnect of {gone_name}: {saw_offline} members saw Presence Offline; still a member, offline"
    ));

    // The new session of the first player takes the replaced one's place.
    let replaced = std::mem::replace(&mut players[0], again);
    progress::step("relocating rooms and players under live traffic");
    match credential {
        Some(credential) => {
            relocate_under_traffic(endpoints, &names, credential, &mut players, &owners).await?;
        }
        None => say!("  skip relocation (no operator credential)"),
    }

    progress::step("summary");
    let pushes: usize = players.iter().map(|p| p.got.len()).sum::<usize>() + replaced.got.len();
    say!("summary:");
    say!(
        "  nodes={} rooms=2 players={} lines_said={said} lines_delivered={delivered} joined_presence={joined} offline_presence={saw_offline} kicked=1 replaced_closes=1 pushes_total={pushes} elapsed={:?}",
        names.len(),
        players.len() + 1,
        started.elapsed()
    );
    for p in players {
        p.c.close().await;
    }
    replaced.c.close().await;
    say!("chat: all checks passed");
    Ok(())
}

/// One line said during the relocation step: its room's sequence number and when its reply came.
struct Answered {
    room: String,
    seq: u64,
    at: Instant,
}

/// The players of `room` say lines in turn, without pause, until `stop`; each answered line is
/// counted in `answered` (and `notify` woken).
async fn speak(
    players: &[Player],
    room: &str,
    stop: &AtomicBool,
    answered: &AtomicU64,
    notify: &tokio::sync::Notify,
) -> anyhow::Result<Vec<Answered>> {
    let mut out = Vec::new();
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for p in players.iter().filter(|p| p.room == room) {
            let r =
                p.c.packet(&Say {
                    text: format!("moving {k} from {}", p.name),
                })
                .await
                .with_context(|| format!("{} says during the relocations", p.name));
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    // The relocations stop waiting for lines.
                    stop.store(true, Ordering::Relaxed);
                    notify.notify_waiters();
                    return Err(e);
                }
            };
            out.push(Answered {
                room: room.to_owned(),
                seq: r.seq,
                at: Instant::now(),
            });
            answered.fetch_add(1, Ordering::Relaxed);
            notify.notify_waiters();
        }
        k += 1;
    }
    Ok(out)
}

/// Waits until `answered` reached `n` (the speakers wake `notify`); `Err` once `stop` is set
/// (a speaker failed).
async fn wait_answered(
    answered: &AtomicU64,
    stop: &AtomicBool,
    notify: &tokio::sync::Notify,
    n: u64,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let woken = notify.notified();
        if answered.load(Ordering::Relaxed) >= n {
            return Ok(());
        }
        ensure!(
            !stop.load(Ordering::Relaxed),
            "a player stopped saying lines"
        );
        tokio::time::timeout_at(deadline, woken)
            .await
            .with_context(|| format!("fewer than {n} lines answered within {WAIT:?}"))?;
    }
}

/// Both rooms and the first player of each room move to the next node (`RELOCATE`, operator)
/// while every player keeps saying lines; then every member must have received every line of
/// its room said meanwhile exactly once. Prints sent / processed / lost / duplicated and each
/// room's pause (the largest gap between two answered lines, beside its median gap).
///
/// The last step of the driver: the refs a room keeps to its members and a player to its room
/// are not refreshed when the actor they name moves; they reach it through the old owner's
/// Message Follow, for its bounded time (5 s by default, SB-5.12).
async fn relocate_under_traffic(
    endpoints: &[String],
    names: &[String],
    credential: &[u8],
    players: &mut [Player],
    owners: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let mut ops = Vec::new();
    for ep in endpoints {
        let c = NodeClient::connect(ep, WAIT)?;
        c.authenticate(credential)
            .await
            .with_context(|| format!("operator credential at {ep}"))?;
        ops.push(c);
    }
    let rooms: Vec<String> = players
        .iter()
        .map(|p| p.room.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // What moves, in order: each room and the first player of each room, away and back.
    let mut moving = Vec::new();
    for room in &rooms {
        moving.push(chat::room_id(room));
        let first = players
            .iter()
            .find(|p| &p.room == room)
            .context("a player")?;
        moving.push(chat::player_id(&first.name));
    }
    let stop = AtomicBool::new(false);
    let answered = AtomicU64::new(0);
    let notify = tokio::sync::Notify::new();
    let shared: &[Player] = players;
    let started = Instant::now();
    let moves = async {
        let r: anyhow::Result<Vec<(String, String, String, u64)>> = async {
            let mut done = Vec::new();
            for id in &moving {
                let home = owners.get(id).cloned().context("owner known")?;
                let home_i = names
                    .iter()
                    .position(|n| *n == home)
                    .context("owner node")?;
                let away = names[(home_i + 1) % names.len()].clone();
                {
                    let (from, to) = (&home, &away);
                    let seen = answered.load(Ordering::Relaxed);
                    wait_answered(&answered, &stop, &notify, seen + LINES_BETWEEN_MOVES).await?;
                    let from_i = names.iter().position(|n| n == from).context("node")?;
                    let r = ops[from_i]
                        .relocate(&RelocateActor {
                            actor_id: id.clone(),
                            to: to.clone(),
                        })
                        .await
                        .with_context(|| format!("relocating {id} from {from} to {to}"))?;
                    ensure!(r.to == *to, "{id} moved to {}", r.to);
                    done.push((id.clone(), from.clone(), to.clone(), r.duration_ms));
                }
            }
            let seen = answered.load(Ordering::Relaxed);
            wait_answered(&answered, &stop, &notify, seen + LINES_BETWEEN_MOVES).await?;
            Ok(done)
        }
        .await;
        stop.store(true, Ordering::Relaxed);
        r
    };
    let (moves, a0, a1) = tokio::join!(
        moves,
        speak(shared, &rooms[0], &stop, &answered, &notify),
        speak(shared, &rooms[1], &stop, &answered, &notify)
    );
    // A speaker's failure first: it is what stopped the relocations.
    let mut lines = a0?;
    lines.extend(a1?);
    let moves = moves?;
    let elapsed = started.elapsed();
    // Processed: each answered line has its own room sequence number, consecutive per room.
    let mut duplicated = 0u64;
    let mut per_room: BTreeMap<&str, Vec<&Answered>> = BTreeMap::new();
    for l in &lines {
        per_room.entry(l.room.as_str()).or_default().push(l);
    }
    let mut pauses = Vec::new();
    for (room, ls) in &mut per_room {
        let mut seqs: Vec<u64> = ls.iter().map(|l| l.seq).collect();
        seqs.sort_unstable();
        let before = seqs.len();
        seqs.dedup();
        duplicated += (before - seqs.len()) as u64;
        ensure!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "{room}: line numbers not consecutive"
        );
        ls.sort_by_key(|l| l.at);
        let mut gaps: Vec<Duration> = ls.windows(2).map(|w| w[1].at - w[0].at).collect();
        gaps.sort_unstable();
        let median = gaps.get(gaps.len() / 2).copied().unwrap_or_default();
        let largest = gaps.last().copied().unwrap_or_default();
        pauses.push(format!(
            "{room}: largest gap {:.1} ms (median {:.1} ms)",
            largest.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e3
        ));
    }
    // Delivered: every member gets every line of its room said meanwhile, once.
    let sent = lines.len() as u64;
    let mut lost = 0u64;
    let mut delivered = 0u64;
    for p in players.iter_mut() {
        let room = p.room.clone();
        let want: BTreeSet<u64> = lines
            .iter()
            .filter(|l| l.room == room)
            .map(|l| l.seq)
            .collect();
        for seq in &want {
            let got = p
                .expect(
                    &format!("line {seq} of {room}"),
                    |g| matches!(g, Got::Line(l) if l.room == room && l.seq == *seq),
                )
                .await;
            match got {
                Ok(_) => delivered += 1,
                Err(_) => lost += 1,
            }
        }
        let mut seen = BTreeMap::new();
        for l in p
            .lines()
            .filter(|l| l.room == room && want.contains(&l.seq))
        {
            *seen.entry(l.seq).or_insert(0u64) += 1;
        }
        duplicated += seen.values().map(|n| n - 1).sum::<u64>();
    }
    for (id, from, to, ms) in &moves {
        ok(format!("relocated {id}: {from} → {to} in {ms} ms"));
    }
    say!(
        "  relocation: moves={} sent={sent} processed={} delivered={delivered} lost={lost} duplicated={duplicated} elapsed={elapsed:?}",
        moves.len(),
        per_room.values().map(Vec::len).sum::<usize>()
    );
    say!("  pause: {}", pauses.join("; "));
    ensure!(
        lost == 0 && duplicated == 0,
        "relocation under traffic: {lost} lost, {duplicated} duplicated"
    );
    for p in players.iter() {
        ensure!(
            p.c.close_reason().is_none(),
            "{}: session closed during the relocations ({:?})",
            p.name,
            p.c.close_reason()
        );
    }
    ok(format!(
        "{} relocations under traffic: {sent} lines sent, all processed once and delivered to every member; none lost, none duplicated; no session closed",
        moves.len()
    ));
    for c in ops {
        c.close().await;
    }
    Ok(())
}
