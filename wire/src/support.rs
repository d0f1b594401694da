//! Serde helpers shared by the records (private).

/// `[u8; 32]` as a msgpack `bin 8` of exactly 32 bytes.
pub(crate) mod bytes32 {
    use std::fmt;

    use serde::Serializer;
    use serde::de::{self, Deserializer, Visitor};

    pub(crate) fn serialize<S: Serializer>(
        value: &[u8; 32],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(value)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<[u8; 32], D::Error> {
        struct Bytes32;
        impl Visitor<'_> for Bytes32 {
            type Value = [u8; 32];
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("32 bytes")
            }
            fn visit_bytes<E: de::Error>(self, value: &[u8]) -> Result<[u8; 32], E> {
                value
                    .try_into()
                    .map_err(|_| E::invalid_length(value.len(), &self))
            }
        }
        deserializer.deserialize_bytes(Bytes32)
    }
}

/// A `String` of at most [`crate::record::ErrorReply::MAX_DETAIL`] bytes; the length is checked on
/// the borrowed text before anything is allocated.
pub(crate) mod detail {
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};
    use serde::{Serializer, ser};

    use crate::record::ErrorReply;

    pub(crate) fn serialize<S: Serializer>(value: &str, serializer: S) -> Result<S::Ok, S::Error> {
        if value.len() > ErrorReply::MAX_DETAIL {
            return Err(ser::Error::custom("error detail too long"));
        }
        serializer.serialize_str(value)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<String, D::Error> {
        struct Detail;
        impl Visitor<'_> for Detail {
            type Value = String;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a string of at most {} bytes", ErrorReply::MAX_DETAIL)
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
                if value.len() > ErrorReply::MAX_DETAIL {
                    return Err(E::invalid_length(value.len(), &self));
                }
                Ok(value.to_owned())
            }
        }
        deserializer.deserialize_str(Detail)
    }
}
