//! Errors of the mesh boundary. One enum per operation family; peer faults never appear here
//! (they are dropped and counted, see [`crate::DropReason`]).

use std::time::Duration;

use bytes::Bytes;

use crate::codec::{ErrorKind, Parts};
use zlink_wire::DisconnectReason;

/// Invalid configuration, reported by [`crate::MeshNode::start`] (startup configuration error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A multi-node mesh needs a secret unless `insecure_dev_mode` is set.
    #[error("mesh secret missing: set `secret` or explicitly enable `insecure_dev_mode`")]
    MissingSecret,
    /// The secret is shorter than [`crate::MeshSecret::MIN_LEN`] (32) bytes.
    #[error("mesh secret shorter than 32 bytes")]
    SecretTooShort,
    /// A limit is zero or out of range.
    #[error("invalid limit: {0}")]
    InvalidLimit(&'static str),
    /// A ZeroMQ call failed while creating or binding sockets.
    #[error("transport setup failed ({what}): {source}")]
    Transport {
        /// What was being done.
        what: String,
        /// The libzmq error.
        source: zmq::Error,
    },
    /// The I/O thread could not be spawned.
    #[error("spawning the mesh I/O thread failed: {0}")]
    Thread(std::io::Error),
}

/// A one-way send (or push) was not admitted. A failed send is never delivered later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The destination's outbound admission budget stayed exhausted for the whole send
    /// timeout (SB-6.5, public kind `DeadlineExceeded`).
    #[error("send admission timed out after {0:?} (destination PAUSED)")]
    DeadlineExceeded(Duration),
    /// The destination is not an authenticated, connected peer or client (public kind
    /// `Unavailable`).
    #[error("destination unavailable")]
    Unavailable,
    /// The message is larger than the configured maximum message size (local misuse).
    #[error("message of {size} bytes exceeds the maximum message size {max}")]
    TooLarge {
        /// Bytes of the largest frame.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The record could not be encoded (local misuse).
    #[error("encode: {0}")]
    Encode(String),
    /// The mesh node was shut down.
    #[error("mesh node closed")]
    Closed,
    /// `MeshClient`: the node ended this client's session with a 149 Disconnect carrying
    /// this reason; nothing more is sent on it (public kind `Unavailable`).
    #[error("session closed by the node: {0:?}")]
    SessionClosed(DisconnectReason),
}

impl SendError {
    /// The public error kind for this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SendError::DeadlineExceeded(_) => ErrorKind::DeadlineExceeded,
            SendError::Unavailable | SendError::Closed | SendError::SessionClosed(_) => {
                ErrorKind::Unavailable
            }
            SendError::TooLarge { .. } | SendError::Encode(_) => ErrorKind::InvalidOperation,
        }
    }
}

/// A request ended without a reply. Exactly one terminal per request (SB-12).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Admission failed (nothing was sent).
    #[error("request not sent: {0}")]
    Send(#[from] SendError),
    /// The deadline passed before a reply arrived (the request is not resent).
    #[error("request deadline exceeded")]
    DeadlineExceeded,
    /// The peer's lifecycle ended (down, or restarted with a new generation) before a reply.
    #[error("peer lost before reply")]
    PeerLost,
    /// The remote handler answered with an error reply.
    #[error("remote error {kind:?}: {detail}")]
    Remote {
        /// Public kind.
        kind: ErrorKind,
        /// Bounded detail text.
        detail: String,
    },
    /// The mesh node was shut down.
    #[error("mesh node closed")]
    Closed,
    /// `MeshClient`: the node ended this client's session with a 149 Disconnect carrying
    /// this reason, before a reply (public kind `Unavailable`). Requests made after the close
    /// fail with it at once.
    #[error("session closed by the node: {0:?}")]
    SessionClosed(DisconnectReason),
}

impl RequestError {
    /// The public error kind for this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RequestError::Send(s) => s.kind(),
            RequestError::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            RequestError::PeerLost | RequestError::Closed | RequestError::SessionClosed(_) => {
                ErrorKind::Unavailable
            }
            RequestError::Remote { kind, .. } => *kind,
        }
    }
}

/// Why [`MeshNode::try_push`](crate::MeshNode::try_push) did not push.
#[derive(Debug)]
#[non_exhaustive]
pub enum TryPushError {
    /// The client's outbound budget has no room now: the payload, back.
    Full(Bytes),
    /// The push cannot be sent (as [`MeshNode::push`](crate::MeshNode::push) fails).
    Failed(SendError),
}

/// A one-way record that [`MeshNode::try_send_record`](crate::MeshNode::try_send_record)
/// encoded but could not admit at once (the peer's outbound budget is full): wait for admission
/// with [`MeshNode::send_pending`](crate::MeshNode::send_pending).
#[derive(Debug)]
pub struct PendingRecord {
    pub(crate) frames: Parts,
    pub(crate) bytes: u64,
}

/// Why [`MeshNode::try_send_record`](crate::MeshNode::try_send_record) did not send.
#[derive(Debug)]
#[non_exhaustive]
pub enum TrySendError {
    /// The peer's outbound budget has no room now: the encoded record, back.
    Full(PendingRecord),
    /// The record cannot be sent (as [`MeshNode::send_record`](crate::MeshNode::send_record)
    /// fails).
    Failed(SendError),
}
