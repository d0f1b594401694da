//! ZLink mesh transport on libzmq: RouteMesh (ROUTER-ROUTER relay + a separate completion
//! connection) and ClientServer (DEALER-ROUTER), bridged to tokio.
//!
//! Contract:
//! - libzmq sockets live on one I/O thread per node ([`MeshNode`]) or client
//!   ([`MeshClient`]); tokio code talks to it through a crossbeam channel plus an inproc PAIR
//!   doorbell. No tokio worker ever blocks in a zmq call; the I/O thread never blocks on a peer
//!   (non-blocking sends; EAGAIN = PAUSED). The layer above may take application records on
//!   the I/O thread itself ([`InboundSink`], never blocking; held records keep their sender's
//!   credit charged until [`MeshNode::release_credit`]).
//! - Every network-facing socket sets `MAXMSGSIZE`, `SNDHWM`/`RCVHWM`, bounded `LINGER`,
//!   bounded reconnect backoff, and ZMTP heartbeats on completion connections only (a
//!   backpressured relay or client connection must not be cut); ROUTERs use `ROUTER_MANDATORY` (no
//!   `ROUTER_HANDOVER`: a connection never takes over another's routing id).
//! - A peer is authenticated by an HMAC-SHA256 challenge-response (keyed by [`MeshSecret`]) on each of
//!   its two connections, bound to the connection's routing id (fresh and random per
//!   outgoing connection); afterwards every record is checked for the routing id that proved
//!   itself, the authenticated RID,
//!   current NodeGeneration and frame format, else dropped and counted ([`DropReason`]).
//! - Requests end in exactly one terminal (a reply or a [`RequestError`]); replies travel on the completion
//!   connection; nothing is resent.
//! - Outbound admission is bounded per destination ([`OutboundBudget`]); a send that fails admission
//!   within the send timeout fails with `DeadlineExceeded` and is never delivered.
//!
//! See `docs/MESH.md` for the design, the CURVE note and the limits.

// `deny`, not `forbid`: `zmq_opt` (one libzmq call the `zmq` crate does not wrap) is the one
// module allowed `unsafe`.
#![deny(unsafe_code)]
// Every type a public item names is exported (its module is private, its re-export is not).
#![warn(unnameable_types)]

// The public API is the re-exports below; a module is public only behind the feature `testing`
// (the crate's own tests, the node's simulator and the fuzz targets drive the sans-IO cores).
mod accept;
mod admission;
mod bridge;
mod budget;
mod client;
#[cfg(feature = "testing")]
pub mod codec;
#[cfg(not(feature = "testing"))]
mod codec;
mod config;
mod conn;
#[cfg(feature = "testing")]
pub mod correlation;
#[cfg(not(feature = "testing"))]
mod correlation;
mod counters;
mod driver;
mod engine;
mod envelope;
mod error;
mod events;
#[cfg(feature = "testing")]
pub mod fuzz_harness;
#[cfg(all(test, not(feature = "testing")))]
mod fuzz_harness;
#[cfg(feature = "testing")]
pub mod handshake;
#[cfg(not(feature = "testing"))]
mod handshake;
mod hashing;
mod inbound;
mod memo;
mod node;
mod outbox;
mod reply;
mod sink;
mod tap;
mod types;
mod zmq_opt;

pub use client::{ClientConfig, MeshClient, Push, SEND_MANY_CHUNK, SendManyError};
pub use codec::{ErrorKind, Record};
pub use config::{
    Batching, ClientAdmission, ClientOutbound, InboundWindow, Liveness, MeshConfig, OutboundBudget,
    PeerAddress, Strangers, TransportLimits,
};
pub use counters::{Counters, DropReason, ReplyOrigin, TransportEvent};
pub use error::{ConfigError, RequestError, SendError};
pub use error::{PendingRecord, TryPushError, TrySendError};
pub use events::{ClientCloseCause, ClientEvent, ClientEvents, DownReason, PeerEvent};
pub use handshake::MeshSecret;
pub use inbound::{Inbound, InboundReceiver, Origin};
#[cfg(feature = "testing")]
pub use node::IoHold;
pub use node::{BoundEndpoints, MeshNode, Response};
pub use reply::ReplyHandle;
pub use sink::{InboundSink, Offer};
pub use tap::{TapDirection, TapFrame, WireTap};
pub use types::{
    CorrelationId, Deadline, DispatchKey, LinkKind, MeshName, NodeGeneration, NodeRid, SessionRid,
};
pub use zlink_wire;
