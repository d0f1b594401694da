//! Spots: the logical instance (room, zone, match) actors join, and the gate each kind assigns
//! (EG-1.3, EG-2).
//!
//! | kind | gate of member actor handlers |
//! |---|---|
//! | [`SpotKind::Entry`] | one gate per actor (EG-2.4) |
//! | [`SpotKind::User`] + [`UserMode::PerActor`] | one gate per actor (EG-2.4) |
//! | [`SpotKind::User`] + [`UserMode::SpotWide`] | the Spot's single gate (EG-2.2) |
//! | [`SpotKind::Instance`] | the Spot's single gate (EG-2.2) |
//!
//! Whatever the kind, every actor has its own queue (EG-2.1): the gate decides who may run, the
//! queue where work waits.

use serde::{Deserialize, Serialize};

/// Execution mode of a User Spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UserMode {
    /// One gate for the Spot: member actors never run concurrently.
    SpotWide,
    /// A gate per actor: member actors run concurrently.
    PerActor,
}

/// The kind of a Spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SpotKind {
    /// The node's entry Spot; actors have their own gates.
    Entry,
    /// A User Spot in the given mode.
    User(UserMode),
    /// An Instance Spot (SpotWide gate layout).
    Instance,
}

impl SpotKind {
    /// Whether member actors share the Spot's gate.
    #[must_use]
    pub fn shares_gate(self) -> bool {
        matches!(
            self,
            SpotKind::User(UserMode::SpotWide) | SpotKind::Instance
        )
    }
}

/// The Spot an actor joins when it is created: a node-local name and its kind. Actors created
/// without one join the node's Entry Spot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpotSpec {
    /// Spot name (unique per node).
    pub name: String,
    /// Its kind; a later join with another kind for the same name is `InvalidOperation`.
    pub kind: SpotKind,
}

impl SpotSpec {
    /// The node's Entry Spot.
    #[must_use]
    pub fn entry() -> Self {
        Self {
            name: "entry".into(),
            kind: SpotKind::Entry,
        }
    }
}

/// The typed callback surface of a Spot (SB-7.6). Registered per Spot name in the
/// [`super::ActorRegistry`]; a Spot without hooks has no-op callbacks. Callbacks run as
/// lifecycle turns of the Spot's own lane (behind the Spot gate in SpotWide and Instance Spots).
#[derive(Clone, Default)]
pub struct SpotHooks {
    on_disconnect_actor: Option<DisconnectHook>,
}

/// `OnDisconnectActor`: the Spot's name and the actor whose bound session disconnected (or was
/// logically disconnected with `NotifyDisconnected`). It neither destroys the actor nor changes
/// membership.
pub type DisconnectHook = std::sync::Arc<
    dyn Fn(
            String,
            super::ActorCtx,
        ) -> crate::runtime::BoxFuture<Result<(), crate::runtime::HandlerError>>
        + Send
        + Sync,
>;

impl std::fmt::Debug for SpotHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpotHooks")
            .field("on_disconnect_actor", &self.on_disconnect_actor.is_some())
            .finish()
    }
}

impl SpotHooks {
    /// No callbacks.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `OnDisconnectActor` (SB-7.6).
    #[must_use]
    pub fn on_disconnect_actor<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(String, super::ActorCtx) -> Fut + Send + Sync + 'static,
        Fut:
            std::future::Future<Output = Result<(), crate::runtime::HandlerError>> + Send + 'static,
    {
        self.on_disconnect_actor = Some(std::sync::Arc::new(move |s, a| Box::pin(f(s, a))));
        self
    }

    /// The `OnDisconnectActor` callback, if any.
    #[must_use]
    pub fn disconnect_hook(&self) -> Option<&DisconnectHook> {
        self.on_disconnect_actor.as_ref()
    }
}
