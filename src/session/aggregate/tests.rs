//! Unit tests of the session binding aggregate (and its proptest model).

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use zlink_wire::{
    AuthorityFence, AuthorityOwnerGeneration, MeshName, OwnerLeaseGeneration, PreviousSessionOwner,
};

fn rid(s: &str) -> NodeRid {
    NodeRid::new(s).unwrap()
}

fn ident() -> SessionIdentity {
    SessionIdentity {
        owner: rid("a"),
        lifecycle: SessionLifecycleGeneration::new(7),
        session: SessionRid::new(3),
    }
}

const OWNER: OwnerId = OwnerId::new(99);
const LEASE: OwnerLeaseGeneration = OwnerLeaseGeneration::new(5);

fn agg() -> SessionBindingAggregate {
    SessionBindingAggregate::new(ident(), OWNER, Duration::from_secs(30))
}

fn loc(node: &str) -> ActorLocation {
    ActorLocation {
        mesh: MeshName::new("m").unwrap(),
        node: rid(node),
        node_generation: NodeGeneration::new(11),
        authority_owner_generation: AuthorityOwnerGeneration::new(2),
        owner_lease_generation: OwnerLeaseGeneration::new(3),
    }
}

fn actor(i: u8) -> ActorId {
    ActorId::new(format!("actor-{i}")).unwrap()
}

fn target(i: u8, og: u64) -> BindTarget {
    BindTarget {
        actor: actor(i),
        actor_type: "t".into(),
        object_generation: ObjectGeneration::new(og),
        location: loc("b"),
    }
}

fn snap(t: &BindTarget, g: BindingGeneration) -> BindSnapshot {
    BindSnapshot {
        actor: t.actor.clone(),
        object_generation: t.object_generation,
        location: t.location.clone(),
        binding_generation: g,
    }
}

fn bind(a: &mut SessionBindingAggregate, t: BindTarget, g: u64) -> Binding {
    let g = BindingGeneration::new(g);
    let BindStart::Request(req) = a.begin_bind(t.clone(), g).unwrap() else {
        panic!("expected a 38")
    };
    match a.complete_bind(&t.actor, req.generation, LEASE, Ok(snap(&t, g))) {
        BindCompletion::Bound { binding, .. } => binding,
        other => panic!("{other:?}"),
    }
}

fn push_of(b: &Binding) -> BoundSessionSend {
    BoundSessionSend {
        actor: b.actor.clone(),
        object_generation: b.object_generation,
        source_node_generation: b.route.node_generation,
        authority_owner_generation: b.route.authority_owner_generation,
        session_lifecycle: ident().lifecycle,
        session: ident().session,
        binding_generation: b.generation,
        key: zlink_wire::DispatchKey::new(1),
    }
}

fn fence(node: &str) -> AuthorityFence {
    AuthorityFence {
        node: rid(node),
        node_generation: NodeGeneration::new(11),
        authority_owner_generation: AuthorityOwnerGeneration::new(2),
        owner_lease_generation: OwnerLeaseGeneration::new(3),
    }
}

fn replaced_of(b: &Binding) -> BoundSessionReplaced {
    BoundSessionReplaced {
        actor: b.actor.clone(),
        authority_source: fence("b"),
        authority_target: fence("b"),
        previous: PreviousSessionOwner {
            node: rid("a"),
            lifecycle: ident().lifecycle,
            owner: OWNER,
            owner_lease_generation: LEASE,
            session: ident().session,
            retired_binding_generation: b.generation,
        },
    }
}

fn sender() -> (NodeRid, NodeGeneration) {
    (rid("b"), NodeGeneration::new(11))
}

fn seal_rec(b: &Binding, relocation: u64) -> SessionRelocationSeal {
    SessionRelocationSeal {
        seal: zlink_wire::SealIdentity {
            relocation: RelocationId::new(relocation),
            session_lifecycle: ident().lifecycle,
            session: ident().session,
            binding_generation: b.generation,
        },
        actor: b.actor.clone(),
        object_generation: b.object_generation,
        deadline: Deadline::from_remaining(Duration::from_secs(1)),
    }
}

fn commit_of(b: &Binding, relocation: u64, to: ActorLocation) -> SessionRelocationRoute {
    SessionRelocationRoute::Commit(zlink_wire::RouteCommit {
        relocation: RelocationId::new(relocation),
        actor: b.actor.clone(),
        object_generation: b.object_generation,
        target: to,
        session_lifecycle: ident().lifecycle,
        session: ident().session,
        binding_generation: b.generation,
    })
}

fn held(i: u8) -> HeldRelay {
    HeldRelay::one_way(DispatchKey::new(1), bytes::Bytes::from(vec![i]))
}

/// Takes every released relay of `actor` (their payloads, in order) until the seal ends.
fn drain(a: &mut SessionBindingAggregate, now: Instant, actor: &ActorId) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        match a.next_released(now, actor) {
            Released::Send(t, r) => {
                assert!(!t.held());
                out.push(r.payload[0]);
            }
            Released::Expired(_) => panic!("nothing expires here"),
            Released::Done => return out,
        }
    }
}

// spec: SB-8.1
// spec: SB-8.2
// spec: SB-8.7
#[test]
fn a_seal_holds_in_order_and_a_commit_moves_the_route_then_releases() {
    let now = Instant::now();
    let mut a = agg();
    let b = bind(&mut a, target(1, 1), 1);
    let other = bind(&mut a, target(2, 1), 2);
    let s = sender();
    // Only the binding's route may seal it.
    assert_eq!(
        a.handle_seal(now, (&rid("x"), s.1), &seal_rec(&b, 9)),
        Err((FlowReject::NotActorOwner, ErrorKind::Unavailable))
    );
    a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
    // Idempotent; another relocation's is refused.
    a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
    assert_eq!(
        a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 10)),
        Err((FlowReject::RelocationInProgress, ErrorKind::Unavailable))
    );
    for i in 0..3 {
        let t = a.relay(&b.actor, b.generation).unwrap();
        assert!(t.held());
        assert_eq!(
            a.hold_relay(&b.actor, b.generation, held(i))
                .map_err(|_| ()),
            Ok(true)
        );
    }
    // The other actor is not sealed.
    assert!(!a.relay(&other.actor, other.generation).unwrap().held());
    assert!(a.relay(&b.actor, b.generation).unwrap().held());
    assert_eq!(a.seal_gauges().held, 3);
    // Nothing is released before the 44.
    assert!(matches!(a.next_released(now, &b.actor), Released::Done));
    let to = ActorLocation {
        node: rid("c"),
        node_generation: NodeGeneration::new(21),
        authority_owner_generation: AuthorityOwnerGeneration::new(4),
        ..loc("c")
    };
    let applied = a.handle_route(&commit_of(&b, 9, to.clone())).unwrap();
    let RouteApplied::Committed(moved) = applied else {
        panic!("a commit")
    };
    assert_eq!(moved.route, to);
    assert_eq!((moved.generation, moved.token), (b.generation, b.token));
    assert_eq!(a.find(&b.actor).unwrap().route, to, "the one binding moved");
    // Relays submitted while releasing queue behind the held ones.
    let t = a.relay(&b.actor, b.generation).unwrap();
    assert!(t.held(), "still behind the held relays");
    a.hold_relay(&b.actor, b.generation, held(3)).unwrap();
    assert_eq!(drain(&mut a, now, &b.actor), vec![0, 1, 2, 3]);
    // Then straight to the new route; the pushes of the target pass, the source's not.
    let t = a.relay(&b.actor, b.generation).unwrap();
    assert!(!t.held());
    assert_eq!(t.to(), &rid("c"));
    assert_eq!(
        t.record(DispatchKey::new(1), None)
            .authority_owner_generation,
        to.authority_owner_generation
    );
    let mut p = push_of(&b);
    assert_eq!(
        a.check_push(&p).err(),
        Some(FlowReject::NodeGenerationMismatch)
    );
    p.source_node_generation = to.node_generation;
    p.authority_owner_generation = to.authority_owner_generation;
    assert!(a.check_push(&p).is_ok());
    assert_eq!(a.seal_gauges(), SealGauges::default());
    // The same 44 again is a no-op; an abort of it is late.
    assert_eq!(
        a.handle_route(&commit_of(&b, 9, to)),
        Err(FlowReject::DuplicateRouteUpdate)
    );
    let abort = SessionRelocationRoute::Abort(zlink_wire::RouteAbort {
        seal: seal_rec(&b, 9).seal,
        action: zlink_wire::AbortAction::ResubmitToSource,
    });
    assert_eq!(a.handle_route(&abort), Err(FlowReject::LateRouteUpdate));
}

// spec: SB-8.3
#[test]
fn the_seal_timeout_closes_the_session_and_a_later_44_is_late() {
    let now = Instant::now();
    let mut a = agg().with_seal_limits(Duration::from_millis(3_000), 1024, 1 << 20);
    let b = bind(&mut a, target(1, 1), 1);
    let s = sender();
    a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
    a.hold_relay(&b.actor, b.generation, held(0)).unwrap();
    let due = now + Duration::from_millis(3_000);
    assert_eq!(a.poll_seal_timeout(), Some(due));
    let early = a.handle_seal_timeouts(due - Duration::from_millis(1));
    assert!(early.closed.is_none() && early.expired.is_empty());
    let fired = a.handle_seal_timeouts(due);
    assert_eq!(fired.closed.map(|h| h.len()), Some(1));
    assert_eq!(a.phase(), &Phase::Closed(SessionEnd::RelocationTimeout));
    assert_eq!(a.seal_gauges(), SealGauges::default());
    assert_eq!(
        a.handle_route(&commit_of(&b, 9, loc("c"))),
        Err(FlowReject::LateRouteUpdate)
    );
    assert_eq!(a.find(&b.actor).unwrap().route, loc("b"), "nothing changed");
    // The binding stays for the disconnect's notification.
    assert_eq!(a.disconnect().len(), 1);
}

// spec: SB-8.2
#[test]
fn held_relays_past_the_session_limits_keep_their_admission() {
    let now = Instant::now();
    let mut a = agg().with_seal_limits(Duration::from_secs(3), 2, 1 << 20);
    let b = bind(&mut a, target(1, 1), 1);
    let s = sender();
    a.handle_seal(now, (&s.0, s.1), &seal_rec(&b, 9)).unwrap();
    let mut waits = Vec::new();
    for i in 0..3 {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut r = held(i);
        r.admitted = Some(tx);
        waits.push((a.hold_relay(&b.actor, b.generation, r).unwrap(), rx));
    }
    let within: Vec<bool> = waits.iter().map(|(w, _)| *w).collect();
    assert_eq!(within, vec![true, true, false]);
    let (_, mut third) = waits.pop().unwrap();
    assert!(
        third
            .try_recv()
            .is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Empty)
    );
    // An unbind ends the seal and everything it held.
    a.remove(&b.actor, b.generation).unwrap();
    assert_eq!(a.seal_gauges(), SealGauges::default());
    assert!(
        third
            .try_recv()
            .is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Closed)
    );
}

// spec: SB-7.5
#[test]
fn a_notified_binding_takes_pushes_until_the_callback_terminal() {
    let mut a = agg();
    let b = bind(&mut a, target(1, 1), 1);
    let n = a.begin_notify(&b.actor, b.generation).unwrap();
    assert_eq!(n.generation, b.generation);
    // No longer current for the application: not listed, no relay, notified once.
    assert!(a.find(&b.actor).is_none());
    assert_eq!(
        a.relay(&b.actor, b.generation).unwrap_err(),
        FlowReject::BindingRetired
    );
    assert!(a.begin_notify(&b.actor, b.generation).is_err());
    // The actor's Spot callback may still push to the connected client.
    assert!(a.check_push(&push_of(&b)).is_ok());
    a.finish_notify(&b.actor, b.generation);
    assert!(a.find(&b.actor).is_none());
    // A push the callback sent before the actor owner's tombstone may arrive after the
    // terminal (it travels on another connection): still delivered, as are the new
    // binding's once the actor is bound again; another identity's is refused.
    assert!(a.check_push(&push_of(&b)).is_ok());
    let nb = bind(&mut a, target(1, 1), 9);
    assert!(a.check_push(&push_of(&nb)).is_ok());
    let mut other = push_of(&b);
    other.binding_generation = BindingGeneration::new(77);
    assert_eq!(
        a.check_push(&other).unwrap_err(),
        FlowReject::BindingRetired
    );
    // A physical disconnect meanwhile does not notify it a second time (SB-7.3).
    let b2 = bind(&mut a, target(2, 1), 2);
    a.begin_notify(&b2.actor, b2.generation).unwrap();
    let snapshot = a.disconnect();
    assert_eq!(
        snapshot.iter().map(|b| b.generation).collect::<Vec<_>>(),
        vec![nb.generation],
        "only the current binding"
    );
}

// spec: SB-6.2
// spec: SB-6.9
#[test]
fn a_second_replacement_while_closing_runs_its_callback_and_delays_the_close() {
    let mut a = agg();
    let b1 = bind(&mut a, target(1, 1), 1);
    let b2 = bind(&mut a, target(2, 1), 2);
    let now = Instant::now();
    let (s, g) = sender();
    let ReplacedOutcome::Closing { seq: first, .. } =
        a.handle_replaced(now, (&s, g), &replaced_of(&b1)).unwrap()
    else {
        panic!("closing")
    };
    assert!(a.callback_finished(now, first));
    let due = a.poll_timeout().unwrap();
    assert_eq!(due, now + REPLACEMENT_CLOSE_DELAY);
    // The second actor replaced while closing: its own relation and callback.
    let later = now + Duration::from_millis(50);
    let ReplacedOutcome::AlsoClosing {
        seq: second,
        retired,
    } = a
        .handle_replaced(later, (&s, g), &replaced_of(&b2))
        .unwrap()
    else {
        panic!("also closing")
    };
    assert_ne!(second, first);
    assert_eq!(retired.actor, b2.actor);
    // The close waits for it: not at the first deadline.
    assert_eq!(a.handle_timeout(due, first), None);
    let done = later + Duration::from_millis(10);
    assert!(!a.callback_finished(done, first), "reported twice");
    assert!(a.callback_finished(done, second));
    assert_eq!(a.poll_timeout(), Some(done + REPLACEMENT_CLOSE_DELAY));
    assert!(
        a.handle_timeout(done + REPLACEMENT_CLOSE_DELAY, first)
            .is_some_and(|d| !d.forced)
    );
}

// spec: SB-5.6
// spec: SB-5.7
#[test]
fn a_push_before_the_bind_terminal_is_held_until_it() {
    let mut a = agg();
    let t = target(1, 1);
    let g = BindingGeneration::new(4);
    let BindStart::Request(_) = a.begin_bind(t.clone(), g).unwrap() else {
        panic!("38")
    };
    let mut early = BoundSessionSend {
        actor: t.actor.clone(),
        object_generation: t.object_generation,
        source_node_generation: t.location.node_generation,
        authority_owner_generation: t.location.authority_owner_generation,
        session_lifecycle: ident().lifecycle,
        session: ident().session,
        binding_generation: g,
        key: zlink_wire::DispatchKey::new(1),
    };
    assert_eq!(a.check_push(&early).unwrap_err(), FlowReject::NotBound);
    // Another binding generation is not held.
    let mut other = early.clone();
    other.binding_generation = BindingGeneration::new(5);
    let held = |p: &BoundSessionSend| HeldPush {
        push: p.clone(),
        payload: bytes::Bytes::from_static(b"x"),
    };
    assert_eq!(
        a.hold_push(held(&other)).unwrap_err().0,
        FlowReject::NotBound
    );
    a.hold_push(held(&early)).unwrap();
    early.key = zlink_wire::DispatchKey::new(2);
    a.hold_push(held(&early)).unwrap();
    let BindCompletion::Bound { .. } = a.complete_bind(&t.actor, g, LEASE, Ok(snap(&t, g))) else {
        panic!("bound")
    };
    let out = a.take_held(&t.actor);
    assert_eq!(
        out.iter().map(|h| h.push.key.get()).collect::<Vec<_>>(),
        vec![1, 2],
        "in arrival order"
    );
    assert!(out.iter().all(|h| a.check_push(&h.push).is_ok()));
    assert!(a.take_held(&t.actor).is_empty());
    // Bounded.
    let t2 = target(2, 1);
    let g2 = BindingGeneration::new(6);
    a.begin_bind(t2.clone(), g2).unwrap();
    let mut p = early.clone();
    p.actor = t2.actor.clone();
    p.binding_generation = g2;
    for _ in 0..HELD_PUSH_LIMIT {
        a.hold_push(held(&p)).unwrap();
    }
    assert_eq!(
        a.hold_push(held(&p)).unwrap_err().0,
        FlowReject::ClientBacklogFull
    );
}

// spec: SB-14.2
#[test]
fn two_bindings_have_their_own_route_generation_and_token() {
    let mut a = agg();
    let b1 = bind(&mut a, target(1, 1), 1);
    let b2 = bind(&mut a, target(2, 1), 2);
    assert_ne!(b1.token, b2.token);
    let r1 = a.relay(&b1.actor, b1.generation).unwrap();
    let r2 = a.relay(&b2.actor, b2.generation).unwrap();
    assert_eq!(r1.generation(), b1.generation);
    assert_eq!(r2.generation(), b2.generation);
    assert!(r2.sequence > r1.sequence);
}

/// A relay through the binding `find` found: the binding's record and template, the next
/// sequence; closed → `SessionClosed`; an id that names no binding finds nothing.
#[test]
fn find_then_relay_goes_through_the_current_binding() {
    let mut a = agg();
    let b1 = bind(&mut a, target(1, 1), 1);
    let b2 = bind(&mut a, target(2, 1), 2);
    assert!(a.find_shared("nobody").is_none());
    let r1 = a.relay(&b1.actor, b1.generation).unwrap();
    let f1 = a.find_shared(b1.actor.as_str()).unwrap();
    assert_eq!(*f1, b1);
    let c1 = a.relay(&f1.actor, f1.generation).unwrap();
    assert_eq!(c1.sequence.get(), r1.sequence.get() + 1);
    assert_eq!((&c1.binding, c1.lifecycle), (&r1.binding, r1.lifecycle));
    let key = zlink_wire::DispatchKey::new(3);
    let rec = c1.record(key, None);
    assert_eq!(
        (
            &rec.actor,
            rec.object_generation,
            rec.tail.binding_generation
        ),
        (&b1.actor, b1.object_generation, b1.generation)
    );
    assert_eq!(rec.tail.session_sequence, c1.sequence);
    // The binding's template writes exactly that record.
    let t = c1.template().expect("a template");
    assert_eq!(
        t.frames(key, c1.sequence, bytes::Bytes::from_static(b"p")),
        zlink_wire::encode(
            &zlink_wire::Record::ActorSend(rec),
            zlink_wire::CorrelationId::NONE,
            Some(bytes::Bytes::from_static(b"p"))
        )
        .map_err(|_| bytes::Bytes::new())
    );
    // Replaced and then closed: the other binding is found, its relay refused.
    let t0 = Instant::now();
    let (s, g) = sender();
    a.handle_replaced(t0, (&s, g), &replaced_of(&b1)).unwrap();
    assert!(a.callback_finished(t0, 1));
    assert!(a.handle_timeout(t0 + REPLACEMENT_CLOSE_DELAY, 1).is_some());
    assert!(a.find(&b2.actor).is_some());
    assert_eq!(
        a.relay(&b2.actor, b2.generation).unwrap_err(),
        FlowReject::SessionClosed
    );
    assert!(a.find_shared(&b1.actor).is_none());
}

/// `relay` remembers the binding it went through (`find` and the next `relay` compare it
/// first), and neither goes through it again once the bindings changed: rebound, removed,
/// replaced, disconnected; nor does a relay through a retired generation.
#[test]
fn the_remembered_relay_binding_never_outlives_a_change() {
    let mut a = agg();
    let id = actor(1);
    let gen_of = |a: &mut SessionBindingAggregate| {
        let f = a.find_shared(&id)?;
        Some(
            a.relay(&f.actor, f.generation)
                .map(|t| t.binding.generation.get()),
        )
    };
    bind(&mut a, target(1, 1), 1);
    assert_eq!(gen_of(&mut a), Some(Ok(1)));
    assert_eq!(gen_of(&mut a), Some(Ok(1)), "the remembered binding");
    // Rebound (BindOrGet of a new incarnation): the new binding; the old handle is stale.
    bind(&mut a, target(1, 2), 2);
    assert_eq!(gen_of(&mut a), Some(Ok(2)));
    assert!(a.relay(&id, BindingGeneration::new(1)).is_err());
    a.remove(&id, BindingGeneration::new(2)).unwrap();
    assert_eq!(gen_of(&mut a), None);
    assert!(a.relay(&id, BindingGeneration::new(2)).is_err());
    let b = bind(&mut a, target(1, 1), 3);
    assert_eq!(gen_of(&mut a), Some(Ok(3)));
    let (s, g) = sender();
    a.handle_replaced(Instant::now(), (&s, g), &replaced_of(&b))
        .unwrap();
    assert_eq!(gen_of(&mut a), None);
    assert!(a.relay(&id, BindingGeneration::new(3)).is_err());
    let mut a = agg();
    bind(&mut a, target(1, 1), 4);
    assert_eq!(gen_of(&mut a), Some(Ok(4)));
    assert_eq!(a.disconnect().len(), 1);
    assert_eq!(gen_of(&mut a), None);
}

/// Only a binding to an actor on another node has a 24 template (its relays cross the
/// mesh; the session host sends them without comparing the route with its node).
#[test]
fn only_a_binding_to_a_peer_has_a_relay_template() {
    let mut a = agg();
    let remote = bind(&mut a, target(1, 1), 1);
    assert!(remote.relay.is_some());
    let mut here = target(2, 1);
    here.location = loc("a");
    let local = bind(&mut a, here, 2);
    assert!(local.relay.is_none());
    assert!(
        a.relay(&local.actor, local.generation)
            .unwrap()
            .template()
            .is_none()
    );
}

// spec: SB-6.7
#[test]
fn rebinding_the_current_binding_is_idempotent() {
    let mut a = agg();
    let b = bind(&mut a, target(1, 1), 1);
    assert_eq!(
        a.begin_bind(target(1, 1), BindingGeneration::new(2)),
        Ok(BindStart::Current(b))
    );
    assert_eq!(a.pending_binds(), 0);
}

#[test]
fn a_session_holds_at_most_its_binding_limit() {
    let mut a = agg().with_binding_limit(2);
    bind(&mut a, target(1, 1), 1);
    let BindStart::Request(_) = a
        .begin_bind(target(2, 1), BindingGeneration::new(2))
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        a.begin_bind(target(3, 1), BindingGeneration::new(3)),
        Err(FlowReject::TooManyBindings)
    );
    // Rebinding a bound actor to a new incarnation is not a new binding.
    assert!(
        a.begin_bind(target(1, 2), BindingGeneration::new(4))
            .is_ok()
    );
}

// spec: SB-6.1
#[test]
fn a_failed_rebind_keeps_the_old_route() {
    let mut a = agg();
    let old = bind(&mut a, target(1, 1), 1);
    let t2 = target(1, 2);
    let BindStart::Request(req) = a.begin_bind(t2.clone(), BindingGeneration::new(2)).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        a.complete_bind(
            &t2.actor,
            req.generation,
            LEASE,
            Err(ErrorKind::InvalidOperation)
        ),
        BindCompletion::Failed(ErrorKind::InvalidOperation)
    );
    assert_eq!(a.find(&old.actor), Some(&old));
}

// spec: SB-5.5
// spec: SB-5.8
#[test]
fn push_is_current_only_with_all_four_values() {
    let mut a = agg();
    let b = bind(&mut a, target(1, 1), 1);
    assert!(a.check_push(&push_of(&b)).is_ok());
    let mut p = push_of(&b);
    p.object_generation = ObjectGeneration::new(9);
    assert_eq!(
        a.check_push(&p).unwrap_err(),
        FlowReject::ObjectGenerationMismatch
    );
    let mut p = push_of(&b);
    p.source_node_generation = NodeGeneration::new(9);
    assert_eq!(
        a.check_push(&p).unwrap_err(),
        FlowReject::NodeGenerationMismatch
    );
    let mut p = push_of(&b);
    p.authority_owner_generation = AuthorityOwnerGeneration::new(9);
    assert_eq!(a.check_push(&p).unwrap_err(), FlowReject::AuthorityMismatch);
    let mut p = push_of(&b);
    p.binding_generation = BindingGeneration::new(9);
    assert_eq!(a.check_push(&p).unwrap_err(), FlowReject::BindingRetired);
    let mut p = push_of(&b);
    p.session_lifecycle = SessionLifecycleGeneration::new(1);
    assert_eq!(a.check_push(&p).unwrap_err(), FlowReject::LifecycleMismatch);
}

// spec: SB-6.2
// spec: SB-6.6
#[test]
fn replaced_applies_once_and_only_with_every_previous_owner_value() {
    let mut a = agg();
    let b = bind(&mut a, target(1, 1), 1);
    let now = Instant::now();
    let (s, g) = sender();
    for f in 0..6 {
        let mut r = replaced_of(&b);
        match f {
            0 => r.previous.owner = OwnerId::new(1),
            1 => r.previous.lifecycle = SessionLifecycleGeneration::new(1),
            2 => r.previous.session = SessionRid::new(1),
            3 => r.previous.node = rid("z"),
            4 => r.previous.owner_lease_generation = OwnerLeaseGeneration::new(1),
            _ => r.authority_target.node = rid("c"),
        }
        assert_eq!(
            a.handle_replaced(now, (&s, g), &r).unwrap_err(),
            FlowReject::ReplacedIdentityMismatch,
            "field {f}"
        );
        assert_eq!(a.phase(), &Phase::Open);
    }
    let out = a.handle_replaced(now, (&s, g), &replaced_of(&b)).unwrap();
    assert!(matches!(out, ReplacedOutcome::Closing { seq: 1, .. }));
    assert!(a.find(&b.actor).is_none());
    assert_eq!(
        a.handle_replaced(now, (&s, g), &replaced_of(&b))
            .unwrap_err(),
        FlowReject::DuplicateReplacement
    );
    assert!(!a.accepts_packets());
    // A relay through the retired binding: a stale binding fence (SB-12).
    assert_eq!(
        a.relay(&b.actor, b.generation).unwrap_err(),
        FlowReject::BindingRetired
    );
}

// spec: SB-6.4
// spec: SB-14.13
#[test]
fn close_is_due_exactly_100ms_after_the_callback_terminal() {
    let mut a = agg();
    let b = bind(&mut a, target(1, 1), 1);
    let t0 = Instant::now();
    let (s, g) = sender();
    a.handle_replaced(t0, (&s, g), &replaced_of(&b)).unwrap();
    assert_eq!(a.poll_timeout(), Some(t0 + Duration::from_secs(30)));
    let done = t0 + Duration::from_millis(5);
    assert!(a.callback_finished(done, 1));
    assert!(!a.callback_finished(done, 1), "terminal counted once");
    assert_eq!(a.poll_timeout(), Some(done + REPLACEMENT_CLOSE_DELAY));
    assert_eq!(a.handle_timeout(done + Duration::from_millis(99), 1), None);
    assert_eq!(a.handle_timeout(done + REPLACEMENT_CLOSE_DELAY, 2), None);
    assert_eq!(
        a.handle_timeout(done + REPLACEMENT_CLOSE_DELAY, 1),
        Some(CloseDecision {
            seq: 1,
            forced: false
        })
    );
    assert_eq!(a.phase(), &Phase::Closed(SessionEnd::Replaced));
}

// spec: SB-6.4
#[test]
fn callback_timeout_forces_the_close() {
    let mut a = agg();
    let b = bind(&mut a, target(1, 1), 1);
    let t0 = Instant::now();
    let (s, g) = sender();
    a.handle_replaced(t0, (&s, g), &replaced_of(&b)).unwrap();
    assert_eq!(
        a.handle_timeout(t0 + Duration::from_millis(29_999), 1),
        None
    );
    assert_eq!(
        a.handle_timeout(t0 + Duration::from_secs(30), 1),
        Some(CloseDecision {
            seq: 1,
            forced: true
        })
    );
}

// spec: SB-7.1
// spec: SB-7.3
#[test]
fn disconnect_freezes_the_snapshot_once() {
    let mut a = agg();
    let b1 = bind(&mut a, target(1, 1), 1);
    let b2 = bind(&mut a, target(2, 1), 2);
    let removed = a.remove(&b1.actor, b1.generation).unwrap();
    assert_eq!(removed.generation, b1.generation);
    let snap = a.disconnect();
    assert_eq!(snap, vec![b2]);
    assert!(a.disconnect().is_empty());
    assert_eq!(
        a.relay(&actor(2), BindingGeneration::new(2)).unwrap_err(),
        FlowReject::SessionClosed
    );
}

// spec: SB-14.15
#[test]
fn a_late_bind_reply_is_tombstoned_never_applied() {
    let mut a = agg();
    let t = target(1, 1);
    let g = BindingGeneration::new(1);
    a.begin_bind(t.clone(), g).unwrap();
    a.disconnect();
    let out = a.complete_bind(&t.actor, g, LEASE, Ok(snap(&t, g)));
    assert!(matches!(
        out,
        BindCompletion::Late {
            reason: FlowReject::SessionClosed,
            tombstone: Some(_)
        }
    ));
    assert!(a.find(&t.actor).is_none());
}

#[derive(Clone, Debug)]
enum Op {
    Begin(u8, u64),
    Complete(u8, u64, bool),
    Relay(u8, u64),
    RelayCurrent(u8),
    Push(u8, u64),
    Replaced(u8, u64),
    Remove(u8, u64),
    Disconnect,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3, 1u64..3).prop_map(|(a, o)| Op::Begin(a, o)),
        (0u8..3, 1u64..12, any::<bool>()).prop_map(|(a, g, ok)| Op::Complete(a, g, ok)),
        (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Relay(a, g)),
        (0u8..3).prop_map(Op::RelayCurrent),
        (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Push(a, g)),
        (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Replaced(a, g)),
        (0u8..3, 1u64..12).prop_map(|(a, g)| Op::Remove(a, g)),
        Just(Op::Disconnect),
    ]
}

proptest! {
    /// Model: at most one current binding per actor; a retired generation never becomes
    /// current again; a record for generation g changes nothing but the binding with g.
    #[test]
    fn bindings_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut a = agg();
        let mut next_gen = 1u64;
        let mut ever_retired = std::collections::HashSet::new();
        let mut pending: HashMap<u8, (BindTarget, BindingGeneration)> = HashMap::new();
        let now = Instant::now();
        let (s, sg) = sender();
        for op in ops {
            let only = match &op {
                Op::Begin(i, _) | Op::Complete(i, _, _) | Op::Relay(i, _) | Op::Push(i, _)
                | Op::Replaced(i, _) | Op::Remove(i, _) | Op::RelayCurrent(i) => Some(actor(*i)),
                Op::Disconnect => None,
            };
            let before: HashMap<ActorId, Binding> =
                a.bound().map(|b| (b.actor.clone(), b.clone())).collect();
            match op.clone() {
                Op::Begin(i, og) => {
                    let g = BindingGeneration::new(next_gen);
                    next_gen += 1;
                    if let Ok(BindStart::Request(r)) = a.begin_bind(target(i, og), g) {
                        pending.insert(i, (r.target, r.generation));
                    }
                }
                Op::Complete(i, g, ok) => {
                    let (t, gen_) = match pending.get(&i) {
                        Some((t, pg)) if g % 2 == 0 => (t.clone(), *pg),
                        _ => (target(i, 1), BindingGeneration::new(g)),
                    };
                    let res = if ok { Ok(snap(&t, gen_)) } else { Err(ErrorKind::Unavailable) };
                    if let BindCompletion::Bound { binding, previous } =
                        a.complete_bind(&t.actor, gen_, LEASE, res)
                    {
                        prop_assert!(!ever_retired.contains(&binding.generation));
                        if let Some(p) = previous { ever_retired.insert(p.generation); }
                        pending.remove(&i);
                    }
                }
                Op::Relay(i, g) => {
                    // Only the handle of the current binding relays (SB-4.1).
                    let out = a.relay(&actor(i), BindingGeneration::new(g));
                    let current = before.get(&actor(i)).is_some_and(|b| b.generation.get() == g);
                    prop_assert_eq!(out.is_ok(), current && !matches!(a.phase(), Phase::Closed(_)));
                }
                Op::RelayCurrent(i) => {
                    // `find` and then `relay` through the found binding, whichever binding
                    // the previous relay went through (never a retired one).
                    let found = a.find_shared(&actor(i));
                    match (before.get(&actor(i)), found) {
                        (None, None) => {}
                        (Some(b), Some(f)) => {
                            prop_assert_eq!(&*f, b);
                            match a.relay(&f.actor, f.generation) {
                                Ok(t) => {
                                    prop_assert!(!matches!(a.phase(), Phase::Closed(_)));
                                    prop_assert_eq!(&*t.binding, b);
                                }
                                Err(r) => {
                                    prop_assert!(matches!(a.phase(), Phase::Closed(_)));
                                    prop_assert_eq!(r, FlowReject::SessionClosed);
                                }
                            }
                        }
                        (b, f) => prop_assert!(false, "{:?} found {:?}", b, f.map(|f| f.generation)),
                    }
                }
                Op::Push(i, g) => {
                    if let Some(b) = before.get(&actor(i)) {
                        let mut p = push_of(b);
                        p.binding_generation = BindingGeneration::new(g);
                        prop_assert_eq!(a.check_push(&p).is_ok(), b.generation.get() == g);
                    }
                }
                Op::Replaced(i, g) => {
                    // Half of them for the current binding (a random one rarely is).
                    let g = match before.get(&actor(i)) {
                        Some(b) if g % 2 == 0 => b.generation.get(),
                        _ => g,
                    };
                    let mut b = before.get(&actor(i)).cloned().unwrap_or_else(|| Binding {
                        actor: actor(i), actor_type: "t".into(), object_generation: ObjectGeneration::new(1),
                        route: loc("b"), generation: BindingGeneration::new(g),
                        token: BindingToken(0), owner_lease: LEASE,
                        relay: None,
                    });
                    b.generation = BindingGeneration::new(g);
                    let applied = a.handle_replaced(now, (&s, sg), &replaced_of(&b)).is_ok();
                    let was_current = before.get(&actor(i)).is_some_and(|c| c.generation.get() == g);
                    prop_assert_eq!(applied, was_current);
                    if applied { ever_retired.insert(BindingGeneration::new(g)); }
                }
                Op::Remove(i, g) => {
                    let g = match before.get(&actor(i)) {
                        Some(b) if g % 2 == 0 => b.generation.get(),
                        _ => g,
                    };
                    let current = before.get(&actor(i)).is_some_and(|b| b.generation.get() == g);
                    match a.remove(&actor(i), BindingGeneration::new(g)) {
                        Ok(b) => { prop_assert!(current); ever_retired.insert(b.generation); }
                        Err(_) => prop_assert!(!current),
                    }
                }
                Op::Disconnect => {
                    for b in a.disconnect() { ever_retired.insert(b.generation); }
                }
            }
            // Late records touch only their own identity: every other actor's binding is
            // unchanged by this step.
            let after: HashMap<ActorId, Binding> =
                a.bound().map(|b| (b.actor.clone(), b.clone())).collect();
            for b in after.values() {
                prop_assert!(!ever_retired.contains(&b.generation), "retired identity revived");
            }
            if let Some(only) = only {
                for changed in changed_actors(&before, &after) {
                    prop_assert_eq!(&changed, &only, "a record touched another binding");
                }
            }
        }
    }
}

/// The actors whose binding differs between two states.
fn changed_actors(
    before: &HashMap<ActorId, Binding>,
    after: &HashMap<ActorId, Binding>,
) -> Vec<ActorId> {
    before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}
