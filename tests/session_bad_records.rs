//! Malformed, stale, forged and replayed session records (24, 36, 38, 51) never reach an
//! application queue or a client and are counted with their reason (SB-2.1, SB-5.3, SB-5.9,
//! SB-6.6). The records come from a fake peer `c` built with the public mesh API (same mesh and
//! secret as the test nodes); the real records they copy are read from the wire tap.

mod node_common;

use std::sync::Arc;

use bytes::Bytes;
use node_common::*;
use tokio::sync::Semaphore;
use zlink::actor::{ActorId, ActorRef, ErrorKind, Message, SpotSpec};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node};
use zlink::session::{FlowRecord, FlowReject, SessionHandlers};
use zlink_apps::demo::session::Bound;
use zlink_apps::demo::{self, Add, Echo, EchoPush, Get};
use zlink_mesh::zlink_wire::DisconnectReason;
use zlink_mesh::zlink_wire::{
    ActorSend, AuthorityFence, BindOperation, BindingGeneration, BoundSessionBind,
    BoundSessionReplaced, BoundSessionSend, BoundSessionTail, Deadline, NodeGeneration,
    ObjectGeneration, OwnerId, OwnerLeaseGeneration, SessionLifecycleGeneration, SessionRid,
    SessionSequence,
};
use zlink_mesh::{InboundReceiver, MeshNode, Record, TapDirection, WireTap};

fn enc<M: serde::Serialize>(m: &M) -> Bytes {
    Bytes::from(rmp_serde::to_vec_named(m).unwrap())
}

/// The fake peer `c`, connected to `node` and up on both sides.
async fn fake_peer(node: &Node) -> (MeshNode, InboundReceiver) {
    let (c, rx) = MeshNode::start(mesh_config("c")).unwrap();
    c.connect(node.address()).unwrap();
    assert!(
        c.wait_peer_up(node.node_rid(), None, TIMEOUT)
            .await
            .is_some(),
        "{} did not come up at c",
        node.node_rid()
    );
    assert!(
        node.mesh()
            .wait_peer_up(&rid("c"), None, TIMEOUT)
            .await
            .is_some(),
        "c did not come up at {}",
        node.node_rid()
    );
    (c, rx)
}

fn flow(node: &Node, record: FlowRecord, reason: FlowReject) -> u64 {
    node.session_flow().get(record, reason)
}

/// Waits until `node` counted one more rejection of `record` for `reason` than `before`.
async fn wait_counted(node: &Node, record: FlowRecord, reason: FlowReject, before: u64) {
    wait_until(&format!("{record:?}/{reason:?} counted"), || {
        flow(node, record, reason) > before
    })
    .await;
}

/// The records of one kind `tap` saw in `direction`, decoded.
fn records(tap: &WireTap, direction: TapDirection, command: u8) -> Vec<(Record, Option<Bytes>)> {
    tapped(tap, direction, command)
        .into_iter()
        .filter_map(|f| f.decoded.ok().map(|d| (d.record, d.payload)))
        .collect()
}

/// The 38 Binds of `actor` `tap` saw sent, in order.
fn binds_sent(tap: &WireTap, actor: &str) -> Vec<BoundSessionBind> {
    records(tap, TapDirection::Sent, 38)
        .into_iter()
        .filter_map(|(r, _)| match r {
            Record::BoundSessionBind(b)
                if b.operation == BindOperation::Bind && b.actor.as_str() == actor =>
            {
                Some(b)
            }
            _ => None,
        })
        .collect()
}

fn aid(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

async fn create_on(node: &Node, ty: &str, id: &str) -> ActorRef {
    node.create(Create::new(ty, aid(id)).in_spot(SpotSpec::entry()))
        .await
        .unwrap()
}

/// A 24 to `actor` with the given bound-session identity.
fn actor_send<M: Message>(
    actor: &ActorRef,
    lifecycle: SessionLifecycleGeneration,
    generation: BindingGeneration,
    seq: u64,
) -> ActorSend {
    let loc = actor.wire_location();
    ActorSend {
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        session_lifecycle: lifecycle,
        key: M::KEY,
        deadline: None,
        tail: BoundSessionTail {
            binding_generation: generation,
            session_sequence: SessionSequence::new(seq),
        },
    }
}

/// The fake session owner `c`'s identity in its own 38s.
const C_LIFECYCLE: SessionLifecycleGeneration = SessionLifecycleGeneration::new(1);

fn bind_38(actor: &ActorRef, generation: u64, operation: BindOperation) -> BoundSessionBind {
    let loc = actor.wire_location();
    BoundSessionBind {
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        target_node_generation: loc.node_generation,
        authority_owner_generation: loc.authority_owner_generation,
        owner_lease_generation: loc.owner_lease_generation,
        session_lifecycle: C_LIFECYCLE,
        session_owner: OwnerId::new(77),
        session_owner_lease_generation: OwnerLeaseGeneration::new(1),
        session: SessionRid::new(1),
        binding_generation: BindingGeneration::new(generation),
        operation,
        deadline: Deadline::from_remaining(TIMEOUT),
    }
}

/// Sends a 38 from `c` to `to`; its terminal (the registered snapshot or the public kind).
async fn send_38(c: &MeshNode, to: &Node, rec: BoundSessionBind) -> Result<u64, ErrorKind> {
    let resp = c
        .request_record(to.node_rid(), Record::BoundSessionBind(rec), None, TIMEOUT)
        .await
        .unwrap();
    match resp.record {
        Record::BoundSessionBindReply(r) => r.result.map(|s| s.binding_generation.get()),
        other => panic!("unexpected 38 terminal {other:?}"),
    }
}

/// A 24 request from `c`; the actor's reply decoded as `M::Reply`, or the public error kind.
async fn request_24<M: Message>(
    c: &MeshNode,
    to: &Node,
    rec: ActorSend,
    msg: &M,
) -> Result<M::Reply, ErrorKind> {
    let mut rec = rec;
    rec.deadline = Some(Deadline::from_remaining(TIMEOUT));
    match c
        .request_record(
            to.node_rid(),
            Record::ActorSend(rec),
            Some(enc(msg)),
            TIMEOUT,
        )
        .await
    {
        Ok(r) => Ok(rmp_serde::from_slice(&r.payload.unwrap_or_default()).unwrap()),
        Err(e) => Err(e.kind()),
    }
}

async fn relay_req<M: Message>(c: &NodeClient, actor: &ActorRef, msg: &M) -> M::Reply {
    node_common::relay_req(c, actor, msg).await.unwrap()
}

fn echo_of(push: &zlink_mesh::Push) -> Vec<u8> {
    assert_eq!(push.key, Echo::KEY);
    let Echo(b) = rmp_serde::from_slice(push.payload.as_deref().unwrap_or_default()).unwrap();
    b
}

// spec: SB-6.6
// spec: SB-5.3
// spec: SB-2.1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_24_never_reaches_the_actor_queue_and_is_counted() {
    let (a, b, tap_a, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let counter = create_on(&b, "counter", "k").await;
    let client = client_of(&a);
    bind(&client, &counter).await;
    assert_eq!(relay_req(&client, &counter, &Add(1)).await, 1);
    let real = binds_sent(&tap_a, "k")
        .pop()
        .expect("a's 38 bind on the wire");
    let (c, _rx) = fake_peer(&b).await;
    let before = flow(&b, FlowRecord::Relay, FlowReject::BindingRetired);

    // The real session's identity, sent by another peer: the transport-authenticated sender is
    // part of the binding identity, so it is not the current binding.
    let copied = actor_send::<Add>(
        &counter,
        real.session_lifecycle,
        real.binding_generation,
        100,
    );
    c.send_record(
        &rid("b"),
        Record::ActorSend(copied.clone()),
        Some(enc(&Add(1000))),
    )
    .await
    .unwrap();
    // A binding generation that was never registered.
    let never = actor_send::<Add>(&counter, C_LIFECYCLE, BindingGeneration::new(9_999), 1);
    c.send_record(
        &rid("b"),
        Record::ActorSend(never.clone()),
        Some(enc(&Add(1000))),
    )
    .await
    .unwrap();
    // As a request: one terminal, the SB-12 kind of a stale binding fence.
    assert_eq!(
        request_24(&c, &b, never, &Add(1000)).await.unwrap_err(),
        ErrorKind::Unavailable
    );
    wait_until("three relays refused as binding_retired", || {
        flow(&b, FlowRecord::Relay, FlowReject::BindingRetired) >= before + 3
    })
    .await;
    assert_eq!(
        flow(&b, FlowRecord::Relay, FlowReject::BindingRetired),
        before + 3
    );
    // The handler never ran for them; the real binding still relays.
    assert_eq!(client.request(&counter, &Get).await.unwrap(), 1);
    assert_eq!(relay_req(&client, &counter, &Add(1)).await, 2);
}

// spec: SB-5.3
// spec: SB-4.1
// spec: SB-6.6
// spec: SB-2.1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_24_after_a_rebind_or_a_new_incarnation_is_refused() {
    let (_a, b, _ta, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let (c, _rx) = fake_peer(&b).await;
    // `c` acts as a session owner: its own 38 binds, its own 24 relays.
    let k1 = create_on(&b, "counter", "kr").await;
    assert_eq!(
        send_38(&c, &b, bind_38(&k1, 1, BindOperation::Bind)).await,
        Ok(1)
    );
    let legit_1 = actor_send::<Add>(&k1, C_LIFECYCLE, BindingGeneration::new(1), 1);
    assert_eq!(request_24(&c, &b, legit_1.clone(), &Add(1)).await, Ok(1));

    // Rebind of the same session to the same incarnation with a new binding generation:
    // generation 1 is retired.
    assert_eq!(
        send_38(&c, &b, bind_38(&k1, 2, BindOperation::Bind)).await,
        Ok(2)
    );
    let retired = flow(&b, FlowRecord::Relay, FlowReject::BindingRetired);
    c.send_record(
        &rid("b"),
        Record::ActorSend(legit_1.clone()),
        Some(enc(&Add(100))),
    )
    .await
    .unwrap();
    wait_counted(&b, FlowRecord::Relay, FlowReject::BindingRetired, retired).await;
    let legit_2 = actor_send::<Add>(&k1, C_LIFECYCLE, BindingGeneration::new(2), 2);
    assert_eq!(request_24(&c, &b, legit_2.clone(), &Add(1)).await, Ok(2));

    // A new incarnation (destroy + create) bound again: the old records are refused.
    b.destroy(&k1).await.unwrap();
    let k2 = create_on(&b, "counter", "kr").await;
    assert_ne!(k2.object_generation(), k1.object_generation());
    assert_eq!(
        send_38(&c, &b, bind_38(&k2, 3, BindOperation::Bind)).await,
        Ok(3)
    );
    // Replays of the legitimate 24s of the old incarnation: a stale target, never enqueued.
    let dropped = b.counters().sends_dropped;
    c.send_record(
        &rid("b"),
        Record::ActorSend(legit_2.clone()),
        Some(enc(&Add(100))),
    )
    .await
    .unwrap();
    wait_until("the replay was dropped", || {
        b.counters().sends_dropped > dropped
    })
    .await;
    let kind = request_24(&c, &b, legit_2.clone(), &Add(100))
        .await
        .unwrap_err();
    // spec: SB-12
    // Its binding ended with the old incarnation: a stale binding fence, `Unavailable` — the
    // kind the session owner answers for a relay through a retired binding (never the
    // `InvalidOperation` of an ObjectGeneration compared as a message target, SB-4.1).
    assert_eq!(kind, ErrorKind::Unavailable);
    // The same binding generation re-aimed at the new incarnation: retired, counted.
    let retired = flow(&b, FlowRecord::Relay, FlowReject::BindingRetired);
    let reaimed = actor_send::<Add>(&k2, C_LIFECYCLE, BindingGeneration::new(2), 2);
    c.send_record(
        &rid("b"),
        Record::ActorSend(reaimed.clone()),
        Some(enc(&Add(100))),
    )
    .await
    .unwrap();
    wait_counted(&b, FlowRecord::Relay, FlowReject::BindingRetired, retired).await;
    assert_eq!(
        request_24(&c, &b, reaimed, &Add(100)).await.unwrap_err(),
        ErrorKind::Unavailable
    );
    // Only the current binding reaches the new incarnation, which never saw a replay.
    let current = actor_send::<Add>(&k2, C_LIFECYCLE, BindingGeneration::new(3), 3);
    assert_eq!(request_24(&c, &b, current, &Add(5)).await, Ok(5));
    let observer = client_of(&b);
    assert_eq!(observer.request(&k2, &Get).await.unwrap(), 5);
}

// spec: SB-5.5
// spec: SB-5.9
// spec: SB-6.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_36_reaches_no_client_and_is_counted_with_its_reason() {
    let (a, b, tap_a, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let echo = create_on(&b, "echo", "p").await;
    let client = client_of(&a);
    bind(&client, &echo).await;
    client
        .request(&echo, &EchoPush(b"legit".to_vec()))
        .await
        .unwrap();
    let push = client.recv_push_timeout(TIMEOUT).await.expect("legit push");
    assert_eq!(echo_of(&push), b"legit");
    let real = records(&tap_a, TapDirection::Received, 36)
        .into_iter()
        .find_map(|(r, _)| match r {
            Record::BoundSessionSend(s) => Some(s),
            _ => None,
        })
        .expect("the real 36 on the wire");
    let (c, _rx) = fake_peer(&a).await;

    type Forge = fn(&mut BoundSessionSend);
    let cases: [(&str, Forge, FlowReject); 6] = [
        (
            "binding generation",
            |s| s.binding_generation = BindingGeneration::new(s.binding_generation.get() + 50),
            FlowReject::BindingRetired,
        ),
        (
            "object generation",
            |s| s.object_generation = ObjectGeneration::new(s.object_generation.get() + 1),
            FlowReject::ObjectGenerationMismatch,
        ),
        (
            "lifecycle",
            |s| {
                s.session_lifecycle = SessionLifecycleGeneration::new(s.session_lifecycle.get() + 1)
            },
            FlowReject::LifecycleMismatch,
        ),
        (
            "source node generation",
            |s| s.source_node_generation = NodeGeneration::new(s.source_node_generation.get() + 1),
            FlowReject::NodeGenerationMismatch,
        ),
        (
            "authority",
            |s| {
                s.authority_owner_generation = zlink::actor::AuthorityOwnerGeneration::new(
                    s.authority_owner_generation.get() + 1,
                );
            },
            FlowReject::AuthorityMismatch,
        ),
        (
            "session",
            |s| s.session = SessionRid::new(s.session.get() + 1_000),
            FlowReject::UnknownSession,
        ),
    ];
    for (what, forge, reason) in cases {
        let mut rec = real.clone();
        forge(&mut rec);
        let before = flow(&a, FlowRecord::Push, reason);
        c.send_record(
            &rid("a"),
            Record::BoundSessionSend(rec),
            Some(enc(&Echo(format!("forged {what}").into_bytes()))),
        )
        .await
        .unwrap();
        wait_counted(&a, FlowRecord::Push, reason, before).await;
        assert_eq!(flow(&a, FlowRecord::Push, reason), before + 1, "{what}");
    }
    // The next push the client sees is the next real one: no forged push came before it.
    client
        .request(&echo, &EchoPush(b"after".to_vec()))
        .await
        .unwrap();
    let push = client.recv_push_timeout(TIMEOUT).await.expect("real push");
    assert_eq!(echo_of(&push), b"after");
    assert!(client.close_reason().is_none());
}

/// The demo session application with a replaced-callback held until the test releases it.
fn held_replacement(entered: Arc<Semaphore>, release: Arc<Semaphore>) -> SessionHandlers {
    demo::sessions().on_replaced(move |_s, _actor| {
        let (entered, release) = (entered.clone(), release.clone());
        async move {
            entered.add_permits(1);
            release.acquire().await.unwrap().forget();
            Ok(())
        }
    })
}

/// Changes one field of a 51.
type Forge51 = Box<dyn Fn(&mut BoundSessionReplaced)>;

fn fence_of(c: &MeshNode) -> AuthorityFence {
    AuthorityFence {
        node: rid("c"),
        node_generation: c.generation(),
        authority_owner_generation: zlink::actor::AuthorityOwnerGeneration::new(1),
        owner_lease_generation: OwnerLeaseGeneration::new(1),
    }
}

// spec: SB-6.6
// spec: SB-6.2
// spec: SB-5.9
// spec: SB-2.1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_or_mismatched_51_never_closes_the_current_session() {
    let entered = Arc::new(Semaphore::new(0));
    let release = Arc::new(Semaphore::new(0));
    let sessions = held_replacement(entered.clone(), release.clone());
    let (a, b, tap_a, _tb) = session_pair(memory_store(), sessions, None).await;
    let echo = create_on(&b, "echo", "r").await;
    let old = client_of(&a);
    bind(&old, &echo).await;
    let new = client_of(&a);
    bind(&new, &echo).await;
    // The real replacement: the old session is closing, its callback held.
    tokio::time::timeout(TIMEOUT, entered.acquire())
        .await
        .expect("replaced-callback never ran")
        .unwrap()
        .forget();
    let real = records(&tap_a, TapDirection::Received, 51)
        .into_iter()
        .find_map(|(r, _)| match r {
            Record::BoundSessionReplaced(x) => Some(x),
            _ => None,
        })
        .expect("the real 51 on the wire");
    let binds = binds_sent(&tap_a, "r");
    assert_eq!(binds.len(), 2);
    let current = binds[1].clone();
    let (c, _rx) = fake_peer(&a).await;
    let send_51 = |rec: BoundSessionReplaced| {
        let c = &c;
        async move {
            c.send_record(&rid("a"), Record::BoundSessionReplaced(rec), None)
                .await
                .unwrap();
        }
    };

    // A verbatim replay from another peer: the sender is not the authority target.
    let mismatch = flow(
        &a,
        FlowRecord::Replaced,
        FlowReject::ReplacedIdentityMismatch,
    );
    send_51(real.clone()).await;
    wait_counted(
        &a,
        FlowRecord::Replaced,
        FlowReject::ReplacedIdentityMismatch,
        mismatch,
    )
    .await;
    // A duplicate whose sender is its authority target: the identity is already retired.
    let duplicate = flow(&a, FlowRecord::Replaced, FlowReject::DuplicateReplacement);
    let mut dup = real.clone();
    dup.authority_target = fence_of(&c);
    send_51(dup).await;
    wait_counted(
        &a,
        FlowRecord::Replaced,
        FlowReject::DuplicateReplacement,
        duplicate,
    )
    .await;

    // 51s naming the current session with one previous-owner value wrong.
    let of_current = |f: &dyn Fn(&mut BoundSessionReplaced)| {
        let mut rec = real.clone();
        rec.authority_target = fence_of(&c);
        rec.previous.session = current.session;
        rec.previous.owner = current.session_owner;
        rec.previous.lifecycle = current.session_lifecycle;
        rec.previous.owner_lease_generation = current.session_owner_lease_generation;
        rec.previous.retired_binding_generation = current.binding_generation;
        f(&mut rec);
        rec
    };
    let wrong: [(&str, Forge51); 4] = [
        (
            "owner lease",
            Box::new(|r| {
                r.previous.owner_lease_generation =
                    OwnerLeaseGeneration::new(r.previous.owner_lease_generation.get() + 1);
            }),
        ),
        (
            "owner id",
            Box::new(|r| r.previous.owner = OwnerId::new(r.previous.owner.get() ^ 1)),
        ),
        (
            "retired binding generation",
            Box::new(|r| {
                r.previous.retired_binding_generation =
                    BindingGeneration::new(r.previous.retired_binding_generation.get() + 50);
            }),
        ),
        ("node", Box::new(|r| r.previous.node = rid("elsewhere"))),
    ];
    for (what, f) in &wrong {
        let before = flow(
            &a,
            FlowRecord::Replaced,
            FlowReject::ReplacedIdentityMismatch,
        );
        send_51(of_current(f.as_ref())).await;
        wait_counted(
            &a,
            FlowRecord::Replaced,
            FlowReject::ReplacedIdentityMismatch,
            before,
        )
        .await;
        assert!(new.close_reason().is_none(), "{what} closed the session");
    }

    // The current session still works: relay and push.
    assert_eq!(
        relay_req(&new, &echo, &Echo(b"still".to_vec())).await.0,
        b"still"
    );
    new.request(&echo, &EchoPush(b"mine".to_vec()))
        .await
        .unwrap();
    let push = new.recv_push_timeout(TIMEOUT).await.expect("push");
    assert_eq!(echo_of(&push), b"mine");
    assert_eq!(new.packet(&Bound).await.unwrap(), vec![echo.clone()]);

    // The replaced session closes once, as replaced; a replay after that is an unknown session.
    release.add_permits(1);
    let reason = tokio::time::timeout(TIMEOUT, old.closed())
        .await
        .expect("old session never closed");
    assert_eq!(reason, DisconnectReason::Replaced);
    wait_until("the old session left its owner", || a.session_count() == 1).await;
    let unknown = flow(&a, FlowRecord::Replaced, FlowReject::UnknownSession);
    send_51(real).await;
    wait_counted(
        &a,
        FlowRecord::Replaced,
        FlowReject::UnknownSession,
        unknown,
    )
    .await;
    assert!(new.close_reason().is_none());
    assert_eq!(
        relay_req(&new, &echo, &Echo(b"end".to_vec())).await.0,
        b"end"
    );
}

// spec: SB-6.6
// spec: SB-4.1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_38_unbind_of_an_identity_that_is_not_current_is_refused() {
    let (a, b, tap_a, _tb) = session_pair(memory_store(), demo::sessions(), None).await;
    let echo = create_on(&b, "echo", "u").await;
    let client = client_of(&a);
    bind(&client, &echo).await;
    let real = binds_sent(&tap_a, "u").pop().expect("a's 38 bind");
    let (c, _rx) = fake_peer(&b).await;
    let retired = flow(&b, FlowRecord::Bind, FlowReject::BindingRetired);

    // The real identity's Unbind and Disconnect, from another peer: not current.
    for op in [BindOperation::Unbind, BindOperation::Disconnect] {
        let mut rec = real.clone();
        rec.operation = op;
        rec.deadline = Deadline::from_remaining(TIMEOUT);
        assert_eq!(
            send_38(&c, &b, rec).await,
            Err(ErrorKind::InvalidOperation),
            "{op:?}"
        );
    }
    // An identity `c` itself retired by rebinding another actor... and one it never had.
    let other = create_on(&b, "echo", "u2").await;
    assert_eq!(
        send_38(&c, &b, bind_38(&other, 1, BindOperation::Bind)).await,
        Ok(1)
    );
    assert_eq!(
        send_38(&c, &b, bind_38(&other, 2, BindOperation::Bind)).await,
        Ok(2)
    );
    assert_eq!(
        send_38(&c, &b, bind_38(&other, 1, BindOperation::Unbind)).await,
        Err(ErrorKind::InvalidOperation)
    );
    assert_eq!(
        send_38(&c, &b, bind_38(&echo, 5, BindOperation::Unbind)).await,
        Err(ErrorKind::InvalidOperation)
    );
    assert_eq!(
        flow(&b, FlowRecord::Bind, FlowReject::BindingRetired),
        retired + 4
    );

    // The current bindings are unchanged: the real session relays and gets pushes; `c`'s
    // generation 2 still relays, and its own Unbind of it succeeds once.
    assert_eq!(
        relay_req(&client, &echo, &Echo(b"ok".to_vec())).await.0,
        b"ok"
    );
    client
        .request(&echo, &EchoPush(b"push".to_vec()))
        .await
        .unwrap();
    let push = client.recv_push_timeout(TIMEOUT).await.expect("push");
    assert_eq!(echo_of(&push), b"push");
    let send = actor_send::<Echo>(&other, C_LIFECYCLE, BindingGeneration::new(2), 1);
    assert_eq!(
        request_24(&c, &b, send, &Echo(b"c".to_vec()))
            .await
            .unwrap()
            .0,
        b"c"
    );
    assert_eq!(
        send_38(&c, &b, bind_38(&other, 2, BindOperation::Unbind)).await,
        Ok(2)
    );
    assert_eq!(
        send_38(&c, &b, bind_38(&other, 2, BindOperation::Unbind)).await,
        Err(ErrorKind::InvalidOperation)
    );
}
