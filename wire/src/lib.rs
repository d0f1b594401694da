//! ZLink wire format: typed records, the frame layout and a strict codec. No IO, no tokio, no
//! ZeroMQ.
//!
//! # Contract
//!
//! One ZeroMQ multipart message carries one frame: part 0 is the *envelope* (a 12-byte fixed
//! header followed by the record's msgpack body), part 1 — present iff the header's HAS_PAYLOAD
//! flag is set — is the application payload as [`bytes::Bytes`], never copied or re-encoded. The
//! layout is documented in [`frame`] and in `docs/WIRE.md`.
//!
//! Command numbers of the spec are normative (24, 36, 38, 42, 43, 44, 51); 45 is reserved and
//! cannot be encoded nor decoded; the mesh's own records use 128..=191 ([`command::MESH_RANGE`]).
//!
//! # Call order
//!
//! Sending:
//! 1. build a [`Record`] from its struct (`Record::from(ActorSend { .. })`);
//! 2. [`encode`]`(&record, correlation, payload)` → [`Frames`]; the correlation is
//!    [`CorrelationId::NONE`] for one-way records;
//! 3. send [`Frames::into_vec`] as one multipart message (after the routing-id part, on ROUTER).
//!
//! Receiving:
//! 1. strip routing-id parts;
//! 2. optionally [`peek_header`]`(&parts[0])` to route cheaply (validates the whole header);
//! 3. [`decode`]`(&parts, &limits)` → [`Decoded`] `{ header, record, payload }`, or a typed
//!    [`DecodeError`]. Sizes are checked against [`Limits`] before anything is deserialised;
//!    the decoder never panics.
//!
//! Each value is validated once, here, at transport ingress (SB-2.1: frame format): code that
//! receives a [`Decoded`] does not re-check identity formats, command/flag combinations or
//! correlation rules.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use zlink_wire::{decode, encode, CorrelationId, Deadline, DispatchKey, Limits, Record, Request};
//!
//! let record = Record::Request(Request {
//!     key: DispatchKey::new(7),
//!     deadline: Deadline::from_millis(1_000),
//! });
//! let payload = Bytes::from_static(b"hello");
//! let frames = encode(&record, CorrelationId::new(42), Some(payload.clone()))?;
//! assert_eq!(frames.part_count(), 2);
//!
//! let parts = frames.into_vec(); // send as one multipart message
//! let decoded = decode(&parts, &Limits::default())?;
//! assert_eq!(decoded.record, record);
//! assert_eq!(decoded.header.correlation, CorrelationId::new(42));
//! assert_eq!(decoded.payload.unwrap().as_ptr(), payload.as_ptr()); // never copied
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $code:literal,)+
        }
    ) => {
        $(#[$meta])*
        ///
        /// Travels on the wire as its `u8` code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* $variant = $code,)+
        }

        impl $name {
            /// Every variant, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire code.
            #[must_use]
            pub const fn code(self) -> u8 {
                self as u8
            }

            /// The variant for a wire code.
            #[must_use]
            pub const fn from_code(code: u8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_u8(self.code())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let code = <u8 as serde::Deserialize>::deserialize(deserializer)?;
                $name::from_code(code).ok_or_else(|| {
                    <D::Error as serde::de::Error>::custom(format_args!(
                        concat!("unknown ", stringify!($name), " code {}"),
                        code
                    ))
                })
            }
        }
    };
}

pub mod batch;
pub mod command;
pub mod error;
mod fast;
pub mod frame;
// The functions behind the fuzz targets, public for `wire/fuzz` and the tests only.
#[cfg(feature = "testing")]
pub mod fuzz_harness;
#[cfg(all(test, not(feature = "testing")))]
mod fuzz_harness;
pub mod ids;
pub mod msgpack;
pub mod record;
mod support;

pub use batch::{
    BATCH_COMMAND, BatchEncoder, BatchFrame, BatchRecord, BatchRecords, MAX_BATCH_RECORDS,
    RawRecord, RawRecords, encode_batch, is_batch,
};
pub use command::{Command, MESH_RANGE, RESERVED_COMMAND};
pub use error::{DecodeError, EncodeError, ErrorKind};
pub use fast::{ActorSendTemplate, IdCache, TemplateRecord};
pub use frame::{
    Decoded, Flags, Frames, HEADER_LEN, Header, Limits, VERSION, decode, decode_actor_send_cached,
    decode_parts, decode_parts_cached, encode, peek_header,
};
pub use ids::{
    ActorId, AuthorityOwnerGeneration, BindingGeneration, CorrelationId, Deadline, DispatchKey,
    InvalidId, MeshName, NodeGeneration, NodeRid, ObjectGeneration, OwnerId, OwnerLeaseGeneration,
    RelocationId, SessionLifecycleGeneration, SessionRid, SessionSequence,
};
pub use record::*;
