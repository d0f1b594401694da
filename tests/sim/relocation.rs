//! The relocation world: N nodes, each an actor owner (its incarnations, one real
//! [`BindingSlot`] each), a session owner (one real [`SessionBindingAggregate`] per client
//! session) and, while a relocation runs, the source ([`SourceHandoff`]) or the target
//! ([`TargetHandoff`]) of it, and after a commit the old owner's Message Follow
//! ([`FollowTable`]); one Location Store (`MemoryStore`, the real store core: the relocation
//! fence, its durable abort and the target's `cas_owner`). Sessions relay sequence-numbered
//! one-way messages (24) to their bound actors while actors move between nodes (42/43 seals,
//! Restore, relay-ready, capture and relay of queued work, cutover or its timeout's fallback,
//! CAS, 44 commit or abort), under the frame's network faults, partitions node–node and
//! node–store, crashes with restarts and clock jumps on one node. A node sending through a ref
//! to an actor whose owner crashed activates it again (the store's reservation decides: the
//! dead owner's lease ended), under a new authority generation, with an empty binding slot.
//! Owner leases run out (mid-relocation too): the node ends its incarnations, its relocation
//! cores go on and the store's fences decide them, and it registers a new lease. Sessions bind
//! actors while they move (38, the reply, the 51 to the replaced session, its close).
//!
//! What is written here is the thin driver of `node::relocate` around the cores (effects to
//! records and store calls, results back), the actor owner's ingress (an incarnation serving,
//! sealed, relaying its captured work, or a target's temporary queue), and the session owner's
//! 42/44 handling with the held relays' release.
//!
//! Invariants, after every step:
//! - no two nodes serve one actor, and a node serves only while the store names it the owner
//!   of that incarnation (EG-14, SB-8.6, SB-8.9);
//! - no relay is processed twice (SB-8.4, SB-5.10 "once");
//! - per session, per actor, relays are processed in the order the session sent them, across
//!   relocations (SB-8.7, SB-8.9): a sealed binding's held relays reach the target before
//!   anything newer;
//! - every relay has exactly one fate: processed, or dropped for a reason the spec allows (a
//!   connection broken by a partition or a crash, a session closed by its seal timeout, work of
//!   an actor left without a serving owner by a crash or a failed relocation and not activated
//!   again since, a binding that ended with its crashed owner, SB-8.3, SB-8.6, SB-5.3); at the
//!   end none is unaccounted for;
//! - a late or duplicate 44 changes nothing (SB-8.3).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink::actor::fence::{CallFence, FenceUse, check_moved};
use zlink::relocation::recovery::{
    AttemptResult, DEFAULT_RECOVERY_BACKOFF, DEFAULT_RECOVERY_BACKOFF_MAX, Recovery,
    RecoveryOutcome,
};
use zlink::relocation::tombstone::{TombstonePlan, TombstoneStep, Whereabouts};
use zlink::relocation::{
    FailReason, FollowConfig, FollowLookup, FollowTable, MigratedState, MovingActor,
    RelocationConfig, RestoreRefusal, RestoreRequest, SealTarget, SourceEffect, SourceHandoff,
    SourceOutcome, SourcePhaseName, Subject, TargetEffect, TargetHandoff,
};
use zlink::session::aggregate::{
    BindCompletion, BindStart, BindTarget, Released, ReplacedOutcome, RouteApplied,
    SessionBindingAggregate, SessionIdentity,
};
use zlink::session::seal::HeldRelay;
use zlink::session::slot::SlotBind;
use zlink::session::{BindingSlot, RegisteredBinding};
use zlink::store::{
    self, ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder, LocationStore,
    MemoryStore, OwnerFence, Reservation, StoreTime,
};
use zlink_wire::{
    ActorId, AuthorityFence as WireAuthorityFence, AuthorityOwnerGeneration, BindOperation,
    BindSnapshot, BindingGeneration, BoundSessionReplaced, DispatchKey, MeshName, NodeGeneration,
    NodeRid, ObjectGeneration, OwnerId, OwnerLeaseGeneration, PreviousSessionOwner, RelocationId,
    SealIdentity, SealOutcome, SessionLifecycleGeneration, SessionRelocationRoute,
    SessionRelocationSeal, SessionRid,
};

use super::{Delays, Envelope, Ep, Millis, Network, Queue, Rng, Violation, ms_since};

/// When a peer sees a crashed or cut-off node down.
const PEER_TIMEOUT_MS: Millis = 300;
/// How long a node waits for the store's answer.
const STORE_CALL_TIMEOUT_MS: Millis = 1_000;
/// A bind's deadline at its session owner.
const BIND_DEADLINE_MS: Millis = 4_000;
/// A request relay's deadline at its caller (the session owner).
const REQUEST_DEADLINE_MS: Millis = 5_000;
/// A replaced session's callback runs this long.
const CALLBACK_MS: Millis = 100;
/// A session binds its actor again this long after its unbind, and a disconnected client's new
/// session binds it this long after the disconnect.
const REBIND_MS: Millis = 300;
/// A tombstone held by a relocation's seal looks again this long after it last looked (the
/// node's request timeout), when no relocation end woke it.
const TOMBSTONE_WAKE_MS: Millis = 5_000;
/// After the last action: every partition healed and every timer ran out — a relocation
/// started at the end (seal and restore timeouts, 3 s each), its source's result timeout
/// (11 s, `RelocationConfig::result_timeout`), the store's answer to its query and the SB-8.6
/// recovery's retries.
const DRAIN_MS: Millis = 22_000;

/// Driver rules that can be switched off, each a bug the simulator must catch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The target dispatches relayed work as it arrives, before its `cas_owner` succeeded.
    pub target_dispatches_before_cas: bool,
    /// The source relays its queued work at the capture but drops ingress held after it.
    pub source_drops_late_ingress: bool,
    /// The old owner answers records after a commit `Unavailable` instead of following them.
    pub no_follow: bool,
    /// The session owner sends relays submitted during the release before the held ones.
    pub release_after_new: bool,
    /// A node re-activating an actor whose owner's lease ended wins the store's reservation
    /// but installs no incarnation (its messages go nowhere).
    pub activation_installs_nothing: bool,
    /// A node activates an actor whose owner it cannot reach (a partition, a crash it saw)
    /// even when the store answers that a live owner holds it.
    pub activate_on_unreachable_owner: bool,
    /// A node whose lease ran out keeps its incarnations serving.
    pub serve_past_lease: bool,
    /// A target whose CAS won under a lease that ran out before the answer came opens
    /// dispatch anyway.
    pub open_under_lost_lease: bool,
    /// After the cutover timeout's fallback the target lets regular ingress in at once
    /// instead of behind the source's relay stream.
    pub fallback_ignores_source_stream: bool,
    /// The source registers binds until it seals the runtime (today's node: only the Follow
    /// table's seal entry refuses them), though the seal targets and the Restore's binding
    /// were taken at the start.
    pub bind_until_runtime_seal: bool,
    /// The session owner arms no deadline for a relayed request: a request lost with its
    /// connection never ends.
    pub no_request_deadline: bool,
    /// A failed relocation's source leaves the record and the actor as they are (no SB-8.6
    /// recovery).
    pub no_recovery: bool,
    /// A Spot move seals only its first member's lane (`Subject::Actor`'s runtime seal), not
    /// the Spot's unit: the other members keep running at the source.
    pub spot_seals_one_lane: bool,
    /// A member moving alone into a node whose Spot of its name is moving away is let in
    /// (the node before it joined the Spot at the Restore: the Restore was installed, and a
    /// Spot move started while a member moved in); it cannot join the relocating Spot when its
    /// CAS has won, so it is never opened.
    pub open_into_moving_spot: bool,
    /// A Spot move's target sends the 44 commit only to the first member's sessions.
    pub spot_44_to_first_member: bool,
    /// The source's driver finds the incarnation it moves by its object generation alone (the
    /// node before it compared the owner fence: `hold_ingress`, `take_held`,
    /// `end_incarnation`, `end_unserved`, the unseal), so after a lease expiry and a failover
    /// on the same node it acts on the new incarnation.
    pub source_by_generation: bool,
    /// The SB-8.6 recovery makes one attempt (the node before its retry): a store out of reach
    /// at that moment leaves the actor unserved.
    pub recovery_tries_once: bool,
    /// The source's result timeout never fires (the node before its bounded wait): a source
    /// whose target's result is lost waits forever, its actor sealed and served nowhere.
    pub no_result_timeout: bool,
    /// A 38 unbind or disconnect that finds its incarnation sealed by a relocation is applied
    /// to the source's slot at once (the node before `relocation::tombstone`): the binding
    /// travels in the Restore, and after a commit the target holds it for a session gone.
    pub tombstone_ignores_seal: bool,
    /// A disconnect held through a commit is forwarded to the new owner as an unbind (not as
    /// the disconnect the plan steps to): the binding is removed there, its
    /// `OnDisconnectActor` never runs.
    pub forward_as_unbind: bool,
    /// The Follow table's seal entry of a moving incarnation ends by its hold time
    /// (`FollowConfig::seal_hold`, 8 s from the runtime seal) and is released only when the
    /// source unseals or fails (today's node), not when the relocation ends: a source waiting
    /// out its 11 s result timeout outlives it, and a tombstone then applies at the source
    /// while the binding lives at the target.
    pub seal_entry_expires: bool,
    /// A target whose CAS answer is lost takes it for a refusal (the node before it read the
    /// record back): it discards the actor while the CAS may have won, and the store names it
    /// with nothing serving there.
    pub cas_loss_is_failure: bool,
}

impl Faults {
    /// The fault named `name` (`SIM_FAULT`), or none for an empty name.
    pub fn named(name: &str) -> Option<Self> {
        let mut f = Self::default();
        match name {
            "" | "none" => {}
            "target_dispatches_before_cas" => f.target_dispatches_before_cas = true,
            "source_drops_late_ingress" => f.source_drops_late_ingress = true,
            "no_follow" => f.no_follow = true,
            "release_after_new" => f.release_after_new = true,
            "activation_installs_nothing" => f.activation_installs_nothing = true,
            "activate_on_unreachable_owner" => f.activate_on_unreachable_owner = true,
            "serve_past_lease" => f.serve_past_lease = true,
            "open_under_lost_lease" => f.open_under_lost_lease = true,
            "fallback_ignores_source_stream" => f.fallback_ignores_source_stream = true,
            "bind_until_runtime_seal" => f.bind_until_runtime_seal = true,
            "no_request_deadline" => f.no_request_deadline = true,
            "no_recovery" => f.no_recovery = true,
            "spot_seals_one_lane" => f.spot_seals_one_lane = true,
            "open_into_moving_spot" => f.open_into_moving_spot = true,
            "spot_44_to_first_member" => f.spot_44_to_first_member = true,
            "source_by_generation" => f.source_by_generation = true,
            "recovery_tries_once" => f.recovery_tries_once = true,
            "no_result_timeout" => f.no_result_timeout = true,
            "tombstone_ignores_seal" => f.tombstone_ignores_seal = true,
            "forward_as_unbind" => f.forward_as_unbind = true,
            "seal_entry_expires" => f.seal_entry_expires = true,
            "cas_loss_is_failure" => f.cas_loss_is_failure = true,
            _ => return None,
        }
        Some(f)
    }
}

/// One scheduled action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The session bound to the actor relays the next message of its sequence (24).
    Relay { actor: usize },
    /// Node `from` sends a one-way message to the actor through a ref resolved in the store
    /// now (an actor's or a client's stale-able ref: no binding, no seal).
    Tell { from: usize, actor: usize },
    /// The actor's owner relocates it to node `to`.
    Relocate { actor: usize, to: usize },
    /// The node dies and restarts `down_ms` later with a new generation (no actors, no sessions).
    Crash { node: usize, down_ms: u64 },
    /// The endpoints cannot reach each other for `ms` (connections break).
    Partition { a: Ep, b: Ep, ms: u64 },
    /// The node's monotonic clock jumps forward by `ms`.
    ClockJump { node: usize, ms: u64 },
    /// The last 44 the node received arrives again (late or duplicate).
    Late44 { node: usize },
    /// The node's owner lease runs out (its renewals were lost): past its local deadline it
    /// ends its incarnations (the ownership world proves that deadline comes before the
    /// store's), the store lets others take its actors, and `down_ms` later it registers a
    /// new lease (same node generation, a new lease generation). Its relocations in flight
    /// go on; the store's fences decide them.
    LeaseExpiry { node: usize, down_ms: u64 },
    /// Session `session` of node `node` binds the actor (38), replacing its current binding
    /// (51 to the session it had) — often while the actor moves.
    Bind {
        actor: usize,
        node: usize,
        session: usize,
    },
    /// The node that hosts the seed's Spot (the first one, by index, with a member there)
    /// moves it whole to node `to` (`Subject::Spot`): every member it hosts, sealed together.
    RelocateSpot { to: usize },
    /// The session bound to the actor unbinds it (38 Unbind to the owner its route names), and
    /// binds it again a while later.
    Unbind { actor: usize },
    /// The client of the session bound to the actor disconnects (38 Disconnect for each of its
    /// bindings: the Spot's `OnDisconnectActor` runs once per binding); its new session binds
    /// the actors again a while later.
    Disconnect { actor: usize },
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
    /// Actors (actor `a` starts on node `a % nodes`, or on `spot_node` when it is a member of
    /// the Spot, bound by session `a % (nodes * sessions)`).
    pub actors: usize,
    /// The members of the seed's Spot (a SpotWide Spot: moved whole by
    /// [`Action::RelocateSpot`]), in ActorId order; empty when the seed has none.
    pub spot: Vec<usize>,
    /// Where the Spot's members start.
    pub spot_node: usize,
    /// The network's delays.
    pub delays: Delays,
    /// An actor's turn takes up to this long.
    pub turn_ms: u64,
    /// The scenario's length (then the drain).
    pub end_ms: Millis,
    /// Actions by time.
    pub actions: Vec<(Millis, Action)>,
}

impl Scenario {
    /// The scenario of `seed`.
    pub fn generate(seed: u64) -> Self {
        let mut r = Rng::new(seed ^ 0x0E10_CA7E);
        let turn_ms = r.range(0, 40);
        let nodes = r.range(2, 4) as usize;
        let sessions = r.range(1, 2) as usize;
        let actors = r.range(1, 4) as usize;
        let delays = Delays {
            base_ms: r.range(1, 10),
            slow_permille: r.below(60),
            slow_ms: r.range(50, 1_500),
        };
        let end_ms = r.range(2_000, 6_000);
        let count = r.range(20, 70);
        let mut actions = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let at = r.below(end_ms);
            let node = r.below(nodes as u64) as usize;
            let actor = r.below(actors as u64) as usize;
            let action = match r.below(1000) {
                0..=399 => Action::Relay { actor },
                400..=539 => Action::Tell { from: node, actor },
                540..=739 => Action::Relocate { actor, to: node },
                740..=759 => Action::Crash {
                    node,
                    down_ms: r.range(50, 1_500),
                },
                760..=869 => {
                    let a = Ep::Node(node);
                    let b = if r.chance(250) {
                        Ep::Store
                    } else {
                        Ep::Node((node + 1 + r.below(nodes as u64 - 1) as usize) % nodes)
                    };
                    Action::Partition {
                        a,
                        b,
                        ms: r.range(50, 3_000),
                    }
                }
                870..=909 => Action::ClockJump {
                    node,
                    ms: r.range(50, 2_000),
                },
                _ => Action::Late44 { node },
            };
            actions.push((at, action));
        }
        // Lease expiries from their own stream (the actions above stay the seed's): some just
        // after a relocation starts (on any node: often its source or target), some anywhere.
        let mut l = Rng::new(seed ^ 0x1EA5_E0FF);
        let mut expiries = Vec::new();
        for (at, a) in &actions {
            if matches!(a, Action::Relocate { .. }) && l.chance(120) {
                expiries.push((
                    at + l.range(0, 400),
                    Action::LeaseExpiry {
                        node: l.below(nodes as u64) as usize,
                        down_ms: l.range(50, 1_500),
                    },
                ));
            }
        }
        if l.chance(300) {
            expiries.push((
                l.below(end_ms),
                Action::LeaseExpiry {
                    node: l.below(nodes as u64) as usize,
                    down_ms: l.range(50, 1_500),
                },
            ));
        }
        actions.extend(expiries);
        // Binds and replacements from their own stream too: a quarter of the relocations race
        // one (0–300 ms after it starts), and a third of the seeds have one anywhere.
        let mut b = Rng::new(seed ^ 0xB1ED_0038);
        let mut binds = Vec::new();
        for (at, a) in &actions {
            if let Action::Relocate { actor, .. } = a
                && b.chance(250)
            {
                binds.push((
                    at + b.range(0, 300),
                    Action::Bind {
                        actor: *actor,
                        node: b.below(nodes as u64) as usize,
                        session: b.below(sessions as u64) as usize,
                    },
                ));
            }
        }
        if b.chance(300) {
            binds.push((
                b.below(end_ms),
                Action::Bind {
                    actor: b.below(actors as u64) as usize,
                    node: b.below(nodes as u64) as usize,
                    session: b.below(sessions as u64) as usize,
                },
            ));
        }
        actions.extend(binds);
        // A Spot, from a stream of its own too (a seed without one keeps its scenario): in 40 %
        // of the seeds with two actors or more, 2 to all of them form a SpotWide Spot that
        // starts on one node, moved whole 1–4 times; a quarter of those moves race a bind of a
        // member, an eighth a lease expiry. Single-actor moves of its members (the actions
        // above) race the Spot's.
        let mut sp = Rng::new(seed ^ 0x5B07_5B07);
        let (mut spot, mut spot_node) = (Vec::new(), 0);
        if actors >= 2 && sp.chance(400) {
            let first = sp.below(actors as u64) as usize;
            let n = sp.range(2, actors as u64) as usize;
            spot = (0..n).map(|i| (first + i) % actors).collect();
            spot.sort_unstable();
            spot_node = sp.below(nodes as u64) as usize;
            let mut moves = Vec::new();
            for _ in 0..sp.range(1, 4) {
                let at = sp.below(end_ms);
                moves.push((
                    at,
                    Action::RelocateSpot {
                        to: sp.below(nodes as u64) as usize,
                    },
                ));
                if sp.chance(250) {
                    moves.push((
                        at + sp.range(0, 300),
                        Action::Bind {
                            actor: spot[sp.below(spot.len() as u64) as usize],
                            node: sp.below(nodes as u64) as usize,
                            session: sp.below(sessions as u64) as usize,
                        },
                    ));
                }
                if sp.chance(125) {
                    moves.push((
                        at + sp.range(0, 400),
                        Action::LeaseExpiry {
                            node: sp.below(nodes as u64) as usize,
                            down_ms: sp.range(50, 1_500),
                        },
                    ));
                }
            }
            actions.extend(moves);
        }
        // Unbinds and disconnects from a stream of their own too: a sixth of the relocations
        // (single or whole-Spot) race one of a moving actor (40 ms before to 300 ms after the
        // start), and a third of the seeds have one anywhere.
        let mut t = Rng::new(seed ^ 0x7B0B_D15C);
        let mut tombs = Vec::new();
        for (at, a) in &actions {
            let actor = match a {
                Action::Relocate { actor, .. } => *actor,
                Action::RelocateSpot { .. } => spot[0],
                _ => continue,
            };
            if t.chance(170) {
                // from just before the start (its hook may be running when the move begins)
                let at = (at + t.range(0, 340)).saturating_sub(40);
                tombs.push(if t.chance(500) {
                    (at, Action::Disconnect { actor })
                } else {
                    (at, Action::Unbind { actor })
                });
            }
        }
        if t.chance(300) {
            let actor = t.below(actors as u64) as usize;
            let at = t.below(end_ms);
            tombs.push(if t.chance(500) {
                (at, Action::Disconnect { actor })
            } else {
                (at, Action::Unbind { actor })
            });
        }
        actions.extend(tombs);
        actions.sort_by_key(|(at, _)| *at);
        Self {
            seed,
            nodes,
            sessions,
            actors,
            spot,
            spot_node,
            delays,
            turn_ms,
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
    /// Relays a session sent or held (accepted).
    pub relays: u64,
    /// Messages sent through a ref resolved in the store (no binding).
    pub tells: u64,
    /// Relays held by a seal.
    pub held: u64,
    /// Relays processed by an actor.
    pub processed: u64,
    /// Relays processed by an actor that had moved since the session bound it.
    pub processed_after_move: u64,
    /// Relays the source captured or relayed from its held ingress to the target.
    pub captured: u64,
    /// Relays the old owner forwarded (Message Follow).
    pub followed: u64,
    /// Relays dropped for a reason the spec allows.
    pub dropped: u64,
    /// … of them: lost with a connection a partition or a crash broke.
    pub dropped_connection: u64,
    /// … held or queued by a node that crashed, or addressed to its old lifecycle.
    pub dropped_crash: u64,
    /// … of an actor left without a serving owner (a crash, or SB-8.6).
    pub dropped_no_owner: u64,
    /// … held by a session its seal timeout closed (SB-8.3).
    pub dropped_seal_timeout: u64,
    /// … followed once already (SB-5.10).
    pub dropped_followed_once: u64,
    /// Relocations started.
    pub relocations: u64,
    /// Relocations that moved the actor.
    pub moved: u64,
    /// Relocations aborted (the source reopened).
    pub aborted: u64,
    /// Relocations that ended with neither side serving (SB-8.6).
    pub failed: u64,
    /// … after which the source activated the actor again from its state (SB-8.6 recovery).
    pub recovered: u64,
    /// Actors a failed relocation may leave unserved at the end: a target's CAS answer was lost
    /// and its record could not be read back within `CAS_READ_BACK_WAIT` (the store out of
    /// reach): it failed while the CAS may have won (exempt, counted).
    pub unrecovered: u64,
    /// CAS answers lost (the store call timed out).
    pub cas_answers_lost: u64,
    /// Records read back after a lost CAS answer.
    pub cas_read_backs: u64,
    /// Recovery attempts repeated (the store out of reach, the lease lapsed).
    pub recovery_retries: u64,
    /// Recoveries that found the record moved on (the target's CAS won, another incarnation).
    pub recoveries_superseded: u64,
    /// Recoveries stopped because the source's lease ended.
    pub recoveries_lease_lost: u64,
    /// Sources whose wait for the target's result passed the result timeout (the store's
    /// records decided, `SourceEffect::QueryOwners`).
    pub result_waits_expired: u64,
    /// … of them decided moved (the store named the target).
    pub result_waits_moved: u64,
    /// Store reads of those decisions repeated (the store out of reach).
    pub result_queries_retried: u64,
    /// Targets that fell back after the cutover timeout.
    pub cutover_timeouts: u64,
    /// Sessions closed by their seal timeout.
    pub seal_timeouts: u64,
    /// Late or duplicate 44s refused.
    pub late_44: u64,
    /// Fallbacks whose wait for the source's relay stream ended without its cutover: the
    /// source was seen gone, or the source wait expired (the source alive and stalled).
    pub source_waits_cut: u64,
    /// … of which the source wait expired.
    pub source_waits_expired: u64,
    /// Session relays captured by the source that reached a target after its wait for the
    /// source's relay stream had ended without the cutover, behind newer ones (out of the
    /// session's order: the one documented case, `TargetHandoff::late_relayed`).
    pub reordered_after_source_wait: u64,
    /// Crashes.
    pub crashes: u64,
    /// Actors activated again on a new owner after their owner's lease ended (a crash).
    pub reactivated: u64,
    /// Messages processed by a re-activated incarnation.
    pub processed_after_reactivation: u64,
    /// Session relays that are requests (the caller waits for one terminal).
    pub requests: u64,
    /// … whose terminal was the actor's reply.
    pub request_replies: u64,
    /// … whose terminal was a refusal (a node's answer, or the session's own close).
    pub request_refusals: u64,
    /// … whose terminal was their deadline.
    pub request_deadlines: u64,
    /// Terminals that came after a request's first (late: ignored).
    pub late_terminals: u64,
    /// Binds (38) sent.
    pub binds: u64,
    /// … registered by the actor owner and completed at the session.
    pub bound: u64,
    /// … refused by the owner (not serving: sealed, moving, gone; stale fences).
    pub bind_refused: u64,
    /// … whose deadline passed first.
    pub bind_timeouts: u64,
    /// … forwarded by Message Follow.
    pub bind_followed: u64,
    /// 51s applied (the replaced session closes).
    pub replacements: u64,
    /// … of them while the replaced binding was sealed by a relocation.
    pub replaced_while_sealed: u64,
    /// 51s refused by the session (late, duplicate, closed).
    pub refused_51: u64,
    /// Relays dropped because their binding was replaced (held by its seal, or refused by
    /// the slot).
    pub dropped_replaced: u64,
    /// Owner leases that ran out.
    pub lease_expiries: u64,
    /// … of them while the node was the source or the target of a relocation.
    pub lease_expiries_mid_move: u64,
    /// Relays dropped with the incarnation of an owner whose lease ran out.
    pub dropped_lease: u64,
    /// Partitions.
    pub partitions: u64,
    /// Messages lost to broken connections.
    pub lost_messages: u64,
    /// Seeds with a Spot.
    pub spot_seeds: u64,
    /// Whole-Spot relocations started (`Subject::Spot`).
    pub spot_relocations: u64,
    /// … of them with two members or more.
    pub spot_relocations_shared: u64,
    /// … that moved every member.
    pub spot_moved: u64,
    /// … aborted (the Spot runs at the source again).
    pub spot_aborted: u64,
    /// … failed after relay-ready (SB-8.6), in part or whole.
    pub spot_failed: u64,
    /// Members moved by Spot relocations.
    pub spot_members_moved: u64,
    /// Spot moves refused at the start: a member moving alone, or not serving.
    pub spot_busy: u64,
    /// Restores refused because the target hosts the Spot already, or the member's Spot there
    /// is moving away.
    pub spot_restores_refused: u64,
    /// Relays processed by a member after a Spot move of it.
    pub processed_after_spot_move: u64,
    /// 38 unbinds and disconnects sent (one per binding).
    pub tombstones: u64,
    /// … of them disconnects.
    pub disconnects: u64,
    /// … held by a relocation's seal at their owner.
    pub tombstones_held: u64,
    /// … forwarded once by Message Follow (after a commit).
    pub tombstones_forwarded: u64,
    /// … that removed the binding.
    pub tombstones_applied: u64,
    /// … refused as not current (replaced, ended with its incarnation, removed already).
    pub tombstones_not_current: u64,
    /// … lost with a connection or a crashed node.
    pub tombstones_lost: u64,
    /// `OnDisconnectActor` runs.
    pub hooks_run: u64,
    /// … of them by a node the disconnect was forwarded to.
    pub hooks_run_forwarded: u64,
    /// Hook turns dropped unstarted (the incarnation moved or ended under them).
    pub hooks_dropped: u64,
    /// Relays dropped with their binding's unbind or their session's disconnect.
    pub dropped_tombstoned: u64,
    /// Tombstones refused by a source whose lease ran out mid-move (not live, still sealed):
    /// when the move commits, the target holds the binding (a node gap, exempt).
    pub tombstones_stranded: u64,
    /// Tombstones that found no follow entry at a source whose failed move the target's CAS
    /// had won after all (the recovery superseded): the target keeps the binding (a node gap,
    /// exempt).
    pub tombstones_superseded: u64,
    /// Bindings left at a new owner because their session removed them while sealed, its 44
    /// was lost and the 38 reached the old owner after its follow entry ended (exempt).
    pub tombstones_after_follow: u64,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Self) {
        self.steps += o.steps;
        self.relays += o.relays;
        self.tells += o.tells;
        self.held += o.held;
        self.processed += o.processed;
        self.processed_after_move += o.processed_after_move;
        self.captured += o.captured;
        self.followed += o.followed;
        self.dropped += o.dropped;
        self.dropped_connection += o.dropped_connection;
        self.dropped_crash += o.dropped_crash;
        self.dropped_no_owner += o.dropped_no_owner;
        self.dropped_seal_timeout += o.dropped_seal_timeout;
        self.dropped_followed_once += o.dropped_followed_once;
        self.relocations += o.relocations;
        self.moved += o.moved;
        self.aborted += o.aborted;
        self.failed += o.failed;
        self.recovered += o.recovered;
        self.unrecovered += o.unrecovered;
        self.cas_answers_lost += o.cas_answers_lost;
        self.cas_read_backs += o.cas_read_backs;
        self.result_waits_expired += o.result_waits_expired;
        self.result_waits_moved += o.result_waits_moved;
        self.result_queries_retried += o.result_queries_retried;
        self.recovery_retries += o.recovery_retries;
        self.recoveries_superseded += o.recoveries_superseded;
        self.recoveries_lease_lost += o.recoveries_lease_lost;
        self.cutover_timeouts += o.cutover_timeouts;
        self.seal_timeouts += o.seal_timeouts;
        self.late_44 += o.late_44;
        self.source_waits_cut += o.source_waits_cut;
        self.source_waits_expired += o.source_waits_expired;
        self.reordered_after_source_wait += o.reordered_after_source_wait;
        self.crashes += o.crashes;
        self.reactivated += o.reactivated;
        self.lease_expiries += o.lease_expiries;
        self.binds += o.binds;
        self.requests += o.requests;
        self.request_replies += o.request_replies;
        self.request_refusals += o.request_refusals;
        self.request_deadlines += o.request_deadlines;
        self.late_terminals += o.late_terminals;
        self.bound += o.bound;
        self.bind_refused += o.bind_refused;
        self.bind_timeouts += o.bind_timeouts;
        self.bind_followed += o.bind_followed;
        self.replacements += o.replacements;
        self.replaced_while_sealed += o.replaced_while_sealed;
        self.refused_51 += o.refused_51;
        self.dropped_replaced += o.dropped_replaced;
        self.lease_expiries_mid_move += o.lease_expiries_mid_move;
        self.dropped_lease += o.dropped_lease;
        self.processed_after_reactivation += o.processed_after_reactivation;
        self.partitions += o.partitions;
        self.lost_messages += o.lost_messages;
        self.spot_seeds += o.spot_seeds;
        self.spot_relocations += o.spot_relocations;
        self.spot_relocations_shared += o.spot_relocations_shared;
        self.spot_moved += o.spot_moved;
        self.spot_aborted += o.spot_aborted;
        self.spot_failed += o.spot_failed;
        self.spot_members_moved += o.spot_members_moved;
        self.spot_busy += o.spot_busy;
        self.spot_restores_refused += o.spot_restores_refused;
        self.processed_after_spot_move += o.processed_after_spot_move;
        self.tombstones += o.tombstones;
        self.disconnects += o.disconnects;
        self.tombstones_held += o.tombstones_held;
        self.tombstones_forwarded += o.tombstones_forwarded;
        self.tombstones_applied += o.tombstones_applied;
        self.tombstones_not_current += o.tombstones_not_current;
        self.tombstones_lost += o.tombstones_lost;
        self.hooks_run += o.hooks_run;
        self.hooks_run_forwarded += o.hooks_run_forwarded;
        self.hooks_dropped += o.hooks_dropped;
        self.dropped_tombstoned += o.dropped_tombstoned;
        self.tombstones_stranded += o.tombstones_stranded;
        self.tombstones_superseded += o.tombstones_superseded;
        self.tombstones_after_follow += o.tombstones_after_follow;
    }
}

/// A run's result.
pub type Outcome = super::Outcome<Stats>;

/// The relocation world as the frame's seed runner, shrinker and replay see it.
pub struct Relocation;

impl super::World for Relocation {
    const NAME: &'static str = "relocation";
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

/// A relay (24) as it travels: its id and the binding fences it carries.
#[derive(Clone, Debug)]
struct Relay {
    id: u64,
    actor: usize,
    object_generation: u64,
    /// The session owner node and its lifecycle, the binding generation.
    session_owner: usize,
    lifecycle: u64,
    generation: u64,
    /// The node generation of the route it was sent on.
    route_generation: u64,
    /// The owner lease generation of the route it was sent on.
    route_lease: u64,
    /// The authority owner generation of the route it was sent on.
    route_authority: u64,
    /// Forwarded once by Message Follow already.
    followed: bool,
    /// A message through a resolved ref, not a binding (no slot check, no session order).
    tell: bool,
    /// Captured by a source and relayed to its target.
    captured: bool,
    /// Reached, as captured work, a target whose wait for the source's relay stream after a
    /// fallback had ended without the cutover.
    after_source_wait: bool,
}

#[derive(Clone, Debug)]
enum StoreOp {
    Fence {
        actor: usize,
        expected: AuthorityFence,
        owner: OwnerFence,
    },
    Retire {
        actor: usize,
        fence: AuthorityFence,
        owner: OwnerFence,
    },
    Cas {
        actor: usize,
        expected: AuthorityFence,
        owner: ActorOwner,
    },
    /// The source's read of the moving actors' records after its result timeout.
    Lookup { actors: Vec<ActorId> },
    /// The target's read of the record after its CAS answer was lost.
    ReadOwner { actor: usize },
}

#[derive(Clone, Debug)]
enum Msg {
    /// 24, from a session, a source relaying captured work, or an old owner following.
    Relay(Relay),
    /// 42.
    Seal {
        reloc: u64,
        rec: SessionRelocationSeal,
    },
    /// 43.
    Sealed {
        reloc: u64,
        seal: SealIdentity,
        outcome: SealOutcome,
    },
    /// Restore (source → target), with the binding each actor's slot takes over at the
    /// target (in the request's order).
    Restore {
        reloc: u64,
        request: RestoreRequest,
        bindings: Vec<Option<RegisteredBinding>>,
    },
    RelayReady {
        reloc: u64,
    },
    RestoreFailed {
        reloc: u64,
    },
    Cutover {
        reloc: u64,
    },
    /// The target's result (committed or failed).
    Result {
        reloc: u64,
        committed: Vec<ActorLocation>,
        failed: Vec<ActorId>,
    },
    /// 44.
    Route(SessionRelocationRoute),
    /// 38 Bind (request `id`), with the fences of the location it is addressed to.
    Bind {
        id: u64,
        actor: usize,
        reg: RegisteredBinding,
        object_generation: u64,
        route_generation: u64,
        route_authority: u64,
        /// Forwarded once by Message Follow already.
        followed: bool,
    },
    /// The 38's answer: the owner's record when registered.
    BindReply {
        id: u64,
        result: Option<ActorLocation>,
    },
    /// 51.
    Replaced(Box<BoundSessionReplaced>),
    /// A request's reply, from the node that processed it to its caller's session owner.
    Reply {
        id: u64,
    },
    /// A store call and its answer.
    StoreCall {
        call: u64,
        op: StoreOp,
    },
    StoreAnswer {
        call: u64,
        result: Result<ActorLocation, ()>,
    },
    /// 38 Unbind / Disconnect of one binding identity (tombstone `id`), to the owner its route
    /// names, with the fences of that route.
    Tombstone(Tomb),
    /// The store's answer to a [`StoreOp::Lookup`].
    Records {
        call: u64,
        records: Vec<(ActorId, Option<ActorLocation>)>,
    },
}

/// A 38 tombstone as it travels.
#[derive(Clone, Debug)]
struct Tomb {
    id: u64,
    actor: usize,
    operation: BindOperation,
    /// The binding identity: session owner node, lifecycle, binding generation.
    session_owner: usize,
    lifecycle: u64,
    generation: u64,
    object_generation: u64,
    /// The fences of the route it was sent on.
    route_generation: u64,
    route_authority: u64,
    /// Forwarded once by Message Follow already.
    followed: bool,
}

/// A tombstone at its actor owner, stepped by the real [`TombstonePlan`].
struct HeldTomb {
    tomb: Tomb,
    plan: TombstonePlan,
    /// Its hook's turn is scheduled (the binding is being notified).
    hooking: bool,
    /// Counted as held once.
    held: bool,
    /// Its hook ran here.
    hooked: bool,
}

#[derive(Debug)]
enum Event {
    Act(Action),
    Deliver(Envelope<Msg>),
    Restart {
        node: usize,
    },
    Heal {
        a: Ep,
        b: Ep,
        id: u64,
    },
    /// `node` sees `peer`'s generation `generation` down.
    PeerDown {
        node: usize,
        peer: usize,
        generation: u64,
    },
    PartitionDetect {
        a: usize,
        b: usize,
        id: u64,
    },
    /// A timer of a core on `node` (generation `generation`): every due timer of it runs.
    Timer {
        node: usize,
        generation: u64,
    },
    StoreTimeout {
        node: usize,
        generation: u64,
        call: u64,
    },
    /// A bind's deadline at its session owner.
    BindDeadline {
        id: u64,
    },
    /// A request's terminal reaches its caller (a refusal's answer, or its deadline).
    Terminal {
        id: u64,
        kind: &'static str,
    },
    /// The replaced-callback of replacement `seq` of session `session` ended.
    CallbackDone {
        node: usize,
        generation: u64,
        session: usize,
        seq: u64,
    },
    /// The close timer of a replaced session.
    CloseTimer {
        node: usize,
        generation: u64,
        session: usize,
        seq: u64,
    },
    /// `node` (generation `generation`) registers a new owner lease after its last ran out.
    Reregister {
        node: usize,
        generation: u64,
    },
    /// The turn of tombstone `id`'s `OnDisconnectActor` on `node` comes.
    HookTurn {
        node: usize,
        generation: u64,
        id: u64,
    },
    /// Tombstones held on `node` look again (a seal entry that ended by its hold time).
    TombWake {
        node: usize,
        generation: u64,
    },
    /// Session `session` of `node` binds `actors` again (after its unbind; a new session of the
    /// client after its disconnect, `new`).
    Rebind {
        node: usize,
        generation: u64,
        session: usize,
        actors: Vec<usize>,
        new: bool,
    },
    /// The actor's next turn on `node`.
    Turn {
        node: usize,
        generation: u64,
        actor: usize,
    },
}

/// Where an incarnation's ingress goes.
#[derive(Debug)]
enum IncState {
    /// Dispatching: relays are processed.
    Serving,
    /// The source sealed its runtime: relays queue (held ingress) until the capture or the
    /// unseal.
    Sealed { queue: Vec<Relay> },
    /// The source captured its work: what arrives goes on to the target, in order.
    Relaying {
        target: usize,
        target_generation: u64,
    },
    /// The target's temporary queue of relocation `reloc`: collected, not dispatched.
    Temp { reloc: u64, queue: Vec<Relay> },
    /// The source's relocation failed after relay-ready (or its abort was not durable): never
    /// reopens.
    Ended,
}

#[derive(Debug)]
struct Incarnation {
    /// Work admitted while serving, not yet run (the actor's queue); captured in arrival order
    /// when the runtime is sealed.
    backlog: std::collections::VecDeque<Relay>,
    /// A turn is scheduled.
    turn: bool,
    /// Opened by the cutover timeout's fallback (SB-8.9) with the source's relay stream still
    /// open: regular ingress waits here, behind the captured work, until the stream ends.
    behind: Option<Vec<Relay>>,
    /// That wait ended without the source's cutover: captured work the source relays later is
    /// appended behind what went in meanwhile.
    late_stream: bool,
    object_generation: u64,
    state: IncState,
    slot: BindingSlot,
    /// The store record the incarnation serves under (None for a target before its CAS).
    location: Option<ActorLocation>,
}

struct Session {
    rid: u64,
    agg: SessionBindingAggregate,
    /// The last 44 this session received.
    last_44: Option<SessionRelocationRoute>,
}

struct Source {
    /// The moving actors: one, or the members of the Spot this node hosts (ActorId order).
    actors: Vec<usize>,
    /// A whole-Spot move (`Subject::Spot`): its runtime seal is the Spot's unit.
    spot: bool,
    /// The Spot's runtime is sealed (from `SealRuntime` to `UnsealRuntime` or the end).
    sealed: bool,
    core: SourceHandoff,
    target: usize,
    target_generation: u64,
    /// Each moving actor's owner fence at the start.
    owners: Vec<OwnerFence>,
    /// The binding of each moving actor taken at the start (`node::relocate`'s `moving`):
    /// sealed, and carried by the Restore.
    bindings: Vec<Option<RegisteredBinding>>,
}

impl Source {
    fn moves(&self, actor: usize) -> bool {
        self.actors.contains(&actor)
    }

    fn owner_of(&self, actor: usize) -> OwnerFence {
        let i = self
            .actors
            .iter()
            .position(|a| *a == actor)
            .expect("a moving actor");
        self.owners[i].clone()
    }
}

/// One actor's SB-8.6 recovery at a failed relocation's source.
struct Recovering {
    core: Recovery,
    /// The failed incarnation's owner fence (the record is replaced with it).
    owner: OwnerFence,
}

struct Target {
    /// The actors moving in (the request's order).
    actors: Vec<usize>,
    /// A whole-Spot move.
    spot: bool,
    /// The seals of each actor the Restore named: (actor, session lifecycle, session, binding
    /// generation).
    seals: BTreeSet<(usize, u64, u64, u64)>,
    /// The 44 commits sent, by the same key.
    sent_44: BTreeSet<(usize, u64, u64, u64)>,
    /// It fell back after the cutover timeout (SB-8.9).
    fell_back: bool,
    core: TargetHandoff,
    source: usize,
    source_generation: u64,
}

struct Node {
    up: bool,
    generation: u64,
    holder: Option<LeaseHolder>,
    /// Its owner lease is live (false from a lease expiry to the next registration; the
    /// holder stays the expired one, so what it sends the store is refused).
    lease_live: bool,
    /// Clock offset of this node (clock jumps), ms.
    offset: u64,
    sessions: BTreeMap<usize, Session>,
    actors: BTreeMap<usize, Incarnation>,
    follow: FollowTable,
    sources: BTreeMap<u64, Source>,
    targets: BTreeMap<u64, Target>,
    /// Store calls in flight: call id → (relocation, op).
    calls: BTreeMap<u64, (u64, StoreOp)>,
    /// SB-8.6 recoveries running here, by actor.
    recoveries: BTreeMap<usize, Recovering>,
    /// The last 44 received (node-wide, for a late copy): (session slot, record).
    last_44: Option<(usize, SessionRelocationRoute)>,
    /// 38 tombstones at this actor owner not decided yet (held, or running their hook).
    tombs: BTreeMap<u64, HeldTomb>,
    /// A [`Event::TombWake`] is scheduled.
    tomb_wake: bool,
}

/// A relay's fate.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fate {
    Processed(usize),
    Dropped(&'static str),
}

#[derive(Clone, Debug)]
struct RelayInfo {
    /// (session owner node, lifecycle, session rid, actor).
    key: (usize, u64, u64, usize),
    seq: u64,
    fate: Option<Fate>,
    /// A request: its caller waits for exactly one terminal.
    request: bool,
    /// The request's first terminal at its caller: "reply", "refused", "deadline".
    terminal: Option<&'static str>,
}

struct World<'s> {
    s: &'s Scenario,
    faults: Faults,
    now: Millis,
    base: Instant,
    queue: Queue<Event>,
    net: Network,
    store: MemoryStore,
    nodes: Vec<Node>,
    next_generation: u64,
    next_id: u64,
    relays: BTreeMap<u64, RelayInfo>,
    /// Per (session key): the last sequence processed.
    last_seq: BTreeMap<(usize, u64, u64, usize), u64>,
    /// Per (session key): the next sequence to send.
    next_seq: BTreeMap<(usize, u64, u64, usize), u64>,
    /// Actors left without a serving owner (a crash, a failed relocation) and not activated
    /// again since: the excuse for a refused message of theirs.
    orphaned: BTreeSet<usize>,
    /// Actors activated again after their owner's lease ended, with the authority generation
    /// they were activated under.
    reactivated: BTreeMap<usize, u64>,
    /// (actor, binding generation): bindings that ended with their owner's incarnation (a
    /// crash, a lease that ran out) or with a crashed owner whose actor was activated again
    /// (the new incarnation's slot is empty; SB-5.3 refuses their relays).
    ended_bindings: BTreeSet<(usize, u64)>,
    /// (actor, binding generation): bindings another session's bind replaced at the owner.
    replaced_bindings: BTreeSet<(usize, u64)>,
    /// The session (node, slot) that last bound each actor: the one that relays to it.
    binder: BTreeMap<usize, (usize, usize)>,
    /// Binds in flight: id → (actor, session node, session slot, its lifecycle, terminal).
    binds: BTreeMap<u64, (usize, usize, usize, u64, bool)>,
    /// Relays held by a seal now.
    held: BTreeSet<u64>,
    /// (actor, object generation): incarnations whose record a failed relocation removed.
    retired: BTreeSet<(usize, u64)>,
    /// Actors whose target could not read their record back after a lost CAS answer (the
    /// store out of reach past `CAS_READ_BACK_WAIT`).
    read_back_unreadable: BTreeSet<usize>,
    /// Actors moved at least once.
    moved: BTreeSet<usize>,
    /// Actors moved at least once with their Spot.
    spot_moved: BTreeSet<usize>,
    /// Every tombstone sent: id → (actor, binding generation, disconnect, fate).
    tombs: BTreeMap<u64, (usize, u64, bool, Option<&'static str>)>,
    /// (actor, binding generation) → how often its `OnDisconnectActor` ran.
    hooks: BTreeMap<(usize, u64), u32>,
    /// (actor, binding generation): bindings their session unbound or disconnected.
    unbound: BTreeSet<(usize, u64)>,
    /// (node, actor): the actor's incarnation there ended with its owner's lease while a
    /// relocation of it ran there.
    lease_ended_mid_move: BTreeSet<(usize, usize)>,
    /// (node, actor): a failed relocation's recovery there found the record moved on (the
    /// target's CAS won after the source decided "failed"): no follow entry was installed.
    superseded: BTreeSet<(usize, usize)>,
    /// (target node, actor): a relocation its source decided "failed" (its CAS may still win
    /// at that target).
    decided_failed: BTreeSet<(usize, usize)>,
    /// (actor, binding generation): removed by its session while a relocation's seal held it
    /// (no 44 yet: its route may name an old owner whose follow entry ends before it arrives).
    sent_sealed: BTreeSet<(usize, u64)>,
    /// Session rids handed out (a new session after a disconnect takes the next).
    next_rid: u64,
    cuts: BTreeMap<(Ep, Ep), u64>,
    next_cut: u64,
    stats: Stats,
    trace: Option<Vec<String>>,
}

fn rid(i: usize) -> NodeRid {
    NodeRid::new(format!("n{i}")).expect("valid")
}

fn index_of(node: &NodeRid) -> usize {
    node.as_str()[1..].parse().unwrap_or(usize::MAX)
}

fn actor_id(a: usize) -> ActorId {
    ActorId::new(format!("a{a}")).expect("valid")
}

fn actor_index(a: &ActorId) -> usize {
    a.as_str()[1..].parse().unwrap_or(usize::MAX)
}

fn mesh() -> MeshName {
    MeshName::new("m").expect("valid")
}

fn wire_location(loc: &ActorLocation) -> zlink_wire::ActorLocation {
    zlink_wire::ActorLocation {
        mesh: loc.mesh.clone(),
        node: loc.owner_node.clone(),
        node_generation: loc.node_generation,
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
    }
}

fn call_fence(loc: &ActorLocation) -> CallFence {
    CallFence {
        actor_id: loc.actor_id.clone(),
        object_generation: loc.object_generation,
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        node_generation: loc.node_generation,
    }
}

fn poll_now<T>(f: impl Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store answers at once"),
    }
}

fn relay_id(h: &HeldRelay) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.payload[..8]);
    u64::from_le_bytes(b)
}

impl<'s> World<'s> {
    fn new(s: &'s Scenario, faults: Faults, trace: bool) -> Self {
        let clock = store::ManualClock::at_wall(StoreTime::from_millis(1_000_000));
        let mut w = Self {
            s,
            faults,
            now: 0,
            base: Instant::now(),
            queue: Queue::default(),
            net: Network::new(s.seed, s.delays),
            store: MemoryStore::with_clock(Arc::new(clock)),
            nodes: Vec::new(),
            next_generation: 1,
            next_id: 1,
            relays: BTreeMap::new(),
            last_seq: BTreeMap::new(),
            next_seq: BTreeMap::new(),
            orphaned: BTreeSet::new(),
            reactivated: BTreeMap::new(),
            ended_bindings: BTreeSet::new(),
            replaced_bindings: BTreeSet::new(),
            binder: BTreeMap::new(),
            binds: BTreeMap::new(),
            held: BTreeSet::new(),
            retired: BTreeSet::new(),
            read_back_unreadable: BTreeSet::new(),
            moved: BTreeSet::new(),
            spot_moved: BTreeSet::new(),
            tombs: BTreeMap::new(),
            hooks: BTreeMap::new(),
            unbound: BTreeSet::new(),
            superseded: BTreeSet::new(),
            decided_failed: BTreeSet::new(),
            sent_sealed: BTreeSet::new(),
            lease_ended_mid_move: BTreeSet::new(),
            next_rid: 100,
            cuts: BTreeMap::new(),
            next_cut: 1,
            stats: Stats::default(),
            trace: trace.then(Vec::new),
        };
        for i in 0..s.nodes {
            let n = w.fresh_node(i);
            w.nodes.push(n);
        }
        // Activation of every actor on its first owner, then the binds of its session (set
        // up directly: binding is the sessions world's subject).
        w.stats.spot_seeds = u64::from(!s.spot.is_empty());
        for a in 0..s.actors {
            let owner = if s.spot.contains(&a) {
                s.spot_node
            } else {
                a % s.nodes
            };
            let holder = w.nodes[owner].holder.clone().expect("registered");
            let won = poll_now(w.store.reserve_activation(ActivationRequest {
                actor_id: actor_id(a),
                actor_type: "t".into(),
                owner: ActorOwner {
                    mesh: mesh(),
                    holder,
                },
            }));
            let Ok(Reservation::Won(loc)) = won else {
                panic!("activation of a{a}: {won:?}")
            };
            let loc = poll_now(w.store.mark_ready(actor_id(a), loc.fence())).expect("ready");
            let sidx = a % (s.nodes * s.sessions);
            let (snode, sk) = (sidx / s.sessions, sidx % s.sessions);
            w.binder.insert(a, (snode, sk));
            let g = w.next_id;
            w.next_id += 1;
            let lifecycle = w.nodes[snode].generation;
            let sess = w.nodes[snode].sessions.get_mut(&sk).expect("session");
            let target = BindTarget {
                actor: actor_id(a),
                actor_type: "t".into(),
                object_generation: loc.object_generation,
                location: wire_location(&loc),
            };
            let Ok(BindStart::Request(_)) = sess.agg.begin_bind(target, BindingGeneration::new(g))
            else {
                panic!("bind of a{a}")
            };
            let _ = sess.agg.complete_bind(
                &actor_id(a),
                BindingGeneration::new(g),
                OwnerLeaseGeneration::new(lifecycle),
                Ok(BindSnapshot {
                    actor: actor_id(a),
                    object_generation: loc.object_generation,
                    location: wire_location(&loc),
                    binding_generation: BindingGeneration::new(g),
                }),
            );
            let reg = RegisteredBinding {
                session_owner: rid(snode),
                lifecycle: SessionLifecycleGeneration::new(lifecycle),
                owner_id: OwnerId::new(1_000 + snode as u64),
                owner_lease: OwnerLeaseGeneration::new(lifecycle),
                session: SessionRid::new(sess.rid),
                generation: BindingGeneration::new(g),
            };
            let mut slot = BindingSlot::default();
            let _ = slot.bind(reg);
            w.nodes[owner].actors.insert(
                a,
                Incarnation {
                    backlog: Default::default(),
                    turn: false,
                    behind: None,
                    late_stream: false,
                    object_generation: loc.object_generation.get(),
                    state: IncState::Serving,
                    slot,
                    location: Some(loc),
                },
            );
        }
        w
    }

    fn fresh_node(&mut self, i: usize) -> Node {
        let generation = self.next_generation;
        self.next_generation += 1;
        let lease = poll_now(self.store.register_owner(
            rid(i),
            NodeGeneration::new(generation),
            Duration::from_secs(86_400),
        ))
        .expect("register");
        let mut n = Node {
            up: true,
            generation,
            holder: Some(lease.holder),
            lease_live: true,
            offset: 0,
            sessions: BTreeMap::new(),
            actors: BTreeMap::new(),
            // the seal entry lasts as long as the relocation (released at its end, whatever the
            // outcome); its hold time only bounds an entry nothing releases
            follow: if self.faults.seal_entry_expires {
                FollowTable::default()
            } else {
                FollowTable::new(FollowConfig {
                    seal_hold: Duration::from_secs(60),
                    ..FollowConfig::default()
                })
            },
            sources: BTreeMap::new(),
            targets: BTreeMap::new(),
            calls: BTreeMap::new(),
            recoveries: BTreeMap::new(),
            last_44: None,
            tombs: BTreeMap::new(),
            tomb_wake: false,
        };
        // Only the first lifecycle has client sessions (a restarted node's clients would bind
        // anew: the sessions world's subject).
        if generation as usize <= self.s.nodes {
            for k in 0..self.s.sessions {
                let r = 1 + k as u64;
                let id = SessionIdentity {
                    owner: rid(i),
                    lifecycle: SessionLifecycleGeneration::new(generation),
                    session: SessionRid::new(r),
                };
                n.sessions.insert(
                    k,
                    Session {
                        rid: r,
                        agg: SessionBindingAggregate::new(
                            id,
                            OwnerId::new(1_000 + i as u64),
                            Duration::from_secs(30),
                        ),
                        last_44: None,
                    },
                );
            }
        }
        n
    }

    /// `node`'s clock now.
    fn instant(&self, node: usize) -> Instant {
        self.base + Duration::from_millis(self.now + self.nodes[node].offset)
    }

    /// The virtual time at which `node`'s clock reads `at`.
    fn virtual_at(&self, node: usize, at: Instant) -> Millis {
        ms_since(self.base, at)
            .saturating_sub(self.nodes[node].offset)
            .max(self.now)
    }

    fn log(&mut self, text: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            t.push(format!("{:>6} {}", self.now, text()));
        }
    }

    fn violation(&self, what: String) -> Violation {
        Violation { at: self.now, what }
    }

    fn send_ep(&mut self, from: Ep, to: Ep, msg: Msg) {
        let relay = match &msg {
            Msg::Relay(r) => Some(r.id),
            _ => None,
        };
        let tomb = match &msg {
            Msg::Tombstone(t) => Some(t.id),
            _ => None,
        };
        match self.net.send(self.now, from, to, msg) {
            Some((at, env)) => self.queue.push(at, Event::Deliver(env)),
            None => {
                if let Some(id) = relay {
                    self.fate(id, Fate::Dropped("sent on a broken connection"));
                }
                if let Some(id) = tomb {
                    self.tomb_fate(id, "lost with its connection");
                }
            }
        }
    }

    /// Records how tombstone `id` ended (once).
    fn tomb_fate(&mut self, id: u64, fate: &'static str) {
        let Some(t) = self.tombs.get_mut(&id) else {
            return;
        };
        if t.3.is_some() {
            return;
        }
        t.3 = Some(fate);
        match fate {
            "applied" => self.stats.tombstones_applied += 1,
            "lost with its connection" | "its node crashed" => self.stats.tombstones_lost += 1,
            _ => self.stats.tombstones_not_current += 1,
        }
        if let Some(tr) = &mut self.trace {
            tr.push(format!("{:>6}   tombstone {id}: {fate}", self.now));
        }
    }

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        self.send_ep(Ep::Node(from), Ep::Node(to), msg);
    }

    /// Records the fate of relay `id` (exactly one).
    fn fate(&mut self, id: u64, fate: Fate) {
        let Some(info) = self.relays.get_mut(&id) else {
            return;
        };
        if let Fate::Dropped(why) = &fate {
            self.stats.dropped += 1;
            let why = *why;
            match why {
                "sent on a broken connection" | "lost with its connection" => {
                    self.stats.dropped_connection += 1;
                }
                "its node crashed"
                | "its owner crashed"
                | "its target crashed"
                | "its binding ended with its crashed owner" => {
                    self.stats.dropped_crash += 1;
                }
                "its seal's session timed out" | "its session's seal timed out" => {
                    self.stats.dropped_seal_timeout += 1;
                }
                "followed once already (it moved again)" => self.stats.dropped_followed_once += 1,
                "its owner's lease ran out" => self.stats.dropped_lease += 1,
                "its binding was replaced" | "its session closed (replaced)" => {
                    self.stats.dropped_replaced += 1;
                }
                "its binding was unbound" | "its session disconnected" => {
                    self.stats.dropped_tombstoned += 1;
                }
                _ => self.stats.dropped_no_owner += 1,
            }
            if let Some(t) = &mut self.trace {
                t.push(format!("{:>6}   relay {id} dropped: {why}", self.now));
            }
        }
        if let (true, Fate::Dropped(why)) = (info.request, &fate) {
            // the caller's terminal: the refusing node's answer, the session owner's own
            // drop at once, or nothing (the deadline decides) when no one can answer
            let at = match *why {
                "sent on a broken connection" | "lost with its connection" | "its node crashed" => {
                    None
                }
                "its session's seal timed out"
                | "its seal's session timed out"
                | "its session closed (replaced)"
                | "its binding was unbound"
                | "its session disconnected"
                | "its deadline passed while held" => Some(self.now),
                _ => Some(self.now + 2),
            };
            if let Some(at) = at {
                self.queue.push(
                    at,
                    Event::Terminal {
                        id,
                        kind: "refused",
                    },
                );
            }
        }
        if info.fate.is_none() {
            info.fate = Some(fate);
        } else {
            // a second fate: checked by `check_fates` (kept as the first)
            info.fate = Some(Fate::Dropped("SECOND FATE"));
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
            self.check_step()?;
        }
        self.now = end;
        self.stats.lost_messages = self.net.dropped;
        self.final_check()
    }

    fn step(&mut self, ev: Event) -> Result<(), Violation> {
        match ev {
            Event::Act(a) => self.act(a),
            Event::Deliver(env) => {
                let to = env.to;
                let accepted = self.net.accept(&env);
                let up = match to {
                    Ep::Node(i) => self.nodes[i].up,
                    Ep::Store => true,
                };
                if !accepted || !up {
                    if let Msg::Relay(r) = &env.msg {
                        self.fate(r.id, Fate::Dropped("lost with its connection"));
                    }
                    if let Msg::Tombstone(t) = &env.msg {
                        self.tomb_fate(t.id, "lost with its connection");
                    }
                    return Ok(());
                }
                match to {
                    Ep::Store => {
                        self.store_call(env.from, env.msg);
                        Ok(())
                    }
                    Ep::Node(i) => {
                        let from = match env.from {
                            Ep::Node(f) => f,
                            Ep::Store => usize::MAX,
                        };
                        self.deliver(from, i, env.msg)
                    }
                }
            }
            Event::Restart { node } => {
                let n = self.fresh_node(node);
                self.log(|| format!("n{node} restarts, generation {}", n.generation));
                self.nodes[node] = n;
                Ok(())
            }
            Event::Heal { a, b, id } => {
                let key = (a.min(b), a.max(b));
                if self.cuts.get(&key) == Some(&id) {
                    self.cuts.remove(&key);
                    self.net.heal(a, b);
                    self.log(|| format!("heal {a} - {b}"));
                }
                Ok(())
            }
            Event::PartitionDetect { a, b, id } => {
                let key = (Ep::Node(a.min(b)), Ep::Node(a.max(b)));
                if self.cuts.get(&key) == Some(&id) {
                    for (x, y) in [(a, b), (b, a)] {
                        let g = self.nodes[y].generation;
                        self.peer_down(x, y, g)?;
                    }
                }
                Ok(())
            }
            Event::PeerDown {
                node,
                peer,
                generation,
            } => self.peer_down(node, peer, generation),
            Event::Timer { node, generation } => {
                if self.nodes[node].up && self.nodes[node].generation == generation {
                    self.timers(node)?;
                }
                Ok(())
            }
            Event::Terminal { id, kind } => {
                self.terminal(id, kind);
                Ok(())
            }
            Event::BindDeadline { id } => {
                if let Some(b) = self.binds.get_mut(&id)
                    && !b.4
                {
                    b.4 = true;
                    let (actor, node, k, lifecycle, _) = *b;
                    self.stats.bind_timeouts += 1;
                    let n = &mut self.nodes[node];
                    if n.up
                        && n.generation == lifecycle
                        && let Some(s) = n.sessions.get_mut(&k)
                    {
                        let _ = s.agg.complete_bind(
                            &actor_id(actor),
                            BindingGeneration::new(id),
                            OwnerLeaseGeneration::new(lifecycle),
                            Err(zlink_wire::ErrorKind::Unavailable),
                        );
                    }
                }
                Ok(())
            }
            Event::CallbackDone {
                node,
                generation,
                session,
                seq,
            } => {
                if self.nodes[node].up && self.nodes[node].generation == generation {
                    let now = self.instant(node);
                    if let Some(s) = self.nodes[node].sessions.get_mut(&session) {
                        let _ = s.agg.callback_finished(now, seq);
                        if let Some(due) = s.agg.poll_timeout() {
                            let at = self.virtual_at(node, due);
                            self.queue.push(
                                at,
                                Event::CloseTimer {
                                    node,
                                    generation,
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
                generation,
                session,
                seq,
            } => {
                if self.nodes[node].up && self.nodes[node].generation == generation {
                    let now = self.instant(node);
                    if let Some(s) = self.nodes[node].sessions.get_mut(&session)
                        && s.agg.handle_timeout(now, seq).is_some()
                    {
                        self.log(|| format!("n{node}: session {session} closes (replaced)"));
                        self.close_session(node, session);
                    }
                }
                Ok(())
            }
            Event::Reregister { node, generation } => {
                if self.nodes[node].up && self.nodes[node].generation == generation {
                    let lease = poll_now(self.store.register_owner(
                        rid(node),
                        NodeGeneration::new(generation),
                        Duration::from_secs(86_400),
                    ))
                    .expect("register again");
                    self.log(|| {
                        format!(
                            "n{node} registers again: lease {}",
                            lease.holder.lease_generation.get()
                        )
                    });
                    self.nodes[node].holder = Some(lease.holder);
                    self.nodes[node].lease_live = true;
                }
                Ok(())
            }
            Event::HookTurn {
                node,
                generation,
                id,
            } => {
                if self.nodes[node].up && self.nodes[node].generation == generation {
                    self.hook_turn(node, id)?;
                }
                Ok(())
            }
            Event::TombWake { node, generation } => {
                if self.nodes[node].up && self.nodes[node].generation == generation {
                    self.nodes[node].tomb_wake = false;
                    self.step_tombs(node)?;
                    if self.nodes[node]
                        .tombs
                        .values()
                        .any(|h| h.held && !h.hooking)
                    {
                        self.arm_tomb_wake(node);
                    }
                }
                Ok(())
            }
            Event::Rebind {
                node,
                generation,
                session,
                actors,
                new,
            } => {
                if !(self.nodes[node].up && self.nodes[node].generation == generation) {
                    return Ok(());
                }
                if new {
                    let r = self.next_rid;
                    self.next_rid += 1;
                    let id = SessionIdentity {
                        owner: rid(node),
                        lifecycle: SessionLifecycleGeneration::new(generation),
                        session: SessionRid::new(r),
                    };
                    self.nodes[node].sessions.insert(
                        session,
                        Session {
                            rid: r,
                            agg: SessionBindingAggregate::new(
                                id,
                                OwnerId::new(1_000 + node as u64),
                                Duration::from_secs(30),
                            ),
                            last_44: None,
                        },
                    );
                }
                for a in actors {
                    self.bind(a, node, session)?;
                }
                Ok(())
            }
            Event::Turn {
                node,
                generation,
                actor,
            } => {
                if !(self.nodes[node].up && self.nodes[node].generation == generation) {
                    return Ok(());
                }
                let Some(inc) = self.nodes[node].actors.get_mut(&actor) else {
                    return Ok(());
                };
                inc.turn = false;
                if !matches!(inc.state, IncState::Serving) {
                    return Ok(());
                }
                let Some(r) = inc.backlog.pop_front() else {
                    return Ok(());
                };
                self.process(node, r)?;
                self.schedule_turn(node, actor);
                Ok(())
            }
            Event::StoreTimeout {
                node,
                generation,
                call,
            } => {
                if self.nodes[node].up && self.nodes[node].generation == generation {
                    if let Some((reloc, op)) = self.nodes[node].calls.remove(&call) {
                        self.log(|| format!("n{node}: store call {call} timed out"));
                        if let StoreOp::Cas { actor, owner, .. } = &op {
                            self.stats.cas_answers_lost += 1;
                            if self.faults.cas_loss_is_failure {
                                // the CAS may have won unseen: the target discards what it
                                // holds while the store may name it
                                self.orphaned.insert(*actor);
                            } else {
                                // the answer was lost: the target reads the record back and
                                // the store decides (`handle_cas_lost`, `ReadOwner`)
                                let now = self.instant(node);
                                if let Some(t) = self.nodes[node].targets.get_mut(&reloc) {
                                    t.core.handle_cas_lost(
                                        now,
                                        &actor_id(*actor),
                                        owner.holder.clone(),
                                    );
                                }
                                return self.drive_target(node, reloc);
                            }
                        }
                        self.store_result(node, reloc, op, Err(()))?;
                    }
                }
                Ok(())
            }
        }
    }

    fn act(&mut self, a: Action) -> Result<(), Violation> {
        self.log(|| format!("{a:?}"));
        match a {
            Action::Relay { actor } => self.relay(actor),
            Action::Tell { from, actor } => self.tell(from, actor),
            Action::Relocate { actor, to } => self.relocate(actor, to),
            Action::RelocateSpot { to } => self.relocate_spot(to),
            Action::Crash { node, down_ms } => self.crash(node, down_ms),
            Action::Partition { a, b, ms } => {
                let key = (a.min(b), a.max(b));
                if a == b || self.cuts.contains_key(&key) {
                    return Ok(());
                }
                self.stats.partitions += 1;
                let id = self.next_cut;
                self.next_cut += 1;
                self.cuts.insert(key, id);
                self.net.partition(a, b);
                if let (Ep::Node(x), Ep::Node(y)) = (a, b)
                    && ms >= PEER_TIMEOUT_MS
                {
                    self.queue.push(
                        self.now + PEER_TIMEOUT_MS,
                        Event::PartitionDetect { a: x, b: y, id },
                    );
                }
                self.queue.push(self.now + ms, Event::Heal { a, b, id });
                Ok(())
            }
            Action::ClockJump { node, ms } => {
                if self.nodes[node].up {
                    self.nodes[node].offset += ms;
                    self.arm(node);
                }
                Ok(())
            }
            Action::LeaseExpiry { node, down_ms } => self.lease_expiry(node, down_ms),
            Action::Unbind { actor } => self.unbind(actor),
            Action::Disconnect { actor } => self.disconnect(actor),
            Action::Bind {
                actor,
                node,
                session,
            } => self.bind(actor, node, session),
            Action::Late44 { node } => {
                if !self.nodes[node].up {
                    return Ok(());
                }
                let Some((k, rec)) = self.nodes[node].last_44.clone() else {
                    return Ok(());
                };
                let Some(s) = self.nodes[node].sessions.get_mut(&k) else {
                    return Ok(());
                };
                let before: Vec<_> = s
                    .agg
                    .bound()
                    .map(|b| (b.actor.clone(), b.generation, b.route.clone()))
                    .collect();
                let r = s.agg.handle_route(&rec);
                let after: Vec<_> = s
                    .agg
                    .bound()
                    .map(|b| (b.actor.clone(), b.generation, b.route.clone()))
                    .collect();
                // spec: SB-8.3 — a late or duplicate 44 is ignored
                if r.is_ok() || before != after {
                    return Err(self.violation(format!(
                        "a late 44 on n{node} was applied ({r:?}): {before:?} -> {after:?}"
                    )));
                }
                self.stats.late_44 += 1;
                Ok(())
            }
        }
    }

    /// The session bound to `actor` relays its next message.
    fn relay(&mut self, actor: usize) -> Result<(), Violation> {
        let (node, k) = self.binder[&actor];
        if !self.nodes[node].up {
            return Ok(());
        }
        let lifecycle = self.nodes[node].generation;
        let Some(s) = self.nodes[node].sessions.get_mut(&k) else {
            return Ok(());
        };
        let Some(g) = s.agg.find(&actor_id(actor)).map(|b| b.generation) else {
            return Ok(());
        };
        let Ok(ticket) = s.agg.relay(&actor_id(actor), g) else {
            return Ok(());
        };
        let key = (node, lifecycle, s.rid, actor);
        let id = self.next_id;
        self.next_id += 1;
        // a third of a session's relays are requests (drawn from the seed and the id)
        let request = super::mix(self.s.seed ^ 0x24, id) % 3 == 0;
        let seq = {
            let n = self.next_seq.entry(key).or_insert(0);
            *n += 1;
            *n
        };
        self.relays.insert(
            id,
            RelayInfo {
                key,
                seq,
                fate: None,
                request,
                terminal: None,
            },
        );
        self.stats.relays += 1;
        if request {
            self.stats.requests += 1;
            if !self.faults.no_request_deadline {
                self.queue.push(
                    self.now + REQUEST_DEADLINE_MS,
                    Event::Terminal {
                        id,
                        kind: "deadline",
                    },
                );
            }
        }
        let held = HeldRelay::one_way(DispatchKey::new(1), Bytes::from(id.to_le_bytes().to_vec()));
        // held by the seal (SB-8.2); a binding whose seal ended meanwhile sends at once
        if ticket.held() && s.agg.hold_relay(&actor_id(actor), g, held).is_ok() {
            self.stats.held += 1;
            self.held.insert(id);
            self.log(|| format!("  relay {id} (seq {seq}) held by the seal"));
            return Ok(());
        }
        let r = Relay {
            id,
            actor,
            object_generation: ticket.binding.object_generation.get(),
            session_owner: node,
            lifecycle,
            generation: g.get(),
            route_generation: ticket.binding.route.node_generation.get(),
            route_lease: ticket.binding.route.owner_lease_generation.get(),
            route_authority: ticket.binding.route.authority_owner_generation.get(),
            followed: false,
            tell: false,
            captured: false,
            after_source_wait: false,
        };
        let to = index_of(ticket.to());
        self.log(|| format!("  relay {id} (seq {seq}) -> n{to}"));
        self.send(node, to, Msg::Relay(r));
        Ok(())
    }

    /// Session `k` of `node` binds `actor` (38) at the location the store names now: the
    /// owner registers it in its slot (replacing the binding it had: a 51 to that session)
    /// only while its incarnation serves under the fences the bind carries.
    fn bind(&mut self, actor: usize, node: usize, k: usize) -> Result<(), Violation> {
        if !self.nodes[node].up || self.net.is_cut(Ep::Node(node), Ep::Store) {
            return Ok(());
        }
        let Some(loc) = poll_now(self.store.lookup(actor_id(actor))).ok().flatten() else {
            return Ok(());
        };
        let lifecycle = self.nodes[node].generation;
        let g = self.next_id;
        let Some(s) = self.nodes[node].sessions.get_mut(&k) else {
            return Ok(());
        };
        if s.agg.find(&actor_id(actor)).is_some() {
            return Ok(());
        }
        let target = BindTarget {
            actor: actor_id(actor),
            actor_type: "t".into(),
            object_generation: loc.object_generation,
            location: wire_location(&loc),
        };
        let Ok(BindStart::Request(_)) = s.agg.begin_bind(target, BindingGeneration::new(g)) else {
            return Ok(());
        };
        self.next_id += 1;
        let reg = RegisteredBinding {
            session_owner: rid(node),
            lifecycle: SessionLifecycleGeneration::new(lifecycle),
            owner_id: OwnerId::new(1_000 + node as u64),
            owner_lease: OwnerLeaseGeneration::new(lifecycle),
            session: SessionRid::new(s.rid),
            generation: BindingGeneration::new(g),
        };
        self.binds.insert(g, (actor, node, k, lifecycle, false));
        self.stats.binds += 1;
        self.queue
            .push(self.now + BIND_DEADLINE_MS, Event::BindDeadline { id: g });
        let to = index_of(&loc.owner_node);
        self.log(|| format!("  bind {g} of a{actor} by n{node} session {k} -> n{to}"));
        self.send(
            node,
            to,
            Msg::Bind {
                id: g,
                actor,
                reg,
                object_generation: loc.object_generation.get(),
                route_generation: loc.node_generation.get(),
                route_authority: loc.authority_owner_generation.get(),
                followed: false,
            },
        );
        Ok(())
    }

    /// Relays of session `k` of `node` (and of `actor` when given) held by a seal now.
    fn held_of(&self, node: usize, k: usize, actor: Option<usize>) -> Vec<u64> {
        let lifecycle = self.nodes[node].generation;
        let Some(rid) = self.nodes[node].sessions.get(&k).map(|s| s.rid) else {
            return Vec::new();
        };
        self.held
            .iter()
            .copied()
            .filter(|id| {
                self.relays.get(id).is_some_and(|i| {
                    i.fate.is_none()
                        && i.key.0 == node
                        && i.key.1 == lifecycle
                        && i.key.2 == rid
                        && actor.is_none_or(|a| i.key.3 == a)
                })
            })
            .collect()
    }

    /// Session `k` of `node` closes (its replacement's close timer): what it holds goes.
    fn close_session(&mut self, node: usize, k: usize) {
        for id in self.held_of(node, k, None) {
            self.held.remove(&id);
            self.fate(id, Fate::Dropped("its session closed (replaced)"));
        }
        self.nodes[node].sessions.remove(&k);
    }

    /// The session bound to `actor` unbinds it (SB-6.6): the binding leaves the aggregate (its
    /// seal and held relays with it), a 38 Unbind goes to the owner its route names, and the
    /// session binds the actor again later.
    fn unbind(&mut self, actor: usize) -> Result<(), Violation> {
        let (node, k) = self.binder[&actor];
        if !self.nodes[node].up {
            return Ok(());
        }
        let lifecycle = self.nodes[node].generation;
        let held = self.held_of(node, k, Some(actor));
        let Some(s) = self.nodes[node].sessions.get_mut(&k) else {
            return Ok(());
        };
        let Some(g) = s.agg.find(&actor_id(actor)).map(|b| b.generation) else {
            return Ok(());
        };
        let sealed = s.agg.is_sealed(&actor_id(actor));
        let Ok(b) = s.agg.remove(&actor_id(actor), g) else {
            return Ok(());
        };
        if sealed {
            self.sent_sealed.insert((actor, g.get()));
        }
        for id in held {
            self.held.remove(&id);
            self.fate(id, Fate::Dropped("its binding was unbound"));
        }
        self.send_tomb(node, lifecycle, &b, BindOperation::Unbind);
        self.queue.push(
            self.now + REBIND_MS,
            Event::Rebind {
                node,
                generation: lifecycle,
                session: k,
                actors: vec![actor],
                new: false,
            },
        );
        Ok(())
    }

    /// The client of the session bound to `actor` disconnects (SB-7.1): the session closes with
    /// its snapshot, one 38 Disconnect per binding to the owner its route names (each owner runs
    /// the Spot's `OnDisconnectActor` once, SB-7.3, SB-7.4); a new session of the client binds
    /// the actors again later.
    fn disconnect(&mut self, actor: usize) -> Result<(), Violation> {
        let (node, k) = self.binder[&actor];
        if !self.nodes[node].up || !self.nodes[node].sessions.contains_key(&k) {
            return Ok(());
        }
        let lifecycle = self.nodes[node].generation;
        let held = self.held_of(node, k, None);
        let mut s = self.nodes[node].sessions.remove(&k).expect("session");
        let sealed: Vec<(usize, u64)> = s
            .agg
            .bound()
            .filter(|b| s.agg.is_sealed(&b.actor))
            .map(|b| (actor_index(&b.actor), b.generation.get()))
            .collect();
        self.sent_sealed.extend(sealed);
        let bindings = s.agg.disconnect();
        for id in held {
            self.held.remove(&id);
            self.fate(id, Fate::Dropped("its session disconnected"));
        }
        let mut actors = Vec::new();
        for b in &bindings {
            actors.push(actor_index(&b.actor));
            self.send_tomb(node, lifecycle, b, BindOperation::Disconnect);
        }
        self.log(|| format!("  n{node} session {k} disconnects: {actors:?}"));
        self.queue.push(
            self.now + REBIND_MS,
            Event::Rebind {
                node,
                generation: lifecycle,
                session: k,
                actors,
                new: true,
            },
        );
        Ok(())
    }

    /// Sends the 38 tombstone `operation` of binding `b` of a session of `node`.
    fn send_tomb(
        &mut self,
        node: usize,
        lifecycle: u64,
        b: &zlink::session::aggregate::Binding,
        operation: BindOperation,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        let actor = actor_index(&b.actor);
        let disconnect = operation == BindOperation::Disconnect;
        self.tombs
            .insert(id, (actor, b.generation.get(), disconnect, None));
        self.unbound.insert((actor, b.generation.get()));
        self.stats.tombstones += 1;
        if disconnect {
            self.stats.disconnects += 1;
        }
        let to = index_of(&b.route.node);
        self.log(|| {
            format!(
                "  tombstone {id} ({operation:?}) of a{actor} binding {} -> n{to}",
                b.generation.get()
            )
        });
        let t = Tomb {
            id,
            actor,
            operation,
            session_owner: node,
            lifecycle,
            generation: b.generation.get(),
            object_generation: b.object_generation.get(),
            route_generation: b.route.node_generation.get(),
            route_authority: b.route.authority_owner_generation.get(),
            followed: false,
        };
        self.send(node, to, Msg::Tombstone(t));
    }

    /// Where a tombstone's incarnation is on `node` (`Node::whereabouts`): not live here; sealed
    /// by a relocation that has neither committed nor aborted (the Follow table's seal entry of
    /// that object generation); or here.
    fn whereabouts(&mut self, node: usize, actor: usize, og: u64) -> Whereabouts {
        let live = self.nodes[node]
            .actors
            .get(&actor)
            .is_some_and(|inc| !matches!(inc.state, IncState::Temp { .. } | IncState::Ended));
        if !live {
            return Whereabouts::Away;
        }
        let now = self.instant(node);
        let sealed =
            self.nodes[node]
                .follow
                .lookup(&actor_id(actor), ObjectGeneration::new(og), now)
                == FollowLookup::Sealed;
        if sealed && !self.faults.tombstone_ignores_seal {
            Whereabouts::Sealed
        } else {
            Whereabouts::Here
        }
    }

    fn arm_tomb_wake(&mut self, node: usize) {
        if !self.nodes[node].tomb_wake {
            self.nodes[node].tomb_wake = true;
            let generation = self.nodes[node].generation;
            self.queue.push(
                self.now + TOMBSTONE_WAKE_MS,
                Event::TombWake { node, generation },
            );
        }
    }

    /// Every tombstone of `node` not running its hook takes its next step.
    fn step_tombs(&mut self, node: usize) -> Result<(), Violation> {
        let ids: Vec<u64> = self.nodes[node]
            .tombs
            .iter()
            .filter(|(_, h)| !h.hooking)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.step_tomb(node, id)?;
        }
        Ok(())
    }

    /// Tombstone `id` at actor owner `node` takes its steps (`Node::tombstone_binding`): the
    /// real [`TombstonePlan`] decides from where the incarnation is; this driver holds it, runs
    /// the hook, removes the binding from the slot, or forwards it once by Message Follow.
    fn step_tomb(&mut self, node: usize, id: u64) -> Result<(), Violation> {
        let Some(h) = self.nodes[node].tombs.get(&id) else {
            return Ok(());
        };
        if h.hooking {
            return Ok(());
        }
        let t = h.tomb.clone();
        let at = self.whereabouts(node, t.actor, t.object_generation);
        let h = self.nodes[node].tombs.get_mut(&id).expect("tomb");
        let step = h.plan.step(at);
        let hooked = h.hooked;
        let (sender, lc, g) = (
            rid(t.session_owner),
            SessionLifecycleGeneration::new(t.lifecycle),
            BindingGeneration::new(t.generation),
        );
        match step {
            TombstoneStep::Hold => {
                // only the binding the relocation carries is held; another identity is not
                // current here nor there (binds are refused while sealed)
                let current = self.nodes[node].actors.get(&t.actor).is_some_and(|inc| {
                    inc.slot
                        .current()
                        .is_some_and(|c| c.same_identity(&sender, lc, g))
                });
                if !current {
                    self.nodes[node].tombs.remove(&id);
                    self.tomb_fate(id, if hooked { "applied" } else { "not current" });
                    return Ok(());
                }
                let h = self.nodes[node].tombs.get_mut(&id).expect("tomb");
                if !h.held {
                    h.held = true;
                    self.stats.tombstones_held += 1;
                    self.log(|| format!("  n{node} holds tombstone {id} (sealed)"));
                }
                self.arm_tomb_wake(node);
                Ok(())
            }
            TombstoneStep::RunHook => {
                // the binding stays current while the hook runs (SB-7.4), once (SB-7.3)
                let begun = self.nodes[node]
                    .actors
                    .get_mut(&t.actor)
                    .is_some_and(|inc| inc.slot.begin_disconnect(&sender, lc, g));
                if !begun {
                    self.nodes[node].tombs.remove(&id);
                    self.tomb_fate(id, "not current");
                    return Ok(());
                }
                self.nodes[node].tombs.get_mut(&id).expect("tomb").hooking = true;
                let generation = self.nodes[node].generation;
                // an application callback: up to four turns long
                let ms = super::mix(self.s.seed ^ 0x0D15, id) % (4 * self.s.turn_ms + 1);
                self.queue.push(
                    self.now + ms,
                    Event::HookTurn {
                        node,
                        generation,
                        id,
                    },
                );
                Ok(())
            }
            TombstoneStep::TombstoneHere => {
                let removed = self.nodes[node]
                    .actors
                    .get_mut(&t.actor)
                    .and_then(|inc| inc.slot.tombstone(&sender, lc, g))
                    .is_some();
                self.nodes[node].tombs.remove(&id);
                self.log(|| format!("  n{node} tombstone {id}: removed {removed}"));
                self.tomb_fate(
                    id,
                    if removed || hooked {
                        "applied"
                    } else {
                        "not current"
                    },
                );
                Ok(())
            }
            TombstoneStep::Forward(operation) => {
                self.nodes[node].tombs.remove(&id);
                let operation = if self.faults.forward_as_unbind {
                    BindOperation::Unbind
                } else {
                    operation
                };
                if t.followed {
                    // forwarded once already: the new owner moved it on again
                    self.tomb_fate(id, "followed once already");
                    return Ok(());
                }
                let now = self.instant(node);
                let og = ObjectGeneration::new(t.object_generation);
                let fence = CallFence {
                    actor_id: actor_id(t.actor),
                    object_generation: og,
                    authority_owner_generation: AuthorityOwnerGeneration::new(t.route_authority),
                    owner_lease_generation: OwnerLeaseGeneration::new(0),
                    node_generation: NodeGeneration::new(t.route_generation),
                };
                let me = self.nodes[node].generation;
                let looked = self.nodes[node].follow.lookup(&actor_id(t.actor), og, now);
                if !hooked
                    && (looked == FollowLookup::Sealed
                        || self.lease_ended_mid_move.contains(&(node, t.actor)))
                {
                    // not live here because its owner's lease ran out mid-move (the
                    // incarnation ended with it): while the move runs Message Follow refuses it
                    // (`Sealed`), and when it commits no follow entry is installed (the node
                    // installs one only with the incarnation it ends), so the target keeps the
                    // binding it carried (a node gap: counted, reported)
                    self.stats.tombstones_stranded += 1;
                    self.tomb_fate(id, "refused sealed (its owner's lease ran out mid-move)");
                    return Ok(());
                }
                if t.route_generation == me
                    && let FollowLookup::Forward(route) = looked
                    && check_moved(&route.source, &fence, FenceUse::Bind).is_ok()
                {
                    let to = index_of(&route.target.owner_node);
                    self.stats.tombstones_forwarded += 1;
                    self.log(|| {
                        format!("  n{node} forwards tombstone {id} ({operation:?}) to n{to}")
                    });
                    let f = Tomb {
                        operation,
                        route_generation: route.target.node_generation.get(),
                        route_authority: route.target.authority_owner_generation.get(),
                        followed: true,
                        ..t
                    };
                    self.send(node, to, Msg::Tombstone(f));
                    return Ok(());
                }
                if t.route_generation != me && !hooked {
                    // addressed to a lifecycle of this node that crashed (the 44 that would have
                    // moved the route on was lost): nothing here knows where the binding went
                    self.tomb_fate(id, "its route's owner crashed");
                    return Ok(());
                }
                // no route (ended, or the follow time is over): nothing holds it
                self.tomb_fate(id, if hooked { "applied" } else { "not current" });
                Ok(())
            }
        }
    }

    /// The turn of tombstone `id`'s `OnDisconnectActor` comes on `node`: it runs as a lifecycle
    /// turn of the actor's Spot lane. A Spot sealed by its relocation holds the turn (it runs
    /// after an abort); an incarnation that moved or ended drops it unstarted.
    fn hook_turn(&mut self, node: usize, id: u64) -> Result<(), Violation> {
        let Some(h) = self.nodes[node].tombs.get(&id) else {
            return Ok(());
        };
        let t = h.tomb.clone();
        let n = &self.nodes[node];
        let inc = n.actors.get(&t.actor).filter(|inc| {
            inc.object_generation == t.object_generation
                && !matches!(inc.state, IncState::Temp { .. } | IncState::Ended)
        });
        let ran = match inc {
            None => false,
            Some(inc) => {
                let spot_sealed = matches!(
                    inc.state,
                    IncState::Sealed { .. } | IncState::Relaying { .. }
                ) && n.sources.values().any(|s| s.spot && s.moves(t.actor));
                if spot_sealed {
                    let generation = n.generation;
                    self.queue.push(
                        self.now + 20,
                        Event::HookTurn {
                            node,
                            generation,
                            id,
                        },
                    );
                    return Ok(());
                }
                true
            }
        };
        if ran {
            let runs = self.hooks.entry((t.actor, t.generation)).or_insert(0);
            *runs += 1;
            let runs = *runs;
            self.stats.hooks_run += 1;
            if t.followed {
                self.stats.hooks_run_forwarded += 1;
            }
            self.log(|| {
                format!(
                    "  n{node}: OnDisconnectActor of a{} (tombstone {id})",
                    t.actor
                )
            });
            // spec: SB-7.3, SB-7.4 — the Spot's OnDisconnectActor runs exactly once per binding
            if runs > 1 {
                return Err(self.violation(format!(
                    "OnDisconnectActor of a{} ran {runs} times for binding {} (on n{node}, \
                     tombstone {id})",
                    t.actor, t.generation
                )));
            }
        } else {
            self.stats.hooks_dropped += 1;
        }
        let h = self.nodes[node].tombs.get_mut(&id).expect("tomb");
        h.plan.hook_ended(ran);
        h.hooking = false;
        h.hooked |= ran;
        self.step_tomb(node, id)
    }

    /// A 38 at actor owner `to`.
    #[allow(clippy::too_many_arguments)]
    fn handle_bind(
        &mut self,
        to: usize,
        id: u64,
        actor: usize,
        reg: RegisteredBinding,
        fences: (u64, u64, u64),
        followed: bool,
    ) -> Result<(), Violation> {
        let (og, route_generation, route_authority) = fences;
        let session_node = index_of(&reg.session_owner);
        let me = self.nodes[to].generation;
        let lease_live = self.nodes[to].lease_live;
        if let Some(inc) = self.nodes[to].actors.get_mut(&actor)
            && inc.object_generation == og
        {
            // the owner's bind approval (SB-5.2: object generation, node generation,
            // authority — never the lease), only while it serves (SB-5.12: sealed or moving
            // answers Unavailable)
            // …nor while a relocation of it runs here: its seal targets and the Restore's
            // binding were taken at the start
            let moving = self.nodes[to].sources.values().any(|s| s.moves(actor))
                && !self.faults.bind_until_runtime_seal;
            let Some(inc) = self.nodes[to].actors.get_mut(&actor) else {
                unreachable!()
            };
            let serving = matches!(inc.state, IncState::Serving) && lease_live && !moving;
            let loc = inc.location.clone();
            let fenced = loc.as_ref().is_some_and(|l| {
                l.node_generation.get() == route_generation
                    && route_generation == me
                    && l.authority_owner_generation.get() == route_authority
            });
            if !(serving && fenced) {
                self.send(to, session_node, Msg::BindReply { id, result: None });
                return Ok(());
            }
            let loc = loc.expect("a serving incarnation has its record");
            let replaced = match inc.slot.bind(reg) {
                SlotBind::Registered { replaced } => replaced,
                SlotBind::Unchanged => None,
            };
            // the reply first, then the 51 (SB-6.1)
            self.send(
                to,
                session_node,
                Msg::BindReply {
                    id,
                    result: Some(loc.clone()),
                },
            );
            if let Some(p) = replaced {
                self.replaced_bindings.insert((actor, p.generation.get()));
                let fence = WireAuthorityFence {
                    node: rid(to),
                    node_generation: NodeGeneration::new(me),
                    authority_owner_generation: loc.authority_owner_generation,
                    owner_lease_generation: loc.owner_lease_generation,
                };
                let rec = BoundSessionReplaced {
                    actor: actor_id(actor),
                    authority_source: fence.clone(),
                    authority_target: fence,
                    previous: PreviousSessionOwner {
                        node: p.session_owner.clone(),
                        lifecycle: p.lifecycle,
                        owner: p.owner_id,
                        owner_lease_generation: p.owner_lease,
                        session: p.session,
                        retired_binding_generation: p.generation,
                    },
                };
                let prev = index_of(&p.session_owner);
                self.log(|| {
                    format!(
                        "  n{to} replaces binding {} of a{actor}",
                        p.generation.get()
                    )
                });
                self.send(to, prev, Msg::Replaced(Box::new(rec)));
            }
            return Ok(());
        }
        // not live here: Message Follow forwards a bind once (fences: FenceUse::Bind)
        let now = self.instant(to);
        let ogen = ObjectGeneration::new(og);
        let fence = CallFence {
            actor_id: actor_id(actor),
            object_generation: ogen,
            authority_owner_generation: AuthorityOwnerGeneration::new(route_authority),
            owner_lease_generation: OwnerLeaseGeneration::new(0),
            node_generation: NodeGeneration::new(route_generation),
        };
        if !followed
            && route_generation == me
            && let FollowLookup::Forward(route) =
                self.nodes[to].follow.lookup(&actor_id(actor), ogen, now)
            && check_moved(&route.source, &fence, FenceUse::Bind).is_ok()
        {
            let t = index_of(&route.target.owner_node);
            self.stats.bind_followed += 1;
            self.send(
                to,
                t,
                Msg::Bind {
                    id,
                    actor,
                    reg,
                    object_generation: og,
                    route_generation: route.target.node_generation.get(),
                    route_authority: route.target.authority_owner_generation.get(),
                    followed: true,
                },
            );
            return Ok(());
        }
        self.send(to, session_node, Msg::BindReply { id, result: None });
        Ok(())
    }

    /// The 38's answer at session owner `node`.
    fn bind_reply(
        &mut self,
        node: usize,
        id: u64,
        result: Option<ActorLocation>,
    ) -> Result<(), Violation> {
        let Some(b) = self.binds.get_mut(&id) else {
            return Ok(());
        };
        if b.4 {
            return Ok(()); // after its deadline: late
        }
        b.4 = true;
        let (actor, bnode, k, lifecycle, _) = *b;
        if bnode != node || self.nodes[node].generation != lifecycle {
            return Ok(());
        }
        let Some(s) = self.nodes[node].sessions.get_mut(&k) else {
            return Ok(());
        };
        let g = BindingGeneration::new(id);
        let result = result
            .map(|loc| BindSnapshot {
                actor: actor_id(actor),
                object_generation: loc.object_generation,
                location: wire_location(&loc),
                binding_generation: g,
            })
            .ok_or(zlink_wire::ErrorKind::Unavailable);
        match s.agg.complete_bind(
            &actor_id(actor),
            g,
            OwnerLeaseGeneration::new(lifecycle),
            result,
        ) {
            BindCompletion::Bound { .. } => {
                self.stats.bound += 1;
                self.binder.insert(actor, (node, k));
                self.log(|| format!("  n{node} session {k} bound a{actor} (binding {id})"));
            }
            _ => self.stats.bind_refused += 1,
        }
        Ok(())
    }

    /// A 51 from `from` at session owner `to`.
    fn replaced(
        &mut self,
        from: usize,
        to: usize,
        rec: BoundSessionReplaced,
    ) -> Result<(), Violation> {
        let now = self.instant(to);
        let lifecycle = self.nodes[to].generation;
        let sender = (rid(from), NodeGeneration::new(self.nodes[from].generation));
        let Some((&k, _)) = self.nodes[to]
            .sessions
            .iter()
            .find(|(_, s)| s.rid == rec.previous.session.get())
        else {
            return Ok(());
        };
        let actor = actor_index(&rec.actor);
        let held = self.held_of(to, k, Some(actor));
        let s = self.nodes[to].sessions.get_mut(&k).expect("session");
        let before: Vec<_> = s
            .agg
            .bound()
            .map(|b| (b.actor.clone(), b.generation))
            .collect();
        match s.agg.handle_replaced(now, (&sender.0, sender.1), &rec) {
            Ok(outcome) => {
                let seq = match outcome {
                    ReplacedOutcome::Closing { seq, .. }
                    | ReplacedOutcome::AlsoClosing { seq, .. } => seq,
                };
                self.stats.replacements += 1;
                if !held.is_empty() {
                    self.stats.replaced_while_sealed += 1;
                }
                self.log(|| format!("  n{to}: 51 for a{actor} applied, session {k} closing"));
                // its seal ended with it: the held relays are answered by the drop
                for id in held {
                    self.held.remove(&id);
                    self.fate(id, Fate::Dropped("its binding was replaced"));
                }
                self.queue.push(
                    self.now + CALLBACK_MS,
                    Event::CallbackDone {
                        node: to,
                        generation: lifecycle,
                        session: k,
                        seq,
                    },
                );
            }
            Err(e) => {
                self.stats.refused_51 += 1;
                let after: Vec<_> = s
                    .agg
                    .bound()
                    .map(|b| (b.actor.clone(), b.generation))
                    .collect();
                // spec: SB-6.6 — a refused 51 changes nothing
                if before != after {
                    return Err(self.violation(format!(
                        "a refused 51 ({e:?}) changed the bindings: {before:?} -> {after:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Node `from` resolves the actor in the store and sends it a one-way message there.
    fn tell(&mut self, from: usize, actor: usize) -> Result<(), Violation> {
        if !self.nodes[from].up {
            return Ok(());
        }
        let Some(loc) = self.resolve(from, actor) else {
            return Ok(());
        };
        let id = self.next_id;
        self.next_id += 1;
        let key = (from, self.nodes[from].generation, 0, actor);
        let seq = {
            let n = self.next_seq.entry(key).or_insert(0);
            *n += 1;
            *n
        };
        self.relays.insert(
            id,
            RelayInfo {
                key,
                seq,
                fate: None,
                request: false,
                terminal: None,
            },
        );
        self.stats.tells += 1;
        let r = Relay {
            id,
            actor,
            object_generation: loc.object_generation.get(),
            session_owner: from,
            lifecycle: self.nodes[from].generation,
            generation: 0,
            route_generation: loc.node_generation.get(),
            route_lease: loc.owner_lease_generation.get(),
            route_authority: loc.authority_owner_generation.get(),
            followed: false,
            tell: true,
            captured: false,
            after_source_wait: false,
        };
        let to = index_of(&loc.owner_node);
        self.log(|| format!("  tell {id} -> n{to}"));
        self.send(from, to, Msg::Relay(r));
        Ok(())
    }

    /// Node `from` resolves `actor` in the store for a message through a ref. When the
    /// record's owner's lease ended (it crashed), `from` activates the actor first: the store's
    /// reservation decides (failover keeps the object generation, under a new authority
    /// generation and `from`'s lease), and the new incarnation serves with no binding (its
    /// session's binding named the dead owner). The store unreachable, or `from` holding the
    /// actor already (a target's temporary queue, an ended source), the record is used as it is.
    fn resolve(&mut self, from: usize, actor: usize) -> Option<ActorLocation> {
        let loc = poll_now(self.store.lookup(actor_id(actor)))
            .ok()
            .flatten()?;
        let n = &self.nodes[from];
        if self.net.is_cut(Ep::Node(from), Ep::Store)
            || !n.lease_live
            || n.actors.contains_key(&actor)
            || n.targets.values().any(|t| t.actors.contains(&actor))
        {
            return Some(loc);
        }
        let holder = self.nodes[from].holder.clone()?;
        let reservation = poll_now(self.store.reserve_activation(ActivationRequest {
            actor_id: actor_id(actor),
            actor_type: "t".into(),
            owner: ActorOwner {
                mesh: mesh(),
                holder,
            },
        }));
        let owner = index_of(&loc.owner_node);
        let unreachable = owner != from
            && (self.net.is_cut(Ep::Node(from), Ep::Node(owner)) || !self.nodes[owner].up);
        let won = match reservation {
            Ok(Reservation::Won(won)) => {
                poll_now(self.store.mark_ready(actor_id(actor), won.fence())).ok()?
            }
            Ok(Reservation::Held(held))
                if self.faults.activate_on_unreachable_owner && unreachable =>
            {
                held
            }
            _ => return Some(loc),
        };
        self.stats.reactivated += 1;
        self.orphaned.remove(&actor);
        self.reactivated
            .insert(actor, won.authority_owner_generation.get());
        // the bindings of the actor named the dead owner's incarnation: they ended there
        let ended: Vec<u64> = self
            .nodes
            .iter()
            .flat_map(|n| n.sessions.values())
            .filter_map(|s| s.agg.find(&actor_id(actor)).map(|b| b.generation.get()))
            .collect();
        for g in ended {
            self.ended_bindings.insert((actor, g));
        }
        self.log(|| {
            format!(
                "  n{from} activates a{actor} again (authority {}; the store named {} gen {})",
                won.authority_owner_generation.get(),
                loc.owner_node,
                loc.node_generation.get()
            )
        });
        if !self.faults.activation_installs_nothing {
            self.nodes[from].actors.insert(
                actor,
                Incarnation {
                    backlog: Default::default(),
                    turn: false,
                    behind: None,
                    late_stream: false,
                    object_generation: won.object_generation.get(),
                    state: IncState::Serving,
                    slot: BindingSlot::default(),
                    location: Some(won.clone()),
                },
            );
        }
        Some(won)
    }

    /// `actor` may have been left without a serving owner (a crash, a failed relocation): its
    /// refused messages are excused from now on unless the owner the store names serves it.
    fn orphan(&mut self, actor: usize) {
        let rec = poll_now(self.store.lookup(actor_id(actor))).ok().flatten();
        let served = rec.is_some_and(|l| {
            let i = index_of(&l.owner_node);
            self.nodes.get(i).is_some_and(|n| {
                n.up && n.generation == l.node_generation.get()
                    && n.actors.get(&actor).is_some_and(|inc| {
                        matches!(
                            inc.state,
                            IncState::Serving | IncState::Sealed { .. } | IncState::Relaying { .. }
                        ) && inc.location.as_ref().is_some_and(|x| {
                            x.authority_owner_generation == l.authority_owner_generation
                        })
                    })
            })
        });
        if !served {
            self.orphaned.insert(actor);
        }
    }

    fn relocate(&mut self, actor: usize, to: usize) -> Result<(), Violation> {
        let Some(owner) = (0..self.s.nodes).find(|&i| {
            self.nodes[i].up
                && self.nodes[i]
                    .actors
                    .get(&actor)
                    .is_some_and(|inc| matches!(inc.state, IncState::Serving))
                && !self.nodes[i].sources.values().any(|s| s.moves(actor))
                && !self.nodes[i]
                    .targets
                    .values()
                    .any(|t| t.actors.contains(&actor))
        }) else {
            return Ok(());
        };
        if owner == to || !self.nodes[to].up {
            return Ok(());
        }
        self.start_source(owner, vec![actor], to, false)
    }

    /// Whether `node` hosts member `actor` of the Spot (`node::relocate_spot`: a live member,
    /// not one moving in nor one a failed relocation ended).
    fn hosts_member(&self, node: usize, actor: usize) -> bool {
        self.nodes[node]
            .actors
            .get(&actor)
            .is_some_and(|inc| !matches!(inc.state, IncState::Temp { .. } | IncState::Ended))
    }

    /// The node hosting the seed's Spot moves it whole to `to` (`node::relocate_spot`): every
    /// member it hosts, each serving and none moving (alone or in, SpotBusy / InProgress
    /// otherwise), in ActorId order, sealed together.
    fn relocate_spot(&mut self, to: usize) -> Result<(), Violation> {
        let members = self.s.spot.clone();
        let Some(owner) = (0..self.s.nodes)
            .find(|&i| self.nodes[i].up && members.iter().any(|&m| self.hosts_member(i, m)))
        else {
            return Ok(());
        };
        if owner == to || !self.nodes[to].up {
            return Ok(());
        }
        let n = &self.nodes[owner];
        let here: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&m| self.hosts_member(owner, m))
            .collect();
        let busy = here.iter().any(|&m| {
            !matches!(n.actors[&m].state, IncState::Serving)
                || n.sources.values().any(|s| s.moves(m))
                || n.targets.values().any(|t| t.actors.contains(&m))
        })
            // a member moving in alone (its Restore installed here) is not a member yet; the
            // Spot does not move before it opened (the world's rule)
            || (!self.faults.open_into_moving_spot
                && n.targets
                    .values()
                    .any(|t| t.actors.iter().any(|a| members.contains(a))));
        if busy {
            self.stats.spot_busy += 1;
            self.log(|| format!("  the Spot on n{owner} is busy: not moved"));
            return Ok(());
        }
        self.start_source(owner, here, to, true)
    }

    /// Starts relocation of `actors` (one, or the Spot's members `owner` hosts) from `owner`
    /// to `to`: the source core, with each actor's binding as its seal target.
    fn start_source(
        &mut self,
        owner: usize,
        actors: Vec<usize>,
        to: usize,
        spot: bool,
    ) -> Result<(), Violation> {
        let reloc = self.next_id;
        self.next_id += 1;
        let mut moving = Vec::new();
        let mut owners = Vec::new();
        let mut bindings = Vec::new();
        for &actor in &actors {
            let inc = &self.nodes[owner].actors[&actor];
            let loc = inc
                .location
                .clone()
                .expect("a serving incarnation has its record");
            let binding = inc.slot.current().cloned();
            let seals = inc
                .slot
                .current()
                .map(|c| SealTarget {
                    session_owner: c.session_owner.clone(),
                    seal: SealIdentity {
                        relocation: RelocationId::new(reloc),
                        session_lifecycle: c.lifecycle,
                        session: c.session,
                        binding_generation: c.generation,
                    },
                })
                .into_iter()
                .collect();
            moving.push(MovingActor {
                actor: actor_id(actor),
                object_generation: loc.object_generation,
                current_fence: loc.fence(),
                bindings: seals,
            });
            owners.push(loc.owner_fence());
            bindings.push(binding);
        }
        let now = self.instant(owner);
        // the Follow table's seal entry from the start, as `node::relocate` installs it with the
        // binding it reads (a tombstone finds the incarnation sealed from here on)
        for (&actor, o) in actors.iter().zip(&owners) {
            self.nodes[owner]
                .follow
                .seal(actor_id(actor), o.object_generation, now);
        }
        let subject = if spot {
            Subject::Spot("s".into())
        } else {
            Subject::Actor
        };
        let core = SourceHandoff::start(
            RelocationId::new(reloc),
            subject,
            moving,
            rid(to),
            RelocationConfig::default(),
            now,
        );
        self.stats.relocations += 1;
        if spot {
            self.stats.spot_relocations += 1;
            if actors.len() > 1 {
                self.stats.spot_relocations_shared += 1;
            }
            self.log(|| format!("  relocation {reloc}: Spot {actors:?} n{owner} -> n{to}"));
        } else {
            self.log(|| format!("  relocation {reloc}: a{} n{owner} -> n{to}", actors[0]));
        }
        let target_generation = self.nodes[to].generation;
        self.nodes[owner].sources.insert(
            reloc,
            Source {
                actors,
                spot,
                sealed: false,
                core,
                target: to,
                target_generation,
                owners,
                bindings,
            },
        );
        self.drive_source(owner, reloc)
    }

    /// `node`'s owner lease ran out: the store lets others take its actors; the node ends
    /// every incarnation it serves or holds sealed (their queued work is lost), keeps its
    /// sessions, its relocation cores and its targets' temporary queues, and registers again
    /// `down_ms` later.
    fn lease_expiry(&mut self, node: usize, down_ms: u64) -> Result<(), Violation> {
        if !self.nodes[node].up || !self.nodes[node].lease_live {
            return Ok(());
        }
        self.stats.lease_expiries += 1;
        if !self.nodes[node].sources.is_empty() || !self.nodes[node].targets.is_empty() {
            self.stats.lease_expiries_mid_move += 1;
        }
        let holder = self.nodes[node].holder.clone().expect("a registered node");
        let _ = poll_now(self.store.release_owner(holder));
        self.nodes[node].lease_live = false;
        let mut lost = Vec::new();
        let mut ended = Vec::new();
        if !self.faults.serve_past_lease {
            let n = &mut self.nodes[node];
            let gone: Vec<usize> = n
                .actors
                .iter()
                .filter(|(_, inc)| !matches!(inc.state, IncState::Temp { .. }))
                .map(|(a, _)| *a)
                .collect();
            for a in gone {
                let inc = n.actors.remove(&a).expect("listed");
                // the binding it held ends with it
                if let Some(b) = inc.slot.current() {
                    self.ended_bindings.insert((a, b.generation.get()));
                }
                lost.extend(inc.backlog.iter().map(|r| r.id));
                lost.extend(inc.behind.iter().flatten().map(|r| r.id));
                if let IncState::Sealed { queue } = inc.state {
                    lost.extend(queue.iter().map(|r| r.id));
                }
                if n.sources.values().any(|s| s.moves(a)) {
                    self.lease_ended_mid_move.insert((node, a));
                }
                ended.push(a);
            }
        }
        self.log(|| format!("  n{node}'s lease ran out: ends {ended:?}"));
        for id in lost {
            self.fate(id, Fate::Dropped("its owner's lease ran out"));
        }
        for a in ended {
            self.orphan(a);
        }
        let generation = self.nodes[node].generation;
        self.queue.push(
            self.now + down_ms.max(1),
            Event::Reregister { node, generation },
        );
        Ok(())
    }

    fn crash(&mut self, node: usize, down_ms: u64) -> Result<(), Violation> {
        if !self.nodes[node].up {
            return Ok(());
        }
        self.stats.crashes += 1;
        let generation = self.nodes[node].generation;
        let later = self.instant(node) + Duration::from_secs(86_400);
        let mut lost = Vec::new();
        let mut orphans = Vec::new();
        let n = &mut self.nodes[node];
        n.up = false;
        for s in n.sessions.values_mut() {
            // its held relays go with the process
            for h in s.agg.handle_seal_timeouts(later).closed.unwrap_or_default() {
                lost.push(relay_id(&h));
            }
        }
        n.sessions.clear();
        for (a, inc) in std::mem::take(&mut n.actors) {
            // the binding it held ends with it
            if let Some(b) = inc.slot.current() {
                self.ended_bindings.insert((a, b.generation.get()));
            }
            lost.extend(inc.backlog.iter().map(|r| r.id));
            lost.extend(inc.behind.iter().flatten().map(|r| r.id));
            if let IncState::Sealed { queue } | IncState::Temp { queue, .. } = inc.state {
                lost.extend(queue.iter().map(|r| r.id));
            }
            orphans.push(a);
        }
        orphans.extend(n.targets.values().flat_map(|t| t.actors.iter().copied()));
        orphans.extend(n.sources.values().flat_map(|s| s.actors.iter().copied()));
        n.sources.clear();
        n.targets.clear();
        n.calls.clear();
        n.recoveries.clear();
        let tombs: Vec<u64> = std::mem::take(&mut n.tombs).into_keys().collect();
        if let Some(h) = n.holder.take() {
            // its lease ends (the ownership world simulates how long that takes)
            let _ = poll_now(self.store.release_owner(h));
        }
        for id in lost {
            self.fate(id, Fate::Dropped("its node crashed"));
        }
        for id in tombs {
            self.tomb_fate(id, "its node crashed");
        }
        for a in orphans {
            self.orphan(a);
        }
        self.net.reset(Ep::Node(node));
        for other in 0..self.s.nodes {
            if other != node {
                self.queue.push(
                    self.now + PEER_TIMEOUT_MS,
                    Event::PeerDown {
                        node: other,
                        peer: node,
                        generation,
                    },
                );
            }
        }
        self.queue
            .push(self.now + down_ms.max(1), Event::Restart { node });
        Ok(())
    }

    /// `node` sees `peer`'s generation down: a source whose target it is fails the target;
    /// a target whose source it is learns it (nothing changes: the cutover timeout decides).
    fn peer_down(&mut self, node: usize, peer: usize, generation: u64) -> Result<(), Violation> {
        if !self.nodes[node].up {
            return Ok(());
        }
        let now = self.instant(node);
        let sources: Vec<u64> = self.nodes[node]
            .sources
            .iter()
            .filter(|(_, s)| s.target == peer && s.target_generation == generation)
            .map(|(r, _)| *r)
            .collect();
        for reloc in sources {
            if let Some(s) = self.nodes[node].sources.get_mut(&reloc) {
                s.core.handle_target_failed(now);
            }
            self.drive_source(node, reloc)?;
        }
        let targets: Vec<u64> = self.nodes[node]
            .targets
            .iter()
            .filter(|(_, t)| t.source == peer && t.source_generation == generation)
            .map(|(r, _)| *r)
            .collect();
        for reloc in targets {
            if let Some(t) = self.nodes[node].targets.get_mut(&reloc) {
                t.core.handle_source_lost(now);
            }
            self.drive_target(node, reloc)?;
        }
        Ok(())
    }

    /// Pushes a timer event for every core of `node` that has a deadline.
    fn arm(&mut self, node: usize) {
        let n = &self.nodes[node];
        let mut due: Vec<Instant> = Vec::new();
        due.extend(
            n.sources
                .values()
                .filter(|s| {
                    !(self.faults.no_result_timeout && s.core.phase() == SourcePhaseName::HandedOff)
                })
                .filter_map(|s| s.core.poll_timeout()),
        );
        due.extend(n.targets.values().filter_map(|t| t.core.poll_timeout()));
        due.extend(n.recoveries.values().filter_map(|r| r.core.poll_timeout()));
        due.extend(
            n.sessions
                .values()
                .filter_map(|s| s.agg.poll_seal_timeout()),
        );
        let generation = n.generation;
        for d in due {
            let at = self.virtual_at(node, d);
            self.queue.push(at, Event::Timer { node, generation });
        }
    }

    fn timers(&mut self, node: usize) -> Result<(), Violation> {
        let now = self.instant(node);
        let relocs: Vec<u64> = self.nodes[node].sources.keys().copied().collect();
        let no_result_timeout = self.faults.no_result_timeout;
        for reloc in relocs {
            if let Some(s) = self.nodes[node].sources.get_mut(&reloc)
                && s.core.poll_timeout().is_some_and(|d| d <= now)
                && !(no_result_timeout && s.core.phase() == SourcePhaseName::HandedOff)
            {
                s.core.handle_timeout(now);
                self.drive_source(node, reloc)?;
            }
        }
        let relocs: Vec<u64> = self.nodes[node].targets.keys().copied().collect();
        for reloc in relocs {
            if let Some(t) = self.nodes[node].targets.get_mut(&reloc)
                && t.core.poll_timeout().is_some_and(|d| d <= now)
            {
                t.core.handle_timeout(now);
                self.drive_target(node, reloc)?;
            }
        }
        let recovering: Vec<usize> = self.nodes[node].recoveries.keys().copied().collect();
        for actor in recovering {
            self.run_recovery(node, actor);
        }
        let keys: Vec<usize> = self.nodes[node].sessions.keys().copied().collect();
        for k in keys {
            let Some(s) = self.nodes[node].sessions.get_mut(&k) else {
                continue;
            };
            if s.agg.poll_seal_timeout().is_none_or(|d| d > now) {
                continue;
            }
            let out = s.agg.handle_seal_timeouts(now);
            if let Some(dropped) = out.closed {
                self.stats.seal_timeouts += 1;
                self.log(|| format!("n{node}: session {k} closed by its seal timeout"));
                self.nodes[node].sessions.remove(&k);
                for h in dropped {
                    self.fate(relay_id(&h), Fate::Dropped("its session's seal timed out"));
                }
            }
        }
        // each core's next deadline (one that was due may have moved on: a seal released)
        self.arm(node);
        Ok(())
    }

    /// The incarnation a source on `node` moves: the actor's incarnation there that serves under
    /// the source's owner fence (`owner`: object generation, authority, lease and process, as
    /// the node's `LocalActor::is_incarnation` compares them); none when it ended with that
    /// lease (a lease expiry), or another incarnation was activated or moved in there since —
    /// a failover keeps the object generation, so that alone does not tell them apart
    /// (`source_by_generation` matches on it, as the node did).
    fn source_inc(
        &mut self,
        node: usize,
        actor: usize,
        owner: &OwnerFence,
    ) -> Option<&mut Incarnation> {
        let by_generation = self.faults.source_by_generation;
        self.nodes[node].actors.get_mut(&actor).filter(|inc| {
            if by_generation {
                // the node's live incarnations (a target's instance is not live before it opens)
                return inc.object_generation == owner.object_generation.get()
                    && !matches!(inc.state, IncState::Temp { .. });
            }
            inc.location.as_ref().is_some_and(|l| {
                l.object_generation == owner.object_generation
                    && l.owner_lease_generation == owner.holder.lease_generation
                    && l.authority_owner_generation == owner.authority_owner_generation
                    && l.node_generation == owner.holder.node_generation
            })
        })
    }

    /// Performs the source's effects; then the tombstones held on `node` look again (a
    /// relocation's step may end a seal entry: commit, abort).
    fn drive_source(&mut self, node: usize, reloc: u64) -> Result<(), Violation> {
        self.source_effects(node, reloc)?;
        self.step_tombs(node)
    }

    fn source_effects(&mut self, node: usize, reloc: u64) -> Result<(), Violation> {
        loop {
            let Some(s) = self.nodes[node].sources.get_mut(&reloc) else {
                return Ok(());
            };
            let Some(effect) = s.core.poll_effect() else {
                break;
            };
            let (actors, target, spot) = (s.actors.clone(), s.target, s.spot);
            let now = self.instant(node);
            self.log(|| format!("  n{node} source {reloc}: {}", short_source(&effect)));
            match effect {
                SourceEffect::TakeFence { actor, expected } => {
                    let actor = actor_index(&actor);
                    let owner = self.nodes[node].sources[&reloc].owner_of(actor);
                    self.store_send(
                        node,
                        reloc,
                        StoreOp::Fence {
                            actor,
                            expected,
                            owner,
                        },
                    );
                }
                SourceEffect::SendSeal { to, record } => {
                    self.send(node, index_of(&to), Msg::Seal { reloc, rec: record });
                }
                SourceEffect::SealRuntime => {
                    // the actor's lane, or the Spot's unit: every member together (with the
                    // fault, only the first member's lane)
                    let sealing = if spot && self.faults.spot_seals_one_lane {
                        1
                    } else {
                        actors.len()
                    };
                    let mut all = true;
                    for &actor in &actors[..sealing] {
                        let owner = self.nodes[node].sources[&reloc].owner_of(actor);
                        let Some(inc) = self.source_inc(node, actor, &owner) else {
                            // the incarnation ended (its owner's lease ran out): the relocation
                            // aborts (`node::relocate`: "incarnation gone")
                            all = false;
                            continue;
                        };
                        // the turn in flight ended (turns are atomic here); what is queued is
                        // kept in arrival order for the capture
                        let queue: Vec<Relay> = inc.backlog.drain(..).collect();
                        inc.state = IncState::Sealed { queue };
                        let og = ObjectGeneration::new(inc.object_generation);
                        self.nodes[node].follow.seal(actor_id(actor), og, now);
                    }
                    let s = self.nodes[node].sources.get_mut(&reloc).expect("source");
                    s.sealed = true;
                    let states = vec![MigratedState::Bytes(vec![1]); actors.len()];
                    s.core
                        .handle_quiesced(now, if all { Ok(states) } else { Err(()) });
                }
                SourceEffect::SendRestore { to, request } => {
                    // the bindings taken at the start, as `node::relocate` carries them
                    let bindings = self.nodes[node].sources[&reloc].bindings.clone();
                    self.send(
                        node,
                        index_of(&to),
                        Msg::Restore {
                            reloc,
                            request,
                            bindings,
                        },
                    );
                }
                SourceEffect::CaptureAndRelay => {
                    let tg = self.nodes[target].generation;
                    for &actor in &actors {
                        let owner = self.nodes[node].sources[&reloc].owner_of(actor);
                        // ended with its owner's lease: nothing left to capture
                        let Some(inc) = self.source_inc(node, actor, &owner) else {
                            continue;
                        };
                        if !matches!(inc.state, IncState::Sealed { .. }) {
                            // a member the runtime seal missed (`spot_seals_one_lane`) runs on
                            continue;
                        }
                        let queue = match std::mem::replace(
                            &mut inc.state,
                            IncState::Relaying {
                                target,
                                target_generation: tg,
                            },
                        ) {
                            IncState::Sealed { queue } => queue,
                            _ => unreachable!(),
                        };
                        for mut r in queue {
                            self.stats.captured += 1;
                            r.captured = true;
                            self.send(node, target, Msg::Relay(r));
                        }
                    }
                    let s = self.nodes[node].sources.get_mut(&reloc).expect("source");
                    s.core.handle_relayed(now);
                }
                SourceEffect::SendCutover { to } => {
                    self.send(node, index_of(&to), Msg::Cutover { reloc });
                }
                SourceEffect::RetireFence { actor, fence } => {
                    let actor = actor_index(&actor);
                    let owner = self.nodes[node].sources[&reloc].owner_of(actor);
                    self.store_send(
                        node,
                        reloc,
                        StoreOp::Retire {
                            actor,
                            fence,
                            owner,
                        },
                    );
                }
                SourceEffect::UnsealRuntime => {
                    let missed = spot && self.faults.spot_seals_one_lane;
                    self.nodes[node]
                        .sources
                        .get_mut(&reloc)
                        .expect("source")
                        .sealed = false;
                    for &actor in &actors {
                        let owner = self.nodes[node].sources[&reloc].owner_of(actor);
                        let og = {
                            let Some(inc) = self.source_inc(node, actor, &owner) else {
                                // ended with its owner's lease meanwhile: nothing reopens
                                let og = ObjectGeneration::new(owner.object_generation.get());
                                self.nodes[node].follow.release(&actor_id(actor), og);
                                continue;
                            };
                            match std::mem::replace(&mut inc.state, IncState::Serving) {
                                IncState::Sealed { queue } => inc.backlog.extend(queue),
                                // a member the runtime seal missed kept serving
                                IncState::Serving if missed => {}
                                other => panic!("unseal from {other:?}"),
                            }
                            ObjectGeneration::new(inc.object_generation)
                        };
                        self.schedule_turn(node, actor);
                        self.nodes[node].follow.release(&actor_id(actor), og);
                    }
                }
                SourceEffect::SendRoute { to, record } => {
                    self.send(node, index_of(&to), Msg::Route(record));
                }
                SourceEffect::QueryOwners { actors } => {
                    // No result within the source's result timeout of the cutover: it reads
                    // the store's records (a store call with its timeout; no answer is an
                    // error, and the core asks again after `RESULT_QUERY_RETRY`)
                    self.stats.result_waits_expired += 1;
                    self.store_send(node, reloc, StoreOp::Lookup { actors });
                }
                SourceEffect::EndIncarnations(locs) => {
                    for loc in locs {
                        let a = actor_index(&loc.actor_id);
                        let owner = self.nodes[node].sources[&reloc].owner_of(a);
                        if self.source_inc(node, a, &owner).is_some()
                            && let Some(inc) = self.nodes[node].actors.remove(&a)
                        {
                            let source = inc.location.expect("record");
                            self.nodes[node]
                                .follow
                                .install(call_fence(&source), loc, now);
                        }
                    }
                }
                SourceEffect::Finished(outcome) => {
                    self.log(|| format!("  relocation {reloc} at the source: {outcome:?}"));
                    let failed: Vec<usize> = match &outcome {
                        SourceOutcome::Moved(_) => {
                            self.stats.moved += 1;
                            self.moved.extend(actors.iter().copied());
                            if spot {
                                self.stats.spot_moved += 1;
                                self.stats.spot_members_moved += actors.len() as u64;
                                self.spot_moved.extend(actors.iter().copied());
                            }
                            Vec::new()
                        }
                        SourceOutcome::Aborted(_) => {
                            self.stats.aborted += 1;
                            if spot {
                                self.stats.spot_aborted += 1;
                            }
                            Vec::new()
                        }
                        SourceOutcome::Failed(why) => {
                            self.stats.failed += 1;
                            if spot {
                                self.stats.spot_failed += 1;
                            }
                            match why {
                                FailReason::CasFailed(ids) => {
                                    // the members committed moved (`EndIncarnations`)
                                    for a in &actors {
                                        if !ids.contains(&actor_id(*a)) {
                                            self.moved.insert(*a);
                                        }
                                    }
                                    ids.iter().map(actor_index).collect()
                                }
                                _ => actors.clone(),
                            }
                        }
                    };
                    // the seal entries end with the relocation (an installed follow entry stays;
                    // the node releases them at its unseal and in `end_unserved`)
                    let owners = self.nodes[node].sources[&reloc].owners.clone();
                    let failing = matches!(outcome, SourceOutcome::Failed(_));
                    if failing || !self.faults.seal_entry_expires {
                        for (&a, o) in actors.iter().zip(&owners) {
                            self.nodes[node]
                                .follow
                                .release(&actor_id(a), o.object_generation);
                        }
                    }
                    for &actor in &failed {
                        self.decided_failed.insert((target, actor));
                    }
                    // never reopens: what the failed incarnations hold is never processed here
                    for actor in failed {
                        let owner = self.nodes[node].sources[&reloc].owner_of(actor);
                        if let Some(inc) = self.source_inc(node, actor, &owner) {
                            let old = std::mem::replace(&mut inc.state, IncState::Ended);
                            // its pending work goes with it (`node::relocate`'s `end_unserved`)
                            let mut lost: Vec<u64> = inc.backlog.drain(..).map(|r| r.id).collect();
                            if let IncState::Sealed { queue } = old {
                                lost.extend(queue.iter().map(|r| r.id));
                            }
                            for id in lost {
                                self.fate(id, Fate::Dropped("its relocation failed"));
                            }
                        }
                        self.orphan(actor);
                        if !self.faults.no_recovery {
                            self.start_recovery(node, actor, owner);
                        }
                    }
                    self.nodes[node].sources.remove(&reloc);
                }
            }
        }
        self.arm(node);
        Ok(())
    }

    /// SB-8.6's recovery at the source (`node::relocate`'s `release_records` and
    /// `Node::recover_moving`): the real schedule (`relocation::recovery::Recovery`) on the
    /// node's clock, whose first attempt runs now. An attempt replaces the failed incarnation's
    /// record with a new incarnation of the node's own in one write (`reincarnate` with the
    /// source's owner fence: a new object generation; refused when the target's CAS won or the
    /// record is another incarnation's) and activates it from the dehydrated state with no
    /// binding (its sessions' seals time out). The store out of reach (or the node's lease
    /// lapsed) repeats the attempt after a backoff; the lease ended stops it.
    fn start_recovery(&mut self, node: usize, actor: usize, owner: OwnerFence) {
        let now = self.instant(node);
        let core = Recovery::new(now, DEFAULT_RECOVERY_BACKOFF, DEFAULT_RECOVERY_BACKOFF_MAX);
        self.nodes[node]
            .recoveries
            .insert(actor, Recovering { core, owner });
        self.run_recovery(node, actor);
        self.arm(node);
    }

    /// Runs the recovery attempt of `actor` on `node` if one is due.
    fn run_recovery(&mut self, node: usize, actor: usize) {
        let now = self.instant(node);
        let Some(r) = self.nodes[node].recoveries.get_mut(&actor) else {
            return;
        };
        if !r.core.poll_attempt(now) {
            return;
        }
        let owner = r.owner.clone();
        let mut result = self.recovery_attempt(node, actor, owner);
        if self.faults.recovery_tries_once && result == AttemptResult::Unreachable {
            result = AttemptResult::LeaseLost;
        }
        self.log(|| format!("  n{node}: a{actor}'s recovery attempt: {result:?}"));
        let r = self.nodes[node]
            .recoveries
            .get_mut(&actor)
            .expect("recovery");
        r.core.handle_attempt(now, result);
        match r.core.outcome() {
            None => self.stats.recovery_retries += 1,
            Some(o) => {
                self.nodes[node].recoveries.remove(&actor);
                match o {
                    RecoveryOutcome::Recovered { .. } => self.stats.recovered += 1,
                    RecoveryOutcome::Superseded => {
                        self.stats.recoveries_superseded += 1;
                        self.superseded.insert((node, actor));
                    }
                    RecoveryOutcome::LeaseLost => self.stats.recoveries_lease_lost += 1,
                    RecoveryOutcome::Failed => {}
                }
            }
        }
    }

    /// One recovery attempt (`Node::reactivate` with `Claim::Replace`, `attempt_result`).
    fn recovery_attempt(&mut self, node: usize, actor: usize, owner: OwnerFence) -> AttemptResult {
        let n = &self.nodes[node];
        // past the local lease deadline no activation starts (SB-5.11): `LeaseLapsed`, repeated
        if !n.lease_live {
            return AttemptResult::Unreachable;
        }
        // a live incarnation here already (`local_ref`): `AlreadyExists`
        if n.actors
            .get(&actor)
            .is_some_and(|inc| matches!(inc.state, IncState::Serving))
        {
            return AttemptResult::Superseded;
        }
        if self.net.is_cut(Ep::Node(node), Ep::Store) {
            return AttemptResult::Unreachable;
        }
        let og = owner.object_generation.get();
        let won = match poll_now(self.store.reincarnate(actor_id(actor), owner)) {
            Ok(won) => won,
            Err(
                store::StoreError::LeaseNotLive { .. }
                | store::StoreError::StaleNodeGeneration { .. },
            ) => return AttemptResult::LeaseLost,
            Err(store::StoreError::Unavailable { .. }) => return AttemptResult::Unreachable,
            Err(_) => return AttemptResult::Superseded,
        };
        let Ok(loc) = poll_now(self.store.mark_ready(actor_id(actor), won.fence())) else {
            return AttemptResult::Superseded;
        };
        self.retired.insert((actor, og));
        self.orphaned.remove(&actor);
        self.read_back_unreadable.remove(&actor);
        self.log(|| {
            format!(
                "  n{node} activates a{actor} again from its state (incarnation {}, \
                 incarnation {og} retired)",
                loc.object_generation.get()
            )
        });
        self.nodes[node].actors.insert(
            actor,
            Incarnation {
                backlog: Default::default(),
                turn: false,
                behind: None,
                late_stream: false,
                object_generation: loc.object_generation.get(),
                state: IncState::Serving,
                slot: BindingSlot::default(),
                location: Some(loc),
            },
        );
        AttemptResult::Recovered
    }

    /// Performs the target's effects.
    fn drive_target(&mut self, node: usize, reloc: u64) -> Result<(), Violation> {
        loop {
            let Some(t) = self.nodes[node].targets.get_mut(&reloc) else {
                return Ok(());
            };
            let Some(effect) = t.core.poll_effect() else {
                break;
            };
            let (source, spot) = (t.source, t.spot);
            let now = self.instant(node);
            self.log(|| format!("  n{node} target {reloc}: {}", short_target(&effect)));
            match effect {
                TargetEffect::InstallQueues(_) => {
                    // installed by `deliver` with the Restore (it carries the binding)
                    let t = self.nodes[node].targets.get_mut(&reloc).expect("target");
                    t.core.handle_installed(now, Ok(()));
                }
                TargetEffect::ReplyRelayReady { .. } => {
                    self.send(node, source, Msg::RelayReady { reloc });
                }
                TargetEffect::ReplyRestoreFailed { .. } => {
                    self.send(node, source, Msg::RestoreFailed { reloc });
                }
                TargetEffect::WarnCutoverTimeout => {
                    self.stats.cutover_timeouts += 1;
                    let t = self.nodes[node].targets.get_mut(&reloc).expect("target");
                    t.fell_back = true;
                }
                TargetEffect::WarnSourceWaitExpired => {
                    self.stats.source_waits_expired += 1;
                }
                TargetEffect::ReleaseIngress { actor } => {
                    let actor = actor_index(&actor);
                    let t = &self.nodes[node].targets[&reloc];
                    let cut =
                        t.core.source_wait_end() != Some(zlink::relocation::SourceWaitEnd::Cutover);
                    if cut {
                        self.stats.source_waits_cut += 1;
                    }
                    if let Some(inc) = self.nodes[node].actors.get_mut(&actor)
                        && let Some(behind) = inc.behind.take()
                    {
                        inc.late_stream = cut;
                        inc.backlog.extend(behind);
                        self.schedule_turn(node, actor);
                    }
                }
                TargetEffect::CasOwner { actor, expected } => {
                    let actor = actor_index(&actor);
                    let holder = self.nodes[node].holder.clone().expect("a live node");
                    self.store_send(
                        node,
                        reloc,
                        StoreOp::Cas {
                            actor,
                            expected,
                            owner: ActorOwner {
                                mesh: mesh(),
                                holder,
                            },
                        },
                    );
                }
                TargetEffect::ReadOwner { actor } => {
                    // a store call with its timeout (no answer: unreadable, asked again)
                    self.stats.cas_read_backs += 1;
                    let actor = actor_index(&actor);
                    self.store_send(node, reloc, StoreOp::ReadOwner { actor });
                }
                TargetEffect::OpenDispatch {
                    actor,
                    location,
                    behind_source,
                } => {
                    let actor = actor_index(&actor);
                    let n = &self.nodes[node];
                    if !spot && self.s.spot.contains(&actor) && n.sources.values().any(|s| s.spot) {
                        // a member moving in alone joins its Spot here when it opens; that
                        // Spot is moving away (`join_spot`: relocating), so the moved-in
                        // member is never opened although its CAS won ("moved actor not
                        // opened after the CAS"); the world's rule keeps this from happening
                        // (`open_into_moving_spot` switches it off)
                        self.log(|| format!("  n{node}: a{actor} not opened (its Spot moves)"));
                        if let Some(inc) = self.nodes[node].actors.remove(&actor)
                            && let IncState::Temp { queue, .. } = inc.state
                        {
                            for r in queue {
                                self.fate(r.id, Fate::Dropped("not opened: its Spot was moving"));
                            }
                        }
                        self.orphan(actor);
                        continue;
                    }
                    if !self.faults.open_under_lost_lease
                        && (!n.lease_live
                            || n.holder.as_ref().map(|h| h.lease_generation)
                                != Some(location.owner_lease_generation))
                    {
                        // the CAS won under a lease that ran out before its answer came: the
                        // owner gate admits nothing under it (SB-5.11), so the moved-in
                        // incarnation never serves; its temporary queue is lost
                        self.log(|| format!("  n{node}: a{actor} opens under a lost lease"));
                        if let Some(inc) = self.nodes[node].actors.remove(&actor)
                            && let IncState::Temp { queue, .. } = inc.state
                        {
                            for r in queue {
                                self.fate(r.id, Fate::Dropped("its owner's lease ran out"));
                            }
                        }
                        self.orphan(actor);
                        continue;
                    }
                    // a fallback that found the source seen gone (a partition past the peer
                    // timeout: it may live on) opens at once; what the source relays later is
                    // appended behind (`TargetHandoff::late_relayed`), the documented case
                    let t = &self.nodes[node].targets[&reloc];
                    let cut_before_open = t.fell_back
                        && !behind_source
                        && t.core.source_wait_end()
                            != Some(zlink::relocation::SourceWaitEnd::Cutover);
                    if cut_before_open {
                        self.stats.source_waits_cut += 1;
                    }
                    let inc = self.nodes[node].actors.get_mut(&actor).expect("temp queue");
                    inc.location = Some(location);
                    inc.late_stream |= cut_before_open;
                    if behind_source && !self.faults.fallback_ignores_source_stream {
                        inc.behind = Some(Vec::new());
                    }
                    let queue = match std::mem::replace(&mut inc.state, IncState::Serving) {
                        IncState::Temp { queue, .. } => queue,
                        other => panic!("open from {other:?}"),
                    };
                    inc.backlog.extend(queue);
                    self.schedule_turn(node, actor);
                }
                TargetEffect::DiscardQueue { actor } => {
                    let actor = actor_index(&actor);
                    let ours = self.nodes[node].actors.get(&actor).is_some_and(
                        |inc| matches!(inc.state, IncState::Temp { reloc: r, .. } if r == reloc),
                    );
                    if ours
                        && let Some(inc) = self.nodes[node].actors.remove(&actor)
                        && let IncState::Temp { queue, .. } = inc.state
                    {
                        for r in queue {
                            self.fate(r.id, Fate::Dropped("the target's CAS failed"));
                        }
                    }
                }
                TargetEffect::SendRoute { to, record } => {
                    if let SessionRelocationRoute::Commit(c) = &record {
                        let a = actor_index(&c.actor);
                        let t = self.nodes[node].targets.get_mut(&reloc).expect("target");
                        if self.faults.spot_44_to_first_member && t.spot && t.actors[0] != a {
                            continue;
                        }
                        t.sent_44.insert((
                            a,
                            c.session_lifecycle.get(),
                            c.session.get(),
                            c.binding_generation.get(),
                        ));
                    }
                    self.send(node, index_of(&to), Msg::Route(record));
                }
                TargetEffect::ReportToSource {
                    committed, failed, ..
                } => {
                    self.send(
                        node,
                        source,
                        Msg::Result {
                            reloc,
                            committed,
                            failed,
                        },
                    );
                }
                TargetEffect::Finished(outcome) => {
                    self.log(|| format!("  relocation {reloc} at the target: {outcome:?}"));
                    if let zlink::relocation::TargetOutcome::Cas { committed, .. } = &outcome {
                        // spec: SB-8.3, SB-8.9 — every session a committed actor's relocation
                        // sealed gets its 44 commit from the target (each member's, for a Spot)
                        let t = &self.nodes[node].targets[&reloc];
                        for l in committed {
                            let a = actor_index(&l.actor_id);
                            if let Some(seal) =
                                t.seals.iter().find(|k| k.0 == a && !t.sent_44.contains(k))
                            {
                                return Err(self.violation(format!(
                                    "relocation {reloc} committed a{a} on n{node} without a 44 \
                                     to its sealed session {seal:?}"
                                )));
                            }
                        }
                    }
                    if let zlink::relocation::TargetOutcome::Cas { failed, .. } = &outcome {
                        // the CAS failed or its answer was lost: the store may name this node
                        // while nothing serves here (SB-8.6 leaves it to recovery)
                        for a in failed {
                            self.orphan(actor_index(a));
                        }
                    }
                    self.nodes[node].targets.remove(&reloc);
                }
            }
        }
        self.arm(node);
        Ok(())
    }

    fn store_send(&mut self, node: usize, reloc: u64, op: StoreOp) {
        let call = self.next_id;
        self.next_id += 1;
        self.nodes[node].calls.insert(call, (reloc, op.clone()));
        let generation = self.nodes[node].generation;
        self.queue.push(
            self.now + STORE_CALL_TIMEOUT_MS,
            Event::StoreTimeout {
                node,
                generation,
                call,
            },
        );
        self.send_ep(Ep::Node(node), Ep::Store, Msg::StoreCall { call, op });
    }

    /// The store handles a call from `from` and answers.
    fn store_call(&mut self, from: Ep, msg: Msg) {
        let Msg::StoreCall { call, op } = msg else {
            return;
        };
        let read = match &op {
            StoreOp::Lookup { actors } => Some(actors.clone()),
            StoreOp::ReadOwner { actor } => Some(vec![actor_id(*actor)]),
            _ => None,
        };
        if let Some(actors) = read {
            let records: Vec<(ActorId, Option<ActorLocation>)> = actors
                .iter()
                .map(|id| {
                    let l = poll_now(self.store.lookup(id.clone())).ok().flatten();
                    (id.clone(), l)
                })
                .collect();
            self.log(|| format!("  store: lookup -> {records:?}"));
            self.send_ep(Ep::Store, from, Msg::Records { call, records });
            return;
        }
        let result = match &op {
            StoreOp::Fence {
                actor,
                expected,
                owner,
            }
            | StoreOp::Retire {
                actor,
                fence: expected,
                owner,
            } => poll_now(
                self.store
                    .relocation_fence(actor_id(*actor), *expected, owner.clone()),
            ),
            StoreOp::Cas {
                actor,
                expected,
                owner,
            } => poll_now(
                self.store
                    .cas_owner(actor_id(*actor), *expected, owner.clone()),
            ),
            StoreOp::Lookup { .. } | StoreOp::ReadOwner { .. } => unreachable!("answered above"),
        };
        self.log(|| {
            format!(
                "  store: {op:?} -> {}",
                result.as_ref().map_or_else(
                    |e| e.to_string(),
                    |l| format!("{} v{}", l.owner_node, l.version)
                )
            )
        });
        self.send_ep(
            Ep::Store,
            from,
            Msg::StoreAnswer {
                call,
                result: result.map_err(|_| ()),
            },
        );
    }

    fn store_result(
        &mut self,
        node: usize,
        reloc: u64,
        op: StoreOp,
        result: Result<ActorLocation, ()>,
    ) -> Result<(), Violation> {
        let now = self.instant(node);
        match op {
            StoreOp::Fence { actor, .. } | StoreOp::Retire { actor, .. } if result.is_ok() => {
                // the record after the write: the incarnation's fence from now on
                let (StoreOp::Fence { owner, .. } | StoreOp::Retire { owner, .. }) = &op else {
                    unreachable!()
                };
                if let (Some(inc), Ok(loc)) = (self.source_inc(node, actor, owner), &result) {
                    inc.location = Some(loc.clone());
                }
                self.store_result_core(node, reloc, op, result, now)
            }
            op => self.store_result_core(node, reloc, op, result, now),
        }
    }

    fn store_result_core(
        &mut self,
        node: usize,
        reloc: u64,
        op: StoreOp,
        result: Result<ActorLocation, ()>,
        now: Instant,
    ) -> Result<(), Violation> {
        match op {
            StoreOp::Fence { actor, .. } => {
                if let Some(s) = self.nodes[node].sources.get_mut(&reloc) {
                    s.core
                        .handle_fenced(now, &actor_id(actor), result.map(|l| l.fence()));
                }
                self.drive_source(node, reloc)
            }
            StoreOp::Retire { actor, .. } => {
                if let Some(s) = self.nodes[node].sources.get_mut(&reloc) {
                    s.core
                        .handle_fence_retired(now, &actor_id(actor), result.is_ok());
                }
                self.drive_source(node, reloc)
            }
            StoreOp::Cas { actor, .. } => {
                if let Some(t) = self.nodes[node].targets.get_mut(&reloc) {
                    t.core.handle_cas(now, &actor_id(actor), result);
                }
                self.drive_target(node, reloc)
            }
            // no answer within the store call's timeout
            StoreOp::Lookup { .. } => self.owners_read(node, reloc, Err(())),
            StoreOp::ReadOwner { actor } => self.owner_read(node, reloc, actor, Err(())),
        }
    }

    /// The record read back by a target whose CAS answer was lost (`Err`: not read): the target
    /// core decides (committed, the CAS sent again, failed) or reads again later.
    fn owner_read(
        &mut self,
        node: usize,
        reloc: u64,
        actor: usize,
        record: Result<Option<ActorLocation>, ()>,
    ) -> Result<(), Violation> {
        let now = self.instant(node);
        if record.is_err() {
            self.read_back_unreadable.insert(actor);
        }
        if let Some(t) = self.nodes[node].targets.get_mut(&reloc) {
            t.core.handle_owner_read(now, &actor_id(actor), record);
        }
        self.drive_target(node, reloc)
    }

    /// The store's records of a source's moving actors after its result timeout (`Err`: not
    /// read): the source core decides (the target named with the incarnation: moved; else
    /// failed and recovered) or asks again later.
    fn owners_read(
        &mut self,
        node: usize,
        reloc: u64,
        records: Result<Vec<(ActorId, Option<ActorLocation>)>, ()>,
    ) -> Result<(), Violation> {
        let now = self.instant(node);
        if records.is_err() {
            self.stats.result_queries_retried += 1;
        }
        if let Some(s) = self.nodes[node].sources.get_mut(&reloc) {
            s.core.handle_owners(now, records);
            if let Some(SourceOutcome::Moved(_) | SourceOutcome::Failed(FailReason::CasFailed(_))) =
                s.core.outcome()
            {
                self.stats.result_waits_moved += 1;
            }
        }
        self.drive_source(node, reloc)
    }

    fn deliver(&mut self, from: usize, to: usize, msg: Msg) -> Result<(), Violation> {
        let now = self.instant(to);
        match msg {
            Msg::Relay(r) => self.ingress(to, r),
            Msg::Seal { reloc, rec } => {
                let sender = (rid(from), NodeGeneration::new(self.nodes[from].generation));
                let session = self.nodes[to]
                    .sessions
                    .values_mut()
                    .find(|s| s.rid == rec.seal.session.get());
                let outcome = match session {
                    // the session ended: no such session (SB-8.1)
                    None => SealOutcome::Rejected(zlink_wire::ErrorKind::Unavailable),
                    Some(s) => match s.agg.handle_seal(now, (&sender.0, sender.1), &rec) {
                        Ok(()) => SealOutcome::Installed,
                        Err((_, kind)) => SealOutcome::Rejected(kind),
                    },
                };
                self.log(|| format!("  n{to}: 42 of relocation {reloc} -> {outcome:?}"));
                self.send(
                    to,
                    from,
                    Msg::Sealed {
                        reloc,
                        seal: rec.seal,
                        outcome,
                    },
                );
                self.arm(to);
                Ok(())
            }
            Msg::Sealed {
                reloc,
                seal,
                outcome,
            } => {
                if let Some(s) = self.nodes[to].sources.get_mut(&reloc) {
                    s.core.handle_sealed(now, &seal, outcome);
                }
                self.drive_source(to, reloc)
            }
            Msg::Restore {
                reloc,
                request,
                bindings,
            } => {
                let actors: Vec<usize> = request
                    .actors
                    .iter()
                    .map(|a| actor_index(&a.actor))
                    .collect();
                let generations: Vec<u64> = request
                    .actors
                    .iter()
                    .map(|a| a.object_generation.get())
                    .collect();
                let spot = matches!(request.subject, Subject::Spot(_));
                let seals: BTreeSet<(usize, u64, u64, u64)> = request
                    .actors
                    .iter()
                    .flat_map(|a| {
                        a.seals.iter().map(|t| {
                            (
                                actor_index(&a.actor),
                                t.seal.session_lifecycle.get(),
                                t.seal.session.get(),
                                t.seal.binding_generation.get(),
                            )
                        })
                    })
                    .collect();
                let core =
                    TargetHandoff::restore(rid(from), request, RelocationConfig::default(), now);
                let n = &self.nodes[to];
                let members = &self.s.spot;
                let refusal = if actors.iter().any(|a| n.actors.contains_key(a)) {
                    Some(RestoreRefusal::AlreadyHosted)
                } else if spot && members.iter().any(|&m| self.hosts_member(to, m)) {
                    // a Spot moves in whole: it does not merge into its namesake here
                    self.stats.spot_restores_refused += 1;
                    Some(RestoreRefusal::AlreadyHosted)
                } else if !spot
                    && !self.faults.open_into_moving_spot
                    && members.contains(&actors[0])
                    && n.sources.values().any(|s| s.spot)
                {
                    // a member moving alone into a node whose Spot moves away: refused before
                    // relay-ready, so the source keeps it (the world's rule; SB-8.5)
                    self.stats.spot_restores_refused += 1;
                    Some(RestoreRefusal::Unavailable)
                } else {
                    None
                };
                let source_generation = self.nodes[from].generation;
                if let Some(refusal) = refusal {
                    let mut t = core;
                    let _ = t.poll_effect();
                    t.handle_installed(now, Err(refusal));
                    self.nodes[to].targets.insert(
                        reloc,
                        Target {
                            actors,
                            spot,
                            seals,
                            sent_44: BTreeSet::new(),
                            fell_back: false,
                            core: t,
                            source: from,
                            source_generation,
                        },
                    );
                    return self.drive_target(to, reloc);
                }
                for ((&actor, og), binding) in actors.iter().zip(generations).zip(bindings) {
                    let mut slot = BindingSlot::default();
                    if let Some(b) = binding {
                        let _ = slot.bind(b);
                    }
                    self.nodes[to].actors.insert(
                        actor,
                        Incarnation {
                            backlog: Default::default(),
                            turn: false,
                            behind: None,
                            late_stream: false,
                            object_generation: og,
                            state: IncState::Temp {
                                reloc,
                                queue: Vec::new(),
                            },
                            slot,
                            location: None,
                        },
                    );
                }
                self.nodes[to].targets.insert(
                    reloc,
                    Target {
                        actors,
                        spot,
                        seals,
                        sent_44: BTreeSet::new(),
                        fell_back: false,
                        core,
                        source: from,
                        source_generation,
                    },
                );
                self.drive_target(to, reloc)
            }
            Msg::RelayReady { reloc } => {
                if let Some(s) = self.nodes[to].sources.get_mut(&reloc) {
                    s.core.handle_relay_ready(now);
                }
                self.drive_source(to, reloc)
            }
            Msg::RestoreFailed { reloc } => {
                if let Some(s) = self.nodes[to].sources.get_mut(&reloc) {
                    s.core.handle_target_failed(now);
                }
                self.drive_source(to, reloc)
            }
            Msg::Cutover { reloc } => {
                if let Some(t) = self.nodes[to].targets.get_mut(&reloc) {
                    t.core.handle_cutover(now);
                }
                self.drive_target(to, reloc)
            }
            Msg::Result {
                reloc,
                committed,
                failed,
            } => {
                if let Some(s) = self.nodes[to].sources.get_mut(&reloc) {
                    s.core.handle_target_result(now, committed, failed);
                }
                self.drive_source(to, reloc)
            }
            Msg::Route(rec) => self.route(to, rec),
            Msg::Tombstone(t) => {
                let id = t.id;
                let plan = TombstonePlan::new(t.operation);
                self.nodes[to].tombs.insert(
                    id,
                    HeldTomb {
                        tomb: t,
                        plan,
                        hooking: false,
                        held: false,
                        hooked: false,
                    },
                );
                self.step_tomb(to, id)
            }
            Msg::Bind {
                id,
                actor,
                reg,
                object_generation,
                route_generation,
                route_authority,
                followed,
            } => self.handle_bind(
                to,
                id,
                actor,
                reg,
                (object_generation, route_generation, route_authority),
                followed,
            ),
            Msg::BindReply { id, result } => self.bind_reply(to, id, result),
            Msg::Replaced(rec) => self.replaced(from, to, *rec),
            Msg::Reply { id } => {
                self.terminal(id, "reply");
                Ok(())
            }
            Msg::StoreAnswer { call, result } => {
                let Some((reloc, op)) = self.nodes[to].calls.remove(&call) else {
                    return Ok(()); // after its timeout: late, dropped
                };
                self.store_result(to, reloc, op, result)
            }
            Msg::Records { call, records } => {
                let Some((reloc, op)) = self.nodes[to].calls.remove(&call) else {
                    return Ok(()); // after its timeout: late, dropped
                };
                if let StoreOp::ReadOwner { actor } = op {
                    let record = records.into_iter().next().and_then(|(_, l)| l);
                    return self.owner_read(to, reloc, actor, Ok(record));
                }
                self.owners_read(to, reloc, Ok(records))
            }
            Msg::StoreCall { .. } => Ok(()),
        }
    }

    /// A 44 at session owner `node`: applied, then the held relays leave in order over the
    /// binding's route, before anything newer (SB-8.7).
    fn route(&mut self, node: usize, rec: SessionRelocationRoute) -> Result<(), Violation> {
        let (lifecycle, session) = match &rec {
            SessionRelocationRoute::Commit(c) => (c.session_lifecycle, c.session),
            SessionRelocationRoute::Abort(a) => (a.seal.session_lifecycle, a.seal.session),
        };
        if lifecycle.get() != self.nodes[node].generation {
            return Ok(());
        }
        let Some((&k, s)) = self.nodes[node]
            .sessions
            .iter_mut()
            .find(|(_, s)| s.rid == session.get())
        else {
            return Ok(());
        };
        s.last_44 = Some(rec.clone());
        self.nodes[node].last_44 = Some((k, rec.clone()));
        let s = self.nodes[node].sessions.get_mut(&k).expect("session");
        let actor = match s.agg.handle_route(&rec) {
            Ok(RouteApplied::Committed(b) | RouteApplied::Aborted(b)) => b.actor.clone(),
            Err(e) => {
                self.stats.late_44 += 1;
                self.log(|| format!("  n{node}: 44 refused: {e:?}"));
                return Ok(());
            }
        };
        self.log(|| format!("  n{node}: 44 applied to a{}", actor_index(&actor)));
        let now = self.instant(node);
        let mut out = Vec::new();
        loop {
            let s = self.nodes[node].sessions.get_mut(&k).expect("session");
            match s.agg.next_released(now, &actor) {
                Released::Send(ticket, held) => {
                    self.held.remove(&relay_id(&held));
                    out.push((ticket, held));
                }
                Released::Expired(held) => {
                    self.held.remove(&relay_id(&held));
                    self.fate(
                        relay_id(&held),
                        Fate::Dropped("its deadline passed while held"),
                    );
                }
                Released::Done => break,
            }
        }
        if self.faults.release_after_new && out.len() > 1 {
            out.rotate_left(1);
        }
        for (ticket, held) in out {
            let id = relay_id(&held);
            let r = Relay {
                id,
                actor: actor_index(&actor),
                object_generation: ticket.binding.object_generation.get(),
                session_owner: node,
                lifecycle: lifecycle.get(),
                generation: ticket.generation().get(),
                route_generation: ticket.binding.route.node_generation.get(),
                route_lease: ticket.binding.route.owner_lease_generation.get(),
                route_authority: ticket.binding.route.authority_owner_generation.get(),
                followed: false,
                tell: false,
                captured: false,
                after_source_wait: false,
            };
            let to = index_of(ticket.to());
            self.log(|| format!("  released relay {id} -> n{to}"));
            self.send(node, to, Msg::Relay(r));
        }
        Ok(())
    }

    /// A relay at actor owner `node`.
    fn ingress(&mut self, node: usize, mut r: Relay) -> Result<(), Violation> {
        let now = self.instant(node);
        let fault_dispatch = self.faults.target_dispatches_before_cas;
        let r_actor = r.actor;
        if let Some(inc) = self.nodes[node].actors.get_mut(&r.actor)
            && inc.object_generation == r.object_generation
        {
            if r.captured && inc.late_stream {
                r.after_source_wait = true;
            }
            match &mut inc.state {
                IncState::Serving => {
                    // after a fallback regular ingress waits behind the source's relay stream
                    if !r.captured
                        && let Some(behind) = inc.behind.as_mut()
                    {
                        behind.push(r);
                        return Ok(());
                    }
                    inc.backlog.push_back(r);
                    self.schedule_turn(node, r_actor);
                    return Ok(());
                }
                IncState::Sealed { queue } => {
                    queue.push(r);
                    return Ok(());
                }
                IncState::Temp { reloc, queue } => {
                    if fault_dispatch {
                        return self.process(node, r);
                    }
                    let reloc = *reloc;
                    queue.push(r);
                    if let Some(t) = self.nodes[node].targets.get_mut(&reloc) {
                        t.core.handle_relayed(1);
                    }
                    return Ok(());
                }
                IncState::Relaying {
                    target,
                    target_generation,
                } => {
                    let (target, tg) = (*target, *target_generation);
                    if self.faults.source_drops_late_ingress {
                        return Ok(());
                    }
                    if !self.nodes[target].up || self.nodes[target].generation != tg {
                        self.fate(r.id, Fate::Dropped("its target crashed"));
                        return Ok(());
                    }
                    self.stats.captured += 1;
                    r.captured = true;
                    self.send(node, target, Msg::Relay(r));
                    return Ok(());
                }
                IncState::Ended => {
                    self.fate(r.id, Fate::Dropped("its relocation failed"));
                    return Ok(());
                }
            }
        }
        // Not live here: Message Follow (SB-5.10), once.
        let og = ObjectGeneration::new(r.object_generation);
        let looked = self.nodes[node].follow.lookup(&actor_id(r.actor), og, now);
        // the fences the record carries, checked against those the incarnation had here
        // (`follow::decide`'s `check_moved`: authority and lease; a record of an earlier or a
        // later incarnation here is not followed)
        let fence = CallFence {
            actor_id: actor_id(r.actor),
            object_generation: og,
            authority_owner_generation: AuthorityOwnerGeneration::new(r.route_authority),
            owner_lease_generation: OwnerLeaseGeneration::new(r.route_lease),
            node_generation: NodeGeneration::new(r.route_generation),
        };
        // a record older than the incarnation that last moved away from here (it missed
        // moves in between): refused as a stale location, never forwarded
        let stale = matches!(&looked, FollowLookup::Forward(route)
            if route.source.authority_owner_generation.get() > r.route_authority);
        let looked = match looked {
            FollowLookup::Forward(route)
                if !r.followed && check_moved(&route.source, &fence, FenceUse::Call).is_err() =>
            {
                FollowLookup::None
            }
            other => other,
        };
        match looked {
            FollowLookup::Forward(route) if !r.followed && !self.faults.no_follow => {
                let to = index_of(&route.target.owner_node);
                r.followed = true;
                // forwarded with the new owner's fences in place of its own (`check_moved`)
                r.route_generation = route.target.node_generation.get();
                r.route_lease = route.target.owner_lease_generation.get();
                r.route_authority = route.target.authority_owner_generation.get();
                self.stats.followed += 1;
                self.log(|| format!("  n{node} follows relay {} to n{to}", r.id));
                self.send(node, to, Msg::Relay(r));
                Ok(())
            }
            FollowLookup::Forward(_) if r.followed => {
                // spec: SB-5.10 — followed once: the actor moved on again meanwhile
                self.fate(
                    r.id,
                    Fate::Dropped("followed once already (it moved again)"),
                );
                Ok(())
            }
            other => {
                if stale && !r.followed {
                    // spec: SB-5.10 — its fences are older than the move Message Follow knows
                    self.fate(r.id, Fate::Dropped("its route is older than the last move"));
                    return Ok(());
                }
                if self.retired.contains(&(r.actor, r.object_generation)) {
                    // spec: SB-8.6 — that incarnation's record was removed: NotFound
                    self.fate(r.id, Fate::Dropped("its incarnation was retired"));
                    return Ok(());
                }
                if self.orphaned.contains(&r.actor) {
                    self.fate(r.id, Fate::Dropped("its actor has no serving owner"));
                    return Ok(());
                }
                if r.route_generation != self.nodes[node].generation {
                    // addressed to a lifecycle of this node that crashed
                    self.fate(r.id, Fate::Dropped("its owner crashed"));
                    return Ok(());
                }
                let lease = self.nodes[node]
                    .holder
                    .as_ref()
                    .map(|h| h.lease_generation.get());
                if !self.nodes[node].lease_live || Some(r.route_lease) != lease {
                    // addressed to an incarnation this node ended when its lease ran out
                    self.fate(r.id, Fate::Dropped("its owner's lease ran out"));
                    return Ok(());
                }
                Err(self.violation(format!(
                    "relay {} of a{} refused at n{node} ({other:?}, followed {}) while the \
                     actor is served elsewhere",
                    r.id, r.actor, r.followed
                )))
            }
        }
    }

    /// Schedules the actor's next turn on `node` if it serves, has work and none is scheduled:
    /// a turn takes 0 to `turn_ms` ms (now and then ten times that: a slow handler).
    fn schedule_turn(&mut self, node: usize, actor: usize) {
        let generation = self.nodes[node].generation;
        let Some(inc) = self.nodes[node].actors.get_mut(&actor) else {
            return;
        };
        if inc.turn || inc.backlog.is_empty() || !matches!(inc.state, IncState::Serving) {
            return;
        }
        inc.turn = true;
        let h = super::mix(self.s.seed, inc.backlog[0].id);
        let mut ms = h % (self.s.turn_ms + 1);
        if h % 100 < 3 {
            ms *= 10;
        }
        self.queue.push(
            self.now + ms,
            Event::Turn {
                node,
                generation,
                actor,
            },
        );
    }

    /// `node` processes relay `r` (its actor's turn).
    fn process(&mut self, node: usize, r: Relay) -> Result<(), Violation> {
        let inc = &self.nodes[node].actors[&r.actor];
        // the binding slot's check (SB-5.3)
        let refused = !r.tell
            && inc
                .slot
                .check_relay(
                    &rid(r.session_owner),
                    SessionLifecycleGeneration::new(r.lifecycle),
                    BindingGeneration::new(r.generation),
                )
                .is_err();
        if refused && self.replaced_bindings.contains(&(r.actor, r.generation)) {
            // spec: SB-5.3, SB-6.1 — another session's bind replaced it at the owner
            self.fate(r.id, Fate::Dropped("its binding was replaced"));
            return Ok(());
        }
        if refused && self.unbound.contains(&(r.actor, r.generation)) {
            // spec: SB-6.6 — its session unbound it (or disconnected): the tombstone removed it
            self.fate(r.id, Fate::Dropped("its binding was unbound"));
            return Ok(());
        }
        if refused && self.ended_bindings.contains(&(r.actor, r.generation)) {
            // spec: SB-5.3 — the actor was activated again after its owner crashed: the
            // binding ended there, the new incarnation's slot refuses its relays
            self.fate(
                r.id,
                Fate::Dropped("its binding ended with its crashed owner"),
            );
            return Ok(());
        }
        if !r.tell
            && inc
                .slot
                .check_relay(
                    &rid(r.session_owner),
                    SessionLifecycleGeneration::new(r.lifecycle),
                    BindingGeneration::new(r.generation),
                )
                .is_err()
        {
            return Err(self.violation(format!(
                "relay {} refused by a{}'s slot on n{node}: {:?}",
                r.id,
                r.actor,
                inc.slot.current()
            )));
        }
        // spec: EG-14, SB-8.9 — only the owner the store names serves
        let rec = poll_now(self.store.lookup(actor_id(r.actor)))
            .ok()
            .flatten();
        // spec: EG-14, SB-5.11 — and under the node's live lease the record names
        let n = &self.nodes[node];
        let named = rec.as_ref().is_some_and(|l| {
            l.owner_node == rid(node)
                && l.node_generation.get() == n.generation
                && l.object_generation.get() == r.object_generation
                && n.lease_live
                && n.holder.as_ref().map(|h| h.lease_generation) == Some(l.owner_lease_generation)
        });
        if !named {
            return Err(self.violation(format!(
                "n{node} processed relay {} of a{} while the store names {:?} (its lease live {}, \
                 generation {:?})",
                r.id,
                r.actor,
                rec.map(|l| (l.owner_node, l.node_generation, l.owner_lease_generation)),
                n.lease_live,
                n.holder.as_ref().map(|h| h.lease_generation)
            )));
        }
        // spec: SB-8.9, EG-4.1 — a Spot moves as one unit: once its runtime is sealed no member
        // runs a turn at the source (its state was taken)
        let inc_fence = inc.location.as_ref().map(|l| {
            (
                l.object_generation,
                l.authority_owner_generation,
                l.owner_lease_generation,
            )
        });
        if let Some((reloc, _)) = self.nodes[node].sources.iter().find(|(_, s)| {
            s.spot && s.sealed && s.moves(r.actor) && {
                let o = s.owner_of(r.actor);
                inc_fence
                    == Some((
                        o.object_generation,
                        o.authority_owner_generation,
                        o.holder.lease_generation,
                    ))
            }
        }) {
            return Err(self.violation(format!(
                "n{node} ran a turn of a{} while its Spot is sealed for relocation {reloc}",
                r.actor
            )));
        }
        let info = self.relays.get(&r.id).cloned().expect("known relay");
        // spec: SB-8.4, SB-5.10 — processed once
        if matches!(info.fate, Some(Fate::Processed(_))) {
            return Err(self.violation(format!("relay {} processed twice", r.id)));
        }
        // spec: SB-8.7, SB-8.9 — per session, per actor, in the order sent (a ref's messages
        // have no order across a move: SB-9, another connection)
        let last = self.last_seq.get(&info.key).copied().unwrap_or(0);
        if !r.tell && info.seq <= last && r.after_source_wait {
            // The target fell back after the cutover timeout (SB-8.9) and its wait for the
            // source's relay stream ended without the cutover (the source seen gone, or the
            // source wait expired) while captured work was still on its way: appended behind
            // (`TargetHandoff::late_relayed`), out of the session's order — the one documented
            // case (docs/ARCHITECTURE.md, "The cutover timeout's fallback"). Counted apart.
            self.stats.reordered_after_source_wait += 1;
            self.log(|| {
                format!(
                    "  relay {} (seq {}) arrives after the source wait",
                    r.id, info.seq
                )
            });
        } else if !r.tell && info.seq <= last {
            return Err(self.violation(format!(
                "relay {} (seq {}) of a{} processed on n{node} after seq {last}",
                r.id, info.seq, r.actor
            )));
        }
        self.last_seq.insert(info.key, info.seq.max(last));
        self.stats.processed += 1;
        if self.moved.contains(&r.actor) {
            self.stats.processed_after_move += 1;
        }
        if self.reactivated.contains_key(&r.actor) {
            self.stats.processed_after_reactivation += 1;
        }
        if self.spot_moved.contains(&r.actor) {
            self.stats.processed_after_spot_move += 1;
        }
        self.log(|| format!("  n{node} processes relay {} (seq {})", r.id, info.seq));
        self.fate(r.id, Fate::Processed(node));
        if info.request {
            self.send(node, info.key.0, Msg::Reply { id: r.id });
        }
        Ok(())
    }

    /// A terminal of request `id` at its caller (the session owner that sent it): the first one
    /// counts, later ones are late; a caller whose process died has no one to tell.
    fn terminal(&mut self, id: u64, kind: &'static str) {
        let Some(info) = self.relays.get_mut(&id) else {
            return;
        };
        let (node, lifecycle) = (info.key.0, info.key.1);
        if !info.request || !self.nodes[node].up || self.nodes[node].generation != lifecycle {
            return;
        }
        if info.terminal.is_some() {
            // a deadline after the terminal is a timer with nothing left to do
            if kind != "deadline" {
                self.stats.late_terminals += 1;
            }
            return;
        }
        info.terminal = Some(kind);
        match kind {
            "reply" => self.stats.request_replies += 1,
            "refused" => self.stats.request_refusals += 1,
            _ => self.stats.request_deadlines += 1,
        }
        if let Some(t) = &mut self.trace {
            t.push(format!("{:>6}   request {id}: {kind}", self.now));
        }
    }

    /// After every step: at most one node serves each actor.
    fn check_step(&self) -> Result<(), Violation> {
        for a in 0..self.s.actors {
            let serving: Vec<usize> = (0..self.s.nodes)
                .filter(|&i| {
                    self.nodes[i].up
                        && self.nodes[i]
                            .actors
                            .get(&a)
                            .is_some_and(|inc| matches!(inc.state, IncState::Serving))
                })
                .collect();
            // spec: EG-14, SB-8.6 — no two nodes serve one actor
            if serving.len() > 1 {
                return Err(self.violation(format!("a{a} is served by {serving:?}")));
            }
        }
        Ok(())
    }

    fn final_check(&mut self) -> Result<(), Violation> {
        // spec: SB-8.6 — every relocation ends: after the drain (longer than every timeout of
        // the cores, the source's result timeout included) no live node still runs one; a
        // source whose target's result was lost asks the store and decides
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some((reloc, s)) = n.sources.iter().find(|_| n.up) {
                return Err(self.violation(format!(
                    "relocation {reloc} of {:?} still runs at its source n{i} after the drain \
                     ({:?})",
                    s.actors,
                    s.core.phase()
                )));
            }
            if let Some((reloc, t)) = n.targets.iter().find(|_| n.up) {
                return Err(self.violation(format!(
                    "relocation {reloc} of {:?} still runs at its target n{i} after the drain \
                     ({:?})",
                    t.actors,
                    t.core.phase()
                )));
            }
        }
        // spec: SB-8.6 — after the drain, an actor whose record names a live node under its
        // live lease is served there (a failed relocation's source recovered it)
        for a in 0..self.s.actors {
            let Some(l) = poll_now(self.store.lookup(actor_id(a))).ok().flatten() else {
                continue;
            };
            let i = index_of(&l.owner_node);
            let n = &self.nodes[i];
            let live = n.up
                && n.lease_live
                && n.generation == l.node_generation.get()
                && n.holder.as_ref().map(|h| h.lease_generation) == Some(l.owner_lease_generation);
            let served = n.actors.get(&a).is_some_and(|inc| {
                matches!(inc.state, IncState::Serving)
                    && inc.object_generation == l.object_generation.get()
            });
            // …unless a target whose CAS answer was lost could not read the record back within
            // `CAS_READ_BACK_WAIT` (the store out of reach) and failed while the CAS may have
            // won (the recovery then finds the record moved on; counted)
            if live && !served && self.read_back_unreadable.contains(&a) {
                self.stats.unrecovered += 1;
                continue;
            }
            if live && !served {
                return Err(self.violation(format!(
                    "a{a}: the store names n{i} (live, its lease) but nothing serves it there"
                )));
            }
        }
        // spec: SB-6.6, SB-7.3, SB-7.4, SB-8 — every 38 unbind or disconnect ends (applied where
        // the binding lives, or refused as not current, or lost with its connection or node);
        // a disconnect that removed its binding ran the Spot's OnDisconnectActor exactly once
        // (here, or on the new owner it was forwarded to)
        for (&id, &(actor, g, disconnect, fate)) in &self.tombs {
            let Some(fate) = fate else {
                return Err(self.violation(format!(
                    "tombstone {id} of a{actor} binding {g} was neither applied nor refused"
                )));
            };
            let runs = self.hooks.get(&(actor, g)).copied().unwrap_or(0);
            if disconnect && fate == "applied" && runs != 1 {
                return Err(self.violation(format!(
                    "disconnect {id} of a{actor} removed binding {g} but its OnDisconnectActor \
                     ran {runs} times"
                )));
            }
        }
        // …and no live incarnation holds a binding its session unbound or disconnected, unless
        // every tombstone of it was lost (a broken connection, a crashed node)
        let mut superseded_held = 0;
        let mut stale_route_held = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.up {
                continue;
            }
            for (&a, inc) in &n.actors {
                if matches!(inc.state, IncState::Temp { .. } | IncState::Ended) {
                    continue;
                }
                let Some(g) = inc.slot.current().map(|c| c.generation.get()) else {
                    continue;
                };
                if !self.unbound.contains(&(a, g)) {
                    continue;
                }
                let fates: Vec<Option<&str>> = self
                    .tombs
                    .values()
                    .filter(|t| t.0 == a && t.1 == g)
                    .map(|t| t.3)
                    .collect();
                let lost = fates.iter().all(|f| {
                    matches!(
                        f,
                        Some(
                            "lost with its connection"
                                | "its node crashed"
                                | "refused sealed (its owner's lease ran out mid-move)"
                                | "its route's owner crashed"
                        )
                    )
                });
                // a source decided "failed" (its target seen gone, no result), then that target's
                // CAS won after all (read back and sent again, or answered late): no Message
                // Follow to the target was installed (a node gap: counted, reported), so a 38
                // that reached the source found no route and the target keeps the binding
                let superseded = self.decided_failed.contains(&(i, a))
                    && fates.iter().all(|f| *f == Some("not current"));
                if superseded {
                    superseded_held += 1;
                    continue;
                }
                // removed while sealed: the 44 that would have moved its route on was lost, and
                // its 38 reached the old owner after its follow entry ended (Message Follow is
                // time-bounded, SB-5.10; the session's seal timeout closes it, SB-8.3)
                if self.sent_sealed.contains(&(a, g))
                    && fates.iter().all(|f| *f == Some("not current"))
                {
                    stale_route_held += 1;
                    continue;
                }
                if !lost {
                    return Err(self.violation(format!(
                        "a{a} on n{i} still holds binding {g}, which its session unbound or \
                         disconnected (tombstones: {fates:?})"
                    )));
                }
            }
        }
        self.stats.tombstones_superseded += superseded_held;
        self.stats.tombstones_after_follow += stale_route_held;
        for (id, info) in &self.relays {
            match &info.fate {
                None => {
                    return Err(self.violation(format!(
                        "relay {id} (seq {} of a{}) was neither processed nor dropped for a \
                         reason",
                        info.seq, info.key.3
                    )));
                }
                Some(Fate::Dropped(why)) if *why == "SECOND FATE" => {
                    return Err(self.violation(format!("relay {id} has two fates")));
                }
                _ => {}
            }
            // spec: SB-12 — every request ends with exactly one terminal at its caller (the
            // first; later ones are ignored), and a reply or a refusal tells the truth
            if !info.request {
                continue;
            }
            let caller_alive =
                self.nodes[info.key.0].up && self.nodes[info.key.0].generation == info.key.1;
            match (info.terminal, &info.fate) {
                (None, _) if caller_alive => {
                    return Err(self.violation(format!(
                        "request {id} (seq {} of a{}) has no terminal",
                        info.seq, info.key.3
                    )));
                }
                (Some("reply"), f) if !matches!(f, Some(Fate::Processed(_))) => {
                    return Err(
                        self.violation(format!("request {id} was answered by a reply but {f:?}"))
                    );
                }
                (Some("refused"), Some(Fate::Processed(_))) => {
                    return Err(self.violation(format!(
                        "request {id} was refused to its caller but processed"
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

fn short_source(e: &SourceEffect) -> String {
    match e {
        SourceEffect::SendRestore { to, .. } => format!("SendRestore to {to}"),
        SourceEffect::SendSeal { to, record } => {
            format!("SendSeal to {to} (session {})", record.seal.session.get())
        }
        other => format!("{other:?}"),
    }
}

fn short_target(e: &TargetEffect) -> String {
    match e {
        TargetEffect::InstallQueues(_) => "InstallQueues".into(),
        TargetEffect::SendRoute { to, .. } => format!("SendRoute (44 commit) to {to}"),
        other => format!("{other:?}"),
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
