//! Typed actor factories and handlers, registered per actor type (SB-3.3, EG-14).

use std::collections::HashMap;

use crate::hashing::FastMap;
use std::sync::Arc;

use bytes::Bytes;
use zlink_wire::{ActorId, DispatchKey, ObjectGeneration};

use super::error::{ActorConfigError, ActorError, MigrationError};
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

/// Whether anyone reads a turn's reply: a request's caller does; a send has no reply route,
/// so its handler's reply value is dropped without being encoded (a handler error is still
/// reported, EG-15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplyUse {
    /// A request: the reply is encoded and answered.
    Read,
    /// A send: the reply value is dropped unencoded.
    Unread,
}

/// An erased handler result.
pub(crate) enum Step {
    Now(Outcome),
    Later(BoxFuture<Outcome>),
}

type ErasedHandler<S> =
    Arc<dyn Fn(&mut S, &ActorCtx, &TurnCtx, Bytes, ReplyUse) -> Step + Send + Sync>;

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
    fn handle(
        &mut self,
        ctx: &ActorCtx,
        turn: &TurnCtx,
        key: DispatchKey,
        payload: Bytes,
        reply: ReplyUse,
    ) -> Step;

    /// The instance's state for the target (relocation): called on the source after its last
    /// turn there. Refused for a type that did not opt in.
    #[allow(dead_code)] // called by the relocation source driver (issue 27, next part) and tests
    fn dehydrate(&self) -> Result<MigratedState, MigrationError>;
}

/// How an actor type takes part in relocation (the migration contract; Orleans'
/// `IGrainMigrationParticipant` is the model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MigrationMode {
    /// Not opted in: relocation is refused ([`MigrationError::NotMigratable`]). The default.
    None,
    /// Registered stateless: nothing travels; the target builds a fresh instance with the
    /// factory (empty init payload).
    Stateless,
    /// Opted in: the state is dehydrated on the source and rehydrated on the target.
    Stateful,
}

/// An actor's state as it travels: nothing for a stateless type, or the MessagePack bytes of
/// its migration state. ActorId and ObjectGeneration travel beside it and are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MigratedState {
    /// A type registered stateless.
    Stateless,
    /// The dehydrated state (`rmp-serde` bytes).
    Bytes(Vec<u8>),
}

type Dehydrate<S> = Arc<dyn Fn(&S) -> Result<Vec<u8>, String> + Send + Sync>;
type Rehydrate<S> = Arc<dyn Fn(&ActivationInfo, &[u8]) -> Result<S, String> + Send + Sync>;

/// A type's migration hooks, erased over the migration state type.
enum Migration<S> {
    None,
    Stateless,
    Stateful {
        dehydrate: Dehydrate<S>,
        rehydrate: Rehydrate<S>,
    },
}

impl<S> Clone for Migration<S> {
    fn clone(&self) -> Self {
        match self {
            Migration::None => Migration::None,
            Migration::Stateless => Migration::Stateless,
            Migration::Stateful {
                dehydrate,
                rehydrate,
            } => Migration::Stateful {
                dehydrate: dehydrate.clone(),
                rehydrate: rehydrate.clone(),
            },
        }
    }
}

impl<S> Migration<S> {
    fn mode(&self) -> MigrationMode {
        match self {
            Migration::None => MigrationMode::None,
            Migration::Stateless => MigrationMode::Stateless,
            Migration::Stateful { .. } => MigrationMode::Stateful,
        }
    }
}

struct Instance<S> {
    state: S,
    type_name: Arc<str>,
    handlers: Arc<FastMap<DispatchKey, ErasedHandler<S>>>,
    #[allow(dead_code)] // read by `dehydrate` (see there)
    migration: Arc<Migration<S>>,
}

impl<S: Send + 'static> ActorInstance for Instance<S> {
    fn handle(
        &mut self,
        ctx: &ActorCtx,
        turn: &TurnCtx,
        key: DispatchKey,
        payload: Bytes,
        reply: ReplyUse,
    ) -> Step {
        match self.handlers.get(&key) {
            Some(h) => h(&mut self.state, ctx, turn, payload, reply),
            None => Step::Now(Err(ActorError::UnknownMessage {
                actor_type: self.type_name.to_string(),
                key,
            })),
        }
    }

    fn dehydrate(&self) -> Result<MigratedState, MigrationError> {
        match &*self.migration {
            Migration::None => Err(MigrationError::NotMigratable {
                actor_type: self.type_name.to_string(),
            }),
            Migration::Stateless => Ok(MigratedState::Stateless),
            Migration::Stateful { dehydrate, .. } => dehydrate(&self.state)
                .map(MigratedState::Bytes)
                .map_err(|reason| MigrationError::Dehydrate {
                    actor_type: self.type_name.to_string(),
                    reason,
                }),
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
    migration: Migration<S>,
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
            migration: Migration::None,
        }
    }

    /// Opts the type in to relocation (the migration contract): `dehydrate` runs on the source
    /// after the actor's last turn there and returns its migration state `T`, which travels as
    /// MessagePack (`rmp-serde`); `rehydrate` runs on the target before the actor's first turn
    /// there and rebuilds the state from `T`. [`ActivationInfo`] on the target names the same
    /// ActorId and ObjectGeneration (an incarnation keeps both when it moves, SB-1.3). A type
    /// that neither opts in nor is [`stateless`](ActorTypeBuilder::stateless) is refused
    /// relocation ([`MigrationError::NotMigratable`]).
    #[must_use]
    pub fn migrate<T, D, R>(mut self, dehydrate: D, rehydrate: R) -> Self
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        D: Fn(&S) -> Result<T, HandlerError> + Send + Sync + 'static,
        R: Fn(&ActivationInfo, T) -> Result<S, HandlerError> + Send + Sync + 'static,
    {
        self.migration = Migration::Stateful {
            dehydrate: Arc::new(move |state| {
                let t = dehydrate(state).map_err(|e| e.to_string())?;
                rmp_serde::to_vec_named(&t).map_err(|e| format!("encode: {e}"))
            }),
            rehydrate: Arc::new(move |info, bytes| {
                let t: T = rmp_serde::from_slice(bytes).map_err(|e| format!("decode: {e}"))?;
                rehydrate(info, t).map_err(|e| e.to_string())
            }),
        };
        self
    }

    /// Registers the type as stateless for relocation: nothing travels, the target builds a
    /// fresh instance with the factory and an empty init payload.
    #[must_use]
    pub fn stateless(mut self) -> Self {
        self.migration = Migration::Stateless;
        self
    }

    /// Registers the handler of message kind `M` (both for requests and sends). A second
    /// handler for `M::KEY` makes [`ActorTypeBuilder::build`] fail (SB-3.3).
    #[must_use]
    pub fn handle<M, F>(self, f: F) -> Self
    where
        M: Message,
        F: Fn(&mut S, &ActorCtx, M) -> Handled<M::Reply> + Send + Sync + 'static,
    {
        let erased: ErasedHandler<S> = Arc::new(move |state, ctx, _turn, payload, reply| {
            let msg: M = match rmp_serde::from_slice(&payload) {
                Ok(m) => m,
                Err(e) => return Step::Now(Err(ActorError::Codec(format!("payload: {e}")))),
            };
            erase_handled(f(state, ctx, msg), reply)
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
        let erased: ErasedHandler<S> = Arc::new(move |state, ctx, turn, payload, reply| {
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
            erase_handled(f(state, ctx, rt.clone(), msg), reply)
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
        let migration = Arc::new(self.migration);
        let mode = migration.mode();
        let instance = {
            let (type_name, handlers, migration) =
                (type_name.clone(), handlers.clone(), migration.clone());
            move |state: S| {
                Box::new(Instance {
                    state,
                    type_name: type_name.clone(),
                    handlers: handlers.clone(),
                    migration: migration.clone(),
                }) as Box<dyn ActorInstance>
            }
        };
        let instance = Arc::new(instance);
        let make: MakeInstance = {
            let (factory, instance) = (factory.clone(), instance.clone());
            Arc::new(move |info, init| Ok(instance(factory(info, init)?)))
        };
        let restore: RestoreInstance = Arc::new(move |info, state| {
            let fail = |reason: String| MigrationError::Rehydrate {
                actor_type: type_name.to_string(),
                reason,
            };
            let s = match (&*migration, state) {
                (Migration::None, _) => {
                    return Err(MigrationError::NotMigratable {
                        actor_type: type_name.to_string(),
                    });
                }
                (Migration::Stateless, MigratedState::Stateless) => {
                    factory(info, Bytes::new()).map_err(|e| fail(e.to_string()))?
                }
                (Migration::Stateful { rehydrate, .. }, MigratedState::Bytes(b)) => {
                    rehydrate(info, &b).map_err(fail)?
                }
                _ => {
                    return Err(MigrationError::StateMismatch {
                        actor_type: type_name.to_string(),
                    });
                }
            };
            Ok(instance(s))
        });
        Ok(ActorType {
            name: self.name,
            make,
            restore,
            migration: mode,
            yields: self.yields,
        })
    }
}

fn erase_handled<R: serde::Serialize + Send + 'static>(h: Handled<R>, reply: ReplyUse) -> Step {
    match h {
        Handled::Now(r) => Step::Now(encode_reply(r, reply)),
        Handled::Later(fut) => Step::Later(Box::pin(async move { encode_reply(fut.await, reply) })),
    }
}

/// MessagePack nil: the encoding of `()`.
static NIL: &[u8] = &[0xc0];

fn encode_reply<R: serde::Serialize>(r: Result<R, HandlerError>, reply: ReplyUse) -> Outcome {
    match r {
        // A send's reply: nobody reads it, so it is dropped unencoded.
        Ok(_) if reply == ReplyUse::Unread => Ok(Bytes::new()),
        // A reply without data (`()`, the reply of most one-way messages) is one static byte:
        // no buffer allocated per message for a reply nobody may read.
        Ok(v) if std::mem::size_of::<R>() == 0 && is_nil(&v) => Ok(Bytes::from_static(NIL)),
        Ok(v) => super::message::to_bytes(&v).map_err(|e| ActorError::Codec(format!("reply: {e}"))),
        Err(HandlerError::Refused { kind, message }) => Err(ActorError::Refused {
            kind,
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

type RestoreInstance = Arc<
    dyn Fn(&ActivationInfo, MigratedState) -> Result<Box<dyn ActorInstance>, MigrationError>
        + Send
        + Sync,
>;

/// One registered actor type with its erased factory.
#[derive(Clone)]
pub struct ActorType {
    name: String,
    make: MakeInstance,
    restore: RestoreInstance,
    migration: MigrationMode,
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

    /// How the type takes part in relocation.
    #[must_use]
    pub fn migration(&self) -> MigrationMode {
        self.migration
    }

    /// Whether actors of this type may be relocated: `Err` with a clear reason for a type that
    /// neither opted in nor is registered stateless (checked before anything is sealed).
    ///
    /// # Errors
    /// [`MigrationError::NotMigratable`].
    pub fn relocatable(&self) -> Result<(), MigrationError> {
        match self.migration {
            MigrationMode::None => Err(MigrationError::NotMigratable {
                actor_type: self.name.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Rebuild an instance on the target from its migrated state, before its first turn there
    /// (`info` names the same ActorId and ObjectGeneration as on the source).
    #[allow(dead_code)] // called by the relocation target driver (issue 27, next part) and tests
    pub(crate) fn rehydrate(
        &self,
        info: &ActivationInfo,
        state: MigratedState,
    ) -> Result<Box<dyn ActorInstance>, MigrationError> {
        (self.restore)(info, state)
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

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Add(u64);
    impl Message for Add {
        const KEY: DispatchKey = DispatchKey::new(1);
        type Reply = u64;
    }

    fn info(generation: u64) -> ActivationInfo {
        ActivationInfo {
            actor_id: ActorId::new("counter-1").unwrap(),
            object_generation: ObjectGeneration::new(generation),
        }
    }

    fn counter() -> ActorTypeBuilder<(u64, ObjectGeneration)> {
        ActorTypeBuilder::new("counter", |info: &ActivationInfo, _init| {
            Ok((0u64, info.object_generation))
        })
        .handle(|s: &mut (u64, ObjectGeneration), _ctx, Add(n)| {
            s.0 += n;
            Handled::ok(s.0)
        })
    }

    /// A host that serves nothing (the handlers under test call no other actor).
    #[derive(Debug)]
    struct NoHost;

    impl super::super::ActorHost for NoHost {
        fn request_raw(
            &self,
            _: &super::super::ActorRef,
            _: DispatchKey,
            _: Bytes,
            _: std::time::Duration,
        ) -> BoxFuture<Result<Bytes, ActorError>> {
            Box::pin(async { Err(ActorError::Ended) })
        }
        fn send_raw(
            &self,
            _: &super::super::ActorRef,
            _: DispatchKey,
            _: Bytes,
        ) -> BoxFuture<Result<(), ActorError>> {
            Box::pin(async { Err(ActorError::Ended) })
        }
        fn push_bound(
            &self,
            _: &super::super::ActorRef,
            _: DispatchKey,
            _: Bytes,
        ) -> BoxFuture<Result<(), ActorError>> {
            Box::pin(async { Err(ActorError::Ended) })
        }
        fn get(&self, _: &ActorId) -> BoxFuture<Result<super::super::ActorRef, ActorError>> {
            Box::pin(async { Err(ActorError::Ended) })
        }
    }

    fn call(i: &mut Box<dyn ActorInstance>, n: u64) -> u64 {
        let me = super::super::ActorRef::from_parts(
            ActorId::new("counter-1").unwrap(),
            "counter".into(),
            ObjectGeneration::new(1),
            zlink_wire::ActorLocation {
                mesh: zlink_wire::MeshName::new("m").unwrap(),
                node: zlink_wire::NodeRid::new("n").unwrap(),
                node_generation: zlink_wire::NodeGeneration::new(1),
                authority_owner_generation: zlink_wire::AuthorityOwnerGeneration::new(1),
                owner_lease_generation: zlink_wire::OwnerLeaseGeneration::new(1),
            },
        );
        let ctx = ActorCtx::new(me, Arc::new(NoHost));
        let payload = Bytes::from(rmp_serde::to_vec_named(&Add(n)).unwrap());
        match i.handle(&ctx, &TurnCtx::Serial, Add::KEY, payload, ReplyUse::Read) {
            Step::Now(Ok(b)) => rmp_serde::from_slice(&b).unwrap(),
            _ => panic!("handler did not answer now"),
        }
    }

    // Issue 27 (migration contract): a type that opted in dehydrates after its last turn on the
    // source and rehydrates before its first on the target with the same state; ActorId and
    // ObjectGeneration are kept (SB-1.3).
    #[test]
    fn opted_in_state_travels_and_the_incarnation_is_kept() {
        let ty = counter()
            .migrate(
                |s: &(u64, ObjectGeneration)| Ok(s.0),
                |info: &ActivationInfo, total: u64| {
                    assert_eq!(info.actor_id.as_str(), "counter-1");
                    Ok((total, info.object_generation))
                },
            )
            .build()
            .unwrap();
        assert_eq!(ty.migration(), MigrationMode::Stateful);
        assert!(ty.relocatable().is_ok());
        let mut source = ty.instantiate(&info(4), Bytes::new()).unwrap();
        call(&mut source, 5);
        assert_eq!(call(&mut source, 2), 7);
        let state = source.dehydrate().unwrap();
        assert_eq!(
            state,
            MigratedState::Bytes(rmp_serde::to_vec_named(&7u64).unwrap())
        );
        let mut target = ty.rehydrate(&info(4), state).unwrap();
        assert_eq!(
            call(&mut target, 1),
            8,
            "the counter goes on where it stood"
        );
    }

    // Issue 27: a type that has not opted in is refused relocation with a clear typed error;
    // a stateless one moves without state (a fresh instance from the factory).
    #[test]
    fn not_opted_in_is_refused_and_stateless_moves_fresh() {
        let ty = counter().build().unwrap();
        assert_eq!(ty.migration(), MigrationMode::None);
        let err = ty.relocatable().unwrap_err();
        assert!(
            matches!(err, MigrationError::NotMigratable { ref actor_type } if actor_type == "counter")
        );
        assert_eq!(err.kind(), zlink_wire::ErrorKind::InvalidOperation);
        assert!(err.to_string().contains("ActorTypeBuilder::migrate"));
        let source = ty.instantiate(&info(1), Bytes::new()).unwrap();
        assert_eq!(
            source.dehydrate().unwrap_err(),
            MigrationError::NotMigratable {
                actor_type: "counter".into()
            }
        );
        assert!(matches!(
            ty.rehydrate(&info(1), MigratedState::Stateless),
            Err(MigrationError::NotMigratable { .. })
        ));

        let ty = counter().stateless().build().unwrap();
        assert_eq!(ty.migration(), MigrationMode::Stateless);
        let mut source = ty.instantiate(&info(3), Bytes::new()).unwrap();
        call(&mut source, 9);
        assert_eq!(source.dehydrate().unwrap(), MigratedState::Stateless);
        let mut target = ty.rehydrate(&info(3), MigratedState::Stateless).unwrap();
        assert_eq!(call(&mut target, 1), 1, "nothing travelled");
        assert!(matches!(
            ty.rehydrate(&info(3), MigratedState::Bytes(vec![0xc0])),
            Err(MigrationError::StateMismatch { .. })
        ));
    }

    // Issue 27: a failing hook or undecodable bytes are typed errors, never a panic.
    #[test]
    fn failing_hooks_and_bad_bytes_are_typed_errors() {
        let ty = counter()
            .migrate(
                |_s: &(u64, ObjectGeneration)| -> Result<u64, HandlerError> {
                    Err(HandlerError::new("busy"))
                },
                |info: &ActivationInfo, total: u64| Ok((total, info.object_generation)),
            )
            .build()
            .unwrap();
        let source = ty.instantiate(&info(1), Bytes::new()).unwrap();
        assert!(matches!(
            source.dehydrate(),
            Err(MigrationError::Dehydrate { ref reason, .. }) if reason.contains("busy")
        ));
        let err = ty
            .rehydrate(&info(1), MigratedState::Bytes(vec![0xc1, 0xff]))
            .err()
            .unwrap();
        assert!(matches!(err, MigrationError::Rehydrate { .. }), "{err}");
        assert_eq!(err.kind(), zlink_wire::ErrorKind::Internal);
        assert!(matches!(
            ty.rehydrate(&info(1), MigratedState::Stateless),
            Err(MigrationError::StateMismatch { .. })
        ));
    }

    #[derive(serde::Serialize)]
    struct Ack;

    #[test]
    fn a_reply_without_data_is_the_static_nil_and_others_encode_as_before() {
        let nil = encode_reply(Ok(()), ReplyUse::Read).unwrap();
        assert_eq!(&nil[..], NIL);
        assert_eq!(nil.as_ptr(), NIL.as_ptr(), "static, not allocated");
        // Zero-sized but not nil (a unit struct is an empty array here): encoded as before.
        assert_eq!(
            encode_reply(Ok(Ack), ReplyUse::Read).unwrap(),
            rmp_serde::to_vec_named(&Ack).unwrap()
        );
        let empty: [u8; 0] = [];
        assert_eq!(
            encode_reply(Ok(empty), ReplyUse::Read).unwrap(),
            rmp_serde::to_vec_named(&empty).unwrap()
        );
        assert_eq!(
            encode_reply(Ok(7u32), ReplyUse::Read).unwrap(),
            rmp_serde::to_vec_named(&7u32).unwrap()
        );
    }

    /// A value whose encoding fails: a reply that is encoded reports it.
    struct Unencodable;

    impl serde::Serialize for Unencodable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("not encodable"))
        }
    }

    // EG-15: a send's handler failure is still reported; its reply value is not encoded.
    #[test]
    fn a_send_reply_is_dropped_unencoded_and_a_handler_error_still_reported() {
        // Unread: not encoded (an encoding error would show it was).
        assert_eq!(
            &encode_reply(Ok(Unencodable), ReplyUse::Unread).unwrap()[..],
            b""
        );
        assert!(matches!(
            encode_reply(Ok(Unencodable), ReplyUse::Read),
            Err(ActorError::Codec(_))
        ));
        assert!(matches!(
            encode_reply::<u64>(Err(HandlerError::Panicked), ReplyUse::Unread),
            Err(ActorError::Handler(_))
        ));
    }
}
