//! Infrastructure progress while application handlers are blocked (EG-1, EG-13, EG-16).
//!
//! The "application" here is whoever reads the node's inbound channel; a blocked handler
//! stops reading it (the channel fills: the application queue is PAUSED). Timeouts, peer
//! accept and completions are driven by the mesh's I/O thread and keep progressing.
//! EG-16.25 test hook: `MeshConfig::inbound_capacity` plus an unread `InboundReceiver` is the
//! PAUSED Application Job Queue; the lane runtime can reuse the same setup (see also
//! `flow_control.rs`).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use zlink_mesh::{DispatchKey, MeshNode, Record, RequestError};

fn paused_app(node: &str) -> zlink_mesh::MeshConfig {
    let mut c = config(node);
    c.inbound_capacity = 1;
    c
}

// spec: EG-16.21 (with a handler blocked waiting, that call's timeout still fires),
// EG-16.23 (with a handler blocked waiting, a new peer connection is still accepted),
// EG-16.25 (a started cross-node request completes via the completion connection while the
// application queue is PAUSED)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_accepts_and_completions_progress_while_handlers_block() {
    let (a, _ra_never_read) = MeshNode::start(paused_app("pa")).unwrap();
    let (b, mut rb) = start("pb");
    link(&a, &b).await;
    // Fill a's application queue: a's handler is "blocked" and never reads.
    for i in 0..4u8 {
        b.send(a.node(), DispatchKey::new(1), Bytes::from(vec![i]))
            .await
            .unwrap();
    }

    // a's handler awaits a request to b that b never answers: the call's timeout fires.
    let t0 = Instant::now();
    let held = {
        let req = a.request(
            b.node(),
            DispatchKey::new(2),
            Bytes::new(),
            Duration::from_millis(300),
        );
        tokio::pin!(req);
        // b holds the request (or, if a's I/O thread was stalled past the deadline, it was
        // never sent: a request never leaves after its deadline); either way it times out
        let (held, ended) = tokio::time::timeout(WAIT, async {
            tokio::select! {
                m = rb.recv() => (Some(m.unwrap()), None),
                r = &mut req => (None, Some(r)),
            }
        })
        .await
        .expect("neither held nor ended");
        let r = match ended {
            Some(r) => r,
            None => tokio::time::timeout(WAIT, req)
                .await
                .expect("the deadline fires"),
        };
        assert_eq!(r.unwrap_err(), RequestError::DeadlineExceeded);
        assert!(t0.elapsed() < WAIT);
        held
    };
    // a late terminal from b: recorded by a, not a second terminal
    let held_by_b = held.is_some();
    drop(held.and_then(|m| m.reply));

    // A new peer connects to a while a's application stays blocked.
    let (c, _rc) = start("pc");
    c.connect(a.address()).unwrap();
    assert!(a.wait_peer_up(c.node(), None, WAIT).await.is_some());
    assert!(c.wait_peer_up(a.node(), None, WAIT).await.is_some());

    // A request from a (queue PAUSED) to b completes through the completion connection.
    // (the timed-out request reaches b first if b took it only after its deadline: b answers
    // it too late, like the held one above)
    let answer = tokio::spawn(async move {
        let mut late = 0;
        loop {
            let m = rb.recv().await.unwrap();
            match m.record {
                Record::Request(r) if r.key == DispatchKey::new(3) => {
                    m.reply.unwrap().reply(Bytes::from_static(b"ok"));
                    return (rb, late);
                }
                _ => late += 1,
            }
        }
    });
    let r = a
        .request(b.node(), DispatchKey::new(3), Bytes::new(), WAIT)
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"ok"[..]));
    let (_rb, late) = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    let late = late + u64::from(held_by_b);
    assert!(late <= 1, "the timed-out request reached b {late} times");
    eventually("late reply recorded", || {
        a.counters().dropped(zlink_mesh::DropReason::LateReply) == late
    })
    .await;
    for n in [a, b, c] {
        n.shutdown().await;
    }
}
