//! Sans-IO mesh handshake: HMAC-SHA256 challenge-response over the mesh secret.
//!
//! One [`Handshake`] runs per physical connection (relay and completion separately). It holds
//! no socket, no clock and no RNG: nonces and `now` come from the driver.
//!
//! ```text
//! initiator                                   acceptor
//!   Hello{mesh, node_i, gen_i, nonce_i}  ─────▶
//!                                        ◀───── Challenge{mesh, node_a, gen_a, nonce_a, proof_a}
//!   (verify proof_a)
//!   Proof{proof_i}                       ─────▶ (verify proof_i)
//!                                        ◀───── Welcome            (or Reject{reason})
//! ```
//!
//! `proof_x = HMAC-SHA256(secret, label_x ‖ link ‖ conn ‖ mesh ‖ node_i ‖ gen_i ‖ nonce_i ‖
//! node_a ‖ gen_a ‖ nonce_a)` with distinct labels for the two directions, so neither proof can
//! be reflected, the link kind bound in, so a relay proof cannot be replayed on a completion
//! connection, and `conn`, the routing id the initiator's connection announced (fresh and
//! random per outgoing connection), so a proof is bound to the connection it was made on: the
//! acceptor attributes records to the routing id that proved itself, and only to it. Both
//! sides prove knowledge of the secret before any record is accepted.
//!
//! Call order for a driver: `handle_*` for every inbound handshake message, then drain
//! [`Handshake::poll_transmit`] and read [`Handshake::poll_outcome`]; call
//! [`Handshake::handle_timeout`] when [`Handshake::poll_timeout`] has passed.
//!
//! Invariants: an outcome is produced at most once; after it, every input is ignored.

use std::time::{Duration, Instant};

use std::sync::Arc;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::codec::{HandshakeMsg, HandshakeReject};
use crate::types::{LinkKind, MeshName, NodeGeneration, NodeRid};

type HmacSha256 = Hmac<Sha256>;

/// A mesh secret (shared key). Its `Debug` never prints the key.
///
/// One allocation behind an `Arc`: clones (one per handshake) share it, nothing copies the key,
/// and the bytes are zeroed when the last clone is dropped.
#[derive(Clone)]
pub struct MeshSecret(Arc<Zeroizing<Vec<u8>>>);

impl MeshSecret {
    /// Fewest key bytes accepted. The acceptor answers any Hello with an HMAC under the key, so
    /// a stranger can test guesses offline: the key must be long and random
    /// ([`MeshSecret::generate`], or 32 bytes from `/dev/urandom` as `scripts/mesh-up` writes).
    pub const MIN_LEN: usize = 32;

    /// Wraps key bytes; at least [`MeshSecret::MIN_LEN`] bytes are required.
    pub fn new(key: impl Into<Vec<u8>>) -> Result<Self, crate::error::ConfigError> {
        let key = Zeroizing::new(key.into());
        if key.len() < Self::MIN_LEN {
            return Err(crate::error::ConfigError::SecretTooShort);
        }
        Ok(Self(Arc::new(key)))
    }

    /// A fresh key of [`MeshSecret::MIN_LEN`] bytes from the operating system's random source.
    pub fn generate() -> Self {
        let mut key = Zeroizing::new(vec![0u8; Self::MIN_LEN]);
        rand::rngs::OsRng.fill_bytes(&mut key);
        Self(Arc::new(key))
    }

    /// The fixed, public key used in insecure dev mode (the handshake still runs, proves nothing).
    pub(crate) fn insecure_dev() -> Self {
        Self(Arc::new(Zeroizing::new(
            b"zlink-insecure-dev-mode-key".to_vec(),
        )))
    }
}

impl std::fmt::Debug for MeshSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MeshSecret(..)")
    }
}

/// The local side's identity and key for a handshake.
#[derive(Clone, Debug)]
pub struct LocalIdentity {
    /// The mesh this node belongs to.
    pub mesh: MeshName,
    /// This node's routing id.
    pub node: NodeRid,
    /// This process' generation.
    pub generation: NodeGeneration,
    /// The shared key.
    pub secret: MeshSecret,
}

/// The authenticated identity of the remote side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The peer's routing id (proved).
    pub node: NodeRid,
    /// The peer's process generation (proved).
    pub generation: NodeGeneration,
}

/// Why a handshake failed (closed vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeFailure {
    /// The peer announced a different MeshName.
    WrongMesh,
    /// A proof did not verify (wrong secret or tampering).
    BadProof,
    /// An unexpected message for the current state.
    Protocol,
    /// The peer rejected us with the given reason.
    RejectedByPeer(HandshakeReject),
    /// No answer within the handshake timeout.
    Timeout,
    /// The peer claimed a NodeRid different from the one expected for this connection.
    RidMismatch,
}

/// Result of a finished handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Both sides proved the secret.
    Established(PeerIdentity),
    /// The handshake failed; the connection must not carry records.
    Failed(HandshakeFailure),
}

#[derive(Debug)]
enum State {
    /// Initiator: Hello queued or sent, waiting for Challenge.
    AwaitChallenge { nonce_i: [u8; 32] },
    /// Initiator: Proof sent, waiting for Welcome.
    AwaitWelcome { peer: PeerIdentity },
    /// Acceptor: waiting for Hello.
    AwaitHello { nonce_a: [u8; 32] },
    /// Acceptor: Challenge sent, waiting for Proof.
    AwaitProof {
        peer: PeerIdentity,
        nonce_i: [u8; 32],
        nonce_a: [u8; 32],
    },
    /// Terminal.
    Done,
}

/// One connection's handshake (either role).
#[derive(Debug)]
pub struct Handshake {
    local: LocalIdentity,
    link: LinkKind,
    conn: Vec<u8>,
    expected_peer: Option<NodeRid>,
    state: State,
    transmit: Vec<HandshakeMsg>,
    outcome: Option<Outcome>,
    deadline: Instant,
}

const LABEL_ACCEPTOR: &[u8] = b"zlink-mesh-v2 acceptor";
const LABEL_INITIATOR: &[u8] = b"zlink-mesh-v2 initiator";

impl Handshake {
    /// Starts the initiating side: queues Hello.
    ///
    /// `conn` is the routing id this connection announced to the acceptor (bound into both
    /// proofs); `expected_peer`, when known, is the NodeRid the acceptor must prove.
    pub fn initiator(
        local: LocalIdentity,
        link: LinkKind,
        conn: &[u8],
        expected_peer: Option<NodeRid>,
        nonce_i: [u8; 32],
        now: Instant,
        timeout: Duration,
    ) -> Self {
        let hello = HandshakeMsg::Hello {
            mesh: local.mesh.clone(),
            node: local.node.clone(),
            generation: local.generation,
            nonce: nonce_i,
        };
        Self {
            local,
            link,
            conn: conn.to_vec(),
            expected_peer,
            state: State::AwaitChallenge { nonce_i },
            transmit: vec![hello],
            outcome: None,
            deadline: now + timeout,
        }
    }

    /// Starts the accepting side. `conn` is the routing id the connection presented (bound
    /// into both proofs); `claimed_rid`, when set, is the NodeRid the initiator must claim.
    pub fn acceptor(
        local: LocalIdentity,
        link: LinkKind,
        conn: &[u8],
        claimed_rid: Option<NodeRid>,
        nonce_a: [u8; 32],
        now: Instant,
        timeout: Duration,
    ) -> Self {
        Self {
            local,
            link,
            conn: conn.to_vec(),
            expected_peer: claimed_rid,
            state: State::AwaitHello { nonce_a },
            transmit: Vec::new(),
            outcome: None,
            deadline: now + timeout,
        }
    }

    /// Feeds one inbound handshake message.
    pub fn handle_message(&mut self, msg: HandshakeMsg, now: Instant) {
        if self.outcome.is_some() {
            return;
        }
        if now >= self.deadline {
            self.fail(HandshakeFailure::Timeout, None);
            return;
        }
        let state = std::mem::replace(&mut self.state, State::Done);
        match (state, msg) {
            (
                State::AwaitHello { nonce_a },
                HandshakeMsg::Hello {
                    mesh,
                    node,
                    generation,
                    nonce,
                },
            ) => {
                if let Some((failure, reject)) = self.claim_failure(&mesh, &node) {
                    return self.fail(failure, Some(reject));
                }
                let peer = PeerIdentity { node, generation };
                let proof = self.proof(LABEL_ACCEPTOR, &peer, &nonce, &nonce_a, true);
                self.transmit.push(HandshakeMsg::Challenge {
                    mesh: self.local.mesh.clone(),
                    node: self.local.node.clone(),
                    generation: self.local.generation,
                    nonce: nonce_a,
                    proof,
                });
                self.state = State::AwaitProof {
                    peer,
                    nonce_i: nonce,
                    nonce_a,
                };
            }
            (
                State::AwaitChallenge { nonce_i },
                HandshakeMsg::Challenge {
                    mesh,
                    node,
                    generation,
                    nonce,
                    proof,
                },
            ) => {
                if let Some((failure, reject)) = self.claim_failure(&mesh, &node) {
                    return self.fail(failure, Some(reject));
                }
                let peer = PeerIdentity { node, generation };
                if !self.verify(LABEL_ACCEPTOR, &peer, &nonce_i, &nonce, false, &proof) {
                    return self.fail(HandshakeFailure::BadProof, Some(HandshakeReject::BadProof));
                }
                let mine = self.proof(LABEL_INITIATOR, &peer, &nonce_i, &nonce, false);
                self.transmit.push(HandshakeMsg::Proof { proof: mine });
                self.state = State::AwaitWelcome { peer };
            }
            (
                State::AwaitProof {
                    peer,
                    nonce_i,
                    nonce_a,
                },
                HandshakeMsg::Proof { proof },
            ) => {
                if !self.verify(LABEL_INITIATOR, &peer, &nonce_i, &nonce_a, true, &proof) {
                    return self.fail(HandshakeFailure::BadProof, Some(HandshakeReject::BadProof));
                }
                self.transmit.push(HandshakeMsg::Welcome);
                self.outcome = Some(Outcome::Established(peer));
            }
            (State::AwaitWelcome { peer }, HandshakeMsg::Welcome) => {
                self.outcome = Some(Outcome::Established(peer));
            }
            (_, HandshakeMsg::Reject { reason }) => {
                self.fail(HandshakeFailure::RejectedByPeer(reason), None);
            }
            (_, _) => self.fail(HandshakeFailure::Protocol, Some(HandshakeReject::Protocol)),
        }
    }

    /// Fails the handshake if its deadline has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.outcome.is_none() && now >= self.deadline {
            self.fail(HandshakeFailure::Timeout, None);
        }
    }

    /// The instant at which [`Handshake::handle_timeout`] must be called, while unfinished.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.outcome.is_none().then_some(self.deadline)
    }

    /// Next message to send, if any.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<HandshakeMsg> {
        if self.transmit.is_empty() {
            None
        } else {
            Some(self.transmit.remove(0))
        }
    }

    /// The outcome, once finished (returned every time it is asked).
    #[must_use]
    pub fn poll_outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    fn fail(&mut self, why: HandshakeFailure, reject: Option<HandshakeReject>) {
        self.state = State::Done;
        if let Some(reason) = reject {
            self.transmit.push(HandshakeMsg::Reject { reason });
        }
        self.outcome = Some(Outcome::Failed(why));
    }

    /// `local_is_acceptor` fixes who is "initiator" in the transcript.
    fn mac(
        &self,
        label: &[u8],
        peer: &PeerIdentity,
        nonce_i: &[u8; 32],
        nonce_a: &[u8; 32],
        local_is_acceptor: bool,
    ) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.local.secret.0).expect("HMAC accepts any key length");
        let (ni, gi, na, ga) = if local_is_acceptor {
            (
                &peer.node,
                peer.generation,
                &self.local.node,
                self.local.generation,
            )
        } else {
            (
                &self.local.node,
                self.local.generation,
                &peer.node,
                peer.generation,
            )
        };
        let mut put = |b: &[u8]| {
            mac.update(&(b.len() as u32).to_be_bytes());
            mac.update(b);
        };
        put(label);
        put(&[self.link as u8]);
        put(&self.conn);
        put(self.local.mesh.as_str().as_bytes());
        put(ni.as_str().as_bytes());
        put(&gi.get().to_be_bytes());
        put(nonce_i);
        put(na.as_str().as_bytes());
        put(&ga.get().to_be_bytes());
        put(nonce_a);
        mac
    }

    /// Why the peer's claimed identity is refused before any proof is checked: another mesh,
    /// or (on the dialling side) not the node this connection was opened for.
    fn claim_failure(
        &self,
        mesh: &MeshName,
        node: &NodeRid,
    ) -> Option<(HandshakeFailure, HandshakeReject)> {
        if *mesh != self.local.mesh {
            return Some((HandshakeFailure::WrongMesh, HandshakeReject::WrongMesh));
        }
        if self.expected_peer.as_ref().is_some_and(|e| e != node) {
            return Some((HandshakeFailure::RidMismatch, HandshakeReject::Protocol));
        }
        None
    }

    fn proof(
        &self,
        label: &[u8],
        peer: &PeerIdentity,
        nonce_i: &[u8; 32],
        nonce_a: &[u8; 32],
        local_is_acceptor: bool,
    ) -> [u8; 32] {
        self.mac(label, peer, nonce_i, nonce_a, local_is_acceptor)
            .finalize()
            .into_bytes()
            .into()
    }

    fn verify(
        &self,
        label: &[u8],
        peer: &PeerIdentity,
        nonce_i: &[u8; 32],
        nonce_a: &[u8; 32],
        local_is_acceptor: bool,
        proof: &[u8; 32],
    ) -> bool {
        self.mac(label, peer, nonce_i, nonce_a, local_is_acceptor)
            .verify_slice(proof)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(node: &str, generation: u64, key: &[u8]) -> LocalIdentity {
        LocalIdentity {
            mesh: MeshName::new("m").unwrap(),
            node: NodeRid::new(node).unwrap(),
            generation: NodeGeneration::new(generation),
            secret: MeshSecret::new(key.to_vec()).unwrap(),
        }
    }

    /// Runs both sides to completion, shuttling messages.
    fn run(mut i: Handshake, mut a: Handshake, now: Instant) -> (Handshake, Handshake) {
        for _ in 0..8 {
            while let Some(m) = i.poll_transmit() {
                a.handle_message(m, now);
            }
            while let Some(m) = a.poll_transmit() {
                i.handle_message(m, now);
            }
        }
        (i, a)
    }

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const CONN: &[u8] = b"conn-1";

    #[test]
    fn secrets_are_long_and_generated_keys_differ() {
        assert!(MeshSecret::new(vec![7u8; MeshSecret::MIN_LEN - 1]).is_err());
        assert!(MeshSecret::new(vec![7u8; MeshSecret::MIN_LEN]).is_ok());
        let (a, b) = (MeshSecret::generate(), MeshSecret::generate());
        assert_eq!(a.0.len(), MeshSecret::MIN_LEN);
        assert_ne!(a.0.as_slice(), b.0.as_slice());
        assert_eq!(format!("{a:?}"), "MeshSecret(..)");
    }

    // spec: SB-2.1 — a proof is bound to the connection's routing id: an acceptor that sees
    // another routing id than the one the initiator announced rejects the proof.
    #[test]
    fn proof_is_bound_to_the_connection() {
        let now = Instant::now();
        let t = Duration::from_secs(1);
        let i = Handshake::initiator(
            ident("a", 1, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [1; 32],
            now,
            t,
        );
        let a = Handshake::acceptor(
            ident("b", 2, KEY),
            LinkKind::Relay,
            b"conn-2",
            None,
            [2; 32],
            now,
            t,
        );
        let (i, _a) = run(i, a, now);
        assert_eq!(
            i.poll_outcome(),
            Some(&Outcome::Failed(HandshakeFailure::BadProof))
        );
    }

    // spec: SB-2.1 (peer RID and generation authenticated at the transport boundary)
    #[test]
    fn both_sides_establish_with_same_secret() {
        let now = Instant::now();
        let t = Duration::from_secs(1);
        let i = Handshake::initiator(
            ident("a", 1, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [1; 32],
            now,
            t,
        );
        let a = Handshake::acceptor(
            ident("b", 2, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [2; 32],
            now,
            t,
        );
        let (i, a) = run(i, a, now);
        assert_eq!(
            i.poll_outcome(),
            Some(&Outcome::Established(PeerIdentity {
                node: NodeRid::new("b").unwrap(),
                generation: NodeGeneration::new(2)
            }))
        );
        assert_eq!(
            a.poll_outcome(),
            Some(&Outcome::Established(PeerIdentity {
                node: NodeRid::new("a").unwrap(),
                generation: NodeGeneration::new(1)
            }))
        );
    }

    #[test]
    fn wrong_secret_fails_on_both_sides() {
        let now = Instant::now();
        let t = Duration::from_secs(1);
        let i = Handshake::initiator(
            ident("a", 1, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [1; 32],
            now,
            t,
        );
        let a = Handshake::acceptor(
            ident("b", 2, b"another-secret-of-32-bytes-length"),
            LinkKind::Relay,
            CONN,
            None,
            [2; 32],
            now,
            t,
        );
        let (i, a) = run(i, a, now);
        assert_eq!(
            i.poll_outcome(),
            Some(&Outcome::Failed(HandshakeFailure::BadProof))
        );
        assert!(matches!(a.poll_outcome(), Some(Outcome::Failed(_))));
    }

    #[test]
    fn proof_is_bound_to_link_kind() {
        let now = Instant::now();
        let t = Duration::from_secs(1);
        let i = Handshake::initiator(
            ident("a", 1, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [1; 32],
            now,
            t,
        );
        let a = Handshake::acceptor(
            ident("b", 2, KEY),
            LinkKind::Completion,
            CONN,
            None,
            [2; 32],
            now,
            t,
        );
        let (i, _a) = run(i, a, now);
        assert_eq!(
            i.poll_outcome(),
            Some(&Outcome::Failed(HandshakeFailure::BadProof))
        );
    }

    #[test]
    fn wrong_mesh_and_rid_mismatch_and_timeout() {
        let now = Instant::now();
        let t = Duration::from_secs(1);
        let mut other = ident("a", 1, KEY);
        other.mesh = MeshName::new("other").unwrap();
        let i = Handshake::initiator(other, LinkKind::Relay, CONN, None, [1; 32], now, t);
        let a = Handshake::acceptor(
            ident("b", 2, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [2; 32],
            now,
            t,
        );
        let (_, a) = run(i, a, now);
        assert_eq!(
            a.poll_outcome(),
            Some(&Outcome::Failed(HandshakeFailure::WrongMesh))
        );

        let i = Handshake::initiator(
            ident("a", 1, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [1; 32],
            now,
            t,
        );
        let a = Handshake::acceptor(
            ident("b", 2, KEY),
            LinkKind::Relay,
            CONN,
            Some(NodeRid::new("z").unwrap()),
            [2; 32],
            now,
            t,
        );
        let (_, a) = run(i, a, now);
        assert_eq!(
            a.poll_outcome(),
            Some(&Outcome::Failed(HandshakeFailure::RidMismatch))
        );

        let mut i = Handshake::initiator(
            ident("a", 1, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [1; 32],
            now,
            t,
        );
        assert_eq!(i.poll_timeout(), Some(now + t));
        i.handle_timeout(now + t);
        assert_eq!(
            i.poll_outcome(),
            Some(&Outcome::Failed(HandshakeFailure::Timeout))
        );
        assert_eq!(i.poll_timeout(), None);
    }

    #[test]
    fn unexpected_message_is_protocol_failure() {
        let now = Instant::now();
        let mut a = Handshake::acceptor(
            ident("b", 2, KEY),
            LinkKind::Relay,
            CONN,
            None,
            [2; 32],
            now,
            Duration::from_secs(1),
        );
        a.handle_message(HandshakeMsg::Proof { proof: [0; 32] }, now);
        assert_eq!(
            a.poll_outcome(),
            Some(&Outcome::Failed(HandshakeFailure::Protocol))
        );
        assert!(matches!(
            a.poll_transmit(),
            Some(HandshakeMsg::Reject { .. })
        ));
    }
}
