//! The node's relocation drivers (issue 27, SB-8.9's order): the public API (`Node::relocate`,
//! the operator's `RELOCATE`, `ctl relocations`' summaries and counters) and the relocation table
//! the drivers share. The drivers are thin loops around the sans-IO cores of
//! [`crate::relocation`] — [`SourceHandoff`] on the actor's owner (the source, which
//! coordinates; `source.rs`) and [`TargetHandoff`] on the node it moves to (`target.rs`); the
//! moved-in incarnation's opening and its source's relay window are `moved_in.rs`. Each feeds
//! the core's `handle_*` with store answers, mesh replies and the node's clock, and performs its
//! effects. The source runs one relocation over a set of incarnations (`Node::run_source`): one
//! actor for [`Node::relocate`], every member of a Spot for [`Node::relocate_spot`]
//! (`relocate_spot.rs`).
//!
//! The hand-off records travel as 144 Requests with the node keys
//! [`protocol::PEER_RELOCATE_RESTORE`], [`protocol::PEER_RELOCATE_WORK`],
//! [`protocol::PEER_RELOCATE_CUTOVER`] (source → target) and [`protocol::PEER_RELOCATE_RESULT`]
//! (target → source); bodies in [`crate::relocation::records`]. A captured request is relayed as
//! one WORK request whose reply the source forwards to the original requester (its correlation
//! and reply route stay on the source; the deadline travels as the 144's deadline), so every
//! accepted request is answered exactly once: by the target's turn, or by the relay's failure.
//!
//! What each side holds for a relocation (freed when it ends, counted by
//! [`Node::relocations_in_progress`]): the source an entry with its input channel; the target an
//! entry with the temporary queue of each moving actor and the rehydrated instance.

mod moved_in;
mod source;
mod target;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use zlink_mesh::ReplyHandle;
use zlink_wire::{
    ActorId, DispatchKey, ErrorKind, NodeRid, Record, RelocationId, SealOutcome,
    SessionRelocationRoute,
};

use super::{Node, lock, protocol};
use crate::actor::exec::{Mailbox, RtSpot, Work};
use crate::actor::{ActorRef, MigrationError, SpotSpec};
use crate::relocation::records::{self, HandoffRefusal, ResultRecord};
use crate::relocation::{AbortReason, FailReason, SourcePhaseName, Subject};
use crate::session::RegisteredBinding;
use crate::store::StoreError;

/// Finished relocations remembered for `ctl relocations` (oldest forgotten first).
const HISTORY: usize = 64;
/// Inputs one relocation's driver may have waiting (each kind arrives once; more are refused).
const INPUTS: usize = 16;

/// What [`Node::relocate`] reports for a relocation that moved the actor.
#[derive(Clone, Debug)]
pub struct RelocationReport {
    /// The relocation's id.
    pub relocation: RelocationId,
    /// The actor's ref at its new owner (same ActorId and ObjectGeneration).
    pub actor: ActorRef,
    /// The node it left.
    pub from: NodeRid,
    /// The node that owns it now.
    pub to: NodeRid,
    /// Records captured on the source and relayed to the target (in arrival order).
    pub relayed: u64,
    /// Each phase of the source with the time spent in it.
    pub phases: Vec<(SourcePhaseName, Duration)>,
    /// From start to the target's result (on the node's clock).
    pub duration: Duration,
}

/// Why [`Node::relocate`] did not move the actor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelocateError {
    /// The actor's current incarnation is not owned by this node (relocate from its owner).
    #[error("actor {0} is not owned by this node")]
    NotOwner(ActorId),
    /// The target is this node.
    #[error("the target is this node")]
    SameNode,
    /// The actor's type cannot move (not opted in to migration, not stateless).
    #[error(transparent)]
    NotMigratable(#[from] MigrationError),
    /// A relocation of this actor is in progress.
    #[error("actor {0} is relocating already")]
    InProgress(ActorId),
    /// No Spot of this name is hosted by this node (relocate a Spot from the node hosting it).
    #[error("spot {0:?} is not hosted by this node")]
    UnknownSpot(String),
    /// The Spot's kind does not move as a unit: only a SpotWide User or an Instance Spot does
    /// (its one gate is what the relocation seals); move its actors one at a time instead.
    #[error("spot {spot:?} is {kind:?}: only a SpotWide User or Instance Spot moves as a unit")]
    SpotNotMovable {
        /// The Spot.
        spot: String,
        /// Its kind.
        kind: crate::actor::SpotKind,
    },
    /// An actor of the Spot is still activating or moving in from another node (or its
    /// member count is not settled): the Spot cannot move now; try again.
    #[error("spot {0:?} has an activation in progress")]
    SpotBusy(String),
    /// The actor is still activating here (its factory runs or its `Ready` is not committed
    /// yet): it cannot move before it is Ready; try again (`Unavailable`).
    #[error("actor {0} is still activating: relocate it once it is Ready")]
    NotReady(ActorId),
    /// The relocation was aborted; the source still owns and serves the actor (SB-8.5).
    #[error("relocation aborted, the actor stays here: {0:?}")]
    Aborted(AbortReason),
    /// The relocation failed after the hand-off began; the source does not serve the actor any
    /// more (SB-8.6) and the store names whoever does.
    #[error("relocation failed: {0:?}")]
    Failed(FailReason),
    /// The node is shutting down.
    #[error("node shutting down")]
    ShuttingDown,
    /// The Location Store could not be read.
    #[error("location store: {0}")]
    Store(#[from] StoreError),
}

impl RelocateError {
    /// The public kind (for the operator operation's ErrorReply).
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            RelocateError::NotOwner(_) | RelocateError::UnknownSpot(_) => ErrorKind::NotFound,
            RelocateError::NotMigratable(e) => e.kind(),
            RelocateError::Store(_)
            | RelocateError::ShuttingDown
            | RelocateError::Failed(_)
            | RelocateError::SpotBusy(_)
            | RelocateError::NotReady(_) => ErrorKind::Unavailable,
            _ => ErrorKind::InvalidOperation,
        }
    }
}

/// One relocation as `ctl relocations` shows it (in progress or finished).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocationSummary {
    /// The relocation's id.
    pub relocation: u64,
    /// The moving actor.
    pub actor: String,
    /// `source` or `target`: this node's part.
    pub role: String,
    /// The other node.
    pub peer: String,
    /// The current (or last) phase.
    pub phase: String,
    /// Each phase left, with its duration in milliseconds.
    pub phases: Vec<(String, u64)>,
    /// `moved`, `aborted: …`, `failed: …`, `committed`, `refused: …`; `None` while running.
    pub outcome: Option<String>,
}

/// Relocation counters (metrics, `ctl relocations`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocationCounters {
    /// Relocations this node started as the source.
    pub started: u64,
    /// Relocations that moved the actor (source side).
    pub committed: u64,
    /// Relocations aborted with the source serving again.
    pub aborted: u64,
    /// Relocations that failed after the hand-off began.
    pub failed: u64,
    /// Relocations this node took part in as the target.
    pub target: u64,
    /// Hand-off records refused: malformed.
    pub refused_malformed: u64,
    /// Hand-off records refused: no such relocation here.
    pub refused_unknown_relocation: u64,
    /// Hand-off records refused: from a node that is not the relocation's peer.
    pub refused_wrong_peer: u64,
    /// Hand-off records refused: an actor that is not part of the relocation.
    pub refused_unknown_actor: u64,
    /// Target: no cutover within the cutover timeout of relay-ready — `cutover_timeout`
    /// Warning and the fallback (SB-8.9).
    #[serde(default)]
    pub cutover_timeouts: u64,
    /// Target: after a fallback, the source neither sent its cutover nor was seen gone within
    /// the source wait — `source_wait_expired` Warning; regular ingress went in.
    #[serde(default)]
    pub source_waits_expired: u64,
    /// Target: records the source relayed after the wait for its relay stream ended without its
    /// cutover (expired, or the source seen gone), before its late cutover: appended behind
    /// the regular ingress that went in meanwhile (the one case that can reorder a session's
    /// relays to a moved actor).
    #[serde(default)]
    pub relayed_after_source_wait: u64,
    /// Sum of the committed relocations' durations, in microseconds (with `committed`: the
    /// histogram's sum and count).
    pub duration_us_sum: u64,
    /// Restores refused as a target: an actor named more timers than
    /// [`crate::relocation::RelocationConfig::max_restore_timers`].
    #[serde(default)]
    pub refused_too_many_timers: u64,
    /// Actors that a relocation failed past relay-ready (SB-8.6) and that this node, their
    /// source, activated again with the state dehydrated for the move (a new incarnation).
    #[serde(default)]
    pub recovered: u64,
    /// Recovery attempts repeated because the store was out of reach (SB-8.6; each waits a
    /// backoff on the node's clock).
    #[serde(default)]
    pub recovery_retries: u64,
    /// Actors a failed relocation left that this node did not activate again: the record moved
    /// on (the target's CAS won, or another incarnation), this node could no longer own, or
    /// the state did not rehydrate.
    #[serde(default)]
    pub unrecovered: u64,
    /// Source: no result from the target within the result timeout of the cutover — the
    /// store's records decided (`result_wait_expired` Warning).
    #[serde(default)]
    pub result_waits_expired: u64,
    /// Target: owner CASes whose answer was lost (the store timed out or the connection
    /// dropped; `cas_answer_lost` Warning): the record read back decided.
    #[serde(default)]
    pub cas_answers_lost: u64,
}

enum SourceInput {
    RelayReady,
    TargetFailed,
    Sealed(zlink_wire::SealIdentity, SealOutcome),
    Result(ResultRecord),
}

enum TargetInput {
    Cutover,
}

struct SourceEntry {
    /// The moving actors.
    actors: Vec<ActorId>,
    /// The subject as `ctl relocations` shows it (the actor, or `spot NAME`).
    label: String,
    target: NodeRid,
    tx: mpsc::Sender<SourceInput>,
    phase: SourcePhaseName,
}

struct TargetEntry {
    source: NodeRid,
    tx: mpsc::Sender<TargetInput>,
    /// The temporary queue of each moving actor (collecting, never dispatching).
    queues: HashMap<ActorId, VecDeque<Work>>,
    /// Records and payload bytes in `queues` (bounded by `RelocationConfig::target_queue_records`
    /// and `target_queue_bytes`).
    queued: (usize, usize),
    /// After a fallback: the committed actors whose source relay stream is open — their queue
    /// goes into the lane as it fills, their regular ingress waits behind the barrier.
    streaming: Vec<ActorId>,
    /// Woken when a relayed record went into a streaming actor's queue: the driver moves it
    /// into the lane.
    relayed: std::sync::Arc<tokio::sync::Notify>,
    phase: &'static str,
}

#[derive(Default)]
struct Table {
    next: u64,
    sources: HashMap<RelocationId, SourceEntry>,
    targets: HashMap<RelocationId, TargetEntry>,
    /// Relocations whose wait for the source's relay stream ended without its cutover, until
    /// that cutover or the Message Follow time: what the source relays meanwhile is appended
    /// behind (counted `relayed_after_source_wait`).
    late_streams: HashMap<RelocationId, Vec<ActorId>>,
    history: VecDeque<RelocationSummary>,
    counters: RelocationCounters,
}

/// Bucket bounds of the relocation duration histogram, in seconds (1 ms .. 10 s).
const DURATION_BUCKETS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 10.0];

/// The node's relocations in progress, the last finished ones and the counters.
pub(super) struct Relocations {
    /// Through the `sync` shim ([`Relocations::table`]); never held across an `.await`.
    table: crate::sync::Mutex<Table>,
    /// One per [`RelocationStep`], read where the step begins; written only by
    /// [`Node::hold_relocation_step_for_tests`].
    holds: [std::sync::Arc<tokio::sync::RwLock<()>>; RelocationStep::ALL.len()],
    /// Durations of the committed relocations this node coordinated (metrics endpoint).
    durations: prometheus_client::metrics::histogram::Histogram,
}

impl Default for Relocations {
    fn default() -> Self {
        Self {
            table: crate::sync::Mutex::new(Table::default()),
            holds: Default::default(),
            durations: prometheus_client::metrics::histogram::Histogram::new(DURATION_BUCKETS),
        }
    }
}

/// **For tests only.** A step of a relocation that a test can hold
/// ([`Node::hold_relocation_step_for_tests`]): fault injection at a named point, so a process
/// test can kill a node exactly there. Free unless held.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelocationStep {
    /// The source, after relay-ready, before its capture.
    Capture,
    /// The source, after it relayed what it captured, before it sends its cutover.
    Cutover,
    /// Each 44 this node sends (commit or abort): held back (the relocation goes on without
    /// it, as when it is lost on the way).
    Route,
}

impl RelocationStep {
    /// Every step.
    pub const ALL: [RelocationStep; 3] = [
        RelocationStep::Capture,
        RelocationStep::Cutover,
        RelocationStep::Route,
    ];

    /// Its name (as `zlink-node`'s test hold names it).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RelocationStep::Capture => "capture",
            RelocationStep::Cutover => "cutover",
            RelocationStep::Route => "route",
        }
    }

    fn index(self) -> usize {
        match self {
            RelocationStep::Capture => 0,
            RelocationStep::Cutover => 1,
            RelocationStep::Route => 2,
        }
    }
}

impl Relocations {
    /// Whether a test holds `step` now.
    fn held(&self, step: RelocationStep) -> bool {
        self.holds[step.index()].try_read().is_err()
    }

    /// Waits while a test holds `step` (at once when it is free, the only case outside
    /// tests); says so in the log when it waits, so a process test sees the step reached.
    pub(super) async fn pass(&self, step: RelocationStep) {
        if !self.held(step) {
            return;
        }
        tracing::warn!(step = step.as_str(), "relocation step held by a test");
        let lock = self.holds[step.index()].clone();
        drop(lock.read().await);
    }

    /// The relocation table, locked (a poisoned lock is taken over: the table stays consistent
    /// between its own calls).
    fn table(&self) -> crate::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The input channel of the source driver of `relocation` (`None` once it ended).
    fn source_tx(&self, relocation: RelocationId) -> Option<mpsc::Sender<SourceInput>> {
        self.table().sources.get(&relocation).map(|s| s.tx.clone())
    }

    fn refuse(&self, why: HandoffRefusal) -> HandoffRefusal {
        let mut t = self.table();
        let c = &mut t.counters;
        match why {
            HandoffRefusal::Malformed => c.refused_malformed += 1,
            HandoffRefusal::UnknownRelocation => c.refused_unknown_relocation += 1,
            HandoffRefusal::WrongPeer => c.refused_wrong_peer += 1,
            _ => c.refused_unknown_actor += 1,
        }
        tracing::warn!(reason = why.label(), "relocation hand-off record refused");
        why
    }

    fn finish(&self, summary: RelocationSummary) {
        let mut t = self.table();
        if t.history.len() == HISTORY {
            t.history.pop_front();
        }
        t.history.push_back(summary);
    }
}

pub(super) fn phase_list<P: std::fmt::Debug>(phases: &[(P, Duration)]) -> Vec<(String, u64)> {
    phases
        .iter()
        .map(|(p, d)| (format!("{p:?}"), d.as_millis() as u64))
        .collect()
}

fn reply_refusal(reply: ReplyHandle, why: HandoffRefusal) {
    reply.error(ErrorKind::InvalidOperation, why.to_string());
}

async fn sleep_until(clock: &dyn crate::clock::Clock, at: Option<Instant>) {
    match at {
        Some(t) => clock.sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// What the source needs of a moving incarnation.
pub(super) struct Moving {
    pub(super) actor_ref: ActorRef,
    /// Its bound session (sealed before the hand-off, taken over by the target).
    pub(super) binding: Option<RegisteredBinding>,
    pub(super) mailbox: Mailbox,
    pub(super) spot: SpotSpec,
    pub(super) rt_spot: RtSpot,
    /// Its timers, started again on the target.
    pub(super) timers: Vec<records::TimerRecord>,
}

/// A relocation the source finished with the actors moved (both public reports are made of it).
pub(super) struct Moved {
    pub(super) relocation: RelocationId,
    /// The moved actors' refs at their new owner, in the order they were given.
    pub(super) actors: Vec<ActorRef>,
    pub(super) relayed: u64,
    pub(super) phases: Vec<(SourcePhaseName, Duration)>,
    pub(super) duration: Duration,
}

impl Node {
    /// Relocates `actor` (owned by this node) to the node `to` (SB-8.9's order): relocation fence
    /// in the store → seal the actor alone and dehydrate it after its last turn here → Restore
    /// on the target (temporary queue, rehydrated, no dispatch) → relay-ready → capture its
    /// queued work in arrival order, hold new ingress, relay both → cutover → the target's
    /// `cas_owner` with the relocation fence → the target opens dispatch; this node ends its
    /// incarnation and forwards what it held meanwhile. ActorId and ObjectGeneration are kept;
    /// every request this node accepted is answered exactly once (the target's reply travels
    /// back through this node to the original requester).
    ///
    /// A failure before the target's relay-ready is accepted aborts durably and the actor runs
    /// here again with nothing lost (SB-8.5); after it, this node never serves the actor again
    /// (SB-8.6). A whole Spot moves with [`Node::relocate_spot`].
    ///
    /// # Errors
    /// [`RelocateError`]; `Aborted` means the actor is still here. `NotReady` while it is still
    /// activating here; `InProgress` while it moves already, alone or with its Spot (a Spot
    /// relocation refuses a member moving alone the same way, naming it).
    pub async fn relocate(
        &self,
        actor: &ActorRef,
        to: NodeRid,
    ) -> Result<RelocationReport, RelocateError> {
        if self.check_accepting().is_err() {
            return Err(RelocateError::ShuttingDown);
        }
        if self.is_local(&to) {
            return Err(RelocateError::SameNode);
        }
        let id = actor.id().clone();
        let ty = self
            .inner
            .registry
            .get(actor.actor_type())
            .ok_or_else(|| RelocateError::NotOwner(id.clone()))?;
        ty.relocatable()?;
        let moving = self.moving(actor)?;
        let m = self
            .run_source(Subject::Actor, id.to_string(), vec![moving], to.clone())
            .await?;
        Ok(RelocationReport {
            relocation: m.relocation,
            actor: m.actors.into_iter().next().ok_or(RelocateError::Failed(
                FailReason::TargetFailedAfterRelayReady,
            ))?,
            from: self.node_rid().clone(),
            to,
            relayed: m.relayed,
            phases: m.phases,
            duration: m.duration,
        })
    }

    /// The operator's `RELOCATE` (client protocol): the actor must be owned by this node.
    pub(super) async fn relocate_op(
        &self,
        req: &protocol::RelocateActor,
    ) -> Result<protocol::RelocationDone, (ErrorKind, String)> {
        let bad = |e: String| (ErrorKind::InvalidOperation, e);
        let id = ActorId::new(&req.actor_id).map_err(|e| bad(format!("actor id: {e}")))?;
        let to = NodeRid::new(&req.to).map_err(|e| bad(format!("node: {e}")))?;
        let actor = lock(&self.inner.actors)
            .live
            .get(&id)
            .map(|a| a.actor_ref.clone());
        let actor = match actor {
            Some(a) => a,
            None if self.activating(&id) => {
                let e = RelocateError::NotReady(id);
                return Err((e.kind(), e.to_string()));
            }
            None => {
                return Err((
                    ErrorKind::NotFound,
                    format!("actor {id} is not owned by this node"),
                ));
            }
        };
        let r = self
            .relocate(&actor, to)
            .await
            .map_err(|e| (e.kind(), e.to_string()))?;
        Ok(protocol::RelocationDone {
            relocation: r.relocation.get(),
            actor: r.actor,
            from: r.from.to_string(),
            to: r.to.to_string(),
            relayed: r.relayed,
            duration_ms: r.duration.as_millis() as u64,
            phases: phase_list(&r.phases),
        })
    }

    /// Whether an activation of `actor` runs on this node (its local activator holds the id).
    fn activating(&self, actor: &ActorId) -> bool {
        lock(&self.inner.activations).contains_key(actor)
    }

    /// Whether a relocation this node runs as the source moves `actor` (alone or with its Spot).
    pub(super) fn relocating(&self, actor: &ActorId) -> bool {
        self.inner
            .relocations
            .table()
            .sources
            .values()
            .any(|s| s.actors.contains(actor))
    }

    /// The moving incarnation: local and Ready, not moving already (alone or with its Spot).
    fn moving(&self, actor: &ActorRef) -> Result<Moving, RelocateError> {
        let id = actor.id();
        let (actor_ref, mailbox, spot, binding, timers) = {
            let actors = lock(&self.inner.actors);
            let Some(a) = actors
                .live
                .get(id)
                .filter(|a| a.actor_ref.object_generation() == actor.object_generation())
            else {
                drop(actors);
                return Err(if self.activating(id) {
                    RelocateError::NotReady(id.clone())
                } else {
                    RelocateError::NotOwner(id.clone())
                });
            };
            if a.held.is_some() {
                // The barrier is closed: by a relocation of its own or its Spot's, or by its
                // activation (Ready not committed yet).
                drop(actors);
                return Err(if self.relocating(id) {
                    RelocateError::InProgress(id.clone())
                } else {
                    RelocateError::NotReady(id.clone())
                });
            }
            (
                a.actor_ref.clone(),
                a.mailbox.clone(),
                a.spot.clone(),
                a.binding.current().cloned(),
                a.timers.iter().map(|t| t.spec.clone()).collect(),
            )
        };
        let spots = lock(&self.inner.spots);
        let s = spots
            .get(&spot)
            .ok_or_else(|| RelocateError::NotOwner(id.clone()))?;
        if s.relocating {
            // its Spot moves as a unit now: the Spot's relocation has it
            return Err(RelocateError::InProgress(id.clone()));
        }
        Ok(Moving {
            actor_ref,
            binding,
            mailbox,
            spot: SpotSpec {
                name: spot,
                kind: s.kind,
            },
            rt_spot: s.spot.clone(),
            timers,
        })
    }

    /// **For tests only.** Makes every relocation this node coordinates wait before its
    /// capture (after relay-ready) until the returned guard is dropped: a source that is only
    /// slow, so a test can drive the target's cutover timeout on an injected clock.
    ///
    /// # Panics
    /// When a hold is taken already.
    #[cfg(feature = "testing")]
    #[must_use]
    pub fn hold_relocation_capture_for_tests(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.hold_relocation_step_for_tests(RelocationStep::Capture)
    }

    /// **For tests only.** Holds `step` of every relocation this node takes part in until the
    /// returned guard is dropped (see [`RelocationStep`]): the fault points of the process
    /// tests (`zlink-node` takes them from `ZLINK_TEST_HOLD_RELOCATION` in a debug build only).
    ///
    /// # Panics
    /// When that step is held already.
    #[doc(hidden)]
    #[must_use]
    pub fn hold_relocation_step_for_tests(
        &self,
        step: RelocationStep,
    ) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.inner.relocations.holds[step.index()]
            .clone()
            .try_write_owned()
            .expect("one hold of a step at a time")
    }

    /// Starts the timers an incarnation brought with it (moved in here, or recovered here from
    /// its relocation's state), once: behind the work it brought, so a tick never overtakes it.
    /// Nothing when `actor_ref`'s incarnation is not live here or has timers already.
    fn start_carried_timers(&self, actor_ref: &ActorRef, timers: &[records::TimerRecord]) {
        let mut actors = lock(&self.inner.actors);
        if let Some(local) = actors
            .live
            .get_mut(actor_ref.id())
            .filter(|a| a.is_incarnation(actor_ref) && a.timers.is_empty())
        {
            for t in timers {
                if let Err(e) = self.start_local_timer(local, t.clone()) {
                    tracing::warn!(error = %e, actor = %actor_ref, "a carried timer not started");
                }
            }
        }
    }

    /// Sends the hand-off record `record` to `to` as a 144 Request with the node key `key`, in
    /// a task of its own; a missing acknowledgement is logged (`what`), nothing else (the
    /// cutover and the target's result are sent once, SB-8.4).
    fn send_handoff<T: Serialize>(
        &self,
        to: NodeRid,
        key: DispatchKey,
        record: &T,
        what: &'static str,
    ) {
        let Ok(body) = records::encode(record) else {
            return;
        };
        let node = self.clone();
        let timeout = self.inner.request_timeout;
        tokio::spawn(async move {
            if let Err(e) = node
                .inner
                .mesh
                .request(&to, key, Bytes::from(body), timeout)
                .await
            {
                tracing::info!(error = %e, "{what} not acknowledged");
            }
        });
    }

    /// The histogram of committed relocation durations (metrics endpoint).
    pub(super) fn relocation_durations(&self) -> &prometheus_client::metrics::histogram::Histogram {
        &self.inner.relocations.durations
    }

    /// Sends a 44 to the session owner `to`; to a session of this node it takes a direct call
    /// (the same checks as from a peer). One that a test holds back
    /// ([`RelocationStep::Route`]) leaves once the hold ends; the relocation goes on.
    async fn send_route(&self, to: &NodeRid, record: SessionRelocationRoute) {
        if self.inner.relocations.held(RelocationStep::Route) {
            let (node, to) = (self.clone(), to.clone());
            tokio::spawn(async move {
                node.inner.relocations.pass(RelocationStep::Route).await;
                node.send_route_now(&to, record).await;
            });
            return;
        }
        self.send_route_now(to, record).await;
    }

    async fn send_route_now(&self, to: &NodeRid, record: SessionRelocationRoute) {
        if to == self.node_rid() {
            self.sessions().handle_route(&record);
        } else if let Err(e) = self
            .inner
            .mesh
            .send_record(to, Record::SessionRelocationRoute(record), None)
            .await
        {
            tracing::warn!(error = %e, "44 not sent");
        }
    }

    /// Relocations this node takes part in now (as source or target): each holds an entry
    /// until it ends.
    #[must_use]
    pub fn relocations_in_progress(&self) -> usize {
        let t = self.inner.relocations.table();
        t.sources.len() + t.targets.len()
    }

    /// The relocations in progress and the last finished ones (oldest first), and the counters.
    #[must_use]
    pub fn relocations(&self) -> (Vec<RelocationSummary>, RelocationCounters) {
        let t = self.inner.relocations.table();
        let mut out: Vec<RelocationSummary> = t.history.iter().cloned().collect();
        for (id, s) in &t.sources {
            out.push(RelocationSummary {
                relocation: id.get(),
                actor: s.label.clone(),
                role: "source".into(),
                peer: s.target.to_string(),
                phase: format!("{:?}", s.phase),
                phases: Vec::new(),
                outcome: None,
            });
        }
        for (id, s) in &t.targets {
            out.push(RelocationSummary {
                relocation: id.get(),
                actor: s
                    .queues
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                role: "target".into(),
                peer: s.source.to_string(),
                phase: s.phase.into(),
                phases: Vec::new(),
                outcome: None,
            });
        }
        (out, t.counters)
    }
}
