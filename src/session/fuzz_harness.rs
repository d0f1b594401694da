//! The session aggregate's input sequences as a fuzz target (`fuzz/`'s `session_aggregate`,
//! `docs/RELIABILITY.md`): bytes decoded into a sequence of inputs to one
//! [`SessionBindingAggregate`] — binds begun and completed (with their own, a stale or a wrong
//! terminal, success or failure), relays through a handle, pushes (current, retired, of a bind
//! in flight, held and taken), 51s (right, late, foreign), replaced-callback terminals, timers on
//! a moving clock, unbinds, notifies and the disconnect — and checks after every input:
//!
//! - nothing panics;
//! - at most one current binding per actor, at most the binding limit held;
//! - a retired binding generation never becomes current again, and its handle never relays
//!   (SB-4.1, SB-5.3); a relay succeeds exactly through the current binding of an open or
//!   closing session;
//! - a push is accepted only for a binding identity this session holds or is notifying
//!   (SB-5.5, SB-7.5), never once the session is closed;
//! - a 51 that is refused (late, duplicate, foreign) changes no binding (SB-6.6);
//! - the phase only moves forward (open → closing → closed) and a closed session accepts
//!   nothing and holds no binding (SB-7.1).
//!
//! The committed corpus (`fuzz/corpus/session_aggregate`) and generated inputs run as a unit
//! test in every `cargo test` (`tests` below); `scripts/fuzz` runs the target.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_wire::{
    AbortAction, ActorId, ActorLocation, AuthorityFence, AuthorityOwnerGeneration, BindSnapshot,
    BindingGeneration, BoundSessionReplaced, BoundSessionSend, Deadline, DispatchKey, ErrorKind,
    MeshName, NodeGeneration, NodeRid, ObjectGeneration, OwnerId, OwnerLeaseGeneration,
    PreviousSessionOwner, RelocationId, RouteAbort, RouteCommit, SealIdentity,
    SessionLifecycleGeneration, SessionRelocationRoute, SessionRelocationSeal, SessionRid,
};

use super::aggregate::{
    BindCompletion, BindStart, BindTarget, HeldPush, Phase, Released, ReplacedOutcome,
    RouteApplied, SessionBindingAggregate, SessionIdentity,
};
use super::seal::HeldRelay;

const ACTORS: u8 = 4;
const LIMIT: usize = 3;
const OWNER: OwnerId = OwnerId::new(99);
const LEASE: OwnerLeaseGeneration = OwnerLeaseGeneration::new(5);

/// Reads the input bytes; past the end every read is 0.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

fn rid(s: &str) -> NodeRid {
    NodeRid::new(s).expect("valid")
}

fn identity() -> SessionIdentity {
    SessionIdentity {
        owner: rid("a"),
        lifecycle: SessionLifecycleGeneration::new(7),
        session: SessionRid::new(3),
    }
}

fn actor(i: u8) -> ActorId {
    ActorId::new(format!("actor-{}", i % ACTORS)).expect("valid")
}

fn location(node_generation: u64) -> ActorLocation {
    ActorLocation {
        mesh: MeshName::new("m").expect("valid"),
        node: rid("b"),
        node_generation: NodeGeneration::new(node_generation),
        authority_owner_generation: AuthorityOwnerGeneration::new(2),
        owner_lease_generation: OwnerLeaseGeneration::new(3),
    }
}

fn fence() -> AuthorityFence {
    AuthorityFence {
        node: rid("b"),
        node_generation: NodeGeneration::new(11),
        authority_owner_generation: AuthorityOwnerGeneration::new(2),
        owner_lease_generation: OwnerLeaseGeneration::new(3),
    }
}

fn rank(p: &Phase) -> u8 {
    match p {
        Phase::Open => 0,
        Phase::Closing(_) => 1,
        Phase::Closed(_) => 2,
    }
}

/// Each binding's identity and route node, sorted (what a refused 44 must leave alone).
fn routes(a: &SessionBindingAggregate) -> Vec<(ActorId, u64, u64, String)> {
    let mut v: Vec<_> = a
        .bound()
        .map(|b| {
            (
                b.actor.clone(),
                b.generation.get(),
                b.object_generation.get(),
                b.route.node.as_str().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// What the harness knows of the session beside the aggregate (the model).
#[derive(Default)]
struct Model {
    /// Binds in flight: actor → (ObjectGeneration, binding generation).
    pending: HashMap<u8, (u64, u64)>,
    /// Every binding generation that was current once, by actor.
    held: HashMap<u8, HashSet<u64>>,
    /// Generations retired (replaced, unbound, notified and finished, disconnected).
    retired: HashSet<u64>,
    /// Generations being notified (begin_notify without finish_notify yet), by actor.
    notifying: HashMap<u8, HashSet<u64>>,
    /// Replacement sequences handed out.
    replacements: Vec<u64>,
    /// Seals installed: actor → (relocation, binding generation).
    seals: HashMap<u8, (u64, u64)>,
    /// The connection ended.
    disconnected: bool,
}

/// What one input sequence reached (for the tests to see that generated sequences get deep).
#[derive(Clone, Copy, Debug, Default)]
pub struct Reached {
    /// Binds bound.
    pub bound: u64,
    /// 51s applied.
    pub replaced: u64,
    /// 51s refused.
    pub refused_51: u64,
    /// Sessions closed by the replacement close timer.
    pub closed_by_timer: u64,
    /// Seals installed.
    pub sealed: u64,
    /// 44 commits applied.
    pub committed: u64,
    /// 44s refused.
    pub refused_44: u64,
    /// Pushes accepted.
    pub pushes: u64,
}

/// Runs one input sequence (4 bytes per input: what, which actor, two arguments); panics on a
/// broken invariant. Returns what it reached.
pub fn aggregate_ops(data: &[u8]) -> Reached {
    let mut reached = Reached::default();
    let mut r = Reader(data);
    let start = Instant::now();
    let mut now = start;
    let mut a = SessionBindingAggregate::new(identity(), OWNER, Duration::from_secs(2))
        .with_binding_limit(LIMIT);
    let mut m = Model::default();
    let mut next_gen = 1u64;
    let mut ops = 0;
    while !r.done() && ops < 512 {
        ops += 1;
        let before: HashMap<ActorId, (u64, u64)> = a
            .bound()
            .map(|b| {
                (
                    b.actor.clone(),
                    (b.generation.get(), b.object_generation.get()),
                )
            })
            .collect();
        let phase_before = rank(a.phase());
        // one input = 4 bytes: what, which actor, two arguments
        let op = r.byte() % 18;
        let i = r.byte() % ACTORS;
        let (x, y) = (r.byte(), r.byte());
        match op {
            // begin a bind of incarnation 1..=3
            0 => {
                let og = u64::from(x % 3) + 1;
                let g = next_gen;
                next_gen += 1;
                let target = BindTarget {
                    actor: actor(i),
                    actor_type: "t".into(),
                    object_generation: ObjectGeneration::new(og),
                    location: location(11),
                };
                match a.begin_bind(target, BindingGeneration::new(g)) {
                    Ok(BindStart::Request(req)) => {
                        assert!(phase_before < 2, "a closed session began a bind");
                        assert_eq!(req.generation.get(), g);
                        m.pending.insert(i, (og, g));
                    }
                    Ok(BindStart::Current(b)) => {
                        assert_eq!(before.get(&actor(i)), Some(&(b.generation.get(), og)));
                    }
                    Err(_) => {}
                }
            }
            // the terminal of a bind: ours / a stale generation / a wrong snapshot, ok or failed
            1 => {
                let how = x;
                let (og, g) = match m.pending.get(&i) {
                    Some(&(og, g)) if how % 3 != 1 => (og, g),
                    _ => (1, u64::from(y)),
                };
                let snap_og = if how % 3 == 2 { og + 1 } else { og };
                let result = if how & 0x80 == 0 {
                    Ok(BindSnapshot {
                        actor: actor(i),
                        object_generation: ObjectGeneration::new(snap_og),
                        location: location(11),
                        binding_generation: BindingGeneration::new(g),
                    })
                } else {
                    Err(ErrorKind::Unavailable)
                };
                let ours = m.pending.get(&i) == Some(&(og, g));
                match a.complete_bind(&actor(i), BindingGeneration::new(g), LEASE, result) {
                    BindCompletion::Bound { binding, previous } => {
                        reached.bound += 1;
                        assert!(ours, "a terminal of no bind in flight was applied");
                        assert!(phase_before < 2, "bound in a closed session");
                        assert!(
                            !m.retired.contains(&binding.generation.get()),
                            "a retired generation became current again"
                        );
                        if let Some(p) = previous {
                            assert_eq!(
                                before.get(&actor(i)).map(|b| b.0),
                                Some(p.generation.get())
                            );
                            m.retired.insert(p.generation.get());
                        }
                        m.held.entry(i).or_default().insert(g);
                        m.pending.remove(&i);
                    }
                    BindCompletion::Failed(_) => {
                        m.pending.remove(&i);
                    }
                    BindCompletion::Late { .. } => {
                        if ours {
                            m.pending.remove(&i);
                        }
                    }
                }
            }
            // a relay through a handle: the current one, or any generation
            2 => {
                let g = match before.get(&actor(i)) {
                    Some(&(g, _)) if x % 2 == 0 => g,
                    _ => u64::from(y),
                };
                let ok = a.relay(&actor(i), BindingGeneration::new(g)).is_ok();
                let current = before.get(&actor(i)).is_some_and(|b| b.0 == g);
                assert_eq!(ok, current && phase_before < 2, "relay through {g}");
                assert!(!(ok && m.retired.contains(&g)), "a retired handle relayed");
            }
            // a push (36) of some identity
            3 => {
                let how = x;
                let (g, og) = match before.get(&actor(i)) {
                    Some(&(g, og)) if how % 4 != 0 => (g, og),
                    _ => (u64::from(y), u64::from(how % 3) + 1),
                };
                let push = BoundSessionSend {
                    actor: actor(i),
                    object_generation: ObjectGeneration::new(og),
                    source_node_generation: NodeGeneration::new(if how % 8 == 7 { 12 } else { 11 }),
                    authority_owner_generation: AuthorityOwnerGeneration::new(2),
                    session_lifecycle: identity().lifecycle,
                    session: identity().session,
                    binding_generation: BindingGeneration::new(g),
                    key: DispatchKey::new(1),
                };
                if a.check_push(&push).is_ok() {
                    reached.pushes += 1;
                    assert!(phase_before < 2, "a closed session took a push");
                    assert!(
                        m.held.get(&i).is_some_and(|h| h.contains(&g)),
                        "a push of a binding this session never held was accepted"
                    );
                    let current = before.get(&actor(i)).is_some_and(|b| b.0 == g);
                    let notifying = m.notifying.get(&i).is_some_and(|n| n.contains(&g));
                    assert!(
                        current || notifying || m.retired.contains(&g),
                        "accepted push of {g}"
                    );
                }
            }
            // a push that overtook its bind's terminal: held, or refused
            4 => {
                let Some(&(og, g)) = m.pending.get(&i) else {
                    continue;
                };
                let push = BoundSessionSend {
                    actor: actor(i),
                    object_generation: ObjectGeneration::new(og),
                    source_node_generation: NodeGeneration::new(11),
                    authority_owner_generation: AuthorityOwnerGeneration::new(2),
                    session_lifecycle: identity().lifecycle,
                    session: identity().session,
                    binding_generation: BindingGeneration::new(g),
                    key: DispatchKey::new(1),
                };
                if a.hold_push(HeldPush {
                    push,
                    payload: Bytes::new(),
                })
                .is_ok()
                {
                    assert!(phase_before < 2, "a closed session held a push");
                }
            }
            // the held pushes of an actor, after its bind's terminal
            5 => {
                for h in a.take_held(&actor(i)) {
                    assert_eq!(h.push.actor, actor(i));
                }
            }
            // a 51: for the current binding, a retired one, or foreign values
            6 => {
                let how = x;
                let g = match before.get(&actor(i)) {
                    Some(&(g, _)) if how % 3 == 0 => g,
                    _ => u64::from(y),
                };
                let rec = BoundSessionReplaced {
                    actor: actor(i),
                    authority_source: fence(),
                    authority_target: fence(),
                    previous: PreviousSessionOwner {
                        node: rid(if how % 16 == 15 { "x" } else { "a" }),
                        lifecycle: identity().lifecycle,
                        owner: OWNER,
                        owner_lease_generation: LEASE,
                        session: identity().session,
                        retired_binding_generation: BindingGeneration::new(g),
                    },
                };
                let sender = (rid("b"), NodeGeneration::new(11));
                match a.handle_replaced(now, (&sender.0, sender.1), &rec) {
                    Ok(outcome) => {
                        let (ReplacedOutcome::Closing { seq, retired }
                        | ReplacedOutcome::AlsoClosing { seq, retired }) = outcome;
                        assert_eq!(before.get(&actor(i)).map(|b| b.0), Some(g));
                        assert_eq!(retired.generation.get(), g);
                        assert_eq!(rank(a.phase()), 1, "a replaced session is closing");
                        reached.replaced += 1;
                        m.retired.insert(g);
                        m.replacements.push(seq);
                    }
                    Err(_) => {
                        reached.refused_51 += 1;
                        let after: HashMap<ActorId, (u64, u64)> = a
                            .bound()
                            .map(|b| {
                                (
                                    b.actor.clone(),
                                    (b.generation.get(), b.object_generation.get()),
                                )
                            })
                            .collect();
                        assert_eq!(before, after, "a refused 51 changed the bindings");
                        assert_eq!(rank(a.phase()), phase_before);
                    }
                }
            }
            // a replaced-callback terminal
            7 => {
                if let Some(&seq) = m.replacements.get(usize::from(x) % 4) {
                    let _ = a.callback_finished(now, seq);
                }
            }
            // time passes, the close timer fires
            8 => {
                now += Duration::from_millis(u64::from(x) * 20 + u64::from(y) * 200);
                if a.poll_seal_timeout().is_some_and(|due| due <= now)
                    && a.handle_seal_timeouts(now).closed.is_some()
                {
                    // a seal past its timeout closes the session (SB-8.6)
                    assert_eq!(rank(a.phase()), 2);
                }
                if let Some(due) = a.poll_timeout()
                    && due <= now
                {
                    for &seq in &m.replacements {
                        if a.handle_timeout(now, seq).is_some() {
                            // closed; its bindings end with the connection (disconnect)
                            assert_eq!(rank(a.phase()), 2);
                            reached.closed_by_timer += 1;
                        }
                    }
                }
            }
            // unbind through a handle
            9 => {
                let g = match before.get(&actor(i)) {
                    Some(&(g, _)) if x % 2 == 0 => g,
                    _ => u64::from(y),
                };
                if let Ok(b) = a.remove(&actor(i), BindingGeneration::new(g)) {
                    assert_eq!(before.get(&actor(i)).map(|b| b.0), Some(g));
                    assert_eq!(b.generation.get(), g);
                    m.retired.insert(g);
                }
            }
            // NotifyDisconnected begins / its callback ends
            10 => {
                if let Some(&(g, _)) = before.get(&actor(i))
                    && a.begin_notify(&actor(i), BindingGeneration::new(g)).is_ok()
                {
                    m.notifying.entry(i).or_default().insert(g);
                }
            }
            11 => {
                if let Some(&g) = m.notifying.get(&i).and_then(|n| n.iter().next()) {
                    a.finish_notify(&actor(i), BindingGeneration::new(g));
                    m.notifying.get_mut(&i).map(|n| n.remove(&g));
                    m.retired.insert(g);
                }
            }
            // the connection ends
            12 => {
                let snapshot = a.disconnect();
                let mut seen = HashSet::new();
                for b in &snapshot {
                    assert!(
                        seen.insert(b.actor.clone()),
                        "one actor twice in the snapshot"
                    );
                    assert_eq!(
                        before.get(&b.actor).map(|x| x.0),
                        Some(b.generation.get()),
                        "the snapshot is the current bindings"
                    );
                    m.retired.insert(b.generation.get());
                }
                for n in m.notifying.values() {
                    m.retired.extend(n.iter().copied());
                }
                m.notifying.clear();
                assert_eq!(rank(a.phase()), 2);
                assert!(!a.accepts_packets());
                m.disconnected = true;
            }
            // 42: a relocation seal of a binding (its current generation, or any)
            14 => {
                let (g, og) = match before.get(&actor(i)) {
                    Some(&(g, og)) if x % 3 != 0 => (g, og),
                    _ => (u64::from(y), u64::from(x % 3) + 1),
                };
                let relocation = u64::from(y % 3) + 1;
                let rec = SessionRelocationSeal {
                    seal: SealIdentity {
                        relocation: RelocationId::new(relocation),
                        session_lifecycle: identity().lifecycle,
                        session: identity().session,
                        binding_generation: BindingGeneration::new(g),
                    },
                    actor: actor(i),
                    object_generation: ObjectGeneration::new(og),
                    deadline: Deadline::from_millis(3_000),
                };
                let sender = rid(if x % 8 == 7 { "c" } else { "b" });
                if a.handle_seal(now, (&sender, NodeGeneration::new(11)), &rec)
                    .is_ok()
                {
                    assert!(phase_before < 2, "a closed session installed a seal");
                    assert_eq!(
                        before.get(&actor(i)),
                        Some(&(g, og)),
                        "a seal of a binding that is not current"
                    );
                    assert!(a.is_sealed(&actor(i)));
                    reached.sealed += 1;
                    m.seals.insert(i, (relocation, g));
                }
            }
            // a relay of a sealed binding is held
            15 => {
                let g = match before.get(&actor(i)) {
                    Some(&(g, _)) if x % 2 == 0 => g,
                    _ => u64::from(y),
                };
                let held = HeldRelay::one_way(DispatchKey::new(1), Bytes::new());
                if a.hold_relay(&actor(i), BindingGeneration::new(g), held)
                    .is_ok()
                {
                    assert_eq!(before.get(&actor(i)).map(|b| b.0), Some(g));
                }
            }
            // 44: commit or abort (of the installed seal, or late / foreign)
            16 => {
                let (relocation, g) = match m.seals.get(&i) {
                    Some(&(r, g)) if y % 3 != 0 => (r, g),
                    _ => (u64::from(y % 3) + 1, u64::from(x)),
                };
                let og = before.get(&actor(i)).map_or(1, |b| b.1);
                let rec = if x % 2 == 0 {
                    SessionRelocationRoute::Commit(RouteCommit {
                        relocation: RelocationId::new(relocation),
                        actor: actor(i),
                        object_generation: ObjectGeneration::new(og),
                        target: ActorLocation {
                            node: rid("c"),
                            ..location(12)
                        },
                        session_lifecycle: identity().lifecycle,
                        session: identity().session,
                        binding_generation: BindingGeneration::new(g),
                    })
                } else {
                    SessionRelocationRoute::Abort(RouteAbort {
                        seal: SealIdentity {
                            relocation: RelocationId::new(relocation),
                            session_lifecycle: identity().lifecycle,
                            session: identity().session,
                            binding_generation: BindingGeneration::new(g),
                        },
                        action: AbortAction::ResubmitToSource,
                    })
                };
                let was = routes(&a);
                match a.handle_route(&rec) {
                    Ok(RouteApplied::Committed(b)) => {
                        // spec: SB-8.7 — the route switches, the binding identity stays
                        assert_eq!(b.actor, actor(i));
                        assert_eq!(b.generation.get(), g);
                        assert_eq!(b.route.node.as_str(), "c");
                        reached.committed += 1;
                        let after = routes(&a);
                        assert_eq!(was.len(), after.len());
                        for (w, n) in was.iter().zip(&after) {
                            assert_eq!((&w.0, w.1, w.2), (&n.0, n.1, n.2));
                            if w.0 != actor(i) {
                                assert_eq!(w.3, n.3, "a commit moved another binding");
                            }
                        }
                    }
                    Ok(RouteApplied::Aborted(b)) => {
                        assert_eq!(b.generation.get(), g);
                        assert_eq!(was, routes(&a), "an abort changed a binding");
                    }
                    Err(_) => {
                        reached.refused_44 += 1;
                        // spec: SB-8.4 — a late, duplicate or foreign 44 changes nothing
                        assert_eq!(was, routes(&a), "a refused 44 changed a binding");
                    }
                }
            }
            // the held relays of a released seal, in order
            17 => {
                for _ in 0..300 {
                    match a.next_released(now, &actor(i)) {
                        Released::Send(ticket, _) => {
                            assert_eq!(ticket.binding.actor, actor(i));
                            assert_eq!(
                                m.seals.get(&i).map(|s| s.1),
                                Some(ticket.binding.generation.get()),
                                "a held relay released through another binding than its seal's"
                            );
                            assert!(
                                a.find(&actor(i))
                                    .is_some_and(|b| b.generation == ticket.binding.generation),
                                "a held relay released through a binding that is not current"
                            );
                        }
                        Released::Expired(_) => {}
                        Released::Done => break,
                    }
                }
            }
            // relay through the current binding by id
            _ => {
                let id = actor(i);
                let out = a.find(&id).map(|b| b.generation).map(|g| a.relay(&id, g));
                match (before.get(&actor(i)), out) {
                    (None, None) => {}
                    (Some(&(g, _)), Some(Ok(t))) => {
                        assert!(phase_before < 2);
                        assert_eq!(t.binding.generation.get(), g);
                    }
                    (Some(_), Some(Err(_))) => assert_eq!(phase_before, 2),
                    (b, out) => panic!("find then relay {b:?} gave {:?}", out.is_some()),
                }
            }
        }
        // after every input
        let phase = rank(a.phase());
        assert!(phase >= phase_before, "the phase went back");
        let mut actors = HashSet::new();
        let mut count = 0;
        for b in a.bound() {
            count += 1;
            assert!(
                actors.insert(b.actor.clone()),
                "two current bindings of one actor"
            );
            assert!(
                !m.retired.contains(&b.generation.get()),
                "a retired generation is current"
            );
        }
        assert!(count <= LIMIT, "{count} bindings past the limit {LIMIT}");
        if m.disconnected {
            assert_eq!(count, 0, "a disconnected session holds bindings");
        }
        assert_eq!(a.accepts_packets(), phase == 0);
    }
    reached
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated input sequences: 4-byte inputs, the input kind drawn with weights (binds and
    /// their terminals often, a disconnect rarely, so sequences get deep), from a fixed
    /// xorshift stream.
    pub(super) fn generated(n: usize) -> impl Iterator<Item = Vec<u8>> {
        // weights of inputs 0..=17 (see `aggregate_ops`)
        const W: [u32; 18] = [14, 14, 6, 6, 3, 2, 8, 5, 6, 3, 2, 2, 1, 4, 6, 3, 6, 3];
        let total: u32 = W.iter().sum();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n).map(move |_| {
            let inputs = 4 + next() % 60;
            let mut data = Vec::with_capacity(inputs as usize * 4);
            for _ in 0..inputs {
                let mut pick = (next() % u64::from(total)) as u32;
                let mut op = 0u8;
                for (k, w) in W.iter().enumerate() {
                    if pick < *w {
                        op = k as u8;
                        break;
                    }
                    pick -= w;
                }
                let r = next();
                data.extend_from_slice(&[op, (r % 2) as u8, (r >> 8) as u8, (r >> 16) as u8]);
            }
            data
        })
    }

    /// The committed corpus, then 20,000 generated sequences, as in every `cargo test`
    /// (`scripts/fuzz --all` runs the target itself); the generated ones reach every kind of
    /// input that changes the session.
    #[test]
    fn the_session_aggregate_harness_holds_over_the_corpus_and_generated_sequences() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/session_aggregate");
        let mut corpus = 0;
        for entry in std::fs::read_dir(&dir).expect("committed corpus") {
            let data = std::fs::read(entry.expect("entry").path()).expect("read");
            aggregate_ops(&data);
            corpus += 1;
        }
        assert!(
            corpus >= 8,
            "the committed corpus is there ({corpus} inputs)"
        );
        let mut total = Reached::default();
        for data in generated(20_000) {
            let r = aggregate_ops(&data);
            total.bound += r.bound;
            total.replaced += r.replaced;
            total.refused_51 += r.refused_51;
            total.closed_by_timer += r.closed_by_timer;
            total.sealed += r.sealed;
            total.committed += r.committed;
            total.refused_44 += r.refused_44;
            total.pushes += r.pushes;
        }
        let t = total;
        assert!(
            t.bound > 0 && t.replaced > 0 && t.refused_51 > 0 && t.closed_by_timer > 0,
            "{t:?}"
        );
        assert!(
            t.sealed > 0 && t.committed > 0 && t.refused_44 > 0 && t.pushes > 0,
            "{t:?}"
        );
    }

    /// Found by this harness (regression): a 51 for a binding of a session already closed by
    /// its replacement timer, but not yet disconnected, was refused (`SessionClosed`) after it
    /// had removed the binding; a refused 51 changes nothing (SB-6.6).
    #[test]
    fn a_51_for_a_closed_session_changes_nothing() {
        let r = aggregate_ops(&[
            0, 0, 0, 0, 1, 0, 0, 0, // bind actor 0
            0, 1, 0, 0, 1, 1, 0, 0, // bind actor 1
            6, 0, 0, 0, // 51 for actor 0: closing
            7, 0, 0, 0, // its callback's terminal
            8, 0, 10, 0, // 200 ms: closed by the timer
            6, 1, 0, 0, // 51 for actor 1's current binding: refused, nothing changes
        ]);
        assert_eq!(
            (r.bound, r.replaced, r.closed_by_timer, r.refused_51),
            (2, 1, 1, 1)
        );
    }

    /// Found by this harness (regression): after a 44 for a seal, a rebind of the actor (a new
    /// incarnation) while its held relays were still to be released sent them through the new
    /// binding; and a 44 abort of a seal whose binding was rebound applied to the new binding.
    /// Held relays only ever go through the binding they were held for (SB-4.1).
    #[test]
    fn held_relays_never_go_through_a_newer_binding() {
        let commit_then_rebind = [
            0, 0, 0, 0, 1, 0, 0, 0, // bind actor 0 (generation 1)
            14, 0, 1, 1, // 42: seal generation 1 (relocation 2)
            15, 0, 0, 0, // a relay held
            16, 0, 0, 1, // 44 commit: releasing
            0, 0, 1, 0, 1, 0, 0, 0, // rebind actor 0, incarnation 2 (generation 2)
            17, 0, 0, 0, // release: never through generation 2
        ];
        let r = aggregate_ops(&commit_then_rebind);
        assert_eq!((r.sealed, r.committed, r.bound), (1, 1, 2), "{r:?}");
        let rebind_then_abort = [
            0, 0, 0, 0, 1, 0, 0, 0, // bind actor 0 (generation 1)
            14, 0, 1, 1, // seal generation 1
            0, 0, 1, 0, 1, 0, 0, 0, // rebind (generation 2)
            16, 0, 1, 1, // 44 abort of the generation-1 seal: refused, nothing changes
            17, 0, 0, 0,
        ];
        let r = aggregate_ops(&rebind_then_abort);
        assert_eq!((r.sealed, r.bound, r.refused_44), (1, 2, 1), "{r:?}");
    }

    /// The harness can fail: a sequence whose 51 names the current binding closes the session;
    /// the model sees the retired generation (a probe of the checks themselves).
    #[test]
    fn a_replacement_sequence_retires_the_binding() {
        // begin(actor 0, og 1) → complete(ours, ok) → replaced(current) → relay(current)
        let r = aggregate_ops(&[0, 0, 0, 0, 1, 0, 0, 0, 6, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!((r.bound, r.replaced), (1, 1), "{r:?}");
    }
}
