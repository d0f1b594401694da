//! The body of the `handshake` fuzz target (`mesh/fuzz/fuzz_targets/handshake.rs`), kept in the
//! crate so that it runs as a normal test over the committed corpus and generated inputs
//! (docs/RELIABILITY.md).
//!
//! [`handshake_transcript`] plays one connection's handshake between an honest initiator and
//! an honest acceptor ([`Handshake`], the real sans-IO core) while the input, read as a list of
//! operations, decides what reaches each side: the honest peer's next message, a message of
//! attacker bytes (decoded by the wire codec like any received frame), a tampered copy of an
//! honest message (one byte of its encoded frame changed), or time passing.
//!
//! Properties checked after every operation:
//! - nothing panics, and an outcome once produced never changes;
//! - the acceptor is `Established` only if a Proof the honest initiator made reached it
//!   unchanged, and then with the initiator's identity; the initiator only if the honest
//!   acceptor's Challenge reached it unchanged, with the acceptor's identity — attacker bytes
//!   or a tampered message never authenticate anyone.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_wire::{CorrelationId, Limits};

use crate::codec::HandshakeMsg;
use crate::handshake::{Handshake, LocalIdentity, MeshSecret, Outcome, PeerIdentity};
use crate::types::{LinkKind, MeshName, NodeGeneration, NodeRid};

/// Operations of a transcript (the input's bytes, each taken modulo this count).
const OPS: u8 = 7;

struct Side {
    hs: Handshake,
    /// What the honest other side sent, not yet delivered.
    inbox: VecDeque<HandshakeMsg>,
    /// Every message the honest other side produced.
    honest_log: Vec<HandshakeMsg>,
    /// An unchanged honest message that authenticates the other side (Proof to the acceptor,
    /// Challenge to the initiator) was delivered.
    authenticated: bool,
    outcome: Option<Outcome>,
    peer: PeerIdentity,
}

impl Side {
    fn deliver(&mut self, msg: HandshakeMsg, now: Instant) {
        let honest = self.honest_log.contains(&msg);
        if honest
            && matches!(
                msg,
                HandshakeMsg::Proof { .. } | HandshakeMsg::Challenge { .. }
            )
        {
            self.authenticated = true;
        }
        self.hs.handle_message(msg, now);
    }

    fn check(&mut self, who: &str) {
        let now = self.hs.poll_outcome().cloned();
        if let Some(before) = &self.outcome {
            assert_eq!(
                Some(before),
                now.as_ref(),
                "{who}: an outcome never changes"
            );
        }
        if let Some(Outcome::Established(peer)) = &now {
            assert!(
                self.authenticated,
                "{who}: established without the honest peer's proof"
            );
            assert_eq!(
                peer, &self.peer,
                "{who}: established with the wrong identity"
            );
        }
        self.outcome = now;
    }
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
}

fn identity(node: &str, generation: u64) -> LocalIdentity {
    LocalIdentity {
        mesh: MeshName::new("fuzz").expect("valid"),
        node: NodeRid::new(node).expect("valid"),
        generation: NodeGeneration::new(generation),
        secret: MeshSecret::new([7u8; 32]).expect("32 bytes"),
    }
}

fn decode_msg(bytes: &[u8]) -> Option<HandshakeMsg> {
    let decoded = zlink_wire::decode(&[Bytes::copy_from_slice(bytes)], &Limits::DEFAULT).ok()?;
    HandshakeMsg::from_record(decoded.record)
}

fn tamper(msg: HandshakeMsg, at: u8, xor: u8) -> Option<HandshakeMsg> {
    let frames = zlink_wire::encode(&msg.into_record(), CorrelationId::NONE, None).ok()?;
    let mut bytes = frames.envelope().to_vec();
    let i = usize::from(at) % bytes.len();
    bytes[i] ^= xor | 1;
    decode_msg(&bytes)
}

/// Plays the transcript `data` (see the module docs); returns the initiator's and the
/// acceptor's outcomes.
///
/// # Panics
/// Only if a property of the module docs does not hold.
pub fn handshake_transcript(data: &[u8]) -> [Option<Outcome>; 2] {
    let t0 = Instant::now();
    let timeout = Duration::from_secs(5);
    let (ini, acc) = (identity("initiator", 2), identity("acceptor", 1));
    let peer_of = |l: &LocalIdentity| PeerIdentity {
        node: l.node.clone(),
        generation: l.generation,
    };
    let conn = b"\x00conn-7";
    let mut i = Side {
        peer: peer_of(&acc),
        hs: Handshake::initiator(
            ini.clone(),
            LinkKind::Relay,
            conn,
            Some(acc.node.clone()),
            [1; 32],
            t0,
            timeout,
        ),
        inbox: VecDeque::new(),
        honest_log: Vec::new(),
        authenticated: false,
        outcome: None,
    };
    let mut a = Side {
        peer: peer_of(&ini),
        hs: Handshake::acceptor(acc, LinkKind::Relay, conn, None, [2; 32], t0, timeout),
        inbox: VecDeque::new(),
        honest_log: Vec::new(),
        authenticated: false,
        outcome: None,
    };
    let mut now = t0;
    let mut input = Cursor(data);
    loop {
        // What each honest side sends goes to the other's inbox.
        while let Some(m) = i.hs.poll_transmit() {
            a.honest_log.push(m.clone());
            a.inbox.push_back(m);
        }
        while let Some(m) = a.hs.poll_transmit() {
            i.honest_log.push(m.clone());
            i.inbox.push_back(m);
        }
        i.check("initiator");
        a.check("acceptor");
        let Some(op) = input.byte() else {
            return [i.outcome, a.outcome];
        };
        match op % OPS {
            0 => {
                if let Some(m) = a.inbox.pop_front() {
                    a.deliver(m, now);
                }
            }
            1 => {
                if let Some(m) = i.inbox.pop_front() {
                    i.deliver(m, now);
                }
            }
            op @ (2 | 3) => {
                let n = usize::from(input.byte().unwrap_or(0));
                if let Some(m) = decode_msg(input.take(n)) {
                    if op == 2 { &mut a } else { &mut i }.deliver(m, now);
                }
            }
            4 => {
                now += Duration::from_millis(u64::from(input.byte().unwrap_or(0)) * 50);
                i.hs.handle_timeout(now);
                a.hs.handle_timeout(now);
            }
            op => {
                let side = if op == 5 { &mut a } else { &mut i };
                let (at, xor) = (input.byte().unwrap_or(0), input.byte().unwrap_or(1));
                if let Some(m) = side.inbox.pop_front().and_then(|m| tamper(m, at, xor)) {
                    side.deliver(m, now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_honest_transcript_establishes_both_sides() {
        // Hello → acceptor, Challenge → initiator, Proof → acceptor, Welcome → initiator.
        let [i, a] = handshake_transcript(&[0, 1, 0, 1]);
        assert!(matches!(i, Some(Outcome::Established(p)) if p.node.as_str() == "acceptor"));
        assert!(matches!(a, Some(Outcome::Established(p)) if p.node.as_str() == "initiator"));
        // A tampered Proof fails the acceptor.
        let [_, a] = handshake_transcript(&[0, 1, 5, 20, 3]);
        assert!(matches!(a, Some(Outcome::Failed(_))), "{a:?}");
    }

    #[test]
    fn committed_corpus_runs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/handshake");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).expect("handshake seed corpus exists") {
            let _ = handshake_transcript(&std::fs::read(entry.unwrap().path()).unwrap());
            seen += 1;
        }
        assert!(seen >= 3);
    }

    /// What CI runs of this target besides the corpus: seeded random transcripts (biased to
    /// the honest relays, so the handshakes get far).
    #[test]
    fn generated_transcripts_hold_the_properties() {
        let mut state = 0x5EED_u64;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if r % 3 == 0 {
                        (r >> 8) as u8
                    } else {
                        (r % 2) as u8
                    }
                })
                .collect();
            let _ = handshake_transcript(&data);
        }
    }
}
