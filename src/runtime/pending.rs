//! A submission prepared but not yet admitted: the caller tries it without waiting and, when
//! its lane is full, gets it back instead of losing it, to keep (in order, with whatever else
//! it holds for that lane) and retry or wait for later. This lets a submitter that must never
//! block (a mesh I/O thread) still lose nothing.

use std::sync::Arc;

use super::core::LaneClass;
use super::driver::{StartOrSubmit, TurnEnv};
use super::error::RuntimeError;
use super::handled::Handled;
use super::held::HeldRun;
use super::job::Job;
use super::lane::LaneHandle;
use crate::clock::CycleStamp;

/// A record for one lane that has not been admitted: it has not run and holds no reservation.
/// Dropping it drops the record unrun (as a refused submission does).
pub struct PendingSubmit {
    lane: Arc<LaneHandle>,
    class: LaneClass,
    payload_len: usize,
    job: Job,
}

impl std::fmt::Debug for PendingSubmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSubmit")
            .field("payload_len", &self.payload_len)
            .finish_non_exhaustive()
    }
}

/// Why a non-blocking submission did not enter its lane.
#[derive(Debug)]
#[non_exhaustive]
pub enum TrySubmitError {
    /// The lane is full: the record comes back to be retried or waited for.
    Full(PendingSubmit),
    /// Refused for good (the lane ended, the runtime shut down); the record was dropped.
    Refused(RuntimeError),
}

impl PendingSubmit {
    pub(crate) fn new(
        lane: &Arc<LaneHandle>,
        class: LaneClass,
        payload_len: usize,
        job: Job,
    ) -> Self {
        PendingSubmit {
            lane: lane.clone(),
            class,
            payload_len,
            job,
        }
    }

    /// Submits without waiting: a full lane hands the record back.
    pub fn retry(self) -> Result<(), TrySubmitError> {
        let PendingSubmit {
            lane,
            class,
            payload_len,
            job,
        } = self;
        match lane.try_submit(class, payload_len, job) {
            Ok(()) => Ok(()),
            Err((
                RuntimeError::ApplicationLaneFull(_) | RuntimeError::LifecycleLaneFull(_),
                job,
            )) => Err(TrySubmitError::Full(PendingSubmit {
                lane,
                class,
                payload_len,
                job,
            })),
            Err((e, _)) => Err(TrySubmitError::Refused(e)),
        }
    }

    /// Runs the record now, on the calling thread, when its lane is idle, its gate free and
    /// nothing waits for the gate's right (`docs/RUNTIME.md`, "Inline delivery"): admitted,
    /// started and ended exactly as if it had been queued and picked, in the application domain
    /// (EG-13) with the lane runtime's context entered. A handler future not ready at its first
    /// poll goes on in a new drain that keeps the right (or is parked, if it yielded), as an
    /// inline ask's does. `Err` hands the record back untouched: the lane is busy (or the record
    /// is not an application record); the caller submits it instead, so nothing overtakes
    /// what waits (a full or busy lane never runs work inline, EG-6.3).
    pub fn try_run_inline(self) -> Result<(), PendingSubmit> {
        if self.class != LaneClass::Application {
            return Err(self);
        }
        let Some(turn) = self.lane.try_start_inline(self.payload_len) else {
            return Err(self);
        };
        let job = self.job;
        let _ = super::driver::run_started_inline(
            &self.lane,
            turn,
            CycleStamp::NONE,
            move |env, lane| job.run(env, lane),
            false,
        );
        Ok(())
    }

    /// The message of a send prepared for an actor of message type `M` and reply type `R`
    /// (`prepare_send`), taken out unrun so a relocation can carry a record that waited in a
    /// backlog to its target in arrival order; any other record is handed back.
    pub(crate) fn into_message<M: Send + 'static, R: Send + 'static>(self) -> Result<M, Self> {
        if !self.job.captures::<super::spot::SendRecord<M, R>>() {
            return Err(self);
        }
        let PendingSubmit {
            lane,
            class,
            payload_len,
            job,
        } = self;
        match job.into_captured() {
            Ok(any) => match any.downcast::<super::spot::SendRecord<M, R>>() {
                Ok(r) => Ok(r.into_message()),
                Err(_) => unreachable!("checked: its type"),
            },
            Err(job) => Err(PendingSubmit {
                lane,
                class,
                payload_len,
                job,
            }),
        }
    }

    /// The lane it is for.
    pub(crate) fn lane(&self) -> &Arc<LaneHandle> {
        &self.lane
    }

    /// Waits for lane space and submits (backpressure; the record never runs inline).
    pub async fn wait(self) -> Result<(), RuntimeError> {
        self.lane
            .submit_wait(self.class, self.payload_len, self.job)
            .await
    }
}

/// A record prepared for one lane with its work still unboxed (`F` is the closure itself, not a
/// [`Job`]): the submitter on a mesh I/O thread offers it ([`Submission::offer`]): run inline,
/// it calls the closure without allocating; the work is boxed (when larger than a lane slot)
/// only when it must go through the lane. Generic, so the closure is moved by value through inlined code instead of copied
/// through a 160-byte wide slot (measured: such a slot's moves cost more than the box). It
/// borrows its lane's handle (no reference count touched unless it becomes a `PendingSubmit`).
/// The work of a [`Prepared`] record: run unboxed when it runs inline, made a [`Job`] only to
/// enter the lane.
pub(crate) trait RecordWork: Send + 'static {
    /// Run it in a turn of `lane`.
    fn run(self, env: TurnEnv, lane: &LaneHandle) -> Handled<()>;
    /// The job that waits in the lane.
    fn into_job(self) -> Job;
}

/// A closure as [`RecordWork`].
pub(crate) struct Closure<F>(pub F);

impl<F> RecordWork for Closure<F>
where
    F: FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static,
{
    #[inline]
    fn run(self, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        (self.0)(env, lane)
    }

    fn into_job(self) -> Job {
        Job::with_lane(self.0)
    }
}

pub(crate) struct Prepared<'a, F> {
    lane: &'a Arc<LaneHandle>,
    class: LaneClass,
    payload_len: usize,
    work: F,
    /// The submitter's cycle reading taken for this record just before it was prepared: the
    /// turn's start reading when it runs inline at its first offer (see [`TurnEnv::stamp`]);
    /// dropped when it enters the lane or becomes a [`PendingSubmit`].
    stamp: CycleStamp,
}

impl<'a, F> Prepared<'a, F>
where
    F: RecordWork,
{
    pub(crate) fn new(
        lane: &'a Arc<LaneHandle>,
        class: LaneClass,
        payload_len: usize,
        work: F,
    ) -> Self {
        Prepared {
            lane,
            class,
            payload_len,
            work,
            stamp: CycleStamp::NONE,
        }
    }

    /// The same record with the submitter's cycle reading `stamp`, taken after the previous
    /// turn the submitting thread ran and before this record's offer, nothing awaited between
    /// (see [`TurnEnv::stamp`]).
    pub(crate) fn stamped(self, stamp: CycleStamp) -> Self {
        Prepared { stamp, ..self }
    }
}

/// Whether [`Submission::offer`] may run a record on the submitting thread.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Inline<'a> {
    /// Never: it goes through its lane.
    No,
    /// When its lane is idle, its gate free and nothing waits for the gate
    /// ([`PendingSubmit::try_run_inline`]).
    IfIdle,
    /// As `IfIdle`, in a held inline run ([`HeldRun`]): a record of the lane whose right `run`
    /// keeps continues under it when nothing waits ([`LaneHandle::continue_inline`]); a
    /// record for another lane releases it first; a record run inline keeps its right in `run`
    /// at its terminal.
    Held(&'a HeldRun),
}

impl PartialEq for Inline<'_> {
    /// Held runs are equal when they are the same run.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Inline::No, Inline::No) | (Inline::IfIdle, Inline::IfIdle) => true,
            (Inline::Held(a), Inline::Held(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }
}

impl Eq for Inline<'_> {}

impl Inline<'_> {
    fn allowed(self) -> bool {
        !matches!(self, Inline::No)
    }
}

/// What [`Submission::offer`] did with a record.
pub(crate) enum Offered {
    /// It ran inline, or entered its lane.
    Taken,
    /// Its lane is full: it comes back.
    Full(PendingSubmit),
    /// Refused for good (the lane ended, the runtime shut down); the record was dropped.
    Refused(RuntimeError),
}

impl Offered {
    fn of(
        lane: &Arc<LaneHandle>,
        class: LaneClass,
        payload_len: usize,
        r: Result<(), (RuntimeError, Job)>,
    ) -> Self {
        match r {
            Ok(()) => Offered::Taken,
            Err((
                RuntimeError::ApplicationLaneFull(_) | RuntimeError::LifecycleLaneFull(_),
                job,
            )) => Offered::Full(PendingSubmit {
                lane: lane.clone(),
                class,
                payload_len,
                job,
            }),
            Err((e, _)) => Offered::Refused(e),
        }
    }
}

/// A record for one lane not yet admitted, as a non-blocking submitter hands it in (see
/// `crate::backlog::Backlogs::submit`): a [`PendingSubmit`] or a [`Prepared`] record.
pub(crate) trait Submission: Sized {
    /// Runs it inline when `inline` allows it and [`PendingSubmit::try_run_inline`] would (or,
    /// in a held inline run, continues the run), else submits it without waiting
    /// ([`PendingSubmit::retry`]): both decided under one core lock
    /// ([`LaneHandle::try_start_inline_or_submit`], [`LaneHandle::continue_inline`]).
    fn offer(self, inline: Inline<'_>) -> Offered;
    /// The record as a [`PendingSubmit`], to enter its lane or wait in a backlog.
    fn into_pending(self) -> PendingSubmit;
}

impl Submission for PendingSubmit {
    /// A boxed record keeps no held run: a right kept is released first.
    fn offer(self, inline: Inline<'_>) -> Offered {
        if let Inline::Held(run) = inline {
            run.release();
        }
        let PendingSubmit {
            lane,
            class,
            payload_len,
            job,
        } = self;
        let mut job = Some(job);
        let r = lane.try_start_inline_or_submit(class, payload_len, inline.allowed(), || {
            job.take().expect("made once")
        });
        let r = match r {
            StartOrSubmit::Inline(turn) => {
                let job = job.take().expect("not made: it runs inline");
                let _ = super::driver::run_started_inline(
                    &lane,
                    turn,
                    CycleStamp::NONE,
                    move |env, lane| job.run(env, lane),
                    false,
                );
                Ok(())
            }
            StartOrSubmit::Submitted => Ok(()),
            StartOrSubmit::Refused(e, job) => Err((e, job)),
        };
        Offered::of(&lane, class, payload_len, r)
    }

    #[inline]
    fn into_pending(self) -> PendingSubmit {
        self
    }
}

impl<F> Submission for Prepared<'_, F>
where
    F: RecordWork,
{
    /// The closure runs unboxed inline; it is boxed only to enter the lane.
    #[inline]
    fn offer(self, inline: Inline<'_>) -> Offered {
        let Prepared {
            lane,
            class,
            payload_len,
            work,
            stamp,
        } = self;
        let run = match inline {
            Inline::Held(run) => Some(run),
            _ => None,
        };
        if let Some(run) = run
            && let Some((held, turn)) = run.take()
        {
            if Arc::ptr_eq(&held, lane) && class == LaneClass::Application {
                if let Some(turn) = held.continue_inline(turn, payload_len) {
                    if let Some(turn) = super::driver::run_started_inline(
                        lane,
                        turn,
                        stamp,
                        move |e, l: &LaneHandle| work.run(e, l),
                        true,
                    ) {
                        run.keep(held, turn);
                    }
                    return Offered::Taken;
                }
                // released (something waits, or the record does not fit): it goes the normal
                // way, behind what waits
            } else {
                held.release_inline(turn);
            }
        }
        let mut work = Some(work);
        let r = lane.try_start_inline_or_submit(class, payload_len, inline.allowed(), || {
            work.take().expect("made once").into_job()
        });
        let r = match r {
            StartOrSubmit::Inline(turn) => {
                let work = work.take().expect("not boxed: it runs inline");
                let keep = run.filter(|run| run.streak(lane));
                if let Some(turn) = super::driver::run_started_inline(
                    lane,
                    turn,
                    stamp,
                    move |e, l: &LaneHandle| work.run(e, l),
                    keep.is_some(),
                ) && let Some(run) = keep
                {
                    run.keep(lane.clone(), turn);
                }
                Ok(())
            }
            StartOrSubmit::Submitted => Ok(()),
            StartOrSubmit::Refused(e, job) => Err((e, job)),
        };
        Offered::of(lane, class, payload_len, r)
    }

    #[inline]
    fn into_pending(self) -> PendingSubmit {
        PendingSubmit {
            lane: self.lane.clone(),
            class: self.class,
            payload_len: self.payload_len,
            job: self.work.into_job(),
        }
    }
}

#[cfg(all(test, not(feature = "loom"), not(miri)))]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::runtime::driver::test_lane;

    /// Counts the allocations of the calling thread (the lib's unit tests run in parallel).
    struct CountingAlloc;

    thread_local! {
        static ALLOCS: Cell<usize> = const { Cell::new(0) };
    }

    // SAFETY: every call is forwarded unchanged to the system allocator; the count is a
    // thread-local `Cell` (`try_with`: no panic while the thread's locals are torn down).
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from `System.alloc` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static COUNTING: CountingAlloc = CountingAlloc;

    fn allocs() -> usize {
        ALLOCS.with(Cell::get)
    }

    /// A record's work larger than a lane slot (as a session packet turn's or an actor
    /// `Work`'s), counting its runs.
    fn work(
        ran: &Arc<AtomicUsize>,
    ) -> impl FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static {
        let ran = ran.clone();
        let big = [7u64; 12];
        move |_env, _lane: &LaneHandle| {
            assert_eq!(big[11], 7);
            ran.fetch_add(1, Ordering::SeqCst);
            Handled::ok(())
        }
    }

    // A record prepared unboxed (`Prepared`) that runs inline allocates nothing for its work;
    // the same record as a `PendingSubmit` boxes it (the allocation this avoids).
    #[test]
    fn a_prepared_record_run_inline_allocates_no_job() {
        let lane = test_lane();
        let ran = Arc::new(AtomicUsize::new(0));
        // warm-up: first-use allocations of the runtime and the thread
        let p = Prepared::new(&lane, LaneClass::Application, 8, Closure(work(&ran)));
        assert!(matches!(p.offer(Inline::IfIdle), Offered::Taken));
        let before = allocs();
        let p = Prepared::new(&lane, LaneClass::Application, 8, Closure(work(&ran)));
        assert!(matches!(p.offer(Inline::IfIdle), Offered::Taken));
        let unboxed = allocs() - before;
        let before = allocs();
        let p = PendingSubmit {
            lane: lane.clone(),
            class: LaneClass::Application,
            payload_len: 8,
            job: Job::with_lane(work(&ran)),
        };
        assert!(p.try_run_inline().is_ok());
        let boxed = allocs() - before;
        assert_eq!(ran.load(Ordering::SeqCst), 3, "every record ran inline");
        assert_eq!(unboxed, 0, "an unboxed inline turn allocates nothing");
        assert_eq!(boxed, 1, "a boxed one allocates its job");
        lane.remove();
    }

    fn runtime() -> crate::runtime::Runtime {
        crate::runtime::Runtime::new(crate::runtime::RuntimeConfig {
            application_workers: 1,
            infrastructure_workers: 1,
            ..Default::default()
        })
        .unwrap()
    }

    /// A record's work that reports `n` when it runs.
    fn report(
        tx: &std::sync::mpsc::Sender<u32>,
        n: u32,
    ) -> impl FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static {
        let tx = tx.clone();
        move |_env, _lane: &LaneHandle| {
            tx.send(n).unwrap();
            Handled::ok(())
        }
    }

    fn offer_held(
        lane: &Arc<LaneHandle>,
        run: &HeldRun,
        work: impl FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static,
    ) -> Offered {
        Prepared::new(lane, LaneClass::Application, 8, Closure(work)).offer(Inline::Held(run))
    }

    fn held_word(lane: &LaneHandle) -> bool {
        lane.gate.gate.word.is_held()
    }

    fn reserved(lane: &LaneHandle) -> (usize, bool) {
        let s = lane.gate.gate.lock().lane_stats(lane.lane).unwrap();
        (s.application_reserved_items, s.claimed)
    }

    /// Runs records `ns` of `lane` inline in `run`, each at once.
    fn run_inline(
        lane: &Arc<LaneHandle>,
        run: &HeldRun,
        tx: &std::sync::mpsc::Sender<u32>,
        rx: &std::sync::mpsc::Receiver<u32>,
        ns: impl IntoIterator<Item = u32>,
    ) {
        for n in ns {
            assert!(matches!(
                offer_held(lane, run, report(tx, n)),
                Offered::Taken
            ));
            assert_eq!(rx.try_recv(), Ok(n), "ran inline, at once");
        }
    }

    const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

    // A held inline run: from the second record of a streak of one lane on, consecutive
    // records run inline under one right (kept between them, the last record's claim
    // standing); a record for another lane of the gate releases it first; the release leaves
    // nothing claimed, reserved or held.
    // spec: EG-2.6, EG-7.2
    #[test]
    fn a_held_run_keeps_the_right_between_records_of_its_lane() {
        let rt = runtime();
        let lane = crate::runtime::test_lane_in(&rt);
        let other = lane
            .gate
            .add_lane(crate::runtime::LaneKind::Actor, false)
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let run = HeldRun::new();
        // the first record of a streak ends as any inline record
        run_inline(&lane, &run, &tx, &rx, [0]);
        assert!(!run.is_held() && !held_word(&lane));
        assert_eq!(reserved(&lane), (0, false));
        for n in 1..4 {
            run_inline(&lane, &run, &tx, &rx, [n]);
            assert!(run.is_held() && held_word(&lane));
            assert_eq!(reserved(&lane), (1, true), "the last record's claim stands");
        }
        // another lane of the same gate: the kept right goes first
        run_inline(&other, &run, &tx, &rx, [4]);
        assert_eq!(
            reserved(&lane),
            (0, false),
            "released before the other lane ran"
        );
        run_inline(&other, &run, &tx, &rx, [5]);
        assert!(run.is_held());
        assert_eq!(reserved(&other), (1, true));
        run.release();
        assert!(!run.is_held() && !held_word(&lane));
        assert_eq!(
            (reserved(&lane), reserved(&other)),
            ((0, false), (0, false))
        );
        // a plain inline offer keeps nothing
        for n in 6..8 {
            let p = Prepared::new(&lane, LaneClass::Application, 8, Closure(report(&tx, n)));
            assert!(matches!(p.offer(Inline::IfIdle), Offered::Taken));
            assert_eq!(rx.try_recv(), Ok(n));
            assert!(!held_word(&lane));
        }
    }

    // Nothing overtakes what waits (EG-6.3): a record another thread submitted while the right
    // was kept waits for it; the next record of the run then does not continue — the right goes
    // to a drain for the waiting record, and the new record enters the lane behind it.
    // spec: EG-6.3, EG-6.4, EG-2.1
    #[test]
    fn a_record_queued_while_the_right_is_kept_runs_before_the_next_of_the_run() {
        let rt = runtime();
        let lane = crate::runtime::test_lane_in(&rt);
        let (tx, rx) = std::sync::mpsc::channel();
        let run = HeldRun::new();
        run_inline(&lane, &run, &tx, &rx, [100, 0]);
        assert!(run.is_held());
        let queued = {
            let (lane, tx) = (lane.clone(), tx.clone());
            std::thread::spawn(move || {
                lane.try_submit(LaneClass::Application, 8, Job::with_lane(report(&tx, 1)))
                    .is_ok()
            })
            .join()
            .unwrap()
        };
        assert!(queued);
        assert_eq!(lane.gate.gate.lock().queue_length(lane.lane), Some((1, 0)));
        assert!(matches!(
            offer_held(&lane, &run, report(&tx, 2)),
            Offered::Taken
        ));
        // (record 2 entered the lane behind record 1, or — if the drain had already run
        // record 1 and gone — ran inline: either way after record 1)
        assert_eq!(rx.recv_timeout(WAIT), Ok(1));
        assert_eq!(rx.recv_timeout(WAIT), Ok(2));
    }

    // The end of a pass (the sink releases its run, or drops it): a record another thread
    // submitted while the right was kept runs right after, on a drain; and the space waiter
    // armed on the lane is told, as at any finish with room.
    #[test]
    fn a_released_or_dropped_run_hands_what_waits_a_drain() {
        struct Told(std::sync::mpsc::Sender<u32>);
        impl crate::runtime::gate::SpaceWaiter for Told {
            fn on_space(&self) {
                self.0.send(99).unwrap();
            }
        }
        let rt = runtime();
        for drop_it in [false, true] {
            let lane = crate::runtime::test_lane_in(&rt);
            let (tx, rx) = std::sync::mpsc::channel();
            let run = HeldRun::new();
            run_inline(&lane, &run, &tx, &rx, [100, 0]);
            assert!(run.is_held());
            lane.wait_for_space(Arc::new(Told(tx.clone())));
            let (l2, tx2) = (lane.clone(), tx.clone());
            std::thread::spawn(move || {
                assert!(
                    l2.try_submit(LaneClass::Application, 8, Job::with_lane(report(&tx2, 1)))
                        .is_ok()
                );
            })
            .join()
            .unwrap();
            assert!(held_word(&lane), "the kept right keeps the drain out");
            assert_eq!(rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty));
            if drop_it {
                drop(run);
            } else {
                run.release();
            }
            assert_eq!(rx.recv_timeout(WAIT), Ok(99), "the space waiter is told");
            assert_eq!(rx.recv_timeout(WAIT), Ok(1), "the waiting record runs");
        }
    }
}
