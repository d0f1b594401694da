//! Live relocation, actor-owner side (SB-8, SB-8.9's order; issue 27): the hand-off of one actor,
//! or of a whole Spot, from its owner node (the *source*, which also coordinates) to another node
//! (the *target*), while the bound clients stay connected.
//!
//! Two sans-IO cores, no clock, no IO, no store: time enters as `now`, inputs are `handle_*`,
//! outputs are effects taken with `poll_effect` (in order) and a timer read with `poll_timeout`.
//! A thin driver on each node turns effects into store calls, wire records (42 / 44 and the
//! hand-off records), runtime seals and queue moves, and feeds the results back.
//!
//! - [`SourceHandoff`] (source = coordinator): relocation fence in the store → seal every bound
//!   session (42, answered by 43) → seal the moving runtime unit and dehydrate after its last turn
//!   → Restore on the target → relay-ready accepted → capture queued work in arrival order, hold
//!   ingress, relay it → cutover → wait for the target's result.
//! - [`TargetHandoff`]: install a temporary queue and rehydrate, without dispatching → relay-ready
//!   → take relayed work → cutover (or, [`RelocationConfig::cutover_timeout`] after relay-ready, a
//!   `cutover_timeout` Warning and the fallback) → `cas_owner` with the source's relocation fence
//!   → merge queues, switch the route, open dispatch → 44 commit to each sealed session.
//!
//! Failures: a target that fails (explicitly, or silently past
//! [`RelocationConfig::restore_timeout`]) before its relay-ready is accepted → the source makes a
//! **durable abort** (the store's relocation fence is retired, so a late `cas_owner` of the target
//! can never succeed), restores its queue first (unseal), then sends 44 abort to each sealed
//! session (SB-8.5). After relay-ready is accepted the source never reopens: a failed CAS or
//! cutover ends in [`SourceOutcome::Failed`] and the sessions' seal timeout cleans up (SB-8.6).
//!
//! What is durable (the store's relocation record): the relocation fence. The source moves its
//! actor record's version forward with `LocationStore::relocation_fence` (no owner change, the
//! ObjectGeneration and AuthorityOwnerGeneration stay, so the bound routes stay valid); the new
//! fence is the only one the target's `cas_owner` can succeed with. A durable abort moves it
//! forward once more. "No CAS happened" is therefore provable from the store: the record still
//! names the source.

pub mod follow;
pub mod records;
pub mod recovery;
mod source;
mod target;
pub mod tombstone;

use std::time::{Duration, Instant};

use zlink_wire::{ActorId, NodeRid, ObjectGeneration, SealIdentity};

pub use follow::{
    FenceUse, FollowConfig, FollowCounters, FollowLookup, FollowRefusal, FollowRoute, FollowTable,
};
pub use source::{
    AbortReason, FailReason, RESULT_QUERY_RETRY, SourceEffect, SourceHandoff, SourceOutcome,
    SourcePhaseName,
};
pub use target::{
    CAS_READ_BACK_RETRY, CAS_READ_BACK_WAIT, CutoverCause, RestoreRefusal, SourceWaitEnd,
    TargetEffect, TargetHandoff, TargetOutcome, TargetPhaseName,
};

use crate::store::AuthorityFence;

/// The phases a relocation core left, each with the time spent in it (for the relocation's span,
/// `ctl relocations` and the metrics).
#[derive(Debug)]
struct PhaseTimes<P> {
    since: Instant,
    left: Vec<(P, Duration)>,
}

impl<P> PhaseTimes<P> {
    fn new(now: Instant) -> Self {
        Self {
            since: now,
            left: Vec::new(),
        }
    }

    /// `phase` was left at `now` (the next one starts).
    fn leave(&mut self, phase: P, now: Instant) {
        self.left
            .push((phase, now.saturating_duration_since(self.since)));
        self.since = now;
    }

    fn left(&self) -> &[(P, Duration)] {
        &self.left
    }
}

/// Default SessionRelocationSealTimeout (SB-8.3): the coordinator waits at most this long for the
/// 43 results, as the session owner waits at most this long for the 44.
pub const DEFAULT_SEAL_TIMEOUT: Duration = crate::config::SESSION_RELOCATION_SEAL_TIMEOUT;
/// Cutover timeout of SB-8.9: the target proceeds this long after its relay-ready reply.
pub const DEFAULT_CUTOVER_TIMEOUT: Duration = crate::config::DEFAULT_RELOCATION_CUTOVER_TIMEOUT;
/// How long the source waits for the target's relay-ready before treating the target as failed.
pub const DEFAULT_RESTORE_TIMEOUT: Duration = Duration::from_millis(3_000);
/// After the cutover timeout's fallback, how long the target keeps the source's relay stream
/// open ahead of regular ingress when the source neither sends its cutover nor is known gone
/// (the mesh's default peer timeout: a source silent that long is seen down anyway).
pub const DEFAULT_SOURCE_WAIT: Duration = Duration::from_millis(3_000);
/// After the cutover, how long the source waits for the target's result before the store's
/// records decide (the cutover timeout plus two default request timeouts: the target's CAS and
/// its report).
pub const DEFAULT_RESULT_TIMEOUT: Duration = Duration::from_millis(11_000);
/// The most timers one moving actor's Restore may ask a target to start, by default.
pub const DEFAULT_MAX_RESTORE_TIMERS: usize = 1_024;
/// Records one relocation's temporary queues on the target hold at most, by default.
pub const DEFAULT_TARGET_QUEUE_RECORDS: usize = 65_536;
/// Payload bytes one relocation's temporary queues on the target hold at most, by default
/// (256 MiB).
pub const DEFAULT_TARGET_QUEUE_BYTES: usize = 256 << 20;

/// Timings of one relocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelocationConfig {
    /// SessionRelocationSealTimeout (SB-8.3, 3,000 ms by default).
    pub seal_timeout: Duration,
    /// The target's cutover timeout after its relay-ready reply (SB-8.9, 1,000 ms).
    pub cutover_timeout: Duration,
    /// The source's wait for relay-ready (a silent target is a failed target, SB-8.5).
    pub restore_timeout: Duration,
    /// After the cutover, the source's wait for the target's result (default 11,000 ms): a
    /// result lost with a connection a short partition broke, or a target gone, would
    /// otherwise hold the source forever. Past it the store's records decide: an actor the
    /// store names at the target moved, any other failed (SB-8.6).
    pub result_timeout: Duration,
    /// After the cutover timeout's fallback, the target's bounded wait for the source's relay
    /// stream (its cutover, or the source known gone), during which regular ingress of the
    /// moved actors waits behind the captured work.
    pub source_wait: Duration,
    /// The most timers the target starts for one moving actor of a Restore: a Restore naming
    /// more for an actor is refused before relay-ready (`TooManyTimers`,
    /// counted), so the source aborts and keeps serving (SB-8.5). The peer is authenticated,
    /// but what another party can make this node hold is bounded.
    pub max_restore_timers: usize,
    /// Records one relocation's temporary queues on the target hold at most before dispatch
    /// opens (default 65,536). What the source captures is bounded by its own limits (the
    /// lane, the activation barrier, the senders' windows); this bounds what the target keeps.
    /// Beyond it a relayed request is answered `LaneFull` and a relayed send refused.
    pub target_queue_records: usize,
    /// Payload bytes one relocation's temporary queues on the target hold at most (default
    /// 256 MiB); beyond it as for [`RelocationConfig::target_queue_records`].
    pub target_queue_bytes: usize,
}

impl Default for RelocationConfig {
    fn default() -> Self {
        Self {
            seal_timeout: DEFAULT_SEAL_TIMEOUT,
            cutover_timeout: DEFAULT_CUTOVER_TIMEOUT,
            restore_timeout: DEFAULT_RESTORE_TIMEOUT,
            result_timeout: DEFAULT_RESULT_TIMEOUT,
            source_wait: DEFAULT_SOURCE_WAIT,
            max_restore_timers: DEFAULT_MAX_RESTORE_TIMERS,
            target_queue_records: DEFAULT_TARGET_QUEUE_RECORDS,
            target_queue_bytes: DEFAULT_TARGET_QUEUE_BYTES,
        }
    }
}

/// What moves: one actor (only its records are held) or a whole Spot (the Spot is sealed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    /// One actor; its lane alone is sealed (the other actors of its Spot keep running).
    Actor,
    /// Every actor of the named Spot; the Spot's unit is sealed.
    Spot(String),
}

/// One binding to seal: the session owner that holds it and the seal identity (SB-8.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SealTarget {
    /// The session owner node (the 42 and the 44 go there).
    pub session_owner: NodeRid,
    /// The seal identity: relocation, session lifecycle, SessionRid, binding generation.
    pub seal: SealIdentity,
}

/// A moving actor as the source knows it when the relocation starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovingActor {
    /// The actor (kept, SB-1.3).
    pub actor: ActorId,
    /// Its incarnation (kept, SB-1.3).
    pub object_generation: ObjectGeneration,
    /// The store fence of its record now (the relocation fence is taken with it).
    pub current_fence: AuthorityFence,
    /// Its bound sessions (at most one current binding per incarnation today).
    pub bindings: Vec<SealTarget>,
}

/// The actor's state as it travels (the migration contract of the actor types).
pub use crate::actor::MigratedState;

/// One actor of a Restore request (source → target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoredActor {
    /// The actor.
    pub actor: ActorId,
    /// Its incarnation.
    pub object_generation: ObjectGeneration,
    /// The relocation fence the target's `cas_owner` presents.
    pub source_fence: AuthorityFence,
    /// The state to rehydrate before the first turn on the target.
    pub state: MigratedState,
    /// The seals whose sessions get the 44 commit from the target.
    pub seals: Vec<SealTarget>,
}

/// The Restore request: install a temporary queue per actor and rehydrate, do not dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreRequest {
    /// Relocation identity.
    pub relocation: zlink_wire::RelocationId,
    /// One actor or a whole Spot.
    pub subject: Subject,
    /// The moving actors.
    pub actors: Vec<RestoredActor>,
}

#[cfg(test)]
mod tests;
