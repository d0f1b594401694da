//! Direct actor send/request across nodes over RouteMesh, observed on the wire tap: requests on
//! the relay connection, replies on the completion connection, fences, no resend, EG-16.25.

mod node_common;
// Listen ports below the ephemeral range (a node whose address its peer knows before it starts).
#[path = "../mesh/tests/common/ports.rs"]
mod ports;

use std::time::Duration;

use node_common::*;
use serde::{Deserialize, Serialize};
use zlink::actor::{ActorId, ActorRef, ErrorKind};
use zlink::node::Create;
use zlink_apps::demo::{Add, CallEcho, Checked, Echo, Get, Next};
use zlink_mesh::{LinkKind, TapDirection, TapFrame, WireTap};

const ACTOR_CALL: u8 = 160;
const REPLY: u8 = 145;
const ERROR_REPLY: u8 = 146;

fn id(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

fn frames(tap: &WireTap, dir: TapDirection, cmd: u8) -> Vec<TapFrame> {
    tap.frames()
        .into_iter()
        .filter(|f| f.direction == dir && f.command() == Some(cmd))
        .collect()
}

// spec: EG-4, SB-12 — the request travels as 160 on the relay connection, its reply as 145 on
// the completion connection; exactly one terminal.
#[tokio::test]
async fn cross_node_request_goes_out_on_relay_and_replies_on_completion() {
    let (a, _b, tap_a, tap_b) = pair(memory_store()).await;
    let e = a
        .create(Create::new("echo", id("echo")).on(rid("b")))
        .await
        .unwrap();
    tap_a.clear();
    tap_b.clear();
    let Echo(back) = a.request(&e, &Echo(vec![1, 2, 3]), TIMEOUT).await.unwrap();
    assert_eq!(back, vec![1, 2, 3]);
    let sent = frames(&tap_a, TapDirection::Sent, ACTOR_CALL);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].link, LinkKind::Relay);
    let got = frames(&tap_b, TapDirection::Received, ACTOR_CALL);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].link, LinkKind::Relay);
    let replies = frames(&tap_a, TapDirection::Received, REPLY);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].link, LinkKind::Completion);
    // b's tap records its send after handing the frame to libzmq, possibly after a got it.
    wait_until("b's tap entry of the sent reply", || {
        !frames(&tap_b, TapDirection::Sent, REPLY).is_empty()
    })
    .await;
    let replies_sent = frames(&tap_b, TapDirection::Sent, REPLY);
    assert_eq!(replies_sent.len(), 1);
    assert_eq!(replies_sent[0].link, LinkKind::Completion);
    // The request and the reply carry the same correlation.
    assert_eq!(sent[0].frames[0][4..12], replies[0].frames[0][4..12]);
}

// spec: EG-2.1 (payloads land in the actor's queue, in order), SB-5.3
#[tokio::test]
async fn one_way_sends_across_nodes_arrive_in_order() {
    let (a, _b, _, tap_b) = pair(memory_store()).await;
    let s = a
        .create(Create::new("sequence", id("s")).on(rid("b")))
        .await
        .unwrap();
    for i in 0..500 {
        a.send(&s, &Next(i)).await.unwrap();
    }
    // A request on the same relay connection is queued behind the sends; the actor counts
    // every number that did not follow its predecessor.
    assert_eq!(a.request(&s, &Checked, TIMEOUT).await.unwrap(), (500, 0));
    assert_eq!(
        frames(&tap_b, TapDirection::Received, ACTOR_CALL).len(),
        501
    );
}

#[derive(Serialize, Deserialize)]
struct LocMirror {
    mesh: String,
    node: String,
    node_generation: u64,
    authority_owner_generation: u64,
    owner_lease_generation: u64,
}

#[derive(Serialize, Deserialize)]
struct RefMirror {
    actor_id: String,
    actor_type: String,
    object_generation: u64,
    location: LocMirror,
}

/// A copy of `r` with one location field changed (a stale snapshot).
fn tampered(r: &ActorRef, f: impl FnOnce(&mut RefMirror)) -> ActorRef {
    let mut m: RefMirror = rmp_serde::from_slice(&rmp_serde::to_vec_named(r).unwrap()).unwrap();
    f(&mut m);
    rmp_serde::from_slice(&rmp_serde::to_vec_named(&m).unwrap()).unwrap()
}

// spec: SB-12 (stale actor/owner fence → Unavailable, never redirected; different
// ObjectGeneration → InvalidOperation)
#[tokio::test]
async fn stale_fences_are_unavailable_and_never_redirected() {
    let (a, _b, tap_a, tap_b) = pair(memory_store()).await;
    let c = a
        .create(Create::new("counter", id("c")).on(rid("b")))
        .await
        .unwrap();
    let cases = [
        (
            tampered(&c, |m| m.location.authority_owner_generation += 1),
            ErrorKind::Unavailable,
        ),
        (
            tampered(&c, |m| m.location.owner_lease_generation += 1),
            ErrorKind::Unavailable,
        ),
        (
            tampered(&c, |m| m.location.node_generation -= 1),
            ErrorKind::Unavailable,
        ),
        (
            tampered(&c, |m| m.object_generation += 1),
            ErrorKind::InvalidOperation,
        ),
    ];
    for (stale, kind) in cases {
        tap_a.clear();
        tap_b.clear();
        let e = a.request(&stale, &Add(1), TIMEOUT).await.unwrap_err();
        assert_eq!(e.kind(), kind, "{stale:?}: {e}");
        if stale.location().node_generation != c.location().node_generation {
            // spec: SB-12 — a's mesh knows b's generation: the stale ref is refused at a with
            // the owner's error, never forwarded (issue 26 item 2), a send too.
            let e = a.send(&stale, &Add(1)).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
            assert_eq!(frames(&tap_a, TapDirection::Sent, ACTOR_CALL).len(), 0);
            continue;
        }
        // One 160 out, one error reply back, nothing sent anywhere else.
        assert_eq!(frames(&tap_a, TapDirection::Sent, ACTOR_CALL).len(), 1);
        assert_eq!(frames(&tap_b, TapDirection::Sent, ACTOR_CALL).len(), 0);
        let err = frames(&tap_a, TapDirection::Received, ERROR_REPLY);
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].link, LinkKind::Completion);
    }
    // None of the stale calls ran.
    assert_eq!(a.request(&c, &Get, TIMEOUT).await.unwrap(), 0);
}

// spec: SB-12 (after timeout the request is never resent), EG-16.21
#[tokio::test]
async fn a_timed_out_request_is_not_resent() {
    let (a, b, tap_a, tap_b) = pair(memory_store()).await;
    let c = a
        .create(Create::new("counter", id("c")).on(rid("b")))
        .await
        .unwrap();
    tap_a.clear();
    b.set_application_paused(true);
    let e = a
        .request(&c, &Add(1), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    b.set_application_paused(false);
    // Nothing was resent: the Add ran at most once (0 when its carried deadline had passed on
    // the owner before the turn; the owner's deadline ends a transit time after the caller's).
    assert!(a.request(&c, &Get, TIMEOUT).await.unwrap() <= 1);
    // The Add left at most once (never, when a stalled I/O thread saw its deadline pass before
    // the wire: a request is never sent after its deadline), then the Get.
    let sent = frames(&tap_a, TapDirection::Sent, ACTOR_CALL).len();
    assert!(sent == 1 || sent == 2, "{sent} actor calls sent");
    assert_eq!(
        frames(&tap_b, TapDirection::Received, ACTOR_CALL).len(),
        frames(&tap_a, TapDirection::Sent, ACTOR_CALL).len()
    );
}

// spec: EG-16.25 — with the application handlers and job queue of node a PAUSED, a cross-node
// request that a's actor already started still completes via the completion connection.
#[tokio::test]
async fn started_cross_node_request_completes_while_the_application_is_paused() {
    let (a, b, tap_a, _) = pair(memory_store()).await;
    let room = a.create(Create::new("room", id("room"))).await.unwrap();
    let echo = a
        .create(Create::new("echo", id("echo")).on(rid("b")))
        .await
        .unwrap();
    let other = a.create(Create::new("counter", id("other"))).await.unwrap();
    // Hold b's echo so the room's inner request stays in flight.
    b.set_application_paused(true);
    let calls_before = b.counters().calls_in;
    let a2 = a.clone();
    let relay = tokio::spawn(async move {
        a2.request(
            &room,
            &CallEcho {
                target: echo,
                data: b"through".to_vec(),
                timeout_ms: 5_000,
            },
            TIMEOUT,
        )
        .await
    });
    // The room's turn has started and sent its request to b.
    wait_until("the room's request at b", || {
        b.counters().calls_in > calls_before
    })
    .await;
    // Now pause a's application domain: no new turn of any of a's actors may run.
    a.set_application_paused(true);
    tap_a.clear();
    b.set_application_paused(false);
    let Echo(back) = relay.await.unwrap().unwrap();
    assert_eq!(back, b"through");
    // The reply came on the completion connection while a stayed paused …
    let replies = frames(&tap_a, TapDirection::Received, REPLY);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].link, LinkKind::Completion);
    // … and a's application queue is still held: a new request does not run.
    let e = a
        .request(&other, &Add(1), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    a.set_application_paused(false);
    assert_eq!(a.request(&other, &Get, TIMEOUT).await.unwrap(), 0);
}

// spec: SB-1.2 — per-call routing uses the ref's location snapshot; the Location Store is not
// queried per message (observed through the counting store provider).
#[tokio::test]
async fn calls_do_not_read_the_location_store() {
    use std::sync::Arc;
    use zlink::store::{CountingStore, MemoryStore, StoreOp};
    let store = Arc::new(CountingStore::new(MemoryStore::new()));
    let (a, _b, _, _) = pair(store.clone()).await;
    let c = a
        .create(Create::new("counter", id("c")).on(rid("b")))
        .await
        .unwrap();
    let before = store.counts();
    for _ in 0..50 {
        a.request(&c, &Add(1), TIMEOUT).await.unwrap();
        a.send(&c, &Add(1)).await.unwrap();
    }
    assert_eq!(a.request(&c, &Get, TIMEOUT).await.unwrap(), 100);
    let used = store.counts().since(&before);
    for op in [
        StoreOp::Lookup,
        StoreOp::ReserveActivation,
        StoreOp::MarkReady,
        StoreOp::CasOwner,
        StoreOp::Destroy,
    ] {
        assert_eq!(used.get(op), 0, "{op:?} during calls");
    }
}

// docs/MESH.md, "Who dials whom": a node links with every peer its options list, whatever the
// names: `b` lists only `a` (whose name sorts first, and which lists nobody), waits for `a` to
// dial, then dials it itself, and the pair links; then `d` and `c` list each other (`d` started
// first, waiting for `c` to dial it), and an actor call goes across both ways.
#[tokio::test]
async fn a_node_dials_every_listed_peer_whatever_the_names() {
    let store = memory_store();
    let a = start_node("a", store.clone(), vec![], None, None).await;
    let b = start_node("b", store.clone(), vec![a.address()], None, None).await;
    assert!(b.wait_peers(TIMEOUT).await.is_empty(), "b sees a");
    assert!(
        a.mesh()
            .wait_peer_up(&rid("b"), None, TIMEOUT)
            .await
            .is_some(),
        "a sees b"
    );
    let e = b
        .create(Create::new("echo", id("echo-on-a")).on(rid("a")))
        .await
        .unwrap();
    let Echo(back) = b.request(&e, &Echo(vec![1]), TIMEOUT).await.unwrap();
    assert_eq!(back, vec![1]);

    let mut cc = mesh_config("c");
    let (cr, cp) = (
        format!("tcp://127.0.0.1:{}", ports::free_port()),
        format!("tcp://127.0.0.1:{}", ports::free_port()),
    );
    cc.relay_endpoint = cr.clone();
    cc.completion_endpoint = cp.clone();
    let c_addr = zlink_mesh::PeerAddress {
        node: rid("c"),
        relay: cr,
        completion: cp,
    };
    let d = start_node("d", store.clone(), vec![c_addr], None, None).await;
    let mut options =
        zlink::node::NodeOptions::new(cc, store, zlink_apps::demo::registry().unwrap())
            .with_client_access(zlink::node::access::ClientAccess::open());
    options.peers = vec![d.address()];
    let c = zlink::node::Node::start(options).await.unwrap();
    assert!(c.wait_peers(TIMEOUT).await.is_empty(), "c sees d");
    assert!(d.wait_peers(TIMEOUT).await.is_empty(), "d sees c");
    for (from, on) in [(&c, "d"), (&d, "c")] {
        let e = from
            .create(Create::new("echo", id(&format!("echo-on-{on}"))).on(rid(on)))
            .await
            .unwrap();
        let Echo(back) = from.request(&e, &Echo(vec![2]), TIMEOUT).await.unwrap();
        assert_eq!(back, vec![2]);
    }
    for n in [a, b, c, d] {
        n.shutdown(Duration::ZERO).await;
    }
}
