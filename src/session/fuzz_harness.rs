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
    ActorId, ActorLocation, AuthorityFence, AuthorityOwnerGeneration, BindSnapshot,
    BindingGeneration, BoundSessionReplaced, BoundSessionSend, DispatchKey, ErrorKind, MeshName,
    NodeGeneration, NodeRid, ObjectGeneration, OwnerId, OwnerLeaseGeneration, PreviousSessionOwner,
    SessionLifecycleGeneration, SessionRid,
};

use super::aggregate::{
    BindCompletion, BindStart, BindTarget, HeldPush, Phase, ReplacedOutcome,
    SessionBindingAggregate, SessionIdentity,
};

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
}

/// Runs one input sequence; panics on a broken invariant.
pub fn aggregate_ops(data: &[u8]) {
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
        let op = r.byte() % 14;
        let i = r.byte() % ACTORS;
        match op {
            // begin a bind of incarnation 1..=3
            0 => {
                let og = u64::from(r.byte() % 3) + 1;
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
                let how = r.byte();
                let (og, g) = match m.pending.get(&i) {
                    Some(&(og, g)) if how % 3 != 1 => (og, g),
                    _ => (1, u64::from(r.byte())),
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
                    Some(&(g, _)) if r.byte() % 2 == 0 => g,
                    _ => u64::from(r.byte()),
                };
                let ok = a.relay(&actor(i), BindingGeneration::new(g)).is_ok();
                let current = before.get(&actor(i)).is_some_and(|b| b.0 == g);
                assert_eq!(ok, current && phase_before < 2, "relay through {g}");
                assert!(!(ok && m.retired.contains(&g)), "a retired handle relayed");
            }
            // a push (36) of some identity
            3 => {
                let how = r.byte();
                let (g, og) = match before.get(&actor(i)) {
                    Some(&(g, og)) if how % 4 != 0 => (g, og),
                    _ => (u64::from(r.byte()), u64::from(how % 3) + 1),
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
                let how = r.byte();
                let g = match before.get(&actor(i)) {
                    Some(&(g, _)) if how % 3 == 0 => g,
                    _ => u64::from(r.byte()),
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
                        m.retired.insert(g);
                        m.replacements.push(seq);
                    }
                    Err(_) => {
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
                if let Some(&seq) = m.replacements.get(usize::from(r.byte()) % 4) {
                    let _ = a.callback_finished(now, seq);
                }
            }
            // time passes, the close timer fires
            8 => {
                now += Duration::from_millis(u64::from(r.byte()) * 20);
                if let Some(due) = a.poll_timeout()
                    && due <= now
                {
                    for &seq in &m.replacements {
                        if a.handle_timeout(now, seq).is_some() {
                            assert_eq!(rank(a.phase()), 2);
                            for (_, (g, _)) in before.iter() {
                                m.retired.insert(*g);
                            }
                        }
                    }
                }
            }
            // unbind through a handle
            9 => {
                let g = match before.get(&actor(i)) {
                    Some(&(g, _)) if r.byte() % 2 == 0 => g,
                    _ => u64::from(r.byte()),
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
        if phase == 2 {
            assert_eq!(count, 0, "a closed session holds bindings");
            assert!(!a.accepts_packets());
        }
        assert_eq!(a.accepts_packets(), phase == 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed corpus, then generated sequences (a fixed xorshift stream), as in every
    /// `cargo test` (`scripts/fuzz` runs the target itself).
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
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let len = 8 + (x % 200) as usize;
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 32) as u8
                })
                .collect();
            aggregate_ops(&data);
        }
    }

    /// The harness can fail: a sequence whose 51 names the current binding closes the session;
    /// the model sees the retired generation (a probe of the checks themselves).
    #[test]
    fn a_replacement_sequence_retires_the_binding() {
        // begin(actor 0, og 1) → complete(ours, ok) → replaced(current) → relay(current)
        aggregate_ops(&[0, 0, 0, 1, 0, 0, 6, 0, 0, 2, 0, 0]);
    }
}
