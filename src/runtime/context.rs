//! Handler contexts: what a handler may do during its turn.
//!
//! The context *type* says whether Yield is offered (EG-16.1–16.4): [`Ctx<CanYield>`] (alias
//! [`SpotWideCtx`]) is handed only to SpotWide User Spot and Instance Spot turns (actor handlers,
//! Spot handlers, timers, lifecycle callbacks); every other turn (Entry Spot, Entry actor,
//! PerActor, Node, Channel, session) gets [`Ctx<NoYield>`] (alias [`SerialCtx`]), whose
//! [`PendingCall`] has no `yielding()` method at all. Operations that offer no Yield (send,
//! publish, timer registration, close, destroy, `defer()`) return plain results, not a
//! [`PendingCall`].
//!
//! Run-time misuse (a context used outside the turn that holds the gate) fails with
//! `InvalidOperation` before the call is submitted and before any queue changes (EG-16.5,
//! EG-6.5): a [`PendingCall`] holds its submission as a closure that runs only after the checks.

use std::any::Any;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;

use super::barrier::Barrier;
use super::core::{LaneClass, LaneId};
use super::domain::{Domain, current_domain, spawn_application, with_deadline};
use super::driver::TurnEnv;
use super::error::{InvalidOperation, RuntimeError, Unavailable};
use super::handled::{BoxFuture, Handled};
use super::lane::{GateInner, LaneHandle};
use super::spot::{ActorRef, AskStart, Payload, SpotKind, SpotRef, TimerRef, await_reply};

#[allow(unnameable_types)] // sealed: nameable inside the crate only, by design
mod sealed {
    pub trait Sealed {}
}

/// Whether a context offers Yield. Sealed: exactly [`CanYield`] and [`NoYield`].
pub trait YieldMode: sealed::Sealed + Send + Sync + 'static {
    /// `true` for [`CanYield`].
    const ALLOWED: bool;
}

/// Marker: the turn belongs to a SpotWide User Spot or an Instance Spot; calls offer Yield.
#[derive(Debug)]
pub enum CanYield {}

/// Marker: calls offer only the normal async terminal.
#[derive(Debug)]
pub enum NoYield {}

impl sealed::Sealed for CanYield {}
impl sealed::Sealed for NoYield {}
impl YieldMode for CanYield {
    const ALLOWED: bool = true;
}
impl YieldMode for NoYield {
    const ALLOWED: bool = false;
}

/// Context of a SpotWide User Spot / Instance Spot turn (offers Yield).
pub type SpotWideCtx = Ctx<CanYield>;
/// Context of every other turn (normal async terminal only).
pub type SerialCtx = Ctx<NoYield>;

/// The handler context of one record. Cheap to clone; a clone that outlives the record's turn is
/// rejected at run time (`InvalidOperation`).
pub struct Ctx<Y> {
    env: TurnEnv,
    _y: PhantomData<fn() -> Y>,
}

impl<Y> Clone for Ctx<Y> {
    fn clone(&self) -> Self {
        Ctx {
            env: self.env.clone(),
            _y: PhantomData,
        }
    }
}

impl<Y> std::fmt::Debug for Ctx<Y> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("object", &self.env.lane.object)
            .field("invocation", &self.env.invocation)
            .field("class", &self.env.class)
            .finish()
    }
}

/// Identity of a call's target, for the re-entrancy checks of EG-6.5.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    /// A remote or worker call: never behind this gate.
    Elsewhere,
    /// A lane behind some gate.
    Lane(*const GateInner, LaneId),
    /// Something that will need this gate (object creation in the same SpotWide Spot).
    Gate(*const GateInner),
}

// The raw pointers are compared, never dereferenced.
unsafe impl Send for Target {}

impl Target {
    fn lane(h: &LaneHandle) -> Target {
        Target::Lane(Arc::as_ptr(&h.gate), h.lane)
    }

    fn check(self, own: &LaneHandle, holds_turn: bool) -> Result<(), RuntimeError> {
        let own_gate = Arc::as_ptr(&own.gate);
        match self {
            Target::Elsewhere => Ok(()),
            Target::Lane(g, l) if g == own_gate && l == own.lane => {
                Err(InvalidOperation::AwaitOwnActor.into())
            }
            Target::Lane(g, _) | Target::Gate(g) if holds_turn && g == own_gate => {
                Err(InvalidOperation::AwaitSameGate.into())
            }
            _ => Ok(()),
        }
    }
}

type Submit<T> = Box<dyn FnOnce() -> BoxFuture<Result<T, RuntimeError>> + Send>;

/// A request to an actor lane: started inline when given the asker's task context (`Some`) and
/// the gate allows it, otherwise queued.
type AskOp<T> = Box<dyn for<'a, 'b> FnOnce(Option<&'a mut Context<'b>>) -> AskStart<T> + Send>;

/// What a [`PendingCall`] does once its checks passed.
enum CallOp<T> {
    /// Any call: submitted, then awaited.
    Submit(Submit<T>),
    /// A request to an actor: may run inline in the caller's task (`docs/RUNTIME.md`, "Inline
    /// ask").
    Ask(AskOp<T>),
}

impl<T: Send + 'static> CallOp<T> {
    /// Submit the call the queued way; the future of its result.
    fn submit(self) -> BoxFuture<Result<T, RuntimeError>> {
        match self {
            CallOp::Submit(s) => s(),
            CallOp::Ask(a) => match a(None) {
                AskStart::Done(r) => Box::pin(std::future::ready(r)),
                AskStart::Waiting(rx) => Box::pin(await_reply(rx)),
            },
        }
    }
}

/// A call made in a turn, not yet submitted. Await it for the normal async terminal (keeps the
/// gate until the result, EG-2.6), or — only in SpotWide User/Instance turns — call
/// [`PendingCall::yielding`] to release the Spot gate while waiting (EG-3).
#[must_use = "a PendingCall does nothing until awaited"]
pub struct PendingCall<T, Y> {
    origin: TurnEnv,
    target: Target,
    op: CallOp<T>,
    deadline: Option<Duration>,
    _y: PhantomData<fn() -> Y>,
}

impl<T: Send + 'static, Y: YieldMode> PendingCall<T, Y> {
    /// Fail with `DeadlineExceeded` unless the result arrives within `d`; the deadline is kept by
    /// the infrastructure domain, so it fires even when application handlers wait (EG-16.21).
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = Some(d);
        self
    }
}

impl<T: Send + 'static, Y: YieldMode> IntoFuture for PendingCall<T, Y> {
    type Output = Result<T, RuntimeError>;
    type IntoFuture = CallFuture<T>;

    /// The normal async terminal: checked, then submitted (or run inline), then awaited while
    /// keeping the gate.
    fn into_future(self) -> CallFuture<T> {
        let PendingCall {
            origin,
            target,
            op,
            deadline,
            ..
        } = self;
        CallFuture {
            state: CallStep::Start {
                origin,
                target,
                op,
                deadline,
            },
        }
    }
}

/// The normal async terminal of a [`PendingCall`] (EG-2.6: the gate is kept until the result).
/// At its first poll the call is checked (EG-16.5, EG-6.5: nothing is submitted when a check
/// fails), then submitted and awaited — except a request to an actor (`Ctx::ask`) without a
/// deadline, made from the application domain: if the target actor is idle, its gate free and
/// nothing waits there, its handler runs right here, in the caller's task, and the result
/// comes back by value (`docs/RUNTIME.md`, "Inline ask"). Such a request counts against tokio's
/// cooperative budget like a channel receive, so a handler asking in a loop still lets the
/// worker run other tasks.
#[must_use = "futures do nothing unless polled"]
pub struct CallFuture<T> {
    state: CallStep<T>,
}

enum CallStep<T> {
    Start {
        origin: TurnEnv,
        target: Target,
        op: CallOp<T>,
        deadline: Option<Duration>,
    },
    Reply(tokio::sync::oneshot::Receiver<Result<T, RuntimeError>>),
    Boxed(BoxFuture<Result<T, RuntimeError>>),
    Done,
}

impl<T: Send + 'static> Future for CallFuture<T> {
    type Output = Result<T, RuntimeError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                CallStep::Start { op, deadline, .. } => {
                    let may_inline = matches!(op, CallOp::Ask(_)) && deadline.is_none();
                    // a request that may complete without ever returning `Pending` takes from
                    // the task's cooperative budget first (as a channel receive does)
                    let coop = if may_inline {
                        Some(std::task::ready!(tokio::task::coop::poll_proceed(cx)))
                    } else {
                        None
                    };
                    let CallStep::Start {
                        origin,
                        target,
                        op,
                        deadline,
                    } = std::mem::replace(&mut this.state, CallStep::Done)
                    else {
                        unreachable!()
                    };
                    let lane = &origin.lane;
                    if !lane.slot.holds_gate(origin.invocation) {
                        return Poll::Ready(Err(InvalidOperation::OutsideTurn.into()));
                    }
                    // EG-6.5: never one's own actor, never a same-gate target: the inline path
                    // below only ever sees a target behind another gate
                    if let Err(e) = target.check(lane, true) {
                        return Poll::Ready(Err(e));
                    }
                    if let Some(c) = &coop {
                        c.made_progress();
                    }
                    match op {
                        CallOp::Ask(ask) if deadline.is_none() => {
                            // EG-13: only application-domain callers run a handler inline,
                            // and only in a tokio task, whose cooperative budget bounds a chain
                            // of inline asks (a record run inline on a plain thread, such as a
                            // mesh I/O thread, has no task budget: its asks are queued)
                            let inline = current_domain() == Some(Domain::Application)
                                && tokio::task::try_id().is_some();
                            match ask(if inline { Some(&mut *cx) } else { None }) {
                                AskStart::Done(r) => return Poll::Ready(r),
                                AskStart::Waiting(rx) => this.state = CallStep::Reply(rx),
                            }
                        }
                        op => {
                            let fut = op.submit();
                            this.state = match deadline {
                                None => CallStep::Boxed(fut),
                                Some(_) => {
                                    let rt = lane.rt().clone();
                                    CallStep::Boxed(Box::pin(async move {
                                        with_deadline(&rt, fut, deadline).await
                                    }))
                                }
                            };
                        }
                    }
                }
                CallStep::Reply(rx) => {
                    let r = std::task::ready!(Pin::new(rx).poll(cx));
                    this.state = CallStep::Done;
                    return Poll::Ready(
                        r.unwrap_or(Err(RuntimeError::Unavailable(Unavailable::Dropped))),
                    );
                }
                CallStep::Boxed(f) => {
                    let r = std::task::ready!(f.as_mut().poll(cx));
                    this.state = CallStep::Done;
                    return Poll::Ready(r);
                }
                CallStep::Done => panic!("CallFuture polled after completion"),
            }
        }
    }
}

impl<T: Send + 'static> PendingCall<T, CanYield> {
    /// The Yield terminal (EG-3): checked (EG-16.5, EG-6.5), submitted, then the Spot gate is
    /// released while the result is awaited; the actor-queue claim is kept (EG-3.1). The result
    /// re-enters as one resume record at the back of the gate's queue and the handler continues
    /// in a new turn (EG-16.8). If the Spot ends or is sealed meanwhile, the continuation never
    /// runs: the handler is dropped as cancelled (EG-4.1).
    pub fn yielding(self) -> BoxFuture<Result<T, RuntimeError>> {
        let PendingCall {
            origin,
            target,
            op,
            deadline,
            ..
        } = self;
        Box::pin(async move {
            let lane = origin.lane.clone();
            let inv = origin.invocation;
            if !lane.yield_allowed {
                return Err(InvalidOperation::YieldNotAllowed.into());
            }
            if !lane.slot.holds_gate(inv) {
                return Err(InvalidOperation::YieldOutsideTurn.into());
            }
            target.check(&lane, false)?;
            Yielding::start(lane, inv, op.submit(), deadline).await
        })
    }
}

/// The result of a Yield's call (if it arrived) and the waker to wake when it does.
type CallState<T> = (Option<Result<T, RuntimeError>>, Option<Waker>);

/// The awaited result of a Yield, filled by the call's own task.
struct CallCell<T> {
    state: std::sync::Mutex<CallState<T>>,
}

impl<T> CallCell<T> {
    fn put(&self, r: Result<T, RuntimeError>) {
        let waker = {
            let mut st = self.state.lock().unwrap();
            st.0 = Some(r);
            st.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The result if it arrived and `take`; otherwise `waker` is woken when it does. With `take`
    /// false an arrived result stays and `waker` is woken now.
    fn poll_result(&self, waker: &Waker, take: bool) -> Option<Result<T, RuntimeError>> {
        let mut st = self.state.lock().unwrap();
        if st.0.is_some() {
            if take {
                return st.0.take();
            }
            drop(st);
            waker.wake_by_ref();
            return None;
        }
        if !st.1.as_ref().is_some_and(|w| w.will_wake(waker)) {
            st.1 = Some(waker.clone());
        }
        None
    }
}

/// The Yield terminal's future (EG-3), cancel-safe (EG-2.6, EG-16.13).
///
/// The call runs in a task of its own and leaves its result in a [`CallCell`]. The first poll
/// gives the gate up (the drain parks the handler's future; its next poll is in a resume turn,
/// holding the right again). A poll holding the right returns the result if it is there, or gives
/// the gate up again (the handler was woken by something else, e.g. a `timeout` or `select!`
/// around the Yield). Dropped at any point, it leaves the record holding the gate in the turn that
/// polls it: a drop in the poll that asked to yield withdraws the request
/// ([`super::slot::Slot::cancel_yield`]); any other poll runs with the right held. The
/// call's task is aborted.
struct Yielding<T> {
    lane: Arc<LaneHandle>,
    invocation: u64,
    cell: Arc<CallCell<T>>,
    call: tokio::task::AbortHandle,
    asked: bool,
}

impl<T: Send + 'static> Yielding<T> {
    fn start(
        lane: Arc<LaneHandle>,
        invocation: u64,
        fut: BoxFuture<Result<T, RuntimeError>>,
        deadline: Option<Duration>,
    ) -> Yielding<T> {
        let cell = Arc::new(CallCell {
            state: std::sync::Mutex::new((None, None)),
        });
        let rt = lane.rt().clone();
        let filled = cell.clone();
        let task = rt.clone();
        let call = spawn_application(&rt, async move {
            let r = with_deadline(&task, fut, deadline).await;
            filled.put(r);
        })
        .abort_handle();
        Yielding {
            lane,
            invocation,
            cell,
            call,
            asked: false,
        }
    }
}

impl<T> Future for Yielding<T> {
    type Output = Result<T, RuntimeError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // the first poll always gives the gate up (a result that already arrived is kept for the
        // resume turn, which the wake-up asks for at once)
        let take = this.asked && this.lane.slot.holds_gate(this.invocation);
        if let Some(r) = this.cell.poll_result(cx.waker(), take) {
            return Poll::Ready(r);
        }
        // give the gate up (again): the drain parks the handler, a wake-up resumes it
        this.asked = true;
        this.lane.slot.begin_yield(this.invocation);
        Poll::Pending
    }
}

impl<T> Drop for Yielding<T> {
    fn drop(&mut self) {
        self.call.abort();
        self.lane.slot.cancel_yield(self.invocation);
    }
}

/// A Join intent for `defer()` (EG-5): what to run once the handler ended normally, and the
/// moving actor whose completion callback receives the result.
pub struct Join {
    barrier: Barrier,
}

impl Join {
    /// A Join of `moving`; `op` is the target operation (lookup, store I/O, ...), started only
    /// after the registering handler ended normally (EG-16.9).
    pub fn new<M, R, F, Fut>(moving: &ActorRef<M, R>, op: F) -> Join
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), RuntimeError>> + Send + 'static,
    {
        Join {
            barrier: Barrier::new(
                moving.lane_handle().clone(),
                Box::new(move || Box::pin(op())),
            ),
        }
    }
}

impl<Y: YieldMode> Ctx<Y> {
    pub(crate) fn new(env: TurnEnv) -> Self {
        Ctx {
            env,
            _y: PhantomData,
        }
    }

    /// The cycle reading taken at this turn's start boundary (`TurnEnv::stamp`: after the
    /// previous turn on this thread, nothing awaited since), for a check at the start of the
    /// turn; [`crate::runtime::CycleStamp::NONE`] when there is none. Meaningless later in
    /// the turn.
    pub(crate) fn start_stamp(&self) -> crate::runtime::CycleStamp {
        self.env.stamp
    }

    fn call<T>(&self, target: Target, submit: Submit<T>) -> PendingCall<T, Y> {
        self.call_op(target, CallOp::Submit(submit))
    }

    fn call_op<T>(&self, target: Target, op: CallOp<T>) -> PendingCall<T, Y> {
        PendingCall {
            origin: self.env.clone(),
            target,
            op,
            deadline: None,
            _y: PhantomData,
        }
    }

    fn lane(&self) -> &Arc<LaneHandle> {
        &self.env.lane
    }

    /// Never-reused identity of this record (its registration scope).
    pub fn invocation(&self) -> u64 {
        self.env.invocation
    }

    /// Fencing number of the processing right this turn runs under (white box, EG-6.1); changes
    /// after a Yield or a budget hand-off.
    pub fn right_fence(&self) -> u64 {
        self.lane().slot.fence()
    }

    /// Number of the gate turn this code runs in (white box): a record continued after a Yield
    /// runs in a new turn (EG-16.8) while its invocation stays the same.
    pub fn turn_number(&self) -> u64 {
        self.lane().slot.turn()
    }

    /// Which FIFO this record came from.
    pub fn lane_class(&self) -> LaneClass {
        self.env.class
    }

    /// The progress domain (always the application domain for handler contexts).
    pub fn domain(&self) -> Domain {
        Domain::Application
    }

    /// Whether this context's record holds the gate right now.
    pub fn in_turn(&self) -> bool {
        self.lane().slot.holds_gate(self.env.invocation)
    }

    /// Whether this context's calls offer Yield.
    pub fn yield_offered(&self) -> bool {
        Y::ALLOWED
    }

    /// A request to an actor. Awaiting one's own actor fails (EG-6.5, even with Yield); awaiting
    /// a same-gate actor with the normal terminal fails (EG-16.7).
    pub fn ask<M, R>(&self, target: &ActorRef<M, R>, msg: M) -> PendingCall<R, Y>
    where
        M: Payload + Send + 'static,
        R: Send + 'static,
    {
        // a handle, not just the lane: while the call is pending the actor is not ended by its
        // last other handle being dropped (the end record would come before this request)
        let t = target.clone();
        self.call_op(
            Target::lane(target.lane_handle()),
            CallOp::Ask(Box::new(move |cx| t.ask_in_turn(msg, cx))),
        )
    }

    /// A request to a Spot's own handler.
    pub fn ask_spot<K: SpotKind>(&self, target: &SpotRef<K>, msg: Bytes) -> PendingCall<Bytes, Y> {
        let t = target.clone();
        self.call(
            Target::lane(target.lane_handle()),
            Box::new(move || Box::pin(t.ask(msg))),
        )
    }

    /// A request to anything outside this gate (Channel, remote Spot/actor through the mesh):
    /// `submit` is called only after the checks pass, so a rejected call submits nothing.
    pub fn request<T, F, Fut>(&self, submit: F) -> PendingCall<T, Y>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, RuntimeError>> + Send + 'static,
    {
        self.call(Target::Elsewhere, Box::new(move || Box::pin(submit())))
    }

    /// A CPU/IO worker job on the application pool's blocking threads.
    pub fn worker<T, F>(&self, f: F) -> PendingCall<T, Y>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let rt = self.lane().rt().app.clone();
        self.call(
            Target::Elsewhere,
            Box::new(move || {
                Box::pin(async move {
                    rt.spawn_blocking(f)
                        .await
                        .map_err(|_| RuntimeError::Unavailable(Unavailable::Dropped))
                })
            }),
        )
    }

    /// Create an actor in `spot` (EG-3.4, EG-16.2): the result is the Ready actor after its
    /// activation ran in the actor's own turn. In this same SpotWide Spot that turn needs this
    /// gate, so only the Yield terminal can await it.
    pub fn create_actor<K, M, R, H>(
        &self,
        spot: &SpotRef<K>,
        handler: H,
    ) -> PendingCall<ActorRef<M, R>, Y>
    where
        K: SpotKind,
        M: Payload + Send + 'static,
        R: Send + 'static,
        H: Fn(Ctx<K::Yield>, M) -> Handled<R> + Send + Sync + 'static,
    {
        let spot2 = spot.clone();
        self.call(
            spot.creation_target(),
            Box::new(move || Box::pin(async move { spot2.create_actor_ready(handler).await })),
        )
    }

    /// Get the actor registered under `key` in `spot`, or create it (EG-3.4, EG-16.2).
    pub fn get_or_create_actor<K, M, R, H>(
        &self,
        spot: &SpotRef<K>,
        key: &str,
        handler: H,
    ) -> PendingCall<ActorRef<M, R>, Y>
    where
        K: SpotKind,
        M: Payload + Send + 'static,
        R: Send + 'static,
        H: Fn(Ctx<K::Yield>, M) -> Handled<R> + Send + Sync + 'static,
    {
        let spot2 = spot.clone();
        let key = key.to_owned();
        self.call(
            spot.creation_target(),
            Box::new(move || {
                Box::pin(async move {
                    if let Some(existing) = spot2.named::<M, R>(&key) {
                        return Ok(existing);
                    }
                    let a = spot2.create_actor_ready(handler).await?;
                    Ok(spot2.register_named(&key, a))
                })
            }),
        )
    }

    /// Fire-and-forget to an actor (no Yield, EG-16.4). To oneself it is appended to the queue
    /// (EG-6.5); a full lane refuses instead of running inline (EG-6.3).
    pub fn send<M, R>(&self, target: &ActorRef<M, R>, msg: M) -> Result<(), RuntimeError>
    where
        M: Payload + Send + 'static,
        R: Send + 'static,
    {
        target.tell(msg)
    }

    /// Send one message to each target (no Yield, EG-16.4). Returns how many were admitted.
    pub fn publish<M, R>(&self, targets: &[ActorRef<M, R>], msg: M) -> Result<usize, RuntimeError>
    where
        M: Payload + Clone + Send + 'static,
        R: Send + 'static,
    {
        let mut n = 0;
        for t in targets {
            if t.tell(msg.clone()).is_ok() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Register a timer in `spot` (no Yield, EG-16.4).
    pub fn add_timer<K, F>(&self, spot: &SpotRef<K>, callback: F) -> Result<TimerRef, RuntimeError>
    where
        K: SpotKind,
        F: Fn(Ctx<K::Yield>) -> Handled<()> + Send + Sync + 'static,
    {
        spot.add_timer(callback)
    }

    /// Destroy an actor (no Yield, EG-16.4): a lifecycle record of that actor removes it.
    pub fn destroy<M, R>(&self, actor: &ActorRef<M, R>) -> Result<(), RuntimeError>
    where
        M: Send + 'static,
        R: Send + 'static,
    {
        actor.destroy()
    }

    /// Close a Spot (no Yield, EG-16.4): queued work fails, waiting resumes fail (EG-4.1).
    pub fn close<K: SpotKind>(&self, spot: &SpotRef<K>) -> Result<(), RuntimeError> {
        spot.end();
        Ok(())
    }

    /// Register a Join barrier (EG-5.1): synchronous, no result, no target I/O; keeps the gate and
    /// the claim. Activated only when the handler ends normally (EG-5.2), discarded otherwise
    /// (EG-5.3); the Join result goes to the moving actor's completion callback (EG-5.4).
    /// Outside the registration scope: `InvalidOperation` (EG-5.5).
    /// Registration errors (wrong scope, limit) are synchronous and before any target I/O
    /// (EG-5.6); the `Ok` carries no result.
    pub fn defer(&self, join: Join) -> Result<(), RuntimeError> {
        let limit = self.lane().rt().config.max_defers_per_handler;
        self.lane()
            .slot
            .register_barrier(self.env.invocation, limit, join.barrier)
    }

    /// Register post-processing for this record (EG-8): it runs at the record's terminal, before
    /// the right moves on, exactly once.
    pub fn after_turn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), RuntimeError> {
        self.lane()
            .slot
            .register_after(self.env.invocation, Box::new(f))
    }

    /// Publish a status to the runtime's bounded, coalescing subscribers (EG-13).
    pub fn publish_status(&self, source: &str, status: &str) {
        self.lane().rt().status.publish(source, status);
    }
}

pub(crate) fn downcast_actor<M: 'static, R: 'static>(
    b: &(dyn Any + Send + Sync),
) -> Option<ActorRef<M, R>> {
    b.downcast_ref::<ActorRef<M, R>>().cloned()
}

pub(crate) fn gate_target(gate: &Arc<GateInner>) -> Target {
    Target::Gate(Arc::as_ptr(gate))
}
