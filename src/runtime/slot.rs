//! A lane's slot: the record running now, its after-work, barriers and yield signal, and how its
//! end is reported ([`Slot::reply_at_end`]).

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::error::{HandlerError, InvalidOperation, RuntimeError};
use super::gate::Fence;
use super::{barrier::*, handled::*};

/// Post-processing registered with `after_turn` (EG-8).
pub(crate) type AfterWork = Box<dyn FnOnce() + Send>;

/// What a record registered in its scope, taken when the scope closes ([`Slot::end`]).
pub(super) struct Ended {
    pub(super) after: Vec<AfterWork>,
    pub(super) barriers: Vec<Barrier>,
    /// Replies held until the barriers are settled; run last.
    pub(super) replies: Vec<AfterWork>,
}

#[derive(Default)]
pub(crate) struct SlotExt {
    pub(super) barriers: Vec<(u64, Barrier)>,
    pub(super) after: Vec<(u64, AfterWork)>,
    /// Replies held until the record ends ([`Slot::reply_at_end`]).
    pub(super) replies: Vec<(u64, AfterWork)>,
    /// The future of the yielded record waiting for its resume turn, with its invocation.
    pub(super) parked: Option<(u64, HandlerFuture)>,
}

/// A handler's future, as the drain polls it.
pub(crate) type HandlerFuture = BoxFuture<Result<(), HandlerError>>;

/// Per-lane state of the record in flight (a lane has at most one, EG-3.1), reused across
/// records; stale contexts are detected by the invocation number (EG-6.1).
pub(crate) struct Slot {
    pub(super) invocation: AtomicU64,
    pub(super) holding: AtomicBool,
    /// [`SIGNAL_NONE`] or the invocation that asked to yield (tagged: EG-6.1).
    pub(super) signal: AtomicU64,
    pub(super) fence: AtomicU64,
    pub(super) turn: AtomicU64,
    pub(super) extras: AtomicBool,
    /// Registrations and the parked future; allocated by the lane's first registration or
    /// Yield (most lanes never make one: an idle actor does not carry it).
    pub(super) ext: Mutex<Option<Box<SlotExt>>>,
}

impl Slot {
    pub(super) fn new() -> Slot {
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

    pub(super) fn begin(&self, invocation: u64, fence: Fence, turn: u64) {
        self.fence.store(fence.0, Ordering::Relaxed);
        self.turn.store(turn, Ordering::Relaxed);
        self.holding.store(true, Ordering::Release);
        self.invocation.store(invocation, Ordering::Release);
    }

    /// Close the registration scope; return the record's after-work, barriers and held replies
    /// (`None`: it registered none, or the scope was already closed).
    #[inline]
    pub(super) fn end(&self, invocation: u64) -> Option<Ended> {
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
    pub(super) fn take_ended(&self, invocation: u64) -> Option<Ended> {
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
    pub(super) fn take_yield(&self, invocation: u64) -> bool {
        if self.signal.load(Ordering::SeqCst) == SIGNAL_NONE {
            return false;
        }
        self.signal.swap(SIGNAL_NONE, Ordering::SeqCst) == invocation
    }

    pub(super) fn park(&self, invocation: u64, fut: HandlerFuture) {
        self.ext.lock().unwrap().get_or_insert_default().parked = Some((invocation, fut));
    }

    /// Take the parked future (of `invocation`, or whichever is parked).
    pub(super) fn take_parked(&self, invocation: Option<u64>) -> Option<(u64, HandlerFuture)> {
        let mut ext = self.ext.lock().unwrap();
        let ext = ext.as_mut()?;
        match (&ext.parked, invocation) {
            (Some((i, _)), Some(want)) if *i != want => None,
            _ => ext.parked.take(),
        }
    }

    /// The parked record `invocation` gets the right back in a new turn.
    pub(super) fn resume(&self, invocation: u64, fence: Fence, turn: u64) -> Option<HandlerFuture> {
        let (_, fut) = self.take_parked(Some(invocation))?;
        self.fence.store(fence.0, Ordering::Relaxed);
        self.turn.store(turn, Ordering::Relaxed);
        self.holding.store(true, Ordering::SeqCst);
        Some(fut)
    }
}
