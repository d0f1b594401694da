//! Errors of the codec boundary and the public error kinds that travel in records.
//!
//! [`DecodeError`] is always a fault of the peer (hostile or buggy bytes); [`EncodeError`] is
//! always local misuse (a record combined with a header it may not have). Neither is ever a
//! panic.

use crate::command::Command;
use crate::ids::CorrelationId;

wire_enum! {
    /// Public error kinds (spec "Error kinds"). They travel in 38 replies, 43 results and mesh
    /// error replies (146), encoded as one `u8`.
    pub enum ErrorKind {
        /// The route, owner or binding is not available now (stale location, pre-commit seal,
        /// stale fence; SB-12). Retrying later, after a new lookup, may succeed.
        Unavailable = 1,
        /// The operation is not valid in this state (includes *session-not-bound* and a
        /// different ObjectGeneration; SB-12, EG-6.5).
        InvalidOperation = 2,
        /// The target does not exist (for example no actor factory for the type); retrying cannot
        /// help.
        NotFound = 3,
        /// The deadline passed before the operation completed (SB-6.5).
        DeadlineExceeded = 4,
        /// A request handler failed; the framework error reply of EG-15.
        Internal = 5,
        /// The request was cancelled (the SB-12 cancellation condition; an implementation kind the
        /// originals do not define).
        Cancelled = 6,
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::InvalidOperation => "invalid operation",
            ErrorKind::NotFound => "not found",
            ErrorKind::DeadlineExceeded => "deadline exceeded",
            ErrorKind::Internal => "internal error",
            ErrorKind::Cancelled => "cancelled",
        })
    }
}

impl std::error::Error for ErrorKind {}

/// Why a received message was rejected. Every variant is a peer fault; the decoder never panics
/// and never allocates beyond the bounded frame.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message has no part or more than two parts (envelope and optional payload).
    #[error("a frame has 1 or 2 parts, this message has {count}")]
    PartCount {
        /// Number of parts received.
        count: usize,
    },
    /// The envelope is shorter than the fixed header.
    #[error(
        "envelope of {len} bytes is shorter than the {} byte header",
        crate::frame::HEADER_LEN
    )]
    Truncated {
        /// Length of the envelope in bytes.
        len: usize,
    },
    /// The envelope is larger than [`crate::Limits::max_envelope`]; checked before decoding.
    #[error("envelope of {len} bytes exceeds the limit of {max}")]
    EnvelopeTooLarge {
        /// Length of the envelope in bytes.
        len: usize,
        /// Configured limit.
        max: usize,
    },
    /// The payload is larger than [`crate::Limits::max_payload`]; checked before decoding.
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    PayloadTooLarge {
        /// Length of the payload in bytes.
        len: usize,
        /// Configured limit.
        max: usize,
    },
    /// The header's version byte is not [`crate::frame::VERSION`].
    #[error("unsupported wire version {version}")]
    UnsupportedVersion {
        /// Version byte received.
        version: u8,
    },
    /// The header's reserved byte is not zero.
    #[error("reserved header byte is {value:#04x}, expected 0")]
    ReservedByte {
        /// Value received.
        value: u8,
    },
    /// Command 45: reserved by the spec, never sent and never accepted (SB-14.26).
    #[error("command 45 is reserved and never accepted")]
    ReservedCommand,
    /// A command number that is neither a spec command nor an assigned mesh command.
    #[error("unknown command {number}")]
    UnknownCommand {
        /// Command number received.
        number: u8,
    },
    /// The flags byte has bits that are not defined.
    #[error("undefined flag bits in {flags:#04x}")]
    UnknownFlags {
        /// Flags byte received.
        flags: u8,
    },
    /// The REPLY flag is set on a command that is never a reply, or missing on one that always is.
    #[error("REPLY flag {} is not allowed on command {command:?}", if *reply { "set" } else { "clear" })]
    ReplyFlag {
        /// Command of the frame.
        command: Command,
        /// Whether the REPLY flag was set.
        reply: bool,
    },
    /// The HAS_PAYLOAD flag disagrees with the number of parts.
    #[error("HAS_PAYLOAD flag {} but the message has {parts} part(s)", if *flag { "set" } else { "clear" })]
    PayloadFlag {
        /// Whether the HAS_PAYLOAD flag was set.
        flag: bool,
        /// Number of parts received.
        parts: usize,
    },
    /// The command requires a payload part and has none, or forbids one and has one.
    #[error("command {command:?} {}", if *present { "takes no payload" } else { "requires a payload" })]
    Payload {
        /// Command of the frame.
        command: Command,
        /// Whether a payload part was present.
        present: bool,
    },
    /// The correlation id violates the command's rule (one-way records carry 0, requests and
    /// replies a non-zero id).
    #[error("correlation {correlation} is not allowed on command {command:?}")]
    Correlation {
        /// Command of the frame.
        command: Command,
        /// Correlation received.
        correlation: CorrelationId,
    },
    /// A text identity in the body failed validation (see [`crate::ids::InvalidId`]).
    #[error("invalid identity in {command:?} body: {detail}")]
    InvalidId {
        /// Command of the frame.
        command: Command,
        /// Description of the rejected identity.
        detail: String,
    },
    /// The msgpack body does not decode as the command's record (wrong shape, missing or extra
    /// fields, wrong types, truncated body, out-of-range values).
    #[error("malformed {command:?} body")]
    Body {
        /// Command of the frame.
        command: Command,
        /// The msgpack decoder's error.
        #[source]
        source: rmp_serde::decode::Error,
    },
    /// A 139 batch frame was given to the single-record decoder ([`crate::decode`]); batches
    /// are read with [`crate::batch::BatchFrame::parse`].
    #[error("command 139 is a batch frame, not a record")]
    BatchNotRecord,
    /// A batch frame declares no records or more than [`crate::batch::MAX_BATCH_RECORDS`].
    #[error("batch declares {declared} records (1..={max} allowed)")]
    BatchCount {
        /// Records declared by the count field.
        declared: u32,
        /// Largest count accepted.
        max: u32,
    },
    /// A batch frame's sub-records do not fill it exactly: a length runs past the end of the
    /// frame, the frame ends before the declared count, or bytes remain after it.
    #[error("batch framing broken at record {index}: {what}")]
    BatchFraming {
        /// Index of the sub-record where the framing broke (the declared count for trailing
        /// bytes).
        index: u32,
        /// Which rule failed.
        what: &'static str,
    },
    /// A record inside a batch is itself a batch.
    #[error("record {index} of a batch is itself a batch")]
    NestedBatch {
        /// Index of the nested batch inside the outer one.
        index: u32,
    },
    /// Bytes remain in the envelope after the msgpack body.
    #[error("{count} trailing byte(s) after the {command:?} body")]
    TrailingBytes {
        /// Command of the frame.
        command: Command,
        /// Number of bytes left over.
        count: usize,
    },
}

impl DecodeError {
    /// The command of the rejected frame, when the header was readable.
    #[must_use]
    pub fn command(&self) -> Option<Command> {
        match self {
            DecodeError::ReplyFlag { command, .. }
            | DecodeError::Payload { command, .. }
            | DecodeError::Correlation { command, .. }
            | DecodeError::InvalidId { command, .. }
            | DecodeError::Body { command, .. }
            | DecodeError::TrailingBytes { command, .. } => Some(*command),
            _ => None,
        }
    }
}

/// Why a record could not be encoded. Every variant is local misuse: the record cannot be sent
/// in the requested form.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The command requires a payload and none was given, or forbids one and one was given.
    #[error("command {command:?} {}", if *present { "takes no payload" } else { "requires a payload" })]
    Payload {
        /// Command of the record.
        command: Command,
        /// Whether a payload was given.
        present: bool,
    },
    /// The correlation id violates the command's rule (one-way records take
    /// [`CorrelationId::NONE`], requests and replies a non-zero id).
    #[error("correlation {correlation} is not allowed on command {command:?}")]
    Correlation {
        /// Command of the record.
        command: Command,
        /// Correlation given.
        correlation: CorrelationId,
    },
    /// A bounded text field is too long (for example [`crate::record::ErrorReply::detail`]).
    #[error("field of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Length of the field in bytes.
        len: usize,
        /// Largest allowed length.
        max: usize,
    },
    /// A record cannot be added to a batch frame (it is a batch itself, or the batch already
    /// holds [`crate::batch::MAX_BATCH_RECORDS`] records, or a part is longer than `u32`).
    #[error("cannot add to a batch: {what}")]
    Batch {
        /// Which rule failed.
        what: &'static str,
    },
    /// The msgpack encoder failed.
    #[error("cannot encode {command:?} body")]
    Body {
        /// Command of the record.
        command: Command,
        /// The msgpack encoder's error.
        #[source]
        source: rmp_serde::encode::Error,
    },
}
