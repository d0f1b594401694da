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

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};

use super::config::LaneLimits;
use super::core::GateCore;

const HELD: u64 = 1;

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
pub struct GateShared<W, L> {
    /// The right.
    pub word: GateWord,
    /// Lanes and ready set (the lock protects enqueuers and the turn-boundary decision).
    pub core: Mutex<GateCore<W, L>>,
}

impl<W, L: Clone> GateShared<W, L> {
    /// A free gate with no lanes.
    pub fn new(limits: LaneLimits) -> Self {
        GateShared {
            word: GateWord::new(),
            core: Mutex::new(GateCore::new(limits)),
        }
    }

    /// Holder side: give the right back, then re-check the ready set. Returns a new right (and
    /// the caller keeps draining) if work became ready and nobody else took the gate.
    #[must_use]
    pub fn release_and_recheck(&self) -> Option<Fence> {
        self.word.release();
        if self.core.lock().unwrap().has_ready() {
            self.word.try_acquire()
        } else {
            None
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! `RUSTFLAGS="--cfg loom" cargo test -p zlink --lib --release loom` (see `scripts/loom`).
    use super::*;
    use crate::runtime::core::{LaneClass, LaneId, Turn};
    use crate::sync::Arc;
    use crate::sync::atomic::AtomicBool;

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
}
