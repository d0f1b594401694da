//! Per-target backlogs of lane submissions that found their lane full.
//!
//! A submitter that must never block — the mesh I/O thread delivering records straight into
//! lanes — tries each record without waiting. When the target's lane is full, the record (a
//! [`PendingSubmit`]) waits in that target's backlog, behind which every later record for the
//! same target queues (FIFO per target). No task waits for the lane: the backlog arms a space
//! waiter on the full lane (`LaneHandle::wait_for_space`), and the thread that ends a turn of
//! that lane with room (its lane worker, or an inline finish) refills the lane from the backlog
//! right there, in order, until the lane is full again ([`Backlogs::refill`]; the protocol and
//! why it strands nothing: `docs/RUNTIME.md`, "Backlog refill"). Other targets are not
//! affected: a full lane holds only what is addressed to it.
//!
//! Bounds: the caller checks [`Backlogs::queued`] against its own limit before it prepares a
//! record (refusing over it), and a record that waits keeps its sender's receive-window credit
//! until it entered the lane (its [`Done`]), so what one sender can make a backlog hold is
//! bounded by its window. Counted: records that waited, targets that had a backlog, records
//! refused over the limit (`BacklogStats`).
//!
//! The refill moves records in runs: it takes everything queued for its target under one lock
//! (the target still counts them as waiting, and later records queue behind them), submits them
//! in order, and returns the credit of a run of records of one sender that entered the lane as
//! one release ([`Done::absorb`]) — before it stops and at the end of each run, never before a
//! record entered its lane.

use std::collections::VecDeque;
use std::hash::Hash;

use crate::hashing::SeededMap;
use crate::runtime::gate::SpaceWaiter;
use crate::runtime::{
    BoxFuture, BudgetStart, Clock, CycleStamp, Inline, LaneHandle, Offered, PendingSubmit,
    RuntimeError, Submission, TrySubmitError,
};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Mutex, MutexGuard};
use std::sync::{Arc, Weak};
use zlink_mesh::Origin;

/// Where held receive-window credit goes back (the node's mesh; implemented in
/// `node::dispatch`).
pub(crate) trait CreditReturn: Send + Sync + 'static {
    /// `records` records of `bytes` bytes in total from `origin` left their backlog.
    fn return_credit(&self, origin: Origin, records: u32, bytes: u64);
}

/// What a waiting record's leaving its backlog (entered its lane, or refused for good) must
/// run: return its sender's credit, or nothing. Plain data — the sender and the bytes, no
/// handle of where the credit goes (that is the [`Backlogs`]' own, kept once) — so a run of
/// records of one sender returns its credit at once ([`Done::absorb`]) and a record that waits
/// allocates nothing and takes no reference count for it. Dropped without being returned, it
/// returns nothing (its record did not leave the backlog).
pub(crate) struct Done(Credit);

enum Credit {
    Nothing,
    Held {
        origin: Origin,
        records: u32,
        bytes: u64,
    },
}

impl Done {
    /// Nothing to return.
    pub(crate) fn nothing() -> Self {
        Done(Credit::Nothing)
    }

    /// One record of `bytes` from `origin`, returned to its backlogs' [`CreditReturn`].
    pub(crate) fn credit(origin: Origin, bytes: u64) -> Self {
        Done(Credit::Held {
            origin,
            records: 1,
            bytes,
        })
    }

    /// Whether it returns any credit (the record is charged to its sender's window).
    pub(crate) fn holds_credit(&self) -> bool {
        matches!(self.0, Credit::Held { .. })
    }

    /// Adds `other` to this release when both return credit of one sender (or `other` returns
    /// nothing); else hands `other` back.
    pub(crate) fn absorb(&mut self, other: Done) -> Result<(), Done> {
        match (&mut self.0, other.0) {
            (_, Credit::Nothing) => Ok(()),
            (this @ Credit::Nothing, held) => {
                *this = held;
                Ok(())
            }
            (
                Credit::Held {
                    origin,
                    records,
                    bytes,
                },
                Credit::Held {
                    origin: origin2,
                    records: records2,
                    bytes: bytes2,
                },
            ) => {
                if *origin == origin2 {
                    if let Some(n) = records.checked_add(records2) {
                        *records = n;
                        *bytes = bytes.saturating_add(bytes2);
                        return Ok(());
                    }
                }
                Err(Done(Credit::Held {
                    origin: origin2,
                    records: records2,
                    bytes: bytes2,
                }))
            }
        }
    }

    /// Returns the credit to `to` (ignored when it is gone: its node shut down).
    fn run(self, to: &Weak<dyn CreditReturn>) {
        if let Credit::Held {
            origin,
            records,
            bytes,
        } = self.0
            && let Some(to) = to.upgrade()
        {
            to.return_credit(origin, records, bytes);
        }
    }
}

/// The credit of records that entered their lane, returned to `to` by [`Released::flush`].
/// The refill flushes before it stops; returning it on drop covers an unwinding refill (those
/// records did enter their lane).
struct Released<'a> {
    to: &'a Weak<dyn CreditReturn>,
    held: Option<Done>,
}

impl<'a> Released<'a> {
    fn new(to: &'a Weak<dyn CreditReturn>) -> Self {
        Released { to, held: None }
    }

    fn add(&mut self, done: Done) {
        match &mut self.held {
            None => self.held = Some(done),
            Some(acc) => {
                if let Err(other) = acc.absorb(done) {
                    if let Some(prev) = self.held.replace(other) {
                        prev.run(self.to);
                    }
                }
            }
        }
    }

    fn flush(&mut self) {
        if let Some(done) = self.held.take() {
            done.run(self.to);
        }
    }
}

impl Drop for Released<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Counters of a `Backlogs` (monotonic, except `waiting_now`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BacklogStats {
    /// Records that waited in a backlog for their lane (instead of entering it at once).
    pub waited: u64,
    /// Backlogs opened (a target's lane was found full with nothing waiting for it yet).
    pub opened: u64,
    /// Records refused because their target's backlog was at its limit.
    pub refused: u64,
    /// Records waiting now, over all targets.
    pub waiting_now: u64,
}

/// How a record was submitted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// Entered its lane at once (`done` was not kept: nothing to release).
    Now,
    /// Waits in its target's backlog; `done` runs once it left it.
    Queued,
}

/// How long one receive pass of a mesh I/O thread may spend running records inline
/// ([`Inline::IfIdle`]) before it hands the rest of the pass to the lanes: a sans-IO
/// meter over the runtime's [`Clock`] (the budget check of EG-9, a cycle-counter read on the
/// system clock). The pass's time is counted from its first inline record, so a pass of cheap
/// records stays inline and a slow handler cannot keep the thread from its sockets for more
/// than the budget plus that one handler. Once the budget is spent the rest of the pass reads
/// no clock (a monotonic clock's elapsed time only grows). A zero budget never runs anything
/// inline.
#[derive(Debug)]
pub(crate) struct InlineBudget {
    budget: std::time::Duration,
    pass: PassBudget,
}

/// Where the current receive pass stands with its inline budget.
#[derive(Debug)]
enum PassBudget {
    /// No record of this pass asked yet.
    Fresh,
    /// Running inline since its first record.
    Running(BudgetStart),
    /// Spent: the rest of the pass goes through the lanes.
    Spent,
}

impl InlineBudget {
    /// A meter of `budget` per pass.
    pub(crate) fn new(budget: std::time::Duration) -> Self {
        InlineBudget {
            budget,
            pass: PassBudget::Fresh,
        }
    }

    /// How the next record of this pass may run, read from `clock`, and the cycle reading the
    /// check took for it ([`Clock::stamp`]; [`CycleStamp::NONE`] when it read none): the
    /// submitter may hand it to the record's own checks at the same place (its admission's
    /// lease standing, `OwnerGate::standing_at`), one counter read less per record.
    pub(crate) fn poll_mode(&mut self, clock: &dyn Clock) -> (Inline<'static>, CycleStamp) {
        if self.budget.is_zero() {
            return (Inline::No, CycleStamp::NONE);
        }
        match &self.pass {
            PassBudget::Fresh => {
                self.pass = PassBudget::Running(clock.budget_start());
                (Inline::IfIdle, CycleStamp::NONE)
            }
            PassBudget::Running(start) => {
                let at = clock.stamp();
                if clock.budget_spent_at(start, self.budget, at) {
                    self.pass = PassBudget::Spent;
                    (Inline::No, at)
                } else {
                    (Inline::IfIdle, at)
                }
            }
            PassBudget::Spent => (Inline::No, CycleStamp::NONE),
        }
    }

    /// The receive pass ended: the next one starts with the whole budget.
    pub(crate) fn handle_pass_end(&mut self) {
        self.pass = PassBudget::Fresh;
    }
}

/// How a submitter that must never wait hands a record in.
pub(crate) struct Intake<'a, R> {
    /// Makes the hook that returns the sender's credit once a record that had to wait in a
    /// backlog entered its lane; `None`: nothing to return (the record is then refused over the
    /// caller's held limit instead of waiting without a bound).
    pub(crate) release: Option<R>,
    /// Whether an idle lane may run it on the submitting thread.
    pub(crate) mode: Inline<'a>,
    /// The submitter's cycle reading for this record, taken just before it was handed in (its
    /// pass's budget check, [`InlineBudget::poll_mode`]), or [`CycleStamp::NONE`]: the
    /// record's admission asks its lease standing at it.
    pub(crate) at: CycleStamp,
}

/// Records waiting for one target, in order.
type Queue = VecDeque<(PendingSubmit, Done)>;

/// Spare queue buffers a [`Backlogs`] keeps: for one backlog its queue, the records its refill
/// handed back, and the refill's run, and one more.
const SPARE_BUFFERS: usize = 4;

/// The capacity, in records, a spare queue buffer keeps at most: a client's default receive
/// window (4,096 records), which bounds what one session's backlog holds. Smaller, every
/// episode of a flooding client grew its buffers again from this size (reallocated and copied:
/// about 65 instructions per relayed packet at its session owner, and fresh pages).
const SPARE_CAPACITY: usize = 4096;

/// What waits for one target: the records its refiller has not taken yet (the ones it handed
/// back first), and how many it took and has not submitted yet (they still count as waiting,
/// [`Backlogs::queued`]).
struct Waiting<K> {
    /// Records a refiller took and handed back when their lane was full: they go first.
    front: Queue,
    /// Records queued behind.
    queue: Queue,
    /// Records of the run a refiller is submitting now.
    taken: Arc<AtomicUsize>,
    /// A refiller is at work (one at a time: the FIFO).
    refilling: bool,
    /// A turn of the lane ended with room while the refiller was at work: it tries again
    /// before it stops.
    again: bool,
    /// What this backlog arms on a full lane.
    waiter: Arc<Refill<K>>,
}

/// The backlogs of one kind of target (actors of a node, sessions of a node), keyed by `K`.
pub(crate) struct Backlogs<K> {
    /// Where the credit of records that left a backlog goes back (held weakly: the node owns
    /// its backlogs), once for all of them: a waiting record carries only its sender and bytes.
    credit: Weak<dyn CreditReturn>,
    /// Targets with a backlog: zero on the fast path, which then skips the map.
    open: AtomicUsize,
    map: Mutex<SeededMap<K, Waiting<K>>>,
    /// Empty queue buffers of ended backlog episodes, kept for the next ones (at most
    /// [`SPARE_BUFFERS`], each at most [`SPARE_CAPACITY`] records): a flood that opens a
    /// backlog again and again does not grow its buffers from nothing each time.
    spare: Mutex<Vec<Queue>>,
    waited: AtomicU64,
    opened: AtomicU64,
    refused: AtomicU64,
    waiting_now: AtomicU64,
}

impl<K> std::fmt::Debug for Backlogs<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backlogs")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<K> Backlogs<K> {
    /// No backlog yet; the credit of records that waited goes back to `credit`.
    pub(crate) fn new(credit: Weak<dyn CreditReturn>) -> Self {
        Backlogs {
            credit,
            open: AtomicUsize::new(0),
            map: Mutex::new(SeededMap::default()),
            spare: Mutex::new(Vec::new()),
            waited: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            waiting_now: AtomicU64::new(0),
        }
    }
}

impl<K> Backlogs<K> {
    /// An empty queue buffer, a spare one if there is one.
    fn buffer(&self) -> Queue {
        lock(&self.spare).pop().unwrap_or_default()
    }

    /// Keeps the empty buffer `q` for a later backlog (within the bounds).
    fn keep(&self, mut q: Queue) {
        debug_assert!(q.is_empty());
        if q.capacity() == 0 {
            return;
        }
        let mut spare = lock(&self.spare);
        if spare.len() < SPARE_BUFFERS {
            q.shrink_to(SPARE_CAPACITY);
            spare.push(q);
        }
    }

    /// The counters.
    pub(crate) fn stats(&self) -> BacklogStats {
        BacklogStats {
            waited: self.waited.load(Ordering::Relaxed),
            opened: self.opened.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            waiting_now: self.waiting_now.load(Ordering::Relaxed),
        }
    }

    /// Returns the credit `done` holds to where this backlogs' credit goes (for a record that
    /// waited elsewhere, in a [`WaitQueues`], with the same owner).
    pub(crate) fn release(&self, done: Done) {
        done.run(&self.credit);
    }

    /// Counts a record the caller refused over its limit.
    pub(crate) fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Backlogs<K> {
    /// Records waiting for `key`.
    pub(crate) fn queued(&self, key: &K) -> usize {
        if self.open.load(Ordering::Acquire) == 0 {
            return 0;
        }
        lock(&self.map).get(key).map_or(0, |w| {
            w.front.len() + w.queue.len() + w.taken.load(Ordering::Relaxed)
        })
    }

    /// Submits `pending` for `key` without waiting: into its lane at once when nothing waits
    /// for `key` and the lane has space, else behind what waits (refilled into the lane when a
    /// turn of the lane ends with room, [`Backlogs::refill`]). A queued record keeps `done()`
    /// (made only then) and runs it once it left the backlog. A lane that refuses for good
    /// (ended, shut down) drops the record and returns the error.
    pub(crate) fn submit(
        self: &Arc<Self>,
        key: &K,
        pending: impl Submission,
        done: impl FnOnce() -> Done,
        mode: Inline<'_>,
    ) -> Result<Admitted, RuntimeError> {
        if self.open.load(Ordering::Acquire) != 0 {
            let mut map = lock(&self.map);
            if let Some(w) = map.get_mut(key) {
                w.queue.push_back((pending.into_pending(), done()));
                self.waited.fetch_add(1, Ordering::Relaxed);
                self.waiting_now.fetch_add(1, Ordering::Relaxed);
                drop(map);
                if let Inline::Held(run) = mode {
                    // What waits here must not wait for a right kept for its lane (released
                    // without the map's lock: the release may refill this backlog).
                    run.release();
                }
                return Ok(Admitted::Queued);
            }
        }
        // Nothing waits for `key` in a backlog (an open one is kept until its refiller took its
        // last record into the lane): an idle lane may run it here, else it enters the lane if
        // it has room (one core lock for both).
        let pending = match pending.offer(mode) {
            Offered::Taken => return Ok(Admitted::Now),
            Offered::Refused(e) => return Err(e),
            Offered::Full(p) => p,
        };
        let lane = {
            let mut map = lock(&self.map);
            self.waited.fetch_add(1, Ordering::Relaxed);
            self.waiting_now.fetch_add(1, Ordering::Relaxed);
            if let Some(w) = map.get_mut(key) {
                // Another submitter opened it meanwhile: its refiller, or the waiter armed on
                // the full lane, takes this record too.
                w.queue.push_back((pending, done()));
                return Ok(Admitted::Queued);
            }
            // A new backlog episode; this submitter is its refiller until it armed a waiter on
            // the full lane and found the lane still full after arming.
            let waiter = Arc::new(Refill {
                backlogs: Arc::downgrade(self),
                key: key.clone(),
                ended: AtomicBool::new(false),
            });
            let lane = pending.lane().clone();
            lane.wait_for_space(waiter.clone());
            let mut w = Waiting {
                front: Queue::new(),
                queue: self.buffer(),
                taken: Arc::default(),
                refilling: true,
                again: false,
                waiter,
            };
            w.queue.push_back((pending, done()));
            map.insert(key.clone(), w);
            self.open.fetch_add(1, Ordering::AcqRel);
            self.opened.fetch_add(1, Ordering::Relaxed);
            lane
        };
        // Armed before this retry: a turn that frees room after it finds the waiter armed.
        self.refill_owned(key, Some(lane));
        Ok(Admitted::Queued)
    }

    /// Takes everything waiting for `key` out of its backlog, in order, unrun (a relocation
    /// captures a sealed actor's work: its lane's records first, then these). `first` runs
    /// under the backlog's lock, before the records are taken, when no refiller is at work for
    /// `key`: what it takes from the lane is older than every record still waiting here, and
    /// no record moves from here into the lane meanwhile. `None`, with `first` not run, while a
    /// refiller is at work (it stops once the sealed lane is full or the backlog empty: try
    /// again). The records' senders get their credit back (they left the backlog); the
    /// backlog episode ends (its waiter is disarmed), so a later record for `key` is offered
    /// to its lane directly.
    pub(crate) fn take_all<T>(
        &self,
        key: &K,
        first: impl FnOnce() -> T,
    ) -> Option<(T, Vec<PendingSubmit>)> {
        let mut map = lock(&self.map);
        if map.get(key).is_some_and(|w| w.refilling) {
            return None;
        }
        let taken = first();
        let Some(w) = map.remove(key) else {
            return Some((taken, Vec::new()));
        };
        w.waiter.ended.store(true, Ordering::Relaxed);
        self.open.fetch_sub(1, Ordering::AcqRel);
        drop(map);
        let Waiting {
            mut front,
            mut queue,
            ..
        } = w;
        let mut out = Vec::with_capacity(front.len() + queue.len());
        let mut released = Released::new(&self.credit);
        for (pending, done) in front.drain(..).chain(queue.drain(..)) {
            out.push(pending);
            released.add(done);
        }
        released.flush();
        self.waiting_now
            .fetch_sub(out.len() as u64, Ordering::Relaxed);
        self.keep(front);
        self.keep(queue);
        Some((taken, out))
    }

    /// A turn of a lane that `key`'s records wait for ended with room (its armed [`Refill`]):
    /// moves them into their lane in order, on this thread. One refiller at a time per key (the
    /// FIFO): a call while another refills only tells it to look again before it stops.
    fn refill(self: &Arc<Self>, key: &K) {
        {
            let mut map = lock(&self.map);
            let Some(w) = map.get_mut(key) else {
                // a waiter of an ended episode
                return;
            };
            if w.refilling {
                w.again = true;
                return;
            }
            w.refilling = true;
        }
        self.refill_owned(key, None);
    }

    /// The refiller of `key` (its entry's `refilling` is set by the caller): submits what waits,
    /// in order, without waiting. It takes a run of records under the map's lock (they still
    /// count as waiting, later records queue behind them) and submits it without the lock. A
    /// record the lane refuses as full goes back to the front with the rest of its run, and the
    /// refiller stops only once it armed a waiter on that lane ([`LaneHandle::wait_for_space`])
    /// *before* a try that found the lane full, and no turn told it of room since (`again`):
    /// the next turn of the lane that ends with room refills it then. Empty, the entry leaves
    /// the map under the map's lock, so a record submitted after that goes to its lane
    /// directly, behind everything that waited. The credit of the records that entered the lane
    /// goes back per sender and run ([`Released`]) before the refiller stops.
    /// `armed_on`: the lane the entry's waiter is armed on, not told since.
    fn refill_owned(self: &Arc<Self>, key: &K, mut armed_on: Option<Arc<LaneHandle>>) {
        // The empty buffer a run is swapped in for: no allocation per run.
        let mut run = self.buffer();
        let mut released = Released::new(&self.credit);
        let mut map = lock(&self.map);
        loop {
            let w = map.get_mut(key).expect("refilling backlog");
            if std::mem::take(&mut w.again) {
                // A turn took the armed waiter: this try sees the room it freed.
                armed_on = None;
            }
            if w.front.is_empty() {
                if w.queue.is_empty() {
                    let w = map.remove(key).expect("refilling backlog");
                    w.waiter.ended.store(true, Ordering::Relaxed);
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    drop(map);
                    self.keep(w.queue);
                    self.keep(w.front);
                    self.keep(run);
                    released.flush();
                    return;
                }
                std::mem::swap(&mut w.queue, &mut run);
            } else {
                std::mem::swap(&mut w.front, &mut run);
            }
            w.taken.store(run.len(), Ordering::Relaxed);
            let taken = w.taken.clone();
            drop(map);
            let mut stuck = None;
            // Records of this run that left the backlog: counted off `waiting_now` once per run
            // (the submitters count it up per record: one shared line less per record).
            let mut left = 0;
            while let Some((pending, done)) = run.pop_front() {
                let submitted = match pending.retry() {
                    Ok(()) => Ok(()),
                    Err(TrySubmitError::Full(p)) => {
                        stuck = Some((p, done));
                        break;
                    }
                    Err(TrySubmitError::Refused(e)) => Err(e),
                };
                if let Err(e) = submitted {
                    // Dropped unrun (its request, if any, was answered by the drop).
                    tracing::debug!(error = %e, "a waiting record was refused by its lane");
                }
                // Left the backlog: no longer counted as waiting for the target.
                taken.fetch_sub(1, Ordering::Relaxed);
                left += 1;
                released.add(done);
            }
            self.waiting_now.fetch_sub(left, Ordering::Relaxed);
            // The run's credit goes back now, not only when the refiller stops: a refiller that
            // keeps finding records does not keep their senders' windows charged meanwhile.
            released.flush();
            map = lock(&self.map);
            let Some((pending, done)) = stuck else {
                continue;
            };
            let lane = pending.lane().clone();
            run.push_front((pending, done));
            let w = map.get_mut(key).expect("refilling backlog");
            // Back at the front, in order (before the records queued meanwhile).
            debug_assert!(w.front.is_empty());
            std::mem::swap(&mut w.front, &mut run);
            w.taken.store(0, Ordering::Relaxed);
            if std::mem::take(&mut w.again) {
                armed_on = None;
                continue;
            }
            if !armed_on.as_ref().is_some_and(|a| Arc::ptr_eq(a, &lane)) {
                lane.wait_for_space(w.waiter.clone());
                armed_on = Some(lane);
                // Try once more after arming: room freed before the arming is seen now.
                continue;
            }
            w.refilling = false;
            drop(map);
            self.keep(run);
            released.flush();
            return;
        }
    }
}

/// The waiter a backlog arms on the full lane its first record waits for: the turn that ends
/// with room on that lane refills it ([`Backlogs::refill`]).
struct Refill<K> {
    backlogs: Weak<Backlogs<K>>,
    key: K,
    /// Its backlog episode ended (set under the map's lock as the entry leaves it): a lane
    /// arming a later waiter drops this one ([`SpaceWaiter::is_live`]).
    ended: AtomicBool,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> SpaceWaiter for Refill<K> {
    fn on_space(&self) {
        if let Some(b) = self.backlogs.upgrade() {
            b.refill(&self.key);
        }
    }

    fn is_live(&self) -> bool {
        !self.ended.load(Ordering::Relaxed)
    }
}

/// Per-key FIFOs of async work that could not finish at once: a push waiting for a client's
/// credit, a send waiting for a peer's window. The same rule as [`Backlogs`]: what waits for
/// one key holds up only that key (later work for it queues behind, in order); here one drain
/// task per key runs the waiting work in order (the work is async: it waits for credit), and a key's queue is bounded by the caller's limit
/// (refused over it, counted).
pub(crate) struct WaitQueues<K> {
    /// Keys with a queue: zero on the fast path, which then skips the map.
    open: AtomicUsize,
    map: Mutex<SeededMap<K, VecDeque<BoxFuture<()>>>>,
    waited: AtomicU64,
    opened: AtomicU64,
    refused: AtomicU64,
    waiting_now: AtomicU64,
}

impl<K> Default for WaitQueues<K> {
    fn default() -> Self {
        WaitQueues {
            open: AtomicUsize::new(0),
            map: Mutex::new(SeededMap::default()),
            waited: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            waiting_now: AtomicU64::new(0),
        }
    }
}

impl<K> std::fmt::Debug for WaitQueues<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitQueues")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<K> WaitQueues<K> {
    /// The counters.
    pub(crate) fn stats(&self) -> BacklogStats {
        BacklogStats {
            waited: self.waited.load(Ordering::Relaxed),
            opened: self.opened.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            waiting_now: self.waiting_now.load(Ordering::Relaxed),
        }
    }
}

/// Why [`WaitQueues::run`] did not take the work.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct QueueFull;

impl<K: Hash + Eq + Clone + Send + 'static> WaitQueues<K> {
    /// Runs work for `key` without waiting. `attempt(true)` tries it now (only when nothing
    /// waits for `key`) and returns `None` when it is done, or the rest to wait for;
    /// `attempt(false)` returns the whole work as a future, untried (it queues behind what
    /// waits). A waiting future runs on a drain task on `rt`, after those before it. Over
    /// `limit` waiting for `key`, the work is not taken: [`QueueFull`], counted.
    pub(crate) fn run(
        self: &Arc<Self>,
        key: &K,
        limit: usize,
        attempt: impl FnOnce(bool) -> Option<BoxFuture<()>>,
        rt: &tokio::runtime::Handle,
    ) -> Result<Admitted, QueueFull> {
        // Nothing waits for any key (the common case): try at once without the map. What one
        // submitter queued is seen by its own next call (`open` is raised under the lock
        // before it returns), so its work never overtakes its own waiting work.
        let (mut map, f) = if self.open.load(Ordering::Acquire) == 0 {
            let Some(f) = attempt(true) else {
                return Ok(Admitted::Now);
            };
            let mut map = lock(&self.map);
            if let Some(q) = map.get_mut(key) {
                // Another submitter opened it meanwhile: behind what waits.
                q.push_back(f);
                self.waited.fetch_add(1, Ordering::Relaxed);
                self.waiting_now.fetch_add(1, Ordering::Relaxed);
                return Ok(Admitted::Queued);
            }
            (map, f)
        } else {
            // The attempt runs under the lock: nothing for `key` can be queued meanwhile.
            let mut map = lock(&self.map);
            if let Some(q) = map.get_mut(key) {
                if q.len() >= limit {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(QueueFull);
                }
                if let Some(f) = attempt(false) {
                    q.push_back(f);
                    self.waited.fetch_add(1, Ordering::Relaxed);
                    self.waiting_now.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(Admitted::Queued);
            }
            let Some(f) = attempt(true) else {
                return Ok(Admitted::Now);
            };
            (map, f)
        };
        let mut q = VecDeque::new();
        q.push_back(f);
        map.insert(key.clone(), q);
        self.open.fetch_add(1, Ordering::AcqRel);
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.waited.fetch_add(1, Ordering::Relaxed);
        self.waiting_now.fetch_add(1, Ordering::Relaxed);
        drop(map);
        let this = self.clone();
        let key = key.clone();
        rt.spawn(async move { this.drain(key).await });
        Ok(Admitted::Queued)
    }

    async fn drain(self: Arc<Self>, key: K) {
        loop {
            let next = {
                let mut map = lock(&self.map);
                let q = map.get_mut(&key).expect("open queue");
                match q.pop_front() {
                    Some(f) => f,
                    None => {
                        map.remove(&key);
                        self.open.fetch_sub(1, Ordering::AcqRel);
                        return;
                    }
                }
            };
            next.await;
            self.waiting_now.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, Weak};
    use std::time::Duration;

    use std::sync::atomic::{AtomicUsize, Ordering};

    use zlink_mesh::Origin;
    use zlink_wire::SessionRid;

    use super::{
        Backlogs, CreditReturn, Done, Inline, InlineBudget, Queue, Released, SPARE_BUFFERS,
        SPARE_CAPACITY,
    };
    use crate::runtime::{Clock, ManualClock};

    #[derive(Default)]
    struct Returned(Mutex<Vec<(Origin, u32, u64)>>);

    impl CreditReturn for Returned {
        fn return_credit(&self, origin: Origin, records: u32, bytes: u64) {
            self.0.lock().unwrap().push((origin, records, bytes));
        }
    }

    impl Returned {
        fn take(&self) -> Vec<(Origin, u32, u64)> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    fn client(n: u64) -> Origin {
        Origin::Client {
            session: SessionRid::new(n),
        }
    }

    // What a `Backlogs` keeps between backlog episodes is bounded: at most `SPARE_BUFFERS`
    // empty buffers, each shrunk to `SPARE_CAPACITY` records, however large a flood grew them.
    #[test]
    fn spare_queue_buffers_are_bounded_in_number_and_size() {
        let b = Backlogs::<u64>::new(Weak::<Returned>::new());
        for _ in 0..SPARE_BUFFERS + 3 {
            b.keep(Queue::with_capacity(16 * SPARE_CAPACITY));
        }
        b.keep(Queue::new()); // nothing to keep
        let spare = b.spare.lock().unwrap();
        assert_eq!(spare.len(), SPARE_BUFFERS);
        assert!(
            spare
                .iter()
                .all(|q| q.is_empty() && q.capacity() < 2 * SPARE_CAPACITY),
            "{:?}",
            spare.iter().map(Queue::capacity).collect::<Vec<_>>()
        );
        drop(spare);
        // handed out again (capacity kept)
        assert!(b.buffer().capacity() >= SPARE_CAPACITY);
    }

    #[test]
    fn a_run_of_one_senders_records_returns_its_credit_once_and_never_early() {
        let sink = Arc::new(Returned::default());
        let to: Weak<dyn CreditReturn> = Arc::downgrade(&sink) as Weak<Returned>;
        let mut run = Released::new(&to);
        run.add(Done::credit(client(1), 10));
        run.add(Done::nothing());
        run.add(Done::credit(client(1), 20));
        assert!(
            sink.take().is_empty(),
            "nothing returned before the run ends"
        );
        // another sender: the first sender's run goes back, the new one starts
        run.add(Done::credit(client(2), 5));
        assert_eq!(sink.take(), vec![(client(1), 2, 30)]);
        run.add(Done::credit(client(2), 7));
        assert!(sink.take().is_empty());
        run.flush();
        assert_eq!(sink.take(), vec![(client(2), 2, 12)]);
        run.flush();
        assert!(sink.take().is_empty(), "returned once");
        // dropped with credit of records that entered their lane (a refill unwound, or dropped at
        // shutdown): returned
        let mut run = Released::new(&to);
        run.add(Done::credit(client(3), 1));
        drop(run);
        assert_eq!(sink.take(), vec![(client(3), 1, 1)]);
        // a record that never left its backlog returns nothing
        drop(Done::credit(client(4), 1));
        assert!(sink.take().is_empty());
        // the node gone: ignored
        drop(sink);
        let mut run = Released::new(&to);
        run.add(Done::credit(client(5), 1));
        run.flush();
    }

    /// A runtime (kept alive by the caller) and a lane of one application place, so a second
    /// record finds it full.
    #[cfg(not(feature = "loom"))]
    fn one_place_lane() -> (crate::runtime::Runtime, Arc<crate::runtime::LaneHandle>) {
        use crate::runtime::{LaneLimits, Runtime, RuntimeConfig, test_lane_in};
        let rt = Runtime::new(RuntimeConfig {
            limits: LaneLimits {
                application_items: 1,
                ..LaneLimits::default()
            },
            application_workers: 1,
            infrastructure_workers: 1,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let lane = test_lane_in(&rt);
        (rt, lane)
    }

    // The refill returns a waiting record's credit only once the record entered its lane, and
    // once: with the lane full nothing comes back; each record that enters comes back exactly
    // once, in runs per sender. No task drains the backlog: the lane's turns refill it.
    #[cfg(not(feature = "loom"))]
    #[test]
    fn the_refill_returns_credit_only_once_records_entered_their_lane() {
        use crate::runtime::{Handled, Job, LaneClass, LaneHandle, PendingSubmit, TurnEnv};
        use std::time::Instant;

        let (_rt, lane) = one_place_lane();
        let ran = Arc::new(AtomicUsize::new(0));
        let (open_tx, open_rx) = tokio::sync::oneshot::channel::<()>();
        // The first record holds the lane's only place until `open_tx` fires.
        let first = PendingSubmit::new(
            &lane,
            LaneClass::Application,
            1,
            Job::with_lane(move |_env: TurnEnv, _lane: &LaneHandle| {
                Handled::later(async move {
                    let _ = open_rx.await;
                    Ok(())
                })
            }),
        );
        assert!(first.retry().is_ok());
        let sink = Arc::new(Returned::default());
        let to: Weak<dyn CreditReturn> = Arc::downgrade(&sink) as Weak<Returned>;
        let backlogs = Arc::new(Backlogs::<u64>::new(to));
        const N: usize = 5;
        for _ in 0..N {
            let ran = ran.clone();
            let work = Job::with_lane(move |_env: TurnEnv, _lane: &LaneHandle| {
                ran.fetch_add(1, Ordering::SeqCst);
                Handled::ok(())
            });
            let p = PendingSubmit::new(&lane, LaneClass::Application, 1, work);
            let admitted = backlogs
                .submit(&7, p, || Done::credit(client(1), 10), Inline::No)
                .unwrap();
            assert!(matches!(admitted, super::Admitted::Queued));
        }
        // All wait (the lane is full; a waiter is armed on it): nothing entered, nothing
        // returned.
        let deadline = Instant::now() + Duration::from_secs(20);
        assert_eq!(backlogs.queued(&7), N);
        assert!(
            sink.take().is_empty(),
            "credit returned before its record entered"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        open_tx.send(()).unwrap();
        let mut back = Vec::new();
        while back.iter().map(|(_, n, _)| *n as usize).sum::<usize>() < N {
            assert!(Instant::now() < deadline, "credit not returned: {back:?}");
            back.extend(sink.take());
            // With one place, record k enters once record k - 1 ran: credit of k records back
            // means at least k - 1 ran (credit returned when a record is taken from the backlog
            // would come back for all of them at once).
            let returned: usize = back.iter().map(|(_, n, _)| *n as usize).sum();
            assert!(
                returned <= ran.load(Ordering::SeqCst) + 1,
                "credit of {returned} records back before they entered"
            );
            std::thread::yield_now();
        }
        assert!(back.iter().all(|(o, _, _)| *o == client(1)));
        assert_eq!(back.iter().map(|(_, _, b)| *b).sum::<u64>(), 10 * N as u64);
        // Each returned record had entered its lane (a record's credit comes back after its
        // submission succeeded; with one place, after the one before it ran).
        while ran.load(Ordering::SeqCst) < N {
            assert!(Instant::now() < deadline, "records did not run");
            std::thread::yield_now();
        }
        assert!(sink.take().is_empty(), "returned once");
        lane.remove();
    }

    // A lane removed while records wait for its space tells the backlog's waiter: the records
    // are dropped unrun (as refused submissions), their credit goes back (they left the
    // backlog), and the backlog closes — nothing stays held for a lane that is gone.
    #[cfg(not(feature = "loom"))]
    #[test]
    fn a_removed_lane_releases_what_waited_for_it() {
        use crate::runtime::{Handled, Job, LaneClass, LaneHandle, PendingSubmit, TurnEnv};
        use std::time::Instant;

        let (_rt, lane) = one_place_lane();
        let (open_tx, open_rx) = tokio::sync::oneshot::channel::<()>();
        let first = PendingSubmit::new(
            &lane,
            LaneClass::Application,
            1,
            Job::with_lane(move |_env: TurnEnv, _lane: &LaneHandle| {
                Handled::later(async move {
                    let _ = open_rx.await;
                    Ok(())
                })
            }),
        );
        assert!(first.retry().is_ok());
        let sink = Arc::new(Returned::default());
        let to: Weak<dyn CreditReturn> = Arc::downgrade(&sink) as Weak<Returned>;
        let backlogs = Arc::new(Backlogs::<u64>::new(to));
        let ran = Arc::new(AtomicUsize::new(0));
        const N: usize = 3;
        for _ in 0..N {
            let ran = ran.clone();
            let work = Job::with_lane(move |_env: TurnEnv, _lane: &LaneHandle| {
                ran.fetch_add(1, Ordering::SeqCst);
                Handled::ok(())
            });
            let p = PendingSubmit::new(&lane, LaneClass::Application, 1, work);
            let admitted = backlogs
                .submit(&7, p, || Done::credit(client(1), 10), Inline::No)
                .unwrap();
            assert!(matches!(admitted, super::Admitted::Queued));
        }
        assert_eq!(backlogs.queued(&7), N);
        lane.remove();
        let deadline = Instant::now() + Duration::from_secs(20);
        while backlogs.queued(&7) != 0 {
            assert!(Instant::now() < deadline, "records kept for a removed lane");
            std::thread::yield_now();
        }
        // every record's credit back once (in one release per run the refill took)
        let back = sink.take();
        assert!(back.iter().all(|(o, _, _)| *o == client(1)), "{back:?}");
        let records: u32 = back.iter().map(|r| r.1).sum();
        let bytes: u64 = back.iter().map(|r| r.2).sum();
        assert_eq!((records, bytes), (N as u32, 10 * N as u64), "{back:?}");
        assert_eq!(backlogs.stats().waiting_now, 0);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing ran");
        drop(open_tx);
    }

    #[test]
    fn a_pass_runs_inline_until_its_budget_is_spent_and_the_next_pass_starts_over() {
        let clock = ManualClock::new();
        let mut b = InlineBudget::new(Duration::from_millis(1));
        // the pass's time counts from its first inline record
        assert_eq!(b.poll_mode(&clock).0, Inline::IfIdle);
        clock.advance(Duration::from_micros(999));
        assert_eq!(b.poll_mode(&clock).0, Inline::IfIdle);
        clock.advance(Duration::from_micros(1));
        assert_eq!(
            b.poll_mode(&clock).0,
            Inline::No,
            "spent at exactly the budget"
        );
        assert_eq!(
            b.poll_mode(&clock).0,
            Inline::No,
            "for the rest of the pass"
        );
        b.handle_pass_end();
        assert_eq!(b.poll_mode(&clock).0, Inline::IfIdle);
        clock.advance(Duration::from_micros(500));
        assert_eq!(b.poll_mode(&clock).0, Inline::IfIdle);
    }

    /// A [`ManualClock`] that counts its readings.
    #[derive(Debug)]
    struct Counting(ManualClock, AtomicUsize);
    impl Clock for Counting {
        fn now(&self) -> std::time::Instant {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.now()
        }
        fn sleep_until(&self, deadline: std::time::Instant) -> crate::clock::Sleep {
            self.0.sleep_until(deadline)
        }
        fn wall(&self) -> std::time::SystemTime {
            self.0.wall()
        }
    }

    // Once a pass's budget is spent, its later records read no clock (a cycle counter and the
    // monotonic clock on the system clock, each record of a long pass otherwise).
    #[test]
    fn a_spent_pass_reads_no_clock() {
        let clock = Counting(ManualClock::new(), AtomicUsize::new(0));
        let reads = || clock.1.load(Ordering::Relaxed);
        let mut b = InlineBudget::new(Duration::from_millis(1));
        assert_eq!(b.poll_mode(&clock).0, Inline::IfIdle);
        clock.0.advance(Duration::from_millis(1));
        assert_eq!(b.poll_mode(&clock).0, Inline::No);
        let spent_at = reads();
        for _ in 0..10 {
            assert_eq!(b.poll_mode(&clock).0, Inline::No);
        }
        assert_eq!(reads(), spent_at, "no clock read once spent");
        b.handle_pass_end();
        assert_eq!(b.poll_mode(&clock).0, Inline::IfIdle);
        assert_eq!(reads(), spent_at + 1, "the next pass starts over");
    }

    #[test]
    fn a_zero_budget_never_runs_inline() {
        let clock = ManualClock::new();
        let mut b = InlineBudget::new(Duration::ZERO);
        assert_eq!(b.poll_mode(&clock).0, Inline::No);
        b.handle_pass_end();
        assert_eq!(b.poll_mode(&clock).0, Inline::No);
    }
}
