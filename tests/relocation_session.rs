//! Relocation, session side (SB-8): the session owner's seal (42 → 43), what it holds, the 44
//! commit and abort, the seal timeout and late 44s. The session owner is a real node `a` with
//! a real client; the actor owner `b` is a real node that sends the 42 (and an abort) from its
//! own mesh identity; the relocation's target `t` is a mesh node of the same mesh run by the
//! test, which sends the 44 commit, receives the relays the commit releases (and answers
//! them) and pushes as the new owner — so 42/43/44 and the relays travel the real ROUTER
//! path, and the taps show them. The seal's clock is a `ManualClock`: nothing times out unless
//! the test moves it.

mod node_common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use node_common::*;
use zlink::actor::{ActorRef, Message};
use zlink::node::Node;
use zlink::node::client::{ClientError, NodeClient, Placement};
use zlink::session::{ManualClock, SealGauges};
use zlink_apps::demo::session::{Bound, RelaySend};
use zlink_apps::demo::{self, Add, Checked, Echo, Next};
use zlink_mesh::{Inbound, InboundReceiver, MeshNode, Origin, TapDirection, WireTap};
use zlink_wire::{
    AbortAction, ActorLocation, AuthorityOwnerGeneration, BindingGeneration, BoundSessionSend,
    DisconnectReason, ErrorKind, ObjectGeneration, OwnerLeaseGeneration, Record, RelocationId,
    RouteAbort, RouteCommit, SealIdentity, SealOutcome, SessionLifecycleGeneration,
    SessionRelocationRoute, SessionRelocationSeal, SessionRid,
};

/// The session owner `a` (manual clock, tapped), the actor owner `b` (tapped), the target mesh
/// node `t` linked to `a`, and a client of `a`.
struct World {
    a: Node,
    b: Node,
    tap_a: WireTap,
    tap_b: WireTap,
    t: MeshNode,
    t_in: InboundReceiver,
    clock: ManualClock,
    c: Arc<NodeClient>,
}

async fn world() -> World {
    world_with(None).await
}

/// [`world`] with the session owner's SessionRelocationSealTimeout set (`None`: the default).
async fn world_with(seal_timeout: Option<Duration>) -> World {
    let store = memory_store();
    let clock = ManualClock::new();
    let tap_b = WireTap::new(20_000);
    let mut sb = SessionNodeSpec::new("b", demo::sessions());
    sb.tap = Some(tap_b.clone());
    let b = start_session_node(sb, store.clone()).await;
    let tap_a = WireTap::new(20_000);
    let mut sa = SessionNodeSpec::new("a", demo::sessions());
    sa.tap = Some(tap_a.clone());
    sa.peers = vec![b.address()];
    sa.clock = Some(Arc::new(clock.clone()));
    sa.seal_timeout = seal_timeout;
    let a = start_session_node(sa, store).await;
    wait_pair_up(&a, &b).await;
    let (t, t_in) = MeshNode::start(mesh_config("t")).unwrap();
    t.connect(a.address()).unwrap();
    assert!(t.wait_peer_up(&rid("a"), None, TIMEOUT).await.is_some());
    assert!(
        a.mesh()
            .wait_peer_up(&rid("t"), None, TIMEOUT)
            .await
            .is_some()
    );
    let c = Arc::new(client_of(&a));
    World {
        a,
        b,
        tap_a,
        tap_b,
        t,
        t_in,
        clock,
        c,
    }
}

/// The binding `a` holds for `actor`: its SessionRid and binding generation, from the 38 the
/// session owner sent.
fn binding_of(tap_a: &WireTap, actor: &ActorRef) -> (SessionRid, BindingGeneration) {
    tapped(tap_a, TapDirection::Sent, 38)
        .into_iter()
        .find_map(|f| match f.decoded {
            Ok(d) => match d.record {
                Record::BoundSessionBind(r) if r.actor == *actor.id() => {
                    Some((r.session, r.binding_generation))
                }
                _ => None,
            },
            Err(_) => None,
        })
        .expect("the 38 of the bind")
}

fn seal_id(w: &World, relocation: u64, actor: &ActorRef) -> SealIdentity {
    let (session, binding_generation) = binding_of(&w.tap_a, actor);
    SealIdentity {
        relocation: RelocationId::new(relocation),
        session_lifecycle: SessionLifecycleGeneration::new(w.a.generation().get()),
        session,
        binding_generation,
    }
}

fn seal_record(seal: &SealIdentity, actor: &ActorRef) -> Record {
    Record::SessionRelocationSeal(SessionRelocationSeal {
        seal: seal.clone(),
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        deadline: zlink_wire::Deadline::from_remaining(TIMEOUT),
    })
}

/// Sends a 42 from `from` to `a`; the 43's outcome (checked to be a 43 for `seal`).
async fn send_seal(from: &MeshNode, rec: Record) -> SealOutcome {
    let seal = match &rec {
        Record::SessionRelocationSeal(s) => s.seal.clone(),
        _ => unreachable!(),
    };
    let resp = from
        .request_record(&rid("a"), rec, None, TIMEOUT)
        .await
        .expect("a 43");
    match resp.record {
        Record::SessionRelocationSealed(s) => {
            assert_eq!(s.seal, seal, "the 43 names the 42's seal");
            s.outcome
        }
        other => panic!("not a 43: {other:?}"),
    }
}

/// The target's location: `t`'s route with fences of its own.
fn target_location(t: &MeshNode) -> ActorLocation {
    ActorLocation {
        mesh: zlink_mesh::MeshName::new("test").unwrap(),
        node: t.node().clone(),
        node_generation: t.generation(),
        authority_owner_generation: AuthorityOwnerGeneration::new(77),
        owner_lease_generation: OwnerLeaseGeneration::new(78),
    }
}

fn commit(seal: &SealIdentity, actor: &ActorRef, target: ActorLocation) -> Record {
    Record::SessionRelocationRoute(SessionRelocationRoute::Commit(RouteCommit {
        relocation: seal.relocation,
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        target,
        session_lifecycle: seal.session_lifecycle,
        session: seal.session,
        binding_generation: seal.binding_generation,
    }))
}

fn abort(seal: &SealIdentity) -> Record {
    Record::SessionRelocationRoute(SessionRelocationRoute::Abort(RouteAbort {
        seal: seal.clone(),
        action: AbortAction::ResubmitToSource,
    }))
}

/// A 36 of `actor`'s binding with the given source values, sent from `from`.
async fn push_from(
    from: &MeshNode,
    seal: &SealIdentity,
    actor: &ActorRef,
    loc: (&zlink_wire::NodeGeneration, AuthorityOwnerGeneration),
    data: &[u8],
) {
    let rec = Record::BoundSessionSend(BoundSessionSend {
        actor: actor.id().clone(),
        object_generation: actor.object_generation(),
        source_node_generation: *loc.0,
        authority_owner_generation: loc.1,
        session_lifecycle: seal.session_lifecycle,
        session: seal.session,
        binding_generation: seal.binding_generation,
        key: Echo::KEY,
    });
    let payload = Bytes::from(rmp_serde::to_vec_named(&Echo(data.to_vec())).unwrap());
    from.send_record(&rid("a"), rec, Some(payload))
        .await
        .unwrap();
}

async fn recv_push(c: &NodeClient) -> Vec<u8> {
    let p = c.recv_push_timeout(TIMEOUT).await.expect("a push");
    let Echo(data) = rmp_serde::from_slice(&p.payload.unwrap()).unwrap();
    data
}

fn rejects(node: &Node, name: &str) -> u64 {
    let (record, reason) = name.split_once('/').unwrap();
    zlink::session::FlowRecord::ALL
        .iter()
        .filter(|r| r.as_str() == record)
        .flat_map(|r| {
            zlink::session::FlowReject::ALL
                .iter()
                .filter(|x| x.as_str() == reason)
                .map(|x| node.session_flow().get(*r, *x))
        })
        .sum()
}

async fn wait_held(a: &Node, n: u64) {
    wait_until("relays held by the seal", || a.session_seals().held == n).await;
}

/// The next 24 the target receives (skipping everything else), from `a`.
async fn next_relay(t_in: &mut InboundReceiver) -> Inbound {
    loop {
        let inb = tokio::time::timeout(TIMEOUT, t_in.recv())
            .await
            .expect("a relay at the target")
            .expect("target open");
        if matches!(inb.record, Record::ActorSend(_)) {
            assert!(matches!(&inb.origin, Origin::Peer { node, .. } if *node == rid("a")));
            return inb;
        }
    }
}

// spec: SB-8
// spec: SB-8.1
// spec: SB-8.2
// spec: SB-8.7
// spec: SB-1.3
// spec: SB-4.2
// spec: SB-1.5
// spec: SB-14.20
// spec: SB-14.26
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_relays_are_held_and_the_commit_sends_them_first_to_the_target() {
    let mut w = world().await;
    let echo = w.c.create("echo", "e1", Placement::on("b")).await.unwrap();
    let counter =
        w.c.create("counter", "k1", Placement::on("b"))
            .await
            .unwrap();
    bind(&w.c, &echo).await;
    bind(&w.c, &counter).await;
    let seal = seal_id(&w, 1, &echo);

    // 42 from the actor owner, over the real ROUTER path: installed.
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&seal, &echo)).await,
        SealOutcome::Installed
    );
    let relays_at_b = tapped(&w.tap_b, TapDirection::Received, 24).len();

    // Requests relayed now are held, in arrival order, answered later.
    let mut waiting = Vec::new();
    for i in 0..4u8 {
        let c = w.c.clone();
        let echo = echo.clone();
        waiting.push(tokio::spawn(async move {
            relay_req(&c, &echo, &Echo(vec![i])).await
        }));
        wait_held(&w.a, u64::from(i) + 1).await;
    }
    // The session's other actor is served meanwhile (SB-1.5, SB-8.7).
    assert_eq!(relay_req(&w.c, &counter, &Add(5)).await.unwrap(), 5);
    // The source is owner until the commit: its pushes still reach the client.
    let b_gen = w.b.generation();
    let old_auth = echo.wire_location().authority_owner_generation;
    push_from(w.b.mesh(), &seal, &echo, (&b_gen, old_auth), b"from source").await;
    assert_eq!(recv_push(&w.c).await, b"from source");
    // Nothing of the sealed binding left for the source.
    assert_eq!(
        tapped(&w.tap_b, TapDirection::Received, 24).len(),
        relays_at_b + 1,
        "only the other actor's relay reached b"
    );

    // 44 commit from the target (any mesh peer): route and snapshot switch, held relays go
    // first, in order, to the target, with the target's fences and the same binding identity.
    let target = target_location(&w.t);
    // A push of the target that overtakes its 44 waits for it (SB-5.5 is checked against the
    // values the commit brings), then reaches the client.
    push_from(
        &w.t,
        &seal,
        &echo,
        (&target.node_generation, target.authority_owner_generation),
        b"early target",
    )
    .await;
    w.t.send_record(&rid("a"), commit(&seal, &echo, target.clone()), None)
        .await
        .unwrap();
    assert_eq!(recv_push(&w.c).await, b"early target");
    for i in 0..4u8 {
        let inb = next_relay(&mut w.t_in).await;
        let Record::ActorSend(rec) = &inb.record else {
            unreachable!()
        };
        assert_eq!(rec.actor, *echo.id());
        assert_eq!(rec.object_generation, echo.object_generation());
        assert_eq!(
            rec.authority_owner_generation,
            target.authority_owner_generation
        );
        assert_eq!(rec.owner_lease_generation, target.owner_lease_generation);
        assert_eq!(rec.tail.binding_generation, seal.binding_generation);
        let Echo(data) = rmp_serde::from_slice(inb.payload.as_ref().unwrap()).unwrap();
        assert_eq!(data, vec![i], "held relays leave in arrival order");
        inb.reply
            .expect("a request")
            .reply(inb.payload.clone().unwrap());
    }
    for (i, h) in waiting.into_iter().enumerate() {
        let Echo(data) = h.await.unwrap().expect("the held request's reply");
        assert_eq!(data, vec![i as u8]);
    }
    // A relay submitted after the commit follows them to the target.
    let c = w.c.clone();
    let echo2 = echo.clone();
    let after = tokio::spawn(async move { relay_req(&c, &echo2, &Echo(b"after".to_vec())).await });
    let inb = next_relay(&mut w.t_in).await;
    inb.reply
        .expect("a request")
        .reply(inb.payload.clone().unwrap());
    assert_eq!(after.await.unwrap().unwrap().0, b"after".to_vec());
    assert_eq!(
        tapped(&w.tap_b, TapDirection::Received, 24).len(),
        relays_at_b + 1,
        "nothing of the moved binding went to the old owner"
    );

    // The application's view: same binding, new location (SB-1.3, SB-4.2): no rebind, no 38.
    let bound: Vec<ActorRef> = w.c.packet(&Bound).await.unwrap();
    let moved = bound.iter().find(|r| r.id() == echo.id()).unwrap();
    assert_eq!(moved.wire_location(), target);
    assert_eq!(moved.object_generation(), echo.object_generation());
    assert_eq!(
        tapped(&w.tap_a, TapDirection::Sent, 38).len(),
        2,
        "the two binds only"
    );

    // Pushes: the target's pass (SB-5.5 values are now its), the old owner's are refused.
    push_from(
        &w.t,
        &seal,
        &echo,
        (&target.node_generation, target.authority_owner_generation),
        b"from target",
    )
    .await;
    assert_eq!(recv_push(&w.c).await, b"from target");
    push_from(w.b.mesh(), &seal, &echo, (&b_gen, old_auth), b"stale").await;
    wait_until("the old owner's push refused", || {
        rejects(&w.a, "push/node_generation_mismatch") == 1
    })
    .await;

    // The seal and what it held are gone.
    wait_until("the seal released", || {
        w.a.session_seals() == SealGauges::default()
    })
    .await;
    assert_eq!(w.c.close_reason(), None, "the connection stays");

    // On the wire (SB-14.26): the 43 is the 42's reply with exactly the seal and the outcome
    // (a two-element body: no sequence, no high-water); the 44 got no response; no 45.
    let sent_42 = tapped(&w.tap_b, TapDirection::Sent, 42);
    assert_eq!(sent_42.len(), 1);
    let corr = sent_42[0].decoded.as_ref().unwrap().header.correlation;
    let sealed = tapped(&w.tap_a, TapDirection::Sent, 43);
    assert_eq!(sealed.len(), 1);
    let d = sealed[0].decoded.as_ref().unwrap();
    assert_eq!(d.header.correlation, corr);
    assert!(d.header.is_reply());
    assert_eq!(
        sealed[0].frames[0][zlink_wire::HEADER_LEN],
        0x92,
        "a 43 body is a two-element array"
    );
    assert_eq!(tapped(&w.tap_a, TapDirection::Received, 44).len(), 1);
    // The target dialled a: its connections have routing ids of a's choosing (not "b").
    let mut to_target = 0;
    for f in w.tap_a.frames() {
        let to_t = f.direction == TapDirection::Sent
            && f.link != zlink_mesh::LinkKind::Client
            && f.peer.as_ref() != b"b";
        if to_t {
            let cmd = f.command().unwrap();
            assert!(
                cmd == 24 || (128..=191).contains(&cmd),
                "a sends the target only relays (and the mesh's own records), not {cmd}"
            );
            to_target += usize::from(cmd == 24);
        }
        assert_ne!(f.command(), Some(45), "45 never appears");
    }
    assert_eq!(to_target, 5, "the four held relays and the one after");
    for f in w.tap_b.frames() {
        assert_ne!(f.command(), Some(45), "45 never appears");
    }
}

// spec: SB-8.5
// spec: SB-8.8
// spec: SB-14.24
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_sends_the_held_relays_to_the_source_in_order() {
    let w = world().await;
    let seq =
        w.c.create("sequence", "s1", Placement::on("b"))
            .await
            .unwrap();
    bind(&w.c, &seq).await;
    let seal = seal_id(&w, 2, &seq);
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&seal, &seq)).await,
        SealOutcome::Installed
    );
    for n in 0..20u64 {
        w.c.packet_send(&RelaySend {
            actor_id: seq.id().to_string(),
            key: Next::KEY.get(),
            payload: rmp_serde::to_vec_named(&Next(n)).unwrap(),
        })
        .await
        .unwrap();
    }
    wait_held(&w.a, 20).await;
    // The abort carries only the seal identity (SB-8.8); from the coordinator (b).
    w.b.mesh()
        .send_record(&rid("a"), abort(&seal), None)
        .await
        .unwrap();
    // Every held relay reached the source once, in order; the connection is kept.
    let (next, out_of_order) = relay_req(&w.c, &seq, &Checked).await.unwrap();
    assert_eq!((next, out_of_order), (20, 0));
    wait_until("the seal released", || {
        w.a.session_seals() == SealGauges::default()
    })
    .await;
    assert_eq!(w.c.close_reason(), None);
    // The route is unchanged.
    let bound: Vec<ActorRef> = w.c.packet(&Bound).await.unwrap();
    assert_eq!(bound[0].wire_location(), seq.wire_location());
}

// spec: SB-8.3
// spec: SB-14.22
// spec: SB-14.25
// spec: SB-14.23
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_44_within_the_seal_timeout_closes_the_session() {
    // The configured SessionRelocationSealTimeout reaches the session owner.
    let w = world_with(Some(Duration::from_millis(1_500))).await;
    let echo = w.c.create("echo", "e1", Placement::on("b")).await.unwrap();
    bind(&w.c, &echo).await;
    let seal = seal_id(&w, 3, &echo);
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&seal, &echo)).await,
        SealOutcome::Installed
    );
    let relays_at_b = tapped(&w.tap_b, TapDirection::Received, 24).len();
    let c = w.c.clone();
    let echo2 = echo.clone();
    let held = tokio::spawn(async move { relay_req(&c, &echo2, &Echo(b"held".to_vec())).await });
    wait_held(&w.a, 1).await;
    // Just before the timeout nothing happens.
    w.clock.advance(Duration::from_millis(1_499));
    w.c.info().await.expect("still served");
    assert_eq!(w.a.session_seals().seals, 1);
    w.clock.advance(Duration::from_millis(1));
    assert_eq!(
        tokio::time::timeout(TIMEOUT, w.c.closed()).await.unwrap(),
        DisconnectReason::RelocationSealTimeout
    );
    let err = held
        .await
        .unwrap()
        .expect_err("a held request never delivered");
    assert!(matches!(
        err,
        ClientError::Request(_) | ClientError::Remote { .. }
    ));
    assert_eq!(rejects(&w.a, "relay/relocation_timeout"), 1);
    wait_until("the session gone", || {
        w.a.session_seals() == SealGauges::default()
    })
    .await;
    // The held relay never reached anyone.
    assert_eq!(
        tapped(&w.tap_b, TapDirection::Received, 24).len(),
        relays_at_b
    );
    // A 44 after the timeout is late: a Warning and a counter, nothing else.
    w.t.send_record(&rid("a"), commit(&seal, &echo, target_location(&w.t)), None)
        .await
        .unwrap();
    wait_until("the late 44 counted", || {
        rejects(&w.a, "route/late_session_route_update") == 1
    })
    .await;
}

// spec: SB-8.1
// spec: SB-8.3
// spec: SB-14.23
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seal_checks_its_identity_and_late_or_duplicate_44s_change_nothing() {
    let mut w = world().await;
    let echo = w.c.create("echo", "e1", Placement::on("b")).await.unwrap();
    bind(&w.c, &echo).await;
    let seal = seal_id(&w, 4, &echo);

    // Not from the binding's route (the actor owner): refused.
    assert_eq!(
        send_seal(&w.t, seal_record(&seal, &echo)).await,
        SealOutcome::Rejected(ErrorKind::Unavailable)
    );
    assert_eq!(rejects(&w.a, "seal/not_actor_owner"), 1);
    // Another binding generation: a stale binding.
    let mut other = seal.clone();
    other.binding_generation = BindingGeneration::new(seal.binding_generation.get() + 100);
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&other, &echo)).await,
        SealOutcome::Rejected(ErrorKind::Unavailable)
    );
    // Another incarnation: InvalidOperation (SB-12).
    let Record::SessionRelocationSeal(mut wrong) = seal_record(&seal, &echo) else {
        unreachable!()
    };
    wrong.object_generation = ObjectGeneration::new(echo.object_generation().get() + 1);
    assert_eq!(
        send_seal(w.b.mesh(), Record::SessionRelocationSeal(wrong)).await,
        SealOutcome::Rejected(ErrorKind::InvalidOperation)
    );
    // Another session lifecycle.
    let mut stale = seal.clone();
    stale.session_lifecycle = SessionLifecycleGeneration::new(seal.session_lifecycle.get() + 1);
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&stale, &echo)).await,
        SealOutcome::Rejected(ErrorKind::Unavailable)
    );
    assert_eq!(w.a.session_seals().seals, 0, "nothing installed");

    // Installed, and a duplicate 42 is answered Installed again; another relocation's is not.
    for _ in 0..2 {
        assert_eq!(
            send_seal(w.b.mesh(), seal_record(&seal, &echo)).await,
            SealOutcome::Installed
        );
    }
    let mut second = seal.clone();
    second.relocation = RelocationId::new(99);
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&second, &echo)).await,
        SealOutcome::Rejected(ErrorKind::Unavailable)
    );
    assert_eq!(w.a.session_seals().seals, 1);
    // The operator sees the seal (NODE_INFO counters; the metrics endpoint's gauges).
    assert_eq!(w.c.counters().await.unwrap().session_seals.seals, 1);

    // A 44 of another relocation: late, nothing changes (the seal stays).
    let target = target_location(&w.t);
    w.t.send_record(&rid("a"), commit(&second, &echo, target.clone()), None)
        .await
        .unwrap();
    wait_until("the foreign 44 counted", || {
        rejects(&w.a, "route/late_session_route_update") == 1
    })
    .await;
    assert_eq!(w.a.session_seals().seals, 1);

    // The matching commit applies; the same 44 again is a no-op; an abort after it is late.
    w.t.send_record(&rid("a"), commit(&seal, &echo, target.clone()), None)
        .await
        .unwrap();
    w.t.send_record(&rid("a"), commit(&seal, &echo, target_location(&w.t)), None)
        .await
        .unwrap();
    w.t.send_record(&rid("a"), abort(&seal), None)
        .await
        .unwrap();
    wait_until("the duplicate and the late abort counted", || {
        rejects(&w.a, "route/duplicate_session_route_update") == 1
            && rejects(&w.a, "route/late_session_route_update") == 2
    })
    .await;
    wait_until("the seal released", || {
        w.a.session_seals() == SealGauges::default()
    })
    .await;
    let bound: Vec<ActorRef> = w.c.packet(&Bound).await.unwrap();
    assert_eq!(bound[0].wire_location(), target, "the route switched once");

    // Visible to an operator with the other session rejections.
    let counters = w.c.counters().await.unwrap();
    assert_eq!(
        counters.session_rejects["route/late_session_route_update"],
        2
    );
    assert_eq!(counters.session_rejects["seal/not_actor_owner"], 1);
    assert_eq!(counters.session_seals.held, 0);
    // A relay now goes to the target.
    let c = w.c.clone();
    let echo2 = echo.clone();
    let r = tokio::spawn(async move { relay_req(&c, &echo2, &Echo(b"x".to_vec())).await });
    let inb = next_relay(&mut w.t_in).await;
    inb.reply.unwrap().reply(inb.payload.clone().unwrap());
    assert_eq!(r.await.unwrap().unwrap().0, b"x".to_vec());
}

// spec: SB-8.2
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_keeps_its_deadline_and_a_session_end_frees_the_seal() {
    let w = world().await;
    let echo = w.c.create("echo", "e1", Placement::on("b")).await.unwrap();
    bind(&w.c, &echo).await;
    let seal = seal_id(&w, 5, &echo);
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&seal, &echo)).await,
        SealOutcome::Installed
    );
    // A held request with a 500 ms deadline gets DeadlineExceeded when it passes, held.
    let mut short = relay_packet(&echo, &Echo(b"short".to_vec()));
    short.timeout_ms = 500;
    let c = w.c.clone();
    let short = tokio::spawn(async move { c.packet(&short).await });
    wait_held(&w.a, 1).await;
    let c = w.c.clone();
    let echo2 = echo.clone();
    let long = tokio::spawn(async move { relay_req(&c, &echo2, &Echo(b"long".to_vec())).await });
    wait_held(&w.a, 2).await;
    w.clock.advance(Duration::from_millis(500));
    let err = tokio::time::timeout(TIMEOUT, short)
        .await
        .expect("answered when the deadline passed")
        .unwrap()
        .expect_err("deadline passed");
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(w.a.session_seals().held, 1, "the other one is still held");
    assert!(!long.is_finished());

    // Another session's sealed binding: its client leaves, and the seal and what it held end
    // with its session.
    let c2 = client_of(&w.a);
    let e2 = c2.create("echo", "e2", Placement::on("b")).await.unwrap();
    bind(&c2, &e2).await;
    let seal2 = seal_id(&w, 6, &e2);
    assert_eq!(
        send_seal(w.b.mesh(), seal_record(&seal2, &e2)).await,
        SealOutcome::Installed
    );
    for i in 0..3u8 {
        c2.packet_send(&RelaySend {
            actor_id: e2.id().to_string(),
            key: Echo::KEY.get(),
            payload: rmp_serde::to_vec_named(&Echo(vec![i])).unwrap(),
        })
        .await
        .unwrap();
    }
    wait_held(&w.a, 4).await;
    assert_eq!(w.a.session_seals().seals, 2);
    c2.close().await;
    wait_until("the closed session's seal freed", || {
        w.a.session_seals()
            == SealGauges {
                seals: 1,
                held: 1,
                held_bytes: w.a.session_seals().held_bytes,
            }
    })
    .await;
    // What it held is counted, never dropped silently.
    assert_eq!(rejects(&w.a, "relay/session_closed"), 3);
    // The default SessionRelocationSealTimeout: 3,000 ms from the install.
    w.clock.advance(Duration::from_millis(2_499));
    w.c.info().await.expect("still served");
    w.clock.advance(Duration::from_millis(1));
    assert_eq!(
        tokio::time::timeout(TIMEOUT, w.c.closed()).await.unwrap(),
        DisconnectReason::RelocationSealTimeout
    );
    assert!(long.await.unwrap().is_err());
    wait_until("every seal freed", || {
        w.a.session_seals() == SealGauges::default()
    })
    .await;
}
