//! Typed messages and handler results.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;
use zlink_wire::DispatchKey;

use super::reference::ActorRef;
use crate::node::Node;

/// A message kind an actor type handles: its payload type (`Self`), its reply type and its
/// packet key. Payloads and replies travel as MessagePack (`rmp-serde`, named fields).
pub trait Message: Serialize + DeserializeOwned + Send + 'static {
    /// The packet key that selects the handler (unique per actor type, SB-3.3).
    const KEY: DispatchKey;
    /// The reply of a request (`()` for messages only ever sent).
    type Reply: Serialize + DeserializeOwned + Send + 'static;
}

/// A handler's own failure. For a request it becomes an error reply of kind `Internal`; for a
/// send it is logged and counted (EG-15).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    message: String,
}

impl HandlerError {
    /// A handler error with a message (sent back as the bounded error detail).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler returns: a result now, or a future the actor's turn awaits. A `Later` keeps
/// the actor's turn (and a SpotWide Spot's gate) until it completes (EG-2.6).
pub enum Handled<R> {
    /// Finished synchronously.
    Now(Result<R, HandlerError>),
    /// Continues asynchronously within the same turn.
    Later(BoxFuture<Result<R, HandlerError>>),
}

impl<R> Handled<R> {
    /// Finished with `value`.
    pub fn ok(value: R) -> Self {
        Handled::Now(Ok(value))
    }

    /// Finished with an error.
    pub fn err(e: HandlerError) -> Self {
        Handled::Now(Err(e))
    }

    /// Continues as `fut`.
    pub fn later<F>(fut: F) -> Self
    where
        F: Future<Output = Result<R, HandlerError>> + Send + 'static,
    {
        Handled::Later(Box::pin(fut))
    }
}

/// What a handler sees of its turn: its own ref and the node it runs on (to call other actors).
#[derive(Clone, Debug)]
pub struct ActorCtx {
    me: ActorRef,
    node: Node,
}

impl ActorCtx {
    pub(crate) fn new(me: ActorRef, node: Node) -> Self {
        Self { me, node }
    }

    /// The ref of the actor whose turn this is.
    #[must_use]
    pub fn actor_ref(&self) -> &ActorRef {
        &self.me
    }

    /// The node hosting the actor (requests to other actors, local or remote).
    #[must_use]
    pub fn node(&self) -> &Node {
        &self.node
    }
}
