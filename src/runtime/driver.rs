//! The thin async layer over the scheduling core: drains gates on the application runtime's fixed
//! worker pool, runs handlers inline, detaches yielded handlers, and keeps infrastructure in its
//! own progress domain.
//!
//! * A gate is drained by at most one tokio task at a time, the one that took the right
//!   ([`crate::runtime::gate::GateWord`]); there is no task or thread per Spot (EG-10).
//! * A handler runs inline in the drain task. A normal await keeps the right (EG-2.6). A Yield
//!   (EG-3) parks the handler future in its lane's slot, marks the lane's claim yielded in the
//!   core and lets the drain continue with other lanes; any wake-up of the parked future (the
//!   awaited result, a timer or `select!` branch around the Yield) appends a resume record, and
//!   the drain that pops it polls the future again, holding the right: handler code never runs
//!   without the gate, whatever the handler does with the Yield's future.
//! * Post-processing registered with `after_turn` and `defer()` barriers are handled at the
//!   record's terminal, before the right moves on (EG-8, EG-5).
//! * The occupancy budget (EG-7.4, EG-9) is read from the injected clock after each handler; when
//!   spent, the drain releases the right and yields to the worker pool before re-acquiring.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use tokio::sync::oneshot;

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::config::RuntimeConfig;
use super::core::{
    Continued, GateCore, LaneClass, LaneId, Queued, ResumeRefused, SubmitRefusal, SubmitRefused,
    Turn,
};
use super::error::{HandlerError, InvalidOperation, RuntimeError, Unavailable};
use super::gate::{Fence, GateShared, SpaceSlot, SpaceWaiter};
use super::park::ParkWord;
use super::status::StatusBus;
use crate::clock::CycleStamp;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler returns (runtime handlers and actor handlers alike): a result now (no
/// allocation), or a future the turn awaits. A `Later` keeps the turn (and a SpotWide Spot's
/// gate) until it completes (EG-2.6).
pub enum Handled<R> {
    /// The handler finished synchronously.
    Now(Result<R, HandlerError>),
    /// The handler continues asynchronously.
    Later(BoxFuture<Result<R, HandlerError>>),
}

impl<R> Handled<R> {
    /// Finished with `value`.
    pub fn ok(value: R) -> Self {
        Handled::Now(Ok(value))
    }

    /// Finished with an error.
    pub fn err(e: HandlerError) -> Self {
        Handled::Now(Err(e))
    }

    /// Continues as `fut`.
    pub fn later<F>(fut: F) -> Self
    where
        F: Future<Output = Result<R, HandlerError>> + Send + 'static,
    {
        Handled::Later(Box::pin(fut))
    }
}

/// The progress domain a task belongs to (EG-1.1, EG-13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Handlers, Spot/actor messages, timers, session callbacks, lifecycle callbacks.
    Application,
    /// Peer accept, completions, owner updates, relocation steps, shutdown.
    Infrastructure,
}

tokio::task_local! {
    // A marker only (EG-13): it records which domain runs the current task; no inter-work state
    // is kept here (EG-6.2).
    static DOMAIN: Domain;
}

/// The domain of the running task, if it runs in one of the runtime's domains.
pub fn current_domain() -> Option<Domain> {
    DOMAIN.try_with(|d| *d).ok()
}

/// Fail immediately (never wait) unless the caller runs in `expected` or outside both domains
/// (EG-13: a cross-domain call fails rather than waiting).
pub fn require_domain(expected: Domain) -> Result<(), RuntimeError> {
    match current_domain() {
        Some(d) if d != expected => Err(InvalidOperation::CrossDomain.into()),
        _ => Ok(()),
    }
}

/// Counters of the runtime (white box; cheap, not touched on the per-message fast path).
#[derive(Default)]
pub(crate) struct Metrics {
    pub handler_errors: AtomicU64,
    pub deadlines_fired: AtomicU64,
    pub barriers_activated: AtomicU64,
    pub barriers_discarded: AtomicU64,
    pub resumes_refused: AtomicU64,
    /// Gates present (created, not yet dropped).
    pub gates_live: AtomicU64,
    /// Lanes present (`LaneHandle`s created, not yet dropped).
    pub lanes_live: AtomicU64,
}

/// A snapshot of the runtime's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Handlers that ended with an error (EG-15: logged and metered; a request handler's error
    /// also became the request's error reply).
    pub handler_errors: u64,
    /// Call deadlines fired by the infrastructure domain.
    pub deadlines_fired: u64,
    /// `defer()` barriers activated (handler ended normally).
    pub barriers_activated: u64,
    /// `defer()` barriers discarded (handler failed or was cancelled).
    pub barriers_discarded: u64,
    /// Resume records refused because the unit ended or was sealed (EG-4.1).
    pub resumes_refused: u64,
    /// Gates whose memory is still held (created and not yet freed): an ended Spot, session or
    /// destroyed Entry/PerActor actor gives its gate back once no handle and no task holds it.
    pub gates_live: u64,
    /// Lanes whose memory is still held (created and not yet freed).
    pub lanes_live: u64,
}

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
    space: tokio::sync::Notify,
    space_waiters: AtomicUsize,
    /// This gate's entry in [`RtShared::gates`].
    key: usize,
    /// The unit that lists this gate besides its own (an Entry/PerActor actor's or timer's gate),
    /// and the entry there; taken out when the gate is dropped.
    pub(crate) unit: OnceLock<(Weak<super::policy::Unit>, usize)>,
    /// Turns started under this gate; written only by the right's holder. Not on a cache line of
    /// its own: the padding (about 120 B per gate) bought no throughput measurable in
    /// `bench_runtime` (`docs/PERFORMANCE.md`, "Lane runtime memory").
    turns: AtomicU64,
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
    fn kick_in_flight(self: &Arc<Self>, fence: Fence, first: InFlight) {
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
    fn next_turn(&self) -> u64 {
        let t = self.turns.load(Ordering::Relaxed) + 1;
        self.turns.store(t, Ordering::Relaxed);
        t
    }

    fn notify_space(&self) {
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
    wake: OnceLock<(Arc<LaneWake>, Waker)>,
    pub slot: Slot,
    /// Waiters told when a turn of this lane ends with room ([`LaneHandle::wait_for_space`]);
    /// made at the first arming (a lane that never had a backlog pays the empty cell's 16 bytes).
    space: OnceLock<Box<SpaceSlot<Arc<dyn SpaceWaiter>>>>,
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
    fn space_changed(&self) {
        if self.space_armed() {
            self.tell_space();
        }
    }

    /// Whether a space waiter is armed (one load where one ever was).
    #[inline]
    fn space_armed(&self) -> bool {
        self.space.get().is_some_and(|s| s.is_armed())
    }

    #[inline(never)]
    fn tell_space(&self) {
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

    fn lane_wake(self: &Arc<Self>) -> &(Arc<LaneWake>, Waker) {
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
    fn admit_locked(
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
    fn admitted(&self, r: Result<(), SubmitRefused<Job>>) -> Result<(), (RuntimeError, Job)> {
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
    fn after_inline_terminal(self: &Arc<Self>, room: bool, next: Option<Fence>) {
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
struct LaneWake {
    lane: Weak<LaneHandle>,
    drain: Mutex<Option<Waker>>,
    word: ParkWord,
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
    fn set_drain(&self, w: &Waker) {
        let mut d = self.drain.lock().unwrap();
        if !d.as_ref().is_some_and(|d| d.will_wake(w)) {
            *d = Some(w.clone());
        }
    }
}

/// The parked record `invocation` of `lane` was woken: append its resume record (EG-3, EG-16.8),
/// or cancel it if the unit was sealed or ended meanwhile (EG-4.1).
fn request_resume(lane: &Arc<LaneHandle>, invocation: u64) {
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
fn cancel_parked(lane: &LaneHandle, invocation: Option<u64>) {
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

/// The yield signal word of a [`Slot`]: the invocation that asked to yield, 0 for none. Tagged,
/// so a stale signal can never act on another record of the lane.
const SIGNAL_NONE: u64 = 0;

/// The Join operation of a barrier.
pub(crate) type JoinOp = Box<dyn FnOnce() -> BoxFuture<Result<(), RuntimeError>> + Send>;

/// A barrier registered by `defer()` (EG-5), inactive until the handler ends normally.
///
/// Once registered, the moving object's core counts it as inactive; it is activated by
/// [`Barrier::activate`] (handler ended normally, EG-5.2) or discarded when dropped otherwise
/// (error, cancellation, refused resume, stale scope: EG-5.3).
pub(crate) struct Barrier {
    moving: Arc<LaneHandle>,
    op: Option<JoinOp>,
    registered: bool,
}

impl Barrier {
    pub fn new(moving: Arc<LaneHandle>, op: JoinOp) -> Barrier {
        Barrier {
            moving,
            op: Some(op),
            registered: false,
        }
    }

    /// Count the inactive barrier in the moving object's core. Called under the registering
    /// slot's `ext` lock (lock order: slot `ext`, then a gate core; never the reverse).
    fn register(&mut self) -> Result<(), RuntimeError> {
        if !self
            .moving
            .gate
            .gate
            .lock()
            .handle_barrier_register(self.moving.lane)
        {
            return Err(Unavailable::Ended.into());
        }
        self.registered = true;
        Ok(())
    }

    /// The handler ended normally: the barrier now blocks the moving object's queue (EG-5.2).
    fn activate(mut self) -> (Arc<LaneHandle>, JoinOp) {
        self.registered = false;
        self.moving
            .gate
            .gate
            .lock()
            .handle_barrier_activate(self.moving.lane);
        (self.moving.clone(), self.op.take().expect("activated once"))
    }
}

impl Drop for Barrier {
    fn drop(&mut self) {
        if self.registered {
            // EG-5.3: discarded, the Join never runs
            self.moving
                .gate
                .gate
                .lock()
                .handle_barrier_discard(self.moving.lane);
        }
    }
}

/// Delivers an active barrier's Join result to the moving object exactly once; if the Join task
/// is dropped or its operation panics, the result is `Unavailable::Dropped`, so a barrier never
/// blocks the moving object's queue forever.
struct JoinDelivery {
    moving: Option<Arc<LaneHandle>>,
}

impl JoinDelivery {
    fn deliver(&mut self, result: Result<(), RuntimeError>) {
        let Some(moving) = self.moving.take() else {
            return;
        };
        let job: Option<Job> = match moving.completion.get().cloned() {
            Some(cb) => Some(Job::new(move |env| cb(env, CompletionEvent::Join(result)))),
            None => {
                tracing::warn!(
                    object = moving.object,
                    "join result without a completion callback"
                );
                None
            }
        };
        let r = moving.gate.gate.lock().handle_join_result(moving.lane, job);
        match r {
            Ok(()) => {
                if let Some(f) = moving.gate.gate.word.try_acquire() {
                    moving.gate.kick(f);
                }
            }
            Err(_) => {
                tracing::warn!(object = moving.object, "join completion not delivered");
            }
        }
    }
}

impl Drop for JoinDelivery {
    fn drop(&mut self) {
        self.deliver(Err(Unavailable::Dropped.into()));
    }
}

/// Post-processing registered with `after_turn` (EG-8).
pub(crate) type AfterWork = Box<dyn FnOnce() + Send>;

/// What a record registered in its scope, taken when the scope closes ([`Slot::end`]).
struct Ended {
    after: Vec<AfterWork>,
    barriers: Vec<Barrier>,
    /// Replies held until the barriers are settled; run last.
    replies: Vec<AfterWork>,
}

#[derive(Default)]
pub(crate) struct SlotExt {
    barriers: Vec<(u64, Barrier)>,
    after: Vec<(u64, AfterWork)>,
    /// Replies held until the record ends ([`Slot::reply_at_end`]).
    replies: Vec<(u64, AfterWork)>,
    /// The future of the yielded record waiting for its resume turn, with its invocation.
    parked: Option<(u64, HandlerFuture)>,
}

/// A handler's future, as the drain polls it.
pub(crate) type HandlerFuture = BoxFuture<Result<(), HandlerError>>;

/// Per-lane state of the record in flight (a lane has at most one, EG-3.1), reused across
/// records; stale contexts are detected by the invocation number (EG-6.1).
pub(crate) struct Slot {
    invocation: AtomicU64,
    holding: AtomicBool,
    /// [`SIGNAL_NONE`] or the invocation that asked to yield (tagged: EG-6.1).
    signal: AtomicU64,
    fence: AtomicU64,
    turn: AtomicU64,
    extras: AtomicBool,
    /// Registrations and the parked future; allocated by the lane's first registration or
    /// Yield (most lanes never make one: an idle actor does not carry it).
    ext: Mutex<Option<Box<SlotExt>>>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            invocation: AtomicU64::new(0),
            holding: AtomicBool::new(false),
            signal: AtomicU64::new(SIGNAL_NONE),
            fence: AtomicU64::new(0),
            turn: AtomicU64::new(0),
            extras: AtomicBool::new(false),
            ext: Mutex::new(None),
        }
    }

    fn begin(&self, invocation: u64, fence: Fence, turn: u64) {
        self.fence.store(fence.0, Ordering::Relaxed);
        self.turn.store(turn, Ordering::Relaxed);
        self.holding.store(true, Ordering::Release);
        self.invocation.store(invocation, Ordering::Release);
    }

    /// Close the registration scope; return the record's after-work, barriers and held replies
    /// (`None`: it registered none, or the scope was already closed).
    #[inline]
    fn end(&self, invocation: u64) -> Option<Ended> {
        if self
            .invocation
            .compare_exchange(invocation, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return None;
        }
        self.holding.store(false, Ordering::Release);
        // only this record sets its own tag (`begin_yield`), so a signal read as anything else
        // is not this record's to clear: no read-modify-write at the usual terminal
        if self.signal.load(Ordering::Acquire) == invocation {
            let _ = self.signal.compare_exchange(
                invocation,
                SIGNAL_NONE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        // registrations happen under `ext` after an `in_scope` check; one that raced with the CAS
        // above is tagged with this invocation and is either seen here or discarded later
        if !self.extras.load(Ordering::SeqCst) {
            return None;
        }
        self.take_ended(invocation)
    }

    /// The registrations of `invocation`, whose scope [`Slot::end`] just closed.
    #[inline(never)]
    fn take_ended(&self, invocation: u64) -> Option<Ended> {
        let mut ext = self.ext.lock().unwrap();
        self.extras.store(false, Ordering::SeqCst);
        let ext = ext.get_or_insert_default();
        let after = std::mem::take(&mut ext.after)
            .into_iter()
            .filter(|(i, _)| *i == invocation)
            .map(|(_, f)| f)
            .collect();
        let barriers = std::mem::take(&mut ext.barriers)
            .into_iter()
            .filter(|(i, _)| *i == invocation)
            .map(|(_, b)| b)
            .collect();
        let replies = std::mem::take(&mut ext.replies)
            .into_iter()
            .filter(|(i, _)| *i == invocation)
            .map(|(_, f)| f)
            .collect();
        Some(Ended {
            after,
            barriers,
            replies,
        })
    }

    /// Release a request's reply (`send`) as the record's last act when it matters: after its
    /// `defer()` barriers are settled, so a requester acting on the reply finds them active
    /// (EG-5.2) or discarded (EG-5.3), never still inactive; and, for an error reply
    /// (`is_error`), after the record's error is counted in the metrics. Otherwise (a success
    /// without barriers, the usual case) `send` runs at once, with no allocation; a held reply
    /// runs when the record ends ([`end_record`], [`abort_record`]).
    pub fn reply_at_end<F: FnOnce() + Send + 'static>(
        &self,
        invocation: u64,
        is_error: bool,
        send: F,
    ) {
        if is_error || self.extras.load(Ordering::SeqCst) {
            let mut ext = self.ext.lock().unwrap();
            let ext = ext.get_or_insert_default();
            if self.in_scope(invocation)
                && (is_error || ext.barriers.iter().any(|(i, _)| *i == invocation))
            {
                ext.replies.push((invocation, Box::new(send)));
                self.extras.store(true, Ordering::SeqCst);
                return;
            }
        }
        send();
    }

    /// Whether `invocation`'s registration scope is open.
    pub fn in_scope(&self, invocation: u64) -> bool {
        self.invocation.load(Ordering::SeqCst) == invocation
    }

    /// Whether `invocation` is open and currently holds the gate (not yielded).
    pub fn holds_gate(&self, invocation: u64) -> bool {
        self.in_scope(invocation) && self.holding.load(Ordering::SeqCst)
    }

    pub fn fence(&self) -> u64 {
        self.fence.load(Ordering::Relaxed)
    }

    pub fn turn(&self) -> u64 {
        self.turn.load(Ordering::Relaxed)
    }

    pub fn register_barrier(
        &self,
        invocation: u64,
        limit: usize,
        b: Barrier,
    ) -> Result<(), RuntimeError> {
        let mut ext = self.ext.lock().unwrap();
        if !self.in_scope(invocation) {
            return Err(InvalidOperation::DeferOutsideScope.into());
        }
        let ext = ext.get_or_insert_default();
        if ext
            .barriers
            .iter()
            .filter(|(i, _)| *i == invocation)
            .count()
            >= limit
        {
            return Err(InvalidOperation::DeferLimitExceeded.into());
        }
        let mut b = b;
        b.register()?;
        ext.barriers.push((invocation, b));
        self.extras.store(true, Ordering::SeqCst);
        Ok(())
    }

    pub fn register_after(&self, invocation: u64, f: AfterWork) -> Result<(), RuntimeError> {
        let mut ext = self.ext.lock().unwrap();
        if !self.in_scope(invocation) {
            return Err(InvalidOperation::OutsideTurn.into());
        }
        let ext = ext.get_or_insert_default();
        ext.after.push((invocation, f));
        self.extras.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// The record `invocation` gives the gate up (Yield): signal the drain, which parks it.
    pub fn begin_yield(&self, invocation: u64) {
        self.holding.store(false, Ordering::SeqCst);
        self.signal.store(invocation, Ordering::SeqCst);
    }

    /// The Yield of `invocation` was abandoned in the poll that asked for it (its future was
    /// dropped, e.g. by a `select!` whose other branch was ready): if the drain has not seen the
    /// signal yet, the record keeps the gate and goes on in this turn.
    pub fn cancel_yield(&self, invocation: u64) {
        if self
            .signal
            .compare_exchange(invocation, SIGNAL_NONE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.holding.store(true, Ordering::SeqCst);
        }
    }

    /// Whether `invocation` asked to yield (the signal is consumed; a stale one is cleared).
    fn take_yield(&self, invocation: u64) -> bool {
        if self.signal.load(Ordering::SeqCst) == SIGNAL_NONE {
            return false;
        }
        self.signal.swap(SIGNAL_NONE, Ordering::SeqCst) == invocation
    }

    fn park(&self, invocation: u64, fut: HandlerFuture) {
        self.ext.lock().unwrap().get_or_insert_default().parked = Some((invocation, fut));
    }

    /// Take the parked future (of `invocation`, or whichever is parked).
    fn take_parked(&self, invocation: Option<u64>) -> Option<(u64, HandlerFuture)> {
        let mut ext = self.ext.lock().unwrap();
        let ext = ext.as_mut()?;
        match (&ext.parked, invocation) {
            (Some((i, _)), Some(want)) if *i != want => None,
            _ => ext.parked.take(),
        }
    }

    /// The parked record `invocation` gets the right back in a new turn.
    fn resume(&self, invocation: u64, fence: Fence, turn: u64) -> Option<HandlerFuture> {
        let (_, fut) = self.take_parked(Some(invocation))?;
        self.fence.store(fence.0, Ordering::Relaxed);
        self.turn.store(turn, Ordering::Relaxed);
        self.holding.store(true, Ordering::SeqCst);
        Some(fut)
    }
}

/// What a job receives when its turn starts.
#[derive(Clone)]
pub(crate) struct TurnEnv {
    pub lane: Arc<LaneHandle>,
    pub invocation: u64,
    pub class: LaneClass,
    /// A cycle counter reading taken on this thread after the previous turn it ran ended and
    /// before this one started, with nothing awaited in between ([`CycleStamp::NONE`]: none):
    /// a check at this turn's start may be asked at that instant instead of reading again.
    pub stamp: CycleStamp,
}

/// A record started inline ([`LaneHandle::try_start_inline`]): the caller holds the gate's right
/// (fencing number `fence`) for it.
#[must_use = "an inline turn holds the gate's right until finished or handed off"]
pub(crate) struct InlineTurn {
    fence: Fence,
    /// The record's invocation (its registration scope).
    pub invocation: u64,
}

/// What [`LaneHandle::try_start_inline_or_submit`] did.
pub(crate) enum StartOrSubmit {
    /// Started inline: the caller runs the record ([`run_started_inline`]).
    Inline(InlineTurn),
    /// Admitted into the lane.
    Submitted,
    /// Refused (full, ended, shut down): the job comes back.
    Refused(RuntimeError, Job),
}

/// What one inline poll of a handler's future gave ([`LaneHandle::poll_inline`]).
pub(crate) enum InlinePoll<O> {
    /// It finished.
    Ready(O),
    /// It waits for something: a drain continues it.
    Pending,
    /// It asked to yield (EG-3): it is parked.
    Yielded,
}

/// A record started inline whose handler returned a future, handed to a new drain.
struct InFlight {
    lane: LaneId,
    data: Arc<LaneHandle>,
    invocation: u64,
    fut: HandlerFuture,
}

enum InlineEnd {
    Done(Result<(), HandlerError>),
    Yielded(HandlerFuture),
}

/// Polls a handler future in place (with the lane's waker when the lane may yield) and reports a
/// Yield as soon as the handler signals it.
struct Inline<'a> {
    fut: Option<HandlerFuture>,
    lane: &'a Arc<LaneHandle>,
    invocation: u64,
}

impl Future for Inline<'_> {
    type Output = InlineEnd;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<InlineEnd> {
        let lane = self.lane;
        let polled = if lane.yield_allowed {
            let (wake, waker) = lane.lane_wake();
            wake.set_drain(cx.waker());
            wake.word.before_poll();
            let mut lcx = Context::from_waker(waker);
            let fut = self.fut.as_mut().expect("polled after end");
            catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut lcx)))
        } else {
            let fut = self.fut.as_mut().expect("polled after end");
            catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)))
        };
        let end = match polled {
            Err(_) => InlineEnd::Done(Err(HandlerError::Panicked)),
            Ok(Poll::Ready(r)) => InlineEnd::Done(r),
            Ok(Poll::Pending) if lane.slot.take_yield(self.invocation) => {
                InlineEnd::Yielded(self.fut.take().unwrap())
            }
            Ok(Poll::Pending) => return Poll::Pending,
        };
        if let Some((wake, _)) = lane.wake.get() {
            // the record no longer runs in this drain: keep no waker of it (it would keep the
            // drain task's memory after the task ended)
            *wake.drain.lock().unwrap() = None;
        }
        Poll::Ready(end)
    }
}

/// Returns `Pending` once after waking its own task: the task goes to the back of its worker's
/// run queue, so tasks already queued there (a requester just woken) run first. Cheaper than
/// `tokio::task::yield_now`'s deferred wake-up in a request/reply ping-pong (measured: ask
/// round trips 0.80 → 1.69 M/s; the cause inside tokio was not isolated — it is not an extra
/// `epoll_wait`, whose count strace shows unchanged).
#[derive(Default)]
struct Requeue(bool);

impl Future for Requeue {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Runs `work`, an application record started inline (`Submission::offer`), on the
/// calling thread to its terminal or its first wait: the application domain marker set (EG-13),
/// the lane runtime's context entered (a handler may spawn or start timers), a panic caught as
/// a drain catches it.
///
/// `keep`: a record that reaches its terminal here keeps its right (and its claim in the core)
/// and comes back, for the caller to continue a held inline run with
/// ([`LaneHandle::continue_inline`]) or release ([`LaneHandle::release_inline`]); its terminal
/// work (`end_record`: post-processing, barriers, held replies, the error counted) has run.
/// Otherwise, or for a record handed off or parked, `None`.
pub(crate) fn run_started_inline<F>(
    lane: &Arc<LaneHandle>,
    turn: InlineTurn,
    stamp: CycleStamp,
    work: F,
    keep: bool,
) -> Option<InlineTurn>
where
    F: FnOnce(TurnEnv, &LaneHandle) -> Handled<()>,
{
    let _rt = lane.rt().app.enter();
    DOMAIN.sync_scope(Domain::Application, || {
        let invocation = turn.invocation;
        let env = TurnEnv {
            lane: lane.clone(),
            invocation,
            class: LaneClass::Application,
            stamp,
        };
        let ran = catch_unwind(AssertUnwindSafe(move || work(env, lane)))
            .unwrap_or(Handled::Now(Err(HandlerError::Panicked)));
        let terminal = |turn: InlineTurn, r: Result<(), HandlerError>| {
            if keep {
                end_record(&lane.gate, lane, invocation, r);
                Some(turn)
            } else {
                lane.finish_inline(turn, r);
                None
            }
        };
        let mut fut = match ran {
            Handled::Now(r) => return terminal(turn, r),
            Handled::Later(f) => f,
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let polled = catch_unwind(AssertUnwindSafe(|| {
            lane.poll_inline(invocation, &mut cx, &mut fut)
        }));
        match polled {
            Err(_) => terminal(turn, Err(HandlerError::Panicked)),
            Ok(InlinePoll::Ready(r)) => terminal(turn, r),
            // a new drain polls it again (with its own waker) and keeps the right
            Ok(InlinePoll::Pending) => {
                lane.hand_off_inline(turn, fut);
                None
            }
            Ok(InlinePoll::Yielded) => {
                lane.park_inline(turn, fut);
                None
            }
        }
    })
}

fn run_job(job: Job, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
    catch_unwind(AssertUnwindSafe(move || job.run(env, lane)))
        .unwrap_or(Handled::Now(Err(HandlerError::Panicked)))
}

/// The record reached its terminal while the right is held: post-processing (EG-8), barriers
/// (EG-5.2/5.3). The caller then returns the reservation in the core (EG-7.2), batched with the
/// next lane decision under one lock.
fn end_record(
    gate: &Arc<GateInner>,
    lane: &Arc<LaneHandle>,
    invocation: u64,
    r: Result<(), HandlerError>,
) {
    let ended = lane.slot.end(invocation);
    let rt = &gate.rt;
    let Some(Ended {
        after,
        barriers,
        replies,
    }) = ended
    else {
        if let Err(e) = &r {
            rt.metrics.handler_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(object = lane.object, kind = ?lane.kind, error = %e, "handler failed");
        }
        return;
    };
    for f in after {
        let _ = catch_unwind(AssertUnwindSafe(f));
    }
    if let Err(e) = &r {
        rt.metrics.handler_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(object = lane.object, kind = ?lane.kind, error = %e, "handler failed");
    }
    if r.is_ok() {
        for b in barriers {
            rt.metrics
                .barriers_activated
                .fetch_add(1, Ordering::Relaxed);
            activate_barrier(rt, b);
        }
    } else if !barriers.is_empty() {
        rt.metrics
            .barriers_discarded
            .fetch_add(barriers.len() as u64, Ordering::Relaxed);
        // EG-5.3: discarded (dropped) before any held reply goes out
        drop(barriers);
    }
    for send in replies {
        send();
    }
}

/// Activate the barrier (the moving object's queue stops starting records, EG-5.1/5.2) and run
/// the Join; its result lifts the barrier through the moving object's completion callback, which
/// runs before any further record of that object (EG-5.4).
fn activate_barrier(rt: &Arc<RtShared>, b: Barrier) {
    let (moving, op) = b.activate();
    let mut delivery = JoinDelivery {
        moving: Some(moving),
    };
    rt.app.spawn(DOMAIN.scope(Domain::Application, async move {
        let result = op().await;
        delivery.deliver(result);
    }));
}

/// The registrations of a record that ended without finishing normally: barriers discarded
/// (EG-5.3), held replies sent.
fn settle_aborted(rt: &RtShared, ended: Option<Ended>) {
    let Some(Ended {
        barriers, replies, ..
    }) = ended
    else {
        return;
    };
    if !barriers.is_empty() {
        rt.metrics
            .barriers_discarded
            .fetch_add(barriers.len() as u64, Ordering::Relaxed);
        drop(barriers);
    }
    for send in replies {
        send();
    }
}

/// The running record yielded (EG-3): park its future in the lane's slot (the claim stays, the
/// lane's next record does not run, EG-3.1) and let the drain go on. Any wake-up of the future
/// appends its resume record ([`LaneWake`]); the drain that pops it polls the future again.
fn park(gate: &GateInner, lane: &Arc<LaneHandle>, invocation: u64, fut: HandlerFuture) {
    let _ = gate.gate.lock().handle_yield(lane.lane, invocation);
    lane.slot.park(invocation, fut);
    let (wake, _) = lane.lane_wake();
    if let Some(inv) = wake.word.park(invocation) {
        // woken while it was being parked: nobody else saw it parked
        request_resume(lane, inv);
    }
}

/// Extra application records of one lane taken per turn boundary when the lane rules allow
/// ([`super::core::GateCore::poll_turn_batch`]): the holder then takes the core once per batch
/// instead of once per record. Up to a whole default lane: the records are taken by handing the
/// FIFO's buffer over, and those not started go back when an input ends the batch.
const BATCH_EXTRA: usize = 1024;

/// Continue a record whose handler returned a future (or a resumed one); `Some(result)` at its
/// terminal, `None` if it yielded (parked: the claim stays, EG-3.1).
async fn run_later(
    gate: &Arc<GateInner>,
    data: &Arc<LaneHandle>,
    invocation: u64,
    fut: HandlerFuture,
) -> Option<Result<(), HandlerError>> {
    // A record that awaits keeps the right for its whole continuation (EG-2.6) and may yield:
    // end the batch first, so its records not started are back in the FIFO (seen by seal,
    // return_pending, end) and the core's claim names this record.
    drop(gate.gate.lock());
    let end = Inline {
        fut: Some(fut),
        lane: data,
        invocation,
    }
    .await;
    match end {
        InlineEnd::Done(r) => Some(r),
        InlineEnd::Yielded(fut) => {
            park(gate, data, invocation, fut);
            None
        }
    }
}

/// What the drain runs next: a turn the core chose, or the in-flight record it was started with.
enum Step {
    Turn(Turn<Job, Arc<LaneHandle>>),
    InFlight(InFlight),
}

async fn drain(gate: Arc<GateInner>, mut fence: Fence, mut first: Option<InFlight>) {
    let clock = gate.rt.config.clock.clone();
    let budget = gate.rt.config.occupancy_budget;
    let mut start = clock.budget_start();
    // a finished record whose reservation is returned together with the next lane decision
    let mut finished: Option<(LaneId, u64)> = None;
    let mut idled: u8 = 0;
    // the last turn ran a single record (no batch)
    let mut lone = false;
    // the buffer a batch is taken into (capacity reused)
    let mut spare: std::collections::VecDeque<Queued<Job>> = std::collections::VecDeque::new();
    // the budget check after the last handler, when a batch made it already
    let mut checked: Option<bool> = None;
    loop {
        let (next, room) = match first.take() {
            Some(f) => (Some(Step::InFlight(f)), false),
            None => {
                let g = &gate.gate;
                let mut core = g.lock_unquiesced();
                // the previous batch is exhausted, or was ended by an input: either way it is over
                g.end_batch(&mut core);
                let room = match finished.take() {
                    Some((lane, inv)) => {
                        let room = core.handle_turn_finished(lane, inv).unwrap_or(false);
                        // A waiter for the lane's space (a backlog) refills it here, on this
                        // thread, before the next lane decision: its records join this turn's
                        // batch, no task is woken.
                        let waiting = room
                            .then(|| core.lane_data_ref(lane))
                            .flatten()
                            .filter(|l| l.space_armed())
                            .cloned();
                        if let Some(l) = waiting {
                            drop(core);
                            l.tell_space();
                            // possibly the last handle of a lane removed meanwhile: dropped
                            // before the core lock, not under it
                            drop(l);
                            core = g.lock_unquiesced();
                            g.end_batch(&mut core);
                        }
                        room
                    }
                    None => false,
                };
                let turn = g.poll_turn_batch(&mut core, BATCH_EXTRA, &mut spare);
                (turn.map(Step::Turn), room)
            }
        };
        if room || next.is_none() {
            gate.notify_space();
        }
        match next {
            None if idled == 0 => {
                // Senders usually refill the lane within a scheduler pass: give them that pass
                // while holding the right instead of ending the task and having the next
                // submitter spawn a new drain. After a lone record (request/reply ping-pong) a
                // plain requeue: the requester woken by the reply runs first on this worker and
                // its next request is found at once. After a batch tokio's deferred yield, as
                // before: a plain requeue there cut streaming tell throughput by 25-55 % in quick
                // runs (probably: the drain then waits on the stealable run queue, the other
                // worker takes it, and the lane's records cross cores).
                idled = 1;
                if lone {
                    Requeue::default().await;
                } else {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            None => match gate.gate.release_and_recheck() {
                Some(f) => {
                    fence = f;
                    start = clock.budget_start();
                    idled = 0;
                    continue;
                }
                None => {
                    gate.gate.trim_idle_batch();
                    return;
                }
            },
            Some(Step::Turn(Turn::Run {
                lane,
                data,
                class,
                invocation,
                item,
            })) => {
                idled = 0;
                lone = true;
                let (mut invocation, mut item) = (invocation, item);
                // the reading of the budget check after the previous record of this batch
                let mut stamp = CycleStamp::NONE;
                // the record, then the batch's next records while the batch goes on: each is
                // its own turn (new turn number, own invocation and registration scope)
                loop {
                    checked = None;
                    data.slot.begin(invocation, fence, gate.next_turn());
                    let env = TurnEnv {
                        lane: data.clone(),
                        invocation,
                        class,
                        stamp,
                    };
                    // a synchronous handler runs without an async frame of its own
                    let r = match run_job(item, env, &data) {
                        Handled::Now(r) => r,
                        Handled::Later(fut) => match run_later(&gate, &data, invocation, fut).await
                        {
                            Some(r) => r,
                            None => break,
                        },
                    };
                    end_record(&gate, &data, invocation, r);
                    // EG-9 / EG-7.4: budget checked after each handler, never pre-empting one;
                    // its reading also serves the next record's start (nothing awaited between)
                    stamp = clock.stamp();
                    let spent = clock.budget_spent_at(&start, budget, stamp);
                    checked = Some(spent);
                    if spent {
                        finished = Some((lane, invocation));
                        break;
                    }
                    match gate.gate.batch_next() {
                        Some(next) => {
                            invocation += 1;
                            item = next;
                            lone = false;
                        }
                        None => {
                            finished = Some((lane, invocation));
                            break;
                        }
                    }
                }
            }
            Some(Step::InFlight(InFlight {
                lane,
                data,
                invocation,
                fut,
            })) => {
                idled = 0;
                lone = true;
                if let Some(r) = run_later(&gate, &data, invocation, fut).await {
                    end_record(&gate, &data, invocation, r);
                    finished = Some((lane, invocation));
                }
            }
            Some(Step::Turn(Turn::Resume {
                lane,
                data,
                invocation,
            })) => {
                idled = 0;
                lone = true;
                let end = match data.slot.resume(invocation, fence, gate.next_turn()) {
                    Some(fut) => run_later(&gate, &data, invocation, fut).await,
                    // cancelled meanwhile (its lane was removed)
                    None => Some(Err(HandlerError::Cancelled)),
                };
                if let Some(r) = end {
                    end_record(&gate, &data, invocation, r);
                    finished = Some((lane, invocation));
                }
            }
        }
        // EG-9 / EG-7.4: budget checked at the handler boundary, never pre-empting a handler
        // (once per boundary: a batch's last record was checked in the batch).
        if checked
            .take()
            .unwrap_or_else(|| clock.budget_spent(&start, budget))
        {
            let mut waiting: Option<Arc<LaneHandle>> = None;
            {
                let g = &gate.gate;
                let mut core = g.lock_unquiesced();
                g.end_batch(&mut core);
                if let Some((lane, inv)) = finished.take() {
                    let room = core.handle_turn_finished(lane, inv).unwrap_or(false);
                    waiting = room
                        .then(|| core.lane_data_ref(lane))
                        .flatten()
                        .filter(|l| l.space_armed())
                        .cloned();
                }
            }
            gate.notify_space();
            if let Some(l) = waiting.take() {
                l.tell_space();
            }
            gate.gate.word.release();
            tokio::task::yield_now().await;
            if !gate.gate.lock_unquiesced().has_ready() {
                gate.gate.trim_idle_batch();
                return;
            }
            match gate.gate.word.try_acquire() {
                Some(f) => {
                    fence = f;
                    start = clock.budget_start();
                }
                None => {
                    gate.gate.trim_idle_batch();
                    return;
                }
            }
        }
    }
}

/// Await `fut`, failing with `DeadlineExceeded` when the deadline, kept by the infrastructure
/// domain, fires first (EG-16.21).
pub(crate) async fn with_deadline<T>(
    rt: &Arc<RtShared>,
    fut: BoxFuture<Result<T, RuntimeError>>,
    deadline: Option<std::time::Duration>,
) -> Result<T, RuntimeError> {
    let Some(d) = deadline else {
        return fut.await;
    };
    let (tx, rx) = oneshot::channel::<()>();
    let rt2 = rt.clone();
    rt.infra
        .spawn(DOMAIN.scope(Domain::Infrastructure, async move {
            let mut tx = tx;
            let fired = tokio::select! {
                _ = tokio::time::sleep(d) => true,
                _ = tx.closed() => false,
            };
            if fired {
                rt2.metrics.deadlines_fired.fetch_add(1, Ordering::Relaxed);
                rt2.status.publish("deadline", "fired");
                let _ = tx.send(());
            }
        }));
    tokio::select! {
        r = fut => r,
        _ = rx => Err(RuntimeError::DeadlineExceeded),
    }
}

/// Spawn `fut` as application work (a Yield's call, EG-3).
pub(crate) fn spawn_application<F>(rt: &RtShared, fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt.app.spawn(DOMAIN.scope(Domain::Application, fut))
}

pub(crate) fn spawn_infrastructure<F>(rt: &RtShared, fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt.infra.spawn(DOMAIN.scope(Domain::Infrastructure, fut))
}

/// A lane behind a gate of its own in `rt`, for unit tests of the parts around the runtime.
#[cfg(all(test, not(feature = "loom")))]
pub(crate) fn test_lane_in(rt: &super::Runtime) -> Arc<LaneHandle> {
    let gate = GateInner::new(&rt.shared);
    gate.add_lane(LaneKind::Actor, false).unwrap()
}

/// A lane behind a gate of its own, for unit tests of the runtime's parts.
#[cfg(all(test, not(feature = "loom")))]
pub(crate) fn test_lane() -> Arc<LaneHandle> {
    let rt = super::Runtime::new(RuntimeConfig {
        application_workers: 1,
        infrastructure_workers: 1,
        ..Default::default()
    })
    .unwrap();
    let gate = GateInner::new(&rt.shared);
    gate.add_lane(LaneKind::Actor, false).unwrap()
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    // EG-6.1, issue 12: the yield signal names its invocation; a stale one never acts on another
    // record, and a Yield withdrawn before the drain saw it leaves the record holding the gate.
    #[test]
    fn yield_signal_is_tagged_with_its_invocation() {
        let s = Slot::new();
        s.begin(5, Fence(0), 1);
        s.begin_yield(5);
        assert!(!s.holds_gate(5));
        // another invocation's drain never sees it (and clears it)
        assert!(!s.take_yield(6));
        assert!(!s.take_yield(5));
        // a stale withdrawal does nothing
        s.begin_yield(5);
        s.cancel_yield(4);
        assert!(!s.holds_gate(5));
        assert!(s.take_yield(5));
        // withdrawn after the drain took it (parked): nothing to undo
        s.cancel_yield(5);
        assert!(!s.holds_gate(5));
        // withdrawn in the poll that asked: the record keeps the gate, the drain sees nothing
        s.begin_yield(5);
        s.cancel_yield(5);
        assert!(s.holds_gate(5));
        assert!(!s.take_yield(5));
        // the record's end clears its own signal only
        s.begin_yield(5);
        assert!(s.end(5).is_none());
        assert!(!s.take_yield(7));
    }
}
