//! [`ActorRef`]: the handle to one actor of a Spot (send, ask, in-turn asks on its lane,
//! destroy); its lane ends with its last handle.

use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::sync::atomic::Ordering;

use crate::clock::CycleStamp;
use crate::runtime::core::{LaneClass, LaneStats};
use crate::runtime::domain::spawn_infrastructure;
use crate::runtime::driver::{InlinePoll, TurnEnv};
use crate::runtime::error::{HandlerError, RuntimeError};
use crate::runtime::handled::Handled;
use crate::runtime::lane::LaneHandle;
use crate::runtime::slot::HandlerFuture;

use super::*;

/// A handle to an actor taking messages `M` and replying `R` to requests.
///
/// An actor is reachable only through its `ActorRef`s: when the last clone is dropped without
/// [`ActorRef::destroy`], the actor ends once the work queued before has run (an application
/// record at the back of its FIFO removes its lane), and its memory goes (issue 12). A Spot's
/// named actors are held by the Spot, the node's actors by the node.
pub struct ActorRef<M, R = ()> {
    pub(super) lane: Arc<LaneHandle>,
    _m: PhantomData<fn(M) -> R>,
}

impl<M, R> ActorRef<M, R> {
    /// The first handle of a new actor lane.
    pub(super) fn first(lane: Arc<LaneHandle>) -> Self {
        lane.actor_refs.store(1, Ordering::Relaxed);
        ActorRef {
            lane,
            _m: PhantomData,
        }
    }
}

impl<M, R> Clone for ActorRef<M, R> {
    fn clone(&self) -> Self {
        self.lane.actor_refs.fetch_add(1, Ordering::Relaxed);
        ActorRef {
            lane: self.lane.clone(),
            _m: PhantomData,
        }
    }
}

impl<M, R> Drop for ActorRef<M, R> {
    fn drop(&mut self) {
        if self.lane.actor_refs.fetch_sub(1, Ordering::AcqRel) != 1
            || self.lane.ending.swap(true, Ordering::AcqRel)
        {
            return;
        }
        // The last handle: end the actor after the work already queued. Submitted from a task of
        // the infrastructure domain, never here (a handle may be dropped where a gate's core is
        // locked); a full lane is waited for (the record must come after the queued work).
        let lane = self.lane.clone();
        let rt = lane.rt().clone();
        if rt.shutting_down.load(Ordering::Acquire) {
            // shutdown ends every gate: nothing to end here
            return;
        }
        spawn_infrastructure(&rt, async move {
            let end = end_job(lane.object);
            let _ = lane.submit_wait(LaneClass::Application, 0, end).await;
        });
    }
}

impl<M, R> std::fmt::Debug for ActorRef<M, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorRef")
            .field("object", &self.lane.object)
            .finish()
    }
}

impl<M, R> ActorRef<M, R> {
    pub(crate) fn lane_handle(&self) -> &Arc<LaneHandle> {
        &self.lane
    }
}

impl<M, R> ActorRef<M, R>
where
    M: Send + 'static,
    R: Send + 'static,
{
    /// Runtime-local object id.
    pub fn object_id(&self) -> u64 {
        self.lane.object
    }

    /// Counters of this actor's lane (its own queue, EG-2.1).
    pub fn stats(&self) -> LaneStats {
        lane_stats(&self.lane)
    }

    /// Seal this actor alone for relocation (EG-4.1): none of its records starts any more (a
    /// record running now finishes), a pending Yield resume of it fails; the other actors of
    /// its Spot — also under a shared SpotWide gate — keep running. Relocating a whole Spot
    /// seals the Spot instead ([`SpotRef::seal`]).
    pub fn seal(&self) {
        self.lane.gate.seal_lane(self.lane.lane);
    }

    /// Lift this actor's own seal (relocation aborted): its queued records run again in order.
    pub fn unseal(&self) {
        self.lane.gate.unseal_lane(self.lane.lane);
    }

    /// Whether this actor is sealed on its own (a read: an outstanding batch is left alone).
    pub fn is_sealed(&self) -> bool {
        self.lane
            .gate
            .gate
            .lock_unquiesced()
            .is_lane_sealed(self.lane.lane)
    }

    /// Take back this actor's queued, not yet started records (lifecycle FIFO, then application
    /// FIFO, each in FIFO order), their reservations released; its lane decision counters and
    /// debt are dropped (it moves, EG-7.5). Call it on a sealed actor.
    pub fn return_pending(&self) -> Vec<crate::runtime::PendingRecord> {
        crate::runtime::policy::return_pending_lane(&self.lane)
    }

    /// Destroy: a lifecycle record of this actor removes its lane; queued work fails.
    pub fn destroy(&self) -> Result<(), RuntimeError> {
        let r = self
            .lane
            .submit(LaneClass::Lifecycle, 0, end_job(self.lane.object));
        if r.is_ok() {
            self.lane.ending.store(true, Ordering::Release);
        }
        r
    }
}

impl<M, R> ActorRef<M, R>
where
    M: Payload + Send + 'static,
    R: Send + 'static,
{
    /// Fire-and-forget (a send). Never runs inline; a full lane refuses with
    /// `ApplicationLaneFull` (EG-6.3). A failing handler is logged and metered (EG-15).
    pub fn tell(&self, msg: M) -> Result<(), RuntimeError> {
        let len = msg.payload_len();
        self.lane
            .submit(LaneClass::Application, len, send_job::<M, R>(msg))
    }

    /// A send of `msg`, prepared but not submitted: the caller submits it with
    /// [`PendingSubmit::retry`](crate::runtime::PendingSubmit::retry) (a full lane hands it back, never
    /// dropped, never run inline) or waits for space.
    pub fn prepare_send(&self, msg: M) -> crate::runtime::PendingSubmit {
        let len = msg.payload_len();
        crate::runtime::PendingSubmit::new(
            &self.lane,
            LaneClass::Application,
            len,
            send_job::<M, R>(msg),
        )
    }

    /// [`ActorRef::prepare_send`] with the work unboxed until it must enter the lane
    /// ([`crate::runtime::pending::Prepared`]: a record that runs inline is never boxed).
    ///
    /// `stamp`: the submitter's cycle reading for this record (see
    /// [`crate::runtime::pending::Prepared::stamped`]), or [`CycleStamp::NONE`].
    pub(crate) fn prepare_send_unboxed(
        &self,
        msg: M,
        stamp: CycleStamp,
    ) -> impl crate::runtime::pending::Submission + use<'_, M, R> {
        let len = msg.payload_len();
        crate::runtime::pending::Prepared::new(
            &self.lane,
            LaneClass::Application,
            len,
            SendRecord::<M, R>::new(msg),
        )
        .stamped(stamp)
    }

    /// Fire-and-forget, waiting for application-lane space instead of failing (backpressure).
    pub async fn send(&self, msg: M) -> Result<(), RuntimeError> {
        let len = msg.payload_len();
        // admitted at once in the common case: the waiting machinery is entered only when full
        match self
            .lane
            .try_submit(LaneClass::Application, len, send_job::<M, R>(msg))
        {
            Ok(()) => Ok(()),
            Err((RuntimeError::ApplicationLaneFull(_), job)) => {
                self.lane
                    .submit_wait(LaneClass::Application, len, job)
                    .await
            }
            Err((e, _)) => Err(e),
        }
    }

    /// A request made from a handler turn of another gate (`Ctx::ask`'s normal terminal, after
    /// its EG-6.5 checks). Given the caller's task context (`cx`), a request to an idle actor
    /// whose gate is free and has nothing waiting runs in the caller's task (`docs/RUNTIME.md`,
    /// "Inline ask"): the right is taken, the handler runs (a future it returns is polled once),
    /// the result comes back by value and the right is released; a future not ready at that poll
    /// is continued by a new drain that keeps the right (or parked, if it yielded). Otherwise the
    /// request is queued like [`ActorRef::ask`].
    pub(crate) fn ask_in_turn(
        &self,
        msg: M,
        cx: Option<&mut std::task::Context<'_>>,
    ) -> AskStart<R> {
        ask_lane_in_turn::<M, R>(&self.lane, msg, cx)
    }

    /// A request from outside a turn; a handler error arrives as `RuntimeError::Handler` (EG-15).
    pub fn ask(&self, msg: M) -> impl Future<Output = Result<R, RuntimeError>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let len = msg.payload_len();
        let submitted = self
            .lane
            .submit(LaneClass::Application, len, ask_job(msg, tx));
        async move {
            submitted?;
            await_reply(rx).await
        }
    }
}

fn ask_lane_in_turn<M, R>(
    lane: &Arc<LaneHandle>,
    msg: M,
    cx: Option<&mut std::task::Context<'_>>,
) -> AskStart<R>
where
    M: Payload + Send + 'static,
    R: Send + 'static,
{
    let len = msg.payload_len();
    let started = match cx {
        Some(cx) => lane.try_start_inline(len).map(|t| (t, cx)),
        None => None,
    };
    let Some((turn, cx)) = started else {
        let (tx, rx) = oneshot::channel();
        return match lane.submit(LaneClass::Application, len, ask_job(msg, tx)) {
            Ok(()) => AskStart::Waiting(rx),
            Err(e) => AskStart::Done(Err(e)),
        };
    };
    let invocation = turn.invocation;
    let env = TurnEnv {
        lane: lane.clone(),
        invocation,
        class: LaneClass::Application,
        stamp: CycleStamp::NONE,
    };
    let r = match catch_unwind(AssertUnwindSafe(|| call_handler::<M, R>(lane, env, msg))) {
        Err(_) => Err(HandlerError::Panicked),
        Ok(Handled::Now(r)) => r,
        Ok(Handled::Later(f)) => {
            // polled once here, holding the right, as a drain would poll it first
            let mut f = CatchPanic(f);
            let polled = lane.poll_inline(invocation, cx, &mut f);
            if let InlinePoll::Ready(r) = polled {
                r
            } else {
                let (tx, rx) = oneshot::channel();
                let env_lane = lane.clone();
                let fut: HandlerFuture = Box::pin(async move {
                    let r = f.await;
                    reply(&env_lane, invocation, tx, r)
                });
                match polled {
                    // a new drain takes the right over and continues it as a normal turn
                    InlinePoll::Pending => lane.hand_off_inline(turn, fut),
                    // it asked to yield (EG-3): parked as a drain parks it, the right released
                    _ => lane.park_inline(turn, fut),
                }
                return AskStart::Waiting(rx);
            }
        }
    };
    let (out, end) = split_reply(r);
    // the record's terminal (after-work, barriers, error counted) comes before the caller
    // sees the reply, as a held reply would (EG-5.2/5.3, EG-15)
    lane.finish_inline(turn, end);
    AskStart::Done(out)
}
