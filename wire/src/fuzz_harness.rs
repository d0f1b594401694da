//! The body of the `decode` fuzz target (`wire/fuzz/fuzz_targets/decode.rs`), kept in the crate so
//! that it is unit-tested without cargo-fuzz.
//!
//! Input format: an input starting with [`TWO_PARTS`] is `[0x02][u16 BE length n][envelope of n
//! bytes][payload part = the rest]` (inputs too short for their `n` are tried as one part); any
//! other input is a one-part message (an envelope without payload — a valid envelope starts with
//! the version byte `0x01`). [`seed`] builds this format from encoded frames.
//!
//! Property checked: decoding never panics, and whatever decodes re-encodes to a frame that
//! decodes to the same value.

use bytes::Bytes;

use crate::frame::{Decoded, Frames, Limits, decode, encode};

/// Decodes `data` as described in the module doc and checks the round-trip property of a
/// success. Returns the decoded frame, if any.
///
/// # Panics
/// Only if the codec is broken: a decoded record fails to re-encode, or decodes differently
/// after re-encoding.
pub fn decode_any(data: &[u8]) -> Option<Decoded> {
    let limits = Limits::DEFAULT;
    let parts = split(data);
    let decoded = decode(&parts, &limits).ok()?;
    check_round_trip(&decoded, &limits);
    Some(decoded)
}

/// First byte of a two-part fuzz input.
pub const TWO_PARTS: u8 = 0x02;

fn split(data: &[u8]) -> Vec<Bytes> {
    if let Some((&[TWO_PARTS, hi, lo], rest)) = data.split_first_chunk::<3>() {
        let n = usize::from(u16::from_be_bytes([hi, lo]));
        if rest.len() >= n {
            return vec![
                Bytes::copy_from_slice(&rest[..n]),
                Bytes::copy_from_slice(&rest[n..]),
            ];
        }
    }
    vec![Bytes::copy_from_slice(data)]
}

/// Encodes frames into the fuzz input format of [`decode_any`].
///
/// # Panics
/// If the envelope is longer than `u16::MAX` bytes (no record is).
#[must_use]
pub fn seed(frames: &Frames) -> Vec<u8> {
    let envelope = frames.envelope();
    let Some(payload) = frames.payload() else {
        return envelope.to_vec();
    };
    let n = u16::try_from(envelope.len()).expect("envelope fits in u16");
    let mut out = Vec::with_capacity(3 + frames.encoded_len());
    out.push(TWO_PARTS);
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(envelope);
    out.extend_from_slice(payload);
    out
}

fn check_round_trip(decoded: &Decoded, limits: &Limits) {
    let frames = encode(
        &decoded.record,
        decoded.header.correlation,
        decoded.payload.clone(),
    )
    .expect("a decoded record re-encodes");
    let again = decode(&frames.into_vec(), limits).expect("a re-encoded record decodes");
    assert_eq!(&again, decoded, "decode(encode(decode(x))) == decode(x)");
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ids::{CorrelationId, DispatchKey};
    use crate::record::{OneWay, Ping, Record};

    #[test]
    fn seeds_decode() {
        let one_way = encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(7),
            }),
            CorrelationId::NONE,
            Some(Bytes::from_static(b"hi")),
        )
        .unwrap();
        let decoded = decode_any(&seed(&one_way)).expect("seed decodes");
        assert_eq!(decoded.payload.as_deref(), Some(&b"hi"[..]));
        let ping = encode(&Record::Ping(Ping { seq: 3 }), CorrelationId::NONE, None).unwrap();
        assert!(decode_any(ping.envelope()).is_some());
    }

    #[test]
    fn committed_corpus_decodes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).expect("seed corpus exists") {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(
                decode_any(&data).is_some(),
                "every committed seed is a valid frame"
            );
            seen += 1;
        }
        assert!(seen >= 3);
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_any(&data);
        }

        #[test]
        fn header_like_input_never_panics(
            command in any::<u8>(),
            flags in 0u8..4,
            correlation in any::<u64>(),
            body in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let mut data = vec![TWO_PARTS, 0, 0];
            data.extend_from_slice(&[1, command, flags, 0]);
            data.extend_from_slice(&correlation.to_be_bytes());
            data.extend_from_slice(&body);
            let n = u16::try_from(data.len() - 3).unwrap();
            data[1..3].copy_from_slice(&n.to_be_bytes());
            data.extend_from_slice(b"payload");
            let _ = decode_any(&data);
            let _ = decode_any(&data[3..]);
        }
    }
}
