//! Typed identities: one newtype per identity of the spec glossary.
//!
//! Invariants:
//! - Text identities ([`NodeRid`], [`MeshName`], [`ActorId`]) are validated on construction and on
//!   deserialisation (the decoder borrows the string from the frame, checks it, and only then
//!   allocates). An invalid value cannot exist.
//! - Numeric identities are plain `u64`/`u32` wrappers; they exist so that a binding generation can
//!   never be passed where a session sequence is expected.
//! - Generations are only comparable within their own scope (SB-4.3): a `BindingGeneration` orders
//!   bindings of one session owner lifecycle, nothing more.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Prefix of the serde error message produced when a text identity fails validation while a body
/// is decoded; the frame decoder maps such errors to [`crate::DecodeError::InvalidId`].
pub(crate) const INVALID_ID_MARKER: &str = "zlink-wire invalid id: ";

/// Why a text identity was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidId {
    /// The value is empty; every text identity has at least one byte.
    #[error("{kind} is empty")]
    Empty {
        /// Identity type name.
        kind: &'static str,
    },
    /// The value is longer than the identity allows.
    #[error("{kind} is {len} bytes, more than {max}")]
    TooLong {
        /// Identity type name.
        kind: &'static str,
        /// Length of the rejected value in bytes.
        len: usize,
        /// Largest allowed length in bytes.
        max: usize,
    },
    /// The value contains a byte or character the identity does not allow.
    #[error("{kind} has a forbidden character at byte {index}")]
    BadCharacter {
        /// Identity type name.
        kind: &'static str,
        /// Byte offset of the first forbidden character.
        index: usize,
    },
}

macro_rules! number_id {
    ($(#[$meta:meta])* $name:ident($repr:ty)) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name($repr);

        impl $name {
            /// Wraps a raw value.
            #[must_use]
            pub const fn new(value: $repr) -> Self {
                Self(value)
            }

            /// The raw value.
            #[must_use]
            pub const fn get(self) -> $repr {
                self.0
            }

            /// The next value, or `None` on overflow.
            #[must_use]
            pub const fn checked_next(self) -> Option<Self> {
                match self.0.checked_add(1) {
                    Some(v) => Some(Self(v)),
                    None => None,
                }
            }
        }

        impl From<$repr> for $name {
            fn from(value: $repr) -> Self {
                Self(value)
            }
        }

        impl From<$name> for $repr {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

number_id! {
    /// Generation of one MeshNode process: changes on every process start (glossary "NodeGeneration").
    NodeGeneration(u64)
}
number_id! {
    /// Incarnation of an actor: kept across relocation, new after destroy + re-create.
    ObjectGeneration(u64)
}
number_id! {
    /// Fence on the owner authority of an actor; changes when ownership moves.
    AuthorityOwnerGeneration(u64)
}
number_id! {
    /// Lifecycle (lease) of the current owner host process.
    OwnerLeaseGeneration(u64)
}
number_id! {
    /// Identity of a session inside its session owner: the session owner assigns it to each client
    /// connection (a DEALER connected to the node's client ROUTER) and never reuses it within one
    /// session owner lifecycle. The mesh maps the ZeroMQ client routing id to it.
    SessionRid(u64)
}
number_id! {
    /// Lifecycle generation of a session owner (glossary "session owner lifecycle generation").
    /// Binding generations are comparable only within one value of it (SB-4.3).
    SessionLifecycleGeneration(u64)
}
number_id! {
    /// Owner-local binding generation; with the session owner Node RID and its lifecycle generation
    /// it forms the binding identity. The binding *token* is local and never on the wire.
    BindingGeneration(u64)
}
number_id! {
    /// Order number of messages accepted on one session.
    SessionSequence(u64)
}
number_id! {
    /// Identity of one relocation, chosen by the relocation coordinator.
    RelocationId(u64)
}
number_id! {
    /// Location Store identity of an owner host (the "owner id" of SB-6.2).
    OwnerId(u64)
}
number_id! {
    /// Packet key: selects the typed handler registered for a payload (SB-3.3).
    DispatchKey(u32)
}

/// Request correlation id, carried in the frame header. `0` ([`CorrelationId::NONE`]) means
/// "none": the record is a one-way send. Requests and their terminal replies carry the same
/// non-zero value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CorrelationId(u64);

impl CorrelationId {
    /// No correlation: a one-way record.
    pub const NONE: Self = Self(0);

    /// Wraps a raw value (`0` is [`CorrelationId::NONE`]).
    #[must_use]
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// `true` for [`CorrelationId::NONE`].
    #[must_use]
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }

    /// `true` for any value but [`CorrelationId::NONE`].
    #[must_use]
    pub const fn is_some(self) -> bool {
        self.0 != 0
    }
}

impl From<u64> for CorrelationId {
    fn from(value: u64) -> Self {
        Self(value)
    }
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A request deadline as it travels on the wire: the number of **milliseconds remaining at send
/// time**, as a `u32` (at most about 49.7 days).
///
/// A relative value means the clocks of different machines never need to agree: the sender
/// computes `deadline - now` from its own monotonic clock just before sending, and the receiver
/// adds it to its own monotonic clock on receipt (transit time is thereby granted to the receiver,
/// which errs on the side of finishing work). `0` means "already expired".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Deadline(u32);

impl Deadline {
    /// An already expired deadline.
    pub const EXPIRED: Self = Self(0);
    /// The largest representable deadline.
    pub const MAX: Self = Self(u32::MAX);

    /// Deadline `ms` milliseconds after send time.
    #[must_use]
    pub const fn from_millis(ms: u32) -> Self {
        Self(ms)
    }

    /// Deadline after `remaining`, rounded down to milliseconds and saturated at [`Deadline::MAX`].
    #[must_use]
    pub fn from_remaining(remaining: Duration) -> Self {
        Self(u32::try_from(remaining.as_millis()).unwrap_or(u32::MAX))
    }

    /// Milliseconds remaining at send time.
    #[must_use]
    pub const fn as_millis(self) -> u32 {
        self.0
    }

    /// Time remaining at send time.
    #[must_use]
    pub const fn as_duration(self) -> Duration {
        Duration::from_millis(self.0 as u64)
    }
}

impl fmt::Display for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

macro_rules! text_id {
    ($(#[$meta:meta])* $name:ident, max = $max:expr, check = $check:expr) => {
        $(#[$meta])*
        ///
        /// Cloning is a reference-count increment (the text is shared, never copied).
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(std::sync::Arc<str>);

        impl $name {
            /// Largest length in bytes.
            pub const MAX_LEN: usize = $max;

            /// Validates and wraps `value`.
            ///
            /// # Errors
            /// [`InvalidId`] when the value is empty, too long or has a forbidden character.
            pub fn new(value: impl AsRef<str>) -> Result<Self, InvalidId> {
                let value = value.as_ref();
                Self::validate(value)?;
                Ok(Self(value.into()))
            }

            /// Validates raw bytes (for example a ZeroMQ routing-id part) and wraps them.
            ///
            /// # Errors
            /// As [`Self::new`]; bytes that are not UTF-8 are [`InvalidId::BadCharacter`] at the
            /// first invalid byte.
            pub fn from_bytes(value: &[u8]) -> Result<Self, InvalidId> {
                match std::str::from_utf8(value) {
                    Ok(text) => Self::new(text),
                    Err(e) => Err(InvalidId::BadCharacter {
                        kind: stringify!($name),
                        index: e.valid_up_to(),
                    }),
                }
            }

            /// Checks `value` without allocating.
            ///
            /// # Errors
            /// As [`Self::new`].
            pub fn validate(value: &str) -> Result<(), InvalidId> {
                let kind = stringify!($name);
                if value.is_empty() {
                    return Err(InvalidId::Empty { kind });
                }
                if value.len() > $max {
                    return Err(InvalidId::TooLong { kind, len: value.len(), max: $max });
                }
                let check: fn(char) -> bool = $check;
                let bytes = value.as_bytes();
                if bytes.is_ascii() {
                    // One byte per character: the same check without decoding UTF-8 (an id of
                    // every 24 and 36 is validated on receipt).
                    return match bytes.iter().position(|&b| !check(char::from(b))) {
                        Some(index) => Err(InvalidId::BadCharacter { kind, index }),
                        None => Ok(()),
                    };
                }
                match value.char_indices().find(|&(_, c)| !check(c)) {
                    Some((index, _)) => Err(InvalidId::BadCharacter { kind, index }),
                    None => Ok(()),
                }
            }

            /// The identity as text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The identity as bytes.
            #[must_use]
            pub fn as_bytes(&self) -> &[u8] {
                self.0.as_bytes()
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidId;
            fn try_from(value: &str) -> Result<Self, InvalidId> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(value: String) -> Result<Self, InvalidId> {
                Self::validate(&value)?;
                Ok(Self(value.into()))
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidId;
            fn from_str(value: &str) -> Result<Self, InvalidId> {
                Self::new(value)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct TextVisitor;
                impl Visitor<'_> for TextVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " string"))
                    }
                    // Validate the borrowed text first; allocate only a valid, bounded value.
                    fn visit_str<E: de::Error>(self, value: &str) -> Result<$name, E> {
                        $name::new(value)
                            .map_err(|e| E::custom(format_args!("{INVALID_ID_MARKER}{e}")))
                    }
                }
                deserializer.deserialize_str(TextVisitor)
            }
        }
    };
}

text_id! {
    /// Routing id of a MeshNode: the ZeroMQ routing id its ROUTER sockets use. 1..=64 bytes of
    /// printable ASCII without space (`'!'..='~'`), so it never starts with the zero byte libzmq
    /// reserves for generated ids.
    NodeRid, max = 64, check = |c| c.is_ascii_graphic()
}

text_id! {
    /// Name of one physical connection group (a mesh): 1..=64 bytes of ASCII letters, digits,
    /// `-`, `_` and `.`.
    MeshName, max = 64, check = |c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

text_id! {
    /// Global identity of an actor: 1..=128 bytes of UTF-8 without control characters.
    ActorId, max = 128, check = |c| !c.is_control()
}

/// Hash and equality are those of the text, so a map keyed by actor can be searched with a
/// `&str` (no identity built, nor validated, for a lookup).
impl std::borrow::Borrow<str> for ActorId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_rid_bounds() {
        assert!(NodeRid::new("node-1").is_ok());
        assert_eq!(NodeRid::new(""), Err(InvalidId::Empty { kind: "NodeRid" }));
        assert!(NodeRid::new("a".repeat(64)).is_ok());
        assert!(matches!(
            NodeRid::new("a".repeat(65)),
            Err(InvalidId::TooLong { len: 65, .. })
        ));
        assert!(matches!(
            NodeRid::new("a b"),
            Err(InvalidId::BadCharacter { index: 1, .. })
        ));
        assert!(NodeRid::new("\0ab").is_err());
        assert_eq!(
            NodeRid::from_bytes(b"node-2").unwrap().as_bytes(),
            b"node-2"
        );
        assert!(matches!(
            NodeRid::from_bytes(&[b'a', 0xff]),
            Err(InvalidId::BadCharacter { index: 1, .. })
        ));
        assert!(
            NodeRid::from_bytes(&[0, 0, 0, 0, 1]).is_err(),
            "libzmq generated ids are not NodeRids"
        );
    }

    #[test]
    fn mesh_name_and_actor_id_bounds() {
        assert!(MeshName::new("main.mesh_1-a").is_ok());
        assert!(MeshName::new("main/mesh").is_err());
        assert!(ActorId::new("user:42/äöü").is_ok());
        assert!(ActorId::new("a\nb").is_err());
        assert!(ActorId::new("x".repeat(128)).is_ok());
        assert!(ActorId::new("x".repeat(129)).is_err());
    }

    /// The ASCII shortcut of `validate` decides as the per-character check does, with the same
    /// error index.
    #[test]
    fn ascii_validation_matches_the_character_check() {
        fn by_chars(
            v: &str,
            max: usize,
            check: fn(char) -> bool,
            kind: &'static str,
        ) -> Result<(), InvalidId> {
            if v.is_empty() {
                return Err(InvalidId::Empty { kind });
            }
            if v.len() > max {
                return Err(InvalidId::TooLong {
                    kind,
                    len: v.len(),
                    max,
                });
            }
            match v.char_indices().find(|&(_, c)| !check(c)) {
                Some((index, _)) => Err(InvalidId::BadCharacter { kind, index }),
                None => Ok(()),
            }
        }
        proptest::proptest!(|(v in "[\\x00-\\x7f]{0,70}|\\PC{0,20}|[ -~]{1,70}")| {
            proptest::prop_assert_eq!(
                ActorId::validate(&v),
                by_chars(&v, 128, |c| !c.is_control(), "ActorId")
            );
            proptest::prop_assert_eq!(
                NodeRid::validate(&v),
                by_chars(&v, 64, |c| c.is_ascii_graphic(), "NodeRid")
            );
        });
    }

    #[test]
    fn deadline_saturates() {
        assert_eq!(
            Deadline::from_remaining(Duration::from_secs(u64::MAX)),
            Deadline::MAX
        );
        assert_eq!(
            Deadline::from_remaining(Duration::from_micros(1500)).as_millis(),
            1
        );
        assert_eq!(
            Deadline::from_millis(250).as_duration(),
            Duration::from_millis(250)
        );
    }

    #[test]
    fn correlation_none_is_zero() {
        assert!(CorrelationId::NONE.is_none());
        assert!(CorrelationId::new(7).is_some());
    }
}
