//! Actor execution on the lane runtime (`crate::runtime`): each actor is an actor lane of its
//! Spot (its own queue, EG-2.1); the Spot kind decides the gate (EG-1.3, EG-2): SpotWide User
//! and Instance Spots share one gate, Entry and PerActor actors have their own.
//!
//! This is the narrow seam between the node and the execution engine: the node calls
//! [`RtSpot::create`], [`spawn`], [`Mailbox::submit`] and [`Mailbox::end`] only.
//!
//! Invariants: a `Later` handler keeps the turn (and a SpotWide gate) until it completes
//! (EG-2.6); a full lane makes the submitter wait — work never runs inline (EG-6.3); work that
//! is dropped before its terminal (the actor ended, the runtime shut down) answers its request
//! with [`ActorError::Ended`], never with silence; while the application domain is PAUSED a turn
//! that starts waits before it runs the handler.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{Notify, oneshot, watch};
use zlink_mesh::ReplyHandle;
use zlink_wire::{ActorId, DispatchKey};

use super::error::ActorError;
use super::message::{ActorCtx, HandlerError};
use super::registry::{ActorInstance, Outcome, ReplyUse, Step, TurnCtx};
use super::spot::{SpotKind, UserMode};
use crate::runtime::{
    self, CanYield, Ctx, CycleStamp, EntrySpot, InstanceSpot, NoYield, Payload, PerActorUser,
    Runtime, RuntimeError, SpotRef, SpotWideUser,
};

/// Where a request's terminal goes.
pub(crate) enum ReplyTo {
    /// A request that arrived over the mesh or ClientServer: answered on its connection.
    Wire(ReplyHandle),
    /// A request from this process.
    Local(oneshot::Sender<Outcome>),
}

impl ReplyTo {
    pub(crate) fn complete(self, out: Outcome) {
        match self {
            ReplyTo::Wire(h) => match out {
                Ok(b) => h.reply(b),
                Err(e) => h.error(e.kind(), e.to_string()),
            },
            ReplyTo::Local(tx) => {
                let _ = tx.send(out);
            }
        }
    }
}

/// Counts accepted work until its terminal; shutdown waits for zero (SB-10).
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    count: AtomicUsize,
    /// Tasks in [`Inflight::wait_idle`]. The guard that brings the count to zero notifies only
    /// when one waits: an actor's turn counter reaches zero after every message, and
    /// `Notify::notify_waiters` takes a lock each time.
    waiters: AtomicUsize,
    idle: Notify,
}

impl Inflight {
    pub(crate) fn enter(self: &Arc<Self>) -> InflightGuard {
        self.count.fetch_add(1, Ordering::AcqRel);
        InflightGuard(self.clone())
    }

    /// [`Inflight::enter`] for work that ends before the caller returns: counted the same,
    /// without a reference count of its own ([`InflightRef::into_owned`] takes one when the
    /// work outlives the call).
    pub(crate) fn enter_ref(&self) -> InflightRef<'_> {
        self.count.fetch_add(1, Ordering::AcqRel);
        InflightRef(self)
    }

    /// Leaves: the last one out wakes the waiters of [`Inflight::wait_idle`].
    fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.waiters.load(Ordering::SeqCst) > 0
        {
            self.idle.notify_waiters();
        }
    }

    pub(crate) fn current(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Waits until no work is in flight.
    pub(crate) async fn wait_idle(&self) {
        // Registered before the count is read, both sequentially consistent with the guard's
        // decrement and its read of `waiters`: either the guard sees this waiter (and
        // notifies), or this read sees the count the guard left.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiters);
        loop {
            let notified = self.idle.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Held by one accepted unit of work.
#[derive(Debug)]
pub(crate) struct InflightGuard(Arc<Inflight>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Held by one accepted unit of work that ends within its caller's scope
/// ([`Inflight::enter_ref`]).
#[derive(Debug)]
pub(crate) struct InflightRef<'a>(&'a Inflight);

impl InflightRef<'_> {
    /// The same unit of work, held past the caller's scope; `of` is the [`Inflight`] this guard
    /// counts in (its count is not touched: the work stays counted once).
    pub(crate) fn into_owned(self, of: &Arc<Inflight>) -> InflightGuard {
        debug_assert!(std::ptr::eq(self.0, Arc::as_ptr(of)));
        std::mem::forget(self);
        InflightGuard(of.clone())
    }
}

impl Drop for InflightRef<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// One queued message. Dropping it unanswered answers its request with
/// [`ActorError::Ended`] (exactly one terminal, SB-12).
pub(crate) struct Work {
    pub key: DispatchKey,
    pub payload: Bytes,
    pub reply: Option<ReplyTo>,
    pub deadline: Option<Instant>,
    /// Released when the work is dropped, i.e. after its terminal (shutdown drain, SB-10).
    #[allow(dead_code)]
    pub guard: Option<InflightGuard>,
}

impl Work {
    /// No work: no payload, reply, deadline or guard (dropping it does nothing). Left in the
    /// place of work moved away from behind a reference.
    pub(crate) fn vacant() -> Work {
        Work {
            key: DispatchKey::new(0),
            payload: Bytes::new(),
            reply: None,
            deadline: None,
            guard: None,
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if let Some(r) = self.reply.take() {
            r.complete(Err(ActorError::Ended));
        }
    }
}

impl Payload for Work {
    fn payload_len(&self) -> usize {
        self.payload.len()
    }
}

/// Why an actor's lane ended: decides the terminal of work that finds it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndReason {
    /// `destroy` (SB-4.1): later work is `NotFound`.
    Destroyed,
    /// The node stopped owning it (lease lost, shutdown, failed activation): later work is
    /// `Unavailable` ([`ActorError::Ended`]).
    Fenced,
}

const LIVE: u8 = 0;
const DESTROYED: u8 = 1;
const FENCED: u8 = 2;

/// The end state of one actor lane, shared by its mailbox and its turns.
#[derive(Debug, Default)]
struct EndState(AtomicU8);

impl EndState {
    fn set(&self, reason: EndReason) {
        let v = match reason {
            EndReason::Destroyed => DESTROYED,
            EndReason::Fenced => FENCED,
        };
        // The first reason stays.
        let _ = self
            .0
            .compare_exchange(LIVE, v, Ordering::AcqRel, Ordering::Acquire);
    }

    fn error(&self, actor_id: &ActorId) -> Option<ActorError> {
        match self.0.load(Ordering::Acquire) {
            LIVE => None,
            DESTROYED => Some(ActorError::ActorNotFound {
                actor_id: actor_id.clone(),
            }),
            _ => Some(ActorError::Ended),
        }
    }
}

/// State shared by every actor of a node.
#[derive(Debug)]
pub(crate) struct ExecShared {
    /// `true` = the application domain is PAUSED: no handler runs. The receiver of
    /// `watch::channel(false)` itself, never marked seen: while its value never changed
    /// (`has_changed` is `false`, one atomic load) the domain was never paused, and a turn
    /// start skips the value's read lock.
    pub paused: watch::Receiver<bool>,
    /// Send-handler failures (EG-15: logged and counted).
    pub send_failures: AtomicU64,
    /// Turns started (a PAUSED turn counts when it starts waiting).
    pub turns: AtomicU64,
    /// The owner's standing: past the local lease deadline no turn starts (SB-5.11).
    pub gate: Arc<super::fence::OwnerGate>,
    /// Turns running now (started, terminal not reached): shutdown waits for none before it
    /// releases the owner lease (SB-10).
    pub running: Arc<Inflight>,
}

/// A Spot on the runtime, whatever its kind.
#[derive(Clone, Debug)]
pub(crate) enum RtSpot {
    Entry(SpotRef<EntrySpot>),
    SpotWide(SpotRef<SpotWideUser>),
    PerActor(SpotRef<PerActorUser>),
    Instance(SpotRef<InstanceSpot>),
}

fn no_spot_handler<Y>(_: Ctx<Y>, _: Bytes) -> runtime::Handled<Bytes> {
    runtime::Handled::ok(Bytes::new())
}

fn runtime_error(actor_id: &ActorId, e: RuntimeError) -> ActorError {
    match e {
        RuntimeError::ApplicationLaneFull(_) | RuntimeError::LifecycleLaneFull(_) => {
            ActorError::LaneFull {
                actor_id: actor_id.clone(),
            }
        }
        RuntimeError::Unavailable(runtime::Unavailable::ShutDown) => ActorError::ShuttingDown,
        RuntimeError::DeadlineExceeded => ActorError::DeadlineExceeded,
        _ => ActorError::Ended,
    }
}

impl RtSpot {
    /// Creates a Spot of `kind` on `rt` (its own handler is a no-op for now).
    pub(crate) fn create(rt: &Runtime, kind: SpotKind) -> Result<RtSpot, ActorError> {
        let r = match kind {
            SpotKind::Entry => rt
                .create_spot::<EntrySpot, _>(no_spot_handler)
                .map(RtSpot::Entry),
            SpotKind::User(UserMode::SpotWide) => rt
                .create_spot::<SpotWideUser, _>(no_spot_handler)
                .map(RtSpot::SpotWide),
            SpotKind::User(UserMode::PerActor) => rt
                .create_spot::<PerActorUser, _>(no_spot_handler)
                .map(RtSpot::PerActor),
            SpotKind::Instance => rt
                .create_spot::<InstanceSpot, _>(no_spot_handler)
                .map(RtSpot::Instance),
        };
        r.map_err(|_| ActorError::ShuttingDown)
    }

    /// Queue lengths of the Spot's lanes now (its own, its actors' and timers').
    pub(crate) fn lane_depths(&self) -> runtime::LaneDepthsByKind {
        match self {
            RtSpot::Entry(s) => s.lane_depths(),
            RtSpot::SpotWide(s) => s.lane_depths(),
            RtSpot::PerActor(s) => s.lane_depths(),
            RtSpot::Instance(s) => s.lane_depths(),
        }
    }

    /// Runs `f` as a lifecycle turn of the Spot's own lane (behind the Spot gate where the kind
    /// shares it) and waits for its terminal (SB-7.6 Spot callbacks).
    pub(crate) async fn run_lifecycle(
        &self,
        f: runtime::BoxFuture<Result<(), HandlerError>>,
    ) -> Result<(), HandlerError> {
        fn job<Y>(
            f: runtime::BoxFuture<Result<(), HandlerError>>,
            tx: oneshot::Sender<Result<(), HandlerError>>,
        ) -> impl FnOnce(Ctx<Y>) -> runtime::Handled<()> {
            move |_ctx| {
                runtime::Handled::later(async move {
                    let _ = tx.send(f.await);
                    Ok(())
                })
            }
        }
        let (tx, rx) = oneshot::channel();
        let submitted = match self {
            RtSpot::Entry(s) => s.lifecycle(job(f, tx)),
            RtSpot::SpotWide(s) => s.lifecycle(job(f, tx)),
            RtSpot::PerActor(s) => s.lifecycle(job(f, tx)),
            RtSpot::Instance(s) => s.lifecycle(job(f, tx)),
        };
        submitted.map_err(|e| HandlerError::new(format!("spot lane: {e}")))?;
        rx.await.unwrap_or(Err(HandlerError::Cancelled))
    }

    /// Adds a timer to the Spot: each tick is application work on the timer's lane, behind the
    /// Spot gate (SpotWide, Instance, Entry) or its own gate (PerActor) (EG-2.2, EG-2.3,
    /// EG-2.5); the ticks are scheduled by the runtime's infrastructure domain.
    pub(crate) fn start_timer(
        &self,
        period: std::time::Duration,
        tick: impl Fn() + Send + Sync + 'static,
    ) -> Result<tokio::task::JoinHandle<()>, ActorError> {
        fn cb<Y>(tick: Arc<dyn Fn() + Send + Sync>) -> impl Fn(Ctx<Y>) -> runtime::Handled<()> {
            move |_ctx| {
                tick();
                runtime::Handled::ok(())
            }
        }
        let tick: Arc<dyn Fn() + Send + Sync> = Arc::new(tick);
        let timer = match self {
            RtSpot::Entry(s) => s.add_timer(cb(tick)),
            RtSpot::SpotWide(s) => s.add_timer(cb(tick)),
            RtSpot::PerActor(s) => s.add_timer(cb(tick)),
            RtSpot::Instance(s) => s.add_timer(cb(tick)),
        }
        .map_err(|_| ActorError::ShuttingDown)?;
        Ok(timer.start(period))
    }

    /// Whole-Spot relocation (source): one lifecycle record of the Spot's own lane seals the
    /// Spot — every gate of it, so no record of any member starts after this one and a pending
    /// Yield resume of a member fails (EG-4.1) — and dehydrates each of `members`, in order.
    /// Only the Spot gate layout (SpotWide User, Instance) runs that record exclusively of every
    /// member's turns, so only those kinds move as a unit. The record is queued when this
    /// returns; the receiver resolves with the states. Other Spots of the node are untouched.
    pub(crate) fn seal_and_dehydrate(
        &self,
        members: &[Mailbox],
    ) -> Result<oneshot::Receiver<Result<Vec<super::MigratedState>, ActorError>>, ActorError> {
        type Seal = Box<dyn FnOnce() + Send>;
        fn job<Y>(
            seal: Seal,
            cells: Vec<Arc<Cell>>,
            tx: oneshot::Sender<Result<Vec<super::MigratedState>, ActorError>>,
        ) -> impl FnOnce(Ctx<Y>) -> runtime::Handled<()> + Send + 'static {
            move |_ctx| {
                seal();
                let out = cells
                    .iter()
                    .map(|cell| {
                        let instance = cell.instance.lock().unwrap_or_else(|e| e.into_inner());
                        match instance.as_ref() {
                            Some(i) => i.dehydrate().map_err(ActorError::from),
                            None => Err(ActorError::NotReady {
                                actor_id: cell.actor_id.clone(),
                            }),
                        }
                    })
                    .collect();
                let _ = tx.send(out);
                runtime::Handled::ok(())
            }
        }
        let (tx, rx) = oneshot::channel();
        let cells: Vec<Arc<Cell>> = members.iter().map(Mailbox::cell).collect();
        let submitted = match self {
            RtSpot::SpotWide(s) => {
                let spot = s.clone();
                s.lifecycle(job(Box::new(move || spot.seal()), cells, tx))
            }
            RtSpot::Instance(s) => {
                let spot = s.clone();
                s.lifecycle(job(Box::new(move || spot.seal()), cells, tx))
            }
            RtSpot::Entry(_) | RtSpot::PerActor(_) => {
                return Err(ActorError::Codec(
                    "only a SpotWide User or Instance Spot moves as a unit".into(),
                ));
            }
        };
        submitted.map_err(|_| ActorError::Ended)?;
        Ok(rx)
    }

    /// Lift a whole-Spot relocation seal (relocation aborted): the members' queued records run.
    pub(crate) fn unseal(&self) {
        match self {
            RtSpot::Entry(s) => s.unseal(),
            RtSpot::SpotWide(s) => s.unseal(),
            RtSpot::PerActor(s) => s.unseal(),
            RtSpot::Instance(s) => s.unseal(),
        }
    }

    /// Ends the Spot (its queued work fails).
    pub(crate) fn end(&self) {
        match self {
            RtSpot::Entry(s) => s.end(),
            RtSpot::SpotWide(s) => s.end(),
            RtSpot::PerActor(s) => s.end(),
            RtSpot::Instance(s) => s.end(),
        }
    }
}

/// The user factory of one incarnation, run once in the actor's first lifecycle turn.
pub(crate) type Factory =
    Box<dyn FnOnce() -> Result<Box<dyn ActorInstance>, HandlerError> + Send + 'static>;

/// One actor's state and handler table, run by its lane's turns. The instance is `None` until
/// the factory's lifecycle turn filled it; no application record reaches the lane before that
/// (the mailbox is published only after Ready).
struct Cell {
    actor_id: ActorId,
    instance: std::sync::Mutex<Option<Box<dyn ActorInstance>>>,
    ctx: ActorCtx,
    ended: Arc<EndState>,
    shared: Arc<ExecShared>,
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cell")
            .field("actor_id", &self.actor_id)
            .finish_non_exhaustive()
    }
}

impl Cell {
    fn finish(&self, reply: Option<ReplyTo>, out: Outcome) {
        match reply {
            Some(r) => r.complete(out),
            None => {
                if let Err(e) = out {
                    self.shared.send_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(actor = %self.actor_id, error = %e, "send handler failed");
                }
            }
        }
    }

    /// Runs the handler; the mutex is never held across an await (the gate already serialises
    /// the turns of one actor, so it is uncontended).
    fn step(&self, turn: &TurnCtx, key: DispatchKey, payload: Bytes, reply: ReplyUse) -> Step {
        let mut instance = self.instance.lock().unwrap_or_else(|e| e.into_inner());
        match instance.as_mut() {
            Some(i) => i.handle(&self.ctx, turn, key, payload, reply),
            None => Step::Now(Err(ActorError::NotReady {
                actor_id: self.actor_id.clone(),
            })),
        }
    }

    /// Checks that must pass before the handler runs; `Some` = answered without running. The
    /// lease standing is asked at `at`, a cycle reading taken at this turn's start boundary
    /// (`CycleStamp::NONE`: read now).
    fn refuse(&self, work: &Work, at: CycleStamp) -> Option<ActorError> {
        if let Some(e) = self.ended.error(&self.actor_id) {
            return Some(e);
        }
        if work.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(ActorError::DeadlineExceeded);
        }
        self.shared.gate.standing_at(at).run_turn().err()
    }

    /// Whether the application domain is PAUSED now (see [`ExecShared::paused`]).
    fn paused(&self) -> bool {
        match self.shared.paused.has_changed() {
            Ok(false) => false,
            _ => *self.shared.paused.borrow(),
        }
    }

    /// One turn of `work`; `at`: the cycle reading at the turn's start boundary
    /// (`Ctx::start_stamp`), or `CycleStamp::NONE`.
    fn run(
        self: &Arc<Self>,
        turn: TurnCtx,
        mut work: Work,
        at: CycleStamp,
    ) -> runtime::Handled<()> {
        self.shared.turns.fetch_add(1, Ordering::Relaxed);
        let running = self.shared.running.enter_ref();
        let reply = work.reply.take();
        // A send's reply is read by nobody: not encoded.
        let reply_use = match reply {
            Some(_) => ReplyUse::Read,
            None => ReplyUse::Unread,
        };
        if self.paused() {
            let running = running.into_owned(&self.shared.running);
            let cell = self.clone();
            return runtime::Handled::later(async move {
                let _running = running;
                let mut paused = cell.shared.paused.clone();
                while *paused.borrow_and_update() {
                    if paused.changed().await.is_err() {
                        break;
                    }
                }
                if let Some(e) = cell.refuse(&work, CycleStamp::NONE) {
                    cell.finish(reply, Err(e));
                    return Ok(());
                }
                let payload = std::mem::take(&mut work.payload);
                let out = match cell.step(&turn, work.key, payload, reply_use) {
                    Step::Now(o) => o,
                    Step::Later(f) => f.await,
                };
                cell.finish(reply, out);
                drop(work);
                Ok(())
            });
        }
        if let Some(e) = self.refuse(&work, at) {
            self.finish(reply, Err(e));
            return runtime::Handled::ok(());
        }
        match self.step(
            &turn,
            work.key,
            std::mem::take(&mut work.payload),
            reply_use,
        ) {
            Step::Now(out) => {
                self.finish(reply, out);
                runtime::Handled::ok(())
            }
            Step::Later(f) => {
                let running = running.into_owned(&self.shared.running);
                let cell = self.clone();
                let mut reply = Unanswered(reply);
                runtime::Handled::later(async move {
                    let _running = running;
                    let out = f.await;
                    cell.finish(reply.0.take(), out);
                    drop(work);
                    Ok(())
                })
            }
        }
    }
}

/// The reply of a turn whose handler went `Later`: answered by the turn's end, or — when the
/// runtime drops the turn before that (its Yield resume refused: the unit was sealed for
/// relocation or ended, EG-4.1) — answered [`ActorError::ResumeRefused`] here, once.
struct Unanswered(Option<ReplyTo>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.complete(Err(ActorError::ResumeRefused));
        }
    }
}

/// The lane handler of an actor whose Spot turns can yield (SpotWide User, Instance).
fn yielding_handler(
    cell: Arc<Cell>,
) -> impl Fn(Ctx<CanYield>, Work) -> runtime::Handled<()> + Send + Sync + 'static {
    move |ctx, work| {
        let at = ctx.start_stamp();
        cell.run(TurnCtx::Yielding(ctx), work, at)
    }
}

/// The lane handler of an actor whose turns cannot yield (Entry, PerActor).
fn serial_handler(
    cell: Arc<Cell>,
) -> impl Fn(Ctx<NoYield>, Work) -> runtime::Handled<()> + Send + Sync + 'static {
    move |ctx, work| cell.run(TurnCtx::Serial, work, ctx.start_stamp())
}

/// The enqueue side of one actor's lane. One shared allocation: the submitter takes a copy of
/// it out of the actors lock for each record, and a copy is one reference count (the lane's
/// handle and end state, whose counts the lane's workers touch, are not counted per record).
#[derive(Clone, Debug)]
pub(crate) struct Mailbox(Arc<MailboxInner>);

#[derive(Debug)]
pub(crate) struct MailboxInner {
    actor_id: ActorId,
    lane: runtime::ActorRef<Work, ()>,
    ended: Arc<EndState>,
    /// The instance's cell (relocation dehydrates it in the actor's last turn here).
    cell: Arc<Cell>,
}

impl std::ops::Deref for Mailbox {
    type Target = MailboxInner;

    fn deref(&self) -> &MailboxInner {
        &self.0
    }
}

impl Mailbox {
    /// Appends `work` to the actor's lane, waiting while the application lane is full
    /// (backpressure; nothing runs inline). On failure the work was dropped, which already
    /// answered its request.
    pub(crate) async fn submit(&self, mut work: Work) -> Result<(), ActorError> {
        if let Some(e) = self.ended.error(&self.actor_id) {
            if let Some(r) = work.reply.take() {
                r.complete(Err(self
                    .ended
                    .error(&self.actor_id)
                    .unwrap_or(ActorError::Ended)));
            }
            return Err(e);
        }
        self.lane
            .send(work)
            .await
            .map_err(|e| runtime_error(&self.actor_id, e))
    }

    /// `work` prepared for this actor's lane, not yet submitted (see
    /// [`crate::runtime::PendingSubmit`]): the submitter tries it without waiting and keeps it
    /// when the lane is full.
    ///
    /// `at`: the submitter's cycle reading taken for this record just before (its admission
    /// check's, [`super::fence::OwnerGate::stamp`]), or `CycleStamp::NONE`: a turn started
    /// inline at the submission's first offer asks its lease standing at that reading.
    pub(crate) fn prepare(
        &self,
        work: Work,
        at: CycleStamp,
    ) -> Result<impl runtime::Submission + use<'_>, ActorError> {
        if let Some(e) = self.ended.error(&self.actor_id) {
            drop(work);
            return Err(e);
        }
        Ok(self.lane.prepare_send_unboxed(work, at))
    }

    /// The error a refusal of this actor's lane means.
    pub(crate) fn error_of(&self, e: RuntimeError) -> ActorError {
        runtime_error(&self.actor_id, e)
    }

    /// Appends `work` without waiting; a full lane drops it (a timer tick is skipped, never
    /// run inline).
    pub(crate) fn tell(&self, work: Work) -> Result<(), ActorError> {
        if let Some(e) = self.ended.error(&self.actor_id) {
            return Err(e);
        }
        self.lane
            .tell(work)
            .map_err(|e| runtime_error(&self.actor_id, e))
    }

    /// Ends the actor for `reason`: its lane is removed by a lifecycle record; queued work is
    /// answered (`Ended`, or `NotFound` after a destroy), never run.
    pub(crate) fn end(&self, reason: EndReason) {
        self.ended.set(reason);
        if let Err(e) = self.lane.destroy() {
            tracing::debug!(actor = %self.actor_id, error = %e, "actor lane already gone");
        }
    }
}

impl Mailbox {
    /// Relocation (source): a lifecycle record of this actor seals its lane alone (no record
    /// of it starts after this one; a pending Yield resume of it fails, EG-4.1) and dehydrates
    /// its instance — the actor's last turn on this node. The record is queued when this
    /// returns; the receiver resolves with the state.
    pub(crate) fn seal_and_dehydrate(
        &self,
        spot: &RtSpot,
    ) -> Result<oneshot::Receiver<Result<super::MigratedState, ActorError>>, ActorError> {
        let (tx, rx) = oneshot::channel();
        let lane = self.lane.clone();
        let cell = self.cell.clone();
        fn job<Y>(
            lane: runtime::ActorRef<Work, ()>,
            cell: Arc<Cell>,
            tx: oneshot::Sender<Result<super::MigratedState, ActorError>>,
        ) -> impl FnOnce(Ctx<Y>) -> runtime::Handled<()> + Send + 'static {
            move |_ctx| {
                lane.seal();
                let instance = cell.instance.lock().unwrap_or_else(|e| e.into_inner());
                let out = match instance.as_ref() {
                    Some(i) => i.dehydrate().map_err(ActorError::from),
                    None => Err(ActorError::NotReady {
                        actor_id: cell.actor_id.clone(),
                    }),
                };
                let _ = tx.send(out);
                runtime::Handled::ok(())
            }
        }
        let submitted = match spot {
            RtSpot::Entry(s) => s.actor_lifecycle(&self.lane, job(lane, cell, tx)),
            RtSpot::SpotWide(s) => s.actor_lifecycle(&self.lane, job(lane, cell, tx)),
            RtSpot::PerActor(s) => s.actor_lifecycle(&self.lane, job(lane, cell, tx)),
            RtSpot::Instance(s) => s.actor_lifecycle(&self.lane, job(lane, cell, tx)),
        };
        submitted.map_err(|e| runtime_error(&self.actor_id, e))?;
        Ok(rx)
    }

    /// The instance's cell (a Spot relocation dehydrates every member in one turn).
    fn cell(&self) -> Arc<Cell> {
        self.cell.clone()
    }

    /// The counters of this actor's lane now (queues, reservations, EG-7.4 decision state).
    pub(crate) fn lane_stats(&self) -> runtime::LaneStats {
        self.lane.stats()
    }

    /// Lift the relocation seal of this actor (relocation aborted): its queued records run.
    pub(crate) fn unseal(&self) {
        self.lane.unseal();
    }

    /// Take back this actor's queued, not yet started records in FIFO order (relocation
    /// capture; the lane must be sealed). Records that are not actor work (none are queued
    /// for an actor lane today) are counted in the second value and dropped.
    pub(crate) fn take_pending(&self) -> (Vec<Work>, usize) {
        let mut out = Vec::new();
        let mut other = 0;
        for r in self.lane.return_pending() {
            match r.into_message::<Work, ()>() {
                Ok(w) => out.push(w),
                Err(_) => other += 1,
            }
        }
        (out, other)
    }
}

/// The lifecycle record that runs the factory on the actor's lane and installs its instance.
fn factory_job<Y>(
    cell: Arc<Cell>,
    factory: Factory,
    done: oneshot::Sender<Result<(), HandlerError>>,
) -> impl FnOnce(Ctx<Y>) -> runtime::Handled<()> + Send + 'static {
    move |_ctx| {
        let result = factory().map(|instance| {
            *cell.instance.lock().unwrap_or_else(|e| e.into_inner()) = Some(instance);
        });
        let _ = done.send(result);
        runtime::Handled::ok(())
    }
}

/// Why an activation's factory turn did not install an instance.
#[derive(Debug)]
pub(crate) enum FactoryFailed {
    /// The user factory returned an error.
    Factory(HandlerError),
    /// The lane or the runtime ended before the factory turn ran.
    Lane(ActorError),
}

/// Registers an actor lane on `spot` and runs `factory` as the first record of its lifecycle
/// FIFO: an application turn on the actor's own lane, behind its gate (EG-14, EG-13, EG-1.1).
/// Resolves once the factory turn has finished; on failure the lane is ended.
pub(crate) async fn spawn(
    actor_id: ActorId,
    factory: Factory,
    ctx: ActorCtx,
    spot: &RtSpot,
    shared: Arc<ExecShared>,
) -> Result<Mailbox, FactoryFailed> {
    let ended = Arc::new(EndState::default());
    let cell = Arc::new(Cell {
        actor_id: actor_id.clone(),
        instance: std::sync::Mutex::new(None),
        ctx,
        ended: ended.clone(),
        shared,
    });
    let lane = match spot {
        RtSpot::Entry(s) => s.spawn_actor(serial_handler(cell.clone())),
        RtSpot::SpotWide(s) => s.spawn_actor(yielding_handler(cell.clone())),
        RtSpot::PerActor(s) => s.spawn_actor(serial_handler(cell.clone())),
        RtSpot::Instance(s) => s.spawn_actor(yielding_handler(cell.clone())),
    }
    .map_err(|e| FactoryFailed::Lane(runtime_error(&actor_id, e)))?;
    let mailbox = Mailbox(Arc::new(MailboxInner {
        actor_id,
        lane,
        ended,
        cell: cell.clone(),
    }));
    let (tx, rx) = oneshot::channel();
    let submitted = match spot {
        RtSpot::Entry(s) => s.actor_lifecycle(&mailbox.lane, factory_job(cell, factory, tx)),
        RtSpot::SpotWide(s) => s.actor_lifecycle(&mailbox.lane, factory_job(cell, factory, tx)),
        RtSpot::PerActor(s) => s.actor_lifecycle(&mailbox.lane, factory_job(cell, factory, tx)),
        RtSpot::Instance(s) => s.actor_lifecycle(&mailbox.lane, factory_job(cell, factory, tx)),
    };
    let result = match submitted {
        Err(e) => Err(FactoryFailed::Lane(runtime_error(&mailbox.actor_id, e))),
        Ok(()) => match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(FactoryFailed::Factory(e)),
            // The record was dropped unrun: the lane or the runtime ended.
            Err(_) => Err(FactoryFailed::Lane(ActorError::Ended)),
        },
    };
    match result {
        Ok(()) => Ok(mailbox),
        Err(e) => {
            mailbox.end(EndReason::Fenced);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last guard notifies a waiter that registered while work was in flight, and a
    /// waiter that comes after the count reached zero returns at once (no lost wake-up either
    /// way, SB-10's drain).
    #[tokio::test]
    async fn wait_idle_wakes_when_the_last_guard_drops() {
        let inflight = Arc::new(Inflight::default());
        let guard = inflight.enter();
        let second = inflight.enter();
        let waiter = tokio::spawn({
            let inflight = inflight.clone();
            async move { inflight.wait_idle().await }
        });
        while inflight.waiters.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        drop(second);
        assert!(!waiter.is_finished());
        drop(guard);
        tokio::time::timeout(std::time::Duration::from_secs(20), waiter)
            .await
            .expect("wait_idle woke")
            .unwrap();
        assert_eq!(inflight.waiters.load(Ordering::SeqCst), 0);
        // Nobody waits now: the guard skips the notification, a later waiter sees zero.
        drop(inflight.enter());
        tokio::time::timeout(std::time::Duration::from_secs(20), inflight.wait_idle())
            .await
            .expect("idle at once");
    }

    /// A borrowed guard counts like an owned one, and one turned into an owned guard stays
    /// counted once until that guard drops (a turn that goes `Later` keeps shutdown waiting).
    #[tokio::test]
    async fn a_borrowed_guard_counts_once_and_can_outlive_its_scope() {
        let inflight = Arc::new(Inflight::default());
        let borrowed = inflight.enter_ref();
        assert_eq!(inflight.current(), 1);
        drop(borrowed);
        assert_eq!(inflight.current(), 0);
        let owned = inflight.enter_ref().into_owned(&inflight);
        assert_eq!(inflight.current(), 1);
        let waiter = tokio::spawn({
            let inflight = inflight.clone();
            async move { inflight.wait_idle().await }
        });
        while inflight.waiters.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished());
        drop(owned);
        tokio::time::timeout(std::time::Duration::from_secs(20), waiter)
            .await
            .expect("wait_idle woke")
            .unwrap();
        assert_eq!(inflight.current(), 0);
    }
}
