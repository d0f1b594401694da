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
    pending: [HashMap<Vec<u8>, Box<Handshake>>; 2],
    proved: [HashMap<Vec<u8>, Arc<NodeRid>>; 2],
    cap: usize,
}

/// Too many handshakes in progress; the Hello is ignored.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

fn index(kind: LinkKind) -> usize {
    usize::from(kind != LinkKind::Relay)
}

impl Accepts {
    /// At most `cap` handshakes in progress (both link kinds together).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            pending: Default::default(),
            proved: Default::default(),
            cap,
        }
    }

    /// Handshakes in progress.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.iter().map(HashMap::len).sum()
    }

    /// Starts (or restarts: same routing id) a handshake on an accepted connection.
    pub(crate) fn start(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        hs: Handshake,
    ) -> Result<&mut Handshake, Full> {
        let known = self.pending[index(kind)].contains_key(rid);
        if !known && self.pending_len() >= self.cap {
            return Err(Full);
        }
        let map = &mut self.pending[index(kind)];
        let slot = match map.entry(rid.to_vec()) {
            Entry::Occupied(e) => {
                let slot = e.into_mut();
                **slot = hs;
                slot
            }
            Entry::Vacant(e) => e.insert(Box::new(hs)),
        };
        Ok(&mut **slot)
    }

    /// The handshake in progress on this connection.
    pub(crate) fn pending_mut(&mut self, kind: LinkKind, rid: &[u8]) -> Option<&mut Handshake> {
        self.pending[index(kind)].get_mut(rid).map(|b| &mut **b)
    }

    /// Ends the handshake in progress on this connection.
    pub(crate) fn finish(&mut self, kind: LinkKind, rid: &[u8]) -> Option<Box<Handshake>> {
        self.pending[index(kind)].remove(rid)
    }

    /// The connection proved to be `node`: its records are attributed to `node` from now on.
    /// Returns the routing id `node` proved before on this link kind, now forgotten.
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
            let map = &mut self.pending[index(kind)];
            let due: Vec<Vec<u8>> = map
                .iter()
                .filter(|(_, hs)| hs.poll_timeout().is_some_and(|t| t <= now))
                .map(|(r, _)| r.clone())
                .collect();
            for r in due {
                if let Some(mut hs) = map.remove(&r) {
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
            .filter_map(|hs| hs.poll_timeout())
            .min()
    }
}
