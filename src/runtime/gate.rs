//! The execution gate: the right to run now (EG-6, EG-11), on one atomic word.
//!
//! [`GateWord`] layout (one `AtomicU64`):
//!
//! | bits | meaning |
//! |---|---|
//! | 0 | `HELD`: some driver holds the processing right |
//! | 1..=63 | fencing counter: number of releases so far |
//!
//! * acquire = one `fetch_or(HELD)` (EG-11: uncontended acquisition is a single atomic
//!   operation); it succeeded iff `HELD` was clear; the fencing number of the right is the
//!   counter read by that same operation;
//! * release = one `fetch_add(1)`: clears `HELD` and increments the counter by carry, so every
//!   acquisition gets a fencing number never used before (EG-6.1).
//!
//! [`GateShared`] pairs the word with the scheduling core behind a mutex that protects the
//! enqueuers (EG-11: there is no separate lock per actor queue; the gate's single core holds all
//! of its lanes). Protocol, modelled by the loom test in this file:
//! * submitter: lock, admit, unlock, then `try_acquire_after_submit` (a load, then `try_acquire`
//!   only if the right looks free); on success the submitter must drain;
//! * holder: loop `poll_turn` under the lock; when nothing is ready, `release`, then re-check
//!   `has_ready` and `try_acquire` again. Either the submitter's acquire sees the released word,
//!   or the holder's re-check sees the admitted work: no work is stranded.
//! * inline request ([`GateShared::try_start_inline`], [`GateShared::finish_inline`]): lock,
//!   check that nothing waits, take the right *under the lock*, unlock, run one record; then lock,
//!   finish it, release the right and re-check the ready set under that same lock (taking the
//!   right again for a new drain if work is ready). Submitters admit under the lock and try the
//!   right after unlocking, so they find it either held (the finish sees their work) or free.
//!   A held inline run ([`GateShared::continue_inline`]) keeps the right from one inline record
//!   to the next of its lane: under one lock the first ends and the next starts only if nothing
//!   waits; else the right is released and the ready set re-checked under that lock, as a finish
//!   does. Work admitted while the right is kept between two records finds it held and is seen
//!   by that step (or by the finish that ends the run).

use std::collections::VecDeque;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Mutex, MutexGuard};

use super::config::LaneLimits;
use super::core::{Continued, GateCore, Queued, Turn};

const HELD: u64 = 1;

/// Capacity (records) of a batch buffer kept from one batch to the next while the holder goes on
/// (a bigger one is given back): the gate's batch slot and the holder's spare keep their buffers,
/// so a lane whose whole FIFO a batch takes gets a buffer of the size it had, not one it must
/// grow again record by record. Twice the largest batch (`BATCH_EXTRA`, a default lane): a FIFO
/// of up to 1,024 records may sit in a buffer grown past it.
const BATCH_BUFFER_KEEP: usize = 2048;

/// Capacity (records) the batch slot keeps once its holder has gone: an idle gate keeps no
/// burst-sized buffer ([`GateShared::trim_idle_batch`]).
const IDLE_BATCH_KEEP: usize = 8;

/// A fencing number: identifies one processing right of one gate; never reused (EG-6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub u64);

/// The gate's atomic word.
#[derive(Debug)]
pub struct GateWord(AtomicU64);

impl GateWord {
    /// A free gate whose next right has fencing number 0.
    pub fn new() -> Self {
        GateWord(AtomicU64::new(0))
    }

    /// Try to take the right with one atomic operation.
    #[must_use]
    pub fn try_acquire(&self) -> Option<Fence> {
        let prev = self.0.fetch_or(HELD, Ordering::AcqRel);
        if prev & HELD == 0 {
            Some(Fence(prev >> 1))
        } else {
            None
        }
    }

    /// Submitter side: like [`GateWord::try_acquire`], but a right seen held is left alone
    /// without a read-modify-write (while a drain streams, the submitting core does not take the
    /// word's cache line exclusive on every submission). Sound under the protocol below: the
    /// holder releases *before* its re-check under the core lock, and the submitter loads *after*
    /// its admission under that lock, so either the load sees the release or the re-check sees
    /// the admitted work.
    #[must_use]
    pub fn try_acquire_after_submit(&self) -> Option<Fence> {
        if self.is_held() {
            return None;
        }
        self.try_acquire()
    }

    /// Give the right back (the caller must hold it).
    pub fn release(&self) {
        let prev = self.0.fetch_add(1, Ordering::AcqRel);
        debug_assert!(prev & HELD == HELD, "release of a gate that is not held");
    }

    /// Whether some driver holds the right.
    pub fn is_held(&self) -> bool {
        self.0.load(Ordering::Acquire) & HELD == HELD
    }
}

impl Default for GateWord {
    fn default() -> Self {
        Self::new()
    }
}

/// A gate: its word and the scheduling core of everything waiting behind it.
///
/// The core is reached through [`GateShared::lock`] (quiesced: no batch outstanding, the
/// one-by-one state of the core) by every input except the two hot paths that take
/// [`GateShared::lock_unquiesced`]: application submissions ([`GateShared::after_submit`] ends
/// the batch when the core says the submission must be seen at the next turn boundary) and the
/// right's holder ([`GateShared::poll_turn_batch`], [`GateShared::batch_next`]).
pub struct GateShared<W, L> {
    /// The right.
    pub word: GateWord,
    /// Lanes and ready set (the lock protects enqueuers and the turn-boundary decision).
    core: Mutex<GateCore<W, L>>,
    /// The records of the outstanding batch not yet started (lock order: `core`, then `batch`;
    /// the holder takes `batch` alone, once per record, and never runs work while holding it).
    batch: Mutex<BatchSlot<W>>,
}

/// The holder's progress through an outstanding batch ([`GateCore::poll_turn_batch`]).
pub struct BatchSlot<W> {
    /// Cleared when the batch is ended (by the holder or by an input that must not be overtaken).
    active: bool,
    /// Records not started, FIFO order, with their reserved bytes.
    items: VecDeque<Queued<W>>,
    /// Extra records started so far.
    started: usize,
    /// Reserved bytes of the record running now.
    current_bytes: u64,
    /// Records that reached their terminal, reservations not yet returned to the core: count,
    /// bytes.
    released: (usize, u64),
}

impl<W> BatchSlot<W> {
    fn new() -> Self {
        BatchSlot {
            active: false,
            items: VecDeque::new(),
            started: 0,
            current_bytes: 0,
            released: (0, 0),
        }
    }

    /// The record running now reached its terminal: the next record of the batch, if the batch
    /// goes on (it is still active and not exhausted).
    fn next(&mut self) -> Option<W> {
        if !self.active {
            return None;
        }
        let q = self.items.pop_front()?;
        self.released.0 += 1;
        self.released.1 += self.current_bytes;
        self.started += 1;
        self.current_bytes = q.bytes;
        Some(q.item)
    }
}

impl<W, L: Clone> GateShared<W, L> {
    /// A free gate with no lanes.
    pub fn new(limits: impl Into<std::sync::Arc<LaneLimits>>) -> Self {
        GateShared {
            word: GateWord::new(),
            core: Mutex::new(GateCore::new(limits)),
            batch: Mutex::new(BatchSlot::new()),
        }
    }

    /// Lock the core in its one-by-one state: an outstanding batch is ended first (its records
    /// not started go back to the front of their FIFO, [`GateCore::handle_batch_end`]).
    pub fn lock(&self) -> MutexGuard<'_, GateCore<W, L>> {
        let mut core = self.core.lock().unwrap();
        self.end_batch(&mut core);
        core
    }

    /// Lock the core leaving an outstanding batch alone: only for application submissions
    /// (followed by [`GateShared::after_submit`]) and for the right's holder.
    pub fn lock_unquiesced(&self) -> MutexGuard<'_, GateCore<W, L>> {
        self.core.lock().unwrap()
    }

    /// End the outstanding batch, if any.
    #[inline]
    pub fn end_batch(&self, core: &mut GateCore<W, L>) {
        if core.batch_active() {
            self.end_outstanding_batch(core);
        }
    }

    /// [`GateShared::end_batch`] when a batch is outstanding (out of line: every quiesced lock
    /// checks, few find one).
    #[inline(never)]
    fn end_outstanding_batch(&self, core: &mut GateCore<W, L>) {
        let mut slot = self.batch.lock().unwrap();
        let slot = &mut *slot;
        slot.active = false;
        let released = std::mem::take(&mut slot.released);
        core.handle_batch_end(
            slot.started,
            slot.current_bytes,
            released,
            slot.items.drain(..),
        );
        if slot.items.capacity() > BATCH_BUFFER_KEEP {
            slot.items = VecDeque::new();
        }
    }

    /// The holder is gone (or going): give back a big buffer the batch slot kept between
    /// batches, so an idle gate keeps none (`IDLE_BATCH_KEEP`). A batch outstanding meanwhile
    /// (another holder's) is left alone; its holder trims when it goes.
    pub fn trim_idle_batch(&self) {
        let mut slot = self.batch.lock().unwrap();
        if !slot.active && slot.items.is_empty() && slot.items.capacity() > IDLE_BATCH_KEEP {
            slot.items = VecDeque::new();
        }
    }

    /// Return the reservations of the batch's records that reached their terminal (EG-7.2), so
    /// an admission decision is exact; the batch goes on.
    pub fn release_batch_progress(&self, core: &mut GateCore<W, L>) {
        if !core.batch_active() {
            return;
        }
        let released = std::mem::take(&mut self.batch.lock().unwrap().released);
        core.handle_batch_released(released.0, released.1);
    }

    /// After an admitted submission (still under the lock): end the batch if the submission must
    /// be seen at the next turn boundary ([`GateCore::batch_preempted`]).
    pub fn after_submit(&self, core: &mut GateCore<W, L>) {
        if core.batch_preempted() {
            self.end_batch(core);
        }
    }

    /// Holder side: [`GateCore::poll_turn_batch`] with up to `max_extra` extra records. `spare`
    /// is an empty buffer the holder keeps between calls (its capacity is reused).
    pub fn poll_turn_batch(
        &self,
        core: &mut GateCore<W, L>,
        max_extra: usize,
        spare: &mut VecDeque<Queued<W>>,
    ) -> Option<Turn<W, L>> {
        // the lane is handed `spare`'s buffer when the batch takes its whole FIFO (up to
        // `BATCH_BUFFER_KEEP`; the lane gives a big one back when it goes idle, `GateCore`'s trim)
        if spare.capacity() > BATCH_BUFFER_KEEP {
            *spare = VecDeque::new();
        }
        let turn = core.poll_turn_batch(max_extra, spare);
        if let Some((_, first_bytes)) = core.batch_first() {
            let mut slot = self.batch.lock().unwrap();
            debug_assert!(slot.items.is_empty() && !slot.active);
            std::mem::swap(&mut slot.items, spare);
            slot.active = true;
            slot.started = 0;
            slot.current_bytes = first_bytes;
            slot.released = (0, 0);
        }
        turn
    }

    /// Holder side, at the terminal of the record running now: the next record of the batch,
    /// or `None` (no batch, exhausted, or ended by an input; the holder then goes back to the
    /// core, ending the batch if it is still outstanding).
    pub fn batch_next(&self) -> Option<W> {
        self.batch.lock().unwrap().next()
    }

    /// Holder side: give the right back, then re-check the ready set. Returns a new right (and
    /// the caller keeps draining) if work became ready and nobody else took the gate.
    #[must_use]
    pub fn release_and_recheck(&self) -> Option<Fence> {
        self.word.release();
        if self.lock_unquiesced().has_ready() {
            self.word.try_acquire()
        } else {
            None
        }
    }
}

impl<W, L: Clone> GateShared<W, L> {
    /// Inline request, start (see `docs/RUNTIME.md`, "Inline ask"): under the core lock, if an
    /// application record of `lane` is admissible inline ([`GateCore::inline_admissible`]: the
    /// ready set empty, the lane idle, ...) and the right is free, take the right and start the
    /// record ([`GateCore::handle_inline_start`]). Returns the right's fencing number and the
    /// record's invocation; the caller runs the record and ends it with
    /// [`GateShared::finish_inline`] (or hands it to a drain, keeping the right).
    ///
    /// Taking the right under the lock is what makes it exact: no record can be admitted
    /// between the check and the acquisition, and every party that admits work afterwards
    /// (submitter, resume, Join result) tries the right only after its admission, so it either
    /// finds the right held (and the holder's finish sees its work) or free again.
    #[must_use]
    pub fn try_start_inline(
        &self,
        lane: super::core::LaneId,
        payload_len: usize,
    ) -> Option<(Fence, u64)> {
        // one check of admissibility, then the right, then the start, all under the one lock
        // (`GateCore::handle_inline_start_with`)
        self.core
            .lock()
            .unwrap()
            .handle_inline_start_with(lane, payload_len, || self.word.try_acquire_after_submit())
    }

    /// Inline request, terminal: return the record's reservation and claim
    /// ([`GateCore::handle_turn_finished`]) and give the right back — all under one lock, so the
    /// re-check of the ready set is the release's own: if work is ready (admitted while the
    /// record ran), the right is taken again and returned for a new drain. Also returns whether
    /// the lane has room (wake waiting senders).
    #[must_use]
    pub fn finish_inline(
        &self,
        lane: super::core::LaneId,
        invocation: u64,
    ) -> (bool, Option<Fence>) {
        let mut core = self.core.lock().unwrap();
        // a batch is never outstanding here: only a drain takes one, and it holds the right
        self.end_batch(&mut core);
        let room = core.handle_turn_finished(lane, invocation).unwrap_or(false);
        (room, self.release_locked(&core))
    }

    /// Held inline run, the next record of `lane` (see [`GateCore::handle_inline_continue`]):
    /// the caller holds the right after the inline record `finished` reached its terminal.
    /// Under one lock: that record ends and, if nothing waits and the record fits, the next one
    /// starts under the same right (`Started`); else (`Refused`) the right is given back and the
    /// ready set re-checked under that same lock, exactly as [`GateShared::finish_inline`] does
    /// (work admitted meanwhile gets the right again, returned for a new drain).
    #[must_use]
    pub fn continue_inline(
        &self,
        lane: super::core::LaneId,
        finished: u64,
        payload_len: usize,
    ) -> (Continued, Option<Fence>) {
        let mut core = self.core.lock().unwrap();
        // a batch is never outstanding here: only a drain takes one, and it holds the right
        self.end_batch(&mut core);
        let c = core.handle_inline_continue(lane, finished, payload_len);
        if let Continued::Started { .. } = c {
            return (c, None);
        }
        (c, self.release_locked(&core))
    }

    /// Gives the right back with the core locked (`core`), so the re-check of the ready set is
    /// the release's own: if work is ready, the right is taken again and returned for a new
    /// drain.
    fn release_locked(&self, core: &GateCore<W, L>) -> Option<Fence> {
        self.word.release();
        if core.has_ready() {
            self.word.try_acquire()
        } else {
            None
        }
    }
}

/// Told that a lane may have room again: a submitter that must never wait and keeps what did not
/// fit (a backlog) arms one on the full lane ([`SpaceSlot::arm`]) instead of parking a task on
/// the lane's space notification. The runtime knows nothing else about it.
pub trait SpaceWaiter: Send + Sync {
    /// The lane it was armed on had a turn end with room, or was removed, or its gate ended:
    /// called once per take of the armed waiters (arming an armed waiter again does not add a
    /// call), on the thread that ended the turn (a lane worker holding the gate's right, or an
    /// inline submitter) or that removed the lane or ended the gate (e.g. the shutdown task),
    /// with no lock of the runtime held. It may submit to that lane.
    fn on_space(&self);

    /// Whether telling it can still matter: a waiter whose wait ended (its backlog emptied
    /// without it being told) answers `false`, and arming drops it, so what stays armed on a
    /// lane is bounded by the waiters still waiting for it.
    fn is_live(&self) -> bool {
        true
    }
}

/// The space waiters armed on one lane. Protocol (modelled by `loom_space_refill_strands_nothing`
/// below): the waiter side finds the lane full under the core lock, arms, then tries the lane
/// again (a submission, under the core lock); the turn side frees the lane's room under the core
/// lock, then takes what is armed ([`SpaceSlot::take`]) after unlocking. Either the waiter's
/// retry comes after the freeing (it sees the room), or the turn side's take comes after the
/// arming (the arming precedes the retry, which precedes the freeing in the lock's order): no
/// waiter is left armed on a lane whose room it did not see.
pub struct SpaceSlot<H> {
    armed: AtomicBool,
    waiters: Mutex<Vec<H>>,
}

impl<H> SpaceSlot<H> {
    /// Nothing armed.
    pub fn new() -> Self {
        SpaceSlot {
            armed: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// Arms `waiter` (once: a waiter `same` as one armed already is not added again), dropping
    /// the armed waiters `live` says no longer wait.
    pub fn arm(&self, waiter: H, same: impl Fn(&H, &H) -> bool, live: impl Fn(&H) -> bool) {
        let mut w = self.waiters.lock().unwrap();
        w.retain(|x| live(x));
        if !w.iter().any(|x| same(x, &waiter)) {
            w.push(waiter);
        }
        self.armed.store(true, Ordering::Release);
    }

    /// Whether a waiter is armed (one load; the turn side reads it after its unlock).
    #[inline]
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Takes every armed waiter (they are called by the caller, outside every lock).
    pub fn take(&self) -> Vec<H> {
        let mut w = self.waiters.lock().unwrap();
        self.armed.store(false, Ordering::Release);
        std::mem::take(&mut *w)
    }
}

impl<H> Default for SpaceSlot<H> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::runtime::core::LaneClass;

    /// One batch of `n` records of `lane`, run to its end by the holder.
    fn batch(
        g: &GateShared<u32, ()>,
        lane: super::super::core::LaneId,
        n: u32,
        spare: &mut VecDeque<Queued<u32>>,
    ) {
        let mut core = g.lock_unquiesced();
        for i in 0..n {
            core.handle_submit(lane, LaneClass::Application, 0, i)
                .unwrap();
        }
        let Some(Turn::Run { invocation, .. }) = g.poll_turn_batch(&mut core, 1024, spare) else {
            panic!("no turn");
        };
        drop(core);
        let mut last = invocation;
        while g.batch_next().is_some() {
            last += 1;
        }
        let mut core = g.lock_unquiesced();
        g.end_batch(&mut core);
        core.handle_turn_finished(lane, last).unwrap();
    }

    // A batch that takes a lane's whole FIFO hands its buffers on from batch to batch while
    // the holder goes on (the lane is not made to grow a buffer again per batch), and the
    // holder gives the kept buffer back when it goes: an idle gate keeps no burst-sized buffer.
    #[test]
    fn batch_buffers_go_round_while_the_holder_stays_and_back_when_it_goes() {
        let g: GateShared<u32, ()> = GateShared::new(LaneLimits::default());
        let lane = g.lock().add_lane(()).unwrap();
        let mut spare = VecDeque::new();
        batch(&g, lane, 100, &mut spare);
        assert!(
            g.batch.lock().unwrap().items.capacity() >= 99,
            "the taken buffer was freed"
        );
        batch(&g, lane, 100, &mut spare);
        // the first batch's buffer came back to the holder, to be handed to the lane next
        assert!(spare.capacity() >= 99, "the kept buffer was not handed on");
        g.trim_idle_batch();
        assert!(g.batch.lock().unwrap().items.capacity() <= IDLE_BATCH_KEEP);
    }
}

#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    //! `RUSTFLAGS="--cfg loom" cargo test -p zlink --lib --release loom` (see `scripts/loom`).
    use super::*;
    use crate::runtime::core::{LaneClass, LaneId, Turn};
    use crate::sync::atomic::AtomicBool;
    use crate::sync::{Arc, Mutex};

    struct Probe {
        gate: GateShared<u32, ()>,
        in_turn: AtomicBool,
        ran: AtomicU64,
        last_fence: AtomicU64,
    }

    fn probe() -> Arc<Probe> {
        Arc::new(Probe {
            gate: GateShared::new(LaneLimits::default()),
            in_turn: AtomicBool::new(false),
            ran: AtomicU64::new(0),
            last_fence: AtomicU64::new(0),
        })
    }

    /// Drain while holding the right (runs new records and resume records alike).
    fn drain(p: &Probe, mut fence: Fence) {
        loop {
            // fencing numbers strictly increase: never reused (EG-6.1)
            let last = p.last_fence.swap(fence.0 + 1, Ordering::SeqCst);
            assert!(fence.0 + 1 > last, "fence reused");
            loop {
                let turn = p.gate.core.lock().unwrap().poll_turn();
                let (lane, invocation) = match turn {
                    Some(Turn::Run {
                        lane, invocation, ..
                    })
                    | Some(Turn::Resume {
                        lane, invocation, ..
                    }) => (lane, invocation),
                    None => break,
                };
                // mutual exclusion: two turns of one gate never overlap (EG-2.6)
                assert!(!p.in_turn.swap(true, Ordering::SeqCst), "overlap");
                p.ran.fetch_add(1, Ordering::SeqCst);
                p.in_turn.store(false, Ordering::SeqCst);
                p.gate
                    .core
                    .lock()
                    .unwrap()
                    .handle_turn_finished(lane, invocation)
                    .unwrap();
            }
            match p.gate.release_and_recheck() {
                Some(f) => fence = f,
                None => return,
            }
        }
    }

    fn kick(p: &Probe) {
        if let Some(f) = p.gate.word.try_acquire_after_submit() {
            drain(p, f);
        }
    }

    fn submit(p: &Probe, lane: LaneId, v: u32) {
        p.gate
            .core
            .lock()
            .unwrap()
            .handle_submit(lane, LaneClass::Application, 0, v)
            .ok()
            .unwrap();
        kick(p);
    }

    fn assert_quiescent(p: &Probe) {
        assert!(!p.gate.word.is_held(), "right leaked");
        assert!(!p.gate.core.lock().unwrap().has_ready(), "work stranded");
    }

    // spec: EG-11, EG-6.1, EG-2.6 — gate acquire/release and the ready set: no lost work, no
    // overlap, fences never reused.
    #[test]
    fn loom_gate_no_lost_work_no_overlap() {
        loom::model(|| {
            let p = probe();
            let (a, b) = {
                let mut core = p.gate.core.lock().unwrap();
                (core.add_lane(()).unwrap(), core.add_lane(()).unwrap())
            };
            let p1 = p.clone();
            let t1 = loom::thread::spawn(move || submit(&p1, a, 1));
            let p2 = p.clone();
            let t2 = loom::thread::spawn(move || submit(&p2, b, 2));
            submit(&p, a, 3);
            t1.join().unwrap();
            t2.join().unwrap();
            assert_eq!(p.ran.load(Ordering::SeqCst), 3, "work stranded");
            assert_quiescent(&p);
        });
    }

    // spec: EG-3, EG-16.8 — a resume record appended while another thread submits and drains is
    // run exactly once and never overlaps another turn of the gate.
    #[test]
    fn loom_gate_resume_is_not_lost() {
        loom::model(|| {
            let p = probe();
            let (a, b) = {
                let mut core = p.gate.core.lock().unwrap();
                (core.add_lane(()).unwrap(), core.add_lane(()).unwrap())
            };
            // lane `a` runs one record that yields, releasing the gate but keeping its claim
            let inv = {
                let mut core = p.gate.core.lock().unwrap();
                core.handle_submit(a, LaneClass::Application, 0, 1)
                    .ok()
                    .unwrap();
                let _right = p.gate.word.try_acquire().unwrap();
                let Some(Turn::Run { invocation, .. }) = core.poll_turn() else {
                    panic!("no turn")
                };
                core.handle_yield(a, invocation).unwrap();
                invocation
            };
            assert!(p.gate.release_and_recheck().is_none());
            let p1 = p.clone();
            let t1 = loom::thread::spawn(move || submit(&p1, b, 2));
            // the awaited completion arrives: resume record, then try the gate
            p.gate.core.lock().unwrap().handle_resume(a, inv).unwrap();
            kick(&p);
            t1.join().unwrap();
            assert_eq!(p.ran.load(Ordering::SeqCst), 2);
            assert_quiescent(&p);
        });
    }

    // spec: EG-9, EG-4.1, EG-7.5, EG-1.4 — a batch taken by the holder against a concurrent seal
    // and return_pending: every record either runs or comes back, exactly once; the records that
    // ran are a FIFO prefix and the ones handed back are the rest, in FIFO order.
    #[test]
    fn loom_batch_vs_return_pending() {
        loom::model(|| {
            let p = probe();
            let a = p.gate.lock().add_lane(()).unwrap();
            for v in 1..=3 {
                p.gate
                    .lock()
                    .handle_submit(a, LaneClass::Application, 0, v)
                    .ok()
                    .unwrap();
            }
            let _right = p.gate.word.try_acquire().unwrap();
            let ran = Arc::new(Mutex::new(Vec::new()));
            let sealed = Arc::new(AtomicBool::new(false));
            let (p1, r1, s1) = (p.clone(), ran.clone(), sealed.clone());
            let holder = loom::thread::spawn(move || {
                let mut spare = std::collections::VecDeque::new();
                let mut finished = None;
                loop {
                    let turn = {
                        let mut core = p1.gate.lock_unquiesced();
                        p1.gate.end_batch(&mut core);
                        if let Some((lane, inv)) = finished.take() {
                            core.handle_turn_finished(lane, inv).unwrap();
                        }
                        p1.gate.poll_turn_batch(&mut core, 8, &mut spare)
                    };
                    let Some(Turn::Run {
                        lane,
                        invocation,
                        item,
                        ..
                    }) = turn
                    else {
                        break;
                    };
                    let (mut inv, mut item) = (invocation, item);
                    loop {
                        r1.lock().unwrap().push(item);
                        // EG-4.1: no record of the batch starts once the seal returned
                        let seal_returned = s1.load(Ordering::SeqCst);
                        match p1.gate.batch_next() {
                            Some(next) => {
                                assert!(!seal_returned, "started after the seal");
                                inv += 1;
                                item = next;
                            }
                            None => break,
                        }
                    }
                    finished = Some((lane, inv));
                }
                p1.gate.word.release();
            });
            let returned: Vec<u32> = {
                let mut core = p.gate.lock();
                core.handle_seal();
                let back = core
                    .handle_return_pending()
                    .into_iter()
                    .map(|r| r.item)
                    .collect();
                sealed.store(true, Ordering::SeqCst);
                back
            };
            holder.join().unwrap();
            let mut all = ran.lock().unwrap().clone();
            all.extend(returned);
            assert_eq!(all, [1, 2, 3], "lost, duplicated or reordered");
            let core = p.gate.lock();
            let s = core.lane_stats(a).unwrap();
            assert_eq!(s.application_reserved_items, 0, "reservation leaked");
            assert!(!s.claimed);
        });
    }

    // The park word (`park.rs`): a wake-up racing the park of a yielded record requests its
    // resume exactly once, with one or two wake-ups (EG-3, EG-16.8: the resume record is neither
    // lost nor duplicated).
    #[test]
    fn loom_park_requests_resume_once() {
        use crate::runtime::park::ParkWord;
        for wakers in 1..=2 {
            loom::model(move || {
                let w = Arc::new(ParkWord::default());
                let requests = Arc::new(AtomicU64::new(0));
                w.before_poll();
                let threads: Vec<_> = (0..wakers)
                    .map(|_| {
                        let (w, r) = (w.clone(), requests.clone());
                        loom::thread::spawn(move || {
                            if w.wake() == Some(7) {
                                r.fetch_add(1, Ordering::SeqCst);
                            }
                        })
                    })
                    .collect();
                if w.park(7) == Some(7) {
                    requests.fetch_add(1, Ordering::SeqCst);
                }
                for t in threads {
                    t.join().unwrap();
                }
                assert_eq!(requests.load(Ordering::SeqCst), 1, "resume lost or doubled");
            });
        }
    }

    // spec: EG-4.1, EG-3.1, EG-6.1 — seal and unseal while a yielded record's result arrives: the
    // record is resumed or cancelled, exactly once; the lane's next record (queued behind the
    // claim) runs exactly once after it; nothing is stranded and the right is free at the end.
    #[test]
    fn loom_seal_during_yield() {
        use crate::runtime::park::ParkWord;
        loom::model(|| {
            let p = probe();
            let a = p.gate.lock().add_lane(()).unwrap();
            // record 1 runs and yields: claim yielded, future parked
            let inv = {
                let mut core = p.gate.lock();
                core.handle_submit(a, LaneClass::Application, 0, 1)
                    .ok()
                    .unwrap();
                let _right = p.gate.word.try_acquire().unwrap();
                let Some(Turn::Run { invocation, .. }) = core.poll_turn() else {
                    panic!("no turn")
                };
                core.handle_yield(a, invocation).unwrap();
                // record 2 waits behind the claim (EG-3.1)
                core.handle_submit(a, LaneClass::Application, 0, 2)
                    .ok()
                    .unwrap();
                invocation
            };
            let word = Arc::new(ParkWord::default());
            word.before_poll();
            assert_eq!(word.park(inv), None);
            assert!(p.gate.release_and_recheck().is_none());
            let cancelled = Arc::new(AtomicU64::new(0));
            // the awaited result arrives: the wake-up requests the resume
            let (p1, w1, c1) = (p.clone(), word.clone(), cancelled.clone());
            let waker = loom::thread::spawn(move || {
                let Some(inv) = w1.wake() else { return };
                let r = p1.gate.lock().handle_resume(a, inv);
                match r {
                    Ok(()) => kick(&p1),
                    Err(crate::runtime::core::ResumeRefused::Sealed) => {
                        c1.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("resume {e:?}"),
                }
            });
            // relocation starts and is aborted
            let refused = p.gate.lock().handle_seal();
            cancelled.fetch_add(refused.len() as u64, Ordering::SeqCst);
            p.gate.lock().handle_unseal();
            kick(&p);
            waker.join().unwrap();
            let (ran, cancelled) = (
                p.ran.load(Ordering::SeqCst),
                cancelled.load(Ordering::SeqCst),
            );
            assert_eq!(ran + cancelled, 2, "ran {ran}, cancelled {cancelled}");
            assert_quiescent(&p);
            let s = p.gate.lock().lane_stats(a).unwrap();
            assert!(!s.claimed && s.application_reserved_items == 0);
        });
    }

    /// The drain's budget hand-off (`driver::drain`): finish the record, release the right, then
    /// re-check the ready set and take the right again if work is there.
    fn budget_release(p: &Probe, lane: LaneId, invocation: u64) {
        {
            let mut core = p.gate.lock_unquiesced();
            p.gate.end_batch(&mut core);
            core.handle_turn_finished(lane, invocation).unwrap();
        }
        p.gate.word.release();
        if !p.gate.lock_unquiesced().has_ready() {
            return;
        }
        if let Some(f) = p.gate.word.try_acquire() {
            drain(p, f);
        }
    }

    // spec: EG-9, EG-7.4, EG-11 — the budget hand-off against concurrent submissions to the same
    // lane and to another: no work stranded, no overlap, the right free at the end. Checked to
    // fail when the re-check after the release is removed.
    #[test]
    fn loom_budget_release_strands_nothing() {
        loom::model(|| {
            let p = probe();
            let (a, b) = {
                let mut core = p.gate.lock();
                (core.add_lane(()).unwrap(), core.add_lane(()).unwrap())
            };
            let f = p.gate.word.try_acquire().unwrap();
            let inv = {
                let mut core = p.gate.lock();
                core.handle_submit(a, LaneClass::Application, 0, 1)
                    .ok()
                    .unwrap();
                let Some(Turn::Run { invocation, .. }) = core.poll_turn() else {
                    panic!("no turn")
                };
                invocation
            };
            let _ = f;
            let p1 = p.clone();
            let t1 = loom::thread::spawn(move || submit(&p1, a, 2));
            let p2 = p.clone();
            let t2 = loom::thread::spawn(move || submit(&p2, b, 3));
            // the record ran; its handler spent the budget
            budget_release(&p, a, inv);
            t1.join().unwrap();
            t2.join().unwrap();
            assert_eq!(p.ran.load(Ordering::SeqCst), 2, "work stranded");
            assert_quiescent(&p);
        });
    }

    /// An inline request (`driver::LaneHandle::try_start_inline`): start the record in the
    /// caller's thread if the gate allows it, else submit it like any other record. Returns
    /// whether it ran inline.
    fn ask_inline(p: &Probe, lane: LaneId, v: u32) -> bool {
        let Some((fence, inv)) = p.gate.try_start_inline(lane, 0) else {
            submit(p, lane, v);
            return false;
        };
        let last = p.last_fence.swap(fence.0 + 1, Ordering::SeqCst);
        assert!(fence.0 + 1 > last, "fence reused");
        assert!(!p.in_turn.swap(true, Ordering::SeqCst), "overlap");
        p.ran.fetch_add(1, Ordering::SeqCst);
        p.in_turn.store(false, Ordering::SeqCst);
        let (_, next) = p.gate.finish_inline(lane, inv);
        if let Some(f) = next {
            drain(p, f);
        }
        true
    }

    // spec: EG-11, EG-6.1, EG-6.4, EG-2.6 — the inline acquire (under the core lock) against a
    // holder finishing its turn and releasing with its re-check, and against a concurrent
    // submission to the same lane: every record runs exactly once, turns never overlap, fences
    // are never reused, the right is free at the end. Checked to fail when `finish_inline` does
    // not re-check the ready set after its release. (That the start refuses while anything
    // waits — no overtaking — is the core's unit test `inline_start_refused_unless_nothing_waits`.)
    #[test]
    fn loom_inline_acquire_vs_release_and_submit() {
        loom::model(|| {
            let p = probe();
            let (a, b) = {
                let mut core = p.gate.lock();
                (core.add_lane(()).unwrap(), core.add_lane(()).unwrap())
            };
            // a holder runs a record of lane `b`
            let f = p.gate.word.try_acquire().unwrap();
            p.last_fence.store(f.0 + 1, Ordering::SeqCst);
            let inv = {
                let mut core = p.gate.lock();
                core.handle_submit(b, LaneClass::Application, 0, 1)
                    .ok()
                    .unwrap();
                let Some(Turn::Run { invocation, .. }) = core.poll_turn() else {
                    panic!("no turn")
                };
                invocation
            };
            let p1 = p.clone();
            let holder = loom::thread::spawn(move || {
                p1.gate
                    .lock_unquiesced()
                    .handle_turn_finished(b, inv)
                    .unwrap();
                if let Some(f) = p1.gate.release_and_recheck() {
                    drain(&p1, f);
                }
            });
            let p2 = p.clone();
            let submitter = loom::thread::spawn(move || submit(&p2, a, 2));
            ask_inline(&p, a, 3);
            holder.join().unwrap();
            submitter.join().unwrap();
            assert_eq!(p.ran.load(Ordering::SeqCst), 2, "work stranded or doubled");
            assert_quiescent(&p);
            let s = p.gate.lock().lane_stats(a).unwrap();
            assert!(!s.claimed && s.application_reserved_items == 0);
        });
    }

    /// One record runs (no overlap with any other turn of the gate).
    fn run_one(p: &Probe) {
        assert!(!p.in_turn.swap(true, Ordering::SeqCst), "overlap");
        p.ran.fetch_add(1, Ordering::SeqCst);
        p.in_turn.store(false, Ordering::SeqCst);
    }

    // spec: EG-11, EG-6.3, EG-6.1, EG-2.6 — a held inline run (the I/O thread keeps the right
    // after an inline record and continues with the next record of the lane, then releases at
    // the end of its pass) against a concurrent submission to the same lane: every record runs
    // exactly once, turns never overlap, fences are never reused, nothing is stranded, the
    // right is free at the end. With a next record too big for the lane (its continuation and
    // its admission both refused), the submission's drain comes only from the refused
    // continuation's release and re-check: checked to fail without that re-check.
    #[test]
    fn loom_held_run_vs_submit() {
        for big in [false, true] {
            loom::model(move || {
                let p = probe();
                let a = p.gate.lock().add_lane(()).unwrap();
                let len = if big {
                    LaneLimits::default().application_bytes as usize
                } else {
                    0
                };
                let p2 = p.clone();
                let submitter = loom::thread::spawn(move || submit(&p2, a, 2));
                // record 1 inline, its right kept
                let mut kept = match p.gate.try_start_inline(a, 0) {
                    Some((fence, inv)) => {
                        let last = p.last_fence.swap(fence.0 + 1, Ordering::SeqCst);
                        assert!(fence.0 + 1 > last, "fence reused");
                        run_one(&p);
                        Some(inv)
                    }
                    None => {
                        submit(&p, a, 1);
                        None
                    }
                };
                // record 3: continues under the kept right, or goes behind what waits (a big
                // one is refused)
                let third = |p: &Probe| {
                    if !big {
                        submit(p, a, 3);
                    }
                };
                match kept.map(|inv| p.gate.continue_inline(a, inv, len)) {
                    Some((Continued::Started { invocation, .. }, next)) => {
                        assert!(!big && next.is_none());
                        run_one(&p);
                        kept = Some(invocation);
                    }
                    Some((Continued::Refused { .. }, next)) => {
                        kept = None;
                        if let Some(f) = next {
                            drain(&p, f);
                        }
                        third(&p);
                    }
                    None => third(&p),
                }
                // the pass ends: the kept right is released
                if let Some(inv) = kept {
                    let (_, next) = p.gate.finish_inline(a, inv);
                    if let Some(f) = next {
                        drain(&p, f);
                    }
                }
                submitter.join().unwrap();
                let want = if big { 2 } else { 3 };
                assert_eq!(
                    p.ran.load(Ordering::SeqCst),
                    want,
                    "work stranded or doubled"
                );
                assert_quiescent(&p);
                let s = p.gate.lock().lane_stats(a).unwrap();
                assert!(!s.claimed && s.application_reserved_items == 0);
            });
        }
    }

    // spec: EG-3.1, EG-16.8, EG-11 — an inline request to an idle lane of a gate where another
    // lane's yielded record is resumed concurrently: the resume is never stranded, never
    // overlaps the inline record, and the right is free at the end.
    #[test]
    fn loom_inline_acquire_vs_resume() {
        loom::model(|| {
            let p = probe();
            let (a, b) = {
                let mut core = p.gate.lock();
                (core.add_lane(()).unwrap(), core.add_lane(()).unwrap())
            };
            // lane `b` runs a record that yields (claim kept, right released)
            let inv = {
                let mut core = p.gate.lock();
                core.handle_submit(b, LaneClass::Application, 0, 1)
                    .ok()
                    .unwrap();
                let _right = p.gate.word.try_acquire().unwrap();
                let Some(Turn::Run { invocation, .. }) = core.poll_turn() else {
                    panic!("no turn")
                };
                core.handle_yield(b, invocation).unwrap();
                invocation
            };
            assert!(p.gate.release_and_recheck().is_none());
            let p1 = p.clone();
            let waker = loom::thread::spawn(move || {
                p1.gate.lock().handle_resume(b, inv).unwrap();
                kick(&p1);
            });
            ask_inline(&p, a, 2);
            waker.join().unwrap();
            // the inline record and the resume turn of `b`
            assert_eq!(p.ran.load(Ordering::SeqCst), 2, "work stranded or doubled");
            assert_quiescent(&p);
        });
    }

    // spec: EG-3, EG-3.1, EG-16.8, EG-11 — an inline record that yields at its first poll
    // (`LaneHandle::park_inline`: the claim kept, the right released with the holder's re-check)
    // against its resume arriving concurrently and a submission to another lane: the resume runs
    // exactly once, after the park, never overlapping another turn; nothing is stranded.
    #[test]
    fn loom_inline_yield_vs_resume_and_submit() {
        loom::model(|| {
            let p = probe();
            let (a, b) = {
                let mut core = p.gate.lock();
                (core.add_lane(()).unwrap(), core.add_lane(()).unwrap())
            };
            let (fence, inv) = p.gate.try_start_inline(a, 0).expect("idle gate");
            p.last_fence.store(fence.0 + 1, Ordering::SeqCst);
            let p1 = p.clone();
            let submitter = loom::thread::spawn(move || submit(&p1, b, 1));
            // the record yields: the claim stays, then the right goes with the re-check
            p.gate.lock().handle_yield(a, inv).unwrap();
            let p2 = p.clone();
            let waker = loom::thread::spawn(move || {
                p2.gate.lock().handle_resume(a, inv).unwrap();
                kick(&p2);
            });
            if let Some(f) = p.gate.release_and_recheck() {
                drain(&p, f);
            }
            submitter.join().unwrap();
            waker.join().unwrap();
            // the submitted record and the resume turn
            assert_eq!(p.ran.load(Ordering::SeqCst), 2, "work stranded or doubled");
            assert_quiescent(&p);
            let s = p.gate.lock().lane_stats(a).unwrap();
            assert!(!s.claimed && s.application_reserved_items == 0);
        });
    }

    /// A backlog in front of a one-place lane, as `crate::backlog::Backlogs` keeps one target's
    /// records (one record per run here): its refiller protocol against the lane's turns.
    struct Refilled {
        gate: GateShared<u32, ()>,
        lane: LaneId,
        space: SpaceSlot<()>,
        backlog: Mutex<Waiting>,
        entered: Mutex<Vec<u32>>,
        ran: Mutex<Vec<u32>>,
    }

    #[derive(Default)]
    struct Waiting {
        open: bool,
        queue: std::collections::VecDeque<u32>,
        refilling: bool,
        again: bool,
        queued: Vec<u32>,
    }

    /// Admits `v`; a free right is taken and drained on this thread.
    fn enter(m: &Refilled, v: u32) -> Result<(), u32> {
        {
            let mut core = m.gate.lock();
            core.handle_submit(m.lane, LaneClass::Application, 0, v)
                .map_err(|r| r.item)?;
            // in admission order
            m.entered.lock().unwrap().push(v);
        }
        if let Some(f) = m.gate.word.try_acquire_after_submit() {
            drain_refilled(m, f);
        }
        Ok(())
    }

    /// The lane worker (`driver::drain`): after a turn that ends with room, the armed waiters
    /// are told on this thread, outside the core lock, before the next lane decision.
    fn drain_refilled(m: &Refilled, _fence: Fence) {
        loop {
            loop {
                let turn = m.gate.lock().poll_turn();
                let Some(Turn::Run {
                    lane,
                    invocation,
                    item,
                    ..
                }) = turn
                else {
                    break;
                };
                m.ran.lock().unwrap().push(item);
                let room = m
                    .gate
                    .lock()
                    .handle_turn_finished(lane, invocation)
                    .unwrap();
                if room && m.space.is_armed() {
                    for () in m.space.take() {
                        refill(m);
                    }
                }
            }
            match m.gate.release_and_recheck() {
                Some(_) => continue,
                None => return,
            }
        }
    }

    /// `Backlogs::submit`: behind what waits, else into the lane, else a new backlog whose
    /// refiller this submitter is (armed before its retry).
    fn submit_refilled(m: &Refilled, v: u32) {
        {
            let mut b = m.backlog.lock().unwrap();
            if b.open {
                b.queue.push_back(v);
                b.queued.push(v);
                return;
            }
        }
        let Err(v) = enter(m, v) else { return };
        {
            let mut b = m.backlog.lock().unwrap();
            b.queue.push_back(v);
            b.queued.push(v);
            if b.open {
                return;
            }
            b.open = true;
            b.refilling = true;
            m.space.arm((), |_, _| true, |_| true);
        }
        refill_owned(m, true);
    }

    /// The armed waiter told of room (`Backlogs::refill`).
    fn refill(m: &Refilled) {
        {
            let mut b = m.backlog.lock().unwrap();
            if !b.open {
                return;
            }
            if b.refilling {
                b.again = true;
                return;
            }
            b.refilling = true;
        }
        refill_owned(m, false);
    }

    /// `Backlogs::refill_owned`.
    fn refill_owned(m: &Refilled, mut armed: bool) {
        loop {
            let v = {
                let mut b = m.backlog.lock().unwrap();
                if std::mem::take(&mut b.again) {
                    armed = false;
                }
                let Some(v) = b.queue.pop_front() else {
                    b.open = false;
                    b.refilling = false;
                    return;
                };
                v
            };
            let Err(v) = enter(m, v) else { continue };
            let mut b = m.backlog.lock().unwrap();
            b.queue.push_front(v);
            if std::mem::take(&mut b.again) {
                armed = false;
                continue;
            }
            if !armed {
                m.space.arm((), |_, _| true, |_| true);
                armed = true;
                continue;
            }
            b.refilling = false;
            return;
        }
    }

    // The backlog's refill on the thread that ends a turn (`crate::backlog`): a submitter finds
    // the one-place lane full and opens a backlog (armed, then retried) while the lane's last
    // turn ends and tells what is armed, and a second submitter queues behind or enters:
    // every record enters its lane exactly once, those that waited in the order they queued,
    // nothing is stranded in the backlog or the lane, the right is free at the end. Checked to
    // fail when the refiller stops without its retry after arming, when the turn side reads
    // the armed waiters before it frees the room, and when a turn that finds the refiller at
    // work does not make it look again.
    #[test]
    fn loom_space_refill_strands_nothing() {
        loom::model(|| {
            let gate = GateShared::new(LaneLimits {
                application_items: 1,
                ..LaneLimits::default()
            });
            let lane = gate.lock().add_lane(()).unwrap();
            let m = Arc::new(Refilled {
                gate,
                lane,
                space: SpaceSlot::new(),
                backlog: Mutex::new(Waiting::default()),
                entered: Mutex::new(Vec::new()),
                ran: Mutex::new(Vec::new()),
            });
            // record 1 holds the lane's place and runs on the worker
            let fence = {
                m.gate
                    .lock()
                    .handle_submit(lane, LaneClass::Application, 0, 1)
                    .ok()
                    .unwrap();
                m.entered.lock().unwrap().push(1);
                m.gate.word.try_acquire().unwrap()
            };
            let m1 = m.clone();
            let worker = loom::thread::spawn(move || drain_refilled(&m1, fence));
            let m2 = m.clone();
            let second = loom::thread::spawn(move || submit_refilled(&m2, 3));
            submit_refilled(&m, 2);
            worker.join().unwrap();
            second.join().unwrap();
            let entered = m.entered.lock().unwrap().clone();
            let mut sorted = entered.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [1, 2, 3], "stranded or entered twice: {entered:?}");
            assert_eq!(*m.ran.lock().unwrap(), entered, "ran out of lane order");
            let b = m.backlog.lock().unwrap();
            assert!(
                !b.open && b.queue.is_empty() && !b.refilling,
                "backlog left"
            );
            let waited: Vec<u32> = entered
                .iter()
                .copied()
                .filter(|v| b.queued.contains(v))
                .collect();
            assert_eq!(waited, b.queued, "a waiting record was overtaken");
            assert!(!m.gate.word.is_held(), "right leaked");
        });
    }
}
