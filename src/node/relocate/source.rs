//! The source's driver: `Node::run_source` and its loop around [`SourceHandoff`] (fence, seals,
//! quiesce, Restore, capture and relay, cutover, the end of the incarnation here or its
//! reopening), the relay of one captured record, and the target's result arm.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;
use zlink_mesh::ReplyHandle;
use zlink_wire::{
    ActorId, Deadline, ErrorKind, NodeRid, ObjectGeneration, Record, RelocationId, Request,
    SealOutcome,
};

use super::{
    INPUTS, Moved, Moving, RelocateError, RelocationStep, RelocationSummary, SourceEntry,
    SourceInput, phase_list, reply_refusal, sleep_until,
};
use crate::actor::SpotSpec;
use crate::actor::exec::{EndReason, Mailbox, Work};
use crate::actor::fence::CallFence;
use crate::actor::{ActorError, ActorRef, MigratedState};
use crate::node::local::LocalActor;
use crate::node::{Node, calls::request_error, lock, protocol};
use crate::relocation::SealTarget;
use crate::relocation::records::TimerRecord;
use crate::relocation::records::{
    self, BindingRecord, CutoverRecord, HandoffRefusal, Placement, RestoreRecord, ResultRecord,
    WorkRecord,
};
use crate::relocation::recovery::{
    AttemptResult, DEFAULT_RECOVERY_BACKOFF, DEFAULT_RECOVERY_BACKOFF_MAX, Recovery,
    RecoveryOutcome,
};
use crate::relocation::{
    FailReason, MovingActor, SourceEffect, SourceHandoff, SourceOutcome, SourcePhaseName, Subject,
};
use crate::store::{ActorLocation, OwnerFence, StoreError};

impl Node {
    /// Runs the source's half of one relocation of `moving` (one actor, or every member of a
    /// Spot, per `subject`) to `to`: each incarnation must be the one the store names here.
    /// `label` names the subject in `ctl relocations`.
    pub(in crate::node) async fn run_source(
        &self,
        subject: Subject,
        label: String,
        mut moving: Vec<Moving>,
        to: NodeRid,
    ) -> Result<Moved, RelocateError> {
        // A relocation is infrastructure work (SB-10): a shutdown that begins meanwhile drains
        // it — its seals, capture and hand-off end as the protocol ends them (a commit, or an
        // abort with its 44s), within the drain deadline — before it ends the node's actors.
        // Its own timeouts bound it; it is never cancelled half-way.
        let _drained = self.inner.inflight.enter();
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
                    let ours = m.actor_ref.location();
                    l.owner_node == *self.node_rid()
                        && l.node_generation == self.generation()
                        && l.object_generation == m.actor_ref.object_generation()
                        && l.authority_owner_generation == ours.authority_owner_generation
                        && l.owner_lease_generation == ours.owner_lease_generation
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
            let mut t = self.inner.relocations.table();
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
        // From here a bind of a moving incarnation answers `Unavailable` (SB-5.12; the bind
        // path checks the Follow table under the actors lock), and the binding each seal names
        // is read in the same step: a bind registered since `moving` was taken is the one
        // sealed and carried in the Restore, and none registers that the seals do not cover.
        {
            let live = lock(&self.inner.actors);
            for m in &mut moving {
                let id = m.actor_ref.id().clone();
                self.seal_follow(id.clone(), m.actor_ref.object_generation());
                if let Some(a) = live
                    .live
                    .get(&id)
                    .filter(|a| a.is_incarnation(&m.actor_ref))
                {
                    m.binding = a.binding.current().cloned();
                }
            }
        }
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
        let sealed: Vec<(ActorId, ObjectGeneration)> = moving
            .iter()
            .map(|m| (m.actor_ref.id().clone(), m.actor_ref.object_generation()))
            .collect();
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
            states: HashMap::new(),
        };
        let out = run.drive().instrument(span).await;
        // The seal entries last as long as the relocation: released at its end whatever the
        // outcome (an early abort emits no unseal; a commit's Forward entry stays).
        for (id, generation) in &sealed {
            self.release_follow(id, *generation);
        }
        self.inner.relocations.table().sources.remove(&relocation);
        out
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

    /// The target's result, on the source.
    pub(in crate::node) fn on_relocate_result(
        &self,
        sender: &NodeRid,
        payload: &[u8],
        reply: ReplyHandle,
    ) {
        let rec: ResultRecord = match records::decode(payload) {
            Ok(r) => r,
            Err(why) => return reply_refusal(reply, self.inner.relocations.refuse(why)),
        };
        let tx = {
            let t = self.inner.relocations.table();
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
}

/// Ends a sealed incarnation: its lane is marked ended, then unsealed so the lifecycle record
/// that removes it runs (nothing of it runs any more: later work is refused as ended).
fn retire_sealed(a: &mut LocalActor) {
    a.end(EndReason::Fenced);
    a.mailbox.unseal();
}

/// What the recovery of one moving actor needs (SB-8.6), taken from its sealed incarnation.
struct Recovering {
    actor_type: String,
    actor_id: ActorId,
    spot: SpotSpec,
    timers: Vec<TimerRecord>,
    /// This node's owner fence of the record to replace (then of the replacement).
    owner: OwnerFence,
    state: MigratedState,
    /// The ended incarnation's fences here, and the relocation's target: when the target's
    /// CAS won after all, the old route follows it there.
    fence: CallFence,
    target: NodeRid,
}

/// What one recovery attempt's error says about the next ([`Recovery`]).
fn attempt_result(e: &ActorError) -> AttemptResult {
    match e {
        ActorError::Store(StoreError::Unavailable { .. }) | ActorError::LeaseLapsed => {
            AttemptResult::Unreachable
        }
        ActorError::Store(
            StoreError::LeaseNotLive { .. } | StoreError::StaleNodeGeneration { .. },
        )
        | ActorError::ShuttingDown => AttemptResult::LeaseLost,
        ActorError::Store(_) | ActorError::AlreadyExists { .. } | ActorError::NotReady { .. } => {
            AttemptResult::Superseded
        }
        _ => AttemptResult::Failed,
    }
}

impl Node {
    /// SB-8.6's recovery of one moving actor, in a task of its own: a new incarnation here from
    /// its dehydrated state (the store record replaced in one write, never removed), its timers
    /// started again. Returns once the first attempt answered; while the store is out of reach
    /// the task repeats the attempt with a backoff on the node's clock ([`Recovery`]) until the
    /// actor is back, the record moved on, or this node may no longer own (bounded by its
    /// lease). Counted: `recovered`, `recovery_retries`, `unrecovered`.
    async fn recover_moving(&self, r: Recovering) {
        let (first_tx, first_rx) = oneshot::channel();
        let node = self.clone();
        tokio::spawn(async move {
            let closed = node.closed();
            tokio::select! {
                () = node.run_recovery(r, first_tx) => {}
                () = closed => {}
            }
        });
        let _ = first_rx.await;
    }

    async fn run_recovery(&self, mut r: Recovering, first: oneshot::Sender<()>) {
        let clock = self.inner.clock.clone();
        let mut first = Some(first);
        let mut core = Recovery::new(
            clock.now(),
            DEFAULT_RECOVERY_BACKOFF,
            DEFAULT_RECOVERY_BACKOFF_MAX,
        );
        let outcome = loop {
            if let Some(o) = core.outcome() {
                break o;
            }
            if !core.poll_attempt(clock.now()) {
                sleep_until(&*clock, core.poll_timeout()).await;
                continue;
            }
            let attempt = self
                .reactivate(
                    &r.actor_type,
                    &r.actor_id,
                    r.spot.clone(),
                    r.state.clone(),
                    &mut r.owner,
                )
                .await;
            let result = match attempt {
                Ok(actor_ref) => {
                    self.start_carried_timers(&actor_ref, &r.timers);
                    AttemptResult::Recovered
                }
                Err(e) => {
                    tracing::info!(actor = %r.actor_id, attempt = core.attempts(), error = %e, "failed relocation: recovery attempt");
                    attempt_result(&e)
                }
            };
            core.handle_attempt(clock.now(), result);
            if core.outcome().is_none() {
                self.inner.relocations.table().counters.recovery_retries += 1;
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
            }
        };
        {
            let mut t = self.inner.relocations.table();
            match outcome {
                RecoveryOutcome::Recovered { .. } => t.counters.recovered += 1,
                _ => t.counters.unrecovered += 1,
            }
        }
        match outcome {
            RecoveryOutcome::Recovered { attempts } => {
                tracing::info!(actor = %r.actor_id, attempts, "failed relocation: the actor is back here with its state, a new incarnation");
            }
            other => {
                tracing::warn!(actor = %r.actor_id, outcome = ?other, "failed relocation: the actor's state is not re-activated");
                self.follow_superseded(&r).await;
            }
        }
        if let Some(f) = first.take() {
            let _ = f.send(());
        }
    }
}

impl Node {
    /// A recovery that did not bring the actor back (the record moved on, this node's lease
    /// ended, the state did not rehydrate): when the record names the relocation's target
    /// under the ended incarnation's ObjectGeneration (the target's CAS won after this node had
    /// decided the move failed), the old route follows it there for the Message Follow time,
    /// as after a commit (SB-5.12), instead of answering as for an ended incarnation (it is
    /// forwarded once this node may act as an owner again).
    async fn follow_superseded(&self, r: &Recovering) {
        match self.inner.store.lookup(r.actor_id.clone()).await {
            Ok(Some(l))
                if l.owner_node == r.target && l.object_generation == r.fence.object_generation =>
            {
                tracing::info!(actor = %r.actor_id, to = %r.target, "the target's CAS won: its old route follows it there");
                self.install_follow(&r.fence, l);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::info!(actor = %r.actor_id, error = %e, "the moved-on record not read: no Message Follow");
            }
        }
    }
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
    /// Each moving actor's state as dehydrated here, kept until the relocation ends: after a
    /// failure past relay-ready the actor comes back here with it (`release_records`).
    states: HashMap<ActorId, MigratedState>,
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
            // Every wait of the core is bounded, the one for the target's result after the
            // cutover too (`RelocationConfig::result_timeout`; then the store decides).
            let at = self.core.poll_timeout();
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
                () = sleep_until(&*clock, at) => self.core.handle_timeout(clock.now()),
            }
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
                let tx = node.inner.relocations.source_tx(relocation);
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
                    Ok(s) if held => {
                        self.states = self
                            .moving
                            .iter()
                            .map(|m| m.actor_ref.id().clone())
                            .zip(s.iter().cloned())
                            .collect();
                        Ok(s)
                    }
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
                let tx = node.inner.relocations.source_tx(relocation);
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
                // Free unless a test holds it (`Node::hold_relocation_step_for_tests`).
                node.inner.relocations.pass(RelocationStep::Capture).await;
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
                node.inner.relocations.pass(RelocationStep::Cutover).await;
                node.send_handoff(
                    to,
                    protocol::PEER_RELOCATE_CUTOVER,
                    &CutoverRecord { relocation },
                    "cutover",
                );
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
            SourceEffect::QueryOwners { actors } => {
                // The target's result did not come within the result timeout of the cutover.
                node.inner.relocations.table().counters.result_waits_expired += 1;
                tracing::warn!(
                    event = "result_wait_expired",
                    "no result from the target after the cutover: the store decides"
                );
                let mut records = Ok(Vec::with_capacity(actors.len()));
                for id in actors {
                    match store.lookup(id.clone()).await {
                        Ok(l) => {
                            if let Ok(r) = &mut records {
                                r.push((id, l));
                            }
                        }
                        Err(e) => {
                            tracing::info!(error = %e, "the store cannot be read: asked again later");
                            records = Err(());
                            break;
                        }
                    }
                }
                self.core.handle_owners(node.inner.clock.now(), records);
            }
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
        if let Some(e) = self
            .node
            .inner
            .relocations
            .table()
            .sources
            .get_mut(&self.core.id())
        {
            e.phase = phase;
        }
    }

    /// Closes the barrier of the moving incarnation `m` (ingress held from now on). `false`
    /// when the incarnation is gone (destroyed, lease lost meanwhile): a newer incarnation of
    /// the actor here (a takeover under a new lease keeps the ObjectGeneration) is not `m`'s
    /// and is left alone, here and in every other step of the driver.
    fn hold_ingress(&self, m: &Moving) -> bool {
        let mut actors = lock(&self.node.inner.actors);
        match actors
            .live
            .get_mut(m.actor_ref.id())
            .filter(|a| a.is_incarnation(&m.actor_ref))
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
            .filter(|a| a.is_incarnation(&m.actor_ref))
            .and_then(|a| a.held.as_mut())
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The target owns the actor: the local incarnation ends; what it held since the capture
    /// follows the captured work to the target. The last member of a moved Spot to leave ends
    /// the Spot here (its gates and lanes go).
    async fn end_incarnation(&mut self, location: &ActorLocation) {
        let node = self.node;
        let Some(moving) = self.mover(&location.actor_id).map(|m| m.actor_ref.clone()) else {
            return;
        };
        // One step under the actors lock: the incarnation ends here and Message Follow takes
        // its old route (SB-5.12), so no record finds the actor neither live nor followed. An
        // incarnation that ended here meanwhile (its owner lease was lost mid-move) leaves its
        // route to the follow entry all the same: the actor lives on at the target.
        let removed = {
            let mut actors = lock(&node.inner.actors);
            let live = actors.live.get(&location.actor_id);
            let ours = live.is_some_and(|a| a.is_incarnation(&moving));
            if ours || live.is_none() {
                node.install_follow(&CallFence::of_ref(&moving), location.clone());
            }
            if ours {
                actors.live.remove(&location.actor_id)
            } else {
                None
            }
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
                let ours = actors
                    .live
                    .get(m.actor_ref.id())
                    .is_some_and(|a| a.is_incarnation(&m.actor_ref));
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

    /// After a failure past relay-ready (SB-8.6) the sealed incarnation is served nowhere and
    /// the source route is never reopened; the sessions bound to it are closed by their seal
    /// timeout (SB-8.3). Unless the target's CAS won (then the target owns it), the actor comes
    /// back here: its store record is replaced in one write by a new incarnation of this node
    /// (a new ObjectGeneration, SB-4.1; `LocationStore::reincarnate` with this node's owner
    /// fence — atomic against a late CAS of the target, which changes the owner, and with no
    /// moment without a record, so no other node activates a blank actor meanwhile), the old
    /// one remembered as retired here, and the new one rehydrated from the state dehydrated for
    /// the move, with its timers ([`Node::recover_moving`], retried while the store is out of
    /// reach). What was captured after the dehydration never ran here and is not replayed.
    async fn release_records(&mut self, which: impl Fn(&ActorId) -> bool) {
        let node = self.node;
        for m in self.moving.iter().filter(|m| which(m.actor_ref.id())) {
            let id = m.actor_ref.id().clone();
            let (Some(owner), Some(state)) =
                (self.owners.get(&id).cloned(), self.states.remove(&id))
            else {
                continue;
            };
            node.recover_moving(Recovering {
                actor_type: m.actor_ref.actor_type().to_owned(),
                actor_id: id,
                spot: m.spot.clone(),
                timers: m.timers.clone(),
                owner,
                state,
                fence: CallFence::of_ref(&m.actor_ref),
                target: self.target.clone(),
            })
            .await;
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
            let mut t = node.inner.relocations.table();
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
