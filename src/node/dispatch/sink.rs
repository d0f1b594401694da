//! The mesh I/O thread's way in: [`Sink`] takes the per-message records (client packets to the
//! session lane, 24 / 160 from peers to the actor lane) straight from the receive pass.

use std::time::Instant;

use bytes::Bytes;
use zlink_mesh::{Inbound, InboundSink, Offer, Origin, Record};
use zlink_wire::{ActorSend, DispatchKey, NodeGeneration, NodeRid};

use super::*;
use crate::actor::exec::ReplyTo;
use crate::backlog::{Admitted, CreditReturn, Done, InlineBudget, Intake};
use crate::node::protocol;
use crate::node::{Inner, Node};
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
        // A client's framework requests (the client operations, `AUTHENTICATE` among them) and
        // its one-way `CALL`s (actor sends) are served on this thread, in arrival order: what
        // waits (the store, a peer) goes on in a task or detached.
        if let (Origin::Client { session }, Record::OneWay(o)) = (&inbound.origin, &inbound.record)
            && o.key == protocol::CALL
        {
            let session = *session;
            self.held.release();
            client_send(node, session, inbound.payload.unwrap_or_default());
            return Offer::Taken;
        }
        if let (Origin::Client { session }, Record::Request(r), Some(_)) =
            (&inbound.origin, &inbound.record, &inbound.reply)
            && protocol::is_framework_key(r.key)
        {
            let (session, key) = (*session, r.key);
            // No right kept past a record that runs no turn here.
            self.held.release();
            let Inbound {
                payload,
                deadline,
                reply,
                ..
            } = inbound;
            if let Some(reply) = reply {
                super::client::on_client_request(
                    node,
                    session,
                    key,
                    payload.unwrap_or_default(),
                    deadline,
                    reply,
                );
            }
            return Offer::Taken;
        }
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
        if protocol::is_framework_key(key) && key != protocol::CALL {
            return Offer::Pass(Inbound::one_way(origin, key, payload));
        }
        let Some(node) = pass_node(&mut self.pass, &self.node) else {
            return Offer::Pass(Inbound::one_way(origin, key, payload));
        };
        if key == protocol::CALL {
            // Served here, as `offer` serves it.
            self.held.release();
            client_send(node, session, payload);
            return Offer::Taken;
        }
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

/// A client's one-way `CALL` (an actor send) from `session`, served on this thread
/// ([`super::client::on_client_send`]) within the node's runtime context: a send that must
/// wait (a full lane, a peer's window) goes on in the node's tasks.
fn client_send(node: &Node, session: zlink_wire::SessionRid, payload: Bytes) {
    let _entered = node.inner.rt.enter();
    super::client::on_client_send(node, session, protocol::CALL, payload);
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
