//! The bodies of the `decode` and `batch` fuzz targets (`wire/fuzz/fuzz_targets/`), kept in the
//! crate so that they are unit-tested without cargo-fuzz.
//!
//! Input format: an input starting with [`TWO_PARTS`] is `[0x02][u16 BE length n][envelope of n
//! bytes][payload part = the rest]` (inputs too short for their `n` are tried as one part); any
//! other input is a one-part message (an envelope without payload — a valid envelope starts with
//! the version byte `0x01`). [`seed`] builds this format from encoded frames.
//!
//! Property checked: decoding never panics, and whatever decodes re-encodes to a frame that
//! decodes to the same value. A one-part input that is a 139 batch frame is also parsed with
//! [`crate::batch::BatchFrame`]: every sub-record is decoded and round-trip checked, and a
//! valid batch re-encodes to the same bytes.

use bytes::Bytes;

use crate::batch::{BatchEncoder, BatchFrame};
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
    if let [frame] = &parts[..] {
        check_batch(frame, &limits);
    }
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

/// Parses `frame` as a batch (if it is one) and checks the batch properties of the module doc.
/// Returns the number of sub-records that decoded.
///
/// # Panics
/// Only if the batch codec is broken: a parsed batch does not re-encode to the same bytes, or a
/// decoded sub-record fails its round trip.
pub fn check_batch(frame: &Bytes, limits: &Limits) -> usize {
    let Ok(batch) = BatchFrame::parse(frame.clone()) else {
        return 0;
    };
    let mut decoded = 0;
    let mut again = BatchEncoder::new(Vec::new());
    for r in batch.records() {
        again
            .push(r.envelope, r.payload.as_deref())
            .expect("a parsed sub-record re-encodes");
        if let Ok(d) = r.decode(limits) {
            check_round_trip(&d, limits);
            decoded += 1;
        }
    }
    assert_eq!(again.count() as usize, batch.len());
    assert_eq!(&again.finish()[..], &frame[..], "encode(parse(x)) == x");
    decoded
}

/// The `batch` target: the batch walker on arbitrary bytes. `data` is tried as a whole frame
/// and, so that the fuzzer reaches the sub-record walk without first finding a valid 139
/// header, as `[count byte][sub-records]` behind a valid batch prefix of `count % 8 + 1`
/// records. For each: [`check_batch`] (parse, re-encode to the same bytes, decode and round-trip
/// every sub-record), and the unvalidated walker [`crate::batch::sub_records`] never panics
/// and, on a frame that parsed, yields exactly the records the validated parse did.
///
/// # Panics
/// Only if the batch codec is broken (as [`check_batch`]), or the two walkers disagree.
pub fn batch_any(data: &[u8]) {
    let limits = Limits::DEFAULT;
    let whole = Bytes::copy_from_slice(data);
    check_walkers(&whole, &limits);
    if let Some((&count, rest)) = data.split_first() {
        let count = u32::from(count % 8) + 1;
        let mut frame = crate::batch::batch_prefix(count).to_vec();
        frame.extend_from_slice(rest);
        check_walkers(&Bytes::from(frame), &limits);
    }
}

fn check_walkers(frame: &Bytes, limits: &Limits) {
    check_batch(frame, limits);
    let declared = frame
        .get(crate::frame::HEADER_LEN..crate::frame::HEADER_LEN + 4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let raw: Vec<_> = crate::batch::sub_records(frame, declared.min(1 << 16))
        .map(|r| (r.envelope, r.payload))
        .collect();
    if let Ok(batch) = BatchFrame::parse(frame.clone()) {
        let parsed: Vec<_> = batch.records().map(|r| (r.envelope, r.payload)).collect();
        assert_eq!(parsed.len(), raw.len(), "both walkers see every record");
        for ((pe, pp), (re, rp)) in parsed.iter().zip(&raw) {
            assert_eq!(pe, re);
            assert_eq!(pp.as_deref(), *rp);
        }
    }
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

    /// A one-way 147 record with key 7 and payload `hi`.
    fn one_way_hi() -> crate::Frames {
        encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(7),
            }),
            CorrelationId::NONE,
            Some(Bytes::from_static(b"hi")),
        )
        .unwrap()
    }

    #[test]
    fn seeds_decode() {
        let one_way = one_way_hi();
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
            let batch = check_batch(&Bytes::from(data.clone()), &Limits::DEFAULT);
            assert!(
                decode_any(&data).is_some() || batch > 0,
                "every committed seed is a valid frame or batch"
            );
            seen += 1;
        }
        assert!(seen >= 3);
    }

    fn batch_of(records: &[(Vec<u8>, Option<Vec<u8>>)]) -> Vec<u8> {
        let mut enc = BatchEncoder::new(Vec::new());
        for (e, p) in records {
            enc.push(e, p.as_deref()).unwrap();
        }
        enc.finish()
    }

    #[test]
    fn committed_batch_corpus_runs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/batch");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).expect("batch seed corpus exists") {
            batch_any(&std::fs::read(entry.unwrap().path()).unwrap());
            seen += 1;
        }
        assert!(seen >= 3);
    }

    proptest! {
        #[test]
        fn the_batch_target_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            batch_any(&data);
        }
    }

    #[test]
    fn batch_seed_decodes_every_record() {
        let one_way = one_way_hi();
        let ping = encode(&Record::Ping(Ping { seq: 3 }), CorrelationId::NONE, None).unwrap();
        let frame = batch_of(&[
            (one_way.envelope().to_vec(), Some(b"hi".to_vec())),
            (ping.envelope().to_vec(), None),
        ]);
        assert_eq!(
            check_batch(&Bytes::from(frame.clone()), &Limits::DEFAULT),
            2
        );
        assert!(decode_any(&frame).is_none(), "a batch is not a record");
    }

    proptest! {
        #[test]
        fn batches_of_arbitrary_records_never_panic(
            records in proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 0..40),
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
                ),
                1..6,
            ),
            header in (any::<u8>(), 0u8..4),
            edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..4),
        ) {
            // Sub-records with plausible headers half the time, to reach the record decoder.
            let records: Vec<_> = records
                .into_iter()
                .map(|(mut e, p)| {
                    if header.1 % 2 == 0 && e.len() >= 12 {
                        e[0] = 1;
                        e[1] = header.0;
                        e[3] = 0;
                    }
                    (e, p)
                })
                .filter(|(e, _)| e.get(1) != Some(&crate::BATCH_COMMAND))
                .collect();
            prop_assume!(!records.is_empty());
            let mut frame = batch_of(&records);
            let _ = decode_any(&frame);
            for (at, value) in edits {
                let i = at.index(frame.len());
                frame[i] = value;
            }
            let _ = decode_any(&frame);
        }

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
