//! [`Create`]: what to create — an actor's type, id, and optionally its owner node, Spot,
//! factory input and first record (EG-14).

use bytes::Bytes;
use zlink_wire::{ActorId, DispatchKey, NodeRid};

use super::error::ActorError;
use super::message::Message;
use super::spot::SpotSpec;

/// What to create: type, id, and optionally the owner node, the Spot and the factory input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Create {
    /// Registered actor type.
    pub actor_type: String,
    /// Global id.
    pub actor_id: ActorId,
    /// Owner node; `None` = this node.
    pub node: Option<NodeRid>,
    /// Spot to join; `None` = the owner's Entry Spot.
    pub spot: Option<SpotSpec>,
    /// Factory input.
    pub init: Bytes,
    /// The send that triggers the activation (EG-14 cold activation): if this call activates
    /// the actor, the record runs first, before any record that arrived during the activation;
    /// otherwise it is sent to the existing Ready incarnation once its ref is known. Not sent
    /// when `create` is refused.
    pub first: Option<(DispatchKey, Bytes)>,
}

impl Create {
    /// Create `actor_id` of `actor_type` on this node, in its Entry Spot, without init input.
    pub fn new(actor_type: impl Into<String>, actor_id: ActorId) -> Self {
        Self {
            actor_type: actor_type.into(),
            actor_id,
            node: None,
            spot: None,
            init: Bytes::new(),
            first: None,
        }
    }

    /// The send that triggers the activation (see [`Create::first`]).
    ///
    /// # Errors
    /// [`ActorError::Codec`] when `msg` does not encode.
    pub fn first_send<M: Message>(mut self, msg: &M) -> Result<Self, ActorError> {
        let payload =
            rmp_serde::to_vec_named(msg).map_err(|e| ActorError::Codec(format!("payload: {e}")))?;
        self.first = Some((M::KEY, Bytes::from(payload)));
        Ok(self)
    }

    /// Owner node.
    #[must_use]
    pub fn on(mut self, node: NodeRid) -> Self {
        self.node = Some(node);
        self
    }

    /// Spot to join.
    #[must_use]
    pub fn in_spot(mut self, spot: SpotSpec) -> Self {
        self.spot = Some(spot);
        self
    }

    /// Factory input.
    #[must_use]
    pub fn init(mut self, init: Bytes) -> Self {
        self.init = init;
        self
    }
}
