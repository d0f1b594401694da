//! Adapter between the mesh and `zlink-wire`: encoding helpers, the handshake view of the
//! mesh records, and the classification of every decoded record by the connection it may
//! travel on.

use bytes::Bytes;
use zlink_wire::{
    Challenge, CorrelationId, Decoded, EncodeError, Hello, Limits, Proof, Reject, Welcome,
};

pub use zlink_wire::{DecodeError, ErrorKind, HandshakeReject, Record};

use crate::types::{MeshName, NodeGeneration, NodeRid};

/// The handshake records (128..=132) as one enum for the sans-IO handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeMsg {
    /// 128 Hello.
    Hello {
        /// Mesh.
        mesh: MeshName,
        /// Initiator.
        node: NodeRid,
        /// Initiator generation.
        generation: NodeGeneration,
        /// Initiator nonce.
        nonce: [u8; 32],
    },
    /// 129 Challenge.
    Challenge {
        /// Mesh.
        mesh: MeshName,
        /// Acceptor.
        node: NodeRid,
        /// Acceptor generation.
        generation: NodeGeneration,
        /// Acceptor nonce.
        nonce: [u8; 32],
        /// Acceptor proof.
        proof: [u8; 32],
    },
    /// 130 Proof.
    Proof {
        /// Initiator proof.
        proof: [u8; 32],
    },
    /// 131 Welcome.
    Welcome,
    /// 132 Reject.
    Reject {
        /// Why.
        reason: HandshakeReject,
    },
}

impl HandshakeMsg {
    /// The handshake view of a record, if it is one of 128..=132.
    pub fn from_record(record: Record) -> Option<HandshakeMsg> {
        Some(match record {
            Record::Hello(h) => HandshakeMsg::Hello {
                mesh: h.mesh,
                node: h.node,
                generation: h.generation,
                nonce: h.nonce,
            },
            Record::Challenge(c) => HandshakeMsg::Challenge {
                mesh: c.mesh,
                node: c.node,
                generation: c.generation,
                nonce: c.nonce,
                proof: c.proof,
            },
            Record::Proof(p) => HandshakeMsg::Proof { proof: p.proof },
            Record::Welcome(_) => HandshakeMsg::Welcome,
            Record::Reject(r) => HandshakeMsg::Reject { reason: r.reason },
            _ => return None,
        })
    }

    /// The wire record.
    pub fn into_record(self) -> Record {
        match self {
            HandshakeMsg::Hello {
                mesh,
                node,
                generation,
                nonce,
            } => Record::Hello(Hello {
                mesh,
                node,
                generation,
                nonce,
            }),
            HandshakeMsg::Challenge {
                mesh,
                node,
                generation,
                nonce,
                proof,
            } => Record::Challenge(Challenge {
                mesh,
                node,
                generation,
                nonce,
                proof,
            }),
            HandshakeMsg::Proof { proof } => Record::Proof(Proof { proof }),
            HandshakeMsg::Welcome => Record::Welcome(Welcome),
            HandshakeMsg::Reject { reason } => Record::Reject(Reject { reason }),
        }
    }
}

/// Which path a decoded record belongs to.
#[derive(Debug)]
pub(crate) enum Class {
    /// 128..=132: handled by the handshake, never passed up (its message is taken from the
    /// record: [`HandshakeMsg::from_record`]).
    Handshake,
    /// 136.
    Ping(u64),
    /// 137.
    Pong,
    /// 138: credit returned by the receiver of our relay data.
    FlowCredit {
        /// Messages.
        messages: u32,
        /// Bytes.
        bytes: u64,
    },
    /// 149, with its reason.
    Disconnect(zlink_wire::DisconnectReason),
    /// A terminal reply (REPLY flag): completes a correlation.
    Reply,
    /// 148: server → client only.
    Push,
    /// A request (correlation set) or one-way record for the layer above.
    App,
}

/// The class of a record, read in place: the record itself is not moved (it is 160 bytes and
/// crosses the receive pass once, from the decoder to delivery).
#[inline]
pub(crate) fn classify(record: &Record) -> Class {
    match record {
        Record::Hello(_)
        | Record::Challenge(_)
        | Record::Proof(_)
        | Record::Welcome(_)
        | Record::Reject(_) => Class::Handshake,
        Record::Ping(p) => Class::Ping(p.seq),
        Record::Pong(_) => Class::Pong,
        Record::FlowCredit(f) => Class::FlowCredit {
            messages: f.messages,
            bytes: f.bytes,
        },
        Record::Disconnect(d) => Class::Disconnect(d.reason),
        r if r.is_reply() => Class::Reply,
        Record::Push(_) => Class::Push,
        _ => Class::App,
    }
}

/// True for records the layer above may send as a request or one-way record (not control,
/// not replies, not pushes).
pub(crate) fn is_app_record(record: &Record) -> bool {
    is_app_command(record.command())
}

/// [`is_app_record`] by the command alone.
pub(crate) fn is_app_command(command: zlink_wire::Command) -> bool {
    use zlink_wire::Command;
    !command.is_mesh()
        || matches!(
            command,
            Command::Request | Command::OneWay | Command::ActorCall
        )
}

/// The NodeGeneration a record says it targets, if it carries one (checked at ingress).
pub(crate) fn target_generation(record: &Record) -> Option<NodeGeneration> {
    match record {
        Record::ActorCall(c) => Some(c.target_node_generation),
        Record::BoundSessionBind(b) => Some(b.target_node_generation),
        _ => None,
    }
}

/// The deadline a record carries (remaining time at send), if any.
pub(crate) fn record_deadline(record: &Record) -> Option<std::time::Duration> {
    match record {
        Record::Request(r) => Some(r.deadline.as_duration()),
        Record::ActorCall(c) => c.deadline.map(|d| d.as_duration()),
        Record::ActorSend(a) => a.deadline.map(|d| d.as_duration()),
        Record::BoundSessionBind(b) => Some(b.deadline.as_duration()),
        Record::SessionRelocationSeal(s) => Some(s.deadline.as_duration()),
        _ => None,
    }
}

/// The parts of one outbound message in send order (envelope, optional payload), inline:
/// no vector allocation per message. Dereferences to `&[Bytes]`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Parts {
    parts: [Bytes; 2],
    len: u8,
}

impl Parts {
    /// Envelope and optional payload.
    pub(crate) fn new(envelope: Bytes, payload: Option<Bytes>) -> Self {
        match payload {
            Some(p) => Self {
                parts: [envelope, p],
                len: 2,
            },
            None => Self {
                parts: [envelope, Bytes::new()],
                len: 1,
            },
        }
    }
}

impl Parts {
    /// The payload part given back (empty without one), the envelope dropped.
    pub(crate) fn into_payload(self) -> Bytes {
        let [_, payload] = self.parts;
        payload
    }
}

impl std::ops::Deref for Parts {
    type Target = [Bytes];
    fn deref(&self) -> &[Bytes] {
        &self.parts[..usize::from(self.len)]
    }
}

pub(crate) fn encode(
    record: &Record,
    corr: u64,
    payload: Option<Bytes>,
) -> Result<Parts, EncodeError> {
    zlink_wire::encode(record, CorrelationId::new(corr), payload).map(|f| {
        let (envelope, payload) = f.into_parts();
        Parts::new(envelope, payload)
    })
}

/// Encodes a control record (never fails for the records the mesh builds itself).
pub(crate) fn encode_control(record: Record) -> Parts {
    encode(&record, 0, None).unwrap_or_default()
}

pub(crate) fn decode(parts: &[Bytes], limits: &Limits) -> Result<Decoded, DecodeError> {
    zlink_wire::decode(parts, limits)
}

/// The monitor event value (`ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL`) with which the patched
/// libzmq reports a connection dropped for a frame, or a multipart message in total, over the
/// socket's `ZMQ_MAXMSGSIZE` (`vendor/zeromq-src/PATCHES.md`).
pub(crate) const ZMQ_PROTOCOL_ERROR_MESSAGE_TOO_LARGE: u32 = 0x1000_0100;

/// libzmq charges every part of a message after the first this much on top of its bytes
/// (`sizeof (zmq::msg_t)`), so a message of many tiny parts is bounded too.
pub(crate) const ZMQ_PART_OVERHEAD: usize = 64;

/// `ZMQ_MAXMSGSIZE` of every network socket. The patched libzmq applies it to a frame and to
/// the parts of one multipart message together (each part after the first charged
/// [`ZMQ_PART_OVERHEAD`] more), so it must fit the largest valid record: an envelope of at
/// most [`limits`]`.max_envelope` bytes and a payload of at most `max_message_size` bytes (the
/// payload bound itself is checked by the codec). This is also the most one connection makes
/// libzmq hold for a message still in progress.
pub(crate) fn socket_message_limit(max_message_size: usize) -> i64 {
    let l = limits(max_message_size);
    let total = l
        .max_payload
        .saturating_add(l.max_envelope)
        .saturating_add(ZMQ_PART_OVERHEAD);
    i64::try_from(total).unwrap_or(i64::MAX)
}

pub(crate) fn limits(max_message_size: usize) -> Limits {
    Limits {
        max_envelope: Limits::DEFAULT.max_envelope.min(max_message_size),
        max_payload: max_message_size,
    }
}

/// Maps a decode error to the drop vocabulary.
pub(crate) fn drop_reason(e: &DecodeError) -> crate::counters::DropReason {
    use crate::counters::DropReason;
    match e {
        DecodeError::ReservedCommand => DropReason::ReservedCommand,
        DecodeError::UnknownCommand { .. } => DropReason::UnknownCommand,
        _ => DropReason::Malformed,
    }
}
