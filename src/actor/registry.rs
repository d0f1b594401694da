//! Typed actor factories and handlers, registered per actor type (SB-3.3, EG-14).

use std::collections::HashMap;

use crate::hashing::FastMap;
use std::sync::Arc;

use bytes::Bytes;
use zlink_wire::{ActorId, DispatchKey, ObjectGeneration};

use super::error::{ActorConfigError, ActorError};
use super::message::{ActorCtx, BoxFuture, Handled, HandlerError, Message};
use crate::runtime::SpotWideCtx;

/// What a factory learns about the incarnation it creates.
#[derive(Clone, Debug)]
pub struct ActivationInfo {
    /// The actor.
    pub actor_id: ActorId,
    /// Its new incarnation.
    pub object_generation: ObjectGeneration,
}

pub(crate) type Outcome = Result<Bytes, ActorError>;

/// An erased handler result.
pub(crate) enum Step {
    Now(Outcome),
    Later(BoxFuture<Outcome>),
}

type ErasedHandler<S> = Arc<dyn Fn(&mut S, &ActorCtx, &TurnCtx, Bytes) -> Step + Send + Sync>;

/// The runtime context of the turn running a handler, by the Spot kind of the actor: SpotWide
/// User and Instance Spots give `Ctx<CanYield>` (EG-16.1); other Spots' turns offer no Yield
/// (EG-16.3), so nothing is passed on.
#[derive(Clone, Debug)]
pub(crate) enum TurnCtx {
    Yielding(SpotWideCtx),
    Serial,
}
type Factory<S> = Arc<dyn Fn(&ActivationInfo, Bytes) -> Result<S, HandlerError> + Send + Sync>;

/// One live actor instance with its erased handler table.
pub(crate) trait ActorInstance: Send + 'static {
    fn handle(&mut self, ctx: &ActorCtx, turn: &TurnCtx, key: DispatchKey, payload: Bytes) -> Step;
}

struct Instance<S> {
    state: S,
    type_name: Arc<str>,
    handlers: Arc<FastMap<DispatchKey, ErasedHandler<S>>>,
}

impl<S: Send + 'static> ActorInstance for Instance<S> {
    fn handle(&mut self, ctx: &ActorCtx, turn: &TurnCtx, key: DispatchKey, payload: Bytes) -> Step {
        match self.handlers.get(&key) {
            Some(h) => h(&mut self.state, ctx, turn, payload),
            None => Step::Now(Err(ActorError::UnknownMessage {
                actor_type: self.type_name.to_string(),
                key,
            })),
        }
    }
}

/// Builds one actor type: a factory creating the state `S` from the create request's init
/// payload, and one typed handler per [`Message`].
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use zlink::actor::{ActorTypeBuilder, DispatchKey, Handled, Message};
///
/// #[derive(Serialize, Deserialize)]
/// struct Add(u64);
/// impl Message for Add {
///     const KEY: DispatchKey = DispatchKey::new(1);
///     type Reply = u64;
/// }
///
/// let counter = ActorTypeBuilder::new("counter", |_info, _init| Ok(0u64))
///     .handle(|total: &mut u64, _ctx, Add(n)| {
///         *total += n;
///         Handled::ok(*total)
///     })
///     .build()
///     .unwrap();
/// assert_eq!(counter.name(), "counter");
/// ```
pub struct ActorTypeBuilder<S> {
    name: String,
    factory: Factory<S>,
    handlers: FastMap<DispatchKey, ErasedHandler<S>>,
    duplicate: Option<DispatchKey>,
    yields: bool,
}

impl<S: Send + 'static> ActorTypeBuilder<S> {
    /// A type named `name` whose factory builds the state from the init payload.
    pub fn new<F>(name: impl Into<String>, factory: F) -> Self
    where
        F: Fn(&ActivationInfo, Bytes) -> Result<S, HandlerError> + Send + Sync + 'static,
    {
        Self {
            name: name.into(),
            factory: Arc::new(factory),
            handlers: FastMap::default(),
            duplicate: None,
            yields: false,
        }
    }

    /// Registers the handler of message kind `M` (both for requests and sends). A second
    /// handler for `M::KEY` makes [`ActorTypeBuilder::build`] fail (SB-3.3).
    #[must_use]
    pub fn handle<M, F>(self, f: F) -> Self
    where
        M: Message,
        F: Fn(&mut S, &ActorCtx, M) -> Handled<M::Reply> + Send + Sync + 'static,
    {
        let erased: ErasedHandler<S> = Arc::new(move |state, ctx, _turn, payload| {
            let msg: M = match rmp_serde::from_slice(&payload) {
                Ok(m) => m,
                Err(e) => return Step::Now(Err(ActorError::Codec(format!("payload: {e}")))),
            };
            erase_handled(f(state, ctx, msg))
        });
        self.insert(M::KEY, erased)
    }

    /// Registers a handler of message kind `M` that gets the turn's runtime context with
    /// Yield (`SpotWideCtx` = `Ctx<CanYield>`: `ctx.worker(..).yielding()`, `ctx.request(..)
    /// .yielding()`, EG-16.1, EG-3). Yield exists only in SpotWide User and Instance Spots, so
    /// an actor of a type with such a handler can only join those: activation in any other
    /// Spot fails with [`ActorError::YieldNotOffered`] (`InvalidOperation`, EG-16.3). Ordinary
    /// handlers ([`ActorTypeBuilder::handle`]) get no runtime context, hence no Yield.
    #[must_use]
    pub fn handle_yielding<M, F>(mut self, f: F) -> Self
    where
        M: Message,
        F: Fn(&mut S, &ActorCtx, SpotWideCtx, M) -> Handled<M::Reply> + Send + Sync + 'static,
    {
        self.yields = true;
        let erased: ErasedHandler<S> = Arc::new(move |state, ctx, turn, payload| {
            let TurnCtx::Yielding(rt) = turn else {
                return Step::Now(Err(ActorError::YieldNotOffered {
                    actor_type: String::new(),
                    spot: String::new(),
                }));
            };
            let msg: M = match rmp_serde::from_slice(&payload) {
                Ok(m) => m,
                Err(e) => return Step::Now(Err(ActorError::Codec(format!("payload: {e}")))),
            };
            erase_handled(f(state, ctx, rt.clone(), msg))
        });
        self.insert(M::KEY, erased)
    }

    fn insert(mut self, key: DispatchKey, erased: ErasedHandler<S>) -> Self {
        if self.handlers.insert(key, erased).is_some() && self.duplicate.is_none() {
            self.duplicate = Some(key);
        }
        self
    }

    /// Finishes the type.
    ///
    /// # Errors
    /// [`ActorConfigError::DuplicateHandler`] when one key got two handlers;
    /// [`ActorConfigError::InvalidTypeName`] for an empty or over-long name.
    pub fn build(self) -> Result<ActorType, ActorConfigError> {
        if self.name.is_empty() || self.name.len() > 64 {
            return Err(ActorConfigError::InvalidTypeName {
                actor_type: self.name,
            });
        }
        if let Some(key) = self.duplicate {
            return Err(ActorConfigError::DuplicateHandler {
                actor_type: self.name,
                key,
            });
        }
        let type_name: Arc<str> = Arc::from(self.name.as_str());
        let handlers = Arc::new(self.handlers);
        let factory = self.factory;
        let make: MakeInstance = Arc::new(move |info, init| {
            let state = factory(info, init)?;
            Ok(Box::new(Instance {
                state,
                type_name: type_name.clone(),
                handlers: handlers.clone(),
            }) as Box<dyn ActorInstance>)
        });
        Ok(ActorType {
            name: self.name,
            make,
            yields: self.yields,
        })
    }
}

fn erase_handled<R: serde::Serialize + Send + 'static>(h: Handled<R>) -> Step {
    match h {
        Handled::Now(r) => Step::Now(encode_reply(r)),
        Handled::Later(fut) => Step::Later(Box::pin(async move { encode_reply(fut.await) })),
    }
}

/// MessagePack nil: the encoding of `()`.
static NIL: &[u8] = &[0xc0];

fn encode_reply<R: serde::Serialize>(r: Result<R, HandlerError>) -> Outcome {
    match r {
        // A reply without data (`()`, the reply of most one-way messages) is one static byte:
        // no buffer allocated per message for a reply nobody may read.
        Ok(v) if std::mem::size_of::<R>() == 0 && is_nil(&v) => Ok(Bytes::from_static(NIL)),
        Ok(v) => rmp_serde::to_vec_named(&v)
            .map(Bytes::from)
            .map_err(|e| ActorError::Codec(format!("reply: {e}"))),
        Err(HandlerError::Refused { kind, message }) => Err(ActorError::Refused {
            kind: super::error::public_kind(kind),
            detail: message,
        }),
        Err(e) => Err(ActorError::Handler(e.to_string())),
    }
}

/// Whether `v` (a zero-sized value) encodes as nil, encoded on the stack.
fn is_nil<R: serde::Serialize>(v: &R) -> bool {
    let mut buf = [0u8; 4];
    let mut w = &mut buf[..];
    rmp_serde::encode::write_named(&mut w, v).is_ok() && w.len() == 3 && buf[0] == NIL[0]
}

type MakeInstance = Arc<
    dyn Fn(&ActivationInfo, Bytes) -> Result<Box<dyn ActorInstance>, HandlerError> + Send + Sync,
>;

/// One registered actor type with its erased factory.
#[derive(Clone)]
pub struct ActorType {
    name: String,
    make: MakeInstance,
    yields: bool,
}

impl std::fmt::Debug for ActorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorType")
            .field("name", &self.name)
            .finish()
    }
}

impl ActorType {
    /// The type name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether a handler of this type yields (it can only live in SpotWide/Instance Spots).
    #[must_use]
    pub fn yields(&self) -> bool {
        self.yields
    }

    pub(crate) fn instantiate(
        &self,
        info: &ActivationInfo,
        init: Bytes,
    ) -> Result<Box<dyn ActorInstance>, HandlerError> {
        (self.make)(info, init)
    }
}

/// The actor types a node hosts (by name).
#[derive(Clone, Debug, Default)]
pub struct ActorRegistry {
    types: HashMap<String, ActorType>,
    spots: HashMap<String, super::spot::SpotHooks>,
}

impl ActorRegistry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a type.
    ///
    /// # Errors
    /// [`ActorConfigError::DuplicateType`] when a type of that name is registered already.
    pub fn register(&mut self, ty: ActorType) -> Result<&mut Self, ActorConfigError> {
        if self.types.contains_key(ty.name()) {
            return Err(ActorConfigError::DuplicateType {
                actor_type: ty.name().to_owned(),
            });
        }
        self.types.insert(ty.name().to_owned(), ty);
        Ok(self)
    }

    /// The type named `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&ActorType> {
        self.types.get(name)
    }

    /// Sets the callbacks of the Spot named `name` (every Spot of that name on every node
    /// hosting this registry; `"entry"` is the Entry Spot).
    pub fn spot_hooks(
        &mut self,
        name: impl Into<String>,
        hooks: super::spot::SpotHooks,
    ) -> &mut Self {
        self.spots.insert(name.into(), hooks);
        self
    }

    /// The callbacks of the Spot named `name`.
    #[must_use]
    pub fn hooks_of(&self, name: &str) -> Option<&super::spot::SpotHooks> {
        self.spots.get(name)
    }

    /// Registered type names, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.types.keys().cloned().collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Ack;

    #[test]
    fn a_reply_without_data_is_the_static_nil_and_others_encode_as_before() {
        let nil = encode_reply(Ok(())).unwrap();
        assert_eq!(&nil[..], NIL);
        assert_eq!(nil.as_ptr(), NIL.as_ptr(), "static, not allocated");
        // Zero-sized but not nil (a unit struct is an empty array here): encoded as before.
        assert_eq!(
            encode_reply(Ok(Ack)).unwrap(),
            rmp_serde::to_vec_named(&Ack).unwrap()
        );
        let empty: [u8; 0] = [];
        assert_eq!(
            encode_reply(Ok(empty)).unwrap(),
            rmp_serde::to_vec_named(&empty).unwrap()
        );
        assert_eq!(
            encode_reply(Ok(7u32)).unwrap(),
            rmp_serde::to_vec_named(&7u32).unwrap()
        );
    }
}
