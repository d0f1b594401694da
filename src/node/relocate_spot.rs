//! Whole-Spot relocation (issue 27): every member actor of a SpotWide User or Instance Spot
//! moves to another node as one unit, in the same SB-8.9 order as one actor
//! ([`Node::relocate`]) — the same cores ([`crate::relocation::SourceHandoff`] with
//! [`Subject::Spot`], [`crate::relocation::TargetHandoff`]) and the same driver
//! (`relocate/source.rs`), over the set of members.
//!
//! What differs from one actor: the runtime seal is the Spot's (one lifecycle record of the
//! Spot's own lane seals every gate of the Spot and dehydrates each member, so no member turn
//! runs after its state was taken, and a member's pending Yield resume fails, EG-4.1); no actor
//! joins the Spot while it moves; each bound session of any member is sealed (42/43) and gets
//! its 44. Other Spots of the node are never sealed. On commit the last member to leave ends
//! the Spot here, so its gates and lanes are freed (their per-object debt and counters with
//! them, EG-7.5); the target starts every member with fresh ones.

use std::time::Duration;

use zlink_wire::{ActorId, ErrorKind, NodeRid, RelocationId};

use super::relocate::{Moving, phase_list};
use super::{Node, lock, protocol};
use crate::actor::{ActorRef, SpotSpec};
use crate::relocation::{SourcePhaseName, Subject};

use super::RelocateError;

/// What [`Node::relocate_spot`] reports for a relocation that moved the Spot.
#[derive(Clone, Debug)]
pub struct SpotRelocationReport {
    /// The relocation's id.
    pub relocation: RelocationId,
    /// The Spot's name (the same on the target).
    pub spot: String,
    /// Each member's ref at its new owner (same ActorId and ObjectGeneration), in ActorId order.
    pub actors: Vec<ActorRef>,
    /// The node it left.
    pub from: NodeRid,
    /// The node that hosts it now.
    pub to: NodeRid,
    /// Records captured on the source and relayed to the target (each member's in its arrival
    /// order).
    pub relayed: u64,
    /// Each phase of the source with the time spent in it.
    pub phases: Vec<(SourcePhaseName, Duration)>,
    /// From start to the target's result (on the node's clock).
    pub duration: Duration,
}

impl Node {
    /// Relocates the Spot `spot` hosted by this node — every member actor, its state, its bound
    /// session and its queued work — to the node `to`, as one unit (SB-8.9's order over the
    /// set): relocation fences in the store → seal each member's bound session (42/43) → seal
    /// the Spot and dehydrate every member after its last turn here → Restore on the target →
    /// relay-ready → capture each member's queued work in arrival order, hold new ingress, relay
    /// → cutover → the target's `cas_owner` per member → the target opens dispatch and sends
    /// each sealed session its 44. Only a SpotWide User or Instance Spot moves as a unit; no
    /// actor joins the Spot while it moves; the node's other Spots keep running throughout.
    ///
    /// Failures are those of [`Node::relocate`]: before relay-ready the Spot runs here again
    /// with nothing lost (SB-8.5); after it, this node never serves its members again (SB-8.6).
    ///
    /// # Errors
    /// [`RelocateError`]: `UnknownSpot`, `SpotNotMovable`, `SpotBusy`, `NotMigratable` (a
    /// member's type cannot move) before anything is sealed; `Aborted` means the Spot is still
    /// here.
    pub async fn relocate_spot(
        &self,
        spot: &str,
        to: NodeRid,
    ) -> Result<SpotRelocationReport, RelocateError> {
        if self.check_accepting().is_err() {
            return Err(RelocateError::ShuttingDown);
        }
        // A node that does not host the Spot says so first (the operator's `ctl` asks each
        // node in turn until the one hosting it answers), the target included.
        if !lock(&self.inner.spots).contains_key(spot) {
            return Err(RelocateError::UnknownSpot(spot.to_owned()));
        }
        if self.is_local(&to) {
            return Err(RelocateError::SameNode);
        }
        let moving = self.spot_members(spot)?;
        let result = self
            .run_source(
                Subject::Spot(spot.to_owned()),
                format!("spot {spot}"),
                moving,
                to.clone(),
            )
            .await;
        // Aborted: the Spot is here again and takes joins; moved or failed: its last member's
        // leave ended it (a Spot of that name created later is a new one).
        if let Some(s) = lock(&self.inner.spots).get_mut(spot) {
            s.relocating = false;
        }
        let m = result?;
        Ok(SpotRelocationReport {
            relocation: m.relocation,
            spot: spot.to_owned(),
            actors: m.actors,
            from: self.node_rid().clone(),
            to,
            relayed: m.relayed,
            phases: m.phases,
            duration: m.duration,
        })
    }

    /// Marks the Spot relocating (no join from now on) and takes its members, in ActorId order:
    /// each Ready, of a type that can move; every member the Spot counts is one of them.
    fn spot_members(&self, spot: &str) -> Result<Vec<Moving>, RelocateError> {
        let (kind, rt_spot, members) = {
            let mut spots = lock(&self.inner.spots);
            let s = spots
                .get_mut(spot)
                .ok_or_else(|| RelocateError::UnknownSpot(spot.to_owned()))?;
            if !s.kind.shares_gate() {
                return Err(RelocateError::SpotNotMovable {
                    spot: spot.to_owned(),
                    kind: s.kind,
                });
            }
            if s.relocating {
                return Err(RelocateError::SpotBusy(spot.to_owned()));
            }
            s.relocating = true;
            (s.kind, s.spot.clone(), s.members)
        };
        let taken = self.take_members(spot, kind, rt_spot, members);
        if taken.is_err() {
            if let Some(s) = lock(&self.inner.spots).get_mut(spot) {
                s.relocating = false;
            }
        }
        taken
    }

    fn take_members(
        &self,
        spot: &str,
        kind: crate::actor::SpotKind,
        rt_spot: crate::actor::exec::RtSpot,
        members: usize,
    ) -> Result<Vec<Moving>, RelocateError> {
        let (mut moving, busy): (Vec<Moving>, Option<ActorId>) = {
            let actors = lock(&self.inner.actors);
            let mut out = Vec::new();
            let mut busy = None;
            for a in actors.live.values().filter(|a| a.spot == spot) {
                if a.held.is_some() {
                    busy = Some(a.actor_ref.id().clone());
                    break;
                }
                out.push(Moving {
                    actor_ref: a.actor_ref.clone(),
                    binding: a.binding.current().cloned(),
                    mailbox: a.mailbox.clone(),
                    spot: SpotSpec {
                        name: spot.to_owned(),
                        kind,
                    },
                    rt_spot: rt_spot.clone(),
                    timers: a.timers.iter().map(|t| t.spec.clone()).collect(),
                });
            }
            (out, busy)
        };
        if let Some(id) = busy {
            // held by a relocation of its own (the member moves alone), or activating
            return Err(if self.relocating(&id) {
                RelocateError::InProgress(id)
            } else {
                RelocateError::SpotBusy(spot.to_owned())
            });
        }
        if moving.is_empty() {
            return Err(RelocateError::UnknownSpot(spot.to_owned()));
        }
        if moving.len() != members {
            // a member joined the runtime Spot but is not published yet (activating)
            return Err(RelocateError::SpotBusy(spot.to_owned()));
        }
        for m in &moving {
            let ty = self
                .inner
                .registry
                .get(m.actor_ref.actor_type())
                .ok_or_else(|| RelocateError::NotOwner(m.actor_ref.id().clone()))?;
            ty.relocatable()?;
        }
        moving.sort_by(|a, b| a.actor_ref.id().as_str().cmp(b.actor_ref.id().as_str()));
        Ok(moving)
    }

    /// The lane counters of the local incarnation `actor` now (its queues, reservations and
    /// EG-7.4 decision state: per serial execution object, EG-7.5); `None` when this node does
    /// not host that incarnation. For operators and tests: one short lock of its gate.
    #[must_use]
    pub fn lane_stats(&self, actor: &ActorRef) -> Option<crate::runtime::LaneStats> {
        let mailbox = lock(&self.inner.actors)
            .live
            .get(actor.id())
            .filter(|a| a.actor_ref.object_generation() == actor.object_generation())
            .map(|a| a.mailbox.clone())?;
        Some(mailbox.lane_stats())
    }

    /// The lane runtime's counters (live gates and lanes, refused Yield resumes, …): what this
    /// node's runtime holds now.
    #[must_use]
    pub fn runtime_metrics(&self) -> crate::runtime::MetricsSnapshot {
        self.inner.runtime.metrics()
    }

    /// The operator's `RELOCATE_SPOT` (client protocol): the Spot must be hosted by this node.
    pub(super) async fn relocate_spot_op(
        &self,
        req: &protocol::RelocateSpot,
    ) -> Result<protocol::SpotRelocationDone, (ErrorKind, String)> {
        let to = NodeRid::new(&req.to)
            .map_err(|e| (ErrorKind::InvalidOperation, format!("node: {e}")))?;
        let r = self
            .relocate_spot(&req.spot, to)
            .await
            .map_err(|e| (e.kind(), e.to_string()))?;
        Ok(protocol::SpotRelocationDone {
            relocation: r.relocation.get(),
            spot: r.spot,
            actors: r.actors,
            from: r.from.to_string(),
            to: r.to.to_string(),
            relayed: r.relayed,
            duration_ms: r.duration.as_millis() as u64,
            phases: phase_list(&r.phases),
        })
    }
}
