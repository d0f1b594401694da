//! The node's inbound loop: RouteMesh records from peers and ClientServer records from clients
//! (infrastructure domain: it never runs an actor handler, it only validates and enqueues;
//! anything that needs the store runs in its own task).

use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_mesh::{
    ClientEvent, ClientEvents, Inbound, InboundReceiver, Origin, Record, ReplyHandle,
};
use zlink_wire::{ActorCall, ActorId, BindOperation, DispatchKey, ErrorKind};

use super::protocol::{self, Activate, CallActor, CreateActor, DestroyActor, GetActor};
use super::{Create, Node};
use crate::actor::ActorError;
use crate::actor::exec::{ReplyTo, Work};
use crate::actor::fence::CallFence;

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
        (Origin::Peer { .. }, Record::ActorCall(call)) => {
            on_actor_call(node, call, payload, deadline, reply).await;
        }
        (Origin::Peer { node: sender, .. }, Record::ActorSend(rec)) => {
            node.on_actor_send(&sender, rec, payload, deadline, reply.map(ReplyTo::Wire))
                .await;
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
            node.sessions().handle_push(rec, payload).await;
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
        (Origin::Client { session }, Record::Request(r)) if !protocol::is_framework_key(r.key) => {
            node.sessions().packet(session, r.key, payload, reply).await;
        }
        (Origin::Client { session }, Record::OneWay(o)) if !protocol::is_framework_key(o.key) => {
            node.sessions().packet(session, o.key, payload, None).await;
        }
        (Origin::Peer { .. }, Record::Request(r)) => match reply {
            Some(reply) => on_peer_request(node, r.key, payload, reply),
            None => tracing::debug!("peer request without reply handle"),
        },
        (Origin::Client { .. }, Record::Request(r)) => match reply {
            Some(reply) => on_client_request(node, r.key, payload, deadline, reply).await,
            None => tracing::debug!("client request without reply handle"),
        },
        (Origin::Client { .. }, Record::OneWay(o)) => on_client_send(node, o.key, payload).await,
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

/// 160 ActorCall from a peer: validate the fences and append to the actor's queue (EG-2.1).
/// A full queue makes this loop wait (backpressure on the relay connection); it never runs the
/// work inline.
async fn on_actor_call(
    node: &Node,
    call: ActorCall,
    payload: Bytes,
    deadline: Option<Instant>,
    reply: Option<ReplyHandle>,
) {
    node.count_call_in();
    let fence = CallFence::of_call(&call);
    let work = Work {
        key: call.key,
        payload,
        reply: reply.map(ReplyTo::Wire),
        deadline,
        guard: Some(node.inflight().enter()),
    };
    if let Some(e) = node.submit_local(&fence, work).await {
        node.count_send_dropped();
        tracing::debug!(actor = %call.actor, error = %e, "actor send refused");
    }
}

fn on_peer_request(node: &Node, key: DispatchKey, payload: Bytes, reply: ReplyHandle) {
    let node = node.clone();
    let guard = node.inflight().enter();
    match key {
        protocol::PEER_ACTIVATE => {
            tokio::spawn(async move {
                let out = async {
                    let req: Activate = protocol::decode(&payload)?;
                    let r = node.activate_local(req).await?;
                    protocol::encode(&r)
                }
                .await;
                answer(reply, out);
                drop(guard);
            });
        }
        protocol::PEER_DESTROY => {
            tokio::spawn(async move {
                let out = async {
                    let req: DestroyActor = protocol::decode(&payload)?;
                    node.destroy_local(&req.actor).await?;
                    protocol::encode(&())
                }
                .await;
                answer(reply, out);
                drop(guard);
            });
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

/// A client's Request (144): the client protocol of [`protocol`].
async fn on_client_request(
    node: &Node,
    key: DispatchKey,
    payload: Bytes,
    deadline: Option<Instant>,
    reply: ReplyHandle,
) {
    if !node.accepting() {
        reply.error(ErrorKind::Unavailable, ActorError::ShuttingDown.to_string());
        return;
    }
    let guard = node.inflight().enter();
    match key {
        protocol::CALL => {
            let req: CallActor = match protocol::decode(&payload) {
                Ok(r) => r,
                Err(e) => return answer(reply, Err(e)),
            };
            let timeout = call_timeout(node, &req, deadline);
            if req.actor.node() == node.node_rid() {
                let work = Work {
                    key: DispatchKey::new(req.key),
                    payload: Bytes::from(req.payload),
                    reply: Some(ReplyTo::Wire(reply)),
                    deadline: Some(Instant::now() + timeout),
                    guard: Some(guard),
                };
                let _ = node
                    .submit_local(&CallFence::of_ref(&req.actor), work)
                    .await;
            } else {
                let node = node.clone();
                tokio::spawn(async move {
                    // Shutdown that stops waiting answers it at once (SB-10: one terminal).
                    let out = tokio::select! {
                        out = node.request_raw(
                            &req.actor,
                            DispatchKey::new(req.key),
                            Bytes::from(req.payload),
                            timeout,
                        ) => out,
                        () = node.closed() => Err(ActorError::ShuttingDown),
                    };
                    answer(reply, out);
                    drop(guard);
                });
            }
        }
        protocol::CREATE | protocol::GET_OR_CREATE => {
            let node = node.clone();
            tokio::spawn(async move {
                let out = async {
                    let c = create_of(protocol::decode(&payload)?)?;
                    let r = if key == protocol::CREATE {
                        node.create(c).await?
                    } else {
                        node.get_or_create(c).await?
                    };
                    protocol::encode(&r)
                }
                .await;
                answer(reply, out);
                drop(guard);
            });
        }
        protocol::GET => {
            let node = node.clone();
            tokio::spawn(async move {
                let out = async {
                    let req: GetActor = protocol::decode(&payload)?;
                    let id = ActorId::new(&req.actor_id)
                        .map_err(|e| ActorError::Codec(format!("actor id: {e}")))?;
                    protocol::encode(&node.get(&id).await?)
                }
                .await;
                answer(reply, out);
                drop(guard);
            });
        }
        protocol::DESTROY => {
            let node = node.clone();
            tokio::spawn(async move {
                let out = async {
                    let req: DestroyActor = protocol::decode(&payload)?;
                    node.destroy(&req.actor).await?;
                    protocol::encode(&())
                }
                .await;
                answer(reply, out);
                drop(guard);
            });
        }
        protocol::NODE_INFO => answer(reply, protocol::encode(&node.info())),
        _ => reply.error(ErrorKind::NotFound, format!("no client operation {key}")),
    }
}

/// A client's OneWay (147) `CALL`: an actor send; failures are logged and counted.
async fn on_client_send(node: &Node, key: DispatchKey, payload: Bytes) {
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
}
