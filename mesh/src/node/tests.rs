//! Unit tests of the node API's sans-IO parts: close causes, outbox framing, envelopes.

use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{self, Parts, Record};
use crate::outbox::SendBudget;
use crate::types::{DispatchKey, NodeGeneration, NodeRid};
use crate::{envelope::*, outbox::*};

use super::*;
use crate::config::Batching;

// Each close cause maps to the reason its Disconnect carries; the client's own Disconnect
// is not answered.
#[test]
fn close_causes_map_to_disconnect_reasons() {
    use zlink_wire::DisconnectReason as R;
    assert_eq!(ClientCloseCause::Remote.disconnect_reason(), None);
    assert_eq!(
        ClientCloseCause::Timeout.disconnect_reason(),
        Some(R::Timeout)
    );
    assert_eq!(
        ClientCloseCause::Shutdown.disconnect_reason(),
        Some(R::Shutdown)
    );
    for &r in R::ALL {
        assert_eq!(ClientCloseCause::Closed(r).disconnect_reason(), Some(r));
    }
    assert!(
        crate::DropReason::ALL.contains(&crate::DropReason::SessionClosed)
            && crate::DropReason::SessionClosed.as_str() == "session_closed"
    );
}

// The outbox frames small one-way records into runs cut as batch runs are (max_records),
// in admission order with everything else (a run never spans another item); large ones
// stay records of their own; the frames are the encoder's; a run's buffer starts at the
// last run's frame size, so a burst's size is kept for one run at most (bounded memory).
#[test]
fn the_outbox_frames_small_records_into_runs_in_order() {
    let batching = Batching {
        max_records: 4,
        max_record_payload: 100,
        ..Batching::default()
    };
    let outbox = Outbox::new(
        Arc::new(NodeRid::new("peer").unwrap()),
        NodeGeneration::new(1),
        Arc::new(SendBudget::new(crate::config::OutboundBudget::default())),
        batching,
    );
    let record = |i: u8, len: usize| {
        let frames = one_way_parts(DispatchKey::new(7), Bytes::from(vec![i; len])).unwrap();
        let bytes = frames.iter().map(|f| f.len() as u64).sum();
        SendOne { frames, bytes }
    };
    assert!(outbox.push(record(0, 10)), "the first push rings");
    for i in 1..10 {
        assert!(!outbox.push(record(i, 10)));
    }
    assert!(!outbox.push([OutItem::Cancel { corr: 3 }]));
    assert!(!outbox.push(record(10, 10)));
    assert!(!outbox.push(record(11, 101)));
    let mut taken = Vec::new();
    outbox.take_into(&mut taken);
    let shape: Vec<String> = taken
        .iter()
        .map(|item| match item {
            OutItem::Framed(run) => format!("run {}", run.records()),
            OutItem::Send { .. } => "send".into(),
            OutItem::Cancel { .. } => "cancel".into(),
            OutItem::Request { .. } => "request".into(),
        })
        .collect();
    assert_eq!(
        shape,
        ["run 4", "run 4", "run 2", "cancel", "run 1", "send"],
        "cut at max_records, never across another item"
    );
    // The first run is the frame the encoder writes for its records.
    let OutItem::Framed(first) = &mut taken[0] else {
        panic!("a run first");
    };
    let parts: Vec<Parts> = (0..4).map(|i| record(i, 10).frames).collect();
    let expected =
        zlink_wire::encode_batch(parts.iter().map(|p| (&p[0][..], Some(&p[1][..])))).unwrap();
    let full = first.frame_len();
    assert_eq!(first.take_frame(), expected.to_vec());
    // Bounded memory: a run after the burst starts at the burst's frame size, one after a
    // small run at the small run's.
    taken.clear();
    assert!(outbox.push(record(0, 10)));
    outbox.take_into(&mut taken);
    let Some(OutItem::Framed(lone)) = taken.last() else {
        panic!("a run");
    };
    let lone_len = lone.frame_len();
    assert!(lone.capacity() < 2 * full, "{}", lone.capacity());
    taken.clear();
    assert!(outbox.push(record(1, 10)));
    outbox.take_into(&mut taken);
    let Some(OutItem::Framed(next)) = taken.last() else {
        panic!("a run");
    };
    assert_eq!(
        next.capacity(),
        lone_len,
        "sized by the last run, not the burst"
    );
}

// The cached one-way envelope is byte-identical to a fresh encode, for any key sequence.
#[test]
fn one_way_parts_match_the_codec() {
    for key in [7u32, 7, 9, 7, 9, 9] {
        let payload = Bytes::from_static(b"payload");
        let cached = one_way_parts(DispatchKey::new(key), payload.clone()).unwrap();
        let fresh = codec::encode(
            &Record::OneWay(zlink_wire::OneWay {
                key: DispatchKey::new(key),
            }),
            0,
            Some(payload),
        )
        .unwrap();
        assert_eq!(&cached[..], &fresh[..]);
    }
}

// Keys that share a slot each get their own envelope (the slot's owner lock-free, the
// others behind the lock), byte-identical to a fresh encode.
#[test]
fn colliding_keys_keep_their_own_envelopes() {
    let first = 1_000_000u32;
    let slot = |k: u32| envelope_slot(static_key(zlink_wire::Command::OneWay, DispatchKey::new(k)));
    let other = (first + 1..)
        .find(|&k| std::ptr::eq(slot(k), slot(first)))
        .expect("a colliding key");
    for key in [first, other, first, other] {
        let payload = Bytes::from_static(b"p");
        let cached = one_way_parts(DispatchKey::new(key), payload.clone()).unwrap();
        let fresh = codec::encode(
            &Record::OneWay(zlink_wire::OneWay {
                key: DispatchKey::new(key),
            }),
            0,
            Some(payload),
        )
        .unwrap();
        assert_eq!(&cached[..], &fresh[..], "key {key}");
    }
}

// The kept push envelope is byte-identical to a fresh encode, for any key sequence, and
// never confused with the one-way envelope of the same key.
#[test]
fn push_parts_match_the_codec() {
    for key in [7u32, 7, 9, 7, 9, 9] {
        let payload = Bytes::from_static(b"payload");
        let _ = one_way_parts(DispatchKey::new(key), payload.clone()).unwrap();
        let cached = push_parts(DispatchKey::new(key), payload.clone()).unwrap();
        let fresh = codec::encode(
            &Record::Push(zlink_wire::Push {
                key: DispatchKey::new(key),
            }),
            0,
            Some(payload),
        )
        .unwrap();
        assert_eq!(&cached[..], &fresh[..]);
    }
}
