//! The state shared by the API handles and the I/O thread: the peer and client registries,
//! counters, peer events, the doorbell and the size checks of what is submitted.

use crate::hashing::FastMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::broadcast;

use crate::bridge::Bell;
use crate::counters::Counters;
use crate::engine::Command;
use crate::error::SendError;
use crate::outbox::SendBudget;
use crate::types::NodeRid;
use crate::{events::*, outbox::*, reply::*};

/// State shared by the API handles and the I/O thread.
pub(crate) struct Shared {
    pub bell: Bell<Command>,
    pub(super) peers: RwLock<FastMap<NodeRid, PeerSlot>>,
    pub(super) clients: RwLock<FastMap<u64, Arc<SendBudget>>>,
    pub counters: Counters,
    pub(super) next_corr: AtomicU64,
    pub(super) events: broadcast::Sender<PeerEvent>,
    /// [`MeshNode::take_client_events`] was called.
    pub(super) client_events_taken: AtomicBool,
    pub(super) closed: AtomicBool,
    pub(super) max_message_size: usize,
    pub(super) send_timeout: Duration,
    /// Credit released by the layer above ([`MeshNode::release_credit`]) and not yet taken by
    /// the I/O thread: one command per burst, not per record.
    pub released: std::sync::Mutex<Vec<Released>>,
}

impl Shared {
    /// A `Shared` with no node behind it (its doorbell goes nowhere): for the unit tests of
    /// the I/O thread's sans-IO parts.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Arc<Self> {
        let ctx = zmq::Context::new();
        let (bell, _door) = crate::bridge::pair(&ctx).expect("doorbell");
        Arc::new(Shared {
            bell,
            peers: RwLock::new(FastMap::default()),
            clients: RwLock::new(FastMap::default()),
            counters: Counters::default(),
            next_corr: AtomicU64::new(1),
            events: broadcast::channel(16).0,
            client_events_taken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            max_message_size: 1 << 20,
            send_timeout: Duration::from_secs(1),
            released: std::sync::Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn peer_slot(&self, node: &NodeRid) -> Option<PeerSlot> {
        self.peers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
    }

    /// Runs `f` on `node`'s slot under the read lock (no clone of the slot).
    pub(crate) fn with_peer<R>(&self, node: &NodeRid, f: impl FnOnce(&PeerSlot) -> R) -> Option<R> {
        self.peers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .map(f)
    }

    pub(crate) fn set_peer(&self, node: NodeRid, slot: Option<PeerSlot>) {
        let mut g = self.peers.write().unwrap_or_else(|e| e.into_inner());
        match slot {
            Some(s) => g.insert(node, s),
            None => g.remove(&node),
        };
    }

    pub(crate) fn client_budget(&self, session: u64) -> Option<Arc<SendBudget>> {
        self.clients
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&session)
            .cloned()
    }

    pub(crate) fn set_client(&self, session: u64, budget: Option<Arc<SendBudget>>) {
        let mut g = self.clients.write().unwrap_or_else(|e| e.into_inner());
        match budget {
            Some(b) => g.insert(session, b),
            None => g.remove(&session),
        };
    }

    pub(crate) fn publish(&self, e: PeerEvent) {
        let _ = self.events.send(e);
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn submit(&self, cmd: Command) -> Result<(), SendError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed);
        }
        self.bell.submit(cmd).map_err(|_| SendError::Closed)
    }

    /// [`Shared::check_size`] for parts of these lengths.
    pub(super) fn check_lens(
        &self,
        envelope: usize,
        payload: Option<usize>,
    ) -> Result<u64, SendError> {
        let mut total = 0u64;
        for len in std::iter::once(envelope).chain(payload) {
            if len > self.max_message_size {
                return Err(SendError::TooLarge {
                    size: len,
                    max: self.max_message_size,
                });
            }
            total += len as u64;
        }
        Ok(total)
    }

    pub(super) fn check_size(&self, frames: &[Bytes]) -> Result<u64, SendError> {
        let mut total = 0u64;
        for f in frames {
            if f.len() > self.max_message_size {
                return Err(SendError::TooLarge {
                    size: f.len(),
                    max: self.max_message_size,
                });
            }
            total += f.len() as u64;
        }
        Ok(total)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}
