//! The ownership world: N node processes and one Location Store on the simulated network,
//! driving the real sans-IO cores that decide ownership and routing:
//!
//! - the store core with leases, fences and CAS (`MemoryStore`, which runs `store::core` inside
//!   its lock; its clock is the virtual time);
//! - each node's owner lease state machine (`node::LeaseState`) and its lock-free standing
//!   (`actor::fence::OwnerGate`) on the node's own monotonic clock (`session::ManualClock`,
//!   running at its own rate, jumping forward when told);
//! - the owner's fence check of every call, relay and bind (`actor::fence::check_call`,
//!   `check_bind`);
//! - each caller's request correlations (`zlink_mesh::correlation::Correlations`), also for
//!   its store calls;
//! - the actor owner's binding slot (`session::BindingSlot`), one per local incarnation.
//!
//! What is written here is only the thin driver the node's tokio tasks are around these cores
//! (`node::lease::spawn_lease_renewal`, activation, the sink's call path), the scenario and
//! the invariants. [`Faults`] turn single driver rules off, to show the invariants catch it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use zlink::actor::fence::{CallFence, OwnerGate, OwnerStanding, check_bind, check_call};
use zlink::node::{LeaseState, LeaseStep};
use zlink::session::{BindingSlot, Clock as _, ManualClock, RegisteredBinding};
use zlink::store::{
    self, ActivationRequest, ActivationState, ActorLocation, ActorOwner, AuthorityFence,
    LeaseHolder, LocationStore, MemoryStore, OwnerLease, Reservation, StoreError, StoreTime,
};
use zlink_mesh::correlation::{Correlations, ReplyOutcome};
use zlink_wire::{
    ActorId, BindingGeneration, MeshName, NodeGeneration, NodeRid, OwnerId, OwnerLeaseGeneration,
    SessionLifecycleGeneration, SessionRid,
};

use super::{Delays, Envelope, Ep, Millis, Network, Queue, Rng, Violation, ms_since};

/// The owner lease TTL every node uses: the failover target of docs/RELIABILITY.md.
pub const LEASE_TTL: Duration = Duration::from_millis(1_500);
/// How long a node waits for the store's answer before it counts the call failed.
const STORE_CALL_TIMEOUT: Duration = Duration::from_millis(1_000);
/// After the scenario's last action: partitions heal, frozen nodes resume, and the run goes on
/// this long so every request can reach its terminal.
const DRAIN_MS: Millis = 6_000;
/// The store clock's epoch (any value; leases are relative to it).
const STORE_EPOCH_MS: u64 = 1_000_000;

/// Driver rules that can be switched off, each a bug the simulator must catch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The lease driver counts the local deadline from the renewal's *answer* instead of its
    /// send time (the store's expiry counts from its commit, which may be long before).
    pub deadline_from_answer: bool,
    /// A lost lease (`LeaseNotLive`) does not end the node's local incarnations.
    pub keep_incarnations_on_lease_loss: bool,
    /// The owner admits calls without reading its standing (past the local lease deadline).
    pub skip_standing_check: bool,
    /// The owner admits a relay without the binding slot's check (a retired binding's 24).
    pub relay_skips_binding_check: bool,
    /// A frozen node's clock stops while it is frozen (a suspended machine whose monotonic
    /// clock does not count the suspend), instead of running on.
    pub clock_stops_while_frozen: bool,
}

impl Faults {
    /// The fault named `name` (`SIM_FAULT`), or none for an empty name.
    pub fn named(name: &str) -> Option<Self> {
        let mut f = Self::default();
        match name {
            "" | "none" => {}
            "deadline_from_answer" => f.deadline_from_answer = true,
            "keep_incarnations_on_lease_loss" => f.keep_incarnations_on_lease_loss = true,
            "skip_standing_check" => f.skip_standing_check = true,
            "relay_skips_binding_check" => f.relay_skips_binding_check = true,
            "clock_stops_while_frozen" => f.clock_stops_while_frozen = true,
            _ => return None,
        }
        Some(f)
    }
}

/// One scheduled action of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Node asks the store to activate the actor here (`reserve_activation`, `mark_ready`).
    Activate { node: usize, actor: usize },
    /// Node sends a request to the actor (a 160 call), with this deadline.
    Call {
        node: usize,
        actor: usize,
        timeout_ms: u64,
    },
    /// Session `session` of the node binds the actor (a 38 bind).
    Bind {
        node: usize,
        session: u64,
        actor: usize,
    },
    /// The session relays to the actor with the binding it last asked for (a 24).
    Relay {
        node: usize,
        session: u64,
        actor: usize,
    },
    /// The session unbinds the actor (the 38 tombstone).
    Unbind {
        node: usize,
        session: u64,
        actor: usize,
    },
    /// The node process dies (`kill -9`) and restarts `down_ms` later with a new generation.
    Crash { node: usize, down_ms: u64 },
    /// The two endpoints cannot reach each other for `ms`.
    Partition { a: Ep, b: Ep, ms: u64 },
    /// The node stops (SIGSTOP) for `ms`, its clock running on.
    Freeze { node: usize, ms: u64 },
    /// The node's monotonic clock jumps forward by `ms`.
    ClockJump { node: usize, ms: u64 },
}

/// A run's input: everything the seed decides.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed it was generated from.
    pub seed: u64,
    /// Node processes.
    pub nodes: usize,
    /// Actors.
    pub actors: usize,
    /// Per node: its clock's rate in per mille of real time.
    pub rates: Vec<u64>,
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
        let mut r = Rng::new(seed);
        let nodes = r.range(2, 5) as usize;
        let actors = r.range(1, 4) as usize;
        // Within the lease margin (a tenth of the TTL) of real time, both ways.
        let rates = (0..nodes).map(|_| r.range(960, 1040)).collect();
        let delays = Delays {
            base_ms: r.range(1, 10),
            slow_permille: r.below(60),
            slow_ms: r.range(100, 2_500),
        };
        let end_ms = r.range(4_000, 9_000);
        let count = r.range(15, 70);
        let mut actions = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let at = r.below(end_ms);
            let node = r.below(nodes as u64) as usize;
            let actor = r.below(actors as u64) as usize;
            let session = r.below(2);
            let roll = r.below(1000);
            let action = match roll {
                0..=179 => Action::Activate { node, actor },
                180..=499 => Action::Call {
                    node,
                    actor,
                    timeout_ms: r.range(100, 2_000),
                },
                500..=619 => Action::Bind {
                    node,
                    session,
                    actor,
                },
                620..=769 => Action::Relay {
                    node,
                    session,
                    actor,
                },
                770..=819 => Action::Unbind {
                    node,
                    session,
                    actor,
                },
                820..=869 => Action::Crash {
                    node,
                    down_ms: r.range(50, 3_000),
                },
                870..=929 => {
                    let b = if r.chance(500) {
                        Ep::Store
                    } else {
                        Ep::Node((node + 1 + r.below(nodes as u64 - 1) as usize) % nodes)
                    };
                    Action::Partition {
                        a: Ep::Node(node),
                        b,
                        ms: r.range(100, 4_000),
                    }
                }
                930..=969 => Action::Freeze {
                    node,
                    ms: r.range(100, 3_000),
                },
                _ => Action::ClockJump {
                    node,
                    ms: r.range(50, 2_000),
                },
            };
            actions.push((at, action));
        }
        actions.sort_by_key(|(at, _)| *at);
        Self {
            seed,
            nodes,
            actors,
            rates,
            delays,
            end_ms,
            actions,
        }
    }
}

/// What a run counted (for docs/RELIABILITY.md and to see that a run did something).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Events handled.
    pub steps: u64,
    /// Requests issued.
    pub requests: u64,
    /// Requests the owner admitted and served.
    pub served: u64,
    /// Requests refused by the owner's fence check.
    pub refused: u64,
    /// Requests ended by timeout, peer loss or the caller's crash.
    pub unanswered: u64,
    /// Replies that arrived after their request had ended (recorded, never delivered).
    pub late_replies: u64,
    /// Activations won by taking over an actor whose owner's lease had ended.
    pub takeovers: u64,
    /// Owner leases lost (`LeaseNotLive`) and registered again.
    pub leases_lost: u64,
    /// Relays admitted / refused by the binding slot.
    pub relays_admitted: u64,
    /// Relays refused by the binding slot.
    pub relays_refused: u64,
    /// Messages lost to broken links.
    pub dropped: u64,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Self) {
        self.steps += o.steps;
        self.requests += o.requests;
        self.served += o.served;
        self.refused += o.refused;
        self.unanswered += o.unanswered;
        self.late_replies += o.late_replies;
        self.takeovers += o.takeovers;
        self.leases_lost += o.leases_lost;
        self.relays_admitted += o.relays_admitted;
        self.relays_refused += o.relays_refused;
        self.dropped += o.dropped;
    }
}

/// A run's result.
pub type Outcome = super::Outcome<Stats>;

/// The ownership world as the frame's seed runner, shrinker and replay see it.
pub struct Ownership;

impl super::World for Ownership {
    const NAME: &'static str = "ownership";
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

/// Runs `scenario` with `faults`; `trace` records every event.
pub fn run(scenario: &Scenario, faults: Faults, trace: bool) -> Outcome {
    let mut w = World::new(scenario, faults, trace);
    let violation = w.run(scenario).err();
    w.stats.dropped = w.net.dropped;
    Outcome {
        violation,
        trace: w.trace.unwrap_or_default(),
        stats: w.stats,
    }
}

// ---------------------------------------------------------------------------------------------

/// A store operation as a node sends it.
#[derive(Debug)]
enum StoreReq {
    Register(NodeRid, NodeGeneration),
    Renew(LeaseHolder),
    Reserve(ActivationRequest),
    MarkReady(ActorId, AuthorityFence),
    Lookup(ActorId),
}

/// The store's answer.
#[derive(Debug)]
enum StoreResp {
    Lease(Result<OwnerLease, StoreError>),
    Reserve(Result<Reservation, StoreError>),
    Location(Result<ActorLocation, StoreError>),
    Lookup(Result<Option<ActorLocation>, StoreError>),
}

/// A binding identity as a 24 / 38 tombstone carries it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Identity {
    node: usize,
    lifecycle: u64,
    generation: u64,
}

#[derive(Debug)]
enum Body {
    StoreReq {
        id: u64,
        req: StoreReq,
    },
    StoreResp {
        id: u64,
        resp: StoreResp,
    },
    /// A 160 request (or a 24 relay when `relay` is set) to the owner of `target_gen`.
    Call {
        id: u64,
        fence: CallFence,
        target_gen: u64,
        relay: Option<Identity>,
    },
    CallResp {
        id: u64,
        ok: bool,
    },
    Bind {
        binding: RegisteredBinding,
        fence: CallFence,
        target_gen: u64,
    },
    Tombstone {
        identity: Identity,
        fence: CallFence,
        target_gen: u64,
    },
}

enum Event {
    Act(Action),
    Deliver(Envelope<(u64, Body)>),
    Wake(usize, u64),
    Restart(usize),
    Heal(Ep, Ep),
    Thaw(usize),
    PeerDown {
        at: usize,
        peer: usize,
        generation: u64,
    },
}

/// What waits for a store answer on a node.
#[derive(Debug)]
enum StoreWait {
    /// A lease operation sent at this instant of the node's clock.
    Lease {
        registering: bool,
    },
    Reserve(usize),
    Ready(usize),
    Lookup(usize, Vec<Pending>),
}

/// What a lookup was for.
#[derive(Clone, Debug)]
enum Pending {
    Call { timeout_ms: u64 },
    Bind { session: u64 },
}

/// One local incarnation of an actor on its owner node.
#[derive(Debug)]
struct Incarnation {
    fence: CallFence,
    slot: BindingSlot,
}

/// Key of a request across the run: (caller node, caller generation, id).
type RequestKey = (usize, u64, u64);

struct Node {
    rid: NodeRid,
    generation: u64,
    alive: bool,
    frozen_until: Option<Millis>,
    inbox: Vec<Event>,
    clock: ManualClock,
    clock_dyn: Arc<dyn zlink::session::Clock>,
    base: Instant,
    local_ms: u64,
    offset_ms: i64,
    rate: u64,
    lease: Option<LeaseState>,
    gate: Option<OwnerGate>,
    lease_op: Option<u64>,
    /// The first registration of this process was sent at this instant.
    register_sent: Option<Instant>,
    /// No lease yet and the registration failed: try again at this instant.
    register_retry: Option<Instant>,
    store_calls: Correlations<(), StoreWait>,
    calls: Correlations<(usize, u64), ()>,
    incarnations: BTreeMap<usize, Incarnation>,
    activating: BTreeSet<usize>,
    known: BTreeMap<usize, ActorLocation>,
    /// Per (session, actor): the binding this node's session last asked for.
    sessions: BTreeMap<(u64, usize), RegisteredBinding>,
    next_binding: u64,
    next_id: u64,
    wakes: BTreeSet<Millis>,
}

impl Node {
    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn standing(&self) -> OwnerStanding {
        self.gate
            .as_ref()
            .map_or(OwnerStanding::Lapsed, OwnerGate::standing)
    }

    fn holder(&self) -> Option<LeaseHolder> {
        self.lease.as_ref().map(|l| l.lease().holder.clone())
    }

    /// The virtual time at which this node's clock reads `at` (approximately; the wake
    /// handler re-checks).
    fn sim_time_of(&self, at: Instant, now: Millis) -> Millis {
        let local = ms_since(self.base, at) as i64 + 1;
        let real = ((local - self.offset_ms).max(0) as u64 * 1000).div_ceil(self.rate);
        real.max(now + 1)
    }

    fn next_wake(&self) -> Option<Instant> {
        let lease = match (&self.lease, self.lease_op) {
            (Some(l), None) => Some(l.next_renewal()),
            (None, None) => self.register_retry,
            _ => None,
        };
        [
            lease,
            self.store_calls.poll_timeout(),
            self.calls.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

struct World {
    faults: Faults,
    t: Millis,
    q: Queue<Event>,
    net: Network,
    store: MemoryStore,
    store_clock: store::ManualClock,
    nodes: Vec<Node>,
    actor_ids: Vec<ActorId>,
    mesh: MeshName,
    trace: Option<Vec<String>>,
    stats: Stats,
    // Oracles.
    /// Lease rows as the store wrote them (only register / renew / release write them).
    leases: BTreeMap<usize, OwnerLease>,
    /// Per actor: the highest (object generation, authority, version) the store has shown.
    high: BTreeMap<usize, (u64, u64, u64)>,
    /// Terminals per request.
    terminals: BTreeMap<RequestKey, u32>,
    served: BTreeSet<RequestKey>,
    /// Per (actor, authority): binding identities that were current and are no more.
    retired: BTreeSet<(usize, u64, Identity)>,
    draining: bool,
}

macro_rules! tr {
    ($w:expr, $($arg:tt)*) => {
        if let Some(t) = $w.trace.as_mut() {
            let line = format!($($arg)*);
            t.push(format!("{:>6}ms {}", $w.t, line));
        }
    };
}

fn poll_now<T>(f: impl Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store answers at once"),
    }
}

fn fence_of(loc: &ActorLocation) -> CallFence {
    CallFence {
        actor_id: loc.actor_id.clone(),
        object_generation: loc.object_generation,
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        node_generation: loc.node_generation,
    }
}

fn node_index(rid: &NodeRid) -> usize {
    rid.as_str()[1..].parse().expect("n<index>")
}

impl World {
    fn new(s: &Scenario, faults: Faults, trace: bool) -> Self {
        let store_clock = store::ManualClock::at_wall(StoreTime::from_millis(STORE_EPOCH_MS));
        let nodes = (0..s.nodes)
            .map(|i| {
                let clock = ManualClock::new();
                let base = clock.now();
                Node {
                    rid: NodeRid::new(format!("n{i}")).unwrap(),
                    generation: 0,
                    alive: false,
                    frozen_until: None,
                    inbox: Vec::new(),
                    clock_dyn: Arc::new(clock.clone()),
                    clock,
                    base,
                    local_ms: 0,
                    offset_ms: 0,
                    rate: s.rates[i],
                    lease: None,
                    gate: None,
                    lease_op: None,
                    register_sent: None,
                    register_retry: None,
                    store_calls: Correlations::new(),
                    calls: Correlations::new(),
                    incarnations: BTreeMap::new(),
                    activating: BTreeSet::new(),
                    known: BTreeMap::new(),
                    sessions: BTreeMap::new(),
                    next_binding: 0,
                    next_id: 0,
                    wakes: BTreeSet::new(),
                }
            })
            .collect();
        Self {
            faults,
            t: 0,
            q: Queue::default(),
            net: Network::new(s.seed, s.delays),
            store: MemoryStore::with_clock(Arc::new(store_clock.clone())),
            store_clock,
            nodes,
            actor_ids: (0..s.actors)
                .map(|a| ActorId::new(format!("a{a}")).unwrap())
                .collect(),
            mesh: MeshName::new("sim").unwrap(),
            trace: trace.then(Vec::new),
            stats: Stats::default(),
            leases: BTreeMap::new(),
            high: BTreeMap::new(),
            terminals: BTreeMap::new(),
            served: BTreeSet::new(),
            retired: BTreeSet::new(),
            draining: false,
        }
    }

    fn violation(&self, what: impl Into<String>) -> Violation {
        Violation {
            at: self.t,
            what: what.into(),
        }
    }

    fn run(&mut self, s: &Scenario) -> Result<(), Violation> {
        for i in 0..self.nodes.len() {
            self.start_node(i);
        }
        for (at, a) in &s.actions {
            self.q.push(*at, Event::Act(a.clone()));
        }
        let end = s.end_ms;
        while let Some((at, ev)) = self.q.pop_until(end + DRAIN_MS) {
            if at >= end && !self.draining {
                self.begin_drain();
            }
            self.t = at;
            self.advance_clocks();
            self.stats.steps += 1;
            self.handle(ev)?;
            self.check_step()?;
        }
        self.t = end + DRAIN_MS;
        self.check_end()
    }

    /// The scenario is over: faults end, so everything in flight can reach its end.
    fn begin_drain(&mut self) {
        self.draining = true;
        self.net.heal_all();
        for i in 0..self.nodes.len() {
            if self.nodes[i].frozen_until.is_some() {
                self.q.push(self.t, Event::Thaw(i));
            }
        }
        tr!(self, "drain: partitions healed, frozen nodes resume");
    }

    fn advance_clocks(&mut self) {
        let t = self.t;
        let stops = self.faults.clock_stops_while_frozen;
        for n in &mut self.nodes {
            if stops && n.frozen_until.is_some() {
                continue;
            }
            let target = (n.offset_ms + (t * n.rate / 1000) as i64).max(0) as u64;
            if target > n.local_ms {
                n.clock.advance(Duration::from_millis(target - n.local_ms));
                n.local_ms = target;
            }
        }
    }

    // --- events ---------------------------------------------------------------------------

    fn handle(&mut self, ev: Event) -> Result<(), Violation> {
        // A frozen node handles nothing until it resumes; what reaches it waits, in order.
        let target = match &ev {
            Event::Deliver(env) => match env.to {
                Ep::Node(i) => Some(i),
                Ep::Store => None,
            },
            Event::Wake(i, _) | Event::PeerDown { at: i, .. } => Some(*i),
            _ => None,
        };
        if let Some(i) = target
            && self.nodes[i].frozen_until.is_some()
        {
            self.nodes[i].inbox.push(ev);
            return Ok(());
        }
        match ev {
            Event::Act(a) => self.act(a),
            Event::Deliver(env) => self.deliver(env),
            Event::Wake(i, at) => {
                self.nodes[i].wakes.remove(&at);
                self.wake(i)
            }
            Event::Restart(i) => {
                self.start_node(i);
                Ok(())
            }
            Event::Heal(a, b) => {
                tr!(self, "heal {a} - {b}");
                self.net.heal(a, b);
                Ok(())
            }
            Event::Thaw(i) => self.thaw(i),
            Event::PeerDown {
                at,
                peer,
                generation,
            } => {
                if !self.nodes[at].alive {
                    return Ok(());
                }
                let mut lost = self.nodes[at].calls.handle_peer_lost(&(peer, generation));
                lost.sort_by_key(|(id, _)| *id);
                tr!(
                    self,
                    "n{at}: peer n{peer} gen {generation} down, {} requests lost",
                    lost.len()
                );
                let g = self.nodes[at].generation;
                for (id, ()) in lost {
                    self.stats.unanswered += 1;
                    self.terminal((at, g, id))?;
                }
                Ok(())
            }
        }
    }

    fn thaw(&mut self, i: usize) -> Result<(), Violation> {
        let Some(_) = self.nodes[i].frozen_until.take() else {
            return Ok(());
        };
        if self.faults.clock_stops_while_frozen {
            let n = &mut self.nodes[i];
            n.offset_ms = n.local_ms as i64 - (self.t * n.rate / 1000) as i64;
        }
        tr!(self, "n{i}: resumes");
        let inbox = std::mem::take(&mut self.nodes[i].inbox);
        for ev in inbox {
            self.handle(ev)?;
            self.check_step()?;
        }
        self.schedule_wake(i);
        Ok(())
    }

    fn act(&mut self, a: Action) -> Result<(), Violation> {
        if self.draining {
            return Ok(());
        }
        match a {
            Action::Activate { node, actor } => {
                let n = &self.nodes[node];
                if !n.alive
                    || n.frozen_until.is_some()
                    || n.incarnations.contains_key(&actor)
                    || n.activating.contains(&actor)
                {
                    return Ok(());
                }
                let Some(holder) = n.holder() else {
                    return Ok(());
                };
                let req = ActivationRequest {
                    actor_id: self.actor_ids[actor].clone(),
                    actor_type: "T".into(),
                    owner: ActorOwner {
                        mesh: self.mesh.clone(),
                        holder,
                    },
                };
                tr!(self, "n{node}: activate a{actor}");
                self.nodes[node].activating.insert(actor);
                self.store_call(node, StoreReq::Reserve(req), StoreWait::Reserve(actor));
            }
            Action::Call {
                node,
                actor,
                timeout_ms,
            } => self.begin(node, actor, Pending::Call { timeout_ms })?,
            Action::Bind {
                node,
                session,
                actor,
            } => self.begin(node, actor, Pending::Bind { session })?,
            Action::Relay {
                node,
                session,
                actor,
            } => {
                let n = &self.nodes[node];
                if !n.alive || n.frozen_until.is_some() {
                    return Ok(());
                }
                let Some(b) = n.sessions.get(&(session, actor)).cloned() else {
                    return Ok(());
                };
                let Some(loc) = n.known.get(&actor).cloned() else {
                    return Ok(());
                };
                self.issue_call(node, &loc, 1_000, Some(identity_of(&b)))?;
            }
            Action::Unbind {
                node,
                session,
                actor,
            } => {
                let n = &mut self.nodes[node];
                if !n.alive || n.frozen_until.is_some() {
                    return Ok(());
                }
                let Some(b) = n.sessions.remove(&(session, actor)) else {
                    return Ok(());
                };
                let Some(loc) = n.known.get(&actor).cloned() else {
                    return Ok(());
                };
                tr!(
                    self,
                    "n{node}: s{session} unbinds a{actor} (binding {})",
                    b.generation
                );
                let body = Body::Tombstone {
                    identity: identity_of(&b),
                    fence: fence_of(&loc),
                    target_gen: loc.node_generation.get(),
                };
                self.send(Ep::Node(node), Ep::Node(node_index(&loc.owner_node)), body);
            }
            Action::Crash { node, down_ms } => {
                if !self.nodes[node].alive {
                    return Ok(());
                }
                self.crash(node)?;
                self.q.push(self.t + down_ms, Event::Restart(node));
            }
            Action::Partition { a, b, ms } => {
                tr!(self, "partition {a} - {b} for {ms}ms");
                self.net.partition(a, b);
                self.q.push(self.t + ms, Event::Heal(a, b));
            }
            Action::Freeze { node, ms } => {
                if self.nodes[node].frozen_until.is_none() && self.nodes[node].alive {
                    tr!(self, "n{node}: frozen for {ms}ms");
                    self.nodes[node].frozen_until = Some(self.t + ms);
                    self.q.push(self.t + ms, Event::Thaw(node));
                }
            }
            Action::ClockJump { node, ms } => {
                tr!(self, "n{node}: clock jumps {ms}ms forward");
                self.nodes[node].offset_ms += ms as i64;
                self.advance_clocks();
                self.schedule_wake(node);
            }
        }
        Ok(())
    }

    /// A call or bind to `actor`: at the owner this node knows, or after a lookup.
    fn begin(&mut self, node: usize, actor: usize, p: Pending) -> Result<(), Violation> {
        let n = &self.nodes[node];
        if !n.alive || n.frozen_until.is_some() {
            return Ok(());
        }
        match n.known.get(&actor).cloned() {
            Some(loc) => self.proceed(node, &loc, p),
            None => {
                let id = self.actor_ids[actor].clone();
                self.store_call(
                    node,
                    StoreReq::Lookup(id),
                    StoreWait::Lookup(actor, vec![p]),
                );
                Ok(())
            }
        }
    }

    fn proceed(&mut self, node: usize, loc: &ActorLocation, p: Pending) -> Result<(), Violation> {
        match p {
            Pending::Call { timeout_ms } => self.issue_call(node, loc, timeout_ms, None),
            Pending::Bind { session } => {
                let actor = self.actor_index(&loc.actor_id);
                let n = &mut self.nodes[node];
                n.next_binding += 1;
                let binding = RegisteredBinding {
                    session_owner: n.rid.clone(),
                    lifecycle: SessionLifecycleGeneration::new(n.generation),
                    owner_id: OwnerId::new(1),
                    owner_lease: n
                        .holder()
                        .map_or(OwnerLeaseGeneration::new(0), |h| h.lease_generation),
                    session: SessionRid::new(node as u64 * 100 + session),
                    generation: BindingGeneration::new(n.next_binding),
                };
                n.sessions.insert((session, actor), binding.clone());
                tr!(
                    self,
                    "n{node}: s{session} binds a{actor} (binding {})",
                    binding.generation
                );
                let body = Body::Bind {
                    binding,
                    fence: fence_of(loc),
                    target_gen: loc.node_generation.get(),
                };
                self.send(Ep::Node(node), Ep::Node(node_index(&loc.owner_node)), body);
                Ok(())
            }
        }
    }

    fn issue_call(
        &mut self,
        node: usize,
        loc: &ActorLocation,
        timeout_ms: u64,
        relay: Option<Identity>,
    ) -> Result<(), Violation> {
        let owner = node_index(&loc.owner_node);
        let n = &mut self.nodes[node];
        n.next_id += 1;
        let id = n.next_id;
        let deadline = n.now() + Duration::from_millis(timeout_ms);
        let peer = (owner, loc.node_generation.get());
        if n.calls.register(id, peer, deadline, ()).is_err() {
            return Err(self.violation(format!("n{node}: request id {id} issued twice")));
        }
        let key = (node, n.generation, id);
        self.terminals.insert(key, 0);
        self.stats.requests += 1;
        tr!(
            self,
            "n{node}: request {id} to a{} at n{owner} gen {}{}",
            &loc.actor_id.as_str()[1..],
            loc.node_generation,
            if relay.is_some() { " (relay)" } else { "" }
        );
        let body = Body::Call {
            id,
            fence: fence_of(loc),
            target_gen: loc.node_generation.get(),
            relay,
        };
        self.send(Ep::Node(node), Ep::Node(owner), body);
        self.schedule_wake(node);
        Ok(())
    }

    fn actor_index(&self, id: &ActorId) -> usize {
        id.as_str()[1..].parse().expect("a<index>")
    }

    fn send(&mut self, from: Ep, to: Ep, body: Body) {
        let gen_from = match from {
            Ep::Node(i) => self.nodes[i].generation,
            Ep::Store => 0,
        };
        match self.net.send(self.t, from, to, (gen_from, body)) {
            Some((at, env)) => self.q.push(at, Event::Deliver(env)),
            None => tr!(self, "{from} -> {to}: dropped (partition)"),
        }
    }

    fn store_call(&mut self, node: usize, req: StoreReq, wait: StoreWait) -> u64 {
        let n = &mut self.nodes[node];
        n.next_id += 1;
        let id = n.next_id;
        let deadline = n.now() + STORE_CALL_TIMEOUT;
        n.store_calls
            .register(id, (), deadline, wait)
            .expect("fresh id");
        self.send(Ep::Node(node), Ep::Store, Body::StoreReq { id, req });
        self.schedule_wake(node);
        id
    }

    fn schedule_wake(&mut self, i: usize) {
        let n = &self.nodes[i];
        if !n.alive {
            return;
        }
        let Some(at) = n.next_wake() else { return };
        let t = n.sim_time_of(at, self.t);
        if self.nodes[i].wakes.insert(t) {
            self.q.push(t, Event::Wake(i, t));
        }
    }

    // --- node lifecycle -------------------------------------------------------------------

    fn start_node(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.generation += 1;
        n.alive = true;
        n.frozen_until = None;
        n.inbox.clear();
        n.lease = None;
        n.gate = None;
        n.lease_op = None;
        n.register_sent = Some(n.now());
        n.register_retry = None;
        n.store_calls = Correlations::new();
        n.calls = Correlations::new();
        n.incarnations.clear();
        n.activating.clear();
        n.known.clear();
        n.sessions.clear();
        n.next_binding = 0;
        n.next_id = 0;
        n.wakes.clear();
        let (rid, g) = (n.rid.clone(), NodeGeneration::new(n.generation));
        tr!(self, "n{i}: starts, generation {g}");
        let id = self.store_call(
            i,
            StoreReq::Register(rid, g),
            StoreWait::Lease { registering: true },
        );
        self.nodes[i].lease_op = Some(id);
    }

    fn crash(&mut self, i: usize) -> Result<(), Violation> {
        let g = self.nodes[i].generation;
        tr!(self, "n{i}: crashes (generation {g})");
        // Its own pending requests end with the process (their caller is gone too).
        let far = self.nodes[i].now() + Duration::from_secs(86_400);
        let mut ended = self.nodes[i].calls.handle_timeout(far);
        ended.sort_by_key(|(id, _)| *id);
        for (id, ()) in ended {
            self.stats.unanswered += 1;
            self.terminal((i, g, id))?;
        }
        let n = &mut self.nodes[i];
        n.alive = false;
        n.frozen_until = None;
        n.inbox.clear();
        n.incarnations.clear();
        n.gate = None;
        n.lease = None;
        self.net.reset(Ep::Node(i));
        // Peers notice after their liveness timeout.
        for j in 0..self.nodes.len() {
            if j != i {
                let after = 100 + super::mix(self.t, (i * 31 + j) as u64) % 400;
                self.q.push(
                    self.t + after,
                    Event::PeerDown {
                        at: j,
                        peer: i,
                        generation: g,
                    },
                );
            }
        }
        Ok(())
    }

    // --- deliveries -----------------------------------------------------------------------

    fn deliver(&mut self, env: Envelope<(u64, Body)>) -> Result<(), Violation> {
        if !self.net.accept(&env) {
            tr!(
                self,
                "{} -> {}: lost in flight (link broke)",
                env.from,
                env.to
            );
            return Ok(());
        }
        let (from, to) = (env.from, env.to);
        let (from_gen, body) = env.msg;
        match to {
            Ep::Store => {
                let Ep::Node(i) = from else { return Ok(()) };
                let Body::StoreReq { id, req } = body else {
                    return Ok(());
                };
                let resp = self.execute(i, req)?;
                let reply = Body::StoreResp { id, resp };
                match self.net.send(self.t, Ep::Store, from, (from_gen, reply)) {
                    Some((at, env)) => self.q.push(at, Event::Deliver(env)),
                    None => tr!(self, "store -> {from}: answer dropped (partition)"),
                }
                Ok(())
            }
            Ep::Node(i) => {
                // The mesh authenticates the peer's generation; records for a process that is
                // gone never reach its successor.
                if !self.nodes[i].alive {
                    return Ok(());
                }
                match body {
                    Body::StoreResp { id, resp } => {
                        if from_gen != self.nodes[i].generation {
                            return Ok(());
                        }
                        self.store_answer(i, id, resp)
                    }
                    Body::Call {
                        id,
                        fence,
                        target_gen,
                        relay,
                    } => {
                        if target_gen != self.nodes[i].generation {
                            tr!(
                                self,
                                "n{i}: request {id} for generation {target_gen} dropped"
                            );
                            return Ok(());
                        }
                        let Ep::Node(caller) = from else {
                            return Ok(());
                        };
                        self.owner_call(i, caller, from_gen, id, &fence, relay)
                    }
                    Body::CallResp { id, ok } => {
                        let Ep::Node(owner) = from else { return Ok(()) };
                        self.call_answer(i, owner, from_gen, id, ok)
                    }
                    Body::Bind {
                        binding,
                        fence,
                        target_gen,
                    } => {
                        if target_gen == self.nodes[i].generation {
                            self.owner_bind(i, binding, &fence);
                        }
                        Ok(())
                    }
                    Body::Tombstone {
                        identity,
                        fence,
                        target_gen,
                    } => {
                        if target_gen == self.nodes[i].generation {
                            self.owner_tombstone(i, &identity, &fence)?;
                        }
                        Ok(())
                    }
                    Body::StoreReq { .. } => Ok(()),
                }
            }
        }
    }

    /// The store executes `req` from node `i` at the current virtual time.
    fn execute(&mut self, i: usize, req: StoreReq) -> Result<StoreResp, Violation> {
        self.store_clock
            .set_wall(StoreTime::from_millis(STORE_EPOCH_MS + self.t));
        let s = &self.store;
        let ttl = LEASE_TTL;
        let resp = match req {
            StoreReq::Register(rid, g) => {
                let r = poll_now(s.register_owner(rid, g, ttl));
                if let Ok(l) = &r {
                    self.leases.insert(i, l.clone());
                }
                tr!(self, "store: register n{i} -> {}", lease_text(&r));
                StoreResp::Lease(r)
            }
            StoreReq::Renew(h) => {
                let r = poll_now(s.renew_owner(h, ttl));
                if let Ok(l) = &r {
                    self.leases.insert(i, l.clone());
                }
                tr!(self, "store: renew n{i} -> {}", lease_text(&r));
                StoreResp::Lease(r)
            }
            StoreReq::Reserve(req) => {
                let before = poll_now(s.lookup(req.actor_id.clone())).ok().flatten();
                let r = poll_now(s.reserve_activation(req));
                if let (Ok(Reservation::Won(_)), Some(_)) = (&r, &before) {
                    self.stats.takeovers += 1;
                }
                tr!(
                    self,
                    "store: reserve by n{i} -> {}",
                    match &r {
                        Ok(Reservation::Won(l)) =>
                            format!("won (authority {})", l.authority_owner_generation),
                        Ok(Reservation::Held(l)) => format!("held by {}", l.owner_node),
                        Err(e) => format!("{e}"),
                    }
                );
                StoreResp::Reserve(r)
            }
            StoreReq::MarkReady(id, f) => {
                let r = poll_now(s.mark_ready(id, f));
                tr!(
                    self,
                    "store: mark_ready by n{i} -> {}",
                    match &r {
                        Ok(_) => "ready".to_string(),
                        Err(e) => format!("{e}"),
                    }
                );
                StoreResp::Location(r)
            }
            StoreReq::Lookup(id) => StoreResp::Lookup(poll_now(s.lookup(id))),
        };
        Ok(resp)
    }

    fn store_answer(&mut self, i: usize, id: u64, resp: StoreResp) -> Result<(), Violation> {
        let wait = match self.nodes[i].store_calls.handle_reply(id, &()) {
            ReplyOutcome::Deliver(w) => w,
            ReplyOutcome::Late(_) => {
                self.stats.late_replies += 1;
                tr!(self, "n{i}: late store answer {id} ignored");
                return Ok(());
            }
            other => {
                return Err(self.violation(format!("n{i}: store answer {id}: {other:?}")));
            }
        };
        match (wait, resp) {
            (StoreWait::Lease { registering }, StoreResp::Lease(r)) => {
                let r =
                    r.map_err(|e| (matches!(e, StoreError::LeaseNotLive { .. }), e.to_string()));
                self.lease_answer(i, registering, r);
            }
            (StoreWait::Reserve(actor), StoreResp::Reserve(r)) => match r {
                Ok(Reservation::Won(loc)) => {
                    let id = loc.actor_id.clone();
                    self.store_call(
                        i,
                        StoreReq::MarkReady(id, loc.fence()),
                        StoreWait::Ready(actor),
                    );
                }
                Ok(Reservation::Held(loc)) => {
                    self.nodes[i].activating.remove(&actor);
                    if loc.state == ActivationState::Ready {
                        self.nodes[i].known.insert(actor, loc);
                    }
                }
                Err(_) => {
                    self.nodes[i].activating.remove(&actor);
                }
            },
            (StoreWait::Ready(actor), StoreResp::Location(r)) => {
                self.nodes[i].activating.remove(&actor);
                if let Ok(loc) = r {
                    self.install(i, actor, loc);
                }
            }
            (StoreWait::Lookup(actor, pending), StoreResp::Lookup(r)) => {
                if let Ok(Some(loc)) = r
                    && loc.state == ActivationState::Ready
                {
                    self.nodes[i].known.insert(actor, loc.clone());
                    for p in pending {
                        self.proceed(i, &loc, p)?;
                    }
                }
            }
            (w, r) => return Err(self.violation(format!("n{i}: answer {r:?} for {w:?}"))),
        }
        self.schedule_wake(i);
        Ok(())
    }

    /// The activation committed Ready: the incarnation is published on this node, under the
    /// lease it was reserved with, if this node still holds that lease.
    fn install(&mut self, i: usize, actor: usize, loc: ActorLocation) {
        let n = &mut self.nodes[i];
        let current = n.holder().map(|h| h.lease_generation);
        if loc.node_generation.get() != n.generation || current != Some(loc.owner_lease_generation)
        {
            tr!(
                self,
                "n{i}: a{actor} ready under a lease it no longer holds: not served"
            );
            return;
        }
        tr!(
            self,
            "n{i}: a{actor} active (authority {}, lease {})",
            loc.authority_owner_generation,
            loc.owner_lease_generation
        );
        n.incarnations.insert(
            actor,
            Incarnation {
                fence: fence_of(&loc),
                slot: BindingSlot::default(),
            },
        );
        n.known.insert(actor, loc);
    }

    /// The lease driver (`node::lease`'s renewal task): the store answered a lease call.
    /// `r`: the new lease, or whether the store said `LeaseNotLive` and what it said.
    fn lease_answer(&mut self, i: usize, registering: bool, r: Result<OwnerLease, (bool, String)>) {
        let faults = self.faults;
        let n = &mut self.nodes[i];
        n.lease_op = None;
        let now = n.now();
        match (r, n.lease.as_mut()) {
            (Ok(l), None) => {
                // The first registration of this process: the lease counts from its send.
                let sent = n.register_sent.take().unwrap_or(now);
                let state = LeaseState::new(l, LEASE_TTL, sent);
                n.gate = Some(OwnerGate::new(n.clock_dyn.clone(), state.deadline()));
                n.lease = Some(state);
                tr!(self, "n{i}: lease registered");
            }
            (Ok(l), Some(state)) => {
                if registering {
                    state.handle_registered(l);
                } else {
                    if faults.deadline_from_answer {
                        let _ = state.handle_timer(now);
                    }
                    state.handle_renewed(l);
                }
            }
            (Err((_, e)), None) => {
                tr!(self, "n{i}: registration failed: {e}");
                // Try again soon.
                n.register_retry = Some(now + LEASE_TTL / 10);
            }
            (Err((not_live, e)), Some(state)) => {
                let lost = state.handle_failed(now, not_live);
                if lost {
                    self.stats.leases_lost += 1;
                    if !faults.keep_incarnations_on_lease_loss {
                        n.incarnations.clear();
                    }
                    tr!(self, "n{i}: lease lost ({e}): every local incarnation ends");
                }
            }
        }
        self.publish_deadline(i);
    }

    fn publish_deadline(&mut self, i: usize) {
        let n = &self.nodes[i];
        if let (Some(l), Some(g)) = (&n.lease, &n.gate) {
            g.set_deadline(l.deadline());
        }
    }

    /// Timers of node `i`: store and request timeouts, the lease renewal.
    fn wake(&mut self, i: usize) -> Result<(), Violation> {
        if !self.nodes[i].alive {
            return Ok(());
        }
        let now = self.nodes[i].now();
        let mut timed_out = self.nodes[i].store_calls.handle_timeout(now);
        timed_out.sort_by_key(|(id, _)| *id);
        for (id, w) in timed_out {
            tr!(self, "n{i}: store call {id} timed out");
            match w {
                StoreWait::Lease { .. } => {
                    self.lease_answer(i, false, Err((false, "no answer".into())));
                }
                StoreWait::Reserve(a) | StoreWait::Ready(a) => {
                    self.nodes[i].activating.remove(&a);
                }
                StoreWait::Lookup(..) => {}
            }
        }
        let mut expired = self.nodes[i].calls.handle_timeout(now);
        expired.sort_by_key(|(id, _)| *id);
        let g = self.nodes[i].generation;
        for (id, ()) in expired {
            tr!(self, "n{i}: request {id} timed out");
            self.stats.unanswered += 1;
            self.terminal((i, g, id))?;
        }
        // The renewal timer.
        let n = &mut self.nodes[i];
        if n.lease_op.is_none() {
            if n.lease.is_none() && n.register_retry.is_some_and(|at| at <= now) {
                n.register_retry = None;
                let (rid, g) = (n.rid.clone(), NodeGeneration::new(n.generation));
                n.register_sent = Some(now);
                let id = self.store_call(
                    i,
                    StoreReq::Register(rid, g),
                    StoreWait::Lease { registering: true },
                );
                self.nodes[i].lease_op = Some(id);
            } else if let Some(state) = n.lease.as_mut()
                && state.next_renewal() <= now
            {
                let (req, registering) = match state.handle_timer(now) {
                    LeaseStep::Renew(h) => (StoreReq::Renew(h), false),
                    LeaseStep::Register => (
                        StoreReq::Register(n.rid.clone(), NodeGeneration::new(n.generation)),
                        true,
                    ),
                };
                let id = self.store_call(i, req, StoreWait::Lease { registering });
                self.nodes[i].lease_op = Some(id);
            }
        }
        self.schedule_wake(i);
        Ok(())
    }

    // --- the owner's side -----------------------------------------------------------------

    fn owner_call(
        &mut self,
        i: usize,
        caller: usize,
        caller_gen: u64,
        id: u64,
        fence: &CallFence,
        relay: Option<Identity>,
    ) -> Result<(), Violation> {
        let actor = self.actor_index(&fence.actor_id);
        let n = &self.nodes[i];
        let standing = if self.faults.skip_standing_check {
            OwnerStanding::Serving
        } else {
            n.standing()
        };
        let inc = n.incarnations.get(&actor);
        let mut verdict = check_call(
            standing,
            NodeGeneration::new(n.generation),
            inc.map(|c| &c.fence),
            None,
            fence,
        )
        .map_err(|e| e.to_string());
        if let (Ok(()), Some(r), Some(inc)) = (&verdict, &relay, inc)
            && !self.faults.relay_skips_binding_check
        {
            verdict = inc
                .slot
                .check_relay(
                    &self.nodes[r.node].rid,
                    SessionLifecycleGeneration::new(r.lifecycle),
                    BindingGeneration::new(r.generation),
                )
                .map_err(|e| format!("{e:?}"));
        }
        let ok = verdict.is_ok();
        match verdict {
            Ok(()) => {
                let key = (caller, caller_gen, id);
                self.check_serve(i, actor, key)?;
                if let Some(r) = &relay {
                    self.stats.relays_admitted += 1;
                    let auth = fence.authority_owner_generation.get();
                    if self.retired.contains(&(actor, auth, r.clone())) {
                        return Err(self.violation(format!(
                            "n{i} admitted a relay to a{actor} from a retired binding {r:?}"
                        )));
                    }
                }
                self.stats.served += 1;
                tr!(self, "n{i}: serves request {id} of n{caller} for a{actor}");
            }
            Err(e) => {
                if relay.is_some() {
                    self.stats.relays_refused += 1;
                }
                self.stats.refused += 1;
                tr!(
                    self,
                    "n{i}: refuses request {id} of n{caller} for a{actor}: {e}"
                );
            }
        }
        self.send(Ep::Node(i), Ep::Node(caller), Body::CallResp { id, ok });
        Ok(())
    }

    /// A serve must be by the owner the store names, under its live lease (the serve-time
    /// form of "no two nodes serve one actor under live fences"), and at most once per request.
    fn check_serve(&mut self, i: usize, actor: usize, key: RequestKey) -> Result<(), Violation> {
        if !self.served.insert(key) {
            return Err(self.violation(format!("request {key:?} processed twice")));
        }
        let rec = poll_now(self.store.lookup(self.actor_ids[actor].clone()))
            .ok()
            .flatten();
        let inc = &self.nodes[i].incarnations[&actor].fence;
        let now = StoreTime::from_millis(STORE_EPOCH_MS + self.t);
        let ok = rec.as_ref().is_some_and(|r| {
            node_index(&r.owner_node) == i
                && r.authority_owner_generation == inc.authority_owner_generation
                && r.owner_lease_generation == inc.owner_lease_generation
                && self.leases.get(&i).is_some_and(|l| {
                    l.holder.lease_generation == r.owner_lease_generation && l.is_live_at(now)
                })
        });
        if ok {
            Ok(())
        } else {
            Err(self.violation(format!(
                "n{i} served a{actor} under authority {} lease {} but the store says {}",
                inc.authority_owner_generation,
                inc.owner_lease_generation,
                match &rec {
                    Some(r) => format!(
                        "owner {} authority {} lease {} (lease row {:?})",
                        r.owner_node,
                        r.authority_owner_generation,
                        r.owner_lease_generation,
                        self.leases.get(&node_index(&r.owner_node)).map(|l| (
                            l.holder.lease_generation.get(),
                            l.expires_at.as_millis() - STORE_EPOCH_MS
                        ))
                    ),
                    None => "no record".into(),
                }
            )))
        }
    }

    fn call_answer(
        &mut self,
        i: usize,
        owner: usize,
        owner_gen: u64,
        id: u64,
        ok: bool,
    ) -> Result<(), Violation> {
        let g = self.nodes[i].generation;
        match self.nodes[i].calls.handle_reply(id, &(owner, owner_gen)) {
            ReplyOutcome::Deliver(()) => {
                tr!(
                    self,
                    "n{i}: request {id} answered ({})",
                    if ok { "ok" } else { "error" }
                );
                self.terminal((i, g, id))
            }
            ReplyOutcome::Late(t) => {
                self.stats.late_replies += 1;
                tr!(
                    self,
                    "n{i}: late answer to request {id} ({t:?}) recorded, not delivered"
                );
                if self.terminals.get(&(i, g, id)) != Some(&1) {
                    return Err(self.violation(format!(
                        "n{i}: a late answer to request {id} that has not ended once"
                    )));
                }
                Ok(())
            }
            ReplyOutcome::Unknown | ReplyOutcome::WrongPeer => {
                // An answer to a previous process of this node never reaches this one (the
                // mesh drops records of another generation), so this cannot happen.
                Err(self.violation(format!("n{i}: answer to an unknown request {id}")))
            }
        }
    }

    fn terminal(&mut self, key: RequestKey) -> Result<(), Violation> {
        let n = self.terminals.entry(key).or_insert(0);
        *n += 1;
        if *n > 1 {
            let n = *n;
            return Err(self.violation(format!("request {key:?} got {n} terminals")));
        }
        Ok(())
    }

    fn owner_bind(&mut self, i: usize, binding: RegisteredBinding, fence: &CallFence) {
        let actor = self.actor_index(&fence.actor_id);
        let n = &mut self.nodes[i];
        let standing = n.standing();
        let generation = NodeGeneration::new(n.generation);
        let Some(inc) = n.incarnations.get_mut(&actor) else {
            return;
        };
        if check_bind(standing, generation, Some(&inc.fence), None, fence).is_err() {
            return;
        }
        let before = inc.slot.current().cloned();
        let auth = inc.fence.authority_owner_generation.get();
        let id = identity_of(&binding);
        inc.slot.bind(binding);
        if let Some(p) = before
            && identity_of(&p) != id
        {
            self.retired.insert((actor, auth, identity_of(&p)));
        }
        tr!(self, "n{i}: a{actor} bound to {id:?}");
    }

    fn owner_tombstone(
        &mut self,
        i: usize,
        identity: &Identity,
        fence: &CallFence,
    ) -> Result<(), Violation> {
        let actor = self.actor_index(&fence.actor_id);
        let rid = self.nodes[identity.node].rid.clone();
        let n = &mut self.nodes[i];
        let Some(inc) = n.incarnations.get_mut(&actor) else {
            return Ok(());
        };
        let before = inc.slot.clone();
        let auth = inc.fence.authority_owner_generation.get();
        let removed = inc.slot.tombstone(
            &rid,
            SessionLifecycleGeneration::new(identity.lifecycle),
            BindingGeneration::new(identity.generation),
        );
        match removed {
            Some(_) => {
                self.retired.insert((actor, auth, identity.clone()));
                tr!(self, "n{i}: a{actor} unbound from {identity:?}");
            }
            None => {
                if inc.slot != before {
                    return Err(self.violation(format!(
                        "n{i}: a late tombstone {identity:?} changed a{actor}'s binding"
                    )));
                }
                tr!(
                    self,
                    "n{i}: late tombstone {identity:?} for a{actor} changes nothing"
                );
            }
        }
        Ok(())
    }

    // --- invariants -----------------------------------------------------------------------

    /// After every step.
    fn check_step(&mut self) -> Result<(), Violation> {
        for a in 0..self.actor_ids.len() {
            // No two nodes serve one actor under live fences; at most one current binding.
            let mut serving = Vec::new();
            let mut bound = 0;
            for (i, n) in self.nodes.iter().enumerate() {
                if !n.alive {
                    continue;
                }
                if let Some(inc) = n.incarnations.get(&a)
                    && n.standing() == OwnerStanding::Serving
                {
                    serving.push(i);
                    bound += usize::from(inc.slot.current().is_some());
                }
            }
            if serving.len() > 1 {
                return Err(self.violation(format!("a{a} is served by nodes {serving:?} at once")));
            }
            if bound > 1 {
                return Err(self.violation(format!("a{a} has {bound} current bindings")));
            }
            // The store's fences only grow.
            if let Some(r) = poll_now(self.store.lookup(self.actor_ids[a].clone()))
                .ok()
                .flatten()
            {
                let now = (
                    r.object_generation.get(),
                    r.authority_owner_generation.get(),
                    r.version.get(),
                );
                let high = self.high.entry(a).or_default();
                if now.0 < high.0 || now.1 < high.1 || now.2 < high.2 {
                    let was = *high;
                    return Err(
                        self.violation(format!("a{a}'s fences went back: {was:?} -> {now:?}"))
                    );
                }
                *high = now;
            }
        }
        Ok(())
    }

    /// At the end: every request has exactly one terminal.
    fn check_end(&mut self) -> Result<(), Violation> {
        if let Some((k, n)) = self.terminals.iter().find(|(_, n)| **n != 1) {
            return Err(self.violation(format!("request {k:?} ended with {n} terminals")));
        }
        Ok(())
    }
}

fn identity_of(b: &RegisteredBinding) -> Identity {
    Identity {
        node: node_index(&b.session_owner),
        lifecycle: b.lifecycle.get(),
        generation: b.generation.get(),
    }
}

fn lease_text(r: &Result<OwnerLease, StoreError>) -> String {
    match r {
        Ok(l) => format!(
            "lease {} until {}ms",
            l.holder.lease_generation,
            l.expires_at.as_millis() - STORE_EPOCH_MS
        ),
        Err(e) => e.to_string(),
    }
}
