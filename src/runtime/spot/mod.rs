//! Spots, actors and timers on the lane runtime, with the gate layout of EG-1.3 / EG-2.
//!
//! | Spot kind | actor lanes | Spot's own lane | timers | context |
//! |---|---|---|---|---|
//! | [`SpotWideUser`], [`InstanceSpot`] | Spot gate | Spot gate | Spot gate | [`Ctx<CanYield>`] |
//! | [`EntrySpot`] | own gate each | Spot gate | Spot gate | [`Ctx<NoYield>`] |
//! | [`PerActorUser`] | own gate each | own gate | own gate each | [`Ctx<NoYield>`] |
//!
//! Actor payloads always go to that actor's own lane (queue), whatever the layout (EG-2.1).

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::sync::Mutex;

use super::context::{CanYield, Ctx, NoYield, Target, YieldMode, downcast_actor, gate_target};
use super::core::{LaneClass, LaneStats};
use super::driver::TurnEnv;
use super::error::{HandlerError, RuntimeError, Unavailable};
use super::handled::Handled;
use super::job::Job;
use super::lane::{CompletionEvent, GateInner, LaneHandle, LaneKind, RtShared};
use super::policy::{SerialLane, SpotLane, Unit};

mod actor;
mod timer;

pub use actor::ActorRef;
use timer::TimerInner;
pub use timer::TimerRef;

/// Bytes a message reserves in the application lane (plus the fixed cost per work, EG-7.1).
pub trait Payload {
    /// The payload length in bytes.
    fn payload_len(&self) -> usize;
}

impl Payload for Bytes {
    fn payload_len(&self) -> usize {
        self.len()
    }
}
impl Payload for Vec<u8> {
    fn payload_len(&self) -> usize {
        self.len()
    }
}
impl Payload for String {
    fn payload_len(&self) -> usize {
        self.len()
    }
}
impl Payload for &'static str {
    fn payload_len(&self) -> usize {
        self.len()
    }
}
macro_rules! fixed_payload {
    ($($t:ty),*) => {$(
        impl Payload for $t {
            fn payload_len(&self) -> usize {
                std::mem::size_of::<$t>()
            }
        }
    )*};
}
fixed_payload!((), u8, u16, u32, u64, u128, i32, i64, usize);

/// How a Spot kind assigns gates (EG-1.3, EG-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateLayout {
    /// One gate for the Spot: actors, Spot work, timers, lifecycle (EG-2.2).
    SpotWide,
    /// Spot work and timers share the Spot gate; each actor has its own gate (EG-2.3, EG-2.4).
    Entry,
    /// Each actor, the Spot's work and each timer have their own gates (EG-2.4, EG-2.5).
    PerActor,
}

#[allow(unnameable_types)] // sealed: nameable inside the crate only, by design
mod sealed {
    pub trait Sealed {}
}

/// A Spot kind: its gate layout and the context type its turns get. Sealed.
pub trait SpotKind: sealed::Sealed + Send + Sync + 'static {
    /// Whether turns of this Spot offer Yield ([`CanYield`] only for SpotWide User and Instance).
    type Yield: YieldMode;
    /// The gate layout.
    const LAYOUT: GateLayout;
    /// Name for diagnostics.
    const NAME: &'static str;
}

/// A User Spot in SpotWide mode.
#[derive(Debug)]
pub enum SpotWideUser {}
/// An Instance Spot (SpotWide gate layout).
#[derive(Debug)]
pub enum InstanceSpot {}
/// A User Spot in PerActor mode.
#[derive(Debug)]
pub enum PerActorUser {}
/// The Entry Spot.
#[derive(Debug)]
pub enum EntrySpot {}

impl sealed::Sealed for SpotWideUser {}
impl sealed::Sealed for InstanceSpot {}
impl sealed::Sealed for PerActorUser {}
impl sealed::Sealed for EntrySpot {}

impl SpotKind for SpotWideUser {
    type Yield = CanYield;
    const LAYOUT: GateLayout = GateLayout::SpotWide;
    const NAME: &'static str = "user-spotwide";
}
impl SpotKind for InstanceSpot {
    type Yield = CanYield;
    const LAYOUT: GateLayout = GateLayout::SpotWide;
    const NAME: &'static str = "instance";
}
impl SpotKind for PerActorUser {
    type Yield = NoYield;
    const LAYOUT: GateLayout = GateLayout::PerActor;
    const NAME: &'static str = "user-peractor";
}
impl SpotKind for EntrySpot {
    type Yield = NoYield;
    const LAYOUT: GateLayout = GateLayout::Entry;
    const NAME: &'static str = "entry";
}

type SpotHandler = Arc<dyn Fn(TurnEnv, Bytes) -> Handled<Bytes> + Send + Sync>;
type ActorHandler<M, R> = Arc<dyn Fn(TurnEnv, M) -> Handled<R> + Send + Sync>;

pub(crate) struct SpotInner {
    rt: Arc<RtShared>,
    gate: Arc<GateInner>,
    lane: Arc<LaneHandle>,
    handler: SpotHandler,
    unit: Arc<Unit>,
    named: Mutex<HashMap<String, Box<dyn Any + Send + Sync>>>,
}

/// A handle to a Spot of kind `K`.
pub struct SpotRef<K> {
    inner: Arc<SpotInner>,
    _k: PhantomData<fn() -> K>,
}

impl<K> Clone for SpotRef<K> {
    fn clone(&self) -> Self {
        SpotRef {
            inner: self.inner.clone(),
            _k: PhantomData,
        }
    }
}

impl<K: SpotKind> std::fmt::Debug for SpotRef<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpotRef")
            .field("kind", &K::NAME)
            .field("object", &self.inner.lane.object)
            .finish()
    }
}

fn to_ctx<Y: YieldMode>(env: TurnEnv) -> Ctx<Y> {
    Ctx::new(env)
}

/// Call the actor handler stored in the record's lane (borrowed from the lane the drain holds:
/// no reference-count update per message).
fn call_handler<M: 'static, R: 'static>(lane: &LaneHandle, env: TurnEnv, msg: M) -> Handled<R> {
    match lane
        .handler
        .get()
        .and_then(|b| b.downcast_ref::<ActorHandler<M, R>>())
    {
        Some(h) => h(env, msg),
        None => Handled::err(HandlerError::Failed("actor handler missing".into())),
    }
}

fn send_job<M, R>(msg: M) -> Job
where
    M: Send + 'static,
    R: Send + 'static,
{
    Job::capturable(SendRecord::<M, R>::new(msg))
}

/// A queued send of `msg` to an actor handling `M` with reply type `R`: the message itself is
/// the record's work (a relocation takes it back out unrun, [`super::PendingRecord::into_message`]).
pub(crate) struct SendRecord<M, R> {
    msg: M,
    _r: std::marker::PhantomData<fn() -> R>,
}

impl<M, R> SendRecord<M, R> {
    fn new(msg: M) -> Self {
        SendRecord {
            msg,
            _r: std::marker::PhantomData,
        }
    }

    /// The message.
    pub(crate) fn into_message(self) -> M {
        self.msg
    }
}

impl<M: Send + 'static, R: Send + 'static> super::job::Capturable for SendRecord<M, R> {
    #[inline]
    fn run(self, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        send_work::<M, R>(self.msg)(env, lane)
    }
}

impl<M: Send + 'static, R: Send + 'static> super::pending::RecordWork for SendRecord<M, R> {
    #[inline]
    fn run(self, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        super::job::Capturable::run(self, env, lane)
    }

    fn into_job(self) -> Job {
        Job::capturable(self)
    }
}

/// The work of a send of `msg`, unboxed.
fn send_work<M, R>(msg: M) -> impl FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static
where
    M: Send + 'static,
    R: Send + 'static,
{
    move |env, lane| match call_handler::<M, R>(lane, env, msg) {
        Handled::Now(r) => Handled::Now(r.map(drop)),
        Handled::Later(f) => Handled::Later(Box::pin(async move { f.await.map(drop) })),
    }
}

type ReplyTx<R> = oneshot::Sender<Result<R, RuntimeError>>;

/// Answer a request with the handler's result. The reply goes out once the record's `defer()`
/// barriers are settled (EG-5.2/5.3) and its error counted, so whoever acts on it sees that.
fn reply<R: Send + 'static>(
    lane: &LaneHandle,
    invocation: u64,
    tx: ReplyTx<R>,
    r: Result<R, HandlerError>,
) -> Result<(), HandlerError> {
    // EG-15: a request handler's error becomes the framework error reply.
    let (out, end) = split_reply(r);
    lane.slot.reply_at_end(invocation, end.is_err(), move || {
        let _ = tx.send(out);
    });
    end
}

/// Turns a panic of the wrapped future into `HandlerError::Panicked`, so a request still gets its
/// framework error reply (EG-15).
struct CatchPanic<F>(F);

impl<R, F: Future<Output = Result<R, HandlerError>> + Unpin> Future for CatchPanic<F> {
    type Output = Result<R, HandlerError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = &mut self.0;
        match catch_unwind(AssertUnwindSafe(|| std::pin::Pin::new(inner).poll(cx))) {
            Ok(p) => p,
            Err(_) => std::task::Poll::Ready(Err(HandlerError::Panicked)),
        }
    }
}

fn ask_job<M, R>(msg: M, tx: ReplyTx<R>) -> Job
where
    M: Send + 'static,
    R: Send + 'static,
{
    Job::with_lane(move |env, lane| {
        let invocation = env.invocation;
        let env_lane = env.lane.clone();
        match catch_unwind(AssertUnwindSafe(|| call_handler::<M, R>(lane, env, msg))) {
            Err(_) => Handled::Now(reply(lane, invocation, tx, Err(HandlerError::Panicked))),
            Ok(Handled::Now(r)) => Handled::Now(reply(lane, invocation, tx, r)),
            Ok(Handled::Later(f)) => Handled::Later(Box::pin(async move {
                let r = CatchPanic(f).await;
                reply(&env_lane, invocation, tx, r)
            })),
        }
    })
}

/// How a request made from a handler turn started ([`ActorRef::ask_in_turn`]).
pub(crate) enum AskStart<R> {
    /// It ran inline to its terminal (or was refused): the result.
    Done(Result<R, RuntimeError>),
    /// It was queued, or it ran inline and its handler continues in a drain: the reply comes here.
    Waiting(oneshot::Receiver<Result<R, RuntimeError>>),
}

/// A request's result and the record's own terminal (EG-15: a handler error becomes the
/// framework error reply and is the record's error).
fn split_reply<R>(
    r: Result<R, HandlerError>,
) -> (Result<R, RuntimeError>, Result<(), HandlerError>) {
    match r {
        Ok(v) => (Ok(v), Ok(())),
        Err(e) => (Err(RuntimeError::Handler(e.clone())), Err(e)),
    }
}

pub(crate) async fn await_reply<R>(
    rx: oneshot::Receiver<Result<R, RuntimeError>>,
) -> Result<R, RuntimeError> {
    rx.await
        .unwrap_or(Err(RuntimeError::Unavailable(Unavailable::Dropped)))
}

impl<K: SpotKind> SpotRef<K> {
    pub(crate) fn create<H>(rt: &Arc<RtShared>, handler: H) -> Result<SpotRef<K>, RuntimeError>
    where
        H: Fn(Ctx<K::Yield>, Bytes) -> Handled<Bytes> + Send + Sync + 'static,
    {
        let gate = GateInner::new(rt);
        let lane = gate.add_lane(LaneKind::Spot, <K::Yield as YieldMode>::ALLOWED)?;
        let unit = Arc::new(Unit::new(gate.clone()));
        Ok(SpotRef {
            inner: Arc::new(SpotInner {
                rt: rt.clone(),
                gate,
                lane,
                handler: Arc::new(move |env, msg| handler(to_ctx(env), msg)),
                unit,
                named: Mutex::new(HashMap::new()),
            }),
            _k: PhantomData,
        })
    }

    pub(crate) fn lane_handle(&self) -> &Arc<LaneHandle> {
        &self.inner.lane
    }

    /// The gate a new actor's lane would be behind, for the EG-6.5 check of creation calls.
    pub(crate) fn creation_target(&self) -> Target {
        match K::LAYOUT {
            GateLayout::SpotWide => gate_target(&self.inner.gate),
            GateLayout::Entry | GateLayout::PerActor => Target::Elsewhere,
        }
    }

    /// The gate layout.
    pub fn layout(&self) -> GateLayout {
        K::LAYOUT
    }

    /// The Spot's own lane, typed with the Spot lane policy (relocation seal, return pending).
    pub fn lane(&self) -> SerialLane<SpotLane, K::Yield> {
        SerialLane::new(self.inner.lane.clone(), self.inner.unit.clone())
    }

    fn actor_gate(&self) -> Result<Arc<GateInner>, RuntimeError> {
        if self.inner.gate.gate.lock().is_ended() {
            return Err(Unavailable::Ended.into());
        }
        Ok(match K::LAYOUT {
            GateLayout::SpotWide => self.inner.gate.clone(),
            GateLayout::Entry | GateLayout::PerActor => {
                let g = GateInner::new(&self.inner.rt);
                self.inner.unit.add_gate(&g);
                g
            }
        })
    }

    fn timer_gate(&self) -> Result<Arc<GateInner>, RuntimeError> {
        if self.inner.gate.gate.lock().is_ended() {
            return Err(Unavailable::Ended.into());
        }
        Ok(match K::LAYOUT {
            GateLayout::SpotWide | GateLayout::Entry => self.inner.gate.clone(),
            GateLayout::PerActor => {
                let g = GateInner::new(&self.inner.rt);
                self.inner.unit.add_gate(&g);
                g
            }
        })
    }

    /// Register an actor in this Spot (Ready immediately). Its payloads go to its own lane
    /// (EG-2.1); its gate follows the layout.
    pub fn spawn_actor<M, R, H>(&self, handler: H) -> Result<ActorRef<M, R>, RuntimeError>
    where
        M: Payload + Send + 'static,
        R: Send + 'static,
        H: Fn(Ctx<K::Yield>, M) -> Handled<R> + Send + Sync + 'static,
    {
        let gate = self.actor_gate()?;
        let lane = gate.add_lane(LaneKind::Actor, <K::Yield as YieldMode>::ALLOWED)?;
        let h: ActorHandler<M, R> = Arc::new(move |env, msg| handler(to_ctx(env), msg));
        let _ = lane.handler.set(Box::new(h));
        Ok(ActorRef::first(lane))
    }

    /// [`SpotRef::spawn_actor`] with a completion callback, which receives e.g. Join results
    /// registered for this actor with `defer()` (EG-5.4), in this actor's own lifecycle turns.
    pub fn spawn_actor_with_completion<M, R, H, C>(
        &self,
        handler: H,
        completion: C,
    ) -> Result<ActorRef<M, R>, RuntimeError>
    where
        M: Payload + Send + 'static,
        R: Send + 'static,
        H: Fn(Ctx<K::Yield>, M) -> Handled<R> + Send + Sync + 'static,
        C: Fn(Ctx<K::Yield>, CompletionEvent) -> Handled<()> + Send + Sync + 'static,
    {
        let a = self.spawn_actor(handler)?;
        let _ = a
            .lane
            .completion
            .set(Arc::new(move |env, ev| completion(to_ctx(env), ev)));
        Ok(a)
    }

    /// Register an actor and wait until its activation record ran in its own lifecycle lane.
    pub(crate) async fn create_actor_ready<M, R, H>(
        &self,
        handler: H,
    ) -> Result<ActorRef<M, R>, RuntimeError>
    where
        M: Payload + Send + 'static,
        R: Send + 'static,
        H: Fn(Ctx<K::Yield>, M) -> Handled<R> + Send + Sync + 'static,
    {
        let a = self.spawn_actor(handler)?;
        let (tx, rx) = oneshot::channel::<()>();
        a.lane.submit(
            LaneClass::Lifecycle,
            0,
            Job::new(move |_env| {
                let _ = tx.send(());
                Handled::ok(())
            }),
        )?;
        rx.await
            .map_err(|_| RuntimeError::Unavailable(Unavailable::Dropped))?;
        Ok(a)
    }

    pub(crate) fn named<M: 'static, R: 'static>(&self, key: &str) -> Option<ActorRef<M, R>> {
        let named = self.inner.named.lock().unwrap();
        downcast_actor(named.get(key)?.as_ref())
    }

    /// Register `a` under `key` unless another actor got there first; returns the winner.
    pub(crate) fn register_named<M, R>(&self, key: &str, a: ActorRef<M, R>) -> ActorRef<M, R>
    where
        M: Send + 'static,
        R: Send + 'static,
    {
        let mut named = self.inner.named.lock().unwrap();
        if let Some(existing) = named.get(key).and_then(|b| downcast_actor(b.as_ref())) {
            return existing;
        }
        named.insert(key.to_owned(), Box::new(a.clone()));
        a
    }

    /// Register a timer; its callbacks run as application work on the timer's lane (EG-7.1),
    /// behind the Spot gate (SpotWide, Entry) or its own gate (PerActor, EG-2.5).
    pub fn add_timer<F>(&self, callback: F) -> Result<TimerRef, RuntimeError>
    where
        F: Fn(Ctx<K::Yield>) -> Handled<()> + Send + Sync + 'static,
    {
        let gate = self.timer_gate()?;
        let lane = gate.add_lane(LaneKind::Timer, <K::Yield as YieldMode>::ALLOWED)?;
        Ok(TimerRef {
            inner: Arc::new(TimerInner {
                lane,
                callback: Arc::new(move |env| callback(to_ctx(env))),
            }),
        })
    }

    /// Send a message to the Spot's own handler.
    pub fn tell(&self, msg: Bytes) -> Result<(), RuntimeError> {
        let h = self.inner.handler.clone();
        let len = msg.len();
        self.inner.lane.submit(
            LaneClass::Application,
            len,
            Job::new(move |env| match h(env, msg) {
                Handled::Now(r) => Handled::Now(r.map(drop)),
                Handled::Later(f) => Handled::Later(Box::pin(async move { f.await.map(drop) })),
            }),
        )
    }

    /// Request to the Spot's own handler (from outside a turn; inside, use `Ctx::ask_spot`).
    pub fn ask(
        &self,
        msg: Bytes,
    ) -> impl Future<Output = Result<Bytes, RuntimeError>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let h = self.inner.handler.clone();
        let len = msg.len();
        let submitted =
            self.inner.lane.submit(
                LaneClass::Application,
                len,
                Job::new(move |env| {
                    let (lane, invocation) = (env.lane.clone(), env.invocation);
                    match h(env, msg) {
                        Handled::Now(r) => Handled::Now(reply(&lane, invocation, tx, r)),
                        Handled::Later(f) => Handled::Later(Box::pin(async move {
                            reply(&lane, invocation, tx, f.await)
                        })),
                    }
                }),
            );
        async move {
            submitted?;
            await_reply(rx).await
        }
    }

    /// Submit a lifecycle record (join, leave, relocation step, lifecycle control) to the Spot's
    /// own lifecycle lane (EG-7.1).
    pub fn lifecycle<F>(&self, f: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(Ctx<K::Yield>) -> Handled<()> + Send + 'static,
    {
        self.inner
            .lane
            .submit(LaneClass::Lifecycle, 0, Job::new(move |env| f(to_ctx(env))))
    }

    /// Submit a lifecycle record to an actor's own lifecycle lane (EG-7.1).
    pub fn actor_lifecycle<M, R, F>(&self, actor: &ActorRef<M, R>, f: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(Ctx<K::Yield>) -> Handled<()> + Send + 'static,
    {
        actor
            .lane
            .submit(LaneClass::Lifecycle, 0, Job::new(move |env| f(to_ctx(env))))
    }

    /// Submit application work to the Spot's own lane (a Spot handler job).
    pub fn submit<F>(&self, f: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(Ctx<K::Yield>) -> Handled<()> + Send + 'static,
    {
        self.inner.lane.submit(
            LaneClass::Application,
            0,
            Job::new(move |env| f(to_ctx(env))),
        )
    }

    /// Seal the Spot for relocation (EG-4.1): no record starts; waiting resumes fail.
    pub fn seal(&self) {
        self.inner.unit.seal();
    }

    /// Lift the seal (relocation aborted).
    pub fn unseal(&self) {
        self.inner.unit.unseal();
    }

    /// End the Spot: queued work fails, waiting resumes fail (EG-4.1), new work is refused.
    pub fn end(&self) {
        self.inner.unit.end();
    }

    /// Counters of the Spot's own lane.
    pub fn stats(&self) -> LaneStats {
        lane_stats(&self.inner.lane)
    }

    /// Queue lengths of this Spot's lanes now (its own lane, its actors' and timers'), by
    /// [`super::LaneKind`]; one short lock per gate of the Spot (see [`super::LaneDepths`]).
    pub fn lane_depths(&self) -> super::LaneDepthsByKind {
        let gates = self.inner.unit.gates();
        let mut d = super::LaneDepthsByKind::default();
        d.add_gates(&gates);
        d
    }
}

pub(crate) fn lane_stats(lane: &LaneHandle) -> LaneStats {
    lane.gate
        .gate
        .lock()
        .lane_stats(lane.lane)
        .unwrap_or_default()
}

/// The record that ends actor `object` (destroy, last handle dropped): it removes its lane —
/// only its own: a record handed back by `return_pending` and resubmitted to another actor ends
/// nothing.
fn end_job(object: u64) -> Job {
    Job::new(move |env| {
        if env.lane.object == object {
            env.lane.remove();
        }
        Handled::ok(())
    })
}
