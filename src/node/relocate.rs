//! The node's relocation drivers (issue 27, SB-8.9's order): thin loops around the sans-IO
//! cores of [`crate::relocation`] — [`SourceHandoff`] on the actor's owner (the source, which
//! coordinates) and [`TargetHandoff`] on the node it moves to. Each feeds the core's `handle_*`
//! with store answers, mesh replies and the node's clock, and performs its effects. The source
//! runs one relocation over a set of incarnations (`Node::run_source`): one actor for
//! [`Node::relocate`], every member of a Spot for [`Node::relocate_spot`] (`relocate_spot.rs`).
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

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;
use zlink_mesh::ReplyHandle;
use zlink_wire::{
    ActorId, Deadline, DispatchKey, ErrorKind, NodeRid, Record, RelocationId, Request, SealOutcome,
    SessionRelocationRoute,
};

use super::local::LocalActor;
use super::{Node, bound, calls::request_error, lock, protocol};
use crate::actor::exec::{self, EndReason, Mailbox, RtSpot, Work};
use crate::actor::fence::CallFence;
use crate::actor::{ActivationInfo, ActorCtx, ActorError, ActorRef, MigrationError, SpotSpec};
use crate::relocation::SealTarget;
use crate::relocation::records::{
    self, BindingRecord, CommittedActor, CutoverRecord, HandoffRefusal, Placement, RestoreRecord,
    ResultRecord, WorkRecord,
};
use crate::relocation::{
    AbortReason, FailReason, MovingActor, RestoreRefusal, SourceEffect, SourceHandoff,
    SourceOutcome, SourcePhaseName, Subject, TargetEffect, TargetHandoff, TargetOutcome,
};
use crate::session::{BindingSlot, RegisteredBinding};
use crate::store::{ActorLocation, ActorOwner, StoreError};

/// Finished relocations remembered for `ctl relocations` (oldest forgotten first).
const HISTORY: usize = 64;
/// Inputs one relocation's driver may have waiting (each kind arrives once; more are refused).
const INPUTS: usize = 16;
/// Records one relocation's temporary queues on the target hold at most, and their payload
/// bytes. What the source captures for an actor is bounded by its own limits (its lane, its
/// activation barrier, and its backlog: the senders' windows); these bound what the target
/// keeps for it before dispatch opens. Beyond them a relayed request is answered `LaneFull`
/// and a relayed send refused, counted (`sends_dropped`).
const TARGET_QUEUE_ITEMS: usize = 65_536;
const TARGET_QUEUE_BYTES: usize = 256 << 20;

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
    /// An actor of the Spot is still activating (or its member count is not settled): the
    /// Spot cannot move now; try again.
    #[error("spot {0:?} has an activation in progress")]
    SpotBusy(String),
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
            | RelocateError::SpotBusy(_) => ErrorKind::Unavailable,
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
    /// Sum of the committed relocations' durations, in microseconds (with `committed`: the
    /// histogram's sum and count).
    pub duration_us_sum: u64,
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
    /// Records and payload bytes in `queues` (bounded by [`TARGET_QUEUE_ITEMS`] and
    /// [`TARGET_QUEUE_BYTES`]).
    queued: (usize, usize),
    phase: &'static str,
}

#[derive(Default)]
struct Table {
    next: u64,
    sources: HashMap<RelocationId, SourceEntry>,
    targets: HashMap<RelocationId, TargetEntry>,
    history: VecDeque<RelocationSummary>,
    counters: RelocationCounters,
}

/// Bucket bounds of the relocation duration histogram, in seconds (1 ms .. 10 s).
const DURATION_BUCKETS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 10.0];

/// The node's relocations in progress, the last finished ones and the counters.
pub(super) struct Relocations {
    table: Mutex<Table>,
    /// Durations of the committed relocations this node coordinated (metrics endpoint).
    durations: prometheus_client::metrics::histogram::Histogram,
}

impl Default for Relocations {
    fn default() -> Self {
        Self {
            table: Mutex::default(),
            durations: prometheus_client::metrics::histogram::Histogram::new(DURATION_BUCKETS),
        }
    }
}

impl Relocations {
    fn refuse(&self, why: HandoffRefusal) -> HandoffRefusal {
        let mut t = lock(&self.table);
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
        let mut t = lock(&self.table);
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
    /// [`RelocateError`]; `Aborted` means the actor is still here.
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

    /// Runs the source's half of one relocation of `moving` (one actor, or every member of a
    /// Spot, per `subject`) to `to`: each incarnation must be the one the store names here.
    /// `label` names the subject in `ctl relocations`.
    pub(super) async fn run_source(
        &self,
        subject: Subject,
        label: String,
        moving: Vec<Moving>,
        to: NodeRid,
    ) -> Result<Moved, RelocateError> {
        let mut actors = Vec::with_capacity(moving.len());
        let mut owners = HashMap::with_capacity(moving.len());
        for m in &moving {
            let id = m.actor_ref.id().clone();
            let loc = self
                .inner
                .store
                .lookup(id.clone())
                .await?
                .filter(|l| {
                    l.owner_node == *self.node_rid()
                        && l.node_generation == self.generation()
                        && l.object_generation == m.actor_ref.object_generation()
                })
                .ok_or_else(|| RelocateError::NotOwner(id.clone()))?;
            actors.push(MovingActor {
                actor: id.clone(),
                object_generation: loc.object_generation,
                current_fence: loc.fence(),
                // SB-8.9: the bound session is sealed first (42 → 43 from its owner).
                bindings: Vec::new(),
            });
            owners.insert(id, loc.owner_fence());
        }
        let (tx, rx) = mpsc::channel(INPUTS);
        let relocation = {
            let mut t = lock(&self.inner.relocations.table);
            if let Some(busy) = actors
                .iter()
                .find(|a| t.sources.values().any(|s| s.actors.contains(&a.actor)))
            {
                return Err(RelocateError::InProgress(busy.actor.clone()));
            }
            t.next += 1;
            // Unique across the mesh's nodes: this process' generation and a counter.
            let rid = RelocationId::new((self.generation().get() << 20) ^ t.next);
            t.sources.insert(
                rid,
                SourceEntry {
                    actors: actors.iter().map(|a| a.actor.clone()).collect(),
                    label: label.clone(),
                    target: to.clone(),
                    tx,
                    phase: SourcePhaseName::Fencing,
                },
            );
            t.counters.started += 1;
            rid
        };
        for (a, m) in actors.iter_mut().zip(&moving) {
            a.bindings = m
                .binding
                .iter()
                .map(|b| SealTarget {
                    session_owner: b.session_owner.clone(),
                    seal: zlink_wire::SealIdentity {
                        relocation,
                        session_lifecycle: b.lifecycle,
                        session: b.session,
                        binding_generation: b.generation,
                    },
                })
                .collect();
        }
        let now = self.inner.clock.now();
        let core = SourceHandoff::start(
            relocation,
            subject.clone(),
            actors,
            to.clone(),
            self.inner.relocation,
            now,
        );
        let span = tracing::info_span!("relocation", id = relocation.get(), subject = %label, to = %to, role = "source");
        let run = SourceRun {
            node: self,
            core,
            rx,
            subject,
            label,
            moving,
            owners,
            target: to,
            relayed: 0,
            handed_off: None,
        };
        let out = run.drive().instrument(span).await;
        lock(&self.inner.relocations.table)
            .sources
            .remove(&relocation);
        out
    }

    /// The operator's `RELOCATE` (client protocol): the actor must be owned by this node.
    pub(super) async fn relocate_op(
        &self,
        req: &protocol::RelocateActor,
    ) -> Result<protocol::RelocationDone, (ErrorKind, String)> {
        let bad = |e: String| (ErrorKind::InvalidOperation, e);
        let id = ActorId::new(&req.actor_id).map_err(|e| bad(format!("actor id: {e}")))?;
        let to = NodeRid::new(&req.to).map_err(|e| bad(format!("node: {e}")))?;
        let actor = {
            let actors = lock(&self.inner.actors);
            actors
                .live
                .get(&id)
                .filter(|a| a.held.is_none())
                .map(|a| a.actor_ref.clone())
        }
        .ok_or_else(|| {
            (
                ErrorKind::NotFound,
                format!("actor {id} is not owned by this node"),
            )
        })?;
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

    /// The moving incarnation: local and Ready.
    fn moving(&self, actor: &ActorRef) -> Result<Moving, RelocateError> {
        let id = actor.id();
        let (actor_ref, mailbox, spot, binding, timers) = {
            let actors = lock(&self.inner.actors);
            let a = actors
                .live
                .get(id)
                .filter(|a| {
                    a.actor_ref.object_generation() == actor.object_generation() && a.held.is_none()
                })
                .ok_or_else(|| RelocateError::NotOwner(id.clone()))?;
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

    /// The histogram of committed relocation durations (metrics endpoint).
    pub(super) fn relocation_durations(&self) -> &prometheus_client::metrics::histogram::Histogram {
        &self.inner.relocations.durations
    }

    /// Sends a 44 to the session owner `to`; to a session of this node it takes a direct call
    /// (the same checks as from a peer).
    async fn send_route(&self, to: &NodeRid, record: SessionRelocationRoute) {
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
        let t = lock(&self.inner.relocations.table);
        t.sources.len() + t.targets.len()
    }

    /// The relocations in progress and the last finished ones (oldest first), and the counters.
    #[must_use]
    pub fn relocations(&self) -> (Vec<RelocationSummary>, RelocationCounters) {
        let t = lock(&self.inner.relocations.table);
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

    /// Relays one captured record to the target: waits until the WORK request is admitted to
    /// the target's send queue (so records leave in arrival order), then answers the original
    /// requester from the target's reply in a task of its own.
    async fn relay_work(&self, relocation: RelocationId, to: &NodeRid, actor: &ActorId, w: Work) {
        let mut w = w;
        let reply = w.reply.take();
        let guard = w.guard.take();
        let payload = std::mem::take(&mut w.payload);
        let timeout = match w.deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => self.inner.request_timeout,
        };
        if timeout.is_zero() {
            if let Some(r) = reply {
                r.complete(Err(ActorError::DeadlineExceeded));
            }
            return;
        }
        let body = match records::encode(&WorkRecord {
            relocation,
            actor: actor.clone(),
            key: w.key.get(),
            send: reply.is_none(),
            payload: payload.to_vec(),
        }) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                if let Some(r) = reply {
                    r.complete(Err(ActorError::Codec(e)));
                }
                return;
            }
        };
        let record = Record::Request(Request {
            key: protocol::PEER_RELOCATE_WORK,
            deadline: Deadline::from_remaining(timeout),
        });
        let (admitted_tx, admitted_rx) = oneshot::channel::<()>();
        let node = self.clone();
        let to = to.clone();
        tokio::spawn(async move {
            let r = node
                .inner
                .mesh
                .request_record_admitted(&to, record, Some(body), timeout, move || {
                    let _ = admitted_tx.send(());
                })
                .await;
            let out = r
                .map(|resp| resp.payload.unwrap_or_default())
                .map_err(|e| request_error(&to, e));
            match reply {
                Some(reply) => reply.complete(out),
                None => {
                    if let Err(e) = out {
                        node.count_send_dropped();
                        tracing::warn!(error = %e, "relayed send not delivered");
                    }
                }
            }
            drop(guard);
        });
        // Admitted, or failed before admission (the sender is dropped then).
        let _ = admitted_rx.await;
    }

    // ---- target side: the hand-off records' arms of the inbound loop ----

    /// A Restore from `sender`: starts the target's driver, which answers `reply` with
    /// relay-ready or the refusal.
    pub(super) fn on_relocate_restore(&self, sender: NodeRid, payload: &[u8], reply: ReplyHandle) {
        let rec: RestoreRecord = match records::decode(payload) {
            Ok(r) => r,
            Err(why) => return reply_refusal(reply, self.inner.relocations.refuse(why)),
        };
        let relocation = rec.relocation;
        let (tx, rx) = mpsc::channel(INPUTS);
        {
            let mut t = lock(&self.inner.relocations.table);
            if t.targets.contains_key(&relocation) {
                drop(t);
                return reply_refusal(
                    reply,
                    self.inner.relocations.refuse(HandoffRefusal::WrongPeer),
                );
            }
            t.targets.insert(
                relocation,
                TargetEntry {
                    source: sender.clone(),
                    tx,
                    queues: rec
                        .actors
                        .iter()
                        .map(|a| (a.actor.clone(), VecDeque::new()))
                        .collect(),
                    queued: (0, 0),
                    phase: "Installing",
                },
            );
            t.counters.target += 1;
        }
        let actors = rec
            .actors
            .iter()
            .map(|a| a.actor.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let (request, placement) = rec.into_request();
        let core = TargetHandoff::restore(
            sender.clone(),
            request,
            self.inner.relocation,
            self.inner.clock.now(),
        );
        let node = self.clone();
        let span = tracing::info_span!("relocation", id = relocation.get(), from = %sender, role = "target");
        tokio::spawn(
            async move {
                let run = TargetRun {
                    node: &node,
                    core,
                    rx,
                    source: sender.clone(),
                    placement,
                    restore_reply: Some(reply),
                    actors,
                    instances: HashMap::new(),
                    opened: Vec::new(),
                    opened_at: None,
                };
                let (opened, at) = run.drive().await;
                lock(&node.inner.relocations.table)
                    .targets
                    .remove(&relocation);
                node.end_moved_from(&sender, opened, at).await;
            }
            .instrument(span),
        );
    }

    /// A captured record from the source: into the moving actor's temporary queue (in arrival
    /// order, no dispatch), or — after the commit — into the moved actor's lane. Handled on the
    /// inbound loop without awaiting anything but the lane's admission, so order is kept.
    pub(super) async fn on_relocate_work(
        &self,
        sender: &NodeRid,
        payload: &[u8],
        deadline: Option<Instant>,
        reply: ReplyHandle,
    ) {
        let rec: WorkRecord = match records::decode(payload) {
            Ok(r) => r,
            Err(why) => return reply_refusal(reply, self.inner.relocations.refuse(why)),
        };
        let mut reply = Some(reply);
        let ack = if rec.send { reply.take() } else { None };
        let work = Work {
            key: DispatchKey::new(rec.key),
            payload: Bytes::from(rec.payload),
            reply: reply.map(exec::ReplyTo::Wire),
            deadline,
            guard: Some(self.inner.inflight.enter()),
        };
        let refused = |why, ack: Option<ReplyHandle>| {
            let why = self.inner.relocations.refuse(why);
            if let Some(a) = ack {
                reply_refusal(a, why);
            }
        };
        let mailbox = {
            let mut t = lock(&self.inner.relocations.table);
            match t.targets.get_mut(&rec.relocation) {
                Some(e) if e.source != *sender => {
                    drop(t);
                    drop(work);
                    return refused(HandoffRefusal::WrongPeer, ack);
                }
                Some(e) if e.queues.contains_key(&rec.actor) => {
                    let (items, bytes) = e.queued;
                    if items >= TARGET_QUEUE_ITEMS
                        || bytes.saturating_add(work.payload.len()) > TARGET_QUEUE_BYTES
                    {
                        drop(t);
                        let mut work = work;
                        if let Some(r) = work.reply.take() {
                            r.complete(Err(ActorError::LaneFull {
                                actor_id: rec.actor.clone(),
                            }));
                        }
                        if let Some(a) = ack {
                            a.error(ErrorKind::Unavailable, "relocation queue full");
                        }
                        return;
                    }
                    e.queued = (items + 1, bytes + work.payload.len());
                    e.queues
                        .get_mut(&rec.actor)
                        .expect("checked")
                        .push_back(work);
                    if let Some(a) = ack {
                        a.reply(Bytes::new());
                    }
                    return;
                }
                _ => {
                    drop(t);
                    // After the commit: the moved actor, from the node it came from.
                    let mut actors = lock(&self.inner.actors);
                    match actors
                        .live
                        .get_mut(&rec.actor)
                        .filter(|a| a.moved_from.as_ref() == Some(sender))
                    {
                        Some(a) => match a.held.as_mut() {
                            Some(held) => {
                                held.push_back(work);
                                None
                            }
                            None => Some((a.mailbox.clone(), work)),
                        },
                        None => {
                            drop(actors);
                            drop(work);
                            return refused(HandoffRefusal::UnknownRelocation, ack);
                        }
                    }
                }
            }
        };
        if let Some((mailbox, work)) = mailbox {
            if mailbox.submit(work).await.is_err() {
                self.count_send_dropped();
            }
        }
        if let Some(a) = ack {
            a.reply(Bytes::new());
        }
    }

    /// The source's cutover.
    pub(super) fn on_relocate_cutover(&self, sender: &NodeRid, payload: &[u8], reply: ReplyHandle) {
        let rec: CutoverRecord = match records::decode(payload) {
            Ok(r) => r,
            Err(why) => return reply_refusal(reply, self.inner.relocations.refuse(why)),
        };
        let tx = {
            let t = lock(&self.inner.relocations.table);
            match t.targets.get(&rec.relocation) {
                None => Err(HandoffRefusal::UnknownRelocation),
                Some(e) if e.source != *sender => Err(HandoffRefusal::WrongPeer),
                Some(e) => Ok(e.tx.clone()),
            }
        };
        match tx {
            Ok(tx) => {
                let _ = tx.try_send(TargetInput::Cutover);
                reply.reply(Bytes::new());
            }
            Err(why) => reply_refusal(reply, self.inner.relocations.refuse(why)),
        }
    }

    /// The target's result, on the source.
    pub(super) fn on_relocate_result(&self, sender: &NodeRid, payload: &[u8], reply: ReplyHandle) {
        let rec: ResultRecord = match records::decode(payload) {
            Ok(r) => r,
            Err(why) => return reply_refusal(reply, self.inner.relocations.refuse(why)),
        };
        let tx = {
            let t = lock(&self.inner.relocations.table);
            match t.sources.get(&rec.relocation) {
                None => Err(HandoffRefusal::UnknownRelocation),
                Some(e) if e.target != *sender => Err(HandoffRefusal::WrongPeer),
                Some(e) => Ok(e.tx.clone()),
            }
        };
        match tx {
            Ok(tx) => {
                let _ = tx.try_send(SourceInput::Result(rec));
                reply.reply(Bytes::new());
            }
            Err(why) => reply_refusal(reply, self.inner.relocations.refuse(why)),
        }
    }

    /// The moved-in incarnations `opened` (from `source`) take their source's relayed records
    /// (`LocalActor::moved_from`) for the Message Follow time after their commit, on the
    /// node's clock — the source relays what it held at the commit right after it, and what
    /// arrives at it later travels as Message Follow — then no more: a WORK record from
    /// `source` for them is refused from then on (counted `refused_unknown_relocation`). An
    /// incarnation that ended or moved on meanwhile is left alone.
    /// `at`: when dispatch opened (the commit here).
    async fn end_moved_from(&self, source: &NodeRid, opened: Vec<ActorRef>, at: Instant) {
        if opened.is_empty() {
            return;
        }
        let ttl = super::follow::table(self).config().ttl;
        self.inner.clock.sleep_until(at + ttl).await;
        let mut actors = lock(&self.inner.actors);
        for r in &opened {
            if let Some(a) = actors.live.get_mut(r.id()).filter(|a| {
                a.actor_ref.object_generation() == r.object_generation()
                    && a.moved_from.as_ref() == Some(source)
            }) {
                a.moved_from = None;
            }
        }
    }

    /// Moved-in incarnations here that still take relayed records from the node they came
    /// from (each until the Message Follow time after its commit).
    #[must_use]
    pub fn moved_in_open(&self) -> usize {
        lock(&self.inner.actors)
            .live
            .values()
            .filter(|a| a.moved_from.is_some())
            .count()
    }

    /// The moved-in actor: its lane on its Spot with the rehydrated instance, published with
    /// its temporary queue as the closed barrier, then the barrier opens (queued records first,
    /// in order; what arrives meanwhile behind them).
    async fn open_moved_in(
        &self,
        relocation: RelocationId,
        source: &NodeRid,
        location: &ActorLocation,
        placement: &Placement,
        instance: Box<dyn crate::actor::ActorInstance>,
    ) -> Result<(), ActorError> {
        let spot = &placement.spot;
        let rt_spot = self.join_spot(spot)?;
        let actor_ref = ActorRef::from_location(location);
        let ctx = ActorCtx::new(
            actor_ref.clone(),
            std::sync::Arc::new(bound::NodeActorHost(std::sync::Arc::downgrade(&self.inner))),
        );
        let factory: exec::Factory = Box::new(move || Ok(instance));
        let mailbox = match exec::spawn(
            location.actor_id.clone(),
            factory,
            ctx,
            &rt_spot,
            self.inner.exec.clone(),
        )
        .await
        {
            Ok(m) => m,
            Err(_) => {
                self.leave_spot(&spot.name);
                return Err(ActorError::Ended);
            }
        };
        {
            // Lock order: relocations, then actors (as the WORK arm).
            let mut t = lock(&self.inner.relocations.table);
            let queue = t
                .targets
                .get_mut(&relocation)
                .and_then(|e| e.queues.remove(&location.actor_id))
                .unwrap_or_default();
            let mut actors = lock(&self.inner.actors);
            actors.retired.remove(&location.actor_id);
            actors.live.insert(
                location.actor_id.clone(),
                LocalActor {
                    fence: CallFence::of_ref(&actor_ref),
                    actor_ref: actor_ref.clone(),
                    mailbox: mailbox.clone(),
                    spot: spot.name.clone(),
                    timers: Vec::new(),
                    held: Some(queue),
                    binding: moved_binding(placement.binding.as_ref()),
                    moved_from: Some(source.clone()),
                },
            );
        }
        self.open_barrier(&actor_ref, &mailbox).await?;
        // Its timers go on here, behind the work it brought (a tick never overtakes it).
        let mut actors = lock(&self.inner.actors);
        if let Some(local) = actors.live.get_mut(&location.actor_id).filter(|a| {
            a.actor_ref.object_generation() == location.object_generation && a.timers.is_empty()
        }) {
            for t in &placement.timers {
                if let Err(e) = self.start_local_timer(local, t.clone()) {
                    tracing::warn!(error = %e, "a moved actor's timer not started");
                }
            }
        }
        Ok(())
    }
}

/// The moved actor's binding slot on the target: the binding its session owner registered at
/// the source, so later 24s of that session pass this node's binding check and pushes / 51s
/// come from here (SB-8.9: the target is the actor owner of every existing binding).
fn moved_binding(b: Option<&BindingRecord>) -> BindingSlot {
    let mut slot = BindingSlot::default();
    if let Some(b) = b {
        let _ = slot.bind(RegisteredBinding {
            session_owner: b.session_owner.clone(),
            lifecycle: b.lifecycle,
            owner_id: b.owner_id,
            owner_lease: b.owner_lease,
            session: b.session,
            generation: b.generation,
        });
    }
    slot
}

/// Ends a sealed incarnation: its lane is marked ended, then unsealed so the lifecycle record
/// that removes it runs (nothing of it runs any more: later work is refused as ended).
fn retire_sealed(a: &mut LocalActor) {
    a.end(EndReason::Fenced);
    a.mailbox.unseal();
}

struct SourceRun<'a> {
    node: &'a Node,
    core: SourceHandoff,
    rx: mpsc::Receiver<SourceInput>,
    /// One actor (its lane is sealed) or a whole Spot (the Spot is sealed).
    subject: Subject,
    /// The subject for `ctl relocations` and the logs.
    label: String,
    /// The moving incarnations, in the core's order.
    moving: Vec<Moving>,
    /// Each moving actor's owner fence (the relocation fence is written with it).
    owners: HashMap<ActorId, crate::store::OwnerFence>,
    target: NodeRid,
    relayed: u64,
    /// When the cutover left (the wait for the target's result is bounded from here).
    handed_off: Option<Instant>,
}

impl SourceRun<'_> {
    async fn drive(mut self) -> Result<Moved, RelocateError> {
        let node = self.node;
        loop {
            while let Some(e) = self.core.poll_effect() {
                if let Some(done) = self.perform(e).await {
                    return done;
                }
            }
            self.set_phase(self.core.phase());
            let clock = node.inner.clock.clone();
            // The result's wait after the cutover is bounded: past it the store decides.
            let result_guard = self.handed_off.map(|t| {
                t + node.inner.relocation.cutover_timeout + 2 * node.inner.request_timeout
            });
            let at = self.core.poll_timeout().or(result_guard);
            tokio::select! {
                input = self.rx.recv() => {
                    let now = clock.now();
                    match input {
                        Some(SourceInput::RelayReady) => self.core.handle_relay_ready(now),
                        Some(SourceInput::TargetFailed) => self.core.handle_target_failed(now),
                        Some(SourceInput::Sealed(seal, outcome)) => {
                            self.core.handle_sealed(now, &seal, outcome);
                        }
                        Some(SourceInput::Result(r)) => {
                            let committed = r.committed.into_iter().map(ActorLocation::from).collect();
                            self.core.handle_target_result(now, committed, r.failed);
                        }
                        None => self.core.handle_target_failed(now),
                    }
                }
                () = sleep_until(&*clock, at) => {
                    let now = clock.now();
                    if self.core.poll_timeout().is_some() {
                        self.core.handle_timeout(now);
                    } else {
                        self.decide_from_store(now).await;
                    }
                }
            }
        }
    }

    /// No result from the target in time after the cutover: the store names the owner of each
    /// moving actor.
    async fn decide_from_store(&mut self, now: Instant) {
        let mut committed = Vec::new();
        let mut failed = Vec::new();
        for m in &self.moving {
            let id = m.actor_ref.id().clone();
            match self.node.inner.store.lookup(id.clone()).await {
                Ok(Some(l))
                    if l.owner_node == self.target
                        && l.object_generation == m.actor_ref.object_generation() =>
                {
                    committed.push(l);
                }
                _ => failed.push(id),
            }
        }
        if committed.is_empty() {
            self.core.handle_target_failed(now);
        } else {
            self.core.handle_target_result(now, committed, failed);
        }
    }

    /// The moving incarnation of `actor`.
    fn mover(&self, actor: &ActorId) -> Option<&Moving> {
        self.moving.iter().find(|m| m.actor_ref.id() == actor)
    }

    /// Seals the moving runtime unit and dehydrates each moving actor after its last turn here:
    /// one actor's lane alone, or the whole Spot (every gate of it, never another Spot).
    async fn seal_runtime(&self) -> Result<Vec<crate::actor::MigratedState>, ActorError> {
        match &self.subject {
            Subject::Actor => {
                let m = self.moving.first().ok_or(ActorError::Ended)?;
                let rx = m.mailbox.seal_and_dehydrate(&m.rt_spot)?;
                self.set_phase(SourcePhaseName::Quiescing);
                rx.await.unwrap_or(Err(ActorError::Ended)).map(|s| vec![s])
            }
            Subject::Spot(_) => {
                let m = self.moving.first().ok_or(ActorError::Ended)?;
                let mailboxes: Vec<Mailbox> =
                    self.moving.iter().map(|m| m.mailbox.clone()).collect();
                let rx = m.rt_spot.seal_and_dehydrate(&mailboxes)?;
                self.set_phase(SourcePhaseName::Quiescing);
                rx.await.unwrap_or(Err(ActorError::Ended))
            }
        }
    }

    async fn perform(&mut self, e: SourceEffect) -> Option<Result<Moved, RelocateError>> {
        let node = self.node;
        let store = &node.inner.store;
        let relocation = self.core.id();
        match e {
            SourceEffect::TakeFence { actor, expected } => {
                // Binds of the moving incarnation answer `Unavailable` from the fence on, so no
                // binding registers that the seals do not cover (SB-5.12, Message Follow).
                node.seal_follow(actor.clone(), expected.object_generation);
                let Some(owner) = self.owners.get(&actor).cloned() else {
                    self.core
                        .handle_fenced(node.inner.clock.now(), &actor, Err(()));
                    return None;
                };
                let r = store.relocation_fence(actor.clone(), expected, owner).await;
                self.core.handle_fenced(
                    node.inner.clock.now(),
                    &actor,
                    r.map(|l| l.fence()).map_err(|e| {
                        tracing::info!(error = %e, "relocation fence refused");
                    }),
                );
            }
            SourceEffect::RetireFence { actor, fence } => {
                let Some(owner) = self.owners.get(&actor).cloned() else {
                    self.core
                        .handle_fence_retired(node.inner.clock.now(), &actor, false);
                    return None;
                };
                let r = store.relocation_fence(actor.clone(), fence, owner).await;
                if let Err(e) = &r {
                    tracing::warn!(error = %e, "durable abort not written");
                }
                self.core
                    .handle_fence_retired(node.inner.clock.now(), &actor, r.is_ok());
            }
            SourceEffect::SendSeal { to, record } => {
                let seal = record.seal.clone();
                let tx = lock(&node.inner.relocations.table)
                    .sources
                    .get(&relocation)
                    .map(|s| s.tx.clone());
                // A session of this node: the 42 takes a direct call (the same checks as
                // from a peer), its 43 is the call's outcome.
                if to == *node.node_rid() {
                    let outcome = node.sessions().handle_seal(
                        (node.node_rid(), node.generation()),
                        &record,
                        None,
                    );
                    if let Some(tx) = tx {
                        let _ = tx.try_send(SourceInput::Sealed(seal, outcome));
                    }
                    return None;
                }
                let n = node.clone();
                let timeout = node.inner.relocation.seal_timeout;
                tokio::spawn(async move {
                    let r = n
                        .inner
                        .mesh
                        .request_record(&to, Record::SessionRelocationSeal(record), None, timeout)
                        .await;
                    let outcome = match r {
                        Ok(resp) => match resp.record {
                            Record::SessionRelocationSealed(s) if s.seal == seal => s.outcome,
                            _ => SealOutcome::Rejected(ErrorKind::InvalidOperation),
                        },
                        // no 43: the seal timeout decides
                        Err(_) => return,
                    };
                    if let Some(tx) = tx {
                        let _ = tx.try_send(SourceInput::Sealed(seal, outcome));
                    }
                });
            }
            SourceEffect::SealRuntime => {
                let state = self.seal_runtime().await;
                // Hold new ingress: what arrives from now on waits behind the barrier; binds
                // naming the sealed incarnation answer `Unavailable` until the end (SB-5.12).
                let mut held = true;
                for m in &self.moving {
                    held &= self.hold_ingress(m);
                    node.seal_follow(m.actor_ref.id().clone(), m.actor_ref.object_generation());
                }
                // Records waiting in an actor's backlog (its lane was full) stay there, behind
                // the sealed lane's, until the capture takes both in arrival order.
                let state = match state {
                    Ok(s) if held => Ok(s),
                    Ok(_) => {
                        tracing::info!("incarnation gone: relocation aborts");
                        Err(())
                    }
                    Err(e) => {
                        tracing::info!(error = %e, "dehydrate failed");
                        Err(())
                    }
                };
                self.core.handle_quiesced(node.inner.clock.now(), state);
            }
            SourceEffect::SendRestore { to, request } => {
                // Each actor's placement, in the request's order.
                let placement: Vec<Placement> = request
                    .actors
                    .iter()
                    .filter_map(|a| self.mover(&a.actor))
                    .map(|m| Placement {
                        timers: m.timers.clone(),
                        actor_type: m.actor_ref.actor_type().to_owned(),
                        spot: m.spot.clone(),
                        binding: m.binding.as_ref().map(|b| BindingRecord {
                            session_owner: b.session_owner.clone(),
                            lifecycle: b.lifecycle,
                            owner_id: b.owner_id,
                            owner_lease: b.owner_lease,
                            session: b.session,
                            generation: b.generation,
                        }),
                    })
                    .collect();
                let rec = RestoreRecord::of(&request, &placement);
                let tx = lock(&node.inner.relocations.table)
                    .sources
                    .get(&relocation)
                    .map(|s| s.tx.clone());
                let n = node.clone();
                let timeout = node.inner.relocation.restore_timeout;
                tokio::spawn(async move {
                    let input = match records::encode(&rec) {
                        Ok(body) => match n
                            .inner
                            .mesh
                            .request(
                                &to,
                                protocol::PEER_RELOCATE_RESTORE,
                                Bytes::from(body),
                                timeout,
                            )
                            .await
                        {
                            Ok(_) => SourceInput::RelayReady,
                            Err(e) => {
                                tracing::info!(error = %e, "restore failed on the target");
                                SourceInput::TargetFailed
                            }
                        },
                        Err(_) => SourceInput::TargetFailed,
                    };
                    if let Some(tx) = tx {
                        let _ = tx.send(input).await;
                    }
                });
            }
            SourceEffect::CaptureAndRelay => {
                // Per actor, its queue's order (each actor has its own queue, EG-2.1).
                for i in 0..self.moving.len() {
                    let m = &self.moving[i];
                    let id = m.actor_ref.id().clone();
                    let queued = self.take_queued(m).await;
                    let held = self.take_held(m);
                    for w in queued.into_iter().chain(held) {
                        node.relay_work(relocation, &self.target, &id, w).await;
                        self.relayed += 1;
                    }
                }
                self.core.handle_relayed(node.inner.clock.now());
            }
            SourceEffect::SendCutover { to } => {
                self.handed_off = Some(node.inner.clock.now());
                let n = node.clone();
                let timeout = node.inner.request_timeout;
                if let Ok(body) = records::encode(&CutoverRecord { relocation }) {
                    tokio::spawn(async move {
                        if let Err(e) = n
                            .inner
                            .mesh
                            .request(
                                &to,
                                protocol::PEER_RELOCATE_CUTOVER,
                                Bytes::from(body),
                                timeout,
                            )
                            .await
                        {
                            tracing::info!(error = %e, "cutover not acknowledged");
                        }
                    });
                }
            }
            SourceEffect::UnsealRuntime => {
                match (&self.subject, self.moving.first()) {
                    (Subject::Actor, Some(m)) => m.mailbox.unseal(),
                    (Subject::Spot(_), Some(m)) => m.rt_spot.unseal(),
                    (_, None) => {}
                }
                for m in &self.moving {
                    node.release_follow(m.actor_ref.id(), m.actor_ref.object_generation());
                    if let Err(e) = node.open_barrier(&m.actor_ref, &m.mailbox).await {
                        tracing::warn!(error = %e, "source not reopened");
                    }
                }
            }
            SourceEffect::SendRoute { to, record } => node.send_route(&to, record).await,
            SourceEffect::EndIncarnations(locations) => {
                for l in &locations {
                    self.end_incarnation(l).await;
                }
            }
            SourceEffect::Finished(outcome) => {
                match &outcome {
                    SourceOutcome::Failed(FailReason::CasFailed(ids)) => {
                        self.end_unserved(|a| ids.contains(a));
                        self.release_records(|a| ids.contains(a)).await;
                    }
                    SourceOutcome::Failed(_) => {
                        self.end_unserved(|_| true);
                        self.release_records(|_| true).await;
                    }
                    _ => {}
                }
                return Some(self.finish(outcome));
            }
        }
        None
    }

    fn set_phase(&self, phase: SourcePhaseName) {
        if let Some(e) = lock(&self.node.inner.relocations.table)
            .sources
            .get_mut(&self.core.id())
        {
            e.phase = phase;
        }
    }

    /// Closes the barrier of the moving incarnation `m` (ingress held from now on). `false`
    /// when the incarnation is gone (destroyed, lease lost meanwhile).
    fn hold_ingress(&self, m: &Moving) -> bool {
        let mut actors = lock(&self.node.inner.actors);
        match actors
            .live
            .get_mut(m.actor_ref.id())
            .filter(|a| a.actor_ref.object_generation() == m.actor_ref.object_generation())
        {
            Some(a) => {
                a.held.get_or_insert_with(VecDeque::new);
                true
            }
            None => false,
        }
    }

    /// The sealed lane's queued records of `m`, then those waiting in its backlog for room in
    /// the lane, in arrival order (both older than what waits behind the closed barrier). A
    /// refill at work moves backlog records into the sealed lane until it is full: the capture
    /// waits for it to stop, so no record is taken out of order or left behind.
    async fn take_queued(&self, m: &Moving) -> Vec<Work> {
        let node = self.node;
        let id = m.actor_ref.id();
        let mailbox = &m.mailbox;
        let (queued, backlog) = loop {
            if let Some(t) = node
                .inner
                .actor_backlogs
                .take_all(id, || mailbox.take_pending())
            {
                break t;
            }
            tokio::task::yield_now().await;
        };
        let (mut out, mut other) = queued;
        out.reserve(backlog.len());
        for p in backlog {
            match p.into_message::<Work, ()>() {
                Ok(w) => out.push(w),
                Err(_) => other += 1,
            }
        }
        if other > 0 {
            tracing::warn!(
                other,
                "records of another kind in a moving actor's lane dropped"
            );
        }
        out
    }

    /// What waits behind `m`'s closed barrier, in arrival order (the barrier stays closed).
    fn take_held(&self, m: &Moving) -> VecDeque<Work> {
        let mut actors = lock(&self.node.inner.actors);
        actors
            .live
            .get_mut(m.actor_ref.id())
            .and_then(|a| a.held.as_mut())
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The target owns the actor: the local incarnation ends; what it held since the capture
    /// follows the captured work to the target. The last member of a moved Spot to leave ends
    /// the Spot here (its gates and lanes go).
    async fn end_incarnation(&mut self, location: &ActorLocation) {
        let node = self.node;
        let Some(generation) = self
            .mover(&location.actor_id)
            .map(|m| m.actor_ref.object_generation())
        else {
            return;
        };
        // One step under the actors lock: the incarnation ends here and Message Follow takes
        // its old route (SB-5.12), so no record finds the actor neither live nor followed.
        let removed = {
            let mut actors = lock(&node.inner.actors);
            let ours = actors
                .live
                .get(&location.actor_id)
                .is_some_and(|a| a.actor_ref.object_generation() == generation);
            let removed = if ours {
                actors.live.remove(&location.actor_id)
            } else {
                None
            };
            if let Some(a) = &removed {
                node.install_follow(&a.fence, location.clone());
            }
            removed
        };
        let Some(mut a) = removed else {
            return;
        };
        let held = a.held.take().unwrap_or_default();
        retire_sealed(&mut a);
        node.leave_spot(&a.spot);
        for w in held {
            node.relay_work(self.core.id(), &self.target, &location.actor_id, w)
                .await;
            self.relayed += 1;
        }
    }

    /// After relay-ready a failure never reopens the source (SB-8.6): each sealed incarnation
    /// `which` names ends here; what it still held is answered `Unavailable`, never run.
    fn end_unserved(&self, which: impl Fn(&ActorId) -> bool) {
        let node = self.node;
        for m in self.moving.iter().filter(|m| which(m.actor_ref.id())) {
            let removed = {
                let mut actors = lock(&node.inner.actors);
                let ours = actors.live.get(m.actor_ref.id()).is_some_and(|a| {
                    a.actor_ref.object_generation() == m.actor_ref.object_generation()
                });
                if ours {
                    actors.live.remove(m.actor_ref.id())
                } else {
                    None
                }
            };
            node.release_follow(m.actor_ref.id(), m.actor_ref.object_generation());
            if let Some(mut a) = removed {
                drop(a.held.take());
                drop(a.mailbox.take_pending());
                retire_sealed(&mut a);
                node.leave_spot(&a.spot);
            }
        }
    }

    /// After a failure past relay-ready (SB-8.6) an incarnation is served nowhere: unless the
    /// target's CAS won (then the target owns it), its store record is removed with this
    /// node's owner fence, as a destroy does — atomically against a late CAS of the target,
    /// which changes the owner — and it is remembered as retired here. A record naming it
    /// then answers `NotFound` (retrying cannot help), and the next `get_or_create` anywhere
    /// activates a new incarnation (a new ObjectGeneration, SB-4.1) from the type's factory;
    /// the sessions bound to it were closed by their seal timeout (SB-8.3).
    async fn release_records(&self, which: impl Fn(&ActorId) -> bool) {
        let node = self.node;
        for m in self.moving.iter().filter(|m| which(m.actor_ref.id())) {
            let id = m.actor_ref.id().clone();
            let Some(owner) = self.owners.get(&id).cloned() else {
                continue;
            };
            match node.inner.store.destroy(id.clone(), owner).await {
                Ok(()) => {
                    lock(&node.inner.actors)
                        .retired
                        .insert(id, m.actor_ref.object_generation());
                    tracing::info!("failed relocation: the incarnation's record is removed");
                }
                Err(e) => {
                    tracing::info!(error = %e, "failed relocation: the record stays (the target owns it, or the store decides later)");
                }
            }
        }
    }

    fn finish(&mut self, outcome: SourceOutcome) -> Result<Moved, RelocateError> {
        let node = self.node;
        let relocation = self.core.id();
        let duration = self
            .core
            .phase_durations()
            .iter()
            .map(|(_, d)| *d)
            .sum::<Duration>();
        let label = match &outcome {
            SourceOutcome::Moved(_) => "moved".to_owned(),
            SourceOutcome::Aborted(r) => format!("aborted: {r:?}"),
            SourceOutcome::Failed(r) => format!("failed: {r:?}"),
        };
        tracing::info!(
            outcome = %label,
            relayed = self.relayed,
            duration_ms = duration.as_millis() as u64,
            phases = ?self.core.phase_durations(),
            "relocation ended"
        );
        {
            let mut t = lock(&node.inner.relocations.table);
            let c = &mut t.counters;
            match &outcome {
                SourceOutcome::Moved(_) => {
                    node.inner
                        .relocations
                        .durations
                        .observe(duration.as_secs_f64());
                    c.committed += 1;
                    c.duration_us_sum = c
                        .duration_us_sum
                        .saturating_add(duration.as_micros() as u64);
                }
                SourceOutcome::Aborted(_) => c.aborted += 1,
                SourceOutcome::Failed(_) => c.failed += 1,
            }
        }
        node.inner.relocations.finish(RelocationSummary {
            relocation: relocation.get(),
            actor: self.label.clone(),
            role: "source".into(),
            peer: self.target.to_string(),
            phase: "Done".into(),
            phases: phase_list(self.core.phase_durations()),
            outcome: Some(label),
        });
        match outcome {
            SourceOutcome::Moved(locations) => {
                let actors = self
                    .moving
                    .iter()
                    .map(|m| {
                        locations
                            .iter()
                            .find(|l| l.actor_id == *m.actor_ref.id())
                            .map(ActorRef::from_location)
                            .ok_or(RelocateError::Failed(
                                FailReason::TargetFailedAfterRelayReady,
                            ))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Moved {
                    relocation,
                    actors,
                    relayed: self.relayed,
                    phases: self.core.phase_durations().to_vec(),
                    duration,
                })
            }
            SourceOutcome::Aborted(r) => Err(RelocateError::Aborted(r)),
            SourceOutcome::Failed(r) => Err(RelocateError::Failed(r)),
        }
    }
}

struct TargetRun<'a> {
    node: &'a Node,
    core: TargetHandoff,
    rx: mpsc::Receiver<TargetInput>,
    source: NodeRid,
    placement: Vec<Placement>,
    restore_reply: Option<ReplyHandle>,
    /// The moving actors' ids (for the summary).
    actors: String,
    /// The rehydrated instances, until dispatch opens.
    instances: HashMap<ActorId, (Placement, Box<dyn crate::actor::ActorInstance>)>,
    /// The incarnations opened here (their `moved_from` ends later, `Node::end_moved_from`)
    /// and when the first opened.
    opened: Vec<ActorRef>,
    opened_at: Option<Instant>,
}

impl TargetRun<'_> {
    /// Runs the relocation to its end here; the incarnations it opened and when.
    async fn drive(mut self) -> (Vec<ActorRef>, Instant) {
        let node = self.node;
        let relocation = self.core.id();
        loop {
            while let Some(e) = self.core.poll_effect() {
                if self.perform(e).await {
                    return self.opened();
                }
            }
            if let Some(e) = lock(&node.inner.relocations.table)
                .targets
                .get_mut(&relocation)
            {
                e.phase = match self.core.phase() {
                    crate::relocation::TargetPhaseName::Installing => "Installing",
                    crate::relocation::TargetPhaseName::RelayReady => "RelayReady",
                    crate::relocation::TargetPhaseName::Committing => "Committing",
                    _ => "Done",
                };
            }
            let clock = node.inner.clock.clone();
            let at = self.core.poll_timeout();
            tokio::select! {
                input = self.rx.recv() => match input {
                    Some(TargetInput::Cutover) => {
                        let n = self.queued();
                        self.core.handle_relayed(n);
                        self.core.handle_cutover(clock.now());
                    }
                    None => return self.opened(),
                },
                () = sleep_until(&*clock, at) => self.core.handle_timeout(clock.now()),
            }
        }
    }

    fn opened(self) -> (Vec<ActorRef>, Instant) {
        let at = self
            .opened_at
            .unwrap_or_else(|| self.node.inner.clock.now());
        (self.opened, at)
    }

    fn queued(&self) -> u64 {
        let t = lock(&self.node.inner.relocations.table);
        t.targets
            .get(&self.core.id())
            .map_or(0, |e| e.queues.values().map(|q| q.len() as u64).sum())
    }

    fn install(
        &mut self,
        request: &crate::relocation::RestoreRequest,
    ) -> Result<(), RestoreRefusal> {
        let node = self.node;
        if node.check_accepting().is_err() || node.standing().admit().is_err() {
            return Err(RestoreRefusal::Unavailable);
        }
        if let crate::relocation::Subject::Spot(name) = &request.subject {
            // A Spot moves in whole: it does not merge into a Spot of that name here, and each
            // moving actor is one of its members.
            if lock(&node.inner.spots).contains_key(name)
                || self.placement.iter().any(|p| p.spot.name != *name)
            {
                return Err(RestoreRefusal::AlreadyHosted);
            }
        }
        for (a, p) in request.actors.iter().zip(&self.placement) {
            let spot = &p.spot;
            let ty = node
                .inner
                .registry
                .get(&p.actor_type)
                .ok_or(RestoreRefusal::UnknownType)?;
            if lock(&node.inner.actors).live.contains_key(&a.actor) {
                return Err(RestoreRefusal::AlreadyHosted);
            }
            node.check_spot(spot)
                .map_err(|_| RestoreRefusal::Unavailable)?;
            let info = ActivationInfo {
                actor_id: a.actor.clone(),
                object_generation: a.object_generation,
            };
            let instance = ty.rehydrate(&info, a.state.clone()).map_err(|e| {
                tracing::info!(error = %e, "rehydrate failed");
                RestoreRefusal::RehydrateFailed
            })?;
            self.instances
                .insert(a.actor.clone(), (p.clone(), instance));
        }
        Ok(())
    }

    /// Performs one effect; `true` once the relocation ended here.
    async fn perform(&mut self, e: TargetEffect) -> bool {
        let node = self.node;
        let relocation = self.core.id();
        match e {
            TargetEffect::InstallQueues(request) => {
                let r = self.install(&request);
                if r.is_err() {
                    self.instances.clear();
                }
                self.core.handle_installed(node.inner.clock.now(), r);
            }
            TargetEffect::ReplyRelayReady { .. } => {
                if let Some(r) = self.restore_reply.take() {
                    r.reply(Bytes::new());
                }
            }
            TargetEffect::ReplyRestoreFailed { refusal, .. } => {
                if let Some(r) = self.restore_reply.take() {
                    let kind = match refusal {
                        RestoreRefusal::Unavailable => ErrorKind::Unavailable,
                        _ => ErrorKind::InvalidOperation,
                    };
                    r.error(kind, format!("restore refused: {refusal:?}"));
                }
            }
            TargetEffect::WarnCutoverTimeout => {
                tracing::warn!(
                    event = "cutover_timeout",
                    "no cutover from the source within the cutover timeout: falling back to the owner CAS"
                );
            }
            TargetEffect::CasOwner { actor, expected } => {
                let owner = ActorOwner {
                    mesh: node.inner.mesh_name.clone(),
                    holder: lock(&node.inner.lease).lease().holder.clone(),
                };
                let r = node
                    .inner
                    .store
                    .cas_owner(actor.clone(), expected, owner)
                    .await
                    .map_err(|e| tracing::info!(error = %e, "owner CAS failed"));
                self.core.handle_cas(node.inner.clock.now(), &actor, r);
            }
            TargetEffect::OpenDispatch { actor, location } => {
                self.opened_at.get_or_insert_with(|| node.inner.clock.now());
                if let Some((placement, instance)) = self.instances.remove(&actor) {
                    match node
                        .open_moved_in(relocation, &self.source, &location, &placement, instance)
                        .await
                    {
                        Ok(()) => self.opened.push(ActorRef::from_location(&location)),
                        Err(e) => {
                            tracing::error!(error = %e, "moved actor not opened after the CAS");
                        }
                    }
                }
            }
            TargetEffect::DiscardQueue { actor } => {
                self.instances.remove(&actor);
                let q = lock(&node.inner.relocations.table)
                    .targets
                    .get_mut(&relocation)
                    .and_then(|e| e.queues.remove(&actor));
                // Each request in it is answered (`Unavailable`), never run.
                drop(q);
            }
            TargetEffect::SendRoute { to, record } => node.send_route(&to, record).await,
            TargetEffect::ReportToSource {
                to,
                committed,
                failed,
            } => {
                let rec = ResultRecord {
                    relocation,
                    committed: committed.iter().map(CommittedActor::from).collect(),
                    failed,
                };
                if let Ok(body) = records::encode(&rec) {
                    let n = node.clone();
                    let timeout = node.inner.request_timeout;
                    tokio::spawn(async move {
                        if let Err(e) = n
                            .inner
                            .mesh
                            .request(
                                &to,
                                protocol::PEER_RELOCATE_RESULT,
                                Bytes::from(body),
                                timeout,
                            )
                            .await
                        {
                            tracing::info!(error = %e, "result not acknowledged by the source");
                        }
                    });
                }
            }
            TargetEffect::Finished(outcome) => {
                let label = match &outcome {
                    TargetOutcome::Cas { failed, cause, .. } if failed.is_empty() => {
                        format!("committed ({cause:?})")
                    }
                    TargetOutcome::Cas { cause, .. } => format!("cas failed ({cause:?})"),
                    TargetOutcome::Refused(r) => format!("refused: {r:?}"),
                };
                tracing::info!(outcome = %label, phases = ?self.core.phase_durations(), "relocation ended");
                node.inner.relocations.finish(RelocationSummary {
                    relocation: relocation.get(),
                    actor: self.actors.clone(),
                    role: "target".into(),
                    peer: self.source.to_string(),
                    phase: "Done".into(),
                    phases: phase_list(self.core.phase_durations()),
                    outcome: Some(label),
                });
                return true;
            }
        }
        false
    }
}
