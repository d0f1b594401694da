//! A client's ClientServer records: its requests (the client protocol, each decided by the
//! access settings first), authentication, and its one-way sends to actors.

use std::time::Instant;

use bytes::Bytes;
use zlink_mesh::ReplyHandle;
use zlink_wire::{ActorId, DispatchKey, ErrorKind, SessionRid};

use super::*;
use crate::actor::ActorError;
use crate::actor::exec::{ReplyTo, Work};
use crate::actor::fence::CallFence;
use crate::node::Node;
use crate::node::access::{Authenticated, ClientOperation, Decision, Refusal};
use crate::node::protocol::{self, CallActor, DestroyActor, GetActor};

/// A client's Request (144): the client protocol of [`protocol`]. Each operation is decided by
/// the node's access settings ([`super::access`]) before anything is done for it; one that
/// waits (the store, a peer) holds a place among its session's operations in flight.
///
/// Synchronous (what waits runs in a task of its own, or detached: [`start_permitted`]), so the
/// mesh I/O thread serves a client's operations itself, in arrival order ([`super::Sink`]).
pub(super) fn on_client_request(
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
                start_permitted(node.clone(), reply, (guard, Some(permit)), work);
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
            let node2 = node.clone();
            spawn_relocation(
                node,
                reply,
                permit,
                async move { node2.relocate_op(&req).await },
            );
        }
        ClientOperation::RelocateSpot => {
            let req: protocol::RelocateSpot = match protocol::decode(&payload) {
                Ok(r) => r,
                Err(e) => return answer(reply, Err(e)),
            };
            admit!(reply, None, None);
            let permit = permit!(reply);
            let node2 = node.clone();
            spawn_relocation(node, reply, permit, async move {
                node2.relocate_spot_op(&req).await
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

/// Runs an operator's relocation (`RELOCATE`, `RELOCATE_SPOT`) off the inbound loop and
/// answers `reply` with its report or its refusal. Unlike [`spawn_permitted`] it is not
/// cancelled when the node closes: a relocation is drained by a shutdown and ends as its
/// protocol ends it (a commit, or an abort with its 44s; `Node::run_source`), bounded by its
/// own timeouts — dropping it half-way would leave sealed sessions without their 44.
fn spawn_relocation<F, T>(
    node: &Node,
    reply: ReplyHandle,
    permit: crate::node::access::OperationPermit,
    work: F,
) where
    F: std::future::Future<Output = Result<T, (ErrorKind, String)>> + Send + 'static,
    T: serde::Serialize,
{
    let hold = (node.inflight().enter(), permit);
    node.inner.rt.spawn(async move {
        let _hold = hold;
        match work.await {
            Ok(done) => answer(reply, protocol::encode(&done)),
            Err((kind, detail)) => reply.error(kind, detail),
        }
    });
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
///
/// Synchronous, as [`on_client_request`]: the mesh I/O thread serves it ([`super::Sink`]), in
/// arrival order with the session's requests, within the node's runtime context (what waits
/// goes on in a task).
pub(super) fn on_client_send(node: &Node, session: SessionRid, key: DispatchKey, payload: Bytes) {
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
