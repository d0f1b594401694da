//! The sessions world: N nodes, each a session owner (its client sessions, one real
//! [`SessionBindingAggregate`] per session) and an actor owner (a real [`BindingSlot`] per
//! local actor), on the simulated network. Binds (38 with their terminals), relays (24),
//! pushes (36), replacements (51, and late copies of them), unbinds and disconnects (38
//! tombstones), the replaced session's close (its callback terminal and the close timer on the
//! virtual clock), partitions between two nodes (a stall below the peer timeout; past it the
//! connections break and each side sees the other down), and crashes with restarts (a new
//! lifecycle generation; a session id may be handed out again by the new process).
//!
//! What is written here is only the thin driver the node's tasks are around these cores: the
//! session owner's sends and completions (`session::owner`), the actor owner's 38/24 handling
//! and its push (`node::dispatch`, `node::bound`), and the owner watch's rule (`node::peers`:
//! once a session owner's lifecycle is gone, every binding it registered ends). [`Faults`] turn
//! single driver rules off, to show the invariants catch it.
//!
//! Invariants, after every step (and at the end):
//! - a push reaches only the session it was bound to (SB-5.5, SB-5.8);
//! - every bind has exactly one terminal (its reply, the actor owner's loss, or the session
//!   owner's crash), never two (SB-12);
//! - no relay is processed twice;
//! - a late or duplicate 51 changes nothing (SB-6.6);
//! - at the end, at most one current binding per actor incarnation (SB-1.1): the slot's
//!   binding is held by exactly that live session, and no live session holds another binding
//!   of that incarnation (unless the owner watch ended it behind a partition, or its 51 was
//!   lost to a broken connection: SB-6.5 leaves those to liveness);
//! - after a crash every binding of the dead session owner ends (SB-7.4, SB-6.5);
//! - a binding the owner watch ended never has a relay admitted again (SB-7.3).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use zlink::session::aggregate::{
    BindCompletion, BindStart, BindTarget, SessionBindingAggregate, SessionIdentity,
};
use zlink::session::slot::SlotBind;
use zlink::session::{BindingSlot, RegisteredBinding};
use zlink_wire::{
    ActorId, ActorLocation, AuthorityFence, AuthorityOwnerGeneration, BindSnapshot,
    BindingGeneration, BoundSessionReplaced, BoundSessionSend, DispatchKey, ErrorKind, MeshName,
    NodeGeneration, NodeRid, ObjectGeneration, OwnerId, OwnerLeaseGeneration, PreviousSessionOwner,
    SessionLifecycleGeneration, SessionRid,
};

use super::{Delays, Envelope, Ep, Millis, Network, Queue, Rng, Violation};

/// When the other nodes see a crashed node down (their peer timeout).
const PEER_TIMEOUT_MS: Millis = 300;
/// After the last action: the run goes on this long so every record arrives.
const DRAIN_MS: Millis = 5_000;
/// A replaced-callback takes this long.
const CALLBACK_MS: Millis = 10;
/// A reconnecting client gets a new session this long after its disconnect.
const RECONNECT_MS: Millis = 50;
/// A bind's deadline at its session owner (longer than any round trip of the delay model, so
/// only a lost record lets it pass).
const BIND_DEADLINE_MS: Millis = 4_000;

/// Driver rules that can be switched off, each a bug the simulator must catch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The actor owner keeps the bindings of a session owner whose lifecycle is gone.
    pub keep_dead_owners_bindings: bool,
    /// The session owner delivers a push without the aggregate's check (SB-5.5).
    pub push_skips_check: bool,
    /// The actor owner registers a bind but sends no 51 to the replaced session.
    pub no_replaced_51: bool,
    /// The session owner keeps its binds in flight to an actor owner it saw down (a partition
    /// past the peer timeout) waiting, instead of ending them `PeerLost`, and has no deadline.
    pub binds_survive_peer_loss: bool,
}

impl Faults {
    /// The fault named `name` (`SIM_FAULT`), or none for an empty name.
    pub fn named(name: &str) -> Option<Self> {
        let mut f = Self::default();
        match name {
            "" | "none" => {}
            "keep_dead_owners_bindings" => f.keep_dead_owners_bindings = true,
            "push_skips_check" => f.push_skips_check = true,
            "no_replaced_51" => f.no_replaced_51 = true,
            "binds_survive_peer_loss" => f.binds_survive_peer_loss = true,
            _ => return None,
        }
        Some(f)
    }
}

/// One scheduled action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Session `session` of `node` binds the actor (at its owner's current incarnation).
    Bind {
        node: usize,
        session: usize,
        actor: usize,
    },
    /// The session relays to the actor through its binding; the actor pushes back.
    Relay {
        node: usize,
        session: usize,
        actor: usize,
    },
    /// The session unbinds the actor.
    Unbind {
        node: usize,
        session: usize,
        actor: usize,
    },
    /// The session's client disconnects (and reconnects: a new session).
    Disconnect { node: usize, session: usize },
    /// The last 51 the node received arrives again (a late duplicate).
    Late51 { node: usize },
    /// The node dies and restarts `down_ms` later with a new lifecycle.
    Crash { node: usize, down_ms: u64 },
    /// Nodes `a` and `b` cannot reach each other for `ms`: shorter than the peer timeout, a
    /// stall (TCP retransmits, nothing is lost or noticed); longer, the connections break
    /// (what is in flight or sent meanwhile is lost) and each side sees the other down once
    /// the peer timeout passed: binds in flight end `PeerLost`, the owner watch ends the other
    /// side's bindings (`DownReason::Timeout` is proof, `node::peers`).
    Partition { a: usize, b: usize, ms: u64 },
}

/// A run's input.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: usize,
    /// Client sessions per node.
    pub sessions: usize,
    /// Actors (actor `a` lives on node `a % nodes`).
    pub actors: usize,
    /// The network's delays.
    pub delays: Delays,
    /// The scenario's length (then the drain).
    pub end_ms: Millis,
    /// Actions by time.
    pub actions: Vec<(Millis, Action)>,
}

impl Scenario {
    /// The scenario of `seed`.
    pub fn generate(seed: u64) -> Self {
        let mut r = Rng::new(seed ^ 0x5E55_1015);
        let nodes = r.range(2, 4) as usize;
        let sessions = r.range(1, 3) as usize;
        let actors = r.range(1, 4) as usize;
        let delays = Delays {
            base_ms: r.range(1, 10),
            slow_permille: r.below(80),
            slow_ms: r.range(50, 1_500),
        };
        let end_ms = r.range(2_000, 6_000);
        let count = r.range(10, 60);
        let mut actions = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let at = r.below(end_ms);
            let node = r.below(nodes as u64) as usize;
            let session = r.below(sessions as u64) as usize;
            let actor = r.below(actors as u64) as usize;
            let action = match r.below(1000) {
                0..=349 => Action::Bind {
                    node,
                    session,
                    actor,
                },
                350..=699 => Action::Relay {
                    node,
                    session,
                    actor,
                },
                700..=779 => Action::Unbind {
                    node,
                    session,
                    actor,
                },
                780..=869 => Action::Disconnect { node, session },
                870..=939 => Action::Late51 { node },
                _ => Action::Crash {
                    node,
                    down_ms: r.range(50, 1_500),
                },
            };
            actions.push((at, action));
        }
        // Partitions come from a stream of their own: the other actions of a seed stay as
        // they were before partitions were simulated.
        let mut p = Rng::new(seed ^ 0x9A27_1710);
        if nodes > 1 {
            for _ in 0..p.below(4) {
                let a = p.below(nodes as u64) as usize;
                let b = (a + 1 + p.below(nodes as u64 - 1) as usize) % nodes;
                let ms = if p.chance(300) {
                    p.range(20, PEER_TIMEOUT_MS - 1)
                } else {
                    p.range(PEER_TIMEOUT_MS, 3_000)
                };
                actions.push((p.below(end_ms), Action::Partition { a, b, ms }));
            }
        }
        actions.sort_by_key(|(at, _)| *at);
        Self {
            seed,
            nodes,
            sessions,
            actors,
            delays,
            end_ms,
            actions,
        }
    }
}

/// What a run counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Events handled.
    pub steps: u64,
    /// Binds sent (38).
    pub binds: u64,
    /// Binds bound.
    pub bound: u64,
    /// Bind terminals other than bound (refused, owner lost, caller crashed).
    pub bind_failures: u64,
    /// 51s applied (a session replaced).
    pub replacements: u64,
    /// 51s refused (late, duplicate, stale).
    pub refused_51: u64,
    /// Relays processed by the actor.
    pub relays: u64,
    /// Relays refused by the slot (retired binding).
    pub relays_refused: u64,
    /// Pushes delivered to a session.
    pub pushes: u64,
    /// Pushes refused by the session's aggregate.
    pub pushes_refused: u64,
    /// Bindings ended by the owner watch (dead session owner).
    pub owner_lost: u64,
    /// Crashes.
    pub crashes: u64,
    /// Partitions that broke the connections (past the peer timeout).
    pub partitions: u64,
    /// Partitions shorter than the peer timeout (stalls).
    pub stalls: u64,
    /// Bindings a partition ended through the owner watch (of a live session owner).
    pub partition_ended: u64,
    /// Binds ended by their deadline.
    pub bind_timeouts: u64,
    /// Messages lost to broken links.
    pub dropped: u64,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Self) {
        self.steps += o.steps;
        self.binds += o.binds;
        self.bound += o.bound;
        self.bind_failures += o.bind_failures;
        self.replacements += o.replacements;
        self.refused_51 += o.refused_51;
        self.relays += o.relays;
        self.relays_refused += o.relays_refused;
        self.pushes += o.pushes;
        self.pushes_refused += o.pushes_refused;
        self.owner_lost += o.owner_lost;
        self.crashes += o.crashes;
        self.partitions += o.partitions;
        self.stalls += o.stalls;
        self.partition_ended += o.partition_ended;
        self.bind_timeouts += o.bind_timeouts;
        self.dropped += o.dropped;
    }
}

/// A run's result.
pub type Outcome = super::Outcome<Stats>;

/// The sessions world as the frame's seed runner, shrinker and replay see it.
pub struct Sessions;

impl super::World for Sessions {
    const NAME: &'static str = "sessions";
    type Scenario = Scenario;
    type Action = Action;
    type Faults = Faults;
    type Stats = Stats;

    fn generate(seed: u64) -> Scenario {
        Scenario::generate(seed)
    }

    fn actions(s: &Scenario) -> &[(Millis, Action)] {
        &s.actions
    }

    fn with_actions(s: &Scenario, actions: Vec<(Millis, Action)>) -> Scenario {
        Scenario {
            actions,
            ..s.clone()
        }
    }

    fn fault_named(name: &str) -> Option<Faults> {
        Faults::named(name)
    }

    fn run(s: &Scenario, faults: Faults, trace: bool) -> Outcome {
        run(s, faults, trace)
    }
}

#[derive(Clone, Debug)]
enum Msg {
    /// 38 Bind (request `id`).
    Bind {
        id: u64,
        reg: RegisteredBinding,
        actor: usize,
        incarnation: u64,
    },
    /// The 38's terminal.
    BindReply { id: u64, ok: bool },
    /// 38 Unbind / Disconnect tombstone.
    Tombstone {
        actor: usize,
        lifecycle: u64,
        generation: u64,
    },
    /// 24 relay (one-way; the actor pushes back).
    Relay {
        id: u64,
        actor: usize,
        incarnation: u64,
        lifecycle: u64,
        generation: u64,
    },
    /// 36 push.
    Push { id: u64, push: BoundSessionSend },
    /// 51 replaced.
    Replaced(Box<BoundSessionReplaced>),
}

#[derive(Debug)]
enum Event {
    Act(Action),
    Deliver(Envelope<Msg>),
    Restart {
        node: usize,
    },
    /// `node` sees `peer`'s lifecycle `lifecycle` gone.
    PeerDown {
        node: usize,
        peer: usize,
        lifecycle: u64,
    },
    /// A replaced-callback reached its terminal.
    CallbackDone {
        node: usize,
        lifecycle: u64,
        session: usize,
        seq: u64,
    },
    /// The close timer of a closing session.
    CloseTimer {
        node: usize,
        lifecycle: u64,
        session: usize,
        seq: u64,
    },
    Reconnect {
        node: usize,
        lifecycle: u64,
        session: usize,
    },
    /// The peer timeout of a partition passed: if it lasts, each side sees the other down.
    PartitionDetect {
        a: usize,
        b: usize,
        id: u64,
    },
    /// A partition ends.
    Heal {
        a: usize,
        b: usize,
        id: u64,
    },
    /// A bind's deadline at its session owner.
    BindDeadline {
        id: u64,
    },
}

struct Session {
    rid: u64,
    agg: SessionBindingAggregate,
}

struct Node {
    up: bool,
    lifecycle: u64,
    /// Client sessions by slot (the scenario's session index).
    sessions: BTreeMap<usize, Session>,
    /// The actor owner's slots of its local actors.
    slots: BTreeMap<usize, BindingSlot>,
    next_generation: u64,
    next_rid: u64,
    /// The last 51 received (for a late copy).
    last_51: Option<(Ep, BoundSessionReplaced)>,
}

/// A bind in flight, for its terminal.
#[derive(Clone, Debug)]
struct PendingBind {
    node: usize,
    lifecycle: u64,
    session: usize,
    /// The session's id (a reconnected client's new session has another).
    rid: u64,
    actor: usize,
    generation: u64,
    owner: usize,
    owner_lifecycle: u64,
    terminals: u32,
}

struct World<'s> {
    s: &'s Scenario,
    faults: Faults,
    now: Millis,
    base: Instant,
    queue: Queue<Event>,
    net: Network,
    nodes: Vec<Node>,
    next_lifecycle: u64,
    next_id: u64,
    binds: BTreeMap<u64, PendingBind>,
    /// Binding identity (node, lifecycle, generation) → the session (rid) that began it.
    bound_by: BTreeMap<(usize, u64, u64), u64>,
    relays_done: BTreeSet<u64>,
    pushes_done: BTreeSet<u64>,
    /// Session owner lifecycles that are gone: (node, lifecycle, since).
    dead: Vec<(usize, u64, Millis)>,
    /// Bindings the owner watch ended: (actor owner node, actor, session owner node, its
    /// lifecycle, binding generation). Their relays must never be admitted again (SB-7.3).
    watch_ended: BTreeSet<(usize, usize, usize, u64, u64)>,
    /// 51s sent and 51s delivered: (replaced session owner node, lifecycle, retired binding
    /// generation). A 51 lost to a broken connection leaves the replaced session holding a
    /// binding its actor owner retired (SB-6.5: left to the connection's liveness).
    sent_51: BTreeSet<(usize, u64, u64)>,
    delivered_51: BTreeSet<(usize, u64, u64)>,
    /// The partition of each cut pair (its id), while it lasts.
    cuts: BTreeMap<(usize, usize), u64>,
    next_partition: u64,
    stats: Stats,
    trace: Option<Vec<String>>,
}

fn rid(i: usize) -> NodeRid {
    NodeRid::new(format!("n{i}")).expect("valid")
}

fn owner_id(i: usize) -> OwnerId {
    OwnerId::new(1_000 + i as u64)
}

fn actor_id(a: usize) -> ActorId {
    ActorId::new(format!("a{a}")).expect("valid")
}

fn location(owner: usize, lifecycle: u64) -> ActorLocation {
    ActorLocation {
        mesh: MeshName::new("m").expect("valid"),
        node: rid(owner),
        node_generation: NodeGeneration::new(lifecycle),
        authority_owner_generation: AuthorityOwnerGeneration::new(lifecycle),
        owner_lease_generation: OwnerLeaseGeneration::new(lifecycle),
    }
}

fn fence(owner: usize, lifecycle: u64) -> AuthorityFence {
    AuthorityFence {
        node: rid(owner),
        node_generation: NodeGeneration::new(lifecycle),
        authority_owner_generation: AuthorityOwnerGeneration::new(lifecycle),
        owner_lease_generation: OwnerLeaseGeneration::new(lifecycle),
    }
}

fn node_of(ep: Ep) -> usize {
    match ep {
        Ep::Node(i) => i,
        Ep::Store => usize::MAX,
    }
}

impl<'s> World<'s> {
    fn new(s: &'s Scenario, faults: Faults, trace: bool) -> Self {
        let mut w = Self {
            s,
            faults,
            now: 0,
            base: Instant::now(),
            queue: Queue::default(),
            net: Network::new(s.seed, s.delays),
            nodes: Vec::new(),
            next_lifecycle: 1,
            next_id: 1,
            binds: BTreeMap::new(),
            bound_by: BTreeMap::new(),
            relays_done: BTreeSet::new(),
            pushes_done: BTreeSet::new(),
            dead: Vec::new(),
            watch_ended: BTreeSet::new(),
            sent_51: BTreeSet::new(),
            delivered_51: BTreeSet::new(),
            cuts: BTreeMap::new(),
            next_partition: 1,
            stats: Stats::default(),
            trace: trace.then(Vec::new),
        };
        for i in 0..s.nodes {
            let n = w.fresh_node(i);
            w.nodes.push(n);
        }
        w
    }

    fn fresh_node(&mut self, i: usize) -> Node {
        let lifecycle = self.next_lifecycle;
        self.next_lifecycle += 1;
        let mut n = Node {
            up: true,
            lifecycle,
            sessions: BTreeMap::new(),
            slots: (0..self.s.actors)
                .filter(|a| a % self.s.nodes == i)
                .map(|a| (a, BindingSlot::default()))
                .collect(),
            next_generation: 1,
            // a restarted process hands out session ids from the start again
            next_rid: 1,
            last_51: None,
        };
        for k in 0..self.s.sessions {
            let s = self.new_session(i, lifecycle, &mut n.next_rid);
            n.sessions.insert(k, s);
        }
        n
    }

    fn new_session(&self, node: usize, lifecycle: u64, next_rid: &mut u64) -> Session {
        let r = *next_rid;
        *next_rid += 1;
        let id = SessionIdentity {
            owner: rid(node),
            lifecycle: SessionLifecycleGeneration::new(lifecycle),
            session: SessionRid::new(r),
        };
        Session {
            rid: r,
            agg: SessionBindingAggregate::new(id, owner_id(node), Duration::from_secs(30)),
        }
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_millis(self.now)
    }

    fn log(&mut self, text: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            t.push(format!("{:>6} {}", self.now, text()));
        }
    }

    fn violation(&self, what: String) -> Violation {
        Violation { at: self.now, what }
    }

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        if let Some((at, env)) = self.net.send(self.now, Ep::Node(from), Ep::Node(to), msg) {
            self.queue.push(at, Event::Deliver(env));
        }
    }

    fn run(&mut self) -> Result<(), Violation> {
        for (at, a) in &self.s.actions {
            self.queue.push(*at, Event::Act(a.clone()));
        }
        let end = self.s.end_ms + DRAIN_MS;
        while let Some((at, ev)) = self.queue.pop_until(end) {
            self.now = at;
            self.stats.steps += 1;
            self.step(ev)?;
        }
        self.now = end;
        self.stats.dropped = self.net.dropped;
        self.final_check()
    }

    fn step(&mut self, ev: Event) -> Result<(), Violation> {
        match ev {
            Event::Act(a) => self.act(a),
            Event::Deliver(env) => {
                if !self.net.accept(&env) || !self.nodes[node_of(env.to)].up {
                    return Ok(());
                }
                self.deliver(node_of(env.from), node_of(env.to), env.msg)
            }
            Event::Restart { node } => {
                let n = self.fresh_node(node);
                self.log(|| format!("n{node} restarts, lifecycle {}", n.lifecycle));
                self.nodes[node] = n;
                Ok(())
            }
            Event::PeerDown {
                node,
                peer,
                lifecycle,
            } => {
                self.peer_down(node, peer, lifecycle, false);
                Ok(())
            }
            Event::CallbackDone {
                node,
                lifecycle,
                session,
                seq,
            } => {
                let now = self.instant();
                let n = &mut self.nodes[node];
                if n.up && n.lifecycle == lifecycle {
                    if let Some(s) = n.sessions.get_mut(&session) {
                        let _ = s.agg.callback_finished(now, seq);
                        if let Some(due) = s.agg.poll_timeout() {
                            let at = super::ms_since(self.base, due).max(self.now);
                            self.queue.push(
                                at,
                                Event::CloseTimer {
                                    node,
                                    lifecycle,
                                    session,
                                    seq,
                                },
                            );
                        }
                    }
                }
                Ok(())
            }
            Event::CloseTimer {
                node,
                lifecycle,
                session,
                seq,
            } => {
                let now = self.instant();
                let n = &mut self.nodes[node];
                if !(n.up && n.lifecycle == lifecycle) {
                    return Ok(());
                }
                let Some(s) = n.sessions.get_mut(&session) else {
                    return Ok(());
                };
                if s.agg.handle_timeout(now, seq).is_some() {
                    // The connection closes (Replaced): the disconnect path ends the rest.
                    self.end_session(node, session);
                }
                Ok(())
            }
            Event::PartitionDetect { a, b, id } => {
                if self.cuts.get(&(a, b)) != Some(&id) {
                    return Ok(());
                }
                self.stats.partitions += 1;
                self.log(|| format!("n{a} and n{b} see each other down (partition)"));
                for (node, peer) in [(a, b), (b, a)] {
                    if self.nodes[peer].up {
                        let lifecycle = self.nodes[peer].lifecycle;
                        self.peer_down(node, peer, lifecycle, true);
                    }
                }
                self.check_terminals()
            }
            Event::Heal { a, b, id } => {
                if self.cuts.get(&(a, b)) == Some(&id) {
                    self.cuts.remove(&(a, b));
                    self.net.heal(Ep::Node(a), Ep::Node(b));
                    self.log(|| format!("heal n{a} - n{b}"));
                }
                Ok(())
            }
            Event::BindDeadline { id } => {
                if self.binds.get(&id).is_some_and(|b| b.terminals == 0) {
                    self.stats.bind_timeouts += 1;
                    self.bind_terminal(id, false);
                }
                Ok(())
            }
            Event::Reconnect {
                node,
                lifecycle,
                session,
            } => {
                let n = &self.nodes[node];
                if n.up && n.lifecycle == lifecycle {
                    let mut next = n.next_rid;
                    let s = self.new_session(node, lifecycle, &mut next);
                    let n = &mut self.nodes[node];
                    n.next_rid = next;
                    n.sessions.insert(session, s);
                }
                Ok(())
            }
        }
    }

    fn act(&mut self, a: Action) -> Result<(), Violation> {
        self.log(|| format!("{a:?}"));
        match a {
            Action::Bind {
                node,
                session,
                actor,
            } => {
                let owner = actor % self.s.nodes;
                if !self.nodes[node].up || !self.nodes[owner].up {
                    return Ok(());
                }
                let incarnation = self.nodes[owner].lifecycle;
                let n = &mut self.nodes[node];
                let lifecycle = n.lifecycle;
                let g = n.next_generation;
                n.next_generation += 1;
                let Some(s) = n.sessions.get_mut(&session) else {
                    return Ok(());
                };
                let target = BindTarget {
                    actor: actor_id(actor),
                    actor_type: "t".into(),
                    object_generation: ObjectGeneration::new(incarnation),
                    location: location(owner, incarnation),
                };
                let srid = s.rid;
                if let Ok(BindStart::Request(req)) =
                    s.agg.begin_bind(target, BindingGeneration::new(g))
                {
                    let id = self.next_id;
                    self.next_id += 1;
                    self.bound_by.insert((node, lifecycle, g), srid);
                    self.binds.insert(
                        id,
                        PendingBind {
                            node,
                            lifecycle,
                            session,
                            rid: srid,
                            actor,
                            generation: req.generation.get(),
                            owner,
                            owner_lifecycle: incarnation,
                            terminals: 0,
                        },
                    );
                    self.stats.binds += 1;
                    if !self.faults.binds_survive_peer_loss {
                        self.queue
                            .push(self.now + BIND_DEADLINE_MS, Event::BindDeadline { id });
                    }
                    let reg = RegisteredBinding {
                        session_owner: rid(node),
                        lifecycle: SessionLifecycleGeneration::new(lifecycle),
                        owner_id: owner_id(node),
                        owner_lease: OwnerLeaseGeneration::new(lifecycle),
                        session: SessionRid::new(srid),
                        generation: BindingGeneration::new(g),
                    };
                    self.send(
                        node,
                        owner,
                        Msg::Bind {
                            id,
                            reg,
                            actor,
                            incarnation,
                        },
                    );
                }
                Ok(())
            }
            Action::Relay {
                node,
                session,
                actor,
            } => {
                if !self.nodes[node].up {
                    return Ok(());
                }
                let lifecycle = self.nodes[node].lifecycle;
                let Some(s) = self.nodes[node].sessions.get_mut(&session) else {
                    return Ok(());
                };
                let Some(g) = s.agg.find(&actor_id(actor)).map(|b| b.generation) else {
                    return Ok(());
                };
                let Ok(ticket) = s.agg.relay(&actor_id(actor), g) else {
                    return Ok(());
                };
                let owner = actor % self.s.nodes;
                let incarnation = ticket.binding.object_generation.get();
                let id = self.next_id;
                self.next_id += 1;
                self.send(
                    node,
                    owner,
                    Msg::Relay {
                        id,
                        actor,
                        incarnation,
                        lifecycle,
                        generation: g.get(),
                    },
                );
                Ok(())
            }
            Action::Unbind {
                node,
                session,
                actor,
            } => {
                if !self.nodes[node].up {
                    return Ok(());
                }
                let lifecycle = self.nodes[node].lifecycle;
                let Some(s) = self.nodes[node].sessions.get_mut(&session) else {
                    return Ok(());
                };
                let Some(g) = s.agg.find(&actor_id(actor)).map(|b| b.generation) else {
                    return Ok(());
                };
                if let Ok(b) = s.agg.remove(&actor_id(actor), g) {
                    let owner = b.route.node.as_str()[1..].parse::<usize>().unwrap_or(0);
                    self.send(
                        node,
                        owner,
                        Msg::Tombstone {
                            actor,
                            lifecycle,
                            generation: g.get(),
                        },
                    );
                }
                Ok(())
            }
            Action::Disconnect { node, session } => {
                if self.nodes[node].up {
                    self.end_session(node, session);
                }
                Ok(())
            }
            Action::Late51 { node } => {
                if let Some((from, rec)) = self.nodes[node].last_51.clone()
                    && self.nodes[node].up
                {
                    self.replaced(node_of(from), node, rec)?;
                }
                Ok(())
            }
            Action::Crash { node, down_ms } => {
                if !self.nodes[node].up {
                    return Ok(());
                }
                self.stats.crashes += 1;
                let lifecycle = self.nodes[node].lifecycle;
                self.nodes[node].up = false;
                self.nodes[node].sessions.clear();
                self.nodes[node].slots.clear();
                self.net.reset(Ep::Node(node));
                // Its own binds end with it (the caller crashed).
                for b in self.binds.values_mut() {
                    if b.node == node && b.lifecycle == lifecycle && b.terminals == 0 {
                        b.terminals += 1;
                        self.stats.bind_failures += 1;
                    }
                }
                self.dead.push((node, lifecycle, self.now));
                for other in 0..self.s.nodes {
                    if other != node {
                        self.queue.push(
                            self.now + PEER_TIMEOUT_MS,
                            Event::PeerDown {
                                node: other,
                                peer: node,
                                lifecycle,
                            },
                        );
                    }
                }
                self.queue
                    .push(self.now + down_ms.max(1), Event::Restart { node });
                Ok(())
            }
            Action::Partition { a, b, ms } => {
                let key = (a.min(b), a.max(b));
                if a == b || self.cuts.contains_key(&key) {
                    return Ok(());
                }
                if ms < PEER_TIMEOUT_MS {
                    self.stats.stalls += 1;
                    self.net
                        .stall(Ep::Node(a), Ep::Node(b), self.now + ms.max(1));
                    return Ok(());
                }
                let id = self.next_partition;
                self.next_partition += 1;
                self.cuts.insert(key, id);
                self.net.partition(Ep::Node(a), Ep::Node(b));
                self.queue.push(
                    self.now + PEER_TIMEOUT_MS,
                    Event::PartitionDetect {
                        a: key.0,
                        b: key.1,
                        id,
                    },
                );
                self.queue.push(
                    self.now + ms,
                    Event::Heal {
                        a: key.0,
                        b: key.1,
                        id,
                    },
                );
                Ok(())
            }
        }
    }

    /// The session's connection ended: the aggregate's snapshot, one tombstone per binding;
    /// a new session of the client after a while.
    fn end_session(&mut self, node: usize, session: usize) {
        let lifecycle = self.nodes[node].lifecycle;
        let Some(mut s) = self.nodes[node].sessions.remove(&session) else {
            return;
        };
        for b in s.agg.disconnect() {
            let owner = b.route.node.as_str()[1..].parse::<usize>().unwrap_or(0);
            let actor = b.actor.as_str()[1..].parse::<usize>().unwrap_or(0);
            self.send(
                node,
                owner,
                Msg::Tombstone {
                    actor,
                    lifecycle,
                    generation: b.generation.get(),
                },
            );
        }
        self.queue.push(
            self.now + RECONNECT_MS,
            Event::Reconnect {
                node,
                lifecycle,
                session,
            },
        );
    }

    /// `node` sees `peer`'s lifecycle gone (crashed, or silent past the peer timeout behind a
    /// partition): its binds to it end (peer lost), and the owner watch ends every binding
    /// that lifecycle registered here.
    fn peer_down(&mut self, node: usize, peer: usize, lifecycle: u64, partition: bool) {
        if !self.nodes[node].up {
            return;
        }
        if partition && self.faults.binds_survive_peer_loss {
            self.end_bindings_of(node, peer, lifecycle, partition);
            return;
        }
        let my_lifecycle = self.nodes[node].lifecycle;
        let ids: Vec<u64> = self
            .binds
            .iter()
            .filter(|(_, b)| {
                b.node == node
                    && b.lifecycle == my_lifecycle
                    && b.owner == peer
                    && b.owner_lifecycle == lifecycle
                    && b.terminals == 0
            })
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.bind_terminal(id, false);
        }
        self.end_bindings_of(node, peer, lifecycle, partition);
    }

    /// The owner watch on `node`: every binding `peer`'s `lifecycle` registered here ends
    /// (its disconnect callback, then the tombstone).
    fn end_bindings_of(&mut self, node: usize, peer: usize, lifecycle: u64, partition: bool) {
        let peer_rid = rid(peer);
        let mut ended = 0;
        for (a, slot) in self.nodes[node].slots.iter_mut() {
            let Some(c) = slot.current().cloned() else {
                continue;
            };
            if c.session_owner != peer_rid || c.lifecycle.get() != lifecycle {
                continue;
            }
            self.watch_ended
                .insert((node, *a, peer, lifecycle, c.generation.get()));
            if self.faults.keep_dead_owners_bindings {
                continue;
            }
            if slot
                .tombstone(&c.session_owner, c.lifecycle, c.generation)
                .is_some()
            {
                ended += 1;
            }
        }
        if partition {
            self.stats.partition_ended += ended;
        } else {
            self.stats.owner_lost += ended;
        }
    }

    /// The terminal of bind `id`, delivered to its session (if it is still waiting).
    fn bind_terminal(&mut self, id: u64, ok: bool) {
        let Some(b) = self.binds.get_mut(&id) else {
            return;
        };
        if b.terminals > 0 {
            // A late reply: the request already ended (correlation drops it).
            return;
        }
        b.terminals += 1;
        let b = b.clone();
        let n = &mut self.nodes[b.node];
        if !(n.up && n.lifecycle == b.lifecycle) {
            return;
        }
        let Some(s) = n.sessions.get_mut(&b.session).filter(|s| s.rid == b.rid) else {
            // Its session ended meanwhile (the aggregate would answer Late): a registered
            // binding nobody holds is tombstoned at its owner.
            self.stats.bind_failures += 1;
            if ok {
                self.send(
                    b.node,
                    b.owner,
                    Msg::Tombstone {
                        actor: b.actor,
                        lifecycle: b.lifecycle,
                        generation: b.generation,
                    },
                );
            }
            return;
        };
        let result = if ok {
            Ok(BindSnapshot {
                actor: actor_id(b.actor),
                object_generation: ObjectGeneration::new(b.owner_lifecycle),
                location: location(b.owner, b.owner_lifecycle),
                binding_generation: BindingGeneration::new(b.generation),
            })
        } else {
            Err(ErrorKind::Unavailable)
        };
        let done = s.agg.complete_bind(
            &actor_id(b.actor),
            BindingGeneration::new(b.generation),
            OwnerLeaseGeneration::new(b.lifecycle),
            result,
        );
        match done {
            BindCompletion::Bound { .. } => self.stats.bound += 1,
            BindCompletion::Late {
                tombstone: Some(t), ..
            } => {
                // a registered binding nobody holds: tombstoned at its owner
                self.stats.bind_failures += 1;
                self.send(
                    b.node,
                    b.owner,
                    Msg::Tombstone {
                        actor: b.actor,
                        lifecycle: b.lifecycle,
                        generation: t.generation.get(),
                    },
                );
            }
            _ => self.stats.bind_failures += 1,
        }
    }

    fn deliver(&mut self, from: usize, to: usize, msg: Msg) -> Result<(), Violation> {
        match msg {
            Msg::Bind {
                id,
                reg,
                actor,
                incarnation,
            } => {
                let me = self.nodes[to].lifecycle;
                let ok = me == incarnation
                    && match self.nodes[to].slots.get_mut(&actor) {
                        Some(slot) => match slot.bind(reg.clone()) {
                            SlotBind::Registered { replaced } => {
                                if let Some(p) = replaced
                                    && !self.faults.no_replaced_51
                                {
                                    let prev_node =
                                        p.session_owner.as_str()[1..].parse().unwrap_or(0);
                                    let rec = BoundSessionReplaced {
                                        actor: actor_id(actor),
                                        authority_source: fence(to, me),
                                        authority_target: fence(to, me),
                                        previous: PreviousSessionOwner {
                                            node: p.session_owner.clone(),
                                            lifecycle: p.lifecycle,
                                            owner: p.owner_id,
                                            owner_lease_generation: p.owner_lease,
                                            session: p.session,
                                            retired_binding_generation: p.generation,
                                        },
                                    };
                                    self.sent_51.insert((
                                        prev_node,
                                        p.lifecycle.get(),
                                        p.generation.get(),
                                    ));
                                    // after the reply (SB-6.1)
                                    self.send(to, from, Msg::BindReply { id, ok: true });
                                    self.send(to, prev_node, Msg::Replaced(Box::new(rec)));
                                    return Ok(());
                                }
                                true
                            }
                            _ => true,
                        },
                        None => false,
                    };
                self.send(to, from, Msg::BindReply { id, ok });
                Ok(())
            }
            Msg::BindReply { id, ok } => {
                self.bind_terminal(id, ok);
                self.check_terminals()
            }
            Msg::Tombstone {
                actor,
                lifecycle,
                generation,
            } => {
                if let Some(slot) = self.nodes[to].slots.get_mut(&actor) {
                    let _ = slot.tombstone(
                        &rid(from),
                        SessionLifecycleGeneration::new(lifecycle),
                        BindingGeneration::new(generation),
                    );
                }
                Ok(())
            }
            Msg::Relay {
                id,
                actor,
                incarnation,
                lifecycle,
                generation,
            } => {
                let me = self.nodes[to].lifecycle;
                let Some(slot) = self.nodes[to].slots.get(&actor) else {
                    return Ok(());
                };
                if me != incarnation
                    || slot
                        .check_relay(
                            &rid(from),
                            SessionLifecycleGeneration::new(lifecycle),
                            BindingGeneration::new(generation),
                        )
                        .is_err()
                {
                    self.stats.relays_refused += 1;
                    return Ok(());
                }
                if !self.relays_done.insert(id) {
                    return Err(self.violation(format!("relay {id} processed twice")));
                }
                // spec: SB-7.3, SB-7.4 — a binding the owner watch ended never processes again
                if self
                    .watch_ended
                    .contains(&(to, actor, from, lifecycle, generation))
                {
                    return Err(self.violation(format!(
                        "relay {id} of n{from}'s binding {generation} of a{actor} was admitted \
                         after the owner watch ended that binding"
                    )));
                }
                self.stats.relays += 1;
                // The actor pushes to its bound session (what the slot holds now).
                if let Some(c) = slot.current().cloned() {
                    let push = BoundSessionSend {
                        actor: actor_id(actor),
                        object_generation: ObjectGeneration::new(me),
                        source_node_generation: NodeGeneration::new(me),
                        authority_owner_generation: AuthorityOwnerGeneration::new(me),
                        session_lifecycle: c.lifecycle,
                        session: c.session,
                        binding_generation: c.generation,
                        key: DispatchKey::new(1),
                    };
                    let to_node = c.session_owner.as_str()[1..].parse().unwrap_or(0);
                    self.send(to, to_node, Msg::Push { id, push });
                }
                Ok(())
            }
            Msg::Push { id, push } => {
                let lifecycle = self.nodes[to].lifecycle;
                // The sink finds the session by its SessionRid; the aggregate checks the rest.
                let Some((slot_k, s)) = self.nodes[to]
                    .sessions
                    .iter()
                    .find(|(_, s)| s.rid == push.session.get())
                else {
                    return Ok(());
                };
                let srid = s.rid;
                let _ = slot_k;
                let current = s
                    .agg
                    .find(&push.actor)
                    .is_some_and(|b| b.generation == push.binding_generation);
                let ok = self.faults.push_skips_check || s.agg.check_push(&push).is_ok();
                if !ok {
                    self.stats.pushes_refused += 1;
                    return Ok(());
                }
                if !self.pushes_done.insert(id) {
                    return Err(self.violation(format!("push {id} delivered twice")));
                }
                self.stats.pushes += 1;
                // spec: SB-5.5 — only the session that made this binding receives its push.
                let maker = self.bound_by.get(&(
                    to,
                    push.session_lifecycle.get(),
                    push.binding_generation.get(),
                ));
                // spec: SB-5.5, SB-6.3 — and only while that binding is current there (a
                // replaced or unbound binding's push is refused; this world has no notify)
                if !current {
                    return Err(self.violation(format!(
                        "push {id} of retired binding {:?} was delivered to session {srid}",
                        push.binding_generation
                    )));
                }
                if push.session_lifecycle.get() != lifecycle || maker != Some(&srid) {
                    return Err(self.violation(format!(
                        "push {id} of binding {:?} (lifecycle {}) reached session {srid} of \
                         lifecycle {lifecycle}, bound by {maker:?}",
                        push.binding_generation,
                        push.session_lifecycle.get()
                    )));
                }
                Ok(())
            }
            Msg::Replaced(rec) => {
                self.delivered_51.insert((
                    to,
                    rec.previous.lifecycle.get(),
                    rec.previous.retired_binding_generation.get(),
                ));
                self.nodes[to].last_51 = Some((Ep::Node(from), (*rec).clone()));
                self.replaced(from, to, *rec)
            }
        }
    }

    /// A 51 from `from` at `to`.
    fn replaced(
        &mut self,
        from: usize,
        to: usize,
        rec: BoundSessionReplaced,
    ) -> Result<(), Violation> {
        let now = self.instant();
        let lifecycle = self.nodes[to].lifecycle;
        let sender = (rid(from), NodeGeneration::new(self.nodes[from].lifecycle));
        let Some((&k, s)) = self.nodes[to]
            .sessions
            .iter_mut()
            .find(|(_, s)| s.rid == rec.previous.session.get())
        else {
            return Ok(());
        };
        let before: Vec<_> = s
            .agg
            .bound()
            .map(|b| (b.actor.clone(), b.generation))
            .collect();
        match s.agg.handle_replaced(now, (&sender.0, sender.1), &rec) {
            Ok(outcome) => {
                self.stats.replacements += 1;
                let seq = match outcome {
                    zlink::session::aggregate::ReplacedOutcome::Closing { seq, .. }
                    | zlink::session::aggregate::ReplacedOutcome::AlsoClosing { seq, .. } => seq,
                };
                self.queue.push(
                    self.now + CALLBACK_MS,
                    Event::CallbackDone {
                        node: to,
                        lifecycle,
                        session: k,
                        seq,
                    },
                );
                // the callback timeout's timer too
                if let Some(due) = s.agg.poll_timeout() {
                    let at = super::ms_since(self.base, due).max(self.now);
                    self.queue.push(
                        at,
                        Event::CloseTimer {
                            node: to,
                            lifecycle,
                            session: k,
                            seq,
                        },
                    );
                }
            }
            Err(_) => {
                self.stats.refused_51 += 1;
                let after: Vec<_> = s
                    .agg
                    .bound()
                    .map(|b| (b.actor.clone(), b.generation))
                    .collect();
                if before != after {
                    return Err(self.violation(format!(
                        "a refused 51 changed the bindings: {before:?} → {after:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    fn check_terminals(&self) -> Result<(), Violation> {
        for (id, b) in &self.binds {
            if b.terminals > 1 {
                return Err(self.violation(format!("bind {id} has {} terminals", b.terminals)));
            }
        }
        Ok(())
    }

    fn final_check(&self) -> Result<(), Violation> {
        self.check_terminals()?;
        // spec: SB-12 — every bind has its terminal
        for (id, b) in &self.binds {
            if b.terminals != 1 {
                return Err(self.violation(format!("bind {id} has no terminal: {b:?}")));
            }
        }
        // spec: SB-7.4, SB-6.5 — no binding of a dead session owner lifecycle survives
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.up {
                continue;
            }
            for (a, slot) in &n.slots {
                let Some(c) = slot.current() else { continue };
                let owner = c.session_owner.as_str()[1..].parse::<usize>().unwrap_or(0);
                if self
                    .dead
                    .iter()
                    .any(|(d, l, _)| *d == owner && *l == c.lifecycle.get())
                {
                    return Err(self.violation(format!(
                        "n{i}'s actor a{a} is still bound to the dead session owner n{owner} \
                         lifecycle {}",
                        c.lifecycle.get()
                    )));
                }
                // spec: SB-1.1 — the slot's binding is held by exactly that session
                let sn = &self.nodes[owner];
                let holder = sn
                    .sessions
                    .values()
                    .find(|s| s.rid == c.session.get() && sn.lifecycle == c.lifecycle.get());
                if sn.up && sn.lifecycle == c.lifecycle.get() {
                    let holds = holder.is_some_and(|s| {
                        s.agg
                            .find(&actor_id(*a))
                            .is_some_and(|b| b.generation == c.generation)
                    });
                    if !holds && holder.is_some() {
                        return Err(self.violation(format!(
                            "a{a}'s slot names binding {:?} of session {} which does not hold it",
                            c.generation,
                            c.session.get()
                        )));
                    }
                }
            }
            // no live session holds a binding of a current incarnation the slot does not name
            for s in n.sessions.values() {
                for b in s.agg.bound() {
                    let a = b.actor.as_str()[1..].parse::<usize>().unwrap_or(0);
                    let owner = a % self.s.nodes;
                    let on = &self.nodes[owner];
                    if !on.up || on.lifecycle != b.object_generation.get() {
                        continue; // an incarnation that ended: relays are refused
                    }
                    if self
                        .watch_ended
                        .contains(&(owner, a, i, n.lifecycle, b.generation.get()))
                    {
                        // a partition past the peer timeout: the actor owner ended it (its
                        // relays are refused there); the session learns it from a refusal
                        continue;
                    }
                    let key = (i, n.lifecycle, b.generation.get());
                    if self.sent_51.contains(&key) && !self.delivered_51.contains(&key) {
                        // replaced while a partition broke the connection: the 51 was lost
                        continue;
                    }
                    let current = on.slots.get(&a).and_then(|sl| sl.current());
                    let same = current.is_some_and(|c| {
                        c.session_owner == rid(i)
                            && c.lifecycle.get() == n.lifecycle
                            && c.generation == b.generation
                    });
                    if !same {
                        return Err(self.violation(format!(
                            "session {} of n{i} holds binding {:?} of a{a}, the slot has {current:?}",
                            s.rid, b.generation
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs `scenario` with `faults`; `trace` records every event.
pub fn run(scenario: &Scenario, faults: Faults, trace: bool) -> Outcome {
    let mut w = World::new(scenario, faults, trace);
    let violation = w.run().err();
    Outcome {
        violation,
        trace: w.trace.take().unwrap_or_default(),
        stats: w.stats,
    }
}
