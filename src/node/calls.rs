//! Calls to actors: typed and raw request / send (local queue or a 160 ActorCall to the
//! owner, never resent, SB-12), the fence-checked local submission, Spot timers, and the
//! mapping of mesh errors to [`ActorError`].

use crate::session::{FlowRecord, FlowReject};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use zlink_mesh::{Record, RequestError, SendError, TrySendError};
use zlink_wire::{ActorCall, CorrelationId, Deadline, DispatchKey, NodeRid};

use super::follow::Arrival;
use super::{BoundCheck, Node, lock};
use crate::actor::exec::{Mailbox, ReplyTo, Work};
use crate::actor::fence::{self, CallFence};
use crate::actor::{ActorError, ActorRef, Message, to_bytes};
use crate::backlog::{Admitted, Done, Intake};
use crate::relocation::follow::{FenceUse, FollowRefusal, FollowRoute};
use crate::runtime::CycleStamp;

impl Node {
    /// Sends a typed request to `actor` and waits for its typed reply, at most `timeout`.
    ///
    /// # Errors
    /// See [`Node::request_raw`]; a reply that does not decode as `M::Reply` is
    /// [`ActorError::Codec`].
    pub async fn request<M: Message>(
        &self,
        actor: &ActorRef,
        msg: &M,
        timeout: Duration,
    ) -> Result<M::Reply, ActorError> {
        let payload = to_bytes(msg).map_err(|e| ActorError::Codec(format!("payload: {e}")))?;
        let reply = self.request_raw(actor, M::KEY, payload, timeout).await?;
        rmp_serde::from_slice(&reply).map_err(|e| ActorError::Codec(format!("reply: {e}")))
    }

    /// Sends a typed message to `actor` (no reply). Delivery to a remote owner is at most once;
    /// a handler failure is logged on the owner (EG-15).
    ///
    /// # Errors
    /// Local refusals (stale ref, full lane) and admission failures; remote refusals are only
    /// logged on the owner.
    pub async fn send<M: Message>(&self, actor: &ActorRef, msg: &M) -> Result<(), ActorError> {
        let payload = to_bytes(msg).map_err(|e| ActorError::Codec(format!("payload: {e}")))?;
        self.send_raw(actor, M::KEY, payload).await
    }

    /// A request with an encoded payload: local owner → straight into the actor's queue;
    /// remote owner → a 160 ActorCall on the relay connection, the reply back on the
    /// completion connection. Exactly one terminal; never resent (SB-12).
    ///
    /// # Errors
    /// `InvalidOperation` (another incarnation), `Unavailable` (stale fence, owner down, lane
    /// full), `NotFound` (destroyed, unknown key), `DeadlineExceeded`, `Internal` (the handler
    /// failed, EG-15).
    pub async fn request_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, ActorError> {
        if self.is_local(actor.node()) {
            let (tx, rx) = oneshot::channel();
            let fence = CallFence::of_ref(actor);
            // A refusal is delivered through the reply channel.
            let submit = self.submit_local(
                &fence,
                Work {
                    key,
                    payload,
                    reply: Some(ReplyTo::Local(tx)),
                    deadline: Some(Instant::now() + timeout),
                    guard: None,
                },
            );
            let waited = async move {
                let _ = submit.await;
                rx.await
            };
            return match tokio::time::timeout(timeout, waited).await {
                Ok(Ok(out)) => out,
                Ok(Err(_)) => Err(ActorError::ActorNotFound {
                    actor_id: actor.id().clone(),
                }),
                Err(_) => Err(ActorError::DeadlineExceeded),
            };
        }
        if let Some(e) = self.known_stale(actor) {
            return Err(e);
        }
        self.inner.calls_out.fetch_add(1, Ordering::Relaxed);
        let record = Record::ActorCall(actor_call(actor, key, Some(timeout)));
        let resp = self
            .inner
            .mesh
            .request_record(actor.node(), record, Some(payload), timeout)
            .await
            .map_err(|e| request_error(actor.node(), e))?;
        Ok(resp.payload.unwrap_or_default())
    }

    /// A send with an encoded payload (see [`Node::send`]).
    ///
    /// # Errors
    /// As [`Node::send`].
    pub async fn send_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), ActorError> {
        if self.is_local(actor.node()) {
            return match self
                .submit_local(
                    &CallFence::of_ref(actor),
                    Work {
                        key,
                        payload,
                        reply: None,
                        deadline: None,
                        guard: None,
                    },
                )
                .await
            {
                None => Ok(()),
                Some(e) => Err(e),
            };
        }
        if let Some(e) = self.known_stale(actor) {
            return Err(e);
        }
        self.inner.calls_out.fetch_add(1, Ordering::Relaxed);
        let to = actor.node();
        let frames = one_way_call_frames(actor_call(actor, key, None), payload)
            .map_err(|e| ActorError::Codec(e.to_string()))?;
        let mesh = &self.inner.mesh;
        match mesh.try_send_frames(to, frames) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(pending)) => mesh
                .send_pending(to, pending)
                .await
                .map_err(|e| send_error(to, e)),
            Err(TrySendError::Failed(e)) => Err(send_error(to, e)),
            // A refusal this version does not know: not sent, as a failure.
            Err(_) => Err(send_error(to, SendError::Unavailable)),
        }
    }

    /// A ref to another node whose NodeGeneration is not the one this node sees up for that
    /// node: its owner would refuse it (`Unavailable`, target generation ≠ its process), so it
    /// is refused here, with the owner's error, and never forwarded. `None` when the peer is
    /// not up (the send path answers that) or the generations match.
    fn known_stale(&self, actor: &ActorRef) -> Option<ActorError> {
        let known = self.inner.mesh.peer_generation(actor.node())?;
        (known != actor.location().node_generation).then(|| ActorError::StaleFence {
            actor_id: actor.id().clone(),
            fence: "node generation",
        })
    }

    /// Validates `call` against the local incarnation and appends `work` to its queue,
    /// waiting while the queue is full (backpressure; work never runs inline, EG-6.3). A
    /// refusal of a request is answered through its reply (and `None` returned); the refusal
    /// of a send is returned.
    pub(crate) async fn submit_local(&self, call: &CallFence, work: Work) -> Option<ActorError> {
        self.submit_checked(call, work, None).await
    }

    /// [`Node::submit_local`] with the bound-session check of a 24 (SB-5.3): under the same
    /// lock as the fence check, the record's binding identity must be the incarnation's current
    /// binding, else it is refused and counted.
    pub(crate) async fn submit_checked(
        &self,
        call: &CallFence,
        work: Work,
        bound: Option<&BoundCheck<'_>>,
    ) -> Option<ActorError> {
        self.submit_routed(call, work, bound, Arrival::Direct).await
    }

    /// [`Node::submit_checked`] for a record that arrived `arrival`: a record for an actor not
    /// live here takes Message Follow only if it was not forwarded already.
    pub(crate) async fn submit_routed(
        &self,
        call: &CallFence,
        work: Work,
        bound: Option<&BoundCheck<'_>>,
        arrival: Arrival,
    ) -> Option<ActorError> {
        let mut work = work;
        match self.check_submit(call, &mut work, bound, CycleStamp::NONE, arrival) {
            Checked::Done(e) => e,
            // A failed submission dropped the work, which answered a request already.
            Checked::Ready(mailbox, _) => mailbox.submit(work).await.err(),
            // A send's refusal by the new owner comes back to a sender that waits here.
            Checked::Follow(route) => {
                match self.follow_work(&route, call, work, bound, true, Done::nothing()) {
                    Ok(Some(rx)) => rx.await.unwrap_or(None),
                    Ok(None) => None,
                    Err(e) => Some(e),
                }
            }
        }
    }

    /// [`Node::submit_checked`] without waiting (the mesh I/O thread delivers with it): an idle
    /// lane may run `work` right here (`intake.mode`), a full one keeps it in the actor's
    /// backlog, FIFO behind what waits there ([`Admitted::Queued`]). What bounds a backlog:
    /// with `intake.release`, the sender's window (its credit for the record stays charged
    /// until the record entered the lane, then the release runs); without, the application
    /// lane's item limit, past which the record is refused with `LaneFull`, counted. Either way
    /// a full lane holds only what is addressed to it.
    pub(crate) fn submit_checked_now(
        &self,
        call: &CallFence,
        work: Work,
        bound: Option<&BoundCheck<'_>>,
        intake: Intake<'_, impl FnOnce() -> Done>,
    ) -> (Admitted, Option<ActorError>) {
        self.submit_routed_now(call, work, bound, intake, Arrival::Direct)
    }

    /// [`Node::submit_checked_now`] for a record that arrived `arrival` (see
    /// [`Node::submit_routed`]).
    pub(crate) fn submit_routed_now(
        &self,
        call: &CallFence,
        work: Work,
        bound: Option<&BoundCheck<'_>>,
        intake: Intake<'_, impl FnOnce() -> Done>,
        arrival: Arrival,
    ) -> (Admitted, Option<ActorError>) {
        let Intake { release, mode, at } = intake;
        let mut work = work;
        let (mailbox, at) = match self.check_submit(call, &mut work, bound, at, arrival) {
            Checked::Done(e) => return (Admitted::Now, e),
            Checked::Ready(m, at) => (m, at),
            // Forwarded in arrival order; a request is answered through its reply route. A
            // record charged to its sender's window keeps the charge until the forward is in
            // the new owner's send queue: the sender's window, not a refusal, bounds what
            // waits for the forwarder.
            Checked::Follow(route) => {
                let credit = release.map_or_else(Done::nothing, |r| r());
                let charged = credit.holds_credit();
                // The forward returns a charge once, whatever becomes of it.
                let admitted = if charged {
                    Admitted::Queued
                } else {
                    Admitted::Now
                };
                return match self.follow_work(&route, call, work, bound, false, credit) {
                    Ok(_) => (admitted, None),
                    Err(e) => (admitted, Some(e)),
                };
            }
        };
        let backlogs = &self.inner.actor_backlogs;
        if release.is_none() && backlogs.queued(&call.actor_id) >= self.inner.held_limit {
            backlogs.count_refused();
            let error = ActorError::LaneFull {
                actor_id: call.actor_id.clone(),
            };
            return match work.reply.take() {
                Some(r) => {
                    r.complete(Err(error));
                    (Admitted::Now, None)
                }
                None => (Admitted::Now, Some(error)),
            };
        }
        // A turn started inline at the first offer asks its lease standing at the admission's
        // reading: same thread, nothing awaited between.
        let pending = match mailbox.prepare(work, at) {
            Ok(p) => p,
            Err(e) => return (Admitted::Now, Some(e)),
        };
        let done = || match release {
            Some(r) => r(),
            None => Done::nothing(),
        };
        match backlogs.submit(&call.actor_id, pending, done, mode) {
            Ok(a) => (a, None),
            // The dropped work answered a request already.
            Err(e) => (Admitted::Now, Some(mailbox.error_of(e))),
        }
    }

    /// The checks of [`Node::submit_checked`]: fences, the 24's binding, the activation
    /// barrier. `Ready` when the work may enter the actor's lane (it stays with the caller:
    /// not moved in and out); `Done` when it was held behind the barrier (taken, a vacant work
    /// left in its place) or refused (a request answered through its reply).
    ///
    /// `given`: the caller's cycle reading for this record, taken after its receipt and just
    /// before this check (the inline budget's, `Intake::at`), or `CycleStamp::NONE`: the
    /// check reads the counter itself.
    fn check_submit(
        &self,
        call: &CallFence,
        work: &mut Work,
        bound: Option<&BoundCheck<'_>>,
        given: CycleStamp,
        arrival: Arrival,
    ) -> Checked {
        // One lock for the fence check and the barrier decision, so a record is held only by
        // the incarnation that admitted it.
        // The admission's cycle reading: the standing below is asked at it.
        let at: CycleStamp;
        let checked = {
            let mut guard = lock(&self.inner.actors);
            let actors = &mut *guard;
            let live = actors.live.get_mut(&call.actor_id);
            // The retired record matters only for an actor not live here (a second lookup).
            let retired = match live {
                None => actors.retired.get(&call.actor_id).copied(),
                Some(_) => None,
            };
            let gate = &self.inner.gate;
            at = if given.is_some() { given } else { gate.stamp() };
            let checked = fence::check_call(
                gate.standing_at(at),
                self.generation(),
                live.as_deref().map(|a| &a.fence),
                retired,
                call,
            );
            // Not live here and never destroyed here: Message Follow decides (SB-5.10) — a
            // moved incarnation's record is forwarded once, anything else refused with the
            // failure table's kind. A record forwarded already is not forwarded again.
            let checked = match checked {
                Err(ActorError::StaleFence {
                    fence: "location", ..
                }) if live.is_none() => match arrival {
                    Arrival::Direct => match self.follow_decide(retired, call, FenceUse::Call) {
                        Ok(route) => return Checked::Follow(route),
                        Err(e) => Err(e),
                    },
                    Arrival::Followed => {
                        self.count_follow_refused(FollowRefusal::AlreadyFollowed);
                        checked
                    }
                },
                c => c,
            };
            // SB-4.1, SB-12: a 24 of another incarnation, or of one destroyed here, is
            // refused because its binding ended with that incarnation (a stale binding
            // fence, `Unavailable`, as the session owner answers a relay through a retired
            // binding), not by comparing ObjectGeneration as a message target.
            let checked = match (checked, bound) {
                (
                    Err(ActorError::GenerationMismatch { .. } | ActorError::ActorNotFound { .. }),
                    Some(_),
                ) => {
                    self.inner.sessions.flow().reject(
                        FlowRecord::Relay,
                        FlowReject::BindingRetired,
                        &call.actor_id,
                    );
                    Err(ActorError::StaleFence {
                        actor_id: call.actor_id.clone(),
                        fence: "binding",
                    })
                }
                (c, _) => c,
            };
            let bound_ok = match (&checked, live.as_deref(), bound) {
                (Ok(()), Some(a), Some(b)) => a
                    .binding
                    .check_relay(b.node, b.lifecycle, b.generation)
                    .map_err(|r| {
                        self.inner
                            .sessions
                            .flow()
                            .reject(FlowRecord::Relay, r, &call.actor_id);
                        ActorError::StaleFence {
                            actor_id: call.actor_id.clone(),
                            fence: "binding",
                        }
                    }),
                _ => Ok(()),
            };
            let checked = checked.and(bound_ok);
            match (checked, live) {
                (Err(e), _) => Err(e),
                (Ok(()), None) => Err(ActorError::StaleFence {
                    actor_id: call.actor_id.clone(),
                    fence: "location",
                }),
                // The activation barrier is closed: wait behind the first record (EG-14 (4)).
                (Ok(()), Some(a)) => match a.held.as_mut() {
                    Some(held) if held.len() >= self.inner.held_limit => {
                        Err(ActorError::LaneFull {
                            actor_id: call.actor_id.clone(),
                        })
                    }
                    Some(held) => {
                        held.push_back(std::mem::replace(work, Work::vacant()));
                        return Checked::Done(None);
                    }
                    None => Ok(a.mailbox.clone()),
                },
            }
        };
        if let (Err(error), Some(_)) = (&checked, bound) {
            // A 24 refused by the incarnation's fences (binding refusals are counted above).
            if !matches!(
                error,
                ActorError::StaleFence {
                    fence: "binding",
                    ..
                }
            ) {
                let reason = FlowReject::of_fence(error);
                self.inner
                    .sessions
                    .flow()
                    .reject(FlowRecord::Relay, reason, &call.actor_id);
            }
        }
        match checked {
            Ok(mailbox) => Checked::Ready(mailbox, at),
            Err(error) => Checked::Done(match work.reply.take() {
                Some(r) => {
                    r.complete(Err(error));
                    None
                }
                None => Some(error),
            }),
        }
    }

    /// Starts a timer on the owner of `actor` (this node): every `period` the actor's Spot
    /// timer appends `msg` to the actor's queue as a send (EG-7.1 timer work; a tick that finds
    /// the lane full is skipped). The timer ends with the incarnation (destroy, shutdown).
    ///
    /// # Errors
    /// `InvalidOperation` when the actor is not owned by this node or `actor` is not its current
    /// incarnation; `Unavailable` for a stale fence.
    pub fn start_timer<M: Message>(
        &self,
        actor: &ActorRef,
        period: Duration,
        msg: &M,
    ) -> Result<(), ActorError> {
        if !self.is_local(actor.node()) {
            return Err(ActorError::Codec(format!(
                "timers run on the actor's owner ({}), not on {}",
                actor.node(),
                self.node_rid()
            )));
        }
        let payload = Bytes::from(
            rmp_serde::to_vec_named(msg).map_err(|e| ActorError::Codec(format!("payload: {e}")))?,
        );
        let mut guard = lock(&self.inner.actors);
        let actors = &mut *guard;
        let retired = actors.retired.get(actor.id()).copied();
        let fence = CallFence::of_ref(actor);
        fence::check_call(
            self.standing(),
            self.generation(),
            actors.live.get(actor.id()).map(|a| &a.fence),
            retired,
            &fence,
        )?;
        let Some(local) = actors.live.get_mut(actor.id()) else {
            return Err(ActorError::ActorNotFound {
                actor_id: actor.id().clone(),
            });
        };
        self.start_local_timer(
            local,
            crate::relocation::records::TimerRecord {
                period_us: u64::try_from(period.as_micros()).unwrap_or(u64::MAX),
                key: M::KEY.get(),
                payload: payload.to_vec(),
            },
        )
    }

    /// Starts the timer `spec` of the local incarnation `local` (under the actors lock): its
    /// ticks are sends to the actor's lane from its Spot's timer. A period under 1 ms is
    /// raised to 1 ms.
    pub(super) fn start_local_timer(
        &self,
        local: &mut super::local::LocalActor,
        spec: crate::relocation::records::TimerRecord,
    ) -> Result<(), ActorError> {
        let period = Duration::from_micros(spec.period_us).max(Duration::from_millis(1));
        let key = DispatchKey::new(spec.key);
        let payload = Bytes::from(spec.payload.clone());
        let spot = lock(&self.inner.spots)
            .get(&local.spot)
            .map(|s| s.spot.clone())
            .ok_or(ActorError::ShuttingDown)?;
        let mailbox = local.mailbox.clone();
        let gate = self.inner.gate.clone();
        let skipped = self.inner.timer_ticks_skipped.clone();
        let handle = spot.start_timer(period, move || {
            // A tick is new work: past the lease deadline or during shutdown it is skipped.
            if let Err(e) = gate.standing().admit() {
                skipped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "timer tick skipped");
                return;
            }
            let work = Work {
                key,
                payload: payload.clone(),
                reply: None,
                deadline: None,
                guard: None,
            };
            if let Err(e) = mailbox.tell(work) {
                skipped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "timer tick skipped");
            }
        })?;
        local.timers.push(super::local::LocalTimer { handle, spec });
        Ok(())
    }
}

/// The frames of a one-way 160 `call` carrying `payload`. A one-way 160's envelope is the same
/// for every send to one incarnation with one key, so each thread keeps the frames of the last
/// one it encoded (one entry, its payload empty: a few hundred bytes at most), and a send that
/// repeats it shares that envelope ([`zlink_wire::Frames::with_payload`]) instead of encoding
/// and allocating it again.
fn one_way_call_frames(
    call: ActorCall,
    payload: Bytes,
) -> Result<zlink_wire::Frames, zlink_wire::EncodeError> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(ActorCall, zlink_wire::Frames)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        // Nothing below calls back into this: the borrow is never taken twice.
        let mut last = last.borrow_mut();
        let payload = match last.as_ref() {
            Some((c, template)) if *c == call => match template.with_payload(payload) {
                Ok(frames) => return Ok(frames),
                Err(payload) => payload,
            },
            _ => payload,
        };
        let record = Record::ActorCall(call);
        let frames = zlink_wire::encode(&record, CorrelationId::NONE, Some(payload))?;
        if let (Ok(template), Record::ActorCall(call)) = (frames.with_payload(Bytes::new()), record)
        {
            *last = Some((call, template));
        }
        Ok(frames)
    })
}

pub(crate) fn actor_call(
    actor: &ActorRef,
    key: DispatchKey,
    timeout: Option<Duration>,
) -> ActorCall {
    let loc = actor.location();
    ActorCall {
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        target_node_generation: loc.node_generation,
        key,
        deadline: timeout.map(Deadline::from_remaining),
    }
}

pub(crate) fn request_error(node: &NodeRid, e: RequestError) -> ActorError {
    match e {
        RequestError::Remote { kind, detail } => ActorError::Remote { kind, detail },
        RequestError::DeadlineExceeded => ActorError::DeadlineExceeded,
        RequestError::Send(s) => send_error(node, s),
        _ => ActorError::NodeUnavailable { node: node.clone() },
    }
}

pub(crate) fn send_error(node: &NodeRid, e: SendError) -> ActorError {
    match e {
        SendError::DeadlineExceeded(_) => ActorError::DeadlineExceeded,
        SendError::TooLarge { .. } | SendError::Encode(_) => ActorError::Codec(e.to_string()),
        _ => ActorError::NodeUnavailable { node: node.clone() },
    }
}

/// What [`Node::check_submit`] decided.
enum Checked {
    /// Answered or refused without entering the lane (a refused send's error).
    Done(Option<ActorError>),
    /// May enter the actor's lane (with the caller's work); the cycle reading the admission's
    /// standing was asked at.
    Ready(Mailbox, CycleStamp),
    /// The actor moved away from here: forward the work once on this route (Message Follow).
    Follow(FollowRoute),
}
