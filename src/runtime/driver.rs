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
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::sync::atomic::Ordering;

use super::core::{LaneClass, LaneId, Queued, Turn};
use super::error::{HandlerError, RuntimeError};
use super::gate::Fence;
use super::{barrier::*, domain::*, handled::*, lane::*, slot::*};
use crate::clock::CycleStamp;

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
    pub(super) fence: Fence,
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
pub(super) struct InFlight {
    pub(super) lane: LaneId,
    pub(super) data: Arc<LaneHandle>,
    pub(super) invocation: u64,
    pub(super) fut: HandlerFuture,
}

enum InlineEnd {
    Done(Result<(), HandlerError>),
    Yielded(HandlerFuture),
}

/// Polls a handler future in place (with the lane's waker when the lane may yield) and reports a
/// Yield as soon as the handler signals it.
struct Inline<'a> {
    pub(super) fut: Option<HandlerFuture>,
    pub(super) lane: &'a Arc<LaneHandle>,
    pub(super) invocation: u64,
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
            .unwrap_or_else(|_| Handled::Now(Err(HandlerError::Panicked)));
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
        .unwrap_or_else(|_| Handled::Now(Err(HandlerError::Panicked)))
}

/// The record reached its terminal while the right is held: post-processing (EG-8), barriers
/// (EG-5.2/5.3). The caller then returns the reservation in the core (EG-7.2), batched with the
/// next lane decision under one lock.
pub(super) fn end_record(
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
pub(super) fn settle_aborted(rt: &RtShared, ended: Option<Ended>) {
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
pub(super) fn park(gate: &GateInner, lane: &Arc<LaneHandle>, invocation: u64, fut: HandlerFuture) {
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

pub(super) async fn drain(gate: Arc<GateInner>, mut fence: Fence, mut first: Option<InFlight>) {
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
    // the turn being run came with a batch (only this holder starts one): a lone record's
    // terminal does not look for the batch's next record
    let mut batched = false;
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
                batched = core.batch_active();
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
                    let next = if batched {
                        gate.gate.batch_next()
                    } else {
                        None
                    };
                    match next {
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
/// A lane behind a gate of its own in `rt`, for unit tests of the parts around the runtime.
#[cfg(all(test, not(feature = "loom")))]
pub(crate) fn test_lane_in(rt: &super::Runtime) -> Arc<LaneHandle> {
    let gate = GateInner::new(&rt.shared);
    gate.add_lane(LaneKind::Actor, false).unwrap()
}

/// A lane behind a gate of its own, for unit tests of the runtime's parts.
#[cfg(all(test, not(feature = "loom")))]
pub(crate) fn test_lane() -> Arc<LaneHandle> {
    let rt = super::Runtime::new(super::config::RuntimeConfig {
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
