//! Typed messages and handler results.

use serde::Serialize;
use serde::de::DeserializeOwned;
use zlink_wire::DispatchKey;

use super::reference::ActorRef;
use crate::node::Node;
pub use crate::runtime::{BoxFuture, Handled, HandlerError};

/// A message kind an actor type handles: its payload type (`Self`), its reply type and its
/// packet key. Payloads and replies travel as MessagePack (`rmp-serde`, named fields).
pub trait Message: Serialize + DeserializeOwned + Send + 'static {
    /// The packet key that selects the handler (unique per actor type, SB-3.3).
    const KEY: DispatchKey;
    /// The reply of a request (`()` for messages only ever sent).
    type Reply: Serialize + DeserializeOwned + Send + 'static;
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
