//! Inbound records: RouteMesh records from peers and ClientServer records from clients.
//!
//! Two ways in. [`Sink`] runs on the mesh I/O thread and takes the per-message records — client
//! packets (to the session lane) and 24 / 160 from peers (to the actor lane) — straight from
//! the receive pass, without a hop through a task. [`run`], the inbound loop (a tokio task,
//! infrastructure domain), takes everything else and the session events. Neither ever runs an
//! actor handler or waits for one actor or one peer: a full lane keeps what is addressed to it
//! in that target's backlog ([`crate::backlog`], bounded and counted) while the sender's credit
//! stays charged (`Offer::Held`), and work that must wait for a peer or the store runs in its
//! own task.

use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_mesh::{
    ClientEvent, ClientEvents, Inbound, InboundReceiver, InboundSink, Offer, Origin, Record,
    ReplyHandle,
};
use zlink_wire::{
    ActorCall, ActorId, ActorSend, BindOperation, DispatchKey, ErrorKind, NodeGeneration, NodeRid,
    SessionRid,
};

use super::access::{Authenticated, ClientOperation, Decision, OperationPermit, Refusal};
use super::protocol::{self, Activate, CallActor, CreateActor, DestroyActor, GetActor};
use super::{Create, Inner, Node};
use crate::actor::ActorError;
use crate::actor::exec::{InflightGuard, ReplyTo, Work};
use crate::actor::fence::CallFence;
use crate::backlog::{Admitted, CreditReturn, Done, InlineBudget, Intake};
use crate::runtime::{Clock, CycleStamp, HeldRun, Inline};
use crate::session::owner::SessionCache;
use std::sync::{Arc, Weak};

/// The direct delivery of per-message records on the mesh I/O thread (see the module doc).
/// Everything it does is non-blocking: fence and binding checks under the actors lock, a
/// session lookup, and a lane submission that keeps the record in the target's backlog when
/// the lane is full.
///
/// It holds the node weakly: the mesh I/O thread that owns it must not keep the node alive
/// (shutdown waits for the last handle before it joins that thread). Within a receive pass it
/// keeps the node it upgraded for the pass's first record until the pass ends (`end_pass`,
/// before the thread sleeps): one reference count per pass instead of one per record on the
/// node's shared count, which the lane workers' turns take too.
pub(crate) struct Sink {
    node: Weak<Inner>,
    /// The node, held from the first record of this receive pass to its end.
    pass: Option<Node>,
    /// The lane runtime's clock, which meters the inline budget.
    clock: Arc<dyn Clock>,
    /// How long this receive pass may still run records inline.
    budget: InlineBudget,
    /// The session of the last client packet.
    sessions: SessionCache,
    /// The gate right kept after a record run inline, for the next record of its lane in this
    /// pass (a held inline run, `docs/RUNTIME.md`, "Inline delivery"): released at a record
    /// for another lane, once the pass's budget is spent, at the pass's end, and when the sink
    /// is dropped.
    held: HeldRun,
}

/// How the next record of this pass may run: inline in a held run (`held`) while the pass's
/// inline `budget` lasts; once it is spent (or for a record never run here) through its lane,
/// the kept right released first. With the cycle reading the budget check took
/// ([`InlineBudget::poll_mode`]), for the record's admission.
fn pass_mode<'a>(
    budget: &mut InlineBudget,
    clock: &dyn Clock,
    held: &'a HeldRun,
) -> (Inline<'a>, CycleStamp) {
    match budget.poll_mode(clock) {
        (Inline::No, at) => {
            held.release();
            (Inline::No, at)
        }
        (_, at) => (Inline::Held(held), at),
    }
}

impl Sink {
    pub(crate) fn new(node: &Node) -> Self {
        Sink {
            node: Arc::downgrade(&node.inner),
            pass: None,
            clock: node.inner.runtime.config().clock.clone(),
            budget: InlineBudget::new(node.inner.inline_budget),
            sessions: SessionCache::default(),
            held: HeldRun::new(),
        }
    }
}

/// The credit release of a record that waits in a backlog: its sender's window stays charged
/// until the record entered its lane. Made only when the record waits (a record taken at once
/// costs nothing here); the backlog returns the credit of a run of one sender's records at once,
/// to the node that owns it (no handle of the node per record).
fn release(origin: Origin, bytes: u64) -> impl FnOnce() -> Done {
    move || Done::credit(origin, bytes)
}

/// The node for this receive pass (`pass`, upgraded from `node` once per pass); `None` once it
/// is gone.
fn pass_node<'a>(pass: &'a mut Option<Node>, node: &Weak<Inner>) -> Option<&'a Node> {
    if pass.is_none() {
        *pass = Some(Node {
            inner: node.upgrade()?,
        });
    }
    pass.as_ref()
}

impl CreditReturn for Inner {
    fn return_credit(&self, origin: Origin, records: u32, bytes: u64) {
        self.mesh.release_credits(origin, records, bytes);
    }
}

fn offer_of(a: Admitted) -> Offer {
    match a {
        Admitted::Now => Offer::Taken,
        Admitted::Queued => Offer::Held,
    }
}

impl InboundSink for Sink {
    fn offer(&mut self, inbound: Inbound, bytes: u64) -> Offer {
        let Some(node) = pass_node(&mut self.pass, &self.node) else {
            return Offer::Pass(inbound);
        };
        let direct = match (&inbound.origin, &inbound.record) {
            (Origin::Client { .. }, Record::Request(r)) => !protocol::is_framework_key(r.key),
            (Origin::Client { .. }, Record::OneWay(o)) => !protocol::is_framework_key(o.key),
            (
                Origin::Peer { .. },
                Record::ActorSend(_) | Record::ActorCall(_) | Record::BoundSessionSend(_),
            ) => true,
            _ => false,
        };
        if !direct {
            return Offer::Pass(inbound);
        }
        let Inbound {
            origin,
            record,
            payload,
            deadline,
            reply,
            ..
        } = inbound;
        let payload = payload.unwrap_or_default();
        // Only records that may run a turn here meter the pass (a 36 is forwarded, never run).
        let (mode, at) = match record {
            Record::BoundSessionSend(_) => {
                self.held.release();
                (Inline::No, CycleStamp::NONE)
            }
            _ => pass_mode(&mut self.budget, &*self.clock, &self.held),
        };
        // Matched on the record alone (no tuple of origin and record: that copied the record).
        match record {
            // A client's packet, request or one-way: the same path; a one-way record has no
            // reply handle (the codec admits a 147 only with correlation NONE).
            Record::Request(zlink_wire::Request { key, .. })
            | Record::OneWay(zlink_wire::OneWay { key }) => {
                let Origin::Client { session } = origin else {
                    return Offer::Taken; // filtered above
                };
                let done = release(Origin::Client { session }, bytes);
                offer_of(node.sessions().packet_with(
                    &mut self.sessions,
                    session,
                    key,
                    payload,
                    reply,
                    done,
                    mode,
                ))
            }
            Record::ActorSend(rec) => {
                let Origin::Peer {
                    node: sender,
                    generation,
                } = origin
                else {
                    return Offer::Taken; // filtered above
                };
                let reply = reply.map(ReplyTo::Wire);
                actor_send(
                    node,
                    (&sender, generation),
                    rec,
                    (payload, deadline, reply),
                    bytes,
                    (mode, at),
                )
            }
            Record::ActorCall(call) => {
                let Origin::Peer { .. } = origin else {
                    return Offer::Taken; // filtered above
                };
                let done = release(origin, bytes);
                offer_of(on_actor_call(
                    node,
                    call,
                    payload,
                    deadline,
                    reply,
                    Intake {
                        release: Some(done),
                        mode,
                        at,
                    },
                ))
            }
            Record::BoundSessionSend(rec) => {
                let Origin::Peer { .. } = origin else {
                    return Offer::Taken; // filtered above
                };
                let done = release(origin, bytes);
                offer_of(node.sessions().handle_push(rec, payload, Some(done)))
            }
            // Filtered above.
            _ => Offer::Taken,
        }
    }

    /// A client's one-way packet in the compact form (the full record is built only when it
    /// is passed on): the same path as [`Sink::offer`] takes for it.
    fn offer_one_way(
        &mut self,
        origin: Origin,
        key: DispatchKey,
        payload: Bytes,
        bytes: u64,
    ) -> Offer {
        let Origin::Client { session } = origin else {
            return Offer::Pass(Inbound::one_way(origin, key, payload));
        };
        if protocol::is_framework_key(key) {
            return Offer::Pass(Inbound::one_way(origin, key, payload));
        }
        let Some(node) = pass_node(&mut self.pass, &self.node) else {
            return Offer::Pass(Inbound::one_way(origin, key, payload));
        };
        let (mode, _) = pass_mode(&mut self.budget, &*self.clock, &self.held);
        let done = release(Origin::Client { session }, bytes);
        offer_of(node.sessions().packet_with(
            &mut self.sessions,
            session,
            key,
            payload,
            None,
            done,
            mode,
        ))
    }

    /// A peer's one-way 24 in the compact form (the full record is built only when it is
    /// passed on): the same path as [`Sink::offer`] takes for it.
    fn offer_actor_send(
        &mut self,
        sender: &NodeRid,
        generation: NodeGeneration,
        send: ActorSend,
        payload: Bytes,
        deadline: Option<Instant>,
        bytes: u64,
    ) -> Offer {
        let Some(node) = pass_node(&mut self.pass, &self.node) else {
            let origin = Origin::Peer {
                node: sender.clone(),
                generation,
            };
            return Offer::Pass(Inbound::actor_send(origin, send, payload, deadline));
        };
        // b's admission asks the lease standing at the budget check's reading (same place:
        // after the record's receipt, before its admission), one counter read less per 24
        let mode = pass_mode(&mut self.budget, &*self.clock, &self.held);
        actor_send(
            node,
            (sender, generation),
            send,
            (payload, deadline, None),
            bytes,
            mode,
        )
    }

    fn end_pass(&mut self) {
        // The thread may sleep now: no right is kept past the pass.
        self.held.release();
        self.budget.handle_pass_end();
        // Not kept past the pass: the thread may sleep now, and shutdown waits for the handle.
        self.sessions.end_pass();
        self.pass = None;
    }
}

/// A peer's 24 (`rec`, from `sender` in `generation`; its payload, local deadline and reply
/// target) offered to its actor's lane ([`Node::on_actor_send_now`]).
#[inline(always)]
fn actor_send(
    node: &Node,
    (sender, generation): (&NodeRid, NodeGeneration),
    rec: ActorSend,
    (payload, deadline, reply): (Bytes, Option<Instant>, Option<ReplyTo>),
    bytes: u64,
    (mode, at): (Inline<'_>, CycleStamp),
) -> Offer {
    let origin = || Origin::Peer {
        node: sender.clone(),
        generation,
    };
    let done = || Done::credit(origin(), bytes);
    offer_of(node.on_actor_send_now(
        sender,
        rec,
        payload,
        deadline,
        reply,
        Intake {
            release: Some(done),
            mode,
            at,
        },
    ))
}

/// Runs until the mesh closes the inbound channel. Client session events come from the mesh's
/// lossless event stream; records are taken first whenever both are ready, so a session's
/// records handed up before its disconnect are served before the disconnect (the mesh sends
/// the Disconnected event after them, and Connected before the first of them).
pub(crate) async fn run(node: Node, mut rx: InboundReceiver, mut events: Option<ClientEvents>) {
    loop {
        let next = match events.as_mut() {
            Some(ev) => tokio::select! {
                biased;
                inbound = rx.recv() => Next::Record(inbound),
                event = ev.recv() => Next::Event(event),
            },
            None => Next::Record(rx.recv().await),
        };
        match next {
            Next::Record(Some(inbound)) => handle(&node, inbound).await,
            Next::Record(None) => break,
            Next::Event(Some(ClientEvent::Connected { session })) => {
                node.sessions().connected(session);
            }
            Next::Event(Some(ClientEvent::Disconnected { session, cause })) => {
                tracing::debug!(%session, ?cause, "client session ended");
                node.sessions().disconnected(session);
                node.inner.access.forget(session);
            }
            Next::Event(Some(_)) => {}
            Next::Event(None) => events = None,
        }
    }
    tracing::debug!("inbound loop ended");
}

// A stack temporary of the loop, moved at once: boxing the record would cost an allocation
// per inbound record on the hot path.
#[allow(clippy::large_enum_variant)]
enum Next {
    Record(Option<Inbound>),
    Event(Option<ClientEvent>),
}

fn answer(reply: ReplyHandle, out: Result<Bytes, ActorError>) {
    match out {
        Ok(b) => reply.reply(b),
        Err(e) => reply.error(e.kind(), e.to_string()),
    }
}

/// Runs `work` off the inbound loop and answers `reply` with its result — or with `Unavailable`
/// (`ShuttingDown`) once shutdown stops waiting for it, so every accepted request gets exactly
/// one terminal (SB-10). `guard` keeps the request counted as in flight until it is answered.
fn spawn_answered<F>(node: Node, reply: ReplyHandle, guard: InflightGuard, work: F)
where
    F: std::future::Future<Output = Result<Bytes, ActorError>> + Send + 'static,
{
    spawn_permitted(node, reply, (guard, None), work);
}

/// [`spawn_answered`] for a client's operation, which also holds its session's place among
/// the session's operations in flight (`permit`) until it is answered.
fn spawn_permitted<F>(
    node: Node,
    reply: ReplyHandle,
    (guard, permit): (InflightGuard, Option<OperationPermit>),
    work: F,
) where
    F: std::future::Future<Output = Result<Bytes, ActorError>> + Send + 'static,
{
    tokio::spawn(async move {
        let out = tokio::select! {
            out = work => out,
            () = node.closed() => Err(ActorError::ShuttingDown),
        };
        answer(reply, out);
        drop(permit);
        drop(guard);
    });
}

async fn handle(node: &Node, inbound: Inbound) {
    let Inbound {
        origin,
        record,
        payload,
        deadline,
        reply,
        ..
    } = inbound;
    let payload = payload.unwrap_or_default();
    match (origin, record) {
        // Records that came before the sink was installed: the same non-blocking path.
        (Origin::Peer { .. }, Record::ActorCall(call)) => {
            on_actor_call(node, call, payload, deadline, reply, QUEUED);
        }
        (Origin::Peer { node: sender, .. }, Record::ActorSend(rec)) => {
            let reply = reply.map(ReplyTo::Wire);
            node.on_actor_send_now(&sender, rec, payload, deadline, reply, QUEUED);
        }
        (Origin::Peer { node: sender, .. }, Record::BoundSessionBind(rec)) => {
            if rec.operation == BindOperation::Bind {
                // Inline: a bind is one owning step under the actors lock (SB-5.6).
                node.on_bind_record(&sender, rec, reply).await;
            } else {
                // A disconnect waits for the Spot callback: never on the inbound loop.
                let node = node.clone();
                tokio::spawn(async move { node.on_bind_record(&sender, rec, reply).await });
            }
        }
        (Origin::Peer { .. }, Record::BoundSessionSend(rec)) => {
            node.sessions().handle_push(rec, payload, QUEUED.release);
        }
        (
            Origin::Peer {
                node: sender,
                generation,
            },
            Record::BoundSessionReplaced(rec),
        ) => {
            node.sessions().handle_replaced((&sender, generation), &rec);
        }
        // Relocation, session side (SB-8): the seal (42 → 43 on its correlation) and the
        // route update (44, never answered).
        (
            Origin::Peer {
                node: sender,
                generation,
            },
            Record::SessionRelocationSeal(rec),
        ) => {
            node.sessions()
                .handle_seal((&sender, generation), &rec, reply);
        }
        (Origin::Peer { .. }, Record::SessionRelocationRoute(rec)) => {
            node.sessions().handle_route(&rec);
        }
        (Origin::Client { session }, Record::Request(r)) if !protocol::is_framework_key(r.key) => {
            node.sessions()
                .packet(session, r.key, payload, reply, no_release, Inline::No);
        }
        (Origin::Client { session }, Record::OneWay(o)) if !protocol::is_framework_key(o.key) => {
            node.sessions()
                .packet(session, o.key, payload, None, no_release, Inline::No);
        }
        // A record forwarded by a moved actor's old owner (Message Follow): taken here, in
        // the order it was sent, without waiting for its actor.
        (Origin::Peer { .. }, Record::Request(r)) if r.key == protocol::PEER_FOLLOW => {
            match reply {
                Some(reply) => node.on_followed(&payload, reply).await,
                None => tracing::debug!("forwarded record without reply handle"),
            }
        }
        (Origin::Peer { node: sender, .. }, Record::Request(r)) => match reply {
            // The relocation hand-off records, in arrival order on this loop (`relocate/`).
            Some(reply) if r.key == protocol::PEER_RELOCATE_WORK => {
                node.on_relocate_work(&sender, &payload, deadline, reply)
                    .await;
            }
            Some(reply) if r.key == protocol::PEER_RELOCATE_RESTORE => {
                node.on_relocate_restore(sender, &payload, reply);
            }
            Some(reply) if r.key == protocol::PEER_RELOCATE_CUTOVER => {
                node.on_relocate_cutover(&sender, &payload, reply);
            }
            Some(reply) if r.key == protocol::PEER_RELOCATE_RESULT => {
                node.on_relocate_result(&sender, &payload, reply);
            }
            Some(reply) => on_peer_request(node, r.key, payload, reply),
            None => tracing::debug!("peer request without reply handle"),
        },
        (Origin::Client { session }, Record::Request(r)) => match reply {
            Some(reply) => on_client_request(node, session, r.key, payload, deadline, reply).await,
            None => tracing::debug!("client request without reply handle"),
        },
        (Origin::Client { session }, Record::OneWay(o)) => {
            on_client_send(node, session, o.key, payload).await;
        }
        (origin, record) => {
            tracing::debug!(?origin, command = %record.command(), "record not served by the node");
            if let Some(reply) = reply {
                reply.error(
                    ErrorKind::InvalidOperation,
                    "record not served by this node",
                );
            }
        }
    }
}

/// No credit to release: the mesh returned it when the inbound loop took the record. Client
/// packets and 24 / 160 reach the loop only before the sink is installed; the loop's own
/// actor submissions (client `CALL`) are bounded by the lane's item limit.
fn no_release() -> Done {
    Done::nothing()
}

/// How the inbound loop hands records in: no credit to release (see [`no_release`]), never
/// inline (the loop is a tokio task, not the receive pass the inline budget meters).
const QUEUED: Intake<'static, fn() -> Done> = Intake {
    release: None,
    mode: Inline::No,
    at: CycleStamp::NONE,
};

/// 160 ActorCall from a peer: validate the fences and append to the actor's queue (EG-2.1),
/// or run it at once if the lane is idle and `intake` allows it. A full queue keeps it in the
/// actor's backlog (see [`Node::submit_checked_now`]).
fn on_actor_call(
    node: &Node,
    call: ActorCall,
    payload: Bytes,
    deadline: Option<Instant>,
    reply: Option<ReplyHandle>,
    intake: Intake<'_, impl FnOnce() -> Done>,
) -> Admitted {
    node.count_call_in();
    let fence = CallFence::of_call(&call);
    let work = Work {
        key: call.key,
        payload,
        reply: reply.map(ReplyTo::Wire),
        deadline,
        guard: Some(node.inflight().enter()),
    };
    let (admitted, refused) = node.submit_checked_now(&fence, work, None, intake);
    if let Some(e) = refused {
        node.count_send_dropped();
        tracing::debug!(actor = %call.actor, error = %e, "actor send refused");
    }
    admitted
}

fn on_peer_request(node: &Node, key: DispatchKey, payload: Bytes, reply: ReplyHandle) {
    let node = node.clone();
    let guard = node.inflight().enter();
    match key {
        protocol::PEER_ACTIVATE => {
            let work = {
                let node = node.clone();
                async move {
                    let req: Activate = protocol::decode(&payload)?;
                    let r = node.activate_local(req).await?;
                    protocol::encode(&r)
                }
            };
            spawn_answered(node, reply, guard, work);
        }
        protocol::PEER_DESTROY => {
            let work = {
                let node = node.clone();
                async move {
                    let req: DestroyActor = protocol::decode(&payload)?;
                    node.destroy_local(&req.actor).await?;
                    protocol::encode(&())
                }
            };
            spawn_answered(node, reply, guard, work);
        }
        _ => reply.error(
            ErrorKind::NotFound,
            format!("no node handler for key {key}"),
        ),
    }
}

fn call_timeout(node: &Node, req: &CallActor, deadline: Option<Instant>) -> Duration {
    let mut t = if req.timeout_ms == 0 {
        node.request_timeout()
    } else {
        Duration::from_millis(u64::from(req.timeout_ms))
    };
    if let Some(d) = deadline {
        t = t.min(d.saturating_duration_since(Instant::now()));
    }
    t
}

fn create_of(req: CreateActor) -> Result<Create, ActorError> {
    let actor_id =
        ActorId::new(&req.actor_id).map_err(|e| ActorError::Codec(format!("actor id: {e}")))?;
    let node = match req.node {
        Some(n) => Some(
            zlink_wire::NodeRid::new(&n).map_err(|e| ActorError::Codec(format!("node: {e}")))?,
        ),
        None => None,
    };
    Ok(Create {
        actor_type: req.actor_type,
        actor_id,
        node,
        spot: req.spot,
        init: Bytes::from(req.init),
        first: None,
    })
}

/// A client's Request (144): the client protocol of [`protocol`]. Each operation is decided by
/// the node's access settings ([`super::access`]) before anything is done for it; one that
/// waits (the store, a peer) holds a place among its session's operations in flight.
async fn on_client_request(
    node: &Node,
    session: SessionRid,
    key: DispatchKey,
    payload: Bytes,
    deadline: Option<Instant>,
    reply: ReplyHandle,
) {
    let op = operation_of(key);
    node.inner.metrics.client_ops.count(op);
    if !node.accepting() {
        reply.error(ErrorKind::Unavailable, ActorError::ShuttingDown.to_string());
        return;
    }
    if !reply.is_live() {
        // The session ended (e.g. closed as a slow consumer) while its requests waited here:
        // nobody can get the answer, so none is computed (the dropped handle's reply is
        // dropped and counted, `ReplyUndeliverable`).
        return;
    }
    let access = node.inner.access.clone();
    let Some(op) = op else {
        reply.error(ErrorKind::NotFound, format!("no client operation {key}"));
        return;
    };
    if op == ClientOperation::Authenticate {
        return authenticate(node, session, &payload, reply);
    }
    let refuse = |reply: ReplyHandle, why: Refusal| {
        let kind = match why {
            Refusal::Busy => ErrorKind::Unavailable,
            _ => ErrorKind::InvalidOperation,
        };
        reply.error(kind, why.to_string());
    };
    // The decision for `op` on `actor`; the permit of an operation that waits.
    macro_rules! admit {
        ($reply:ident, $actor_type:expr, $actor:expr) => {
            if let Decision::Refuse(why) = access.decide(session, op, $actor_type, $actor) {
                return refuse($reply, why);
            }
        };
    }
    macro_rules! permit {
        ($reply:ident) => {
            match access.begin(session, op) {
                Some(p) => p,
                None => return refuse($reply, Refusal::Busy),
            }
        };
    }
    match op {
        ClientOperation::Call => {
            let req: CallActor = match protocol::decode(&payload) {
                Ok(r) => r,
                Err(e) => return answer(reply, Err(e)),
            };
            let generation = req.actor.object_generation().get();
            admit!(
                reply,
                Some(req.actor.actor_type()),
                Some((req.actor.id(), Some(generation)))
            );
            let timeout = call_timeout(node, &req, deadline);
            let guard = node.inflight().enter();
            if req.actor.node() == node.node_rid() {
                let work = Work {
                    key: DispatchKey::new(req.key),
                    payload: Bytes::from(req.payload),
                    reply: Some(ReplyTo::Wire(reply)),
                    deadline: Some(Instant::now() + timeout),
                    guard: Some(guard),
                };
                // A full lane keeps it in the actor's backlog (bounded by the lane's item
                // limit): this loop does not wait.
                let _ = node.submit_checked_now(&CallFence::of_ref(&req.actor), work, None, QUEUED);
            } else {
                let permit = permit!(reply);
                let work = {
                    let node = node.clone();
                    async move {
                        node.request_raw(
                            &req.actor,
                            DispatchKey::new(req.key),
                            Bytes::from(req.payload),
                            timeout,
                        )
                        .await
                    }
                };
                spawn_permitted(node.clone(), reply, (guard, Some(permit)), work);
            }
        }
        ClientOperation::Create | ClientOperation::GetOrCreate => {
            let c = match protocol::decode(&payload).and_then(create_of) {
                Ok(c) => c,
                Err(e) => return answer(reply, Err(e)),
            };
            admit!(reply, Some(&c.actor_type), Some((&c.actor_id, None)));
            let permit = permit!(reply);
            let guard = node.inflight().enter();
            let work = {
                let node = node.clone();
                async move {
                    let r = if op == ClientOperation::Create {
                        let r = node.create(c).await?;
                        access.created(session, r.id(), r.object_generation().get());
                        r
                    } else {
                        node.get_or_create(c).await?
                    };
                    protocol::encode(&r)
                }
            };
            spawn_permitted(node.clone(), reply, (guard, Some(permit)), work);
        }
        ClientOperation::Get => {
            let id = match protocol::decode::<GetActor>(&payload).and_then(|req| {
                ActorId::new(&req.actor_id).map_err(|e| ActorError::Codec(format!("actor id: {e}")))
            }) {
                Ok(id) => id,
                Err(e) => return answer(reply, Err(e)),
            };
            admit!(reply, None, Some((&id, None)));
            let permit = permit!(reply);
            let guard = node.inflight().enter();
            let work = {
                let node = node.clone();
                async move { protocol::encode(&node.get(&id).await?) }
            };
            spawn_permitted(node.clone(), reply, (guard, Some(permit)), work);
        }
        ClientOperation::Destroy => {
            let req: DestroyActor = match protocol::decode(&payload) {
                Ok(r) => r,
                Err(e) => return answer(reply, Err(e)),
            };
            let generation = req.actor.object_generation().get();
            admit!(
                reply,
                Some(req.actor.actor_type()),
                Some((req.actor.id(), Some(generation)))
            );
            let permit = permit!(reply);
            let guard = node.inflight().enter();
            let work = {
                let node = node.clone();
                async move {
                    node.destroy(&req.actor).await?;
                    access.destroyed(session, req.actor.id(), generation);
                    protocol::encode(&())
                }
            };
            spawn_permitted(node.clone(), reply, (guard, Some(permit)), work);
        }
        ClientOperation::NodeInfo => {
            admit!(reply, None, None);
            answer(reply, protocol::encode(&node.info()));
        }
        ClientOperation::ListActors => {
            admit!(reply, None, None);
            answer(
                reply,
                protocol::decode(&payload)
                    .and_then(|req| protocol::encode(&node.list_actors(&req))),
            );
        }
        ClientOperation::ListSessions => {
            admit!(reply, None, None);
            answer(
                reply,
                protocol::decode(&payload)
                    .and_then(|req| protocol::encode(&node.list_sessions(&req))),
            );
        }
        ClientOperation::Counters => {
            admit!(reply, None, None);
            answer(reply, protocol::encode(&node.counters()));
        }
        ClientOperation::Relocate => {
            let req: protocol::RelocateActor = match protocol::decode(&payload) {
                Ok(r) => r,
                Err(e) => return answer(reply, Err(e)),
            };
            admit!(reply, None, None);
            let permit = permit!(reply);
            let guard = node.inflight().enter();
            let node2 = node.clone();
            tokio::spawn(async move {
                let _permit = (guard, permit);
                match node2.relocate_op(&req).await {
                    Ok(done) => answer(reply, protocol::encode(&done)),
                    Err((kind, detail)) => reply.error(kind, detail),
                }
            });
        }
        ClientOperation::RelocateSpot => {
            let req: protocol::RelocateSpot = match protocol::decode(&payload) {
                Ok(r) => r,
                Err(e) => return answer(reply, Err(e)),
            };
            admit!(reply, None, None);
            let permit = permit!(reply);
            let guard = node.inflight().enter();
            let node2 = node.clone();
            tokio::spawn(async move {
                let _permit = (guard, permit);
                match node2.relocate_spot_op(&req).await {
                    Ok(done) => answer(reply, protocol::encode(&done)),
                    Err((kind, detail)) => reply.error(kind, detail),
                }
            });
        }
        ClientOperation::ListRelocations => {
            admit!(reply, None, None);
            let (relocations, counters) = node.relocations();
            answer(
                reply,
                protocol::encode(&protocol::RelocationList {
                    relocations,
                    counters,
                }),
            );
        }
        // Answered above; a one-way send never comes as a request.
        ClientOperation::Authenticate | ClientOperation::Send => {
            reply.error(ErrorKind::NotFound, format!("no client operation {key}"));
        }
    }
}

/// The framework operation of a client request key.
fn operation_of(key: DispatchKey) -> Option<ClientOperation> {
    Some(match key {
        protocol::CREATE => ClientOperation::Create,
        protocol::GET_OR_CREATE => ClientOperation::GetOrCreate,
        protocol::GET => ClientOperation::Get,
        protocol::CALL => ClientOperation::Call,
        protocol::DESTROY => ClientOperation::Destroy,
        protocol::NODE_INFO => ClientOperation::NodeInfo,
        protocol::LIST_ACTORS => ClientOperation::ListActors,
        protocol::LIST_SESSIONS => ClientOperation::ListSessions,
        protocol::COUNTERS => ClientOperation::Counters,
        protocol::AUTHENTICATE => ClientOperation::Authenticate,
        protocol::RELOCATE => ClientOperation::Relocate,
        protocol::LIST_RELOCATIONS => ClientOperation::ListRelocations,
        protocol::RELOCATE_SPOT => ClientOperation::RelocateSpot,
        _ => return None,
    })
}

/// `AUTHENTICATE`: the session presents the operator credential. A wrong one is refused
/// (`InvalidOperation`, counted); after [`super::access::MAX_CREDENTIAL_FAILURES`] wrong ones
/// the next closes the session (Disconnect `Refused`).
fn authenticate(node: &Node, session: SessionRid, payload: &Bytes, reply: ReplyHandle) {
    let presented = match protocol::decode::<protocol::Authenticate>(payload) {
        Ok(a) => a.credential,
        // Counted like a wrong credential: an undecodable one is not the credential.
        Err(_) => Vec::new(),
    };
    match node.inner.access.authenticate(session, &presented) {
        Authenticated::Operator => answer(reply, protocol::encode(&())),
        Authenticated::Refused => reply.error(
            ErrorKind::InvalidOperation,
            Refusal::BadCredential.to_string(),
        ),
        Authenticated::Close => {
            reply.error(
                ErrorKind::InvalidOperation,
                Refusal::BadCredential.to_string(),
            );
            // Err only once the mesh is closed: nothing left to close.
            let _ = node
                .inner
                .mesh
                .close_client(session, zlink_wire::DisconnectReason::Refused);
        }
    }
}

/// A client's OneWay (147) `CALL`: an actor send; failures are logged and counted. Never
/// waits on the inbound loop: a send that must wait (a full actor lane, a peer's window) waits
/// in its target node's send queue, in order behind the client sends queued there before it
/// (at most [`PEER_SEND_BACKLOG`]; more are dropped, counted).
async fn on_client_send(node: &Node, session: SessionRid, key: DispatchKey, payload: Bytes) {
    node.inner
        .metrics
        .client_ops
        .count((key == protocol::CALL).then_some(ClientOperation::Send));
    if key != protocol::CALL || !node.accepting() {
        node.count_send_dropped();
        return;
    }
    let req: CallActor = match protocol::decode(&payload) {
        Ok(r) => r,
        Err(e) => {
            node.count_send_dropped();
            tracing::debug!(error = %e, "client send: bad payload");
            return;
        }
    };
    let generation = req.actor.object_generation().get();
    if let Decision::Refuse(why) = node.inner.access.decide(
        session,
        ClientOperation::Send,
        Some(req.actor.actor_type()),
        Some((req.actor.id(), Some(generation))),
    ) {
        node.count_send_dropped();
        tracing::debug!(actor = %req.actor, %why, "client send refused");
        return;
    }
    let to = req.actor.node().clone();
    let mut req = Some(req);
    let attempt = |try_now: bool| -> Option<crate::runtime::BoxFuture<()>> {
        let req = req.take().expect("one attempt");
        let node = node.clone();
        let mut send: crate::runtime::BoxFuture<()> = Box::pin(async move {
            if let Err(e) = node
                .send_raw(
                    &req.actor,
                    DispatchKey::new(req.key),
                    Bytes::from(req.payload),
                )
                .await
            {
                node.count_send_dropped();
                tracing::debug!(actor = %req.actor, error = %e, "client send refused");
            }
        });
        if try_now {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if send.as_mut().poll(&mut cx).is_ready() {
                return None;
            }
        }
        // A pending future is polled again by the drain task with its own waker.
        Some(send)
    };
    if node
        .inner
        .peer_sends
        .run(&to, PEER_SEND_BACKLOG, attempt, &node.inner.rt)
        .is_err()
    {
        node.count_send_dropped();
        tracing::debug!(node = %to, "client send dropped: too many sends wait for that node");
    }
}

/// Client sends that may wait for one target node (see [`on_client_send`]).
const PEER_SEND_BACKLOG: usize = 1024;
