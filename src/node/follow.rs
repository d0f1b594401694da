//! Message Follow on this node as the old owner of a moved actor (SB-5.10, SB-5.12, SB-14.3):
//! the node's [`FollowTable`](crate::relocation::FollowTable), the calls the relocation
//! drivers make at seal, commit and abort, and the decision the admission paths ask for a
//! record whose actor is not live here.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use zlink_mesh::{Record, ReplyHandle, RequestError};
use zlink_wire::{
    ActorCall, ActorId, ActorSend, BindOperation, BindSnapshot, BoundSessionBind, BoundSessionTail,
    Deadline, ErrorKind, NodeRid, ObjectGeneration,
};

use super::{BoundCheck, Inner, Node, lock, protocol, request_error};
use crate::actor::ActorError;
use crate::actor::exec::{InflightGuard, ReplyTo, Work};
use crate::actor::fence::CallFence;
use crate::backlog::{Done, Intake};
use crate::relocation::FollowTable;
use crate::relocation::follow::{
    self, FenceUse, FollowCounters, FollowLookup, FollowRefusal, FollowRoute,
};
use crate::relocation::tombstone::Whereabouts;
use crate::runtime::{CycleStamp, Inline};
use crate::store::ActorLocation;

/// The node's Message Follow table, locked (a poisoned lock is taken over: the table stays
/// consistent between its own calls).
pub(super) fn table(node: &Node) -> crate::sync::MutexGuard<'_, FollowTable> {
    node.inner.follow.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    fn follow_now(&self) -> Instant {
        self.inner.clock.now()
    }

    /// Message Follow's counters (forwarded, refused by reason, entries held).
    #[must_use]
    pub fn follow_counters(&self) -> FollowCounters {
        let now = self.follow_now();
        let mut t = table(self);
        t.expire(now);
        t.counters()
    }

    /// A relocation sealed `actor`'s incarnation `object_generation` here and has not committed:
    /// binds naming it answer `Unavailable` (SB-5.12) until [`Node::install_follow`] /
    /// [`Node::end_moved`] (commit) or [`Node::release_follow`] (abort).
    pub(crate) fn seal_follow(&self, actor: ActorId, object_generation: ObjectGeneration) {
        let now = self.follow_now();
        let evicted = {
            let mut t = table(self);
            let before = t.counters().evicted;
            t.seal(actor, object_generation, now);
            t.counters().evicted != before
        };
        // An entry dropped for room may be a seal entry a held tombstone waits on.
        if evicted {
            self.inner.follow_out.unsealed.notify_waiters();
        }
    }

    /// The relocation of that incarnation aborted: its pre-commit seal entry ends.
    pub(crate) fn release_follow(&self, actor: &ActorId, object_generation: ObjectGeneration) {
        table(self).release(actor, object_generation);
        self.inner.follow_out.unsealed.notify_waiters();
    }

    /// The relocation of the incarnation whose fences here were `source` committed at `target`
    /// (the target's committed store record): records for it are forwarded there for
    /// [`crate::relocation::FollowConfig::ttl`].
    pub(crate) fn install_follow(&self, source: &CallFence, target: ActorLocation) {
        let now = self.follow_now();
        table(self).install(source.clone(), target, now);
        self.inner.follow_out.unsealed.notify_waiters();
    }

    /// Where a 38 tombstone's incarnation is (read under the actors lock `actors`, where a
    /// relocation reads the binding it seals): live here, sealed by a relocation in progress
    /// (with the time its seal entry ends by, [`FollowConfig::seal_hold`](crate::relocation::FollowConfig::seal_hold)),
    /// or not live here.
    pub(super) fn whereabouts(
        &self,
        actors: &super::local::Actors,
        actor: &ActorId,
        object_generation: ObjectGeneration,
    ) -> (Whereabouts, Option<Instant>) {
        if !actors.live.contains_key(actor) {
            return (Whereabouts::Away, None);
        }
        let now = self.follow_now();
        let mut t = table(self);
        if t.lookup(actor, object_generation, now) == FollowLookup::Sealed {
            (
                Whereabouts::Sealed,
                t.sealed_until(actor, object_generation),
            )
        } else {
            (Whereabouts::Here, None)
        }
    }

    /// Resolves when a relocation's seal entry ends here (commit, abort, or dropped for room),
    /// or when the node closes. Create it before reading [`Node::whereabouts`] (and `enable`
    /// it) so an end in between is not missed; an entry that ends by its time is waited for
    /// on the node clock ([`Node::follow_seal_ends`]).
    pub(super) fn follow_unsealed(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.follow_out.unsealed.notified()
    }

    /// Resolves when the node clock reaches `until`, the time a seal entry ends by (never
    /// without one).
    pub(super) async fn follow_seal_ends(&self, until: Option<Instant>) {
        match until {
            Some(at) => self.inner.clock.sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// At commit, in one step under the actors lock: ends the local incarnation `target`
    /// names (same ActorId and ObjectGeneration) and installs its follow entry, so no record
    /// finds the actor neither live nor followed. Queued work still in its lane answers
    /// `Unavailable` (the hand-off captured it before). `false` when no such incarnation
    /// lives here (nothing installed).
    #[cfg(test)] // the relocation driver does the same in its own step (`relocate/source.rs`)
    pub(crate) fn end_moved(&self, target: &ActorLocation) -> bool {
        let now = self.follow_now();
        let removed = {
            let mut actors = lock(&self.inner.actors);
            let ours = actors
                .live
                .get(&target.actor_id)
                .is_some_and(|a| a.fence.object_generation == target.object_generation);
            if !ours {
                return false;
            }
            let removed = actors.live.remove(&target.actor_id);
            if let Some(a) = &removed {
                table(self).install(a.fence.clone(), target.clone(), now);
            }
            removed
        };
        self.inner.follow_out.unsealed.notify_waiters();
        if let Some(mut a) = removed {
            a.end(crate::actor::exec::EndReason::Fenced);
            self.leave_spot(&a.spot);
        }
        true
    }

    /// The old owner's decision for `call`, whose actor is not live here (`follow::decide`):
    /// the route to forward on, or the refusal (counted). Called under the actors lock
    /// (`retired` read under it).
    pub(super) fn follow_decide(
        &self,
        retired: Option<ObjectGeneration>,
        call: &CallFence,
        fences: FenceUse,
    ) -> Result<FollowRoute, ActorError> {
        let now = self.follow_now();
        let mut t = table(self);
        follow::decide(
            &mut t,
            self.standing(),
            self.generation(),
            retired,
            call,
            fences,
            now,
        )
        .map_err(|(e, reason)| {
            if let Some(r) = reason {
                t.count_refused(r);
            }
            e
        })
    }

    /// Counts a record refused by Message Follow outside [`Node::follow_decide`].
    pub(super) fn count_follow_refused(&self, reason: FollowRefusal) {
        table(self).count_refused(reason);
    }

    /// Counts a record forwarded to the new owner.
    pub(super) fn count_followed(&self) {
        table(self).count_forwarded();
    }

    /// Counts a 38 tombstone held for a relocation of its incarnation.
    pub(super) fn count_tombstone_held(&self) {
        table(self).count_held();
    }
}

// ---------------------------------------------------------------------------------------------
// Forwarding: the old owner → the new owner, once, in arrival order
// ---------------------------------------------------------------------------------------------

/// How a record reached the admission path: straight from its sender, or forwarded once by a
/// moved actor's old owner (then it is never forwarded again, SB-5.10 "once").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// From its sender: a record for an actor not live here may take Message Follow.
    Direct,
    /// Forwarded by the old owner (`PEER_FOLLOW`): not forwarded again.
    Followed,
}

/// A forwarded record (`PEER_FOLLOW`'s payload): the record as the new owner checks it — the
/// old owner wrote the new owner's fences into it (`FollowRoute::target_fence`) — and the node
/// it came from, the **origin**: the session owner of a 24 or a 38 (whose binding it names), the
/// caller of a 160. The new owner checks a 24's binding and registers a 38's against the origin,
/// never against the old owner that relayed it. The mesh is the trust boundary: any
/// authenticated peer may name an origin, as it may name itself in a 51.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Followed {
    pub origin: NodeRid,
    pub record: FollowedRecord,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// The record a [`Followed`] carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum FollowedRecord {
    /// A direct request or send (160; a request has a deadline).
    Call(ActorCall),
    /// A session relay (24 with its bound-session tail; a request has a deadline).
    Relay(ActorSend),
    /// A bind, unbind or disconnect (38); answered with a [`FollowedBindReply`].
    Bind(BoundSessionBind),
}

/// The new owner's answer to a forwarded 38.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FollowedBindReply {
    pub result: Result<BindSnapshot, (ErrorKind, String)>,
}

/// One forward waiting for the ordered sender.
struct Forward {
    to: NodeRid,
    body: Bytes,
    timeout: Duration,
    /// The original request's reply route (answered exactly once, here), `None` for a send.
    reply: Option<ReplyTo>,
    /// The send's refusal goes back to a local sender that waits for it.
    done: Option<oneshot::Sender<Option<ActorError>>>,
    guard: Option<InflightGuard>,
    /// The record's charge to its sender's receive window, returned once the forward is in
    /// the new owner's send queue (or failed).
    credit: Done,
}

/// Forwards not charged to a sender's window (a local sender's, a followed record's) waiting
/// for the ordered sender at most (beyond: `Unavailable`, counted `queue_full`). Forwards
/// charged to a peer's window are bounded by that window: the peer sends no more than it
/// allows until the forwarder returned their charge.
pub(crate) const FORWARD_QUEUE: usize = 1_024;

/// The old owner's ordered sender of forwards: one task takes them in arrival order and puts
/// each in the new owner's send queue before it takes the next, so records of one sender to
/// one moved actor keep their order; the replies are awaited concurrently.
#[derive(Default)]
pub(crate) struct Forwarder {
    tx: std::sync::OnceLock<mpsc::UnboundedSender<Forward>>,
    /// Uncharged forwards queued now (at most [`FORWARD_QUEUE`]).
    uncharged: crate::sync::atomic::AtomicUsize,
    /// Woken when a pre-commit seal entry ends (commit or abort): the 38 unbinds and
    /// disconnects held for a relocation look again, and are applied here or forwarded
    /// (`relocation::tombstone`).
    unsealed: tokio::sync::Notify,
}

impl Forwarder {
    fn sender(&self, node: &Node) -> &mpsc::UnboundedSender<Forward> {
        self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let weak = Arc::downgrade(&node.inner);
            node.inner.rt.spawn(run_forwarder(weak, rx));
            tx
        })
    }
}

async fn run_forwarder(node: Weak<Inner>, mut rx: mpsc::UnboundedReceiver<Forward>) {
    while let Some(f) = rx.recv().await {
        let Some(inner) = node.upgrade() else {
            break;
        };
        let node = Node { inner };
        let (admitted_tx, admitted_rx) = oneshot::channel::<()>();
        let Forward {
            to,
            body,
            timeout,
            reply,
            done,
            guard,
            credit,
        } = f;
        if !credit.holds_credit() {
            node.inner
                .follow_out
                .uncharged
                .fetch_sub(1, crate::sync::atomic::Ordering::Relaxed);
        }
        let sender = node.clone();
        tokio::spawn(async move {
            let record = Record::Request(zlink_wire::Request {
                key: protocol::PEER_FOLLOW,
                deadline: Deadline::from_remaining(timeout),
            });
            let sent = sender.inner.mesh.request_record_admitted(
                &to,
                record,
                Some(body),
                timeout,
                move || drop(admitted_tx),
            );
            let out = tokio::select! {
                r = sent => r
                    .map(|r| r.payload.unwrap_or_default())
                    .map_err(|e| {
                        if !matches!(e, RequestError::Remote { .. } | RequestError::DeadlineExceeded) {
                            sender.count_follow_refused(FollowRefusal::SendFailed);
                        }
                        request_error(&to, e)
                    }),
                () = sender.closed() => Err(ActorError::ShuttingDown),
            };
            match (reply, done) {
                (Some(r), _) => r.complete(out),
                (None, Some(d)) => {
                    let _ = d.send(out.err());
                }
                (None, None) => {
                    if let Err(e) = out {
                        sender.count_send_dropped();
                        tracing::debug!(%to, error = %e, "forwarded send refused");
                    }
                }
            }
            drop(guard);
        });
        // In the new owner's send queue (or failed): its sender's charge goes back, and the
        // next forward may go.
        let _ = admitted_rx.await;
        node.inner.actor_backlogs.release(credit);
    }
}

impl Node {
    /// Forwards `work` (for `call`, a 160 or — with `bound` — a 24, whose actor is not live
    /// here) once to `route`'s target with the target's fences. A request is answered through
    /// its own reply route when the target's answer comes back (the old owner proxies the
    /// reply: the original correlation, once); a send's refusal is returned through the
    /// receiver when one is wanted (`wait`).
    pub(super) fn follow_work(
        &self,
        route: &FollowRoute,
        call: &CallFence,
        work: Work,
        bound: Option<&BoundCheck<'_>>,
        wait: bool,
        credit: Done,
    ) -> Result<Option<oneshot::Receiver<Option<ActorError>>>, ActorError> {
        let target = route.target_fence();
        let now = Instant::now();
        let remaining = work.deadline.map(|d| d.saturating_duration_since(now));
        let request = work.reply.is_some();
        let deadline = if request {
            Some(Deadline::from_remaining(
                remaining.unwrap_or(self.request_timeout()),
            ))
        } else {
            None
        };
        let (origin, record) = match bound {
            Some(b) => (
                b.node.clone(),
                FollowedRecord::Relay(ActorSend {
                    actor: call.actor_id.clone(),
                    object_generation: target.object_generation,
                    authority_owner_generation: target.authority_owner_generation,
                    owner_lease_generation: target.owner_lease_generation,
                    session_lifecycle: b.lifecycle,
                    key: work.key,
                    deadline,
                    tail: BoundSessionTail {
                        binding_generation: b.generation,
                        session_sequence: b.sequence,
                    },
                }),
            ),
            None => (
                self.node_rid().clone(),
                FollowedRecord::Call(ActorCall {
                    actor: call.actor_id.clone(),
                    object_generation: target.object_generation,
                    authority_owner_generation: target.authority_owner_generation,
                    owner_lease_generation: target.owner_lease_generation,
                    target_node_generation: target.node_generation,
                    key: work.key,
                    deadline,
                }),
            ),
        };
        let mut work = work;
        let payload = std::mem::take(&mut work.payload);
        let reply = work.reply.take();
        let guard = work.guard.take();
        drop(work);
        let body = protocol::encode(&Followed {
            origin,
            record,
            payload: payload.to_vec(),
        });
        let body = match body {
            Ok(b) => b,
            Err(e) => {
                self.inner.actor_backlogs.release(credit);
                return match reply {
                    Some(r) => {
                        r.complete(Err(e));
                        Ok(None)
                    }
                    None => Err(e),
                };
            }
        };
        let (done, rx) = if wait && reply.is_none() {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let out = &self.inner.follow_out;
        let charged = credit.holds_credit();
        let room = charged
            || out
                .uncharged
                .fetch_update(
                    crate::sync::atomic::Ordering::Relaxed,
                    crate::sync::atomic::Ordering::Relaxed,
                    |n| (n < FORWARD_QUEUE).then_some(n + 1),
                )
                .is_ok();
        let forward = Forward {
            to: route.target.owner_node.clone(),
            body,
            timeout: remaining.unwrap_or(self.request_timeout()),
            reply,
            done,
            guard,
            credit,
        };
        let refused = if room {
            match out.sender(self).send(forward) {
                Ok(()) => None,
                Err(mpsc::error::SendError(f)) => {
                    if !charged {
                        out.uncharged
                            .fetch_sub(1, crate::sync::atomic::Ordering::Relaxed);
                    }
                    Some(f)
                }
            }
        } else {
            Some(forward)
        };
        match refused {
            None => {
                self.count_followed();
                Ok(rx)
            }
            Some(f) => {
                self.count_follow_refused(FollowRefusal::QueueFull);
                let error = ActorError::StaleFence {
                    actor_id: call.actor_id.clone(),
                    fence: "location",
                };
                self.inner.actor_backlogs.release(f.credit);
                match f.reply {
                    Some(r) => {
                        r.complete(Err(error));
                        Ok(None)
                    }
                    None => Err(error),
                }
            }
        }
    }

    /// A 38 (bind, unbind or disconnect from `sender`) for an actor not live here: forwarded
    /// once to the new owner with its original reply route — the new owner's terminal is
    /// returned as this 38's terminal (the session owner stores the new owner's route from its
    /// snapshot). `None`: not Message Follow's (the actor is live here, or an unbind /
    /// disconnect without an active route, which the ordinary path answers).
    pub(super) async fn follow_bind(
        &self,
        sender: &NodeRid,
        req: &BoundSessionBind,
        arrival: Arrival,
    ) -> Option<Result<BindSnapshot, ActorError>> {
        let decided = {
            let actors = lock(&self.inner.actors);
            if actors.live.contains_key(&req.actor) {
                // A bind to a sealed incarnation (pre-commit) is `Unavailable` (SB-5.12).
                if req.operation == BindOperation::Bind && arrival == Arrival::Direct {
                    let now = self.follow_now();
                    // The table's guard ends here, before the refusal is counted.
                    let found = table(self).lookup(&req.actor, req.object_generation, now);
                    if found == FollowLookup::Sealed {
                        self.count_follow_refused(FollowRefusal::Sealed);
                        return Some(Err(ActorError::StaleFence {
                            actor_id: req.actor.clone(),
                            fence: "relocation seal",
                        }));
                    }
                }
                return None;
            }
            if arrival == Arrival::Followed {
                self.count_follow_refused(FollowRefusal::AlreadyFollowed);
                return None;
            }
            let retired = actors.retired.get(&req.actor).copied();
            let fence = CallFence {
                actor_id: req.actor.clone(),
                object_generation: req.object_generation,
                authority_owner_generation: req.authority_owner_generation,
                owner_lease_generation: req.owner_lease_generation,
                node_generation: req.target_node_generation,
            };
            self.follow_decide(retired, &fence, FenceUse::Bind)
        };
        let route = match decided {
            Ok(r) => r,
            // An unbind / disconnect that finds no route is answered by the ordinary path.
            Err(_) if req.operation != BindOperation::Bind => return None,
            Err(e) => return Some(Err(e)),
        };
        let target = route.target_fence();
        let mut rec = req.clone();
        rec.target_node_generation = target.node_generation;
        rec.authority_owner_generation = target.authority_owner_generation;
        rec.owner_lease_generation = target.owner_lease_generation;
        let timeout = rec.deadline.as_duration();
        let body = match protocol::encode(&Followed {
            origin: sender.clone(),
            record: FollowedRecord::Bind(rec),
            payload: Vec::new(),
        }) {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        self.count_followed();
        let to = route.target.owner_node.clone();
        let out = tokio::select! {
            r = self.inner.mesh.request(&to, protocol::PEER_FOLLOW, body, timeout) => r,
            () = self.closed() => return Some(Err(ActorError::ShuttingDown)),
        };
        let resp = match out {
            Ok(r) => r,
            Err(e) => {
                if !matches!(
                    e,
                    RequestError::Remote { .. } | RequestError::DeadlineExceeded
                ) {
                    self.count_follow_refused(FollowRefusal::SendFailed);
                }
                return Some(Err(request_error(&to, e)));
            }
        };
        let reply: FollowedBindReply =
            match protocol::decode(resp.payload.as_deref().unwrap_or_default()) {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
        Some(
            reply
                .result
                .map_err(|(kind, detail)| ActorError::Remote { kind, detail }),
        )
    }

    /// `PEER_FOLLOW` on the new owner (from the inbound loop, in the order the old owner sent
    /// them): the forwarded record takes the ordinary admission path with its origin as the
    /// sender and is never forwarded again. A call or relay is submitted without waiting (a full
    /// lane keeps it in the actor's backlog up to the lane's item limit, then `LaneFull`), so
    /// forwards keep their order; a request is answered by the actor's turn (through the 144's
    /// reply), a send once admitted or refused. A bind is one owning step, as a 38 is; an
    /// unbind or disconnect (which waits for the Spot callback) runs in its own task; both
    /// answer with their terminal (then the 51 if a bind replaced a binding).
    pub(super) async fn on_followed(&self, payload: &[u8], reply: ReplyHandle) {
        let followed: Followed = match protocol::decode(payload) {
            Ok(f) => f,
            Err(e) => {
                reply.error(e.kind(), e.to_string());
                return;
            }
        };
        let Followed {
            origin,
            record,
            payload,
        } = followed;
        let payload = Bytes::from(payload);
        let deadline_of = |d: Option<Deadline>| d.map(|d| Instant::now() + d.as_duration());
        let queued = Intake {
            release: None::<fn() -> Done>,
            mode: Inline::No,
            at: CycleStamp::NONE,
        };
        match record {
            FollowedRecord::Call(call) => {
                self.count_call_in();
                let fence = CallFence::of_call(&call);
                let (reply, answer) = split_reply(call.deadline.is_some(), reply);
                let work = Work {
                    key: call.key,
                    payload,
                    reply,
                    deadline: deadline_of(call.deadline),
                    guard: Some(self.inflight().enter()),
                };
                let (_, refused) =
                    self.submit_routed_now(&fence, work, None, queued, Arrival::Followed);
                if refused.is_some() {
                    self.count_send_dropped();
                }
                answer_send(answer, refused);
            }
            FollowedRecord::Relay(rec) => {
                let fence = CallFence {
                    actor_id: rec.actor.clone(),
                    object_generation: rec.object_generation,
                    authority_owner_generation: rec.authority_owner_generation,
                    owner_lease_generation: rec.owner_lease_generation,
                    node_generation: self.generation(),
                };
                let (reply, answer) = split_reply(rec.deadline.is_some(), reply);
                let work = Work {
                    key: rec.key,
                    payload,
                    reply,
                    deadline: deadline_of(rec.deadline),
                    guard: Some(self.inflight().enter()),
                };
                let bound = BoundCheck {
                    node: &origin,
                    lifecycle: rec.session_lifecycle,
                    generation: rec.tail.binding_generation,
                    sequence: rec.tail.session_sequence,
                };
                let (_, refused) =
                    self.submit_routed_now(&fence, work, Some(&bound), queued, Arrival::Followed);
                if refused.is_some() {
                    self.count_send_dropped();
                }
                answer_send(answer, refused);
            }
            FollowedRecord::Bind(rec) => {
                let operation = rec.operation;
                let node = self.clone();
                let bind = async move {
                    let (out, replacement) = node
                        .bind_at_owner_routed(&origin, rec, Arrival::Followed)
                        .await;
                    match protocol::encode(&FollowedBindReply { result: out }) {
                        Ok(b) => reply.reply(b),
                        Err(e) => reply.error(e.kind(), e.to_string()),
                    }
                    if let Some(r) = replacement {
                        node.send_replaced(r).await;
                    }
                };
                if operation == BindOperation::Bind {
                    bind.await;
                } else {
                    tokio::spawn(bind);
                }
            }
        }
    }
}

/// A forwarded request keeps its reply route for the actor's turn; a send's 144 is answered
/// here once it was admitted or refused.
fn split_reply(request: bool, reply: ReplyHandle) -> (Option<ReplyTo>, Option<ReplyHandle>) {
    if request {
        (Some(ReplyTo::Wire(reply)), None)
    } else {
        (None, Some(reply))
    }
}

/// A forwarded send's answer: empty once admitted, the refusal otherwise.
fn answer_send(answer: Option<ReplyHandle>, refused: Option<ActorError>) {
    if let Some(r) = answer {
        match refused {
            None => r.reply(Bytes::new()),
            Some(e) => r.error(e.kind(), e.to_string()),
        }
    }
}

/// Message Follow's counters as `NODE_INFO` / `COUNTERS` serve them (every key).
pub(super) fn counters_map(c: &FollowCounters) -> std::collections::BTreeMap<String, u64> {
    let mut m: std::collections::BTreeMap<String, u64> = [
        ("entries", c.entries),
        ("installed", c.installed),
        ("expired", c.expired),
        ("evicted", c.evicted),
        ("forwarded", c.forwarded),
        ("held", c.held),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    for r in FollowRefusal::ALL {
        m.insert(format!("refused/{}", r.as_str()), c.refused(r));
    }
    m
}

#[cfg(test)]
#[path = "follow_tests.rs"]
mod tests;
