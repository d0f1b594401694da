//! Typed messages and handler results.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use zlink_wire::{ActorId, DispatchKey};

use super::error::ActorError;
use super::reference::ActorRef;
pub use crate::runtime::{BoxFuture, Handled, HandlerError};

/// First packet key reserved for the framework (client operations, node control). Application
/// packet keys are `1 ..= RESERVED_KEYS_START - 1`.
pub const RESERVED_KEYS_START: u32 = 0xFFFF_0000;

/// The key of a 36 that asks the session owner to close the bound session's connection
/// (`ActorCtx::close_session`, SB-5.14); checked like a push.
pub const CLOSE_SESSION_KEY: DispatchKey = DispatchKey::new(0xFFFF_FFF0);

/// A message kind an actor type handles: its payload type (`Self`), its reply type and its
/// packet key. Payloads and replies travel as MessagePack (`rmp-serde`, named fields).
pub trait Message: Serialize + DeserializeOwned + Send + 'static {
    /// The packet key that selects the handler (unique per actor type, SB-3.3).
    const KEY: DispatchKey;
    /// The reply of a request (`()` for messages only ever sent).
    type Reply: Serialize + DeserializeOwned + Send + 'static;
}

/// What an actor's handler may ask of the node hosting it: calls to other actors and the
/// bound-session API. The node implements it; actors never see the node itself (the actor room
/// does not reach up into the node room).
pub trait ActorHost: Send + Sync + std::fmt::Debug + 'static {
    /// A request to `actor` (local or remote), its reply bytes; exactly one terminal.
    fn request_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<Result<Bytes, ActorError>>;
    /// A one-way send to `actor`.
    fn send_raw(
        &self,
        actor: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> BoxFuture<Result<(), ActorError>>;
    /// A push (36) from incarnation `me` to its current bound session (`key` =
    /// `session::CLOSE_SESSION_KEY` asks for the connection's close).
    fn push_bound(
        &self,
        me: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> BoxFuture<Result<(), ActorError>>;
    /// [`ActorHost::push_bound`] without waiting and without a future: `Ok` with the push's
    /// outcome when it was decided at once (sent, or refused), `Err` with the payload when it
    /// has to wait (no room yet, or a path that awaits): the caller then awaits
    /// [`ActorHost::push_bound`] with it. The default decides nothing.
    fn try_push_bound(
        &self,
        me: &ActorRef,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<Result<(), ActorError>, Bytes> {
        let _ = (me, key);
        Err(payload)
    }
    /// The Ready ref of `actor_id` from the Location Store (one lookup).
    fn get(&self, actor_id: &ActorId) -> BoxFuture<Result<ActorRef, ActorError>>;
}

/// What a handler sees of its turn: its own ref and a narrow handle to the hosting node (calls
/// to other actors, the bound-session API).
#[derive(Clone, Debug)]
pub struct ActorCtx {
    me: ActorRef,
    host: Arc<dyn ActorHost>,
}

fn encode<T: Serialize>(v: &T) -> Result<Bytes, ActorError> {
    to_bytes(v).map_err(|e| ActorError::Codec(format!("payload: {e}")))
}

/// Bytes of a message body encoded on the stack first: one that fits takes one allocation
/// of exactly its size.
const STACK_ENCODE: usize = 256;

/// `v` as MessagePack (`rmp-serde`, named fields) in a buffer of exactly its size. A value of
/// at most [`STACK_ENCODE`] bytes is encoded on the stack and copied once: one allocation,
/// where encoding into a fresh `Vec` grows it (twice for a small message) and `Bytes::from` of
/// a `Vec` with spare capacity allocates its shared header as well. A larger value is encoded
/// into a `Vec` as before.
///
/// # Errors
/// `rmp-serde`'s, for a value that does not serialize.
pub(crate) fn to_bytes<T: Serialize + ?Sized>(v: &T) -> Result<Bytes, rmp_serde::encode::Error> {
    let mut buf = [0u8; STACK_ENCODE];
    let mut w = &mut buf[..];
    if rmp_serde::encode::write_named(&mut w, v).is_ok() {
        let len = STACK_ENCODE - w.len();
        return Ok(Bytes::copy_from_slice(&buf[..len]));
    }
    // Too large for the stack buffer (or a value that fails: it fails again here, with the
    // error of a full encode).
    rmp_serde::to_vec_named(v).map(Bytes::from)
}

impl ActorCtx {
    pub(crate) fn new(me: ActorRef, host: Arc<dyn ActorHost>) -> Self {
        Self { me, host }
    }

    /// The ref of the actor whose turn this is.
    #[must_use]
    pub fn actor_ref(&self) -> &ActorRef {
        &self.me
    }

    /// A typed request to another actor (local or remote), at most `timeout`.
    ///
    /// # Errors
    /// The SB-12 kinds; [`ActorError::Codec`] when the reply does not decode.
    pub async fn request<M: Message>(
        &self,
        actor: &ActorRef,
        msg: &M,
        timeout: Duration,
    ) -> Result<M::Reply, ActorError> {
        let reply = self
            .host
            .request_raw(actor, M::KEY, encode(msg)?, timeout)
            .await?;
        rmp_serde::from_slice(&reply).map_err(|e| ActorError::Codec(format!("reply: {e}")))
    }

    /// A typed one-way send to another actor.
    ///
    /// # Errors
    /// Local refusals and admission failures.
    pub async fn send<M: Message>(&self, actor: &ActorRef, msg: &M) -> Result<(), ActorError> {
        self.host.send_raw(actor, M::KEY, encode(msg)?).await
    }

    /// The current Ready ref of `actor_id`, read from the Location Store (one lookup), as
    /// `Node::get`. The framework never re-resolves a ref by itself (SB-5.10): a ref an actor
    /// keeps goes stale when its target moves (Message Follow carries it for the follow TTL
    /// and one hop only), and a call on it is then answered `Unavailable`; the actor
    /// re-resolves here and calls again if it chooses to.
    ///
    /// # Errors
    /// `NotFound` when there is no incarnation; `Unavailable` while it is activating or the
    /// store cannot be read.
    pub async fn get(&self, actor_id: &ActorId) -> Result<ActorRef, ActorError> {
        self.host.get(actor_id).await
    }

    /// Pushes `msg` one-way to this actor's current bound session (36, SB-5.5, SB-5.14). No
    /// ack, no retransmit; the session owner drops (and counts) a push that is not current.
    ///
    /// # Errors
    /// [`ActorError::SessionNotBound`] (`InvalidOperation`) without a current binding; it
    /// succeeds once bound.
    pub async fn push<M: Message>(&self, msg: &M) -> Result<(), ActorError> {
        self.push_raw(M::KEY, encode(msg)?).await
    }

    /// Raw form of [`ActorCtx::push`]. Keys from [`RESERVED_KEYS_START`] on are the
    /// framework's (`InvalidOperation`).
    ///
    /// # Errors
    /// As [`ActorCtx::push`].
    pub async fn push_raw(&self, key: DispatchKey, payload: Bytes) -> Result<(), ActorError> {
        if key.get() >= RESERVED_KEYS_START {
            return Err(ActorError::Codec(format!(
                "push key {key} is reserved for the framework"
            )));
        }
        // Most pushes are admitted at once: no boxed future for them.
        match self.host.try_push_bound(&self.me, key, payload) {
            Ok(done) => done,
            Err(payload) => self.host.push_bound(&self.me, key, payload).await,
        }
    }

    /// Asks the session owner to close the bound session's connection (SB-5.14; the client
    /// sees the close reason `Closed`).
    ///
    /// # Errors
    /// [`ActorError::SessionNotBound`] without a current binding.
    pub async fn close_session(&self) -> Result<(), ActorError> {
        self.host
            .push_bound(&self.me, CLOSE_SESSION_KEY, Bytes::new())
            .await
    }
}
