//! [`NodeClient`]: a typed client of the node's ClientServer protocol ([`super::protocol`]).

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use zlink_mesh::{ClientConfig, MeshClient, Push, RequestError};
use zlink_wire::{DisconnectReason, DispatchKey, ErrorKind};

use super::protocol::{
    self, ActorList, CallActor, CreateActor, DestroyActor, GetActor, ListActors, ListSessions,
    NodeCounters, NodeInfo, SessionList,
};
use crate::actor::{ActorRef, Message, SpotSpec};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The node answered with an error reply.
    #[error("{kind}: {detail}")]
    Remote {
        /// Public error kind.
        kind: ErrorKind,
        /// Detail text.
        detail: String,
    },
    /// The request did not complete (deadline, connection, admission).
    #[error("request: {0}")]
    Request(RequestError),
    /// A payload or reply did not (de)serialise.
    #[error("codec: {0}")]
    Codec(String),
    /// The client could not connect.
    #[error("connect: {0}")]
    Connect(#[from] zlink_mesh::ConfigError),
    /// [`NodeClient::packet_send_many`] stopped: the first `sent` packets were sent, the
    /// others were not.
    #[error("after {sent} packets sent: {source}")]
    SendMany {
        /// Packets handed over before the failure (they go out).
        sent: usize,
        /// Why the next one was not sent.
        source: zlink_mesh::SendError,
    },
}

impl ClientError {
    /// The public error kind.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Remote { kind, .. } => *kind,
            ClientError::Request(e) => e.kind(),
            ClientError::Codec(_) => ErrorKind::InvalidOperation,
            ClientError::Connect(_) => ErrorKind::Unavailable,
            ClientError::SendMany { source, .. } => source.kind(),
        }
    }
}

impl From<RequestError> for ClientError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::Remote { kind, detail } => ClientError::Remote { kind, detail },
            other => ClientError::Request(other),
        }
    }
}

fn enc<T: Serialize>(v: &T) -> Result<Bytes, ClientError> {
    rmp_serde::to_vec_named(v)
        .map(Bytes::from)
        .map_err(|e| ClientError::Codec(e.to_string()))
}

fn dec<T: DeserializeOwned>(b: Option<Bytes>) -> Result<T, ClientError> {
    rmp_serde::from_slice(b.as_deref().unwrap_or_default())
        .map_err(|e| ClientError::Codec(e.to_string()))
}

/// Where to create an actor from a client.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Owner node; `None` = the node this client talks to.
    pub node: Option<String>,
    /// Spot; `None` = the owner's Entry Spot.
    pub spot: Option<SpotSpec>,
    /// Factory input.
    pub init: Vec<u8>,
}

impl Placement {
    /// On node `node`.
    #[must_use]
    pub fn on(node: impl Into<String>) -> Self {
        Self {
            node: Some(node.into()),
            ..Self::default()
        }
    }
}

/// A client connected to one node over ClientServer (DEALER → the node's client ROUTER).
#[derive(Debug)]
pub struct NodeClient {
    client: MeshClient,
    timeout: Duration,
}

impl NodeClient {
    /// Connects to `endpoint` (libzmq connects in the background); `timeout` bounds every
    /// request.
    ///
    /// # Errors
    /// [`ClientError::Connect`] when the socket cannot be created.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<Self, ClientError> {
        Ok(Self {
            client: MeshClient::connect(ClientConfig::new(endpoint))?,
            timeout,
        })
    }

    /// Connects with a full client configuration (push channel capacity, libzmq limits, …);
    /// `timeout` bounds every request.
    ///
    /// # Errors
    /// [`ClientError::Connect`] when the socket cannot be created.
    pub fn connect_with(config: ClientConfig, timeout: Duration) -> Result<Self, ClientError> {
        Ok(Self {
            client: MeshClient::connect(config)?,
            timeout,
        })
    }

    /// The underlying mesh client.
    #[must_use]
    pub fn mesh_client(&self) -> &MeshClient {
        &self.client
    }

    async fn call(&self, key: DispatchKey, payload: Bytes) -> Result<Option<Bytes>, ClientError> {
        Ok(self
            .client
            .request(key, payload, self.timeout)
            .await?
            .payload)
    }

    /// Presents the node's operator credential (`AUTHENTICATE`): this session may do every
    /// operation from then on.
    ///
    /// # Errors
    /// `InvalidOperation` for a wrong credential (the node closes the session after a few),
    /// request and codec failures.
    pub async fn authenticate(&self, credential: &[u8]) -> Result<(), ClientError> {
        dec(self
            .call(
                protocol::AUTHENTICATE,
                enc(&protocol::Authenticate {
                    credential: credential.to_vec(),
                })?,
            )
            .await?)
    }

    /// Node identity, peers up, hosted types.
    ///
    /// # Errors
    /// Request and codec failures.
    pub async fn info(&self) -> Result<NodeInfo, ClientError> {
        dec(self.call(protocol::NODE_INFO, enc(&())?).await?)
    }

    /// The node's counters (`COUNTERS`, what its metrics endpoint serves).
    ///
    /// # Errors
    /// Request and codec failures.
    pub async fn counters(&self) -> Result<NodeCounters, ClientError> {
        dec(self.call(protocol::COUNTERS, enc(&())?).await?)
    }

    /// Relocates `actor_id` (owned by the contacted node) to the node `to` (`RELOCATE`,
    /// operator); answers once the relocation ended.
    ///
    /// # Errors
    /// Request and codec failures; the relocation's refusal or failure as a remote error.
    pub async fn relocate(
        &self,
        req: &protocol::RelocateActor,
    ) -> Result<protocol::RelocationDone, ClientError> {
        dec(self.call(protocol::RELOCATE, enc(req)?).await?)
    }

    /// Relocates the Spot `req.spot` (hosted by the contacted node) with every member actor to
    /// the node `req.to` (`RELOCATE_SPOT`, operator); answers once the relocation ended.
    ///
    /// # Errors
    /// Request and codec failures; the relocation's refusal or failure as a remote error.
    pub async fn relocate_spot(
        &self,
        req: &protocol::RelocateSpot,
    ) -> Result<protocol::SpotRelocationDone, ClientError> {
        dec(self.call(protocol::RELOCATE_SPOT, enc(req)?).await?)
    }

    /// The node's relocations and their counters (`LIST_RELOCATIONS`, operator).
    ///
    /// # Errors
    /// Request and codec failures.
    pub async fn relocations(&self) -> Result<protocol::RelocationList, ClientError> {
        dec(self.call(protocol::LIST_RELOCATIONS, enc(&())?).await?)
    }

    /// One page of the node's own actors (`LIST_ACTORS`).
    ///
    /// # Errors
    /// Request and codec failures.
    pub async fn list_actors(&self, req: &ListActors) -> Result<ActorList, ClientError> {
        dec(self.call(protocol::LIST_ACTORS, enc(req)?).await?)
    }

    /// One page of the node's client sessions (`LIST_SESSIONS`).
    ///
    /// # Errors
    /// Request and codec failures.
    pub async fn list_sessions(&self, req: &ListSessions) -> Result<SessionList, ClientError> {
        dec(self.call(protocol::LIST_SESSIONS, enc(req)?).await?)
    }

    fn create_payload(
        actor_type: &str,
        actor_id: &str,
        placement: Placement,
    ) -> Result<Bytes, ClientError> {
        enc(&CreateActor {
            actor_type: actor_type.to_owned(),
            actor_id: actor_id.to_owned(),
            node: placement.node,
            spot: placement.spot,
            init: placement.init,
        })
    }

    /// Creates a new incarnation (`InvalidOperation` if one exists, `NotFound` for an unknown
    /// type).
    ///
    /// # Errors
    /// The node's error reply, request and codec failures.
    pub async fn create(
        &self,
        actor_type: &str,
        actor_id: &str,
        placement: Placement,
    ) -> Result<ActorRef, ClientError> {
        let p = Self::create_payload(actor_type, actor_id, placement)?;
        dec(self.call(protocol::CREATE, p).await?)
    }

    /// Returns the Ready incarnation, creating it if absent.
    ///
    /// # Errors
    /// As [`NodeClient::create`].
    pub async fn get_or_create(
        &self,
        actor_type: &str,
        actor_id: &str,
        placement: Placement,
    ) -> Result<ActorRef, ClientError> {
        let p = Self::create_payload(actor_type, actor_id, placement)?;
        dec(self.call(protocol::GET_OR_CREATE, p).await?)
    }

    /// The Ready ref of `actor_id`.
    ///
    /// # Errors
    /// `NotFound` when none exists.
    pub async fn get(&self, actor_id: &str) -> Result<ActorRef, ClientError> {
        let p = enc(&GetActor {
            actor_id: actor_id.to_owned(),
        })?;
        dec(self.call(protocol::GET, p).await?)
    }

    /// Destroys the incarnation.
    ///
    /// # Errors
    /// `InvalidOperation` for another incarnation, `Unavailable` for a stale ref.
    pub async fn destroy(&self, actor: &ActorRef) -> Result<(), ClientError> {
        let p = enc(&DestroyActor {
            actor: actor.clone(),
        })?;
        dec(self.call(protocol::DESTROY, p).await?)
    }

    fn call_payload<M: Message>(&self, actor: &ActorRef, msg: &M) -> Result<Bytes, ClientError> {
        enc(&CallActor {
            actor: actor.clone(),
            key: M::KEY.get(),
            payload: rmp_serde::to_vec_named(msg).map_err(|e| ClientError::Codec(e.to_string()))?,
            timeout_ms: u32::try_from(self.timeout.as_millis()).unwrap_or(u32::MAX),
        })
    }

    /// A typed request to an actor anywhere in the mesh (the node forwards it to the owner).
    ///
    /// # Errors
    /// The owner's or node's error reply (SB-12 kinds), request and codec failures.
    pub async fn request<M: Message>(
        &self,
        actor: &ActorRef,
        msg: &M,
    ) -> Result<M::Reply, ClientError> {
        let p = self.call_payload(actor, msg)?;
        dec(self.call(protocol::CALL, p).await?)
    }

    /// A typed send (no reply; failures are logged on the nodes).
    ///
    /// # Errors
    /// Admission and codec failures.
    pub async fn send<M: Message>(&self, actor: &ActorRef, msg: &M) -> Result<(), ClientError> {
        let p = self.call_payload(actor, msg)?;
        self.client
            .send(protocol::CALL, p)
            .await
            .map_err(|e| ClientError::Request(RequestError::Send(e)))
    }

    /// Sends a request packet to the node's session handler for `M::KEY` (an application key)
    /// and decodes its reply.
    ///
    /// # Errors
    /// The handler's error reply (`Internal`), `NotFound` for a key without handler,
    /// `Unavailable` when the session is closing or closed, request and codec failures.
    pub async fn packet<M: Message>(&self, msg: &M) -> Result<M::Reply, ClientError> {
        let p = enc(msg)?;
        dec(self.call(M::KEY, p).await?)
    }

    /// Sends a one-way packet to the node's session handler for `M::KEY`.
    ///
    /// # Errors
    /// Admission and codec failures.
    pub async fn packet_send<M: Message>(&self, msg: &M) -> Result<(), ClientError> {
        let p = enc(msg)?;
        self.client
            .send(M::KEY, p)
            .await
            .map_err(|e| ClientError::Request(RequestError::Send(e)))
    }

    /// Sends one-way packets to the node's session handler for `M::KEY`, one per message, in
    /// order: as [`NodeClient::packet_send`] once per message, handed over in chunks
    /// ([`MeshClient::send_many`]) for a fraction of the client's cost per packet.
    ///
    /// # Errors
    /// A codec failure before anything is sent; [`ClientError::SendMany`] with the number of
    /// packets sent when admission fails part-way.
    pub async fn packet_send_many<'m, M: Message + 'm>(
        &self,
        msgs: impl IntoIterator<Item = &'m M>,
    ) -> Result<(), ClientError> {
        let payloads = msgs.into_iter().map(enc).collect::<Result<Vec<_>, _>>()?;
        self.client
            .send_many(M::KEY, payloads)
            .await
            .map_err(|e| ClientError::SendMany {
                sent: e.sent,
                source: e.error,
            })
    }

    /// The next push from the node (a bound actor's push or the session's own), `None` once the
    /// connection is closed and every received push was read.
    pub async fn recv_push(&self) -> Option<Push> {
        self.client.recv_push().await
    }

    /// [`NodeClient::recv_push`] with a timeout.
    pub async fn recv_push_timeout(&self, timeout: Duration) -> Option<Push> {
        self.client.recv_push_timeout(timeout).await
    }

    /// Why the node closed this session, once it has (replaced, timed out, shutting down,
    /// closed by the application, relocation seal timeout).
    #[must_use]
    pub fn close_reason(&self) -> Option<DisconnectReason> {
        self.client.close_reason()
    }

    /// Waits until the node closes this session and returns why.
    pub async fn closed(&self) -> DisconnectReason {
        self.client.closed().await
    }

    /// Says Disconnect and closes.
    pub async fn close(self) {
        self.client.close().await;
    }
}
