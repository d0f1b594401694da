//! The target's driver: the hand-off records' arms of the inbound loop (Restore, WORK,
//! cutover), the temporary queues and their bound, and the loop around [`TargetHandoff`]
//! (install, relay-ready, the cutover or its timeout's fallback, the owner CAS, open dispatch,
//! the 44, the result to the source).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc;
use tracing::Instrument;
use zlink_mesh::ReplyHandle;
use zlink_wire::{ActorId, DispatchKey, ErrorKind, NodeRid};

use super::{
    INPUTS, RelocationSummary, TargetEntry, TargetInput, phase_list, reply_refusal, sleep_until,
};
use crate::actor::exec::{self, Work};
use crate::actor::{ActivationInfo, ActorError, ActorRef};
use crate::node::{Node, lock, protocol};
use crate::relocation::records::{
    self, CommittedActor, CutoverRecord, HandoffRefusal, Placement, RestoreRecord, ResultRecord,
    WorkRecord,
};
use crate::relocation::{RestoreRefusal, TargetEffect, TargetHandoff, TargetOutcome};
use crate::store::ActorOwner;

/// Records one relocation's temporary queues on the target hold at most, and their payload
/// bytes. What the source captures for an actor is bounded by its own limits (its lane, its
/// activation barrier, and its backlog: the senders' windows); these bound what the target
/// keeps for it before dispatch opens. Beyond them a relayed request is answered `LaneFull`
/// and a relayed send refused, counted (`sends_dropped`).
const TARGET_QUEUE_ITEMS: usize = 65_536;
const TARGET_QUEUE_BYTES: usize = 256 << 20;

impl Node {
    /// A Restore from `sender`: starts the target's driver, which answers `reply` with
    /// relay-ready or the refusal.
    pub(in crate::node) fn on_relocate_restore(
        &self,
        sender: NodeRid,
        payload: &[u8],
        reply: ReplyHandle,
    ) {
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
    pub(in crate::node) async fn on_relocate_work(
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
    pub(in crate::node) fn on_relocate_cutover(
        &self,
        sender: &NodeRid,
        payload: &[u8],
        reply: ReplyHandle,
    ) {
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
