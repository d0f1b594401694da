//! Message Follow on the old owner (SB-5.10, SB-5.12, SB-14.3, SB-12), sans-IO.
//!
//! After a relocation committed, records still arrive at the old route: a stale `ActorRef` held
//! by another actor or a client, a session's stored route whose 44 has not been applied yet, a
//! bind (38) from a ref taken before the move. The old owner keeps one [`FollowTable`] entry per
//! moved incarnation — where it went ([`ActorLocation`], the committed store record of the
//! target) — for a bounded, configurable time ([`FollowConfig::ttl`]), and forwards each such
//! record **once** to that target, never re-reading the store and never resending elsewhere.
//!
//! Decisions ([`decide`], in this order, the first that fails decides):
//! 1. the old owner's own standing (shutting down, lease lapsed → `Unavailable`);
//! 2. the record names another process generation of this node → `Unavailable`;
//! 3. this node destroyed exactly that incarnation → `NotFound` (a destroyed incarnation is not a
//!    moved one; SB-12);
//! 4. the table: an active entry of the same ObjectGeneration whose source fences (the
//!    AuthorityOwnerGeneration and OwnerLeaseGeneration the incarnation had here) match the
//!    record's → **forward** to the entry's target with the target's fences; another
//!    ObjectGeneration → `InvalidOperation`; a pre-commit relocation seal → `Unavailable`
//!    (SB-5.12); an expired entry or none → `Unavailable` (stale location).
//!
//! The table is bounded: entries end at their deadline (a sweep on every call frees them) and
//! at most [`FollowConfig::capacity`] entries exist (the oldest is dropped first, counted). Only
//! this node's own relocations create entries, never a stranger's record.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use zlink_wire::{ActorId, ObjectGeneration};

use crate::actor::ActorError;
pub use crate::actor::fence::FenceUse;
use crate::actor::fence::{self, CallFence, OwnerStanding};
use crate::store::ActorLocation;

/// Default [`FollowConfig::ttl`]: how long the old owner forwards after a commit. Long enough
/// for every session owner's 44 (sent by the target right after its CAS) to be applied and for
/// records already in flight on the old route to drain; short enough that a stale ref is
/// answered `Unavailable` soon after (the application re-resolves with `get`).
pub const DEFAULT_FOLLOW_TTL: Duration = Duration::from_secs(5);
/// Default [`FollowConfig::capacity`].
pub const DEFAULT_FOLLOW_CAPACITY: usize = 65_536;
/// Default [`FollowConfig::seal_hold`]: the seal timeout (3 s), the restore timeout (3 s) and
/// the cutover timeout (1 s) with a margin — a relocation that has neither committed nor
/// aborted by then has failed (its sessions' seals closed them).
pub const DEFAULT_SEAL_HOLD: Duration = Duration::from_secs(8);

/// Bounds of the old owner's Message Follow table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowConfig {
    /// How long an entry forwards after the commit (default 5 s). Zero: no Message Follow
    /// (a stale route is `Unavailable` at once).
    pub ttl: Duration,
    /// Entries held at most (default 65,536); at the bound the oldest is dropped.
    pub capacity: usize,
    /// How long a pre-commit seal entry answers `Unavailable` at most (default 8 s).
    pub seal_hold: Duration,
}

impl Default for FollowConfig {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_FOLLOW_TTL,
            capacity: DEFAULT_FOLLOW_CAPACITY,
            seal_hold: DEFAULT_SEAL_HOLD,
        }
    }
}

/// Where a moved incarnation went, and the fences it had on the old owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowRoute {
    /// The fences of the incarnation while it lived here (what records addressed here carry).
    pub source: CallFence,
    /// The committed record of the target (owner node, its NodeGeneration, the new
    /// AuthorityOwnerGeneration and the target's OwnerLeaseGeneration).
    pub target: ActorLocation,
}

impl FollowRoute {
    /// The fences a forwarded record carries to the target: the target's, for the same actor
    /// and incarnation (the old owner checked the record's own fences against
    /// [`FollowRoute::source`]; the target checks these as for any record, SB-2.1).
    #[must_use]
    pub fn target_fence(&self) -> CallFence {
        CallFence {
            actor_id: self.target.actor_id.clone(),
            object_generation: self.target.object_generation,
            authority_owner_generation: self.target.authority_owner_generation,
            owner_lease_generation: self.target.owner_lease_generation,
            node_generation: self.target.node_generation,
        }
    }
}

/// What the table knows of an actor (see [`FollowTable::lookup`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowLookup {
    /// A committed move of this incarnation, still within its time: forward there.
    Forward(FollowRoute),
    /// The incarnation is sealed for a relocation that has not committed (SB-5.12).
    Sealed,
    /// The entry is of another incarnation (its ObjectGeneration).
    WrongGeneration(ObjectGeneration),
    /// The entry's time is over (it is freed by this lookup).
    Expired,
    /// No entry.
    None,
}

/// Why Message Follow refused a record (the closed vocabulary of its counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FollowRefusal {
    /// No active entry: never moved from here, or its follow time is over (`Unavailable`).
    NoRoute,
    /// The entry's time was over when the record came (`Unavailable`).
    Expired,
    /// Another ObjectGeneration than the moved one (`InvalidOperation`).
    WrongGeneration,
    /// The record's authority or lease fence is not the one the incarnation had here
    /// (`Unavailable`).
    StaleFence,
    /// The incarnation is sealed for a relocation that has not committed (`Unavailable`).
    Sealed,
    /// A record that was already forwarded once found no live incarnation at the target
    /// either: it is not forwarded again (`Unavailable`, SB-5.10 "once").
    AlreadyFollowed,
    /// The forward could not be sent to the target (the target node is not reachable).
    SendFailed,
    /// The old owner's queue of forwards waiting to be sent was full (`Unavailable`).
    QueueFull,
}

impl FollowRefusal {
    /// Every refusal, in counter order.
    pub const ALL: [FollowRefusal; 8] = [
        FollowRefusal::NoRoute,
        FollowRefusal::Expired,
        FollowRefusal::WrongGeneration,
        FollowRefusal::StaleFence,
        FollowRefusal::Sealed,
        FollowRefusal::AlreadyFollowed,
        FollowRefusal::SendFailed,
        FollowRefusal::QueueFull,
    ];

    /// The counter label.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FollowRefusal::NoRoute => "no_route",
            FollowRefusal::Expired => "expired",
            FollowRefusal::WrongGeneration => "wrong_generation",
            FollowRefusal::StaleFence => "stale_fence",
            FollowRefusal::Sealed => "sealed",
            FollowRefusal::AlreadyFollowed => "already_followed",
            FollowRefusal::SendFailed => "send_failed",
            FollowRefusal::QueueFull => "queue_full",
        }
    }

    fn index(self) -> usize {
        match self {
            FollowRefusal::NoRoute => 0,
            FollowRefusal::Expired => 1,
            FollowRefusal::WrongGeneration => 2,
            FollowRefusal::StaleFence => 3,
            FollowRefusal::Sealed => 4,
            FollowRefusal::AlreadyFollowed => 5,
            FollowRefusal::SendFailed => 6,
            FollowRefusal::QueueFull => 7,
        }
    }
}

/// Message Follow counters of one node (monotonic, but `entries`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowCounters {
    /// Entries now (a gauge).
    pub entries: u64,
    /// Entries installed at a commit.
    pub installed: u64,
    /// Entries that ended at their time.
    pub expired: u64,
    /// Entries dropped early because the table was full.
    pub evicted: u64,
    /// Records forwarded to the new owner (each once).
    pub forwarded: u64,
    /// 38 unbinds and disconnects that found their incarnation sealed by a relocation and
    /// waited for its end (each once; then applied here or forwarded,
    /// `relocation::tombstone`).
    pub held: u64,
    /// Records refused, by [`FollowRefusal`] (in [`FollowRefusal::ALL`] order).
    pub refused: [u64; 8],
}

impl FollowCounters {
    /// Records refused for `reason`.
    #[must_use]
    pub fn refused(&self, reason: FollowRefusal) -> u64 {
        self.refused[reason.index()]
    }
}

#[derive(Debug)]
enum State {
    Sealed(ObjectGeneration),
    Moved(FollowRoute),
}

#[derive(Debug)]
struct Entry {
    state: State,
    until: Instant,
    seq: u64,
}

/// The old owner's Message Follow table, sans-IO (time passed in). See the module docs.
#[derive(Debug)]
pub struct FollowTable {
    config: FollowConfig,
    entries: HashMap<ActorId, Entry>,
    /// Deadlines in order (deadline, insertion sequence) → actor; an entry replaced or removed
    /// takes its key out, so this holds exactly one key per entry.
    order: BTreeMap<(Instant, u64), ActorId>,
    next: u64,
    counters: FollowCounters,
}

impl FollowTable {
    /// An empty table with `config`.
    #[must_use]
    pub fn new(config: FollowConfig) -> Self {
        Self {
            config,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
            counters: FollowCounters::default(),
        }
    }

    /// The table's bounds.
    #[must_use]
    pub fn config(&self) -> FollowConfig {
        self.config
    }

    /// Entries held now (sealed and moved).
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The counters, with the entries held now.
    #[must_use]
    pub fn counters(&self) -> FollowCounters {
        FollowCounters {
            entries: self.entries.len() as u64,
            ..self.counters
        }
    }

    /// Counts a forwarded record.
    pub fn count_forwarded(&mut self) {
        self.counters.forwarded += 1;
    }

    /// Counts a 38 tombstone held until a relocation of its incarnation ends.
    pub fn count_held(&mut self) {
        self.counters.held += 1;
    }

    /// Counts a refused record.
    pub fn count_refused(&mut self, reason: FollowRefusal) {
        self.counters.refused[reason.index()] += 1;
    }

    fn put(&mut self, actor: ActorId, state: State, until: Instant, now: Instant) {
        self.expire(now);
        self.remove(&actor);
        while self.entries.len() >= self.config.capacity.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
            self.counters.evicted += 1;
        }
        self.next += 1;
        let seq = self.next;
        self.order.insert((until, seq), actor.clone());
        self.entries.insert(actor, Entry { state, until, seq });
    }

    fn remove(&mut self, actor: &ActorId) -> Option<Entry> {
        let e = self.entries.remove(actor)?;
        self.order.remove(&(e.until, e.seq));
        Some(e)
    }

    /// A relocation of `actor`'s incarnation `object_generation` sealed it and has not
    /// committed: binds naming it answer `Unavailable` (SB-5.12) until [`FollowTable::install`]
    /// (commit), [`FollowTable::release`] (abort) or [`FollowConfig::seal_hold`].
    pub fn seal(&mut self, actor: ActorId, object_generation: ObjectGeneration, now: Instant) {
        let until = now + self.config.seal_hold;
        self.put(actor, State::Sealed(object_generation), until, now);
    }

    /// Ends a pre-commit seal entry of that incarnation (the relocation aborted); `true` if
    /// there was one. A committed entry is kept.
    pub fn release(&mut self, actor: &ActorId, object_generation: ObjectGeneration) -> bool {
        let sealed = matches!(
            self.entries.get(actor).map(|e| &e.state),
            Some(State::Sealed(g)) if *g == object_generation
        );
        if sealed {
            self.remove(actor);
        }
        sealed
    }

    /// The relocation of the incarnation whose fences here were `source` committed at
    /// `target`: records for it are forwarded there until `now` + [`FollowConfig::ttl`]. A zero
    /// TTL installs nothing (and ends a seal entry).
    pub fn install(&mut self, source: CallFence, target: ActorLocation, now: Instant) {
        if self.config.ttl.is_zero() {
            self.remove(&source.actor_id);
            return;
        }
        let until = now + self.config.ttl;
        let actor = source.actor_id.clone();
        self.counters.installed += 1;
        self.put(
            actor,
            State::Moved(FollowRoute { source, target }),
            until,
            now,
        );
    }

    /// When the pre-commit seal entry of `actor`'s incarnation `object_generation` ends by its
    /// time ([`FollowConfig::seal_hold`]), if there is one: a waiter for the relocation's end
    /// wakes then at the latest.
    #[must_use]
    pub fn sealed_until(
        &self,
        actor: &ActorId,
        object_generation: ObjectGeneration,
    ) -> Option<Instant> {
        match self.entries.get(actor) {
            Some(Entry {
                state: State::Sealed(g),
                until,
                ..
            }) if *g == object_generation => Some(*until),
            _ => None,
        }
    }

    /// Frees every entry whose time is over at `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(entry) = self.order.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let actor = entry.remove();
            if matches!(
                self.entries.remove(&actor).map(|e| e.state),
                Some(State::Moved(_))
            ) {
                self.counters.expired += 1;
            }
            n += 1;
        }
        n
    }

    /// What the table knows of `actor` at `now` for a record naming `object_generation`.
    pub fn lookup(
        &mut self,
        actor: &ActorId,
        object_generation: ObjectGeneration,
        now: Instant,
    ) -> FollowLookup {
        let due = self.entries.get(actor).map(|e| e.until <= now);
        self.expire(now);
        let Some(e) = self.entries.get(actor) else {
            return if due == Some(true) {
                FollowLookup::Expired
            } else {
                FollowLookup::None
            };
        };
        match &e.state {
            State::Sealed(g) if *g == object_generation => FollowLookup::Sealed,
            State::Sealed(g) => FollowLookup::WrongGeneration(*g),
            State::Moved(r) if r.source.object_generation == object_generation => {
                FollowLookup::Forward(r.clone())
            }
            State::Moved(r) => FollowLookup::WrongGeneration(r.source.object_generation),
        }
    }
}

impl Default for FollowTable {
    fn default() -> Self {
        Self::new(FollowConfig::default())
    }
}

/// The old owner's decision for a record addressed to an actor that is not live here (see the
/// module docs for the order). `Ok` is the route to forward the record on, with the target's
/// fences ([`FollowRoute::target_fence`]); a refusal is returned with its counter reason
/// (`None` when it is not Message Follow's: the standing, the node generation, a destroyed
/// incarnation). Counts nothing itself.
///
/// # Errors
/// The [`ActorError`] the record is answered with.
pub fn decide(
    table: &mut FollowTable,
    standing: OwnerStanding,
    node_generation: zlink_wire::NodeGeneration,
    retired: Option<ObjectGeneration>,
    call: &CallFence,
    fences: FenceUse,
    now: Instant,
) -> Result<FollowRoute, (ActorError, Option<FollowRefusal>)> {
    standing.admit().map_err(|e| (e, None))?;
    let stale = |fence| ActorError::StaleFence {
        actor_id: call.actor_id.clone(),
        fence,
    };
    if call.node_generation != node_generation {
        return Err((stale("node generation"), None));
    }
    if retired == Some(call.object_generation) {
        return Err((
            ActorError::ActorNotFound {
                actor_id: call.actor_id.clone(),
            },
            None,
        ));
    }
    match table.lookup(&call.actor_id, call.object_generation, now) {
        FollowLookup::Forward(route) => match fence::check_moved(&route.source, call, fences) {
            Ok(()) => Ok(route),
            Err(e) => Err((e, Some(FollowRefusal::StaleFence))),
        },
        FollowLookup::Sealed => Err((stale("relocation seal"), Some(FollowRefusal::Sealed))),
        FollowLookup::WrongGeneration(actual) => Err((
            ActorError::GenerationMismatch {
                actor_id: call.actor_id.clone(),
                expected: call.object_generation,
                actual,
            },
            Some(FollowRefusal::WrongGeneration),
        )),
        FollowLookup::Expired => Err((stale("location"), Some(FollowRefusal::Expired))),
        FollowLookup::None => Err((stale("location"), Some(FollowRefusal::NoRoute))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ActivationState, StoreVersion};
    use zlink_wire::{
        AuthorityOwnerGeneration, ErrorKind, MeshName, NodeGeneration, NodeRid,
        OwnerLeaseGeneration,
    };

    const ME: u64 = 7;

    fn id(s: &str) -> ActorId {
        ActorId::new(s).unwrap()
    }

    fn source(actor: &str, obj: u64) -> CallFence {
        CallFence {
            actor_id: id(actor),
            object_generation: ObjectGeneration::new(obj),
            authority_owner_generation: AuthorityOwnerGeneration::new(3),
            owner_lease_generation: OwnerLeaseGeneration::new(4),
            node_generation: NodeGeneration::new(ME),
        }
    }

    fn target(actor: &str, obj: u64) -> ActorLocation {
        ActorLocation {
            actor_id: id(actor),
            actor_type: "counter".into(),
            object_generation: ObjectGeneration::new(obj),
            mesh: MeshName::new("m").unwrap(),
            owner_node: NodeRid::new("b").unwrap(),
            node_generation: NodeGeneration::new(99),
            authority_owner_generation: AuthorityOwnerGeneration::new(4),
            owner_lease_generation: OwnerLeaseGeneration::new(8),
            state: ActivationState::Ready,
            version: StoreVersion::new(5),
        }
    }

    fn cfg(ttl_ms: u64, capacity: usize) -> FollowConfig {
        FollowConfig {
            ttl: Duration::from_millis(ttl_ms),
            capacity,
            seal_hold: Duration::from_millis(2 * ttl_ms),
        }
    }

    fn decide_at(
        t: &mut FollowTable,
        retired: Option<u64>,
        call: &CallFence,
        now: Instant,
    ) -> Result<FollowRoute, (ErrorKind, Option<FollowRefusal>)> {
        decide(
            t,
            OwnerStanding::Serving,
            NodeGeneration::new(ME),
            retired.map(ObjectGeneration::new),
            call,
            FenceUse::Call,
            now,
        )
        .map_err(|(e, r)| (e.kind(), r))
    }

    // spec: SB-5.10, SB-14.3 (an active follow forwards with the target's fences)
    #[test]
    fn an_active_entry_forwards_with_the_target_fences() {
        let now = Instant::now();
        let mut t = FollowTable::new(cfg(1_000, 8));
        t.install(source("a", 1), target("a", 1), now);
        let route = decide_at(&mut t, None, &source("a", 1), now).unwrap();
        let f = route.target_fence();
        assert_eq!(f.node_generation, NodeGeneration::new(99));
        assert_eq!(
            f.authority_owner_generation,
            AuthorityOwnerGeneration::new(4)
        );
        assert_eq!(f.owner_lease_generation, OwnerLeaseGeneration::new(8));
        assert_eq!(route.target.owner_node, NodeRid::new("b").unwrap());
    }

    // spec: SB-5.10, SB-5.12, SB-12 (each row Message Follow decides)
    #[test]
    fn refusals_follow_the_failure_table() {
        let now = Instant::now();
        let mut t = FollowTable::new(cfg(1_000, 8));
        t.install(source("a", 2), target("a", 2), now);
        // Another incarnation → InvalidOperation.
        assert_eq!(
            decide_at(&mut t, None, &source("a", 1), now).unwrap_err(),
            (
                ErrorKind::InvalidOperation,
                Some(FollowRefusal::WrongGeneration)
            )
        );
        // A destroyed incarnation here → NotFound, not a follow.
        assert_eq!(
            decide_at(&mut t, Some(1), &source("a", 1), now).unwrap_err(),
            (ErrorKind::NotFound, None)
        );
        // Another authority than the one the incarnation had here → Unavailable.
        let mut old = source("a", 2);
        old.authority_owner_generation = AuthorityOwnerGeneration::new(2);
        assert_eq!(
            decide_at(&mut t, None, &old, now).unwrap_err(),
            (ErrorKind::Unavailable, Some(FollowRefusal::StaleFence))
        );
        // A bind never compares the lease (SB-5.2).
        let mut lease = source("a", 2);
        lease.owner_lease_generation = OwnerLeaseGeneration::new(1);
        assert!(decide_at(&mut t, None, &lease, now).is_err());
        assert!(
            decide(
                &mut t,
                OwnerStanding::Serving,
                NodeGeneration::new(ME),
                None,
                &lease,
                FenceUse::Bind,
                now
            )
            .is_ok()
        );
        // No entry → Unavailable.
        assert_eq!(
            decide_at(&mut t, None, &source("b", 1), now).unwrap_err(),
            (ErrorKind::Unavailable, Some(FollowRefusal::NoRoute))
        );
        // Another process generation of this node → Unavailable before the table.
        let mut other = source("a", 2);
        other.node_generation = NodeGeneration::new(ME + 1);
        assert_eq!(
            decide_at(&mut t, None, &other, now).unwrap_err(),
            (ErrorKind::Unavailable, None)
        );
        // Shutting down → Unavailable, whatever the table says.
        let r = decide(
            &mut t,
            OwnerStanding::Draining,
            NodeGeneration::new(ME),
            None,
            &source("a", 2),
            FenceUse::Call,
            now,
        );
        assert_eq!(r.unwrap_err().0.kind(), ErrorKind::Unavailable);
    }

    // spec: SB-5.12 (a pre-commit seal → Unavailable; commit → forward; abort → nothing)
    #[test]
    fn a_seal_answers_unavailable_until_commit_or_abort() {
        let now = Instant::now();
        let mut t = FollowTable::new(cfg(1_000, 8));
        t.seal(id("a"), ObjectGeneration::new(1), now);
        assert_eq!(
            decide_at(&mut t, None, &source("a", 1), now).unwrap_err(),
            (ErrorKind::Unavailable, Some(FollowRefusal::Sealed))
        );
        assert!(!t.release(&id("a"), ObjectGeneration::new(2)));
        assert!(t.release(&id("a"), ObjectGeneration::new(1)));
        assert!(t.is_empty());
        t.seal(id("a"), ObjectGeneration::new(1), now);
        t.install(source("a", 1), target("a", 1), now);
        assert!(!t.release(&id("a"), ObjectGeneration::new(1)), "committed");
        assert!(decide_at(&mut t, None, &source("a", 1), now).is_ok());
        // A seal nobody ends is gone after its hold.
        t.seal(id("c"), ObjectGeneration::new(1), now);
        t.expire(now + Duration::from_millis(2_000));
        assert!(t.is_empty());
    }

    // spec: SB-5.10 (an expired follow → Unavailable, and its memory is freed)
    #[test]
    fn entries_expire_at_their_ttl_and_are_freed() {
        let now = Instant::now();
        let mut t = FollowTable::new(cfg(1_000, 8));
        t.install(source("a", 1), target("a", 1), now);
        t.install(
            source("b", 1),
            target("b", 1),
            now + Duration::from_millis(500),
        );
        let just_before = now + Duration::from_millis(999);
        assert!(decide_at(&mut t, None, &source("a", 1), just_before).is_ok());
        let at = now + Duration::from_millis(1_000);
        assert_eq!(
            decide_at(&mut t, None, &source("a", 1), at).unwrap_err(),
            (ErrorKind::Unavailable, Some(FollowRefusal::Expired))
        );
        assert_eq!(t.len(), 1, "a's entry freed, b's still held");
        assert_eq!(
            decide_at(&mut t, None, &source("a", 1), at).unwrap_err().1,
            Some(FollowRefusal::NoRoute)
        );
        assert_eq!(t.expire(now + Duration::from_millis(1_500)), 1);
        assert!(t.is_empty());
        assert!(t.order.is_empty());
        let c = t.counters();
        assert_eq!((c.installed, c.expired, c.entries), (2, 2, 0));
    }

    // The table holds at most `capacity` entries whatever is installed; a re-install replaces.
    #[test]
    fn the_table_is_bounded() {
        let now = Instant::now();
        let mut t = FollowTable::new(cfg(60_000, 4));
        for i in 0..100 {
            t.install(
                source(&format!("a{i}"), 1),
                target(&format!("a{i}"), 1),
                now,
            );
            t.install(
                source(&format!("a{i}"), 1),
                target(&format!("a{i}"), 1),
                now,
            );
            assert!(t.len() <= 4);
            assert_eq!(t.order.len(), t.len());
        }
        assert_eq!(t.counters().evicted, 96);
        // The newest are kept.
        assert!(decide_at(&mut t, None, &source("a99", 1), now).is_ok());
        assert!(decide_at(&mut t, None, &source("a0", 1), now).is_err());
    }

    #[test]
    fn a_zero_ttl_follows_nothing() {
        let now = Instant::now();
        let mut t = FollowTable::new(cfg(0, 4));
        t.seal(id("a"), ObjectGeneration::new(1), now);
        t.install(source("a", 1), target("a", 1), now);
        assert!(t.is_empty());
        assert_eq!(
            decide_at(&mut t, None, &source("a", 1), now).unwrap_err().1,
            Some(FollowRefusal::NoRoute)
        );
    }
}
