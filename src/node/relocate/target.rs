//! The target's driver: the hand-off records' arms of the inbound loop (Restore, WORK,
//! cutover), the temporary queues and their bound, and the loop around [`TargetHandoff`]
//! (install, relay-ready, the cutover or its timeout's fallback, the owner CAS, open dispatch,
//! the 44, the result to the source).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{Notify, broadcast, mpsc};
use tracing::Instrument;
use zlink_mesh::{PeerEvent, ReplyHandle};
use zlink_wire::{ActorId, DispatchKey, ErrorKind, NodeGeneration, NodeRid, RelocationId};

use super::{
    INPUTS, RelocationSummary, TargetEntry, TargetInput, phase_list, reply_refusal, sleep_until,
};
use crate::actor::exec::{self, Mailbox, Work};
use crate::actor::{ActivationInfo, ActorError, ActorRef};
use crate::node::{Node, lock, protocol};
use crate::relocation::records::{
    self, CommittedActor, CutoverRecord, HandoffRefusal, Placement, RestoreRecord, ResultRecord,
    TimerRecord, WorkRecord,
};
use crate::relocation::{
    RestoreRefusal, SourceWaitEnd, TargetEffect, TargetHandoff, TargetOutcome,
};
use crate::store::{ActorOwner, StoreError};

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
        let relayed = Arc::new(Notify::new());
        // The source's lifecycle now: a Down of it, or another one Up, means it is gone.
        let events = self.inner.mesh.subscribe();
        let source_generation = self.inner.mesh.peer_generation(&sender);
        {
            let mut t = self.inner.relocations.table();
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
                    streaming: Vec::new(),
                    relayed: relayed.clone(),
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
        // Drained by a shutdown like the source's run (infrastructure work, SB-10).
        let drained = self.inner.inflight.enter();
        tokio::spawn(
            async move {
                let _drained = drained;
                let run = TargetRun {
                    node: &node,
                    core,
                    rx,
                    relayed,
                    events: Some(events),
                    source_generation,
                    streams: Vec::new(),
                    source: sender.clone(),
                    placement,
                    restore_reply: Some(reply),
                    actors,
                    instances: HashMap::new(),
                    opened: Vec::new(),
                    opened_at: None,
                };
                let (opened, at) = run.drive().await;
                node.inner.relocations.table().targets.remove(&relocation);
                node.end_moved_from(&sender, opened, at).await;
                node.inner
                    .relocations
                    .table()
                    .late_streams
                    .remove(&relocation);
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
        let late;
        let mailbox = {
            let mut t = self.inner.relocations.table();
            match t.targets.get_mut(&rec.relocation) {
                Some(e) if e.source != *sender => {
                    drop(t);
                    drop(work);
                    return refused(HandoffRefusal::WrongPeer, ack);
                }
                Some(e) if e.queues.contains_key(&rec.actor) => {
                    let (items, bytes) = e.queued;
                    // The bound of what the target keeps before dispatch opens
                    // (`RelocationConfig::target_queue_records` / `_bytes`).
                    let cfg = &self.inner.relocation;
                    if items >= cfg.target_queue_records
                        || bytes.saturating_add(work.payload.len()) > cfg.target_queue_bytes
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
                    if e.streaming.contains(&rec.actor) {
                        e.relayed.notify_one();
                    }
                    if let Some(a) = ack {
                        a.reply(Bytes::new());
                    }
                    return;
                }
                _ => {
                    // After the wait for the source's relay stream ended without its cutover:
                    // appended behind what went in meanwhile (counted below once taken).
                    late = t
                        .late_streams
                        .get(&rec.relocation)
                        .is_some_and(|a| a.contains(&rec.actor));
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
        if late {
            self.inner
                .relocations
                .table()
                .counters
                .relayed_after_source_wait += 1;
            tracing::warn!(
                relocation = rec.relocation.get(),
                "relayed record after the source wait: appended behind"
            );
        }
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
            let mut t = self.inner.relocations.table();
            let entry = t
                .targets
                .get(&rec.relocation)
                .map(|e| (e.source.clone(), e.tx.clone()));
            match entry {
                // The source's late cutover after its relay stream's wait ended: the stream is
                // complete (what it relays later is no captured work).
                None if t.late_streams.remove(&rec.relocation).is_some() => Ok(None),
                None => Err(HandoffRefusal::UnknownRelocation),
                Some((source, _)) if source != *sender => Err(HandoffRefusal::WrongPeer),
                Some((_, tx)) => Ok(Some(tx)),
            }
        };
        match tx {
            Ok(tx) => {
                if let Some(tx) = tx {
                    let _ = tx.try_send(TargetInput::Cutover);
                }
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
    /// Woken when a streaming actor's queue got a relayed record.
    relayed: Arc<Notify>,
    /// The mesh's peer events (the source seen gone), until their stream closes.
    events: Option<broadcast::Receiver<PeerEvent>>,
    /// The source's lifecycle when the Restore arrived.
    source_generation: Option<NodeGeneration>,
    /// After a fallback, the committed actors whose source relay stream is open: their lane,
    /// and the timers that start once it closed.
    streams: Vec<(ActorRef, Mailbox, Vec<TimerRecord>)>,
    source: NodeRid,
    placement: Vec<Placement>,
    restore_reply: Option<ReplyHandle>,
    /// The moving actors' ids (for the summary).
    actors: String,
    /// The rehydrated instances and the Spot each joined, until dispatch opens.
    instances: HashMap<
        ActorId,
        (
            Placement,
            Box<dyn crate::actor::ActorInstance>,
            exec::RtSpot,
        ),
    >,
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
            if let Some(e) = node.inner.relocations.table().targets.get_mut(&relocation) {
                e.phase = match self.core.phase() {
                    crate::relocation::TargetPhaseName::Installing => "Installing",
                    crate::relocation::TargetPhaseName::RelayReady => "RelayReady",
                    crate::relocation::TargetPhaseName::Committing => "Committing",
                    crate::relocation::TargetPhaseName::AwaitingSource => "AwaitingSource",
                    _ => "Done",
                };
            }
            let clock = node.inner.clock.clone();
            let at = self.core.poll_timeout();
            let relayed = self.relayed.clone();
            tokio::select! {
                input = self.rx.recv() => match input {
                    Some(TargetInput::Cutover) => {
                        // Every record relayed before the cutover went into the queues first
                        // (the inbound loop handles them in arrival order).
                        self.pump().await;
                        let n = self.queued();
                        self.core.handle_relayed(n);
                        self.core.handle_cutover(clock.now());
                    }
                    None => return self.opened(),
                },
                () = relayed.notified() => self.pump().await,
                gone = source_gone(&mut self.events, &self.source, self.source_generation) => {
                    if gone {
                        tracing::info!("the source is gone");
                        self.core.handle_source_lost(clock.now());
                    }
                }
                () = sleep_until(&*clock, at) => self.core.handle_timeout(clock.now()),
            }
        }
    }

    /// Moves what the streaming actors' queues hold into their lanes, in arrival order (the
    /// only mover while the stream is open, so nothing overtakes).
    fn pump(&self) -> impl std::future::Future<Output = ()> + Send + '_ {
        pump(self.node, self.core.id(), &self.streams)
    }

    fn opened(mut self) -> (Vec<ActorRef>, Instant) {
        // Instances that never opened leave the Spots they joined.
        self.drop_instances(None);
        let at = self
            .opened_at
            .unwrap_or_else(|| self.node.inner.clock.now());
        (self.opened, at)
    }

    /// Records taken into this relocation's queues so far.
    fn queued(&self) -> u64 {
        let t = self.node.inner.relocations.table();
        t.targets
            .get(&self.core.id())
            .map_or(0, |e| e.queued.0 as u64)
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
            if p.timers.len() > node.inner.relocation.max_restore_timers {
                node.inner
                    .relocations
                    .table()
                    .counters
                    .refused_too_many_timers += 1;
                tracing::warn!(
                    actor = %a.actor,
                    timers = p.timers.len(),
                    max = node.inner.relocation.max_restore_timers,
                    "restore refused: too many timers"
                );
                return Err(RestoreRefusal::TooManyTimers);
            }
            let spot = &p.spot;
            let ty = node
                .inner
                .registry
                .get(&p.actor_type)
                .ok_or(RestoreRefusal::UnknownType)?;
            if lock(&node.inner.actors).live.contains_key(&a.actor) {
                return Err(RestoreRefusal::AlreadyHosted);
            }
            // The moving actor joins its Spot here now, under the spots lock: a Spot that is
            // moving away refuses it (the source aborts and keeps serving it, SB-8.5), and a
            // Spot with a member moving in does not start a move of its own (`SpotBusy`: a
            // member counted but not published), so the actor never commits into a Spot that
            // cannot open it. The membership is the incarnation's from its opening on, and is
            // left again if it does not open (`drop_instances`).
            let rt_spot = node.join_spot(spot).map_err(|e| {
                tracing::info!(error = %e, spot = %spot.name, "restore refused: its spot takes no member now");
                RestoreRefusal::Unavailable
            })?;
            let info = ActivationInfo {
                actor_id: a.actor.clone(),
                object_generation: a.object_generation,
            };
            let instance = match ty.rehydrate(&info, a.state.clone()) {
                Ok(i) => i,
                Err(e) => {
                    node.leave_spot(&spot.name);
                    tracing::info!(error = %e, "rehydrate failed");
                    return Err(RestoreRefusal::RehydrateFailed);
                }
            };
            self.instances
                .insert(a.actor.clone(), (p.clone(), instance, rt_spot));
        }
        Ok(())
    }

    /// Drops the rehydrated instance of `actor` (every one for `None`) that will not open
    /// here, leaving the Spot it joined at install.
    fn drop_instances(&mut self, actor: Option<&ActorId>) {
        let gone: Vec<Placement> = match actor {
            Some(a) => self
                .instances
                .remove(a)
                .map(|(p, ..)| p)
                .into_iter()
                .collect(),
            None => self.instances.drain().map(|(_, (p, ..))| p).collect(),
        };
        for p in gone {
            self.node.leave_spot(&p.spot.name);
        }
    }

    /// Performs one effect; `true` once the relocation ended here.
    async fn perform(&mut self, e: TargetEffect) -> bool {
        let node = self.node;
        let relocation = self.core.id();
        match e {
            TargetEffect::InstallQueues(request) => {
                let r = self.install(&request);
                if r.is_err() {
                    self.drop_instances(None);
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
                node.inner.relocations.table().counters.cutover_timeouts += 1;
                tracing::warn!(
                    event = "cutover_timeout",
                    "no cutover from the source within the cutover timeout: falling back to the owner CAS"
                );
            }
            TargetEffect::WarnSourceWaitExpired => {
                node.inner.relocations.table().counters.source_waits_expired += 1;
                tracing::warn!(
                    event = "source_wait_expired",
                    "no cutover from the source within the source wait after the fallback: regular ingress goes in, later relayed work behind it"
                );
            }
            TargetEffect::ReleaseIngress { actor } => {
                let Some(i) = self.streams.iter().position(|(r, ..)| r.id() == &actor) else {
                    return false;
                };
                let (actor_ref, mailbox, timers) = self.streams.swap_remove(i);
                if self.core.source_wait_end() != Some(SourceWaitEnd::Cutover) {
                    node.inner
                        .relocations
                        .table()
                        .late_streams
                        .entry(relocation)
                        .or_default()
                        .push(actor.clone());
                }
                if let Err(e) = node
                    .release_moved_in(relocation, &actor_ref, &mailbox, &timers)
                    .await
                {
                    tracing::info!(error = %e, "moved actor ended before its ingress opened");
                }
            }
            TargetEffect::CasOwner { actor, expected } => {
                // A node that is shutting down takes no actor in: it would end with the node's
                // other actors once the drain is over, its state with it. Past relay-ready that
                // is a failed CAS (SB-8.6): the source brings the actor back with its state.
                if node.check_accepting().is_err() {
                    tracing::info!("shutting down: the owner CAS is not tried");
                    self.core
                        .handle_cas(node.inner.clock.now(), &actor, Err(()));
                    return false;
                }
                let holder = lock(&node.inner.lease).lease().holder.clone();
                let owner = ActorOwner {
                    mesh: node.inner.mesh_name.clone(),
                    holder: holder.clone(),
                };
                let r = node
                    .inner
                    .store
                    .cas_owner(actor.clone(), expected, owner)
                    .await;
                let now = node.inner.clock.now();
                match r {
                    // No answer (timeout, connection dropped): it may have been applied; the
                    // record read back decides.
                    Err(e @ StoreError::Unavailable { .. }) => {
                        node.inner.relocations.table().counters.cas_answers_lost += 1;
                        tracing::warn!(error = %e, event = "cas_answer_lost", "owner CAS unanswered: the record is read back");
                        self.core.handle_cas_lost(now, &actor, holder);
                    }
                    r => {
                        let r = r.map_err(|e| tracing::info!(error = %e, "owner CAS failed"));
                        self.core.handle_cas(now, &actor, r);
                    }
                }
            }
            TargetEffect::ReadOwner { actor } => {
                let r = node.inner.store.lookup(actor.clone()).await.map_err(
                    |e| tracing::info!(error = %e, "owner record not read back: asked again"),
                );
                self.core
                    .handle_owner_read(node.inner.clock.now(), &actor, r);
            }
            TargetEffect::OpenDispatch {
                actor,
                location,
                behind_source,
            } => {
                self.opened_at.get_or_insert_with(|| node.inner.clock.now());
                if let Some((placement, instance, rt_spot)) = self.instances.remove(&actor) {
                    match node
                        .open_moved_in(
                            relocation,
                            &self.source,
                            &location,
                            &placement,
                            instance,
                            rt_spot,
                            behind_source,
                        )
                        .await
                    {
                        Ok(mailbox) => {
                            let actor_ref = ActorRef::from_location(&location);
                            if behind_source {
                                self.streams
                                    .push((actor_ref.clone(), mailbox, placement.timers));
                                // what the source relayed before the commit goes in first
                                self.pump().await;
                            }
                            self.opened.push(actor_ref);
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "moved actor not opened after the CAS");
                        }
                    }
                }
            }
            TargetEffect::DiscardQueue { actor } => {
                self.drop_instances(Some(&actor));
                let q = node
                    .inner
                    .relocations
                    .table()
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
                node.send_handoff(to, protocol::PEER_RELOCATE_RESULT, &rec, "result");
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

/// Resolves when the next peer event is read: `true` when it shows `source` gone (a Down of the
/// lifecycle the Restore came from, another lifecycle Up, or — after missed events — no longer
/// that lifecycle). Pending for ever once the event stream closed.
async fn source_gone(
    events: &mut Option<broadcast::Receiver<PeerEvent>>,
    source: &NodeRid,
    generation: Option<NodeGeneration>,
) -> bool {
    let Some(rx) = events.as_mut() else {
        return std::future::pending().await;
    };
    match rx.recv().await {
        Ok(PeerEvent::Down {
            node,
            generation: g,
            ..
        }) => node == *source && generation.is_none_or(|s| s == g),
        Ok(PeerEvent::Up {
            node,
            generation: g,
        }) => node == *source && generation.is_some_and(|s| s != g),
        Ok(_) => false,
        Err(broadcast::error::RecvError::Lagged(_)) => true,
        Err(broadcast::error::RecvError::Closed) => {
            *events = None;
            false
        }
    }
}

/// [`TargetRun::pump`] (free of the driver, whose rehydrated instances are not `Sync`).
async fn pump(
    node: &Node,
    relocation: RelocationId,
    streams: &[(ActorRef, Mailbox, Vec<TimerRecord>)],
) {
    for (actor_ref, mailbox, _) in streams {
        loop {
            let work = node
                .inner
                .relocations
                .table()
                .targets
                .get_mut(&relocation)
                .and_then(|e| e.queues.get_mut(actor_ref.id()))
                .and_then(VecDeque::pop_front);
            let Some(work) = work else { break };
            if mailbox.submit(work).await.is_err() {
                node.count_send_dropped();
            }
        }
    }
}
