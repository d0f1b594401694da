//! Inbound records: RouteMesh records from peers and ClientServer records from clients.
//!
//! Two ways in. [`Sink`] runs on the mesh I/O thread and takes the per-message records — client
//! packets (to the session lane) and 24 / 160 from peers (to the actor lane) — and a client's
//! operations (its framework requests and one-way `CALL`s, in arrival order) straight from
//! the receive pass, without a hop through a task. [`run`], the inbound loop (a tokio task,
//! infrastructure domain), takes everything else and the session events. Neither ever runs an
//! actor handler or waits for one actor or one peer: a full lane keeps what is addressed to it
//! in that target's backlog ([`crate::backlog`], bounded and counted) while the sender's credit
//! stays charged (`Offer::Held`), and work that must wait for a peer or the store runs in its
//! own task.

use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_mesh::{
    ClientEvent, ClientEvents, Inbound, InboundReceiver, Origin, Record, ReplyHandle,
};
use zlink_wire::{ActorCall, ActorId, BindOperation, DispatchKey, ErrorKind};

use super::access::OperationPermit;
use super::protocol::{self, Activate, CallActor, CreateActor, DestroyActor};
use super::{Create, Node};
use crate::actor::ActorError;
use crate::actor::exec::{InflightGuard, ReplyTo, Work};
use crate::actor::fence::CallFence;
use crate::backlog::{Admitted, Done, Intake};
use crate::runtime::{CycleStamp, Inline};

mod client;
mod sink;

use client::{on_client_request, on_client_send};
pub(crate) use sink::Sink;

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
    let rt = node.inner.rt.clone();
    rt.spawn(answered(node, reply, (guard, permit), work));
}

/// [`spawn_permitted`] for work that waits for a peer's reply, started by the mesh I/O thread
/// that received the client's request ([`Sink`]): polled once right here (its record goes to
/// the peer's outbox without a task hop), then polled where its reply wakes it — the I/O thread
/// that received the reply, so the client's answer leaves from there (`Detached`). Anywhere
/// else (a tokio worker: the inbound loop), as [`spawn_permitted`].
fn start_permitted<F>(
    node: Node,
    reply: ReplyHandle,
    (guard, permit): (InflightGuard, Option<OperationPermit>),
    work: F,
) where
    F: std::future::Future<Output = Result<Bytes, ActorError>> + Send + 'static,
{
    let rt = node.inner.rt.clone();
    let fut = answered(node, reply, (guard, permit), work);
    if tokio::runtime::Handle::try_current().is_ok() {
        rt.spawn(fut);
        return;
    }
    // The mesh's timers and the node's tasks belong to the node's runtime.
    let _entered = rt.enter();
    crate::session::Detached::start(Box::pin(fut), rt.clone());
}

/// `work` answered: its result, or `Unavailable` (`ShuttingDown`) once shutdown stops waiting
/// for it; then its permit and in-flight guard are released.
async fn answered<F>(
    node: Node,
    reply: ReplyHandle,
    (guard, permit): (InflightGuard, Option<OperationPermit>),
    work: F,
) where
    F: std::future::Future<Output = Result<Bytes, ActorError>> + Send + 'static,
{
    let out = tokio::select! {
        out = work => out,
        () = node.closed() => Err(ActorError::ShuttingDown),
    };
    answer(reply, out);
    drop(permit);
    drop(guard);
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
            Some(reply) => on_client_request(node, session, r.key, payload, deadline, reply),
            None => tracing::debug!("client request without reply handle"),
        },
        (Origin::Client { session }, Record::OneWay(o)) => {
            on_client_send(node, session, o.key, payload);
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
