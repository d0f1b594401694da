//! Gates and lanes as the driver holds them: the runtime's shared state ([`RtShared`]), a gate
//! with its space waiters ([`GateInner`]), a lane's handle with its slot and parked future
//! ([`LaneHandle`]) and the waker that turns a parked future's wake-up into a resume record.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::config::RuntimeConfig;
use super::core::{
    Continued, GateCore, LaneClass, LaneId, ResumeRefused, SubmitRefusal, SubmitRefused,
};
use super::driver::*;
use super::error::{HandlerError, RuntimeError, Unavailable};
use super::gate::{Fence, GateShared, SpaceSlot, SpaceWaiter};
use super::park::ParkWord;
use super::status::StatusBus;
use super::{domain::*, handled::*, metrics::*, slot::*};

pub(crate) struct RtShared {
    pub app: tokio::runtime::Handle,
    pub infra: tokio::runtime::Handle,
    pub config: RuntimeConfig,
    /// `config.limits`, shared by every gate's core.
    pub limits: Arc<super::config::LaneLimits>,
    pub metrics: Metrics,
    pub status: StatusBus,
    pub shutting_down: AtomicBool,
    /// Every gate, for shutdown; a gate takes its entry out when it is dropped.
    pub gates: Mutex<slab::Slab<Weak<GateInner>>>,
    pub next_object: AtomicU64,
}

pub(crate) use super::job::Job;
pub(crate) type Gate = GateShared<Job, Arc<LaneHandle>>;

/// A gate plus what the driver needs around it.
pub(crate) struct GateInner {
    pub gate: Gate,
    pub rt: Arc<RtShared>,
    pub(super) space: tokio::sync::Notify,
    pub(super) space_waiters: AtomicUsize,
    /// This gate's entry in [`RtShared::gates`].
    pub(super) key: usize,
    /// The unit that lists this gate besides its own (an Entry/PerActor actor's or timer's gate),
    /// and the entry there; taken out when the gate is dropped.
    pub(crate) unit: OnceLock<(Weak<super::policy::Unit>, usize)>,
    /// Turns started under this gate; written only by the right's holder. Not on a cache line of
    /// its own: the padding (about 120 B per gate) bought no throughput measurable in
    /// `bench_runtime` (`docs/PERFORMANCE.md`, "Lane runtime memory").
    pub(super) turns: AtomicU64,
}

impl Drop for GateInner {
    fn drop(&mut self) {
        self.rt.metrics.gates_live.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut gates) = self.rt.gates.lock() {
            gates.try_remove(self.key);
        }
        if let Some((unit, key)) = self.unit.get() {
            if let Some(unit) = unit.upgrade() {
                unit.forget_gate(*key);
            }
        }
    }
}

impl GateInner {
    pub fn new(rt: &Arc<RtShared>) -> Arc<GateInner> {
        let mut gates = rt.gates.lock().unwrap();
        let entry = gates.vacant_entry();
        let key = entry.key();
        let g = Arc::new(GateInner {
            gate: GateShared::new(rt.limits.clone()),
            rt: rt.clone(),
            space: tokio::sync::Notify::new(),
            space_waiters: AtomicUsize::new(0),
            key,
            unit: OnceLock::new(),
            turns: AtomicU64::new(0),
        });
        entry.insert(Arc::downgrade(&g));
        rt.metrics.gates_live.fetch_add(1, Ordering::Relaxed);
        g
    }

    /// Start a drain task for a right just taken.
    pub fn kick(self: &Arc<Self>, fence: Fence) {
        let g = self.clone();
        self.rt
            .app
            .spawn(DOMAIN.scope(Domain::Application, drain(g, fence, None)));
    }

    /// Start a drain task that keeps the right `fence` and first continues `first`, a record
    /// started inline whose handler returned a future.
    pub(super) fn kick_in_flight(self: &Arc<Self>, fence: Fence, first: InFlight) {
        let g = self.clone();
        self.rt
            .app
            .spawn(DOMAIN.scope(Domain::Application, drain(g, fence, Some(first))));
    }

    /// Register a lane behind this gate.
    pub fn add_lane(
        self: &Arc<Self>,
        kind: LaneKind,
        yield_allowed: bool,
    ) -> Result<Arc<LaneHandle>, RuntimeError> {
        let mut core = self.gate.lock();
        if core.is_ended() {
            return Err(Unavailable::Ended.into());
        }
        let lane = core.peek_next_lane();
        let handle = Arc::new(LaneHandle {
            gate: self.clone(),
            lane,
            kind,
            yield_allowed,
            slot: Slot::new(),
            wake: OnceLock::new(),
            completion: OnceLock::new(),
            handler: OnceLock::new(),
            object: self.rt.next_object.fetch_add(1, Ordering::Relaxed),
            ending: AtomicBool::new(false),
            actor_refs: AtomicUsize::new(0),
            space: OnceLock::new(),
        });
        self.rt.metrics.lanes_live.fetch_add(1, Ordering::Relaxed);
        let got = core
            .add_lane(handle.clone())
            .ok_or(RuntimeError::Unavailable(Unavailable::Ended))?;
        debug_assert_eq!(got, lane);
        Ok(handle)
    }

    /// End the gate: refuse new work, fail queued work and waiting resumes, remove every lane
    /// (their memory goes once no handle holds them). A yielded record of a removed lane is
    /// cancelled now (it could never resume, EG-4.1).
    pub fn end(&self) {
        let ended = self.gate.lock().handle_end();
        drop(ended.items);
        for (_, h) in &ended.lanes {
            cancel_parked(h, None);
        }
        // waiters for space find the lanes ended (and drop what they kept for them)
        for (_, h) in &ended.lanes {
            h.space_changed();
        }
        drop(ended.lanes);
    }

    /// Resume records refused (seal): their yielded records are cancelled (EG-4.1).
    /// Seal `lane` alone for relocation (EG-4.1); its refused resume records are cancelled.
    pub fn seal_lane(&self, lane: LaneId) {
        let refused = self.gate.lock().handle_seal_lane(lane);
        self.refuse_resumes(&refused);
    }

    /// Lift `lane`'s own seal; a drain starts if the gate now has a ready lane and a free right.
    pub fn unseal_lane(self: &Arc<Self>, lane: LaneId) {
        let ready = {
            let mut core = self.gate.lock();
            core.handle_unseal_lane(lane);
            core.has_ready()
        };
        if ready {
            if let Some(f) = self.gate.word.try_acquire() {
                self.kick(f);
            }
        }
    }

    pub fn refuse_resumes(&self, refused: &[(LaneId, u64)]) {
        if refused.is_empty() {
            return;
        }
        let handles: Vec<(Arc<LaneHandle>, u64)> = {
            let core = self.gate.lock();
            refused
                .iter()
                .filter_map(|(l, inv)| core.lane_data(*l).map(|h| (h, *inv)))
                .collect()
        };
        for (h, inv) in handles {
            cancel_parked(&h, Some(inv));
        }
    }

    /// Number the next turn (only the holder of the right calls this).
    pub(super) fn next_turn(&self) -> u64 {
        let t = self.turns.load(Ordering::Relaxed) + 1;
        self.turns.store(t, Ordering::Relaxed);
        t
    }

    pub(super) fn notify_space(&self) {
        if self.space_waiters.load(Ordering::Acquire) > 0 {
            self.space.notify_waiters();
        }
    }
}

/// What a lane serves (diagnostics and gate layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneKind {
    /// A Spot's own work.
    Spot,
    /// One actor's queue.
    Actor,
    /// One timer.
    Timer,
    /// One client session.
    Session,
    /// A Node or Channel handler.
    Handler,
}

impl LaneKind {
    /// Every kind, in declaration order.
    pub const ALL: [LaneKind; 5] = [
        LaneKind::Spot,
        LaneKind::Actor,
        LaneKind::Timer,
        LaneKind::Session,
        LaneKind::Handler,
    ];

    /// The kind's name in snake_case (metric labels, diagnostics).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LaneKind::Spot => "spot",
            LaneKind::Actor => "actor",
            LaneKind::Timer => "timer",
            LaneKind::Session => "session",
            LaneKind::Handler => "handler",
        }
    }
}

pub(crate) type CompletionFn = Arc<dyn Fn(TurnEnv, CompletionEvent) -> Handled<()> + Send + Sync>;

/// Delivered to an actor's completion callback.
#[derive(Debug)]
#[non_exhaustive]
pub enum CompletionEvent {
    /// The result of a Join registered with `defer()` for this (moving) actor (EG-5.4).
    Join(Result<(), RuntimeError>),
}

/// One serial execution object: its place behind a gate and its per-record slot.
///
/// Layout (`repr(C)`, no alignment beyond the allocator's: an idle actor's lane is about 200 B
/// with its `Arc` header): the reference count (written by the draining worker) comes with fields
/// only the drain reads (`handler`, `completion`, `object`); `gate` and `lane`, read by
/// submitters on every submission, come next, then the [`Slot`], written by the drain at every
/// record's start and terminal. 128-byte padding around the slot (512 B per lane) bought no
/// throughput measurable in `bench_runtime` (`docs/PERFORMANCE.md`, "Lane runtime memory").
#[repr(C)]
pub(crate) struct LaneHandle {
    /// The actor handler (type-erased), read by each record's job: senders never touch its
    /// reference count, so the sending and the draining core share no counter per message.
    pub handler: OnceLock<Box<dyn std::any::Any + Send + Sync>>,
    pub completion: OnceLock<CompletionFn>,
    pub object: u64,
    pub gate: Arc<GateInner>,
    pub lane: LaneId,
    pub kind: LaneKind,
    pub yield_allowed: bool,
    /// An actor lane's end was asked for (`destroy`, or its last `ActorRef` dropped).
    pub ending: AtomicBool,
    /// `ActorRef`s of this (actor) lane alive; the last one dropped ends the actor after the
    /// work queued before (`spot::ActorRef`'s `Drop`).
    pub actor_refs: AtomicUsize,
    /// The waker handler futures of this lane are polled with (created at the first poll of a
    /// lane that may yield): it resumes a parked record, or wakes the drain polling it.
    pub(super) wake: OnceLock<(Arc<LaneWake>, Waker)>,
    pub slot: Slot,
    /// Waiters told when a turn of this lane ends with room ([`LaneHandle::wait_for_space`]);
    /// made at the first arming (a lane that never had a backlog pays the empty cell's 16 bytes).
    pub(super) space: OnceLock<Box<SpaceSlot<Arc<dyn SpaceWaiter>>>>,
}

impl Drop for LaneHandle {
    fn drop(&mut self) {
        self.gate
            .rt
            .metrics
            .lanes_live
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl LaneHandle {
    /// Take this lane out of its gate (destroy, last timer handle dropped): its queued work is
    /// dropped (failed), a record in flight finishes with a stale terminal. Outside a turn of this
    /// lane, or as its own lifecycle record.
    pub fn remove(&self) {
        let removed = self.gate.gate.lock().remove_lane(self.lane);
        if removed.is_some() {
            cancel_parked(self, None);
        }
        drop(removed);
        // waiters for space find the lane ended (and drop what they kept for it)
        self.space_changed();
    }

    /// Arms `waiter` to be told ([`SpaceWaiter::on_space`]) when a turn of this lane ends with
    /// room (at most half of each count limit reserved, as for [`LaneHandle::submit_wait`]) or
    /// the lane is removed: on the thread that ended the turn, once. The caller found the lane
    /// full and must try it again after arming (the turn that freed the room may have ended
    /// before the arming: `gate::SpaceSlot`).
    pub fn wait_for_space(&self, waiter: Arc<dyn SpaceWaiter>) {
        let space = self.space.get_or_init(|| Box::new(SpaceSlot::new()));
        space.arm(
            waiter,
            |a, b| std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)),
            |w| w.is_live(),
        );
    }

    /// A turn of this lane ended with room (no runtime lock held): tell the armed waiters.
    #[inline]
    pub(super) fn space_changed(&self) {
        if self.space_armed() {
            self.tell_space();
        }
    }

    /// Whether a space waiter is armed (one load where one ever was).
    #[inline]
    pub(super) fn space_armed(&self) -> bool {
        self.space.get().is_some_and(|s| s.is_armed())
    }

    #[inline(never)]
    pub(super) fn tell_space(&self) {
        let Some(space) = self.space.get() else {
            return;
        };
        for w in space.take() {
            // A waiter that panics must not unwind into the turn's thread (a lane drain holding
            // the gate's right, or an inline finish): the other waiters are told all the same.
            if catch_unwind(AssertUnwindSafe(|| w.on_space())).is_err() {
                tracing::error!(object = self.object, "a lane's space waiter panicked");
            }
        }
    }

    pub(super) fn lane_wake(self: &Arc<Self>) -> &(Arc<LaneWake>, Waker) {
        self.wake.get_or_init(|| {
            let w = Arc::new(LaneWake {
                lane: Arc::downgrade(self),
                drain: Mutex::new(None),
                word: ParkWord::default(),
            });
            (w.clone(), Waker::from(w))
        })
    }

    pub fn rt(&self) -> &Arc<RtShared> {
        &self.gate.rt
    }

    /// Admit a job; take the gate and start a drain if it is free. The job is handed back when
    /// refused (never run inline, EG-6.3).
    pub fn try_submit(
        &self,
        class: LaneClass,
        payload_len: usize,
        job: Job,
    ) -> Result<(), (RuntimeError, Job)> {
        if self.rt().shutting_down.load(Ordering::Acquire) {
            return Err((Unavailable::ShutDown.into(), job));
        }
        let r = {
            let mut core = self.gate.gate.lock_unquiesced();
            self.admit_locked(&mut core, class, payload_len, job)
        };
        self.admitted(r)
    }

    /// The admission of [`LaneHandle::try_submit`] under the core lock (`core`), exact during a
    /// batch (EG-7.1/7.2: records of the batch that reached their terminal return their
    /// reservations before the lane is called full).
    #[inline]
    pub(super) fn admit_locked(
        &self,
        core: &mut GateCore<Job, Arc<LaneHandle>>,
        class: LaneClass,
        payload_len: usize,
        job: Job,
    ) -> Result<(), SubmitRefused<Job>> {
        let gate = &self.gate.gate;
        let mut r = core.handle_submit(self.lane, class, payload_len, job);
        if core.batch_active()
            && matches!(&r, Err(e) if matches!(e.reason, SubmitRefusal::Admission(_)))
        {
            gate.release_batch_progress(core);
            if let Err(e) = r {
                r = core.handle_submit(self.lane, class, payload_len, e.item);
            }
        }
        if r.is_ok() {
            gate.after_submit(core);
        }
        r
    }

    /// After [`LaneHandle::admit_locked`], the core unlocked: an admitted record takes the gate
    /// and starts a drain if the right is free; a refused one is handed back with why.
    #[inline]
    pub(super) fn admitted(
        &self,
        r: Result<(), SubmitRefused<Job>>,
    ) -> Result<(), (RuntimeError, Job)> {
        match r {
            Ok(()) => {
                if let Some(f) = self.gate.gate.word.try_acquire_after_submit() {
                    self.gate.kick(f);
                }
                Ok(())
            }
            Err(refused) => {
                let e = match refused.reason {
                    SubmitRefusal::Admission(a) => a.into(),
                    SubmitRefusal::Ended => Unavailable::Ended.into(),
                };
                Err((e, refused.item))
            }
        }
    }

    /// An inline start ([`LaneHandle::try_start_inline`], only when `inline` and for an
    /// application record), else an admission ([`LaneHandle::try_submit`]), decided under one
    /// core lock: the record's job is made (`job()`, boxed) only when it must enter the lane,
    /// under that lock. A refused record's job is handed back with why.
    pub fn try_start_inline_or_submit(
        &self,
        class: LaneClass,
        payload_len: usize,
        inline: bool,
        job: impl FnOnce() -> Job,
    ) -> StartOrSubmit {
        if self.rt().shutting_down.load(Ordering::Acquire) {
            return StartOrSubmit::Refused(Unavailable::ShutDown.into(), job());
        }
        let r = {
            let gate = &self.gate.gate;
            let mut core = gate.lock_unquiesced();
            if inline
                && class == LaneClass::Application
                && let Some((fence, invocation)) =
                    core.handle_inline_start_with(self.lane, payload_len, || {
                        gate.word.try_acquire_after_submit()
                    })
            {
                drop(core);
                self.slot.begin(invocation, fence, self.gate.next_turn());
                return StartOrSubmit::Inline(InlineTurn { fence, invocation });
            }
            self.admit_locked(&mut core, class, payload_len, job())
        };
        match self.admitted(r) {
            Ok(()) => StartOrSubmit::Submitted,
            Err((e, job)) => StartOrSubmit::Refused(e, job),
        }
    }

    pub fn submit(
        &self,
        class: LaneClass,
        payload_len: usize,
        job: Job,
    ) -> Result<(), RuntimeError> {
        self.try_submit(class, payload_len, job).map_err(|(e, _)| e)
    }

    /// Inline request, start (`docs/RUNTIME.md`, "Inline ask"): if this lane is idle, its gate
    /// free and nothing waits for the gate's right, take the right and start an application
    /// record of `payload_len` bytes in the caller's task — admitted, claimed and numbered as if
    /// it had been queued and picked (`GateCore::handle_inline_start`), its registration scope
    /// open. The caller runs the record and ends it with [`LaneHandle::finish_inline`] or
    /// [`LaneHandle::hand_off_inline`]. `None`: the caller queues the record instead.
    pub fn try_start_inline(&self, payload_len: usize) -> Option<InlineTurn> {
        if self.rt().shutting_down.load(Ordering::Acquire) {
            return None;
        }
        let (fence, invocation) = self.gate.gate.try_start_inline(self.lane, payload_len)?;
        self.slot.begin(invocation, fence, self.gate.next_turn());
        Some(InlineTurn { fence, invocation })
    }

    /// Inline request, terminal (the handler finished with `r`): post-processing, barriers and
    /// held replies as at any record's terminal (EG-8, EG-5), the reservation returned (EG-7.2),
    /// the right released; work admitted meanwhile gets a new drain.
    pub fn finish_inline(self: &Arc<Self>, turn: InlineTurn, r: Result<(), HandlerError>) {
        end_record(&self.gate, self, turn.invocation, r);
        self.release_inline(turn);
    }

    /// The core half of [`LaneHandle::finish_inline`], for an inline record whose terminal
    /// (`end_record`) already ran while its right was kept (a held inline run,
    /// [`super::held::HeldRun`]): the reservation returned, the right released and the ready
    /// set re-checked under one lock, senders waiting for space told, work admitted meanwhile
    /// given a new drain.
    pub(crate) fn release_inline(self: &Arc<Self>, turn: InlineTurn) {
        let (room, next) = self.gate.gate.finish_inline(self.lane, turn.invocation);
        self.after_inline_terminal(room, next);
    }

    /// What follows the core step that ended an inline record: waiting senders told (as at
    /// any finish), a right taken for work that waits handed to a new drain.
    #[inline]
    pub(super) fn after_inline_terminal(self: &Arc<Self>, room: bool, next: Option<Fence>) {
        if room || next.is_none() {
            self.gate.notify_space();
        }
        if room {
            self.space_changed();
        }
        if let Some(f) = next {
            self.gate.kick(f);
        }
    }

    /// Held inline run, the next record (`docs/RUNTIME.md`, "Inline delivery"): `held` is an
    /// inline record of this lane that reached its terminal (`end_record` ran) with its right
    /// kept. Under one core lock it ends and an application record of `payload_len` bytes
    /// starts under the same right if nothing waits for the gate and the record fits
    /// ([`GateShared::continue_inline`](super::gate::GateShared::continue_inline)); the caller
    /// runs it as any inline record. `None`: the right was released exactly as
    /// [`LaneHandle::release_inline`] releases it (work that waits gets a new drain), and the
    /// caller submits the record the normal way, behind what waits.
    pub(crate) fn continue_inline(
        self: &Arc<Self>,
        held: InlineTurn,
        payload_len: usize,
    ) -> Option<InlineTurn> {
        if self.rt().shutting_down.load(Ordering::Acquire) {
            self.release_inline(held);
            return None;
        }
        let (c, next) = self
            .gate
            .gate
            .continue_inline(self.lane, held.invocation, payload_len);
        match c {
            Continued::Started { invocation, room } => {
                self.slot
                    .begin(invocation, held.fence, self.gate.next_turn());
                self.after_inline_terminal(room, None);
                Some(InlineTurn {
                    fence: held.fence,
                    invocation,
                })
            }
            Continued::Refused { room } => {
                self.after_inline_terminal(room, next);
                None
            }
        }
    }

    /// Inline request whose handler returned a future: poll it once in the caller's task,
    /// holding the right, as a drain polls a record's future (with the lane's own waker where the
    /// lane may yield, so a Yield is seen; a panic is the caller's to catch).
    pub fn poll_inline<F: Future + Unpin>(
        self: &Arc<Self>,
        invocation: u64,
        cx: &mut Context<'_>,
        fut: &mut F,
    ) -> InlinePoll<F::Output> {
        let polled = if self.yield_allowed {
            let (wake, waker) = self.lane_wake();
            wake.set_drain(cx.waker());
            wake.word.before_poll();
            Pin::new(&mut *fut).poll(&mut Context::from_waker(waker))
        } else {
            Pin::new(&mut *fut).poll(cx)
        };
        if let Some((wake, _)) = self.wake.get() {
            // the record does not go on in the caller's task: keep no waker of it (a wake-up
            // before the drain's first poll is not needed, that poll happens anyway)
            *wake.drain.lock().unwrap() = None;
        }
        match polled {
            Poll::Ready(out) => InlinePoll::Ready(out),
            Poll::Pending if self.slot.take_yield(invocation) => InlinePoll::Yielded,
            Poll::Pending => InlinePoll::Pending,
        }
    }

    /// Inline request whose handler yielded at its first poll (EG-3): park its future as a drain
    /// does (the claim stays, a wake-up appends its resume record), then release the right and
    /// re-check the ready set like any holder.
    pub fn park_inline(self: &Arc<Self>, turn: InlineTurn, fut: HandlerFuture) {
        park(&self.gate, self, turn.invocation, fut);
        if let Some(f) = self.gate.gate.release_and_recheck() {
            self.gate.kick(f);
        }
    }

    /// Inline request whose handler returned a future: a new drain task takes over the right and
    /// continues the record as a normal turn (it may await, keeping the gate, or yield), then
    /// drains the gate as usual.
    pub fn hand_off_inline(self: &Arc<Self>, turn: InlineTurn, fut: HandlerFuture) {
        self.gate.kick_in_flight(
            turn.fence,
            InFlight {
                lane: self.lane,
                data: self.clone(),
                invocation: turn.invocation,
                fut,
            },
        );
    }

    /// Admit a job, waiting for application-lane space instead of failing (backpressure); the
    /// work still never runs inline.
    pub async fn submit_wait(
        &self,
        class: LaneClass,
        payload_len: usize,
        mut job: Job,
    ) -> Result<(), RuntimeError> {
        loop {
            match self.try_submit(class, payload_len, job) {
                Ok(()) => return Ok(()),
                Err((RuntimeError::ApplicationLaneFull(_), j))
                | Err((RuntimeError::LifecycleLaneFull(_), j)) => {
                    let notified = self.gate.space.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    self.gate.space_waiters.fetch_add(1, Ordering::AcqRel);
                    let again = self.try_submit(class, payload_len, j);
                    match again {
                        Ok(()) => {
                            self.gate.space_waiters.fetch_sub(1, Ordering::AcqRel);
                            return Ok(());
                        }
                        Err((RuntimeError::ApplicationLaneFull(_), j))
                        | Err((RuntimeError::LifecycleLaneFull(_), j)) => {
                            notified.await;
                            self.gate.space_waiters.fetch_sub(1, Ordering::AcqRel);
                            job = j;
                        }
                        Err((e, _)) => {
                            self.gate.space_waiters.fetch_sub(1, Ordering::AcqRel);
                            return Err(e);
                        }
                    }
                }
                Err((e, _)) => return Err(e),
            }
        }
    }
}

/// Routes the wake-ups of a yield-capable lane's handler futures (they are polled with its waker,
/// `LaneHandle::lane_wake`). While a record is parked (yielded, EG-3) any wake-up of its future
/// (the awaited result, or a timer or `select!` branch around the Yield) appends its resume record
/// (EG-16.8): the future is only ever polled by a drain holding the right, so no handler code runs
/// without the gate (EG-2.6). Otherwise the wake-up goes to the drain polling the record. Who
/// requests the resume is decided by the [`ParkWord`] (exactly once per park, no lost wake-up).
pub(super) struct LaneWake {
    pub(super) lane: Weak<LaneHandle>,
    pub(super) drain: Mutex<Option<Waker>>,
    pub(super) word: ParkWord,
}

impl std::task::Wake for LaneWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(inv) = self.word.wake() {
            if let Some(lane) = self.lane.upgrade() {
                request_resume(&lane, inv);
            }
            return;
        }
        let w = self.drain.lock().unwrap().clone();
        if let Some(w) = w {
            w.wake();
        }
    }
}

impl LaneWake {
    pub(super) fn set_drain(&self, w: &Waker) {
        let mut d = self.drain.lock().unwrap();
        if !d.as_ref().is_some_and(|d| d.will_wake(w)) {
            *d = Some(w.clone());
        }
    }
}

/// The parked record `invocation` of `lane` was woken: append its resume record (EG-3, EG-16.8),
/// or cancel it if the unit was sealed or ended meanwhile (EG-4.1).
pub(super) fn request_resume(lane: &Arc<LaneHandle>, invocation: u64) {
    let r = lane.gate.gate.lock().handle_resume(lane.lane, invocation);
    match r {
        Ok(()) => {
            lane.rt()
                .status
                .publish(&format!("lane/{}", lane.object), "resume-queued");
            if let Some(f) = lane.gate.gate.word.try_acquire() {
                lane.gate.kick(f);
            }
        }
        Err(ResumeRefused::Stale) => {}
        Err(ResumeRefused::Sealed | ResumeRefused::Ended) => {
            cancel_parked(lane, Some(invocation));
        }
    }
}

/// Cancel the parked record of `lane` (`invocation`, or whichever is parked): its resume was
/// refused or its lane removed, so it never runs again (EG-4.1). Its registrations are discarded
/// and its future dropped in a task of its own (not in the caller, which may be any waker).
pub(super) fn cancel_parked(lane: &LaneHandle, invocation: Option<u64>) {
    let Some((inv, fut)) = lane.slot.take_parked(invocation) else {
        return;
    };
    let rt = lane.rt().clone();
    rt.metrics.resumes_refused.fetch_add(1, Ordering::Relaxed);
    rt.status
        .publish(&format!("lane/{}", lane.object), "resume-refused");
    let ended = lane.slot.end(inv);
    let task = rt.clone();
    rt.app.spawn(DOMAIN.scope(Domain::Application, async move {
        settle_aborted(&task, ended);
        // a cancelled handler's future goes after its barriers (EG-5.3)
        drop(fut);
    }));
}
