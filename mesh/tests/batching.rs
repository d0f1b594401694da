//! Natural batching on the wire: records queued for one peer in one I/O pass travel as one 139
//! batch frame, every record still arrives exactly once and in order, a lone record travels
//! alone, and replies queued together on the completion connection are batched as well.
//!
//! spec: SB-14.7 (contract asserted on real wire traffic via the tap), EG-4 (order per
//! connection; replies only on the completion connection), SB-2.1 (each batched record is
//! validated at ingress like a lone one), EG-16.26 (exactly one terminal per request).

mod common;

use std::collections::BTreeSet;

use bytes::Bytes;
use common::*;
use zlink_mesh::zlink_wire::{self, OneWay};
use zlink_mesh::{
    DispatchKey, LinkKind, MeshNode, Origin, Record, TapDirection, TapFrame, WireTap,
};

fn payload(i: u32) -> Bytes {
    let mut p = vec![0u8; 64];
    p[..4].copy_from_slice(&i.to_be_bytes());
    Bytes::from(p)
}

fn index(p: &[u8]) -> u32 {
    u32::from_be_bytes(p[..4].try_into().unwrap())
}

fn relay_sent(tap: &WireTap) -> Vec<TapFrame> {
    tap.frames()
        .into_iter()
        .filter(|f| f.direction == TapDirection::Sent && f.link == LinkKind::Relay)
        .collect()
}

// spec: SB-14.7, EG-4 — a flood of one-way records: the sender puts batch frames on the
// relay connection (seen on both taps), each record is on the wire exactly once (inside a
// batch or alone), and the receiver gets every record exactly once, in send order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flooded_one_way_records_travel_in_batches_exactly_once_in_order() {
    trace();
    const N: u32 = 4_000;
    const GROUP: u32 = 50;
    let tap_a = WireTap::new(100_000);
    let tap_b = WireTap::new(100_000);
    let mut ca = config("ba");
    ca.tap = Some(tap_a.clone());
    let mut cb = config("bb");
    cb.tap = Some(tap_b.clone());
    let (a, _ra) = MeshNode::start(ca).unwrap();
    let (b, mut rb) = MeshNode::start(cb).unwrap();
    link(&a, &b).await;
    tap_a.clear();
    tap_b.clear();

    // Half of the records as single sends in a tight loop (natural batching, whenever the I/O
    // thread finds several queued), half as groups handed over in one command (always queued
    // together in one pass, so batches are guaranteed to appear).
    let key = DispatchKey::new(5);
    let mut i = 0;
    while i < N {
        if (i / GROUP) % 2 == 0 {
            for j in i..i + GROUP {
                a.send(b.node(), key, payload(j)).await.unwrap();
            }
        } else {
            a.send_batch(b.node(), key, (i..i + GROUP).map(payload))
                .await
                .unwrap();
        }
        i += GROUP;
    }
    for want in 0..N {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .expect("record arrives")
            .unwrap();
        assert_eq!(m.record, Record::OneWay(OneWay { key }));
        assert_eq!(
            m.origin,
            Origin::Peer {
                node: a.node().clone(),
                generation: a.generation()
            }
        );
        assert_eq!(index(m.payload.as_deref().unwrap()), want, "in order");
    }

    // Every record went on the wire exactly once, in order; batch frames carried some.
    let sent = relay_sent(&tap_a);
    let batches: BTreeSet<u64> = sent
        .iter()
        .filter(|f| f.command() == Some(zlink_wire::BATCH_COMMAND))
        .filter_map(|f| f.batch)
        .collect();
    assert!(!batches.is_empty(), "no batch frame on the wire");
    let records: Vec<&TapFrame> = sent.iter().filter(|f| f.command() == Some(147)).collect();
    let order: Vec<u32> = records.iter().map(|f| index(&f.frames[1])).collect();
    assert_eq!(
        order,
        (0..N).collect::<Vec<_>>(),
        "each record sent once, in order"
    );
    let batched = records.iter().filter(|f| f.batch.is_some()).count();
    assert!(batched >= 2, "the grouped records travel batched");
    for f in &records {
        let d = f.decoded.as_ref().expect("batched records decode");
        assert_eq!(d.record, Record::OneWay(OneWay { key }));
    }
    // The batch frames arrived as such, and the receiver's tap saw the same records.
    let got = tap_b.frames();
    assert!(got.iter().any(|f| f.direction == TapDirection::Received
        && f.link == LinkKind::Relay
        && f.command() == Some(zlink_wire::BATCH_COMMAND)));
    let received: Vec<u32> = got
        .iter()
        .filter(|f| f.direction == TapDirection::Received && f.command() == Some(147))
        .map(|f| index(&f.frames[1]))
        .collect();
    assert_eq!(received, (0..N).collect::<Vec<_>>());

    // A lone record, with nothing queued behind it, travels alone (no batch frame).
    tap_a.clear();
    a.send(b.node(), key, payload(N)).await.unwrap();
    let m = tokio::time::timeout(WAIT, rb.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(index(m.payload.as_deref().unwrap()), N);
    let sent = relay_sent(&tap_a);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].command(), Some(147));
    assert_eq!(sent[0].batch, None);
    assert_eq!(a.counters().dropped_total(), 0);
    assert_eq!(b.counters().dropped_total(), 0);
    a.shutdown().await;
    b.shutdown().await;
}

// spec: EG-4, EG-16.26 — many requests in flight: replies travel only on the completion
// connection, batched when the responder's I/O thread finds several queued, and every request
// gets exactly its own reply, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_queued_together_are_batched_on_completion() {
    const N: u32 = 200;
    let tap_b = WireTap::new(100_000);
    let (a, _ra) = start("qa");
    let mut cb = config("qb");
    cb.tap = Some(tap_b.clone());
    let (b, mut rb) = MeshNode::start(cb).unwrap();
    link(&a, &b).await;
    let a = std::sync::Arc::new(a);
    tap_b.clear();

    let mut calls = Vec::new();
    for i in 0..N {
        let a = a.clone();
        let to = b.node().clone();
        calls.push(tokio::spawn(async move {
            a.request(&to, DispatchKey::new(1), payload(i), WAIT).await
        }));
    }
    // b collects all requests first, then answers them while its I/O thread is held: the
    // replies wait together in its command channel and are drained in one pass on release,
    // so they are queued together by construction (not by scheduling luck).
    let mut pending = Vec::new();
    for _ in 0..N {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .unwrap()
            .unwrap();
        pending.push(m);
    }
    let hold = b.hold_io_for_tests();
    for m in pending {
        let p = m.payload.clone().unwrap();
        m.reply.unwrap().reply(p);
    }
    drop(hold);
    for (i, c) in calls.into_iter().enumerate() {
        let r = c.await.unwrap().expect("reply");
        assert_eq!(index(r.payload.as_deref().unwrap()), i as u32);
    }

    let frames = tap_b.frames();
    assert_eq!(tap_b.overflowed(), 0);
    let sent: Vec<&TapFrame> = frames
        .iter()
        .filter(|f| f.direction == TapDirection::Sent)
        .collect();
    let mut replies: Vec<u32> = sent
        .iter()
        .filter(|f| f.command() == Some(145))
        .map(|f| {
            assert_eq!(f.link, LinkKind::Completion, "replies only on completion");
            index(&f.frames[1])
        })
        .collect();
    replies.sort_unstable();
    assert_eq!(
        replies,
        (0..N).collect::<Vec<_>>(),
        "exactly one reply per request on the wire"
    );
    assert!(
        sent.iter()
            .any(|f| f.link == LinkKind::Completion
                && f.command() == Some(zlink_wire::BATCH_COMMAND)),
        "replies answered together travel batched"
    );
    assert!(
        sent.iter()
            .filter(|f| f.command() == Some(145))
            .any(|f| f.batch.is_some())
    );
    assert_eq!(a.counters().dropped_total(), 0);
    assert_eq!(b.counters().dropped_total(), 0);
    b.shutdown().await;
}

// spec: EG-4, SB-2.1 — plain one-way 147 records and other one-way records (160 with
// correlation 0) from one peer, interleaved: the receiver gets every record exactly once, in
// send order, each as sent (a 147 crosses the inbound channel in a compact form, other
// records in full; a read pass holding both must keep the order). The receiver's I/O thread
// is held while they are sent, so its read passes find them queued together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_records_of_both_forms_arrive_in_send_order() {
    const N: u32 = 600;
    let (a, _ra) = start("ma");
    let (b, mut rb) = start("mb");
    link(&a, &b).await;
    let key = DispatchKey::new(5);
    let call = |i: u32| {
        Record::ActorCall(zlink_wire::ActorCall {
            actor: zlink_wire::ActorId::new("actor-1").unwrap(),
            object_generation: 1.into(),
            authority_owner_generation: 1.into(),
            owner_lease_generation: 1.into(),
            target_node_generation: b.generation(),
            key: DispatchKey::new(100 + i),
            deadline: None,
        })
    };
    // Runs of 1..=4 records of one form, then the other form.
    let full = |i: u32| (i / 3 + i / 7) % 2 == 1;
    let hold = b.hold_io_for_tests();
    for i in 0..N {
        if full(i) {
            a.send_record(b.node(), call(i), Some(payload(i)))
                .await
                .unwrap();
        } else {
            a.send(b.node(), key, payload(i)).await.unwrap();
        }
    }
    drop(hold);
    for want in 0..N {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .expect("record arrives")
            .unwrap();
        assert_eq!(index(m.payload.as_deref().unwrap()), want, "in send order");
        if full(want) {
            assert_eq!(m.record, call(want));
        } else {
            assert_eq!(m.record, Record::OneWay(OneWay { key }));
        }
        assert_eq!(m.correlation, zlink_wire::CorrelationId::NONE);
        assert!(m.reply.is_none() && m.deadline.is_none());
        assert_eq!(
            m.origin,
            Origin::Peer {
                node: a.node().clone(),
                generation: a.generation()
            }
        );
    }
    assert!(rb.is_empty());
    assert_eq!(a.counters().dropped_total(), 0);
    assert_eq!(b.counters().dropped_total(), 0);
    a.shutdown().await;
    b.shutdown().await;
}

// spec: SB-5.3, EG-4 — a binding's one-way 24s sent pre-encoded from its template
// (`MeshNode::try_send_frames`) or written from it straight into the peer's outbox as batch
// sub-records (`MeshNode::try_send_template`), interleaved with 24s encoded whole
// (`try_send_record`), arrive exactly once, in send order, each decoded to the record it
// stands for, batched on the wire; frames that are not
// a one-way application record (a request's correlation, a control record, a reply) are
// refused before admission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_encoded_one_way_records_arrive_as_the_records_they_encode() {
    use zlink_wire::{ActorSend, ActorSendTemplate, BoundSessionTail, CorrelationId};
    const N: u32 = 300;
    let tap = WireTap::new(10_000);
    let mut ca = config("fa");
    ca.tap = Some(tap.clone());
    let (a, _ra) = MeshNode::start(ca).unwrap();
    let (b, mut rb) = start("fb");
    link(&a, &b).await;
    tap.clear();
    let rec = |i: u32| ActorSend {
        actor: zlink_wire::ActorId::new("actor-7").unwrap(),
        object_generation: 3.into(),
        authority_owner_generation: 4.into(),
        owner_lease_generation: 5.into(),
        session_lifecycle: 6.into(),
        key: DispatchKey::new(100 + i % 3),
        deadline: None,
        tail: BoundSessionTail {
            binding_generation: 8.into(),
            session_sequence: u64::from(i).into(),
        },
    };
    let template = ActorSendTemplate::new(&rec(0)).expect("a one-way 24");
    // Everything queued before the I/O thread takes it: the records travel batched.
    let hold = a.hold_io_for_tests();
    for i in 0..N {
        let r = rec(i);
        if i % 4 == 3 {
            a.try_send_record(b.node(), Record::ActorSend(r), Some(payload(i)))
                .unwrap();
        } else if i % 4 != 0 {
            let record = template
                .record(r.key, r.tail.session_sequence, payload(i))
                .unwrap();
            a.try_send_template(b.node(), record).unwrap();
        } else {
            let frames = template
                .frames(r.key, r.tail.session_sequence, payload(i))
                .unwrap();
            a.try_send_frames(b.node(), frames).unwrap();
        }
    }
    drop(hold);
    for want in 0..N {
        let m = tokio::time::timeout(WAIT, rb.recv())
            .await
            .expect("record arrives")
            .unwrap();
        assert_eq!(index(m.payload.as_deref().unwrap()), want, "in send order");
        assert_eq!(m.record, Record::ActorSend(rec(want)));
        assert_eq!(m.correlation, CorrelationId::NONE);
    }
    // On the wire: each record once, in order, the records sent in one loop batched.
    let sent = relay_sent(&tap);
    let records: Vec<&TapFrame> = sent.iter().filter(|f| f.command() == Some(24)).collect();
    let order: Vec<u32> = records.iter().map(|f| index(&f.frames[1])).collect();
    assert_eq!(order, (0..N).collect::<Vec<_>>(), "each record sent once");
    let batched = records.iter().filter(|f| f.batch.is_some()).count();
    assert_eq!(batched, N as usize, "all queued together: all batched");
    let refused = |frames| {
        matches!(
            a.try_send_frames(b.node(), frames),
            Err(zlink_mesh::TrySendError::Failed(
                zlink_mesh::SendError::Encode(_)
            ))
        )
    };
    let request = zlink_wire::encode(
        &Record::ActorSend(ActorSend {
            deadline: Some(zlink_wire::Deadline::from_millis(1000)),
            ..rec(0)
        }),
        CorrelationId::new(9),
        Some(payload(0)),
    )
    .unwrap();
    assert!(refused(request), "a request's correlation is the mesh's");
    let ping = zlink_wire::encode(
        &Record::Ping(zlink_wire::Ping { seq: 1 }),
        CorrelationId::NONE,
        None,
    )
    .unwrap();
    assert!(refused(ping), "control records are the mesh's");
    let reply = zlink_wire::encode(
        &Record::Reply(zlink_wire::Reply),
        CorrelationId::new(9),
        Some(payload(0)),
    )
    .unwrap();
    assert!(refused(reply), "replies answer requests");
    assert_eq!(b.counters().dropped_total(), 0);
    a.shutdown().await;
    b.shutdown().await;
}
