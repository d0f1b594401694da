//! What the mesh tells the node about its peers and client sessions: [`PeerEvent`] (with its
//! [`DownReason`]) and [`ClientEvent`] (lossless, [`ClientEvents`]).

use crate::types::{NodeGeneration, NodeRid, SessionRid};

/// Why a peer lifecycle ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DownReason {
    /// No traffic within the peer timeout.
    Timeout,
    /// Our outbound connection was closed by libzmq (heartbeat, peer exit …).
    Disconnected,
    /// The peer announced a Disconnect (graceful shutdown).
    Remote,
    /// The peer re-ran the handshake (reconnect of the same process).
    Reconnected,
    /// The peer restarted: a new NodeGeneration began a new lifecycle.
    Restarted,
}

/// Peer and client lifecycle events (bounded broadcast; a slow subscriber loses old events
/// and never slows the I/O thread, EG-13).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerEvent {
    /// Both connections of the peer completed the handshake.
    Up {
        /// Peer.
        node: NodeRid,
        /// Its generation.
        generation: NodeGeneration,
    },
    /// The peer lifecycle ended; its in-flight requests ended with `PeerLost`.
    Down {
        /// Peer.
        node: NodeRid,
        /// The generation that ended.
        generation: NodeGeneration,
        /// Why.
        reason: DownReason,
    },
    /// A ClientServer client sent its first record.
    ClientConnected {
        /// Its session id.
        session: SessionRid,
    },
    /// A client said Disconnect or stayed silent past the peer timeout.
    ClientDisconnected {
        /// Its session id.
        session: SessionRid,
    },
}

/// Who ended a ClientServer session ([`ClientEvent::Disconnected`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientCloseCause {
    /// The client ended it: it said Disconnect (149) itself, or its connection closed.
    Remote,
    /// The client was silent for longer than the peer timeout; it was sent
    /// Disconnect { `Timeout` }.
    Timeout,
    /// [`MeshNode::close_client`](crate::MeshNode::close_client) closed it; the client was sent
    /// Disconnect with this reason.
    Closed(zlink_wire::DisconnectReason),
    /// The node shut down; the client was sent Disconnect { `Shutdown` }.
    Shutdown,
}

impl ClientCloseCause {
    /// The reason a 149 Disconnect to the client carries for this cause (`None` for
    /// `Remote`: the client ended it and is not told).
    pub fn disconnect_reason(self) -> Option<zlink_wire::DisconnectReason> {
        use zlink_wire::DisconnectReason as R;
        match self {
            ClientCloseCause::Remote => None,
            ClientCloseCause::Timeout => Some(R::Timeout),
            ClientCloseCause::Closed(r) => Some(r),
            ClientCloseCause::Shutdown => Some(R::Shutdown),
        }
    }
}

/// The lifecycle of one ClientServer session, delivered losslessly on [`ClientEvents`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// A session began (the connection's first record). Sent before any record of the
    /// session is handed to the [`InboundReceiver`](crate::InboundReceiver).
    Connected {
        /// The session.
        session: SessionRid,
    },
    /// A session ended. Sent after the last record of the session was handed to the
    /// [`InboundReceiver`](crate::InboundReceiver) (records held while the application queue was
    /// full go up first).
    Disconnected {
        /// The session.
        session: SessionRid,
        /// Who ended it.
        cause: ClientCloseCause,
    },
}

/// The lossless stream of [`ClientEvent`]s
/// ([`MeshNode::take_client_events`](crate::MeshNode::take_client_events)).
///
/// Unbounded, which is bounded in practice by the session count: each session produces at
/// most two events (Connected, Disconnected) and live sessions are bounded by
/// `MeshConfig::max_clients`, so the backlog is at most two events per session that began
/// since the reader last read. Ends (`None`) after the node shut down and every event was
/// read. Dropping it stops the events (they are not kept for anyone).
#[derive(Debug)]
pub struct ClientEvents {
    pub(crate) rx: tokio::sync::mpsc::UnboundedReceiver<ClientEvent>,
}

impl ClientEvents {
    /// The next event, in the order the I/O thread produced them; `None` once the node has
    /// shut down and everything was read.
    pub async fn recv(&mut self) -> Option<ClientEvent> {
        self.rx.recv().await
    }

    /// The next event if one is ready.
    ///
    /// # Errors
    /// `Empty` if none is ready, `Disconnected` once the node has shut down and everything
    /// was read.
    pub fn try_recv(&mut self) -> Result<ClientEvent, tokio::sync::mpsc::error::TryRecvError> {
        self.rx.try_recv()
    }
}
