//! Connections other nodes opened to us (relay and completion), keyed by the routing id each
//! connection announced: handshakes in progress and routing ids that proved themselves.
//!
//! An initiator announces a fresh random routing id per outgoing connection and binds it into
//! the HMAC transcript (`handshake.rs`). The acceptor keeps a handshake per routing id here,
//! apart from the peer table, so a Hello changes nothing about any peer: only a completed
//! handshake maps a routing id to a node ([`Accepts::prove`]), and records are attributed to
//! a node only when they come from the routing id that proved itself. Routing ids are chosen
//! by strangers: the maps use a randomly seeded hasher, and the handshakes in progress are
//! bounded (`MeshConfig::max_pending_handshakes`).

use std::collections::hash_map::Entry;

use crate::hashing::SeededMap as HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::handshake::Handshake;
use crate::types::{LinkKind, NodeRid};

/// Handshakes in progress and proved routing ids of accepted relay/completion connections.
#[derive(Debug)]
pub(crate) struct Accepts {
    pending: [HashMap<Vec<u8>, Pending>; 2],
    proved: [HashMap<Vec<u8>, Arc<NodeRid>>; 2],
    /// Handshakes in progress per source address.
    by_source: HashMap<Arc<str>, usize>,
    cap: usize,
    cap_per_source: usize,
}

/// A handshake in progress and the source address it counts against.
#[derive(Debug)]
struct Pending {
    hs: Box<Handshake>,
    source: Option<Arc<str>>,
}

/// Why a Hello starts no handshake.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// `max_pending_handshakes` in progress.
    Total,
    /// `max_pending_handshakes_per_source` in progress from this source address.
    Source,
}

fn index(kind: LinkKind) -> usize {
    usize::from(kind != LinkKind::Relay)
}

impl Accepts {
    /// At most `cap` handshakes in progress (both link kinds together), `cap_per_source` from
    /// one source address.
    pub(crate) fn new(cap: usize, cap_per_source: usize) -> Self {
        Self {
            pending: Default::default(),
            proved: Default::default(),
            by_source: HashMap::default(),
            cap,
            cap_per_source,
        }
    }

    /// Handshakes in progress.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.iter().map(HashMap::len).sum()
    }

    /// Starts (or restarts: same routing id) a handshake on an accepted connection from
    /// `source` (its peer address, when known).
    pub(crate) fn start(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        source: Option<Arc<str>>,
        hs: Handshake,
    ) -> Result<&mut Handshake, Full> {
        if let Some(mut old) = self.pending[index(kind)].remove(rid) {
            // A new Hello on the same connection replaces its handshake (same slot).
            old.hs = Box::new(hs);
            let slot = match self.pending[index(kind)].entry(rid.to_vec()) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(old),
            };
            return Ok(&mut slot.hs);
        }
        if self.pending_len() >= self.cap {
            return Err(Full::Total);
        }
        if let Some(src) = &source {
            let n = self.by_source.entry(src.clone()).or_insert(0);
            if *n >= self.cap_per_source {
                return Err(Full::Source);
            }
            *n += 1;
        }
        let slot = match self.pending[index(kind)].entry(rid.to_vec()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(Pending {
                hs: Box::new(hs),
                source,
            }),
        };
        Ok(&mut slot.hs)
    }

    fn release(&mut self, source: Option<Arc<str>>) {
        if let Some(src) = source
            && let Some(n) = self.by_source.get_mut(&src)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_source.remove(&src);
            }
        }
    }

    /// The handshake in progress on this connection.
    pub(crate) fn pending_mut(&mut self, kind: LinkKind, rid: &[u8]) -> Option<&mut Handshake> {
        self.pending[index(kind)].get_mut(rid).map(|p| &mut *p.hs)
    }

    /// Ends the handshake in progress on this connection.
    pub(crate) fn finish(&mut self, kind: LinkKind, rid: &[u8]) -> Option<Box<Handshake>> {
        let p = self.pending[index(kind)].remove(rid)?;
        self.release(p.source);
        Some(p.hs)
    }

    /// The connection proved to be `node`: its records are attributed to `node` from now on,
    /// and the routing id `node` proved before on this link kind is forgotten.
    pub(crate) fn prove(&mut self, kind: LinkKind, rid: &[u8], node: Arc<NodeRid>) {
        self.proved[index(kind)].retain(|r, n| **n != *node || r.as_slice() == rid);
        self.proved[index(kind)].insert(rid.to_vec(), node);
    }

    /// The node that proved itself on this connection.
    pub(crate) fn proved(&self, kind: LinkKind, rid: &[u8]) -> Option<&Arc<NodeRid>> {
        self.proved[index(kind)].get(rid)
    }

    /// Handshakes whose deadline passed: handed their timeout and removed.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<(LinkKind, Box<Handshake>)> {
        let mut out = Vec::new();
        for kind in [LinkKind::Relay, LinkKind::Completion] {
            let due: Vec<Vec<u8>> = self.pending[index(kind)]
                .iter()
                .filter(|(_, p)| p.hs.poll_timeout().is_some_and(|t| t <= now))
                .map(|(r, _)| r.clone())
                .collect();
            for r in due {
                if let Some(mut hs) = self.finish(kind, &r) {
                    hs.handle_timeout(now);
                    out.push((kind, hs));
                }
            }
        }
        out
    }

    /// The earliest deadline of a handshake in progress.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.pending
            .iter()
            .flat_map(HashMap::values)
            .filter_map(|p| p.hs.poll_timeout())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::handshake::{LocalIdentity, MeshSecret};
    use crate::types::{MeshName, NodeGeneration};

    fn hs(now: Instant) -> Handshake {
        let local = LocalIdentity {
            mesh: MeshName::new("m").unwrap(),
            node: NodeRid::new("me").unwrap(),
            generation: NodeGeneration::new(1),
            secret: MeshSecret::new(vec![1u8; 32]).unwrap(),
        };
        Handshake::acceptor(
            local,
            LinkKind::Relay,
            b"r",
            None,
            [0; 32],
            now,
            Duration::from_secs(1),
        )
    }

    // spec: SB-2.1 — handshakes of strangers are bounded in total and per source address; a
    // Hello again on the same connection takes no new slot; an ended handshake frees its slot.
    #[test]
    fn pending_handshakes_are_bounded_in_total_and_per_source() {
        let now = Instant::now();
        let mut a = Accepts::new(3, 2);
        let src = |s: &str| Some(Arc::<str>::from(s));
        assert!(
            a.start(LinkKind::Relay, b"r1", src("10.0.0.1"), hs(now))
                .is_ok()
        );
        assert!(
            a.start(LinkKind::Relay, b"r2", src("10.0.0.1"), hs(now))
                .is_ok()
        );
        assert_eq!(
            a.start(LinkKind::Relay, b"r3", src("10.0.0.1"), hs(now))
                .err(),
            Some(Full::Source)
        );
        // The same connection restarts its handshake in its slot.
        assert!(
            a.start(LinkKind::Relay, b"r2", src("10.0.0.1"), hs(now))
                .is_ok()
        );
        assert!(
            a.start(LinkKind::Completion, b"r1", src("10.0.0.2"), hs(now))
                .is_ok()
        );
        assert_eq!(a.pending_len(), 3);
        assert_eq!(
            a.start(LinkKind::Relay, b"r4", src("10.0.0.3"), hs(now))
                .err(),
            Some(Full::Total)
        );
        // Ending one frees its slot and its source's count.
        assert!(a.finish(LinkKind::Relay, b"r1").is_some());
        assert!(
            a.start(LinkKind::Relay, b"r5", src("10.0.0.1"), hs(now))
                .is_ok()
        );
        // Expired handshakes are handed out with their timeout and free their slots.
        assert_eq!(a.poll_timeout(), Some(now + Duration::from_secs(1)));
        let expired = a.expire(now + Duration::from_secs(1));
        assert_eq!(expired.len(), 3);
        assert!(expired.iter().all(|(_, h)| matches!(
            h.poll_outcome(),
            Some(crate::handshake::Outcome::Failed(
                crate::handshake::HandshakeFailure::Timeout
            ))
        )));
        assert_eq!(a.pending_len(), 0);
        assert!(a.by_source.is_empty());
    }

    // Only the routing id proved last speaks for a node on a link kind.
    #[test]
    fn a_node_is_proved_by_one_routing_id_per_link() {
        let mut a = Accepts::new(1, 1);
        let node = Arc::new(NodeRid::new("peer").unwrap());
        a.prove(LinkKind::Relay, b"old", node.clone());
        a.prove(LinkKind::Completion, b"c", node.clone());
        a.prove(LinkKind::Relay, b"new", node.clone());
        assert!(a.proved(LinkKind::Relay, b"old").is_none());
        assert_eq!(a.proved(LinkKind::Relay, b"new"), Some(&node));
        assert_eq!(a.proved(LinkKind::Completion, b"c"), Some(&node));
        assert!(a.proved(LinkKind::Completion, b"new").is_none());
    }
}
