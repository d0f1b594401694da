//! Direct delivery on the I/O thread: the layer above may take application records straight
//! from the receive pass instead of through the [`InboundReceiver`](crate::InboundReceiver)
//! (one thread hand-off less per record).
//!
//! The mesh knows nothing of what the layer above does with a record: it offers each
//! authenticated, window-checked application record to the installed [`InboundSink`] in
//! arrival order, and the sink either takes it, takes it while holding its connection's
//! credit, or passes it on to the inbound channel. A sink runs on the I/O thread: it must
//! never block (no waiting for space, no I/O), or every connection of the node stalls.

use bytes::Bytes;

use crate::node::{Inbound, Origin};
use crate::types::DispatchKey;

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

    /// The receive pass that offered records has ended: the I/O thread goes on to transmit,
    /// then reads again or sleeps. A sink that meters the time it takes per pass starts over.
    /// Default: nothing.
    fn end_pass(&mut self) {}
}
