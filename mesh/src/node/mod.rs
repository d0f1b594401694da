//! The node-facing API: [`MeshNode`] (start, connect, send, request), the inbound stream
//! ([`Inbound`] with its [`ReplyHandle`]) and peer events.
//!
//! Call order for a node binary: [`MeshNode::start`] → keep the returned
//! [`InboundReceiver`] and read it in a task → [`MeshNode::connect`] to peers →
//! [`MeshNode::wait_peer_up`] (or [`MeshNode::subscribe`]) → `send`/`request`/`push` →
//! [`MeshNode::shutdown`].

use crate::hashing::FastMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::broadcast;

use crate::codec::Record;
use crate::config::{MeshConfig, PeerAddress};
use crate::counters::Counters;
use crate::engine::{Command, Engine};
use crate::error::{ConfigError, SendError};
use crate::handshake::{LocalIdentity, MeshSecret};
use crate::types::{NodeGeneration, NodeRid, SessionRid, fresh_generation};
use crate::{events::*, inbound::*, reply::*};

mod send;
mod shared;
#[cfg(test)]
mod tests;

pub(crate) use shared::Shared;

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The reply record.
    pub record: Record,
    /// Its payload.
    pub payload: Option<Bytes>,
}

/// Endpoints actually bound (ephemeral ports resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundEndpoints {
    /// Relay ROUTER.
    pub relay: String,
    /// Completion ROUTER.
    pub completion: String,
    /// ClientServer ROUTER, if configured.
    pub client: Option<String>,
}

/// A running mesh node. Dropping it shuts the I/O thread down (without waiting).
pub struct MeshNode {
    shared: Arc<Shared>,
    node: NodeRid,
    generation: NodeGeneration,
    endpoints: BoundEndpoints,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for MeshNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshNode")
            .field("node", &self.node)
            .field("generation", &self.generation)
            .field("endpoints", &self.endpoints)
            .finish()
    }
}

impl MeshNode {
    /// Creates the sockets, binds them and starts the I/O thread.
    ///
    /// # Errors
    /// [`ConfigError::MissingSecret`] without a secret unless `insecure_dev_mode`; transport
    /// setup errors (bind failures).
    pub fn start(cfg: MeshConfig) -> Result<(MeshNode, InboundReceiver), ConfigError> {
        let secret = match (&cfg.secret, cfg.insecure_dev_mode) {
            (Some(s), _) => s.clone(),
            (None, true) => {
                tracing::warn!(node = %cfg.node, "mesh started in INSECURE dev mode");
                MeshSecret::insecure_dev()
            }
            (None, false) => return Err(ConfigError::MissingSecret),
        };
        if cfg.inbound_capacity == 0 {
            return Err(ConfigError::InvalidLimit("inbound_capacity"));
        }
        if cfg.peer_budget.messages == 0 || cfg.client_budget.messages == 0 {
            return Err(ConfigError::InvalidLimit("budget messages"));
        }
        if cfg.client_window.messages == 0 || cfg.client_window.bytes == 0 {
            return Err(ConfigError::InvalidLimit("client_window"));
        }
        if let crate::config::ClientAdmission::OnAccept(s) = cfg.client_admission
            && (s.window.messages == 0
                || s.window.bytes == 0
                || s.window.messages > cfg.client_window.messages
                || s.window.bytes > cfg.client_window.bytes)
        {
            return Err(ConfigError::InvalidLimit("client_admission window"));
        }
        if cfg.batching.max_records > zlink_wire::MAX_BATCH_RECORDS as usize {
            return Err(ConfigError::InvalidLimit("batching.max_records"));
        }
        if cfg.client_outbound.batch_records > zlink_wire::MAX_BATCH_RECORDS as usize {
            return Err(ConfigError::InvalidLimit("client_outbound.batch_records"));
        }
        let generation = cfg.generation.unwrap_or_else(fresh_generation);
        let local = LocalIdentity {
            mesh: cfg.mesh.clone(),
            node: cfg.node.clone(),
            generation,
            secret,
        };
        let ctx = zmq::Context::new();
        let (bell, door) = crate::bridge::pair(&ctx).map_err(|source| ConfigError::Transport {
            what: "doorbell".into(),
            source,
        })?;
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            bell,
            peers: RwLock::new(FastMap::default()),
            clients: RwLock::new(FastMap::default()),
            counters: Counters::default(),
            next_corr: AtomicU64::new(1),
            events,
            client_events_taken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            max_message_size: cfg.transport.max_message_size,
            send_timeout: cfg.send_timeout,
            released: std::sync::Mutex::new(Vec::new()),
        });
        let (tx, rx) = crate::inbound::channel(cfg.inbound_capacity);
        let node = cfg.node.clone();
        let (engine, bound) = Engine::new(ctx, door, shared.clone(), cfg, local, tx)?;
        let thread = std::thread::Builder::new()
            .name(format!("zlink-mesh-{node}"))
            .spawn(move || engine.run())
            .map_err(ConfigError::Thread)?;
        Ok((
            MeshNode {
                shared,
                node,
                generation,
                endpoints: BoundEndpoints {
                    relay: bound.relay,
                    completion: bound.completion,
                    client: bound.client,
                },
                thread: Some(thread),
            },
            rx,
        ))
    }

    /// This node's routing id.
    pub fn node(&self) -> &NodeRid {
        &self.node
    }

    /// This process' generation.
    pub fn generation(&self) -> NodeGeneration {
        self.generation
    }

    /// The bound endpoints.
    pub fn endpoints(&self) -> &BoundEndpoints {
        &self.endpoints
    }

    /// The address other nodes use to connect to this one.
    pub fn address(&self) -> PeerAddress {
        PeerAddress {
            node: self.node.clone(),
            relay: self.endpoints.relay.clone(),
            completion: self.endpoints.completion.clone(),
        }
    }

    /// Drop and event counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Subscribes to peer/client lifecycle events.
    pub fn subscribe(&self) -> broadcast::Receiver<PeerEvent> {
        self.shared.events.subscribe()
    }

    /// Takes the lossless stream of ClientServer session events (once: `None` after the first
    /// call). Take it right after [`MeshNode::start`]: the channel exists only once taken
    /// (nothing accumulates for nobody), and sessions that are live when the I/O thread gets
    /// it are announced first with a `Connected` each (their earlier records may already have
    /// gone up). From then on every session gets `Connected` before any of its records is
    /// handed to the [`InboundReceiver`] and `Disconnected` after the last of them. The
    /// [`PeerEvent`] broadcast keeps carrying `ClientConnected`/`ClientDisconnected` too
    /// (lossy for slow subscribers).
    pub fn take_client_events(&self) -> Option<ClientEvents> {
        if self.shared.client_events_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        // After shutdown the sender is dropped here: the stream ends at once.
        let _ = self.shared.submit(Command::ClientEvents(tx));
        Some(ClientEvents { rx })
    }

    /// Closes a ClientServer session with `reason`; returns at once. On the I/O thread, in
    /// this order: what is already queued for the client (pushes, replies admitted before this
    /// call) is transmitted first (FIFO; if the client is PAUSED this waits, at most the peer
    /// timeout, after which the rest is dropped and counted `PeerLost`); then the client gets a
    /// 149 Disconnect { `reason` }; then the session is removed (budget released, maps
    /// cleaned), its routing id tombstoned (a later record on that connection is dropped as
    /// `DropReason::SessionClosed` and answered with Disconnect { `reason` } again) and
    /// `ClientEvent::Disconnected { cause: ClientCloseCause::Closed(reason) }` plus
    /// `PeerEvent::ClientDisconnected` are published. From this call on, pushes to the session
    /// fail `Unavailable` and records it sends are dropped (`SessionClosed`).
    ///
    /// Closing an unknown or already closed (or closing) session is a no-op: `Ok(())`.
    ///
    /// # Errors
    /// [`SendError::Closed`] after the node shut down.
    pub fn close_client(
        &self,
        session: SessionRid,
        reason: zlink_wire::DisconnectReason,
    ) -> Result<(), SendError> {
        self.shared.submit(Command::CloseClient {
            session: session.get(),
            reason,
        })
    }

    /// Admits a ClientServer session ([`crate::ClientAdmission::OnAccept`]): the node's session
    /// layer calls it when its connected/authenticate callback accepts the session. Until
    /// then the session is a stranger (a small window, counted against the strangers' bounds,
    /// [`crate::Strangers`]); from now on it has the full `client_window` (the difference is
    /// granted to the client with a FlowCredit) and no longer counts as a stranger.
    ///
    /// Accepting an unknown, ended or already accepted session, or any session with
    /// [`crate::ClientAdmission::Open`], is a no-op: `Ok(())`.
    ///
    /// # Errors
    /// [`SendError::Closed`] after the node shut down.
    pub fn accept_client(&self, session: SessionRid) -> Result<(), SendError> {
        self.shared.submit(Command::AcceptClient {
            session: session.get(),
        })
    }

    /// Installs the direct-delivery sink ([`InboundSink`](crate::InboundSink)): from the I/O thread's next pass on,
    /// every application record is offered to it before the inbound channel. Install it before
    /// records arrive (right after [`MeshNode::start`]): records already in the channel are
    /// not offered again.
    ///
    /// # Errors
    /// [`SendError::Closed`] after the node shut down.
    pub fn set_sink(&self, sink: Box<dyn crate::sink::InboundSink>) -> Result<(), SendError> {
        self.shared.submit(Command::SetSink(sink))
    }

    /// Returns the receive-window credit of a record the sink took with
    /// [`Offer::Held`](crate::Offer::Held): `origin` and `bytes` as it was offered. Credit of a
    /// peer lifecycle or a session that ended meanwhile is ignored.
    pub fn release_credit(&self, origin: Origin, bytes: u64) {
        self.release_credits(origin, 1, bytes);
    }

    /// [`MeshNode::release_credit`] for `records` records of `bytes` bytes in total, all from
    /// `origin` (a run of held records that left the layer above together: one entry for the
    /// I/O thread instead of one per record).
    pub fn release_credits(&self, origin: Origin, records: u32, bytes: u64) {
        if records == 0 {
            return;
        }
        let first = {
            let mut released = self
                .shared
                .released
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            released.push(Released {
                origin,
                records,
                bytes,
            });
            released.len() == 1
        };
        if first {
            // The I/O thread takes everything released until it handles this command.
            let _ = self.shared.submit(Command::ReleaseCredit);
        }
    }

    /// The current generation of `node` if it is up.
    pub fn peer_generation(&self, node: &NodeRid) -> Option<NodeGeneration> {
        self.shared.with_peer(node, |s| s.generation)
    }

    /// Connects to a peer (idempotent per address); the handshake runs in the background and
    /// re-runs after every reconnect. Connect in one direction per pair of nodes.
    pub fn connect(&self, peer: PeerAddress) -> Result<(), SendError> {
        self.shared.submit(Command::Connect(peer))
    }

    /// Waits until `node` is up (any generation other than `not`), at most `timeout`.
    pub async fn wait_peer_up(
        &self,
        node: &NodeRid,
        not: Option<NodeGeneration>,
        timeout: Duration,
    ) -> Option<NodeGeneration> {
        let mut events = self.subscribe();
        let fits = |g: NodeGeneration| not != Some(g);
        if let Some(g) = self.peer_generation(node).filter(|g| fits(*g)) {
            return Some(g);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Err(_) => return self.peer_generation(node).filter(|g| fits(*g)),
                Ok(Ok(PeerEvent::Up {
                    node: n,
                    generation,
                })) if n == *node && fits(generation) => return Some(generation),
                Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                Ok(_) => {
                    if let Some(g) = self.peer_generation(node).filter(|g| fits(*g)) {
                        return Some(g);
                    }
                }
            }
        }
    }

    /// **For tests only.** Holds this node's I/O thread until the returned guard is dropped
    /// (also on panic; at most 60 s): every command submitted after this call — sends,
    /// replies (`ReplyHandle::reply` never blocks, the command channel is unbounded), flushes
    /// — is handled only after the release, in one pass, so a test can make the I/O thread
    /// find several of them queued together (e.g. to see them batched). Sockets are neither
    /// read nor written while held; keep the hold short (peers time out after
    /// `peer_timeout`). Returns once the thread is held (what it received before was handled
    /// first); blocks the caller for that long (at most 20 s).
    #[cfg(feature = "testing")]
    pub fn hold_io_for_tests(&self) -> IoHold {
        let (release, held_rx) = crossbeam_channel::bounded(0);
        let (held, is_held) = crossbeam_channel::bounded(1);
        let _ = self.shared.submit(Command::Hold {
            release: held_rx,
            held,
        });
        let _ = is_held.recv_timeout(std::time::Duration::from_secs(20));
        IoHold { _release: release }
    }

    /// **For tests only.** Stops the I/O thread like a crashed process and waits for it: no
    /// peer or client is told (no Disconnect, nothing queued is flushed), so they see the
    /// connection drop, as after `kill -9`.
    #[cfg(feature = "testing")]
    pub async fn abort_for_tests(mut self) {
        let _ = self.shared.bell.submit(Command::Abort);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }

    /// Stops the I/O thread and waits for it. Peers get a Disconnect; clients get what is
    /// queued for them (best effort, without waiting) and a Disconnect { `Shutdown` }, and each
    /// live session reports `ClientEvent::Disconnected { cause: Shutdown }`.
    pub async fn shutdown(mut self) {
        let _ = self.shared.bell.submit(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

/// Guard of [`MeshNode::hold_io_for_tests`] (tests only): dropping it releases the I/O thread.
#[cfg(feature = "testing")]
#[derive(Debug)]
#[must_use = "the I/O thread is released when the hold is dropped"]
pub struct IoHold {
    _release: crossbeam_channel::Sender<()>,
}

impl Drop for MeshNode {
    fn drop(&mut self) {
        let _ = self.shared.bell.submit(Command::Shutdown);
    }
}
