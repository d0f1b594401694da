//! The node's part in session binding: the actor owner's handling of 38 (bind, unbind,
//! disconnect) and 24 (relay), the push path of `ActorCtx` (36), the 51 after a replacement,
//! and the two narrow handles the node gives the rooms below it — [`SessionHost`] to the
//! session owner and [`ActorHost`] to actors. The same rules hold when session and actor live on
//! this node: the records take a direct call instead of a mesh hop, through the same checks.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_mesh::{Record, ReplyHandle, SendError, TrySendError};
use zlink_wire::{
    ActorSend, AuthorityFence, BindOperation, BindSnapshot, BoundSessionBind,
    BoundSessionBindReply, BoundSessionReplaced, BoundSessionSend, Deadline, DisconnectReason,
    DispatchKey, ErrorKind, NodeRid, OwnerLeaseGeneration, PreviousSessionOwner, SessionRid,
};

use super::follow::Arrival;
use super::{Inner, Node, lock, request_error, send_error};
use crate::actor::exec::{ReplyTo, Work};
use crate::actor::fence::{self, CallFence};
use crate::actor::{ActorCtx, ActorError, ActorHost, ActorRef};
use crate::backlog::{Admitted, Done, Intake};
use crate::relocation::tombstone::{TombstonePlan, TombstoneStep};
use crate::runtime::BoxFuture;
use crate::session::aggregate::RelayTicket;
use crate::session::flow::{FlowRecord, FlowReject};
use crate::session::owner::{AfterBind, Refusal, RelaySent};
use crate::session::{RegisteredBinding, SessionHost, slot::SlotBind};

fn refusal(e: &ActorError) -> Refusal {
    (e.kind(), e.to_string())
}

/// What one step of a 38 tombstone did under the actors lock.
enum Locked {
    /// A relocation holds the incarnation: wait for its end.
    Hold,
    /// The disconnect began (the incarnation and its Spot), or the identity is not current.
    Begun(Option<(ActorRef, String)>),
    /// The identity was removed here (the incarnation), or was not current.
    Removed(Option<ActorRef>),
    /// To the new owner, as this operation.
    Forward(BindOperation),
}

/// A binding the actor owner retired by registering another session's binding: the 51 to send
/// once the 38 terminal has left (SB-6.1).
pub(crate) struct Replacement {
    to: NodeRid,
    record: BoundSessionReplaced,
}

impl Node {
    /// The actor owner's 38 (SB-5.2, SB-6.1, SB-6.6, SB-7): bind registers the identity in the
    /// incarnation's binding slot under the actors lock — the same lock as submission, so a
    /// handler running after the reply sees it (SB-5.6); unbind/disconnect tombstone exactly
    /// their identity (a disconnect runs the Spot's `on_disconnect_actor` at most once first).
    pub(crate) async fn bind_at_owner(
        &self,
        sender: &NodeRid,
        req: BoundSessionBind,
    ) -> (Result<BindSnapshot, Refusal>, Option<Replacement>) {
        self.bind_at_owner_routed(sender, req, Arrival::Direct)
            .await
    }

    /// [`Node::bind_at_owner`] for a 38 that arrived `arrival`: one for an actor that moved
    /// away from here is forwarded once to its new owner (SB-5.12), whose terminal it returns.
    pub(crate) async fn bind_at_owner_routed(
        &self,
        sender: &NodeRid,
        req: BoundSessionBind,
        arrival: Arrival,
    ) -> (Result<BindSnapshot, Refusal>, Option<Replacement>) {
        if let Some(out) = self.follow_bind(sender, &req, arrival).await {
            if let Err(e) = &out {
                let reason = FlowReject::of_fence(e);
                self.sessions()
                    .flow()
                    .reject(FlowRecord::Bind, reason, &req.actor);
            }
            return (out.map_err(|e| refusal(&e)), None);
        }
        match req.operation {
            BindOperation::Bind => self.register_binding(sender, &req),
            _ => (self.tombstone_binding(sender, &req, arrival).await, None),
        }
    }

    fn register_binding(
        &self,
        sender: &NodeRid,
        req: &BoundSessionBind,
    ) -> (Result<BindSnapshot, Refusal>, Option<Replacement>) {
        if !self.accepting() {
            self.sessions()
                .flow()
                .reject(FlowRecord::Bind, FlowReject::ShuttingDown, &req.actor);
            return (Err(refusal(&ActorError::ShuttingDown)), None);
        }
        let fence = CallFence {
            actor_id: req.actor.clone(),
            object_generation: req.object_generation,
            authority_owner_generation: req.authority_owner_generation,
            owner_lease_generation: req.owner_lease_generation,
            node_generation: req.target_node_generation,
        };
        let mut actors = lock(&self.inner.actors);
        let actors = &mut *actors;
        let retired = actors.retired.get(&req.actor).copied();
        let live = actors.live.get_mut(&req.actor);
        let flow = self.sessions().flow();
        // A relocation of this incarnation started after the bind's Message Follow check: it
        // read the binding to seal under this lock, so the bind is refused as a bind to a
        // sealed incarnation is (SB-5.12), never registered behind the seals' back.
        let now = self.inner.clock.now();
        if super::follow::table(self).lookup(&req.actor, req.object_generation, now)
            == crate::relocation::follow::FollowLookup::Sealed
        {
            self.count_follow_refused(crate::relocation::follow::FollowRefusal::Sealed);
            let e = ActorError::StaleFence {
                actor_id: req.actor.clone(),
                fence: "relocation seal",
            };
            flow.reject(FlowRecord::Bind, FlowReject::of_fence(&e), &req.actor);
            return (Err(refusal(&e)), None);
        }
        if let Err(e) = fence::check_bind(
            self.standing(),
            self.generation(),
            live.as_deref().map(|a| &a.fence),
            retired,
            &fence,
        ) {
            let reason = FlowReject::of_fence(&e);
            flow.reject(FlowRecord::Bind, reason, &req.actor);
            return (Err(refusal(&e)), None);
        }
        let Some(local) = live else {
            flow.reject(FlowRecord::Bind, FlowReject::ActorGone, &req.actor);
            return (
                Err(refusal(&ActorError::StaleFence {
                    actor_id: req.actor.clone(),
                    fence: "location",
                })),
                None,
            );
        };
        let reg = RegisteredBinding::of_bind(sender, req);
        let replaced = match local.binding.bind(reg) {
            SlotBind::Registered { replaced } => replaced,
            SlotBind::Unchanged => None,
        };
        let location = local.actor_ref.wire_location();
        let snapshot = BindSnapshot {
            actor: req.actor.clone(),
            object_generation: local.actor_ref.object_generation(),
            location: location.clone(),
            binding_generation: req.binding_generation,
        };
        let me = AuthorityFence {
            node: location.node.clone(),
            node_generation: location.node_generation,
            authority_owner_generation: location.authority_owner_generation,
            owner_lease_generation: location.owner_lease_generation,
        };
        let replacement = replaced.map(|old| Replacement {
            to: old.session_owner.clone(),
            record: BoundSessionReplaced {
                actor: req.actor.clone(),
                authority_source: me.clone(),
                authority_target: me,
                previous: PreviousSessionOwner {
                    node: old.session_owner,
                    lifecycle: old.lifecycle,
                    owner: old.owner_id,
                    owner_lease_generation: old.owner_lease,
                    session: old.session,
                    retired_binding_generation: old.generation,
                },
            },
        });
        (Ok(snapshot), replacement)
    }

    /// An unbind or disconnect of exactly its identity (SB-6.6, SB-7.3, SB-7.4), stepped by
    /// [`TombstonePlan`]: applied here while the incarnation is live here; held while a
    /// relocation has sealed it (its binding travels in the Restore), then applied here after
    /// an abort or forwarded once by Message Follow after a commit, so the binding is removed
    /// where it lives and the Spot's `OnDisconnectActor` runs exactly once — here if its turn
    /// ran here, else on the new owner.
    async fn tombstone_binding(
        &self,
        sender: &NodeRid,
        req: &BoundSessionBind,
        arrival: Arrival,
    ) -> Result<BindSnapshot, Refusal> {
        self.step_tombstone(sender, req, arrival, false).await
    }

    /// [`Node::tombstone_binding`] for a disconnect whose notification the caller may have
    /// begun already (`begun`: [`BindingSlot::begin_disconnect`](crate::session::slot::BindingSlot::begin_disconnect)
    /// returned `true` for this identity under the actors lock, as the session-owner-lost path
    /// does): the Spot's hook then runs for it here without beginning it again.
    pub(super) async fn step_tombstone(
        &self,
        sender: &NodeRid,
        req: &BoundSessionBind,
        arrival: Arrival,
        begun: bool,
    ) -> Result<BindSnapshot, Refusal> {
        let (lifecycle, generation) = (req.session_lifecycle, req.binding_generation);
        let not_current = || {
            // Not the current identity (already retired, replaced, being notified, or the
            // actor ended): the late record changes nothing (SB-4.1, SB-6.6, SB-7.3).
            self.sessions()
                .flow()
                .reject(FlowRecord::Bind, FlowReject::BindingRetired, &req.actor);
            Err((
                ErrorKind::InvalidOperation,
                format!("actor {}: binding not current", req.actor),
            ))
        };
        let snapshot = |actor_ref: &ActorRef| BindSnapshot {
            actor: req.actor.clone(),
            object_generation: actor_ref.object_generation(),
            location: actor_ref.wire_location(),
            binding_generation: req.binding_generation,
        };
        let mut plan = TombstonePlan::new(req.operation);
        // The incarnation whose hook ran here (its snapshot is the terminal).
        let mut hooked: Option<ActorRef> = None;
        let mut held = false;
        loop {
            // Enabled before the look under the lock: a relocation ending in between wakes it.
            let unsealed = self.follow_unsealed();
            tokio::pin!(unsealed);
            unsealed.as_mut().enable();
            // What the step did under the actors lock (where a relocation reads the binding
            // it seals): the rest happens without it.
            // `sealed_until`: when the seal entry a hold waits on ends by its time.
            let (step, sealed_until) = {
                let mut actors = lock(&self.inner.actors);
                let (at, until) = self.whereabouts(&actors, &req.actor, req.object_generation);
                let step = plan.step(at);
                let live = actors.live.get_mut(&req.actor);
                let locked = match step {
                    // Only the binding the relocation carries is held; another identity is
                    // not current here nor there (binds are refused while sealed).
                    TombstoneStep::Hold => {
                        if live.is_some_and(|a| {
                            a.binding
                                .current()
                                .is_some_and(|c| c.same_identity(sender, lifecycle, generation))
                        }) {
                            Locked::Hold
                        } else {
                            Locked::Removed(None)
                        }
                    }
                    // A disconnect keeps the binding current while the Spot callback runs
                    // (SB-7.4) and runs it at most once per identity (SB-7.3).
                    // One the caller began runs its hook while its identity is current.
                    TombstoneStep::RunHook => Locked::Begun(live.and_then(|a| {
                        let go = if begun {
                            a.binding
                                .current()
                                .is_some_and(|c| c.same_identity(sender, lifecycle, generation))
                        } else {
                            a.binding.begin_disconnect(sender, lifecycle, generation)
                        };
                        go.then(|| (a.actor_ref.clone(), a.spot.clone()))
                    })),
                    TombstoneStep::TombstoneHere => Locked::Removed(live.and_then(|a| {
                        a.binding
                            .tombstone(sender, lifecycle, generation)
                            .map(|_| a.actor_ref.clone())
                    })),
                    TombstoneStep::Forward(operation) => Locked::Forward(operation),
                };
                (locked, until)
            };
            match step {
                Locked::Hold => {
                    if !held {
                        held = true;
                        self.count_tombstone_held();
                    }
                    tokio::select! {
                        () = unsealed => {}
                        () = self.closed() => {
                            return Err(refusal(&ActorError::ShuttingDown));
                        }
                        // The seal entry ends by its hold time (a relocation that has
                        // neither committed nor aborted by then has failed): look again.
                        () = self.follow_seal_ends(sealed_until) => {}
                    }
                }
                Locked::Begun(None) => return not_current(),
                Locked::Begun(Some((actor_ref, spot))) => {
                    let ran = self.run_disconnect_hook(&spot, &actor_ref).await;
                    plan.hook_ended(ran);
                    hooked = Some(actor_ref);
                }
                Locked::Removed(found) => {
                    return match (hooked, found) {
                        // The hook's terminal answers the disconnect (the binding is gone
                        // once it ended, whoever removed it).
                        (Some(actor_ref), _) | (None, Some(actor_ref)) => Ok(snapshot(&actor_ref)),
                        (None, None) => not_current(),
                    };
                }
                Locked::Forward(operation) => {
                    let mut rec = req.clone();
                    rec.operation = operation;
                    let forwarded = self.follow_bind(sender, &rec, arrival).await;
                    return match (forwarded, hooked) {
                        // The hook ran here: only the new owner's copy of the binding was
                        // left to remove; the hook's terminal answers.
                        (out, Some(actor_ref)) if operation == BindOperation::Unbind => {
                            if let Some(Err(e)) = out {
                                tracing::info!(actor = %req.actor, error = %e, "tombstone of a moved binding not forwarded");
                            }
                            Ok(snapshot(&actor_ref))
                        }
                        (Some(Ok(s)), _) => Ok(s),
                        (Some(Err(e)), _) => {
                            let reason = FlowReject::of_fence(&e);
                            self.sessions()
                                .flow()
                                .reject(FlowRecord::Bind, reason, &req.actor);
                            Err(refusal(&e))
                        }
                        // No route (ended, or the follow time is over): nothing holds it.
                        (None, _) => not_current(),
                    };
                }
            }
        }
    }

    /// `OnDisconnectActor` of the actor's current Spot, as a lifecycle turn of the Spot's lane,
    /// waited for within the request timeout (SB-7.4); a failure is logged, never retried
    /// (SB-7.2, SB-7.5). Membership and the actor stay (SB-7.6). `false` when the turn never
    /// started here: the Spot's lane dropped it (the Spot moved away sealed, or ended) or the
    /// Spot is not hosted here; `true` otherwise (also without a hook to run).
    pub(super) async fn run_disconnect_hook(&self, spot: &str, actor: &ActorRef) -> bool {
        let Some(hook) = self
            .inner
            .registry
            .hooks_of(spot)
            .and_then(|h| h.disconnect_hook())
            .cloned()
        else {
            return true;
        };
        let Some(rt_spot) = lock(&self.inner.spots).get(spot).map(|s| s.spot.clone()) else {
            return false;
        };
        let ctx = ActorCtx::new(
            actor.clone(),
            std::sync::Arc::new(NodeActorHost(std::sync::Arc::downgrade(&self.inner))),
        );
        // Sent when the turn starts: a turn dropped unstarted drops the sender.
        let (started_tx, mut started) = tokio::sync::oneshot::channel::<()>();
        let spot_name = spot.to_owned();
        let fut: BoxFuture<Result<(), crate::actor::HandlerError>> = Box::pin(async move {
            let _ = started_tx.send(());
            hook(spot_name, ctx).await
        });
        match tokio::time::timeout(self.request_timeout(), rt_spot.run_lifecycle(fut)).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                let ran = started.try_recv().is_ok();
                if ran {
                    tracing::info!(actor = %actor, error = %e, "on_disconnect_actor failed");
                }
                ran
            }
            Err(_) => {
                tracing::warn!(actor = %actor, "on_disconnect_actor passed its deadline");
                true
            }
        }
    }

    /// Sends the 51 of a replacement (one-way, at most once, no ack, SB-6.1, SB-6.5): over the
    /// mesh with normal admission, or straight to this node's session owner.
    pub(crate) async fn send_replaced(&self, r: Replacement) {
        if r.to == *self.node_rid() {
            let me = self.node_rid().clone();
            self.sessions()
                .handle_replaced((&me, self.generation()), &r.record);
            return;
        }
        if let Err(e) = self
            .inner
            .mesh
            .send_record(&r.to, Record::BoundSessionReplaced(r.record), None)
            .await
        {
            tracing::info!(to = %r.to, error = %e, "51 boundSessionReplaced not sent");
        }
    }

    /// A 38 from a peer: exactly one terminal, then the 51 if the bind replaced another
    /// session's binding.
    pub(crate) async fn on_bind_record(
        &self,
        sender: &NodeRid,
        req: BoundSessionBind,
        reply: Option<ReplyHandle>,
    ) {
        let Some(reply) = reply else {
            // A 38 is a request; without a correlation nothing takes effect (SB-6.6).
            self.sessions().flow().reject(
                FlowRecord::Bind,
                FlowReject::Malformed,
                &"38 without correlation",
            );
            return;
        };
        let (out, replacement) = self.bind_at_owner(sender, req).await;
        let rec = Record::BoundSessionBindReply(BoundSessionBindReply {
            result: out.map_err(|(k, _)| k),
        });
        if let Err(e) = reply.reply_record(rec, None) {
            let (reply, err) = *e;
            reply.error(ErrorKind::Internal, err.to_string());
        }
        if let Some(r) = replacement {
            // After the terminal, off the inbound loop: the 51 waits for normal admission
            // (SB-6.5) and must not hold up other records.
            let node = self.clone();
            tokio::spawn(async move { node.send_replaced(r).await });
        }
    }

    /// A 24 (from a peer or this node's session owner): the binding generation is checked
    /// against the incarnation's slot before the payload enters the actor's application queue
    /// (SB-5.3); retired generations are refused even if their 51 never arrived.
    pub(crate) async fn on_actor_send(
        &self,
        sender: &NodeRid,
        rec: ActorSend,
        payload: Bytes,
        deadline: Option<Instant>,
        reply: Option<ReplyTo>,
    ) -> Option<ActorError> {
        let (fence, work, bound) = self.actor_send_parts(sender, rec, payload, deadline, reply);
        let refused = self.submit_checked(&fence, work, Some(&bound)).await;
        self.actor_send_refused(&fence, refused.as_ref());
        refused
    }

    /// [`Node::on_actor_send`] without waiting (from the mesh I/O thread or the inbound
    /// loop): a full lane keeps the record in the actor's backlog (see
    /// [`Node::submit_checked_now`] for `release`).
    pub(crate) fn on_actor_send_now(
        &self,
        sender: &NodeRid,
        rec: ActorSend,
        payload: Bytes,
        deadline: Option<Instant>,
        reply: Option<ReplyTo>,
        intake: Intake<'_, impl FnOnce() -> Done>,
    ) -> Admitted {
        let (fence, work, bound) = self.actor_send_parts(sender, rec, payload, deadline, reply);
        let (admitted, refused) = self.submit_checked_now(&fence, work, Some(&bound), intake);
        self.actor_send_refused(&fence, refused.as_ref());
        admitted
    }

    /// What both admission paths of a 24 submit: the incarnation fence the record names, its
    /// work, and the binding check against the incarnation's slot (SB-5.3).
    fn actor_send_parts<'s>(
        &self,
        sender: &'s NodeRid,
        rec: ActorSend,
        payload: Bytes,
        deadline: Option<Instant>,
        reply: Option<ReplyTo>,
    ) -> (CallFence, Work, super::BoundCheck<'s>) {
        let fence = CallFence {
            actor_id: rec.actor,
            object_generation: rec.object_generation,
            authority_owner_generation: rec.authority_owner_generation,
            owner_lease_generation: rec.owner_lease_generation,
            node_generation: self.generation(),
        };
        let work = Work {
            key: rec.key,
            payload,
            reply,
            deadline,
            guard: Some(self.inflight().enter()),
        };
        let bound = super::BoundCheck {
            node: sender,
            lifecycle: rec.session_lifecycle,
            generation: rec.tail.binding_generation,
            sequence: rec.tail.session_sequence,
        };
        (fence, work, bound)
    }

    /// A 24 refused by either admission path: counted as a dropped send (its reason was
    /// counted where it was decided, `submit_checked`) and logged.
    fn actor_send_refused(&self, fence: &CallFence, refused: Option<&ActorError>) {
        if let Some(e) = refused {
            self.count_send_dropped();
            tracing::debug!(actor = %fence.actor_id, error = %e, "24 actorSend refused");
        }
    }

    /// `ActorCtx::push`: reads the incarnation's binding slot (under the actors lock) and sends
    /// a 36 to its session owner (SB-5.5, SB-5.6).
    async fn push_bound_inner(
        &self,
        me: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), ActorError> {
        let (binding, push) = self.bound_push(me, key)?;
        if binding == *self.node_rid() {
            self.sessions().handle_local_push(push, payload).await;
            return Ok(());
        }
        self.inner
            .mesh
            .send_record(&binding, Record::BoundSessionSend(push), Some(payload))
            .await
            .map_err(|e| send_error(&binding, e))
    }

    /// [`Node::push_bound_inner`] when it needs no wait: a 36 admitted (or refused) at once;
    /// the payload back when the push has to wait for room or goes to a session owned here
    /// (whose push may wait for its client's credit).
    fn try_push_bound_now(
        &self,
        me: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<Result<(), ActorError>, Bytes> {
        let (owner, push) = match self.bound_push(me, key) {
            Ok(found) => found,
            Err(refused) => return Ok(Err(refused)),
        };
        if owner == *self.node_rid() {
            return Err(payload);
        }
        match self.inner.mesh.try_send_record(
            &owner,
            Record::BoundSessionSend(push),
            Some(payload.clone()),
        ) {
            Ok(()) => Ok(Ok(())),
            Err(zlink_mesh::TrySendError::Full(_)) => Err(payload),
            Err(zlink_mesh::TrySendError::Failed(e)) => Ok(Err(send_error(&owner, e))),
            // A refusal this version does not know: the waiting path decides.
            Err(_) => Err(payload),
        }
    }

    /// The 36 of a push from incarnation `me` with `key` and the node that owns its bound
    /// session, read from the incarnation's binding slot (under the actors lock); without a
    /// current binding, `SessionNotBound` (SB-12), counted where it is detected (SB-5.9).
    fn bound_push(
        &self,
        me: &ActorRef,
        key: DispatchKey,
    ) -> Result<(NodeRid, BoundSessionSend), ActorError> {
        let found = {
            let actors = lock(&self.inner.actors);
            actors
                .live
                .get(me.id())
                .filter(|a| a.actor_ref.object_generation() == me.object_generation())
                .and_then(|local| {
                    let b = local.binding.current().cloned()?;
                    Some((b, local.actor_ref.wire_location()))
                })
        };
        let Some((binding, location)) = found else {
            // Session-not-bound (SB-12), counted where it is detected (SB-5.9).
            self.sessions()
                .flow()
                .reject(FlowRecord::Push, FlowReject::NotBound, me.id());
            return Err(ActorError::SessionNotBound {
                actor_id: me.id().clone(),
            });
        };
        let push = BoundSessionSend {
            actor: me.id().clone(),
            object_generation: me.object_generation(),
            source_node_generation: location.node_generation,
            authority_owner_generation: location.authority_owner_generation,
            session_lifecycle: binding.lifecycle,
            session: binding.session,
            binding_generation: binding.generation,
            key,
        };
        Ok((binding.session_owner, push))
    }
}

/// The node as the session owner's host: a weak handle (the session owner lives inside the
/// node), and the node's count of accepted work, which every session packet enters (held
/// here, so entering it does not take a reference to the node).
pub(crate) struct NodeSessionHost(
    pub(crate) Weak<Inner>,
    pub(crate) Arc<crate::actor::exec::Inflight>,
);

impl NodeSessionHost {
    fn node(&self) -> Option<Node> {
        self.0.upgrade().map(|inner| Node { inner })
    }
}

fn gone() -> Refusal {
    (ErrorKind::Unavailable, "node shutting down".to_owned())
}

impl SessionHost for NodeSessionHost {
    fn send_bind(
        &self,
        to: &NodeRid,
        req: BoundSessionBind,
        timeout: Duration,
    ) -> BoxFuture<(Result<BindSnapshot, Refusal>, Option<AfterBind>)> {
        let node = self.node();
        let to = to.clone();
        Box::pin(async move {
            let Some(node) = node else {
                return (Err(gone()), None);
            };
            if to == *node.node_rid() {
                let me = to.clone();
                let (out, replacement) = node.bind_at_owner(&me, req).await;
                // The 51 only after the terminal is applied (SB-6.1): the session owner runs
                // it once the route is stored.
                let after = replacement
                    .map(|r| -> AfterBind { Box::pin(async move { node.send_replaced(r).await }) });
                return (out, after);
            }
            (node.bind_remote(&to, req, timeout).await, None)
        })
    }

    fn send_relay(
        &self,
        ticket: RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
        admitted: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> RelaySent {
        let Some(node) = self.node() else {
            return RelaySent::Now(Err(gone()));
        };
        let to = ticket.to();
        let deadline = timeout.map(Deadline::from_remaining);
        // A binding with a template is to a peer (`Binding`): only one without is compared
        // with this node.
        if ticket.template().is_none() && to == node.node_rid() {
            let me = to.clone();
            let rec = ticket.record(key, deadline);
            return RelaySent::Later(Box::pin(async move {
                match timeout {
                    None => match node.on_actor_send(&me, rec, payload, None, None).await {
                        None => Ok(None),
                        Some(e) => Err(refusal(&e)),
                    },
                    Some(t) => {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        let deadline = Instant::now() + t;
                        let _ = node
                            .on_actor_send(
                                &me,
                                rec,
                                payload,
                                Some(deadline),
                                Some(ReplyTo::Local(tx)),
                            )
                            .await;
                        // In the actor's queue (or refused).
                        drop(admitted);
                        match tokio::time::timeout(t, rx).await {
                            Ok(Ok(Ok(b))) => Ok(Some(b)),
                            Ok(Ok(Err(e))) => Err(refusal(&e)),
                            Ok(Err(_)) => Err(refusal(&ActorError::Ended)),
                            Err(_) => Err(refusal(&ActorError::DeadlineExceeded)),
                        }
                    }
                }
            }));
        }
        match timeout {
            // A one-way 24 admitted at once costs no future (the common case).
            None => {
                let mesh = &node.inner.mesh;
                // The binding's envelope completed with the key and sequence (the bytes of the
                // record encoded whole, checked in debug builds; no record built otherwise);
                // without a template, the record encoded.
                let sent = match ticket.template() {
                    // Written by the mesh straight into the peer's outbox (a batch sub-record).
                    Some(t) => match t.record(key, ticket.sequence, payload) {
                        Ok(record) => {
                            debug_assert_eq!(
                                Some(record.clone().into_frames().envelope()),
                                zlink_wire::encode(
                                    &Record::ActorSend(ticket.record(key, None)),
                                    zlink_wire::CorrelationId::NONE,
                                    Some(record.payload().clone()),
                                )
                                .ok()
                                .as_ref()
                                .map(zlink_wire::Frames::envelope),
                                "a binding's 24 template encodes its record"
                            );
                            mesh.try_send_template(to, record)
                        }
                        Err(payload) => mesh.try_send_record(
                            to,
                            Record::ActorSend(ticket.record(key, None)),
                            Some(payload),
                        ),
                    },
                    None => mesh.try_send_record(
                        to,
                        Record::ActorSend(ticket.record(key, None)),
                        Some(payload),
                    ),
                };
                match sent {
                    Ok(()) => RelaySent::Now(Ok(None)),
                    Err(TrySendError::Failed(e)) => {
                        RelaySent::Now(Err(refusal(&send_error(to, e))))
                    }
                    Err(TrySendError::Full(p)) => RelaySent::Later({
                        let to = to.clone();
                        Box::pin(async move {
                            node.inner
                                .mesh
                                .send_pending(&to, p)
                                .await
                                .map(|()| None)
                                .map_err(|e| refusal(&send_error(&to, e)))
                        })
                    }),
                    // A refusal this version does not know: not sent, as a failure.
                    Err(_) => RelaySent::Now(Err(refusal(&send_error(to, SendError::Unavailable)))),
                }
            }
            Some(t) => RelaySent::Later({
                let to = to.clone();
                let rec = ticket.record(key, deadline);
                Box::pin(async move {
                    node.inner
                        .mesh
                        .request_record_admitted(
                            &to,
                            Record::ActorSend(rec),
                            Some(payload),
                            t,
                            move || drop(admitted),
                        )
                        .await
                        .map(|r| Some(r.payload.unwrap_or_default()))
                        .map_err(|e| refusal(&request_error(&to, e)))
                })
            }),
        }
    }

    fn push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> BoxFuture<Result<(), SendError>> {
        let node = self.node();
        Box::pin(async move {
            let node = node.ok_or(SendError::Unavailable)?;
            node.inner.mesh.push(session, key, payload).await
        })
    }

    fn try_push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), zlink_mesh::TryPushError> {
        match self.node() {
            Some(node) => node.inner.mesh.try_push(session, key, payload),
            None => Err(zlink_mesh::TryPushError::Failed(SendError::Unavailable)),
        }
    }

    fn close(&self, session: SessionRid, reason: DisconnectReason) {
        if let Some(node) = self.node() {
            node.close_client(session, reason);
        }
    }

    fn accept(&self, session: SessionRid) {
        if let Some(node) = self.node() {
            node.accept_client(session);
        }
    }

    fn get_actor(&self, actor: zlink_wire::ActorId) -> BoxFuture<Result<ActorRef, ActorError>> {
        let node = self.node();
        Box::pin(async move {
            let node = node.ok_or(ActorError::ShuttingDown)?;
            node.get(&actor).await
        })
    }

    fn create_actor(
        &self,
        create: crate::actor::Create,
        or_get: bool,
    ) -> BoxFuture<Result<ActorRef, ActorError>> {
        let node = self.node();
        Box::pin(async move {
            let node = node.ok_or(ActorError::ShuttingDown)?;
            if or_get {
                node.get_or_create(create).await
            } else {
                node.create(create).await
            }
        })
    }

    fn enter_work(&self) -> Option<crate::actor::exec::InflightGuard> {
        Some(self.1.enter())
    }

    fn credit_return(&self) -> std::sync::Weak<dyn crate::backlog::CreditReturn> {
        self.0.clone()
    }

    fn owner_lease(&self) -> OwnerLeaseGeneration {
        self.node().map_or(OwnerLeaseGeneration::new(0), |n| {
            lock(&n.inner.lease).lease().holder.lease_generation
        })
    }
}

impl std::fmt::Debug for NodeSessionHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeSessionHost")
    }
}

/// The node as an actor's host ([`ActorHost`]): calls to other actors and the push path.
#[derive(Debug)]
pub(crate) struct NodeActorHost(pub(crate) Weak<Inner>);

impl NodeActorHost {
    fn node(&self) -> Result<Node, ActorError> {
        self.0
            .upgrade()
            .map(|inner| Node { inner })
            .ok_or(ActorError::ShuttingDown)
    }
}

impl ActorHost for NodeActorHost {
    fn request_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<Result<Bytes, ActorError>> {
        let node = self.node();
        let actor = actor.clone();
        Box::pin(async move { node?.request_raw(&actor, key, payload, timeout).await })
    }

    fn send_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> BoxFuture<Result<(), ActorError>> {
        let node = self.node();
        let actor = actor.clone();
        Box::pin(async move { node?.send_raw(&actor, key, payload).await })
    }

    fn push_bound(
        &self,
        me: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> BoxFuture<Result<(), ActorError>> {
        let node = self.node();
        let me = me.clone();
        Box::pin(async move { node?.push_bound_inner(&me, key, payload).await })
    }

    fn try_push_bound(
        &self,
        me: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<Result<(), ActorError>, Bytes> {
        match self.node() {
            Ok(node) => node.try_push_bound_now(me, key, payload),
            Err(e) => Ok(Err(e)),
        }
    }

    fn get(&self, actor_id: &zlink_wire::ActorId) -> BoxFuture<Result<ActorRef, ActorError>> {
        let node = self.node();
        let actor_id = actor_id.clone();
        Box::pin(async move { node?.get(&actor_id).await })
    }
}

impl Node {
    /// A 38 to the actor owner `to` on another node: its one terminal.
    async fn bind_remote(
        &self,
        to: &NodeRid,
        req: BoundSessionBind,
        timeout: Duration,
    ) -> Result<BindSnapshot, Refusal> {
        let resp = self
            .inner
            .mesh
            .request_record(to, Record::BoundSessionBind(req), None, timeout)
            .await
            .map_err(|e| refusal(&request_error(to, e)))?;
        match resp.record {
            Record::BoundSessionBindReply(r) => r
                .result
                .map_err(|k| (k, "refused by the actor owner".to_owned())),
            other => Err((
                ErrorKind::Unavailable,
                format!("unexpected 38 terminal: {}", other.command()),
            )),
        }
    }
}
