//! Bad bytes produce typed errors: one test per rejection class of the decoder.

mod common;

use bytes::Bytes;
use zlink_wire::*;

fn envelope(command: u8, flags: u8, correlation: u64, body: &[u8]) -> Bytes {
    let mut bytes = vec![VERSION, command, flags, 0];
    bytes.extend_from_slice(&correlation.to_be_bytes());
    bytes.extend_from_slice(body);
    Bytes::from(bytes)
}

fn ping() -> Bytes {
    encode(&Record::Ping(Ping { seq: 7 }), CorrelationId::NONE, None)
        .unwrap()
        .envelope()
        .clone()
}

fn one_way() -> (Bytes, Bytes) {
    let frames = encode(
        &Record::OneWay(OneWay {
            key: DispatchKey::new(1),
        }),
        CorrelationId::NONE,
        Some(Bytes::from_static(b"data")),
    )
    .unwrap();
    let (e, p) = frames.into_parts();
    (e, p.unwrap())
}

fn decode1(envelope: Bytes) -> Result<Decoded, DecodeError> {
    decode(&[envelope], &Limits::DEFAULT)
}

#[test]
fn wrong_part_count() {
    assert!(matches!(
        decode(&[], &Limits::DEFAULT),
        Err(DecodeError::PartCount { count: 0 })
    ));
    let three = [ping(), Bytes::new(), Bytes::new()];
    assert!(matches!(
        decode(&three, &Limits::DEFAULT),
        Err(DecodeError::PartCount { count: 3 })
    ));
}

#[test]
fn truncated_header() {
    for len in 0..HEADER_LEN {
        let err = decode1(ping().slice(..len)).unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { len: l } if l == len),
            "{err:?}"
        );
    }
}

#[test]
fn truncated_body() {
    let full = ping();
    let err = decode1(full.slice(..full.len() - 1)).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Body {
                command: Command::Ping,
                ..
            }
        ),
        "{err:?}"
    );
    let err = decode1(full.slice(..HEADER_LEN)).unwrap_err();
    assert!(matches!(err, DecodeError::Body { .. }), "{err:?}");
}

#[test]
fn wrong_version_and_reserved_byte() {
    let mut bytes = ping().to_vec();
    bytes[0] = 2;
    assert!(matches!(
        decode1(Bytes::from(bytes.clone())),
        Err(DecodeError::UnsupportedVersion { version: 2 })
    ));
    bytes[0] = VERSION;
    bytes[3] = 1;
    assert!(matches!(
        decode1(Bytes::from(bytes)),
        Err(DecodeError::ReservedByte { value: 1 })
    ));
}

#[test]
fn unknown_commands_and_flags() {
    for number in 0..=u8::MAX {
        let result = decode1(envelope(number, 0, 0, &[0x90]));
        match Command::from_number(number) {
            Ok(_) => {}
            Err(_) if number == RESERVED_COMMAND => {
                assert!(matches!(result, Err(DecodeError::ReservedCommand)));
            }
            Err(_) => assert!(
                matches!(result, Err(DecodeError::UnknownCommand { number: n }) if n == number)
            ),
        }
    }
    let mut bytes = ping().to_vec();
    bytes[2] = 0x80;
    assert!(matches!(
        decode1(Bytes::from(bytes)),
        Err(DecodeError::UnknownFlags { flags: 0x80 })
    ));
}

#[test]
fn reply_flag_and_correlation_rules() {
    let mut bytes = ping().to_vec();
    bytes[2] = Flags::REPLY.bits();
    assert!(matches!(
        decode1(Bytes::from(bytes)),
        Err(DecodeError::ReplyFlag {
            command: Command::Ping,
            reply: true
        })
    ));
    // 43 without the REPLY flag.
    assert!(matches!(
        decode1(envelope(43, 0, 1, &[])),
        Err(DecodeError::ReplyFlag {
            command: Command::SessionRelocationSealed,
            reply: false
        })
    ));
    // A request without correlation, a one-way record with one.
    assert!(matches!(
        decode1(envelope(42, 0, 0, &[])),
        Err(DecodeError::Correlation {
            command: Command::SessionRelocationSeal,
            ..
        })
    ));
    let mut bytes = ping().to_vec();
    bytes[11] = 1;
    assert!(matches!(
        decode1(Bytes::from(bytes)),
        Err(DecodeError::Correlation { .. })
    ));
}

#[test]
fn payload_flag_and_payload_rules() {
    let (env, payload) = one_way();
    // Flag set, no payload part.
    assert!(matches!(
        decode1(env.clone()),
        Err(DecodeError::PayloadFlag {
            flag: true,
            parts: 1
        })
    ));
    // Payload part without the flag.
    let mut cleared = env.to_vec();
    cleared[2] = 0;
    assert!(matches!(
        decode(
            &[Bytes::from(cleared.clone()), payload.clone()],
            &Limits::DEFAULT
        ),
        Err(DecodeError::PayloadFlag {
            flag: false,
            parts: 2
        })
    ));
    // Flag consistent with the parts but the command requires a payload.
    assert!(matches!(
        decode1(Bytes::from(cleared)),
        Err(DecodeError::Payload {
            command: Command::OneWay,
            present: false
        })
    ));
    // A payload on a command that forbids one.
    let mut flagged = ping().to_vec();
    flagged[2] = Flags::HAS_PAYLOAD.bits();
    assert!(matches!(
        decode(&[Bytes::from(flagged), payload], &Limits::DEFAULT),
        Err(DecodeError::Payload {
            command: Command::Ping,
            present: true
        })
    ));
    assert!(matches!(
        encode(
            &Record::Ping(Ping { seq: 1 }),
            CorrelationId::NONE,
            Some(Bytes::new())
        ),
        Err(EncodeError::Payload {
            command: Command::Ping,
            present: true
        })
    ));
}

#[test]
fn sizes_are_checked_before_anything_else() {
    let limits = Limits {
        max_envelope: 32,
        max_payload: 8,
    };
    // An oversized envelope is rejected on its size alone, even with a garbage header.
    let big = Bytes::from(vec![0xff; 33]);
    assert!(matches!(
        decode(&[big], &limits),
        Err(DecodeError::EnvelopeTooLarge { len: 33, max: 32 })
    ));
    let (env, _) = one_way();
    let payload = Bytes::from(vec![0; 9]);
    assert!(matches!(
        decode(&[env.clone(), payload], &limits),
        Err(DecodeError::PayloadTooLarge { len: 9, max: 8 })
    ));
    assert!(decode(&[env, Bytes::from(vec![0; 8])], &limits).is_ok());
}

#[test]
fn trailing_bytes_after_body() {
    let mut bytes = ping().to_vec();
    bytes.push(0xc0);
    assert!(matches!(
        decode1(Bytes::from(bytes)),
        Err(DecodeError::TrailingBytes {
            command: Command::Ping,
            count: 1
        })
    ));
}

#[test]
fn invalid_ids_are_typed() {
    #[derive(serde::Serialize)]
    struct RawHello<'a> {
        mesh: &'a str,
        node: &'a str,
        generation: u64,
        #[serde(with = "serde_bytes_32")]
        nonce: [u8; 32],
    }
    mod serde_bytes_32 {
        pub fn serialize<S: serde::Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(v)
        }
    }
    for (mesh, node) in [("main", "bad node"), ("main", ""), ("bad/mesh", "n1")] {
        let body = rmp_serde::to_vec(&RawHello {
            mesh,
            node,
            generation: 1,
            nonce: [0; 32],
        })
        .unwrap();
        let err = decode1(envelope(128, 0, 0, &body)).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::InvalidId {
                    command: Command::Hello,
                    ..
                }
            ),
            "{err:?}"
        );
    }
    let long_actor = "x".repeat(129);
    let body = rmp_serde::to_vec(&(long_actor.as_str(), 1u64, 1u64, 1u64, 1u64, 1u32, ())).unwrap();
    let err = decode(
        &[envelope(160, 1, 0, &body), Bytes::new()],
        &Limits::DEFAULT,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::InvalidId {
                command: Command::ActorCall,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn unknown_enum_codes_and_wrong_nonce_length() {
    // ErrorReply with kind 99.
    let body = rmp_serde::to_vec(&(99u8, "x")).unwrap();
    assert!(matches!(
        decode1(envelope(146, Flags::REPLY.bits(), 1, &body)),
        Err(DecodeError::Body {
            command: Command::ErrorReply,
            ..
        })
    ));
    // Proof with 31 bytes.
    let body = [0x91, 0xc4, 31]
        .iter()
        .copied()
        .chain([0u8; 31])
        .collect::<Vec<_>>();
    assert!(matches!(
        decode1(envelope(130, 0, 0, &body)),
        Err(DecodeError::Body { .. })
    ));
    // Over-long error detail.
    let body = rmp_serde::to_vec(&(1u8, "d".repeat(257))).unwrap();
    assert!(matches!(
        decode1(envelope(146, Flags::REPLY.bits(), 1, &body)),
        Err(DecodeError::Body { .. })
    ));
    let mut reply = ErrorReply::new(ErrorKind::Internal, "d".repeat(300));
    assert_eq!(reply.detail.len(), ErrorReply::MAX_DETAIL);
    reply.detail.push('x');
    assert!(matches!(
        encode(&Record::ErrorReply(reply), CorrelationId::new(1), None),
        Err(EncodeError::TooLong { len: 257, max: 256 })
    ));
}

#[test]
fn huge_declared_lengths_fail_without_allocating() {
    // Hello whose mesh name declares a 4 GiB string, an array declaring 4 G elements, a map
    // declaring 4 G entries: all fail as typed body errors (see tests/allocation.rs for the
    // allocation bound).
    let bodies: [&[u8]; 4] = [
        &[0x94, 0xdb, 0xff, 0xff, 0xff, 0xff, b'a'],
        &[0xdd, 0xff, 0xff, 0xff, 0xff, 0x01],
        &[0xdf, 0xff, 0xff, 0xff, 0xff, 0xa4, b'm', b'e', b's', b'h'],
        &[0x94, 0xc6, 0xff, 0xff, 0xff, 0xff],
    ];
    for body in bodies {
        let err = decode1(envelope(128, 0, 0, body)).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Body {
                    command: Command::Hello,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[test]
fn deep_nesting_is_rejected_not_overflowing() {
    let mut body = vec![0x91; 100_000];
    body.push(0xc0);
    let limits = Limits {
        max_envelope: 200_000,
        max_payload: 0,
    };
    let err = decode(&[envelope(128, 0, 0, &body)], &limits).unwrap_err();
    assert!(matches!(err, DecodeError::Body { .. }), "{err:?}");
}

#[test]
fn errors_display_and_name_their_command() {
    let err = decode1(envelope(45, 0, 0, &[])).unwrap_err();
    assert_eq!(err.to_string(), "command 45 is reserved and never accepted");
    assert_eq!(err.command(), None);
    let mut bytes = ping().to_vec();
    bytes.push(0);
    let err = decode1(Bytes::from(bytes)).unwrap_err();
    assert_eq!(err.command(), Some(Command::Ping));
    assert!(err.to_string().contains("trailing"));
}

#[test]
fn every_golden_sample_peeks_the_same_header_it_decodes() {
    for (name, record, correlation, payload) in common::samples() {
        let frames = encode(&record, correlation, payload).unwrap();
        let header = peek_header(frames.envelope()).unwrap();
        let decoded = decode(&frames.clone().into_vec(), &Limits::DEFAULT).unwrap();
        assert_eq!(header, decoded.header, "{name}");
        assert_eq!(header.has_payload(), frames.part_count() == 2, "{name}");
    }
}

/// Builds a batch frame from raw sub-record bytes and a declared count (no validation).
fn raw_batch(count: u32, subs: &[u8]) -> Bytes {
    let mut f = envelope(139, 0, 0, &count.to_be_bytes()).to_vec();
    f.extend_from_slice(subs);
    Bytes::from(f)
}

fn sub(envelope: &[u8], payload: Option<&[u8]>) -> Vec<u8> {
    let mut v = vec![if payload.is_some() { 2 } else { 1 }];
    v.extend_from_slice(&(envelope.len() as u32).to_be_bytes());
    v.extend_from_slice(envelope);
    if let Some(p) = payload {
        v.extend_from_slice(&(p.len() as u32).to_be_bytes());
        v.extend_from_slice(p);
    }
    v
}

type ErrorCheck = fn(&DecodeError) -> bool;

// Batch framing: every broken rule is a typed error of the whole frame; nothing panics.
#[test]
fn broken_batch_framing_is_typed() {
    let (e, p) = one_way();
    let good = sub(&e, Some(&p));
    assert_eq!(BatchFrame::parse(raw_batch(1, &good)).unwrap().len(), 1);
    let cases: Vec<(Bytes, ErrorCheck)> = vec![
        (raw_batch(0, &[]), |e| {
            matches!(e, DecodeError::BatchCount { declared: 0, .. })
        }),
        (raw_batch(MAX_BATCH_RECORDS + 1, &good), |e| {
            matches!(e, DecodeError::BatchCount { .. })
        }),
        // Fewer records than declared.
        (raw_batch(2, &good), |e| {
            matches!(e, DecodeError::BatchFraming { index: 1, .. })
        }),
        // More bytes than declared records.
        (raw_batch(1, &[good.clone(), good.clone()].concat()), |e| {
            matches!(e, DecodeError::BatchFraming { index: 1, .. })
        }),
        // Part count 3, 0.
        (raw_batch(1, &[&[3u8][..], &good[1..]].concat()), |e| {
            matches!(e, DecodeError::BatchFraming { index: 0, .. })
        }),
        (raw_batch(1, &[&[0u8][..], &good[1..]].concat()), |e| {
            matches!(e, DecodeError::BatchFraming { index: 0, .. })
        }),
        // Envelope / payload length past the end (4 GiB declared).
        (raw_batch(1, &[1, 0xff, 0xff, 0xff, 0xff, 1]), |e| {
            matches!(e, DecodeError::BatchFraming { index: 0, .. })
        }),
        (
            raw_batch(1, &[2, 0, 0, 0, 1, 1, 0xff, 0xff, 0xff, 0xff]),
            |e| matches!(e, DecodeError::BatchFraming { index: 0, .. }),
        ),
        // A batch inside a batch.
        (raw_batch(1, &sub(&raw_batch(1, &good), None)), |e| {
            matches!(e, DecodeError::NestedBatch { index: 0 })
        }),
        // Flags, correlation and version of the outer header.
        (envelope(139, 1, 0, &1u32.to_be_bytes()), |e| {
            matches!(e, DecodeError::BatchFraming { .. })
        }),
        (envelope(139, 0, 5, &1u32.to_be_bytes()), |e| {
            matches!(e, DecodeError::Correlation { .. })
        }),
        (envelope(139, 2, 0, &1u32.to_be_bytes()), |e| {
            matches!(e, DecodeError::ReplyFlag { .. })
        }),
        // Count truncated.
        (envelope(139, 0, 0, &[0, 0]), |e| {
            matches!(e, DecodeError::BatchFraming { .. })
        }),
    ];
    for (i, (frame, ok)) in cases.into_iter().enumerate() {
        let err = BatchFrame::parse(frame).unwrap_err();
        assert!(ok(&err), "case {i}: {err:?}");
        assert!(!err.to_string().is_empty());
    }
    // The single-record decoder never accepts a batch frame.
    assert!(matches!(
        decode1(raw_batch(1, &good)),
        Err(DecodeError::BatchNotRecord)
    ));
}

// A bad sub-record fails alone: the framing is fine, so the other records still decode.
#[test]
fn bad_sub_record_fails_alone() {
    let (e, p) = one_way();
    let mut bad = e.to_vec();
    bad[1] = 45;
    let frame = raw_batch(
        3,
        &[
            sub(&e, Some(&p)),
            sub(&bad, Some(&p)),
            sub(&e, None), // HAS_PAYLOAD set but no payload part
        ]
        .concat(),
    );
    let batch = BatchFrame::parse(frame).unwrap();
    let results = batch.decode_all(&Limits::DEFAULT);
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(DecodeError::ReservedCommand)));
    assert!(matches!(results[2], Err(DecodeError::PayloadFlag { .. })));
    // Sub-records obey the same size limits as whole messages.
    let tight = Limits {
        max_envelope: 4,
        max_payload: 1,
    };
    assert!(matches!(
        batch.records().next().unwrap().decode(&tight),
        Err(DecodeError::EnvelopeTooLarge { .. })
    ));
}
