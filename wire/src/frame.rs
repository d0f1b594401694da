//! The frame layout of one ZeroMQ multipart message, and the codec.
//!
//! ```text
//! part 0, the envelope (at most Limits::max_envelope bytes):
//!   offset 0   u8      version      (VERSION = 1)
//!   offset 1   u8      command      (Command number; 45 never)
//!   offset 2   u8      flags        (bit 0 HAS_PAYLOAD, bit 1 REPLY, other bits 0)
//!   offset 3   u8      reserved     (0)
//!   offset 4   u64 BE  correlation  (0 = none / one-way)
//!   offset 12  ...     msgpack body (rmp-serde compact form: a struct is an array of its fields)
//! part 1, the payload (present iff HAS_PAYLOAD; at most Limits::max_payload bytes):
//!   the application payload, carried as `Bytes`, never copied or re-encoded.
//! ```
//!
//! Routing-id parts that a ROUTER socket prepends are not part of a frame: the transport strips
//! them before calling [`decode`] and prepends them after [`encode`].
//!
//! Invariants of [`decode`]: sizes are checked before the header, the header before the body,
//! and every rule that depends only on the header (version, reserved byte, command, flags,
//! REPLY and correlation rules) before the part count and payload rules; only then is the body
//! deserialised, borrowing strings from the envelope, and the whole envelope must be consumed.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::command::{Command, CorrelationRule, PayloadRule, ReplyRule};
use crate::error::{DecodeError, EncodeError};
use crate::fast::{self, IdCache};
use crate::ids::{CorrelationId, INVALID_ID_MARKER};
use crate::record::{ActorSend, ErrorReply, Record};

/// Wire version carried in every header.
pub const VERSION: u8 = 1;

/// Length of the fixed header at the start of the envelope.
pub const HEADER_LEN: usize = 12;

/// The header's flag byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// No flag.
    pub const EMPTY: Flags = Flags(0);
    /// The frame has a payload part.
    pub const HAS_PAYLOAD: Flags = Flags(0x01);
    /// The record is a terminal reply (distinguishes 38's reply from its request).
    pub const REPLY: Flags = Flags(0x02);
    /// Every defined bit.
    pub const ALL: Flags = Flags(0x03);

    /// The raw byte.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Flags from a raw byte, or `None` if undefined bits are set.
    #[must_use]
    pub const fn from_bits(bits: u8) -> Option<Flags> {
        if bits & !Self::ALL.0 == 0 {
            Some(Flags(bits))
        } else {
            None
        }
    }

    /// `true` if every bit of `other` is set.
    #[must_use]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of bits.
    #[must_use]
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

/// The fixed header of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Command of the record.
    pub command: Command,
    /// Flags.
    pub flags: Flags,
    /// Request correlation (`NONE` for one-way records).
    pub correlation: CorrelationId,
}

impl Header {
    /// `true` if the frame has a payload part.
    #[must_use]
    pub const fn has_payload(&self) -> bool {
        self.flags.contains(Flags::HAS_PAYLOAD)
    }

    /// `true` if the record is a terminal reply.
    #[must_use]
    pub const fn is_reply(&self) -> bool {
        self.flags.contains(Flags::REPLY)
    }

    /// The header's bytes.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0] = VERSION;
        out[1] = self.command.number();
        out[2] = self.flags.bits();
        out[3] = 0;
        out[4..].copy_from_slice(&self.correlation.get().to_be_bytes());
        out
    }
}

/// Receive-side size limits, checked before anything is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Largest envelope (header + msgpack body) in bytes.
    pub max_envelope: usize,
    /// Largest payload part in bytes.
    pub max_payload: usize,
}

impl Limits {
    /// 64 KiB envelopes, 4 MiB payloads.
    pub const DEFAULT: Limits = Limits {
        max_envelope: 64 * 1024,
        max_payload: 4 * 1024 * 1024,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// An encoded frame: the envelope part and the optional payload part, ready for a multipart send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frames {
    /// The header written at the start of `envelope`.
    header: Header,
    envelope: Bytes,
    payload: Option<Bytes>,
}

impl Frames {
    /// Frames whose envelope the caller encoded (`fast`), starting with `header`.
    pub(crate) fn from_parts(header: Header, envelope: Bytes, payload: Option<Bytes>) -> Self {
        Self {
            header,
            envelope,
            payload,
        }
    }

    /// The header the envelope starts with (as [`peek_header`] reads it back, without
    /// reading it).
    #[must_use]
    pub fn header(&self) -> Header {
        self.header
    }

    /// Part 0: header + msgpack body.
    #[must_use]
    pub fn envelope(&self) -> &Bytes {
        &self.envelope
    }

    /// Part 1: the payload, if any (the very `Bytes` given to [`encode`]).
    #[must_use]
    pub fn payload(&self) -> Option<&Bytes> {
        self.payload.as_ref()
    }

    /// Number of parts: 1 or 2.
    #[must_use]
    pub fn part_count(&self) -> usize {
        1 + usize::from(self.payload.is_some())
    }

    /// Total bytes of all parts.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        self.envelope.len() + self.payload.as_ref().map_or(0, Bytes::len)
    }

    /// The same record with `payload` as its payload part: the envelope is shared, not
    /// encoded or copied again (it does not depend on the payload's bytes). For a sender whose
    /// envelope repeats, such as one-way 160s to one actor with one key.
    ///
    /// # Errors
    /// `payload`, handed back, when the record carries no payload part.
    pub fn with_payload(&self, payload: Bytes) -> Result<Frames, Bytes> {
        if self.payload.is_none() {
            return Err(payload);
        }
        Ok(Self {
            header: self.header,
            envelope: self.envelope.clone(),
            payload: Some(payload),
        })
    }

    /// The parts as `(envelope, payload)`.
    #[must_use]
    pub fn into_parts(self) -> (Bytes, Option<Bytes>) {
        (self.envelope, self.payload)
    }

    /// The parts in send order.
    #[must_use]
    pub fn into_vec(self) -> Vec<Bytes> {
        let mut parts = Vec::with_capacity(2);
        parts.push(self.envelope);
        parts.extend(self.payload);
        parts
    }
}

/// A decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The validated header.
    pub header: Header,
    /// The record.
    pub record: Record,
    /// The payload part, shared with the received `Bytes` (not copied).
    pub payload: Option<Bytes>,
}

/// Encodes `record` with `correlation` and an optional `payload` into one or two parts.
///
/// The REPLY and HAS_PAYLOAD flags follow from the record and the payload. The payload `Bytes` is
/// moved into [`Frames`] untouched.
///
/// # Errors
/// [`EncodeError::Payload`] if the payload's presence violates the command's [`PayloadRule`],
/// [`EncodeError::Correlation`] if `correlation` violates its [`CorrelationRule`],
/// [`EncodeError::TooLong`] for an over-long error detail.
pub fn encode(
    record: &Record,
    correlation: CorrelationId,
    payload: Option<Bytes>,
) -> Result<Frames, EncodeError> {
    let command = record.command();
    let present = payload.is_some();
    if present != (command.payload() == PayloadRule::Required) {
        return Err(EncodeError::Payload { command, present });
    }
    if !correlation_allowed(command.correlation(), correlation) {
        return Err(EncodeError::Correlation {
            command,
            correlation,
        });
    }
    if let Record::ErrorReply(r) = record {
        if r.detail.len() > ErrorReply::MAX_DETAIL {
            return Err(EncodeError::TooLong {
                len: r.detail.len(),
                max: ErrorReply::MAX_DETAIL,
            });
        }
    }
    let mut flags = Flags::EMPTY;
    if present {
        flags = flags.union(Flags::HAS_PAYLOAD);
    }
    if record.is_reply() {
        flags = flags.union(Flags::REPLY);
    }
    let header = Header {
        command,
        flags,
        correlation,
    };
    // The per-message session records: the same bytes, hand-written, one allocation (`fast`).
    if let Some(envelope) = fast::envelope(&header.to_bytes(), record) {
        return Ok(Frames {
            header,
            envelope,
            payload,
        });
    }
    let mut buf = Vec::with_capacity(96);
    buf.extend_from_slice(&header.to_bytes());
    encode_body(record, &mut buf).map_err(|source| EncodeError::Body { command, source })?;
    Ok(Frames {
        header,
        envelope: Bytes::from(buf),
        payload,
    })
}

/// Reads and validates the fixed header of an envelope without touching the body: version,
/// reserved byte, command (45 is [`DecodeError::ReservedCommand`]), flag bits, and the command's
/// REPLY and correlation rules. Cheap enough for routing decisions.
///
/// # Errors
/// The first [`DecodeError`] among those checks.
pub fn peek_header(envelope: &[u8]) -> Result<Header, DecodeError> {
    let Some((head, _)) = envelope.split_first_chunk::<HEADER_LEN>() else {
        return Err(DecodeError::Truncated {
            len: envelope.len(),
        });
    };
    if head[0] != VERSION {
        return Err(DecodeError::UnsupportedVersion { version: head[0] });
    }
    if head[3] != 0 {
        return Err(DecodeError::ReservedByte { value: head[3] });
    }
    let command = Command::from_number(head[1])?;
    let Some(flags) = Flags::from_bits(head[2]) else {
        return Err(DecodeError::UnknownFlags { flags: head[2] });
    };
    let reply = flags.contains(Flags::REPLY);
    let reply_ok = match command.reply() {
        ReplyRule::Never => !reply,
        ReplyRule::Always => reply,
        ReplyRule::Either => true,
    };
    if !reply_ok {
        return Err(DecodeError::ReplyFlag { command, reply });
    }
    let mut corr = [0u8; 8];
    corr.copy_from_slice(&head[4..]);
    let correlation = CorrelationId::new(u64::from_be_bytes(corr));
    if !correlation_allowed(command.correlation(), correlation) {
        return Err(DecodeError::Correlation {
            command,
            correlation,
        });
    }
    Ok(Header {
        command,
        flags,
        correlation,
    })
}

/// Decodes a received multipart message: `parts` is `[envelope]` or `[envelope, payload]`.
///
/// # Errors
/// [`DecodeError::PartCount`] for 0 or more than 2 parts, otherwise as [`decode_parts`].
pub fn decode(parts: &[Bytes], limits: &Limits) -> Result<Decoded, DecodeError> {
    match parts {
        [envelope] => decode_parts(envelope, None, limits),
        [envelope, payload] => decode_parts(envelope, Some(payload.clone()), limits),
        _ => Err(DecodeError::PartCount { count: parts.len() }),
    }
}

/// Decodes a frame given as its envelope bytes and optional payload part.
///
/// # Errors
/// Any [`DecodeError`]: sizes first ([`DecodeError::EnvelopeTooLarge`],
/// [`DecodeError::PayloadTooLarge`]), then the header ([`peek_header`]), the part rules
/// ([`DecodeError::PayloadFlag`], [`DecodeError::Payload`]), then the body
/// ([`DecodeError::InvalidId`], [`DecodeError::Body`], [`DecodeError::TrailingBytes`]).
pub fn decode_parts(
    envelope: &[u8],
    payload: Option<Bytes>,
    limits: &Limits,
) -> Result<Decoded, DecodeError> {
    decode_parts_cached(envelope, payload, limits, &mut IdCache::default())
}

/// [`decode_parts`] for a receiver that decodes record after record: `ids` keeps the last
/// actor identity a 24 or 36 named, so the next record for the same actor does not validate
/// and allocate it again ([`IdCache`]; the result and every error are those of
/// [`decode_parts`]).
///
/// # Errors
/// As [`decode_parts`].
pub fn decode_parts_cached(
    envelope: &[u8],
    payload: Option<Bytes>,
    limits: &Limits,
    ids: &mut IdCache,
) -> Result<Decoded, DecodeError> {
    let header = checked_header(envelope, payload.as_ref(), limits)?;
    let record = decode_body(&header, &envelope[HEADER_LEN..], ids)?;
    Ok(Decoded {
        header,
        record,
        payload,
    })
}

/// [`decode_parts_cached`] for a 24 actorSend, giving its header and the [`ActorSend`] itself
/// instead of a [`Decoded`] (no [`Record`] built around it: the record is moved on in its
/// compact form, a receiver's hot path). The checks and every error are those of
/// [`decode_parts_cached`], in the same order; `payload` is only checked (the caller keeps it).
/// `Ok(None)` when the envelope passed the checks before the body but is not a 24: decode it
/// with [`decode_parts_cached`].
///
/// # Errors
/// As [`decode_parts`].
pub fn decode_actor_send_cached(
    envelope: &[u8],
    payload: Option<&Bytes>,
    limits: &Limits,
    ids: &mut IdCache,
) -> Result<Option<(Header, ActorSend)>, DecodeError> {
    let header = checked_header(envelope, payload, limits)?;
    if header.command != Command::ActorSend {
        return Ok(None);
    }
    let bytes = &envelope[HEADER_LEN..];
    // As `decode_body`: the canonical form by hand, anything else (and every error) rmp-serde's.
    let send = match fast::decode_actor_send(bytes, ids) {
        Some(send) => send,
        None => slow_body(Command::ActorSend, bytes, |de| ActorSend::deserialize(de))?,
    };
    Ok(Some((header, send)))
}

/// The checks of [`decode_parts_cached`] before the body: sizes, the header, the part rules.
#[inline(always)]
fn checked_header(
    envelope: &[u8],
    payload: Option<&Bytes>,
    limits: &Limits,
) -> Result<Header, DecodeError> {
    if envelope.len() > limits.max_envelope {
        return Err(DecodeError::EnvelopeTooLarge {
            len: envelope.len(),
            max: limits.max_envelope,
        });
    }
    if let Some(p) = payload {
        if p.len() > limits.max_payload {
            return Err(DecodeError::PayloadTooLarge {
                len: p.len(),
                max: limits.max_payload,
            });
        }
    }
    let header = peek_header(envelope)?;
    let present = payload.is_some();
    if header.has_payload() != present {
        return Err(DecodeError::PayloadFlag {
            flag: header.has_payload(),
            parts: 1 + usize::from(present),
        });
    }
    if present != (header.command.payload() == PayloadRule::Required) {
        return Err(DecodeError::Payload {
            command: header.command,
            present,
        });
    }
    Ok(header)
}

fn correlation_allowed(rule: CorrelationRule, correlation: CorrelationId) -> bool {
    match rule {
        CorrelationRule::None => correlation.is_none(),
        CorrelationRule::Required => correlation.is_some(),
        CorrelationRule::Optional => true,
    }
}

fn encode_body(record: &Record, buf: &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error> {
    let mut ser = rmp_serde::Serializer::new(buf);
    match record {
        Record::ActorSend(r) => r.serialize(&mut ser),
        Record::BoundSessionSend(r) => r.serialize(&mut ser),
        Record::BoundSessionBind(r) => r.serialize(&mut ser),
        Record::BoundSessionBindReply(r) => r.serialize(&mut ser),
        Record::SessionRelocationSeal(r) => r.serialize(&mut ser),
        Record::SessionRelocationSealed(r) => r.serialize(&mut ser),
        Record::SessionRelocationRoute(r) => r.serialize(&mut ser),
        Record::BoundSessionReplaced(r) => r.serialize(&mut ser),
        Record::Hello(r) => r.serialize(&mut ser),
        Record::Challenge(r) => r.serialize(&mut ser),
        Record::Proof(r) => r.serialize(&mut ser),
        Record::Welcome(r) => r.serialize(&mut ser),
        Record::Reject(r) => r.serialize(&mut ser),
        Record::Ping(r) => r.serialize(&mut ser),
        Record::Pong(r) => r.serialize(&mut ser),
        Record::FlowCredit(r) => r.serialize(&mut ser),
        Record::Request(r) => r.serialize(&mut ser),
        Record::Reply(r) => r.serialize(&mut ser),
        Record::ErrorReply(r) => r.serialize(&mut ser),
        Record::OneWay(r) => r.serialize(&mut ser),
        Record::Push(r) => r.serialize(&mut ser),
        Record::Disconnect(r) => r.serialize(&mut ser),
        Record::ActorCall(r) => r.serialize(&mut ser),
    }
}

// A `Read` over the envelope slice: it advances as the body is read, so what is left afterwards
// is the trailing bytes. rmp-serde reads strings with `take(len)`, so a declared length never
// allocates more than the bytes actually present in the (already bounded) envelope.
type BodyDeserializer<'r, 'a> =
    rmp_serde::Deserializer<rmp_serde::decode::ReadReader<&'r mut &'a [u8]>>;

fn body<T: for<'de> Deserialize<'de>>(
    de: &mut BodyDeserializer<'_, '_>,
    wrap: fn(T) -> Record,
) -> Result<Record, rmp_serde::decode::Error> {
    T::deserialize(de).map(wrap)
}

fn decode_body(header: &Header, bytes: &[u8], ids: &mut IdCache) -> Result<Record, DecodeError> {
    let command = header.command;
    // The per-message session records in their canonical form; anything else (and every
    // error) is rmp-serde's below (`fast`).
    let fast = match command {
        Command::ActorSend => fast::decode_actor_send(bytes, ids).map(Record::ActorSend),
        Command::BoundSessionSend => {
            fast::decode_bound_session_send(bytes, ids).map(Record::BoundSessionSend)
        }
        Command::ActorCall => fast::decode_actor_call(bytes, ids).map(Record::ActorCall),
        _ => None,
    };
    if let Some(record) = fast {
        return Ok(record);
    }
    // A batch frame holds records but is none: `crate::batch::BatchFrame` reads it.
    if command == Command::Batch {
        return Err(DecodeError::BatchNotRecord);
    }
    slow_body(command, bytes, |de| match command {
        Command::ActorSend => body(de, Record::ActorSend),
        Command::BoundSessionSend => body(de, Record::BoundSessionSend),
        Command::BoundSessionBind if header.is_reply() => body(de, Record::BoundSessionBindReply),
        Command::BoundSessionBind => body(de, Record::BoundSessionBind),
        Command::SessionRelocationSeal => body(de, Record::SessionRelocationSeal),
        Command::SessionRelocationSealed => body(de, Record::SessionRelocationSealed),
        Command::SessionRelocationRoute => body(de, Record::SessionRelocationRoute),
        Command::BoundSessionReplaced => body(de, Record::BoundSessionReplaced),
        Command::Hello => body(de, Record::Hello),
        Command::Challenge => body(de, Record::Challenge),
        Command::Proof => body(de, Record::Proof),
        Command::Welcome => body(de, Record::Welcome),
        Command::Reject => body(de, Record::Reject),
        Command::Ping => body(de, Record::Ping),
        Command::Pong => body(de, Record::Pong),
        Command::FlowCredit => body(de, Record::FlowCredit),
        // Answered above (never reached).
        Command::Batch => Err(serde::de::Error::custom("a batch frame is not a record")),
        Command::Request => body(de, Record::Request),
        Command::Reply => body(de, Record::Reply),
        Command::ErrorReply => body(de, Record::ErrorReply),
        Command::OneWay => body(de, Record::OneWay),
        Command::Push => body(de, Record::Push),
        Command::Disconnect => body(de, Record::Disconnect),
        Command::ActorCall => body(de, Record::ActorCall),
    })
}

/// A body read by rmp-serde (`read`), its errors mapped, the whole body consumed.
fn slow_body<R>(
    command: Command,
    bytes: &[u8],
    read: impl FnOnce(&mut BodyDeserializer<'_, '_>) -> Result<R, rmp_serde::decode::Error>,
) -> Result<R, DecodeError> {
    let mut rest = bytes;
    let mut de = rmp_serde::Deserializer::new(&mut rest);
    let record = read(&mut de).map_err(|source| match source {
        rmp_serde::decode::Error::Syntax(msg) if msg.contains(INVALID_ID_MARKER) => {
            DecodeError::InvalidId {
                command,
                detail: msg.replace(INVALID_ID_MARKER, ""),
            }
        }
        source => DecodeError::Body { command, source },
    })?;
    let count = rest.len();
    if count != 0 {
        return Err(DecodeError::TrailingBytes { command, count });
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Ping, Reply};

    #[test]
    fn flags_reject_undefined_bits() {
        assert_eq!(
            Flags::from_bits(0x03),
            Some(Flags::HAS_PAYLOAD.union(Flags::REPLY))
        );
        for bits in 0x04..=u8::MAX {
            assert_eq!(Flags::from_bits(bits), None);
        }
    }

    #[test]
    fn header_bytes_round_trip() {
        let header = Header {
            command: Command::Reply,
            flags: Flags::HAS_PAYLOAD.union(Flags::REPLY),
            correlation: CorrelationId::new(0x0102_0304_0506_0708),
        };
        let bytes = header.to_bytes();
        assert_eq!(bytes, [1, 145, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(peek_header(&bytes).unwrap(), header);
    }

    #[test]
    fn encode_sets_flags_from_record_and_payload() {
        let frames = encode(
            &Record::Reply(Reply),
            CorrelationId::new(1),
            Some(Bytes::new()),
        )
        .unwrap();
        let header = peek_header(frames.envelope()).unwrap();
        assert_eq!(frames.header(), header);
        assert!(header.is_reply() && header.has_payload());
        assert_eq!(frames.part_count(), 2);
        let frames = encode(&Record::Ping(Ping { seq: 0 }), CorrelationId::NONE, None).unwrap();
        assert_eq!(
            frames.envelope().as_ref(),
            &[1, 136, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0]
        );
        assert_eq!(frames.into_vec().len(), 1);
    }

    fn payload_b() -> Bytes {
        Bytes::from_static(b"b")
    }

    #[test]
    fn with_payload_gives_the_frames_encode_gives_for_that_payload() {
        let call = Record::ActorCall(crate::ActorCall {
            actor: crate::ActorId::new("counter-1").unwrap(),
            object_generation: crate::ObjectGeneration::new(3),
            authority_owner_generation: crate::AuthorityOwnerGeneration::new(4),
            owner_lease_generation: crate::OwnerLeaseGeneration::new(5),
            target_node_generation: crate::NodeGeneration::new(6),
            key: crate::DispatchKey::new(7),
            deadline: None,
        });
        let template = encode(&call, CorrelationId::NONE, Some(Bytes::new())).unwrap();
        let payload = Bytes::from_static(b"another payload");
        let direct = encode(&call, CorrelationId::NONE, Some(payload.clone())).unwrap();
        assert_eq!(template.with_payload(payload).unwrap(), direct);
        // A record without a payload part has none to replace: the payload comes back.
        let ping = encode(&Record::Ping(Ping { seq: 0 }), CorrelationId::NONE, None).unwrap();
        assert_eq!(ping.with_payload(payload_b()), Err(payload_b()));
    }

    #[test]
    fn default_limits() {
        assert_eq!(Limits::default().max_envelope, 64 * 1024);
        assert_eq!(Limits::default().max_payload, 4 * 1024 * 1024);
    }
}
