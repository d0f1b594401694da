//! Actors and Spots (spec glossary "Actor", "ActorRef", "Spot"; SB-4.1, SB-12, EG-2.1, EG-14, EG-15).
//!
//! An actor is an addressable object with a global [`ActorId`]. Each incarnation has an
//! [`ObjectGeneration`]: kept across relocation, new after destroy + re-create. Applications hold
//! an [`ActorRef`] — the id, the incarnation and a snapshot of the current location — and never a
//! transport handle.
//!
//! # Contract
//! - Actor *types* are registered once per node in an [`ActorRegistry`] ([`ActorTypeBuilder`]):
//!   a factory and one typed handler per [`Message`] (a payload type, a reply type and a
//!   [`DispatchKey`]). A second handler for one key, or a second type of one name, is a
//!   configuration error (SB-3.3). Creating an actor of an unregistered type is `NotFound`.
//! - Only the owner confirmed by a Location Store reservation runs the factory (EG-14); only
//!   **Ready** actors are handed out as [`ActorRef`]s.
//! - Every payload for an actor lands in that actor's own queue (EG-2.1) and its handler runs in
//!   a serial turn: one message at a time per actor; a SpotWide Spot also serialises its member
//!   actors behind one Spot gate (EG-1.3) — see [`SpotKind`].
//! - A request handler's error becomes an error reply for that request (kind `Internal`); a send
//!   handler's error is logged and counted (EG-15).
//! - Calls are validated on the owner against the ref's fences (`fence::check_call`): another
//!   incarnation is `InvalidOperation`, a stale node/authority/lease fence is `Unavailable`, never
//!   redirected (SB-12).

mod create;
mod error;
pub(crate) mod exec;
#[cfg(feature = "testing")]
pub mod fence;
#[cfg(not(feature = "testing"))]
pub(crate) mod fence;
mod message;
mod reference;
mod registry;
pub(crate) mod spot;

pub use create::Create;
pub use error::{ActorConfigError, ActorError, MigrationError};
pub(crate) use message::to_bytes;
pub use message::{
    ActorCtx, ActorHost, CLOSE_SESSION_KEY, Handled, HandlerError, Message, RESERVED_KEYS_START,
};
pub use reference::{ActorRef, LocationSnapshot};
pub(crate) use registry::ActorInstance;
pub use registry::{
    ActivationInfo, ActorRegistry, ActorType, ActorTypeBuilder, MigratedState, MigrationMode,
};
pub use spot::{DisconnectHook, SpotHooks, SpotKind, SpotSpec, UserMode};
pub use zlink_wire::{
    ActorId, AuthorityOwnerGeneration, DispatchKey, ErrorKind, MeshName, NodeGeneration, NodeRid,
    ObjectGeneration, OwnerLeaseGeneration,
};
