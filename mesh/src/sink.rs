//! Direct delivery on the I/O thread: the layer above may take application records straight
//! from the receive pass instead of through the [`InboundReceiver`](crate::InboundReceiver)
//! (one thread hand-off less per record).
//!
//! The mesh knows nothing of what the layer above does with a record: it offers each
//! authenticated, window-checked application record to the installed [`InboundSink`] in
//! arrival order, and the sink either takes it, takes it while holding its connection's
//! credit, or passes it on to the inbound channel. A sink runs on the I/O thread: it must
//! never block (no waiting for space, no I/O), or every connection of the node stalls.

use std::time::Instant;

use bytes::Bytes;
use zlink_wire::{ActorSend, CorrelationId, Record};

use crate::inbound::{Inbound, Origin};
use crate::types::{DispatchKey, NodeGeneration, NodeRid};

/// What the sink did with an offered record.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // hands the record back by value, no allocation
pub enum Offer {
    /// Taken: the record's receive-window credit is returned to its sender now.
    Taken,
    /// Taken, but the sender's credit for it stays charged until the sink calls
    /// [`MeshNode::release_credit`](crate::MeshNode::release_credit) with the `bytes` it was
    /// offered with (or [`MeshNode::release_credits`](crate::MeshNode::release_credits) for
    /// several held records of one origin at once): a sender whose records wait above the mesh
    /// is held back by its own window, and nobody else is.
    Held,
    /// Not for the sink: the record goes up through the inbound channel, as without a sink.
    Pass(Inbound),
}

/// Receives application records on the mesh I/O thread (see the module doc).
pub trait InboundSink: Send + 'static {
    /// Offers one application record (a relay record from a peer, or a client record) of
    /// `bytes` wire bytes (envelope + payload, the amount charged to its sender's window).
    /// Records of one connection are offered in arrival order. Never blocks.
    fn offer(&mut self, inbound: Inbound, bytes: u64) -> Offer;

    /// Offers a plain one-way 147 record (no correlation, no deadline, no reply handle) in
    /// the compact form, exactly as [`InboundSink::offer`] would be offered
    /// [`Inbound::one_way`]`(origin, key, payload)`: the full record (≈ 280 bytes) is built
    /// only if the sink passes it on. The mesh uses this for every such record, and for the
    /// runs of byte-identical one-ways of one batch frame (a client's packets) it takes
    /// without looking the connection up again. Default: builds the record and offers it.
    fn offer_one_way(
        &mut self,
        origin: Origin,
        key: DispatchKey,
        payload: Bytes,
        bytes: u64,
    ) -> Offer {
        self.offer(Inbound::one_way(origin, key, payload), bytes)
    }

    /// Offers a one-way 24 ActorSend from peer `node` in `generation` (no correlation: no
    /// reply handle) in the compact form, exactly as [`InboundSink::offer`] would be offered
    /// [`Inbound::actor_send`]`(Origin::Peer { node, generation }, send, payload, deadline)`
    /// (`deadline`: its local deadline, receipt time + the time it carried): the `Inbound`
    /// around it (≈ 280 bytes, with the 160-byte `Record`) is built only if the sink passes it
    /// on, so the 24 is not copied from value to value on its way to the sink, and the origin
    /// is lent (no reference count taken per record). The mesh uses this for the 24s of a
    /// peer's batch frame after the first. Default: builds the record and offers it.
    fn offer_actor_send(
        &mut self,
        node: &NodeRid,
        generation: NodeGeneration,
        send: ActorSend,
        payload: Bytes,
        deadline: Option<Instant>,
        bytes: u64,
    ) -> Offer {
        let origin = Origin::Peer {
            node: node.clone(),
            generation,
        };
        self.offer(Inbound::actor_send(origin, send, payload, deadline), bytes)
    }

    /// The receive pass that offered records has ended: the I/O thread goes on to transmit,
    /// then reads again or sleeps. A sink that meters the time it takes per pass starts over.
    /// Default: nothing.
    fn end_pass(&mut self) {}
}

impl Inbound {
    /// A one-way 24 ActorSend (no correlation, no reply handle) from `origin`, with its local
    /// `deadline`: the record [`InboundSink::offer_actor_send`] stands for.
    #[must_use]
    #[inline]
    pub fn actor_send(
        origin: Origin,
        send: ActorSend,
        payload: Bytes,
        deadline: Option<Instant>,
    ) -> Self {
        Inbound {
            origin,
            correlation: CorrelationId::NONE,
            record: Record::ActorSend(send),
            payload: Some(payload),
            deadline,
            reply: None,
        }
    }
}
